#!/usr/bin/env python3
"""The footer memory bound from the command line (docs/format.md §7).

Usage: worst_footers.py CAPSTORE WORKDIR

Writes packs whose footers are 64 MiB of the shapes that cost jansson the most
per byte (empty objects, empty arrays, small integers, nested empty arrays,
short keyed objects), each with a valid trailer, CRC-32 and SHA-256, and runs
`capstore pack verify` and `capstore pack info` on each under a 640 MiB
address-space limit (without the bound, jansson's tree of such a footer takes
about 5 GB). Each must answer footer_complex, naming the limit, promptly; and
a pack with the same layout but a small footer of such values must be refused
on its fields instead (the bound applies only where it must).
"""

import hashlib
import os
import resource
import struct
import subprocess
import sys
import time
import zlib

HEAD = ('{"created_at_ns":0,"format":"dmi-pack","major_version":1,"minor_version":0,'
        '"pack_id":"00000000-0000-0000-0000-000000000000","records":[')
SHAPES = {"empty_objects": "{}", "empty_arrays": "[]", "ints": "0",
          "nested": "[[[[]]]]", "keyed": '{"a":[]}'}
LIMIT_BYTES = 640 << 20


def pack_with_footer(path, footer):
    header = b"DMIPACK\0" + struct.pack("<HHI", 1, 0, 64) + bytes(16) + struct.pack("<QI", 0, 0) + bytes(20)
    body = header + footer
    trailer = (b"DMIFTR\0\0" + struct.pack("<HHQQI", 1, 0, 64, len(footer), zlib.crc32(footer))
               + hashlib.sha256(body).digest())
    with open(path, "wb") as handle:
        handle.write(body + trailer)


def footer_of(element, size):
    count = max(1, (size - len(HEAD) - 2) // (len(element) + 1))
    return (HEAD + ",".join([element] * count) + "]}").encode()


def limit():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def run(capstore, *args):
    started = time.monotonic()
    done = subprocess.run([capstore, *args], capture_output=True, text=True, preexec_fn=limit, timeout=120)
    return done, time.monotonic() - started


def main():
    capstore, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures = 0
    for name, element in SHAPES.items():
        path = os.path.join(work, name + ".dmi-pack")
        pack_with_footer(path, footer_of(element, 64 * 1024 * 1024 - 64))
        for command in ("verify", "info"):
            done, seconds = run(capstore, "pack", command, path)
            ok = (done.returncode == 1 and "footer_complex" in done.stderr
                  and "over the limit of 20 x its length" in done.stderr)
            print(f"{name}: pack {command}: exit {done.returncode} in {seconds:.1f} s: {done.stderr.strip()[:160]}")
            if not ok:
                print(f"FAIL: {name}: pack {command} did not answer footer_complex under a 640 MiB limit")
                failures += 1
        small = os.path.join(work, name + ".small.dmi-pack")
        pack_with_footer(small, footer_of(element, 4096))
        done, _ = run(capstore, "pack", "verify", small)
        if done.returncode != 1 or "footer_complex" in done.stderr or "no_memory" in done.stderr:
            print(f"FAIL: {name}: a 4 KiB footer of the same values: {done.stderr.strip()[:160]}")
            failures += 1
        os.remove(path)
    print("worst footers:", "ok" if failures == 0 else f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

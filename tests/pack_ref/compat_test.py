#!/usr/bin/env python3
"""Compatibility test: the C writer and the Python reference writer agree.

Usage: compat_test.py CAPSTORE WORKDIR

For every spec in specs/ (and a generated 5,000-record one) it requires:
  - `capstore pack build` output byte-identical to the reference writer's;
  - `capstore pack verify` to accept the reference pack;
  - `capstore pack info` to show the footer the pack holds, as canonical;
  - `capstore pack key` to give the reference's object key and metadata.
Then: golden packs still match the reference writer, both writers refuse every
spec in specs_bad/, the ten-rank golden pack (records mixing ranks, tenants
and sessions, as DMI writes them) is named by its first record and rebuilt
byte for byte from what `capstore pack info` shows, and single-byte
corruptions are refused by kind.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dmi_pack_ref  # noqa: E402
import gen_many  # noqa: E402

FAILURES = []
CHECKS = 0


def check(condition, message):
    global CHECKS
    CHECKS += 1
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message, file=sys.stderr)


def run(args):
    return subprocess.run(args, capture_output=True, text=True, check=False)


def ref_build(spec_path, out_path):
    with open(spec_path, "rb") as handle:
        spec = json.load(handle)
    data = dmi_pack_ref.build_pack(spec, os.path.dirname(os.path.abspath(spec_path)))
    with open(out_path, "wb") as handle:
        handle.write(data)
    return spec, data


def ref_key(spec, data, prefix):
    return {"content_type": dmi_pack_ref.CONTENT_TYPE,
            "key": dmi_pack_ref.object_key(spec, prefix),
            "metadata": dmi_pack_ref.object_metadata(spec, data)}


def check_spec(capstore, spec_path, work):
    name = os.path.splitext(os.path.basename(spec_path))[0]
    ref_path = os.path.join(work, name + ".ref.dmi-pack")
    c_path = os.path.join(work, name + ".c.dmi-pack")
    spec, data = ref_build(spec_path, ref_path)
    built = run([capstore, "pack", "build", spec_path, c_path])
    check(built.returncode == 0, f"{name}: capstore pack build failed: {built.stderr}")
    if built.returncode == 0:
        with open(c_path, "rb") as handle:
            ours = handle.read()
        same = ours == data
        first_diff = next((i for i, (a, b) in enumerate(zip(ours, data)) if a != b),
                          min(len(ours), len(data)))
        check(same, f"{name}: C pack differs from the reference at byte {first_diff} "
                    f"({len(ours)} vs {len(data)} bytes)")
    verified = run([capstore, "pack", "verify", ref_path])
    check(verified.returncode == 0, f"{name}: verify refused the reference pack: {verified.stderr}")
    info = run([capstore, "pack", "info", ref_path])
    check(info.returncode == 0, f"{name}: info failed: {info.stderr}")
    if info.returncode == 0:
        shown = json.loads(info.stdout)
        footer_offset = shown["trailer"]["footer_offset"]
        footer = json.loads(data[footer_offset:len(data) - 64])
        check(shown["footer"] == footer, f"{name}: info shows another footer")
        check(shown["footer_canonical"] is True, f"{name}: reference footer not canonical")
    if spec["records"]:
        for prefix in ("", "catalog-a/"):
            got = run([capstore, "pack", "key", ref_path, "--prefix", prefix])
            check(got.returncode == 0, f"{name}: key failed: {got.stderr}")
            if got.returncode == 0:
                check(json.loads(got.stdout) == ref_key(spec, data, prefix),
                      f"{name}: key/metadata differ for prefix {prefix!r}: {got.stdout}")
    return name


def check_golden(capstore, work):
    golden_dir = os.path.join(HERE, "golden")
    for entry in sorted(os.listdir(golden_dir)):
        name = entry[: -len(".dmi-pack")]
        with open(os.path.join(golden_dir, entry), "rb") as handle:
            golden = handle.read()
        spec_path = os.path.join(HERE, "specs", name + ".json")
        _, data = ref_build(spec_path, os.path.join(work, name + ".golden-check"))
        check(data == golden, f"golden {name}: the reference writer no longer writes it")
        verified = run([capstore, "pack", "verify", os.path.join(golden_dir, entry)])
        check(verified.returncode == 0, f"golden {name}: verify refused it: {verified.stderr}")


def check_bad_specs(capstore, work):
    bad_dir = os.path.join(HERE, "specs_bad")
    for entry in sorted(os.listdir(bad_dir)):
        spec_path = os.path.join(bad_dir, entry)
        out = os.path.join(work, "bad.dmi-pack")
        with open(spec_path, "rb") as handle:
            spec = json.load(handle)
        try:
            dmi_pack_ref.build_pack(spec, bad_dir)
            check(False, f"bad {entry}: the reference writer accepted it")
        except dmi_pack_ref.SpecError:
            pass
        result = run([capstore, "pack", "build", spec_path, out])
        check(result.returncode == 1, f"bad {entry}: capstore exit {result.returncode}")
        left = [e for e in os.listdir(work) if e.startswith("bad.dmi-pack")]
        check(not left, f"bad {entry}: a partial pack was left behind: {left}")


RANKS_TEN_KEY = ("v1/tenant=acme/date=2023-11-15/session=sess-0/rank=0/"
                 "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a80.dmi-pack")


def spec_from_info(shown, data):
    """The build spec of a pack, from what `capstore pack info` shows and its bytes."""
    footer = shown["footer"]
    records = [{"metadata": entry["metadata"],
                "payload_hex": data[entry["offset"]:entry["offset"] + entry["stored_length"]].hex()}
               for entry in footer["records"]]
    return {"pack_id": footer["pack_id"], "created_at_ns": footer["created_at_ns"],
            "records": records}


def check_ranks_ten(capstore, work):
    """A pack of ten ranks (three sessions, two tenants): DMI names it by its first record."""
    golden = os.path.join(HERE, "golden", "ranks_ten.dmi-pack")
    with open(golden, "rb") as handle:
        data = handle.read()
    key = run([capstore, "pack", "key", golden])
    check(key.returncode == 0, f"ranks_ten: key refused it: {key.stderr}")
    if key.returncode == 0:
        check(json.loads(key.stdout)["key"] == RANKS_TEN_KEY,
              f"ranks_ten: key {key.stdout.strip()}, expected {RANKS_TEN_KEY}")
    info = run([capstore, "pack", "info", golden])
    check(info.returncode == 0, f"ranks_ten: info failed: {info.stderr}")
    if info.returncode != 0:
        return
    shown = json.loads(info.stdout)
    ranks = sorted({e["metadata"]["producer_rank"] for e in shown["footer"]["records"]})
    check(ranks == list(range(10)), f"ranks_ten: info shows ranks {ranks}")
    spec_path = os.path.join(work, "ranks_ten.roundtrip.json")
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump(spec_from_info(shown, data), handle)
    out = os.path.join(work, "ranks_ten.roundtrip.dmi-pack")
    built = run([capstore, "pack", "build", spec_path, out])
    check(built.returncode == 0, f"ranks_ten: rebuilding it failed: {built.stderr}")
    if built.returncode == 0:
        with open(out, "rb") as handle:
            check(handle.read() == data, "ranks_ten: the rebuilt pack differs from the golden one")
    try:
        dmi_pack_ref.build_pack(spec_from_info(shown, data), work, single_key=True)
        check(False, "ranks_ten: the reference writer's --single-key accepted it")
    except dmi_pack_ref.SpecError:
        pass


def corrupt(capstore, source, work, at, kind):
    with open(source, "rb") as handle:
        data = bytearray(handle.read())
    data[at % len(data)] ^= 0x01
    path = os.path.join(work, f"corrupt-{kind}.dmi-pack")
    with open(path, "wb") as handle:
        handle.write(data)
    result = run([capstore, "pack", "verify", path])
    check(result.returncode == 1 and f": {kind}: " in result.stderr,
          f"corrupt byte {at} should give {kind}: {result.returncode} {result.stderr.strip()}")


def check_corruptions(capstore, work):
    source = os.path.join(HERE, "golden", "dtypes.dmi-pack")
    size = os.path.getsize(source)
    corrupt(capstore, source, work, 0, "bad_magic")
    corrupt(capstore, source, work, 10, "newer_minor")
    corrupt(capstore, source, work, 12, "header_size")
    corrupt(capstore, source, work, 20, "mismatch")
    corrupt(capstore, source, work, 50, "header_field")
    corrupt(capstore, source, work, 64, "payload_crc")
    corrupt(capstore, source, work, 67, "padding")
    corrupt(capstore, source, work, size - 200, "footer_crc")
    corrupt(capstore, source, work, size - 64, "bad_magic")
    corrupt(capstore, source, work, size - 56, "unknown_major")
    corrupt(capstore, source, work, size - 1, "sha256")


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    capstore, work = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    os.makedirs(work, exist_ok=True)
    many = os.path.join(work, "many.json")
    gen_many.main([many, "5000"])
    specs = sorted(os.path.join(HERE, "specs", e) for e in os.listdir(os.path.join(HERE, "specs"))
                   if e.endswith(".json"))
    names = [check_spec(capstore, path, work) for path in specs + [many]]
    check_golden(capstore, work)
    check_bad_specs(capstore, work)
    check_ranks_ten(capstore, work)
    check_corruptions(capstore, work)
    print(f"pack compat: {len(names)} specs ({', '.join(names)}), {CHECKS} checks, "
          f"{len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

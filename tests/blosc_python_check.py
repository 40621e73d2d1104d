#!/usr/bin/env python3
"""Capture-array chunks against python3-blosc, both ways (issue 17).

    blosc_python_check.py TEST_BLOSC_CHUNK_BINARY [TEST_ARRAY_CHUNK_BINARY]

1. The C test writes its sample chunks (CAPSTORE_BLOSC_OUT): python3-blosc must decompress each one to exactly
   the raw bytes written beside it.
2. python3-blosc writes chunks with every codec Debian's libblosc has, every shuffle and item size, some with
   many small blocks (CAPSTORE_BLOSC_IN): the C test must parse each, decode it whole and decode every block
   alone from a sparse buffer.
3. With TEST_ARRAY_CHUNK_BINARY: the stored form of an array chunk (payload, unit table, trailer) written
   there; python3-blosc must decode the stored bytes' first cbytes (from the Blosc header) alone.
Exit status 0 only when every check agrees on every byte.
"""
import os
import subprocess
import sys
import tempfile

import blosc
import numpy as np


def written_by(exe: str, directory: str, ext: str) -> list:
    """Runs the C test with CAPSTORE_BLOSC_OUT=directory; [(name, bytes, raw bytes)] of the NAME.ext files it wrote.
    Raises RuntimeError when it fails or writes none."""
    r = subprocess.run([exe], env={**os.environ, "CAPSTORE_BLOSC_OUT": directory}, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{exe} failed:\n{r.stdout[-4000:]}{r.stderr[-4000:]}")
    out = []
    for name in sorted(n[:-len(ext)] for n in os.listdir(directory) if n.endswith(ext)):
        with open(os.path.join(directory, name + ext), "rb") as f, \
                open(os.path.join(directory, name + ".raw"), "rb") as g:
            out.append((name, f.read(), g.read()))
    if not out:
        raise RuntimeError(f"{exe} wrote no {ext} files")
    return out


def main() -> int:
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as into:
        chunks = written_by(exe, out, ".blosc")
        for name, chunk, raw in chunks:
            if blosc.decompress(chunk) != raw:
                print(f"python3-blosc decodes {name} to other bytes")
                return 1
        print(f"python3-blosc decoded {len(chunks)} chunks written by capstore, byte-exact")

        made = 0
        for cname in blosc.compressor_list():
            for shuffle in (blosc.NOSHUFFLE, blosc.SHUFFLE, blosc.BITSHUFFLE):
                for typesize in (1, 2, 4, 8):
                    for n, blocksize in ((1 << 20, 0), (1 << 20, 16384), (100_000, 0), (24, 0)):
                        n = n // typesize * typesize
                        i = np.arange(n, dtype=np.uint64)
                        raw = ((i // 97 + (i * 7919 % 13 == 0) * (i >> 3)) & 0xFF).astype(np.uint8).tobytes()
                        blosc.set_blocksize(blocksize)
                        chunk = blosc.compress(raw, typesize=typesize, cname=cname, shuffle=shuffle, clevel=5)
                        name = f"py-{cname}-s{shuffle}-i{typesize}-n{n}-b{blocksize}"
                        with open(os.path.join(into, name + ".blosc"), "wb") as f:
                            f.write(chunk)
                        with open(os.path.join(into, name + ".raw"), "wb") as f:
                            f.write(raw)
                        made += 1
        blosc.set_blocksize(0)
        if len(sys.argv) > 2:
            stored_chunks = written_by(sys.argv[2], tempfile.mkdtemp(dir=out), ".stored")
            for name, stored, raw in stored_chunks:
                _, cbytes, _ = blosc.get_cbuffer_sizes(stored[:16])
                if cbytes >= len(stored) or blosc.decompress(stored[:cbytes]) != raw:
                    print(f"python3-blosc does not decode the payload of the stored chunk {name}")
                    return 1
            print(f"python3-blosc decoded {len(stored_chunks)} stored array chunks from their first cbytes")
        r = subprocess.run([exe], env={**os.environ, "CAPSTORE_BLOSC_IN": into}, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-4000:], r.stderr[-4000:])
            return 1
        print(f"capstore decoded {made} chunks written by python3-blosc ({', '.join(blosc.compressor_list())}; "
              f"no, byte and bit shuffle; item sizes 1-8), whole and block by block")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# pip install ./python into a fresh virtual environment (Debian's torch and numpy
# seen through --system-site-packages; nothing downloaded), then the example
# runs from there: no PYTHONPATH, no CAPSTORE_LIBRARY, another directory.
# usage: python_pip.sh PYTHON SOURCE_DIR LIBRARY WORK_DIR
set -euo pipefail
python=$1 src=$2 lib=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
# The source tree's copy, so that pip's in-tree build leaves nothing in it; setup.py bundles the library
# CAPSTORE_LIBRARY names (from the source tree it takes build/lib/libcapstore.so.* beside python/ itself).
cp -r "$src/python" "$work/python"
rm -rf "$work/python/build" "$work/python/"*.egg-info
CAPSTORE_LIBRARY=$lib "$work/venv/bin/pip" install --no-index --no-cache-dir -q "$work/python"
cd "$work"
unset PYTHONPATH CAPSTORE_LIBRARY
"$work/venv/bin/python" -c 'import capstore, os; print(capstore.LIBRARY_PATH); assert "/site-packages/capstore/_lib/" in capstore.LIBRARY_PATH'
"$work/venv/bin/python" "$src/examples/python_transformer.py" --dir "$work/demo" --requests 8 --batch 4 | tee "$work/out"
grep -q "^read back 32 of 32 records equal" "$work/out"

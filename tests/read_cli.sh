#!/usr/bin/env bash
# `capstore ls` and `capstore read` on a state made by `capstore demo`: paging
# with --cursor to the end (each record once, at one watermark), filters,
# the plan shown first, budgets refused before any file is written, cursor
# refusals, and payload files that numpy opens with the catalog's shape,
# dtype and CRC-32 (zlib's, computed here independently).
# Replay: tests/read_cli.sh CAPSTORE WORKDIR
set -uo pipefail
capstore=$1
work=$2
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"
# Debian's python3 has numpy (python3-numpy); a pyenv shim first on PATH may not.
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3

d=$work/state
"$capstore" demo --dir "$d" --threads 2 --records 300 --quiet >/dev/null || fail "demo"
cfg=$d/capstore.json

# ls: the table, and paging with the cursor in JSON lines until the last page.
"$capstore" ls "$cfg" --limit 5 >"$work/ls.out" 2>"$work/ls.err" || fail "ls: exit $?"
grep -q '^CAPTURE ID' "$work/ls.out" || fail "ls: no table header"
[[ $(grep -c '^demo-' "$work/ls.out") == 5 ]] || fail "ls --limit 5: $(grep -c '^demo-' "$work/ls.out") rows"
grep -q 'takes [0-9]* GETs' "$work/ls.err" || fail "ls: the plan is not shown: $(cat "$work/ls.err")"
cursor=""
: >"$work/all.jsonl"
for page in $(seq 1 100); do
  args=(--limit 97 --json)
  [[ -n $cursor ]] && args+=(--cursor "$cursor")
  "$capstore" ls "$cfg" "${args[@]}" >"$work/page.jsonl" 2>/dev/null || { fail "ls page $page: exit $?"; break; }
  head -n -1 "$work/page.jsonl" >>"$work/all.jsonl"
  cursor=$($py -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(d["cursor"] or "")' "$work/page.jsonl")
  [[ -z $cursor ]] && break
done
$py - "$work/all.jsonl" <<'PY' || fail "paging: records missing or repeated"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ids = [r["capture_id"] for r in rows]
assert len(ids) == 600, len(ids)
assert len(set(ids)) == 600, "duplicates"
assert len({r["version"] <= 10**9 for r in rows}) == 1
PY

# Filters: a hook and a step range select exactly what the full listing says they should.
"$capstore" ls "$cfg" --hook layers.mlp.act --step 2..4 --limit 0 --json >"$work/f.jsonl" 2>/dev/null || fail "ls filtered"
$py - "$work/all.jsonl" "$work/f.jsonl" <<'PY' || fail "filter: not the expected records"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = sorted(r["capture_id"] for r in rows if r["hook_name"] == "layers.mlp.act" and 2 <= r["step_number"] <= 4)
got = sorted(json.loads(l)["capture_id"] for l in open(sys.argv[2]).read().splitlines()[:-1])
assert want and got == want, (len(got), len(want))
PY

# A cursor made for another filter, a changed one, a made-up one: refused by name.
c=$("$capstore" ls "$cfg" --limit 3 2>/dev/null | tail -1)
"$capstore" ls "$cfg" --limit 3 --step 1 --cursor "$c" >/dev/null 2>"$work/err" && fail "cursor of another filter accepted"
grep -q "another filter" "$work/err" || fail "another filter: $(cat "$work/err")"
bad=${c:0:10}$([[ ${c:10:1} == 0 ]] && echo 1 || echo 0)${c:11}
"$capstore" ls "$cfg" --limit 3 --cursor "$bad" >/dev/null 2>"$work/err" && fail "changed cursor accepted"
grep -q "damaged or forged" "$work/err" || fail "changed cursor: $(cat "$work/err")"
"$capstore" ls "$cfg" --cursor nonsense >/dev/null 2>"$work/err" && fail "made-up cursor accepted"
grep -q "not a capstore cursor" "$work/err" || fail "made-up cursor: $(cat "$work/err")"

# Budgets: refused before anything is read or written.
"$capstore" read "$cfg" --step 3 --byte-limit 1000 --out "$work/none" >/dev/null 2>"$work/err"
[[ $? == 1 ]] || fail "read over the byte limit: not exit 1"
grep -q "over the byte limit 1000" "$work/err" || fail "byte limit: $(cat "$work/err")"
[[ -e $work/none ]] && fail "read over the byte limit wrote $work/none"
"$capstore" read "$cfg" --step 3 --request-limit 0 --out "$work/none" >/dev/null 2>"$work/err"
grep -q "request limit 0: must be > 0" "$work/err" || fail "request limit 0: $(cat "$work/err")"
"$capstore" read "$cfg" --out "$work/none" --byte-limit -5 >/dev/null 2>"$work/err"
[[ $? == 2 ]] || fail "negative byte limit: not a usage error"

# Empty tensors alone, with no merging: no 0-byte GET (a store refuses that range), an empty file each.
"$capstore" read "$cfg" --hook layers.kv.empty --gap 0 --out "$work/empty" >/dev/null 2>"$work/err" ||
  fail "read of empty tensors: $(cat "$work/err")"
n=$(ls "$work/empty" | grep -c -v manifest.jsonl)
[[ $n -gt 0 ]] || fail "read of empty tensors wrote no file"

# read: every payload as a file numpy opens, with the catalog's shape, dtype and CRC-32.
"$capstore" read "$cfg" --step 0..5 --out "$work/out" >"$work/read.out" 2>"$work/read.err" || fail "read: exit $? ($(cat "$work/read.err"))"
grep -q "every record verified" "$work/read.err" || fail "read: $(cat "$work/read.err")"
$py - "$work/out" "$work/all.jsonl" <<'PY' || fail "read: files differ from the catalog"
import json, os, sys, zlib
import numpy as np
out = sys.argv[1]
rows = {json.loads(l)["capture_id"]: json.loads(l) for l in open(sys.argv[2])}
names = {"bool": "bool", "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
         "float16": "float16", "float32": "float32", "float64": "float64"}
manifest = [json.loads(l) for l in open(os.path.join(out, "manifest.jsonl"))]
want = [r for r in rows.values() if 0 <= r["step_number"] <= 5]
assert len(manifest) == len(want) > 0, (len(manifest), len(want))
npy = 0
for m in manifest:
    path = os.path.join(out, m["file"])
    assert m["capture_id"] in rows
    if m["file"].endswith(".npy"):
        a = np.load(path)
        assert a.dtype == np.dtype(names[m["dtype"]]), (m["file"], a.dtype)
        assert list(a.shape) == m["shape"], (m["file"], a.shape)
        raw = a.tobytes()
        npy += 1
    else:
        assert m["dtype"] == "bfloat16", m["file"]
        raw = open(path, "rb").read()
    assert len(raw) == m["bytes"], m["file"]
    assert zlib.crc32(raw) == m["crc32"], m["file"]
assert npy > 0
print(len(manifest), "files,", npy, "npy")
PY
finish read_cli

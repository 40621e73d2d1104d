#!/usr/bin/env bash
# Capture arrays from many processes (issue 17, docs/arrays.md): `capstore serve`
# and 8 capture-role writer processes (tests/array_client.c) filling one array at
# once, raw and Blosc. Each writer fills its own slots and races the others for
# 8 contested ones. Then: every contested slot accepted by exactly one writer and
# refused to the other 7; the array complete, its stamp stable; every chunk read
# back equal (the contested ones with their winner's bytes); a stored chunk's
# payload decoded by python3-blosc. On the embedded defaults (dirstore enforces
# If-None-Match: the slot claims refuse at once) or on S3 + ClickHouse (the local
# S3 server ignores it: the catalog arbitrates and the flushes report refusals).
# Replay: tests/arrays_live.sh CAPSTORE ARRAY_CLIENT WORKDIR [CH_ENDPOINT_FILE S3_ENDPOINT_FILE]
set -uo pipefail
capstore=$1
client=$2
work=$3
ch_file=${4-}
s3_file=${5-}
writers=8
python=/usr/bin/python3
[[ -x $python ]] || python=python3
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"
source "$(dirname "$0")/serve_lib.sh"
serve_backend "$ch_file" "$s3_file"
step() { echo "arrays_live ($backend): ${SECONDS}s: $*"; }

spool=$work/spool
name=arrays_live_$$_$RANDOM
cat >"$work/serve.json" <<JSON
# the daemon, and the store and catalog the writers and the reader use (tests/arrays_live.sh)
{"name": "$name", "spool_dir": "$spool", "store": {$store}, "catalog": {$catalog},
 "daemon": {"listen": "", "scan_interval": "20ms", "close_timeout": "30s"}}
JSON
cat >"$work/capture.json" <<JSON
# a writer process beside the daemon: no store, no catalog
{"role": "capture", "spool_dir": "$spool", "capture": {"linger": "50ms"}}
JSON

step "daemon"
serve_start "$capstore" "$work/serve.json"

for codec in raw blosc; do
  id=fill-$codec-$name
  dir=$work/$codec
  mkdir -p "$dir"
  step "$writers writers fill $id"
  # A writer that died between its claims and its records left 5 claims an hour old on slots others own.
  "$client" stale-claims "$work/serve.json" "$id" 20 5 || fail "$codec: planting stale claims"
  pids=()
  for ((k = 0; k < writers; k++)); do
    "$client" fill "$work/capture.json" "$work/serve.json" "$id" "$codec" "$k" "$writers" "$dir/writer-$k.txt" \
      >"$dir/writer-$k.out" 2>&1 &
    pids+=($!)
  done
  for ((k = 0; k < writers; k++)); do
    wait "${pids[$k]}" || fail "writer $k ($codec): $(cat "$dir/writer-$k.out")"
  done
  cat "$dir"/writer-*.out
  refused=$(cat "$dir"/writer-*.txt | grep -c ' refused$')
  [[ $refused == $((writers * (writers - 1))) ]] || fail "$codec: $refused refusals of contested slots, want $((writers * (writers - 1)))"
  if [[ $backend == embedded ]]; then
    # Claims are enforced: every refusal came at the write, none at the flush.
    at_once=$(sed -n 's/.* refused_at_once \([0-9]*\) .*/\1/p' "$dir"/writer-*.txt | paste -sd+ | bc)
    [[ $at_once == $((writers * (writers - 1))) ]] || fail "$codec: $at_once refusals at the write, want all"
  fi
  # The stale claims were taken over where claims are made (each slot once), and ignored where they are not.
  taken=$(sed -n 's/.* taken_over \([0-9]*\)$/\1/p' "$dir"/writer-*.txt | paste -sd+ | bc)
  want_taken=0
  [[ $backend == embedded ]] && want_taken=5
  [[ $taken == "$want_taken" ]] || fail "$codec: $taken stale claims taken over, want $want_taken"
  step "verify $id"
  "$client" verify "$work/serve.json" "$id" "$codec" "$writers" "$dir" "$dir" || fail "verify $codec"
  "$python" - "$dir/chunk9.stored" "$dir/chunk9.elements" "$codec" <<'PY' || fail "$codec: python's decode of a stored chunk"
import struct, sys
stored = open(sys.argv[1], "rb").read()
elements = open(sys.argv[2], "rb").read()
units, payload_len, _table_crc, magic = struct.unpack("<III4s", stored[-16:])
assert magic == b"CSA1", magic
payload = stored[:payload_len]
if sys.argv[3] == "blosc":
    import blosc
    got = blosc.decompress(payload)
else:
    got = payload
assert got == elements, "the stored chunk's payload does not decode to its elements"
print("python: chunk 9 (%s, %d stored bytes, %d units) decodes to its %d element bytes" % (sys.argv[3], len(stored), units, len(elements)))
PY
done

step "SIGTERM"
serve_stop
finish "arrays_live ($backend)"

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
daemon=
trap '[[ -n $daemon ]] && kill -KILL "$daemon" 2>/dev/null; wait 2>/dev/null' EXIT
backend=embedded
[[ -n $ch_file ]] && backend=servers
step() { echo "arrays_live ($backend): ${SECONDS}s: $*"; }

spool=$work/spool
name=arrays_live_$$_$RANDOM
if [[ $backend == servers ]]; then
  read -r ch_port ch_user ch_password <"$ch_file"
  read -r s3_endpoint s3_key s3_secret s3_bucket <"$s3_file"
  export CAPSTORE_CLICKHOUSE_PASSWORD=$ch_password AWS_ACCESS_KEY_ID=$s3_key AWS_SECRET_ACCESS_KEY=$s3_secret
  export AWS_REGION=us-east-1
  store="\"s3\": {\"endpoint\": \"$s3_endpoint\", \"bucket\": \"$s3_bucket\", \"allow_insecure\": true}"
  catalog="\"clickhouse\": {\"url\": \"http://127.0.0.1:$ch_port/\", \"user\": \"$ch_user\", \"allow_insecure\": true}"
else
  store="\"dir\": \"$work/bucket\""
  catalog="\"sqlite\": \"$work/catalog.db\""
fi
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
"$capstore" serve "$work/serve.json" --log "$work/serve.log" 2>"$work/serve.err" &
daemon=$!
for ((i = 0; i < 600; i++)); do
  grep -q "event=lease state=held" "$work/serve.log" 2>/dev/null && break
  kill -0 "$daemon" 2>/dev/null || break
  sleep 0.05
done
grep -q "event=lease state=held" "$work/serve.log" || fail "the daemon did not take the lease: $(tail -5 "$work/serve.log" "$work/serve.err")"

for codec in raw blosc; do
  id=fill-$codec-$name
  dir=$work/$codec
  mkdir -p "$dir"
  step "$writers writers fill $id"
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
    at_once=$(sed -n 's/.* refused_at_once \([0-9]*\)$/\1/p' "$dir"/writer-*.txt | paste -sd+ | bc)
    [[ $at_once == $((writers * (writers - 1))) ]] || fail "$codec: $at_once refusals at the write, want all"
  fi
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
kill -TERM "$daemon"
for ((i = 0; i < 600; i++)); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.05; done
wait "$daemon"
code=$?
daemon=
[[ $code == 0 ]] || fail "SIGTERM: exit $code: $(tail -3 "$work/serve.log") $(cat "$work/serve.err")"
finish "arrays_live ($backend)"

#!/usr/bin/env bash
# capstore serve beside capture processes, end to end (issue 14's "done means"):
# a daemon on the embedded defaults, or on S3 + ClickHouse when the servers'
# endpoint files are given; two capture-role processes (tests/serve_client.c)
# capture at once and flush (drained means shipped by the daemon), a third is
# killed after sealing (the daemon adopts its private spool); /metrics and
# /status are scraped while it serves; SIGTERM closes drained (exit 0). Then
# every record of all three is in the catalog exactly once with its size and
# CRC, the lease is free, fsck is clean, and no private spool is left.
# Replay: tests/serve_e2e.sh CAPSTORE SERVE_CLIENT WORKDIR [CH_ENDPOINT_FILE S3_ENDPOINT_FILE]
set -uo pipefail
capstore=$1
client=$2
work=$3
ch_file=${4-}
s3_file=${5-}
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"
source "$(dirname "$0")/serve_lib.sh"
serve_backend "$ch_file" "$s3_file"
step() { echo "serve_e2e ($backend): ${SECONDS}s: $*"; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
spool=$work/spool
name=serve_e2e_$$_$RANDOM
cat >"$work/serve.json" <<EOF
# the daemon (tests/serve_e2e.sh)
{"name": "$name", "spool_dir": "$spool", "store": {$store}, "catalog": {$catalog},
 "daemon": {"listen": "127.0.0.1:$port", "scan_interval": "50ms", "close_timeout": "30s"}}
EOF
cat >"$work/capture.json" <<EOF
# a capture process beside it: no store, no catalog
{"role": "capture", "spool_dir": "$spool", "capture": {"linger": "100ms", "pack_records_max": 500}}
EOF

step "daemon"
serve_start "$capstore" "$work/serve.json"

step "three capture processes"
# One is killed right after sealing (no flush wait, no close): what it sealed must ship all the same.
"$client" capture "$work/capture.json" killed 1500 --no-close >"$work/killed.out" 2>&1 || fail "the killed process: $(cat "$work/killed.out")"
"$client" capture "$work/capture.json" alpha 4000 >"$work/alpha.out" 2>&1 &
a=$!
"$client" capture "$work/capture.json" beta 3000 >"$work/beta.out" 2>&1 &
b=$!
wait "$a" || fail "capture process alpha: $(cat "$work/alpha.out")"
wait "$b" || fail "capture process beta: $(cat "$work/beta.out")"
for t in alpha beta; do
  grep -q "flush ok: drained=1" "$work/$t.out" || fail "$t's flush did not drain: $(cat "$work/$t.out")"
  cat "$work/$t.out"
done

step "/metrics and /status"
scrape() { python3 - "$port" "$1" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("GET", sys.argv[2])
r = c.getresponse()
body = r.read().decode()
if r.status != 200:
    sys.exit("GET %s: %d" % (sys.argv[2], r.status))
print(body, end="")
PY
}
# The killed process's spool is adopted on a scan: wait for it (and for its packs to ship).
for ((i = 0; i < 200; i++)); do
  scrape /metrics >"$work/metrics" || fail "GET /metrics"
  grep -q "^capstore_adopted_spools_total 1$" "$work/metrics" && grep -q '^capstore_packs_pending_spool 0$' "$work/metrics" && break
  sleep 0.1
done
grep -q '^capstore_adopted_spools_total 1$' "$work/metrics" || fail "the killed process's spool was not adopted: $(grep adopted "$work/metrics")"
admitted=$(sed -n 's/^capstore_arrivals_admitted_total \([0-9]*\)$/\1/p' "$work/metrics")
[[ -n $admitted && $admitted -ge 14 ]] || fail "packs admitted: '$admitted' (7,000 records in packs of at most 500: at least 14)"
grep -q '^capstore_arrivals_quarantined_total 0$' "$work/metrics" || fail "a handed-in pack was quarantined"
scrape /status >"$work/status.json" || fail "GET /status"
python3 - "$work/status.json" <<'PY' || fail "/status: $(cat "$work/status.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["state"] == "serving", s["state"]
assert s["lease"] == "held", s["lease"]
assert s["packs_indexed"] >= 17, s["packs_indexed"]
assert s["adopted_spools"] == 1, s["adopted_spools"]
PY

step "SIGTERM"
serve_stop
grep -q "event=close result=ok drained=true" "$work/serve.log" || fail "close event: $(grep event=close "$work/serve.log")"

step "the catalog"
"$client" count "$work/serve.json" alpha 4000 || fail "alpha's records"
"$client" count "$work/serve.json" beta 3000 || fail "beta's records"
"$client" count "$work/serve.json" killed 1500 || fail "the killed process's sealed records"
for ((i = 0; i < 50; i++)); do
  "$capstore" status "$work/serve.json" --json >"$work/st.json" 2>"$work/err" || fail "status: $(cat "$work/err")"
  grep -q '"lease_free": true' "$work/st.json" && break
  sleep 0.1
done
grep -q '"lease_free": true' "$work/st.json" || fail "the lease is not free after exit: $(cat "$work/st.json")"
"$capstore" fsck "$work/serve.json" >"$work/fsck.out" 2>&1 || fail "fsck after exit: $(cat "$work/fsck.out")"
tail -1 "$work/fsck.out" | grep -qx clean || fail "fsck: $(cat "$work/fsck.out")"
left=$(find "$spool" -mindepth 1 ! -name .capstore-spool.lock ! -path "$spool/.capture" | head -5)
[[ -z $left ]] || fail "left in the spool: $left"

# ---- what must not ship: a verified pack of no records; a private-spool name that is a symbolic link -----------
if [[ $backend == embedded ]]; then
  step "what must not ship"
  s2=$work/s2
  mkdir -p "$s2/spool/.capture" "$work/victim"
  printf '{"spool_dir": "%s/spool", "store": {"dir": "%s/bucket"}, "catalog": {"sqlite": "%s/catalog.db"},
 "daemon": {"listen": "", "scan_interval": "20ms", "close_timeout": "10s"}}\n' "$s2" "$s2" "$s2" >"$work/serve2.json"
  printf '{"created_at_ns": 1796194760211842789, "pack_id": "01a2358c-0000-7000-8000-0000000000ee", "records": []}\n' \
    >"$work/empty.json"
  "$capstore" pack build "$work/empty.json" "$work/empty.pack" >/dev/null || fail "pack build of no records"
  empty=01a2358c-0000-7000-8000-0000000000ee.1796194760211842789.0.$(sha256sum "$work/empty.pack" | cut -d' ' -f1).dmi-pack.ready
  junk=01a2358c-0000-7000-8000-0000000000aa.1.1.$(printf '%064d' 0).dmi-pack.ready
  echo junk >"$work/victim/$junk"
  ln -s "$work/victim" "$s2/spool/.capture/01a2358c-0000-7000-8000-000000000001"
  "$capstore" serve "$work/serve2.json" --log "$work/serve2.log" 2>"$work/serve2.err" &
  daemon=$!
  for ((i = 0; i < 600; i++)); do grep -q "event=lease state=held" "$work/serve2.log" 2>/dev/null && break; sleep 0.05; done
  cp "$work/empty.pack" "$s2/spool/$empty"
  for ((i = 0; i < 200; i++)); do [[ -e $s2/spool/$empty.quarantined ]] && break; sleep 0.05; done
  [[ -e $s2/spool/$empty.quarantined ]] || fail "a handed-in pack of no records was not set aside: $(ls "$s2/spool")"
  for ((i = 0; i < 40; i++)); do grep -q "event=arrival_set_aside" "$work/serve2.log" && break; sleep 0.05; done
  grep -q "event=arrival_set_aside" "$work/serve2.log" || fail "no arrival_set_aside event: $(tail -3 "$work/serve2.log")"
  sleep 0.3 # more scans over the symbolic link
  [[ -e $work/victim/$junk && ! -e $work/victim/$junk.quarantined && ! -e $work/victim/.capstore-spool.lock ]] ||
    fail "the daemon followed a symbolic link in .capture: $(ls -a "$work/victim")"
  grep -q "event=adopted" "$work/serve2.log" && fail "a symbolic link counted as an adopted spool"
  kill -TERM "$daemon"
  for ((i = 0; i < 400; i++)); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.05; done
  wait "$daemon"
  code=$?
  daemon=
  [[ $code == 0 ]] || fail "with a pack set aside: exit $code: $(grep event=close "$work/serve2.log")"
fi

finish serve_e2e

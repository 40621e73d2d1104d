#!/usr/bin/env bash
# `capstore serve CONFIG` on the embedded defaults (a store directory, a
# SQLite catalog): the `listening` event names the port 0 picked; /metrics
# (content type, metric names), /status (JSON with the daemon's fields),
# /healthz, 404 and 405; every log line parses (logfmt and JSON, with a
# config path full of quotes, backslashes and a newline); SIGHUP after the
# log was moved writes the next lines to a new file; SIGTERM closes drained,
# exit 0, an `exit` event with code 0 and the lease released; SIGINT then
# SIGTERM: the second is logged and the close goes on; `capstore status`
# prints a running daemon's snapshot; a second daemon on the same spool
# exits 3 naming the holder, a listen address in use exits 3; a bad config
# exits 2 naming the key; role capture is refused; with the store down and a
# pack in the spool, SIGTERM closes undrained: exit 1 naming what is left,
# and no credential in the log. Capture processes beside the daemon:
# tests/serve_e2e.sh.
# Replay: tests/serve_cli.sh CAPSTORE WORKDIR
set -uo pipefail
capstore=$1
work=$2
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"
helper="$(dirname "$0")/serve_cli.py"
step() { echo "serve_cli: ${SECONDS}s: $*"; }
daemons=()
trap 'for p in "${daemons[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null' EXIT

# A directory whose name holds a quote, a backslash, a space and a newline: the log must escape it.
odd=$work/$'cfg "q" \\ x\ny'
mkdir -p "$odd"
# write_config FILE DIR LISTEN [LOG]: the embedded defaults under DIR, a stats line every second.
write_config() {
  python3 - "$@" <<'PY'
import json, sys
path, d, listen = sys.argv[1:4]
cfg = {"spool_dir": d + "/spool", "store": {"dir": d + "/bucket"}, "catalog": {"sqlite": d + "/catalog.db"},
       "daemon": {"listen": listen, "stats_interval": "1s", "close_timeout": "20s"}}
if len(sys.argv) > 4:
    cfg["daemon"]["log"] = sys.argv[4]
with open(path, "w") as f:
    f.write("# tests/serve_cli.sh\n" + json.dumps(cfg, indent=2) + "\n")
PY
}
# snap LOG FORMAT: every line of LOG parses; E_<event>_<key> and N_<event> of its last events.
snap() {
  unset "${!E_@}" "${!N_@}"
  python3 "$helper" snap "$1" "$2" "$work/snap.sh" 2>"$work/snap.err" || fail "a log line does not parse: $(cat "$work/snap.err")"
  [[ -f $work/snap.sh ]] && source "$work/snap.sh"
  rm -f "$work/snap.sh"
}
# json FILE: J_<key>... of FILE's JSON object.
json() {
  unset "${!J_@}"
  python3 "$helper" json "$1" "$work/json.sh" 2>"$work/json.err" || fail "not a JSON object: $(cat "$work/json.err")"
  [[ -f $work/json.sh ]] && source "$work/json.sh"
  rm -f "$work/json.sh"
}
# wait_for LOG PATTERN [SECONDS]: until a line of LOG has PATTERN (grep -E).
wait_for() {
  for ((i = 0; i < ${3:-30} * 20; i++)); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "no '$2' in $1 after ${3:-30} s: $(tail -5 "$1")"
  return 1
}
# wait_exit PID SECONDS: code gets the daemon's exit status (124 when it still runs after SECONDS).
# (The daemon is this shell's child: once it exits it is a zombie until waited for.)
running() { [[ -e /proc/$1 && $(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) != Z ]]; }
wait_exit() {
  for ((i = 0; i < $2 * 20; i++)); do
    running "$1" || break
    sleep 0.05
  done
  code=124
  running "$1" && return
  wait "$1"
  code=$?
}
expect() { [[ $1 == "$2" ]] || fail "$3: '$1', expected '$2'"; }

# ---- options and refusals: exit 2 before anything is opened -------------------------------------------
step "options and refusals"
"$capstore" serve --help >"$work/help" || fail "serve --help: exit $?"
for want in "usage: capstore serve" "exit status" "example" "SIGHUP" "SIGTERM"; do
  grep -q "$want" "$work/help" || fail "serve --help lacks '$want'"
done
"$capstore" serve >/dev/null 2>&1; expect $? 2 "no CONFIG: exit"
"$capstore" serve "$work/none.json" 2>"$work/err"; expect $? 2 "a missing CONFIG: exit"
grep -q "none.json" "$work/err" || fail "a missing CONFIG is not named: $(cat "$work/err")"
write_config "$work/ok.json" "$work/refused" "127.0.0.1:0"
"$capstore" serve "$work/ok.json" --frobnicate 2>/dev/null; expect $? 2 "an unknown option: exit"
"$capstore" serve "$work/ok.json" --listen 2>/dev/null; expect $? 2 "--listen without a value: exit"
"$capstore" serve "$work/ok.json" --listen example.com:80 2>"$work/err"; expect $? 2 "--listen example.com:80: exit"
grep -q -- "--listen: 'example.com:80'" "$work/err" || fail "a bad --listen is not named: $(cat "$work/err")"
"$capstore" serve "$work/ok.json" --listen '[::1]:70000' 2>"$work/err"; expect $? 2 "--listen [::1]:70000: exit"
"$capstore" serve "$work/ok.json" --log-format xml 2>"$work/err"; expect $? 2 "--log-format xml: exit"
grep -q "daemon.log_format" "$work/err" || fail "a bad --log-format does not name the key: $(cat "$work/err")"
bad() { printf '{"spool_dir": "%s/bad/spool", "store": {"dir": "%s/bad/bucket"}, "catalog": {"sqlite": "%s/bad/c.db"},\n %s}\n' \
  "$work" "$work" "$work" "$1" >"$work/bad.json"; }
bad '"service": {"lease_ttl": 30}'
"$capstore" serve "$work/bad.json" 2>"$work/err"; expect $? 2 "a bad config: exit"
grep -q "service.lease_ttl" "$work/err" || fail "a bad config does not name the key: $(cat "$work/err")"
bad '"daemon": {"listen": "localhost:http"}'
"$capstore" serve "$work/bad.json" 2>"$work/err"; expect $? 2 "daemon.listen localhost:http: exit"
grep -q "daemon.listen" "$work/err" || fail "a bad daemon.listen is not named: $(cat "$work/err")"
printf '{"role": "capture", "spool_dir": "%s/capture/spool"}\n' "$work" >"$work/capture.json"
"$capstore" serve "$work/capture.json" 2>"$work/err"; expect $? 2 "role capture: exit"
grep -q "role is capture" "$work/err" || fail "role capture: $(cat "$work/err")"
[[ -e $work/capture/spool || -e $work/bad/spool || -e $work/refused ]] && fail "a refused config made its spool"

# ---- daemon A: port 0, logfmt to a file, the odd config path ------------------------------------------
step "daemon A"
dir=$work/a
log=$work/serve.log
config=$odd/a.json
write_config "$config" "$dir" "127.0.0.1:0" "$log"
"$capstore" serve "$config" 2>"$work/a.err" &
a=$!
daemons+=("$a")
wait_for "$log" "event=listening "
wait_for "$log" "event=lease state=held " 10
snap "$log" logfmt
addr=${E_listening_addr-?}
port=${addr##*:}
[[ $addr =~ ^127\.0\.0\.1:[0-9]+$ && $port != 0 ]] || fail "listening addr=$addr"
expect "${E_start_pid-}" "$a" "start pid"
expect "${E_start_config-}" "$config" "start config (escaped and read back)"
expect "${E_start_role-}" publisher "start role"
expect "${E_start_spool_dir-}" "$dir/spool" "start spool_dir"
expect "${E_start_store-}" "dir:$dir/bucket" "start store"
expect "${E_start_catalog-}" "sqlite:$dir/catalog.db" "start catalog"
version=$("$capstore" --version | cut -d' ' -f2)
expect "${E_start_version-}" "$version" "start version"
expect "${E_open_result-}" ok "open result"
expect "${E_lease_state-}" held "lease state"

step "the endpoint"
mkdir -p "$work/http"
python3 "$helper" http "$port" "$work/http" || fail "the endpoint's requests"
h=$work/http
expect "$(cat "$h/metrics.status")" 200 "GET /metrics"
grep -qx "content-type: text/plain; version=0.0.4; charset=utf-8" "$h/metrics.headers" ||
  fail "/metrics content type: $(cat "$h/metrics.headers")"
for m in "# TYPE capstore_packs_indexed_total counter" "capstore_records_captured_total 0" "capstore_lease_state 2" \
  "# TYPE capstore_oldest_unshipped_age_ns gauge" "capstore_packs_pending_index 0"; do
  grep -qx "$m" "$h/metrics.body" || fail "/metrics lacks '$m'"
done
expect "$(cat "$h/status.status")" 200 "GET /status"
grep -qx "content-type: application/json" "$h/status.headers" || fail "/status content type"
[[ -f $h/status.sh ]] && source "$h/status.sh"
expect "${S_state-}" serving "/status state"
expect "${S_pid-}" "$a" "/status pid"
expect "${S_version-}" "$version" "/status version"
expect "${S_config-}" "$config" "/status config"
expect "${S_role-}" publisher "/status role"
expect "${S_spool_dir-}" "$dir/spool" "/status spool_dir"
expect "${S_store-}" "dir:$dir/bucket" "/status store"
expect "${S_listen-}" "$addr" "/status listen"
expect "${S_lease-}" held "/status lease"
expect "${S_packs_pending_index-}" 0 "/status packs_pending_index"
[[ ${S_uptime_s-} =~ ^[0-9]+$ ]] || fail "/status uptime_s '${S_uptime_s-}'"
expect "$(cat "$h/healthz.status") $(cat "$h/healthz.body")" "200 ok" "GET /healthz"
expect "$(cat "$h/healthz_head.status")" 200 "HEAD /healthz"
expect "$(cat "$h/nope.status")" 404 "GET /nope"
expect "$(cat "$h/post.status")" 405 "POST /metrics"
grep -qx "allow: GET, HEAD" "$h/post.headers" || fail "405 without Allow"
expect "$(cat "$h/delete.status")" 405 "DELETE /status"
wait_for "$log" "event=stats .* lease=held " 10

step "a second daemon"
# A second daemon on the same spool: refused, exit 3, the holder named (on stderr and in its log).
"$capstore" serve "$config" --log "$work/second.log" 2>"$work/err"
expect $? 3 "a second daemon on the spool: exit"
grep -q "pid $a" "$work/err" || fail "the second daemon does not name pid $a: $(cat "$work/err")"
grep -q "event=exit code=3" "$work/second.log" || fail "the second daemon's exit event: $(cat "$work/second.log")"

step "SIGHUP"
# logrotate: the file moved away, SIGHUP, the next lines go to a new file.
mv "$log" "$log.1"
kill -HUP "$a"
wait_for "$log" "event=signal signal=SIGHUP action=\"log reopened\"" 10
lines_before=$(wc -l <"$log.1")

step "SIGTERM"
# SIGTERM: closed drained within the budget, exit 0, the lease released.
t0=$(date +%s%N)
kill -TERM "$a"
wait_exit "$a" 30
echo "serve_cli: SIGTERM to exit: $((($(date +%s%N) - t0) / 1000000)) ms"
expect "$code" 0 "SIGTERM: exit ($(cat "$work/a.err"))"
snap "$log" logfmt
expect "${E_signal_signal-}" SIGTERM "signal event"
expect "${E_close_result-}" ok "close result"
expect "${E_close_drained-}" true "close drained"
expect "${E_close_owed_to_catalog-}" 0 "close owed_to_catalog"
expect "${E_exit_code-}" 0 "exit event code"
expect "${E_lease_state-}" released "lease state at exit"
expect "$(wc -l <"$log.1")" "$lines_before" "lines in the moved log after SIGHUP"
grep -q "event=close" "$log.1" && fail "the moved log got the close"
snap "$log.1" logfmt
[[ -s $work/a.err ]] && fail "the daemon wrote to stderr while logging to a file: $(cat "$work/a.err")"
for ((i = 0; i < 50; i++)); do
  "$capstore" status "$config" --json >"$work/out" 2>"$work/err" || fail "status after exit: $(cat "$work/err")"
  grep -q '"lease_free": true' "$work/out" && break
  sleep 0.1
done
json "$work/out"
expect "${J_catalog_lease_free-}" true "the lease after exit is free"
[[ ${J_catalog_lease_term-0} -ge 1 ]] || fail "the lease was never held"
expect "${J_spool_owner_running-}" false "the spool's owner after exit runs"

# ---- daemon B: a fixed port, JSON on stderr; capstore status asks it ----------------------------------
step "daemon B"
dir=$work/b
config=$odd/b.json
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
write_config "$config" "$dir" "127.0.0.1:$port"
"$capstore" serve "$config" --log-format json 2>"$work/b.log" &
b=$!
daemons+=("$b")
wait_for "$work/b.log" '"event":"listening"'
"$capstore" status "$config" --json >"$work/out" 2>"$work/err" || fail "status of a running daemon: $(cat "$work/err")"
json "$work/out"
expect "${J_pid-} ${J_state-}" "$b serving" "status --json is the daemon's snapshot"
"$capstore" status "$config" >"$work/out" 2>"$work/err" || fail "status (text) of a running daemon"
grep -q "from capstore serve (pid $b" "$work/out" || fail "status text: $(cat "$work/out")"
# A listen address in use (daemon B's), on a spool of its own: opened, then exit 3 naming the address.
write_config "$work/c.json" "$work/c" "127.0.0.1:$port"
"$capstore" serve "$work/c.json" --log "$work/c.log" 2>"$work/err"
expect $? 3 "a listen address in use: exit"
grep -q "127.0.0.1:$port" "$work/err" || fail "a listen address in use is not named: $(cat "$work/err")"
# SIGHUP on stderr: nothing to reopen. SIGINT, then SIGTERM while closing: logged, and the close goes on.
kill -HUP "$b"
wait_for "$work/b.log" '"signal":"SIGHUP","action":"ignored: logging to standard error"' 10
kill -INT "$b"
kill -TERM "$b"
wait_exit "$b" 30
expect "$code" 0 "SIGINT: exit ($(tail -3 "$work/b.log"))"
grep -q '"signal":"SIGTERM","action":"ignored: already closing' "$work/b.log" || fail "the second signal is not logged"
snap "$work/b.log" json
expect "${E_start_config-}" "$config" "JSON log: start config"
expect "${E_listening_addr-}" "127.0.0.1:$port" "JSON log: listening addr"
expect "${N_signal-}" 3 "JSON log: signal events"
expect "${E_close_drained-}" true "JSON log: close drained"
expect "${E_exit_code-}" 0 "JSON log: exit code"

# ---- daemon D: the store down, a pack in the spool: SIGTERM closes undrained, exit 1 naming what is left ----
step "not drained"
dir=$work/d
mkdir -p "$dir/spool"
"$capstore" pack build "$(dirname "$0")/pack_ref/specs/dtypes.json" "$work/raw.pack" >/dev/null || fail "pack build"
name=$("$capstore" pack key "$work/raw.pack" | python3 -c 'import json,sys; m=json.load(sys.stdin)["metadata"]
print("%s.%s.%s.%s.dmi-pack.ready" % (m["dmi-pack-id"], m["dmi-created-at-ns"], m["dmi-record-count"], m["dmi-sha256"]))')
cp "$work/raw.pack" "$dir/spool/$name"
# S3 on a port nothing listens on (no probe at open); the credentials are dummies that must never be logged.
printf '{"spool_dir": "%s/spool", "store": {"s3": {"endpoint": "http://127.0.0.1:1", "bucket": "acts", "allow_insecure": true},
 "probe": false}, "catalog": {"sqlite": "%s/catalog.db"}, "daemon": {"listen": "", "close_timeout": "3s"}}
' \
  "$dir" "$dir" >"$work/d.json"
AWS_ACCESS_KEY_ID=AKIDSERVECLITEST AWS_SECRET_ACCESS_KEY=serve-cli-secret-value \
  "$capstore" serve "$work/d.json" --log "$work/d.log" 2>"$work/d.err" &
d=$!
daemons+=("$d")
wait_for "$work/d.log" "event=error source=service message=\"upload refused" 30
kill -TERM "$d"
wait_exit "$d" 30
expect "$code" 1 "not drained: exit"
snap "$work/d.log" logfmt
expect "${E_close_drained-}" false "not drained: close drained"
expect "${E_close_spool_packs-}" 1 "not drained: close spool_packs"
expect "${E_close_left-}" "1 pack in the spool, 0 owed to the catalog, 1 not handed off" "not drained: close left"
expect "${E_exit_code-}" 1 "not drained: exit event"
grep -q "closed without draining.*left 1 pack in the spool" "$work/d.err" || fail "not drained: stderr: $(cat "$work/d.err")"
[[ -e $dir/spool/$name ]] || fail "not drained: the pack left the spool"
grep -Eq "serve-cli-secret-value|AKIDSERVECLITEST" "$work/d.log" "$work/d.err" && fail "a credential reached the log"

finish serve_cli

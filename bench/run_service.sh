#!/usr/bin/env bash
# The service runtime (capstore.h) end to end, all in one invocation
# (docs/performance.md, "Service runtime"), on a private s3rver + ClickHouse
# 18.16 (tools/servers/*.sh, loopback) and on the embedded defaults (a
# dirstore + SQLite under a temporary folder):
#   1. flush: 12,288 records of 1,792 bytes (bf16 [1,896]) in 3 packs of 4,096;
#      the flush call's time (goal <= 0.2 s) and capture + flush; RUNS runs.
#   2. ship: packs already sealed in a spool to queryable, for 1 MiB packs
#      (64 x 16 KiB) and 64 KiB packs (16 x 4 KiB), against rclone copy of the
#      same files + one POST of the same descriptor rows, first in turn;
#      ratio = peer seconds / ours (goals >= 1.0 and >= 1.5); RUNS runs. Two
#      ways: the runtime opened on the sealed spool (open included), and
#      --live (open excluded; the same records captured, sealed and shipped).
#   3. latency: 2,000 records/s for LATENCY_S seconds, linger 50 and 200 ms,
#      capture -> visible in the catalog, p50/p99 over records.
#   4. backoff: a dead store (and a dead catalog) at a closed port; failed
#      cycles in 3 s after a capture (goal <= 8; the seed's <= 15), 3 runs.
# Every line capstore-bench-service prints is shown as it comes; the tables of
# medians follow at the end.
#
# usage: bench/run_service.sh [BUILD_DIR]     (default: the repo's build)
# env:   RUNS (5), LATENCY_S (8), SHIP_PACKS_1M (200), SHIP_PACKS_64K (400),
#        CAPSTORE_NPM_PREFIX (the s3rver package, as tools/servers/s3.sh), LOG (keep the raw lines there)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
runs=${RUNS:-5}
latency_s=${LATENCY_S:-8}
packs_1m=${SHIP_PACKS_1M:-200}
packs_64k=${SHIP_PACKS_64K:-400}
bench="$build/bench/capstore-bench-service"
if [[ ! -x $bench ]]; then
  ninja -C "$build" capstore-bench-service >/dev/null
fi
for tool in rclone curl; do
  command -v "$tool" >/dev/null || { echo "run_service.sh: $tool not installed (apt-get install $tool)" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/capstore-bench-service.XXXXXX")
servers="$here/../tools/servers"
cleanup() {
  "$servers/clickhouse.sh" stop "$work/clickhouse" >/dev/null 2>&1 || true
  "$servers/s3.sh" stop "$work/s3" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$servers/clickhouse.sh" start "$work/clickhouse" >/dev/null
"$servers/s3.sh" start "$work/s3" >/dev/null
log=${LOG:-$work/lines.txt}
: >"$log"
live=(--s3 "$work/s3/endpoint" --clickhouse "$work/clickhouse/endpoint")
failed=0
run() { "$bench" "$@" --work "$work/runs" | tee -a "$log" || { failed=1; echo "run_service.sh: FAILED: $*" >&2; }; }

started=$(date +%s)
run flush --runs "$runs" "${live[@]}"
run flush --runs "$runs"
for variant in "" --live; do
  run ship --runs "$runs" --packs "$packs_1m" --pack-records 64 --bytes 16384 $variant "${live[@]}"
  run ship --runs "$runs" --packs "$packs_64k" --pack-records 16 --bytes 4096 $variant "${live[@]}"
done
for linger in 50 200; do
  run latency --seconds "$latency_s" --linger-ms "$linger" "${live[@]}"
  run latency --seconds "$latency_s" --linger-ms "$linger"
done
run latency --seconds "$latency_s" --linger-ms 50 --method flush "${live[@]}"
run backoff --dead store "${live[@]}"
run backoff --dead catalog "${live[@]}"

# key=value fields of a line, by name.
field() { awk -v k="$1" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) { print substr($i, length(k) + 2); exit } } }'; }
echo
echo "all in $(($(date +%s) - started)) s; $(nproc) CPUs; medians of $runs runs"
echo
echo "flush: 12,288 records of 1,792 B in 3 packs; seconds (goal: flush_s <= 0.2)"
printf '%-18s %8s %10s %8s %16s\n' backend open_s capture_s flush_s capture+flush_s
grep '^median mode=flush' "$log" | while read -r line; do
  printf '%-18s %8s %10s %8s %16s\n' "$(field backend <<<"$line")" "$(field open_s <<<"$line")" \
    "$(field capture_s <<<"$line")" "$(field flush_s <<<"$line")" "$(field total_s <<<"$line")"
done
echo
echo "ship: to queryable vs rclone copy + one POST of the same packs and rows; ratio = peer_s / ours_s"
echo "  spool: the runtime opened on the sealed spool, open included; live: captured, sealed and shipped, open excluded"
printf '%-8s %-6s %6s %8s %8s %10s %8s %9s %7s %10s %7s %5s\n' pack how packs ours_s open_s ours_pk/s peer_s rclone_s post_s peer_pk/s ratio goal
grep '^median mode=ship' "$log" | while read -r line; do
  bytes=$(field record_bytes <<<"$line")
  label=$([[ $bytes == 16384 ]] && echo "1 MiB" || echo "64 KiB")
  goal=$([[ $bytes == 16384 ]] && echo 1.0 || echo 1.5)
  how=$([[ $(field live <<<"$line") == 1 ]] && echo live || echo spool)
  printf '%-8s %-6s %6s %8s %8s %10s %8s %9s %7s %10s %7s %5s\n' "$label" "$how" "$(field packs <<<"$line")" \
    "$(field ours_s <<<"$line")" "$(field ours_open_s <<<"$line")" "$(field ours_packs_per_s <<<"$line")" \
    "$(field peer_s <<<"$line")" "$(field rclone_s <<<"$line")" "$(field post_s <<<"$line")" \
    "$(field peer_packs_per_s <<<"$line")" "$(field ratio <<<"$line")" "$goal"
done
echo
echo "latency: 2,000 records/s of 1,792 B, capture -> visible in the catalog; ms"
printf '%-18s %-7s %9s %8s %8s %8s %6s\n' backend method linger_ms p50_ms p99_ms max_ms packs
grep '^mode=latency' "$log" | while read -r line; do
  printf '%-18s %-7s %9s %8s %8s %8s %6s\n' "$(field backend <<<"$line")" "$(field method <<<"$line")" \
    "$(field linger_ms <<<"$line")" "$(field p50_ms <<<"$line")" "$(field p99_ms <<<"$line")" \
    "$(field max_ms <<<"$line")" "$(field packs <<<"$line")"
done
echo
echo "backoff: failed cycles in 3 s after capturing into a dead endpoint (goal <= 8; seed <= 15)"
printf '%-26s %-8s %14s %s\n' backend dead cycles_failed "per run (cycles_failed/cycles, requests)"
grep '^median mode=backoff' "$log" | while read -r line; do
  dead=$(field dead <<<"$line")
  per_run=$(grep "^mode=backoff .*dead=$dead " "$log" | awk '{ split($0, a, " "); c = ""; f = ""; r = "";
    for (i in a) { split(a[i], kv, "="); if (kv[1] == "cycles") c = kv[2]; if (kv[1] == "cycles_failed") f = kv[2];
    if (kv[1] == "requests") r = kv[2] } printf "%s/%s,%s ", f, c, r }')
  printf '%-26s %-8s %14s %s\n' "$(field backend <<<"$line")" "$dead" "$(field cycles_failed <<<"$line")" "$per_run"
done
if ((failed)); then
  echo "run_service.sh: some runs failed (see above)" >&2
  exit 1
fi

#!/usr/bin/env bash
# The reader (capstore.h, "Reading back") in one invocation (docs/performance.md, "Reader"):
#   - hydrate: PACKS packs of 4096 records (4-64 KiB) captured by the runtime into a private
#     s3rver (tools/servers/s3.sh) with the SQLite catalog; every 7th record read back by
#     capstore_read, against curl --parallel GETs of exactly the plan's ranges, and one GET
#     per record (capstore_read with gap 0); RUNS runs, medians and ratios;
#   - search: ROWS descriptor rows in SQLite and in a private ClickHouse (tools/servers/clickhouse.sh),
#     capstore_search pages of 1,000 rows (first and deep) of two filters.
# capstore-bench-reader prints every run, the medians and the ratios.
#
# usage: bench/run_reader.sh [BUILD_DIR]     (default: the repo's build)
# env:   RUNS (5), PACKS (40), ROWS (1000000), INFLIGHT (8), BACKENDS ("sqlite clickhouse"),
#        WORK (a temporary folder under TMPDIR)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
runs=${RUNS:-5}
packs=${PACKS:-40}
rows=${ROWS:-1000000}
inflight=${INFLIGHT:-8}
bench="$build/bench/capstore-bench-reader"
if [[ ! -x $bench ]]; then
  ninja -C "$build" capstore-bench-reader >/dev/null
fi
command -v curl >/dev/null || { echo "run_reader.sh: curl not installed" >&2; exit 1; }
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/capstore-bench-reader.XXXXXX")}
mkdir -p "$work"
servers="$here/../tools/servers"
trap '"$servers/s3.sh" stop "$work/s3" >/dev/null 2>&1 || true; "$servers/clickhouse.sh" stop "$work/clickhouse" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$servers/s3.sh" start "$work/s3" >/dev/null

"$bench" hydrate --work "$work/bench" --s3 "$work/s3/endpoint" --packs "$packs" --runs "$runs" --inflight "$inflight"
"$servers/s3.sh" stop "$work/s3" >/dev/null
for backend in ${BACKENDS:-sqlite clickhouse}; do
  case $backend in
    sqlite) "$bench" search --work "$work/bench" --rows "$rows" --runs "$((runs > 7 ? runs : 7))" ;;
    clickhouse)
      "$servers/clickhouse.sh" start "$work/clickhouse" >/dev/null
      "$bench" search --work "$work/bench" --clickhouse "$work/clickhouse/endpoint" --rows "$rows" --runs "$((runs > 7 ? runs : 7))"
      "$servers/clickhouse.sh" stop "$work/clickhouse" >/dev/null
      ;;
  esac
done

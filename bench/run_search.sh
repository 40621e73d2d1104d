#!/usr/bin/env bash
# SEARCH pages through the catalog adapters on a catalog of PACKS x RECORDS
# descriptor rows (docs/performance.md, "Catalog SEARCH"): ClickHouse (a
# private 18.16 server, tools/servers/clickhouse.sh) and SQLite (a database
# under a temporary folder), each filled through its own adapter, then pages
# of PAGE rows timed RUNS times each, and (WALK=1) every page walked.
#
# usage: bench/run_search.sh [BUILD_DIR]     (default: the repo's build)
# env:   PACKS (1000), RECORDS (1000), PAGE (1000), RUNS (7), WALK (1), BACKENDS ("clickhouse"; "sqlite"
#        too, with fewer PACKS: its SEARCH reads every row after the key, 0.4 to 1 s a page at 100,000 rows)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
bench="$build/bench/capstore-bench-search"
if [[ ! -x $bench ]]; then
  ninja -C "$build" capstore-bench-search >/dev/null
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/capstore-bench-search.XXXXXX")
trap '"$here/../tools/servers/clickhouse.sh" stop "$work/clickhouse" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
args=(--packs "${PACKS:-1000}" --records "${RECORDS:-1000}" --page "${PAGE:-1000}" --runs "${RUNS:-7}")
[[ ${WALK:-1} == 1 ]] && args+=(--walk)
for backend in ${BACKENDS:-clickhouse}; do
  case $backend in
    clickhouse)
      "$here/../tools/servers/clickhouse.sh" start "$work/clickhouse" >/dev/null
      "$bench" clickhouse "$work/clickhouse/endpoint" "${args[@]}"
      "$here/../tools/servers/clickhouse.sh" stop "$work/clickhouse" >/dev/null
      ;;
    sqlite)
      mkdir -p "$work/sqlite"
      "$bench" sqlite "$work/sqlite" "${args[@]}"
      ;;
  esac
done

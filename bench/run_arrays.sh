#!/usr/bin/env bash
# Capture arrays (capstore/arrays.h) in one invocation per backend (docs/performance.md, "Capture arrays"):
# progress (two catalog requests) against a LIST of one object per chunk, first against refused second
# writes, block-granular slice reads against whole chunks; on a dirstore + SQLite and on a private S3
# server + ClickHouse (tools/servers); and on the servers only, the fill of one array by one writer and by
# WRITERS writers over a simulated WAN (45 ms each way, 10 MB/s per connection) against one PUT per chunk.
# capstore-bench-arrays prints every run, the medians and the ratios.
#
# usage: bench/run_arrays.sh [BUILD_DIR]     (default: the repo's build)
# env:   RUNS (7), CHUNKS (16384: the progress array's), WRITES (256), SLICE_CHUNKS (16),
#        BACKENDS ("embedded servers"), WORK (a temporary folder under TMPDIR),
#        FILL_RUNS (3), WRITERS (8), FILL_CHUNKS (128), FILL_CHUNK_KIB (128)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
bench="$build/bench/capstore-bench-arrays"
[[ -x $bench ]] || ninja -C "$build" capstore-bench-arrays >/dev/null
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/capstore-bench-arrays.XXXXXX")}
mkdir -p "$work"
servers="$here/../tools/servers"
trap '"$servers/s3.sh" stop "$work/s3" >/dev/null 2>&1 || true; "$servers/clickhouse.sh" stop "$work/clickhouse" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
args=(--runs "${RUNS:-7}")
for backend in ${BACKENDS:-embedded servers}; do
  live=()
  if [[ $backend == servers ]]; then
    "$servers/s3.sh" start "$work/s3" >/dev/null
    "$servers/clickhouse.sh" start "$work/clickhouse" >/dev/null
    live=(--s3 "$work/s3/endpoint" --clickhouse "$work/clickhouse/endpoint")
  fi
  "$bench" progress --work "$work/$backend" "${args[@]}" "${live[@]}" --chunks "${CHUNKS:-16384}"
  "$bench" write --work "$work/$backend" "${args[@]}" "${live[@]}" --writes "${WRITES:-256}"
  "$bench" slice --work "$work/$backend" "${args[@]}" "${live[@]}" --chunks "${SLICE_CHUNKS:-16}"
  if [[ $backend == servers ]]; then
    "$bench" fill --work "$work/$backend" --runs "${FILL_RUNS:-3}" "${live[@]}" --writers "${WRITERS:-8}" \
      --chunks "${FILL_CHUNKS:-128}" --chunk-kib "${FILL_CHUNK_KIB:-128}"
  fi
done

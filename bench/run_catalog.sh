#!/usr/bin/env bash
# The catalog adapters' INDEX rate against the plainest insert of the same
# rows, all in one invocation (docs/performance.md, "Catalog INDEX"):
#   - ClickHouse (a private 18.16 server, tools/servers/clickhouse.sh): the
#     adapter's index() of PACKS packs of RECORDS records, against one HTTP
#     POST of INSERT ... FORMAT TabSeparated of the same rows and against
#     clickhouse-client --time reading them from a file;
#   - SQLite (a database under a temporary folder): the adapter's index()
#     against one prepared INSERT of the same rows in one transaction.
# Each backend runs twice: the packs as one INDEX (one batch, as the service
# sends what fits its byte budget) and one INDEX per pack. RUNS runs each;
# capstore-bench-catalog prints the medians and the ratios (peer seconds /
# adapter seconds: 1.0 is as fast as the peer). Goals: >= 0.5 against the
# ClickHouse POST, >= 0.9 against SQLite's prepared insert.
#
# usage: bench/run_catalog.sh [BUILD_DIR]     (default: the repo's build)
# env:   RUNS (7), PACKS (3), RECORDS (4096)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
runs=${RUNS:-7}
packs=${PACKS:-3}
records=${RECORDS:-4096}
bench="$build/bench/capstore-bench-catalog"
if [[ ! -x $bench ]]; then
  ninja -C "$build" capstore-bench-catalog >/dev/null
fi
command -v clickhouse-client >/dev/null || { echo "run_catalog.sh: clickhouse-client not installed" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/capstore-bench-catalog.XXXXXX")
trap '"$here/../tools/servers/clickhouse.sh" stop "$work/clickhouse" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$here/../tools/servers/clickhouse.sh" start "$work/clickhouse" >/dev/null
tcp_port=$(sed -n 's|.*<tcp_port>\([0-9]*\)</tcp_port>.*|\1|p' "$work/clickhouse/config.xml")
mkdir -p "$work/sqlite"

common=(--packs "$packs" --records "$records" --runs "$runs")
for mode in "" --per-pack; do
  "$bench" clickhouse "$work/clickhouse/endpoint" --tcp-port "$tcp_port" "${common[@]}" $mode
done
for mode in "" --per-pack; do
  "$bench" sqlite "$work/sqlite" "${common[@]}" $mode
done

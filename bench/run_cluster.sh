#!/usr/bin/env bash
# The replicated catalog's cost (issue 18; docs/performance.md, "Replicated
# catalog"): a ClickHouse 18.16 cluster of 3 replicas and ZooKeeper
# (tools/servers/ch_cluster.sh; writes with insert_quorum 3, reads with
# select_sequential_consistency) against one server (tools/servers/clickhouse.sh),
# started side by side on this machine, in one invocation:
#   - INDEX: the adapter's index() of PACKS packs of RECORDS records
#     (capstore-bench-catalog), rows/s;
#   - flush: the service runtime's capture of 12,288 records of 1,792 B and a
#     drained flush (capstore-bench-service flush, dirstore store), seconds;
#     and its open (tables made, lease taken: ON CLUSTER DDL and the barrier).
# Prints each side's medians and the ratios cluster / one server.
#
# usage: bench/run_cluster.sh [BUILD_DIR]     (default: the repo's build)
# env:   RUNS (5), PACKS (3), RECORDS (4096)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
runs=${RUNS:-5}
servers="$here/../tools/servers"
for b in capstore-bench-catalog capstore-bench-service; do
  [[ -x $build/bench/$b ]] || ninja -C "$build" "$b" >/dev/null
done
work=$(mktemp -d "${TMPDIR:-/tmp}/capstore-bench-cluster.XXXXXX")
trap '"$servers/clickhouse.sh" stop "$work/single" >/dev/null 2>&1 || true; "$servers/ch_cluster.sh" stop "$work/cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$servers/clickhouse.sh" start "$work/single" >/dev/null
read -r name replicas < <("$servers/ch_cluster.sh" start "$work/cluster" 3)
quorum=$replicas # every replica (docs/catalog-protocol.md, "Replicated catalog")
mkdir -p "$work/svc"

index() { # ENDPOINT [cluster options]: the adapter's median rows/s
  "$build/bench/capstore-bench-catalog" clickhouse "$@" --packs "${PACKS:-3}" --records "${RECORDS:-4096}" --runs "$runs" |
    tee -a "$work/log" | awk '/^median .*side=adapter/ { for (i = 1; i <= NF; i++) if ($i ~ /^rows_per_s=/) { sub("rows_per_s=", "", $i); print $i } }'
}
flush() { # ENDPOINT [cluster options]: "open_s flush_s" medians
  "$build/bench/capstore-bench-service" flush --work "$work/svc" --clickhouse "$@" --runs "$runs" |
    tee -a "$work/log" | awk '/^median / { for (i = 1; i <= NF; i++) { if ($i ~ /^open_s=/) { sub("open_s=", "", $i); o = $i }
                                                                      if ($i ~ /^flush_s=/) { sub("flush_s=", "", $i); f = $i } }
                                            print o, f }'
}

single_rows=$(index "$work/single/endpoint")
cluster_rows=$(index "$work/cluster/r1/endpoint" --cluster "$name" --quorum "$quorum")
read -r single_open single_flush < <(flush "$work/single/endpoint")
read -r cluster_open cluster_flush < <(flush "$work/cluster/r1/endpoint" --ch-cluster "$name" --ch-quorum "$quorum")

echo "index rows/s (median of $runs): one server $single_rows, $replicas replicas (quorum $quorum) $cluster_rows," \
     "ratio cluster/one $(awk -v a="$cluster_rows" -v b="$single_rows" 'BEGIN { printf "%.2f", a / b }')"
echo "flush s (median of $runs): one server $single_flush, $replicas replicas $cluster_flush," \
     "ratio cluster/one $(awk -v a="$cluster_flush" -v b="$single_flush" 'BEGIN { printf "%.2f", a / b }')"
echo "open s (tables and lease): one server $single_open, $replicas replicas $cluster_open," \
     "ratio cluster/one $(awk -v a="$cluster_open" -v b="$single_open" 'BEGIN { printf "%.2f", a / b }')"

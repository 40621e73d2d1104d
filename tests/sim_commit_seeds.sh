#!/bin/sh
# Swarm seeds that move with the commit: besides the fixed seeds of sim.seeds,
# each commit runs its own window of N seeds, so CI covers more of the seed
# space over time. The window is printed first, and a failure prints its
# replay line, so any failure replays from one command line.
#
#   sim_commit_seeds.sh CAPSTORE_SIM SOURCE_DIR N
#
# The window starts at 1,000,000,000 + (the commit's first 8 hex digits) x N:
# far from the fixed seeds (1..2,000 and 424,242..) and from the campaign
# ranges recorded in docs/simulator.md. CAPSTORE_SIM_FIRST overrides it (to
# rerun another commit's window); outside a git checkout it is the window of
# commit 00000000.
set -eu
sim=$1 src=$2 n=$3
if [ -n "${CAPSTORE_SIM_FIRST:-}" ]; then
  first=$CAPSTORE_SIM_FIRST; from="CAPSTORE_SIM_FIRST"
else
  commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo 0000000000000000000000000000000000000000)
  first=$((1000000000 + 0x$(echo "$commit" | cut -c1-8) * n)); from="commit $commit"
fi
echo "commit seeds: $n seeds from $first ($from): capstore-sim --seeds $n --first $first"
exec "$sim" --seeds "$n" --first "$first" --quiet

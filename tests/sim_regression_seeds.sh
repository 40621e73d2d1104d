#!/bin/sh
# Replays every seed of faults/seeds.txt: each must pass.
# usage: sim_regression_seeds.sh SIM SEEDS_FILE
set -u
sim=$1; list=$2
failed=0; n=0
for seed in $(sed -e 's/#.*//' "$list" | awk 'NF { print $1 }'); do
  n=$((n + 1))
  out=$("$sim" --seed "$seed" 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "$out" | grep -E '^(FAIL|replay)' | head -3
    failed=$((failed + 1))
  fi
done
echo "$n regression seeds, $failed failed"
[ "$failed" -eq 0 ]

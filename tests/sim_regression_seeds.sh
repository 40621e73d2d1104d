#!/bin/sh
# Replays every seed of faults/seeds.txt (with the options written
# after it): each must pass.
# usage: sim_regression_seeds.sh SIM SEEDS_FILE
set -u
sim=$1; list=$2
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
# One line a seed: the seed, then its option pairs ("--without NAME", "--replicas N", ...).
sed -e 's/#.*//' "$list" |
  awk 'NF { s = $1; for (i = 2; i < NF && $i ~ /^--/; i += 2) s = s " " $i " " $(i + 1); print s }' > "$tmp"
failed=0; n=0
while read -r seed opts; do
  n=$((n + 1))
  # shellcheck disable=SC2086 # the options are words
  out=$("$sim" --seed "$seed" $opts 2>&1 < /dev/null)
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "$out" | grep -E '^(FAIL|replay)' | head -3
    failed=$((failed + 1))
  fi
done < "$tmp"
echo "$n regression seeds, $failed failed"
[ "$n" -gt 0 ] && [ "$failed" -eq 0 ]

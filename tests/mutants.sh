#!/bin/sh
# Each mutant (a core re-introducing one known defect) must be caught within
# SEEDS swarm seeds, by one of the fault plans or by a regression seed (faults/seeds.txt); the unmutated simulator
# passes the same seeds and plans in sim.seeds and sim.plan.*.
# usage: mutants.sh BIN_DIR PLAN_DIR SEEDS M1 M2 ...
set -u
bindir=$1; plans=$2; seeds=$3; shift 3
missed=0
[ $# -gt 0 ] || { echo "no mutants given"; exit 1; }
regress=$(mktemp); trap 'rm -f "$regress"' EXIT
# One line a regression seed: the seed, then its option pairs ("--without NAME", "--replicas N", ...).
sed -e 's/#.*//' "$plans/../seeds.txt" 2>/dev/null |
  awk 'NF { s = $1; for (i = 2; i < NF && $i ~ /^--/; i += 2) s = s " " $i " " $(i + 1); print s }' > "$regress"
printf '%-8s %-22s %s\n' mutant "swarm seeds to catch" "plans that catch it"
for m in "$@"; do
  sim="$bindir/capstore-sim-m$m"
  [ -x "$sim" ] || { echo "missing $sim"; exit 1; }
  out=$("$sim" --seeds "$seeds" --quiet --stop-on-failure 2>/dev/null)
  if echo "$out" | grep -q "kind=model_bound"; then echo "m$m hit a simulator table bound: not a finding"; echo "$out" | grep FAIL; exit 1; fi
  first=$(echo "$out" | sed -n 's/^first failure at seed [0-9]* after \([0-9]*\) seeds$/\1/p')
  [ -n "$first" ] || first="not in $seeds"
  caught_by=""
  # The regression seeds (faults/seeds.txt, next to the plans, with the --without options after each) catch it too.
  while read -r seed opts; do
    # shellcheck disable=SC2086 # the options are words
    "$sim" --seed "$seed" $opts >/dev/null 2>&1 < /dev/null
    case $? in
      3|4|5|6) caught_by="$caught_by seed $seed"; break ;;
    esac
  done < "$regress"
  for p in "$plans"/*.plan; do
    "$sim" --plan "$p" >/dev/null 2>&1
    rc=$?
    # 3 crash, 4 safety, 5 liveness, 6 a plan expectation: caught. 2 (usage) and 7 (a
    # simulator table bound) are not findings.
    case $rc in
      0) ;;
      3|4|5|6) caught_by="$caught_by $(basename "$p" .plan)" ;;
      *) echo "m$m on $p exited $rc: not a finding"; exit 1 ;;
    esac
  done
  printf 'm%-7s %-22s %s\n' "$m" "$first" "${caught_by:- none}"
  case "$first" in not*) [ -n "$caught_by" ] || missed=$((missed + 1)) ;; esac
done
if [ "$missed" -ne 0 ]; then echo "$missed mutant(s) survived"; exit 1; fi
echo "every mutant was caught"

#!/bin/sh
# The reader invariants can fail: with each of the readers' defects
# (--reader-defect N, sim/sim.h SIM_READER_DEFECT_*) the swarm must fail a
# seed within SEEDS, with a safety failure naming reader invariant N; the
# same seeds pass without the defect (sim.seeds).
# usage: sim_reader_defects.sh CAPSTORE_SIM SEEDS
set -u
sim=$1; seeds=$2
missed=0
for d in 1 2 3 4; do
  out=$("$sim" --seeds "$seeds" --quiet --stop-on-failure --reader-defect "$d" 2>/dev/null)
  line=$(echo "$out" | grep '^FAIL' | head -1)
  first=$(echo "$out" | sed -n 's/^first failure at seed \([0-9]*\) after .*/\1/p')
  case "$line" in
    *"kind=safety"*"(reader $d: "*) echo "reader defect $d: caught at seed $first: ${line#*: }" ;;
    "") echo "reader defect $d: not caught in $seeds seeds"; missed=$((missed + 1)) ;;
    *) echo "reader defect $d: caught by something else: $line"; missed=$((missed + 1)) ;;
  esac
done
[ "$missed" -eq 0 ] || { echo "$missed reader defect(s) not caught by their invariant"; exit 1; }
echo "every reader defect was caught by its invariant"

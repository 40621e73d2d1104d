#!/bin/sh
# A catalog of replicas (sim/replicas.c, docs/simulator.md "Replicated
# catalog"): the swarm with every seed on 2 and on 3 replicas passes SEEDS
# seeds, and without the quorum (--replica-defect 1: asynchronous
# replication, each replica its own view) it must fail a seed within SEEDS
# with a safety failure of the lease or the fence (two holders of a term, a
# holder's lease taken, a write past its fence while another holds the term,
# a version published twice); with parallel quorum writes (--replica-defect 3,
# insert_quorum_parallel=1) it must fail with rows of a predecessor landing
# under a successor's watermark (or a version published twice).
# usage: sim_replica_defects.sh CAPSTORE_SIM SEEDS
set -u
sim=$1; seeds=$2
bad=0

# caught REPLICAS DEFECT WHAT PATTERN...: the defect fails a seed with a safety failure matching a pattern.
caught() {
  r=$1; defect=$2; what=$3; shift 3
  out=$("$sim" --seeds "$seeds" --quiet --stop-on-failure --replicas "$r" --replica-defect "$defect" 2>/dev/null)
  line=$(echo "$out" | grep '^FAIL' | head -1)
  first=$(echo "$out" | sed -n 's/^first failure at seed \([0-9]*\) after .*/\1/p')
  if [ -z "$line" ]; then
    echo "$r replicas $what: not caught in $seeds seeds"; bad=$((bad + 1)); return
  fi
  for pattern in "$@"; do
    case "$line" in
      *"kind=safety"*"$pattern"*) echo "$r replicas $what: caught at seed $first: ${line#*: }"; return ;;
    esac
  done
  echo "$r replicas $what: caught by something else: $line"; bad=$((bad + 1))
}

for r in 2 3; do
  out=$("$sim" --seeds "$seeds" --quiet --replicas "$r" 2>/dev/null); rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$r replicas: $seeds seeds did not all pass (exit $rc):"; echo "$out" | grep '^FAIL\|^replay' | head -6
    bad=$((bad + 1))
  else
    echo "$r replicas: $seeds seeds pass"
  fi
  caught "$r" 1 "without the quorum" "holds term" "took the lease from" "published twice"
  caught "$r" 3 "with parallel quorum writes" "landed at or below the watermark" "published twice"
done
[ "$bad" -eq 0 ] || { echo "sim.replica_defects: $bad check(s) failed"; exit 1; }
echo "sim.replica_defects: the quorum runs pass; asynchronous replication and parallel quorum writes are caught"

#!/bin/sh
# Coverage marks (sim/coverage.h): CI's swarm seeds must reach every required
# mark, and counting them must not change a run.
# usage: sim_coverage.sh CAPSTORE_SIM SEEDS PLANS_DIR
# The required marks are measured on seeds 1..2000 (sim.seeds' count): with
# fewer seeds (the sanitizer build runs 300) the report is printed, not required.
set -eu
sim=$1; seeds=$2; plans=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
results='seed=[0-9]* result=[a-z]* events=[0-9]* sim_time=[0-9.]*s trace=[0-9a-f]*'

# 1. The seeds reach every required mark; the report names any that no seed reached.
mode=--require-coverage
[ "$seeds" -lt 2000 ] && mode=--coverage
rc=0
"$sim" --seeds "$seeds" "$mode" > "$tmp/cov" 2>/dev/null || rc=$?
grep '^coverage: never reached' "$tmp/cov" || true
grep '^coverage: .* runs reached' "$tmp/cov"
if [ "$rc" -ne 0 ]; then
  grep '^FAIL\|^replay' "$tmp/cov" | head -20
  echo "sim.coverage: exit $rc: $(grep -c '(required)$' "$tmp/cov") required marks never reached in $seeds seeds (or a seed failed)"
  exit 1
fi

# 2. Counting changes nothing: the same seeds without --coverage give the same trace hashes.
n=200; [ "$seeds" -lt "$n" ] && n=$seeds
"$sim" --seeds "$n" > "$tmp/plain" 2>/dev/null || true
grep -o "$results" "$tmp/plain" > "$tmp/hp"
grep -o "$results" "$tmp/cov" | head -n "$n" > "$tmp/hc"
if [ "$(wc -l < "$tmp/hp")" -ne "$n" ] || ! cmp -s "$tmp/hp" "$tmp/hc"; then
  echo "sim.coverage: --coverage changed the trace hashes:"; diff "$tmp/hp" "$tmp/hc" | head; exit 1
fi

# 3. Its negative twin: one seed cannot reach every required mark, and the report says which.
rc=0
"$sim" --seed 1 --require-coverage > "$tmp/one" 2>/dev/null || rc=$?
if [ "$rc" -ne 8 ] || ! grep -q '^coverage: never reached: [a-z0-9_]* (required)$' "$tmp/one"; then
  echo "sim.coverage: one seed with --require-coverage exited $rc without naming a required mark"; exit 1
fi

# 4. A plan expects a mark as the counter cov_NAME, and the expectation can fail.
sed '/^expect/d' "$plans/batch_splits.plan" > "$tmp/p.plan"
cp "$tmp/p.plan" "$tmp/q.plan"
echo 'expect cov_sit_batch_split >= 1' >> "$tmp/p.plan"
echo 'expect cov_sit_batch_split = 0' >> "$tmp/q.plan"
"$sim" --plan "$tmp/p.plan" > "$tmp/pp" || { cat "$tmp/pp"; echo "sim.coverage: plan counter cov_sit_batch_split >= 1 failed"; exit 1; }
rc=0
"$sim" --plan "$tmp/q.plan" > "$tmp/pq" || rc=$?
if [ "$rc" -ne 6 ]; then echo "sim.coverage: a plan expecting cov_sit_batch_split = 0 exited $rc, not 6"; exit 1; fi
[ "$mode" = --coverage ] && echo "sim.coverage: $seeds seeds are fewer than the 2000 the required marks are measured on: not required"
echo "sim.coverage: $seeds seeds pass ($mode); --coverage leaves $n trace hashes unchanged"

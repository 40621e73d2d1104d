#!/bin/sh
# Runs a sample of swarm seeds twice and requires identical trace hashes.
# usage: sim_determinism.sh CAPSTORE_SIM COUNT
set -eu
sim=$1; count=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Spread the sample over the seed space, not just 1..count.
"$sim" --seeds "$count" --first 1000003 > "$tmp/a" 2>/dev/null || true
"$sim" --seeds "$count" --first 1000003 > "$tmp/b" 2>/dev/null || true
grep -o 'seed=[0-9]* result=[a-z]* events=[0-9]* sim_time=[0-9.]*s trace=[0-9a-f]*' "$tmp/a" > "$tmp/ha"
grep -o 'seed=[0-9]* result=[a-z]* events=[0-9]* sim_time=[0-9.]*s trace=[0-9a-f]*' "$tmp/b" > "$tmp/hb"
n=$(wc -l < "$tmp/ha")
if [ "$n" -ne "$count" ]; then echo "expected $count result lines, got $n"; exit 1; fi
if ! cmp -s "$tmp/ha" "$tmp/hb"; then
  echo "trace hashes differ between two runs of the same seeds:"; diff "$tmp/ha" "$tmp/hb" | head; exit 1
fi
# And one seed with --trace gives the same hash as without it.
s=$(head -1 "$tmp/ha" | sed 's/seed=\([0-9]*\).*/\1/')
h1=$("$sim" --seed "$s" | grep -o 'trace=[0-9a-f]*')
h2=$("$sim" --seed "$s" --trace | grep -o 'trace=[0-9a-f]*' | tail -1)
if [ "$h1" != "$h2" ]; then echo "--trace changes the trace hash of seed $s ($h1 vs $h2)"; exit 1; fi
echo "determinism: $count seeds run twice, all trace hashes equal; --trace does not change seed $s's hash"

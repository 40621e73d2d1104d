#!/bin/sh
# A bad plan is refused with the line number; an unknown setting or counter is named.
set -u
sim=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'at 1s catalog cut for=2s\nat 2s catalog cut fro=2s\n' > "$tmp/bad.plan"
out=$("$sim" --plan "$tmp/bad.plan" 2>&1); rc=$?
[ $rc -eq 2 ] || { echo "exit $rc, want 2: $out"; exit 1; }
echo "$out" | grep -q "line 2" || { echo "no line number: $out"; exit 1; }
printf 'set no_such_setting 3\nend 1s\n' > "$tmp/set.plan"
out=$("$sim" --plan "$tmp/set.plan" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "no_such_setting" || { echo "unknown setting not named (exit $rc): $out"; exit 1; }
printf 'end 1s\nexpect no_such_counter = 1\n' > "$tmp/exp.plan"
out=$("$sim" --plan "$tmp/exp.plan" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "no_such_counter" || { echo "unknown counter not named (exit $rc): $out"; exit 1; }
printf 'at 0s seal count=1\nend 10s\nexpect indexed = 2\n' > "$tmp/fail.plan"
out=$("$sim" --plan "$tmp/fail.plan" 2>&1); rc=$?
[ $rc -eq 6 ] && echo "$out" | grep -q "expected indexed = 2, got 1" || { echo "failed expectation not reported (exit $rc): $out"; exit 1; }
echo "bad plans refused with line numbers and names; a failed expectation exits 6"

#!/usr/bin/env bash
# `capstore demo`: captures from several threads on the embedded defaults,
# flushes and reads every record back through the catalog. Two runs in one
# directory (the second also finds the first's records and still checks only
# its own), the table a person reads, and refusals: bad options (exit 2) and
# a directory that cannot be made (exit 1, named).
# Replay: tests/demo_cli.sh CAPSTORE WORKDIR FLIP_SHIM
set -uo pipefail
capstore=$1
work=$2
shim=$3
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"

run() {
  "$capstore" demo "$@" >"$work/out" 2>"$work/err"
  status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  printf '$ capstore demo %s  (exit %d)\n%s\n%s\n' "$*" "$status" "$out" "$err"
}
expect_status() { [[ $status == "$1" ]] || fail "$2: exit $status, expected $1"; }
expect_out() { grep -q -- "$1" <<<"$out" || fail "$2: stdout lacks '$1'"; }
expect_err() { grep -q -- "$1" <<<"$err" || fail "$2: stderr lacks '$1'"; }

# 3 threads x 300 records: mixed dtypes, scalars, empty tensors and three 1 MiB blocks per thread.
run --dir "$work/d" --threads 3 --records 300
expect_status 0 "first run"
expect_out "900 of 900 records equal" "first run"
expect_out "3 threads captured 900 records" "first run"
expect_out "flush .* every record queryable" "first run"
expect_out "capstore spool list $work/d/spool" "first run names the next commands"
grep -q "also in the catalog" <<<"$out" && fail "first run: found records of earlier runs in a new directory"
[[ -z $err ]] || fail "first run: stderr not empty without a terminal"
[[ -z $(ls -A "$work/d/spool" | grep '\.dmi-pack$') ]] || fail "the spool still holds packs after a drained run"

run --dir "$work/d" --threads 2 --records 100
expect_status 0 "second run"
expect_out "200 of 200 records equal" "second run"
expect_out "also in the catalog .*900 records of earlier runs" "second run"

# A store that returns other bytes than it stored (tests/demo_flip_shim.c): the read-back must fail, naming a record.
# (In a sanitizer build the shim loads before the ASan runtime, which then must not insist on coming first.)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 LD_PRELOAD=$shim \
  "$capstore" demo --dir "$work/lies" --threads 2 --records 100 >"$work/out" 2>"$work/err"
status=$?
printf '$ LD_PRELOAD=demo_flip_shim capstore demo ...  (exit %d)\n%s\n' "$status" "$(cat "$work/err")"
[[ $status == 1 ]] || fail "a lying store: exit $status, expected 1"
grep -q "read-back: .* of 200 records equal, [1-9][0-9]* differed" "$work/err" || fail "a lying store: no count of differing records"
grep -q "CRC-32 differs from the catalog's" "$work/err" || fail "a lying store: the first difference is not named"
grep -q "200 of 200 records equal" "$work/out" && fail "a lying store: the table reports every record equal"
grep -q "^next:" "$work/out" && fail "a lying store: next steps offered after a failed read-back"

run --dir "$work/d" --records 50 --quiet
expect_status 0 "quiet run"
[[ -z $out && -z $err ]] || fail "--quiet printed something"

# Every command's --help reads like a man page: on stdout, exit 0, a synopsis, the exit status, an example.
commands=$("$capstore" --help | awk '/^commands:/{on=1; next} /^$/{on=0} on{print $1}')
[[ $(wc -w <<<"$commands") -ge 6 ]] || fail "capstore --help lists: $commands"
for c in $commands; do
  "$capstore" "$c" --help >"$work/help" 2>&1 || fail "capstore $c --help: exit $?"
  for want in "usage: capstore $c" "exit status" "example"; do
    grep -q "$want" "$work/help" || fail "capstore $c --help lacks '$want'"
  done
done
"$capstore" --version | grep -Eq '^capstore [0-9]+\.[0-9]+\.[0-9]+' || fail "capstore --version"

run --help
expect_status 0 "--help"
expect_out "usage: capstore demo" "--help"
expect_out "exit status" "--help"

for bad in "--threads 0" "--threads 65" "--records -1" "--records 1x" "--bogus" "--dir"; do
  # shellcheck disable=SC2086
  run $bad
  expect_status 2 "$bad"
  [[ -n $err ]] || fail "$bad: no message"
done
run --threads 0
expect_err "'0' is not a whole number from 1 to 64" "--threads 0 names the rule"

touch "$work/file"
run --dir "$work/file/sub" --records 10
expect_status 1 "a directory under a regular file"
expect_err "cannot create $work/file/sub" "a directory under a regular file"

finish demo_cli

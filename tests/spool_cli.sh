#!/usr/bin/env bash
# `capstore spool list|check|sweep` on a real spool made by the capture sink
# (tests/spool_cli_fixture.c): a corrupted pack that check quarantines, a
# stale temp file that sweep removes, and a second owner refused while a
# holder keeps the lock; a pack another user owns (mode 0600), which check
# keeps and names and the sink starts beside; and a large valid pack checked
# under `ulimit -v` limits, which is never quarantined for want of memory.
# Replay: tests/spool_cli.sh CAPSTORE FIXTURE WORKDIR
set -uo pipefail
capstore=$1
fixture=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
dir="$work/spool"
failures=0
holder=

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
unreadable_root=
cleanup() {
  [[ -n $holder ]] && kill "$holder" 2>/dev/null
  wait 2>/dev/null
  [[ -n $unreadable_root ]] && rm -rf "$unreadable_root"
}
trap cleanup EXIT

# Runs capstore spool ARGS; keeps stdout, stderr and the exit status.
run() {
  "$capstore" spool "$@" >"$work/out" 2>"$work/err"
  status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  printf '$ capstore spool %s  (exit %d)\n%s\n%s\n' "$*" "$status" "$out" "$err"
}
expect_status() { [[ $status == "$1" ]] || fail "$2: exit $status, expected $1"; }
expect_out() { grep -q -- "$1" <<<"$out" || fail "$2: stdout lacks '$1'"; }
expect_err() { grep -q -- "$1" <<<"$err" || fail "$2: stderr lacks '$1'"; }

"$fixture" make "$dir" || { echo "FAIL: the fixture could not make the spool"; exit 1; }
mapfile -t packs < <(cd "$dir" && ls -- *.dmi-pack.ready)
[[ ${#packs[@]} == 3 ]] || { echo "FAIL: expected 3 sealed packs, found ${#packs[@]}"; exit 1; }

run list "$dir"
expect_status 0 "list"
expect_out "3 ready" "list"
expect_out "1 in progress" "list"
[[ $(grep -c '^ready ' <<<"$out") == 3 ]] || fail "list: expected 3 ready lines"

# Corrupt one payload byte of the second pack (payloads are 0x11; offset 100 is in the first).
victim=${packs[1]}
printf '\xee' | dd of="$dir/$victim" bs=1 seek=100 conv=notrunc status=none

# A second owner holds the lock: check and sweep are refused, naming its pid.
"$fixture" hold "$dir" 30 >"$work/held" &
holder=$!
for _ in $(seq 100); do grep -q holding "$work/held" 2>/dev/null && break; sleep 0.1; done
grep -q "holding $holder" "$work/held" || fail "the holder did not take the lock"
run check "$dir"
expect_status 1 "check while held"
expect_err "pid $holder" "check while held"
run sweep "$dir"
expect_status 1 "sweep while held"
expect_err "pid $holder" "sweep while held"
[[ -e $dir/$victim ]] || fail "check while held touched the corrupt pack"
run list "$dir"
expect_status 0 "list while held"
kill "$holder"
wait "$holder" 2>/dev/null
holder=

run check "$dir"
expect_status 3 "check"
expect_out "quarantined  $victim.quarantined" "check"
expect_out "payload_crc" "check"
expect_out "2 verified" "check"
expect_out "1 quarantined" "check"
[[ -e $dir/$victim.quarantined && ! -e $dir/$victim ]] || fail "check did not quarantine $victim"

run list "$dir"
expect_status 0 "list after check"
expect_out "2 ready" "list after check"
expect_out "1 quarantined" "list after check"
expect_out "reason: .*payload_crc" "list after check"

run check "$dir"
expect_status 0 "second check"
expect_out "0 quarantined" "second check"

run sweep "$dir"
expect_status 0 "sweep"
expect_out "removed 1 stale" "sweep"
run list "$dir"
expect_out "0 in progress" "list after sweep"

# A symlink planted under a ready name: list names it as no pack, check
# quarantines it (without following it) and the rest of the spool is checked
# as usual; a dot file ending in .open that is not a temp file's name is
# neither counted as in progress nor removed by sweep.
planted="01a22f9b-6851-77c0-9f30-5cf37326eb02.1.1.$(printf 'c%.0s' {1..64}).dmi-pack.ready"
ln -s /nonexistent "$dir/$planted"
touch "$dir/.not-a-temp.open"
run list "$dir"
expect_status 0 "list with a planted link"
expect_out "not a pack   $planted" "list with a planted link"
expect_out "2 ready" "list with a planted link"
expect_out "0 in progress" "list with a planted link"
run sweep "$dir"
expect_status 0 "sweep with a planted link"
expect_out "removed 0 stale" "sweep with a planted link"
[[ -e $dir/.not-a-temp.open ]] || fail "sweep removed a file that is not a temp file"
run check "$dir"
expect_status 3 "check with a planted link"
expect_out "symbolic link" "check with a planted link"
expect_out "2 verified" "check with a planted link"
[[ -L $dir/$planted.quarantined && ! -e $dir/$planted ]] || fail "check did not quarantine the link"

# FIFOs never block: one under a ready name is quarantined; one planted
# where a quarantined pack's reason goes fails that reason's write (check
# exits 1 naming it) instead of hanging check, and list does not read it.
fifo_pack="01a22f9b-6851-77c0-9f30-5cf37326eb03.1.1.$(printf 'd%.0s' {1..64}).dmi-pack.ready"
mkfifo "$dir/$fifo_pack"
dir_pack="01a22f9b-6851-77c0-9f30-5cf37326eb04.1.1.$(printf 'e%.0s' {1..64}).dmi-pack.ready"
mkdir "$dir/$dir_pack"
mkfifo "$dir/$dir_pack.quarantined.reason"
"$capstore" spool check "$dir" >"$work/out" 2>"$work/err" &
checker=$!
for _ in $(seq 200); do kill -0 "$checker" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$checker" 2>/dev/null; then
  kill "$checker"
  fail "check hung on a FIFO"
fi
wait "$checker"
status=$?
out=$(cat "$work/out")
err=$(cat "$work/err")
printf '$ capstore spool check %s  (exit %d)\n%s\n%s\n' "$dir" "$status" "$out" "$err"
expect_status 1 "check with FIFOs"
expect_out "is a FIFO, not a regular file" "check with FIFOs"
expect_err "$dir_pack.quarantined.reason" "check with FIFOs"
[[ -e $dir/$fifo_pack.quarantined ]] || fail "check did not quarantine the FIFO"
run list "$dir"
expect_status 0 "list with a FIFO reason"
expect_out "no reason recorded" "list with a FIFO reason"

# A ready pack this user cannot read (another owner's, mode 0600) is no
# verdict on its bytes: check keeps it in place and names it, and the sink
# starts beside it. Root reads any file, so as root the spool is made and
# checked as nobody with one pack handed to root.
as_user=()
unreadable_dir="$work/unreadable"
u_fixture=$fixture
u_capstore=$capstore
if [[ $(id -u) == 0 ]]; then
  if command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
    as_user=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
    # nobody may not be able to reach the build tree (a clone under a 0700
    # directory): the spool and copies of both programs go where it can.
    unreadable_root=$(mktemp -d /tmp/capstore-spool-cli.XXXXXX)
    chmod 0755 "$unreadable_root"
    unreadable_dir="$unreadable_root/unreadable"
    u_fixture="$unreadable_root/spool_cli_fixture"
    u_capstore="$unreadable_root/capstore"
    cp "$fixture" "$u_fixture" && cp "$capstore" "$u_capstore" && chmod 0755 "$u_fixture" "$u_capstore"
    mkdir -p "$unreadable_dir" && chown nobody "$unreadable_dir"
  else
    unreadable_dir=
    echo "SKIP: the unreadable pack (running as root without setpriv or a user nobody)"
  fi
fi
if [[ -n $unreadable_dir ]]; then
  "${as_user[@]}" "$u_fixture" make "$unreadable_dir/spool" || fail "the fixture could not make the spool as ${as_user[*]:-$(id -un)}"
  mapfile -t upacks < <(cd "$unreadable_dir/spool" && ls -- *.dmi-pack.ready)
  locked=${upacks[0]}
  if [[ $(id -u) == 0 ]]; then chown root:root "$unreadable_dir/spool/$locked"; fi
  chmod 0600 "$unreadable_dir/spool/$locked"
  [[ $(id -u) == 0 ]] || chmod 0000 "$unreadable_dir/spool/$locked"
  "${as_user[@]}" "$u_capstore" spool check "$unreadable_dir/spool" >"$work/out" 2>"$work/err"
  status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  printf '$ capstore spool check %s  (exit %d)\n%s\n%s\n' "$unreadable_dir/spool" "$status" "$out" "$err"
  expect_status 1 "check with an unreadable pack"
  expect_out "kept         $locked" "check with an unreadable pack"
  expect_out "not checked: it could not be read" "check with an unreadable pack"
  expect_out "Permission denied" "check with an unreadable pack"
  expect_out "2 verified" "check with an unreadable pack"
  expect_out "0 quarantined, 1 kept in place" "check with an unreadable pack"
  expect_err "Permission denied" "check with an unreadable pack"
  [[ -e $unreadable_dir/spool/$locked && ! -e $unreadable_dir/spool/$locked.quarantined ]] ||
    fail "check moved the unreadable pack"
  "${as_user[@]}" "$u_fixture" reopen "$unreadable_dir/spool" >"$work/out" 2>"$work/err"
  status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  printf '$ spool_cli_fixture reopen %s  (exit %d)\n%s\n%s\n' "$unreadable_dir/spool" "$status" "$out" "$err"
  expect_status 0 "the sink beside an unreadable pack"
  expect_out "quarantined 0, kept 1" "the sink beside an unreadable pack"
  expect_out "Permission denied" "the sink beside an unreadable pack"
  [[ -e $unreadable_dir/spool/$locked ]] || fail "the sink moved the unreadable pack"
  [[ $(cd "$unreadable_dir/spool" && ls -- *.dmi-pack.ready | wc -l) == 4 ]] || fail "the sink did not capture beside it"
fi

# Out of memory is no verdict on a pack's bytes. A large valid pack (5,000
# records: a 2.6 MB footer) is checked under address-space limits from the
# least that capstore loads under, up in 4 MiB steps until it verifies: no limit may quarantine it or crash
# check, a check short of memory keeps it and says so, and some limit must
# have made the footer's parse run short (else this proved nothing).
big="$work/big"
"$fixture" big "$big" 5000 || fail "the fixture could not make the large pack"
if ! (ulimit -v $((1024 * 1024)); "$capstore" spool list "$big" >/dev/null 2>&1); then
  echo "SKIP: ulimit -v: capstore does not run under a 1 GiB address-space limit (a sanitizer build)"
else
  # The limits start where the program itself loads (its shared libraries take
  # address space before main runs): below that the loader, not check, fails.
  floor=16
  while ((floor < 1024)) && ! (ulimit -v $((floor * 1024)); "$capstore" --help >/dev/null 2>&1); do
    floor=$((floor + 4))
  done
  short=0
  verified=0
  for ((mib = floor; mib <= 1024 && verified == 0; mib += 4)); do
    (ulimit -v $((mib * 1024)); exec "$capstore" spool check "$big") >"$work/out" 2>"$work/err"
    status=$?
    out=$(cat "$work/out")
    err=$(cat "$work/err")
    bad=
    if [[ $status == 0 ]]; then
      verified=$mib
    elif [[ $status == 1 ]] && grep -q "not checked: out of memory" <<<"$out"; then
      short=$((short + 1))
    elif [[ $status != 1 ]] || ! grep -qi "memory" <<<"$out$err"; then
      bad="exit $status without saying it ran out of memory"
    fi
    if compgen -G "$big/*.quarantined" >/dev/null || ! compgen -G "$big/*.dmi-pack.ready" >/dev/null; then
      bad="it quarantined the large valid pack"
    fi
    if [[ -n $bad ]]; then
      printf '$ (ulimit -v %d MiB) capstore spool check %s  (exit %d)\n%s\n%s\n' "$mib" "$big" "$status" "$out" "$err"
      fail "check under $mib MiB: $bad"
      break
    fi
  done
  echo "large pack: capstore loads from $floor MiB, kept for want of memory under $short limits, verified from $verified MiB"
  ((verified > 0)) || fail "the large pack never verified"
  ((short > 0)) || fail "no limit made the footer's parse run short of memory"
fi

run check "$work/missing"
expect_status 1 "check of a missing directory"
expect_err "No such file or directory" "check of a missing directory"
run frobnicate "$dir"
expect_status 2 "unknown subcommand"

if ((failures > 0)); then
  echo "spool_cli: $failures checks failed"
  exit 1
fi
echo "spool_cli: every check passed"

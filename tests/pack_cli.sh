#!/usr/bin/env bash
# `capstore pack build|verify|info|key` against hostile paths: a planted
# OUT.tmp link, payload files outside the spec's directory (absolute, `..`,
# a symbolic link leading out, a payload swapped for a link while the build
# runs) and FIFOs where a pack should be.
# Replay: tests/pack_cli.sh CAPSTORE WORKDIR RACE_SHIM (tests/pack_race_shim.c, built)
set -uo pipefail
capstore=$(realpath "$1")
work=$(realpath -m "$2")
shim=$(realpath "$3")
rm -rf "$work"
mkdir -p "$work"
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Runs capstore pack ARGS under a time limit (a hang is a failure, exit 124);
# keeps stdout, stderr and the exit status.
run() {
  timeout 10 "$capstore" pack "$@" >"$work/out" 2>"$work/err"
  status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  printf '$ capstore pack %s  (exit %d)\n%s\n%s\n' "$*" "$status" "$out" "$err"
}
expect_status() { [[ $status == "$1" ]] || fail "$2: exit $status, expected $1"; }
expect_out() { grep -qF -- "$1" <<<"$out" || fail "$2: stdout lacks '$1'"; }
expect_err() { grep -qF -- "$1" <<<"$err" || fail "$2: stderr lacks '$1'"; }

# A spec of one 4-byte uint8 record whose payload is the file named $2.
write_spec() {
  cat >"$1" <<EOF
{"pack_id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "created_at_ns": 1717171717000000000,
 "records": [{"payload_file": "$2", "metadata": {
  "adapter_revision": null, "batch_position": 0, "capture_id": "cap-0",
  "capture_policy_version": "p1", "captured_at_ns": 1717171717000000000, "dtype": "uint8",
  "experiment_id": "e", "hook_name": "h", "layer_number": 0, "model_id": "m",
  "model_revision": "r", "producer_rank": 0, "request_id": "q", "run_id": "r",
  "sequence_id": "s", "session_id": "s", "shape": [4], "step_number": 0, "tenant_id": "t",
  "token_end": 0, "token_start": 0}}]}
EOF
}

specs="$work/specs"
mkdir -p "$specs/sub" "$work/outside"
printf 'in!!' >"$specs/sub/inside.bin"
printf 'OUT!' >"$work/outside/secret.bin"
ln -s sub/inside.bin "$specs/link_in.bin"
ln -s ../outside/secret.bin "$specs/link_out.bin"
ln -s ../outside "$specs/dir_out"

# ---- the output: a planted OUT.tmp link is never written through --------------------------
write_spec "$specs/good.json" "sub/inside.bin"
out_dir="$work/out_dir"
mkdir -p "$out_dir"
printf 'precious' >"$work/victim"
ln -s "$work/victim" "$out_dir/pack.dmi-pack.tmp"
run build "$specs/good.json" "$out_dir/pack.dmi-pack"
expect_status 0 "build beside a planted OUT.tmp link"
printf precious | cmp -s - "$work/victim" || fail "build wrote through the planted OUT.tmp link"
[[ -L $out_dir/pack.dmi-pack.tmp ]] || fail "build replaced the planted OUT.tmp link"
run verify "$out_dir/pack.dmi-pack"
expect_status 0 "verify the pack built beside a planted link"
# OUT itself a link: the pack replaces the link, the link's target is untouched.
ln -s "$work/victim" "$out_dir/linked.dmi-pack"
run build "$specs/good.json" "$out_dir/linked.dmi-pack"
expect_status 0 "build over a link at OUT"
printf precious | cmp -s - "$work/victim" || fail "build wrote through a link at OUT"
[[ -f $out_dir/linked.dmi-pack && ! -L $out_dir/linked.dmi-pack ]] || fail "OUT is not the new pack"
# A failed build leaves nothing: no OUT, no temp file.
write_spec "$specs/missing.json" "sub/missing.bin"
run build "$specs/missing.json" "$out_dir/failed.dmi-pack"
expect_status 1 "build with a missing payload file"
expect_err "sub/missing.bin" "build with a missing payload file"
leftover=$(cd "$out_dir" && ls -A | grep -v -e '^pack\.dmi-pack' -e '^linked\.dmi-pack$')
[[ -z $leftover ]] || fail "a failed build left files behind: $leftover"
# OUT in a directory that does not exist: refused, naming the path.
run build "$specs/good.json" "$work/no-such-dir/x.dmi-pack"
expect_status 1 "build into a missing directory"
expect_err "$work/no-such-dir/x.dmi-pack" "build into a missing directory"

# ---- payload files stay inside the spec's directory -------------------------------------
write_spec "$specs/link_in.json" "link_in.bin"
run build "$specs/link_in.json" "$work/link_in.dmi-pack"
expect_status 0 "a link that stays inside the spec's directory"
for name in "$work/outside/secret.bin" "../outside/secret.bin" "sub/../../outside/secret.bin" \
            "link_out.bin" "dir_out/secret.bin"; do
  write_spec "$specs/escape.json" "$name"
  run build "$specs/escape.json" "$work/escape.dmi-pack"
  expect_status 1 "payload_file $name"
  expect_err "payload_file $name" "payload_file $name"
  expect_err "outside the spec's directory" "payload_file $name"
  expect_err "--allow-outside-paths" "payload_file $name"
  [[ ! -e $work/escape.dmi-pack ]] || fail "payload_file $name: a pack was written"
  run build "$specs/escape.json" "$work/escape.dmi-pack" --allow-outside-paths
  expect_status 0 "payload_file $name with --allow-outside-paths"
  run info "$work/escape.dmi-pack"
  expect_out '"decoded_length":4' "payload_file $name with --allow-outside-paths"
  rm -f "$work/escape.dmi-pack"
done
# `..` that stays inside is fine; a spec in the current directory confines to it.
write_spec "$specs/dotdot_in.json" "sub/../sub/inside.bin"
run build "$specs/dotdot_in.json" "$work/dotdot_in.dmi-pack"
expect_status 0 "a .. that stays inside the spec's directory"
(cd "$specs" && timeout 10 "$capstore" pack build escape.json ../cwd.dmi-pack >/dev/null 2>"$work/err")
status=$?
err=$(cat "$work/err")
expect_status 1 "a spec named relative to the current directory"
expect_err "outside the spec's directory" "a spec named relative to the current directory"
run build "$specs/good.json" "$work/x.dmi-pack" --frobnicate
expect_status 2 "an unknown build option"

# ---- what is not a regular file is refused, never waited on ------------------------------
mkfifo "$work/fifo.dmi-pack"
for command in verify info key; do
  run "$command" "$work/fifo.dmi-pack"
  expect_status 1 "$command of a FIFO"
  expect_err "$work/fifo.dmi-pack" "$command of a FIFO"
  expect_err "not a regular file" "$command of a FIFO"
  run "$command" "$work/outside"
  expect_status 1 "$command of a directory"
  expect_err "not a regular file" "$command of a directory"
done
# A spec is read only from a regular file, and only up to a bound: a FIFO
# used to block build forever, /dev/zero to grow it to about 1 GB.
for spec in "$work/fifo.dmi-pack" /dev/zero "$work/outside"; do
  run build "$spec" "$work/from-special.dmi-pack"
  expect_status 1 "build from $spec"
  expect_err "$spec" "build from $spec"
  expect_err "not a regular file" "build from $spec"
  [[ ! -e $work/from-special.dmi-pack ]] || fail "build from $spec: a pack was written"
done
truncate -s $((128 * 1024 * 1024 + 1)) "$work/huge.json"
run build "$work/huge.json" "$work/huge.dmi-pack"
expect_status 1 "build from a spec over 128 MiB"
expect_err "$work/huge.json" "build from a spec over 128 MiB"
expect_err "134217729 bytes, more than a spec may hold (134217728)" "build from a spec over 128 MiB"
[[ ! -e $work/huge.dmi-pack ]] || fail "build from a spec over 128 MiB: a pack was written"
rm -f "$work/huge.json"

# ---- a payload swapped for a link between the check and the open, every time -------------
# tests/pack_race_shim.c renames spec/swap.lnk over spec/p.bin right after
# pack build's realpath() of p.bin, so the open meets the link. A link leading
# out is refused and nothing outside is embedded; a link that stays inside
# (relative or absolute) is read. With and without openat2 (Linux < 5.6).
# Before the fix the links leading out were embedded ('OUT!' in the pack) and
# the links inside refused as "changed while it was opened".
det="$work/race_shim"
mkdir -p "$det/spec"
printf 'OUT!' >"$det/secret.bin"
printf 'IN2!' >"$det/spec/other.bin"
write_spec "$det/spec/race.json" "p.bin"
# A sanitizer runtime linked dynamically must allow a library loaded before it.
asan_options=${ASAN_OPTIONS-}
export ASAN_OPTIONS=${asan_options:+$asan_options:}verify_asan_link_order=0
for no_openat2 in "" 1; do
  for target in ../secret.bin "$det/secret.bin" other.bin "$det/spec/other.bin"; do
    what="p.bin swapped for a link to $target${no_openat2:+ (no openat2)}"
    rm -f "$det/spec/p.bin" "$det/spec/swap.lnk" "$det/race.dmi-pack"
    printf 'in!!' >"$det/spec/p.bin"
    ln -s "$target" "$det/spec/swap.lnk"
    LD_PRELOAD=$shim CAPSTORE_RACE_DIR=$det/spec CAPSTORE_RACE_NO_OPENAT2=$no_openat2 \
      run build "$det/spec/race.json" "$det/race.dmi-pack"
    [[ -L $det/spec/swap.lnk ]] && fail "$what: the shim never swapped (LD_PRELOAD had no effect)"
    if [[ $target == *secret.bin ]]; then
      expect_status 1 "$what"
      expect_err "payload_file p.bin" "$what"
      expect_err "outside the spec's directory" "$what"
      [[ ! -e $det/race.dmi-pack ]] || fail "$what: a pack was written"
    else
      expect_status 0 "$what"
      grep -qaF 'IN2!' "$det/race.dmi-pack" 2>/dev/null || fail "$what: the pack lacks the bytes of $target"
    fi
    grep -qaF 'OUT!' "$det/race.dmi-pack" 2>/dev/null && fail "$what: the pack embeds the outside file"
  done
done

# ---- the spec's directory swapped between reading the spec and confining payloads -------
# job is a link to real/ (the spec, and a decoy credentials file); once pack
# build has opened job/spec.json the shim renames a prepared link over job,
# pointing it at secret/ (another credentials file). Payloads must stay
# confined to the directory the spec was read from: the decoy is embedded,
# the secret never. Before the fix the secret was (an outside review did it
# by luck in 175 of 3,000 builds).
dsw="$work/race_dir"
mkdir -p "$dsw/real" "$dsw/secret"
printf 'in!!' >"$dsw/real/credentials"
printf 'OUT!' >"$dsw/secret/credentials"
write_spec "$dsw/real/spec.json" "credentials"
for no_openat2 in "" 1; do
  what="the spec's directory swapped after the spec was read${no_openat2:+ (no openat2)}"
  rm -f "$dsw/job" "$dsw/swap" "$dsw/out.dmi-pack"
  ln -s real "$dsw/job"
  ln -s secret "$dsw/swap"
  LD_PRELOAD=$shim CAPSTORE_RACE_SPEC_SWAP="$dsw/swap:$dsw/job" CAPSTORE_RACE_NO_OPENAT2=$no_openat2 \
    run build "$dsw/job/spec.json" "$dsw/out.dmi-pack"
  [[ -L $dsw/swap ]] && fail "$what: the shim never swapped (LD_PRELOAD had no effect)"
  grep -qaF 'OUT!' "$dsw/out.dmi-pack" 2>/dev/null && fail "$what: the pack embeds the other directory's file"
  if [[ $status == 0 ]]; then
    grep -qaF 'in!!' "$dsw/out.dmi-pack" || fail "$what: the pack lacks the spec directory's file"
  fi
done
ASAN_OPTIONS=$asan_options

# ---- a payload swapped for a link to an outside file while the build runs ---------------
# The same with luck: a swapper flips spec/p.bin between a regular file
# inside and a link to ../secret.bin as fast as it can, while pack build runs
# in a loop with every record naming p.bin (after 1,000 "./" that widen the
# window between check and open). A build may succeed (every payload 'in!!')
# or be refused; it must never embed the outside bytes 'OUT!'. Before the fix
# about 1 build in 50 did on a loaded 2-core machine (the shim test above is
# the one that fails every time).
race="$work/race"
mkdir -p "$race/spec"
printf 'in!!' >"$race/spec/good.bin"
printf 'OUT!' >"$race/secret.bin"
cp "$race/spec/good.bin" "$race/spec/p.bin"
write_spec "$race/spec/one.json" "$(printf './%.0s' $(seq 1 1000))p.bin"
records=$(sed -n '/"records"/,$p' "$race/spec/one.json" | sed '1s/.*"records": \[//; $s/\]}$//')
{
  printf '{"pack_id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "created_at_ns": 1, "records": ['
  for i in $(seq 1 4); do ((i > 1)) && printf ','; printf '%s' "${records/cap-0/cap-$i}"; done
  printf ']}\n'
} >"$race/spec/race.json"
perl -e 'chdir $ARGV[0] or die "chdir: $!";
         for (;;) { link "good.bin", "f.tmp"; rename "f.tmp", "p.bin";
                    symlink "../secret.bin", "l.tmp"; rename "l.tmp", "p.bin"; }' "$race/spec" &
swapper=$!
trap 'kill $swapper 2>/dev/null' EXIT
builds=0 built=0 leaked=0 bad_refusals=0
deadline=$((SECONDS + 3))
while ((SECONDS < deadline)); do
  timeout 10 "$capstore" pack build "$race/spec/race.json" "$race/race.dmi-pack" >/dev/null 2>"$race/err"
  status=$?
  builds=$((builds + 1))
  if ((status == 0)); then
    built=$((built + 1))
    grep -qaF 'OUT!' "$race/race.dmi-pack" && leaked=$((leaked + 1))
    rm -f "$race/race.dmi-pack"
  elif ((status != 1)) || ! grep -qF 'payload_file' "$race/err"; then
    bad_refusals=$((bad_refusals + 1))
    cat "$race/err"
  fi
done
kill $swapper
wait $swapper 2>/dev/null
trap - EXIT
echo "race: $builds builds, $built built, $leaked embedded the outside file"
((leaked == 0)) || fail "$leaked of $builds builds raced with a swapped link embedded the outside file"
((bad_refusals == 0)) || fail "$bad_refusals raced builds failed without naming the payload_file"
((builds > built)) || fail "the swapper never made a build refuse (the race did not run)"

if ((failures > 0)); then
  echo "pack_cli: $failures checks failed"
  exit 1
fi
echo "pack_cli: every check passed"

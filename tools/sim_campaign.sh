#!/bin/sh
# A swarm campaign: N seeds from FIRST on all cores, in chunks, reporting every
# failure with the one line that replays it.
#
#   tools/sim_campaign.sh [-j JOBS] [-c CHUNK] [-b CAPSTORE_SIM] N FIRST [-- SIM_OPTIONS...]
#
# JOBS defaults to the number of cores, CHUNK to 10000 seeds, the simulator to
# build/capstore-sim. SIM_OPTIONS go to every run (e.g. --profile all, --without
# KIND). Prints one line per chunk as it finishes, then every failure (FAIL and
# replay lines), the totals and the wall time. Exits 0 only when every seed passed.
set -eu
jobs=$(nproc 2>/dev/null || echo 2)
chunk=10000
sim=build/capstore-sim
while getopts j:c:b: opt; do
  case $opt in
  j) jobs=$OPTARG ;;
  c) chunk=$OPTARG ;;
  b) sim=$OPTARG ;;
  *) echo "usage: $0 [-j JOBS] [-c CHUNK] [-b CAPSTORE_SIM] N FIRST [-- SIM_OPTIONS...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { echo "usage: $0 [-j JOBS] [-c CHUNK] [-b CAPSTORE_SIM] N FIRST [-- SIM_OPTIONS...]" >&2; exit 2; }
n=$1 first=$2
shift 2
[ "${1:-}" = "--" ] && shift
case "$n$first$jobs$chunk" in *[!0-9]*) echo "$0: N, FIRST, JOBS and CHUNK are unsigned integers" >&2; exit 2 ;; esac
[ "$n" -gt 0 ] && [ "$jobs" -gt 0 ] && [ "$chunk" -gt 0 ] || { echo "$0: N, JOBS and CHUNK must be positive" >&2; exit 2; }
[ -x "$sim" ] || { echo "$0: no simulator at $sim (build it, or give -b)" >&2; exit 2; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$(date +%s)
# One line per chunk: its first seed and its count.
s=$first left=$n
while [ "$left" -gt 0 ]; do
  c=$chunk; [ "$left" -lt "$c" ] && c=$left
  echo "$s $c"
  s=$((s + c)) left=$((left - c))
done > "$dir/chunks"
echo "campaign: $n seeds from $first ($(wc -l < "$dir/chunks") chunks of up to $chunk) on $jobs jobs: $sim $*"
simopts="$*"
# Options the simulator refuses (or options of this script given after N FIRST) fail once, here.
# shellcheck disable=SC2086
if ! "$sim" --seeds 1 --first "$first" --quiet $simopts > "$dir/probe" 2>&1 && grep -q '^usage:' "$dir/probe"; then
  echo "$0: the simulator refuses the options '$simopts' (this script's own options go before N FIRST):" >&2
  cat "$dir/probe" >&2
  exit 2
fi
export sim dir simopts
# Stopped (INT or TERM), the campaign takes its chunk runners and their
# simulators with it: a runner whose simulator was killed under it would take
# it for a death and go on one seed at a time.
kill_tree() {
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
trap 'trap - INT TERM; [ -n "${xpid:-}" ] && kill_tree "$xpid"; echo "campaign stopped" >&2; exit 130' INT TERM
# xargs runs the chunks JOBS at a time (the chunk's first seed and count are
# the two arguments); each writes its own log.
# A simulator that dies (an assertion, a signal) ends its chunk early: the
# chunk is then run again one seed at a time, so the seeds after the one that
# killed it still run and that seed gets its own replay line.
xargs -P "$jobs" -L 1 sh -c '
  out="$dir/chunk.$1"
  # shellcheck disable=SC2086 # the options are words
  "$sim" --seeds "$2" --first "$1" --quiet $simopts > "$out" 2>&1 || true
  if ! grep -q "[0-9]* passed, [0-9]* failed" "$out"; then
    mv "$out" "$out.died"
    p=0 q=0 s=$1 end=$(($1 + $2))
    while [ "$s" -lt "$end" ]; do
      # shellcheck disable=SC2086
      if "$sim" --seed "$s" $simopts > "$out.one" 2>&1; then p=$((p + 1)); else
        q=$((q + 1))
        grep -E "^(FAIL|replay:)" "$out.one" >> "$out" ||
          printf "FAIL seed=%s kind=died: %s\nreplay: %s --seed %s %s\n" "$s" "$(tail -1 "$out.one")" "$sim" "$s" "$simopts" >> "$out"
      fi
      s=$((s + 1))
    done
    rm -f "$out.one"
    echo "$p passed, $q failed (run one seed at a time: the simulator died)" >> "$out"
  fi
  echo "chunk $1+$2: $(grep -o "[0-9]* passed, [0-9]* failed.*" "$out")"
' chunk < "$dir/chunks" &
xpid=$!
wait "$xpid" || true
end=$(date +%s)
passed=0 failed=0 broken=0
for f in "$dir"/chunk.*[0-9]; do
  line=$(grep -o "[0-9]* passed, [0-9]* failed" "$f" || true)
  if [ -z "$line" ]; then broken=$((broken + 1)); echo "chunk ${f##*.}: no summary"; tail -5 "$f"; continue; fi
  p=${line%% passed*}; q=${line#*passed, }; q=${q%% failed}
  passed=$((passed + p)) failed=$((failed + q))
done
if [ "$failed" -gt 0 ]; then
  echo "failures:"
  cat "$dir"/chunk.*[0-9] | grep -E '^(FAIL|replay:)' || true
fi
secs=$((end - start)); [ "$secs" -gt 0 ] || secs=1
echo "campaign: $passed passed, $failed failed of $n seeds from $first in ${secs} s ($((n * 60 / secs)) seeds per minute)"
[ "$failed" -eq 0 ] && [ "$broken" -eq 0 ]

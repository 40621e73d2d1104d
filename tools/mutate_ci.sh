#!/bin/sh
# CI's bounded mutation sample (issue 13; tools/mutate.py): SAMPLE random mutants
# of the src/core files this change touched (since the merge base with
# origin/main, or since HEAD~1 when there is none or HEAD is that base), or of
# all of src/core when no core file changed. The sample is seeded by the commit
# and the replay line is printed first, so a failure replays exactly. Fails when
# the mutation score of the sample is under FAIL_UNDER percent, or when the tool
# or the unmutated cores fail.
# usage: mutate_ci.sh [SAMPLE [FAIL_UNDER [OUT_DIR]]]   (MUTATE_JOBS: parallel jobs, 2)
set -u
cd "$(dirname "$0")/.." || exit 2
sample=${1:-40}
fail_under=${2:-0}
out=${3:-mutation-report/ci}
seed=0
base=""
if head=$(git rev-parse --verify -q HEAD 2>/dev/null); then
  seed=$head
  base=$(git merge-base origin/main HEAD 2>/dev/null) || base=""
  [ "$base" = "$head" ] && base=""
  [ -n "$base" ] || base=$(git rev-parse --verify -q HEAD~1 2>/dev/null) || base=""
fi
set -- --sample "$sample" --seed "$seed" --fail-under "$fail_under" -j "${MUTATE_JOBS:-2}"
if [ -n "$base" ] && [ -n "$(git diff --name-only "$base" -- src/core | grep '\.c$')" ]; then
  set -- "$@" --changed-since "$base"
fi
echo "replay: python3 tools/mutate.py $*"
exec python3 tools/mutate.py "$@" --out "$out" -q

#!/usr/bin/env bash
# `capstore config check|keys|defaults` and docs/configuration.md: every key
# the parser knows is documented, every example file in the docs is valid,
# the defaults are a file that parses, and a bad file is refused with exit 1
# and its key named (usage: exit 2).
# Replay: tests/config_cli.sh CAPSTORE SOURCE_DIR WORKDIR
set -uo pipefail
capstore=$1
src=$2
work=$3
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"
docs="$src/docs/configuration.md"

keys=$("$capstore" config keys | awk '{print $1}')
[[ $(wc -l <<<"$keys") -ge 50 ]] || fail "config keys lists $(wc -l <<<"$keys") keys"
for k in $keys; do
  grep -q "\`$k\`" "$docs" || fail "docs/configuration.md does not document \`$k\`"
done

# Every ```json block of the docs is a valid configuration (credentials for the S3 example: dummies).
awk '/^```json$/{n++; f=sprintf("'"$work"'/doc%d.json", n); on=1; next} /^```$/{on=0} on{print > f}' "$docs"
examples=$(ls "$work"/doc*.json 2>/dev/null | wc -l)
[[ $examples -ge 2 ]] || fail "found $examples JSON examples in the docs"
for f in "$work"/doc*.json; do
  AWS_ACCESS_KEY_ID=AKIDEXAMPLE AWS_SECRET_ACCESS_KEY=example "$capstore" config check "$f" >"$work/out" 2>"$work/err" ||
    fail "the docs' example $(basename "$f") is refused: $(cat "$work/err")"
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$work/out" || fail "check of $f printed no JSON"
done
grep -q "AWS_SECRET_ACCESS_KEY set" "$work/err" || fail "check does not say which secrets are set"
grep -q "example" "$work/out" && fail "check printed a secret's value"

# The defaults are a file: with the three required keys added, it is valid.
"$capstore" config defaults >"$work/defaults.json" || fail "config defaults failed"
"$capstore" config check "$work/defaults.json" >/dev/null 2>"$work/err" || fail "the defaults file is refused: $(cat "$work/err")"
grep -q "hash_thread" "$work/defaults.json" && fail "the defaults file pins hash_thread to this machine's CPUs"
python3 - "$work/defaults.json" "$work/full.json" <<'PY' || fail "the defaults are not JSON"
import json, sys
d = json.loads("".join(l for l in open(sys.argv[1]) if not l.lstrip().startswith("#")))
d["spool_dir"] = "/tmp/x"; d.setdefault("store", {})["dir"] = "/tmp/y"; d.setdefault("catalog", {})["sqlite"] = "/tmp/z"
json.dump(d, open(sys.argv[2], "w"))
PY
"$capstore" config check "$work/full.json" >/dev/null 2>"$work/err" || fail "defaults + dirs refused: $(cat "$work/err")"

# Refusals: exit 1, the file and the key named.
printf '{"spool_dir": "/x", "store": {"dir": "/y"}, "catalog": {"sqlite": "/z"},\n "service": {"lease_ttl": 30}}\n' >"$work/bad.json"
"$capstore" config check "$work/bad.json" >"$work/out" 2>"$work/err"
[[ $? == 1 ]] || fail "a bad file: exit not 1"
grep -q "$work/bad.json: service.lease_ttl: a duration needs a unit" "$work/err" || fail "a bad file: $(cat "$work/err")"
[[ -s $work/out ]] && fail "a bad file printed a configuration"
"$capstore" config check "$work/missing.json" 2>"$work/err"
[[ $? == 1 ]] || fail "a missing file: exit not 1"
grep -q "missing.json: No such file or directory" "$work/err" || fail "a missing file: $(cat "$work/err")"
"$capstore" config frobnicate 2>/dev/null
[[ $? == 2 ]] || fail "an unknown subcommand: exit not 2"
"$capstore" config --help | grep -q "exit status" || fail "config --help"

finish config_cli

#!/usr/bin/env bash
# `capstore status CONFIG`: what a state made by `capstore demo` holds (the
# catalog's packs, records and bytes, the store's objects, an empty spool
# whose last owner is gone), a ready pack waiting in the spool with its age,
# a running owner, and the refusals (exit 2 usage, 3 unreadable).
# Replay: tests/status_cli.sh CAPSTORE SPOOL_FIXTURE WORKDIR
set -uo pipefail
capstore=$1
fixture=$2
work=$3
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"
holder=
trap '[[ -n $holder ]] && kill "$holder" 2>/dev/null; wait 2>/dev/null' EXIT

field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d=d[k]
print(str(d).lower())' "$work/out" "$1"; }
expect() {
  local got
  got=$(field "$1" 2>/dev/null || echo "?")
  [[ $got == "$2" ]] || fail "$3: $1 = $got, expected $2"
}

d=$work/state
"$capstore" demo --dir "$d" --threads 2 --records 150 --quiet || fail "demo"
# The demo released its lease at close: the head stays busy for the fence margin (100 ms on SQLite), then is free.
for _ in $(seq 50); do
  "$capstore" status "$d/capstore.json" --json >"$work/out" 2>"$work/err" || fail "status: exit $? ($(cat "$work/err"))"
  [[ $(field catalog.lease_free) == true ]] && break
  sleep 0.1
done
expect catalog.records 300 "after the demo"
expect catalog.watermark 1 "after the demo"
expect catalog.lease_free true "after the demo (and its release's margin)"
expect spool.ready_packs 0 "after the demo"
expect spool.owner_running false "after the demo"
packs=$(field catalog.packs)
expect store.pack_objects "$packs" "after the demo"
"$capstore" status "$d/capstore.json" >"$work/text" || fail "text status: exit $?"
grep -q "published: $packs packs, 300 records" "$work/text" || fail "the text lacks the published line: $(cat "$work/text")"

# A pack waiting in the spool (a copy of a published one's bytes), owned by a running process.
obj=$(find "$d/bucket/objects" -name '*.dmi-pack.obj' | head -1)
tail -c +81 "$obj" >"$work/raw"
name=$("$capstore" pack key "$work/raw" | python3 -c 'import json,sys; m=json.load(sys.stdin)["metadata"]
print("%s.%s.%s.%s.dmi-pack.ready" % (m["dmi-pack-id"], m["dmi-created-at-ns"], m["dmi-record-count"], m["dmi-sha256"]))')
cp "$work/raw" "$d/spool/$name"
"$fixture" hold "$d/spool" 30 >"$work/held" &
holder=$!
for _ in $(seq 100); do grep -q holding "$work/held" && break; sleep 0.1; done
"$capstore" status "$d/capstore.json" --json >"$work/out" || fail "status with a waiting pack: exit $?"
expect spool.ready_packs 1 "a waiting pack"
expect spool.ready_bytes "$(stat -c %s "$work/raw")" "a waiting pack"
expect spool.owner_pid "$holder" "a running owner"
expect spool.owner_running true "a running owner"
age=$(field spool.oldest_unshipped_age_ns)
((age > 0)) || fail "the waiting pack's age is $age"

"$capstore" status >/dev/null 2>&1; [[ $? == 2 ]] || fail "no config: exit not 2"
"$capstore" status "$work/none.json" >/dev/null 2>&1; [[ $? == 3 ]] || fail "a missing config: exit not 3"
"$capstore" status --help | grep -q "exit status" || fail "status --help"
finish status_cli

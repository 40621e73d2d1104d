#!/usr/bin/env bash
# `capstore fsck CONFIG`: a clean state (made by `capstore demo`) reports
# clean; each kind of inconsistency, planted alone in a fresh state, is found
# with its count and example and no other kind; --deep finds bytes that HEAD
# cannot; --repair fixes what the service's protocol fixes (spool packs the
# catalog holds, orphan objects) and leaves the rest, and when it is refused
# (a service owns the spool, another publisher holds the lease) the
# read-only report stands; exit codes as documented (0 clean, 1 found,
# 2 usage, 3 could not check).
# Replay: tests/fsck_cli.sh CAPSTORE SPOOL_FIXTURE WORKDIR
set -uo pipefail
capstore=$1
fixture=$2
work=$3
source "$(dirname "$0")/cli_lib.sh"
cli_begin "$work"

# A fresh state under $work/$1 (one pack from one demo run) and its config.
fresh() {
  local d=$work/$1
  "$capstore" demo --dir "$d" --threads 1 --records 40 --quiet || fail "demo in $d"
  printf '{"spool_dir": "%s/spool", "store": {"dir": "%s/bucket"}, "catalog": {"sqlite": "%s/catalog.db"}}\n' \
    "$d" "$d" "$d" >"$d.json"
}
objects() { find "$work/$1/bucket/objects" -name '*.dmi-pack.obj' | sort; }
# The pack bytes of a dirstore object (its 80-byte metadata header dropped) into $2.
raw_pack() { tail -c +81 "$1" >"$2"; }
# The spool's ready name of a pack file.
ready_name() {
  "$capstore" pack key "$1" | python3 -c 'import json,sys; m=json.load(sys.stdin)["metadata"]
print("%s.%s.%s.%s.dmi-pack.ready" % (m["dmi-pack-id"], m["dmi-created-at-ns"], m["dmi-record-count"], m["dmi-sha256"]))'
}

# Runs fsck with ARGS; keeps the exit status and the JSON report.
fsck_json() {
  "$capstore" fsck "$@" --json >"$work/out" 2>"$work/err"
  status=$?
}
count_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["findings"][sys.argv[2]]["count"])' "$work/out" "$1"; }
example_of() { python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["findings"][sys.argv[2]]["examples"]))' "$work/out" "$1"; }
KINDS="spool_packs_in_catalog orphan_objects catalog_packs_without_object objects_differing_from_catalog set_aside_packs"
# Expect exactly `n` of `kind` and none of the others.
expect_only() {
  local kind=$1 n=$2 what=$3
  [[ $status == 1 ]] || fail "$what: exit $status, expected 1 ($(cat "$work/err"))"
  for k in $KINDS; do
    local got
    got=$(count_of "$k" 2>/dev/null || echo "?")
    if [[ $k == "$kind" ]]; then [[ $got == "$n" ]] || fail "$what: $k = $got, expected $n"
    else [[ $got == 0 ]] || fail "$what: $k = $got, expected 0"; fi
  done
}
expect_clean() {
  [[ $status == 0 ]] || fail "$1: exit $status, expected 0 (clean): $(cat "$work/out" "$work/err")"
  grep -q '"clean": true' "$work/out" || fail "$1: the report is not clean"
}

# Clean, with and without --deep; the text report says so.
fresh clean
fsck_json "$work/clean.json" --deep
expect_clean "a fresh state"
"$capstore" fsck "$work/clean.json" >"$work/text" 2>&1 || fail "text report of a clean state: exit $?"
grep -q "^clean$" "$work/text" || fail "text report lacks 'clean'"

# An orphan: another state's object copied into this store.
fresh orphan
fresh other
other_obj=$(objects other | head -1)
(cd "$work/other/bucket" && find objects -name '*.obj' -exec cp --parents {} "$work/orphan/bucket/" \;)
fsck_json "$work/orphan.json"
expect_only orphan_objects 1 "an orphan object"
example_of orphan_objects | grep -q "dmi-pack" || fail "the orphan is not named"
fsck_json "$work/orphan.json" --repair
expect_clean "an orphan after --repair"
grep -q "objects adopted" "$work/err" || fail "--repair did not say what the service did"

# --repair refused: the read-only report stands (exit 1, the orphan reported), the refusal on stderr.
# While a service owns the spool (the fixture holds its lock):
fresh busy
(cd "$work/other/bucket" && find objects -name '*.obj' -exec cp --parents {} "$work/busy/bucket/" \;)
"$fixture" hold "$work/busy/spool" 30 >"$work/holding" &
holder=$!
for _ in $(seq 100); do grep -q holding "$work/holding" && break; sleep 0.1; done
fsck_json "$work/busy.json" --repair
kill "$holder"
wait "$holder" 2>/dev/null
expect_only orphan_objects 1 "--repair while a service owns the spool"
grep -q "a service owns the spool" "$work/err" || fail "--repair refused for the spool: $(cat "$work/err")"
grep -q "objects adopted" "$work/err" && fail "--repair ran while a service owns the spool"
# While another publisher holds the catalog's lease (a claim planted for two minutes), text report too:
fresh leased
(cd "$work/other/bucket" && find objects -name '*.obj' -exec cp --parents {} "$work/leased/bucket/" \;)
python3 - "$work/leased/catalog.db" <<'PY'
import os, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
now = time.time_ns()
term = db.execute("SELECT coalesce(max(term), 0) FROM cs_lease_v1").fetchone()[0] + 1
db.execute("INSERT INTO cs_lease_v1 VALUES (?, ?, ?, ?)", (term, os.urandom(16), now, now + 120 * 10**9))
db.commit()
PY
fsck_json "$work/leased.json" --repair
expect_only orphan_objects 1 "--repair while another publisher holds the lease"
grep -q "a publisher holds the catalog's lease" "$work/err" || fail "--repair refused for the lease: $(cat "$work/err")"
"$capstore" fsck "$work/leased.json" --repair >"$work/text" 2>"$work/err"
[[ $? == 1 ]] || fail "--repair refused, text report: exit not 1 ($(cat "$work/err"))"
grep -q "^inconsistent$" "$work/text" || fail "--repair refused: no read-only report: $(cat "$work/text")"
grep -q "a publisher holds the catalog's lease" "$work/err" || fail "--repair refused (text): $(cat "$work/err")"
# Its twin: the same state once the claim is gone is repaired.
python3 - "$work/leased/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("DELETE FROM cs_lease_v1 WHERE term = (SELECT max(term) FROM cs_lease_v1)")
db.commit()
PY
fsck_json "$work/leased.json" --repair
expect_clean "--repair once the other publisher's lease is gone"

# A shared prefix (reconcile off): another catalog's objects are not orphans, and --repair adopts none.
fresh shared
(cd "$work/other/bucket" && find objects -name '*.obj' -exec cp --parents {} "$work/shared/bucket/" \;)
python3 - "$work/shared.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["reconcile"] = {"at_start": False}; json.dump(c, open(sys.argv[1], "w"))
PY
fsck_json "$work/shared.json"
expect_clean "another catalog's object under a shared prefix"
grep -q '"other_catalogs_objects": 1' "$work/out" || fail "the other catalog's object is not counted"
fsck_json "$work/shared.json" --repair
expect_clean "a shared prefix after --repair"
packs=$("$capstore" status "$work/shared.json" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["catalog"]["packs"])')
[[ $packs == 1 ]] || fail "--repair adopted another catalog's pack under a shared prefix ($packs packs)"

# An uploaded pack still waiting in the spool (its INDEX not done yet) is in flight, not an orphan.
fresh flight
(cd "$work/other/bucket" && find objects -name '*.obj' -exec cp --parents {} "$work/flight/bucket/" \;)
tail -c +81 "$other_obj" >"$work/flight.raw"
cp "$work/flight.raw" "$work/flight/spool/$(ready_name "$work/flight.raw")"
fsck_json "$work/flight.json"
expect_clean "an uploaded pack still in the spool"
grep -q '"uploaded_in_spool": 1' "$work/out" || fail "the in-flight pack is not counted"

# A second copy of a catalog pack under another key: the catalog's object is there; the copy is counted.
fresh stray
obj=$(objects stray | head -1)
mkdir -p "$(dirname "$obj")/../aa.d"
cp "$obj" "$(dirname "$obj")/../aa.d/$(basename "$obj")"
fsck_json "$work/stray.json"
expect_clean "a stray copy under another key"
grep -q '"stray_copies": 1' "$work/out" || fail "the stray copy is not counted"

# A catalog pack whose object is gone.
fresh missing
rm "$(objects missing | head -1)"
fsck_json "$work/missing.json"
expect_only catalog_packs_without_object 1 "a missing object"
fsck_json "$work/missing.json" --repair
expect_only catalog_packs_without_object 1 "a missing object after --repair (nothing to repair)"

# An object replaced by another pack's: HEAD sees another pack id.
fresh differs
cp "$other_obj" "$(objects differs | head -1)"
fsck_json "$work/differs.json"
expect_only objects_differing_from_catalog 1 "a replaced object"
example_of objects_differing_from_catalog | grep -q "another pack id" || fail "the difference is not named"

# Bytes changed under the same metadata: only --deep sees it.
fresh deep
obj=$(objects deep | head -1)
# Flip every bit of one byte (a fixed byte value would leave the bytes unchanged where the object holds it already).
cp "$obj" "$work/deep.before"
byte=$(od -An -tu1 -j200 -N1 "$obj" | tr -d ' ')
printf "\\$(printf '%03o' $((byte ^ 255)))" | dd of="$obj" bs=1 seek=200 conv=notrunc status=none
cmp -s "$obj" "$work/deep.before" && fail "the byte flip changed nothing"
fsck_json "$work/deep.json"
expect_clean "changed bytes without --deep (HEAD agrees)"
fsck_json "$work/deep.json" --deep
expect_only objects_differing_from_catalog 1 "changed bytes with --deep"
example_of objects_differing_from_catalog | grep -q "bytes hash to" || fail "--deep does not say the hash differs"

# A spool pack the catalog holds (a service stopped before its hand-off).
fresh held
raw_pack "$(objects held | head -1)" "$work/held.raw"
name=$(ready_name "$work/held.raw")
cp "$work/held.raw" "$work/held/spool/$name"
# While the spool's owner runs, that pack is the running service's next hand-off, not a finding.
"$fixture" hold "$work/held/spool" 30 >"$work/holding" &
holder=$!
for _ in $(seq 100); do grep -q holding "$work/holding" && break; sleep 0.1; done
fsck_json "$work/held.json"
expect_clean "a held pack while the spool's owner runs"
grep -q '"awaiting_handoff": 1' "$work/out" || fail "the pack awaiting hand-off is not counted"
kill "$holder"
wait "$holder" 2>/dev/null
fsck_json "$work/held.json"
expect_only spool_packs_in_catalog 1 "a spool pack the catalog holds"
fsck_json "$work/held.json" --repair
expect_clean "a spool pack the catalog holds after --repair"
[[ -e $work/held/spool/$name ]] && fail "--repair left the handed-off pack in the spool"

# A set-aside pack in the spool, with its reason.
fresh aside
raw_pack "$other_obj" "$work/aside.raw"
name=$(ready_name "$work/aside.raw")
cp "$work/aside.raw" "$work/aside/spool/$name.quarantined"
echo "footer_json: planted by fsck_cli.sh" >"$work/aside/spool/$name.quarantined.reason"
fsck_json "$work/aside.json"
expect_only set_aside_packs 1 "a set-aside pack"
example_of set_aside_packs | grep -q "planted by fsck_cli.sh (not recorded in the catalog)" ||
  fail "the set-aside pack's reason: $(example_of set_aside_packs)"

# Exit codes: usage 2, an invalid or unreadable config 3, an unreachable source 3.
"$capstore" fsck >/dev/null 2>&1; [[ $? == 2 ]] || fail "no config: exit not 2"
"$capstore" fsck "$work/clean.json" --bogus >/dev/null 2>&1; [[ $? == 2 ]] || fail "unknown option: exit not 2"
"$capstore" fsck "$work/nope.json" >/dev/null 2>"$work/err"; [[ $? == 3 ]] || fail "missing config: exit not 3"
echo '{"spool_dir": 5}' >"$work/bad.json"
"$capstore" fsck "$work/bad.json" >/dev/null 2>"$work/err"; [[ $? == 3 ]] || fail "invalid config: exit not 3"
grep -q "spool_dir: expected a string" "$work/err" || fail "invalid config: $(cat "$work/err")"
printf '{"spool_dir": "%s/s", "store": {"s3": {"endpoint": "http://127.0.0.1:1", "bucket": "bkt", "allow_insecure": true}, "probe": false}, "catalog": {"sqlite": "%s/clean/catalog.db"}, "service": {"request_timeout": "2s"}}\n' "$work" "$work" >"$work/down.json"
AWS_ACCESS_KEY_ID=a AWS_SECRET_ACCESS_KEY=b "$capstore" fsck "$work/down.json" >/dev/null 2>"$work/err"
[[ $? == 3 ]] || fail "an unreachable store: exit not 3"
grep -q "could not check: store LIST" "$work/err" || fail "an unreachable store: $(cat "$work/err")"
# fsck reads and never creates: a catalog file or store directory that does not exist is named, not made.
printf '{"spool_dir": "%s/s", "store": {"dir": "%s/clean/bucket"}, "catalog": {"sqlite": "%s/never.db"}}\n' "$work" "$work" "$work" >"$work/never.json"
"$capstore" fsck "$work/never.json" >/dev/null 2>"$work/err"
[[ $? == 3 ]] || fail "a catalog never written: exit not 3"
grep -q "catalog.sqlite $work/never.db: No such file or directory" "$work/err" || fail "a catalog never written: $(cat "$work/err")"
[[ -e $work/never.db ]] && fail "fsck created the catalog file"
printf '{"spool_dir": "%s/s", "store": {"dir": "%s/nostore"}, "catalog": {"sqlite": "%s/clean/catalog.db"}}\n' "$work" "$work" "$work" >"$work/nostore.json"
"$capstore" fsck "$work/nostore.json" >/dev/null 2>"$work/err"
[[ $? == 3 ]] || fail "a store never written: exit not 3"
[[ -e $work/nostore ]] && fail "fsck created the store directory"
: >"$work/empty.db"
printf '{"spool_dir": "%s/s", "store": {"dir": "%s/clean/bucket"}, "catalog": {"sqlite": "%s/empty.db"}}\n' "$work" "$work" "$work" >"$work/empty.json"
"$capstore" fsck "$work/empty.json" >/dev/null 2>"$work/err"
[[ $? == 3 ]] || fail "an empty catalog file: exit not 3"
grep -q "the catalog has no capstore tables" "$work/err" || fail "an empty catalog file: $(cat "$work/err")"
"$capstore" fsck --help | grep -q "exit status" || fail "fsck --help"

finish fsck_cli

#!/usr/bin/env python3
"""Live end-to-end tests of the service runtime (issue 11, part 4).

Real capture processes (capstore_rt_fixture, tests/rt_fixture.c) against a real
object store and catalog: the embedded backend (a dirstore and SQLite, no
server) or the servers backend (the npm S3 server and ClickHouse 18.16 that the
ctest fixtures start, each behind a TCP fault switch). Every scenario counts
records: each record captured before a successful flush is in the catalog
exactly once and reads back byte-exact; nothing else is there.

On the cluster backend the catalog is a replicated ClickHouse (three 18.16 replicas
and ZooKeeper, tools/servers/ch_cluster.sh), each replica behind a switch of its
own; a capture process talks to one replica at a time and fails over to another.

usage: live_service.py --fixture PATH --backend embedded|servers|cluster
                       [--clickhouse FILE | --cluster DIR] [--s3 FILE] [--seed N] [--runs N] SCENARIO...
Prints one line per scenario and closes with "N passed, N failed".
Exit 0 when every scenario passed, 1 otherwise, 77 when every scenario was skipped.
"""
import argparse
import glob
import json
import os
import queue
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

SKIP = "skip"


class Failure(Exception):
    pass


def need(cond, what):
    if not cond:
        raise Failure(what)


class Proc:
    """A fixture process; its stdout lines are collected by a thread."""

    def __init__(self, fixture, args, env, stdin=False):
        self.args = args
        self.p = subprocess.Popen([fixture] + [str(a) for a in args], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  text=True, bufsize=1)
        self.lines = queue.Queue()
        self.seen = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, pattern, timeout):
        """The first new line matching pattern (a regex), within timeout seconds."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("no line matching %r within %.1f s from %s; last: %s" %
                              (pattern, timeout, self.args[0], self.seen[-3:]))
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise Failure("%s ended (rc %s) before a line matching %r; last: %s" %
                              (self.args[0], self.p.wait(), pattern, self.seen[-5:]))
            self.seen.append(line)
            m = rx.search(line)
            if m:
                return m

    def drain(self):
        """Every line left (after the process ended); [] when drained before."""
        self.p.wait()
        self.t.join()
        if self.lines.empty():
            return []
        out = []
        while True:
            line = self.lines.get()
            if line is None:
                break
            out.append(line)
        self.seen += out
        return out

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise Failure("%s did not end within %.0f s; last: %s" % (self.args, timeout, self.seen[-3:]))

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


class Switch:
    """A TCP fault switch (the fixture's switch command) in front of 127.0.0.1:target."""

    def __init__(self, fixture, target):
        self.proc = Proc(fixture, ["switch", target], os.environ.copy(), stdin=True)
        self.port = int(self.proc.expect(r"^port (\d+)", 10).group(1))

    def cmd(self, text):
        self.proc.p.stdin.write(text + "\n")
        self.proc.p.stdin.flush()
        self.proc.expect(r"^(ok|error)$", 10)

    def close(self):
        try:
            self.proc.p.stdin.write("quit\n")
            self.proc.p.stdin.flush()
        except OSError:
            pass
        self.proc.stop()


class World:
    """One scenario's backend: directories, servers behind switches, a catalog name of its own."""

    def __init__(self, opts, name):
        self.opts = opts
        self.root = tempfile.mkdtemp(prefix="capstore-live-%s-" % name)
        self.name = "lt_%s_%d_%d" % (name, os.getpid(), random.randrange(1 << 30))
        self.env = os.environ.copy()
        for k in list(self.env):
            if k.startswith("CAPSTORE_"):
                del self.env[k]
        self.env.update({"CAPSTORE_NAME": self.name, "CAPSTORE_TTL_MS": "6000", "CAPSTORE_TIMEOUT_MS": "1500",
                         "CAPSTORE_BACKOFF_CAP_MS": "1000", "CAPSTORE_PACK_RECORDS": "50"})
        self.switches = []
        self.procs = []
        self.catalog_switch = self.store_switch = None
        self.replicas = []  # cluster backend: (http port, switch) of each replica
        if opts.backend == "embedded":
            self.env["CAPSTORE_STORE_DIR"] = os.path.join(self.root, "bucket")
            self.env["CAPSTORE_SQLITE"] = os.path.join(self.root, "catalog.db")
            return
        if opts.backend == "cluster":
            cluster, count = open(os.path.join(opts.cluster, "cluster")).read().split()
            for k in range(1, int(count) + 1):
                ch_port, ch_user, ch_password = open(os.path.join(opts.cluster, "r%d" % k, "endpoint")).read().split()
                self.replicas.append((int(ch_port), Switch(opts.fixture, ch_port)))
            self.auth = (ch_user, ch_password)
            self.catalog_switch = self.replicas[0][1]
            self.env.update({"CAPSTORE_CLICKHOUSE_CLUSTER": cluster, "CAPSTORE_CLICKHOUSE_QUORUM": count,
                             "CAPSTORE_CLICKHOUSE_QUORUM_TIMEOUT_MS": "1000", "CAPSTORE_TIMEOUT_MS": "3000"})
        else:
            ch_port, ch_user, ch_password = open(opts.clickhouse).read().split()
            self.catalog_switch = Switch(opts.fixture, ch_port)
        s3_endpoint, s3_key, s3_secret, s3_bucket = open(opts.s3).read().split()
        self.store_switch = Switch(opts.fixture, s3_endpoint.rsplit(":", 1)[1])
        self.switches = [self.catalog_switch, self.store_switch] + [r[1] for r in self.replicas[1:]]
        self.bucket = s3_bucket
        self.env.update({"CAPSTORE_CLICKHOUSE_URL": "http://127.0.0.1:%d/" % self.catalog_switch.port,
                         "CAPSTORE_CLICKHOUSE_USER": ch_user, "CAPSTORE_CLICKHOUSE_PASSWORD": ch_password,
                         "CAPSTORE_S3_ENDPOINT": "http://127.0.0.1:%d" % self.store_switch.port,
                         "CAPSTORE_S3_BUCKET": s3_bucket, "AWS_ACCESS_KEY_ID": s3_key,
                         "AWS_SECRET_ACCESS_KEY": s3_secret, "AWS_REGION": "us-east-1"})

    def use_replica(self, k):
        """Processes started from now on talk to replica k (0-based), through its switch."""
        self.catalog_switch = self.replicas[k][1]
        self.env["CAPSTORE_CLICKHOUSE_URL"] = "http://127.0.0.1:%d/" % self.catalog_switch.port

    def sql(self, k, query):
        """One statement on replica k directly (not through its switch): the answer's text."""
        url = "http://127.0.0.1:%d/?%s" % (self.replicas[k][0], urllib.parse.urlencode(
            {"user": self.auth[0], "password": self.auth[1], "query": query}))
        with urllib.request.urlopen(urllib.request.Request(url, data=b""), timeout=60) as r:
            return r.read().decode()

    def table(self, name):
        return "%s_%s_v1" % (self.name, name)

    def spool(self, tag):
        return os.path.join(self.root, "spool-" + tag)

    def start(self, args, spool="a", **extra):
        env = dict(self.env)
        env["CAPSTORE_SPOOL"] = self.spool(spool)
        env.update({k: str(v) for k, v in extra.items()})
        p = Proc(self.opts.fixture, args, env)
        self.procs.append(p)
        return p

    def run(self, args, timeout=120, **extra):
        p = self.start(args, **extra)
        rc = p.wait(timeout)
        return rc, p.drain()

    def dump(self):
        """Visible capture ids (a list, duplicates kept) and the summary line."""
        rc, lines = self.run(["dump"])
        ids = [int(line.split()[1]) for line in lines if line.startswith("id ")]
        summary = [line for line in lines if line.startswith("records=")]
        need(rc == 0 and summary, "dump failed: %s" % lines[-3:])
        need(" bad_bytes=0 " in summary[0], "payloads differ from what was captured: %s" % summary[0])
        return ids, summary[0]

    def check_exact(self, must, may=None):
        """Every record in must is visible once, byte-exact; nothing outside must | may."""
        ids, summary = self.dump()
        may = set(may or ()) | set(must)
        dups = len(ids) - len(set(ids))
        need(dups == 0, "%d duplicate capture ids: %s" % (dups, summary))
        missing = set(must) - set(ids)
        need(not missing, "%d records captured before a successful flush are missing (e.g. %s)" %
             (len(missing), sorted(missing)[:5]))
        extra = set(ids) - may
        need(not extra, "%d records nobody captured are visible (e.g. %s)" % (len(extra), sorted(extra)[:5]))
        return ids

    def ready_packs(self, spool="a"):
        return glob.glob(os.path.join(self.spool(spool), "*.dmi-pack.ready"))

    def close(self):
        for p in self.procs:
            p.stop()
        for s in self.switches:
            s.close()
        subprocess.run(["umount", "-l", self.spool("full")], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        shutil.rmtree(self.root, ignore_errors=True)


def flush_line(p, drained, timeout):
    return p.expect(r"^flush rc=.+? drained=%d stage=(\S*) missing=(\d+) owed=(\d+) rejected=(\d+) took_ms=(\d+)" %
                    drained, timeout)


# ---- scenarios ------------------------------------------------------------------------------------


def scenario_roundtrip(w):
    """Capture, flush, close: every record queryable once and byte-exact; the spool empties.
    On S3 the capture process has its credentials in its configuration, not in the environment."""
    extra = {}
    if w.store_switch is not None:
        extra = {"CAPSTORE_S3_ACCESS_KEY_ID": w.env.pop("AWS_ACCESS_KEY_ID"),
                 "CAPSTORE_S3_SECRET_ACCESS_KEY": w.env.pop("AWS_SECRET_ACCESS_KEY")}
    rc, lines = w.run(["capture", 0, 500, 896], **extra)
    if extra:
        w.env.update({"AWS_ACCESS_KEY_ID": extra["CAPSTORE_S3_ACCESS_KEY_ID"],
                      "AWS_SECRET_ACCESS_KEY": extra["CAPSTORE_S3_SECRET_ACCESS_KEY"]})
    need(rc == 0, "capture failed: %s" % lines[-4:])
    w.check_exact(range(500))
    need(not w.ready_packs(), "packs the catalog holds are still in the spool: %s" % w.ready_packs())


def scenario_catalog_cut(w):
    """The catalog cut during uploads: packs stay in the spool, flush says not drained; healed, all drains."""
    if w.catalog_switch is None:
        return SKIP
    w.catalog_switch.cmd("cut")
    p = w.start(["capture", 0, 300, 896, 2000], CAPSTORE_FLUSH_TRIES=40)
    m = flush_line(p, 0, 30)
    need(m.group(1) in ("catalog", "upload"), "the stage named is %r" % m.group(1))
    need(w.ready_packs(), "a catalog outage must leave the packs in the durable spool")
    w.catalog_switch.cmd("pass")
    flush_line(p, 1, 60)
    need(p.wait(30) == 0, "capture failed after the cut healed: %s" % p.drain()[-3:])
    w.check_exact(range(300))
    need(not w.ready_packs(), "packs still in the spool after the catalog holds them")


def scenario_catalog_stall(w):
    """The catalog stalled: flush returns by its deadline (plus one request timeout) and says what is owed."""
    if w.catalog_switch is None:
        return SKIP
    w.catalog_switch.cmd("stall")
    p = w.start(["capture", 0, 200, 896, 2000], CAPSTORE_FLUSH_TRIES=40)
    m = flush_line(p, 0, 30)
    took = int(m.group(5))
    need(took <= 2000 + 1500 + 500, "flush answered after %d ms, deadline 2000 ms + a 1500 ms request timeout" % took)
    need(int(m.group(2)) + int(m.group(3)) > 0, "a flush that did not drain must say what is missing or owed")
    w.catalog_switch.cmd("pass")
    flush_line(p, 1, 60)
    need(p.wait(30) == 0, "capture failed after the stall ended")
    w.check_exact(range(200))


def scenario_rival(w):
    """A rival publisher stays standby while the holder lives and takes over after it dies."""
    ttl = 3.0 if w.opts.backend == "embedded" else 4.0  # ClickHouse 18.16: a guard over 1 s, under TTL/3
    extra = {"CAPSTORE_TTL_MS": int(ttl * 1000)}
    a = w.start(["serve", 120], spool="a", **extra)
    a.expect(r"^lease=held", 20)
    b = w.start(["serve", 120], spool="b", **extra)
    b.expect(r"^lease=busy", 20)
    deadline = time.monotonic() + 2 * ttl
    while time.monotonic() < deadline:
        try:
            line = b.lines.get(timeout=0.2)
        except queue.Empty:
            continue
        need(line is None or not line.startswith("lease=held"), "the rival took a live lease: %s" % line)
    a.kill9()
    killed = time.monotonic()
    b.expect(r"^lease=held", ttl * 2 + 5)
    took = time.monotonic() - killed
    need(took <= ttl + ttl / 3 + 3, "takeover took %.1f s after the holder died (TTL %.0f s)" % (took, ttl))
    b.stop()
    rc, lines = w.run(["capture", 0, 100, 896], spool="d")
    need(rc == 0, "capture after the takeover failed: %s" % lines[-3:])
    w.check_exact(range(100))


def scenario_head_403(w):
    """HEAD answering 403 during reconcile is a counted error, never a foreign object; healed, it is adopted."""
    if w.store_switch is None:
        return SKIP
    rc, lines = w.run(["orphan", 0, 80, 896])
    need(rc == 0, "orphan: %s" % lines)
    w.store_switch.cmd("http HEAD /%s/%s/ 403" % (w.bucket, w.name))
    p = w.start(["serve", 60], CAPSTORE_RECONCILE_MS=1000)
    m = p.expect(r"adopted=(\d+) head_errors=([1-9]\d*)", 20)
    need(m.group(1) == "0", "a pack whose HEAD failed was adopted")
    w.store_switch.cmd("pass")
    p.expect(r"indexed=([1-9]\d*) adopted=[1-9]", 20)
    p.stop()
    w.check_exact(range(80))


def sealed_records(spool):
    """Record numbers in the sealed packs of a spool (read from each pack's footer, dmi-pack-v1)."""
    out = set()
    for path in glob.glob(os.path.join(spool, "*.dmi-pack.ready")):
        with open(path, "rb") as f:
            data = f.read()
        need(len(data) >= 128 and data[-64:-56] == b"DMIFTR\0\0", "%s has no dmi-pack trailer" % path)
        offset, length = struct.unpack_from("<QQ", data, len(data) - 64 + 12)
        footer = json.loads(data[offset:offset + length])
        for rec in footer["records"]:
            out.add(int(rec["metadata"]["capture_id"].split("-")[1]))
    return out


def parse_run(lines):
    """Records a run captured, and whether its flush drained."""
    captured = [int(line.split()[1]) for line in lines if line.startswith("captured ")]
    drained = any(line.startswith("flush rc=ok drained=1") for line in lines)
    return captured, drained


def scenario_kill9(w, role="publisher"):
    """kill -9 at seeded random moments, then restart: nothing lost, nothing duplicated, the spool hands off."""
    rng = random.Random(w.opts.seed)
    must, may = set(), set()
    first = 0
    runs = w.opts.runs
    extra = {"CAPSTORE_LINGER_MS": 50}
    if role == "uploader":
        extra["CAPSTORE_ROLE"] = "uploader"
        pub = w.start(["serve", 3600], spool="pub", CAPSTORE_RECONCILE_MS=300)
        pub.expect(r"^lease=held", 20)
    for run in range(runs):
        count = rng.randrange(20, 120)
        p = w.start(["capture", first, count, 896, 10000, rng.randrange(0, 3000)], spool="k", **extra)
        time.sleep(rng.uniform(0.0, 1.5))
        p.kill9()
        captured, drained = parse_run(p.drain())
        (must if drained else may).update(captured)
        # Whatever the kill left sealed in the spool must be shipped by a later process.
        must.update(sealed_records(w.spool("k")))
        first += count
    # A last process of the same spool recovers what the killed ones left and flushes it.
    rc, lines = w.run(["capture", first, 10, 896, 30000], spool="k", **extra)
    need(rc == 0, "the process after %d kills did not drain: %s" % (runs, lines[-4:]))
    must.update(range(first, first + 10))
    if role == "uploader":
        # The publisher's periodic reconcile indexes what the uploaders handed off.
        deadline = time.monotonic() + 60
        while True:
            ids, _ = w.dump()
            if set(must) <= set(ids) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    try:
        w.check_exact(must, may)
    except Failure as e:
        quarantined = glob.glob(os.path.join(w.spool("k"), "*.quarantined"))
        reasons = []
        for q in quarantined:
            try:
                with open(q + ".reason") as f:
                    reasons.append("%s: %s" % (os.path.basename(q), f.read().strip()))
            except OSError as err:
                reasons.append("%s: no reason file (%s)" % (os.path.basename(q), err))
        last = [line for line in lines if line.startswith(("flush", "stats", "close"))]
        raise Failure("%s; quarantined in the spool: %d %s; the last process: %s" %
                      (e, len(quarantined), reasons, last))
    need(not w.ready_packs("k"), "packs left in the spool that the catalog holds: %d" % len(w.ready_packs("k")))
    print("  kill9 %s: %d runs, %d records flushed or left sealed by a kill, %d more captured, unsealed at the kill" %
          (role, runs, len(must), len(may - must)))


def scenario_torn_object(w):
    """A torn upload under a pack's key (s3rver keeps the part of a PUT's body that arrived before
    its sender died): the pack is sent again and indexed, never set aside."""
    if w.store_switch is None:
        return SKIP  # the dirstore publishes a PUT by rename: it never shows a torn object
    w.store_switch.cmd("http PUT / 503")
    rc, lines = w.run(["capture", 0, 150, 896, 1500], spool="t")
    need(rc != 0 and any(line.startswith("flush rc=") and " drained=0 " in line for line in lines),
         "a capture whose PUTs are refused drained: %s" % lines[-3:])
    sealed = len(glob.glob(os.path.join(w.spool("t"), "*.dmi-pack.ready")))
    need(sealed >= 2, "the refused PUTs left %d packs in the spool" % sealed)
    w.store_switch.cmd("pass")
    rc, lines = w.run(["tear"], spool="t")
    need(rc == 0 and ("torn %d" % sealed) in lines, "tear failed: %s" % lines[-3:])
    rc, lines = w.run(["capture", 150, 10, 896, 30000], spool="t")
    need(rc == 0, "the capture after the torn uploads did not drain: %s" % lines[-3:])
    stats = [json.loads(line[6:]) for line in lines if line.startswith("stats ")]
    need(stats and stats[-1]["upload_mismatches"] >= sealed and stats[-1]["packs_set_aside"] == 0,
         "%d torn objects: %s" % (sealed, stats[-1] if stats else lines[-3:]))
    w.check_exact(range(160))
    need(not glob.glob(os.path.join(w.spool("t"), "*.quarantined")), "a torn upload's pack was quarantined")
    need(not w.ready_packs("t"), "packs the catalog holds are still in the spool")
    print("  torn_object: %d torn uploads sent again, %d mismatching HEADs" %
          (sealed, stats[-1]["upload_mismatches"]))


def scenario_kill9_uploader(w):
    if w.opts.backend != "embedded":
        return SKIP  # the npm S3 server lists in path order: uploaders are refused on it (docs/catalog-protocol.md)
    return scenario_kill9(w, role="uploader")


def scenario_uploaders(w):
    """Several uploader processes and one publisher share one catalog and bucket."""
    if w.opts.backend != "embedded":
        return SKIP  # as above: s3rver's LIST order cannot serve uploaders
    pub = w.start(["serve", 3600], spool="pub", CAPSTORE_RECONCILE_MS=300)
    pub.expect(r"^lease=held", 20)
    ups = [w.start(["capture", 1000 * i, 200, 896], spool="u%d" % i, CAPSTORE_ROLE="uploader") for i in range(3)]
    for u in ups:
        need(u.wait(60) == 0, "an uploader did not drain: %s" % u.drain()[-3:])
    must = set()
    for i in range(3):
        must.update(range(1000 * i, 1000 * i + 200))
    deadline = time.monotonic() + 30
    while True:
        ids, _ = w.dump()
        if must <= set(ids) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    w.check_exact(must)


def scenario_spool_full(w):
    """The spool's file system full: the capture call gets a named error, sealed packs survive, capture resumes."""
    if w.store_switch is None:
        return SKIP  # packs must stay in the spool: the store is cut through the switch
    spool = w.spool("full")
    os.makedirs(spool, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", spool],
                      stderr=subprocess.DEVNULL).returncode != 0:
        return SKIP  # no permission to mount here
    w.store_switch.cmd("cut")
    p = w.start(["capture", 0, 1500, 896, 5000], spool="full", CAPSTORE_FULL_REFUSE=1, CAPSTORE_FLUSH_TRIES=20)
    m = p.expect(r"^write (\d+) rc=(.*spool file system full.*)$", 60)
    need(m.group(2).startswith("no space in the spool") or "spool quota" in m.group(2) or "full" in m.group(2),
         "the refusal names no full spool: %s" % m.group(0))
    refused_at = int(m.group(1))
    w.store_switch.cmd("pass")
    p.expect(r"^captured %d$" % (refused_at + 1), 60)  # room came back: the same record goes in
    rc = p.wait(120)
    p.drain()
    need(rc == 0, "the capture did not drain once the store healed: %s" % p.seen[-4:])
    captured, _ = parse_run(p.seen)
    stats = [line for line in p.seen if line.startswith("stats ")]
    dropped = int(re.search(r'"records_dropped":(\d+)', stats[-1]).group(1))
    ids = w.check_exact(set(), set(captured))
    need(dropped == 0, "%d records accepted before the file system filled were lost" % dropped)
    need(len(ids) == len(captured) - dropped,
         "%d visible, %d captured, %d dropped by the full disk (counted): the rest must all be there" %
         (len(ids), len(captured), dropped))
    print("  spool_full: refused at record %d; %d captured, %d lost with the pack that met the full disk" %
          (refused_at, len(captured), dropped))


def scenario_poison(w):
    """A pack the catalog refuses as invalid, and one as too large: each set aside (kept in the store,
    quarantined in the spool), later packs index, and the next flush names each once."""
    if w.catalog_switch is None:
        return SKIP  # the refusals are injected by the switch in front of ClickHouse
    # The unfenced descriptor insert (its statement rides in the URL; docs/clickhouse.md).
    cluster = ""
    if w.replicas:  # the replication settings every statement carries (insert_quorum_timeout: 1000 ms)
        cluster = "&insert_quorum=%d&insert_quorum_timeout=1000&select_sequential_consistency=1" \
                  "&distributed_ddl_task_timeout=%d" % (len(w.replicas), int(w.env["CAPSTORE_TIMEOUT_MS"]) // 2000)
    rows = "/?wait_end_of_query=1&max_query_size=262144%s&max_insert_block_size=65536&query=INSERT" % cluster
    env = dict(w.env, CAPSTORE_SPOOL=w.spool("a"))
    p = Proc(w.opts.fixture, ["session"], env, stdin=True)
    w.procs.append(p)
    p.expect(r"^open rc=ok", 20)

    def say(text):
        p.p.stdin.write(text + "\n")
        p.p.stdin.flush()

    def batch(first, status):
        if status:
            w.catalog_switch.cmd("http POST %s %d" % (rows, status))
        else:
            w.catalog_switch.cmd("pass")
        say("capture %d 50 896" % first)
        p.expect(r"^captured %d 50 rc=ok" % first, 20)
        say("flush 20000")
        return p.expect(r"^flush rc=(.+?) drained=(\d) stage=\S* missing=\d+ owed=\d+ rejected=(\d+) "
                        r"took_ms=\d+ named=(\S+)", 40)

    set_aside = []
    for first, status in ((0, 400), (50, 0), (100, 413), (150, 0)):
        m = batch(first, status)
        need(m.group(2) == "1", "flush after batch %d did not drain: %s" % (first, m.group(0)))
        if status:
            need(m.group(3) == "1" and m.group(4) != "-", "the refused pack is not named: %s" % m.group(0))
            need(m.group(1) == "corrupt", "a drained flush with a set-aside pack answers %r" % m.group(1))
            set_aside.append(m.group(4))
        else:
            need(m.group(3) == "0" and m.group(1) == "ok", "a set-aside pack was named twice: %s" % m.group(0))
    say("close")
    need(p.wait(30) == 0, "close failed: %s" % p.drain()[-2:])
    w.check_exact(list(range(50, 100)) + list(range(150, 200)))
    quarantined = glob.glob(os.path.join(w.spool("a"), "*.quarantined"))
    need(len(quarantined) == 2 and all(any(i in q for q in quarantined) for i in set_aside),
         "the set-aside packs are not quarantined in the spool: %s" % quarantined)


def duplicate_versions(w, k):
    """Versions published more than once, read on replica k (version 0, the barrier rows, aside)."""
    return int(w.sql(k, "SELECT count() FROM (SELECT version, count() AS n FROM %s WHERE version > 0 "
                        "GROUP BY version HAVING n > 1)" % w.table("publishes")))


def unconfirmed_rows(w, k):
    """Rows replica k holds that its quorum has not confirmed: writes that timed out (319) and may land later."""
    counts = []
    for consistent in (0, 1):
        counts.append(sum(int(w.sql(k, "SELECT count() FROM %s SETTINGS select_sequential_consistency = %d" %
                                    (w.table(t), consistent)))
                          for t in ("claims", "publishes", "inventory")))
    return counts[0] - counts[1]


def scenario_failover(w):
    """A publisher fails over from replica to replica. Each run captures on the next replica while
    another replica stops fetching (every quorum write times out, 319, and lands once it fetches again,
    after its writer was killed) or its own replica is cut off; it is killed -9 at a seeded moment.
    The last run, on yet another replica, drains: every record flushed or left sealed is there once,
    byte-exact, read on every replica, and no version is published twice."""
    if not w.replicas:
        return SKIP
    rng = random.Random(w.opts.seed)
    n = len(w.replicas)
    ttl = 4000
    # About ten records a pack: the read-back check on every replica reads each pack's rows once.
    extra = {"CAPSTORE_LINGER_MS": 400, "CAPSTORE_TTL_MS": ttl}
    must, may = set(), set()
    first = unconfirmed = cuts = 0
    for run in range(w.opts.runs):
        k = run % n
        w.use_replica(k)
        count = rng.randrange(150, 300)  # 6-12 s of capture at 40 ms a record
        p = w.start(["capture", first, count, 896, 15000, 40000], spool="f", **extra)
        # The lease frees a TTL after the last run's kill: fault the run once it is publishing.
        time.sleep(rng.uniform(ttl / 1000.0, ttl / 1000.0 + 3.0))
        if rng.random() < 0.75:
            lag = (k + 1 + rng.randrange(n - 1)) % n
            w.sql(lag, "SYSTEM STOP FETCHES")
            time.sleep(rng.uniform(0.5, 3.0))
            p.kill9()
            unconfirmed += unconfirmed_rows(w, k)
            w.sql(lag, "SYSTEM START FETCHES")
        else:
            w.catalog_switch.cmd("cut")
            cuts += 1
            time.sleep(rng.uniform(0.2, 2.0))
            p.kill9()
            w.catalog_switch.cmd("pass")
        captured, drained = parse_run(p.drain())
        (must if drained else may).update(captured)
        must.update(sealed_records(w.spool("f")))
        first += count
    w.use_replica(w.opts.runs % n)
    t0 = time.monotonic()
    rc, lines = w.run(["capture", first, 10, 896, 60000], spool="f", **extra)
    drain_s = time.monotonic() - t0
    need(rc == 0, "the process after %d failovers did not drain: %s" % (w.opts.runs, lines[-4:]))
    must.update(range(first, first + 10))
    for k in range(n):
        for t in ("claims", "descriptors", "inventory", "publishes", "rejected"):
            w.sql(k, "SYSTEM SYNC REPLICA %s" % w.table(t))
        w.use_replica(k)
        w.check_exact(must, may)
        dups = duplicate_versions(w, k)
        need(dups == 0, "%d versions published twice (read on replica %d)" % (dups, k + 1))
    need(not w.ready_packs("f"), "packs left in the spool that the catalog holds: %d" % len(w.ready_packs("f")))
    print("  failover: %d runs over %d replicas (%d cut off), %d catalog rows unconfirmed at a kill and landed "
          "later; %d records flushed or sealed, all there once; the last run drained in %.1f s" %
          (w.opts.runs, n, cuts, unconfirmed, len(must), drain_s))


SCENARIOS = {
    "roundtrip": scenario_roundtrip,
    "catalog_cut": scenario_catalog_cut,
    "catalog_stall": scenario_catalog_stall,
    "rival": scenario_rival,
    "head_403": scenario_head_403,
    "torn_object": scenario_torn_object,
    "kill9": scenario_kill9,
    "kill9_uploader": scenario_kill9_uploader,
    "uploaders": scenario_uploaders,
    "spool_full": scenario_spool_full,
    "poison": scenario_poison,
    "failover": scenario_failover,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--backend", choices=["embedded", "servers", "cluster"], required=True)
    ap.add_argument("--clickhouse")
    ap.add_argument("--cluster")
    ap.add_argument("--s3")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CAPSTORE_LIVE_SEED", "1")))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("scenarios", nargs="*")
    opts = ap.parse_args()
    names = opts.scenarios or list(SCENARIOS)
    passed = failed = skipped = 0
    for name in names:
        random.seed(opts.seed)
        w = World(opts, name)
        began = time.monotonic()
        try:
            verdict = SCENARIOS[name](w)
            if verdict == SKIP:
                skipped += 1
                print("%s [%s]: skipped (%.1f s)" % (name, opts.backend, time.monotonic() - began))
            else:
                passed += 1
                print("%s [%s]: passed (%.1f s)" % (name, opts.backend, time.monotonic() - began))
        except Failure as e:
            failed += 1
            servers = "".join(" --%s %s" % (k, getattr(opts, k)) for k in ("clickhouse", "cluster", "s3")
                              if getattr(opts, k))
            print("%s [%s]: FAILED: %s\n  replay: %s --fixture %s --backend %s%s --seed %d --runs %d %s" %
                  (name, opts.backend, e, sys.argv[0], opts.fixture, opts.backend, servers, opts.seed, opts.runs,
                   name))
        finally:
            w.close()
        sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed) + (", %d skipped" % skipped if skipped else ""))
    if failed:
        return 1
    return 77 if passed == 0 and skipped > 0 else 0


if __name__ == "__main__":
    sys.exit(main())

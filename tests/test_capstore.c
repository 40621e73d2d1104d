/*
 * The service runtime (capstore.h) on the embedded defaults: a dirstore and
 * a SQLite catalog, no server. Records captured before a successful flush
 * are in the catalog exactly once and read back byte-exact; configuration
 * refusals name the field; a restart recovers what the spool holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>

#include "test_capstore_util.h"
#include "test_fs_util.h"

#define SEC CS_SEC_NS

typedef struct env {
  char *root;
  char spool[600], bucket[600], db[600];
} env;

static void env_make(env *e, const char *name) {
  e->root = tf_temp_dir(name);
  snprintf(e->spool, sizeof e->spool, "%s/spool", e->root);
  snprintf(e->bucket, sizeof e->bucket, "%s/bucket", e->root);
  snprintf(e->db, sizeof e->db, "%s/catalog.db", e->root);
}

static capstore_config env_config(const env *e) {
  capstore_config cfg;
  capstore_config_default(&cfg);
  cfg.spool_dir = e->spool;
  cfg.store_dir = e->bucket;
  cfg.sqlite_path = e->db;
  cfg.capture.sink.pack_records_max = 100;
  cfg.capture.staging_bytes = 8u << 20;
  cfg.capture.record_bytes_max = 1u << 20;
  cfg.capture.direct_io = false;
  return cfg;
}

static void read_back(const env *e, uint64_t expected, tc_seen *seen) {
  cs_store store;
  cs_catalog catalog;
  assert_int_equal(cs_dirstore_open(e->bucket, &store), CS_E_OK);
  assert_int_equal(cs_sqlite_catalog_open(e->db, 0, &catalog), CS_E_OK);
  assert_int_equal(tc_read_back(&store, &catalog, "capstore/", expected, expected, seen), CS_E_OK);
  catalog.ops->close(catalog.self);
  cs_store_close(&store);
}

static void assert_exactly(const tc_seen *seen, uint64_t records) {
  assert_int_equal(seen->records, records);
  assert_int_equal(seen->missing, 0);
  assert_int_equal(seen->duplicates, 0);
  assert_int_equal(seen->unknown, 0);
  assert_int_equal(seen->bad_bytes, 0);
}

/* A flush answers once the catalog holds the packs; their removal from the spool follows: wait for it (5 s). */
static void wait_handed_off(capstore *cs, capstore_stats *stats) {
  uint64_t until = capstore_clock_ns() + 5 * SEC;
  do {
    capstore_stats_get(cs, stats);
    if (stats->capture.sink.spool_packs == 0 && stats->service.pending_spool == 0) return;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  } while (capstore_clock_ns() < until);
}

/* Capture 1,000 records in 10 packs, flush: every one is queryable and reads back byte-exact. */
static void test_capture_flush_query(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_flush");
  capstore_config cfg = env_config(&e);
  capstore *cs = NULL;
  char msg[256];
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  assert_int_equal(tc_capture(cs, 0, 1000, 896), CS_E_OK);
  capstore_flush_report report;
  int rc = capstore_flush(cs, capstore_clock_ns() + 30 * SEC, &report, msg, sizeof msg);
  if (rc != CS_E_OK) fprintf(stderr, "flush: %s\n", msg);
  assert_int_equal(rc, CS_E_OK);
  assert_true(report.drained);
  tc_seen seen;
  read_back(&e, 1000, &seen);
  assert_exactly(&seen, 1000);
  assert_int_equal(seen.packs, 10);
  capstore_stats stats;
  wait_handed_off(cs, &stats);
  assert_int_equal(stats.service.indexed, 10);
  assert_int_equal(stats.service.handed_off, 10);
  assert_int_equal(stats.capture.sink.spool_packs, 0); /* handed off: the spool is empty */
  assert_int_equal(stats.service.lease_state, CS_LEASE_HELD);
  char text[16384];
  assert_true(capstore_stats_json(cs, text, sizeof text) < sizeof text);
  assert_non_null(strstr(text, "\"packs_indexed\":10,"));
  assert_true(capstore_stats_prometheus(cs, text, sizeof text) < sizeof text);
  assert_non_null(strstr(text, "capstore_packs_indexed_total 10\n"));
  assert_int_equal(capstore_close(cs, 10 * SEC, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + SEC, NULL, msg, sizeof msg), CS_E_CLOSED);
  capstore_free(cs);
  tc_remove_all(e.root);
}

typedef struct flush_call {
  capstore *cs;
  uint64_t deadline_ns;
  int rc;
} flush_call;

static void *flush_in_thread(void *arg) {
  flush_call *call = arg;
  char msg[256];
  call->rc = capstore_flush(call->cs, call->deadline_ns, NULL, msg, sizeof msg);
  return NULL;
}

/* The capture role's config: the serving runtime's spool, no store, no catalog. */
static capstore_config capture_role_config(const env *e) {
  capstore_config cfg = env_config(e);
  cfg.role = CS_ROLE_CAPTURE;
  cfg.store_dir = NULL;
  cfg.sqlite_path = NULL;
  cfg.capture.sink.linger_ns = 50 * CS_MS_NS;
  return cfg;
}

static uint32_t private_spools(const env *e) {
  char path[700];
  snprintf(path, sizeof path, "%s/.capture", e->spool);
  DIR *dir = opendir(path);
  if (dir == NULL) return 0;
  uint32_t n = 0;
  for (struct dirent *d; (d = readdir(dir)) != NULL;) n += d->d_name[0] != '.';
  closedir(dir);
  return n;
}

/*
 * Side-car: two capture-role processes hand packs to a serving runtime. Without it a flush waits at stage "daemon"
 * and capture holds at its own quota; with it every record is in the catalog once, and close leaves nothing behind.
 */
static void test_capture_role_and_serve(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_serve");
  char msg[512];
  capstore *cs = NULL;
  /* A capture-role config naming a store or catalog is a mistake, said as such. */
  capstore_config bad = capture_role_config(&e);
  bad.store_dir = e.bucket;
  assert_int_equal(capstore_open(&bad, &cs, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "leave store_dir"));
  bad = capture_role_config(&e);
  bad.sqlite_path = e.db;
  assert_int_equal(capstore_config_validate(&bad, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "catalog"));
  bad = env_config(&e);
  bad.role = CS_ROLE_CAPTURE;
  bad.store_dir = NULL;
  bad.sqlite_path = NULL;
  bad.serve = true;
  assert_int_equal(capstore_config_validate(&bad, msg, sizeof msg), CS_E_CONFIG);

  /* No daemon yet: the packs wait, counted against this process's quota. */
  capstore_config cc = capture_role_config(&e);
  cc.capture.sink.spool_packs_max = 3;
  cc.capture.sink.full_policy = CS_FULL_REFUSE;
  capstore *a = NULL, *b = NULL;
  assert_int_equal(capstore_open(&cc, &a, msg, sizeof msg), CS_E_OK);
  assert_int_equal(private_spools(&e), 1);
  assert_int_equal(tc_capture(a, 0, 300, 64), CS_E_OK); /* 3 packs: the quota */
  capstore_flush_report report;
  assert_int_equal(capstore_flush(a, capstore_clock_ns() + 300 * CS_MS_NS, &report, msg, sizeof msg), CS_E_TIMEOUT);
  assert_false(report.drained);
  assert_string_equal(report.stage, "daemon");
  assert_int_equal(report.missing_packs, 3);
  assert_non_null(strstr(msg, "not yet shipped by capstore serve"));
  capstore_stats st;
  capstore_stats_get(a, &st);
  assert_int_equal(st.handoff_linked, 3);
  assert_int_equal(st.handoff_waiting, 3);
  assert_int_equal(st.capture.sink.spool_packs, 3);
  assert_int_equal(tc_capture(a, 300, 1, 64), CS_E_SPOOL_FULL); /* refused, as the quota says */

  /* The daemon starts: what waited ships, and a second capture process joins. */
  capstore_config sc = env_config(&e);
  sc.serve = true;
  sc.daemon.scan_interval_ns = 20 * CS_MS_NS;
  capstore *daemon = NULL;
  assert_int_equal(capstore_open(&sc, &daemon, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_open(&cc, &b, msg, sizeof msg), CS_E_OK);
  assert_int_equal(private_spools(&e), 2);
  assert_int_equal(tc_capture(b, 400, 250, 64), CS_E_OK);
  int rc = capstore_flush(a, capstore_clock_ns() + 20 * SEC, &report, msg, sizeof msg);
  if (rc != CS_E_OK) fprintf(stderr, "flush a: %s\n", msg);
  assert_int_equal(rc, CS_E_OK);
  assert_true(report.drained);
  assert_int_equal(tc_capture(a, 300, 100, 64), CS_E_OK); /* the quota came back */
  assert_int_equal(capstore_flush(a, capstore_clock_ns() + 20 * SEC, &report, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_flush(b, capstore_clock_ns() + 20 * SEC, &report, msg, sizeof msg), CS_E_OK);
  capstore_stats_get(b, &st);
  assert_int_equal(st.handoff_shipped, 3);
  assert_int_equal(st.handoff_waiting, 0);
  assert_int_equal(st.capture.sink.spool_packs, 0);
  /* Everything both captured is in the catalog once, byte-exact. */
  tc_seen seen;
  read_back(&e, 650, &seen);
  assert_int_equal(seen.records, 650);
  assert_int_equal(seen.missing + seen.duplicates + seen.unknown + seen.bad_bytes, 0);
  capstore_stats_get(daemon, &st);
  assert_int_equal(st.capture.admitted_packs + st.capture.recovered_packs, 7); /* a's first 3 were there at its open */
  assert_int_equal(st.capture.recovered_packs, 3);
  assert_int_equal(st.service.indexed, 7);
  /* Close hands over and removes the private spools. */
  assert_int_equal(capstore_close(a, 10 * SEC, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_close(b, 10 * SEC, msg, sizeof msg), CS_E_OK);
  capstore_free(a);
  capstore_free(b);
  assert_int_equal(private_spools(&e), 0);
  assert_int_equal(capstore_close(daemon, 10 * SEC, msg, sizeof msg), CS_E_OK);
  capstore_free(daemon);
  /* No daemon again: a flush waiting for it answers CS_E_CLOSED as soon as close is called, and close is prompt. */
  capstore *c = NULL;
  assert_int_equal(capstore_open(&cc, &c, msg, sizeof msg), CS_E_OK);
  assert_int_equal(tc_capture(c, 700, 10, 64), CS_E_OK);
  flush_call call = {.cs = c, .deadline_ns = capstore_clock_ns() + 20 * SEC};
  pthread_t flusher;
  assert_int_equal(pthread_create(&flusher, NULL, flush_in_thread, &call), 0);
  struct timespec pause = {0, 200 * 1000 * 1000};
  nanosleep(&pause, NULL);
  uint64_t t0 = capstore_clock_ns();
  assert_int_equal(capstore_close(c, 5 * SEC, msg, sizeof msg), CS_E_OK);
  pthread_join(flusher, NULL);
  assert_true(capstore_clock_ns() - t0 < 3 * SEC);
  assert_int_equal(call.rc, CS_E_CLOSED);
  capstore_free(c);
  tc_remove_all(e.root);
}

/* A flush with nothing captured answers OK at once; a second process's open is refused while one owns the spool. */
static void test_empty_flush_and_busy_spool(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_empty");
  capstore_config cfg = env_config(&e);
  capstore *cs = NULL, *other = NULL;
  char msg[256];
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + 10 * SEC, NULL, msg, sizeof msg), CS_E_OK);
  int rc = capstore_open(&cfg, &other, msg, sizeof msg);
  assert_int_equal(rc, CS_E_BUSY);
  assert_null(other);
  assert_non_null(strstr(msg, "one owner per spool")); /* names the holder */
  assert_int_equal(capstore_close(cs, 10 * SEC, msg, sizeof msg), CS_E_OK);
  capstore_free(cs);
  tc_remove_all(e.root);
}

/* Closing seals and drains what was captured; a reopened runtime adds to it without duplicates. */
static void test_close_drains_and_reopen(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_reopen");
  capstore_config cfg = env_config(&e);
  capstore *cs = NULL;
  char msg[256];
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  assert_int_equal(tc_capture(cs, 0, 250, 64), CS_E_OK);
  assert_int_equal(capstore_close(cs, 20 * SEC, msg, sizeof msg), CS_E_OK);
  capstore_free(cs);
  tc_seen seen;
  read_back(&e, 250, &seen);
  assert_exactly(&seen, 250);
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  assert_int_equal(tc_capture(cs, 250, 250, 64), CS_E_OK);
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + 30 * SEC, NULL, msg, sizeof msg), CS_E_OK);
  read_back(&e, 500, &seen);
  assert_exactly(&seen, 500);
  capstore_free(cs); /* closes */
  tc_remove_all(e.root);
}

/* Packs left in the spool by a process that never flushed are recovered and indexed by the next one. */
static void test_recovers_spooled_packs(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_recover");
  /* A capture sink alone writes sealed packs into the spool, as a process that died before shipping would. */
  capstore_config cfg = env_config(&e);
  cs_capture *cap = NULL;
  char msg[256];
  cs_capture_config ccfg = cfg.capture;
  assert_int_equal(cs_capture_open(e.spool, &ccfg, &cap, msg, sizeof msg), CS_E_OK);
  uint8_t bytes[128];
  for (uint64_t n = 0; n < 300; n++) {
    tc_record r;
    tc_record_make(&r, n, 64);
    tc_payload(n, bytes, sizeof bytes);
    assert_int_equal(cs_capture_write(cap, &r.meta, bytes, sizeof bytes, msg, sizeof msg), CS_E_OK);
  }
  assert_int_equal(cs_capture_close(cap, CS_NEVER, msg, sizeof msg), CS_E_OK);
  cs_capture_free(cap);
  capstore *cs = NULL;
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + 30 * SEC, NULL, msg, sizeof msg), CS_E_OK);
  tc_seen seen;
  read_back(&e, 300, &seen);
  assert_exactly(&seen, 300);
  capstore_stats stats;
  wait_handed_off(cs, &stats);
  assert_int_equal(stats.capture.sink.spool_packs, 0);
  capstore_free(cs);
  tc_remove_all(e.root);
}

/*
 * A spooled pack that recovery can neither verify nor quarantine (corrupt,
 * and a directory already holds its quarantine name) is kept, never shipped,
 * and shown in the stats (JSON and Prometheus) with the file and why; the
 * runtime starts and ships the others.
 */
static void test_recovery_kept_in_stats(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_kept");
  capstore_config cfg = env_config(&e);
  cs_capture *cap = NULL;
  char msg[256];
  cs_capture_config ccfg = cfg.capture;
  assert_int_equal(cs_capture_open(e.spool, &ccfg, &cap, msg, sizeof msg), CS_E_OK);
  uint8_t bytes[128];
  for (uint64_t n = 0; n < 300; n++) {
    tc_record r;
    tc_record_make(&r, n, 64);
    tc_payload(n, bytes, sizeof bytes);
    assert_int_equal(cs_capture_write(cap, &r.meta, bytes, sizeof bytes, msg, sizeof msg), CS_E_OK);
  }
  assert_int_equal(cs_capture_close(cap, CS_NEVER, msg, sizeof msg), CS_E_OK);
  cs_capture_free(cap);
  cs_spool_entry entries[8];
  size_t count = 0;
  cs_spool *spool = NULL;
  assert_int_equal(cs_spool_open(e.spool, NULL, &spool, msg, sizeof msg), CS_E_OK);
  assert_int_equal(cs_spool_list(spool, entries, 8, &count), CS_E_OK);
  cs_spool_close(spool);
  assert_int_equal(count, 3); /* in name order, which is pack id order: the last holds records 200..299 */
  char path[900];
  snprintf(path, sizeof path, "%s/%s", e.spool, entries[2].name);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, 100, SEEK_SET), 0); /* a payload byte of the first record */
  assert_int_equal(fputc(0x5a, f), 0x5a);
  fclose(f);
  snprintf(path, sizeof path, "%s/%s.quarantined", e.spool, entries[2].name);
  assert_int_equal(mkdir(path, 0700), 0);
  tf_write_file(path, "x", "x", 1); /* rename(pack, non-empty directory) fails */

  capstore *cs = NULL;
  int rc = capstore_open(&cfg, &cs, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("it did not start: %s", msg);
  char text[8192];
  capstore_stats_json(cs, text, sizeof text);
  if (strstr(text, "\"spool_recovery_kept\":1,") == NULL || strstr(text, entries[2].name) == NULL) {
    fail_msg("stats: %s", text);
  }
  char prom[16384];
  capstore_stats_prometheus(cs, prom, sizeof prom);
  assert_non_null(strstr(prom, "\ncapstore_spool_recovery_kept 1\n"));
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + 30 * SEC, NULL, msg, sizeof msg), CS_E_OK);
  tc_seen seen;
  read_back(&e, 200, &seen);
  assert_exactly(&seen, 200);
  capstore_free(cs);
  snprintf(path, sizeof path, "%s/%s", e.spool, entries[2].name);
  assert_int_equal(access(path, F_OK), 0); /* still there, for the next start or an operator */
  tc_remove_all(e.root);
}

/*
 * Records with large descriptors (eight texts of 512 bytes that escape to six
 * each: 25 KB of footer a record, 74 MB for 3,000 where a footer may hold
 * 64 MiB): the sink seals before a footer passes its bound, so no accepted
 * record is dropped (before, every record past the bound was).
 */
static void test_large_descriptors_never_dropped(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_footer");
  capstore_config cfg = env_config(&e);
  cfg.capture.sink.pack_records_max = 4096; /* the default: the footer bound seals first */
  capstore *cs = NULL;
  char msg[256];
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  static char text[513];
  memset(text, 0x01, 512);
  enum { RECORDS = 3000 };
  uint8_t bytes[64];
  for (uint64_t n = 0; n < RECORDS; n++) {
    tc_record r;
    tc_record_make(&r, n, 32);
    cs_pack_text t = {text, 512};
    r.meta.experiment_id = r.meta.run_id = r.meta.request_id = r.meta.sequence_id = t;
    r.meta.model_id = r.meta.model_revision = r.meta.capture_policy_version = r.meta.hook_name = t;
    tc_payload(n, bytes, sizeof bytes);
    assert_int_equal(capstore_write(cs, &r.meta, bytes, sizeof bytes, msg, sizeof msg), CS_E_OK);
  }
  int rc = capstore_flush(cs, capstore_clock_ns() + 120 * SEC, NULL, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("flush: %s", msg);
  capstore_stats stats;
  capstore_stats_get(cs, &stats);
  assert_int_equal(stats.capture.records_dropped, 0);
  assert_int_equal(stats.capture.records_written, RECORDS);
  assert_true(stats.capture.packs_sealed >= 2); /* 74 MB of footers cannot fit one pack */
  capstore_free(cs);
  tc_seen seen;
  read_back(&e, RECORDS, &seen);
  assert_exactly(&seen, RECORDS);
  tc_remove_all(e.root);
}

typedef struct racer {
  capstore *cs;
  int kind; /* 0: capture, 1: flush with a passed deadline, 2: stats */
  _Atomic bool stop;
  uint64_t calls, closed;
  uint64_t first;
  int unexpected;      /* the first answer a racer should never get (checked by the main thread) */
  char unexpected_msg[256];
} racer;

static void *race_main(void *arg) {
  racer *r = arg;
  char msg[256], text[4096];
  uint8_t bytes[64];
  for (uint64_t n = r->first; !atomic_load(&r->stop); n++) {
    int rc = CS_E_OK;
    if (r->kind == 0) {
      tc_record rec;
      tc_record_make(&rec, n, 32);
      tc_payload(n, bytes, sizeof bytes);
      rc = capstore_write(r->cs, &rec.meta, bytes, sizeof bytes, msg, sizeof msg);
    } else if (r->kind == 1) {
      rc = capstore_flush(r->cs, 0, NULL, msg, sizeof msg);
      if (rc != CS_E_OK && rc != CS_E_TIMEOUT && rc != CS_E_BUSY && rc != CS_E_CLOSED && r->unexpected == 0) {
        r->unexpected = rc;
        snprintf(r->unexpected_msg, sizeof r->unexpected_msg, "flush: %.200s", msg);
      }
    } else {
      (void)capstore_stats_json(r->cs, text, sizeof text);
    }
    r->calls++;
    r->closed += rc == CS_E_CLOSED;
  }
  return NULL;
}

/*
 * Captures, polling flushes (deadline passed) and stats from other threads
 * while the runtime closes: no crash, no step pool exhausted (an assert
 * aborted the process), no use of freed memory (the ASan build runs this);
 * after close every call answers CS_E_CLOSED. A poll with nothing pending
 * answers OK.
 */
static void test_calls_racing_close(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_race");
  capstore_config cfg = env_config(&e);
  capstore *cs = NULL;
  char msg[256];
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + 10 * SEC, NULL, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_flush(cs, 0, NULL, msg, sizeof msg), CS_E_OK); /* idle: a poll (deadline passed) drains */
  racer racers[4] = {{.cs = cs, .kind = 0, .first = 0}, {.cs = cs, .kind = 0, .first = 1000000},
                     {.cs = cs, .kind = 1}, {.cs = cs, .kind = 2}};
  pthread_t threads[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&threads[i], NULL, race_main, &racers[i]), 0);
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  int rc = capstore_close(cs, 10 * SEC, msg, sizeof msg);
  nanosleep(&ts, NULL); /* the racers go on against the closed runtime */
  for (int i = 0; i < 4; i++) atomic_store(&racers[i].stop, true);
  for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
  if (rc != CS_E_OK) fail_msg("close: %s", msg);
  for (int i = 0; i < 4; i++)
    if (racers[i].unexpected != 0) fail_msg("racer %d: %s", i, racers[i].unexpected_msg);
  if (!(racers[0].calls > 0 && racers[2].calls > 10 && racers[0].closed > 0 && racers[2].closed > 0))
    fail_msg("calls %llu, %llu; closed %llu, %llu", (unsigned long long)racers[0].calls,
             (unsigned long long)racers[2].calls, (unsigned long long)racers[0].closed,
             (unsigned long long)racers[2].closed);
  capstore_free(cs);
  tc_remove_all(e.root);
}

typedef struct flush_arg {
  capstore *cs;
  int rc;
} flush_arg;

static void *flush_never_main(void *arg) {
  flush_arg *a = arg;
  char msg[256];
  a->rc = capstore_flush(a->cs, CS_NEVER, NULL, msg, sizeof msg);
  return NULL;
}

/* A flush that cannot drain (the catalog locked by another process) does not hold a close up: it answers CS_E_CLOSED. */
static void test_close_cuts_flush_short(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_cut");
  capstore_config cfg = env_config(&e);
  capstore *cs = NULL;
  char msg[256];
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  sqlite3 *lock = NULL;
  assert_int_equal(sqlite3_open(e.db, &lock), SQLITE_OK);
  sqlite3_busy_timeout(lock, 5000);
  assert_int_equal(sqlite3_exec(lock, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK); /* every write waits */
  assert_int_equal(tc_capture(cs, 0, 50, 32), CS_E_OK);
  pthread_t thread;
  flush_arg arg = {cs, 0};
  assert_int_equal(pthread_create(&thread, NULL, flush_never_main, &arg), 0);
  struct timespec ts = {0, 500 * 1000 * 1000};
  nanosleep(&ts, NULL);
  uint64_t began = capstore_clock_ns();
  (void)capstore_close(cs, 3 * SEC, msg, sizeof msg);
  uint64_t took = capstore_clock_ns() - began;
  pthread_join(thread, NULL);
  assert_int_equal(arg.rc, CS_E_CLOSED);
  if (took > 3 * SEC + 2 * cfg.service.request_timeout_ns) fail_msg("close took %llu ms", (unsigned long long)(took / CS_MS_NS));
  sqlite3_exec(lock, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(lock);
  capstore_free(cs);
  tc_remove_all(e.root);
}

/* A spool left fuller than this process's table (30 packs, spool_packs_max 8) drains whole, and capture goes on. */
static void test_spool_backlog_drains(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_backlog");
  capstore_config cfg = env_config(&e);
  cfg.capture.sink.pack_records_max = 10;
  cs_capture *cap = NULL;
  char msg[256];
  cs_capture_config ccfg = cfg.capture;
  assert_int_equal(cs_capture_open(e.spool, &ccfg, &cap, msg, sizeof msg), CS_E_OK);
  uint8_t bytes[64];
  for (uint64_t n = 0; n < 300; n++) {
    tc_record r;
    tc_record_make(&r, n, 32);
    tc_payload(n, bytes, sizeof bytes);
    assert_int_equal(cs_capture_write(cap, &r.meta, bytes, sizeof bytes, msg, sizeof msg), CS_E_OK);
  }
  assert_int_equal(cs_capture_close(cap, CS_NEVER, msg, sizeof msg), CS_E_OK);
  cs_capture_free(cap);
  cfg.service.spool_packs_max = 8;
  cfg.service.cycle_packs_max = 4;
  capstore *cs = NULL;
  assert_int_equal(capstore_open(&cfg, &cs, msg, sizeof msg), CS_E_OK);
  capstore_stats stats;
  uint64_t until = capstore_clock_ns() + 30 * SEC;
  do {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    capstore_stats_get(cs, &stats);
  } while (stats.capture.sink.spool_packs > 0 && capstore_clock_ns() < until);
  assert_int_equal(stats.capture.sink.spool_packs, 0);
  assert_int_equal(tc_capture(cs, 300, 20, 32), CS_E_OK); /* the quota is free again */
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + 30 * SEC, NULL, msg, sizeof msg), CS_E_OK);
  capstore_free(cs);
  tc_seen seen;
  read_back(&e, 320, &seen);
  assert_exactly(&seen, 320);
  tc_remove_all(e.root);
}

/* Each refusal names its field and rule; nothing is opened. */
static void test_config_refusals(void **state) {
  (void)state;
  env e;
  env_make(&e, "rt_config");
  capstore_config base = env_config(&e);
  capstore_config c;
  char msg[256];
  capstore *cs = NULL;
#define REFUSED(edit, needle)                                                         \
  do {                                                                                \
    c = base;                                                                         \
    edit;                                                                             \
    assert_int_equal(capstore_open(&c, &cs, msg, sizeof msg), CS_E_CONFIG);           \
    assert_null(cs);                                                                  \
    if (strstr(msg, needle) == NULL) fail_msg("'%s' does not name '%s'", msg, needle); \
  } while (0)
  REFUSED(c.spool_dir = NULL, "spool_dir");
  REFUSED(c.s3_endpoint = "https://s3.example", "exactly one of store_dir and s3_endpoint");
  REFUSED(c.store_dir = NULL, "exactly one of store_dir and s3_endpoint");
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "localhost:9000"), "s3_endpoint needs an explicit scheme");
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "ftp://x"), "s3_endpoint needs an explicit scheme");
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "http://127.0.0.1:9000", c.s3_bucket = "bkt"),
          "s3_endpoint uses http://, which sends the access key id, session token and data in clear: set "
          "s3_allow_insecure to allow it"); /* names the option the operator must set */
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "https://127.0.0.1:9000", c.s3_bucket = "bkt",
           c.s3_access_key_id = "AKIA", c.s3_secret_access_key = "s", c.s3_region = "us-east-1\r\nX-Evil: 1"),
          "s3_region has a control byte");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "localhost:8123"), "clickhouse_url needs an explicit scheme");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "ftp://x"), "clickhouse_url needs an explicit scheme");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "http://127.0.0.1:8123/"),
          "clickhouse_url uses http://, which sends the user and password in clear: set clickhouse_allow_insecure "
          "to allow it");
  REFUSED(c.clickhouse_url = "https://h:8443/", "exactly one of sqlite_path and clickhouse_url");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "https://h:8443/", c.clickhouse_database = "db;DROP"),
          "clickhouse_database must be");
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "https://s3.example/path", c.s3_bucket = "bucket"),
          "s3_endpoint must be scheme://host[:port] without a path");
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "https://s3.example?x=1", c.s3_bucket = "bucket"),
          "s3_endpoint must be scheme://host[:port] without a path");
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "https://s3.example", c.s3_bucket = "a b?c"), "s3_bucket must be");
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "https://s3.example", c.s3_bucket = ".."), "s3_bucket must be");
  REFUSED(c.key_prefix = "caf\xff/", "key_prefix is not UTF-8");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "https://h:8443/?database=a", c.clickhouse_database = "b"),
          "names a database and so does clickhouse_database");
  /* Replication settings come from clickhouse_cluster and its quorum, never the url's query, however spelled. */
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "https://h:8443/?insert%5Fquorum=2"),
          "clickhouse_url carries the replication setting 'insert_quorum' in its query: set clickhouse_cluster and "
          "clickhouse_insert_quorum instead");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "https://h:8443/?insert_quorum_timeout=1"),
          "replication setting 'insert_quorum_timeout'");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "https://h:8443/?max_threads=2&insert_quorum_parallel=1",
           c.clickhouse_cluster = "c1", c.clickhouse_insert_quorum = 2),
          "replication setting 'insert_quorum_parallel'");
  REFUSED((c.sqlite_path = NULL, c.clickhouse_url = "https://h:8443/?distributed_ddl_task_timeout=1"),
          "replication setting 'distributed_ddl_task_timeout'");
  REFUSED(c.key_prefix = "../other-bucket/", "key_prefix has a '.' or '..' segment");
  REFUSED(c.key_prefix = "a//", "key_prefix has an empty segment");
  REFUSED(c.key_prefix = "abc", "key_prefix must end with '/'");
  REFUSED(c.key_prefix = "", "key_prefix is empty while reconcile is on");
  REFUSED(c.name = "bad name", "name must be");
  static char long_region[200];
  memset(long_region, 'r', sizeof long_region - 1);
  REFUSED((c.store_dir = NULL, c.s3_endpoint = "https://s3.example", c.s3_bucket = "bucket",
           c.s3_access_key_id = "AKIA", c.s3_secret_access_key = "s", c.s3_region = long_region),
          "s3_region is 199 bytes; at most 127");
  REFUSED(c.service.lease_ttl_ns = 0, "service.lease_ttl_ns");
  REFUSED(c.service.index_batch_bytes_max = 4096, "service.index_batch_bytes_max");
  REFUSED(c.capture.staging_bytes = 1, "capture.staging_bytes");
  REFUSED(c.fence_margin_ns = 5, "fence_margin_ns");
  REFUSED(c.engine.start_timeout_ns = 0, "engine.start_timeout");
#undef REFUSED
  /* The secret never appears, even when it is what is wrong. */
  c = base;
  c.store_dir = NULL;
  c.s3_endpoint = "https://127.0.0.1:9000";
  c.s3_bucket = "bkt";
  c.s3_access_key_id = "AKIA";
  c.s3_secret_access_key = "TOPSECRET\n";
  assert_int_equal(capstore_config_validate(&c, msg, sizeof msg), CS_E_CONFIG);
  assert_null(strstr(msg, "TOPSECRET"));
  assert_non_null(strstr(msg, "s3_secret_access_key"));
  /* Missing credentials come from the environment, or are named. */
  c.s3_secret_access_key = NULL;
  unsetenv("AWS_SECRET_ACCESS_KEY");
  assert_int_equal(capstore_config_validate(&c, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "AWS_SECRET_ACCESS_KEY"));
  setenv("AWS_SECRET_ACCESS_KEY", "from-env", 1);
  assert_int_equal(capstore_config_validate(&c, msg, sizeof msg), CS_E_OK);
  unsetenv("AWS_SECRET_ACCESS_KEY");
  /* A harmless setting in the url's query is the operator's to set. */
  c = base;
  c.sqlite_path = NULL;
  c.clickhouse_url = "https://h:8443/?max_threads=2";
  assert_int_equal(capstore_config_validate(&c, msg, sizeof msg), CS_E_OK);
  /* The base config opens nothing when validated. */
  assert_int_equal(capstore_config_validate(&base, msg, sizeof msg), CS_E_OK);
  struct stat st;
  assert_int_not_equal(stat(e.spool, &st), 0);
  tc_remove_all(e.root);
}

/* The key prefix: "<name>/" by default, else the configured one (empty included); the length as snprintf. */
static void test_key_prefix(void **state) {
  (void)state;
  capstore_config c;
  capstore_config_default(&c);
  char out[CS_KEY_MAX];
  c.name = "runs";
  assert_int_equal(capstore_key_prefix(&c, out, sizeof out), 5);
  assert_string_equal(out, "runs/");
  c.key_prefix = "team/a/";
  assert_int_equal(capstore_key_prefix(&c, out, sizeof out), 7);
  assert_string_equal(out, "team/a/");
  c.key_prefix = "";
  assert_int_equal(capstore_key_prefix(&c, out, sizeof out), 0);
  assert_string_equal(out, "");
  /* Too small a buffer: cut and terminated, the answer still the whole length. */
  char small[4];
  c.key_prefix = NULL;
  assert_int_equal(capstore_key_prefix(&c, small, sizeof small), 5);
  assert_string_equal(small, "run");
  assert_int_equal(capstore_key_prefix(&c, NULL, 0), 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key_prefix),
      cmocka_unit_test(test_capture_flush_query),
      cmocka_unit_test(test_recovery_kept_in_stats),
      cmocka_unit_test(test_empty_flush_and_busy_spool),
      cmocka_unit_test(test_close_drains_and_reopen),
      cmocka_unit_test(test_recovers_spooled_packs),
      cmocka_unit_test(test_large_descriptors_never_dropped),
      cmocka_unit_test(test_spool_backlog_drains),
      cmocka_unit_test(test_calls_racing_close),
      cmocka_unit_test(test_close_cuts_flush_short),
      cmocka_unit_test(test_config_refusals),
      cmocka_unit_test(test_capture_role_and_serve),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

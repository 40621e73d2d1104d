/*
 * capstore-bench-service: the service runtime (capstore.h) end to end, on
 * real servers or on the embedded defaults (bench/run_service.sh runs the
 * matrix; docs/performance.md, "Service runtime", has the results).
 *
 * usage: capstore-bench-service MODE --work DIR [--s3 S3_ENDPOINT_FILE] [--clickhouse CH_ENDPOINT_FILE] [options]
 *   Without --s3 the store is a dirstore under DIR, without --clickhouse the catalog is SQLite under DIR.
 *   S3_ENDPOINT_FILE: "endpoint access_key secret bucket" (tools/servers/s3.sh);
 *   CH_ENDPOINT_FILE: "http_port user password" (tools/servers/clickhouse.sh); with --ch-cluster NAME and
 *   --ch-quorum Q, a replica of a replicated catalog (tools/servers/ch_cluster.sh; bench/run_cluster.sh).
 * MODE:
 *   flush    capture --records N (12288) of --bytes B (1792: one bf16 row of 896) in packs of --pack-records R
 *            (4096), then capstore_flush; --runs K (5). Times the flush call (a) and capture + flush (b); the
 *            open (which creates the catalog's tables and takes the lease) is timed apart and excluded.
 *   ship     --packs P (200) packs of --pack-records R (64) records of --bytes B (16384) sealed into a spool
 *            first (untimed), then the runtime opened on it: the time from capstore_open to a drained flush
 *            (tables made beforehand). With --s3 and --clickhouse the peers, in the same run, first in turn:
 *            `rclone copy` of the same pack files to the same bucket plus one POST of the same descriptor
 *            rows (INSERT ... FORMAT TabSeparated) into a table of the same schema. --live: the runtime
 *            opened first (excluded), then the same records captured, sealed and shipped (the first capture
 *            to a drained flush). --inflight K (4): the store's requests in flight and rclone's --transfers.
 *   latency  --rate N records/s (2000) of --bytes B for --seconds S (10) with capture.sink.linger_ns
 *            --linger-ms L (50). --method poll (default): a reader thread learns of sealed packs from
 *            inotify on the spool and asks the catalog every --poll-ms (2) which of them are visible (committed:
 *            indexed at a version <= the watermark); a record's latency is the end of the first answer
 *            that shows its pack, minus its capture. --method flush: capstore_flush every --flush-ms (100)
 *            from a second thread; a record's latency is the return of the first flush called after its
 *            capture, minus its capture.
 *   backoff  --dead store|catalog: that side at http://127.0.0.1:1 (a closed port; a dead store is an S3
 *            endpoint, a dead catalog a ClickHouse url). Captures 8 records in 2 packs, then counts the
 *            service's cycles and failed cycles over --window-ms (3000); --runs K.
 *   sidecar  the flush mode's capture + flush through the side-car shape against the in-process shape, in the
 *            same run, alternating: a serving runtime (cfg.serve, daemon.scan_interval --scan-ms S, 100) with a
 *            capture-role runtime beside it on the same spool (both in this process: the hand-off is the same
 *            hard links and directory scans it is between processes), against one in-process runtime. Times
 *            capture + drained flush; "median" gives the ratio side-car / in-process.
 *   smoke    small flush, ship, latency, backoff and sidecar runs on the embedded defaults (ctest bench.service_smoke).
 *
 * Every result is one line of key=value pairs ("mode=flush backend=s3+clickhouse run=1 ... flush_s=0.1234"),
 * then "median mode=... " lines with the medians and ratios. Exit status 0 only when every run drained and
 * every record was found queryable. --trace (flush, ship): a "trace t_ms=..." line each time a stage's count
 * moves. CAPSTORE_BENCH_PERF_CTL / _ACK: the FIFOs of `perf record -D -1 --control fifo:CTL,ACK`; sampling
 * is on from the first capture to the flush's return.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "bench_clickhouse.h"
#include "capstore/capstore.h"

#define RUNS_MAX 31
#define SEC CS_SEC_NS
#define MS CS_MS_NS
#define DEAD_URL "http://127.0.0.1:1"

typedef struct opts {
  const char *mode, *work, *s3_file, *ch_file, *dead, *method;
  const char *ch_cluster; /* a replicated catalog: the cluster's name (catalog.clickhouse.cluster) */
  unsigned ch_quorum;     /* and its insert_quorum */
  unsigned runs, records, bytes, pack_records, packs, rate, seconds, linger_ms, poll_ms, flush_ms, window_ms;
  unsigned scan_ms;  /* sidecar: the serving runtime's daemon.scan_interval */
  unsigned inflight; /* ship: store requests in flight (service.store_inflight_max) and rclone's --transfers */
  bool live;  /* ship: the runtime captures the packs while it runs, instead of opening on a sealed spool */
  bool trace; /* flush, ship: a line of the stages' counts every millisecond while the flush waits */
} opts;

/* The servers named by the endpoint files. */
typedef struct targets {
  char s3_endpoint[256], s3_key[128], s3_secret[128], s3_bucket[128];
  char ch_url[256], ch_user[64], ch_password[128];
  bool s3, ch;
} targets;

static const targets *g_targets; /* for the backend's name */

static uint64_t now_ns(void) { return capstore_clock_ns(); }
static double secs(uint64_t ns) { return (double)ns / 1e9; }

static void sleep_until(uint64_t at_ns) {
  struct timespec ts = {.tv_sec = (time_t)(at_ns / SEC), .tv_nsec = (long)(at_ns % SEC)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void sleep_ms(unsigned ms) { sleep_until(now_ns() + (uint64_t)ms * MS); }

static int usage(void) {
  fprintf(stderr,
          "usage: capstore-bench-service flush|ship|latency|backoff|sidecar|smoke --work DIR [--s3 FILE] [--clickhouse FILE]\n"
          "       [--runs K] [--records N] [--bytes B] [--pack-records R] [--packs P] [--rate N] [--seconds S]\n"
          "       [--linger-ms L] [--method poll|flush] [--poll-ms M] [--flush-ms M] [--dead store|catalog]\n"
          "       [--window-ms M] [--inflight K] [--scan-ms S] [--live] [--trace] [--ch-cluster NAME --ch-quorum Q]\n");
  return 2;
}

static bool mode_is(const opts *o, const char *mode) { return strcmp(o->mode, mode) == 0; }

/* Defaults by mode; the options then override them. */
static void opts_default(opts *o, const char *mode) {
  *o = (opts){.mode = mode, .method = "poll", .runs = 5, .records = 12288, .bytes = 1792, .pack_records = 4096,
              .packs = 200, .rate = 2000, .seconds = 10, .linger_ms = 50, .poll_ms = 2, .flush_ms = 100,
              .window_ms = 3000, .inflight = 4, .scan_ms = 100};
  if (strcmp(mode, "ship") == 0) {
    o->bytes = 16384;
    o->pack_records = 64;
  }
  if (strcmp(mode, "backoff") == 0) o->runs = 3;
}

static int opts_parse(int argc, char **argv, opts *o) {
  if (argc < 2) return usage();
  opts_default(o, argv[1]);
  for (int i = 2; i < argc; i++) {
    const char *name = argv[i];
    const char **text = NULL;
    unsigned *number = NULL;
    if (strcmp(name, "--trace") == 0 || strcmp(name, "--live") == 0) {
      *(name[2] == 't' ? &o->trace : &o->live) = true;
      continue;
    }
    if (strcmp(name, "--work") == 0) text = &o->work;
    else if (strcmp(name, "--s3") == 0) text = &o->s3_file;
    else if (strcmp(name, "--clickhouse") == 0) text = &o->ch_file;
    else if (strcmp(name, "--ch-cluster") == 0) text = &o->ch_cluster;
    else if (strcmp(name, "--ch-quorum") == 0) number = &o->ch_quorum;
    else if (strcmp(name, "--dead") == 0) text = &o->dead;
    else if (strcmp(name, "--method") == 0) text = &o->method;
    else if (strcmp(name, "--runs") == 0) number = &o->runs;
    else if (strcmp(name, "--records") == 0) number = &o->records;
    else if (strcmp(name, "--bytes") == 0) number = &o->bytes;
    else if (strcmp(name, "--pack-records") == 0) number = &o->pack_records;
    else if (strcmp(name, "--packs") == 0) number = &o->packs;
    else if (strcmp(name, "--rate") == 0) number = &o->rate;
    else if (strcmp(name, "--seconds") == 0) number = &o->seconds;
    else if (strcmp(name, "--linger-ms") == 0) number = &o->linger_ms;
    else if (strcmp(name, "--poll-ms") == 0) number = &o->poll_ms;
    else if (strcmp(name, "--flush-ms") == 0) number = &o->flush_ms;
    else if (strcmp(name, "--window-ms") == 0) number = &o->window_ms;
    else if (strcmp(name, "--inflight") == 0) number = &o->inflight;
    else if (strcmp(name, "--scan-ms") == 0) number = &o->scan_ms;
    else return usage();
    if (++i == argc) return usage();
    if (text != NULL) *text = argv[i];
    if (number != NULL && (*number = (unsigned)strtoul(argv[i], NULL, 10)) == 0) return usage();
  }
  bool known = mode_is(o, "flush") || mode_is(o, "ship") || mode_is(o, "latency") || mode_is(o, "backoff") ||
               mode_is(o, "smoke") || mode_is(o, "sidecar");
  bool method_ok = strcmp(o->method, "poll") == 0 || strcmp(o->method, "flush") == 0;
  bool dead_ok = !mode_is(o, "backoff") ||
                 (o->dead != NULL && (strcmp(o->dead, "store") == 0 || strcmp(o->dead, "catalog") == 0));
  if (!known || !method_ok || !dead_ok || o->work == NULL || o->runs > RUNS_MAX || o->bytes % 2 != 0 ||
      o->packs > 1000 || o->pack_records > CS_PACK_RECORDS_MAX || o->bytes > (2u << 20))
    return usage();
  return 0;
}

static bool targets_read(const opts *o, targets *t) {
  memset(t, 0, sizeof *t);
  if (o->s3_file != NULL) {
    FILE *f = fopen(o->s3_file, "r");
    t->s3 = f != NULL && fscanf(f, "%255s %127s %127s %127s", t->s3_endpoint, t->s3_key, t->s3_secret,
                                t->s3_bucket) == 4;
    if (f != NULL) fclose(f);
    if (!t->s3) return fprintf(stderr, "%s: not an S3 endpoint file\n", o->s3_file), false;
  }
  if (o->ch_file != NULL) {
    FILE *f = fopen(o->ch_file, "r");
    unsigned port = 0;
    t->ch = f != NULL && fscanf(f, "%u %63s %127s", &port, t->ch_user, t->ch_password) == 3;
    if (f != NULL) fclose(f);
    if (!t->ch) return fprintf(stderr, "%s: not a ClickHouse endpoint file\n", o->ch_file), false;
    snprintf(t->ch_url, sizeof t->ch_url, "http://127.0.0.1:%u/", port);
  }
  return true;
}

/* ---- one run's configuration ------------------------------------------------------------------ */

/* A run's name (its tables' prefix and key prefix) and its folder under --work. */
typedef struct run_env {
  char name[64], dir[512], spool[600], bucket[600], db[600];
  bool dead_store, dead_catalog;
} run_env;

static void run_env_make(const opts *o, const char *tag, unsigned run, run_env *e) {
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "bench_%ld_%s_%u", (long)getpid(), tag, run);
  snprintf(e->dir, sizeof e->dir, "%s/%s", o->work, e->name);
  snprintf(e->spool, sizeof e->spool, "%s/spool", e->dir);
  snprintf(e->bucket, sizeof e->bucket, "%s/bucket", e->dir);
  snprintf(e->db, sizeof e->db, "%s/catalog.db", e->dir);
  e->dead_store = o->dead != NULL && strcmp(o->dead, "store") == 0;
  e->dead_catalog = o->dead != NULL && strcmp(o->dead, "catalog") == 0;
}

static void remove_tree(const char *dir) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* "store+catalog": dirstore|s3|dead and sqlite|clickhouse|dead. */
static const char *backend_name(const run_env *e, char *out, size_t cap) {
  const targets *t = g_targets;
  snprintf(out, cap, "%s+%s", e->dead_store ? "dead_s3" : t->s3 ? "s3" : "dirstore",
           e->dead_catalog ? "dead_clickhouse" : t->ch ? "clickhouse" : "sqlite");
  return out;
}

/* A run's folder and name (run_env_make) and its configuration: the targets, or the embedded defaults. */
static void config_make(const opts *o, const targets *t, const char *tag, unsigned run, run_env *e,
                        capstore_config *cfg) {
  run_env_make(o, tag, run, e);
  capstore_config_default(cfg);
  cfg->capture.sink.pack_records_max = o->pack_records;
  cfg->service.store_inflight_max = o->inflight;
  cfg->name = e->name;
  cfg->spool_dir = e->spool;
  if (e->dead_store || t->s3) {
    cfg->s3_endpoint = e->dead_store ? DEAD_URL : t->s3_endpoint;
    cfg->s3_bucket = e->dead_store ? "dead" : t->s3_bucket;
    cfg->s3_access_key_id = e->dead_store ? "dead" : t->s3_key;
    cfg->s3_secret_access_key = e->dead_store ? "dead" : t->s3_secret;
    cfg->s3_allow_insecure = true;
  } else {
    cfg->store_dir = e->bucket;
  }
  if (e->dead_catalog || t->ch) {
    cfg->clickhouse_url = e->dead_catalog ? DEAD_URL "/" : t->ch_url;
    cfg->clickhouse_user = t->ch ? t->ch_user : "default";
    cfg->clickhouse_password = t->ch ? t->ch_password : "";
    cfg->clickhouse_allow_insecure = true;
    if (t->ch && o->ch_cluster != NULL) {
      cfg->clickhouse_cluster = o->ch_cluster;
      cfg->clickhouse_insert_quorum = o->ch_quorum;
    }
  } else {
    cfg->sqlite_path = e->db;
  }
}

/* ---- records ------------------------------------------------------------------------------------ */

typedef struct record {
  char capture_id[40];
  cs_pack_meta meta;
} record;

/* Record n: capture id "bench-<n>", bf16 [1, bytes / 2], one tenant, session and rank. */
static void record_make(record *r, uint64_t n, uint32_t bytes) {
  snprintf(r->capture_id, sizeof r->capture_id, "bench-%" PRIu64, n);
  r->meta = (cs_pack_meta){
      .capture_id = cs_pack_text_of(r->capture_id),
      .tenant_id = cs_pack_text_of("tenant-0042-interp-research"),
      .experiment_id = cs_pack_text_of("exp/2026-12-01/residual-stream"),
      .run_id = cs_pack_text_of("run-7c41e9d0b6a84f2e"),
      .session_id = cs_pack_text_of("sess-0190a4c2-5e61-7d3b-9c0f-2b1e4d5c6a7f"),
      .request_id = cs_pack_text_of("chatcmpl-0001"),
      .sequence_id = cs_pack_text_of("seq-0"),
      .model_id = cs_pack_text_of("Qwen/Qwen2-0.5B-Instruct"),
      .model_revision = cs_pack_text_of("c540970f9e29518b1d8f06ab8b24cba66ad77b6d"),
      .adapter_revision = cs_pack_text_of(NULL),
      .capture_policy_version = cs_pack_text_of("capture-policy/4.1.0"),
      .hook_name = cs_pack_text_of("model.layers.12.mlp.output"),
      .layer_number = 12,
      .step_number = n,
      .token_start = n,
      .token_end = n + 1,
      .dtype = CS_DTYPE_BFLOAT16,
      .rank = 2,
      .shape = {1, bytes / 2},
      .captured_at_ns = UINT64_C(1764547200000000000) + n,
  };
}

/* A payload buffer of pseudo-random bytes (stamped with n per record). */
static uint8_t *payload_make(size_t len) {
  uint8_t *p = malloc(len < 8 ? 8 : len);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; p != NULL && i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)x;
  }
  return p;
}

/* Captures records [first, first + count) through the runtime; false (and a message) on a refusal. */
static bool capture_range(capstore *cs, uint64_t first, uint64_t count, uint8_t *payload, uint32_t bytes) {
  char msg[256];
  for (uint64_t n = first; n < first + count; n++) {
    record r;
    record_make(&r, n, bytes);
    memcpy(payload, &n, sizeof n < bytes ? sizeof n : bytes);
    int rc = capstore_write(cs, &r.meta, payload, bytes, msg, sizeof msg);
    if (rc != CS_E_OK) return fprintf(stderr, "capture %" PRIu64 ": %s (%s)\n", n, cs_strerror(rc), msg), false;
  }
  return true;
}

/* ---- the runtime: open, ready, close -------------------------------------------------------------- */

/* Opens the runtime and waits (up to 60 s) for the lease and the start's reconcile pass, the service idle. */
static capstore *open_ready(const capstore_config *cfg, bool want_lease, uint64_t *open_ns) {
  char msg[256];
  capstore *cs = NULL;
  uint64_t t0 = now_ns();
  int rc = capstore_open(cfg, &cs, msg, sizeof msg);
  if (rc != CS_E_OK) return fprintf(stderr, "open: %s (%s)\n", cs_strerror(rc), msg), NULL;
  for (uint64_t until = now_ns() + 60 * SEC; want_lease && now_ns() < until; sleep_ms(1)) {
    capstore_stats st;
    capstore_stats_get(cs, &st);
    bool reconciled = !cfg->reconcile_at_start || st.service.reconcile_passes >= 1;
    if (st.service.lease_state == CS_LEASE_HELD && reconciled && st.service.inflight == 0) break;
  }
  *open_ns = now_ns() - t0;
  return cs;
}

static void close_free(capstore *cs, uint64_t budget_ns) {
  char msg[256];
  int rc = capstore_close(cs, budget_ns, msg, sizeof msg);
  if (rc != CS_E_OK && budget_ns > SEC) fprintf(stderr, "close: %s (%s)\n", cs_strerror(rc), msg);
  capstore_free(cs);
}

/* ---- what a reader finds --------------------------------------------------------------------------- */

/* Records visible in the catalog at its watermark, over every pack the store holds under prefix. */
static int64_t count_queryable(const capstore_config *cfg, const char *prefix, uint32_t rows_max) {
  cs_store store;
  cs_catalog cat;
  char msg[256];
  if (capstore_open_store(cfg, &store, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "store: %s\n", msg), -1;
  if (capstore_open_catalog(cfg, &cat, msg, sizeof msg) != CS_E_OK) {
    cs_store_close(&store);
    return fprintf(stderr, "catalog: %s\n", msg), -1;
  }
  static char keys[1000][CS_KEY_MAX];
  cs_descriptor_row *rows = calloc(rows_max, sizeof *rows);
  cs_cat_head head;
  cs_catalog_result res = {0};
  cs_store_result sres = {0};
  cs_uuid reader = {{0x42}};
  int64_t found = -1;
  char token[CS_KEY_MAX] = "";
  if (rows != NULL && cat.ops->head(cat.self, &reader, &head, &res) == CS_E_OK && res.outcome == CS_OUT_OK) found = 0;
  while (found >= 0) {
    cs_list_page page = {.keys = keys, .key_capacity = 1000};
    if (store.ops->list(store.self, prefix, token, 1000, &page, &sres) != CS_E_OK || sres.outcome != CS_OUT_OK) {
      found = -1;
      break;
    }
    for (uint32_t k = 0; k < page.key_count && found >= 0; k++) {
      cs_uuid pack;
      uint32_t count = 0;
      if (cs_key_pack_id(keys[k], strlen(keys[k]), &pack) != CS_E_OK) continue;
      int rc = cat.ops->read_descriptors(cat.self, head.watermark, &pack, rows, rows_max, &count, &res);
      found = rc == CS_E_OK && res.outcome == CS_OUT_OK ? found + count : -1;
    }
    if (page.next_token[0] == '\0') break;
    snprintf(token, sizeof token, "%s", page.next_token);
  }
  free(rows);
  cat.ops->close(cat.self);
  cs_store_close(&store);
  return found;
}

/* ---- medians ---------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, unsigned n) {
  double s[RUNS_MAX];
  memcpy(s, v, n * sizeof *v);
  qsort(s, n, sizeof *s, cmp_double);
  return n == 0 ? 0 : n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* ---- --trace: when each stage moved ----------------------------------------------------------------- */

typedef struct tracer {
  capstore *cs;
  uint64_t t0;
  atomic_bool stop;
  pthread_t thread;
  bool started;
} tracer;

/* Prints the stages' counts (ms since t0) every time one of them moved, sampling every 0.5 ms. */
static void *tracer_main(void *arg) {
  tracer *tr = arg;
  uint64_t last[8] = {0};
  while (!atomic_load(&tr->stop)) {
    capstore_stats st;
    capstore_stats_get(tr->cs, &st);
    uint64_t v[8] = {st.capture.packs_sealed, st.service.spooled, st.service.uploaded, st.bytes_uploaded,
                     st.service.indexed, st.service.watermark, st.service.handed_off, st.service.requests};
    if (memcmp(v, last, sizeof v) != 0)
      printf("trace t_ms=%.1f sealed=%" PRIu64 " spooled=%" PRIu64 " uploaded=%" PRIu64 " bytes_uploaded=%" PRIu64
             " indexed=%" PRIu64 " watermark=%" PRIu64 " handed_off=%" PRIu64 " requests=%" PRIu64 " inflight=%u\n",
             (double)(now_ns() - tr->t0) / 1e6, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], st.service.inflight);
    memcpy(last, v, sizeof v);
    sleep_until(now_ns() + 500 * 1000);
  }
  return NULL;
}

/*
 * Profiling the flush alone: with CAPSTORE_BENCH_PERF_CTL naming the control FIFO of
 * `perf record -D -1 --control fifo:FIFO,ACK`, sampling is enabled here and disabled in tracer_stop.
 */
static void perf_ctl(const char *command) {
  const char *fifo = getenv("CAPSTORE_BENCH_PERF_CTL");
  if (fifo == NULL) return;
  int fd = open(fifo, O_WRONLY | O_CLOEXEC);
  if (fd >= 0 && write(fd, command, strlen(command)) < 0) fprintf(stderr, "perf control: %s\n", strerror(errno));
  if (fd >= 0) close(fd);
  const char *ack = getenv("CAPSTORE_BENCH_PERF_ACK");
  char buf[16];
  fd = ack != NULL ? open(ack, O_RDONLY | O_CLOEXEC) : -1;
  if (fd >= 0 && read(fd, buf, sizeof buf) < 0) fprintf(stderr, "perf ack: %s\n", strerror(errno));
  if (fd >= 0) close(fd);
}

static void tracer_start(tracer *tr, const opts *o, capstore *cs, uint64_t t0) {
  perf_ctl("enable\n");
  *tr = (tracer){.cs = cs, .t0 = t0};
  tr->started = o->trace && pthread_create(&tr->thread, NULL, tracer_main, tr) == 0;
}

static void tracer_stop(tracer *tr) {
  perf_ctl("disable\n");
  atomic_store(&tr->stop, true);
  if (tr->started) pthread_join(tr->thread, NULL);
  tr->started = false;
}

/* ---- flush ------------------------------------------------------------------------------------------ */

enum { F_OPEN, F_CAPTURE, F_FLUSH, F_TOTAL, F_CLOSE, F_COUNT };

static bool flush_run(const opts *o, const targets *t, unsigned run, double out[F_COUNT]) {
  run_env e;
  capstore_config cfg;
  config_make(o, t, "flush", run, &e, &cfg);
  uint64_t open_ns = 0;
  capstore *cs = open_ready(&cfg, true, &open_ns);
  uint8_t *payload = payload_make(o->bytes);
  if (cs == NULL || payload == NULL) return free(payload), false;
  char msg[256], name[64];
  capstore_flush_report report;
  uint64_t t0 = now_ns();
  tracer tr;
  tracer_start(&tr, o, cs, t0);
  bool captured = capture_range(cs, 0, o->records, payload, o->bytes);
  uint64_t t1 = now_ns();
  int rc = capstore_flush(cs, t1 + 60 * SEC, &report, msg, sizeof msg);
  uint64_t t2 = now_ns();
  tracer_stop(&tr);
  if (o->trace) printf("trace flush_called_ms=%.1f flush_returned_ms=%.1f\n", (double)(t1 - t0) / 1e6, (double)(t2 - t0) / 1e6);
  if (rc != CS_E_OK) fprintf(stderr, "flush: %s (%s)\n", cs_strerror(rc), msg);
  capstore_stats st;
  capstore_stats_get(cs, &st);
  close_free(cs, 30 * SEC);
  uint64_t t3 = now_ns();
  char prefix[80];
  snprintf(prefix, sizeof prefix, "%s/", e.name);
  int64_t found = count_queryable(&cfg, prefix, o->pack_records);
  double v[F_COUNT] = {secs(open_ns), secs(t1 - t0), secs(t2 - t1), secs(t2 - t0), secs(t3 - t2)};
  memcpy(out, v, sizeof v);
  printf("mode=flush backend=%s run=%u records=%u record_bytes=%u pack_records=%u packs=%" PRIu64
         " open_s=%.4f capture_s=%.4f flush_s=%.4f total_s=%.4f close_s=%.4f drained=%d queryable=%" PRId64 "\n",
         backend_name(&e, name, sizeof name), run, o->records, o->bytes, o->pack_records, st.service.indexed,
         out[F_OPEN], out[F_CAPTURE], out[F_FLUSH], out[F_TOTAL], out[F_CLOSE], report.drained, found);
  fflush(stdout);
  remove_tree(e.dir);
  free(payload);
  return captured && rc == CS_E_OK && report.drained && found == (int64_t)o->records;
}

static int flush_main(const opts *o, const targets *t) {
  static double v[F_COUNT][RUNS_MAX];
  bool ok = true;
  for (unsigned run = 1; run <= o->runs; run++) {
    double out[F_COUNT];
    ok = flush_run(o, t, run, out) && ok;
    for (int f = 0; f < F_COUNT; f++) v[f][run - 1] = out[f];
  }
  run_env e;
  char name[64];
  run_env_make(o, "flush", 0, &e);
  double flush_s = median(v[F_FLUSH], o->runs);
  printf("median mode=flush backend=%s runs=%u records=%u record_bytes=%u open_s=%.4f capture_s=%.4f "
         "flush_s=%.4f total_s=%.4f close_s=%.4f flush_goal_s=0.2 goal_met=%s\n",
         backend_name(&e, name, sizeof name), o->runs, o->records, o->bytes, median(v[F_OPEN], o->runs),
         median(v[F_CAPTURE], o->runs), flush_s, median(v[F_TOTAL], o->runs), median(v[F_CLOSE], o->runs),
         flush_s <= 0.2 ? "yes" : "no");
  return ok ? 0 : 1;
}

/* ---- sidecar: capture + flush through capstore serve's hand-off, against in-process ---------------------- */

/* One side-car run: capture + drained flush, in seconds; -1 when it did not drain or lost a record. */
static double sidecar_run(const opts *o, const targets *t, unsigned run) {
  run_env e;
  capstore_config daemon_cfg;
  config_make(o, t, "sidecar", run, &e, &daemon_cfg);
  daemon_cfg.serve = true;
  daemon_cfg.daemon.scan_interval_ns = (uint64_t)o->scan_ms * MS;
  capstore_config cap_cfg;
  capstore_config_default(&cap_cfg);
  cap_cfg.role = CS_ROLE_CAPTURE;
  cap_cfg.spool_dir = e.spool;
  cap_cfg.capture.sink.pack_records_max = o->pack_records;
  uint64_t open_ns = 0;
  capstore *daemon = open_ready(&daemon_cfg, true, &open_ns);
  char msg[256], name[64];
  capstore *cs = NULL;
  if (daemon == NULL || capstore_open(&cap_cfg, &cs, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "sidecar open: %s\n", msg);
    if (daemon != NULL) close_free(daemon, 10 * SEC);
    return -1;
  }
  uint8_t *payload = payload_make(o->bytes);
  capstore_flush_report report;
  uint64_t t0 = now_ns();
  bool captured = payload != NULL && capture_range(cs, 0, o->records, payload, o->bytes);
  int rc = capstore_flush(cs, now_ns() + 60 * SEC, &report, msg, sizeof msg);
  uint64_t t1 = now_ns();
  if (rc != CS_E_OK) fprintf(stderr, "sidecar flush: %s (%s)\n", cs_strerror(rc), msg);
  close_free(cs, 10 * SEC);
  close_free(daemon, 30 * SEC);
  char prefix[80];
  snprintf(prefix, sizeof prefix, "%s/", e.name);
  int64_t found = count_queryable(&daemon_cfg, prefix, o->pack_records);
  printf("mode=sidecar shape=sidecar backend=%s run=%u records=%u record_bytes=%u scan_ms=%u total_s=%.4f drained=%d "
         "queryable=%" PRId64 "\n",
         backend_name(&e, name, sizeof name), run, o->records, o->bytes, o->scan_ms, secs(t1 - t0), report.drained, found);
  remove_tree(e.dir);
  free(payload);
  return captured && rc == CS_E_OK && report.drained && found == (int64_t)o->records ? secs(t1 - t0) : -1;
}

static int sidecar_main(const opts *o, const targets *t) {
  double side[RUNS_MAX], in[RUNS_MAX];
  bool ok = true;
  for (unsigned run = 1; run <= o->runs; run++) {
    side[run - 1] = sidecar_run(o, t, run);
    double out[F_COUNT];
    ok = flush_run(o, t, run, out) && side[run - 1] >= 0 && ok;
    in[run - 1] = out[F_TOTAL];
  }
  run_env e;
  char name[64];
  run_env_make(o, "sidecar", 0, &e);
  double ms = median(side, o->runs), mi = median(in, o->runs);
  printf("median mode=sidecar backend=%s runs=%u records=%u record_bytes=%u scan_ms=%u sidecar_total_s=%.4f "
         "inprocess_total_s=%.4f ratio=%.2f\n",
         backend_name(&e, name, sizeof name), o->runs, o->records, o->bytes, o->scan_ms, ms, mi, mi > 0 ? ms / mi : 0);
  return ok ? 0 : 1;
}

/* ---- ship: the packs ------------------------------------------------------------------------------- */

/* The packs of one ship run: sealed in the run's spool, hard-linked under peer_dir for rclone. */
typedef struct ship_set {
  cs_spool_entry *entries;
  size_t count;
  uint64_t bytes;
  char *rows; /* the descriptor rows in the bulk form, keys under peer_prefix: the POST peer's body */
  size_t rows_len;
  char peer_dir[600], peer_prefix[80];
} ship_set;

/* Trailer and footer of the pack file at path (size bytes). */
static bool footer_read(const char *path, uint64_t size, cs_pack_footer *footer) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t tail[CS_PACK_TRAILER_SIZE];
  cs_pack_trailer trailer;
  cs_pack_error err;
  bool ok = fd >= 0 && size >= sizeof tail && pread(fd, tail, sizeof tail, (off_t)(size - sizeof tail)) == sizeof tail &&
            cs_pack_trailer_parse(tail, size, &trailer, &err) == CS_E_OK;
  uint8_t *bytes = ok ? malloc(trailer.footer_length + 1) : NULL;
  ok = bytes != NULL && pread(fd, bytes, trailer.footer_length, (off_t)trailer.footer_offset) == (ssize_t)trailer.footer_length &&
       cs_pack_footer_parse(&trailer, bytes, trailer.footer_length, footer, &err) == CS_E_OK;
  free(bytes);
  if (fd >= 0) close(fd);
  if (!ok) fprintf(stderr, "%s: cannot read its footer\n", path);
  return ok;
}

/* mkdir -p of the folders above path. */
static bool mkdir_parents(const char *path) {
  char buf[1700];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p != '\0'; p++) {
    if (*p != '/') continue;
    *p = '\0';
    bool ok = mkdir(buf, 0755) == 0 || errno == EEXIST;
    *p = '/';
    if (!ok) return false;
  }
  return true;
}

/* The peers' copy of pack e: a hard link at its key under peer_dir, and its rows appended to s->rows. */
static bool peer_add(ship_set *s, const char *spool, const cs_spool_entry *entry) {
  char path[900], rel[CS_KEY_MAX], link_path[1700];
  snprintf(path, sizeof path, "%s/%s", spool, entry->name);
  cs_pack_footer footer;
  if (!footer_read(path, entry->size_bytes, &footer)) return false;
  cs_pack_key_fields fields;
  cs_pack_error err;
  size_t rel_len = 0;
  cs_pack_ref ref = {.pack_id = entry->pack_id, .created_at_ns = entry->created_at_ns, .size_bytes = entry->size_bytes,
                     .record_count = entry->record_count};
  memcpy(ref.sha256, entry->sha256, sizeof ref.sha256);
  bool ok = cs_pack_footer_key_fields(&footer, &fields, &err) == CS_E_OK &&
            cs_pack_object_key("", 0, &fields, rel, &rel_len, &err) == CS_E_OK;
  char key[CS_KEY_MAX + 80];
  int key_len = snprintf(key, sizeof key, "%s%s", s->peer_prefix, rel);
  ok = ok && cs_pack_ref_set_key(&ref, key, (size_t)key_len) == CS_E_OK;
  snprintf(link_path, sizeof link_path, "%s/%s", s->peer_dir, rel);
  ok = ok && mkdir_parents(link_path) && link(path, link_path) == 0;
  for (uint32_t r = 0; ok && r < footer.record_count; r++) {
    size_t need = cs_catalog_tsv_row(&ref, &footer.records[r], 1, NULL, 0);
    char *grown = need > 0 ? realloc(s->rows, s->rows_len + need + 1) : NULL;
    ok = grown != NULL;
    if (ok) s->rows = grown;
    if (ok) s->rows_len += cs_catalog_tsv_row(&ref, &footer.records[r], 1, s->rows + s->rows_len, need + 1);
  }
  cs_pack_footer_free(&footer);
  return ok;
}

/*
 * Reads a pack once, untimed: the sink wrote it with O_DIRECT, so without this whichever side went first
 * would read it from the disk and the other from the page cache.
 */
static bool file_warm(const char *spool, const cs_spool_entry *entry) {
  char path[900];
  static uint8_t buf[1u << 20];
  snprintf(path, sizeof path, "%s/%s", spool, entry->name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = 1;
  while (fd >= 0 && n > 0) n = read(fd, buf, sizeof buf);
  if (fd >= 0) close(fd);
  return fd >= 0 && n == 0;
}

/* Seals o->packs packs of o->pack_records records into e->spool with the capture sink alone (no service). */
static bool ship_produce(const opts *o, const run_env *e, ship_set *s) {
  cs_capture_config cc;
  cs_capture_config_default(&cc);
  cc.sink.pack_records_max = o->pack_records;
  char msg[256];
  cs_capture *cap = NULL;
  uint8_t *payload = payload_make(o->bytes);
  if (!mkdir_parents(e->spool) || payload == NULL || cs_capture_open(e->spool, &cc, &cap, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "producing packs: %s\n", msg), free(payload), false;
  int rc = CS_E_OK;
  for (uint64_t n = 0; rc == CS_E_OK && n < (uint64_t)o->packs * o->pack_records; n++) {
    record r;
    record_make(&r, n, o->bytes);
    memcpy(payload, &n, sizeof n);
    rc = cs_capture_write(cap, &r.meta, payload, o->bytes, msg, sizeof msg);
  }
  if (rc == CS_E_OK) rc = cs_capture_flush(cap, CS_NEVER, msg, sizeof msg);
  s->entries = calloc(o->packs + 1u, sizeof *s->entries);
  if (rc == CS_E_OK && s->entries != NULL) rc = cs_capture_list(cap, s->entries, o->packs + 1u, &s->count);
  cs_capture_free(cap);
  free(payload);
  if (rc != CS_E_OK || s->count != o->packs) return fprintf(stderr, "producing packs: %s\n", msg), false;
  snprintf(s->peer_prefix, sizeof s->peer_prefix, "peer_%s/", e->name);
  snprintf(s->peer_dir, sizeof s->peer_dir, "%s/peer", e->dir);
  for (size_t i = 0; i < s->count; i++) {
    s->bytes += s->entries[i].size_bytes;
    if (!peer_add(s, e->spool, &s->entries[i]) || !file_warm(e->spool, &s->entries[i])) return false;
  }
  return true;
}

/* ---- ship: ClickHouse by hand ------------------------------------------------------------------------ */

static long ch_post(const targets *t, const char *sql, const char *body, size_t len) {
  return bench_ch_post(t->ch_url, t->ch_user, t->ch_password, sql, body, len);
}

/* The catalog's tables made (as the first open would) and, on ClickHouse, the peer's copy of the descriptor table. */
static bool tables_make(const targets *t, const capstore_config *cfg, const char *peer_table) {
  cs_catalog cat;
  cs_catalog_result res = {0};
  char msg[256], desc[128], sql[512];
  if (capstore_open_catalog(cfg, &cat, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "catalog: %s\n", msg), false;
  int rc = cat.ops->schema_ensure(cat.self, &res);
  cat.ops->close(cat.self);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) return fprintf(stderr, "schema: %s\n", res.detail), false;
  if (!t->ch) return true;
  cs_clickhouse_table_name(cfg->name, "descriptors", desc, sizeof desc);
  snprintf(sql, sizeof sql, "CREATE TABLE %s AS %s", peer_table, desc);
  return ch_post(t, sql, NULL, 0) == 200;
}

/* Runs a shell command; its wall time in seconds, -1 when it failed. */
static double timed_system(const char *cmd) {
  uint64_t t0 = now_ns();
  int rc = system(cmd);
  double s = secs(now_ns() - t0);
  if (rc != 0) fprintf(stderr, "failed (%d): %s\n", rc, cmd);
  return rc == 0 ? s : -1;
}

/* ---- ship: the two sides ---------------------------------------------------------------------------- */

enum { S_OURS, S_OURS_OPEN, S_PEER, S_RCLONE, S_POST, S_STORE_REQ, S_CATALOG_REQ, S_CYCLES, S_COUNT };

/* How many of the set's packs the catalog shows as indexed at a version <= its watermark. */
static int64_t packs_visible(const capstore_config *cfg, const ship_set *s) {
  cs_catalog cat;
  char msg[256];
  if (capstore_open_catalog(cfg, &cat, msg, sizeof msg) != CS_E_OK) return -1;
  int64_t held_count = 0;
  for (size_t at = 0; at < s->count && held_count >= 0; at += 100) {
    cs_uuid ids[100];
    bool held[100], rejected[100];
    uint32_t n = s->count - at < 100 ? (uint32_t)(s->count - at) : 100;
    for (uint32_t i = 0; i < n; i++) ids[i] = s->entries[at + i].pack_id;
    cs_catalog_result res = {0};
    if (cat.ops->committed(cat.self, ids, n, held, rejected, &res) != CS_E_OK || res.outcome != CS_OUT_OK) held_count = -1;
    for (uint32_t i = 0; i < n && held_count >= 0; i++) held_count += held[i];
  }
  cat.ops->close(cat.self);
  return held_count;
}

/* The runtime opened on the sealed spool: capstore_open to a drained flush. */
/*
 * --live: the runtime opened first (excluded: tables, lease), then the same number of records of the same
 * shape captured and flushed; the time from the first capture to the drained flush, sealing included.
 */
static bool ship_live(const opts *o, const capstore_config *cfg, double out[S_COUNT]) {
  uint64_t open_ns = 0, records = (uint64_t)o->packs * o->pack_records;
  capstore *cs = open_ready(cfg, true, &open_ns);
  uint8_t *payload = payload_make(o->bytes);
  if (cs == NULL || payload == NULL) return free(payload), false;
  char msg[256], prefix[80];
  capstore_flush_report report = {0};
  tracer tr;
  uint64_t t0 = now_ns();
  tracer_start(&tr, o, cs, t0);
  bool ok = capture_range(cs, 0, records, payload, o->bytes);
  int rc = capstore_flush(cs, now_ns() + 600 * SEC, &report, msg, sizeof msg);
  uint64_t t1 = now_ns();
  tracer_stop(&tr);
  if (rc != CS_E_OK) fprintf(stderr, "ship: %s (%s)\n", cs_strerror(rc), msg);
  capstore_stats st;
  capstore_stats_get(cs, &st);
  close_free(cs, 30 * SEC);
  free(payload);
  out[S_OURS] = secs(t1 - t0);
  out[S_OURS_OPEN] = secs(open_ns);
  out[S_STORE_REQ] = (double)st.store_requests;
  out[S_CATALOG_REQ] = (double)st.catalog_requests;
  out[S_CYCLES] = (double)st.service.cycles;
  snprintf(prefix, sizeof prefix, "%s/", cfg->name);
  return ok && rc == CS_E_OK && report.drained && count_queryable(cfg, prefix, o->pack_records) == (int64_t)records;
}

static bool ship_ours(const opts *o, const capstore_config *cfg, const ship_set *s, double out[S_COUNT]) {
  char msg[256];
  capstore *cs = NULL;
  capstore_flush_report report = {0};
  tracer tr = {0};
  uint64_t t0 = now_ns();
  int rc = capstore_open(cfg, &cs, msg, sizeof msg);
  uint64_t t1 = now_ns();
  if (rc == CS_E_OK) tracer_start(&tr, o, cs, t0);
  if (rc == CS_E_OK) rc = capstore_flush(cs, t1 + 600 * SEC, &report, msg, sizeof msg);
  uint64_t t2 = now_ns();
  tracer_stop(&tr);
  if (rc != CS_E_OK) fprintf(stderr, "ship: %s (%s)\n", cs_strerror(rc), msg);
  capstore_stats st = {0};
  if (cs != NULL) capstore_stats_get(cs, &st);
  if (cs != NULL) close_free(cs, 30 * SEC);
  out[S_STORE_REQ] = (double)st.store_requests;
  out[S_CATALOG_REQ] = (double)st.catalog_requests;
  out[S_CYCLES] = (double)st.service.cycles;
  out[S_OURS] = secs(t2 - t0);
  out[S_OURS_OPEN] = secs(t1 - t0);
  return rc == CS_E_OK && report.drained && packs_visible(cfg, s) == (int64_t)s->count;
}

/* The peers: rclone copy of the same files to the same bucket, then one POST of the same rows. */
static bool ship_peer(const opts *o, const targets *t, const ship_set *s, const char *peer_table, double out[S_COUNT]) {
  char cmd[1600], sql[600];
  snprintf(cmd, sizeof cmd, "env -u AWS_CA_BUNDLE rclone copy -q --transfers %u --s3-upload-concurrency %u '%s' 's3:%s/%.*s'",
           o->inflight, o->inflight, s->peer_dir, t->s3_bucket, (int)strlen(s->peer_prefix) - 1, s->peer_prefix);
  out[S_RCLONE] = timed_system(cmd);
  snprintf(sql, sizeof sql, "INSERT INTO %s (%s) FORMAT TabSeparated", peer_table, CS_CATALOG_DESCRIPTOR_COLUMNS);
  uint64_t t0 = now_ns();
  long status = ch_post(t, sql, s->rows, s->rows_len);
  out[S_POST] = status == 200 ? secs(now_ns() - t0) : -1;
  out[S_PEER] = out[S_RCLONE] + out[S_POST];
  return out[S_RCLONE] > 0 && out[S_POST] > 0;
}

static void ship_cleanup(const targets *t, const run_env *e, ship_set *s) {
  if (t->s3) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "env -u AWS_CA_BUNDLE rclone purge -q 's3:%s/%s'; env -u AWS_CA_BUNDLE rclone purge -q 's3:%s/%.*s'", t->s3_bucket, e->name,
             t->s3_bucket, (int)strlen(s->peer_prefix) - 1, s->peer_prefix);
    if (system(cmd) != 0) fprintf(stderr, "rclone purge failed\n");
  }
  remove_tree(e->dir);
  free(s->entries);
  free(s->rows);
}

static bool ship_run(const opts *o, const targets *t, unsigned run, double out[S_COUNT]) {
  run_env e;
  capstore_config cfg;
  config_make(o, t, "ship", run, &e, &cfg);
  capstore_config live = cfg; /* --live: its own spool, the capture's defaults */
  char live_spool[620];
  snprintf(live_spool, sizeof live_spool, "%s-live", e.spool);
  live.spool_dir = live_spool;
  cfg.capture.recover_at_open = false; /* the spool was sealed just now: nothing to sweep or re-hash */
  cfg.capture.staging_bytes = 8u << 20; /* nothing is captured: a small staging area opens faster */
  cfg.capture.record_bytes_max = 2u << 20;
  ship_set s = {0};
  char peer_table[128], name[64];
  snprintf(peer_table, sizeof peer_table, "%s_peer_rows", e.name);
  bool peers = t->s3 && t->ch;
  for (int i = 0; i < S_COUNT; i++) out[i] = NAN;
  bool ok = ship_produce(o, &e, &s) && tables_make(t, &cfg, peer_table);
  bool ours_first = run % 2 == 1;
  for (int turn = 0; ok && turn < 2; turn++) {
    if ((turn == 0) == ours_first) ok = o->live ? ship_live(o, &live, out) : ship_ours(o, &cfg, &s, out);
    else if (peers) ok = ship_peer(o, t, &s, peer_table, out);
  }
  double mb = (double)s.bytes / 1e6;
  printf("mode=ship backend=%s live=%d inflight=%u run=%u packs=%zu records_per_pack=%u record_bytes=%u pack_bytes=%" PRIu64
         " first=%s ours_s=%.4f ours_open_s=%.4f ours_packs_per_s=%.1f ours_MBps=%.1f peer_s=%.4f rclone_s=%.4f"
         " post_s=%.4f peer_packs_per_s=%.1f peer_MBps=%.1f ratio=%.2f store_requests=%.0f catalog_requests=%.0f"
         " cycles=%.0f ok=%d\n",
         backend_name(&e, name, sizeof name), o->live, o->inflight, run, s.count, o->pack_records, o->bytes,
         s.count > 0 ? s.bytes / s.count : 0, ours_first ? "ours" : "peer", out[S_OURS], out[S_OURS_OPEN],
         (double)s.count / out[S_OURS], mb / out[S_OURS], out[S_PEER], out[S_RCLONE], out[S_POST],
         (double)s.count / out[S_PEER], mb / out[S_PEER], out[S_PEER] / out[S_OURS], out[S_STORE_REQ],
         out[S_CATALOG_REQ], out[S_CYCLES], ok);
  fflush(stdout);
  ship_cleanup(t, &e, &s);
  return ok;
}

static int ship_main(const opts *o, const targets *t) {
  static double v[S_COUNT][RUNS_MAX];
  bool ok = true;
  for (unsigned run = 1; run <= o->runs && ok; run++) {
    double out[S_COUNT];
    ok = ship_run(o, t, run, out);
    for (int f = 0; f < S_COUNT; f++) v[f][run - 1] = out[f];
  }
  if (!ok) return 1;
  run_env e;
  char name[64];
  run_env_make(o, "ship", 0, &e);
  double ours = median(v[S_OURS], o->runs), peer = median(v[S_PEER], o->runs);
  double ratio[RUNS_MAX];
  for (unsigned r = 0; r < o->runs; r++) ratio[r] = v[S_PEER][r] / v[S_OURS][r];
  printf("median mode=ship backend=%s live=%d inflight=%u runs=%u packs=%u records_per_pack=%u record_bytes=%u ours_s=%.4f "
         "ours_open_s=%.4f ours_packs_per_s=%.1f peer_s=%.4f rclone_s=%.4f post_s=%.4f peer_packs_per_s=%.1f "
         "ratio=%.2f ratio_median_of_runs=%.2f\n",
         backend_name(&e, name, sizeof name), o->live, o->inflight, o->runs, o->packs, o->pack_records, o->bytes, ours,
         median(v[S_OURS_OPEN], o->runs), o->packs / ours, peer, median(v[S_RCLONE], o->runs),
         median(v[S_POST], o->runs), o->packs / peer, peer / ours, median(ratio, o->runs));
  return 0;
}

/* ---- latency --------------------------------------------------------------------------------------- */

typedef struct seen_pack {
  cs_uuid id;
  uint32_t count;
  uint64_t visible_ns; /* 0 until the catalog showed it */
} seen_pack;

typedef struct lat_state {
  const opts *o;
  capstore *cs;
  const capstore_config *cfg;
  uint64_t total;
  uint64_t *cap_ns;          /* capture time of each record (before its capstore_write) */
  uint64_t *lat_ns;          /* flush method: each record's latency */
  atomic_uint_fast64_t captured; /* records captured so far */
  atomic_bool done;          /* the producer finished */
  seen_pack *packs;          /* poll method: every pack seen sealed in the spool */
  uint64_t poll_count, poll_ns_sum, poll_ns_max; /* poll method: the catalog's answers to the poller */
  uint32_t pack_count, pack_cap;
  bool failed;
} lat_state;

/* Adds the pack named by a ready name to s->packs, once. */
static void pack_seen(lat_state *s, const char *name) {
  cs_spool_entry entry;
  if (cs_spool_parse_ready_name(name, &entry) != CS_E_OK) return;
  for (uint32_t i = s->pack_count; i > 0; i--)
    if (cs_uuid_equal(&s->packs[i - 1].id, &entry.pack_id)) return;
  if (s->pack_count == s->pack_cap) {
    s->failed = true;
    return;
  }
  s->packs[s->pack_count++] = (seen_pack){.id = entry.pack_id, .count = entry.record_count};
}

/*
 * The packs sealed since the last call: inotify's events for the spool (a ready name is a new link), so a
 * pack sealed and handed off between two polls is still seen. The first call lists the directory too.
 */
static void spool_scan(lat_state *s, int watch_fd, bool first) {
  DIR *dir = first ? opendir(s->cfg->spool_dir) : NULL;
  for (struct dirent *d = dir != NULL ? readdir(dir) : NULL; d != NULL; d = readdir(dir)) pack_seen(s, d->d_name);
  if (dir != NULL) closedir(dir);
  _Alignas(struct inotify_event) char buf[8192];
  for (ssize_t n = read(watch_fd, buf, sizeof buf); n > 0; n = read(watch_fd, buf, sizeof buf)) {
    for (char *at = buf; at < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)(void *)at;
      if (ev->mask & IN_Q_OVERFLOW) s->failed = true; /* events were lost: the run says so */
      if (ev->len > 0) pack_seen(s, ev->name);
      at += sizeof *ev + ev->len;
    }
  }
}

/* Asks the catalog which seen packs are visible; stamps the newly visible ones with the answer's time. */
static uint64_t poll_visible(lat_state *s, cs_catalog *cat) {
  cs_uuid ids[256];
  uint32_t where[256], n = 0;
  uint64_t records = 0;
  for (uint32_t i = 0; i < s->pack_count; i++) {
    if (s->packs[i].visible_ns != 0) records += s->packs[i].count;
    else if (n < 256) where[n] = i, ids[n++] = s->packs[i].id;
  }
  if (n == 0) return records;
  bool held[256], rejected[256];
  cs_catalog_result res = {0};
  uint64_t asked = now_ns();
  int rc = cat->ops->committed(cat->self, ids, n, held, rejected, &res);
  uint64_t t = now_ns();
  s->poll_count++;
  s->poll_ns_sum += t - asked;
  if (t - asked > s->poll_ns_max) s->poll_ns_max = t - asked;
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) return records;
  for (uint32_t i = 0; i < n; i++)
    if (held[i]) s->packs[where[i]].visible_ns = t, records += s->packs[where[i]].count;
  return records;
}

static void *poller_main(void *arg) {
  lat_state *s = arg;
  cs_catalog cat;
  char msg[256];
  if (capstore_open_catalog(s->cfg, &cat, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "poller: %s\n", msg);
    s->failed = true;
    return NULL;
  }
  int watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watch_fd < 0 || inotify_add_watch(watch_fd, s->cfg->spool_dir, IN_CREATE | IN_MOVED_TO) < 0) {
    fprintf(stderr, "poller: inotify on %s: %s\n", s->cfg->spool_dir, strerror(errno));
    s->failed = true;
  }
  uint64_t give_up = 0;
  for (bool first = true; !s->failed; first = false) {
    spool_scan(s, watch_fd, first);
    uint64_t visible = poll_visible(s, &cat);
    if (atomic_load(&s->done)) {
      if (visible == s->total) break;
      if (give_up == 0) give_up = now_ns() + 30 * SEC;
      if (now_ns() > give_up || s->failed) {
        s->failed = true;
        fprintf(stderr, "poller: %" PRIu64 " of %" PRIu64 " records visible after 30 s\n", visible, s->total);
        break;
      }
    }
    sleep_ms(s->o->poll_ms);
  }
  if (watch_fd >= 0) close(watch_fd);
  cat.ops->close(cat.self);
  return NULL;
}

static void *flusher_main(void *arg) {
  lat_state *s = arg;
  uint64_t covered = 0, next = now_ns();
  char msg[256];
  while (covered < s->total && !s->failed) {
    next += (uint64_t)s->o->flush_ms * MS;
    if (next < now_ns()) next = now_ns();
    sleep_until(next);
    uint64_t n = atomic_load(&s->captured);
    int rc = capstore_flush(s->cs, now_ns() + 30 * SEC, NULL, msg, sizeof msg);
    uint64_t t = now_ns();
    if (rc != CS_E_OK) {
      fprintf(stderr, "flush: %s (%s)\n", cs_strerror(rc), msg);
      s->failed = true;
    }
    for (; covered < n; covered++) s->lat_ns[covered] = t - s->cap_ns[covered];
  }
  return NULL;
}

/* Captures s->total records at o->rate a second, stamping each one's capture time. */
static bool produce_steady(lat_state *s) {
  uint8_t *payload = payload_make(s->o->bytes);
  char msg[256];
  bool ok = payload != NULL;
  uint64_t start = now_ns();
  for (uint64_t n = 0; ok && n < s->total; n++) {
    sleep_until(start + n * SEC / s->o->rate);
    record r;
    record_make(&r, n, s->o->bytes);
    memcpy(payload, &n, sizeof n);
    s->cap_ns[n] = now_ns();
    int rc = capstore_write(s->cs, &r.meta, payload, s->o->bytes, msg, sizeof msg);
    if (rc != CS_E_OK) ok = fprintf(stderr, "capture %" PRIu64 ": %s\n", n, msg) < 0;
    atomic_store(&s->captured, n + 1);
  }
  free(payload);
  atomic_store(&s->done, true);
  return ok;
}

static int cmp_seen(const void *a, const void *b) {
  return cs_uuid_compare(&((const seen_pack *)a)->id, &((const seen_pack *)b)->id);
}

/*
 * Poll method: records go into packs in capture order, and pack ids (UUIDv7) sort in the packs' order, so
 * pack k holds the records after those of packs 0..k-1. Checked against the catalog: every row a pack shows
 * at the final watermark must be one of the records it was given.
 */
static bool attribute_packs(lat_state *s) {
  qsort(s->packs, s->pack_count, sizeof *s->packs, cmp_seen);
  cs_catalog cat;
  char msg[256];
  if (capstore_open_catalog(s->cfg, &cat, msg, sizeof msg) != CS_E_OK) return false;
  cs_cat_head head;
  cs_catalog_result res = {0};
  cs_uuid reader = {{0x42}};
  bool ok = cat.ops->head(cat.self, &reader, &head, &res) == CS_E_OK && res.outcome == CS_OUT_OK;
  cs_descriptor_row *rows = calloc(s->o->pack_records, sizeof *rows);
  uint64_t first = 0;
  for (uint32_t k = 0; ok && rows != NULL && k < s->pack_count; k++) {
    const seen_pack *p = &s->packs[k];
    uint32_t count = 0;
    ok = cat.ops->read_descriptors(cat.self, head.watermark, &p->id, rows, s->o->pack_records, &count, &res) ==
             CS_E_OK && count == p->count;
    for (uint32_t i = 0; ok && i < count; i++) {
      uint64_t n = strtoull(rows[i].record.meta.capture_id.bytes + strlen("bench-"), NULL, 10);
      ok = n >= first && n < first + p->count;
    }
    for (uint64_t n = first; ok && n < first + p->count && n < s->total; n++) s->lat_ns[n] = p->visible_ns - s->cap_ns[n];
    first += p->count;
  }
  free(rows);
  cat.ops->close(cat.self);
  return ok && first == s->total;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* The nearest-rank percentile p of sorted v[0..n). */
static double pct_ms(const uint64_t *v, uint64_t n, double p) {
  uint64_t rank = (uint64_t)(p / 100.0 * (double)n + 0.999999);
  return (double)v[rank == 0 ? 0 : rank - 1] / 1e6;
}

static void latency_report(const lat_state *s, const run_env *e, bool validated, uint64_t elapsed_ns) {
  char name[64];
  capstore_stats st;
  capstore_stats_get(s->cs, &st);
  qsort(s->lat_ns, s->total, sizeof *s->lat_ns, cmp_u64);
  printf("mode=latency backend=%s method=%s linger_ms=%u rate=%u record_bytes=%u records=%" PRIu64
         " achieved_rate=%.0f packs=%" PRIu64 " cycles=%" PRIu64 " store_requests=%" PRIu64 " catalog_requests=%" PRIu64
         " p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f poll_answer_mean_ms=%.1f poll_answer_max_ms=%.1f"
         " validated=%d\n",
         backend_name(e, name, sizeof name), s->o->method, s->o->linger_ms, s->o->rate, s->o->bytes, s->total,
         (double)s->total / secs(elapsed_ns), st.service.indexed, st.service.cycles, st.store_requests,
         st.catalog_requests, pct_ms(s->lat_ns, s->total, 50),
         pct_ms(s->lat_ns, s->total, 90), pct_ms(s->lat_ns, s->total, 99), (double)s->lat_ns[s->total - 1] / 1e6,
         s->poll_count > 0 ? (double)s->poll_ns_sum / (double)s->poll_count / 1e6 : 0, (double)s->poll_ns_max / 1e6,
         validated);
  fflush(stdout);
}

static int latency_main(const opts *o, const targets *t) {
  run_env e;
  capstore_config cfg;
  config_make(o, t, "latency", 1, &e, &cfg);
  cfg.capture.sink.linger_ns = (uint64_t)o->linger_ms * MS;
  uint64_t open_ns = 0;
  lat_state s = {.o = o, .cfg = &cfg, .total = (uint64_t)o->rate * o->seconds};
  s.cap_ns = calloc(s.total, sizeof *s.cap_ns);
  s.lat_ns = calloc(s.total, sizeof *s.lat_ns);
  s.pack_cap = (uint32_t)(s.total + 16);
  s.packs = calloc(s.pack_cap, sizeof *s.packs);
  bool poll = strcmp(o->method, "poll") == 0;
  s.cs = s.cap_ns != NULL && s.lat_ns != NULL && s.packs != NULL ? open_ready(&cfg, true, &open_ns) : NULL;
  if (s.cs == NULL) return 1;
  pthread_t helper;
  if (pthread_create(&helper, NULL, poll ? poller_main : flusher_main, &s) != 0) return 1;
  uint64_t t0 = now_ns();
  bool ok = produce_steady(&s);
  uint64_t elapsed = now_ns() - t0;
  pthread_join(helper, NULL);
  ok = ok && !s.failed;
  bool validated = ok && (!poll || attribute_packs(&s));
  latency_report(&s, &e, validated, elapsed);
  close_free(s.cs, 30 * SEC);
  remove_tree(e.dir);
  free(s.cap_ns);
  free(s.lat_ns);
  free(s.packs);
  return ok && validated ? 0 : 1;
}

/* ---- backoff ------------------------------------------------------------------------------------------ */

static bool backoff_run(const opts *o, const targets *t, unsigned run, double *failed_out) {
  run_env e;
  capstore_config cfg;
  config_make(o, t, "backoff", run, &e, &cfg);
  cfg.capture.sink.pack_records_max = 4;
  uint64_t open_ns = 0;
  capstore *cs = open_ready(&cfg, false, &open_ns);
  uint8_t *payload = payload_make(o->bytes);
  if (cs == NULL || payload == NULL || !capture_range(cs, 0, 8, payload, o->bytes)) return free(payload), false;
  capstore_stats a, b;
  capstore_stats_get(cs, &a); /* the window starts once the records are captured */
  sleep_until(now_ns() + (uint64_t)o->window_ms * MS);
  capstore_stats_get(cs, &b);
  char name[64];
  printf("mode=backoff backend=%s dead=%s run=%u window_ms=%u open_s=%.3f cycles=%" PRIu64 " cycles_failed=%" PRIu64
         " requests=%" PRIu64 " since_open_cycles=%" PRIu64 " since_open_failed=%" PRIu64 " spooled=%" PRIu64
         " uploaded=%" PRIu64 " indexed=%" PRIu64 " lease=%s last_error=\"%.100s\"\n",
         backend_name(&e, name, sizeof name), o->dead, run, o->window_ms, secs(open_ns),
         b.service.cycles - a.service.cycles, b.service.cycles_failed - a.service.cycles_failed,
         b.service.requests - a.service.requests, b.service.cycles, b.service.cycles_failed, b.service.spooled,
         b.service.uploaded, b.service.indexed, cs_lease_state_name(b.service.lease_state), b.service.last_error);
  *failed_out = (double)(b.service.cycles_failed - a.service.cycles_failed);
  close_free(cs, SEC);
  remove_tree(e.dir);
  free(payload);
  return true;
}

static int backoff_main(const opts *o, const targets *t) {
  double failed[RUNS_MAX];
  for (unsigned run = 1; run <= o->runs; run++)
    if (!backoff_run(o, t, run, &failed[run - 1])) return 1;
  run_env e;
  char name[64];
  run_env_make(o, "backoff", 0, &e);
  double m = median(failed, o->runs);
  printf("median mode=backoff backend=%s dead=%s runs=%u window_ms=%u cycles_failed=%.1f seed_value=15 goal=8 "
         "goal_met=%s\n",
         backend_name(&e, name, sizeof name), o->dead, o->runs, o->window_ms, m, m <= 8 ? "yes" : "no");
  return 0;
}

/* ---- smoke and main ------------------------------------------------------------------------------------- */

/* Small runs of every mode on the embedded defaults (a dead S3 endpoint for backoff): the program works. */
static int smoke_main(const opts *base, const targets *t) {
  opts o;
  opts_default(&o, "flush");
  o.work = base->work;
  o.runs = 1;
  o.records = 1024;
  o.pack_records = 256;
  int rc = flush_main(&o, t);
  opts_default(&o, "ship");
  o.work = base->work;
  o.runs = 1;
  o.packs = 8;
  o.pack_records = 16;
  o.bytes = 4096;
  rc = rc != 0 ? rc : ship_main(&o, t);
  opts_default(&o, "latency");
  o.work = base->work;
  o.rate = 500;
  o.seconds = 1;
  rc = rc != 0 ? rc : latency_main(&o, t);
  o.method = "flush";
  rc = rc != 0 ? rc : latency_main(&o, t);
  opts_default(&o, "backoff");
  o.work = base->work;
  o.runs = 1;
  o.dead = "store";
  o.window_ms = 1000;
  rc = rc != 0 ? rc : backoff_main(&o, t);
  opts_default(&o, "sidecar");
  o.work = base->work;
  o.runs = 1;
  o.records = 1024;
  o.pack_records = 256;
  rc = rc != 0 ? rc : sidecar_main(&o, t);
  return rc;
}

int main(int argc, char **argv) {
  opts o;
  if (opts_parse(argc, argv, &o) != 0) return 2;
  targets t;
  if (!targets_read(&o, &t) || !mkdir_parents(o.work) || (mkdir(o.work, 0755) != 0 && errno != EEXIST)) return 1;
  g_targets = &t;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (t.s3) {
    setenv("RCLONE_CONFIG_S3_TYPE", "s3", 1);
    setenv("RCLONE_CONFIG_S3_PROVIDER", "Other", 1);
    setenv("RCLONE_CONFIG_S3_ENDPOINT", t.s3_endpoint, 1);
    setenv("RCLONE_CONFIG_S3_ACCESS_KEY_ID", t.s3_key, 1);
    setenv("RCLONE_CONFIG_S3_SECRET_ACCESS_KEY", t.s3_secret, 1);
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = 2;
  if (mode_is(&o, "flush")) rc = flush_main(&o, &t);
  if (mode_is(&o, "ship")) rc = ship_main(&o, &t);
  if (mode_is(&o, "latency")) rc = latency_main(&o, &t);
  if (mode_is(&o, "backoff")) rc = backoff_main(&o, &t);
  if (mode_is(&o, "smoke")) rc = smoke_main(&o, &t);
  if (mode_is(&o, "sidecar")) rc = sidecar_main(&o, &t);
  curl_global_cleanup();
  return rc;
}

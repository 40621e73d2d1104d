/*
 * capstore-bench-reader: the reader (capstore.h, "Reading back") against
 * the plainest way to do the same work, in the same run (docs/performance.md,
 * "Reader", has the results; bench/run_reader.sh runs it on a private s3rver).
 *
 * usage:
 *   capstore-bench-reader hydrate --work DIR [--s3 S3_ENDPOINT_FILE] [options]
 *   capstore-bench-reader search --work DIR [--clickhouse CH_ENDPOINT_FILE] [--rows N] [--page P] [--runs K] [--reuse]
 *   capstore-bench-reader smoke --work DIR          (small, dirstore + SQLite: ctest bench.reader_smoke)
 *
 * hydrate: --packs P (40) packs of --pack-records R (4096) records of --min-bytes..--max-bytes (4096..65536,
 *   uniform) captured by the runtime into the S3 server (S3_ENDPOINT_FILE: "endpoint key secret bucket",
 *   tools/servers/s3.sh; without --s3 a dirstore under DIR) with the SQLite catalog under DIR. The
 *   selection is every --every (7)th record (one layer of 7: capstore_search, paged and joined). After one
 *   untimed read (the server's files into the page cache), each run times, in turn first:
 *     read      capstore_read with the default merge (gaps up to 256 KiB, reads up to 8 MiB; --gap B and
 *               --span B set others), --inflight K (8) GETs in flight, every byte verified, on the reader's
 *               defaults otherwise (store connections, request timeout);
 *     curl      `curl --parallel --parallel-max K` GETs of exactly the plan's byte ranges (SigV4-signed,
 *               written to /dev/null), the process's wall time (with --s3 only);
 *     per_rec   capstore_read with gap_bytes_max 0 and span_bytes_max 1: one GET per record, plus one per
 *               pack for its footer and trailer (--no-per-record: not run).
 *   --runs K (5). --reuse: read what an earlier invocation captured under DIR (same server) instead of
 *   capturing again. --curl-gaps G,G,...: instead of the runs, curl alone on the plan of each gap, --runs
 *   rounds of every gap in turn: a request's cost on the server, in bytes (docs/performance.md, "Reader").
 * search: --rows N (1,000,000) descriptor rows indexed straight through the catalog adapter
 *   (capstore_open_catalog; packs of 4096, one INDEX per 8 packs, one publish): SQLite under DIR, or with
 *   --clickhouse (CH_ENDPOINT_FILE: "http_port user password", tools/servers/clickhouse.sh) fresh
 *   ClickHouse tables. Then capstore_search pages of --page P (1000): the first page and a deep one (the
 *   cursor after 90% of the matches, reached with 10,000-row pages) of two filters: none (every row) and
 *   one hook name of 7. --runs K (7); --reuse keeps an earlier invocation's database or tables.
 *
 * Every measurement is one line of key=value pairs, then "median ..." lines. Exit status 0 only when every
 * read returned every selected payload byte-exact, each side issued exactly the requests planned, and
 * every search page had the rows expected.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capstore/capstore.h"

#define RUNS_MAX 31
#define SEC CS_SEC_NS
#define POOL_BYTES (2u << 20)
#define SEARCH_HOOKS 7u
#define SEARCH_BATCH_PACKS 8u
#define WALK_PAGE 10000u

typedef struct opts {
  const char *mode, *work, *s3_file, *ch_file;
  unsigned runs, packs, pack_records, every, min_bytes, max_bytes, inflight, rows, page;
  unsigned gap, span;  /* the merged side's gap_bytes_max and span_bytes_max; 0: the defaults */
  bool gap_set;
  const char *curl_gaps; /* "G1,G2,...": time curl alone on the plan of each gap (the request cost) */
  bool reuse, per_record;
} opts;

typedef struct s3_target {
  char endpoint[256], key[128], secret[128], bucket[128];
  bool on;
} s3_target;

static double now_s(void) { return (double)capstore_clock_ns() / 1e9; }

static int usage(void) {
  fprintf(stderr, "usage: capstore-bench-reader hydrate|search|smoke --work DIR [--s3 FILE] [--runs K] [--packs P]\n"
                  "       [--pack-records R] [--every E] [--min-bytes B] [--max-bytes B] [--inflight K]\n"
                  "       [--gap B] [--span B] [--curl-gaps B,B,...]\n"
                  "       [--rows N] [--page P] [--clickhouse FILE] [--no-per-record] [--reuse]\n");
  return 2;
}

static bool mode_is(const opts *o, const char *mode) { return strcmp(o->mode, mode) == 0; }

static unsigned *opts_number(opts *o, const char *name) {
  static const char *const names[] = {"--runs",      "--packs",    "--pack-records", "--every", "--min-bytes",
                                      "--max-bytes", "--inflight", "--rows",         "--page"};
  unsigned *fields[] = {&o->runs,      &o->packs,    &o->pack_records, &o->every, &o->min_bytes,
                        &o->max_bytes, &o->inflight, &o->rows,         &o->page};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i]) == 0) return fields[i];
  return NULL;
}

static int opts_parse(int argc, char **argv, opts *o) {
  if (argc < 2) return usage();
  *o = (opts){.mode = argv[1], .runs = 5, .packs = 40, .pack_records = 4096, .every = 7, .min_bytes = 4096,
              .max_bytes = 65536, .inflight = 8, .rows = 1000000, .page = 1000, .per_record = true};
  if (mode_is(o, "search")) o->runs = 7;
  for (int i = 2; i < argc; i++) {
    const char *name = argv[i];
    unsigned *number = opts_number(o, name);
    if (strcmp(name, "--reuse") == 0) o->reuse = true;
    else if (strcmp(name, "--no-per-record") == 0) o->per_record = false;
    else if (i + 1 == argc) return usage();
    else if (strcmp(name, "--work") == 0) o->work = argv[++i];
    else if (strcmp(name, "--s3") == 0) o->s3_file = argv[++i];
    else if (strcmp(name, "--clickhouse") == 0) o->ch_file = argv[++i];
    else if (strcmp(name, "--curl-gaps") == 0) o->curl_gaps = argv[++i];
    else if (strcmp(name, "--gap") == 0) o->gap = (unsigned)strtoul(argv[++i], NULL, 10), o->gap_set = true;
    else if (strcmp(name, "--span") == 0) o->span = (unsigned)strtoul(argv[++i], NULL, 10);
    else if (number == NULL || (*number = (unsigned)strtoul(argv[++i], NULL, 10)) == 0) return usage();
  }
  bool known = mode_is(o, "hydrate") || mode_is(o, "search") || mode_is(o, "smoke");
  if (!known || o->work == NULL || o->runs > RUNS_MAX || o->min_bytes > o->max_bytes ||
      o->max_bytes > POOL_BYTES / 2 || o->pack_records > CS_PACK_RECORDS_MAX || o->page > CAPSTORE_PAGE_MAX ||
      o->packs > 10000 || o->every > 1000 || o->inflight > 64)
    return usage();
  return 0;
}

static bool s3_target_read(const char *file, s3_target *t) {
  memset(t, 0, sizeof *t);
  if (file == NULL) return true;
  FILE *f = fopen(file, "r");
  t->on = f != NULL && fscanf(f, "%255s %127s %127s %127s", t->endpoint, t->key, t->secret, t->bucket) == 4;
  if (f != NULL) fclose(f);
  if (!t->on) fprintf(stderr, "%s: not an S3 endpoint file\n", file);
  return t->on;
}

static bool make_dir(const char *path) {
  if (mkdir(path, 0755) == 0 || errno == EEXIST) return true;
  fprintf(stderr, "mkdir %s: %s\n", path, strerror(errno));
  return false;
}

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

static long max_rss_mib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

/* ---- records: payload bytes from a pool, sizes and positions from the record's number ---------------- */

static uint8_t *g_pool; /* POOL_BYTES of pseudo-random bytes */

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static bool pool_make(void) {
  g_pool = malloc(POOL_BYTES);
  for (size_t i = 0; g_pool != NULL && i < POOL_BYTES; i += 8) {
    uint64_t v = mix(i);
    memcpy(g_pool + i, &v, 8);
  }
  return g_pool != NULL;
}

static uint32_t record_bytes(const opts *o, uint64_t n) {
  return o->min_bytes + (uint32_t)(mix(n) % (o->max_bytes - o->min_bytes + 1u));
}

static const uint8_t *record_payload(uint64_t n) { return g_pool + mix(n ^ 0x5eedu) % (POOL_BYTES / 2); }

typedef struct record {
  char capture_id[32], hook[48], request[32];
  cs_pack_meta meta;
} record;

/* Record n: capture id "r-<n>", layer n % layers and its hook, uint8 [bytes]. */
static void record_make(record *r, uint64_t n, uint32_t layers, uint32_t bytes) {
  uint32_t layer = (uint32_t)(n % layers);
  snprintf(r->capture_id, sizeof r->capture_id, "r-%" PRIu64, n);
  snprintf(r->hook, sizeof r->hook, "model.layers.%u.mlp.output", layer);
  snprintf(r->request, sizeof r->request, "chatcmpl-%08" PRIx64, n / (layers * 32u));
  r->meta = (cs_pack_meta){
      .capture_id = cs_pack_text_of(r->capture_id),
      .tenant_id = cs_pack_text_of("tenant-0042-interp-research"),
      .experiment_id = cs_pack_text_of("exp-2026-12-01-residual-stream"),
      .run_id = cs_pack_text_of("run-7c41e9d0b6a84f2e"),
      .session_id = cs_pack_text_of("sess-0190a4c2-5e61-7d3b-9c0f-2b1e4d5c6a7f"),
      .request_id = cs_pack_text_of(r->request),
      .sequence_id = cs_pack_text_of("seq-0"),
      .model_id = cs_pack_text_of("Qwen/Qwen2-0.5B-Instruct"),
      .model_revision = cs_pack_text_of("c540970f9e29518b1d8f06ab8b24cba66ad77b6d"),
      .adapter_revision = cs_pack_text_of(NULL),
      .capture_policy_version = cs_pack_text_of("capture-policy/4.1.0"),
      .hook_name = cs_pack_text_of(r->hook),
      .layer_number = (int32_t)layer,
      .step_number = n / layers,
      .token_start = n / layers,
      .token_end = n / layers + 1,
      .dtype = CS_DTYPE_UINT8,
      .rank = 1,
      .shape = {bytes},
      .captured_at_ns = UINT64_C(1764547200000000000) + n,
  };
}

/* The record number of a row ("r-<n>"). */
static uint64_t row_number(const cs_search_row *row) {
  const cs_pack_text *id = &row->d.record.meta.capture_id;
  char text[40];
  snprintf(text, sizeof text, "%.*s", (int)(id->len < 39 ? id->len : 39), id->bytes);
  return strtoull(text + 2, NULL, 10);
}

/* ---- hydrate: the configuration, the capture, the selection ---------------------------------------- */

typedef struct hydrate_env {
  char dir[512], spool[600], bucket[600], db[600], name[64];
  s3_target s3;
  capstore_config cfg;
} hydrate_env;

/* The run's store and catalog; its name is kept in DIR/hydrate/name so --reuse finds the same prefix. */
static bool hydrate_env_make(const opts *o, hydrate_env *e) {
  snprintf(e->dir, sizeof e->dir, "%s/hydrate", o->work);
  snprintf(e->spool, sizeof e->spool, "%s/spool", e->dir);
  snprintf(e->bucket, sizeof e->bucket, "%s/bucket", e->dir);
  snprintf(e->db, sizeof e->db, "%s/catalog.db", e->dir);
  snprintf(e->name, sizeof e->name, "bench_reader_%ld", (long)getpid());
  if (!make_dir(o->work) || !make_dir(e->dir) || !s3_target_read(o->s3_file, &e->s3)) return false;
  char path[700];
  snprintf(path, sizeof path, "%s/name", e->dir);
  FILE *f = fopen(path, o->reuse ? "r" : "w");
  bool ok = f != NULL && (o->reuse ? fscanf(f, "%63s", e->name) == 1 : fprintf(f, "%s\n", e->name) > 0);
  if (f != NULL) fclose(f);
  if (!ok) return fprintf(stderr, "%s: cannot %s the run's name\n", path, o->reuse ? "read" : "write"), false;
  capstore_config *cfg = &e->cfg;
  capstore_config_default(cfg);
  cfg->name = e->name;
  cfg->spool_dir = e->spool;
  cfg->sqlite_path = e->db;
  /*
   * The reader runs on the defaults: its store's in-flight bound is the read's own (not
   * service.store_inflight_max), and its reads of at most 8 MiB fit the 10 s request timeout.
   */
  if (!e->s3.on) {
    cfg->store_dir = e->bucket;
    return true;
  }
  cfg->s3_endpoint = e->s3.endpoint;
  cfg->s3_bucket = e->s3.bucket;
  cfg->s3_access_key_id = e->s3.key;
  cfg->s3_secret_access_key = e->s3.secret;
  cfg->s3_allow_insecure = true;
  return true;
}

/* Captures packs x pack_records records through the runtime and flushes them into the catalog. */
static bool hydrate_capture(const opts *o, hydrate_env *e) {
  capstore_config cfg = e->cfg;
  cfg.capture.sink.pack_records_max = o->pack_records;
  cfg.capture.sink.pack_bytes_max = UINT64_C(1) << 30; /* the record count seals, not the bytes or the linger */
  cfg.capture.sink.linger_ns = 3600 * SEC;
  cfg.capture.sink.spool_bytes_max = UINT64_C(16) << 30;
  cfg.capture.sink.block_max_ns = 120 * SEC;
  cfg.s3_max_connections = o->inflight;      /* the upload's, not measured */
  cfg.service.request_timeout_ns = 300 * SEC; /* a PUT of a whole 140 MB pack */
  char msg[256];
  capstore *cs = NULL;
  double t0 = now_s();
  if (capstore_open(&cfg, &cs, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "open: %s\n", msg), false;
  uint64_t records = (uint64_t)o->packs * o->pack_records, bytes = 0;
  bool ok = true;
  for (uint64_t n = 0; n < records && ok; n++) {
    record r;
    uint32_t len = record_bytes(o, n);
    record_make(&r, n, o->every, len);
    int rc = capstore_write(cs, &r.meta, record_payload(n), len, msg, sizeof msg);
    if (rc != CS_E_OK) ok = fprintf(stderr, "write %" PRIu64 ": %s (%s)\n", n, cs_strerror(rc), msg) < 0;
    bytes += len;
  }
  capstore_flush_report report;
  int rc = ok ? capstore_flush(cs, capstore_clock_ns() + 1800 * SEC, &report, msg, sizeof msg) : CS_E_IO;
  if (ok && rc != CS_E_OK) ok = fprintf(stderr, "flush: %s (%s) stage %s\n", cs_strerror(rc), msg, report.stage) < 0;
  capstore_close(cs, 60 * SEC, msg, sizeof msg);
  capstore_free(cs);
  printf("capture packs=%u records=%" PRIu64 " payload_bytes=%" PRIu64 " seconds=%.1f ok=%d\n", o->packs, records,
         bytes, now_s() - t0, ok);
  return ok;
}

/* Every record of layer 0 (every `every`th), all pages joined into one selection. */
static bool select_layer0(capstore_reader *r, capstore_selection *sel) {
  cs_search_filter filter;
  memset(&filter, 0, sizeof filter);
  filter.has_layer = true;
  capstore_selection *page = calloc(1, sizeof *page);
  char *cursor = calloc(1, CAPSTORE_CURSOR_MAX), msg[512];
  bool ok = page != NULL && cursor != NULL;
  while (ok) {
    int rc = capstore_search(r, &filter, cursor, CAPSTORE_PAGE_MAX, page, msg, sizeof msg);
    if (rc != CS_E_OK) ok = fprintf(stderr, "search: %s (%s)\n", cs_strerror(rc), msg) < 0;
    if (!ok) break;
    snprintf(cursor, CAPSTORE_CURSOR_MAX, "%s", page->cursor);
    if (capstore_selection_take(sel, page) != CS_E_OK) ok = fprintf(stderr, "selection_take failed\n") < 0;
    if (cursor[0] == '\0') break;
  }
  capstore_selection_free(page);
  free(page);
  free(cursor);
  return ok;
}

/* ---- the plan's spans, planned here the way capstore_read plans them, for curl ------------------------ */

typedef struct span_plan {
  const char **keys;  /* per pack */
  cs_read_pack *packs;
  cs_read_want *wants;
  uint32_t *order, pack_count;
  cs_read_span *spans;
  cs_read_plan plan;
} span_plan;

static void span_plan_free(span_plan *p) {
  free(p->keys);
  free(p->packs);
  free(p->wants);
  free(p->order);
  free(p->spans);
  memset(p, 0, sizeof *p);
}

static int by_pack_id(const void *a, const void *b) {
  const cs_search_row *x = *(const cs_search_row *const *)a, *y = *(const cs_search_row *const *)b;
  return memcmp(x->d.pack_id.bytes, y->d.pack_id.bytes, 16);
}

/* The selection's packs (each once, in pack id order) and its rows as wants of them. */
static bool span_plan_group(const capstore_selection *sel, span_plan *p) {
  uint32_t n = sel->count;
  const cs_search_row **sorted = malloc((n + 1) * sizeof *sorted);
  p->keys = calloc(n + 1, sizeof *p->keys);
  p->packs = calloc(n + 1, sizeof *p->packs);
  p->wants = calloc(n + 1, sizeof *p->wants);
  bool ok = sorted != NULL && p->keys != NULL && p->packs != NULL && p->wants != NULL;
  for (uint32_t i = 0; ok && i < n; i++) sorted[i] = &sel->rows[i];
  if (ok) qsort(sorted, n, sizeof *sorted, by_pack_id);
  for (uint32_t i = 0; ok && i < n; i++) {
    const cs_search_row *row = sorted[i];
    if (i == 0 || by_pack_id(&sorted[i - 1], &sorted[i]) != 0) {
      p->keys[p->pack_count] = row->d.key;
      p->packs[p->pack_count++] =
          (cs_read_pack){.size_bytes = row->pack_size_bytes, .footer_offset = row->footer_offset};
    }
    p->wants[row - sel->rows] = (cs_read_want){.pack = p->pack_count - 1, .offset = row->d.record.offset,
                                               .length = row->d.record.stored_length};
  }
  free(sorted);
  return ok;
}

/* Plans sel under opt's merge rules (cs_read_plan_make, as capstore_read does). */
static bool span_plan_make(const capstore_selection *sel, const capstore_read_options *opt, span_plan *p) {
  memset(p, 0, sizeof *p);
  if (!span_plan_group(sel, p)) return span_plan_free(p), false;
  uint32_t capacity = sel->count + p->pack_count;
  p->order = calloc(sel->count + 1, sizeof *p->order);
  p->spans = calloc(capacity + 1, sizeof *p->spans);
  cs_read_limits limits = {.gap_bytes_max = opt->gap_bytes_max, .span_bytes_max = opt->span_bytes_max,
                           .byte_limit = UINT64_MAX, .request_limit = UINT64_MAX};
  char msg[256];
  int rc = p->order == NULL || p->spans == NULL ? CS_E_NO_MEMORY
                                                : cs_read_plan_make(p->packs, p->pack_count, p->wants, sel->count,
                                                                    &limits, p->order, p->spans, capacity, &p->plan,
                                                                    msg, sizeof msg);
  if (rc != CS_E_OK) return fprintf(stderr, "plan: %s (%s)\n", cs_strerror(rc), msg), span_plan_free(p), false;
  return true;
}

/*
 * The key as a URL path: every byte but the unreserved ones and '/'
 * percent-encoded. curl signs the path as it is sent, and the server
 * signs the decoded key encoded this way (SigV4's canonical URI), so the
 * two agree: a raw '=' (in "tenant=") fails the signature check.
 */
static void key_url_path(const char *key, char *out, size_t size) {
  static const char hex[] = "0123456789ABCDEF";
  size_t at = 0;
  for (const unsigned char *c = (const unsigned char *)key; *c != '\0' && at + 4 < size; c++) {
    if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("-_.~/", *c)) {
      out[at++] = (char)*c;
      continue;
    }
    out[at++] = '%';
    out[at++] = hex[*c >> 4];
    out[at++] = hex[*c & 15];
  }
  out[at] = '\0';
}

/*
 * curl's config: one block per span (url, range, output, signing, the
 * answer's code and size), separated by `next` so each URL keeps its range.
 */
static bool curl_config_write(const char *file, const s3_target *t, const span_plan *p) {
  FILE *f = fopen(file, "w");
  if (f == NULL) return fprintf(stderr, "%s: cannot write\n", file), false;
  for (uint32_t s = 0; s < p->plan.span_count; s++) {
    const cs_read_span *span = &p->spans[s];
    char path[3 * CS_KEY_MAX + 1];
    key_url_path(p->keys[span->pack], path, sizeof path);
    fprintf(f,
            "%surl = \"%s/%s/%s\"\nrange = \"%" PRIu64 "-%" PRIu64 "\"\noutput = \"/dev/null\"\n"
            "aws-sigv4 = \"aws:amz:us-east-1:s3\"\nuser = \"%s:%s\"\n"
            "header = \"x-amz-content-sha256: UNSIGNED-PAYLOAD\"\n"
            "write-out = \"%%{http_code} %%{size_download}\\n\"\nsilent\nshow-error\nno-progress-meter\n",
            s == 0 ? "" : "next\n", t->endpoint, t->bucket, path, span->offset, span->offset + span->length - 1,
            t->key, t->secret);
  }
  return fclose(f) == 0;
}

/* One curl --parallel run of the config; seconds, or -1 when a GET did not answer 206 with its bytes. */
static double curl_run(const opts *o, const char *config, const char *out, const span_plan *p) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "curl -sS --no-progress-meter --parallel --parallel-max %u --config '%s' > '%s'",
           o->inflight, config, out);
  double t0 = now_s();
  int status = system(cmd);
  double seconds = now_s() - t0;
  FILE *f = fopen(out, "r");
  unsigned code = 0;
  uint64_t size = 0, answers = 0, ok = 0, bytes = 0;
  while (f != NULL && fscanf(f, "%u %" SCNu64, &code, &size) == 2) {
    answers++;
    ok += code == 206;
    bytes += size;
  }
  if (f != NULL) fclose(f);
  if (status != 0 || ok != p->plan.requests || answers != p->plan.requests || bytes != p->plan.bytes) {
    fprintf(stderr, "curl: status %d, %" PRIu64 " of %" PRIu64 " GETs answered 206, %" PRIu64 " of %" PRIu64 " bytes\n",
            status, ok, p->plan.requests, bytes, p->plan.bytes);
    return -1;
  }
  return seconds;
}

/* ---- hydrate: the runs ------------------------------------------------------------------------------ */

enum { SIDE_READ, SIDE_CURL, SIDE_PER_RECORD, SIDES };
static const char *const side_names[SIDES] = {"read", "curl", "per_rec"};

typedef struct side_runs {
  double seconds[RUNS_MAX];
  uint64_t requests, planned, bytes, payload_bytes; /* the same in every run (checked) */
  unsigned count;
} side_runs;

/* One capstore_read of sel, timed; then (untimed) every payload checked against its record's bytes. */
static bool read_once(const opts *o, capstore_reader *r, const capstore_selection *sel,
                      const capstore_read_options *opt, double *seconds, capstore_read_cost *cost) {
  capstore_payloads p;
  char msg[512];
  double t0 = now_s();
  int rc = capstore_read(r, sel, opt, &p, msg, sizeof msg);
  *seconds = now_s() - t0;
  if (rc != CS_E_OK) return fprintf(stderr, "read: %s (%s)\n", cs_strerror(rc), msg), false;
  *cost = p.cost;
  bool ok = p.count == sel->count && p.cost.requests == p.cost.planned_requests + p.cost.retries;
  for (uint32_t i = 0; i < p.count && ok; i++) {
    uint64_t n = row_number(&sel->rows[i]);
    uint32_t len = record_bytes(o, n);
    ok = p.length[i] == len && memcmp(p.bytes[i], record_payload(n), len) == 0;
    if (!ok) fprintf(stderr, "read: record %" PRIu64 " differs from what was captured\n", n);
  }
  if (p.cost.requests != p.cost.planned_requests + p.cost.retries)
    fprintf(stderr, "read: %" PRIu64 " requests issued, %" PRIu64 " planned, %" PRIu64 " retries\n",
            p.cost.requests, p.cost.planned_requests, p.cost.retries);
  if (p.cost.retries > 0) printf("read retries=%" PRIu64 "\n", p.cost.retries);
  capstore_payloads_free(&p);
  return ok;
}

typedef struct hydrate_ctx {
  const opts *o;
  const hydrate_env *e;
  capstore_reader *reader;
  const capstore_selection *sel;
  capstore_read_options merged, each;
  span_plan merged_plan;
  char curl_config[700], curl_out[700];
  side_runs sides[SIDES];
} hydrate_ctx;

static bool side_record(hydrate_ctx *h, int side, unsigned run, double seconds, uint64_t requests, uint64_t planned,
                        uint64_t bytes, uint64_t payload) {
  side_runs *s = &h->sides[side];
  bool same = s->count == 0 || (s->requests == requests && s->bytes == bytes);
  s->seconds[s->count++] = seconds;
  s->requests = requests;
  s->planned = planned;
  s->bytes = bytes;
  s->payload_bytes = payload;
  printf("run=%u side=%s seconds=%.3f requests=%" PRIu64 " planned=%" PRIu64 " bytes=%" PRIu64
         " payload_GBps=%.3f wire_GBps=%.3f\n",
         run + 1, side_names[side], seconds, requests, planned, bytes, (double)payload / seconds / 1e9,
         (double)bytes / seconds / 1e9);
  fflush(stdout);
  if (!same) fprintf(stderr, "%s: run %u issued other requests than run 1\n", side_names[side], run + 1);
  return same;
}

static bool hydrate_side(hydrate_ctx *h, int side, unsigned run) {
  if (side == SIDE_CURL) {
    if (!h->e->s3.on) return true;
    double seconds = curl_run(h->o, h->curl_config, h->curl_out, &h->merged_plan);
    return seconds >= 0 && side_record(h, side, run, seconds, h->merged_plan.plan.requests,
                                       h->merged_plan.plan.requests, h->merged_plan.plan.bytes,
                                       h->merged_plan.plan.payload_bytes);
  }
  if (side == SIDE_PER_RECORD && !h->o->per_record) return true;
  double seconds = 0;
  capstore_read_cost cost;
  if (!read_once(h->o, h->reader, h->sel, side == SIDE_READ ? &h->merged : &h->each, &seconds, &cost)) return false;
  return side_record(h, side, run, seconds, cost.requests, cost.planned_requests, cost.bytes, cost.payload_bytes);
}

/* Runs every side once per run, the order turned by one each run, so no side always goes first. */
static bool hydrate_runs(hydrate_ctx *h) {
  for (unsigned run = 0; run < h->o->runs; run++)
    for (int k = 0; k < SIDES; k++)
      if (!hydrate_side(h, (int)((run + (unsigned)k) % SIDES), run)) return false;
  return true;
}

static void hydrate_report(const hydrate_ctx *h) {
  const side_runs *read = &h->sides[SIDE_READ], *curl = &h->sides[SIDE_CURL], *each = &h->sides[SIDE_PER_RECORD];
  double m[SIDES] = {0};
  for (int s = 0; s < SIDES; s++) {
    const side_runs *x = &h->sides[s];
    if (x->count == 0) continue;
    m[s] = median(x->seconds, x->count);
    printf("median side=%s runs=%u seconds=%.3f requests=%" PRIu64 " planned=%" PRIu64 " bytes=%" PRIu64
           " payload_bytes=%" PRIu64 " payload_GBps=%.3f wire_GBps=%.3f\n",
           side_names[s], x->count, m[s], x->requests, x->planned, x->bytes, x->payload_bytes,
           (double)x->payload_bytes / m[s] / 1e9, (double)x->bytes / m[s] / 1e9);
  }
  printf("\n%-9s %6s %9s %14s %9s %12s %10s\n", "side", "runs", "seconds", "bytes", "requests", "payload GB/s",
         "wire GB/s");
  for (int s = 0; s < SIDES; s++) {
    const side_runs *x = &h->sides[s];
    if (x->count > 0)
      printf("%-9s %6u %9.3f %14" PRIu64 " %9" PRIu64 " %12.3f %10.3f\n", side_names[s], x->count, m[s], x->bytes,
             x->requests, (double)x->payload_bytes / m[s] / 1e9, (double)x->bytes / m[s] / 1e9);
  }
  if (curl->count > 0) {
    double per_run[RUNS_MAX];
    for (unsigned i = 0; i < read->count; i++) per_run[i] = curl->seconds[i] / read->seconds[i];
    printf("ratio read_vs_curl=%.2f median_of_runs=%.2f (curl seconds / read seconds, same ranges; goal >= 0.8)\n",
           m[SIDE_CURL] / m[SIDE_READ], median(per_run, read->count));
  } else {
    printf("ratio read_vs_curl=none (no --s3: curl needs the S3 server)\n");
  }
  printf("requests read=%" PRIu64 " planned=%" PRIu64 " equal=%d\n", read->requests, read->planned,
         read->requests == read->planned);
  if (each->count > 0)
    printf("ratio per_record_vs_read time=%.2f requests=%.1f (per_rec / read)\n", m[SIDE_PER_RECORD] / m[SIDE_READ],
           (double)each->requests / (double)read->requests);
  printf("max_rss_MiB=%ld\n", max_rss_mib());
}

static bool hydrate_prepare(hydrate_ctx *h) {
  const opts *o = h->o;
  capstore_read_options_default(&h->merged);
  h->merged.inflight_max = o->inflight;
  if (o->gap_set) h->merged.gap_bytes_max = o->gap;
  if (o->span != 0) h->merged.span_bytes_max = o->span;
  h->each = h->merged;
  h->each.gap_bytes_max = 0;
  h->each.span_bytes_max = 1;
  if (!span_plan_make(h->sel, &h->merged, &h->merged_plan)) return false;
  capstore_read_cost est[2];
  char msg[256];
  for (int i = 0; i < 2; i++) {
    int rc = capstore_read_estimate(h->reader, h->sel, i == 0 ? &h->merged : &h->each, &est[i], msg, sizeof msg);
    if (rc != CS_E_OK) return fprintf(stderr, "estimate: %s (%s)\n", cs_strerror(rc), msg), false;
    printf("plan %s packs=%u requests=%" PRIu64 " bytes=%" PRIu64 " payload_bytes=%" PRIu64 "\n",
           i == 0 ? "merged" : "per_record", est[i].packs, est[i].planned_requests, est[i].planned_bytes,
           est[i].payload_bytes);
  }
  const cs_read_plan *p = &h->merged_plan.plan;
  printf("plan here requests=%" PRIu64 " bytes=%" PRIu64 " footer_bytes=%" PRIu64 " (the curl side's ranges)\n",
         p->requests, p->bytes, p->footer_bytes);
  if (p->requests != est[0].planned_requests || p->bytes != est[0].planned_bytes)
    return fprintf(stderr, "the plan here differs from capstore_read_estimate's\n"), false;
  snprintf(h->curl_config, sizeof h->curl_config, "%s/curl.cfg", h->e->dir);
  snprintf(h->curl_out, sizeof h->curl_out, "%s/curl.out", h->e->dir);
  if (o->curl_gaps != NULL) return true; /* curl_scan writes its own */
  return !h->e->s3.on || curl_config_write(h->curl_config, &h->e->s3, &h->merged_plan);
}

/*
 * What a request costs on this server, in bytes: curl alone on the plan of
 * each gap of --curl-gaps (at the merged side's span bound), --runs rounds,
 * each round every gap once in turn (so a change in the machine's load
 * falls on all of them). The times fit t = requests x c + bytes / rate:
 * c x rate is a request's cost in bytes, the gap worth reading through
 * rather than asking for twice.
 */
#define SCAN_GAPS_MAX 8
static bool curl_scan(hydrate_ctx *h) {
  if (!h->e->s3.on) return fprintf(stderr, "--curl-gaps needs --s3\n"), false;
  span_plan plans[SCAN_GAPS_MAX];
  char configs[SCAN_GAPS_MAX][720];
  double seconds[SCAN_GAPS_MAX][RUNS_MAX];
  uint64_t gaps[SCAN_GAPS_MAX];
  unsigned count = 0;
  bool ok = true;
  capstore_read_options opt = h->merged;
  for (const char *at = h->o->curl_gaps; ok && at != NULL && *at != '\0' && count < SCAN_GAPS_MAX;) {
    char *end = NULL;
    opt.gap_bytes_max = gaps[count] = strtoull(at, &end, 10);
    at = *end == ',' ? end + 1 : NULL;
    snprintf(configs[count], sizeof configs[count], "%s.%u", h->curl_config, count);
    ok = span_plan_make(h->sel, &opt, &plans[count]);
    if (!ok) break;
    ok = curl_config_write(configs[count], &h->e->s3, &plans[count]);
    count++;
  }
  for (unsigned run = 0; ok && run < h->o->runs; run++)
    for (unsigned g = 0; ok && g < count; g++)
      ok = (seconds[g][run] = curl_run(h->o, configs[g], h->curl_out, &plans[g])) >= 0;
  for (unsigned g = 0; g < count; g++) {
    if (ok)
      printf("curl_scan gap=%" PRIu64 " span=%" PRIu64 " requests=%" PRIu64 " bytes=%" PRIu64
             " median_seconds=%.3f runs=%u\n", gaps[g], opt.span_bytes_max,
             plans[g].plan.requests, plans[g].plan.bytes, median(seconds[g], h->o->runs), h->o->runs);
    span_plan_free(&plans[g]);
  }
  return ok;
}

static int hydrate(const opts *o) {
  hydrate_env e;
  if (!pool_make() || !hydrate_env_make(o, &e)) return 1;
  if (!o->reuse && !hydrate_capture(o, &e)) return 1;
  capstore_reader *reader = NULL;
  char msg[256];
  if (capstore_reader_open(&e.cfg, &reader, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "reader_open: %s\n", msg), 1;
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  uint64_t records = (uint64_t)o->packs * o->pack_records, expected = (records + o->every - 1) / o->every;
  double t0 = now_s();
  bool ok = select_layer0(reader, &sel);
  printf("select rows=%u expected=%" PRIu64 " seconds=%.3f (pages of %u)\n", sel.count, expected, now_s() - t0,
         CAPSTORE_PAGE_MAX);
  hydrate_ctx *h = calloc(1, sizeof *h);
  ok = ok && h != NULL && sel.count == expected;
  if (ok) *h = (hydrate_ctx){.o = o, .e = &e, .reader = reader, .sel = &sel};
  ok = ok && hydrate_prepare(h);
  bool scan = o->curl_gaps != NULL; /* the scan alone */
  if (ok && scan) ok = curl_scan(h);
  double warm = 0;
  capstore_read_cost cost;
  ok = ok && (scan || read_once(o, reader, &sel, &h->merged, &warm, &cost));
  if (ok && !scan) printf("warmup side=read seconds=%.3f (untimed: the objects into the page cache)\n", warm);
  ok = ok && (scan || hydrate_runs(h));
  if (ok && !scan) hydrate_report(h);
  if (h != NULL) span_plan_free(&h->merged_plan);
  free(h);
  capstore_selection_free(&sel);
  capstore_reader_free(reader);
  free(g_pool);
  return ok ? 0 : 1;
}

/* ---- search: rows indexed straight through the SQLite adapter, then pages of them ---------------------- */

static const cs_uuid LEASE = {{0x01, 0x90, 0xa4, 0xc2, 0x5e, 0x61, 0x7d, 0x3b, 0x9c, 0x0f, 9, 8, 7, 6, 5, 4}};
#define SEARCH_RECORD_BYTES 16384u

static bool cat_ok(int rc, const cs_catalog_result *res, const char *what) {
  if (rc == CS_E_OK && res->outcome == CS_OUT_OK) return true;
  fprintf(stderr, "%s: %s %s %s\n", what, cs_strerror(rc), cs_outcome_name(res->outcome), res->detail);
  return false;
}

/* Tables, then the lease at the next term; *term gets it. */
static bool lease_take(cs_catalog *cat, uint64_t *term) {
  cs_catalog_result res;
  cs_cat_head head;
  cs_claims claims;
  if (!cat_ok(cat->ops->schema_ensure(cat->self, &res), &res, "schema") ||
      !cat_ok(cat->ops->head(cat->self, &LEASE, &head, &res), &res, "head") ||
      !cat_ok(cat->ops->claim(cat->self, &LEASE, head.head_term, 600 * SEC, &res), &res, "claim") ||
      !cat_ok(cat->ops->read_claims(cat->self, &LEASE, head.head_term + 1, &claims, &res), &res, "read_claims"))
    return false;
  *term = head.head_term + 1;
  return claims.sole_mine;
}

typedef struct search_pack {
  cs_pack_ref ref;
  cs_pack_record *records;
  record *text;
} search_pack;

/* Pack `index` (UUIDv7-shaped ids that sort in index order) holding records [first, first + count). */
static bool search_pack_make(search_pack *p, uint32_t index, uint64_t first, uint32_t count) {
  memset(&p->ref, 0, sizeof p->ref);
  p->records = calloc(count, sizeof *p->records);
  p->text = calloc(count, sizeof *p->text);
  if (p->records == NULL || p->text == NULL) return false;
  uint64_t ms = UINT64_C(0x0190a4c25e61) + index, tail = mix(index);
  for (int i = 0; i < 6; i++) p->ref.pack_id.bytes[i] = (uint8_t)(ms >> (40 - 8 * i));
  for (int i = 6; i < 16; i++) p->ref.pack_id.bytes[i] = (uint8_t)(tail >> (8 * ((i - 6) & 7))); /* 10 bytes of a 64-bit mix: two wrap */
  p->ref.pack_id.bytes[6] = (uint8_t)(0x70 | (p->ref.pack_id.bytes[6] & 0x0f));
  p->ref.pack_id.bytes[8] = (uint8_t)(0x80 | (p->ref.pack_id.bytes[8] & 0x3f));
  char id[CS_UUID_TEXT_LEN + 1], key[256];
  cs_uuid_format(&p->ref.pack_id, id);
  int n = snprintf(key, sizeof key, "bench/v1/tenant=tenant-0042-interp-research/date=2026-12-01/"
                                    "session=sess-0190a4c2/rank=0/%s.dmi-pack", id);
  cs_pack_ref_set_key(&p->ref, key, (size_t)n);
  p->ref.record_count = count;
  p->ref.created_at_ns = UINT64_C(1764547200000000000) + index;
  p->ref.size_bytes = 64u + (uint64_t)count * SEARCH_RECORD_BYTES + (UINT64_C(1) << 20) + 64u;
  for (uint32_t r = 0; r < count; r++) {
    record_make(&p->text[r], first + r, SEARCH_HOOKS, SEARCH_RECORD_BYTES);
    p->records[r] = (cs_pack_record){.meta = p->text[r].meta, .offset = 64u + (uint64_t)r * SEARCH_RECORD_BYTES,
                                     .stored_length = SEARCH_RECORD_BYTES, .decoded_length = SEARCH_RECORD_BYTES,
                                     .crc32 = (uint32_t)mix(first + r)};
  }
  return true;
}

/* Packs [first_pack, first_pack + count) of rows records in packs of per_pack, in one INDEX at version 1. */
static bool search_index_batch(cs_catalog *cat, uint32_t first_pack, uint32_t count, uint64_t rows, uint32_t per_pack) {
  search_pack packs[SEARCH_BATCH_PACKS];
  cs_index_pack batch[SEARCH_BATCH_PACKS];
  bool ok = true;
  uint32_t made = 0;
  for (; made < count && ok; made++) {
    uint64_t first = (uint64_t)(first_pack + made) * per_pack;
    uint32_t n = (uint32_t)(rows - first < per_pack ? rows - first : per_pack);
    ok = search_pack_make(&packs[made], first_pack + made, first, n);
    batch[made] = (cs_index_pack){&packs[made].ref, packs[made].records, n};
  }
  cs_catalog_result res;
  ok = ok && cat_ok(cat->ops->index(cat->self, &LEASE, 0, 1, batch, count, &res), &res, "index");
  for (uint32_t i = 0; i < made; i++) {
    free(packs[i].records);
    free(packs[i].text);
  }
  return ok;
}

/* o->rows rows at version 1, published, in the catalog cfg names (fresh tables: a new SQLite file or name). */
static bool search_fill(const opts *o, const capstore_config *cfg) {
  if (cfg->sqlite_path != NULL) unlink(cfg->sqlite_path);
  cs_catalog cat;
  char msg[256];
  if (capstore_open_catalog(cfg, &cat, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "catalog: %s\n", msg), false;
  uint64_t term = 0;
  double t0 = now_s();
  bool ok = lease_take(&cat, &term);
  uint32_t packs = (uint32_t)((o->rows + o->pack_records - 1) / o->pack_records);
  for (uint32_t p = 0; p < packs && ok; p += SEARCH_BATCH_PACKS)
    ok = search_index_batch(&cat, p, packs - p < SEARCH_BATCH_PACKS ? packs - p : SEARCH_BATCH_PACKS, o->rows,
                            o->pack_records);
  cs_catalog_result res;
  ok = ok && cat_ok(cat.ops->publish(cat.self, &LEASE, 0, 1, term, packs, &res), &res, "publish");
  cat.ops->close(cat.self);
  printf("fill backend=%s rows=%u packs=%u seconds=%.1f ok=%d\n", cat.ops->name, o->rows, packs, now_s() - t0, ok);
  return ok;
}

typedef struct search_case {
  const char *name;
  cs_search_filter filter;
  uint64_t matches;
  char deep_cursor[CAPSTORE_CURSOR_MAX];
  double first_s[RUNS_MAX], deep_s[RUNS_MAX], walk_s;
  uint64_t walked;
} search_case;

/* One page, timed; false when it fails or holds other than `want` rows (or a row the filter excludes). */
static bool search_page(capstore_reader *r, search_case *c, const char *cursor, uint32_t page, uint32_t want,
                        capstore_selection *sel, double *seconds) {
  char msg[512];
  double t0 = now_s();
  int rc = capstore_search(r, &c->filter, cursor, page, sel, msg, sizeof msg);
  *seconds = now_s() - t0;
  if (rc != CS_E_OK) return fprintf(stderr, "search %s: %s (%s)\n", c->name, cs_strerror(rc), msg), false;
  bool ok = sel->count == want;
  for (uint32_t i = 0; i < sel->count && ok && c->filter.hook_name_count > 0; i++)
    ok = row_number(&sel->rows[i]) % SEARCH_HOOKS == 3;
  if (!ok)
    fprintf(stderr, "search %s: %u rows, %u expected (or a row outside the filter)\n", c->name, sel->count, want);
  return ok;
}

/* Pages of WALK_PAGE rows from the start until 90% of the matches are behind: the deep cursor. */
static bool search_walk(capstore_reader *r, search_case *c, capstore_selection *sel) {
  uint64_t depth = c->matches / 10 * 9;
  char *cursor = calloc(1, CAPSTORE_CURSOR_MAX);
  bool ok = cursor != NULL;
  double t0 = now_s(), seconds = 0;
  c->walked = 0;
  while (ok && c->walked < depth) {
    uint32_t page = depth - c->walked < WALK_PAGE ? (uint32_t)(depth - c->walked) : WALK_PAGE;
    ok = search_page(r, c, cursor, page, page, sel, &seconds);
    c->walked += sel->count;
    if (ok) snprintf(cursor, CAPSTORE_CURSOR_MAX, "%s", sel->cursor);
  }
  c->walk_s = now_s() - t0;
  if (ok) snprintf(c->deep_cursor, sizeof c->deep_cursor, "%s", cursor);
  free(cursor);
  printf("walk filter=%s rows=%" PRIu64 " seconds=%.2f rows_per_s=%.0f (pages of %u)\n", c->name, c->walked, c->walk_s,
         (double)c->walked / c->walk_s, WALK_PAGE);
  return ok;
}

static bool search_case_run(const opts *o, capstore_reader *r, search_case *c) {
  capstore_selection *sel = calloc(1, sizeof *sel);
  bool ok = sel != NULL && search_walk(r, c, sel);
  uint32_t deep_want = c->matches - c->walked < o->page ? (uint32_t)(c->matches - c->walked) : o->page;
  for (unsigned run = 0; run < o->runs && ok; run++) {
    ok = search_page(r, c, NULL, o->page, o->page, sel, &c->first_s[run]) &&
         search_page(r, c, c->deep_cursor, o->page, deep_want, sel, &c->deep_s[run]);
    printf("run=%u filter=%s matches=%" PRIu64 " page=%u first_ms=%.2f deep_ms=%.2f deep_after=%" PRIu64 "\n", run + 1,
           c->name, c->matches, o->page, c->first_s[run] * 1e3, c->deep_s[run] * 1e3, c->walked);
  }
  capstore_selection_free(sel);
  free(sel);
  return ok;
}

/* The catalog of a search run: SQLite under DIR/search, or ClickHouse tables named in DIR/search/name. */
typedef struct search_env {
  char dir[512], db[600], bucket[600], name[64], ch_url[256], ch_user[64], ch_password[128];
  capstore_config cfg;
} search_env;

static bool search_env_make(const opts *o, search_env *e) {
  memset(e, 0, sizeof *e);
  snprintf(e->dir, sizeof e->dir, "%s/search", o->work);
  snprintf(e->db, sizeof e->db, "%s/catalog.db", e->dir);
  snprintf(e->bucket, sizeof e->bucket, "%s/bucket", e->dir);
  snprintf(e->name, sizeof e->name, "bench_search_%ld", (long)getpid());
  if (!make_dir(o->work) || !make_dir(e->dir)) return false;
  capstore_config_default(&e->cfg);
  e->cfg.store_dir = e->bucket;
  e->cfg.sqlite_path = e->db;
  if (o->ch_file == NULL) return true;
  unsigned port = 0;
  FILE *f = fopen(o->ch_file, "r");
  bool ok = f != NULL && fscanf(f, "%u %63s %127s", &port, e->ch_user, e->ch_password) >= 2;
  if (f != NULL) fclose(f);
  if (!ok) return fprintf(stderr, "%s: not a ClickHouse endpoint file\n", o->ch_file), false;
  char path[700];
  snprintf(path, sizeof path, "%s/name", e->dir);
  f = fopen(path, o->reuse ? "r" : "w");
  ok = f != NULL && (o->reuse ? fscanf(f, "%63s", e->name) == 1 : fprintf(f, "%s\n", e->name) > 0);
  if (f != NULL) fclose(f);
  if (!ok) return fprintf(stderr, "%s: cannot keep the run's name\n", path), false;
  snprintf(e->ch_url, sizeof e->ch_url, "http://127.0.0.1:%u/", port);
  e->cfg.name = e->name;
  e->cfg.sqlite_path = NULL;
  e->cfg.clickhouse_url = e->ch_url;
  e->cfg.clickhouse_user = e->ch_user;
  e->cfg.clickhouse_password = e->ch_password[0] != '\0' ? e->ch_password : NULL;
  e->cfg.clickhouse_allow_insecure = true;
  e->cfg.service.request_timeout_ns = 120 * SEC; /* the fill's INDEX of 8 packs */
  return true;
}

static int search(const opts *o) {
  search_env e;
  if (!search_env_make(o, &e)) return 1;
  if (!o->reuse && !search_fill(o, &e.cfg)) return 1;
  capstore_reader *r = NULL;
  char msg[256];
  if (capstore_reader_open(&e.cfg, &r, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "reader_open: %s\n", msg), 1;
  static const char hook[] = "model.layers.3.mlp.output";
  static const cs_pack_text hooks[1] = {{hook, sizeof hook - 1}};
  search_case *cases = calloc(2, sizeof *cases);
  if (cases == NULL) return 1;
  cases[0].name = "none";
  cases[0].matches = o->rows;
  cases[1].name = "hook";
  cases[1].filter.hook_names = hooks;
  cases[1].filter.hook_name_count = 1;
  cases[1].matches = o->rows / SEARCH_HOOKS + (o->rows % SEARCH_HOOKS > 3);
  bool ok = true;
  for (int i = 0; i < 2 && ok; i++) ok = search_case_run(o, r, &cases[i]);
  for (int i = 0; i < 2 && ok; i++)
    printf("median backend=%s filter=%s rows=%u matches=%" PRIu64 " page=%u runs=%u first_ms=%.2f deep_ms=%.2f "
           "walk_rows_per_s=%.0f\n",
           o->ch_file != NULL ? "clickhouse" : "sqlite", cases[i].name, o->rows, cases[i].matches, o->page, o->runs,
           median(cases[i].first_s, o->runs) * 1e3, median(cases[i].deep_s, o->runs) * 1e3,
           (double)cases[i].walked / cases[i].walk_s);
  free(cases);
  capstore_reader_free(r);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  opts o;
  if (opts_parse(argc, argv, &o) != 0) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0); /* a line at a time, also into a file: long runs show progress */
  if (mode_is(&o, "hydrate")) return hydrate(&o);
  if (mode_is(&o, "search")) return search(&o);
  /* smoke: both modes, small, on a dirstore and SQLite: the benchmark builds, runs and checks its answers. */
  opts h = o, s = o;
  h.s3_file = NULL;
  h.packs = 3;
  h.pack_records = 256;
  h.min_bytes = 64;
  h.max_bytes = 4096;
  h.runs = 1;
  s.rows = 20000;
  s.pack_records = 4096;
  s.runs = 1;
  s.ch_file = NULL;
  return hydrate(&h) != 0 || search(&s) != 0;
}

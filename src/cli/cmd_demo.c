/*
 * capstore demo: the whole job on the embedded defaults, no server. Several
 * capture threads write tensors of mixed dtypes and shapes from host memory
 * into a runtime (a dirstore as the object store, SQLite as the catalog),
 * flush, close, then every record of this run is read back from the store
 * through the catalog, its CRC-32 checked and its bytes and metadata
 * compared with what was captured. Exit 0 only when every record read back
 * equal.
 *
 * Payloads are not kept: each is a pure function of (run seed, thread,
 * record), made again at read-back from the capture id the catalog returns.
 */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "capstore/capstore.h"
#include "cli.h"

#define DEMO_THREADS_MAX 64u
#define DEMO_RECORDS_MAX 1000000u

typedef struct demo_opts {
  const char *dir;
  uint32_t threads;
  uint32_t records; /* per thread */
  bool quiet;
} demo_opts;

/* A tensor kind the workload cycles through: what a transformer's hooks hand over. */
typedef struct demo_kind {
  const char *hook;
  cs_dtype dtype;
  uint32_t rank;
  uint32_t shape[3];
} demo_kind;

static const demo_kind demo_kinds[] = {
    {"layers.mlp.out", CS_DTYPE_BFLOAT16, 2, {1, 896}},    /* one token's hidden state */
    {"layers.attn.probs", CS_DTYPE_FLOAT16, 3, {14, 1, 64}},
    {"layers.mlp.act", CS_DTYPE_FLOAT32, 2, {1, 4864}},
    {"input_ids", CS_DTYPE_INT64, 1, {32}},
    {"layers.attn.mask", CS_DTYPE_BOOL, 2, {1, 64}},
    {"layers.q8.out", CS_DTYPE_INT8, 2, {16, 128}},
    {"logits.top", CS_DTYPE_FLOAT64, 1, {50}},
    {"sampled_token", CS_DTYPE_INT32, 0, {0}},             /* a scalar */
    {"router.choice", CS_DTYPE_UINT8, 1, {8}},
    {"positions", CS_DTYPE_INT16, 1, {32}},
    {"layers.kv.empty", CS_DTYPE_FLOAT32, 2, {0, 64}},     /* an empty tensor: no bytes */
};
#define DEMO_KINDS (sizeof demo_kinds / sizeof demo_kinds[0])
/* Every 97th record is a large activation block (1 MiB of float32). */
static const demo_kind demo_big = {"layers.mlp.block", CS_DTYPE_FLOAT32, 2, {256, 1024}};
#define DEMO_LAYERS 24u

static const demo_kind *demo_kind_of(uint32_t n) {
  return n % 97 == 96 ? &demo_big : &demo_kinds[n % DEMO_KINDS];
}

static uint64_t demo_length(const demo_kind *k) {
  uint64_t elems = 1;
  for (uint32_t i = 0; i < k->rank; i++) elems *= k->shape[i];
  return elems * cs_dtype_item_size(k->dtype);
}

static uint64_t splitmix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Record n of thread t: its payload bytes, a pure function of (seed, t, n). */
static void demo_fill(uint64_t seed, uint32_t t, uint32_t n, uint8_t *buf, uint64_t len) {
  uint64_t state = seed ^ ((uint64_t)t << 40) ^ n;
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t r = splitmix(&state);
    memcpy(buf + i, &r, 8);
  }
  uint64_t r = splitmix(&state);
  for (; i < len; i++, r >>= 8) buf[i] = (uint8_t)r;
  if (demo_kind_of(n)->dtype == CS_DTYPE_BOOL)
    for (i = 0; i < len; i++) buf[i] &= 1; /* a bool is 0 or 1 */
}

/* The text fields of record n of thread t, kept while its capture call runs. */
typedef struct demo_texts {
  char capture_id[96], session[32], request[48], sequence[48], hook[64];
} demo_texts;

static void demo_meta(const char *run_id, uint32_t t, uint32_t n, demo_texts *tx, cs_pack_meta *m) {
  const demo_kind *k = demo_kind_of(n);
  uint32_t layer = (n / (uint32_t)DEMO_KINDS) % DEMO_LAYERS;
  snprintf(tx->capture_id, sizeof tx->capture_id, "%s-t%" PRIu32 "-n%" PRIu32, run_id, t, n);
  snprintf(tx->session, sizeof tx->session, "%s", "session-0"); /* one sink: one tenant, session and rank */
  snprintf(tx->request, sizeof tx->request, "request-%" PRIu32 "-%" PRIu32, t, n / 256);
  snprintf(tx->sequence, sizeof tx->sequence, "seq-%" PRIu32, n / 256);
  snprintf(tx->hook, sizeof tx->hook, "%s", k->hook);
  memset(m, 0, sizeof *m);
  m->capture_id = cs_pack_text_of(tx->capture_id);
  m->tenant_id = cs_pack_text_of("demo");
  m->experiment_id = cs_pack_text_of("capstore-demo");
  m->run_id = cs_pack_text_of(run_id);
  m->session_id = cs_pack_text_of(tx->session);
  m->request_id = cs_pack_text_of(tx->request);
  m->sequence_id = cs_pack_text_of(tx->sequence);
  m->model_id = cs_pack_text_of("tiny-transformer");
  m->model_revision = cs_pack_text_of("random-init");
  m->adapter_revision = cs_pack_text_of(NULL);
  m->capture_policy_version = cs_pack_text_of("demo-v1");
  m->hook_name = cs_pack_text_of(tx->hook);
  m->layer_number = k == &demo_big || strncmp(k->hook, "layers.", 7) == 0 ? (int32_t)layer : -1;
  m->producer_rank = 0;
  m->step_number = n / 16;
  m->token_start = n;
  m->token_end = (uint64_t)n + 1;
  m->batch_position = n % 8;
  m->dtype = k->dtype;
  m->rank = k->rank;
  for (uint32_t i = 0; i < k->rank; i++) m->shape[i] = k->shape[i];
}

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * CS_SEC_NS + (uint64_t)ts.tv_nsec;
}

typedef struct demo_run {
  const demo_opts *opts;
  capstore *cs;
  char run_id[48];
  uint64_t seed;
  atomic_uint_fast64_t records_done;
  atomic_uint_fast64_t bytes_done;
  atomic_int failed;
  pthread_mutex_t error_lock;
  char error[512];
  uint64_t *latency_ns; /* threads x records capture-call times */
} demo_run;

typedef struct demo_thread {
  demo_run *run;
  uint32_t t;
  pthread_t thread;
} demo_thread;

static void *demo_capture(void *arg) {
  demo_thread *th = arg;
  demo_run *run = th->run;
  uint8_t *buf = malloc(demo_length(&demo_big));
  if (buf == NULL) {
    atomic_store(&run->failed, 1);
    return NULL;
  }
  demo_texts tx;
  cs_pack_meta m;
  char msg[256];
  for (uint32_t n = 0; n < run->opts->records && !atomic_load(&run->failed); n++) {
    uint64_t len = demo_length(demo_kind_of(n));
    demo_meta(run->run_id, th->t, n, &tx, &m);
    demo_fill(run->seed, th->t, n, buf, len);
    m.captured_at_ns = wall_ns();
    uint64_t t0 = capstore_clock_ns();
    int rc = capstore_write(run->cs, &m, buf, (size_t)len, msg, sizeof msg);
    run->latency_ns[(size_t)th->t * run->opts->records + n] = capstore_clock_ns() - t0;
    if (rc != CS_E_OK) {
      pthread_mutex_lock(&run->error_lock);
      if (!atomic_load(&run->failed))
        snprintf(run->error, sizeof run->error, "capture of %s failed (%s): %s", tx.capture_id, cs_strerror(rc), msg);
      atomic_store(&run->failed, 1);
      pthread_mutex_unlock(&run->error_lock);
      break;
    }
    atomic_fetch_add(&run->records_done, 1);
    atomic_fetch_add(&run->bytes_done, len);
  }
  free(buf);
  return NULL;
}

/* "12,345,678": counts a person reads at a glance. */
static const char *grouped(uint64_t v, char *out, size_t cap) {
  char digits[32];
  int n = snprintf(digits, sizeof digits, "%" PRIu64, v);
  size_t o = 0;
  for (int i = 0; i < n && o + 2 < cap; i++) {
    if (i > 0 && (n - i) % 3 == 0) out[o++] = ',';
    out[o++] = digits[i];
  }
  out[o] = '\0';
  return out;
}

static const char *mib(uint64_t bytes, char *out, size_t cap) {
  if (bytes < 1024 * 1024)
    snprintf(out, cap, "%.1f KiB", (double)bytes / 1024.0);
  else
    snprintf(out, cap, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
  return out;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* What read-back found. */
typedef struct demo_check {
  uint64_t equal, mismatched, duplicates, foreign, packs, gets, bytes_read;
  uint8_t *seen; /* threads x records */
  char first_problem[320];
} demo_check;

/* Keeps the first problem found: "<subject>: <what>". */
static void problem(demo_check *c, const char *subject, const char *what) {
  if (c->first_problem[0] == '\0') snprintf(c->first_problem, sizeof c->first_problem, "%s: %s", subject, what);
}

static bool text_is(cs_pack_text t, const char *want) {
  size_t n = strlen(want);
  return t.bytes != NULL && t.len == n && memcmp(t.bytes, want, n) == 0;
}

/* The metadata the catalog returned equals what was captured (captured_at aside: the clock's). */
static const char *meta_differs(const cs_pack_meta *got, const cs_pack_meta *want) {
  static const char *names[] = {"capture_id",    "tenant_id",   "experiment_id",          "run_id",
                                "session_id",    "request_id",  "sequence_id",            "model_id",
                                "model_revision", "hook_name", "capture_policy_version"};
  const cs_pack_text *g[] = {&got->capture_id,     &got->tenant_id,  &got->experiment_id, &got->run_id,
                             &got->session_id,     &got->request_id, &got->sequence_id,   &got->model_id,
                             &got->model_revision, &got->hook_name,  &got->capture_policy_version};
  const cs_pack_text *w[] = {&want->capture_id,     &want->tenant_id,  &want->experiment_id, &want->run_id,
                             &want->session_id,     &want->request_id, &want->sequence_id,   &want->model_id,
                             &want->model_revision, &want->hook_name,  &want->capture_policy_version};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (g[i]->len != w[i]->len || (w[i]->len > 0 && (g[i]->bytes == NULL || memcmp(g[i]->bytes, w[i]->bytes, w[i]->len) != 0)))
      return names[i];
  if (got->adapter_revision.bytes != NULL) return "adapter_revision";
  if (got->layer_number != want->layer_number) return "layer_number";
  if (got->producer_rank != want->producer_rank) return "producer_rank";
  if (got->step_number != want->step_number) return "step_number";
  if (got->token_start != want->token_start || got->token_end != want->token_end) return "token range";
  if (got->batch_position != want->batch_position) return "batch_position";
  if (got->dtype != want->dtype) return "dtype";
  if (got->rank != want->rank) return "rank";
  for (uint32_t i = 0; i < want->rank; i++)
    if (got->shape[i] != want->shape[i]) return "shape";
  return NULL;
}

/* Checks the rows of one pack: one ranged GET of the span of this run's records, then each record. */
static int check_pack(demo_run *run, cs_store *store, const char *key, cs_descriptor_row *rows, uint32_t count,
                      demo_check *c, uint8_t *expect) {
  uint64_t lo = UINT64_MAX, hi = 0;
  uint32_t mine = 0;
  for (uint32_t r = 0; r < count; r++) {
    if (!text_is(rows[r].record.meta.run_id, run->run_id)) continue;
    mine++;
    if (strcmp(rows[r].key, key) != 0) problem(c, key, "the catalog's row for a record names another object");
    lo = rows[r].record.offset < lo ? rows[r].record.offset : lo;
    uint64_t end = rows[r].record.offset + rows[r].record.stored_length;
    hi = end > hi ? end : hi;
  }
  c->foreign += count - mine;
  if (mine == 0) return CS_E_OK;
  c->packs++;
  uint8_t *span = malloc(hi > lo ? (size_t)(hi - lo) : 1);
  if (span == NULL) return CS_E_NO_MEMORY;
  size_t got = 0;
  cs_store_result sres;
  cs_range range = {.offset = lo, .length = hi - lo};
  int rc = CS_E_OK;
  if (hi > lo) {
    rc = store->ops->get(store->self, key, &range, span, (size_t)(hi - lo), &got, &sres);
    c->gets++;
    c->bytes_read += got;
    if (rc != CS_E_OK || sres.outcome != CS_OUT_OK || got != hi - lo) {
      char why[300];
      snprintf(why, sizeof why, "ranged GET failed: %s (%s)", rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(sres.outcome),
               sres.detail);
      problem(c, key, why);
      c->mismatched += mine;
      free(span);
      return CS_E_OK;
    }
  }
  for (uint32_t r = 0; r < count; r++) {
    const cs_pack_record *rec = &rows[r].record;
    if (!text_is(rec->meta.run_id, run->run_id)) continue;
    char id[128];
    snprintf(id, sizeof id, "%.*s", (int)rec->meta.capture_id.len, rec->meta.capture_id.bytes);
    uint32_t t, n;
    char tail;
    size_t run_len = strlen(run->run_id);
    if (strncmp(id, run->run_id, run_len) != 0 ||
        sscanf(id + run_len, "-t%" SCNu32 "-n%" SCNu32 "%c", &t, &n, &tail) != 2 || t >= run->opts->threads ||
        n >= run->opts->records) {
      problem(c, id, "a record of this run with a capture id the demo never wrote");
      c->mismatched++;
      continue;
    }
    size_t slot = (size_t)t * run->opts->records + n;
    if (c->seen[slot]) {
      problem(c, id, "capture id found twice in the catalog");
      c->duplicates++;
      continue;
    }
    c->seen[slot] = 1;
    demo_texts tx;
    cs_pack_meta want;
    demo_meta(run->run_id, t, n, &tx, &want);
    const char *field = meta_differs(&rec->meta, &want);
    uint64_t len = demo_length(demo_kind_of(n));
    const uint8_t *bytes = span + (rec->offset - lo);
    if (field != NULL) {
      char why[96];
      snprintf(why, sizeof why, "the catalog's %s differs from what was captured", field);
      problem(c, id, why);
    } else if (rec->stored_length != len || rec->decoded_length != len) {
      problem(c, id, "the catalog's length differs from what was captured");
      field = "length";
    } else if (cs_crc32(0, bytes, (size_t)len) != rec->crc32) {
      problem(c, id, "the payload's CRC-32 differs from the catalog's");
      field = "crc32";
    } else {
      demo_fill(run->seed, t, n, expect, len);
      if (memcmp(bytes, expect, (size_t)len) != 0) {
        problem(c, id, "the payload's bytes differ from what was captured");
        field = "bytes";
      }
    }
    if (field == NULL)
      c->equal++;
    else
      c->mismatched++;
  }
  free(span);
  return rc;
}

/* What the read-back's walk over the store carries to each key. */
typedef struct read_back_walk {
  demo_run *run;
  demo_check *check;
  cs_store *store;
  cs_catalog *cat;
  uint64_t watermark;
  cs_descriptor_row *rows;
  uint32_t capacity;
  uint8_t *expect;
  char *msg;
  size_t msg_size;
} read_back_walk;

/* One listed key: a pack's descriptors at the watermark, checked against its object (other keys are skipped). */
static int read_back_key(void *context, const char *key) {
  read_back_walk *w = context;
  cs_uuid pack;
  if (cs_key_pack_id(key, strlen(key), &pack) != CS_E_OK) return CS_E_OK; /* not a pack (a probe's object) */
  uint32_t count = 0;
  cs_catalog_result res;
  int rc = w->cat->ops->read_descriptors(w->cat->self, w->watermark, &pack, w->rows, w->capacity, &count, &res);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
    snprintf(w->msg, w->msg_size, "catalog descriptors of %s: %s (%s)", key,
             rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome), res.detail);
    return rc != CS_E_OK ? rc : CS_E_IO;
  }
  rc = check_pack(w->run, w->store, key, w->rows, count, w->check, w->expect);
  if (rc != CS_E_OK) snprintf(w->msg, w->msg_size, "read-back of %s: %s", key, cs_strerror(rc));
  return rc;
}

/* The catalog's watermark (its head), or the error with msg naming it. */
static int catalog_watermark(cs_catalog *cat, uint64_t *watermark, char *msg, size_t msg_size) {
  cs_cat_head head;
  cs_catalog_result res;
  cs_uuid reader = {{0}};
  int rc = cat->ops->head(cat->self, &reader, &head, &res);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
    snprintf(msg, msg_size, "catalog head: %s (%s)", rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome),
             res.detail);
    return rc != CS_E_OK ? rc : CS_E_IO;
  }
  *watermark = head.watermark;
  return CS_E_OK;
}

/* Every pack under the catalog's prefix, its descriptors at the catalog's watermark, checked. */
static int read_back(demo_run *run, const capstore_config *cfg, demo_check *c, char *msg, size_t msg_size) {
  cs_store store;
  cs_catalog cat;
  int rc = capstore_open_store(cfg, &store, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  rc = capstore_open_catalog(cfg, &cat, msg, msg_size);
  if (rc != CS_E_OK) {
    cs_store_close(&store);
    return rc;
  }
  read_back_walk walk = {.run = run, .check = c, .store = &store, .cat = &cat,
                         .capacity = cfg->capture.sink.pack_records_max, .msg = msg, .msg_size = msg_size};
  walk.rows = calloc(walk.capacity, sizeof *walk.rows);
  walk.expect = malloc(demo_length(&demo_big));
  char prefix[CS_KEY_MAX];
  capstore_key_prefix(cfg, prefix, sizeof prefix);
  if (walk.rows == NULL || walk.expect == NULL) {
    rc = CS_E_NO_MEMORY;
    snprintf(msg, msg_size, "read-back: out of memory");
  } else {
    rc = catalog_watermark(&cat, &walk.watermark, msg, msg_size);
  }
  if (rc == CS_E_OK) rc = cli_store_walk(&store, prefix, read_back_key, &walk, msg, msg_size);
  free(walk.rows);
  free(walk.expect);
  cat.ops->close(cat.self);
  cs_store_close(&store);
  return rc;
}

/* mkdir -p: every missing directory of path. */
static int mkdir_all(const char *path, char *msg, size_t msg_size) {
  char partial[4096];
  size_t n = strlen(path);
  if (n >= sizeof partial) return snprintf(msg, msg_size, "--dir is longer than %zu bytes", sizeof partial - 1), CS_E_IO;
  for (size_t i = 1; i <= n; i++) {
    if (i < n && path[i] != '/') continue;
    memcpy(partial, path, i);
    partial[i] = '\0';
    if (mkdir(partial, 0777) != 0 && errno != EEXIST) {
      snprintf(msg, msg_size, "cannot create %.400s: %s", partial, strerror(errno));
      return CS_E_IO;
    }
  }
  return CS_E_OK;
}

/* path as a shell word: as it is when it needs no quoting, else in single quotes. */
static const char *shell_word(const char *path, char *out, size_t cap) {
  if (strspn(path, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+=:,@%") == strlen(path))
    return snprintf(out, cap, "%s", path), out;
  size_t o = 0;
  out[o++] = '\'';
  for (const char *p = path; *p != '\0' && o + 6 < cap; p++) {
    if (*p == '\'') {
      memcpy(out + o, "'\\''", 4);
      o += 4;
    } else {
      out[o++] = *p;
    }
  }
  out[o++] = '\'';
  out[o] = '\0';
  return out;
}

static int demo_usage(FILE *out) {
  fprintf(out,
          "usage: capstore demo [--dir DIR] [--threads N] [--records N] [--quiet]\n"
          "\n"
          "Captures tensors of mixed dtypes and shapes from several threads on the\n"
          "embedded defaults (no server: a directory as the object store, SQLite as\n"
          "the catalog), flushes, then reads every record of the run back from the\n"
          "store through the catalog and compares it byte for byte.\n"
          "\n"
          "options:\n"
          "  --dir DIR      where the spool, the store and the catalog live\n"
          "                 (default: capstore-demo, created with its parents; runs add up)\n"
          "  --threads N    capture threads, 1..%u (default 4)\n"
          "  --records N    records per thread, 1..%u (default 2500)\n"
          "  --quiet        no progress line and no table, only errors\n"
          "\n"
          "exit status: 0 every record read back equal; 1 a stage failed or a record\n"
          "differed (the first difference is named); 2 usage.\n"
          "\n"
          "example: capstore demo --dir /tmp/cs --threads 2 --records 10000\n",
          DEMO_THREADS_MAX, DEMO_RECORDS_MAX);
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

static bool parse_count(const char *text, uint32_t max, uint32_t *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < 1 || v > max) return false;
  *out = (uint32_t)v;
  return true;
}

static int parse_args(int argc, char **argv, demo_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return demo_usage(stdout), -1;
    if (strcmp(a, "--quiet") == 0) {
      o->quiet = true;
      continue;
    }
    if (i + 1 >= argc || (strcmp(a, "--dir") != 0 && strcmp(a, "--threads") != 0 && strcmp(a, "--records") != 0)) {
      fprintf(stderr, "capstore demo: %s '%s'\n", i + 1 >= argc && a[0] == '-' ? "missing value after" : "unknown option",
              a);
      return demo_usage(stderr);
    }
    const char *v = argv[++i];
    if (strcmp(a, "--dir") == 0) {
      if (v[0] == '\0') return fprintf(stderr, "capstore demo: --dir is empty\n"), CLI_EXIT_USAGE;
      o->dir = v;
    } else if (strcmp(a, "--threads") == 0 ? !parse_count(v, DEMO_THREADS_MAX, &o->threads)
                                           : !parse_count(v, DEMO_RECORDS_MAX, &o->records)) {
      fprintf(stderr, "capstore demo: %s '%s' is not a whole number from 1 to %u\n", a, v,
              strcmp(a, "--threads") == 0 ? DEMO_THREADS_MAX : DEMO_RECORDS_MAX);
      return CLI_EXIT_USAGE;
    }
  }
  return CLI_EXIT_OK;
}

int cli_demo_main(int argc, char **argv) {
  demo_opts o = {.dir = "capstore-demo", .threads = 4, .records = 2500};
  int prc = parse_args(argc, argv, &o);
  if (prc != CLI_EXIT_OK) return prc < 0 ? CLI_EXIT_OK : prc;
  bool tty = !o.quiet && isatty(STDERR_FILENO);
  char msg[512], a[32], b[32], c3[32];
  char spool[4096], bucket[4096], catalog[4096];
  if (snprintf(spool, sizeof spool, "%s/spool", o.dir) >= (int)sizeof spool ||
      snprintf(bucket, sizeof bucket, "%s/bucket", o.dir) >= (int)sizeof bucket ||
      snprintf(catalog, sizeof catalog, "%s/catalog.db", o.dir) >= (int)sizeof catalog)
    return fprintf(stderr, "capstore demo: --dir is too long\n"), CLI_EXIT_USAGE;
  if (mkdir_all(o.dir, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "capstore demo: %s\n", msg), CLI_EXIT_FAILURE;

  capstore_config cfg;
  capstore_config_default(&cfg);
  cfg.spool_dir = spool;
  cfg.store_dir = bucket;
  cfg.sqlite_path = catalog;

  demo_run run = {.opts = &o};
  pthread_mutex_init(&run.error_lock, NULL);
  uint64_t now = wall_ns();
  run.seed = now ^ ((uint64_t)getpid() << 32);
  snprintf(run.run_id, sizeof run.run_id, "demo-%" PRIx64 "-%ld", now / 1000, (long)getpid());
  size_t total = (size_t)o.threads * o.records;
  run.latency_ns = calloc(total, sizeof *run.latency_ns);
  demo_thread *threads = calloc(o.threads, sizeof *threads);
  demo_check check = {.seen = calloc(total, 1)};
  if (run.latency_ns == NULL || threads == NULL || check.seen == NULL) {
    fprintf(stderr, "capstore demo: out of memory for %zu records\n", total);
    return CLI_EXIT_FAILURE;
  }

  int exit_code = CLI_EXIT_FAILURE;
  uint64_t t_open = capstore_clock_ns();
  if (capstore_open(&cfg, &run.cs, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore demo: open: %s\n", msg);
    goto done;
  }
  uint64_t t_start = capstore_clock_ns();
  uint32_t started = 0;
  for (; started < o.threads; started++) {
    threads[started] = (demo_thread){.run = &run, .t = started};
    if (pthread_create(&threads[started].thread, NULL, demo_capture, &threads[started]) != 0) {
      snprintf(run.error, sizeof run.error, "cannot start capture thread %u", started);
      atomic_store(&run.failed, 1);
      break;
    }
  }
  while (tty && atomic_load(&run.records_done) < total && !atomic_load(&run.failed)) {
    capstore_stats st;
    capstore_stats_get(run.cs, &st);
    fprintf(stderr, "\rcaptured %s/%s, %s; packs %" PRIu64 " sealed %" PRIu64 " up %" PRIu64 " indexed  ",
            grouped(atomic_load(&run.records_done), a, sizeof a), grouped(total, b, sizeof b),
            mib(atomic_load(&run.bytes_done), c3, sizeof c3), st.capture.packs_sealed, st.service.uploaded,
            st.service.indexed);
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  for (uint32_t i = 0; i < started; i++) pthread_join(threads[i].thread, NULL);
  uint64_t t_captured = capstore_clock_ns();
  if (tty) fprintf(stderr, "\r%-79s\rflushing...", "");
  capstore_flush_report report;
  memset(&report, 0, sizeof report);
  int frc = CS_E_OK;
  if (!atomic_load(&run.failed))
    frc = capstore_flush(run.cs, capstore_clock_ns() + 120 * CS_SEC_NS, &report, msg, sizeof msg);
  uint64_t t_flushed = capstore_clock_ns();
  char cmsg[256];
  int crc = capstore_close(run.cs, 10 * CS_SEC_NS, cmsg, sizeof cmsg);
  capstore_stats st; /* after close: the packs published by the flush are handed off by then */
  capstore_stats_get(run.cs, &st);
  capstore_free(run.cs);
  if (tty) fprintf(stderr, "\r%-79s\r", "");
  if (atomic_load(&run.failed)) {
    fprintf(stderr, "capstore demo: %s\n", run.error);
    goto done;
  }
  if (frc != CS_E_OK || !report.drained) {
    fprintf(stderr, "capstore demo: flush did not drain (%s, stage %s): %s\n", cs_strerror(frc),
            report.stage != NULL && report.stage[0] != '\0' ? report.stage : "-", msg);
    goto done;
  }
  if (crc != CS_E_OK) {
    fprintf(stderr, "capstore demo: close: %s\n", cmsg);
    goto done;
  }

  if (tty) fprintf(stderr, "reading back...");
  uint64_t t_read = capstore_clock_ns();
  int rrc = read_back(&run, &cfg, &check, msg, sizeof msg);
  uint64_t t_readdone = capstore_clock_ns();
  if (tty) fprintf(stderr, "\r%-79s\r", "");
  if (rrc != CS_E_OK) {
    fprintf(stderr, "capstore demo: read-back: %s\n", msg);
    goto done;
  }
  uint64_t missing = 0;
  for (size_t i = 0; i < total; i++) missing += check.seen[i] == 0;
  bool all_equal = check.equal == total && check.mismatched == 0 && check.duplicates == 0 && missing == 0;

  if (!o.quiet) {
    qsort(run.latency_ns, total, sizeof *run.latency_ns, cmp_u64);
    double capture_s = (double)(t_captured - t_start) / 1e9;
    uint64_t payload = atomic_load(&run.bytes_done);
    printf("capstore demo: %u threads captured %s records into %s (run %s)\n\n", o.threads, grouped(total, a, sizeof a),
           o.dir, run.run_id);
    printf("  %-22s %s (%u dtypes, shapes from scalars and empty tensors to 1 MiB blocks)\n", "records captured",
           grouped(total, a, sizeof a), (unsigned)CS_DTYPE_COUNT_);
    printf("  %-22s %s\n", "payload bytes", mib(payload, a, sizeof a));
    printf("  %-22s %s sealed, %s uploaded (%s), %s indexed (%s records)\n", "packs", grouped(st.capture.packs_sealed, a, sizeof a),
           grouped(st.service.uploaded, b, sizeof b), mib(st.bytes_uploaded, c3, sizeof c3),
           grouped(st.service.indexed, msg, 32), grouped(st.descriptors_indexed, msg + 32, 32));
    printf("  %-22s %s records/s, %.1f MiB/s (payloads made on the fly; open took %.2f s)\n", "capture rate",
           grouped((uint64_t)((double)total / capture_s), b, sizeof b),
           (double)payload / (1024.0 * 1024.0) / capture_s, (double)(t_start - t_open) / 1e9);
    printf("  %-22s median %.1f us, p99 %.1f us, max %.1f ms\n", "capstore_write call",
           (double)run.latency_ns[total / 2] / 1e3, (double)run.latency_ns[total * 99 / 100] / 1e3,
           (double)run.latency_ns[total - 1] / 1e6);
    printf("  %-22s %.2f s, every record queryable\n", "flush", (double)(t_flushed - t_captured) / 1e9);
    printf("  %-22s %s of %s records equal (%s packs, %s ranged reads, %s, %.2f s)\n", "read back",
           grouped(check.equal, a, sizeof a), grouped(total, b, sizeof b), grouped(check.packs, c3, sizeof c3),
           grouped(check.gets, msg, 32), mib(check.bytes_read, msg + 64, 32), (double)(t_readdone - t_read) / 1e9);
    if (check.foreign > 0)
      printf("  %-22s %s records of earlier runs\n", "also in the catalog", grouped(check.foreign, a, sizeof a));
  }
  if (!all_equal) {
    fprintf(stderr, "capstore demo: read-back: %" PRIu64 " of %zu records equal, %" PRIu64 " differed, %" PRIu64
                    " duplicated, %" PRIu64 " missing; first: %s\n",
            check.equal, total, check.mismatched, check.duplicates, missing,
            check.first_problem[0] != '\0' ? check.first_problem : "records missing from the catalog");
    goto done;
  }
  /* The demo's configuration as a file, so that the other commands can look at what it made. */
  char config[4096 + 32], absolute[4096];
  bool have_config = false;
  if (realpath(o.dir, absolute) != NULL && snprintf(config, sizeof config, "%s/capstore.json", o.dir) < (int)sizeof config) {
    FILE *f = fopen(config, "w");
    if (f != NULL) {
      json_t *doc = json_pack("{s:s, s:{s:s}, s:{s:s}}", "spool_dir", "", "store", "dir", "", "catalog", "sqlite", "");
      char path[4096 + 32];
      snprintf(path, sizeof path, "%s/spool", absolute);
      json_object_set_new(doc, "spool_dir", json_string(path));
      snprintf(path, sizeof path, "%s/bucket", absolute);
      json_object_set_new(json_object_get(doc, "store"), "dir", json_string(path));
      snprintf(path, sizeof path, "%s/catalog.db", absolute);
      json_object_set_new(json_object_get(doc, "catalog"), "sqlite", json_string(path));
      fprintf(f, "# written by capstore demo: its spool, store and catalog (docs/configuration.md)\n");
      have_config = json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0;
      json_decref(doc);
      have_config = fclose(f) == 0 && have_config;
    }
  }
  if (!o.quiet) {
    char qc[8300], qd[8300], qs[8300];
    shell_word(config, qc, sizeof qc);
    shell_word(o.dir, qd, sizeof qd);
    shell_word(spool, qs, sizeof qs);
    printf("\nnext:\n");
    if (have_config) {
      printf("  %s ls %s --hook layers.mlp.act --step 2..4\n      # search the catalog: the records a filter selects\n",
             cli_program, qc);
      printf("  %s read %s --step 0 --out step0\n      # read them back, verified, as .npy files numpy opens\n",
             cli_program, qc);
      printf("  %s fsck %s --deep\n      # the spool, the store and the catalog checked against each other\n", cli_program,
             qc);
      printf("  %s status %s\n      # what the spool, the catalog and the store hold\n", cli_program, qc);
      printf("  %s config check %s\n      # the configuration with every default filled in\n", cli_program, qc);
    }
    printf("  %s demo --dir %s --threads 8\n      # runs add up in the same catalog\n", cli_program, qd);
    printf("  %s spool list %s\n      # the local spool (empty once drained)\n", cli_program, qs);
  }
  exit_code = CLI_EXIT_OK;
done:
  free(run.latency_ns);
  free(threads);
  free(check.seen);
  pthread_mutex_destroy(&run.error_lock);
  return exit_code;
}

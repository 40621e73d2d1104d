/*
 * capstore-bench-catalog: descriptors per second through a catalog adapter's
 * INDEX, set against the same rows inserted the plainest way the backend
 * offers, in the same run (bench/run_catalog.sh drives it).
 *
 * usage:
 *   capstore-bench-catalog clickhouse ENDPOINT_FILE [--tcp-port P] [options]
 *   capstore-bench-catalog sqlite DIR [options]
 * options: --packs N (3) --records R (4096) --runs K (5) --per-pack (one INDEX per pack; default one INDEX
 *          for the whole batch, as the service sends a batch under its byte budget)
 *
 * ClickHouse (ENDPOINT_FILE: "http_port user password", tools/servers/clickhouse.sh): fresh tables per run,
 * the lease taken, then the adapter's index() of the N packs; the peers insert the same rows (the bulk
 * form, catalog.h) into a table of the same schema: one HTTP POST of INSERT ... FORMAT TabSeparated from
 * this process (libcurl; the adapter's max_insert_block_size), and, with --tcp-port, clickhouse-client
 * --time reading them from a file. The
 * adapter and the POST go first in turn, run by run.
 * SQLite: a fresh database per run; the peer is one prepared INSERT of the same rows in one transaction,
 * on the same connection settings (WAL, synchronous=FULL) and the same index.
 *
 * Prints one line per run and per side ("run=1 side=adapter rows=12288 seconds=0.071 rows_per_s=...")
 * and then the medians and ratios ("median side=adapter ... ratio_vs_curl=0.61").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sqlite3.h>

#include "bench_clickhouse.h"
#include "capstore/clickhouse.h"
#include "capstore/sqlite_catalog.h"

#define RUNS_MAX 31
#define SIDES 3

typedef struct bench_opts {
  const char *backend, *target;
  const char *cluster; /* a replicated catalog's cluster (--cluster NAME --quorum Q): the adapter in that mode */
  unsigned quorum;
  unsigned tcp_port, packs, records, runs;
  bool per_pack;
} bench_opts;

typedef struct bench_pack {
  cs_pack_ref ref;
  cs_pack_record *records;
  char (*text)[3][96]; /* capture id, request id, hook name of each record */
} bench_pack;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(void) {
  fprintf(stderr, "usage: capstore-bench-catalog clickhouse ENDPOINT_FILE [--tcp-port P] | sqlite DIR\n"
                  "       [--packs N] [--records R] [--runs K] [--per-pack] [--cluster NAME --quorum Q]\n");
  return 2;
}

static int opts_parse(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){.packs = 3, .records = 4096, .runs = 5};
  if (argc < 3) return usage();
  o->backend = argv[1];
  o->target = argv[2];
  for (int i = 3; i < argc; i++) {
    unsigned *field = NULL;
    if (strcmp(argv[i], "--per-pack") == 0) o->per_pack = true;
    else if (strcmp(argv[i], "--packs") == 0) field = &o->packs;
    else if (strcmp(argv[i], "--records") == 0) field = &o->records;
    else if (strcmp(argv[i], "--runs") == 0) field = &o->runs;
    else if (strcmp(argv[i], "--tcp-port") == 0) field = &o->tcp_port;
    else if (strcmp(argv[i], "--quorum") == 0) field = &o->quorum;
    else if (strcmp(argv[i], "--cluster") == 0 && i + 1 < argc) {
      o->cluster = argv[++i];
      continue;
    } else return usage();
    if (field != NULL && (++i == argc || (*field = (unsigned)strtoul(argv[i], NULL, 10)) == 0)) return usage();
  }
  bool known = strcmp(o->backend, "clickhouse") == 0 || strcmp(o->backend, "sqlite") == 0;
  if (!known || o->packs > 64 || o->records > CS_PACK_RECORDS_MAX || o->runs > RUNS_MAX) return usage();
  return 0;
}

/* ---- the rows: metadata as a serving stack writes it ----------------------- */

static void meta_fill(cs_pack_meta *m, char (*text)[96], uint32_t pack, uint32_t r) {
  uint32_t layer = r % 80, token = r / 80;
  snprintf(text[0], 96, "0190a4c2-5e61-7d3b-9c0f-%012x/L%02u/T%05u", pack, layer, token);
  snprintf(text[1], 96, "chatcmpl-%08x%08x%08x", pack * 7919u, token * 104729u, 0x5eed1234u);
  snprintf(text[2], 96, "model.layers.%u.self_attn.o_proj.output", layer);
  *m = (cs_pack_meta){
      .capture_id = cs_pack_text_of(text[0]),
      .tenant_id = cs_pack_text_of("tenant-0042-interp-research"),
      .experiment_id = cs_pack_text_of("exp/2026-11-30/sae-width-131072/l1-coefficient-0.0004"),
      .run_id = cs_pack_text_of("run-7c41e9d0b6a84f2e"),
      .session_id = cs_pack_text_of("sess-0190a4c2-5e61-7d3b-9c0f-2b1e4d5c6a7f"),
      .request_id = cs_pack_text_of(text[1]),
      .sequence_id = cs_pack_text_of("seq-3"),
      .model_id = cs_pack_text_of("mistralai/Mixtral-8x22B-Instruct-v0.1"),
      .model_revision = cs_pack_text_of("b5e8d2a1f0c94e7b8a6d5c4b3a29180716f5e4d3"),
      .adapter_revision = cs_pack_text_of(r % 3 == 0 ? "adapter-rev-2026-11-29T23:59:01Z" : NULL),
      .capture_policy_version = cs_pack_text_of("capture-policy/4.1.0"),
      .hook_name = cs_pack_text_of(text[2]),
      .layer_number = (int32_t)layer,
      .producer_rank = pack % 8,
      .step_number = 50000u + token,
      .token_start = 32u * token,
      .token_end = 32u * token + 31u,
      .batch_position = token % 16,
      .dtype = CS_DTYPE_FLOAT16,
      .rank = 3,
      .shape = {1, 32, 6144},
      .captured_at_ns = UINT64_C(1764547200000000000) + 1000u * r,
  };
}

static bool pack_make(bench_pack *p, uint32_t index, uint32_t records) {
  memset(&p->ref, 0, sizeof p->ref);
  p->records = calloc(records, sizeof *p->records);
  p->text = calloc(records, sizeof *p->text);
  if (p->records == NULL || p->text == NULL) return false;
  for (int i = 0; i < 16; i++) p->ref.pack_id.bytes[i] = (uint8_t)(0x3c + 17 * i + index);
  p->ref.pack_id.bytes[6] = 0x70;
  char id[CS_UUID_TEXT_LEN + 1], key[256];
  cs_uuid_format(&p->ref.pack_id, id);
  int n = snprintf(key, sizeof key, "capstore/v1/tenant=tenant-0042-interp-research/date=2026-12-01/"
                                    "session=sess-0190a4c2/rank=%u/%s.dmi-pack", index % 8, id);
  cs_pack_ref_set_key(&p->ref, key, (size_t)n);
  p->ref.record_count = records;
  p->ref.created_at_ns = UINT64_C(1764547200000000000);
  p->ref.size_bytes = (uint64_t)records * 393216u;
  for (uint32_t r = 0; r < records; r++) {
    meta_fill(&p->records[r].meta, p->text[r], index, r);
    p->records[r].offset = 64u + (uint64_t)r * 393216u;
    p->records[r].stored_length = p->records[r].decoded_length = 393216u;
    p->records[r].crc32 = 0x85ebca6bu ^ r;
  }
  p->ref.index_bytes = cs_catalog_index_bytes(&p->ref, p->records, records);
  return true;
}

/* Every pack's rows at version 1, in the bulk form: the peers' body. */
static char *rows_tsv(const bench_pack *packs, uint32_t count, size_t *len) {
  size_t total = 0;
  for (uint32_t i = 0; i < count; i++)
    for (uint32_t r = 0; r < packs[i].ref.record_count; r++)
      total += cs_catalog_tsv_row(&packs[i].ref, &packs[i].records[r], 1, NULL, 0);
  char *body = malloc(total + 1);
  if (body == NULL) return NULL;
  size_t at = 0;
  for (uint32_t i = 0; i < count; i++)
    for (uint32_t r = 0; r < packs[i].ref.record_count; r++)
      at += cs_catalog_tsv_row(&packs[i].ref, &packs[i].records[r], 1, body + at, total - at);
  *len = at;
  return body;
}

/* ---- the adapter's side --------------------------------------------------- */

static const cs_uuid LEASE = {{0x01, 0x90, 0xa4, 0xc2, 0x5e, 0x61, 0x7d, 0x3b, 0x9c, 0x0f, 1, 2, 3, 4, 5, 6}};

static bool ok(int rc, const cs_catalog_result *res, const char *what) {
  if (rc == CS_E_OK && res->outcome == CS_OUT_OK) return true;
  fprintf(stderr, "%s: %s %s %s\n", what, cs_strerror(rc), cs_outcome_name(res->outcome), res->detail);
  return false;
}

static bool lease_take(cs_catalog *cat) {
  cs_catalog_result res;
  cs_cat_head head;
  cs_claims claims;
  if (!ok(cat->ops->schema_ensure(cat->self, &res), &res, "schema") ||
      !ok(cat->ops->head(cat->self, &LEASE, &head, &res), &res, "head") ||
      !ok(cat->ops->claim(cat->self, &LEASE, head.head_term, 60 * CS_SEC_NS, &res), &res, "claim") ||
      !ok(cat->ops->read_claims(cat->self, &LEASE, head.head_term + 1, &claims, &res), &res, "read_claims"))
    return false;
  return claims.sole_mine;
}

/* Seconds for the adapter to index every pack (one call, or one per pack); -1 on a failure. */
static double adapter_index(cs_catalog *cat, const bench_pack *packs, uint32_t count, bool per_pack) {
  cs_index_pack batch[64];
  for (uint32_t i = 0; i < count; i++) batch[i] = (cs_index_pack){&packs[i].ref, packs[i].records, packs[i].ref.record_count};
  cs_catalog_result res;
  double t0 = now_s();
  for (uint32_t i = 0; i < (per_pack ? count : 1); i++) {
    int rc = cat->ops->index(cat->self, &LEASE, 0, 1, per_pack ? &batch[i] : batch, per_pack ? 1 : count, &res);
    if (!ok(rc, &res, "index")) return -1;
  }
  return now_s() - t0;
}

/* ---- ClickHouse peers ----------------------------------------------------- */

typedef struct ch_target {
  char url[256], user[64], password[128];
  unsigned tcp_port;
  const char *cluster;
  unsigned quorum;
} ch_target;

/* One POST of sql (in the URL when body is given, else as the body); the HTTP status, 0 on a transport error. */
static long ch_post(const ch_target *t, const char *sql, const char *body, size_t len) {
  return bench_ch_post(t->url, t->user, t->password, sql, body, len);
}

/* Seconds for clickhouse-client --time to insert the file's rows into table (its own timing), -1 on failure. */
static double client_insert(const ch_target *t, const char *table, const char *file) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "clickhouse-client --host 127.0.0.1 --port %u --user '%s' --password '%s' --time "
           "--query 'INSERT INTO %s (%s) FORMAT TabSeparated' < '%s' 2>&1",
           t->tcp_port, t->user, t->password, table, CS_CATALOG_DESCRIPTOR_COLUMNS, file);
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  char line[512];
  double seconds = -1;
  while (fgets(line, sizeof line, p) != NULL)
    if (sscanf(line, "%lf", &seconds) != 1) fprintf(stderr, "clickhouse-client: %s", line);
  return pclose(p) == 0 ? seconds : -1;
}

static cs_catalog *ch_open(const ch_target *t, const char *prefix, cs_catalog *cat) {
  cs_clickhouse_config cfg = {.url = t->url, .user = t->user, .password = t->password, .table_prefix = prefix,
                              .holder = "bench", .request_timeout_ns = 300 * CS_SEC_NS, .allow_insecure = true,
                              .cluster = t->cluster, .insert_quorum = t->cluster != NULL ? t->quorum : 0};
  return cs_clickhouse_open(&cfg, cat) == CS_E_OK ? cat : NULL;
}

/*
 * One run on fresh tables: the adapter and the POST peer, in turn first (the
 * first insert after the tables are made is the slower one), then (with a
 * TCP port) the client peer; seconds into out[3].
 */
static bool ch_run(const ch_target *t, const bench_opts *o, const bench_pack *packs, const char *body, size_t len,
                   const char *file, unsigned run, double out[SIDES]) {
  char prefix[64], desc[128], ref[2][160], sql[1024];
  snprintf(prefix, sizeof prefix, "bench%ld_%u", (long)getpid(), run);
  cs_catalog cat;
  if (ch_open(t, prefix, &cat) == NULL || !lease_take(&cat)) return false;
  cs_clickhouse_table_name(prefix, "descriptors", desc, sizeof desc);
  for (int i = 0; i < 2; i++) {
    snprintf(ref[i], sizeof ref[i], "%s_peer%d", prefix, i);
    /* One server's table of the same columns (a replicated catalog's would share its ZooKeeper path). */
    snprintf(sql, sizeof sql, "CREATE TABLE %s AS %s ENGINE = MergeTree ORDER BY (pack_id, capture_id, version)",
             ref[i], desc);
    if (ch_post(t, sql, NULL, 0) != 200) return false;
  }
  snprintf(sql, sizeof sql, "INSERT INTO %s (%s) FORMAT TabSeparated", ref[0], CS_CATALOG_DESCRIPTOR_COLUMNS);
  for (unsigned turn = 0; turn < 2; turn++) {
    if ((turn + run) % 2 == 0) {
      out[0] = adapter_index(&cat, packs, o->packs, o->per_pack);
      continue;
    }
    double t0 = now_s();
    out[1] = ch_post(t, sql, body, len) == 200 ? now_s() - t0 : -1;
  }
  cat.ops->close(cat.self);
  out[2] = t->tcp_port == 0 ? 0 : client_insert(t, ref[1], file);
  const char *drop[] = {"claims", "descriptors", "inventory", "publishes", "rejected"};
  for (int i = 0; i < 5; i++) {
    cs_clickhouse_table_name(prefix, drop[i], desc, sizeof desc);
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", desc);
    ch_post(t, sql, NULL, 0);
  }
  for (int i = 0; i < 2; i++) {
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", ref[i]);
    ch_post(t, sql, NULL, 0);
  }
  return out[0] > 0 && out[1] > 0 && out[2] >= 0;
}

/* ---- SQLite peer ---------------------------------------------------------- */

static int bind_row(sqlite3_stmt *st, const cs_pack_ref *ref, const cs_pack_record *rec) {
  const cs_pack_meta *m = &rec->meta;
  const cs_pack_text t[12] = {m->capture_id, m->tenant_id, m->experiment_id, m->run_id,
                              m->session_id, m->request_id, m->sequence_id, m->model_id,
                              m->model_revision, m->adapter_revision, m->capture_policy_version, m->hook_name};
  uint8_t shape[4 * CS_PACK_RANK_MAX];
  for (uint32_t i = 0; i < m->rank; i++) memcpy(shape + 4 * i, &m->shape[i], 4);
  sqlite3_reset(st);
  int rc = sqlite3_bind_blob(st, 1, ref->pack_id.bytes, 16, SQLITE_TRANSIENT);
  rc = rc ? rc : sqlite3_bind_int64(st, 2, 1);
  rc = rc ? rc : sqlite3_bind_text(st, 3, ref->key, (int)ref->key_len, SQLITE_TRANSIENT);
  for (int i = 0; i < 12 && rc == SQLITE_OK; i++)
    rc = t[i].bytes == NULL ? sqlite3_bind_null(st, 4 + i)
                            : sqlite3_bind_text(st, 4 + i, t[i].bytes, (int)t[i].len, SQLITE_TRANSIENT);
  const sqlite3_int64 ints[11] = {m->layer_number, m->producer_rank, (sqlite3_int64)m->step_number,
                                  (sqlite3_int64)m->token_start, (sqlite3_int64)m->token_end, m->batch_position,
                                  (sqlite3_int64)m->captured_at_ns, (sqlite3_int64)rec->offset,
                                  (sqlite3_int64)rec->stored_length, (sqlite3_int64)rec->decoded_length, rec->crc32};
  for (int i = 0; i < 6 && rc == SQLITE_OK; i++) rc = sqlite3_bind_int64(st, 16 + i, ints[i]);
  rc = rc ? rc : sqlite3_bind_text(st, 22, cs_dtype_name(m->dtype), -1, SQLITE_STATIC);
  rc = rc ? rc : sqlite3_bind_blob(st, 23, shape, (int)(4 * m->rank), SQLITE_TRANSIENT);
  for (int i = 6; i < 11 && rc == SQLITE_OK; i++) rc = sqlite3_bind_int64(st, 18 + i, ints[i]);
  rc = rc ? rc : sqlite3_step(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The peer: the adapter's descriptor table copied (with its index), one prepared INSERT, one transaction. */
static double sqlite_peer(const char *path, const bench_pack *packs, uint32_t count) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_open(path, &db);
  rc = rc ? rc : sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                                  "CREATE TABLE peer AS SELECT * FROM cs_descriptor_v1 WHERE 0;"
                                  "CREATE INDEX peer_pack ON peer (pack_id, capture_id, version);", NULL, NULL, NULL);
  rc = rc ? rc : sqlite3_prepare_v2(db, "INSERT INTO peer VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
                                        " ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)",
                                    -1, &st, NULL);
  double t0 = now_s();
  rc = rc ? rc : sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
  for (uint32_t i = 0; i < count && rc == SQLITE_OK; i++)
    for (uint32_t r = 0; r < packs[i].ref.record_count && rc == SQLITE_OK; r++) rc = bind_row(st, &packs[i].ref, &packs[i].records[r]);
  rc = rc ? rc : sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  double seconds = now_s() - t0;
  if (rc != SQLITE_OK) fprintf(stderr, "sqlite peer: %s\n", sqlite3_errmsg(db));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rc == SQLITE_OK ? seconds : -1;
}

static bool sqlite_run(const bench_opts *o, const bench_pack *packs, unsigned run, double out[SIDES]) {
  char path[512];
  snprintf(path, sizeof path, "%s/bench-%ld-%u.db", o->target, (long)getpid(), run);
  cs_catalog cat;
  if (cs_sqlite_catalog_open(path, 0, &cat) != CS_E_OK) return false;
  bool taken = lease_take(&cat);
  out[0] = taken ? adapter_index(&cat, packs, o->packs, o->per_pack) : -1;
  cat.ops->close(cat.self);
  out[1] = out[0] > 0 ? sqlite_peer(path, packs, o->packs) : -1;
  out[2] = 0;
  const char *suffix[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    char name[600];
    snprintf(name, sizeof name, "%s%s", path, suffix[i]);
    unlink(name);
  }
  return out[0] > 0 && out[1] > 0;
}

/* ---- driver --------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, unsigned n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(const bench_opts *o, double seconds[SIDES][RUNS_MAX], uint64_t rows) {
  const char *names[SIDES] = {"adapter", strcmp(o->backend, "sqlite") == 0 ? "prepared_insert" : "curl_post",
                              "clickhouse_client"};
  int sides = strcmp(o->backend, "clickhouse") == 0 && o->tcp_port != 0 ? 3 : 2;
  double med[SIDES];
  for (int s = 0; s < sides; s++) med[s] = median(seconds[s], o->runs);
  for (int s = 0; s < sides; s++) {
    printf("median backend=%s side=%s rows=%llu seconds=%.4f rows_per_s=%.0f", o->backend, names[s],
           (unsigned long long)rows, med[s], (double)rows / med[s]);
    if (s == 0)
      for (int p = 1; p < sides; p++) printf(" ratio_vs_%s=%.2f", names[p], med[p] / med[0]);
    printf("\n");
  }
}

int main(int argc, char **argv) {
  bench_opts o;
  if (opts_parse(argc, argv, &o) != 0) return 2;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  bench_pack *packs = calloc(o.packs, sizeof *packs);
  if (packs == NULL) return 1;
  for (uint32_t i = 0; i < o.packs; i++)
    if (!pack_make(&packs[i], i, o.records)) return 1;
  ch_target t = {.tcp_port = o.tcp_port, .cluster = o.cluster, .quorum = o.quorum};
  size_t len = 0;
  char *body = rows_tsv(packs, o.packs, &len);
  if (body == NULL) return 1;
  char file[256];
  snprintf(file, sizeof file, "%s/capstore-bench-catalog-%ld.tsv", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (long)getpid());
  bool clickhouse = strcmp(o.backend, "clickhouse") == 0;
  if (clickhouse) {
    FILE *f = fopen(o.target, "r");
    unsigned port = 0;
    if (f == NULL || fscanf(f, "%u %63s %127s", &port, t.user, t.password) != 3) return usage();
    fclose(f);
    snprintf(t.url, sizeof t.url, "http://127.0.0.1:%u/", port);
    f = fopen(file, "w");
    if (f == NULL || fwrite(body, 1, len, f) != len || fclose(f) != 0) return 1;
  }
  uint64_t rows = (uint64_t)o.packs * o.records;
  printf("backend=%s packs=%u records=%u rows=%llu body_bytes=%zu index_bytes_per_pack=%llu mode=%s cluster=%s "
         "quorum=%u\n",
         o.backend, o.packs, o.records, (unsigned long long)rows, len, (unsigned long long)packs[0].ref.index_bytes,
         o.per_pack ? "per_pack" : "batch", o.cluster != NULL ? o.cluster : "none", o.quorum);
  static double seconds[SIDES][RUNS_MAX];
  for (unsigned run = 0; run < o.runs; run++) {
    double out[SIDES] = {0};
    bool done = clickhouse ? ch_run(&t, &o, packs, body, len, file, run, out) : sqlite_run(&o, packs, run, out);
    if (!done) return 1;
    for (int s = 0; s < SIDES; s++) seconds[s][run] = out[s];
    printf("run=%u adapter_s=%.4f peer_s=%.4f client_s=%.4f\n", run + 1, out[0], out[1], out[2]);
  }
  report(&o, seconds, rows);
  if (clickhouse) unlink(file);
  free(body);
  for (uint32_t i = 0; i < o.packs; i++) {
    free(packs[i].records);
    free(packs[i].text);
  }
  free(packs);
  curl_global_cleanup();
  return 0;
}

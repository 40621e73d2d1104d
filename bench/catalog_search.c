/*
 * capstore-bench-search: SEARCH pages (catalog.h) through a catalog adapter
 * on a catalog of many descriptor rows (docs/performance.md, "Catalog
 * SEARCH"; bench/run_search.sh drives it).
 *
 * usage:
 *   capstore-bench-search clickhouse ENDPOINT_FILE [options]
 *   capstore-bench-search sqlite DIR [options]
 * options: --packs N (1000) --records R (1000) --page P (1000) --runs K (7) --walk
 *
 * Fills fresh tables through the adapter itself: the lease, then N packs of
 * R records (realistic metadata, four tenants, 32 hooks), ten packs an
 * INDEX, each INDEX published at its own version; every 100th pack indexed
 * again at a later version (its older rows hidden), 3 packs rejected. Then
 * times pages of P rows, K times each: without a filter from the start,
 * from the middle pack and from the last; with a filter (one tenant in
 * four, one hook in 32, a step range of a few packs, two capture ids, a
 * value nobody has). With --walk, walks every page without a filter and
 * with the tenant filter and checks the walk saw each visible row once, in
 * order. Prints one line per case: rows, best, median and worst seconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "capstore/clickhouse.h"
#include "capstore/sqlite_catalog.h"

#define RUNS_MAX 31
#define BATCH 10u
#define REJECTED 3u

typedef struct bench_opts {
  const char *backend, *target;
  unsigned packs, records, page, runs;
  bool walk;
} bench_opts;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(void) {
  fprintf(stderr, "usage: capstore-bench-search clickhouse ENDPOINT_FILE | sqlite DIR\n"
                  "       [--packs N] [--records R] [--page P] [--runs K] [--walk]\n");
  return 2;
}

static int opts_parse(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){.packs = 1000, .records = 1000, .page = 1000, .runs = 7};
  if (argc < 3) return usage();
  o->backend = argv[1];
  o->target = argv[2];
  for (int i = 3; i < argc; i++) {
    unsigned *field = NULL;
    if (strcmp(argv[i], "--walk") == 0) o->walk = true;
    else if (strcmp(argv[i], "--packs") == 0) field = &o->packs;
    else if (strcmp(argv[i], "--records") == 0) field = &o->records;
    else if (strcmp(argv[i], "--page") == 0) field = &o->page;
    else if (strcmp(argv[i], "--runs") == 0) field = &o->runs;
    else return usage();
    if (field != NULL && (++i == argc || (*field = (unsigned)strtoul(argv[i], NULL, 10)) == 0)) return usage();
  }
  bool known = strcmp(o->backend, "clickhouse") == 0 || strcmp(o->backend, "sqlite") == 0;
  if (!known || o->packs < 2 * REJECTED || o->records > CS_PACK_RECORDS_MAX || o->runs > RUNS_MAX) return usage();
  return 0;
}

/* ---- the catalog's rows ---------------------------------------------------- */

typedef struct bench_pack {
  cs_pack_ref ref;
  cs_pack_record *records;
  char (*text)[3][64]; /* capture id, request id, hook name of each record */
} bench_pack;

static uint64_t mix(uint64_t x) { /* splitmix64: pack ids spread over the id space, not in index order */
  x += UINT64_C(0x9e3779b97f4a7c15);
  x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

static cs_uuid pack_id_of(uint32_t index) {
  cs_uuid id;
  uint64_t a = mix(index), b = mix(a);
  for (int i = 0; i < 8; i++) id.bytes[i] = (uint8_t)(a >> (8 * i)), id.bytes[8 + i] = (uint8_t)(b >> (8 * i));
  id.bytes[6] = (uint8_t)(0x70 | (id.bytes[6] & 0x0f));
  id.bytes[8] = (uint8_t)(0x80 | (id.bytes[8] & 0x3f));
  return id;
}

static const char *const TENANTS[4] = {"tenant-0042-interp-research", "tenant-0043-evals", "tenant-0044-safety",
                                       "tenant-0045-prod-shadow"};

static void meta_fill(cs_pack_meta *m, char (*text)[64], uint32_t pack, uint32_t r) {
  snprintf(text[0], 64, "cap-%08x-%06u", (unsigned)mix(pack), r);
  snprintf(text[1], 64, "chatcmpl-%08x%08x", pack * 7919u, r * 104729u);
  snprintf(text[2], 64, "model.layers.%u.mlp.output", r % 32);
  *m = (cs_pack_meta){
      .capture_id = cs_pack_text_of(text[0]),
      .tenant_id = cs_pack_text_of(TENANTS[pack % 4]),
      .experiment_id = cs_pack_text_of("exp/2026-11-30/sae-width-131072"),
      .run_id = cs_pack_text_of("run-7c41e9d0b6a84f2e"),
      .session_id = cs_pack_text_of("sess-0190a4c2-5e61-7d3b-9c0f-2b1e4d5c6a7f"),
      .request_id = cs_pack_text_of(text[1]),
      .sequence_id = cs_pack_text_of("seq-3"),
      .model_id = cs_pack_text_of("mistralai/Mixtral-8x22B-Instruct-v0.1"),
      .model_revision = cs_pack_text_of("b5e8d2a1f0c94e7b8a6d5c4b3a29180716f5e4d3"),
      .adapter_revision = cs_pack_text_of(r % 3 == 0 ? "adapter-rev-2026-11-29" : NULL),
      .capture_policy_version = cs_pack_text_of("capture-policy/4.1.0"),
      .hook_name = cs_pack_text_of(text[2]),
      .layer_number = (int32_t)(r % 32),
      .producer_rank = pack % 8,
      .step_number = pack,
      .token_start = 32u * r,
      .token_end = 32u * r + 31u,
      .batch_position = r % 16,
      .dtype = CS_DTYPE_FLOAT16,
      .rank = 3,
      .shape = {1, 32, 6144},
      .captured_at_ns = UINT64_C(1764547200000000000) + 1000u * r,
  };
}

static bool pack_make(bench_pack *p, uint32_t index, uint32_t records) {
  memset(&p->ref, 0, sizeof p->ref);
  p->records = calloc(records == 0 ? 1 : records, sizeof *p->records);
  p->text = calloc(records == 0 ? 1 : records, sizeof *p->text);
  if (p->records == NULL || p->text == NULL) return false;
  p->ref.pack_id = pack_id_of(index);
  char id[CS_UUID_TEXT_LEN + 1], key[256];
  cs_uuid_format(&p->ref.pack_id, id);
  int n = snprintf(key, sizeof key, "capstore/v1/tenant=%s/date=2026-12-01/session=sess-0190a4c2/rank=%u/%s.dmi-pack",
                   TENANTS[index % 4], index % 8, id);
  cs_pack_ref_set_key(&p->ref, key, (size_t)n);
  p->ref.record_count = records;
  p->ref.created_at_ns = UINT64_C(1764547200000000000);
  p->ref.size_bytes = 64u + (uint64_t)records * 393216u + 4096u;
  for (int i = 0; i < 32; i++) p->ref.sha256[i] = (uint8_t)(index * 31u + (uint32_t)i);
  for (uint32_t r = 0; r < records; r++) {
    meta_fill(&p->records[r].meta, p->text[r], index, r);
    p->records[r].offset = 64u + (uint64_t)r * 393216u;
    p->records[r].stored_length = p->records[r].decoded_length = 393216u;
    p->records[r].crc32 = 0x85ebca6bu ^ r;
  }
  return true;
}

static void pack_free(bench_pack *p) {
  free(p->records);
  free(p->text);
}

/* ---- the adapter ------------------------------------------------------------ */

static const cs_uuid LEASE = {{0x01, 0x90, 0xa4, 0xc2, 0x5e, 0x61, 0x7d, 0x3b, 0x9c, 0x0f, 9, 8, 7, 6, 5, 4}};

static bool ok(int rc, const cs_catalog_result *res, const char *what) {
  if (rc == CS_E_OK && res->outcome == CS_OUT_OK) return true;
  fprintf(stderr, "%s: %s %s %s\n", what, cs_strerror(rc), cs_outcome_name(res->outcome), res->detail);
  return false;
}

/* Indexes packs [first, first + count) at version and publishes it. */
static bool index_publish(cs_catalog *cat, const bench_opts *o, uint64_t term, uint64_t version, uint32_t first,
                          uint32_t count) {
  bench_pack packs[BATCH];
  cs_index_pack batch[BATCH];
  bool done = true;
  uint32_t made = 0;
  for (; made < count && done; made++) {
    done = pack_make(&packs[made], first + made, o->records);
    batch[made] = (cs_index_pack){&packs[made].ref, packs[made].records, o->records};
  }
  cs_catalog_result res;
  if (done) done = ok(cat->ops->index(cat->self, &LEASE, 0, version, batch, count, &res), &res, "index");
  if (done) done = ok(cat->ops->publish(cat->self, &LEASE, 0, version, term, count, &res), &res, "publish");
  for (uint32_t i = 0; i < made; i++) pack_free(&packs[i]);
  return done;
}

/* The lease, every pack, the re-indexed ones, the rejected ones. Returns the watermark, 0 on a failure. */
static uint64_t catalog_fill(cs_catalog *cat, const bench_opts *o) {
  cs_catalog_result res;
  cs_cat_head head;
  cs_claims claims;
  if (!ok(cat->ops->schema_ensure(cat->self, &res), &res, "schema") ||
      !ok(cat->ops->head(cat->self, &LEASE, &head, &res), &res, "head") ||
      !ok(cat->ops->claim(cat->self, &LEASE, head.head_term, 3600 * CS_SEC_NS, &res), &res, "claim") ||
      !ok(cat->ops->read_claims(cat->self, &LEASE, head.head_term + 1, &claims, &res), &res, "read_claims") ||
      !claims.sole_mine)
    return 0;
  uint64_t term = head.head_term + 1, version = head.watermark;
  for (uint32_t first = 0; first < o->packs; first += BATCH)
    if (!index_publish(cat, o, term, ++version, first, o->packs - first < BATCH ? o->packs - first : BATCH)) return 0;
  for (uint32_t p = 37; p < o->packs; p += 100)
    if (!index_publish(cat, o, term, ++version, p, 1)) return 0;
  cs_uuid rejected[REJECTED];
  for (uint32_t i = 0; i < REJECTED; i++) rejected[i] = pack_id_of(o->packs / 2 + i);
  if (!ok(cat->ops->reject(cat->self, &LEASE, 0, rejected, REJECTED, &res), &res, "reject")) return 0;
  return version;
}

/* ---- pages ------------------------------------------------------------------ */

typedef struct bench_case {
  const char *name;
  cs_search_filter filter;
  bool has_after;
  cs_search_key after;
} bench_case;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static bool page(cs_catalog *cat, uint64_t watermark, const bench_case *c, const cs_search_key *after,
                 cs_search_row *rows, uint32_t capacity, uint32_t *count, double *seconds) {
  cs_catalog_result res;
  double t0 = now_s();
  int rc = cat->ops->search(cat->self, watermark, &c->filter, after, rows, capacity, count, &res);
  *seconds = now_s() - t0;
  return ok(rc, &res, c->name);
}

static bool time_case(cs_catalog *cat, const bench_opts *o, uint64_t watermark, const bench_case *c,
                      cs_search_row *rows) {
  double s[RUNS_MAX];
  uint32_t count = 0;
  for (unsigned run = 0; run < o->runs; run++)
    if (!page(cat, watermark, c, c->has_after ? &c->after : NULL, rows, o->page, &count, &s[run])) return false;
  qsort(s, o->runs, sizeof s[0], cmp_double);
  printf("backend=%s case=\"%s\" rows=%u best_s=%.4f median_s=%.4f worst_s=%.4f\n", o->backend, c->name, count, s[0],
         s[o->runs / 2], s[o->runs - 1]);
  return true;
}

/* Every page to the end: each row once, in order. */
static bool walk(cs_catalog *cat, const bench_opts *o, uint64_t watermark, const bench_case *c, cs_search_row *rows,
                 uint64_t want) {
  cs_search_key key, last;
  bool have_last = false;
  uint64_t total = 0;
  unsigned pages = 0;
  double t0 = now_s(), worst = 0;
  for (;;) {
    uint32_t count = 0;
    double s = 0;
    if (!page(cat, watermark, c, pages == 0 ? NULL : &key, rows, o->page, &count, &s)) return false;
    worst = s > worst ? s : worst;
    pages++;
    for (uint32_t i = 0; i < count; i++) {
      cs_search_key here;
      if (cs_search_key_of(&rows[i], &here) != CS_E_OK) return false;
      int order = !have_last ? 1 : cs_uuid_compare(&here.pack_id, &last.pack_id);
      if (order == 0) order = here.offset > last.offset ? 1 : here.offset < last.offset ? -1 : 0;
      if (order == 0) {
        size_t n = here.capture_id_len < last.capture_id_len ? here.capture_id_len : last.capture_id_len;
        order = memcmp(here.capture_id, last.capture_id, n);
        if (order == 0) order = here.capture_id_len > last.capture_id_len ? 1 : -1;
      }
      if (order <= 0) {
        fprintf(stderr, "%s: walk out of order at row %llu\n", c->name, (unsigned long long)total + i);
        return false;
      }
      last = here;
      have_last = true;
    }
    total += count;
    if (count < o->page) break;
    key = last;
  }
  double all = now_s() - t0;
  printf("backend=%s case=\"walk: %s\" pages=%u rows=%llu seconds=%.1f mean_page_s=%.4f worst_page_s=%.4f%s\n",
         o->backend, c->name, pages, (unsigned long long)total, all, all / pages, worst,
         total == want ? "" : " MISMATCH");
  return total == want;
}

static int run(cs_catalog *cat, const bench_opts *o) {
  double t0 = now_s();
  uint64_t watermark = catalog_fill(cat, o);
  if (watermark == 0) return 1;
  uint64_t visible = (uint64_t)(o->packs - REJECTED) * o->records;
  printf("backend=%s packs=%u records=%u descriptor_rows=%llu visible_rows=%llu fill_s=%.1f\n", o->backend, o->packs,
         o->records, (unsigned long long)((uint64_t)o->packs * o->records + (uint64_t)((o->packs + 62) / 100) * o->records),
         (unsigned long long)visible, now_s() - t0);
  cs_search_row *rows = calloc(o->page, sizeof *rows);
  if (rows == NULL) return 1;
  /* The middle and the last pack in id order (a key of a pack id, offset 0 and an empty capture id). */
  cs_uuid *ids = calloc(o->packs, sizeof *ids);
  if (ids == NULL) return 1;
  for (uint32_t i = 0; i < o->packs; i++) ids[i] = pack_id_of(i);
  for (uint32_t i = 1; i < o->packs; i++) /* insertion sort: a one-off for the bench */
    for (uint32_t j = i; j > 0 && cs_uuid_compare(&ids[j], &ids[j - 1]) < 0; j--) {
      cs_uuid t = ids[j];
      ids[j] = ids[j - 1], ids[j - 1] = t;
    }
  static bench_case cases[9];
  memset(cases, 0, sizeof cases);
  cases[0].name = "no filter, first page";
  cases[1].name = "no filter, from the middle pack";
  cases[1].has_after = true, cases[1].after.pack_id = ids[o->packs / 2];
  cases[2].name = "no filter, from the last pack";
  cases[2].has_after = true, cases[2].after.pack_id = ids[o->packs - 1];
  cases[3].name = "tenant (1 in 4), first page";
  cases[3].filter.tenant_id = cs_pack_text_of(TENANTS[1]);
  static const cs_pack_text hooks[1] = {{"model.layers.3.mlp.output", 25}};
  cases[4].name = "hook (1 in 32), first page";
  cases[4].filter.hook_names = hooks, cases[4].filter.hook_name_count = 1;
  cases[5].name = "steps of 5 packs, first page";
  cases[5].filter.has_step = true, cases[5].filter.step_min = 100, cases[5].filter.step_max = 104;
  static char id_text[2][64];
  static cs_pack_text capture_ids[2];
  snprintf(id_text[0], 64, "cap-%08x-%06u", (unsigned)mix(7), 5u % o->records);
  snprintf(id_text[1], 64, "cap-%08x-%06u", (unsigned)mix(o->packs - 1), 0u);
  capture_ids[0] = cs_pack_text_of(id_text[0]), capture_ids[1] = cs_pack_text_of(id_text[1]);
  cases[6].name = "two capture ids";
  cases[6].filter.capture_ids = capture_ids, cases[6].filter.capture_id_count = 2;
  cases[7].name = "a tenant nobody has";
  cases[7].filter.tenant_id = cs_pack_text_of("tenant-none");
  int rc = 0;
  for (int i = 0; i < 8 && rc == 0; i++)
    if (!time_case(cat, o, watermark, &cases[i], rows)) rc = 1;
  if (rc == 0 && o->walk) {
    uint64_t tenant_rows = 0;
    for (uint32_t p = 0; p < o->packs; p++)
      if (p % 4 == 1 && !(p >= o->packs / 2 && p < o->packs / 2 + REJECTED)) tenant_rows += o->records;
    if (!walk(cat, o, watermark, &cases[0], rows, visible) || !walk(cat, o, watermark, &cases[3], rows, tenant_rows))
      rc = 1;
  }
  free(ids);
  free(rows);
  return rc;
}

int main(int argc, char **argv) {
  bench_opts o;
  if (opts_parse(argc, argv, &o) != 0) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0); /* one line a case, as it is measured */
  curl_global_init(CURL_GLOBAL_DEFAULT);
  cs_catalog cat;
  int rc = 1;
  if (strcmp(o.backend, "clickhouse") == 0) {
    FILE *f = fopen(o.target, "r");
    unsigned port = 0;
    char user[64], password[128], url[64], prefix[64];
    if (f == NULL || fscanf(f, "%u %63s %127s", &port, user, password) != 3) return usage();
    fclose(f);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", port);
    snprintf(prefix, sizeof prefix, "bench_search_%ld_%ld", (long)time(NULL), (long)getpid());
    cs_clickhouse_config cfg = {.url = url, .user = user, .password = password, .table_prefix = prefix,
                                .holder = "bench", .request_timeout_ns = 120 * CS_SEC_NS, .allow_insecure = true};
    if (cs_clickhouse_open(&cfg, &cat) != CS_E_OK) return 1;
  } else {
    char path[512];
    snprintf(path, sizeof path, "%s/search-%ld.db", o.target, (long)getpid());
    if (cs_sqlite_catalog_open(path, 5000, &cat) != CS_E_OK) return 1;
  }
  rc = run(&cat, &o);
  cat.ops->close(cat.self);
  curl_global_cleanup();
  return rc;
}

/*
 * Live tests of the ClickHouse catalog adapter against a real server started
 * by the ctest fixture (tools/servers/clickhouse.sh). argv[1] names the
 * fixture's endpoint file ("http_port user password"). Each primitive is
 * proved on the server, next to its refused twin: the lease and its
 * contested head, the fence, visibility through publishes, rejected rows,
 * escaping, and the classification of real error answers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "capstore/clickhouse.h"
#include "tcp_switch.h"

#include <pthread.h>

static char g_url[256];
static char g_user[64];
static char g_password[128];
static unsigned g_prefix_seq;
static char g_prefix[64];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static cs_uuid uuid_n(uint8_t n) {
  cs_uuid id;
  memset(&id, 0, sizeof id);
  id.bytes[0] = 0x01;
  id.bytes[6] = 0x70;
  id.bytes[15] = n;
  return id;
}

/* A fresh adapter on fresh tables (a new prefix per test). */
static cs_catalog open_catalog_capped(const char *prefix, uint64_t query_bytes_max, uint64_t answer_bytes_max) {
  cs_clickhouse_config cfg = {0};
  cfg.answer_bytes_max = answer_bytes_max;
  cfg.url = g_url;
  cfg.user = g_user;
  cfg.password = g_password;
  cfg.table_prefix = prefix;
  cfg.holder = "host'\\:1";
  cfg.connect_timeout_ns = 2 * CS_SEC_NS;
  cfg.request_timeout_ns = 10 * CS_SEC_NS;
  cfg.query_bytes_max = query_bytes_max;
  cfg.allow_insecure = true; /* the fixture's server listens on loopback, plain HTTP */
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_OK);
  return cat;
}

static cs_catalog open_catalog(const char *prefix, uint64_t query_bytes_max) {
  return open_catalog_capped(prefix, query_bytes_max, 0);
}

static cs_catalog fresh(void) {
  snprintf(g_prefix, sizeof g_prefix, "t%ld_%ld_%u", (long)time(NULL), (long)getpid(), ++g_prefix_seq);
  cs_catalog cat = open_catalog(g_prefix, 0);
  cs_catalog_result res;
  assert_int_equal(cat.ops->schema_ensure(cat.self, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(cat.ops->schema_ensure(cat.self, &res), CS_E_OK); /* idempotent */
  assert_int_equal(res.outcome, CS_OUT_OK);
  return cat;
}

static cs_cat_head head_of(cs_catalog *cat, const cs_uuid *lease) {
  cs_cat_head head;
  cs_catalog_result res;
  assert_int_equal(cat->ops->head(cat->self, lease, &head, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  return head;
}

static cs_claims claims_of(cs_catalog *cat, const cs_uuid *lease, uint64_t term) {
  cs_claims claims;
  cs_catalog_result res;
  assert_int_equal(cat->ops->read_claims(cat->self, lease, term, &claims, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  return claims;
}

static void claim_ok(cs_catalog *cat, const cs_uuid *lease, uint64_t base, uint64_t ttl_ns) {
  cs_catalog_result res;
  assert_int_equal(cat->ops->claim(cat->self, lease, base, ttl_ns, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

static void publish_ok(cs_catalog *cat, const cs_uuid *lease, uint64_t version, uint64_t term) {
  cs_catalog_result res;
  assert_int_equal(cat->ops->publish(cat->self, lease, 0, version, term, 1, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fprintf(stderr, "publish: %s\n", res.detail);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

/* The full name of one of the current test's tables. */
static const char *table(const char *name) {
  static char out[128];
  assert_int_equal(cs_clickhouse_table_name(g_prefix, name, out, sizeof out), CS_E_OK);
  return out;
}

typedef struct raw_body {
  char text[256];
  size_t len;
} raw_body;

static size_t raw_on_body(char *ptr, size_t size, size_t nmemb, void *user) {
  raw_body *b = user;
  size_t n = size * nmemb;
  size_t room = sizeof b->text - 1 - b->len;
  memcpy(b->text + b->len, ptr, n < room ? n : room);
  b->len += n < room ? n : room;
  b->text[b->len] = '\0';
  return n;
}

/* Sends one raw statement (test setup and inspection only: what the protocol cannot do or show alone). */
static void raw_sql_into(const char *sql, raw_body *body) {
  CURL *c = curl_easy_init();
  assert_non_null(c);
  struct curl_slist *h = NULL;
  char line[256];
  snprintf(line, sizeof line, "X-ClickHouse-User: %s", g_user);
  h = curl_slist_append(h, line);
  snprintf(line, sizeof line, "X-ClickHouse-Key: %s", g_password);
  h = curl_slist_append(h, line);
  curl_easy_setopt(c, CURLOPT_URL, g_url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, sql);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, raw_on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
  assert_int_equal(curl_easy_perform(c), CURLE_OK);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) fail_msg("HTTP %ld: %s", status, body->text);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
}

static void raw_sql(const char *sql) {
  raw_body body = {{0}, 0};
  raw_sql_into(sql, &body);
}

/* The one unsigned number a raw SELECT answers. */
static uint64_t raw_u64(const char *sql) {
  raw_body body = {{0}, 0};
  raw_sql_into(sql, &body);
  assert_true(body.len >= 2 && body.text[body.len - 1] == '\n');
  body.text[body.len - 1] = '\0';
  uint64_t value = 0;
  assert_int_equal(cs_clickhouse_parse_u64(body.text, &value), CS_E_OK);
  return value;
}

/* How many rows of table `name` (of the current test) belong to pack id. */
static uint64_t rows_of(const char *name, const cs_uuid *id) {
  char text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(id, text);
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT count() FROM %s WHERE pack_id = '%s'", table(name), text);
  return raw_u64(sql);
}


/* ---- the lease ----------------------------------------------------------- */

static void test_lease_claim_and_refused_twin(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1), b = uuid_n(2);
  cs_cat_head h = head_of(&cat, &a);
  assert_int_equal(h.head_term, 0);
  assert_true(h.head_free);
  assert_int_equal(h.watermark, 0);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  cs_claims c = claims_of(&cat, &a, 1);
  assert_int_equal(c.claim_count, 1);
  assert_true(c.sole_mine);
  assert_false(claims_of(&cat, &b, 1).sole_mine);
  h = head_of(&cat, &b);
  assert_int_equal(h.head_term, 1);
  assert_false(h.head_free); /* a live claim of another */
  assert_true(h.busy_for_ns > 28 * CS_SEC_NS && h.busy_for_ns <= 31 * CS_SEC_NS); /* its TTL, by whole seconds */
  assert_true(head_of(&cat, &a).head_free); /* all ours */
  assert_int_equal(head_of(&cat, &a).busy_for_ns, 0);
  claim_ok(&cat, &b, 0, 30 * CS_SEC_NS);   /* stale base: a no-op */
  claim_ok(&cat, &b, 1, 30 * CS_SEC_NS);   /* head busy: a no-op */
  assert_int_equal(head_of(&cat, &b).head_term, 1);
  assert_int_equal(claims_of(&cat, &b, 2).claim_count, 0);
  claim_ok(&cat, &a, 1, 30 * CS_SEC_NS); /* renewal by the holder */
  assert_true(claims_of(&cat, &a, 2).sole_mine);
  cat.ops->close(cat.self);
}

static void test_lease_expiry_and_release(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1), b = uuid_n(2);
  claim_ok(&cat, &a, 0, CS_MS_NS); /* expires within the server's second */
  sleep_ms(1100);
  assert_true(head_of(&cat, &b).head_free);
  assert_false(claims_of(&cat, &a, 1).sole_mine); /* expired */
  claim_ok(&cat, &b, 1, 30 * CS_SEC_NS);
  assert_true(claims_of(&cat, &b, 2).sole_mine);
  cs_catalog_result res;
  assert_int_equal(cat.ops->release(cat.self, &a, 2, 200 * CS_MS_NS, &res), CS_E_OK); /* not ours: a no-op */
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(head_of(&cat, &a).head_term, 2);
  assert_int_equal(cat.ops->release(cat.self, &b, 2, 1500 * CS_MS_NS, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  cs_cat_head h = head_of(&cat, &a);
  assert_int_equal(h.head_term, 3); /* the tombstone: others kept out for the 1.5 s margin (over a server second) */
  assert_false(h.head_free);
  sleep_ms(3600); /* the margin, the tick the adapter adds, and the server's second */
  h = head_of(&cat, &a);
  assert_true(h.head_free);
  assert_false(claims_of(&cat, &b, 3).sole_mine);
  claim_ok(&cat, &a, 3, 30 * CS_SEC_NS); /* no TTL to wait */
  assert_true(claims_of(&cat, &a, 4).sole_mine);
  cat.ops->close(cat.self);
}

/* ---- the fence ----------------------------------------------------------- */

static void test_fence_holder_writes_others_do_not(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1), b = uuid_n(2);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  publish_ok(&cat, &b, 1, 1); /* not the holder: nothing */
  assert_int_equal(head_of(&cat, &a).watermark, 0);
  cs_catalog_result res;
  assert_int_equal(cat.ops->publish(cat.self, &a, 60 * CS_SEC_NS, 1, 1, 1, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(head_of(&cat, &a).watermark, 0); /* the claim does not outlive now + margin */
  publish_ok(&cat, &a, 1, 1);
  assert_int_equal(head_of(&cat, &a).watermark, 1);
  cat.ops->close(cat.self);
}

static void test_fence_contested_head_fences_both(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1), b = uuid_n(2);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  publish_ok(&cat, &a, 1, 1);
  assert_int_equal(head_of(&cat, &a).watermark, 1);
  /* Two claimants that both saw term 0 free: B's claim landed at term 1 too. */
  char sql[512];
  snprintf(sql, sizeof sql,
           "INSERT INTO %s (term, lease_id, holder, acquired_at_ns, expires_at_ns) SELECT 1, "
           "'01000000-0000-7000-0000-000000000002', 'b', toUInt64(now()) * 1000000000, "
           "toUInt64(now()) * 1000000000 + 30000000000 FROM system.one",
           table("claims"));
  raw_sql(sql);
  assert_int_equal(claims_of(&cat, &a, 1).claim_count, 2);
  assert_false(claims_of(&cat, &a, 1).sole_mine);
  assert_false(claims_of(&cat, &b, 1).sole_mine);
  publish_ok(&cat, &a, 2, 1);
  publish_ok(&cat, &b, 3, 1);
  assert_int_equal(head_of(&cat, &a).watermark, 1); /* both fenced out */
  assert_false(head_of(&cat, &a).head_free);        /* blocked until all its claims expire */
  assert_false(head_of(&cat, &b).head_free);
  cs_catalog_result res;
  assert_int_equal(cat.ops->reject(cat.self, &a, 0, &a, 1, &res), CS_E_OK);
  bool held = true, rejected = true;
  assert_int_equal(cat.ops->committed(cat.self, &a, 1, &held, &rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_false(rejected);
  cat.ops->close(cat.self);
}

/* ---- index, publish, visibility ------------------------------------------ */

typedef struct test_pack {
  cs_pack_ref ref;
  cs_pack_record records[2];
  uint32_t shape[3];
} test_pack;

static void make_pack(test_pack *p, uint8_t n, const char *model_revision) {
  memset(p, 0, sizeof *p);
  p->ref.pack_id = uuid_n(n);
  char key[128];
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&p->ref.pack_id, id);
  snprintf(key, sizeof key, "cat/x'); DROP TABLE y; --\\/%s.dmi-pack", id);
  assert_int_equal(cs_pack_ref_set_key(&p->ref, key, strlen(key)), CS_E_OK);
  p->ref.size_bytes = 4096;
  p->ref.record_count = 2;
  p->ref.created_at_ns = UINT64_C(1700000000000000000);
  for (int i = 0; i < 32; i++) p->ref.sha256[i] = (uint8_t)(i * 7);
  for (int r = 0; r < 2; r++) {
    cs_pack_meta *m = &p->records[r].meta;
    m->capture_id = cs_pack_text_of(r == 0 ? "cap-0" : "cap-1\t\n'\\\xc3\xa9");
    m->tenant_id = cs_pack_text_of("tenant");
    m->experiment_id = cs_pack_text_of("exp");
    m->run_id = cs_pack_text_of("run");
    m->session_id = cs_pack_text_of("session");
    m->request_id = cs_pack_text_of("req");
    m->sequence_id = cs_pack_text_of("");
    m->model_id = cs_pack_text_of("model");
    m->model_revision = cs_pack_text_of(model_revision);
    m->adapter_revision = cs_pack_text_of(r == 0 ? NULL : "\\N");
    m->capture_policy_version = cs_pack_text_of("v1");
    m->hook_name = cs_pack_text_of("hook");
    m->layer_number = r == 0 ? -1 : 2147483647;
    m->producer_rank = UINT32_MAX;
    m->step_number = UINT64_MAX;
    m->token_start = 3;
    m->token_end = 9;
    m->batch_position = 4;
    m->dtype = r == 0 ? CS_DTYPE_BFLOAT16 : CS_DTYPE_FLOAT64;
    m->rank = r == 0 ? 0 : 3;
    m->shape[0] = 2;
    m->shape[1] = 2147483647;
    m->shape[2] = 0;
    m->captured_at_ns = 12345;
    p->records[r].offset = 64 + 64 * (uint64_t)r;
    p->records[r].stored_length = 2;
    p->records[r].decoded_length = 2;
    p->records[r].crc32 = UINT32_MAX - (uint32_t)r;
  }
}

static void index_ok(cs_catalog *cat, const cs_uuid *lease, uint64_t version, const test_pack *p) {
  cs_index_pack ip = {&p->ref, p->records, 2};
  cs_catalog_result res;
  assert_int_equal(cat->ops->index(cat->self, lease, 0, version, &ip, 1, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("index: %s: %s", cs_outcome_name(res.outcome), res.detail);
}

static void assert_text(cs_pack_text got, cs_pack_text want) {
  if (want.bytes == NULL) {
    assert_null(got.bytes);
    return;
  }
  assert_non_null(got.bytes);
  assert_int_equal(got.len, want.len);
  assert_memory_equal(got.bytes, want.bytes, want.len);
}

static void assert_row(const cs_descriptor_row *row, const test_pack *p, int r, uint64_t version) {
  const cs_pack_meta *g = &row->record.meta, *w = &p->records[r].meta;
  assert_true(cs_uuid_equal(&row->pack_id, &p->ref.pack_id));
  assert_string_equal(row->key, p->ref.key);
  assert_text(g->capture_id, w->capture_id);
  assert_text(g->model_revision, w->model_revision);
  assert_text(g->adapter_revision, w->adapter_revision);
  assert_text(g->sequence_id, w->sequence_id);
  assert_int_equal(g->layer_number, w->layer_number);
  assert_int_equal(g->producer_rank, w->producer_rank);
  assert_true(g->step_number == w->step_number);
  assert_int_equal(g->dtype, w->dtype);
  assert_int_equal(g->rank, w->rank);
  for (uint32_t d = 0; d < w->rank; d++) assert_int_equal(g->shape[d], w->shape[d]);
  assert_int_equal(row->record.offset, p->records[r].offset);
  assert_int_equal(row->record.crc32, p->records[r].crc32);
  assert_int_equal(row->version, version);
}

static uint32_t read_rows(cs_catalog *cat, uint64_t watermark, const cs_uuid *id, cs_descriptor_row *rows) {
  uint32_t count = 99;
  cs_catalog_result res;
  assert_int_equal(cat->ops->read_descriptors(cat->self, watermark, id, rows, 4, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  return count;
}

static void committed_of(cs_catalog *cat, const cs_uuid *id, bool *held, bool *rejected) {
  cs_catalog_result res;
  assert_int_equal(cat->ops->committed(cat->self, id, 1, held, rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

static void test_index_publish_visibility(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1), b = uuid_n(2);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack p1, p2;
  make_pack(&p1, 10, "rev-1");
  index_ok(&cat, &a, 1, &p1);
  bool held = true, rejected = true;
  committed_of(&cat, &p1.ref.pack_id, &held, &rejected);
  assert_false(held); /* not published yet */
  assert_false(rejected);
  static cs_descriptor_row rows[4];
  assert_int_equal(read_rows(&cat, head_of(&cat, &a).watermark, &p1.ref.pack_id, rows), 0);
  publish_ok(&cat, &a, 1, 1);
  committed_of(&cat, &p1.ref.pack_id, &held, &rejected);
  assert_true(held);
  assert_int_equal(read_rows(&cat, 1, &p1.ref.pack_id, rows), 2);
  assert_row(&rows[0], &p1, 0, 1);
  assert_row(&rows[1], &p1, 1, 1);
  /* Re-indexing at version 2 shows no duplicates; watermark 1 still sees version 1. */
  make_pack(&p2, 10, "rev-2");
  index_ok(&cat, &a, 2, &p2);
  publish_ok(&cat, &a, 2, 1);
  assert_int_equal(read_rows(&cat, 1, &p1.ref.pack_id, rows), 2);
  assert_row(&rows[0], &p1, 0, 1);
  assert_int_equal(read_rows(&cat, 2, &p1.ref.pack_id, rows), 2);
  assert_row(&rows[0], &p2, 0, 2);
  assert_row(&rows[1], &p2, 1, 2);
  /* A stale holder's index does nothing. */
  static test_pack p3;
  make_pack(&p3, 11, "rev-1");
  index_ok(&cat, &b, 3, &p3);
  publish_ok(&cat, &a, 3, 1);
  committed_of(&cat, &p3.ref.pack_id, &held, &rejected);
  assert_false(held);
  assert_int_equal(read_rows(&cat, 3, &p3.ref.pack_id, rows), 0);
  cat.ops->close(cat.self);
}

static void test_descriptors_without_inventory_are_invisible(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack p;
  make_pack(&p, 12, "rev-1");
  index_ok(&cat, &a, 1, &p);
  char sql[256];
  snprintf(sql, sizeof sql, "ALTER TABLE %s DELETE WHERE 1", table("inventory"));
  raw_sql(sql); /* as if the inventory insert had been fenced out */
  sleep_ms(300);
  publish_ok(&cat, &a, 1, 1);
  static cs_descriptor_row rows[4];
  assert_int_equal(read_rows(&cat, 1, &p.ref.pack_id, rows), 0);
  bool held = true, rejected = true;
  committed_of(&cat, &p.ref.pack_id, &held, &rejected);
  assert_false(held);
  cat.ops->close(cat.self);
}

/* A stale holder's INDEX lands its descriptor rows (unfenced) but no inventory row: nobody reads them. */
static void test_stale_holder_rows_are_orphans(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1), b = uuid_n(2);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack stale, mine;
  make_pack(&stale, 14, "rev-stale");
  make_pack(&mine, 15, "rev-1");
  index_ok(&cat, &b, 1, &stale); /* b holds nothing: OK, and no inventory row */
  index_ok(&cat, &a, 1, &mine);
  assert_int_equal(rows_of("descriptors", &stale.ref.pack_id), 2); /* the orphans are there */
  assert_int_equal(rows_of("inventory", &stale.ref.pack_id), 0);
  publish_ok(&cat, &a, 1, 1);
  static cs_descriptor_row rows[4];
  assert_int_equal(read_rows(&cat, 1, &stale.ref.pack_id, rows), 0);
  assert_int_equal(read_rows(&cat, UINT64_MAX, &stale.ref.pack_id, rows), 0);
  bool held[2] = {true, true}, rejected[2] = {true, true};
  cs_uuid ids[2] = {stale.ref.pack_id, mine.ref.pack_id};
  cs_catalog_result res;
  assert_int_equal(cat.ops->committed(cat.self, ids, 2, held, rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_false(held[0]); /* COMMITTED goes by inventory: the orphans do not count */
  assert_true(held[1]);
  assert_int_equal(read_rows(&cat, 1, &mine.ref.pack_id, rows), 2);
  /*
   * The holder indexing the same pack later, at the version of more orphans
   * of it (a stale holder's rows at the version the holder's round uses),
   * shows each capture once. (At version 1, now published, the holder's
   * INDEX would be late rows and refused: test_late_rows_refused.)
   */
  index_ok(&cat, &b, 2, &stale);
  index_ok(&cat, &a, 2, &stale);
  assert_int_equal(rows_of("descriptors", &stale.ref.pack_id), 6);
  publish_ok(&cat, &a, 2, 1);
  assert_int_equal(read_rows(&cat, 2, &stale.ref.pack_id, rows), 2);
  assert_row(&rows[0], &stale, 0, 2);
  assert_row(&rows[1], &stale, 1, 2);
  cat.ops->close(cat.self);
}

/* Every text column and the key through the TabSeparated body and back through READ_DESCRIPTORS. */
static void test_escaping_round_trip(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack p;
  make_pack(&p, 16, "rev\r\n\t'\\\\N");
  static const char *const values[11] = {
      "a'b", "back\\slash", "tab\there", "new\nline", "cr\rhere", "utf8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
      "", "\\N", "\\\\N\\", "' OR 1=1 --", "\b\f\x01\x7f"};
  for (int r = 0; r < 2; r++) {
    cs_pack_meta *m = &p.records[r].meta;
    cs_pack_text *texts[12] = {&m->tenant_id, &m->experiment_id, &m->run_id, &m->session_id,
                               &m->request_id, &m->sequence_id, &m->model_id, &m->model_revision,
                               &m->capture_policy_version, &m->adapter_revision, &m->hook_name, &m->capture_id};
    for (int i = 0; i < 11; i++) *texts[i] = cs_pack_text_of(values[i]);
    if (r == 0) m->adapter_revision = cs_pack_text_of(NULL);
  }
  index_ok(&cat, &a, 1, &p);
  publish_ok(&cat, &a, 1, 1);
  static cs_descriptor_row rows[4];
  assert_int_equal(read_rows(&cat, 1, &p.ref.pack_id, rows), 2);
  for (int r = 0; r < 2; r++) {
    const cs_pack_meta *g = &rows[r].record.meta, *w = &p.records[r].meta;
    assert_string_equal(rows[r].key, p.ref.key);
    const cs_pack_text got[12] = {g->capture_id, g->tenant_id, g->experiment_id, g->run_id,
                                  g->session_id, g->request_id, g->sequence_id, g->model_id,
                                  g->model_revision, g->adapter_revision, g->capture_policy_version, g->hook_name};
    const cs_pack_text want[12] = {w->capture_id, w->tenant_id, w->experiment_id, w->run_id,
                                   w->session_id, w->request_id, w->sequence_id, w->model_id,
                                   w->model_revision, w->adapter_revision, w->capture_policy_version, w->hook_name};
    for (int i = 0; i < 12; i++) assert_text(got[i], want[i]);
    assert_row(&rows[r], &p, r, 1);
  }
  assert_null(rows[0].record.meta.adapter_revision.bytes); /* NULL, not the text \N */
  assert_non_null(rows[1].record.meta.adapter_revision.bytes);
  cat.ops->close(cat.self);
}

/* ---- a pack of realistic size -------------------------------------------- */

#define BIG_RECORDS 4096u

typedef struct big_pack {
  cs_pack_ref ref;
  cs_pack_record records[BIG_RECORDS];
  char capture[BIG_RECORDS][64];
  char hook[BIG_RECORDS][64];
} big_pack;

/* 4,096 records with metadata of production length: long ids, a model path, a git revision, rank-3 shapes. */
static void make_big_pack(big_pack *p, uint8_t n) {
  memset(&p->ref, 0, sizeof p->ref);
  p->ref.pack_id = uuid_n(n);
  char id[CS_UUID_TEXT_LEN + 1], key[256];
  cs_uuid_format(&p->ref.pack_id, id);
  snprintf(key, sizeof key, "capstore/v1/tenant=acme-research/date=2026-11-30/session=s-7f3a/rank=3/%s.dmi-pack", id);
  assert_int_equal(cs_pack_ref_set_key(&p->ref, key, strlen(key)), CS_E_OK);
  p->ref.size_bytes = UINT64_C(1) << 30;
  p->ref.record_count = BIG_RECORDS;
  p->ref.created_at_ns = UINT64_C(1764460800000000000);
  for (uint32_t r = 0; r < BIG_RECORDS; r++) {
    cs_pack_meta *m = &p->records[r].meta;
    memset(&p->records[r], 0, sizeof p->records[r]);
    snprintf(p->capture[r], sizeof p->capture[r], "018f2c1e-9b7a-7c3d-a1e4-5f6b7c8d9e0f:%u:%u", r / 80, r % 80);
    snprintf(p->hook[r], sizeof p->hook[r], "model.layers.%u.mlp.down_proj.output", r % 80);
    m->capture_id = cs_pack_text_of(p->capture[r]);
    m->tenant_id = cs_pack_text_of("acme-research");
    m->experiment_id = cs_pack_text_of("sae-sweep-2026-11-30-width-65536-l1-3e-4");
    m->run_id = cs_pack_text_of("run-5f0c3e2a9d8b47c1a6e2f3b4c5d6e7f8");
    m->session_id = cs_pack_text_of("session-018f2c1e-9b7a-7c3d-a1e4-5f6b7c8d9e0f");
    m->request_id = cs_pack_text_of("chatcmpl-9f8e7d6c5b4a39281706f5e4d3c2b1a0");
    m->sequence_id = cs_pack_text_of("seq-000000000042");
    m->model_id = cs_pack_text_of("meta-llama/Llama-3.1-70B-Instruct");
    m->model_revision = cs_pack_text_of("945c8663693130f8be2ee66210e062158b2a9693");
    m->adapter_revision = cs_pack_text_of(r % 2 == 0 ? NULL : "lora-r16-alpha32-c0ffee");
    m->capture_policy_version = cs_pack_text_of("policy-v3.2.1");
    m->hook_name = cs_pack_text_of(p->hook[r]);
    m->layer_number = (int32_t)(r % 80);
    m->producer_rank = 3;
    m->step_number = 1000 + r / 80;
    m->token_start = 17 * (uint64_t)r;
    m->token_end = 17 * (uint64_t)r + 16;
    m->batch_position = r % 8;
    m->dtype = CS_DTYPE_BFLOAT16;
    m->rank = 3;
    m->shape[0] = 1;
    m->shape[1] = 17;
    m->shape[2] = 8192;
    m->captured_at_ns = UINT64_C(1764460800000000000) + r;
    p->records[r].offset = 64 + (uint64_t)r * 278528;
    p->records[r].stored_length = 278528;
    p->records[r].decoded_length = 278528;
    p->records[r].crc32 = 0x9e3779b9u * r;
  }
}

/*
 * The case that used to be refused (issue 11): one 4,096-record pack in ONE
 * INDEX call with the adapter's default settings. Its rows are about 2.6 MB,
 * ten times the default max_query_size.
 */
static void test_index_4096_records_in_one_call(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static big_pack p;
  make_big_pack(&p, 40);
  assert_true(cs_catalog_index_bytes(&p.ref, p.records, BIG_RECORDS) > 262144 * 4);
  cs_index_pack ip = {&p.ref, p.records, BIG_RECORDS};
  cs_catalog_result res;
  double t0 = now_s();
  assert_int_equal(cat.ops->index(cat.self, &a, 0, 1, &ip, 1, &res), CS_E_OK);
  double seconds = now_s() - t0;
  if (res.outcome != CS_OUT_OK) fail_msg("index: %s", res.detail);
  printf("index of one %u-record pack: %.3f s (%.0f rows/s)\n", BIG_RECORDS, seconds, BIG_RECORDS / seconds);
  publish_ok(&cat, &a, 1, 1);
  bool held = false, rejected = true;
  committed_of(&cat, &p.ref.pack_id, &held, &rejected);
  assert_true(held);
  static cs_descriptor_row rows[BIG_RECORDS];
  uint32_t count = 0;
  assert_int_equal(cat.ops->read_descriptors(cat.self, 1, &p.ref.pack_id, rows, BIG_RECORDS, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(count, BIG_RECORDS);
  for (uint32_t r = 0; r < BIG_RECORDS; r += 1365) { /* ordered by offset: row r is record r */
    assert_text(rows[r].record.meta.capture_id, p.records[r].meta.capture_id);
    assert_text(rows[r].record.meta.hook_name, p.records[r].meta.hook_name);
    assert_text(rows[r].record.meta.adapter_revision, p.records[r].meta.adapter_revision);
    assert_int_equal(rows[r].record.meta.shape[2], 8192);
    assert_int_equal(rows[r].record.offset, p.records[r].offset);
  }
  cat.ops->close(cat.self);
}

static void test_reject_rows(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1), b = uuid_n(2);
  cs_uuid ids[3] = {uuid_n(20), uuid_n(21), uuid_n(22)};
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  cs_catalog_result res;
  assert_int_equal(cat.ops->reject(cat.self, &b, 0, &ids[2], 1, &res), CS_E_OK); /* fenced out */
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(cat.ops->reject(cat.self, &a, 0, ids, 2, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  bool held[3], rejected[3];
  assert_int_equal(cat.ops->committed(cat.self, ids, 3, held, rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_true(rejected[0]);
  assert_true(rejected[1]);
  assert_false(rejected[2]);
  assert_false(held[0] || held[1] || held[2]);
  cat.ops->close(cat.self);
}

/* One SEARCH page: *count rows. */
static uint32_t search_rows(cs_catalog *cat, const cs_search_filter *f, const cs_search_key *after, uint32_t capacity,
                            cs_search_row *rows, cs_catalog_result *res) {
  uint32_t count = 99;
  assert_int_equal(cat->ops->search(cat->self, 1, f, after, rows, capacity, &count, res), CS_E_OK);
  return count;
}

/*
 * SEARCH on the server: texts with every escape (the nasty capture id, as
 * a filter value and in a page's key) come back whole; and a catalog whose
 * descriptor rows hold fewer captures than its inventory counts (a row
 * deleted by hand) answers a page without a filter SERVER_ERROR (Code: 395)
 * where the inventory's count bounds the page, never a short page that
 * would end a reader's walk early; with a filter, or a page the count does
 * not bound, the answer is exact.
 */
static void test_search_rows_disagree_with_inventory(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack p;
  make_pack(&p, 13, "rev-1");
  index_ok(&cat, &a, 1, &p);
  publish_ok(&cat, &a, 1, 1);
  static cs_search_row rows[10];
  cs_catalog_result res;
  cs_search_filter all, f;
  memset(&all, 0, sizeof all);
  assert_int_equal(search_rows(&cat, &all, NULL, 2, rows, &res), 2);
  assert_int_equal(res.outcome, CS_OUT_OK);
  for (int r = 0; r < 2; r++) {
    assert_row(&rows[r].d, &p, r, 1);
    assert_int_equal(rows[r].pack_size_bytes, 4096);
    assert_memory_equal(rows[r].pack_sha256, p.ref.sha256, 32);
    assert_int_equal(rows[r].footer_offset, 192); /* the last record ends at 128 + 2 */
  }
  cs_search_key key;
  assert_int_equal(cs_search_key_of(&rows[0], &key), CS_E_OK);
  assert_int_equal(search_rows(&cat, &all, &key, 2, rows, &res), 1); /* after cap-0 */
  assert_row(&rows[0].d, &p, 1, 1);
  assert_int_equal(cs_search_key_of(&rows[0], &key), CS_E_OK); /* the nasty id as the key */
  assert_int_equal(search_rows(&cat, &all, &key, 2, rows, &res), 0);
  assert_int_equal(res.outcome, CS_OUT_OK);
  f = all, f.capture_ids = &p.records[1].meta.capture_id, f.capture_id_count = 1;
  assert_int_equal(search_rows(&cat, &f, NULL, 2, rows, &res), 1);
  assert_row(&rows[0].d, &p, 1, 1);
  char sql[256];
  snprintf(sql, sizeof sql, "ALTER TABLE %s DELETE WHERE capture_id = 'cap-0'", table("descriptors"));
  raw_sql(sql);
  for (int i = 0; i < 100 && rows_of("descriptors", &p.ref.pack_id) != 1; i++) sleep_ms(50);
  assert_int_equal(rows_of("descriptors", &p.ref.pack_id), 1);
  assert_int_equal(search_rows(&cat, &all, NULL, 2, rows, &res), 0);
  assert_int_equal(res.outcome, CS_OUT_SERVER_ERROR);
  assert_int_equal(res.server_code, 395);
  assert_non_null(strstr(res.detail, "inventory"));
  assert_int_equal(search_rows(&cat, &all, NULL, 10, rows, &res), 1); /* the inventory bounds nothing: exact */
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_row(&rows[0].d, &p, 1, 1);
  f = all, f.model_revision = cs_pack_text_of("rev-1");
  assert_int_equal(search_rows(&cat, &f, NULL, 2, rows, &res), 1);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_row(&rows[0].d, &p, 1, 1);
  cat.ops->close(cat.self);
}

/* ---- refusals and classification ----------------------------------------- */

/* A NUL in the object key (catalog.h's key rule): INVALID naming the key, and nothing reaches the server. */
static void test_nul_key_refused_before_sending(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack p;
  make_pack(&p, 13, "rev-1");
  static const char key[] = "cat/k\0/../other.dmi-pack";
  assert_int_equal(cs_pack_ref_set_key(&p.ref, key, sizeof key - 1), CS_E_OK);
  cs_index_pack ip = {&p.ref, p.records, 2};
  cs_catalog_result res;
  assert_int_equal(cat.ops->index(cat.self, &a, 0, 1, &ip, 1, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  if (strstr(res.detail, "key 'cat/k\\x00/../other.dmi-pack' holds a NUL byte at byte 5") == NULL)
    fail_msg("detail '%s' does not name the key", res.detail);
  assert_int_equal(rows_of("descriptors", &p.ref.pack_id), 0); /* nothing was sent */
  assert_int_equal(rows_of("inventory", &p.ref.pack_id), 0);
  publish_ok(&cat, &a, 1, 1);
  bool held = true, rejected = true;
  committed_of(&cat, &p.ref.pack_id, &held, &rejected);
  assert_false(held);
  cat.ops->close(cat.self);
}

/*
 * U+0000 in record texts goes through the rows' TabSeparated body as \0:
 * the server holds the bytes themselves (hex() of the stored value, not a
 * backslash and a 0) and READ_DESCRIPTORS hands them back whole, beside a
 * text that really is a backslash and a 0.
 */
static void test_nul_text_round_trip(void **state) {
  (void)state;
  cs_catalog cat = fresh();
  cs_uuid a = uuid_n(1);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack p;
  make_pack(&p, 14, "rev-1");
  cs_pack_meta *m0 = &p.records[0].meta, *m1 = &p.records[1].meta;
  m0->tenant_id = (cs_pack_text){"\0t\0", 3};
  m0->run_id = (cs_pack_text){"\\0", 2}; /* a backslash and a 0: not a NUL */
  m1->capture_id = (cs_pack_text){"cap-0\0", 6}; /* cut at the NUL it would be record 0's id */
  m1->model_revision = (cs_pack_text){"\0", 1};
  m1->adapter_revision = (cs_pack_text){"\\N\0", 3};
  index_ok(&cat, &a, 1, &p);
  publish_ok(&cat, &a, 1, 1);
  char sql[512], id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&p.ref.pack_id, id);
  snprintf(sql, sizeof sql,
           "SELECT count() FROM %s WHERE pack_id = '%s' AND ((hex(tenant_id) = '007400' AND hex(run_id) = '5C30') OR "
           "(hex(capture_id) = '6361702D3000' AND hex(model_revision) = '00' AND hex(adapter_revision) = '5C4E00'))",
           table("descriptors"), id);
  assert_int_equal(raw_u64(sql), 2); /* record 0 by its tenant and run, record 1 by its revisions */
  static cs_descriptor_row rows[4];
  assert_int_equal(read_rows(&cat, 1, &p.ref.pack_id, rows), 2);
  for (int r = 0; r < 2; r++) {
    assert_row(&rows[r], &p, r, 1); /* rows come in offset order */
    assert_text(rows[r].record.meta.tenant_id, p.records[r].meta.tenant_id);
    assert_text(rows[r].record.meta.run_id, p.records[r].meta.run_id);
  }
  cat.ops->close(cat.self);
}

/*
 * TOO_LARGE comes only from the inventory statement (one row per pack), and
 * is answered before any descriptor row is sent; a pack's rows never count
 * against query_bytes_max, however many.
 */
static void test_too_large(void **state) {
  (void)state;
  cs_catalog base = fresh();
  base.ops->close(base.self);
  cs_catalog cat = open_catalog(g_prefix, 4096);
  cs_uuid a = uuid_n(1);
  claim_ok(&cat, &a, 0, 30 * CS_SEC_NS);
  static test_pack packs[16];
  cs_index_pack ip[16];
  for (int i = 0; i < 16; i++) {
    make_pack(&packs[i], (uint8_t)(30 + i), "rev-1");
    ip[i] = (cs_index_pack){&packs[i].ref, packs[i].records, 2};
  }
  cs_catalog_result res;
  assert_int_equal(cat.ops->index(cat.self, &a, 0, 1, ip, 16, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_TOO_LARGE);
  assert_int_equal(rows_of("descriptors", &packs[0].ref.pack_id), 0); /* nothing was sent */
  assert_int_equal(cat.ops->index(cat.self, &a, 0, 1, ip, 4, &res), CS_E_OK); /* a quarter fits */
  assert_int_equal(res.outcome, CS_OUT_OK);
  static big_pack big;
  make_big_pack(&big, 60);
  cs_index_pack one = {&big.ref, big.records, BIG_RECORDS};
  assert_int_equal(cat.ops->index(cat.self, &a, 0, 1, &one, 1, &res), CS_E_OK); /* 2.6 MB of rows, limit 4 KiB */
  if (res.outcome != CS_OUT_OK) fail_msg("index: %s: %s", cs_outcome_name(res.outcome), res.detail);
  assert_int_equal(rows_of("descriptors", &big.ref.pack_id), BIG_RECORDS);
  cat.ops->close(cat.self);
}

typedef struct candidate_count {
  uint64_t chunks, geometry, slot_min, slot_max;
} candidate_count;

static int candidate_counted(void *ctx, const cs_array_candidate *c) {
  candidate_count *n = ctx;
  if (c->geometry) {
    n->geometry++;
    return 0;
  }
  if (n->chunks == 0 || c->slot < n->slot_min) n->slot_min = c->slot;
  if (n->chunks == 0 || c->slot > n->slot_max) n->slot_max = c->slot;
  n->chunks++;
  return 0;
}

/*
 * An answer over answer_bytes_max is refused whole (SERVER_ERROR, CS_CLICKHOUSE_ANSWER_TOO_LARGE, nothing
 * emitted), as the array walk (rt_array_winners) expects before it asks again in narrower windows; a window
 * that fits answers every candidate in it. 4,096 chunk records of one array in one pack (about 300 bytes of
 * answer each) against a 64 KiB cap.
 */
static void test_answer_too_large_windows(void **state) {
  (void)state;
  cs_catalog base = fresh();
  cs_uuid a = uuid_n(1);
  claim_ok(&base, &a, 0, 30 * CS_SEC_NS);
  static big_pack p;
  static char nonces[BIG_RECORDS][40];
  make_big_pack(&p, 70);
  for (uint32_t r = 0; r < BIG_RECORDS; r++) {
    cs_pack_meta *m = &p.records[r].meta;
    snprintf(nonces[r], sizeof nonces[r], "%032x", r * 2654435761u);
    m->hook_name = cs_pack_text_of(CS_ARRAY_HOOK_CHUNK);
    m->run_id = cs_pack_text_of("arr-big");
    m->sequence_id = cs_pack_text_of("h1");
    m->request_id = cs_pack_text_of(nonces[r]);
    m->step_number = r;
  }
  cs_index_pack one = {&p.ref, p.records, BIG_RECORDS};
  cs_catalog_result res;
  assert_int_equal(base.ops->index(base.self, &a, 0, 1, &one, 1, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("index: %s", res.detail);
  publish_ok(&base, &a, 1, 1);
  cs_pack_text id = cs_pack_text_of("arr-big");
  candidate_count n;
  memset(&n, 0, sizeof n);
  assert_int_equal(base.ops->array_candidates(base.self, 1, &id, NULL, candidate_counted, &n, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("candidates: %s", res.detail);
  assert_int_equal(n.chunks, BIG_RECORDS); /* uncapped (16 MiB): the whole array in one answer */
  cs_catalog capped = open_catalog_capped(g_prefix, 0, 64u << 10);
  memset(&n, 0, sizeof n);
  cs_array_window all = {.with_geometry = true, .slot_from = 0, .slot_to = BIG_RECORDS};
  assert_int_equal(capped.ops->array_candidates(capped.self, 1, &id, &all, candidate_counted, &n, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_SERVER_ERROR);
  assert_string_equal(res.detail, CS_CLICKHOUSE_ANSWER_TOO_LARGE);
  assert_int_equal(n.chunks, 0); /* nothing of a refused answer is emitted */
  cs_array_window some = {.with_geometry = false, .slot_from = 1000, .slot_to = 1064};
  assert_int_equal(capped.ops->array_candidates(capped.self, 1, &id, &some, candidate_counted, &n, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("a window of 64 slots: %s", res.detail);
  assert_int_equal(n.chunks, 64);
  assert_int_equal(n.slot_min, 1000);
  assert_int_equal(n.slot_max, 1063);
  capped.ops->close(capped.self);
  base.ops->close(base.self);
}

static void test_server_errors_classified(void **state) {
  (void)state;
  cs_catalog_result res;
  cs_cat_head head;
  cs_uuid a = uuid_n(1);
  cs_catalog missing = open_catalog("no_such_tables", 0);
  assert_int_equal(missing.ops->head(missing.self, &a, &head, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_NOT_FOUND);
  assert_int_equal(res.server_code, 60);
  missing.ops->close(missing.self);

  cs_clickhouse_config cfg = {.url = g_url, .user = g_user, .password = "wrong", .table_prefix = "x",
                              .allow_insecure = true};
  cs_catalog bad;
  assert_int_equal(cs_clickhouse_open(&cfg, &bad), CS_E_OK);
  assert_int_equal(bad.ops->head(bad.self, &a, &head, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_FORBIDDEN);
  assert_int_equal(res.server_code, 193);
  bad.ops->close(bad.self);

  cfg = (cs_clickhouse_config){.url = "http://127.0.0.1:1/", .table_prefix = "x", .allow_insecure = true};
  assert_int_equal(cs_clickhouse_open(&cfg, &bad), CS_E_OK);
  assert_int_equal(bad.ops->head(bad.self, &a, &head, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  bad.ops->close(bad.self);
}

/* ---- through the TCP fault switch ---------------------------------------- */

typedef struct switched {
  cs_tcp_switch *sw;
  cs_catalog cat;
  cs_catalog_result res;
  double seconds;
} switched;


static void *head_in_thread(void *arg) {
  switched *s = arg;
  cs_uuid a = uuid_n(1);
  cs_cat_head head;
  double t0 = now_s();
  s->cat.ops->head(s->cat.self, &a, &head, &s->res);
  s->seconds = now_s() - t0;
  return NULL;
}

static cs_outcome head_through(switched *s) {
  head_in_thread(s);
  return s->res.outcome;
}

static void test_through_tcp_switch(void **state) {
  (void)state;
  cs_catalog base = fresh();
  base.ops->close(base.self);
  unsigned port = 0;
  sscanf(g_url, "http://127.0.0.1:%u/", &port);
  switched s;
  memset(&s, 0, sizeof s);
  assert_int_equal(cs_tcp_switch_start(0, (uint16_t)port, &s.sw), CS_E_OK);
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%u/", cs_tcp_switch_port(s.sw));
  cs_clickhouse_config cfg = {.url = url, .user = g_user, .password = g_password, .table_prefix = g_prefix,
                              .connect_timeout_ns = CS_SEC_NS, .request_timeout_ns = 800 * CS_MS_NS,
                              .allow_insecure = true};
  assert_int_equal(cs_clickhouse_open(&cfg, &s.cat), CS_E_OK);
  assert_int_equal(head_through(&s), CS_OUT_OK);

  assert_int_equal(cs_tcp_switch_cut(s.sw), CS_E_OK);
  assert_int_equal(head_through(&s), CS_OUT_REFUSED);

  assert_int_equal(cs_tcp_switch_stall(s.sw), CS_E_OK);
  assert_int_equal(head_through(&s), CS_OUT_TIMEOUT);
  assert_true(s.seconds >= 0.75 && s.seconds < 2.0); /* within the configured request timeout */

  assert_int_equal(cs_tcp_switch_http(s.sw, "POST", "/", 503), CS_E_OK);
  assert_int_equal(head_through(&s), CS_OUT_THROTTLED);
  assert_int_equal(cs_tcp_switch_http(s.sw, "POST", "/", 500), CS_E_OK);
  assert_int_equal(head_through(&s), CS_OUT_SERVER_ERROR);
  assert_int_equal(cs_tcp_switch_http(s.sw, "POST", "/", 413), CS_E_OK);
  assert_int_equal(head_through(&s), CS_OUT_TOO_LARGE);
  assert_int_equal(cs_tcp_switch_http(s.sw, "GET", "/", 503), CS_E_OK); /* another method passes */
  assert_int_equal(head_through(&s), CS_OUT_OK);

  /* Sent, then the connection reset before the answer: UNKNOWN. */
  s.cat.ops->close(s.cat.self);
  cfg.request_timeout_ns = 5 * CS_SEC_NS;
  assert_int_equal(cs_clickhouse_open(&cfg, &s.cat), CS_E_OK);
  assert_int_equal(cs_tcp_switch_stall(s.sw), CS_E_OK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, head_in_thread, &s), 0);
  sleep_ms(300);
  assert_int_equal(cs_tcp_switch_cut(s.sw), CS_E_OK);
  pthread_join(t, NULL);
  assert_int_equal(s.res.outcome, CS_OUT_UNKNOWN);

  assert_int_equal(cs_tcp_switch_pass(s.sw), CS_E_OK);
  assert_int_equal(head_through(&s), CS_OUT_OK);
  s.cat.ops->close(s.cat.self);
  cs_tcp_switch_stop(s.sw);
}

static int read_endpoint(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  unsigned port = 0;
  int n = fscanf(f, "%u %63s %127s", &port, g_user, g_password);
  fclose(f);
  if (n != 3) return -1;
  snprintf(g_url, sizeof g_url, "http://127.0.0.1:%u/", port);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || read_endpoint(argv[1]) != 0) {
    fprintf(stderr, "usage: %s ENDPOINT_FILE (written by tools/servers/clickhouse.sh start)\n", argv[0]);
    return 1;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lease_claim_and_refused_twin),
      cmocka_unit_test(test_lease_expiry_and_release),
      cmocka_unit_test(test_fence_holder_writes_others_do_not),
      cmocka_unit_test(test_fence_contested_head_fences_both),
      cmocka_unit_test(test_index_publish_visibility),
      cmocka_unit_test(test_descriptors_without_inventory_are_invisible),
      cmocka_unit_test(test_stale_holder_rows_are_orphans),
      cmocka_unit_test(test_escaping_round_trip),
      cmocka_unit_test(test_index_4096_records_in_one_call),
      cmocka_unit_test(test_reject_rows),
      cmocka_unit_test(test_search_rows_disagree_with_inventory),
      cmocka_unit_test(test_nul_key_refused_before_sending), cmocka_unit_test(test_nul_text_round_trip),
      cmocka_unit_test(test_too_large),
      cmocka_unit_test(test_answer_too_large_windows),
      cmocka_unit_test(test_server_errors_classified),
      cmocka_unit_test(test_through_tcp_switch),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return failed;
}

/*
 * The reader (capstore.h) on the embedded defaults: records captured by the
 * runtime into a dirstore and a SQLite catalog, searched by every filter
 * field, paged to the end with no duplicate and no gap while publishing
 * goes on, read back byte-exact within the planned requests; cursors,
 * budgets, tampered catalog rows and tampered objects refused by name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/reader/reader_internal.h"
#include "test_capstore_util.h"
#include "test_fs_util.h"
#include "test_live_env.h"

#define SEC CS_SEC_NS
#define RECORDS 600u

static void env_make(env *e) {
  env_make_base(e, "reader");
  e->cfg.capture.sink.pack_records_max = 50;
  e->cfg.capture.staging_bytes = 8u << 20;
  e->cfg.capture.record_bytes_max = 1u << 20;
  e->cfg.capture.direct_io = false;
}

/* Record n: hook n % 3, layer n % 4 - 1, step n / 10, tokens [n, n + 5), n % 7 elements x 37 (some empty). */
static char hooks[3][32] = {"model.layers.0.mlp", "model.layers.0.attn", "model.embed"};

static uint32_t elements_of(uint64_t n) { return (uint32_t)(n % 7) * 37; }

static void record_of(uint64_t n, tc_record *r) {
  tc_record_make(r, n, elements_of(n));
  r->meta.hook_name = cs_pack_text_of(hooks[n % 3]);
  r->meta.layer_number = (int32_t)(n % 4) - 1;
  r->meta.step_number = n / 10;
  r->meta.token_start = n;
  r->meta.token_end = n + 5;
  r->meta.dtype = n % 5 == 0 ? CS_DTYPE_BFLOAT16 : CS_DTYPE_FLOAT16; /* both 2 bytes */
}

/* Captures records [first, first + count) and flushes them into the catalog. */
static void capture(capstore *cs, uint64_t first, uint64_t count) {
  uint8_t bytes[7 * 37 * 2];
  char msg[256];
  for (uint64_t n = first; n < first + count; n++) {
    tc_record r;
    record_of(n, &r);
    size_t len = (size_t)elements_of(n) * 2u;
    tc_payload(n, bytes, len);
    if (capstore_write(cs, &r.meta, bytes, len, msg, sizeof msg) != CS_E_OK) fail_msg("write %llu: %s", (unsigned long long)n, msg);
  }
  capstore_flush_report report;
  if (capstore_flush(cs, capstore_clock_ns() + 60 * SEC, &report, msg, sizeof msg) != CS_E_OK) fail_msg("flush: %s", msg);
}

/* A state of `records` records captured, flushed and closed, and a reader of it. */
static capstore_reader *captured(env *e, uint64_t records) {
  env_make(e);
  capstore *cs = open_capstore(e);
  capture(cs, 0, records);
  char msg[256];
  assert_int_equal(capstore_close(cs, 30 * SEC, msg, sizeof msg), CS_E_OK);
  capstore_free(cs);
  return open_reader(e);
}

/* The record number of a row ("rec-<n>"). */
static uint64_t number_of(const cs_search_row *row) {
  const cs_pack_text *id = &row->d.record.meta.capture_id;
  char text[40];
  snprintf(text, sizeof text, "%.*s", (int)id->len, id->bytes);
  assert_int_equal(strncmp(text, "rec-", 4), 0);
  return strtoull(text + 4, NULL, 10);
}

/* Reads sel back and checks every payload against what was captured. */
static capstore_read_cost read_and_check(capstore_reader *r, const capstore_selection *sel,
                                         const capstore_read_options *opt) {
  capstore_payloads p;
  char msg[512];
  int rc = capstore_read(r, sel, opt, &p, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("capstore_read: %s: %s", cs_strerror(rc), msg);
  assert_int_equal(p.count, sel->count);
  uint8_t want[7 * 37 * 2];
  for (uint32_t i = 0; i < p.count; i++) {
    uint64_t n = number_of(&sel->rows[i]);
    size_t len = (size_t)elements_of(n) * 2u;
    assert_int_equal(p.length[i], len);
    tc_payload(n, want, len);
    if (len > 0 && memcmp(p.bytes[i], want, len) != 0) fail_msg("record %llu: bytes differ", (unsigned long long)n);
  }
  assert_int_equal(p.cost.requests, p.cost.planned_requests + p.cost.retries);
  for (uint32_t i = 0; i < p.count; i++) assert_int_equal((uintptr_t)p.bytes[i] % 64, 0);
  capstore_read_cost cost = p.cost;
  capstore_payloads_free(&p);
  return cost;
}

/* Pages through filter to the end; seen[n] counts each record; returns the rows. */
static uint32_t page_all(capstore_reader *r, const cs_search_filter *f, uint32_t page, uint32_t *seen, uint32_t seen_max,
                         uint64_t *watermark) {
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  char cursor[CAPSTORE_CURSOR_MAX] = "";
  char msg[512];
  uint32_t total = 0;
  cs_search_key last;
  bool have_last = false;
  for (int guard = 0; guard < 100000; guard++) {
    int rc = capstore_search(r, f, cursor, page, &sel, msg, sizeof msg);
    if (rc != CS_E_OK) fail_msg("capstore_search: %s: %s", cs_strerror(rc), msg);
    if (guard == 0 && watermark != NULL) *watermark = sel.watermark;
    if (watermark != NULL) assert_int_equal(sel.watermark, *watermark); /* pinned */
    for (uint32_t i = 0; i < sel.count; i++) {
      uint64_t n = number_of(&sel.rows[i]);
      assert_true(n < seen_max);
      seen[n]++;
      cs_search_key key;
      assert_int_equal(cs_search_key_of(&sel.rows[i], &key), CS_E_OK);
      if (have_last) { /* strictly increasing (pack id, offset, capture id) */
        int c = memcmp(last.pack_id.bytes, key.pack_id.bytes, 16);
        size_t common = last.capture_id_len < key.capture_id_len ? last.capture_id_len : key.capture_id_len;
        int ids = memcmp(last.capture_id, key.capture_id, common);
        bool id_before = ids < 0 || (ids == 0 && last.capture_id_len < key.capture_id_len);
        assert_true(c < 0 || (c == 0 && (last.offset < key.offset || (last.offset == key.offset && id_before))));
      }
      last = key;
      have_last = true;
    }
    total += sel.count;
    if (sel.cursor[0] == '\0') break;
    snprintf(cursor, sizeof cursor, "%s", sel.cursor);
  }
  capstore_selection_free(&sel);
  return total;
}

/* Every record once, paged small and large, and read back byte-exact with the planned requests. */
static void test_search_and_read_back(void **state) {
  (void)state;
  env e;
  capstore_reader *r = captured(&e, RECORDS);
  char msg[256];
  cs_search_filter all;
  memset(&all, 0, sizeof all);
  static uint32_t seen[RECORDS];
  for (uint32_t page = 1; page <= 1000; page *= 7) {
    memset(seen, 0, sizeof seen);
    assert_int_equal(page_all(r, &all, page, seen, RECORDS, NULL), RECORDS);
    for (uint32_t n = 0; n < RECORDS; n++) assert_int_equal(seen[n], 1);
  }
  /* One page of everything, read whole: each pack's footer read once, its records merged into it. */
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  assert_int_equal(capstore_search(r, &all, NULL, CAPSTORE_PAGE_MAX, &sel, msg, sizeof msg), CS_E_OK);
  assert_int_equal(sel.count, RECORDS);
  assert_string_equal(sel.cursor, "");
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  capstore_read_cost cost = read_and_check(r, &sel, &opt);
  assert_int_equal(cost.packs, RECORDS / 50);
  assert_int_equal(cost.planned_requests, cost.packs); /* close records and the footer: one GET a pack */
  /* No merging: one GET per non-empty run of bytes, plus a footer read per pack. */
  opt.gap_bytes_max = 0;
  cost = read_and_check(r, &sel, &opt);
  assert_true(cost.requests > cost.packs);
  /* The whole objects, SHA-256 checked. */
  capstore_read_options_default(&opt);
  opt.verify_sha256 = true;
  cost = read_and_check(r, &sel, &opt);
  assert_int_equal(cost.requests, cost.packs);
  /* Estimate: the plan without a GET. */
  capstore_read_cost est;
  assert_int_equal(capstore_read_estimate(r, &sel, &opt, &est, msg, sizeof msg), CS_E_OK);
  assert_int_equal(est.planned_requests, cost.planned_requests);
  assert_int_equal(est.requests, 0);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  tc_remove_all(e.root);
}

/* Counts the records of [0, RECORDS) a predicate selects. */
typedef bool (*pick_fn)(uint64_t n);
static uint32_t count_of(pick_fn pick) {
  uint32_t count = 0;
  for (uint64_t n = 0; n < RECORDS; n++) count += pick(n);
  return count;
}

static bool pick_hook_1_or_2(uint64_t n) { return n % 3 != 0; }
static bool pick_layer(uint64_t n) { return (int)(n % 4) - 1 >= 0 && (int)(n % 4) - 1 <= 1; }
static bool pick_step(uint64_t n) { return n / 10 >= 7 && n / 10 <= 9; }
static bool pick_tokens(uint64_t n) { return n < 103 && n + 5 > 100; }
static bool pick_time(uint64_t n) { return n >= 20 && n <= 29; }
static bool pick_dtype(uint64_t n) { return n % 5 == 0; }
static bool pick_combined(uint64_t n) { return pick_step(n) && pick_dtype(n); }

static void expect_count(capstore_reader *r, const cs_search_filter *f, pick_fn pick, const char *what) {
  static uint32_t seen[RECORDS];
  memset(seen, 0, sizeof seen);
  uint32_t got = page_all(r, f, 13, seen, RECORDS, NULL);
  uint32_t want = count_of(pick);
  if (got != want) fail_msg("%s: %u records, want %u", what, got, want);
  for (uint64_t n = 0; n < RECORDS; n++)
    if (seen[n] != (pick(n) ? 1u : 0u)) fail_msg("%s: record %llu seen %u times", what, (unsigned long long)n, seen[n]);
}

static void test_filters(void **state) {
  (void)state;
  env e;
  capstore_reader *r = captured(&e, RECORDS);
  char msg[256];
  cs_search_filter f;
  cs_pack_text two[2] = {cs_pack_text_of(hooks[1]), cs_pack_text_of(hooks[2])};
  memset(&f, 0, sizeof f), f.hook_names = two, f.hook_name_count = 2;
  expect_count(r, &f, pick_hook_1_or_2, "hooks");
  memset(&f, 0, sizeof f), f.has_layer = true, f.layer_min = 0, f.layer_max = 1;
  expect_count(r, &f, pick_layer, "layers");
  memset(&f, 0, sizeof f), f.has_step = true, f.step_min = 7, f.step_max = 9;
  expect_count(r, &f, pick_step, "steps");
  memset(&f, 0, sizeof f), f.has_tokens = true, f.token_min = 100, f.token_max = 103;
  expect_count(r, &f, pick_tokens, "tokens");
  memset(&f, 0, sizeof f), f.has_captured_at = true, f.captured_min_ns = 1764547200000000020ull;
  f.captured_max_ns = 1764547200000000029ull;
  expect_count(r, &f, pick_time, "capture time");
  memset(&f, 0, sizeof f), f.has_dtype = true, f.dtype = CS_DTYPE_BFLOAT16;
  expect_count(r, &f, pick_dtype, "dtype");
  f.has_step = true, f.step_min = 7, f.step_max = 9;
  f.model_id = cs_pack_text_of("qwen2-0.5b"), f.run_id = cs_pack_text_of("run-1");
  expect_count(r, &f, pick_combined, "step and dtype and texts");
  f.run_id = cs_pack_text_of("run-2");
  static uint32_t seen[RECORDS];
  assert_int_equal(page_all(r, &f, 5, seen, RECORDS, NULL), 0);
  /* select by capture id: each once, read back; an unknown id selects nothing. */
  cs_pack_text ids[3] = {cs_pack_text_of("rec-5"), cs_pack_text_of("rec-599"), cs_pack_text_of("rec-none")};
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  assert_int_equal(capstore_select(r, 0, ids, 3, &sel, msg, sizeof msg), CS_E_OK);
  assert_int_equal(sel.count, 2);
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  read_and_check(r, &sel, &opt);
  assert_int_equal(capstore_select(r, sel.watermark + 1, ids, 3, &sel, msg, sizeof msg), CS_E_STATE);
  /* Filters refused by name before any query. */
  memset(&f, 0, sizeof f), f.has_step = true, f.step_min = 9, f.step_max = 7;
  assert_int_equal(capstore_search(r, &f, NULL, 10, &sel, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "step range"));
  memset(&f, 0, sizeof f);
  assert_int_equal(capstore_search(r, &f, NULL, 0, &sel, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "page size"));
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  tc_remove_all(e.root);
}

/* Pages pinned at W while more is published: exactly the records visible at W; a new search sees the rest. */
static void test_paging_while_publishing(void **state) {
  (void)state;
  env e;
  env_make(&e);
  capstore *cs = open_capstore(&e);
  capture(cs, 0, 300);
  capstore_reader *r = open_reader(&e);
  cs_search_filter all;
  memset(&all, 0, sizeof all);
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  char msg[512];
  static uint32_t seen[RECORDS];
  memset(seen, 0, sizeof seen);
  assert_int_equal(capstore_search(r, &all, NULL, 40, &sel, msg, sizeof msg), CS_E_OK);
  uint64_t pinned = sel.watermark;
  uint32_t total = sel.count;
  for (uint32_t i = 0; i < sel.count; i++) seen[number_of(&sel.rows[i])]++;
  char cursor[CAPSTORE_CURSOR_MAX];
  uint32_t published = 0;
  while (sel.cursor[0] != '\0') {
    snprintf(cursor, sizeof cursor, "%s", sel.cursor);
    if (published < 3) capture(cs, 300 + 100 * published, 100), published++; /* new versions meanwhile */
    assert_int_equal(capstore_search(r, &all, cursor, 40, &sel, msg, sizeof msg), CS_E_OK);
    assert_int_equal(sel.watermark, pinned);
    for (uint32_t i = 0; i < sel.count; i++) seen[number_of(&sel.rows[i])]++;
    total += sel.count;
  }
  assert_int_equal(published, 3);
  assert_int_equal(total, 300);
  for (uint32_t n = 0; n < 300; n++) assert_int_equal(seen[n], 1);
  assert_int_equal(capstore_search(r, &all, NULL, CAPSTORE_PAGE_MAX, &sel, msg, sizeof msg), CS_E_OK);
  assert_true(sel.watermark > pinned);
  assert_int_equal(sel.count, RECORDS);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  assert_int_equal(capstore_close(cs, 30 * SEC, msg, sizeof msg), CS_E_OK);
  capstore_free(cs);
  tc_remove_all(e.root);
}

static void expect_cursor_refused(capstore_reader *r, const cs_search_filter *f, const char *cursor, int code,
                                  const char *needle) {
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  char msg[512];
  int rc = capstore_search(r, f, cursor, 10, &sel, msg, sizeof msg);
  if (rc != code || strstr(msg, needle) == NULL)
    fail_msg("cursor %.40s...: %s (%s), want %s with \"%s\"", cursor, cs_strerror(rc), msg, cs_strerror(code), needle);
  assert_int_equal(sel.count, 0);
}

static void test_cursor_refusals(void **state) {
  (void)state;
  env e;
  capstore_reader *r = captured(&e, 100);
  char msg[512];
  cs_search_filter f;
  memset(&f, 0, sizeof f);
  f.has_step = true, f.step_min = 0, f.step_max = 5;
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  assert_int_equal(capstore_search(r, &f, NULL, 10, &sel, msg, sizeof msg), CS_E_OK);
  char cursor[CAPSTORE_CURSOR_MAX];
  snprintf(cursor, sizeof cursor, "%s", sel.cursor);
  assert_true(strlen(cursor) > 10);
  cs_search_filter other = f;
  other.step_max = 6;
  expect_cursor_refused(r, &other, cursor, CS_E_CONFLICT, "another filter");
  char forged[CAPSTORE_CURSOR_MAX];
  for (size_t at = 4; at < strlen(cursor); at += 7) { /* any one character changed */
    snprintf(forged, sizeof forged, "%s", cursor);
    forged[at] = forged[at] == '0' ? '1' : '0';
    expect_cursor_refused(r, &f, forged, CS_E_PARSE, "damaged or forged");
  }
  snprintf(forged, sizeof forged, "%.*s", (int)strlen(cursor) - 2, cursor);
  expect_cursor_refused(r, &f, forged, CS_E_PARSE, "cursor:");
  expect_cursor_refused(r, &f, "hello", CS_E_PARSE, "not a capstore cursor");
  snprintf(forged, sizeof forged, "%s", cursor);
  forged[6] = 'G';
  expect_cursor_refused(r, &f, forged, CS_E_PARSE, "0-9 a-f");
  /* A well-formed cursor pinned past the head (another catalog's): refused. */
  rd_cursor c;
  assert_int_equal(rd_cursor_parse(cursor, strlen(cursor), &c, msg, sizeof msg), CS_E_OK);
  c.watermark = sel.watermark + 1;
  assert_int_equal(rd_cursor_format(&c, forged, sizeof forged), CS_E_OK);
  expect_cursor_refused(r, &f, forged, CS_E_STATE, "ahead of the catalog's head");
  /* The untouched cursor goes on. */
  assert_int_equal(capstore_search(r, &f, cursor, 10, &sel, msg, sizeof msg), CS_E_OK);
  assert_int_equal(sel.count, 10);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  tc_remove_all(e.root);
}

/* One page of every record the reader sees (the empty filter), in sel. */
static void search_all(capstore_reader *r, uint32_t page_size, capstore_selection *sel) {
  char msg[512];
  cs_search_filter all;
  memset(&all, 0, sizeof all);
  memset(sel, 0, sizeof *sel);
  assert_int_equal(capstore_search(r, &all, NULL, page_size, sel, msg, sizeof msg), CS_E_OK);
}

static void test_budget_refusals(void **state) {
  (void)state;
  env e;
  capstore_reader *r = captured(&e, 200);
  char msg[512];
  capstore_selection sel;
  search_all(r, 1000, &sel);
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  capstore_read_cost est;
  assert_int_equal(capstore_read_estimate(r, &sel, &opt, &est, msg, sizeof msg), CS_E_OK);
  capstore_payloads p;
  opt.byte_limit = (int64_t)est.planned_bytes - 1;
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_TOO_LARGE);
  assert_non_null(strstr(msg, "1 bytes over the byte limit"));
  assert_int_equal(p.cost.requests, 0); /* refused before any GET */
  assert_int_equal(p.cost.planned_bytes, est.planned_bytes);
  opt.byte_limit = INT64_MAX;
  opt.request_limit = (int64_t)est.planned_requests - 1;
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_TOO_LARGE);
  assert_non_null(strstr(msg, "1 over the request limit"));
  assert_int_equal(p.cost.requests, 0);
  opt.request_limit = 0;
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "request limit 0"));
  opt.request_limit = (int64_t)est.planned_requests;
  opt.byte_limit = -1;
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "byte limit -1"));
  opt.byte_limit = (int64_t)est.planned_bytes; /* exactly the plan: read */
  capstore_read_cost cost = read_and_check(r, &sel, &opt);
  assert_int_equal(cost.requests, est.planned_requests);
  assert_int_equal(cost.bytes, est.planned_bytes);
  /* Payloads outlive their reader (the reader's spare arena is shared with them). */
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_OK);
  capstore_reader_free(r);
  uint8_t want[7 * 37 * 2];
  for (uint32_t i = 0; i < p.count; i++) {
    uint64_t n = number_of(&sel.rows[i]);
    tc_payload(n, want, (size_t)p.length[i]);
    assert_memory_equal(p.bytes[i], want, (size_t)p.length[i]);
  }
  capstore_payloads_free(&p);
  capstore_selection_free(&sel);
  tc_remove_all(e.root);
}

/* Runs one SQL statement on the catalog file (the tamperer's). */
static void sql(env *e, const char *statement) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(e->db, &db), SQLITE_OK);
  char *err = NULL;
  if (sqlite3_exec(db, statement, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", statement, err);
  assert_int_equal(sqlite3_changes(db) > 0, 1);
  sqlite3_close(db);
}

static void expect_read_refused(capstore_reader *r, int code, const char *needle, bool whole) {
  capstore_selection sel;
  search_all(r, 1000, &sel);
  char msg[512];
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  opt.verify_sha256 = whole;
  capstore_payloads p;
  int rc = capstore_read(r, &sel, &opt, &p, msg, sizeof msg);
  if (rc != code || strstr(msg, needle) == NULL)
    fail_msg("read: %s (%s), want %s with \"%s\"", cs_strerror(rc), msg, cs_strerror(code), needle);
  assert_int_equal(p.count, 0);
  assert_null(p.bytes);
  capstore_selection_free(&sel);
}

static void test_tampered_catalog_rows(void **state) {
  (void)state;
  if (live.on) skip(); /* the rows are changed with SQLite's own statements: the check is the reader's, one code path */
  const char *cases[][2] = {
      {"UPDATE cs_descriptor_v1 SET step_number = step_number + 1 WHERE capture_id = 'rec-17'", "step_number"},
      {"UPDATE cs_descriptor_v1 SET crc32 = crc32 + 1 WHERE capture_id = 'rec-18'", "crc32"},
      {"UPDATE cs_descriptor_v1 SET hook_name = 'x' WHERE capture_id = 'rec-19'", "hook_name"},
      {"UPDATE cs_descriptor_v1 SET capture_id = 'rec-999' WHERE capture_id = 'rec-20'", "footer lacks it"},
      {"UPDATE cs_descriptor_v1 SET shape = x'0100000003000000' WHERE capture_id = 'rec-22'", "shape"},
      {"UPDATE cs_inventory_v1 SET size_bytes = size_bytes + 64", "short read"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    env e;
    env_make(&e);
    capstore *cs = open_capstore(&e);
    capture(cs, 0, 100);
    char msg[256];
    assert_int_equal(capstore_close(cs, 30 * SEC, msg, sizeof msg), CS_E_OK);
    capstore_free(cs);
    sql(&e, cases[i][0]);
    capstore_reader *r = open_reader(&e);
    expect_read_refused(r, i == 5 ? CS_E_CORRUPT : CS_E_CONFLICT, cases[i][1], false);
    capstore_reader_free(r);
    tc_remove_all(e.root);
  }
}

/*
 * Replaces the object under key with its own bytes, one bit flipped at
 * offset (or cut short by `cut` bytes), its metadata kept: a store whose
 * objects changed under the catalog (through the store's API: dirstore and
 * S3 alike).
 */
static void tamper(env *e, const char *key, uint64_t offset, uint64_t cut) {
  cs_store store;
  char msg[256];
  if (capstore_open_store(&e->cfg, &store, msg, sizeof msg) != CS_E_OK) fail_msg("open store: %s", msg);
  cs_object_info info;
  cs_store_result res;
  assert_int_equal(store.ops->head(store.self, key, &info, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  uint8_t *bytes = malloc((size_t)info.size_bytes);
  size_t got = 0;
  cs_range all = {.offset = 0, .length = info.size_bytes};
  assert_int_equal(store.ops->get(store.self, key, &all, bytes, (size_t)info.size_bytes, &got, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(got, info.size_bytes);
  if (cut == 0) bytes[offset] ^= 0x10;
  assert_int_equal(store.ops->put(store.self, key, bytes, (size_t)(info.size_bytes - cut), &info, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  free(bytes);
  cs_store_close(&store);
}

static void test_tampered_objects(void **state) {
  (void)state;
  for (int kind = 0; kind < 4; kind++) {
    env e;
    env_make(&e);
    capstore *cs = open_capstore(&e);
    capture(cs, 0, 100);
    char msg[512];
    assert_int_equal(capstore_close(cs, 30 * SEC, msg, sizeof msg), CS_E_OK);
    capstore_free(cs);
    capstore_reader *r = open_reader(&e);
    capstore_selection sel;
    memset(&sel, 0, sizeof sel);
    cs_pack_text id = cs_pack_text_of("rec-3"); /* 3 x 37 bf16/f16 values: 222 bytes, padded to 256 */
    assert_int_equal(capstore_select(r, 0, &id, 1, &sel, msg, sizeof msg), CS_E_OK);
    assert_int_equal(sel.count, 1);
    const char *key = sel.rows[0].d.key;
    const cs_pack_record *rec = &sel.rows[0].d.record;
    if (kind == 0) { /* a payload byte: its CRC-32 */
      tamper(&e, key, rec->offset + 5, 0);
      expect_read_refused(r, CS_E_CORRUPT, "CRC-32", false);
    } else if (kind == 1) { /* a footer byte */
      tamper(&e, key, sel.rows[0].footer_offset + 3, 0);
      expect_read_refused(r, CS_E_CORRUPT, "footer", false);
    } else if (kind == 2) { /* a padding byte: no CRC covers it, the SHA-256 does */
      tamper(&e, key, rec->offset + rec->stored_length + 1, 0);
      expect_read_refused(r, CS_E_CORRUPT, "SHA-256", true);
    } else { /* cut short: the catalog's size no longer holds */
      tamper(&e, key, 0, 100);
      capstore_selection all;
      search_all(r, 1000, &all);
      capstore_read_options opt;
      capstore_read_options_default(&opt);
      capstore_payloads p;
      int rc = capstore_read(r, &all, &opt, &p, msg, sizeof msg);
      assert_true(rc != CS_E_OK);
      assert_non_null(strstr(msg, sel.rows[0].d.key));
      capstore_selection_free(&all);
    }
    capstore_selection_free(&sel);
    capstore_reader_free(r);
    tc_remove_all(e.root);
  }
}

/*
 * A store whose next `failures` GETs answer `outcome` without reading
 * (dirstore runs each GET inside cs_store_start, through ops->get).
 */
static struct flaky {
  const cs_store_ops *real;
  cs_store_ops ops;
  uint32_t failures, failed;
  cs_outcome outcome;
} flaky;

static int flaky_get(void *self, const char *key, const cs_range *range, void *buf, size_t cap, size_t *got,
                     cs_store_result *res) {
  if (flaky.failures == 0) return flaky.real->get(self, key, range, buf, cap, got, res);
  flaky.failures--;
  flaky.failed++;
  *got = 0;
  res->outcome = flaky.outcome;
  res->http_status = flaky.outcome == CS_OUT_NOT_FOUND ? 404 : 503;
  snprintf(res->detail, sizeof res->detail, "injected %s", cs_outcome_name(flaky.outcome));
  return CS_E_OK;
}

static void flaky_install(capstore_reader *r, uint32_t failures, cs_outcome outcome) {
  if (flaky.real == NULL) {
    flaky.real = r->store.ops;
    flaky.ops = *r->store.ops;
    flaky.ops.get = flaky_get;
  }
  r->store.ops = &flaky.ops;
  flaky.failures = failures;
  flaky.failed = 0;
  flaky.outcome = outcome;
}

/*
 * Transient GET failures are retried and counted (requests = planned +
 * retries), within each GET's retry_max and the request limit; a 4xx is
 * never retried; a failure that outlasts its retries fails the read by name.
 */
static void test_transient_retries(void **state) {
  (void)state;
  if (live.on) skip(); /* the fault is injected into the synchronous store's GET */
  env e;
  capstore_reader *r = captured(&e, 200);
  char msg[512];
  capstore_selection sel;
  search_all(r, 1000, &sel);
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  opt.gap_bytes_max = 0; /* many GETs */
  flaky_install(r, 2, CS_OUT_SERVER_ERROR);
  capstore_read_cost cost = read_and_check(r, &sel, &opt);
  assert_int_equal(cost.retries, 2);
  assert_int_equal(cost.requests, cost.planned_requests + 2);
  flaky_install(r, 1, CS_OUT_TIMEOUT);
  assert_int_equal(read_and_check(r, &sel, &opt).retries, 1);
  /* Not transient: the first answer fails the read. */
  capstore_payloads p;
  flaky_install(r, 1, CS_OUT_NOT_FOUND);
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_IO);
  assert_non_null(strstr(msg, "store GET of"));
  assert_non_null(strstr(msg, "not_found"));
  assert_int_equal(p.cost.retries, 0);
  assert_int_equal(flaky.failed, 1);
  /* Outlasting its retries: retry_max + 1 attempts of one GET, then the read fails naming it. */
  opt.inflight_max = 1;
  opt.retry_max = 2;
  flaky_install(r, 1000, CS_OUT_THROTTLED);
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_IO);
  assert_non_null(strstr(msg, "after retries"));
  assert_int_equal(p.cost.retries, 2);
  assert_int_equal(flaky.failed, 3);
  /* No room under the request limit: no retry. */
  capstore_read_options_default(&opt);
  capstore_read_cost est;
  assert_int_equal(capstore_read_estimate(r, &sel, &opt, &est, msg, sizeof msg), CS_E_OK);
  opt.request_limit = (int64_t)est.planned_requests;
  flaky_install(r, 1, CS_OUT_SERVER_ERROR);
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_IO);
  assert_int_equal(p.cost.retries, 0);
  opt.request_limit = (int64_t)est.planned_requests + 1; /* one retry fits */
  flaky_install(r, 1, CS_OUT_SERVER_ERROR);
  assert_int_equal(read_and_check(r, &sel, &opt).retries, 1);
  opt.retry_max = 11;
  assert_int_equal(capstore_read(r, &sel, &opt, &p, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  flaky_install(r, 0, CS_OUT_OK);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  tc_remove_all(e.root);
}

int main(int argc, char **argv) {
  if (argc == 3) live_load(argv[1], argv[2]);
  else if (argc != 1) return fprintf(stderr, "usage: test_reader [CLICKHOUSE_ENDPOINT S3_ENDPOINT]\n"), 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_search_and_read_back), cmocka_unit_test(test_filters),
      cmocka_unit_test(test_paging_while_publishing), cmocka_unit_test(test_cursor_refusals),
      cmocka_unit_test(test_budget_refusals), cmocka_unit_test(test_tampered_catalog_rows),
      cmocka_unit_test(test_tampered_objects), cmocka_unit_test(test_transient_retries),
  };
  return cmocka_run_group_tests_name(live.on ? "reader on S3 + ClickHouse" : "reader on dirstore + SQLite", tests, NULL,
                                     NULL);
}

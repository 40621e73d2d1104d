/* The reader under an asynchronous store that answers out of order, transient and lasting failures, a flipped byte, payload lifetimes across threads and reads, and two threads reading with one reader (the tests of test_reader.c are reused, not run again). */
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#define main test_reader_orig_main
#include "test_reader.c"
#undef main
#include <pthread.h>

/* ---- an asynchronous wrapper around the synchronous dirstore ---- */
static struct async {
  const cs_store_ops *real;
  cs_store_ops ops;
  void *self;
  cs_store_request *q[256];
  uint32_t qn;
  uint32_t started, reaped, max_q;
  uint32_t fail_from, fail_count; /* started GETs numbered fail_from.. fail_count of them answer outcome */
  cs_outcome outcome;
  uint32_t reap_fail_after;       /* reap returns CS_E_IO once this many were reaped (0: never) */
  uint32_t tamper_at;             /* GET number whose first byte is flipped (0: none) */
} as;

static int as_start(void *self, cs_store_request *req) {
  (void)self;
  if (as.qn >= 256) return CS_E_FULL;
  req->internal = &as;
  as.q[as.qn++] = req;
  if (as.qn > as.max_q) as.max_q = as.qn;
  req->id = req->id; /* keep */
  req->rc = (int)(++as.started); /* stash its number in rc until reaped */
  return CS_E_OK;
}

static int as_reap(void *self, uint32_t timeout_ms, cs_store_request **done) {
  (void)timeout_ms;
  if (as.qn == 0) return 0;
  if (as.reap_fail_after != 0 && as.reaped >= as.reap_fail_after) return CS_E_IO;
  /* the newest first: completions out of order */
  cs_store_request *req = as.q[--as.qn];
  uint32_t n = (uint32_t)req->rc;
  req->internal = NULL;
  req->next = NULL;
  as.reaped++;
  if (n >= as.fail_from && n < as.fail_from + as.fail_count) {
    req->got = 0;
    memset(&req->res, 0, sizeof req->res);
    req->res.outcome = as.outcome;
    snprintf(req->res.detail, sizeof req->res.detail, "injected");
    req->rc = CS_E_OK;
  } else {
    req->rc = as.real->get(self, req->key, req->has_range ? &req->range : NULL, req->buf, req->cap, &req->got, &req->res);
    if (as.tamper_at == n && req->got > 0) ((uint8_t *)req->buf)[0] ^= 1;
  }
  *done = req;
  return 1;
}

static void as_wakeup(void *self) { (void)self; }

static void as_install(capstore_reader *r) {
  if (as.real == NULL || r->store.ops != &as.ops) {
    as.real = r->store.ops;
    as.ops = *r->store.ops;
    as.ops.start = as_start;
    as.ops.reap = as_reap;
    as.ops.wakeup = as_wakeup;
  }
  r->store.ops = &as.ops;
  r->store.in_flight_max = 64;
  as.qn = 0; as.started = 0; as.reaped = 0; as.max_q = 0;
  as.fail_from = 0; as.fail_count = 0; as.reap_fail_after = 0; as.tamper_at = 0;
}

/* Zero rows; only empty records; rows selected twice and out of order. */
static void test_edges(void **state) {
  (void)state;
  env e;
  capstore_reader *r = captured(&e, 200);
  capstore_selection sel;
  search_all(r, 10000, &sel);
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  char msg[512];
  /* zero rows */
  capstore_selection none = {.watermark = sel.watermark, .count = 0, .rows = NULL};
  capstore_payloads p;
  int rc = capstore_read(r, &none, &opt, &p, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("zero rows: %s %s", cs_strerror(rc), msg);
  assert_int_equal(p.count, 0);
  printf("zero rows: requests %llu planned %llu\n", (unsigned long long)p.cost.requests,
         (unsigned long long)p.cost.planned_requests);
  capstore_payloads_free(&p);
  /* only empty records, then duplicates */
  cs_search_row *rows = calloc(sel.count * 3 + 1, sizeof *rows);
  uint32_t n = 0;
  for (uint32_t i = 0; i < sel.count; i++)
    if (number_of(&sel.rows[i]) % 7 == 0) rows[n++] = sel.rows[i];
  capstore_selection empties = {.watermark = sel.watermark, .count = n, .rows = rows};
  capstore_read_cost c = read_and_check(r, &empties, &opt);
  printf("empties: %u rows, requests %llu\n", n, (unsigned long long)c.requests);
  n = 0;
  for (uint32_t i = sel.count; i-- > 0;) {
    rows[n++] = sel.rows[i];
    if (i % 3 == 0) rows[n++] = sel.rows[i];
    if (i % 5 == 0) rows[n++] = sel.rows[(i * 7) % sel.count];
  }
  capstore_selection dup = {.watermark = sel.watermark, .count = n, .rows = rows};
  c = read_and_check(r, &dup, &opt);
  opt.gap_bytes_max = 0;
  opt.span_bytes_max = 1;
  c = read_and_check(r, &dup, &opt);
  opt.gap_bytes_max = UINT64_MAX;
  opt.span_bytes_max = 0;
  c = read_and_check(r, &dup, &opt);
  opt.verify_sha256 = true;
  c = read_and_check(r, &dup, &opt);
  free(rows);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  tc_remove_all(e.root);
}

/* The asynchronous path: completions out of order, transient failures with GETs in flight, 404 mid-read. */
static void test_async(void **state) {
  (void)state;
  env e;
  capstore_reader *r = captured(&e, 600);
  capstore_selection sel;
  search_all(r, 10000, &sel);
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  opt.gap_bytes_max = 0;
  opt.inflight_max = 16;
  char msg[512];
  as_install(r);
  capstore_read_cost c = read_and_check(r, &sel, &opt);
  printf("async: %llu requests, max queued %u\n", (unsigned long long)c.requests, as.max_q);
  assert_true(as.max_q <= 16);
  /* transient failures of 5 GETs while others are out */
  as_install(r);
  as.fail_from = 3; as.fail_count = 5; as.outcome = CS_OUT_SERVER_ERROR;
  c = read_and_check(r, &sel, &opt);
  printf("async retries: %llu (requests %llu planned %llu), store saw %u\n", (unsigned long long)c.retries,
         (unsigned long long)c.requests, (unsigned long long)c.planned_requests, as.started);
  assert_int_equal(as.started, c.requests);
  /* request_limit: planned + 1, three transient failures: at most planned + 1 GETs */
  capstore_read_cost est;
  assert_int_equal(capstore_read_estimate(r, &sel, &opt, &est, msg, sizeof msg), CS_E_OK);
  opt.request_limit = (int64_t)est.planned_requests + 1;
  as_install(r);
  as.fail_from = 2; as.fail_count = 3; as.outcome = CS_OUT_TIMEOUT;
  capstore_payloads p;
  int rc = capstore_read(r, &sel, &opt, &p, msg, sizeof msg);
  printf("limit+1, 3 failures: rc %s (%s), requests %llu, store saw %u, limit %lld\n", cs_strerror(rc), msg,
         (unsigned long long)p.cost.requests, as.started, (long long)opt.request_limit);
  assert_true(as.started <= (uint32_t)opt.request_limit);
  assert_true(rc != CS_E_OK);
  opt.request_limit = INT64_MAX;
  /* a 404 mid-read with GETs in flight */
  as_install(r);
  as.fail_from = 20; as.fail_count = 1; as.outcome = CS_OUT_NOT_FOUND;
  rc = capstore_read(r, &sel, &opt, &p, msg, sizeof msg);
  printf("404: rc %s (%s), retries %llu\n", cs_strerror(rc), msg, (unsigned long long)p.cost.retries);
  assert_int_equal(rc, CS_E_IO);
  assert_int_equal(p.cost.retries, 0);
  assert_null(p.bytes);
  /* tampered bytes mid-read: a CRC failure in a worker while GETs run */
  as_install(r);
  as.tamper_at = 10;
  rc = capstore_read(r, &sel, &opt, &p, msg, sizeof msg);
  printf("tampered GET: rc %s (%s)\n", cs_strerror(rc), msg);
  assert_true(rc != CS_E_OK);
  /* the same reader still reads */
  as_install(r);
  read_and_check(r, &sel, &opt);
  /* the transfer engine fails with GETs in flight: the read strands them, later reads are refused */
  as_install(r);
  as.reap_fail_after = 5;
  rc = capstore_read(r, &sel, &opt, &p, msg, sizeof msg);
  printf("reap failure: rc %s (%s), queued %u\n", cs_strerror(rc), msg, as.qn);
  assert_true(rc != CS_E_OK);
  rc = capstore_read(r, &sel, &opt, &p, msg, sizeof msg);
  assert_int_equal(rc, CS_E_STATE);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  tc_remove_all(e.root);
}

/* Large payloads (the spare arena): payloads freed in any order, after the reader, from another thread. */
static void capture_big(capstore *cs, uint64_t first, uint64_t count, uint32_t elements) {
  size_t len = (size_t)elements * 2u;
  uint8_t *bytes = malloc(len);
  char msg[256];
  for (uint64_t n = first; n < first + count; n++) {
    tc_record rec;
    tc_record_make(&rec, n, elements);
    rec.meta.dtype = CS_DTYPE_FLOAT16;
    tc_payload(n, bytes, len);
    if (capstore_write(cs, &rec.meta, bytes, len, msg, sizeof msg) != CS_E_OK) fail_msg("write: %s", msg);
  }
  free(bytes);
  capstore_flush_report report;
  if (capstore_flush(cs, capstore_clock_ns() + 60 * SEC, &report, msg, sizeof msg) != CS_E_OK) fail_msg("flush: %s", msg);
}

static void check_big(const capstore_selection *sel, const capstore_payloads *p) {
  assert_int_equal(p->count, sel->count);
  uint8_t *want = malloc(1 << 20);
  for (uint32_t i = 0; i < p->count; i++) {
    uint64_t n = number_of(&sel->rows[i]);
    tc_payload(n, want, (size_t)p->length[i]);
    if (memcmp(p->bytes[i], want, (size_t)p->length[i]) != 0) fail_msg("big record %llu differs", (unsigned long long)n);
  }
  free(want);
}

static void *free_in_thread(void *arg) {
  capstore_payloads_free(arg);
  return NULL;
}

static void test_big_lifetimes(void **state) {
  (void)state;
  env e;
  env_make(&e);
  capstore *cs = open_capstore(&e);
  capture_big(cs, 0, 120, 32768); /* 64 KiB each: 7.5 MiB */
  char msg[512];
  assert_int_equal(capstore_close(cs, 30 * SEC, msg, sizeof msg), CS_E_OK);
  capstore_free(cs);
  capstore_reader *r = open_reader(&e);
  capstore_selection sel;
  search_all(r, 10000, &sel);
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  capstore_payloads a, b, c;
  assert_int_equal(capstore_read(r, &sel, &opt, &a, msg, sizeof msg), CS_E_OK);
  check_big(&sel, &a);
  capstore_payloads_free(&a); /* the arena goes to the spare */
  assert_int_equal(capstore_read(r, &sel, &opt, &b, msg, sizeof msg), CS_E_OK); /* reuses it */
  check_big(&sel, &b);
  assert_int_equal(capstore_read(r, &sel, &opt, &c, msg, sizeof msg), CS_E_OK);
  check_big(&sel, &c);
  /* free b from another thread while a read runs on r */
  pthread_t t;
  capstore_payloads d;
  pthread_create(&t, NULL, free_in_thread, &b);
  assert_int_equal(capstore_read(r, &sel, &opt, &d, msg, sizeof msg), CS_E_OK);
  pthread_join(t, NULL);
  check_big(&sel, &d);
  capstore_payloads_free(&b); /* twice: a no-op */
  /* a tiny read between big ones drops the spare */
  capstore_selection one = {.watermark = sel.watermark, .count = 1, .rows = sel.rows};
  capstore_payloads tiny;
  capstore_payloads_free(&d);
  assert_int_equal(capstore_read(r, &one, &opt, &tiny, msg, sizeof msg), CS_E_OK);
  capstore_payloads_free(&tiny);
  capstore_reader_free(r);
  check_big(&sel, &c); /* payloads outlive the reader */
  capstore_payloads_free(&c);
  capstore_selection_free(&sel);
  tc_remove_all(e.root);
}

struct conc { capstore_reader *r; capstore_selection *sel; int bad; };
static void *conc_main(void *arg) {
  struct conc *c = arg;
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  opt.gap_bytes_max = 0;
  char msg[512];
  for (int k = 0; k < 20; k++) {
    capstore_payloads p;
    int rc = capstore_read(c->r, c->sel, &opt, &p, msg, sizeof msg);
    if (rc != CS_E_OK) { c->bad++; fprintf(stderr, "concurrent read: %s %s\n", cs_strerror(rc), msg); }
    else {
      uint8_t want[7 * 37 * 2];
      for (uint32_t i = 0; i < p.count; i++) {
        uint64_t n = number_of(&c->sel->rows[i]);
        tc_payload(n, want, (size_t)p.length[i]);
        if (memcmp(p.bytes[i], want, (size_t)p.length[i]) != 0) { c->bad++; fprintf(stderr, "concurrent read: record %llu differs\n", (unsigned long long)n); break; }
      }
    }
    capstore_payloads_free(&p);
  }
  return NULL;
}
/* Two threads read with one reader at once: capstore.h runs a reader's calls one at a time, so every read is whole and right. */
static void test_concurrent_same_reader(void **state) {
  (void)state;
  env e;
  capstore_reader *r = captured(&e, 300);
  capstore_selection sel;
  search_all(r, 10000, &sel);
  struct conc a = {r, &sel, 0}, b = {r, &sel, 0};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, conc_main, &a);
  pthread_create(&tb, NULL, conc_main, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  assert_int_equal(a.bad, 0);
  assert_int_equal(b.bad, 0);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  tc_remove_all(e.root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_edges), cmocka_unit_test(test_async), cmocka_unit_test(test_big_lifetimes), cmocka_unit_test(test_concurrent_same_reader)};
  return cmocka_run_group_tests_name("reader adversarial", tests, NULL, NULL);
}

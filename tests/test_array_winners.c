/*
 * rt_array_winners (src/runtime/array_common.c) over a catalog that refuses
 * reads without answering, as a ClickHouse replica behind the last quorum
 * write does (289): a real SQLite catalog behind a wrapper that answers
 * REFUSED to the first N head and array_candidates calls. Up to
 * RT_ARRAY_READ_TRIES tries of each request the walk goes on and finds the
 * array's record; past them the caller hears the catalog's words.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "array_internal.h"
#include "capstore/sqlite_catalog.h"

typedef struct flaky {
  cs_catalog inner;
  uint32_t refuse_heads, refuse_windows; /* calls still to refuse */
  uint32_t heads, windows;               /* calls seen */
  uint64_t window_cap;                   /* wider windows are answered too large, as a capped ClickHouse does */
  bool refuse_every_window;              /* every window is answered too large */
  uint64_t next_from;                    /* the slot the next answered window must start at */
  uint32_t answered, too_large, geometry_windows;
  cs_array_window last;                  /* the last window asked */
  char dir[64];
} flaky;

/* True (res answered REFUSED, as a replica behind the last quorum write answers) while refusals are left. */
static bool refused(uint32_t *left, cs_catalog_result *res) {
  if (*left == 0) return false;
  (*left)--;
  memset(res, 0, sizeof *res);
  res->outcome = CS_OUT_REFUSED;
  res->server_code = 289;
  snprintf(res->detail, sizeof res->detail, "Code: 289, replica is not up to date with quorum insert");
  return true;
}

static int f_head(void *self, const cs_uuid *lease_id, cs_cat_head *out, cs_catalog_result *res) {
  flaky *f = self;
  f->heads++;
  return refused(&f->refuse_heads, res) ? CS_E_OK : f->inner.ops->head(f->inner.self, lease_id, out, res);
}

static int f_candidates(void *self, uint64_t watermark, const cs_pack_text *array_id, const cs_array_window *window,
                        cs_array_candidate_fn fn, void *ctx, cs_catalog_result *res) {
  flaky *f = self;
  f->windows++;
  if (window != NULL) f->last = *window;
  if (window != NULL &&
      (f->refuse_every_window || (f->window_cap != 0 && window->slot_to - window->slot_from > f->window_cap))) {
    memset(res, 0, sizeof *res);
    res->outcome = CS_OUT_SERVER_ERROR;
    snprintf(res->detail, sizeof res->detail, "%s", CS_CLICKHOUSE_ANSWER_TOO_LARGE);
    f->too_large++;
    return CS_E_OK;
  }
  if (window != NULL && f->window_cap != 0) { /* answered: windows in order, contiguous, the geometry with the first */
    assert_true(window->slot_from == f->next_from);
    assert_true(window->with_geometry == (window->slot_from == 0));
    f->next_from = window->slot_to;
    f->answered++;
  }
  return refused(&f->refuse_windows, res)
             ? CS_E_OK
             : f->inner.ops->array_candidates(f->inner.self, watermark, array_id, window, fn, ctx, res);
}

static int walk_chunks(flaky *f, rt_array_walk *k, uint64_t chunks, char *msg, size_t cap) {
  static const cs_catalog_ops ops = {.head = f_head, .array_candidates = f_candidates};
  cs_catalog wrapped = {.ops = &ops, .self = f};
  bool checked = true; /* the kind check is another test's */
  memset(k, 0, sizeof *k);
  k->chunks = chunks;
  return rt_array_winners(&wrapped, &checked, "no-such-array", k, msg, cap);
}

static int walk_once(flaky *f, rt_array_walk *k, char *msg, size_t cap) { return walk_chunks(f, k, 4, msg, cap); }

static int setup(void **state) {
  flaky *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/capstore-winners-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  char path[128];
  snprintf(path, sizeof path, "%s/catalog.db", f->dir);
  assert_int_equal(cs_sqlite_catalog_open(path, 1000, &f->inner), CS_E_OK);
  cs_catalog_result res;
  assert_int_equal(f->inner.ops->schema_ensure(f->inner.self, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("schema: %s", res.detail);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  flaky *f = *state;
  f->inner.ops->close(f->inner.self);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->dir);
  free(f);
  return 0;
}

/* Refusals within the tries of each request: the walk answers, with every try counted as a request. */
static void test_refusals_within_tries(void **state) {
  flaky *f = *state;
  f->refuse_heads = RT_ARRAY_READ_TRIES - 1;
  f->refuse_windows = RT_ARRAY_READ_TRIES - 1;
  rt_array_walk k;
  char msg[256] = "";
  assert_int_equal(walk_once(f, &k, msg, sizeof msg), CS_E_OK);
  assert_false(k.have_geometry); /* nothing written: an answer, not an error */
  assert_int_equal(f->heads, RT_ARRAY_READ_TRIES);
  assert_int_equal(f->windows, RT_ARRAY_READ_TRIES);
  assert_int_equal(k.requests, 2 * RT_ARRAY_READ_TRIES);
}

/* One refusal more than the tries: the caller hears it, with the catalog's words. */
static void test_refusals_past_tries(void **state) {
  flaky *f = *state;
  f->refuse_heads = RT_ARRAY_READ_TRIES;
  rt_array_walk k;
  char msg[256] = "";
  assert_int_equal(walk_once(f, &k, msg, sizeof msg), CS_E_IO);
  assert_non_null(strstr(msg, "the catalog's head"));
  assert_non_null(strstr(msg, "289"));
  assert_int_equal(f->heads, RT_ARRAY_READ_TRIES);
  f->heads = 0;
  f->refuse_windows = RT_ARRAY_READ_TRIES;
  assert_int_equal(walk_once(f, &k, msg, sizeof msg), CS_E_IO);
  assert_non_null(strstr(msg, "the catalog's candidates"));
  assert_int_equal(f->windows, RT_ARRAY_READ_TRIES);
}

/*
 * An answer too large for the adapter (a capped ClickHouse answer: adapter.clickhouse's
 * test_answer_too_large_windows shows the refusal) is asked again in halves until it fits; the windows then
 * cover every slot once, in order. One slot too large for any answer is the caller's error.
 */
static void test_windows_halved(void **state) {
  flaky *f = *state;
  f->window_cap = 5000;
  rt_array_walk k;
  char msg[256] = "";
  assert_int_equal(walk_chunks(f, &k, 100000, msg, sizeof msg), CS_E_OK);
  /* 32768 -> 16384 -> 8192 -> 4096 slots: three refusals, then 4096-slot windows to the end. */
  assert_int_equal(f->too_large, 3);
  assert_int_equal(f->answered, (100000 + 4095) / 4096);
  assert_true(f->next_from == 100000);
  assert_int_equal(k.requests, 1 + f->too_large + f->answered);
  f->window_cap = 0;
  f->windows = f->too_large = f->answered = 0;
  f->next_from = 0;
  assert_int_equal(walk_chunks(f, &k, 100000, msg, sizeof msg), CS_E_OK); /* uncapped: 4 windows of 32768 */
  assert_int_equal(f->windows, (100000 + RT_ARRAY_WINDOW_SLOTS - 1) / RT_ARRAY_WINDOW_SLOTS);
  /* No window fits: halved down to one slot (15 halvings from 32768), then refused with the adapter's words. */
  f->refuse_every_window = true;
  f->windows = f->too_large = 0;
  assert_int_equal(walk_chunks(f, &k, 100000, msg, sizeof msg), CS_E_IO);
  assert_int_equal(f->too_large, 16);
  assert_non_null(strstr(msg, CS_CLICKHOUSE_ANSWER_TOO_LARGE));
}

/* A walk of one slot (a writer asking whether a stale claim's slot is written) is one window, whatever the size. */
static void test_one_slot_window(void **state) {
  flaky *f = *state;
  static const cs_catalog_ops ops = {.head = f_head, .array_candidates = f_candidates};
  cs_catalog wrapped = {.ops = &ops, .self = f};
  bool checked = true;
  rt_array_walk k;
  memset(&k, 0, sizeof k);
  k.chunks = 100000;
  k.slot_from = 70000;
  k.slot_to = 70001;
  char msg[256] = "";
  assert_int_equal(rt_array_winners(&wrapped, &checked, "no-such-array", &k, msg, sizeof msg), CS_E_OK);
  assert_int_equal(f->heads, 1);
  assert_int_equal(f->windows, 1);
  assert_true(f->last.with_geometry && f->last.slot_from == 70000 && f->last.slot_to == 70001);
  assert_int_equal(k.requests, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_refusals_within_tries, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refusals_past_tries, setup, teardown),
      cmocka_unit_test_setup_teardown(test_windows_halved, setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_slot_window, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

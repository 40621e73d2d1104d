/*
 * The catalog conformance suite against the SQLite catalog, with a second
 * connection to the same file and the versioned table names checked; plus
 * what only an embedded catalog has: two connections racing for the lease.
 */
#include "capstore/sqlite_catalog.h"
#include "conformance_catalog.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct fixture {
  char dir[256];
  unsigned counter;
  char path[512];
} fixture;

static fixture fx;

static cs_catalog *catalog_at(const char *path) {
  cs_catalog *catalog = calloc(1, sizeof *catalog);
  if (catalog == NULL || cs_sqlite_catalog_open(path, 2000, catalog) != CS_E_OK) {
    free(catalog);
    return NULL;
  }
  return catalog;
}

static void remove_db(const char *path) {
  char side[600];
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

static cs_catalog *catalog_open(void *ctx) {
  fixture *f = ctx;
  snprintf(f->path, sizeof f->path, "%s/catalog-%u.db", f->dir, f->counter++);
  return catalog_at(f->path);
}

static void catalog_close_only(cs_catalog *catalog, void *ctx) {
  (void)ctx;
  catalog->ops->close(catalog->self);
  free(catalog);
}

static void catalog_close(cs_catalog *catalog, void *ctx) {
  fixture *f = ctx;
  catalog_close_only(catalog, ctx);
  remove_db(f->path);
}

static cs_catalog *catalog_reopen(cs_catalog *first, void *ctx) {
  (void)first;
  return catalog_at(((fixture *)ctx)->path);
}

static bool schema_versioned(cs_catalog *catalog, void *ctx) {
  (void)ctx;
  char names[1024];
  if (cs_sqlite_catalog_tables(catalog, names, sizeof names) != CS_E_OK) return false;
  char suffix[16];
  snprintf(suffix, sizeof suffix, "_v%u", CS_CATALOG_SCHEMA_VERSION);
  unsigned tables = 0;
  for (char *name = strtok(names, ","); name != NULL; name = strtok(NULL, ",")) {
    size_t len = strlen(name), slen = strlen(suffix);
    if (len < slen || strcmp(name + len - slen, suffix) != 0) return false;
    tables++;
  }
  return tables == 5;
}

static const cs_uuid lease_a = {{0xa0, 1}}, lease_b = {{0xb0, 1}};

/* Two connections: a claim on one is seen by the other, and the fence holds across them. */
static void test_two_connections(void **state) {
  (void)state;
  cs_catalog *one = catalog_open(&fx), *two = catalog_reopen(one, &fx);
  if (one == NULL || two == NULL) {
    fail();
    return;
  }
  cs_catalog_result res;
  assert_int_equal(one->ops->schema_ensure(one->self, &res), CS_E_OK);
  assert_int_equal(two->ops->schema_ensure(two->self, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(one->ops->claim(one->self, &lease_a, 0, 30 * CS_SEC_NS, &res), CS_E_OK);
  assert_int_equal(two->ops->claim(two->self, &lease_b, 0, 30 * CS_SEC_NS, &res), CS_E_OK);
  cs_claims claims;
  assert_int_equal(two->ops->read_claims(two->self, &lease_b, 1, &claims, &res), CS_E_OK);
  assert_int_equal(claims.claim_count, 1);
  assert_false(claims.sole_mine);
  assert_int_equal(two->ops->publish(two->self, &lease_b, 0, 1, 1, 0, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK); /* fenced out: OK, no row */
  cs_cat_head head;
  assert_int_equal(one->ops->head(one->self, &lease_a, &head, &res), CS_E_OK);
  assert_int_equal(head.watermark, 0);
  assert_int_equal(one->ops->publish(one->self, &lease_a, 0, 1, 1, 0, &res), CS_E_OK);
  assert_int_equal(two->ops->head(two->self, &lease_b, &head, &res), CS_E_OK);
  assert_int_equal(head.watermark, 1);
  catalog_close_only(two, &fx);
  catalog_close(one, &fx);
}

/*
 * Six processes, each on its own connection, run the claim protocol at once:
 * exactly one ends as the sole holder of term 1; the others see it taken.
 */
static void test_claim_race(void **state) {
  (void)state;
  cs_catalog *setup_c = catalog_open(&fx);
  if (setup_c == NULL) {
    fail();
    return;
  }
  cs_catalog_result res;
  assert_int_equal(setup_c->ops->schema_ensure(setup_c->self, &res), CS_E_OK);
  enum { RACERS = 6 };
  pid_t pids[RACERS];
  for (int i = 0; i < RACERS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      cs_catalog *c = catalog_at(fx.path);
      cs_uuid lease = {{(uint8_t)(0x10 + i), 2}};
      cs_cat_head head;
      cs_claims claims = {0};
      if (c == NULL || c->ops->head(c->self, &lease, &head, &res) != CS_E_OK || res.outcome != CS_OUT_OK) _exit(3);
      if (!head.head_free) _exit(1);
      if (c->ops->claim(c->self, &lease, head.head_term, 30 * CS_SEC_NS, &res) != CS_E_OK || res.outcome != CS_OUT_OK)
        _exit(3);
      if (c->ops->read_claims(c->self, &lease, head.head_term + 1, &claims, &res) != CS_E_OK) _exit(3);
      _exit(claims.sole_mine ? 0 : 1);
    }
  }
  int holders = 0;
  for (int i = 0; i < RACERS; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_true(WEXITSTATUS(status) <= 1);
    holders += WEXITSTATUS(status) == 0;
  }
  assert_int_equal(holders, 1);
  cs_claims claims;
  assert_int_equal(setup_c->ops->read_claims(setup_c->self, &lease_a, 1, &claims, &res), CS_E_OK);
  assert_int_equal(claims.claim_count, 1);
  catalog_close(setup_c, &fx);
}

/* The negative twins of open: no path, and a path SQLite cannot open. */
static void test_open_refused(void **state) {
  (void)state;
  cs_catalog c;
  assert_int_equal(cs_sqlite_catalog_open("", 0, &c), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_sqlite_catalog_open("/nonexistent-dir/x/catalog.db", 0, &c), CS_E_IO);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(fx.dir, sizeof fx.dir, "%s/capstore-sqlite-XXXXXX", tmp != NULL ? tmp : "/tmp");
  if (mkdtemp(fx.dir) == NULL) return 1;
  conformance_catalog_backend backend = {.open_fn = catalog_open,
                                         .close_fn = catalog_close,
                                         .reopen_fn = catalog_reopen,
                                         .close_second_fn = catalog_close_only,
                                         .schema_versioned_fn = schema_versioned,
                                         .ctx = &fx};
  int failed = conformance_catalog_run_backend("sqlite catalog", &backend);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_connections), cmocka_unit_test(test_open_refused),
                                     cmocka_unit_test(test_claim_race)};
  failed += cmocka_run_group_tests_name("sqlite only", tests, NULL, NULL);
  if (failed == 0) rmdir(fx.dir);
  return failed == 0 ? 0 : 1;
}

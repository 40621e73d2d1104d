/*
 * The catalog conformance suite against the SQLite catalog, with a second
 * connection to the same file and the versioned table names checked; plus
 * what only an embedded catalog has: two connections racing for the lease.
 */
#include "capstore/sqlite_catalog.h"
#include "conformance_catalog.h"

#include <sqlite3.h>

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

/* Runs one statement on the catalog's file beside the adapter: another writer's rows. */
static void sql_beside(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", sql, err);
  assert_int_equal(sqlite3_changes(db), 1);
  sqlite3_close(db);
}

/* Indexes and publishes a one-record pack with key "cat/ok.dmi-pack" at version 1 under lease_a. */
static void index_one(cs_catalog *c, cs_pack_ref *ref, cs_pack_record *rec) {
  memset(ref, 0, sizeof *ref);
  ref->pack_id.bytes[0] = 0x42;
  ref->record_count = 1;
  assert_int_equal(cs_pack_ref_set_key(ref, "cat/ok.dmi-pack", 15), CS_E_OK);
  cs_pack_meta *m = &rec->meta;
  cs_pack_meta given = *m; /* the caller's texts stay; the others are "t" */
  memset(rec, 0, sizeof *rec);
  const char *texts = "t";
  m->capture_id = cs_pack_text_of("c0");
  m->tenant_id = m->experiment_id = m->run_id = m->session_id = m->request_id = cs_pack_text_of(texts);
  m->sequence_id = m->model_id = m->model_revision = m->capture_policy_version = m->hook_name = cs_pack_text_of(texts);
  if (given.tenant_id.bytes != NULL) m->tenant_id = given.tenant_id;
  m->adapter_revision = given.adapter_revision;
  m->dtype = CS_DTYPE_FLOAT32;
  cs_catalog_result res;
  assert_int_equal(c->ops->schema_ensure(c->self, &res), CS_E_OK);
  assert_int_equal(c->ops->claim(c->self, &lease_a, 0, 30 * CS_SEC_NS, &res), CS_E_OK);
  cs_index_pack batch = {.ref = ref, .records = rec, .record_count = 1};
  assert_int_equal(c->ops->index(c->self, &lease_a, 0, 1, &batch, 1, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(c->ops->publish(c->self, &lease_a, 0, 1, 1, 1, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

/* Reads pack ref's descriptors at watermark 1 expecting a refusal whose detail holds `what`. */
static void read_refused(cs_catalog *c, const cs_pack_ref *ref, const char *what) {
  cs_descriptor_row rows[2];
  uint32_t count = 99;
  cs_catalog_result res;
  assert_int_equal(c->ops->read_descriptors(c->self, 1, &ref->pack_id, rows, 2, &count, &res), CS_E_OK);
  if (res.outcome == CS_OUT_OK || count != 0 || strstr(res.detail, what) == NULL)
    fail_msg("outcome %d, %u rows (key '%s'), detail '%s': want a refusal naming '%s'", (int)res.outcome, count,
             count > 0 ? rows[0].key : "", res.detail, what);
}

/* The one value `select` answers on the catalog's file beside the adapter, as text. */
static void sql_value(const char *path, const char *select, char *out, size_t cap) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  if (sqlite3_prepare_v2(db, select, -1, &st, NULL) != SQLITE_OK) fail_msg("%s: %s", select, sqlite3_errmsg(db));
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
}

/* Reads pack ref's one descriptor at watermark 1 into row. */
static void read_one(cs_catalog *c, const cs_pack_ref *ref, cs_descriptor_row *row) {
  uint32_t count = 0;
  cs_catalog_result res;
  assert_int_equal(c->ops->read_descriptors(c->self, 1, &ref->pack_id, row, 1, &count, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK || count != 1)
    fail_msg("outcome %d, %u rows, detail '%s'", (int)res.outcome, count, res.detail);
}

/*
 * A row this adapter would never write (another writer's, or an older
 * version's): a key holding a NUL byte, or too long for CS_KEY_MAX, is
 * refused on read, never cut into a different key; so is a dtype that is one
 * only up to a NUL. A text holding a NUL is another matter: U+0000 is a
 * valid text character, so it reads back whole. The clean row reads back
 * first, the twin of each refusal.
 */
static void test_foreign_rows(void **state) {
  (void)state;
  cs_catalog *c = catalog_open(&fx);
  assert_non_null(c);
  cs_pack_ref ref;
  cs_pack_record rec;
  memset(&rec, 0, sizeof rec);
  index_one(c, &ref, &rec);
  cs_descriptor_row row;
  read_one(c, &ref, &row);
  assert_string_equal(row.key, "cat/ok.dmi-pack");
  sql_beside(fx.path, "UPDATE cs_descriptor_v1 SET object_key = CAST(X'6361742F6F6B002E2E2F78' AS TEXT)");
  read_refused(c, &ref, "key holds a NUL byte");
  char sql[CS_KEY_MAX + 128];
  snprintf(sql, sizeof sql, "UPDATE cs_descriptor_v1 SET object_key = '%0*d'", (int)CS_KEY_MAX, 0);
  sql_beside(fx.path, sql);
  read_refused(c, &ref, "key is longer");
  sql_beside(fx.path,
             "UPDATE cs_descriptor_v1 SET object_key = 'cat/ok.dmi-pack', dtype = CAST(X'666C6F61743332007A' AS TEXT)");
  read_refused(c, &ref, "dtype is unknown"); /* "float32" and a NUL */
  sql_beside(fx.path, "UPDATE cs_descriptor_v1 SET dtype = 'float32', tenant_id = CAST(X'610062' AS TEXT), "
                      "hook_name = CAST(X'00' AS TEXT)");
  read_one(c, &ref, &row);
  assert_int_equal(row.record.meta.tenant_id.len, 3);
  assert_memory_equal(row.record.meta.tenant_id.bytes, "a\0b", 3);
  assert_int_equal(row.record.meta.hook_name.len, 1);
  assert_int_equal(row.record.meta.hook_name.bytes[0], '\0');
  catalog_close(c, &fx);
}

/* INDEX binds every text with its length: SQLite holds each byte, NULs included (read beside the adapter). */
static void test_nul_text_stored_whole(void **state) {
  (void)state;
  cs_catalog *c = catalog_open(&fx);
  assert_non_null(c);
  cs_pack_ref ref;
  cs_pack_record rec;
  memset(&rec, 0, sizeof rec);
  rec.meta.tenant_id = (cs_pack_text){"\0a\0b\0", 5};
  rec.meta.adapter_revision = (cs_pack_text){"\0", 1};
  index_one(c, &ref, &rec);
  char hex[64];
  sql_value(fx.path, "SELECT hex(tenant_id) || '/' || typeof(tenant_id) FROM cs_descriptor_v1", hex, sizeof hex);
  assert_string_equal(hex, "0061006200/text");
  sql_value(fx.path, "SELECT hex(adapter_revision) FROM cs_descriptor_v1", hex, sizeof hex);
  assert_string_equal(hex, "00");
  catalog_close(c, &fx);
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
                                     cmocka_unit_test(test_claim_race), cmocka_unit_test(test_foreign_rows),
                                     cmocka_unit_test(test_nul_text_stored_whole)};
  failed += cmocka_run_group_tests_name("sqlite only", tests, NULL, NULL);
  if (failed == 0) rmdir(fx.dir);
  return failed == 0 ? 0 : 1;
}

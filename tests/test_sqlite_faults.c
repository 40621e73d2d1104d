/*
 * The SQLite catalog under failing I/O, in the SQLite style: a VFS shim (the
 * default VFS wrapped, registered as the default) counts every open, read,
 * write, truncate, sync and delete, and a run fails the Nth, for every N
 * until a run completes without reaching N: once, persistently, and as a
 * crash (a torn write, then every call fails and the connection is dropped).
 *
 * The workload is the publisher's protocol: claim, INDEX v1 (two packs),
 * PUBLISH v1, INDEX v2 (a third), REJECT a fourth, PUBLISH v2. Each answer
 * tells whether the primitive applied: OK yes; THROTTLED, FORBIDDEN,
 * INVALID, TOO_LARGE no (the core counts on that); SERVER_ERROR, UNKNOWN,
 * TIMEOUT either (cs_outcome_maybe_applied). Afterwards a catalog on the real
 * calls must show a state some combination of those answers explains (head
 * term, watermark, held and rejected packs), and the database must pass
 * PRAGMA integrity_check.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "test_fs_util.h"

#include "capstore/sqlite_catalog.h"

/* ---- The fault VFS ---- */

enum fault_mode { FAULT_OFF = 0, FAULT_ONCE, FAULT_PERSISTENT, FAULT_CRASH };

static struct {
  enum fault_mode mode;
  long fail_at, calls, fired;
} fv;

static bool fault_now(void) {
  fv.calls++;
  bool fail = false;
  if (fv.mode == FAULT_ONCE) fail = fv.calls == fv.fail_at;
  else if (fv.mode != FAULT_OFF) fail = fv.calls >= fv.fail_at;
  fv.fired += fail;
  return fail;
}

static sqlite3_vfs *real_vfs;
static sqlite3_vfs fault_vfs;

typedef struct fault_file {
  sqlite3_file base;
  sqlite3_file *real; /* the real VFS's file, right after this struct */
} fault_file;

#define REAL_FILE(f) (((fault_file *)(f))->real)

static int ff_close(sqlite3_file *f) { return REAL_FILE(f)->pMethods->xClose(REAL_FILE(f)); }
static int ff_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
  return fault_now() ? SQLITE_IOERR_READ : REAL_FILE(f)->pMethods->xRead(REAL_FILE(f), buf, n, off);
}
static int ff_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
  bool crash_point = fv.mode == FAULT_CRASH && fv.calls + 1 == fv.fail_at;
  if (!fault_now()) return REAL_FILE(f)->pMethods->xWrite(REAL_FILE(f), buf, n, off);
  if (crash_point && n > 1) (void)REAL_FILE(f)->pMethods->xWrite(REAL_FILE(f), buf, n / 2, off); /* torn */
  return SQLITE_IOERR_WRITE;
}
static int ff_truncate(sqlite3_file *f, sqlite3_int64 size) {
  return fault_now() ? SQLITE_IOERR_TRUNCATE : REAL_FILE(f)->pMethods->xTruncate(REAL_FILE(f), size);
}
/* A sync is counted and failed like every call; a success does not reach the disk (process crashes keep the page cache). */
static int ff_sync(sqlite3_file *f, int flags) {
  (void)f;
  (void)flags;
  return fault_now() ? SQLITE_IOERR_FSYNC : SQLITE_OK;
}
static int ff_file_size(sqlite3_file *f, sqlite3_int64 *size) {
  return REAL_FILE(f)->pMethods->xFileSize(REAL_FILE(f), size);
}
static int ff_lock(sqlite3_file *f, int level) { return REAL_FILE(f)->pMethods->xLock(REAL_FILE(f), level); }
static int ff_unlock(sqlite3_file *f, int level) { return REAL_FILE(f)->pMethods->xUnlock(REAL_FILE(f), level); }
static int ff_check_reserved(sqlite3_file *f, int *out) {
  return REAL_FILE(f)->pMethods->xCheckReservedLock(REAL_FILE(f), out);
}
static int ff_file_control(sqlite3_file *f, int op, void *arg) {
  return REAL_FILE(f)->pMethods->xFileControl(REAL_FILE(f), op, arg);
}
static int ff_sector_size(sqlite3_file *f) { return REAL_FILE(f)->pMethods->xSectorSize(REAL_FILE(f)); }
static int ff_device(sqlite3_file *f) { return REAL_FILE(f)->pMethods->xDeviceCharacteristics(REAL_FILE(f)); }
static int ff_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **out) {
  return REAL_FILE(f)->pMethods->xShmMap(REAL_FILE(f), region, size, extend, out);
}
static int ff_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
  return REAL_FILE(f)->pMethods->xShmLock(REAL_FILE(f), offset, n, flags);
}
static void ff_shm_barrier(sqlite3_file *f) { REAL_FILE(f)->pMethods->xShmBarrier(REAL_FILE(f)); }
static int ff_shm_unmap(sqlite3_file *f, int delete_flag) {
  return REAL_FILE(f)->pMethods->xShmUnmap(REAL_FILE(f), delete_flag);
}

static const sqlite3_io_methods fault_methods = {
    .iVersion = 2, /* no xFetch: every page read goes through xRead */
    .xClose = ff_close, .xRead = ff_read, .xWrite = ff_write, .xTruncate = ff_truncate, .xSync = ff_sync,
    .xFileSize = ff_file_size, .xLock = ff_lock, .xUnlock = ff_unlock, .xCheckReservedLock = ff_check_reserved,
    .xFileControl = ff_file_control, .xSectorSize = ff_sector_size, .xDeviceCharacteristics = ff_device,
    .xShmMap = ff_shm_map, .xShmLock = ff_shm_lock, .xShmBarrier = ff_shm_barrier, .xShmUnmap = ff_shm_unmap,
};

static int fv_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
  (void)vfs;
  fault_file *f = (fault_file *)file;
  f->base.pMethods = NULL;
  f->real = (sqlite3_file *)(f + 1);
  if (fault_now()) return SQLITE_CANTOPEN;
  int rc = real_vfs->xOpen(real_vfs, name, f->real, flags, out_flags);
  if (rc == SQLITE_OK && f->real->pMethods != NULL) f->base.pMethods = &fault_methods;
  return rc;
}

static int fv_delete(sqlite3_vfs *vfs, const char *name, int sync_dir) {
  (void)vfs;
  return fault_now() ? SQLITE_IOERR_DELETE : real_vfs->xDelete(real_vfs, name, sync_dir);
}

static void fault_vfs_install(void) {
  if (real_vfs != NULL) return;
  real_vfs = sqlite3_vfs_find(NULL);
  assert_non_null(real_vfs);
  fault_vfs = *real_vfs;
  fault_vfs.zName = "capstore-fault";
  fault_vfs.szOsFile = (int)sizeof(fault_file) + real_vfs->szOsFile;
  fault_vfs.xOpen = fv_open;
  fault_vfs.xDelete = fv_delete;
  fault_vfs.pNext = NULL;
  assert_int_equal(sqlite3_vfs_register(&fault_vfs, 1), SQLITE_OK); /* the default: the catalog opens with it */
}

/* ---- The workload and what each answer allows ---- */

enum { OPS = 6, PACKS = 4 };
enum { OP_CLAIM, OP_INDEX1, OP_PUBLISH1, OP_INDEX2, OP_REJECT, OP_PUBLISH2 };
static const char *const op_names[OPS] = {"claim", "index v1", "publish v1", "index v2", "reject", "publish v2"};

static const cs_uuid lease = {{0xa0, 1, 2, 3, 4, 5, 0x70, 7, 8, 9, 10, 11, 12, 13, 14, 15}};

typedef struct test_pack {
  cs_pack_ref ref;
  cs_pack_record record;
} test_pack;

static test_pack packs[PACKS];

static void packs_make(void) {
  for (int p = 0; p < PACKS; p++) {
    test_pack *t = &packs[p];
    memset(t, 0, sizeof *t);
    for (int i = 0; i < 16; i++) t->ref.pack_id.bytes[i] = (uint8_t)(0x40 + p * 16 + i);
    t->ref.pack_id.bytes[6] = 0x70;
    t->ref.created_at_ns = 1764000000000000000u + (uint64_t)p;
    t->ref.size_bytes = 4096;
    t->ref.index_bytes = 500;
    t->ref.record_count = 1;
    char key[96];
    snprintf(key, sizeof key, "faults/v1/tenant=t/date=2026-11-30/session=s/rank=0/p%d.dmi-pack", p);
    assert_int_equal(cs_pack_ref_set_key(&t->ref, key, strlen(key)), CS_E_OK);
    cs_pack_meta *m = &t->record.meta;
    static char ids[PACKS][16];
    snprintf(ids[p], sizeof ids[p], "cap-%d", p);
    m->capture_id = cs_pack_text_of(ids[p]);
    const cs_pack_text text = cs_pack_text_of("x");
    m->tenant_id = m->experiment_id = m->run_id = m->session_id = m->request_id = m->sequence_id = text;
    m->model_id = m->model_revision = m->capture_policy_version = m->hook_name = text;
    m->adapter_revision = cs_pack_text_of(NULL);
    m->dtype = CS_DTYPE_UINT8;
    m->rank = 1;
    m->shape[0] = 16;
    t->record.offset = 64;
    t->record.stored_length = t->record.decoded_length = 16;
  }
}

/* allowed[op]: bit 0 "did not apply", bit 1 "applied". */
static unsigned allowed_of(const cs_catalog_result *res) {
  if (res->outcome == CS_OUT_OK) return 2u;
  return cs_outcome_maybe_applied(res->outcome) ? 3u : 1u;
}

static void workload(cs_catalog *cat, unsigned allowed[OPS]) {
  const uint64_t margin = 200 * CS_MS_NS;
  cs_catalog_result res;
  cs_index_pack batch[2] = {{&packs[0].ref, &packs[0].record, 1}, {&packs[1].ref, &packs[1].record, 1}};
  cs_index_pack third = {&packs[2].ref, &packs[2].record, 1};
  assert_int_equal(cat->ops->claim(cat->self, &lease, 0, 600 * CS_SEC_NS, &res), CS_E_OK);
  allowed[OP_CLAIM] = allowed_of(&res);
  assert_int_equal(cat->ops->index(cat->self, &lease, margin, 1, batch, 2, &res), CS_E_OK);
  allowed[OP_INDEX1] = allowed_of(&res);
  assert_int_equal(cat->ops->publish(cat->self, &lease, margin, 1, 1, 2, &res), CS_E_OK);
  allowed[OP_PUBLISH1] = allowed_of(&res);
  assert_int_equal(cat->ops->index(cat->self, &lease, margin, 2, &third, 1, &res), CS_E_OK);
  allowed[OP_INDEX2] = allowed_of(&res);
  assert_int_equal(cat->ops->reject(cat->self, &lease, margin, &packs[3].ref.pack_id, 1, &res), CS_E_OK);
  allowed[OP_REJECT] = allowed_of(&res);
  assert_int_equal(cat->ops->publish(cat->self, &lease, margin, 2, 1, 1, &res), CS_E_OK);
  allowed[OP_PUBLISH2] = allowed_of(&res);
}

typedef struct observed {
  uint64_t head_term, watermark;
  bool held[PACKS], rejected[PACKS];
} observed;

/* What the catalog shows when exactly the ops in `applied` (bit per op) applied. A fenced write needs the claim. */
static observed predicted(unsigned applied) {
  observed o;
  memset(&o, 0, sizeof o);
  bool claim = applied & (1u << OP_CLAIM);
  bool on = claim;
  o.head_term = claim ? 1 : 0;
  if (on && (applied & (1u << OP_PUBLISH1))) o.watermark = 1;
  if (on && (applied & (1u << OP_PUBLISH2))) o.watermark = 2;
  bool index1 = on && (applied & (1u << OP_INDEX1)), index2 = on && (applied & (1u << OP_INDEX2));
  o.held[0] = o.held[1] = index1 && o.watermark >= 1;
  o.held[2] = index2 && o.watermark >= 2;
  o.rejected[3] = on && (applied & (1u << OP_REJECT));
  return o;
}

static bool explains(const unsigned allowed[OPS], const observed *seen) {
  for (unsigned applied = 0; applied < (1u << OPS); applied++) {
    bool consistent = true;
    for (int op = 0; op < OPS; op++) consistent = consistent && (allowed[op] & (((applied >> op) & 1u) ? 2u : 1u));
    if (!consistent) continue;
    observed o = predicted(applied);
    if (o.head_term == seen->head_term && o.watermark == seen->watermark &&
        memcmp(o.held, seen->held, sizeof o.held) == 0 && memcmp(o.rejected, seen->rejected, sizeof o.rejected) == 0)
      return true;
  }
  return false;
}

static void check_after(const char *path, const unsigned allowed[OPS], const char *what) {
  enum fault_mode mode = fv.mode;
  fv.mode = FAULT_OFF;
  cs_catalog cat;
  assert_int_equal(cs_sqlite_catalog_open(path, 1000, &cat), CS_E_OK);
  cs_catalog_result res;
  assert_int_equal(cat.ops->schema_ensure(cat.self, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("%s: schema after the run: %s %s", what, cs_outcome_name(res.outcome), res.detail);
  observed seen;
  memset(&seen, 0, sizeof seen);
  cs_cat_head head;
  assert_int_equal(cat.ops->head(cat.self, &lease, &head, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  seen.head_term = head.head_term;
  seen.watermark = head.watermark;
  cs_uuid ids[PACKS];
  for (int p = 0; p < PACKS; p++) ids[p] = packs[p].ref.pack_id;
  assert_int_equal(cat.ops->committed(cat.self, ids, PACKS, seen.held, seen.rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  if (!explains(allowed, &seen)) {
    char answers[256] = "";
    for (int op = 0; op < OPS; op++) {
      size_t n = strlen(answers);
      snprintf(answers + n, sizeof answers - n, "%s%s=%s", op ? ", " : "", op_names[op],
               allowed[op] == 2u ? "applied" : allowed[op] == 1u ? "not applied" : "either");
    }
    fail_msg("%s: head term %llu, watermark %llu, held %d%d%d, rejected %d: no combination of the answers (%s) "
             "explains it", what, (unsigned long long)seen.head_term, (unsigned long long)seen.watermark,
             seen.held[0], seen.held[1], seen.held[2], seen.rejected[3], answers);
  }
  cat.ops->close(cat.self);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  const char *verdict = (const char *)sqlite3_column_text(st, 0);
  if (strcmp(verdict, "ok") != 0) fail_msg("%s: integrity_check: %s", what, verdict);
  sqlite3_finalize(st);
  sqlite3_close(db);
  fv.mode = mode;
}

static void run_mode(enum fault_mode mode, const char *name) {
  fault_vfs_install();
  packs_make();
  long runs = 0, with_fault = 0;
  for (long n = 1;; n++) {
    char *dir = tf_temp_dir("sqlite-faults");
    char path[512];
    snprintf(path, sizeof path, "%s/catalog.db", dir);
    fv.mode = FAULT_OFF;
    cs_catalog cat;
    assert_int_equal(cs_sqlite_catalog_open(path, 1000, &cat), CS_E_OK);
    cs_catalog_result res;
    assert_int_equal(cat.ops->schema_ensure(cat.self, &res), CS_E_OK);
    assert_int_equal(res.outcome, CS_OUT_OK);
    fv.mode = mode;
    fv.fail_at = n;
    fv.calls = 0;
    fv.fired = 0;
    unsigned allowed[OPS];
    workload(&cat, allowed);
    long fired = fv.fired;
    cat.ops->close(cat.self); /* after a crash every call fails: nothing more reaches the files */
    char what[64];
    snprintf(what, sizeof what, "%s fault at I/O call %ld", name, n);
    check_after(path, allowed, what);
    tf_remove_tree(dir);
    runs++;
    with_fault += fired > 0;
    if (fired == 0) break;
  }
  fv.mode = FAULT_OFF;
  printf("  %s: %ld runs, %ld with a fault\n", name, runs, with_fault);
  assert_true(runs > 10);
}

static void test_fail_once(void **state) {
  (void)state;
  run_mode(FAULT_ONCE, "once");
}

static void test_fail_persistent(void **state) {
  (void)state;
  run_mode(FAULT_PERSISTENT, "persistent");
}

static void test_crash(void **state) {
  (void)state;
  run_mode(FAULT_CRASH, "crash");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fail_once),
      cmocka_unit_test(test_fail_persistent),
      cmocka_unit_test(test_crash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

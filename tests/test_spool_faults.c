/*
 * Fault injection for the spool, in the SQLite style: every system call the
 * spool makes goes through a counting table; a run fails the Nth call, for
 * every N until a run completes without reaching N, in three modes:
 *   once        only call N fails;
 *   persistent  call N and every later one fail;
 *   crash       call N tears (a write writes half its bytes) and every
 *               later call fails, and nothing is cleaned up: the process
 *               "died" there (descriptors are still released, as at exit).
 * After each run a fresh handle with the real system calls runs recovery
 * and the test checks: every pack whose seal succeeded is ready and byte-
 * identical, every ready pack is complete and one we wrote, nothing was
 * quarantined that was good, and no temp file is left.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_fault_sys.h"
#include "test_fs_util.h"

#include "capstore/spool.h"
#include "test_pack_util.h"

/* Each test runs twice: through the page cache (the spool's default) and with direct_io. */
static bool direct_mode;
static cs_spool_options clean_options = {.sys = &faulty}; /* used with FAULT_OFF */


/* ---- Helpers ---- */

static tp_bytes build_pack(cs_uuid id, uint32_t count, uint32_t length, uint8_t salt) {
  tp_bytes out = {0};
  cs_pack_writer_config config = {.pack_id = id, .created_at_ns = 1717171717000000000u + salt,
                                  .write = tp_write, .write_context = &out};
  cs_pack_writer *w = NULL;
  assert_int_equal(cs_pack_writer_open(&config, &w, NULL), CS_E_OK);
  uint8_t *payload = malloc(length + 1);
  for (uint32_t i = 0; i < count; i++) {
    char cid[32];
    snprintf(cid, sizeof cid, "cap-%u", i);
    cs_pack_meta m = tp_meta(cid, length);
    for (uint32_t j = 0; j < length; j++) payload[j] = (uint8_t)(salt * 13 + i * 7 + j);
    assert_int_equal(cs_pack_writer_add_record(w, &m, payload, length, NULL), CS_E_OK);
  }
  free(payload);
  assert_int_equal(cs_pack_writer_finish(w, NULL, NULL), CS_E_OK);
  cs_pack_writer_free(w);
  return out;
}

#define PACKS 3

typedef struct fixture {
  tp_bytes packs[PACKS];
  char names[PACKS][CS_SPOOL_NAME_MAX + 1];
} fixture;

static void fixture_init(fixture *f) {
  /* One small, one past the spool's 1 MiB write buffer, one medium. */
  f->packs[0] = build_pack(tf_pack_id(1), 3, 100, 1);
  f->packs[1] = build_pack(tf_pack_id(2), 2, 700 * 1024, 2);
  f->packs[2] = build_pack(tf_pack_id(3), 5, 4000, 3);
  for (int i = 0; i < PACKS; i++) {
    cs_pack_summary s;
    assert_int_equal(cs_pack_verify_buffer(f->packs[i].data, f->packs[i].len, &s, NULL), CS_E_OK);
    cs_spool_ready_name(&s.pack_id, s.created_at_ns, s.record_count, s.sha256, f->names[i]);
  }
}

static void fixture_free(fixture *f) {
  for (int i = 0; i < PACKS; i++) tp_free(&f->packs[i]);
}

static int pack_of(const fixture *f, const char *name) {
  for (int i = 0; i < PACKS; i++) {
    if (strcmp(f->names[i], name) == 0) return i;
  }
  return -1;
}

static bool bytes_equal_file(const char *dir, const char *name, const tp_bytes *want) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *file = fopen(path, "rb");
  if (file == NULL) return false;
  uint8_t *got = malloc(want->len + 1);
  size_t n = fread(got, 1, want->len + 1, file);
  fclose(file);
  bool same = n == want->len && memcmp(got, want->data, n) == 0;
  free(got);
  return same;
}

/*
 * Recovery with the real calls, then the invariants. sealed[i]: the seal of
 * pack i succeeded (it must be there); removed[i]: its removal succeeded
 * (it must be gone).
 */
static void check_after(const char *dir, const fixture *f, const bool *sealed, const bool *removed,
                        const char *what) {
  fault_arm(FAULT_OFF, 0);
  cs_spool *spool = NULL;
  char msg[256];
  int rc = cs_spool_open(dir, &clean_options, &spool, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("%s: reopen: %s", what, msg);
  cs_spool_recovery report;
  rc = cs_spool_recover(spool, &report);
  if (rc != CS_E_OK) fail_msg("%s: recovery: %s", what, cs_spool_last_error(spool));
  if (report.quarantined != 0) fail_msg("%s: recovery quarantined a pack: %s", what, cs_spool_last_error(spool));
  cs_spool_entry list[PACKS + 2];
  size_t count = 0;
  assert_int_equal(cs_spool_list(spool, list, PACKS + 2, &count), CS_E_OK);
  if (count > PACKS) fail_msg("%s: %zu ready packs", what, count);
  bool present[PACKS] = {false};
  for (size_t k = 0; k < count; k++) {
    int i = pack_of(f, list[k].name);
    if (i < 0) fail_msg("%s: unknown ready pack %s", what, list[k].name);
    if (!bytes_equal_file(dir, list[k].name, &f->packs[i])) fail_msg("%s: pack %d differs", what, i);
    present[i] = true;
  }
  for (int i = 0; i < PACKS; i++) {
    if (sealed[i] && !removed[i] && !present[i]) fail_msg("%s: sealed pack %d is missing", what, i);
    if (removed[i] && present[i]) fail_msg("%s: removed pack %d came back", what, i);
  }
  if (tf_count_suffix(dir, ".open") != 0) fail_msg("%s: a temp file is left", what);
  cs_spool_close(spool);
}

/* ---- Sealing under faults ---- */

/* The workload: seal three packs, re-seal the first, remove the second. */
static void seal_workload(const char *dir, const fixture *f, bool *sealed, bool *removed) {
  cs_spool *spool = NULL;
  cs_spool_options options = {.sys = &faulty, .direct_io = direct_mode};
  if (cs_spool_open(dir, &options, &spool, NULL, 0) != CS_E_OK) return;
  for (int i = 0; i < PACKS; i++) {
    sealed[i] = cs_spool_put(spool, f->packs[i].data, f->packs[i].len, NULL, NULL) == CS_E_OK;
  }
  cs_spool_seal_result result = 0;
  bool first = sealed[0];
  if (cs_spool_put(spool, f->packs[0].data, f->packs[0].len, NULL, &result) == CS_E_OK) {
    /* Sealing the same bytes again is a no-op once the first seal succeeded. */
    if (first) assert_int_equal(result, CS_SPOOL_ALREADY);
    sealed[0] = true;
  }
  cs_pack_summary s;
  assert_int_equal(cs_pack_verify_buffer(f->packs[1].data, f->packs[1].len, &s, NULL), CS_E_OK);
  if (sealed[1]) removed[1] = cs_spool_remove(spool, &s.pack_id, NULL) == CS_E_OK;
  cs_spool_close(spool);
}

static void run_seal_faults(enum fault_mode mode) {
  fixture f;
  fixture_init(&f);
  long runs = 0;
  for (long n = 1;; n++) {
    char *dir = tf_temp_dir("faults");
    bool sealed[PACKS] = {false}, removed[PACKS] = {false};
    ft_reset(); /* a fresh directory: forget the last run's names */
    fault_arm(mode, n);
    seal_workload(dir, &f, sealed, removed);
    long calls = fi.calls;
    long fired = fi.fired;
    char what[96];
    snprintf(what, sizeof what, "seal, mode %s, fail call %ld", mode_name(mode), n);
    check_after(dir, &f, sealed, removed, what);
    tf_remove_tree(dir);
    runs++;
    if (fired == 0) {
      /* The run passed call N untouched: every call has been failed once. */
      for (int i = 0; i < PACKS; i++) assert_true(sealed[i]);
      assert_true(removed[1]);
      assert_true(calls < n);
      break;
    }
    if (n > 10000) fail_msg("runaway: %ld calls", calls);
  }
  assert_true(runs > 30); /* the workload makes dozens of calls: each one failed */
  fixture_free(&f);
}

static void test_seal_fail_once(void **state) {
  (void)state;
  run_seal_faults(FAULT_ONCE);
}

static void test_seal_fail_persistent(void **state) {
  (void)state;
  run_seal_faults(FAULT_PERSISTENT);
}

static void test_seal_crash(void **state) {
  (void)state;
  run_seal_faults(FAULT_CRASH);
}

/* ---- Recovery under faults ---- */

/* Two good packs, a torn temp file, a flipped pack and a misnamed one. */
static void recovery_setup(const char *dir, const fixture *f, tp_bytes *flipped, char *flipped_name) {
  fault_arm(FAULT_OFF, 0);
  cs_spool *spool = NULL;
  assert_int_equal(cs_spool_open(dir, &clean_options, &spool, NULL, 0), CS_E_OK);
  assert_int_equal(cs_spool_put(spool, f->packs[0].data, f->packs[0].len, NULL, NULL), CS_E_OK);
  assert_int_equal(cs_spool_put(spool, f->packs[2].data, f->packs[2].len, NULL, NULL), CS_E_OK);
  cs_spool_close(spool);
  tf_write_file(dir, ".01000000-0000-7000-8000-0000000000aa.00112233445566ff.open", f->packs[1].data,
             f->packs[1].len / 3);
  *flipped = build_pack(tf_pack_id(9), 2, 5000, 9);
  cs_pack_summary s;
  assert_int_equal(cs_pack_verify_buffer(flipped->data, flipped->len, &s, NULL), CS_E_OK);
  cs_spool_ready_name(&s.pack_id, s.created_at_ns, s.record_count, s.sha256, flipped_name);
  flipped->data[3000] ^= 0x01;
  tf_write_file(dir, flipped_name, flipped->data, flipped->len);
}

static void run_recovery_faults(enum fault_mode mode) {
  fixture f;
  fixture_init(&f);
  bool sealed[PACKS] = {true, false, true};
  bool removed[PACKS] = {false};
  for (long n = 1;; n++) {
    char *dir = tf_temp_dir("faults");
    tp_bytes flipped;
    char flipped_name[CS_SPOOL_NAME_MAX + 1];
    recovery_setup(dir, &f, &flipped, flipped_name);
    ft_reset(); /* a fresh directory: forget the last run's names */
    fault_arm(mode, n);
    cs_spool *spool = NULL;
    cs_spool_options options = {.sys = &faulty, .direct_io = direct_mode};
    if (cs_spool_open(dir, &options, &spool, NULL, 0) == CS_E_OK) {
      (void)cs_spool_recover(spool, NULL);
      cs_spool_close(spool);
    }
    long fired = fi.fired;
    char what[96];
    snprintf(what, sizeof what, "recovery, mode %s, fail call %ld", mode_name(mode), n);
    /* The clean pass quarantines the flipped pack unless the faulty pass already did. */
    fault_arm(FAULT_OFF, 0);
    cs_spool *clean = NULL;
    assert_int_equal(cs_spool_open(dir, &clean_options, &clean, NULL, 0), CS_E_OK);
    cs_spool_recovery report;
    assert_int_equal(cs_spool_recover(clean, &report), CS_E_OK);
    assert_true(report.quarantined <= 1);
    cs_spool_close(clean);
    char qname[CS_SPOOL_NAME_MAX + 16];
    snprintf(qname, sizeof qname, "%s.quarantined", flipped_name);
    if (tf_count_suffix(dir, qname) != 1) fail_msg("%s: the corrupt pack is not quarantined", what);
    if (tf_count_suffix(dir, ".quarantined") != 1) fail_msg("%s: a good pack was quarantined", what);
    check_after(dir, &f, sealed, removed, what);
    tp_free(&flipped);
    tf_remove_tree(dir);
    if (fired == 0) break;
    if (n > 10000) fail_msg("runaway");
  }
  fixture_free(&f);
}

static void test_recovery_fail_once(void **state) {
  (void)state;
  run_recovery_faults(FAULT_ONCE);
}

static void test_recovery_fail_persistent(void **state) {
  (void)state;
  run_recovery_faults(FAULT_PERSISTENT);
}

static void test_recovery_crash(void **state) {
  (void)state;
  run_recovery_faults(FAULT_CRASH);
}

/* The fault table itself: a negative twin proving a failure is visible. */
static void test_fault_is_reported(void **state) {
  (void)state;
  fixture f;
  fixture_init(&f);
  char *dir = tf_temp_dir("faults");
  cs_spool *spool = NULL;
  cs_spool_options options = {.sys = &faulty, .direct_io = direct_mode};
  fault_arm(FAULT_OFF, 0);
  assert_int_equal(cs_spool_open(dir, &options, &spool, NULL, 0), CS_E_OK);
  /* Every call of the seal fails from the first on. */
  fault_arm(FAULT_PERSISTENT, 1);
  assert_int_equal(cs_spool_put(spool, f.packs[0].data, f.packs[0].len, NULL, NULL), CS_E_IO);
  if (strstr(cs_spool_last_error(spool), "Input/output error") == NULL) {
    fail_msg("message: %s", cs_spool_last_error(spool));
  }
  fault_arm(FAULT_OFF, 0);
  cs_spool_close(spool);
  assert_int_equal(tf_count_suffix(dir, ".ready"), 0);
  tf_remove_tree(dir);
  fixture_free(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fault_is_reported),
      cmocka_unit_test(test_seal_fail_once),
      cmocka_unit_test(test_seal_fail_persistent),
      cmocka_unit_test(test_seal_crash),
      cmocka_unit_test(test_recovery_fail_once),
      cmocka_unit_test(test_recovery_fail_persistent),
      cmocka_unit_test(test_recovery_crash),
  };
  int failed = cmocka_run_group_tests_name("spool faults, page cache", tests, NULL, NULL);
  direct_mode = clean_options.direct_io = true;
  failed += cmocka_run_group_tests_name("spool faults, direct I/O", tests, NULL, NULL);
  return failed;
}

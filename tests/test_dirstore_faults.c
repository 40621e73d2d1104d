/*
 * Fault injection for dirstore, in the SQLite style of test_spool_faults.c:
 * every file-system call dirstore makes goes through the counting table of
 * test_fault_sys.h (cs_dirstore_open_with); a run fails the Nth call, for
 * every N until a run completes without reaching N, once, persistently and
 * as a crash (a torn write, then nothing more).
 * The workload creates, replaces, conditionally creates, deletes, nests and
 * reads objects. For every key the test keeps the set of states it may be in
 * (absent, or one version): an answer OK pins the state, a refusal leaves it,
 * any other answer adds the new state to the set (it may have applied).
 * During the run: an answer OK never follows a failed fsync within that
 * call; a GET or HEAD answered OK returns one allowed version, byte-exact
 * with its metadata; a LIST answered OK names every key that must exist and
 * none that cannot. After the run a store with the real calls must show
 * every key in an allowed state, byte-exact, and LIST exactly those present.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_fault_sys.h"
#include "test_fs_util.h"

#include "capstore/dirstore.h"

/* ---- Keys, versions and the states they may be in ---- */

/* Version 2 is over 1 MiB: the O_DIRECT path (two bounce-buffer pieces, the padded last one, the cut) is faulted too. */
enum { KEYS = 4, VERSIONS = 3, BYTES_MAX = (1 << 20) + 8192 };
static const char *const keys[KEYS] = {"p/a", "p/b", "q/r/s/c", "q/r/t"};

/* Version v (1..VERSIONS) of key k: its bytes and metadata. */
static size_t version_len(int k, int v) { return v == 2 ? (1u << 20) + 1000 + (size_t)k : 1000 + 37 * (size_t)(k + v); }

static void version_bytes(int k, int v, uint8_t *out) {
  size_t n = version_len(k, v);
  for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(i * 31 + (size_t)k * 7 + (size_t)v * 101);
}

static cs_object_info version_meta(int k, int v) {
  cs_object_info meta;
  memset(&meta, 0, sizeof meta);
  meta.is_pack = true;
  for (int i = 0; i < 16; i++) meta.pack_id.bytes[i] = (uint8_t)(k * 16 + v + i);
  for (int i = 0; i < 32; i++) meta.sha256[i] = (uint8_t)(k + v * i);
  meta.record_count = (uint32_t)(100 * k + v);
  meta.created_at_ns = 1764000000000000000u + (uint64_t)(k * 10 + v);
  return meta;
}

/* allowed[k]: bit 0 absent, bit v version v. */
typedef struct model {
  unsigned allowed[KEYS];
} model;

static void applied(model *m, int k, unsigned state_bit, const cs_store_result *res, bool create_only) {
  if (res->outcome == CS_OUT_OK) m->allowed[k] = state_bit;
  else if (create_only && res->outcome == CS_OUT_PRECONDITION) return; /* refused: nothing changed */
  else m->allowed[k] |= state_bit;
}

/* Which version (0: absent) the store shows for key k; fails the test on bytes or metadata that match none. */
static int observed_version(cs_store *s, int k, const model *m, const char *what, bool must_answer) {
  static uint8_t got[BYTES_MAX], want[BYTES_MAX];
  cs_object_info info;
  cs_store_result res;
  assert_int_equal(s->ops->head(s->self, keys[k], &info, &res), CS_E_OK);
  if (res.outcome == CS_OUT_NOT_FOUND) {
    if (!(m->allowed[k] & 1u)) fail_msg("%s: %s is absent; allowed states %#x", what, keys[k], m->allowed[k]);
    return 0;
  }
  if (res.outcome != CS_OUT_OK) {
    if (must_answer) fail_msg("%s: HEAD %s: %s %s", what, keys[k], cs_outcome_name(res.outcome), res.detail);
    return -1;
  }
  size_t n = 0;
  assert_int_equal(s->ops->get(s->self, keys[k], NULL, got, sizeof got, &n, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) {
    if (must_answer) fail_msg("%s: GET %s: %s %s", what, keys[k], cs_outcome_name(res.outcome), res.detail);
    return -1;
  }
  for (int v = 1; v <= VERSIONS; v++) {
    if (!(m->allowed[k] & (1u << v)) || n != version_len(k, v)) continue;
    version_bytes(k, v, want);
    cs_object_info meta = version_meta(k, v);
    if (memcmp(got, want, n) != 0) continue;
    if (info.size_bytes != n || info.record_count != meta.record_count || info.is_pack != meta.is_pack ||
        info.created_at_ns != meta.created_at_ns || memcmp(info.sha256, meta.sha256, 32) != 0 ||
        !cs_uuid_equal(&info.pack_id, &meta.pack_id)) {
      fail_msg("%s: %s holds version %d's bytes with other metadata", what, keys[k], v);
    }
    return v;
  }
  fail_msg("%s: %s holds %zu bytes that are no allowed version (allowed %#x)", what, keys[k], n, m->allowed[k]);
  return -1;
}

/* A LIST answered OK names every key that must exist and none that cannot. */
static void list_check(cs_store *s, const model *m, const char *what, bool must_answer) {
  char listed[8][CS_KEY_MAX];
  cs_list_page page = {.keys = listed, .key_capacity = 8};
  cs_store_result res;
  assert_int_equal(s->ops->list(s->self, "", "", 8, &page, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) {
    if (must_answer) fail_msg("%s: LIST: %s %s", what, cs_outcome_name(res.outcome), res.detail);
    return;
  }
  for (int k = 0; k < KEYS; k++) {
    bool found = false;
    for (uint32_t i = 0; i < page.key_count; i++) found = found || strcmp(page.keys[i], keys[k]) == 0;
    if (found && m->allowed[k] == 1u) fail_msg("%s: LIST names %s, which cannot exist", what, keys[k]);
    if (!found && !(m->allowed[k] & 1u)) fail_msg("%s: LIST (answered OK) is missing %s", what, keys[k]);
  }
  for (uint32_t i = 0; i < page.key_count; i++) {
    bool known = false;
    for (int k = 0; k < KEYS; k++) known = known || strcmp(page.keys[i], keys[k]) == 0;
    if (!known) fail_msg("%s: LIST names a foreign key %s", what, page.keys[i]);
  }
}

/* ---- The workload ---- */

static char root[512]; /* the store's root in this run */

static void durable_path(const char *what, const char *op, int k, const char *path) {
  if (!ft_clean(path)) fail_msg("%s: %s %s answered OK with %s not fsynced", what, op, k >= 0 ? keys[k] : "", path);
}

/*
 * After an answer OK what it did survives a power cut: for a PUT every name
 * from objects/ down to the object and the object's bytes, for a DELETE the
 * removal of the object's name (keys here are plain: "a/b" is a.d/b.obj).
 */
static void durable(const char *what, const char *op, int k) {
  char path[FT_PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/objects", root);
  if (strcmp(op, "PUT") == 0) durable_path(what, op, k, path);
  for (const char *seg = keys[k]; seg != NULL;) {
    const char *slash = strchr(seg, '/');
    size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
    n += snprintf(path + n, sizeof path - (size_t)n, "/%.*s%s", (int)len, seg, slash ? ".d" : ".obj");
    if (strcmp(op, "PUT") == 0 || slash == NULL) durable_path(what, op, k, path);
    seg = slash ? slash + 1 : NULL;
  }
}

static void put(cs_store *s, model *m, int k, int v, bool create_only, const char *what) {
  static uint8_t bytes[BYTES_MAX];
  version_bytes(k, v, bytes);
  cs_object_info meta = version_meta(k, v);
  cs_store_result res;
  fi.fsync_failed = false;
  assert_int_equal(s->ops->put(s->self, keys[k], bytes, version_len(k, v), &meta, create_only, &res), CS_E_OK);
  if (res.outcome == CS_OUT_OK && fi.fsync_failed) fail_msg("%s: PUT %s answered OK after a failed fsync", what, keys[k]);
  if (res.outcome == CS_OUT_OK) durable(what, "PUT", k);
  applied(m, k, 1u << v, &res, create_only);
}

static void del(cs_store *s, model *m, int k, const char *what) {
  cs_store_result res;
  fi.fsync_failed = false;
  assert_int_equal(s->ops->del(s->self, keys[k], &res), CS_E_OK);
  if (res.outcome == CS_OUT_OK && fi.fsync_failed) fail_msg("%s: DELETE %s answered OK after a failed fsync", what, keys[k]);
  if (res.outcome == CS_OUT_OK) durable(what, "DELETE", k);
  applied(m, k, 1u, &res, false);
}

static void workload(cs_store *s, model *m, const char *what) {
  put(s, m, 0, 1, true, what);  /* create p/a */
  put(s, m, 1, 1, false, what); /* p/b */
  put(s, m, 1, 2, false, what); /* replace p/b (250 kB) */
  put(s, m, 0, 2, true, what);  /* create-only p/a again: refused when present */
  put(s, m, 2, 1, false, what); /* q/r/s/c: three new directories */
  (void)observed_version(s, 1, m, what, false);
  list_check(s, m, what, false);
  del(s, m, 0, what);           /* p/a */
  put(s, m, 3, 3, false, what); /* q/r/t beside q/r/s */
  del(s, m, 2, what);           /* q/r/s/c: its directories go */
  put(s, m, 2, 2, true, what);  /* and come back */
  list_check(s, m, what, false);
}

static void check_after(const char *dir, const model *m, const char *what) {
  enum fault_mode mode = fi.mode;
  fi.mode = FAULT_OFF;
  cs_store s;
  assert_int_equal(cs_dirstore_open(dir, &s), CS_E_OK);
  for (int k = 0; k < KEYS; k++) (void)observed_version(&s, k, m, what, true);
  list_check(&s, m, what, true);
  s.ops->close(s.self);
  fi.mode = mode;
}

static void run_mode(enum fault_mode mode) {
  long runs = 0, failures = 0;
  for (long n = 1;; n++) {
    char *dir = tf_temp_dir("dirstore-faults");
    model m;
    for (int k = 0; k < KEYS; k++) m.allowed[k] = 1u;
    fi.mode = FAULT_OFF;
    ft_reset();
    snprintf(root, sizeof root, "%s", dir);
    cs_store s;
    assert_int_equal(cs_dirstore_open_with(dir, &faulty, &s), CS_E_OK);
    char made[FT_PATH_MAX];
    snprintf(made, sizeof made, "%s/objects", dir);
    durable_path("open", "open", -1, made);
    snprintf(made, sizeof made, "%s/tmp", dir);
    durable_path("open", "open", -1, made);
    fault_arm(mode, n);
    char what[64];
    snprintf(what, sizeof what, "%s fault at call %ld", mode_name(mode), n);
    workload(&s, &m, what);
    long fired = fi.fired;
    s.ops->close(s.self);
    check_after(dir, &m, what);
    tf_remove_tree(dir);
    runs++;
    failures += fired > 0;
    if (fired == 0) break; /* the workload made fewer than n calls: every call has failed once */
  }
  printf("  %s: %ld runs, %ld with a fault\n", mode_name(mode), runs, failures);
  assert_true(runs > 40); /* the workload makes that many calls: the loop ran over them */
}

static void test_fail_once(void **state) {
  (void)state;
  run_mode(FAULT_ONCE);
}

static void test_fail_persistent(void **state) {
  (void)state;
  run_mode(FAULT_PERSISTENT);
}

static void test_crash(void **state) {
  (void)state;
  run_mode(FAULT_CRASH);
}

/* Temp files of dead writers older than an hour are removed when the store opens; others are left. */
static void test_dead_writers_temps_swept(void **state) {
  (void)state;
  char *dir = tf_temp_dir("dirstore-sweep");
  cs_store s;
  assert_int_equal(cs_dirstore_open(dir, &s), CS_E_OK);
  s.ops->close(s.self);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) _exit(0);
  assert_int_equal(waitpid(child, NULL, 0), child);
  char path[512], name[64], file[700];
  snprintf(path, sizeof path, "%s/tmp", dir);
  /* A dead writer's file two hours old goes; a dead writer's file of a minute ago and our own stay. */
  const char *names[3] = {"old", "recent", "mine"};
  long pids[3] = {(long)child, (long)child, (long)getpid()};
  time_t ages[3] = {7200, 60, 7200};
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "%ld-%d-%d.tmp", pids[i], i, i);
    tf_write_file(path, name, names[i], strlen(names[i]));
    snprintf(file, sizeof file, "%s/%s", path, name);
    struct timespec times[2] = {{time(NULL) - ages[i], 0}, {time(NULL) - ages[i], 0}};
    assert_int_equal(utimensat(AT_FDCWD, file, times, 0), 0);
  }
  assert_int_equal(tf_count_suffix(path, ".tmp"), 3);
  assert_int_equal(cs_dirstore_open(dir, &s), CS_E_OK);
  assert_int_equal(tf_count_suffix(path, ".tmp"), 2);
  snprintf(file, sizeof file, "%s/%ld-0-0.tmp", path, (long)child);
  assert_int_equal(access(file, F_OK), -1); /* the old one is the one gone */
  s.ops->close(s.self);
  tf_remove_tree(dir);
}

/*
 * Several processes PUT and DELETE keys in one directory at once, each
 * DELETE emptying it so that its parents go (rmdir) while another process
 * creates, publishes or syncs in them: every answer is OK (a PUT tries again
 * when a parent vanishes under it; the directory it fsyncs is its open
 * descriptor, never a path that may be gone).
 */
static void test_concurrent_put_delete(void **state) {
  (void)state;
  char *dir = tf_temp_dir("dirstore-race");
  enum { PROCS = 4, OPS = 400 };
  pid_t children[PROCS];
  for (int p = 0; p < PROCS; p++) {
    children[p] = fork();
    assert_true(children[p] >= 0);
    if (children[p] > 0) continue;
    cs_store s;
    if (cs_dirstore_open(dir, &s) != CS_E_OK) _exit(2);
    int failures = 0;
    for (int i = 0; i < OPS; i++) {
      char key[32];
      snprintf(key, sizeof key, "d/e/f/k%d", (p + i) % 3);
      cs_store_result res;
      int rc = (i + p) % 2 == 0 ? s.ops->put(s.self, key, "bytes", 5, NULL, false, &res) : s.ops->del(s.self, key, &res);
      if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
        if (failures++ < 3) fprintf(stderr, "process %d: %s %s: %s %s\n", p, (i + p) % 2 == 0 ? "PUT" : "DELETE", key,
                                    cs_outcome_name(res.outcome), res.detail);
      }
    }
    s.ops->close(s.self);
    _exit(failures == 0 ? 0 : 1);
  }
  for (int p = 0; p < PROCS; p++) {
    int status = 0;
    assert_int_equal(waitpid(children[p], &status, 0), children[p]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  tf_remove_tree(dir);
}

/*
 * A directory another writer made and did not sync yet (or failed to) is
 * synced by a PUT that finds it there, and by a later open: its OK needs it.
 */
static void test_existing_unsynced_directories(void **state) {
  (void)state;
  char *dir = tf_temp_dir("dirstore-unsynced");
  fault_arm(FAULT_OFF, 0);
  ft_reset();
  char path[FT_PATH_MAX];
  snprintf(path, sizeof path, "%s/objects", dir);
  assert_int_equal(f_mkdir(path, 0755), 0); /* as an open that failed before its fsync */
  cs_store s;
  assert_int_equal(cs_dirstore_open_with(dir, &faulty, &s), CS_E_OK);
  assert_true(ft_clean(path));
  snprintf(path, sizeof path, "%s/objects/a.d", dir);
  assert_int_equal(f_mkdir(path, 0755), 0); /* as a concurrent PUT between its mkdir and fsync */
  assert_false(ft_clean(path));
  cs_store_result res;
  assert_int_equal(s.ops->put(s.self, "a/b", "bytes", 5, NULL, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_true(ft_clean(path));
  s.ops->close(s.self);
  tf_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fail_once),
      cmocka_unit_test(test_fail_persistent),
      cmocka_unit_test(test_crash),
      cmocka_unit_test(test_dead_writers_temps_swept),
      cmocka_unit_test(test_concurrent_put_delete),
      cmocka_unit_test(test_existing_unsynced_directories),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#define _GNU_SOURCE /* O_DIRECT */
/*
 * The store conformance suite against dirstore, plus what only a filesystem
 * store has: keys it refuses, its layout staying under the root, a store
 * reopened on the same directory, and no temp files left behind.
 */
#include "capstore/dirstore.h"
#include "conformance_store.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct fixture {
  char base[256];
  unsigned counter;
  char last_root[512];
} fixture;

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d == NULL) {
    unlink(path);
    return;
  }
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
    char sub[4096];
    int n = snprintf(sub, sizeof sub, "%s/%s", path, ent->d_name);
    if (n > 0 && (size_t)n < sizeof sub) remove_tree(sub);
  }
  closedir(d);
  rmdir(path);
}

static cs_store *store_open(void *ctx) {
  fixture *f = ctx;
  snprintf(f->last_root, sizeof f->last_root, "%s/store-%u", f->base, f->counter++);
  cs_store *store = calloc(1, sizeof *store);
  if (store == NULL || cs_dirstore_open(f->last_root, store) != CS_E_OK) {
    free(store);
    return NULL;
  }
  return store;
}

static void store_close(cs_store *store, void *ctx) {
  (void)ctx;
  if (store == NULL) return;
  store->ops->close(store->self);
  free(store);
}

static fixture fx;

static int count_entries(const char *path) {
  DIR *d = opendir(path);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) n += ent->d_name[0] != '.';
  closedir(d);
  return n;
}

/*
 * Keys the store rule refuses (cs_store_key_check) are refused by every
 * primitive as S3 refuses them: CS_E_INVALID_ARGUMENT, the key named in the
 * detail, nothing touched. Keys only a file system cannot hold (empty
 * segments) are the store's refusal: CS_E_OK with CS_OUT_INVALID.
 */
static void test_refused_keys(void **state) {
  (void)state;
  cs_store *s = store_open(&fx);
  assert_non_null(s);
  static const char *const rule[] = {"", "..", "a/../b", "a/./b", ".", "a/..", "../../../../etc/passwd"};
  for (size_t i = 0; i < sizeof rule / sizeof rule[0]; i++) {
    cs_store_result res;
    cs_object_info info;
    char buf[4];
    size_t got = 9;
    assert_int_equal(s->ops->put(s->self, rule[i], "x", 1, NULL, false, &res), CS_E_INVALID_ARGUMENT);
    assert_int_equal(res.outcome, CS_OUT_INVALID);
    if (!strstr(res.detail, rule[i]) || !strstr(res.detail, rule[i][0] ? "segment" : "empty"))
      fail_msg("detail \"%s\" for key \"%s\"", res.detail, rule[i]);
    assert_int_equal(s->ops->head(s->self, rule[i], &info, &res), CS_E_INVALID_ARGUMENT);
    assert_int_equal(res.outcome, CS_OUT_INVALID);
    assert_int_equal(s->ops->get(s->self, rule[i], NULL, buf, sizeof buf, &got, &res), CS_E_INVALID_ARGUMENT);
    assert_int_equal(got, 0);
    assert_int_equal(s->ops->del(s->self, rule[i], &res), CS_E_INVALID_ARGUMENT);
  }
  char keys[4][CS_KEY_MAX];
  cs_list_page page = {.keys = keys, .key_capacity = 4};
  cs_store_result res;
  assert_int_equal(s->ops->list(s->self, "a/../", "", 4, &page, &res), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(res.detail, "key prefix 'a/../' has a '..' segment"));
  static const char *const bad[] = {"/abs", "a//b", "a/"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(s->ops->put(s->self, bad[i], "x", 1, NULL, false, &res), CS_E_OK);
    assert_int_equal(res.outcome, CS_OUT_INVALID);
  }
  /* A segment whose file name would pass the name limit is refused; one under it is kept. */
  char key[600];
  memset(key, '~', 100); /* each '~' maps to three bytes */
  key[100] = '\0';
  assert_int_equal(s->ops->put(s->self, key, "x", 1, NULL, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  key[70] = '\0';
  assert_int_equal(s->ops->put(s->self, key, "x", 1, NULL, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  /* Dot keys stay inside the root: ".." as part of a segment is an ordinary name. */
  assert_int_equal(s->ops->put(s->self, "..a/.b", "y", 1, NULL, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  char path[600];
  snprintf(path, sizeof path, "%s/objects", fx.last_root);
  assert_int_equal(count_entries(path), 2);
  snprintf(path, sizeof path, "%s/tmp", fx.last_root);
  assert_int_equal(count_entries(path), 0); /* no temp file left behind */
  store_close(s, &fx);
}

/* Writes an object file with an empty header at root/objects/rel (directories made as needed). */
static void plant(const char *root, const char *rel) {
  char path[1024];
  snprintf(path, sizeof path, "%s/objects/%s", root, rel);
  for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = '\0';
    (void)mkdir(path, 0755);
    *p = '/';
  }
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  static const unsigned char header[80] = {'C', 'S', 'O', 'B', 'J', '1'};
  assert_int_equal(fwrite(header, 1, sizeof header, f), sizeof header);
  assert_int_equal(fwrite("planted", 1, 7, f), 7);
  fclose(f);
}

/*
 * A LIST names only files whose names are exactly what a key maps to: names
 * planted in the tree that decode to a ".." or "." segment, a '/' or NUL
 * inside a segment, or hex not written as the store writes it never become
 * keys (a reconcile would HEAD and GET them).
 */
static void test_planted_names_not_listed(void **state) {
  (void)state;
  cs_store *s = store_open(&fx);
  assert_non_null(s);
  cs_store_result res;
  assert_int_equal(s->ops->put(s->self, "p/real", "x", 1, NULL, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  static const char *const planted[] = {"p.d/+2E+2E.d/x.obj", "p.d/+2E.obj", "p.d/a+2Fb.obj", "p.d/a+00b.obj",
                                        "p.d/+2ex.obj",       "p.d/+41.obj"};
  for (size_t i = 0; i < sizeof planted / sizeof planted[0]; i++) plant(fx.last_root, planted[i]);
  char keys[8][CS_KEY_MAX];
  cs_list_page page = {.keys = keys, .key_capacity = 8};
  assert_int_equal(s->ops->list(s->self, "", "", 8, &page, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  for (uint32_t i = 0; i < page.key_count; i++) printf("listed: %s\n", page.keys[i]);
  assert_int_equal(page.key_count, 1);
  assert_string_equal(page.keys[0], "p/real");
  store_close(s, &fx);
}

static void test_reopen(void **state) {
  (void)state;
  cs_store *s = store_open(&fx);
  if (s == NULL) { /* (not assert_non_null: -O3 then sees a NULL path) */
    fail_msg("store_open failed");
    return;
  }
  cs_object_info meta = {.is_pack = true, .record_count = 5, .created_at_ns = 42};
  meta.pack_id.bytes[0] = 9;
  cs_store_result res;
  assert_int_equal(s->ops->put(s->self, "a/b.dmi-pack", "hello", 5, &meta, true, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  store_close(s, &fx);
  cs_store again;
  assert_int_equal(cs_dirstore_open(fx.last_root, &again), CS_E_OK);
  cs_object_info info;
  assert_int_equal(again.ops->head(again.self, "a/b.dmi-pack", &info, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_true(info.is_pack);
  assert_int_equal(info.record_count, 5);
  assert_int_equal(info.created_at_ns, 42);
  assert_int_equal(info.pack_id.bytes[0], 9);
  assert_int_equal(again.ops->put(again.self, "a/b.dmi-pack", "other", 5, &meta, true, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_PRECONDITION);
  assert_int_equal(again.ops->del(again.self, "a/b.dmi-pack", &res), CS_E_OK);
  char path[600];
  snprintf(path, sizeof path, "%s/objects", fx.last_root);
  assert_int_equal(count_entries(path), 0); /* empty directories go with their last object */
  again.ops->close(again.self);
  assert_int_equal(cs_dirstore_open("", &again), CS_E_INVALID_ARGUMENT);
}

/* PUTs len pattern bytes under key, then checks HEAD, a whole GET, the last byte by range and the file's size. */
static void put_get_exact(cs_store *s, const char *root, const char *key, size_t len) {
  uint8_t *bytes = malloc(len + 1), *back = malloc(len + 1);
  assert_non_null(bytes);
  assert_non_null(back);
  for (size_t i = 0; i < len; i++) bytes[i] = (uint8_t)(i * 2654435761u >> 13);
  cs_object_info meta = {.is_pack = true, .size_bytes = len, .record_count = 3, .created_at_ns = 7};
  cs_store_result res;
  assert_int_equal(s->ops->put(s->self, key, bytes, len, &meta, true, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  cs_object_info info;
  assert_int_equal(s->ops->head(s->self, key, &info, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(info.size_bytes, len);
  size_t got = 0;
  assert_int_equal(s->ops->get(s->self, key, NULL, back, len + 1, &got, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(got, len);
  assert_memory_equal(back, bytes, len);
  cs_range last = {.offset = len - 1, .length = 1};
  assert_int_equal(s->ops->get(s->self, key, &last, back, 1, &got, &res), CS_E_OK);
  assert_int_equal(got, 1);
  assert_int_equal(back[0], bytes[len - 1]);
  /* No zero padding of the last aligned write is left in the file: the header and the bytes, exactly. */
  char path[700];
  snprintf(path, sizeof path, "%s/objects/%s", root, key);
  char *slash = strrchr(path, '/');
  snprintf(slash, sizeof path - (size_t)(slash - path), "/%s.obj", strrchr(key, '/') + 1);
  char *dir = strstr(path, "/objects/") + strlen("/objects/");
  char *sep = strchr(dir, '/');
  assert_non_null(sep);
  memmove(sep + 2, sep, strlen(sep) + 1); /* "d/x.obj" -> "d.d/x.obj" (one directory level in these keys) */
  memcpy(sep, ".d", 2);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal((size_t)st.st_size, 80 + len);
  free(bytes);
  free(back);
}

/*
 * Large objects go with O_DIRECT through an aligned buffer: every size
 * around the buffer's and the alignment's edges comes back exact, and the
 * file holds no padding.
 */
static void test_direct_sizes(void **state) {
  (void)state;
  cs_store *s = store_open(&fx);
  if (s == NULL) {
    fail_msg("store_open failed");
    return;
  }
  const size_t sizes[] = {(256u << 10) - 1, 256u << 10, (1u << 20) - 80, (1u << 20) - 79, (1u << 20) - 81,
                          (1u << 20) + 1,   (2u << 20) - 80, (3u << 20) + 12345, 4096u * 300 - 80};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char key[64];
    snprintf(key, sizeof key, "d/obj-%zu", i);
    put_get_exact(s, fx.last_root, key, sizes[i]);
  }
  store_close(s, &fx);
}

/* A file system that refuses O_DIRECT, at open (refuse_at 1) or at the first write (2). */
static int refuse_at, refusals;
static int refusing_open(const char *path, int flags, mode_t mode) {
  if (refuse_at == 1 && (flags & O_DIRECT) != 0) {
    refusals++;
    errno = EINVAL;
    return -1;
  }
  return cs_spool_sys_posix()->open(path, flags, mode);
}
static ssize_t refusing_write(int fd, const void *bytes, size_t length) {
  int fl = fcntl(fd, F_GETFL);
  if (refuse_at == 2 && fl >= 0 && (fl & O_DIRECT) != 0) {
    refusals++;
    errno = EINVAL;
    return -1;
  }
  return cs_spool_sys_posix()->write(fd, bytes, length);
}

/* Where O_DIRECT is refused the object is written through the page cache, once refused never tried again. */
static void test_direct_refused_falls_back(void **state) {
  (void)state;
  for (refuse_at = 1; refuse_at <= 2; refuse_at++) {
    cs_spool_sys sys = *cs_spool_sys_posix();
    sys.open = refusing_open;
    sys.write = refusing_write;
    refusals = 0;
    char root[600];
    snprintf(root, sizeof root, "%s/refusing-%d", fx.base, refuse_at);
    cs_store s;
    assert_int_equal(cs_dirstore_open_with(root, &sys, &s), CS_E_OK);
    put_get_exact(&s, root, "r/first", (1u << 20) + 3);
    assert_int_equal(refusals, 1);
    put_get_exact(&s, root, "r/second", (2u << 20) + 5);
    assert_int_equal(refusals, 1); /* not tried again */
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s/tmp", root);
    assert_int_equal(count_entries(tmp), 0); /* the refused temp file is gone */
    s.ops->close(s.self);
  }
}

/* Calls that fail without setting errno (fail_silently 1: fsync; 2: a write that makes no progress). */
static int fail_silently;
static int silent_fsync(int fd) {
  if (fail_silently == 1) {
    errno = 0;
    return -1;
  }
  return cs_spool_sys_posix()->fsync(fd);
}
static ssize_t silent_write(int fd, const void *bytes, size_t length) {
  if (fail_silently == 2) {
    errno = 0;
    return 0;
  }
  return cs_spool_sys_posix()->write(fd, bytes, length);
}

/* A failure is never answered OK, whatever errno says: small objects and O_DIRECT ones. */
static void test_failure_without_errno_is_not_ok(void **state) {
  (void)state;
  static uint8_t bytes[(1u << 20) + 77];
  cs_spool_sys sys = *cs_spool_sys_posix();
  sys.fsync = silent_fsync;
  sys.write = silent_write;
  char root[600];
  snprintf(root, sizeof root, "%s/silent", fx.base);
  cs_store s;
  fail_silently = 0;
  assert_int_equal(cs_dirstore_open_with(root, &sys, &s), CS_E_OK);
  const size_t sizes[] = {1000, sizeof bytes};
  for (fail_silently = 1; fail_silently <= 2; fail_silently++) {
    for (size_t i = 0; i < 2; i++) {
      cs_object_info meta = {.is_pack = true, .size_bytes = sizes[i]};
      cs_store_result res;
      char key[64];
      snprintf(key, sizeof key, "s/k%d-%zu", fail_silently, i);
      assert_int_equal(s.ops->put(s.self, key, bytes, sizes[i], &meta, true, &res), CS_E_OK);
      assert_int_equal(res.outcome, CS_OUT_SERVER_ERROR);
    }
  }
  fail_silently = 0;
  s.ops->close(s.self);
}

/*
 * The asynchronous form on a store without its own: a cs_store reused by a
 * second open keeps nothing of the first store's queue, and cs_store_close
 * abandons what was queued (rc CS_E_CLOSED, the request free to start again).
 */
static void test_async_queue_reuse_and_close(void **state) {
  (void)state;
  cs_store *first = store_open(&fx);
  if (first == NULL) {
    fail_msg("store_open failed");
    return;
  }
  char root[600];
  snprintf(root, sizeof root, "%s", fx.last_root);
  cs_store s;
  memset(&s, 0xa5, sizeof s); /* whatever the stack held */
  assert_int_equal(cs_dirstore_open(root, &s), CS_E_OK);
  cs_store_request put = {.op = CS_STORE_PUT, .id = 1, .key = "q/k", .bytes = "abc", .len = 3};
  assert_int_equal(cs_store_start(&s, &put), CS_E_OK);
  assert_int_equal(cs_store_start(&s, &put), CS_E_STATE); /* queued, not yet handed back */
  cs_store_close(&s);
  assert_int_equal(put.rc, CS_E_CLOSED);
  assert_null(s.ops);
  assert_int_equal(cs_dirstore_open(root, &s), CS_E_OK); /* the same variable again */
  cs_store_request *done = NULL;
  assert_int_equal(cs_store_reap(&s, 0, &done), 0); /* nothing of the closed store's queue */
  assert_int_equal(cs_store_start(&s, &put), CS_E_OK); /* the abandoned request starts again */
  assert_int_equal(cs_store_reap(&s, 0, &done), 1);
  assert_ptr_equal(done, &put);
  assert_int_equal(put.rc, CS_E_OK);
  assert_int_equal(put.res.outcome, CS_OUT_OK);
  cs_store_close(&s);
  store_close(first, &fx);
}

/* Eight processes race a create-only PUT of one key: exactly one wins, and its bytes are what stays. */
static void test_create_race(void **state) {
  (void)state;
  cs_store *s = store_open(&fx);
  assert_non_null(s);
  enum { RACERS = 8 };
  pid_t pids[RACERS];
  for (int i = 0; i < RACERS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      char body[32];
      snprintf(body, sizeof body, "racer-%d", i);
      cs_store_result res;
      int rc = s->ops->put(s->self, "race/slot", body, strlen(body), NULL, true, &res);
      _exit(rc != CS_E_OK ? 3 : res.outcome == CS_OUT_OK ? 0 : res.outcome == CS_OUT_PRECONDITION ? 1 : 2);
    }
  }
  int winner = -1, refused = 0;
  for (int i = 0; i < RACERS; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 0) {
      assert_int_equal(winner, -1);
      winner = i;
    } else {
      assert_int_equal(WEXITSTATUS(status), 1);
      refused++;
    }
  }
  assert_int_equal(refused, RACERS - 1);
  char want[32], got[32];
  snprintf(want, sizeof want, "racer-%d", winner);
  size_t n = 0;
  cs_store_result res;
  assert_int_equal(s->ops->get(s->self, "race/slot", NULL, got, sizeof got, &n, &res), CS_E_OK);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(got, want, n);
  store_close(s, &fx);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(fx.base, sizeof fx.base, "%s/capstore-dirstore-XXXXXX", tmp != NULL ? tmp : "/tmp");
  if (mkdtemp(fx.base) == NULL) return 1;
  static const conformance_store_expect dirstore_does = {true, true, true};
  int failed = conformance_store_run("dirstore", store_open, store_close, &fx, &dirstore_does);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_refused_keys),
                                     cmocka_unit_test(test_planted_names_not_listed), cmocka_unit_test(test_reopen),
                                     cmocka_unit_test(test_direct_sizes),
                                     cmocka_unit_test(test_direct_refused_falls_back),
                                     cmocka_unit_test(test_failure_without_errno_is_not_ok),
                                     cmocka_unit_test(test_async_queue_reuse_and_close),
                                     cmocka_unit_test(test_create_race)};
  failed += cmocka_run_group_tests_name("dirstore only", tests, NULL, NULL);
  if (failed == 0) remove_tree(fx.base);
  return failed == 0 ? 0 : 1;
}

/*
 * The store conformance suite (tests/conformance_store.h), unchanged, against
 * the S3 adapter on the live @20minutes/s3rver 4.0.4 of the ctest fixture
 * (which verifies SigV4). argv[1] names the fixture's endpoint file
 * ("endpoint access_key secret bucket").
 *
 * Every case gets a fresh, empty store: the S3 handle behind a key prefix of
 * its own (conf-<pid>-<time>-<n>/), which close_fn deletes again. The wrapper
 * keeps the adapter's name ("s3"), passes continuation tokens through and
 * strips the prefix from listed keys (a key outside it is left as it came, so
 * the suite sees it).
 *
 * Known differences of s3rver (docs/s3.md) are found by the suite's probes
 * (cs_store_probe) and each case asserts the documented alternative there:
 * every case must pass. Then the probe must find all three differences on
 * s3rver 4.0.4 (a server that stops differing fails the test: the docs and
 * the model's switches must follow), and the cases only the live server has:
 * the adapter's classification of the server's wrong suffix answer, a suffix
 * longer than the object, and the negative twin: a wrong secret key is
 * FORBIDDEN (SignatureDoesNotMatch); a 4 KiB session token goes out whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "capstore/s3.h"
#include "conformance_store.h"

typedef struct live_cfg {
  char endpoint[256], access_key[128], secret[128], bucket[64];
} live_cfg;

static live_cfg live;

typedef struct prefixed {
  cs_store inner;
  char prefix[64];
  size_t prefix_len;
  char last_listed[CS_KEY_MAX]; /* the last key of the previous LIST page */
} prefixed;

/* Whether the wrapper has printed an out-of-order LIST page yet. */
static bool saw_list_order;
/* Set by test_list_path_order when s3rver's LIST came back in path order, not bytewise. */
static bool list_order_demonstrated;

static int with_prefix(const prefixed *p, const char *key, char *out) {
  if (!key || strlen(key) + p->prefix_len >= CS_KEY_MAX) return CS_E_INVALID_ARGUMENT;
  snprintf(out, CS_KEY_MAX, "%s%s", p->prefix, key);
  return CS_E_OK;
}

static int p_put(void *self, const char *key, const void *bytes, size_t len, const cs_object_info *meta,
                 bool if_none_match, cs_store_result *res) {
  prefixed *p = self;
  char full[CS_KEY_MAX];
  int rc = with_prefix(p, key, full);
  return rc ? rc : p->inner.ops->put(p->inner.self, full, bytes, len, meta, if_none_match, res);
}

static int p_head(void *self, const char *key, cs_object_info *info, cs_store_result *res) {
  prefixed *p = self;
  char full[CS_KEY_MAX];
  int rc = with_prefix(p, key, full);
  return rc ? rc : p->inner.ops->head(p->inner.self, full, info, res);
}

static int p_get(void *self, const char *key, const cs_range *range, void *buf, size_t cap, size_t *got,
                 cs_store_result *res) {
  prefixed *p = self;
  char full[CS_KEY_MAX];
  int rc = with_prefix(p, key, full);
  if (rc) return rc;
  rc = p->inner.ops->get(p->inner.self, full, range, buf, cap, got, res);
  if (rc == CS_E_OK && range && range->suffix && res->outcome == CS_OUT_INVALID &&
      strstr(res->detail, "wrong range: Content-Range 'bytes 0-")) {
    printf("  s3rver answered a suffix range wrongly: %s\n", res->detail);
  }
  return rc;
}

static int p_list(void *self, const char *prefix, const char *token, uint32_t max_keys, cs_list_page *page,
                  cs_store_result *res) {
  prefixed *p = self;
  char full[CS_KEY_MAX];
  int rc = with_prefix(p, prefix ? prefix : "", full);
  if (rc) return rc;
  rc = p->inner.ops->list(p->inner.self, full, token, max_keys, page, res);
  if (!token || !token[0]) p->last_listed[0] = '\0';
  for (uint32_t i = 0; rc == CS_E_OK && res->outcome == CS_OUT_OK && i < page->key_count; i++) {
    if (p->last_listed[0] && strcmp(p->last_listed, page->keys[i]) >= 0 && !saw_list_order) {
      saw_list_order = true;
      printf("  s3rver listed '%s' after '%s' (not bytewise)\n", page->keys[i], p->last_listed);
    }
    memcpy(p->last_listed, page->keys[i], CS_KEY_MAX);
  }
  for (uint32_t i = 0; rc == CS_E_OK && i < page->key_count; i++) {
    if (strncmp(page->keys[i], p->prefix, p->prefix_len) == 0) {
      memmove(page->keys[i], page->keys[i] + p->prefix_len, strlen(page->keys[i]) - p->prefix_len + 1);
    }
  }
  return rc;
}

static int p_del(void *self, const char *key, cs_store_result *res) {
  prefixed *p = self;
  char full[CS_KEY_MAX];
  int rc = with_prefix(p, key, full);
  return rc ? rc : p->inner.ops->del(p->inner.self, full, res);
}

static void p_close(void *self) {
  prefixed *p = self;
  p->inner.ops->close(p->inner.self);
  free(p);
}

/* The asynchronous form under the prefix: each request goes to the adapter as a copy with the full key. */
typedef struct p_shadow {
  cs_store_request inner;
  cs_store_request *outer;
  char key[CS_KEY_MAX];
} p_shadow;

static int p_start(void *self, cs_store_request *req) {
  prefixed *p = self;
  p_shadow *sh = calloc(1, sizeof *sh);
  if (!sh) return CS_E_NO_MEMORY;
  sh->inner = *req;
  sh->outer = req;
  int rc = req->key || req->op == CS_STORE_LIST ? with_prefix(p, req->key ? req->key : "", sh->key) : CS_E_OK;
  if (req->key || req->op == CS_STORE_LIST) sh->inner.key = sh->key;
  if (rc == CS_E_OK) rc = cs_store_start(&p->inner, &sh->inner);
  if (rc != CS_E_OK) {
    free(sh);
    return rc;
  }
  req->internal = sh;
  return CS_E_OK;
}

static int p_reap(void *self, uint32_t timeout_ms, cs_store_request **done) {
  prefixed *p = self;
  cs_store_request *inner = NULL;
  int n = cs_store_reap(&p->inner, timeout_ms, &inner);
  if (n != 1) return n;
  p_shadow *sh = (p_shadow *)inner;
  cs_store_request *req = sh->outer;
  req->rc = inner->rc;
  req->res = inner->res;
  req->info = inner->info;
  req->got = inner->got;
  req->internal = NULL;
  if (req->op == CS_STORE_LIST && req->page) {
    for (uint32_t i = 0; i < req->page->key_count; i++) {
      char *key = req->page->keys[i];
      if (strncmp(key, p->prefix, p->prefix_len) == 0) memmove(key, key + p->prefix_len, strlen(key) - p->prefix_len + 1);
    }
  }
  free(sh);
  *done = req;
  return 1;
}

static const cs_store_ops prefixed_ops = {.name = "s3", .put = p_put, .head = p_head, .get = p_get,
                                          .list = p_list, .del = p_del, .close = p_close,
                                          .start = p_start, .reap = p_reap};

static int s3_open_token(const char *secret, const char *session_token, cs_store *out) {
  cs_s3_config cfg = {.endpoint = live.endpoint, .bucket = live.bucket, .access_key_id = live.access_key,
                      .secret_access_key = secret, .session_token = session_token, .allow_insecure = true,
                      .connect_timeout_ms = 2000, .request_timeout_ms = 30000};
  char msg[256];
  int rc = cs_s3_open(&cfg, out, msg, sizeof msg);
  if (rc != CS_E_OK) fprintf(stderr, "cs_s3_open: %s\n", msg);
  return rc;
}

static int s3_open_with(const char *secret, cs_store *out) { return s3_open_token(secret, NULL, out); }

static unsigned case_seq;

static cs_store *open_fresh(void *ctx) {
  (void)ctx;
  prefixed *p = calloc(1, sizeof *p);
  cs_store *store = calloc(1, sizeof *store);
  if (!p || !store || s3_open_with(live.secret, &p->inner) != CS_E_OK) {
    free(p);
    free(store);
    return NULL;
  }
  snprintf(p->prefix, sizeof p->prefix, "c%ld.%u/", (long)getpid() % 100000, ++case_seq);
  p->prefix_len = strlen(p->prefix);
  *store = (cs_store){.ops = &prefixed_ops, .self = p, .in_flight_max = p->inner.in_flight_max};
  return store;
}

/* Deletes what the case wrote (everything under its prefix), then closes. */
static void close_store(cs_store *store, void *ctx) {
  (void)ctx;
  if (!store) return;
  prefixed *p = store->self;
  char(*keys)[CS_KEY_MAX] = calloc(1000, CS_KEY_MAX);
  cs_list_page page = {.keys = keys, .key_capacity = 1000};
  for (int round = 0; keys && round < 20; round++) {
    cs_store_result res;
    if (p->inner.ops->list(p->inner.self, p->prefix, "", 1000, &page, &res) != CS_E_OK || res.outcome != CS_OUT_OK ||
        page.key_count == 0) {
      break;
    }
    for (uint32_t i = 0; i < page.key_count; i++) (void)p->inner.ops->del(p->inner.self, page.keys[i], &res);
  }
  free(keys);
  store->ops->close(store->self);
  free(store);
}

/* ---- Cases only the live server has ---- */

static void test_suffix_answer_classified(void **state) {
  cs_store *s = *state;
  uint8_t bytes[1000];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 7 + 3);
  cs_store_result res;
  assert_int_equal(s->ops->put(s->self, "sfx/obj", bytes, sizeof bytes, NULL, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  uint8_t buf[8192];
  size_t n = 99;
  /* s3rver answers bytes=-64 with bytes 0-64: the adapter refuses it and names the answer. */
  cs_range suffix = {.length = 64, .suffix = true};
  assert_int_equal(s->ops->get(s->self, "sfx/obj", &suffix, buf, sizeof buf, &n, &res), CS_E_OK);
  printf("s3rver suffix answer: %s %u: %s\n", cs_outcome_name(res.outcome), res.http_status, res.detail);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  assert_int_equal(res.http_status, 206);
  assert_non_null(strstr(res.detail, "bytes 0-64/1000"));
  assert_int_equal(n, 0);
  /* A suffix longer than the object is the whole object (HTTP); s3rver's 0-999/1000 is right here. */
  cs_range long_suffix = {.length = 5000, .suffix = true};
  assert_int_equal(s->ops->get(s->self, "sfx/obj", &long_suffix, buf, sizeof buf, &n, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(n, sizeof bytes);
  assert_memory_equal(buf, bytes, sizeof bytes);
  /* An offset range is answered exactly. */
  cs_range mid = {.offset = 900, .length = 100};
  assert_int_equal(s->ops->get(s->self, "sfx/obj", &mid, buf, sizeof buf, &n, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(n, 100);
  assert_memory_equal(buf, bytes + 900, 100);
}

/* The LIST order difference itself: "o/a/b" comes before "o/a" (its directory sorts first). */
static void test_list_path_order(void **state) {
  cs_store *s = *state;
  static const char *const keys[] = {"o/a", "o/a/b", "o/a-b", "o/a0"};
  cs_store_result res;
  for (size_t i = 0; i < 4; i++) {
    assert_int_equal(s->ops->put(s->self, keys[i], "x", 1, NULL, false, &res), CS_E_OK);
    assert_int_equal(res.outcome, CS_OUT_OK);
  }
  char(*got)[CS_KEY_MAX] = calloc(8, CS_KEY_MAX);
  assert_non_null(got);
  cs_list_page page = {.keys = got, .key_capacity = 8};
  assert_int_equal(s->ops->list(s->self, "o/", "", 8, &page, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(page.key_count, 4);
  printf("s3rver LIST order: %s %s %s %s (bytewise: o/a o/a-b o/a/b o/a0)\n", got[0], got[1], got[2], got[3]);
  list_order_demonstrated = strcmp(got[0], got[1]) > 0 || strcmp(got[1], got[2]) > 0 || strcmp(got[2], got[3]) > 0;
  assert_true(list_order_demonstrated);
  free(got);
}

static void test_wrong_secret_forbidden(void **state) {
  cs_store *s = *state;
  prefixed *p = s->self;
  cs_store bad;
  assert_int_equal(s3_open_with("not-the-secret", &bad), CS_E_OK);
  char key[CS_KEY_MAX];
  snprintf(key, sizeof key, "%sforbidden/k", p->prefix);
  cs_store_result res;
  cs_object_info meta;
  memset(&meta, 0, sizeof meta);
  meta.is_pack = true;
  assert_int_equal(bad.ops->put(bad.self, key, "abc", 3, &meta, false, &res), CS_E_OK);
  printf("wrong secret: %s %u: %s\n", cs_outcome_name(res.outcome), res.http_status, res.detail);
  assert_int_equal(res.outcome, CS_OUT_FORBIDDEN);
  assert_int_equal(res.http_status, 403);
  assert_non_null(strstr(res.detail, "SignatureDoesNotMatch"));
  /* The same request with the right secret lands, and the refused one wrote nothing before it. */
  cs_object_info info;
  assert_int_equal(s->ops->head(s->self, "forbidden/k", &info, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_NOT_FOUND);
  assert_int_equal(s->ops->put(s->self, "forbidden/k", "abc", 3, &meta, false, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  bad.ops->close(bad.self);
}

/*
 * A 4 KiB session token (STS tokens have no documented maximum) goes out
 * whole: s3rver checks the signature, which covers x-amz-security-token, so
 * a header cut short is SignatureDoesNotMatch on every request.
 */
static void test_long_session_token(void **state) {
  cs_store *s = *state;
  prefixed *p = s->self;
  char *token = malloc(4097);
  assert_non_null(token);
  for (size_t i = 0; i < 4096; i++) token[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i * 7) % 64];
  token[4096] = '\0';
  cs_store tok;
  assert_int_equal(s3_open_token(live.secret, token, &tok), CS_E_OK);
  char key[CS_KEY_MAX];
  snprintf(key, sizeof key, "%stoken/k", p->prefix);
  cs_store_result res;
  assert_int_equal(tok.ops->put(tok.self, key, "abc", 3, NULL, false, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("PUT with a 4 KiB token: %s %u: %s", cs_outcome_name(res.outcome),
                                         res.http_status, res.detail);
  cs_object_info info;
  assert_int_equal(tok.ops->head(tok.self, key, &info, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(info.size_bytes, 3);
  char(*keys)[CS_KEY_MAX] = calloc(4, CS_KEY_MAX);
  cs_list_page page = {.keys = keys, .key_capacity = 4};
  assert_int_equal(tok.ops->list(tok.self, p->prefix, "", 4, &page, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(page.key_count, 1);
  assert_string_equal(page.keys[0], key);
  free(keys);
  tok.ops->close(tok.self);
  free(token);
}

/* Puts each of keys[0..count) (under the case's prefix) and lists prefix "<case>/sub": the page and result. */
static cs_store_result put_and_list(cs_store *s, const char *const *keys, size_t count, const char *sub,
                                    cs_list_page *page) {
  cs_store_result res;
  for (size_t i = 0; i < count; i++) {
    assert_int_equal(s->ops->put(s->self, keys[i], "x", 1, NULL, false, &res), CS_E_OK);
    assert_int_equal(res.outcome, CS_OUT_OK);
  }
  assert_int_equal(s->ops->list(s->self, sub, "", page->key_capacity, page, &res), CS_E_OK);
  return res;
}

static bool page_has(const cs_list_page *page, const char *key) {
  for (uint32_t i = 0; i < page->key_count; i++) {
    if (strcmp(page->keys[i], key) == 0) return true;
  }
  return false;
}

/*
 * Every LIST asks for encoding-type=url (a key XML 1.0 cannot hold). s3rver
 * 4.0.4 ignores the parameter and answers plain keys without <EncodingType>,
 * which the adapter reads as they are: keys holding '%', '+' and ' ' come
 * back exactly as written (they would be decoded wrongly were the answer
 * taken as encoded). Two known differences of s3rver are asserted and
 * printed (docs/s3.md): a key holding U+0001 goes into its XML raw, so that
 * page is refused as invalid XML (S3 would encode it, as asked); a key
 * holding '&' is escaped twice ("&amp;amp;"), so it lists as "&amp;".
 */
static void test_list_keys_as_written(void **state) {
  cs_store *s = *state;
  static const char *const keys[] = {"lit/a%41", "lit/b+c", "lit/c d", "lit/e%2Bf%"};
  char(*got)[CS_KEY_MAX] = calloc(8, CS_KEY_MAX);
  assert_non_null(got);
  cs_list_page page = {.keys = got, .key_capacity = 8};
  cs_store_result res = put_and_list(s, keys, 4, "lit/", &page);
  if (res.outcome != CS_OUT_OK) fail_msg("LIST: %s: %s", cs_outcome_name(res.outcome), res.detail);
  assert_int_equal(page.key_count, 4);
  for (size_t i = 0; i < 4; i++) {
    if (!page_has(&page, keys[i])) fail_msg("'%s' did not list as written", keys[i]);
  }
  static const char *const control[] = {"ctl/a\001b"};
  res = put_and_list(s, control, 1, "ctl/", &page);
  printf("s3rver LIST of a key holding U+0001: %s: %s\n", cs_outcome_name(res.outcome), res.detail);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  assert_non_null(strstr(res.detail, "invalid XML"));
  assert_int_equal(page.key_count, 0);
  assert_int_equal(s->ops->del(s->self, control[0], &res), CS_E_OK);
  static const char *const amp[] = {"amp/g&h"};
  res = put_and_list(s, amp, 1, "amp/", &page);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(page.key_count, 1);
  printf("s3rver LIST of 'amp/g&h': '%s'\n", got[0]);
  assert_string_equal(got[0], "amp/g&amp;h");
  assert_int_equal(s->ops->del(s->self, amp[0], &res), CS_E_OK);
  free(got);
}

static int setup(void **state) {
  *state = open_fresh(NULL);
  return *state ? 0 : -1;
}

static int teardown(void **state) {
  close_store(*state, NULL);
  return 0;
}

int main(int argc, char **argv) {
  FILE *f = argc < 2 ? NULL : fopen(argv[1], "r");
  if (f == NULL || fscanf(f, "%255s %127s %127s %63s", live.endpoint, live.access_key, live.secret, live.bucket) != 4) {
    fprintf(stderr, "usage: %s ENDPOINT_FILE (written by tools/servers/s3.sh start)\n", argv[0]);
    if (f != NULL) fclose(f);
    return 1;
  }
  fclose(f);
  const struct CMUnitTest live_tests[] = {
      cmocka_unit_test_setup_teardown(test_suffix_answer_classified, setup, teardown),
      cmocka_unit_test_setup_teardown(test_list_path_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wrong_secret_forbidden, setup, teardown),
      cmocka_unit_test_setup_teardown(test_long_session_token, setup, teardown),
      cmocka_unit_test_setup_teardown(test_list_keys_as_written, setup, teardown),
  };
  int live_failed = cmocka_run_group_tests_name("s3rver_live", live_tests, NULL, NULL);
  static const conformance_store_expect s3rver_does = {false, false, false}; /* docs/s3.md */
  int failed = conformance_store_run("s3rver", open_fresh, close_store, NULL, &s3rver_does);
  printf("conformance on s3rver (each case requires its probe to find the three known differences): %d failed; live "
         "cases: %d of %zu failed\n", failed, live_failed, sizeof live_tests / sizeof live_tests[0]);
  return failed + live_failed;
}

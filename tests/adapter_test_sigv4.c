/*
 * The SigV4 signer (src/adapters/sigv4.c) against the AWS signing test suite
 * (CAPSTORE_SIGV4_DIR, tests/vectors/sigv4/v4): every case, every intermediate
 * and final result of both the header and the query form. A missing folder
 * fails the test; it never skips.
 */
#include "capstore/sigv4.h"

#include "capstore/types.h"

#include <dirent.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#ifndef CAPSTORE_SIGV4_DIR
#error "CAPSTORE_SIGV4_DIR must name the sigv4 test-suite folder"
#endif

#define CASES_EXPECTED 38u
#define CASES_MAX 64u
#define HEADERS_MAX 64u

static char case_names[CASES_MAX][256];
static unsigned case_count;

/* Reads a whole file; fails the test when it is missing. */
static char *slurp(const char *dir, const char *name, size_t *len_out) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s/%s", CAPSTORE_SIGV4_DIR, dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
  }
  fclose(f);
  buf[len] = '\0';
  if (len_out) *len_out = len;
  return buf;
}

/* An HTTP request as request.txt writes it; headers keep their folded lines. */
typedef struct parsed_request {
  char *text;
  char method[16];
  char *path;
  size_t path_len;
  char *query;
  size_t query_len;
  char *target; /* as on the request line */
  cs_sigv4_header headers[HEADERS_MAX];
  uint32_t header_count;
  const char *header_block; /* the raw header lines, each ending in '\n' */
  size_t header_block_len;
  const char *body;
  size_t body_len;
} parsed_request;

static void parse_request_line(parsed_request *r, char *line) {
  char *sp1 = strchr(line, ' ');
  char *sp2 = strrchr(line, ' ');
  assert_non_null(sp1);
  assert_true(sp2 > sp1);
  assert_true((size_t)(sp1 - line) < sizeof r->method);
  memcpy(r->method, line, (size_t)(sp1 - line));
  r->method[sp1 - line] = '\0';
  *sp2 = '\0';
  r->target = sp1 + 1;
  r->path = r->target;
  char *q = strchr(r->target, '?');
  r->path_len = q ? (size_t)(q - r->target) : strlen(r->target);
  r->query = q ? q + 1 : NULL;
  r->query_len = q ? strlen(q + 1) : 0;
}

static void parse_request(parsed_request *r, const char *dir) {
  memset(r, 0, sizeof *r);
  size_t len = 0;
  r->text = slurp(dir, "request.txt", &len);
  char *eol = strchr(r->text, '\n');
  assert_non_null(eol);
  *eol = '\0';
  parse_request_line(r, r->text);
  char *p = eol + 1;
  r->header_block = p;
  char *end = r->text + len;
  while (p < end && *p != '\n') {
    char *line_end = memchr(p, '\n', (size_t)(end - p));
    if (!line_end) line_end = end;
    if (*p == ' ' || *p == '\t') {
      /* A folded line continues the previous header's value. */
      assert_true(r->header_count > 0);
      cs_sigv4_header *h = &r->headers[r->header_count - 1];
      h->value_len = (size_t)(line_end - h->value);
    } else {
      char *colon = memchr(p, ':', (size_t)(line_end - p));
      assert_non_null(colon);
      assert_true(r->header_count < HEADERS_MAX);
      r->headers[r->header_count++] = (cs_sigv4_header){
          .name = p, .name_len = (size_t)(colon - p), .value = colon + 1, .value_len = (size_t)(line_end - colon - 1)};
    }
    p = line_end < end ? line_end + 1 : end;
  }
  r->header_block_len = (size_t)(p - r->header_block);
  r->body = p < end ? p + 1 : end;
  r->body_len = (size_t)(end - r->body);
}

typedef struct parsed_context {
  json_t *root;
  cs_sigv4_params params;
  char amz_date[17];
  bool sign_body;
} parsed_context;

static const char *json_text(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static void parse_context(parsed_context *c, const char *dir) {
  memset(c, 0, sizeof *c);
  char *text = slurp(dir, "context.json", NULL);
  json_error_t error;
  c->root = json_loads(text, 0, &error);
  free(text);
  if (!c->root) fail_msg("%s/context.json: %s", dir, error.text);
  json_t *cred = json_object_get(c->root, "credentials");
  assert_non_null(cred);
  const char *ts = json_text(c->root, "timestamp");
  if (!ts) {
    fail_msg("%s/context.json: no timestamp", dir);
    return;
  }
  size_t n = 0;
  for (const char *t = ts; *t && n < 16; t++) {
    if (*t != '-' && *t != ':') c->amz_date[n++] = *t;
  }
  c->amz_date[n] = '\0';
  c->sign_body = json_is_true(json_object_get(c->root, "sign_body"));
  c->params = (cs_sigv4_params){
      .access_key_id = json_text(cred, "access_key_id"),
      .secret_access_key = json_text(cred, "secret_access_key"),
      .session_token = json_text(cred, "token"),
      .region = json_text(c->root, "region"),
      .service = json_text(c->root, "service"),
      .amz_date = c->amz_date,
      .normalize_path = json_is_true(json_object_get(c->root, "normalize")),
      .content_sha256_header = c->sign_body,
      .omit_session_token = json_is_true(json_object_get(c->root, "omit_session_token")),
      .expires_s = (uint32_t)json_integer_value(json_object_get(c->root, "expiration_in_seconds")),
  };
}

static void expect_file(const char *dir, const char *name, const char *got, size_t got_len) {
  size_t len = 0;
  char *want = slurp(dir, name, &len);
  if (len != got_len || memcmp(want, got, len) != 0) {
    fprintf(stderr, "%s/%s differs\n--- want\n%s\n--- got\n%.*s\n", dir, name, want, (int)got_len, got);
    free(want);
    fail_msg("%s/%s", dir, name);
  }
  free(want);
}

static void expect_text(const char *dir, const char *name, const char *got) {
  expect_file(dir, name, got, strlen(got));
}

static void append(char **buf, size_t *len, const char *bytes, size_t n) {
  *buf = realloc(*buf, *len + n + 1);
  assert_non_null(*buf);
  memcpy(*buf + *len, bytes, n);
  *len += n;
  (*buf)[*len] = '\0';
}

static void appends(char **buf, size_t *len, const char *s) { append(buf, len, s, strlen(s)); }

static void check_header_form(const char *dir, const parsed_request *r, const parsed_context *c,
                              const cs_sigv4_request *req) {
  cs_sigv4_out out;
  assert_int_equal(cs_sigv4_sign_header(&c->params, req, &out), CS_E_OK);
  expect_text(dir, "header-canonical-request.txt", out.canonical_request);
  expect_text(dir, "header-string-to-sign.txt", out.string_to_sign);
  expect_text(dir, "header-signature.txt", out.signature);
  char *s = NULL;
  size_t n = 0;
  appends(&s, &n, r->method);
  appends(&s, &n, " ");
  appends(&s, &n, r->target);
  appends(&s, &n, " HTTP/1.1\n");
  append(&s, &n, r->header_block, r->header_block_len);
  if (c->params.session_token) {
    appends(&s, &n, "X-Amz-Security-Token:");
    appends(&s, &n, c->params.session_token);
    appends(&s, &n, "\n");
  }
  appends(&s, &n, "X-Amz-Date:");
  appends(&s, &n, c->amz_date);
  appends(&s, &n, "\n");
  if (c->sign_body) {
    appends(&s, &n, "x-amz-content-sha256:");
    appends(&s, &n, out.payload_hash);
    appends(&s, &n, "\n");
  }
  appends(&s, &n, "Authorization:");
  appends(&s, &n, out.authorization);
  appends(&s, &n, "\n\n");
  append(&s, &n, r->body, r->body_len);
  expect_file(dir, "header-signed-request.txt", s, n);
  free(s);
  cs_sigv4_out_free(&out);
}

static void check_query_form(const char *dir, const parsed_request *r, const parsed_context *c,
                             const cs_sigv4_request *req) {
  cs_sigv4_out out;
  assert_int_equal(cs_sigv4_sign_query(&c->params, req, &out), CS_E_OK);
  expect_text(dir, "query-canonical-request.txt", out.canonical_request);
  expect_text(dir, "query-string-to-sign.txt", out.string_to_sign);
  expect_text(dir, "query-signature.txt", out.signature);
  char *s = NULL;
  size_t n = 0;
  appends(&s, &n, r->method);
  appends(&s, &n, " ");
  append(&s, &n, r->path, r->path_len);
  appends(&s, &n, "?");
  appends(&s, &n, out.query);
  appends(&s, &n, " HTTP/1.1\n");
  append(&s, &n, r->header_block, r->header_block_len);
  appends(&s, &n, "\n");
  append(&s, &n, r->body, r->body_len);
  expect_file(dir, "query-signed-request.txt", s, n);
  free(s);
  cs_sigv4_out_free(&out);
}

static void test_case(void **state) {
  const char *dir = *state;
  parsed_request r;
  parsed_context c;
  parse_request(&r, dir);
  parse_context(&c, dir);
  cs_sigv4_request req = {.method = r.method,
                          .path = r.path,
                          .path_len = r.path_len,
                          .query = r.query,
                          .query_len = r.query_len,
                          .headers = r.headers,
                          .header_count = r.header_count,
                          .body = r.body,
                          .body_len = r.body_len};
  check_header_form(dir, &r, &c, &req);
  check_query_form(dir, &r, &c, &req);
  json_decref(c.root);
  free(r.text);
}

static void test_case_count(void **state) {
  (void)state;
  assert_int_equal(case_count, CASES_EXPECTED);
}

/* ---- The signer's own contract: negative twins and the S3 specifics ---- */

static const cs_sigv4_header host_header = {"Host", 4, "127.0.0.1:9000", 14};

static cs_sigv4_params s3_params(void) {
  return (cs_sigv4_params){.access_key_id = "AKID",
                           .secret_access_key = "SECRET",
                           .region = "us-east-1",
                           .service = "s3",
                           .amz_date = "20260101T000000Z",
                           .content_sha256_header = true,
                           .expires_s = 60};
}

static void test_refuses_bad_input(void **state) {
  (void)state;
  cs_sigv4_params p = s3_params();
  cs_sigv4_request req = {.method = "GET", .path = "/b/k", .path_len = 4, .headers = &host_header, .header_count = 1};
  cs_sigv4_out out;
  p.amz_date = "2026-01-01";
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_INVALID_ARGUMENT);
  p = s3_params();
  req.payload_hash = "not-a-hash";
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_INVALID_ARGUMENT);
  req.payload_hash = NULL;
  cs_sigv4_header bad = {"Bad Name", 8, "v", 1};
  req.headers = &bad;
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_INVALID_ARGUMENT);
  req.headers = &host_header;
  req.header_count = CS_SIGV4_HEADERS_MAX + 1;
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_TOO_LARGE);
  req.header_count = 1;
  p.access_key_id = NULL;
  assert_int_equal(cs_sigv4_sign_query(&p, &req, &out), CS_E_INVALID_ARGUMENT);
}

static void test_s3_path_not_normalized(void **state) {
  (void)state;
  cs_sigv4_params p = s3_params();
  const char *path = "/bucket/a//b/../c d";
  cs_sigv4_request req = {.method = "PUT",
                          .path = path,
                          .path_len = strlen(path),
                          .headers = &host_header,
                          .header_count = 1,
                          .payload_hash = CS_SIGV4_UNSIGNED_PAYLOAD};
  cs_sigv4_out out;
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_OK);
  assert_non_null(strstr(out.canonical_request, "PUT\n/bucket/a//b/../c%20d\n\n"));
  assert_non_null(strstr(out.canonical_request, "x-amz-content-sha256:UNSIGNED-PAYLOAD\n"));
  assert_string_equal(out.signed_headers, "host;x-amz-content-sha256;x-amz-date");
  assert_string_equal(out.payload_hash, "UNSIGNED-PAYLOAD");
  char first[65];
  memcpy(first, out.signature, sizeof first);
  cs_sigv4_out_free(&out);
  /* A different secret must give a different signature. */
  p.secret_access_key = "SECRET2";
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_OK);
  assert_string_not_equal(out.signature, first);
  cs_sigv4_out_free(&out);
}

/*
 * Session tokens have no documented maximum: a 64 KiB token is signed whole
 * (canonical request and the token header the signer adds), and one past
 * the signer's bound on any string (CS_SIGV4_TEXT_MAX) is refused, never cut.
 */
static void test_long_session_token(void **state) {
  (void)state;
  size_t len = (size_t)64 << 10;
  char *token = malloc(CS_SIGV4_TEXT_MAX + 1);
  assert_non_null(token);
  for (size_t i = 0; i < CS_SIGV4_TEXT_MAX; i++) token[i] = (char)('A' + (i * 7 + i / 26) % 26);
  token[len] = '\0';
  cs_sigv4_params p = s3_params();
  p.session_token = token;
  cs_sigv4_request req = {.method = "GET", .path = "/b/k", .path_len = 4, .headers = &host_header,
                          .header_count = 1, .payload_hash = CS_SIGV4_UNSIGNED_PAYLOAD};
  cs_sigv4_out out;
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_OK);
  const char *line = strstr(out.canonical_request, "\nx-amz-security-token:");
  assert_non_null(line);
  line += strlen("\nx-amz-security-token:");
  assert_int_equal(strcspn(line, "\n"), len);
  assert_memory_equal(line, token, len);
  assert_non_null(strstr(out.signed_headers, "x-amz-security-token"));
  char first[65];
  memcpy(first, out.signature, sizeof first);
  cs_sigv4_out_free(&out);
  token[len - 1] = token[len - 1] == 'A' ? 'B' : 'A'; /* the last byte counts */
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_OK);
  assert_string_not_equal(out.signature, first);
  cs_sigv4_out_free(&out);
  token[len] = 'A';
  token[CS_SIGV4_TEXT_MAX] = '\0';
  assert_int_equal(cs_sigv4_sign_header(&p, &req, &out), CS_E_TOO_LARGE);
  free(token);
}

static void test_uri_encode(void **state) {
  (void)state;
  char out[64];
  assert_int_equal(cs_sigv4_uri_encode("a b/c~=", 7, true, out, sizeof out), 11);
  assert_string_equal(out, "a%20b/c~%3D");
  assert_int_equal(cs_sigv4_uri_encode("a/b", 3, false, out, sizeof out), 5);
  assert_string_equal(out, "a%2Fb");
  assert_int_equal(cs_sigv4_uri_encode("   ", 3, false, out, 9), CS_E_INVALID_ARGUMENT);
  char dec[16];
  assert_int_equal(cs_sigv4_uri_decode("a%2Fb%zz%4", 10, dec, sizeof dec), 8);
  assert_string_equal(dec, "a/b%zz%4");
  char hex[65];
  cs_sigv4_sha256_hex("", 0, hex);
  assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static int case_compare(const void *a, const void *b) { return strcmp(a, b); }

static void list_cases(void) {
  DIR *d = opendir(CAPSTORE_SIGV4_DIR);
  if (!d) {
    fprintf(stderr, "adapter_test_sigv4: the test-suite folder %s is missing\n", CAPSTORE_SIGV4_DIR);
    exit(1);
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL && case_count < CASES_MAX) {
    if (e->d_name[0] == '.') continue;
    snprintf(case_names[case_count++], sizeof case_names[0], "%s", e->d_name);
  }
  closedir(d);
  qsort(case_names, case_count, sizeof case_names[0], case_compare);
}

int main(void) {
  list_cases();
  struct CMUnitTest tests[CASES_MAX + 5];
  unsigned n = 0;
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_case_count);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_refuses_bad_input);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_s3_path_not_normalized);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_uri_encode);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_long_session_token);
  for (unsigned i = 0; i < case_count; i++) {
    tests[n++] = (struct CMUnitTest){case_names[i], test_case, NULL, NULL, case_names[i]};
  }
  return _cmocka_run_group_tests("sigv4", tests, n, NULL, NULL);
}

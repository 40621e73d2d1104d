/*
 * The S3 adapter without a server (src/adapters/s3.c, s3_xml.c): the list and
 * error parsers on real-looking and hostile bodies, URL/key encoding, the
 * outcome classification, configuration checks, and a refused connection.
 */
#include "capstore/s3.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

static char keys[8][CS_KEY_MAX];

static cs_list_page page_of(uint32_t capacity) {
  cs_list_page page;
  memset(&page, 0, sizeof page);
  page.keys = keys;
  page.key_capacity = capacity;
  return page;
}

static const char list_body[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>b</Name><Prefix>v1/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
    "<IsTruncated>true</IsTruncated>"
    "<Contents><Key>v1/a&amp;b.dmi-pack</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
    "<ETag>&quot;x&quot;</ETag><Size>10</Size><StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>v1/c d.dmi-pack</Key><Size>11</Size></Contents>"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
    "</ListBucketResult>";

static void test_list_page(void **state) {
  (void)state;
  cs_list_page page = page_of(2);
  char detail[160];
  assert_int_equal(cs_s3_parse_list(list_body, strlen(list_body), "v1/", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 2);
  assert_string_equal(page.keys[0], "v1/a&b.dmi-pack");
  assert_string_equal(page.keys[1], "v1/c d.dmi-pack");
  assert_string_equal(page.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  assert_string_equal(detail, "");
}

static void test_list_last_page(void **state) {
  (void)state;
  const char *body = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                     "<NextContinuationToken>stale</NextContinuationToken></ListBucketResult>";
  cs_list_page page = page_of(2);
  char detail[160];
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 0);
  assert_string_equal(page.next_token, "");
}

static void expect_list_error(const char *body, uint32_t capacity, int err, const char *detail_part) {
  cs_list_page page = page_of(capacity);
  char detail[160];
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "", &page, detail, sizeof detail), err);
  assert_int_equal(page.key_count, 0);
  if (!strstr(detail, detail_part)) fail_msg("detail \"%s\" lacks \"%s\"", detail, detail_part);
}

static void test_list_hostile(void **state) {
  (void)state;
  expect_list_error(list_body, 1, CS_E_TOO_LARGE, "more than the 1 keys");
  expect_list_error("<ListBucketResult><Contents><Key>a</Key>", 4, CS_E_PARSE, "invalid XML");
  expect_list_error("", 4, CS_E_PARSE, "invalid XML");
  expect_list_error("<Error><Code>x</Code></Error>", 4, CS_E_PARSE, "root element");
  expect_list_error("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", 4, CS_E_PARSE,
                    "IsTruncated without");
  expect_list_error("<!DOCTYPE l [<!ENTITY a \"aaaa\"><!ENTITY b \"&a;&a;&a;\">]>"
                    "<ListBucketResult><Contents><Key>&b;</Key></Contents></ListBucketResult>",
                    4, CS_E_PARSE, "DOCTYPE");
  char deep[2048] = "<ListBucketResult>";
  for (int i = 0; i < 20; i++) strcat(deep, "<a>");
  expect_list_error(deep, 4, CS_E_PARSE, "deeper");
}

/*
 * A key of CS_KEY_MAX bytes (S3's maximum, 1,024) or more cannot be held in
 * a page: it is left out and named, the other keys of the page kept (it made
 * the whole page CS_E_TOO_LARGE, so such an object stopped every walk of its
 * prefix there). One byte less fits, plain or url-encoded (3 bytes a byte).
 */
static void test_list_long_keys(void **state) {
  (void)state;
  static char body[3 * CS_KEY_MAX + 8192];
  static char key[2 * CS_KEY_MAX];
  static const char note[] = "left out 2 listed keys capstore cannot hold, first: key 'kkkkkkkkkk";
  static const char why[] = "...' is CS_KEY_MAX (1024) bytes or longer";
  memset(key, 'k', sizeof key - 1);
  snprintf(body, sizeof body, "<ListBucketResult><Contents><Key>%.*s</Key></Contents><Contents><Key>ok</Key>"
           "</Contents><Contents><Key>%s</Key></Contents></ListBucketResult>", CS_KEY_MAX, key, key);
  cs_list_page page = page_of(4);
  char detail[256];
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 1);
  assert_string_equal(page.keys[0], "ok");
  if (strncmp(detail, note, sizeof note - 1) != 0 || !strstr(detail, why)) fail_msg("detail \"%s\"", detail);
  snprintf(body, sizeof body, "<ListBucketResult><Contents><Key>%.*s</Key></Contents></ListBucketResult>",
           CS_KEY_MAX - 1, key);
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 1);
  assert_int_equal(strlen(page.keys[0]), CS_KEY_MAX - 1);
  assert_string_equal(detail, "");
  /* url-encoded: 1,023 bytes as 3,069 characters fit; 1,024 bytes do not, and are named decoded. */
  int n = snprintf(body, sizeof body, "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>");
  for (uint32_t i = 0; i + 1 < CS_KEY_MAX; i++) n += snprintf(body + n, sizeof body - (size_t)n, "%%6B");
  snprintf(body + n, sizeof body - (size_t)n, "</Key></Contents></ListBucketResult>");
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 1);
  assert_memory_equal(page.keys[0], key, CS_KEY_MAX - 1);
  assert_int_equal(strlen(page.keys[0]), CS_KEY_MAX - 1);
  snprintf(body + n, sizeof body - (size_t)n, "%%6B</Key></Contents><Contents><Key>ok</Key></Contents>"
           "</ListBucketResult>");
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 1);
  assert_string_equal(page.keys[0], "ok");
  if (!strstr(detail, "left out 1 listed key capstore cannot hold, first: key 'kkkkk") || !strstr(detail, why)) {
    fail_msg("detail \"%s\"", detail);
  }
  /* A continuation token is never decoded, and must fit the page's CS_KEY_MAX bytes with its NUL. */
  snprintf(body, sizeof body, "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>%.*s"
           "</NextContinuationToken></ListBucketResult>", CS_KEY_MAX, key);
  expect_list_error(body, 4, CS_E_TOO_LARGE, "a continuation token of 1024 bytes or more");
  snprintf(body, sizeof body, "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>%.*s"
           "</NextContinuationToken></ListBucketResult>", CS_KEY_MAX - 1, key);
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(strlen(page.next_token), CS_KEY_MAX - 1);
}

/*
 * The adapter asks for encoding-type=url (S3 cannot put a key holding U+0001
 * in XML 1.0: it writes "&#x1;", which no XML parser reads, and the whole
 * page failed). An answer saying <EncodingType>url</EncodingType>, wherever
 * in the answer, has its keys percent-decoded ("+" is a space, as botocore's
 * unquote_plus reads it) before any check: the prefix, the key rule. The
 * continuation token is not encoded and is kept as it came.
 */
static const char url_keys[] =
    "<Contents><Key>cat/a%01b.dmi-pack</Key></Contents>"
    "<Contents><Key>cat%2Fc+d%2Be</Key></Contents>"
    "<Contents><Key>cat/100%25</Key></Contents>"
    "<Contents><Key>cat/%E2%82%ac</Key></Contents>"
    "<Contents><Key>cat/%2E%2E/x</Key></Contents>"
    "<Contents><Key>cat/n%00ul</Key></Contents>"
    "<IsTruncated>true</IsTruncated><NextContinuationToken>tok%2F+=</NextContinuationToken>";

static void expect_url_page(const char *body) {
  cs_list_page page = page_of(8);
  char detail[256];
  assert_int_equal(cs_s3_parse_list(body, strlen(body), "cat/", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 4);
  assert_string_equal(page.keys[0], "cat/a\001b.dmi-pack");
  assert_string_equal(page.keys[1], "cat/c d+e");
  assert_string_equal(page.keys[2], "cat/100%");
  assert_string_equal(page.keys[3], "cat/\xe2\x82\xac");
  assert_string_equal(page.next_token, "tok%2F+=");
  assert_string_equal(detail, "left out 2 listed keys capstore cannot hold, first: key 'cat/../x' has a '..' segment "
                              "(keys are sent as written; HTTP and file systems would resolve it)");
}

static void test_list_url_encoded(void **state) {
  (void)state;
  static char body[2048];
  snprintf(body, sizeof body, "<ListBucketResult><Name>b</Name><Prefix>cat%%2F</Prefix>"
           "<EncodingType>url</EncodingType>%s</ListBucketResult>", url_keys);
  expect_url_page(body);
  snprintf(body, sizeof body, "<ListBucketResult>%s<EncodingType>url</EncodingType></ListBucketResult>", url_keys);
  expect_url_page(body);
  /* The NUL key alone: named with its byte shown. */
  const char *nul = "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>cat/n%00ul</Key></Contents>"
                    "</ListBucketResult>";
  cs_list_page page = page_of(8);
  char detail[256];
  assert_int_equal(cs_s3_parse_list(nul, strlen(nul), "cat/", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 0);
  assert_string_equal(detail, "left out 1 listed key capstore cannot hold, first: key 'cat/n\\x00ul' holds a NUL byte");
  /* The twin: an answer without <EncodingType> (s3rver ignores the parameter) is read as plain keys. */
  const char *plain = "<ListBucketResult><Contents><Key>cat/a%01b</Key></Contents><Contents><Key>cat/c+d</Key>"
                      "</Contents><Contents><Key>cat/100%25</Key></Contents><Contents><Key>cat/%2E%2E/x</Key>"
                      "</Contents></ListBucketResult>";
  assert_int_equal(cs_s3_parse_list(plain, strlen(plain), "cat/", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 4);
  assert_string_equal(page.keys[0], "cat/a%01b");
  assert_string_equal(page.keys[1], "cat/c+d");
  assert_string_equal(page.keys[2], "cat/100%25");
  assert_string_equal(page.keys[3], "cat/%2E%2E/x");
  assert_string_equal(detail, "");
}

/* Encoded answers that are wrong are refused whole, the key (or value) named. */
static void test_list_url_refused(void **state) {
  (void)state;
  const char *bodies[] = {
      ("<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>cat/a</Key></Contents>"
       "<Contents><Key>cat/b%4</Key></Contents></ListBucketResult>"),
      "<ListBucketResult><Contents><Key>cat/b%zz1</Key></Contents><EncodingType>url</EncodingType></ListBucketResult>",
      "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>cat/%</Key></Contents></ListBucketResult>",
      "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>dog%2Fx</Key></Contents></ListBucketResult>",
      "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>ca%01t/x</Key></Contents></ListBucketResult>",
      "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key></Key></Contents></ListBucketResult>",
      "<ListBucketResult><EncodingType>base64</EncodingType><Contents><Key>cat/a</Key></Contents></ListBucketResult>",
  };
  const char *details[] = {
      "listed key 'cat/b%4' is not url-encoded: a '%' without two hex digits",
      "listed key 'cat/b%zz1' is not url-encoded: a '%' without two hex digits",
      "listed key 'cat/%' is not url-encoded: a '%' without two hex digits",
      "listed key 'dog/x' is not under the prefix asked for",
      "listed key 'ca\\x01t/x' is not under the prefix asked for",
      "a listed key is empty",
      "EncodingType 'base64' is not url",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    cs_list_page page = page_of(8);
    char detail[256];
    assert_int_equal(cs_s3_parse_list(bodies[i], strlen(bodies[i]), "cat/", &page, detail, sizeof detail),
                     CS_E_PARSE);
    assert_int_equal(page.key_count, 0);
    if (!strstr(detail, details[i])) fail_msg("body %zu: detail \"%s\" lacks \"%s\"", i, detail, details[i]);
  }
}

/*
 * A key outside the prefix asked for, or an empty one, makes the whole
 * answer a refusal naming it. A key with a dot segment under the prefix (S3
 * holds such keys) is left out of the page and named in the detail.
 */
static void test_list_keys_checked(void **state) {
  (void)state;
  const char *bodies[] = {
      "<ListBucketResult><Contents><Key>cat/a</Key></Contents><Contents><Key>dog/b</Key></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>c</Key></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>dog/&#10;b</Key></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>dog/../cat/x</Key></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key></Key></Contents></ListBucketResult>",
  };
  const char *details[] = {"listed key 'dog/b' is not under the prefix", "listed key 'c' is not under",
                           "listed key 'dog/\\x0ab' is not under", "listed key 'dog/../cat/x' is not under",
                           "a listed key is empty"};
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    cs_list_page page = page_of(4);
    char detail[256];
    const char *prefix = i == 4 ? "" : "cat/";
    assert_int_equal(cs_s3_parse_list(bodies[i], strlen(bodies[i]), prefix, &page, detail, sizeof detail),
                     CS_E_PARSE);
    assert_int_equal(page.key_count, 0);
    if (!strstr(detail, details[i])) fail_msg("detail \"%s\" lacks \"%s\"", detail, details[i]);
  }
  const char *dotted = "<ListBucketResult><Contents><Key>cat/a/../../b</Key></Contents><Contents><Key>cat/k</Key>"
                       "</Contents><Contents><Key>cat/./c</Key></Contents><IsTruncated>true</IsTruncated>"
                       "<NextContinuationToken>t</NextContinuationToken></ListBucketResult>";
  cs_list_page page = page_of(4);
  char detail[256];
  assert_int_equal(cs_s3_parse_list(dotted, strlen(dotted), "cat/", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 1);
  assert_string_equal(page.keys[0], "cat/k");
  assert_string_equal(page.next_token, "t");
  assert_string_equal(detail, "left out 2 listed keys capstore cannot hold, first: key 'cat/a/../../b' has a '..' "
                              "segment (keys are sent as written; HTTP and file systems would resolve it)");
  /* The twins: under the prefix (or no prefix at all), names that only look like dot segments. */
  const char *ok = "<ListBucketResult><Contents><Key>cat/..a</Key></Contents><Contents><Key>cat/.b/c.</Key>"
                   "</Contents></ListBucketResult>";
  assert_int_equal(cs_s3_parse_list(ok, strlen(ok), "cat/", &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 2);
  assert_string_equal(detail, "");
  assert_int_equal(cs_s3_parse_list(ok, strlen(ok), NULL, &page, detail, sizeof detail), CS_E_OK);
  assert_int_equal(page.key_count, 2);
}

static void test_error_body(void **state) {
  (void)state;
  const char *body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
                     "<Message>Please reduce your request rate.</Message><RequestId>1</RequestId></Error>";
  char code[32], message[16];
  assert_int_equal(cs_s3_parse_error(body, strlen(body), code, sizeof code, message, sizeof message), CS_E_OK);
  assert_string_equal(code, "SlowDown");
  assert_string_equal(message, "Please reduce y"); /* truncated to fit */
  assert_int_equal(cs_s3_parse_error("<html>502</html>", 16, code, sizeof code, message, sizeof message),
                   CS_E_PARSE);
  assert_string_equal(code, "");
  assert_int_equal(cs_s3_parse_error("not xml", 7, code, sizeof code, message, sizeof message), CS_E_PARSE);
}

static void test_classify(void **state) {
  (void)state;
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 200, NULL), CS_OUT_OK);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 204, ""), CS_OUT_OK);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 206, ""), CS_OUT_OK);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_REFUSED, 0, NULL), CS_OUT_REFUSED);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_TIMEOUT, 0, NULL), CS_OUT_TIMEOUT);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_LOST, 0, NULL), CS_OUT_UNKNOWN);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 500, "InternalError"), CS_OUT_SERVER_ERROR);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 503, "ServiceUnavailable"), CS_OUT_SERVER_ERROR);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 503, "SlowDown"), CS_OUT_THROTTLED);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 429, NULL), CS_OUT_THROTTLED);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 403, "AccessDenied"), CS_OUT_FORBIDDEN);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 404, "NoSuchKey"), CS_OUT_NOT_FOUND);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 412, "PreconditionFailed"), CS_OUT_PRECONDITION);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 413, NULL), CS_OUT_TOO_LARGE);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 400, "EntityTooLarge"), CS_OUT_TOO_LARGE);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 400, "InvalidArgument"), CS_OUT_INVALID);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 416, "InvalidRange"), CS_OUT_INVALID);
  assert_int_equal(cs_s3_classify(CS_S3_TRANSPORT_OK, 301, NULL), CS_OUT_INVALID);
}

static void test_object_url(void **state) {
  (void)state;
  char url[256];
  long n = cs_s3_object_url("http://127.0.0.1:4568/", "bucket", "v1/tenant=a b/x~y.dmi-pack", url, sizeof url);
  assert_string_equal(url, "http://127.0.0.1:4568/bucket/v1/tenant%3Da%20b/x~y.dmi-pack");
  assert_int_equal(n, (long)strlen(url));
  assert_int_equal(cs_s3_object_url("http://h", "b", "k/with/long/key", url, 12), CS_E_TOO_LARGE);
}

static cs_s3_config config_local(const char *endpoint) {
  return (cs_s3_config){.endpoint = endpoint,
                        .bucket = "bucket",
                        .access_key_id = "S3RVER",
                        .secret_access_key = "S3RVER",
                        .allow_insecure = true,
                        .connect_timeout_ms = 2000,
                        .request_timeout_ms = 5000};
}

static void test_config_refused(void **state) {
  (void)state;
  cs_store store;
  char msg[256];
  cs_s3_config cfg = config_local("http://127.0.0.1:1");
  cfg.allow_insecure = false;
  assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "s3.endpoint"));
  cfg = config_local("http://127.0.0.1:1/path");
  assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_CONFIG);
  cfg = config_local("http://127.0.0.1:1");
  cfg.bucket = "";
  assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "s3.bucket"));
}

/*
 * CR, LF or any control byte in a value that goes into a header is refused
 * at open, naming the field and never the value (it may be a secret); so is
 * a '/', ',' or space in the region or key id (the signature's Credential).
 * The twin: what real credentials hold ('/', '+', '=') opens.
 */
static void test_header_values_refused(void **state) {
  (void)state;
  static const char *const fields[] = {"s3.region", "s3.access_key_id", "s3.secret_access_key", "s3.session_token"};
  static const char *const bad[] = {"x\r\nX-Evil: 1", "x\nX-Evil: 1", "x\rX-Evil: 1", "x\001X-Evil", "x\177X-Evil"};
  for (int f = 0; f < 4; f++) {
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
      cs_s3_config cfg = config_local("http://127.0.0.1:1");
      const char **field[] = {&cfg.region, &cfg.access_key_id, &cfg.secret_access_key, &cfg.session_token};
      *field[f] = bad[b];
      cs_store store;
      char msg[256];
      int rc = cs_s3_open(&cfg, &store, msg, sizeof msg);
      if (rc == CS_E_OK) {
        store.ops->close(store.self);
        fail_msg("%s with a control byte (value %zu) opened", fields[f], b);
      }
      assert_int_equal(rc, CS_E_CONFIG);
      if (!strstr(msg, fields[f]) || !strstr(msg, "control byte")) fail_msg("message \"%s\" for %s", msg, fields[f]);
      assert_null(strstr(msg, "Evil"));
    }
  }
  const char *credential_breakers[] = {"us-east-1/x", "us east", "a,b"};
  for (int i = 0; i < 3; i++) {
    cs_s3_config cfg = config_local("http://127.0.0.1:1");
    cfg.region = credential_breakers[i];
    cs_store store;
    char msg[256];
    assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_CONFIG);
    assert_non_null(strstr(msg, "s3.region"));
    cfg = config_local("http://127.0.0.1:1");
    cfg.access_key_id = credential_breakers[i];
    assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_CONFIG);
    assert_non_null(strstr(msg, "s3.access_key_id"));
  }
  cs_s3_config cfg = config_local("http://127.0.0.1:1");
  cfg.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY+=";
  cfg.session_token = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ==";
  cfg.region = "";
  cs_store store;
  char msg[256];
  assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_OK);
  store.ops->close(store.self);
  cfg.bucket = "..";
  assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "s3.bucket"));
}

/* Port 1 on loopback refuses: the answer is REFUSED, with curl's reason. */
static void test_connection_refused(void **state) {
  (void)state;
  cs_store store;
  char msg[256];
  cs_s3_config cfg = config_local("http://127.0.0.1:1");
  assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_OK);
  cs_store_result res;
  cs_object_info info;
  assert_int_equal(store.ops->head(store.self, "v1/k.dmi-pack", &info, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  assert_int_equal(res.http_status, 0);
  assert_true(res.detail[0] != '\0');
  cs_object_info meta;
  memset(&meta, 0, sizeof meta);
  assert_int_equal(store.ops->put(store.self, "v1/k.dmi-pack", "abc", 3, &meta, true, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  char buf[8];
  size_t got = 1;
  cs_range too_big = {.offset = 0, .length = 9};
  assert_int_equal(store.ops->get(store.self, "k", &too_big, buf, sizeof buf, &got, &res), CS_E_INVALID_ARGUMENT);
  assert_int_equal(store.ops->head(store.self, "", &info, &res), CS_E_INVALID_ARGUMENT);
  store.ops->close(store.self);
}

/* curl_multi_perform, wrapped (-Wl,--wrap): fails while perform_failures > 0. */
static int perform_failures;
CURLMcode __real_curl_multi_perform(CURLM *multi, int *running);
CURLMcode __wrap_curl_multi_perform(CURLM *multi, int *running);
CURLMcode __wrap_curl_multi_perform(CURLM *multi, int *running) {
  if (perform_failures > 0) {
    perform_failures--;
    return CURLM_OUT_OF_MEMORY;
  }
  return __real_curl_multi_perform(multi, running);
}

/*
 * The asynchronous form without a server: a request started twice is
 * refused (CS_E_STATE) until it is handed back; a synchronous call whose
 * transfer engine fails returns the error and leaves nothing of its request
 * behind (it never comes back from reap, the bound is whole); reap reports
 * the failure; close abandons what is in flight.
 */
static void test_async_misuse_and_engine_failure(void **state) {
  (void)state;
  cs_store store;
  char msg[256];
  cs_s3_config cfg = config_local("http://127.0.0.1:1");
  cfg.max_connections = 2;
  assert_int_equal(cs_s3_open(&cfg, &store, msg, sizeof msg), CS_E_OK);
  assert_int_equal(store.in_flight_max, 2);
  cs_store_request a = {.op = CS_STORE_HEAD, .id = 1, .key = "k/a"};
  assert_int_equal(cs_store_start(&store, &a), CS_E_OK);
  assert_int_equal(cs_store_start(&store, &a), CS_E_STATE); /* in flight */
  cs_store_request *done = NULL;
  assert_int_equal(cs_store_reap(&store, 5000, &done), 1);
  assert_ptr_equal(done, &a);
  assert_int_equal(a.res.outcome, CS_OUT_REFUSED);

  /* Answered (most likely: the synchronous call drives it too), not yet reaped: still refused. */
  assert_int_equal(cs_store_start(&store, &a), CS_E_OK);
  cs_store_result res;
  cs_object_info info;
  assert_int_equal(store.ops->head(store.self, "k/sync", &info, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  assert_int_equal(cs_store_start(&store, &a), CS_E_STATE);
  assert_int_equal(cs_store_reap(&store, 5000, &done), 1);
  assert_ptr_equal(done, &a);

  /* The engine fails under a synchronous call: the error comes back, and nothing of that request stays. */
  cs_store_request b = {.op = CS_STORE_HEAD, .id = 2, .key = "k/b"};
  assert_int_equal(cs_store_start(&store, &b), CS_E_OK);
  perform_failures = 1;
  assert_int_equal(store.ops->head(store.self, "k/sync", &info, &res), CS_E_NO_MEMORY);
  assert_int_equal(cs_store_reap(&store, 5000, &done), 1);
  assert_ptr_equal(done, &b); /* only b comes back */
  assert_int_equal(cs_store_reap(&store, 0, &done), 0);
  cs_store_request c[2] = {{.op = CS_STORE_HEAD, .id = 3, .key = "k/c"}, {.op = CS_STORE_HEAD, .id = 4, .key = "k/d"}};
  assert_int_equal(cs_store_start(&store, &c[0]), CS_E_OK);
  assert_int_equal(cs_store_start(&store, &c[1]), CS_E_OK); /* the bound is whole */
  assert_int_equal(cs_store_start(&store, &b), CS_E_FULL);
  perform_failures = 1;
  assert_int_equal(cs_store_reap(&store, 1000, &done), CS_E_NO_MEMORY); /* reported, requests stay */
  store.ops->close(store.self); /* abandons c[0] and c[1] */
  assert_int_equal(perform_failures, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_async_misuse_and_engine_failure),
      cmocka_unit_test(test_list_page),    cmocka_unit_test(test_list_last_page), cmocka_unit_test(test_list_hostile),
      cmocka_unit_test(test_list_keys_checked), cmocka_unit_test(test_list_long_keys),
      cmocka_unit_test(test_list_url_encoded), cmocka_unit_test(test_list_url_refused),
      cmocka_unit_test(test_error_body),   cmocka_unit_test(test_classify),       cmocka_unit_test(test_object_url),
      cmocka_unit_test(test_config_refused), cmocka_unit_test(test_header_values_refused),
      cmocka_unit_test(test_connection_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

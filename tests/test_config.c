/* Endpoint validation: what the adapters' configuration refuses, and why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "capstore/service.h"

static void accepts(const char *url, bool insecure) {
  char msg[160];
  int rc = cs_endpoint_validate("s3.endpoint", url, insecure, msg, sizeof msg);
  if (rc != CS_E_OK) print_error("refused %s: %s\n", url, msg);
  assert_int_equal(rc, CS_E_OK);
  assert_string_equal(msg, "");
}

static void refuses(const char *url, bool insecure, const char *why) {
  char msg[160];
  assert_int_equal(cs_endpoint_validate("s3.endpoint", url, insecure, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "s3.endpoint"));
  if (strstr(msg, why) == NULL) print_error("message for %s: %s (want '%s')\n", url, msg, why);
  assert_non_null(strstr(msg, why));
}

static void test_https_accepted(void **state) {
  (void)state;
  accepts("https://s3.amazonaws.com", false);
  accepts("https://127.0.0.1:9000/", false);
  accepts("https://minio.local:443/bucket?x=1", false);
}

static void test_http_only_when_insecure_allowed(void **state) {
  (void)state;
  accepts("http://127.0.0.1:8123", true);
  refuses("http://127.0.0.1:8123", false, "insecure");
}

static void test_scheme_is_explicit(void **state) {
  (void)state;
  refuses("127.0.0.1:9000", true, "explicit scheme");
  refuses("ftp://host", true, "explicit scheme");
  refuses("HTTPS://host", true, "explicit scheme");
  refuses("", true, "is empty");
  refuses(NULL, true, "is empty");
}

static void test_host_and_port(void **state) {
  (void)state;
  refuses("https://", true, "no host");
  refuses("https:///path", true, "no host");
  refuses("https://:9000", true, "no host name");
  refuses("https://user:pw@host", true, "userinfo");
  refuses("https://ho st", true, "space");
  refuses("https://host:0", true, "port");
  refuses("https://host:65536", true, "port");
  refuses("https://host:80a", true, "port");
  refuses("https://host:", true, "port");
  accepts("https://host:65535", false);
  accepts("https://host:1", false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_https_accepted),
      cmocka_unit_test(test_http_only_when_insecure_allowed),
      cmocka_unit_test(test_scheme_is_explicit),
      cmocka_unit_test(test_host_and_port),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

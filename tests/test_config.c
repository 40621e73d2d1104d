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

/* IPv6 literals in brackets (RFC 3986): the host is "[...]", the port after ']'. */
static void test_ipv6_in_brackets(void **state) {
  (void)state;
  accepts("https://[::1]:8123/", false);
  accepts("https://[::1]", false);
  accepts("https://[::1]/", false);
  accepts("http://[2001:db8::42]:9000", true);
  accepts("https://[2001:DB8:0:0:8:800:200C:417A]:443/", false);
  accepts("https://[::ffff:192.0.2.1]:65535", false);
  refuses("https://[::1:8123/", true, "without its closing ']'");
  refuses("https://[::1", true, "without its closing ']'");
  refuses("https://[]:8123", true, "empty IPv6 address");
  refuses("https://[::1]:0", true, "port outside 1..65535");
  refuses("https://[::1]:65536", true, "port outside 1..65535");
  refuses("https://[::1]:", true, "port outside 1..65535");
  refuses("https://[::1]:8:", true, "port outside 1..65535"); /* ':' is not a digit (it follows '9') */
  refuses("https://[::1]x", true, "something other than :port after ']'");
  refuses("https://[::1]]:80", true, "something other than :port after ']'");
  refuses("https://[::g]:80", true, "malformed IPv6 address");
  refuses("https://[fe80::1%25eth0]:80", true, "malformed IPv6 address");
  refuses("https://[1234]:80", true, "malformed IPv6 address");
  refuses("https://[1111:2222:3333:4444:5555:6666:7777:8888:9999:aaaa]", true, "malformed IPv6 address");
  refuses("https://::1:8123/", true, "IPv6 address without brackets");
  refuses("https://host]:80", true, "'[' or ']' outside");
  refuses("https://ho[st:80", true, "'[' or ']' outside");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_https_accepted),
      cmocka_unit_test(test_http_only_when_insecure_allowed),
      cmocka_unit_test(test_scheme_is_explicit),
      cmocka_unit_test(test_host_and_port),
      cmocka_unit_test(test_ipv6_in_brackets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

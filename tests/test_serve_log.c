/*
 * Unit tests of capstore serve's log lines and listen address (src/cli/
 * serve_log.c, serve_addr.c): logfmt and JSON lines with every byte a value
 * can hold escaped, a value too long for a line cut so the line still
 * parses, and listen addresses accepted next to the refused ones around
 * them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serve.h"

/* 2026-12-02T06:40:01.123Z */
#define WALL_NS (1796193601ull * 1000000000ull + 123456789ull)

static char line[SERVE_LOG_LINE_MAX];

static const char *format(bool json, const serve_field *fields, size_t count) {
  size_t n = serve_log_format(line, sizeof line, json, WALL_NS, "info", "listening", fields, count);
  assert_int_equal(n, strlen(line));
  assert_true(n > 0 && line[n - 1] == '\n');
  assert_null(memchr(line, '\n', n - 1)); /* one event, one line */
  return line;
}

/* ---- logfmt -------------------------------------------------------------------------------------------- */

static void test_logfmt_plain_values_stay_bare(void **state) {
  (void)state;
  serve_field f[] = {SF_TEXT("addr", "127.0.0.1:41234"), SF_U64("port", 41234), SF_BOOL("drained", true),
                     SF_BOOL("held", false), SF_U64("max", UINT64_MAX)};
  assert_string_equal(format(false, f, 5), "ts=2026-12-02T06:40:01.123Z level=info event=listening "
                                           "addr=127.0.0.1:41234 port=41234 drained=true held=false "
                                           "max=18446744073709551615\n");
}

static void test_logfmt_quotes_what_needs_it(void **state) {
  (void)state;
  serve_field f[] = {SF_TEXT("a", ""), SF_TEXT("b", NULL), SF_TEXT("c", "two words"), SF_TEXT("d", "k=v"),
                     SF_TEXT("e", "say \"hi\""), SF_TEXT("f", "back\\slash")};
  assert_string_equal(format(false, f, 6), "ts=2026-12-02T06:40:01.123Z level=info event=listening a=\"\" b=\"\" "
                                           "c=\"two words\" d=\"k=v\" e=\"say \\\"hi\\\"\" f=\"back\\\\slash\"\n");
}

static void test_logfmt_escapes_control_bytes_and_newlines(void **state) {
  (void)state;
  serve_field f[] = {SF_TEXT("v", "a\nb\rc\td\x01" "e\x1f" "f\x7f" "g")};
  assert_string_equal(format(false, f, 1), "ts=2026-12-02T06:40:01.123Z level=info event=listening "
                                           "v=\"a\\nb\\rc\\td\\u0001e\\u001ff\\u007fg\"\n");
}

static void test_utf8_kept_and_invalid_bytes_replaced(void **state) {
  (void)state;
  serve_field f[] = {SF_TEXT("ok", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                     SF_TEXT("bad", "\xff\xc3(\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82")};
  const char *l = format(false, f, 2);
  assert_non_null(strstr(l, "ok=\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""));
  /* 0xff; 0xc3 before '(' (cut short); an overlong '/'; a surrogate; above U+10FFFF; a cut sequence */
  assert_non_null(strstr(l, "bad=\"\\ufffd\\ufffd(\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd"
                            "\\ufffd\\ufffd\""));
}

/* ---- JSON ---------------------------------------------------------------------------------------------- */

static void test_json_line(void **state) {
  (void)state;
  serve_field f[] = {SF_TEXT("addr", "127.0.0.1:1"), SF_U64("code", 0), SF_BOOL("drained", true),
                     SF_TEXT("path", "/x \"y\"\\z\n\x02")};
  assert_string_equal(format(true, f, 4), "{\"ts\":\"2026-12-02T06:40:01.123Z\",\"level\":\"info\",\"event\":"
                                          "\"listening\",\"addr\":\"127.0.0.1:1\",\"code\":0,\"drained\":true,"
                                          "\"path\":\"/x \\\"y\\\"\\\\z\\n\\u0002\"}\n");
}

/* ---- bounds -------------------------------------------------------------------------------------------- */

static char *long_value(size_t n, char c) {
  char *v = malloc(n + 1);
  assert_non_null(v);
  memset(v, c, n);
  v[n] = '\0';
  return v;
}

static void test_long_value_is_cut_and_the_line_still_closes(void **state) {
  (void)state;
  for (int json = 0; json <= 1; json++) {
    for (size_t n = SERVE_LOG_LINE_MAX / 2; n < SERVE_LOG_LINE_MAX + 8; n += 7) {
      bool newlines = n < SERVE_LOG_LINE_MAX - 40; /* escaped newlines take two bytes each */
      char *v = long_value(n, newlines ? '\n' : 'a');
      serve_field f[] = {SF_TEXT("v", v), SF_TEXT("after", "x")};
      const char *l = format(json, f, 2);
      size_t len = strlen(l);
      assert_true(len < SERVE_LOG_LINE_MAX);
      const char *tail = json ? "...\"}\n" : "...\"\n";
      assert_string_equal(l + len - strlen(tail), tail);
      assert_null(strstr(l, "after")); /* the fields after a cut one are left out */
      free(v);
    }
  }
}

static void test_many_fields_never_break_a_json_line(void **state) {
  (void)state;
  serve_field f[600];
  for (size_t i = 0; i < 600; i++) f[i] = SF_TEXT("key", "a value of some thirty bytes");
  const char *l = format(true, f, 600);
  size_t len = strlen(l);
  assert_true(len < SERVE_LOG_LINE_MAX);
  assert_string_equal(l + len - 3, "\"}\n"); /* cut at a field (or inside its value), then the brace */
}

/* ---- the listen address -------------------------------------------------------------------------------- */

static void test_addr_accepted(void **state) {
  (void)state;
  serve_addr a;
  char err[200], text[80];
  assert_int_equal(serve_addr_parse("127.0.0.1:9741", &a, err, sizeof err), 0);
  assert_false(a.ipv6);
  assert_int_equal(a.port, 9741);
  serve_addr_format(&a, 41234, text, sizeof text);
  assert_string_equal(text, "127.0.0.1:41234");
  assert_int_equal(serve_addr_parse("[::1]:0", &a, err, sizeof err), 0);
  assert_true(a.ipv6);
  assert_int_equal(a.port, 0);
  serve_addr_format(&a, 8, text, sizeof text);
  assert_string_equal(text, "[::1]:8");
  assert_int_equal(serve_addr_parse("localhost:65535", &a, err, sizeof err), 0);
  assert_string_equal(a.host, "127.0.0.1");
  assert_int_equal(a.port, 65535);
  assert_int_equal(serve_addr_parse("0.0.0.0:5", &a, err, sizeof err), 0);
  serve_addr_url(&a, "/status", text, sizeof text);
  assert_string_equal(text, "http://127.0.0.1:5/status");
  assert_int_equal(serve_addr_parse("[::]:6", &a, err, sizeof err), 0);
  serve_addr_url(&a, "/status", text, sizeof text);
  assert_string_equal(text, "http://[::1]:6/status");
}

static void test_addr_refused(void **state) {
  (void)state;
  static const char *bad[] = {"",          "127.0.0.1",    ":80",          "127.0.0.1:",    "example.com:80",
                              "::1:80",    "[::1]80",      "[::1]",        "[127.0.0.1]:80", "1.2.3.4:65536",
                              "1.2.3.4:-1", "1.2.3.4:+1",  "1.2.3.4:0x10", "1.2.3.4:123456", "1.2.3:80",
                              "[x]:1",     "localhost6:1", "[localhost]:1", "1.2.3.4:8 0"};
  serve_addr a;
  char err[200];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    if (serve_addr_parse(bad[i], &a, err, sizeof err) != -1) fail_msg("accepted '%s'", bad[i]);
    assert_non_null(strstr(err, "HOST:PORT"));
  }
  assert_int_equal(serve_addr_parse(NULL, &a, err, sizeof err), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_logfmt_plain_values_stay_bare),
      cmocka_unit_test(test_logfmt_quotes_what_needs_it),
      cmocka_unit_test(test_logfmt_escapes_control_bytes_and_newlines),
      cmocka_unit_test(test_utf8_kept_and_invalid_bytes_replaced),
      cmocka_unit_test(test_json_line),
      cmocka_unit_test(test_long_value_is_cut_and_the_line_still_closes),
      cmocka_unit_test(test_many_fields_never_break_a_json_line),
      cmocka_unit_test(test_addr_accepted),
      cmocka_unit_test(test_addr_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

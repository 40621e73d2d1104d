/*
 * The ClickHouse adapter's parsers without a server: "Code: N" from error
 * bodies (as 18.16 writes them), the classification of answers, and the
 * strict TabSeparated reader, each accepted input next to its refused twin.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/clickhouse.h"

static cs_outcome classify(long status, const char *body) {
  int32_t code = -1;
  return cs_clickhouse_classify(status, body, strlen(body), &code);
}

static void test_error_code(void **state) {
  (void)state;
  static const char body[] = "Code: 202, e.displayText() = DB::Exception: Too many simultaneous queries";
  int32_t code = 0;
  assert_int_equal(cs_clickhouse_parse_error(body, strlen(body), &code), CS_E_OK);
  assert_int_equal(code, 202);
  assert_int_equal(cs_clickhouse_parse_error("Code: x", 7, &code), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_error("no code here", 12, &code), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_error("Code: 1234567", 13, &code), CS_E_PARSE); /* too long */
  assert_int_equal(cs_clickhouse_parse_error("Code: ", 6, &code), CS_E_PARSE);
}

static void test_classify(void **state) {
  (void)state;
  assert_int_equal(classify(200, "1\n"), CS_OUT_OK);
  assert_int_equal(classify(500, "Code: 202, e.displayText() = DB::Exception: Too many simultaneous queries."),
                   CS_OUT_THROTTLED);
  assert_int_equal(classify(400, "Code: 62, e.displayText() = DB::Exception: Syntax error: failed at position 1:"
                                 " SELECT 1. Max query size exceeded, e.what() = DB::Exception\n"),
                   CS_OUT_TOO_LARGE);
  assert_int_equal(classify(400, "Code: 62, e.displayText() = DB::Exception: Syntax error: failed at position 1"),
                   CS_OUT_INVALID);
  assert_int_equal(classify(500, "Code: 53, e.displayText() = DB::Exception: Type mismatch in IN or VALUES section"),
                   CS_OUT_INVALID);
  assert_int_equal(classify(500, "Code: 241, e.displayText() = DB::Exception: Memory limit exceeded"),
                   CS_OUT_SERVER_ERROR);
  assert_int_equal(classify(500, "Code: 999, unknown"), CS_OUT_SERVER_ERROR);
  assert_int_equal(classify(404, "Code: 60, e.displayText() = DB::Exception: Table default.x doesn't exist."),
                   CS_OUT_NOT_FOUND);
  assert_int_equal(classify(500, "Code: 193, e.displayText() = DB::Exception: Wrong password for user capstore"),
                   CS_OUT_FORBIDDEN);
  /* 200 with an exception in the body (an error after streaming started) is not OK. */
  assert_int_equal(classify(200, "1\nCode: 395, e.displayText() = DB::Exception: Value passed to 'throwIf'"),
                   CS_OUT_SERVER_ERROR);
  assert_int_equal(classify(503, ""), CS_OUT_THROTTLED);
  assert_int_equal(classify(429, ""), CS_OUT_THROTTLED);
  assert_int_equal(classify(502, "bad gateway"), CS_OUT_SERVER_ERROR);
  assert_int_equal(classify(413, ""), CS_OUT_TOO_LARGE);
  assert_int_equal(classify(403, ""), CS_OUT_FORBIDDEN);
}

static int tsv_rows(const char *text, uint32_t columns, char out[][64]) {
  static char buf[1024];
  size_t n = strlen(text);
  memcpy(buf, text, n);
  cs_clickhouse_tsv tsv = {buf, buf + n};
  char *fields[8];
  size_t lengths[8];
  int rows = 0, got;
  while ((got = cs_clickhouse_tsv_next(&tsv, fields, lengths, columns)) == 1) {
    for (uint32_t i = 0; i < columns; i++)
      snprintf(out[(size_t)rows * columns + i], 64, "%s", fields[i] == NULL ? "<null>" : fields[i]);
    rows++;
  }
  return got < 0 ? got : rows;
}

static void test_tsv_strict(void **state) {
  (void)state;
  char out[16][64];
  assert_int_equal(tsv_rows("1\ta\\tb\n2\t\\N\n", 2, out), 2);
  assert_string_equal(out[1], "a\tb");
  assert_string_equal(out[3], "<null>");
  assert_int_equal(tsv_rows("x\\\\y\\'z\t\\n\n", 2, out), 1);
  assert_string_equal(out[0], "x\\y'z");
  assert_string_equal(out[1], "\n");
  assert_int_equal(tsv_rows("", 2, out), 0);
  assert_int_equal(tsv_rows("1\t2", 2, out), CS_E_PARSE);       /* no final newline */
  assert_int_equal(tsv_rows("1\n", 2, out), CS_E_PARSE);        /* a short row */
  assert_int_equal(tsv_rows("1\t2\t3\n", 2, out), CS_E_PARSE);  /* a long row */
  assert_int_equal(tsv_rows("a\\0b\t1\n", 2, out), CS_E_PARSE); /* a decoded NUL */
  assert_int_equal(tsv_rows("a\\qb\t1\n", 2, out), CS_E_PARSE); /* an unknown escape */
  assert_int_equal(tsv_rows("a\\", 1, out), CS_E_PARSE);
}

static void test_u64_strict(void **state) {
  (void)state;
  uint64_t v = 0;
  assert_int_equal(cs_clickhouse_parse_u64("18446744073709551615", &v), CS_E_OK);
  assert_true(v == UINT64_MAX);
  assert_int_equal(cs_clickhouse_parse_u64("0", &v), CS_E_OK);
  assert_int_equal(cs_clickhouse_parse_u64("18446744073709551616", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64("-1", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64(" 1", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64("01", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64("", &v), CS_E_PARSE);
}

static void test_table_names(void **state) {
  (void)state;
  char name[128];
  assert_int_equal(cs_clickhouse_table_name("capstore", "claims", name, sizeof name), CS_E_OK);
  assert_string_equal(name, "capstore_claims_v1");
  assert_int_equal(cs_clickhouse_table_name("a-b", "claims", name, sizeof name), CS_E_CONFIG);
  assert_int_equal(cs_clickhouse_table_name("x'; DROP", "claims", name, sizeof name), CS_E_CONFIG);
  assert_int_equal(cs_clickhouse_table_name("", "claims", name, sizeof name), CS_E_CONFIG);
  cs_clickhouse_config cfg = {.url = "http://127.0.0.1:1/", .table_prefix = "bad prefix"};
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_CONFIG);
  cfg.table_prefix = "ok";
  cfg.user = "a\r\nX-Injected: 1";
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_CONFIG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_code), cmocka_unit_test(test_classify),   cmocka_unit_test(test_tsv_strict),
      cmocka_unit_test(test_u64_strict), cmocka_unit_test(test_table_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

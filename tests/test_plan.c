/* tests/test_plan.c: the fault-plan parser, its positive forms and every error it names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan.h"

#define MSG_SIZE 256

/* The plan is about 100 KiB: one per process, zeroed by each parse. */
static cs_plan plan_storage;

/* A text big enough for CS_PLAN_STEPS_MAX + 1 lines of "at 1s heal\n". */
#define BIG_TEXT_SIZE 16384
static char big_text[BIG_TEXT_SIZE];

static int parse(const char *text, uint32_t *line, char msg[MSG_SIZE]) {
  return cs_plan_parse(text, strlen(text), &plan_storage, line, msg, MSG_SIZE);
}

static void assert_parses(const char *text) {
  uint32_t line = 99;
  char msg[MSG_SIZE];
  int rc = parse(text, &line, msg);
  if (rc != CS_E_OK) fail_msg("expected a valid plan, got %d: %s", rc, msg);
  assert_int_equal(line, 0);
  assert_string_equal(msg, "");
}

/* Asserts the parse fails with rc on line, and that msg is "line N: ..." containing fragment. */
static void assert_error_len(const char *text, size_t len, int rc, uint32_t line,
                             const char *fragment) {
  uint32_t err_line = 0;
  char msg[MSG_SIZE];
  int got = cs_plan_parse(text, len, &plan_storage, &err_line, msg, MSG_SIZE);
  if (got != rc || err_line != line || strstr(msg, fragment) == NULL) {
    fail_msg("want rc %d line %u containing \"%s\"; got rc %d line %u \"%s\"", rc,
             (unsigned)line, fragment, got, (unsigned)err_line, msg);
  }
  char prefix[32];
  (void)snprintf(prefix, sizeof prefix, "line %u: ", (unsigned)line);
  assert_memory_equal(msg, prefix, strlen(prefix));
}

static void assert_error(const char *text, int rc, uint32_t line, const char *fragment) {
  assert_error_len(text, strlen(text), rc, line, fragment);
}

/* ---- the full plan ------------------------------------------------------ */

static const char full_plan[] =
    "# every verb, mode and key\n"
    "set seal_bytes_max 1048576\n"
    "set retry_backoff_ns 250ms\n"
    "end 10m\n"
    "at 0s catalog cut for=1s\n"                                          /* 5 */
    "at 1s catalog stall for=2s\n"
    "at 1s catalog unknown for=3s\n"
    "at 1s catalog too-large for=4s\n"
    "at 1s catalog slow for=5s\n"
    "at 2s store cut for=1ms\n"                                           /* 10 */
    "at 2s store stall for=1us\n"
    "at 2s store unknown for=1ns\n"
    "at 2s store 5xx for=1m\n"
    "at 2s store throttle for=7s\n"
    "at 2s store slow for=8s\n"                                           /* 15 */
    "at 3s store status 503 method=PUT prefix=tenant/a/ for=2s\n"
    "at 3s store status 404 for=1s\n"
    "at 3s store object key=stray/x.dmi-pack foreign\n"
    "at 3s store object key=other\n"
    "at 4s seal count=3 size=1000 index=200 records=7\n"                  /* 20 */
    "at 4s seal\n"
    "at 5s flush deadline=30s expect=drained\n"
    "at 5s flush deadline=1s\n"
    "at 6s rival start\n"
    "at 6s rival stop\n"                                                  /* 25 */
    "at 7s crash point=after-upload\n"
    "at 7s crash\n"
    "at 8s pause for=15s\n"
    "at 9s close budget=5s\n"
    "at 9s replace budget=6s\n"                                           /* 30 */
    "at 10s heal\n"
    "expect packs_lost = 0\n"
    "expect records_indexed >= 100\n"
    "\tat 11s\tcrash  point=before-remove   \n"
    "at 11s crash point=after-index\n"                                    /* 35 */
    "at 11s crash point=now\n"
    "at 12s store status 200 method=HEAD for=1s\n"
    "at 12s store status 599 method=GET for=1s\n"
    "at 12s store status 100 method=LIST for=1s\n"
    "at 12s store status 500 method=DELETE for=1s\n"                      /* 40 */
    "at 13s flush deadline=2s expect=not-drained\n"
    "at 13s flush expect=any deadline=3s\n"
    "at 14s store object foreign key=k2\n"
    "expect a != 1\n"
    "expect b < 2\n"                                                      /* 45 */
    "expect c <= 3\n"
    "expect d > 4\n";

static const cs_plan_step *step_on_line(uint32_t line) {
  for (uint32_t i = 0; i < plan_storage.step_count; i++) {
    if (plan_storage.steps[i].line == line) return &plan_storage.steps[i];
  }
  fail_msg("no step on line %u", (unsigned)line);
  return &plan_storage.steps[0]; /* not reached: fail_msg ends the test */
}

static void test_full_plan_settings_and_expects(void **state) {
  (void)state;
  assert_parses(full_plan);
  const cs_plan *plan = &plan_storage;
  assert_int_equal(plan->end_ns, 600 * CS_SEC_NS);
  assert_int_equal(plan->setting_count, 2);
  assert_string_equal(plan->settings[0].name, "seal_bytes_max");
  assert_int_equal(plan->settings[0].value, 1048576);
  assert_int_equal(plan->settings[0].line, 2);
  assert_string_equal(plan->settings[1].name, "retry_backoff_ns");
  assert_int_equal(plan->settings[1].value, 250 * CS_MS_NS);
  assert_int_equal(plan->expect_count, 6);
  assert_string_equal(plan->expects[0].name, "packs_lost");
  assert_int_equal(plan->expects[0].op, CS_PLAN_OP_EQ);
  assert_int_equal(plan->expects[0].value, 0);
  assert_int_equal(plan->expects[0].line, 32);
  assert_string_equal(plan->expects[1].name, "records_indexed");
  assert_int_equal(plan->expects[1].op, CS_PLAN_OP_GE);
  assert_int_equal(plan->expects[1].value, 100);
  const cs_plan_op ops[] = {CS_PLAN_OP_NE, CS_PLAN_OP_LT, CS_PLAN_OP_LE, CS_PLAN_OP_GT};
  for (uint32_t i = 0; i < 4; i++) {
    assert_int_equal(plan->expects[2 + i].op, ops[i]);
    assert_int_equal(plan->expects[2 + i].value, i + 1);
  }
  assert_int_equal(plan->step_count, 37);
  for (uint32_t i = 1; i < plan->step_count; i++) {
    assert_true(plan->steps[i - 1].at_ns <= plan->steps[i].at_ns);
  }
}

static void test_full_plan_catalog_and_store(void **state) {
  (void)state;
  assert_parses(full_plan);
  const cs_plan_mode catalog_modes[] = {CS_PLAN_MODE_CUT, CS_PLAN_MODE_STALL,
                                        CS_PLAN_MODE_UNKNOWN, CS_PLAN_MODE_TOO_LARGE,
                                        CS_PLAN_MODE_SLOW};
  for (uint32_t i = 0; i < 5; i++) {
    const cs_plan_step *step = step_on_line(5 + i);
    assert_int_equal(step->verb, CS_PLAN_CATALOG);
    assert_int_equal(step->mode, catalog_modes[i]);
    assert_int_equal(step->for_ns, (i + 1) * CS_SEC_NS);
    assert_int_equal(step->at_ns, i == 0 ? 0 : CS_SEC_NS);
  }
  const cs_plan_mode store_modes[] = {CS_PLAN_MODE_CUT, CS_PLAN_MODE_STALL, CS_PLAN_MODE_UNKNOWN,
                                      CS_PLAN_MODE_5XX, CS_PLAN_MODE_THROTTLE, CS_PLAN_MODE_SLOW};
  const uint64_t store_for_ns[] = {CS_MS_NS, 1000, 1, 60 * CS_SEC_NS, 7 * CS_SEC_NS,
                                   8 * CS_SEC_NS};
  for (uint32_t i = 0; i < 6; i++) {
    const cs_plan_step *step = step_on_line(10 + i);
    assert_int_equal(step->verb, CS_PLAN_STORE);
    assert_int_equal(step->mode, store_modes[i]);
    assert_int_equal(step->for_ns, store_for_ns[i]);
  }
  const cs_plan_step *status = step_on_line(16);
  assert_int_equal(status->verb, CS_PLAN_STORE_STATUS);
  assert_int_equal(status->status, 503);
  assert_int_equal(status->method, CS_PLAN_METHOD_PUT);
  assert_string_equal(status->text, "tenant/a/");
  assert_int_equal(status->for_ns, 2 * CS_SEC_NS);
  const cs_plan_step *status_default = step_on_line(17);
  assert_int_equal(status_default->status, 404);
  assert_int_equal(status_default->method, CS_PLAN_METHOD_ANY);
  assert_string_equal(status_default->text, "");
  const cs_plan_method methods[] = {CS_PLAN_METHOD_HEAD, CS_PLAN_METHOD_GET, CS_PLAN_METHOD_LIST,
                                    CS_PLAN_METHOD_DELETE};
  const uint32_t codes[] = {200, 599, 100, 500};
  for (uint32_t i = 0; i < 4; i++) {
    assert_int_equal(step_on_line(37 + i)->method, methods[i]);
    assert_int_equal(step_on_line(37 + i)->status, codes[i]);
  }
  const cs_plan_step *object = step_on_line(18);
  assert_int_equal(object->verb, CS_PLAN_STORE_OBJECT);
  assert_string_equal(object->text, "stray/x.dmi-pack");
  assert_true(object->foreign);
  assert_false(step_on_line(19)->foreign);
  assert_string_equal(step_on_line(19)->text, "other");
  assert_true(step_on_line(43)->foreign);
  assert_string_equal(step_on_line(43)->text, "k2");
}

static void test_full_plan_other_verbs(void **state) {
  (void)state;
  assert_parses(full_plan);
  const cs_plan_step *seal = step_on_line(20);
  assert_int_equal(seal->verb, CS_PLAN_SEAL);
  assert_int_equal(seal->count, 3);
  assert_int_equal(seal->size_bytes, 1000);
  assert_int_equal(seal->index_bytes, 200);
  assert_int_equal(seal->records, 7);
  const cs_plan_step *flush = step_on_line(22);
  assert_int_equal(flush->verb, CS_PLAN_FLUSH);
  assert_int_equal(flush->deadline_ns, 30 * CS_SEC_NS);
  assert_int_equal(flush->flush_expect, CS_PLAN_EXPECT_DRAINED);
  assert_int_equal(step_on_line(41)->flush_expect, CS_PLAN_EXPECT_NOT_DRAINED);
  assert_int_equal(step_on_line(42)->flush_expect, CS_PLAN_EXPECT_ANY);
  assert_int_equal(step_on_line(42)->deadline_ns, 3 * CS_SEC_NS);
  assert_int_equal(step_on_line(24)->verb, CS_PLAN_RIVAL);
  assert_true(step_on_line(24)->start);
  assert_false(step_on_line(25)->start);
  assert_int_equal(step_on_line(26)->verb, CS_PLAN_CRASH);
  assert_int_equal(step_on_line(26)->crash_point, CS_PLAN_CRASH_AFTER_UPLOAD);
  assert_int_equal(step_on_line(34)->crash_point, CS_PLAN_CRASH_BEFORE_REMOVE);
  assert_int_equal(step_on_line(34)->at_ns, 11 * CS_SEC_NS);
  assert_int_equal(step_on_line(35)->crash_point, CS_PLAN_CRASH_AFTER_INDEX);
  assert_int_equal(step_on_line(36)->crash_point, CS_PLAN_CRASH_NOW);
  assert_int_equal(step_on_line(28)->verb, CS_PLAN_PAUSE);
  assert_int_equal(step_on_line(28)->for_ns, 15 * CS_SEC_NS);
  assert_int_equal(step_on_line(29)->verb, CS_PLAN_CLOSE);
  assert_int_equal(step_on_line(29)->deadline_ns, 5 * CS_SEC_NS);
  assert_int_equal(step_on_line(30)->verb, CS_PLAN_REPLACE);
  assert_int_equal(step_on_line(30)->deadline_ns, 6 * CS_SEC_NS);
  assert_int_equal(step_on_line(31)->verb, CS_PLAN_HEAL);
  assert_int_equal(step_on_line(31)->at_ns, 10 * CS_SEC_NS);
}

static void test_defaults(void **state) {
  (void)state;
  assert_parses("at 1s seal\nat 1s flush deadline=1s\nat 1s crash\n"
                "at 1s store status 500 for=1s\nat 1s seal count=9\n");
  const cs_plan_step *seal = &plan_storage.steps[0];
  assert_int_equal(seal->count, 1);
  assert_int_equal(seal->size_bytes, 65536);
  assert_int_equal(seal->index_bytes, 1024);
  assert_int_equal(seal->records, 16);
  assert_int_equal(plan_storage.steps[1].flush_expect, CS_PLAN_EXPECT_ANY);
  assert_int_equal(plan_storage.steps[2].crash_point, CS_PLAN_CRASH_NOW);
  assert_int_equal(plan_storage.steps[3].method, CS_PLAN_METHOD_ANY);
  assert_string_equal(plan_storage.steps[3].text, "");
  /* One key given, the rest still default. */
  assert_int_equal(plan_storage.steps[4].count, 9);
  assert_int_equal(plan_storage.steps[4].size_bytes, 65536);
  assert_int_equal(plan_storage.steps[4].records, 16);
  assert_int_equal(plan_storage.end_ns, 0);
}

static void test_empty_and_comment_plans(void **state) {
  (void)state;
  assert_parses("");
  assert_int_equal(plan_storage.step_count, 0);
  assert_parses("\n\n   \n\t\n# only comments\n  #indented\n#");
  assert_int_equal(plan_storage.step_count, 0);
  assert_int_equal(cs_plan_parse(NULL, 0, &plan_storage, NULL, NULL, 0), CS_E_OK);
}

static void test_crlf_and_no_final_newline(void **state) {
  (void)state;
  assert_parses("at 1s heal\r\nat 2s catalog cut for=1s\r\nend 3s\r\n");
  assert_int_equal(plan_storage.step_count, 2);
  assert_int_equal(plan_storage.steps[1].for_ns, CS_SEC_NS);
  assert_int_equal(plan_storage.end_ns, 3 * CS_SEC_NS);
  assert_parses("at 1s heal\r\nat 2s heal");
  assert_int_equal(plan_storage.step_count, 2);
  assert_int_equal(plan_storage.steps[1].line, 2);
  assert_parses("at 1s store object key=a\r");
  assert_string_equal(plan_storage.steps[0].text, "a");
  /* A CR anywhere but the end of a line is refused. */
  assert_error("at 1s heal\nat 1s\rheal\n", CS_E_PARSE, 2, "carriage return");
  assert_error("at 1s heal\r\r\n", CS_E_PARSE, 1, "carriage return");
}

/* The parser must stop at len: the bytes after it would each make the plan invalid. */
static void test_never_reads_past_len(void **state) {
  (void)state;
  const char text[] = "at 1s heal\nat 2s heal\nat 0s bogus\x01";
  size_t len = strlen("at 1s heal\nat 2s heal");
  uint32_t line = 7;
  char msg[MSG_SIZE];
  assert_int_equal(cs_plan_parse(text, len, &plan_storage, &line, msg, MSG_SIZE), CS_E_OK);
  assert_int_equal(plan_storage.step_count, 2);
  /* Cut inside a word: "at 2s he" is an unknown verb, read as exactly those bytes. */
  assert_error_len(text, len - 2, CS_E_PARSE, 2, "unknown verb 'he'");
  /* A heap copy with no terminator and no slack, so a sanitizer would see an over-read. */
  char *exact = malloc(len);
  assert_non_null(exact);
  memcpy(exact, text, len);
  assert_int_equal(cs_plan_parse(exact, len, &plan_storage, &line, msg, MSG_SIZE), CS_E_OK);
  free(exact);
}

/* ---- errors: one test per class ------------------------------------------ */

static void test_error_unknown_key_names_verb(void **state) {
  (void)state;
  assert_error("at 1s heal\n\n\nat 2s catalog cut fro=1s\n", CS_E_PARSE, 4,
               "unknown key 'fro' for verb 'catalog'");
  /* A key that exists, but on another verb, is refused the same way. */
  assert_error("at 1s seal for=1s\n", CS_E_PARSE, 1, "unknown key 'for' for verb 'seal'");
  assert_error("at 1s store object key=a for=1s\n", CS_E_PARSE, 1,
               "unknown key 'for' for verb 'store object'");
  assert_error("at 1s pause budget=1s for=1s\n", CS_E_PARSE, 1,
               "unknown key 'budget' for verb 'pause'");
  assert_error("at 1s heal x=1\n", CS_E_PARSE, 1, "unknown key 'x' for verb 'heal'");
  assert_error("at 1s seal =5\n", CS_E_PARSE, 1, "unknown key '' for verb 'seal'");
}

static void test_error_time_without_unit(void **state) {
  (void)state;
  assert_error("\nat 5x heal\n", CS_E_PARSE, 2, "time '5x' has no unit (ns, us, ms, s, m)");
  assert_error("at 5 heal\n", CS_E_PARSE, 1, "time '5' has no unit");
  assert_error("at 5S heal\n", CS_E_PARSE, 1, "time '5S' has no unit");
  assert_error("at 5sec heal\n", CS_E_PARSE, 1, "time '5sec' has no unit");
  assert_error("at 5 s heal\n", CS_E_PARSE, 1, "time '5' has no unit");
  assert_error("at s heal\n", CS_E_PARSE, 1, "time 's' does not start with a number");
  assert_error("at -1s heal\n", CS_E_PARSE, 1, "time '-1s' does not start with a number");
  assert_error("at 1s pause for=1h\n", CS_E_PARSE, 1, "time '1h' has no unit");
  assert_error("end 1.5s\n", CS_E_PARSE, 1, "time '1.5s' has no unit");
}

static void test_error_time_order(void **state) {
  (void)state;
  assert_error("at 1s heal\nat 5s heal\nat 5s heal\nat 3s heal\n", CS_E_PARSE, 4,
               "steps out of time order (3s after 5s)");
  assert_error("at 2s heal\nat 1500ms heal\n", CS_E_PARSE, 2,
               "steps out of time order (1500ms after 2s)");
  assert_error("at 1m heal\nat 0ns heal\n", CS_E_PARSE, 2,
               "steps out of time order (0s after 1m)");
  /* Equal times are in order; the same instant spelled in two units is equal. */
  assert_parses("at 1s heal\nat 1000ms heal\nat 1000000us heal\nat 1000000000ns heal\n");
}

static void test_error_missing_required_key(void **state) {
  (void)state;
  assert_error("at 1s heal\n\n\n\n\n\nat 2s catalog cut\n", CS_E_PARSE, 7,
               "'for=' is required for 'catalog cut'");
  assert_error("at 1s store throttle\n", CS_E_PARSE, 1, "'for=' is required for 'store throttle'");
  assert_error("at 1s store status 500 method=GET\n", CS_E_PARSE, 1,
               "'for=' is required for 'store status'");
  assert_error("at 1s pause\n", CS_E_PARSE, 1, "'for=' is required for 'pause'");
  assert_error("at 1s flush expect=drained\n", CS_E_PARSE, 1,
               "'deadline=' is required for 'flush'");
  assert_error("at 1s close\n", CS_E_PARSE, 1, "'budget=' is required for 'close'");
  assert_error("at 1s replace\n", CS_E_PARSE, 1, "'budget=' is required for 'replace'");
  assert_error("at 1s store object foreign\n", CS_E_PARSE, 1,
               "'key=' is required for 'store object'");
}

static void test_error_status_range(void **state) {
  (void)state;
  assert_error("at 1s heal\n#\nat 1s store status 700 for=1s\n", CS_E_PARSE, 3,
               "status 700 is not 100..599");
  assert_error("at 1s store status 99 for=1s\n", CS_E_PARSE, 1, "status 99 is not 100..599");
  assert_error("at 1s store status 600 for=1s\n", CS_E_PARSE, 1, "status 600 is not 100..599");
  assert_error("at 1s store status 0 for=1s\n", CS_E_PARSE, 1, "status 0 is not 100..599");
  assert_error("at 1s store status 5xx for=1s\n", CS_E_PARSE, 1,
               "'5xx' is not an unsigned decimal integer");
  assert_error("at 1s store status for=1s\n", CS_E_PARSE, 1, "needs a CODE");
  assert_error("at 1s store status\n", CS_E_PARSE, 1, "needs a CODE");
  assert_error("at 1s store status 99999999999999999999 for=1s\n", CS_E_PARSE, 1,
               "overflows 64 bits");
}

static void test_error_duplicate_key(void **state) {
  (void)state;
  assert_error("at 1s catalog cut for=1s for=2s\n", CS_E_PARSE, 1, "duplicate key 'for='");
  assert_error("at 1s seal count=1 size=2 count=1\n", CS_E_PARSE, 1, "duplicate key 'count='");
  assert_error("at 1s store object key=a foreign foreign\n", CS_E_PARSE, 1,
               "duplicate word 'foreign'");
  assert_error("set a 1\nset a 2\n", CS_E_PARSE, 2, "'a' is already set on line 1");
}

static void test_error_bad_words(void **state) {
  (void)state;
  assert_error("at 1s explode\n", CS_E_PARSE, 1, "unknown verb 'explode'");
  assert_error("at 1s catalog 5xx for=1s\n", CS_E_PARSE, 1,
               "unknown word '5xx' for verb 'catalog' (cut|stall|unknown|too-large|slow)");
  assert_error("at 1s store too-large for=1s\n", CS_E_PARSE, 1,
               "unknown word 'too-large' for verb 'store' "
               "(status|object|cut|stall|unknown|slow|5xx|throttle|other-bytes|vanish)");
  assert_error("at 1s catalog\n", CS_E_PARSE, 1, "verb 'catalog' needs one of");
  assert_error("at 1s rival\n", CS_E_PARSE, 1, "verb 'rival' needs one of stop|start");
  assert_error("at 1s rival begin\n", CS_E_PARSE, 1, "unknown word 'begin' for verb 'rival'");
  assert_error("at 1s heal now\n", CS_E_PARSE, 1, "unexpected word 'now' for verb 'heal'");
  assert_error("at 1s seal foreign\n", CS_E_PARSE, 1, "unexpected word 'foreign' for verb 'seal'");
  assert_error("at 1s rival start stop\n", CS_E_PARSE, 1, "unexpected word 'stop'");
  assert_error("at 1s heal # no trailing comments\n", CS_E_PARSE, 1, "unexpected word '#'");
  assert_error("at\n", CS_E_PARSE, 1, "'at' needs a TIME and a verb");
  assert_error("at 1s\n", CS_E_PARSE, 1, "'at' needs a verb");
  assert_error("happen 1s heal\n", CS_E_PARSE, 1, "unknown statement 'happen'");
  assert_error("AT 1s heal\n", CS_E_PARSE, 1, "unknown statement 'AT'");
}

static void test_error_bad_values(void **state) {
  (void)state;
  assert_error("at 1s store status 500 method=get for=1s\n", CS_E_PARSE, 1,
               "unknown value 'get' for 'method=' (HEAD|PUT|GET|LIST|DELETE)");
  assert_error("at 1s store status 500 method=any for=1s\n", CS_E_PARSE, 1, "unknown value 'any'");
  assert_error("at 1s flush deadline=1s expect=done\n", CS_E_PARSE, 1,
               "unknown value 'done' for 'expect=' (any|drained|not-drained)");
  assert_error("at 1s crash point=later\n", CS_E_PARSE, 1,
               "(now|after-upload|after-index|before-remove)");
  assert_error("at 1s catalog cut for=\n", CS_E_PARSE, 1, "key 'for=' has no value");
  assert_error("at 1s store object key=\n", CS_E_PARSE, 1, "key 'key=' has no value");
  assert_error("at 1s seal size=12k\n", CS_E_PARSE, 1, "'12k' is not an unsigned decimal integer");
  assert_error("at 1s seal count=-1\n", CS_E_PARSE, 1, "'-1' is not an unsigned decimal integer");
  assert_error("at 1s seal size=+1\n", CS_E_PARSE, 1, "'+1' is not an unsigned decimal integer");
}

static void test_error_count_too_big_for_field(void **state) {
  (void)state;
  assert_parses("at 1s seal count=4294967295 records=4294967295\n");
  assert_int_equal(plan_storage.steps[0].count, UINT32_MAX);
  assert_int_equal(plan_storage.steps[0].records, UINT32_MAX);
  assert_error("at 1s seal count=4294967296\n", CS_E_PARSE, 1,
               "integer '4294967296' is more than 4294967295");
  assert_error("at 1s seal records=4294967296\n", CS_E_PARSE, 1, "is more than 4294967295");
  /* 64-bit fields take the whole range, and not one more. */
  assert_parses("at 1s seal size=18446744073709551615 index=18446744073709551615\n");
  assert_int_equal(plan_storage.steps[0].size_bytes, UINT64_MAX);
  assert_error("at 1s seal size=18446744073709551616\n", CS_E_PARSE, 1,
               "integer '18446744073709551616' overflows 64 bits");
  assert_error("at 1s seal index=99999999999999999999999999\n", CS_E_PARSE, 1,
               "overflows 64 bits");
}

static void test_error_bad_bytes(void **state) {
  (void)state;
  const char with_nul[] = "at 1s heal\nat 2s he\0al\n";
  assert_error_len(with_nul, sizeof with_nul - 1, CS_E_PARSE, 2, "NUL byte at column 9");
  assert_error("at 1s heal\n# caf\xc3\xa9\n", CS_E_PARSE, 2, "non-printable byte 0xc3");
  assert_error("at 1s\x0bheal\n", CS_E_PARSE, 1, "non-printable byte 0x0b at column 6");
  assert_error("\x7f\n", CS_E_PARSE, 1, "non-printable byte 0x7f");
  assert_error("at 1s heal\n\x1b[0m\n", CS_E_PARSE, 2, "non-printable byte 0x1b");
  /* A bad byte inside a comment is still refused: the whole line is checked. */
  assert_error("# \x01\n", CS_E_PARSE, 1, "non-printable byte 0x01");
}

static void test_error_names(void **state) {
  (void)state;
  assert_error("set Seal_max 1\n", CS_E_PARSE, 1, "name 'Seal_max' is not [a-z0-9_]+");
  assert_error("expect packs-lost = 0\n", CS_E_PARSE, 1, "name 'packs-lost' is not [a-z0-9_]+");
  char name[CS_PLAN_NAME_MAX + 1];
  memset(name, 'n', sizeof name);
  name[CS_PLAN_NAME_MAX - 1] = '\0'; /* the longest name: CS_PLAN_NAME_MAX - 1 bytes */
  char text[128];
  (void)snprintf(text, sizeof text, "set %s 5\nexpect %s = 1\n", name, name);
  assert_parses(text);
  assert_string_equal(plan_storage.settings[0].name, name);
  assert_string_equal(plan_storage.expects[0].name, name);
  name[CS_PLAN_NAME_MAX - 1] = 'n';
  name[CS_PLAN_NAME_MAX] = '\0';
  (void)snprintf(text, sizeof text, "at 1s heal\nset %s 5\n", name);
  assert_error(text, CS_E_PARSE, 2, "is longer than 47 bytes");
}

static void test_error_set_expect_end(void **state) {
  (void)state;
  assert_error("set\n", CS_E_PARSE, 1, "'set' needs a NAME and a VALUE");
  assert_error("set a\n", CS_E_PARSE, 1, "'set' needs a NAME and a VALUE");
  assert_error("set a 1 2\n", CS_E_PARSE, 1, "unexpected word '2' after 'set NAME VALUE'");
  assert_error("set a on\n", CS_E_PARSE, 1, "value 'on' is neither an integer nor a TIME");
  assert_error("set a 5x\n", CS_E_PARSE, 1, "time '5x' has no unit");
  assert_error("set a 18446744073709551616\n", CS_E_PARSE, 1, "overflows 64 bits");
  assert_error("set a 18446744074s\n", CS_E_PARSE, 1, "overflows 64-bit nanoseconds");
  assert_error("set a 99999999999999999999999s\n", CS_E_PARSE, 1,
               "time '99999999999999999999999s' overflows 64-bit nanoseconds");
  assert_error("expect a = \n", CS_E_PARSE, 1, "'expect' needs a NAME, an OP and an INTEGER");
  assert_error("expect a == 1\n", CS_E_PARSE, 1, "unknown operator '=='");
  assert_error("expect a =< 1\n", CS_E_PARSE, 1, "unknown operator '=<'");
  assert_error("expect a = 1s\n", CS_E_PARSE, 1, "'1s' is not an unsigned decimal integer");
  assert_error("expect a = 1 2\n", CS_E_PARSE, 1, "unexpected word '2'");
  assert_error("end 1s\nat 1s heal\nend 2s\n", CS_E_PARSE, 3,
               "'end' given twice (first on line 1)");
  assert_error("end\n", CS_E_PARSE, 1, "'end' needs a TIME");
  assert_error("end 0s\n", CS_E_PARSE, 1, "'end' must be after 0s");
  assert_error("end 5s 6s\n", CS_E_PARSE, 1, "unexpected word '6s' after 'end TIME'");
  assert_parses("set a 0\nset b 18446744073709551615\nset c 1us\n"
                "expect a = 18446744073709551615\n");
  assert_int_equal(plan_storage.settings[1].value, UINT64_MAX);
  assert_int_equal(plan_storage.settings[2].value, 1000);
  assert_int_equal(plan_storage.expects[0].value, UINT64_MAX);
}

static void test_error_text_length(void **state) {
  (void)state;
  char text[CS_PLAN_TEXT_MAX + 64];
  char key[CS_PLAN_TEXT_MAX + 1];
  memset(key, 'k', sizeof key);
  key[CS_PLAN_TEXT_MAX - 1] = '\0';
  (void)snprintf(text, sizeof text, "at 1s store object key=%s\n", key);
  assert_parses(text);
  assert_string_equal(plan_storage.steps[0].text, key);
  key[CS_PLAN_TEXT_MAX - 1] = 'k';
  key[CS_PLAN_TEXT_MAX] = '\0';
  (void)snprintf(text, sizeof text, "at 1s store status 500 prefix=%s for=1s\n", key);
  assert_error(text, CS_E_PARSE, 1, "'prefix=' is 256 bytes, more than 255");
  /* TEXT may hold '=' and '#': only the first '=' splits the key. */
  assert_parses("at 1s store object key=a=b#c\n");
  assert_string_equal(plan_storage.steps[0].text, "a=b#c");
}

/* ---- bounds ------------------------------------------------------------- */

/* Fills big_text with count lines of "line" and returns its length. */
static size_t repeat_lines(const char *line, uint32_t count) {
  size_t line_len = strlen(line);
  assert_true(line_len * count < BIG_TEXT_SIZE);
  for (uint32_t i = 0; i < count; i++) memcpy(big_text + i * line_len, line, line_len);
  big_text[line_len * count] = '\0';
  return line_len * count;
}

static void test_steps_max(void **state) {
  (void)state;
  repeat_lines("at 1s heal\n", CS_PLAN_STEPS_MAX);
  assert_parses(big_text);
  assert_int_equal(plan_storage.step_count, CS_PLAN_STEPS_MAX);
  assert_int_equal(plan_storage.steps[CS_PLAN_STEPS_MAX - 1].line, CS_PLAN_STEPS_MAX);
  repeat_lines("at 1s heal\n", CS_PLAN_STEPS_MAX + 1);
  assert_error(big_text, CS_E_TOO_LARGE, CS_PLAN_STEPS_MAX + 1, "more than 256 steps");
  /* Comment and blank lines do not count as steps. */
  repeat_lines("#\n\nat 1s heal\n", CS_PLAN_STEPS_MAX);
  assert_parses(big_text);
}

static void test_expects_and_settings_max(void **state) {
  (void)state;
  repeat_lines("expect x = 1\n", CS_PLAN_EXPECT_MAX);
  assert_parses(big_text);
  assert_int_equal(plan_storage.expect_count, CS_PLAN_EXPECT_MAX);
  repeat_lines("expect x = 1\n", CS_PLAN_EXPECT_MAX + 1);
  assert_error(big_text, CS_E_TOO_LARGE, CS_PLAN_EXPECT_MAX + 1, "more than 64 expectations");
  size_t len = 0;
  for (uint32_t i = 0; i <= CS_PLAN_SETTINGS_MAX; i++) {
    int written = snprintf(big_text + len, BIG_TEXT_SIZE - len, "set s%u %u\n", (unsigned)i,
                           (unsigned)i);
    assert_true(written > 0);
    if (i < CS_PLAN_SETTINGS_MAX) len += (size_t)written;
  }
  assert_error_len(big_text, len + strlen(big_text + len), CS_E_TOO_LARGE,
                   CS_PLAN_SETTINGS_MAX + 1, "more than 64 settings");
  assert_int_equal(cs_plan_parse(big_text, len, &plan_storage, NULL, NULL, 0), CS_E_OK);
  assert_int_equal(plan_storage.setting_count, CS_PLAN_SETTINGS_MAX);
  assert_int_equal(plan_storage.settings[63].value, 63);
}

/* Writes "at 1s heal" padded with spaces to exactly len bytes, then ending. */
static size_t padded_line(size_t len, const char *ending) {
  assert_true(len + 2 < BIG_TEXT_SIZE);
  memset(big_text, ' ', len);
  memcpy(big_text, "at 1s heal", 10);
  size_t end_len = strlen(ending);
  memcpy(big_text + len, ending, end_len);
  big_text[len + end_len] = '\0';
  return len + end_len;
}

/* The limit is CS_PLAN_LINE_MAX bytes of content, not counting the LF or CRLF. */
static void test_line_max(void **state) {
  (void)state;
  padded_line(CS_PLAN_LINE_MAX, "\n");
  assert_parses(big_text);
  padded_line(CS_PLAN_LINE_MAX, "\r\n");
  assert_parses(big_text);
  padded_line(CS_PLAN_LINE_MAX, "");
  assert_parses(big_text);
  padded_line(CS_PLAN_LINE_MAX + 1, "\n");
  assert_error(big_text, CS_E_TOO_LARGE, 1, "line is 1025 bytes, more than 1024");
  padded_line(CS_PLAN_LINE_MAX + 1, "");
  assert_error(big_text, CS_E_TOO_LARGE, 1, "line is 1025 bytes");
  /* A long comment line is refused too, and the line number is the long one. */
  memcpy(big_text, "at 1s heal\n", 11);
  memset(big_text + 11, '#', CS_PLAN_LINE_MAX + 1);
  big_text[11 + CS_PLAN_LINE_MAX + 1] = '\0';
  assert_error(big_text, CS_E_TOO_LARGE, 2, "more than 1024");
}

static void test_parse_time_units(void **state) {
  (void)state;
  const struct {
    const char *word;
    uint64_t ns;
  } good[] = {
      {"0ns", 0},
      {"0m", 0},
      {"1ns", 1},
      {"1us", 1000},
      {"1ms", 1000000},
      {"1s", 1000000000},
      {"1m", UINT64_C(60000000000)},
      {"007s", UINT64_C(7000000000)},
      {"18446744073709551615ns", UINT64_MAX},
      {"18446744073709551us", UINT64_C(18446744073709551000)},
      {"18446744073s", UINT64_C(18446744073000000000)},
      {"307445734m", UINT64_C(18446744040000000000)},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    uint64_t ns = 42;
    assert_int_equal(cs_plan_parse_time(good[i].word, strlen(good[i].word), &ns), CS_E_OK);
    assert_int_equal(ns, good[i].ns);
  }
  const char *const bad[] = {
      "",      "s",   "ms", "1",   "1x", "1sm", "1 s", "1S", "1Ms", "1h", "-1s", "+1s", "1.0s",
      "1e3ns", "0x1s", "18446744073709551616ns", "18446744073709552us", "18446744074s",
      "307445735m", "99999999999999999999999m",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t ns = 42;
    if (cs_plan_parse_time(bad[i], strlen(bad[i]), &ns) != CS_E_PARSE)
      fail_msg("'%s' should not parse", bad[i]);
    assert_int_equal(ns, 42); /* untouched on failure */
  }
  uint64_t ns = 0;
  assert_int_equal(cs_plan_parse_time("15s garbage", 3, &ns), CS_E_OK);
  assert_int_equal(ns, 15 * CS_SEC_NS);
  assert_int_equal(cs_plan_parse_time("15ms", 3, &ns), CS_E_OK); /* "15m" */
  assert_int_equal(ns, 15 * 60 * CS_SEC_NS);
  assert_int_equal(cs_plan_parse_time(NULL, 0, &ns), CS_E_PARSE);
}

static void test_time_overflow_in_plan(void **state) {
  (void)state;
  assert_parses("at 18446744073709551615ns heal\n");
  assert_int_equal(plan_storage.steps[0].at_ns, UINT64_MAX);
  assert_error("at 18446744073709551616ns heal\n", CS_E_PARSE, 1,
               "time '18446744073709551616ns' overflows 64-bit nanoseconds");
  assert_error("at 1s pause for=307445735m\n", CS_E_PARSE, 1, "overflows 64-bit nanoseconds");
  assert_error("at 1s close budget=18446744074s\n", CS_E_PARSE, 1, "overflows");
}

static void test_message_buffer(void **state) {
  (void)state;
  uint32_t line = 0;
  char small[12];
  memset(small, 'x', sizeof small);
  assert_int_equal(cs_plan_parse("at 1s\n", 6, &plan_storage, &line, small, sizeof small),
                   CS_E_PARSE);
  assert_int_equal(line, 1);
  assert_string_equal(small, "line 1: 'at");
  char tiny[4];
  assert_int_equal(cs_plan_parse("at 1s\n", 6, &plan_storage, &line, tiny, sizeof tiny),
                   CS_E_PARSE);
  assert_string_equal(tiny, "lin");
  assert_int_equal(cs_plan_parse("at 1s\n", 6, &plan_storage, NULL, NULL, 0), CS_E_PARSE);
  /* A long offending word is quoted only in part, so the message stays readable. */
  char text[600];
  memset(text, 'v', sizeof text);
  memcpy(text, "at 1s ", 6);
  uint32_t err_line = 0;
  char msg[MSG_SIZE];
  assert_int_equal(cs_plan_parse(text, sizeof text, &plan_storage, &err_line, msg, MSG_SIZE),
                   CS_E_PARSE);
  assert_true(strlen(msg) < 200);
  assert_non_null(strstr(msg, "unknown verb 'vvvv"));
}

static void test_error_keeps_earlier_lines(void **state) {
  (void)state;
  uint32_t line = 0;
  char msg[MSG_SIZE];
  const char *text = "set a 1\nat 1s heal\nexpect b = 2\nat 2s bogus\n";
  assert_int_equal(parse(text, &line, msg), CS_E_PARSE);
  assert_int_equal(line, 4);
  assert_int_equal(plan_storage.step_count, 1);
  assert_int_equal(plan_storage.setting_count, 1);
  assert_int_equal(plan_storage.expect_count, 1);
}

/* A store that lies, a slow disk and a reopen (issue 13), with their refusals. */
static void test_store_lies_disk_and_reopen(void **state) {
  (void)state;
  assert_parses("at 1s store other-bytes for=2s\nat 1s store vanish for=3s\n"
                "at 2s disk slow for=4s\nat 3s reopen\n");
  const cs_plan_step *steps = plan_storage.steps;
  assert_int_equal(plan_storage.step_count, 4);
  assert_int_equal(steps[0].verb, CS_PLAN_STORE);
  assert_int_equal(steps[0].mode, CS_PLAN_MODE_OTHER_BYTES);
  assert_int_equal(steps[0].for_ns, 2 * CS_SEC_NS);
  assert_int_equal(steps[1].mode, CS_PLAN_MODE_VANISH);
  assert_int_equal(steps[1].for_ns, 3 * CS_SEC_NS);
  assert_int_equal(steps[2].verb, CS_PLAN_DISK);
  assert_int_equal(steps[2].mode, CS_PLAN_MODE_SLOW);
  assert_int_equal(steps[2].for_ns, 4 * CS_SEC_NS);
  assert_int_equal(steps[3].verb, CS_PLAN_REOPEN);
  assert_int_equal(steps[3].at_ns, 3 * CS_SEC_NS);
  assert_string_equal(cs_plan_verb_name(CS_PLAN_DISK), "disk");
  assert_string_equal(cs_plan_verb_name(CS_PLAN_REOPEN), "reopen");
  /* The store's lies are the store's: the catalog has none, the disk is only slow. */
  assert_error("at 1s catalog other-bytes for=1s\n", CS_E_PARSE, 1,
               "unknown word 'other-bytes' for verb 'catalog' (cut|stall|unknown|too-large|slow)");
  assert_error("at 1s catalog vanish for=1s\n", CS_E_PARSE, 1, "unknown word 'vanish' for verb 'catalog'");
  assert_error("at 1s disk stall for=1s\n", CS_E_PARSE, 1, "unknown word 'stall' for verb 'disk' (slow)");
  assert_error("at 1s disk for=1s\n", CS_E_PARSE, 1, "unknown word 'for=1s' for verb 'disk'");
  assert_error("at 1s disk\n", CS_E_PARSE, 1, "verb 'disk' needs one of slow");
  assert_error("at 1s disk slow\n", CS_E_PARSE, 1, "'for=' is required for 'disk slow'");
  assert_error("at 1s store vanish\n", CS_E_PARSE, 1, "'for=' is required for 'store vanish'");
  assert_error("at 1s reopen budget=1s\n", CS_E_PARSE, 1, "unknown key 'budget' for verb 'reopen'");
  assert_error("at 1s reopen now\n", CS_E_PARSE, 1, "unexpected word 'now' for verb 'reopen'");
}

static void test_names_and_expect_holds(void **state) {
  (void)state;
  assert_string_equal(cs_plan_verb_name(CS_PLAN_CATALOG), "catalog");
  assert_string_equal(cs_plan_verb_name(CS_PLAN_STORE), "store");
  assert_string_equal(cs_plan_verb_name(CS_PLAN_STORE_STATUS), "store status");
  assert_string_equal(cs_plan_verb_name(CS_PLAN_STORE_OBJECT), "store object");
  assert_string_equal(cs_plan_verb_name(CS_PLAN_RIVAL), "rival");
  assert_string_equal(cs_plan_verb_name(CS_PLAN_HEAL), "heal");
  assert_string_equal(cs_plan_verb_name((cs_plan_verb)0), "unknown");
  assert_string_equal(cs_plan_verb_name((cs_plan_verb)99), "unknown");
  assert_string_equal(cs_plan_op_name(CS_PLAN_OP_EQ), "=");
  assert_string_equal(cs_plan_op_name(CS_PLAN_OP_NE), "!=");
  assert_string_equal(cs_plan_op_name(CS_PLAN_OP_LE), "<=");
  assert_string_equal(cs_plan_op_name(CS_PLAN_OP_GE), ">=");
  assert_string_equal(cs_plan_op_name((cs_plan_op)0), "?");
  assert_string_equal(cs_plan_op_name((cs_plan_op)7), "?");
  cs_plan_expect expect = {.line = 1, .name = "x", .value = 5};
  const struct {
    cs_plan_op op;
    bool below, equal, above; /* for 4, 5 and 6 */
  } table[] = {
      {CS_PLAN_OP_EQ, false, true, false}, {CS_PLAN_OP_NE, true, false, true},
      {CS_PLAN_OP_LT, true, false, false}, {CS_PLAN_OP_LE, true, true, false},
      {CS_PLAN_OP_GT, false, false, true}, {CS_PLAN_OP_GE, false, true, true},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    expect.op = table[i].op;
    assert_int_equal(cs_plan_expect_holds(&expect, 4), table[i].below);
    assert_int_equal(cs_plan_expect_holds(&expect, 5), table[i].equal);
    assert_int_equal(cs_plan_expect_holds(&expect, 6), table[i].above);
  }
  expect.op = CS_PLAN_OP_LE;
  expect.value = UINT64_MAX;
  assert_true(cs_plan_expect_holds(&expect, UINT64_MAX));
  /* The parsed text and the evaluator agree. */
  assert_parses("expect lost <= 0\n");
  assert_true(cs_plan_expect_holds(&plan_storage.expects[0], 0));
  assert_false(cs_plan_expect_holds(&plan_storage.expects[0], 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_plan_settings_and_expects),
      cmocka_unit_test(test_full_plan_catalog_and_store),
      cmocka_unit_test(test_full_plan_other_verbs),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_empty_and_comment_plans),
      cmocka_unit_test(test_crlf_and_no_final_newline),
      cmocka_unit_test(test_never_reads_past_len),
      cmocka_unit_test(test_error_unknown_key_names_verb),
      cmocka_unit_test(test_store_lies_disk_and_reopen),
      cmocka_unit_test(test_error_time_without_unit),
      cmocka_unit_test(test_error_time_order),
      cmocka_unit_test(test_error_missing_required_key),
      cmocka_unit_test(test_error_status_range),
      cmocka_unit_test(test_error_duplicate_key),
      cmocka_unit_test(test_error_bad_words),
      cmocka_unit_test(test_error_bad_values),
      cmocka_unit_test(test_error_count_too_big_for_field),
      cmocka_unit_test(test_error_bad_bytes),
      cmocka_unit_test(test_error_names),
      cmocka_unit_test(test_error_set_expect_end),
      cmocka_unit_test(test_error_text_length),
      cmocka_unit_test(test_steps_max),
      cmocka_unit_test(test_expects_and_settings_max),
      cmocka_unit_test(test_line_max),
      cmocka_unit_test(test_parse_time_units),
      cmocka_unit_test(test_time_overflow_in_plan),
      cmocka_unit_test(test_message_buffer),
      cmocka_unit_test(test_error_keeps_earlier_lines),
      cmocka_unit_test(test_names_and_expect_holds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

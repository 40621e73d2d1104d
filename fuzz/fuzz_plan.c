/*
 * fuzz/fuzz_plan.c: libFuzzer target for the fault-plan parser.
 *
 * Every input is parsed; the result must keep the parser's contract:
 *   - the answer is CS_E_OK, CS_E_PARSE or CS_E_TOO_LARGE;
 *   - an error names a line within the input and its message starts "line N: ";
 *   - a plan stays within its bounds, its steps are in time and line order,
 *     every text field is NUL-terminated and of the shape the grammar allows;
 *   - a plan written back out as canonical text parses to the same plan.
 * A violation prints what broke and aborts, so libFuzzer keeps the input.
 *
 * Replay one input: ./build-fuzz/fuzz/fuzz_plan path/to/input
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MSG_SIZE 256
/* Canonical text of the largest plan: every line is well under 512 bytes. */
#define CANONICAL_MAX ((CS_PLAN_STEPS_MAX + CS_PLAN_EXPECT_MAX + CS_PLAN_SETTINGS_MAX + 1) * 512)

static cs_plan parsed;
static cs_plan reparsed;
static char canonical[CANONICAL_MAX];

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "fuzz_plan: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
      abort();                                                                                   \
    }                                                                                            \
  } while (0)

static const char *const mode_words[] = {NULL,   "cut", "stall",    "unknown",     "too-large",
                                         "slow", "5xx", "throttle", "other-bytes", "vanish"};
static const char *const method_words[] = {"", "HEAD", "PUT", "GET", "LIST", "DELETE"};
static const char *const flush_words[] = {"any", "drained", "not-drained"};
static const char *const crash_words[] = {"now", "after-upload", "after-index", "before-remove"};

/* Lines in the input: every LF ends one, and whatever follows the last LF is one more. */
static uint32_t line_count(const uint8_t *data, size_t size) {
  uint64_t lines = 1;
  for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
  return lines > UINT32_MAX ? UINT32_MAX : (uint32_t)lines;
}

static void check_name(const char name[CS_PLAN_NAME_MAX]) {
  size_t len = strnlen(name, CS_PLAN_NAME_MAX);
  CHECK(len > 0 && len < CS_PLAN_NAME_MAX);
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
}

static void check_text(const char text[CS_PLAN_TEXT_MAX], bool may_be_empty) {
  size_t len = strnlen(text, CS_PLAN_TEXT_MAX);
  CHECK(len < CS_PLAN_TEXT_MAX);
  CHECK(may_be_empty || len > 0);
  for (size_t i = 0; i < len; i++) CHECK(text[i] > ' ' && text[i] <= '~');
}

static void check_step(const cs_plan_step *step, uint32_t lines) {
  CHECK(step->line >= 1 && step->line <= lines);
  CHECK(step->verb >= CS_PLAN_CATALOG && step->verb <= CS_PLAN_REOPEN);
  CHECK(strcmp(cs_plan_verb_name(step->verb), "unknown") != 0);
  CHECK(step->mode <= CS_PLAN_MODE_VANISH);
  CHECK((step->mode != CS_PLAN_MODE_NONE) ==
        (step->verb == CS_PLAN_CATALOG || step->verb == CS_PLAN_STORE || step->verb == CS_PLAN_DISK));
  CHECK(step->method <= CS_PLAN_METHOD_DELETE);
  CHECK(step->flush_expect <= CS_PLAN_EXPECT_NOT_DRAINED);
  CHECK(step->crash_point <= CS_PLAN_CRASH_BEFORE_REMOVE);
  check_text(step->text, step->verb != CS_PLAN_STORE_OBJECT);
  if (step->verb == CS_PLAN_STORE_STATUS) CHECK(step->status >= 100 && step->status <= 599);
  if (step->verb != CS_PLAN_STORE_STATUS) CHECK(step->status == 0);
  if (step->verb == CS_PLAN_CATALOG) CHECK(step->mode != CS_PLAN_MODE_5XX);
  if (step->verb == CS_PLAN_STORE) CHECK(step->mode != CS_PLAN_MODE_TOO_LARGE);
  if (step->verb == CS_PLAN_CATALOG)
    CHECK(step->mode != CS_PLAN_MODE_OTHER_BYTES && step->mode != CS_PLAN_MODE_VANISH);
  if (step->verb == CS_PLAN_DISK) CHECK(step->mode == CS_PLAN_MODE_SLOW);
}

static void check_plan(const cs_plan *plan, uint32_t lines) {
  CHECK(plan->step_count <= CS_PLAN_STEPS_MAX);
  CHECK(plan->expect_count <= CS_PLAN_EXPECT_MAX);
  CHECK(plan->setting_count <= CS_PLAN_SETTINGS_MAX);
  for (uint32_t i = 0; i < plan->step_count; i++) {
    check_step(&plan->steps[i], lines);
    if (i == 0) continue;
    CHECK(plan->steps[i - 1].at_ns <= plan->steps[i].at_ns);
    CHECK(plan->steps[i - 1].line < plan->steps[i].line);
  }
  for (uint32_t i = 0; i < plan->expect_count; i++) {
    const cs_plan_expect *expect = &plan->expects[i];
    CHECK(expect->line >= 1 && expect->line <= lines);
    check_name(expect->name);
    CHECK(expect->op >= CS_PLAN_OP_EQ && expect->op <= CS_PLAN_OP_GE);
    CHECK(strcmp(cs_plan_op_name(expect->op), "?") != 0);
  }
  for (uint32_t i = 0; i < plan->setting_count; i++) {
    CHECK(plan->settings[i].line >= 1 && plan->settings[i].line <= lines);
    check_name(plan->settings[i].name);
    for (uint32_t j = 0; j < i; j++)
      CHECK(strcmp(plan->settings[i].name, plan->settings[j].name) != 0);
  }
}

/* Appends one formatted line to canonical; returns the new length. */
__attribute__((format(printf, 2, 3))) static size_t emit(size_t len, const char *format, ...) {
  va_list args;
  va_start(args, format);
  int written = vsnprintf(canonical + len, CANONICAL_MAX - len, format, args);
  va_end(args);
  CHECK(written > 0 && (size_t)written < CANONICAL_MAX - len);
  return len + (size_t)written;
}

/* The words after "at T verb" that say the same as step's fields. */
static size_t emit_step(size_t len, const cs_plan_step *step) {
  len = emit(len, "at %" PRIu64 "ns %s", step->at_ns, cs_plan_verb_name(step->verb));
  switch (step->verb) {
  case CS_PLAN_CATALOG:
  case CS_PLAN_STORE:
  case CS_PLAN_DISK:
  case CS_PLAN_PAUSE:
    if (step->mode != CS_PLAN_MODE_NONE) len = emit(len, " %s", mode_words[step->mode]);
    return emit(len, " for=%" PRIu64 "ns\n", step->for_ns);
  case CS_PLAN_STORE_STATUS:
    len = emit(len, " %" PRIu32, step->status);
    if (step->method != CS_PLAN_METHOD_ANY)
      len = emit(len, " method=%s", method_words[step->method]);
    if (step->text[0] != '\0') len = emit(len, " prefix=%s", step->text);
    return emit(len, " for=%" PRIu64 "ns\n", step->for_ns);
  case CS_PLAN_STORE_OBJECT:
    return emit(len, "%s key=%s\n", step->foreign ? " foreign" : "", step->text);
  case CS_PLAN_SEAL:
    return emit(len, " records=%" PRIu32 " index=%" PRIu64 " size=%" PRIu64 " count=%" PRIu32 "\n",
                step->records, step->index_bytes, step->size_bytes, step->count);
  case CS_PLAN_FLUSH:
    return emit(len, " expect=%s deadline=%" PRIu64 "ns\n", flush_words[step->flush_expect],
                step->deadline_ns);
  case CS_PLAN_RIVAL: return emit(len, " %s\n", step->start ? "start" : "stop");
  case CS_PLAN_CRASH: return emit(len, " point=%s\n", crash_words[step->crash_point]);
  case CS_PLAN_CLOSE:
  case CS_PLAN_REPLACE: return emit(len, " budget=%" PRIu64 "ns\n", step->deadline_ns);
  case CS_PLAN_HEAL:
  case CS_PLAN_REOPEN: return emit(len, "\n");
  }
  CHECK(false);
  return len;
}

/* Writes plan as canonical text (CRLF endings, tabs, keys reordered); returns its length. */
static size_t emit_plan(const cs_plan *plan) {
  size_t len = emit(0, "# canonical\r\n");
  for (uint32_t i = 0; i < plan->setting_count; i++)
    len = emit(len, "set\t%s %" PRIu64 "\n", plan->settings[i].name, plan->settings[i].value);
  if (plan->end_ns != 0) len = emit(len, "end %" PRIu64 "ns\n", plan->end_ns);
  for (uint32_t i = 0; i < plan->step_count; i++) len = emit_step(len, &plan->steps[i]);
  for (uint32_t i = 0; i < plan->expect_count; i++) {
    const cs_plan_expect *expect = &plan->expects[i];
    len = emit(len, "expect %s %s %" PRIu64 "\r\n", expect->name, cs_plan_op_name(expect->op),
               expect->value);
  }
  return len;
}

static bool steps_equal(const cs_plan_step *a, const cs_plan_step *b) {
  return a->at_ns == b->at_ns && a->verb == b->verb && a->mode == b->mode &&
         a->for_ns == b->for_ns && a->status == b->status && a->method == b->method &&
         strcmp(a->text, b->text) == 0 && a->foreign == b->foreign && a->count == b->count &&
         a->size_bytes == b->size_bytes && a->index_bytes == b->index_bytes &&
         a->records == b->records && a->deadline_ns == b->deadline_ns &&
         a->flush_expect == b->flush_expect && a->start == b->start &&
         a->crash_point == b->crash_point;
}

/* The canonical text of a plan must parse back to the same plan (line numbers aside). */
static void check_round_trip(const cs_plan *plan) {
  size_t len = emit_plan(plan);
  uint32_t err_line = 0;
  char msg[MSG_SIZE];
  int rc = cs_plan_parse(canonical, len, &reparsed, &err_line, msg, sizeof msg);
  if (rc != CS_E_OK) fprintf(stderr, "fuzz_plan: canonical text refused: %s\n%s", msg, canonical);
  CHECK(rc == CS_E_OK);
  CHECK(reparsed.end_ns == plan->end_ns);
  CHECK(reparsed.step_count == plan->step_count);
  CHECK(reparsed.expect_count == plan->expect_count);
  CHECK(reparsed.setting_count == plan->setting_count);
  for (uint32_t i = 0; i < plan->step_count; i++)
    CHECK(steps_equal(&plan->steps[i], &reparsed.steps[i]));
  for (uint32_t i = 0; i < plan->expect_count; i++) {
    CHECK(strcmp(plan->expects[i].name, reparsed.expects[i].name) == 0);
    CHECK(plan->expects[i].op == reparsed.expects[i].op);
    CHECK(plan->expects[i].value == reparsed.expects[i].value);
  }
  for (uint32_t i = 0; i < plan->setting_count; i++) {
    CHECK(strcmp(plan->settings[i].name, reparsed.settings[i].name) == 0);
    CHECK(plan->settings[i].value == reparsed.settings[i].value);
  }
}

static void check_error(int rc, uint32_t err_line, const char *msg, uint32_t lines) {
  CHECK(rc == CS_E_PARSE || rc == CS_E_TOO_LARGE);
  CHECK(err_line >= 1 && err_line <= lines);
  CHECK(memchr(msg, '\0', MSG_SIZE) != NULL);
  char prefix[32];
  int written = snprintf(prefix, sizeof prefix, "line %" PRIu32 ": ", err_line);
  CHECK(written > 0 && strncmp(msg, prefix, (size_t)written) == 0);
  CHECK(strlen(msg) > (size_t)written);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  uint32_t lines = line_count(data, size);
  uint32_t err_line = UINT32_MAX;
  char msg[MSG_SIZE];
  int rc = cs_plan_parse(text, size, &parsed, &err_line, msg, sizeof msg);
  /* The same input answers the same, whatever the message buffer. */
  uint32_t again_line = UINT32_MAX;
  char tiny[5];
  CHECK(cs_plan_parse(text, size, &reparsed, &again_line, tiny, sizeof tiny) == rc);
  CHECK(again_line == err_line);
  CHECK(cs_plan_parse(text, size, &reparsed, NULL, NULL, 0) == rc);
  if (rc != CS_E_OK) {
    check_error(rc, err_line, msg, lines);
    return 0;
  }
  CHECK(err_line == 0 && msg[0] == '\0');
  check_plan(&parsed, lines);
  check_round_trip(&parsed);
  return 0;
}

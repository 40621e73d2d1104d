/*
 * faults/plan.c: the fault-plan parser. One table (plan_forms) says which
 * verbs exist, which word each takes after it, and which keys each allows
 * and requires; the code walks the words of a line against that table.
 *
 * The parser is pure: no allocation, no global mutable state, no I/O. It
 * reads text[0..len) and nothing else, and writes only into the caller's
 * plan and message buffer.
 */
#include "plan.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The longest part of an offending word quoted in an error message. */
#define WORD_SHOW_MAX 64

/* The longest list of alternatives an error message spells out. */
#define CHOICES_TEXT_MAX 160

/* The longest formatted TIME ("18446744073709551615ns" and a NUL). */
#define TIME_TEXT_MAX 32

/* A word of a line: a run of bytes that are neither space nor tab. */
typedef struct plan_word {
  const char *bytes;
  size_t len;
} plan_word;

#define WORD_ARGS(word) (int)((word).len < WORD_SHOW_MAX ? (word).len : WORD_SHOW_MAX), (word).bytes

/* One line without its line ending, and a cursor over its words. */
typedef struct plan_line {
  const char *bytes;
  size_t len;
  size_t pos;
} plan_line;

typedef struct plan_parser {
  cs_plan *plan;
  char *msg;
  size_t msg_size;
  uint32_t line;     /* 1-based number of the line being parsed */
  uint32_t end_line; /* the line of the 'end' statement, 0 before one */
} plan_parser;

/* A list of words whose index is the value they stand for; NULL = no word. */
typedef struct plan_names {
  const char *const *names;
  uint32_t count;
} plan_names;

static const char *const mode_names[] = {
    NULL, "cut", "stall", "unknown", "too-large", "slow", "5xx", "throttle", "other-bytes", "vanish",
};
static const char *const method_names[] = {NULL, "HEAD", "PUT", "GET", "LIST", "DELETE"};
static const char *const flush_expect_names[] = {"any", "drained", "not-drained"};
static const char *const crash_point_names[] = {"now", "after-upload", "after-index",
                                                "before-remove"};
static const char *const rival_names[] = {"stop", "start"};
static const char *const op_names[] = {NULL, "=", "!=", "<", "<=", ">", ">="};

_Static_assert(ARRAY_LEN(mode_names) == CS_PLAN_MODE_VANISH + 1, "one name per mode");
_Static_assert(ARRAY_LEN(method_names) == CS_PLAN_METHOD_DELETE + 1, "one name per method");
_Static_assert(ARRAY_LEN(flush_expect_names) == CS_PLAN_EXPECT_NOT_DRAINED + 1, "flush");
_Static_assert(ARRAY_LEN(crash_point_names) == CS_PLAN_CRASH_BEFORE_REMOVE + 1, "crash");
_Static_assert(ARRAY_LEN(op_names) == CS_PLAN_OP_GE + 1, "one name per operator");

#define NAMES(array) {(array), (uint32_t)ARRAY_LEN(array)}
static const plan_names modes = NAMES(mode_names);
static const plan_names methods = NAMES(method_names);
static const plan_names flush_expects = NAMES(flush_expect_names);
static const plan_names crash_points = NAMES(crash_point_names);
static const plan_names rivals = NAMES(rival_names);
static const plan_names ops = NAMES(op_names);

/* The keys of 'at' lines. Each is allowed only where its verb's form says. */
typedef enum plan_key {
  KEY_FOR = 0,
  KEY_METHOD,
  KEY_PREFIX,
  KEY_KEY,
  KEY_COUNT,
  KEY_SIZE,
  KEY_INDEX,
  KEY_RECORDS,
  KEY_DEADLINE,
  KEY_EXPECT,
  KEY_POINT,
  KEY_BUDGET,
  KEYS_TOTAL
} plan_key;

#define KEY_BIT(key) (UINT32_C(1) << (key))

typedef enum plan_value_kind {
  VALUE_TIME = 1, /* a TIME, in ns */
  VALUE_U32,      /* a decimal integer that fits uint32_t */
  VALUE_U64,      /* a decimal integer that fits uint64_t */
  VALUE_TEXT,     /* 1..CS_PLAN_TEXT_MAX-1 bytes */
  VALUE_CHOICE,   /* one word of a names list; the value is its index */
} plan_value_kind;

typedef struct plan_key_spec {
  const char *name;
  plan_value_kind kind;
  const plan_names *choices; /* VALUE_CHOICE only */
} plan_key_spec;

static const plan_key_spec key_specs[KEYS_TOTAL] = {
    [KEY_FOR] = {"for", VALUE_TIME, NULL},
    [KEY_METHOD] = {"method", VALUE_CHOICE, &methods},
    [KEY_PREFIX] = {"prefix", VALUE_TEXT, NULL},
    [KEY_KEY] = {"key", VALUE_TEXT, NULL},
    [KEY_COUNT] = {"count", VALUE_U32, NULL},
    [KEY_SIZE] = {"size", VALUE_U64, NULL},
    [KEY_INDEX] = {"index", VALUE_U64, NULL},
    [KEY_RECORDS] = {"records", VALUE_U32, NULL},
    [KEY_DEADLINE] = {"deadline", VALUE_TIME, NULL},
    [KEY_EXPECT] = {"expect", VALUE_CHOICE, &flush_expects},
    [KEY_POINT] = {"point", VALUE_CHOICE, &crash_points},
    [KEY_BUDGET] = {"budget", VALUE_TIME, NULL},
};

/* Bare words allowed after a verb's form word, among its keys. */
#define FLAG_FOREIGN UINT32_C(1)
static const struct {
  const char *name;
  uint32_t bit;
} flag_specs[] = {{"foreign", FLAG_FOREIGN}};

/* What the word after the verb chooses, when the verb takes a choice. */
typedef enum plan_choice {
  CHOICE_NONE = 0,
  CHOICE_MODE,  /* sets step->mode */
  CHOICE_RIVAL, /* sets step->start */
} plan_choice;

#define MODE_BIT(mode) (UINT32_C(1) << (mode))
#define CATALOG_MODES                                                                            \
  (MODE_BIT(CS_PLAN_MODE_CUT) | MODE_BIT(CS_PLAN_MODE_STALL) | MODE_BIT(CS_PLAN_MODE_UNKNOWN) |  \
   MODE_BIT(CS_PLAN_MODE_TOO_LARGE) | MODE_BIT(CS_PLAN_MODE_SLOW))
#define STORE_MODES                                                                              \
  (MODE_BIT(CS_PLAN_MODE_CUT) | MODE_BIT(CS_PLAN_MODE_STALL) | MODE_BIT(CS_PLAN_MODE_UNKNOWN) |  \
   MODE_BIT(CS_PLAN_MODE_5XX) | MODE_BIT(CS_PLAN_MODE_THROTTLE) | MODE_BIT(CS_PLAN_MODE_SLOW) |   \
   MODE_BIT(CS_PLAN_MODE_OTHER_BYTES) | MODE_BIT(CS_PLAN_MODE_VANISH))
#define DISK_MODES MODE_BIT(CS_PLAN_MODE_SLOW)

/*
 * One form of an 'at' line: the verb word, then either a fixed form word
 * ("status"), one word of a choice (a mode), or nothing. Rows of one verb
 * word are adjacent; the first row that matches the next word wins.
 */
typedef struct plan_form {
  const char *verb_word;
  const char *form_word; /* the fixed second word, or NULL */
  const char *name;      /* how errors and cs_plan_verb_name call it */
  cs_plan_verb verb;
  plan_choice choice;
  uint32_t choice_bits; /* which indexes of the choice's names are allowed */
  bool takes_code;      /* a status CODE word follows the form word */
  uint32_t keys;        /* KEY_BITs allowed */
  uint32_t required;    /* KEY_BITs required; a subset of keys */
  uint32_t flags;       /* FLAG_ bits allowed */
} plan_form;

static const plan_form plan_forms[] = {
    {.verb_word = "catalog", .name = "catalog", .verb = CS_PLAN_CATALOG, .choice = CHOICE_MODE,
     .choice_bits = CATALOG_MODES, .keys = KEY_BIT(KEY_FOR), .required = KEY_BIT(KEY_FOR)},
    {.verb_word = "store", .form_word = "status", .name = "store status",
     .verb = CS_PLAN_STORE_STATUS, .takes_code = true,
     .keys = KEY_BIT(KEY_FOR) | KEY_BIT(KEY_METHOD) | KEY_BIT(KEY_PREFIX),
     .required = KEY_BIT(KEY_FOR)},
    {.verb_word = "store", .form_word = "object", .name = "store object",
     .verb = CS_PLAN_STORE_OBJECT, .keys = KEY_BIT(KEY_KEY), .required = KEY_BIT(KEY_KEY),
     .flags = FLAG_FOREIGN},
    {.verb_word = "store", .name = "store", .verb = CS_PLAN_STORE, .choice = CHOICE_MODE,
     .choice_bits = STORE_MODES, .keys = KEY_BIT(KEY_FOR), .required = KEY_BIT(KEY_FOR)},
    {.verb_word = "seal", .name = "seal", .verb = CS_PLAN_SEAL,
     .keys = KEY_BIT(KEY_COUNT) | KEY_BIT(KEY_SIZE) | KEY_BIT(KEY_INDEX) | KEY_BIT(KEY_RECORDS)},
    {.verb_word = "flush", .name = "flush", .verb = CS_PLAN_FLUSH,
     .keys = KEY_BIT(KEY_DEADLINE) | KEY_BIT(KEY_EXPECT), .required = KEY_BIT(KEY_DEADLINE)},
    {.verb_word = "rival", .name = "rival", .verb = CS_PLAN_RIVAL, .choice = CHOICE_RIVAL,
     .choice_bits = UINT32_C(3)},
    {.verb_word = "crash", .name = "crash", .verb = CS_PLAN_CRASH, .keys = KEY_BIT(KEY_POINT)},
    {.verb_word = "pause", .name = "pause", .verb = CS_PLAN_PAUSE, .keys = KEY_BIT(KEY_FOR),
     .required = KEY_BIT(KEY_FOR)},
    {.verb_word = "close", .name = "close", .verb = CS_PLAN_CLOSE, .keys = KEY_BIT(KEY_BUDGET),
     .required = KEY_BIT(KEY_BUDGET)},
    {.verb_word = "replace", .name = "replace", .verb = CS_PLAN_REPLACE,
     .keys = KEY_BIT(KEY_BUDGET), .required = KEY_BIT(KEY_BUDGET)},
    {.verb_word = "heal", .name = "heal", .verb = CS_PLAN_HEAL},
    {.verb_word = "disk", .name = "disk", .verb = CS_PLAN_DISK, .choice = CHOICE_MODE,
     .choice_bits = DISK_MODES, .keys = KEY_BIT(KEY_FOR), .required = KEY_BIT(KEY_FOR)},
    {.verb_word = "reopen", .name = "reopen", .verb = CS_PLAN_REOPEN},
};

/* TIME units, smallest first. A suffix must match one of these whole ("1sm" is no TIME). */
static const struct {
  const char *suffix;
  uint64_t ns;
} time_units[] = {
    {"ns", UINT64_C(1)}, {"us", UINT64_C(1000)}, {"ms", CS_MS_NS},
    {"s", CS_SEC_NS},    {"m", 60 * CS_SEC_NS},
};

/* ---- leaves: words, numbers, names ------------------------------------ */

static bool word_is(plan_word word, const char *literal) {
  assert(literal != NULL);
  size_t literal_len = strlen(literal);
  return word.len == literal_len && memcmp(word.bytes, literal, literal_len) == 0;
}

/* Moves the cursor past the next word; false at the end of the line. */
static bool line_next_word(plan_line *line, plan_word *word) {
  assert(line->pos <= line->len);
  while (line->pos < line->len && (line->bytes[line->pos] == ' ' || line->bytes[line->pos] == '\t'))
    line->pos++;
  if (line->pos == line->len) return false;
  size_t start = line->pos;
  while (line->pos < line->len && line->bytes[line->pos] != ' ' && line->bytes[line->pos] != '\t')
    line->pos++;
  word->bytes = line->bytes + start;
  word->len = line->pos - start;
  assert(word->len > 0 && line->pos <= line->len);
  return true;
}

/* Index of word in names, or -1 when it names none of them. */
static int32_t names_find(const plan_names *names, plan_word word) {
  assert(names != NULL && names->count < INT32_MAX);
  for (uint32_t i = 0; i < names->count; i++) {
    if (names->names[i] != NULL && word_is(word, names->names[i])) return (int32_t)i;
  }
  return -1;
}

typedef enum number_result {
  NUMBER_OK = 0,
  NUMBER_NOT_DIGITS, /* empty, or a byte other than 0-9 */
  NUMBER_OVERFLOW,   /* more than UINT64_MAX */
} number_result;

static number_result number_parse(const char *bytes, size_t len, uint64_t *out) {
  assert(out != NULL);
  if (len == 0) return NUMBER_NOT_DIGITS;
  for (size_t i = 0; i < len; i++)
    if (bytes[i] < '0' || bytes[i] > '9') return NUMBER_NOT_DIGITS;
  return cs_decimal_u64(bytes, len, false, out) == CS_E_OK ? NUMBER_OK : NUMBER_OVERFLOW; /* digits: only too large */
}

typedef enum time_result {
  TIME_OK = 0,
  TIME_NO_DIGITS, /* does not start with a decimal digit */
  TIME_NO_UNIT,   /* the digits are followed by nothing or by no known unit */
  TIME_OVERFLOW,  /* the value in ns exceeds UINT64_MAX */
} time_result;

static time_result time_parse(const char *bytes, size_t len, uint64_t *out_ns) {
  assert(out_ns != NULL);
  size_t digits = 0;
  while (digits < len && bytes[digits] >= '0' && bytes[digits] <= '9') digits++;
  if (digits == 0) return TIME_NO_DIGITS;
  plan_word suffix = {bytes + digits, len - digits};
  for (size_t i = 0; i < ARRAY_LEN(time_units); i++) {
    if (!word_is(suffix, time_units[i].suffix)) continue;
    uint64_t count = 0;
    number_result result = number_parse(bytes, digits, &count);
    assert(result != NUMBER_NOT_DIGITS); /* bytes[0..digits) are all digits */
    if (result == NUMBER_OVERFLOW) return TIME_OVERFLOW;
    if (count > UINT64_MAX / time_units[i].ns) return TIME_OVERFLOW;
    *out_ns = count * time_units[i].ns;
    return TIME_OK;
  }
  return TIME_NO_UNIT;
}

/* Writes ns in the largest unit that represents it exactly ("1500ms"); zero as "0s". */
static void time_format(uint64_t ns, char out[TIME_TEXT_MAX]) {
  if (ns == 0) {
    (void)snprintf(out, TIME_TEXT_MAX, "0s");
    return;
  }
  size_t unit = 0; /* 1ns divides everything, so unit 0 always fits */
  for (size_t i = 0; i < ARRAY_LEN(time_units); i++) {
    if (ns % time_units[i].ns == 0) unit = i;
  }
  assert(unit < ARRAY_LEN(time_units) && ns % time_units[unit].ns == 0);
  int written = snprintf(out, TIME_TEXT_MAX, "%" PRIu64 "%s", ns / time_units[unit].ns,
                         time_units[unit].suffix);
  assert(written > 0 && written < TIME_TEXT_MAX);
}

/* Appends word to the "a|b|c" list in out[size]; truncates when full. */
static void alternatives_add(char *out, size_t size, const char *word) {
  assert(out != NULL && size > 0 && word != NULL);
  size_t used = strlen(out);
  assert(used < size);
  (void)snprintf(out + used, size - used, "%s%s", used > 0 ? "|" : "", word);
}

/* Appends each name whose index is set in bits. */
static void alternatives_add_names(char *out, size_t size, const plan_names *names,
                                   uint32_t bits) {
  assert(names->count <= 32);
  for (uint32_t i = 0; i < names->count; i++) {
    if (names->names[i] != NULL && (bits & (UINT32_C(1) << i)) != 0)
      alternatives_add(out, size, names->names[i]);
  }
}

/* ---- errors ------------------------------------------------------------- */

/* Writes "line N: " and the formatted reason into the caller's buffer; returns err. */
__attribute__((format(printf, 3, 4))) static int parser_fail(const plan_parser *parser, int err,
                                                             const char *format, ...) {
  assert(err == CS_E_PARSE || err == CS_E_TOO_LARGE);
  assert(parser->line > 0);
  if (parser->msg_size == 0) return err;
  int head = snprintf(parser->msg, parser->msg_size, "line %" PRIu32 ": ", parser->line);
  assert(head > 0);
  if ((size_t)head >= parser->msg_size) return err;
  va_list args;
  va_start(args, format);
  (void)vsnprintf(parser->msg + head, parser->msg_size - (size_t)head, format, args);
  va_end(args);
  return err;
}

/* CS_E_PARSE naming why word is not a TIME. */
static int parser_time(const plan_parser *parser, plan_word word, uint64_t *out_ns) {
  switch (time_parse(word.bytes, word.len, out_ns)) {
  case TIME_OK: return CS_E_OK;
  case TIME_NO_DIGITS:
    return parser_fail(parser, CS_E_PARSE, "time '%.*s' does not start with a number",
                       WORD_ARGS(word));
  case TIME_NO_UNIT:
    return parser_fail(parser, CS_E_PARSE, "time '%.*s' has no unit (ns, us, ms, s, m)",
                       WORD_ARGS(word));
  case TIME_OVERFLOW:
    return parser_fail(parser, CS_E_PARSE, "time '%.*s' overflows 64-bit nanoseconds",
                       WORD_ARGS(word));
  }
  assert(false && "time_parse answered an unknown result");
  return CS_E_PARSE;
}

/* CS_E_PARSE naming why word is not an unsigned decimal integer of at most max. */
static int parser_integer(const plan_parser *parser, plan_word word, uint64_t max,
                          uint64_t *out) {
  assert(max > 0);
  switch (number_parse(word.bytes, word.len, out)) {
  case NUMBER_OK: break;
  case NUMBER_NOT_DIGITS:
    return parser_fail(parser, CS_E_PARSE, "'%.*s' is not an unsigned decimal integer",
                       WORD_ARGS(word));
  case NUMBER_OVERFLOW:
    return parser_fail(parser, CS_E_PARSE, "integer '%.*s' overflows 64 bits", WORD_ARGS(word));
  }
  if (*out > max) {
    return parser_fail(parser, CS_E_PARSE, "integer '%.*s' is more than %" PRIu64,
                       WORD_ARGS(word), max);
  }
  return CS_E_OK;
}

/* CS_E_PARSE unless word is [a-z0-9_]+ and shorter than CS_PLAN_NAME_MAX; copies it to out. */
static int parser_name(const plan_parser *parser, plan_word word, char out[CS_PLAN_NAME_MAX]) {
  assert(word.len > 0);
  if (word.len >= CS_PLAN_NAME_MAX) {
    return parser_fail(parser, CS_E_PARSE, "name '%.*s' is longer than %u bytes",
                       WORD_ARGS(word), CS_PLAN_NAME_MAX - 1);
  }
  for (size_t i = 0; i < word.len; i++) {
    char c = word.bytes[i];
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') continue;
    return parser_fail(parser, CS_E_PARSE, "name '%.*s' is not [a-z0-9_]+", WORD_ARGS(word));
  }
  memcpy(out, word.bytes, word.len);
  out[word.len] = '\0';
  assert(strlen(out) == word.len);
  return CS_E_OK;
}

/* CS_E_PARSE when the line has another word after what its statement takes. */
static int parser_line_done(const plan_parser *parser, plan_line *line, const char *usage) {
  plan_word extra;
  if (!line_next_word(line, &extra)) return CS_E_OK;
  return parser_fail(parser, CS_E_PARSE, "unexpected word '%.*s' after '%s'", WORD_ARGS(extra),
                     usage);
}

/* ---- 'at' lines: form, keys, flags -------------------------------------- */

static const plan_names *choice_names(plan_choice choice) {
  assert(choice == CHOICE_MODE || choice == CHOICE_RIVAL);
  return choice == CHOICE_MODE ? &modes : &rivals;
}

/* Does word pick this form? Sets the step's choice when it does. */
static bool form_matches(const plan_form *form, plan_word word, cs_plan_step *step) {
  assert(form->form_word == NULL || form->choice == CHOICE_NONE);
  if (form->form_word != NULL) return word_is(word, form->form_word);
  int32_t index = names_find(choice_names(form->choice), word);
  if (index < 0 || (form->choice_bits & (UINT32_C(1) << index)) == 0) return false;
  if (form->choice == CHOICE_MODE) step->mode = (cs_plan_mode)index;
  if (form->choice == CHOICE_RIVAL) step->start = index == 1;
  return true;
}

/* Spells out every word that may follow verb_word ("status|object|cut|..."). */
static void form_alternatives(const char *verb_word, char out[CHOICES_TEXT_MAX]) {
  out[0] = '\0';
  for (size_t i = 0; i < ARRAY_LEN(plan_forms); i++) {
    const plan_form *form = &plan_forms[i];
    if (strcmp(form->verb_word, verb_word) != 0) continue;
    if (form->form_word != NULL) alternatives_add(out, CHOICES_TEXT_MAX, form->form_word);
    if (form->choice != CHOICE_NONE)
      alternatives_add_names(out, CHOICES_TEXT_MAX, choice_names(form->choice), form->choice_bits);
  }
  assert(strlen(out) < CHOICES_TEXT_MAX);
}

/* Every verb word, "catalog|store|...", for the unknown-verb message. */
static void verb_alternatives(char out[CHOICES_TEXT_MAX]) {
  out[0] = '\0';
  for (size_t i = 0; i < ARRAY_LEN(plan_forms); i++) {
    if (i > 0 && strcmp(plan_forms[i - 1].verb_word, plan_forms[i].verb_word) == 0) continue;
    alternatives_add(out, CHOICES_TEXT_MAX, plan_forms[i].verb_word);
  }
  assert(strlen(out) < CHOICES_TEXT_MAX);
}

/*
 * Finds the form of verb and consumes its form or choice word. Answers NULL,
 * with the message written, when the verb is unknown or the next word fits
 * none of its forms (a CS_E_PARSE error).
 */
static const plan_form *form_resolve(const plan_parser *parser, plan_line *line, plan_word verb,
                                     cs_plan_step *step) {
  size_t after_verb = line->pos;
  plan_word next = {NULL, 0};
  bool has_next = line_next_word(line, &next);
  const plan_form *first = NULL;
  for (size_t i = 0; i < ARRAY_LEN(plan_forms); i++) {
    const plan_form *form = &plan_forms[i];
    if (!word_is(verb, form->verb_word)) continue;
    if (first == NULL) first = form;
    bool takes_word = form->form_word != NULL || form->choice != CHOICE_NONE;
    if (takes_word && !(has_next && form_matches(form, next, step))) continue;
    if (!takes_word) line->pos = after_verb; /* the next word is a key: leave it */
    step->verb = form->verb;
    return form;
  }
  char alternatives[CHOICES_TEXT_MAX];
  if (first == NULL) {
    verb_alternatives(alternatives);
    (void)parser_fail(parser, CS_E_PARSE, "unknown verb '%.*s' (%s)", WORD_ARGS(verb),
                      alternatives);
    return NULL;
  }
  form_alternatives(first->verb_word, alternatives);
  if (!has_next) {
    (void)parser_fail(parser, CS_E_PARSE, "verb '%s' needs one of %s", first->verb_word,
                      alternatives);
    return NULL;
  }
  (void)parser_fail(parser, CS_E_PARSE, "unknown word '%.*s' for verb '%s' (%s)",
                    WORD_ARGS(next), first->verb_word, alternatives);
  return NULL;
}

/* The name a missing-key error uses: the verb with its mode ("catalog cut"). */
static void form_full_name(const plan_form *form, const cs_plan_step *step,
                           char out[CHOICES_TEXT_MAX]) {
  assert(form->verb == step->verb);
  if (form->choice == CHOICE_MODE) {
    assert(step->mode > CS_PLAN_MODE_NONE && step->mode <= CS_PLAN_MODE_VANISH);
    (void)snprintf(out, CHOICES_TEXT_MAX, "%s %s", form->name, mode_names[step->mode]);
    return;
  }
  (void)snprintf(out, CHOICES_TEXT_MAX, "%s", form->name);
}

/* Sets the fields that have a default when their key is absent. */
static void step_defaults(cs_plan_step *step) {
  assert(step->verb >= CS_PLAN_CATALOG && step->verb <= CS_PLAN_REOPEN);
  step->method = CS_PLAN_METHOD_ANY;
  step->text[0] = '\0';
  step->flush_expect = CS_PLAN_EXPECT_ANY;
  step->crash_point = CS_PLAN_CRASH_NOW;
  if (step->verb != CS_PLAN_SEAL) return;
  step->count = 1;
  step->size_bytes = 65536;
  step->index_bytes = 1024;
  step->records = 16;
}

/* Stores a parsed number or choice index into the field its key names. */
static void step_set(cs_plan_step *step, plan_key key, uint64_t value) {
  assert(key_specs[key].kind != VALUE_TEXT);
  assert(key_specs[key].kind != VALUE_U32 || value <= UINT32_MAX);
  switch (key) {
  case KEY_FOR: step->for_ns = value; return;
  case KEY_METHOD: step->method = (cs_plan_method)value; return;
  case KEY_COUNT: step->count = (uint32_t)value; return;
  case KEY_SIZE: step->size_bytes = value; return;
  case KEY_INDEX: step->index_bytes = value; return;
  case KEY_RECORDS: step->records = (uint32_t)value; return;
  case KEY_DEADLINE: step->deadline_ns = value; return;
  case KEY_EXPECT: step->flush_expect = (cs_plan_flush_expect)value; return;
  case KEY_POINT: step->crash_point = (cs_plan_crash_point)value; return;
  case KEY_BUDGET: step->deadline_ns = value; return;
  case KEY_PREFIX:
  case KEY_KEY:
  case KEYS_TOTAL: break;
  }
  assert(false && "step_set: not a numeric key");
}

/* CS_E_PARSE when TEXT is empty or longer than CS_PLAN_TEXT_MAX-1; copies it into step->text. */
static int step_set_text(const plan_parser *parser, cs_plan_step *step, plan_key key,
                         plan_word value) {
  assert(key_specs[key].kind == VALUE_TEXT);
  if (value.len >= CS_PLAN_TEXT_MAX) {
    return parser_fail(parser, CS_E_PARSE, "'%s=' is %zu bytes, more than %u",
                       key_specs[key].name, value.len, CS_PLAN_TEXT_MAX - 1);
  }
  memcpy(step->text, value.bytes, value.len);
  step->text[value.len] = '\0';
  assert(strlen(step->text) == value.len);
  return CS_E_OK;
}

/* CS_E_PARSE when value does not fit key's kind; stores it into step otherwise. */
static int step_value(const plan_parser *parser, cs_plan_step *step, plan_key key,
                      plan_word value) {
  const plan_key_spec *spec = &key_specs[key];
  assert(value.len > 0);
  uint64_t number = 0;
  int rc = CS_E_OK;
  switch (spec->kind) {
  case VALUE_TIME: rc = parser_time(parser, value, &number); break;
  case VALUE_U32: rc = parser_integer(parser, value, UINT32_MAX, &number); break;
  case VALUE_U64: rc = parser_integer(parser, value, UINT64_MAX, &number); break;
  case VALUE_TEXT: return step_set_text(parser, step, key, value);
  case VALUE_CHOICE: {
    int32_t index = names_find(spec->choices, value);
    if (index >= 0) {
      number = (uint64_t)index;
      break;
    }
    char alternatives[CHOICES_TEXT_MAX] = "";
    alternatives_add_names(alternatives, sizeof alternatives, spec->choices, UINT32_MAX);
    return parser_fail(parser, CS_E_PARSE, "unknown value '%.*s' for '%s=' (%s)",
                       WORD_ARGS(value), spec->name, alternatives);
  }
  }
  if (rc != CS_E_OK) return rc;
  step_set(step, key, number);
  return CS_E_OK;
}

/*
 * Parses one KEY=VALUE word. CS_E_PARSE for a key the form does not allow,
 * a key already given on this line, an empty value or a bad value.
 */
static int step_key(const plan_parser *parser, const plan_form *form, cs_plan_step *step,
                    plan_word word, uint32_t *keys_seen) {
  const char *equals = memchr(word.bytes, '=', word.len);
  assert(equals != NULL);
  plan_word name = {word.bytes, (size_t)(equals - word.bytes)};
  plan_word value = {equals + 1, word.len - name.len - 1};
  plan_key key = KEYS_TOTAL;
  for (uint32_t i = 0; i < KEYS_TOTAL; i++) {
    if ((form->keys & KEY_BIT(i)) != 0 && word_is(name, key_specs[i].name)) key = (plan_key)i;
  }
  if (key == KEYS_TOTAL) {
    return parser_fail(parser, CS_E_PARSE, "unknown key '%.*s' for verb '%s'", WORD_ARGS(name),
                       form->name);
  }
  if ((*keys_seen & KEY_BIT(key)) != 0) {
    return parser_fail(parser, CS_E_PARSE, "duplicate key '%s=' (each key once per line)",
                       key_specs[key].name);
  }
  *keys_seen |= KEY_BIT(key);
  if (value.len == 0) {
    return parser_fail(parser, CS_E_PARSE, "key '%s=' has no value", key_specs[key].name);
  }
  return step_value(parser, step, key, value);
}

/* Parses one bare word after the form. CS_E_PARSE unless it is a flag the form allows, once. */
static int step_flag(const plan_parser *parser, const plan_form *form, cs_plan_step *step,
                     plan_word word, uint32_t *flags_seen) {
  for (size_t i = 0; i < ARRAY_LEN(flag_specs); i++) {
    if ((form->flags & flag_specs[i].bit) == 0 || !word_is(word, flag_specs[i].name)) continue;
    if ((*flags_seen & flag_specs[i].bit) != 0) {
      return parser_fail(parser, CS_E_PARSE, "duplicate word '%s'", flag_specs[i].name);
    }
    *flags_seen |= flag_specs[i].bit;
    if (flag_specs[i].bit == FLAG_FOREIGN) step->foreign = true;
    return CS_E_OK;
  }
  return parser_fail(parser, CS_E_PARSE, "unexpected word '%.*s' for verb '%s'", WORD_ARGS(word),
                     form->name);
}

/* Parses the keys and flags after the form; CS_E_PARSE for any bad word or a missing key. */
static int step_rest(const plan_parser *parser, plan_line *line, const plan_form *form,
                     cs_plan_step *step) {
  uint32_t keys_seen = 0;
  uint32_t flags_seen = 0;
  plan_word word;
  while (line_next_word(line, &word)) {
    bool is_key = memchr(word.bytes, '=', word.len) != NULL;
    int rc = is_key ? step_key(parser, form, step, word, &keys_seen)
                    : step_flag(parser, form, step, word, &flags_seen);
    if (rc != CS_E_OK) return rc;
  }
  assert((keys_seen & ~form->keys) == 0);
  uint32_t missing = form->required & ~keys_seen;
  for (uint32_t i = 0; i < KEYS_TOTAL; i++) {
    if ((missing & KEY_BIT(i)) == 0) continue;
    char full_name[CHOICES_TEXT_MAX];
    form_full_name(form, step, full_name);
    return parser_fail(parser, CS_E_PARSE, "'%s=' is required for '%s'", key_specs[i].name,
                       full_name);
  }
  return CS_E_OK;
}

/* Parses the status CODE after 'store status'; CS_E_PARSE unless it is 100..599. */
static int step_code(const plan_parser *parser, plan_line *line, cs_plan_step *step) {
  plan_word word;
  if (!line_next_word(line, &word) || memchr(word.bytes, '=', word.len) != NULL) {
    return parser_fail(parser, CS_E_PARSE, "'store status' needs a CODE (100..599)");
  }
  uint64_t code = 0;
  int rc = parser_integer(parser, word, UINT64_MAX, &code);
  if (rc != CS_E_OK) return rc;
  if (code < 100 || code > 599) {
    return parser_fail(parser, CS_E_PARSE, "status %" PRIu64 " is not 100..599", code);
  }
  step->status = (uint32_t)code;
  assert(step->status >= 100 && step->status <= 599);
  return CS_E_OK;
}

/* ---- statements --------------------------------------------------------- */

/*
 * at TIME VERB ...: CS_E_TOO_LARGE when the plan holds CS_PLAN_STEPS_MAX
 * steps already; CS_E_PARSE for a bad TIME, a step earlier than the one
 * before, or anything the verb's form refuses.
 */
static int parse_at(plan_parser *parser, plan_line *line) {
  cs_plan *plan = parser->plan;
  if (plan->step_count == CS_PLAN_STEPS_MAX) {
    return parser_fail(parser, CS_E_TOO_LARGE, "more than %u steps", CS_PLAN_STEPS_MAX);
  }
  plan_word word;
  if (!line_next_word(line, &word)) {
    return parser_fail(parser, CS_E_PARSE, "'at' needs a TIME and a verb");
  }
  uint64_t at_ns = 0;
  int rc = parser_time(parser, word, &at_ns);
  if (rc != CS_E_OK) return rc;
  if (plan->step_count > 0 && at_ns < plan->steps[plan->step_count - 1].at_ns) {
    char now_text[TIME_TEXT_MAX], before_text[TIME_TEXT_MAX];
    time_format(at_ns, now_text);
    time_format(plan->steps[plan->step_count - 1].at_ns, before_text);
    return parser_fail(parser, CS_E_PARSE, "steps out of time order (%s after %s)", now_text,
                       before_text);
  }
  if (!line_next_word(line, &word)) {
    return parser_fail(parser, CS_E_PARSE, "'at' needs a verb after the TIME");
  }
  cs_plan_step *step = &plan->steps[plan->step_count];
  memset(step, 0, sizeof *step);
  step->line = parser->line;
  step->at_ns = at_ns;
  const plan_form *form = form_resolve(parser, line, word, step);
  if (form == NULL) return CS_E_PARSE;
  assert(step->verb == form->verb);
  step_defaults(step);
  if (form->takes_code && (rc = step_code(parser, line, step)) != CS_E_OK) return rc;
  rc = step_rest(parser, line, form, step);
  if (rc != CS_E_OK) return rc;
  plan->step_count++;
  assert(plan->step_count <= CS_PLAN_STEPS_MAX);
  return CS_E_OK;
}

/*
 * set NAME VALUE: CS_E_TOO_LARGE past CS_PLAN_SETTINGS_MAX settings;
 * CS_E_PARSE for a bad name, a name already set, or a VALUE that is
 * neither an integer nor a TIME.
 */
static int parse_set(plan_parser *parser, plan_line *line) {
  cs_plan *plan = parser->plan;
  if (plan->setting_count == CS_PLAN_SETTINGS_MAX) {
    return parser_fail(parser, CS_E_TOO_LARGE, "more than %u settings", CS_PLAN_SETTINGS_MAX);
  }
  plan_word name, value;
  if (!line_next_word(line, &name) || !line_next_word(line, &value)) {
    return parser_fail(parser, CS_E_PARSE, "'set' needs a NAME and a VALUE");
  }
  cs_plan_setting *setting = &plan->settings[plan->setting_count];
  memset(setting, 0, sizeof *setting);
  setting->line = parser->line;
  int rc = parser_name(parser, name, setting->name);
  if (rc != CS_E_OK) return rc;
  for (uint32_t i = 0; i < plan->setting_count; i++) {
    if (strcmp(plan->settings[i].name, setting->name) != 0) continue;
    return parser_fail(parser, CS_E_PARSE, "'%s' is already set on line %" PRIu32,
                       setting->name, plan->settings[i].line);
  }
  if (value.bytes[0] < '0' || value.bytes[0] > '9') {
    return parser_fail(parser, CS_E_PARSE, "value '%.*s' is neither an integer nor a TIME",
                       WORD_ARGS(value));
  }
  size_t digits = 0;
  while (digits < value.len && value.bytes[digits] >= '0' && value.bytes[digits] <= '9') digits++;
  rc = digits == value.len ? parser_integer(parser, value, UINT64_MAX, &setting->value)
                  : parser_time(parser, value, &setting->value);
  if (rc != CS_E_OK) return rc;
  rc = parser_line_done(parser, line, "set NAME VALUE");
  if (rc != CS_E_OK) return rc;
  plan->setting_count++;
  assert(plan->setting_count <= CS_PLAN_SETTINGS_MAX);
  return CS_E_OK;
}

/*
 * expect NAME OP INTEGER: CS_E_TOO_LARGE past CS_PLAN_EXPECT_MAX
 * expectations; CS_E_PARSE for a bad name, operator or integer.
 */
static int parse_expect(plan_parser *parser, plan_line *line) {
  cs_plan *plan = parser->plan;
  if (plan->expect_count == CS_PLAN_EXPECT_MAX) {
    return parser_fail(parser, CS_E_TOO_LARGE, "more than %u expectations", CS_PLAN_EXPECT_MAX);
  }
  plan_word name, op, value;
  if (!line_next_word(line, &name) || !line_next_word(line, &op) ||
      !line_next_word(line, &value)) {
    return parser_fail(parser, CS_E_PARSE, "'expect' needs a NAME, an OP and an INTEGER");
  }
  cs_plan_expect *expect = &plan->expects[plan->expect_count];
  memset(expect, 0, sizeof *expect);
  expect->line = parser->line;
  int rc = parser_name(parser, name, expect->name);
  if (rc != CS_E_OK) return rc;
  int32_t op_index = names_find(&ops, op);
  if (op_index < 0) {
    return parser_fail(parser, CS_E_PARSE, "unknown operator '%.*s' (= != < <= > >=)",
                       WORD_ARGS(op));
  }
  expect->op = (cs_plan_op)op_index;
  rc = parser_integer(parser, value, UINT64_MAX, &expect->value);
  if (rc != CS_E_OK) return rc;
  rc = parser_line_done(parser, line, "expect NAME OP INTEGER");
  if (rc != CS_E_OK) return rc;
  plan->expect_count++;
  assert(plan->expect_count <= CS_PLAN_EXPECT_MAX);
  return CS_E_OK;
}

/*
 * end TIME: CS_E_PARSE for a second 'end', a bad TIME, or zero (which the
 * plan struct cannot tell apart from no end at all).
 */
static int parse_end(plan_parser *parser, plan_line *line) {
  if (parser->end_line != 0) {
    return parser_fail(parser, CS_E_PARSE, "'end' given twice (first on line %" PRIu32 ")",
                       parser->end_line);
  }
  plan_word word;
  if (!line_next_word(line, &word)) return parser_fail(parser, CS_E_PARSE, "'end' needs a TIME");
  uint64_t end_ns = 0;
  int rc = parser_time(parser, word, &end_ns);
  if (rc != CS_E_OK) return rc;
  if (end_ns == 0) return parser_fail(parser, CS_E_PARSE, "'end' must be after 0s");
  rc = parser_line_done(parser, line, "end TIME");
  if (rc != CS_E_OK) return rc;
  parser->plan->end_ns = end_ns;
  parser->end_line = parser->line;
  assert(parser->plan->end_ns > 0);
  return CS_E_OK;
}

static const struct {
  const char *word;
  int (*parse)(plan_parser *parser, plan_line *line);
} statements[] = {
    {"at", parse_at},
    {"set", parse_set},
    {"expect", parse_expect},
    {"end", parse_end},
};

/*
 * Checks a line's bytes before any word is read: CS_E_TOO_LARGE when it is
 * longer than CS_PLAN_LINE_MAX; CS_E_PARSE for a NUL, a CR that does not end
 * the line, or any other byte outside tab and 0x20..0x7e.
 */
static int line_check(const plan_parser *parser, const plan_line *line) {
  if (line->len > CS_PLAN_LINE_MAX) {
    return parser_fail(parser, CS_E_TOO_LARGE, "line is %zu bytes, more than %u", line->len,
                       CS_PLAN_LINE_MAX);
  }
  for (size_t i = 0; i < line->len; i++) {
    unsigned char byte = (unsigned char)line->bytes[i];
    if (byte == '\t' || (byte >= 0x20 && byte <= 0x7e)) continue;
    if (byte == '\0') return parser_fail(parser, CS_E_PARSE, "NUL byte at column %zu", i + 1);
    if (byte == '\r') {
      return parser_fail(parser, CS_E_PARSE, "carriage return inside the line at column %zu",
                         i + 1);
    }
    return parser_fail(parser, CS_E_PARSE, "non-printable byte 0x%02x at column %zu",
                       (unsigned)byte, i + 1);
  }
  return CS_E_OK;
}

/* Parses one line: blank and comment lines are skipped; the first word picks the statement. */
static int line_parse(plan_parser *parser, plan_line *line) {
  int rc = line_check(parser, line);
  if (rc != CS_E_OK) return rc;
  plan_word word;
  if (!line_next_word(line, &word) || word.bytes[0] == '#') return CS_E_OK;
  for (size_t i = 0; i < ARRAY_LEN(statements); i++) {
    if (word_is(word, statements[i].word)) return statements[i].parse(parser, line);
  }
  return parser_fail(parser, CS_E_PARSE, "unknown statement '%.*s' (at, set, expect, end)",
                     WORD_ARGS(word));
}

/* The invariants every parsed plan keeps; checked before the plan is handed out. */
static void plan_assert_valid(const cs_plan *plan) {
  assert(plan->step_count <= CS_PLAN_STEPS_MAX);
  assert(plan->expect_count <= CS_PLAN_EXPECT_MAX);
  assert(plan->setting_count <= CS_PLAN_SETTINGS_MAX);
  for (uint32_t i = 1; i < plan->step_count; i++) {
    assert(plan->steps[i - 1].at_ns <= plan->steps[i].at_ns);
    assert(plan->steps[i - 1].line < plan->steps[i].line);
  }
}

int cs_plan_parse(const char *text, size_t len, cs_plan *plan, uint32_t *err_line, char *msg,
                  size_t msg_size) {
  assert(plan != NULL);
  assert(text != NULL || len == 0);
  assert(msg != NULL || msg_size == 0);
  memset(plan, 0, sizeof *plan);
  if (msg_size > 0) msg[0] = '\0';
  if (err_line != NULL) *err_line = 0;
  plan_parser parser = {.plan = plan, .msg = msg, .msg_size = msg_size};
  size_t pos = 0;
  while (pos < len) {
    if (parser.line == UINT32_MAX) {
      return parser_fail(&parser, CS_E_TOO_LARGE, "more than %" PRIu32 " lines", UINT32_MAX);
    }
    parser.line++;
    const char *newline = memchr(text + pos, '\n', len - pos);
    size_t end = newline != NULL ? (size_t)(newline - text) : len;
    plan_line line = {text + pos, end - pos, 0};
    if (line.len > 0 && line.bytes[line.len - 1] == '\r') line.len--;
    pos = newline != NULL ? end + 1 : len;
    int rc = line_parse(&parser, &line);
    if (rc != CS_E_OK) {
      assert(rc == CS_E_PARSE || rc == CS_E_TOO_LARGE);
      if (err_line != NULL) *err_line = parser.line;
      return rc;
    }
  }
  assert(pos == len);
  plan_assert_valid(plan);
  return CS_E_OK;
}

int cs_plan_parse_time(const char *word, size_t len, uint64_t *out_ns) {
  assert(out_ns != NULL);
  if (word == NULL) return CS_E_PARSE;
  uint64_t ns = 0;
  if (time_parse(word, len, &ns) != TIME_OK) return CS_E_PARSE;
  *out_ns = ns;
  return CS_E_OK;
}

const char *cs_plan_verb_name(cs_plan_verb verb) {
  for (size_t i = 0; i < ARRAY_LEN(plan_forms); i++) {
    if (plan_forms[i].verb == verb) return plan_forms[i].name;
  }
  return "unknown";
}

const char *cs_plan_op_name(cs_plan_op op) {
  if (op < CS_PLAN_OP_EQ || op > CS_PLAN_OP_GE) return "?";
  assert(op_names[op] != NULL);
  return op_names[op];
}

bool cs_plan_expect_holds(const cs_plan_expect *expect, uint64_t actual) {
  assert(expect != NULL);
  switch (expect->op) {
  case CS_PLAN_OP_EQ: return actual == expect->value;
  case CS_PLAN_OP_NE: return actual != expect->value;
  case CS_PLAN_OP_LT: return actual < expect->value;
  case CS_PLAN_OP_LE: return actual <= expect->value;
  case CS_PLAN_OP_GT: return actual > expect->value;
  case CS_PLAN_OP_GE: return actual >= expect->value;
  }
  assert(false && "cs_plan_expect_holds: operator outside cs_plan_op");
  return false;
}

/*
 * faults/plan.h: the fault-plan language. A plan is a hand-written scenario
 * for the simulator: one setting, fault, action or expectation per line.
 *
 *   # a comment; blank lines are ignored; words are separated by spaces/tabs
 *   set NAME VALUE                  config override (NAME from cs_plan_setting_names)
 *   end TIME                        simulated end of the safety phase
 *   at TIME VERB [WORD...] [KEY=VALUE...]
 *   expect NAME OP INTEGER          OP is one of = != < <= > >=
 *
 * TIME is an unsigned integer with a unit: ns, us, ms, s or m (e.g. 1500ms).
 * Verbs, their words and keys (anything else on the line is an error):
 *
 *   at T catalog cut|stall|unknown|too-large|slow  for=D
 *   at T store   cut|stall|unknown|5xx|throttle|slow|other-bytes|vanish  for=D
 *   at T store   status CODE [method=HEAD|PUT|GET|LIST|DELETE] [prefix=TEXT] for=D
 *   at T store   object key=TEXT [foreign]       an object placed in the bucket
 *   at T seal    [count=N] [size=BYTES] [index=BYTES] [records=N]
 *   at T flush   deadline=D [expect=drained|not-drained|any]
 *   at T rival   start|stop
 *   at T crash   [point=now|after-upload|after-index|before-remove]
 *   at T pause   for=D
 *   at T close   budget=D
 *   at T replace budget=D
 *   at T heal
 *   at T disk    slow  for=D                     spool seals and removals take seconds
 *   at T reopen                                   a new engine on the spool once the close is done
 *
 * Counts and sizes are unsigned decimal integers (0 included) that must fit
 * their field; CODE is 100..599; TEXT is 1..CS_PLAN_TEXT_MAX-1 printable
 * non-space ASCII bytes. After the verb and its word (mode, status CODE,
 * object, start|stop), keys and the word 'foreign' may come in any order, each
 * at most once. Steps must appear in non-decreasing time order.
 *
 * Defaults when a key is absent: seal count=1 size=65536 index=1024
 * records=16; flush expect=any; crash point=now; store status method=any
 * prefix="" (every key). Fields a verb does not use are zero.
 *
 * 'set' VALUE is an integer or a TIME (stored in ns); one NAME may be set
 * only once. 'end' appears at most once and must be after 0s. 'expect'
 * lines may repeat a NAME.
 *
 * A comment is a line whose first word starts with '#'; there are no
 * comments after other words (TEXT may contain '#'). Lines end with LF or
 * CRLF. A line may hold CS_PLAN_LINE_MAX bytes, not counting its line
 * ending; one byte more is an error. Every byte of every line, comments
 * included, must be a tab or printable ASCII (0x20..0x7e); NUL, a CR that
 * does not end the line, and any other byte are errors.
 */
#ifndef CAPSTORE_FAULTS_PLAN_H
#define CAPSTORE_FAULTS_PLAN_H

#include "capstore/types.h"

#define CS_PLAN_STEPS_MAX 256u
#define CS_PLAN_EXPECT_MAX 64u
#define CS_PLAN_SETTINGS_MAX 64u
#define CS_PLAN_TEXT_MAX 256u
#define CS_PLAN_LINE_MAX 1024u
#define CS_PLAN_NAME_MAX 48u

typedef enum cs_plan_verb {
  CS_PLAN_CATALOG = 1,
  CS_PLAN_STORE,
  CS_PLAN_STORE_STATUS,
  CS_PLAN_STORE_OBJECT,
  CS_PLAN_SEAL,
  CS_PLAN_FLUSH,
  CS_PLAN_RIVAL,
  CS_PLAN_CRASH,
  CS_PLAN_PAUSE,
  CS_PLAN_CLOSE,
  CS_PLAN_REPLACE,
  CS_PLAN_HEAL,
  CS_PLAN_DISK,   /* the spool's disk: mode (slow) for_ns */
  CS_PLAN_REOPEN, /* a new engine on the spool of a closed one */
} cs_plan_verb;

/* CATALOG and STORE fault modes. */
typedef enum cs_plan_mode {
  CS_PLAN_MODE_NONE = 0,
  CS_PLAN_MODE_CUT,       /* connections refused */
  CS_PLAN_MODE_STALL,     /* accepted, never answered: requests time out */
  CS_PLAN_MODE_UNKNOWN,   /* applied, answer lost */
  CS_PLAN_MODE_TOO_LARGE, /* catalog refuses every multi-pack insert as too large */
  CS_PLAN_MODE_SLOW,      /* ten times the usual latency */
  CS_PLAN_MODE_5XX,
  CS_PLAN_MODE_THROTTLE,
  CS_PLAN_MODE_OTHER_BYTES, /* store: a PUT keeps other bytes of the same size */
  CS_PLAN_MODE_VANISH,      /* store: a PUT's object is lost before it is read again */
} cs_plan_mode;

typedef enum cs_plan_method {
  CS_PLAN_METHOD_ANY = 0,
  CS_PLAN_METHOD_HEAD,
  CS_PLAN_METHOD_PUT,
  CS_PLAN_METHOD_GET,
  CS_PLAN_METHOD_LIST,
  CS_PLAN_METHOD_DELETE,
} cs_plan_method;

typedef enum cs_plan_crash_point {
  CS_PLAN_CRASH_NOW = 0,
  CS_PLAN_CRASH_AFTER_UPLOAD,  /* at the first verified upload after T */
  CS_PLAN_CRASH_AFTER_INDEX,   /* at the first confirmed index after T */
  CS_PLAN_CRASH_BEFORE_REMOVE, /* at the first spool removal after T, before it applies */
} cs_plan_crash_point;

typedef enum cs_plan_flush_expect {
  CS_PLAN_EXPECT_ANY = 0,
  CS_PLAN_EXPECT_DRAINED,
  CS_PLAN_EXPECT_NOT_DRAINED,
} cs_plan_flush_expect;

typedef struct cs_plan_step {
  uint32_t line;         /* 1-based line number in the plan text */
  uint64_t at_ns;
  cs_plan_verb verb;
  cs_plan_mode mode;     /* CATALOG, STORE, DISK */
  uint64_t for_ns;       /* CATALOG, STORE, STORE_STATUS, PAUSE, DISK */
  uint32_t status;       /* STORE_STATUS */
  cs_plan_method method; /* STORE_STATUS */
  char text[CS_PLAN_TEXT_MAX]; /* STORE_STATUS prefix ("" = all), STORE_OBJECT key */
  bool foreign;          /* STORE_OBJECT: no dmi-pack metadata */
  uint32_t count;        /* SEAL, default 1 */
  uint64_t size_bytes;   /* SEAL, default 65536 */
  uint64_t index_bytes;  /* SEAL, default 1024 */
  uint32_t records;      /* SEAL, default 16 */
  uint64_t deadline_ns;  /* FLUSH; CLOSE and REPLACE budget */
  cs_plan_flush_expect flush_expect; /* FLUSH */
  bool start;            /* RIVAL: start (true) or stop (false) */
  cs_plan_crash_point crash_point;   /* CRASH */
} cs_plan_step;

typedef enum cs_plan_op {
  CS_PLAN_OP_EQ = 1,
  CS_PLAN_OP_NE,
  CS_PLAN_OP_LT,
  CS_PLAN_OP_LE,
  CS_PLAN_OP_GT,
  CS_PLAN_OP_GE,
} cs_plan_op;

typedef struct cs_plan_expect {
  uint32_t line;
  char name[CS_PLAN_NAME_MAX]; /* [a-z0-9_]+ ; the simulator checks the name exists */
  cs_plan_op op;
  uint64_t value;
} cs_plan_expect;

typedef struct cs_plan_setting {
  uint32_t line;
  char name[CS_PLAN_NAME_MAX]; /* [a-z0-9_]+ ; the simulator checks the name exists */
  uint64_t value;              /* an integer, or a TIME converted to ns */
} cs_plan_setting;

typedef struct cs_plan {
  uint64_t end_ns;  /* 0 when the plan sets none */
  uint32_t step_count;
  uint32_t expect_count;
  uint32_t setting_count;
  cs_plan_step steps[CS_PLAN_STEPS_MAX];
  cs_plan_expect expects[CS_PLAN_EXPECT_MAX];
  cs_plan_setting settings[CS_PLAN_SETTINGS_MAX];
} cs_plan;

/*
 * Parses text[0..len) (no NUL needed; a NUL byte inside is an error) into
 * plan. Returns CS_E_OK, or CS_E_PARSE / CS_E_TOO_LARGE with err_line set to
 * the 1-based offending line and msg naming what is wrong there, e.g.
 * "line 4: unknown key 'fro' for verb 'catalog'". Never reads past len.
 *
 * CS_E_TOO_LARGE means the plan outgrew a bound of this parser: a line over
 * CS_PLAN_LINE_MAX, or more than CS_PLAN_STEPS_MAX steps, CS_PLAN_EXPECT_MAX
 * expectations or CS_PLAN_SETTINGS_MAX settings. Everything else, values out
 * of range included, is CS_E_PARSE. On success err_line is 0 and msg "".
 * err_line may be NULL; msg may be NULL when msg_size is 0, and a message
 * longer than msg_size is cut short (still NUL-terminated). On error plan
 * holds the lines before the offending one. Pure: no allocation, no global
 * state; plan is about 100 KiB, so callers usually keep it off the stack.
 */
int cs_plan_parse(const char *text, size_t len, cs_plan *plan, uint32_t *err_line, char *msg,
                  size_t msg_size);

/*
 * Parses a TIME word ("15s": decimal digits, then exactly one of the units
 * ns, us, ms, s, m); CS_E_OK or CS_E_PARSE. Overflow of uint64_t ns is an
 * error; out_ns is written only on success.
 */
int cs_plan_parse_time(const char *word, size_t len, uint64_t *out_ns);

/* "catalog", "store status", ...; "unknown" outside the enum. Never NULL. */
const char *cs_plan_verb_name(cs_plan_verb verb);
/* "=", "!=", "<", "<=", ">", ">="; "?" outside the enum. Never NULL. */
const char *cs_plan_op_name(cs_plan_op op);
/* True when the expectation holds for actual. */
bool cs_plan_expect_holds(const cs_plan_expect *expect, uint64_t actual);

#endif

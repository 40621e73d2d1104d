/*
 * The engine's contract, held to a model of include/capstore/engine.h once
 * per run (docs/simulator.md, "API rules"). The swarm drives engines the way
 * the runtime does, with sane budgets and a clock that starts near zero;
 * here a standalone engine is driven through every operation with drawn
 * corners: a start timeout and a stop reserve of 1 ms or of nearly 2^64,
 * budgets of 0, 1, exactly R - 1, R, R + 1 from the end and 2^64 - 1, a clock
 * that starts at 0 or next to 2^64 - 1, completions and ticks exactly one
 * nanosecond before, at and after a deadline, flush deadlines already past,
 * failed steps of every kind, stale and unknown ids, and operations asked in
 * the wrong state or before the last REPORT was polled.
 *
 * The model is the header's prose, written without the core's code: the
 * plans, what a failed step changes, the deadline table, on-time meaning
 * strictly before the deadline, a step with no time left failing at once,
 * the REPORT's error and count, the final state, and next_deadline. After
 * every call the engine's answer, state and next deadline must equal the
 * model's, and every polled action must be the model's next one (ids are
 * opaque: nonzero, never reused, echoed). The draws come from the API
 * rules' own stream, so no other draw of the run moves.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "capstore/engine.h"
#include "world.h"

#define RULE_FAIL(w, ...) sim_bail((w), SIM_EXIT_SAFETY, "api rule: engine: " __VA_ARGS__)

enum { MODEL_PLAN_MAX = 16, MODEL_QUEUE_MAX = 32, CALLS = 300, CALLS_AFTER_CLOSE = 3 };
/* One id per poll: a poll per call, then the last plan's actions drained. */
enum { IDS_MAX = CALLS + CS_ENGINE_QUEUE_MAX + 1 };

typedef struct model {
  uint64_t start_timeout_ns, reserve_ns;
  cs_engine_state state;
  bool seal_failed_once;   /* a SEAL_SINK of this engine failed: no later open sweeps */
  cs_engine_opkind op;
  uint64_t end_ns;         /* the flush deadline, the close (replace) end, or the open's time */
  cs_engine_step plan[MODEL_PLAN_MAX];
  uint32_t plan_len, at;   /* plan[at] is in flight while busy */
  bool busy;
  uint64_t deadline_ns;
  uint64_t id;             /* the step in flight's id, once its action was polled; 0 before */
  int first_err;
  uint32_t failed;
  bool open_step_failed;
  cs_engine_action queue[MODEL_QUEUE_MAX];
  uint32_t q_first, q_len;
  bool overflow;           /* a plan or queue past the model's bounds: cannot happen, and fails the rule */
} model;

typedef struct driver {
  sim_world *w;
  cs_prng *r;
  cs_engine e;
  model m;
  uint64_t now;
  uint64_t ids[IDS_MAX]; /* every id polled from this engine */
  uint32_t id_count;
  uint32_t call;         /* for messages */
  bool frozen;           /* the clock stands still: steps issued with no time left */
} driver;

static uint64_t below(cs_prng *r, uint64_t n) { return cs_prng_below(r, n); }

static uint64_t plus(uint64_t a, uint64_t b) { return b > CS_NEVER - a ? CS_NEVER : a + b; }
static uint64_t minus(uint64_t a, uint64_t b) { return a <= b ? 0 : a - b; }
static uint64_t later(uint64_t a, uint64_t b) { return a < b ? b : a; }

static bool opens(cs_engine_step s) {
  return s == CS_STEP_START_SERVICE || s == CS_STEP_SWEEP_OPEN || s == CS_STEP_OPEN_SINK;
}

/* engine.h's table, with now the issue time and R the stop reserve. */
static uint64_t model_deadline(const model *m, cs_engine_step s, uint64_t now) {
  uint64_t r = m->reserve_ns;
  if (opens(s)) return plus(now, m->start_timeout_ns);
  if (s == CS_STEP_FLUSH_SINK || s == CS_STEP_FLUSH_SERVICE) return m->end_ns;
  if (s == CS_STEP_SEAL_SINK || s == CS_STEP_STOP_CAPTURE) return later(minus(m->end_ns, r), plus(now, r / 2));
  if (s == CS_STEP_DRAIN_SERVICE) return later(minus(m->end_ns, r), now);
  return later(m->end_ns, plus(now, r / 2)); /* STOP_SERVICE, RELEASE_LEASE */
}

static void model_push(model *m, cs_engine_action a) {
  if (m->q_len == MODEL_QUEUE_MAX) { /* at most one plan and its REPORT */
    m->overflow = true;
    return;
  }
  m->queue[(m->q_first + m->q_len++) % MODEL_QUEUE_MAX] = a;
}

static void model_add(model *m, cs_engine_step s) {
  if (m->plan_len == MODEL_PLAN_MAX) {
    m->overflow = true;
    return;
  }
  m->plan[m->plan_len++] = s;
}

static void model_issue(model *m, uint64_t now) {
  if (m->at < m->plan_len) {
    m->busy = true;
    m->id = 0;
    m->deadline_ns = model_deadline(m, m->plan[m->at], now);
    model_push(m, (cs_engine_action){.step = m->plan[m->at], .deadline_ns = m->deadline_ns, .opkind = m->op});
    return;
  }
  model_push(m, (cs_engine_action){.step = CS_STEP_REPORT, .opkind = m->op, .err = m->first_err, .failures = m->failed});
  if (m->op == CS_ENGINE_OP_CLOSE) m->state = CS_ENGINE_CLOSED;
  else if (m->op == CS_ENGINE_OP_FLUSH) m->state = CS_ENGINE_OPEN;
  else m->state = m->open_step_failed ? CS_ENGINE_IDLE : CS_ENGINE_OPEN;
  m->op = CS_ENGINE_OP_NONE;
}

/* The step in flight ends (err < 0: failed) and the next is issued at now. */
static void model_end(model *m, uint64_t now, int err) {
  cs_engine_step s = m->plan[m->at];
  if (err < 0) {
    m->failed++;
    if (m->first_err == CS_E_OK) m->first_err = err;
    if (s == CS_STEP_SEAL_SINK) {
      m->seal_failed_once = true;
      uint32_t kept = m->at + 1;
      for (uint32_t i = m->at + 1; i < m->plan_len; i++)
        if (m->plan[i] != CS_STEP_SWEEP_OPEN) m->plan[kept++] = m->plan[i];
      m->plan_len = kept;
    }
    if (opens(s)) {
      m->open_step_failed = true;
      m->plan_len = m->at + 1;
      /* START_SERVICE refused: nothing started; timed out: it may have started after all. */
      if (s != CS_STEP_START_SERVICE || err == CS_E_TIMEOUT) {
        model_add(m, CS_STEP_STOP_SERVICE);
        model_add(m, CS_STEP_RELEASE_LEASE);
      }
    }
  }
  m->busy = false;
  m->at++;
  model_issue(m, now);
}

static void model_expire(model *m, uint64_t now) {
  while (m->busy && now >= m->deadline_ns) model_end(m, now, CS_E_TIMEOUT);
}

static int model_begin(model *m, cs_engine_state from, cs_engine_opkind op, cs_engine_state busy_state, uint64_t end) {
  if (m->state != from || m->q_len != 0) return CS_E_STATE;
  m->state = busy_state;
  m->op = op;
  m->end_ns = end;
  m->plan_len = m->at = 0;
  m->first_err = CS_E_OK;
  m->failed = 0;
  m->open_step_failed = false;
  return CS_E_OK;
}

static void model_plan_close(model *m) {
  static const cs_engine_step steps[] = {CS_STEP_SEAL_SINK, CS_STEP_STOP_CAPTURE, CS_STEP_DRAIN_SERVICE,
                                         CS_STEP_STOP_SERVICE, CS_STEP_RELEASE_LEASE};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) model_add(m, steps[i]);
}

static void model_plan_open(model *m) {
  model_add(m, CS_STEP_START_SERVICE);
  if (!m->seal_failed_once) model_add(m, CS_STEP_SWEEP_OPEN);
  model_add(m, CS_STEP_OPEN_SINK);
}

static void model_run(model *m, uint64_t now) {
  model_issue(m, now);
  model_expire(m, now);
}

static uint64_t model_next_deadline(const model *m) {
  if (m->q_len != 0) return 0;
  return m->busy ? m->deadline_ns : CS_NEVER;
}

/* ---- the driver ---------------------------------------------------------------------------------------------- */

static const char *state_name(cs_engine_state s) {
  static const char *const names[] = {"IDLE", "OPENING", "OPEN", "FLUSHING", "CLOSING", "REPLACING", "CLOSED"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "bad state";
}

/* After every call: the same answer, the same state, the same next deadline. */
static void agree(driver *d, const char *call, int got, int want) {
  if (d->m.overflow) RULE_FAIL(d->w, "call %u, %s: the model's plan or queue overflowed", d->call, call);
  if (got != want)
    RULE_FAIL(d->w, "call %u, %s at %" PRIu64 " answered %s, engine.h says %s", d->call, call, d->now,
              cs_strerror(got), cs_strerror(want));
  if (d->e.state != d->m.state)
    RULE_FAIL(d->w, "call %u, after %s at %" PRIu64 " the state is %s, engine.h says %s", d->call, call, d->now,
              state_name(d->e.state), state_name(d->m.state));
  uint64_t got_next = cs_engine_next_deadline(&d->e), want_next = model_next_deadline(&d->m);
  if (got_next != want_next)
    RULE_FAIL(d->w, "call %u, after %s at %" PRIu64 " next_deadline is %" PRIu64 ", engine.h says %" PRIu64
              " (%s)", d->call, call, d->now, got_next, want_next,
              d->m.q_len != 0 ? "actions wait to be polled" : d->m.busy ? "the step in flight's deadline" : "idle");
}

static void poll_one(driver *d) {
  cs_engine_action got;
  bool any = cs_engine_poll(&d->e, d->now, &got);
  model *m = &d->m;
  if (!any && m->q_len == 0) return;
  if (!any || m->q_len == 0)
    RULE_FAIL(d->w, "call %u, poll at %" PRIu64 ": the engine %s, engine.h %s", d->call, d->now,
              any ? "had an action" : "had none", m->q_len == 0 ? "queued none" : "queued one");
  cs_engine_action want = m->queue[m->q_first];
  m->q_first = (m->q_first + 1) % MODEL_QUEUE_MAX;
  m->q_len--;
  if (got.step != want.step || got.opkind != want.opkind)
    RULE_FAIL(d->w, "call %u, poll at %" PRIu64 ": action %s of op %d, engine.h says %s of op %d", d->call, d->now,
              cs_engine_step_name(got.step), (int)got.opkind, cs_engine_step_name(want.step), (int)want.opkind);
  if (want.step == CS_STEP_REPORT) {
    if (got.id != 0 || got.err != want.err || got.failures != want.failures)
      RULE_FAIL(d->w, "call %u, REPORT at %" PRIu64 ": id %" PRIu64 ", err %s, %u failed; engine.h says id 0, %s, %u",
                d->call, d->now, got.id, cs_strerror(got.err), got.failures, cs_strerror(want.err), want.failures);
    return;
  }
  if (got.deadline_ns != want.deadline_ns)
    RULE_FAIL(d->w, "call %u, %s's deadline is %" PRIu64 ", engine.h's table says %" PRIu64 " (end %" PRIu64
              ", R %" PRIu64 ", start timeout %" PRIu64 ")", d->call, cs_engine_step_name(got.step), got.deadline_ns,
              want.deadline_ns, m->end_ns, m->reserve_ns, m->start_timeout_ns);
  if (got.id == 0) RULE_FAIL(d->w, "call %u, %s has id 0, which marks REPORT", d->call, cs_engine_step_name(got.step));
  for (uint32_t i = 0; i < d->id_count; i++)
    if (d->ids[i] == got.id) RULE_FAIL(d->w, "call %u, %s reuses id %" PRIu64, d->call, cs_engine_step_name(got.step), got.id);
  if (d->id_count == IDS_MAX) RULE_FAIL(d->w, "call %u: more ids polled than calls", d->call);
  d->ids[d->id_count++] = got.id;
  /* The last step queued is the one in flight (the others already ended). */
  if (m->busy && m->q_len == 0) m->id = got.id;
}

/* A time at or after now: stay, a little later, or one nanosecond around the deadline in flight. */
static uint64_t draw_time(driver *d) {
  uint64_t dl = d->m.busy ? d->m.deadline_ns : CS_NEVER;
  uint64_t t = d->now;
  if (d->frozen) return t;
  switch (below(d->r, 10)) {
  case 0: if (dl != CS_NEVER && dl > d->now) t = dl - 1; break;
  case 1: if (dl != CS_NEVER) t = plus(dl, below(d->r, 2)); break;
  case 2: /* on time for the step in flight, else a while */
    t = dl != CS_NEVER && dl > d->now ? d->now + below(d->r, dl - d->now) : plus(d->now, below(d->r, d->m.reserve_ns));
    break;
  case 3: t = plus(d->now, below(d->r, 64) == 0 ? CS_NEVER / 2 : below(d->r, 10 * CS_SEC_NS)); break;
  case 4: t = plus(d->now, 1); break;
  case 5: if (dl != CS_NEVER && dl > d->now) t = d->now + below(d->r, dl - d->now); break;
  default: break;
  }
  return t < d->now ? d->now : t;
}

/* A close or replace budget: the edges around R and 2^64, or a plain one. */
static uint64_t draw_budget(driver *d) {
  uint64_t r = d->m.reserve_ns, now = d->now;
  uint64_t target;
  switch (below(d->r, 9)) {
  case 0: return 0;
  case 1: return 1;
  case 2: target = minus(r, 1); break; /* end exactly R - 1, R, R + 1 where the clock allows */
  case 3: target = r; break;
  case 4: target = plus(r, 1); break;
  case 5: return CS_NEVER;
  case 6: return plus(CS_NEVER - now, below(d->r, 2)); /* end exactly 2^64 - 1, or a budget one past it */
  case 7: return plus(r, below(d->r, 3)) - below(d->r, 2);
  default: return below(d->r, 4 * r + 1);
  }
  return target >= now ? target - now : below(d->r, 2 * r + 1);
}

static uint64_t draw_flush_deadline(driver *d) {
  switch (below(d->r, 6)) {
  case 0: return d->now > 0 ? d->now - 1 - below(d->r, d->now) : 0; /* already past */
  case 1: return d->now;
  case 2: return plus(d->now, 1);
  case 3: return CS_NEVER;
  default: return plus(d->now, below(d->r, 20 * CS_SEC_NS));
  }
}

/* An operation: mostly one the state allows (so engines get open and closed), else any, to be refused. */
static void start_op(driver *d) {
  model *m = &d->m;
  uint64_t now = d->now;
  uint64_t which = below(d->r, 4);
  if (below(d->r, 5) != 0 && m->q_len == 0) {
    if (m->state == CS_ENGINE_IDLE) which = 0;
    if (m->state == CS_ENGINE_OPEN && which == 0) which = 1 + below(d->r, 3);
  }
  switch (which) {
  case 0: {
    int want = model_begin(m, CS_ENGINE_IDLE, CS_ENGINE_OP_OPEN, CS_ENGINE_OPENING, now);
    if (want == CS_E_OK) model_plan_open(m), model_run(m, now);
    agree(d, "open", cs_engine_open(&d->e, now), want);
    return;
  }
  case 1: {
    uint64_t dl = draw_flush_deadline(d);
    int want = model_begin(m, CS_ENGINE_OPEN, CS_ENGINE_OP_FLUSH, CS_ENGINE_FLUSHING, dl);
    if (want == CS_E_OK) model_add(m, CS_STEP_FLUSH_SINK), model_add(m, CS_STEP_FLUSH_SERVICE), model_run(m, now);
    agree(d, "flush", cs_engine_flush(&d->e, now, dl), want);
    return;
  }
  default: {
    bool replace = below(d->r, 2);
    uint64_t budget = draw_budget(d);
    int want = model_begin(m, CS_ENGINE_OPEN, replace ? CS_ENGINE_OP_REPLACE : CS_ENGINE_OP_CLOSE,
                           replace ? CS_ENGINE_REPLACING : CS_ENGINE_CLOSING, plus(now, budget));
    if (want == CS_E_OK) {
      model_plan_close(m);
      if (replace) model_plan_open(m);
      model_run(m, now);
    }
    int got = replace ? cs_engine_replace(&d->e, now, budget) : cs_engine_close(&d->e, now, budget);
    agree(d, replace ? "replace" : "close", got, want);
    return;
  }
  }
}

/* The step in flight completes, or a completion the engine must refuse changing nothing. */
static void complete(driver *d) {
  model *m = &d->m;
  static const int errs[] = {CS_E_IO, CS_E_TIMEOUT, CS_E_BUSY, CS_E_SPOOL_FULL, CS_E_INVALID_ARGUMENT, -1000};
  int err = below(d->r, 8) != 0 ? CS_E_OK : errs[below(d->r, sizeof errs / sizeof errs[0])];
  uint64_t id = m->id;
  uint64_t how = below(d->r, 10);
  if (how == 0) id = d->id_count > 0 ? d->ids[below(d->r, d->id_count)] : 0; /* stale, or 0 */
  else if (how == 1) err = 1 + (int)below(d->r, 3);                           /* a positive err */
  else if (!m->busy || m->id == 0) return; /* a real caller learns the id from poll */
  int want = CS_E_INVALID_ARGUMENT;
  if (id != 0 && m->busy && id == m->id && err <= 0) {
    bool late = d->now >= m->deadline_ns; /* on time only strictly before */
    model_end(m, d->now, late ? CS_E_TIMEOUT : err);
    model_expire(m, d->now);
    want = late ? CS_E_TIMEOUT : CS_E_OK;
  }
  char call[64];
  snprintf(call, sizeof call, "on_step_done(id %" PRIu64 ", %d)", id, err);
  agree(d, call, cs_engine_on_step_done(&d->e, d->now, id, err), want);
}

/* A config with each value at an edge: 1 ms, 1 ms + 1, near 2^64, or plain; sometimes one below 1 ms. */
static uint64_t draw_config_value(cs_prng *r) {
  switch (below(r, 7)) {
  case 0: return CS_MS_NS;
  case 1: return CS_MS_NS + 1;
  case 2: return CS_NEVER - below(r, 2);
  case 3: return CS_NEVER / 2 + below(r, 2);
  default: return CS_MS_NS + below(r, 60 * CS_SEC_NS);
  }
}

static uint64_t draw_start_time(cs_prng *r) {
  switch (below(r, 5)) {
  case 0: return 0;
  case 1: return below(r, 3);
  case 2: return CS_NEVER - below(r, 100 * CS_SEC_NS);
  default: return below(r, UINT64_C(1) << 50);
  }
}

/* One engine, until it is closed (and a few refused calls after) or calls_left is spent. */
static void drive_engine(sim_world *w, cs_prng *r, driver *d, uint32_t *calls_left) {
  memset(d, 0, sizeof *d);
  d->w = w;
  d->r = r;
  cs_engine_config cfg = {.start_timeout_ns = draw_config_value(r), .stop_reserve_ns = draw_config_value(r)};
  if (below(r, 8) == 0) {
    uint64_t *bad = below(r, 2) ? &cfg.start_timeout_ns : &cfg.stop_reserve_ns;
    *bad = below(r, CS_MS_NS);
    char msg[128];
    int rc = cs_engine_init(&d->e, &cfg, msg, sizeof msg);
    if (rc != CS_E_CONFIG) RULE_FAIL(w, "init with a value under 1 ms answered %s, engine.h says CS_E_CONFIG", cs_strerror(rc));
    *bad = CS_MS_NS;
  }
  char msg[128];
  if (cs_engine_init(&d->e, &cfg, msg, sizeof msg) != CS_E_OK) RULE_FAIL(w, "init refused a valid config: %s", msg);
  d->m.start_timeout_ns = cfg.start_timeout_ns;
  d->m.reserve_ns = cfg.stop_reserve_ns;
  d->m.state = CS_ENGINE_IDLE;
  d->now = draw_start_time(r);
  d->frozen = below(r, 8) == 0;
  agree(d, "init", CS_E_OK, CS_E_OK);
  uint32_t after_close = 0;
  for (d->call = 1; *calls_left > 0 && after_close < CALLS_AFTER_CLOSE; d->call++, (*calls_left)--) {
    if (d->m.state == CS_ENGINE_CLOSED || d->now == CS_NEVER) after_close++; /* at 2^64 - 1 every step fails at once */
    uint64_t t = draw_time(d);
    d->now = t;
    /* Mostly what a caller would do next (poll what waits, complete the step polled, start an operation), so
       engines get open, flushed, replaced and closed; else any call, which the engine must answer as engine.h says. */
    const model *m = &d->m;
    uint64_t roll = below(r, 10), call = below(r, 4);
    if (m->q_len != 0 && roll < 5) call = 0;
    else if (m->busy && m->id != 0 && roll < 7) call = 1;
    else if (!m->busy && m->q_len == 0 && roll < 7) call = 2;
    switch (call) {
    case 0: poll_one(d); agree(d, "poll", CS_E_OK, CS_E_OK); break;
    case 1: complete(d); break;
    case 2: start_op(d); break;
    default:
      model_expire(&d->m, d->now);
      cs_engine_tick(&d->e, d->now);
      agree(d, "tick", CS_E_OK, CS_E_OK);
      break;
    }
  }
  while (d->m.q_len != 0) poll_one(d);
  poll_one(d); /* fails when the engine holds one more action than engine.h queues */
  agree(d, "the last poll", CS_E_OK, CS_E_OK);
}

void sim_check_engine_rules(sim_world *w, cs_prng *r) {
  driver d;
  for (uint32_t calls_left = CALLS; calls_left > 0;) drive_engine(w, r, &d, &calls_left);
}

/*
 * The engine core: the lifecycle of a sink and a service together. It only
 * sequences steps and enforces their deadlines; the caller carries each step
 * out and reports its completion. Pure: time comes in as now_ns, actions go
 * out through a bounded queue, nothing is allocated.
 */
#include "capstore/engine.h"

#ifndef CAPSTORE_MUTANT
#define CAPSTORE_MUTANT 0
#endif

#include <assert.h>
#include <string.h>

/* An id no step ever gets; REPORT carries it. */
#define ENGINE_ID_NONE 0u

static uint64_t add_saturating(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t subtract_saturating(uint64_t a, uint64_t b) {
  return a < b ? 0 : a - b;
}

static uint64_t max_u64(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

/* Copies text into msg, truncating; msg stays NUL-terminated. */
static void message_set(char *msg, size_t msg_size, const char *text) {
  assert(text != NULL);
  if (msg == NULL || msg_size == 0) return;
  size_t length = strlen(text);
  if (length >= msg_size) length = msg_size - 1;
  memcpy(msg, text, length);
  msg[length] = '\0';
  assert(strlen(msg) < msg_size);
}

const char *cs_engine_step_name(cs_engine_step step) {
  static const char *const names[CS_STEP_COUNT_] = {
      "none",         "start_service", "sweep_open",    "open_sink",
      "flush_sink",   "flush_service", "seal_sink",     "stop_capture",
      "drain_service", "stop_service", "release_lease", "report",
  };
  if ((unsigned)step >= (unsigned)CS_STEP_COUNT_) return "bad_step";
  return names[step];
}

void cs_engine_config_default(cs_engine_config *cfg) {
  assert(cfg != NULL);
  memset(cfg, 0, sizeof *cfg);
  cfg->start_timeout_ns = 30 * CS_SEC_NS;
  cfg->stop_reserve_ns = 5 * CS_SEC_NS;
  assert(cfg->stop_reserve_ns >= CS_MS_NS);
}

int cs_engine_config_validate(const cs_engine_config *cfg, char *msg, size_t msg_size) {
  assert(cfg != NULL);
  assert(msg != NULL || msg_size == 0);
  if (cfg->start_timeout_ns < CS_MS_NS) {
    message_set(msg, msg_size, "start_timeout_ns must be >= 1 ms");
    return CS_E_CONFIG;
  }
  if (cfg->stop_reserve_ns < CS_MS_NS) {
    message_set(msg, msg_size, "stop_reserve_ns must be >= 1 ms");
    return CS_E_CONFIG;
  }
  message_set(msg, msg_size, "");
  return CS_E_OK;
}

int cs_engine_init(cs_engine *engine, const cs_engine_config *cfg, char *msg, size_t msg_size) {
  assert(engine != NULL);
  assert(cfg != NULL);
  int err = cs_engine_config_validate(cfg, msg, msg_size);
  if (err != CS_E_OK) return err;
  memset(engine, 0, sizeof *engine);
  engine->cfg = *cfg;
  engine->state = CS_ENGINE_IDLE;
  engine->next_id = 1;
  return CS_E_OK;
}

static bool step_is_open(cs_engine_step step) {
  assert(step > CS_STEP_NONE && step < CS_STEP_REPORT);
  return step == CS_STEP_START_SERVICE || step == CS_STEP_SWEEP_OPEN || step == CS_STEP_OPEN_SINK;
}

static void engine_plan_append(cs_engine *engine, cs_engine_step step) {
  assert(engine->plan_count < CS_ENGINE_PLAN_MAX);
  assert(step > CS_STEP_NONE && step < CS_STEP_REPORT);
  engine->plan[engine->plan_count++] = step;
}

static void engine_plan_open(cs_engine *engine) {
  engine_plan_append(engine, CS_STEP_START_SERVICE);
#if CAPSTORE_MUTANT != 48 /* mutant 48: a sink abandoned by an earlier operation's failed seal is swept */
  if (!engine->seal_abandoned)
#endif
    engine_plan_append(engine, CS_STEP_SWEEP_OPEN);
  engine_plan_append(engine, CS_STEP_OPEN_SINK);
}

static void engine_plan_close(cs_engine *engine) {
#if CAPSTORE_MUTANT != 7 /* mutant 7: close without sealing the sink */
  engine_plan_append(engine, CS_STEP_SEAL_SINK);
#endif
  engine_plan_append(engine, CS_STEP_STOP_CAPTURE);
  engine_plan_append(engine, CS_STEP_DRAIN_SERVICE);
  engine_plan_append(engine, CS_STEP_STOP_SERVICE);
  engine_plan_append(engine, CS_STEP_RELEASE_LEASE);
}

static void engine_push(cs_engine *engine, const cs_engine_action *action) {
  assert(engine->queue_count < CS_ENGINE_QUEUE_MAX);
  assert(engine->queue_head < CS_ENGINE_QUEUE_MAX);
  uint32_t index = (engine->queue_head + engine->queue_count) % CS_ENGINE_QUEUE_MAX;
  engine->queue[index] = *action;
  engine->queue_count++;
}

/* The deadline of step issued at now_ns; the table is in engine.h. */
static uint64_t engine_step_deadline(const cs_engine *engine, cs_engine_step step, uint64_t now_ns) {
  assert(step > CS_STEP_NONE && step < CS_STEP_REPORT);
  assert(engine->cfg.stop_reserve_ns >= CS_MS_NS);
  uint64_t reserve_ns = engine->cfg.stop_reserve_ns;
  uint64_t drain_end_ns = subtract_saturating(engine->op_deadline_ns, reserve_ns);
  uint64_t floor_ns = add_saturating(now_ns, reserve_ns / 2);
  switch (step) {
  case CS_STEP_FLUSH_SINK:
  case CS_STEP_FLUSH_SERVICE: return engine->op_deadline_ns;
  case CS_STEP_SEAL_SINK:
  case CS_STEP_STOP_CAPTURE: return max_u64(drain_end_ns, floor_ns);
  case CS_STEP_DRAIN_SERVICE: return max_u64(drain_end_ns, now_ns);
  case CS_STEP_STOP_SERVICE:
  case CS_STEP_RELEASE_LEASE: return max_u64(engine->op_deadline_ns, floor_ns);
  default: return add_saturating(now_ns, engine->cfg.start_timeout_ns);
  }
}

/* Queues the REPORT and moves to the operation's final state. */
static void engine_finish(cs_engine *engine) {
  assert(engine->step_id == ENGINE_ID_NONE);
  assert(engine->opkind != CS_ENGINE_OP_NONE);
  assert(engine->op_failures == 0 || engine->op_err < 0);
  cs_engine_action report = {
      .id = ENGINE_ID_NONE,
      .step = CS_STEP_REPORT,
      .opkind = engine->opkind,
      .err = engine->op_err,
      .failures = engine->op_failures,
  };
  engine_push(engine, &report);
  switch (engine->opkind) {
  case CS_ENGINE_OP_CLOSE: engine->state = CS_ENGINE_CLOSED; break;
  case CS_ENGINE_OP_FLUSH: engine->state = CS_ENGINE_OPEN; break;
  default: engine->state = engine->open_failed ? CS_ENGINE_IDLE : CS_ENGINE_OPEN; break;
  }
  engine->opkind = CS_ENGINE_OP_NONE;
}

/* Issues the step at step_index, or finishes when the plan is done. */
static void engine_issue(cs_engine *engine, uint64_t now_ns) {
  assert(engine->step_id == ENGINE_ID_NONE);
  assert(engine->step_index <= engine->plan_count);
  if (engine->step_index == engine->plan_count) {
    engine_finish(engine);
    return;
  }
  cs_engine_step step = engine->plan[engine->step_index];
  engine->step_id = engine->next_id++;
  engine->step_inflight = step;
  engine->step_deadline_ns = engine_step_deadline(engine, step, now_ns);
  engine->steps_run++;
  cs_engine_action action = {
      .id = engine->step_id,
      .step = step,
      .deadline_ns = engine->step_deadline_ns,
      .opkind = engine->opkind,
  };
  engine_push(engine, &action);
}

/*
 * The old sink did not finish sealing: its .open files may still be written,
 * so neither this replace nor any later plan of this engine may sweep stale
 * .open files (the next engine's open sweeps them; engine.h).
 */
static void engine_plan_drop_sweep(cs_engine *engine) {
  engine->seal_abandoned = true;
  assert(engine->plan_count <= CS_ENGINE_PLAN_MAX);
  uint32_t kept = engine->step_index + 1;
  for (uint32_t i = engine->step_index + 1; i < engine->plan_count; i++)
    if (engine->plan[i] != CS_STEP_SWEEP_OPEN) engine->plan[kept++] = engine->plan[i];
  engine->plan_count = kept;
  assert(kept >= engine->step_index + 1);
}

/*
 * Logs a failed step. A failed open step replaces the rest of the open with
 * the clean-up: nothing when START_SERVICE refused (nothing started),
 * otherwise STOP_SERVICE and RELEASE_LEASE.
 */
static void engine_step_failed(cs_engine *engine, uint64_t now_ns, int err) {
  assert(err < 0);
  assert(engine->step_inflight != CS_STEP_NONE);
  cs_engine_step step = engine->step_inflight;
  engine->log[engine->log_count % CS_ENGINE_LOG_MAX] =
      (cs_engine_log_entry){.step = step, .err = err, .at_ns = now_ns};
  engine->log_count++;
  engine->op_failures++;
  if (engine->op_err == CS_E_OK) engine->op_err = err;
  if (step == CS_STEP_SEAL_SINK) engine_plan_drop_sweep(engine);
  if (!step_is_open(step)) return;
  engine->open_failed = true;
  engine->plan_count = engine->step_index + 1;
  if (step == CS_STEP_START_SERVICE && err != CS_E_TIMEOUT) return;
  engine_plan_append(engine, CS_STEP_STOP_SERVICE);
  engine_plan_append(engine, CS_STEP_RELEASE_LEASE);
}

/* Ends the step in flight with err and issues the next one. */
static void engine_step_end(cs_engine *engine, uint64_t now_ns, int err) {
  assert(engine->step_id != ENGINE_ID_NONE);
  assert(err <= 0);
  if (err != CS_E_OK) engine_step_failed(engine, now_ns, err);
  engine->step_id = ENGINE_ID_NONE;
  engine->step_inflight = CS_STEP_NONE;
  engine->step_deadline_ns = 0;
  engine->step_index++;
  engine_issue(engine, now_ns);
}

/* Fails every step whose deadline has come; at most one plan's worth. */
static void engine_expire(cs_engine *engine, uint64_t now_ns) {
  assert(engine->plan_count <= CS_ENGINE_PLAN_MAX);
  for (uint32_t round = 0; round <= CS_ENGINE_PLAN_MAX; round++) {
    if (engine->step_id == ENGINE_ID_NONE || now_ns < engine->step_deadline_ns) return;
    engine_step_end(engine, now_ns, CS_E_TIMEOUT);
  }
  assert(engine->step_id == ENGINE_ID_NONE || now_ns < engine->step_deadline_ns);
}

/* Starts an operation from state from_state, once the queue is drained. */
static int engine_begin(cs_engine *engine, cs_engine_state from_state, cs_engine_opkind opkind,
                        cs_engine_state busy_state, uint64_t op_deadline_ns) {
  assert(engine != NULL);
  assert(busy_state != CS_ENGINE_IDLE && busy_state != CS_ENGINE_OPEN);
  if (engine->state != from_state || engine->queue_count != 0) return CS_E_STATE;
  assert(engine->step_id == ENGINE_ID_NONE && engine->opkind == CS_ENGINE_OP_NONE);
  engine->state = busy_state;
  engine->opkind = opkind;
  engine->plan_count = 0;
  engine->step_index = 0;
  engine->op_deadline_ns = op_deadline_ns;
  engine->op_err = CS_E_OK;
  engine->op_failures = 0;
  engine->open_failed = false;
  return CS_E_OK;
}

/* Issues the first step of the plan just built. */
static int engine_run(cs_engine *engine, uint64_t now_ns) {
  assert(engine->plan_count > 0);
  assert(engine->step_id == ENGINE_ID_NONE);
  engine_issue(engine, now_ns);
  engine_expire(engine, now_ns);
  return CS_E_OK;
}

int cs_engine_open(cs_engine *engine, uint64_t now_ns) {
  int err = engine_begin(engine, CS_ENGINE_IDLE, CS_ENGINE_OP_OPEN, CS_ENGINE_OPENING, now_ns);
  if (err != CS_E_OK) return err;
  engine_plan_open(engine);
  return engine_run(engine, now_ns);
}

int cs_engine_flush(cs_engine *engine, uint64_t now_ns, uint64_t deadline_ns) {
  int err = engine_begin(engine, CS_ENGINE_OPEN, CS_ENGINE_OP_FLUSH, CS_ENGINE_FLUSHING, deadline_ns);
  if (err != CS_E_OK) return err;
#if CAPSTORE_MUTANT != 22 /* mutant 22: an engine flush leaves the sink's open pack alone */
  engine_plan_append(engine, CS_STEP_FLUSH_SINK);
#endif
  engine_plan_append(engine, CS_STEP_FLUSH_SERVICE);
  return engine_run(engine, now_ns);
}

int cs_engine_close(cs_engine *engine, uint64_t now_ns, uint64_t budget_ns) {
#if CAPSTORE_MUTANT == 37 /* close without its budget */
  budget_ns = CS_NEVER;
#endif
  uint64_t end_ns = add_saturating(now_ns, budget_ns);
  int err = engine_begin(engine, CS_ENGINE_OPEN, CS_ENGINE_OP_CLOSE, CS_ENGINE_CLOSING, end_ns);
  if (err != CS_E_OK) return err;
  engine_plan_close(engine);
  return engine_run(engine, now_ns);
}

int cs_engine_replace(cs_engine *engine, uint64_t now_ns, uint64_t budget_ns) {
#if CAPSTORE_MUTANT == 37
  budget_ns = CS_NEVER;
#endif
  uint64_t end_ns = add_saturating(now_ns, budget_ns);
  int err = engine_begin(engine, CS_ENGINE_OPEN, CS_ENGINE_OP_REPLACE, CS_ENGINE_REPLACING, end_ns);
  if (err != CS_E_OK) return err;
  engine_plan_close(engine);
  engine_plan_open(engine);
  return engine_run(engine, now_ns);
}

int cs_engine_on_step_done(cs_engine *engine, uint64_t now_ns, uint64_t id, int err) {
  assert(engine != NULL);
  assert(engine->step_id == ENGINE_ID_NONE || engine->step_id < engine->next_id);
  if (id == ENGINE_ID_NONE || id != engine->step_id || err > 0) return CS_E_INVALID_ARGUMENT;
  bool late = now_ns >= engine->step_deadline_ns;
  engine_step_end(engine, now_ns, late ? CS_E_TIMEOUT : err);
  engine_expire(engine, now_ns);
  return late ? CS_E_TIMEOUT : CS_E_OK;
}

bool cs_engine_poll(cs_engine *engine, uint64_t now_ns, cs_engine_action *out) {
  assert(engine != NULL && out != NULL);
  assert(engine->queue_count <= CS_ENGINE_QUEUE_MAX);
  (void)now_ns;
  if (engine->queue_count == 0) return false;
  *out = engine->queue[engine->queue_head];
  engine->queue_head = (engine->queue_head + 1) % CS_ENGINE_QUEUE_MAX;
  engine->queue_count--;
  return true;
}

uint64_t cs_engine_next_deadline(const cs_engine *engine) {
  assert(engine != NULL);
  assert(engine->step_id == ENGINE_ID_NONE || engine->step_inflight != CS_STEP_NONE);
  if (engine->queue_count != 0) return 0; /* actions wait for cs_engine_poll */
  if (engine->step_id == ENGINE_ID_NONE) return CS_NEVER;
  return engine->step_deadline_ns;
}

void cs_engine_tick(cs_engine *engine, uint64_t now_ns) {
  assert(engine != NULL);
  assert(engine->queue_count <= CS_ENGINE_QUEUE_MAX);
  engine_expire(engine, now_ns);
}

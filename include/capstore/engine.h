/*
 * capstore/engine.h: the engine core, the lifecycle of a sink and a service
 * together. It only sequences steps; the caller carries out each step (on the
 * sink core, the service core and the spool) and reports its completion.
 *
 *   open:    START_SERVICE, SWEEP_OPEN, OPEN_SINK, REPORT
 *            (the service starts and sweeps stale .open files before the sink
 *            opens the spool; a failed step stops what was started:
 *            STOP_SERVICE, RELEASE_LEASE, then REPORT with the error)
 *   flush:   FLUSH_SINK, FLUSH_SERVICE (with what remains of the deadline), REPORT
 *   close:   SEAL_SINK, STOP_CAPTURE, DRAIN_SERVICE (within the close budget),
 *            STOP_SERVICE, RELEASE_LEASE, REPORT; each failure is logged and the
 *            rest still run
 *   replace: the close steps, then the open steps, then REPORT
 *
 * Once a SEAL_SINK has failed, the sink it was asked of may still be writing
 * its .open files in the background, and nothing tells the engine when it
 * stops: every later open plan of this engine (the replace under way, a later
 * replace, an open after a failed one) leaves SWEEP_OPEN out. The stale files
 * wait for the sweep of the next engine, which a process opens only once the
 * old sinks are done (a new process, or a reopen after a close that waited
 * for its seals).
 *
 * Every step carries a deadline; a step not completed by it counts as failed
 * with CS_E_TIMEOUT and the sequence goes on.
 *
 * Deadlines, with now the time the step is issued and R = stop_reserve_ns:
 *   START_SERVICE, SWEEP_OPEN, OPEN_SINK  now + start_timeout_ns
 *   FLUSH_SINK, FLUSH_SERVICE             the flush deadline (the service gets
 *                                         what the sink's flush left of it)
 *   SEAL_SINK, STOP_CAPTURE               max(end - R, now + R / 2)
 *   DRAIN_SERVICE                         max(end - R, now)
 *   STOP_SERVICE, RELEASE_LEASE           max(end, now + R / 2)
 * where end = close (or replace) time + budget, and for a failed open's
 * clean-up end = the open's time. Only the drain absorbs a budget that is
 * spent: sealing (which protects captured records), stopping and releasing
 * always get at least R / 2 each, so a close's steps all end by end + 2 R.
 * A step is on time only when completed strictly before its deadline; one
 * issued with no time left fails at once with CS_E_TIMEOUT.
 *
 * Open: START_SERVICE refused with an error means nothing started, so REPORT
 * follows at once. Any later failure, or START_SERVICE timing out (it may
 * have started after all), runs STOP_SERVICE and RELEASE_LEASE first; a
 * START_SERVICE completed with CS_E_TIMEOUT counts as timing out. The
 * clean-up of a replace's failed open half takes its deadlines from the
 * replace's end. A
 * failed open (or the open half of a replace) leaves the engine IDLE, so
 * open may be tried again; close always ends CLOSED, which is final.
 *
 * States: IDLE -open-> OPENING -> OPEN or IDLE; OPEN -flush-> FLUSHING ->
 * OPEN; OPEN -close-> CLOSING -> CLOSED; OPEN -replace-> REPLACING -> OPEN or
 * IDLE. A replace's REPORT carries the first failure of either half, so a
 * failed close half with a good open half reports an error while the engine
 * is OPEN: read state to tell. The state changes when the REPORT is queued.
 * A new operation needs the right state and every action of the previous one
 * polled (its REPORT included); otherwise CS_E_STATE.
 */
#ifndef CAPSTORE_ENGINE_H
#define CAPSTORE_ENGINE_H

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cs_engine_step {
  CS_STEP_NONE = 0,
  CS_STEP_START_SERVICE,
  CS_STEP_SWEEP_OPEN,
  CS_STEP_OPEN_SINK,
  CS_STEP_FLUSH_SINK,
  CS_STEP_FLUSH_SERVICE,
  CS_STEP_SEAL_SINK,
  CS_STEP_STOP_CAPTURE,
  CS_STEP_DRAIN_SERVICE,
  CS_STEP_STOP_SERVICE,
  CS_STEP_RELEASE_LEASE,
  CS_STEP_REPORT, /* notification: the operation finished; no completion expected */
  CS_STEP_COUNT_
} cs_engine_step;

const char *cs_engine_step_name(cs_engine_step step);

typedef enum cs_engine_opkind {
  CS_ENGINE_OP_NONE = 0,
  CS_ENGINE_OP_OPEN,
  CS_ENGINE_OP_FLUSH,
  CS_ENGINE_OP_CLOSE,
  CS_ENGINE_OP_REPLACE,
} cs_engine_opkind;

typedef struct cs_engine_config {
  uint64_t start_timeout_ns;   /* START_SERVICE, SWEEP_OPEN, OPEN_SINK each */
  uint64_t stop_reserve_ns;    /* kept back from the close budget for STOP and RELEASE */
} cs_engine_config;

/* Defaults: start_timeout 30 s, stop_reserve 5 s. */
void cs_engine_config_default(cs_engine_config *cfg);
/* CS_E_OK or CS_E_CONFIG with msg naming the field; both values >= 1 ms. */
int cs_engine_config_validate(const cs_engine_config *cfg, char *msg, size_t msg_size);

typedef struct cs_engine_action {
  uint64_t id;            /* echo in cs_engine_on_step_done; 0 for REPORT */
  cs_engine_step step;
  uint64_t deadline_ns;   /* when the step must be done */
  cs_engine_opkind opkind;
  int err;                /* REPORT: CS_E_OK or the first failure of the operation */
  uint32_t failures;      /* REPORT: failed steps in the operation */
} cs_engine_action;

typedef enum cs_engine_state {
  CS_ENGINE_IDLE = 0, /* not open */
  CS_ENGINE_OPENING,
  CS_ENGINE_OPEN,
  CS_ENGINE_FLUSHING,
  CS_ENGINE_CLOSING,
  CS_ENGINE_REPLACING,
  CS_ENGINE_CLOSED,
} cs_engine_state;

#define CS_ENGINE_LOG_MAX 16u

typedef struct cs_engine_log_entry {
  cs_engine_step step;
  int err;
  uint64_t at_ns;
} cs_engine_log_entry;

/* A replace's plan: five close steps, three open steps, two clean-up steps. */
#define CS_ENGINE_PLAN_MAX 10u
/* Every step of a plan and its REPORT may be queued at once. */
#define CS_ENGINE_QUEUE_MAX (CS_ENGINE_PLAN_MAX + 1u)

/* The fields are private; state may be read to learn whether the engine is open. */
typedef struct cs_engine {
  cs_engine_config cfg;
  cs_engine_state state;
  cs_engine_opkind opkind;
  cs_engine_step plan[CS_ENGINE_PLAN_MAX]; /* the steps of the current operation */
  uint32_t plan_count;
  uint32_t step_index;      /* position in plan of the step in flight */
  uint64_t op_deadline_ns;  /* flush deadline, close budget end, or open time */
  uint64_t step_id;         /* id of the step in flight, 0 when none */
  cs_engine_step step_inflight;
  uint64_t step_deadline_ns;
  uint64_t next_id;
  int op_err;
  uint32_t op_failures;
  bool open_failed;         /* an open step of this operation failed */
  bool seal_abandoned;      /* a SEAL_SINK failed: no later plan sweeps (a sink may still write) */
  cs_engine_action queue[CS_ENGINE_QUEUE_MAX];
  uint32_t queue_head;
  uint32_t queue_count;
  cs_engine_log_entry log[CS_ENGINE_LOG_MAX]; /* failed steps, log[n % CS_ENGINE_LOG_MAX] */
  uint32_t log_count;       /* total failures logged (the ring keeps the last ones) */
  uint64_t steps_run;
} cs_engine;

int cs_engine_init(cs_engine *engine, const cs_engine_config *cfg, char *msg, size_t msg_size);

/*
 * Each starts an operation; CS_E_STATE when one is already running, its
 * actions are not all polled, or the state forbids it. A flush deadline that
 * has already passed is accepted: its steps fail at once with CS_E_TIMEOUT.
 */
int cs_engine_open(cs_engine *engine, uint64_t now_ns);
int cs_engine_flush(cs_engine *engine, uint64_t now_ns, uint64_t deadline_ns);
int cs_engine_close(cs_engine *engine, uint64_t now_ns, uint64_t budget_ns);
int cs_engine_replace(cs_engine *engine, uint64_t now_ns, uint64_t budget_ns);

/*
 * The step with id finished with err (CS_E_OK or a negative cs_err).
 * CS_E_INVALID_ARGUMENT, changing nothing, for an id that is not the step in
 * flight (unknown, already done, or already failed by its deadline) or a
 * positive err. CS_E_TIMEOUT when the step was past its deadline: it then
 * counts as failed with CS_E_TIMEOUT, whatever err says.
 */
int cs_engine_on_step_done(cs_engine *engine, uint64_t now_ns, uint64_t id, int err);

/* Hands out the next queued action; never acts on time (only on_step_done and tick do). */
bool cs_engine_poll(cs_engine *engine, uint64_t now_ns, cs_engine_action *out);
/* 0 while actions wait to be polled; else the step deadline, CS_NEVER when idle. */
uint64_t cs_engine_next_deadline(const cs_engine *engine);
/* Call at next_deadline: a step past its deadline fails with CS_E_TIMEOUT. */
void cs_engine_tick(cs_engine *engine, uint64_t now_ns);

#ifdef __cplusplus
}
#endif

#endif

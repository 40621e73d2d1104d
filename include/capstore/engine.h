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
 * Every step carries a deadline; a step not completed by it counts as failed
 * with CS_E_TIMEOUT and the sequence goes on.
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

void cs_engine_config_default(cs_engine_config *cfg);
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

typedef struct cs_engine {
  cs_engine_config cfg;
  cs_engine_state state;
  cs_engine_opkind opkind;
  uint32_t step_index;      /* position in the current sequence */
  uint64_t op_deadline_ns;  /* flush deadline or close budget end */
  uint64_t step_id;         /* id of the step in flight, 0 when none */
  cs_engine_step step_inflight;
  uint64_t step_deadline_ns;
  uint64_t next_id;
  int op_err;
  uint32_t op_failures;
  bool report_pending;
  bool action_pending;
  cs_engine_action pending;
  cs_engine_log_entry log[CS_ENGINE_LOG_MAX];
  uint32_t log_count;       /* total failures logged (the ring keeps the last ones) */
  uint64_t steps_run;
} cs_engine;

int cs_engine_init(cs_engine *engine, const cs_engine_config *cfg, char *msg, size_t msg_size);

/* Each starts an operation; CS_E_STATE when one is already running or the state forbids it. */
int cs_engine_open(cs_engine *engine, uint64_t now_ns);
int cs_engine_flush(cs_engine *engine, uint64_t now_ns, uint64_t deadline_ns);
int cs_engine_close(cs_engine *engine, uint64_t now_ns, uint64_t budget_ns);
int cs_engine_replace(cs_engine *engine, uint64_t now_ns, uint64_t budget_ns);

/* The step with id finished with err. CS_E_INVALID_ARGUMENT for an unknown id. */
int cs_engine_on_step_done(cs_engine *engine, uint64_t now_ns, uint64_t id, int err);

bool cs_engine_poll(cs_engine *engine, uint64_t now_ns, cs_engine_action *out);
uint64_t cs_engine_next_deadline(const cs_engine *engine);
/* Call at next_deadline: a step past its deadline fails with CS_E_TIMEOUT. */
void cs_engine_tick(cs_engine *engine, uint64_t now_ns);

#ifdef __cplusplus
}
#endif

#endif

/*
 * The service runtime's driver: one thread that steps the engine and service
 * cores (DESIGN.md section 2, "The runtime's driver"):
 *
 *   loop:
 *     now = CLOCK_MONOTONIC
 *     deliver every message of the inbox (finished jobs, sealed packs) as events
 *     start an API call that waits (open, flush, close) on the engine
 *     while engine.poll or service.poll -> action: carry it out or hand it to its lane
 *     wait until min(engine and service deadlines), a message or a call
 *
 * It holds no policy: every decision is the cores'. What it adds is plumbing:
 * which lane runs an action, and how a lane's answer becomes an event.
 */
#include "rs_internal.h"
#include "thread_name.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void rs_inbox_post_locked(rs_runtime *rt, const rs_msg *msg) {
  if (rt->inbox_closed) return;
  /* The bounds make a full inbox impossible (jobs + two spools' worth of packs); never drop silently. */
  assert(rt->inbox_count < rt->inbox_max);
  rt->inbox[(rt->inbox_head + rt->inbox_count) % rt->inbox_max] = *msg;
  rt->inbox_count++;
  pthread_cond_signal(&rt->inbox_cond);
}

void rs_inbox_post(rs_runtime *rt, const rs_msg *msg) {
  pthread_mutex_lock(&rt->mutex);
  rs_inbox_post_locked(rt, msg);
  pthread_mutex_unlock(&rt->mutex);
}

static bool refused_push(rs_runtime *rt, const cs_pack_ref *ref);

void rs_log_failure(rs_runtime *rt, const char *what, const char *detail) {
  pthread_mutex_lock(&rt->mutex);
  snprintf(rt->engine_last_error, sizeof rt->engine_last_error, "%s: %.120s", what, detail);
  pthread_mutex_unlock(&rt->mutex);
}

static void log_failure(rs_runtime *rt, const char *what, const char *detail) { rs_log_failure(rt, what, detail); }

/* ---- jobs ------------------------------------------------------------------------------ */

/* A free job of kind's own part of the pool (actions and steps never take each other's), or NULL. */
static rs_job *job_alloc(rs_runtime *rt, uint32_t kind) {
  uint32_t steps_from = rt->job_count - RS_STEP_JOBS;
  uint32_t first = kind == RS_JOB_STEP ? steps_from : 0, end = kind == RS_JOB_STEP ? rt->job_count : steps_from;
  for (uint32_t i = first; i < end; i++) {
    rs_job *job = &rt->jobs[i];
    if (job->busy) continue;
    bool *held = job->held, *rejected = job->rejected;
    const char **keys = job->keys;
    memset(job, 0, sizeof *job);
    job->held = held;
    job->rejected = rejected;
    job->keys = keys;
    job->busy = true;
    job->kind = kind;
    job->fd = -1;
    return job;
  }
  return NULL;
}

static void job_free(rs_runtime *rt, rs_job *job) {
  if (job->kind == RS_JOB_ACTION && job->act.op == CS_OP_STORE_LIST && job->list_slot < RS_LIST_SLOTS)
    rt->list_busy[job->list_slot] = false;
  job->busy = false;
}

/* ---- engine steps ------------------------------------------------------------------------ */

static void step_done(rs_runtime *rt, uint64_t now, int err) {
  if (rt->step == CS_STEP_NONE) return;
  uint64_t id = rt->step_id;
  rt->step = CS_STEP_NONE;
  rt->step_waits_release = false;
  (void)cs_engine_on_step_done(&rt->engine, now, id, err);
}

static void service_start(rs_runtime *rt, uint64_t now) {
  char msg[CS_LAST_ERROR_MAX];
  int rc = cs_service_init(&rt->svc, rt->svc_mem, rt->svc_mem_size, &rt->cfg.service, &rt->lease_id, rt->seed, msg,
                           sizeof msg);
  if (rc != CS_E_OK) {
    log_failure(rt, "service start", msg);
    step_done(rt, now, rc);
    return;
  }
  cs_event start = {.kind = CS_EV_START};
  rc = cs_service_on_event(rt->svc, now, &start);
  rt->svc_started = rc == CS_E_OK;
  /* The packs a previous process left in the spool, with the START (rs_open_sink built them). */
  for (uint32_t i = 0; rt->svc_started && i < rt->recovered_count; i++) {
    cs_event ev = {.kind = CS_EV_SEALED, .pack = &rt->recovered[i], .recovered = true};
    int sealed = cs_service_on_event(rt->svc, now, &ev);
    if (sealed == CS_E_FULL && refused_push(rt, &rt->recovered[i])) continue; /* reported again with room */
    if (sealed != CS_E_OK) log_failure(rt, "recovered pack refused by the service", cs_strerror(sealed));
  }
  /*
   * The packs beyond the table, and those whose ref could not be built: no
   * flush drains before each is reported and shipped (the unreadable ones
   * by a later start, which checks them again).
   */
  cs_event backlog = {.kind = CS_EV_BACKLOG, .key_count = rt->backlog_count + rt->unreadable_at_open};
  if (rt->svc_started && backlog.key_count > 0) cs_service_on_event(rt->svc, now, &backlog);
  free(rt->recovered);
  rt->recovered = NULL;
  rt->recovered_count = 0;
  step_done(rt, now, rc);
}

/*
 * A blocking step runs on the spool lane; its completion comes back through
 * the inbox. A step the engine timed out may still be on the lane; when
 * RS_STEP_JOBS of them are, the new step fails at once (CS_E_BUSY) rather
 * than queue behind them without bound.
 */
static void step_to_lane(rs_runtime *rt, uint64_t now, const cs_engine_action *act) {
  rs_job *job = job_alloc(rt, RS_JOB_STEP);
  if (job == NULL) {
    pthread_mutex_lock(&rt->mutex);
    snprintf(rt->call_msg, sizeof rt->call_msg, "%s: the sink's earlier steps are still running",
             cs_engine_step_name(act->step));
    pthread_mutex_unlock(&rt->mutex);
    step_done(rt, now, CS_E_BUSY);
    return;
  }
  job->step = *act;
  rs_lane_push(&rt->spool_lane, job);
}

static void service_flush(rs_runtime *rt, uint64_t now, uint64_t deadline) {
  rt->step_flush_id = ++rt->next_flush_id;
  cs_event ev = {.kind = CS_EV_FLUSH, .id = rt->step_flush_id, .deadline_ns = deadline};
  int rc = cs_service_on_event(rt->svc, now, &ev);
  if (rc != CS_E_OK) step_done(rt, now, rc);
}

/* Under no lock: whether capstore_close was called (it cuts a running flush short). */
static bool close_requested(rs_runtime *rt) {
  pthread_mutex_lock(&rt->mutex);
  bool asked = rt->close_requested;
  pthread_mutex_unlock(&rt->mutex);
  return asked;
}

/* A flush step running when close is asked fails at once with CS_E_CLOSED, so the close need not wait for it. */
static bool cut_flush_short(rs_runtime *rt, uint64_t now) {
  if ((rt->step != CS_STEP_FLUSH_SINK && rt->step != CS_STEP_FLUSH_SERVICE) || !close_requested(rt)) return false;
  step_done(rt, now, CS_E_CLOSED);
  return true;
}

static void exec_step(rs_runtime *rt, uint64_t now, const cs_engine_action *act) {
  rt->step = act->step;
  rt->step_id = act->id;
  rt->step_waits_release = false;
  if (cut_flush_short(rt, now)) return;
  bool svc_live = rt->svc != NULL && rt->svc_started && !cs_service_stopped(rt->svc);
  switch (act->step) {
  case CS_STEP_START_SERVICE: service_start(rt, now); return;
  case CS_STEP_SWEEP_OPEN: step_done(rt, now, CS_E_OK); return; /* the sink's open sweeps under its owner lock */
  case CS_STEP_STOP_CAPTURE: step_done(rt, now, CS_E_OK); return; /* the sink's close refuses records */
  case CS_STEP_OPEN_SINK:
  case CS_STEP_FLUSH_SINK:
  case CS_STEP_SEAL_SINK: step_to_lane(rt, now, act); return;
  case CS_STEP_FLUSH_SERVICE:
  case CS_STEP_DRAIN_SERVICE:
    if (!svc_live) {
      step_done(rt, now, CS_E_OK);
      return;
    }
    service_flush(rt, now, act->deadline_ns);
    return;
  case CS_STEP_STOP_SERVICE: {
    if (!svc_live) {
      step_done(rt, now, CS_E_OK);
      return;
    }
    cs_event ev = {.kind = CS_EV_STOP};
    (void)cs_service_on_event(rt->svc, now, &ev);
    return;
  }
  case CS_STEP_RELEASE_LEASE: {
    if (rt->svc == NULL || !rt->svc_started || rt->cfg.role == CS_ROLE_UPLOADER) {
      step_done(rt, now, CS_E_OK);
      return;
    }
    cs_event ev = {.kind = CS_EV_RELEASE};
    (void)cs_service_on_event(rt->svc, now, &ev);
    rt->step_waits_release = true;
    return;
  }
  default: break;
  }
  assert(!"unknown engine step");
}

/* The answer of an API call: the engine's REPORT. */
static void report(rs_runtime *rt, const cs_engine_action *act) {
  /* The first failed step of the call, from the engine's log (it also fails steps on their deadline itself). */
  if (act->err != CS_E_OK && rt->engine.log_count > rt->call_log_start &&
      rt->engine.log_count - rt->call_log_start <= CS_ENGINE_LOG_MAX)
    rt->failed_step = rt->engine.log[rt->call_log_start % CS_ENGINE_LOG_MAX].step;
  if (act->opkind == CS_ENGINE_OP_FLUSH && rt->svc != NULL && rt->svc_started)
    cs_service_snapshot(rt->svc, cs_capture_clock_ns(), &rt->call_snap);
  pthread_mutex_lock(&rt->mutex);
  if (act->err != CS_E_OK && rt->call_msg[0] == '\0' && rt->failed_step != CS_STEP_NONE)
    snprintf(rt->call_msg, sizeof rt->call_msg, "%s: %s", cs_engine_step_name(rt->failed_step), cs_strerror(act->err));
  rt->call_err = act->err;
  rt->engine_failures = rt->engine.log_count;
  if (act->opkind == CS_ENGINE_OP_FLUSH) rt->call_flush = rt->last_flush;
  if (act->opkind == CS_ENGINE_OP_CLOSE) rt->stopping = true;
  rt->call_done_seq++;
  pthread_cond_broadcast(&rt->call_cond);
  pthread_mutex_unlock(&rt->mutex);
}

static void exec_engine_action(rs_runtime *rt, uint64_t now, const cs_engine_action *act) {
  if (act->step == CS_STEP_REPORT) {
    report(rt, act);
    return;
  }
  exec_step(rt, now, act);
}

/* ---- service actions ------------------------------------------------------------------------ */

static void on_flush_done(rs_runtime *rt, uint64_t now, const cs_action *act) {
  if ((rt->step == CS_STEP_FLUSH_SERVICE || rt->step == CS_STEP_DRAIN_SERVICE) &&
      rt->step_flush_id == act->flush.flush_id) {
    rt->last_flush = act->flush;
    step_done(rt, now, act->flush.drained ? CS_E_OK : (act->flush.err != CS_E_OK ? act->flush.err : CS_E_TIMEOUT));
  }
}

static void exec_service_action(rs_runtime *rt, uint64_t now, const cs_action *act) {
  switch (act->op) {
  case CS_OP_FLUSH_DONE: on_flush_done(rt, now, act); return;
  case CS_OP_STOPPED:
    if (rt->step == CS_STEP_STOP_SERVICE) step_done(rt, now, CS_E_OK);
    return;
  default: break;
  }
  assert(cs_op_is_request(act->op));
  rs_job *job = job_alloc(rt, RS_JOB_ACTION);
  assert(job != NULL); /* the pool is the core's request bound plus room for a step */
  job->act = *act;
  if (act->op == CS_OP_STORE_LIST) {
    uint32_t slot = rt->list_busy[0] ? 1 : 0;
    if (rt->list_busy[slot]) {
      /* More pages in flight than the runtime keeps buffers for: answered as throttled, not sent. */
      job->outcome = CS_OUT_THROTTLED;
      job->list_slot = UINT32_MAX; /* holds no page buffer */
      snprintf(job->detail, sizeof job->detail, "LIST: more than %u pages in flight", RS_LIST_SLOTS);
      rs_msg msg = {.kind = RS_MSG_DONE, .job = job};
      rs_inbox_post(rt, &msg);
      return;
    }
    rt->list_busy[slot] = true;
    job->list_slot = slot;
    job->keys = rt->list_ptrs + (size_t)slot * rt->cfg.service.list_page_max;
  }
  rs_lane_push(rs_lane_of(rt, act), job);
}

/* ---- messages -------------------------------------------------------------------------------- */

/* Hands the spool lane the next packs of the backlog, one for each pack that left the spool. */
static void recover_more(rs_runtime *rt) {
  if (rt->recover_busy || rt->recover_credit == 0 || rt->backlog_next >= rt->backlog_count) return;
  rs_job *job = &rt->recover_job;
  memset(job, 0, sizeof *job);
  job->kind = RS_JOB_RECOVER;
  job->busy = true;
  job->fd = -1;
  uint32_t left = rt->backlog_count - rt->backlog_next;
  job->key_count = rt->recover_credit < left ? rt->recover_credit : left; /* packs to report */
  rt->recover_credit -= job->key_count;
  rt->recover_busy = true;
  rs_lane_push(&rt->spool_lane, job);
}

static void refused_report(rs_runtime *rt, uint64_t now);

static void deliver_done(rs_runtime *rt, uint64_t now, rs_job *job) {
  if (job->kind == RS_JOB_ARRIVALS) {
    rt->arrivals_busy = false;
    /* A scan that admitted a full batch is followed at once: more may be waiting. */
    rt->arrivals_next_ns = job->key_count > 0 ? now : now + rt->cfg.daemon.scan_interval_ns;
    return;
  }
  if (job->kind == RS_JOB_RECOVER) {
    rt->recover_busy = false;
    recover_more(rt);
    return;
  }
  if (job->kind == RS_JOB_STEP) {
    if (job->err != CS_E_OK) {
      log_failure(rt, cs_engine_step_name(job->step.step), job->detail);
      pthread_mutex_lock(&rt->mutex);
      if (rt->call_msg[0] == '\0' && rt->step_id == job->step.id) /* a late step of an earlier call is not this one's */
        snprintf(rt->call_msg, sizeof rt->call_msg, "%s: %.200s", cs_engine_step_name(job->step.step),
                 job->detail[0] != '\0' ? job->detail : cs_strerror(job->err));
      pthread_mutex_unlock(&rt->mutex);
    }
    if (rt->step_id == job->step.id) step_done(rt, now, job->err);
    job_free(rt, job);
    return;
  }
  const cs_action *a = &job->act;
  /* A HEAD that finds nothing is an answer, not a failure: a recovered or handed-in pack not yet uploaded. */
  bool answer = a->op == CS_OP_STORE_HEAD && job->outcome == CS_OUT_NOT_FOUND;
  if (job->outcome != CS_OUT_OK && !answer && job->detail[0] != '\0') log_failure(rt, cs_op_name(a->op), job->detail);
  cs_event ev = {.kind = CS_EV_DONE, .id = a->id, .outcome = job->outcome, .head = job->head,
                 .cat_head = job->cat_head, .claims = job->claims};
  if (a->op == CS_OP_CAT_COMMITTED && job->outcome == CS_OUT_OK) {
    ev.held = job->held;
    ev.rejected = job->rejected;
  }
  if (a->op == CS_OP_STORE_LIST && job->outcome == CS_OUT_OK) {
    ev.keys = job->keys;
    ev.key_count = job->key_count;
    ev.next_token = job->next_token;
  }
  if (job->outcome == CS_OUT_OK && a->op == CS_OP_CAT_INDEX) atomic_fetch_add(&rt->descriptors_indexed, job->sent_bytes);
  int rc = cs_service_on_event(rt->svc, now, &ev);
  if (rc != CS_E_OK) log_failure(rt, "completion refused", cs_strerror(rc));
  bool left_spool = (a->op == CS_OP_SPOOL_REMOVE || a->op == CS_OP_SPOOL_QUARANTINE) && job->outcome == CS_OUT_OK;
  job_free(rt, job);
  if (left_spool && rt->refused_count > 0) {
    refused_report(rt, now); /* a pack refused since open goes first: it has its ref */
  } else if (left_spool && rt->backlog_next < rt->backlog_count) {
    rt->recover_credit++;
    recover_more(rt);
  }
}

/* A pack the service refused for a full table waits for the next room; false when out of memory. */
static bool refused_push(rs_runtime *rt, const cs_pack_ref *ref) {
  if (rt->refused_count == rt->refused_cap) {
    uint32_t cap = rt->refused_cap == 0 ? 16 : 2 * rt->refused_cap;
    cs_pack_ref *grown = realloc(rt->refused, (size_t)cap * sizeof *grown);
    if (grown == NULL) return false;
    rt->refused = grown;
    rt->refused_cap = cap;
  }
  rt->refused[rt->refused_count++] = *ref;
  return true;
}

/* The oldest refused pack, reported again (backlog set); refused again, it stays first. */
static void refused_report(rs_runtime *rt, uint64_t now) {
  /* recovered: HEAD before any PUT (one refused from the backlog may be in the store already) */
  cs_event ev = {.kind = CS_EV_SEALED, .pack = &rt->refused[0], .recovered = true, .backlog = true};
  int rc = cs_service_on_event(rt->svc, now, &ev);
  if (rc == CS_E_FULL) return;
  if (rc != CS_E_OK) log_failure(rt, "refused pack reported again", cs_strerror(rc));
  rt->refused_count--;
  memmove(rt->refused, rt->refused + 1, (size_t)rt->refused_count * sizeof *rt->refused);
}

static void deliver_sealed(rs_runtime *rt, uint64_t now, const rs_msg *msg) {
  if (rt->svc == NULL || !rt->svc_started) return; /* stays in the spool: the next start recovers it */
  /* RECOVERED: from the backlog, counted by the CS_EV_BACKLOG at start. ARRIVED: handed in by a capture
     process, which may have handed in a pack already shipped (a crash before its private removal): HEAD first. */
  bool from_backlog = msg->kind == RS_MSG_RECOVERED;
  cs_event ev = {.kind = CS_EV_SEALED, .pack = &msg->ref, .recovered = from_backlog || msg->kind == RS_MSG_ARRIVED,
                 .backlog = from_backlog};
  int rc = cs_service_on_event(rt->svc, now, &ev);
  if (rc == CS_E_FULL && !refused_push(rt, &msg->ref)) {
    /* Counted outside the table by the service; it stays in the spool for the next start. */
    log_failure(rt, "sealed pack refused for a full table", "no memory to keep it for a later report");
  } else if (rc != CS_E_OK && rc != CS_E_FULL) {
    log_failure(rt, "sealed pack refused by the service", cs_strerror(rc));
  }
}

/* Takes the inbox's messages one at a time (the lock is not held while delivering). */
static void drain_inbox(rs_runtime *rt) {
  for (;;) {
    pthread_mutex_lock(&rt->mutex);
    if (rt->inbox_count == 0) {
      pthread_mutex_unlock(&rt->mutex);
      return;
    }
    rs_msg *msg = &rt->inbox[rt->inbox_head];
    rs_msg copy;
    copy.kind = msg->kind;
    copy.job = msg->job;
    if (msg->kind != RS_MSG_DONE) copy.ref = msg->ref;
    rt->inbox_head = (rt->inbox_head + 1) % rt->inbox_max;
    rt->inbox_count--;
    pthread_mutex_unlock(&rt->mutex);
    uint64_t now = cs_capture_clock_ns();
    if (copy.kind == RS_MSG_DONE) deliver_done(rt, now, copy.job);
    else deliver_sealed(rt, now, &copy);
  }
}

/* Starts the API call that waits, if any. */
static void take_call(rs_runtime *rt, uint64_t now) {
  pthread_mutex_lock(&rt->mutex);
  uint32_t kind = rt->call_kind;
  uint64_t arg = rt->call_arg_ns;
  rt->call_kind = RS_CALL_NONE;
  pthread_mutex_unlock(&rt->mutex);
  if (kind == RS_CALL_NONE) return;
  rt->failed_step = CS_STEP_NONE;
  rt->call_log_start = rt->engine.log_count;
  int rc = CS_E_STATE;
  if (kind == RS_CALL_OPEN) rc = cs_engine_open(&rt->engine, now);
  if (kind == RS_CALL_FLUSH) rc = cs_engine_flush(&rt->engine, now, arg);
  if (kind == RS_CALL_CLOSE) rc = cs_engine_close(&rt->engine, now, arg);
  if (kind == RS_CALL_FLUSH) memset(&rt->last_flush, 0, sizeof rt->last_flush);
  if (rc == CS_E_OK) return;
  cs_engine_action refused = {.step = CS_STEP_REPORT, .err = rc, .opkind = CS_ENGINE_OP_NONE};
  report(rt, &refused);
}

/* Runs both cores until neither has anything to say. */
static void pump(rs_runtime *rt) {
  for (bool progress = true; progress;) {
    progress = false;
    uint64_t now = cs_capture_clock_ns();
    /* The service first: a flush due now answers with its counts before the engine times its step out. */
    if (rt->svc != NULL && rt->svc_started) {
      cs_action act;
      while (cs_service_poll(rt->svc, now, &act)) {
        exec_service_action(rt, now, &act);
        progress = true;
      }
      if (rt->step == CS_STEP_RELEASE_LEASE && rt->step_waits_release) {
        cs_snapshot snap;
        cs_service_snapshot(rt->svc, now, &snap);
        if (snap.lease_state == CS_LEASE_RELEASED) {
          step_done(rt, now, CS_E_OK);
          progress = true;
        }
      }
    }
    cs_engine_tick(&rt->engine, now);
    cs_engine_action ea;
    while (cs_engine_poll(&rt->engine, now, &ea)) {
      exec_engine_action(rt, now, &ea);
      progress = true;
    }
  }
}

/* Serving: one arrivals scan at a time on the spool lane, every daemon.scan_interval, while the service runs. */
static void arrivals_due(rs_runtime *rt, uint64_t now) {
  if (!rt->cfg.serve || rt->svc == NULL || !rt->svc_started || rt->arrivals_busy || now < rt->arrivals_next_ns ||
      cs_service_stopped(rt->svc))
    return;
  rs_job *job = &rt->arrivals_job;
  memset(job, 0, sizeof *job);
  job->kind = RS_JOB_ARRIVALS;
  job->busy = true;
  job->fd = -1;
  rt->arrivals_busy = true;
  rs_lane_push(&rt->spool_lane, job);
}

static uint64_t next_deadline(rs_runtime *rt) {
  uint64_t at = cs_engine_next_deadline(&rt->engine);
  if (rt->cfg.serve && rt->svc_started && !rt->arrivals_busy && rt->arrivals_next_ns < at) at = rt->arrivals_next_ns;
  if (rt->svc != NULL && rt->svc_started) {
    uint64_t d = cs_service_next_deadline(rt->svc);
    if (d < at) at = d;
  }
  return at;
}

static void wait_for_work(rs_runtime *rt, uint64_t deadline) {
  pthread_mutex_lock(&rt->mutex);
  if (rt->inbox_count == 0 && rt->call_kind == RS_CALL_NONE && !rt->stopping) {
    if (deadline == CS_NEVER) {
      pthread_cond_wait(&rt->inbox_cond, &rt->mutex);
    } else {
      struct timespec ts = {.tv_sec = (time_t)(deadline / CS_SEC_NS), .tv_nsec = (long)(deadline % CS_SEC_NS)};
      pthread_cond_timedwait(&rt->inbox_cond, &rt->mutex, &ts); /* inbox_cond uses CLOCK_MONOTONIC */
    }
  }
  pthread_mutex_unlock(&rt->mutex);
}

static void publish_snapshot(rs_runtime *rt) {
  if (rt->svc == NULL || !rt->svc_started) return;
  cs_snapshot snap;
  cs_service_snapshot(rt->svc, cs_capture_clock_ns(), &snap);
  pthread_mutex_lock(&rt->mutex);
  rt->snap = snap;
  rt->engine_failures = rt->engine.log_count;
  pthread_mutex_unlock(&rt->mutex);
}

void *rs_driver_main(void *context) {
  rs_runtime *rt = context;
  rt_thread_name("cs-driver");
  for (;;) {
    drain_inbox(rt);
    (void)cut_flush_short(rt, cs_capture_clock_ns());
    take_call(rt, cs_capture_clock_ns());
    pump(rt);
    arrivals_due(rt, cs_capture_clock_ns());
    publish_snapshot(rt);
    pthread_mutex_lock(&rt->mutex);
    bool stop = rt->stopping;
    pthread_mutex_unlock(&rt->mutex);
    if (stop) return NULL;
    wait_for_work(rt, next_deadline(rt));
  }
}

/* ---- the engine's blocking steps, on the spool lane ------------------------------------------------ */

/*
 * Opens the capture (its recovery sweeps and checks the spool under its
 * owner lock) and builds the refs of every pack already in the spool, before
 * the engine starts: START_SERVICE reports them right after the service's
 * START, as the simulator does, so no reconcile can adopt one of them first.
 * The packs beyond the service's table wait in the backlog. On the API thread.
 */
int rs_open_sink(rs_runtime *rt, char *msg, size_t msg_size) {
  capstore_config *cfg = &rt->cfg;
  int rc = cs_capture_open(cfg->spool_dir, &cfg->capture, &rt->capture, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  atomic_store(&rt->capture_live, rt->capture);
  size_t count = 0, listed = 0;
  uint32_t max = cfg->service.spool_packs_max;
  rc = cs_capture_list(rt->capture, NULL, 0, &listed);
  cs_spool_entry *entries = calloc(listed + 1, sizeof *entries);
  rt->recovered = calloc(listed < max ? listed + 1 : max, sizeof *rt->recovered);
  if (entries == NULL || rt->recovered == NULL) {
    free(entries);
    snprintf(msg, msg_size, "no memory for the %zu packs in the spool", listed);
    return CS_E_NO_MEMORY;
  }
  if (rc == CS_E_OK) rc = cs_capture_list(rt->capture, entries, listed, &count);
  if (count > listed) count = listed;
  if (rc == CS_E_OK && count > max) {
    rt->backlog = calloc(count - max, sizeof *rt->backlog);
    if (rt->backlog == NULL) {
      free(entries);
      snprintf(msg, msg_size, "no memory for the %zu packs in the spool", count);
      return CS_E_NO_MEMORY;
    }
    memcpy(rt->backlog, entries + max, (count - max) * sizeof *entries);
    rt->backlog_count = (uint32_t)(count - max);
    count = max;
  }
  for (size_t i = 0; rc == CS_E_OK && i < count; i++) {
    char why[200];
    int ref_rc = rs_ref_from_spool(rt, &entries[i], &rt->recovered[rt->recovered_count], why, sizeof why);
    if (ref_rc != CS_E_OK && ref_rc != CS_E_IO && ref_rc != CS_E_NO_MEMORY && ref_rc != CS_E_NOT_FOUND) {
      /* Verified, yet not shippable (a pack of no records has no object key): set aside, not kept forever. */
      char reason[260];
      snprintf(reason, sizeof reason, "not shippable: %s", why);
      if (cs_capture_quarantine_pack(rt->capture, &entries[i].pack_id, reason, NULL, 0) == CS_E_OK) {
        log_failure(rt, "a spooled pack set aside", why);
        continue;
      }
    }
    if (ref_rc != CS_E_OK) {
      /* Recovery checked every pack's bytes at open; one that cannot be read now stays for the next start. */
      log_failure(rt, "recovering a spooled pack", why);
      rt->unreadable_at_open++;
      continue;
    }
    rt->recovered_count++;
  }
  free(entries);
  if (rc != CS_E_OK) snprintf(msg, msg_size, "listing the spool: %s", cs_strerror(rc));
  return rc;
}

/* RS_JOB_RECOVER, on the spool lane: the next key_count packs of the backlog, reported as recovered. */
static void recover_backlog(rs_runtime *rt, rs_job *job) {
  for (uint32_t i = 0; i < job->key_count && rt->backlog_next < rt->backlog_count; i++) {
    const cs_spool_entry *entry = &rt->backlog[rt->backlog_next++];
    rs_msg msg = {.kind = RS_MSG_RECOVERED};
    char why[200];
    if (rs_ref_from_spool(rt, entry, &msg.ref, why, sizeof why) != CS_E_OK) {
      log_failure(rt, "recovering a spooled pack", why); /* removed meanwhile, or unreadable: the next start looks again */
      continue;
    }
    rs_inbox_post(rt, &msg);
  }
}

void rs_run_step(rs_runtime *rt, rs_job *job) {
  if (job->kind == RS_JOB_RECOVER) {
    recover_backlog(rt, job);
    return;
  }
  const cs_engine_action *act = &job->step;
  switch (act->step) {
  case CS_STEP_OPEN_SINK: job->err = rt->capture != NULL ? CS_E_OK : CS_E_STATE; break; /* rs_open_sink opened it */
  case CS_STEP_FLUSH_SINK:
    job->err = rt->capture == NULL ? CS_E_CLOSED
                                   : cs_capture_flush(rt->capture, act->deadline_ns, job->detail, sizeof job->detail);
    break;
  case CS_STEP_SEAL_SINK:
    /* Serving: what was handed in before the close is taken with it (posted before this step's answer). */
    if (rt->cfg.serve && rt->capture != NULL) { /* one scan (its inbox room is reserved); more wait for the next start */
      rs_job scan = {.kind = RS_JOB_ARRIVALS};
      rs_arrivals_scan(rt, &scan);
    }
    job->err = rt->capture == NULL ? CS_E_OK
                                   : cs_capture_close(rt->capture, act->deadline_ns, job->detail, sizeof job->detail);
    break;
  default: assert(!"not a blocking step"); job->err = CS_E_STATE;
  }
}

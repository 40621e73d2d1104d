/*
 * Coverage marks (coverage.h): the hooks the world calls, what each one
 * counts, and the report. Counting only reads: no PRNG draw, no event, no
 * write the trace hash or a core could see, so a run counts the same marks
 * whether anyone prints them or not.
 *
 * The service's cycle phase, pack stages and tables are private to the core;
 * the simulator compiles the cores itself, so it reads them read-only from
 * src/core/service_internal.h (a phase the world cannot see cannot be
 * counted). The sink's state numbers mirror enum sink_state of src/core/sink.c.
 */
#include "world.h"

#include "../src/core/service_internal.h"

#include <inttypes.h>
#include <string.h>

#define SIM_COV_NAME_(id, name, why) name,
static const char *const mark_names[SIM_COV_COUNT_] = {SIM_COV_MARKS(SIM_COV_NAME_)};
#undef SIM_COV_NAME_
#define SIM_COV_WHY_(id, name, why) why,
static const char *const mark_why[SIM_COV_COUNT_] = {SIM_COV_MARKS(SIM_COV_WHY_)};
#undef SIM_COV_WHY_

/* Marks indexed by a core's enum stay in its order and count (the names are checked at run start). */
_Static_assert(SIM_COV_FAULT_CATALOG_THROTTLE - SIM_COV_FAULT_STORE_OUTAGE + 1 == F_COUNT_, "one fault mark per sim_fault");
_Static_assert(SIM_COV_OUT_STORE_INVALID - SIM_COV_OUT_STORE_OK + 1 == CS_OUT_COUNT_, "one store mark per outcome");
_Static_assert(SIM_COV_OUT_CATALOG_INVALID - SIM_COV_OUT_CATALOG_OK + 1 == CS_OUT_COUNT_, "one catalog mark per outcome");
_Static_assert(SIM_COV_OP_STOPPED - SIM_COV_OP_STORE_PUT + 2 == CS_OP_COUNT_, "one mark per cs_op");
_Static_assert(SIM_COV_STEP_REPORT - SIM_COV_STEP_START_SERVICE + 2 == CS_STEP_COUNT_, "one mark per engine step");
_Static_assert(SIM_COV_REPORT_REPLACE_FAILED - SIM_COV_REPORT_OPEN_OK + 1 == 2 * CS_ENGINE_OP_REPLACE, "two per opkind");
_Static_assert(SIM_COV_SEAL_CLOSE - SIM_COV_SEAL_RECORDS + 1 == CS_SEAL_CLOSE, "one mark per seal reason");
_Static_assert(SIM_COV_LEASE_RELEASED - SIM_COV_LEASE_NONE == CS_LEASE_RELEASED, "one mark per lease state");
_Static_assert(SIM_COV_PHASE_STANDBY - SIM_COV_PHASE_IDLE == PHASE_STANDBY, "one mark per cycle phase");
_Static_assert(SIM_COV_STAGE_SET_ASIDE - SIM_COV_STAGE_SPOOLED + 2 == STAGE_COUNT_, "one mark per pack stage");
_Static_assert(SIM_COV_ENGINE_CLOSED - SIM_COV_ENGINE_IDLE == CS_ENGINE_CLOSED, "one mark per engine state");

/* enum sink_state of src/core/sink.c. */
enum { SINK_STATE_OPEN = 1, SINK_STATE_CLOSED = 3 };

/* ---- the table ------------------------------------------------------------ */

const char *sim_cov_name(sim_cov_id mark) { return (unsigned)mark < SIM_COV_COUNT_ ? mark_names[mark] : "?"; }

sim_cov_id sim_cov_by_name(const char *name) {
  for (uint32_t i = 0; i < SIM_COV_COUNT_; i++)
    if (strcmp(mark_names[i], name) == 0) return (sim_cov_id)i;
  return SIM_COV_COUNT_;
}

const char *sim_cov_why_optional(sim_cov_id mark) {
  return (unsigned)mark < SIM_COV_COUNT_ && mark_why[mark][0] != '\0' ? mark_why[mark] : NULL;
}

/* The fault marks carry the profile's names; a fault added to one table and not the other fails every run. */
void sim_cov_check_table(sim_world *w) {
  static bool checked;
  if (checked) return;
  for (uint32_t f = 0; f < F_COUNT_; f++) {
    const char *name = mark_names[SIM_COV_FAULT_STORE_OUTAGE + f];
    if (strncmp(name, "fault_", 6) != 0 || strcmp(name + 6, sim_fault_name((sim_fault)f)) != 0)
      sim_bail(w, SIM_EXIT_CRASH, "coverage mark %s is not fault %s (sim/coverage.h)", name, sim_fault_name((sim_fault)f));
  }
  checked = true;
}

void sim_cov_add(sim_coverage *total, const uint64_t *hits, uint64_t seed) {
  total->runs++;
  for (uint32_t i = 0; i < SIM_COV_COUNT_; i++) {
    if (hits[i] == 0) continue;
    if (total->runs_hit[i] == 0) total->first_seed[i] = seed;
    total->runs_hit[i]++;
    total->hits[i] += hits[i];
  }
}

uint32_t sim_cov_report(const sim_coverage *total, bool verbose, FILE *out) {
  uint32_t reached = 0, missing_required = 0;
  for (uint32_t i = 0; i < SIM_COV_COUNT_; i++) {
    if (verbose && total->runs_hit[i] > 0)
      fprintf(out, "coverage: %-34s runs=%-6" PRIu64 " hits=%-9" PRIu64 " first_seed=%" PRIu64 "\n", mark_names[i],
              total->runs_hit[i], total->hits[i], total->first_seed[i]);
    if (total->runs_hit[i] > 0) reached++;
    else if (mark_why[i][0] == '\0') missing_required++;
  }
  for (uint32_t i = 0; i < SIM_COV_COUNT_; i++)
    if (total->runs_hit[i] == 0 && mark_why[i][0] == '\0')
      fprintf(out, "coverage: never reached: %s (required)\n", mark_names[i]);
  for (uint32_t i = 0; i < SIM_COV_COUNT_; i++)
    if (total->runs_hit[i] == 0 && mark_why[i][0] != '\0')
      fprintf(out, "coverage: never reached: %s (not required: %s)\n", mark_names[i], mark_why[i]);
  fprintf(out, "coverage: %" PRIu64 " runs reached %u of %u marks; %u required marks never reached\n", total->runs,
          reached, (unsigned)SIM_COV_COUNT_, missing_required);
  return missing_required;
}

bool sim_cov_counter(const sim_world *w, const char *name, uint64_t *out) {
  if (strncmp(name, "cov_", 4) != 0) return false;
  sim_cov_id mark = sim_cov_by_name(name + 4);
  if (mark == SIM_COV_COUNT_) return false;
  *out = w->cov.hits[mark];
  return true;
}

/* ---- counting --------------------------------------------------------------- */

void sim_cov_mark(sim_world *w, sim_cov_id mark) {
  if (w->cov.on && (unsigned)mark < SIM_COV_COUNT_) w->cov.hits[mark]++;
}

void sim_cov_fault(sim_world *w, sim_fault fault) {
  if ((unsigned)fault < F_COUNT_) sim_cov_mark(w, (sim_cov_id)(SIM_COV_FAULT_STORE_OUTAGE + fault));
}

/* The fault kind a request meets under mode, or F_COUNT_ for none the swarm draws. */
static sim_fault send_fault(bool catalog, cs_plan_mode mode) {
  switch (mode) {
  case CS_PLAN_MODE_CUT: return catalog ? F_CATALOG_OUTAGE : F_STORE_OUTAGE;
  case CS_PLAN_MODE_STALL: return catalog ? F_CATALOG_STALL : F_STORE_STALL;
  case CS_PLAN_MODE_UNKNOWN: return catalog ? F_CATALOG_UNKNOWN : F_STORE_UNKNOWN;
  case CS_PLAN_MODE_SLOW: return catalog ? F_COUNT_ : F_STORE_SLOW;
  case CS_PLAN_MODE_5XX: return catalog ? F_CATALOG_5XX : F_STORE_5XX;
  case CS_PLAN_MODE_THROTTLE: return catalog ? F_CATALOG_THROTTLE : F_STORE_THROTTLE;
  default: return F_COUNT_; /* none, and too-large, which the catalog's statement limit answers */
  }
}

/* A request met a fault of the network or of a server's window (swarm or plan). */
void sim_cov_send(sim_world *w, const sim_req *req, cs_plan_mode mode) {
  sim_cov_fault(w, send_fault(req->to_catalog, mode));
}

/* Keys of a LIST page that name no pack: the service must skip them. */
static void reply_list(sim_world *w, const cs_event *ev) {
  for (uint32_t i = 0; i < ev->key_count; i++) {
    cs_uuid id;
    if (cs_key_pack_id(ev->keys[i], strlen(ev->keys[i]), &id) != CS_E_OK) sim_cov_mark(w, SIM_COV_SIT_RECON_SKIP_KEY);
  }
}

/* An answer about to reach a service: its outcome, and what the answer says. */
void sim_cov_reply(sim_world *w, const sim_req *req, const cs_event *ev) {
  if ((unsigned)ev->outcome >= CS_OUT_COUNT_) return;
  sim_cov_mark(w, (sim_cov_id)((req->to_catalog ? SIM_COV_OUT_CATALOG_OK : SIM_COV_OUT_STORE_OK) + ev->outcome));
  if (req->has_forced && cs_outcome_maybe_applied(ev->outcome))
    sim_cov_mark(w, req->applied ? SIM_COV_SIT_MAYBE_APPLIED_DID : SIM_COV_SIT_MAYBE_APPLIED_DID_NOT);
  if (req->head_only && ev->outcome == CS_OUT_FORBIDDEN) sim_cov_fault(w, F_STORE_403_HEAD);
  if (req->head_only && ev->outcome == CS_OUT_NOT_FOUND) sim_cov_mark(w, SIM_COV_SIT_RECON_HEAD_GONE);
  bool foreign = !ev->head.is_pack || !cs_uuid_equal(&ev->head.pack_id, &req->ref.pack_id);
  if (req->head_only && ev->outcome == CS_OUT_OK && foreign) sim_cov_mark(w, SIM_COV_SIT_RECON_SKIP_FOREIGN);
  if (req->op == CS_OP_CAT_READ_CLAIMS && ev->outcome == CS_OUT_OK && ev->claims.claim_count > 1)
    sim_cov_mark(w, SIM_COV_SIT_CONTESTED_SEEN);
  if (req->op == CS_OP_STORE_LIST && ev->outcome == CS_OUT_OK) reply_list(w, ev);
}

static bool pack_recovered(const sim_world *w, uint32_t pack) {
  return pack < SIM_PACKS_MAX && (w->cov.recovered[pack / 8] >> (pack % 8) & 1u) != 0;
}

/* The service's set-aside reasons (src/core/service_cycle.c), as its QUARANTINE names them. */
static void quarantine_reason(sim_world *w, const char *reason) {
  static const struct { const char *text; sim_cov_id mark; } reasons[] = {
      {"too large for any index batch", SIM_COV_SIT_SET_ASIDE_BATCH_BYTES},
      {"catalog refused it as too large", SIM_COV_SIT_SET_ASIDE_CATALOG_TOO_LARGE},
      {"catalog refused its content", SIM_COV_SIT_SET_ASIDE_INVALID},
      {"object in store keeps other bytes", SIM_COV_SIT_SET_ASIDE_OTHER_BYTES},
      {"store refused the pack", SIM_COV_SIT_SET_ASIDE_STORE_REFUSED},
      {"rejected by the lease holder", SIM_COV_SIT_SET_ASIDE_BY_HOLDER},
  };
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
    if (reason == NULL || strcmp(reason, reasons[i].text) != 0) continue;
    sim_cov_mark(w, reasons[i].mark);
    return;
  }
  sim_cov_mark(w, SIM_COV_SIT_SET_ASIDE_OTHER);
}

void sim_cov_action(sim_world *w, const sim_proc *p, const cs_action *act) {
  if (act->op > CS_OP_NONE && act->op < CS_OP_COUNT_) sim_cov_mark(w, (sim_cov_id)(SIM_COV_OP_STORE_PUT + act->op - 1));
  if (act->op == CS_OP_SPOOL_REMOVE && p->kind == PROC_UPLOADER) sim_cov_mark(w, SIM_COV_SIT_UPLOADER_HANDOFF);
  if (act->op != CS_OP_SPOOL_QUARANTINE) return;
  quarantine_reason(w, act->reason);
  if (act->pack != NULL && pack_recovered(w, sim_truth_of(w, &act->pack->pack_id)))
    sim_cov_mark(w, SIM_COV_SIT_QUARANTINE_RECOVERED);
}

/* A flush answer, before the world forgets its call (rec may be NULL for one never asked). */
void sim_cov_flush_done(sim_world *w, const sim_proc *p, const sim_flush_rec *rec, const cs_flush_result *res) {
  if (res->drained) sim_cov_mark(w, SIM_COV_SIT_FLUSH_DRAINED);
  else if (res->err == CS_E_FULL) sim_cov_mark(w, SIM_COV_SIT_FLUSH_FULL);
  else if (res->err == CS_E_CLOSED) sim_cov_mark(w, SIM_COV_SIT_FLUSH_CLOSED);
  else sim_cov_mark(w, SIM_COV_SIT_FLUSH_NOT_DRAINED);
  if (res->rejected_named > 0) sim_cov_mark(w, SIM_COV_SIT_FLUSH_NAMED_REJECTED);
  if (res->rejected_count > res->rejected_named) sim_cov_mark(w, SIM_COV_SIT_FLUSH_REJECTED_UNNAMED);
  /* Past its deadline and a request timeout: allowed only because the process was paused meanwhile. */
  if (rec != NULL && sim_local_now(w, p) > rec->deadline_local_ns + p->svc_cfg.request_timeout_ns)
    sim_cov_mark(w, SIM_COV_SIT_FLUSH_LATE_PAUSED);
}

void sim_cov_sink_action(sim_world *w, const cs_sink_action *act) {
  if (act->op == CS_SINK_SEAL && act->reason >= CS_SEAL_RECORDS && act->reason <= CS_SEAL_CLOSE)
    sim_cov_mark(w, (sim_cov_id)(SIM_COV_SEAL_RECORDS + act->reason - 1));
  if (act->op == CS_SINK_FLUSHED) sim_cov_mark(w, SIM_COV_SINK_FLUSHED);
  if (act->op == CS_SINK_CLOSED) sim_cov_mark(w, SIM_COV_SINK_CLOSED_REPORT);
  if (act->op != CS_SINK_SEAL && act->err != CS_E_OK) sim_cov_mark(w, SIM_COV_SIT_SEAL_ERROR_REPORTED);
}

void sim_cov_engine_action(sim_world *w, const cs_engine_action *act) {
  if (act->step > CS_STEP_NONE && act->step < CS_STEP_COUNT_)
    sim_cov_mark(w, (sim_cov_id)(SIM_COV_STEP_START_SERVICE + act->step - 1));
  if (act->step == CS_STEP_REPORT && act->opkind >= CS_ENGINE_OP_OPEN && act->opkind <= CS_ENGINE_OP_REPLACE)
    sim_cov_mark(w, (sim_cov_id)(SIM_COV_REPORT_OPEN_OK + 2 * (act->opkind - 1) + (act->err != CS_E_OK)));
  if (act->step == CS_STEP_REPORT && act->opkind == CS_ENGINE_OP_REPLACE) sim_cov_fault(w, F_REPLACE);
}

/* The sink's answer to a captured record. */
void sim_cov_admit(sim_world *w, const sim_proc *p, int rc) {
  bool block = p->sink_cfg.full_policy == CS_FULL_BLOCK;
  if (rc == CS_E_WOULD_BLOCK) sim_cov_mark(w, SIM_COV_SIT_DISK_FULL_BLOCK);
  if (rc == CS_E_SPOOL_FULL) sim_cov_mark(w, block ? SIM_COV_SIT_DISK_FULL_BLOCK_GAVE_UP : SIM_COV_SIT_DISK_FULL_REFUSE);
  if (rc == CS_E_FULL) sim_cov_mark(w, SIM_COV_SIT_ADMIT_SEALS_BUSY);
}

/* A pack became durable; sink_seq 0: its sink was replaced while it sealed; service_rc: SEALED's answer. */
void sim_cov_sealed(sim_world *w, uint32_t pack, uint64_t sink_seq, int service_rc) {
  if (w->packs[pack].poison_large) sim_cov_fault(w, F_POISON_LARGE);
  if (w->packs[pack].poison_invalid) sim_cov_fault(w, F_POISON_INVALID);
  if (sink_seq == 0) sim_cov_mark(w, SIM_COV_SIT_SEAL_OUTLIVED_SINK);
  if (service_rc == CS_E_CLOSED) sim_cov_mark(w, SIM_COV_SIT_SEAL_OUTLIVED_SERVICE);
}

/* Crashes of the safety phase are the fault; liveness stops rivals by crashing them. */
void sim_cov_crash(sim_world *w) {
  if (!w->liveness) sim_cov_fault(w, F_CRASHES);
}

void sim_cov_service_start(sim_world *w, const sim_proc *p) {
  if (p->svc == NULL) return;
  sim_cov_observe(w, p); /* what the old service did since its last step */
  if (!cs_service_stopped(p->svc) && p->svc_started && p->svc_stop_sent) sim_cov_mark(w, SIM_COV_SIT_SERVICE_ABANDONED);
}

void sim_cov_recovered(sim_world *w, uint32_t pack) {
  sim_cov_mark(w, SIM_COV_SIT_RECOVERED_PACK);
  if (pack < SIM_PACKS_MAX) w->cov.recovered[pack / 8] |= (uint8_t)(1u << (pack % 8));
}

void sim_cov_sweep(sim_world *w, const sim_proc *p) {
  for (uint32_t i = 0; i < p->files_end; i++) {
    if (p->files[i].state != FILE_OPEN) continue;
    sim_cov_mark(w, SIM_COV_SIT_OPEN_SWEPT);
    return;
  }
}

/* A claim about to land at the head: a renewal, or the lease moving to another process. */
void sim_cov_claim(sim_world *w, const sim_req *req) {
  if (w->claim_count == 0) return;
  const sim_claim *last = &w->claims[w->claim_count - 1];
  if (cs_uuid_equal(&last->lease_id, &req->lease_id)) {
    sim_cov_mark(w, SIM_COV_SIT_CLAIM_RENEWAL);
    return;
  }
  if (last->released || last->proc == req->proc) return;
  sim_cov_mark(w, SIM_COV_SIT_CLAIM_TAKEOVER);
  if (w->procs[req->proc].kind == PROC_RIVAL) sim_cov_mark(w, SIM_COV_SIT_RIVAL_ACQUIRED);
}

void sim_cov_catalog(sim_world *w) {
  if (w->catalog_clock_ns > 1) sim_cov_mark(w, SIM_COV_FAULT_CATALOG_CLOCK_S);
}

/* ---- states seen after a step ------------------------------------------------------ */

static void observe_lease(sim_world *w, sim_cov_proc *c, cs_lease_state lease) {
  if ((unsigned)lease <= CS_LEASE_RELEASED) sim_cov_mark(w, (sim_cov_id)(SIM_COV_LEASE_NONE + lease));
  if (c->lease == CS_LEASE_HELD && lease == CS_LEASE_NONE) sim_cov_mark(w, SIM_COV_SIT_LEASE_EXPIRED);
  if (c->lease == CS_LEASE_HELD && lease == CS_LEASE_QUARANTINED) sim_cov_mark(w, SIM_COV_SIT_LEASE_LOST_UNKNOWN);
  if (c->lease == CS_LEASE_HELD && lease == CS_LEASE_BUSY) sim_cov_mark(w, SIM_COV_SIT_LEASE_RENEW_LOST);
  if (c->lease == CS_LEASE_CLAIMING && lease == CS_LEASE_QUARANTINED) sim_cov_mark(w, SIM_COV_SIT_LEASE_CLAIM_UNKNOWN);
  if (c->lease == CS_LEASE_CLAIMING && lease == CS_LEASE_BUSY) sim_cov_mark(w, SIM_COV_SIT_LEASE_CLAIM_LOST);
  c->lease = (int)lease;
}

/* A counter of the service moved since the last step: the situation it counts happened. */
static void observe_delta(sim_world *w, uint64_t *seen, uint64_t now, sim_cov_id mark) {
  if (now > *seen) sim_cov_mark(w, mark);
  *seen = now;
}

static uint32_t store_inflight(const cs_service *svc) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < svc->request_max; i++) {
    n += svc->requests[i].id != 0 && sim_op_is_store(svc->requests[i].op);
  }
  return n;
}

static void observe_bounds(sim_world *w, const cs_service *svc) {
  const cs_service_config *cfg = &svc->cfg;
  cs_service_usage u;
  cs_service_usage_get(svc, &u);
  if (svc->own_used >= cfg->spool_packs_max) sim_cov_mark(w, SIM_COV_BOUND_SPOOL_TABLE);
  if (svc->adopted_used >= cfg->cycle_packs_max) sim_cov_mark(w, SIM_COV_BOUND_ADOPTED);
  if (u.owed_used >= u.owed_max) sim_cov_mark(w, SIM_COV_BOUND_OWED);
  if (svc->work_count >= cfg->cycle_packs_max) sim_cov_mark(w, SIM_COV_BOUND_CYCLE_WORK);
  if (store_inflight(svc) >= cfg->store_inflight_max) sim_cov_mark(w, SIM_COV_BOUND_STORE_INFLIGHT);
  if (u.flush_used >= u.flush_max) sim_cov_mark(w, SIM_COV_BOUND_FLUSHES);
  if (svc->rejected_len >= cfg->rejected_max) sim_cov_mark(w, SIM_COV_BOUND_REJECTED);
}

static bool backoff_capped(const cs_service *svc) {
  uint32_t shift = svc->failures > 40 ? 40 : svc->failures;
  uint64_t base = svc->cfg.backoff_base_ns;
  return shift > 0 && (base << shift >> shift != base || base << shift >= svc->cfg.backoff_cap_ns);
}

static void observe_service(sim_world *w, const sim_proc *p) {
  const cs_service *svc = p->svc;
  sim_cov_proc *c = &w->cov.procs[p->index];
  if (c->svc_gen != p->svc_gen) *c = (sim_cov_proc){.svc_gen = p->svc_gen, .lease = CS_LEASE_NONE};
  if (svc->cfg.role == CS_ROLE_PUBLISHER) observe_lease(w, c, svc->lease);
  if ((unsigned)svc->phase <= PHASE_STANDBY) sim_cov_mark(w, (sim_cov_id)(SIM_COV_PHASE_IDLE + svc->phase));
  for (uint32_t s = STAGE_SPOOLED; s < STAGE_COUNT_; s++)
    if (svc->stage_count[s] > 0) sim_cov_mark(w, (sim_cov_id)(SIM_COV_STAGE_SPOOLED + s - STAGE_SPOOLED));
  if (svc->backoff_until_ns > svc->last_now_ns) sim_cov_mark(w, SIM_COV_SVC_BACKOFF);
  if (svc->backoff_until_ns > svc->last_now_ns && backoff_capped(svc)) sim_cov_mark(w, SIM_COV_SVC_BACKOFF_CAPPED);
  if (svc->stopping && !svc->stopped) sim_cov_mark(w, SIM_COV_SVC_STOPPING);
  if (svc->stopped) sim_cov_mark(w, SIM_COV_SVC_STOPPED);
  observe_bounds(w, svc);
  observe_delta(w, &c->batch_splits, svc->stats.batch_splits, SIM_COV_SIT_BATCH_SPLIT);
  observe_delta(w, &c->recon_passes, svc->stats.reconcile_passes, SIM_COV_SIT_RECON_PASS);
  observe_delta(w, &c->recon_adopted, svc->stats.reconcile_adopted, SIM_COV_SIT_RECON_ADOPT);
  observe_delta(w, &c->recon_head_errors, svc->stats.reconcile_head_errors, SIM_COV_SIT_RECON_HEAD_ERROR);
  observe_delta(w, &c->recon_list_errors, svc->stats.reconcile_list_errors, SIM_COV_SIT_RECON_LIST_ERROR);
  observe_delta(w, &c->renewals, svc->stats.lease_renewals, SIM_COV_SIT_LEASE_RENEWED);
}

static void observe_sink(sim_world *w, const cs_sink *sink) {
  if (sink->state >= SINK_STATE_OPEN && sink->state <= SINK_STATE_CLOSED)
    sim_cov_mark(w, (sim_cov_id)(SIM_COV_SINK_OPEN + sink->state - SINK_STATE_OPEN));
  if (sink->seal_deferred != 0) sim_cov_mark(w, SIM_COV_SINK_SEAL_DEFERRED);
  if (sink->seals_count >= CS_SINK_SEALS_MAX) sim_cov_mark(w, SIM_COV_SINK_SEALS_FULL);
}

/* After a pump of p: the states its cores are in, and what kind of process it is. */
void sim_cov_observe(sim_world *w, const sim_proc *p) {
  if (!w->cov.on) return;
  if (p->kind == PROC_RIVAL) sim_cov_fault(w, F_RIVALS);
  if (p->kind == PROC_UPLOADER) sim_cov_fault(w, F_UPLOADERS);
  if (p->skew_ns != 0 || p->drift_ppm != 0) sim_cov_fault(w, F_CLOCK_SKEW);
  if ((unsigned)p->engine.state <= CS_ENGINE_CLOSED) sim_cov_mark(w, (sim_cov_id)(SIM_COV_ENGINE_IDLE + p->engine.state));
  if (p->sink_open) observe_sink(w, &p->sink);
  if (p->svc != NULL) observe_service(w, p);
}

/* The service's set-aside count (as the snapshot gives it, without its scan of the table) and the seq of its newest
   rejected entry: the world reads both before and after every call to a service. */
sim_svc_marks sim_svc_marks_of(const cs_service *svc) {
  return (sim_svc_marks){.set_aside = svc->stats.set_aside, .rejected_seq = svc->rejected_seq};
}

/* The pack id of the rejected entry with the newest seq; false when no entry holds it. */
bool sim_svc_rejected_newest(const cs_service *svc, cs_uuid *id) {
  for (uint32_t k = 0; k < svc->rejected_len && svc->rejected_seq != 0; k++) {
    if (svc->rejected[k].seq != svc->rejected_seq) continue;
    *id = svc->rejected[k].pack_id;
    return true;
  }
  return false;
}

/* Whether the service's request table holds id (in flight: network, spool or lease work alike). */
bool sim_svc_request_live(const cs_service *svc, uint64_t id) {
  for (uint32_t i = 0; i < svc->request_max; i++)
    if (svc->requests[i].id == id) return true;
  return false;
}

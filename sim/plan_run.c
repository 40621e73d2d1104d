/*
 * Running a fault plan: its settings override the world's config, its steps
 * become events, and its expectations are checked against named counters at
 * the end of the safety phase.
 */
#include "world.h"

#include <inttypes.h>
#include <string.h>

typedef struct setting_def {
  const char *name;
  size_t offset; /* into sim_world */
  uint8_t width; /* 8 or 4 bytes, or 1: a bool (0 or 1) */
} setting_def;

#define WBOOL(name, field) {name, offsetof(sim_world, field), 1}

#define W64(field) {#field, offsetof(sim_world, field), 8}
#define SVC64(name, field) {name, offsetof(sim_world, base_svc) + offsetof(cs_service_config, field), 8}
#define SVC32(name, field) {name, offsetof(sim_world, base_svc) + offsetof(cs_service_config, field), 4}
#define SVCBOOL(name, field) {name, offsetof(sim_world, base_svc) + offsetof(cs_service_config, field), 1}
#define SINK64(name, field) {name, offsetof(sim_world, base_sink) + offsetof(cs_sink_config, field), 8}
#define SINK32(name, field) {name, offsetof(sim_world, base_sink) + offsetof(cs_sink_config, field), 4}
#define ENG64(name, field) {name, offsetof(sim_world, base_engine) + offsetof(cs_engine_config, field), 8}

static const setting_def settings[] = {
    SVC64("lease_ttl", lease_ttl_ns),
    SVC64("lease_guard", lease_guard_ns),
    SVC64("backoff_base", backoff_base_ns),
    SVC64("backoff_cap", backoff_cap_ns),
    SVC64("batch_bytes", index_batch_bytes_max),
    SVC32("cycle_packs", cycle_packs_max),
    SVC32("spool_packs", spool_packs_max),
    SVC32("store_inflight", store_inflight_max),
    SVC32("attempts", index_attempts_max),
    SVC64("reconcile_interval", reconcile_interval_ns),
    SVCBOOL("reconcile_at_start", reconcile_at_start),
    SVC32("list_page", list_page_max),
    SVC32("flush_max", flush_max),
    SVC32("rejected_max", rejected_max),
    SVC64("request_timeout", request_timeout_ns),
    SINK32("pack_records", pack_records_max),
    SINK64("linger", linger_ns),
    SINK32("sink_spool_packs", spool_packs_max),
    SINK64("pack_bytes", pack_bytes_max),
    SINK64("spool_bytes", spool_bytes_max),
    SINK64("block_max", block_max_ns),
    ENG64("start_timeout", start_timeout_ns),
    ENG64("stop_reserve", stop_reserve_ns),
    {"catalog_insert_bytes", offsetof(sim_world, catalog_insert_bytes_max), 8},
    {"capture_interval", offsetof(sim_world, capture_interval_ns), 8},
    {"uploaders", offsetof(sim_world, uploaders), 4},
    {"rivals", offsetof(sim_world, rivals), 4},
    {"restart_delay", offsetof(sim_world, restart_delay_ns), 8},
    {"fence_margin", offsetof(sim_world, fence_margin_ns), 8},
    {"apply_delay", offsetof(sim_world, apply_delay_max_ns), 8},
    {"catalog_clock", offsetof(sim_world, catalog_clock_ns), 8},
    WBOOL("workload", workload),
    WBOOL("list_path_order", store_list_path_order),  /* the store quirk; uploaders are then refused */
    WBOOL("claims_concurrent", catalog_claims_concurrent), /* claims can contest a term */
    {"arrivals", offsetof(sim_world, arrival_permille), 4},     /* per thousand seals: reported as arrivals */
    {"rearrivals", offsetof(sim_world, rearrival_permille), 4}, /* per thousand removals: linked in again */
    /* A catalog of replicas (sim/replicas.c): 2 or 3, and its draws per thousand writes and reads. */
    {"replicas", offsetof(sim_world, replicas), 4},
    {"quorum_timeouts", offsetof(sim_world, quorum_timeout_permille), 4},
    {"replicas_behind", offsetof(sim_world, replica_behind_permille), 4},
    {"replica_lag_max", offsetof(sim_world, replica_lag_max_ns), 8},
};

int sim_plan_apply_settings(sim_world *w, const cs_plan *plan) {
  for (uint32_t i = 0; i < plan->setting_count; i++) {
    const cs_plan_setting *set = &plan->settings[i];
    const setting_def *def = NULL;
    for (size_t k = 0; k < sizeof settings / sizeof settings[0]; k++)
      if (strcmp(settings[k].name, set->name) == 0) def = &settings[k];
    if (def == NULL) {
      snprintf(w->result->reason, sizeof w->result->reason, "plan line %u: unknown setting '%s'", set->line, set->name);
      return CS_E_CONFIG;
    }
    uint8_t *at = (uint8_t *)w + def->offset;
    if (def->width == 8) {
      memcpy(at, &set->value, 8);
    } else if (def->width == 1) {
      bool v = set->value != 0;
      memcpy(at, &v, sizeof v);
    } else {
      if (set->value > UINT32_MAX) {
        snprintf(w->result->reason, sizeof w->result->reason, "plan line %u: '%s' is too large", set->line, set->name);
        return CS_E_CONFIG;
      }
      uint32_t v = (uint32_t)set->value;
      memcpy(at, &v, 4);
    }
  }
  return CS_E_OK;
}

static sim_proc *rival(sim_world *w) {
  for (uint32_t i = 0; i < w->proc_count; i++)
    if (w->procs[i].kind == PROC_RIVAL) return &w->procs[i];
  sim_bail(w, SIM_EXIT_USAGE, "the plan starts a rival but sets no 'rivals'");
}

static void plan_fault(sim_world *w, const cs_plan_step *step) {
  sim_fault_window win;
  memset(&win, 0, sizeof win);
  win.catalog = step->verb == CS_PLAN_CATALOG;
  win.mode = step->mode;
  win.until_ns = step->for_ns > UINT64_MAX - w->now_ns ? UINT64_MAX : w->now_ns + step->for_ns;
  if (step->verb == CS_PLAN_STORE_STATUS) {
    win.status = step->status;
    win.method = step->method;
    snprintf(win.prefix, sizeof win.prefix, "%s", step->text);
  }
  sim_window_add(w, &win);
}

static void plan_object(sim_world *w, const cs_plan_step *step) {
  cs_pack_ref ref;
  memset(&ref, 0, sizeof ref);
  char key[CS_KEY_MAX];
  int n = snprintf(key, sizeof key, "%s%s", w->prefix, step->text);
  cs_pack_ref_set_key(&ref, key, (size_t)n);
  ref.size_bytes = 100;
  sim_store_put_object(w, &ref, !step->foreign, SIM_NONE);
}

void sim_plan_step(sim_world *w, const cs_plan_step *step) {
  sim_proc *p = &w->procs[0];
  switch (step->verb) {
  case CS_PLAN_CATALOG:
  case CS_PLAN_STORE:
  case CS_PLAN_STORE_STATUS: plan_fault(w, step); return;
  case CS_PLAN_STORE_OBJECT: plan_object(w, step); return;
  case CS_PLAN_SEAL: sim_seal_direct(w, p, step); return;
  case CS_PLAN_FLUSH: sim_flush_call(w, p, step->deadline_ns, step->flush_expect); return;
  case CS_PLAN_RIVAL: {
    sim_proc *r = rival(w);
    if (step->start && !r->alive) {
      w->procs[r->index].alive = false;
      sim_schedule(w, w->now_ns, EV_RESTART, r->index, 0, 0);
    }
    if (!step->start) sim_engine_start(w, r, CS_ENGINE_OP_CLOSE, 5 * CS_SEC_NS);
    return;
  }
  case CS_PLAN_CRASH:
    if (step->crash_point == CS_PLAN_CRASH_NOW) {
      sim_proc_crash(w, p);
      return;
    }
    p->crash_point = (int)step->crash_point;
    if (p->svc != NULL) {
      cs_snapshot snap;
      cs_service_snapshot(p->svc, 0, &snap);
      p->crash_uploaded_base = snap.uploaded;
      p->crash_indexed_base = snap.indexed;
    }
    return;
  case CS_PLAN_PAUSE: {
    p->paused_until_ns = step->for_ns > UINT64_MAX / 2 ? UINT64_MAX / 2 : w->now_ns + step->for_ns;
    w->counters.pauses++;
    sim_schedule(w, p->paused_until_ns, EV_RESUME, 0, 0, 0);
    return;
  }
  case CS_PLAN_CLOSE: sim_engine_start(w, p, CS_ENGINE_OP_CLOSE, step->deadline_ns); return;
  case CS_PLAN_REPLACE: sim_engine_start(w, p, CS_ENGINE_OP_REPLACE, step->deadline_ns); return;
  case CS_PLAN_HEAL:
    for (uint32_t i = 0; i < SIM_WINDOWS_MAX; i++) w->windows[i].until_ns = w->now_ns;
    w->slow_disk_until_ns = w->now_ns;
    return;
  case CS_PLAN_DISK:
    w->slow_disk_until_ns = step->for_ns > UINT64_MAX - w->now_ns ? UINT64_MAX : w->now_ns + step->for_ns;
    return;
  case CS_PLAN_REOPEN: sim_reopen_request(w, p, 0); return;
  }
  sim_bail(w, SIM_EXIT_CRASH, "plan verb %d", (int)step->verb);
}

static uint64_t sum_snapshot(const sim_world *w, size_t offset, size_t fold_offset) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < w->proc_count; i++) {
    const sim_proc *p = &w->procs[i];
    uint64_t v;
    memcpy(&v, (const uint8_t *)p + fold_offset, 8);
    total += v;
    if (p->svc == NULL) continue;
    cs_snapshot snap;
    cs_service_snapshot(p->svc, 0, &snap);
    memcpy(&v, (const uint8_t *)&snap + offset, 8);
    total += v;
  }
  return total;
}

static uint64_t max_puts(const sim_world *w) {
  uint64_t m = 0;
  for (uint32_t i = 0; i < w->pack_count; i++)
    if (w->packs[i].puts > m) m = w->packs[i].puts;
  return m;
}

static uint64_t lost_records(const sim_world *w) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    if (sp->durable && !sim_pack_excused(w, i) && !sim_catalog_committed(w, i))
      n += sp->ref.record_count;
  }
  return n;
}

/* Packs set aside (quarantined) because their owner saw other bytes under their key. */
static uint64_t set_aside_conflicts(const sim_world *w) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < w->proc_count; i++)
    for (uint32_t f = 0; f < w->procs[i].files_end; f++) {
      const sim_file *file = &w->procs[i].files[f];
      n += file->state == FILE_QUARANTINED && w->packs[file->pack].conflict;
    }
  return n;
}

static bool error_names_head(const sim_world *w) {
  const sim_proc *p = &w->procs[0];
  const char *text = p->last_error;
  cs_snapshot snap;
  if (p->svc != NULL) {
    cs_service_snapshot(p->svc, 0, &snap);
    if (snap.last_error[0] != '\0') text = snap.last_error;
  }
  return strstr(text, "reconcile HEAD") != NULL && strstr(text, "forbidden") != NULL;
}

#define SNAP(name, field, fold) \
  if (strcmp(n, name) == 0) return *out = sum_snapshot(w, offsetof(cs_snapshot, field), offsetof(sim_proc, fold)), true

bool sim_plan_counter(const sim_world *w, const char *n, uint64_t *out) {
  if (sim_cov_counter(w, n, out)) return true; /* cov_NAME: the run's count of coverage mark NAME */
  SNAP("cycles", cycles, cycles_total);
  SNAP("cycles_failed", cycles_failed, cycles_failed_total);
  SNAP("indexed", indexed, indexed_total);
  SNAP("set_aside", set_aside, set_aside_total);
  SNAP("batch_splits", batch_splits, splits_total);
  SNAP("upload_mismatches", upload_mismatches, mismatches_total);
  SNAP("reconcile_skipped", reconcile_skipped, skipped_total);
  SNAP("reconcile_head_errors", reconcile_head_errors, head_errors_total);
  const sim_counters *c = &w->counters;
  struct { const char *name; uint64_t value; } plain[] = {
      {"admitted_records", c->admitted_records}, {"durable_records", c->durable_records},
      {"refused_records", c->refused_records},   {"flush_drained", c->flush_drained},
      {"workload_budget_stops", c->workload_budget_stops},
      {"flush_not_drained", c->flush_not_drained}, {"flush_late", c->flush_late},
      {"flush_expect_failed", c->flush_expect_failed}, {"rejected_reported", c->rejected_reported},
      {"rival_acquired", c->rival_acquired},     {"holder_changes", c->holder_changes},
      {"fenced_refused", c->fenced_refused},     {"index_foreign", c->index_foreign},
      {"orphan_index_writes", c->orphan_index_writes},
      {"crashes", c->crashes},                   {"replace_done", c->replace_done},
      {"close_done", c->close_done},             {"engine_failures", c->engine_failures},
      {"open_failed", c->open_failed},
      {"visible_records", sim_visible_records(w)}, {"lost_records", lost_records(w)},
      {"invisible_admitted", c->admitted_records - sim_visible_records(w)},
      {"puts_max_per_pack", max_puts(w)},        {"packs", w->pack_count},
      {"uploaders", w->uploaders},             {"contested_terms", c->contested_terms},
      {"watermark", w->watermark},               {"head_error_named", error_names_head(w)},
      {"store_damaged", c->store_damaged},       {"slow_seal_steps", c->slow_seal_steps},
      {"reopen_done", c->reopen_done},           {"sealed_refused", c->sealed_refused},
      {"set_aside_conflicts", set_aside_conflicts(w)}, {"store_lists", c->store_lists},
      {"arrivals", c->arrivals},                 {"rearrivals", c->rearrivals},
      {"index_of_committed", c->index_of_committed},
  };
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
    if (strcmp(n, plain[i].name) != 0) continue;
    *out = plain[i].value;
    return true;
  }
  return false;
}

void sim_plan_check_expects(sim_world *w) {
  const cs_plan *plan = w->opts->plan;
  for (uint32_t i = 0; i < plan->expect_count; i++) {
    const cs_plan_expect *ex = &plan->expects[i];
    uint64_t actual;
    if (!sim_plan_counter(w, ex->name, &actual))
      sim_bail(w, SIM_EXIT_USAGE, "plan line %u: unknown counter '%s'", ex->line, ex->name);
    if (!cs_plan_expect_holds(ex, actual))
      sim_bail(w, SIM_EXIT_PLAN, "plan line %u: expected %s %s %" PRIu64 ", got %" PRIu64, ex->line, ex->name,
               cs_plan_op_name(ex->op), ex->value, actual);
  }
}

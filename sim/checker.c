/*
 * The checker: the invariants of DESIGN.md section 9, checked as the world
 * runs (at the moment a violation would happen) and at the end of liveness.
 * A violation bails out with SIM_EXIT_SAFETY and a sentence naming it.
 */
#include "world.h"

#include <inttypes.h>
#include <string.h>

static const char *pack_name(const sim_world *w, uint32_t pack, char out[CS_UUID_TEXT_LEN + 1]) {
  cs_uuid_format(&w->packs[pack].ref.pack_id, out);
  return out;
}

/* The store holds the pack's bytes (its checksum, not only its size), or lost them where no core could tell. */
static bool in_store(const sim_world *w, uint32_t pack) { return sim_store_holds(w, pack); }

/* Spool removal only after hand-off (DESIGN.md 6.1). */
void sim_check_removal(sim_world *w, sim_proc *p, uint32_t pack) {
  char id[CS_UUID_TEXT_LEN + 1];
  if (p->kind == PROC_UPLOADER) {
    if (!in_store(w, pack))
      sim_bail(w, SIM_EXIT_SAFETY, "uploader p%u removed pack %s before a verified upload", p->index,
               pack_name(w, pack, id));
    return;
  }
  if (!sim_catalog_committed(w, pack))
    sim_bail(w, SIM_EXIT_SAFETY, "publisher p%u removed pack %s from its spool before the catalog held it",
             p->index, pack_name(w, pack, id));
  if (!in_store(w, pack))
    sim_bail(w, SIM_EXIT_SAFETY, "publisher p%u removed pack %s from its spool while the store holds other bytes "
             "(or none) under its key", p->index, pack_name(w, pack, id));
}

static bool handed_off(const sim_world *w, const sim_proc *p, uint32_t pack) {
  return p->kind == PROC_UPLOADER ? in_store(w, pack) || sim_catalog_committed(w, pack)
                                  : sim_catalog_committed(w, pack);
}

static void flush_honest(sim_world *w, sim_proc *p, const sim_flush_rec *rec, const cs_flush_result *res) {
  for (uint32_t i = 0; i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    if (sp->proc != p->index || !sp->durable || sp->sealed_order == 0 || sp->sealed_order > rec->boundary_order)
      continue;
    if (sim_pack_may_set_aside(w, i)) continue;
    if (handed_off(w, p, i)) continue;
    char id[CS_UUID_TEXT_LEN + 1];
    sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u said drained but pack %s sealed before it is not %s",
             res->flush_id, p->index, pack_name(w, i, id), p->kind == PROC_UPLOADER ? "uploaded" : "visible");
  }
}

/* Each service names a set-aside pack in exactly one flush answer. */
static void flush_rejected(sim_world *w, const sim_proc *p, const cs_flush_result *res) {
  for (uint32_t k = 0; k < res->rejected_named && k < CS_FLUSH_REJECTED_MAX; k++) {
    uint32_t pack = sim_truth_of(w, &res->rejected[k]);
    w->counters.rejected_reported++;
    if (pack == SIM_NONE) continue;
    sim_pack *sp = &w->packs[pack];
    if (!cs_uuid_equal(&sp->reporter, &p->lease_id)) {
      sp->reporter = p->lease_id;
      sp->reported = 0;
    }
    if (++sp->reported > 1) {
      char id[CS_UUID_TEXT_LEN + 1];
      sim_bail(w, SIM_EXIT_SAFETY, "set-aside pack %s reported by more than one flush", pack_name(w, pack, id));
    }
  }
}

/* True when the proc was paused at some point after local time since_local. */
static bool true_local_after(const sim_world *w, const sim_proc *p, uint64_t since_local) {
  (void)w;
  return p->last_pause_end_local_ns >= since_local;
}

/* Flush is honest and on time (DESIGN.md 6.6); a paused process is frozen, not late. */
void sim_check_flush_done(sim_world *w, sim_proc *p, const cs_flush_result *res) {
  const sim_flush_rec *rec = NULL;
  for (uint32_t i = 0; i < SIM_FLUSHES_MAX; i++)
    if (p->flushes[i].used && p->flushes[i].id == res->flush_id) rec = &p->flushes[i];
  if (rec == NULL) sim_bail(w, SIM_EXIT_SAFETY, "p%u answered flush %" PRIu64 " it was never asked", p->index, res->flush_id);
  uint64_t local = sim_local_now(w, p);
  uint64_t limit = rec->deadline_local_ns + p->svc_cfg.request_timeout_ns;
  bool paused = p->last_pause_end_ns != 0 && true_local_after(w, p, rec->called_local_ns);
  if (local > limit && !paused) {
    w->counters.flush_late++;
    sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u answered %.3f s after its deadline", res->flush_id,
             p->index, (double)(local - rec->deadline_local_ns) / 1e9);
  }
  if (!res->drained && res->err == CS_E_TIMEOUT && local < rec->deadline_local_ns)
    sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u gave up %.3f s before its deadline", res->flush_id, p->index,
             (double)(rec->deadline_local_ns - local) / 1e9);
  if (res->drained) {
    w->counters.flush_drained++;
    flush_honest(w, p, rec, res);
  } else {
    w->counters.flush_not_drained++;
  }
  flush_rejected(w, p, res);
  if ((rec->expect == CS_PLAN_EXPECT_DRAINED && !res->drained) ||
      (rec->expect == CS_PLAN_EXPECT_NOT_DRAINED && res->drained))
    w->counters.flush_expect_failed++;
}

/* One effective publisher per term; no stale holder's write takes effect. */
void sim_check_effective_write(sim_world *w, const sim_req *req) {
  uint64_t term;
  uint32_t holder = sim_catalog_holder(w, sim_catalog_now(w), &term);
  /*
   * A write whose fence passed before its holder's release lands within the
   * margin, while the tombstone still keeps everyone else out: it counts at
   * the term the holder released.
   */
  const sim_claim *last = w->claim_count > 0 ? &w->claims[w->claim_count - 1] : NULL;
  if (holder == SIM_NONE && last != NULL && last->released && cs_uuid_equal(&last->lease_id, &req->lease_id) &&
      last->expires_ns > sim_catalog_now(w) && last->term > 0) {
    holder = req->proc;
    term = last->term - 1;
  }
  if (holder != req->proc)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's %s took effect while p%d holds term %" PRIu64, req->proc,
             cs_op_name(req->op), holder == SIM_NONE ? -1 : (int)holder, term);
  if (term < w->last_holder_term)
    sim_bail(w, SIM_EXIT_SAFETY, "a write at term %" PRIu64 " took effect after one at term %" PRIu64, term,
             w->last_holder_term);
  if (term == w->last_holder_term && w->last_holder_proc != SIM_NONE && w->last_holder_proc != req->proc)
    sim_bail(w, SIM_EXIT_SAFETY, "two publishers (p%u, p%u) wrote at term %" PRIu64, w->last_holder_proc,
             req->proc, term);
  w->last_holder_term = term;
  w->last_holder_proc = req->proc;
}

/* Watermarks only move forward: a publish below the watermark would show old rows late. */
void sim_check_publish(sim_world *w, const sim_req *req) {
  /* A publish sent before the one that set the watermark may land late (its
     outcome was unknown, its rows were re-indexed at a newer version): harmless.
     One sent after it must be above it. */
  if (req->version <= w->watermark && req->sent_ns > w->watermark_sent_ns)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u published version %" PRIu64 " at or below the watermark %" PRIu64,
             req->proc, req->version, w->watermark);
}

/* With the catalog healthy, nobody takes a lease whose holder is alive and running. */
void sim_check_claim(sim_world *w, uint32_t proc, uint64_t term) {
  (void)term;
  if (w->claim_count == 0) return;
  const sim_claim *head = &w->claims[w->claim_count - 1];
  if (cs_uuid_equal(&head->lease_id, &w->procs[proc].lease_id)) {
    /* A renewal: due every TTL/3 on its own timer, whatever the cycle does. */
    const sim_proc *p = &w->procs[proc];
    uint64_t late_ns = w->base_svc.lease_ttl_ns / 2;
    bool quiet = w->now_ns >= w->catalog_unhealthy_until_ns &&
                 w->now_ns >= p->last_pause_end_ns + w->base_svc.lease_ttl_ns;
    bool live = head->expires_ns > sim_catalog_now(w); /* else a re-acquisition, not a renewal */
    if (live && w->now_ns > head->acquired_ns + late_ns && quiet)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u renewed its lease %.1f s after its last claim (due every TTL/3) with the catalog healthy",
               proc, (double)(w->now_ns - head->acquired_ns) / 1e9);
    return;
  }
  w->counters.holder_changes++;
  if (w->procs[proc].kind == PROC_RIVAL) w->counters.rival_acquired++;
  if (head->released) return;
  /* A contested head term (two claims) had no holder: its claims expiring is no theft. */
  if (w->claim_count > 1 && w->claims[w->claim_count - 2].term == head->term) return;
  const sim_proc *old = &w->procs[head->proc];
  bool live = old->alive && cs_uuid_equal(&old->lease_id, &head->lease_id) && old->paused_until_ns <= w->now_ns &&
              w->now_ns >= old->last_pause_end_ns + w->base_svc.lease_ttl_ns && old->svc_started;
  if (old->svc != NULL && cs_service_stopped(old->svc)) live = false;
  if (live && w->now_ns >= w->catalog_unhealthy_until_ns)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u took the lease from p%u, alive and not paused, with the catalog healthy",
             proc, head->proc);
}

/* Failing requests back off: never more than backoff_answers_max failed answers in a second (100 by default). */
void sim_check_backoff(sim_world *w, sim_proc *p) {
  if (w->now_ns >= p->fail_bucket_start_ns + CS_SEC_NS) {
    p->fail_bucket_start_ns = w->now_ns;
    p->fail_bucket_count = 0;
  }
  if (++p->fail_bucket_count > w->backoff_answers_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u got more than %u failed answers within one second: it does not back off", p->index,
             w->backoff_answers_max);
}

/* Bounded memory: every table within its bound, at most one cycle's uploads owed. */
void sim_check_step(sim_world *w) {
  for (uint32_t i = 0; i < w->proc_count; i++) {
    const sim_proc *p = &w->procs[i];
    if (!p->alive || p->svc == NULL) continue;
    cs_service_usage u;
    cs_service_usage_get(p->svc, &u);
    if (u.owed_used > u.owed_max)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u owes %u packs to the catalog, more than one cycle (%u)", i, u.owed_used,
               u.owed_max);
    if (u.packs_used > u.packs_max || u.inflight_used > u.inflight_max || u.flush_used > u.flush_max)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u exceeded a service table bound", i);
    if (p->forbidden_heads > 0) {
      cs_snapshot snap;
      cs_service_snapshot(p->svc, 0, &snap);
      if (snap.reconcile_head_errors < p->forbidden_heads)
        sim_bail(w, SIM_EXIT_SAFETY, "p%u got %" PRIu64 " forbidden reconcile HEADs but counts %" PRIu64 " HEAD errors",
                 i, p->forbidden_heads, snap.reconcile_head_errors);
    }
  }
}

uint64_t sim_visible_records(const sim_world *w) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < w->pack_count; i++)
    if (sim_catalog_committed(w, i)) n += w->packs[i].ref.record_count;
  return n;
}

static bool proc_drained(const sim_world *w, const sim_proc *p, char *why, size_t why_size) {
  for (uint32_t f = 0; f < SIM_FILES_MAX; f++) {
    if (p->files[f].state != FILE_READY) continue;
    char id[CS_UUID_TEXT_LEN + 1];
    cs_snapshot snap;
    memset(&snap, 0, sizeof snap);
    if (p->svc != NULL) cs_service_snapshot(p->svc, 0, &snap);
    snprintf(why, why_size, "pack %s still in p%u's spool (lease %s, owed %u, last error: %s)",
             pack_name(w, p->files[f].pack, id), p->index, cs_lease_state_name(snap.lease_state), snap.pending_index,
             snap.last_error);
    return false;
  }
  return true;
}

/* No loss: every durable healthy pack is visible, every spool emptied. */
bool sim_check_drained(sim_world *w, char *why, size_t why_size) {
  for (uint32_t i = 0; i < w->proc_count; i++)
    if (w->procs[i].kind != PROC_RIVAL && !proc_drained(w, &w->procs[i], why, why_size)) return false;
  for (uint32_t i = 0; i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    char id[CS_UUID_TEXT_LEN + 1];
    if (sp->durable && sim_catalog_committed(w, i) && !sim_pack_excused(w, i) && !in_store(w, i))
      sim_bail(w, SIM_EXIT_SAFETY, "pack %s of p%u is visible but the store holds other bytes (or none) under its key",
               pack_name(w, i, id), sp->proc);
    if (!sp->durable || sim_pack_excused(w, i) || sim_catalog_committed(w, i)) continue;
    snprintf(why, why_size, "pack %s of p%u is durable but not visible%s", pack_name(w, i, id), sp->proc,
             sp->removed ? " (and gone from its spool)" : "");
    return false;
  }
  /* No duplicates: a proc's packs are created in capture order, so visible ranges must not overlap. */
  uint64_t next[SIM_PROCS_MAX] = {0};
  for (uint32_t i = 0; i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    if (!sim_catalog_committed(w, i) || sp->ref.record_count == 0) continue;
    if (sp->capture_first < next[sp->proc])
      sim_bail(w, SIM_EXIT_SAFETY, "capture ids from %" PRIu64 " are visible in two packs", sp->capture_first);
    next[sp->proc] = sp->capture_first + sp->ref.record_count;
  }
  return true;
}

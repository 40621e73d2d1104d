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

static void check_ledger(sim_world *w, const sim_proc *p, const cs_snapshot *snap, uint64_t local);

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
    if (!sim_pack_may_set_aside(w, pack)) {
      char id[CS_UUID_TEXT_LEN + 1];
      sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u named healthy pack %s as set aside", res->flush_id,
               p->index, pack_name(w, pack, id));
    }
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
  if (rec->after_stop && (res->err != CS_E_CLOSED || res->drained))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u answered flush %" PRIu64 ", called after its service was told to stop, with %s%s",
             p->index, res->flush_id, cs_strerror(res->err), res->drained ? " (drained)" : "");
  /*
   * Missing packs are own packs in the spool (in the table or outside it)
   * sealed before the call: never more than its files ready by then. A pack
   * sealed after the call is not what this flush waits for (6.6), except
   * that packs waiting outside a full table count from the first one's place
   * (service.c backlog_add): where a backlog existed at the call, a file
   * once in the backlog counts whenever it was sealed.
   */
  uint32_t ready = 0;
  for (uint32_t f = 0; f < p->files_end; f++) {
    const sim_file *file = &p->files[f];
    bool backlog = file->was_backlog && rec->backlog_at_call;
    ready += file->state == FILE_READY && (file->ready_local_ns <= rec->called_local_ns || backlog);
  }
  if (res->missing_packs > ready)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's flush %" PRIu64 " says %u packs are missing; its spool held %u ready at the call",
             p->index, res->flush_id, res->missing_packs, ready);
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
    sim_arrays_flush_drained(w, p, rec);
    /* Drained also means nothing is owed to the catalog, sealed before the call or not. */
    cs_service_usage u;
    cs_service_usage_get(p->svc, &u);
    if (u.owed_used != 0)
      sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u said drained while it owes %u packs to the catalog",
               res->flush_id, p->index, u.owed_used);
  } else {
    w->counters.flush_not_drained++;
  }
  /* service.h: err is CS_E_OK exactly when drained; otherwise TIMEOUT, FULL (no room) or CLOSED (stopping). */
  bool err_known = res->err == CS_E_OK || res->err == CS_E_TIMEOUT || res->err == CS_E_FULL || res->err == CS_E_CLOSED;
  if (!err_known || res->drained != (res->err == CS_E_OK))
    sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u answered %s with err %s", res->flush_id, p->index,
             res->drained ? "drained" : "not drained", cs_strerror(res->err));
  flush_rejected(w, p, res);
  /*
   * It names what it counts while there is room (CS_FLUSH_REJECTED_MAX). A service whose rejected list is still
   * short of rejected_max never evicted an entry nor set a pack aside without one (the list only grows until it
   * is full), so every pack it counts has an entry: it names min(count, CS_FLUSH_REJECTED_MAX) of them.
   */
  cs_snapshot now_snap = {0};
  if (p->svc != NULL) cs_service_snapshot(p->svc, sim_local_now(w, p), &now_snap);
  if (p->svc != NULL && res->err != CS_E_FULL && res->err != CS_E_CLOSED) {
    const cs_snapshot *list = &now_snap;
    uint32_t want = res->rejected_count < CS_FLUSH_REJECTED_MAX ? res->rejected_count : CS_FLUSH_REJECTED_MAX;
    if (res->rejected_named > want || (list->rejected_count < p->svc_cfg.rejected_max && res->rejected_named != want))
      sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u counts %u set-aside packs and names %u (its list holds"
               " %u of %u)", res->flush_id, p->index, res->rejected_count, res->rejected_named, list->rejected_count,
               p->svc_cfg.rejected_max);
  }
  /* An answer that is not drained says what is missing. */
  if (!res->drained && res->err == CS_E_TIMEOUT && res->missing_packs + res->owed_packs == 0)
    sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u was not drained but names nothing missing or owed",
             res->flush_id, p->index);
  /* Every pack set aside before the call is reported by this answer or an earlier one (6.3). */
  p->reported_total += res->rejected_count;
  /* ... and none more than once: never more reported than set aside so far. */
  if (p->svc != NULL && p->reported_total > now_snap.set_aside)
    sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u: its service's answers reported %" PRIu64
             " set-aside packs, more than the %" PRIu64 " it set aside", res->flush_id, p->index, p->reported_total,
             now_snap.set_aside);
  if (res->err != CS_E_CLOSED && p->reported_total < rec->set_aside_at_call)
    sim_bail(w, SIM_EXIT_SAFETY, "flush %" PRIu64 " of p%u: %" PRIu64 " packs were set aside before the call, its"
             " answers reported %" PRIu64, res->flush_id, p->index, rec->set_aside_at_call, p->reported_total);
  if ((rec->expect == CS_PLAN_EXPECT_DRAINED && !res->drained) ||
      (rec->expect == CS_PLAN_EXPECT_NOT_DRAINED && res->drained))
    w->counters.flush_expect_failed++;
}

/*
 * One effective publisher per term (a self-check of the model's fence, judged
 * when the fence is checked): the writer is the sole live claimant of the
 * head term at that instant. The term is recorded for the landing.
 */
void sim_check_fence_passed(sim_world *w, sim_req *req) {
  uint64_t term;
  uint32_t holder = sim_catalog_holder(w, sim_catalog_now(w), &term);
  if (holder != req->proc && holder == SIM_NONE)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's %s passed its fence while nobody holds term %" PRIu64
             " alone (contested, expired or released)", req->proc, cs_op_name(req->op), term);
  if (holder != req->proc)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's %s passed its fence while p%u holds term %" PRIu64, req->proc,
             cs_op_name(req->op), holder, term);
  req->fence_term = term;
}

/*
 * The rows of a write land after its fence (up to apply_delay): no claim of
 * anyone else may have reached a newer term by then (the fence margin covers
 * the delay; the writer's own renewal or release tombstone may). A claim that
 * landed late at the same term (claims_concurrent: its claimant read the head
 * before the writer's claim landed) contests the term but cannot make its
 * claimant a writer: that claimant reads back two claims. The seeds 20001939
 * and 20025544 of issue 13 were such landings, judged against the holder at
 * landing time (none, the term being contested) instead of at the fence.
 * A write counts at the newest term of its own lease (renewals move it on).
 * Writes that take effect never go back in term, and one term has one writer.
 */
void sim_check_effective_write(sim_world *w, const sim_req *req) {
  /*
   * A quorum write that timed out (319, a catalog of replicas) lands when
   * the replicas fetch it, possibly after its writer's lease ended and a
   * successor claimed (docs/catalog-protocol.md, "Replicated catalog", rule
   * 3): it passed its fence as the only writer of its term (checked then),
   * and every other write to its table waited behind it (286). What it may
   * not do is show a user something wrong: its publish is judged by
   * sim_check_publish (no version twice), its inventory by land_index (never
   * at or below the watermark), its rejected rows name only poison.
   */
  if (req->quorum_late) {
    uint64_t head;
    sim_catalog_holder(w, sim_catalog_now(w), &head);
    if (head > req->fence_term) sim_cov_mark(w, SIM_COV_SIT_QUORUM_LATE_LANDED_AFTER_LEASE);
    return;
  }
  uint64_t term = req->fence_term;
  for (uint32_t i = w->claim_count; i > 0 && w->claims[i - 1].term > req->fence_term; i--) {
    const sim_claim *claim = &w->claims[i - 1];
    if (!cs_uuid_equal(&claim->lease_id, &req->lease_id))
      sim_bail(w, SIM_EXIT_SAFETY, "p%u's %s of term %" PRIu64 " took effect after p%u claimed term %" PRIu64,
               req->proc, cs_op_name(req->op), req->fence_term, claim->proc, claim->term);
    if (claim->term > term) term = claim->term; /* its own renewal or release: the write counts there */
  }
  uint64_t head;
  if (sim_catalog_holder(w, sim_catalog_now(w), &head) == SIM_NONE && head == req->fence_term)
    w->counters.landed_in_contest++;
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
  if (req->version > w->watermark) return;
  /*
   * One version, one holder: a version published by two leases names two
   * sets of packs (readers pinned at it saw one of them). Only a publish at
   * or below the watermark can repeat one (rare: a late landing), so only
   * then is the log searched; first, so that a repeat is named as one.
   */
  for (uint32_t i = 0; i < w->publish_count; i++) {
    const sim_publish *pub = &w->publishes[i];
    if (pub->version == req->version && !cs_uuid_equal(&pub->lease_id, &req->lease_id))
      sim_bail(w, SIM_EXIT_SAFETY, "version %" PRIu64 " was published twice: by p%u at term %" PRIu64
               " and by p%u at term %" PRIu64, req->version, pub->proc, pub->term, req->proc, req->fence_term);
  }
  /* A publish sent before the one that set the watermark may land late (its
     outcome was unknown, its rows were re-indexed at a newer version): harmless.
     One sent after it must be above it. */
  if (req->sent_ns > w->watermark_sent_ns)
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
  /* Told to stop (a close, a replace, a failed open), it gives the lease up: its claim may run out (seed 501093691). */
  if (old->svc_stop_sent) live = false;
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

/*
 * A step that set a pack aside names it in last_error (6.11: "set aside <pack id>: <reason>"; the last one,
 * where one step set several aside): the canonical id of a pack that may be set aside, and when every pack the
 * step set aside took an entry in the rejected list, the one in its newest entry.
 */
void sim_check_set_aside_named(sim_world *w, const sim_proc *p, sim_svc_marks before) {
  sim_svc_marks after = sim_svc_marks_of(p->svc);
  if (after.set_aside == before.set_aside) return;
  cs_snapshot snap;
  cs_service_snapshot(p->svc, 0, &snap);
  const char *t = snap.last_error;
  static const char head[] = "set aside ";
  size_t n = sizeof head - 1;
  cs_uuid id;
  bool ok = strncmp(t, head, n) == 0 && strnlen(t, sizeof snap.last_error) > n + CS_UUID_TEXT_LEN &&
            t[n + CS_UUID_TEXT_LEN] == ':' && cs_uuid_parse(t + n, CS_UUID_TEXT_LEN, &id) == CS_E_OK;
  uint32_t pack = ok ? sim_truth_of(w, &id) : SIM_NONE;
  cs_uuid newest;
  bool all_entered = after.rejected_seq - before.rejected_seq == after.set_aside - before.set_aside;
  if (ok && all_entered && sim_svc_rejected_newest(p->svc, &newest) && !cs_uuid_equal(&newest, &id)) pack = SIM_NONE;
  if (pack == SIM_NONE || !sim_pack_may_set_aside(w, pack))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u set a pack aside but its last_error says \"%s\" (not \"set aside <that pack's"
             " id>: <why>\")", p->index, t);
}

/* A claim of this lease that is live at the catalog's clock. */
static bool claim_live(const sim_world *w, const cs_uuid *lease_id) {
  uint64_t now = sim_catalog_now(w);
  for (uint32_t i = w->claim_count; i > 0; i--) {
    const sim_claim *c = &w->claims[i - 1];
    if (c->expires_ns <= now && c->term + 2 < w->claims[w->claim_count - 1].term) break;
    if (!c->released && c->expires_ns > now && cs_uuid_equal(&c->lease_id, lease_id)) return true;
  }
  return false;
}

/*
 * Right after a proc's cores ran: its snapshot tells the truth (6.11), and
 * its view of its lease is conservative (6.7, "Timing assumptions" below): a
 * service that says it holds the lease has a claim live at the catalog.
 */
void sim_check_proc(sim_world *w, const sim_proc *p) {
  if (p->svc == NULL || !p->alive) return;
  uint32_t i = p->index;
  cs_snapshot snap;
  cs_service_snapshot(p->svc, sim_local_now(w, p), &snap);
  check_ledger(w, p, &snap, sim_local_now(w, p));
  if (snap.reconcile_head_errors < p->forbidden_heads)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u got %" PRIu64 " forbidden reconcile HEADs but counts %" PRIu64 " HEAD errors",
             i, p->forbidden_heads, snap.reconcile_head_errors);
  /* The snapshot tells the truth (6.11): every failed reconcile HEAD is counted, every split too. */
  if (snap.reconcile_head_errors != p->failed_heads)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's reconcile HEADs failed %" PRIu64 " times but its snapshot counts %" PRIu64
             " HEAD errors", i, p->failed_heads, snap.reconcile_head_errors);
  /* ... and every refused reconcile LIST (an outage is retried, not counted: service.h). */
  if (snap.reconcile_list_errors != p->refused_lists)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's reconcile LISTs were refused %" PRIu64 " times but its snapshot counts %" PRIu64
             " LIST errors", i, p->refused_lists, snap.reconcile_list_errors);
  if (snap.batch_splits != p->splits_seen)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's catalog refused %" PRIu64 " batches of several packs but its snapshot counts %"
             PRIu64 " splits", i, p->splits_seen, snap.batch_splits);
  /* The guard must cover drift (400 ppm of the TTL here, two clocks) and the catalog's tick: a corner below it is excused. */
  bool guarded = p->svc_cfg.lease_guard_ns >= p->svc_cfg.lease_ttl_ns / 2500 + w->catalog_clock_ns;
  if (guarded && snap.lease_state == CS_LEASE_HELD && !claim_live(w, &p->lease_id))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u says it holds the lease (term %" PRIu64 "), but no claim of it is live at the catalog",
             p->index, snap.lease_term);
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
  }
}

uint64_t sim_visible_records(const sim_world *w) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < w->pack_count; i++)
    if (sim_catalog_committed(w, i)) n += w->packs[i].ref.record_count;
  return n;
}

static bool proc_drained(const sim_world *w, const sim_proc *p, char *why, size_t why_size) {
  for (uint32_t f = 0; f < p->files_end; f++) {
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
  /* A service that still counts packs outside its table never answers a flush drained. */
  cs_snapshot snap;
  memset(&snap, 0, sizeof snap);
  if (p->svc != NULL) cs_service_snapshot(p->svc, 0, &snap);
  if (snap.backlog > 0) {
    snprintf(why, why_size, "p%u's spool is empty but its service counts %u packs outside its table: no flush drains",
             p->index, snap.backlog);
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
  /*
   * Every poison pack in the store is recorded as rejected in the catalog
   * (6.3). One set aside by a service that ended before its row landed is
   * found again only by a reconcile pass: with passes further apart than the
   * liveness phase (or only at start) it may wait for the next one.
   */
  uint64_t interval = w->base_svc.reconcile_interval_ns;
  bool passes_reach = interval != 0 && interval <= w->opts->liveness_ns;
  for (uint32_t i = 0; passes_reach && i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    bool poison = sp->poison_large || sp->poison_invalid || sim_catalog_refuses_alone(w, i);
    /* A pack the store lied about (other bytes, or gone for a while) is excused: the store broke it. */
    if (!sp->durable || !poison || sp->rejected || !in_store(w, i) || sp->damaged_ns != 0) continue;
    char id[CS_UUID_TEXT_LEN + 1];
    snprintf(why, why_size, "poison pack %s of p%u is in the store but not recorded as rejected", pack_name(w, i, id),
             sp->proc);
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

/* ---- what a service sends and is told (DESIGN.md 6.1, 6.2, 6.5, 6.8, 6.11) ---- */

void sim_check_service_start(sim_world *w, sim_proc *p) {
  p->failed_heads = 0;
  p->refused_lists = 0;
  p->reported_total = 0;
  p->split_bound = 0;
  p->splits_seen = 0;
  p->lease_ops_starts++; /* a new service claims afresh: its lease requests are not a timer's */
  p->list_bucket = 0; /* a new service reconciles at start: a new pass */
  p->list_bucket_start_ns = w->now_ns;
  p->renewal_claim_local_ns = 0;
  p->renewal_fenced_out = 0;
  p->led_requests = 0;
  p->led_inflight = 0;
  p->led_inflight_max = 0;
  p->led_handed_off = 0;
  p->led_listed = false;
  p->list_cycle = UINT64_MAX;
  p->token_refused = false;
  p->svc_start_local_ns = sim_local_now(w, p);
}

/* ---- the snapshot ledger (6.11): what the service did, counted outside it ---- */

void sim_ledger_told(sim_world *w, sim_proc *p, uint32_t file, int rc, bool recovered) {
  sim_file *f = &p->files[file];
  if (rc != CS_E_OK || f->told_gen == p->svc_gen) return; /* sealing twice keeps the first time */
  /* A recovered pack may be in the store already (6.1): the service looks before it sends. */
  if (recovered) w->packs[f->pack].head_first_gen[p->index] = p->svc_gen;
  f->told_gen = p->svc_gen;
  f->told_late = p->led_listed;
  f->told_local_ns = sim_local_now(w, p);
}

void sim_ledger_sent(sim_proc *p) {
  p->led_requests++;
  if (++p->led_inflight > p->led_inflight_max) p->led_inflight_max = p->led_inflight;
}

void sim_ledger_done(sim_proc *p, cs_op op, cs_outcome outcome) {
  p->led_inflight--;
  if (op == CS_OP_SPOOL_REMOVE && (outcome == CS_OUT_OK || outcome == CS_OUT_NOT_FOUND)) p->led_handed_off++;
}

void sim_check_error_named(sim_world *w, const sim_proc *p, cs_op op, cs_outcome outcome) {
  if (outcome == CS_OUT_OK || outcome == CS_OUT_NOT_FOUND) return;
  cs_snapshot snap;
  cs_service_snapshot(p->svc, sim_local_now(w, p), &snap);
  if (strstr(snap.last_error, cs_outcome_name(outcome)) == NULL && strncmp(snap.last_error, "set aside ", 10) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's %s failed (%s) but its last_error says \"%s\"", p->index, cs_op_name(op),
             cs_outcome_name(outcome), snap.last_error);
}

/*
 * A claim that did not win says why in last_error, as operators read it: a
 * term several claimed is "contested" (two publishers raced), one another
 * took is "lost".
 */
void sim_check_claim_named(sim_world *w, const sim_proc *p, const cs_claims *claims) {
  cs_snapshot snap;
  cs_service_snapshot(p->svc, sim_local_now(w, p), &snap);
  const char *why = claims->claim_count > 1 ? "contested" : "lost";
  if (strstr(snap.last_error, "lease claim") == NULL || strstr(snap.last_error, why) == NULL)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's claim read %u claims at its term, not its own alone, but its last_error says"
             " \"%s\" (not \"lease claim ... %s\")", p->index, claims->claim_count, snap.last_error, why);
}

void sim_check_token_refused(sim_world *w, sim_proc *p) {
  cs_snapshot snap;
  cs_service_snapshot(p->svc, sim_local_now(w, p), &snap);
  if (strstr(snap.last_error, "continuation token") == NULL)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u was given a continuation token too long to hold but its last_error says \"%s\"",
             p->index, snap.last_error);
  p->token_refused = true;
}

/* The names operators read in status output and logs (docs/operations.md). */
static const char *const lease_names[] = {
    [CS_LEASE_NONE] = "none",       [CS_LEASE_CLAIMING] = "claiming",       [CS_LEASE_HELD] = "held",
    [CS_LEASE_BUSY] = "busy",       [CS_LEASE_QUARANTINED] = "quarantined", [CS_LEASE_RELEASED] = "released",
};

/*
 * The snapshot's counts of requests, completions, hand-offs, flushes in
 * progress, packs in the table and the oldest unshipped age agree with what
 * the service was seen to do. Packs in the table: every spool file whose
 * SEALED this service took and that is still ready, except that one told
 * after a reconcile LIST may sit in an adopted slot (counted as the
 * bucket's, not ours). The oldest unshipped pack is no older than the
 * oldest such file, and no younger than one the catalog does not hold yet
 * and that may not be set aside (a publisher's; an uploader's DONE needs
 * only the store).
 */
static void check_ledger(sim_world *w, const sim_proc *p, const cs_snapshot *snap, uint64_t local) {
  uint32_t i = p->index;
  if (snap->requests != p->led_requests || snap->inflight != p->led_inflight ||
      snap->inflight_max_seen != p->led_inflight_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's snapshot counts %" PRIu64 " requests, %u in flight (at most %u), but it sent %"
             PRIu64 ", %u in flight (at most %u)", i, snap->requests, snap->inflight, snap->inflight_max_seen,
             p->led_requests, p->led_inflight, p->led_inflight_max);
  if (snap->handed_off != p->led_handed_off)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's snapshot counts %" PRIu64 " packs handed off, its removals completed %" PRIu64,
             i, snap->handed_off, p->led_handed_off);
  uint32_t sure = 0, maybe = 0;
  uint64_t oldest = CS_NEVER, oldest_unshipped = CS_NEVER;
  for (uint32_t f = 0; f < p->files_end; f++) {
    const sim_file *file = &p->files[f];
    if (file->state != FILE_READY || file->told_gen != p->svc_gen) continue;
    maybe++;
    if (file->told_local_ns < oldest) oldest = file->told_local_ns;
    if (file->told_late) continue;
    sure++;
    if (p->kind == PROC_PUBLISHER && !sim_catalog_committed(w, file->pack) &&
        !sim_pack_may_set_aside(w, file->pack) && file->told_local_ns < oldest_unshipped)
      oldest_unshipped = file->told_local_ns;
  }
  if (snap->pending_spool < sure || snap->pending_spool > maybe)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's snapshot counts %u packs in its spool table; %u to %u of its spool files are in it",
             i, snap->pending_spool, sure, maybe);
  uint64_t age_max = oldest == CS_NEVER || oldest > local ? 0 : local - oldest;
  uint64_t age_min = oldest_unshipped == CS_NEVER || oldest_unshipped > local ? 0 : local - oldest_unshipped;
  if (snap->oldest_unshipped_age_ns > age_max || snap->oldest_unshipped_age_ns < age_min)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's snapshot says its oldest unshipped pack is %.6f s old; its spool says %.6f to %.6f s",
             i, (double)snap->oldest_unshipped_age_ns / 1e9, (double)age_min / 1e9, (double)age_max / 1e9);
  uint32_t flushes = 0;
  for (uint32_t f = 0; f < SIM_FLUSHES_MAX; f++) flushes += p->flushes[f].used && p->flushes[f].svc_gen == p->svc_gen;
  cs_service_usage u;
  cs_service_usage_get(p->svc, &u);
  if (u.flush_used != flushes)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's service counts %u flushes in progress; %u were called and not answered", i,
             u.flush_used, flushes);
  const char *name = cs_lease_state_name(snap->lease_state);
  if ((unsigned)snap->lease_state >= sizeof lease_names / sizeof lease_names[0] || name == NULL ||
      lease_names[snap->lease_state] == NULL || strcmp(name, lease_names[snap->lease_state]) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's lease state %d is named \"%s\"", i, (int)snap->lease_state,
             name != NULL ? name : "(null)");
}

/* An id that may enter a catalog query: a pack's, or one a canonical pack key in the store names. */
static bool id_validated(const sim_world *w, const cs_uuid *id) {
  if (sim_truth_of(w, id) != SIM_NONE) return true;
  char text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(id, text);
  char name[CS_UUID_TEXT_LEN + 16];
  int n = snprintf(name, sizeof name, "/%s.dmi-pack", text);
  for (uint32_t i = 0; i < w->object_count; i++) {
    const cs_pack_ref *r = &w->objects[i].ref;
    if (r->key_len >= (uint32_t)n && memcmp(r->key + r->key_len - (uint32_t)n, name, (size_t)n) == 0) return true;
  }
  return false;
}

static void check_ids(sim_world *w, const sim_proc *p, const cs_action *act) {
  for (uint32_t i = 0; i < act->count; i++) {
    const cs_uuid *id = act->op == CS_OP_CAT_INDEX ? &act->packs[i]->pack_id : &act->ids[i];
    if (id_validated(w, id)) continue;
    char text[CS_UUID_TEXT_LEN + 1];
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent %s with id %s, which no pack and no canonical key in the store names",
             p->index, cs_op_name(act->op), (cs_uuid_format(id, text), text));
  }
}

/* Every INDEX batch: within the byte budget, halved after a refusal, of packs verified by a HEAD. */
static void check_index(sim_world *w, sim_proc *p, const cs_action *act, const sim_req *req) {
  char id[CS_UUID_TEXT_LEN + 1];
  if (act->count == 0) sim_bail(w, SIM_EXIT_SAFETY, "p%u sent an empty INDEX", p->index);
  if (act->count > p->svc_cfg.cycle_packs_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent an INDEX of %u packs, more than a cycle's (%u)", p->index, act->count,
             p->svc_cfg.cycle_packs_max);
  cs_snapshot snap;
  if (p->split_bound != 0) cs_service_snapshot(p->svc, 0, &snap);
  if (p->split_bound != 0 && snap.cycles == p->split_cycle && act->count > p->split_bound)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent an INDEX of %u packs right after a batch was refused (halves: at most %u)",
             p->index, act->count, p->split_bound);
  p->split_bound = 0;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < act->count; i++) {
    bytes += act->packs[i]->index_bytes;
    uint32_t pack = req->packs[i];
    if (pack == SIM_NONE) continue;
    const sim_pack *sp = &w->packs[pack];
    const cs_pack_ref *ref = act->packs[i];
    uint64_t sha8;
    memcpy(&sha8, ref->sha256, sizeof sha8);
    if (sp->verified_gen[p->index] != p->svc_gen || sp->verified_size[p->index] != ref->size_bytes ||
        sp->verified_sha8[p->index] != sha8)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u indexed pack %s without a HEAD showing the size and checksum it names", p->index,
               pack_name(w, pack, id));
    if (w->packs[pack].too_large_gen[p->index] == p->svc_gen)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u sent pack %s again after the catalog refused it alone as too large",
               p->index, pack_name(w, pack, id));
    /* Its inventory row counts the pack's records (an adopted pack's, as its HEAD showed them). */
    if (ref->record_count != sp->ref.record_count)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u indexed pack %s as %u records; it holds %u", p->index, pack_name(w, pack, id),
               ref->record_count, sp->ref.record_count);
  }
  /* Re-indexing a pack the catalog holds is harmless (DESIGN.md 5: readers take one row per capture); counted. */
  for (uint32_t i = 0; i < act->count; i++) w->counters.index_of_committed += req->packs[i] != SIM_NONE &&
                                                                             sim_catalog_committed(w, req->packs[i]);
  if (bytes > p->svc_cfg.index_batch_bytes_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent an INDEX batch of %" PRIu64 " bytes, over its budget of %" PRIu64, p->index,
             bytes, p->svc_cfg.index_batch_bytes_max);
}

/*
 * Request volume within a bound the configuration sets (6.5, 6.7): lease
 * requests (head, claim, read-back, release) come from timers of TTL/3, the
 * contest wait (a TTL) and the failure backoff. Per TTL: at most
 * SIM_LEASE_OPS_PER_TTL plus 16 per backoff cap in it plus SIM_LEASE_OPS_PER_START
 * per service started in it, whatever the catalog
 * does. A timer in the wrong unit (milliseconds for nanoseconds) sends
 * thousands.
 */
#define SIM_LEASE_OPS_PER_TTL 64u
/* A service start looks, claims, reads back and may contest once; its close releases. */
#define SIM_LEASE_OPS_PER_START 8u

/*
 * The renewal timer (6.7): a holder renews a third of a TTL after its last
 * claim was sent, or a twelfth after a renewal that was refused unapplied;
 * two renewal claims of one service are never closer than TTL / 12 on its
 * clock, unless a write of it was fenced out in between (then at once). A timer 10x too fast stays under the volume bound; not under this.
 */
static void check_renewal(sim_world *w, sim_proc *p) {
  cs_snapshot snap;
  cs_service_snapshot(p->svc, sim_local_now(w, p), &snap);
  uint64_t local = sim_local_now(w, p);
  if (snap.lease_state != CS_LEASE_HELD) {
    p->renewal_claim_local_ns = 0; /* a claim for a new holding: the next renewal starts afresh */
    return;
  }
  uint64_t gap = p->svc_cfg.lease_ttl_ns / 12;
  bool fenced = snap.fenced_out > p->renewal_fenced_out; /* someone may hold it: look at once */
  p->renewal_fenced_out = snap.fenced_out;
  if (p->renewal_claim_local_ns != 0 && !fenced && local < p->renewal_claim_local_ns + gap)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u renewed its lease %.6f s after its last renewal, under TTL / 12 (%.6f s)",
             p->index, (double)(local - p->renewal_claim_local_ns) / 1e9, (double)gap / 1e9);
  p->renewal_claim_local_ns = local;
}

static void check_volume(sim_world *w, sim_proc *p, const cs_action *act) {
  cs_op op = act->op;
  if (op == CS_OP_CAT_CLAIM && p->svc != NULL) check_renewal(w, p);
  if (act->for_cycle) return; /* a cycle's read-back: counted with the cycle's requests, not the lease's */
  if (op != CS_OP_CAT_HEAD && op != CS_OP_CAT_CLAIM && op != CS_OP_CAT_READ_CLAIMS && op != CS_OP_CAT_RELEASE) return;
  uint64_t window = p->svc_cfg.lease_ttl_ns;
  uint64_t cap = p->svc_cfg.backoff_cap_ns < window ? p->svc_cfg.backoff_cap_ns : window;
  if (w->now_ns >= p->lease_ops_bucket_start_ns + window) {
    p->lease_ops_bucket_start_ns = w->now_ns;
    p->lease_ops_bucket = 0;
    p->lease_ops_starts = 0;
  }
  /* Retries come at most ~every cap, jittered; each service started in the window claims afresh. */
  uint64_t bound = SIM_LEASE_OPS_PER_TTL + 16 * (window / cap) + SIM_LEASE_OPS_PER_START * (uint64_t)p->lease_ops_starts;
  if (++p->lease_ops_bucket > bound)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent more than %" PRIu64 " lease requests within one lease TTL (%.1f s)", p->index,
             bound, (double)window / 1e9);
  if (p->lease_ops_bucket > w->lease_ops_max_seen) w->lease_ops_max_seen = p->lease_ops_bucket;
}

/* A pack refused for its content is set aside only after index_attempts_max refusals (6.2). */
static void check_reject(sim_world *w, const sim_proc *p, const sim_req *req) {
  for (uint32_t i = 0; i < req->count; i++) {
    if (req->packs[i] == SIM_NONE) continue;
    const sim_pack *sp = &w->packs[req->packs[i]];
    if (!sp->poison_invalid || sp->poison_large || sp->conflict || sim_catalog_refuses_alone(w, req->packs[i])) continue;
    uint32_t refusals = sp->invalid_gen[p->index] == p->svc_gen ? sp->invalid_count[p->index] : 0;
    if (refusals < p->svc_cfg.index_attempts_max) {
      char id[CS_UUID_TEXT_LEN + 1];
      sim_bail(w, SIM_EXIT_SAFETY, "p%u set pack %s aside after %u content refusals (index_attempts_max %u)", p->index,
               pack_name(w, req->packs[i], id), refusals, p->svc_cfg.index_attempts_max);
    }
  }
}

/*
 * Reconcile pages listed per interval: one pass (a page per list_page_max
 * keys in the store, and the last; failed LISTs are retried with backoff and
 * not counted here). The interval in the wrong unit lists the bucket a
 * thousand times over.
 */
static void check_list_volume(sim_world *w, sim_proc *p) {
  uint64_t window = p->svc_cfg.reconcile_interval_ns != 0 ? p->svc_cfg.reconcile_interval_ns : p->svc_cfg.backoff_cap_ns;
  if (w->now_ns >= p->list_bucket_start_ns + window) {
    p->list_bucket_start_ns = w->now_ns;
    p->list_bucket = 0;
  }
  uint32_t bound = 4 * (w->object_count / p->svc_cfg.list_page_max + 2) + 16;
  if (++p->list_bucket > bound)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent more than %u reconcile LISTs within one reconcile interval (%.1f s, %u objects)",
             p->index, bound, (double)window / 1e9, w->object_count);
  if (p->list_bucket > w->list_max_seen) w->list_max_seen = p->list_bucket;
}

/*
 * Reconcile runs when the configuration says (6.8): at start when
 * reconcile_at_start, then every reconcile interval; with neither, never.
 * Without reconcile_at_start the first pass waits one interval.
 */
static void check_list_when(sim_world *w, sim_proc *p, const char *token) {
  const cs_service_config *cfg = &p->svc_cfg;
  uint64_t local = sim_local_now(w, p);
  if (!p->led_listed && !cfg->reconcile_at_start &&
      (cfg->reconcile_interval_ns == 0 || local < p->svc_start_local_ns + cfg->reconcile_interval_ns))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u listed the store %.3f s after its start (reconcile_at_start 0, interval %.3f s)",
             p->index, (double)(local - p->svc_start_local_ns) / 1e9, (double)cfg->reconcile_interval_ns / 1e9);
  p->led_listed = true;
  if (p->token_refused && token != NULL && token[0] != '\0')
    sim_bail(w, SIM_EXIT_SAFETY, "p%u went on listing after %.40s..., past a continuation token too long to hold (its"
             " pass must end there)", p->index, token);
  p->token_refused = false;
  /* Reconcile pages and uploads take turns: one cycle lists at most cycle_packs_max pages. */
  cs_snapshot snap;
  cs_service_snapshot(p->svc, local, &snap);
  if (snap.cycles != p->list_cycle) p->list_cycle = snap.cycles, p->list_cycle_pages = 0;
  if (++p->list_cycle_pages > cfg->cycle_packs_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u listed %u reconcile pages in one cycle (cycle_packs_max %u)", p->index,
             p->list_cycle_pages, cfg->cycle_packs_max);
}

/* A key with an empty, "." or ".." segment (the store key rule refuses them; S3 lists them as written). */
static bool odd_segment(const char *key) {
  for (const char *seg = key;; seg++) {
    const char *end = strchr(seg, '/');
    size_t len = end != NULL ? (size_t)(end - seg) : strlen(seg);
    if (len == 0 || (len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.')) return true;
    if (end == NULL) return false;
    seg = end;
  }
}

/*
 * A release frees the lease at once (6.9): a quarantined holder, whose last
 * claim's outcome it never learnt, releases the term that claim wrote. One
 * that releases a lower term while that claim landed and is live leaves the
 * lease taken until the claim expires (a successor waits out the TTL).
 */
static void check_release_term(sim_world *w, const sim_proc *p, const cs_action *act) {
  /* A release names a term this service claimed (the last one it held, or the one an unknown renewal may have
     taken): any other term frees nothing of its own and leaves a claim that landed to hold rivals off until it
     expires. The last held term may lie many failed claims back (docs/catalog-protocol.md: a holder whose claims
     since failed still releases the last term it held). */
  bool claimed = p->held_term_gen == p->svc_gen && p->held_term == act->term && act->term != 0;
  uint32_t n = p->claim_terms_gen == p->svc_gen ? p->claim_terms_n : 0;
  for (uint32_t i = 0; i < n && i < 8; i++) claimed = claimed || p->claim_terms[(n - 1 - i) % 8] == act->term;
  if (!claimed)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u released term %" PRIu64 ", which it never claimed (its last claim: %s%" PRIu64 ")",
             p->index, act->term, n == 0 ? "none, " : "term ", n == 0 ? 0 : p->claim_terms[(n - 1) % 8]);
  cs_snapshot snap;
  cs_service_snapshot(p->svc, sim_local_now(w, p), &snap);
  if (snap.lease_state != CS_LEASE_QUARANTINED) return;
  uint64_t now = sim_catalog_now(w);
  for (uint32_t i = 0; i < w->claim_count; i++) {
    const sim_claim *c = &w->claims[i];
    if (c->released || !cs_uuid_equal(&c->lease_id, &act->lease_id) || c->term <= act->term || c->expires_ns <= now)
      continue;
    sim_bail(w, SIM_EXIT_SAFETY, "p%u, quarantined, released term %" PRIu64 " while its claim of term %" PRIu64
             " landed and is live: the lease stays taken until that claim expires", p->index, act->term, c->term);
  }
}

/*
 * Lease steps go one at a time (the runtime's lease lane holds one request:
 * src/runtime/rs_lanes.c), and a cycle's read-back of the head is marked
 * for_cycle so that it runs beside them; for_cycle marks nothing else
 * (service.h). A read-back sent unmarked would queue behind a renewal, or a
 * renewal behind it.
 */
static void check_lease_lane(sim_world *w, sim_proc *p, const cs_action *act) {
  if (act->for_cycle && act->op != CS_OP_CAT_HEAD)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent %s marked for_cycle (only a cycle's CAT_HEAD is)", p->index,
             cs_op_name(act->op));
  bool lease_step = (act->op == CS_OP_CAT_HEAD && !act->for_cycle) || act->op == CS_OP_CAT_CLAIM ||
                    act->op == CS_OP_CAT_READ_CLAIMS || act->op == CS_OP_CAT_RELEASE;
  if (!lease_step) return;
  if (p->lease_req_action != 0 && p->lease_req_gen == p->svc_gen)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent lease step %s while its lease step id=%" PRIu64 " is still in flight "
             "(one at a time; a cycle's read-back is marked for_cycle)", p->index, cs_op_name(act->op),
             p->lease_req_action);
  p->lease_req_action = act->id;
  p->lease_req_gen = p->svc_gen;
}

void sim_check_lease_step_done(sim_proc *p, const sim_req *req) {
  if (req->svc_gen == p->lease_req_gen && req->action_id == p->lease_req_action) p->lease_req_action = 0;
  if (sim_op_is_store(req->op) && req->svc_gen == p->store_inflight_gen && p->store_inflight > 0) p->store_inflight--;
}

/* At most store_inflight_max object-store requests in flight per service (service.h: "parallel object-store
   requests"; the runtime's store lane is sized by it). */
static void check_store_inflight(sim_world *w, sim_proc *p, const cs_action *act) {
  if (!sim_op_is_store(act->op)) return;
  if (p->store_inflight_gen != p->svc_gen) p->store_inflight_gen = p->svc_gen, p->store_inflight = 0;
  if (++p->store_inflight > p->svc_cfg.store_inflight_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sent %s with %u object-store requests already in flight (store_inflight_max %u)",
             p->index, cs_op_name(act->op), p->store_inflight - 1, p->svc_cfg.store_inflight_max);
}

void sim_check_send(sim_world *w, sim_proc *p, const cs_action *act, const sim_req *req) {
  char id[CS_UUID_TEXT_LEN + 1];
  check_volume(w, p, act);
  check_lease_lane(w, p, act);
  check_store_inflight(w, p, act);
  if (act->op == CS_OP_CAT_INDEX || act->op == CS_OP_CAT_PUBLISH || act->op == CS_OP_CAT_REJECT) {
    /* Only a holder writes (6.7): the fence is the catalog's guard, not the service's licence. */
    cs_snapshot snap;
    cs_service_snapshot(p->svc, sim_local_now(w, p), &snap);
    if (snap.lease_state != CS_LEASE_HELD)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u sent %s while its lease is %s", p->index, cs_op_name(act->op),
               cs_lease_state_name(snap.lease_state));
    if (act->term != snap.lease_term)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u sent %s fenced at term %" PRIu64 " while it holds term %" PRIu64, p->index,
               cs_op_name(act->op), act->term, snap.lease_term);
  }
  if (act->op == CS_OP_STORE_LIST) check_list_when(w, p, act->token);
  if (act->op == CS_OP_CAT_CLAIM) {
    if (p->claim_terms_gen != p->svc_gen) p->claim_terms_gen = p->svc_gen, p->claim_terms_n = 0;
    /* A CLAIM names its base term and claims the next; a renewal tried again names the same one. */
    if (p->claim_terms_n == 0 || p->claim_terms[(p->claim_terms_n - 1) % 8] != act->term + 1)
      p->claim_terms[p->claim_terms_n++ % 8] = act->term + 1;
  }
  if (act->op == CS_OP_CAT_RELEASE) check_release_term(w, p, act);
  switch (act->op) {
  case CS_OP_STORE_PUT:
  case CS_OP_STORE_HEAD: {
    if (strncmp(act->pack->key, w->prefix, strlen(w->prefix)) != 0)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u sent %s for key %s, outside its catalog's prefix %s", p->index,
               cs_op_name(act->op), act->pack->key, w->prefix);
    if (odd_segment(act->pack->key))
      sim_bail(w, SIM_EXIT_SAFETY, "p%u sent %s for key %s: an empty, '.' or '..' segment, which no pack key has (6.8)",
               p->index, cs_op_name(act->op), act->pack->key);
    uint32_t pack = sim_truth_of(w, &act->pack->pack_id);
    if (pack == SIM_NONE) return;
    if (act->op == CS_OP_STORE_PUT && w->packs[pack].verified_gen[p->index] == p->svc_gen && in_store(w, pack) &&
        memcmp(&w->packs[pack].verified_sha8[p->index], w->packs[pack].ref.sha256, 8) == 0)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u sent pack %s again after a HEAD showed it uploaded", p->index,
               pack_name(w, pack, id));
    if (act->op == CS_OP_STORE_PUT && w->packs[pack].head_first_gen[p->index] == p->svc_gen && in_store(w, pack))
      sim_bail(w, SIM_EXIT_SAFETY, "p%u sent pack %s, which the store holds, without a HEAD first (it was recovered, or"
               " an earlier PUT of it landed but was answered with a failure)", p->index, pack_name(w, pack, id));
    if (act->op == CS_OP_STORE_HEAD && act->head_only && w->packs[pack].held_gen[p->index] == p->svc_gen)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u's reconcile HEADed pack %s after the catalog said it holds it", p->index,
               pack_name(w, pack, id));
    return;
  }
  case CS_OP_CAT_INDEX:
    check_ids(w, p, act);
    check_index(w, p, act, req);
    return;
  case CS_OP_CAT_COMMITTED:
    /* A query for no pack can tell the service nothing: a request it did not need. */
    if (act->count == 0) sim_bail(w, SIM_EXIT_SAFETY, "p%u asked the catalog which of no packs it holds", p->index);
    check_ids(w, p, act);
    return;
  case CS_OP_CAT_REJECT:
    check_ids(w, p, act);
    check_reject(w, p, req);
    return;
  default: return;
  }
}

void sim_check_reply(sim_world *w, sim_proc *p, const sim_req *req, const cs_event *ev) {
  if (req->op == CS_OP_CAT_READ_CLAIMS && ev->outcome == CS_OUT_OK && ev->claims.sole_mine)
    p->held_term = req->term, p->held_term_gen = p->svc_gen; /* check_release_term: a term this service held */
  switch (req->op) {
  case CS_OP_STORE_PUT: {
    /* It landed but the answer says it failed: the service cannot tell, and must look before sending again. */
    uint32_t pack = sim_truth_of(w, &req->ref.pack_id);
    if (pack != SIM_NONE && ev->outcome != CS_OUT_OK && req->applied) w->packs[pack].head_first_gen[p->index] = p->svc_gen;
    return;
  }
  case CS_OP_STORE_LIST:
    if (ev->outcome == CS_OUT_OK) check_list_volume(w, p);
    if (ev->outcome != CS_OUT_OK && !cs_outcome_is_outage(ev->outcome)) p->refused_lists++;
    return;
  case CS_OP_STORE_HEAD: {
    /* Every failed reconcile HEAD, of any kind, must be counted as a HEAD error (6.8). */
    if (req->head_only && ev->outcome != CS_OUT_OK && ev->outcome != CS_OUT_NOT_FOUND) p->failed_heads++;
    uint32_t pack = sim_truth_of(w, &req->ref.pack_id);
    if (pack == SIM_NONE) return;
    sim_pack *sp = &w->packs[pack];
    if (ev->outcome == CS_OUT_OK || ev->outcome == CS_OUT_NOT_FOUND) sp->head_first_gen[p->index] = 0; /* it looked */
    bool shown = ev->outcome == CS_OUT_OK && ev->head.is_pack;
    sp->verified_gen[p->index] = shown ? p->svc_gen : 0;
    sp->verified_size[p->index] = ev->head.size_bytes;
    memcpy(&sp->verified_sha8[p->index], ev->head.sha256, sizeof sp->verified_sha8[p->index]);
    return;
  }
  case CS_OP_CAT_COMMITTED:
    if (ev->outcome != CS_OUT_OK) return;
    for (uint32_t i = 0; i < req->count; i++)
      if (req->packs[i] != SIM_NONE && ev->held[i]) w->packs[req->packs[i]].held_gen[p->index] = p->svc_gen;
    return;
  case CS_OP_CAT_INDEX:
    if (ev->outcome != CS_OUT_TOO_LARGE && ev->outcome != CS_OUT_INVALID) return;
    if (req->count > 1) {
      cs_snapshot snap;
      cs_service_snapshot(p->svc, 0, &snap);
      p->split_bound = (req->count + 1) / 2;
      p->split_cycle = snap.cycles;
      p->splits_seen++;
    } else if (ev->outcome == CS_OUT_TOO_LARGE && req->packs[0] != SIM_NONE) {
      w->packs[req->packs[0]].too_large_gen[p->index] = p->svc_gen;
    } else if (req->packs[0] != SIM_NONE) {
      sim_pack *sp = &w->packs[req->packs[0]];
      if (sp->invalid_gen[p->index] != p->svc_gen) sp->invalid_gen[p->index] = p->svc_gen, sp->invalid_count[p->index] = 0;
      sp->invalid_count[p->index]++;
    }
    return;
  default: return;
  }
}

/*
 * An engine flush that reports success promises every record admitted before
 * the call: the records then still in the sink are in packs that are now
 * visible (an uploader's: uploaded), or set aside as poison (6.6).
 */
void sim_check_engine_report(sim_world *w, sim_proc *p, const cs_engine_action *act) {
  /*
   * The state changes when the REPORT is queued (engine.h): a close ends
   * CLOSED, a flush OPEN, an open OPEN or, failed, IDLE (so it may be tried
   * again); a replace that reports success is OPEN.
   */
  static const char *const op_names[] = {"none", "open", "flush", "close", "replace"};
  int want = -1;
  switch (act->opkind) {
  case CS_ENGINE_OP_CLOSE: want = CS_ENGINE_CLOSED; break;
  case CS_ENGINE_OP_FLUSH: want = CS_ENGINE_OPEN; break;
  case CS_ENGINE_OP_OPEN: want = act->err == CS_E_OK ? CS_ENGINE_OPEN : CS_ENGINE_IDLE; break;
  case CS_ENGINE_OP_REPLACE:
    /* A failed close half with a good open half reports an error while OPEN; a failed open half is IDLE. */
    want = act->err == CS_E_OK ? CS_ENGINE_OPEN : p->open_step_failed ? CS_ENGINE_IDLE : -1;
    break;
  default: break;
  }
  if (want >= 0 && (int)p->engine.state != want)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's engine is in state %d after its %s reported %s; the contract says %d",
             p->index, (int)p->engine.state, (unsigned)act->opkind < 5 ? op_names[act->opkind] : "?",
             cs_strerror(act->err), want);
  if (act->opkind == CS_ENGINE_OP_CLOSE || act->opkind == CS_ENGINE_OP_REPLACE) {
    /*
     * Close (and replace) answer within their budget, plus the stop (requests
     * in flight end within one request timeout), a lease renewal the stopping
     * service may still send (seed 6484083222718: the release waits behind
     * it) and the release (one request): three request timeouts (6.9).
     */
    uint64_t took = sim_local_now(w, p) - p->engine_op_started_local;
    uint64_t limit = p->engine_op_budget_ns + 3 * p->svc_cfg.request_timeout_ns;
    bool paused = p->last_pause_end_ns != 0 && p->last_pause_end_local_ns >= p->engine_op_started_local;
    bool slow_disk = p->engine_op_slow_disk || w->slow_disk_until_ns > p->engine_op_started_ns;
    if (took > limit && !paused && !slow_disk)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u's %s took %.3f s, past its budget of %.3f s", p->index,
               act->opkind == CS_ENGINE_OP_CLOSE ? "close" : "replace", (double)took / 1e9,
               (double)p->engine_op_budget_ns / 1e9);
    if (took > p->engine_op_budget_ns && took - p->engine_op_budget_ns > w->close_over_max_ns)
      w->close_over_max_ns = took - p->engine_op_budget_ns;
  }
  if (act->opkind != CS_ENGINE_OP_FLUSH || act->err != CS_E_OK) return;
  uint64_t low = p->engine_flush_low, mark = p->engine_flush_mark, covered = 0;
  uint32_t first_missing = SIM_NONE;
  for (uint32_t i = 0; i < w->pack_count && low < mark; i++) {
    const sim_pack *sp = &w->packs[i];
    if (sp->proc != p->index || sp->capture_first >= mark || sp->capture_first + sp->ref.record_count <= low) continue;
    bool done = sp->durable && (handed_off(w, p, i) || sim_pack_excused(w, i));
    if (done) covered += sp->ref.record_count;
    else if (first_missing == SIM_NONE) first_missing = i;
  }
  char id[CS_UUID_TEXT_LEN + 1] = "none";
  if (first_missing != SIM_NONE) pack_name(w, first_missing, id);
  if (low < mark && covered < mark - low)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's engine flush reported success, but %" PRIu64 " of the %" PRIu64
             " records in its sink at the call are not %s (pack %s%s)", p->index, mark - low - covered, mark - low,
             p->kind == PROC_UPLOADER ? "uploaded" : "visible", id,
             first_missing == SIM_NONE ? ": in no sealed pack" : w->packs[first_missing].durable ? "" : ", not durable");
}

/* ---- the sink's contract (DESIGN.md 2, 4): seal policy, quota, nothing dropped silently ---- */

/* After every admit: the quota holds and every answer that was not an admission is counted. */
void sim_check_admit(sim_world *w, const sim_proc *p, int rc, uint64_t first_try_local_ns, const cs_sink_stats *before,
                     uint64_t record_bytes) {
  uint64_t waited = sim_local_now(w, p) - first_try_local_ns;
  if (rc == CS_E_WOULD_BLOCK && waited > p->sink_cfg.block_max_ns)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink still blocks a record %.3f s after its first try (at most %.3f s)",
             p->index, (double)waited / 1e9, (double)p->sink_cfg.block_max_ns / 1e9);
  cs_sink_stats st;
  cs_sink_stats_get(&p->sink, &st);
  /* Its counts of what it admitted move with each admission, by the record's bytes, and only then. */
  bool admitted = rc == CS_E_OK;
  if (st.records_admitted != before->records_admitted + admitted ||
      st.bytes_admitted != before->bytes_admitted + (admitted ? record_bytes : 0))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink counts %" PRIu64 " records, %" PRIu64 " bytes admitted after %s a record of %"
             PRIu64 " bytes (before: %" PRIu64 ", %" PRIu64 ")", p->index, st.records_admitted, st.bytes_admitted,
             admitted ? "admitting" : "refusing", record_bytes, before->records_admitted, before->bytes_admitted);
  /* Its quota use (open, sealing and sealed bytes) grows by the record admitted, and by nothing else here. */
  if (st.spool_bytes != before->spool_bytes + (admitted ? record_bytes : 0))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink reports %" PRIu64 " bytes in its spool after %s a record of %" PRIu64
             " bytes with %" PRIu64 " before", p->index, st.spool_bytes, admitted ? "admitting" : "refusing",
             record_bytes, before->spool_bytes);
  /*
   * A record admitted found room under the quota (packs recovered at open or
   * sealed by a replaced sink may hold the spool over it; then nothing new
   * may enter). Sealed packs count at their size on disk: their records'
   * bytes plus the format's overhead.
   */
  uint64_t overhead = (uint64_t)before->spool_packs * (256u + 64u * (uint64_t)p->sink_cfg.pack_records_max);
  uint64_t limit = p->sink_cfg.spool_bytes_max > UINT64_MAX - overhead ? UINT64_MAX : p->sink_cfg.spool_bytes_max + overhead;
  bool new_pack = st.spool_packs > before->spool_packs;
  bool no_room = before->spool_packs + (new_pack ? 1u : 0u) > p->sink_cfg.spool_packs_max ||
                 before->spool_bytes > limit || record_bytes > limit - before->spool_bytes;
  if (rc == CS_E_OK && no_room)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink admitted a record of %" PRIu64 " bytes with %" PRIu64 " bytes in %u packs,"
             " over its quota (%" PRIu64 " bytes, %u packs)", p->index, record_bytes, before->spool_bytes,
             before->spool_packs, p->sink_cfg.spool_bytes_max, p->sink_cfg.spool_packs_max);
  if (st.refused_full + st.refused_sealing + st.refused_closed != p->sink_refused || st.would_block != p->sink_blocked)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink refused %" PRIu64 " records and blocked %" PRIu64 " but counts %" PRIu64
             " and %" PRIu64, p->index, p->sink_refused, p->sink_blocked,
             st.refused_full + st.refused_sealing + st.refused_closed, st.would_block);
}

void sim_check_admit_seal(sim_world *w, sim_proc *p, uint64_t seq, uint64_t bytes, uint64_t footer) {
  if (p->last_admit_seq == 0 || seq == p->last_admit_seq || p->last_admit_seq <= p->sink_flush_seq) return;
  const sim_pending_pack *pp = NULL;
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
    if (p->pending[i].used && p->pending[i].seq == p->last_admit_seq) pp = &p->pending[i];
  if (pp == NULL || pp->sealing) return; /* sealed already: by count, bytes or linger, checked at its seal */
  const cs_sink_config *cfg = &p->sink_cfg;
  bool lingered = sim_local_now(w, p) - pp->first_local_ns >= cfg->linger_ns;
  bool room = pp->records < cfg->pack_records_max && pp->bytes + bytes <= cfg->pack_bytes_max &&
              pp->footer + footer <= cfg->pack_footer_bytes_max;
  if (room && !lingered)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink started pack %" PRIu64 " for a record of %" PRIu64 " bytes (descriptor %"
             PRIu64 ") while pack %" PRIu64 " had room for it (%u records, %" PRIu64 " bytes, footer %" PRIu64 ")",
             p->index, seq, bytes, footer, pp->seq, pp->records, pp->bytes, pp->footer);
}

/* A pack is sealed by its record count, its bytes and its linger, whichever comes first. */
void sim_check_sink_seal(sim_world *w, const sim_proc *p, const sim_pending_pack *pp) {
  const cs_sink_config *cfg = &p->sink_cfg;
  if (pp->records > cfg->pack_records_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sealed a pack of %u records, over its limit of %u", p->index, pp->records,
             cfg->pack_records_max);
  /*
   * A pack sealed while it is the newest, with no flush or close asking and
   * before its linger, was sealed for being full: its record count or bytes
   * at their bound (a seal for the next record's want of room comes after
   * that record joined a newer pack).
   */
  bool newest = pp->seq == p->last_admit_seq && pp->seq > p->sink_flush_seq;
  bool lingered = sim_local_now(w, p) - pp->first_local_ns >= cfg->linger_ns;
  bool full = pp->records >= cfg->pack_records_max || pp->bytes > cfg->pack_bytes_max;
  if (newest && !lingered && !full)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sealed pack %" PRIu64 " (%u records, %" PRIu64 " bytes, footer %" PRIu64
             ") before its linger with room left and no flush asking", p->index, pp->seq, pp->records, pp->bytes,
             pp->footer);
  if (pp->footer > cfg->pack_footer_bytes_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sealed a pack whose footer takes %" PRIu64 " bytes, over its limit of %" PRIu64,
             p->index, pp->footer, cfg->pack_footer_bytes_max);
  if (pp->records > 1 && pp->bytes > cfg->pack_bytes_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sealed a pack of %" PRIu64 " bytes, over its limit of %" PRIu64, p->index, pp->bytes,
             cfg->pack_bytes_max);
  uint64_t waited = sim_local_now(w, p) - pp->first_local_ns;
  bool paused = p->last_pause_end_ns != 0 && p->last_pause_end_local_ns >= pp->first_local_ns; /* frozen, not late */
  bool slots_busy = p->seals_full_local_ns >= pp->first_local_ns; /* the disk is behind: the seal waits */
  bool late = waited > cfg->linger_ns && waited - cfg->linger_ns > SIM_LINGER_SLACK_NS;
  if (late && !p->seal_asked && !paused && !slots_busy)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u sealed a pack %.3f s after its first record, past its linger of %.3f s", p->index,
             (double)waited / 1e9, (double)cfg->linger_ns / 1e9);
  if (waited > cfg->linger_ns && waited - cfg->linger_ns > w->linger_over_max_ns) w->linger_over_max_ns = waited - cfg->linger_ns;
}

/* ---- readers (sim/reader.c): search at W, bytes as captured, requests as planned, budgets ---- */

/*
 * Visible at watermark W (docs/reader.md "Search"): the pack has an
 * inventory row at a version at or below W (the lowest one it was indexed
 * at) and no rejected row.
 */
bool sim_read_visible(const sim_world *w, uint32_t pack, uint64_t watermark) {
  const sim_pack *sp = &w->packs[pack];
  return sp->min_version != 0 && sp->min_version <= watermark && !sp->rejected;
}

#define READ_INV_1 "(reader 1: a read at W sees what is published at or below W, each record once)"
#define READ_INV_2 "(reader 2: data only as captured, an error only for a GET that failed or was wrong)"
#define READ_INV_3 "(reader 3: no more requests than planned, and the plan counts what it reads)"
#define READ_INV_4 "(reader 4: a plan over its budget is refused before any request, one within it is not)"

/* A page: asked at W, every pack on it in the filter and visible at W, in pack id order after the cursor. */
void sim_check_read_page(sim_world *w, const sim_reader *r, uint64_t answered_at, const uint32_t *packs, uint32_t n) {
  char id[CS_UUID_TEXT_LEN + 1];
  if (answered_at != r->watermark)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": page %u was answered at watermark %" PRIu64 ", not at the W=%"
             PRIu64 " its search is pinned at " READ_INV_1, r->index, r->read_id, r->pages + 1, answered_at, r->watermark);
  if (r->watermark > w->watermark)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " is pinned at W=%" PRIu64 ", above the catalog's head %" PRIu64
             " " READ_INV_1, r->index, r->read_id, r->watermark, w->watermark);
  for (uint32_t k = 0; k < n; k++) {
    const sim_pack *sp = &w->packs[packs[k]];
    if (!sim_read_visible(w, packs[k], r->watermark))
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " at W=%" PRIu64 " shows pack %s (inventory version %" PRIu64
               "%s), which is not published at or below W " READ_INV_1, r->index, r->read_id, r->watermark,
               pack_name(w, packs[k], id), sp->min_version, sp->rejected ? ", rejected" : "");
    if (sp->ref.created_at_ns < r->from_ns || sp->ref.created_at_ns > r->to_ns)
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " shows pack %s, outside its filter " READ_INV_1, r->index,
               r->read_id, pack_name(w, packs[k], id));
    const cs_uuid *before = k > 0 ? &w->packs[packs[k - 1]].ref.pack_id : r->has_after ? &r->after : NULL;
    if (before != NULL && cs_uuid_compare(&sp->ref.pack_id, before) <= 0)
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": page %u shows pack %s out of pack id order (a repeat, or"
               " before the cursor) " READ_INV_1, r->index, r->read_id, r->pages + 1, pack_name(w, packs[k], id));
  }
}

static bool read_found(const sim_reader *r, uint32_t pack) {
  for (uint32_t i = 0; i < r->found_count; i++)
    if (r->found[i] == pack) return true;
  return false;
}

/*
 * The pages together: every pack of the filter visible at W, each once, and
 * nothing else, however much was published while the reader paged. A pack
 * rejected after W was pinned is excused either way (the catalog's rejected
 * rows apply to every watermark).
 */
void sim_check_read_search(sim_world *w, const sim_reader *r) {
  char id[CS_UUID_TEXT_LEN + 1];
  uint32_t lo, hi;
  sim_packs_created_between(w, r->from_ns, r->to_ns, &lo, &hi);
  bool rejects_since = w->counters.rejects_landed != r->rejects_at_pin;
  for (uint32_t i = lo; i < hi; i++) {
    bool visible = sim_read_visible(w, i, r->watermark), found = read_found(r, i);
    if (visible && !found)
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " at W=%" PRIu64 " misses pack %s, published at version %" PRIu64
               " (%u pages) " READ_INV_1, r->index, r->read_id, r->watermark, pack_name(w, i, id),
               w->packs[i].min_version, r->pages);
    if (!visible && found && !(rejects_since && w->packs[i].rejected))
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " at W=%" PRIu64 " showed pack %s, which is not visible at W"
               " (inventory version %" PRIu64 ") " READ_INV_1, r->index, r->read_id, r->watermark, pack_name(w, i, id),
               w->packs[i].min_version);
  }
}

/* The ranges of the read's pack k's records, sorted by offset, into off and end; returns how many. */
static uint32_t read_ranges_of(const sim_reader *r, uint32_t k, uint64_t *off, uint64_t *end) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < r->want_count; i++) {
    if (r->wants[i].pack != k) continue;
    uint32_t at = n++;
    for (; at > 0 && off[at - 1] > r->wants[i].offset; at--) off[at] = off[at - 1], end[at] = end[at - 1];
    off[at] = r->wants[i].offset, end[at] = r->wants[i].offset + r->wants[i].length;
  }
  return n;
}

/* The wanted bytes of the read's pack k, each once (the records' ranges, unioned). */
static uint64_t read_payload_of(const sim_reader *r, uint32_t k) {
  uint64_t off[SIM_READ_WANTS_MAX], end[SIM_READ_WANTS_MAX];
  uint32_t n = read_ranges_of(r, k, off, end);
  uint64_t total = 0, covered = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t from = off[i] > covered ? off[i] : covered;
    if (end[i] > from) total += end[i] - from;
    if (end[i] > covered) covered = end[i];
  }
  return total;
}

/*
 * The plan's totals are what its budget is judged by and what the reader is
 * told it costs: its requests are its reads, its bytes their lengths, its
 * payload the records' bytes each counted once, its footer bytes each pack's
 * [F, size), every pack of the read once.
 */
static void check_read_accounting(sim_world *w, const sim_reader *r) {
  uint64_t bytes = 0, payload = 0, footers = 0;
  for (uint32_t s = 0; s < r->plan.span_count && s < SIM_READ_SPANS_MAX; s++) bytes += r->spans[s].length;
  for (uint32_t k = 0; k < r->pack_count; k++) {
    payload += read_payload_of(r, k);
    footers += r->packs[k].size_bytes - r->packs[k].footer_offset;
  }
  const cs_read_plan *p = &r->plan;
  if (p->requests != p->span_count || p->bytes != bytes || p->payload_bytes != payload || p->footer_bytes != footers ||
      p->pack_count != r->pack_count || p->want_count != r->want_count)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": its plan counts %" PRIu64 " requests, %" PRIu64 " bytes (%"
             PRIu64 " of payload, %" PRIu64 " of footers) over %u packs; it has %u reads of %" PRIu64 " bytes, its %u"
             " records hold %" PRIu64 " bytes and its %u packs' footers %" PRIu64 " " READ_INV_3, r->index, r->read_id,
             p->requests, p->bytes, p->payload_bytes, p->footer_bytes, p->pack_count, p->span_count, bytes,
             r->want_count, payload, r->pack_count, footers);
}

/*
 * docs/reader.md "Plan", steps 2 and 3: a pack's records are read in runs,
 * in offset order, a run taking the next record when they overlap or touch,
 * or when the gap is at most gap_bytes_max and the run stays within
 * span_bytes_max (0: no bound); the footer and trailer [F, size) join the
 * last run on the same terms. A plan's requests and bytes are exactly those
 * runs'; whole objects are one read each.
 */
static bool read_run_takes(const cs_read_limits *limits, uint64_t run_off, uint64_t run_end, uint64_t off, uint64_t end) {
  if (off <= run_end) return true;
  if (off - run_end > limits->gap_bytes_max) return false;
  uint64_t merged = end > run_end ? end : run_end;
  return limits->span_bytes_max == 0 || merged - run_off <= limits->span_bytes_max;
}

static void check_read_merging(sim_world *w, const sim_reader *r) {
  uint64_t requests = 0, bytes = 0, gap = r->limits.gap_bytes_max;
  for (uint32_t k = 0; k < r->pack_count; k++) {
    const cs_read_pack *p = &r->packs[k];
    if (r->limits.whole_objects) {
      requests++, bytes += p->size_bytes;
      continue;
    }
    uint64_t off[SIM_READ_WANTS_MAX + 1], end[SIM_READ_WANTS_MAX + 1];
    uint32_t n = read_ranges_of(r, k, off, end);
    off[n] = p->footer_offset, end[n] = p->size_bytes; /* the tail comes last: F is past every record */
    uint64_t run_off = off[0], run_end = end[0];
    for (uint32_t i = 1; i <= n; i++) {
      if (read_run_takes(&r->limits, run_off, run_end, off[i], end[i])) {
        if (end[i] > run_end) run_end = end[i];
        continue;
      }
      requests++, bytes += run_end - run_off;
      run_off = off[i], run_end = end[i];
    }
    requests++, bytes += run_end - run_off;
  }
  if (r->plan.requests != requests || r->plan.bytes != bytes)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": its plan takes %" PRIu64 " requests and %" PRIu64 " bytes; its"
             " %u records in %u packs merged at gaps up to %" PRIu64 " bytes (span bound %" PRIu64 ")%s take %" PRIu64 " and %" PRIu64
             " " READ_INV_3, r->index, r->read_id, r->plan.requests,
             r->plan.bytes, r->want_count, r->pack_count, gap, r->limits.span_bytes_max,
             r->limits.whole_objects ? " (whole objects)" : "",
             requests, bytes);
}

/* A refusal says how much the plan needs and by how much it is over the limit it passed (read_plan.h). */
static void check_read_refusal_msg(sim_world *w, const sim_reader *r) {
  bool bytes_over = r->plan.bytes > r->limits.byte_limit;
  uint64_t need = bytes_over ? r->plan.bytes : r->plan.requests;
  uint64_t over = bytes_over ? r->plan.bytes - r->limits.byte_limit : r->plan.requests - r->limits.request_limit;
  char a[32], b[48];
  snprintf(a, sizeof a, "%" PRIu64 " ", need);
  snprintf(b, sizeof b, "%" PRIu64 " %sover", over, bytes_over ? "bytes " : "");
  if (strstr(r->plan_msg, a) == NULL || strstr(r->plan_msg, b) == NULL)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": its plan needs %" PRIu64 " %s, %" PRIu64 " over its limit, but"
             " the refusal says \"%s\" " READ_INV_4, r->index, r->read_id, need, bytes_over ? "bytes" : "requests", over,
             r->plan_msg);
}

/* A plan over its budget is refused (and filled as an estimate); one within it is not. */
void sim_check_read_plan(sim_world *w, const sim_reader *r) {
  if (r->over_budget && r->plan_rc != CS_E_TOO_LARGE)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": a plan of %" PRIu64 " requests and %" PRIu64 " bytes, over its"
             " request limit %" PRIu64 " or byte limit %" PRIu64 ", was not refused (%s) " READ_INV_4, r->index, r->read_id,
             r->estimate_requests, r->estimate_bytes, r->limits.request_limit, r->limits.byte_limit,
             cs_strerror(r->plan_rc));
  if (!r->over_budget && r->plan_rc != CS_E_OK)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": a plan of %" PRIu64 " requests and %" PRIu64 " bytes, within"
             " its request limit %" PRIu64 " and byte limit %" PRIu64 ", was refused (%s) " READ_INV_4, r->index,
             r->read_id, r->estimate_requests, r->estimate_bytes, r->limits.request_limit, r->limits.byte_limit,
             cs_strerror(r->plan_rc));
  check_read_accounting(w, r);
  check_read_merging(w, r);
  if (r->plan_rc == CS_E_TOO_LARGE) check_read_refusal_msg(w, r);
  if (r->plan.requests != r->estimate_requests || r->plan.bytes != r->estimate_bytes)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 ": its plan (%" PRIu64 " requests, %" PRIu64 " bytes) is not its"
             " estimate (%" PRIu64 ", %" PRIu64 ") " READ_INV_3, r->index, r->read_id, r->plan.requests, r->plan.bytes,
             r->estimate_requests, r->estimate_bytes);
}

/* A GET about to leave (counted already): its read was not refused, and stays within its plan and its budget. */
void sim_check_read_get(sim_world *w, const sim_reader *r, uint32_t span) {
  if (r->plan_rc != CS_E_OK)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " was refused for its budget (%s) but sent GET %" PRIu64
             " (span %u) " READ_INV_4, r->index, r->read_id, cs_strerror(r->plan_rc), r->issued, span);
  if (span >= r->plan.span_count || r->issued > r->plan.requests || r->issued > r->limits.request_limit)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " sent GET %" PRIu64 " (span %u): its plan has %" PRIu64
             " requests, its request limit is %" PRIu64 " " READ_INV_3, r->index, r->read_id, r->issued, span,
             r->plan.requests, r->limits.request_limit);
  if (r->failed_seen)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " sent GET %" PRIu64 " (span %u) after one of its GETs failed: a"
             " failed read sends nothing more " READ_INV_3, r->index, r->read_id, r->issued, span);
  const cs_read_span *sp = &r->spans[span];
  uint64_t size = sp->pack < r->pack_count ? r->packs[sp->pack].size_bytes : 0;
  if (sp->pack >= r->pack_count || sp->offset > size || sp->length > size - sp->offset)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " sent GET %" PRIu64 " for bytes %" PRIu64 "-%" PRIu64 " of a pack"
             " of %" PRIu64 " bytes " READ_INV_3, r->index, r->read_id, r->issued, sp->offset, sp->offset + sp->length,
             size);
  if (r->issued_bytes > r->plan.bytes || r->issued_bytes > r->limits.byte_limit)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " asked for %" PRIu64 " bytes by GET %" PRIu64 ": its plan reads %"
             PRIu64 ", its byte limit is %" PRIu64 " " READ_INV_3, r->index, r->read_id, r->issued_bytes, r->issued,
             r->plan.bytes, r->limits.byte_limit);
  if (r->inflight > r->inflight_max)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " has %u GETs in flight, over its bound of %u " READ_INV_3,
             r->index, r->read_id, r->inflight, r->inflight_max);
}

/* What span s's GET came back with, in words, or NULL when it returned its pack's own bytes. */
static const char *answer_wrong(const sim_read_answer *a) {
  if (!a->answered) return "no answer";
  if (a->outcome != CS_OUT_OK) return cs_outcome_name(a->outcome);
  return a->true_bytes ? NULL : "other bytes";
}

/* Each record asked for comes back exactly once, with the bytes its pack holds at its place. */
static void check_read_records(sim_world *w, const sim_reader *r) {
  char id[CS_UUID_TEXT_LEN + 1];
  if (r->result_overflow)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " returned more records than the %u it asked for " READ_INV_1,
             r->index, r->read_id, r->want_count);
  for (uint32_t k = 0; k < r->result_count; k++) {
    const sim_read_record *rec = &r->result[k];
    uint64_t capture = r->want_capture[rec->want];
    uint32_t pack = r->pack_truth[r->wants[rec->want].pack];
    uint64_t offset, length;
    sim_pack_layout(w, pack, (uint32_t)(capture - w->packs[pack].capture_first), &offset, &length);
    if (!rec->src_true || rec->src_pack != pack || !rec->in_span || rec->offset != offset || rec->length != length)
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " returned record %" PRIu64 " with bytes that are not the ones"
               " captured (%s of pack %s, bytes %" PRIu64 "-%" PRIu64 "%s; captured at %" PRIu64 "-%" PRIu64 ") " READ_INV_2,
               r->index, r->read_id, capture, rec->src_true ? "its own bytes" : "other bytes", pack_name(w, pack, id),
               rec->offset, rec->offset + rec->length, rec->in_span ? "" : ", outside the range read", offset,
               offset + length);
  }
  for (uint32_t i = 0; i < r->want_count; i++) {
    uint32_t times = 0;
    for (uint32_t k = 0; k < r->result_count; k++) times += r->result[k].want == i;
    if (times != 1)
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " at W=%" PRIu64 " returned record %" PRIu64 " (of pack %s) %u"
               " times; it asked for it once (%u records returned of %u) " READ_INV_1, r->index, r->read_id,
               r->watermark, r->want_capture[i], pack_name(w, r->pack_truth[r->wants[i].pack], id), times,
               r->result_count, r->want_count);
  }
}

/*
 * The read's end: data only when every GET returned its pack's own bytes,
 * and then the records asked for, each once, byte for byte as captured;
 * an error only when a GET failed or returned other bytes (or none).
 */
void sim_check_read_done(sim_world *w, const sim_reader *r, int rc) {
  char id[CS_UUID_TEXT_LEN + 1];
  if (r->issued > r->plan.requests)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " sent %" PRIu64 " GETs; its plan has %" PRIu64 " " READ_INV_3,
             r->index, r->read_id, r->issued, r->plan.requests);
  if (r->inflight != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " ended with %u of its GETs still in flight (their bytes not yet"
             " read) " READ_INV_2, r->index, r->read_id, r->inflight);
  uint32_t wrong = SIM_NONE, unsent = 0;
  for (uint32_t s = 0; s < r->plan.span_count; s++) {
    if (!r->answers[s].sent) unsent++;
    else if (answer_wrong(&r->answers[s]) != NULL && wrong == SIM_NONE) wrong = s;
  }
  if (rc == CS_E_OK) {
    if (wrong != SIM_NONE || unsent != 0) {
      uint32_t s = wrong != SIM_NONE ? wrong : 0;
      sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " returned data although its GET of pack %s bytes %" PRIu64
               "-%" PRIu64 " came back with %s (%u reads never sent) " READ_INV_2, r->index, r->read_id,
               pack_name(w, r->pack_truth[r->spans[s].pack], id), r->spans[s].offset,
               r->spans[s].offset + r->spans[s].length,
               wrong != SIM_NONE ? answer_wrong(&r->answers[wrong]) : "nothing", unsent);
    }
    check_read_records(w, r);
    return;
  }
  if (wrong == SIM_NONE && unsent == 0)
    sim_bail(w, SIM_EXIT_SAFETY, "r%u's read %" PRIu64 " failed (%s) although every one of its %u GETs returned its"
             " pack's own bytes " READ_INV_2, r->index, r->read_id, cs_strerror(rc), r->plan.span_count);
}

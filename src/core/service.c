/*
 * The service core: upload, verify, index under a fenced lease, reconcile,
 * flush and stop, as one pure step function (DESIGN.md section 6).
 *
 * Three lanes share the request table: the cycle (upload -> index -> publish
 * -> confirm, or a reconcile page), the lease (claim, renew, release: on its
 * own timer, never behind cycle work) and the spool (removals and quarantines
 * once a pack is handed off or set aside).
 */
#include "service_internal.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* ---- small helpers ---------------------------------------------------- */

bool cs_svc_is_publisher(const cs_service *svc) { return svc->cfg.role == CS_ROLE_PUBLISHER; }

/* "what outcome: detail": the outcome before the detail, which a key of up to 1,023 bytes may cut off. */
void cs_svc_set_error(cs_service *svc, const char *what, const char *detail, cs_outcome outcome) {
  if (outcome == CS_OUT_OK)
    snprintf(svc->stats.last_error, sizeof svc->stats.last_error, "%s: %s", what, detail != NULL ? detail : "");
  else
    snprintf(svc->stats.last_error, sizeof svc->stats.last_error, "%s %s: %s", what, cs_outcome_name(outcome),
             detail != NULL ? detail : "");
}

uint32_t cs_svc_slot_index(const cs_service *svc, const pack_slot *slot) {
  assert(slot >= svc->slots && slot < svc->slots + svc->slot_count);
  return (uint32_t)(slot - svc->slots);
}

pack_slot *cs_svc_slot_find(cs_service *svc, const cs_uuid *pack_id) {
  for (uint32_t i = 0; i < svc->slot_count; i++) {
    pack_slot *slot = &svc->slots[i];
    if (slot->stage != STAGE_FREE && cs_uuid_equal(&slot->ref.pack_id, pack_id)) return slot;
  }
  return NULL;
}

/* Own packs use the first spool_packs_max slots; adopted ones the rest. */
pack_slot *cs_svc_slot_alloc(cs_service *svc, bool own) {
  uint32_t first = own ? 0 : svc->cfg.spool_packs_max;
  uint32_t end = own ? svc->cfg.spool_packs_max : svc->slot_count;
  for (uint32_t i = first; i < end; i++) {
    if (svc->slots[i].stage == STAGE_FREE) {
      memset(&svc->slots[i], 0, sizeof svc->slots[i]);
      if (own) svc->own_used++;
      else svc->adopted_used++;
      svc->slots[i].own = own;
      return &svc->slots[i];
    }
  }
  return NULL;
}

void cs_svc_slot_free(cs_service *svc, pack_slot *slot) {
  assert(slot->stage != STAGE_FREE);
  assert(!slot->busy);
  if (slot->own) {
    assert(svc->own_used > 0);
    svc->own_used--;
  } else {
    assert(svc->adopted_used > 0);
    svc->adopted_used--;
  }
  cs_svc_stage_set(svc, slot, STAGE_FREE);
}

void cs_svc_stage_set(cs_service *svc, pack_slot *slot, pack_stage stage) {
  assert((unsigned)stage < STAGE_COUNT_ && slot->stage < STAGE_COUNT_);
  if (slot->stage != STAGE_FREE) {
    assert(svc->stage_count[slot->stage] > 0);
    svc->stage_count[slot->stage]--;
  }
  slot->stage = (uint8_t)stage;
  if (stage != STAGE_FREE) svc->stage_count[stage]++;
}

uint32_t cs_svc_stage_count(const cs_service *svc, pack_stage stage) { return svc->stage_count[stage]; }

uint32_t cs_svc_owed_count(const cs_service *svc) {
  return svc->stage_count[STAGE_OWED] + svc->stage_count[STAGE_INDEXED];
}

bool cs_svc_lease_usable(const cs_service *svc, uint64_t now_ns) {
  return svc->lease == CS_LEASE_HELD && now_ns < svc->lease_expires_ns;
}

/* ---- requests ----------------------------------------------------------- */

request *cs_svc_req_alloc(cs_service *svc, cs_op op, req_lane lane, uint32_t slot, uint64_t now_ns) {
  for (uint32_t i = 0; i < svc->request_max; i++) {
    request *req = &svc->requests[i];
    if (req->id != 0) continue;
    req->id = svc->next_request_id++;
    req->op = op;
    req->lane = lane;
    req->slot = slot;
    req->sent_ns = now_ns;
    svc->stats.requests++;
    svc->stats.inflight++;
    if (svc->stats.inflight > svc->stats.inflight_max_seen)
      svc->stats.inflight_max_seen = svc->stats.inflight;
    return req;
  }
  assert(!"request table sized at init must never run out");
  return NULL;
}

static request *cs_svc_req_find(cs_service *svc, uint64_t id) {
  if (id == 0) return NULL;
  for (uint32_t i = 0; i < svc->request_max; i++)
    if (svc->requests[i].id == id) return &svc->requests[i];
  return NULL;
}

void cs_svc_req_free(cs_service *svc, request *req) {
  assert(req->id != 0 && svc->stats.inflight > 0);
  req->id = 0;
  svc->stats.inflight--;
}

uint32_t cs_svc_lane_inflight(const cs_service *svc, req_lane lane, bool store_only) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < svc->request_max; i++) {
    const request *req = &svc->requests[i];
    if (req->id == 0 || req->lane != lane) continue;
    if (store_only && req->op != CS_OP_STORE_PUT && req->op != CS_OP_STORE_HEAD) continue;
    n++;
  }
  return n;
}

void cs_svc_action_init(cs_action *out, const request *req) {
  memset(out, 0, sizeof *out);
  out->id = req->id;
  out->op = req->op;
}

/* ---- notifications, flushes, the rejected list -------------------------- */

static void cs_svc_note_push(cs_service *svc, const cs_action *note) {
  assert(svc->note_count < svc->note_max);
  uint32_t at = (svc->note_head + svc->note_count) % svc->note_max;
  svc->notes[at] = *note;
  svc->note_count++;
}

/*
 * Entries are taken in order and never freed (a full list reuses a recorded
 * one in place): the ones in use are exactly rejected[0, rejected_len), and
 * every scan stops there. Scanning all of rejected_max per listed key and
 * per poll cost 96% of a reconciling publisher's time with rejected_max
 * 65536 (simulator seed 2694 --replicas 2).
 */
static rejected_entry *rejected_find(const cs_service *svc, const cs_uuid *pack_id) {
  for (uint32_t k = 0; k < svc->rejected_len; k++)
    if (svc->rejected[k].seq != 0 && cs_uuid_equal(&svc->rejected[k].pack_id, pack_id)) return &svc->rejected[k];
  return NULL;
}

bool cs_svc_rejected_has(const cs_service *svc, const cs_uuid *pack_id) { return rejected_find(svc, pack_id) != NULL; }

void cs_svc_rejected_mark_recorded(cs_service *svc, const cs_uuid *pack_id) {
  rejected_entry *e = rejected_find(svc, pack_id);
  if (e != NULL) e->recorded = true;
}

uint32_t cs_svc_rejected_unrecorded(const cs_service *svc) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < svc->rejected_len; k++) n += !svc->rejected[k].recorded;
  return n;
}

/*
 * A free entry, or the oldest one the catalog has recorded (the committed-ids
 * query answers "rejected" for it from then on). NULL when every entry still
 * waits for its rejected row: evicting one of those would forget a pack the
 * catalog does not know was set aside, and reconcile would adopt it again
 * and a second flush name it (simulator seed 5513). An evicted entry no
 * flush named yet is still counted in the next answer.
 */
static rejected_entry *rejected_slot(cs_service *svc) {
  if (svc->rejected_len < svc->cfg.rejected_max) return &svc->rejected[svc->rejected_len];
  rejected_entry *oldest_recorded = NULL;
  for (uint32_t k = 0; k < svc->rejected_len; k++) {
    rejected_entry *e = &svc->rejected[k];
    if (e->recorded && (oldest_recorded == NULL || e->seq < oldest_recorded->seq)) oldest_recorded = e;
  }
  if (oldest_recorded == NULL) return NULL;
  if (!oldest_recorded->reported) svc->rejected_unnamed++;
  svc->rejected_len--;
  return oldest_recorded;
}

/*
 * Remembers a set-aside pack for its rejected row and the next flush. With
 * no room (every entry waiting for its row) the pack is only counted: the
 * next flush reports it in rejected_count without its name, and an adopted
 * one may be adopted and set aside again once rows are recorded.
 */
static void cs_svc_rejected_push(cs_service *svc, pack_slot *slot, const char *reason) {
  rejected_entry *e = rejected_slot(svc);
  svc->stats.set_aside++;
  char id_text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&slot->ref.pack_id, id_text);
  snprintf(svc->stats.last_error, sizeof svc->stats.last_error, "set aside %s: %s", id_text, reason);
  if (e == NULL) {
    svc->rejected_unnamed++;
    return;
  }
  e->pack_id = slot->ref.pack_id;
  e->seq = ++svc->rejected_seq;
  e->reported = false;
  e->recorded = !cs_svc_is_publisher(svc);
  svc->rejected_len++;
  assert(svc->rejected_len <= svc->cfg.rejected_max);
}

void cs_svc_set_aside(cs_service *svc, pack_slot *slot, const char *reason) {
  assert(slot->stage == STAGE_OWED || slot->stage == STAGE_UPLOADING || slot->stage == STAGE_INDEXED);
  cs_svc_rejected_push(svc, slot, reason);
  slot->reason = reason;
  slot->queued = false;
  if (!slot->own) {
    /* The object stays in the store; nothing of ours holds it. */
    cs_svc_slot_free(svc, slot);
    return;
  }
  cs_svc_stage_set(svc, slot, STAGE_SET_ASIDE);
  slot->retry_at_ns = 0;
}

/* Own packs sealed at or before boundary_seq that are not yet handed off. */
static uint32_t flush_missing(const cs_service *svc, uint64_t boundary_seq) {
  uint32_t missing = 0;
  for (uint32_t i = 0; i < svc->cfg.spool_packs_max; i++) {
    const pack_slot *slot = &svc->slots[i];
    bool pending = slot->stage == STAGE_SPOOLED || slot->stage == STAGE_UPLOADING ||
                   slot->stage == STAGE_OWED || slot->stage == STAGE_INDEXED;
    if (pending && slot->seal_seq <= boundary_seq) missing++;
  }
#if CAPSTORE_MUTANT == 40 /* packs waiting outside a full table are not missing */
  return missing;
#endif
  if (svc->backlog > 0 && svc->backlog_seq <= boundary_seq) missing += svc->backlog;
  return missing;
}

/* Fills the answer and marks the set-aside packs it names as reported. */
static void flush_result_fill(cs_service *svc, const flush_entry *fl, cs_flush_result *res) {
  memset(res, 0, sizeof *res);
  res->flush_id = fl->id;
  res->missing_packs = flush_missing(svc, fl->boundary_seq);
  res->owed_packs = cs_svc_owed_count(svc);
#if CAPSTORE_MUTANT == 36 /* a flush that is not drained does not say what is missing */
  if (res->missing_packs + res->owed_packs > 0) res->missing_packs = res->owed_packs = 0, res->err = CS_E_TIMEOUT;
  res->drained = false;
  if (res->err == CS_E_TIMEOUT) goto rejected;
#endif
#if CAPSTORE_MUTANT == 26 /* drained while packs are still owed to the catalog */
  res->drained = res->missing_packs == 0;
#else
  res->drained = res->missing_packs == 0 && res->owed_packs == 0;
#endif
  res->err = res->drained ? CS_E_OK : CS_E_TIMEOUT;
#if CAPSTORE_MUTANT == 36
rejected:
#endif
  res->rejected_count = svc->rejected_unnamed;
  svc->rejected_unnamed = 0;
  for (uint32_t k = 0; k < svc->rejected_len; k++) {
    rejected_entry *rej = &svc->rejected[k];
    if (rej->reported) continue;
#if CAPSTORE_MUTANT == 18 /* a set-aside pack is marked reported without being reported */
    rej->reported = true;
    continue;
#endif
    /* Counted now, named while there is room: either way reported (seeds 60006204, 60009554 counted
       the ones past CS_FLUSH_REJECTED_MAX again in every later flush). */
    res->rejected_count++;
    rej->reported = true;
    if (res->rejected_named < CS_FLUSH_REJECTED_MAX) res->rejected[res->rejected_named++] = rej->pack_id;
  }
}

/* Answers every flush that is drained, or whose deadline has come. */
static void flushes_check(cs_service *svc, uint64_t now_ns) {
  for (uint32_t i = 0; i < svc->cfg.flush_max; i++) {
    flush_entry *fl = &svc->flushes[i];
    if (!fl->active) continue;
    bool drained = flush_missing(svc, fl->boundary_seq) == 0 && cs_svc_owed_count(svc) == 0;
    bool due = now_ns >= fl->deadline_ns;
#if CAPSTORE_MUTANT == 4 /* flush without deadline */
    due = false;
#endif
    if (!drained && !due) continue;
    if (svc->note_count + 1 >= svc->note_max) return; /* answered after the next poll */
    cs_action note;
    memset(&note, 0, sizeof note);
    note.op = CS_OP_FLUSH_DONE;
    flush_result_fill(svc, fl, &note.flush);
    fl->active = false;
    cs_svc_note_push(svc, &note);
  }
}

/* One note slot stays free for STOPPED; flush answers use the rest. */
static bool note_room_for_flush(const cs_service *svc) { return svc->note_count + 1 < svc->note_max; }

static int flush_begin(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  if (!note_room_for_flush(svc)) return CS_E_FULL; /* answers wait to be polled */
  cs_action note;
  memset(&note, 0, sizeof note);
  note.op = CS_OP_FLUSH_DONE;
  note.flush.flush_id = ev->id;
  if (svc->stopping) {
    note.flush.err = CS_E_CLOSED;
    cs_svc_note_push(svc, &note);
    return CS_E_OK;
  }
  for (uint32_t i = 0; i < svc->cfg.flush_max; i++) {
    flush_entry *fl = &svc->flushes[i];
    if (fl->active) continue;
    fl->active = true;
    fl->id = ev->id;
    fl->deadline_ns = ev->deadline_ns;
    fl->boundary_seq = svc->next_seal_seq - 1;
    flushes_check(svc, now_ns);
    return CS_E_OK;
  }
  note.flush.err = CS_E_FULL;
  cs_svc_note_push(svc, &note);
  return CS_E_OK;
}


/* ---- events ------------------------------------------------------------- */

/* n more own packs wait outside the table; the first ones take a seal sequence now. */
static void backlog_add(cs_service *svc, uint32_t n) {
  if (n == 0) return;
  if (svc->backlog == 0) svc->backlog_seq = svc->next_seal_seq++;
  svc->backlog = n > UINT32_MAX - svc->backlog ? UINT32_MAX : svc->backlog + n;
}

static int sealed_admit(cs_service *svc, uint64_t now_ns, const cs_event *ev, pack_slot **made);

/*
 * A refused pack joins the backlog (once: a re-report refused again is
 * already counted); an admitted re-report leaves it, taking the backlog's
 * seal sequence, which is at or before its own.
 */
static int on_sealed(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  pack_slot *made = NULL;
  int rc = sealed_admit(svc, now_ns, ev, &made);
  if (rc == CS_E_FULL && !ev->backlog) backlog_add(svc, 1);
  if (rc == CS_E_OK && ev->backlog && svc->backlog > 0) {
    svc->backlog--;
    if (made != NULL && made->seal_seq > svc->backlog_seq) made->seal_seq = svc->backlog_seq;
  }
  return rc;
}

static int sealed_admit(cs_service *svc, uint64_t now_ns, const cs_event *ev, pack_slot **made) {
  if (svc->stopping) return CS_E_CLOSED;
  if (ev->pack == NULL || ev->pack->key_len == 0 || ev->pack->key_len >= CS_KEY_MAX)
    return CS_E_INVALID_ARGUMENT;
  pack_slot *known = cs_svc_slot_find(svc, &ev->pack->pack_id);
  if (known != NULL && known->own) return CS_E_OK; /* sealing twice is a no-op */
  if (known != NULL && (known->stage != STAGE_OWED || known->queued || known->busy)) {
    /*
     * Reconcile adopted it and a cycle is carrying it: the cycle goes on with
     * the adopted slot, and its hand-off also removes the pack from our spool
     * (moving it to an own slot here freed a slot the cycle's work list still
     * named: a recovered pack reported after reconcile adopted it, seen live).
     */
    known->in_spool = true;
    return CS_E_OK;
  }
  bool was_adopted = known != NULL;
  if (known != NULL) {
    /* Reconcile adopted it from the bucket; it is in our spool too: track it as ours. */
    if (svc->own_used >= svc->cfg.spool_packs_max) return CS_E_FULL;
    cs_svc_stage_set(svc, known, STAGE_FREE);
    svc->adopted_used--;
  }
  pack_slot *slot = cs_svc_slot_alloc(svc, true);
  if (slot == NULL) return CS_E_FULL;
  slot->ref = *ev->pack;
  cs_svc_stage_set(svc, slot, STAGE_SPOOLED);
#if CAPSTORE_MUTANT == 43 /* a pack handed in mid-run (recovered, after the first cycle) is sent without a HEAD */
  slot->maybe_uploaded = (ev->recovered && svc->stats.cycles == 0) || was_adopted;
#else
  slot->maybe_uploaded = ev->recovered || was_adopted; /* then HEAD before any PUT */
#endif
  slot->seal_seq = svc->next_seal_seq++;
  slot->sealed_at_ns = now_ns;
  svc->stats.spooled++;
  *made = slot;
  assert(slot->ref.key[slot->ref.key_len] == '\0');
  return CS_E_OK;
}

static int on_done(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  request *req = cs_svc_req_find(svc, ev->id);
  if (req == NULL) return CS_E_INVALID_ARGUMENT;
  if ((unsigned)ev->outcome >= (unsigned)CS_OUT_COUNT_) return CS_E_INVALID_ARGUMENT;
  request copy = *req;
  cs_svc_req_free(svc, req);
  switch (copy.lane) {
  case LANE_LEASE: cs_svc_lease_on_done(svc, now_ns, &copy, ev); break;
  case LANE_SPOOL: cs_svc_spool_on_done(svc, now_ns, &copy, ev); break;
  case LANE_CYCLE: cs_svc_cycle_on_done(svc, now_ns, &copy, ev); break;
  }
  return CS_E_OK;
}

int cs_service_on_event(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  assert(svc != NULL);
  if (ev == NULL) return CS_E_INVALID_ARGUMENT;
  if (now_ns > svc->last_now_ns) svc->last_now_ns = now_ns;
  int rc = CS_E_OK;
  switch (ev->kind) {
  case CS_EV_START:
    if (svc->started) return CS_E_STATE;
    svc->started = true;
    if (cs_svc_is_publisher(svc)) {
      /* Without the start pass the first one comes after the interval (none when it is 0). */
      uint64_t interval = svc->cfg.reconcile_interval_ns;
      svc->reconcile_due = svc->cfg.reconcile_at_start;
      if (!svc->cfg.reconcile_at_start && interval != 0)
        svc->reconcile_next_ns = interval > CS_NEVER - 1 - now_ns ? CS_NEVER - 1 : now_ns + interval;
      svc->lease_next_ns = now_ns;
    }
    break;
  case CS_EV_SEALED: rc = on_sealed(svc, now_ns, ev); break;
  case CS_EV_DONE: rc = on_done(svc, now_ns, ev); break;
  case CS_EV_FLUSH: rc = flush_begin(svc, now_ns, ev); break;
  case CS_EV_STOP: svc->stopping = true; break;
  case CS_EV_RELEASE: svc->release_wanted = true; break;
  case CS_EV_BACKLOG: backlog_add(svc, ev->key_count); break;
  default: return CS_E_INVALID_ARGUMENT;
  }
  flushes_check(svc, now_ns);
  return rc;
}

/* ---- poll, deadlines, snapshot ----------------------------------------- */

static bool note_pop(cs_service *svc, cs_action *out) {
  if (svc->note_count == 0) return false;
  *out = svc->notes[svc->note_head];
  svc->note_head = (svc->note_head + 1) % svc->note_max;
  svc->note_count--;
  return true;
}

static bool stop_check(cs_service *svc, cs_action *out) {
  if (!svc->stopping || svc->stopped) return false;
  if (svc->phase != PHASE_IDLE) return false;
  if (cs_svc_lane_inflight(svc, LANE_CYCLE, false) != 0 || cs_svc_lane_inflight(svc, LANE_SPOOL, false) != 0)
    return false;
  svc->stopped = true;
  memset(out, 0, sizeof *out);
  out->op = CS_OP_STOPPED;
  return true;
}

bool cs_service_poll(cs_service *svc, uint64_t now_ns, cs_action *out) {
  assert(svc != NULL && out != NULL);
  if (now_ns > svc->last_now_ns) svc->last_now_ns = now_ns;
  flushes_check(svc, now_ns);
  if (note_pop(svc, out)) return true;
  if (!svc->started) return false;
  if (cs_svc_lease_poll(svc, now_ns, out)) return true;
  if (cs_svc_spool_poll(svc, now_ns, out)) return true;
  if (cs_svc_cycle_poll(svc, now_ns, out)) return true;
  /* The cycle may have just handed off or set aside packs: their spool work is due now. */
  if (cs_svc_spool_poll(svc, now_ns, out)) return true;
  return stop_check(svc, out);
}

static uint64_t min_ns(uint64_t a, uint64_t b) { return a < b ? a : b; }

uint64_t cs_service_next_deadline(const cs_service *svc) {
  assert(svc != NULL);
  uint64_t at = CS_NEVER;
  if (svc->note_count > 0) return 0;
  for (uint32_t i = 0; i < svc->cfg.flush_max; i++)
    if (svc->flushes[i].active) at = min_ns(at, svc->flushes[i].deadline_ns);
  if (!svc->started) return at;
  at = min_ns(at, cs_svc_lease_deadline(svc));
  at = min_ns(at, cs_svc_cycle_deadline(svc));
  at = min_ns(at, cs_svc_spool_deadline(svc));
  return at;
}

void cs_service_snapshot(const cs_service *svc, uint64_t now_ns, cs_snapshot *out) {
  assert(svc != NULL && out != NULL);
  *out = svc->stats;
  out->pending_index = cs_svc_owed_count(svc);
  out->pending_spool = svc->own_used;
  out->lease_state = svc->lease;
  out->lease_term = svc->lease_term;
  out->watermark = svc->lease_watermark;
  out->rejected_count = svc->rejected_len;
  out->backlog = svc->backlog;
  uint64_t oldest = CS_NEVER;
  for (uint32_t i = 0; i < svc->cfg.spool_packs_max; i++) {
    const pack_slot *slot = &svc->slots[i];
    if (slot->stage == STAGE_FREE || slot->stage == STAGE_DONE || slot->stage == STAGE_SET_ASIDE)
      continue;
    oldest = min_ns(oldest, slot->sealed_at_ns);
  }
  out->oldest_unshipped_age_ns = (oldest == CS_NEVER || oldest > now_ns) ? 0 : now_ns - oldest;
}

bool cs_service_stopped(const cs_service *svc) { return svc->stopped; }

void cs_service_usage_get(const cs_service *svc, cs_service_usage *out) {
  assert(svc != NULL && out != NULL);
  memset(out, 0, sizeof *out);
  out->packs_used = svc->own_used + svc->adopted_used;
  out->packs_max = svc->slot_count;
  out->owed_used = cs_svc_owed_count(svc);
  out->owed_max = svc->cfg.cycle_packs_max;
  out->inflight_used = svc->stats.inflight;
  out->inflight_max = svc->request_max;
  for (uint32_t i = 0; i < svc->cfg.flush_max; i++) out->flush_used += svc->flushes[i].active;
  out->flush_max = svc->cfg.flush_max;
}

const char *cs_op_name(cs_op op) {
  static const char *const names[CS_OP_COUNT_] = {
      "none",        "store_put",   "store_head",       "store_list",      "spool_remove",
      "spool_quarantine", "cat_head", "cat_claim",      "cat_read_claims", "cat_release",
      "cat_index",   "cat_publish", "cat_committed",    "cat_reject",      "flush_done",      "stopped",
  };
  if ((unsigned)op >= (unsigned)CS_OP_COUNT_) return "bad_op";
  return names[op];
}

bool cs_op_is_request(cs_op op) { return op > CS_OP_NONE && op < CS_OP_FLUSH_DONE; }

const char *cs_lease_state_name(cs_lease_state state) {
  switch (state) {
  case CS_LEASE_NONE: return "none";
  case CS_LEASE_CLAIMING: return "claiming";
  case CS_LEASE_HELD: return "held";
  case CS_LEASE_BUSY: return "busy";
  case CS_LEASE_QUARANTINED: return "quarantined";
  case CS_LEASE_RELEASED: return "released";
  }
  return "bad_state";
}

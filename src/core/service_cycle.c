/*
 * The service's cycle lane and spool lane.
 *
 * A cycle is one pass of the pipeline: upload a bounded set of spooled packs
 * (HEAD first when they may already be there, PUT, HEAD to verify), then index
 * what is owed in batches under the byte budget, publish the version, and
 * confirm with a committed-ids read before any spool removal. A publisher with
 * packs owed to the catalog uploads nothing new (DESIGN.md 6.4). A reconcile
 * page takes the place of the upload step when a reconcile is due.
 */
#include "service_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static bool sha_equal(const uint8_t a[32], const uint8_t b[32]) { return memcmp(a, b, 32) == 0; }

/* Full-jitter exponential backoff after the given number of consecutive failures. */
static uint64_t backoff_delay(cs_service *svc, uint32_t failures) {
#if CAPSTORE_MUTANT == 2 /* no backoff */
  return 0 * failures;
#endif
  uint32_t shift = failures > 40 ? 40 : failures;
  uint64_t window = svc->cfg.backoff_base_ns << shift;
  if (window > svc->cfg.backoff_cap_ns || (window >> shift) != svc->cfg.backoff_base_ns)
    window = svc->cfg.backoff_cap_ns;
  /* Full jitter: uniform over [0, window]. */
  return cs_prng_below(&svc->prng, window + 1);
}

static uint32_t count_spooled(const cs_service *svc) { return cs_svc_stage_count(svc, STAGE_SPOOLED); }

static void cycle_end(cs_service *svc, uint64_t now_ns, bool failed) {
  assert(cs_svc_lane_inflight(svc, LANE_CYCLE, false) == 0);
  for (uint32_t i = 0; i < svc->work_count; i++) {
    pack_slot *slot = &svc->slots[svc->work[i]];
    if (!slot->queued) continue;
    slot->queued = false;
    if (slot->stage == STAGE_UPLOADING) cs_svc_stage_set(svc, slot, STAGE_SPOOLED);
    if (slot->stage == STAGE_INDEXED) cs_svc_stage_set(svc, slot, STAGE_OWED);
    slot->upload = UPLOAD_NONE;
  }
  svc->work_count = 0;
  svc->batch_count = 0;
  svc->indexed_in_cycle = 0;
  svc->verified_in_cycle = 0;
  svc->id_count = 0;
  svc->phase = PHASE_IDLE;
  svc->cycle_active = false;
  if (failed) {
    svc->stats.cycles_failed++;
    svc->backoff_until_ns = now_ns + backoff_delay(svc, svc->failures);
    if (svc->failures < 64) svc->failures++;
  } else {
    svc->failures = 0;
    svc->backoff_until_ns = 0;
  }
}

/* ---- upload ------------------------------------------------------------- */

/* Takes spooled packs, oldest first, into the cycle's work while it has room (cycle_packs_max). */
static void upload_gather(cs_service *svc) {
  while (svc->work_count < svc->cfg.cycle_packs_max) {
    pack_slot *oldest = NULL;
    for (uint32_t i = 0; i < svc->cfg.spool_packs_max; i++) {
      pack_slot *slot = &svc->slots[i];
      if (slot->stage != STAGE_SPOOLED || slot->queued) continue;
      if (oldest == NULL || slot->seal_seq < oldest->seal_seq) oldest = slot;
    }
    if (oldest == NULL) break;
    oldest->queued = true;
    cs_svc_stage_set(svc, oldest, STAGE_UPLOADING);
    oldest->upload = oldest->maybe_uploaded ? UPLOAD_HEAD_FIRST : UPLOAD_PUT;
    svc->work[svc->work_count++] = cs_svc_slot_index(svc, oldest);
  }
}

static void upload_begin(cs_service *svc) {
  svc->work_count = 0;
  svc->verified_in_cycle = 0;
  upload_gather(svc);
  svc->phase = PHASE_UPLOAD;
}

static bool upload_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  /*
   * A pack sealed while the cycle's first uploads are still on the way joins it: it is indexed and published
   * with them, not a whole cycle later (over a WAN a cycle is many round trips, and a writer's second pack,
   * sealed milliseconds after its first went up, waited for all of them). Only until an upload of the cycle
   * is verified: from then on a publisher's pack is owed, and a PUT never goes out before the catalog took
   * what is owed, as at a cycle's start (cycle_has_work), so a catalog outage never lets uploads run ahead
   * of the index (for an uploader, whose verified packs are not owed, verified_in_cycle is what stops it:
   * a pack sealed after the cycle's first success waits, so that success resets the backoff).
   */
  if (svc->work_count < svc->cfg.cycle_packs_max && svc->verified_in_cycle == 0 && cs_svc_owed_count(svc) == 0 &&
      count_spooled(svc) > 0)
    upload_gather(svc);
  if (cs_svc_lane_inflight(svc, LANE_CYCLE, true) >= svc->cfg.store_inflight_max) return false;
  for (uint32_t i = 0; i < svc->work_count; i++) {
    pack_slot *slot = &svc->slots[svc->work[i]];
    if (slot->stage != STAGE_UPLOADING || slot->upload == UPLOAD_NONE || slot->busy) continue;
    cs_op op = slot->upload == UPLOAD_PUT ? CS_OP_STORE_PUT : CS_OP_STORE_HEAD;
    request *req = cs_svc_req_alloc(svc, op, LANE_CYCLE, svc->work[i], now_ns);
    slot->busy = true;
    cs_svc_action_init(out, req);
    out->pack = &slot->ref;
    return true;
  }
  return false;
}

static bool head_matches(const pack_slot *slot, const cs_event *ev) {
#if CAPSTORE_MUTANT == 23 /* an upload verified by its size alone */
  return ev->head.is_pack && ev->head.size_bytes == slot->ref.size_bytes;
#endif
  return ev->head.is_pack && ev->head.size_bytes == slot->ref.size_bytes &&
         sha_equal(ev->head.sha256, slot->ref.sha256);
}

static void upload_verified(cs_service *svc, pack_slot *slot) {
  svc->stats.uploaded++;
  svc->verified_in_cycle++;
  slot->upload = UPLOAD_NONE;
  slot->maybe_uploaded = true;
  if (!cs_svc_is_publisher(svc)) {
    cs_svc_stage_set(svc, slot, STAGE_DONE); /* an uploader hands off at a verified upload */
    return;
  }
#if CAPSTORE_MUTANT == 1 /* remove before index */
  cs_svc_stage_set(svc, slot, STAGE_DONE);
  return;
#endif
  cs_svc_stage_set(svc, slot, STAGE_OWED);
}

static void upload_failed(cs_service *svc, pack_slot *slot, const cs_event *ev) {
  cs_svc_set_error(svc, "upload", slot->ref.key, ev->outcome);
  if (cs_outcome_maybe_applied(ev->outcome)) slot->maybe_uploaded = true;
  svc->cycle_failed = true;
}

static void upload_on_done(cs_service *svc, pack_slot *slot, const cs_event *ev) {
  upload_step step = (upload_step)slot->upload;
  if (ev->outcome == CS_OUT_OK && step == UPLOAD_PUT) {
    slot->upload = UPLOAD_VERIFY;
    return;
  }
#if CAPSTORE_MUTANT == 24 /* an object already there with our checksum is sent again */
  if (ev->outcome == CS_OUT_OK && head_matches(slot, ev) && step == UPLOAD_HEAD_FIRST) {
    slot->upload = UPLOAD_PUT;
    return;
  }
#endif
  if (ev->outcome == CS_OUT_OK && head_matches(slot, ev)) {
    upload_verified(svc, slot);
    return;
  }
  if (ev->outcome == CS_OUT_OK) {
    /*
     * Other bytes under our key. The key carries the pack id this spool
     * minted, so they are a torn upload of this pack (a store that writes a
     * PUT's body in place keeps what arrived before its sender died): send
     * it again and verify. Only a HEAD verifying a PUT of ours that landed
     * counts against the pack (an outage counts against none, 6.2): after
     * index_attempts_max of those the store keeps other bytes however often
     * the pack is sent (it drops metadata, or rewrites bodies) and the pack
     * is set aside. The first is sent again at once; later ones wait for the
     * next cycle, after a backoff.
     */
    svc->stats.upload_mismatches++;
    if (step == UPLOAD_VERIFY) slot->mismatches++;
    char id_text[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&slot->ref.pack_id, id_text);
    snprintf(svc->stats.last_error, sizeof svc->stats.last_error,
             "upload %s: the store shows other bytes under its key (%" PRIu32 " of %" PRIu32 " after a PUT)",
             id_text, slot->mismatches, svc->cfg.index_attempts_max);
#if CAPSTORE_MUTANT == 39 /* other bytes under its key set the pack aside at once: a torn upload loses it */
    slot->mismatches = svc->cfg.index_attempts_max;
#endif
    if (slot->mismatches >= svc->cfg.index_attempts_max) {
      cs_svc_set_aside(svc, slot, "object in store keeps other bytes");
      return;
    }
    slot->upload = UPLOAD_PUT;
    if (step == UPLOAD_VERIFY && slot->mismatches > 1) {
      slot->maybe_uploaded = true; /* the next cycle looks first */
      svc->cycle_failed = true;
    }
    return;
  }
  if (ev->outcome == CS_OUT_NOT_FOUND && step == UPLOAD_HEAD_FIRST) {
    slot->upload = UPLOAD_PUT;
    return;
  }
  if (step == UPLOAD_PUT && (ev->outcome == CS_OUT_TOO_LARGE || ev->outcome == CS_OUT_INVALID)) {
    cs_svc_set_aside(svc, slot, "store refused the pack");
    return;
  }
  if (step == UPLOAD_VERIFY && ev->outcome == CS_OUT_NOT_FOUND) slot->maybe_uploaded = false;
  upload_failed(svc, slot, ev);
}

/* ---- index, publish, confirm ------------------------------------------- */

/* The catalog holds the pack: our own copy leaves the spool, an adopted one is done. */
static void hand_off(cs_service *svc, pack_slot *slot) {
  slot->queued = false;
  if (!slot->own) {
    /* An adopted pack that is in our spool too leaves it like our own (when the table has room). */
    pack_slot *spooled = slot->in_spool ? cs_svc_slot_alloc(svc, true) : NULL;
    if (spooled != NULL) {
      spooled->ref = slot->ref;
      spooled->seal_seq = svc->next_seal_seq++;
      cs_svc_stage_set(svc, spooled, STAGE_DONE);
    }
    cs_svc_slot_free(svc, slot);
    return;
  }
  cs_svc_stage_set(svc, slot, STAGE_DONE);
  slot->retry_at_ns = 0;
}


static void batches_push(cs_service *svc, uint32_t first, uint32_t count) {
  assert(count > 0);
  assert(svc->batch_count < svc->cfg.cycle_packs_max);
  svc->batches[svc->batch_count].first = first;
  svc->batches[svc->batch_count].count = count;
  svc->batch_count++;
}

/* Greedy batches under the byte budget, stacked so the first is on top. */
static void batches_build(cs_service *svc) {
  uint32_t first = 0;
  svc->batch_count = 0;
  while (first < svc->work_count) {
    uint32_t count = 0;
    uint64_t bytes = 0;
    while (first + count < svc->work_count) {
      uint64_t b = svc->slots[svc->work[first + count]].ref.index_bytes;
#if CAPSTORE_MUTANT == 15 /* a batch may end one pack over the byte budget */
      if (count > 0 && bytes > svc->cfg.index_batch_bytes_max) break;
#else
      if (count > 0 && bytes + b > svc->cfg.index_batch_bytes_max) break;
#endif
      bytes += b;
      count++;
    }
    batches_push(svc, first, count);
    first += count;
  }
  for (uint32_t i = 0, j = svc->batch_count; i < j / 2; i++) {
    batch_range t = svc->batches[i];
    svc->batches[i] = svc->batches[j - 1 - i];
    svc->batches[j - 1 - i] = t;
  }
}

static bool index_begin(cs_service *svc, uint64_t now_ns) {
  if (!cs_svc_lease_usable(svc, now_ns)) return false;
  svc->work_count = 0;
  for (uint32_t i = 0; i < svc->slot_count && svc->work_count < svc->cfg.cycle_packs_max; i++) {
    pack_slot *slot = &svc->slots[i];
    if (slot->stage != STAGE_OWED) continue;
#if CAPSTORE_MUTANT != 5 /* mutant 5: a poison pack parks the queue */
    if (slot->ref.index_bytes > svc->cfg.index_batch_bytes_max) {
      cs_svc_set_aside(svc, slot, "too large for any index batch");
      continue;
    }
#endif
    slot->queued = true;
    svc->work[svc->work_count++] = i;
  }
  if (svc->work_count == 0) return false;
  batches_build(svc);
  svc->version = svc->next_version++;
  svc->cycle_term = svc->lease_held_from_term;
  svc->indexed_in_cycle = 0;
  svc->publish_sent = false;
  svc->confirm_sent = false;
  svc->settle_asked = svc->settle_known = false; /* a read-back is this cycle's, never an earlier one's */
  svc->index_settle_ns = 0;
  svc->phase = PHASE_INDEX;
  return true;
}

/*
 * The cycle's writes stay valid only under the holding its version was
 * chosen in: a lease lost and won back meanwhile may carry a higher
 * watermark. Renewals keep the holding; a cycle that outlasts one (more than
 * TTL/3 of index work) would otherwise fail at every renewal and never publish.
 */
static bool cycle_lease_ok(const cs_service *svc, uint64_t now_ns) {
  return cs_svc_lease_usable(svc, now_ns) && svc->lease_held_from_term == svc->cycle_term &&
         svc->version > svc->lease_watermark;
}

static bool index_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (svc->batch_count == 0 || cs_svc_lane_inflight(svc, LANE_CYCLE, false) != 0) return false;
  if (!cycle_lease_ok(svc, now_ns)) {
    svc->cycle_failed = true;
    return false;
  }
  const batch_range *top = &svc->batches[svc->batch_count - 1];
  for (uint32_t i = 0; i < top->count; i++) {
    pack_slot *slot = &svc->slots[svc->work[top->first + i]];
    assert(slot->stage == STAGE_OWED);
    svc->batch_refs[i] = &slot->ref;
    slot->busy = true;
  }
  request *req = cs_svc_req_alloc(svc, CS_OP_CAT_INDEX, LANE_CYCLE, top->first, now_ns);
  cs_svc_action_init(out, req);
  out->packs = svc->batch_refs;
  out->count = top->count;
  out->version = svc->version;
  out->term = svc->lease_term;
  out->lease_id = svc->lease_id;
  return true;
}

/* Halves the top batch; the first half ends up on top. */
static void batch_split(cs_service *svc, batch_range top) {
#if CAPSTORE_MUTANT == 16 /* a refused batch loses one pack at a time instead of being halved */
  uint32_t half = top.count - 1;
#else
  uint32_t half = top.count / 2;
#endif
  batches_push(svc, top.first + half, top.count - half);
  batches_push(svc, top.first, half);
#if CAPSTORE_MUTANT != 27 /* mutant 27: the snapshot does not count splits */
  svc->stats.batch_splits++;
#endif
}

static void index_refused_one(cs_service *svc, pack_slot *slot, cs_outcome outcome) {
#if CAPSTORE_MUTANT == 17 /* a pack refused alone as too large is retried like a content refusal */
  if (outcome == CS_OUT_COUNT_) {
#else
  if (outcome == CS_OUT_TOO_LARGE) {
#endif
    cs_svc_set_aside(svc, slot, "catalog refused it as too large");
    return;
  }
  slot->attempts++;
#if CAPSTORE_MUTANT == 35 /* a pack the catalog refuses for its content is set aside one attempt early */
  if (slot->attempts + 1 >= svc->cfg.index_attempts_max) {
#else
  if (slot->attempts >= svc->cfg.index_attempts_max) {
#endif
    cs_svc_set_aside(svc, slot, "catalog refused its content");
    return;
  }
  svc->cycle_failed = true; /* back off before trying it again */
}

/*
 * Late rows. An INDEX whose outcome is unknown may still land, at its
 * version. The catalog refuses inventory rows below any it holds or at or
 * below the watermark, so once rows at a higher version have landed the
 * doubtful one can only be refused; one evaluated just before may still land
 * up to an apply delay later, and its answer-less sender cannot tell when.
 * An INDEX's OK does not say its rows landed (a fenced-out or refused INDEX
 * answers OK too), so after a doubt the cycle's PUBLISH first reads CAT_HEAD
 * back: its index_floor at or above the cycle's version says rows above the
 * doubt are in (whoever wrote them), and the PUBLISH waits index_settle_ns
 * (the worst apply delay) from that answer: the doubtful rows land before the
 * watermark passes their version, never after. A floor below the version
 * (the cycle's rows were refused) fails the cycle, the doubt kept
 * (docs/catalog-protocol.md, "Late rows").
 */
static void index_doubt_note(cs_service *svc, uint64_t now_ns, cs_outcome outcome) {
  (void)now_ns;
  bool may_have_applied = outcome == CS_OUT_TIMEOUT || outcome == CS_OUT_UNKNOWN || outcome == CS_OUT_SERVER_ERROR;
  if (may_have_applied && svc->version > svc->index_doubt_version) svc->index_doubt_version = svc->version;
}

/* A doubtful INDEX lies below this cycle's version: its PUBLISH needs the read-back and the wait. */
static bool publish_doubted(const cs_service *svc) {
  return svc->index_doubt_version != 0 && svc->index_doubt_version < svc->version;
}

/* The cycle's PUBLISH waits for a doubtful INDEX's rows to have settled. */
static bool publish_waits(const cs_service *svc, uint64_t now_ns) {
#if CAPSTORE_MUTANT == 61 /* mutant 61: a PUBLISH never waits for a doubtful INDEX */
  (void)svc;
  (void)now_ns;
  return false;
#endif
  return svc->phase == PHASE_PUBLISH && !svc->publish_sent && publish_doubted(svc) && svc->settle_known &&
         now_ns < svc->index_settle_ns;
}

/* The read-back's answer: the wait starts, or the cycle fails (its rows are not in, or the catalog did not say). */
static void settle_on_done(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  if (ev->outcome != CS_OUT_OK) {
    cs_svc_set_error(svc, "settle", "head", ev->outcome);
    svc->cycle_failed = true;
    return;
  }
  if (ev->cat_head.index_floor < svc->version) {
    cs_svc_set_error(svc, "settle", "the cycle's rows are not in the catalog", CS_OUT_REFUSED);
    svc->cycle_failed = true;
    return;
  }
  svc->settle_known = true;
  svc->index_settle_ns = now_ns + svc->cfg.index_settle_ns;
  /*
   * Rows above the cycle's version are someone else's (a predecessor's
   * timed-out quorum INDEX that landed after this holding read its floor,
   * on a replicated catalog): the next cycle goes above them, not into a
   * refusal at each version up to them (mutant 63 does not: caught by the
   * regression seed 621 --replicas 2 --replica-defect 2, a catalog without
   * the successor's barrier).
   */
#if CAPSTORE_MUTANT != 63
  if (ev->cat_head.index_floor >= svc->next_version) svc->next_version = ev->cat_head.index_floor + 1;
#endif
}

static void index_on_done(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  assert(svc->batch_count > 0);
  batch_range top = svc->batches[--svc->batch_count];
  for (uint32_t i = 0; i < top.count; i++) svc->slots[svc->work[top.first + i]].busy = false;
  index_doubt_note(svc, now_ns, ev->outcome);
  if (ev->outcome == CS_OUT_OK) {
    for (uint32_t i = 0; i < top.count; i++) cs_svc_stage_set(svc, &svc->slots[svc->work[top.first + i]], STAGE_INDEXED);
    svc->indexed_in_cycle += top.count;
    return;
  }
  bool content = ev->outcome == CS_OUT_TOO_LARGE || ev->outcome == CS_OUT_INVALID;
  if (!content) {
    cs_svc_set_error(svc, "index", "batch", ev->outcome);
#if CAPSTORE_MUTANT == 10 /* an outage counts against the packs */
    for (uint32_t i = 0; i < top.count; i++) {
      pack_slot *slot = &svc->slots[svc->work[top.first + i]];
      if (++slot->attempts >= svc->cfg.index_attempts_max) cs_svc_set_aside(svc, slot, "outage");
    }
#endif
    svc->cycle_failed = true;
    return;
  }
  cs_svc_set_error(svc, "index", "batch", ev->outcome);
  if (top.count > 1) {
#if CAPSTORE_MUTANT == 12 /* no halving: a refused batch is set aside whole */
    for (uint32_t i = 0; i < top.count; i++)
      cs_svc_set_aside(svc, &svc->slots[svc->work[top.first + i]], "batch refused");
    return;
#endif
    batch_split(svc, top);
    return;
  }
  pack_slot *slot = &svc->slots[svc->work[top.first]];
#if CAPSTORE_MUTANT == 5
  svc->cycle_failed = true;
  return;
#endif
  index_refused_one(svc, slot, ev->outcome);
}

static bool publish_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (svc->publish_sent || svc->indexed_in_cycle == 0) return false;
  if (!cycle_lease_ok(svc, now_ns)) {
    svc->cycle_failed = true;
    return false;
  }
  if (publish_doubted(svc) && !svc->settle_asked) {
    svc->settle_asked = true;
    request *req = cs_svc_req_alloc(svc, CS_OP_CAT_HEAD, LANE_CYCLE, 0, now_ns);
    cs_svc_action_init(out, req);
    out->lease_id = svc->lease_id;
    out->for_cycle = true;
    return true;
  }
  if (publish_doubted(svc) && !svc->settle_known) return false; /* the read-back is on its way */
  if (publish_waits(svc, now_ns)) return false;
  /* A doubtful INDEX below this version has landed or can no longer land. */
  if (svc->index_doubt_version < svc->version) svc->index_doubt_version = 0, svc->index_settle_ns = 0;
  svc->publish_sent = true;
  request *req = cs_svc_req_alloc(svc, CS_OP_CAT_PUBLISH, LANE_CYCLE, 0, now_ns);
  cs_svc_action_init(out, req);
  out->version = svc->version;
  out->term = svc->lease_term;
  out->lease_id = svc->lease_id;
  out->count = svc->indexed_in_cycle;
  return true;
}

static bool confirm_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (svc->confirm_sent) return false;
#if CAPSTORE_MUTANT == 9 /* trust the write's OK: no committed-ids check before removal */
  for (uint32_t i = 0; i < svc->work_count; i++) {
    pack_slot *slot = &svc->slots[svc->work[i]];
    if (slot->stage != STAGE_INDEXED) continue;
    svc->stats.indexed++;
    hand_off(svc, slot);
  }
  (void)now_ns;
  (void)out;
  return false;
#endif
  for (uint32_t i = 0; i < svc->work_count; i++) {
    pack_slot *slot = &svc->slots[svc->work[i]];
    if (slot->stage != STAGE_INDEXED) continue;
    svc->ids[svc->id_count] = slot->ref.pack_id;
    svc->id_slots[svc->id_count] = svc->work[i];
    svc->id_count++;
  }
  if (svc->id_count == 0) return false;
  svc->confirm_sent = true;
  request *req = cs_svc_req_alloc(svc, CS_OP_CAT_COMMITTED, LANE_CYCLE, 0, now_ns);
  cs_svc_action_init(out, req);
  out->ids = svc->ids;
  out->count = svc->id_count;
  return true;
}

static void confirm_on_done(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  uint32_t n = svc->id_count;
  svc->id_count = 0;
  if (ev->outcome != CS_OUT_OK || ev->held == NULL) {
    cs_svc_set_error(svc, "confirm", "committed ids", ev->outcome);
    svc->cycle_failed = true;
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    pack_slot *slot = &svc->slots[svc->id_slots[i]];
    assert(slot->stage == STAGE_INDEXED);
    if (!ev->held[i]) {
      /* Our write was fenced out: someone else holds the lease now. */
      cs_svc_stage_set(svc, slot, STAGE_OWED);
      svc->stats.fenced_out++;
      svc->cycle_failed = true;
      svc->lease_next_ns = now_ns;
      continue;
    }
    svc->stats.indexed++;
    hand_off(svc, slot);
  }
}

/* ---- recording set-aside packs ----------------------------------------- */

/*
 * A set-aside pack gets a fenced "rejected" row, so the committed-ids query
 * answers it as known and no reconcile (of ours after a restart, or of
 * another publisher) adopts it again. Read back like an index.
 */
static bool reject_issue(cs_service *svc, uint64_t now_ns, cs_action *out, cs_op op) {
  bool *sent = op == CS_OP_CAT_REJECT ? &svc->publish_sent : &svc->confirm_sent;
  if (cs_svc_lane_inflight(svc, LANE_CYCLE, false) != 0 || *sent) return false;
  if (op == CS_OP_CAT_REJECT && !cs_svc_lease_usable(svc, now_ns)) {
    svc->cycle_failed = true;
    return false;
  }
  if (op == CS_OP_CAT_REJECT) {
    svc->id_count = 0;
    uint32_t cap = svc->cfg.cycle_packs_max;
    for (uint32_t k = 0; k < svc->rejected_len && svc->id_count < cap; k++) {
      const rejected_entry *e = &svc->rejected[k];
      if (e->recorded) continue;
      svc->ids[svc->id_count] = e->pack_id;
      svc->id_slots[svc->id_count++] = k;
    }
    if (svc->id_count == 0) return false;
  }
  *sent = true;
  request *req = cs_svc_req_alloc(svc, op, LANE_CYCLE, 0, now_ns);
  cs_svc_action_init(out, req);
  out->ids = svc->ids;
  out->count = svc->id_count;
  out->term = svc->lease_term;
  out->lease_id = svc->lease_id;
  return true;
}

static bool reject_wanted(const cs_service *svc, uint64_t now_ns) {
#if CAPSTORE_MUTANT == 29 /* set-aside packs are never recorded as rejected in the catalog */
  return false && now_ns;
#endif
  return cs_svc_is_publisher(svc) && cs_svc_lease_usable(svc, now_ns) && cs_svc_rejected_unrecorded(svc) > 0 &&
         now_ns >= svc->reject_retry_at_ns;
}

static void reject_begin(cs_service *svc) {
  svc->phase = PHASE_REJECT;
  svc->publish_sent = false;
  svc->confirm_sent = false;
  svc->id_count = 0;
}

/* The rejected rows failed: the cycle backs off, and so do the rows, past the cycles that succeed meanwhile. */
static void reject_failed(cs_service *svc, uint64_t now_ns) {
  svc->cycle_failed = true;
#if CAPSTORE_MUTANT == 49 /* rejected rows retried at once after another turn succeeds */
  return;
#endif
  if (svc->reject_failures < 64) svc->reject_failures++;
  svc->reject_retry_at_ns = now_ns + backoff_delay(svc, svc->reject_failures);
}

static void reject_on_done(cs_service *svc, uint64_t now_ns, const cs_event *ev, bool confirm) {
  if (ev->outcome != CS_OUT_OK || (confirm && ev->held == NULL)) {
    cs_svc_set_error(svc, confirm ? "reject read-back" : "reject", "rows", ev->outcome);
    reject_failed(svc, now_ns);
    return;
  }
  if (!confirm) return;
  bool all_took = true;
  for (uint32_t i = 0; i < svc->id_count; i++) {
    rejected_entry *e = &svc->rejected[svc->id_slots[i]];
    bool took = ev->rejected != NULL && ev->rejected[i];
    if (took && e->seq != 0 && cs_uuid_equal(&e->pack_id, &svc->ids[i])) e->recorded = true;
    all_took = all_took && took;
  }
  svc->id_count = 0;
  if (!all_took) { /* fenced out: back off, try again */
    reject_failed(svc, now_ns);
    return;
  }
  svc->reject_failures = 0;
  svc->reject_retry_at_ns = 0;
}

/* ---- standby -------------------------------------------------------------- */

/*
 * A publisher without the lease cannot index, but the holder's reconcile
 * indexes what it uploaded. A read-only committed-ids check (no fence needed)
 * lets it hand those off instead of owing them forever.
 */
static bool standby_wanted(const cs_service *svc, uint64_t now_ns) {
  return cs_svc_is_publisher(svc) && svc->lease == CS_LEASE_BUSY && !cs_svc_lease_usable(svc, now_ns) &&
         svc->stage_count[STAGE_OWED] > 0;
}

static bool standby_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (svc->confirm_sent) return false;
  svc->id_count = 0;
  for (uint32_t i = 0; i < svc->slot_count && svc->id_count < svc->cfg.cycle_packs_max; i++) {
    if (svc->slots[i].stage != STAGE_OWED) continue;
    svc->ids[svc->id_count] = svc->slots[i].ref.pack_id;
    svc->id_slots[svc->id_count++] = i;
  }
  if (svc->id_count == 0) return false;
  svc->confirm_sent = true;
  request *req = cs_svc_req_alloc(svc, CS_OP_CAT_COMMITTED, LANE_CYCLE, 0, now_ns);
  cs_svc_action_init(out, req);
  out->ids = svc->ids;
  out->count = svc->id_count;
  return true;
}

static void standby_on_done(cs_service *svc, const cs_event *ev) {
  bool progress = false;
  if (ev->outcome != CS_OUT_OK || ev->held == NULL) {
    cs_svc_set_error(svc, "standby committed-ids", "owed packs", ev->outcome);
    svc->cycle_failed = true;
    return;
  }
  for (uint32_t i = 0; i < svc->id_count; i++) {
    pack_slot *slot = &svc->slots[svc->id_slots[i]];
    if (slot->stage != STAGE_OWED || !cs_uuid_equal(&slot->ref.pack_id, &svc->ids[i])) continue;
    if (ev->rejected != NULL && ev->rejected[i]) {
      cs_uuid id = slot->ref.pack_id;
      cs_svc_set_aside(svc, slot, "rejected by the lease holder");
      cs_svc_rejected_mark_recorded(svc, &id); /* the holder's row is already there */
      progress = true;
      continue;
    }
    if (!ev->held[i]) continue;
    progress = true;
    hand_off(svc, slot);
  }
  /* Nothing indexed by the holder yet: back off rather than ask again at once. */
  if (!progress) svc->cycle_failed = true;
}

/* ---- the cycle's control flow ------------------------------------------ */

static bool cycle_has_work(const cs_service *svc, uint64_t now_ns) {
  if (!cs_svc_is_publisher(svc)) return count_spooled(svc) > 0;
  bool usable = cs_svc_lease_usable(svc, now_ns);
  if (reject_wanted(svc, now_ns)) return true;
  if (standby_wanted(svc, now_ns)) return true;
  uint32_t owed = cs_svc_owed_count(svc);
  if (owed > 0 && usable) return true;
  if (svc->reconcile_due && usable) return true;
#if CAPSTORE_MUTANT == 8 /* upload while packs are owed */
  return count_spooled(svc) > 0;
#endif
  return owed == 0 && count_spooled(svc) > 0;
}

static void cycle_start(cs_service *svc, uint64_t now_ns) {
  svc->cycle_active = true;
  svc->cycle_failed = false;
  svc->cycle_pages = 0;
  svc->stats.cycles++;
#if CAPSTORE_MUTANT == 3 /* the lease is renewed only when a cycle starts */
  if (svc->lease == CS_LEASE_HELD) svc->lease_renew_at_cycle = true;
#endif
  /*
   * Rows for set-aside packs take turns with the rest. Left to a cycle with
   * nothing else to do, they never came where only poison was left (simulator
   * seed 5254030567055, rejected_max 2): each cycle indexed owed packs and
   * failed on one, and once none was owed the due reconcile adopted again the
   * packs set aside without a name (every entry of the list waiting for its
   * row), so no cycle was ever idle. Taking turns (not first always) keeps a
   * REJECT that keeps failing from starving the healthy packs.
   */
  bool reject_turn = !svc->last_was_reject && reject_wanted(svc, now_ns);
  svc->last_was_reject = reject_turn;
  if (reject_turn) {
    reject_begin(svc);
    return;
  }
  if (cs_svc_is_publisher(svc) && cs_svc_owed_count(svc) > 0 && index_begin(svc, now_ns)) return;
  if (standby_wanted(svc, now_ns)) {
    svc->phase = PHASE_STANDBY;
    svc->confirm_sent = false;
    return;
  }
  /* Reconcile pages and uploads take turns, so neither a big bucket nor a failing LIST starves uploads. */
  bool uploads_wait = count_spooled(svc) > 0 && svc->last_was_reconcile;
  if (cs_svc_is_publisher(svc) && svc->reconcile_due && cs_svc_lease_usable(svc, now_ns) && !uploads_wait) {
    svc->last_was_reconcile = true;
    cs_svc_recon_begin(svc);
    return;
  }
  svc->last_was_reconcile = false;
  if (count_spooled(svc) == 0 && reject_wanted(svc, now_ns)) {
    svc->last_was_reject = true;
    reject_begin(svc);
    return;
  }
  upload_begin(svc);
}

/* The phase has nothing in flight and nothing more to issue: move on. */
static void cycle_advance(cs_service *svc, uint64_t now_ns) {
  bool failed = svc->cycle_failed || svc->stopping;
  switch (svc->phase) {
  case PHASE_UPLOAD:
    if (!failed && cs_svc_is_publisher(svc) && index_begin(svc, now_ns)) return;
    break;
  case PHASE_INDEX:
    if (!failed && svc->indexed_in_cycle > 0) {
      svc->phase = PHASE_PUBLISH;
      return;
    }
    break;
  case PHASE_PUBLISH:
    if (!failed) {
      svc->phase = PHASE_CONFIRM;
      return;
    }
    break;
  case PHASE_CONFIRM:
    /* Packs set aside on the way get their rejected rows before the cycle ends. */
    if (!failed && reject_wanted(svc, now_ns)) {
      reject_begin(svc);
      return;
    }
    break;
  case PHASE_RECON_HEAD:
    /*
     * Adopted packs are indexed before the page goes on, unless the pass can
     * gather more first: the page was not the last, nothing of our own waits
     * to upload, and a cycle's worth is not yet adopted. With small LIST pages
     * a cycle per page adopted a pack or two per cycle (seed 18358).
     */
    if (!failed && cs_svc_owed_count(svc) > 0 && !cs_svc_recon_gather_more(svc, now_ns) && index_begin(svc, now_ns))
      return;
    if (!failed && cs_svc_recon_advance(svc, now_ns)) return;
    if (!failed && cs_svc_owed_count(svc) > 0 && index_begin(svc, now_ns)) return;
    break;
  case PHASE_RECON_LIST:
  case PHASE_RECON_COMMITTED:
    if (!failed && cs_svc_recon_advance(svc, now_ns)) return;
    /* A gather that ends here (the last page, nothing to query) indexes in this cycle too. */
    if (!failed && cs_svc_owed_count(svc) > 0 && index_begin(svc, now_ns)) return;
    break;
  case PHASE_REJECT:
    if (!failed && svc->id_count > 0) {
      svc->phase = PHASE_REJECT_CONFIRM;
      return;
    }
    break;
  case PHASE_REJECT_CONFIRM:
  case PHASE_STANDBY:
  case PHASE_IDLE: break;
  }
  cycle_end(svc, now_ns, svc->cycle_failed);
}

static bool phase_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (svc->cycle_failed || svc->stopping) return false;
  switch (svc->phase) {
  case PHASE_UPLOAD: return upload_issue(svc, now_ns, out);
  case PHASE_INDEX: return index_issue(svc, now_ns, out);
  case PHASE_PUBLISH: return publish_issue(svc, now_ns, out);
  case PHASE_CONFIRM: return confirm_issue(svc, now_ns, out);
  case PHASE_RECON_LIST: return cs_svc_recon_list_issue(svc, now_ns, out);
  case PHASE_RECON_COMMITTED: return cs_svc_recon_committed_issue(svc, now_ns, out);
  case PHASE_RECON_HEAD: return cs_svc_recon_head_issue(svc, now_ns, out);
  case PHASE_REJECT: return reject_issue(svc, now_ns, out, CS_OP_CAT_REJECT);
  case PHASE_REJECT_CONFIRM: return reject_issue(svc, now_ns, out, CS_OP_CAT_COMMITTED);
  case PHASE_STANDBY: return standby_issue(svc, now_ns, out);
  case PHASE_IDLE: break;
  }
  return false;
}

bool cs_svc_cycle_poll(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (cs_svc_is_publisher(svc) && !svc->reconcile_due && svc->reconcile_next_ns != 0 &&
      now_ns >= svc->reconcile_next_ns) {
    svc->reconcile_due = true;
    svc->reconcile_next_ns = 0;
  }
  /* Each turn either issues, waits, or moves the pipeline one phase on. */
  for (uint32_t turn = 0; turn < 12; turn++) {
    if (svc->phase == PHASE_IDLE) {
      if (svc->stopping || now_ns < svc->backoff_until_ns || !cycle_has_work(svc, now_ns)) return false;
      cycle_start(svc, now_ns);
    }
    if (phase_issue(svc, now_ns, out)) return true;
    if (cs_svc_lane_inflight(svc, LANE_CYCLE, false) != 0) return false;
    if (!svc->cycle_failed && !svc->stopping && publish_waits(svc, now_ns)) return false;
    cycle_advance(svc, now_ns);
    if (svc->phase == PHASE_IDLE && svc->backoff_until_ns > now_ns) return false;
  }
  return false;
}

void cs_svc_cycle_on_done(cs_service *svc, uint64_t now_ns, const request *req, const cs_event *ev) {
  switch (req->op) {
  case CS_OP_STORE_PUT:
  case CS_OP_STORE_HEAD:
    if (svc->phase == PHASE_RECON_HEAD) {
      cs_svc_recon_head_on_done(svc, req, ev);
      return;
    }
    svc->slots[req->slot].busy = false;
    upload_on_done(svc, &svc->slots[req->slot], ev);
    return;
  case CS_OP_CAT_INDEX: index_on_done(svc, now_ns, ev); return;
  case CS_OP_CAT_HEAD: settle_on_done(svc, now_ns, ev); return;
  case CS_OP_CAT_PUBLISH:
    if (ev->outcome != CS_OUT_OK) {
      cs_svc_set_error(svc, "publish", "version", ev->outcome);
      svc->cycle_failed = true;
    }
    return;
  case CS_OP_CAT_REJECT: reject_on_done(svc, now_ns, ev, false); return;
  case CS_OP_CAT_COMMITTED:
    if (svc->phase == PHASE_REJECT_CONFIRM) reject_on_done(svc, now_ns, ev, true);
    else if (svc->phase == PHASE_STANDBY) standby_on_done(svc, ev);
    else if (svc->phase == PHASE_CONFIRM) confirm_on_done(svc, now_ns, ev);
    else cs_svc_recon_committed_on_done(svc, ev);
    return;
  case CS_OP_STORE_LIST: cs_svc_recon_list_on_done(svc, now_ns, ev); return;
  default: assert(!"not a cycle request"); return;
  }
}

uint64_t cs_svc_cycle_deadline(const cs_service *svc) {
  uint64_t at = CS_NEVER;
  if (svc->reconcile_next_ns != 0) at = svc->reconcile_next_ns;
  if (!svc->cycle_failed && !svc->stopping && publish_waits(svc, svc->last_now_ns) && svc->index_settle_ns < at)
    at = svc->index_settle_ns;
  if (svc->phase != PHASE_IDLE || svc->stopping) return at;
  /* Work that could start is only waiting for the backoff to pass. */
  if (cycle_has_work(svc, svc->last_now_ns) && svc->backoff_until_ns < at) at = svc->backoff_until_ns;
  /* Rejected rows waiting for their own backoff (the deadline is asked again after it). */
  if (svc->reject_retry_at_ns > svc->last_now_ns && svc->reject_retry_at_ns < at && cs_svc_is_publisher(svc) &&
      cs_svc_rejected_unrecorded(svc) > 0)
    at = svc->reject_retry_at_ns > svc->backoff_until_ns ? svc->reject_retry_at_ns : svc->backoff_until_ns;
  return at;
}

/* ---- the spool lane ----------------------------------------------------- */

static uint32_t count_handed_or_aside(const cs_service *svc) {
  return cs_svc_stage_count(svc, STAGE_DONE) + cs_svc_stage_count(svc, STAGE_SET_ASIDE);
}

bool cs_svc_spool_poll(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (svc->stopped || count_handed_or_aside(svc) == 0) return false;
  if (cs_svc_lane_inflight(svc, LANE_SPOOL, false) >= svc->cfg.store_inflight_max) return false;
  for (uint32_t i = 0; i < svc->cfg.spool_packs_max; i++) {
    pack_slot *slot = &svc->slots[i];
    if (slot->stage != STAGE_DONE && slot->stage != STAGE_SET_ASIDE) continue;
    if (slot->busy || slot->retry_at_ns > now_ns) continue;
    if (svc->stopping && slot->retry_at_ns != 0) continue; /* no retries while stopping */
    cs_op op = slot->stage == STAGE_DONE ? CS_OP_SPOOL_REMOVE : CS_OP_SPOOL_QUARANTINE;
    request *req = cs_svc_req_alloc(svc, op, LANE_SPOOL, i, now_ns);
    slot->busy = true;
    cs_svc_action_init(out, req);
    out->pack = &slot->ref;
    out->reason = slot->reason;
    return true;
  }
  return false;
}

void cs_svc_spool_on_done(cs_service *svc, uint64_t now_ns, const request *req, const cs_event *ev) {
  pack_slot *slot = &svc->slots[req->slot];
  assert(slot->busy && slot->own);
  slot->busy = false;
  if (ev->outcome != CS_OUT_OK && ev->outcome != CS_OUT_NOT_FOUND) {
    cs_svc_set_error(svc, cs_op_name(req->op), slot->ref.key, ev->outcome);
    slot->retry_at_ns = now_ns + svc->cfg.backoff_base_ns;
    return;
  }
  if (req->op == CS_OP_SPOOL_REMOVE) svc->stats.handed_off++;
  cs_svc_slot_free(svc, slot);
}

uint64_t cs_svc_spool_deadline(const cs_service *svc) {
  uint64_t at = CS_NEVER;
  if (svc->stopped || count_handed_or_aside(svc) == 0) return at;
  /* A full lane frees itself with a completion, which is an event. */
  if (cs_svc_lane_inflight(svc, LANE_SPOOL, false) >= svc->cfg.store_inflight_max) return at;
  for (uint32_t i = 0; i < svc->cfg.spool_packs_max; i++) {
    const pack_slot *slot = &svc->slots[i];
    if (slot->stage != STAGE_DONE && slot->stage != STAGE_SET_ASIDE) continue;
    if (slot->busy || (svc->stopping && slot->retry_at_ns != 0)) continue; /* as spool_poll */
    if (slot->retry_at_ns < at) at = slot->retry_at_ns;
  }
  return at;
}

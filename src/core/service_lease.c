/*
 * The lease lane (DESIGN.md 5 and 6.7). A claim is a conditional insert at
 * head term + 1 (it applies only while the head is free or ours), then a read
 * of every claim at that term: the claim holds only when it is the sole one.
 * Renewal is a claim at the next term by the same lease id on its own timer,
 * every TTL/3, never behind cycle work. An unknown outcome on a lease write
 * quarantines the publisher for one TTL. Our view of expiry is conservative:
 * it counts from when the claim was sent, less a guard.
 */
#include "service_internal.h"

#include <assert.h>
#include <string.h>

static uint64_t retry_delay(cs_service *svc) {
  uint64_t base = svc->cfg.lease_ttl_ns / 6;
  return base + cs_prng_below(&svc->prng, base + 1);
}

static void lease_lost(cs_service *svc, uint64_t now_ns, cs_lease_state state, uint64_t wait_ns) {
  svc->lease = state;
  svc->lease_renewing = false;
  svc->lease_todo = LEASE_STEP_IDLE;
  svc->lease_next_ns = now_ns + wait_ns;
}

static bool lease_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  static const cs_op ops[] = {CS_OP_NONE, CS_OP_CAT_HEAD, CS_OP_CAT_CLAIM, CS_OP_CAT_READ_CLAIMS,
                              CS_OP_CAT_RELEASE};
  lease_step step = svc->lease_todo;
  assert(step != LEASE_STEP_IDLE && svc->lease_step == LEASE_STEP_IDLE);
  request *req = cs_svc_req_alloc(svc, ops[step], LANE_LEASE, 0, now_ns);
  cs_svc_action_init(out, req);
  out->lease_id = svc->lease_id;
  if (step == LEASE_STEP_CLAIM) out->term = svc->lease_base_term;
  if (step == LEASE_STEP_READ) out->term = svc->lease_base_term + 1;
  if (step == LEASE_STEP_RELEASE) out->term = svc->lease_term;
  svc->lease_step = step;
  svc->lease_todo = LEASE_STEP_IDLE;
  return true;
}

static bool renew_due(cs_service *svc, uint64_t now_ns) {
  if (svc->lease != CS_LEASE_HELD || now_ns < svc->lease_next_ns) return false;
  if (svc->lease_renewing || svc->lease_todo != LEASE_STEP_IDLE) return false;
#if CAPSTORE_MUTANT == 3 /* the lease is renewed only when a cycle starts */
  if (!svc->lease_renew_at_cycle) return false;
  svc->lease_renew_at_cycle = false;
#endif
  return true;
}

/*
 * Release writes the tombstone (catalog.h) at the term we hold, or, when a lease
 * write's outcome is unknown (quarantined), at the term that write claimed:
 * it applies only if that term is the head and ours. A read-back in progress
 * finishes first, so a renewal that took is released at its new term.
 *
 * A lease we let go by our own clock (past lease_expires_ns, which is
 * lease_guard_ns early) can still be live in the catalog for that long, so the
 * last term we held is released too: the catalog applies it only while that
 * term is still the head and ours, and a rival need not wait out the guard.
 */
static bool release_poll(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (svc->lease == CS_LEASE_HELD) {
    svc->lease_todo = LEASE_STEP_RELEASE;
    return lease_issue(svc, now_ns, out);
  }
  if (svc->lease == CS_LEASE_QUARANTINED && svc->lease_base_term + 1 > svc->lease_term) {
    svc->lease_term = svc->lease_base_term + 1;
    svc->lease_todo = LEASE_STEP_RELEASE;
    return lease_issue(svc, now_ns, out);
  }
  if (svc->lease_term > 0) { /* its completion ends in RELEASED, whatever the outcome */
    svc->lease_todo = LEASE_STEP_RELEASE;
    return lease_issue(svc, now_ns, out);
  }
  svc->lease = CS_LEASE_RELEASED;
  svc->lease_todo = LEASE_STEP_IDLE;
  return false;
}

bool cs_svc_lease_poll(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (!cs_svc_is_publisher(svc) || svc->lease == CS_LEASE_RELEASED) return false;
  if (svc->lease == CS_LEASE_HELD && now_ns >= svc->lease_expires_ns) {
    /* Even with a renewal in flight: past our own expiry we no longer hold it. */
    cs_svc_set_error(svc, "lease", "expired before renewal", CS_OUT_TIMEOUT);
    svc->lease = CS_LEASE_NONE;
    svc->lease_next_ns = now_ns;
  }
  if (svc->lease_step != LEASE_STEP_IDLE) return false;
  if (svc->release_wanted && svc->lease_todo != LEASE_STEP_READ) return release_poll(svc, now_ns, out);
  if (renew_due(svc, now_ns)) {
    svc->lease_renewing = true;
    svc->lease_base_term = svc->lease_term;
    svc->lease_todo = LEASE_STEP_CLAIM;
  }
  if (svc->lease_todo == LEASE_STEP_IDLE && svc->lease != CS_LEASE_HELD &&
      svc->lease != CS_LEASE_CLAIMING && now_ns >= svc->lease_next_ns) {
    svc->lease = CS_LEASE_CLAIMING;
    svc->lease_todo = LEASE_STEP_HEAD;
  }
  if (svc->lease_todo == LEASE_STEP_IDLE) return false;
  return lease_issue(svc, now_ns, out);
}

/*
 * How long a standby waits before it looks at a busy head again: TTL/3, or
 * until the head's last claim expires when the catalog says so (a released
 * holder's tombstone lasts only the fence margin), plus a jitter of its own
 * so standbys that saw the same expiry do not contest the next term.
 */
static uint64_t busy_wait(cs_service *svc, uint64_t busy_for_ns) {
  uint64_t wait = svc->cfg.lease_ttl_ns / 3;
  if (busy_for_ns > 0 && busy_for_ns < wait) {
    uint64_t jitter = busy_for_ns / 4 + CS_MS_NS;
    uint64_t hinted = busy_for_ns + cs_prng_below(&svc->prng, jitter);
    if (hinted < wait) wait = hinted;
  }
  assert(wait > 0 && wait <= svc->cfg.lease_ttl_ns / 3);
  return wait;
}

static void on_head(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  if (ev->outcome != CS_OUT_OK) {
    cs_svc_set_error(svc, "lease head", "", ev->outcome);
    lease_lost(svc, now_ns, CS_LEASE_NONE, retry_delay(svc));
    return;
  }
  if (ev->cat_head.watermark > svc->lease_watermark) svc->lease_watermark = ev->cat_head.watermark;
  if (ev->cat_head.index_floor > svc->lease_index_floor) svc->lease_index_floor = ev->cat_head.index_floor;
  if (!ev->cat_head.head_free) {
    lease_lost(svc, now_ns, CS_LEASE_BUSY, busy_wait(svc, ev->cat_head.busy_for_ns));
    return;
  }
  svc->lease_base_term = ev->cat_head.head_term;
  svc->lease_todo = LEASE_STEP_CLAIM;
}

static void on_claim(cs_service *svc, uint64_t now_ns, const request *req, const cs_event *ev) {
  if (ev->outcome == CS_OUT_OK) {
    svc->lease_claim_sent_ns = req->sent_ns;
    svc->lease_todo = LEASE_STEP_READ;
    return;
  }
  cs_svc_set_error(svc, svc->lease_renewing ? "lease renew" : "lease claim", "", ev->outcome);
  if (cs_outcome_maybe_applied(ev->outcome)) {
    lease_lost(svc, now_ns, CS_LEASE_QUARANTINED, svc->cfg.lease_ttl_ns);
    return;
  }
  if (svc->lease_renewing) {
    /* Not applied: we still hold the term we had; try again soon. */
    svc->lease_renewing = false;
    svc->lease_next_ns = now_ns + svc->cfg.lease_ttl_ns / 12;
    return;
  }
  lease_lost(svc, now_ns, CS_LEASE_NONE, retry_delay(svc));
}

static void on_read(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  if (ev->outcome != CS_OUT_OK) {
    /* Our claim applied; whether it holds is unknown: wait until it has expired. */
    cs_svc_set_error(svc, "lease read", "", ev->outcome);
    lease_lost(svc, now_ns, CS_LEASE_QUARANTINED, svc->cfg.lease_ttl_ns);
    return;
  }
  if (!ev->claims.sole_mine) {
    /*
     * A contested term stays blocked until its claims expire. The claimants
     * read the same free head within one statement's time, so they wait out
     * the TTL plus a jitter of their own: waiting exactly the TTL, they met
     * again at the next term (simulator: three contests in a row).
     */
#if CAPSTORE_MUTANT == 14 /* contested claimants wait exactly the TTL */
    uint64_t wait = ev->claims.claim_count > 1 ? svc->cfg.lease_ttl_ns : retry_delay(svc);
#else
    uint64_t wait = ev->claims.claim_count > 1 ? svc->cfg.lease_ttl_ns + retry_delay(svc) : retry_delay(svc);
#endif
    cs_svc_set_error(svc, "lease claim", ev->claims.claim_count > 1 ? "contested" : "lost", CS_OUT_OK);
    lease_lost(svc, now_ns, CS_LEASE_BUSY, wait);
    return;
  }
  /* A replicated catalog's barrier read (cs_claims): what a predecessor's late quorum writes left. */
  if (ev->claims.watermark > svc->lease_watermark) svc->lease_watermark = ev->claims.watermark;
  if (ev->claims.index_floor > svc->lease_index_floor) svc->lease_index_floor = ev->claims.index_floor;
  bool renewal = svc->lease_renewing;
  svc->lease = CS_LEASE_HELD;
  svc->lease_renewing = false;
  svc->lease_term = svc->lease_base_term + 1;
#if CAPSTORE_MUTANT == 28 /* the holder counts its TTL from the answer, without the guard */
  svc->lease_expires_ns = now_ns + svc->cfg.lease_ttl_ns;
#else
  svc->lease_expires_ns = svc->lease_claim_sent_ns + svc->cfg.lease_ttl_ns - svc->cfg.lease_guard_ns;
#endif
#if CAPSTORE_MUTANT == 25 /* the renewal timer in the wrong unit (TTL/3 read as microseconds) */
  svc->lease_next_ns = svc->lease_claim_sent_ns + svc->cfg.lease_ttl_ns / 3000;
#else
  svc->lease_next_ns = svc->lease_claim_sent_ns + svc->cfg.lease_ttl_ns / 3;
#endif
  if (renewal) {
    svc->stats.lease_renewals++;
  } else {
    /*
     * A new holding. A renewal continues the old one: its claim applied only
     * while the head was still our term, so nobody wrote in between.
     */
    svc->lease_held_from_term = svc->lease_term;
    if (svc->next_version <= svc->lease_watermark) svc->next_version = svc->lease_watermark + 1;
    /*
     * Above every inventory row too: the catalog refuses an INDEX below one
     * (docs/catalog-protocol.md, "Late rows"), and a predecessor's rounds
     * whose publish failed may have left rows above the watermark.
     */
#if CAPSTORE_MUTANT != 62 /* mutant 62: a new holding starts above the watermark only */
    if (svc->next_version <= svc->lease_index_floor) svc->next_version = svc->lease_index_floor + 1;
#endif
  }
  assert(svc->lease_expires_ns > svc->lease_next_ns);
}

void cs_svc_lease_on_done(cs_service *svc, uint64_t now_ns, const request *req, const cs_event *ev) {
  lease_step step = svc->lease_step;
  assert(step != LEASE_STEP_IDLE);
  svc->lease_step = LEASE_STEP_IDLE;
  switch (step) {
  case LEASE_STEP_HEAD: on_head(svc, now_ns, ev); return;
  case LEASE_STEP_CLAIM: on_claim(svc, now_ns, req, ev); return;
  case LEASE_STEP_READ: on_read(svc, now_ns, ev); return;
  case LEASE_STEP_RELEASE:
    if (ev->outcome != CS_OUT_OK) cs_svc_set_error(svc, "lease release", "", ev->outcome);
    svc->lease = CS_LEASE_RELEASED;
    return;
  case LEASE_STEP_IDLE: break;
  }
  assert(!"lease completion without a lease request");
}

uint64_t cs_svc_lease_deadline(const cs_service *svc) {
  if (!cs_svc_is_publisher(svc) || svc->lease == CS_LEASE_RELEASED) return CS_NEVER;
  uint64_t at = CS_NEVER;
  if (svc->lease == CS_LEASE_HELD) at = svc->lease_expires_ns;
  if (svc->lease_step != LEASE_STEP_IDLE) return at; /* poll lapses a passed expiry at once */
  if (svc->release_wanted || svc->lease_todo != LEASE_STEP_IDLE) return 0;
  return svc->lease_next_ns < at ? svc->lease_next_ns : at;
}

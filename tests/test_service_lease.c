/*
 * Unit tests of the service core's lease lane (docs/catalog-protocol.md, "The
 * lease"): claim, renewal on its own timer, quarantine after an unknown
 * outcome, busy and contested heads, release, and our local view of expiry.
 * Tests marked REGRESSION pin core bugs these tests found (fixed).
 */
#include "test_service_driver.h"

static drv *publisher(void) {
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  drv *d = drv_new(&cfg);
  drv_publisher_ready(d, 7, 0); /* holds term 8, claim sent at DRV_T0 */
  return d;
}

static cs_lease_state lease_state(drv *d) {
  cs_snapshot snap;
  drv_snap(d, &snap);
  return snap.lease_state;
}

static void assert_lease(drv *d, cs_lease_state expected) {
  cs_lease_state got = lease_state(d);
  if (got != expected)
    fail_msg("lease %s, expected %s", cs_lease_state_name(got), cs_lease_state_name(expected));
}

/* Seals pack 1; its PUT is issued and returned unanswered. */
static cs_action upload_outstanding(drv *d) {
  const cs_pack_ref *a = drv_pack(d, 1);
  assert_int_equal(drv_seal(d, a, false), CS_E_OK);
  return drv_expect_pack(d, CS_OP_STORE_PUT, a);
}

/* Answers an outstanding PUT and its verifying HEAD: pack 1 ends owed. */
static void finish_upload(drv *d, const cs_action *put) {
  drv_answer(d, put, CS_OUT_OK);
  cs_action head = drv_expect_pack(d, CS_OP_STORE_HEAD, &d->packs[1]);
  cs_head_info info = drv_head_of(&d->packs[1]);
  drv_answer_head(d, &head, &info);
}

/* ---- renewal ------------------------------------------------------------ */

/*
 * REGRESSION (issue 13, swarm config corners): a cycle whose index work
 * outlasts a renewal still publishes. A renewal continues the holding (its
 * claim applied only while the head was still our term, so nobody wrote in
 * between); failing the cycle at every renewal left a cycle longer than
 * TTL/3 never publishing (capstore-sim --seed 861 and 1429 before the fix).
 */
static void test_regression_cycle_spanning_renewal_publishes(void **state) {
  (void)state;
  drv *d = publisher();
  cs_action put = upload_outstanding(d);
  finish_upload(d, &put);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.term, 8);
  d->now = DRV_T0 + d->cfg.lease_ttl_ns / 3;
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  drv_answer(d, &claim, CS_OUT_OK);
  cs_action read = drv_expect(d, CS_OP_CAT_READ_CLAIMS);
  drv_answer_claims(d, &read, 1, true);
  drv_answer(d, &index, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  assert_int_equal(publish.version, index.version);
  assert_int_equal(publish.term, 9); /* the fence names the holder; the write carries the current term */
  cs_snapshot snap;
  drv_snap(d, &snap);
  assert_int_equal(snap.cycles_failed, 0);
  drv_free(d);
}

static void test_renewal_at_third_of_ttl_despite_outstanding_upload(void **state) {
  (void)state;
  drv *d = publisher();
  upload_outstanding(d); /* never answered */
  uint64_t renew_at = DRV_T0 + d->cfg.lease_ttl_ns / 3;
  assert_int_equal(cs_service_next_deadline(d->svc), renew_at);
  d->now = renew_at - 1;
  drv_expect_none(d);
  d->now = renew_at;
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  assert_int_equal(claim.term, 8);
  assert_memory_equal(claim.lease_id.bytes, d->lease_id.bytes, 16);
  drv_answer(d, &claim, CS_OUT_OK);
  cs_action read = drv_expect(d, CS_OP_CAT_READ_CLAIMS);
  assert_int_equal(read.term, 9);
  drv_answer_claims(d, &read, 1, true);
  cs_snapshot snap;
  drv_snap(d, &snap);
  assert_int_equal(snap.lease_renewals, 1);
  assert_int_equal(snap.lease_term, 9);
  assert_int_equal(snap.lease_state, CS_LEASE_HELD);
  /* The next renewal counts from when this claim was sent. */
  assert_int_equal(cs_service_next_deadline(d->svc), renew_at + d->cfg.lease_ttl_ns / 3);
  drv_free(d);
}

/* A renewal CLAIM ends with outcome at the renewal time; returns that time. */
static uint64_t renewal_ends(drv *d, cs_outcome outcome) {
  d->now = DRV_T0 + d->cfg.lease_ttl_ns / 3;
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  drv_answer(d, &claim, outcome);
  return d->now;
}

/* Steps through [from, until) and fails on any catalog write or claim. */
static void no_catalog_writes_until(drv *d, uint64_t until) {
  uint64_t step = d->cfg.lease_ttl_ns / 20;
  for (; d->now < until; d->now = d->now + step < until ? d->now + step : until) {
    cs_action a;
    while (drv_poll(d, &a)) {
      if (a.op == CS_OP_CAT_INDEX || a.op == CS_OP_CAT_PUBLISH || a.op == CS_OP_CAT_CLAIM ||
          a.op == CS_OP_CAT_HEAD || a.op == CS_OP_CAT_RELEASE)
        fail_msg("%s issued at +%llu ns", cs_op_name(a.op), (unsigned long long)(d->now - DRV_T0));
    }
  }
}

static void renewal_maybe_applied_quarantines(cs_outcome outcome) {
  drv *d = publisher();
  cs_action put = upload_outstanding(d);
  uint64_t at = renewal_ends(d, outcome);
  assert_lease(d, CS_LEASE_QUARANTINED);
  finish_upload(d, &put); /* pack 1 is owed to the catalog now */
  no_catalog_writes_until(d, at + d->cfg.lease_ttl_ns);
  assert_lease(d, CS_LEASE_QUARANTINED);
  cs_snapshot snap;
  drv_snap(d, &snap);
  assert_int_equal(snap.pending_index, 1);
  /* After one TTL it claims again, and only then indexes. */
  assert_int_equal(d->now, at + d->cfg.lease_ttl_ns);
  drv_acquire(d, 9, 0);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.term, 10);
  drv_free(d);
}

static void test_renewal_unknown_outcome_quarantines_one_ttl(void **state) {
  (void)state;
  renewal_maybe_applied_quarantines(CS_OUT_TIMEOUT);
  renewal_maybe_applied_quarantines(CS_OUT_UNKNOWN);
  renewal_maybe_applied_quarantines(CS_OUT_SERVER_ERROR);
}

static void test_renewal_refused_keeps_lease_and_retries(void **state) {
  (void)state;
  drv *d = publisher();
  cs_action put = upload_outstanding(d);
  uint64_t at = renewal_ends(d, CS_OUT_REFUSED);
  assert_lease(d, CS_LEASE_HELD);
  finish_upload(d, &put);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX); /* still ours: it indexes */
  assert_int_equal(index.term, 8);
  uint64_t retry_at = at + d->cfg.lease_ttl_ns / 12;
  d->now = retry_at - 1;
  drv_expect_none(d);
  d->now = retry_at;
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  assert_int_equal(claim.term, 8);
  drv_free(d);
}

static void test_read_back_unknown_quarantines(void **state) {
  (void)state;
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  drv *d = drv_new(&cfg);
  drv_start(d);
  cs_action head = drv_expect(d, CS_OP_CAT_HEAD);
  assert_false(head.for_cycle); /* a lease step */
  drv_answer_cat_head(d, &head, 7, true, 0);
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  drv_answer(d, &claim, CS_OUT_OK);
  cs_action read = drv_expect(d, CS_OP_CAT_READ_CLAIMS);
  drv_answer(d, &read, CS_OUT_TIMEOUT);
  assert_lease(d, CS_LEASE_QUARANTINED);
  uint64_t until = d->now + cfg.lease_ttl_ns;
  assert_int_equal(cs_service_next_deadline(d->svc), until);
  d->now = until - 1;
  drv_expect_none(d);
  d->now = until;
  drv_expect(d, CS_OP_CAT_HEAD);
  drv_free(d);
}

/* ---- busy and contested ------------------------------------------------- */

static void test_head_not_free_busy_then_retried(void **state) {
  (void)state;
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  drv *d = drv_new(&cfg);
  drv_start(d);
  cs_action head = drv_expect(d, CS_OP_CAT_HEAD);
  drv_answer_cat_head(d, &head, 7, false, 5);
  assert_lease(d, CS_LEASE_BUSY);
  drv_expect_none(d); /* no claim on a head that is not free */
  uint64_t retry_at = d->now + cfg.lease_ttl_ns / 3;
  assert_int_equal(cs_service_next_deadline(d->svc), retry_at);
  d->now = retry_at - 1;
  drv_expect_none(d);
  d->now = retry_at;
  head = drv_expect(d, CS_OP_CAT_HEAD);
  /* The twin: a free head is claimed at once. */
  drv_answer_cat_head(d, &head, 9, true, 5);
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  assert_int_equal(claim.term, 9);
  drv_free(d);
}

/* The read-back after a claim shows count claims (sole_mine as given). */
static drv *claim_read_shows(uint32_t count, bool sole_mine) {
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  drv *d = drv_new(&cfg);
  drv_start(d);
  cs_action head = drv_expect(d, CS_OP_CAT_HEAD);
  drv_answer_cat_head(d, &head, 7, true, 0);
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  drv_answer(d, &claim, CS_OUT_OK);
  cs_action read = drv_expect(d, CS_OP_CAT_READ_CLAIMS);
  drv_answer_claims(d, &read, count, sole_mine);
  return d;
}

static void test_contested_read_busy_for_one_ttl(void **state) {
  (void)state;
  drv *d = claim_read_shows(2, false);
  assert_lease(d, CS_LEASE_BUSY);
  drv_expect_none(d); /* no LIST, no writes */
  /* A TTL plus a jitter of TTL/6..TTL/3, so two contestants do not meet again. */
  uint64_t ttl = d->cfg.lease_ttl_ns;
  uint64_t until = cs_service_next_deadline(d->svc);
  assert_in_range(until, d->now + ttl + ttl / 6, d->now + ttl + ttl / 3);
  d->now = until - 1;
  drv_expect_none(d);
  d->now = until;
  drv_expect(d, CS_OP_CAT_HEAD);
  cs_snapshot snap;
  drv_snap(d, &snap);
  assert_non_null(strstr(snap.last_error, "contested"));
  drv_free(d);
}

static void test_sole_claim_held(void **state) {
  (void)state;
  drv *d = claim_read_shows(1, true);
  assert_lease(d, CS_LEASE_HELD);
  drv_expect(d, CS_OP_STORE_LIST);
  drv_free(d);
}

static void test_lost_read_busy(void **state) {
  (void)state;
  drv *d = claim_read_shows(1, false); /* the one claim is someone else's */
  assert_lease(d, CS_LEASE_BUSY);
  drv_expect_none(d);
  uint64_t at = cs_service_next_deadline(d->svc);
  assert_true(at > d->now && at <= d->now + d->cfg.lease_ttl_ns / 3);
  drv_free(d);
}

/* ---- release ------------------------------------------------------------ */

static void test_release_sends_held_term(void **state) {
  (void)state;
  drv *d = publisher();
  assert_int_equal(drv_event(d, CS_EV_RELEASE), CS_E_OK);
  cs_action release = drv_expect(d, CS_OP_CAT_RELEASE);
  assert_int_equal(release.term, 8);
  assert_memory_equal(release.lease_id.bytes, d->lease_id.bytes, 16);
  drv_answer(d, &release, CS_OUT_OK);
  assert_lease(d, CS_LEASE_RELEASED);
  /* Released for good: no renewal, no claim, however long it waits. */
  for (uint32_t i = 0; i < 10; i++) {
    d->now += d->cfg.lease_ttl_ns;
    drv_expect_none(d);
  }
  assert_int_equal(cs_service_next_deadline(d->svc), CS_NEVER);
  drv_free(d);
}

static void test_release_when_not_held_writes_nothing(void **state) {
  (void)state;
  drv *d = claim_read_shows(2, false);
  assert_lease(d, CS_LEASE_BUSY);
  assert_int_equal(drv_event(d, CS_EV_RELEASE), CS_E_OK);
  drv_expect_none(d);
  assert_lease(d, CS_LEASE_RELEASED);
  d->now += 2 * d->cfg.lease_ttl_ns;
  drv_expect_none(d);
  drv_free(d);
}

/* ---- our view of expiry ------------------------------------------------- */

/*
 * The renewal at TTL/3 is never answered; the upload's verify answer comes at
 * at_ns. Returns the first action after it, or CS_OP_NONE.
 */
static cs_op after_verify_at(uint64_t at_ns) {
  drv *d = publisher();
  cs_action put = upload_outstanding(d);
  drv_answer(d, &put, CS_OUT_OK);
  cs_action head = drv_expect(d, CS_OP_STORE_HEAD);
  d->now = DRV_T0 + d->cfg.lease_ttl_ns / 3;
  drv_expect(d, CS_OP_CAT_CLAIM); /* never answered */
  d->now = at_ns;
  cs_head_info info = drv_head_of(&d->packs[1]);
  drv_answer_head(d, &head, &info);
  cs_action a;
  cs_op op = drv_poll(d, &a) ? a.op : CS_OP_NONE;
  drv_free(d);
  return op;
}

static void test_no_index_after_local_expiry(void **state) {
  (void)state;
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  uint64_t expiry = DRV_T0 + cfg.lease_ttl_ns - cfg.lease_guard_ns;
  assert_string_equal(cs_op_name(after_verify_at(expiry)), cs_op_name(CS_OP_NONE));
  assert_string_equal(cs_op_name(after_verify_at(expiry + SEC)), cs_op_name(CS_OP_NONE));
  /* The twin: one nanosecond before our view of expiry it still indexes. */
  assert_string_equal(cs_op_name(after_verify_at(expiry - 1)), cs_op_name(CS_OP_CAT_INDEX));
}

static void test_expiry_without_renewal_claims_again(void **state) {
  (void)state;
  drv *d = publisher();
  uint64_t expiry = DRV_T0 + d->cfg.lease_ttl_ns - d->cfg.lease_guard_ns;
  /* Every renewal is refused outright: retried at TTL/12 while the lease lasts. */
  uint32_t renewals = 0;
  for (;;) {
    drv_advance(d);
    if (d->now >= expiry) break;
    cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
    drv_answer(d, &claim, CS_OUT_REFUSED);
    renewals++;
  }
  assert_true(renewals >= 2);
  assert_int_equal(d->now, expiry);
  drv_expect(d, CS_OP_CAT_HEAD); /* lost: claim from scratch */
  assert_lease(d, CS_LEASE_CLAIMING);
  cs_snapshot snap;
  drv_snap(d, &snap);
  assert_non_null(strstr(snap.last_error, "expired"));
  drv_free(d);
}

/* ---- versions across acquisitions --------------------------------------- */

/* Quarantines by an unknown renewal, waits one TTL and acquires again at watermark. */
static void reacquire(drv *d, uint64_t head_term, uint64_t watermark) {
  d->now += d->cfg.lease_ttl_ns / 3;
  cs_action claim = drv_wait_op(d, CS_OP_CAT_CLAIM);
  drv_answer(d, &claim, CS_OUT_UNKNOWN);
  assert_lease(d, CS_LEASE_QUARANTINED);
  d->now += d->cfg.lease_ttl_ns;
  drv_acquire(d, head_term, watermark);
}

static uint64_t next_index_version(drv *d, uint32_t n) {
  assert_int_equal(drv_seal(d, drv_pack(d, n), false), CS_E_OK);
  cs_action put = drv_wait_op(d, CS_OP_STORE_PUT);
  drv_answer(d, &put, CS_OUT_OK);
  cs_action head = drv_expect(d, CS_OP_STORE_HEAD);
  cs_head_info info = drv_head_of(&d->packs[n]);
  drv_answer_head(d, &head, &info);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  drv_answer(d, &index, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  drv_answer(d, &publish, CS_OUT_OK);
  drv_confirm_one(d);
  return index.version;
}

static void test_versions_across_acquisitions(void **state) {
  (void)state;
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  drv *d = drv_new(&cfg);
  drv_publisher_ready(d, 7, 10);
  assert_int_equal(next_index_version(d, 1), 11);
  assert_int_equal(next_index_version(d, 2), 12);
  /* A watermark read below our next version never takes it back. */
  reacquire(d, 20, 3);
  assert_int_equal(next_index_version(d, 3), 13);
  /* A watermark above it (another publisher published) is jumped over. */
  reacquire(d, 30, 50);
  assert_int_equal(next_index_version(d, 4), 51);
  drv_free(d);
}

/* ---- Standby: another publisher holds the lease -------------------------- */

/* A publisher that finds the lease busy uploads one cycle and owes it. */
static drv *standby_owing_one(void) {
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  drv *d = drv_new(&cfg);
  drv_start(d);
  cs_action head = drv_expect(d, CS_OP_CAT_HEAD);
  drv_answer_cat_head(d, &head, 5, false, 3); /* someone else's live claim */
  assert_int_equal(lease_state(d), CS_LEASE_BUSY);
  assert_int_equal(drv_seal(d, drv_pack(d, 1), false), CS_E_OK);
  drv_upload(d, &d->packs[1]);
  return d;
}

static void test_standby_hands_off_what_the_holder_indexed(void **state) {
  (void)state;
  drv *d = standby_owing_one();
  cs_action ask = drv_expect(d, CS_OP_CAT_COMMITTED); /* a read: no lease needed */
  assert_int_equal(ask.count, 1);
  assert_memory_equal(ask.ids[0].bytes, d->packs[1].pack_id.bytes, 16);
  static const bool held[1] = {true}, rejected[1] = {false};
  drv_answer_rows(d, &ask, held, rejected);
  drv_expect_pack(d, CS_OP_SPOOL_REMOVE, &d->packs[1]);
  drv_free(d);
}

static void test_standby_keeps_what_is_not_indexed_and_backs_off(void **state) {
  (void)state;
  drv *d = standby_owing_one();
  cs_action ask = drv_expect(d, CS_OP_CAT_COMMITTED);
  static const bool held[1] = {false}, rejected[1] = {false};
  drv_answer_rows(d, &ask, held, rejected);
  drv_expect_none(d); /* no removal, no INDEX without the lease, and no new uploads while owed */
  assert_true(cs_service_next_deadline(d->svc) > d->now);
  cs_snapshot snap;
  cs_service_snapshot(d->svc, d->now, &snap);
  assert_int_equal(snap.pending_index, 1);
  assert_int_equal(snap.handed_off, 0);
  drv_free(d);
}

static void test_standby_sets_aside_what_the_holder_rejected(void **state) {
  (void)state;
  drv *d = standby_owing_one();
  cs_action ask = drv_expect(d, CS_OP_CAT_COMMITTED);
  static const bool held[1] = {false}, rejected[1] = {true};
  drv_answer_rows(d, &ask, held, rejected);
  drv_expect_pack(d, CS_OP_SPOOL_QUARANTINE, &d->packs[1]);
  cs_snapshot snap;
  cs_service_snapshot(d->svc, d->now, &snap);
  assert_int_equal(snap.set_aside, 1);
  drv_free(d);
}

/* ---- Regression: a core bug these tests found (fixed) ------------------ */

/*
 * REGRESSION (lease deadline busy loop; fixed): while a lease request is in
 * flight, cs_svc_lease_deadline returns lease_expires_ns even once it has
 * passed, and cs_service_poll has nothing to do until the request completes.
 * A driver that waits for next_deadline spins at 100% CPU for as long as the
 * renewal is outstanding (up to request_timeout). Expected: a deadline in the
 * future (or CS_NEVER) once expiry has been acted on.
 */
static void test_regression_lease_deadline_not_past_expiry(void **state) {
  (void)state;
  drv *d = publisher();
  d->now = DRV_T0 + d->cfg.lease_ttl_ns / 3;
  drv_expect(d, CS_OP_CAT_CLAIM); /* the renewal, outstanding */
  d->now = DRV_T0 + d->cfg.lease_ttl_ns - d->cfg.lease_guard_ns + 5 * MS;
  cs_action a;
  assert_false(cs_service_poll(d->svc, d->now, &a));
  assert_false(cs_service_poll(d->svc, d->now, &a));
  assert_true(cs_service_next_deadline(d->svc) > d->now);
  drv_free(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_renewal_at_third_of_ttl_despite_outstanding_upload),
      cmocka_unit_test(test_regression_cycle_spanning_renewal_publishes),
      cmocka_unit_test(test_standby_hands_off_what_the_holder_indexed),
      cmocka_unit_test(test_standby_keeps_what_is_not_indexed_and_backs_off),
      cmocka_unit_test(test_standby_sets_aside_what_the_holder_rejected),
      cmocka_unit_test(test_renewal_unknown_outcome_quarantines_one_ttl),
      cmocka_unit_test(test_renewal_refused_keeps_lease_and_retries),
      cmocka_unit_test(test_read_back_unknown_quarantines),
      cmocka_unit_test(test_head_not_free_busy_then_retried),
      cmocka_unit_test(test_contested_read_busy_for_one_ttl),
      cmocka_unit_test(test_sole_claim_held),
      cmocka_unit_test(test_lost_read_busy),
      cmocka_unit_test(test_release_sends_held_term),
      cmocka_unit_test(test_release_when_not_held_writes_nothing),
      cmocka_unit_test(test_no_index_after_local_expiry),
      cmocka_unit_test(test_expiry_without_renewal_claims_again),
      cmocka_unit_test(test_versions_across_acquisitions),
      cmocka_unit_test(test_regression_lease_deadline_not_past_expiry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

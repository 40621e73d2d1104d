/*
 * A tiny hand-written driver for the service core, shared by
 * test_service*.c: it owns the caller memory, builds pack refs, feeds events,
 * polls actions and answers them with outcomes the test chooses. Every helper
 * asserts what it expects, so a test reads as the conversation a real driver
 * would have with the core.
 */
#ifndef CAPSTORE_TEST_SERVICE_DRIVER_H
#define CAPSTORE_TEST_SERVICE_DRIVER_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/service.h"

#define MS CS_MS_NS
#define SEC CS_SEC_NS
#define DRV_PACKS_MAX 64u
#define DRV_T0 (1000 * SEC)

typedef struct drv {
  cs_service *svc;
  void *mem;
  cs_service_config cfg;
  cs_uuid lease_id;
  uint64_t now;
  cs_pack_ref packs[DRV_PACKS_MAX];
} drv;

/* Small limits so a test reaches every edge in a few steps. */
static inline cs_service_config drv_config(cs_role role) {
  cs_service_config cfg;
  cs_service_config_default(&cfg, role);
  cfg.store_lists_complete = true; /* the store the driver answers for lists bytewise */
  cfg.spool_packs_max = 8;
  cfg.cycle_packs_max = 4;
  cfg.store_inflight_max = 2;
  cfg.index_batch_bytes_max = 1000;
  cfg.index_attempts_max = 3;
  cfg.backoff_base_ns = 100 * MS;
  cfg.backoff_cap_ns = 1600 * MS;
  cfg.lease_ttl_ns = 3 * SEC;
  cfg.lease_guard_ns = 100 * MS;
  cfg.reconcile_interval_ns = 0;
  cfg.list_page_max = 8;
  cfg.flush_max = 2;
  cfg.rejected_max = 4;
  cfg.request_timeout_ns = 500 * MS;
  return cfg;
}

static inline drv *drv_new(const cs_service_config *cfg) {
  drv *d = calloc(1, sizeof *d);
  assert_non_null(d);
  d->cfg = *cfg;
  size_t size = cs_service_memory_size(cfg);
  assert_true(size > 0);
  d->mem = aligned_alloc(16, (size + 15u) & ~(size_t)15u);
  assert_non_null(d->mem);
  memset(d->lease_id.bytes, 0x1e, sizeof d->lease_id.bytes);
  d->now = DRV_T0;
  char msg[CS_LAST_ERROR_MAX] = "junk";
  assert_int_equal(cs_service_init(&d->svc, d->mem, size, cfg, &d->lease_id, 42, msg, sizeof msg),
                   CS_E_OK);
  return d;
}

static inline void drv_free(drv *d) {
  free(d->mem);
  free(d);
}

/* Pack n: a UUIDv7-looking id, key "cat/<id>.dmi-pack", index_bytes 100. */
static inline cs_pack_ref *drv_pack(drv *d, uint32_t n) {
  assert_true(n < DRV_PACKS_MAX);
  cs_pack_ref *ref = &d->packs[n];
  memset(ref, 0, sizeof *ref);
  for (uint32_t i = 0; i < 16; i++) ref->pack_id.bytes[i] = (uint8_t)(0x10 + i);
  ref->pack_id.bytes[6] = 0x70;
  ref->pack_id.bytes[15] = (uint8_t)n;
  char text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&ref->pack_id, text);
  char key[64];
  int len = snprintf(key, sizeof key, "cat/%s.dmi-pack", text);
  assert_int_equal(cs_pack_ref_set_key(ref, key, (size_t)len), CS_E_OK);
  ref->size_bytes = 5000 + n;
  ref->index_bytes = 100;
  ref->record_count = 10;
  ref->created_at_ns = DRV_T0;
  memset(ref->sha256, (int)(0xa0 + n), sizeof ref->sha256);
  return ref;
}

static inline void drv_snap(drv *d, cs_snapshot *out) { cs_service_snapshot(d->svc, d->now, out); }

static inline int drv_event(drv *d, cs_event_kind kind) {
  cs_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = kind;
  return cs_service_on_event(d->svc, d->now, &ev);
}

static inline void drv_start(drv *d) { assert_int_equal(drv_event(d, CS_EV_START), CS_E_OK); }

/* A SEALED event: recovered (found at start), backlog (reported again after a CS_E_FULL refusal). */
static inline int drv_seal_event(drv *d, const cs_pack_ref *ref, bool recovered, bool backlog) {
  cs_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = CS_EV_SEALED;
  ev.pack = ref;
  ev.recovered = recovered;
  ev.backlog = backlog;
  return cs_service_on_event(d->svc, d->now, &ev);
}

static inline int drv_seal(drv *d, const cs_pack_ref *ref, bool recovered) {
  return drv_seal_event(d, ref, recovered, false);
}

/* A pack reported again from the driver's backlog (refused CS_E_FULL before). */
static inline int drv_seal_backlog(drv *d, const cs_pack_ref *ref) { return drv_seal_event(d, ref, true, true); }

static inline int drv_flush(drv *d, uint64_t flush_id, uint64_t deadline_ns) {
  cs_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = CS_EV_FLUSH;
  ev.id = flush_id;
  ev.deadline_ns = deadline_ns;
  return cs_service_on_event(d->svc, d->now, &ev);
}

/* Polls like a real driver: an empty poll with a deadline already due is retried. */
static inline bool drv_poll(drv *d, cs_action *out) {
  for (uint32_t tries = 0; tries < 4; tries++) {
    if (cs_service_poll(d->svc, d->now, out)) return true;
    if (cs_service_next_deadline(d->svc) > d->now) return false;
  }
  return false;
}

static inline cs_action drv_expect(drv *d, cs_op op) {
  cs_action a;
  if (!drv_poll(d, &a)) fail_msg("expected %s, got no action", cs_op_name(op));
  if (a.op != op) fail_msg("expected %s, got %s", cs_op_name(op), cs_op_name(a.op));
  assert_int_equal(cs_op_is_request(op), a.id != 0);
  return a;
}

static inline void drv_expect_none(drv *d) {
  cs_action a;
  if (drv_poll(d, &a)) fail_msg("expected no action, got %s", cs_op_name(a.op));
}

static inline void drv_assert_pack(const cs_action *a, const cs_pack_ref *ref) {
  assert_non_null(a->pack);
  assert_memory_equal(a->pack->pack_id.bytes, ref->pack_id.bytes, 16);
  assert_string_equal(a->pack->key, ref->key);
}

static inline cs_action drv_expect_pack(drv *d, cs_op op, const cs_pack_ref *ref) {
  cs_action a = drv_expect(d, op);
  drv_assert_pack(&a, ref);
  return a;
}

static inline cs_event drv_done(const cs_action *a, cs_outcome outcome) {
  cs_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = CS_EV_DONE;
  ev.id = a->id;
  ev.outcome = outcome;
  return ev;
}

static inline void drv_send(drv *d, const cs_event *ev) {
  assert_int_equal(cs_service_on_event(d->svc, d->now, ev), CS_E_OK);
}

static inline void drv_answer(drv *d, const cs_action *a, cs_outcome outcome) {
  cs_event ev = drv_done(a, outcome);
  drv_send(d, &ev);
}

static inline cs_head_info drv_head_of(const cs_pack_ref *ref) {
  cs_head_info head;
  memset(&head, 0, sizeof head);
  head.is_pack = true;
  head.size_bytes = ref->size_bytes;
  head.index_bytes = ref->index_bytes;
  head.record_count = ref->record_count;
  head.created_at_ns = ref->created_at_ns;
  head.pack_id = ref->pack_id;
  memcpy(head.sha256, ref->sha256, sizeof head.sha256);
  return head;
}

static inline void drv_answer_head(drv *d, const cs_action *a, const cs_head_info *head) {
  cs_event ev = drv_done(a, CS_OUT_OK);
  ev.head = *head;
  drv_send(d, &ev);
}

/* PUT answered OK, then the verifying HEAD answered with matching bytes. */
static inline void drv_upload(drv *d, const cs_pack_ref *ref) {
  cs_action put = drv_expect_pack(d, CS_OP_STORE_PUT, ref);
  drv_answer(d, &put, CS_OUT_OK);
  cs_action head = drv_expect_pack(d, CS_OP_STORE_HEAD, ref);
  assert_false(head.head_only);
  cs_head_info info = drv_head_of(ref);
  drv_answer_head(d, &head, &info);
}

static inline void drv_answer_committed(drv *d, const cs_action *a, const bool *held) {
  cs_event ev = drv_done(a, CS_OUT_OK);
  ev.held = held;
  drv_send(d, &ev);
}

/* COMMITTED answered with both arrays: indexed (held) and rejected rows. */
static inline void drv_answer_rows(drv *d, const cs_action *a, const bool *held, const bool *rejected) {
  cs_event ev = drv_done(a, CS_OUT_OK);
  ev.held = held;
  ev.rejected = rejected;
  drv_send(d, &ev);
}

/*
 * A publisher records a set-aside pack in the catalog: CAT_REJECT for its id
 * (fenced on the held term), then a COMMITTED read-back that finds the row.
 */
static inline void drv_record_rejected(drv *d, const cs_pack_ref *pack) {
  cs_action rej = drv_expect(d, CS_OP_CAT_REJECT);
  assert_int_equal(rej.count, 1);
  assert_memory_equal(rej.ids[0].bytes, pack->pack_id.bytes, 16);
  drv_answer(d, &rej, CS_OUT_OK);
  cs_action back = drv_expect(d, CS_OP_CAT_COMMITTED);
  assert_int_equal(back.count, 1);
  static const bool held[1] = {false}, rejected[1] = {true};
  drv_answer_rows(d, &back, held, rejected);
}

static inline void drv_answer_cat_head(drv *d, const cs_action *a, uint64_t term, bool free_,
                                       uint64_t watermark) {
  cs_event ev = drv_done(a, CS_OUT_OK);
  ev.cat_head.head_term = term;
  ev.cat_head.head_free = free_;
  ev.cat_head.watermark = watermark;
  drv_send(d, &ev);
}

static inline void drv_answer_claims(drv *d, const cs_action *a, uint32_t count, bool sole_mine) {
  cs_event ev = drv_done(a, CS_OUT_OK);
  ev.claims.claim_count = count;
  ev.claims.sole_mine = sole_mine;
  drv_send(d, &ev);
}

static inline void drv_answer_list(drv *d, const cs_action *a, const char *const *keys,
                                   uint32_t key_count, const char *next_token) {
  cs_event ev = drv_done(a, CS_OUT_OK);
  ev.keys = keys;
  ev.key_count = key_count;
  ev.next_token = next_token;
  drv_send(d, &ev);
}

/* CAT_HEAD (free at head_term) -> CAT_CLAIM(head_term) -> READ_CLAIMS(head_term + 1) -> held. */
static inline void drv_acquire(drv *d, uint64_t head_term, uint64_t watermark) {
  cs_action head = drv_expect(d, CS_OP_CAT_HEAD);
  drv_answer_cat_head(d, &head, head_term, true, watermark);
  cs_action claim = drv_expect(d, CS_OP_CAT_CLAIM);
  assert_int_equal(claim.term, head_term);
  assert_memory_equal(claim.lease_id.bytes, d->lease_id.bytes, 16);
  drv_answer(d, &claim, CS_OUT_OK);
  cs_action read = drv_expect(d, CS_OP_CAT_READ_CLAIMS);
  assert_int_equal(read.term, head_term + 1);
  drv_answer_claims(d, &read, 1, true);
  cs_snapshot snap;
  drv_snap(d, &snap);
  assert_int_equal(snap.lease_state, CS_LEASE_HELD);
  assert_int_equal(snap.lease_term, head_term + 1);
}

/* The reconcile pass at start over an empty prefix. */
static inline void drv_list_empty(drv *d) {
  cs_action list = drv_expect(d, CS_OP_STORE_LIST);
  assert_string_equal(list.token, "");
  drv_answer_list(d, &list, NULL, 0, NULL);
}

/* A started publisher holding term head_term + 1, its start reconcile done. */
static inline void drv_publisher_ready(drv *d, uint64_t head_term, uint64_t watermark) {
  drv_start(d);
  drv_acquire(d, head_term, watermark);
  drv_list_empty(d);
  drv_expect_none(d);
}

/* INDEX (one batch of the given packs) -> PUBLISH -> COMMITTED (all held) -> SPOOL_REMOVE each. */
static inline uint64_t drv_index_round(drv *d, const cs_pack_ref *const *refs, uint32_t count) {
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.count, count);
  for (uint32_t i = 0; i < count; i++)
    assert_memory_equal(index.packs[i]->pack_id.bytes, refs[i]->pack_id.bytes, 16);
  uint64_t version = index.version;
  drv_answer(d, &index, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  assert_int_equal(publish.version, version);
  drv_answer(d, &publish, CS_OUT_OK);
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  assert_int_equal(committed.count, count);
  bool held[DRV_PACKS_MAX];
  for (uint32_t i = 0; i < count; i++) held[i] = true;
  drv_answer_committed(d, &committed, held);
  for (uint32_t i = 0; i < count; i++) {
    cs_action remove = drv_expect(d, CS_OP_SPOOL_REMOVE);
    drv_answer(d, &remove, CS_OUT_OK);
  }
  return version;
}

/* After a PUBLISH of one pack: COMMITTED answered held, then its SPOOL_REMOVE. */
static inline void drv_confirm_one(drv *d) {
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  static const bool held[1] = {true};
  drv_answer_committed(d, &committed, held);
  cs_action remove = drv_expect(d, CS_OP_SPOOL_REMOVE);
  drv_answer(d, &remove, CS_OUT_OK);
}

/* Moves time to the next deadline; fails when the service has none. */
static inline void drv_advance(drv *d) {
  uint64_t at = cs_service_next_deadline(d->svc);
  if (at == CS_NEVER) fail_msg("the service is idle: no deadline to wait for");
  if (at > d->now) d->now = at;
}

/*
 * Waits (moving time from deadline to deadline) until op is issued. Lease
 * renewals on the way are answered as held; any other action fails the test,
 * and so does a deadline that is due but yields nothing (a busy loop).
 */
static inline cs_action drv_wait_op(drv *d, cs_op op) {
  cs_action a;
  for (uint32_t step = 0; step < 200; step++) {
    if (!drv_poll(d, &a)) {
      uint64_t before = d->now;
      drv_advance(d);
      if (d->now == before) fail_msg("waiting for %s: deadline due, no action", cs_op_name(op));
      continue;
    }
    if (a.op == op) return a;
    if (a.op == CS_OP_CAT_CLAIM) {
      cs_event ev = drv_done(&a, CS_OUT_OK);
      assert_int_equal(cs_service_on_event(d->svc, d->now, &ev), CS_E_OK);
      continue;
    }
    if (a.op != CS_OP_CAT_READ_CLAIMS)
      fail_msg("waiting for %s, got %s", cs_op_name(op), cs_op_name(a.op));
    cs_event ev = drv_done(&a, CS_OUT_OK);
    ev.claims.claim_count = 1;
    ev.claims.sole_mine = true;
    assert_int_equal(cs_service_on_event(d->svc, d->now, &ev), CS_E_OK);
  }
  fail_msg("waiting for %s: not issued in 200 steps", cs_op_name(op));
  memset(&a, 0, sizeof a);
  return a;
}

#endif

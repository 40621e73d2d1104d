/*
 * Unit tests of the service core's reconcile (docs/catalog-protocol.md,
 * "Reconcile"): LIST pages of the catalog prefix, the committed-ids query,
 * HEAD of the missing packs only, adoption, skipped keys and objects, HEAD
 * errors, continuation tokens and the rejected list.
 */
#include "test_service_driver.h"

/* A publisher holding term 8 whose start reconcile LIST is returned unanswered. */
static drv *reconciling_with(const cs_service_config *cfg, cs_action *list) {
  drv *d = drv_new(cfg);
  drv_start(d);
  drv_acquire(d, 7, 0);
  *list = drv_expect(d, CS_OP_STORE_LIST);
  assert_string_equal(list->token, "");
  return d;
}

static drv *reconciling(uint64_t interval_ns, cs_action *list) {
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  cfg.reconcile_interval_ns = interval_ns;
  return reconciling_with(&cfg, list);
}

static cs_snapshot snap_of(drv *d) {
  cs_snapshot snap;
  drv_snap(d, &snap);
  return snap;
}

/* The COMMITTED query of a page: its ids must be exactly packs[ns[0..n)]. */
static cs_action expect_committed(drv *d, const uint32_t *ns, uint32_t n) {
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  if (committed.count != n)
    fail_msg("committed-ids query of %u ids, expected %u", committed.count, n);
  for (uint32_t i = 0; i < n; i++)
    assert_memory_equal(committed.ids[i].bytes, d->packs[ns[i]].pack_id.bytes, 16);
  return committed;
}

static void answer_held(drv *d, const cs_action *committed, bool all) {
  bool held[16];
  for (uint32_t i = 0; i < committed->count; i++) held[i] = all;
  drv_answer_committed(d, committed, held);
}

/* A reconcile HEAD by key for pack n, from a LIST page. */
static cs_action expect_recon_head(drv *d, uint32_t n) {
  cs_action head = drv_expect(d, CS_OP_STORE_HEAD);
  assert_true(head.head_only);
  assert_string_equal(head.pack->key, d->packs[n].key);
  return head;
}

/* ---- keys --------------------------------------------------------------- */

static void test_non_uuid_keys_skipped(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  drv_pack(d, 1);
  drv_pack(d, 2);
  const char *keys[] = {
      d->packs[1].key,
      "cat/not-a-uuid.dmi-pack",
      "cat/10111213-1415-7017-1819-1A1B1C1D1E01.dmi-pack",
      "cat/10111213-1415-7017-1819-1a1b1c1d1e01.txt",
      "cat/x10111213-1415-7017-1819-1a1b1c1d1e01.dmi-pack",
      d->packs[2].key,
  };
  drv_answer_list(d, &list, keys, 6, NULL);
  static const uint32_t ids[] = {1, 2};
  cs_action committed = expect_committed(d, ids, 2);
  assert_int_equal(snap_of(d).reconcile_skipped, 4);
  answer_held(d, &committed, true);
  drv_expect_none(d);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_passes, 1);
  assert_int_equal(snap.reconcile_skipped, 4);
  assert_int_equal(snap.reconcile_adopted, 0);
  drv_free(d);
}

static void test_uuid_keys_not_skipped(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  const char *keys[] = {drv_pack(d, 1)->key, drv_pack(d, 2)->key, drv_pack(d, 3)->key};
  drv_answer_list(d, &list, keys, 3, NULL);
  static const uint32_t ids[] = {1, 2, 3};
  cs_action committed = expect_committed(d, ids, 3);
  answer_held(d, &committed, true);
  drv_expect_none(d);
  assert_int_equal(snap_of(d).reconcile_skipped, 0);
  drv_free(d);
}

static void test_own_spooled_pack_not_queried(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  assert_int_equal(drv_seal(d, drv_pack(d, 1), false), CS_E_OK);
  const char *keys[] = {d->packs[1].key, drv_pack(d, 2)->key};
  drv_answer_list(d, &list, keys, 2, NULL);
  static const uint32_t ids[] = {2};
  expect_committed(d, ids, 1); /* ours is on its way already */
  drv_free(d);
}

/* ---- the committed-ids query and HEADs ---------------------------------- */

static void test_held_ids_not_headed(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  const char *keys[] = {drv_pack(d, 1)->key, drv_pack(d, 2)->key, drv_pack(d, 3)->key};
  drv_answer_list(d, &list, keys, 3, NULL);
  static const uint32_t ids[] = {1, 2, 3};
  cs_action committed = expect_committed(d, ids, 3);
  static const bool held[] = {true, false, true};
  drv_answer_committed(d, &committed, held);
  cs_action head = expect_recon_head(d, 2);
  drv_expect_none(d); /* 1 and 3 are in the catalog: no HEAD */
  drv_answer(d, &head, CS_OUT_NOT_FOUND);
  drv_expect_none(d);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_passes, 1);
  assert_int_equal(snap.reconcile_adopted, 0);
  assert_int_equal(snap.reconcile_head_errors, 0);
  drv_free(d);
}

static void test_missing_ids_all_headed(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  const char *keys[] = {drv_pack(d, 1)->key, drv_pack(d, 2)->key, drv_pack(d, 3)->key};
  drv_answer_list(d, &list, keys, 3, NULL);
  static const uint32_t ids[] = {1, 2, 3};
  cs_action committed = expect_committed(d, ids, 3);
  answer_held(d, &committed, false);
  /* store_inflight_max (2) HEADs go out at once, the third when one returns. */
  cs_action head1 = expect_recon_head(d, 1);
  cs_action head2 = expect_recon_head(d, 2);
  drv_expect_none(d);
  drv_answer(d, &head1, CS_OUT_NOT_FOUND);
  cs_action head3 = expect_recon_head(d, 3);
  drv_answer(d, &head2, CS_OUT_NOT_FOUND);
  drv_answer(d, &head3, CS_OUT_NOT_FOUND);
  drv_expect_none(d);
  assert_int_equal(snap_of(d).reconcile_passes, 1);
  drv_free(d);
}

/* One missing key (pack 1) whose HEAD ends with outcome; an OK answer shows
 * pack 1's metadata as edited by edit. */
/* The start LIST answered with pack 1's key, not held: returns pack 1's reconcile HEAD. */
static cs_action list_pack_one(drv *d, const cs_action *list) {
  const char *keys[] = {drv_pack(d, 1)->key};
  drv_answer_list(d, list, keys, 1, NULL);
  static const uint32_t ids[] = {1};
  cs_action committed = expect_committed(d, ids, 1);
  answer_held(d, &committed, false);
  return expect_recon_head(d, 1);
}

static drv *one_head_with(const cs_service_config *cfg, cs_outcome outcome,
                          void (*edit)(drv *d, cs_head_info *info)) {
  cs_action list;
  drv *d = reconciling_with(cfg, &list);
  cs_action head = list_pack_one(d, &list);
  if (outcome != CS_OUT_OK) {
    drv_answer(d, &head, outcome);
    return d;
  }
  d->packs[1].index_bytes = 321;
  cs_head_info info = drv_head_of(&d->packs[1]);
  if (edit != NULL) edit(d, &info);
  drv_answer_head(d, &head, &info);
  return d;
}

static drv *one_head(cs_outcome outcome, void (*edit)(drv *d, cs_head_info *info)) {
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  return one_head_with(&cfg, outcome, edit);
}

static void not_a_pack(drv *d, cs_head_info *info) {
  (void)d;
  info->is_pack = false;
}

static void other_id(drv *d, cs_head_info *info) {
  (void)d;
  info->pack_id.bytes[0] ^= 1;
}

static void test_foreign_object_skipped(void **state) {
  (void)state;
  drv *d = one_head(CS_OUT_OK, not_a_pack);
  drv_expect_none(d); /* nothing to index */
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_skipped, 1);
  assert_int_equal(snap.reconcile_adopted, 0);
  assert_int_equal(snap.reconcile_head_errors, 0);
  assert_int_equal(snap.pending_index, 0);
  drv_free(d);
  /* A dmi-pack that names another id is foreign too. */
  d = one_head(CS_OUT_OK, other_id);
  drv_expect_none(d);
  assert_int_equal(snap_of(d).reconcile_skipped, 1);
  assert_int_equal(snap_of(d).reconcile_adopted, 0);
  drv_free(d);
}

static void test_real_pack_adopted_and_indexed(void **state) {
  (void)state;
  drv *d = one_head(CS_OUT_OK, NULL);
  const cs_pack_ref *ref = &d->packs[1];
  assert_int_equal(snap_of(d).reconcile_adopted, 1);
  assert_int_equal(snap_of(d).reconcile_skipped, 0);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.count, 1);
  assert_int_equal(index.term, 8);
  assert_memory_equal(index.packs[0]->pack_id.bytes, ref->pack_id.bytes, 16);
  assert_string_equal(index.packs[0]->key, ref->key);
  assert_int_equal(index.packs[0]->index_bytes, 321);
  assert_int_equal(index.packs[0]->size_bytes, ref->size_bytes);
  assert_memory_equal(index.packs[0]->sha256, ref->sha256, 32);
  drv_answer(d, &index, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  drv_answer(d, &publish, CS_OUT_OK);
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  answer_held(d, &committed, true);
  drv_expect_none(d); /* not ours: nothing to remove from the spool */
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.indexed, 1);
  assert_int_equal(snap.handed_off, 0);
  assert_int_equal(snap.reconcile_passes, 1);
  assert_int_equal(snap.pending_index, 0);
  drv_free(d);
}

static void test_head_forbidden_is_error_not_skip(void **state) {
  (void)state;
  drv *d = one_head(CS_OUT_FORBIDDEN, NULL);
  drv_expect_none(d);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_head_errors, 1);
  assert_int_equal(snap.reconcile_skipped, 0);
  assert_non_null(strstr(snap.last_error, d->packs[1].key));
  assert_non_null(strstr(snap.last_error, "forbidden"));
  /* Retried on the next pass, which comes even with interval 0. */
  assert_int_equal(snap.reconcile_passes, 1);
  uint64_t at = cs_service_next_deadline(d->svc);
  assert_true(at > d->now && at != CS_NEVER);
  cs_action list = drv_wait_op(d, CS_OP_STORE_LIST);
  const char *keys[] = {d->packs[1].key};
  drv_answer_list(d, &list, keys, 1, NULL);
  static const uint32_t ids[] = {1};
  cs_action committed = expect_committed(d, ids, 1);
  answer_held(d, &committed, false);
  expect_recon_head(d, 1);
  drv_free(d);
}

static void test_head_outage_retried_in_same_pass(void **state) {
  (void)state;
  drv *d = one_head(CS_OUT_REFUSED, NULL);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_head_errors, 1);
  assert_int_equal(snap.reconcile_skipped, 0);
  cs_action head = drv_wait_op(d, CS_OP_STORE_HEAD); /* no new LIST: the same page */
  assert_string_equal(head.pack->key, d->packs[1].key);
  assert_int_equal(snap_of(d).reconcile_passes, 0);
  drv_free(d);
}

/* ---- pages -------------------------------------------------------------- */

static void test_multi_page_follows_token(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  const char *page1[] = {drv_pack(d, 1)->key};
  drv_answer_list(d, &list, page1, 1, "page-2");
  static const uint32_t ids1[] = {1};
  cs_action committed1 = expect_committed(d, ids1, 1);
  answer_held(d, &committed1, true);
  assert_int_equal(snap_of(d).reconcile_passes, 0);
  list = drv_expect(d, CS_OP_STORE_LIST);
  assert_string_equal(list.token, "page-2");
  const char *page2[] = {drv_pack(d, 2)->key};
  drv_answer_list(d, &list, page2, 1, NULL);
  static const uint32_t ids2[] = {2};
  cs_action committed2 = expect_committed(d, ids2, 1);
  answer_held(d, &committed2, true);
  drv_expect_none(d);
  assert_int_equal(snap_of(d).reconcile_passes, 1);
  drv_free(d);
}

/*
 * Pages of one key, each a pack to adopt, with nothing of our own to upload:
 * the pass lists the next page in the same cycle and indexes the three
 * adoptions in one round (a cycle per page adopted one pack per cycle).
 */
static void test_adoptions_gathered_across_pages(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  uint64_t cycles = snap_of(d).cycles; /* the reconcile cycle has begun */
  for (uint32_t n = 1; n <= 3; n++) {
    if (n > 1) {
      list = drv_expect(d, CS_OP_STORE_LIST);
      char want[16];
      snprintf(want, sizeof want, "page-%u", n);
      assert_string_equal(list.token, want);
    }
    const char *page[] = {drv_pack(d, n)->key};
    char next[16];
    snprintf(next, sizeof next, "page-%u", n + 1);
    drv_answer_list(d, &list, page, 1, n < 3 ? next : NULL);
    uint32_t ids[] = {n};
    cs_action committed = expect_committed(d, ids, 1);
    answer_held(d, &committed, false);
    cs_action head = expect_recon_head(d, n);
    cs_head_info info = drv_head_of(&d->packs[n]);
    drv_answer_head(d, &head, &info);
  }
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.count, 3);
  assert_int_equal(snap_of(d).cycles, cycles); /* three pages and their index round: one cycle */
  drv_answer(d, &index, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  drv_answer(d, &publish, CS_OUT_OK);
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  answer_held(d, &committed, true);
  drv_expect_none(d);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_adopted, 3);
  assert_int_equal(snap.indexed, 3);
  assert_int_equal(snap.reconcile_passes, 1);
  drv_free(d);
}

/*
 * The twin: a page that adopts nothing ends the gathering. Page 1 adopts a
 * pack, page 2 holds only an indexed one: the adoption is indexed right
 * after page 2, in the same cycle, and page 3 waits for the next cycle (a
 * bucket the catalog already holds must not keep an adoption owed).
 */
static void test_gathering_stops_at_a_page_without_adoptions(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  uint64_t cycles = snap_of(d).cycles;
  const char *page1[] = {drv_pack(d, 1)->key};
  drv_answer_list(d, &list, page1, 1, "page-2");
  static const uint32_t ids1[] = {1};
  cs_action committed = expect_committed(d, ids1, 1);
  answer_held(d, &committed, false);
  cs_action head = expect_recon_head(d, 1);
  cs_head_info info = drv_head_of(&d->packs[1]);
  drv_answer_head(d, &head, &info);
  list = drv_expect(d, CS_OP_STORE_LIST);
  assert_string_equal(list.token, "page-2");
  const char *page2[] = {drv_pack(d, 2)->key};
  drv_answer_list(d, &list, page2, 1, "page-3");
  static const uint32_t ids2[] = {2};
  committed = expect_committed(d, ids2, 1);
  answer_held(d, &committed, true);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.count, 1);
  assert_memory_equal(index.packs[0]->pack_id.bytes, d->packs[1].pack_id.bytes, 16);
  assert_int_equal(snap_of(d).cycles, cycles);
  drv_free(d);
}

static void test_empty_token_is_last_page(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  const char *page1[] = {drv_pack(d, 1)->key};
  drv_answer_list(d, &list, page1, 1, "");
  static const uint32_t ids1[] = {1};
  cs_action committed3 = expect_committed(d, ids1, 1);
  answer_held(d, &committed3, true);
  drv_expect_none(d);
  assert_int_equal(snap_of(d).reconcile_passes, 1);
  drv_free(d);
}

static void test_list_outage_retries_same_token(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  drv_answer_list(d, &list, NULL, 0, "page-2");
  list = drv_expect(d, CS_OP_STORE_LIST);
  drv_answer(d, &list, CS_OUT_THROTTLED);
  drv_expect_none(d);
  list = drv_wait_op(d, CS_OP_STORE_LIST);
  assert_string_equal(list.token, "page-2");
  drv_free(d);
}

static void test_adoption_bounded_by_cycle(void **state) {
  (void)state;
  cs_action list;
  drv *d = reconciling(0, &list);
  const char *keys[8];
  uint32_t ids[8];
  for (uint32_t i = 0; i < 8; i++) keys[i] = drv_pack(d, ids[i] = i + 1)->key;
  drv_answer_list(d, &list, keys, 8, NULL);
  cs_action committed4 = expect_committed(d, ids, 8);
  answer_held(d, &committed4, false);
  uint32_t headed = 0;
  cs_action a;
  while (drv_poll(d, &a) && a.op == CS_OP_STORE_HEAD) {
    cs_head_info info = drv_head_of(&d->packs[++headed]);
    drv_answer_head(d, &a, &info);
  }
  /* One cycle's worth (cycle_packs_max) is adopted, then indexed first. */
  assert_int_equal(headed, d->cfg.cycle_packs_max);
  assert_string_equal(cs_op_name(a.op), cs_op_name(CS_OP_CAT_INDEX));
  assert_int_equal(a.count, d->cfg.cycle_packs_max);
  cs_service_usage usage;
  cs_service_usage_get(d->svc, &usage);
  assert_true(usage.owed_used <= usage.owed_max);
  drv_answer(d, &a, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  drv_answer(d, &publish, CS_OUT_OK);
  cs_action committed5 = drv_expect(d, CS_OP_CAT_COMMITTED);
  answer_held(d, &committed5, true);
  /* The twin: the rest of the page goes on after it. */
  expect_recon_head(d, headed + 1);
  drv_free(d);
}

/* ---- the rejected list -------------------------------------------------- */

/* Pass 1 adopts pack 1, too large for any batch: set aside without an INDEX. */
static drv *adopted_then_set_aside(void) {
  cs_action list;
  drv *d = reconciling(10 * SEC, &list);
  drv_pack(d, 1)->index_bytes = d->cfg.index_batch_bytes_max + 1;
  const char *keys[] = {d->packs[1].key};
  drv_answer_list(d, &list, keys, 1, NULL);
  static const uint32_t ids[] = {1};
  cs_action committed6 = expect_committed(d, ids, 1);
  answer_held(d, &committed6, false);
  cs_action head = expect_recon_head(d, 1);
  cs_head_info info = drv_head_of(&d->packs[1]);
  drv_answer_head(d, &head, &info);
  drv_record_rejected(d, &d->packs[1]);
  drv_expect_none(d);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_adopted, 1);
  assert_int_equal(snap.set_aside, 1);
  assert_int_equal(snap.pending_index, 0);
  assert_int_equal(snap.reconcile_passes, 1);
  return d;
}

static void test_set_aside_not_adopted_again(void **state) {
  (void)state;
  drv *d = adopted_then_set_aside();
  cs_action list = drv_wait_op(d, CS_OP_STORE_LIST); /* the next pass, one interval on */
  const char *keys[] = {d->packs[1].key, drv_pack(d, 2)->key};
  drv_answer_list(d, &list, keys, 2, NULL);
  static const uint32_t ids[] = {2};
  cs_action committed7 = expect_committed(d, ids, 1);
  answer_held(d, &committed7, false);
  /* The twin: the other missing key is still headed. */
  cs_action head = expect_recon_head(d, 2);
  drv_answer(d, &head, CS_OUT_NOT_FOUND);
  drv_expect_none(d);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_adopted, 1);
  assert_int_equal(snap.reconcile_passes, 2);
  drv_free(d);
}

static void test_set_aside_adopted_pack_named_by_flush(void **state) {
  (void)state;
  drv *d = adopted_then_set_aside();
  assert_int_equal(drv_flush(d, 5, d->now + SEC), CS_E_OK);
  cs_action note = drv_expect(d, CS_OP_FLUSH_DONE);
  assert_true(note.flush.drained);
  assert_int_equal(note.flush.rejected_named, 1);
  assert_memory_equal(note.flush.rejected[0].bytes, d->packs[1].pack_id.bytes, 16);
  drv_free(d);
}

/*
 * Reconcile adopted pack 1 and its INDEX is in flight when the runtime
 * reports pack 1 sealed in our spool (a recovered pack reported after the
 * adoption): the cycle goes on with the adopted slot, and its hand-off also
 * removes the pack from the spool. (The slot was moved while the cycle's work
 * list still named it, and the core later failed an assertion.)
 */
static void test_sealed_while_adopted_pack_is_indexed(void **state) {
  (void)state;
  drv *d = one_head(CS_OUT_OK, NULL);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.count, 1);
  assert_int_equal(drv_seal(d, &d->packs[1], true), CS_E_OK);
  drv_answer(d, &index, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  drv_answer(d, &publish, CS_OUT_OK);
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  answer_held(d, &committed, true);
  cs_action remove = drv_expect(d, CS_OP_SPOOL_REMOVE);
  assert_memory_equal(remove.pack->pack_id.bytes, d->packs[1].pack_id.bytes, 16);
  drv_answer(d, &remove, CS_OUT_OK);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.indexed, 1);
  assert_int_equal(snap.pending_spool, 0);
  drv_free(d);
}

/*
 * Reconcile adopted pack 1 and its INDEX failed (refused: not applied), so the
 * adopted slot waits for its retry, owed and idle, when the runtime reports
 * pack 1 in our spool (a recovered pack of the backlog, reported as a pack left
 * the spool). With room in the table the pack is ours from then on: admitted,
 * not refused as full (full means every own slot holds a pack, service.h), and
 * removed from the spool once it is in the catalog.
 */
static drv *adopted_index_refused(void) {
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  cfg.spool_packs_max = 1; /* room for exactly one: the admission is at the bound */
  drv *d = one_head_with(&cfg, CS_OUT_OK, NULL);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(index.count, 1);
  drv_answer(d, &index, CS_OUT_REFUSED);
  drv_expect_none(d); /* the retry waits for its backoff */
  assert_int_equal(snap_of(d).pending_spool, 0);
  return d;
}

static void test_sealed_while_adopted_pack_waits_is_taken_as_ours(void **state) {
  (void)state;
  drv *d = adopted_index_refused();
  assert_int_equal(drv_seal_backlog(d, &d->packs[1]), CS_E_OK);
  assert_int_equal(snap_of(d).pending_spool, 1);
  cs_action head = drv_wait_op(d, CS_OP_STORE_HEAD); /* recovered: it may be uploaded already */
  drv_assert_pack(&head, &d->packs[1]);
  cs_head_info info = drv_head_of(&d->packs[1]);
  drv_answer_head(d, &head, &info);
  const cs_pack_ref *refs[] = {&d->packs[1]};
  drv_index_round(d, refs, 1); /* its SPOOL_REMOVE included */
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.indexed, 1);
  assert_int_equal(snap.pending_spool, 0);
  assert_int_equal(snap.pending_index, 0);
  drv_free(d);
}

/*
 * The twin with a full table (one own slot, held by pack 2, sealed while the
 * reconcile LIST was out): pack 1 is adopted, its INDEX refused, and the
 * backlog's report of pack 1 is refused as full. The adopted slot, not dropped
 * by the refusal, still carries pack 1 into the catalog: an INDEX names it,
 * and no SPOOL_REMOVE does (the spool's copy is not ours yet).
 */
static void test_sealed_while_adopted_pack_waits_table_full(void **state) {
  (void)state;
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  cfg.spool_packs_max = 1;
  cs_action list;
  drv *d = reconciling_with(&cfg, &list);
  assert_int_equal(drv_seal(d, drv_pack(d, 2), false), CS_E_OK);
  cs_action head = list_pack_one(d, &list);
  cs_head_info info = drv_head_of(&d->packs[1]);
  drv_answer_head(d, &head, &info);
  cs_action first, put = {0};
  while (drv_poll(d, &first)) {
    if (first.op == CS_OP_CAT_INDEX) drv_answer(d, &first, CS_OUT_REFUSED);
    else if (first.op == CS_OP_STORE_PUT) put = first; /* pack 2's upload, if begun: answered below */
    else fail_msg("unexpected %s", cs_op_name(first.op));
  }
  assert_int_equal(drv_seal_backlog(d, &d->packs[1]), CS_E_FULL);
  assert_int_equal(snap_of(d).pending_spool, 1);
  assert_int_equal(snap_of(d).reconcile_adopted, 1);
  if (put.op == CS_OP_STORE_PUT) drv_answer(d, &put, CS_OUT_OK);
  bool indexed1 = false, indexed2 = false;
  for (uint32_t step = 0; step < 100 && !(indexed1 && indexed2); step++) {
    cs_action a;
    if (!drv_poll(d, &a)) {
      drv_advance(d);
      continue;
    }
    switch (a.op) {
      case CS_OP_STORE_PUT: drv_answer(d, &a, CS_OUT_OK); break;
      case CS_OP_STORE_HEAD: {
        cs_head_info h = drv_head_of(a.pack);
        drv_answer_head(d, &a, &h);
        break;
      }
      case CS_OP_CAT_INDEX:
        for (uint32_t i = 0; i < a.count; i++) {
          indexed1 |= memcmp(a.packs[i]->pack_id.bytes, d->packs[1].pack_id.bytes, 16) == 0;
          indexed2 |= memcmp(a.packs[i]->pack_id.bytes, d->packs[2].pack_id.bytes, 16) == 0;
        }
        drv_answer(d, &a, CS_OUT_OK);
        break;
      case CS_OP_CAT_PUBLISH: drv_answer(d, &a, CS_OUT_OK); break;
      case CS_OP_CAT_COMMITTED: answer_held(d, &a, true); break;
      case CS_OP_SPOOL_REMOVE:
        if (memcmp(a.pack->pack_id.bytes, d->packs[1].pack_id.bytes, 16) == 0)
          fail_msg("pack 1 removed from the spool, but its report was refused");
        drv_answer(d, &a, CS_OUT_OK);
        break;
      case CS_OP_CAT_CLAIM:
      case CS_OP_CAT_READ_CLAIMS: {
        cs_event ev = drv_done(&a, CS_OUT_OK);
        ev.claims.claim_count = 1;
        ev.claims.sole_mine = true;
        drv_send(d, &ev);
        break;
      }
      default: fail_msg("unexpected %s", cs_op_name(a.op));
    }
  }
  if (!indexed1) fail_msg("the adopted pack 1 was never indexed after its report was refused as full");
  if (!indexed2) fail_msg("pack 2 was never indexed");
  drv_free(d);
}

/*
 * A flush waits for what was sealed before it was called, not after
 * (DESIGN.md 6.6): called at the start, with an adopted pack owed and no
 * pack of ours sealed yet, it is drained when the adopted pack is in the
 * catalog, whatever we seal meanwhile. Seal sequences start at 1, so a
 * flush before the first seal has the boundary 0 (it was all packs: the
 * boundary is next_seal_seq - 1).
 */
static void test_flush_before_first_seal_ignores_later_seals(void **state) {
  (void)state;
  drv *d = one_head(CS_OUT_OK, NULL);
  cs_action index = drv_expect(d, CS_OP_CAT_INDEX);
  assert_int_equal(drv_flush(d, 5, d->now + 100 * SEC), CS_E_OK);
  assert_int_equal(drv_seal(d, drv_pack(d, 2), false), CS_E_OK); /* ours, after the call */
  drv_answer(d, &index, CS_OUT_OK);
  cs_action publish = drv_expect(d, CS_OP_CAT_PUBLISH);
  drv_answer(d, &publish, CS_OUT_OK);
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  answer_held(d, &committed, true);
  cs_action a;
  bool answered = false;
  for (uint32_t k = 0; k < 4 && !answered && drv_poll(d, &a); k++) {
    if (a.op != CS_OP_FLUSH_DONE) continue; /* our pack's upload starts: left unanswered */
    assert_int_equal(a.flush.flush_id, 5);
    if (!a.flush.drained)
      fail_msg("the flush is not drained: %u missing, %u owed", a.flush.missing_packs, a.flush.owed_packs);
    answered = true;
  }
  if (!answered) fail_msg("no answer to the flush once the adopted pack was in the catalog");
  drv_free(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_non_uuid_keys_skipped),
      cmocka_unit_test(test_uuid_keys_not_skipped),
      cmocka_unit_test(test_own_spooled_pack_not_queried),
      cmocka_unit_test(test_held_ids_not_headed),
      cmocka_unit_test(test_missing_ids_all_headed),
      cmocka_unit_test(test_foreign_object_skipped),
      cmocka_unit_test(test_real_pack_adopted_and_indexed),
      cmocka_unit_test(test_head_forbidden_is_error_not_skip),
      cmocka_unit_test(test_head_outage_retried_in_same_pass),
      cmocka_unit_test(test_multi_page_follows_token),
      cmocka_unit_test(test_adoptions_gathered_across_pages),
      cmocka_unit_test(test_gathering_stops_at_a_page_without_adoptions),
      cmocka_unit_test(test_empty_token_is_last_page),
      cmocka_unit_test(test_list_outage_retries_same_token),
      cmocka_unit_test(test_adoption_bounded_by_cycle),
      cmocka_unit_test(test_set_aside_not_adopted_again),
      cmocka_unit_test(test_set_aside_adopted_pack_named_by_flush),
      cmocka_unit_test(test_sealed_while_adopted_pack_is_indexed),
      cmocka_unit_test(test_sealed_while_adopted_pack_waits_is_taken_as_ours),
      cmocka_unit_test(test_sealed_while_adopted_pack_waits_table_full),
      cmocka_unit_test(test_flush_before_first_seal_ignores_later_seals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

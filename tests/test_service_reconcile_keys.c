/*
 * Reconcile and the keys a LIST page may hold (issue 12, item 6): a key with
 * a segment no pack key has (empty, "." or "..") is skipped like a key
 * without a pack id: never queried in the catalog, never HEADed, never
 * adopted, however canonical the pack id that ends it. The twin: the pack
 * keys beside them on the page go on as before.
 */
#include "test_service_driver.h"

static cs_snapshot snap_of(drv *d) {
  cs_snapshot snap;
  drv_snap(d, &snap);
  return snap;
}

static void test_odd_segment_keys_skipped(void **state) {
  (void)state;
  cs_service_config cfg = drv_config(CS_ROLE_PUBLISHER);
  drv *d = drv_new(&cfg);
  drv_start(d);
  drv_acquire(d, 7, 0);
  cs_action list = drv_expect(d, CS_OP_STORE_LIST);
  const cs_pack_ref *ours = drv_pack(d, 1);
  /* Packs 2..6 are real ids, listed under keys no pack of ours has. */
  static const char *const shapes[] = {"cat/../other/", "cat/./", "cat//", "/cat/", "../"};
  char odd[5][CS_KEY_MAX];
  const char *keys[6];
  for (uint32_t i = 0; i < 5; i++) {
    const cs_pack_ref *p = drv_pack(d, 2 + i);
    snprintf(odd[i], sizeof odd[i], "%s%s", shapes[i], p->key + 4); /* the "<id>.dmi-pack" after "cat/" */
    keys[i] = odd[i];
  }
  keys[5] = ours->key;
  drv_answer_list(d, &list, keys, 6, NULL);
  cs_action committed = drv_expect(d, CS_OP_CAT_COMMITTED);
  if (committed.count != 1) fail_msg("the catalog was asked about %u ids; only pack 1's key is a pack key", committed.count);
  assert_memory_equal(committed.ids[0].bytes, ours->pack_id.bytes, 16);
  assert_int_equal(snap_of(d).reconcile_skipped, 5);
  static const bool held[1] = {false};
  drv_answer_committed(d, &committed, held);
  cs_action head = drv_expect(d, CS_OP_STORE_HEAD);
  assert_true(head.head_only);
  assert_string_equal(head.pack->key, ours->key);
  drv_answer(d, &head, CS_OUT_NOT_FOUND);
  drv_expect_none(d);
  cs_snapshot snap = snap_of(d);
  assert_int_equal(snap.reconcile_skipped, 5);
  assert_int_equal(snap.reconcile_adopted, 0);
  assert_int_equal(snap.reconcile_passes, 1);
  drv_free(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_odd_segment_keys_skipped)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests of the sink core: sealing (count, bytes, linger, flush, close),
 * the spool quota under both full policies, seal failures, and a seeded
 * property test. Replay the property test with CAPSTORE_SEED=<seed>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/sink.h"

#define MS CS_MS_NS

/* Small limits so tests reach every edge in a few calls. */
static cs_sink_config small_config(cs_full_policy policy) {
  cs_sink_config cfg;
  cs_sink_config_default(&cfg);
  cfg.pack_records_max = 4;
  cfg.pack_bytes_max = 1000;
  cfg.linger_ns = 10 * MS;
  cfg.spool_bytes_max = 4000;
  cfg.spool_packs_max = 8;
  cfg.full_policy = policy;
  cfg.block_max_ns = 100 * MS;
  return cfg;
}

static void sink_start(cs_sink *sink, const cs_sink_config *cfg) {
  char msg[128];
  assert_int_equal(cs_sink_init(sink, cfg, msg, sizeof msg), CS_E_OK);
  assert_string_equal(msg, "");
}

static uint64_t admit_ok(cs_sink *sink, uint64_t now_ns, uint64_t record_bytes) {
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit(sink, now_ns, record_bytes, now_ns, &pack_seq), CS_E_OK);
  assert_true(pack_seq != 0);
  return pack_seq;
}

static void expect_seal(cs_sink *sink, uint64_t pack_seq, uint32_t records, uint64_t record_bytes,
                        cs_seal_reason reason) {
  cs_sink_action action;
  assert_true(cs_sink_poll(sink, 0, &action));
  assert_int_equal(action.op, CS_SINK_SEAL);
  assert_int_equal(action.pack_seq, pack_seq);
  assert_int_equal(action.record_count, records);
  assert_int_equal(action.record_bytes, record_bytes);
  assert_string_equal(cs_seal_reason_name(action.reason), cs_seal_reason_name(reason));
}

static void expect_done(cs_sink *sink, cs_sink_op op, uint64_t flush_id, int err) {
  cs_sink_action action;
  assert_true(cs_sink_poll(sink, 0, &action));
  assert_int_equal(action.op, op);
  if (op == CS_SINK_FLUSHED) assert_int_equal(action.flush_id, flush_id);
  assert_int_equal(action.err, err);
}

static void expect_nothing(cs_sink *sink) {
  cs_sink_action action;
  assert_false(cs_sink_poll(sink, 0, &action));
}

static cs_sink_stats stats_of(const cs_sink *sink) {
  cs_sink_stats stats;
  cs_sink_stats_get(sink, &stats);
  return stats;
}

static void test_config_default_is_valid(void **state) {
  (void)state;
  cs_sink_config cfg;
  char msg[128] = "junk";
  cs_sink_config_default(&cfg);
  assert_int_equal(cs_sink_config_validate(&cfg, msg, sizeof msg), CS_E_OK);
  assert_string_equal(msg, "");
  assert_int_equal(cfg.pack_records_max, 4096);
  assert_int_equal(cfg.pack_bytes_max, UINT64_C(64) << 20);
  assert_int_equal(cfg.linger_ns, CS_SEC_NS);
  assert_int_equal(cfg.spool_bytes_max, UINT64_C(8) << 30);
  assert_int_equal(cfg.spool_packs_max, 4096);
  assert_int_equal(cfg.full_policy, CS_FULL_BLOCK);
  assert_int_equal(cfg.block_max_ns, 5 * CS_SEC_NS);
}

static void test_config_bad_field_is_named(void **state) {
  (void)state;
  static const struct {
    int field;
    const char *name;
  } cases[] = {
      {0, "pack_records_max"}, {1, "pack_records_max"}, {2, "pack_bytes_max"},  {3, "linger_ns"},
      {4, "spool_bytes_max"},  {5, "spool_bytes_max"},  {6, "spool_packs_max"}, {7, "full_policy"},
      {8, "block_max_ns"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cs_sink_config cfg = small_config(CS_FULL_BLOCK);
    switch (cases[i].field) {
    case 0: cfg.pack_records_max = 0; break;
    case 1: cfg.pack_records_max = 1000001; break;
    case 2: cfg.pack_bytes_max = 0; break;
    case 3: cfg.linger_ns = MS - 1; break;
    case 4: cfg.spool_bytes_max = 0; break;
    case 5: cfg.spool_bytes_max = cfg.pack_bytes_max - 1; break;
    case 6: cfg.spool_packs_max = 0; break;
    case 7: cfg.full_policy = (cs_full_policy)3; break;
    default: cfg.block_max_ns = 0; break;
    }
    char msg[128] = "";
    assert_int_equal(cs_sink_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
    assert_non_null(strstr(msg, cases[i].name));
    cs_sink sink;
    msg[0] = '\0';
    assert_int_equal(cs_sink_init(&sink, &cfg, msg, sizeof msg), CS_E_CONFIG);
    assert_non_null(strstr(msg, cases[i].name));
  }
}

static void test_config_block_time_ignored_under_refuse(void **state) {
  (void)state;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  cfg.block_max_ns = 0;
  assert_int_equal(cs_sink_config_validate(&cfg, NULL, 0), CS_E_OK);
  char tiny[8];
  cfg.pack_records_max = 0;
  assert_int_equal(cs_sink_config_validate(&cfg, tiny, sizeof tiny), CS_E_CONFIG);
  assert_string_equal(tiny, "pack_re"); /* truncated, still terminated */
}

static void test_seal_on_record_count(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  for (int i = 0; i < 3; i++) assert_int_equal(admit_ok(&sink, 0, 10), 1);
  expect_nothing(&sink); /* three records: below the count */
  assert_int_equal(stats_of(&sink).open_records, 3);
  assert_int_equal(admit_ok(&sink, 0, 10), 1);
  expect_seal(&sink, 1, 4, 40, CS_SEAL_RECORDS);
  expect_nothing(&sink);
  assert_int_equal(admit_ok(&sink, 0, 10), 2);
  assert_int_equal(stats_of(&sink).seals_inflight, 1);
}

static void test_seal_on_bytes_before_overflow(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  assert_int_equal(admit_ok(&sink, 0, 400), 1);
  assert_int_equal(admit_ok(&sink, 0, 600), 1); /* exactly pack_bytes_max: still open */
  expect_nothing(&sink);
  assert_int_equal(admit_ok(&sink, 0, 1), 2); /* would exceed: pack 1 sealed first */
  expect_seal(&sink, 1, 2, 1000, CS_SEAL_BYTES);
  expect_nothing(&sink);
  assert_int_equal(stats_of(&sink).open_records, 1);
}

/* A record whose descriptor would take the footer past its bound starts a new pack; one that can never fit is refused. */
static void test_seal_on_footer_bytes_before_overflow(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  cfg.pack_footer_bytes_max = 64 * 1024;
  sink_start(&sink, &cfg);
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit_record(&sink, 0, 10, 40 * 1024, 0, &pack_seq), CS_E_OK);
  assert_int_equal(pack_seq, 1);
  assert_int_equal(cs_sink_admit_record(&sink, 0, 10, 24 * 1024, 0, &pack_seq), CS_E_OK); /* exactly the bound */
  assert_int_equal(pack_seq, 1);
  expect_nothing(&sink);
  assert_int_equal(cs_sink_admit_record(&sink, 0, 10, 1, 0, &pack_seq), CS_E_OK); /* would exceed: sealed first */
  assert_int_equal(pack_seq, 2);
  expect_seal(&sink, 1, 2, 20, CS_SEAL_BYTES);
  assert_int_equal(cs_sink_admit_record(&sink, 0, 10, 64 * 1024 + 1, 0, &pack_seq), CS_E_TOO_LARGE);
  expect_nothing(&sink);
  cfg.pack_footer_bytes_max = 1000;
  char msg[128];
  assert_int_equal(cs_sink_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "pack_footer_bytes_max"));
}

static void test_oversize_record_gets_own_pack(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  assert_int_equal(admit_ok(&sink, 0, 100), 1);
  assert_int_equal(admit_ok(&sink, 0, 1500), 2);
  expect_seal(&sink, 1, 1, 100, CS_SEAL_BYTES);
  expect_seal(&sink, 2, 1, 1500, CS_SEAL_BYTES);
  expect_nothing(&sink);
  assert_int_equal(admit_ok(&sink, 0, 100), 3);
  /* Twin: an oversize record into an empty sink seals just its own pack. */
  cs_sink other;
  sink_start(&other, &cfg);
  assert_int_equal(admit_ok(&other, 0, 1001), 1);
  expect_seal(&other, 1, 1, 1001, CS_SEAL_BYTES);
  expect_nothing(&other);
}

static void test_seal_on_linger(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  assert_int_equal(cs_sink_next_deadline(&sink), CS_NEVER); /* nothing open */
  admit_ok(&sink, 100, 10);
  admit_ok(&sink, 5 * MS, 10); /* linger counts from the first record */
  assert_int_equal(cs_sink_next_deadline(&sink), 100 + 10 * MS);
  cs_sink_tick(&sink, 100 + 10 * MS - 1);
  expect_nothing(&sink);
  cs_sink_tick(&sink, 100 + 10 * MS);
  expect_seal(&sink, 1, 2, 20, CS_SEAL_LINGER);
  assert_int_equal(cs_sink_next_deadline(&sink), CS_NEVER);
  cs_sink_tick(&sink, 100 * MS);
  expect_nothing(&sink);
}

static void test_flush_seals_open_pack(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  admit_ok(&sink, 0, 10);
  assert_int_equal(cs_sink_flush(&sink, 1, 7), CS_E_OK);
  expect_seal(&sink, 1, 1, 10, CS_SEAL_FLUSH);
  expect_nothing(&sink); /* not flushed until the seal completes */
  assert_int_equal(cs_sink_on_sealed(&sink, 2, 1, 200, CS_E_OK), CS_E_OK);
  expect_done(&sink, CS_SINK_FLUSHED, 7, CS_E_OK);
  expect_nothing(&sink);
  assert_int_equal(stats_of(&sink).packs_sealed, 1);
}

static void test_flush_with_nothing_open_is_immediate(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  assert_int_equal(cs_sink_flush(&sink, 0, 3), CS_E_OK);
  expect_done(&sink, CS_SINK_FLUSHED, 3, CS_E_OK);
  expect_nothing(&sink);
  assert_int_equal(stats_of(&sink).packs_sealed, 0);
}

static void test_flush_while_flush_waits_is_state(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  admit_ok(&sink, 0, 10);
  assert_int_equal(cs_sink_flush(&sink, 0, 1), CS_E_OK);
  assert_int_equal(cs_sink_flush(&sink, 0, 2), CS_E_STATE);
  expect_seal(&sink, 1, 1, 10, CS_SEAL_FLUSH);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 10, CS_E_OK), CS_E_OK);
  assert_int_equal(cs_sink_flush(&sink, 0, 2), CS_E_STATE); /* FLUSHED 1 not polled yet */
  expect_done(&sink, CS_SINK_FLUSHED, 1, CS_E_OK);
  assert_int_equal(cs_sink_flush(&sink, 0, 2), CS_E_OK);
  expect_done(&sink, CS_SINK_FLUSHED, 2, CS_E_OK);
}

/* A sink whose full pack 1 is sealing when flush 9 is called. */
static void flush_behind_seal(cs_sink *sink, const cs_sink_config *cfg) {
  sink_start(sink, cfg);
  for (int i = 0; i < 4; i++) admit_ok(sink, 0, 10);
  expect_seal(sink, 1, 4, 40, CS_SEAL_RECORDS);
  assert_int_equal(cs_sink_flush(sink, 0, 9), CS_E_OK);
}

static void test_flush_waits_for_seal_in_flight(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  flush_behind_seal(&sink, &cfg);
  expect_nothing(&sink); /* pack 1 is not sealed yet */
  admit_ok(&sink, 0, 10); /* pack 2 opened after the call: not waited for */
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 40, CS_E_OK), CS_E_OK);
  expect_done(&sink, CS_SINK_FLUSHED, 9, CS_E_OK);
  assert_int_equal(stats_of(&sink).open_records, 1);
}

/* A pack opened after the call and sealing when the flush's last pack is sealed is not waited for either. */
static void test_flush_ignores_later_seal_in_flight(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  flush_behind_seal(&sink, &cfg);
  for (int i = 0; i < 4; i++) admit_ok(&sink, 0, 10); /* pack 2, after the call: full, its seal goes out */
  expect_seal(&sink, 2, 4, 40, CS_SEAL_RECORDS);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 40, CS_E_OK), CS_E_OK);
  expect_done(&sink, CS_SINK_FLUSHED, 9, CS_E_OK); /* pack 2's seal still in flight */
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 2, 40, CS_E_OK), CS_E_OK);
  expect_nothing(&sink);
}

static void test_close_seals_and_refuses(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  admit_ok(&sink, 0, 10);
  assert_int_equal(cs_sink_close(&sink, 1), CS_E_OK);
  expect_seal(&sink, 1, 1, 10, CS_SEAL_CLOSE);
  expect_nothing(&sink);
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit(&sink, 2, 10, 2, &pack_seq), CS_E_CLOSED); /* closing */
  assert_int_equal(cs_sink_on_sealed(&sink, 3, 1, 10, CS_E_OK), CS_E_OK);
  expect_done(&sink, CS_SINK_CLOSED, 0, CS_E_OK);
  assert_int_equal(cs_sink_admit(&sink, 4, 10, 4, &pack_seq), CS_E_CLOSED); /* closed */
  assert_int_equal(stats_of(&sink).refused_closed, 2);
  assert_int_equal(stats_of(&sink).records_admitted, 1);
  assert_int_equal(cs_sink_flush(&sink, 5, 1), CS_E_CLOSED);
  assert_int_equal(cs_sink_close(&sink, 5), CS_E_CLOSED);
  assert_int_equal(cs_sink_next_deadline(&sink), CS_NEVER);
  expect_nothing(&sink);
}

static void test_close_with_nothing_open_is_immediate(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  assert_int_equal(cs_sink_close(&sink, 0), CS_E_OK);
  expect_done(&sink, CS_SINK_CLOSED, 0, CS_E_OK);
  expect_nothing(&sink);
}

/* Fills the 4000-byte spool with four packs of one 1000-byte record. */
static void fill_spool(cs_sink *sink) {
  for (uint64_t seq = 1; seq <= 4; seq++) {
    assert_int_equal(admit_ok(sink, 0, 1000), seq);
    if (seq > 1) expect_seal(sink, seq - 1, 1, 1000, CS_SEAL_BYTES);
  }
  assert_int_equal(stats_of(sink).spool_bytes, 4000);
}

static void test_full_spool_refuse_policy(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  fill_spool(&sink);
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit(&sink, 10, 1, 10, &pack_seq), CS_E_SPOOL_FULL);
  assert_int_equal(pack_seq, 0);
  expect_nothing(&sink); /* a refusal seals nothing */
  assert_int_equal(stats_of(&sink).refused_full, 1);
  assert_int_equal(stats_of(&sink).would_block, 0);
  /* Twin: once pack 1 is sealed and removed, the record fits. */
  assert_int_equal(cs_sink_on_sealed(&sink, 11, 1, 1000, CS_E_OK), CS_E_OK);
  cs_sink_on_removed(&sink, 1000);
  assert_int_equal(cs_sink_admit(&sink, 12, 1, 10, &pack_seq), CS_E_OK);
  assert_int_equal(pack_seq, 5);
  expect_seal(&sink, 4, 1, 1000, CS_SEAL_BYTES);
  assert_int_equal(stats_of(&sink).spool_bytes, 3001);
}

static void test_full_spool_block_policy(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_BLOCK);
  sink_start(&sink, &cfg);
  fill_spool(&sink);
  uint64_t pack_seq = 0;
  uint64_t first_ns = 1000;
  assert_int_equal(cs_sink_admit(&sink, first_ns, 1, first_ns, &pack_seq), CS_E_WOULD_BLOCK);
  assert_int_equal(cs_sink_admit(&sink, first_ns + 100 * MS - 1, 1, first_ns, &pack_seq), CS_E_WOULD_BLOCK);
  assert_int_equal(cs_sink_admit(&sink, first_ns + 100 * MS, 1, first_ns, &pack_seq), CS_E_SPOOL_FULL);
  cs_sink_stats stats = stats_of(&sink);
  assert_int_equal(stats.would_block, 2);
  assert_int_equal(stats.refused_full, 1);
  assert_int_equal(stats.records_admitted, 4);
  expect_nothing(&sink);
}

static void test_full_spool_by_packs(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  cfg.spool_packs_max = 2;
  sink_start(&sink, &cfg);
  admit_ok(&sink, 0, 600);
  admit_ok(&sink, 0, 600); /* pack 1 sealed, pack 2 open: two packs */
  expect_seal(&sink, 1, 1, 600, CS_SEAL_BYTES);
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit(&sink, 0, 400, 0, &pack_seq), CS_E_OK); /* fits pack 2 */
  assert_int_equal(cs_sink_admit(&sink, 0, 1, 0, &pack_seq), CS_E_SPOOL_FULL); /* needs pack 3 */
  assert_int_equal(stats_of(&sink).spool_packs, 2);
  assert_int_equal(stats_of(&sink).refused_full, 1);
}

static void test_record_too_large(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_BLOCK);
  sink_start(&sink, &cfg);
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit(&sink, 0, 4001, 0, &pack_seq), CS_E_TOO_LARGE);
  assert_int_equal(cs_sink_admit(&sink, 0, UINT64_MAX, 0, &pack_seq), CS_E_TOO_LARGE);
  assert_int_equal(stats_of(&sink).refused_full, 2);
  assert_int_equal(stats_of(&sink).would_block, 0);
  expect_nothing(&sink);
  /* Twin: a record of exactly the spool quota is admitted in a pack of its own. */
  assert_int_equal(admit_ok(&sink, 0, 4000), 1);
  expect_seal(&sink, 1, 1, 4000, CS_SEAL_BYTES);
}

static void test_first_try_after_now_is_invalid(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_BLOCK);
  sink_start(&sink, &cfg);
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit(&sink, 5, 1, 6, &pack_seq), CS_E_INVALID_ARGUMENT);
  assert_int_equal(stats_of(&sink).records_admitted, 0);
  assert_int_equal(cs_sink_admit(&sink, 6, 1, 6, &pack_seq), CS_E_OK);
}

static void test_seal_failure_reported_once(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  admit_ok(&sink, 0, 10);
  assert_int_equal(cs_sink_flush(&sink, 0, 1), CS_E_OK);
  expect_seal(&sink, 1, 1, 10, CS_SEAL_FLUSH);
  assert_int_equal(cs_sink_on_sealed(&sink, 1, 1, 0, CS_E_IO), CS_E_OK);
  expect_done(&sink, CS_SINK_FLUSHED, 1, CS_E_IO);
  cs_sink_stats stats = stats_of(&sink);
  assert_int_equal(stats.seal_errors, 1);
  assert_int_equal(stats.packs_sealed, 0);
  assert_int_equal(stats.spool_bytes, 0); /* the failed pack's quota is released */
  assert_int_equal(stats.spool_packs, 0);
  /* Twin: the next flush is clean. */
  assert_int_equal(cs_sink_flush(&sink, 2, 2), CS_E_OK);
  expect_done(&sink, CS_SINK_FLUSHED, 2, CS_E_OK);
}

static void test_seal_failure_reported_by_close(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  for (int i = 0; i < 4; i++) admit_ok(&sink, 0, 10);
  expect_seal(&sink, 1, 4, 40, CS_SEAL_RECORDS);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 0, CS_E_CORRUPT), CS_E_OK);
  expect_nothing(&sink); /* reported by the next FLUSHED or CLOSED */
  admit_ok(&sink, 0, 10);
  assert_int_equal(cs_sink_close(&sink, 1), CS_E_OK);
  expect_seal(&sink, 2, 1, 10, CS_SEAL_CLOSE);
  assert_int_equal(cs_sink_on_sealed(&sink, 2, 2, 64, CS_E_OK), CS_E_OK);
  expect_done(&sink, CS_SINK_CLOSED, 0, CS_E_CORRUPT);
}

static void test_on_sealed_unknown_pack_changes_nothing(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  admit_ok(&sink, 0, 10);
  cs_sink before = sink;
  /* Pack 1 is open, not sealing. */
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 10, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 0, 10, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 99, 10, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_memory_equal(&before, &sink, sizeof sink);
  assert_int_equal(cs_sink_flush(&sink, 0, 1), CS_E_OK);
  expect_seal(&sink, 1, 1, 10, CS_SEAL_FLUSH);
  before = sink;
  /* A failure carrying a size, and a positive err. */
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 10, CS_E_IO), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 10, 1), CS_E_INVALID_ARGUMENT);
  assert_memory_equal(&before, &sink, sizeof sink);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 10, CS_E_OK), CS_E_OK);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 10, CS_E_OK), CS_E_INVALID_ARGUMENT); /* twice */
  assert_int_equal(stats_of(&sink).packs_sealed, 1);
}

static void test_sealed_size_replaces_estimate(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  admit_ok(&sink, 0, 900);
  assert_int_equal(cs_sink_flush(&sink, 0, 1), CS_E_OK);
  expect_seal(&sink, 1, 1, 900, CS_SEAL_FLUSH);
  assert_int_equal(stats_of(&sink).spool_bytes, 900);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 1100, CS_E_OK), CS_E_OK);
  assert_int_equal(stats_of(&sink).spool_bytes, 1100);
  assert_int_equal(stats_of(&sink).spool_packs, 1);
  cs_sink_on_removed(&sink, 1100);
  assert_int_equal(stats_of(&sink).spool_bytes, 0);
  assert_int_equal(stats_of(&sink).spool_packs, 0);
}

static void test_recovered_packs_count_against_quota(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  sink_start(&sink, &cfg);
  cs_sink_on_recovered(&sink, 3500);
  uint64_t pack_seq = 0;
  assert_int_equal(cs_sink_admit(&sink, 0, 501, 0, &pack_seq), CS_E_SPOOL_FULL);
  assert_int_equal(cs_sink_admit(&sink, 0, 500, 0, &pack_seq), CS_E_OK);
  assert_int_equal(stats_of(&sink).spool_packs, 2);
  cs_sink_on_removed(&sink, 3500);
  assert_int_equal(stats_of(&sink).spool_bytes, 500);
}

/* Six seals in flight (two records each) and pack 7 open with one record. */
static void fill_seal_slots(cs_sink *sink) {
  for (uint64_t seq = 1; seq <= CS_SINK_SEALS_MAX; seq++) {
    admit_ok(sink, 0, 10);
    admit_ok(sink, 0, 10);
    expect_seal(sink, seq, 2, 20, CS_SEAL_RECORDS);
  }
  assert_int_equal(admit_ok(sink, 0, 10), CS_SINK_SEALS_MAX + 1);
  assert_int_equal(stats_of(sink).seals_inflight, CS_SINK_SEALS_MAX);
}

static void test_seal_slots_full_is_backpressure(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  cfg.pack_records_max = 2;
  cfg.spool_packs_max = 16;
  sink_start(&sink, &cfg);
  fill_seal_slots(&sink);
  uint64_t pack_seq = 0;
  /* It would seal pack 7: the disk is behind, not the quota. */
  assert_int_equal(cs_sink_admit(&sink, 0, 10, 0, &pack_seq), CS_E_FULL);
  assert_int_equal(stats_of(&sink).refused_sealing, 1);
  assert_int_equal(stats_of(&sink).refused_full, 0);
  assert_int_equal(cs_sink_next_deadline(&sink), CS_NEVER);
  cs_sink_tick(&sink, 20 * MS); /* linger is due but no slot is free */
  expect_nothing(&sink);
  assert_int_equal(cs_sink_on_sealed(&sink, 20 * MS, 1, 20, CS_E_OK), CS_E_OK);
  expect_seal(&sink, 7, 1, 10, CS_SEAL_LINGER); /* made by the completion */
  assert_int_equal(admit_ok(&sink, 20 * MS, 10), 8);
}

static void test_flush_defers_seal_until_slot_frees(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  cfg.pack_records_max = 2;
  cfg.spool_packs_max = 16;
  sink_start(&sink, &cfg);
  fill_seal_slots(&sink);
  assert_int_equal(cs_sink_flush(&sink, 0, 5), CS_E_OK);
  expect_nothing(&sink);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 3, 20, CS_E_OK), CS_E_OK);
  expect_seal(&sink, 7, 1, 10, CS_SEAL_FLUSH);
  for (uint64_t seq = 1; seq <= CS_SINK_SEALS_MAX + 1; seq++) {
    if (seq == 3) continue;
    expect_nothing(&sink);
    assert_int_equal(cs_sink_on_sealed(&sink, 0, seq, 20, CS_E_OK), CS_E_OK);
  }
  expect_done(&sink, CS_SINK_FLUSHED, 5, CS_E_OK);
}

static void test_close_defers_seal_until_slot_frees(void **state) {
  (void)state;
  cs_sink sink;
  cs_sink_config cfg = small_config(CS_FULL_REFUSE);
  cfg.pack_records_max = 2;
  cfg.spool_packs_max = 16;
  sink_start(&sink, &cfg);
  fill_seal_slots(&sink);
  assert_int_equal(cs_sink_close(&sink, 0), CS_E_OK);
  expect_nothing(&sink);
  assert_int_equal(cs_sink_on_sealed(&sink, 0, 1, 20, CS_E_OK), CS_E_OK);
  expect_seal(&sink, 7, 1, 10, CS_SEAL_CLOSE);
  for (uint64_t seq = 2; seq <= CS_SINK_SEALS_MAX + 1; seq++) {
    expect_nothing(&sink);
    assert_int_equal(cs_sink_on_sealed(&sink, 0, seq, 20, CS_E_OK), CS_E_OK);
  }
  expect_done(&sink, CS_SINK_CLOSED, 0, CS_E_OK);
}

/*
 * The property test: random admits, seal completions (some failing),
 * removals, ticks and flushes against a model, then close. Checked after
 * every call: the quota is never exceeded and matches the model, every answer
 * is counted, a SEAL names exactly the records admitted to its pack, a
 * FLUSHED comes only after every pack up to its boundary completed; after
 * close, every pack that received a record was sealed exactly once.
 */
#define PROP_STEPS 3000u
#define PROP_PACKS (PROP_STEPS + 2u)
#define PROP_SEEDS 40u

static uint64_t prop_seed;

#define PROP_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      print_error("property failed: %s (seed %llu); replay: CAPSTORE_SEED=%llu %s\n", #cond, \
                  (unsigned long long)prop_seed, (unsigned long long)prop_seed,          \
                  "build/tests/test_sink");                                              \
      fail();                                                                            \
    }                                                                                    \
  } while (0)

typedef struct prop_pack {
  uint32_t records;
  uint64_t record_bytes;
  uint32_t seal_actions;
  bool completed; /* sealed or failed */
  bool sealed_ok;
  bool removed;
  uint64_t size_bytes;
} prop_pack;

typedef struct prop_world {
  cs_sink sink;
  cs_sink_config cfg;
  cs_prng prng;
  uint64_t now_ns;
  prop_pack packs[PROP_PACKS];
  uint64_t max_seq;
  uint64_t inflight[CS_SINK_SEALS_MAX];
  uint32_t inflight_count;
  uint64_t admit_answers;
  bool flush_busy;
  uint64_t flush_boundary;
  uint64_t flush_id;
  bool closing;
  bool closed;
} prop_world;

static void prop_drain(prop_world *world) {
  cs_sink_action action;
  for (uint32_t round = 0; round <= CS_SINK_PENDING_MAX; round++) {
    if (!cs_sink_poll(&world->sink, world->now_ns, &action)) return;
    if (action.op == CS_SINK_SEAL) {
      PROP_CHECK(action.pack_seq >= 1 && action.pack_seq <= world->max_seq);
      prop_pack *pack = &world->packs[action.pack_seq];
      PROP_CHECK(pack->seal_actions == 0);
      PROP_CHECK(pack->records == action.record_count && pack->record_bytes == action.record_bytes);
      pack->seal_actions++;
      PROP_CHECK(world->inflight_count < CS_SINK_SEALS_MAX);
      world->inflight[world->inflight_count++] = action.pack_seq;
    } else if (action.op == CS_SINK_FLUSHED) {
      PROP_CHECK(world->flush_busy && action.flush_id == world->flush_id);
      for (uint64_t seq = 1; seq <= world->flush_boundary; seq++)
        PROP_CHECK(world->packs[seq].records == 0 || world->packs[seq].completed);
      world->flush_busy = false;
    } else {
      PROP_CHECK(action.op == CS_SINK_CLOSED && !world->closed);
      world->closed = true;
    }
  }
  PROP_CHECK(false); /* more actions than the ring holds */
}

static void prop_check_quota(prop_world *world) {
  cs_sink_stats stats;
  cs_sink_stats_get(&world->sink, &stats);
  uint64_t bytes = 0;
  uint32_t packs = 0;
  for (uint64_t seq = 1; seq <= world->max_seq; seq++) {
    const prop_pack *pack = &world->packs[seq];
    if (pack->records == 0 || pack->removed || (pack->completed && !pack->sealed_ok)) continue;
    bytes += pack->completed ? pack->size_bytes : pack->record_bytes;
    packs++;
  }
  PROP_CHECK(stats.spool_bytes == bytes && stats.spool_packs == packs);
  PROP_CHECK(stats.spool_bytes <= world->cfg.spool_bytes_max);
  PROP_CHECK(stats.spool_packs <= world->cfg.spool_packs_max);
  PROP_CHECK(stats.records_admitted + stats.would_block + stats.refused_full + stats.refused_sealing +
                 stats.refused_closed ==
             world->admit_answers);
}

static void prop_admit(prop_world *world) {
  uint64_t limit = world->cfg.pack_bytes_max + world->cfg.pack_bytes_max / 2;
  uint64_t record_bytes = cs_prng_below(&world->prng, limit + 1);
  if (cs_prng_below(&world->prng, 50) == 0) record_bytes = world->cfg.spool_bytes_max + 1;
  uint64_t waited_max_ns = world->now_ns < 200 * MS ? world->now_ns + 1 : 200 * MS;
  uint64_t first_ns = world->now_ns - cs_prng_below(&world->prng, waited_max_ns);
  uint64_t pack_seq = 0;
  cs_sink_stats before;
  cs_sink_stats_get(&world->sink, &before);
  int err = cs_sink_admit(&world->sink, world->now_ns, record_bytes, first_ns, &pack_seq);
  world->admit_answers++;
  if (err == CS_E_OK) {
    PROP_CHECK(pack_seq >= 1 && pack_seq < PROP_PACKS && pack_seq >= world->max_seq);
    world->max_seq = pack_seq;
    world->packs[pack_seq].records++;
    world->packs[pack_seq].record_bytes += record_bytes;
  } else if (err == CS_E_WOULD_BLOCK) {
    PROP_CHECK(world->cfg.full_policy == CS_FULL_BLOCK && world->now_ns < first_ns + world->cfg.block_max_ns);
  } else if (err == CS_E_TOO_LARGE) {
    PROP_CHECK(record_bytes > world->cfg.spool_bytes_max);
  } else if (err == CS_E_FULL) { /* admitting it would need one seal more than the slots */
    PROP_CHECK(!world->closing && world->inflight_count + 2 > CS_SINK_SEALS_MAX);
  } else {
    PROP_CHECK(err == (world->closing ? CS_E_CLOSED : CS_E_SPOOL_FULL));
    /* The quota, not the seal slots: one pack more, or these bytes, would not fit. */
    PROP_CHECK(world->closing || before.spool_packs + 1u > world->cfg.spool_packs_max ||
               before.spool_bytes + record_bytes > world->cfg.spool_bytes_max);
  }
}

static void prop_complete_seal(prop_world *world) {
  if (world->inflight_count == 0) return;
  uint32_t index = (uint32_t)cs_prng_below(&world->prng, world->inflight_count);
  uint64_t seq = world->inflight[index];
  world->inflight[index] = world->inflight[--world->inflight_count];
  prop_pack *pack = &world->packs[seq];
  bool fail_seal = cs_prng_below(&world->prng, 10) == 0;
  /* Sizes no larger than the estimate keep the quota provably respected. */
  uint64_t shrink_bytes = cs_prng_below(&world->prng, pack->record_bytes / 4 + 1);
  pack->size_bytes = fail_seal ? 0 : pack->record_bytes - shrink_bytes;
  pack->completed = true;
  pack->sealed_ok = !fail_seal;
  int seal_err = fail_seal ? CS_E_IO : CS_E_OK;
  int err = cs_sink_on_sealed(&world->sink, world->now_ns, seq, pack->size_bytes, seal_err);
  PROP_CHECK(err == CS_E_OK);
}

static void prop_remove(prop_world *world) {
  uint64_t start = 1 + cs_prng_below(&world->prng, world->max_seq + 1);
  for (uint64_t seq = start; seq <= world->max_seq; seq++) {
    prop_pack *pack = &world->packs[seq];
    if (!pack->sealed_ok || pack->removed) continue;
    pack->removed = true;
    cs_sink_on_removed(&world->sink, pack->size_bytes);
    return;
  }
}

static void prop_flush(prop_world *world) {
  uint64_t flush_id = cs_prng_next(&world->prng);
  int err = cs_sink_flush(&world->sink, world->now_ns, flush_id);
  if (world->flush_busy) {
    PROP_CHECK(err == CS_E_STATE);
    return;
  }
  PROP_CHECK(err == CS_E_OK);
  world->flush_busy = true;
  world->flush_id = flush_id;
  world->flush_boundary = world->max_seq;
}

static void prop_step(prop_world *world) {
  world->now_ns += cs_prng_below(&world->prng, 3 * MS);
  switch (cs_prng_below(&world->prng, 8)) {
  case 0:
  case 1:
  case 2: prop_admit(world); break;
  case 3:
  case 4: prop_complete_seal(world); break;
  case 5: prop_remove(world); break;
  case 6: cs_sink_tick(&world->sink, world->now_ns); break;
  default:
    if (cs_prng_below(&world->prng, 4) == 0) prop_flush(world);
    break;
  }
  prop_drain(world);
  prop_check_quota(world);
}

static void prop_config(prop_world *world) {
  cs_sink_config *cfg = &world->cfg;
  cs_sink_config_default(cfg);
  cfg->pack_records_max = 1 + (uint32_t)cs_prng_below(&world->prng, 8);
  cfg->pack_bytes_max = 100 + cs_prng_below(&world->prng, 900);
  cfg->linger_ns = MS + cs_prng_below(&world->prng, 20 * MS);
  cfg->spool_bytes_max = cfg->pack_bytes_max * (1 + cs_prng_below(&world->prng, 6));
  cfg->spool_packs_max = 1 + (uint32_t)cs_prng_below(&world->prng, 10);
  cfg->full_policy = cs_prng_below(&world->prng, 2) == 0 ? CS_FULL_BLOCK : CS_FULL_REFUSE;
  cfg->block_max_ns = MS + cs_prng_below(&world->prng, 50 * MS);
}

static void prop_run(uint64_t seed) {
  static prop_world world;
  memset(&world, 0, sizeof world);
  prop_seed = seed;
  cs_prng_seed(&world.prng, seed);
  prop_config(&world);
  char msg[128];
  PROP_CHECK(cs_sink_init(&world.sink, &world.cfg, msg, sizeof msg) == CS_E_OK);
  for (uint32_t step = 0; step < PROP_STEPS; step++) prop_step(&world);
  PROP_CHECK(cs_sink_close(&world.sink, world.now_ns) == CS_E_OK);
  world.closing = true;
  prop_drain(&world);
  for (uint32_t round = 0; round < CS_SINK_SEALS_MAX + 1 && world.inflight_count > 0; round++) {
    prop_complete_seal(&world);
    prop_drain(&world);
    prop_check_quota(&world);
  }
  PROP_CHECK(world.closed && world.inflight_count == 0);
  for (uint64_t seq = 1; seq <= world.max_seq; seq++) {
    const prop_pack *pack = &world.packs[seq];
    PROP_CHECK(pack->records > 0); /* sequence numbers are dense */
    PROP_CHECK(pack->seal_actions == 1 && pack->completed);
  }
  prop_admit(&world);
  prop_check_quota(&world);
}

static void test_property_random_runs(void **state) {
  (void)state;
  const char *env = getenv("CAPSTORE_SEED");
  if (env != NULL) {
    prop_run(strtoull(env, NULL, 0));
    return;
  }
  cs_prng seeds;
  cs_prng_seed(&seeds, 0x5eed5111c0deULL);
  for (uint32_t run = 0; run < PROP_SEEDS; run++) prop_run(cs_prng_next(&seeds));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_default_is_valid),
      cmocka_unit_test(test_config_bad_field_is_named),
      cmocka_unit_test(test_config_block_time_ignored_under_refuse),
      cmocka_unit_test(test_seal_on_record_count),
      cmocka_unit_test(test_seal_on_bytes_before_overflow),
      cmocka_unit_test(test_seal_on_footer_bytes_before_overflow),
      cmocka_unit_test(test_oversize_record_gets_own_pack),
      cmocka_unit_test(test_seal_on_linger),
      cmocka_unit_test(test_flush_seals_open_pack),
      cmocka_unit_test(test_flush_with_nothing_open_is_immediate),
      cmocka_unit_test(test_flush_while_flush_waits_is_state),
      cmocka_unit_test(test_flush_waits_for_seal_in_flight),
      cmocka_unit_test(test_flush_ignores_later_seal_in_flight),
      cmocka_unit_test(test_close_seals_and_refuses),
      cmocka_unit_test(test_close_with_nothing_open_is_immediate),
      cmocka_unit_test(test_full_spool_refuse_policy),
      cmocka_unit_test(test_full_spool_block_policy),
      cmocka_unit_test(test_full_spool_by_packs),
      cmocka_unit_test(test_record_too_large),
      cmocka_unit_test(test_first_try_after_now_is_invalid),
      cmocka_unit_test(test_seal_failure_reported_once),
      cmocka_unit_test(test_seal_failure_reported_by_close),
      cmocka_unit_test(test_on_sealed_unknown_pack_changes_nothing),
      cmocka_unit_test(test_sealed_size_replaces_estimate),
      cmocka_unit_test(test_recovered_packs_count_against_quota),
      cmocka_unit_test(test_seal_slots_full_is_backpressure),
      cmocka_unit_test(test_flush_defers_seal_until_slot_frees),
      cmocka_unit_test(test_close_defers_seal_until_slot_frees),
      cmocka_unit_test(test_property_random_runs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests of the engine core: open, flush, close and replace sequences,
 * their deadlines, failure handling, and a seeded property test of the close
 * order. Replay the property test with CAPSTORE_SEED=<seed>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/engine.h"

#define MS CS_MS_NS
#define SEC CS_SEC_NS

static void engine_start(cs_engine *engine) {
  cs_engine_config cfg;
  cs_engine_config_default(&cfg);
  char msg[128];
  assert_int_equal(cs_engine_init(engine, &cfg, msg, sizeof msg), CS_E_OK);
  assert_int_equal(engine->state, CS_ENGINE_IDLE);
}

/* Polls the next action and checks it is step; returns it. */
static cs_engine_action expect_step(cs_engine *engine, cs_engine_step step) {
  cs_engine_action action;
  assert_true(cs_engine_poll(engine, 0, &action));
  assert_string_equal(cs_engine_step_name(action.step), cs_engine_step_name(step));
  if (step != CS_STEP_REPORT) assert_true(action.id != 0);
  return action;
}

/* Polls step and completes it with err at now_ns. */
static cs_engine_action run_step(cs_engine *engine, uint64_t now_ns, cs_engine_step step, int err) {
  cs_engine_action action = expect_step(engine, step);
  assert_int_equal(cs_engine_on_step_done(engine, now_ns, action.id, err), CS_E_OK);
  return action;
}

static void expect_report(cs_engine *engine, cs_engine_opkind opkind, int err, uint32_t failures) {
  cs_engine_action action = expect_step(engine, CS_STEP_REPORT);
  assert_int_equal(action.id, 0);
  assert_int_equal(action.opkind, opkind);
  assert_int_equal(action.err, err);
  assert_int_equal(action.failures, failures);
  assert_false(cs_engine_poll(engine, 0, &action));
}

static void open_ok(cs_engine *engine, uint64_t now_ns) {
  assert_int_equal(cs_engine_open(engine, now_ns), CS_E_OK);
  run_step(engine, now_ns, CS_STEP_START_SERVICE, CS_E_OK);
  run_step(engine, now_ns, CS_STEP_SWEEP_OPEN, CS_E_OK);
  run_step(engine, now_ns, CS_STEP_OPEN_SINK, CS_E_OK);
  expect_report(engine, CS_ENGINE_OP_OPEN, CS_E_OK, 0);
  assert_int_equal(engine->state, CS_ENGINE_OPEN);
}

static void test_config_default_is_valid(void **state) {
  (void)state;
  cs_engine_config cfg;
  char msg[64] = "junk";
  cs_engine_config_default(&cfg);
  assert_int_equal(cfg.start_timeout_ns, 30 * SEC);
  assert_int_equal(cfg.stop_reserve_ns, 5 * SEC);
  assert_int_equal(cs_engine_config_validate(&cfg, msg, sizeof msg), CS_E_OK);
  assert_string_equal(msg, "");
}

static void test_config_bad_field_is_named(void **state) {
  (void)state;
  cs_engine_config cfg;
  cs_engine engine;
  char msg[64];
  cs_engine_config_default(&cfg);
  cfg.start_timeout_ns = 0;
  assert_int_equal(cs_engine_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "start_timeout_ns"));
  assert_int_equal(cs_engine_init(&engine, &cfg, msg, sizeof msg), CS_E_CONFIG);
  cs_engine_config_default(&cfg);
  cfg.stop_reserve_ns = MS - 1;
  assert_int_equal(cs_engine_init(&engine, &cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "stop_reserve_ns"));
  /* No message buffer (NULL, or of size 0): the same answer, nothing written. */
  char none[1] = {'x'};
  assert_int_equal(cs_engine_config_validate(&cfg, NULL, 0), CS_E_CONFIG);
  assert_int_equal(cs_engine_config_validate(&cfg, none, 0), CS_E_CONFIG);
  assert_int_equal(none[0], 'x');
}

static void test_open_runs_steps_in_order(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  assert_int_equal(cs_engine_next_deadline(&engine), CS_NEVER);
  assert_int_equal(cs_engine_open(&engine, 100), CS_E_OK);
  assert_int_equal(engine.state, CS_ENGINE_OPENING);
  cs_engine_action start = run_step(&engine, 200, CS_STEP_START_SERVICE, CS_E_OK);
  assert_int_equal(start.deadline_ns, 100 + 30 * SEC);
  assert_int_equal(start.opkind, CS_ENGINE_OP_OPEN);
  cs_engine_action sweep = run_step(&engine, 300, CS_STEP_SWEEP_OPEN, CS_E_OK);
  assert_int_equal(sweep.deadline_ns, 200 + 30 * SEC); /* from the step's own start */
  assert_true(sweep.id > start.id);
  run_step(&engine, 400, CS_STEP_OPEN_SINK, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_OPEN, CS_E_OK, 0);
  assert_int_equal(engine.state, CS_ENGINE_OPEN);
  assert_int_equal(cs_engine_next_deadline(&engine), CS_NEVER);
  assert_int_equal(engine.log_count, 0);
}

static void test_open_twice_is_state(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  assert_int_equal(cs_engine_open(&engine, 0), CS_E_OK);
  assert_int_equal(cs_engine_open(&engine, 0), CS_E_STATE); /* while opening */
  assert_int_equal(cs_engine_close(&engine, 0, SEC), CS_E_STATE);
  assert_int_equal(cs_engine_flush(&engine, 0, SEC), CS_E_STATE);
  run_step(&engine, 0, CS_STEP_START_SERVICE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_SWEEP_OPEN, CS_E_OK);
  run_step(&engine, 0, CS_STEP_OPEN_SINK, CS_E_OK);
  assert_int_equal(cs_engine_flush(&engine, 0, SEC), CS_E_STATE); /* REPORT not polled */
  expect_report(&engine, CS_ENGINE_OP_OPEN, CS_E_OK, 0);
  assert_int_equal(cs_engine_open(&engine, 0), CS_E_STATE); /* already open */
}

static void test_open_start_refused_reports_at_once(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  assert_int_equal(cs_engine_open(&engine, 0), CS_E_OK);
  run_step(&engine, 5, CS_STEP_START_SERVICE, CS_E_BUSY);
  expect_report(&engine, CS_ENGINE_OP_OPEN, CS_E_BUSY, 1);
  assert_int_equal(engine.state, CS_ENGINE_IDLE);
  assert_int_equal(engine.log_count, 1);
  assert_int_equal(engine.log[0].step, CS_STEP_START_SERVICE);
  assert_int_equal(engine.log[0].err, CS_E_BUSY);
  assert_int_equal(engine.log[0].at_ns, 5);
  open_ok(&engine, 10); /* a failed open may be tried again */
}

static void test_open_later_failure_stops_what_started(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  assert_int_equal(cs_engine_open(&engine, 0), CS_E_OK);
  run_step(&engine, 0, CS_STEP_START_SERVICE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_SWEEP_OPEN, CS_E_IO);
  cs_engine_action stop = run_step(&engine, 1, CS_STEP_STOP_SERVICE, CS_E_TIMEOUT);
  assert_int_equal(stop.deadline_ns, 5 * SEC / 2); /* half the stop reserve */
  run_step(&engine, 2, CS_STEP_RELEASE_LEASE, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_OPEN, CS_E_IO, 2); /* the first error */
  assert_int_equal(engine.state, CS_ENGINE_IDLE);
  assert_int_equal(engine.log_count, 2);
}

static void test_open_start_timeout_stops_service(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  assert_int_equal(cs_engine_open(&engine, 0), CS_E_OK);
  cs_engine_action start = expect_step(&engine, CS_STEP_START_SERVICE);
  assert_int_equal(cs_engine_next_deadline(&engine), 30 * SEC);
  cs_engine_tick(&engine, 30 * SEC - 1);
  cs_engine_action none;
  assert_false(cs_engine_poll(&engine, 0, &none));
  cs_engine_tick(&engine, 30 * SEC);
  /* A start that timed out may have started: it is stopped. */
  run_step(&engine, 30 * SEC, CS_STEP_STOP_SERVICE, CS_E_OK);
  run_step(&engine, 30 * SEC, CS_STEP_RELEASE_LEASE, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_OPEN, CS_E_TIMEOUT, 1);
  assert_int_equal(cs_engine_on_step_done(&engine, 31 * SEC, start.id, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(engine.state, CS_ENGINE_IDLE);
}

static void test_flush_steps_share_deadline(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_flush(&engine, SEC, 3 * SEC), CS_E_OK);
  assert_int_equal(engine.state, CS_ENGINE_FLUSHING);
  assert_int_equal(cs_engine_flush(&engine, SEC, 3 * SEC), CS_E_STATE);
  cs_engine_action sink = run_step(&engine, 2 * SEC, CS_STEP_FLUSH_SINK, CS_E_OK);
  assert_int_equal(sink.deadline_ns, 3 * SEC);
  assert_int_equal(sink.opkind, CS_ENGINE_OP_FLUSH);
  cs_engine_action service = run_step(&engine, 2 * SEC + 1, CS_STEP_FLUSH_SERVICE, CS_E_OK);
  assert_int_equal(service.deadline_ns, 3 * SEC); /* what the sink left of the deadline */
  expect_report(&engine, CS_ENGINE_OP_FLUSH, CS_E_OK, 0);
  assert_int_equal(engine.state, CS_ENGINE_OPEN);
}

static void test_flush_deadline_passing_times_out(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_flush(&engine, SEC, 3 * SEC), CS_E_OK);
  cs_engine_action sink = expect_step(&engine, CS_STEP_FLUSH_SINK);
  cs_engine_tick(&engine, 3 * SEC);
  /* The service flush is issued with no time left and fails at once. */
  cs_engine_action service = expect_step(&engine, CS_STEP_FLUSH_SERVICE);
  expect_report(&engine, CS_ENGINE_OP_FLUSH, CS_E_TIMEOUT, 2);
  assert_int_equal(cs_engine_on_step_done(&engine, 3 * SEC, sink.id, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_engine_on_step_done(&engine, 3 * SEC, service.id, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(engine.state, CS_ENGINE_OPEN);
  assert_int_equal(engine.log_count, 2);
}

static void test_flush_not_open_is_state(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  assert_int_equal(cs_engine_flush(&engine, 0, SEC), CS_E_STATE);
  assert_int_equal(cs_engine_close(&engine, 0, SEC), CS_E_STATE);
  assert_int_equal(cs_engine_replace(&engine, 0, SEC), CS_E_STATE);
  cs_engine_action none;
  assert_false(cs_engine_poll(&engine, 0, &none));
}

static void test_close_deadlines_within_budget(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_close(&engine, SEC, 20 * SEC), CS_E_OK); /* end = 21 s */
  assert_int_equal(engine.state, CS_ENGINE_CLOSING);
  assert_int_equal(cs_engine_flush(&engine, SEC, 2 * SEC), CS_E_STATE);
  cs_engine_action seal = run_step(&engine, 2 * SEC, CS_STEP_SEAL_SINK, CS_E_OK);
  assert_int_equal(seal.deadline_ns, 16 * SEC);
  assert_int_equal(seal.opkind, CS_ENGINE_OP_CLOSE);
  assert_int_equal(run_step(&engine, 3 * SEC, CS_STEP_STOP_CAPTURE, CS_E_OK).deadline_ns, 16 * SEC);
  assert_int_equal(run_step(&engine, 10 * SEC, CS_STEP_DRAIN_SERVICE, CS_E_OK).deadline_ns, 16 * SEC);
  assert_int_equal(run_step(&engine, 11 * SEC, CS_STEP_STOP_SERVICE, CS_E_OK).deadline_ns, 21 * SEC);
  assert_int_equal(run_step(&engine, 12 * SEC, CS_STEP_RELEASE_LEASE, CS_E_OK).deadline_ns, 21 * SEC);
  expect_report(&engine, CS_ENGINE_OP_CLOSE, CS_E_OK, 0);
  assert_int_equal(engine.state, CS_ENGINE_CLOSED);
  assert_int_equal(cs_engine_open(&engine, 13 * SEC), CS_E_STATE);
  assert_int_equal(cs_engine_close(&engine, 13 * SEC, SEC), CS_E_STATE);
  assert_int_equal(cs_engine_flush(&engine, 13 * SEC, SEC), CS_E_STATE);
}

static void test_close_spent_budget_skips_only_drain(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_close(&engine, 10 * SEC, SEC), CS_E_OK); /* budget below the reserve */
  cs_engine_action seal = run_step(&engine, 10 * SEC, CS_STEP_SEAL_SINK, CS_E_OK);
  assert_int_equal(seal.deadline_ns, 10 * SEC + 5 * SEC / 2); /* still half the reserve */
  run_step(&engine, 11 * SEC, CS_STEP_STOP_CAPTURE, CS_E_OK);
  cs_engine_action drain = expect_step(&engine, CS_STEP_DRAIN_SERVICE);
  assert_int_equal(drain.deadline_ns, 11 * SEC); /* never before now: no time left */
  cs_engine_action stop = expect_step(&engine, CS_STEP_STOP_SERVICE);
  assert_int_equal(stop.deadline_ns, 11 * SEC + 5 * SEC / 2);
  assert_int_equal(cs_engine_on_step_done(&engine, 12 * SEC, drain.id, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_engine_on_step_done(&engine, 12 * SEC, stop.id, CS_E_OK), CS_E_OK);
  run_step(&engine, 12 * SEC, CS_STEP_RELEASE_LEASE, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_CLOSE, CS_E_TIMEOUT, 1);
  assert_int_equal(engine.log[0].step, CS_STEP_DRAIN_SERVICE);
}

static void test_close_failures_logged_rest_still_run(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_close(&engine, 0, 60 * SEC), CS_E_OK);
  run_step(&engine, SEC, CS_STEP_SEAL_SINK, CS_E_IO);
  run_step(&engine, 2 * SEC, CS_STEP_STOP_CAPTURE, CS_E_OK);
  cs_engine_action drain = expect_step(&engine, CS_STEP_DRAIN_SERVICE);
  assert_int_equal(cs_engine_next_deadline(&engine), 55 * SEC);
  cs_engine_tick(&engine, 55 * SEC);
  run_step(&engine, 56 * SEC, CS_STEP_STOP_SERVICE, CS_E_BUSY);
  run_step(&engine, 57 * SEC, CS_STEP_RELEASE_LEASE, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_CLOSE, CS_E_IO, 3);
  assert_int_equal(engine.state, CS_ENGINE_CLOSED);
  assert_int_equal(engine.log_count, 3);
  assert_int_equal(engine.log[0].step, CS_STEP_SEAL_SINK);
  assert_int_equal(engine.log[1].step, CS_STEP_DRAIN_SERVICE);
  assert_int_equal(engine.log[1].err, CS_E_TIMEOUT);
  assert_int_equal(engine.log[1].at_ns, 55 * SEC);
  assert_int_equal(engine.log[2].err, CS_E_BUSY);
  assert_int_equal(cs_engine_on_step_done(&engine, 58 * SEC, drain.id, CS_E_OK), CS_E_INVALID_ARGUMENT);
}

static void test_wrong_step_id_changes_nothing(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  cs_engine before = engine;
  /* Nothing in flight. */
  assert_int_equal(cs_engine_on_step_done(&engine, 0, 1, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_memory_equal(&before, &engine, sizeof engine);
  assert_int_equal(cs_engine_open(&engine, 0), CS_E_OK);
  cs_engine_action start = expect_step(&engine, CS_STEP_START_SERVICE);
  before = engine;
  assert_int_equal(cs_engine_on_step_done(&engine, 1, start.id + 1, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_engine_on_step_done(&engine, 1, 0, CS_E_OK), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_engine_on_step_done(&engine, 1, start.id, 1), CS_E_INVALID_ARGUMENT); /* positive err */
  assert_memory_equal(&before, &engine, sizeof engine);
  assert_int_equal(cs_engine_on_step_done(&engine, 1, start.id, CS_E_OK), CS_E_OK);
  assert_int_equal(cs_engine_on_step_done(&engine, 1, start.id, CS_E_OK), CS_E_INVALID_ARGUMENT); /* twice */
  expect_step(&engine, CS_STEP_SWEEP_OPEN);
}

static void test_late_completion_counts_as_timeout(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_flush(&engine, 0, SEC), CS_E_OK);
  cs_engine_action sink = expect_step(&engine, CS_STEP_FLUSH_SINK);
  /* Completed at the deadline, before any tick: too late all the same. */
  assert_int_equal(cs_engine_on_step_done(&engine, SEC, sink.id, CS_E_OK), CS_E_TIMEOUT);
  expect_step(&engine, CS_STEP_FLUSH_SERVICE);
  expect_report(&engine, CS_ENGINE_OP_FLUSH, CS_E_TIMEOUT, 2);
}

static void test_replace_closes_then_opens(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_replace(&engine, SEC, 10 * SEC), CS_E_OK);
  assert_int_equal(engine.state, CS_ENGINE_REPLACING);
  static const cs_engine_step order[] = {
      CS_STEP_SEAL_SINK,     CS_STEP_STOP_CAPTURE, CS_STEP_DRAIN_SERVICE, CS_STEP_STOP_SERVICE,
      CS_STEP_RELEASE_LEASE, CS_STEP_START_SERVICE, CS_STEP_SWEEP_OPEN,   CS_STEP_OPEN_SINK,
  };
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    cs_engine_action action = run_step(&engine, 2 * SEC, order[i], i == 2 ? CS_E_IO : CS_E_OK);
    assert_int_equal(action.opkind, CS_ENGINE_OP_REPLACE);
  }
  expect_report(&engine, CS_ENGINE_OP_REPLACE, CS_E_IO, 1); /* one REPORT for both halves */
  assert_int_equal(engine.state, CS_ENGINE_OPEN);
}

static void test_replace_failed_open_stops_and_idles(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(cs_engine_replace(&engine, 0, 10 * SEC), CS_E_OK);
  run_step(&engine, 0, CS_STEP_SEAL_SINK, CS_E_OK);
  run_step(&engine, 0, CS_STEP_STOP_CAPTURE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_DRAIN_SERVICE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_STOP_SERVICE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_RELEASE_LEASE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_START_SERVICE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_SWEEP_OPEN, CS_E_OK);
  run_step(&engine, 0, CS_STEP_OPEN_SINK, CS_E_CORRUPT);
  run_step(&engine, 0, CS_STEP_STOP_SERVICE, CS_E_OK);
  run_step(&engine, 0, CS_STEP_RELEASE_LEASE, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_REPLACE, CS_E_CORRUPT, 1);
  assert_int_equal(engine.state, CS_ENGINE_IDLE);
  open_ok(&engine, SEC);
}

/* One replace's close half, then the open half's first step: returns the step after START_SERVICE. */
static cs_engine_step replace_until_open(cs_engine *engine, uint64_t now_ns, int seal_err) {
  assert_int_equal(cs_engine_replace(engine, now_ns, 10 * SEC), CS_E_OK);
  run_step(engine, now_ns, CS_STEP_SEAL_SINK, seal_err);
  run_step(engine, now_ns, CS_STEP_STOP_CAPTURE, CS_E_OK);
  run_step(engine, now_ns, CS_STEP_DRAIN_SERVICE, CS_E_OK);
  run_step(engine, now_ns, CS_STEP_STOP_SERVICE, CS_E_OK);
  run_step(engine, now_ns, CS_STEP_RELEASE_LEASE, CS_E_OK);
  run_step(engine, now_ns, CS_STEP_START_SERVICE, CS_E_OK);
  cs_engine_action next;
  assert_true(cs_engine_poll(engine, now_ns, &next));
  assert_int_equal(cs_engine_on_step_done(engine, now_ns, next.id, CS_E_OK), CS_E_OK);
  return next.step;
}

/*
 * A sink whose seal failed may write its .open files for as long as it
 * likes: a later replace that seals a newer sink in time must not sweep
 * them either (seed 51753016: the second replace's sweep took an .open file
 * from under the first sink's seal, and its link then named another pack).
 */
static void test_abandoned_seal_never_swept(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  open_ok(&engine, 0);
  assert_int_equal(replace_until_open(&engine, SEC, CS_E_OK), CS_STEP_SWEEP_OPEN);
  run_step(&engine, SEC, CS_STEP_OPEN_SINK, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_REPLACE, CS_E_OK, 0);
  assert_int_equal(replace_until_open(&engine, 2 * SEC, CS_E_TIMEOUT), CS_STEP_OPEN_SINK);
  expect_report(&engine, CS_ENGINE_OP_REPLACE, CS_E_TIMEOUT, 1);
  assert_int_equal(replace_until_open(&engine, 3 * SEC, CS_E_OK), CS_STEP_OPEN_SINK);
  expect_report(&engine, CS_ENGINE_OP_REPLACE, CS_E_OK, 0);
  /* A failed open half leaves the engine idle; the open after it does not sweep either. */
  assert_int_equal(cs_engine_replace(&engine, 4 * SEC, 10 * SEC), CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_SEAL_SINK, CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_STOP_CAPTURE, CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_DRAIN_SERVICE, CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_STOP_SERVICE, CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_RELEASE_LEASE, CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_START_SERVICE, CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_OPEN_SINK, CS_E_IO);
  run_step(&engine, 4 * SEC, CS_STEP_STOP_SERVICE, CS_E_OK);
  run_step(&engine, 4 * SEC, CS_STEP_RELEASE_LEASE, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_REPLACE, CS_E_IO, 1);
  assert_int_equal(cs_engine_open(&engine, 5 * SEC), CS_E_OK);
  run_step(&engine, 5 * SEC, CS_STEP_START_SERVICE, CS_E_OK);
  run_step(&engine, 5 * SEC, CS_STEP_OPEN_SINK, CS_E_OK);
  expect_report(&engine, CS_ENGINE_OP_OPEN, CS_E_OK, 0);
}

static void test_log_ring_keeps_last_failures(void **state) {
  (void)state;
  cs_engine engine;
  engine_start(&engine);
  for (uint32_t attempt = 0; attempt < CS_ENGINE_LOG_MAX + 4; attempt++) {
    assert_int_equal(cs_engine_open(&engine, attempt), CS_E_OK);
    run_step(&engine, attempt, CS_STEP_START_SERVICE, CS_E_BUSY);
    expect_report(&engine, CS_ENGINE_OP_OPEN, CS_E_BUSY, 1);
  }
  assert_int_equal(engine.log_count, CS_ENGINE_LOG_MAX + 4);
  uint32_t newest = (CS_ENGINE_LOG_MAX + 3) % CS_ENGINE_LOG_MAX;
  assert_int_equal(engine.log[newest].at_ns, CS_ENGINE_LOG_MAX + 3);
  assert_int_equal(engine.log[newest + 1].at_ns, 4); /* the oldest kept */
}

/*
 * The property test: open, then random flushes, replaces and a final close,
 * each step completed on time, failed, completed late, timed out by a tick,
 * or answered with a wrong id first. Checked: ids are unique and nonzero, a
 * close's steps come exactly once each in order SEAL_SINK < STOP_CAPTURE <
 * DRAIN_SERVICE < STOP_SERVICE < RELEASE_LEASE, every close deadline lies
 * within end + 2 * stop_reserve, and each REPORT counts the failures injected.
 */
#define PROP_SEEDS 300u
#define PROP_OPS 12u

static uint64_t prop_seed;

#define PROP_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      print_error("property failed: %s (seed %llu); replay: CAPSTORE_SEED=%llu %s\n", #cond, \
                  (unsigned long long)prop_seed, (unsigned long long)prop_seed,          \
                  "build/tests/test_engine");                                            \
      fail();                                                                            \
    }                                                                                    \
  } while (0)

typedef struct prop_world {
  cs_engine engine;
  cs_prng prng;
  uint64_t now_ns;
  uint64_t last_id;
  uint32_t failures;      /* failures injected in the current operation */
  int first_err;
  cs_engine_step seen[CS_ENGINE_PLAN_MAX + 1];
  uint32_t seen_count;
  bool seal_failed;       /* a SEAL_SINK of this engine failed (in this operation or an earlier one) */
  cs_engine_action report;
} prop_world;

/* Carries out one step: on time, failed, late, timed out, or a wrong id first. */
static void prop_carry_out(prop_world *world, const cs_engine_action *action) {
  cs_engine *engine = &world->engine;
  PROP_CHECK(action->id > world->last_id);
  world->last_id = action->id;
  PROP_CHECK(world->seen_count <= CS_ENGINE_PLAN_MAX);
  world->seen[world->seen_count++] = action->step;
  if (action->deadline_ns <= world->now_ns) { /* issued with no time left: already failed */
    if (action->step == CS_STEP_SEAL_SINK) world->seal_failed = true;
    world->failures++;
    if (world->first_err == CS_E_OK) world->first_err = CS_E_TIMEOUT;
    PROP_CHECK(cs_engine_on_step_done(engine, world->now_ns, action->id, CS_E_OK) == CS_E_INVALID_ARGUMENT);
    return;
  }
  uint64_t choice = cs_prng_below(&world->prng, 10);
  int err = CS_E_OK;
  if (choice == 0) {
    int wrong = cs_engine_on_step_done(engine, world->now_ns, action->id + 1000, CS_E_OK);
    PROP_CHECK(wrong == CS_E_INVALID_ARGUMENT);
  }
  if (choice == 1) err = CS_E_IO;
  if (choice == 2 || choice == 3) err = CS_E_TIMEOUT;
  if (err != CS_E_OK) {
    if (action->step == CS_STEP_SEAL_SINK) world->seal_failed = true;
    world->failures++;
    if (world->first_err == CS_E_OK) world->first_err = err;
  }
  if (choice == 2) { /* the deadline passes: a tick fails the step, a late answer is refused */
    PROP_CHECK(cs_engine_next_deadline(engine) == action->deadline_ns);
    world->now_ns = action->deadline_ns;
    cs_engine_tick(engine, world->now_ns);
    PROP_CHECK(cs_engine_on_step_done(engine, world->now_ns, action->id, CS_E_OK) == CS_E_INVALID_ARGUMENT);
    return;
  }
  if (choice == 3) { /* answered at its deadline: counts as a timeout */
    world->now_ns = action->deadline_ns;
    PROP_CHECK(cs_engine_on_step_done(engine, world->now_ns, action->id, CS_E_OK) == CS_E_TIMEOUT);
    return;
  }
  world->now_ns += cs_prng_below(&world->prng, action->deadline_ns - world->now_ns);
  PROP_CHECK(cs_engine_on_step_done(engine, world->now_ns, action->id, err) == CS_E_OK);
}

/* Drives the operation just started to its REPORT. */
static void prop_drive(prop_world *world, cs_engine_opkind opkind) {
  world->failures = 0;
  world->first_err = CS_E_OK;
  world->seen_count = 0;
  cs_engine_action action;
  for (uint32_t round = 0; round <= CS_ENGINE_QUEUE_MAX; round++) {
    PROP_CHECK(cs_engine_poll(&world->engine, world->now_ns, &action));
    PROP_CHECK(action.opkind == opkind);
    if (action.step == CS_STEP_REPORT) {
      PROP_CHECK(action.failures == world->failures && action.err == world->first_err);
      PROP_CHECK(!cs_engine_poll(&world->engine, world->now_ns, &action));
      world->report = action;
      return;
    }
    prop_carry_out(world, &action);
  }
  PROP_CHECK(false); /* no REPORT within a plan's worth of steps */
}

static void prop_check_close_order(const prop_world *world) {
  static const cs_engine_step order[] = {
      CS_STEP_SEAL_SINK,    CS_STEP_STOP_CAPTURE,  CS_STEP_DRAIN_SERVICE,
      CS_STEP_STOP_SERVICE, CS_STEP_RELEASE_LEASE,
  };
  PROP_CHECK(world->seen_count >= 5);
  for (uint32_t i = 0; i < 5; i++) PROP_CHECK(world->seen[i] == order[i]);
}

static void prop_check_close_deadlines(prop_world *world, uint64_t end_ns) {
  /* Every close step ended by end + 2 R: the clock never passed that bound. */
  PROP_CHECK(world->now_ns <= end_ns + 2 * world->engine.cfg.stop_reserve_ns);
}

static void prop_open(prop_world *world) {
  PROP_CHECK(cs_engine_open(&world->engine, world->now_ns) == CS_E_OK);
  prop_drive(world, CS_ENGINE_OP_OPEN);
  PROP_CHECK(world->seen[0] == CS_STEP_START_SERVICE);
  /* A sink abandoned by any earlier failed seal may still write: no open of this engine sweeps. */
  for (uint32_t i = 0; i < world->seen_count; i++)
    PROP_CHECK(!world->seal_failed || world->seen[i] != CS_STEP_SWEEP_OPEN);
  PROP_CHECK(world->engine.state == (world->failures == 0 ? CS_ENGINE_OPEN : CS_ENGINE_IDLE));
}

static void prop_close_or_replace(prop_world *world, bool replace) {
  uint64_t budget_ns = cs_prng_below(&world->prng, 20 * SEC);
  uint64_t end_ns = world->now_ns + budget_ns;
  int err = replace ? cs_engine_replace(&world->engine, world->now_ns, budget_ns)
                    : cs_engine_close(&world->engine, world->now_ns, budget_ns);
  PROP_CHECK(err == CS_E_OK);
  prop_drive(world, replace ? CS_ENGINE_OP_REPLACE : CS_ENGINE_OP_CLOSE);
  prop_check_close_order(world);
  if (!replace) {
    PROP_CHECK(world->seen_count == 5 && world->engine.state == CS_ENGINE_CLOSED);
    prop_check_close_deadlines(world, end_ns);
    return;
  }
  PROP_CHECK(world->seen[5] == CS_STEP_START_SERVICE);
  /* After a failed seal (this one's or an earlier one's) an old sink may still write: no sweep. */
  for (uint32_t i = 5; i < world->seen_count; i++)
    PROP_CHECK(!world->seal_failed || world->seen[i] != CS_STEP_SWEEP_OPEN);
  bool opened = world->seen[world->seen_count - 1] == CS_STEP_OPEN_SINK;
  /* Otherwise the sink opens only after the sweep. */
  if (opened && !world->seal_failed) PROP_CHECK(world->seen[world->seen_count - 2] == CS_STEP_SWEEP_OPEN);
  PROP_CHECK(world->engine.state == (opened ? CS_ENGINE_OPEN : CS_ENGINE_IDLE));
}

static void prop_run(uint64_t seed) {
  static prop_world world;
  memset(&world, 0, sizeof world);
  prop_seed = seed;
  cs_prng_seed(&world.prng, seed);
  cs_engine_config cfg;
  cs_engine_config_default(&cfg);
  cfg.stop_reserve_ns = MS + cs_prng_below(&world.prng, 10 * SEC);
  char msg[64];
  PROP_CHECK(cs_engine_init(&world.engine, &cfg, msg, sizeof msg) == CS_E_OK);
  for (uint32_t op = 0; op < PROP_OPS; op++) {
    world.now_ns += cs_prng_below(&world.prng, SEC);
    if (world.engine.state == CS_ENGINE_IDLE) {
      prop_open(&world);
      continue;
    }
    PROP_CHECK(world.engine.state == CS_ENGINE_OPEN);
    if (cs_prng_below(&world.prng, 3) == 0) {
      prop_close_or_replace(&world, true);
      continue;
    }
    uint64_t deadline_ns = world.now_ns + cs_prng_below(&world.prng, 5 * SEC);
    PROP_CHECK(cs_engine_flush(&world.engine, world.now_ns, deadline_ns) == CS_E_OK);
    prop_drive(&world, CS_ENGINE_OP_FLUSH);
    PROP_CHECK(world.seen_count == 2 && world.now_ns <= deadline_ns);
  }
  if (world.engine.state == CS_ENGINE_IDLE) prop_open(&world);
  if (world.engine.state == CS_ENGINE_OPEN) prop_close_or_replace(&world, false);
  PROP_CHECK(world.engine.state == CS_ENGINE_CLOSED || world.engine.state == CS_ENGINE_IDLE);
}

static void test_property_random_runs(void **state) {
  (void)state;
  const char *env = getenv("CAPSTORE_SEED");
  if (env != NULL) {
    prop_run(strtoull(env, NULL, 0));
    return;
  }
  cs_prng seeds;
  cs_prng_seed(&seeds, 0xe1e1c0deULL);
  for (uint32_t run = 0; run < PROP_SEEDS; run++) prop_run(cs_prng_next(&seeds));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_default_is_valid),
      cmocka_unit_test(test_config_bad_field_is_named),
      cmocka_unit_test(test_open_runs_steps_in_order),
      cmocka_unit_test(test_open_twice_is_state),
      cmocka_unit_test(test_open_start_refused_reports_at_once),
      cmocka_unit_test(test_open_later_failure_stops_what_started),
      cmocka_unit_test(test_open_start_timeout_stops_service),
      cmocka_unit_test(test_flush_steps_share_deadline),
      cmocka_unit_test(test_flush_deadline_passing_times_out),
      cmocka_unit_test(test_flush_not_open_is_state),
      cmocka_unit_test(test_close_deadlines_within_budget),
      cmocka_unit_test(test_close_spent_budget_skips_only_drain),
      cmocka_unit_test(test_close_failures_logged_rest_still_run),
      cmocka_unit_test(test_wrong_step_id_changes_nothing),
      cmocka_unit_test(test_late_completion_counts_as_timeout),
      cmocka_unit_test(test_replace_closes_then_opens),
      cmocka_unit_test(test_replace_failed_open_stops_and_idles),
      cmocka_unit_test(test_abandoned_seal_never_swept),
      cmocka_unit_test(test_log_ring_keeps_last_failures),
      cmocka_unit_test(test_property_random_runs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The simulator's publish invariants (sim/checker.c, sim_check_publish),
 * called directly on a world holding a publish log: the swarm never reaches
 * "a version published twice" (the watermark, late-rows and fence invariants
 * stop every defect tried so far before it: docs/simulator.md, "Replicated
 * catalog"), so this shows the check fires when it is reached, names the
 * repeat, and lets through what is harmless.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "world.h"

typedef struct fixture {
  sim_world *w;
  sim_result result;
} fixture;

static cs_uuid lease(uint8_t tag) {
  cs_uuid id;
  memset(&id, 0, sizeof id);
  id.bytes[0] = tag;
  return id;
}

/* A log of one publish: version 5 by lease A (p0, term 3), sent at 100 ns; the watermark is 5. */
static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->w = calloc(1, sizeof *f->w);
  assert_non_null(f->w);
  f->w->result = &f->result;
  f->w->publishes[0] = (sim_publish){.version = 5, .term = 3, .proc = 0, .at_ns = 200, .lease_id = lease(0xA)};
  f->w->publish_count = 1;
  f->w->watermark = 5;
  f->w->watermark_sent_ns = 100;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  free(f->w);
  free(f);
  return 0;
}

/* Runs the check on a publish of `version` by lease `tag` (p1, term 4) sent at sent_ns: true when it bailed. */
static bool bails(fixture *f, uint64_t version, uint8_t tag, uint64_t sent_ns) {
  sim_req req;
  memset(&req, 0, sizeof req);
  req.op = CS_OP_CAT_PUBLISH;
  req.proc = 1;
  req.version = version;
  req.term = 4;
  req.fence_term = 4;
  req.lease_id = lease(tag);
  req.sent_ns = sent_ns;
  f->result.reason[0] = '\0';
  if (setjmp(f->w->bail) != 0) return true;
  sim_check_publish(f->w, &req);
  return false;
}

/* Another lease's publish of a version in the log, landing late (sent before the watermark's): named a repeat. */
static void test_version_published_twice(void **state) {
  fixture *f = *state;
  assert_true(bails(f, 5, 0xB, 50));
  assert_int_equal(f->result.exit_code, SIM_EXIT_SAFETY);
  assert_non_null(strstr(f->result.reason, "version 5 was published twice: by p0 at term 3 and by p1 at term 4"));
}

/* The same, sent after the watermark's publish: still named a repeat, not only "at or below the watermark". */
static void test_repeat_named_before_watermark(void **state) {
  fixture *f = *state;
  assert_true(bails(f, 5, 0xB, 150));
  assert_non_null(strstr(f->result.reason, "published twice"));
}

/* A version below the watermark no lease published, sent after the watermark's publish: a watermark going back. */
static void test_below_watermark_sent_later(void **state) {
  fixture *f = *state;
  assert_true(bails(f, 4, 0xB, 150));
  assert_int_equal(f->result.exit_code, SIM_EXIT_SAFETY);
  assert_non_null(strstr(f->result.reason, "p1 published version 4 at or below the watermark 5"));
}

/* Harmless: the same lease's second landing of its own version sent before the watermark's (a timed-out
   publish it sent again), an old publish sent before the watermark's that lands late at a version nobody
   else took, and a publish above the watermark. */
static void test_harmless_publishes_pass(void **state) {
  fixture *f = *state;
  assert_false(bails(f, 5, 0xA, 50));
  assert_false(bails(f, 4, 0xB, 50));
  assert_false(bails(f, 6, 0xB, 150));
  assert_string_equal(f->result.reason, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_version_published_twice, setup, teardown),
      cmocka_unit_test_setup_teardown(test_repeat_named_before_watermark, setup, teardown),
      cmocka_unit_test_setup_teardown(test_below_watermark_sent_later, setup, teardown),
      cmocka_unit_test_setup_teardown(test_harmless_publishes_pass, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

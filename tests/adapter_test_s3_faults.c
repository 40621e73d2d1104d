/*
 * The S3 adapter on the live s3rver of the ctest fixture, through the TCP
 * fault switch (faults/tcp_switch.h): every fault ends in its outcome kind
 * within the configured timeout, and requests in flight at once do not wait
 * for one another (a held request leaves the others, synchronous ones
 * included, free to finish; the bound holds; closing abandons what is in
 * flight). argv[1] names the fixture's endpoint file ("endpoint access_key
 * secret bucket").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "capstore/s3.h"
#include "tcp_switch.h"

static struct {
  char endpoint[256], access_key[128], secret[128], bucket[64];
  unsigned port;
  char prefix[32]; /* this run's keys: "flt<pid>/" */
} live;

typedef struct fixture {
  cs_tcp_switch *sw;
  cs_store direct;   /* straight to the server: setup and cleanup */
  cs_store switched; /* through the switch */
} fixture;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void open_store(unsigned port, uint32_t request_timeout_ms, uint32_t max_connections, cs_store *out) {
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%u", port);
  cs_s3_config cfg = {.endpoint = endpoint, .bucket = live.bucket, .access_key_id = live.access_key,
                      .secret_access_key = live.secret, .allow_insecure = true, .connect_timeout_ms = 1000,
                      .request_timeout_ms = request_timeout_ms, .max_connections = max_connections};
  char msg[256];
  int rc = cs_s3_open(&cfg, out, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("cs_s3_open: %s", msg);
}

static const char *key_of(const char *name) {
  static char keys[8][CS_KEY_MAX];
  static unsigned next;
  char *key = keys[next++ % 8];
  snprintf(key, CS_KEY_MAX, "%s%s", live.prefix, name);
  return key;
}

/* The path prefix the switch matches for keys under this run's prefix plus sub. */
static const char *path_of(const char *sub) {
  static char path[128];
  snprintf(path, sizeof path, "/%s/%s%s", live.bucket, live.prefix, sub);
  return path;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(cs_tcp_switch_start(0, (uint16_t)live.port, &f->sw), CS_E_OK);
  open_store(live.port, 10000, 8, &f->direct);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  if (f->switched.ops) f->switched.ops->close(f->switched.self);
  static const char *const names[] = {"k", "free/0", "free/1", "free/2", "free/3", "held/x", "held/y", "held/z"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    cs_store_result res;
    (void)f->direct.ops->del(f->direct.self, key_of(names[i]), &res);
  }
  f->direct.ops->close(f->direct.self);
  cs_tcp_switch_stop(f->sw);
  free(f);
  return 0;
}

static cs_outcome head(cs_store *s, const char *name, double *seconds) {
  cs_object_info info;
  cs_store_result res;
  double t0 = now_s();
  assert_int_equal(s->ops->head(s->self, key_of(name), &info, &res), CS_E_OK);
  if (seconds) *seconds = now_s() - t0;
  return res.outcome;
}

static cs_outcome put(cs_store *s, const char *name) {
  cs_store_result res;
  assert_int_equal(s->ops->put(s->self, key_of(name), "payload", 7, NULL, false, &res), CS_E_OK);
  return res.outcome;
}

static cs_outcome get(cs_store *s, const char *name) {
  char buf[64];
  size_t got = 0;
  cs_store_result res;
  assert_int_equal(s->ops->get(s->self, key_of(name), NULL, buf, sizeof buf, &got, &res), CS_E_OK);
  return res.outcome;
}

static cs_outcome del(cs_store *s, const char *name) {
  cs_store_result res;
  assert_int_equal(s->ops->del(s->self, key_of(name), &res), CS_E_OK);
  return res.outcome;
}

/* Each fault of the switch, and the outcome kind the adapter must give it. */
static void test_faults_classified(void **state) {
  fixture *f = *state;
  unsigned port = cs_tcp_switch_port(f->sw);
  open_store(port, 800, 8, &f->switched);
  cs_store *s = &f->switched;
  assert_int_equal(put(s, "k"), CS_OUT_OK);
  assert_int_equal(head(s, "k", NULL), CS_OUT_OK);

  assert_int_equal(cs_tcp_switch_cut(f->sw), CS_E_OK);
  assert_int_equal(head(s, "k", NULL), CS_OUT_REFUSED);

  double seconds = 0;
  assert_int_equal(cs_tcp_switch_stall(f->sw), CS_E_OK);
  assert_int_equal(head(s, "k", &seconds), CS_OUT_TIMEOUT);
  assert_true(seconds >= 0.75 && seconds < 2.0); /* the configured 800 ms */

  static const struct {
    const char *method;
    uint32_t status;
    cs_outcome outcome;
  } rules[] = {
      {"HEAD", 403, CS_OUT_FORBIDDEN},   {"PUT", 503, CS_OUT_SERVER_ERROR}, {"GET", 404, CS_OUT_NOT_FOUND},
      {"PUT", 412, CS_OUT_PRECONDITION}, {"PUT", 413, CS_OUT_TOO_LARGE},    {"GET", 429, CS_OUT_THROTTLED},
      {"DELETE", 500, CS_OUT_SERVER_ERROR}, {"GET", 301, CS_OUT_INVALID},   {"HEAD", 400, CS_OUT_INVALID},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    assert_int_equal(cs_tcp_switch_http(f->sw, rules[i].method, path_of(""), rules[i].status), CS_E_OK);
    cs_outcome got = strcmp(rules[i].method, "HEAD") == 0  ? head(s, "k", NULL)
                     : strcmp(rules[i].method, "PUT") == 0 ? put(s, "k")
                     : strcmp(rules[i].method, "GET") == 0 ? get(s, "k")
                                                           : del(s, "k");
    if (got != rules[i].outcome) {
      fail_msg("%s answered %u: %s, expected %s", rules[i].method, rules[i].status, cs_outcome_name(got),
               cs_outcome_name(rules[i].outcome));
    }
    /* The rule is narrow: another method, and another prefix, pass. */
    const char *other = strcmp(rules[i].method, "HEAD") == 0 ? "GET" : "HEAD";
    assert_int_equal(strcmp(other, "GET") == 0 ? get(s, "k") : head(s, "k", NULL), CS_OUT_OK);
  }
  assert_int_equal(cs_tcp_switch_http(f->sw, "HEAD", path_of("held/"), 403), CS_E_OK);
  assert_int_equal(head(s, "k", NULL), CS_OUT_OK);

  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
  assert_int_equal(head(s, "k", NULL), CS_OUT_OK);
}

/* Sent, then the connection reset before any answer: the outcome is unknown (the PUT may have applied). */
static void test_reset_after_send_is_unknown(void **state) {
  fixture *f = *state;
  open_store(cs_tcp_switch_port(f->sw), 5000, 8, &f->switched);
  cs_store *s = &f->switched;
  assert_int_equal(cs_tcp_switch_stall(f->sw), CS_E_OK);
  cs_store_request req = {.op = CS_STORE_PUT, .id = 7, .key = key_of("k"), .bytes = "payload", .len = 7};
  assert_int_equal(cs_store_start(s, &req), CS_E_OK);
  cs_store_request *done = NULL;
  assert_int_equal(cs_store_reap(s, 300, &done), 0); /* sent, no answer yet */
  assert_null(done);
  assert_int_equal(cs_tcp_switch_cut(f->sw), CS_E_OK);
  double t0 = now_s();
  assert_int_equal(cs_store_reap(s, 5000, &done), 1);
  assert_ptr_equal(done, &req);
  assert_int_equal(req.rc, CS_E_OK);
  assert_int_equal(req.res.outcome, CS_OUT_UNKNOWN);
  assert_true(now_s() - t0 < 2.0); /* the reset, not the timeout, ended it */
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
}

/*
 * A held PUT leaves the others free: four PUTs started after it, and a
 * synchronous HEAD, finish while it waits; it ends in TIMEOUT at the
 * configured request timeout.
 */
static void test_held_request_does_not_block_others(void **state) {
  fixture *f = *state;
  open_store(cs_tcp_switch_port(f->sw), 2000, 8, &f->switched);
  cs_store *s = &f->switched;
  assert_int_equal(cs_tcp_switch_http_hold(f->sw, "PUT", path_of("held/")), CS_E_OK);
  double t0 = now_s();
  cs_store_request held = {.op = CS_STORE_PUT, .id = 100, .key = key_of("held/x"), .bytes = "held", .len = 4};
  assert_int_equal(cs_store_start(s, &held), CS_E_OK);
  cs_store_request others[4];
  char names[4][16];
  for (int i = 0; i < 4; i++) {
    snprintf(names[i], sizeof names[i], "free/%d", i);
    others[i] = (cs_store_request){.op = CS_STORE_PUT, .id = (uint64_t)i, .key = key_of(names[i]), .bytes = "free",
                                   .len = 4};
    assert_int_equal(cs_store_start(s, &others[i]), CS_E_OK);
  }
  for (int i = 0; i < 4; i++) {
    cs_store_request *done = NULL;
    assert_int_equal(cs_store_reap(s, 1500, &done), 1);
    assert_true(done->id < 4);
    assert_int_equal(done->res.outcome, CS_OUT_OK);
  }
  assert_int_equal(head(s, "free/2", NULL), CS_OUT_OK); /* synchronous, beside the held one */
  assert_true(now_s() - t0 < 1.9);                      /* all before the held one's timeout */
  cs_store_request *done = NULL;
  assert_int_equal(cs_store_reap(s, 0, &done), 0); /* the held one is not answered yet */
  assert_int_equal(cs_store_reap(s, 5000, &done), 1);
  assert_ptr_equal(done, &held);
  assert_int_equal(held.res.outcome, CS_OUT_TIMEOUT);
  double seconds = now_s() - t0;
  assert_true(seconds >= 1.9 && seconds < 4.0);
  cs_tcp_switch_stats st;
  cs_tcp_switch_stats_get(f->sw, &st);
  assert_int_equal(st.held, 1);
  assert_true(st.accepted >= 2); /* the others had connections of their own */
  assert_int_equal(head(&f->direct, "held/x", NULL), CS_OUT_NOT_FOUND);
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
}

/*
 * The bound: max_connections requests in flight, the next refused with
 * CS_E_FULL; a synchronous call runs at once beside the full set, on the one
 * connection kept beyond the bound.
 */
static void test_bound_and_sync_beside_it(void **state) {
  fixture *f = *state;
  open_store(cs_tcp_switch_port(f->sw), 1500, 3, &f->switched);
  cs_store *s = &f->switched;
  assert_int_equal(s->in_flight_max, 3);
  assert_int_equal(cs_tcp_switch_http_hold(f->sw, "PUT", path_of("held/")), CS_E_OK);
  static const char *const names[3] = {"held/x", "held/y", "held/z"};
  cs_store_request held[3];
  for (int i = 0; i < 3; i++) {
    held[i] = (cs_store_request){.op = CS_STORE_PUT, .id = (uint64_t)i, .key = key_of(names[i]), .bytes = "h",
                                 .len = 1};
    assert_int_equal(cs_store_start(s, &held[i]), CS_E_OK);
  }
  cs_store_request extra = {.op = CS_STORE_HEAD, .id = 9, .key = key_of("free/0")};
  assert_int_equal(cs_store_start(s, &extra), CS_E_FULL);
  double seconds = 0;
  assert_int_equal(head(s, "free/0", &seconds), CS_OUT_NOT_FOUND);
  assert_true(seconds < 1.0); /* not behind the held ones (their timeout is 1.5 s) */
  bool seen[3] = {false};
  for (int i = 0; i < 3; i++) {
    cs_store_request *done = NULL;
    assert_int_equal(cs_store_reap(s, 5000, &done), 1);
    assert_true(done->id < 3 && !seen[done->id]);
    seen[done->id] = true;
    assert_int_equal(done->res.outcome, CS_OUT_TIMEOUT);
  }
  cs_store_request *none = NULL;
  assert_int_equal(cs_store_reap(s, 0, &none), 0);
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
}

/* Closing with requests in flight abandons them at once (no wait for the timeout, nothing leaked). */
static void test_close_abandons_in_flight(void **state) {
  fixture *f = *state;
  open_store(cs_tcp_switch_port(f->sw), 30000, 8, &f->switched);
  assert_int_equal(cs_tcp_switch_http_hold(f->sw, "PUT", path_of("held/")), CS_E_OK);
  cs_store_request held = {.op = CS_STORE_PUT, .id = 1, .key = key_of("held/x"), .bytes = "h", .len = 1};
  assert_int_equal(cs_store_start(&f->switched, &held), CS_E_OK);
  cs_store_request *done = NULL;
  assert_int_equal(cs_store_reap(&f->switched, 200, &done), 0);
  double t0 = now_s();
  cs_store_close(&f->switched);
  assert_true(now_s() - t0 < 1.0);
  assert_int_equal(held.rc, CS_E_CLOSED); /* abandoned: no answer */
  /* The abandoned request is the caller's again: it starts on another store. */
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
  assert_int_equal(cs_store_start(&f->direct, &held), CS_E_OK);
  assert_int_equal(cs_store_reap(&f->direct, 10000, &done), 1);
  assert_ptr_equal(done, &held);
  assert_int_equal(held.res.outcome, CS_OUT_OK);
}

int main(int argc, char **argv) {
  FILE *file = argc < 2 ? NULL : fopen(argv[1], "r");
  if (file == NULL ||
      fscanf(file, "%255s %127s %127s %63s", live.endpoint, live.access_key, live.secret, live.bucket) != 4 ||
      sscanf(live.endpoint, "http://127.0.0.1:%u", &live.port) != 1) {
    fprintf(stderr, "usage: %s ENDPOINT_FILE (written by tools/servers/s3.sh start)\n", argv[0]);
    if (file != NULL) fclose(file);
    return 1;
  }
  fclose(file);
  snprintf(live.prefix, sizeof live.prefix, "flt%ld/", (long)getpid());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_faults_classified, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reset_after_send_is_unknown, setup, teardown),
      cmocka_unit_test_setup_teardown(test_held_request_does_not_block_others, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bound_and_sync_beside_it, setup, teardown),
      cmocka_unit_test_setup_teardown(test_close_abandons_in_flight, setup, teardown),
  };
  return cmocka_run_group_tests_name("s3_faults", tests, NULL, NULL);
}

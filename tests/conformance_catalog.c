/*
 * The catalog conformance suite (conformance_catalog.h): the primitives of
 * docs/catalog-protocol.md, run unchanged against any cs_catalog.
 */
#include "conformance_catalog.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static conformance_catalog_backend suite;

#define TTL_LONG_NS (30u * CS_SEC_NS)
#define MARGIN_NS (50u * CS_MS_NS)
#define SLACK_NS (100u * CS_MS_NS)

/*
 * Short leases are sized from the backend's clock resolution R
 * (conformance_catalog_backend.clock_resolution_ns). A claim stamped at R
 * granularity is seen expiring between TTL - R and TTL + R after it was made,
 * so with TTL = 200 ms + 2R:
 * - it is live, with MARGIN_NS to spare, for at least 150 ms + R after the
 *   claim (TTL - R - MARGIN_NS): the cases check "still held" well inside that;
 * - it has expired (strictly) by TTL + R + SLACK_NS after the claim: the cases
 *   wait that long before they count on the expiry.
 * With R capped at CLOCK_RESOLUTION_MAX_NS the suite sleeps at most
 * 2 x (300 ms + 3R) in all.
 */
static uint64_t resolution_ns(void) { return suite.clock_resolution_ns; }
static uint64_t ttl_short_ns(void) { return 200u * CS_MS_NS + 2 * resolution_ns(); }
static uint64_t expiry_wait_ns(void) { return ttl_short_ns() + resolution_ns() + SLACK_NS; }
/*
 * A release's margin long enough that "others are kept out" holds on a loaded
 * machine, and its wait: the margin, one clock tick the adapter may add to it
 * (ClickHouse does, its now() reading whole seconds), and one tick of reading.
 */
static uint64_t release_margin_ns(void) { return 300u * CS_MS_NS + resolution_ns(); }
static uint64_t release_wait_ns(void) { return release_margin_ns() + 2 * resolution_ns() + SLACK_NS; }

static const cs_uuid lease_a = {{0xa0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
static const cs_uuid lease_b = {{0xb0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
static const cs_uuid lease_c = {{0xc0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};

static int setup(void **state) {
  cs_catalog *c = suite.open_fn(suite.ctx);
  assert_non_null(c);
  cs_catalog_result res;
  assert_int_equal(c->ops->schema_ensure(c->self, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  *state = c;
  return 0;
}

static int teardown(void **state) {
  suite.close_fn(*state, suite.ctx);
  return 0;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / CS_SEC_NS), .tv_nsec = (long)(ns % CS_SEC_NS)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static cs_cat_head head_of(cs_catalog *c, const cs_uuid *lease) {
  cs_cat_head head;
  cs_catalog_result res;
  memset(&head, 0xff, sizeof head);
  assert_int_equal(c->ops->head(c->self, lease, &head, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  return head;
}

static void claim(cs_catalog *c, const cs_uuid *lease, uint64_t base, uint64_t ttl_ns) {
  cs_catalog_result res;
  assert_int_equal(c->ops->claim(c->self, lease, base, ttl_ns, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

static cs_claims claims_at(cs_catalog *c, const cs_uuid *lease, uint64_t term) {
  cs_claims out;
  cs_catalog_result res;
  memset(&out, 0xff, sizeof out);
  assert_int_equal(c->ops->read_claims(c->self, lease, term, &out, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  return out;
}

static void release(cs_catalog *c, const cs_uuid *lease, uint64_t term) {
  cs_catalog_result res;
  assert_int_equal(c->ops->release(c->self, lease, term, release_margin_ns(), &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

/* A pack of three records with capture ids <tag>-c0..c2; step_number carries `step`. */
typedef struct test_pack {
  cs_pack_ref ref;
  cs_pack_record records[3];
  char ids[3][32];
} test_pack;

static void pack_make(test_pack *p, uint8_t tag, uint64_t step) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < 16; i++) p->ref.pack_id.bytes[i] = (uint8_t)(tag * 16 + i);
  p->ref.pack_id.bytes[6] = 0x70;
  p->ref.created_at_ns = UINT64_C(1764000000000000000);
  p->ref.size_bytes = 4096;
  p->ref.index_bytes = 600;
  p->ref.record_count = 3;
  char key[128];
  snprintf(key, sizeof key, "cat/v1/tenant=t/date=2026-11-30/session=s/rank=0/pack-%u.dmi-pack", tag);
  assert_int_equal(cs_pack_ref_set_key(&p->ref, key, strlen(key)), CS_E_OK);
  for (uint32_t r = 0; r < 3; r++) {
    cs_pack_meta *m = &p->records[r].meta;
    snprintf(p->ids[r], sizeof p->ids[r], "%u-c%u", tag, r);
    m->capture_id = cs_pack_text_of(p->ids[r]);
    m->tenant_id = cs_pack_text_of("tenant");
    m->experiment_id = cs_pack_text_of("exp");
    m->run_id = cs_pack_text_of("run");
    m->session_id = cs_pack_text_of("session");
    m->request_id = cs_pack_text_of("req");
    m->sequence_id = cs_pack_text_of("seq");
    m->model_id = cs_pack_text_of("model");
    m->model_revision = cs_pack_text_of("rev");
    m->adapter_revision = r == 1 ? cs_pack_text_of(NULL) : cs_pack_text_of("adapter");
    m->capture_policy_version = cs_pack_text_of("policy-1");
    m->hook_name = cs_pack_text_of("layers.3.mlp");
    m->layer_number = r == 2 ? -1 : 3;
    m->producer_rank = 7;
    m->step_number = step;
    m->token_start = 10 * r;
    m->token_end = 10 * r + 9;
    m->batch_position = r;
    m->dtype = CS_DTYPE_FLOAT32;
    m->rank = 2;
    m->shape[0] = 2;
    m->shape[1] = 3 + r;
    m->captured_at_ns = UINT64_C(1764000000000000000) + r;
    p->records[r].offset = 64 + 64 * (uint64_t)r;
    p->records[r].stored_length = 24 + 8 * (uint64_t)r;
    p->records[r].decoded_length = 24 + 8 * (uint64_t)r;
    p->records[r].crc32 = 0xdeadbeefu + r;
  }
}

static void index_packs(cs_catalog *c, const cs_uuid *lease, uint64_t margin, uint64_t version, test_pack *const *packs,
                        uint32_t count) {
  cs_index_pack batch[4];
  assert_true(count <= 4);
  for (uint32_t i = 0; i < count; i++)
    batch[i] = (cs_index_pack){.ref = &packs[i]->ref, .records = packs[i]->records, .record_count = 3};
  cs_catalog_result res;
  assert_int_equal(c->ops->index(c->self, lease, margin, version, batch, count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

static void publish(cs_catalog *c, const cs_uuid *lease, uint64_t margin, uint64_t version, uint64_t term) {
  cs_catalog_result res;
  assert_int_equal(c->ops->publish(c->self, lease, margin, version, term, 1, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

static void reject(cs_catalog *c, const cs_uuid *lease, uint64_t margin, const cs_uuid *id) {
  cs_catalog_result res;
  assert_int_equal(c->ops->reject(c->self, lease, margin, id, 1, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

static void committed_one(cs_catalog *c, const cs_uuid *id, bool *held, bool *rejected) {
  cs_catalog_result res;
  assert_int_equal(c->ops->committed(c->self, id, 1, held, rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

/* Takes the lease at the current head for lease (which must be free). Returns the new term. */
static uint64_t acquire(cs_catalog *c, const cs_uuid *lease, uint64_t ttl_ns) {
  cs_cat_head head = head_of(c, lease);
  assert_true(head.head_free);
  claim(c, lease, head.head_term, ttl_ns);
  cs_claims claims = claims_at(c, lease, head.head_term + 1);
  assert_int_equal(claims.claim_count, 1);
  assert_true(claims.sole_mine);
  return head.head_term + 1;
}

static void test_schema(void **state) {
  cs_catalog *c = *state;
  cs_catalog_result res;
  assert_int_equal(c->ops->schema_ensure(c->self, &res), CS_E_OK); /* the second time (setup was the first) */
  assert_int_equal(res.outcome, CS_OUT_OK);
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  assert_int_equal(c->ops->schema_ensure(c->self, &res), CS_E_OK); /* never clears what is there */
  assert_int_equal(head_of(c, &lease_a).head_term, term);
  if (suite.reopen_fn != NULL) {
    cs_catalog *second = suite.reopen_fn(c, suite.ctx);
    assert_non_null(second);
    assert_int_equal(second->ops->schema_ensure(second->self, &res), CS_E_OK);
    assert_int_equal(res.outcome, CS_OUT_OK);
    cs_cat_head head = head_of(second, &lease_b);
    assert_int_equal(head.head_term, term); /* the same catalog, seen from a new connection */
    assert_false(head.head_free);
    suite.close_second_fn(second, suite.ctx);
  } else {
    printf("schema on a second connection not checked for %s (no reopen hook)\n", c->ops->name);
  }
  if (suite.schema_versioned_fn != NULL) assert_true(suite.schema_versioned_fn(c, suite.ctx));
}

static void test_claim_at_head(void **state) {
  cs_catalog *c = *state;
  cs_cat_head head = head_of(c, &lease_a);
  assert_int_equal(head.head_term, 0);
  assert_true(head.head_free);
  assert_int_equal(head.watermark, 0);
  claim(c, &lease_a, 0, TTL_LONG_NS);
  cs_claims claims = claims_at(c, &lease_a, 1);
  assert_int_equal(claims.claim_count, 1);
  assert_true(claims.sole_mine);
  assert_false(claims_at(c, &lease_b, 1).sole_mine); /* the twin: not B's */
  head = head_of(c, &lease_a);
  assert_int_equal(head.head_term, 1);
  assert_true(head.head_free); /* all claims at the head are ours */
  assert_false(head_of(c, &lease_b).head_free);
}

static void test_second_claim_ignored(void **state) {
  cs_catalog *c = *state;
  acquire(c, &lease_a, TTL_LONG_NS);
  claim(c, &lease_b, 0, TTL_LONG_NS); /* a stale base */
  claim(c, &lease_b, 1, TTL_LONG_NS); /* the head, but live and not B's */
  assert_int_equal(head_of(c, &lease_a).head_term, 1);
  assert_int_equal(claims_at(c, &lease_b, 2).claim_count, 0);
  cs_claims claims = claims_at(c, &lease_a, 1);
  assert_int_equal(claims.claim_count, 1);
  assert_true(claims.sole_mine);
}

static void test_contested_term(void **state) {
  cs_catalog *c = *state;
  claim(c, &lease_a, 0, TTL_LONG_NS);
  claim(c, &lease_b, 0, TTL_LONG_NS); /* both claim the same base before either reads */
  cs_claims a = claims_at(c, &lease_a, 1), b = claims_at(c, &lease_b, 1);
  assert_int_equal(a.claim_count, b.claim_count);
  assert_false(a.sole_mine && b.sole_mine);
  if (a.claim_count == 2) {
    assert_false(a.sole_mine); /* contested: neither holds, and no fenced write may apply */
    assert_false(b.sole_mine);
    test_pack p;
    pack_make(&p, 1, 1);
    test_pack *packs[] = {&p};
    index_packs(c, &lease_a, 0, 1, packs, 1);
    publish(c, &lease_a, 0, 1, 1);
    assert_int_equal(head_of(c, &lease_a).watermark, 0);
    return;
  }
  printf("contested term not producible on %s: claims are serialized\n", c->ops->name);
  assert_int_equal(a.claim_count, 1);
  assert_true(a.sole_mine); /* the first claim landed, the second saw a new head and did nothing */
  assert_false(b.sole_mine);
}

static void test_renewal(void **state) {
  cs_catalog *c = *state;
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  claim(c, &lease_a, term, TTL_LONG_NS);
  cs_claims claims = claims_at(c, &lease_a, term + 1);
  assert_int_equal(claims.claim_count, 1);
  assert_true(claims.sole_mine);
  assert_int_equal(head_of(c, &lease_a).head_term, term + 1);
  claim(c, &lease_a, term, TTL_LONG_NS); /* a renewal at a stale base does nothing */
  assert_int_equal(head_of(c, &lease_a).head_term, term + 1);
}

static void test_release(void **state) {
  cs_catalog *c = *state;
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  release(c, &lease_b, term); /* not B's: nothing */
  assert_int_equal(head_of(c, &lease_a).head_term, term);
  assert_false(head_of(c, &lease_b).head_free);
  release(c, &lease_a, term);
  assert_false(claims_at(c, &lease_a, term + 1).sole_mine); /* a tombstone is no claim, even live */
  cs_cat_head head = head_of(c, &lease_b);
  assert_int_equal(head.head_term, term + 1);
  /* The tombstone keeps everyone else out for the margin: writes A sent before it land first. */
  assert_false(head.head_free);
  claim(c, &lease_b, term + 1, TTL_LONG_NS);
  assert_int_equal(head_of(c, &lease_b).head_term, term + 1);
  sleep_ns(release_wait_ns());
  assert_true(head_of(c, &lease_b).head_free);
  assert_false(claims_at(c, &lease_a, term + 1).sole_mine);
  uint64_t b_term = acquire(c, &lease_b, TTL_LONG_NS);
  assert_int_equal(b_term, term + 2);
}

static void test_expiry_and_takeover(void **state) {
  cs_catalog *c = *state;
  uint64_t term = acquire(c, &lease_a, ttl_short_ns());
  assert_false(head_of(c, &lease_b).head_free);
  sleep_ns(expiry_wait_ns());
  assert_true(head_of(c, &lease_b).head_free);
  assert_false(claims_at(c, &lease_a, term).sole_mine); /* expired: no longer a live sole claim */
  uint64_t b_term = acquire(c, &lease_b, TTL_LONG_NS);
  assert_int_equal(b_term, term + 1);
}

static void test_fence(void **state) {
  cs_catalog *c = *state;
  test_pack p1, p2, p3, p4;
  pack_make(&p1, 1, 1);
  pack_make(&p2, 2, 1);
  pack_make(&p3, 3, 1);
  pack_make(&p4, 4, 1);
  test_pack *b1[] = {&p1}, *b2[] = {&p2}, *b4[] = {&p4};
  bool held = true, rejected = true;
  /* No lease at all: nothing applies. */
  index_packs(c, &lease_a, 0, 1, b1, 1);
  publish(c, &lease_a, 0, 1, 0);
  assert_int_equal(head_of(c, &lease_a).watermark, 0);
  /* The holder writes. */
  uint64_t term = acquire(c, &lease_a, ttl_short_ns());
  index_packs(c, &lease_a, MARGIN_NS, 1, b1, 1);
  publish(c, &lease_a, MARGIN_NS, 1, term);
  assert_int_equal(head_of(c, &lease_a).watermark, 1);
  committed_one(c, &p1.ref.pack_id, &held, &rejected);
  assert_true(held);
  assert_false(rejected);
  /* A lease expiring within the margin does not pass. */
  index_packs(c, &lease_a, TTL_LONG_NS, 2, b2, 1);
  publish(c, &lease_a, TTL_LONG_NS, 2, term);
  reject(c, &lease_a, TTL_LONG_NS, &p3.ref.pack_id);
  assert_int_equal(head_of(c, &lease_a).watermark, 1);
  /* A stale holder after another took the lease. */
  sleep_ns(expiry_wait_ns());
  uint64_t b_term = acquire(c, &lease_b, TTL_LONG_NS);
  index_packs(c, &lease_a, 0, 2, b2, 1);
  publish(c, &lease_a, 0, 2, term);
  reject(c, &lease_a, 0, &p3.ref.pack_id);
  assert_int_equal(head_of(c, &lease_b).watermark, 1);
  committed_one(c, &p3.ref.pack_id, &held, &rejected);
  assert_false(held);
  assert_false(rejected);
  /* The new holder's writes apply; the stale holder's version 2 rows never show. */
  index_packs(c, &lease_b, MARGIN_NS, 3, b4, 1);
  publish(c, &lease_b, MARGIN_NS, 3, b_term);
  reject(c, &lease_b, MARGIN_NS, &p3.ref.pack_id);
  assert_int_equal(head_of(c, &lease_c).watermark, 3);
  committed_one(c, &p4.ref.pack_id, &held, &rejected);
  assert_true(held);
  committed_one(c, &p2.ref.pack_id, &held, &rejected);
  assert_false(held);
  committed_one(c, &p3.ref.pack_id, &held, &rejected);
  assert_false(held);
  assert_true(rejected);
  /* A released lease fences its old holder out too. */
  release(c, &lease_b, b_term);
  index_packs(c, &lease_b, 0, 4, b2, 1);
  publish(c, &lease_b, 0, 4, b_term);
  assert_int_equal(head_of(c, &lease_c).watermark, 3);
}

static void test_committed(void **state) {
  cs_catalog *c = *state;
  test_pack p1, p2, p3, p4;
  pack_make(&p1, 1, 1);
  pack_make(&p2, 2, 1);
  pack_make(&p3, 3, 1);
  pack_make(&p4, 4, 1);
  test_pack *b1[] = {&p1}, *b2[] = {&p2};
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  index_packs(c, &lease_a, MARGIN_NS, 1, b1, 1);
  index_packs(c, &lease_a, MARGIN_NS, 2, b2, 1);
  publish(c, &lease_a, MARGIN_NS, 1, term);
  reject(c, &lease_a, MARGIN_NS, &p4.ref.pack_id);
  cs_uuid ids[4] = {p1.ref.pack_id, p2.ref.pack_id, p3.ref.pack_id, p4.ref.pack_id};
  bool held[4], rejected[4];
  cs_catalog_result res;
  assert_int_equal(c->ops->committed(c->self, ids, 4, held, rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_true(held[0]);     /* indexed at 1 <= watermark 1 */
  assert_false(held[1]);    /* indexed at 2, not yet published */
  assert_false(held[2]);    /* never indexed */
  assert_false(held[3]);
  assert_false(rejected[0]);
  assert_false(rejected[1]);
  assert_false(rejected[2]);
  assert_true(rejected[3]); /* rejected rows are answered apart */
  publish(c, &lease_a, MARGIN_NS, 2, term);
  assert_int_equal(c->ops->committed(c->self, ids, 4, held, rejected, &res), CS_E_OK);
  assert_true(held[1]); /* the next publish makes the earlier round visible with it */
  /* Many ids in one call. */
  enum { MANY = 150 };
  cs_uuid many[MANY];
  bool many_held[MANY], many_rejected[MANY];
  for (uint32_t i = 0; i < MANY; i++) many[i] = i == 77 ? p1.ref.pack_id : p3.ref.pack_id;
  assert_int_equal(c->ops->committed(c->self, many, MANY, many_held, many_rejected, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  for (uint32_t i = 0; i < MANY; i++) assert_int_equal(many_held[i], i == 77);
}

static void descriptor_check(const cs_descriptor_row *row, const test_pack *p, uint64_t version, uint64_t step) {
  assert_int_equal(row->version, version);
  assert_memory_equal(row->pack_id.bytes, p->ref.pack_id.bytes, 16);
  assert_string_equal(row->key, p->ref.key);
  const cs_pack_meta *m = &row->record.meta;
  uint32_t r = 3;
  for (uint32_t i = 0; i < 3; i++)
    if (m->capture_id.len == strlen(p->ids[i]) && memcmp(m->capture_id.bytes, p->ids[i], m->capture_id.len) == 0) r = i;
  assert_true(r < 3);
  const cs_pack_meta *want = &p->records[r].meta;
  assert_int_equal(m->step_number, step);
  assert_int_equal(m->tenant_id.len, want->tenant_id.len);
  assert_memory_equal(m->tenant_id.bytes, want->tenant_id.bytes, want->tenant_id.len);
  assert_memory_equal(m->hook_name.bytes, want->hook_name.bytes, want->hook_name.len);
  assert_int_equal(m->adapter_revision.bytes == NULL, want->adapter_revision.bytes == NULL);
  assert_int_equal(m->layer_number, want->layer_number);
  assert_int_equal(m->producer_rank, want->producer_rank);
  assert_int_equal(m->token_start, want->token_start);
  assert_int_equal(m->token_end, want->token_end);
  assert_int_equal(m->batch_position, want->batch_position);
  assert_int_equal(m->dtype, want->dtype);
  assert_int_equal(m->rank, want->rank);
  assert_memory_equal(m->shape, want->shape, sizeof want->shape[0] * want->rank);
  assert_int_equal(m->captured_at_ns, want->captured_at_ns);
  assert_int_equal(row->record.offset, p->records[r].offset);
  assert_int_equal(row->record.stored_length, p->records[r].stored_length);
  assert_int_equal(row->record.decoded_length, p->records[r].decoded_length);
  assert_int_equal(row->record.crc32, p->records[r].crc32);
}

static void test_descriptors(void **state) {
  cs_catalog *c = *state;
  test_pack v3, v5, other;
  pack_make(&v3, 5, 3); /* the same pack, indexed twice: step_number tells the rounds apart */
  pack_make(&v5, 5, 5);
  pack_make(&other, 6, 3);
  test_pack *b3[] = {&v3, &other}, *b5[] = {&v5};
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  index_packs(c, &lease_a, MARGIN_NS, 3, b3, 2);
  publish(c, &lease_a, MARGIN_NS, 3, term);
  index_packs(c, &lease_a, MARGIN_NS, 5, b5, 1);
  publish(c, &lease_a, MARGIN_NS, 5, term);
  cs_descriptor_row rows[8];
  uint32_t count = 99;
  cs_catalog_result res;
  assert_int_equal(c->ops->read_descriptors(c->self, 5, &v5.ref.pack_id, rows, 8, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(count, 3); /* one row per capture id */
  for (uint32_t i = 0; i < count; i++) descriptor_check(&rows[i], &v5, 5, 5);
  assert_int_equal(c->ops->read_descriptors(c->self, 3, &v5.ref.pack_id, rows, 8, &count, &res), CS_E_OK);
  assert_int_equal(count, 3); /* a reader pinned at 3 sees the version-3 rows */
  for (uint32_t i = 0; i < count; i++) descriptor_check(&rows[i], &v3, 3, 3);
  assert_int_equal(c->ops->read_descriptors(c->self, 2, &v5.ref.pack_id, rows, 8, &count, &res), CS_E_OK);
  assert_int_equal(count, 0);
  assert_int_equal(c->ops->read_descriptors(c->self, 5, &other.ref.pack_id, rows, 8, &count, &res), CS_E_OK);
  assert_int_equal(count, 3);
  for (uint32_t i = 0; i < count; i++) descriptor_check(&rows[i], &other, 3, 3);
}

/* LIST_PACKS returns a page of the inventory at watermark; checks it is the expected packs, in order. */
static void list_expect(cs_catalog *c, uint64_t watermark, const cs_uuid *after, uint32_t capacity,
                        const test_pack *const *want, const uint64_t *versions, uint32_t want_count) {
  cs_inventory_row rows[8];
  uint32_t count = 99;
  cs_catalog_result res;
  assert_true(capacity <= 8);
  assert_int_equal(c->ops->list_packs(c->self, watermark, after, rows, capacity, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(count, want_count);
  for (uint32_t i = 0; i < count; i++) {
    const cs_pack_ref *got = &rows[i].ref, *ref = &want[i]->ref;
    assert_true(cs_uuid_equal(&got->pack_id, &ref->pack_id));
    assert_string_equal(got->key, ref->key);
    assert_int_equal(got->key_len, ref->key_len);
    assert_int_equal(got->size_bytes, ref->size_bytes);
    assert_int_equal(got->record_count, ref->record_count);
    assert_int_equal(got->created_at_ns, ref->created_at_ns);
    assert_memory_equal(got->sha256, ref->sha256, 32);
    assert_int_equal(rows[i].version, versions[i]);
  }
}

static void test_list_packs(void **state) {
  cs_catalog *c = *state;
  test_pack p7, p8, p9v3, p9v5, p10;
  pack_make(&p7, 7, 1);
  pack_make(&p8, 8, 1);
  pack_make(&p9v3, 9, 3);
  pack_make(&p9v5, 9, 5); /* the same pack indexed again at 5, with other object values */
  pack_make(&p10, 10, 1);
  test_pack *all[] = {&p7, &p8, &p9v3, &p9v5, &p10};
  for (int i = 0; i < 5; i++)
    for (int b = 0; b < 32; b++) all[i]->ref.sha256[b] = (uint8_t)(i * 32 + b);
  p9v5.ref.size_bytes = 8192;
  p9v5.ref.created_at_ns += 1000;
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  list_expect(c, 10, NULL, 8, NULL, NULL, 0); /* an empty catalog */
  test_pack *b3[] = {&p9v3, &p7}, *b5[] = {&p9v5, &p8}, *b6[] = {&p10};
  index_packs(c, &lease_a, MARGIN_NS, 3, b3, 2);
  publish(c, &lease_a, MARGIN_NS, 3, term);
  index_packs(c, &lease_a, MARGIN_NS, 5, b5, 2);
  publish(c, &lease_a, MARGIN_NS, 5, term);
  index_packs(c, &lease_a, MARGIN_NS, 6, b6, 1); /* indexed, not published: a reader at 5 does not see it */

  const test_pack *at5[] = {&p7, &p8, &p9v5}, *at3[] = {&p7, &p9v3}, *at6[] = {&p7, &p8, &p9v5, &p10};
  const uint64_t v5[] = {3, 5, 5}, v3[] = {3, 3}, v6[] = {3, 5, 5, 6};
  list_expect(c, 5, NULL, 8, at5, v5, 3); /* one row per pack, its highest version <= 5 */
  list_expect(c, 3, NULL, 8, at3, v3, 2);
  list_expect(c, 6, NULL, 8, at6, v6, 4);
  list_expect(c, 2, NULL, 8, NULL, NULL, 0);
  /* Pages of one: every pack once, in order, then an empty page. */
  list_expect(c, 5, NULL, 1, at5, v5, 1);
  list_expect(c, 5, &p7.ref.pack_id, 1, at5 + 1, v5 + 1, 1);
  list_expect(c, 5, &p8.ref.pack_id, 1, at5 + 2, v5 + 2, 1);
  list_expect(c, 5, &p9v5.ref.pack_id, 1, NULL, NULL, 0);
  list_expect(c, 5, &p7.ref.pack_id, 8, at5 + 1, v5 + 1, 2);
  list_expect(c, 5, NULL, 0, NULL, NULL, 0); /* no room: nothing, and no error */
}

/* SEARCH: one page; *count rows into rows[capacity]. */
static uint32_t search_page(cs_catalog *c, uint64_t watermark, const cs_search_filter *f, const cs_search_key *after,
                            cs_search_row *rows, uint32_t capacity) {
  uint32_t count = 999;
  cs_catalog_result res;
  assert_int_equal(c->ops->search(c->self, watermark, f, after, rows, capacity, &count, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK) fail_msg("%s: search: %s", c->ops->name, res.detail);
  assert_true(count <= capacity);
  return count;
}

/* "<tag>-c<r>" of each row, joined by spaces: what a search answered, in its order. */
static void search_ids(const cs_search_row *rows, uint32_t count, char *out, size_t size) {
  size_t len = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < count; i++) {
    const cs_pack_text *id = &rows[i].d.record.meta.capture_id;
    int n = snprintf(out + len, size - len, "%s%.*s", i == 0 ? "" : " ", (int)id->len, id->bytes);
    assert_true(n > 0 && (size_t)n < size - len);
    len += (size_t)n;
  }
}

static void search_expect(cs_catalog *c, uint64_t watermark, const cs_search_filter *f, const char *want) {
  cs_search_row rows[16];
  uint32_t count = search_page(c, watermark, f, NULL, rows, 16);
  char got[512];
  search_ids(rows, count, got, sizeof got);
  if (strcmp(got, want) != 0) fail_msg("%s: search at %llu: got \"%s\", want \"%s\"", c->ops->name,
                                       (unsigned long long)watermark, got, want);
}

/*
 * SEARCH: the records visible at the watermark (published, not rejected,
 * named by an inventory row), one per capture at its highest version, in
 * (pack id, offset, capture id) order, each filter field, and keyset pages
 * to the end with no duplicate and no gap.
 */
static void test_search(void **state) {
  cs_catalog *c = *state;
  test_pack a, b, b3, late, poison, stale;
  pack_make(&a, 11, 1);
  pack_make(&b, 12, 2);
  pack_make(&b3, 12, 5); /* b indexed again at 3 */
  pack_make(&late, 13, 3);
  pack_make(&poison, 14, 1);
  pack_make(&stale, 15, 1);
  for (int i = 0; i < 32; i++) a.ref.sha256[i] = (uint8_t)i, b.ref.sha256[i] = b3.ref.sha256[i] = (uint8_t)(100 + i);
  b.ref.size_bytes = b3.ref.size_bytes = 8192;
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  test_pack *v1[] = {&b, &a, &poison}, *v2[] = {&late}, *v3[] = {&b3}, *stale_batch[] = {&stale};
  index_packs(c, &lease_a, MARGIN_NS, 1, v1, 3);
  index_packs(c, &lease_b, MARGIN_NS, 1, stale_batch, 1); /* not the holder: nothing named */
  publish(c, &lease_a, MARGIN_NS, 1, term);
  reject(c, &lease_a, MARGIN_NS, &poison.ref.pack_id);
  index_packs(c, &lease_a, MARGIN_NS, 2, v2, 1); /* never published: above every watermark below 3 */
  index_packs(c, &lease_a, MARGIN_NS, 3, v3, 1);
  publish(c, &lease_a, MARGIN_NS, 3, term);
  cs_search_filter all;
  memset(&all, 0, sizeof all);
  search_expect(c, 0, &all, "");
  search_expect(c, 1, &all, "11-c0 11-c1 11-c2 12-c0 12-c1 12-c2");
  search_expect(c, 3, &all, "11-c0 11-c1 11-c2 12-c0 12-c1 12-c2 13-c0 13-c1 13-c2");
  /* The rows themselves: every field, the version, the pack's size, sha256 and footer offset. */
  cs_search_row rows[16];
  assert_int_equal(search_page(c, 3, &all, NULL, rows, 16), 9);
  for (uint32_t i = 0; i < 9; i++) {
    const test_pack *p = i < 3 ? &a : i < 6 ? &b3 : &late;
    uint64_t version = i < 3 ? 1 : i < 6 ? 3 : 2, step = i < 3 ? 1 : i < 6 ? 5 : 3;
    descriptor_check(&rows[i].d, p, version, step);
    assert_int_equal(rows[i].pack_size_bytes, p->ref.size_bytes);
    assert_memory_equal(rows[i].pack_sha256, p->ref.sha256, 32);
    assert_int_equal(rows[i].footer_offset, 256); /* the last record ends at 192 + 40 */
  }
  assert_int_equal(search_page(c, 1, &all, NULL, rows, 16), 6);
  for (uint32_t i = 3; i < 6; i++) descriptor_check(&rows[i].d, &b, 1, 2); /* pinned at 1: the version-1 rows */
  /* Each field. */
  cs_search_filter f = all;
  f.has_step = true, f.step_min = 2, f.step_max = 3;
  search_expect(c, 3, &f, "13-c0 13-c1 13-c2");
  f = all, f.has_layer = true, f.layer_min = -1, f.layer_max = -1;
  search_expect(c, 3, &f, "11-c2 12-c2 13-c2");
  f = all, f.has_tokens = true, f.token_min = 12, f.token_max = 13;
  search_expect(c, 1, &f, "11-c1 12-c1");
  f = all, f.has_tokens = true, f.token_min = 19, f.token_max = 21; /* [10, 19) ends before 19, [20, 29) meets it */
  search_expect(c, 1, &f, "11-c2 12-c2");
  f = all, f.has_captured_at = true, f.captured_min_ns = UINT64_C(1764000000000000001);
  f.captured_max_ns = UINT64_C(1764000000000000001);
  search_expect(c, 1, &f, "11-c1 12-c1");
  f = all, f.has_dtype = true, f.dtype = CS_DTYPE_INT8;
  search_expect(c, 3, &f, "");
  f.dtype = CS_DTYPE_FLOAT32;
  search_expect(c, 1, &f, "11-c0 11-c1 11-c2 12-c0 12-c1 12-c2");
  cs_pack_text ids[2] = {cs_pack_text_of("12-c2"), cs_pack_text_of("11-c1")};
  f = all, f.capture_ids = ids, f.capture_id_count = 2;
  search_expect(c, 3, &f, "11-c1 12-c2");
  cs_pack_text hooks[2] = {cs_pack_text_of("nope"), cs_pack_text_of("layers.3.mlp")};
  f = all, f.hook_names = hooks, f.hook_name_count = 2;
  search_expect(c, 1, &f, "11-c0 11-c1 11-c2 12-c0 12-c1 12-c2");
  f.hook_name_count = 1;
  search_expect(c, 1, &f, "");
  cs_pack_text *texts[8] = {&f.tenant_id,  &f.experiment_id, &f.run_id,   &f.session_id,
                            &f.request_id, &f.sequence_id,   &f.model_id, &f.model_revision};
  const char *values[8] = {"tenant", "exp", "run", "session", "req", "seq", "model", "rev"};
  for (int i = 0; i < 8; i++) {
    f = all;
    *texts[i] = cs_pack_text_of(values[i]);
    search_expect(c, 1, &f, "11-c0 11-c1 11-c2 12-c0 12-c1 12-c2");
    *texts[i] = cs_pack_text_of("other");
    search_expect(c, 1, &f, "");
    *texts[i] = (cs_pack_text){values[i], strlen(values[i]) - 1}; /* a prefix is another value */
    search_expect(c, 1, &f, "");
  }
  /* Pages of two, then of one, to the end: the same rows in the same order, each once. */
  for (uint32_t page = 1; page <= 2; page++) {
    cs_search_row all_rows[16], part[2];
    uint32_t total = search_page(c, 3, &all, NULL, all_rows, 16), seen = 0;
    cs_search_key key;
    for (int guard = 0; guard < 20; guard++) {
      uint32_t n = search_page(c, 3, &all, seen == 0 ? NULL : &key, part, page);
      for (uint32_t i = 0; i < n; i++) {
        assert_true(seen < total);
        assert_true(cs_uuid_equal(&part[i].d.pack_id, &all_rows[seen].d.pack_id));
        assert_int_equal(part[i].d.record.offset, all_rows[seen].d.record.offset);
        seen++;
      }
      if (n < page) break;
      assert_int_equal(cs_search_key_of(&part[n - 1], &key), CS_E_OK);
    }
    assert_int_equal(seen, total);
  }
  /* Refused before anything is sent. */
  f = all, f.has_step = true, f.step_min = 3, f.step_max = 2;
  uint32_t count = 0;
  cs_catalog_result res;
  assert_int_equal(c->ops->search(c->self, 3, &f, NULL, rows, 16, &count, &res), CS_E_INVALID_ARGUMENT);
  f = all, f.hook_name_count = 1;
  assert_int_equal(c->ops->search(c->self, 3, &f, NULL, rows, 16, &count, &res), CS_E_INVALID_ARGUMENT);
  assert_int_equal(c->ops->search(c->self, 3, NULL, NULL, rows, 16, &count, &res), CS_E_INVALID_ARGUMENT);
}

/*
 * A pack indexed twice at one version: a publisher that crashed between
 * INDEX and PUBLISH leaves the pack in its spool, and its successor indexes
 * it again at the same version (the watermark + 1). Two inventory rows and
 * two copies of each descriptor: SEARCH still shows each capture once,
 * with the pack's size and footer offset.
 */
static void test_search_reindexed_at_one_version(void **state) {
  cs_catalog *c = *state;
  test_pack p;
  pack_make(&p, 21, 1);
  p.ref.size_bytes = 8192;
  test_pack *batch[] = {&p};
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  index_packs(c, &lease_a, MARGIN_NS, 1, batch, 1);
  index_packs(c, &lease_a, MARGIN_NS, 1, batch, 1);
  publish(c, &lease_a, MARGIN_NS, 1, term);
  cs_search_filter all;
  memset(&all, 0, sizeof all);
  search_expect(c, 1, &all, "21-c0 21-c1 21-c2");
  cs_search_row rows[16];
  assert_int_equal(search_page(c, 1, &all, NULL, rows, 16), 3);
  for (uint32_t i = 0; i < 3; i++) {
    assert_int_equal(rows[i].pack_size_bytes, 8192);
    assert_int_equal(rows[i].footer_offset, 256);
  }
  cs_search_key key; /* and page by page */
  assert_int_equal(search_page(c, 1, &all, NULL, rows, 2), 2);
  assert_int_equal(cs_search_key_of(&rows[1], &key), CS_E_OK);
  assert_int_equal(search_page(c, 1, &all, &key, rows, 2), 1);
}

/* INDEX of the first n records of p (its ref's record count set to n). */
static void index_records(cs_catalog *c, uint64_t version, test_pack *p, uint32_t n) {
  p->ref.record_count = n;
  cs_index_pack batch = {.ref = &p->ref, .records = p->records, .record_count = n};
  cs_catalog_result res;
  assert_int_equal(c->ops->index(c->self, &lease_a, MARGIN_NS, version, &batch, 1, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
}

/* What a search answered as text: "<capture id>@<version>/<footer offset>" joined by spaces, NUL as \0. */
static void search_rows_text(const cs_search_row *rows, uint32_t count, char *out, size_t size) {
  size_t len = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < count; i++) {
    const cs_pack_text *id = &rows[i].d.record.meta.capture_id;
    if (i > 0) out[len++] = ' ';
    for (size_t b = 0; b < id->len; b++) {
      assert_true(len + 3 < size);
      if (id->bytes[b] == '\0') out[len++] = '\\', out[len++] = '0';
      else out[len++] = id->bytes[b];
    }
    int n = snprintf(out + len, size - len, "@%llu/%llu", (unsigned long long)rows[i].d.version,
                     (unsigned long long)rows[i].footer_offset);
    assert_true(n > 0 && (size_t)n < size - len);
    len += (size_t)n;
  }
}

/* A whole search, one page, then walked in pages of 1 and 2: the same rows each time. */
static void search_walk_expect(cs_catalog *c, uint64_t watermark, const cs_search_filter *f, const char *want) {
  cs_search_row all[16], part[2];
  char got[1024], each[16][128]; /* as text: a row's text lives in the adapter only until its next call */
  uint32_t total = search_page(c, watermark, f, NULL, all, 16);
  search_rows_text(all, total, got, sizeof got);
  if (strcmp(got, want) != 0)
    fail_msg("%s: search at %llu: got \"%s\", want \"%s\"", c->ops->name, (unsigned long long)watermark, got, want);
  for (uint32_t i = 0; i < total; i++) search_rows_text(&all[i], 1, each[i], sizeof each[i]);
  for (uint32_t page = 1; page <= 2; page++) {
    uint32_t seen = 0;
    cs_search_key key;
    for (int guard = 0; guard < 20; guard++) {
      uint32_t n = search_page(c, watermark, f, seen == 0 ? NULL : &key, part, page);
      for (uint32_t i = 0; i < n; i++, seen++) {
        char one[128];
        search_rows_text(&part[i], 1, one, sizeof one);
        if (seen >= total || strcmp(one, each[seen]) != 0)
          fail_msg("%s: pages of %u: row %u is \"%s\", want \"%s\"", c->ops->name, page, seen, one,
                   seen < total ? each[seen] : "(none)");
      }
      if (n < page) break;
      assert_int_equal(cs_search_key_of(&part[n - 1], &key), CS_E_OK);
    }
    assert_int_equal(seen, total);
  }
}

/*
 * SEARCH resolves each capture on its own: a pack indexed again with fewer
 * records keeps the missing capture at its older version (its own footer
 * offset), a newer row the filter refuses hides an older one it selects,
 * copies of a row show once, and NUL bytes in capture ids, in a filter's
 * values and in the key of a page are bytes like any other (order ties on
 * one offset broken by the capture id's bytes). Every answer the same in one
 * page and in pages of 1 and 2, with and without a filter that selects
 * everything.
 */
static void test_search_versions(void **state) {
  cs_catalog *c = *state;
  test_pack x1, x2, y;
  pack_make(&x1, 21, 1);
  pack_make(&x2, 21, 2);
  pack_make(&y, 22, 1);
  static const char ids[3][4] = {"y\0b", "y\0a", "y"};
  static const size_t id_lens[3] = {3, 3, 1};
  for (int r = 0; r < 3; r++) y.records[r].meta.capture_id = (cs_pack_text){ids[r], id_lens[r]};
  y.records[2].offset = y.records[1].offset; /* a tie on the offset: y, then y\0a */
  y.records[1].meta.hook_name = (cs_pack_text){"layers.3.mlp\0x", 14};
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  index_records(c, 1, &x1, 3);
  index_records(c, 1, &y, 3);
  index_records(c, 1, &y, 3); /* the same rows again: copies */
  publish(c, &lease_a, MARGIN_NS, 1, term);
  index_records(c, 2, &x2, 2); /* x again at 2 without its last record */
  publish(c, &lease_a, MARGIN_NS, 2, term);
  cs_search_filter all, every;
  memset(&all, 0, sizeof all);
  every = all, every.has_step = true, every.step_min = 0, every.step_max = (uint64_t)INT64_MAX;
  const char *at1 = "21-c0@1/256 21-c1@1/256 21-c2@1/256 y\\0b@1/192 y@1/192 y\\0a@1/192";
  const char *at2 = "21-c0@2/192 21-c1@2/192 21-c2@1/256 y\\0b@1/192 y@1/192 y\\0a@1/192";
  search_walk_expect(c, 1, &all, at1);
  search_walk_expect(c, 1, &every, at1);
  search_walk_expect(c, 2, &all, at2);
  search_walk_expect(c, 2, &every, at2);
  cs_search_filter f = all;
  f.has_step = true, f.step_min = 1, f.step_max = 1; /* x's c0 and c1 are at step 2 now: their step-1 rows hidden */
  search_walk_expect(c, 2, &f, "21-c2@1/256 y\\0b@1/192 y@1/192 y\\0a@1/192");
  search_walk_expect(c, 1, &f, at1);
  cs_pack_text wanted[2] = {{"y\0a", 3}, cs_pack_text_of("21-c0")};
  f = all, f.capture_ids = wanted, f.capture_id_count = 2;
  search_walk_expect(c, 2, &f, "21-c0@2/192 y\\0a@1/192");
  wanted[0].len = 2; /* "y\0": no such capture */
  search_walk_expect(c, 2, &f, "21-c0@2/192");
  cs_pack_text hooks[1] = {{"layers.3.mlp\0x", 14}};
  f = all, f.hook_names = hooks, f.hook_name_count = 1;
  search_walk_expect(c, 2, &f, "y\\0a@1/192");
}

static uint32_t descriptors_at(cs_catalog *c, uint64_t watermark, const test_pack *p, cs_descriptor_row *rows) {
  uint32_t count = 99;
  cs_catalog_result res;
  assert_int_equal(c->ops->read_descriptors(c->self, watermark, &p->ref.pack_id, rows, 8, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  return count;
}

/*
 * A stale holder's INDEX shows nothing: not through READ_DESCRIPTORS at any
 * watermark, not through COMMITTED. Where the descriptor rows travel
 * unfenced (ClickHouse, the model) they land as orphans that no inventory
 * row names; the holder indexing the same pack at the same version later
 * shows each capture once.
 */
static void test_stale_index_invisible(void **state) {
  cs_catalog *c = *state;
  test_pack p;
  pack_make(&p, 9, 1);
  test_pack *batch[] = {&p};
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  index_packs(c, &lease_b, MARGIN_NS, 1, batch, 1); /* b holds nothing: OK, and nothing named */
  publish(c, &lease_a, MARGIN_NS, 1, term);
  cs_descriptor_row rows[8];
  assert_int_equal(descriptors_at(c, 1, &p, rows), 0);
  assert_int_equal(descriptors_at(c, INT64_MAX, &p, rows), 0);
  bool held = true, rejected = true;
  committed_one(c, &p.ref.pack_id, &held, &rejected);
  assert_false(held);
  assert_false(rejected);
  index_packs(c, &lease_a, MARGIN_NS, 1, batch, 1); /* at the watermark now: late rows, refused */
  assert_int_equal(descriptors_at(c, 1, &p, rows), 0);
  index_packs(c, &lease_a, MARGIN_NS, 2, batch, 1);
  publish(c, &lease_a, MARGIN_NS, 2, term);
  assert_int_equal(descriptors_at(c, 1, &p, rows), 0);
  assert_int_equal(descriptors_at(c, 2, &p, rows), 3);
  for (uint32_t i = 0; i < 3; i++) descriptor_check(&rows[i], &p, 2, 1);
  committed_one(c, &p.ref.pack_id, &held, &rejected);
  assert_true(held);
}

static bool held_now(cs_catalog *c, const test_pack *p) {
  bool held = false, rejected = false;
  committed_one(c, &p->ref.pack_id, &held, &rejected);
  return held;
}

/*
 * Late rows (docs/catalog-protocol.md): INDEX takes effect only above the
 * watermark and at or above every inventory row, so an INDEX that arrives
 * after a higher version's rows or publish (its sender saw no answer and
 * indexed again) answers OK and names nothing; CAT_HEAD's index_floor is the
 * highest inventory version, where a new holding starts above.
 */
static void test_late_rows_refused(void **state) {
  cs_catalog *c = *state;
  test_pack p1, p2, p3, p4, p5, p6, p7;
  test_pack *all[] = {&p1, &p2, &p3, &p4, &p5, &p6, &p7};
  for (uint8_t i = 0; i < 7; i++) pack_make(all[i], (uint8_t)(40 + i), 1);
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  assert_int_equal(head_of(c, &lease_a).index_floor, 0);
  index_packs(c, &lease_a, MARGIN_NS, 3, &all[0], 1);
  assert_int_equal(head_of(c, &lease_b).index_floor, 3); /* unpublished rows count too */
  assert_int_equal(head_of(c, &lease_b).watermark, 0);
  index_packs(c, &lease_a, MARGIN_NS, 2, &all[1], 1); /* below an inventory row: a late INDEX */
  index_packs(c, &lease_a, MARGIN_NS, 3, &all[2], 1); /* the same version: one round's batches */
  publish(c, &lease_a, MARGIN_NS, 3, term);
  assert_true(held_now(c, &p1));
  assert_false(held_now(c, &p2));
  assert_true(held_now(c, &p3));
  cs_descriptor_row rows[8];
  assert_int_equal(descriptors_at(c, 3, &p2, rows), 0);
  index_packs(c, &lease_a, MARGIN_NS, 3, &all[3], 1); /* at the watermark: would show below it */
  publish(c, &lease_a, MARGIN_NS, 5, term);           /* a publish with no rows of its own */
  index_packs(c, &lease_a, MARGIN_NS, 4, &all[4], 1); /* under the watermark 5 */
  index_packs(c, &lease_a, MARGIN_NS, 6, &all[5], 1);
  publish(c, &lease_a, MARGIN_NS, 6, term);
  assert_false(held_now(c, &p4));
  assert_false(held_now(c, &p5));
  assert_true(held_now(c, &p6));
  assert_int_equal(descriptors_at(c, INT64_MAX, &p4, rows), 0);
  assert_int_equal(descriptors_at(c, INT64_MAX, &p5, rows), 0);
  cs_cat_head head = head_of(c, &lease_b);
  assert_int_equal(head.index_floor, 6);
  assert_int_equal(head.watermark, 6);
  index_packs(c, &lease_a, MARGIN_NS, 7, &all[6], 1); /* above both: takes effect */
  assert_int_equal(head_of(c, &lease_b).index_floor, 7);
  publish(c, &lease_a, MARGIN_NS, 7, term);
  assert_true(held_now(c, &p7));
  assert_int_equal(descriptors_at(c, 7, &p7, rows), 3);
}

/*
 * ARRAY_CANDIDATES as text: "g:<nonce>@<first version>" for the geometry, "<slot>:<nonce>@<first version>" for
 * chunks, the nonce followed by "#<geometry hash>" when the hash is not "h1".
 */
typedef struct candidates_text {
  char text[512];
  size_t len;
  int calls;
  int stop_after; /* answer 7 at this call (0: never) */
} candidates_text;

static int candidates_add(void *ctx, const cs_array_candidate *a) {
  candidates_text *t = ctx;
  t->calls++;
  assert_true(a->key[0] != '\0');
  assert_true(a->stored_length > 0);
  const char *h1 = a->geometry_hash.len == 2 && memcmp(a->geometry_hash.bytes, "h1", 2) == 0 ? "" : "#";
  int n = a->geometry ? snprintf(t->text + t->len, sizeof t->text - t->len, "%sg:%.*s%s%.*s@%llu", t->len ? " " : "",
                                 (int)a->nonce.len, a->nonce.bytes, h1, *h1 ? (int)a->geometry_hash.len : 0,
                                 a->geometry_hash.bytes, (unsigned long long)a->first_version)
                      : snprintf(t->text + t->len, sizeof t->text - t->len, "%s%llu:%.*s%s%.*s@%llu", t->len ? " " : "",
                                 (unsigned long long)a->slot, (int)a->nonce.len, a->nonce.bytes, h1,
                                 *h1 ? (int)a->geometry_hash.len : 0, a->geometry_hash.bytes,
                                 (unsigned long long)a->first_version);
  assert_true(n > 0 && (size_t)n < sizeof t->text - t->len);
  t->len += (size_t)n;
  return t->calls == t->stop_after ? 7 : 0;
}

static void candidates_window_expect(cs_catalog *c, uint64_t watermark, const char *array, const cs_array_window *window,
                                     const char *want) {
  candidates_text t;
  memset(&t, 0, sizeof t);
  cs_catalog_result res;
  memset(&res, 0, sizeof res);
  cs_pack_text id = cs_pack_text_of(array);
  assert_int_equal(c->ops->array_candidates(c->self, watermark, &id, window, candidates_add, &t, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  if (strcmp(t.text, want) != 0)
    fail_msg("%s: array_candidates(%s @%llu, window %s) = '%s', want '%s'", c->ops->name, array,
             (unsigned long long)watermark, window == NULL ? "none" : "set", t.text, want);
}

static void candidates_expect(cs_catalog *c, uint64_t watermark, const char *array, const char *want) {
  candidates_window_expect(c, watermark, array, NULL, want);
}

/* Makes record r of p an array record: geometry (slot ignored) or the chunk of slot, with its nonce. */
static void array_record(test_pack *p, uint32_t r, const char *array, bool geometry, uint64_t slot, const char *nonce) {
  cs_pack_meta *m = &p->records[r].meta;
  m->hook_name = cs_pack_text_of(geometry ? CS_ARRAY_HOOK_GEOMETRY : CS_ARRAY_HOOK_CHUNK);
  m->run_id = cs_pack_text_of(array);
  m->sequence_id = cs_pack_text_of("h1");
  m->request_id = cs_pack_text_of(nonce);
  m->step_number = geometry ? 0 : slot;
}

/*
 * ARRAY_CANDIDATES: one row per (pack, capture) of the array at its LOWEST
 * visible version, geometry first, then by slot and first version. A pack
 * indexed again at a later version keeps its first version (so it keeps
 * its slots); a rejected pack, an orphan, another array's rows and other
 * hooks under the array's id are not candidates.
 */
static void test_array_candidates(void **state) {
  cs_catalog *c = *state;
  test_pack a, b, rej, orphan;
  pack_make(&a, 30, 0);
  pack_make(&b, 31, 0);
  pack_make(&rej, 32, 0);
  pack_make(&orphan, 33, 0);
  array_record(&a, 0, "arr-1", true, 0, "na-g");
  array_record(&a, 1, "arr-1", false, 2, "na-2");
  array_record(&a, 2, "arr-1", false, 5, "na-5");
  array_record(&b, 0, "arr-1", false, 2, "nb-2"); /* a second candidate of slot 2 */
  array_record(&b, 1, "arr-1", false, 1, "nb-1");
  b.records[1].meta.sequence_id = cs_pack_text_of("h2"); /* written for another geometry: answered, with its hash */
  array_record(&b, 2, "arr-2", false, 1, "nb-x");  /* another array */
  array_record(&rej, 0, "arr-1", false, 0, "nr-0");
  array_record(&rej, 1, "arr-1", true, 0, "nr-g");
  rej.records[2].meta.run_id = cs_pack_text_of("arr-1"); /* another hook under the array's id */
  array_record(&orphan, 0, "arr-1", false, 0, "no-0");
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  candidates_expect(c, 0, "arr-1", "");
  index_records(c, 1, &a, 3);
  publish(c, &lease_a, MARGIN_NS, 1, term);
  index_records(c, 2, &b, 3);
  test_pack *stale[] = {&orphan};
  index_packs(c, &lease_b, MARGIN_NS, 2, stale, 1); /* b holds nothing: its rows are orphans */
  publish(c, &lease_a, MARGIN_NS, 2, term);
  index_records(c, 3, &a, 3); /* a again, later: its first version stays 1 */
  index_records(c, 3, &rej, 3);
  reject(c, &lease_a, MARGIN_NS, &rej.ref.pack_id);
  publish(c, &lease_a, MARGIN_NS, 3, term);
  candidates_expect(c, 0, "arr-1", "");
  candidates_expect(c, 1, "arr-1", "g:na-g@1 2:na-2@1 5:na-5@1");
  candidates_expect(c, 2, "arr-1", "g:na-g@1 1:nb-1#h2@2 2:na-2@1 2:nb-2@2 5:na-5@1");
  candidates_expect(c, 3, "arr-1", "g:na-g@1 1:nb-1#h2@2 2:na-2@1 2:nb-2@2 5:na-5@1");
  candidates_expect(c, 3, "arr-2", "1:nb-x@2");
  candidates_expect(c, 3, "arr-", "");
  /* The emit's nonzero answer stops the walk and is returned. */
  candidates_text t;
  memset(&t, 0, sizeof t);
  t.stop_after = 2;
  cs_catalog_result res;
  cs_pack_text id = cs_pack_text_of("arr-1");
  assert_int_equal(c->ops->array_candidates(c->self, 3, &id, NULL, candidates_add, &t, &res), 7);
  assert_int_equal(t.calls, 2);
  cs_pack_text empty = {"", 0};
  assert_int_equal(c->ops->array_candidates(c->self, 3, &empty, NULL, candidates_add, &t, &res), CS_E_INVALID_ARGUMENT);
  assert_int_equal(c->ops->array_candidates(c->self, 3, &id, NULL, NULL, &t, &res), CS_E_INVALID_ARGUMENT);
  /* Windows: the geometry alone, slots [2, 5) without it, [0, 2) with it, a window past every slot. */
  cs_array_window geometry_only = {.with_geometry = true, .slot_from = 0, .slot_to = 0};
  cs_array_window mid = {.with_geometry = false, .slot_from = 2, .slot_to = 5};
  cs_array_window low = {.with_geometry = true, .slot_from = 0, .slot_to = 2};
  cs_array_window past = {.with_geometry = false, .slot_from = 6, .slot_to = UINT64_MAX};
  candidates_window_expect(c, 3, "arr-1", &geometry_only, "g:na-g@1");
  candidates_window_expect(c, 3, "arr-1", &mid, "2:na-2@1 2:nb-2@2");
  candidates_window_expect(c, 3, "arr-1", &low, "g:na-g@1 1:nb-1#h2@2");
  candidates_window_expect(c, 3, "arr-1", &past, "");
}

/* INDEX of one batch that must be refused: CS_E_OK, outcome INVALID, a detail naming NUL, the key and the pack. */
static void index_key_refused(cs_catalog *c, uint64_t version, test_pack *const *packs, uint32_t count,
                              const test_pack *culprit) {
  cs_index_pack batch[4];
  assert_true(count <= 4);
  for (uint32_t i = 0; i < count; i++)
    batch[i] = (cs_index_pack){.ref = &packs[i]->ref, .records = packs[i]->records, .record_count = 3};
  cs_catalog_result res;
  memset(&res, 0, sizeof res);
  assert_int_equal(c->ops->index(c->self, &lease_a, MARGIN_NS, version, batch, count, &res), CS_E_OK);
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&culprit->ref.pack_id, id);
  if (res.outcome != CS_OUT_INVALID || strstr(res.detail, "NUL") == NULL || strstr(res.detail, "key") == NULL ||
      strstr(res.detail, id) == NULL)
    fail_msg("%s: a NUL byte in a key answered outcome %d, detail '%s' (want INVALID naming NUL, the key and %s)",
             c->ops->name, (int)res.outcome, res.detail, id);
}

/*
 * A pack's object key names an object in the store and a row in every
 * catalog: a NUL byte in it is refused by every catalog alike at INDEX
 * (catalog.h), before anything lands. The whole batch is INVALID and its
 * detail names the key and its pack. A catalog that stored it would hand a
 * reader a different key (SQLite cut it at the NUL).
 */
static void test_nul_key_refused(void **state) {
  cs_catalog *c = *state;
  test_pack key_nul, clean;
  pack_make(&key_nul, 10, 1);
  pack_make(&clean, 12, 1);
  static const char key[] = "cat/v1/pack-10\0/../other.dmi-pack"; /* cut at the NUL it names another key */
  assert_int_equal(cs_pack_ref_set_key(&key_nul.ref, key, sizeof key - 1), CS_E_OK);
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  test_pack *b_key[] = {&key_nul}, *b_mixed[] = {&clean, &key_nul}, *b_clean[] = {&clean};
  index_key_refused(c, 1, b_key, 1, &key_nul);
  index_key_refused(c, 1, b_mixed, 2, &key_nul); /* a clean pack first: the whole batch is refused */
  publish(c, &lease_a, MARGIN_NS, 1, term);
  cs_descriptor_row rows[8];
  const test_pack *all[] = {&key_nul, &clean};
  for (int i = 0; i < 2; i++) {
    bool held = true, rejected = true;
    committed_one(c, &all[i]->ref.pack_id, &held, &rejected);
    assert_false(held); /* nothing of a refused batch landed */
    assert_int_equal(descriptors_at(c, INT64_MAX, all[i], rows), 0);
  }
  index_packs(c, &lease_a, MARGIN_NS, 2, b_clean, 1); /* the twin: the clean pack alone is indexed whole */
  publish(c, &lease_a, MARGIN_NS, 2, term);
  assert_int_equal(descriptors_at(c, 2, &clean, rows), 3);
  for (uint32_t i = 0; i < 3; i++) descriptor_check(&rows[i], &clean, 2, 1);
}

/* The twelve texts of m in column order. */
static void texts_of(cs_pack_meta *m, cs_pack_text **out) {
  cs_pack_text *texts[12] = {&m->capture_id, &m->tenant_id, &m->experiment_id, &m->run_id,
                             &m->session_id, &m->request_id, &m->sequence_id, &m->model_id,
                             &m->model_revision, &m->adapter_revision, &m->capture_policy_version, &m->hook_name};
  memcpy(out, texts, sizeof texts);
}

/* A pack whose every text holds U+0000: record 0 at the start, record 1 in the middle, record 2 at the end. */
typedef struct nul_pack {
  test_pack p;
  char bytes[3][12][32];
} nul_pack;

static void nul_pack_make(nul_pack *n, uint8_t tag) {
  static const char *const names[12] = {"cap", "tenant", "exp", "run", "session", "req", "seq", "model", "rev",
                                        "adapter", "policy", "hook"};
  pack_make(&n->p, tag, 1);
  for (uint32_t r = 0; r < 3; r++) {
    cs_pack_text *texts[12];
    texts_of(&n->p.records[r].meta, texts);
    for (int t = 0; t < 12; t++) {
      size_t len = strlen(names[t]), at = r == 0 ? 0 : r == 1 ? len / 2 : len;
      char *b = n->bytes[r][t];
      memcpy(b, names[t], at);
      b[at] = '\0';
      memcpy(b + at + 1, names[t] + at, len - at);
      *texts[t] = (cs_pack_text){b, len + 1};
    }
  }
  /* Capture ids that are one id cut at the NUL ("cap"): a catalog that cut them would merge two rows. */
  n->p.records[1].meta.capture_id = (cs_pack_text){"cap\0-1", 6};
  n->p.records[2].meta.capture_id = (cs_pack_text){"cap\0", 4};
  /* A lone NUL is not NULL (\N), and an escaped backslash before a 0 is not a NUL (\\0 against \0). */
  n->p.records[1].meta.adapter_revision = (cs_pack_text){"\0", 1};
  n->p.records[0].meta.hook_name = (cs_pack_text){"\0\\0", 3};
  n->p.records[1].meta.hook_name = (cs_pack_text){"\\0\0\\N", 5};
  n->p.records[2].meta.hook_name = (cs_pack_text){"\\N\0", 3};
}

/* Row's twelve texts and its key, byte for byte against record r of p. */
static void nul_row_check(const cs_descriptor_row *row, test_pack *p, uint32_t r, const char *backend) {
  cs_pack_meta got = row->record.meta;
  cs_pack_text *g[12], *w[12];
  texts_of(&got, g);
  texts_of(&p->records[r].meta, w);
  assert_string_equal(row->key, p->ref.key);
  for (int t = 0; t < 12; t++) {
    if (g[t]->bytes != NULL && g[t]->len == w[t]->len && memcmp(g[t]->bytes, w[t]->bytes, w[t]->len) == 0) continue;
    fail_msg("%s: record %u text %d came back %zu bytes, not the %zu written", backend, r, t,
             g[t]->bytes == NULL ? 0 : g[t]->len, w[t]->len);
  }
  assert_int_equal(got.layer_number, p->records[r].meta.layer_number);
  assert_int_equal(row->record.offset, p->records[r].offset);
  assert_int_equal(row->record.crc32, p->records[r].crc32);
}

/*
 * The pack format allows U+0000 in every text (docs/format.md §3) and DMI's
 * writer writes it: a record whose texts hold NUL bytes (at the start, in
 * the middle, at the end, alone) is indexed like any other and reads back
 * byte for byte from every catalog, one row per capture id even where two
 * ids differ only after a NUL.
 */
static void test_nul_in_text_kept(void **state) {
  cs_catalog *c = *state;
  static nul_pack n;
  nul_pack_make(&n, 11);
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  cs_index_pack ip = {.ref = &n.p.ref, .records = n.p.records, .record_count = 3};
  cs_catalog_result res;
  memset(&res, 0, sizeof res);
  assert_int_equal(c->ops->index(c->self, &lease_a, MARGIN_NS, 1, &ip, 1, &res), CS_E_OK);
  if (res.outcome != CS_OUT_OK)
    fail_msg("%s: texts holding NUL answered outcome %d, detail '%s' (want OK)", c->ops->name, (int)res.outcome,
             res.detail);
  publish(c, &lease_a, MARGIN_NS, 1, term);
  cs_descriptor_row rows[8];
  assert_int_equal(descriptors_at(c, 1, &n.p, rows), 3);
  bool seen[3] = {false, false, false};
  for (uint32_t i = 0; i < 3; i++) {
    const cs_pack_text *id = &rows[i].record.meta.capture_id;
    uint32_t r = 3;
    for (uint32_t k = 0; k < 3; k++) {
      const cs_pack_text *want = &n.p.records[k].meta.capture_id;
      if (id->bytes != NULL && id->len == want->len && memcmp(id->bytes, want->bytes, want->len) == 0) r = k;
    }
    if (r == 3 || seen[r]) fail_msg("%s: row %u's capture id (%zu bytes) is none of the three written", c->ops->name, i,
                                    id->len);
    seen[r] = true;
    nul_row_check(&rows[i], &n.p, r, c->ops->name);
  }
  bool held = false, rejected = true;
  committed_one(c, &n.p.ref.pack_id, &held, &rejected);
  assert_true(held);
  assert_false(rejected);
}

static void test_watermark(void **state) {
  cs_catalog *c = *state;
  uint64_t term = acquire(c, &lease_a, TTL_LONG_NS);
  publish(c, &lease_a, MARGIN_NS, 2, term);
  assert_int_equal(head_of(c, &lease_a).watermark, 2);
  publish(c, &lease_a, MARGIN_NS, 7, term);
  assert_int_equal(head_of(c, &lease_b).watermark, 7); /* anyone reads it, holder or not */
}

int conformance_catalog_run_backend(const char *group, const conformance_catalog_backend *backend) {
  suite = *backend;
  if (suite.clock_resolution_ns == 0) suite.clock_resolution_ns = CONFORMANCE_CLOCK_RESOLUTION_DEFAULT_NS;
  if (suite.clock_resolution_ns > CONFORMANCE_CLOCK_RESOLUTION_MAX_NS) {
    fprintf(stderr, "%s: clock_resolution_ns %llu over the suite's bound %llu: not run\n", group,
            (unsigned long long)suite.clock_resolution_ns, (unsigned long long)CONFORMANCE_CLOCK_RESOLUTION_MAX_NS);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_schema, setup, teardown),
      cmocka_unit_test_setup_teardown(test_claim_at_head, setup, teardown),
      cmocka_unit_test_setup_teardown(test_second_claim_ignored, setup, teardown),
      cmocka_unit_test_setup_teardown(test_contested_term, setup, teardown),
      cmocka_unit_test_setup_teardown(test_renewal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_release, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expiry_and_takeover, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fence, setup, teardown),
      cmocka_unit_test_setup_teardown(test_committed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_descriptors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_list_packs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_search, setup, teardown),
      cmocka_unit_test_setup_teardown(test_search_reindexed_at_one_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_search_versions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stale_index_invisible, setup, teardown),
      cmocka_unit_test_setup_teardown(test_late_rows_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_watermark, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nul_key_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nul_in_text_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(test_array_candidates, setup, teardown),
  };
  return _cmocka_run_group_tests(group, tests, sizeof tests / sizeof tests[0], NULL, NULL);
}

int conformance_catalog_run(const char *group, cs_catalog *(*open_fn)(void *ctx),
                            void (*close_fn)(cs_catalog *catalog, void *ctx), void *ctx) {
  conformance_catalog_backend backend = {.open_fn = open_fn, .close_fn = close_fn, .ctx = ctx};
  return conformance_catalog_run_backend(group, &backend);
}

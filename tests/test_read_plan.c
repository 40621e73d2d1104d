/*
 * Unit tests of the read-planning core: merging by gap and span bound, one
 * footer read per pack, budgets refused with how much over, bad layouts
 * named, the hand-out of reads, and a seeded property test against a
 * brute-force model. Replay the property test with CAPSTORE_SEED=<seed>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/read_plan.h"

#include "test_prop.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

static cs_read_limits limits_with_gap(uint64_t gap) {
  cs_read_limits limits;
  cs_read_limits_default(&limits);
  limits.gap_bytes_max = gap;
  return limits;
}

typedef struct planned {
  cs_read_plan plan;
  uint32_t order[64];
  cs_read_span spans[80];
  char msg[256];
  int rc;
} planned;

static void make(planned *p, const cs_read_pack *packs, uint32_t pack_count, const cs_read_want *wants,
                 uint32_t want_count, const cs_read_limits *limits) {
  p->rc = cs_read_plan_make(packs, pack_count, wants, want_count, limits, p->order, p->spans, 80, &p->plan, p->msg,
                            sizeof p->msg);
}

/* Two packs; records close together merge, a far one does not, the footer joins the last span when close. */
static void test_merge_and_footers(void **state) {
  (void)state;
  cs_read_pack packs[2] = {{.size_bytes = 10 * MIB + 4096, .footer_offset = 10 * MIB},
                           {.size_bytes = 1 * MIB + 1000, .footer_offset = 1 * MIB}};
  cs_read_want wants[5] = {
      {.pack = 0, .offset = 64, .length = 1000},             /* 64 .. 1064 */
      {.pack = 1, .offset = 512 * KIB, .length = 512 * KIB}, /* ends at the footer */
      {.pack = 0, .offset = 1088, .length = 100},            /* 24 bytes after the first: merged */
      {.pack = 0, .offset = 8 * MIB, .length = 64},          /* far: its own read */
      {.pack = 0, .offset = 64, .length = 1000},             /* the first again: read once */
  };
  cs_read_limits limits = limits_with_gap(64 * KIB);
  planned p;
  make(&p, packs, 2, wants, 5, &limits);
  assert_int_equal(p.rc, CS_E_OK);
  assert_int_equal(p.plan.pack_count, 2);
  /* pack 0: [64, 1188), [8 MiB, +64), tail [10 MiB, end); pack 1: [512 KiB, end) with its footer. */
  assert_int_equal(p.plan.span_count, 4);
  assert_int_equal(p.plan.requests, 4);
  const cs_read_span *s = p.spans;
  assert_int_equal(s[0].pack, 0);
  assert_int_equal(s[0].offset, 64);
  assert_int_equal(s[0].length, 1188 - 64);
  assert_int_equal(s[0].count, 3);
  assert_false(s[0].tail);
  assert_int_equal(s[1].offset, 8 * MIB);
  assert_int_equal(s[1].count, 1);
  assert_true(s[2].tail);
  assert_int_equal(s[2].offset, 10 * MIB);
  assert_int_equal(s[2].length, 4096);
  assert_int_equal(s[2].count, 0);
  assert_int_equal(s[3].pack, 1);
  assert_true(s[3].tail);
  assert_int_equal(s[3].offset, 512 * KIB);
  assert_int_equal(s[3].offset + s[3].length, packs[1].size_bytes);
  /* The order lists wants by (pack, offset): the duplicate sits beside its twin. */
  assert_int_equal(p.order[0], 0);
  assert_int_equal(p.order[1], 4);
  assert_int_equal(p.order[2], 2);
  assert_int_equal(p.order[3], 3);
  assert_int_equal(p.order[4], 1);
  assert_int_equal(p.plan.payload_bytes, 1000 + 100 + 64 + 512 * KIB);
  assert_int_equal(p.plan.footer_bytes, 4096 + 1000);
  assert_int_equal(p.plan.bytes, s[0].length + s[1].length + s[2].length + s[3].length);
}

/* A zero gap merges only touching or overlapping ranges; the span bound stops a merge, not a long record. */
static void test_gap_zero_and_span_bound(void **state) {
  (void)state;
  cs_read_pack pack = {.size_bytes = 64 * MIB + 128, .footer_offset = 64 * MIB};
  cs_read_want wants[4] = {
      {.pack = 0, .offset = 64, .length = 64},  /* touches the next */
      {.pack = 0, .offset = 128, .length = 10}, /* 54 bytes before the next: a gap */
      {.pack = 0, .offset = 192, .length = 3 * MIB},
      {.pack = 0, .offset = 4 * MIB, .length = 0}, /* an empty record needs no bytes but stays in a span */
  };
  cs_read_limits limits = limits_with_gap(0);
  limits.span_bytes_max = 1 * MIB;
  planned p;
  make(&p, &pack, 1, wants, 4, &limits);
  assert_int_equal(p.rc, CS_E_OK);
  /* [64, 138), [192, 192 + 3 MiB) (over the bound alone, the empty record listed with it), the tail. */
  assert_int_equal(p.plan.span_count, 3);
  assert_int_equal(p.spans[0].length, 138 - 64);
  assert_int_equal(p.spans[0].count, 2);
  assert_int_equal(p.spans[1].length, 3 * MIB);
  assert_int_equal(p.spans[1].count, 2);
  assert_true(p.spans[2].tail);
  assert_int_equal(p.spans[2].length, 128);
  assert_int_equal(p.spans[2].count, 0);
  /* A pack whose only wanted records are empty: one read, its footer's, listing them. */
  cs_read_want empty[2] = {{.pack = 0, .offset = 128, .length = 0}, {.pack = 0, .offset = 4 * MIB, .length = 0}};
  make(&p, &pack, 1, empty, 2, &limits);
  assert_int_equal(p.rc, CS_E_OK);
  assert_int_equal(p.plan.span_count, 1);
  assert_true(p.spans[0].tail);
  assert_int_equal(p.spans[0].count, 2);
  assert_int_equal(p.plan.payload_bytes, 0);
}

/* Over a limit: refused with the totals and how much over, the plan filled as an estimate. */
static void test_budget_refusals(void **state) {
  (void)state;
  cs_read_pack packs[3];
  cs_read_want wants[3];
  for (uint32_t i = 0; i < 3; i++) {
    packs[i] = (cs_read_pack){.size_bytes = 1 * MIB + 192, .footer_offset = 1 * MIB};
    wants[i] = (cs_read_want){.pack = i, .offset = 64, .length = 100};
  }
  cs_read_limits limits = limits_with_gap(0);
  limits.request_limit = 4; /* 3 packs: 3 payload reads + 3 tails = 6 */
  planned p;
  make(&p, packs, 3, wants, 3, &limits);
  assert_int_equal(p.rc, CS_E_TOO_LARGE);
  assert_int_equal(p.plan.requests, 6);
  if (strstr(p.msg, "6 requests") == NULL || strstr(p.msg, "2 over the request limit 4") == NULL)
    fail_msg("message: %s", p.msg);
  /* No message buffer (NULL, or of size 0): refused all the same, nothing written. */
  char none[1] = {'x'};
  assert_int_equal(cs_read_plan_make(packs, 3, wants, 3, &limits, p.order, p.spans, 80, &p.plan, NULL, 16),
                   CS_E_TOO_LARGE);
  assert_int_equal(cs_read_plan_make(packs, 3, wants, 3, &limits, p.order, p.spans, 80, &p.plan, none, 0),
                   CS_E_TOO_LARGE);
  assert_int_equal(none[0], 'x');
  limits.request_limit = 6;
  limits.byte_limit = 3 * (100 + 192) - 1;
  make(&p, packs, 3, wants, 3, &limits);
  assert_int_equal(p.rc, CS_E_TOO_LARGE);
  if (strstr(p.msg, "876 bytes") == NULL || strstr(p.msg, "1 bytes over the byte limit 875") == NULL)
    fail_msg("message: %s", p.msg);
  limits.byte_limit = 3 * (100 + 192);
  make(&p, packs, 3, wants, 3, &limits);
  assert_int_equal(p.rc, CS_E_OK);
  assert_int_equal(p.plan.bytes, 876);
  limits.request_limit = 0;
  make(&p, packs, 3, wants, 3, &limits);
  assert_int_equal(p.rc, CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(p.msg, "request_limit"));
  /* An empty selection reads nothing. */
  limits.request_limit = 1;
  make(&p, packs, 3, wants, 0, &limits);
  assert_int_equal(p.rc, CS_E_OK);
  assert_int_equal(p.plan.requests, 0);
  assert_int_equal(p.plan.bytes, 0);
}

static void expect_refused(const cs_read_pack *packs, uint32_t pack_count, const cs_read_want *wants,
                           uint32_t want_count, const char *needle) {
  cs_read_limits limits = limits_with_gap(0);
  planned p;
  make(&p, packs, pack_count, wants, want_count, &limits);
  assert_int_equal(p.rc, CS_E_INVALID_ARGUMENT);
  if (strstr(p.msg, needle) == NULL) fail_msg("wanted \"%s\" in: %s", needle, p.msg);
}

/* Layouts the format cannot have are refused, naming the pack or record. */
static void test_bad_layouts_named(void **state) {
  (void)state;
  cs_read_pack good = {.size_bytes = 4096 + 200, .footer_offset = 4096};
  cs_read_want ok = {.pack = 0, .offset = 64, .length = 10};
  cs_read_pack bad_packs[] = {
      {.size_bytes = 1000, .footer_offset = 0},
      {.size_bytes = 5000, .footer_offset = 4000},
      {.size_bytes = 4096 + 64, .footer_offset = 4096},
      {.size_bytes = 4000, .footer_offset = 4096},
  };
  const char *pack_why[] = {"pack 0 (size 1000, footer offset 0): its footer offset is inside the header",
                            "not a multiple of 64", "no room for a footer and a trailer",
                            "no room for a footer and a trailer"};
  for (uint32_t i = 0; i < 4; i++) expect_refused(&bad_packs[i], 1, &ok, 1, pack_why[i]);
  cs_read_want bad_wants[] = {
      {.pack = 1, .offset = 64, .length = 1},
      {.pack = 0, .offset = 0, .length = 1},
      {.pack = 0, .offset = 100, .length = 1},
      {.pack = 0, .offset = 4032, .length = 65},
      {.pack = 0, .offset = 4160, .length = 0},
      {.pack = 0, .offset = 64, .length = UINT64_MAX},
  };
  const char *want_why[] = {"record 1 (pack 1, offset 64, length 1): it names no pack", "inside the header",
                            "not a multiple of 64", "reach into its pack's footer", "reach into its pack's footer",
                            "reach into its pack's footer"};
  for (uint32_t i = 0; i < 6; i++) {
    cs_read_want wants[2] = {ok, bad_wants[i]};
    expect_refused(&good, 1, wants, 2, want_why[i]);
  }
  /* Too few spans: CS_E_FULL, saying what suffices. */
  cs_read_want two[2] = {{.pack = 0, .offset = 64, .length = 1}, {.pack = 0, .offset = 2048, .length = 1}};
  cs_read_limits limits = limits_with_gap(0);
  uint32_t order[2];
  cs_read_span spans[2];
  cs_read_plan plan;
  char msg[200];
  assert_int_equal(cs_read_plan_make(&good, 1, two, 2, &limits, order, spans, 2, &plan, msg, sizeof msg), CS_E_FULL);
  assert_non_null(strstr(msg, "span_capacity 2"));
  assert_int_equal(cs_read_plan_make(&good, 1, two, 2, NULL, order, spans, 2, &plan, msg, sizeof msg),
                   CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_read_plan_make(&good, 1, two, 2, &limits, NULL, spans, 2, &plan, msg, sizeof msg),
                   CS_E_INVALID_ARGUMENT);
}

/* Reads handed out in order, never more than inflight_max out, never more than planned; a failure stops it. */
static void test_exec(void **state) {
  (void)state;
  cs_read_pack packs[4];
  cs_read_want wants[4];
  for (uint32_t i = 0; i < 4; i++) {
    packs[i] = (cs_read_pack){.size_bytes = 1 * MIB + 192, .footer_offset = 1 * MIB};
    wants[i] = (cs_read_want){.pack = i, .offset = 64, .length = 100};
  }
  cs_read_limits limits = limits_with_gap(2 * MIB); /* each pack one read, with its footer */
  planned p;
  make(&p, packs, 4, wants, 4, &limits);
  assert_int_equal(p.rc, CS_E_OK);
  assert_int_equal(p.plan.requests, 4);
  cs_read_exec exec;
  assert_int_equal(cs_read_exec_init(&exec, &p.plan, 0), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_read_exec_init(&exec, &p.plan, 2), CS_E_OK);
  uint32_t a = 99, b = 99, c = 99;
  assert_int_equal(cs_read_exec_next(&exec, &a), CS_E_OK);
  assert_int_equal(cs_read_exec_next(&exec, &b), CS_E_OK);
  assert_int_equal(cs_read_exec_next(&exec, &c), CS_E_WOULD_BLOCK);
  assert_int_equal(a, 0);
  assert_int_equal(b, 1);
  assert_int_equal(cs_read_exec_done(&exec, 3, CS_E_OK), CS_E_STATE); /* not handed out */
  assert_int_equal(cs_read_exec_done(&exec, b, CS_E_OK), CS_E_OK);
  assert_false(cs_read_exec_finished(&exec, NULL));
  assert_int_equal(cs_read_exec_next(&exec, &c), CS_E_OK);
  assert_int_equal(c, 2);
  assert_int_equal(cs_read_exec_done(&exec, a, CS_E_IO), CS_E_OK);
  /* Failed: nothing more handed out; finished once the read still out is back. */
  assert_int_equal(cs_read_exec_next(&exec, &a), CS_E_CLOSED);
  int err = 0;
  assert_false(cs_read_exec_finished(&exec, &err));
  assert_int_equal(cs_read_exec_done(&exec, c, CS_E_OK), CS_E_OK);
  assert_true(cs_read_exec_finished(&exec, &err));
  assert_int_equal(err, CS_E_IO);
  assert_int_equal(exec.issued, 3);
  /* A clean run: every span once, then CLOSED. */
  assert_int_equal(cs_read_exec_init(&exec, &p.plan, 3), CS_E_OK);
  uint32_t span;
  for (uint32_t i = 0; i < 4; i++) {
    assert_int_equal(cs_read_exec_next(&exec, &span), CS_E_OK);
    assert_int_equal(span, i);
    assert_int_equal(cs_read_exec_done(&exec, span, CS_E_OK), CS_E_OK);
  }
  assert_int_equal(cs_read_exec_next(&exec, &span), CS_E_CLOSED);
  assert_true(cs_read_exec_finished(&exec, &err));
  assert_int_equal(err, CS_E_OK);
  assert_int_equal(exec.issued, p.plan.requests);
}

/* Retries: only transient outcomes, each read at most its retries, the read's budget at most, issued = handed out + retries. */
static void test_exec_retries(void **state) {
  (void)state;
  assert_true(cs_read_retryable(CS_OUT_TIMEOUT));
  assert_true(cs_read_retryable(CS_OUT_SERVER_ERROR));
  assert_true(cs_read_retryable(CS_OUT_THROTTLED));
  assert_true(cs_read_retryable(CS_OUT_UNKNOWN));
  assert_true(cs_read_retryable(CS_OUT_REFUSED));
  assert_false(cs_read_retryable(CS_OUT_OK));
  assert_false(cs_read_retryable(CS_OUT_NOT_FOUND));
  assert_false(cs_read_retryable(CS_OUT_FORBIDDEN));
  assert_false(cs_read_retryable(CS_OUT_INVALID)); /* a short read, a wrong range: the same again */
  assert_false(cs_read_retryable(CS_OUT_PRECONDITION));
  cs_read_pack packs[3];
  cs_read_want wants[3];
  for (uint32_t i = 0; i < 3; i++) {
    packs[i] = (cs_read_pack){.size_bytes = 1 * MIB + 192, .footer_offset = 1 * MIB};
    wants[i] = (cs_read_want){.pack = i, .offset = 64, .length = 100};
  }
  cs_read_limits limits = limits_with_gap(2 * MIB);
  planned p;
  make(&p, packs, 3, wants, 3, &limits);
  assert_int_equal(p.plan.requests, 3);
  cs_read_exec exec;
  uint32_t a, b, c;
  /* Without cs_read_exec_retries, none. */
  assert_int_equal(cs_read_exec_init(&exec, &p.plan, 2), CS_E_OK);
  assert_int_equal(cs_read_exec_next(&exec, &a), CS_E_OK);
  assert_int_equal(cs_read_exec_retry(&exec, a, 0), CS_E_TOO_LARGE);
  assert_int_equal(cs_read_exec_retry(&exec, 2, 0), CS_E_STATE); /* not out */
  /* Two a read, three in all. */
  assert_int_equal(cs_read_exec_init(&exec, &p.plan, 2), CS_E_OK);
  cs_read_exec_retries(&exec, 2, 3);
  assert_int_equal(cs_read_exec_next(&exec, &a), CS_E_OK);
  assert_int_equal(cs_read_exec_next(&exec, &b), CS_E_OK);
  assert_int_equal(cs_read_exec_retry(&exec, a, 0), CS_E_OK);
  assert_int_equal(cs_read_exec_retry(&exec, a, 1), CS_E_OK);
  assert_int_equal(cs_read_exec_retry(&exec, a, 2), CS_E_TOO_LARGE); /* its two are spent */
  assert_int_equal(exec.inflight, 2);                                 /* a retried read is still out */
  assert_int_equal(cs_read_exec_next(&exec, &c), CS_E_WOULD_BLOCK);
  assert_int_equal(cs_read_exec_done(&exec, a, CS_E_OK), CS_E_OK);
  assert_int_equal(cs_read_exec_next(&exec, &c), CS_E_OK);
  assert_int_equal(cs_read_exec_retry(&exec, b, 0), CS_E_OK);
  assert_int_equal(cs_read_exec_retry(&exec, c, 0), CS_E_TOO_LARGE); /* the read's three are spent */
  assert_int_equal(exec.issued, 3 + 3);
  assert_int_equal(exec.retries, 3);
  assert_int_equal(cs_read_exec_done(&exec, b, CS_E_OK), CS_E_OK);
  assert_int_equal(cs_read_exec_done(&exec, c, CS_E_OK), CS_E_OK);
  int err = -1;
  assert_true(cs_read_exec_finished(&exec, &err));
  assert_int_equal(err, CS_E_OK);
  /* After a failure nothing is issued again. */
  assert_int_equal(cs_read_exec_init(&exec, &p.plan, 2), CS_E_OK);
  cs_read_exec_retries(&exec, 2, 3);
  assert_int_equal(cs_read_exec_next(&exec, &a), CS_E_OK);
  assert_int_equal(cs_read_exec_next(&exec, &b), CS_E_OK);
  assert_int_equal(cs_read_exec_done(&exec, a, CS_E_IO), CS_E_OK);
  assert_int_equal(cs_read_exec_retry(&exec, b, 0), CS_E_TOO_LARGE);
}

/* The defaults: a gap of up to 256 KiB is read through, a larger one is not, and no read passes 8 MiB. */
static void test_default_merge(void **state) {
  (void)state;
  cs_read_limits limits;
  cs_read_limits_default(&limits);
  assert_int_equal(limits.gap_bytes_max, 256 * KIB);
  assert_int_equal(limits.span_bytes_max, 8 * MIB);
  cs_read_pack pack = {.size_bytes = 64 * MIB + 192, .footer_offset = 64 * MIB};
  cs_read_want wants[3] = {{.pack = 0, .offset = 64, .length = 64},
                           {.pack = 0, .offset = 128 + 256 * KIB, .length = 64},        /* gap 256 KiB: merged */
                           {.pack = 0, .offset = 192 + 512 * KIB + 64, .length = 64}};  /* gap 256 KiB + 64: not */
  planned p;
  make(&p, &pack, 1, wants, 3, &limits);
  assert_int_equal(p.rc, CS_E_OK);
  assert_int_equal(p.plan.requests, 3); /* two payload reads and the tail */
  assert_int_equal(p.spans[0].count, 2);
  assert_int_equal(p.spans[1].count, 1);
}

/* ---- The property test ---- */


enum { PROP_PACKS = 6, PROP_WANTS = 48, PROP_BYTES = 1 << 16 };

/* One random selection over random packs, checked against a byte map of each pack. */
static void prop_one(cs_prng *prng) {
  cs_read_pack packs[PROP_PACKS];
  cs_read_want wants[PROP_WANTS];
  uint32_t pack_count = 1 + (uint32_t)cs_prng_below(prng, PROP_PACKS);
  for (uint32_t i = 0; i < pack_count; i++) {
    uint64_t footer = 64 * (1 + cs_prng_below(prng, PROP_BYTES / 64 - 1));
    packs[i] = (cs_read_pack){.footer_offset = footer, .size_bytes = footer + 65 + cs_prng_below(prng, 4000)};
  }
  uint32_t want_count = (uint32_t)cs_prng_below(prng, PROP_WANTS + 1);
  for (uint32_t i = 0; i < want_count; i++) {
    uint32_t pack = (uint32_t)cs_prng_below(prng, pack_count);
    uint64_t slots = (packs[pack].footer_offset - 64) / 64;
    uint64_t offset = 64 + 64 * cs_prng_below(prng, slots + 1);
    uint64_t room = packs[pack].footer_offset - offset;
    uint64_t length = cs_prng_below(prng, 8) == 0 ? 0 : cs_prng_below(prng, room + 1);
    wants[i] = (cs_read_want){.pack = pack, .offset = offset, .length = length};
  }
  cs_read_limits limits = limits_with_gap(cs_prng_below(prng, 3) == 0 ? 0 : cs_prng_below(prng, 8192));
  limits.span_bytes_max = cs_prng_below(prng, 3) == 0 ? 0 : 64 + cs_prng_below(prng, PROP_BYTES);
  limits.whole_objects = cs_prng_below(prng, 5) == 0;
  planned p;
  make(&p, packs, pack_count, wants, want_count, &limits);
  PROP_CHECK(p.rc == CS_E_OK);
  /* Every want lies inside the span that lists it, of its pack. */
  static uint8_t covered[PROP_PACKS][PROP_BYTES + 4096 + 128];
  memset(covered, 0, sizeof covered);
  uint32_t listed = 0;
  uint64_t bytes = 0, tails = 0;
  for (uint32_t s = 0; s < p.plan.span_count; s++) {
    const cs_read_span *span = &p.spans[s];
    PROP_CHECK(span->pack < pack_count);
    PROP_CHECK(span->offset + span->length <= packs[span->pack].size_bytes);
    if (s > 0 && p.spans[s - 1].pack == span->pack) {
      /* Sorted and disjoint; apart by more than the gap unless the span bound stopped the merge. */
      uint64_t prev_end = p.spans[s - 1].offset + p.spans[s - 1].length;
      PROP_CHECK(span->offset >= prev_end);
      PROP_CHECK(span->offset - prev_end > limits.gap_bytes_max || limits.span_bytes_max != 0);
    }
    if (s > 0) PROP_CHECK(p.spans[s - 1].pack <= span->pack);
    PROP_CHECK(span->first == listed);
    PROP_CHECK(span->length > 0); /* no 0-byte GET */
    for (uint32_t i = span->first; i < span->first + span->count; i++) {
      const cs_read_want *want = &wants[p.order[i]];
      PROP_CHECK(want->pack == span->pack);
      if (want->length == 0) continue; /* needs no byte: listed with any read of its pack */
      PROP_CHECK(want->offset >= span->offset);
      PROP_CHECK(want->offset + want->length <= span->offset + span->length);
    }
    listed += span->count;
    for (uint64_t b = span->offset; b < span->offset + span->length; b++) covered[span->pack][b]++;
    bytes += span->length;
    if (span->tail) {
      tails++;
      PROP_CHECK(span->offset <= packs[span->pack].footer_offset);
      PROP_CHECK(span->offset + span->length == packs[span->pack].size_bytes);
    }
    if (limits.whole_objects) { /* one read of the whole object, holding every want of its pack */
      PROP_CHECK(span->offset == 0 && span->length == packs[span->pack].size_bytes && span->tail);
      PROP_CHECK(s == 0 || p.spans[s - 1].pack != span->pack);
      continue;
    }
    /* Each merge across a gap was within gap_bytes_max and kept the read within span_bytes_max. */
    uint64_t end = span->offset;
    for (uint32_t i = span->first; i < span->first + span->count; i++) {
      const cs_read_want *want = &wants[p.order[i]];
      uint64_t want_end = want->offset + want->length;
      if (want->length == 0) continue;
      if (i > span->first && want->offset > end) {
        PROP_CHECK(want->offset - end <= limits.gap_bytes_max);
        PROP_CHECK(limits.span_bytes_max == 0 || (want_end > end ? want_end : end) - span->offset <= limits.span_bytes_max);
      }
      if (want_end > end) end = want_end;
    }
    if (span->tail && span->count > 0 && packs[span->pack].footer_offset > end) {
      PROP_CHECK(packs[span->pack].footer_offset - end <= limits.gap_bytes_max);
      PROP_CHECK(limits.span_bytes_max == 0 || span->length <= limits.span_bytes_max);
    }
  }
  PROP_CHECK(listed == want_count);
  PROP_CHECK(bytes == p.plan.bytes && p.plan.requests == p.plan.span_count);
  PROP_CHECK(tails == p.plan.pack_count);
  /* Each byte read once; the wanted bytes the plan counts are the union of the wants. */
  uint64_t wanted = 0;
  static uint8_t want_map[PROP_PACKS][PROP_BYTES + 4096 + 128];
  memset(want_map, 0, sizeof want_map);
  bool used[PROP_PACKS] = {false};
  for (uint32_t i = 0; i < want_count; i++) {
    used[wants[i].pack] = true;
    for (uint64_t b = wants[i].offset; b < wants[i].offset + wants[i].length; b++) want_map[wants[i].pack][b] = 1;
  }
  uint32_t used_count = 0;
  for (uint32_t k = 0; k < pack_count; k++) {
    used_count += used[k];
    for (uint64_t b = 0; b < packs[k].size_bytes; b++) {
      PROP_CHECK(covered[k][b] <= 1);
      wanted += want_map[k][b];
      if (want_map[k][b]) PROP_CHECK(covered[k][b] == 1);
      if (used[k] && b >= packs[k].footer_offset) PROP_CHECK(covered[k][b] == 1);
      if (!used[k]) PROP_CHECK(covered[k][b] == 0);
    }
  }
  PROP_CHECK(used_count == p.plan.pack_count);
  PROP_CHECK(wanted == p.plan.payload_bytes);
  /* The limits hold at the plan's own totals and refuse one below. */
  limits.byte_limit = p.plan.bytes;
  limits.request_limit = p.plan.requests > 0 ? p.plan.requests : 1;
  make(&p, packs, pack_count, wants, want_count, &limits);
  PROP_CHECK(p.rc == CS_E_OK);
  if (p.plan.requests > 1) {
    limits.request_limit = p.plan.requests - 1;
    make(&p, packs, pack_count, wants, want_count, &limits);
    PROP_CHECK(p.rc == CS_E_TOO_LARGE);
  }
}

static void test_property(void **state) {
  (void)state;
  prop_run(prop_one, 400, "build/tests/test_read_plan");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_merge_and_footers), cmocka_unit_test(test_gap_zero_and_span_bound),
      cmocka_unit_test(test_budget_refusals),   cmocka_unit_test(test_bad_layouts_named),
      cmocka_unit_test(test_exec),              cmocka_unit_test(test_exec_retries),
      cmocka_unit_test(test_default_merge),              cmocka_unit_test(test_property),
  };
  return cmocka_run_group_tests_name("read plan", tests, NULL, NULL);
}

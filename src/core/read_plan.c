/*
 * The read-planning core (capstore/read_plan.h): validate the selection's
 * layout, sort its records by (pack, offset) without allocating (heapsort
 * of the caller's order array), merge close ranges, add one tail read per
 * pack for its footer and trailer, and check the totals against the limits.
 */
#include "capstore/read_plan.h"

#include <assert.h>
#include <stdio.h>

#ifndef CAPSTORE_MUTANT
#define CAPSTORE_MUTANT 0
#endif

void cs_read_limits_default(cs_read_limits *limits) {
  assert(limits != NULL);
  limits->gap_bytes_max = CS_READ_GAP_BYTES_DEFAULT;
  limits->span_bytes_max = CS_READ_SPAN_BYTES_DEFAULT;
  limits->byte_limit = UINT64_MAX;
  limits->request_limit = UINT64_MAX;
  limits->whole_objects = false;
}

static int refuse(int code, char *msg, size_t msg_size, const char *text) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "%s", text);
  return code;
}

/* CS_E_OK, or CS_E_INVALID_ARGUMENT with msg naming the pack and what is wrong. */
static int check_pack(const cs_read_pack *pack, uint32_t index, char *msg, size_t msg_size) {
  const char *why = NULL;
  if (pack->footer_offset < CS_READ_PACK_HEADER_BYTES) why = "its footer offset is inside the header";
  else if (pack->footer_offset % CS_READ_PACK_ALIGN != 0) why = "its footer offset is not a multiple of 64";
  else if (pack->size_bytes <= pack->footer_offset || pack->size_bytes - pack->footer_offset <= CS_READ_PACK_TRAILER_BYTES)
    why = "its size leaves no room for a footer and a trailer after the footer offset";
  else if (pack->size_bytes > (UINT64_C(1) << 62)) why = "its size is over 2^62 bytes";
  if (why == NULL) return CS_E_OK;
  if (msg != NULL && msg_size > 0) {
    snprintf(msg, msg_size, "pack %u (size %llu, footer offset %llu): %s", index, (unsigned long long)pack->size_bytes,
             (unsigned long long)pack->footer_offset, why);
  }
  return CS_E_INVALID_ARGUMENT;
}

/* CS_E_OK, or CS_E_INVALID_ARGUMENT with msg naming the record and what is wrong. */
static int check_want(const cs_read_want *want, uint32_t index, const cs_read_pack *packs, uint32_t pack_count,
                      char *msg, size_t msg_size) {
  const char *why = NULL;
  if (want->pack >= pack_count) why = "it names no pack of the selection";
  else if (want->offset < CS_READ_PACK_HEADER_BYTES) why = "its offset is inside the header";
  else if (want->offset % CS_READ_PACK_ALIGN != 0) why = "its offset is not a multiple of 64";
  else if (want->offset > packs[want->pack].footer_offset ||
           want->length > packs[want->pack].footer_offset - want->offset)
    why = "its bytes reach into its pack's footer";
  if (why == NULL) return CS_E_OK;
  if (msg != NULL && msg_size > 0) {
    snprintf(msg, msg_size, "record %u (pack %u, offset %llu, length %llu): %s", index, want->pack,
             (unsigned long long)want->offset, (unsigned long long)want->length, why);
  }
  return CS_E_INVALID_ARGUMENT;
}

/* Whether want a sorts before want b: (pack, offset, length, index), a total order. */
static bool want_before(const cs_read_want *wants, uint32_t a, uint32_t b) {
  const cs_read_want *x = &wants[a], *y = &wants[b];
  if (x->pack != y->pack) return x->pack < y->pack;
  if (x->offset != y->offset) return x->offset < y->offset;
  if (x->length != y->length) return x->length < y->length;
  return a < b;
}

static void sift_down(const cs_read_want *wants, uint32_t *order, uint32_t root, uint32_t count) {
  for (uint32_t bound = 0; bound < 64; bound++) { /* depth of a heap of 2^32 entries is 32 */
    uint32_t child = 2 * root + 1;
    if (child >= count || child < root) return;
    if (child + 1 < count && want_before(wants, order[child], order[child + 1])) child++;
    if (!want_before(wants, order[root], order[child])) return;
    uint32_t swap = order[root];
    order[root] = order[child];
    order[child] = swap;
    root = child;
  }
  assert(false && "heap deeper than 64");
}

/* Heapsort: O(n log n), no allocation, deterministic. */
static void sort_wants(const cs_read_want *wants, uint32_t *order, uint32_t count) {
  for (uint32_t i = 0; i < count; i++) order[i] = i;
  if (count < 2) return;
  for (uint32_t i = count / 2; i-- > 0;) sift_down(wants, order, i, count);
  for (uint32_t end = count - 1; end > 0; end--) {
    uint32_t top = order[0];
    order[0] = order[end];
    order[end] = top;
    sift_down(wants, order, 0, end);
  }
  for (uint32_t i = 1; i < count; i++) assert(!want_before(wants, order[i], order[i - 1]));
}

/*
 * Whether a span can take bytes [start, new_end): always when they overlap
 * or touch it (the bytes are read once), else when the gap is at most
 * gap_bytes_max and the merged read stays within span_bytes_max.
 */
static bool can_merge(const cs_read_span *span, uint64_t start, uint64_t new_end, const cs_read_limits *limits) {
  uint64_t end = span->offset + span->length;
  if (start <= end) return true;
  if (start - end > limits->gap_bytes_max) return false;
  uint64_t merged_end = new_end > end ? new_end : end;
  return limits->span_bytes_max == 0 || merged_end - span->offset <= limits->span_bytes_max;
}

typedef struct builder {
  cs_read_span *spans;
  uint32_t capacity;
  uint32_t count;
} builder;

/* Starts a new span; false when the capacity is spent. */
static bool span_open(builder *b, uint32_t pack, uint64_t offset, uint64_t length, uint32_t first) {
  if (b->count == b->capacity) return false;
  b->spans[b->count++] = (cs_read_span){.pack = pack, .offset = offset, .length = length, .first = first};
  return true;
}

/* Extends the last span to end (never shortens it). */
static void span_extend(builder *b, uint64_t end) {
  cs_read_span *span = &b->spans[b->count - 1];
  if (end > span->offset + span->length) span->length = end - span->offset;
}

/* The wanted bytes of order[first .. first + count) (sorted), each byte once. */
static uint64_t union_bytes(const cs_read_want *wants, const uint32_t *order, uint32_t first, uint32_t count) {
  uint64_t total = 0, covered_end = 0;
  for (uint32_t i = first; i < first + count; i++) {
    const cs_read_want *want = &wants[order[i]];
    uint64_t end = want->offset + want->length;
    uint64_t from = want->offset > covered_end ? want->offset : covered_end;
    if (end > from) total += end - from;
    if (end > covered_end) covered_end = end;
  }
  return total;
}

/* whole_objects: one span [0, size) holding every want of the pack. CS_E_OK or CS_E_FULL. */
static int plan_whole(builder *b, const cs_read_want *wants, const uint32_t *order, uint32_t first, uint32_t count,
                      const cs_read_pack *pack, cs_read_plan *plan) {
  if (!span_open(b, wants[order[first]].pack, 0, pack->size_bytes, first)) return CS_E_FULL;
  b->spans[b->count - 1].count = count;
  b->spans[b->count - 1].tail = true;
  plan->payload_bytes += union_bytes(wants, order, first, count);
  plan->footer_bytes += pack->size_bytes - pack->footer_offset;
  return CS_E_OK;
}

/*
 * The spans of one pack: its wants order[first .. first + count), then the
 * tail (footer and trailer), merged into the last payload span when close
 * enough. CS_E_OK or CS_E_FULL.
 */
static int plan_pack(builder *b, const cs_read_want *wants, const uint32_t *order, uint32_t first, uint32_t count,
                     const cs_read_pack *pack, const cs_read_limits *limits, cs_read_plan *plan) {
  uint32_t pack_index = wants[order[first]].pack;
  uint32_t pack_first_span = b->count;
  if (limits->whole_objects) return plan_whole(b, wants, order, first, count, pack, plan);
  plan->payload_bytes += union_bytes(wants, order, first, count); /* each wanted byte once, however often wanted */
  /*
   * An empty record needs no byte and never a request of its own (a 0-byte range is not a valid GET):
   * it joins the read before it, or, before the pack's first read, the next one (pending_empty).
   */
  uint32_t pending_empty = 0;
  for (uint32_t i = first; i < first + count; i++) {
    const cs_read_want *want = &wants[order[i]];
    assert(want->pack == pack_index);
    uint64_t end = want->offset + want->length;
    if (want->length == 0) {
      if (b->count > pack_first_span) b->spans[b->count - 1].count++;
      else pending_empty++;
      continue;
    }
    if (b->count > pack_first_span && can_merge(&b->spans[b->count - 1], want->offset, end, limits)) {
      span_extend(b, end);
#if CAPSTORE_MUTANT != 45 /* mutant 45: a record merged into the previous read is not listed in it */
      b->spans[b->count - 1].count++;
#endif
      continue;
    }
    if (!span_open(b, pack_index, want->offset, want->length, i - pending_empty)) return CS_E_FULL;
    b->spans[b->count - 1].count = 1 + pending_empty;
    pending_empty = 0;
  }
  plan->footer_bytes += pack->size_bytes - pack->footer_offset;
  if (b->count > pack_first_span && can_merge(&b->spans[b->count - 1], pack->footer_offset, pack->size_bytes, limits)) {
    span_extend(b, pack->size_bytes);
  } else if (!span_open(b, pack_index, pack->footer_offset, pack->size_bytes - pack->footer_offset,
                        first + count - pending_empty)) {
    return CS_E_FULL;
  } else {
    b->spans[b->count - 1].count = pending_empty; /* only empty records: they ride on the footer's read */
  }
#if CAPSTORE_MUTANT == 47 /* the footer and trailer looked for in the pack's first read, not its last */
  b->spans[pack_first_span].tail = true;
#else
  b->spans[b->count - 1].tail = true;
#endif
  assert(b->spans[b->count - 1].offset + b->spans[b->count - 1].length == pack->size_bytes);
  return CS_E_OK;
}

/* CS_E_OK, or CS_E_TOO_LARGE with msg saying which limit and by how much. */
static int check_limits(const cs_read_plan *plan, const cs_read_limits *limits, char *msg, size_t msg_size) {
#if CAPSTORE_MUTANT == 44 /* the byte limit is never checked */
  if (false) {
#else
  if (plan->bytes > limits->byte_limit) {
#endif
    if (msg != NULL && msg_size > 0) {
      snprintf(msg, msg_size, "the plan reads %llu bytes in %llu requests: %llu bytes over the byte limit %llu",
               (unsigned long long)plan->bytes, (unsigned long long)plan->requests,
               (unsigned long long)(plan->bytes - limits->byte_limit), (unsigned long long)limits->byte_limit);
    }
    return CS_E_TOO_LARGE;
  }
#if CAPSTORE_MUTANT == 46 /* a plan of exactly request_limit requests is refused */
  if (plan->requests >= limits->request_limit) {
#else
  if (plan->requests > limits->request_limit) {
#endif
    if (msg != NULL && msg_size > 0) {
      snprintf(msg, msg_size, "the plan issues %llu requests (%llu bytes): %llu over the request limit %llu",
               (unsigned long long)plan->requests, (unsigned long long)plan->bytes,
               (unsigned long long)(plan->requests - limits->request_limit),
               (unsigned long long)limits->request_limit);
    }
    return CS_E_TOO_LARGE;
  }
  return refuse(CS_E_OK, msg, msg_size, "");
}

/* CS_E_OK or CS_E_INVALID_ARGUMENT: the arrays and limits, then every pack and want. */
static int check_input(const cs_read_pack *packs, uint32_t pack_count, const cs_read_want *wants, uint32_t want_count,
                       const cs_read_limits *limits, const uint32_t *order, const cs_read_span *spans,
                       uint32_t span_capacity, const cs_read_plan *plan, char *msg, size_t msg_size) {
  if (limits == NULL || plan == NULL || (packs == NULL && pack_count > 0) ||
      ((wants == NULL || order == NULL) && want_count > 0) || (spans == NULL && span_capacity > 0)) {
    return refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "limits, plan and every array with a count must be given");
  }
  if (limits->request_limit == 0) return refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "request_limit must be > 0");
  for (uint32_t p = 0; p < pack_count; p++) {
    int rc = check_pack(&packs[p], p, msg, msg_size);
    if (rc != CS_E_OK) return rc;
  }
  for (uint32_t w = 0; w < want_count; w++) {
    int rc = check_want(&wants[w], w, packs, pack_count, msg, msg_size);
    if (rc != CS_E_OK) return rc;
  }
  return CS_E_OK;
}

int cs_read_plan_make(const cs_read_pack *packs, uint32_t pack_count, const cs_read_want *wants, uint32_t want_count,
                      const cs_read_limits *limits, uint32_t *order, cs_read_span *spans, uint32_t span_capacity,
                      cs_read_plan *plan, char *msg, size_t msg_size) {
  int rc = check_input(packs, pack_count, wants, want_count, limits, order, spans, span_capacity, plan, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  *plan = (cs_read_plan){.spans = spans, .order = order, .want_count = want_count};
  sort_wants(wants, order, want_count);
  builder b = {.spans = spans, .capacity = span_capacity};
  for (uint32_t first = 0; first < want_count;) {
    uint32_t pack = wants[order[first]].pack;
    uint32_t count = 1;
    while (first + count < want_count && wants[order[first + count]].pack == pack) count++;
    rc = plan_pack(&b, wants, order, first, count, &packs[pack], limits, plan);
    if (rc != CS_E_OK) {
      if (msg != NULL && msg_size > 0) {
        snprintf(msg, msg_size, "span_capacity %u is too small for the plan (want_count + pack_count always is)",
                 span_capacity);
      }
      return rc;
    }
    plan->pack_count++;
    first += count;
  }
  plan->span_count = b.count;
  plan->requests = b.count;
  for (uint32_t s = 0; s < b.count; s++) plan->bytes += spans[s].length;
  assert(plan->bytes >= plan->payload_bytes + plan->footer_bytes);
  assert(plan->requests >= plan->pack_count && plan->requests <= (uint64_t)want_count + plan->pack_count);
  return check_limits(plan, limits, msg, msg_size);
}

int cs_read_exec_init(cs_read_exec *exec, const cs_read_plan *plan, uint32_t inflight_max) {
  if (exec == NULL || plan == NULL || inflight_max == 0) return CS_E_INVALID_ARGUMENT;
  *exec = (cs_read_exec){.plan = plan, .inflight_max = inflight_max};
  return CS_E_OK;
}

int cs_read_exec_next(cs_read_exec *exec, uint32_t *span) {
  assert(exec != NULL && exec->plan != NULL && span != NULL);
  assert(exec->inflight <= exec->inflight_max && exec->issued == exec->next_span + exec->retries);
  if (exec->err != CS_E_OK || exec->next_span == exec->plan->span_count) return CS_E_CLOSED;
  if (exec->inflight == exec->inflight_max) return CS_E_WOULD_BLOCK;
  *span = exec->next_span++;
  exec->inflight++;
  exec->issued++;
  assert(exec->issued - exec->retries <= exec->plan->requests); /* never more planned reads than planned */
  return CS_E_OK;
}

int cs_read_exec_done(cs_read_exec *exec, uint32_t span, int err) {
  assert(exec != NULL && exec->plan != NULL);
  if (span >= exec->next_span || exec->inflight == 0) return CS_E_STATE;
  exec->inflight--;
  exec->completed++;
  if (err != CS_E_OK && exec->err == CS_E_OK) exec->err = err;
  assert(exec->completed + exec->inflight == exec->issued - exec->retries);
  return CS_E_OK;
}

bool cs_read_exec_finished(const cs_read_exec *exec, int *err) {
  assert(exec != NULL && exec->plan != NULL);
  if (err != NULL) *err = exec->err;
  if (exec->inflight > 0) return false;
  return exec->err != CS_E_OK || exec->completed == exec->plan->span_count;
}

void cs_read_exec_retries(cs_read_exec *exec, uint32_t per_read_max, uint64_t budget) {
  assert(exec != NULL && exec->plan != NULL);
  assert(exec->issued == 0); /* set before the first read: the budget is the whole read's */
  exec->retry_per_read_max = per_read_max;
  exec->retry_budget = budget;
}

bool cs_read_retryable(cs_outcome outcome) {
  switch (outcome) {
    case CS_OUT_REFUSED:      /* nothing was applied: a GET is safe to send again */
    case CS_OUT_TIMEOUT:      /* a GET changes nothing, so an unknown outcome is too */
    case CS_OUT_UNKNOWN:
    case CS_OUT_SERVER_ERROR:
    case CS_OUT_THROTTLED: return true;
    default: return false;
  }
}

int cs_read_exec_retry(cs_read_exec *exec, uint32_t span, uint32_t retried) {
  assert(exec != NULL && exec->plan != NULL);
  if (span >= exec->next_span || exec->inflight == 0) return CS_E_STATE;
  assert(exec->retries <= exec->retry_budget);
  if (exec->err != CS_E_OK || retried >= exec->retry_per_read_max || exec->retries == exec->retry_budget)
    return CS_E_TOO_LARGE;
  exec->retries++;
  exec->issued++;
  assert(exec->issued - exec->retries == exec->next_span);
  return CS_E_OK;
}

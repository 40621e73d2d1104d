/*
 * Readers (the `readers` draw, docs/simulator.md "Readers"): processes that
 * do what src/reader/reader.c does, against the world's catalog and store
 * models, while the capture processes run under faults. Every few simulated
 * seconds a reader
 *
 *   1. reads the catalog's head and pins its watermark W;
 *   2. pages through the packs visible at W in a window of creation times
 *      (a filter), keyset by pack id, each page asked at W, with a pause
 *      between pages now and then (the watermark moves meanwhile);
 *   3. chooses some of the records of those packs, plans their reads with
 *      cs_read_plan_make (first without limits, as capstore_read_estimate;
 *      then with a byte or request limit, sometimes below the plan);
 *   4. sends the plan's GETs through cs_read_exec, each one a request on the
 *      network with its latency and the store's faults, and takes back the
 *      identity of the object under the key when the store answered;
 *   5. verifies as the reader does: each pack's footer and trailer read (the
 *      object is the catalog's pack: its size and SHA-256), each record's
 *      payload read from the same bytes (its CRC-32), and returns the records
 *      or fails with an error.
 *
 * The checker (sim/checker.c, sim_check_read_*) holds each step to the
 * reader's invariants. Readers only read: none of their requests changes
 * the store or the catalog, and every draw comes from prng_readers, so the
 * capture processes run the same with or without them.
 *
 * A record's place in its pack is derived from the pack alone (its size and
 * record count), the same for the catalog, the reader and the checker: see
 * sim_pack_layout.
 */
#include "world.h"

#include <inttypes.h>
#include <string.h>

static uint64_t rand_range(cs_prng *prng, uint64_t lo, uint64_t hi) { return lo + cs_prng_below(prng, hi - lo + 1); }

static bool chance(cs_prng *prng, uint32_t permille) { return cs_prng_below(prng, 1000) < permille; }

static uint64_t align64(uint64_t v) { return (v + 63u) & ~(uint64_t)63u; }

/* An EV_READ_ANSWER tag for "the pause between two pages is over: ask for the next one". */
#define READ_TAG_NEXT_PAGE 0xfffeu

/*
 * dmi-pack-v1's layout of a sim pack: a 64-byte header, then the records,
 * each at a multiple of 64, the payload bytes shared out evenly (the first
 * payload % n records one byte longer), the footer at the first multiple of
 * 64 after the last record, then the footer and the 64-byte trailer. A sim
 * pack is payload + 64 x records + 256 bytes (pack_create), which always
 * leaves more than the trailer after F.
 */
uint64_t sim_pack_layout(const sim_world *w, uint32_t pack, uint32_t record, uint64_t *offset, uint64_t *length) {
  const sim_pack *sp = &w->packs[pack];
  uint64_t n = sp->ref.record_count;
  uint64_t fixed = 64u * n + 256u;
  uint64_t payload = sp->ref.size_bytes > fixed ? sp->ref.size_bytes - fixed : 0;
  uint64_t q = n == 0 ? 0 : payload / n, r = n == 0 ? 0 : payload % n;
  uint64_t long_step = align64(q + 1), short_step = align64(q);
  uint64_t i = record;
  *offset = 64u + (i < r ? i : r) * long_step + (i > r ? i - r : 0) * short_step;
  *length = i < r ? q + 1 : q;
  return 64u + r * long_step + (n - r) * short_step;
}

static void trace(const sim_world *w, const sim_reader *r, const char *what) {
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f r%u  read %" PRIu64 " %s\n", (double)w->now_ns / 1e9, r->index, r->read_id, what);
}

/* ---- requests on the wire --------------------------------------------------- */

/*
 * Sends the reader's request tagged tag (a span of the plan, or the catalog)
 * over the network: the fault it meets is drawn now (a window's, or a
 * per-request fault from the readers' stream), and the answer comes back as
 * EV_READ_ANSWER after the latency (a GET adds its length at 100 MB/s), or
 * at the request timeout. An answer that comes back OK is the server's at
 * that moment.
 */
static void read_send(sim_world *w, sim_reader *r, uint32_t tag, uint64_t bytes) {
  bool catalog = tag == SIM_READ_TAG_CATALOG;
  cs_plan_mode mode = sim_net_mode(w, catalog, &w->prng_readers);
  uint64_t latency = rand_range(&w->prng_readers, 500000, 3000000) + bytes * 10u;
  uint64_t timeout = w->base_svc.request_timeout_ns;
  cs_outcome outcome = CS_OUT_OK;
  switch (mode) {
  case CS_PLAN_MODE_CUT: outcome = CS_OUT_REFUSED, latency = CS_MS_NS; break;
  case CS_PLAN_MODE_STALL: outcome = CS_OUT_TIMEOUT, latency = timeout; break;
  case CS_PLAN_MODE_SLOW: latency = latency * 10u + 200u * CS_MS_NS; break;
  case CS_PLAN_MODE_5XX: outcome = catalog ? CS_OUT_OK : CS_OUT_SERVER_ERROR; break;
  case CS_PLAN_MODE_THROTTLE: outcome = catalog ? CS_OUT_OK : CS_OUT_THROTTLED; break;
  case CS_PLAN_MODE_UNKNOWN: outcome = CS_OUT_UNKNOWN; break;
  default: break;
  }
  if (outcome == CS_OUT_OK && latency > timeout) outcome = CS_OUT_TIMEOUT, latency = timeout;
  if (catalog) r->catalog_outcome = outcome;
  else r->answers[tag].outcome = outcome;
  r->pending++;
  sim_schedule(w, w->now_ns + latency, EV_READ_ANSWER, SIM_NONE, r->index, r->read_id << 16 | tag);
}

static void read_next(sim_world *w, sim_reader *r) {
  r->phase = READ_IDLE;
  if (!w->liveness)
    sim_schedule(w, w->now_ns + rand_range(&w->prng_readers, CS_SEC_NS, 8 * CS_SEC_NS), EV_READ_START, SIM_NONE,
                 r->index, 0);
}

/* ---- the search ---------------------------------------------------------------- */

static void read_start(sim_world *w, sim_reader *r) {
  if (w->liveness) return; /* readers read while the faults run */
  cs_prng *g = &w->prng_readers;
  uint32_t index = r->index;
  uint64_t read_id = r->read_id + 1;
  if (r->phase != READ_IDLE || r->pending != 0) sim_bail(w, SIM_EXIT_CRASH, "r%u: a read starts over another", index);
  memset(r, 0, sizeof *r);
  r->index = index;
  r->read_id = read_id;
  if (w->pack_count == 0) {
    read_next(w, r);
    return;
  }
  /* The filter: packs created in a window of up to 64 consecutive packs, the newest half the time. */
  uint32_t end = chance(g, 500) ? w->pack_count : 1 + (uint32_t)cs_prng_below(g, w->pack_count);
  uint32_t width = 1 + (uint32_t)cs_prng_below(g, 64);
  uint32_t first = end > width ? end - width : 0;
  r->from_ns = w->packs[first].ref.created_at_ns;
  r->to_ns = w->packs[end - 1].ref.created_at_ns;
  uint32_t lo, hi;
  sim_packs_created_between(w, r->from_ns, r->to_ns, &lo, &hi);
  if (hi - lo > SIM_READ_PACKS_MAX - 16u) { /* many packs sealed at one instant: a narrower window next time */
    read_next(w, r);
    return;
  }
  r->page_max = 1 + (uint32_t)cs_prng_below(g, 8);
  r->think_max_ns = chance(g, 250) ? rand_range(g, CS_MS_NS, 3 * CS_SEC_NS) : 0;
  w->counters.reads_started++;
  r->phase = READ_HEAD;
  trace(w, r, "head");
  read_send(w, r, SIM_READ_TAG_CATALOG, 0);
}

static void read_plan(sim_world *w, sim_reader *r);

/* A page came back: check it, keep its packs, and ask for the next one (after a pause now and then). */
static void page_answer(sim_world *w, sim_reader *r) {
  uint64_t at = r->watermark;
  if (w->opts->reader_defect == SIM_READER_DEFECT_HEAD_PAGES && r->pages > 0) at = w->watermark;
  uint32_t rows[8];
  uint32_t n = sim_catalog_search(w, at, r->from_ns, r->to_ns, r->has_after ? &r->after : NULL, rows, r->page_max);
  sim_check_read_page(w, r, at, rows, n);
  if (w->watermark > r->watermark) sim_cov_mark(w, SIM_COV_READ_WATERMARK_MOVED);
  if (r->found_count + n > SIM_READ_PACKS_MAX) sim_bail(w, SIM_EXIT_MODEL, "model bound: packs of one search");
  memcpy(&r->found[r->found_count], rows, n * sizeof rows[0]);
  r->found_count += n;
  r->pages++;
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f r%u  read %" PRIu64 " page %u at W=%" PRIu64 ": %u packs\n", (double)w->now_ns / 1e9,
            r->index, r->read_id, r->pages, at, n);
  if (n < r->page_max) {
    if (r->pages > 1) sim_cov_mark(w, SIM_COV_READ_PAGED);
    sim_check_read_search(w, r);
    read_plan(w, r);
    return;
  }
  r->after = w->packs[rows[n - 1]].ref.pack_id;
  r->has_after = true;
  uint64_t think = r->think_max_ns == 0 ? 0 : cs_prng_below(&w->prng_readers, r->think_max_ns + 1);
  r->pending++;
  sim_schedule(w, w->now_ns + think, EV_READ_ANSWER, SIM_NONE, r->index, r->read_id << 16 | READ_TAG_NEXT_PAGE);
}

static void catalog_answer(sim_world *w, sim_reader *r) {
  if (r->catalog_outcome != CS_OUT_OK) { /* the search fails: nothing is read */
    sim_cov_mark(w, SIM_COV_READ_CATALOG_FAILED);
    w->counters.reads_failed++;
    trace(w, r, r->phase == READ_HEAD ? "head failed" : "page failed");
    read_next(w, r);
    return;
  }
  if (r->phase == READ_HEAD) {
    r->watermark = w->watermark;
    r->rejects_at_pin = w->counters.rejects_landed;
    r->phase = READ_PAGE;
    read_send(w, r, SIM_READ_TAG_CATALOG, 0);
    return;
  }
  page_answer(w, r);
}

/* ---- choosing records and planning their reads ----------------------------------- */

/* Adds record `record` of truth pack `pack` as the next want. */
static void want_add(sim_world *w, sim_reader *r, uint32_t pack, uint32_t record) {
  uint32_t slot = 0;
  while (slot < r->pack_count && r->pack_truth[slot] != pack) slot++;
  if (slot == r->pack_count) {
    uint64_t offset, length;
    r->pack_truth[slot] = pack;
    r->packs[slot] = (cs_read_pack){.size_bytes = w->packs[pack].ref.size_bytes,
                                    .footer_offset = sim_pack_layout(w, pack, 0, &offset, &length)};
    r->pack_count++;
  }
  cs_read_want *want = &r->wants[r->want_count];
  want->pack = slot;
  sim_pack_layout(w, pack, record, &want->offset, &want->length);
  r->want_capture[r->want_count++] = w->packs[pack].capture_first + record;
}

/* The found pack holding the k-th record of the search (in page order), and its record there. */
static uint32_t record_at(const sim_world *w, const sim_reader *r, uint64_t k, uint32_t *record) {
  for (uint32_t i = 0; i < r->found_count; i++) {
    uint32_t n = w->packs[r->found[i]].ref.record_count;
    if (k < n) {
      *record = (uint32_t)k;
      return r->found[i];
    }
    k -= n;
  }
  return SIM_NONE;
}

/* Chooses 1 to 64 distinct records of the search, in the order drawn (the plan sorts them), a few twice now and then. */
static void choose(sim_world *w, sim_reader *r) {
  cs_prng *g = &w->prng_readers;
  uint64_t total = 0;
  for (uint32_t i = 0; i < r->found_count; i++) total += w->packs[r->found[i]].ref.record_count;
  if (total == 0) return;
  uint64_t want = 1 + cs_prng_below(g, total < SIM_READ_WANTS_MAX ? total : SIM_READ_WANTS_MAX);
  uint64_t picked[SIM_READ_WANTS_MAX];
  uint32_t n = 0;
  /* Rejection of repeats: at most 64 distinct draws, each tried a bounded number of times. */
  for (uint32_t tries = 0; n < want && tries < 64u * SIM_READ_WANTS_MAX; tries++) {
    uint64_t k = cs_prng_below(g, total);
    bool seen = false;
    for (uint32_t j = 0; j < n && !seen; j++) seen = picked[j] == k;
    if (!seen) picked[n++] = k;
  }
  /* An eighth of the reads ask for some records twice (a selection may repeat one): read once, returned twice. */
  uint32_t repeats = chance(g, 125) ? 1 + (uint32_t)cs_prng_below(g, 4) : 0;
  for (; repeats > 0 && n < SIM_READ_WANTS_MAX; repeats--) {
    uint64_t again = picked[cs_prng_below(g, n)];
    picked[n++] = again;
  }
  for (uint32_t j = 0; j < n; j++) {
    uint32_t record = 0;
    uint32_t pack = record_at(w, r, picked[j], &record);
    if (pack == SIM_NONE) sim_bail(w, SIM_EXIT_CRASH, "reader: record %" PRIu64 " of %" PRIu64, picked[j], total);
    want_add(w, r, pack, record);
  }
}

/* Gaps merged, read lengths bounded, whole objects now and then: the reader's options. */
static void draw_options(sim_world *w, sim_reader *r) {
  static const uint64_t gaps[] = {0, 64, 4096, UINT64_C(1) << 20};
  static const uint64_t spans[] = {0, 16384, UINT64_C(64) << 20};
  cs_prng *g = &w->prng_readers;
  cs_read_limits_default(&r->limits);
  r->limits.gap_bytes_max = gaps[cs_prng_below(g, 4)];
  r->limits.span_bytes_max = spans[cs_prng_below(g, 3)];
  r->limits.whole_objects = chance(g, 125);
  r->inflight_max = 1 + (uint32_t)cs_prng_below(g, 8);
}

/*
 * The budget: none half the time; a request or byte limit below the
 * estimate (the plan must be refused before any GET); limits exactly at the
 * estimate, or a little above (it must be accepted).
 */
static void draw_budget(sim_world *w, sim_reader *r) {
  cs_prng *g = &w->prng_readers;
  uint64_t kind = cs_prng_below(g, 20);
  if (kind >= 10 && kind < 13 && r->estimate_requests > 1) {
    r->limits.request_limit = 1 + cs_prng_below(g, r->estimate_requests - 1);
  } else if (kind >= 10 && kind < 16) {
    r->limits.byte_limit = cs_prng_below(g, r->estimate_bytes);
  } else if (kind >= 16 && kind < 18) {
    r->limits.request_limit = r->estimate_requests;
    r->limits.byte_limit = r->estimate_bytes;
    sim_cov_mark(w, SIM_COV_READ_BUDGET_EXACT);
  } else if (kind >= 18) {
    r->limits.request_limit = r->estimate_requests + cs_prng_below(g, 4);
    r->limits.byte_limit = r->estimate_bytes + cs_prng_below(g, UINT64_C(1) << 20);
  }
  r->over_budget = r->estimate_bytes > r->limits.byte_limit || r->estimate_requests > r->limits.request_limit;
}

static void read_issue(sim_world *w, sim_reader *r);

static void read_plan(sim_world *w, sim_reader *r) {
  choose(w, r);
  if (r->want_count == 0) { /* nothing visible in the window at W */
    sim_cov_mark(w, SIM_COV_READ_EMPTY);
    w->counters.reads_ok++;
    read_next(w, r);
    return;
  }
  draw_options(w, r);
  /* The estimate (capstore_read_estimate): the same plan without limits. */
  cs_read_limits unlimited = r->limits;
  unlimited.byte_limit = UINT64_MAX;
  unlimited.request_limit = UINT64_MAX;
  /* The caller's arrays hold leftovers (here a fixed pattern): the planner must not read what it did not write. */
  memset(r->order, 0xa5, sizeof r->order);
  memset(r->spans, 0xa5, sizeof r->spans);
  int rc = cs_read_plan_make(r->packs, r->pack_count, r->wants, r->want_count, &unlimited, r->order, r->spans,
                             SIM_READ_SPANS_MAX, &r->plan, r->plan_msg, sizeof r->plan_msg);
  if (rc != CS_E_OK)
    sim_bail(w, SIM_EXIT_CRASH, "r%u's estimate refused: %s (%s)", r->index, cs_strerror(rc), r->plan_msg);
  r->estimate_requests = r->plan.requests;
  r->estimate_bytes = r->plan.bytes;
  draw_budget(w, r);
  memset(r->order, 0xa5, sizeof r->order);
  memset(r->spans, 0xa5, sizeof r->spans);
  r->plan_rc = cs_read_plan_make(r->packs, r->pack_count, r->wants, r->want_count, &r->limits, r->order, r->spans,
                                 SIM_READ_SPANS_MAX, &r->plan, r->plan_msg, sizeof r->plan_msg);
  if (r->plan_rc != CS_E_OK && r->plan_rc != CS_E_TOO_LARGE)
    sim_bail(w, SIM_EXIT_CRASH, "r%u's plan refused: %s (%s)", r->index, cs_strerror(r->plan_rc), r->plan_msg);
  sim_check_read_plan(w, r);
  if (r->plan.span_count < r->want_count + r->plan.pack_count) sim_cov_mark(w, SIM_COV_READ_MERGED);
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f r%u  read %" PRIu64 " plan: %u records of %u packs, %" PRIu64 " GETs, %" PRIu64
            " bytes%s: %s\n", (double)w->now_ns / 1e9, r->index, r->read_id, r->want_count, r->pack_count,
            r->plan.requests, r->plan.bytes, r->limits.whole_objects ? " (whole)" : "",
            r->plan_rc == CS_E_OK ? "accepted" : r->plan_msg);
  if (r->plan_rc == CS_E_TOO_LARGE) {
    sim_cov_mark(w, SIM_COV_READ_BUDGET_REFUSED);
    if (w->opts->reader_defect != SIM_READER_DEFECT_READ_REFUSED) {
      w->counters.reads_refused++;
      read_next(w, r);
      return;
    }
  }
  if (cs_read_exec_init(&r->exec, &r->plan, r->inflight_max) != CS_E_OK)
    sim_bail(w, SIM_EXIT_CRASH, "r%u: cs_read_exec_init refused", r->index);
  r->phase = READ_FETCH;
  read_issue(w, r);
}

/* ---- fetching ---------------------------------------------------------------------- */

static void get_send(sim_world *w, sim_reader *r, uint32_t span) {
  r->issued++;
  r->issued_bytes += r->spans[span].length;
  r->inflight++;
  sim_check_read_get(w, r, span);
  r->answers[span] = (sim_read_answer){.sent = true, .object_pack = SIM_NONE};
  read_send(w, r, span, r->spans[span].length);
}

/*
 * What the store holds under the span's key now. store_changes and
 * store_other_bytes strike between a reader's GETs too: a GET may find
 * other bytes under the key (an upload replacing the object between two
 * reads) or, with store_changes, no object. The object itself is left as it
 * is, so no capture process sees a difference.
 */
static void get_observe(sim_world *w, sim_reader *r, uint32_t span, sim_read_answer *a) {
  uint32_t pack = r->pack_truth[r->spans[span].pack];
  const sim_pack *sp = &w->packs[pack];
  const sim_profile *pr = &w->profile;
  uint32_t lie = 0; /* 1: other bytes, 2: no object */
  if (!w->liveness && pr->on[F_STORE_CHANGES] && chance(&w->prng_readers, pr->rate_permille[F_STORE_CHANGES] / 4))
    lie = 1 + (uint32_t)cs_prng_below(&w->prng_readers, 2);
  else if (!w->liveness && pr->on[F_STORE_OTHER_BYTES] &&
           chance(&w->prng_readers, pr->rate_permille[F_STORE_OTHER_BYTES] / 4))
    lie = 1;
  if (lie != 0) sim_cov_mark(w, SIM_COV_READ_CHANGED_MID_READ);
  uint32_t found = lie == 2 ? SIM_NONE : sim_store_find(w, sp->ref.key, sp->ref.key_len);
  if (found == SIM_NONE) {
    a->outcome = CS_OUT_NOT_FOUND;
    return;
  }
  const sim_object *obj = &w->objects[found];
  a->found = true;
  a->is_pack = obj->is_pack;
  a->object_pack = obj->pack;
  a->size_bytes = obj->ref.size_bytes;
  memcpy(a->sha256, obj->ref.sha256, 32);
  if (lie == 1) a->sha256[0] ^= 0x5a;
  a->true_bytes = a->is_pack && a->object_pack == pack && a->size_bytes == sp->ref.size_bytes &&
                  memcmp(a->sha256, sp->ref.sha256, 32) == 0;
}

static void read_finish(sim_world *w, sim_reader *r);

/*
 * Hands out the plan's reads while fewer than inflight_max are out; the read
 * ends when cs_read_exec_finished says so (every read back, or one failed and
 * the rest back), as the reader's fetch loop does.
 */
static void read_issue(sim_world *w, sim_reader *r) {
  uint32_t span;
  while (cs_read_exec_next(&r->exec, &span) == CS_E_OK) get_send(w, r, span);
  if (cs_read_exec_finished(&r->exec, NULL)) read_finish(w, r);
}

static void get_answer(sim_world *w, sim_reader *r, uint32_t span) {
  if (span >= r->plan.span_count || !r->answers[span].sent || r->answers[span].answered)
    sim_bail(w, SIM_EXIT_CRASH, "r%u: an answer for span %u, not in flight", r->index, span);
  sim_read_answer *a = &r->answers[span];
  r->inflight--;
  a->answered = true;
  if (a->outcome == CS_OUT_OK) get_observe(w, r, span, a);
  if (!a->true_bytes) sim_cov_mark(w, a->outcome == CS_OUT_NOT_FOUND ? SIM_COV_READ_OBJECT_LOST
                                      : a->outcome == CS_OUT_OK   ? SIM_COV_READ_OTHER_BYTES
                                                                  : SIM_COV_READ_GET_FAILED);
  if (w->opts->trace && !a->true_bytes)
    fprintf(w->opts->out, "%12.6f r%u  read %" PRIu64 " GET of span %u: %s\n", (double)w->now_ns / 1e9, r->index,
            r->read_id, span, a->outcome != CS_OUT_OK ? cs_outcome_name(a->outcome) : "other bytes");
  int err = a->outcome == CS_OUT_OK ? CS_E_OK : CS_E_IO;
  if (err != CS_E_OK) r->failed_seen = true;
  if (err != CS_E_OK && w->opts->reader_defect == SIM_READER_DEFECT_RETRY && !r->retried) {
    r->retried = true; /* the defect: sent again, behind the exec's back */
    get_send(w, r, span);
    return;
  }
  if (cs_read_exec_done(&r->exec, span, err) != CS_E_OK)
    sim_bail(w, SIM_EXIT_CRASH, "r%u: cs_read_exec_done refused span %u", r->index, span);
  read_issue(w, r);
}

/* ---- verifying ------------------------------------------------------------------------ */

/* The answer holds the catalog's pack: its id in the footer, its size and its SHA-256. */
static bool answer_is_catalogs(const sim_world *w, const sim_read_answer *a, uint32_t pack) {
  const sim_pack *sp = &w->packs[pack];
  return a->answered && a->outcome == CS_OUT_OK && a->found && a->is_pack && a->object_pack == pack &&
         a->size_bytes == sp->ref.size_bytes && memcmp(a->sha256, sp->ref.sha256, 32) == 0;
}

static bool in_span(const cs_read_span *span, uint64_t offset, uint64_t length) {
  return offset >= span->offset && length <= span->length && offset - span->offset <= span->length - length;
}

/*
 * As the reader verifies (docs/reader.md "Verify"): per pack, the trailer
 * and footer in its tail read, from the catalog's object; per record, its
 * payload in the read the plan put it in, from the same object (its CRC-32).
 * CS_E_OK, or the error the reader would give; why names what failed.
 */
static int read_verify(const sim_world *w, const sim_reader *r, const uint32_t *span_of_want,
                       const uint32_t *tail_of_pack, const char **why) {
  int err = CS_E_OK;
  cs_read_exec_finished(&r->exec, &err);
  if (err != CS_E_OK) return *why = "a GET failed", err;
  for (uint32_t k = 0; k < r->pack_count; k++) {
    uint32_t t = tail_of_pack[k];
    const cs_read_pack *p = &r->packs[k];
    if (t == SIM_NONE || !in_span(&r->spans[t], p->footer_offset, p->size_bytes - p->footer_offset))
      return *why = "a pack's footer and trailer are not in its tail read", CS_E_CORRUPT;
    if (!answer_is_catalogs(w, &r->answers[t], r->pack_truth[k]))
      return *why = "a pack's trailer or footer is not the catalog's pack's", CS_E_CORRUPT;
  }
  if (w->opts->reader_defect == SIM_READER_DEFECT_NO_PAYLOAD_CHECK) return CS_E_OK;
  for (uint32_t i = 0; i < r->want_count; i++) {
    uint32_t s = span_of_want[i];
    if (s == SIM_NONE) continue; /* in no read: not returned either */
    if (!in_span(&r->spans[s], r->wants[i].offset, r->wants[i].length) ||
        !answer_is_catalogs(w, &r->answers[s], r->pack_truth[r->wants[i].pack]))
      return *why = "a record's payload fails its CRC-32 check", CS_E_CORRUPT;
  }
  return CS_E_OK;
}

/* The records the read returns: each one the plan lists in a read, with where its bytes came from. */
static void read_result(const sim_world *w, sim_reader *r) {
  (void)w;
  for (uint32_t s = 0; s < r->plan.span_count; s++) {
    const cs_read_span *span = &r->spans[s];
    for (uint32_t i = span->first; i < span->first + span->count && i < r->want_count; i++) {
      if (r->result_count == SIM_READ_SPANS_MAX) {
        r->result_overflow = true;
        return;
      }
      uint32_t want = r->order[i];
      const cs_read_want *wt = &r->wants[want];
      r->result[r->result_count++] = (sim_read_record){
          .want = want, .src_pack = r->answers[s].object_pack, .src_true = r->answers[s].true_bytes,
          .in_span = in_span(span, wt->offset, wt->length), .offset = wt->offset, .length = wt->length};
    }
  }
}

static void read_finish(sim_world *w, sim_reader *r) {
  uint32_t span_of_want[SIM_READ_WANTS_MAX], tail_of_pack[SIM_READ_WANTS_MAX];
  for (uint32_t i = 0; i < SIM_READ_WANTS_MAX; i++) span_of_want[i] = tail_of_pack[i] = SIM_NONE;
  for (uint32_t s = 0; s < r->plan.span_count; s++) {
    const cs_read_span *span = &r->spans[s];
    for (uint32_t i = span->first; i < span->first + span->count && i < r->want_count; i++)
      span_of_want[r->order[i]] = s;
    if (span->tail && span->pack < r->pack_count) tail_of_pack[span->pack] = s;
  }
  const char *why = "";
  int rc = read_verify(w, r, span_of_want, tail_of_pack, &why);
  if (rc == CS_E_OK) read_result(w, r);
  sim_check_read_done(w, r, rc);
  if (rc == CS_E_OK) {
    w->counters.reads_ok++;
    sim_cov_mark(w, SIM_COV_READ_OK);
    if (r->limits.whole_objects) sim_cov_mark(w, SIM_COV_READ_WHOLE);
  } else {
    w->counters.reads_failed++;
  }
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f r%u  read %" PRIu64 " %s: %u records, %" PRIu64 " GETs%s%s\n",
            (double)w->now_ns / 1e9, r->index, r->read_id, rc == CS_E_OK ? "returned" : "failed", r->result_count,
            r->issued, rc == CS_E_OK ? "" : ": ", rc == CS_E_OK ? "" : why);
  read_next(w, r);
}

/* ---- events ------------------------------------------------------------------------------ */

void sim_readers_start(sim_world *w) {
  for (uint32_t i = 0; i < w->reader_count; i++) {
    w->readers[i].index = i;
    sim_schedule(w, rand_range(&w->prng_readers, CS_SEC_NS, 30 * CS_SEC_NS), EV_READ_START, SIM_NONE, i, 0);
  }
}

void sim_reader_event(sim_world *w, const sim_event *ev) {
  if (ev->a >= w->reader_count) sim_bail(w, SIM_EXIT_CRASH, "event for reader %" PRIu64, ev->a);
  sim_reader *r = &w->readers[ev->a];
  if (ev->kind == EV_READ_START) {
    read_start(w, r);
    return;
  }
  /* A read ends only once every request of it came back: an answer always finds its read. */
  if ((ev->b >> 16) != r->read_id)
    sim_bail(w, SIM_EXIT_CRASH, "r%u: an answer of read %" PRIu64, r->index, ev->b >> 16);
  uint32_t tag = (uint32_t)(ev->b & 0xffffu);
  r->pending--;
  if (tag == READ_TAG_NEXT_PAGE) read_send(w, r, SIM_READ_TAG_CATALOG, 0);
  else if (tag == SIM_READ_TAG_CATALOG) catalog_answer(w, r);
  else get_answer(w, r, tag);
  /* A read under way always waits for something: one that waits for nothing never ends (a hang). */
  if (r->phase != READ_IDLE && r->pending == 0)
    sim_bail(w, SIM_EXIT_LIVENESS, "r%u's read %" PRIu64 " waits for nothing: %u of its %u reads came back, %" PRIu64
             " sent, and cs_read_exec says it has not finished", r->index, r->read_id, r->exec.completed,
             r->plan.span_count, r->issued);
}

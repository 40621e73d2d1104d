/*
 * Capture arrays in the swarm (docs/simulator.md, "Capture arrays";
 * docs/arrays.md). In a quarter of swarm seeds (every seed of "all") some of
 * the records the capture processes admit are chunk writes of one array of
 * 8 to 64 slots: each names a slot, drawn so that processes overlap, and
 * travels as every record does (spool, upload, index, publish) under every
 * fault the seed draws: crashes, torn spools, pauses, stolen leases, store
 * and catalog outages. The draws come from a stream of their own and the
 * array adds no event, so a seed runs the same with the array on or off.
 *
 * What runs is what the runtime runs (src/runtime/array_common.c): a slot's
 * candidates are its chunk records visible at the watermark, each at its
 * pack's lowest visible version, in the catalog's order (slot, first
 * version, pack id, capture id), and the core's arbiter
 * (cs_array_arbiter_next) names each slot's winner. Where the store
 * enforces If-None-Match a write first claims its slot (a claim taken is
 * refused at once; a claim may be left without its record, as by a crash
 * between the two); a process refuses a second write of a slot it wrote
 * (until it crashes and forgets); after a flush answered drained it learns
 * which of its writes won (accepted) and which lost (refused).
 *
 * The checker, each time the watermark moves and at each drained flush:
 *   - a slot's winner never changes once a reader saw it (a visible slot's
 *     content never changes);
 *   - at most one write of a slot is ever accepted, and it is the winner
 *     readers see at every later watermark (written_chunks never omits an
 *     acknowledged write);
 *   - every winner's pack was uploaded (written_chunks names only slots
 *     whose content can be read);
 *   - a complete array's stamp never changes;
 *   - a reader's cache, judged against the refreshed stamp as the runtime's
 *     is (same stamp: all of it; same array: its written slots; another
 *     array: nothing), never serves a slot's zeros after it was written nor
 *     another write's bytes.
 */
#include "array_oracle.h"
#include "world.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static bool chance(cs_prng *prng, uint32_t permille) { return cs_prng_below(prng, 1000) < permille; }

/*
 * The array's geometry, from a stream of its own (so no other draw moves):
 * one to three dimensions whose chunk grid multiplies to the slot count (a
 * random divisor per dimension), chunks of 1 to 3 elements per dimension,
 * the last chunk of a dimension cut short at random, items of 1 to 8 bytes.
 * Slot s is chunk s in C order.
 */
static void array_geometry(sim_world *w) {
  static const uint32_t items[] = {1, 2, 4, 8};
  cs_prng r;
  cs_prng_seed(&r, w->opts->seed ^ UINT64_C(0x67656f6d65747279));
  cs_array_geometry *g = &w->array_geom;
  memset(g, 0, sizeof *g);
  g->dims = 1 + (uint32_t)cs_prng_below(&r, 3);
  g->item_bytes = items[cs_prng_below(&r, 4)];
  uint64_t left = w->array_slots;
  for (uint32_t d = 0; d < g->dims; d++) {
    uint64_t grid = left;
    if (d + 1 < g->dims) {
      uint64_t divisors[SIM_ARRAY_SLOTS_MAX], n = 0;
      for (uint64_t q = 1; q <= left; q++)
        if (left % q == 0) divisors[n++] = q;
      grid = divisors[cs_prng_below(&r, n)];
    }
    left /= grid;
    g->chunk[d] = 1 + cs_prng_below(&r, 3);
    g->shape[d] = (grid - 1) * g->chunk[d] + 1 + cs_prng_below(&r, g->chunk[d]);
    if (grid == 1) g->chunk[d] = g->shape[d]; /* one chunk: the whole extent (a chunk never exceeds it) */
  }
  char msg[120];
  if (cs_array_geometry_check(g, msg, sizeof msg) != CS_E_OK || cs_array_chunk_count(g) != w->array_slots)
    sim_bail(w, SIM_EXIT_MODEL, "array: a geometry of %u chunks refused or miscounted: %s", w->array_slots, msg);
}

void sim_arrays_setup(sim_world *w, bool swarm, bool all) {
  cs_prng_seed(&w->prng_arrays, w->opts->seed ^ UINT64_C(0x6172726179732121));
  bool on = swarm ? cs_prng_below(&w->prng_arrays, 4) == 0 : all;
  if (!on || w->opts->plan != NULL || (w->opts->without_mask & SIM_WITHOUT_ARRAYS)) return;
  w->arrays = true;
  w->array_slots = 8 + (uint32_t)cs_prng_below(&w->prng_arrays, SIM_ARRAY_SLOTS_MAX - 7);
  w->array_permille = 50 + (uint32_t)cs_prng_below(&w->prng_arrays, 451); /* 5% to 50% of records */
  /* Half of them on a store that enforces If-None-Match: slots claimed first (instant: the claim is not the
     subject here; its refusals and its claims left without records are). */
  w->array_claims = cs_prng_below(&w->prng_arrays, 2) == 0;
  w->array_claim_lost_permille = (uint32_t)cs_prng_below(&w->prng_arrays, 51);
  /* The claim TTL, 1 to 30 s, from a stream of its own: the arrays' draws stay what they were. */
  cs_prng ttl;
  cs_prng_seed(&ttl, w->opts->seed ^ UINT64_C(0x636c61696d74746c));
  w->array_claim_ttl_ns = (1 + cs_prng_below(&ttl, 30)) * CS_SEC_NS;
  for (uint32_t s = 0; s < SIM_ARRAY_SLOTS_MAX; s++) w->array_winner[s] = w->array_cache[s] = SIM_NONE;
  array_geometry(w);
  cs_prng_seed(&w->prng_array_reads, w->opts->seed ^ UINT64_C(0x736c696365737321));
}

static void winners_at(sim_world *w, uint64_t watermark, uint32_t winners[SIM_ARRAY_SLOTS_MAX]);

/*
 * A claimed slot: the writer takes the claim over, as the runtime's slot_claim does, when it is
 * arrays.claim_ttl old and the catalog shows no winner of the slot at the watermark. The claim's own writer
 * may be alive with its record on the way (a paused process, a daemon behind): both records are then indexed,
 * and the arbiter's one winner is what the checker holds every answer to.
 */
static bool claim_taken_over(sim_world *w, uint32_t slot) {
  if (!cs_array_claim_stale(w->array_claim_at[slot], w->now_ns, w->array_claim_ttl_ns)) return false;
  uint32_t winners[SIM_ARRAY_SLOTS_MAX];
  winners_at(w, w->watermark, winners);
  if (winners[slot] != SIM_NONE) return false;
  w->counters.array_claims_taken_over++;
  sim_cov_mark(w, SIM_COV_SIT_ARRAY_CLAIM_TAKEN_OVER);
  return true;
}

/* A record is admitted: it may be a chunk write. */
void sim_arrays_admitted(sim_world *w, sim_proc *p, uint64_t capture_id) {
  if (!w->arrays || !chance(&w->prng_arrays, w->array_permille)) return;
  /* Processes overlap: a slot near the process's share of the array, or anywhere. */
  uint32_t slot = chance(&w->prng_arrays, 500)
                      ? (uint32_t)cs_prng_below(&w->prng_arrays, w->array_slots)
                      : (p->index * 7u + (uint32_t)cs_prng_below(&w->prng_arrays, 4)) % w->array_slots;
  if (w->array_local_inc[p->index] != p->incarnation) {
    w->array_local_inc[p->index] = p->incarnation; /* a new incarnation remembers nothing it wrote */
    w->array_local[p->index] = 0;
  }
  uint64_t bit = UINT64_C(1) << slot;
  if (w->array_local[p->index] & bit) {
    w->counters.array_refused_local++;
    return; /* this writer wrote (or saw won) the slot: refused at once, the record is another capture */
  }
  if (w->array_claims) {
    if (w->array_claimed[slot] && !claim_taken_over(w, slot)) {
      w->counters.array_refused_claim++;
      sim_cov_mark(w, SIM_COV_SIT_ARRAY_CLAIM_REFUSED);
      w->array_local[p->index] |= bit;
      return;
    }
    w->array_claimed[slot] = true;
    w->array_claim_at[slot] = w->now_ns;
    if (chance(&w->prng_arrays, w->array_claim_lost_permille)) {
      w->counters.array_claims_lost++; /* claimed, and gone before its record: the slot stays unwritten */
      return;
    }
  }
  if (w->array_write_count >= SIM_ARRAY_WRITES_MAX) return; /* the table bounds the workload, not the array */
  w->array_local[p->index] |= bit;
  sim_array_write *x = &w->array_writes[w->array_write_count++];
  *x = (sim_array_write){.capture_id = capture_id, .proc = p->index, .slot = slot, .pack = SIM_NONE};
  w->counters.array_writes++;
}

/* ---- the catalog's answer ---------------------------------------------------------------- */

typedef struct candidate {
  uint32_t write;
  uint32_t pack;
  uint64_t version;
} candidate;

static const sim_world *sort_world;

static int by_catalog_order(const void *pa, const void *pb) {
  const candidate *x = pa, *y = pb;
  const sim_array_write *a = &sort_world->array_writes[x->write], *b = &sort_world->array_writes[y->write];
  if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
  if (x->version != y->version) return x->version < y->version ? -1 : 1;
  int c = cs_uuid_compare(&sort_world->packs[x->pack].ref.pack_id, &sort_world->packs[y->pack].ref.pack_id);
  if (c != 0) return c;
  return (a->capture_id > b->capture_id) - (a->capture_id < b->capture_id);
}

/* The pack that holds a write's record (sealed and durable), found once and kept. */
static uint32_t write_pack(sim_world *w, sim_array_write *x) {
  if (x->pack != SIM_NONE) return x->pack;
  for (uint32_t i = x->scan_from; i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    if (sp->proc == x->proc && sp->durable && x->capture_id >= sp->capture_first &&
        x->capture_id < sp->capture_first + sp->ref.record_count) {
      x->pack = i;
      return i;
    }
  }
  x->scan_from = w->pack_count; /* packs are appended: the next look starts at the new ones */
  return SIM_NONE;
}

/* Each slot's winner at watermark, as a reader's refresh sees it: winners[s] is a write index or SIM_NONE. */
static void winners_at(sim_world *w, uint64_t watermark, uint32_t winners[SIM_ARRAY_SLOTS_MAX]) {
  static candidate cand[SIM_ARRAY_WRITES_MAX];
  uint32_t n = 0;
  for (uint32_t i = 0; i < w->array_write_count; i++) {
    uint32_t pack = write_pack(w, &w->array_writes[i]);
    if (pack == SIM_NONE || !sim_read_visible(w, pack, watermark)) continue;
    cand[n++] = (candidate){.write = i, .pack = pack, .version = w->packs[pack].min_version};
  }
  sort_world = w;
  qsort(cand, n, sizeof *cand, by_catalog_order);
  for (uint32_t s = 0; s < SIM_ARRAY_SLOTS_MAX; s++) winners[s] = SIM_NONE;
  cs_array_arbiter arb;
  memset(&arb, 0, sizeof arb);
  for (uint32_t k = 0; k < n; k++) {
    const sim_array_write *x = &w->array_writes[cand[k].write];
    cs_array_verdict v = cs_array_arbiter_next(&arb, false, x->slot, cand[k].version);
    if (v == CS_ARRAY_OUT_OF_ORDER)
      sim_bail(w, SIM_EXIT_SAFETY, "array: the arbiter refused the catalog's order at slot %u", x->slot);
    if (v == CS_ARRAY_WINS) winners[x->slot] = cand[k].write;
    if (v == CS_ARRAY_LOSES) sim_cov_mark(w, SIM_COV_SIT_ARRAY_SECOND_CANDIDATE);
  }
}

/* The stamp a reader computes from the winners (the runtime's stamp_of): the first accepted write's identity. */
static cs_array_stamp stamp_of(sim_world *w, const uint32_t winners[SIM_ARRAY_SLOTS_MAX]) {
  uint64_t nonce = 0, first = UINT64_MAX, last = 0, written = 0;
  uint32_t first_slot = UINT32_MAX;
  for (uint32_t s = 0; s < w->array_slots; s++) {
    if (winners[s] == SIM_NONE) continue;
    const sim_array_write *x = &w->array_writes[winners[s]];
    uint64_t v = w->packs[x->pack].min_version;
    written++;
    if (v < first || (v == first && s < first_slot)) first = v, first_slot = s, nonce = x->capture_id | 1u;
    if (v > last) last = v;
  }
  cs_array_stamp st;
  if (cs_array_stamp_make(&w->array_geom, nonce, written, last, &st) != CS_E_OK)
    sim_bail(w, SIM_EXIT_SAFETY, "array: the stamp core refused %" PRIu64 " written slots of %u", written,
             w->array_slots);
  return st;
}

/* ---- a reader's slice, against a brute force of its own ---------------------------------------- */

#define SIM_ARRAY_ELEMENTS_MAX (SIM_ARRAY_SLOTS_MAX * 27u) /* chunks of at most 3 x 3 x 3 elements */

/* The checker's own grid and chunk arithmetic (not the core's): chunk of element `at`, and chunk c's box. */
static uint64_t oracle_chunk_of(const cs_array_geometry *g, const uint64_t at[CS_ARRAY_DIMS_MAX]) {
  uint64_t c = 0;
  for (uint32_t d = 0; d < g->dims; d++) c = c * ((g->shape[d] + g->chunk[d] - 1) / g->chunk[d]) + at[d] / g->chunk[d];
  return c;
}

static void oracle_chunk_box(const cs_array_geometry *g, uint64_t c, uint64_t origin[CS_ARRAY_DIMS_MAX],
                             uint64_t shape[CS_ARRAY_DIMS_MAX]) {
  for (uint32_t d = g->dims; d-- > 0;) {
    uint64_t grid = (g->shape[d] + g->chunk[d] - 1) / g->chunk[d];
    origin[d] = c % grid * g->chunk[d];
    shape[d] = g->shape[d] - origin[d] < g->chunk[d] ? g->shape[d] - origin[d] : g->chunk[d];
    c /= grid;
  }
}

static uint64_t oracle_linear(const cs_array_geometry *g, const uint64_t at[CS_ARRAY_DIMS_MAX]) {
  uint64_t i = 0;
  for (uint32_t d = 0; d < g->dims; d++) i = i * g->shape[d] + at[d];
  return i;
}

/* Byte b of element i as the write with this capture id holds it (never 0, so zeros show). */
static uint8_t oracle_byte(uint64_t capture_id, uint64_t i, uint32_t b) {
  uint64_t x = (capture_id ^ (i << 4 | b)) * UINT64_C(0x9e3779b97f4a7c15);
  return (uint8_t)((x >> 56) | 1u);
}

/* Chunk c's bytes as the write with capture id holds them: dense, C order, its own (edge-cut) shape. */
static void oracle_chunk_fill(const cs_array_geometry *g, uint64_t c, uint64_t capture_id, uint8_t *out) {
  uint64_t origin[CS_ARRAY_DIMS_MAX] = {0}, shape[CS_ARRAY_DIMS_MAX] = {0}, zero[CS_ARRAY_DIMS_MAX] = {0};
  uint64_t local[CS_ARRAY_DIMS_MAX] = {0}, at[CS_ARRAY_DIMS_MAX] = {0}, k = 0;
  oracle_chunk_box(g, c, origin, shape);
  do {
    for (uint32_t d = 0; d < g->dims; d++) at[d] = origin[d] + local[d];
    uint64_t i = oracle_linear(g, at);
    for (uint32_t b = 0; b < g->item_bytes; b++) out[k++] = oracle_byte(capture_id, i, b);
  } while (array_oracle_next(g->dims, zero, shape, local));
}

/*
 * The blocks of block_bytes a piece's region needs (cs_array_region_blocks)
 * against brute force: the map of exactly the words the chunk's blocks need
 * is filled right, and one word short is refused with the zeroed map
 * untouched (array.h; the core only sets bits, so any write shows). Chunks of
 * up to 2^15 bytes. The swarm's slice reader and the API rules both ask it.
 */
void sim_check_region_blocks(sim_world *w, const cs_array_geometry *g, const cs_array_piece *p, uint64_t block) {
  enum { WORDS = 4096 * 8 / 64 + 1 };
  static uint64_t need[WORDS], want[WORDS];
  uint64_t chunk_bytes = g->item_bytes;
  for (uint32_t d = 0; d < g->dims; d++) chunk_bytes *= p->chunk_shape[d];
  if (chunk_bytes > 4096 * 8) sim_bail(w, SIM_EXIT_MODEL, "model bound: a chunk of %" PRIu64 " bytes", chunk_bytes);
  uint64_t blocks = chunk_bytes / block + (chunk_bytes % block != 0), words = blocks / 64 + (blocks % 64 != 0);
  memset(need, 0, sizeof need);
  memset(want, 0, sizeof want);
  uint64_t want_count = array_oracle_region_blocks(g, p, block, want);
  uint64_t got = cs_array_region_blocks(g, p, block, need, words);
  if (got != want_count || memcmp(need, want, sizeof need) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "array: chunk %" PRIu64 "'s region needs %" PRIu64 " of its %" PRIu64 " blocks of %"
             PRIu64 " bytes; the core named %" PRIu64 " (or other ones)", p->chunk_index, want_count, blocks, block, got);
  memset(need, 0, sizeof need);
  got = cs_array_region_blocks(g, p, block, need, words - 1);
  for (uint32_t i = 0; i < WORDS && got == 0; i++)
    if (need[i] != 0) got = UINT64_MAX;
  if (got != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "array: chunk %" PRIu64 " has %" PRIu64 " blocks of %" PRIu64 " bytes (%" PRIu64
             " words of map); the core took %" PRIu64 " words", p->chunk_index, blocks, block, words, words - 1);
}

/*
 * A reader reads a slice (drawn from a stream of its own) at this watermark,
 * as the runtime's read does: the core's pieces, each chunk's bytes (its
 * winning write's, or none) copied in by cs_array_piece_copy. Every element of
 * the slice must be its chunk's winner's byte for byte, or zeros where the
 * chunk is unwritten; each chunk the slice overlaps given once, in order, with
 * its own shape, and no other; nothing written past the slice; and the Blosc
 * blocks each piece needs named exactly (a random block size).
 */
static void slice_read(sim_world *w, const uint32_t winners[SIM_ARRAY_SLOTS_MAX]) {
  static uint8_t out[SIM_ARRAY_ELEMENTS_MAX * 8 + 1], chunk[27 * 8];
  const cs_array_geometry *g = &w->array_geom;
  cs_prng *r = &w->prng_array_reads;
  cs_array_slice s;
  memset(&s, 0, sizeof s);
  uint64_t elements = 1;
  for (uint32_t d = 0; d < g->dims; d++) {
    uint64_t a = cs_prng_below(r, g->shape[d] + 1), b = cs_prng_below(r, g->shape[d] + 1);
    s.start[d] = a < b ? a : b;
    s.stop[d] = a < b ? b : a;
    if (s.start[d] == s.stop[d] && cs_prng_below(r, 8) != 0) s.start[d] = 0, s.stop[d] = g->shape[d];
    elements *= s.stop[d] - s.start[d];
  }
  cs_array_slice_iter it;
  if (cs_array_slice_begin(&it, g, &s) != CS_E_OK)
    sim_bail(w, SIM_EXIT_SAFETY, "array: a slice inside the shape was refused");
  memset(out, 0xAA, sizeof out); /* even: never a written byte (odd) nor an unwritten one (0) */
  bool given[SIM_ARRAY_SLOTS_MAX] = {false}, touched[SIM_ARRAY_SLOTS_MAX] = {false};
  uint64_t last = 0, pieces = 0;
  cs_array_piece p;
  while (cs_array_slice_next(&it, &p)) {
    if (p.chunk_index >= w->array_slots || given[p.chunk_index] || (pieces > 0 && p.chunk_index <= last))
      sim_bail(w, SIM_EXIT_SAFETY, "array: a slice's pieces gave chunk %" PRIu64 " twice, out of order or past the "
               "grid", p.chunk_index);
    uint64_t origin[CS_ARRAY_DIMS_MAX] = {0}, shape[CS_ARRAY_DIMS_MAX] = {0};
    oracle_chunk_box(g, p.chunk_index, origin, shape);
    for (uint32_t d = 0; d < g->dims; d++) {
      /* The piece is the overlap of the slice and the chunk, placed where it lies in the slice. */
      uint64_t lo = s.start[d] > origin[d] ? s.start[d] - origin[d] : 0;
      uint64_t hi = s.stop[d] < origin[d] + shape[d] ? s.stop[d] - origin[d] : shape[d];
      if (p.chunk_shape[d] != shape[d] || p.lo[d] != lo || p.hi[d] != hi || p.at[d] != origin[d] + lo - s.start[d])
        sim_bail(w, SIM_EXIT_SAFETY, "array: chunk %" PRIu64 "'s piece has shape %" PRIu64 ", region [%" PRIu64
                 ", %" PRIu64 ") at %" PRIu64 " in dimension %u; the chunk is %" PRIu64 " long, the overlap [%" PRIu64
                 ", %" PRIu64 ") at %" PRIu64, p.chunk_index, p.chunk_shape[d], p.lo[d], p.hi[d], p.at[d], d, shape[d],
                 lo, hi, origin[d] + lo - s.start[d]);
      if (shape[d] < g->chunk[d]) sim_cov_mark(w, SIM_COV_SIT_ARRAY_SLICE_EDGE);
    }
    given[p.chunk_index] = true;
    last = p.chunk_index;
    pieces++;
    uint32_t win = winners[p.chunk_index];
    if (win != SIM_NONE) oracle_chunk_fill(g, p.chunk_index, w->array_writes[win].capture_id, chunk);
    cs_array_piece_copy(g, &s, &p, win != SIM_NONE ? chunk : NULL, out, true);
    uint64_t chunk_bytes = g->item_bytes;
    for (uint32_t d = 0; d < g->dims; d++) chunk_bytes *= p.chunk_shape[d];
    sim_check_region_blocks(w, g, &p, 1 + cs_prng_below(&w->prng_array_reads, chunk_bytes + 8));
  }
  if (elements > 0) {
    uint64_t at[CS_ARRAY_DIMS_MAX] = {0}, i = 0;
    memcpy(at, s.start, sizeof at);
    do {
      uint64_t c = oracle_chunk_of(g, at), lin = oracle_linear(g, at);
      touched[c] = true;
      uint32_t win = winners[c];
      for (uint32_t b = 0; b < g->item_bytes; b++) {
        uint8_t want = win == SIM_NONE ? 0 : oracle_byte(w->array_writes[win].capture_id, lin, b);
        if (out[i * g->item_bytes + b] != want)
          sim_bail(w, SIM_EXIT_SAFETY, "array: a slice read element %" PRIu64 " (chunk %" PRIu64 ", %s) wrong at byte %u",
                   lin, c, win == SIM_NONE ? "unwritten: zeros" : "written", b);
      }
      i++;
    } while (array_oracle_next(g->dims, s.start, s.stop, at));
  }
  for (uint64_t k = elements * g->item_bytes; k < sizeof out; k++)
    if (out[k] != 0xAA) sim_bail(w, SIM_EXIT_SAFETY, "array: a slice read wrote past its end (byte %" PRIu64 ")", k);
  for (uint32_t c = 0; c < w->array_slots; c++)
    if (given[c] != touched[c])
      sim_bail(w, SIM_EXIT_SAFETY, "array: a slice read %s chunk %u, which it %s", given[c] ? "was given" : "missed",
               c, given[c] ? "does not overlap" : "overlaps");
  w->counters.array_slices_read++;
  sim_cov_mark(w, SIM_COV_SIT_ARRAY_SLICE_READ);
}

/* ---- the checks ----------------------------------------------------------------------------- */

/* A reader refreshes at the current watermark: its answer held to every invariant. */
void sim_arrays_poll(sim_world *w) {
  if (!w->arrays) return;
  uint32_t winners[SIM_ARRAY_SLOTS_MAX];
  uint64_t watermark = w->watermark;
  winners_at(w, watermark, winners);
  /*
   * A pack set aside after it was visible (its owner saw other bytes under its key too often: a store that
   * lies) leaves every read, its chunks included: the slots it held are forgotten, not changed. The runtime's
   * refresh refuses such an answer as CS_E_CORRUPT (docs/arrays.md).
   */
  for (uint32_t s = 0; s < w->array_slots; s++) {
    uint32_t seen = w->array_winner[s];
    if (seen == SIM_NONE || !w->packs[w->array_writes[seen].pack].rejected) continue;
    w->array_winner[s] = SIM_NONE;
    w->array_complete = w->array_cache_valid = false;
    w->counters.array_set_aside++;
  }
  for (uint32_t s = 0; s < w->array_slots; s++) {
    uint32_t seen = w->array_winner[s], now = winners[s];
    if (seen != SIM_NONE && now != seen)
      sim_bail(w, SIM_EXIT_SAFETY, "array: slot %u's visible write changed from capture %" PRIx64 " to %s at watermark "
               "%" PRIu64 " (a visible slot never changes; its pack %u: min version %" PRIu64 ", rejected %d, poison %d/%d)",
               s, w->array_writes[seen].capture_id, now == SIM_NONE ? "none" : "another", watermark,
               w->array_writes[seen].pack, w->packs[w->array_writes[seen].pack].min_version,
               (int)w->packs[w->array_writes[seen].pack].rejected, (int)w->packs[w->array_writes[seen].pack].poison_large,
               (int)w->packs[w->array_writes[seen].pack].poison_invalid);
    if (now == SIM_NONE) continue;
    const sim_array_write *x = &w->array_writes[now];
    if (w->packs[x->pack].puts == 0)
      sim_bail(w, SIM_EXIT_SAFETY, "array: slot %u's winner lives in a pack never uploaded", s);
    w->array_winner[s] = now;
  }
  for (uint32_t i = 0; i < w->array_write_count; i++) {
    const sim_array_write *x = &w->array_writes[i];
    if (x->answer == SIM_ARRAY_ACCEPTED && winners[x->slot] != i && !w->packs[x->pack].rejected)
      sim_bail(w, SIM_EXIT_SAFETY, "array: p%u's write of slot %u (capture %" PRIx64 ") was accepted at watermark "
               "%" PRIu64 " but readers at %" PRIu64 " see %s", x->proc, x->slot, x->capture_id,
               x->accepted_watermark, watermark, winners[x->slot] == SIM_NONE ? "the slot unwritten" : "another write");
  }
  cs_array_stamp st = stamp_of(w, winners);
  if (w->array_complete && !cs_array_stamp_equal(&st, &w->array_complete_stamp))
    sim_bail(w, SIM_EXIT_SAFETY, "array: a complete array's stamp changed");
  if (st.state == CS_ARRAY_COMPLETE && !w->array_complete) {
    w->array_complete = true;
    w->array_complete_stamp = st;
    sim_cov_mark(w, SIM_COV_SIT_ARRAY_COMPLETE);
  }
  /* The reader's cache, judged against the refreshed stamp: all of it, its written slots, or nothing. */
  if (w->array_cache_valid) {
    bool equal = cs_array_stamp_equal(&w->array_cache_stamp, &st);
    bool same = cs_array_stamp_same_array(&w->array_cache_stamp, &st);
    for (uint32_t s = 0; s < w->array_slots; s++) {
      uint32_t c = w->array_cache[s];
      uint32_t served = equal || (same && c != SIM_NONE) ? c : winners[s];
      if (served != winners[s])
        sim_bail(w, SIM_EXIT_SAFETY, "array: the reader's cache served slot %u as %s; the stamp it was judged against "
                 "says %s", s, served == SIM_NONE ? "zeros" : "another write",
                 winners[s] == SIM_NONE ? "unwritten" : "written");
    }
  }
  slice_read(w, winners);
  memcpy(w->array_cache, winners, sizeof w->array_cache);
  w->array_cache_stamp = st;
  w->array_cache_valid = true;
  w->counters.array_polls++;
}

/* A flush of p answered drained: the writer asks which of its writes sealed before the call won their slots. */
void sim_arrays_flush_drained(sim_world *w, sim_proc *p, const sim_flush_rec *rec) {
  if (!w->arrays) return;
  uint32_t winners[SIM_ARRAY_SLOTS_MAX];
  winners_at(w, w->watermark, winners);
  for (uint32_t i = 0; i < w->array_write_count; i++) {
    sim_array_write *x = &w->array_writes[i];
    if (x->proc != p->index || x->answer != SIM_ARRAY_OWED || x->pack == SIM_NONE) continue;
    const sim_pack *sp = &w->packs[x->pack];
    if (sp->sealed_order == 0 || sp->sealed_order > rec->boundary_order) continue; /* not this flush's */
    if (winners[x->slot] == SIM_NONE) continue; /* set aside, or not visible: still owed */
    if (winners[x->slot] != i) {
      x->answer = SIM_ARRAY_REFUSED;
      w->counters.array_refused_flush++;
      sim_cov_mark(w, SIM_COV_SIT_ARRAY_REFUSED_AT_FLUSH);
      continue;
    }
    for (uint32_t j = 0; j < w->array_write_count; j++)
      if (j != i && w->array_writes[j].slot == x->slot && w->array_writes[j].answer == SIM_ARRAY_ACCEPTED)
        sim_bail(w, SIM_EXIT_SAFETY, "array: slot %u accepted for p%u's write and for p%u's", x->slot, p->index,
                 w->array_writes[j].proc);
    x->answer = SIM_ARRAY_ACCEPTED;
    x->accepted_watermark = w->watermark;
    w->counters.array_accepted++;
  }
  if (w->array_local_inc[p->index] == p->incarnation)
    for (uint32_t s = 0; s < w->array_slots; s++)
      if (winners[s] != SIM_NONE) w->array_local[p->index] |= UINT64_C(1) << s; /* seen won: refused at once */
  sim_arrays_poll(w);
}

/*
 * Reading the region of one capture-array chunk that a slice overlaps
 * (cs_array_read_piece, capstore/array_chunk.h): the trailer, the unit
 * table, the Blosc prefix, then only the units the region needs, each
 * verified before use.
 */
#include "capstore/array_chunk.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one read of a piece holds while it runs; freed by piece_free. */
typedef struct piece_read {
  cs_array_fetch_fn fetch;
  void *ctx;
  cs_array_read_stats *stats;
  char *msg;
  size_t msg_size;
  cs_array_chunk_tail tail;
  uint8_t *table;   /* tail.units x 8 */
  uint64_t *need;   /* bit k: unit k is needed */
  uint8_t *payload; /* the payload's bytes at their offsets (only fetched units are meaningful) */
  uint8_t *scratch; /* the decoded chunk (only needed parts are meaningful) */
  cs_blosc_info blosc;
  uint64_t *blocks; /* Blosc: bit b, block b is needed */
} piece_read;

static int fail(piece_read *r, int code, const char *what) {
  if (r->msg != NULL && r->msg_size > 0) snprintf(r->msg, r->msg_size, "array chunk: %s", what);
  return code;
}

static int fetch(piece_read *r, uint64_t offset, uint64_t length, uint8_t *out) {
  r->stats->fetches++;
  r->stats->bytes_fetched += length;
  return r->fetch(r->ctx, offset, length, out, r->msg, r->msg_size);
}

static void piece_free(piece_read *r) {
  free(r->table);
  free(r->need);
  free(r->payload);
  free(r->scratch);
  free(r->blocks);
}

/*
 * A chunk's last bytes are fetched in one read of at most this many: the
 * trailer and, for any chunk of up to 500 units (a 31 MiB raw chunk, or a
 * Blosc chunk of 499 blocks), its whole unit table. A larger table takes a
 * second read.
 */
#define TAIL_READ_BYTES 4096u

/* The trailer and the unit table, checked; nothing is allocated for a payload this chunk cannot have. */
static int read_tail(piece_read *r, const cs_array_meta *meta, uint64_t chunk_bytes, uint64_t stored_len) {
  if (stored_len < CS_ARRAY_CHUNK_TRAILER_BYTES) return fail(r, CS_E_CORRUPT, "shorter than its trailer");
  uint8_t end[TAIL_READ_BYTES];
  uint64_t got = stored_len < TAIL_READ_BYTES ? stored_len : TAIL_READ_BYTES;
  int rc = fetch(r, stored_len - got, got, end);
  if (rc != CS_E_OK) return rc;
  rc = cs_array_chunk_tail_parse(end + got - CS_ARRAY_CHUNK_TRAILER_BYTES, stored_len, &r->tail, r->msg, r->msg_size);
  if (rc != CS_E_OK) return rc;
  if (meta->codec == CS_ARRAY_CODEC_NONE && r->tail.payload_bytes != chunk_bytes)
    return fail(r, CS_E_CORRUPT, "a raw payload that is not the chunk's size");
  /* Blosc never makes a buffer longer than the data and its 16-byte header (BLOSC_MAX_OVERHEAD). */
  if (meta->codec == CS_ARRAY_CODEC_BLOSC && r->tail.payload_bytes > chunk_bytes + CS_BLOSC_HEADER_BYTES)
    return fail(r, CS_E_CORRUPT, "a Blosc payload longer than the chunk can compress to");
  r->table = malloc(8u * (size_t)r->tail.units + 1);
  r->need = calloc(r->tail.units / 64 + 1, sizeof *r->need);
  r->payload = malloc((size_t)r->tail.payload_bytes + 1);
  if (r->table == NULL || r->need == NULL || r->payload == NULL) return CS_E_NO_MEMORY;
  uint64_t table_bytes = 8u * (uint64_t)r->tail.units;
  if (r->tail.table_offset >= stored_len - got) /* the table came with the trailer */
    memcpy(r->table, end + (r->tail.table_offset - (stored_len - got)), (size_t)table_bytes);
  else if ((rc = fetch(r, r->tail.table_offset, table_bytes, r->table)) != CS_E_OK)
    return rc;
  return cs_array_chunk_table_check(&r->tail, r->table, r->msg, r->msg_size);
}

/*
 * Fetches every needed unit not yet fetched, contiguous runs in one fetch, and verifies each. A run whose fetch
 * answers CS_E_WOULD_BLOCK is passed over, the others still asked for; then CS_E_WOULD_BLOCK.
 */
static int fetch_needed(piece_read *r, uint64_t *have) {
  uint32_t n = r->tail.units;
  bool blocked = false;
  for (uint32_t k = 0; k < n;) {
    bool want = (r->need[k / 64] >> (k % 64) & 1) && !(have[k / 64] >> (k % 64) & 1);
    if (!want) {
      k++;
      continue;
    }
    uint32_t last = k;
    while (last + 1 < n && (r->need[(last + 1) / 64] >> ((last + 1) % 64) & 1) &&
           !(have[(last + 1) / 64] >> ((last + 1) % 64) & 1))
      last++;
    uint64_t first_off, last_off, last_len;
    cs_array_chunk_unit(r->table, k, &first_off, NULL, NULL);
    cs_array_chunk_unit(r->table, last, &last_off, &last_len, NULL);
    int rc = fetch(r, first_off, last_off + last_len - first_off, r->payload + first_off);
    if (rc == CS_E_WOULD_BLOCK) {
      blocked = true;
      k = last + 1;
      continue;
    }
    if (rc != CS_E_OK) return rc;
    for (uint32_t u = k; u <= last; u++) {
      uint64_t off, len;
      cs_array_chunk_unit(r->table, u, &off, &len, NULL);
      rc = cs_array_chunk_unit_verify(r->table, u, r->payload + off, len, r->msg, r->msg_size);
      if (rc != CS_E_OK) return rc;
      r->stats->units_verified++;
      have[u / 64] |= UINT64_C(1) << (u % 64);
    }
    k = last + 1;
  }
  return blocked ? CS_E_WOULD_BLOCK : CS_E_OK;
}

static void need_unit(piece_read *r, uint32_t k) {
  assert(k < r->tail.units);
  r->need[k / 64] |= UINT64_C(1) << (k % 64);
}

/* Raw elements: the units holding the region's byte runs; then the runs are in place in the payload. */
static int read_raw(piece_read *r, const cs_array_meta *meta, const cs_array_piece *p, uint64_t chunk_bytes,
                    uint64_t *have) {
  assert(r->tail.payload_bytes == chunk_bytes); /* read_tail */
  const cs_array_geometry *g = &meta->geometry;
  uint32_t dims = g->dims, last = dims - 1;
  uint64_t stride[CS_ARRAY_DIMS_MAX], idx[CS_ARRAY_DIMS_MAX];
  for (uint32_t d = 0; d < dims; d++) {
    stride[d] = g->item_bytes;
    for (uint32_t k = d + 1; k < dims; k++) stride[d] *= p->chunk_shape[k];
    idx[d] = p->lo[d];
  }
  uint64_t run = (p->hi[last] - p->lo[last]) * g->item_bytes;
  for (;;) {
    uint64_t at = 0;
    for (uint32_t d = 0; d < dims; d++) at += idx[d] * stride[d];
    uint32_t a = cs_array_chunk_unit_of(&r->tail, r->table, at), b = cs_array_chunk_unit_of(&r->tail, r->table, at + run - 1);
    for (uint32_t k = a; k <= b; k++) need_unit(r, k);
    uint32_t d = last;
    while (d-- > 0) {
      if (++idx[d] < p->hi[d]) break;
      idx[d] = p->lo[d];
    }
    if (d == UINT32_MAX) break;
  }
  int rc = fetch_needed(r, have);
  r->scratch = NULL; /* the payload is the chunk's elements: read in place */
  return rc;
}

/* Blosc: the prefix unit, then each needed block's unit, each block decoded alone into scratch. */
static int read_blosc(piece_read *r, const cs_array_meta *meta, const cs_array_piece *p, uint64_t chunk_bytes,
                      uint64_t *have) {
  need_unit(r, 0);
  int rc = fetch_needed(r, have);
  if (rc != CS_E_OK) return rc;
  uint64_t off0, len0;
  cs_array_chunk_unit(r->table, 0, &off0, &len0, NULL);
  if (len0 < CS_BLOSC_HEADER_BYTES) return fail(r, CS_E_CORRUPT, "a first unit shorter than the Blosc header");
  rc = cs_blosc_info_parse(r->payload, len0, &r->blosc, r->msg, r->msg_size);
  if (rc != CS_E_OK) return CS_E_CORRUPT;
  if (r->blosc.cbytes != r->tail.payload_bytes || r->blosc.nbytes != chunk_bytes || r->blosc.prefix_bytes > len0 ||
      r->blosc.blocks + 1 != r->tail.units)
    return fail(r, CS_E_CORRUPT, "a Blosc payload that does not match the chunk or its unit table");
  /* Blocks of whole items, each decodable alone: what capstore writes (the item size is the dtype's). */
  if (r->blosc.type_bytes != meta->geometry.item_bytes)
    return fail(r, CS_E_CORRUPT, "a Blosc type size other than the dtype's item size");
  r->blocks = calloc(r->blosc.blocks / 64 + 1, sizeof *r->blocks);
  r->scratch = malloc(chunk_bytes + 1);
  if (r->blocks == NULL || r->scratch == NULL) return CS_E_NO_MEMORY;
  if (cs_array_region_blocks(&meta->geometry, p, r->blosc.block_bytes, r->blocks, r->blosc.blocks / 64 + 1) == 0)
    return fail(r, CS_E_CORRUPT, "a region outside the Blosc blocks");
  for (uint32_t b = 0; b < r->blosc.blocks; b++) {
    if (!(r->blocks[b / 64] >> (b % 64) & 1)) continue;
    uint64_t offset, length, uoff, ulen;
    rc = cs_blosc_block_extent(&r->blosc, r->payload, b, &offset, &length, r->msg, r->msg_size);
    if (rc != CS_E_OK) return rc;
    uint32_t k = cs_array_chunk_unit_of(&r->tail, r->table, offset);
    cs_array_chunk_unit(r->table, k, &uoff, &ulen, NULL);
    if (uoff != offset || ulen != length) return fail(r, CS_E_CORRUPT, "a Blosc block that is not one unit");
    need_unit(r, k);
  }
  rc = fetch_needed(r, have);
  for (uint32_t b = 0; rc == CS_E_OK && b < r->blosc.blocks; b++) {
    if (!(r->blocks[b / 64] >> (b % 64) & 1)) continue;
    uint64_t offset, length, at = (uint64_t)b * r->blosc.block_bytes;
    size_t got = 0;
    (void)cs_blosc_block_extent(&r->blosc, r->payload, b, &offset, &length, NULL, 0);
    rc = cs_blosc_decode_block(&r->blosc, r->payload, b, r->payload + offset, length, r->scratch + at,
                               chunk_bytes - at, &got, r->msg, r->msg_size);
    r->stats->blocks_decoded += rc == CS_E_OK;
  }
  return rc;
}

int cs_array_read_piece(const cs_array_meta *meta, const cs_array_slice *slice, const cs_array_piece *piece,
                        uint64_t stored_len, cs_array_fetch_fn fetch_fn, void *ctx, uint8_t *slice_bytes,
                        cs_array_read_stats *stats, char *msg, size_t msg_size) {
  if (meta == NULL || slice == NULL || piece == NULL || fetch_fn == NULL || slice_bytes == NULL)
    return CS_E_INVALID_ARGUMENT;
  cs_array_read_stats ignored = {0};
  piece_read r = {.fetch = fetch_fn, .ctx = ctx, .stats = stats != NULL ? stats : &ignored, .msg = msg,
                  .msg_size = msg_size};
  uint64_t chunk_bytes = cs_array_chunk_bytes(&meta->geometry, piece->chunk_index);
  if (chunk_bytes == 0) return CS_E_INVALID_ARGUMENT;
  int rc = read_tail(&r, meta, chunk_bytes, stored_len);
  uint64_t *have = rc == CS_E_OK ? calloc(r.tail.units / 64 + 1, sizeof *have) : NULL;
  if (rc == CS_E_OK && have == NULL) rc = CS_E_NO_MEMORY;
  if (rc == CS_E_OK && r.tail.units == 0) rc = fail(&r, CS_E_CORRUPT, "an empty payload");
  if (rc == CS_E_OK && meta->codec == CS_ARRAY_CODEC_BLOSC) rc = read_blosc(&r, meta, piece, chunk_bytes, have);
  else if (rc == CS_E_OK) rc = read_raw(&r, meta, piece, chunk_bytes, have);
  if (rc == CS_E_OK)
    cs_array_piece_copy(&meta->geometry, slice, piece, r.scratch != NULL ? r.scratch : r.payload, slice_bytes, true);
  free(have);
  piece_free(&r);
  return rc;
}

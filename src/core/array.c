/*
 * The capture-array geometry core (capstore/array.h). Pure.
 */
#include "capstore/array.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#ifndef CAPSTORE_MUTANT
#define CAPSTORE_MUTANT 0
#endif

/* Writes "<head><dim><tail>" (or head alone when tail is NULL) to msg; CS_E_INVALID_ARGUMENT. */
static int refuse(char *msg, size_t msg_size, const char *head, uint32_t dim, const char *tail) {
  assert(head != NULL);
  if (msg != NULL && msg_size > 0) {
    if (tail == NULL) snprintf(msg, msg_size, "%s", head);
    else snprintf(msg, msg_size, "%s%u%s", head, (unsigned)dim, tail);
  }
  return CS_E_INVALID_ARGUMENT;
}

/* a * b, false when it exceeds limit (or overflows). */
static bool mul_within(uint64_t a, uint64_t b, uint64_t limit, uint64_t *out) {
  if (a != 0 && b > limit / a) return false;
  *out = a * b;
  return *out <= limit;
}

int cs_array_geometry_check(const cs_array_geometry *g, char *msg, size_t msg_size) {
  if (g == NULL) return refuse(msg, msg_size, "no geometry", 0, NULL);
  if (g->dims < 1 || g->dims > CS_ARRAY_DIMS_MAX) return refuse(msg, msg_size, "dims must be 1 to 8", 0, NULL);
  uint32_t b = g->item_bytes;
  if (b != 1 && b != 2 && b != 4 && b != 8) return refuse(msg, msg_size, "item_bytes must be 1, 2, 4 or 8", 0, NULL);
  uint64_t chunks = 1, chunk_elements = 1, elements = 1;
  for (uint32_t d = 0; d < g->dims; d++) {
    if (g->shape[d] == 0) return refuse(msg, msg_size, "shape[", d, "] is 0: every extent must be at least 1");
    if (g->chunk[d] == 0 || g->chunk[d] > g->shape[d])
      return refuse(msg, msg_size, "chunk[", d, "] must be 1 to the shape's extent");
    uint64_t grid = g->shape[d] / g->chunk[d] + (g->shape[d] % g->chunk[d] != 0);
    if (!mul_within(chunks, grid, CS_ARRAY_CHUNKS_MAX, &chunks))
      return refuse(msg, msg_size, "more than 2^24 chunks (at dimension ", d, "): make the chunks larger");
    if (!mul_within(chunk_elements, g->chunk[d], CS_ARRAY_CHUNK_BYTES_MAX / b, &chunk_elements))
      return refuse(msg, msg_size, "a chunk over 1 GiB (at dimension ", d, "): make the chunks smaller");
    elements *= g->shape[d]; /* <= chunks * chunk elements <= 2^24 * 2^30: no overflow */
  }
  assert(chunks >= 1 && chunks <= CS_ARRAY_CHUNKS_MAX);
  assert(chunk_elements * b <= CS_ARRAY_CHUNK_BYTES_MAX);
  assert(elements <= chunks * chunk_elements);
  return CS_E_OK;
}

void cs_array_grid(const cs_array_geometry *g, uint64_t grid[CS_ARRAY_DIMS_MAX]) {
  assert(g->dims >= 1 && g->dims <= CS_ARRAY_DIMS_MAX);
  for (uint32_t d = 0; d < g->dims; d++) {
    assert(g->chunk[d] >= 1);
    grid[d] = g->shape[d] / g->chunk[d] + (g->shape[d] % g->chunk[d] != 0);
  }
}

uint64_t cs_array_chunk_count(const cs_array_geometry *g) {
  uint64_t grid[CS_ARRAY_DIMS_MAX], n = 1;
  cs_array_grid(g, grid);
  for (uint32_t d = 0; d < g->dims; d++) n *= grid[d];
  assert(n >= 1 && n <= CS_ARRAY_CHUNKS_MAX);
  return n;
}

uint64_t cs_array_total_bytes(const cs_array_geometry *g) {
  assert(g->dims >= 1 && g->dims <= CS_ARRAY_DIMS_MAX);
  uint64_t n = g->item_bytes;
  for (uint32_t d = 0; d < g->dims; d++) n *= g->shape[d];
  assert(n >= g->item_bytes);
  return n;
}

int cs_array_chunk_at(const cs_array_geometry *g, uint64_t index, uint64_t coords[CS_ARRAY_DIMS_MAX],
                      uint64_t origin[CS_ARRAY_DIMS_MAX], uint64_t shape[CS_ARRAY_DIMS_MAX]) {
  if (index >= cs_array_chunk_count(g)) return CS_E_INVALID_ARGUMENT;
  uint64_t grid[CS_ARRAY_DIMS_MAX];
  cs_array_grid(g, grid);
  uint64_t rest = index;
  for (uint32_t k = g->dims; k-- > 0;) {
    uint64_t c = rest % grid[k];
    rest /= grid[k];
    uint64_t o = c * g->chunk[k];
    uint64_t extent = g->shape[k] - o < g->chunk[k] ? g->shape[k] - o : g->chunk[k];
    assert(o < g->shape[k] && extent >= 1);
    if (coords != NULL) coords[k] = c;
    if (origin != NULL) origin[k] = o;
    if (shape != NULL) shape[k] = extent;
  }
  assert(rest == 0);
  return CS_E_OK;
}

uint64_t cs_array_chunk_bytes(const cs_array_geometry *g, uint64_t index) {
  uint64_t shape[CS_ARRAY_DIMS_MAX];
  if (cs_array_chunk_at(g, index, NULL, NULL, shape) != CS_E_OK) return 0;
  uint64_t n = g->item_bytes;
  for (uint32_t d = 0; d < g->dims; d++) n *= shape[d];
  assert(n >= g->item_bytes && n <= CS_ARRAY_CHUNK_BYTES_MAX);
  return n;
}

int cs_array_slice_check(const cs_array_geometry *g, const cs_array_slice *s, char *msg, size_t msg_size) {
  if (g == NULL || s == NULL) return refuse(msg, msg_size, "no geometry or slice", 0, NULL);
  assert(g->dims >= 1 && g->dims <= CS_ARRAY_DIMS_MAX);
  for (uint32_t d = 0; d < g->dims; d++) {
    if (s->start[d] > s->stop[d]) return refuse(msg, msg_size, "slice start[", d, "] is after its stop");
    if (s->stop[d] > g->shape[d]) return refuse(msg, msg_size, "slice stop[", d, "] is past the shape");
  }
  return CS_E_OK;
}

uint64_t cs_array_slice_elements(const cs_array_geometry *g, const cs_array_slice *s) {
  uint64_t n = 1;
  for (uint32_t d = 0; d < g->dims; d++) {
    assert(s->start[d] <= s->stop[d] && s->stop[d] <= g->shape[d]);
    n *= s->stop[d] - s->start[d];
  }
  assert(n <= (UINT64_C(1) << 54));
  return n;
}

int cs_array_slice_begin(cs_array_slice_iter *it, const cs_array_geometry *g, const cs_array_slice *s) {
  if (it == NULL || cs_array_geometry_check(g, NULL, 0) != CS_E_OK || cs_array_slice_check(g, s, NULL, 0) != CS_E_OK)
    return CS_E_INVALID_ARGUMENT;
  memset(it, 0, sizeof *it);
  it->geometry = *g;
  it->slice = *s;
  it->done = cs_array_slice_elements(g, s) == 0;
  for (uint32_t d = 0; d < g->dims && !it->done; d++) {
    it->first[d] = s->start[d] / g->chunk[d];
    it->last[d] = (s->stop[d] - 1) / g->chunk[d];
    it->next[d] = it->first[d];
    assert(it->first[d] <= it->last[d]);
  }
  return CS_E_OK;
}

/* The piece of the chunk at grid coordinates c. */
static void piece_fill(const cs_array_slice_iter *it, const uint64_t c[CS_ARRAY_DIMS_MAX], cs_array_piece *out) {
  const cs_array_geometry *g = &it->geometry;
  const cs_array_slice *s = &it->slice;
  uint64_t grid[CS_ARRAY_DIMS_MAX], index = 0;
  cs_array_grid(g, grid);
  memset(out, 0, sizeof *out);
  for (uint32_t d = 0; d < g->dims; d++) {
    uint64_t o = c[d] * g->chunk[d];
    uint64_t end = o + g->chunk[d] < g->shape[d] ? o + g->chunk[d] : g->shape[d];
    uint64_t lo = s->start[d] > o ? s->start[d] : o;
    uint64_t hi = s->stop[d] < end ? s->stop[d] : end;
    assert(lo < hi);
    out->chunk_shape[d] = end - o;
    out->lo[d] = lo - o;
    out->hi[d] = hi - o;
    out->at[d] = lo - s->start[d];
    index = index * grid[d] + c[d];
  }
  out->chunk_index = index;
  assert(index < cs_array_chunk_count(g));
}

bool cs_array_slice_next(cs_array_slice_iter *it, cs_array_piece *out) {
  assert(it != NULL && out != NULL);
  if (it->done) return false;
  piece_fill(it, it->next, out);
  /* Advance like an odometer over [first, last], the last dimension fastest. */
  uint32_t d = it->geometry.dims;
  while (d-- > 0) {
    if (it->next[d] < it->last[d]) {
      it->next[d]++;
      return true;
    }
    it->next[d] = it->first[d];
  }
  it->done = true;
  return true;
}

/* Elements from dimension d on, in a dense C-order array of this shape. */
static uint64_t stride_of(const uint64_t shape[CS_ARRAY_DIMS_MAX], uint32_t dims, uint32_t d) {
  uint64_t n = 1;
  for (uint32_t k = d + 1; k < dims; k++) n *= shape[k];
  return n;
}

void cs_array_piece_copy(const cs_array_geometry *g, const cs_array_slice *s, const cs_array_piece *p,
                         uint8_t *chunk, uint8_t *slice_bytes, bool to_slice) {
  assert(slice_bytes != NULL && (chunk != NULL || to_slice));
  uint32_t dims = g->dims, last = dims - 1;
  uint64_t sshape[CS_ARRAY_DIMS_MAX], cstride[CS_ARRAY_DIMS_MAX], sstride[CS_ARRAY_DIMS_MAX];
  for (uint32_t d = 0; d < dims; d++) sshape[d] = s->stop[d] - s->start[d];
  for (uint32_t d = 0; d < dims; d++) {
    cstride[d] = stride_of(p->chunk_shape, dims, d) * g->item_bytes;
    sstride[d] = stride_of(sshape, dims, d) * g->item_bytes;
  }
  uint64_t run = (p->hi[last] - p->lo[last]) * g->item_bytes;
  uint64_t idx[CS_ARRAY_DIMS_MAX]; /* the current run's coordinates in the chunk (dimensions before the last) */
  for (uint32_t d = 0; d < dims; d++) idx[d] = p->lo[d];
  for (;;) {
    uint64_t co = 0, so = 0;
    for (uint32_t d = 0; d < dims; d++) {
      co += idx[d] * cstride[d];
      so += (idx[d] - p->lo[d] + p->at[d]) * sstride[d];
    }
    if (!to_slice) memcpy(chunk + co, slice_bytes + so, run);
    else if (chunk == NULL) memset(slice_bytes + so, 0, run);
    else memcpy(slice_bytes + so, chunk + co, run);
    uint32_t d = last;
    while (d-- > 0) {
      if (++idx[d] < p->hi[d]) break;
      idx[d] = p->lo[d];
    }
    if (d == UINT32_MAX) return; /* every dimension before the last wrapped */
  }
}

uint64_t cs_array_region_blocks(const cs_array_geometry *g, const cs_array_piece *p, uint64_t block_bytes,
                                uint64_t *need, uint64_t need_words) {
  assert(block_bytes > 0 && need != NULL);
  uint32_t dims = g->dims, last = dims - 1;
  uint64_t chunk_bytes = g->item_bytes;
  for (uint32_t d = 0; d < dims; d++) chunk_bytes *= p->chunk_shape[d];
  uint64_t blocks = chunk_bytes / block_bytes + (chunk_bytes % block_bytes != 0);
  if (need_words < blocks / 64 + (blocks % 64 != 0)) return 0;
  uint64_t stride[CS_ARRAY_DIMS_MAX], idx[CS_ARRAY_DIMS_MAX], count = 0;
  for (uint32_t d = 0; d < dims; d++) {
    stride[d] = stride_of(p->chunk_shape, dims, d) * g->item_bytes;
    idx[d] = p->lo[d];
  }
  uint64_t run = (p->hi[last] - p->lo[last]) * g->item_bytes;
  for (;;) {
    uint64_t at = 0;
    for (uint32_t d = 0; d < dims; d++) at += idx[d] * stride[d];
    assert(at + run <= chunk_bytes);
    for (uint64_t b = at / block_bytes; b <= (at + run - 1) / block_bytes; b++) {
      uint64_t bit = UINT64_C(1) << (b % 64);
      if ((need[b / 64] & bit) == 0) count++;
      need[b / 64] |= bit;
    }
    uint32_t d = last;
    while (d-- > 0) {
      if (++idx[d] < p->hi[d]) break;
      idx[d] = p->lo[d];
    }
    if (d == UINT32_MAX) break;
  }
  assert(count >= 1 && count <= blocks);
  return count;
}

int cs_array_stamp_make(const cs_array_geometry *g, uint64_t nonce, uint64_t written, uint64_t changed_at_ns,
                        cs_array_stamp *out) {
  assert(g != NULL && out != NULL);
  uint64_t chunks = cs_array_chunk_count(g);
  if (written > chunks || (written == 0) != (nonce == 0)) return CS_E_CORRUPT;
  cs_array_stamp st = {.nonce = nonce, .total_bytes = cs_array_total_bytes(g)};
  if (written == 0) {
    st.state = CS_ARRAY_EMPTY;
  } else if (written < chunks) {
    st.state = CS_ARRAY_FILLING;
    st.written = written;
    st.changed_at_ns = changed_at_ns;
  } else {
    st.state = CS_ARRAY_COMPLETE; /* identity and size alone: it never changes again */
  }
  assert(st.total_bytes >= g->item_bytes);
  *out = st;
  return CS_E_OK;
}

bool cs_array_stamp_equal(const cs_array_stamp *a, const cs_array_stamp *b) {
  assert(a != NULL && b != NULL);
  return a->nonce == b->nonce && a->total_bytes == b->total_bytes && a->state == b->state &&
         a->written == b->written && a->changed_at_ns == b->changed_at_ns;
}

bool cs_array_stamp_same_array(const cs_array_stamp *a, const cs_array_stamp *b) {
  assert(a != NULL && b != NULL);
  return a->nonce == b->nonce && a->total_bytes == b->total_bytes;
}

cs_array_verdict cs_array_arbiter_next(cs_array_arbiter *a, bool geometry, uint64_t slot, uint64_t version) {
  if (geometry) {
    if (a->any_chunk) return CS_ARRAY_OUT_OF_ORDER; /* the geometry's candidates come first */
    bool first = !a->any_geometry;
    a->any_geometry = true;
    return first ? CS_ARRAY_WINS : CS_ARRAY_LOSES;
  }
  if (a->any_chunk && (slot < a->slot || (slot == a->slot && version < a->version))) return CS_ARRAY_OUT_OF_ORDER;
#if CAPSTORE_MUTANT == 60 /* mutant 60: a slot's last candidate wins, not its first */
  bool first = true;
#else
  bool first = !a->any_chunk || slot != a->slot;
#endif
  a->any_chunk = true;
  a->slot = slot;
  a->version = version;
  return first ? CS_ARRAY_WINS : CS_ARRAY_LOSES;
}

/* ---- slot claims ------------------------------------------------------------------------------------------ */

static bool lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

int cs_array_claim_format(const char *nonce, uint64_t at_ns, char out[CS_ARRAY_CLAIM_BYTES_MAX], size_t *len) {
  assert(nonce != NULL && out != NULL && len != NULL);
  for (uint32_t i = 0; i < CS_ARRAY_CLAIM_NONCE_HEX; i++)
    if (!lower_hex(nonce[i])) return CS_E_INVALID_ARGUMENT;
  memcpy(out, nonce, CS_ARRAY_CLAIM_NONCE_HEX);
  out[CS_ARRAY_CLAIM_NONCE_HEX] = ' ';
  char digits[20];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + at_ns % 10);
    at_ns /= 10;
  } while (at_ns != 0);
  for (size_t i = 0; i < n; i++) out[CS_ARRAY_CLAIM_NONCE_HEX + 1 + i] = digits[n - 1 - i];
  *len = CS_ARRAY_CLAIM_NONCE_HEX + 1 + n;
  return CS_E_OK;
}

int cs_array_claim_parse(const void *body, size_t len, uint64_t *at_ns) {
  assert(at_ns != NULL);
  const char *b = body;
  if (b == NULL || len < CS_ARRAY_CLAIM_NONCE_HEX + 2 || len > CS_ARRAY_CLAIM_BYTES_MAX) return CS_E_PARSE;
  for (uint32_t i = 0; i < CS_ARRAY_CLAIM_NONCE_HEX; i++)
    if (!lower_hex(b[i])) return CS_E_PARSE;
  if (b[CS_ARRAY_CLAIM_NONCE_HEX] != ' ') return CS_E_PARSE;
  /* one spelling of each time: no leading zero */
  return cs_decimal_u64(b + CS_ARRAY_CLAIM_NONCE_HEX + 1, len - CS_ARRAY_CLAIM_NONCE_HEX - 1, true, at_ns);
}

bool cs_array_claim_stale(uint64_t at_ns, uint64_t now_ns, uint64_t ttl_ns) {
  return now_ns >= at_ns && now_ns - at_ns >= ttl_ns;
}

/*
 * capstore/array.h: the capture-array geometry core (DESIGN.md section 7,
 * docs/arrays.md). An array has a fixed geometry, written once at creation:
 * a shape, an element size and a chunk shape. The chunk grid covers the
 * shape in C (row-major) order; a chunk at the high edge of a dimension is
 * cut to the shape (its bytes are exactly its elements, no padding), so a
 * writer hands over exactly the elements of the chunk and nothing else.
 *
 * This core answers the questions every array path asks, the same way for
 * the runtime and the simulator:
 *   - is a geometry valid, how many chunks, what shape and size is chunk n;
 *   - which chunks a slice [start, stop) overlaps, and for each the region
 *     to copy (cs_array_slice_next: an iterator, no allocation);
 *   - for a chunk stored as Blosc blocks of block_bytes, which blocks a
 *     region needs (cs_array_region_blocks), so a reader fetches those
 *     blocks and nothing else;
 *   - the copy of a region between a chunk and the slice's dense buffer;
 *   - the stamp: which array this is (a nonce) and whether it changed.
 *
 * Pure: no I/O, no clock, no allocation. Every bound is checked with its
 * overflow; a geometry that passes cs_array_geometry_check can be walked
 * without overflow by every function here.
 */
#ifndef CAPSTORE_ARRAY_H
#define CAPSTORE_ARRAY_H

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_ARRAY_DIMS_MAX 8u
/* At most this many chunks per array: the progress bitmap (one bit a chunk) stays at 2 MiB. */
#define CS_ARRAY_CHUNKS_MAX (UINT64_C(1) << 24)
/* At most this many bytes per chunk (a chunk is one object and one write). */
#define CS_ARRAY_CHUNK_BYTES_MAX (UINT64_C(1) << 30)

typedef struct cs_array_geometry {
  uint32_t dims;                         /* 1 .. CS_ARRAY_DIMS_MAX */
  uint32_t item_bytes;                   /* 1, 2, 4 or 8 (the dtype's element size) */
  uint64_t shape[CS_ARRAY_DIMS_MAX];     /* each >= 1 */
  uint64_t chunk[CS_ARRAY_DIMS_MAX];     /* each 1 .. shape[d] */
} cs_array_geometry;

/*
 * CS_E_OK when g is a valid geometry; CS_E_INVALID_ARGUMENT (with what and
 * the dimension named in msg, when msg is not NULL) otherwise: dims out of
 * range, item_bytes not 1/2/4/8, a zero extent, a chunk extent of 0 or larger
 * than the shape, more than CS_ARRAY_CHUNKS_MAX chunks or a chunk over
 * CS_ARRAY_CHUNK_BYTES_MAX bytes. Together the two bounds keep the array
 * under 2^54 bytes, so no size or offset here can overflow.
 */
int cs_array_geometry_check(const cs_array_geometry *g, char *msg, size_t msg_size);

/* The chunk grid: grid[d] = ceil(shape[d] / chunk[d]), for d < dims. g valid. */
void cs_array_grid(const cs_array_geometry *g, uint64_t grid[CS_ARRAY_DIMS_MAX]);
/* The number of chunks (the grid's product). g valid. */
uint64_t cs_array_chunk_count(const cs_array_geometry *g);
/* The array's size in bytes (every element once). g valid. */
uint64_t cs_array_total_bytes(const cs_array_geometry *g);

/*
 * Chunk `index` (C order over the grid): its grid coordinates, its first
 * element's coordinates in the array, and its shape (cut at the edges).
 * CS_E_INVALID_ARGUMENT when index >= the chunk count. Any out pointer may be
 * NULL.
 */
int cs_array_chunk_at(const cs_array_geometry *g, uint64_t index, uint64_t coords[CS_ARRAY_DIMS_MAX],
                      uint64_t origin[CS_ARRAY_DIMS_MAX], uint64_t shape[CS_ARRAY_DIMS_MAX]);
/* The byte size a write of chunk `index` must have; 0 when index is out of range. */
uint64_t cs_array_chunk_bytes(const cs_array_geometry *g, uint64_t index);

/* A slice: start[d] <= stop[d] <= shape[d], step 1. An empty slice (some start == stop) overlaps no chunk. */
typedef struct cs_array_slice {
  uint64_t start[CS_ARRAY_DIMS_MAX];
  uint64_t stop[CS_ARRAY_DIMS_MAX];
} cs_array_slice;

/* CS_E_OK when s fits g (start <= stop <= shape in every dimension); CS_E_INVALID_ARGUMENT naming the dimension. */
int cs_array_slice_check(const cs_array_geometry *g, const cs_array_slice *s, char *msg, size_t msg_size);
/* The slice's element count (0 for an empty slice). g and s valid. */
uint64_t cs_array_slice_elements(const cs_array_geometry *g, const cs_array_slice *s);

/* One chunk a slice overlaps: the region [lo, hi) in the chunk's own coordinates, which is the
   region [lo + origin - start, hi + origin - start) of the slice's dense buffer. Per-dimension
   entries past the geometry's dims are 0. */
typedef struct cs_array_piece {
  uint64_t chunk_index;
  uint64_t chunk_shape[CS_ARRAY_DIMS_MAX];
  uint64_t lo[CS_ARRAY_DIMS_MAX];     /* in the chunk */
  uint64_t hi[CS_ARRAY_DIMS_MAX];
  uint64_t at[CS_ARRAY_DIMS_MAX];     /* where lo lands in the slice's buffer */
} cs_array_piece;

/* The iterator over the chunks a slice overlaps, in chunk-index order. */
typedef struct cs_array_slice_iter {
  cs_array_geometry geometry;
  cs_array_slice slice;
  uint64_t first[CS_ARRAY_DIMS_MAX]; /* grid coordinates of the first and last chunk overlapped */
  uint64_t last[CS_ARRAY_DIMS_MAX];
  uint64_t next[CS_ARRAY_DIMS_MAX];  /* the next chunk's grid coordinates */
  bool done;
} cs_array_slice_iter;

/* Starts an iteration; g and s must be valid (checked: CS_E_INVALID_ARGUMENT). */
int cs_array_slice_begin(cs_array_slice_iter *it, const cs_array_geometry *g, const cs_array_slice *s);
/* The next piece: true with *out filled, false when every overlapped chunk was given. */
bool cs_array_slice_next(cs_array_slice_iter *it, cs_array_piece *out);

/*
 * Copies a piece between a chunk's dense C-order bytes (chunk_bytes, of the
 * piece's chunk_shape) and the slice's dense C-order buffer (slice_bytes, of
 * the slice's shape): to_slice true copies chunk -> slice (a read), false
 * slice -> chunk. Copies whole innermost runs with memcpy. chunk may be NULL
 * with to_slice: the region is zero-filled (an unwritten chunk reads as zeros).
 */
void cs_array_piece_copy(const cs_array_geometry *g, const cs_array_slice *s, const cs_array_piece *p,
                         uint8_t *chunk, uint8_t *slice_bytes, bool to_slice);

/*
 * The blocks of a chunk stored in blocks of block_bytes (Blosc splits a
 * chunk's bytes into consecutive blocks; the last may be shorter) that the
 * piece's region touches: bit b of `need` (need_words 64-bit words, zeroed
 * by the caller) set for each. Answers the number of blocks set, or 0 when
 * need_words is too small for every block of the chunk, under
 * ceil(ceil(chunk bytes / block_bytes) / 64), whatever blocks the region
 * touches (then `need` is left as it was).
 */
uint64_t cs_array_region_blocks(const cs_array_geometry *g, const cs_array_piece *p, uint64_t block_bytes,
                                uint64_t *need, uint64_t need_words);

/*
 * The stamp (docs/arrays.md, "Stamps"). identity is the nonce the first
 * accepted write set (0 before any); while the array is filling, change is
 * the count of written chunks and the time of the last accepted write; once
 * every chunk is written, the stamp is identity and size alone and never
 * changes again. A filling stamp and a complete stamp are never equal
 * (state differs).
 */
typedef enum cs_array_state {
  CS_ARRAY_EMPTY = 0,    /* no chunk written */
  CS_ARRAY_FILLING = 1,
  CS_ARRAY_COMPLETE = 2,
} cs_array_state;

typedef struct cs_array_stamp {
  uint64_t nonce;         /* identity: set by the first accepted write (never 0 once set) */
  uint64_t total_bytes;   /* identity: the array's size */
  uint32_t state;         /* cs_array_state */
  uint64_t written;       /* change while filling: chunks written */
  uint64_t changed_at_ns; /* change while filling: the last accepted write's time */
} cs_array_stamp;

/*
 * The stamp of an array of geometry g whose first accepted write set nonce,
 * with `written` chunks written, the last at changed_at_ns. Complete stamps
 * carry neither the count's time nor anything else that could move. The
 * values come from a catalog's answer: CS_E_CORRUPT (and *out untouched)
 * when they cannot describe this array (more chunks written than it has, a
 * nonce without a write or a write without a nonce).
 */
int cs_array_stamp_make(const cs_array_geometry *g, uint64_t nonce, uint64_t written, uint64_t changed_at_ns,
                        cs_array_stamp *out);
/* Two stamps name the same array in the same state of fill. */
bool cs_array_stamp_equal(const cs_array_stamp *a, const cs_array_stamp *b);
/* Two stamps name the same array (the nonce and size), whatever its fill. */
bool cs_array_stamp_same_array(const cs_array_stamp *a, const cs_array_stamp *b);

/*
 * The slot arbiter (docs/arrays.md, "The protocol"). A catalog answers an
 * array's candidates (catalog.h, array_candidates) in the order: the
 * geometry's first, then by slot, then by first visible version; each
 * slot's winner is its first candidate. The arbiter is fed them in that
 * order and says of each whether it wins, and refuses an answer out of
 * order. Writers (is my write the slot's winner?), readers (which record
 * holds the slot?) and the simulator's checker ask it the same way.
 */
typedef struct cs_array_arbiter {
  bool any_chunk;          /* a chunk candidate was fed */
  bool any_geometry;
  uint64_t slot;           /* the last chunk candidate's slot and version */
  uint64_t version;
} cs_array_arbiter;

typedef enum cs_array_verdict {
  CS_ARRAY_WINS = 0,         /* the first candidate of its slot (or the geometry's) */
  CS_ARRAY_LOSES = 1,        /* a later candidate of a slot already won */
  CS_ARRAY_OUT_OF_ORDER = 2, /* the answer is not in the catalog's order: nothing of it can be trusted */
} cs_array_verdict;

/* The next candidate: the geometry's (geometry true; slot ignored), or slot's, first visible at version. */
cs_array_verdict cs_array_arbiter_next(cs_array_arbiter *a, bool geometry, uint64_t slot, uint64_t version);

/*
 * A slot's claim object (docs/arrays.md, "Who wins a slot"), on a store that
 * enforces If-None-Match: the claiming write's nonce (32 lowercase hex
 * digits), one space, and the writer's wall clock at the claim in
 * nanoseconds since the epoch (decimal, no leading zero). Another writer may
 * take a claim over once it is older than the configured TTL and its slot
 * has no visible record.
 */
#define CS_ARRAY_CLAIM_NONCE_HEX 32u
#define CS_ARRAY_CLAIM_BYTES_MAX (CS_ARRAY_CLAIM_NONCE_HEX + 1u + 20u)

/* Writes a claim's bytes (not NUL-terminated) into out (CS_ARRAY_CLAIM_BYTES_MAX bytes); *len gets its length.
   CS_E_INVALID_ARGUMENT when nonce is not 32 lowercase hex digits. */
int cs_array_claim_format(const char *nonce, uint64_t at_ns, char out[CS_ARRAY_CLAIM_BYTES_MAX], size_t *len);

/*
 * Reads a claim's time. CS_E_OK: a claim in the form above (only that form, byte for byte: what
 * cs_array_claim_format writes), *at_ns set. CS_E_PARSE: anything else (a claim without a time, as the first
 * writers made, or bytes that are no claim): it is never taken over.
 */
int cs_array_claim_parse(const void *body, size_t len, uint64_t *at_ns);

/* A claim made at at_ns may be taken over at now_ns: it is at least ttl_ns old (a claim from the future never). */
bool cs_array_claim_stale(uint64_t at_ns, uint64_t now_ns, uint64_t ttl_ns);

#ifdef __cplusplus
}
#endif

#endif

/*
 * capstore/array_chunk.h: the stored form of one capture-array chunk write
 * (docs/arrays.md, "Objects and records"): the payload (the chunk's raw
 * elements, or one Blosc 1 buffer) followed by a table of verification
 * units and a 16-byte trailer.
 *
 *   payload | unit table: count x (u32 end, u32 crc32) | trailer
 *   trailer: u32 unit count, u32 payload length, u32 crc32 of the table,
 *            "CSA1" (all little-endian)
 *
 * The units tile the payload in order: unit k is [end[k-1], end[k]) (end[-1]
 * is 0) and its CRC-32 (the pack format's, cs_crc32) is crc32[k]. For a Blosc
 * payload the units are the header and start table, then each block's
 * compressed extent in offset order (a plain copy: the header, then each
 * block); for raw elements they are CS_ARRAY_UNIT_BYTES each (the last
 * shorter). So a reader that fetches only some units, by range, verifies each
 * one before it uses it, and never decodes a byte it did not verify. The
 * payload comes first, so python3-blosc decodes a Blosc chunk from the
 * stored bytes' first cbytes alone.
 *
 * The parser takes outside bytes: the trailer and the table are checked
 * against each other and against the stored length, and refused with
 * CS_E_CORRUPT and a message naming what is wrong. fuzz/fuzz_array_chunk.c
 * runs it.
 */
#ifndef CAPSTORE_ARRAY_CHUNK_H
#define CAPSTORE_ARRAY_CHUNK_H

#include "capstore/array_meta.h"
#include "capstore/blosc_chunk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_ARRAY_CHUNK_TRAILER_BYTES 16u
#define CS_ARRAY_CHUNK_MAGIC "CSA1"
/* A raw payload's verification unit. */
#define CS_ARRAY_UNIT_BYTES (UINT32_C(64) << 10)
/* At most this many units: a Blosc chunk's blocks plus its prefix, or 1 GiB of raw units. */
#define CS_ARRAY_UNITS_MAX (CS_BLOSC_BLOCKS_MAX + 1u)

/* The bytes a frame adds to a payload with `units` units. */
#define CS_ARRAY_CHUNK_OVERHEAD(units) ((uint64_t)(units) * 8u + CS_ARRAY_CHUNK_TRAILER_BYTES)

/*
 * Frames a payload already in out[0, payload_len) (out has cap bytes): works
 * out its units (codec: CS_ARRAY_CODEC_BLOSC parses the payload as Blosc;
 * NONE cuts it in CS_ARRAY_UNIT_BYTES) and appends the table and trailer.
 * *stored_len is the whole. CS_E_NO_MEMORY when cap is short (the frame
 * needs CS_ARRAY_CHUNK_OVERHEAD(units) more); CS_E_CORRUPT when a Blosc
 * payload does not parse.
 */
int cs_array_chunk_frame(cs_array_codec codec, uint8_t *out, size_t payload_len, size_t cap, size_t *stored_len,
                         char *msg, size_t msg_size);

/*
 * A writer's whole encode of chunk `index` of the array: checks the index and
 * that len is exactly the chunk's byte size (cs_array_chunk_bytes; an edge
 * chunk is cut to the shape), compresses with Blosc (the dtype's item size)
 * when the array's codec says so, and frames the payload. out needs
 * cs_array_chunk_stored_max(meta, index) bytes. CS_E_INVALID_ARGUMENT naming
 * what is wrong (index, size).
 */
int cs_array_chunk_encode(const cs_array_meta *meta, uint64_t index, const void *elements, size_t len, uint8_t *out,
                          size_t cap, size_t *stored_len, char *msg, size_t msg_size);
/* The most bytes cs_array_chunk_encode can need for chunk index (0 when index is out of range). */
uint64_t cs_array_chunk_stored_max(const cs_array_meta *meta, uint64_t index);

/* What the trailer says. */
typedef struct cs_array_chunk_tail {
  uint32_t units;
  uint32_t payload_bytes;
  uint32_t table_crc32;
  uint64_t table_offset; /* where the table starts in the stored bytes (== payload_bytes) */
  uint64_t tail_bytes;   /* table + trailer: what a reader fetches from the end */
} cs_array_chunk_tail;

/*
 * Parses the last 16 of the stored bytes (trailer, stored_len the whole
 * stored length): CS_E_CORRUPT unless the magic is right, the unit count is
 * 1..CS_ARRAY_UNITS_MAX (0 only for an empty payload) and payload + table +
 * trailer is exactly stored_len.
 */
int cs_array_chunk_tail_parse(const uint8_t trailer[CS_ARRAY_CHUNK_TRAILER_BYTES], uint64_t stored_len,
                              cs_array_chunk_tail *out, char *msg, size_t msg_size);

/*
 * Checks the unit table (tail->units x 8 bytes, as fetched) against the
 * trailer: its CRC-32, ends strictly increasing, the last equal to the
 * payload length. CS_E_CORRUPT naming what is wrong.
 */
int cs_array_chunk_table_check(const cs_array_chunk_tail *tail, const uint8_t *table, char *msg, size_t msg_size);

/* Unit k's range [*offset, *offset + *length) in the payload and its CRC-32; the table checked first. */
void cs_array_chunk_unit(const uint8_t *table, uint32_t k, uint64_t *offset, uint64_t *length, uint32_t *crc32);

/* The unit holding payload byte `at` (binary search over a checked table); tail->units when none. */
uint32_t cs_array_chunk_unit_of(const cs_array_chunk_tail *tail, const uint8_t *table, uint64_t at);

/* CS_E_OK when bytes (one unit, as fetched) have the unit's CRC-32; CS_E_CORRUPT naming the unit otherwise. */
int cs_array_chunk_unit_verify(const uint8_t *table, uint32_t k, const uint8_t *bytes, size_t len, char *msg,
                               size_t msg_size);

/* ---- Reading a region of one chunk ------------------------------------------------------- */

/*
 * Fetches length bytes at offset of the chunk's stored bytes into out (one
 * ranged read). CS_E_OK, or an error (msg said) that the read passes on.
 * CS_E_WOULD_BLOCK: not yet (a caller that fetches ranges in rounds). The
 * read then still asks for every other range it can name at that stage (the
 * units of the region, all of them) and answers CS_E_WOULD_BLOCK; run again
 * once they are there, it asks for the same ranges.
 */
typedef int (*cs_array_fetch_fn)(void *ctx, uint64_t offset, uint64_t length, uint8_t *out, char *msg,
                                 size_t msg_size);

typedef struct cs_array_read_stats {
  uint64_t fetches;       /* ranged reads issued */
  uint64_t bytes_fetched;
  uint64_t units_verified;
  uint64_t blocks_decoded; /* Blosc blocks decoded (0 for raw chunks) */
} cs_array_read_stats;

/*
 * Reads the region of one chunk that a slice overlaps (piece, from
 * cs_array_slice_next) into the slice's dense buffer, from the chunk's stored
 * bytes (stored_len of them) through fetch: the trailer, the unit table, for
 * Blosc the prefix unit, then only the units the region needs, contiguous
 * ones in one fetch; every unit verified before use, Blosc blocks decoded
 * one by one from exactly their units. CS_E_CORRUPT (naming what) when the
 * stored bytes are not a chunk of this array's geometry and codec or a unit
 * fails its CRC-32; a fetch's error as it came. stats (optional) counts.
 */
int cs_array_read_piece(const cs_array_meta *meta, const cs_array_slice *slice, const cs_array_piece *piece,
                        uint64_t stored_len, cs_array_fetch_fn fetch, void *ctx, uint8_t *slice_bytes,
                        cs_array_read_stats *stats, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif

#endif

/*
 * capstore/blosc_chunk.h: capture-array chunks in the Blosc 1 format (Debian's
 * libblosc), so that any Blosc reader (python3-blosc, c-blosc) decodes a
 * chunk on its own, and so that a reader of a slice fetches only the blocks
 * it needs (docs/arrays.md, "Read" and "Objects and records").
 *
 * A Blosc 1 buffer is a 16-byte header (version, flags, type size, the
 * uncompressed size nbytes, the block size and the compressed size cbytes),
 * then, unless the buffer is a plain copy (BLOSC_MEMCPYED), one 32-bit
 * little-endian start offset per block, then the blocks. Block b holds bytes
 * [b * blocksize, min((b + 1) * blocksize, nbytes)) of the data. A reader
 * fetches the header and the start table first (cs_blosc_info.prefix_bytes),
 * then the compressed extent of each block it needs (cs_blosc_block_extent),
 * verifies each extent against its checksum (docs/arrays.md, "Objects and
 * records") and decodes those blocks alone (cs_blosc_decode_block).
 *
 * Every parser here takes outside bytes: it checks each field against the
 * others and against what was fetched, and refuses with CS_E_CORRUPT and a
 * message naming the field. fuzz/fuzz_blosc.c runs them on arbitrary input.
 */
#ifndef CAPSTORE_BLOSC_CHUNK_H
#define CAPSTORE_BLOSC_CHUNK_H

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_BLOSC_HEADER_BYTES 16u
/* The block size capstore asks for unless told otherwise: small enough that a slice touching one
   element per chunk fetches little, large enough that the codec compresses well. Blosc has the last
   word (Debian's 1.21 with LZ4 and byte shuffle makes blocks of at least 64 KiB, and multiplies what
   is asked by the item size); the header says what it chose and readers go by the header. */
#define CS_BLOSC_BLOCK_BYTES_DEFAULT (UINT32_C(64) << 10)
/* At most this many blocks per chunk (the start table a reader fetches first stays <= 256 KiB). */
#define CS_BLOSC_BLOCKS_MAX (UINT32_C(1) << 16)

typedef struct cs_blosc_info {
  uint8_t version;       /* the format version (1 or 2 for Blosc 1) */
  uint8_t flags;
  uint8_t type_bytes;
  bool memcpyed;         /* a plain copy: no start table, block b at 16 + b * blocksize */
  uint32_t nbytes;       /* uncompressed */
  uint32_t block_bytes;
  uint32_t cbytes;       /* the whole buffer */
  uint32_t blocks;
  uint32_t prefix_bytes; /* header and start table: what a reader fetches first */
} cs_blosc_info;

/*
 * Parses the header (the first 16 of avail bytes). CS_E_CORRUPT, naming the
 * field, when a field is out of range or inconsistent: an unknown version,
 * a zero type size, a block size of 0 or not a multiple of the type size
 * where the data is longer than one block, more than CS_BLOSC_BLOCKS_MAX
 * blocks, cbytes smaller than the prefix (or than 16 + nbytes for a plain
 * copy); CS_E_INVALID_ARGUMENT when avail < 16.
 */
int cs_blosc_info_parse(const uint8_t *bytes, size_t avail, cs_blosc_info *out, char *msg, size_t msg_size);

/*
 * The compressed extent [*offset, *offset + *length) of block `block` in the
 * buffer, from the prefix (info->prefix_bytes bytes). Block extents are the
 * gaps between sorted start offsets (Blosc's threads may store the blocks
 * in any order); CS_E_CORRUPT when a start lies inside the prefix or past
 * cbytes, or two blocks start at the same offset.
 */
int cs_blosc_block_extent(const cs_blosc_info *info, const uint8_t *prefix, uint32_t block, uint64_t *offset,
                          uint64_t *length, char *msg, size_t msg_size);

/*
 * Compresses len bytes (items of type_bytes) into dst (cap bytes; len + 16
 * always suffices), with byte shuffle, LZ4 at level 5 and blocks of about
 * block_bytes (0: CS_BLOSC_BLOCK_BYTES_DEFAULT; Blosc may choose larger).
 * Deterministic: one thread.
 */
int cs_blosc_encode(const void *src, size_t len, uint32_t type_bytes, uint32_t block_bytes, void *dst, size_t cap,
                    size_t *out_len, char *msg, size_t msg_size);

/* Decompresses a whole buffer of len bytes into dst (cap bytes); CS_E_CORRUPT when it is not valid Blosc. */
int cs_blosc_decode(const void *src, size_t len, void *dst, size_t cap, size_t *out_len, char *msg,
                    size_t msg_size);

/*
 * Decodes block `block` alone from what a reader fetched: the prefix
 * (info->prefix_bytes bytes) and the block's extent (`extent`, `extent_len`
 * bytes, as cs_blosc_block_extent gave them). It builds a buffer of exactly
 * the prefix and that extent, with cbytes saying so, so the codec cannot read
 * a byte that was not fetched (Blosc bounds its reads by cbytes; a start
 * table that lies about where a block ends makes the decode fail, never read
 * further). out receives the block's bytes (at most block_bytes; fewer for
 * the last block). CS_E_CORRUPT when the block does not decode;
 * CS_E_UNSUPPORTED for a block that is not whole items (decode the chunk
 * whole).
 */
int cs_blosc_decode_block(const cs_blosc_info *info, const uint8_t *prefix, uint32_t block, const uint8_t *extent,
                          size_t extent_len, uint8_t *out, size_t cap, size_t *got, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif

#endif

/*
 * capstore/array_meta.h: a capture array's identity and geometry as the
 * object `<prefix>/arrays/<id>/geometry-<sha256>.json` holds it
 * (docs/arrays.md): the id, the shape, the chunk shape, the dtype, the codec
 * and optional attributes (a JSON object).
 *
 * The encoding is canonical: keys sorted, no spaces, integers in decimal, the
 * attributes' keys sorted too. Two creators of the same array therefore write
 * the same bytes under the same content-addressed key, and any difference is
 * a difference of geometry (cs_array_meta_diff names the first field).
 * The decoder takes outside bytes: it refuses anything that is not exactly
 * such a document (unknown format, a missing, extra or mistyped field, a bad
 * geometry, an unknown dtype or codec, an id outside the id rule, or the
 * right fields in any other spelling than the canonical one) with CS_E_PARSE
 * and a message naming the field. fuzz/fuzz_array_meta.c runs it.
 */
#ifndef CAPSTORE_ARRAY_META_H
#define CAPSTORE_ARRAY_META_H

#include "capstore/array.h"
#include "capstore/pack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_ARRAY_META_FORMAT "capstore-array-v1"
#define CS_ARRAY_ID_MAX 128u
/* The attributes' canonical JSON text, at most this many bytes. */
#define CS_ARRAY_ATTRIBUTES_MAX 4096u
/* A canonical document is at most this long (8 dimensions of 20-digit numbers, the id, the attributes). */
#define CS_ARRAY_META_BYTES_MAX (CS_ARRAY_ATTRIBUTES_MAX + CS_ARRAY_ID_MAX + 1024u)

typedef enum cs_array_codec {
  CS_ARRAY_CODEC_NONE = 0,  /* the chunk's elements, C order */
  CS_ARRAY_CODEC_BLOSC = 1, /* one Blosc 1 buffer (capstore/blosc_chunk.h) */
} cs_array_codec;

typedef struct cs_array_meta {
  char id[CS_ARRAY_ID_MAX + 1];
  cs_array_geometry geometry; /* item_bytes follows dtype */
  cs_dtype dtype;
  cs_array_codec codec;
  char attributes[CS_ARRAY_ATTRIBUTES_MAX + 1]; /* canonical JSON object text; "{}" when none */
} cs_array_meta;

/*
 * The id rule: 1 to 128 bytes of [A-Za-z0-9._-], not "." or "..". It is one
 * segment of object keys (arrays/<id>/...) and a catalog value as it is; no
 * '/', so no array's keys can nest under another's. CS_E_INVALID_ARGUMENT
 * with what is wrong in msg.
 */
int cs_array_id_check(const char *id, char *msg, size_t msg_size);

/*
 * Fills meta from its parts: checks the id, the geometry (cs_array_geometry
 * _check with item_bytes set from dtype), and canonicalises the attributes
 * (NULL or "" for none; otherwise a JSON object, at most
 * CS_ARRAY_ATTRIBUTES_MAX bytes once canonical). CS_E_INVALID_ARGUMENT
 * naming the field.
 */
int cs_array_meta_make(cs_array_meta *meta, const char *id, const cs_array_geometry *geometry, cs_dtype dtype,
                       cs_array_codec codec, const char *attributes_json, char *msg, size_t msg_size);

/* The canonical document into out (cap bytes, CS_ARRAY_META_BYTES_MAX suffices), NUL-terminated; *len without it. */
int cs_array_meta_encode(const cs_array_meta *meta, char *out, size_t cap, size_t *len);

/* Parses a document (outside bytes); CS_E_PARSE naming the field, or CS_E_TOO_LARGE past CS_ARRAY_META_BYTES_MAX. */
int cs_array_meta_decode(const char *bytes, size_t len, cs_array_meta *out, char *msg, size_t msg_size);

/*
 * The object key of the array's document: "<prefix>arrays/<id>/geometry-<64
 * lowercase hex of the SHA-256 of its canonical bytes>.json" into out (cap
 * bytes), NUL-terminated. Content-addressed: no store can replace one
 * geometry with another under the same key. CS_E_TOO_LARGE when cap is short.
 */
int cs_array_meta_key(const cs_array_meta *meta, const char *prefix, char *out, size_t cap);

/* The 64 lowercase hex digits of the SHA-256 of the canonical document, NUL-terminated: the geometry's name. */
#define CS_ARRAY_META_HASH_HEX 64u
int cs_array_meta_hash(const cs_array_meta *meta, char out[CS_ARRAY_META_HASH_HEX + 1]);

/* NULL when a and b describe the same array; otherwise the first field that differs ("shape[1]", "dtype"). */
const char *cs_array_meta_diff(const cs_array_meta *a, const cs_array_meta *b, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif

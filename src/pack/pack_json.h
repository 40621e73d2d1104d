/*
 * pack_json.h: reading JSON (footers, and the CLI's build specs) with jansson.
 * Private to src/pack and src/cli.
 *
 * jansson stores integers as json_int_t (long long) and refuses any integer
 * above 2^63-1, while the format's u64 fields go to 2^64-1. pk_jin_load
 * therefore scans the text first: an integer in (2^63-1, 2^64-1] is replaced
 * by a placeholder real "<k>.5" and its value kept in doc->big[k]. Genuine
 * reals are refused by that scan (no footer field holds one), so every real
 * in the parsed tree is a placeholder, and pk_jin_int reads both kinds.
 */
#ifndef CAPSTORE_PACK_JSON_H
#define CAPSTORE_PACK_JSON_H

#include <jansson.h>

#include "pack_internal.h"

typedef struct pk_json_doc {
  json_t *root;
  uint64_t *big;           /* values of the integers above 2^63-1, by placeholder */
  uint64_t *big_rewritten; /* end of each placeholder in the text given to jansson */
  uint64_t *big_original;  /* end of each integer in the original text */
  size_t big_count;
  size_t big_cap;
  uint64_t base_offset; /* object offset of the text's first byte, for messages */
  const char *what;     /* "footer" or "spec", for messages */
} pk_json_doc;

/* Where a value sits, for messages. */
typedef struct pk_jin_ctx {
  const pk_json_doc *doc;
  uint32_t record;  /* CS_PACK_NO_RECORD outside records */
  const char *path; /* "footer" or "footer records[3]" */
} pk_jin_ctx;

/*
 * Parses text with duplicate keys refused and U+0000 allowed. Errors:
 * FOOTER_JSON (syntax, duplicate key, depth; the message names the offset),
 * FIELD_TYPE (a number with a fraction or exponent), FIELD_RANGE (an integer
 * beyond -2^63 .. 2^64-1), NO_MEMORY.
 */
PK_HIDDEN int pk_jin_load(const uint8_t *text, size_t len, uint64_t base_offset, const char *what,
                          pk_json_doc *out, cs_pack_error *err);
PK_HIDDEN void pk_jin_free(pk_json_doc *doc);

/* KEY_UNKNOWN for a key outside names, then KEY_MISSING for an absent one. */
PK_HIDDEN int pk_jin_keys(const pk_jin_ctx *ctx, const json_t *object, const char *const *names,
                          size_t name_count, cs_pack_error *err);

/* An integer field within lo..hi (as signed 128-bit-free pairs): FIELD_TYPE, FIELD_RANGE. */
PK_HIDDEN int pk_jin_u64(const pk_jin_ctx *ctx, const json_t *object, const char *key,
                         uint64_t *out, cs_pack_error *err);
/* A string field, copied into arena (NUL-terminated); FIELD_TYPE. */
PK_HIDDEN int pk_jin_text(const pk_jin_ctx *ctx, const json_t *object, const char *key,
                          bool nullable, pk_arena *arena, cs_pack_text *out, cs_pack_error *err);

/*
 * The 21-field metadata object into *out (text copied into arena). Checks
 * keys, JSON types and that values fit their C types; the caller then runs
 * pk_meta_check for the format's ranges.
 */
PK_HIDDEN int pk_jin_meta(const pk_jin_ctx *ctx, const json_t *object, pk_arena *arena,
                          cs_pack_meta *out, cs_pack_error *err);

#endif

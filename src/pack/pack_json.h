/*
 * pack_json.h: reading JSON (footers, and the CLI's build specs) with jansson.
 * Private to src/pack and src/cli.
 *
 * jansson stores integers as json_int_t (long long) and refuses any integer
 * above 2^63-1, while the format's u64 fields go to 2^64-1. pk_jin_load
 * therefore scans the text first: a number jansson should not hold — an
 * integer in (2^63-1, 2^64-1], an integer beyond -2^63 .. 2^64-1, or any real
 * (no field of the format holds one) — is replaced by a placeholder real
 * "<k>.5" and described by doc->numbers[k]. Every real in the parsed tree is
 * therefore a placeholder, and pk_jin_int tells the kinds apart, so a value a
 * reader ignores (a key a newer writer added) may be any JSON number.
 *
 * The same scan estimates the memory jansson would take for the tree and
 * refuses text over pk_jin_cost_limit before any tree is built.
 */
#ifndef CAPSTORE_PACK_JSON_H
#define CAPSTORE_PACK_JSON_H

#include <jansson.h>

#include "pack_internal.h"

typedef enum pk_jin_number_kind {
  PK_JIN_BIG,          /* an integer in (2^63-1, 2^64-1]: value holds it */
  PK_JIN_OUT_OF_RANGE, /* an integer beyond -2^63 .. 2^64-1 */
  PK_JIN_REAL,         /* a number with a fraction or an exponent */
} pk_jin_number_kind;

typedef struct pk_jin_number {
  pk_jin_number_kind kind;
  uint64_t value;
  uint64_t rewritten_end;  /* end of the placeholder in the text given to jansson */
  uint64_t original_end;   /* end of the number in the original text */
  uint64_t original_start; /* object offset of the number, for messages */
} pk_jin_number;

typedef struct pk_json_doc {
  json_t *root;
  pk_jin_number *numbers; /* the placeholders, by k */
  size_t number_count;
  size_t number_cap;
  uint64_t cost;        /* the scan's estimate of the tree's bytes */
  void *arena;          /* the tree's memory when parsed in an arena (pack_json_in.c) */
  size_t arena_size;
  bool arena_spilled;   /* the arena fell short: some of the tree's blocks are malloc's */
  uint64_t base_offset; /* object offset of the text's first byte, for messages */
  const char *what;     /* "footer" or "spec", for messages */
} pk_json_doc;

/* Where a value sits, for messages. */
typedef struct pk_jin_ctx {
  const pk_json_doc *doc;
  uint32_t record;     /* CS_PACK_NO_RECORD outside records */
  const char *path;    /* "footer" or "footer records[3]" */
  bool ignore_unknown; /* footers: keys the format does not define are ignored */
} pk_jin_ctx;

/* Tests only: a nonzero value caps the arena, so a parse spills past it. */
PK_HIDDEN extern size_t pk_jin_arena_cap_for_tests;

/* The scan's estimate of the bytes jansson's tree of text would take. */
PK_HIDDEN int pk_jin_cost(const uint8_t *text, size_t len, uint64_t *cost, cs_pack_error *err);
/* The most tree bytes text of len bytes may cost: CS_PACK_FOOTER_COST_*. */
PK_HIDDEN uint64_t pk_jin_cost_limit(size_t len);

/*
 * Parses text with duplicate keys refused and U+0000 allowed. Errors:
 * FOOTER_COMPLEX (the tree would cost over pk_jin_cost_limit), FOOTER_JSON
 * (syntax, duplicate key, depth; the message names the offset), NO_MEMORY
 * (allocation failed, jansson's included: never a fault of the text).
 */
PK_HIDDEN int pk_jin_load(const uint8_t *text, size_t len, uint64_t base_offset, const char *what,
                          pk_json_doc *out, cs_pack_error *err);
PK_HIDDEN void pk_jin_free(pk_json_doc *doc);

/*
 * KEY_UNKNOWN for a key outside names (unless ctx->ignore_unknown), then
 * KEY_MISSING for an absent one.
 */
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

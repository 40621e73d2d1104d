/*
 * pack_internal.h: what the files of src/pack share and nothing else sees.
 * Internal names start with pk_ and are hidden from any shared object.
 */
#ifndef CAPSTORE_PACK_INTERNAL_H
#define CAPSTORE_PACK_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capstore/pack.h"

#define PK_HIDDEN __attribute__((visibility("hidden")))
#define PK_PRINTF(fmt_index, arg_index) __attribute__((format(printf, fmt_index, arg_index)))

/* The number of metadata fields and their names in canonical (bytewise) order. */
#define PK_META_FIELD_COUNT 21u
PK_HIDDEN extern const char *const pk_meta_field_names[PK_META_FIELD_COUNT];

/* Bytes copied, hashed and written per step: big enough for speed, small enough for cache. */
#define PK_SLICE_BYTES ((size_t)64 * 1024)

static inline uint64_t pk_align_up(uint64_t value) {
  return (value + (CS_PACK_ALIGNMENT - 1)) & ~(uint64_t)(CS_PACK_ALIGNMENT - 1);
}

/* ---- Errors (pack_error.c) ---- */

/*
 * Fills *err (when not NULL) with kind, record, offset, field and a printf
 * message; returns the coarse cs_err of kind. Never fails.
 */
PK_HIDDEN int pk_fail(cs_pack_error *err, cs_pack_error_kind kind, uint32_t record_index,
                      uint64_t offset, const char *field, const char *format, ...)
    PK_PRINTF(6, 7);
PK_HIDDEN void pk_clear(cs_pack_error *err);
/* The coarse cs_err for kind: CS_E_CORRUPT for refused stored bytes, and so on. */
PK_HIDDEN int pk_code(cs_pack_error_kind kind);

/* ---- Text (pack_meta.c) ---- */

/*
 * Decodes one UTF-8 sequence at bytes[*pos] (< len) into *code_point and
 * advances *pos. Returns false for an invalid, overlong, surrogate or
 * out-of-range sequence, leaving *pos unchanged.
 */
PK_HIDDEN bool pk_utf8_next(const uint8_t *bytes, size_t len, size_t *pos, uint32_t *code_point);
PK_HIDDEN bool pk_utf8_valid(const char *bytes, size_t len);

/* Same as cs_pack_meta_validate, but returns the kind and fills err without a code. */
PK_HIDDEN cs_pack_error_kind pk_meta_check(const cs_pack_meta *meta, uint64_t decoded_length,
                                           uint32_t record_index, cs_pack_error *err);

/* ---- Growable byte buffer (pack_buf.c) ---- */

typedef struct pk_buf {
  uint8_t *data;
  size_t len;
  size_t cap;
  bool failed; /* an allocation failed; every later put is ignored */
} pk_buf;

PK_HIDDEN void pk_buf_put(pk_buf *buf, const void *bytes, size_t len);
PK_HIDDEN void pk_buf_put_text(pk_buf *buf, const char *text);
PK_HIDDEN void pk_buf_put_u64(pk_buf *buf, uint64_t value);
PK_HIDDEN void pk_buf_put_i64(pk_buf *buf, int64_t value);
PK_HIDDEN void pk_buf_free(pk_buf *buf);

/* Decimal digits of value, for sizing without formatting. */
PK_HIDDEN uint32_t pk_u64_digits(uint64_t value);

/* A chunked arena of NUL-terminated copies; freed all at once. */
typedef struct pk_arena pk_arena;
PK_HIDDEN pk_arena *pk_arena_new(void);
PK_HIDDEN const char *pk_arena_copy(pk_arena *arena, const char *bytes, size_t len);
PK_HIDDEN void pk_arena_free(pk_arena *arena);

/* A set of byte strings (capture ids); stores copies. */
typedef struct pk_idset pk_idset;
PK_HIDDEN pk_idset *pk_idset_new(void);
/* 1 when added, 0 when already present, -1 when out of memory. */
PK_HIDDEN int pk_idset_add(pk_idset *set, const char *bytes, size_t len);
PK_HIDDEN bool pk_idset_contains(const pk_idset *set, const char *bytes, size_t len);
PK_HIDDEN void pk_idset_free(pk_idset *set);

/* ---- Canonical JSON (pack_json_out.c) ---- */

/* A JSON string with Python's json.dumps(ensure_ascii=True) escapes; text must be valid UTF-8. */
PK_HIDDEN void pk_json_string(pk_buf *buf, const char *bytes, size_t len);
/* The metadata object, keys in canonical order. */
PK_HIDDEN void pk_json_meta(pk_buf *buf, const cs_pack_meta *meta);

/* A record entry; the 8 checksum digits start at the returned offset into buf. */
PK_HIDDEN size_t pk_json_record(pk_buf *buf, const cs_pack_meta *meta, uint64_t offset,
                                uint64_t length, uint32_t crc32);
/* Overwrites 8 lowercase hex digits at buf->data[at]. */
PK_HIDDEN void pk_json_patch_crc(pk_buf *buf, size_t at, uint32_t crc32);
/* `{"created_at_ns":N,...,"records":[` : everything before the first record. */
PK_HIDDEN void pk_json_footer_head(pk_buf *buf, const cs_uuid *pack_id, uint64_t created_at_ns);
#define PK_JSON_FOOTER_TAIL "]}"

/* ---- Layout (pack_layout.c) ---- */

PK_HIDDEN void pk_header_encode(const cs_uuid *pack_id, uint64_t created_at_ns,
                                uint8_t out[CS_PACK_HEADER_SIZE]);
PK_HIDDEN void pk_trailer_encode(uint64_t footer_offset, uint64_t footer_length,
                                 uint32_t footer_crc32, const uint8_t sha256[32],
                                 uint8_t out[CS_PACK_TRAILER_SIZE]);
/*
 * Checks records[0..count) against the layout rules for a footer at
 * footer_offset: OFFSET_LOW, ALIGNMENT, RECORD_ORDER, GAP, RECORD_INTO_FOOTER.
 */
PK_HIDDEN int pk_layout_check(const cs_pack_record *records, uint32_t count,
                              uint64_t footer_offset, cs_pack_error *err);

/* ---- Hex ---- */

PK_HIDDEN void pk_hex_lower(const uint8_t *bytes, size_t len, char *out);

/* ---- CRC-32 and SHA-256 ---- */

/*
 * The running CRC-32 of the format (zlib's): pass 0 to start, then the value
 * so far. Uses ISA-L when the build found it, zlib otherwise.
 */
PK_HIDDEN uint32_t pk_crc32(uint32_t crc, const uint8_t *bytes, size_t len);
/* zlib's crc32_z: the reference pk_crc32 must equal. */
PK_HIDDEN uint32_t pk_crc32_zlib(uint32_t crc, const uint8_t *bytes, size_t len);
/* True when pk_crc32 is ISA-L's (so tests can say which one they compared). */
PK_HIDDEN bool pk_crc32_accelerated(void);

#endif

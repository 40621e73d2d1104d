/*
 * capstore/pack.h: the dmi-pack-v1 format: a streaming writer, a reader that
 * works from the trailer and the footer alone, a streaming full verifier, the
 * object key rule and the object metadata set.
 *
 * Bytes in, bytes out: nothing here opens a file or a socket. The writer
 * emits through a caller-given callback; the reader and the verifier take the
 * bytes the caller read. docs/format.md describes the format as implemented.
 *
 * Every function that can fail returns CS_E_OK or a negative cs_err and, when
 * err is not NULL, fills *err with a precise kind and a message that names the
 * field or the byte offset. Callers decide on err->kind; the cs_err return is
 * the coarse class (CS_E_CORRUPT for refused stored bytes, CS_E_INVALID_ARGUMENT
 * for a descriptor the writer refuses, CS_E_UNSUPPORTED for versions/codecs).
 */
#ifndef CAPSTORE_PACK_H
#define CAPSTORE_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_PACK_MAJOR_VERSION 1u
#define CS_PACK_MINOR_VERSION 0u
#define CS_PACK_HEADER_SIZE 64u
#define CS_PACK_TRAILER_SIZE 64u
#define CS_PACK_ALIGNMENT 64u
#define CS_PACK_FOOTER_BYTES_MAX (64u * 1024u * 1024u)
#define CS_PACK_RECORDS_MAX 1000000u
/*
 * Parsing a footer of L bytes may take at most FACTOR x L + SLACK bytes of
 * JSON tree (an upper estimate of all jansson allocates, computed before the
 * tree is built, and allocated at once as its arena); a footer over it is
 * refused as FOOTER_COMPLEX. Writers' footers are estimated at 11-19 x L.
 */
#define CS_PACK_FOOTER_COST_FACTOR 20u
#define CS_PACK_FOOTER_COST_SLACK (1024u * 1024u)
#define CS_PACK_TEXT_BYTES_MAX 512u
#define CS_PACK_RANK_MAX 32u
#define CS_PACK_DIM_MAX 2147483647u
#define CS_PACK_LAYER_MAX 2147483647
#define CS_PACK_SEGMENT_BYTES_MAX 160u
#define CS_PACK_FORMAT_NAME "dmi-pack-v1"
#define CS_PACK_CONTENT_TYPE "application/vnd.dmi.pack"

/* The ten element types, in the order the format lists them. */
typedef enum cs_dtype {
  CS_DTYPE_BOOL = 0,
  CS_DTYPE_UINT8,
  CS_DTYPE_INT8,
  CS_DTYPE_INT16,
  CS_DTYPE_INT32,
  CS_DTYPE_INT64,
  CS_DTYPE_FLOAT16,
  CS_DTYPE_BFLOAT16,
  CS_DTYPE_FLOAT32,
  CS_DTYPE_FLOAT64,
  CS_DTYPE_COUNT_
} cs_dtype;

/* The format's name of dtype ("bfloat16"), or NULL when dtype is out of range. */
const char *cs_dtype_name(cs_dtype dtype);
/* Bytes per element (bool=1 ... float64=8), or 0 when dtype is out of range. */
uint32_t cs_dtype_item_size(cs_dtype dtype);
/* Maps a name to its dtype; CS_E_NOT_FOUND for any other text. */
int cs_dtype_parse(const char *name, size_t name_len, cs_dtype *out);

/*
 * CRC-32 as the format defines it for payloads and footers (zlib's, the
 * reflected IEEE polynomial; ISA-L's where the build found it): crc is the
 * value so far, 0 to start, so a payload read in parts chains its calls.
 */
uint32_t cs_crc32(uint32_t crc, const void *bytes, size_t len);

/*
 * A text value: UTF-8 bytes and their length (no terminator needed; U+0000 is
 * a valid character). bytes == NULL means absent, which only adapter_revision
 * accepts (it is written as JSON null).
 */
typedef struct cs_pack_text {
  const char *bytes;
  size_t len;
} cs_pack_text;

/* A NUL-terminated string as a cs_pack_text; NULL gives the absent value. */
static inline cs_pack_text cs_pack_text_of(const char *text) {
  cs_pack_text out = {text, text == NULL ? 0 : strlen(text)};
  return out;
}

/* The 21 metadata fields of a record (its descriptor). */
typedef struct cs_pack_meta {
  cs_pack_text capture_id; /* unique within a pack */
  cs_pack_text tenant_id;
  cs_pack_text experiment_id;
  cs_pack_text run_id;
  cs_pack_text session_id;
  cs_pack_text request_id;
  cs_pack_text sequence_id;
  cs_pack_text model_id;
  cs_pack_text model_revision;
  cs_pack_text adapter_revision; /* bytes == NULL: null */
  cs_pack_text capture_policy_version;
  cs_pack_text hook_name;
  int32_t layer_number; /* -1 .. 2^31-1 */
  uint32_t producer_rank;
  uint64_t step_number;
  uint64_t token_start;
  uint64_t token_end; /* >= token_start */
  uint32_t batch_position;
  cs_dtype dtype;
  uint32_t rank;                     /* number of dimensions, 0 .. 32 */
  uint32_t shape[CS_PACK_RANK_MAX];  /* each 0 .. 2^31-1; first `rank` used */
  uint64_t captured_at_ns;
} cs_pack_meta;

/* What went wrong, precisely. Each refusal has its own kind. */
typedef enum cs_pack_error_kind {
  CS_PACK_OK = 0,
  CS_PACK_E_ARGUMENT,           /* the caller broke the API contract */
  CS_PACK_E_STATE,              /* writer call out of order or after a write failure */
  CS_PACK_E_NO_MEMORY,          /* an allocation failed */
  CS_PACK_E_WRITE,              /* the write callback failed */
  CS_PACK_E_PAYLOAD_LENGTH,     /* appended bytes differ from the declared length */
  CS_PACK_E_TRUNCATED,          /* object shorter than header + trailer */
  CS_PACK_E_BAD_MAGIC,          /* header or trailer magic */
  CS_PACK_E_UNKNOWN_MAJOR,      /* a major version other than 1 */
  CS_PACK_E_NEWER_MINOR,        /* a minor version newer than 0 */
  CS_PACK_E_HEADER_SIZE,        /* header size field other than 64 */
  CS_PACK_E_HEADER_FIELD,       /* nonzero header flags or reserved bytes */
  CS_PACK_E_MISMATCH,           /* header, trailer, footer disagree on a shared value */
  CS_PACK_E_OFFSET_LOW,         /* a record or the footer starts below byte 64 */
  CS_PACK_E_ALIGNMENT,          /* a record or the footer is not 64-byte aligned */
  CS_PACK_E_RECORD_ORDER,       /* records overlap or are out of order */
  CS_PACK_E_GAP,                /* bytes between records beyond the alignment padding */
  CS_PACK_E_RECORD_INTO_FOOTER, /* a record runs into the footer */
  CS_PACK_E_FOOTER_END,         /* the footer does not end where the trailer begins */
  CS_PACK_E_FOOTER_TOO_LARGE,   /* footer over 64 MiB */
  CS_PACK_E_TOO_MANY_RECORDS,   /* over 1,000,000 records (or the writer's lower limit) */
  CS_PACK_E_FOOTER_CRC,         /* footer CRC-32 mismatch */
  CS_PACK_E_FOOTER_JSON,        /* footer is not valid JSON (or has duplicate keys) */
  CS_PACK_E_KEY_UNKNOWN,        /* a spec object has a key the format does not define */
  CS_PACK_E_KEY_MISSING,        /* a footer object lacks a required key */
  CS_PACK_E_FIELD_TYPE,         /* a footer value has the wrong JSON type */
  CS_PACK_E_FIELD_RANGE,        /* a value is out of its range (descriptor or footer) */
  CS_PACK_E_CODEC,              /* a codec other than "none" */
  CS_PACK_E_SHAPE_LENGTH,       /* prod(shape) x itemsize(dtype) != decoded length */
  CS_PACK_E_DUPLICATE_ID,       /* two records share a capture id */
  CS_PACK_E_PADDING,            /* a padding byte is not zero */
  CS_PACK_E_PAYLOAD_CRC,        /* payload CRC-32 mismatch */
  CS_PACK_E_SHA256,             /* trailer SHA-256 mismatch */
  CS_PACK_E_KEY_FIELDS,         /* records disagree on tenant, session or rank */
  CS_PACK_E_KEY_TOO_LONG,       /* the object key would exceed CS_KEY_MAX */
  CS_PACK_E_FOOTER_COMPLEX,     /* the footer's JSON would cost more memory than its bound */
  CS_PACK_E_KIND_COUNT_
} cs_pack_error_kind;

#define CS_PACK_NO_OFFSET UINT64_MAX
#define CS_PACK_NO_RECORD UINT32_MAX

typedef struct cs_pack_error {
  cs_pack_error_kind kind;
  uint32_t record_index; /* the record concerned, or CS_PACK_NO_RECORD */
  uint64_t offset;       /* the object byte offset concerned, or CS_PACK_NO_OFFSET */
  char field[40];        /* the field concerned ("token_end", "trailer.footer_offset"), or "" */
  char message[384];     /* one English sentence naming the field or the offset */
} cs_pack_error;

/* A stable snake_case name of kind ("payload_crc"); never NULL. */
const char *cs_pack_error_kind_name(cs_pack_error_kind kind);

/*
 * Whether a refusal of this kind is a verdict on the bytes (corrupt,
 * unsupported, over a limit: a pack that will never read) rather than on the
 * process (NO_MEMORY) or a misuse of the library (ARGUMENT, STATE, WRITE,
 * PAYLOAD_LENGTH). Only a verdict may quarantine or set a pack aside; any
 * kind added later is a verdict unless listed here.
 */
bool cs_pack_error_is_verdict(cs_pack_error_kind kind);

/*
 * Checks one descriptor against the format's ranges for a payload of
 * decoded_length bytes. Returns CS_E_OK or CS_E_INVALID_ARGUMENT with kind
 * FIELD_RANGE or SHAPE_LENGTH naming the field.
 */
int cs_pack_meta_validate(const cs_pack_meta *meta, uint64_t decoded_length, cs_pack_error *err);

/*
 * An upper bound of the bytes a record with meta takes in its pack's
 * canonical footer (its object, the comma before it included): every text
 * byte may become a six-byte escape, numbers take at most 20 digits.
 */
uint64_t cs_pack_meta_footer_bytes_max(const cs_pack_meta *meta);

/* ---- Writer ---------------------------------------------------------------- */

/* Receives the pack's bytes in order. Returns 0 on success, anything else fails the pack. */
typedef int (*cs_pack_write_fn)(void *context, const uint8_t *bytes, size_t length);

typedef struct cs_pack_writer_config {
  cs_uuid pack_id;
  uint64_t created_at_ns;
  cs_pack_write_fn write;
  void *write_context;
  uint32_t records_max;      /* 0: CS_PACK_RECORDS_MAX; may only lower it */
  uint64_t footer_bytes_max; /* 0: CS_PACK_FOOTER_BYTES_MAX; may only lower it */
  /*
   * true: the caller computes the object's SHA-256 from the emitted bytes
   * (on another thread, say) and the writer computes none; the pack is then
   * finished with cs_pack_writer_finish_footer and cs_pack_trailer_encode.
   * false (the default): the writer hashes and cs_pack_writer_finish ends it.
   */
  bool hash_elsewhere;
  /*
   * true: records may differ from the first in tenant_id, session_id and
   * producer_rank, as DMI's writer allows (the object key names the first
   * record's). false (the default): such a record is refused (KEY_FIELDS),
   * so a pack holds one tenant, session and rank, as the capture runtime writes.
   */
  bool mixed_keys;
} cs_pack_writer_config;

typedef struct cs_pack_writer cs_pack_writer;

/* What a finished (or fully verified) pack is. */
typedef struct cs_pack_summary {
  cs_uuid pack_id;
  uint64_t created_at_ns;
  uint64_t size_bytes;
  uint64_t footer_offset;
  uint64_t footer_length;
  uint32_t record_count;
  uint32_t footer_crc32;
  uint8_t sha256[32];         /* of the whole object: the object checksum */
  uint8_t trailer_sha256[32]; /* of every byte before the trailer */
} cs_pack_summary;

/*
 * Creates a writer and emits the 64-byte header. Errors: CS_E_INVALID_ARGUMENT
 * (ARGUMENT: missing callback, limits above the format's), CS_E_NO_MEMORY,
 * CS_E_IO (WRITE: the callback failed; *out is still NULL).
 */
int cs_pack_writer_open(const cs_pack_writer_config *config, cs_pack_writer **out,
                        cs_pack_error *err);

/*
 * Starts a record of exactly `length` payload bytes. Validates the descriptor
 * (FIELD_RANGE, SHAPE_LENGTH), the capture id's uniqueness (DUPLICATE_ID),
 * agreement with the first record on tenant_id, session_id and producer_rank
 * unless config.mixed_keys (KEY_FIELDS), the record and footer limits
 * (TOO_MANY_RECORDS, FOOTER_TOO_LARGE). A refused record leaves nothing
 * written and the writer usable. The writer copies what it needs from meta.
 */
int cs_pack_writer_begin_record(cs_pack_writer *writer, const cs_pack_meta *meta,
                                uint64_t length, cs_pack_error *err);

/*
 * Streams payload bytes of the open record to the callback, computing its
 * CRC-32 and the running SHA-256 in the same pass. More bytes than declared is
 * refused (PAYLOAD_LENGTH) before any is written.
 */
int cs_pack_writer_append(cs_pack_writer *writer, const void *bytes, size_t length,
                          cs_pack_error *err);

/* Closes the open record; PAYLOAD_LENGTH when fewer bytes than declared came. */
int cs_pack_writer_end_record(cs_pack_writer *writer, cs_pack_error *err);

/* begin + append + end for a payload held whole in memory. */
int cs_pack_writer_add_record(cs_pack_writer *writer, const cs_pack_meta *meta,
                              const void *bytes, size_t length, cs_pack_error *err);

/*
 * Emits padding, the canonical footer and the trailer; fills *summary when
 * not NULL. STATE for a writer opened with hash_elsewhere.
 */
int cs_pack_writer_finish(cs_pack_writer *writer, cs_pack_summary *summary, cs_pack_error *err);

/*
 * For a writer opened with hash_elsewhere: emits padding and the canonical
 * footer but not the trailer, and fills *summary (required) except the two
 * digests, which are zero; size_bytes counts the 64-byte trailer still to
 * come. The caller hashes every emitted byte, puts the digest so far in
 * summary->trailer_sha256, appends the trailer cs_pack_trailer_encode makes
 * and hashes it too for summary->sha256. STATE for a writer that hashes.
 */
int cs_pack_writer_finish_footer(cs_pack_writer *writer, cs_pack_summary *summary,
                                 cs_pack_error *err);

/* The trailer of the pack summary describes (footer fields and trailer_sha256). */
void cs_pack_trailer_encode(const cs_pack_summary *summary, uint8_t out[CS_PACK_TRAILER_SIZE]);

uint32_t cs_pack_writer_record_count(const cs_pack_writer *writer);
/* Bytes emitted so far. */
uint64_t cs_pack_writer_bytes_written(const cs_pack_writer *writer);
/* The size the whole object would have if finished now (for sealing decisions). */
uint64_t cs_pack_writer_size_if_finished(const cs_pack_writer *writer);

void cs_pack_writer_free(cs_pack_writer *writer);

/* ---- Reader ---------------------------------------------------------------- */

typedef struct cs_pack_header {
  uint16_t major_version;
  uint16_t minor_version;
  uint32_t header_size;
  cs_uuid pack_id;
  uint64_t created_at_ns;
  uint32_t flags;
} cs_pack_header;

typedef struct cs_pack_trailer {
  uint16_t major_version;
  uint16_t minor_version;
  uint64_t object_size;  /* as given to cs_pack_trailer_parse */
  uint64_t footer_offset;
  uint64_t footer_length;
  uint32_t footer_crc32;
  uint8_t sha256[32]; /* of every byte before the trailer */
} cs_pack_trailer;

/*
 * Parses the last 64 bytes of an object of object_size bytes. Refuses
 * TRUNCATED, BAD_MAGIC, UNKNOWN_MAJOR, NEWER_MINOR, FOOTER_TOO_LARGE,
 * OFFSET_LOW, ALIGNMENT and FOOTER_END.
 */
int cs_pack_trailer_parse(const uint8_t bytes[CS_PACK_TRAILER_SIZE], uint64_t object_size,
                          cs_pack_trailer *out, cs_pack_error *err);

/* Parses the first 64 bytes: BAD_MAGIC, UNKNOWN_MAJOR, NEWER_MINOR, HEADER_SIZE, HEADER_FIELD. */
int cs_pack_header_parse(const uint8_t bytes[CS_PACK_HEADER_SIZE], cs_pack_header *out,
                         cs_pack_error *err);

/* One record as the footer describes it. Text fields are NUL-terminated copies. */
typedef struct cs_pack_record {
  cs_pack_meta meta;
  uint64_t offset;
  uint64_t stored_length;
  uint64_t decoded_length;
  uint32_t crc32;
} cs_pack_record;

typedef struct cs_pack_footer {
  cs_uuid pack_id;
  uint64_t created_at_ns;
  uint16_t major_version;
  uint16_t minor_version;
  uint32_t record_count;
  cs_pack_record *records; /* record_count entries, in offset order */
  bool canonical;          /* the bytes are exactly the canonical encoding */
  void *storage_;          /* private: owns the record text */
} cs_pack_footer;

/*
 * Parses and validates the footer bytes [trailer->footer_offset,
 * +footer_length). Never needs a payload byte. Refuses FOOTER_CRC,
 * FOOTER_COMPLEX (the JSON would take more than CS_PACK_FOOTER_COST_FACTOR x
 * its length + 1 MiB to parse; checked before any tree is built),
 * FOOTER_JSON, KEY_MISSING, FIELD_TYPE, FIELD_RANGE, CODEC,
 * SHAPE_LENGTH, MISMATCH (versions differ from the trailer's),
 * TOO_MANY_RECORDS, DUPLICATE_ID and the layout kinds (OFFSET_LOW, ALIGNMENT,
 * RECORD_ORDER, GAP, RECORD_INTO_FOOTER). Keys the format does not define
 * are ignored at every level (a newer writer's additions), whatever their
 * values; duplicate keys are refused. NO_MEMORY means the process ran out of
 * memory, never that the footer is bad. On success the caller owns *out and
 * releases it with cs_pack_footer_free; on failure *out is left empty.
 */
int cs_pack_footer_parse(const cs_pack_trailer *trailer, const uint8_t *bytes, size_t length,
                         cs_pack_footer *out, cs_pack_error *err);

void cs_pack_footer_free(cs_pack_footer *footer);

/* The canonical footer JSON of a parsed footer, malloc'd; the caller frees it. */
int cs_pack_footer_encode(const cs_pack_footer *footer, char **out, size_t *out_len,
                          cs_pack_error *err);

/* Checks the header against the trailer and the footer (MISMATCH naming the field). */
int cs_pack_header_check(const cs_pack_header *header, const cs_pack_trailer *trailer,
                         const cs_pack_footer *footer, cs_pack_error *err);

/* ---- Full verifier (streams every byte, in order) ----------------------------- */

typedef struct cs_pack_verifier cs_pack_verifier;

/* trailer and footer must outlive the verifier. */
int cs_pack_verifier_new(const cs_pack_trailer *trailer, const cs_pack_footer *footer,
                         cs_pack_verifier **out, cs_pack_error *err);

/*
 * Feeds the next bytes of the object, from offset 0 on. Checks the header,
 * padding (PADDING), each payload's CRC-32 (PAYLOAD_CRC) as it completes, and
 * the streamed footer and trailer against the ones parsed.
 */
int cs_pack_verifier_update(cs_pack_verifier *verifier, const uint8_t *bytes, size_t length,
                            cs_pack_error *err);

/* Requires every byte seen; checks the SHA-256 (SHA256); fills *summary if not NULL. */
int cs_pack_verifier_finish(cs_pack_verifier *verifier, cs_pack_summary *summary,
                            cs_pack_error *err);

void cs_pack_verifier_free(cs_pack_verifier *verifier);

/* Trailer, footer, header and full verification of an object held in memory. */
int cs_pack_verify_buffer(const uint8_t *object, size_t size, cs_pack_summary *summary,
                          cs_pack_error *err);

/* ---- Object key and object metadata ---------------------------------------- */

/*
 * What the object key is made of: the first record's tenant, session, rank
 * and captured_at_ns (the date segment, DMI's rule; not the pack's
 * created_at_ns), and the pack id.
 */
typedef struct cs_pack_key_fields {
  cs_pack_text tenant_id;
  cs_pack_text session_id;
  uint32_t producer_rank;
  uint64_t captured_at_ns;
  cs_uuid pack_id;
} cs_pack_key_fields;

/*
 * One key segment: value percent-encoded except A-Za-z0-9 - _ . = (uppercase
 * hex, '~' as %7E); when the encoded form is over 160 bytes or starts with
 * "sha256-", "sha256-<lowercase hex SHA-256 of the raw value bytes>" instead.
 * out needs at least 3 * len + 1 bytes or 72, whichever is larger; writes a
 * terminating NUL. Returns CS_E_OK or CS_E_TOO_LARGE.
 */
int cs_pack_key_segment(const char *value, size_t len, char *out, size_t out_size,
                        size_t *out_len);

/*
 * "<prefix>v1/tenant=<t>/date=<yyyy-mm-dd>/session=<s>/rank=<r>/<pack_id>.dmi-pack"
 * into out[CS_KEY_MAX], NUL-terminated. The date is the UTC day of
 * captured_at_ns exactly as DMI computes it (through a double number of
 * seconds rounded to microseconds, so the last 500 to 1,024 ns of a UTC day
 * name the next day; docs/format.md section 6). prefix is empty or ends with
 * '/' (ARGUMENT otherwise); KEY_TOO_LONG when the key would not fit.
 */
int cs_pack_object_key(const char *prefix, size_t prefix_len, const cs_pack_key_fields *fields,
                       char out[CS_KEY_MAX], size_t *out_len, cs_pack_error *err);

/*
 * The key fields of a footer: its first record's (a pack whose records mix
 * tenants, sessions or ranks, as DMI writes them, is named by its first
 * record); STATE for a pack without records.
 */
int cs_pack_footer_key_fields(const cs_pack_footer *footer, cs_pack_key_fields *out,
                              cs_pack_error *err);

/* The key fields of a writer: its first record's (valid until it is freed); STATE before the first record. */
int cs_pack_writer_key_fields(const cs_pack_writer *writer, cs_pack_key_fields *out,
                              cs_pack_error *err);

#define CS_PACK_OBJECT_META_COUNT 5u

typedef struct cs_pack_object_meta_entry {
  const char *name; /* "dmi-format", ... (static) */
  char value[72];
} cs_pack_object_meta_entry;

typedef struct cs_pack_object_meta {
  const char *content_type; /* CS_PACK_CONTENT_TYPE */
  cs_pack_object_meta_entry entries[CS_PACK_OBJECT_META_COUNT];
} cs_pack_object_meta;

/* dmi-format, dmi-pack-id, dmi-sha256 (whole object), dmi-record-count, dmi-created-at-ns. */
void cs_pack_object_meta_fill(const cs_pack_summary *summary, cs_pack_object_meta *out);

#ifdef __cplusplus
}
#endif

#endif

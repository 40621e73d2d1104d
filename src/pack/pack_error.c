/* Error kinds of the pack format: names, coarse codes and the fill helper. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "pack_internal.h"

static const char *const kind_names[CS_PACK_E_KIND_COUNT_] = {
    [CS_PACK_OK] = "ok",
    [CS_PACK_E_ARGUMENT] = "argument",
    [CS_PACK_E_STATE] = "state",
    [CS_PACK_E_NO_MEMORY] = "no_memory",
    [CS_PACK_E_WRITE] = "write",
    [CS_PACK_E_PAYLOAD_LENGTH] = "payload_length",
    [CS_PACK_E_TRUNCATED] = "truncated",
    [CS_PACK_E_BAD_MAGIC] = "bad_magic",
    [CS_PACK_E_UNKNOWN_MAJOR] = "unknown_major",
    [CS_PACK_E_NEWER_MINOR] = "newer_minor",
    [CS_PACK_E_HEADER_SIZE] = "header_size",
    [CS_PACK_E_HEADER_FIELD] = "header_field",
    [CS_PACK_E_MISMATCH] = "mismatch",
    [CS_PACK_E_OFFSET_LOW] = "offset_low",
    [CS_PACK_E_ALIGNMENT] = "alignment",
    [CS_PACK_E_RECORD_ORDER] = "record_order",
    [CS_PACK_E_GAP] = "gap",
    [CS_PACK_E_RECORD_INTO_FOOTER] = "record_into_footer",
    [CS_PACK_E_FOOTER_END] = "footer_end",
    [CS_PACK_E_FOOTER_TOO_LARGE] = "footer_too_large",
    [CS_PACK_E_TOO_MANY_RECORDS] = "too_many_records",
    [CS_PACK_E_FOOTER_CRC] = "footer_crc",
    [CS_PACK_E_FOOTER_JSON] = "footer_json",
    [CS_PACK_E_KEY_UNKNOWN] = "key_unknown",
    [CS_PACK_E_KEY_MISSING] = "key_missing",
    [CS_PACK_E_FIELD_TYPE] = "field_type",
    [CS_PACK_E_FIELD_RANGE] = "field_range",
    [CS_PACK_E_CODEC] = "codec",
    [CS_PACK_E_SHAPE_LENGTH] = "shape_length",
    [CS_PACK_E_DUPLICATE_ID] = "duplicate_id",
    [CS_PACK_E_PADDING] = "padding",
    [CS_PACK_E_PAYLOAD_CRC] = "payload_crc",
    [CS_PACK_E_SHA256] = "sha256",
    [CS_PACK_E_KEY_FIELDS] = "key_fields",
    [CS_PACK_E_KEY_TOO_LONG] = "key_too_long",
    [CS_PACK_E_FOOTER_COMPLEX] = "footer_complex",
};

const char *cs_pack_error_kind_name(cs_pack_error_kind kind) {
  if ((unsigned)kind >= (unsigned)CS_PACK_E_KIND_COUNT_) return "unknown_kind";
  assert(kind_names[kind] != NULL);
  return kind_names[kind];
}

bool cs_pack_error_is_verdict(cs_pack_error_kind kind) {
  switch (kind) {
  case CS_PACK_OK:
  case CS_PACK_E_ARGUMENT:
  case CS_PACK_E_STATE:
  case CS_PACK_E_NO_MEMORY:
  case CS_PACK_E_WRITE:
  case CS_PACK_E_PAYLOAD_LENGTH:
  case CS_PACK_E_KIND_COUNT_: return false;
  default: return true;
  }
}

int pk_code(cs_pack_error_kind kind) {
  switch (kind) {
  case CS_PACK_OK: return CS_E_OK;
  case CS_PACK_E_ARGUMENT:
  case CS_PACK_E_PAYLOAD_LENGTH:
  case CS_PACK_E_KEY_FIELDS: return CS_E_INVALID_ARGUMENT;
  case CS_PACK_E_STATE: return CS_E_STATE;
  case CS_PACK_E_NO_MEMORY: return CS_E_NO_MEMORY;
  case CS_PACK_E_WRITE: return CS_E_IO;
  case CS_PACK_E_UNKNOWN_MAJOR:
  case CS_PACK_E_NEWER_MINOR:
  case CS_PACK_E_CODEC: return CS_E_UNSUPPORTED;
  case CS_PACK_E_FOOTER_TOO_LARGE:
  case CS_PACK_E_FOOTER_COMPLEX:
  case CS_PACK_E_TOO_MANY_RECORDS:
  case CS_PACK_E_KEY_TOO_LONG: return CS_E_TOO_LARGE;
  case CS_PACK_E_FOOTER_JSON:
  case CS_PACK_E_KEY_UNKNOWN:
  case CS_PACK_E_KEY_MISSING:
  case CS_PACK_E_FIELD_TYPE: return CS_E_PARSE;
  default: break;
  }
  assert(kind > CS_PACK_OK && kind < CS_PACK_E_KIND_COUNT_);
  return CS_E_CORRUPT;
}

void pk_clear(cs_pack_error *err) {
  if (err == NULL) return;
  err->kind = CS_PACK_OK;
  err->record_index = CS_PACK_NO_RECORD;
  err->offset = CS_PACK_NO_OFFSET;
  err->field[0] = '\0';
  err->message[0] = '\0';
}

int pk_fail(cs_pack_error *err, cs_pack_error_kind kind, uint32_t record_index, uint64_t offset,
            const char *field, const char *format, ...) {
  assert(kind != CS_PACK_OK && kind < CS_PACK_E_KIND_COUNT_);
  assert(format != NULL);
  if (err != NULL) {
    err->kind = kind;
    err->record_index = record_index;
    err->offset = offset;
    snprintf(err->field, sizeof err->field, "%s", field == NULL ? "" : field);
    va_list args;
    va_start(args, format);
    vsnprintf(err->message, sizeof err->message, format, args);
    va_end(args);
  }
  return pk_code(kind);
}

void pk_hex_lower(const uint8_t *bytes, size_t len, char *out) {
  static const char digits[] = "0123456789abcdef";
  assert(bytes != NULL || len == 0);
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * len] = '\0';
}

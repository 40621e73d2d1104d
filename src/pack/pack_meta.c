/* Descriptors: dtypes, UTF-8 and the ranges of the 21 metadata fields. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "pack_internal.h"

/* Canonical order: bytewise sorted, as json.dumps(sort_keys=True) emits them. */
const char *const pk_meta_field_names[PK_META_FIELD_COUNT] = {
    "adapter_revision", "batch_position", "capture_id",     "capture_policy_version",
    "captured_at_ns",   "dtype",          "experiment_id",  "hook_name",
    "layer_number",     "model_id",       "model_revision", "producer_rank",
    "request_id",       "run_id",         "sequence_id",    "session_id",
    "shape",            "step_number",    "tenant_id",      "token_end",
    "token_start",
};

static const struct {
  const char *name;
  uint32_t item_size;
} dtypes[CS_DTYPE_COUNT_] = {
    [CS_DTYPE_BOOL] = {"bool", 1},         [CS_DTYPE_UINT8] = {"uint8", 1},
    [CS_DTYPE_INT8] = {"int8", 1},         [CS_DTYPE_INT16] = {"int16", 2},
    [CS_DTYPE_INT32] = {"int32", 4},       [CS_DTYPE_INT64] = {"int64", 8},
    [CS_DTYPE_FLOAT16] = {"float16", 2},   [CS_DTYPE_BFLOAT16] = {"bfloat16", 2},
    [CS_DTYPE_FLOAT32] = {"float32", 4},   [CS_DTYPE_FLOAT64] = {"float64", 8},
};

const char *cs_dtype_name(cs_dtype dtype) {
  if ((unsigned)dtype >= (unsigned)CS_DTYPE_COUNT_) return NULL;
  return dtypes[dtype].name;
}

uint32_t cs_dtype_item_size(cs_dtype dtype) {
  if ((unsigned)dtype >= (unsigned)CS_DTYPE_COUNT_) return 0;
  assert(dtypes[dtype].item_size >= 1 && dtypes[dtype].item_size <= 8);
  return dtypes[dtype].item_size;
}

int cs_dtype_parse(const char *name, size_t name_len, cs_dtype *out) {
  assert(out != NULL);
  if (name == NULL) return CS_E_NOT_FOUND;
  for (uint32_t i = 0; i < (uint32_t)CS_DTYPE_COUNT_; i++) {
    if (strlen(dtypes[i].name) == name_len && memcmp(dtypes[i].name, name, name_len) == 0) {
      *out = (cs_dtype)i;
      return CS_E_OK;
    }
  }
  return CS_E_NOT_FOUND;
}

/* Length of the sequence a lead byte starts, or 0 for a byte that cannot lead. */
static uint32_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool pk_utf8_next(const uint8_t *bytes, size_t len, size_t *pos, uint32_t *code_point) {
  assert(bytes != NULL && pos != NULL && *pos < len);
  uint32_t need = utf8_sequence_length(bytes[*pos]);
  if (need == 0 || len - *pos < need) return false;
  static const uint8_t lead_masks[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  uint32_t cp = bytes[*pos] & lead_masks[need];
  for (uint32_t i = 1; i < need; i++) {
    uint8_t next = bytes[*pos + i];
    if ((next & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (next & 0x3Fu);
  }
  static const uint32_t minimum[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < minimum[need] || cp > 0x10FFFF) return false;   /* overlong or too large */
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;           /* surrogates are not scalars */
  *pos += need;
  *code_point = cp;
  return true;
}

bool pk_utf8_valid(const char *bytes, size_t len) {
  const uint8_t *data = (const uint8_t *)bytes;
  size_t pos = 0;
  uint32_t cp = 0;
  while (pos < len) {
    if (data[pos] < 0x80) { /* ASCII, the common case: one byte, no decoding */
      pos++;
      continue;
    }
    if (!pk_utf8_next(data, len, &pos, &cp)) return false;
  }
  assert(pos == len);
  return true;
}

/*
 * "record 7: " or "descriptor: " when the descriptor is not (yet) a record of
 * a pack. Formatted only on a refusal: validation runs on every capture call.
 */
typedef struct where_text {
  char text[32];
} where_text;

static where_text where_of(uint32_t record_index) {
  where_text w;
  if (record_index == CS_PACK_NO_RECORD) {
    snprintf(w.text, sizeof w.text, "descriptor: ");
  } else {
    snprintf(w.text, sizeof w.text, "record %u: ", record_index);
  }
  return w;
}

static cs_pack_error_kind check_text(const char *name, cs_pack_text text, bool nullable,
                                     uint32_t record, cs_pack_error *err) {
  if (text.bytes == NULL) {
    if (nullable) return CS_PACK_OK;
    pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, name,
            "%sfield %s is null; only adapter_revision may be null", where_of(record).text, name);
    return CS_PACK_E_FIELD_RANGE;
  }
  if (text.len == 0 || text.len > CS_PACK_TEXT_BYTES_MAX) {
    pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, name,
            "%sfield %s is %zu bytes; text fields hold 1..%u bytes of UTF-8", where_of(record).text, name,
            text.len, CS_PACK_TEXT_BYTES_MAX);
    return CS_PACK_E_FIELD_RANGE;
  }
  if (!pk_utf8_valid(text.bytes, text.len)) {
    pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, name,
            "%sfield %s is not valid UTF-8", where_of(record).text, name);
    return CS_PACK_E_FIELD_RANGE;
  }
  return CS_PACK_OK;
}

static cs_pack_error_kind check_texts(const cs_pack_meta *meta, uint32_t record,
                                      cs_pack_error *err) {
  const struct {
    const char *name;
    cs_pack_text text;
  } texts[] = {
      {"capture_id", meta->capture_id},       {"tenant_id", meta->tenant_id},
      {"experiment_id", meta->experiment_id}, {"run_id", meta->run_id},
      {"session_id", meta->session_id},       {"request_id", meta->request_id},
      {"sequence_id", meta->sequence_id},     {"model_id", meta->model_id},
      {"model_revision", meta->model_revision},
      {"capture_policy_version", meta->capture_policy_version},
      {"hook_name", meta->hook_name},
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    cs_pack_error_kind kind = check_text(texts[i].name, texts[i].text, false, record, err);
    if (kind != CS_PACK_OK) return kind;
  }
  return check_text("adapter_revision", meta->adapter_revision, true, record, err);
}

static cs_pack_error_kind check_numbers(const cs_pack_meta *meta, uint32_t record,
                                        cs_pack_error *err) {
  if (meta->layer_number < -1) {
    pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, "layer_number",
            "%sfield layer_number is %d; it must be -1 .. 2^31-1", where_of(record).text,
            (int)meta->layer_number);
    return CS_PACK_E_FIELD_RANGE;
  }
  if (meta->token_end < meta->token_start) {
    pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, "token_end",
            "%sfield token_end %llu is below token_start %llu", where_of(record).text,
            (unsigned long long)meta->token_end, (unsigned long long)meta->token_start);
    return CS_PACK_E_FIELD_RANGE;
  }
  if (cs_dtype_name(meta->dtype) == NULL) {
    pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, "dtype",
            "%sfield dtype %d is not one of the 10 dtypes", where_of(record).text, (int)meta->dtype);
    return CS_PACK_E_FIELD_RANGE;
  }
  if (meta->rank > CS_PACK_RANK_MAX) {
    pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, "shape",
            "%sfield shape has rank %u; at most %u dimensions", where_of(record).text, meta->rank,
            CS_PACK_RANK_MAX);
    return CS_PACK_E_FIELD_RANGE;
  }
  for (uint32_t i = 0; i < meta->rank; i++) {
    if (meta->shape[i] > CS_PACK_DIM_MAX) {
      pk_fail(err, CS_PACK_E_FIELD_RANGE, record, CS_PACK_NO_OFFSET, "shape",
              "%sfield shape dimension %u is %u; each must be 0 .. 2^31-1", where_of(record).text, i,
              meta->shape[i]);
      return CS_PACK_E_FIELD_RANGE;
    }
  }
  return CS_PACK_OK;
}

/* prod(shape) x itemsize, or false when it exceeds 2^64-1 (a zero dimension wins). */
static bool element_bytes(const cs_pack_meta *meta, uint64_t *out) {
  uint64_t total = cs_dtype_item_size(meta->dtype);
  assert(total != 0 && meta->rank <= CS_PACK_RANK_MAX);
  for (uint32_t i = 0; i < meta->rank; i++) {
    if (meta->shape[i] == 0) {
      *out = 0;
      return true;
    }
  }
  for (uint32_t i = 0; i < meta->rank; i++) {
    if (total > UINT64_MAX / meta->shape[i]) return false;
    total *= meta->shape[i];
  }
  *out = total;
  return true;
}

cs_pack_error_kind pk_meta_check(const cs_pack_meta *meta, uint64_t decoded_length,
                                 uint32_t record, cs_pack_error *err) {
  assert(meta != NULL);
  cs_pack_error_kind kind = check_texts(meta, record, err);
  if (kind == CS_PACK_OK) kind = check_numbers(meta, record, err);
  if (kind != CS_PACK_OK) return kind;
  uint64_t expected = 0;
  if (!element_bytes(meta, &expected)) {
    pk_fail(err, CS_PACK_E_SHAPE_LENGTH, record, CS_PACK_NO_OFFSET, "shape",
            "%sprod(shape) x itemsize(%s) exceeds 2^64-1; decoded length is %llu", where_of(record).text,
            cs_dtype_name(meta->dtype), (unsigned long long)decoded_length);
    return CS_PACK_E_SHAPE_LENGTH;
  }
  if (expected != decoded_length) {
    pk_fail(err, CS_PACK_E_SHAPE_LENGTH, record, CS_PACK_NO_OFFSET, "shape",
            "%sprod(shape) x itemsize(%s) is %llu bytes but the decoded length is %llu",
            where_of(record).text, cs_dtype_name(meta->dtype), (unsigned long long)expected,
            (unsigned long long)decoded_length);
    return CS_PACK_E_SHAPE_LENGTH;
  }
  return CS_PACK_OK;
}

int cs_pack_meta_validate(const cs_pack_meta *meta, uint64_t decoded_length, cs_pack_error *err) {
  pk_clear(err);
  if (meta == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "meta",
                   "meta is NULL");
  }
  cs_pack_error_kind kind = pk_meta_check(meta, decoded_length, CS_PACK_NO_RECORD, err);
  return kind == CS_PACK_OK ? CS_E_OK : CS_E_INVALID_ARGUMENT;
}

/*
 * The fixed part: the record's and the metadata's keys, quotes, colons,
 * commas and braces (about 420 bytes) and at most 20 digits for each of its
 * eleven numbers, rounded up.
 */
#define FOOTER_RECORD_FIXED_BYTES 1024u
#define FOOTER_ESCAPE_BYTES 6u    /* "\u00XX": the longest escape of one text byte */
#define FOOTER_DIMENSION_BYTES 11u /* ten digits and a comma */

uint64_t cs_pack_meta_footer_bytes_max(const cs_pack_meta *meta) {
  assert(meta != NULL);
  const cs_pack_text texts[] = {meta->capture_id,        meta->tenant_id,   meta->experiment_id,
                                meta->run_id,            meta->session_id,  meta->request_id,
                                meta->sequence_id,       meta->model_id,    meta->model_revision,
                                meta->adapter_revision,  meta->capture_policy_version, meta->hook_name};
  uint64_t bytes = FOOTER_RECORD_FIXED_BYTES + (uint64_t)meta->rank * FOOTER_DIMENSION_BYTES;
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) bytes += 2u + FOOTER_ESCAPE_BYTES * texts[i].len;
  assert(bytes >= FOOTER_RECORD_FIXED_BYTES);
  return bytes;
}

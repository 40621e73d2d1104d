/* Typed access to parsed JSON objects: known keys, integers, text, metadata. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "pack_json.h"

/* An integer read from JSON: sign and magnitude cover -2^63 .. 2^64-1. */
typedef struct jin_int {
  bool negative;
  uint64_t magnitude;
} jin_int;

/* What a JSON value holds, read as an integer. */
typedef enum jin_int_status {
  JIN_INT_OK,
  JIN_INT_NOT_NUMBER,
  JIN_INT_REAL,         /* a number with a fraction or an exponent */
  JIN_INT_OUT_OF_RANGE, /* an integer beyond -2^63 .. 2^64-1 */
} jin_int_status;

static jin_int_status jin_int_of(const pk_json_doc *doc, json_t *value, jin_int *out,
                                 uint64_t *offset) {
  if (json_is_integer(value)) {
    json_int_t v = json_integer_value(value);
    out->negative = v < 0;
    out->magnitude = v < 0 ? (uint64_t)(-(v + 1)) + 1u : (uint64_t)v;
    return JIN_INT_OK;
  }
  if (!json_is_real(value)) return JIN_INT_NOT_NUMBER;
  /* Every real in the tree is a placeholder "<k>.5" pk_jin_load put there. */
  double d = json_real_value(value);
  assert(d >= 0.5 && d < (double)doc->number_count);
  size_t k = (size_t)d;
  assert(k < doc->number_count && (double)k + 0.5 == d);
  const pk_jin_number *number = &doc->numbers[k];
  *offset = number->original_start;
  if (number->kind == PK_JIN_REAL) return JIN_INT_REAL;
  if (number->kind == PK_JIN_OUT_OF_RANGE) return JIN_INT_OUT_OF_RANGE;
  out->negative = false;
  out->magnitude = number->value;
  return JIN_INT_OK;
}

/* A key as printable ASCII for messages, cut short when long. */
static void printable_key(const char *key, size_t len, char *out, size_t out_size) {
  size_t o = 0;
  for (size_t i = 0; i < len && o + 5 < out_size; i++) {
    unsigned char c = (unsigned char)key[i];
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out[o++] = (char)c;
    } else {
      o += (size_t)snprintf(out + o, out_size - o, "\\x%02x", c);
    }
  }
  if (o >= out_size) o = out_size - 1;
  out[o] = '\0';
}

static bool name_known(const char *key, size_t len, const char *const *names, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (strlen(names[i]) == len && memcmp(names[i], key, len) == 0) return true;
  }
  return false;
}

int pk_jin_keys(const pk_jin_ctx *ctx, const json_t *object_in, const char *const *names,
                size_t name_count, cs_pack_error *err) {
  json_t *object = (json_t *)(uintptr_t)object_in; /* jansson's iterators take non-const */
  assert(json_is_object(object) && names != NULL);
  for (void *it = json_object_iter(object); it != NULL; it = json_object_iter_next(object, it)) {
    const char *key = json_object_iter_key(it);
    size_t len = json_object_iter_key_len(it);
    if (ctx->ignore_unknown || name_known(key, len, names, name_count)) continue;
    char shown[40];
    printable_key(key, len, shown, sizeof shown);
    return pk_fail(err, CS_PACK_E_KEY_UNKNOWN, ctx->record, CS_PACK_NO_OFFSET, shown,
                   "%s: key \"%s\" is not defined by dmi-pack-v1", ctx->path, shown);
  }
  for (size_t i = 0; i < name_count; i++) {
    if (json_object_get(object, names[i]) != NULL) continue;
    return pk_fail(err, CS_PACK_E_KEY_MISSING, ctx->record, CS_PACK_NO_OFFSET, names[i],
                   "%s: required key \"%s\" is missing", ctx->path, names[i]);
  }
  return CS_E_OK;
}

static int type_error(const pk_jin_ctx *ctx, const char *key, const char *wanted,
                      cs_pack_error *err) {
  return pk_fail(err, CS_PACK_E_FIELD_TYPE, ctx->record, CS_PACK_NO_OFFSET, key,
                 "%s: field %s is not %s", ctx->path, key, wanted);
}

/* An integer in lo_negative/lo .. hi, as a jin_int; FIELD_TYPE or FIELD_RANGE. */
static int get_int(const pk_jin_ctx *ctx, json_t *value, const char *key, uint64_t low_magnitude,
                   bool low_negative, uint64_t high, jin_int *out, cs_pack_error *err) {
  uint64_t at = CS_PACK_NO_OFFSET;
  jin_int_status status = value == NULL ? JIN_INT_NOT_NUMBER
                                        : jin_int_of(ctx->doc, value, out, &at);
  if (status == JIN_INT_NOT_NUMBER) return type_error(ctx, key, "an integer", err);
  if (status == JIN_INT_REAL) {
    return pk_fail(err, CS_PACK_E_FIELD_TYPE, ctx->record, at, key,
                   "%s: field %s is not an integer: the number at offset %llu has a fraction "
                   "or an exponent", ctx->path, key, (unsigned long long)at);
  }
  if (status == JIN_INT_OUT_OF_RANGE) {
    return pk_fail(err, CS_PACK_E_FIELD_RANGE, ctx->record, at, key,
                   "%s: field %s is outside -2^63 .. 2^64-1 (the integer at offset %llu)",
                   ctx->path, key, (unsigned long long)at);
  }
  bool below = out->negative ? (!low_negative || out->magnitude > low_magnitude)
                             : (!low_negative && out->magnitude < low_magnitude);
  if (below || (!out->negative && out->magnitude > high)) {
    return pk_fail(err, CS_PACK_E_FIELD_RANGE, ctx->record, CS_PACK_NO_OFFSET, key,
                   "%s: field %s is %s%llu, outside %s%llu .. %llu", ctx->path, key,
                   out->negative ? "-" : "", (unsigned long long)out->magnitude,
                   low_negative ? "-" : "", (unsigned long long)low_magnitude,
                   (unsigned long long)high);
  }
  return CS_E_OK;
}

int pk_jin_u64(const pk_jin_ctx *ctx, const json_t *object, const char *key, uint64_t *out,
               cs_pack_error *err) {
  jin_int v = {0};
  int rc = get_int(ctx, json_object_get(object, key), key, 0, false, UINT64_MAX, &v, err);
  if (rc == CS_E_OK) *out = v.magnitude;
  return rc;
}

static int get_u32(const pk_jin_ctx *ctx, const json_t *object, const char *key, uint32_t *out,
                   cs_pack_error *err) {
  jin_int v = {0};
  int rc = get_int(ctx, json_object_get(object, key), key, 0, false, UINT32_MAX, &v, err);
  if (rc == CS_E_OK) *out = (uint32_t)v.magnitude;
  return rc;
}

int pk_jin_text(const pk_jin_ctx *ctx, const json_t *object, const char *key, bool nullable,
                pk_arena *arena, cs_pack_text *out, cs_pack_error *err) {
  json_t *value = json_object_get(object, key);
  if (nullable && json_is_null(value)) {
    *out = (cs_pack_text){NULL, 0};
    return CS_E_OK;
  }
  if (!json_is_string(value)) {
    return type_error(ctx, key, nullable ? "a string or null" : "a string", err);
  }
  size_t len = json_string_length(value);
  const char *copy = pk_arena_copy(arena, json_string_value(value), len);
  if (copy == NULL) {
    return pk_fail(err, CS_PACK_E_NO_MEMORY, ctx->record, CS_PACK_NO_OFFSET, key,
                   "%s: allocation failed copying %s", ctx->path, key);
  }
  *out = (cs_pack_text){copy, len};
  return CS_E_OK;
}

static int get_shape(const pk_jin_ctx *ctx, const json_t *object, cs_pack_meta *out,
                     cs_pack_error *err) {
  json_t *shape = json_object_get(object, "shape");
  if (!json_is_array(shape)) return type_error(ctx, "shape", "an array of integers", err);
  size_t rank = json_array_size(shape);
  if (rank > CS_PACK_RANK_MAX) {
    return pk_fail(err, CS_PACK_E_FIELD_RANGE, ctx->record, CS_PACK_NO_OFFSET, "shape",
                   "%s: field shape has %zu dimensions; at most %u", ctx->path, rank,
                   CS_PACK_RANK_MAX);
  }
  for (size_t i = 0; i < rank; i++) {
    jin_int v;
    int rc = get_int(ctx, json_array_get(shape, i), "shape", 0, false, CS_PACK_DIM_MAX, &v, err);
    if (rc != CS_E_OK) return rc;
    out->shape[i] = (uint32_t)v.magnitude;
  }
  out->rank = (uint32_t)rank;
  return CS_E_OK;
}

static int get_dtype(const pk_jin_ctx *ctx, const json_t *object, cs_pack_meta *out,
                     cs_pack_error *err) {
  json_t *value = json_object_get(object, "dtype");
  if (!json_is_string(value)) return type_error(ctx, "dtype", "a string", err);
  if (cs_dtype_parse(json_string_value(value), json_string_length(value), &out->dtype) != 0) {
    char shown[40];
    printable_key(json_string_value(value), json_string_length(value), shown, sizeof shown);
    return pk_fail(err, CS_PACK_E_FIELD_RANGE, ctx->record, CS_PACK_NO_OFFSET, "dtype",
                   "%s: field dtype \"%s\" is not one of the 10 dtypes", ctx->path, shown);
  }
  return CS_E_OK;
}

static int get_texts(const pk_jin_ctx *ctx, const json_t *object, pk_arena *arena,
                     cs_pack_meta *m, cs_pack_error *err) {
  const struct {
    const char *key;
    cs_pack_text *slot;
  } texts[] = {
      {"adapter_revision", &m->adapter_revision},
      {"capture_id", &m->capture_id},
      {"capture_policy_version", &m->capture_policy_version},
      {"experiment_id", &m->experiment_id},
      {"hook_name", &m->hook_name},
      {"model_id", &m->model_id},
      {"model_revision", &m->model_revision},
      {"request_id", &m->request_id},
      {"run_id", &m->run_id},
      {"sequence_id", &m->sequence_id},
      {"session_id", &m->session_id},
      {"tenant_id", &m->tenant_id},
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    bool nullable = i == 0;
    int rc = pk_jin_text(ctx, object, texts[i].key, nullable, arena, texts[i].slot, err);
    if (rc != CS_E_OK) return rc;
  }
  return CS_E_OK;
}

static int get_numbers(const pk_jin_ctx *ctx, const json_t *object, cs_pack_meta *m,
                       cs_pack_error *err) {
  int rc = get_u32(ctx, object, "batch_position", &m->batch_position, err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, object, "captured_at_ns", &m->captured_at_ns, err);
  if (rc == CS_E_OK) {
    jin_int layer;
    rc = get_int(ctx, json_object_get(object, "layer_number"), "layer_number", 1, true,
                 (uint64_t)CS_PACK_LAYER_MAX, &layer, err);
    if (rc == CS_E_OK) m->layer_number = layer.negative ? -1 : (int32_t)layer.magnitude;
  }
  if (rc == CS_E_OK) rc = get_u32(ctx, object, "producer_rank", &m->producer_rank, err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, object, "step_number", &m->step_number, err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, object, "token_end", &m->token_end, err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, object, "token_start", &m->token_start, err);
  return rc;
}

int pk_jin_meta(const pk_jin_ctx *ctx, const json_t *object, pk_arena *arena, cs_pack_meta *out,
                cs_pack_error *err) {
  assert(ctx != NULL && arena != NULL && out != NULL);
  memset(out, 0, sizeof *out);
  if (!json_is_object(object)) return type_error(ctx, "metadata", "an object", err);
  int rc = pk_jin_keys(ctx, object, pk_meta_field_names, PK_META_FIELD_COUNT, err);
  if (rc == CS_E_OK) rc = get_texts(ctx, object, arena, out, err);
  if (rc == CS_E_OK) rc = get_numbers(ctx, object, out, err);
  if (rc == CS_E_OK) rc = get_dtype(ctx, object, out, err);
  if (rc == CS_E_OK) rc = get_shape(ctx, object, out, err);
  return rc;
}

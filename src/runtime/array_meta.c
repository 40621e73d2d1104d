/*
 * A capture array's identity and geometry document (capstore/array_meta.h),
 * through jansson: canonical out, strict in.
 */
#include "capstore/array_meta.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

static const char *const codec_names[] = {"none", "blosc"};

static int say(char *msg, size_t msg_size, int code, const char *what, const char *detail) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "%s%s%s", what, detail[0] ? ": " : "", detail);
  return code;
}

static bool id_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

int cs_array_id_check(const char *id, char *msg, size_t msg_size) {
  const int bad = CS_E_INVALID_ARGUMENT;
  if (id == NULL || id[0] == '\0') return say(msg, msg_size, bad, "array id", "empty");
  size_t len = strnlen(id, CS_ARRAY_ID_MAX + 1);
  if (len > CS_ARRAY_ID_MAX) return say(msg, msg_size, bad, "array id", "longer than 128 bytes");
  for (size_t i = 0; i < len; i++)
    if (!id_char(id[i])) return say(msg, msg_size, bad, "array id", "only A-Z a-z 0-9 . _ - (no '/': one key segment)");
  if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0) return say(msg, msg_size, bad, "array id", "'.' or '..'");
  return CS_E_OK;
}

/* The canonical text of an attributes object (NULL or "" for {}); CS_E_INVALID_ARGUMENT naming what is wrong. */
static int attributes_canonical(const char *text, char *out, size_t cap, char *msg, size_t msg_size) {
  if (text == NULL || text[0] == '\0') text = "{}";
  json_error_t err;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
  if (root == NULL) return say(msg, msg_size, CS_E_INVALID_ARGUMENT, "attributes: not JSON", err.text);
  int rc = CS_E_OK;
  if (!json_is_object(root)) {
    rc = say(msg, msg_size, CS_E_INVALID_ARGUMENT, "attributes", "must be a JSON object");
  } else {
    char *canon = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (canon == NULL) rc = say(msg, msg_size, CS_E_NO_MEMORY, "attributes", "cannot be encoded");
    else if (strlen(canon) > CS_ARRAY_ATTRIBUTES_MAX || strlen(canon) >= cap)
      rc = say(msg, msg_size, CS_E_INVALID_ARGUMENT, "attributes", "over 4096 bytes");
    else snprintf(out, cap, "%s", canon);
    free(canon);
  }
  json_decref(root);
  return rc;
}

int cs_array_meta_make(cs_array_meta *meta, const char *id, const cs_array_geometry *geometry, cs_dtype dtype,
                       cs_array_codec codec, const char *attributes_json, char *msg, size_t msg_size) {
  if (meta == NULL || geometry == NULL) return say(msg, msg_size, CS_E_INVALID_ARGUMENT, "array", "no geometry");
  memset(meta, 0, sizeof *meta);
  int rc = cs_array_id_check(id, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (cs_dtype_name(dtype) == NULL) return say(msg, msg_size, CS_E_INVALID_ARGUMENT, "dtype", "unknown");
  if ((unsigned)codec > CS_ARRAY_CODEC_BLOSC) return say(msg, msg_size, CS_E_INVALID_ARGUMENT, "codec", "unknown");
  meta->geometry = *geometry;
  meta->geometry.item_bytes = cs_dtype_item_size(dtype);
  rc = cs_array_geometry_check(&meta->geometry, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  rc = attributes_canonical(attributes_json, meta->attributes, sizeof meta->attributes, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  snprintf(meta->id, sizeof meta->id, "%s", id);
  meta->dtype = dtype;
  meta->codec = codec;
  return CS_E_OK;
}

/* Appends "[n,n,...]" of the first dims values. */
static int put_dims(char *out, size_t cap, size_t *at, const uint64_t *v, uint32_t dims) {
  for (uint32_t d = 0; d < dims; d++) {
    int n = snprintf(out + *at, cap - *at, "%s%llu", d == 0 ? "[" : ",", (unsigned long long)v[d]);
    if (n < 0 || (size_t)n >= cap - *at) return CS_E_TOO_LARGE;
    *at += (size_t)n;
  }
  if (*at + 1 >= cap) return CS_E_TOO_LARGE;
  out[(*at)++] = ']';
  out[*at] = '\0';
  return CS_E_OK;
}

int cs_array_meta_encode(const cs_array_meta *meta, char *out, size_t cap, size_t *len) {
  if (meta == NULL || out == NULL || len == NULL || cap == 0) return CS_E_INVALID_ARGUMENT;
  assert(cs_dtype_name(meta->dtype) != NULL && (unsigned)meta->codec <= CS_ARRAY_CODEC_BLOSC);
  /* Keys in byte order: attributes, chunk, codec, dtype, format, id, shape. */
  int n = snprintf(out, cap, "{\"attributes\":%s,\"chunk\":", meta->attributes);
  if (n < 0 || (size_t)n >= cap) return CS_E_TOO_LARGE;
  size_t at = (size_t)n;
  if (put_dims(out, cap, &at, meta->geometry.chunk, meta->geometry.dims) != CS_E_OK) return CS_E_TOO_LARGE;
  n = snprintf(out + at, cap - at, ",\"codec\":\"%s\",\"dtype\":\"%s\",\"format\":\"%s\",\"id\":\"%s\",\"shape\":",
               codec_names[meta->codec], cs_dtype_name(meta->dtype), CS_ARRAY_META_FORMAT, meta->id);
  if (n < 0 || (size_t)n >= cap - at) return CS_E_TOO_LARGE;
  at += (size_t)n;
  if (put_dims(out, cap, &at, meta->geometry.shape, meta->geometry.dims) != CS_E_OK) return CS_E_TOO_LARGE;
  if (at + 2 > cap) return CS_E_TOO_LARGE;
  out[at++] = '}';
  out[at] = '\0';
  *len = at;
  return CS_E_OK;
}

/* A "shape" or "chunk" array of 1..8 positive integers into v; its length in *dims. */
static int get_dims(json_t *root, const char *key, uint64_t v[CS_ARRAY_DIMS_MAX], uint32_t *dims, char *msg,
                    size_t msg_size) {
  json_t *a = json_object_get(root, key);
  if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > CS_ARRAY_DIMS_MAX)
    return say(msg, msg_size, CS_E_PARSE, key, "must be an array of 1 to 8 integers");
  *dims = (uint32_t)json_array_size(a);
  for (uint32_t d = 0; d < *dims; d++) {
    json_t *x = json_array_get(a, d);
    if (!json_is_integer(x) || json_integer_value(x) < 1)
      return say(msg, msg_size, CS_E_PARSE, key, "every extent must be an integer >= 1");
    v[d] = (uint64_t)json_integer_value(x);
  }
  return CS_E_OK;
}

/* A string field's value, or NULL (message said) when absent or not a string. */
static const char *get_text(json_t *root, const char *key, char *msg, size_t msg_size) {
  json_t *x = json_object_get(root, key);
  if (json_is_string(x) && strlen(json_string_value(x)) == json_string_length(x)) return json_string_value(x);
  say(msg, msg_size, CS_E_PARSE, key, "must be a string without NUL");
  return NULL;
}

static int decode_root(json_t *root, cs_array_meta *out, char *msg, size_t msg_size) {
  if (!json_is_object(root)) return say(msg, msg_size, CS_E_PARSE, "array document", "not a JSON object");
  static const char *const keys[] = {"attributes", "chunk", "codec", "dtype", "format", "id", "shape"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (json_object_get(root, keys[i]) == NULL) return say(msg, msg_size, CS_E_PARSE, keys[i], "missing");
  if (json_object_size(root) != sizeof keys / sizeof keys[0])
    return say(msg, msg_size, CS_E_PARSE, "array document", "has a field this version does not know");
  const char *format = get_text(root, "format", msg, msg_size);
  if (format == NULL) return CS_E_PARSE;
  if (strcmp(format, CS_ARRAY_META_FORMAT) != 0) return say(msg, msg_size, CS_E_PARSE, "format", "not capstore-array-v1");
  cs_array_geometry g = {0};
  uint32_t chunk_dims = 0;
  int rc = get_dims(root, "shape", g.shape, &g.dims, msg, msg_size);
  if (rc == CS_E_OK) rc = get_dims(root, "chunk", g.chunk, &chunk_dims, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (chunk_dims != g.dims) return say(msg, msg_size, CS_E_PARSE, "chunk", "not as many extents as shape");
  const char *dtype = get_text(root, "dtype", msg, msg_size), *codec = get_text(root, "codec", msg, msg_size);
  const char *id = get_text(root, "id", msg, msg_size);
  if (dtype == NULL || codec == NULL || id == NULL) return CS_E_PARSE;
  cs_dtype dt;
  if (cs_dtype_parse(dtype, strlen(dtype), &dt) != CS_E_OK) return say(msg, msg_size, CS_E_PARSE, "dtype", "unknown");
  int c = strcmp(codec, "none") == 0 ? CS_ARRAY_CODEC_NONE : strcmp(codec, "blosc") == 0 ? CS_ARRAY_CODEC_BLOSC : -1;
  if (c < 0) return say(msg, msg_size, CS_E_PARSE, "codec", "neither none nor blosc");
  json_t *attrs = json_object_get(root, "attributes");
  if (!json_is_object(attrs)) return say(msg, msg_size, CS_E_PARSE, "attributes", "must be a JSON object");
  char *attr_text = json_dumps(attrs, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
  if (attr_text == NULL) return say(msg, msg_size, CS_E_NO_MEMORY, "attributes", "cannot be encoded");
  rc = cs_array_meta_make(out, id, &g, dt, (cs_array_codec)c, attr_text, msg, msg_size);
  free(attr_text);
  return rc == CS_E_OK ? CS_E_OK : CS_E_PARSE;
}

int cs_array_meta_decode(const char *bytes, size_t len, cs_array_meta *out, char *msg, size_t msg_size) {
  if (bytes == NULL || out == NULL) return CS_E_INVALID_ARGUMENT;
  if (len > CS_ARRAY_META_BYTES_MAX) return say(msg, msg_size, CS_E_TOO_LARGE, "array document", "over its size bound");
  json_error_t err;
  json_t *root = json_loadb(bytes, len, JSON_REJECT_DUPLICATES, &err);
  if (root == NULL) return say(msg, msg_size, CS_E_PARSE, "array document: not JSON", err.text);
  int rc = decode_root(root, out, msg, msg_size);
  json_decref(root);
  if (rc != CS_E_OK) return rc;
  /* Only the canonical bytes: the object's key is their hash, so any other spelling of the same document
     would be a second key for one array (or a document that does not hash to its key). */
  char canon[CS_ARRAY_META_BYTES_MAX];
  size_t canon_len = 0;
  if (cs_array_meta_encode(out, canon, sizeof canon, &canon_len) != CS_E_OK || canon_len != len ||
      memcmp(canon, bytes, len) != 0)
    return say(msg, msg_size, CS_E_PARSE, "array document", "not in canonical form (keys sorted, no spaces)");
  return CS_E_OK;
}

const char *cs_array_meta_diff(const cs_array_meta *a, const cs_array_meta *b, char *buf, size_t cap) {
  assert(a != NULL && b != NULL && buf != NULL && cap > 0);
  if (strcmp(a->id, b->id) != 0) return "id";
  if (a->dtype != b->dtype) return "dtype";
  if (a->codec != b->codec) return "codec";
  if (a->geometry.dims != b->geometry.dims) return "shape (its number of dimensions)";
  for (uint32_t d = 0; d < a->geometry.dims; d++) {
    const char *field = a->geometry.shape[d] != b->geometry.shape[d]   ? "shape"
                        : a->geometry.chunk[d] != b->geometry.chunk[d] ? "chunk"
                                                                       : NULL;
    if (field == NULL) continue;
    snprintf(buf, cap, "%s[%u]", field, (unsigned)d);
    return buf;
  }
  if (strcmp(a->attributes, b->attributes) != 0) return "attributes";
  return NULL;
}

int cs_array_meta_hash(const cs_array_meta *meta, char out[CS_ARRAY_META_HASH_HEX + 1]) {
  if (meta == NULL || out == NULL) return CS_E_INVALID_ARGUMENT;
  char text[CS_ARRAY_META_BYTES_MAX];
  size_t len = 0;
  int rc = cs_array_meta_encode(meta, text, sizeof text, &len);
  if (rc != CS_E_OK) return rc;
  uint8_t digest[32];
  unsigned int digest_len = 0;
  if (EVP_Digest(text, len, digest, &digest_len, EVP_sha256(), NULL) != 1 || digest_len != 32) return CS_E_NO_MEMORY;
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", digest[i]);
  return CS_E_OK;
}

int cs_array_meta_key(const cs_array_meta *meta, const char *prefix, char *out, size_t cap) {
  if (meta == NULL || out == NULL || cap == 0) return CS_E_INVALID_ARGUMENT;
  char hex[CS_ARRAY_META_HASH_HEX + 1];
  int rc = cs_array_meta_hash(meta, hex);
  if (rc != CS_E_OK) return rc;
  int n = snprintf(out, cap, "%sarrays/%s/geometry-%s.json", prefix != NULL ? prefix : "", meta->id, hex);
  return n < 0 || (size_t)n >= cap ? CS_E_TOO_LARGE : CS_E_OK;
}

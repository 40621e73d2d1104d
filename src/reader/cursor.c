/*
 * The search cursor: "cs1." and the lowercase hex of
 *   watermark (8, LE) | filter hash (8) | pack id (16) | offset (8, LE) |
 *   capture id length (2, LE) | capture id | check (8)
 * where check is the first 8 bytes of the SHA-256 of everything before it.
 * The check catches a damaged or hand-edited cursor; it is not a secret (a
 * reader who can search can read any page anyway). The filter hash ties a
 * cursor to the filter that made it.
 */
#include "reader_internal.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#define CURSOR_PREFIX "cs1."
#define CURSOR_PREFIX_LEN 4u
#define CURSOR_FIXED (8u + 8u + 16u + 8u + 2u)
#define CURSOR_CHECK 8u
#define CURSOR_BLOB_MAX (CURSOR_FIXED + CS_SEARCH_KEY_ID_MAX + CURSOR_CHECK)

/* The first n (<= 32) bytes of SHA-256(bytes); CS_E_NO_MEMORY when OpenSSL fails. */
static int sha256_prefix(const void *bytes, size_t len, uint8_t *out, size_t n) {
  uint8_t digest[32];
  unsigned int digest_len = 0;
  if (EVP_Digest(bytes, len, digest, &digest_len, EVP_sha256(), NULL) != 1 || digest_len != 32) return CS_E_NO_MEMORY;
  memcpy(out, digest, n);
  return CS_E_OK;
}

/* A growing canonical encoding of a filter: each field a tag, then its length and bytes or its value. */
typedef struct enc {
  EVP_MD_CTX *ctx;
  bool failed;
} enc;

static void enc_bytes(enc *e, const void *bytes, size_t len) {
  if (!e->failed && len > 0 && EVP_DigestUpdate(e->ctx, bytes, len) != 1) e->failed = true;
}

static void enc_u64(enc *e, uint64_t value) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(value >> (8 * i));
  enc_bytes(e, b, 8);
}

static void enc_text(enc *e, char tag, const cs_pack_text *t) {
  enc_bytes(e, &tag, 1);
  enc_u64(e, t->bytes == NULL ? UINT64_MAX : (uint64_t)t->len); /* absent differs from empty */
  if (t->bytes != NULL) enc_bytes(e, t->bytes, t->len);
}

static void enc_range(enc *e, char tag, bool has, uint64_t min, uint64_t max) {
  enc_bytes(e, &tag, 1);
  enc_u64(e, has ? 1 : 0);
  enc_u64(e, has ? min : 0);
  enc_u64(e, has ? max : 0);
}

int rd_filter_hash(const cs_search_filter *f, uint8_t out[8]) {
  enc e = {.ctx = EVP_MD_CTX_new()};
  if (e.ctx == NULL || EVP_DigestInit_ex(e.ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(e.ctx);
    return CS_E_NO_MEMORY;
  }
  const cs_pack_text *texts[8] = {&f->tenant_id,  &f->experiment_id, &f->run_id,   &f->session_id,
                                  &f->request_id, &f->sequence_id,   &f->model_id, &f->model_revision};
  for (int i = 0; i < 8; i++) enc_text(&e, (char)('a' + i), texts[i]);
  enc_range(&e, 'h', true, f->hook_name_count, 0);
  for (uint32_t i = 0; i < f->hook_name_count; i++) enc_text(&e, 'H', &f->hook_names[i]);
  enc_range(&e, 'i', true, f->capture_id_count, 0);
  for (uint32_t i = 0; i < f->capture_id_count; i++) enc_text(&e, 'I', &f->capture_ids[i]);
  enc_range(&e, 'l', f->has_layer, (uint64_t)(int64_t)f->layer_min, (uint64_t)(int64_t)f->layer_max);
  enc_range(&e, 's', f->has_step, f->step_min, f->step_max);
  enc_range(&e, 't', f->has_tokens, f->token_min, f->token_max);
  enc_range(&e, 'c', f->has_captured_at, f->captured_min_ns, f->captured_max_ns);
  enc_range(&e, 'd', f->has_dtype, (uint64_t)f->dtype, 0);
  uint8_t digest[32];
  unsigned int len = 0;
  bool ok = !e.failed && EVP_DigestFinal_ex(e.ctx, digest, &len) == 1 && len == 32;
  EVP_MD_CTX_free(e.ctx);
  if (!ok) return CS_E_NO_MEMORY;
  memcpy(out, digest, 8);
  return CS_E_OK;
}

static void put_le(uint8_t *out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(value >> (8 * i));
}

static uint64_t get_le(const uint8_t *in, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; i--) value = value << 8 | in[i];
  return value;
}

int rd_cursor_format(const rd_cursor *c, char *out, size_t size) {
  if (c->after.capture_id_len > CS_SEARCH_KEY_ID_MAX) return CS_E_TOO_LARGE;
  uint8_t blob[CURSOR_BLOB_MAX];
  size_t n = 0;
  put_le(blob, c->watermark, 8);
  memcpy(blob + 8, c->filter_hash, 8);
  memcpy(blob + 16, c->after.pack_id.bytes, 16);
  put_le(blob + 32, c->after.offset, 8);
  put_le(blob + 40, c->after.capture_id_len, 2);
  n = CURSOR_FIXED;
  memcpy(blob + n, c->after.capture_id, c->after.capture_id_len);
  n += c->after.capture_id_len;
  int rc = sha256_prefix(blob, n, blob + n, CURSOR_CHECK);
  if (rc != CS_E_OK) return rc;
  n += CURSOR_CHECK;
  if (size < CURSOR_PREFIX_LEN + 2 * n + 1) return CS_E_TOO_LARGE;
  memcpy(out, CURSOR_PREFIX, CURSOR_PREFIX_LEN);
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[CURSOR_PREFIX_LEN + 2 * i] = digits[blob[i] >> 4];
    out[CURSOR_PREFIX_LEN + 2 * i + 1] = digits[blob[i] & 15];
  }
  out[CURSOR_PREFIX_LEN + 2 * n] = '\0';
  return CS_E_OK;
}

static int cursor_refuse(char *msg, size_t msg_size, const char *why) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "cursor: %s", why);
  return CS_E_PARSE;
}

int rd_cursor_parse(const char *text, size_t len, rd_cursor *out, char *msg, size_t msg_size) {
  if (text == NULL || len < CURSOR_PREFIX_LEN || memcmp(text, CURSOR_PREFIX, CURSOR_PREFIX_LEN) != 0)
    return cursor_refuse(msg, msg_size, "not a capstore cursor (it starts with \"cs1.\")");
  size_t hex = len - CURSOR_PREFIX_LEN;
  if (hex % 2 != 0 || hex / 2 < CURSOR_FIXED + CURSOR_CHECK || hex / 2 > CURSOR_BLOB_MAX)
    return cursor_refuse(msg, msg_size, "not a capstore cursor (wrong length: cut short or run together?)");
  uint8_t blob[CURSOR_BLOB_MAX];
  size_t n = hex / 2;
  if (cs_hex_decode(text + CURSOR_PREFIX_LEN, hex, CS_HEX_LOWER, blob) != CS_E_OK)
    return cursor_refuse(msg, msg_size, "not a capstore cursor (a character other than 0-9 a-f)");
  size_t id_len = (size_t)get_le(blob + 40, 2);
  if (id_len > CS_SEARCH_KEY_ID_MAX || CURSOR_FIXED + id_len + CURSOR_CHECK != n)
    return cursor_refuse(msg, msg_size, "damaged or forged (its lengths disagree)");
  uint8_t check[CURSOR_CHECK];
  if (sha256_prefix(blob, n - CURSOR_CHECK, check, CURSOR_CHECK) != CS_E_OK) {
    if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "cursor: SHA-256 failed (out of memory)");
    return CS_E_NO_MEMORY;
  }
  if (memcmp(check, blob + n - CURSOR_CHECK, CURSOR_CHECK) != 0)
    return cursor_refuse(msg, msg_size, "damaged or forged (its check does not match)");
  memset(out, 0, sizeof *out);
  out->watermark = get_le(blob, 8);
  memcpy(out->filter_hash, blob + 8, 8);
  memcpy(out->after.pack_id.bytes, blob + 16, 16);
  out->after.offset = get_le(blob + 32, 8);
  out->after.capture_id_len = id_len;
  memcpy(out->after.capture_id, blob + CURSOR_FIXED, id_len);
  if (out->watermark > (uint64_t)INT64_MAX || out->after.offset > (uint64_t)INT64_MAX)
    return cursor_refuse(msg, msg_size, "damaged or forged (a field out of range)");
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

/*
 * test_pack_util.h: helpers shared by the pack tests: an in-memory sink for
 * the writer, valid packs to start from, and surgery that corrupts one thing
 * and re-seals the rest (footer CRC, SHA-256) so that exactly the check under
 * test is the one that fires.
 */
#ifndef CAPSTORE_TEST_PACK_UTIL_H
#define CAPSTORE_TEST_PACK_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "capstore/pack.h"

typedef struct tp_bytes {
  uint8_t *data;
  size_t len;
  size_t cap;
  int fail_at; /* > 0: the write callback fails from this call on (1-based) */
  int calls;
} tp_bytes;

static inline void tp_append(tp_bytes *b, const void *bytes, size_t len) {
  if (b->len + len > b->cap) {
    size_t cap = b->cap == 0 ? 4096 : b->cap;
    while (cap < b->len + len) cap *= 2;
    b->data = realloc(b->data, cap);
    assert_non_null(b->data);
    b->cap = cap;
  }
  if (len > 0) memcpy(b->data + b->len, bytes, len);
  b->len += len;
}

static inline int tp_write(void *context, const uint8_t *bytes, size_t len) {
  tp_bytes *b = context;
  b->calls++;
  if (b->fail_at > 0 && b->calls >= b->fail_at) return -1;
  tp_append(b, bytes, len);
  return 0;
}

static inline void tp_free(tp_bytes *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

static inline cs_uuid tp_uuid(uint8_t seed) {
  cs_uuid id;
  for (int i = 0; i < 16; i++) id.bytes[i] = (uint8_t)(seed + i * 17);
  return id;
}

/* A valid descriptor of a uint8 vector of `length` elements. */
static inline cs_pack_meta tp_meta(const char *capture_id, uint32_t length) {
  cs_pack_meta m;
  memset(&m, 0, sizeof m);
  m.capture_id = cs_pack_text_of(capture_id);
  m.tenant_id = cs_pack_text_of("tenant-a");
  m.experiment_id = cs_pack_text_of("exp");
  m.run_id = cs_pack_text_of("run");
  m.session_id = cs_pack_text_of("session-a");
  m.request_id = cs_pack_text_of("req");
  m.sequence_id = cs_pack_text_of("seq");
  m.model_id = cs_pack_text_of("model");
  m.model_revision = cs_pack_text_of("rev");
  m.adapter_revision = cs_pack_text_of(NULL);
  m.capture_policy_version = cs_pack_text_of("p1");
  m.hook_name = cs_pack_text_of("layers.0");
  m.layer_number = 0;
  m.producer_rank = 0;
  m.step_number = 1;
  m.token_start = 2;
  m.token_end = 3;
  m.batch_position = 0;
  m.dtype = CS_DTYPE_UINT8;
  m.rank = 1;
  m.shape[0] = length;
  m.captured_at_ns = 1717171717000000000u;
  return m;
}

static inline cs_pack_writer *tp_open(tp_bytes *out) {
  cs_pack_writer_config config = {.pack_id = tp_uuid(1),
                                  .created_at_ns = 1717171717123456789u,
                                  .write = tp_write,
                                  .write_context = out};
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
  assert_non_null(w);
  return w;
}

/* A valid pack of uint8 records with the given lengths; record i is "cap-<i>". */
static inline tp_bytes tp_build(uint32_t count, const uint32_t *lengths) {
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  for (uint32_t i = 0; i < count; i++) {
    char id[32];
    snprintf(id, sizeof id, "cap-%u", i);
    cs_pack_meta m = tp_meta(id, lengths[i]);
    uint8_t *payload = malloc(lengths[i] + 1);
    for (uint32_t j = 0; j < lengths[i]; j++) payload[j] = (uint8_t)(i * 31 + j + 1);
    cs_pack_error err;
    assert_int_equal(cs_pack_writer_add_record(w, &m, payload, lengths[i], &err), CS_E_OK);
    free(payload);
  }
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  cs_pack_writer_free(w);
  return out;
}

static inline uint64_t tp_get_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static inline void tp_put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint8_t *tp_trailer(const tp_bytes *p) { return p->data + p->len - 64; }

/* Recomputes the footer CRC-32 and the SHA-256 in the trailer from the bytes as they are. */
static inline void tp_reseal(tp_bytes *p) {
  uint8_t *t = tp_trailer(p);
  uint64_t off = tp_get_le(t + 12, 8);
  uint64_t len = tp_get_le(t + 20, 8);
  if (off + len <= p->len - 64) {
    tp_put_le(t + 28, crc32_z(0, p->data + off, (size_t)len), 4);
  }
  unsigned int n = 0;
  assert_int_equal(EVP_Digest(p->data, p->len - 64, t + 32, &n, EVP_sha256(), NULL), 1);
}

/* The same pack with another footer text (and a trailer sealed for it). */
static inline tp_bytes tp_with_footer(const tp_bytes *p, const char *footer, size_t len) {
  uint64_t off = tp_get_le(tp_trailer(p) + 12, 8);
  tp_bytes out = {0};
  tp_append(&out, p->data, (size_t)off);
  tp_append(&out, footer, len);
  uint8_t trailer[64];
  memcpy(trailer, tp_trailer(p), 64);
  tp_put_le(trailer + 20, len, 8);
  tp_append(&out, trailer, 64);
  tp_reseal(&out);
  return out;
}

/* The footer with the first `from` replaced by `to`; fails the test if absent. */
static inline tp_bytes tp_replace(const tp_bytes *p, const char *from, const char *to) {
  uint8_t *t = tp_trailer(p);
  uint64_t off = tp_get_le(t + 12, 8);
  size_t len = (size_t)tp_get_le(t + 20, 8);
  const char *footer = (const char *)p->data + off;
  size_t from_len = strlen(from), to_len = strlen(to);
  const char *hit = NULL;
  for (size_t i = 0; i + from_len <= len && hit == NULL; i++) {
    if (memcmp(footer + i, from, from_len) == 0) hit = footer + i;
  }
  if (hit == NULL) fail_msg("footer has no \"%s\"", from);
  size_t before = (size_t)(hit - footer);
  char *text = malloc(len - from_len + to_len + 1);
  memcpy(text, footer, before);
  memcpy(text + before, to, to_len);
  memcpy(text + before + to_len, hit + from_len, len - before - from_len);
  tp_bytes out = tp_with_footer(p, text, len - from_len + to_len);
  free(text);
  return out;
}

static inline cs_pack_error tp_verify(const tp_bytes *p) {
  cs_pack_error err;
  memset(&err, 0, sizeof err);
  int rc = cs_pack_verify_buffer(p->data, p->len, NULL, &err);
  if (rc == CS_E_OK) assert_int_equal(err.kind, CS_PACK_OK);
  return err;
}

/* Asserts the refusal kind and that the message mentions `needle`. */
#define tp_expect(err, want_kind, needle)                                                    \
  do {                                                                                        \
    if ((err).kind != (want_kind) || strstr((err).message, (needle)) == NULL) {               \
      fail_msg("want %s mentioning \"%s\"; got %s: %s", cs_pack_error_kind_name(want_kind),   \
               (needle), cs_pack_error_kind_name((err).kind), (err).message);                 \
    }                                                                                         \
  } while (0)

static inline tp_bytes tp_read_file(const char *path) {
  tp_bytes out = {0};
  FILE *f = fopen(path, "rb");
  if (f == NULL) fail_msg("cannot open %s", path);
  uint8_t chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) tp_append(&out, chunk, n);
  fclose(f);
  return out;
}

#endif

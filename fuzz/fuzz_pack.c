/*
 * libFuzzer target for the pack reader: trailer, footer and full verify.
 *
 * Each input is tried three ways, so mutations get past the checksums:
 *   1. as an object, verbatim;
 *   2. as an object with its footer CRC-32 and SHA-256 re-sealed, so the
 *      header, layout, JSON and payload checks behind them are reached;
 *   3. as footer JSON alone, under a synthetic trailer (footer at offset 64).
 * Whatever the reader accepts must round-trip: its canonical footer parses
 * again to the same records, and a verified pack with a canonical footer is
 * rebuilt byte for byte by the writer from what the reader extracted.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "capstore/pack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct sink {
  const uint8_t *expected;
  size_t size;
  size_t position;
  int differs;
} sink;

/* Compares what the writer emits with the original object, byte for byte. */
static int compare_write(void *context, const uint8_t *bytes, size_t length) {
  sink *s = context;
  if (length > s->size - s->position || memcmp(s->expected + s->position, bytes, length) != 0) {
    s->differs = 1;
  }
  s->position += length;
  return 0;
}

static void check_rewrite(const uint8_t *object, size_t size, const cs_pack_footer *f) {
  sink s = {.expected = object, .size = size};
  cs_pack_writer_config config = {.pack_id = f->pack_id,
                                  .created_at_ns = f->created_at_ns,
                                  .write = compare_write,
                                  .write_context = &s,
                                  .mixed_keys = true}; /* as DMI writes them */
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  if (cs_pack_writer_open(&config, &w, &err) != CS_E_OK) abort();
  for (uint32_t i = 0; i < f->record_count; i++) {
    const cs_pack_record *r = &f->records[i];
    int rc = cs_pack_writer_add_record(w, &r->meta, object + r->offset, r->stored_length, &err);
    if (rc != CS_E_OK) abort(); /* the writer refused what the reader accepted */
  }
  cs_pack_summary summary;
  if (cs_pack_writer_finish(w, &summary, &err) != CS_E_OK) abort();
  if (s.differs || s.position != size || summary.size_bytes != size) abort();
  cs_pack_writer_free(w);
}

static void check_accepted(const uint8_t *object, size_t size) {
  cs_pack_trailer t;
  cs_pack_footer f;
  cs_pack_error err;
  if (cs_pack_trailer_parse(object + size - CS_PACK_TRAILER_SIZE, size, &t, &err) != CS_E_OK) {
    abort();
  }
  if (cs_pack_footer_parse(&t, object + t.footer_offset, t.footer_length, &f, &err) != CS_E_OK) {
    abort();
  }
  if (f.canonical) check_rewrite(object, size, &f);
  cs_pack_key_fields fields;
  if (cs_pack_footer_key_fields(&f, &fields, &err) == CS_E_OK) {
    char key[CS_KEY_MAX];
    size_t key_len = 0;
    if (cs_pack_object_key("fuzz/", 5, &fields, key, &key_len, &err) != CS_E_OK) abort();
    cs_uuid id;
    if (cs_key_pack_id(key, key_len, &id) != CS_E_OK || !cs_uuid_equal(&id, &f.pack_id)) abort();
  }
  cs_pack_footer_free(&f);
}

/* The footer JSON re-encoded from a parsed footer parses to the same records. */
static void check_footer_round_trip(const cs_pack_trailer *t, const cs_pack_footer *f) {
  char *text = NULL;
  size_t len = 0;
  cs_pack_error err;
  if (cs_pack_footer_encode(f, &text, &len, &err) != CS_E_OK) abort();
  cs_pack_trailer t2 = *t;
  t2.footer_length = len;
  t2.object_size = t2.footer_offset + len + CS_PACK_TRAILER_SIZE;
  t2.footer_crc32 = (uint32_t)crc32_z(0, (const uint8_t *)text, len);
  cs_pack_footer again;
  if (cs_pack_footer_parse(&t2, (const uint8_t *)text, len, &again, &err) != CS_E_OK) abort();
  if (!again.canonical || again.record_count != f->record_count) abort();
  for (uint32_t i = 0; i < f->record_count; i++) {
    if (again.records[i].offset != f->records[i].offset ||
        again.records[i].crc32 != f->records[i].crc32 ||
        again.records[i].meta.step_number != f->records[i].meta.step_number) {
      abort();
    }
  }
  cs_pack_footer_free(&again);
  free(text);
}

static void try_object(const uint8_t *data, size_t size) {
  cs_pack_error err;
  cs_pack_summary summary;
  if (cs_pack_verify_buffer(data, size, &summary, &err) == CS_E_OK) {
    if (summary.size_bytes != size) abort();
    check_accepted(data, size);
  } else if (err.kind == CS_PACK_OK || err.message[0] == '\0') {
    abort(); /* every refusal names itself */
  }
}

/* Re-seals footer CRC-32 and SHA-256 so that the checks behind them are reached. */
static void try_resealed(const uint8_t *data, size_t size) {
  if (size < CS_PACK_HEADER_SIZE + CS_PACK_TRAILER_SIZE) return;
  uint8_t *copy = malloc(size);
  if (copy == NULL) return;
  memcpy(copy, data, size);
  uint8_t *trailer = copy + size - CS_PACK_TRAILER_SIZE;
  uint64_t offset = 0, length = 0;
  for (int i = 7; i >= 0; i--) {
    offset = offset << 8 | trailer[12 + i];
    length = length << 8 | trailer[20 + i];
  }
  if (offset <= size - CS_PACK_TRAILER_SIZE && length <= size - CS_PACK_TRAILER_SIZE - offset) {
    uint32_t crc = (uint32_t)crc32_z(0, copy + offset, (size_t)length);
    for (int i = 0; i < 4; i++) trailer[28 + i] = (uint8_t)(crc >> (8 * i));
  }
  unsigned int n = 0;
  EVP_Digest(copy, size - CS_PACK_TRAILER_SIZE, trailer + 32, &n, EVP_sha256(), NULL);
  try_object(copy, size);
  free(copy);
}

/* The input as the footer of a pack without payload bytes (zero-length records only). */
static void try_footer(const uint8_t *data, size_t size) {
  if (size > CS_PACK_FOOTER_BYTES_MAX) return;
  cs_pack_trailer t = {.major_version = 1,
                       .footer_offset = CS_PACK_HEADER_SIZE,
                       .footer_length = size,
                       .footer_crc32 = (uint32_t)crc32_z(0, data, size)};
  t.object_size = t.footer_offset + size + CS_PACK_TRAILER_SIZE;
  cs_pack_footer f;
  cs_pack_error err;
  if (cs_pack_footer_parse(&t, data, size, &f, &err) != CS_E_OK) return;
  check_footer_round_trip(&t, &f);
  cs_pack_footer_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try_object(data, size);
  try_resealed(data, size);
  try_footer(data, size);
  return 0;
}

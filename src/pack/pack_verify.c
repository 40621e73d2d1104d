/*
 * The full verifier: streams every byte of the object in order, once, and
 * checks what the footer alone cannot: the header, zero padding, each
 * payload's CRC-32, the footer and trailer bytes as streamed, and the SHA-256
 * of everything before the trailer.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "pack_internal.h"

struct cs_pack_verifier {
  const cs_pack_trailer *trailer;
  const cs_pack_footer *footer;
  EVP_MD_CTX *sha; /* every byte before the trailer, then the trailer too */
  uint64_t position;
  uint64_t trailer_start;
  bool failed; /* a refusal was reported: later calls are refused too */
  uint32_t record_index; /* the first record whose CRC is not yet checked */
  uint32_t record_crc;
  uint32_t footer_crc;
  uint8_t trailer_sha256[32];
  uint8_t head[CS_PACK_HEADER_SIZE];
  uint8_t tail[CS_PACK_TRAILER_SIZE];
};

int cs_pack_verifier_new(const cs_pack_trailer *trailer, const cs_pack_footer *footer,
                         cs_pack_verifier **out, cs_pack_error *err) {
  pk_clear(err);
  if (trailer == NULL || footer == NULL || out == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "trailer, footer and out must not be NULL");
  }
  *out = NULL;
  cs_pack_verifier *v = calloc(1, sizeof *v);
  if (v == NULL) return pk_fail(err, CS_PACK_E_NO_MEMORY, 0, 0, "", "verifier allocation failed");
  v->sha = EVP_MD_CTX_new();
  if (v->sha == NULL || EVP_DigestInit_ex(v->sha, EVP_sha256(), NULL) != 1) {
    cs_pack_verifier_free(v);
    return pk_fail(err, CS_PACK_E_NO_MEMORY, 0, 0, "", "verifier allocation failed");
  }
  assert(trailer->object_size >= CS_PACK_HEADER_SIZE + CS_PACK_TRAILER_SIZE);
  v->trailer = trailer;
  v->footer = footer;
  v->trailer_start = trailer->object_size - CS_PACK_TRAILER_SIZE;
  v->record_crc = pk_crc32(0, NULL, 0);
  v->footer_crc = v->record_crc;
  *out = v;
  return CS_E_OK;
}

/* Checks the CRC of every record that ends at or before the current position. */
static int close_records(cs_pack_verifier *v, cs_pack_error *err) {
  const cs_pack_footer *f = v->footer;
  while (v->record_index < f->record_count) {
    const cs_pack_record *r = &f->records[v->record_index];
    if (v->position < r->offset + r->stored_length) return CS_E_OK;
    if (v->record_crc != r->crc32) {
      return pk_fail(err, CS_PACK_E_PAYLOAD_CRC, v->record_index, r->offset, "checksum",
                     "record %u at offset %llu has CRC-32 %08x; the footer says %08x",
                     v->record_index, (unsigned long long)r->offset, v->record_crc, r->crc32);
    }
    v->record_crc = pk_crc32(0, NULL, 0);
    v->record_index++;
  }
  return CS_E_OK;
}

static int take_header(cs_pack_verifier *v, const uint8_t *bytes, size_t n, cs_pack_error *err) {
  memcpy(v->head + v->position, bytes, n);
  if (v->position + n < CS_PACK_HEADER_SIZE) return CS_E_OK;
  cs_pack_header header;
  int rc = cs_pack_header_parse(v->head, &header, err);
  if (rc == CS_E_OK) rc = cs_pack_header_check(&header, v->trailer, v->footer, err);
  return rc;
}

/* Payload bytes or padding between position and the footer. */
static int take_body(cs_pack_verifier *v, const uint8_t *bytes, size_t *n, cs_pack_error *err) {
  const cs_pack_footer *f = v->footer;
  uint64_t boundary = v->trailer->footer_offset;
  if (v->record_index < f->record_count) {
    const cs_pack_record *r = &f->records[v->record_index];
    if (v->position >= r->offset) {
      assert(v->position < r->offset + r->stored_length);
      uint64_t left = r->offset + r->stored_length - v->position;
      if (*n > left) *n = (size_t)left;
      v->record_crc = pk_crc32(v->record_crc, bytes, *n);
      return CS_E_OK;
    }
    boundary = r->offset;
  }
  if (*n > boundary - v->position) *n = (size_t)(boundary - v->position);
  for (size_t i = 0; i < *n; i++) {
    if (bytes[i] == 0) continue;
    uint64_t at = v->position + i;
    return pk_fail(err, CS_PACK_E_PADDING, CS_PACK_NO_RECORD, at, "",
                   "padding byte at offset %llu is 0x%02x, not zero", (unsigned long long)at,
                   bytes[i]);
  }
  return CS_E_OK;
}

static int take_footer(cs_pack_verifier *v, const uint8_t *bytes, size_t n, cs_pack_error *err) {
  v->footer_crc = pk_crc32(v->footer_crc, bytes, n);
  if (v->position + n < v->trailer_start) return CS_E_OK;
  if (v->footer_crc != v->trailer->footer_crc32) {
    return pk_fail(err, CS_PACK_E_FOOTER_CRC, CS_PACK_NO_RECORD, v->trailer->footer_offset,
                   "trailer.footer_crc32",
                   "streamed footer at offset %llu has CRC-32 %08x; the trailer says %08x",
                   (unsigned long long)v->trailer->footer_offset, v->footer_crc,
                   v->trailer->footer_crc32);
  }
  return CS_E_OK;
}

/* At the trailer's first byte: the digest of everything before it. */
static int seal_prefix(cs_pack_verifier *v, cs_pack_error *err) {
  EVP_MD_CTX *copy = EVP_MD_CTX_new();
  unsigned int len = 0;
  bool ok = copy != NULL && EVP_MD_CTX_copy_ex(copy, v->sha) == 1 &&
            EVP_DigestFinal_ex(copy, v->trailer_sha256, &len) == 1 && len == 32;
  EVP_MD_CTX_free(copy);
  if (!ok) return pk_fail(err, CS_PACK_E_NO_MEMORY, 0, v->position, "", "SHA-256 copy failed");
  return CS_E_OK;
}

/* Consumes up to *n bytes of one region; *n becomes the bytes consumed. */
static int take_region(cs_pack_verifier *v, const uint8_t *bytes, size_t *n, cs_pack_error *err) {
  int rc = close_records(v, err);
  if (rc != CS_E_OK) return rc;
  if (v->position < CS_PACK_HEADER_SIZE) {
    if (*n > CS_PACK_HEADER_SIZE - v->position) *n = (size_t)(CS_PACK_HEADER_SIZE - v->position);
    return take_header(v, bytes, *n, err);
  }
  if (v->position < v->trailer->footer_offset) return take_body(v, bytes, n, err);
  if (v->position < v->trailer_start) {
    if (*n > v->trailer_start - v->position) *n = (size_t)(v->trailer_start - v->position);
    return take_footer(v, bytes, *n, err);
  }
  if (v->position == v->trailer_start) {
    rc = seal_prefix(v, err);
    if (rc != CS_E_OK) return rc;
  }
  if (*n > v->trailer->object_size - v->position) {
    *n = (size_t)(v->trailer->object_size - v->position);
  }
  memcpy(v->tail + (v->position - v->trailer_start), bytes, *n);
  return CS_E_OK;
}

int cs_pack_verifier_update(cs_pack_verifier *v, const uint8_t *bytes, size_t length,
                            cs_pack_error *err) {
  pk_clear(err);
  if (v == NULL || (bytes == NULL && length > 0)) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "verifier and bytes must not be NULL");
  }
  if (v->failed) {
    return pk_fail(err, CS_PACK_E_STATE, CS_PACK_NO_RECORD, v->position, "",
                   "the verifier already refused this object at offset %llu",
                   (unsigned long long)v->position);
  }
  if (length > v->trailer->object_size - v->position) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, v->position, "",
                   "%zu more bytes at offset %llu pass the object size %llu", length,
                   (unsigned long long)v->position, (unsigned long long)v->trailer->object_size);
  }
  while (length > 0) {
    size_t n = length < PK_SLICE_BYTES ? length : PK_SLICE_BYTES;
    int rc = take_region(v, bytes, &n, err);
    if (rc != CS_E_OK) {
      v->failed = true;
      return rc;
    }
    assert(n > 0 && n <= length);
    if (EVP_DigestUpdate(v->sha, bytes, n) != 1) {
      return pk_fail(err, CS_PACK_E_NO_MEMORY, 0, v->position, "", "SHA-256 update failed");
    }
    v->position += n;
    bytes += n;
    length -= n;
  }
  return CS_E_OK;
}

/* The streamed trailer must be the one parsed, and its SHA-256 must match. */
static int check_tail(cs_pack_verifier *v, cs_pack_error *err) {
  cs_pack_trailer streamed;
  int rc = cs_pack_trailer_parse(v->tail, v->trailer->object_size, &streamed, err);
  if (rc != CS_E_OK) return rc;
  const cs_pack_trailer *t = v->trailer;
  if (streamed.footer_offset != t->footer_offset || streamed.footer_length != t->footer_length ||
      streamed.footer_crc32 != t->footer_crc32 || memcmp(streamed.sha256, t->sha256, 32) != 0) {
    return pk_fail(err, CS_PACK_E_MISMATCH, CS_PACK_NO_RECORD, v->trailer_start, "trailer",
                   "the streamed trailer at offset %llu differs from the trailer parsed",
                   (unsigned long long)v->trailer_start);
  }
  if (memcmp(v->trailer_sha256, t->sha256, 32) != 0) {
    char want[65], got[65];
    pk_hex_lower(t->sha256, 32, want);
    pk_hex_lower(v->trailer_sha256, 32, got);
    return pk_fail(err, CS_PACK_E_SHA256, CS_PACK_NO_RECORD, v->trailer_start + 32,
                   "trailer.sha256",
                   "SHA-256 of bytes 0..%llu is %s; the trailer at offset %llu says %s",
                   (unsigned long long)v->trailer_start, got,
                   (unsigned long long)(v->trailer_start + 32), want);
  }
  return CS_E_OK;
}

int cs_pack_verifier_finish(cs_pack_verifier *v, cs_pack_summary *summary, cs_pack_error *err) {
  pk_clear(err);
  if (v == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "verifier is NULL");
  }
  if (v->failed) {
    return pk_fail(err, CS_PACK_E_STATE, CS_PACK_NO_RECORD, v->position, "",
                   "the verifier already refused this object at offset %llu",
                   (unsigned long long)v->position);
  }
  if (v->position != v->trailer->object_size) {
    return pk_fail(err, CS_PACK_E_TRUNCATED, CS_PACK_NO_RECORD, v->position, "",
                   "only %llu of %llu bytes were given", (unsigned long long)v->position,
                   (unsigned long long)v->trailer->object_size);
  }
  assert(v->record_index == v->footer->record_count);
  int rc = check_tail(v, err);
  if (rc != CS_E_OK) return rc;
  cs_pack_summary s = {.pack_id = v->footer->pack_id,
                       .created_at_ns = v->footer->created_at_ns,
                       .size_bytes = v->trailer->object_size,
                       .footer_offset = v->trailer->footer_offset,
                       .footer_length = v->trailer->footer_length,
                       .record_count = v->footer->record_count,
                       .footer_crc32 = v->trailer->footer_crc32};
  memcpy(s.trailer_sha256, v->trailer_sha256, 32);
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(v->sha, s.sha256, &len) != 1 || len != 32) {
    return pk_fail(err, CS_PACK_E_NO_MEMORY, 0, v->position, "", "SHA-256 final failed");
  }
  if (summary != NULL) *summary = s;
  return CS_E_OK;
}

void cs_pack_verifier_free(cs_pack_verifier *v) {
  if (v == NULL) return;
  EVP_MD_CTX_free(v->sha);
  free(v);
}

int cs_pack_verify_buffer(const uint8_t *object, size_t size, cs_pack_summary *summary,
                          cs_pack_error *err) {
  pk_clear(err);
  if (object == NULL && size > 0) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "object is NULL");
  }
  if (size < CS_PACK_HEADER_SIZE + CS_PACK_TRAILER_SIZE) {
    return pk_fail(err, CS_PACK_E_TRUNCATED, CS_PACK_NO_RECORD, size, "object_size",
                   "object of %zu bytes is shorter than a header and a trailer (128)", size);
  }
  cs_pack_trailer trailer;
  int rc = cs_pack_trailer_parse(object + size - CS_PACK_TRAILER_SIZE, size, &trailer, err);
  if (rc != CS_E_OK) return rc;
  cs_pack_footer footer;
  rc = cs_pack_footer_parse(&trailer, object + trailer.footer_offset,
                            (size_t)trailer.footer_length, &footer, err);
  if (rc != CS_E_OK) return rc;
  cs_pack_verifier *v = NULL;
  rc = cs_pack_verifier_new(&trailer, &footer, &v, err);
  if (rc == CS_E_OK) rc = cs_pack_verifier_update(v, object, size, err);
  if (rc == CS_E_OK) rc = cs_pack_verifier_finish(v, summary, err);
  cs_pack_verifier_free(v);
  cs_pack_footer_free(&footer);
  return rc;
}

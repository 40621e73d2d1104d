/*
 * The streaming writer. It holds no payload: every appended byte is hashed
 * (CRC-32 of the record, SHA-256 of the object) and handed to the write
 * callback slice by slice, so each slice is read from memory once. It keeps
 * only the footer entries (bounded by the footer limit) and the capture ids.
 * With hash_elsewhere the SHA-256 is the caller's (the capture runtime hashes
 * on its own thread) and the writer stops before the trailer.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "pack_internal.h"

struct cs_pack_writer {
  cs_pack_writer_config config; /* limits resolved to their effective values */
  EVP_MD_CTX *sha;
  uint64_t position; /* bytes emitted so far */
  uint32_t record_count;
  bool failed;   /* the callback or the hash failed: the stream is unusable */
  bool finished;
  bool in_record;
  uint64_t record_offset;
  uint64_t record_length;
  uint64_t record_written;
  uint32_t record_crc;
  size_t record_crc_at; /* where the checksum digits of the open record sit in entries */
  pk_buf head;          /* the footer up to the records array */
  pk_buf entries;       /* the record entries, comma-separated */
  pk_idset *ids;
  char *tenant_id; /* key fields of the first record (copies) */
  size_t tenant_len;
  char *session_id;
  size_t session_len;
  uint32_t producer_rank;
  uint64_t captured_at_ns; /* the first record's: the object key's date */
};

static const uint8_t zeros[CS_PACK_ALIGNMENT];

static int fail_stream(cs_pack_writer *w, cs_pack_error *err, cs_pack_error_kind kind,
                       const char *what) {
  w->failed = true;
  return pk_fail(err, kind, w->record_count, w->position, "",
                 "%s at offset %llu; the pack is unusable", what,
                 (unsigned long long)w->position);
}

/* Hashes and writes bytes slice by slice; the CRC too when crc is not NULL. */
static int emit(cs_pack_writer *w, const uint8_t *bytes, size_t len, uint32_t *crc,
                cs_pack_error *err) {
  assert(!w->failed && (bytes != NULL || len == 0));
  while (len > 0) {
    size_t slice = len < PK_SLICE_BYTES ? len : PK_SLICE_BYTES;
    if (crc != NULL) *crc = pk_crc32(*crc, bytes, slice);
    if (w->sha != NULL && EVP_DigestUpdate(w->sha, bytes, slice) != 1) {
      return fail_stream(w, err, CS_PACK_E_NO_MEMORY, "SHA-256 update failed");
    }
    if (w->config.write(w->config.write_context, bytes, slice) != 0) {
      return fail_stream(w, err, CS_PACK_E_WRITE, "the write callback failed");
    }
    w->position += slice;
    bytes += slice;
    len -= slice;
  }
  return CS_E_OK;
}

static int emit_padding(cs_pack_writer *w, cs_pack_error *err) {
  uint64_t target = pk_align_up(w->position);
  assert(target - w->position < CS_PACK_ALIGNMENT);
  return emit(w, zeros, (size_t)(target - w->position), NULL, err);
}

static int resolve_limits(cs_pack_writer_config *config, cs_pack_error *err) {
  if (config->records_max == 0) config->records_max = CS_PACK_RECORDS_MAX;
  if (config->footer_bytes_max == 0) config->footer_bytes_max = CS_PACK_FOOTER_BYTES_MAX;
  if (config->records_max > CS_PACK_RECORDS_MAX) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "records_max",
                   "records_max %u is above the format's %u", config->records_max,
                   CS_PACK_RECORDS_MAX);
  }
  if (config->footer_bytes_max > CS_PACK_FOOTER_BYTES_MAX) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET,
                   "footer_bytes_max", "footer_bytes_max %llu is above the format's %u",
                   (unsigned long long)config->footer_bytes_max, CS_PACK_FOOTER_BYTES_MAX);
  }
  return CS_E_OK;
}

int cs_pack_writer_open(const cs_pack_writer_config *config, cs_pack_writer **out,
                        cs_pack_error *err) {
  pk_clear(err);
  if (config == NULL || out == NULL || config->write == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "write",
                   "config, out and config->write must not be NULL");
  }
  *out = NULL;
  cs_pack_writer_config resolved = *config;
  int rc = resolve_limits(&resolved, err);
  if (rc != CS_E_OK) return rc;
  cs_pack_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return pk_fail(err, CS_PACK_E_NO_MEMORY, 0, 0, "", "writer allocation failed");
  w->config = resolved;
  w->sha = resolved.hash_elsewhere ? NULL : EVP_MD_CTX_new();
  w->ids = pk_idset_new();
  pk_json_footer_head(&w->head, &resolved.pack_id, resolved.created_at_ns);
  bool sha_ok = resolved.hash_elsewhere ||
                (w->sha != NULL && EVP_DigestInit_ex(w->sha, EVP_sha256(), NULL) == 1);
  if (!sha_ok || w->ids == NULL || w->head.failed) {
    cs_pack_writer_free(w);
    return pk_fail(err, CS_PACK_E_NO_MEMORY, 0, 0, "", "writer allocation failed");
  }
  uint8_t header[CS_PACK_HEADER_SIZE];
  pk_header_encode(&resolved.pack_id, resolved.created_at_ns, header);
  rc = emit(w, header, sizeof header, NULL, err);
  if (rc != CS_E_OK) {
    cs_pack_writer_free(w);
    return rc;
  }
  assert(w->position == CS_PACK_HEADER_SIZE);
  *out = w;
  return CS_E_OK;
}

static int check_usable(const cs_pack_writer *w, bool want_record, cs_pack_error *err) {
  if (w == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "writer",
                   "writer is NULL");
  }
  const char *why = NULL;
  if (w->failed) why = "an earlier write failed";
  else if (w->finished) why = "the pack is finished";
  else if (w->in_record && !want_record) why = "a record is open (end it first)";
  else if (!w->in_record && want_record) why = "no record is open (begin one first)";
  if (why == NULL) return CS_E_OK;
  return pk_fail(err, CS_PACK_E_STATE, w->record_count, w->position, "", "writer: %s", why);
}

static bool text_equal(cs_pack_text text, const char *bytes, size_t len) {
  return text.len == len && memcmp(text.bytes, bytes, len) == 0;
}

/* KEY_FIELDS unless meta names the tenant, session and rank of the first record (or mixed_keys). */
static int check_key_fields(const cs_pack_writer *w, const cs_pack_meta *meta,
                            cs_pack_error *err) {
  if (w->record_count == 0 || w->config.mixed_keys) return CS_E_OK;
  const char *field = NULL;
  if (!text_equal(meta->tenant_id, w->tenant_id, w->tenant_len)) field = "tenant_id";
  else if (!text_equal(meta->session_id, w->session_id, w->session_len)) field = "session_id";
  else if (meta->producer_rank != w->producer_rank) field = "producer_rank";
  if (field == NULL) return CS_E_OK;
  return pk_fail(err, CS_PACK_E_KEY_FIELDS, w->record_count, CS_PACK_NO_OFFSET, field,
                 "record %u: field %s differs from the first record's; one pack holds one "
                 "tenant, session and rank because its object key names them",
                 w->record_count, field);
}

/* The pure checks of begin_record: nothing is changed when one fails. */
static int check_record(const cs_pack_writer *w, const cs_pack_meta *meta, uint64_t length,
                        cs_pack_error *err) {
  uint32_t index = w->record_count;
  if (index >= w->config.records_max) {
    return pk_fail(err, CS_PACK_E_TOO_MANY_RECORDS, index, CS_PACK_NO_OFFSET, "records",
                   "record %u would exceed the limit of %u records", index,
                   w->config.records_max);
  }
  if (pk_meta_check(meta, length, index, err) != CS_PACK_OK) return CS_E_INVALID_ARGUMENT;
  if (pk_idset_contains(w->ids, meta->capture_id.bytes, meta->capture_id.len)) {
    pk_fail(err, CS_PACK_E_DUPLICATE_ID, index, CS_PACK_NO_OFFSET, "capture_id",
            "record %u: capture_id repeats an earlier record's", index);
    return CS_E_INVALID_ARGUMENT; /* the caller's descriptor, not stored bytes */
  }
  int rc = check_key_fields(w, meta, err);
  if (rc != CS_E_OK) return rc;
  uint64_t offset = pk_align_up(w->position);
  if (w->position > UINT64_MAX - 2 * CS_PACK_ALIGNMENT || length > UINT64_MAX / 2 - offset) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, index, offset, "length",
                   "record %u of %llu bytes at offset %llu would pass 2^63 bytes", index,
                   (unsigned long long)length, (unsigned long long)offset);
  }
  return CS_E_OK;
}

/* Adds the record's footer entry; FOOTER_TOO_LARGE or NO_MEMORY leave entries as they were. */
static int add_entry(cs_pack_writer *w, const cs_pack_meta *meta, uint64_t offset,
                     uint64_t length, cs_pack_error *err) {
  size_t before = w->entries.len;
  if (w->record_count > 0) pk_buf_put(&w->entries, ",", 1);
  size_t crc_at = pk_json_record(&w->entries, meta, offset, length, 0);
  uint64_t footer_len = w->head.len + w->entries.len + strlen(PK_JSON_FOOTER_TAIL);
  if (w->entries.failed) {
    w->entries.failed = false;
    w->entries.len = before;
    return pk_fail(err, CS_PACK_E_NO_MEMORY, w->record_count, CS_PACK_NO_OFFSET, "",
                   "record %u: footer entry allocation failed", w->record_count);
  }
  if (footer_len > w->config.footer_bytes_max) {
    w->entries.len = before;
    return pk_fail(err, CS_PACK_E_FOOTER_TOO_LARGE, w->record_count, CS_PACK_NO_OFFSET, "",
                   "record %u would grow the footer to %llu bytes, over the limit of %llu",
                   w->record_count, (unsigned long long)footer_len,
                   (unsigned long long)w->config.footer_bytes_max);
  }
  w->record_crc_at = crc_at;
  return CS_E_OK;
}

static bool copy_key_fields(cs_pack_writer *w, const cs_pack_meta *meta) {
  assert(w->record_count == 0 && w->tenant_id == NULL);
  w->tenant_id = malloc(meta->tenant_id.len);
  w->session_id = malloc(meta->session_id.len);
  if (w->tenant_id == NULL || w->session_id == NULL) return false;
  memcpy(w->tenant_id, meta->tenant_id.bytes, meta->tenant_id.len);
  memcpy(w->session_id, meta->session_id.bytes, meta->session_id.len);
  w->tenant_len = meta->tenant_id.len;
  w->session_len = meta->session_id.len;
  w->producer_rank = meta->producer_rank;
  w->captured_at_ns = meta->captured_at_ns;
  return true;
}

static void forget_key_fields(cs_pack_writer *w) {
  free(w->tenant_id);
  free(w->session_id);
  w->tenant_id = NULL;
  w->session_id = NULL;
}

/* Records the capture id (and the key fields of a first record); NO_MEMORY undoes all. */
static int remember_record(cs_pack_writer *w, const cs_pack_meta *meta, size_t entries_before,
                           cs_pack_error *err) {
  bool first = w->record_count == 0;
  if ((first && !copy_key_fields(w, meta)) ||
      pk_idset_add(w->ids, meta->capture_id.bytes, meta->capture_id.len) != 1) {
    if (first) forget_key_fields(w);
    w->entries.len = entries_before;
    return pk_fail(err, CS_PACK_E_NO_MEMORY, w->record_count, CS_PACK_NO_OFFSET, "",
                   "record %u: capture id allocation failed", w->record_count);
  }
  return CS_E_OK;
}

int cs_pack_writer_begin_record(cs_pack_writer *w, const cs_pack_meta *meta, uint64_t length,
                                cs_pack_error *err) {
  pk_clear(err);
  int rc = check_usable(w, false, err);
  if (rc != CS_E_OK) return rc;
  if (meta == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, w->record_count, CS_PACK_NO_OFFSET, "meta",
                   "meta is NULL");
  }
  rc = check_record(w, meta, length, err);
  if (rc != CS_E_OK) return rc;
  uint64_t offset = pk_align_up(w->position);
  size_t entries_before = w->entries.len;
  rc = add_entry(w, meta, offset, length, err);
  if (rc == CS_E_OK) rc = remember_record(w, meta, entries_before, err);
  if (rc != CS_E_OK) return rc;
  rc = emit_padding(w, err);
  if (rc != CS_E_OK) return rc;
  assert(w->position == offset);
  w->in_record = true;
  w->record_offset = offset;
  w->record_length = length;
  w->record_written = 0;
  w->record_crc = pk_crc32(0, NULL, 0);
  return CS_E_OK;
}

int cs_pack_writer_append(cs_pack_writer *w, const void *bytes, size_t length,
                          cs_pack_error *err) {
  pk_clear(err);
  int rc = check_usable(w, true, err);
  if (rc != CS_E_OK) return rc;
  if (bytes == NULL && length > 0) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, w->record_count, w->position, "bytes",
                   "bytes is NULL with a length of %zu", length);
  }
  assert(w->record_written <= w->record_length);
  if (length > w->record_length - w->record_written) {
    return pk_fail(err, CS_PACK_E_PAYLOAD_LENGTH, w->record_count, w->position, "length",
                   "record %u: appending %zu bytes would pass its declared %llu (has %llu)",
                   w->record_count, length, (unsigned long long)w->record_length,
                   (unsigned long long)w->record_written);
  }
  rc = emit(w, bytes, length, &w->record_crc, err);
  if (rc != CS_E_OK) return rc;
  w->record_written += length;
  return CS_E_OK;
}

int cs_pack_writer_end_record(cs_pack_writer *w, cs_pack_error *err) {
  pk_clear(err);
  int rc = check_usable(w, true, err);
  if (rc != CS_E_OK) return rc;
  if (w->record_written != w->record_length) {
    return pk_fail(err, CS_PACK_E_PAYLOAD_LENGTH, w->record_count, w->position, "length",
                   "record %u: %llu of its declared %llu bytes were appended", w->record_count,
                   (unsigned long long)w->record_written, (unsigned long long)w->record_length);
  }
  assert(w->position == w->record_offset + w->record_length);
  pk_json_patch_crc(&w->entries, w->record_crc_at, w->record_crc);
  w->in_record = false;
  w->record_count++;
  return CS_E_OK;
}

int cs_pack_writer_add_record(cs_pack_writer *w, const cs_pack_meta *meta, const void *bytes,
                              size_t length, cs_pack_error *err) {
  int rc = cs_pack_writer_begin_record(w, meta, length, err);
  if (rc == CS_E_OK) rc = cs_pack_writer_append(w, bytes, length, err);
  if (rc == CS_E_OK) rc = cs_pack_writer_end_record(w, err);
  return rc;
}

/* Emits the footer; its CRC-32 into *crc. */
static int emit_footer(cs_pack_writer *w, uint32_t *crc, cs_pack_error *err) {
  *crc = pk_crc32(0, NULL, 0);
  int rc = emit(w, w->head.data, w->head.len, crc, err);
  if (rc == CS_E_OK) rc = emit(w, w->entries.data, w->entries.len, crc, err);
  if (rc == CS_E_OK) {
    rc = emit(w, (const uint8_t *)PK_JSON_FOOTER_TAIL, strlen(PK_JSON_FOOTER_TAIL), crc, err);
  }
  return rc;
}

/* The digest of everything emitted so far, leaving the running hash untouched. */
static bool digest_so_far(const cs_pack_writer *w, uint8_t out[32]) {
  EVP_MD_CTX *copy = EVP_MD_CTX_new();
  unsigned int len = 0;
  bool ok = copy != NULL && EVP_MD_CTX_copy_ex(copy, w->sha) == 1 &&
            EVP_DigestFinal_ex(copy, out, &len) == 1 && len == 32;
  EVP_MD_CTX_free(copy);
  return ok;
}

/* STATE unless the writer hashes exactly when want_hashing says. */
static int check_hashing(const cs_pack_writer *w, bool want_hashing, cs_pack_error *err) {
  if (w->config.hash_elsewhere != want_hashing) return CS_E_OK;
  return pk_fail(err, CS_PACK_E_STATE, w->record_count, w->position, "",
                 want_hashing ? "writer: opened with hash_elsewhere: finish with cs_pack_writer_finish_footer"
                              : "writer: it hashes: finish with cs_pack_writer_finish");
}

/* Padding and the footer; *s gets everything but the digests and the size. */
static int finish_to_footer(cs_pack_writer *w, cs_pack_summary *s, cs_pack_error *err) {
  int rc = emit_padding(w, err);
  if (rc != CS_E_OK) return rc;
  *s = (cs_pack_summary){.pack_id = w->config.pack_id,
                         .created_at_ns = w->config.created_at_ns,
                         .footer_offset = w->position,
                         .record_count = w->record_count};
  rc = emit_footer(w, &s->footer_crc32, err);
  if (rc != CS_E_OK) return rc;
  s->footer_length = w->position - s->footer_offset;
  assert(s->footer_length <= w->config.footer_bytes_max);
  return CS_E_OK;
}

int cs_pack_writer_finish_footer(cs_pack_writer *w, cs_pack_summary *summary, cs_pack_error *err) {
  pk_clear(err);
  int rc = check_usable(w, false, err);
  if (rc == CS_E_OK) rc = check_hashing(w, false, err);
  if (rc != CS_E_OK) return rc;
  if (summary == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "summary",
                   "summary is NULL");
  }
  cs_pack_summary s;
  rc = finish_to_footer(w, &s, err);
  if (rc != CS_E_OK) return rc;
  s.size_bytes = w->position + CS_PACK_TRAILER_SIZE;
  w->finished = true;
  *summary = s;
  return CS_E_OK;
}

void cs_pack_trailer_encode(const cs_pack_summary *summary, uint8_t out[CS_PACK_TRAILER_SIZE]) {
  assert(summary != NULL && out != NULL);
  assert(summary->footer_offset + summary->footer_length + CS_PACK_TRAILER_SIZE == summary->size_bytes);
  pk_trailer_encode(summary->footer_offset, summary->footer_length, summary->footer_crc32,
                    summary->trailer_sha256, out);
}

int cs_pack_writer_finish(cs_pack_writer *w, cs_pack_summary *summary, cs_pack_error *err) {
  pk_clear(err);
  int rc = check_usable(w, false, err);
  if (rc == CS_E_OK) rc = check_hashing(w, true, err);
  if (rc != CS_E_OK) return rc;
  cs_pack_summary s;
  rc = finish_to_footer(w, &s, err);
  if (rc != CS_E_OK) return rc;
  if (!digest_so_far(w, s.trailer_sha256)) {
    return fail_stream(w, err, CS_PACK_E_NO_MEMORY, "SHA-256 finalisation failed");
  }
  uint8_t trailer[CS_PACK_TRAILER_SIZE];
  pk_trailer_encode(s.footer_offset, s.footer_length, s.footer_crc32, s.trailer_sha256, trailer);
  rc = emit(w, trailer, sizeof trailer, NULL, err);
  if (rc != CS_E_OK) return rc;
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(w->sha, s.sha256, &len) != 1 || len != 32) {
    return fail_stream(w, err, CS_PACK_E_NO_MEMORY, "SHA-256 finalisation failed");
  }
  s.size_bytes = w->position;
  w->finished = true;
  if (summary != NULL) *summary = s;
  return CS_E_OK;
}

uint32_t cs_pack_writer_record_count(const cs_pack_writer *w) {
  assert(w != NULL);
  return w->record_count;
}

uint64_t cs_pack_writer_bytes_written(const cs_pack_writer *w) {
  assert(w != NULL);
  return w->position;
}

uint64_t cs_pack_writer_size_if_finished(const cs_pack_writer *w) {
  assert(w != NULL);
  uint64_t end = w->in_record ? w->record_offset + w->record_length : w->position;
  return pk_align_up(end) + w->head.len + w->entries.len + strlen(PK_JSON_FOOTER_TAIL) +
         CS_PACK_TRAILER_SIZE;
}

int cs_pack_writer_key_fields(const cs_pack_writer *w, cs_pack_key_fields *out,
                              cs_pack_error *err) {
  pk_clear(err);
  assert(w != NULL && out != NULL);
  if (w->tenant_id == NULL) {
    return pk_fail(err, CS_PACK_E_STATE, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "records",
                   "a pack without records has no object key");
  }
  out->tenant_id = (cs_pack_text){w->tenant_id, w->tenant_len};
  out->session_id = (cs_pack_text){w->session_id, w->session_len};
  out->producer_rank = w->producer_rank;
  out->captured_at_ns = w->captured_at_ns;
  out->pack_id = w->config.pack_id;
  return CS_E_OK;
}

void cs_pack_writer_free(cs_pack_writer *w) {
  if (w == NULL) return;
  EVP_MD_CTX_free(w->sha);
  pk_idset_free(w->ids);
  pk_buf_free(&w->head);
  pk_buf_free(&w->entries);
  forget_key_fields(w);
  free(w);
}

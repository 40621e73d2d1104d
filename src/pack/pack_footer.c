/*
 * The footer: parsed from its bytes alone (with the trailer for context),
 * never touching a payload. Keys the format does not define are ignored (a
 * newer writer's additions), as DMI's reader does; duplicate keys are not.
 * Validation order: CRC, the JSON's cost bound, JSON, top-level fields,
 * each record (keys, types, ranges, shape x dtype = length), the layout of
 * all records against the footer offset, then duplicate capture ids.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "pack_json.h"

static const char *const top_keys[] = {"created_at_ns", "format",  "major_version",
                                       "minor_version", "pack_id", "records"};
static const char *const record_keys[] = {"checksum", "codec",  "decoded_length",
                                          "metadata", "offset", "stored_length"};

static bool parse_crc_text(const char *text, size_t len, uint32_t *out) {
  uint8_t bytes[4]; /* big-endian: the text's first digits are the high bits */
  if (len != 8 || cs_hex_decode(text, len, CS_HEX_LOWER, bytes) != CS_E_OK) return false;
  *out = (uint32_t)bytes[0] << 24 | (uint32_t)bytes[1] << 16 | (uint32_t)bytes[2] << 8 | (uint32_t)bytes[3];
  return true;
}

static int parse_version(const pk_jin_ctx *ctx, const json_t *root, const char *key,
                         uint16_t want, uint16_t *out, cs_pack_error *err) {
  uint64_t value = 0;
  int rc = pk_jin_u64(ctx, root, key, &value, err);
  if (rc != CS_E_OK) return rc;
  if (value != want) {
    return pk_fail(err, CS_PACK_E_MISMATCH, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, key,
                   "footer: field %s is %llu but the trailer says %u", key,
                   (unsigned long long)value, want);
  }
  *out = want;
  return CS_E_OK;
}

static int parse_top(const pk_jin_ctx *ctx, const json_t *root, const cs_pack_trailer *trailer,
                     cs_pack_footer *out, cs_pack_error *err) {
  if (!json_is_object(root)) {
    return pk_fail(err, CS_PACK_E_FIELD_TYPE, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "footer: the JSON value is not an object");
  }
  int rc = pk_jin_keys(ctx, root, top_keys, sizeof top_keys / sizeof top_keys[0], err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, root, "created_at_ns", &out->created_at_ns, err);
  if (rc != CS_E_OK) return rc;
  json_t *format = json_object_get(root, "format");
  if (!json_is_string(format) || json_string_length(format) != 8 ||
      memcmp(json_string_value(format), "dmi-pack", 8) != 0) {
    return pk_fail(err, json_is_string(format) ? CS_PACK_E_FIELD_RANGE : CS_PACK_E_FIELD_TYPE,
                   CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "format",
                   "footer: field format is not the string \"dmi-pack\"");
  }
  rc = parse_version(ctx, root, "major_version", trailer->major_version, &out->major_version, err);
  if (rc == CS_E_OK) {
    rc = parse_version(ctx, root, "minor_version", trailer->minor_version, &out->minor_version, err);
  }
  if (rc != CS_E_OK) return rc;
  json_t *id = json_object_get(root, "pack_id");
  if (!json_is_string(id) ||
      cs_uuid_parse(json_string_value(id), json_string_length(id), &out->pack_id) != CS_E_OK) {
    return pk_fail(err, json_is_string(id) ? CS_PACK_E_FIELD_RANGE : CS_PACK_E_FIELD_TYPE,
                   CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "pack_id",
                   "footer: field pack_id is not a canonical lowercase UUID");
  }
  return CS_E_OK;
}

static int parse_checksum_codec(const pk_jin_ctx *ctx, const json_t *entry, cs_pack_record *r,
                                cs_pack_error *err) {
  json_t *checksum = json_object_get(entry, "checksum");
  if (!json_is_string(checksum)) {
    return pk_fail(err, CS_PACK_E_FIELD_TYPE, ctx->record, CS_PACK_NO_OFFSET, "checksum",
                   "%s: field checksum is not a string", ctx->path);
  }
  if (!parse_crc_text(json_string_value(checksum), json_string_length(checksum), &r->crc32)) {
    return pk_fail(err, CS_PACK_E_FIELD_RANGE, ctx->record, CS_PACK_NO_OFFSET, "checksum",
                   "%s: field checksum is not 8 lowercase hex digits", ctx->path);
  }
  json_t *codec = json_object_get(entry, "codec");
  if (!json_is_string(codec)) {
    return pk_fail(err, CS_PACK_E_FIELD_TYPE, ctx->record, CS_PACK_NO_OFFSET, "codec",
                   "%s: field codec is not a string", ctx->path);
  }
  if (json_string_length(codec) != 4 || memcmp(json_string_value(codec), "none", 4) != 0) {
    return pk_fail(err, CS_PACK_E_CODEC, ctx->record, CS_PACK_NO_OFFSET, "codec",
                   "%s: codec is not \"none\", the only codec of dmi-pack-v1", ctx->path);
  }
  return CS_E_OK;
}

static int parse_record(const pk_jin_ctx *ctx, const json_t *entry, pk_arena *arena,
                        cs_pack_record *r, cs_pack_error *err) {
  if (!json_is_object(entry)) {
    return pk_fail(err, CS_PACK_E_FIELD_TYPE, ctx->record, CS_PACK_NO_OFFSET, "records",
                   "%s is not an object", ctx->path);
  }
  int rc = pk_jin_keys(ctx, entry, record_keys, sizeof record_keys / sizeof record_keys[0], err);
  if (rc == CS_E_OK) rc = parse_checksum_codec(ctx, entry, r, err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, entry, "decoded_length", &r->decoded_length, err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, entry, "offset", &r->offset, err);
  if (rc == CS_E_OK) rc = pk_jin_u64(ctx, entry, "stored_length", &r->stored_length, err);
  if (rc != CS_E_OK) return rc;
  if (r->stored_length != r->decoded_length) {
    return pk_fail(err, CS_PACK_E_FIELD_RANGE, ctx->record, CS_PACK_NO_OFFSET, "stored_length",
                   "%s: stored_length %llu differs from decoded_length %llu under codec none",
                   ctx->path, (unsigned long long)r->stored_length,
                   (unsigned long long)r->decoded_length);
  }
  pk_jin_ctx meta_ctx = *ctx;
  char path[48];
  snprintf(path, sizeof path, "%s.metadata", ctx->path);
  meta_ctx.path = path;
  rc = pk_jin_meta(&meta_ctx, json_object_get(entry, "metadata"), arena, &r->meta, err);
  if (rc != CS_E_OK) return rc;
  if (pk_meta_check(&r->meta, r->decoded_length, ctx->record, err) != CS_PACK_OK) {
    return CS_E_CORRUPT;
  }
  return CS_E_OK;
}

static int parse_records(const pk_json_doc *doc, const json_t *root, pk_arena *arena,
                         cs_pack_footer *out, cs_pack_error *err) {
  json_t *records = json_object_get(root, "records");
  if (!json_is_array(records)) {
    return pk_fail(err, CS_PACK_E_FIELD_TYPE, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "records",
                   "footer: field records is not an array");
  }
  size_t count = json_array_size(records);
  if (count > CS_PACK_RECORDS_MAX) {
    return pk_fail(err, CS_PACK_E_TOO_MANY_RECORDS, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET,
                   "records", "footer: %zu records, over the limit of %u", count,
                   CS_PACK_RECORDS_MAX);
  }
  size_t cap = 0;
  for (size_t i = 0; i < count; i++) {
    if (i == cap) {
      /* Grown as records parse, so a hostile array of empty objects costs little. */
      cap = cap == 0 ? 64 : (cap * 2 < count ? cap * 2 : count);
      cs_pack_record *grown = realloc(out->records, cap * sizeof *grown);
      if (grown == NULL) {
        return pk_fail(err, CS_PACK_E_NO_MEMORY, (uint32_t)i, CS_PACK_NO_OFFSET, "",
                       "footer: allocation failed for record %zu", i);
      }
      out->records = grown;
    }
    char path[32];
    snprintf(path, sizeof path, "footer records[%zu]", i);
    pk_jin_ctx ctx = {.doc = doc, .record = (uint32_t)i, .path = path, .ignore_unknown = true};
    memset(&out->records[i], 0, sizeof out->records[i]);
    int rc = parse_record(&ctx, json_array_get(records, i), arena, &out->records[i], err);
    if (rc != CS_E_OK) return rc;
    out->record_count = (uint32_t)(i + 1);
  }
  return CS_E_OK;
}

/* Orders records by capture id, then by index, so duplicates sit side by side. */
static int compare_ids(const void *a_in, const void *b_in) {
  const cs_pack_record *a = *(const cs_pack_record *const *)a_in;
  const cs_pack_record *b = *(const cs_pack_record *const *)b_in;
  size_t n = a->meta.capture_id.len < b->meta.capture_id.len ? a->meta.capture_id.len
                                                              : b->meta.capture_id.len;
  int c = memcmp(a->meta.capture_id.bytes, b->meta.capture_id.bytes, n);
  if (c != 0) return c;
  if (a->meta.capture_id.len != b->meta.capture_id.len) {
    return a->meta.capture_id.len < b->meta.capture_id.len ? -1 : 1;
  }
  return a < b ? -1 : (a > b ? 1 : 0);
}

/* DUPLICATE_ID naming both records. Sorting keeps hostile ids at O(n log n). */
static int check_duplicates(const cs_pack_footer *f, cs_pack_error *err) {
  if (f->record_count < 2) return CS_E_OK;
  const cs_pack_record **order = malloc(f->record_count * sizeof *order);
  if (order == NULL) {
    return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "footer: allocation failed checking capture ids");
  }
  for (uint32_t i = 0; i < f->record_count; i++) order[i] = &f->records[i];
  qsort(order, f->record_count, sizeof *order, compare_ids);
  int rc = CS_E_OK;
  for (uint32_t i = 1; i < f->record_count && rc == CS_E_OK; i++) {
    const cs_pack_text *a = &order[i - 1]->meta.capture_id;
    const cs_pack_text *b = &order[i]->meta.capture_id;
    if (a->len != b->len || memcmp(a->bytes, b->bytes, a->len) != 0) continue;
    uint32_t first = (uint32_t)(order[i - 1] - f->records);
    uint32_t second = (uint32_t)(order[i] - f->records);
    assert(first < second);
    rc = pk_fail(err, CS_PACK_E_DUPLICATE_ID, second, CS_PACK_NO_OFFSET, "capture_id",
                 "footer records[%u]: capture_id repeats records[%u]'s", second, first);
  }
  free(order);
  return rc;
}

static void footer_encode_into(const cs_pack_footer *f, pk_buf *buf) {
  pk_json_footer_head(buf, &f->pack_id, f->created_at_ns);
  for (uint32_t i = 0; i < f->record_count; i++) {
    const cs_pack_record *r = &f->records[i];
    if (i > 0) pk_buf_put(buf, ",", 1);
    pk_json_record(buf, &r->meta, r->offset, r->decoded_length, r->crc32);
  }
  pk_buf_put_text(buf, PK_JSON_FOOTER_TAIL);
}

int cs_pack_footer_encode(const cs_pack_footer *f, char **out, size_t *out_len,
                          cs_pack_error *err) {
  pk_clear(err);
  assert(f != NULL && out != NULL && out_len != NULL);
  pk_buf buf = {0};
  footer_encode_into(f, &buf);
  pk_buf_put(&buf, "", 1); /* a terminating NUL for callers that print it */
  if (buf.failed) {
    pk_buf_free(&buf);
    return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "footer encoding: allocation failed");
  }
  *out = (char *)buf.data;
  *out_len = buf.len - 1;
  return CS_E_OK;
}

static bool footer_is_canonical(const cs_pack_footer *f, const uint8_t *bytes, size_t length) {
  pk_buf buf = {0};
  footer_encode_into(f, &buf);
  bool same = !buf.failed && buf.len == length && memcmp(buf.data, bytes, length) == 0;
  pk_buf_free(&buf);
  return same;
}

void cs_pack_footer_free(cs_pack_footer *f) {
  if (f == NULL) return;
  free(f->records);
  pk_arena_free(f->storage_);
  memset(f, 0, sizeof *f);
}

/* Everything after the CRC: JSON, fields, layout, duplicates. */
static int footer_from_bytes(const cs_pack_trailer *trailer, const uint8_t *bytes, size_t length,
                             cs_pack_footer *out, cs_pack_error *err) {
  pk_json_doc doc;
  int rc = pk_jin_load(bytes, length, trailer->footer_offset, "footer", &doc, err);
  if (rc != CS_E_OK) return rc;
  pk_jin_ctx ctx = {
      .doc = &doc, .record = CS_PACK_NO_RECORD, .path = "footer", .ignore_unknown = true};
  rc = parse_top(&ctx, doc.root, trailer, out, err);
  if (rc == CS_E_OK) rc = parse_records(&doc, doc.root, out->storage_, out, err);
  pk_jin_free(&doc);
  if (rc == CS_E_OK) rc = pk_layout_check(out->records, out->record_count, trailer->footer_offset, err);
  if (rc == CS_E_OK) rc = check_duplicates(out, err);
  return rc;
}

int cs_pack_footer_parse(const cs_pack_trailer *trailer, const uint8_t *bytes, size_t length,
                         cs_pack_footer *out, cs_pack_error *err) {
  pk_clear(err);
  if (trailer == NULL || out == NULL || (bytes == NULL && length > 0)) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "trailer, bytes and out must not be NULL");
  }
  memset(out, 0, sizeof *out);
  if (length != trailer->footer_length) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, trailer->footer_offset,
                   "footer_length", "given %zu footer bytes; the trailer says %llu", length,
                   (unsigned long long)trailer->footer_length);
  }
  uint32_t crc = pk_crc32(pk_crc32(0, NULL, 0), bytes, length);
  if (crc != trailer->footer_crc32) {
    return pk_fail(err, CS_PACK_E_FOOTER_CRC, CS_PACK_NO_RECORD, trailer->footer_offset,
                   "trailer.footer_crc32",
                   "footer at offset %llu has CRC-32 %08x; the trailer says %08x",
                   (unsigned long long)trailer->footer_offset, crc, trailer->footer_crc32);
  }
  out->storage_ = pk_arena_new();
  int rc = out->storage_ == NULL
               ? pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                         "footer: allocation failed")
               : footer_from_bytes(trailer, bytes, length, out, err);
  if (rc != CS_E_OK) {
    cs_pack_footer_free(out);
    return rc;
  }
  out->canonical = footer_is_canonical(out, bytes, length);
  return CS_E_OK;
}

/* The fixed-size parts (header, trailer) and the layout rules between them. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "pack_internal.h"

static const uint8_t header_magic[8] = {'D', 'M', 'I', 'P', 'A', 'C', 'K', 0};
static const uint8_t trailer_magic[8] = {'D', 'M', 'I', 'F', 'T', 'R', 0, 0};

static void put_le(uint8_t *out, uint64_t value, uint32_t bytes) {
  for (uint32_t i = 0; i < bytes; i++) out[i] = (uint8_t)(value >> (8 * i));
}

static uint64_t get_le(const uint8_t *in, uint32_t bytes) {
  uint64_t value = 0;
  for (uint32_t i = 0; i < bytes; i++) value |= (uint64_t)in[i] << (8 * i);
  return value;
}

void pk_header_encode(const cs_uuid *pack_id, uint64_t created_at_ns,
                      uint8_t out[CS_PACK_HEADER_SIZE]) {
  assert(pack_id != NULL && out != NULL);
  memset(out, 0, CS_PACK_HEADER_SIZE);
  memcpy(out, header_magic, 8);
  put_le(out + 8, CS_PACK_MAJOR_VERSION, 2);
  put_le(out + 10, CS_PACK_MINOR_VERSION, 2);
  put_le(out + 12, CS_PACK_HEADER_SIZE, 4);
  memcpy(out + 16, pack_id->bytes, 16);
  put_le(out + 32, created_at_ns, 8);
  /* flags (40..44) and the 20 reserved bytes stay zero. */
  assert(out[40] == 0 && out[63] == 0);
}

void pk_trailer_encode(uint64_t footer_offset, uint64_t footer_length, uint32_t footer_crc32,
                       const uint8_t sha256[32], uint8_t out[CS_PACK_TRAILER_SIZE]) {
  assert(sha256 != NULL && out != NULL);
  assert(footer_offset >= CS_PACK_HEADER_SIZE && footer_offset % CS_PACK_ALIGNMENT == 0);
  memcpy(out, trailer_magic, 8);
  put_le(out + 8, CS_PACK_MAJOR_VERSION, 2);
  put_le(out + 10, CS_PACK_MINOR_VERSION, 2);
  put_le(out + 12, footer_offset, 8);
  put_le(out + 20, footer_length, 8);
  put_le(out + 28, footer_crc32, 4);
  memcpy(out + 32, sha256, 32);
}

/* UNKNOWN_MAJOR / NEWER_MINOR for a version pair read at offset `at`, named `part`. */
static int check_version(uint16_t major, uint16_t minor, uint64_t at, const char *part,
                         cs_pack_error *err) {
  char field[40];
  if (major != CS_PACK_MAJOR_VERSION) {
    snprintf(field, sizeof field, "%s.major_version", part);
    return pk_fail(err, CS_PACK_E_UNKNOWN_MAJOR, CS_PACK_NO_RECORD, at, field,
                   "%s major version %u at offset %llu is unknown; this reader knows %u", part,
                   major, (unsigned long long)at, CS_PACK_MAJOR_VERSION);
  }
  if (minor > CS_PACK_MINOR_VERSION) {
    snprintf(field, sizeof field, "%s.minor_version", part);
    return pk_fail(err, CS_PACK_E_NEWER_MINOR, CS_PACK_NO_RECORD, at + 2, field,
                   "%s minor version %u at offset %llu is newer than this reader's %u", part,
                   minor, (unsigned long long)(at + 2), CS_PACK_MINOR_VERSION);
  }
  return CS_E_OK;
}

/* OFFSET_LOW, ALIGNMENT, FOOTER_END for the footer range the trailer gives. */
static int check_footer_range(const cs_pack_trailer *t, cs_pack_error *err) {
  uint64_t trailer_start = t->object_size - CS_PACK_TRAILER_SIZE;
  if (t->footer_offset < CS_PACK_HEADER_SIZE) {
    return pk_fail(err, CS_PACK_E_OFFSET_LOW, CS_PACK_NO_RECORD, trailer_start + 12,
                   "trailer.footer_offset", "trailer footer_offset %llu is below 64",
                   (unsigned long long)t->footer_offset);
  }
  if (t->footer_offset % CS_PACK_ALIGNMENT != 0) {
    return pk_fail(err, CS_PACK_E_ALIGNMENT, CS_PACK_NO_RECORD, trailer_start + 12,
                   "trailer.footer_offset", "trailer footer_offset %llu is not 64-byte aligned",
                   (unsigned long long)t->footer_offset);
  }
  if (t->footer_offset > trailer_start || t->footer_length != trailer_start - t->footer_offset) {
    return pk_fail(err, CS_PACK_E_FOOTER_END, CS_PACK_NO_RECORD, trailer_start + 20,
                   "trailer.footer_length",
                   "footer at offset %llu of %llu bytes does not end where the trailer begins "
                   "(offset %llu)",
                   (unsigned long long)t->footer_offset, (unsigned long long)t->footer_length,
                   (unsigned long long)trailer_start);
  }
  return CS_E_OK;
}

int cs_pack_trailer_parse(const uint8_t bytes[CS_PACK_TRAILER_SIZE], uint64_t object_size,
                          cs_pack_trailer *out, cs_pack_error *err) {
  pk_clear(err);
  if (bytes == NULL || out == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "trailer bytes and out must not be NULL");
  }
  if (object_size < CS_PACK_HEADER_SIZE + CS_PACK_TRAILER_SIZE) {
    return pk_fail(err, CS_PACK_E_TRUNCATED, CS_PACK_NO_RECORD, object_size, "object_size",
                   "object of %llu bytes is shorter than a header and a trailer (128)",
                   (unsigned long long)object_size);
  }
  uint64_t at = object_size - CS_PACK_TRAILER_SIZE;
  if (memcmp(bytes, trailer_magic, 8) != 0) {
    return pk_fail(err, CS_PACK_E_BAD_MAGIC, CS_PACK_NO_RECORD, at, "trailer.magic",
                   "trailer magic at offset %llu is not DMIFTR\\0\\0", (unsigned long long)at);
  }
  cs_pack_trailer t = {.major_version = (uint16_t)get_le(bytes + 8, 2),
                       .minor_version = (uint16_t)get_le(bytes + 10, 2),
                       .object_size = object_size,
                       .footer_offset = get_le(bytes + 12, 8),
                       .footer_length = get_le(bytes + 20, 8),
                       .footer_crc32 = (uint32_t)get_le(bytes + 28, 4)};
  memcpy(t.sha256, bytes + 32, 32);
  int rc = check_version(t.major_version, t.minor_version, at + 8, "trailer", err);
  if (rc != CS_E_OK) return rc;
  if (t.footer_length > CS_PACK_FOOTER_BYTES_MAX) {
    return pk_fail(err, CS_PACK_E_FOOTER_TOO_LARGE, CS_PACK_NO_RECORD, at + 20,
                   "trailer.footer_length", "footer length %llu is over the 64 MiB limit",
                   (unsigned long long)t.footer_length);
  }
  rc = check_footer_range(&t, err);
  if (rc != CS_E_OK) return rc;
  *out = t;
  return CS_E_OK;
}

int cs_pack_header_parse(const uint8_t bytes[CS_PACK_HEADER_SIZE], cs_pack_header *out,
                         cs_pack_error *err) {
  pk_clear(err);
  if (bytes == NULL || out == NULL) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "header bytes and out must not be NULL");
  }
  if (memcmp(bytes, header_magic, 8) != 0) {
    return pk_fail(err, CS_PACK_E_BAD_MAGIC, CS_PACK_NO_RECORD, 0, "header.magic",
                   "header magic at offset 0 is not DMIPACK\\0");
  }
  cs_pack_header h = {.major_version = (uint16_t)get_le(bytes + 8, 2),
                      .minor_version = (uint16_t)get_le(bytes + 10, 2),
                      .header_size = (uint32_t)get_le(bytes + 12, 4),
                      .created_at_ns = get_le(bytes + 32, 8),
                      .flags = (uint32_t)get_le(bytes + 40, 4)};
  memcpy(h.pack_id.bytes, bytes + 16, 16);
  int rc = check_version(h.major_version, h.minor_version, 8, "header", err);
  if (rc != CS_E_OK) return rc;
  if (h.header_size != CS_PACK_HEADER_SIZE) {
    return pk_fail(err, CS_PACK_E_HEADER_SIZE, CS_PACK_NO_RECORD, 12, "header.header_size",
                   "header size at offset 12 is %u; dmi-pack-v1 headers are 64 bytes",
                   h.header_size);
  }
  if (h.flags != 0) {
    return pk_fail(err, CS_PACK_E_HEADER_FIELD, CS_PACK_NO_RECORD, 40, "header.flags",
                   "header flags at offset 40 are 0x%x; version 1.0 defines none", h.flags);
  }
  for (uint32_t i = 44; i < CS_PACK_HEADER_SIZE; i++) {
    if (bytes[i] != 0) {
      return pk_fail(err, CS_PACK_E_HEADER_FIELD, CS_PACK_NO_RECORD, i, "header.reserved",
                     "reserved header byte at offset %u is 0x%02x, not zero", i, bytes[i]);
    }
  }
  *out = h;
  return CS_E_OK;
}

int cs_pack_header_check(const cs_pack_header *header, const cs_pack_trailer *trailer,
                         const cs_pack_footer *footer, cs_pack_error *err) {
  pk_clear(err);
  assert(header != NULL && trailer != NULL && footer != NULL);
  if (header->major_version != trailer->major_version ||
      header->minor_version != trailer->minor_version) {
    return pk_fail(err, CS_PACK_E_MISMATCH, CS_PACK_NO_RECORD, 8, "header.minor_version",
                   "header version %u.%u at offset 8 differs from the trailer's %u.%u",
                   header->major_version, header->minor_version, trailer->major_version,
                   trailer->minor_version);
  }
  if (!cs_uuid_equal(&header->pack_id, &footer->pack_id)) {
    return pk_fail(err, CS_PACK_E_MISMATCH, CS_PACK_NO_RECORD, 16, "header.pack_id",
                   "header pack id at offset 16 differs from the footer's pack_id");
  }
  if (header->created_at_ns != footer->created_at_ns) {
    return pk_fail(err, CS_PACK_E_MISMATCH, CS_PACK_NO_RECORD, 32, "header.created_at_ns",
                   "header created_at_ns %llu at offset 32 differs from the footer's %llu",
                   (unsigned long long)header->created_at_ns,
                   (unsigned long long)footer->created_at_ns);
  }
  return CS_E_OK;
}

/* One record against the running expectation; *expected moves past it. */
static int check_record_layout(const cs_pack_record *records, uint32_t i, uint64_t footer_offset,
                               uint64_t *expected, cs_pack_error *err) {
  uint64_t off = records[i].offset;
  uint64_t len = records[i].stored_length;
  if (off < CS_PACK_HEADER_SIZE) {
    return pk_fail(err, CS_PACK_E_OFFSET_LOW, i, off, "offset",
                   "record %u offset %llu is below 64 (inside the header)", i,
                   (unsigned long long)off);
  }
  if (off % CS_PACK_ALIGNMENT != 0) {
    return pk_fail(err, CS_PACK_E_ALIGNMENT, i, off, "offset",
                   "record %u offset %llu is not 64-byte aligned", i, (unsigned long long)off);
  }
  if (off < *expected) {
    assert(i > 0);
    bool unordered = i > 0 && off < records[i - 1].offset;
    return pk_fail(err, CS_PACK_E_RECORD_ORDER, i, off, "offset",
                   "record %u at offset %llu %s record %u (which ends at %llu)", i,
                   (unsigned long long)off, unordered ? "comes before" : "overlaps", i - 1,
                   (unsigned long long)(records[i - 1].offset + records[i - 1].stored_length));
  }
  if (off > *expected) {
    return pk_fail(err, CS_PACK_E_GAP, i, off, "offset",
                   "record %u starts at offset %llu, leaving a gap after offset %llu", i,
                   (unsigned long long)off, (unsigned long long)*expected);
  }
  if (off > footer_offset || len > footer_offset - off) {
    return pk_fail(err, CS_PACK_E_RECORD_INTO_FOOTER, i, off, "stored_length",
                   "record %u at offset %llu of %llu bytes runs into the footer at offset %llu",
                   i, (unsigned long long)off, (unsigned long long)len,
                   (unsigned long long)footer_offset);
  }
  *expected = pk_align_up(off + len);
  return CS_E_OK;
}

int pk_layout_check(const cs_pack_record *records, uint32_t count, uint64_t footer_offset,
                    cs_pack_error *err) {
  assert(records != NULL || count == 0);
  assert(footer_offset % CS_PACK_ALIGNMENT == 0);
  uint64_t expected = CS_PACK_HEADER_SIZE;
  for (uint32_t i = 0; i < count; i++) {
    int rc = check_record_layout(records, i, footer_offset, &expected, err);
    if (rc != CS_E_OK) return rc;
  }
  if (footer_offset != expected) {
    assert(footer_offset > expected);
    return pk_fail(err, CS_PACK_E_GAP, CS_PACK_NO_RECORD, footer_offset, "trailer.footer_offset",
                   "footer starts at offset %llu, leaving a gap after offset %llu",
                   (unsigned long long)footer_offset, (unsigned long long)expected);
  }
  return CS_E_OK;
}

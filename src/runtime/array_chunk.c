/*
 * The stored form of a capture-array chunk write (capstore/array_chunk.h):
 * payload, unit table, trailer.
 */
#include "capstore/array_chunk.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int corrupt(char *msg, size_t msg_size, const char *what) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "not a valid array chunk: %s", what);
  return CS_E_CORRUPT;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The units' ends of a Blosc payload into ends (cap entries); their count, or 0 (msg said) on a bad payload. */
static uint32_t blosc_ends(const uint8_t *p, size_t len, uint32_t *ends, uint32_t cap, char *msg, size_t msg_size) {
  cs_blosc_info info;
  if (cs_blosc_info_parse(p, len, &info, msg, msg_size) != CS_E_OK) return 0;
  if (info.cbytes != len || info.blocks + 1 > cap) {
    corrupt(msg, msg_size, "the Blosc buffer's cbytes is not the payload's length");
    return 0;
  }
  if (info.blocks == 0) {
    ends[0] = (uint32_t)len;
    return 1;
  }
  uint32_t n = 0;
  for (uint32_t b = 0; b < info.blocks; b++) {
    uint64_t offset, length;
    if (info.memcpyed) {
      (void)cs_blosc_block_extent(&info, p, b, &offset, &length, NULL, 0);
    } else {
      offset = le32(p + CS_BLOSC_HEADER_BYTES + 4u * b);
      if (offset < info.prefix_bytes || offset >= info.cbytes) {
        corrupt(msg, msg_size, "a Blosc block starts inside the start table or past cbytes");
        return 0;
      }
    }
    ends[n++] = (uint32_t)offset; /* the starts, sorted below: each block's start is the previous unit's end */
  }
  qsort(ends, n, sizeof ends[0], cmp_u32);
  for (uint32_t k = 1; k < n; k++) {
    if (ends[k] == ends[k - 1]) {
      corrupt(msg, msg_size, "two Blosc blocks start at the same offset");
      return 0;
    }
  }
  ends[n++] = (uint32_t)len; /* units: [0, start0), [start0, start1), ..., [start_last, cbytes) */
  return n;
}

int cs_array_chunk_frame(cs_array_codec codec, uint8_t *out, size_t payload_len, size_t cap, size_t *stored_len,
                         char *msg, size_t msg_size) {
  if (out == NULL || stored_len == NULL || payload_len > cap || payload_len > CS_ARRAY_CHUNK_BYTES_MAX + 64)
    return CS_E_INVALID_ARGUMENT;
  uint32_t *ends = malloc(sizeof *ends * (CS_ARRAY_UNITS_MAX + 1));
  if (ends == NULL) return CS_E_NO_MEMORY;
  uint32_t units = 0;
  if (codec == CS_ARRAY_CODEC_BLOSC) {
    units = blosc_ends(out, payload_len, ends, CS_ARRAY_UNITS_MAX + 1, msg, msg_size);
    if (units == 0) {
      free(ends);
      return CS_E_CORRUPT;
    }
  } else {
    for (uint64_t at = 0; at < payload_len; at += CS_ARRAY_UNIT_BYTES)
      ends[units++] = (uint32_t)(payload_len - at < CS_ARRAY_UNIT_BYTES ? payload_len : at + CS_ARRAY_UNIT_BYTES);
  }
  assert(units <= CS_ARRAY_UNITS_MAX + 1);
  if (cap - payload_len < CS_ARRAY_CHUNK_OVERHEAD(units)) {
    free(ends);
    return CS_E_NO_MEMORY;
  }
  uint8_t *table = out + payload_len;
  uint32_t start = 0;
  for (uint32_t k = 0; k < units; k++) {
    assert(ends[k] > start || (payload_len == 0));
    put32(table + 8u * k, ends[k]);
    put32(table + 8u * k + 4, cs_crc32(0, out + start, ends[k] - start));
    start = ends[k];
  }
  free(ends);
  uint8_t *trailer = table + 8u * units;
  put32(trailer, units);
  put32(trailer + 4, (uint32_t)payload_len);
  put32(trailer + 8, cs_crc32(0, table, 8u * units));
  memcpy(trailer + 12, CS_ARRAY_CHUNK_MAGIC, 4);
  *stored_len = payload_len + CS_ARRAY_CHUNK_OVERHEAD(units);
  return CS_E_OK;
}

int cs_array_chunk_tail_parse(const uint8_t trailer[CS_ARRAY_CHUNK_TRAILER_BYTES], uint64_t stored_len,
                              cs_array_chunk_tail *out, char *msg, size_t msg_size) {
  if (trailer == NULL || out == NULL) return CS_E_INVALID_ARGUMENT;
  if (memcmp(trailer + 12, CS_ARRAY_CHUNK_MAGIC, 4) != 0) return corrupt(msg, msg_size, "no CSA1 trailer");
  cs_array_chunk_tail t = {.units = le32(trailer), .payload_bytes = le32(trailer + 4), .table_crc32 = le32(trailer + 8)};
  if (t.units > CS_ARRAY_UNITS_MAX || (t.units == 0) != (t.payload_bytes == 0))
    return corrupt(msg, msg_size, "a unit count out of range");
  t.table_offset = t.payload_bytes;
  t.tail_bytes = CS_ARRAY_CHUNK_OVERHEAD(t.units);
  if (t.table_offset + t.tail_bytes != stored_len)
    return corrupt(msg, msg_size, "payload, table and trailer do not add up to the stored length");
  *out = t;
  return CS_E_OK;
}

int cs_array_chunk_table_check(const cs_array_chunk_tail *tail, const uint8_t *table, char *msg, size_t msg_size) {
  if (tail == NULL || (table == NULL && tail->units > 0)) return CS_E_INVALID_ARGUMENT;
  if (cs_crc32(0, table, 8u * tail->units) != tail->table_crc32) return corrupt(msg, msg_size, "the unit table's CRC-32");
  uint32_t previous = 0;
  for (uint32_t k = 0; k < tail->units; k++) {
    uint32_t end = le32(table + 8u * k);
    if (end <= previous) return corrupt(msg, msg_size, "unit ends not increasing");
    previous = end;
  }
  if (previous != tail->payload_bytes) return corrupt(msg, msg_size, "the last unit does not end the payload");
  return CS_E_OK;
}

void cs_array_chunk_unit(const uint8_t *table, uint32_t k, uint64_t *offset, uint64_t *length, uint32_t *crc32) {
  assert(table != NULL);
  uint32_t start = k == 0 ? 0 : le32(table + 8u * (k - 1)), end = le32(table + 8u * k);
  assert(end > start);
  if (offset != NULL) *offset = start;
  if (length != NULL) *length = end - start;
  if (crc32 != NULL) *crc32 = le32(table + 8u * k + 4);
}

uint32_t cs_array_chunk_unit_of(const cs_array_chunk_tail *tail, const uint8_t *table, uint64_t at) {
  assert(tail != NULL && table != NULL);
  if (at >= tail->payload_bytes) return tail->units;
  uint32_t lo = 0, hi = tail->units - 1; /* the first unit whose end is past at */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (le32(table + 8u * mid) > at) hi = mid;
    else lo = mid + 1;
  }
  assert(le32(table + 8u * lo) > at);
  return lo;
}

int cs_array_chunk_unit_verify(const uint8_t *table, uint32_t k, const uint8_t *bytes, size_t len, char *msg,
                               size_t msg_size) {
  uint64_t offset, length;
  uint32_t crc;
  cs_array_chunk_unit(table, k, &offset, &length, &crc);
  if (len != length || cs_crc32(0, bytes, len) != crc) {
    if (msg != NULL && msg_size > 0)
      snprintf(msg, msg_size, "array chunk unit %u (payload bytes %llu..%llu) fails its CRC-32", (unsigned)k,
               (unsigned long long)offset, (unsigned long long)(offset + length));
    return CS_E_CORRUPT;
  }
  return CS_E_OK;
}

uint64_t cs_array_chunk_stored_max(const cs_array_meta *meta, uint64_t index) {
  uint64_t bytes = meta != NULL ? cs_array_chunk_bytes(&meta->geometry, index) : 0;
  if (bytes == 0) return 0;
  /* Blosc adds at most its 16-byte header; units: a Blosc chunk's blocks and prefix, or 64 KiB raw units. */
  uint64_t units = meta->codec == CS_ARRAY_CODEC_BLOSC ? CS_ARRAY_UNITS_MAX : bytes / CS_ARRAY_UNIT_BYTES + 1;
  return bytes + CS_BLOSC_HEADER_BYTES + CS_ARRAY_CHUNK_OVERHEAD(units);
}

int cs_array_chunk_encode(const cs_array_meta *meta, uint64_t index, const void *elements, size_t len, uint8_t *out,
                          size_t cap, size_t *stored_len, char *msg, size_t msg_size) {
  if (meta == NULL || elements == NULL || out == NULL || stored_len == NULL) return CS_E_INVALID_ARGUMENT;
  uint64_t count = cs_array_chunk_count(&meta->geometry), bytes = cs_array_chunk_bytes(&meta->geometry, index);
  if (index >= count) {
    if (msg != NULL && msg_size > 0)
      snprintf(msg, msg_size, "chunk index %llu: the array %s has %llu chunks", (unsigned long long)index, meta->id,
               (unsigned long long)count);
    return CS_E_INVALID_ARGUMENT;
  }
  if (len != bytes) {
    if (msg != NULL && msg_size > 0)
      snprintf(msg, msg_size, "chunk %llu of %s is %llu bytes (its elements), not %zu", (unsigned long long)index,
               meta->id, (unsigned long long)bytes, len);
    return CS_E_INVALID_ARGUMENT;
  }
  size_t payload = len;
  if (meta->codec == CS_ARRAY_CODEC_BLOSC) {
    if (cap < len + CS_BLOSC_HEADER_BYTES) return CS_E_NO_MEMORY;
    int rc = cs_blosc_encode(elements, len, meta->geometry.item_bytes, 0, out, len + CS_BLOSC_HEADER_BYTES, &payload,
                             msg, msg_size);
    if (rc != CS_E_OK) return rc;
  } else {
    if (cap < len) return CS_E_NO_MEMORY;
    memcpy(out, elements, len);
  }
  return cs_array_chunk_frame(meta->codec, out, payload, cap, stored_len, msg, msg_size);
}

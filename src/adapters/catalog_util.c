/*
 * Backend-neutral catalog helpers (include/capstore/catalog.h): the bulk form
 * of descriptor rows (TabSeparated), what a pack's rows cost in it, and the
 * key rule every catalog applies at INDEX.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "capstore/catalog.h"

/* A row being measured or written: bytes land only while they fit in cap. */
typedef struct tsv_out {
  char *out;
  size_t cap;
  size_t len;
} tsv_out;

static void put(tsv_out *o, const char *bytes, size_t n) {
  if (o->len + n <= o->cap) memcpy(o->out + o->len, bytes, n);
  o->len += n;
}

/* Decimal digits by hand: snprintf was a third of the time of formatting a row. */
static void put_u64(tsv_out *o, uint64_t value) {
  char text[20];
  size_t at = sizeof text;
  do {
    text[--at] = (char)('0' + value % 10);
    value /= 10;
  } while (value != 0);
  put(o, text + at, sizeof text - at);
}

/* The escape of a byte TabSeparated input must not see raw, or NULL for the others. */
static const char *escape_of(char c) {
  switch (c) {
  case '\0': return "\\0"; /* U+0000 is a valid text character (docs/format.md) */
  case '\\': return "\\\\";
  case '\t': return "\\t";
  case '\n': return "\\n";
  case '\r': return "\\r";
  default: return NULL;
  }
}

/* Escaped text, a NUL byte as \0 (ClickHouse reads it back as one). */
static void put_text(tsv_out *o, const char *text, size_t len) {
  size_t start = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c > '\r' && c != '\\') continue; /* the common case: nothing to look at */
    const char *esc = escape_of((char)c);
    if (esc == NULL) continue;
    put(o, text + start, i - start);
    put(o, esc, 2);
    start = i + 1;
  }
  put(o, text + start, len - start);
}

/* The twelve text columns after pack_id and key; only adapter_revision (9) may be absent. */
static bool put_texts(tsv_out *o, const cs_pack_meta *m) {
  const cs_pack_text texts[12] = {m->capture_id, m->tenant_id, m->experiment_id, m->run_id,
                                  m->session_id, m->request_id, m->sequence_id, m->model_id,
                                  m->model_revision, m->adapter_revision, m->capture_policy_version, m->hook_name};
  for (int i = 0; i < 12; i++) {
    if (texts[i].bytes == NULL && i != 9) return false;
    if (texts[i].bytes == NULL) {
      put(o, "\\N\t", 3);
      continue;
    }
    put_text(o, texts[i].bytes, texts[i].len);
    put(o, "\t", 1);
  }
  return true;
}

static void put_shape(tsv_out *o, const cs_pack_meta *m) {
  put(o, "[", 1);
  for (uint32_t d = 0; d < m->rank; d++) {
    if (d > 0) put(o, ",", 1);
    put_u64(o, m->shape[d]);
  }
  put(o, "]\t", 2);
}

size_t cs_catalog_tsv_row(const cs_pack_ref *ref, const cs_pack_record *rec, uint64_t version, char *out, size_t cap) {
  tsv_out o = {out, out == NULL ? 0 : cap, 0};
  const cs_pack_meta *m = &rec->meta;
  const char *dtype = cs_dtype_name(m->dtype);
  if (dtype == NULL || m->rank > CS_PACK_RANK_MAX) return 0;
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&ref->pack_id, id);
  put(&o, id, CS_UUID_TEXT_LEN);
  put(&o, "\t", 1);
  if (memchr(ref->key, '\0', ref->key_len) != NULL) return 0; /* the key rule (cs_catalog_index_keys_ok) */
  put_text(&o, ref->key, ref->key_len);
  put(&o, "\t", 1);
  if (!put_texts(&o, m)) return 0;
  if (m->layer_number < 0) put(&o, "-", 1);
  put_u64(&o, m->layer_number < 0 ? (uint64_t)(-(int64_t)m->layer_number) : (uint64_t)m->layer_number);
  put(&o, "\t", 1);
  const uint64_t ints[5] = {m->producer_rank, m->step_number, m->token_start, m->token_end, m->batch_position};
  for (int i = 0; i < 5; i++) {
    put_u64(&o, ints[i]);
    put(&o, "\t", 1);
  }
  put(&o, dtype, strlen(dtype));
  put(&o, "\t", 1);
  put_shape(&o, m);
  const uint64_t tail[6] = {m->captured_at_ns, rec->offset, rec->stored_length, rec->decoded_length, rec->crc32,
                            version};
  for (int i = 0; i < 6; i++) {
    put_u64(&o, tail[i]);
    put(&o, i < 5 ? "\t" : "\n", 1);
  }
  return o.len;
}

uint64_t cs_catalog_index_bytes(const cs_pack_ref *ref, const cs_pack_record *records, uint32_t record_count) {
  if (ref == NULL || (records == NULL && record_count > 0)) return 0;
  uint64_t bytes = 0;
  for (uint32_t r = 0; r < record_count; r++) bytes += cs_catalog_tsv_row(ref, &records[r], UINT64_MAX, NULL, 0);
  return bytes;
}

/* Longest part of a key a refusal quotes; the rest is "...". */

bool cs_catalog_index_keys_ok(const cs_index_pack *packs, uint32_t pack_count, char *detail, size_t detail_size) {
  assert(packs != NULL || pack_count == 0);
  assert(detail != NULL && detail_size > 0);
  for (uint32_t i = 0; i < pack_count; i++) {
    const cs_pack_ref *ref = packs[i].ref;
    assert(ref != NULL && ref->key_len < CS_KEY_MAX);
    const char *nul = memchr(ref->key, '\0', ref->key_len);
    if (nul == NULL) continue;
    char id[CS_UUID_TEXT_LEN + 1], quoted[128]; /* the sentence fits 256 bytes whole */
    cs_uuid_format(&ref->pack_id, id);
    cs_quote_bytes(ref->key, ref->key_len, 96, quoted, sizeof quoted);
    snprintf(detail, detail_size, "index: pack %s: key '%s' holds a NUL byte at byte %zu", id, quoted,
             (size_t)(nul - ref->key));
    return false;
  }
  return true;
}

static int filter_refuse(char *msg, size_t msg_size, const char *text) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "search filter: %s", text);
  return CS_E_INVALID_ARGUMENT;
}

int cs_search_filter_check(const cs_search_filter *filter, char *msg, size_t msg_size) {
  if (filter == NULL) return filter_refuse(msg, msg_size, "filter is NULL");
  if (filter->hook_name_count > CS_SEARCH_LIST_MAX) return filter_refuse(msg, msg_size, "more than 256 hook names");
  if (filter->capture_id_count > CS_SEARCH_LIST_MAX) return filter_refuse(msg, msg_size, "more than 256 capture ids");
  if (filter->hook_name_count > 0 && filter->hook_names == NULL)
    return filter_refuse(msg, msg_size, "hook_names is NULL with a count");
  if (filter->capture_id_count > 0 && filter->capture_ids == NULL)
    return filter_refuse(msg, msg_size, "capture_ids is NULL with a count");
  for (uint32_t i = 0; i < filter->hook_name_count; i++)
    if (filter->hook_names[i].bytes == NULL) return filter_refuse(msg, msg_size, "a hook name is NULL");
  for (uint32_t i = 0; i < filter->capture_id_count; i++)
    if (filter->capture_ids[i].bytes == NULL) return filter_refuse(msg, msg_size, "a capture id is NULL");
  if (filter->has_layer && filter->layer_min > filter->layer_max)
    return filter_refuse(msg, msg_size, "layer range: min is over max");
  if (filter->has_step && filter->step_min > filter->step_max)
    return filter_refuse(msg, msg_size, "step range: min is over max");
  if (filter->has_tokens && filter->token_min >= filter->token_max)
    return filter_refuse(msg, msg_size, "token range: min must be below max (the range is [min, max))");
  if (filter->has_captured_at && filter->captured_min_ns > filter->captured_max_ns)
    return filter_refuse(msg, msg_size, "capture time range: min is over max");
  if (filter->has_dtype && cs_dtype_name(filter->dtype) == NULL) return filter_refuse(msg, msg_size, "unknown dtype");
  /* Every number must fit the catalogs' signed 64-bit integers. */
  if ((filter->has_step && filter->step_max > (uint64_t)INT64_MAX) ||
      (filter->has_tokens && filter->token_max > (uint64_t)INT64_MAX) ||
      (filter->has_captured_at && filter->captured_max_ns > (uint64_t)INT64_MAX))
    return filter_refuse(msg, msg_size, "a range's max is over 2^63 - 1");
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

int cs_search_key_of(const cs_search_row *row, cs_search_key *key) {
  assert(row != NULL && key != NULL);
  const cs_pack_text *id = &row->d.record.meta.capture_id;
  if (id->len > CS_SEARCH_KEY_ID_MAX) return CS_E_TOO_LARGE;
  key->pack_id = row->d.pack_id;
  key->offset = row->d.record.offset;
  key->capture_id_len = id->len;
  if (id->len > 0) memcpy(key->capture_id, id->bytes, id->len);
  return CS_E_OK;
}

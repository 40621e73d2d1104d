/*
 * libFuzzer target: the ClickHouse adapter's answer parsers. The input is an
 * HTTP status byte pair followed by a body; the body goes through the error
 * parser and the classifier, then through the strict TabSeparated reader at
 * a column count taken from the third byte (1 to 28; 252 and above: a
 * SEARCH row's 31), and each 28-field row through the descriptor row parser
 * (each 7-field row through the inventory row parser, each 31-field row
 * through the search row parser). Nothing may crash, read out of bounds or
 * return a field outside the buffer, a row the parser accepts has a key
 * without NUL, and a search row's footer offset is the first multiple of 64
 * at or after its end (at least 64). Then the body, as a text value and as
 * the key, goes through the bulk form of a descriptor row (catalog.h), back
 * through the reader and the descriptor row parser, and, with a pack's size,
 * sha256 and end after it, through the search row parser: every text must
 * come back byte for byte, NUL bytes included (U+0000 is a valid text
 * character). The row is refused exactly when the key holds a NUL, and the
 * key rule every catalog applies at INDEX (cs_catalog_index_keys_ok)
 * refuses exactly the same inputs. A 2-column body also goes through the
 * schema check's answer parser (the tables' kind, the database name).
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "capstore/clickhouse.h"

/* An 11-field answer row through the array candidate parser: key without NUL, texts pointing at their fields. */
static void array_row_check(char **fields, const size_t *lengths) {
  cs_array_candidate row;
  if (cs_clickhouse_array_candidate_row(fields, lengths, &row) != CS_E_OK) return;
  assert(strlen(row.key) == lengths[5] && memcmp(row.key, fields[5], lengths[5]) == 0);
  assert(row.nonce.bytes == fields[2] && row.nonce.len == lengths[2]);
  assert(row.capture_id.bytes == fields[3] && row.capture_id.len == lengths[3]);
  assert(lengths[0] == 1 && row.geometry == (fields[0][0] == '1'));
}

/* The schema check's answer (2 columns): a database name of [A-Za-z0-9_] only when accepted; a kind refusal names it. */
static void tables_answer_check(const char *body, size_t len, bool replicated) {
  static const char *const names[5] = {"p_claims_v1", "p_descriptors_v1", "p_inventory_v1", "p_publishes_v1",
                                       "p_rejected_v1"};
  char *copy = malloc(len + 1);
  if (copy == NULL) return;
  memcpy(copy, body, len);
  bool exists[5];
  char db[65], detail[256] = "";
  int rc = cs_clickhouse_tables_answer(copy, len, names, replicated, exists, db, sizeof db, detail, sizeof detail);
  assert(rc == CS_E_OK || rc == CS_E_CONFIG || rc == CS_E_PARSE);
  if (rc == CS_E_OK) assert(db[0] != '\0' && strspn(db, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
                                                  strlen(db));
  if (rc == CS_E_CONFIG) assert(strstr(detail, "table p_") != NULL);
  free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The bulk row of rec with a SEARCH answer's three pack columns after it
 * (size, sha256, the end of the last record, drawn from len), through the
 * reader and the search row parser: the texts whole, the pack's values and
 * the footer offset (the first multiple of 64 at or after the end, at least 64).
 */
static void search_round_trip(const cs_pack_ref *ref, const cs_pack_record *rec, const char *text, size_t len) {
  size_t n = cs_catalog_tsv_row(ref, rec, 7, NULL, 0);
  if (n == 0) return;
  uint64_t end = (uint64_t)len * 977u, size = (uint64_t)len + 64u;
  char tail[128], sha[65];
  for (int i = 0; i < 32; i++) snprintf(sha + 2 * i, 3, "%02x", (unsigned)(len + (size_t)i) & 0xffu);
  int t = snprintf(tail, sizeof tail, "%llu\t%s\t%llu\n", (unsigned long long)size, sha, (unsigned long long)end);
  assert(t > 0 && (size_t)t < sizeof tail);
  char *row = malloc(n + (size_t)t);
  if (row == NULL) return;
  assert(cs_catalog_tsv_row(ref, rec, 7, row, n) == n);
  row[n - 1] = '\t'; /* the descriptor's columns, then the pack's */
  memcpy(row + n, tail, (size_t)t);
  cs_clickhouse_tsv tsv = {row, row + n + (size_t)t};
  char *f[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  size_t flen[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  assert(cs_clickhouse_tsv_next(&tsv, f, flen, CS_CLICKHOUSE_SEARCH_COLUMN_COUNT) == 1);
  assert(cs_clickhouse_tsv_next(&tsv, f, flen, CS_CLICKHOUSE_SEARCH_COLUMN_COUNT) == 0);
  static cs_search_row back;
  assert(cs_clickhouse_search_row(f, flen, &back) == CS_E_OK);
  const cs_pack_text got[3] = {back.d.record.meta.capture_id, back.d.record.meta.run_id, back.d.record.meta.hook_name};
  for (int i = 0; i < 3; i++) assert(got[i].len == len && memcmp(got[i].bytes, text, len) == 0);
  assert(back.d.version == 7 && back.pack_size_bytes == size);
  for (int i = 0; i < 32; i++) assert(back.pack_sha256[i] == ((len + (size_t)i) & 0xffu));
  assert(back.footer_offset == (end <= 64 ? 64 : (end + 63) / 64 * 64));
  free(row);
}

static void bulk_round_trip(const char *text, size_t len) {
  static cs_pack_ref ref;
  static cs_pack_record rec;
  memset(&rec, 0, sizeof rec);
  bool key_fits = len < CS_KEY_MAX;
  if (cs_pack_ref_set_key(&ref, key_fits ? text : "k", key_fits ? len : 1) != CS_E_OK) abort();
  cs_pack_text value = {text, len}, plain = {"v", 1};
  cs_pack_meta *m = &rec.meta;
  m->capture_id = m->run_id = m->hook_name = value;
  m->tenant_id = m->experiment_id = m->session_id = m->request_id = m->sequence_id = plain;
  m->model_id = m->model_revision = m->capture_policy_version = plain;
  m->adapter_revision = len % 2 == 0 ? value : (cs_pack_text){NULL, 0};
  size_t n = cs_catalog_tsv_row(&ref, &rec, 7, NULL, 0);
  bool key_nul = memchr(ref.key, '\0', ref.key_len) != NULL; /* texts may hold NUL: only the key may not */
  assert((n == 0) == key_nul);
  cs_index_pack batch = {.ref = &ref, .records = &rec, .record_count = 1};
  char detail[256];
  assert(cs_catalog_index_keys_ok(&batch, 1, detail, sizeof detail) == !key_nul); /* the rule every catalog applies */
  assert(!key_nul || (strstr(detail, "key") != NULL && strstr(detail, "NUL") != NULL &&
                      memchr(detail, '\0', sizeof detail) != NULL));
  if (n == 0) return;
  char *row = malloc(n);
  if (row == NULL) return;
  assert(cs_catalog_tsv_row(&ref, &rec, 7, row, n) == n);
  cs_clickhouse_tsv tsv = {row, row + n};
  char *f[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  size_t flen[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  assert(cs_clickhouse_tsv_next(&tsv, f, flen, CS_CATALOG_DESCRIPTOR_COLUMN_COUNT) == 1);
  assert(cs_clickhouse_tsv_next(&tsv, f, flen, CS_CATALOG_DESCRIPTOR_COLUMN_COUNT) == 0);
  const int columns[4] = {2, 5, 13, 1}; /* capture_id, run_id, hook_name, key */
  for (int i = 0; i < (key_fits ? 4 : 3); i++)
    assert(f[columns[i]] != NULL && flen[columns[i]] == len && memcmp(f[columns[i]], text, len) == 0);
  assert(len % 2 == 0 ? f[11] != NULL && flen[11] == len : f[11] == NULL);
  static cs_descriptor_row back;
  assert(cs_clickhouse_descriptor_row(f, flen, &back) == CS_E_OK); /* as READ_DESCRIPTORS reads it */
  const cs_pack_text got[3] = {back.record.meta.capture_id, back.record.meta.run_id, back.record.meta.hook_name};
  for (int i = 0; i < 3; i++) assert(got[i].len == len && memcmp(got[i].bytes, text, len) == 0);
  assert(strlen(back.key) == ref.key_len && memcmp(back.key, ref.key, ref.key_len) == 0);
  free(row);
  search_round_trip(&ref, &rec, text, len);
}

/* A 28-field answer row through the descriptor row parser: a row it accepts has a key without NUL, in bounds. */
static void descriptor_row_check(char **fields, const size_t *lengths) {
  static cs_descriptor_row row;
  if (cs_clickhouse_descriptor_row(fields, lengths, &row) != CS_E_OK) return;
  assert(memchr(row.key, '\0', sizeof row.key) != NULL);
  assert(strlen(row.key) == lengths[1] && memcmp(row.key, fields[1], lengths[1]) == 0);
  assert(row.record.meta.capture_id.bytes == fields[2] && row.record.meta.capture_id.len == lengths[2]);
  assert(row.record.meta.rank <= CS_PACK_RANK_MAX && row.record.meta.dtype < CS_DTYPE_COUNT_);
}

/* A 7-field answer row through the inventory row parser: a row it accepts has a key without NUL, in bounds. */
static void inventory_row_check(char **fields, const size_t *lengths) {
  static cs_inventory_row row;
  if (cs_clickhouse_inventory_row(fields, lengths, &row) != CS_E_OK) return;
  assert(row.ref.key_len == lengths[1] && row.ref.key_len < CS_KEY_MAX && row.ref.key[row.ref.key_len] == '\0');
  assert(memchr(row.ref.key, '\0', row.ref.key_len) == NULL && memcmp(row.ref.key, fields[1], lengths[1]) == 0);
  char text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&row.ref.pack_id, text);
  assert(lengths[0] == CS_UUID_TEXT_LEN && strncasecmp(text, fields[0], CS_UUID_TEXT_LEN) == 0);
}

/* A 31-field answer row through the search row parser: key without NUL, texts in bounds, the footer offset aligned. */
static void search_row_check(char **fields, const size_t *lengths) {
  static cs_search_row row;
  uint64_t end = 0;
  bool end_ok = fields[30] != NULL && memchr(fields[30], '\0', lengths[30]) == NULL &&
                cs_clickhouse_parse_u64(fields[30], &end) == CS_E_OK; /* before the parser: it cuts the shape */
  if (cs_clickhouse_search_row(fields, lengths, &row) != CS_E_OK) return;
  assert(end_ok && end <= UINT64_MAX - 63);
  assert(memchr(row.d.key, '\0', sizeof row.d.key) != NULL);
  assert(strlen(row.d.key) == lengths[1] && memcmp(row.d.key, fields[1], lengths[1]) == 0);
  assert(row.d.record.meta.capture_id.bytes == fields[2] && row.d.record.meta.capture_id.len == lengths[2]);
  assert(row.d.record.meta.rank <= CS_PACK_RANK_MAX && row.d.record.meta.dtype < CS_DTYPE_COUNT_);
  assert(row.footer_offset % 64 == 0 && row.footer_offset >= 64 && row.footer_offset >= end);
  assert(row.footer_offset - end < 64 || end < 64); /* the first multiple of 64 at or after the end */
  assert(lengths[29] == 64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  long status = 100 + (long)((data[0] << 8 | data[1]) % 500);
  uint32_t columns = data[2] < 252 ? 1 + data[2] % 28 : CS_CLICKHOUSE_SEARCH_COLUMN_COUNT;
  const char *body = (const char *)data + 3;
  size_t len = size - 3;
  int32_t code = 0;
  cs_outcome outcome = cs_clickhouse_classify(status, body, len, &code);
  assert(outcome < CS_OUT_COUNT_);
  if (cs_clickhouse_parse_error(body, len, &code) == CS_E_OK) assert(code >= 0 && code <= 999999);
  char *copy = malloc(len + 1);
  if (copy == NULL) return 0;
  memcpy(copy, body, len);
  cs_clickhouse_tsv tsv = {copy, copy + len};
  char *fields[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  size_t lengths[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  for (int rows = 0; rows < 100000; rows++) {
    int got = cs_clickhouse_tsv_next(&tsv, fields, lengths, columns);
    if (got != 1) break;
    for (uint32_t i = 0; i < columns; i++) {
      if (fields[i] == NULL) continue;
      assert(fields[i] >= copy && fields[i] + lengths[i] <= copy + len);
      assert(fields[i][lengths[i]] == '\0');
      uint64_t value = 0;
      (void)cs_clickhouse_parse_u64(fields[i], &value);
    }
    if (columns == CS_CATALOG_DESCRIPTOR_COLUMN_COUNT) descriptor_row_check(fields, lengths);
    if (columns == CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT) inventory_row_check(fields, lengths);
    if (columns == CS_CLICKHOUSE_SEARCH_COLUMN_COUNT) search_row_check(fields, lengths);
    if (columns == CS_CLICKHOUSE_ARRAY_COLUMN_COUNT) array_row_check(fields, lengths);
  }
  if (columns == 2) tables_answer_check(body, len, data[0] & 1);
  free(copy);
  bulk_round_trip(body, len);
  return 0;
}

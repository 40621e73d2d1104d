/*
 * libFuzzer target: the ClickHouse adapter's answer parsers. The input is an
 * HTTP status byte pair followed by a body; the body goes through the error
 * parser and the classifier, then through the strict TabSeparated reader at
 * a column count taken from the first byte. Nothing may crash, read out of
 * bounds or return a field outside the buffer. Then the body, as a text
 * value and as the key, goes through the bulk form of a descriptor row
 * (catalog.h) and back through the reader: it must come back byte for byte,
 * or be refused exactly when it holds a NUL, and the text rule every catalog
 * applies at INDEX (cs_catalog_index_text_ok) refuses exactly the same inputs.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/clickhouse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
  bool has_nul = memchr(text, '\0', len) != NULL || (key_fits && memchr(ref.key, '\0', ref.key_len) != NULL);
  assert((n == 0) == has_nul);
  cs_index_pack batch = {.ref = &ref, .records = &rec, .record_count = 1};
  char detail[256];
  assert(cs_catalog_index_text_ok(&batch, 1, detail, sizeof detail) == !has_nul); /* the rule every catalog applies */
  assert(!has_nul || (strstr(detail, "NUL") != NULL && memchr(detail, '\0', sizeof detail) != NULL));
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
  for (int i = 0; i < (key_fits ? 4 : 3); i++) assert(f[columns[i]] != NULL && flen[columns[i]] == len && memcmp(f[columns[i]], text, len) == 0);
  assert(len % 2 == 0 ? f[11] != NULL && flen[11] == len : f[11] == NULL);
  free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  long status = 100 + (long)((data[0] << 8 | data[1]) % 500);
  uint32_t columns = 1 + data[2] % 28;
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
  char *fields[28];
  size_t lengths[28];
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
  }
  free(copy);
  bulk_round_trip(body, len);
  return 0;
}

/*
 * libFuzzer target: the ClickHouse adapter's answer parsers. The input is an
 * HTTP status byte pair followed by a body; the body goes through the error
 * parser and the classifier, then through the strict TabSeparated reader at
 * a column count taken from the first byte. Nothing may crash, read out of
 * bounds or return a field outside the buffer.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/clickhouse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
  return 0;
}

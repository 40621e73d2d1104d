/*
 * fuzz/fuzz_array_meta.c: libFuzzer target for the capture-array document
 * parser (capstore/array_meta.h): the geometry object a reader or a writer
 * loads from the store.
 *
 * Every input is parsed; the result must keep the parser's contract:
 *   - the answer is CS_E_OK, CS_E_PARSE (with a message) or CS_E_TOO_LARGE;
 *   - a parsed document holds a valid id and geometry (the checks pass again);
 *   - only canonical documents parse: the input is byte for byte the
 *     encoding of what was parsed, which parses back to the same array.
 *
 * Replay one input: ./build-fuzz/fuzz/fuzz_array_meta path/to/input
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/array_meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                   \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      fprintf(stderr, "fuzz_array_meta: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                        \
    }                                                                                                 \
  } while (0)

static cs_array_meta parsed, again;
static char text[CS_ARRAY_META_BYTES_MAX], text2[CS_ARRAY_META_BYTES_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char msg[256] = "";
  int rc = cs_array_meta_decode((const char *)data, size, &parsed, msg, sizeof msg);
  CHECK(rc == CS_E_OK || rc == CS_E_PARSE || rc == CS_E_TOO_LARGE);
  if (rc != CS_E_OK) {
    CHECK(msg[0] != '\0');
    return 0;
  }
  CHECK(cs_array_id_check(parsed.id, NULL, 0) == CS_E_OK);
  CHECK(cs_array_geometry_check(&parsed.geometry, NULL, 0) == CS_E_OK);
  size_t len = 0, len2 = 0;
  CHECK(cs_array_meta_encode(&parsed, text, sizeof text, &len) == CS_E_OK);
  CHECK(len == size && memcmp(text, data, size) == 0);
  CHECK(cs_array_meta_decode(text, len, &again, msg, sizeof msg) == CS_E_OK);
  char buf[32];
  CHECK(cs_array_meta_diff(&parsed, &again, buf, sizeof buf) == NULL);
  CHECK(cs_array_meta_encode(&again, text2, sizeof text2, &len2) == CS_E_OK);
  CHECK(len == len2 && memcmp(text, text2, len) == 0);
  return 0;
}

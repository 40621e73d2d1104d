/*
 * fuzz/fuzz_array_claim.c: libFuzzer target for a capture array's slot claim
 * parser (capstore/array.h, cs_array_claim_parse): the bytes a writer reads
 * back from the store under arrays/<id>/slots/<index>, written by any other
 * writer (or by anybody with access to the bucket).
 *
 * Every input is parsed; the result must keep the parser's contract:
 *   - the answer is CS_E_OK or CS_E_PARSE;
 *   - only canonical claims parse: the input is byte for byte what
 *     cs_array_claim_format writes for its nonce and the parsed time;
 *   - staleness never holds for a claim from the future, and always for one
 *     at least the TTL old.
 *
 * Replay one input: ./build-fuzz/fuzz/fuzz_array_claim path/to/input
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/array.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                    \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      fprintf(stderr, "fuzz_array_claim: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                         \
    }                                                                                                  \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint64_t at = 0;
  int rc = cs_array_claim_parse(data, size, &at);
  CHECK(rc == CS_E_OK || rc == CS_E_PARSE);
  if (rc != CS_E_OK) return 0;
  char again[CS_ARRAY_CLAIM_BYTES_MAX];
  size_t len = 0;
  CHECK(size >= CS_ARRAY_CLAIM_NONCE_HEX);
  CHECK(cs_array_claim_format((const char *)data, at, again, &len) == CS_E_OK);
  CHECK(len == size && memcmp(again, data, size) == 0);
  CHECK(cs_array_claim_stale(at, at, 0));
  if (at > 0) CHECK(!cs_array_claim_stale(at, at - 1, 0));
  if (at < UINT64_MAX - 10) CHECK(cs_array_claim_stale(at, at + 10, 10) && !cs_array_claim_stale(at, at + 9, 10));
  return 0;
}

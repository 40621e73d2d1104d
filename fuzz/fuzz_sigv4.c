/*
 * Fuzzes the SigV4 canonicaliser (src/adapters/sigv4.c): no crash, no leak,
 * and canonicalising the canonical form again gives the same bytes.
 *
 * Input: byte 0 picks normalize_path; then '\n'-separated lines: the raw
 * path, the raw query, and "name:value" headers.
 */
#include "capstore/sigv4.h"

#include "capstore/types.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_HEADERS_MAX 32u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool name_is(const char *name, size_t len, const char *want) {
  if (len != strlen(want)) return false;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    if (c != want[i]) return false;
  }
  return true;
}

/* The headers the fuzzer (host) and the signer (x-amz-date) add themselves. */
static bool is_added_header(const char *name, size_t len) {
  return name_is(name, len, "host") || name_is(name, len, "x-amz-date");
}

/* Splits text into lines; returns how many (at most max). */
static size_t split_lines(const char *text, size_t len, const char **starts, size_t *lens, size_t max) {
  size_t n = 0, i = 0;
  while (i <= len && n < max) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len;
    starts[n] = text + i;
    lens[n] = end - i;
    n++;
    if (!nl) break;
    i = end + 1;
  }
  return n;
}

static char *canonicalise(bool normalize, const char *path, size_t path_len, const char *query, size_t query_len,
                          const char **lines, const size_t *lens, size_t line_count) {
  cs_sigv4_header headers[FUZZ_HEADERS_MAX + 1];
  uint32_t n = 0;
  headers[n++] = (cs_sigv4_header){"host", 4, "example.com", 11};
  for (size_t i = 0; i < line_count && n <= FUZZ_HEADERS_MAX; i++) {
    const char *colon = memchr(lines[i], ':', lens[i]);
    if (!colon) continue;
    size_t name_len = (size_t)(colon - lines[i]);
    if (is_added_header(lines[i], name_len)) continue;
    headers[n++] = (cs_sigv4_header){lines[i], name_len, colon + 1, lens[i] - name_len - 1};
  }
  cs_sigv4_params params = {.access_key_id = "AKID",
                            .secret_access_key = "SECRET",
                            .region = "us-east-1",
                            .service = "s3",
                            .amz_date = "20260101T000000Z",
                            .normalize_path = normalize};
  cs_sigv4_request req = {.method = "GET",
                          .path = path,
                          .path_len = path_len,
                          .query = query,
                          .query_len = query_len,
                          .headers = headers,
                          .header_count = n,
                          .payload_hash = CS_SIGV4_UNSIGNED_PAYLOAD};
  char *canonical = NULL;
  if (cs_sigv4_canonical_request(&params, &req, &canonical) != CS_E_OK) return NULL;
  return canonical;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 65536) return 0;
  bool normalize = data[0] & 1;
  const char *text = (const char *)data + 1;
  const char *lines[FUZZ_HEADERS_MAX + 2];
  size_t lens[FUZZ_HEADERS_MAX + 2];
  size_t n = split_lines(text, size - 1, lines, lens, FUZZ_HEADERS_MAX + 2);
  if (n < 2) return 0;
  char *first = canonicalise(normalize, lines[0], lens[0], lines[1], lens[1], lines + 2, lens + 2, n - 2);
  if (!first) return 0;

  /* Read the canonical form back: method, path, query, headers, "", signed, hash. */
  const char *cl[FUZZ_HEADERS_MAX + 8];
  size_t cll[FUZZ_HEADERS_MAX + 8];
  size_t cn = split_lines(first, strlen(first), cl, cll, FUZZ_HEADERS_MAX + 8);
  if (cn < 7) abort();
  char *raw_path = malloc(cll[1] + 1);
  if (!raw_path) abort();
  size_t raw_len = cs_sigv4_uri_decode(cl[1], cll[1], raw_path, cll[1] + 1);
  size_t header_lines = cn - 6;
  char *second = canonicalise(normalize, raw_path, raw_len, cl[2], cll[2], cl + 3, cll + 3, header_lines);
  if (!second || strcmp(first, second) != 0) {
    fprintf(stderr, "unstable canonical form:\n%s\n---\n%s\n", first, second ? second : "(refused)");
    abort();
  }
  free(raw_path);
  free(first);
  free(second);
  return 0;
}

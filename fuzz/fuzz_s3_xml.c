/*
 * Fuzzes the S3 answer parsers (src/adapters/s3_xml.c): ListObjectsV2 and
 * <Error>. No crash, no leak; a page never holds more keys than its
 * capacity, every key and token is NUL-terminated within CS_KEY_MAX, and a
 * refused body leaves no keys behind.
 */
#include "capstore/s3.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char keys[8][CS_KEY_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > ((size_t)1 << 20)) return 0;
  const char *body = (const char *)data;
  cs_list_page page;
  memset(&page, 0, sizeof page);
  page.keys = keys;
  page.key_capacity = 8;
  char detail[160];
  int rc = cs_s3_parse_list(body, size, &page, detail, sizeof detail);
  if (page.key_count > page.key_capacity) abort();
  if (rc != CS_E_OK && (page.key_count != 0 || detail[0] == '\0')) abort();
  for (uint32_t i = 0; i < page.key_count; i++) {
    if (!memchr(page.keys[i], '\0', CS_KEY_MAX)) abort();
  }
  if (!memchr(page.next_token, '\0', CS_KEY_MAX)) abort();
  char code[64], message[128];
  (void)cs_s3_parse_error(body, size, code, sizeof code, message, sizeof message);
  if (!memchr(code, '\0', sizeof code) || !memchr(message, '\0', sizeof message)) abort();
  return 0;
}

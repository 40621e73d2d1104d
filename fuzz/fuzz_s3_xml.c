/*
 * Fuzzes the S3 answer parsers (src/adapters/s3_xml.c): ListObjectsV2 and
 * <Error>. No crash, no leak; a page never holds more keys than its
 * capacity, every key and token is NUL-terminated within CS_KEY_MAX, every
 * key starts with the prefix asked for and passes the store's key rule
 * (cs_store_key_check: no "." or ".." segment; such keys are left out and
 * the detail of an accepted body says so), and a refused body leaves no keys
 * behind and says why.
 *
 * Input: byte 0 picks the prefix asked for ("" or "v1/"); the rest is the body.
 */
#include "capstore/s3.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char keys[8][CS_KEY_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > ((size_t)1 << 20)) return 0;
  const char *prefix = (data[0] & 1) ? "v1/" : "";
  const char *body = (const char *)data + 1;
  size--;
  cs_list_page page;
  memset(&page, 0, sizeof page);
  page.keys = keys;
  page.key_capacity = 8;
  char detail[256];
  int rc = cs_s3_parse_list(body, size, prefix, &page, detail, sizeof detail);
  if (page.key_count > page.key_capacity) abort();
  if (rc != CS_E_OK && (page.key_count != 0 || detail[0] == '\0')) abort();
  if (rc == CS_E_OK && detail[0] != '\0' && strncmp(detail, "left out ", 9) != 0) abort();
  for (uint32_t i = 0; i < page.key_count; i++) {
    if (!memchr(page.keys[i], '\0', CS_KEY_MAX)) abort();
    if (strncmp(page.keys[i], prefix, strlen(prefix)) != 0) abort();
    if (cs_store_key_check(page.keys[i], false, NULL, 0) != CS_E_OK) abort();
  }
  if (!memchr(page.next_token, '\0', CS_KEY_MAX)) abort();
  char code[64], message[128];
  (void)cs_s3_parse_error(body, size, code, sizeof code, message, sizeof message);
  if (!memchr(code, '\0', sizeof code) || !memchr(message, '\0', sizeof message)) abort();
  return 0;
}

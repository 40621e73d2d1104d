/*
 * Fuzzes the S3 answer parsers (src/adapters/s3_xml.c): ListObjectsV2 and
 * <Error>. No crash, no leak; a page never holds more keys than its
 * capacity, every key and token is NUL-terminated within CS_KEY_MAX, every
 * key starts with the prefix asked for and passes the store's key rule
 * (cs_store_key_check: no "." or ".." segment; such keys, and keys of
 * CS_KEY_MAX bytes or more or holding a NUL once url-decoded, are left out
 * and the detail of an accepted body says so), and a refused body leaves no
 * keys behind and says why.
 *
 * Input: byte 0 picks the prefix asked for ("" or "v1/", bit 0) and the mode
 * (bit 1). Mode 0: the rest is the body. Mode 1, the url decoding round
 * trip: the rest is one key's bytes, which go into an answer saying
 * <EncodingType>url</EncodingType>, encoded as S3 does ("+" for a space,
 * "%XX" for a byte outside the unreserved set, upper or lower case hex by
 * byte 0's bit 2) after the prefix; the page must hold exactly that key, or
 * leave it out with a note when capstore cannot hold it.
 */
#include "capstore/s3.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char keys[8][CS_KEY_MAX];

static void check_page(int rc, const cs_list_page *page, const char *detail, const char *prefix) {
  if (page->key_count > page->key_capacity) abort();
  if (rc != CS_E_OK && (page->key_count != 0 || detail[0] == '\0')) abort();
  if (rc == CS_E_OK && detail[0] != '\0' && strncmp(detail, "left out ", 9) != 0) abort();
  for (uint32_t i = 0; i < page->key_count; i++) {
    if (!memchr(page->keys[i], '\0', CS_KEY_MAX)) abort();
    if (strncmp(page->keys[i], prefix, strlen(prefix)) != 0) abort();
    if (cs_store_key_check(page->keys[i], false, NULL, 0) != CS_E_OK) abort();
  }
  if (!memchr(page->next_token, '\0', CS_KEY_MAX)) abort();
}

/* S3's url encoding of key[0..len) into out (3 * len + 1 bytes). */
static void s3_encode(const uint8_t *key, size_t len, bool upper, char *out) {
  const char *hex = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    uint8_t c = key[i];
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                 c == '.' || c == '~' || c == '/';
    if (plain) {
      out[n++] = (char)c;
    } else if (c == ' ') {
      out[n++] = '+';
    } else {
      out[n++] = '%';
      out[n++] = hex[c >> 4];
      out[n++] = hex[c & 15u];
    }
  }
  out[n] = '\0';
}

static void round_trip(const uint8_t *key, size_t len, bool upper, const char *prefix) {
  static char encoded[3 * 2 * CS_KEY_MAX + 1];
  static char body[sizeof encoded + 256];
  static char whole[2 * CS_KEY_MAX];
  if (len >= CS_KEY_MAX) return;
  size_t prefix_len = strlen(prefix);
  memcpy(whole, prefix, prefix_len);
  memcpy(whole + prefix_len, key, len);
  s3_encode((const uint8_t *)whole, prefix_len + len, upper, encoded);
  int n = snprintf(body, sizeof body, "<ListBucketResult><Contents><Key>%s</Key></Contents>"
                   "<EncodingType>url</EncodingType></ListBucketResult>", encoded);
  if (n < 0 || (size_t)n >= sizeof body) abort();
  cs_list_page page;
  memset(&page, 0, sizeof page);
  page.keys = keys;
  page.key_capacity = 8;
  char detail[256];
  int rc = cs_s3_parse_list(body, (size_t)n, prefix, &page, detail, sizeof detail);
  check_page(rc, &page, detail, prefix);
  size_t whole_len = prefix_len + len;
  if (whole_len == 0) {
    if (rc != CS_E_PARSE) abort(); /* an empty key is the server's error */
    return;
  }
  if (rc != CS_E_OK) abort(); /* well encoded and under the prefix: never refused */
  whole[whole_len] = '\0';
  bool holdable = whole_len < CS_KEY_MAX && !memchr(whole, '\0', whole_len) &&
                  cs_store_key_check(whole, false, NULL, 0) == CS_E_OK;
  if (holdable && (page.key_count != 1 || strcmp(page.keys[0], whole) != 0 || detail[0] != '\0')) abort();
  if (!holdable && (page.key_count != 0 || strncmp(detail, "left out 1 listed key ", 22) != 0)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > ((size_t)1 << 20)) return 0;
  const char *prefix = (data[0] & 1) ? "v1/" : "";
  if (data[0] & 2) {
    round_trip(data + 1, size - 1, (data[0] & 4) != 0, prefix);
    return 0;
  }
  const char *body = (const char *)data + 1;
  size--;
  cs_list_page page;
  memset(&page, 0, sizeof page);
  page.keys = keys;
  page.key_capacity = 8;
  char detail[256];
  int rc = cs_s3_parse_list(body, size, prefix, &page, detail, sizeof detail);
  check_page(rc, &page, detail, prefix);
  char code[64], message[128];
  (void)cs_s3_parse_error(body, size, code, sizeof code, message, sizeof message);
  if (!memchr(code, '\0', sizeof code) || !memchr(message, '\0', sizeof message)) abort();
  return 0;
}

/*
 * libFuzzer target for the runtime's configuration check (capstore.h): the
 * strings a deployment hands capstore_config_validate (name, key prefix, S3
 * endpoint, bucket, region and secret, ClickHouse url and database), cut
 * from the input at '\n'. Whatever they hold, the check answers OK or
 * CS_E_CONFIG with a NUL-terminated message that never quotes the secret,
 * and what it accepts keeps the rules later code relies on: a key prefix
 * empty or ending in '/' without '.' or '..' segments, an endpoint with an
 * explicit scheme and no path, whose host is a name without brackets and at
 * most one ':' or one IPv6 literal in brackets ("[::1]"), and whose port,
 * if any, is 1..65535.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/capstore.h"

#define FIELDS 9

/* Aborts unless text[0..len) is empty or ":" and a decimal 1..65535. */
static void check_port(const char *text, size_t len) {
  if (len == 0) return;
  if (text[0] != ':' || len < 2 || len > 6) abort();
  unsigned long port = 0;
  for (size_t i = 1; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') abort();
    port = port * 10 + (unsigned long)(text[i] - '0');
  }
  if (port < 1 || port > 65535) abort();
}

/* Aborts unless the accepted url's host is a plain name or one bracketed IPv6 literal, then a valid port. */
static void check_host(const char *url) {
  const char *scheme_end = strstr(url, "://");
  if (scheme_end == NULL) abort();
  const char *host = scheme_end + 3;
  size_t len = strcspn(host, "/?#");
  if (len == 0) abort();
  if (host[0] != '[') {
    if (memchr(host, '[', len) != NULL || memchr(host, ']', len) != NULL) abort();
    const char *colon = memchr(host, ':', len);
    if (colon == host) abort();
    if (colon == NULL) return;
    check_port(colon, len - (size_t)(colon - host));
    return;
  }
  const char *close = memchr(host, ']', len);
  if (close == NULL || close == host + 1 || memchr(host, ':', (size_t)(close - host)) == NULL) abort();
  if (strspn(host + 1, "0123456789abcdefABCDEF:.") != (size_t)(close - host) - 1) abort();
  check_port(close + 1, len - (size_t)(close - host) - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char *field[FIELDS] = {0};
  char *at = text;
  for (int i = 0; i < FIELDS && at != NULL; i++) {
    field[i] = at;
    char *nl = strchr(at, '\n');
    if (nl != NULL) *nl = '\0';
    at = nl != NULL ? nl + 1 : NULL;
  }
  capstore_config cfg;
  capstore_config_default(&cfg);
  cfg.spool_dir = "/nonexistent/spool"; /* validate opens nothing */
  if (field[0] != NULL && field[0][0] != '\0') cfg.name = field[0];
  cfg.key_prefix = field[1];
  bool s3 = field[2] != NULL && field[2][0] != '\0';
  cfg.store_dir = s3 ? NULL : "/nonexistent/bucket";
  cfg.s3_endpoint = s3 ? field[2] : NULL;
  cfg.s3_bucket = field[3];
  cfg.s3_region = field[4];
  cfg.s3_access_key_id = "AKIAFUZZ";
  /* The secret carries a marker no message has, so finding it in one means it leaked. */
  char secret[300];
  snprintf(secret, sizeof secret, "S3CR3T-%.280s", field[5] != NULL ? field[5] : "");
  cfg.s3_secret_access_key = secret;
  cfg.s3_allow_insecure = size % 2 == 0;
  bool ch = field[6] != NULL && field[6][0] != '\0';
  cfg.sqlite_path = ch ? NULL : "/nonexistent/catalog.db";
  cfg.clickhouse_url = ch ? field[6] : NULL;
  cfg.clickhouse_database = field[7] != NULL && field[7][0] != '\0' ? field[7] : NULL;
  cfg.clickhouse_password = field[8];
  cfg.clickhouse_allow_insecure = size % 3 == 0;
  char msg[256];
  memset(msg, 'x', sizeof msg);
  int rc = capstore_config_validate(&cfg, msg, sizeof msg);
  if (rc != CS_E_OK && rc != CS_E_CONFIG) abort();
  if (memchr(msg, '\0', sizeof msg) == NULL) abort();
  /* A secret long enough to be recognised never appears in a refusal. */
  if (strstr(msg, "S3CR3T-") != NULL) abort();
  if (rc == CS_E_OK && cfg.key_prefix != NULL) {
    size_t len = strlen(cfg.key_prefix);
    if (len > 0 && cfg.key_prefix[len - 1] != '/') abort();
    if (strstr(cfg.key_prefix, "/../") != NULL || strncmp(cfg.key_prefix, "../", 3) == 0) abort();
    if (strstr(cfg.key_prefix, "//") != NULL) abort();
  }
  if (rc == CS_E_OK && s3) {
    const char *host = strstr(cfg.s3_endpoint, "://");
    if (host == NULL) abort();
    const char *path = strchr(host + 3, '/');
    if (path != NULL && strcmp(path, "/") != 0) abort();
    check_host(cfg.s3_endpoint);
  }
  if (rc == CS_E_OK && ch) check_host(cfg.clickhouse_url);
  free(text);
  return 0;
}

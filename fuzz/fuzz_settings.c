/*
 * libFuzzer target for the configuration file (capstore/settings.h): any
 * bytes are parsed; the answer is OK or CS_E_CONFIG with a NUL-terminated
 * message. What parses is validated, and its effective configuration (the
 * JSON capstore_settings_json writes) parses again to the same JSON: the
 * file form round-trips whatever values a file set.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/capstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  capstore_settings *s, *again;
  if (capstore_settings_new(&s) != CS_E_OK) return 0;
  char msg[600];
  memset(msg, 'x', sizeof msg);
  int rc = capstore_settings_parse(s, (const char *)data, size, "fuzz", msg, sizeof msg);
  if (memchr(msg, '\0', sizeof msg) == NULL) abort();
  if (rc != CS_E_OK && rc != CS_E_CONFIG) abort();
  if (rc == CS_E_OK) {
    rc = capstore_settings_validate(s, msg, sizeof msg);
    if (rc != CS_E_OK && rc != CS_E_CONFIG) abort();
    size_t need = capstore_settings_json(s, NULL, 0);
    char *first = malloc(need), *second = malloc(need);
    if (first == NULL || second == NULL || capstore_settings_json(s, first, need) != need) abort();
    if (capstore_settings_new(&again) != CS_E_OK) abort();
    if (capstore_settings_parse(again, first, strlen(first), "effective", msg, sizeof msg) != CS_E_OK) abort();
    if (capstore_settings_json(again, second, need) != need || strcmp(first, second) != 0) abort();
    capstore_settings_free(again);
    free(first);
    free(second);
  }
  capstore_settings_free(s);
  return 0;
}

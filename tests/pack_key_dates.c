/*
 * Reads one captured_at_ns a line (decimal) on stdin and prints "<ns> <date>",
 * the date segment of the object key cs_pack_object_key makes for it.
 * tests/pack_ref/key_date_test.py compares these with Python's own
 * datetime.fromtimestamp(ns / 1e9, tz=UTC), which is how DMI dates a key.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/pack.h"

static int print_date(unsigned long long ns) {
  cs_pack_key_fields fields = {.tenant_id = cs_pack_text_of("t"),
                               .session_id = cs_pack_text_of("s"),
                               .captured_at_ns = ns};
  char key[CS_KEY_MAX];
  size_t len = 0;
  cs_pack_error err;
  if (cs_pack_object_key("", 0, &fields, key, &len, &err) != CS_E_OK) {
    fprintf(stderr, "pack_key_dates: %llu: %s\n", ns, err.message);
    return 1;
  }
  const char *date = strstr(key, "/date=");
  if (date == NULL) return 1;
  printf("%llu %.10s\n", ns, date + strlen("/date="));
  return 0;
}

int main(void) {
  char line[64];
  while (fgets(line, sizeof line, stdin) != NULL) {
    char *end = NULL;
    errno = 0;
    unsigned long long ns = strtoull(line, &end, 10);
    if (errno != 0 || end == line || (*end != '\n' && *end != '\0')) {
      fprintf(stderr, "pack_key_dates: not a u64 line: %s", line);
      return 2;
    }
    if (print_date(ns) != 0) return 1;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}

/*
 * libFuzzer target for the spool's name grammar (src/adapters/spool_posix.c):
 * any bytes as a directory entry's name. A ready name that parses must be
 * canonical: formatting what was parsed gives the same name back. The temp
 * file predicate must not read past the name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/spool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *name = malloc(size + 1); /* exactly the name: ASan sees any read past it */
  if (name == NULL) abort();
  memcpy(name, data, size);
  name[size] = '\0';
  cs_spool_entry entry;
  if (cs_spool_parse_ready_name(name, &entry) == CS_E_OK) {
    char again[CS_SPOOL_NAME_MAX + 1];
    cs_spool_ready_name(&entry.pack_id, entry.created_at_ns, entry.record_count, entry.sha256, again);
    if (strcmp(again, name) != 0) abort();
  }
  (void)cs_spool_is_open_name(name);
  free(name);
  return 0;
}

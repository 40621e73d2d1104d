/*
 * libFuzzer target for `capstore pack build`'s spec parser (src/cli/cmd_pack_build.c):
 * any bytes as a spec's text, built into memory. Whatever it accepts must be
 * a pack the full verifier accepts with the spec's record count. payload_file
 * paths are relative to a directory that does not exist, so they fail to open
 * (an absolute path is read only if it names a regular file).
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "capstore/pack.h"
#include "cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *bytes = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&bytes, &len);
  if (out == NULL) abort();
  int status = cli_pack_build_text(data, size, "/nonexistent-capstore-fuzz/", out);
  if (fclose(out) != 0) abort();
  if (status == CLI_EXIT_OK) {
    cs_pack_summary summary;
    cs_pack_error err;
    if (cs_pack_verify_buffer((const uint8_t *)bytes, len, &summary, &err) != CS_E_OK) abort();
    /* The spec's records, all of them (a build either takes every record or fails). */
    json_t *spec = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    json_t *records = spec == NULL ? NULL : json_object_get(spec, "records");
    if (records != NULL && json_array_size(records) != summary.record_count) abort();
    json_decref(spec);
  }
  free(bytes);
  return 0;
}

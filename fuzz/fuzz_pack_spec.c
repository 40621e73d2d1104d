/*
 * libFuzzer target for `capstore pack build`'s spec parser (src/cli/cmd_pack_build.c):
 * any bytes as a spec's text, built into memory. Whatever it accepts must be
 * a pack the full verifier accepts with the spec's record count, and every
 * payload_file it read must resolve inside the spec's directory.
 *
 * The spec's directory is made once under /tmp (removed at exit):
 *   spec/payload.bin (1,000 bytes), spec/sub/p4.bin (4), spec/in -> sub,
 *   spec/up -> .., spec/out.bin -> ../secret.bin, secret.bin (4)
 * so paths inside, `..`, absolute paths and links leading out are all in reach.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, realpath, symlink */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <jansson.h>

#include "capstore/pack.h"
#include "cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base_dir[64];
static char spec_dir[96];  /* base_dir/spec/ */
static char spec_root[PATH_MAX]; /* spec_dir resolved */

static const char *const tree_files[] = {"spec/payload.bin", "spec/sub/p4.bin", "secret.bin"};
static const size_t tree_sizes[] = {1000, 4, 4};
static const char *const tree_links[][2] = {{"spec/in", "sub"}, {"spec/up", ".."}, {"spec/out.bin", "../secret.bin"}};

static void tree_path(char *out, size_t size, const char *name) {
  if ((size_t)snprintf(out, size, "%s/%s", base_dir, name) >= size) abort();
}

static void tree_remove(void) {
  char path[256];
  for (size_t i = 0; i < 3; i++) {
    tree_path(path, sizeof path, tree_links[i][0]);
    unlink(path);
    tree_path(path, sizeof path, tree_files[i]);
    unlink(path);
  }
  tree_path(path, sizeof path, "spec/sub");
  rmdir(path);
  tree_path(path, sizeof path, "spec");
  rmdir(path);
  rmdir(base_dir);
}

static void tree_make(void) {
  snprintf(base_dir, sizeof base_dir, "/tmp/capstore-fuzz-spec-XXXXXX");
  if (mkdtemp(base_dir) == NULL) abort();
  char path[256];
  tree_path(path, sizeof path, "spec");
  if (mkdir(path, 0700) != 0) abort();
  tree_path(path, sizeof path, "spec/sub");
  if (mkdir(path, 0700) != 0) abort();
  for (size_t i = 0; i < 3; i++) {
    tree_path(path, sizeof path, tree_files[i]);
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    for (size_t j = 0; j < tree_sizes[i]; j++) fputc((int)(j * 7u & 0xffu), f);
    if (fclose(f) != 0) abort();
    tree_path(path, sizeof path, tree_links[i][0]);
    if (symlink(tree_links[i][1], path) != 0) abort();
  }
  snprintf(spec_dir, sizeof spec_dir, "%s/spec/", base_dir);
  if (realpath(spec_dir, spec_root) == NULL) abort();
  atexit(tree_remove);
}

/* Aborts unless the payload file name resolves inside the spec's directory. */
static void check_inside(const char *name) {
  if (name[0] == '/') abort();
  char path[PATH_MAX + 128];
  char resolved[PATH_MAX];
  snprintf(path, sizeof path, "%s%s", spec_dir, name);
  if (realpath(path, resolved) == NULL) abort(); /* it was read, so it exists */
  size_t len = strlen(spec_root);
  if (strncmp(resolved, spec_root, len) != 0 || (resolved[len] != '/' && resolved[len] != '\0')) abort();
}

/* What the build accepted: every record, each payload file from inside. */
static void check_accepted(const uint8_t *data, size_t size, const cs_pack_summary *summary) {
  json_t *spec = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
  json_t *records = spec == NULL ? NULL : json_object_get(spec, "records");
  if (records != NULL && json_array_size(records) != summary->record_count) abort();
  for (size_t i = 0; i < json_array_size(records); i++) {
    const char *name = json_string_value(json_object_get(json_array_get(records, i), "payload_file"));
    if (name != NULL) check_inside(name);
  }
  json_decref(spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (base_dir[0] == '\0') tree_make();
  char *bytes = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&bytes, &len);
  if (out == NULL) abort();
  int status = cli_pack_build_text(data, size, spec_dir, out);
  if (fclose(out) != 0) abort();
  if (status == CLI_EXIT_OK) {
    cs_pack_summary summary;
    cs_pack_error err;
    if (cs_pack_verify_buffer((const uint8_t *)bytes, len, &summary, &err) != CS_E_OK) abort();
    check_accepted(data, size, &summary);
  }
  free(bytes);
  return 0;
}

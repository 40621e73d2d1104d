/*
 * tests/test_fs_util.h: temp directories for the tests that write real files
 * (capture, spool, direct I/O, spool faults), in TMPDIR or /tmp, and the
 * files and pack ids they put there.
 */
#ifndef CAPSTORE_TEST_FS_UTIL_H
#define CAPSTORE_TEST_FS_UTIL_H

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "capstore/types.h"

/* A fresh directory "<TMPDIR>/capstore-<tag>-XXXXXX"; free it with tf_remove_tree. */
static inline char *tf_temp_dir(const char *tag) {
  const char *base = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/capstore-%s-XXXXXX", base != NULL ? base : "/tmp", tag);
  char *dir = strdup(path);
  assert_non_null(dir);
  assert_non_null(mkdtemp(dir));
  return dir;
}

/* Removes dir and the files in it (one level: the spool keeps no subdirectories), and frees dir. */
static inline void tf_remove_tree(char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
  free(dir);
}

/* Names in dir ending in suffix. */
static inline size_t tf_count_suffix(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name), slen = strlen(suffix);
    if (len >= slen && strcmp(e->d_name + len - slen, suffix) == 0) n++;
  }
  closedir(d);
  return n;
}

/* Writes a file of bytes into dir. */
static inline void tf_write_file(const char *dir, const char *name, const void *bytes, size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, len, f), len);
  fclose(f);
}

/* A whole file (NUL-terminated past its length, for text); fails the test when unreadable. */
static inline uint8_t *tf_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) fail_msg("cannot open %s", path);
  uint8_t *bytes = NULL;
  size_t have = 0, cap = 0;
  for (;;) {
    if (have + 4096 + 1 > cap) {
      cap = cap * 2 + 4096 + 1;
      bytes = realloc(bytes, cap);
      assert_non_null(bytes);
    }
    size_t n = fread(bytes + have, 1, 4096, f);
    have += n;
    if (n < 4096) break;
  }
  fclose(f);
  bytes[have] = '\0';
  *len = have;
  return bytes;
}

/* A UUIDv7-shaped pack id, distinct per n. */
static inline cs_uuid tf_pack_id(uint8_t n) {
  cs_uuid id;
  memset(&id, 0, sizeof id);
  id.bytes[0] = 0x01;
  id.bytes[6] = 0x70; /* version 7 */
  id.bytes[8] = 0x80;
  id.bytes[15] = n;
  return id;
}

#endif

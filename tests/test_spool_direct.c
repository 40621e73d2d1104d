/*
 * The spool's direct I/O path (spool_posix.c): temp files are opened with
 * O_DIRECT where the file system takes it, written in aligned pieces (the
 * caller's aligned buffers in place, the rest through the aligned buffer),
 * the last piece padded and the file truncated to its size before the fsync.
 * Where O_DIRECT is refused (EINVAL at open, or at a write) the file is
 * written through the page cache. Every case must seal a byte-identical
 * pack of exactly its size, and no direct write may be unaligned.
 */
#define _GNU_SOURCE /* O_DIRECT, F_GETFL */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_fs_util.h"

#include "capstore/spool.h"
#include "test_pack_util.h"

#define ALIGN 4096u

/* ---- A system call table that watches direct writes and can refuse O_DIRECT ---- */

static struct {
  bool refuse_direct_open;  /* openat with O_DIRECT: create the name, then EINVAL */
  bool refuse_direct_write; /* write on an O_DIRECT descriptor: EINVAL */
  long direct_opens;
  long direct_writes;
  long direct_bytes;
  long plain_writes;
  long unaligned;           /* direct writes the kernel could refuse: must stay 0 */
  long truncates;
  const void *last_direct;  /* address of the last direct write */
} watch;

#define REAL cs_spool_sys_posix()

static bool is_direct(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_DIRECT) != 0;
}

static int w_openat(int dirfd, const char *path, int flags, mode_t mode) {
  if ((flags & O_DIRECT) != 0) {
    watch.direct_opens++;
    if (watch.refuse_direct_open) {
      /* Like file systems that create the name before checking O_DIRECT. */
      int fd = REAL->openat(dirfd, path, flags & ~O_DIRECT, mode);
      if (fd >= 0) REAL->close(fd);
      errno = EINVAL;
      return -1;
    }
  }
  return REAL->openat(dirfd, path, flags, mode);
}

static ssize_t w_write(int fd, const void *bytes, size_t length) {
  if (!is_direct(fd)) {
    watch.plain_writes++;
    return REAL->write(fd, bytes, length);
  }
  if (watch.refuse_direct_write) {
    errno = EINVAL;
    return -1;
  }
  off_t at = lseek(fd, 0, SEEK_CUR);
  if ((uintptr_t)bytes % ALIGN != 0 || length % ALIGN != 0 || at < 0 || at % ALIGN != 0) watch.unaligned++;
  watch.direct_writes++;
  watch.direct_bytes += (long)length;
  watch.last_direct = bytes;
  return REAL->write(fd, bytes, length);
}

static int w_ftruncate(int fd, off_t length) {
  watch.truncates++;
  return REAL->ftruncate(fd, length);
}

static cs_spool_sys watch_sys(void) {
  cs_spool_sys sys = *REAL;
  sys.openat = w_openat;
  sys.write = w_write;
  sys.ftruncate = w_ftruncate;
  return sys;
}

/* ---- Helpers ---- */

/* A pack whose size is not a multiple of the alignment: records of these lengths. */
static tp_bytes build_pack(uint8_t id_seed) {
  static const uint32_t lengths[] = {100, 5000, 3u << 20, 1, 70001};
  tp_bytes out = {0};
  cs_pack_writer_config config = {.pack_id = tp_uuid(id_seed), .created_at_ns = 1717171717000000000u,
                                  .write = tp_write, .write_context = &out};
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
  uint8_t *payload = malloc(3u << 20);
  assert_non_null(payload);
  for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
    char cid[32];
    snprintf(cid, sizeof cid, "cap-%zu", i);
    cs_pack_meta m = tp_meta(cid, lengths[i]);
    for (uint32_t j = 0; j < lengths[i]; j++) payload[j] = (uint8_t)(i * 31 + j * 7 + id_seed);
    assert_int_equal(cs_pack_writer_add_record(w, &m, payload, lengths[i], &err), CS_E_OK);
  }
  free(payload);
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  cs_pack_writer_free(w);
  assert_true(out.len % ALIGN != 0);
  return out;
}

/*
 * Writes the pack through cs_spool_file_write in the pieces a caller makes:
 * a small unaligned head, then aligned 1 MiB pieces from an aligned copy,
 * then small pieces; seals it and checks the ready file byte for byte.
 */
static void write_and_check(const char *dir, const cs_spool_sys *sys, uint8_t id_seed) {
  cs_spool *spool = NULL;
  char msg[256];
  cs_spool_options options = {.sys = sys, .create = true, .direct_io = true};
  assert_int_equal(cs_spool_open(dir, &options, &spool, msg, sizeof msg), CS_E_OK);
  watch.plain_writes = 0; /* the owner lock's pid */
  watch.truncates = 0;
  tp_bytes pack = build_pack(id_seed);
  cs_pack_summary summary;
  cs_pack_error err;
  assert_int_equal(cs_pack_verify_buffer(pack.data, pack.len, &summary, &err), CS_E_OK);
  uint8_t *aligned = NULL;
  assert_int_equal(posix_memalign((void **)&aligned, ALIGN, pack.len), 0);
  memcpy(aligned, pack.data, pack.len);

  cs_spool_file *file = NULL;
  assert_int_equal(cs_spool_begin(spool, &summary.pack_id, &file), CS_E_OK);
  size_t at = 0;
  assert_int_equal(cs_spool_file_write(file, aligned, 64), CS_E_OK); /* header alone */
  at = 64;
  assert_int_equal(cs_spool_file_write(file, aligned + at, ALIGN - 64), CS_E_OK);
  at = ALIGN;
  while (pack.len - at > (1u << 20)) {
    assert_int_equal(cs_spool_file_write(file, aligned + at, 1u << 20), CS_E_OK);
    at += 1u << 20;
  }
  while (at < pack.len) {
    size_t n = pack.len - at < 777 ? pack.len - at : 777;
    assert_int_equal(cs_spool_file_write(file, aligned + at, n), CS_E_OK);
    at += n;
  }
  cs_spool_entry entry;
  cs_spool_seal_result result = 0;
  int rc = cs_spool_seal(spool, file, &summary, &entry, &result);
  if (rc != CS_E_OK) fail_msg("seal: %s", cs_spool_last_error(spool));
  assert_int_equal(result, CS_SPOOL_SEALED);
  assert_int_equal(entry.size_bytes, pack.len);

  int fd = -1;
  assert_int_equal(cs_spool_open_pack(spool, &summary.pack_id, &fd, NULL), CS_E_OK);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  assert_int_equal((uint64_t)st.st_size, pack.len);
  uint8_t *back = malloc(pack.len);
  assert_int_equal(pread(fd, back, pack.len, 0), (ssize_t)pack.len);
  assert_memory_equal(back, pack.data, pack.len);
  close(fd);
  free(back);
  free(aligned);
  tp_free(&pack);
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  assert_int_equal(tf_count_suffix(dir, ".ready"), 1);
  cs_spool_recovery report;
  assert_int_equal(cs_spool_recover(spool, &report), CS_E_OK);
  assert_int_equal(report.ready_ok, 1);
  assert_int_equal(report.quarantined, 0);
  cs_spool_close(spool);
}

/* ---- Tests ---- */

static void test_direct_writes_are_aligned_and_in_place(void **state) {
  (void)state;
  char *dir = tf_temp_dir("direct");
  cs_spool_sys sys = watch_sys();
  memset(&watch, 0, sizeof watch);
  write_and_check(dir, &sys, 1);
  assert_int_equal(watch.direct_opens, 1);
  assert_int_equal(watch.unaligned, 0);
  if (watch.direct_writes == 0) {
    /* The file system of TMPDIR refused O_DIRECT: the plain path carried the pack. */
    print_message("O_DIRECT refused under TMPDIR: checked the page cache path only\n");
    assert_true(watch.plain_writes > 0);
  } else {
    assert_int_equal(watch.plain_writes, 0);
    assert_int_equal(watch.truncates, 1); /* the padding of the last write was cut */
    assert_true(watch.direct_bytes % ALIGN == 0);
  }
  tf_remove_tree(dir);
}

static void test_direct_refused_at_open(void **state) {
  (void)state;
  char *dir = tf_temp_dir("direct");
  cs_spool_sys sys = watch_sys();
  memset(&watch, 0, sizeof watch);
  watch.refuse_direct_open = true;
  write_and_check(dir, &sys, 2);
  assert_int_equal(watch.direct_opens, 1);
  assert_int_equal(watch.direct_writes, 0);
  assert_true(watch.plain_writes > 0);
  assert_int_equal(watch.truncates, 0); /* nothing was padded */
  tf_remove_tree(dir);
}

static void test_direct_refused_at_write(void **state) {
  (void)state;
  char *dir = tf_temp_dir("direct");
  cs_spool_sys sys = watch_sys();
  memset(&watch, 0, sizeof watch);
  watch.refuse_direct_write = true;
  write_and_check(dir, &sys, 3);
  assert_int_equal(watch.direct_writes, 0);
  assert_true(watch.plain_writes > 0);
  tf_remove_tree(dir);
}

/* An aligned 1 MiB piece goes from the caller's buffer to the file: no copy. */
static void test_aligned_piece_written_in_place(void **state) {
  (void)state;
  char *dir = tf_temp_dir("direct");
  cs_spool_sys sys = watch_sys();
  memset(&watch, 0, sizeof watch);
  cs_spool *spool = NULL;
  char msg[256];
  cs_spool_options options = {.sys = &sys, .create = true, .direct_io = true};
  assert_int_equal(cs_spool_open(dir, &options, &spool, msg, sizeof msg), CS_E_OK);
  uint8_t *piece = NULL;
  assert_int_equal(posix_memalign((void **)&piece, ALIGN, 1u << 20), 0);
  memset(piece, 7, 1u << 20);
  cs_uuid id = tp_uuid(9);
  cs_spool_file *file = NULL;
  assert_int_equal(cs_spool_begin(spool, &id, &file), CS_E_OK);
  assert_int_equal(cs_spool_file_write(file, piece, 1u << 20), CS_E_OK);
  if (watch.direct_writes > 0) {
    assert_ptr_equal(watch.last_direct, piece);
  } else {
    print_message("O_DIRECT refused under TMPDIR: nothing to check\n");
  }
  cs_spool_abort(spool, file);
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  free(piece);
  cs_spool_close(spool);
  tf_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_direct_writes_are_aligned_and_in_place),
      cmocka_unit_test(test_direct_refused_at_open),
      cmocka_unit_test(test_direct_refused_at_write),
      cmocka_unit_test(test_aligned_piece_written_in_place),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/test_fault_sys.h: the fault table of the SQLite-style fault tests
 * (test_spool_faults.c, test_dirstore_faults.c). Every POSIX call of the
 * spool.h table is counted; fault_arm(mode, n) fails the nth call:
 *   once        only call n fails (errno EIO);
 *   persistent  call n and every later one fail;
 *   crash       call n tears (a write writes half its bytes) and every later
 *               call fails: the process "died" there.
 * fsync is counted and failed like every call, but a success does not reach
 * the disk: these tests model process crashes, which keep the page cache
 * (power loss is the simulator's model), and real fsyncs made them slow.
 * fi.fsync_failed records that an fsync failed since the caller cleared it.
 */
#ifndef CAPSTORE_TEST_FAULT_SYS_H
#define CAPSTORE_TEST_FAULT_SYS_H

#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "capstore/spool.h"

enum fault_mode { FAULT_OFF = 0, FAULT_ONCE, FAULT_PERSISTENT, FAULT_CRASH };

static struct {
  enum fault_mode mode;
  long fail_at;
  long calls;
  long fired;
  bool fsync_failed;
} fi;

static inline const char *mode_name(enum fault_mode mode) {
  switch (mode) {
  case FAULT_ONCE: return "once";
  case FAULT_PERSISTENT: return "persistent";
  case FAULT_CRASH: return "crash";
  case FAULT_OFF: break;
  }
  return "off";
}

static inline void fault_arm(enum fault_mode mode, long fail_at) {
  fi.mode = mode;
  fi.fail_at = fail_at;
  fi.calls = 0;
  fi.fired = 0;
}

/* Counts the call; true when it must fail. */
static inline bool fault_now(void) {
  fi.calls++;
  bool fail = false;
  if (fi.mode == FAULT_ONCE) fail = fi.calls == fi.fail_at;
  else if (fi.mode != FAULT_OFF) fail = fi.calls >= fi.fail_at;
  if (fail) {
    fi.fired++;
    errno = EIO;
  }
  return fail;
}

#define REAL cs_spool_sys_posix()

static int f_open(const char *path, int flags, mode_t mode) {
  return fault_now() ? -1 : REAL->open(path, flags, mode);
}
static int f_openat(int dirfd, const char *path, int flags, mode_t mode) {
  return fault_now() ? -1 : REAL->openat(dirfd, path, flags, mode);
}
static int f_mkdir(const char *path, mode_t mode) { return fault_now() ? -1 : REAL->mkdir(path, mode); }
static ssize_t f_write(int fd, const void *bytes, size_t length) {
  bool crash_point = fi.mode == FAULT_CRASH && fi.calls + 1 == fi.fail_at;
  if (!fault_now()) return REAL->write(fd, bytes, length);
  if (crash_point && length > 1) (void)!REAL->write(fd, bytes, length / 2); /* torn */
  errno = EIO;
  return -1;
}
static ssize_t f_pread(int fd, void *bytes, size_t length, off_t offset) {
  return fault_now() ? -1 : REAL->pread(fd, bytes, length, offset);
}
static int f_fsync(int fd) {
  if (fault_now()) {
    fi.fsync_failed = true;
    return -1;
  }
  return fd >= 0 ? 0 : -1;
}
static int f_ftruncate(int fd, off_t length) { return fault_now() ? -1 : REAL->ftruncate(fd, length); }
static int f_fstat(int fd, struct stat *out) { return fault_now() ? -1 : REAL->fstat(fd, out); }
static int f_fstatat(int dirfd, const char *path, struct stat *out, int flags) {
  return fault_now() ? -1 : REAL->fstatat(dirfd, path, out, flags);
}
static int f_linkat(int a, const char *b, int c, const char *d, int e) {
  return fault_now() ? -1 : REAL->linkat(a, b, c, d, e);
}
static int f_renameat(int a, const char *b, int c, const char *d) {
  return fault_now() ? -1 : REAL->renameat(a, b, c, d);
}
static int f_unlinkat(int dirfd, const char *path, int flags) {
  return fault_now() ? -1 : REAL->unlinkat(dirfd, path, flags);
}
/* close always releases the descriptor, as Linux does, and may still report an error. */
static int f_close(int fd) {
  bool fail = fault_now();
  REAL->close(fd);
  return fail ? -1 : 0;
}
static int f_flock(int fd, int operation) { return fault_now() ? -1 : REAL->flock(fd, operation); }
static DIR *f_fdopendir(int fd) { return fault_now() ? NULL : REAL->fdopendir(fd); }
static struct dirent *f_readdir(DIR *dir) {
  if (fault_now()) return NULL;
  errno = 0;
  return REAL->readdir(dir);
}
static int f_closedir(DIR *dir) {
  bool fail = fault_now();
  REAL->closedir(dir);
  return fail ? -1 : 0;
}

static const cs_spool_sys faulty = {
    .open = f_open, .openat = f_openat, .mkdir = f_mkdir, .write = f_write, .pread = f_pread,
    .fsync = f_fsync, .ftruncate = f_ftruncate, .fstat = f_fstat, .fstatat = f_fstatat,
    .linkat = f_linkat, .renameat = f_renameat, .unlinkat = f_unlinkat, .close = f_close,
    .flock = f_flock, .fdopendir = f_fdopendir, .readdir = f_readdir, .closedir = f_closedir,
};

#endif

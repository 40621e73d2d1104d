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
 *
 * Faults by name, beside the counted ones: fault_name(call, text, err) makes
 * every call of that kind ("openat", "renameat", "unlinkat") whose path
 * contains text fail with errno err, uncounted, until fault_name_clear().
 * That is how a test gets an EACCES that root would not get from a mode-0
 * file, or a rename refused for one pack only.
 */
#ifndef CAPSTORE_TEST_FAULT_SYS_H
#define CAPSTORE_TEST_FAULT_SYS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#define FN_FAULTS 4
static struct {
  const char *call[FN_FAULTS]; /* NULL: a free slot */
  char text[FN_FAULTS][256];
  int err[FN_FAULTS];
  long fired;
} fn;

/* Adds a fault by name (at most FN_FAULTS at once). */
static inline void fault_name(const char *call, const char *text, int err) {
  for (int i = 0; i < FN_FAULTS; i++) {
    if (fn.call[i] != NULL) continue;
    fn.call[i] = call;
    snprintf(fn.text[i], sizeof fn.text[i], "%s", text);
    fn.err[i] = err;
    return;
  }
  abort(); /* a test with more needs a larger table */
}

static inline void fault_name_clear(void) { memset(&fn, 0, sizeof fn); }

/* True (errno set) when call on path must fail by name. */
static inline bool fault_name_now(const char *call, const char *path) {
  for (int i = 0; i < FN_FAULTS; i++) {
    if (fn.call[i] == NULL || strcmp(fn.call[i], call) != 0 || strstr(path, fn.text[i]) == NULL) continue;
    fn.fired++;
    errno = fn.err[i];
    return true;
  }
  return false;
}

/*
 * What a power cut would lose: the calls that succeeded are tracked as a
 * page cache that fsync writes back. A name (its entry in its directory) is
 * dirty from the mkdir, link, rename or unlink that made or removed it until
 * an fsync of the directory (rmdir excepted: an empty directory coming back
 * is harmless); a file's data is dirty from a write until its fsync, and a
 * link or rename carries that state to the new name. ft_clean(path): the
 * name and the data at path survive a power cut.
 */
#define FT_PATH_MAX 512
#define FT_PATHS 1024
#define FT_FDS 1024

static struct {
  char path[FT_PATHS][FT_PATH_MAX];
  bool name_dirty[FT_PATHS], data_dirty[FT_PATHS];
  int count;
  char fd_path[FT_FDS][FT_PATH_MAX];
} ft;

static inline void ft_reset(void) {
  ft.count = 0;
  memset(ft.fd_path, 0, sizeof ft.fd_path);
}

static inline int ft_find(const char *path, bool add) {
  for (int i = 0; i < ft.count; i++)
    if (strcmp(ft.path[i], path) == 0) return i;
  if (!add) return -1;
  if (ft.count == FT_PATHS) { /* full: forget the clean names (nothing to lose there) */
    int kept = 0;
    for (int i = 0; i < ft.count; i++) {
      if (!ft.name_dirty[i] && !ft.data_dirty[i]) continue;
      if (kept != i) {
        memcpy(ft.path[kept], ft.path[i], FT_PATH_MAX);
        ft.name_dirty[kept] = ft.name_dirty[i];
        ft.data_dirty[kept] = ft.data_dirty[i];
      }
      kept++;
    }
    ft.count = kept;
    if (ft.count == FT_PATHS) abort(); /* every name dirty: a test with more needs a larger table */
  }
  size_t n = strnlen(path, FT_PATH_MAX - 1);
  memmove(ft.path[ft.count], path, n); /* path may be one of ft's own */
  ft.path[ft.count][n] = '\0';
  ft.name_dirty[ft.count] = ft.data_dirty[ft.count] = false;
  return ft.count++;
}

/* dirfd/path as one path (dirfd AT_FDCWD or a descriptor this table opened). */
static inline void ft_join(int dirfd, const char *path, char out[FT_PATH_MAX]) {
  if (path[0] == '/' || dirfd == AT_FDCWD || dirfd < 0 || dirfd >= FT_FDS) snprintf(out, FT_PATH_MAX, "%s", path);
  else snprintf(out, FT_PATH_MAX, "%.250s/%.250s", ft.fd_path[dirfd], path);
}

static inline bool ft_in_dir(const char *path, const char *dir) {
  if (strcmp(dir, ".") == 0) return strchr(path, '/') == NULL;
  if (strcmp(dir, "/") == 0) return path[0] == '/' && strchr(path + 1, '/') == NULL;
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && path[n] == '/' && strchr(path + n + 1, '/') == NULL;
}

static inline void ft_name_changed(const char *path) { ft.name_dirty[ft_find(path, true)] = true; }

static inline void ft_opened(int fd, const char *path) {
  if (fd >= 0 && fd < FT_FDS) snprintf(ft.fd_path[fd], FT_PATH_MAX, "%s", path);
}

static inline void ft_written(int fd) {
  if (fd >= 0 && fd < FT_FDS && ft.fd_path[fd][0]) ft.data_dirty[ft_find(ft.fd_path[fd], true)] = true;
}

/* An fsync of fd: its data, and the names in it when it is a directory. */
static inline void ft_synced(int fd) {
  if (fd < 0 || fd >= FT_FDS || !ft.fd_path[fd][0]) return;
  for (int i = 0; i < ft.count; i++) {
    if (strcmp(ft.path[i], ft.fd_path[fd]) == 0) ft.data_dirty[i] = false;
    if (ft_in_dir(ft.path[i], ft.fd_path[fd])) ft.name_dirty[i] = false;
  }
}

static inline bool ft_clean(const char *path) {
  int i = ft_find(path, false);
  return i < 0 || (!ft.name_dirty[i] && !ft.data_dirty[i]);
}

static int f_open(const char *path, int flags, mode_t mode) {
  if (fault_now()) return -1;
  int fd = REAL->open(path, flags, mode);
  ft_opened(fd, path);
  if (fd >= 0 && (flags & O_CREAT)) ft_name_changed(path);
  return fd;
}
static int f_openat(int dirfd, const char *path, int flags, mode_t mode) {
  if (fault_name_now("openat", path) || fault_now()) return -1;
  int fd = REAL->openat(dirfd, path, flags, mode);
  char full[FT_PATH_MAX];
  ft_join(dirfd, path, full);
  ft_opened(fd, full);
  if (fd >= 0 && (flags & O_CREAT)) ft_name_changed(full);
  return fd;
}
static int f_mkdir(const char *path, mode_t mode) {
  if (fault_now()) return -1;
  int rc = REAL->mkdir(path, mode);
  if (rc == 0) ft_name_changed(path);
  return rc;
}
static ssize_t f_write(int fd, const void *bytes, size_t length) {
  bool crash_point = fi.mode == FAULT_CRASH && fi.calls + 1 == fi.fail_at;
  if (!fault_now()) {
    ssize_t n = REAL->write(fd, bytes, length);
    if (n > 0) ft_written(fd);
    return n;
  }
  if (crash_point && length > 1 && REAL->write(fd, bytes, length / 2) > 0) ft_written(fd); /* torn */
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
  ft_synced(fd);
  return fd >= 0 ? 0 : -1;
}
static int f_ftruncate(int fd, off_t length) { return fault_now() ? -1 : REAL->ftruncate(fd, length); }
static int f_fstat(int fd, struct stat *out) { return fault_now() ? -1 : REAL->fstat(fd, out); }
static int f_fstatat(int dirfd, const char *path, struct stat *out, int flags) {
  return fault_now() ? -1 : REAL->fstatat(dirfd, path, out, flags);
}
/* A new name for a file: its directory changes, and the file's unsynced data goes with it. */
static void ft_named(int from_dirfd, const char *from, int to_dirfd, const char *to, bool removed_old) {
  char old_path[FT_PATH_MAX], new_path[FT_PATH_MAX];
  ft_join(from_dirfd, from, old_path);
  ft_join(to_dirfd, to, new_path);
  int old_at = ft_find(old_path, true);
  bool data = ft.data_dirty[old_at];
  int new_at = ft_find(new_path, true);
  ft.data_dirty[new_at] = data;
  ft.name_dirty[new_at] = true;
  if (removed_old) {
    old_at = ft_find(old_path, true);
    ft.name_dirty[old_at] = true;
    ft.data_dirty[old_at] = false;
  }
}
static int f_linkat(int a, const char *b, int c, const char *d, int e) {
  if (fault_now()) return -1;
  int rc = REAL->linkat(a, b, c, d, e);
  if (rc == 0) ft_named(a, b, c, d, false);
  return rc;
}
static int f_renameat(int a, const char *b, int c, const char *d) {
  if (fault_name_now("renameat", b) || fault_now()) return -1;
  int rc = REAL->renameat(a, b, c, d);
  if (rc == 0) ft_named(a, b, c, d, true);
  return rc;
}
static int f_unlinkat(int dirfd, const char *path, int flags) {
  if (fault_name_now("unlinkat", path) || fault_now()) return -1;
  int rc = REAL->unlinkat(dirfd, path, flags);
  if (rc == 0 && !(flags & AT_REMOVEDIR)) {
    char full[FT_PATH_MAX];
    ft_join(dirfd, path, full);
    int i = ft_find(full, true);
    ft.name_dirty[i] = true;
    ft.data_dirty[i] = false; /* gone: its data no longer matters */
  }
  return rc;
}
/* close always releases the descriptor, as Linux does, and may still report an error. */
static int f_close(int fd) {
  bool fail = fault_now();
  if (fd >= 0 && fd < FT_FDS) ft.fd_path[fd][0] = '\0';
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
  int fd = dirfd(dir);
  if (fd >= 0 && fd < FT_FDS) ft.fd_path[fd][0] = '\0';
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

/*
 * LD_PRELOAD shim for tests/demo_cli.sh: the store lies. Every pread of more
 * than 4 KiB from a dirstore object file (a name ending ".dmi-pack.obj")
 * comes back with one byte flipped in the middle of what was read: the bytes
 * a reader fetches are not the bytes that were stored. `capstore demo` must
 * then fail its read-back and name a record, not report every record equal.
 * The service's own reads (80-byte HEADs, spool files) are left alone.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

ssize_t pread(int fd, void *buf, size_t count, off_t offset);
ssize_t pread64(int fd, void *buf, size_t count, off_t offset);

static bool is_object(int fd) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  static const char suffix[] = ".dmi-pack.obj";
  return (size_t)n > sizeof suffix && strcmp(path + n - (sizeof suffix - 1), suffix) == 0;
}

static ssize_t flip(int fd, void *buf, ssize_t got) {
  if (got > 4096 && is_object(fd)) ((unsigned char *)buf)[got / 2] ^= 0x40;
  return got;
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void *, size_t, off_t);
  if (real == NULL) real = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  return flip(fd, buf, real(fd, buf, count, offset));
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void *, size_t, off_t);
  if (real == NULL) real = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
  return flip(fd, buf, real(fd, buf, count, offset));
}

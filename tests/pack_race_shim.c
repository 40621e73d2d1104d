/*
 * LD_PRELOAD shim for tests/pack_cli.sh: makes `capstore pack build` lose
 * the race between checking a payload file's path and opening it, every
 * time, and can hide openat2 as an old kernel would.
 *
 *   CAPSTORE_RACE_DIR=DIR      once the real realpath() has resolved a path
 *                              whose last component is "p.bin", renames
 *                              DIR/swap.lnk (if there) over DIR/p.bin: what
 *                              an attacker flipping p.bin does between the
 *                              check and the open, without luck.
 *   CAPSTORE_RACE_NO_OPENAT2=1 syscall(SYS_openat2, ...) fails with ENOSYS,
 *                              as on Linux < 5.6 or under a seccomp filter.
 *   CAPSTORE_RACE_SPEC_SWAP=FROM:TO
 *                              once a file named spec.json has been opened
 *                              (open or openat), renames FROM over TO: what
 *                              an attacker swapping a directory above the
 *                              spec does between reading the spec and
 *                              confining its payloads, without luck.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

char *realpath(const char *path, char *resolved);
long syscall(long number, ...);
int open(const char *path, int flags, ...);
int openat(int dir, const char *path, int flags, ...);

static void swap_after_spec(const char *path) {
  const char *swap = getenv("CAPSTORE_RACE_SPEC_SWAP");
  const char *slash = strrchr(path, '/');
  if (swap == NULL || strcmp(slash == NULL ? path : slash + 1, "spec.json") != 0) return;
  const char *colon = strchr(swap, ':');
  if (colon == NULL) return;
  char from[4096];
  snprintf(from, sizeof from, "%.*s", (int)(colon - swap), swap);
  int saved = errno;
  rename(from, colon + 1); /* fails once FROM is gone: the swap happens once */
  errno = saved;
}

int open(const char *path, int flags, ...) {
  int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
  va_list args;
  va_start(args, flags);
  int mode = va_arg(args, int);
  va_end(args);
  int fd = real(path, flags, mode);
  if (fd >= 0) swap_after_spec(path);
  return fd;
}

int openat(int dir, const char *path, int flags, ...) {
  int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
  va_list args;
  va_start(args, flags);
  int mode = va_arg(args, int);
  va_end(args);
  int fd = real(dir, path, flags, mode);
  if (fd >= 0) swap_after_spec(path);
  return fd;
}

static void swap_in_link(const char *path) {
  const char *dir = getenv("CAPSTORE_RACE_DIR");
  const char *slash = strrchr(path, '/');
  if (dir == NULL || strcmp(slash == NULL ? path : slash + 1, "p.bin") != 0) return;
  char from[4096];
  char to[4096];
  snprintf(from, sizeof from, "%s/swap.lnk", dir);
  snprintf(to, sizeof to, "%s/p.bin", dir);
  int saved = errno;
  rename(from, to); /* fails once swap.lnk is gone: the swap happens once */
  errno = saved;
}

char *realpath(const char *path, char *resolved) {
  char *(*real)(const char *, char *) = (char *(*)(const char *, char *))dlsym(RTLD_NEXT, "realpath");
  char *result = real(path, resolved);
  if (result != NULL) swap_in_link(path);
  return result;
}

long syscall(long number, ...) {
  long (*real)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  va_list args;
  va_start(args, number);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(args, long);
  va_end(args);
#ifdef SYS_openat2
  const char *hide = getenv("CAPSTORE_RACE_NO_OPENAT2");
  if (number == SYS_openat2 && hide != NULL && hide[0] != '\0') {
    errno = ENOSYS;
    return -1;
  }
#endif
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

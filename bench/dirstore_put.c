/*
 * capstore-bench-dirstore: PUTs through the dirstore adapter against the
 * plainest durable write of the same bytes in the same run (write + fsync
 * of a temp file, rename into a directory, fsync of that directory), under
 * keys shaped like the runtime's (six directory levels). Prints the median
 * of RUNS runs of each and the ratio (peer time / dirstore time).
 *
 * usage: capstore-bench-dirstore DIR [OBJECT_BYTES] [OBJECTS] [RUNS]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "capstore/dirstore.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double run_dirstore(const char *root, const uint8_t *bytes, size_t len, int objects, int run) {
  cs_store store;
  if (cs_dirstore_open(root, &store) != CS_E_OK) exit(1);
  cs_object_info meta = {.is_pack = true, .size_bytes = len, .record_count = 1};
  double t0 = now_s();
  for (int i = 0; i < objects; i++) {
    char key[256];
    snprintf(key, sizeof key, "bench/v1/tenant=t/date=2026-12-01/session=s%d/rank=0/%08d-0000-7000-8000-000000000000.dmi-pack",
             run, i);
    cs_store_result res;
    if (store.ops->put(store.self, key, bytes, len, &meta, false, &res) != CS_E_OK || res.outcome != CS_OUT_OK) {
      fprintf(stderr, "put: %s\n", res.detail);
      exit(1);
    }
  }
  double t = now_s() - t0;
  cs_store_close(&store);
  return t;
}

static double run_peer(const char *root, const uint8_t *bytes, size_t len, int objects, int run) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/peer%d", root, run);
  mkdir(dir, 0755);
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
  double t0 = now_s();
  for (int i = 0; i < objects; i++) {
    char tmp[1100], final[1100];
    snprintf(tmp, sizeof tmp, "%s/%d.tmp", dir, i);
    snprintf(final, sizeof final, "%s/%d.obj", dir, i);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || write(fd, bytes, len) != (ssize_t)len || fsync(fd) != 0) exit(1);
    close(fd);
    if (rename(tmp, final) != 0 || fsync(dirfd) != 0) exit(1);
  }
  double t = now_s() - t0;
  close(dirfd);
  return t;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [OBJECT_BYTES] [OBJECTS] [RUNS]\n", argv[0]);
    return 2;
  }
  size_t len = argc > 2 ? strtoul(argv[2], NULL, 10) : 65536;
  int objects = argc > 3 ? atoi(argv[3]) : 200;
  int runs = argc > 4 ? atoi(argv[4]) : 5;
  uint8_t *bytes = malloc(len);
  for (size_t i = 0; i < len; i++) bytes[i] = (uint8_t)(i * 31);
  double ours[64], peer[64];
  for (int r = 0; r < runs && r < 64; r++) {
    /* Alternate which goes first: the disk's state drifts. */
    if (r % 2 == 0) {
      ours[r] = run_dirstore(argv[1], bytes, len, objects, r);
      peer[r] = run_peer(argv[1], bytes, len, objects, r);
    } else {
      peer[r] = run_peer(argv[1], bytes, len, objects, r);
      ours[r] = run_dirstore(argv[1], bytes, len, objects, r);
    }
  }
  qsort(ours, (size_t)runs, sizeof ours[0], cmp);
  qsort(peer, (size_t)runs, sizeof peer[0], cmp);
  double o = ours[runs / 2], p = peer[runs / 2];
  printf("dirstore_put object_bytes=%zu objects=%d runs=%d dirstore_s=%.4f peer_s=%.4f ratio=%.2f\n", len, objects,
         runs, o, p, p / o);
  free(bytes);
  return 0;
}

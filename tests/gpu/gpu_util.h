/*
 * gpu_util.h: helpers of the GPU checks (plain C, no cmocka: a check without
 * a device exits 77, which ctest reports as skipped, never as passed).
 */
#ifndef CAPSTORE_GPU_UTIL_H
#define CAPSTORE_GPU_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "capstore/capture.h"

#define GPU_SKIP 77

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    cudaError_t status_ = (call);                                                   \
    if (status_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
              cudaGetErrorString(status_));                                         \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

/* Exits 77 (skipped) when no CUDA device is usable. */
static inline void gpu_require_device(const char *what) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    printf("%s: SKIPPED: no CUDA device (%s)\n", what,
           status != cudaSuccess ? cudaGetErrorString(status) : "device count 0");
    exit(GPU_SKIP);
  }
}

static inline char *gpu_temp_dir(void) {
  const char *base = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/capstore-gpu-XXXXXX", base != NULL ? base : "/var/tmp");
  char *dir = strdup(path);
  CHECK(mkdtemp(dir) != NULL);
  return dir;
}

static inline void gpu_remove_tree(char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d != NULL) closedir(d);
  rmdir(dir);
  free(dir);
}

static inline cs_pack_meta gpu_meta(const char *id, cs_dtype dtype, uint32_t elements) {
  cs_pack_meta m;
  memset(&m, 0, sizeof m);
  m.capture_id = cs_pack_text_of(id);
  m.tenant_id = cs_pack_text_of("gpu");
  m.experiment_id = cs_pack_text_of("gpu-checks");
  m.run_id = cs_pack_text_of("run");
  m.session_id = cs_pack_text_of("session");
  m.request_id = cs_pack_text_of("request");
  m.sequence_id = cs_pack_text_of("sequence");
  m.model_id = cs_pack_text_of("model");
  m.model_revision = cs_pack_text_of("rev");
  m.adapter_revision = cs_pack_text_of(NULL);
  m.capture_policy_version = cs_pack_text_of("p1");
  m.hook_name = cs_pack_text_of("layers.0");
  m.dtype = dtype;
  m.rank = 1;
  m.shape[0] = elements;
  return m;
}

#endif

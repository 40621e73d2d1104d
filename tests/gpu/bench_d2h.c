/*
 * The device path's copy bandwidth against a plain pinned cudaMemcpy of the
 * same bytes. For each record size: N records captured from device memory
 * with cs_capture_write_device on one stream; the copy rate is the bytes
 * over the time until the stream has finished the copies, the sealed rate
 * the bytes over the time until a flush returns (hashed, written, fsynced).
 * The plain rate is cudaMemcpy (device to pinned host) of the same records.
 * Medians of 5 rounds. Exits 77 without a device.
 */
#include <stdint.h>
#include <time.h>

#include "gpu_util.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median5(double *v) {
  qsort(v, 5, sizeof *v, cmp_double);
  return v[2];
}

int main(void) {
  gpu_require_device("bench_d2h");
  const size_t sizes[] = {64u << 10, 1u << 20, 8u << 20};
  const size_t total = 256u << 20;
  void *device = NULL;
  CUDA_CHECK(cudaMalloc(&device, total));
  CUDA_CHECK(cudaMemset(device, 0x5a, total));
  void *pinned = NULL;
  CUDA_CHECK(cudaHostAlloc(&pinned, total, cudaHostAllocDefault));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  printf("%-10s %12s %12s %12s %8s\n", "record", "plain GB/s", "copy GB/s", "sealed GB/s", "ratio");
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    size_t size = sizes[s];
    size_t records = total / size;
    double plain[5], copy[5], sealed[5];
    for (int round = 0; round < 5; round++) {
      uint64_t t0 = cs_capture_clock_ns();
      for (size_t i = 0; i < records; i++) {
        CUDA_CHECK(cudaMemcpy((uint8_t *)pinned + i * size, (uint8_t *)device + i * size, size,
                              cudaMemcpyDeviceToHost));
      }
      plain[round] = (double)total / (double)(cs_capture_clock_ns() - t0);
      char *dir = gpu_temp_dir();
      cs_capture_config cfg;
      cs_capture_config_default(&cfg);
      cfg.staging_bytes = 2 * total + (64u << 20); /* no waiting for staging room */
      cfg.record_bytes_max = 16u << 20;
      cfg.device_copies_max = (uint32_t)records + 1;
      cs_capture *cap = NULL;
      char msg[256];
      if (cs_capture_open(dir, &cfg, &cap, msg, sizeof msg) != CS_E_OK) {
        fprintf(stderr, "open: %s\n", msg);
        return 1;
      }
      t0 = cs_capture_clock_ns();
      for (size_t i = 0; i < records; i++) {
        char id[32];
        snprintf(id, sizeof id, "r%zu", i);
        cs_pack_meta m = gpu_meta(id, CS_DTYPE_UINT8, (uint32_t)size);
        if (cs_capture_write_device(cap, &m, (uint8_t *)device + i * size, size, stream, msg, sizeof msg) !=
            CS_E_OK) {
          fprintf(stderr, "write_device: %s\n", msg);
          return 1;
        }
      }
      CUDA_CHECK(cudaStreamSynchronize(stream));
      copy[round] = (double)total / (double)(cs_capture_clock_ns() - t0);
      CHECK(cs_capture_flush(cap, CS_NEVER, msg, sizeof msg) == CS_E_OK);
      sealed[round] = (double)total / (double)(cs_capture_clock_ns() - t0);
      cs_capture_free(cap);
      gpu_remove_tree(dir);
    }
    double p = median5(plain), c = median5(copy), z = median5(sealed);
    printf("%-10zu %12.2f %12.2f %12.2f %8.2f\n", size, p, c, z, c / p);
  }
  printf("ratio = capture copy rate / plain pinned cudaMemcpy rate (medians of 5 rounds of %zu MiB)\n",
         total >> 20);
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaFree(device));
  return 0;
}

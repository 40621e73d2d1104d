/*
 * GPU check of the capture sink's device path: float32, bfloat16, float16
 * and int64 tensors captured from device memory (on a created stream and on
 * the default stream, interleaved with host records) come back byte-exact
 * through the pack reader, in capture order. A kernel-free overwrite of the
 * device buffer enqueued on the same stream right after the capture proves
 * the copy read the tensor in stream order. Twice: with the spool's direct
 * I/O (the default), and through the page cache with a 12 MiB staging ring
 * that wraps many times, where the large device payloads (0.6 to 2.4 MB)
 * are written from the pinned ring by reference. Exits 77 (ctest: skipped)
 * without a device.
 */
#include <stdint.h>

#include "gpu_util.h"

#define RECORDS 4
#define ELEMENTS 300001u /* odd: not a multiple of any alignment */

static const cs_dtype dtypes[RECORDS] = {CS_DTYPE_FLOAT32, CS_DTYPE_BFLOAT16, CS_DTYPE_FLOAT16,
                                         CS_DTYPE_INT64};

static void fill(uint8_t *bytes, size_t len, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 17;
  for (size_t i = 0; i < len; i++) {
    x = x * 1664525u + 1013904223u;
    bytes[i] = (uint8_t)(x >> 24);
  }
}

typedef struct expected {
  char id[32];
  uint8_t *bytes;
  size_t len;
} expected;

/* Reads every ready pack in name order and checks its records against want, in order. */
static void check_packs(const char *dir, const expected *want, size_t want_count) {
  struct dirent **names = NULL;
  int n = scandir(dir, &names, NULL, alphasort);
  CHECK(n >= 0);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    cs_spool_entry entry;
    if (cs_spool_parse_ready_name(names[i]->d_name, &entry) != CS_E_OK) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    uint8_t *data = malloc((size_t)st.st_size);
    CHECK(pread(fd, data, (size_t)st.st_size, 0) == st.st_size);
    close(fd);
    cs_pack_error err;
    if (cs_pack_verify_buffer(data, (size_t)st.st_size, NULL, &err) != CS_E_OK) {
      fprintf(stderr, "%s: %s\n", path, err.message);
      exit(1);
    }
    cs_pack_trailer trailer;
    cs_pack_footer footer;
    CHECK(cs_pack_trailer_parse(data + st.st_size - 64, (uint64_t)st.st_size, &trailer, &err) == CS_E_OK);
    CHECK(cs_pack_footer_parse(&trailer, data + trailer.footer_offset, (size_t)trailer.footer_length,
                               &footer, &err) == CS_E_OK);
    for (uint32_t r = 0; r < footer.record_count; r++, at++) {
      const cs_pack_record *rec = &footer.records[r];
      CHECK(at < want_count);
      CHECK(rec->meta.capture_id.len == strlen(want[at].id));
      CHECK(memcmp(rec->meta.capture_id.bytes, want[at].id, strlen(want[at].id)) == 0);
      CHECK(rec->decoded_length == want[at].len);
      if (memcmp(data + rec->offset, want[at].bytes, want[at].len) != 0) {
        fprintf(stderr, "record %s: payload differs from the device bytes\n", want[at].id);
        exit(1);
      }
    }
    cs_pack_footer_free(&footer);
    free(data);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  CHECK(at == want_count);
}

static size_t run(bool direct_io, int rounds) {
  char *dir = gpu_temp_dir();
  cs_capture_config cfg;
  cs_capture_config_default(&cfg);
  cfg.sink.pack_records_max = 3; /* several packs */
  cfg.direct_io = direct_io;
  cfg.staging_bytes = direct_io ? 64u << 20 : 12u << 20;
  cfg.record_bytes_max = 3u << 20;
  cs_capture *cap = NULL;
  char msg[256];
  if (cs_capture_open(dir, &cfg, &cap, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "open: %s\n", msg);
    exit(1);
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  expected *want = calloc((size_t)rounds * 2 * RECORDS, sizeof *want);
  CHECK(want != NULL);
  size_t count = 0;
  for (int round = 0; round < rounds; round++) {
    for (int k = 0; k < RECORDS; k++) {
      expected *e = &want[count++];
      snprintf(e->id, sizeof e->id, "dev-%d-%d", round, k);
      e->len = (size_t)ELEMENTS * cs_dtype_item_size(dtypes[k]);
      e->bytes = malloc(e->len);
      fill(e->bytes, e->len, (uint32_t)(round * 10 + k));
      void *device = NULL;
      CUDA_CHECK(cudaMalloc(&device, e->len));
      CUDA_CHECK(cudaMemcpy(device, e->bytes, e->len, cudaMemcpyHostToDevice));
      cudaStream_t on = round % 2 == 0 ? stream : NULL; /* odd rounds: the legacy default stream */
      cs_pack_meta meta = gpu_meta(e->id, dtypes[k], ELEMENTS);
      if (cs_capture_write_device(cap, &meta, device, e->len, on, msg, sizeof msg) != CS_E_OK) {
        fprintf(stderr, "write_device %s: %s\n", e->id, msg);
        exit(1);
      }
      /* The model goes on writing to the same memory in stream order: the capture saw the old bytes. */
      CUDA_CHECK(cudaMemsetAsync(device, 0xab, e->len, on));
      CUDA_CHECK(cudaFreeAsync(device, on));
      /* A host record between device records keeps its place. */
      expected *h = &want[count++];
      snprintf(h->id, sizeof h->id, "host-%d-%d", round, k);
      h->len = 4096;
      h->bytes = malloc(h->len);
      fill(h->bytes, h->len, (uint32_t)(100 + round * 10 + k));
      cs_pack_meta hm = gpu_meta(h->id, CS_DTYPE_UINT8, 4096);
      CHECK(cs_capture_write(cap, &hm, h->bytes, h->len, msg, sizeof msg) == CS_E_OK);
    }
  }
  if (cs_capture_close(cap, cs_capture_clock_ns() + 60 * CS_SEC_NS, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "close: %s\n", msg);
    exit(1);
  }
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  CHECK(stats.records_dropped == 0);
  CHECK(stats.records_written == count);
  CHECK(stats.device_copies == count / 2);
  cs_capture_free(cap);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  check_packs(dir, want, count);
  for (size_t i = 0; i < count; i++) free(want[i].bytes);
  free(want);
  gpu_remove_tree(dir);
  return count;
}

int main(void) {
  gpu_require_device("test_capture_gpu");
  size_t direct = run(true, 2);
  size_t page_cache = run(false, 16);
  printf("test_capture_gpu: %zu records with direct I/O and %zu through the page cache (f32, bf16, f16, i64 "
         "from the device) round-trip byte-exact\n", direct, page_cache);
  return 0;
}

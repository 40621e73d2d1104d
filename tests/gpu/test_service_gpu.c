/*
 * GPU check of the whole service path: float32, bfloat16, float16 and int64
 * tensors captured from CUDA device memory with capstore_write_device go
 * through the runtime (spool -> dirstore -> SQLite catalog), and a reader
 * finds each one in the catalog at its watermark and reads its bytes back
 * from the store byte-exact. The device buffer is overwritten in stream
 * order right after each capture, so the copy must have read the tensor in
 * stream order. Exits 77 (ctest: skipped) without a device.
 */
#include <stdint.h>

#include "gpu_util.h"

#include "capstore/capstore.h"

#define RECORDS 4
#define ROUNDS 6
#define ELEMENTS 100003u

static const cs_dtype dtypes[RECORDS] = {CS_DTYPE_FLOAT32, CS_DTYPE_BFLOAT16, CS_DTYPE_FLOAT16, CS_DTYPE_INT64};

typedef struct expected {
  char id[32];
  uint8_t *bytes;
  size_t len;
  bool found;
} expected;

static void fill(uint8_t *bytes, size_t len, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 17;
  for (size_t i = 0; i < len; i++) {
    x = x * 1664525u + 1013904223u;
    bytes[i] = (uint8_t)(x >> 24);
  }
}

/* Every descriptor visible at the watermark, matched to want by capture id and checked byte for byte. */
static void read_back(const capstore_config *cfg, expected *want, size_t count) {
  cs_store store;
  cs_catalog cat;
  char msg[256];
  CHECK(capstore_open_store(cfg, &store, msg, sizeof msg) == CS_E_OK);
  CHECK(capstore_open_catalog(cfg, &cat, msg, sizeof msg) == CS_E_OK);
  cs_uuid reader = {{0}};
  cs_cat_head head;
  cs_catalog_result res;
  CHECK(cat.ops->head(cat.self, &reader, &head, &res) == CS_E_OK && res.outcome == CS_OUT_OK);
  static char keys[256][CS_KEY_MAX];
  static cs_descriptor_row rows[64];
  cs_list_page page = {.keys = keys, .key_capacity = 256};
  cs_store_result sres;
  CHECK(store.ops->list(store.self, "capstore/", "", 256, &page, &sres) == CS_E_OK && sres.outcome == CS_OUT_OK);
  size_t seen = 0;
  for (uint32_t k = 0; k < page.key_count; k++) {
    cs_uuid pack;
    if (cs_key_pack_id(keys[k], strlen(keys[k]), &pack) != CS_E_OK) continue;
    uint32_t n = 0;
    CHECK(cat.ops->read_descriptors(cat.self, head.watermark, &pack, rows, 64, &n, &res) == CS_E_OK);
    for (uint32_t r = 0; r < n; r++, seen++) {
      const cs_pack_record *rec = &rows[r].record;
      expected *e = NULL;
      for (size_t i = 0; i < count && e == NULL; i++)
        if (rec->meta.capture_id.len == strlen(want[i].id) && memcmp(rec->meta.capture_id.bytes, want[i].id, rec->meta.capture_id.len) == 0)
          e = &want[i];
      CHECK(e != NULL && !e->found && rec->decoded_length == e->len);
      uint8_t *got = malloc(e->len);
      size_t got_len = 0;
      cs_range range = {.offset = rec->offset, .length = rec->stored_length};
      CHECK(store.ops->get(store.self, keys[k], &range, got, e->len, &got_len, &sres) == CS_E_OK);
      CHECK(sres.outcome == CS_OUT_OK && got_len == e->len);
      if (memcmp(got, e->bytes, e->len) != 0) {
        fprintf(stderr, "record %s: the bytes read back differ from the device tensor\n", e->id);
        exit(1);
      }
      e->found = true;
      free(got);
    }
  }
  CHECK(seen == count);
  cat.ops->close(cat.self);
  cs_store_close(&store);
}

int main(void) {
  gpu_require_device("test_service_gpu");
  char *dir = gpu_temp_dir();
  char spool[600], bucket[600], db[600];
  snprintf(spool, sizeof spool, "%s/spool", dir);
  snprintf(bucket, sizeof bucket, "%s/bucket", dir);
  snprintf(db, sizeof db, "%s/catalog.db", dir);
  capstore_config cfg;
  capstore_config_default(&cfg);
  cfg.spool_dir = spool;
  cfg.store_dir = bucket;
  cfg.sqlite_path = db;
  cfg.capture.sink.pack_records_max = 5; /* several packs */
  cfg.capture.staging_bytes = 32u << 20;
  cfg.capture.record_bytes_max = 1u << 20;
  capstore *cs = NULL;
  char msg[256];
  if (capstore_open(&cfg, &cs, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "open: %s\n", msg);
    return 1;
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  expected want[ROUNDS * RECORDS];
  size_t count = 0;
  for (int round = 0; round < ROUNDS; round++) {
    for (int k = 0; k < RECORDS; k++) {
      expected *e = &want[count++];
      memset(e, 0, sizeof *e);
      snprintf(e->id, sizeof e->id, "svc-dev-%d-%d", round, k);
      e->len = (size_t)ELEMENTS * cs_dtype_item_size(dtypes[k]);
      e->bytes = malloc(e->len);
      fill(e->bytes, e->len, (uint32_t)(round * 10 + k));
      void *device = NULL;
      CUDA_CHECK(cudaMalloc(&device, e->len));
      CUDA_CHECK(cudaMemcpy(device, e->bytes, e->len, cudaMemcpyHostToDevice));
      cudaStream_t on = round % 2 == 0 ? stream : NULL;
      cs_pack_meta meta = gpu_meta(e->id, dtypes[k], ELEMENTS);
      if (capstore_write_device(cs, &meta, device, e->len, on, msg, sizeof msg) != CS_E_OK) {
        fprintf(stderr, "write_device %s: %s\n", e->id, msg);
        return 1;
      }
      CUDA_CHECK(cudaMemsetAsync(device, 0xab, e->len, on)); /* the model reuses the memory in stream order */
      CUDA_CHECK(cudaFreeAsync(device, on));
    }
  }
  capstore_flush_report report;
  int rc = capstore_flush(cs, capstore_clock_ns() + 60 * CS_SEC_NS, &report, msg, sizeof msg);
  if (rc != CS_E_OK || !report.drained) {
    fprintf(stderr, "flush: %s\n", msg);
    return 1;
  }
  CHECK(capstore_close(cs, 30 * CS_SEC_NS, msg, sizeof msg) == CS_E_OK);
  capstore_free(cs);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  read_back(&cfg, want, count);
  for (size_t i = 0; i < count; i++) free(want[i].bytes);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  free(dir);
  printf("test_service_gpu: %zu device tensors (f32, bf16, f16, i64) captured through the service, found in the "
         "catalog and read back byte-exact\n", count);
  return 0;
}

/* Captures 1,000 tensors, flushes, and finds them in the catalog: no server (a dirstore and SQLite). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capstore/capstore.h"

/* The wall clock in nanoseconds since 1970 (UTC): when a record was captured; its pack's key is dated by it. */
static uint64_t wall_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(void) {
  capstore_config cfg;
  capstore_config_default(&cfg);
  cfg.spool_dir = "capstore-demo/spool";
  cfg.store_dir = "capstore-demo/bucket";
  cfg.sqlite_path = "capstore-demo/catalog.db";
  char msg[256], id[32];
  capstore *cs;
  if (capstore_open(&cfg, &cs, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "open: %s\n", msg), 1;
  uint16_t hidden[896] = {0}; /* one bf16 row of a 896-wide hidden state */
  for (int n = 0; n < 1000; n++) {
    cs_pack_meta m = {.tenant_id = cs_pack_text_of("demo"), .experiment_id = cs_pack_text_of("quickstart"),
                      .run_id = cs_pack_text_of("run-1"), .session_id = cs_pack_text_of("s1"),
                      .request_id = cs_pack_text_of("r1"), .sequence_id = cs_pack_text_of("q1"),
                      .model_id = cs_pack_text_of("qwen2-0.5b"), .model_revision = cs_pack_text_of("main"),
                      .capture_policy_version = cs_pack_text_of("v1"), .hook_name = cs_pack_text_of("layers.3"),
                      .layer_number = 3, .step_number = (uint64_t)n, .token_start = (uint64_t)n,
                      .token_end = (uint64_t)n + 1, .dtype = CS_DTYPE_BFLOAT16, .rank = 2, .shape = {1, 896}};
    snprintf(id, sizeof id, "quickstart-%ld-%d", (long)getpid(), n); /* this run's records */
    m.capture_id = cs_pack_text_of(id);
    m.captured_at_ns = wall_clock_ns();
    hidden[0] = (uint16_t)n;
    if (capstore_write(cs, &m, hidden, sizeof hidden, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "%s\n", msg), 1;
  }
  capstore_flush_report report;
  int rc = capstore_flush(cs, capstore_clock_ns() + 30 * CS_SEC_NS, &report, msg, sizeof msg);
  printf("flush: %s%s\n", cs_strerror(rc), report.drained ? " (every record is queryable)" : "");
  if (capstore_close(cs, 10 * CS_SEC_NS, msg, sizeof msg) != CS_E_OK) fprintf(stderr, "close: %s\n", msg), rc = 1;
  capstore_free(cs);
  /* Find the records: the packs the store holds, each pack's descriptors visible at the catalog's watermark. */
  cs_store store;
  cs_catalog cat;
  cs_cat_head head;
  cs_catalog_result res;
  cs_store_result sres;
  static char keys[1000][CS_KEY_MAX];
  static cs_descriptor_row rows[4096];
  cs_list_page page = {.keys = keys, .key_capacity = 1000};
  cs_uuid reader = {{0}}, pack;
  uint32_t count, found = 0;
  size_t prefix = (size_t)snprintf(id, sizeof id, "quickstart-%ld-", (long)getpid());
  cs_dirstore_open(cfg.store_dir, &store);
  cs_sqlite_catalog_open(cfg.sqlite_path, 0, &cat);
  cat.ops->head(cat.self, &reader, &head, &res);
  store.ops->list(store.self, "capstore/", "", 1000, &page, &sres);
  for (uint32_t k = 0; k < page.key_count; k++) {
    if (cs_key_pack_id(keys[k], strlen(keys[k]), &pack) != CS_E_OK) continue;
    cat.ops->read_descriptors(cat.self, head.watermark, &pack, rows, 4096, &count, &res);
    for (uint32_t r = 0; r < count; r++) found += strncmp(rows[r].record.meta.capture_id.bytes, id, prefix) == 0;
    if (count > 0) printf("%s: %u records, first %s\n", keys[k], count, rows[0].record.meta.capture_id.bytes);
  }
  printf("%u of this run's 1000 records found in the catalog at watermark %llu\n", found,
         (unsigned long long)head.watermark);
  cat.ops->close(cat.self);
  cs_store_close(&store);
  return rc == CS_E_OK && found == 1000 ? 0 : 1;
}

/*
 * Helpers for tests of the service runtime (capstore.h): deterministic
 * records and a reader's-eye check of what the catalog and the store hold.
 * The check goes through the public adapters only: LIST the store under the
 * catalog's prefix, read each pack's descriptors at the catalog's watermark,
 * GET each payload's range and compare it with the bytes the test captured.
 */
#ifndef CAPSTORE_TEST_CAPSTORE_UTIL_H
#define CAPSTORE_TEST_CAPSTORE_UTIL_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/capstore.h"

/* Removes a test's directory tree (spool, bucket, catalog) and frees its name. */
static inline void tc_remove_all(char *dir) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  free(dir);
}

/* Record n's payload: len bytes that depend on n and the position. */
static inline void tc_payload(uint64_t n, uint8_t *out, size_t len) {
  uint64_t x = n * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = (uint8_t)x;
  }
}

typedef struct tc_record {
  char capture_id[32];
  cs_pack_meta meta;
} tc_record;

/* Record n: capture id "rec-<n>", bf16 of `elements`, one tenant/session/rank. */
static inline void tc_record_make(tc_record *r, uint64_t n, uint32_t elements) {
  memset(r, 0, sizeof *r);
  snprintf(r->capture_id, sizeof r->capture_id, "rec-%" PRIu64, n);
  cs_pack_meta *m = &r->meta;
  m->capture_id = cs_pack_text_of(r->capture_id);
  m->tenant_id = cs_pack_text_of("tenant-a");
  m->experiment_id = cs_pack_text_of("exp-1");
  m->run_id = cs_pack_text_of("run-1");
  m->session_id = cs_pack_text_of("session-1");
  m->request_id = cs_pack_text_of("req");
  m->sequence_id = cs_pack_text_of("seq");
  m->model_id = cs_pack_text_of("qwen2-0.5b");
  m->model_revision = cs_pack_text_of("main");
  m->adapter_revision = cs_pack_text_of(NULL);
  m->capture_policy_version = cs_pack_text_of("v1");
  m->hook_name = cs_pack_text_of("model.layers.3.mlp");
  m->layer_number = 3;
  m->step_number = n;
  m->token_start = n;
  m->token_end = n + 1;
  m->dtype = CS_DTYPE_BFLOAT16;
  m->rank = 2;
  m->shape[0] = 1;
  m->shape[1] = elements;
  m->captured_at_ns = 1764547200000000000ull + n;
}

/* Captures records [first, first + count) of elements bf16 values each. */
static inline int tc_capture(capstore *cs, uint64_t first, uint64_t count, uint32_t elements) {
  size_t len = (size_t)elements * 2u;
  uint8_t *bytes = malloc(len);
  int rc = CS_E_OK;
  for (uint64_t n = first; n < first + count && rc == CS_E_OK; n++) {
    tc_record r;
    tc_record_make(&r, n, elements);
    tc_payload(n, bytes, len);
    char msg[256];
    rc = capstore_write(cs, &r.meta, bytes, len, msg, sizeof msg);
    if (rc != CS_E_OK) fprintf(stderr, "capstore_write %" PRIu64 ": %s\n", n, msg);
  }
  free(bytes);
  return rc;
}

/* Set by a caller that wants every visible capture id printed ("id N"). */
static bool tc_dump;

/* What a reader sees. */
typedef struct tc_seen {
  uint64_t packs;        /* objects under the prefix that are visible packs */
  uint64_t records;      /* visible descriptors */
  uint64_t bad_bytes;    /* payloads that differ from what was captured */
  uint64_t duplicates;   /* a capture id seen twice */
  uint64_t unknown;      /* a capture id not of the form rec-<n> below `may` */
  uint64_t missing;      /* records in [0, must) never seen */
} tc_seen;

/*
 * Reads back everything visible at the catalog's watermark and checks it
 * against records [0, may), of which [0, must) must all be there (records a
 * crash took before any flush covered them may be missing). Returns CS_E_OK
 * when the adapters answered.
 */
static inline int tc_read_back(cs_store *store, cs_catalog *catalog, const char *prefix, uint64_t must, uint64_t may,
                               tc_seen *seen) {
  uint64_t expected = may;
  memset(seen, 0, sizeof *seen);
  cs_uuid lease;
  memset(&lease, 0x77, sizeof lease);
  cs_cat_head head;
  cs_catalog_result cres = {0};
  if (catalog->ops->schema_ensure(catalog->self, &cres) != CS_E_OK || cres.outcome != CS_OUT_OK) return CS_E_IO;
  if (catalog->ops->head(catalog->self, &lease, &head, &cres) != CS_E_OK || cres.outcome != CS_OUT_OK) return CS_E_IO;
  uint8_t *hits = calloc(expected + 1, 1);
  /*
   * Pages of 1,000 keys (S3's most): the npm S3 server lists in path order, and paging on from a
   * page's last key can skip keys there (docs/catalog-protocol.md), so a reader of a test's bucket
   * wants one page whenever it can.
   */
  enum { PAGE = 1000, ROWS = 8192 };
  char (*keys)[CS_KEY_MAX] = calloc(PAGE, CS_KEY_MAX);
  cs_descriptor_row *rows = calloc(ROWS, sizeof *rows);
  char token[CS_KEY_MAX] = "";
  int rc = CS_E_OK;
  do {
    cs_list_page page = {.keys = keys, .key_capacity = PAGE};
    cs_store_result sres = {0};
    if (store->ops->list(store->self, prefix, token, PAGE, &page, &sres) != CS_E_OK || sres.outcome != CS_OUT_OK) {
      rc = CS_E_IO;
      break;
    }
    for (uint32_t k = 0; k < page.key_count; k++) {
      cs_uuid id;
      if (cs_key_pack_id(keys[k], strlen(keys[k]), &id) != CS_E_OK) continue;
      uint32_t count = 0;
      if (catalog->ops->read_descriptors(catalog->self, head.watermark, &id, rows, ROWS, &count, &cres) != CS_E_OK ||
          cres.outcome != CS_OUT_OK) {
        rc = CS_E_IO;
        break;
      }
      seen->packs += count > 0;
      for (uint32_t i = 0; i < count; i++) {
        const cs_pack_record *rec = &rows[i].record;
        uint64_t n = 0;
        seen->records++;
        if (sscanf(rec->meta.capture_id.bytes, "rec-%" SCNu64, &n) != 1 || n >= expected) {
          seen->unknown++;
          continue;
        }
        if (tc_dump) printf("id %" PRIu64 "\n", n);
        if (hits[n]++) seen->duplicates++;
        uint8_t *got = malloc(rec->stored_length + 1), *want = malloc(rec->stored_length + 1);
        size_t got_len = 0;
        cs_range range = {.offset = rec->offset, .length = rec->stored_length};
        tc_payload(n, want, rec->stored_length);
        if (store->ops->get(store->self, keys[k], &range, got, rec->stored_length, &got_len, &sres) != CS_E_OK ||
            sres.outcome != CS_OUT_OK || got_len != rec->stored_length || memcmp(got, want, got_len) != 0)
          seen->bad_bytes++;
        free(got);
        free(want);
      }
    }
    snprintf(token, sizeof token, "%s", page.next_token);
    if (token[0] != '\0' && !store->lists_bytewise)
      fprintf(stderr, "tc_read_back: more than %d keys on a store that does not list bytewise: keys may be skipped\n",
              PAGE);
  } while (rc == CS_E_OK && token[0] != '\0');
  for (uint64_t n = 0; n < must && n < expected; n++) seen->missing += hits[n] == 0;
  free(hits);
  free(keys);
  free(rows);
  return rc;
}

#endif

/*
 * serve_client: a capture process beside `capstore serve`, and the check of
 * what it captured, for tests/serve_cli.sh.
 *
 *   serve_client capture CONFIG TAG N [--no-close]
 *       opens CONFIG (role capture), writes N records (capture ids TAG-0 ..
 *       TAG-<N-1>, run id TAG, payloads derived from the index), flushes
 *       (60 s) and closes. Exit 0 when the flush drained (every record
 *       shipped by the daemon) and the close handed everything over.
 *       --no-close: seals (a flush of 2 s, which no daemon answers) and exits,
 *       without close: a capture process that dies; the daemon must ship
 *       what it sealed, adopting its private spool.
 *   serve_client count CONFIG TAG N
 *       opens the catalog of CONFIG (the daemon's) and checks that its
 *       descriptors at the watermark hold exactly TAG-0 .. TAG-<N-1> once
 *       each, with the payload's size and CRC-32. Exit 0 when they do.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/capstore.h"

static uint32_t payload_length(uint32_t i) { return 64u + (i * 37u) % 4096u; }

static void payload_fill(const char *tag, uint32_t i, uint8_t *out, uint32_t len) {
  uint32_t x = i * 2654435761u ^ (uint32_t)strlen(tag);
  for (uint32_t k = 0; k < len; k++) {
    x = x * 1103515245u + 12345u;
    out[k] = (uint8_t)(x >> 16);
  }
}

static int load(const char *path, capstore_settings **s) {
  char msg[512];
  if (capstore_settings_new(s) != CS_E_OK || capstore_settings_load(*s, path, msg, sizeof msg) != CS_E_OK ||
      capstore_settings_validate(*s, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "serve_client: %s\n", msg);
    return 2;
  }
  return 0;
}

static int capture(const char *path, const char *tag, uint32_t n, bool no_close) {
  capstore_settings *s = NULL;
  if (load(path, &s) != 0) return 2;
  char msg[512];
  capstore *cs = NULL;
  if (capstore_open(capstore_settings_config(s), &cs, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "serve_client: open: %s\n", msg);
    return 3;
  }
  uint8_t *buf = malloc(4096 + 64);
  char id[96];
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len = payload_length(i);
    payload_fill(tag, i, buf, len);
    snprintf(id, sizeof id, "%s-%" PRIu32, tag, i);
    cs_pack_meta m;
    memset(&m, 0, sizeof m);
    m.capture_id = cs_pack_text_of(id);
    m.tenant_id = cs_pack_text_of("serve-test");
    m.experiment_id = cs_pack_text_of("serve");
    m.run_id = cs_pack_text_of(tag);
    m.session_id = cs_pack_text_of("s");
    m.request_id = cs_pack_text_of("r");
    m.sequence_id = cs_pack_text_of("q");
    m.model_id = cs_pack_text_of("m");
    m.model_revision = cs_pack_text_of("1");
    m.adapter_revision = cs_pack_text_of(NULL);
    m.capture_policy_version = cs_pack_text_of("v1");
    m.hook_name = cs_pack_text_of("layer.out");
    m.layer_number = (int32_t)(i % 24);
    m.step_number = i;
    m.token_end = 1;
    m.dtype = CS_DTYPE_UINT8;
    m.rank = 1;
    m.shape[0] = len;
    m.captured_at_ns = 1764633600000000000ull + i;
    if (capstore_write(cs, &m, buf, len, msg, sizeof msg) != CS_E_OK) {
      fprintf(stderr, "serve_client: write %s: %s\n", id, msg);
      return 1;
    }
  }
  free(buf);
  if (no_close) {
    /* Sealed (a flush with no time to wait for shipping), then gone without a close, as a killed process. */
    (void)capstore_flush(cs, capstore_clock_ns() + 2 * CS_SEC_NS, NULL, msg, sizeof msg);
    printf("%s: wrote and sealed %" PRIu32 " records, exiting without close\n", tag, n);
    fflush(stdout);
    _Exit(0);
  }
  capstore_flush_report report;
  int rc = capstore_flush(cs, capstore_clock_ns() + 60 * CS_SEC_NS, &report, msg, sizeof msg);
  printf("%s: flush %s: drained=%d stage=%s missing=%" PRIu32 " %s\n", tag, cs_strerror(rc), report.drained,
         report.stage, report.missing_packs, msg);
  capstore_stats st;
  capstore_stats_get(cs, &st);
  printf("%s: handed %" PRIu64 " packs, shipped %" PRIu64 ", set aside %" PRIu64 ", waiting %" PRIu32 "\n", tag,
         st.handoff_linked, st.handoff_shipped, st.handoff_rejected, st.handoff_waiting);
  int close_rc = capstore_close(cs, 30 * CS_SEC_NS, msg, sizeof msg);
  if (close_rc != CS_E_OK) fprintf(stderr, "serve_client: close: %s\n", msg);
  capstore_free(cs);
  capstore_settings_free(s);
  return rc == CS_E_OK && close_rc == CS_E_OK ? 0 : 1;
}

static bool text_is(cs_pack_text t, const char *want) {
  return t.bytes != NULL && t.len == strlen(want) && memcmp(t.bytes, want, t.len) == 0;
}

static int count(const char *path, const char *tag, uint32_t n) {
  capstore_settings *s = NULL;
  if (load(path, &s) != 0) return 2;
  char msg[512];
  cs_catalog cat;
  if (capstore_open_catalog(capstore_settings_config(s), &cat, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "serve_client: catalog: %s\n", msg);
    return 3;
  }
  cs_catalog_result res;
  cs_cat_head head;
  cs_uuid reader = {{0}};
  if (cat.ops->head(cat.self, &reader, &head, &res) != CS_E_OK || res.outcome != CS_OUT_OK) {
    fprintf(stderr, "serve_client: catalog head: %s\n", res.detail);
    return 3;
  }
  uint8_t *seen = calloc(n, 1);
  uint8_t *buf = malloc(4096 + 64);
  enum { PAGE = 256 };
  cs_inventory_row *packs = calloc(PAGE, sizeof *packs);
  uint32_t rows_cap = 1u << 16;
  cs_descriptor_row *rows = calloc(rows_cap, sizeof *rows);
  uint32_t found = 0, bad = 0;
  cs_uuid after;
  bool first = true;
  for (;;) {
    uint32_t got = 0;
    if (cat.ops->list_packs(cat.self, head.watermark, first ? NULL : &after, packs, PAGE, &got, &res) != CS_E_OK ||
        res.outcome != CS_OUT_OK) {
      fprintf(stderr, "serve_client: list_packs: %s\n", res.detail);
      return 3;
    }
    for (uint32_t p = 0; p < got; p++) {
      uint32_t rc_count = 0;
      if (cat.ops->read_descriptors(cat.self, head.watermark, &packs[p].ref.pack_id, rows, rows_cap, &rc_count, &res) !=
              CS_E_OK ||
          res.outcome != CS_OUT_OK) {
        fprintf(stderr, "serve_client: read_descriptors: %s\n", res.detail);
        return 3;
      }
      for (uint32_t r = 0; r < rc_count; r++) {
        const cs_pack_record *rec = &rows[r].record;
        if (!text_is(rec->meta.run_id, tag)) continue;
        char id[96];
        snprintf(id, sizeof id, "%.*s", (int)rec->meta.capture_id.len, rec->meta.capture_id.bytes);
        size_t tl = strlen(tag);
        char *end = NULL;
        unsigned long i = strncmp(id, tag, tl) == 0 && id[tl] == '-' ? strtoul(id + tl + 1, &end, 10) : n;
        if (i >= n || end == NULL || *end != '\0') {
          fprintf(stderr, "serve_client: unexpected capture id %s\n", id);
          bad++;
          continue;
        }
        uint32_t len = payload_length((uint32_t)i);
        payload_fill(tag, (uint32_t)i, buf, len);
        if (rec->stored_length != len || rec->crc32 != cs_crc32(0, buf, len)) {
          fprintf(stderr, "serve_client: %s: size or CRC differs from what was captured\n", id);
          bad++;
        }
        if (seen[i]++) {
          fprintf(stderr, "serve_client: %s indexed twice\n", id);
          bad++;
        }
        found++;
      }
    }
    if (got < PAGE) break;
    after = packs[got - 1].ref.pack_id;
    first = false;
  }
  uint32_t distinct = 0;
  for (uint32_t i = 0; i < n; i++) distinct += seen[i] != 0;
  printf("%s: %" PRIu32 " of %" PRIu32 " records in the catalog at watermark %" PRIu64 " (%" PRIu32 " rows, %" PRIu32
         " bad)\n",
         tag, distinct, n, head.watermark, found, bad);
  cat.ops->close(cat.self);
  capstore_settings_free(s);
  free(seen);
  free(buf);
  free(packs);
  free(rows);
  return distinct == n && bad == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 5 && strcmp(argv[1], "capture") == 0)
    return capture(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 10), argc > 5 && strcmp(argv[5], "--no-close") == 0);
  if (argc == 5 && strcmp(argv[1], "count") == 0) return count(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 10));
  fprintf(stderr, "usage: serve_client capture CONFIG TAG N [--no-close] | count CONFIG TAG N\n");
  return 2;
}

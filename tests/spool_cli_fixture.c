/*
 * spool_cli_fixture: the real spools tests/spool_cli.sh runs `capstore spool`
 * on, made by the capture sink itself.
 *
 *   spool_cli_fixture make DIR          three packs of two records each,
 *                                       sealed by a capture sink, then one
 *                                       stale temp file (a crashed writer's)
 *   spool_cli_fixture hold DIR SECONDS  takes the owner lock like a running
 *                                       sink, prints "holding PID", and keeps
 *                                       it until killed or SECONDS pass
 *   spool_cli_fixture big DIR RECORDS   one pack of RECORDS one-byte records:
 *                                       a large footer, for runs short of memory
 *   spool_cli_fixture reopen DIR        opens a capture sink on DIR (its
 *                                       recovery runs), prints what recovery
 *                                       did, captures one pack and closes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capstore/capture.h"

static cs_pack_meta meta(const char *id, uint32_t length) {
  cs_pack_meta m;
  memset(&m, 0, sizeof m);
  m.capture_id = cs_pack_text_of(id);
  m.tenant_id = cs_pack_text_of("tenant-cli");
  m.experiment_id = cs_pack_text_of("exp");
  m.run_id = cs_pack_text_of("run");
  m.session_id = cs_pack_text_of("session-cli");
  m.request_id = cs_pack_text_of("req");
  m.sequence_id = cs_pack_text_of("seq");
  m.model_id = cs_pack_text_of("model");
  m.model_revision = cs_pack_text_of("rev");
  m.adapter_revision = cs_pack_text_of(NULL);
  m.capture_policy_version = cs_pack_text_of("p1");
  m.hook_name = cs_pack_text_of("layers.0");
  m.dtype = CS_DTYPE_UINT8;
  m.rank = 1;
  m.shape[0] = length;
  return m;
}

static int fail(const char *what, int rc, const char *msg) {
  fprintf(stderr, "spool_cli_fixture: %s: %s: %s\n", what, cs_strerror(rc), msg);
  return 1;
}

static void config(cs_capture_config *cfg) {
  cs_capture_config_default(cfg);
  cfg->staging_bytes = 4u << 20;
  cfg->record_bytes_max = 1u << 20;
  cfg->device_copies_max = 0;
}

static int make(const char *dir) {
  cs_capture_config cfg;
  config(&cfg);
  cs_capture *cap = NULL;
  char msg[400];
  int rc = cs_capture_open(dir, &cfg, &cap, msg, sizeof msg);
  if (rc != CS_E_OK) return fail("open", rc, msg);
  uint8_t payload[3000];
  memset(payload, 0x11, sizeof payload);
  for (int pack = 0; pack < 3 && rc == CS_E_OK; pack++) {
    for (int record = 0; record < 2 && rc == CS_E_OK; record++) {
      char id[32];
      snprintf(id, sizeof id, "cli-%d-%d", pack, record);
      cs_pack_meta m = meta(id, sizeof payload);
      rc = cs_capture_write(cap, &m, payload, sizeof payload, msg, sizeof msg);
    }
    if (rc == CS_E_OK) rc = cs_capture_flush(cap, CS_NEVER, msg, sizeof msg);
  }
  if (rc != CS_E_OK) return fail("write", rc, msg);
  rc = cs_capture_close(cap, CS_NEVER, msg, sizeof msg);
  cs_capture_free(cap);
  if (rc != CS_E_OK) return fail("close", rc, msg);
  /* What a writer that crashed mid-pack leaves behind. */
  char path[1024];
  snprintf(path, sizeof path, "%s/.0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.00112233aabbccdd.open", dir);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite("DMIPACK\0torn", 1, 12, f) != 12 || fclose(f) != 0) {
    perror("spool_cli_fixture: stale temp file");
    return 1;
  }
  return 0;
}

static int hold(const char *dir, int seconds) {
  cs_spool *spool = NULL;
  char msg[400];
  cs_spool_options options = {.create = false};
  int rc = cs_spool_open(dir, &options, &spool, msg, sizeof msg);
  if (rc != CS_E_OK) return fail("hold", rc, msg);
  printf("holding %ld\n", (long)getpid());
  fflush(stdout);
  for (int i = 0; i < seconds * 10; i++) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  cs_spool_close(spool);
  return 0;
}

/* Captures count records of `length` bytes named "<prefix>-<i>", then flushes. */
static int capture(cs_capture *cap, const char *prefix, uint32_t count, uint32_t length, char *msg,
                   size_t msg_size) {
  uint8_t payload[64];
  memset(payload, 0x22, sizeof payload);
  int rc = CS_E_OK;
  for (uint32_t i = 0; i < count && rc == CS_E_OK; i++) {
    char id[48];
    snprintf(id, sizeof id, "%s-%u", prefix, i);
    cs_pack_meta m = meta(id, length);
    rc = cs_capture_write(cap, &m, payload, length, msg, msg_size);
  }
  return rc == CS_E_OK ? cs_capture_flush(cap, CS_NEVER, msg, msg_size) : rc;
}

static int big(const char *dir, uint32_t records) {
  cs_capture_config cfg;
  config(&cfg);
  cfg.sink.pack_records_max = records;
  cs_capture *cap = NULL;
  char msg[400];
  int rc = cs_capture_open(dir, &cfg, &cap, msg, sizeof msg);
  if (rc != CS_E_OK) return fail("open", rc, msg);
  rc = capture(cap, "big", records, 1, msg, sizeof msg);
  if (rc == CS_E_OK) rc = cs_capture_close(cap, CS_NEVER, msg, sizeof msg);
  cs_capture_free(cap);
  return rc == CS_E_OK ? 0 : fail("big", rc, msg);
}

static int reopen(const char *dir) {
  cs_capture_config cfg;
  config(&cfg);
  cs_capture *cap = NULL;
  char msg[400];
  int rc = cs_capture_open(dir, &cfg, &cap, msg, sizeof msg);
  if (rc != CS_E_OK) return fail("open", rc, msg);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  const cs_spool_recovery *r = &stats.recovery;
  printf("started: recovery verified %u, quarantined %u, kept %u (%llu bytes); problem: %s\n", r->ready_ok,
         r->quarantined, r->kept, (unsigned long long)r->kept_bytes, r->problem[0] ? r->problem : "none");
  fflush(stdout);
  rc = capture(cap, "reopen", 2, 64, msg, sizeof msg);
  if (rc == CS_E_OK) rc = cs_capture_close(cap, CS_NEVER, msg, sizeof msg);
  cs_capture_free(cap);
  return rc == CS_E_OK ? 0 : fail("reopen", rc, msg);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "make") == 0) return make(argv[2]);
  if (argc == 4 && strcmp(argv[1], "hold") == 0) return hold(argv[2], atoi(argv[3]));
  if (argc == 4 && strcmp(argv[1], "big") == 0) return big(argv[2], (uint32_t)strtoul(argv[3], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "reopen") == 0) return reopen(argv[2]);
  fprintf(stderr, "usage: spool_cli_fixture make DIR | hold DIR SECONDS | big DIR RECORDS | reopen DIR\n");
  return 2;
}

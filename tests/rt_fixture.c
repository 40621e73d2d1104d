/*
 * capstore_rt_fixture: one capture process, publisher or uploader, for the
 * live service tests (tests/live_service.py), configured from the
 * environment as a deployment would be:
 *
 *   CAPSTORE_SPOOL                         the spool directory (required for capture and serve)
 *   CAPSTORE_STORE_DIR | CAPSTORE_S3_ENDPOINT + CAPSTORE_S3_BUCKET (credentials: AWS_*, or in the
 *   config from CAPSTORE_S3_ACCESS_KEY_ID and CAPSTORE_S3_SECRET_ACCESS_KEY)
 *   CAPSTORE_SQLITE | CAPSTORE_CLICKHOUSE_URL (+ _USER, _PASSWORD; a replicated catalog:
 *   CAPSTORE_CLICKHOUSE_CLUSTER, _QUORUM, _QUORUM_TIMEOUT_MS)
 *   CAPSTORE_ROLE (publisher|uploader), CAPSTORE_NAME, CAPSTORE_TTL_MS, CAPSTORE_TIMEOUT_MS,
 *   CAPSTORE_RECONCILE_MS (periodic pass), CAPSTORE_NO_START_RECONCILE, CAPSTORE_PACK_RECORDS,
 *   CAPSTORE_LINGER_MS, CAPSTORE_BACKOFF_CAP_MS, CAPSTORE_SPOOL_BYTES, CAPSTORE_FULL_REFUSE,
 *   CAPSTORE_FLUSH_TRIES (flush again until drained, this many times)
 *
 * Commands (each prints one result line per step on stdout, unbuffered):
 *   capture FIRST COUNT ELEMENTS [FLUSH_MS] [PAUSE_US]
 *        captures records FIRST.. (tests/test_capstore_util.h), flushes with FLUSH_MS
 *        (default 30000), prints "flush rc=<name> drained=<0|1> missing=N owed=N rejected=N
 *        named=<ids>", closes; exit 0 when the flush drained
 *   serve SECONDS   opens and stays open, printing "lease=<state> term=N indexed=N" when it changes
 *   check MUST [MAY]  reads back everything visible; prints "records=N missing=N duplicates=N
 *        unknown=N bad_bytes=N packs=N"; exit 0 when every record of [0, MUST) is there once,
 *        byte-exact, and nothing else but records of [MUST, MAY) (at most once each)
 *   session         reads "capture FIRST COUNT ELEMENTS", "flush MS", "stats", "close" from stdin
 *   dump            prints "id N" for every visible record, then the summary
 *   orphan FIRST COUNT ELEMENTS   PUTs one pack of those records into the store (not indexed)
 *   tear            for each sealed pack in the spool, PUTs its first half under its key as a plain
 *        object (no pack metadata): a torn upload, as s3rver keeps one when its sender dies
 *        mid-body; prints "torn KEY BYTES" for each, then "torn N"
 *   switch TARGET_PORT   a TCP fault switch to 127.0.0.1:TARGET_PORT: prints "port N", then
 *        reads commands from stdin: pass | cut | stall | http METHOD PREFIX STATUS | hold METHOD PREFIX
 *        | stats, answering "ok" (or "stats accepted=.. injected=.. reset=.. held=..")
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tcp_switch.h"
#include "test_capstore_util.h"

#define MS CS_MS_NS

static uint64_t env_u64(const char *name, uint64_t fallback) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? strtoull(v, NULL, 10) : fallback;
}

static void config_from_env(capstore_config *cfg) {
  capstore_config_default(cfg);
  cfg->spool_dir = getenv("CAPSTORE_SPOOL");
  cfg->store_dir = getenv("CAPSTORE_STORE_DIR");
  cfg->s3_endpoint = getenv("CAPSTORE_S3_ENDPOINT");
  cfg->s3_bucket = getenv("CAPSTORE_S3_BUCKET");
  cfg->s3_allow_insecure = true; /* the loopback test servers */
  cfg->s3_access_key_id = getenv("CAPSTORE_S3_ACCESS_KEY_ID"); /* NULL: AWS_ACCESS_KEY_ID */
  cfg->s3_secret_access_key = getenv("CAPSTORE_S3_SECRET_ACCESS_KEY");
  cfg->sqlite_path = getenv("CAPSTORE_SQLITE");
  cfg->clickhouse_url = getenv("CAPSTORE_CLICKHOUSE_URL");
  cfg->clickhouse_user = getenv("CAPSTORE_CLICKHOUSE_USER");
  cfg->clickhouse_password = getenv("CAPSTORE_CLICKHOUSE_PASSWORD");
  cfg->clickhouse_database = getenv("CAPSTORE_CLICKHOUSE_DATABASE");
  cfg->clickhouse_allow_insecure = true;
  cfg->clickhouse_cluster = getenv("CAPSTORE_CLICKHOUSE_CLUSTER");
  cfg->clickhouse_insert_quorum = (uint32_t)env_u64("CAPSTORE_CLICKHOUSE_QUORUM", 0);
  cfg->clickhouse_insert_quorum_timeout_ns = env_u64("CAPSTORE_CLICKHOUSE_QUORUM_TIMEOUT_MS", 0) * MS;
  if (getenv("CAPSTORE_NAME") != NULL) cfg->name = getenv("CAPSTORE_NAME");
  const char *role = getenv("CAPSTORE_ROLE");
  cfg->role = role != NULL && strcmp(role, "uploader") == 0 ? CS_ROLE_UPLOADER : CS_ROLE_PUBLISHER;
  cfg->service.role = cfg->role;
  cfg->service.lease_ttl_ns = env_u64("CAPSTORE_TTL_MS", 30000) * MS;
  /* ClickHouse 18.16 stamps claims in whole seconds: the guard must exceed 1 s there (docs/clickhouse.md). */
  uint64_t guard = cfg->service.lease_ttl_ns / 10;
  if (cfg->clickhouse_url != NULL && guard < 1100 * MS) guard = 1100 * MS;
  cfg->service.lease_guard_ns = guard > 2000 * MS ? 2000 * MS : guard;
  cfg->service.request_timeout_ns = env_u64("CAPSTORE_TIMEOUT_MS", 5000) * MS;
  cfg->service.reconcile_interval_ns = env_u64("CAPSTORE_RECONCILE_MS", 0) * MS;
  cfg->reconcile_at_start = getenv("CAPSTORE_NO_START_RECONCILE") == NULL;
  cfg->service.backoff_cap_ns = env_u64("CAPSTORE_BACKOFF_CAP_MS", 2000) * MS;
  if (cfg->service.backoff_base_ns > cfg->service.backoff_cap_ns) cfg->service.backoff_base_ns = cfg->service.backoff_cap_ns;
  cfg->capture.sink.pack_records_max = (uint32_t)env_u64("CAPSTORE_PACK_RECORDS", 100);
  cfg->capture.sink.linger_ns = env_u64("CAPSTORE_LINGER_MS", 200) * MS;
  cfg->capture.staging_bytes = 16u << 20;
  cfg->capture.record_bytes_max = 1u << 20;
  cfg->capture.direct_io = false;
  cfg->capture.hash_thread = false;
  cfg->capture.demote_staging = false;
  uint64_t spool_bytes = env_u64("CAPSTORE_SPOOL_BYTES", 0);
  if (spool_bytes != 0) {
    cfg->capture.sink.spool_bytes_max = spool_bytes;
    if (cfg->capture.sink.pack_bytes_max > spool_bytes) cfg->capture.sink.pack_bytes_max = spool_bytes;
  }
  if (getenv("CAPSTORE_FULL_REFUSE") != NULL) cfg->capture.sink.full_policy = CS_FULL_REFUSE;
}

static int cmd_capture(uint64_t first, uint64_t count, uint32_t elements, uint64_t flush_ms, uint64_t pause_us) {
  capstore_config cfg;
  config_from_env(&cfg);
  capstore *cs = NULL;
  char msg[512];
  int rc = capstore_open(&cfg, &cs, msg, sizeof msg);
  printf("open rc=%s %s\n", cs_strerror(rc), msg);
  if (rc != CS_E_OK) return 2;
  size_t len = (size_t)elements * 2u;
  uint8_t *bytes = malloc(len);
  for (uint64_t n = first; n < first + count; n++) {
    tc_record r;
    tc_record_make(&r, n, elements);
    tc_payload(n, bytes, len);
    rc = capstore_write(cs, &r.meta, bytes, len, msg, sizeof msg);
    if (rc != CS_E_OK) {
      printf("write %llu rc=%s %s\n", (unsigned long long)n, cs_strerror(rc), msg);
      n--; /* a refused record is captured again: the test counts what was accepted */
      struct timespec ts = {0, 20 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    printf("captured %llu\n", (unsigned long long)n);
    if (pause_us > 0) {
      struct timespec ts = {(time_t)(pause_us / 1000000), (long)(pause_us % 1000000) * 1000};
      nanosleep(&ts, NULL);
    }
  }
  free(bytes);
  capstore_flush_report report;
  uint64_t tries = env_u64("CAPSTORE_FLUSH_TRIES", 1);
  for (uint64_t t = 0; t < tries; t++) {
    uint64_t began = capstore_clock_ns();
    rc = capstore_flush(cs, began + flush_ms * MS, &report, msg, sizeof msg);
    printf("flush rc=%s drained=%d stage=%s missing=%u owed=%u rejected=%u took_ms=%llu msg=%s\n", cs_strerror(rc),
           report.drained, report.stage, report.missing_packs, report.owed_packs, report.rejected_count,
           (unsigned long long)((capstore_clock_ns() - began) / MS), msg);
    if (report.drained) break;
  }
  char stats[4096];
  capstore_stats_json(cs, stats, sizeof stats);
  printf("stats %s\n", stats);
  int close_rc = capstore_close(cs, 10 * CS_SEC_NS, msg, sizeof msg);
  printf("close rc=%s %s\n", cs_strerror(close_rc), msg);
  capstore_free(cs);
  return report.drained ? 0 : 1;
}

/* Prints a flush's answer as one line (the set-aside packs by id). */
static void print_flush(int rc, const capstore_flush_report *report, uint64_t took_ms, const char *msg) {
  char named[CS_FLUSH_REJECTED_MAX * (CS_UUID_TEXT_LEN + 1) + 1] = "";
  for (uint32_t i = 0; i < report->rejected_named; i++) {
    char id[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&report->rejected[i], id);
    strcat(named, i > 0 ? "," : "");
    strcat(named, id);
  }
  printf("flush rc=%s drained=%d stage=%s missing=%u owed=%u rejected=%u took_ms=%llu named=%s msg=%s\n",
         cs_strerror(rc), report->drained, report->stage, report->missing_packs, report->owed_packs,
         report->rejected_count, (unsigned long long)took_ms, named[0] != '\0' ? named : "-", msg);
}

/*
 * A capture process driven line by line from stdin: "capture FIRST COUNT ELEMENTS", "flush MS",
 * "stats", "close". Each answers one line ("captured FIRST COUNT", the flush line, "stats {...}").
 */
static int cmd_session(void) {
  capstore_config cfg;
  config_from_env(&cfg);
  capstore *cs = NULL;
  char msg[512], line[256];
  int rc = capstore_open(&cfg, &cs, msg, sizeof msg);
  printf("open rc=%s %s\n", cs_strerror(rc), msg);
  if (rc != CS_E_OK) return 2;
  while (fgets(line, sizeof line, stdin) != NULL) {
    unsigned long long a = 0, b = 0, c = 0;
    if (sscanf(line, "capture %llu %llu %llu", &a, &b, &c) == 3) {
      rc = tc_capture(cs, a, b, (uint32_t)c);
      printf("captured %llu %llu rc=%s\n", a, b, cs_strerror(rc));
    } else if (sscanf(line, "flush %llu", &a) == 1) {
      capstore_flush_report report;
      uint64_t began = capstore_clock_ns();
      rc = capstore_flush(cs, began + a * MS, &report, msg, sizeof msg);
      print_flush(rc, &report, (capstore_clock_ns() - began) / MS, msg);
    } else if (strncmp(line, "stats", 5) == 0) {
      char stats[4096];
      capstore_stats_json(cs, stats, sizeof stats);
      printf("stats %s\n", stats);
    } else if (strncmp(line, "close", 5) == 0) {
      break;
    }
  }
  rc = capstore_close(cs, 10 * CS_SEC_NS, msg, sizeof msg);
  printf("close rc=%s %s\n", cs_strerror(rc), msg);
  capstore_free(cs);
  return rc == CS_E_OK ? 0 : 1;
}

static int cmd_serve(uint64_t seconds) {
  capstore_config cfg;
  config_from_env(&cfg);
  capstore *cs = NULL;
  char msg[512];
  int rc = capstore_open(&cfg, &cs, msg, sizeof msg);
  printf("open rc=%s %s\n", cs_strerror(rc), msg);
  if (rc != CS_E_OK) return 2;
  uint64_t until = capstore_clock_ns() + seconds * CS_SEC_NS;
  char last[256] = "";
  while (capstore_clock_ns() < until) {
    capstore_stats s;
    capstore_stats_get(cs, &s);
    char line[256];
    snprintf(line, sizeof line, "lease=%s term=%llu indexed=%llu adopted=%llu head_errors=%llu",
             cs_lease_state_name(s.service.lease_state), (unsigned long long)s.service.lease_term,
             (unsigned long long)s.service.indexed, (unsigned long long)s.service.reconcile_adopted,
             (unsigned long long)s.service.reconcile_head_errors);
    if (strcmp(line, last) != 0) printf("%s\n", line);
    snprintf(last, sizeof last, "%s", line);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  rc = capstore_close(cs, 10 * CS_SEC_NS, msg, sizeof msg);
  printf("close rc=%s %s\n", cs_strerror(rc), msg);
  capstore_free(cs);
  return rc == CS_E_OK ? 0 : 1;
}

/*
 * Reads back what is visible (records [0, may), of which [0, must) all), printing the summary;
 * dump prints each capture id too. Exit 0 when the adapters answered and, for check, every record
 * of [0, must) is there once, byte-exact, and nothing else but records of [must, may).
 */
static int read_visible(uint64_t must, uint64_t may, bool dump) {
  capstore_config cfg;
  config_from_env(&cfg);
  cs_store store;
  cs_catalog catalog;
  char msg[512];
  if (capstore_open_store(&cfg, &store, msg, sizeof msg) != CS_E_OK ||
      capstore_open_catalog(&cfg, &catalog, msg, sizeof msg) != CS_E_OK) {
    printf("read open: %s\n", msg);
    return 2;
  }
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s/", cfg.name);
  tc_seen seen;
  tc_dump = dump;
  int rc = tc_read_back(&store, &catalog, prefix, must, may, &seen);
  printf("records=%llu missing=%llu duplicates=%llu unknown=%llu bad_bytes=%llu packs=%llu rc=%s\n",
         (unsigned long long)seen.records, (unsigned long long)seen.missing, (unsigned long long)seen.duplicates,
         (unsigned long long)seen.unknown, (unsigned long long)seen.bad_bytes, (unsigned long long)seen.packs,
         cs_strerror(rc));
  catalog.ops->close(catalog.self);
  cs_store_close(&store);
  if (dump) return rc == CS_E_OK ? 0 : 1;
  bool exact = rc == CS_E_OK && seen.records >= must && seen.missing == 0 && seen.duplicates == 0 &&
               seen.unknown == 0 && seen.bad_bytes == 0;
  return exact ? 0 : 1;
}

static int collect(void *context, const uint8_t *bytes, size_t length) {
  uint8_t **buf = context;
  size_t *len = (size_t *)(buf + 1);
  uint8_t *grown = realloc(*buf, *len + length);
  if (grown == NULL) return -1;
  memcpy(grown + *len, bytes, length);
  *buf = grown;
  *len += length;
  return 0;
}

/* Writes a pack of records FIRST.. straight into the store, as an uploader that died before hand-off leaves it. */
static int cmd_orphan(uint64_t first, uint64_t count, uint32_t elements) {
  capstore_config cfg;
  config_from_env(&cfg);
  cs_store store;
  char msg[512];
  if (capstore_open_store(&cfg, &store, msg, sizeof msg) != CS_E_OK) {
    printf("orphan open: %s\n", msg);
    return 2;
  }
  struct {
    uint8_t *buf;
    size_t len;
  } out = {NULL, 0};
  cs_pack_writer_config wc = {.created_at_ns = 1764547200000000000ull + first, .write = collect, .write_context = &out};
  for (int i = 0; i < 16; i++) wc.pack_id.bytes[i] = (uint8_t)(rand() & 0xff);
  wc.pack_id.bytes[6] = (uint8_t)(0x70 | (wc.pack_id.bytes[6] & 0x0f));
  wc.pack_id.bytes[8] = (uint8_t)(0x80 | (wc.pack_id.bytes[8] & 0x3f));
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  if (cs_pack_writer_open(&wc, &w, &err) != CS_E_OK) return 2;
  size_t len = (size_t)elements * 2u;
  uint8_t *bytes = malloc(len);
  tc_record r;
  for (uint64_t n = first; n < first + count; n++) {
    tc_record_make(&r, n, elements);
    tc_payload(n, bytes, len);
    if (cs_pack_writer_add_record(w, &r.meta, bytes, len, &err) != CS_E_OK) return 2;
  }
  cs_pack_summary sum;
  if (cs_pack_writer_finish(w, &sum, &err) != CS_E_OK) return 2;
  cs_pack_key_fields fields;
  cs_pack_writer_key_fields(w, &fields, &err);
  char prefix[128], key[CS_KEY_MAX];
  size_t key_len = 0;
  snprintf(prefix, sizeof prefix, "%s/", cfg.name);
  if (cs_pack_object_key(prefix, strlen(prefix), &fields, key, &key_len, &err) != CS_E_OK) return 2;
  cs_object_info meta = {.is_pack = true, .size_bytes = sum.size_bytes, .pack_id = sum.pack_id,
                         .record_count = sum.record_count, .created_at_ns = sum.created_at_ns};
  memcpy(meta.sha256, sum.sha256, sizeof meta.sha256);
  cs_store_result res = {0};
  int rc = store.ops->put(store.self, key, out.buf, out.len, &meta, false, &res);
  printf("orphan key=%s rc=%s outcome=%s\n", key, cs_strerror(rc), cs_outcome_name(res.outcome));
  cs_pack_writer_free(w);
  free(bytes);
  free(out.buf);
  cs_store_close(&store);
  return rc == CS_E_OK && res.outcome == CS_OUT_OK ? 0 : 1;
}

/* The whole file at path (malloc'd into *bytes), or false. */
static bool read_file(const char *path, uint8_t **bytes, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return false;
  bool ok = fseek(f, 0, SEEK_END) == 0;
  long size = ok ? ftell(f) : -1;
  ok = size > 0 && fseek(f, 0, SEEK_SET) == 0;
  *bytes = ok ? malloc((size_t)size) : NULL;
  ok = *bytes != NULL && fread(*bytes, 1, (size_t)size, f) == (size_t)size;
  fclose(f);
  *len = ok ? (size_t)size : 0;
  return ok;
}

/* The object key of the pack in bytes (under "<name>/"), or false. */
static bool pack_key_of(const char *name, const uint8_t *bytes, size_t len, char key[CS_KEY_MAX]) {
  cs_pack_trailer trailer;
  cs_pack_footer footer;
  cs_pack_key_fields fields;
  cs_pack_error err;
  if (len < CS_PACK_TRAILER_SIZE || cs_pack_trailer_parse(bytes + len - CS_PACK_TRAILER_SIZE, len, &trailer, &err) != CS_E_OK)
    return false;
  if (cs_pack_footer_parse(&trailer, bytes + trailer.footer_offset, (size_t)trailer.footer_length, &footer, &err) != CS_E_OK)
    return false;
  char prefix[128];
  size_t key_len = 0;
  snprintf(prefix, sizeof prefix, "%s/", name);
  bool ok = cs_pack_footer_key_fields(&footer, &fields, &err) == CS_E_OK &&
            cs_pack_object_key(prefix, strlen(prefix), &fields, key, &key_len, &err) == CS_E_OK;
  cs_pack_footer_free(&footer);
  return ok;
}

/* A torn upload of every sealed pack in the spool: its first half, no metadata, under its key. */
static int cmd_tear(void) {
  capstore_config cfg;
  config_from_env(&cfg);
  cs_store store;
  char msg[512];
  if (cfg.spool_dir == NULL || capstore_open_store(&cfg, &store, msg, sizeof msg) != CS_E_OK) {
    printf("tear open: %s\n", cfg.spool_dir == NULL ? "CAPSTORE_SPOOL is not set" : msg);
    return 2;
  }
  DIR *dir = opendir(cfg.spool_dir);
  if (dir == NULL) {
    printf("tear: cannot open %s\n", cfg.spool_dir);
    cs_store_close(&store);
    return 2;
  }
  static const char suffix[] = ".dmi-pack.ready";
  int status = 0, torn = 0;
  struct dirent *ent;
  while (status == 0 && (ent = readdir(dir)) != NULL) {
    size_t n = strlen(ent->d_name);
    if (n <= sizeof suffix - 1 || strcmp(ent->d_name + n - (sizeof suffix - 1), suffix) != 0) continue;
    char path[4096], key[CS_KEY_MAX];
    snprintf(path, sizeof path, "%s/%s", cfg.spool_dir, ent->d_name);
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (!read_file(path, &bytes, &len) || !pack_key_of(cfg.name, bytes, len, key)) {
      printf("tear: cannot read the pack %s\n", path);
      status = 2;
    } else {
      cs_store_result res = {0};
      int rc = store.ops->put(store.self, key, bytes, len / 2, NULL, false, &res);
      if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
        printf("tear put %s: rc=%s outcome=%s\n", key, cs_strerror(rc), cs_outcome_name(res.outcome));
        status = 1;
      } else {
        printf("torn %s %zu\n", key, len / 2);
        torn++;
      }
    }
    free(bytes);
  }
  closedir(dir);
  cs_store_close(&store);
  printf("torn %d\n", torn);
  return status;
}

static int cmd_switch(uint16_t target) {
  cs_tcp_switch *sw = NULL;
  if (cs_tcp_switch_start(0, target, &sw) != 0) {
    printf("switch: cannot start\n");
    return 2;
  }
  printf("port %u\n", cs_tcp_switch_port(sw));
  char line[512];
  while (fgets(line, sizeof line, stdin) != NULL) {
    char verb[16] = "", method[16] = "", prefix[256] = "";
    unsigned status = 0;
    int n = sscanf(line, "%15s %15s %255s %u", verb, method, prefix, &status);
    int rc = -1;
    if (strcmp(verb, "pass") == 0) rc = cs_tcp_switch_pass(sw);
    else if (strcmp(verb, "cut") == 0) rc = cs_tcp_switch_cut(sw);
    else if (strcmp(verb, "stall") == 0) rc = cs_tcp_switch_stall(sw);
    else if (strcmp(verb, "http") == 0 && n == 4) rc = cs_tcp_switch_http(sw, method, prefix, status);
    else if (strcmp(verb, "hold") == 0 && n >= 3) rc = cs_tcp_switch_http_hold(sw, method, prefix);
    else if (strcmp(verb, "stats") == 0) {
      cs_tcp_switch_stats st;
      cs_tcp_switch_stats_get(sw, &st);
      printf("stats accepted=%llu injected=%llu reset=%llu held=%llu\n", (unsigned long long)st.accepted,
             (unsigned long long)st.injected, (unsigned long long)st.reset, (unsigned long long)st.held);
      continue;
    } else if (strcmp(verb, "quit") == 0) break;
    printf("%s\n", rc == 0 ? "ok" : "error");
  }
  cs_tcp_switch_stop(sw);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 5 && strcmp(argv[1], "capture") == 0)
    return cmd_capture(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), (uint32_t)strtoul(argv[4], NULL, 10),
                       argc > 5 ? strtoull(argv[5], NULL, 10) : 30000, argc > 6 ? strtoull(argv[6], NULL, 10) : 0);
  if (argc == 3 && strcmp(argv[1], "serve") == 0) return cmd_serve(strtoull(argv[2], NULL, 10));
  if ((argc == 3 || argc == 4) && strcmp(argv[1], "check") == 0)
    return read_visible(strtoull(argv[2], NULL, 10), strtoull(argv[argc - 1], NULL, 10), false);
  if (argc == 2 && strcmp(argv[1], "dump") == 0) return read_visible(0, 10000000, true); /* record numbers < 10^7 */
  if (argc == 2 && strcmp(argv[1], "session") == 0) return cmd_session();
  if (argc == 5 && strcmp(argv[1], "orphan") == 0) {
    srand((unsigned)capstore_clock_ns());
    return cmd_orphan(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), (uint32_t)strtoul(argv[4], NULL, 10));
  }
  if (argc == 2 && strcmp(argv[1], "tear") == 0) return cmd_tear();
  if (argc == 3 && strcmp(argv[1], "switch") == 0) return cmd_switch((uint16_t)strtoul(argv[2], NULL, 10));
  fprintf(stderr, "usage: %s capture FIRST COUNT ELEMENTS [FLUSH_MS] [PAUSE_US] | serve SECONDS | check MUST [MAY] | "
                  "switch TARGET_PORT\n", argv[0]);
  return 2;
}

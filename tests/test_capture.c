/*
 * Unit tests of the capture sink runtime: configuration and argument
 * refusals, a host round trip read back with the pack reader, sealing by
 * count and by linger, flush and close ordering, several capturing threads,
 * a full spool under both policies, a full staging area, seal failures and
 * refused records reported by flush, crash recovery with a torn .open file,
 * and UUIDv7 pack ids.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_fs_util.h"

#include "capstore/capture.h"
#include "runtime_internal.h"
#include "test_pack_util.h"

#define MS CS_MS_NS
#define DEADLINE(ms) (cs_capture_clock_ns() + (uint64_t)(ms) * MS)

/* ---- Helpers ---- */

/*
 * The group runs twice: hashing on the worker, then on a hash thread
 * (hash_thread, and demote_staging with it, as their defaults go together).
 */
static bool g_hash_thread;

static void config_default(cs_capture_config *cfg) {
  cs_capture_config_default(cfg);
  cfg->hash_thread = g_hash_thread;
  cfg->demote_staging = g_hash_thread;
}

static cs_capture_config small_config(cs_full_policy policy) {
  cs_capture_config cfg;
  config_default(&cfg);
  cfg.sink.pack_records_max = 4;
  cfg.sink.pack_bytes_max = 64 * 1024;
  cfg.sink.linger_ns = 10 * CS_SEC_NS;
  cfg.sink.spool_bytes_max = 64 * 1024 * 1024;
  cfg.sink.spool_packs_max = 1000;
  cfg.sink.full_policy = policy;
  cfg.sink.block_max_ns = 100 * MS;
  cfg.staging_bytes = 4 * 1024 * 1024;
  cfg.record_bytes_max = 1024 * 1024;
  return cfg;
}

static cs_capture *capture_start(const char *dir, const cs_capture_config *cfg) {
  cs_capture *cap = NULL;
  char msg[256];
  int rc = cs_capture_open(dir, cfg, &cap, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("cs_capture_open: %s: %s", cs_strerror(rc), msg);
  return cap;
}

static void fill_payload(uint8_t *bytes, size_t len, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < len; i++) {
    x = x * 1103515245u + 12345u;
    bytes[i] = (uint8_t)(x >> 16);
  }
}

/* Writes a uint8 record "<prefix>-<n>" of len bytes filled from seed n. */
static int write_record(cs_capture *cap, const char *prefix, uint32_t n, uint32_t len, char *msg,
                        size_t msg_size) {
  char id[64];
  snprintf(id, sizeof id, "%s-%u", prefix, n);
  cs_pack_meta meta = tp_meta(id, len);
  meta.step_number = n;
  uint8_t *bytes = malloc(len + 1);
  fill_payload(bytes, len, n);
  int rc = cs_capture_write(cap, &meta, bytes, len, msg, msg_size);
  free(bytes);
  return rc;
}

static void write_ok(cs_capture *cap, const char *prefix, uint32_t n, uint32_t len) {
  char msg[256];
  int rc = write_record(cap, prefix, n, len, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("write %s-%u: %s: %s", prefix, n, cs_strerror(rc), msg);
}

/* One record as read back: its capture id, step and whether its bytes matched. */
typedef struct seen {
  char id[64];
  uint64_t step;
  uint64_t length;
  uint64_t pack_order; /* pack index in name (pack id) order */
  uint32_t record_index;
} seen;

typedef struct readback {
  seen *records;
  size_t count;
  size_t packs;
} readback;

static uint8_t *read_whole(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  uint8_t *data = malloc((size_t)st.st_size + 1);
  assert_int_equal(pread(fd, data, (size_t)st.st_size, 0), st.st_size);
  close(fd);
  *size = (size_t)st.st_size;
  return data;
}

/* Reads and fully verifies every ready pack, checking each payload against its seed. */
static int entry_order(const void *a, const void *b) {
  return strcmp(((const cs_spool_entry *)a)->name, ((const cs_spool_entry *)b)->name);
}

/* The ready packs by name (without the spool's lock: a sink may own it). */
static cs_spool_entry *ready_entries(const char *dir, size_t *count) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  cs_spool_entry *entries = NULL;
  *count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    cs_spool_entry entry;
    if (cs_spool_parse_ready_name(e->d_name, &entry) != CS_E_OK) continue;
    entries = realloc(entries, (*count + 1) * sizeof *entries);
    entries[(*count)++] = entry;
  }
  closedir(d);
  if (*count > 1) qsort(entries, *count, sizeof *entries, entry_order);
  return entries;
}

static readback read_all(const char *dir) {
  size_t count = 0;
  cs_spool_entry *entries = ready_entries(dir, &count);
  readback out = {.records = NULL, .count = 0, .packs = count};
  for (size_t p = 0; p < count; p++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, entries[p].name);
    size_t size = 0;
    uint8_t *data = read_whole(path, &size);
    cs_pack_summary summary;
    cs_pack_error err;
    if (cs_pack_verify_buffer(data, size, &summary, &err) != CS_E_OK) fail_msg("verify: %s", err.message);
    assert_memory_equal(summary.sha256, entries[p].sha256, 32);
    cs_pack_trailer trailer;
    assert_int_equal(cs_pack_trailer_parse(data + size - 64, size, &trailer, &err), CS_E_OK);
    cs_pack_footer footer;
    assert_int_equal(cs_pack_footer_parse(&trailer, data + trailer.footer_offset,
                                          (size_t)trailer.footer_length, &footer, &err), CS_E_OK);
    out.records = realloc(out.records, (out.count + footer.record_count) * sizeof *out.records);
    for (uint32_t r = 0; r < footer.record_count; r++) {
      const cs_pack_record *rec = &footer.records[r];
      seen *s = &out.records[out.count++];
      snprintf(s->id, sizeof s->id, "%.*s", (int)rec->meta.capture_id.len, rec->meta.capture_id.bytes);
      s->step = rec->meta.step_number;
      s->length = rec->decoded_length;
      s->pack_order = p;
      s->record_index = r;
      uint8_t *want = malloc(rec->decoded_length + 1);
      fill_payload(want, (size_t)rec->decoded_length, (uint32_t)s->step);
      if (memcmp(want, data + rec->offset, (size_t)rec->decoded_length) != 0) {
        fail_msg("record %s: payload differs", s->id);
      }
      free(want);
    }
    cs_pack_footer_free(&footer);
    free(data);
  }
  free(entries);
  return out;
}

static void readback_free(readback *r) {
  free(r->records);
  memset(r, 0, sizeof *r);
}

static const seen *find_seen(const readback *r, const char *id) {
  const seen *hit = NULL;
  for (size_t i = 0; i < r->count; i++) {
    if (strcmp(r->records[i].id, id) == 0) {
      if (hit != NULL) fail_msg("record %s appears twice", id);
      hit = &r->records[i];
    }
  }
  return hit;
}

/* ---- Configuration and refusals ---- */

static void test_config_refusals(void **state) {
  (void)state;
  char msg[256];
  cs_capture_config cfg;
  config_default(&cfg);
  assert_int_equal(cs_capture_config_validate(&cfg, msg, sizeof msg), CS_E_OK);
  assert_string_equal(msg, "");
  cfg.staging_bytes = 1000;
  assert_int_equal(cs_capture_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "staging_bytes"));
  config_default(&cfg);
  cfg.record_bytes_max = cfg.staging_bytes;
  assert_int_equal(cs_capture_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "record_bytes_max"));
  config_default(&cfg);
  cfg.record_bytes_max = 0;
  assert_int_equal(cs_capture_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "record_bytes_max"));
  config_default(&cfg);
  cfg.sink.linger_ns = 5;
  assert_int_equal(cs_capture_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "sink.linger_ns"));
  config_default(&cfg);
  cfg.sink.full_policy = 7;
  assert_int_equal(cs_capture_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "full_policy"));
  assert_int_equal(cs_capture_config_validate(NULL, msg, sizeof msg), CS_E_CONFIG);
  /* open refuses the same config before touching the directory. */
  cs_capture *cap = NULL;
  cfg.sink.full_policy = 7;
  assert_int_equal(cs_capture_open("/tmp/never-created-capstore", &cfg, &cap, msg, sizeof msg), CS_E_CONFIG);
  assert_null(cap);
  assert_int_equal(cs_capture_open(NULL, NULL, &cap, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "spool_dir"));
  assert_int_equal(cs_capture_open("/tmp", NULL, NULL, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_capture_open("/proc/capstore-denied/x", NULL, &cap, msg, sizeof msg), CS_E_IO);
  assert_non_null(strstr(msg, "/proc/capstore-denied/x"));
}

static void test_write_refusals(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  char msg[256];
  uint8_t bytes[16] = {0};
  cs_pack_meta meta = tp_meta("a", 16);
  assert_int_equal(cs_capture_write(NULL, &meta, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "cap is NULL"));
  assert_int_equal(cs_capture_write(cap, NULL, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "meta is NULL"));
  assert_int_equal(cs_capture_write(cap, &meta, NULL, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "bytes is NULL"));
  /* The descriptor says 16 elements of uint8: 15 bytes is a shape mismatch. */
  assert_int_equal(cs_capture_write(cap, &meta, bytes, 15, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "shape"));
  cs_pack_meta bad = meta;
  bad.token_end = 1;
  bad.token_start = 2;
  assert_int_equal(cs_capture_write(cap, &bad, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_string_equal(msg, "descriptor: field token_end 1 is below token_start 2");
  bad = meta;
  bad.run_id = cs_pack_text_of("");
  assert_int_equal(cs_capture_write(cap, &bad, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_string_equal(msg, "descriptor: field run_id is 0 bytes; text fields hold 1..512 bytes of UTF-8");
  bad = meta;
  bad.hook_name = (cs_pack_text){.bytes = "ok\xff", .len = 3};
  assert_int_equal(cs_capture_write(cap, &bad, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_string_equal(msg, "descriptor: field hook_name is not valid UTF-8");
  /* Oversize: over record_bytes_max. */
  uint32_t big = (uint32_t)cfg.record_bytes_max + 1;
  uint8_t *huge = calloc(big, 1);
  cs_pack_meta hm = tp_meta("huge", big);
  assert_int_equal(cs_capture_write(cap, &hm, huge, big, msg, sizeof msg), CS_E_TOO_LARGE);
  assert_non_null(strstr(msg, "record_bytes_max"));
  free(huge);
  /* The first good record fixes tenant, session and rank. */
  assert_int_equal(cs_capture_write(cap, &meta, bytes, 16, msg, sizeof msg), CS_E_OK);
  assert_string_equal(msg, "");
  cs_pack_meta other = tp_meta("b", 16);
  other.tenant_id = cs_pack_text_of("tenant-b");
  assert_int_equal(cs_capture_write(cap, &other, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "tenant_id"));
  other = tp_meta("b", 16);
  other.producer_rank = 3;
  assert_int_equal(cs_capture_write(cap, &other, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "producer_rank"));
  /* Without a device the device path says why (tests/gpu covers it with one). */
  if (rt_cuda_probe(NULL, 0) != CS_E_OK) {
    assert_int_equal(cs_capture_write_device(cap, &meta, bytes, 16, NULL, msg, sizeof msg), CS_E_UNSUPPORTED);
    assert_non_null(strstr(msg, "device path"));
  }
  cs_capture_config off = cfg;
  off.device_copies_max = 0;
  cs_capture *no_device = NULL;
  char *dir2 = tf_temp_dir("capture");
  no_device = capture_start(dir2, &off);
  assert_int_equal(cs_capture_write_device(no_device, &meta, bytes, 16, NULL, msg, sizeof msg), CS_E_UNSUPPORTED);
  assert_non_null(strstr(msg, "device_copies_max"));
  cs_capture_free(no_device);
  tf_remove_tree(dir2);
  assert_int_equal(cs_capture_flush(NULL, CS_NEVER, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_capture_close(NULL, CS_NEVER, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_capture_remove_pack(cap, NULL, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 1);
  assert_int_equal(stats.records_dropped, 0);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

/* ---- Round trips and sealing ---- */

static void test_round_trip_and_count_sealing(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  /* 10 records of 4 per pack: 2 packs sealed by count, the rest by the flush. */
  for (uint32_t i = 0; i < 10; i++) write_ok(cap, "rt", i, 100 + i * 37);
  char msg[256];
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  size_t count = 0;
  assert_int_equal(cs_capture_list(cap, NULL, 0, &count), CS_E_OK);
  assert_int_equal(count, 3);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 10);
  assert_int_equal(stats.packs_sealed, 3);
  assert_int_equal(stats.sink.packs_sealed, 3);
  assert_int_equal(stats.sink.spool_packs, 3);
  assert_int_equal(stats.sink.spool_bytes, stats.bytes_sealed);
  readback r = read_all(dir);
  assert_int_equal(r.count, 10);
  /* Capture order: records in pack-id order, then index order, are rt-0 .. rt-9. */
  for (uint32_t i = 0; i < 10; i++) {
    char id[32];
    snprintf(id, sizeof id, "rt-%u", i);
    assert_string_equal(r.records[i].id, id);
    assert_int_equal(r.records[i].length, 100 + i * 37);
  }
  assert_int_equal(r.records[4].pack_order, 1);
  assert_int_equal(r.records[9].pack_order, 2);
  readback_free(&r);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_free(cap);
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  tf_remove_tree(dir);
}

static void test_dtypes_round_trip(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  static const cs_dtype dtypes[] = {CS_DTYPE_FLOAT32, CS_DTYPE_BFLOAT16, CS_DTYPE_FLOAT16, CS_DTYPE_INT64};
  for (uint32_t i = 0; i < 4; i++) {
    char id[32];
    snprintf(id, sizeof id, "dt-%u", i);
    uint32_t elems = 1000 + i;
    uint32_t len = elems * cs_dtype_item_size(dtypes[i]);
    cs_pack_meta meta = tp_meta(id, elems);
    meta.dtype = dtypes[i];
    meta.rank = 2;
    meta.shape[0] = 1;
    meta.shape[1] = elems;
    meta.step_number = i;
    uint8_t *bytes = malloc(len);
    fill_payload(bytes, len, i);
    char msg[256];
    assert_int_equal(cs_capture_write(cap, &meta, bytes, len, msg, sizeof msg), CS_E_OK);
    free(bytes);
  }
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), NULL, 0), CS_E_OK);
  cs_capture_free(cap);
  readback r = read_all(dir);
  assert_int_equal(r.count, 4);
  readback_free(&r);
  tf_remove_tree(dir);
}

static void test_linger_seals_without_flush(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.sink.linger_ns = 20 * MS;
  cs_capture *cap = capture_start(dir, &cfg);
  write_ok(cap, "lg", 1, 10);
  size_t count = 0;
  for (int i = 0; i < 200 && count == 0; i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(cs_capture_list(cap, NULL, 0, &count), CS_E_OK);
  }
  assert_int_equal(count, 1);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 1);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

static void test_flush_close_ordering(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  char msg[256];
  /* A flush with nothing open answers at once. */
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  write_ok(cap, "fc", 1, 10);
  /* Flush: every record before it is in a sealed pack when it returns. */
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  size_t count = 0;
  assert_int_equal(cs_capture_list(cap, NULL, 0, &count), CS_E_OK);
  assert_int_equal(count, 1);
  write_ok(cap, "fc", 2, 10);
  write_ok(cap, "fc", 3, 10);
  /* Close seals the rest, then refuses records and flushes. */
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  assert_int_equal(cs_capture_list(cap, NULL, 0, &count), CS_E_OK);
  assert_int_equal(count, 2);
  assert_int_equal(write_record(cap, "fc", 4, 10, msg, sizeof msg), CS_E_CLOSED);
  assert_non_null(strstr(msg, "closed"));
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_CLOSED);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 3);
  assert_int_equal(stats.sink.refused_closed, 0); /* refused before the core: close_started */
  cs_capture_free(cap);
  readback r = read_all(dir);
  assert_int_equal(r.count, 3);
  readback_free(&r);
  tf_remove_tree(dir);
}

/* ---- Several capturing threads ---- */

typedef struct producer {
  cs_capture *cap;
  uint32_t thread;
  uint32_t records;
  uint32_t length;
  const uint32_t *sizes; /* when set: record i is sizes[i % sizes_count] bytes */
  uint32_t sizes_count;
  int failures;
} producer;

static void *producer_main(void *context) {
  producer *p = context;
  for (uint32_t i = 0; i < p->records; i++) {
    char id[64];
    snprintf(id, sizeof id, "t%u-%u", p->thread, i);
    uint32_t seed = p->thread * 100000 + i;
    uint32_t len = p->sizes != NULL ? p->sizes[(i + p->thread) % p->sizes_count] : p->length + (i % 7) * 64;
    cs_pack_meta meta = tp_meta(id, len);
    meta.step_number = seed;
    meta.sequence_id = cs_pack_text_of(id);
    uint8_t *bytes = malloc(len);
    fill_payload(bytes, len, seed);
    char why[256];
    if (cs_capture_write(p->cap, &meta, bytes, len, why, sizeof why) != CS_E_OK) {
      print_error("%s: %s\n", id, why);
      p->failures++;
    }
    free(bytes);
  }
  return NULL;
}

/* Runs THREADS producers of records_each records on cfg, with flushes racing them; checks the read-back. */
static void run_threads(const cs_capture_config *cfg, uint32_t records_each, uint32_t length,
                        const uint32_t *sizes, uint32_t sizes_count) {
  char *dir = tf_temp_dir("capture");
  cs_capture *cap = capture_start(dir, cfg);
  enum { THREADS = 4 };
  producer producers[THREADS];
  pthread_t threads[THREADS];
  for (uint32_t t = 0; t < THREADS; t++) {
    producers[t] = (producer){.cap = cap, .thread = t, .records = records_each, .length = length + t * 3000,
                              .sizes = sizes, .sizes_count = sizes_count};
    assert_int_equal(pthread_create(&threads[t], NULL, producer_main, &producers[t]), 0);
  }
  /* Flushes race with the producers (checked after the join: a failed check must not leave them running). */
  int flush_rc[5];
  char msg[256];
  for (int i = 0; i < 5; i++) flush_rc[i] = cs_capture_flush(cap, DEADLINE(30000), msg, sizeof msg);
  for (uint32_t t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  for (int i = 0; i < 5; i++) {
    if (flush_rc[i] != CS_E_OK) fail_msg("flush %d: %s: %s", i, cs_strerror(flush_rc[i]), msg);
  }
  for (uint32_t t = 0; t < THREADS; t++) assert_int_equal(producers[t].failures, 0);
  assert_int_equal(cs_capture_close(cap, DEADLINE(30000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, THREADS * records_each);
  assert_int_equal(stats.records_dropped, 0);
  assert_int_equal(stats.staging_used_bytes, 0); /* every entry released */
  cs_capture_free(cap);
  readback r = read_all(dir);
  assert_int_equal(r.count, THREADS * records_each);
  /* Every record once, and each thread's records in its call order. */
  for (uint32_t t = 0; t < THREADS; t++) {
    const seen *previous = NULL;
    for (uint32_t i = 0; i < records_each; i++) {
      char id[64];
      snprintf(id, sizeof id, "t%u-%u", t, i);
      const seen *s = find_seen(&r, id);
      if (s == NULL) fail_msg("record %s is missing", id);
      if (previous != NULL) {
        bool after = s->pack_order > previous->pack_order ||
                     (s->pack_order == previous->pack_order && s->record_index > previous->record_index);
        if (!after) fail_msg("record %s is before its predecessor", id);
      }
      previous = s;
    }
  }
  readback_free(&r);
  tf_remove_tree(dir);
}

static void test_many_threads(void **state) {
  (void)state;
  cs_capture_config cfg = small_config(CS_FULL_BLOCK);
  cfg.sink.pack_records_max = 50;
  cfg.sink.pack_bytes_max = 256 * 1024;
  cfg.sink.block_max_ns = 30 * CS_SEC_NS;
  cfg.staging_bytes = 1024 * 1024; /* small: producers wait for the worker now and then */
  cfg.record_bytes_max = 64 * 1024;
  run_threads(&cfg, 400, 1000, NULL, 0);
}

/*
 * Large payloads are written from the staging ring (RT_IO_REF) between
 * chunk bytes (padding, small records): a small ring wraps often, and the
 * producers wait for entries the writer still holds. Sizes straddle the
 * reference threshold and the 64-byte padding. Both spool modes.
 */
static const uint32_t mixed_sizes[] = {100, 4099, RT_REF_BYTES_MIN - 1, RT_REF_BYTES_MIN,
                                       300 * 1024 + 5, 1024 * 1024, 1024 * 1024 - 1, 64 * 1024 + 1};

static void mixed_sizes_run(bool direct_io) {
  cs_capture_config cfg = small_config(CS_FULL_BLOCK);
  cfg.sink.pack_records_max = 50;
  cfg.sink.pack_bytes_max = 3 * 1024 * 1024;
  cfg.sink.block_max_ns = 30 * CS_SEC_NS;
  cfg.staging_bytes = 4 * 1024 * 1024 + 4096; /* a few large records: wraps and waits */
  cfg.record_bytes_max = 1024 * 1024;
  cfg.sink.spool_bytes_max = 1024 * 1024 * 1024; /* about 60 MB is written, and nothing removes it */
  cfg.direct_io = direct_io;
  run_threads(&cfg, 40, 0, mixed_sizes, sizeof mixed_sizes / sizeof mixed_sizes[0]);
}

static void test_large_records_from_the_ring(void **state) {
  (void)state;
  mixed_sizes_run(false);
}

static void test_large_records_direct_io(void **state) {
  (void)state;
  mixed_sizes_run(true);
}

/* ---- A full spool ---- */

static void test_full_spool_refuse(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.sink.spool_packs_max = 3;
  cs_capture *cap = capture_start(dir, &cfg);
  char msg[256];
  uint32_t accepted = 0;
  int rc = CS_E_OK;
  for (uint32_t i = 0; i < 100 && rc == CS_E_OK; i++) {
    rc = write_record(cap, "fr", i, 100, msg, sizeof msg);
    if (rc == CS_E_OK) accepted++;
  }
  assert_int_equal(rc, CS_E_SPOOL_FULL);
  assert_non_null(strstr(msg, "spool quota full"));
  assert_non_null(strstr(msg, "CS_FULL_REFUSE"));
  assert_int_equal(accepted, 12); /* 3 packs of 4 records */
  /* Refused at once, counted, and nothing admitted is lost. */
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.sink.refused_full, 1);
  assert_int_equal(stats.records_written, accepted);
  /* A removal (hand-off) makes room again. */
  cs_spool_entry entries[4];
  size_t count = 0;
  assert_int_equal(cs_capture_list(cap, entries, 4, &count), CS_E_OK);
  assert_int_equal(count, 3);
  assert_int_equal(cs_capture_remove_pack(cap, &entries[0].pack_id, msg, sizeof msg), CS_E_OK);
  /* Its bytes come back to the quota, not only its place (a removal once returned 0 bytes). */
  cs_capture_stats after;
  cs_capture_stats_get(cap, &after);
  assert_int_equal(after.sink.spool_packs, stats.sink.spool_packs - 1);
  assert_int_equal(after.sink.spool_bytes, stats.sink.spool_bytes - entries[0].size_bytes);
  assert_true(entries[0].size_bytes > 0);
  assert_int_equal(cs_capture_quarantine_pack(cap, &entries[1].pack_id, "test", msg, sizeof msg), CS_E_OK);
  cs_capture_stats_get(cap, &after);
  assert_int_equal(after.sink.spool_bytes, stats.sink.spool_bytes - entries[0].size_bytes - entries[1].size_bytes);
  assert_int_equal(cs_capture_remove_pack(cap, &entries[0].pack_id, msg, sizeof msg), CS_E_NOT_FOUND);
  assert_non_null(strstr(msg, "not in the spool"));
  write_ok(cap, "fr", 1000, 100);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

typedef struct remover {
  cs_capture *cap;
  uint64_t delay_ms;
} remover;

static void *remover_main(void *context) {
  remover *r = context;
  struct timespec ts = {(time_t)(r->delay_ms / 1000), (long)(r->delay_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  cs_spool_entry entries[8];
  size_t count = 0;
  assert_int_equal(cs_capture_list(r->cap, entries, 8, &count), CS_E_OK);
  assert_true(count > 0);
  assert_int_equal(cs_capture_remove_pack(r->cap, &entries[0].pack_id, NULL, 0), CS_E_OK);
  return NULL;
}

static void test_full_spool_block(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_BLOCK);
  cfg.sink.spool_packs_max = 2;
  /* Long enough that the remover below, 40 ms in, comes in time on a loaded machine (2 cores, ctest -j2). */
  cfg.sink.block_max_ns = 1000 * MS;
  cs_capture *cap = capture_start(dir, &cfg);
  char msg[256];
  for (uint32_t i = 0; i < 8; i++) write_ok(cap, "fb", i, 100);
  /* The quota is full: the producer waits block_max_ns, then is refused. */
  uint64_t start = cs_capture_clock_ns();
  assert_int_equal(write_record(cap, "fb", 8, 100, msg, sizeof msg), CS_E_SPOOL_FULL);
  uint64_t waited = cs_capture_clock_ns() - start;
  assert_true(waited >= 1000 * MS);
  assert_true(waited < 6 * CS_SEC_NS);
  assert_non_null(strstr(msg, "CS_FULL_BLOCK"));
  /* A removal while a producer waits lets it in before its time runs out. */
  remover r = {.cap = cap, .delay_ms = 40};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, remover_main, &r), 0);
  start = cs_capture_clock_ns();
  write_ok(cap, "fb", 9, 100);
  waited = cs_capture_clock_ns() - start;
  pthread_join(thread, NULL);
  assert_true(waited >= 20 * MS);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.spool_waits, 2);
  assert_int_equal(stats.sink.refused_full, 1);
  assert_true(stats.sink.would_block >= 2);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 9);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

/* ---- Faults: slow and failing fsync ---- */

static _Atomic int fsync_mode; /* 0 real, 1 fail, 2 slow (200 ms) */

static int test_fsync(int fd) {
  int mode = fsync_mode;
  if (mode == 1) {
    errno = EIO;
    return -1;
  }
  if (mode == 2) {
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return fsync(fd);
}

static _Atomic int write_slow_ms; /* every write(2) of the spool takes this long */
static _Atomic int write_gate_closed; /* while set, every write(2) of the spool waits */

static ssize_t test_write(int fd, const void *bytes, size_t length) {
  while (write_gate_closed) {
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  int ms = write_slow_ms;
  if (ms > 0) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return write(fd, bytes, length);
}

static _Atomic int open_temp_fails; /* the next openat of a pack's temp file fails with EIO */

static int test_openat(int dirfd, const char *path, int flags, mode_t mode) {
  size_t n = strlen(path);
  if (n > 5 && strcmp(path + n - 5, ".open") == 0 && atomic_exchange(&open_temp_fails, 0)) {
    errno = EIO;
    return -1;
  }
  return cs_spool_sys_posix()->openat(dirfd, path, flags, mode);
}

static cs_spool_sys fault_sys(void) {
  cs_spool_sys sys = *cs_spool_sys_posix();
  sys.fsync = test_fsync;
  sys.write = test_write;
  sys.openat = test_openat;
  return sys;
}

static void test_seal_failure_reported(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_spool_sys sys = fault_sys();
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.spool_sys = &sys;
  fsync_mode = 0;
  cs_capture *cap = capture_start(dir, &cfg);
  write_ok(cap, "sf", 1, 100);
  fsync_mode = 1;
  char msg[256];
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_IO);
  if (strstr(msg, "fsync") == NULL) fail_msg("message: %s", msg);
  /* Reported once: the next flush is clean. */
  fsync_mode = 0;
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  write_ok(cap, "sf", 2, 100);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_dropped, 1);
  assert_int_equal(stats.records_written, 1);
  assert_int_equal(stats.sink.seal_errors, 1);
  assert_int_equal(stats.sink.spool_packs, 1); /* the failed pack's quota came back */
  cs_capture_free(cap);
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  assert_int_equal(tf_count_suffix(dir, ".ready"), 1);
  /* The pack sealed after the failed one is whole (with hash_thread: its digest started afresh). */
  readback r = read_all(dir);
  assert_int_equal(r.count, 1);
  assert_non_null(find_seen(&r, "sf-2"));
  readback_free(&r);
  tf_remove_tree(dir);
}

typedef struct flush_call {
  cs_capture *cap;
  int rc;
  char msg[256];
  _Atomic bool done;
} flush_call;

static void *flush_main(void *context) {
  flush_call *f = context;
  f->rc = cs_capture_flush(f->cap, DEADLINE(10000), f->msg, sizeof f->msg);
  f->done = true;
  return NULL;
}

/*
 * One failure, one report: while a flush waits for pack 1's slow fsync, the
 * next record's pack cannot create its temp file. The waiting flush reports
 * that (it is the first error since the last report); the failed pack's
 * seal, which reaches the core later, is not reported again by the next.
 */
static void test_failure_reported_once(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_spool_sys sys = fault_sys();
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.spool_sys = &sys;
  cs_capture *cap = capture_start(dir, &cfg);
  write_ok(cap, "once", 1, 100);
  fsync_mode = 2; /* 200 ms */
  flush_call z = {.cap = cap};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, flush_main, &z), 0);
  /* Once the flush waits, its boundary is pack 1 (set under the mutex before it waits). */
  for (bool waiting = false; !waiting;) {
    if (z.done) fail_msg("the flush ended before pack 2 could be captured during it: %s", z.msg);
    struct timespec pause = {0, 1000 * 1000};
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&cap->mutex);
    waiting = cap->flush_waiting_id != 0;
    pthread_mutex_unlock(&cap->mutex);
  }
  open_temp_fails = 1;
  write_ok(cap, "once", 2, 100); /* admitted; its pack's temp file fails */
  assert_int_equal(pthread_join(thread, NULL), 0);
  fsync_mode = 0;
  assert_int_equal(z.rc, CS_E_IO);
  if (strstr(z.msg, "temp file") == NULL) fail_msg("message: %s", z.msg);
  char msg[256];
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 1);
  assert_int_equal(stats.records_dropped, 1);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

/*
 * References up to their bound: back-to-back payloads of exactly
 * RT_REF_BYTES_MIN (a multiple of 64: no padding, so no chunk between them)
 * and a disk that takes no write until the producer is done: the worker
 * stops at RT_REFS_MAX references in flight (never more), waits for the
 * writer, and every record still comes back.
 */
static void test_references_at_their_bound(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_BLOCK);
  cfg.direct_io = false;
  cfg.sink.pack_records_max = 1000;
  cfg.sink.pack_bytes_max = 64 * 1024 * 1024;
  cfg.sink.spool_bytes_max = 1024 * 1024 * 1024;
  cfg.sink.block_max_ns = 30 * CS_SEC_NS;
  cfg.staging_bytes = 64 * 1024 * 1024;
  cfg.record_bytes_max = RT_REF_BYTES_MIN;
  cs_spool_sys sys = fault_sys();
  cfg.spool_sys = &sys;
  cs_capture *cap = capture_start(dir, &cfg);
  write_gate_closed = 1;
  enum { RECORDS = 3 * RT_REFS_MAX };
  for (uint32_t i = 0; i < RECORDS; i++) write_ok(cap, "ref", i, (uint32_t)RT_REF_BYTES_MIN);
  uint32_t pending = 0;
  for (int waited_ms = 0; waited_ms < 20000 && pending < RT_REFS_MAX; waited_ms++) {
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&cap->mutex);
    pending = cap->refs_pending;
    pthread_mutex_unlock(&cap->mutex);
  }
  write_slow_ms = 1;
  write_gate_closed = 0;
  assert_int_equal(pending, RT_REFS_MAX);
  char msg[256];
  int rc = cs_capture_close(cap, DEADLINE(60000), msg, sizeof msg);
  write_slow_ms = 0;
  assert_int_equal(rc, CS_E_OK);
  assert_int_equal(cap->refs_peak, RT_REFS_MAX);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, RECORDS);
  assert_int_equal(stats.staging_used_bytes, 0);
  cs_capture_free(cap);
  readback r = read_all(dir);
  assert_int_equal(r.count, RECORDS);
  for (uint32_t i = 0; i < RECORDS; i++) {
    char id[64];
    snprintf(id, sizeof id, "ref-%u", i);
    if (find_seen(&r, id) == NULL) fail_msg("record %s is missing", id);
  }
  readback_free(&r);
  tf_remove_tree(dir);
}

/* ---- A full file system (a real tmpfs) ---- */

/*
 * A small tmpfs mounted on a fresh directory (root only). Where mounting is
 * not allowed the test is skipped, unless CAPSTORE_REQUIRE_TMPFS is set
 * (CI runs as root and sets it: there a skip would hide the test).
 */
static char *tmpfs_dir(const char *size) {
  char *dir = tf_temp_dir("fullfs");
  char options[64];
  snprintf(options, sizeof options, "size=%s,mode=0700", size);
  if (mount("tmpfs", dir, "tmpfs", 0, options) != 0) {
    int saved = errno;
    tf_remove_tree(dir);
    if (getenv("CAPSTORE_REQUIRE_TMPFS") != NULL) fail_msg("mount tmpfs: %s", strerror(saved));
    return NULL;
  }
  return dir;
}

static void tmpfs_release(char *dir) {
  assert_int_equal(umount2(dir, MNT_DETACH), 0);
  tf_remove_tree(dir);
}

/* Fills the file system of dir with a file until ENOSPC; returns its path. */
static char *hog_fill(const char *dir) {
  char *path = malloc(strlen(dir) + 16);
  sprintf(path, "%s/hog", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  static uint8_t block[4096];
  while (write(fd, block, sizeof block) > 0) {
  }
  assert_int_equal(errno, ENOSPC);
  close(fd);
  return path;
}

typedef struct hog_release {
  char *path;
  int after_ms;
} hog_release;

static void *hog_release_main(void *context) {
  hog_release *h = context;
  struct timespec ts = {h->after_ms / 1000, (long)(h->after_ms % 1000) * 1000 * 1000};
  nanosleep(&ts, NULL);
  assert_int_equal(unlink(h->path), 0);
  return NULL;
}

/*
 * A pack is being written when another file takes the file system's last
 * byte. Every record the sink admitted must still reach a sealed pack, whole:
 * the writer waits for room (disk_full_waits) with the bytes kept, producers
 * meanwhile are refused (CS_FULL_REFUSE), and once the other file goes the
 * pack is finished. Without the reservation the pack's writes met ENOSPC and
 * its records were lost.
 */
static void test_full_disk_loses_no_admitted_record(void **state) {
  (void)state;
  char *dir = tmpfs_dir("24m");
  if (dir == NULL) skip();
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.sink.pack_records_max = 10000;
  cfg.sink.pack_bytes_max = 64 * 1024 * 1024; /* one pack, sealed by the flush */
  cfg.sink.spool_bytes_max = 256 * 1024 * 1024;
  cfg.sink.linger_ns = 60 * CS_SEC_NS;
  cfg.staging_bytes = 32 * 1024 * 1024;
  cs_capture *cap = capture_start(dir, &cfg);
  uint32_t admitted = 0, refused = 0;
  for (; admitted < 4; admitted++) write_ok(cap, "full", admitted, 64 * 1024);
  /* Let the writer take those (its first reservation reaches a step ahead), then fill the disk. */
  struct timespec pause = {0, 200 * 1000 * 1000};
  nanosleep(&pause, NULL);
  char *hog = hog_fill(dir);
  pthread_t thread;
  hog_release release = {.path = hog, .after_ms = 1500};
  assert_int_equal(pthread_create(&thread, NULL, hog_release_main, &release), 0);
  /* 8 MiB more than any step ahead: the writer must wait for room. */
  char msg[256];
  for (uint32_t n = 4; n < 4 + 160; n++) {
    int rc = write_record(cap, "full", n, 64 * 1024, msg, sizeof msg);
    if (rc == CS_E_OK) {
      admitted++;
      continue;
    }
    if (rc != CS_E_SPOOL_FULL && rc != CS_E_FULL) fail_msg("write full-%u: %s: %s", n, cs_strerror(rc), msg);
    if (rc == CS_E_SPOOL_FULL && strstr(msg, "file system full") == NULL) fail_msg("message: %s", msg);
    refused++;
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    n--; /* the same record again: the numbers stay dense */
    if (refused > 100000) fail_msg("refused for ever");
  }
  assert_int_equal(pthread_join(thread, NULL), 0);
  int rc = cs_capture_flush(cap, DEADLINE(30000), msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("flush: %s: %s", cs_strerror(rc), msg);
  assert_int_equal(cs_capture_close(cap, DEADLINE(30000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_true(stats.disk_full_waits >= 1);
  assert_true(refused >= 1);
  assert_int_equal(stats.records_dropped, 0);
  assert_int_equal(stats.records_written, admitted);
  cs_capture_free(cap);
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  readback r = read_all(dir);
  assert_int_equal(r.count, admitted);
  for (uint32_t i = 0; i < admitted; i++) {
    char id[32];
    snprintf(id, sizeof id, "full-%u", i);
    if (find_seen(&r, id) == NULL) fail_msg("record %s is missing", id);
  }
  readback_free(&r);
  free(hog);
  tmpfs_release(dir);
}

/*
 * The disk stays full: close with a deadline times out (the writer waits
 * for room), and free returns anyway, dropping what it could not write
 * and leaving no temp file behind.
 */
static void test_free_on_a_disk_that_stays_full(void **state) {
  (void)state;
  char *dir = tmpfs_dir("8m");
  if (dir == NULL) skip();
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.sink.pack_records_max = 10000;
  cfg.sink.pack_bytes_max = 64 * 1024 * 1024;
  cfg.sink.linger_ns = 60 * CS_SEC_NS;
  cfg.staging_bytes = 32 * 1024 * 1024;
  cs_capture *cap = capture_start(dir, &cfg);
  char *hog = hog_fill(dir);
  uint32_t admitted = 0;
  char msg[256];
  for (uint32_t n = 0; n < 8 && write_record(cap, "stuck", n, 64 * 1024, msg, sizeof msg) == CS_E_OK; n++) admitted++;
  assert_true(admitted >= 1);
  assert_int_equal(cs_capture_close(cap, DEADLINE(500), msg, sizeof msg), CS_E_TIMEOUT);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 0);
  cs_capture_free(cap);
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  assert_int_equal(tf_count_suffix(dir, ".ready"), 0);
  assert_int_equal(unlink(hog), 0);
  free(hog);
  tmpfs_release(dir);
}

/* ENOSPC where a pack's name is made: the next n creates of a temp file, the next n links of a ready name. */
static _Atomic int create_enospc, link_enospc;

static int room_openat(int dirfd, const char *path, int flags, mode_t mode) {
  size_t n = strlen(path);
  if ((flags & O_CREAT) && n > 5 && strcmp(path + n - 5, ".open") == 0 && atomic_load(&create_enospc) > 0) {
    atomic_fetch_sub(&create_enospc, 1);
    errno = ENOSPC;
    return -1;
  }
  return cs_spool_sys_posix()->openat(dirfd, path, flags, mode);
}

static int room_linkat(int from_dir, const char *from, int to_dir, const char *to, int flags) {
  if (atomic_load(&link_enospc) > 0) {
    atomic_fetch_sub(&link_enospc, 1);
    errno = ENOSPC;
    return -1;
  }
  return cs_spool_sys_posix()->linkat(from_dir, from, to_dir, to, flags);
}

/*
 * A full directory (no inode, no block for a new name) when a pack's temp
 * file is created and when its ready name is linked: both are waited out,
 * the pack is sealed whole, no record is dropped.
 */
static void test_no_room_for_names(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_spool_sys sys = *cs_spool_sys_posix();
  sys.openat = room_openat;
  sys.linkat = room_linkat;
  cs_capture_config cfg = small_config(CS_FULL_BLOCK);
  cfg.sink.block_max_ns = 10 * CS_SEC_NS;
  cfg.spool_sys = &sys;
  cs_capture *cap = capture_start(dir, &cfg);
  atomic_store(&create_enospc, 3);
  atomic_store(&link_enospc, 3);
  for (uint32_t i = 0; i < 8; i++) write_ok(cap, "names", i, 1000);
  char msg[256];
  int rc = cs_capture_close(cap, DEADLINE(20000), msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("close: %s: %s", cs_strerror(rc), msg);
  assert_int_equal(atomic_load(&create_enospc), 0);
  assert_int_equal(atomic_load(&link_enospc), 0);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_dropped, 0);
  assert_int_equal(stats.records_written, 8);
  assert_true(stats.disk_full_waits >= 2);
  cs_capture_free(cap);
  readback r = read_all(dir);
  assert_int_equal(r.count, 8);
  readback_free(&r);
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  tf_remove_tree(dir);
}

/*
 * ext4 keeps the blocks of a fallocate that failed for room, and frees
 * reserved blocks past a file's end only on a truncate: on a small ext4
 * with 3 MiB free, packs of up to 2 MiB are written and sealed, no record
 * is dropped, and no ready file holds more blocks than its bytes need.
 * Skipped where no loop device can be mounted (unless CAPSTORE_REQUIRE_TMPFS).
 */
static void test_full_ext4_gives_room_back(void **state) {
  (void)state;
  char *dir = tf_temp_dir("ext4");
  char image[700], cmd[2200];
  snprintf(image, sizeof image, "%s.img", dir);
  snprintf(cmd, sizeof cmd, "truncate -s 24M '%s' && mkfs.ext4 -q -F '%s' >/dev/null 2>&1 && mount -o loop '%s' '%s'",
           image, image, image, dir);
  if (system(cmd) != 0) {
    unlink(image);
    tf_remove_tree(dir);
    if (getenv("CAPSTORE_REQUIRE_TMPFS") != NULL) fail_msg("could not mount an ext4 loop image: %s", cmd);
    skip();
  }
  char spool[800];
  snprintf(spool, sizeof spool, "%s/spool", dir);
  /* Leave 3 MiB free. */
  snprintf(cmd, sizeof cmd, "avail=$(df --output=avail -B1 '%s' | tail -1); fallocate -l $((avail - 3*1024*1024)) '%s/hog'",
           dir, dir);
  assert_int_equal(system(cmd), 0);
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.sink.pack_records_max = 10000;
  cfg.sink.pack_bytes_max = 2 * 1024 * 1024;
  cfg.sink.linger_ns = 100 * MS;
  cfg.staging_bytes = 16 * 1024 * 1024;
  cs_capture *cap = capture_start(spool, &cfg);
  uint32_t admitted = 0;
  char msg[256];
  cs_capture_stats stats0;
  for (uint32_t n = 0; n < 30; n++) {
    if (write_record(cap, "e4", n, 64 * 1024, msg, sizeof msg) == CS_E_OK) admitted++;
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  }
  int rc = cs_capture_close(cap, DEADLINE(10000), msg, sizeof msg);
  if (rc != CS_E_OK) {
    cs_capture_stats_get(cap, &stats0);
    snprintf(cmd, sizeof cmd, "df -B1 '%s'; ls -ls '%s' '%s'", dir, dir, spool);
    (void)system(cmd);
    fail_msg("close: %s: %s (admitted %u, disk_full_waits %llu, sealed %llu, disk full: %s)", cs_strerror(rc), msg,
             admitted, (unsigned long long)stats0.disk_full_waits, (unsigned long long)stats0.packs_sealed,
             cap->disk_full ? cap->disk_full_msg : "no");
  }
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_dropped, 0);
  assert_int_equal(stats.records_written, admitted);
  cs_capture_free(cap);
  size_t count = 0;
  cs_spool_entry *entries = ready_entries(spool, &count);
  for (size_t i = 0; i < count; i++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", spool, entries[i].name);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    uint64_t need = ((uint64_t)st.st_size + 4095) / 4096 * 4096;
    if ((uint64_t)st.st_blocks * 512 > need + 4096)
      fail_msg("%s: %llu bytes allocated for %llu bytes", entries[i].name, (unsigned long long)st.st_blocks * 512,
               (unsigned long long)st.st_size);
  }
  free(entries);
  readback r = read_all(spool);
  assert_int_equal(r.count, admitted);
  readback_free(&r);
  snprintf(cmd, sizeof cmd, "umount '%s'", dir);
  assert_int_equal(system(cmd), 0);
  unlink(image);
  tf_remove_tree(dir);
}

static void test_staging_full(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_spool_sys sys = fault_sys();
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.spool_sys = &sys;
  cfg.sink.pack_records_max = 1000;
  cfg.staging_bytes = 1024 * 1024;
  cfg.record_bytes_max = 200 * 1024;
  cfg.sink.pack_bytes_max = 32 * 1024 * 1024;
  fsync_mode = 0;
  cs_capture *cap = capture_start(dir, &cfg);
  write_slow_ms = 300; /* the worker's writes take 300 ms each: it falls behind */
  char msg[256];
  int rc = CS_E_OK;
  uint32_t accepted = 0;
  for (uint32_t i = 0; i < 50 && rc == CS_E_OK; i++) {
    rc = write_record(cap, "sg", i, 150 * 1024, msg, sizeof msg);
    if (rc == CS_E_OK) accepted++;
  }
  assert_int_equal(rc, CS_E_FULL);
  assert_non_null(strstr(msg, "staging area full"));
  assert_true(accepted >= 4);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.staging_refused, 1);
  assert_int_equal(stats.sink.refused_full, 0); /* the quota was never the limit */
  write_slow_ms = 0;
  assert_int_equal(cs_capture_close(cap, DEADLINE(30000), msg, sizeof msg), CS_E_OK);
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, accepted);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

/*
 * Seals slower than the captures: with one record per pack and every fsync
 * taking 200 ms, CS_SINK_SEALS_MAX packs are soon sealing. The next record
 * is refused with CS_E_FULL naming the sealing (not CS_E_SPOOL_FULL: the
 * quota is nowhere near); under the block policy it waits for a seal slot
 * and is admitted. Every admitted record comes back.
 */
static void test_sealing_behind(void **state) {
  (void)state;
  for (int policy = CS_FULL_REFUSE; policy >= CS_FULL_BLOCK; policy--) {
    char *dir = tf_temp_dir("capture");
    cs_spool_sys sys = fault_sys();
    cs_capture_config cfg = small_config((cs_full_policy)policy);
    cfg.spool_sys = &sys;
    cfg.sink.pack_records_max = 1;
    cfg.sink.block_max_ns = 30 * CS_SEC_NS;
    fsync_mode = 2;
    cs_capture *cap = capture_start(dir, &cfg);
    char msg[256];
    int rc = CS_E_OK;
    uint32_t accepted = 0;
    for (uint32_t i = 0; i < 2 * CS_SINK_SEALS_MAX + 2 && rc == CS_E_OK; i++) {
      rc = write_record(cap, "sb", i, 100, msg, sizeof msg);
      if (rc == CS_E_OK) accepted++;
    }
    cs_capture_stats stats;
    cs_capture_stats_get(cap, &stats);
    if (policy == CS_FULL_REFUSE) {
      assert_int_equal(rc, CS_E_FULL);
      if (strstr(msg, "sealing is behind") == NULL) fail_msg("message: %s", msg);
      assert_true(accepted >= CS_SINK_SEALS_MAX);
      assert_int_equal(stats.sink.refused_sealing, 1);
      assert_int_equal(stats.staging_refused, 0);
    } else {
      assert_int_equal(rc, CS_E_OK);
      assert_true(stats.spool_waits >= 1); /* it waited for a seal slot */
    }
    assert_int_equal(stats.sink.refused_full, 0); /* the quota was never the limit */
    fsync_mode = 0;
    assert_int_equal(cs_capture_close(cap, DEADLINE(30000), msg, sizeof msg), CS_E_OK);
    cs_capture_stats_get(cap, &stats);
    assert_int_equal(stats.records_written, accepted);
    cs_capture_free(cap);
    readback r = read_all(dir);
    assert_int_equal(r.count, accepted);
    readback_free(&r);
    tf_remove_tree(dir);
  }
}

/* Only an admitted record fixes the sink's tenant, session and rank. */
static void test_refused_record_fixes_no_key(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.device_copies_max = 0;
  cs_capture *cap = capture_start(dir, &cfg);
  write_ok(cap, "old", 1, 16); /* one sealed pack in the spool */
  char msg[256];
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_free(cap);
  cfg.sink.spool_packs_max = 1; /* full until that pack is removed */
  cap = capture_start(dir, &cfg);
  uint8_t bytes[16] = {0};
  cs_pack_meta wrong = tp_meta("w", 16);
  wrong.tenant_id = cs_pack_text_of("tenant-wrong");
  wrong.producer_rank = 9;
  assert_int_equal(cs_capture_write_device(cap, &wrong, bytes, 16, NULL, msg, sizeof msg), CS_E_UNSUPPORTED);
  assert_int_equal(cs_capture_write(cap, &wrong, bytes, 16, msg, sizeof msg), CS_E_SPOOL_FULL);
  cs_spool_entry entry;
  size_t count = 0;
  assert_int_equal(cs_capture_list(cap, &entry, 1, &count), CS_E_OK);
  assert_int_equal(count, 1);
  assert_int_equal(cs_capture_remove_pack(cap, &entry.pack_id, msg, sizeof msg), CS_E_OK);
  /* Neither refusal fixed the key: the first admitted record does. */
  write_ok(cap, "k", 1, 16);
  assert_int_equal(cs_capture_write(cap, &wrong, bytes, 16, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_string_equal(msg, "tenant_id differs from this sink's first record: one sink writes one tenant, "
                           "session and rank (the object key names them); open another sink");
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_free(cap);
  readback r = read_all(dir);
  assert_int_equal(r.count, 1);
  assert_non_null(find_seen(&r, "k-1"));
  readback_free(&r);
  tf_remove_tree(dir);
}

/*
 * A flush with nothing to do succeeds at once, whatever its deadline (a
 * deadline already passed polls); one with a pack to seal and a passed
 * deadline times out, and a later flush covers it.
 */
static void test_flush_poll(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  char msg[256];
  assert_int_equal(cs_capture_flush(cap, 0, msg, sizeof msg), CS_E_OK); /* nothing captured yet */
  write_ok(cap, "fp", 1, 100);
  assert_int_equal(cs_capture_flush(cap, CS_NEVER, msg, sizeof msg), CS_E_OK);
  assert_int_equal(cs_capture_flush(cap, 0, msg, sizeof msg), CS_E_OK);
  assert_string_equal(msg, "");
  write_ok(cap, "fp", 2, 100);
  /* A pack to seal and a deadline passed: the worker cannot have answered yet. */
  assert_int_equal(cs_capture_flush(cap, 0, msg, sizeof msg), CS_E_TIMEOUT);
  assert_string_equal(msg, "flush deadline passed; sealing goes on");
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  assert_int_equal(tf_count_suffix(dir, ".ready"), 2);
  /*
   * A record the pack writer refuses (a duplicate capture id), then a flush
   * that times out before the worker answers it: the refusal is not lost
   * with that flush's answer; the next flush reports it, once.
   */
  write_ok(cap, "fp", 3, 100);
  write_ok(cap, "fp", 3, 100);
  assert_int_equal(cs_capture_flush(cap, 0, msg, sizeof msg), CS_E_TIMEOUT);
  struct timespec settle = {0, 300 * 1000 * 1000}; /* the worker answers the timed-out flush */
  nanosleep(&settle, NULL);
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  if (strstr(msg, "capture_id") == NULL) fail_msg("message: %s", msg);
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

static void test_refused_record_reported(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  write_ok(cap, "dup", 1, 10);
  write_ok(cap, "dup", 1, 10); /* the same capture id in the same pack */
  write_ok(cap, "dup", 2, 10);
  char msg[256];
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  if (strstr(msg, "capture_id") == NULL) fail_msg("message: %s", msg);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.records_written, 2);
  assert_int_equal(stats.records_dropped, 1);
  cs_capture_free(cap);
  readback r = read_all(dir);
  assert_int_equal(r.count, 2);
  readback_free(&r);
  tf_remove_tree(dir);
}

/* ---- Recovery ---- */

static void test_crash_recovery_torn_open(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  for (uint32_t i = 0; i < 4; i++) write_ok(cap, "cr", i, 500); /* one pack, sealed by count */
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), NULL, 0), CS_E_OK);
  cs_capture_free(cap);
  /* A crash mid-pack: a torn temp file; and a sealed pack whose bytes rotted. */
  char path[1024];
  snprintf(path, sizeof path, "%s/.01890000-0000-7000-8000-000000000001.0011223344556677.open", dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite("DMIPACK\0partial", 1, 15, f);
  fclose(f);
  readback before = read_all(dir);
  assert_int_equal(before.count, 4);
  readback_free(&before);
  cap = capture_start(dir, &cfg);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.recovery.open_removed, 1);
  assert_int_equal(stats.recovery.ready_ok, 1);
  assert_int_equal(stats.recovered_packs, 1);
  assert_true(stats.recovered_bytes > 2000);
  assert_int_equal(stats.sink.spool_packs, 1); /* counted against the quota */
  assert_int_equal(tf_count_suffix(dir, ".open"), 0);
  /* A second sink on the same spool is refused while this one owns it. */
  cs_capture *second = NULL;
  char msg[256];
  assert_int_equal(cs_capture_open(dir, &cfg, &second, msg, sizeof msg), CS_E_BUSY);
  assert_non_null(strstr(msg, "pid"));
  write_ok(cap, "cr", 10, 500);
  cs_capture_free(cap);
  readback after = read_all(dir);
  assert_int_equal(after.count, 5);
  readback_free(&after);
  tf_remove_tree(dir);
}

/* Recovery's faults by name: the openat of one ready pack, the rename of another. */
static char refused_open[CS_SPOOL_NAME_MAX + 1];
static char refused_rename[CS_SPOOL_NAME_MAX + 1];

static int name_fault_openat(int dirfd, const char *path, int flags, mode_t mode) {
  if (refused_open[0] != '\0' && strcmp(path, refused_open) == 0) {
    errno = EACCES; /* another owner's pack, mode 0600 (root would read a mode-0 file) */
    return -1;
  }
  return cs_spool_sys_posix()->openat(dirfd, path, flags, mode);
}

static int name_fault_renameat(int from_dir, const char *from, int to_dir, const char *to) {
  if (refused_rename[0] != '\0' && strcmp(from, refused_rename) == 0) {
    errno = EPERM;
    return -1;
  }
  return cs_spool_sys_posix()->renameat(from_dir, from, to_dir, to);
}

/*
 * One bad file does not stop the sink from starting: a ready pack it cannot
 * open (EACCES) and a corrupt one whose quarantine rename fails are kept
 * where they are, reported in the recovery stats, never handed out, and the
 * sink starts and captures.
 */
static void test_open_keeps_bad_files_and_starts(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cs_capture *cap = capture_start(dir, &cfg);
  for (uint32_t i = 0; i < 12; i++) write_ok(cap, "bad", i, 500); /* three packs, sealed by count */
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), NULL, 0), CS_E_OK);
  cs_capture_free(cap);
  size_t count = 0;
  cs_spool_entry *entries = ready_entries(dir, &count);
  assert_int_equal(count, 3);
  snprintf(refused_open, sizeof refused_open, "%s", entries[0].name);
  snprintf(refused_rename, sizeof refused_rename, "%s", entries[1].name);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, entries[1].name);
  size_t size = 0;
  uint8_t *bytes = read_whole(path, &size);
  bytes[100] ^= 0x40; /* a payload byte of the first record */
  tf_write_file(dir, entries[1].name, bytes, size);
  free(bytes);

  cs_spool_sys sys = *cs_spool_sys_posix();
  sys.openat = name_fault_openat;
  sys.renameat = name_fault_renameat;
  cfg.spool_sys = &sys;
  char msg[256];
  int rc = cs_capture_open(dir, &cfg, &cap, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("the sink did not start: %s: %s", cs_strerror(rc), msg);
  cs_capture_stats stats;
  cs_capture_stats_get(cap, &stats);
  assert_int_equal(stats.recovery.ready_ok, 1);
  assert_int_equal(stats.recovery.quarantined, 0);
  assert_int_equal(stats.recovery.kept, 2);
  assert_int_equal(stats.recovered_packs, 1);
  assert_int_equal(stats.sink.spool_packs, 3); /* the kept packs still take room: counted against the quota */
  /* The caller can read what was kept and why. */
  if (strstr(stats.recovery.problem, "Permission denied") == NULL &&
      strstr(stats.recovery.problem, "not quarantined") == NULL) {
    fail_msg("problem: %s", stats.recovery.problem);
  }
  /* Only the verified pack is handed out. */
  cs_spool_entry listed[4];
  assert_int_equal(cs_capture_list(cap, listed, 4, &count), CS_E_OK);
  assert_int_equal(count, 1);
  assert_string_equal(listed[0].name, entries[2].name);
  /* It captures. */
  for (uint32_t i = 20; i < 24; i++) write_ok(cap, "bad", i, 500);
  assert_int_equal(cs_capture_flush(cap, DEADLINE(5000), msg, sizeof msg), CS_E_OK);
  assert_int_equal(cs_capture_list(cap, listed, 4, &count), CS_E_OK);
  assert_int_equal(count, 2);
  cs_capture_free(cap);
  /* Both bad files are where they were. */
  snprintf(path, sizeof path, "%s/%s", dir, entries[0].name);
  assert_int_equal(access(path, F_OK), 0);
  snprintf(path, sizeof path, "%s/%s", dir, entries[1].name);
  assert_int_equal(access(path, F_OK), 0);
  assert_int_equal(tf_count_suffix(dir, ".quarantined"), 0);
  refused_open[0] = refused_rename[0] = '\0';
  free(entries);
  tf_remove_tree(dir);
}

/* ---- Pack ids ---- */

static void test_uuid7(void **state) {
  (void)state;
  rt_uuid7 gen = {0};
  uint8_t random[10];
  memset(random, 0xff, sizeof random);
  cs_uuid previous;
  memset(&previous, 0, sizeof previous);
  uint64_t t = 1717171717123456789u;
  /* Many ids in one millisecond, then the clock going back: still increasing. */
  for (int i = 0; i < 5000; i++) {
    cs_uuid id;
    rt_uuid7_make(&gen, i < 4000 ? t : t - 5 * CS_SEC_NS, random, &id);
    assert_int_equal(id.bytes[6] >> 4, 7);
    assert_int_equal(id.bytes[8] >> 6, 2);
    assert_true(cs_uuid_compare(&previous, &id) < 0);
    previous = id;
  }
  cs_uuid id;
  rt_uuid7_make(&gen, t + CS_SEC_NS, random, &id);
  uint64_t ms = 0;
  for (int i = 0; i < 6; i++) ms = ms << 8 | id.bytes[i];
  assert_int_equal(ms, (t + CS_SEC_NS) / CS_MS_NS);
  /* The packs of a sink carry increasing v7 ids. */
  char *dir = tf_temp_dir("capture");
  cs_capture_config cfg = small_config(CS_FULL_REFUSE);
  cfg.sink.pack_records_max = 1;
  cs_capture *cap = capture_start(dir, &cfg);
  for (uint32_t i = 0; i < 5; i++) write_ok(cap, "id", i, 10);
  assert_int_equal(cs_capture_close(cap, DEADLINE(5000), NULL, 0), CS_E_OK);
  readback r = read_all(dir);
  assert_int_equal(r.count, 5);
  for (uint32_t i = 0; i < 5; i++) {
    char want[32];
    snprintf(want, sizeof want, "id-%u", i);
    assert_string_equal(r.records[i].id, want); /* pack id order is capture order */
  }
  readback_free(&r);
  cs_spool_entry entries[5];
  size_t count = 0;
  assert_int_equal(cs_capture_list(cap, entries, 5, &count), CS_E_OK);
  for (size_t i = 0; i < count; i++) assert_int_equal(entries[i].pack_id.bytes[6] >> 4, 7);
  cs_capture_free(cap);
  tf_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_refusals),
      cmocka_unit_test(test_write_refusals),
      cmocka_unit_test(test_round_trip_and_count_sealing),
      cmocka_unit_test(test_dtypes_round_trip),
      cmocka_unit_test(test_linger_seals_without_flush),
      cmocka_unit_test(test_flush_close_ordering),
      cmocka_unit_test(test_many_threads),
      cmocka_unit_test(test_large_records_from_the_ring),
      cmocka_unit_test(test_large_records_direct_io),
      cmocka_unit_test(test_full_spool_refuse),
      cmocka_unit_test(test_full_spool_block),
      cmocka_unit_test(test_seal_failure_reported),
      cmocka_unit_test(test_staging_full),
      cmocka_unit_test(test_full_disk_loses_no_admitted_record),
      cmocka_unit_test(test_free_on_a_disk_that_stays_full),
      cmocka_unit_test(test_no_room_for_names),
      cmocka_unit_test(test_full_ext4_gives_room_back),
      cmocka_unit_test(test_failure_reported_once),
      cmocka_unit_test(test_references_at_their_bound),
      cmocka_unit_test(test_sealing_behind),
      cmocka_unit_test(test_refused_record_fixes_no_key),
      cmocka_unit_test(test_flush_poll),
      cmocka_unit_test(test_refused_record_reported),
      cmocka_unit_test(test_crash_recovery_torn_open),
      cmocka_unit_test(test_open_keeps_bad_files_and_starts),
      cmocka_unit_test(test_uuid7),
  };
  g_hash_thread = false;
  int failed = cmocka_run_group_tests_name("capture, hashing on the worker", tests, NULL, NULL);
  g_hash_thread = true;
  failed += cmocka_run_group_tests_name("capture, hashing on a hash thread", tests, NULL, NULL);
  return failed;
}

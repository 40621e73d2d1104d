/*
 * capstore-bench-ingest: the capture sink's ingest rate and capture-call
 * latency, for one record size per run.
 *
 *   saturated phase: one producer captures as fast as it can for --seconds;
 *     the rate counts until close returns (every pack sealed and fsynced);
 *     records/s, GB/s (10^9 bytes) and call p50/p99/max.
 *   paced phase: the producer captures at --pace (a fraction of the
 *     saturated rate) for --seconds while packs are sealed (small packs),
 *     so the call latency is measured off saturation: p50/p99/max.
 *
 * A remover thread hands sealed packs off (removes them) like a publisher,
 * so the spool stays small. Output: one line of key=value pairs.
 * bench/run_ingest.sh runs it beside dd and openssl and prints ratios.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capstore/capture.h"

typedef struct options {
  const char *dir;
  bool page_cache; /* the spool without direct_io */
  int hash_thread; /* -1: the config's defaults; 0 off; 1 on (hash_thread and demote_staging) */
  uint64_t record_bytes;
  double seconds;
  double pace;
  uint64_t pack_bytes;
} options;

typedef struct latencies {
  uint64_t *ns;
  size_t count;
  size_t capacity;
} latencies;

static void lat_add(latencies *l, uint64_t ns) {
  if (l->count == l->capacity) {
    l->capacity = l->capacity == 0 ? 1 << 16 : l->capacity * 2;
    l->ns = realloc(l->ns, l->capacity * sizeof *l->ns);
    if (l->ns == NULL) abort();
  }
  l->ns[l->count++] = ns;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t lat_pct(latencies *l, double pct) {
  if (l->count == 0) return 0;
  size_t at = (size_t)(pct / 100.0 * (double)(l->count - 1) + 0.5);
  return l->ns[at];
}

typedef struct remover {
  cs_capture *cap;
  atomic_bool stop;
} remover;

/* Hands sealed packs off every 20 ms, like a publisher would. */
static void *remover_main(void *context) {
  remover *r = context;
  cs_spool_entry entries[64];
  while (!atomic_load(&r->stop)) {
    size_t count = 0;
    if (cs_capture_list(r->cap, entries, 64, &count) == CS_E_OK) {
      for (size_t i = 0; i < count && i < 64; i++) cs_capture_remove_pack(r->cap, &entries[i].pack_id, NULL, 0);
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static cs_pack_meta bench_meta(char *id, size_t id_size, uint64_t n, uint64_t length) {
  snprintf(id, id_size, "bench-%llu", (unsigned long long)n);
  cs_pack_meta m;
  memset(&m, 0, sizeof m);
  m.capture_id = cs_pack_text_of(id);
  m.tenant_id = cs_pack_text_of("bench");
  m.experiment_id = cs_pack_text_of("ingest");
  m.run_id = cs_pack_text_of("run-1");
  m.session_id = cs_pack_text_of("session-1");
  m.request_id = cs_pack_text_of("request-1");
  m.sequence_id = cs_pack_text_of("sequence-1");
  m.model_id = cs_pack_text_of("model");
  m.model_revision = cs_pack_text_of("rev-1");
  m.adapter_revision = cs_pack_text_of(NULL);
  m.capture_policy_version = cs_pack_text_of("policy-1");
  m.hook_name = cs_pack_text_of("layers.0.mlp");
  m.layer_number = 0;
  m.step_number = n;
  m.token_start = n;
  m.token_end = n + 1;
  m.dtype = CS_DTYPE_FLOAT32;
  m.rank = 2;
  m.shape[0] = 1;
  m.shape[1] = (uint32_t)(length / 4);
  m.captured_at_ns = UINT64_C(1764547200000000000) + n; /* 2025-12-01: the key is dated by it */
  return m;
}

typedef struct phase {
  uint64_t records;
  uint64_t refused;
  double elapsed_s;
  latencies lat;
  latencies copy_lat;    /* paced only: a plain memcpy of the same record, between the calls */
  latencies handoff_lat; /* paced only: the same memcpy into a buffer another thread reads after it */
} phase;

static cs_capture *open_sink(const options *o) {
  cs_capture_config cfg;
  cs_capture_config_default(&cfg);
  cfg.sink.pack_bytes_max = o->pack_bytes;
  cfg.sink.pack_records_max = 100000;
  cfg.sink.full_policy = CS_FULL_BLOCK;
  cfg.sink.block_max_ns = 60 * CS_SEC_NS;
  cfg.staging_bytes = 256ull << 20;
  cfg.record_bytes_max = 16ull << 20;
  cfg.device_copies_max = 0;
  cfg.direct_io = !o->page_cache;
  if (o->hash_thread >= 0) cfg.hash_thread = cfg.demote_staging = o->hash_thread == 1;
  cs_capture *cap = NULL;
  char msg[256];
  if (cs_capture_open(o->dir, &cfg, &cap, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore-bench-ingest: open %s: %s\n", o->dir, msg);
    exit(1);
  }
  return cap;
}

/*
 * The second peer's reader: after each hand-off copy it reads the buffer,
 * as a worker reads a staged record, so the next copy into it must take
 * its lines back from the reader's core: the least any sink that hands the
 * bytes to another thread pays in the call.
 */
typedef struct reader {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  const uint8_t *bytes;
  size_t length;
  uint64_t posted, done;
  bool stop;
  uint64_t sum;
} reader;

static void *reader_main(void *context) {
  reader *r = context;
  pthread_mutex_lock(&r->mutex);
  for (;;) {
    while (r->posted == r->done && !r->stop) pthread_cond_wait(&r->cond, &r->mutex);
    if (r->stop) break;
    uint64_t want = r->posted;
    pthread_mutex_unlock(&r->mutex);
    uint64_t sum = 0;
    for (size_t i = 0; i + 8 <= r->length; i += 8) {
      uint64_t v;
      memcpy(&v, r->bytes + i, 8);
      sum += v;
    }
    pthread_mutex_lock(&r->mutex);
    r->sum += sum;
    r->done = want;
  }
  pthread_mutex_unlock(&r->mutex);
  return NULL;
}

static void sleep_until(uint64_t at_ns) {
  if (cs_capture_clock_ns() >= at_ns) return;
  struct timespec ts = {(time_t)(at_ns / 1000000000u), (long)(at_ns % 1000000000u)};
  clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/* Captures for o->seconds; interval_ns 0 is flat out. The clock stops when close returns. */
static void run_phase(const options *o, uint64_t interval_ns, phase *out) {
  cs_capture *cap = open_sink(o);
  remover rm = {.cap = cap};
  pthread_t thread;
  pthread_create(&thread, NULL, remover_main, &rm);
  uint8_t *payload = malloc(o->record_bytes);
  uint8_t *copy = malloc(o->record_bytes);
  uint8_t *handoff = malloc(o->record_bytes);
  if (payload == NULL || copy == NULL || handoff == NULL) abort();
  for (uint64_t i = 0; i < o->record_bytes; i++) payload[i] = (uint8_t)(i * 131 + 7);
  memset(copy, 0, o->record_bytes);
  memset(handoff, 0, o->record_bytes);
  reader rd = {.bytes = handoff, .length = o->record_bytes};
  pthread_t reader_thread;
  if (pthread_mutex_init(&rd.mutex, NULL) != 0 || pthread_cond_init(&rd.cond, NULL) != 0 ||
      pthread_create(&reader_thread, NULL, reader_main, &rd) != 0) {
    abort();
  }
  char id[64];
  uint64_t start = cs_capture_clock_ns();
  uint64_t end = start + (uint64_t)(o->seconds * 1e9);
  uint64_t next = start;
  for (uint64_t n = 0;; n++) {
    uint64_t now = cs_capture_clock_ns();
    if (now >= end) break;
    if (interval_ns > 0) {
      /* Sleep, not spin: on a small machine a spinning producer steals the worker's core. */
      if (now < next) sleep_until(next);
      /*
       * The peer: half way to the next call, a plain memcpy of the same
       * bytes into one reused buffer, timed the same way under the same
       * sealing load. It is the least any capture must do; the call's tail
       * over this one's is the sink's own.
       */
      sleep_until(next + interval_ns / 2);
      uint64_t c0 = cs_capture_clock_ns();
      memcpy(copy, payload, o->record_bytes);
      lat_add(&out->copy_lat, cs_capture_clock_ns() - c0);
      __asm__ volatile("" : : "r"(copy) : "memory"); /* the copy is not optimized away */
      pthread_mutex_lock(&rd.mutex);
      bool read = rd.done == rd.posted; /* the reader has the last hand-off's lines */
      pthread_mutex_unlock(&rd.mutex);
      if (read) {
        c0 = cs_capture_clock_ns();
        memcpy(handoff, payload, o->record_bytes);
        lat_add(&out->handoff_lat, cs_capture_clock_ns() - c0);
        pthread_mutex_lock(&rd.mutex);
        rd.posted++;
        pthread_cond_signal(&rd.cond);
        pthread_mutex_unlock(&rd.mutex);
      }
      sleep_until(next + interval_ns);
      next += interval_ns;
    }
    cs_pack_meta m = bench_meta(id, sizeof id, n, o->record_bytes);
    payload[0] = (uint8_t)n; /* the bytes change from record to record */
    uint64_t t0 = cs_capture_clock_ns();
    int rc = cs_capture_write(cap, &m, payload, o->record_bytes, NULL, 0);
    lat_add(&out->lat, cs_capture_clock_ns() - t0);
    if (rc == CS_E_OK) out->records++;
    else out->refused++;
  }
  char msg[256];
  if (cs_capture_close(cap, CS_NEVER, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore-bench-ingest: close: %s\n", msg);
    exit(1);
  }
  out->elapsed_s = (double)(cs_capture_clock_ns() - start) / 1e9;
  atomic_store(&rm.stop, true);
  pthread_join(thread, NULL);
  cs_capture_free(cap);
  free(payload);
  pthread_mutex_lock(&rd.mutex);
  rd.stop = true;
  pthread_cond_signal(&rd.cond);
  pthread_mutex_unlock(&rd.mutex);
  pthread_join(reader_thread, NULL);
  pthread_mutex_destroy(&rd.mutex);
  pthread_cond_destroy(&rd.cond);
  free(copy);
  free(handoff);
  qsort(out->lat.ns, out->lat.count, sizeof *out->lat.ns, cmp_u64);
  if (out->copy_lat.count > 0) qsort(out->copy_lat.ns, out->copy_lat.count, sizeof *out->copy_lat.ns, cmp_u64);
  if (out->handoff_lat.count > 0) {
    qsort(out->handoff_lat.ns, out->handoff_lat.count, sizeof *out->handoff_lat.ns, cmp_u64);
  }
}

static int usage(void) {
  fprintf(stderr, "usage: capstore-bench-ingest --dir DIR --record-bytes N [--seconds S] [--pace F] "
                  "[--pack-bytes N] [--page-cache] [--hash-thread on|off]\n       capstore-bench-ingest --smoke DIR\n");
  return 2;
}

static int parse(int argc, char **argv, options *o) {
  *o = (options){.seconds = 1.0, .pace = 0.5, .pack_bytes = 64ull << 20, .hash_thread = -1};
  for (int i = 1; i < argc; i += 2) {
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--smoke") == 0 && value != NULL) {
      o->dir = value;
      o->record_bytes = 4096;
      o->seconds = 0.05;
      o->pack_bytes = 1 << 20;
    } else if (strcmp(argv[i], "--dir") == 0 && value != NULL) o->dir = value;
    else if (strcmp(argv[i], "--record-bytes") == 0 && value != NULL) o->record_bytes = strtoull(value, NULL, 10);
    else if (strcmp(argv[i], "--seconds") == 0 && value != NULL) o->seconds = strtod(value, NULL);
    else if (strcmp(argv[i], "--pace") == 0 && value != NULL) o->pace = strtod(value, NULL);
    else if (strcmp(argv[i], "--pack-bytes") == 0 && value != NULL) o->pack_bytes = strtoull(value, NULL, 10);
    else if (strcmp(argv[i], "--hash-thread") == 0 && value != NULL && strcmp(value, "on") == 0) o->hash_thread = 1;
    else if (strcmp(argv[i], "--hash-thread") == 0 && value != NULL && strcmp(value, "off") == 0) o->hash_thread = 0;
    else if (strcmp(argv[i], "--page-cache") == 0) {
      o->page_cache = true;
      i--; /* a flag: no value */
    } else return usage();
  }
  if (o->dir == NULL || o->record_bytes == 0 || o->record_bytes % 4 != 0 || o->seconds <= 0 ||
      o->pace <= 0 || o->pace > 1) {
    return usage();
  }
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o) != 0) return 2;
  phase flat = {0};
  run_phase(&o, 0, &flat);
  double rate = (double)flat.records / flat.elapsed_s;
  /* Paced: small packs so seals run all the time; rate a fraction of the saturated one. */
  options paced_o = o;
  paced_o.pack_bytes = o.pack_bytes / 8 > o.record_bytes * 4 ? o.pack_bytes / 8 : o.record_bytes * 4;
  phase paced = {0};
  uint64_t interval_ns = rate > 0 ? (uint64_t)(1e9 / (rate * o.pace)) : 1000000;
  run_phase(&paced_o, interval_ns, &paced);
  double gbps = (double)flat.records * (double)o.record_bytes / flat.elapsed_s / 1e9;
  cs_capture_config defaults;
  cs_capture_config_default(&defaults);
  bool hash_thread = o.hash_thread >= 0 ? o.hash_thread == 1 : defaults.hash_thread;
  printf("hash_thread=%d record_bytes=%llu records=%llu seconds=%.3f records_per_s=%.0f gb_per_s=%.4f "
         "sat_p50_us=%.2f sat_p99_us=%.2f sat_max_us=%.1f "
         "paced_rate=%.0f paced_records=%llu paced_p50_us=%.2f paced_p99_us=%.2f paced_max_us=%.1f "
         "copy_p50_us=%.2f copy_p99_us=%.2f handoff_p50_us=%.2f handoff_p99_us=%.2f refused=%llu\n",
         hash_thread, (unsigned long long)o.record_bytes, (unsigned long long)flat.records, flat.elapsed_s, rate, gbps,
         lat_pct(&flat.lat, 50) / 1e3, lat_pct(&flat.lat, 99) / 1e3, lat_pct(&flat.lat, 100) / 1e3,
         1e9 / (double)interval_ns, (unsigned long long)paced.records, lat_pct(&paced.lat, 50) / 1e3,
         lat_pct(&paced.lat, 99) / 1e3, lat_pct(&paced.lat, 100) / 1e3,
         lat_pct(&paced.copy_lat, 50) / 1e3, lat_pct(&paced.copy_lat, 99) / 1e3,
         lat_pct(&paced.handoff_lat, 50) / 1e3, lat_pct(&paced.handoff_lat, 99) / 1e3,
         (unsigned long long)(flat.refused + paced.refused));
  free(flat.lat.ns);
  free(paced.lat.ns);
  free(paced.copy_lat.ns);
  free(paced.handoff_lat.ns);
  return flat.refused + paced.refused == 0 && flat.records > 0 ? 0 : 1;
}

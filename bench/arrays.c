/*
 * capstore-bench-arrays: capture arrays (capstore/arrays.h, docs/arrays.md)
 * against the plainest way to do the same work, in the same run
 * (docs/performance.md, "Capture arrays"; bench/run_arrays.sh runs it on
 * dirstore + SQLite and on a private S3 server + ClickHouse).
 *
 * usage: capstore-bench-arrays progress|write|slice|smoke --work DIR [--s3 FILE --clickhouse FILE] [options]
 *
 * progress: an array of --chunks N (16384) chunks of 64 float32 written by one writer and flushed (the
 *   write rate and the flush are reported), then --runs K (7) times, in turn first:
 *     refresh   capstore_array_refresh + capstore_array_written: the written slots and the stamp (two
 *               catalog requests, whatever N);
 *     list      LIST of one object per chunk (the slot claims on a dirstore; on S3, one small object per
 *               chunk under a prefix of its own, put by the bench first): what progress costs where each
 *               chunk is an object. Requests and time.
 * write: --writes M (256) first writes into empty slots (chunks of 64 KiB), each timed, then the same slots
 *   written again by a second writer, each timed: refused at once where the store enforces If-None-Match
 *   (a dirstore), or accepted at the write and refused at the flush (the local S3 server), whose time is
 *   reported per write. Medians.
 * slice: an array of --chunks N (16) chunks of 1 x 4096 x 256 float32 (4 MiB, 16 Blosc blocks of 256 KiB),
 *   Blosc, filled; then --runs K times a slice touching one block of every chunk ([0, N) x [100, 101) x
 *   [0, 256)) read, in turn first:
 *     blocks    capstore_array_read: per chunk the trailer, the table, the Blosc prefix and one block;
 *     whole     per chunk one GET of its whole stored record and a decode of the whole chunk (what a
 *               reader without the block table does), through the same store adapter.
 *   Bytes, requests and time; both equal to the reference.
 * smoke: small versions of all three on a dirstore + SQLite (ctest bench.arrays_smoke).
 *
 * Every measurement is one line of key=value pairs, then "median ..." and "ratio ..." lines. Exit status 0
 * only when every read was byte-exact and every refusal and count was as expected.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capstore/capstore.h"
#include "tcp_switch.h"

#define RUNS_MAX 31
#define SEC CS_SEC_NS

typedef struct opts {
  const char *mode, *work, *s3_file, *ch_file;
  unsigned runs, chunks, writes;
  bool no_peer; /* progress: the refresh alone (no objects put for the LIST peer) */
  /* fill */
  unsigned writers, chunk_kib, delay_ms, rate_mbs;
  /* fill-writer (one writer process of a fill, started by fill) */
  const char *name, *spool, *id;
  unsigned k;
} opts;

static struct {
  char ch_url[128], ch_user[128], ch_password[128];
  char s3_endpoint[256], s3_key[128], s3_secret[128], s3_bucket[128];
  bool on;
} live;

static double now_s(void) { return (double)capstore_clock_ns() / 1e9; }

static int usage(void) {
  fprintf(stderr, "usage: capstore-bench-arrays progress|write|slice|fill|smoke --work DIR [--s3 FILE --clickhouse FILE]\n"
                  "       [--runs K] [--chunks N] [--writes M] [--no-peer]\n"
                  "       fill: [--writers W] [--chunk-kib B] [--delay-ms D] [--rate-mbs R]\n");
  return 2;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, unsigned n) {
  double s[4096];
  unsigned m = n < 4096 ? n : 4096;
  memcpy(s, v, m * sizeof *s);
  qsort(s, m, sizeof *s, cmp_double);
  return m == 0 ? 0 : m % 2 ? s[m / 2] : (s[m / 2 - 1] + s[m / 2]) / 2;
}

static bool live_load(const opts *o) {
  if (o->s3_file == NULL && o->ch_file == NULL) return true;
  if (o->s3_file == NULL || o->ch_file == NULL) return false;
  FILE *f = fopen(o->ch_file, "r");
  unsigned port = 0;
  bool ok = f != NULL && fscanf(f, "%u %127s %127s", &port, live.ch_user, live.ch_password) >= 2;
  if (f != NULL) fclose(f);
  snprintf(live.ch_url, sizeof live.ch_url, "http://127.0.0.1:%u/", port);
  f = fopen(o->s3_file, "r");
  ok = ok && f != NULL &&
       fscanf(f, "%255s %127s %127s %127s", live.s3_endpoint, live.s3_key, live.s3_secret, live.s3_bucket) == 4;
  if (f != NULL) fclose(f);
  live.on = ok;
  return ok;
}

static void live_config(capstore_config *cfg, const char *name, char *prefix, size_t prefix_size);

typedef struct env {
  char dir[512], spool[600], bucket[600], db[600], name[64], prefix[80];
  capstore_config cfg;
} env;

static bool env_make(env *e, const opts *o, const char *tag) {
  snprintf(e->dir, sizeof e->dir, "%s/%s", o->work, tag);
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", e->dir, e->dir);
  if (system(cmd) != 0) return false;
  snprintf(e->spool, sizeof e->spool, "%s/spool", e->dir);
  snprintf(e->bucket, sizeof e->bucket, "%s/bucket", e->dir);
  snprintf(e->db, sizeof e->db, "%s/catalog.db", e->dir);
  capstore_config_default(&e->cfg);
  e->cfg.spool_dir = e->spool;
  e->cfg.store_dir = e->bucket;
  e->cfg.sqlite_path = e->db;
  e->cfg.capture.sink.linger_ns = 50 * CS_MS_NS;
  if (live.on) {
    snprintf(e->name, sizeof e->name, "bench_arrays_%s_%ld", tag, (long)getpid());
    live_config(&e->cfg, e->name, e->prefix, sizeof e->prefix);
  }
  return true;
}

static const char *backend(void) { return live.on ? "s3+clickhouse" : "dirstore+sqlite"; }

/* Floats with a bfloat16's precision from a fixed stream: about 2:1 under Blosc with byte shuffle. */
static void fill_values(float *v, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    float f = (float)((double)(x >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    uint32_t bits;
    memcpy(&bits, &f, 4);
    bits &= 0xffff0000u;
    memcpy(&v[i], &bits, 4);
  }
}

static capstore *open_cs(env *e) {
  char msg[256];
  capstore *cs = NULL;
  if (capstore_open(&e->cfg, &cs, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore_open: %s\n", msg);
    exit(1);
  }
  return cs;
}

static capstore_array_writer *open_writer(capstore *cs, env *e, const cs_array_meta *m) {
  char msg[256];
  capstore_array_writer *w = NULL;
  if (capstore_array_writer_open(cs, &e->cfg, m, &w, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore_array_writer_open: %s\n", msg);
    exit(1);
  }
  return w;
}

static void close_cs(capstore *cs) {
  char msg[256];
  if (capstore_close(cs, 60 * SEC, msg, sizeof msg) != CS_E_OK) fprintf(stderr, "close: %s\n", msg);
  capstore_free(cs);
}

static cs_array_meta meta_1d(const char *id, uint64_t chunks, uint64_t chunk_elements, cs_array_codec codec) {
  cs_array_geometry g = {.dims = 1, .shape = {chunks * chunk_elements}, .chunk = {chunk_elements}};
  cs_array_meta m;
  char msg[160];
  if (cs_array_meta_make(&m, id, &g, CS_DTYPE_FLOAT32, codec, NULL, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "meta: %s\n", msg);
    exit(1);
  }
  return m;
}

/* ---- progress ------------------------------------------------------------------------------------------ */

/* The catalog requests of the array's last refresh, as a read reports them (a read of an empty slice). */
static uint64_t stats_requests(capstore_array *a) {
  cs_array_slice empty;
  memset(&empty, 0, sizeof empty);
  capstore_array_read_stats st;
  char msg[256];
  if (capstore_array_read(a, &empty, NULL, 0, NULL, 0, &st, msg, sizeof msg) != CS_E_OK) return 0;
  return st.catalog_requests;
}

/* LISTs every key under prefix; *requests and *keys counted. */
static bool list_all(cs_store *store, const char *prefix, uint64_t *requests, uint64_t *keys) {
  static char keys_buf[1000][CS_KEY_MAX];
  cs_list_page page;
  char token[CS_KEY_MAX] = "";
  *requests = *keys = 0;
  for (;;) {
    memset(&page, 0, sizeof page);
    page.keys = keys_buf;
    page.key_capacity = 1000;
    cs_store_result res;
    memset(&res, 0, sizeof res);
    if (store->ops->list(store->self, prefix, token, 1000, &page, &res) != CS_E_OK || res.outcome != CS_OUT_OK) {
      fprintf(stderr, "LIST %s: %s\n", prefix, res.detail);
      return false;
    }
    (*requests)++;
    *keys += page.key_count;
    if (page.next_token[0] == '\0') return true;
    snprintf(token, sizeof token, "%s", page.next_token);
  }
}

static int run_progress(const opts *o) {
  env e;
  if (!env_make(&e, o, "progress")) return 1;
  capstore *cs = open_cs(&e);
  cs_array_meta m = meta_1d("progress", o->chunks, 64, CS_ARRAY_CODEC_NONE);
  capstore_array_writer *w = open_writer(cs, &e, &m);
  float v[64];
  char msg[256];
  double t0 = now_s();
  for (uint64_t i = 0; i < o->chunks; i++) {
    fill_values(v, 64, i);
    if (capstore_array_write_chunk(w, i, v, sizeof v, msg, sizeof msg) != CS_E_OK) {
      fprintf(stderr, "write %" PRIu64 ": %s\n", i, msg);
      return 1;
    }
  }
  double t1 = now_s();
  capstore_array_flush_report rep;
  int rc = capstore_array_flush(w, capstore_clock_ns() + 600 * SEC, &rep, msg, sizeof msg);
  double t2 = now_s();
  if (rc != CS_E_OK || rep.accepted != o->chunks) {
    fprintf(stderr, "flush: %s (%" PRIu64 " accepted)\n", msg, rep.accepted);
    return 1;
  }
  printf("progress backend=%s chunks=%u write_s=%.3f writes_per_s=%.0f flush_s=%.3f\n", backend(), o->chunks, t1 - t0,
         o->chunks / (t1 - t0), t2 - t1);
  /* The peer's objects: the claims on a dirstore; one object per chunk put here on S3. */
  cs_store store;
  if (capstore_open_store(&e.cfg, &store, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "%s\n", msg), 1;
  char prefix[CS_KEY_MAX], keyprefix[256];
  capstore_key_prefix(&e.cfg, keyprefix, sizeof keyprefix);
  if (store.enforces_if_none_match) {
    snprintf(prefix, sizeof prefix, "%sarrays/progress/slots/", keyprefix);
  } else {
    snprintf(prefix, sizeof prefix, "%speer/progress/", keyprefix);
    for (uint64_t i = 0; i < o->chunks && !o->no_peer; i++) {
      char key[CS_KEY_MAX + 32];
      snprintf(key, sizeof key, "%s%08" PRIu64, prefix, i);
      cs_store_result res;
      memset(&res, 0, sizeof res);
      if (store.ops->put(store.self, key, "x", 1, NULL, false, &res) != CS_E_OK || res.outcome != CS_OUT_OK)
        return fprintf(stderr, "PUT %s: %s\n", key, res.detail), 1;
    }
  }
  capstore_reader *r = NULL;
  if (capstore_reader_open(&e.cfg, &r, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "%s\n", msg), 1;
  capstore_array *a = NULL;
  if (capstore_array_open(r, m.id, &a, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "%s\n", msg), 1;
  uint8_t *bits = malloc((o->chunks + 7) / 8);
  double refresh[RUNS_MAX], list[RUNS_MAX];
  uint64_t list_requests = 0, list_keys = 0, written = 0;
  int bad = 0;
  for (unsigned run = 0; run < o->runs; run++) {
    for (int side = 0; side < 2; side++) {
      bool do_refresh = (side == 0) == (run % 2 == 0);
      double s = now_s();
      if (do_refresh) {
        if (capstore_array_refresh(a, msg, sizeof msg) != CS_E_OK ||
            capstore_array_written(a, bits, (o->chunks + 7) / 8, &written) != CS_E_OK || written != o->chunks)
          bad++;
        refresh[run] = now_s() - s;
      } else if (!o->no_peer) {
        if (!list_all(&store, prefix, &list_requests, &list_keys) || list_keys != o->chunks) bad++;
        list[run] = now_s() - s;
      } else {
        list[run] = 0;
      }
    }
    printf("progress run=%u refresh_ms=%.2f refresh_requests=%" PRIu64 " list_ms=%.2f list_requests=%" PRIu64 " list_keys=%" PRIu64
           "\n", run, refresh[run] * 1e3, stats_requests(a), list[run] * 1e3, list_requests, list_keys);
  }
  double mr = median(refresh, o->runs), ml = median(list, o->runs);
  printf("median progress backend=%s chunks=%u refresh_ms=%.2f list_ms=%.2f\n", backend(), o->chunks, mr * 1e3, ml * 1e3);
  printf("ratio progress list/refresh time=%.2f requests=%.1f\n", ml / mr, (double)list_requests / 2.0);
  free(bits);
  capstore_array_close(a);
  capstore_reader_free(r);
  cs_store_close(&store);
  capstore_array_writer_free(w);
  close_cs(cs);
  return bad == 0 ? 0 : 1;
}

/* ---- write --------------------------------------------------------------------------------------------- */

static int run_write(const opts *o) {
  env e;
  if (!env_make(&e, o, "write")) return 1;
  capstore *cs = open_cs(&e);
  enum { EL = 16384 }; /* 64 KiB chunks */
  cs_array_meta m = meta_1d("write", o->writes, EL, CS_ARRAY_CODEC_NONE);
  capstore_array_writer *w1 = open_writer(cs, &e, &m), *w2 = open_writer(cs, &e, &m);
  float *v = malloc(EL * sizeof *v);
  double *first = calloc(o->writes, sizeof *first), *second = calloc(o->writes, sizeof *second);
  char msg[256];
  int bad = 0;
  unsigned refused_at_once = 0;
  for (unsigned i = 0; i < o->writes; i++) {
    fill_values(v, EL, i);
    double s = now_s();
    if (capstore_array_write_chunk(w1, i, v, EL * sizeof *v, msg, sizeof msg) != CS_E_OK) bad++;
    first[i] = now_s() - s;
  }
  capstore_array_flush_report rep;
  if (capstore_array_flush(w1, capstore_clock_ns() + 600 * SEC, &rep, msg, sizeof msg) != CS_E_OK) bad++;
  for (unsigned i = 0; i < o->writes; i++) {
    fill_values(v, EL, i + 1000000u);
    double s = now_s();
    int rc = capstore_array_write_chunk(w2, i, v, EL * sizeof *v, msg, sizeof msg);
    second[i] = now_s() - s;
    if (rc == CS_E_SLOT_WRITTEN) refused_at_once++;
    else if (rc != CS_E_OK) bad++;
  }
  double s = now_s();
  int rc = capstore_array_flush(w2, capstore_clock_ns() + 600 * SEC, &rep, msg, sizeof msg);
  double flush2 = now_s() - s;
  bool all_refused = refused_at_once == o->writes || (rc == CS_E_SLOT_WRITTEN && rep.refused == o->writes);
  if (!all_refused) bad++, fprintf(stderr, "second writes: %u refused at once, flush %s\n", refused_at_once, msg);
  double mf = median(first, o->writes), ms = median(second, o->writes);
  printf("median write backend=%s writes=%u chunk_bytes=%u first_ms=%.3f second_ms=%.3f refused_at_once=%u"
         " second_flush_ms=%.1f second_flush_per_write_ms=%.3f\n",
         backend(), o->writes, EL * 4u, mf * 1e3, ms * 1e3, refused_at_once, flush2 * 1e3,
         flush2 * 1e3 / o->writes);
  printf("ratio write first/second=%.2f\n", mf / ms);
  free(v);
  free(first);
  free(second);
  capstore_array_writer_free(w1);
  capstore_array_writer_free(w2);
  close_cs(cs);
  return bad == 0 ? 0 : 1;
}

/* ---- slice --------------------------------------------------------------------------------------------- */

static cs_store *bench_store; /* the peer's store: opened apart from the reader's, as a plain client would */

typedef struct whole_cost {
  uint64_t requests, bytes;
} whole_cost;

/* The peer: per overlapped chunk, one GET of its whole stored record and a whole decode. */
static bool read_whole(capstore_reader *r, const cs_array_meta *m, const char *id, const cs_array_slice *s,
                       float *out, whole_cost *cost) {
  cs_search_filter f;
  memset(&f, 0, sizeof f);
  cs_pack_text hook = cs_pack_text_of(CS_ARRAY_HOOK_CHUNK);
  f.hook_names = &hook, f.hook_name_count = 1;
  f.run_id = cs_pack_text_of(id);
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  char msg[256];
  if (capstore_search(r, &f, NULL, CAPSTORE_PAGE_MAX, &sel, msg, sizeof msg) != CS_E_OK) return false;
  bool ok = true;
  cs_array_slice_iter it;
  cs_array_slice_begin(&it, &m->geometry, s);
  cs_array_piece p;
  uint64_t max = cs_array_chunk_bytes(&m->geometry, 0);
  uint8_t *chunk = malloc((size_t)max), *stored = NULL;
  size_t stored_cap = 0;
  while (ok && cs_array_slice_next(&it, &p)) {
    const cs_search_row *row = NULL;
    for (uint32_t i = 0; i < sel.count; i++)
      if (sel.rows[i].d.record.meta.step_number == p.chunk_index) row = &sel.rows[i];
    if (row == NULL) return false;
    uint64_t len = row->d.record.stored_length;
    if (len > stored_cap) stored = realloc(stored, (size_t)len), stored_cap = (size_t)len;
    cs_range range = {.offset = row->d.record.offset, .length = len};
    size_t got = 0;
    cs_store_result res;
    memset(&res, 0, sizeof res);
    if (bench_store->ops->get(bench_store->self, row->d.key, &range, stored, (size_t)len, &got, &res) != CS_E_OK ||
        res.outcome != CS_OUT_OK || got != len)
      return false;
    cost->requests++, cost->bytes += len;
    cs_array_chunk_tail tail;
    if (cs_array_chunk_tail_parse(stored + len - CS_ARRAY_CHUNK_TRAILER_BYTES, len, &tail, msg, sizeof msg) != CS_E_OK)
      return false;
    size_t out_len = 0;
    if (cs_blosc_decode(stored, tail.payload_bytes, chunk, (size_t)max, &out_len, msg, sizeof msg) != CS_E_OK ||
        out_len != cs_array_chunk_bytes(&m->geometry, p.chunk_index))
      return false;
    cs_array_piece_copy(&m->geometry, s, &p, chunk, (uint8_t *)out, true);
  }
  free(chunk);
  free(stored);
  capstore_selection_free(&sel);
  return ok;
}

static int run_slice(const opts *o) {
  env e;
  if (!env_make(&e, o, "slice")) return 1;
  capstore *cs = open_cs(&e);
  cs_array_geometry g = {.dims = 3, .shape = {o->chunks, 4096, 256}, .chunk = {1, 4096, 256}};
  cs_array_meta m;
  char msg[256];
  if (cs_array_meta_make(&m, "slice", &g, CS_DTYPE_FLOAT32, CS_ARRAY_CODEC_BLOSC, NULL, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "%s\n", msg), 1;
  capstore_array_writer *w = open_writer(cs, &e, &m);
  size_t chunk_el = 4096u * 256u;
  float *v = malloc(chunk_el * sizeof *v);
  for (uint64_t i = 0; i < o->chunks; i++) {
    fill_values(v, chunk_el, i);
    if (capstore_array_write_chunk(w, i, v, chunk_el * sizeof *v, msg, sizeof msg) != CS_E_OK)
      return fprintf(stderr, "write: %s\n", msg), 1;
  }
  capstore_array_flush_report rep;
  if (capstore_array_flush(w, capstore_clock_ns() + 600 * SEC, &rep, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "flush: %s\n", msg), 1;
  capstore_reader *r = NULL;
  if (capstore_reader_open(&e.cfg, &r, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "%s\n", msg), 1;
  cs_store store;
  if (capstore_open_store(&e.cfg, &store, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "%s\n", msg), 1;
  bench_store = &store;
  capstore_array *a = NULL;
  if (capstore_array_open(r, m.id, &a, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "%s\n", msg), 1;
  cs_array_slice s;
  memset(&s, 0, sizeof s);
  s.stop[0] = o->chunks, s.start[1] = 100, s.stop[1] = 101, s.stop[2] = 256;
  size_t out_bytes = (size_t)o->chunks * 256u * 4u;
  float *got = malloc(out_bytes), *want = malloc(out_bytes), *peer = malloc(out_bytes);
  for (uint64_t c = 0; c < o->chunks; c++) {
    fill_values(v, chunk_el, c);
    memcpy(&want[c * 256], &v[100 * 256], 256 * sizeof *v);
  }
  double tb[RUNS_MAX], tw[RUNS_MAX];
  capstore_array_read_stats st;
  whole_cost wc;
  int bad = 0;
  for (unsigned run = 0; run < o->runs; run++) {
    for (int side = 0; side < 2; side++) {
      bool blocks = (side == 0) == (run % 2 == 0);
      double t = now_s();
      if (blocks) {
        if (capstore_array_read(a, &s, got, out_bytes, NULL, 0, &st, msg, sizeof msg) != CS_E_OK ||
            memcmp(got, want, out_bytes) != 0)
          bad++, fprintf(stderr, "blocks: %s\n", msg);
        tb[run] = now_s() - t;
      } else {
        memset(&wc, 0, sizeof wc);
        if (!read_whole(r, &m, m.id, &s, peer, &wc) || memcmp(peer, want, out_bytes) != 0) bad++, fprintf(stderr, "whole failed\n");
        tw[run] = now_s() - t;
      }
    }
    printf("slice run=%u blocks_ms=%.2f blocks_requests=%" PRIu64 " blocks_bytes=%" PRIu64 " whole_ms=%.2f"
           " whole_requests=%" PRIu64 " whole_bytes=%" PRIu64 "\n",
           run, tb[run] * 1e3, st.chunks.fetches + st.catalog_requests, st.chunks.bytes_fetched, tw[run] * 1e3,
           wc.requests + 1, wc.bytes);
  }
  double mb = median(tb, o->runs), mw = median(tw, o->runs);
  printf("median slice backend=%s chunks=%u chunk_bytes=%zu blocks_ms=%.2f whole_ms=%.2f\n", backend(), o->chunks,
         chunk_el * 4, mb * 1e3, mw * 1e3);
  printf("ratio slice whole/blocks time=%.2f bytes=%.2f\n", mw / mb, (double)wc.bytes / (double)st.chunks.bytes_fetched);
  free(got);
  free(want);
  free(peer);
  free(v);
  capstore_array_close(a);
  cs_store_close(&store);
  capstore_reader_free(r);
  capstore_array_writer_free(w);
  close_cs(cs);
  return bad == 0 ? 0 : 1;
}

/* ---- fill over a WAN ----------------------------------------------------------------------------------- */

/*
 * fill: the daemon (this process, serving: it takes the packs capture-role writers hand into its spool,
 * uploads them and indexes them) and its writers reach the S3 server and ClickHouse through TCP switches in
 * the wan mode (faults/tcp_switch.h): each connection's bytes at --rate-mbs MB/s each way and --delay-ms
 * each way (a round trip is twice that; a new connection pays one more). One array of --chunks chunks of
 * --chunk-kib KiB (float32, raw) is filled per measurement, each time a new one, in turn first:
 *   capstore W=1    one writer process writes every chunk and flushes (its flush returns once every write
 *                   is accepted: visible to readers, the slot its own);
 *   capstore W=N    --writers processes, writer k the chunks c with c % N == k;
 *   peer W=1        the plainest remote writer: one PUT of each chunk, in turn, over one connection (the
 *                   reference design's serial writer);
 *   peer W=N        N such writers at once, each its own connection.
 * Each time from the writers' start to the last one's end (process start and open included for capstore).
 * The array is read back after each capstore fill: every slot written, every chunk equal. The daemon has
 * --writers uploads in flight (service.store_inflight_max; the peer's W writers have W connections), and
 * one untimed fill by --writers writers goes first (the daemon's lease, its tables, the first connections);
 * each writer's staging ring is sized for its chunks (16 MiB, or 4 records), not the default 128 MiB that a
 * capture process touches at open.
 * capstore's serial writer is not one connection: its packs go up in parallel, so "serial / W writers" is
 * not the reference design's ratio; "peer_serial / capstore_writers" (one PUT per chunk against capstore's
 * W writers) is the like for like.
 */
static void live_config(capstore_config *cfg, const char *name, char *prefix, size_t prefix_size) {
  snprintf(prefix, prefix_size, "%s/", name);
  cfg->name = name;
  cfg->key_prefix = prefix;
  cfg->store_dir = NULL;
  cfg->s3_endpoint = live.s3_endpoint;
  cfg->s3_bucket = live.s3_bucket;
  cfg->s3_access_key_id = live.s3_key;
  cfg->s3_secret_access_key = live.s3_secret;
  cfg->s3_allow_insecure = true;
  cfg->sqlite_path = NULL;
  cfg->clickhouse_url = live.ch_url;
  cfg->clickhouse_user = live.ch_user;
  cfg->clickhouse_password = live.ch_password[0] != '\0' ? live.ch_password : NULL;
  cfg->clickhouse_allow_insecure = true;
  cfg->service.lease_guard_ns = 1100 * CS_MS_NS;
}

static unsigned url_port(const char *url) {
  const char *colon = strrchr(url, ':');
  return colon == NULL ? 0 : (unsigned)strtoul(colon + 1, NULL, 10);
}

static int run_fill_writer(const opts *o) {
  double t0 = now_s();
  char msg[512], prefix[128];
  capstore_config cap;
  capstore_config_default(&cap);
  cap.role = CS_ROLE_CAPTURE;
  cap.spool_dir = o->spool;
  cap.capture.sink.linger_ns = 20 * CS_MS_NS;
  /* Sized for its chunks: the staging ring is touched at open (128 MiB by default, for a model's tensors). */
  cap.capture.record_bytes_max = (uint64_t)o->chunk_kib * 1024u + 64 * 1024u;
  cap.capture.staging_bytes = cap.capture.record_bytes_max * 4 > 16u << 20 ? cap.capture.record_bytes_max * 4 : 16u << 20;
  capstore_config access;
  capstore_config_default(&access);
  live_config(&access, o->name, prefix, sizeof prefix);
  capstore *cs = NULL;
  if (capstore_open(&cap, &cs, msg, sizeof msg) != CS_E_OK) return fprintf(stderr, "writer %u: open: %s\n", o->k, msg), 1;
  double t_cs = now_s();
  size_t elements = (size_t)o->chunk_kib * 256u;
  cs_array_meta m = meta_1d(o->id, o->chunks, elements, CS_ARRAY_CODEC_NONE);
  capstore_array_writer *w = NULL;
  if (capstore_array_writer_open(cs, &access, &m, &w, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "writer %u: writer: %s\n", o->k, msg), 1;
  double t1 = now_s();
  float *v = malloc(elements * sizeof *v);
  uint64_t own = 0;
  int bad = 0;
  for (uint64_t c = o->k; c < o->chunks; c += o->writers) {
    fill_values(v, elements, c);
    if (capstore_array_write_chunk(w, c, v, elements * sizeof *v, msg, sizeof msg) != CS_E_OK)
      bad++, fprintf(stderr, "writer %u: write %" PRIu64 ": %s\n", o->k, c, msg);
    own++;
  }
  double t2 = now_s();
  capstore_array_flush_report rep;
  if (capstore_array_flush(w, capstore_clock_ns() + 600 * SEC, &rep, msg, sizeof msg) != CS_E_OK)
    bad++, fprintf(stderr, "writer %u: flush: %s\n", o->k, msg);
  else if (rep.accepted != own || rep.refused != 0 || rep.owed != 0)
    bad++, fprintf(stderr, "writer %u: %" PRIu64 " accepted, %" PRIu64 " refused, %" PRIu64 " owed of %" PRIu64 "\n",
                   o->k, rep.accepted, rep.refused, rep.owed, own);
  double t3 = now_s();
  capstore_array_writer_free(w);
  close_cs(cs);
  free(v);
  printf("fill-writer k=%u chunks=%" PRIu64 " open_ms=%.1f (capstore_open %.1f) write_ms=%.1f flush_ms=%.1f\n", o->k, own,
         (t1 - t0) * 1e3, (t_cs - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
  return bad == 0 ? 0 : 1;
}

extern char **environ;

/* Starts `writers` writer processes of array id and waits for them all; false when one failed. */
static bool fill_capstore(const opts *o, const char *name, const char *spool, const char *s3_file,
                          const char *ch_file, const char *id, unsigned writers) {
  pid_t pids[64];
  bool ok = true;
  for (unsigned k = 0; k < writers; k++) {
    /* posix_spawn takes char *const argv[]: each argument is copied into words of its own. */
    static char words[22][720];
    const char *args[22] = {"capstore-bench-arrays", "fill-writer", "--work", o->work, "--s3", s3_file,
                            "--clickhouse", ch_file, "--name", name, "--spool", spool, "--id", id, "--k", "",
                            "--writers", "", "--chunks", "", "--chunk-kib", ""};
    char *argv[23];
    for (int i = 0; i < 22; i++) {
      snprintf(words[i], sizeof words[i], "%s", args[i]);
      argv[i] = words[i];
    }
    snprintf(words[15], sizeof words[15], "%u", k);
    snprintf(words[17], sizeof words[17], "%u", writers);
    snprintf(words[19], sizeof words[19], "%u", o->chunks);
    snprintf(words[21], sizeof words[21], "%u", o->chunk_kib);
    argv[22] = NULL;
    if (posix_spawn(&pids[k], "/proc/self/exe", NULL, NULL, argv, environ) != 0) {
      fprintf(stderr, "spawn: %s\n", strerror(errno));
      writers = k, ok = false;
      break;
    }
  }
  for (unsigned k = 0; k < writers; k++) {
    int status = 0;
    ok = waitpid(pids[k], &status, 0) == pids[k] && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  return ok;
}

/* Every slot of the array written and every chunk equal, read back through a reader. */
static bool fill_verify(capstore_config *cfg, const opts *o, const char *id) {
  char msg[512];
  capstore_reader *r = NULL;
  capstore_array *a = NULL;
  if (capstore_reader_open(cfg, &r, msg, sizeof msg) != CS_E_OK || capstore_array_open(r, id, &a, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "verify %s: %s\n", id, msg);
    capstore_reader_free(r);
    return false;
  }
  size_t elements = (size_t)o->chunk_kib * 256u, total = elements * o->chunks;
  float *got = malloc(total * sizeof *got), *want = malloc(elements * sizeof *want);
  cs_array_slice s;
  memset(&s, 0, sizeof s);
  s.stop[0] = total;
  capstore_array_read_stats st;
  bool ok = capstore_array_read(a, &s, got, total * sizeof *got, NULL, 0, &st, msg, sizeof msg) == CS_E_OK;
  if (!ok || st.chunks_unwritten != 0)
    fprintf(stderr, "verify %s: %s (%" PRIu64 " chunks unwritten)\n", id, msg, st.chunks_unwritten), ok = false;
  for (uint64_t c = 0; c < o->chunks && ok; c++) {
    fill_values(want, elements, c);
    ok = memcmp(got + c * elements, want, elements * sizeof *got) == 0;
    if (!ok) fprintf(stderr, "verify %s: chunk %" PRIu64 " differs\n", id, c);
  }
  free(got);
  free(want);
  capstore_array_close(a);
  capstore_reader_free(r);
  return ok;
}

typedef struct peer_job {
  const capstore_config *cfg;
  const char *prefix;
  unsigned k, writers, chunks;
  size_t bytes;
  const void *payload;
  bool ok;
} peer_job;

/* One plain remote writer: a store client of its own (one connection), one PUT per chunk, in turn. */
static void *peer_writer(void *arg) {
  peer_job *j = arg;
  char msg[256], key[256];
  cs_store store;
  memset(&store, 0, sizeof store);
  bool opened = capstore_open_store(j->cfg, &store, msg, sizeof msg) == CS_E_OK;
  if (!opened) fprintf(stderr, "peer writer %u: %s\n", j->k, msg);
  j->ok = opened;
  for (unsigned c = j->k; c < j->chunks && j->ok; c += j->writers) {
    snprintf(key, sizeof key, "%s%u", j->prefix, c);
    cs_store_result res;
    memset(&res, 0, sizeof res);
    cs_object_info info;
    memset(&info, 0, sizeof info);
    j->ok = store.ops->put(store.self, key, j->payload, j->bytes, &info, false, &res) == CS_E_OK && res.outcome == CS_OUT_OK;
  }
  if (opened) cs_store_close(&store);
  return NULL;
}

static bool fill_peer(const capstore_config *cfg, const opts *o, const char *prefix, unsigned writers, const void *payload) {
  pthread_t threads[64];
  peer_job jobs[64];
  for (unsigned k = 0; k < writers; k++) {
    jobs[k] = (peer_job){.cfg = cfg, .prefix = prefix, .k = k, .writers = writers, .chunks = o->chunks,
                         .bytes = (size_t)o->chunk_kib * 1024u, .payload = payload};
    pthread_create(&threads[k], NULL, peer_writer, &jobs[k]);
  }
  bool ok = true;
  for (unsigned k = 0; k < writers; k++) pthread_join(threads[k], NULL), ok = ok && jobs[k].ok;
  return ok;
}

static int run_fill(const opts *o) {
  if (!live.on) return fprintf(stderr, "fill: needs --s3 and --clickhouse (it measures a WAN)\n"), 2;
  if (o->writers < 2 || o->writers > 64 || o->chunks < o->writers) return fprintf(stderr, "fill: 2..64 writers, chunks >= writers\n"), 2;
  cs_tcp_switch *s3_sw = NULL, *ch_sw = NULL;
  uint64_t delay = (uint64_t)o->delay_ms * CS_MS_NS, rate = (uint64_t)o->rate_mbs * 1000000u;
  if (cs_tcp_switch_start(0, (uint16_t)url_port(live.s3_endpoint), &s3_sw) != CS_E_OK ||
      cs_tcp_switch_start(0, (uint16_t)url_port(live.ch_url), &ch_sw) != CS_E_OK ||
      cs_tcp_switch_wan(s3_sw, delay, rate) != CS_E_OK || cs_tcp_switch_wan(ch_sw, delay, rate) != CS_E_OK)
    return fprintf(stderr, "fill: the switches\n"), 1;
  char dir[600], s3_file[700], ch_file[700];
  snprintf(dir, sizeof dir, "%s/fill-endpoints", o->work);
  mkdir(dir, 0755);
  snprintf(s3_file, sizeof s3_file, "%s/s3", dir);
  snprintf(ch_file, sizeof ch_file, "%s/clickhouse", dir);
  FILE *f = fopen(s3_file, "w");
  if (f == NULL) return 1;
  fprintf(f, "http://127.0.0.1:%u %s %s %s\n", cs_tcp_switch_port(s3_sw), live.s3_key, live.s3_secret, live.s3_bucket);
  fclose(f);
  f = fopen(ch_file, "w");
  if (f == NULL) return 1;
  fprintf(f, "%u %s %s\n", cs_tcp_switch_port(ch_sw), live.ch_user, live.ch_password[0] ? live.ch_password : "");
  fclose(f);
  opts switched = *o;
  switched.s3_file = s3_file, switched.ch_file = ch_file;
  if (!live_load(&switched)) return fprintf(stderr, "fill: %s, %s\n", s3_file, ch_file), 1;
  env e;
  if (!env_make(&e, &switched, "fill")) return 1;
  e.cfg.serve = true;
  e.cfg.daemon.scan_interval_ns = 10 * CS_MS_NS;
  e.cfg.capture.sink.linger_ns = 20 * CS_MS_NS;
  /* As many uploads in flight as writers: the peer's W writers have W connections too. */
  e.cfg.service.store_inflight_max = o->writers;
  capstore *daemon = open_cs(&e);
  /* Untimed: the daemon's start (its lease, the tables) and first cycle are not any measurement's. */
  if (!fill_capstore(&switched, e.name, e.spool, s3_file, ch_file, "fill-warm", o->writers))
    return fprintf(stderr, "fill: the warm-up fill failed\n"), 1;
  size_t bytes = (size_t)o->chunk_kib * 1024u;
  float *payload = malloc(bytes);
  fill_values(payload, bytes / 4, 7);
  double t[4][RUNS_MAX], t_read[2][RUNS_MAX];
  const char *names[4] = {"capstore_serial", "capstore_writers", "peer_serial", "peer_writers"};
  int bad = 0;
  for (unsigned run = 0; run < o->runs; run++) {
    for (unsigned turn = 0; turn < 4; turn++) {
      unsigned which = (turn + run) % 4;
      unsigned writers = which % 2 == 0 ? 1 : o->writers;
      char id[96];
      snprintf(id, sizeof id, "fill-%u-%s", run, names[which]);
      double t0 = now_s();
      bool ok;
      if (which < 2) {
        ok = fill_capstore(&switched, e.name, e.spool, s3_file, ch_file, id, writers);
        t[which][run] = now_s() - t0;
        double r0 = now_s();
        ok = ok && fill_verify(&e.cfg, o, id);
        t_read[which][run] = now_s() - r0;
      } else {
        char prefix[200];
        snprintf(prefix, sizeof prefix, "%speer/%s/", e.prefix, id);
        ok = fill_peer(&e.cfg, o, prefix, writers, payload);
        t[which][run] = now_s() - t0;
      }
      if (!ok) bad++, fprintf(stderr, "fill %s failed\n", id);
    }
    printf("fill run=%u capstore_serial_ms=%.0f capstore_writers_ms=%.0f peer_serial_ms=%.0f peer_writers_ms=%.0f"
           " read_serial_ms=%.0f read_writers_ms=%.0f\n",
           run, t[0][run] * 1e3, t[1][run] * 1e3, t[2][run] * 1e3, t[3][run] * 1e3, t_read[0][run] * 1e3,
           t_read[1][run] * 1e3);
  }
  double m[4];
  for (int i = 0; i < 4; i++) m[i] = median(t[i], o->runs);
  double mib = (double)o->chunks * (double)bytes / 1048576.0;
  /* The link's limit for a single writer: its bytes over store_inflight_max connections, plus one round trip. */
  double link_s = (double)o->chunks * (double)bytes / ((double)rate * e.cfg.service.store_inflight_max) + 2e-3 * o->delay_ms;
  printf("median fill backend=%s writers=%u chunks=%u chunk_kib=%u mib=%.1f delay_ms=%u rate_mbs=%u capstore_serial_ms=%.0f"
         " capstore_writers_ms=%.0f peer_serial_ms=%.0f peer_writers_ms=%.0f link_limit_ms=%.0f\n",
         backend(), o->writers, o->chunks, o->chunk_kib, mib, o->delay_ms, o->rate_mbs, m[0] * 1e3, m[1] * 1e3,
         m[2] * 1e3, m[3] * 1e3, link_s * 1e3);
  /* The whole array read back over the same WAN by one reader (refresh, then every chunk's ranges). */
  printf("median read backend=%s mib=%.1f read_serial_fill_ms=%.0f read_writers_fill_ms=%.0f one_connection_ms=%.0f\n",
         backend(), mib, median(t_read[0], o->runs) * 1e3, median(t_read[1], o->runs) * 1e3,
         ((double)o->chunks * (double)bytes / (double)rate + 2e-3 * o->delay_ms) * 1e3);
  printf("ratio fill capstore serial/writers=%.2f peer serial/writers=%.2f peer_serial/capstore_serial=%.2f"
         " peer_serial/capstore_writers=%.2f peer_writers/capstore_writers=%.2f link_limit/capstore_serial=%.2f\n",
         m[0] / m[1], m[2] / m[3], m[2] / m[0], m[2] / m[1], m[3] / m[1], link_s / m[0]);
  free(payload);
  close_cs(daemon);
  cs_tcp_switch_stop(s3_sw);
  cs_tcp_switch_stop(ch_sw);
  return bad == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  opts o = {.mode = argv[1], .runs = 7, .chunks = 0, .writes = 256, .writers = 8, .chunk_kib = 128, .delay_ms = 45,
            .rate_mbs = 10};
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--no-peer") == 0) {
      o.no_peer = true;
      continue;
    }
    if (i + 1 == argc) return usage();
    const char *name = argv[i], *value = argv[++i];
    if (strcmp(name, "--work") == 0) o.work = value;
    else if (strcmp(name, "--s3") == 0) o.s3_file = value;
    else if (strcmp(name, "--clickhouse") == 0) o.ch_file = value;
    else if (strcmp(name, "--runs") == 0) o.runs = (unsigned)strtoul(value, NULL, 10);
    else if (strcmp(name, "--chunks") == 0) o.chunks = (unsigned)strtoul(value, NULL, 10);
    else if (strcmp(name, "--writes") == 0) o.writes = (unsigned)strtoul(value, NULL, 10);
    else if (strcmp(name, "--writers") == 0) o.writers = (unsigned)strtoul(value, NULL, 10);
    else if (strcmp(name, "--chunk-kib") == 0) o.chunk_kib = (unsigned)strtoul(value, NULL, 10);
    else if (strcmp(name, "--delay-ms") == 0) o.delay_ms = (unsigned)strtoul(value, NULL, 10);
    else if (strcmp(name, "--rate-mbs") == 0) o.rate_mbs = (unsigned)strtoul(value, NULL, 10);
    else if (strcmp(name, "--name") == 0) o.name = value;
    else if (strcmp(name, "--spool") == 0) o.spool = value;
    else if (strcmp(name, "--id") == 0) o.id = value;
    else if (strcmp(name, "--k") == 0) o.k = (unsigned)strtoul(value, NULL, 10);
    else return usage();
  }
  if (o.work == NULL || o.runs == 0 || o.runs > RUNS_MAX || o.writes == 0 || !live_load(&o)) return usage();
  if (mkdir(o.work, 0755) != 0 && errno != EEXIST) return fprintf(stderr, "mkdir %s: %s\n", o.work, strerror(errno)), 1;
  if (strcmp(o.mode, "progress") == 0) {
    if (o.chunks == 0) o.chunks = 16384;
    return run_progress(&o);
  }
  if (strcmp(o.mode, "write") == 0) return run_write(&o);
  if (strcmp(o.mode, "fill") == 0 || strcmp(o.mode, "fill-writer") == 0) {
    if (o.chunks == 0) o.chunks = 128;
    if (o.chunk_kib == 0 || o.chunk_kib > 65536 || o.rate_mbs == 0) return usage();
    if (strcmp(o.mode, "fill") == 0) return run_fill(&o);
    if (o.name == NULL || o.spool == NULL || o.id == NULL || o.writers == 0 || o.k >= o.writers) return usage();
    return run_fill_writer(&o);
  }
  if (strcmp(o.mode, "slice") == 0) {
    if (o.chunks == 0) o.chunks = 16;
    return run_slice(&o);
  }
  if (strcmp(o.mode, "smoke") == 0) {
    o.runs = 3;
    o.chunks = 512;
    int rc = run_progress(&o);
    o.writes = 32;
    if (rc == 0) rc = run_write(&o);
    o.chunks = 4;
    if (rc == 0) rc = run_slice(&o);
    return rc;
  }
  return usage();
}

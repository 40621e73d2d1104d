/*
 * array_client: one writer process of a capture array, and the check of the
 * whole array, for tests/arrays_live.sh (8 processes filling one array).
 *
 * The array: float32, shape 16 x 4096 x 64 in chunks of 1 x 512 x 64
 * (128 KiB each, 128 chunks), codec raw or blosc.
 *
 *   array_client fill CAPTURE_CONFIG ACCESS_CONFIG ID CODEC K N REPORT
 *       writer K of N: opens CAPTURE_CONFIG (a capture-role process beside
 *       the daemon) and a writer of array ID on ACCESS_CONFIG (the daemon's
 *       store and catalog); writes every slot s >= N with s % N == K, with
 *       the reference content, and tries every contested slot s < N with
 *       content of its own (writer K's), then flushes. REPORT gets one
 *       line per contested slot, "<slot> accepted|refused", and the counts.
 *       Exit 0 when every write is answered (accepted or refused) and every
 *       own slot is accepted.
 *   array_client stale-claims ACCESS_CONFIG ID FIRST COUNT
 *       plants claims an hour old on slots FIRST .. FIRST+COUNT-1, as a
 *       writer that died between its claims and its records leaves them:
 *       the fill must take them over (arrays.claim_ttl, 15 min by default).
 *   array_client verify ACCESS_CONFIG ID CODEC N REPORT_DIR DUMP_DIR
 *       reads the reports of the N writers: each contested slot accepted by
 *       exactly one of them. Opens the array: complete, its stamp stable,
 *       every slot written; reads it whole and checks every chunk (the
 *       contested ones with their winner's content), and a few slices. Dumps
 *       chunk 9's stored record (found by search and read back through the
 *       reader) and its elements into DUMP_DIR for python3-blosc.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capstore/capstore.h"

#define CONTESTED_MAX 64u

static cs_array_meta meta_of(const char *id, const char *codec) {
  cs_array_geometry g = {.dims = 3, .shape = {16, 4096, 64}, .chunk = {1, 512, 64}};
  cs_array_meta m;
  char msg[160];
  if (cs_array_meta_make(&m, id, &g, CS_DTYPE_FLOAT32, strcmp(codec, "blosc") == 0 ? CS_ARRAY_CODEC_BLOSC : CS_ARRAY_CODEC_NONE,
                         "{\"test\": \"arrays_live\"}", msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "array_client: meta: %s\n", msg);
    exit(2);
  }
  return m;
}

/* Chunk `slot`'s elements as writer `writer` writes them: the reference (writer -1) or writer's own. */
static void chunk_fill(const cs_array_meta *m, uint64_t slot, int writer, float *out, size_t n) {
  (void)m;
  for (size_t i = 0; i < n; i++)
    out[i] = (float)slot * 1000.0f + (float)(i % 997) * 0.25f + (writer < 0 ? 0.0f : 100000.0f * (float)(writer + 1));
}

static int load(const char *path, capstore_settings **s) {
  char msg[512];
  if (capstore_settings_new(s) != CS_E_OK || capstore_settings_load(*s, path, msg, sizeof msg) != CS_E_OK ||
      capstore_settings_validate(*s, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "array_client: %s: %s\n", path, msg);
    return 2;
  }
  return 0;
}

static int fill(const char *capture_path, const char *access_path, const char *id, const char *codec, int k, int n,
                const char *report_path) {
  capstore_settings *cap_s = NULL, *acc_s = NULL;
  if (load(capture_path, &cap_s) != 0 || load(access_path, &acc_s) != 0) return 2;
  char msg[512];
  capstore *cs = NULL;
  if (capstore_open(capstore_settings_config(cap_s), &cs, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "array_client %d: open: %s\n", k, msg);
    return 3;
  }
  cs_array_meta m = meta_of(id, codec);
  capstore_array_writer *w = NULL;
  if (capstore_array_writer_open(cs, capstore_settings_config(acc_s), &m, &w, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "array_client %d: writer: %s\n", k, msg);
    return 3;
  }
  uint64_t chunks = cs_array_chunk_count(&m.geometry);
  size_t bytes = (size_t)cs_array_chunk_bytes(&m.geometry, 0);
  float *buf = malloc(bytes);
  int bad = 0, refused_at_once = 0;
  bool contested_refused[CONTESTED_MAX] = {false};
  /* Contested slots first, in an order of this writer's own, so the writers race for them. */
  for (int j = 0; j < n; j++) {
    uint64_t slot = (uint64_t)((j + k) % n);
    chunk_fill(&m, slot, k, buf, bytes / 4);
    int rc = capstore_array_write_chunk(w, slot, buf, bytes, msg, sizeof msg);
    if (rc == CS_E_SLOT_WRITTEN) {
      contested_refused[slot] = true, refused_at_once++;
    } else if (rc != CS_E_OK) {
      fprintf(stderr, "array_client %d: write %" PRIu64 ": %s\n", k, slot, msg);
      bad++;
    }
  }
  uint64_t own = 0;
  for (uint64_t slot = (uint64_t)n; slot < chunks; slot++) {
    if (slot % (uint64_t)n != (uint64_t)k) continue;
    chunk_fill(&m, slot, -1, buf, bytes / 4);
    if (capstore_array_write_chunk(w, slot, buf, bytes, msg, sizeof msg) != CS_E_OK) {
      fprintf(stderr, "array_client %d: write %" PRIu64 ": %s\n", k, slot, msg);
      bad++;
    }
    own++;
  }
  capstore_array_flush_report rep;
  int rc = capstore_array_flush(w, capstore_clock_ns() + 120 * CS_SEC_NS, &rep, msg, sizeof msg);
  if (rc != CS_E_OK && rc != CS_E_SLOT_WRITTEN) {
    fprintf(stderr, "array_client %d: flush: %s (%s)\n", k, cs_strerror(rc), msg);
    bad++;
  }
  FILE *f = fopen(report_path, "w");
  if (f == NULL) return 4;
  /* A contested slot is ours when it was not refused at once and not named refused by the flush. */
  for (int slot = 0; slot < n; slot++) {
    bool refused = contested_refused[slot];
    for (uint32_t i = 0; i < rep.refused_named; i++) refused |= rep.refused_slots[i] == (uint64_t)slot;
    fprintf(f, "%d %s\n", slot, refused ? "refused" : "accepted");
  }
  fprintf(f, "writes %" PRIu64 " accepted %" PRIu64 " refused %" PRIu64 " owed %" PRIu64 " refused_at_once %d taken_over %" PRIu64 "\n",
          rep.writes, rep.accepted, rep.refused, rep.owed, refused_at_once, rep.claims_taken_over);
  fclose(f);
  if (rep.refused > CS_ARRAY_REFUSED_NAMED || rep.owed != 0 || rep.accepted < own) bad++;
  capstore_array_writer_free(w);
  if (capstore_close(cs, 60 * CS_SEC_NS, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "array_client %d: close: %s\n", k, msg);
    bad++;
  }
  capstore_free(cs);
  capstore_settings_free(cap_s);
  capstore_settings_free(acc_s);
  free(buf);
  printf("writer %d: %" PRIu64 " writes, %" PRIu64 " accepted, %" PRIu64 " refused (%d at once)\n", k, rep.writes,
         rep.accepted, rep.refused + (uint64_t)refused_at_once, refused_at_once);
  return bad == 0 ? 0 : 1;
}

static int write_file(const char *path, const void *bytes, size_t len) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(bytes, 1, len, f) != len) return -1;
  return fclose(f);
}

/* Chunk 9's stored record through the ordinary reader (search by the array's descriptor fields, then read). */
static int dump_stored(capstore_reader *r, const char *id, uint64_t slot, const char *path) {
  cs_search_filter f;
  memset(&f, 0, sizeof f);
  cs_pack_text hook = cs_pack_text_of(CS_ARRAY_HOOK_CHUNK);
  f.hook_names = &hook, f.hook_name_count = 1;
  f.run_id = cs_pack_text_of(id);
  f.has_step = true, f.step_min = f.step_max = slot;
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  char msg[512];
  if (capstore_search(r, &f, NULL, 16, &sel, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "array_client: search: %s\n", msg);
    return 1;
  }
  capstore_read_options opt;
  capstore_read_options_default(&opt);
  capstore_payloads p;
  memset(&p, 0, sizeof p);
  int rc = capstore_read(r, &sel, &opt, &p, msg, sizeof msg);
  if (rc != CS_E_OK || p.count != 1) {
    fprintf(stderr, "array_client: read of slot %" PRIu64 "'s record: %s (%u records)\n", slot, msg,
            rc == CS_E_OK ? p.count : 0);
    return 1;
  }
  rc = write_file(path, p.bytes[0], (size_t)p.length[0]);
  capstore_payloads_free(&p);
  capstore_selection_free(&sel);
  return rc == 0 ? 0 : 1;
}

static int verify(const char *access_path, const char *id, const char *codec, int n, const char *report_dir,
                  const char *dump_dir) {
  int winner[CONTESTED_MAX];
  for (int s = 0; s < n; s++) winner[s] = -1;
  int bad = 0;
  for (int k = 0; k < n; k++) {
    char path[1024], word[16];
    snprintf(path, sizeof path, "%s/writer-%d.txt", report_dir, k);
    FILE *f = fopen(path, "r");
    if (f == NULL) return fprintf(stderr, "array_client: no report %s\n", path), 1;
    int slot = 0;
    while (fscanf(f, "%d %15s", &slot, word) == 2) {
      if (slot < 0 || slot >= n || strcmp(word, "accepted") != 0) continue;
      if (winner[slot] >= 0) fprintf(stderr, "array_client: slot %d accepted by writers %d and %d\n", slot, winner[slot], k), bad++;
      winner[slot] = k;
    }
    fclose(f);
  }
  for (int s = 0; s < n; s++)
    if (winner[s] < 0) fprintf(stderr, "array_client: contested slot %d accepted by nobody\n", s), bad++;
  capstore_settings *acc_s = NULL;
  if (load(access_path, &acc_s) != 0) return 2;
  char msg[512];
  capstore_reader *r = NULL;
  if (capstore_reader_open(capstore_settings_config(acc_s), &r, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "array_client: reader: %s\n", msg), 3;
  capstore_array *a = NULL;
  if (capstore_array_open(r, id, &a, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "array_client: open %s: %s\n", id, msg), 3;
  cs_array_meta m = meta_of(id, codec);
  const cs_array_meta *got = capstore_array_meta(a);
  char diff[64];
  if (cs_array_meta_diff(got, &m, diff, sizeof diff) != NULL) fprintf(stderr, "array_client: geometry differs\n"), bad++;
  cs_array_stamp st, st2;
  capstore_array_stamp(a, &st);
  uint64_t chunks = cs_array_chunk_count(&m.geometry), written = 0;
  uint8_t bits[64];
  capstore_array_written(a, bits, sizeof bits, &written);
  if (st.state != CS_ARRAY_COMPLETE || written != chunks)
    fprintf(stderr, "array_client: not complete: state %u, %" PRIu64 " of %" PRIu64 " written\n", st.state, written,
            chunks), bad++;
  size_t total = (size_t)cs_array_total_bytes(&m.geometry);
  float *all = malloc(total), *want = malloc(total), *chunk = malloc((size_t)cs_array_chunk_bytes(&m.geometry, 0));
  cs_array_slice s;
  memset(&s, 0, sizeof s);
  for (uint32_t d = 0; d < 3; d++) s.stop[d] = m.geometry.shape[d];
  capstore_array_read_stats stats;
  if (capstore_array_read(a, &s, all, total, NULL, 0, &stats, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "array_client: read: %s\n", msg), 1;
  /* The expected array: every chunk's content, its winner's for the contested ones. */
  cs_array_slice_iter it;
  cs_array_slice_begin(&it, &m.geometry, &s);
  cs_array_piece p;
  while (cs_array_slice_next(&it, &p)) {
    size_t n_el = (size_t)cs_array_chunk_bytes(&m.geometry, p.chunk_index) / 4;
    chunk_fill(&m, p.chunk_index, p.chunk_index < (uint64_t)n ? winner[p.chunk_index] : -1, chunk, n_el);
    cs_array_piece_copy(&m.geometry, &s, &p, (uint8_t *)chunk, (uint8_t *)want, true);
  }
  if (memcmp(all, want, total) != 0) {
    size_t i = 0;
    while (all[i] == want[i]) i++;
    fprintf(stderr, "array_client: element %zu read %g, want %g\n", i, (double)all[i], (double)want[i]);
    bad++;
  }
  /* A slice inside one chunk row: [3, 4) x [700, 1300) x [5, 9). */
  cs_array_slice one;
  memset(&one, 0, sizeof one);
  one.start[0] = 3, one.stop[0] = 4, one.start[1] = 700, one.stop[1] = 1300, one.start[2] = 5, one.stop[2] = 9;
  float part[600 * 4];
  if (capstore_array_read(a, &one, part, sizeof part, NULL, 0, NULL, msg, sizeof msg) != CS_E_OK)
    return fprintf(stderr, "array_client: slice read: %s\n", msg), 1;
  for (uint64_t y = 0; y < 600; y++)
    for (uint64_t x = 0; x < 4; x++)
      if (part[y * 4 + x] != want[(3 * 4096 + 700 + y) * 64 + 5 + x]) {
        fprintf(stderr, "array_client: slice element (%" PRIu64 ", %" PRIu64 ") differs\n", y, x);
        bad++;
        y = 600;
        break;
      }
  if (capstore_array_refresh(a, msg, sizeof msg) != CS_E_OK) fprintf(stderr, "array_client: refresh: %s\n", msg), bad++;
  capstore_array_stamp(a, &st2);
  if (!cs_array_stamp_equal(&st, &st2)) fprintf(stderr, "array_client: a complete stamp changed\n"), bad++;
  char path[1024];
  snprintf(path, sizeof path, "%s/chunk9.stored", dump_dir);
  bad += dump_stored(r, id, 9, path);
  snprintf(path, sizeof path, "%s/chunk9.elements", dump_dir);
  chunk_fill(&m, 9, -1, chunk, (size_t)cs_array_chunk_bytes(&m.geometry, 9) / 4);
  if (write_file(path, chunk, (size_t)cs_array_chunk_bytes(&m.geometry, 9)) != 0) bad++;
  printf("verify %s: %" PRIu64 " chunks, %s, %" PRIu64 " ranged reads for the whole array, %d problems\n", id, chunks,
         st.state == CS_ARRAY_COMPLETE ? "complete" : "incomplete", stats.chunks.fetches, bad);
  free(all);
  free(want);
  free(chunk);
  capstore_array_close(a);
  capstore_reader_free(r);
  capstore_settings_free(acc_s);
  return bad == 0 ? 0 : 1;
}

/* Claims an hour old on slots first .. first + count - 1, holding a nonce no writer has: a dead writer's. */
static int stale_claims(const char *access_path, const char *id, uint64_t first, uint64_t count) {
  capstore_settings *s = NULL;
  if (load(access_path, &s) != 0) return 2;
  const capstore_config *cfg = capstore_settings_config(s);
  char msg[512], prefix[CS_KEY_MAX], key[CS_KEY_MAX], body[CS_ARRAY_CLAIM_BYTES_MAX];
  cs_store st;
  if (capstore_open_store(cfg, &st, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "array_client: store: %s\n", msg);
    return 3;
  }
  capstore_key_prefix(cfg, prefix, sizeof prefix);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t at = ((uint64_t)now.tv_sec - 3600) * 1000000000u;
  size_t len = 0;
  if (cs_array_claim_format("deaddeaddeaddeaddeaddeaddeaddead", at, body, &len) != CS_E_OK) return 2;
  int bad = 0;
  for (uint64_t slot = first; slot < first + count; slot++) {
    snprintf(key, sizeof key, "%.700sarrays/%s/slots/%" PRIu64, prefix, id, slot);
    cs_store_result res;
    memset(&res, 0, sizeof res);
    if (st.ops->put(st.self, key, body, len, NULL, true, &res) != CS_E_OK || res.outcome != CS_OUT_OK)
      fprintf(stderr, "array_client: claim %s: %s\n", key, res.detail), bad++;
  }
  cs_store_close(&st);
  capstore_settings_free(s);
  return bad == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 9 && strcmp(argv[1], "fill") == 0) {
    int k = atoi(argv[6]), n = atoi(argv[7]);
    if (n < 1 || n > (int)CONTESTED_MAX || k < 0 || k >= n) return 2;
    return fill(argv[2], argv[3], argv[4], argv[5], k, n, argv[8]);
  }
  if (argc == 8 && strcmp(argv[1], "verify") == 0) {
    int n = atoi(argv[5]);
    if (n < 1 || n > (int)CONTESTED_MAX) return 2;
    return verify(argv[2], argv[3], argv[4], n, argv[6], argv[7]);
  }
  if (argc == 6 && strcmp(argv[1], "stale-claims") == 0)
    return stale_claims(argv[2], argv[3], strtoull(argv[4], NULL, 10), strtoull(argv[5], NULL, 10));
  fprintf(stderr, "usage: array_client fill CAPTURE ACCESS ID raw|blosc K N REPORT\n"
                  "       array_client verify ACCESS ID raw|blosc N REPORT_DIR DUMP_DIR\n"
                  "       array_client stale-claims ACCESS ID FIRST COUNT\n");
  return 2;
}

/*
 * Reading a capture array (capstore/arrays.h, docs/arrays.md): each slot's
 * winner from one catalog request, the stamp, and slice reads that fetch
 * only the verification units (Blosc blocks) a slice needs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/arrays.h"
#include "../runtime/array_internal.h"
#include "reader_internal.h"

/* A written slot: its winner's place. Packs' keys are kept once each (pack_keys). */
typedef struct ar_slot {
  uint64_t slot;
  uint64_t nonce;   /* the winner's nonce, hashed to 64 bits: what "the same winner" compares */
  uint64_t offset;  /* the record in its pack */
  uint64_t stored_length;
  uint64_t first_version;
  uint32_t pack;    /* index into pack_keys */
} ar_slot;

typedef struct ar_winners {
  ar_slot *slots; /* ascending by slot */
  size_t count, cap;
  char (*pack_keys)[CS_KEY_MAX];
  cs_uuid *pack_ids;
  size_t pack_count, pack_cap;
  bool no_memory;
  uint64_t bad_slot;  /* a slot whose record's place wraps past 2^64 (+1: 0 when none) */
  uint64_t geometry_nonce; /* rt_array_nonce_hash of the geometry's winner */
} ar_winners;

struct capstore_array {
  capstore_reader *r;
  char id[CS_ARRAY_ID_MAX + 1];
  cs_array_meta meta;
  uint64_t chunks;
  ar_winners w;
  cs_array_stamp stamp;
  uint32_t last_requests; /* catalog requests of the last refresh */
};

static void winners_free(ar_winners *w) {
  free(w->slots);
  free(w->pack_keys);
  free(w->pack_ids);
  memset(w, 0, sizeof *w);
}

static uint32_t pack_index(ar_winners *w, const cs_array_candidate *c) {
  for (size_t i = w->pack_count; i > 0; i--) /* candidates of one pack tend to come together: look back first */
    if (cs_uuid_equal(&w->pack_ids[i - 1], &c->pack_id)) return (uint32_t)(i - 1);
  if (w->pack_count == w->pack_cap) {
    size_t cap = w->pack_cap == 0 ? 16 : 2 * w->pack_cap;
    char(*keys)[CS_KEY_MAX] = realloc(w->pack_keys, cap * sizeof *keys);
    if (keys != NULL) w->pack_keys = keys;
    cs_uuid *ids = realloc(w->pack_ids, cap * sizeof *ids);
    if (ids != NULL) w->pack_ids = ids;
    if (keys == NULL || ids == NULL) return UINT32_MAX;
    w->pack_cap = cap;
  }
  memcpy(w->pack_keys[w->pack_count], c->key, CS_KEY_MAX);
  w->pack_ids[w->pack_count] = c->pack_id;
  return (uint32_t)w->pack_count++;
}

static int winner_add(void *ctx, const cs_array_candidate *c) {
  ar_winners *w = ctx;
  if (c->stored_length > UINT64_MAX - c->offset) { /* a catalog row no writer made: every read of it would wrap */
    w->bad_slot = c->slot + 1;
    return 1;
  }
  if (w->count == w->cap) {
    size_t cap = w->cap == 0 ? 256 : 2 * w->cap;
    ar_slot *grown = realloc(w->slots, cap * sizeof *grown);
    if (grown == NULL) {
      w->no_memory = true;
      return 1;
    }
    w->slots = grown;
    w->cap = cap;
  }
  uint32_t pack = pack_index(w, c);
  if (pack == UINT32_MAX) {
    w->no_memory = true;
    return 1;
  }
  w->slots[w->count++] = (ar_slot){.slot = c->slot, .nonce = rt_array_nonce_hash(&c->nonce), .offset = c->offset,
                                   .stored_length = c->stored_length, .first_version = c->first_version,
                                   .pack = pack};
  return 0;
}

/* One walk of the array's candidates into *w (emptied first); *walk gets the geometry's winner. */
static int winners_ask(capstore_reader *r, const char *id, uint64_t chunks, ar_winners *w, rt_array_walk *walk,
                       char *msg, size_t msg_size) {
  winners_free(w);
  memset(walk, 0, sizeof *walk);
  walk->chunks = chunks;
  walk->winner = winner_add;
  walk->ctx = w;
  int rc = rt_array_winners(&r->catalog, &r->kind_checked, id, walk, msg, msg_size);
  if (w->no_memory) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "array %s: no memory for its slots", id);
  if (w->bad_slot != 0)
    return rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: the catalog places slot %llu's record past the end of "
                     "any object (offset + length over 2^64)", id, (unsigned long long)(w->bad_slot - 1));
  if (rc == CS_E_OK && walk->have_geometry) {
    cs_pack_text nonce = cs_pack_text_of(walk->geometry_nonce);
    w->geometry_nonce = rt_array_nonce_hash(&nonce);
  }
  return rc;
}

static const ar_slot *slot_find(const ar_winners *w, uint64_t slot) {
  size_t lo = 0, hi = w->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->slots[mid].slot < slot)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < w->count && w->slots[lo].slot == slot ? &w->slots[lo] : NULL;
}

/* The stamp from the winners: the first accepted write (lowest first version, then slot) gives the identity. */
static int stamp_of(const capstore_array *a, const ar_winners *w, cs_array_stamp *out) {
  uint64_t nonce = 0, first = UINT64_MAX, last = 0;
  for (size_t i = 0; i < w->count; i++) {
    const ar_slot *s = &w->slots[i];
    if (s->first_version < first) first = s->first_version, nonce = s->nonce;
    if (s->first_version > last) last = s->first_version;
  }
  return cs_array_stamp_make(&a->meta.geometry, nonce, w->count, last, out);
}

/*
 * Takes a fresh answer: every slot written before keeps its winner (a
 * visible slot never changes), the geometry stays, then it replaces the
 * last one.
 */
static int winners_take(capstore_array *a, ar_winners *fresh, char *msg, size_t msg_size) {
  if (fresh->geometry_nonce != a->w.geometry_nonce)
    return rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: its geometry record changed or vanished", a->id);
  for (size_t i = 0; i < a->w.count; i++) {
    const ar_slot *old = &a->w.slots[i];
    const ar_slot *now = slot_find(fresh, old->slot);
    if (now == NULL || now->nonce != old->nonce)
      return rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: slot %llu %s since it was visible", a->id,
                    (unsigned long long)old->slot, now == NULL ? "vanished" : "changed its winner");
  }
  cs_array_stamp stamp;
  if (stamp_of(a, fresh, &stamp) != CS_E_OK)
    return rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: the catalog's slots cannot be this array's", a->id);
  winners_free(&a->w);
  a->w = *fresh;
  memset(fresh, 0, sizeof *fresh);
  a->stamp = stamp;
  return CS_E_OK;
}

void capstore_array_close(capstore_array *a) {
  if (a == NULL) return;
  winners_free(&a->w);
  free(a);
}

int capstore_array_open(capstore_reader *r, const char *id, capstore_array **out, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (out != NULL) *out = NULL;
  if (r == NULL || id == NULL || out == NULL)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "capstore_array_open: a NULL argument");
  char why[160];
  if (cs_array_id_check(id, why, sizeof why) != CS_E_OK)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array id: %s", why);
  capstore_array *a = calloc(1, sizeof *a);
  if (a == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for an array");
  a->r = r;
  snprintf(a->id, sizeof a->id, "%s", id);
  ar_winners first;
  memset(&first, 0, sizeof first);
  rt_array_walk walk;
  pthread_mutex_lock(&r->lock);
  int rc = winners_ask(r, id, 0, &first, &walk, msg, msg_size); /* the geometry (no slots: their count is unknown) */
  if (rc == CS_E_OK && !walk.have_geometry)
    rc = rt_refuse(CS_E_NOT_FOUND, msg, msg_size, "array %s: no geometry of it is visible in the catalog", id);
  if (rc == CS_E_OK) rc = rt_array_geometry_fetch(&r->store, &walk.geometry, walk.geometry_hash, &a->meta, msg, msg_size);
  if (rc == CS_E_OK && strcmp(a->meta.id, id) != 0)
    rc = rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: its geometry record names array %s", id, a->meta.id);
  if (rc == CS_E_OK) {
    a->chunks = cs_array_chunk_count(&a->meta.geometry);
    a->w.geometry_nonce = first.geometry_nonce;
  }
  winners_free(&first);
  pthread_mutex_unlock(&r->lock);
  if (rc == CS_E_OK) rc = capstore_array_refresh(a, msg, msg_size);
  if (rc != CS_E_OK) {
    capstore_array_close(a);
    return rc;
  }
  *out = a;
  return CS_E_OK;
}

const cs_array_meta *capstore_array_meta(const capstore_array *a) { return a == NULL ? NULL : &a->meta; }

static int refresh_locked(capstore_array *a, char *msg, size_t msg_size) {
  ar_winners fresh;
  memset(&fresh, 0, sizeof fresh);
  rt_array_walk walk;
  int rc = winners_ask(a->r, a->id, a->chunks, &fresh, &walk, msg, msg_size);
  a->last_requests = walk.requests;
  if (rc == CS_E_OK && !walk.have_geometry)
    rc = rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: its geometry record vanished", a->id);
  if (rc == CS_E_OK) rc = winners_take(a, &fresh, msg, msg_size);
  winners_free(&fresh);
  return rc;
}

int capstore_array_refresh(capstore_array *a, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (a == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "capstore_array_refresh: a NULL array");
  pthread_mutex_lock(&a->r->lock);
  int rc = refresh_locked(a, msg, msg_size);
  pthread_mutex_unlock(&a->r->lock);
  return rc;
}

void capstore_array_stamp(const capstore_array *a, cs_array_stamp *out) {
  if (a != NULL && out != NULL) *out = a->stamp;
}

int capstore_array_written(const capstore_array *a, uint8_t *bitmap, size_t bitmap_bytes, uint64_t *written) {
  if (a == NULL || bitmap == NULL) return CS_E_INVALID_ARGUMENT;
  if (bitmap_bytes < (a->chunks + 7) / 8) return CS_E_NO_MEMORY;
  memset(bitmap, 0, bitmap_bytes);
  for (size_t i = 0; i < a->w.count; i++) bitmap[a->w.slots[i].slot / 8] |= (uint8_t)(1u << (a->w.slots[i].slot % 8));
  if (written != NULL) *written = a->w.count;
  return CS_E_OK;
}

/* ---- read ------------------------------------------------------------------------------------------------- */

/*
 * A slice's chunks are read side by side. cs_array_read_piece asks for its ranges in stages (the trailer,
 * then the units it names; for Blosc the prefix, then the blocks it names), each stage depending on the one
 * before. So each piece of a batch is run against what was fetched for it so far; the ranges not there yet
 * are noted (every one the stage names) and the run stops (CS_E_WOULD_BLOCK). The noted ranges of the whole
 * batch then go out together through the store's asynchronous form, and the pieces run again, until each
 * completes: 2 rounds for a raw chunk, 3 for Blosc (one more where a unit table exceeds the trailer's read).
 * Over a WAN a whole-array read costs a few round trips per batch instead of two per chunk. A batch holds at
 * most AR_BATCH pieces and AR_BATCH_BYTES of their stored bytes (what it may fetch and keep at once).
 */
#define AR_BATCH 64u                              /* pieces read at once */
#define AR_BATCH_BYTES ((uint64_t)256 << 20)      /* their stored bytes (a larger piece goes alone) */
#define AR_IN_FLIGHT 32u                          /* GETs a batch keeps in flight */

typedef struct ar_range {
  uint64_t offset, length; /* in the record */
  uint8_t *bytes;          /* fetched (NULL while wanted) */
} ar_range;

typedef struct ar_job {
  cs_array_piece piece;
  const char *key;
  uint64_t base, stored_len;
  ar_range *ranges; /* fetched, then the ones the last run wanted */
  uint32_t count, cap;
  bool done;
} ar_job;

/*
 * One GET of a round: the wanted ranges parts[first, first + count) of one pack object, sorted by place, whose
 * gaps are at most AR_MERGE_GAP: neighbouring chunks' payloads (each followed by the last 4 KiB of its record,
 * fetched the round before, and under 64 bytes of padding) come in one ranged read instead of one each. A
 * gap as large as a payload is not bridged: the bytes read would be a chunk's, fetched again next round.
 */
#define AR_MERGE_GAP ((uint64_t)4096 + 64) /* bytes of a gap read rather than split into two GETs */
#define AR_MERGE_MAX ((uint64_t)64 << 20)  /* the most one merged GET reads */

typedef struct ar_part {
  ar_job *job;
  uint32_t range;
  uint64_t at; /* in the object: job->base + the range's offset */
} ar_part;

typedef struct ar_get {
  uint32_t first, count; /* parts */
  uint64_t at, length;   /* in the object */
  bool flying;           /* started, not yet reaped */
  cs_store_request req;
} ar_get;

static void job_release(ar_job *j) {
  for (uint32_t i = 0; i < j->count; i++) free(j->ranges[i].bytes);
  free(j->ranges);
  j->ranges = NULL;
  j->count = j->cap = 0;
}

static int fetched_range(void *ctx, uint64_t offset, uint64_t length, uint8_t *out, char *msg, size_t msg_size) {
  ar_job *j = ctx;
  for (uint32_t i = 0; i < j->count; i++) {
    const ar_range *g = &j->ranges[i];
    if (g->bytes != NULL && offset >= g->offset && length <= g->length && offset - g->offset <= g->length - length) {
      memcpy(out, g->bytes + (offset - g->offset), (size_t)length);
      return CS_E_OK;
    }
  }
  if (j->count == j->cap) {
    uint32_t cap = j->cap == 0 ? 4 : 2 * j->cap;
    ar_range *grown = realloc(j->ranges, cap * sizeof *grown);
    if (grown == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for a chunk's ranges");
    j->ranges = grown;
    j->cap = cap;
  }
  j->ranges[j->count++] = (ar_range){.offset = offset, .length = length, .bytes = NULL};
  return CS_E_WOULD_BLOCK;
}

static int part_cmp(const void *x, const void *y) {
  const ar_part *a = x, *b = y;
  int k = a->job->key == b->job->key ? 0 : strcmp(a->job->key, b->job->key);
  if (k != 0) return k;
  return (a->at > b->at) - (a->at < b->at);
}

/*
 * Hands each part of an answered GET its bytes: the GET's own buffer where it is the only part (*kept: the
 * caller must not free it), else a copy each.
 */
static int get_answer(ar_get *g, ar_part *parts, cs_array_read_stats *stats, bool *kept, char *msg, size_t msg_size) {
  const cs_store_request *q = &g->req;
  const char *key = parts[g->first].job->key;
  *kept = false;
  unsigned long long chunk = (unsigned long long)parts[g->first].job->piece.chunk_index;
  const char *and_more = g->count > 1 ? " and its neighbours" : "";
  if (q->rc != CS_E_OK)
    return rt_refuse(q->rc, msg, msg_size, "GET %s (chunk %llu%s): %s", key, chunk, and_more, cs_strerror(q->rc));
  if (q->res.outcome != CS_OUT_OK || q->got != g->length)
    return rt_refuse(CS_E_IO, msg, msg_size, "GET %s [%llu, +%llu) (chunk %llu%s): %s", key,
                     (unsigned long long)g->at, (unsigned long long)g->length, chunk, and_more,
                     q->res.detail[0] != '\0' ? q->res.detail : "short read");
  stats->fetches++;
  stats->bytes_fetched += g->length;
  if (g->count == 1) {
    parts[g->first].job->ranges[parts[g->first].range].bytes = q->buf;
    *kept = true;
    return CS_E_OK;
  }
  for (uint32_t i = g->first; i < g->first + g->count; i++) {
    ar_range *want = &parts[i].job->ranges[parts[i].range];
    if (parts[i].at < g->at || want->length > g->length || parts[i].at - g->at > g->length - want->length)
      return rt_refuse(CS_E_STATE, msg, msg_size, "GET %s: chunk %llu's range lies outside its merged read", key,
                       (unsigned long long)parts[i].job->piece.chunk_index); /* gets_plan never makes one */
    uint8_t *bytes = malloc((size_t)want->length + 1);
    if (bytes == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for a chunk's read");
    memcpy(bytes, (const uint8_t *)q->buf + (parts[i].at - g->at), (size_t)want->length);
    want->bytes = bytes;
  }
  return CS_E_OK;
}

/* The wanted ranges of a batch, sorted by object and place, grouped into GETs (gets: room for one a part). */
static uint32_t gets_plan(ar_job *jobs, uint32_t n, ar_part *parts, ar_get *gets) {
  uint32_t total = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t k = 0; k < jobs[i].count; k++)
      if (jobs[i].ranges[k].bytes == NULL)
        parts[total++] = (ar_part){.job = &jobs[i], .range = k, .at = jobs[i].base + jobs[i].ranges[k].offset};
  qsort(parts, total, sizeof *parts, part_cmp);
  uint32_t count = 0;
  for (uint32_t i = 0; i < total; i++) {
    uint64_t end = parts[i].at + parts[i].job->ranges[parts[i].range].length;
    ar_get *g = count > 0 ? &gets[count - 1] : NULL;
    if (g != NULL && end >= parts[i].at && strcmp(parts[g->first].job->key, parts[i].job->key) == 0) {
      uint64_t g_end = g->at + g->length, joined_end = end > g_end ? end : g_end;
      if (parts[i].at <= g_end + AR_MERGE_GAP && joined_end - g->at <= AR_MERGE_MAX) { /* sorted: at >= g->at */
        g->count++;
        g->length = joined_end - g->at;
        continue;
      }
    }
    gets[count++] = (ar_get){.first = i, .count = 1, .at = parts[i].at, .length = end - parts[i].at};
  }
  return count;
}

/*
 * Fetches every wanted range of the batch, up to AR_IN_FLIGHT GETs in flight (cs_store_start: every store has
 * the form), neighbouring ones merged (gets_plan), counting each GET in stats. The first failure is the
 * answer; what is in flight is drained first.
 */
static int wants_fetch(capstore_reader *r, ar_job *jobs, uint32_t n, cs_array_read_stats *stats, char *msg,
                       size_t msg_size) {
  uint32_t wanted = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t k = 0; k < jobs[i].count; k++) wanted += jobs[i].ranges[k].bytes == NULL;
  ar_part *parts = calloc(wanted + 1, sizeof *parts);
  ar_get *gets = calloc(wanted + 1, sizeof *gets);
  if (parts == NULL || gets == NULL) {
    free(parts);
    free(gets);
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for an array read");
  }
  uint32_t total = gets_plan(jobs, n, parts, gets);
  int rc = CS_E_OK;
  uint32_t next = 0, in_flight = 0;
  for (;;) {
    while (rc == CS_E_OK && next < total && in_flight < AR_IN_FLIGHT) {
      ar_get *g = &gets[next];
      uint8_t *buf = malloc((size_t)g->length + 1);
      if (buf == NULL) {
        rc = rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for a chunk's read");
        break;
      }
      const char *key = parts[g->first].job->key;
      g->req = (cs_store_request){.op = CS_STORE_GET, .id = next, .key = key, .has_range = true,
                                  .range = {.offset = g->at, .length = g->length}, .buf = buf, .cap = (size_t)g->length};
      int started = cs_store_start(&r->store, &g->req);
      if (started == CS_E_FULL && in_flight > 0) {
        free(buf);
        break; /* the store's own bound: reap first */
      }
      if (started != CS_E_OK) {
        free(buf);
        rc = rt_refuse(started, msg, msg_size, "GET %s: %s", key, cs_strerror(started));
        break;
      }
      g->flying = true;
      in_flight++;
      next++;
    }
    if (in_flight == 0 && (rc != CS_E_OK || next == total)) break;
    cs_store_request *done = NULL;
    int got = cs_store_reap(&r->store, 1000, &done);
    if (got < 0) {
      /* The transfer engine failed with GETs in flight: the store keeps them, so the reader is broken and
         those requests and their buffers stay with it until the store is closed (capstore_reader_free). */
      r->broken = true;
      for (uint32_t i = 0; i < next; i++)
        if (gets[i].flying) rd_orphan(r, gets[i].req.buf);
      rd_orphan(r, gets);
      free(parts);
      return rt_refuse(got, msg, msg_size, "array read: the store failed with %u GETs in flight: %s", in_flight,
                       cs_strerror(got));
    }
    if (got != 1 || done == NULL) continue;
    in_flight--;
    ar_get *g = &gets[done->id];
    g->flying = false;
    bool kept = false;
    int answered = get_answer(g, parts, stats, &kept, msg, rc == CS_E_OK ? msg_size : 0);
    if (!kept) free(done->buf);
    if (rc == CS_E_OK) rc = answered;
  }
  free(gets);
  free(parts);
  return rc;
}

/* Reads a batch of written pieces (see above); the first failure is the answer. */
static int batch_read(capstore_array *a, const cs_array_slice *s, ar_job *jobs, uint32_t n, void *out,
                      capstore_array_read_stats *stats, char *msg, size_t msg_size) {
  for (;;) {
    bool waiting = false;
    for (uint32_t i = 0; i < n; i++) {
      ar_job *j = &jobs[i];
      if (j->done) continue;
      uint32_t before = j->count;
      cs_array_read_stats run = {0};
      char inner[256] = "";
      int rc = cs_array_read_piece(&a->meta, s, &j->piece, j->stored_len, fetched_range, j, out, &run, inner,
                                   sizeof inner);
      if (rc == CS_E_WOULD_BLOCK && j->count > before) {
        waiting = true;
        continue;
      }
      if (rc == CS_E_OK) {
        j->done = true;
        job_release(j);
        stats->chunks.units_verified += run.units_verified;
        stats->chunks.blocks_decoded += run.blocks_decoded;
        stats->chunks_read++;
        continue;
      }
      if (rc == CS_E_WOULD_BLOCK) rc = CS_E_STATE; /* blocked on nothing it named: never expected */
      return rt_refuse(rc, msg, msg_size, "array %s: chunk %llu: %s", a->id, (unsigned long long)j->piece.chunk_index,
                       inner);
    }
    if (!waiting) return CS_E_OK;
    int rc = wants_fetch(a->r, jobs, n, &stats->chunks, msg, msg_size);
    if (rc != CS_E_OK) return rc; /* every wanted range came, or the read ends here */
  }
}

int capstore_array_read(capstore_array *a, const cs_array_slice *s, void *out, size_t out_len, uint8_t *unwritten,
                        size_t unwritten_bytes, capstore_array_read_stats *stats, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  capstore_array_read_stats local;
  if (stats == NULL) stats = &local;
  memset(stats, 0, sizeof *stats);
  if (a == NULL || s == NULL || (out == NULL && out_len > 0))
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "capstore_array_read: a NULL argument");
  char why[160];
  if (cs_array_slice_check(&a->meta.geometry, s, why, sizeof why) != CS_E_OK)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array %s: slice: %s", a->id, why);
  uint64_t want = cs_array_slice_elements(&a->meta.geometry, s) * a->meta.geometry.item_bytes;
  if (out_len != want)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array %s: the slice is %llu bytes, the buffer %zu", a->id,
                  (unsigned long long)want, out_len);
  if (unwritten != NULL) {
    if (unwritten_bytes < (a->chunks + 7) / 8)
      return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array %s: the unwritten bitmap needs %llu bytes", a->id,
                    (unsigned long long)((a->chunks + 7) / 8));
    memset(unwritten, 0, unwritten_bytes);
  }
  ar_job *jobs = calloc(AR_BATCH, sizeof *jobs);
  if (jobs == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for an array read");
  pthread_mutex_lock(&a->r->lock);
  bool was_broken = a->r->broken;
  int rc = was_broken ? rt_refuse(CS_E_IO, msg, msg_size, "the reader's store failed with requests in flight")
                        : refresh_locked(a, msg, msg_size);
  stats->catalog_requests = a->last_requests; /* the head and the candidates' windows */
  cs_array_slice_iter it;
  if (rc == CS_E_OK) rc = cs_array_slice_begin(&it, &a->meta.geometry, s);
  uint32_t n = 0;
  uint64_t batch_bytes = 0;
  bool more = rc == CS_E_OK;
  while (more) {
    cs_array_piece p;
    more = cs_array_slice_next(&it, &p);
    const ar_slot *w = more ? slot_find(&a->w, p.chunk_index) : NULL;
    if (more && w == NULL) {
      cs_array_piece_copy(&a->meta.geometry, s, &p, NULL, out, true);
      if (unwritten != NULL) unwritten[p.chunk_index / 8] |= (uint8_t)(1u << (p.chunk_index % 8));
      stats->chunks_unwritten++;
      continue;
    }
    bool full = n == AR_BATCH || (w != NULL && n > 0 && batch_bytes + w->stored_length > AR_BATCH_BYTES);
    if (n > 0 && (full || !more)) {
      rc = batch_read(a, s, jobs, n, out, stats, msg, msg_size);
      for (uint32_t i = 0; i < n; i++) job_release(&jobs[i]);
      n = 0, batch_bytes = 0;
      if (rc != CS_E_OK) break;
    }
    if (w != NULL) {
      jobs[n++] = (ar_job){.piece = p, .key = a->w.pack_keys[w->pack], .base = w->offset,
                           .stored_len = w->stored_length};
      batch_bytes += w->stored_length;
    }
  }
  pthread_mutex_unlock(&a->r->lock);
  free(jobs); /* no request names a job: a stranded GET's request and buffer went to rd_orphan */
  return rc;
}

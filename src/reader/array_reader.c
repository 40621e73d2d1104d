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
  int rc = rt_array_winners(&r->catalog, id, walk, msg, msg_size);
  if (w->no_memory) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "array %s: no memory for its slots", id);
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

typedef struct fetch_ctx {
  capstore_reader *r;
  const char *key;
  uint64_t base; /* the record's offset in its pack */
} fetch_ctx;

static int fetch_range(void *ctx, uint64_t offset, uint64_t length, uint8_t *out, char *msg, size_t msg_size) {
  fetch_ctx *f = ctx;
  cs_range range = {.offset = f->base + offset, .length = length};
  size_t got = 0;
  cs_store_result res;
  memset(&res, 0, sizeof res);
  int rc = f->r->store.ops->get(f->r->store.self, f->key, &range, out, (size_t)length, &got, &res);
  if (rc != CS_E_OK) return rt_refuse(rc, msg, msg_size, "GET %s: %s", f->key, cs_strerror(rc));
  if (res.outcome != CS_OUT_OK || got != length)
    return rt_refuse(CS_E_IO, msg, msg_size, "GET %s [%llu, +%llu): %s", f->key, (unsigned long long)range.offset,
                  (unsigned long long)length, res.detail[0] != '\0' ? res.detail : "short read");
  return CS_E_OK;
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
  pthread_mutex_lock(&a->r->lock);
  int rc = refresh_locked(a, msg, msg_size);
  stats->catalog_requests = a->last_requests; /* the head and the candidates' windows */
  cs_array_slice_iter it;
  if (rc == CS_E_OK) rc = cs_array_slice_begin(&it, &a->meta.geometry, s);
  cs_array_piece p;
  while (rc == CS_E_OK && cs_array_slice_next(&it, &p)) {
    const ar_slot *w = slot_find(&a->w, p.chunk_index);
    if (w == NULL) {
      cs_array_piece_copy(&a->meta.geometry, s, &p, NULL, out, true);
      if (unwritten != NULL) unwritten[p.chunk_index / 8] |= (uint8_t)(1u << (p.chunk_index % 8));
      stats->chunks_unwritten++;
      continue;
    }
    fetch_ctx f = {.r = a->r, .key = a->w.pack_keys[w->pack], .base = w->offset};
    char inner[256];
    rc = cs_array_read_piece(&a->meta, s, &p, w->stored_length, fetch_range, &f, out, &stats->chunks, inner,
                             sizeof inner);
    if (rc != CS_E_OK)
      rt_refuse(rc, msg, msg_size, "array %s: chunk %llu: %s", a->id, (unsigned long long)p.chunk_index, inner);
    stats->chunks_read++;
  }
  pthread_mutex_unlock(&a->r->lock);
  return rc;
}

/*
 * A capture array's writer (capstore/arrays.h, docs/arrays.md): encodes each
 * chunk's stored form, claims its slot where the store enforces
 * If-None-Match, hands the record to the runtime's sink, and at flush asks
 * the catalog which slots its writes won.
 */
#define _GNU_SOURCE
#include "array_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>


#define NONCE_HEX RT_ARRAY_NONCE_HEX
#define CLAIM_TRIES 3

typedef enum write_state { W_OWED = 0, W_ACCEPTED, W_REFUSED } write_state;

typedef struct array_write {
  uint64_t slot;
  char nonce[NONCE_HEX + 1];
  write_state state;
} array_write;

struct capstore_array_writer {
  capstore *cs;
  cs_store store;
  cs_catalog catalog;
  bool store_open, catalog_open;
  bool kind_checked; /* the catalog's tables suit the configuration (rt_array_winners) */
  cs_array_meta meta;
  uint64_t chunks;
  char prefix[CS_KEY_MAX];
  char geometry_nonce[NONCE_HEX + 1]; /* our geometry record's, or "" when another was visible at open */
  char geometry_hash[CS_ARRAY_META_HASH_HEX + 1]; /* cs_array_meta_hash: what chunk records name */
  bool geometry_checked;              /* the visible geometry was compared with ours */
  pthread_mutex_t lock;
  pthread_mutex_t store_lock;         /* a store is driven by one thread at a time (store.h) */
  pthread_mutex_t catalog_lock;       /* and a catalog (taken after lock, never before) */
  uint8_t *taken;                     /* bit per slot: written through this writer or seen won */
  uint64_t claim_ttl_ns;              /* arrays.claim_ttl: a stale slot claim may be taken over */
  uint64_t claims_taken_over;         /* admitted writes whose claim replaced a stale one this writer deleted */
  array_write *writes;
  size_t write_count, write_cap;
  bool writes_sorted;
};

static void ok_msg(char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
}

static int nonce_make(char out[NONCE_HEX + 1]) {
  uint8_t raw[NONCE_HEX / 2];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) return CS_E_IO;
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof raw; i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[NONCE_HEX] = '\0';
  return CS_E_OK;
}

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * CS_SEC_NS + (uint64_t)ts.tv_nsec;
}

static bool bit_get(const uint8_t *bits, uint64_t i) { return (bits[i / 8] >> (i % 8)) & 1u; }
static void bit_set(uint8_t *bits, uint64_t i) { bits[i / 8] |= (uint8_t)(1u << (i % 8)); }

static const char *outcome_text(const cs_store_result *res) {
  return res->detail[0] != '\0' ? res->detail : "no detail";
}

/*
 * Creates key create-only holding body. CS_E_OK: ours (created now, or an
 * earlier try of ours landed); CS_E_SLOT_WRITTEN: another's (*theirs gets
 * its body, up to cap); CS_E_IO: the store did not answer.
 */
static int claim_put_locked(capstore_array_writer *w, const char *key, const char *body, size_t len, char *theirs,
                            size_t cap, size_t *theirs_len, char *msg, size_t msg_size) {
  cs_store_result res;
  for (int attempt = 0; attempt < CLAIM_TRIES; attempt++) {
    memset(&res, 0, sizeof res);
    int rc = w->store.ops->put(w->store.self, key, body, len, NULL, true, &res);
    if (rc != CS_E_OK) return rt_refuse(rc, msg, msg_size, "claim %s: %s", key, cs_strerror(rc));
    if (res.outcome == CS_OUT_OK) return CS_E_OK;
    if (res.outcome != CS_OUT_PRECONDITION) continue; /* may have applied: the next try tells */
    size_t got = 0;
    memset(&res, 0, sizeof res);
    rc = w->store.ops->get(w->store.self, key, NULL, theirs, cap, &got, &res); /* the whole claim */
    if (rc == CS_E_TOO_LARGE) return CS_E_SLOT_WRITTEN;                       /* longer than ours could be */
    if (rc != CS_E_OK || res.outcome != CS_OUT_OK) continue;
    *theirs_len = got;
    if (got == len && memcmp(theirs, body, len) == 0) return CS_E_OK; /* an earlier try of ours landed */
    return CS_E_SLOT_WRITTEN;
  }
  return rt_refuse(CS_E_IO, msg, msg_size, "claim %s: the store did not answer (%s)", key, outcome_text(&res));
}

static int claim_put(capstore_array_writer *w, const char *key, const char *body, size_t len, char *theirs,
                     size_t cap, size_t *theirs_len, char *msg, size_t msg_size) {
  pthread_mutex_lock(&w->store_lock);
  int rc = claim_put_locked(w, key, body, len, theirs, cap, theirs_len, msg, msg_size);
  pthread_mutex_unlock(&w->store_lock);
  return rc;
}

/*
 * The record of one array write: an opaque uint8 string named by the array (run_id), the geometry it was
 * written for (sequence_id), the nonce and the slot. Tenant and session are the same for every array, so one
 * capstore instance holds the writes of any number of arrays (a sink's packs share their tenant and session).
 */
static void record_meta(const capstore_array_writer *w, bool geometry, uint64_t slot, const char *nonce,
                        size_t stored_len, cs_pack_meta *m) {
  memset(m, 0, sizeof *m);
  m->capture_id = cs_pack_text_of(nonce);
  m->tenant_id = cs_pack_text_of(RT_ARRAY_TENANT);
  m->experiment_id = cs_pack_text_of("array");
  m->run_id = cs_pack_text_of(w->meta.id);
  m->session_id = cs_pack_text_of(RT_ARRAY_SESSION);
  m->request_id = cs_pack_text_of(nonce);
  m->sequence_id = cs_pack_text_of(w->geometry_hash);
  m->model_id = cs_pack_text_of("array");
  m->model_revision = cs_pack_text_of("array");
  m->adapter_revision = cs_pack_text_of(NULL);
  m->capture_policy_version = cs_pack_text_of(CS_ARRAY_META_FORMAT);
  m->hook_name = cs_pack_text_of(geometry ? CS_ARRAY_HOOK_GEOMETRY : CS_ARRAY_HOOK_CHUNK);
  m->layer_number = -1;
  m->step_number = slot;
  m->dtype = CS_DTYPE_UINT8;
  m->rank = 1;
  m->shape[0] = (uint32_t)stored_len;
  m->captured_at_ns = wall_ns();
}

/* An instance whose first records fixed another key than arrays' (field: the one that differs). */
static int instance_refusal(const capstore_array_writer *w, const char *field, char *msg, size_t msg_size) {
  return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array %s: this capstore instance captures records of "
                   "another %s; capture arrays need an instance of their own (a pack holds one tenant, session "
                   "and rank)", w->meta.id, field != NULL ? field : "tenant or session");
}

/*
 * Hands one record to the runtime's sink (the reserved hooks' own path). A sink holds records of one tenant and
 * session, which every array shares: an instance that captured other records first refuses, and says why.
 */
static int record_write(capstore_array_writer *w, const cs_pack_meta *m, const void *bytes, size_t len, char *msg,
                        size_t msg_size) {
  int rc = rt_capstore_write_reserved(w->cs, m, bytes, len, msg, msg_size);
  if (rc == CS_E_INVALID_ARGUMENT && msg != NULL && strstr(msg, "first record") != NULL)
    return instance_refusal(w, NULL, msg, msg_size);
  return rc;
}

/* ---- the catalog's answer: each slot's winner ---------------------------------------------------------- */

static int write_cmp(const void *a, const void *b) {
  const array_write *x = a, *y = b;
  return (x->slot > y->slot) - (x->slot < y->slot);
}

static array_write *write_of(capstore_array_writer *w, uint64_t slot) {
  array_write key = {.slot = slot};
  if (w->write_count == 0) return NULL;
  return bsearch(&key, w->writes, w->write_count, sizeof *w->writes, write_cmp);
}

/* A slot's winner: the slot is taken, and a write of ours to it is answered. */
static int winner_seen(void *ctx, const cs_array_candidate *c) {
  capstore_array_writer *w = ctx;
  bit_set(w->taken, c->slot);
  array_write *mine = write_of(w, c->slot);
  if (mine == NULL || mine->state != W_OWED) return 0;
  bool ours = c->nonce.len == NONCE_HEX && memcmp(c->nonce.bytes, mine->nonce, NONCE_HEX) == 0;
  mine->state = ours ? W_ACCEPTED : W_REFUSED;
  return 0;
}

static int winners_ask(capstore_array_writer *w, rt_array_walk *k, char *msg, size_t msg_size) {
  if (!w->writes_sorted && w->write_count > 1) {
    qsort(w->writes, w->write_count, sizeof *w->writes, write_cmp);
    w->writes_sorted = true;
  }
  memset(k, 0, sizeof *k);
  k->chunks = w->chunks;
  k->winner = winner_seen;
  k->ctx = w;
  pthread_mutex_lock(&w->catalog_lock);
  int rc = rt_array_winners(&w->catalog, &w->kind_checked, w->meta.id, k, msg, msg_size);
  pthread_mutex_unlock(&w->catalog_lock);
  return rc;
}

/* Compares the visible geometry with ours (once: a visible geometry never changes). */
static int geometry_judge(capstore_array_writer *w, const rt_array_walk *k, char *diff, size_t diff_size, char *msg,
                          size_t msg_size) {
  diff[0] = '\0';
  if (!k->have_geometry || w->geometry_checked) return CS_E_OK;
  if (w->geometry_nonce[0] != '\0' && strcmp(k->geometry_nonce, w->geometry_nonce) == 0) {
    w->geometry_checked = true;
    return CS_E_OK;
  }
  cs_array_meta theirs;
  pthread_mutex_lock(&w->store_lock);
  int rc = rt_array_geometry_fetch(&w->store, &k->geometry, k->geometry_hash, &theirs, msg, msg_size);
  pthread_mutex_unlock(&w->store_lock);
  if (rc != CS_E_OK) return rc;
  char buf[64];
  const char *field = cs_array_meta_diff(&w->meta, &theirs, buf, sizeof buf);
  if (field != NULL) {
    snprintf(diff, diff_size, "%s", field);
    return rt_refuse(CS_E_CONFLICT, msg, msg_size, "array %s exists with another geometry: %s differs", w->meta.id, diff);
  }
  w->geometry_checked = true;
  return CS_E_OK;
}

/* ---- open ------------------------------------------------------------------------------------------------- */

void capstore_array_writer_free(capstore_array_writer *w) {
  if (w == NULL) return;
  if (w->store_open) cs_store_close(&w->store);
  if (w->catalog_open) w->catalog.ops->close(w->catalog.self);
  pthread_mutex_destroy(&w->lock);
  pthread_mutex_destroy(&w->store_lock);
  pthread_mutex_destroy(&w->catalog_lock);
  free(w->taken);
  free(w->writes);
  free(w);
}

/* Where the store enforces If-None-Match: the geometry's claim, first creator wins. */
static int geometry_claim(capstore_array_writer *w, const char *doc, size_t len, char *msg, size_t msg_size) {
  char key[CS_KEY_MAX];
  if ((size_t)snprintf(key, sizeof key, "%sarrays/%s/geometry", w->prefix, w->meta.id) >= sizeof key)
    return rt_refuse(CS_E_TOO_LARGE, msg, msg_size, "array %s: its geometry key is too long", w->meta.id);
  char *theirs = malloc(CS_ARRAY_META_BYTES_MAX);
  if (theirs == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the array's geometry");
  size_t theirs_len = 0;
  int rc = claim_put(w, key, doc, len, theirs, CS_ARRAY_META_BYTES_MAX, &theirs_len, msg, msg_size);
  if (rc == CS_E_SLOT_WRITTEN) {
    cs_array_meta other;
    char why[160], buf[64];
    rc = cs_array_meta_decode(theirs, theirs_len, &other, why, sizeof why);
    const char *field = rc == CS_E_OK ? cs_array_meta_diff(&w->meta, &other, buf, sizeof buf) : NULL;
    if (rc != CS_E_OK)
      rc = rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: the geometry claim %s: %s", w->meta.id, key, why);
    else if (field != NULL)
      rc = rt_refuse(CS_E_CONFLICT, msg, msg_size, "array %s exists with another geometry: %s differs", w->meta.id,
                  field);
    else
      rc = CS_E_OK; /* the same geometry: join */
  }
  free(theirs);
  return rc;
}

/*
 * The store's conditional-create probe, on a thread of its own while the open asks the catalog (over a WAN
 * each is a few round trips; neither touches the other's connection). Writers of one array must agree on
 * claims: a probe that cannot answer refuses the open, never guesses.
 */
typedef struct probe_job {
  capstore_array_writer *w;
  pthread_t thread;
  bool started;
  int rc;
  char msg[256];
} probe_job;

static void *probe_main(void *arg) {
  probe_job *p = arg;
  capstore_array_writer *w = p->w;
  char probe[CS_KEY_MAX], nonce[NONCE_HEX + 1];
  p->rc = CS_E_OK;
  if (nonce_make(nonce) != CS_E_OK) {
    p->rc = rt_refuse(CS_E_IO, p->msg, sizeof p->msg, "getrandom failed");
    return NULL;
  }
  snprintf(probe, sizeof probe, "%.512sprobe/%s/conditional-create", w->prefix, nonce);
  cs_store_result res;
  memset(&res, 0, sizeof res);
  pthread_mutex_lock(&w->store_lock);
  int rc = cs_store_probe_conditional_create(&w->store, probe, &res);
  pthread_mutex_unlock(&w->store_lock);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK)
    p->rc = rt_refuse(CS_E_IO, p->msg, sizeof p->msg,
                      "array %s: the store's conditional-create probe did not answer (%s)", w->meta.id,
                      outcome_text(&res));
  return NULL;
}

static int probe_start(capstore_array_writer *w, const capstore_config *access, probe_job *p, char *msg,
                       size_t msg_size) {
  memset(p, 0, sizeof *p);
  p->w = w;
  if (w->store.enforces_if_none_match || access->s3_endpoint == NULL || !access->probe_store) return CS_E_OK;
  if (pthread_create(&p->thread, NULL, probe_main, p) != 0)
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "array %s: no thread for the store's probe", w->meta.id);
  p->started = true;
  return CS_E_OK;
}

/* Joins the probe; its refusal, if any, becomes the open's (when the open has none of its own). */
static int probe_join(probe_job *p, int rc, char *msg, size_t msg_size) {
  if (!p->started) return rc;
  pthread_join(p->thread, NULL);
  p->started = false;
  if (rc == CS_E_OK && p->rc != CS_E_OK) return rt_refuse(p->rc, msg, msg_size, "%s", p->msg);
  return rc;
}

static int writer_setup(capstore_array_writer *w, const capstore_config *access, char *msg, size_t msg_size) {
  w->chunks = cs_array_chunk_count(&w->meta.geometry);
  w->taken = calloc((size_t)((w->chunks + 7) / 8), 1);
  if (w->taken == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the array's slot bitmap");
  if (capstore_key_prefix(access, w->prefix, sizeof w->prefix) >= sizeof w->prefix)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "key_prefix is too long");
  int rc = capstore_open_store(access, &w->store, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  w->store_open = true;
  rc = capstore_open_catalog(access, &w->catalog, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  w->catalog_open = true;
  return CS_E_OK;
}

/*
 * The catalog's winners at open. The serving daemon creates the tables at its start, so they are asked for
 * first; only when that fails are the tables created (idempotent) and the question asked again: a writer
 * that opens before any daemon ran still works, and the usual open costs two requests, not seven.
 */
static int winners_at_open(capstore_array_writer *w, rt_array_walk *k, char *msg, size_t msg_size) {
  int rc = winners_ask(w, k, msg, msg_size);
  if (rc == CS_E_OK || rc == CS_E_CORRUPT) return rc;
  cs_catalog_result res;
  memset(&res, 0, sizeof res);
  int made = w->catalog.ops->schema_ensure(w->catalog.self, &res);
  if (made != CS_E_OK || res.outcome != CS_OUT_OK) return rc; /* the first refusal says more */
  return winners_ask(w, k, msg, msg_size);
}

int capstore_array_writer_open(capstore *cs, const capstore_config *access, const cs_array_meta *meta,
                               capstore_array_writer **out, char *msg, size_t msg_size) {
  ok_msg(msg, msg_size);
  if (out != NULL) *out = NULL;
  if (cs == NULL || access == NULL || meta == NULL || out == NULL)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "capstore_array_writer_open: a NULL argument");
  char why[160];
  cs_array_meta check;
  if (cs_array_meta_make(&check, meta->id, &meta->geometry, meta->dtype, meta->codec, meta->attributes, why,
                         sizeof why) != CS_E_OK)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array: %s", why);
  capstore_array_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for an array writer");
  if (pthread_mutex_init(&w->lock, NULL) != 0 || pthread_mutex_init(&w->store_lock, NULL) != 0 ||
      pthread_mutex_init(&w->catalog_lock, NULL) != 0)
    abort();
  w->meta = check;
  w->claim_ttl_ns = access->array_claim_ttl_ns;
  if (w->claim_ttl_ns < CS_SEC_NS) {
    capstore_array_writer_free(w);
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "arrays.claim_ttl must be at least 1 s");
  }
  if (cs_array_meta_hash(&w->meta, w->geometry_hash) != CS_E_OK) {
    capstore_array_writer_free(w);
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "array %s: its geometry's hash", check.id);
  }
  int rc = writer_setup(w, access, msg, msg_size);
  probe_job probe;
  memset(&probe, 0, sizeof probe);
  if (rc == CS_E_OK) rc = probe_start(w, access, &probe, msg, msg_size);
  rt_array_walk k;
  if (rc == CS_E_OK) rc = winners_at_open(w, &k, msg, msg_size); /* while the probe runs */
  rc = probe_join(&probe, rc, msg, msg_size);
  char *doc = rc == CS_E_OK ? malloc(CS_ARRAY_META_BYTES_MAX) : NULL;
  size_t len = 0;
  if (rc == CS_E_OK && doc == NULL) rc = rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the array's geometry");
  if (rc == CS_E_OK) rc = cs_array_meta_encode(&w->meta, doc, CS_ARRAY_META_BYTES_MAX, &len);
  /*
   * The instance's key is arrays' before anything is claimed: one whose first records fixed another could not
   * write the geometry's record, and its claim would hold the array's id with no record (reserved, no other
   * tenant's record is admitted between the claim and the record).
   */
  if (rc == CS_E_OK) {
    cs_pack_meta m;
    record_meta(w, true, 0, "", len, &m);
    const char *field = NULL;
    rc = rt_capstore_key_reserve(cs, &m, &field);
    if (rc == CS_E_INVALID_ARGUMENT) rc = instance_refusal(w, field, msg, msg_size);
    else if (rc != CS_E_OK) rc = rt_refuse(rc, msg, msg_size, "array %s: %s", w->meta.id, cs_strerror(rc));
  }
  /* The claim after the question: a geometry claimed first by another writer is judged by the claim's answer. */
  if (rc == CS_E_OK && w->store.enforces_if_none_match) rc = geometry_claim(w, doc, len, msg, msg_size);
  char diff[64];
  if (rc == CS_E_OK) rc = geometry_judge(w, &k, diff, sizeof diff, msg, msg_size);
  if (rc == CS_E_OK && !k.have_geometry) { /* none visible yet: ours is a candidate (identical ones are harmless) */
    rc = nonce_make(w->geometry_nonce) == CS_E_OK ? CS_E_OK : rt_refuse(CS_E_IO, msg, msg_size, "getrandom failed");
    cs_pack_meta m;
    record_meta(w, true, 0, w->geometry_nonce, len, &m);
    w->cs = cs;
    if (rc == CS_E_OK) rc = record_write(w, &m, doc, len, msg, msg_size);
  }
  free(doc);
  if (rc != CS_E_OK) {
    capstore_array_writer_free(w);
    return rc;
  }
  w->cs = cs;
  *out = w;
  return CS_E_OK;
}

/* ---- write ------------------------------------------------------------------------------------------------ */

/*
 * Under store_lock: reads key and deletes it when it still holds exactly body. read_rc and read get the read's
 * answer; true when the claim was there and is gone now (deleted, or found missing by the delete).
 */
static bool claim_delete_if_locked(capstore_array_writer *w, const char *key, const char *body, size_t len,
                                   int *read_rc, cs_store_result *read, bool *same) {
  char now[CS_ARRAY_CLAIM_BYTES_MAX];
  size_t got = 0;
  memset(read, 0, sizeof *read);
  *read_rc = w->store.ops->get(w->store.self, key, NULL, now, sizeof now, &got, read);
  *same = *read_rc == CS_E_OK && read->outcome == CS_OUT_OK && got == len && memcmp(now, body, len) == 0;
  if (!*same) return false;
  cs_store_result res;
  memset(&res, 0, sizeof res);
  int rc = w->store.ops->del(w->store.self, key, &res);
  if (rc != CS_E_OK || (res.outcome != CS_OUT_OK && res.outcome != CS_OUT_NOT_FOUND)) {
    *read_rc = rc, *read = res; /* the delete's answer, for the caller's words */
    return false;
  }
  return true;
}

static int slot_seen(void *ctx, const cs_array_candidate *c) {
  (void)c; /* the walk asks one slot: any winner is its */
  *(bool *)ctx = true;
  return 0;
}

/*
 * Whether slot has a visible winner now: the catalog asked afresh for the geometry and that slot alone (one
 * window, whatever the array's size), under the catalog's lock only, so other writes of this writer go on.
 */
static int slot_visible(capstore_array_writer *w, uint64_t slot, bool *seen, char *msg, size_t msg_size) {
  rt_array_walk k;
  memset(&k, 0, sizeof k);
  k.chunks = w->chunks;
  k.slot_from = slot;
  k.slot_to = slot + 1;
  k.winner = slot_seen;
  k.ctx = seen;
  *seen = false;
  pthread_mutex_lock(&w->catalog_lock);
  int rc = rt_array_winners(&w->catalog, &w->kind_checked, w->meta.id, &k, msg, msg_size);
  pthread_mutex_unlock(&w->catalog_lock);
  if (rc == CS_E_OK && *seen) {
    pthread_mutex_lock(&w->lock);
    bit_set(w->taken, slot);
    pthread_mutex_unlock(&w->lock);
  }
  return rc;
}

/*
 * Claims slot `index` under key with our claim's bytes. CS_E_OK: ours (made now, an earlier try of ours, or a
 * stale claim taken over); CS_E_SLOT_WRITTEN: another's (msg says); CS_E_IO: the store or the catalog did not
 * answer. A claim is stale once it is arrays.claim_ttl old and its slot has no visible record: its writer died
 * between the claim and the record's reaching the spool, or its record is still on the way. Taking it over
 * deletes it and claims again, create-only; the catalog's arbitration still names one winner if the first
 * claimer's record arrives after all, or two writers took the same stale claim over at once (each deletes
 * what it read; the second's delete may remove the first's new claim), and each writer's flush says which.
 */
static int slot_claim(capstore_array_writer *w, uint64_t index, const char *key, const char *claim, size_t claim_len,
                      bool *taken_over, char *msg, size_t msg_size) {
  *taken_over = false;
  char theirs[CS_ARRAY_CLAIM_BYTES_MAX];
  size_t theirs_len = 0;
  int rc = claim_put(w, key, claim, claim_len, theirs, sizeof theirs, &theirs_len, msg, msg_size);
  if (rc != CS_E_SLOT_WRITTEN) return rc;
  uint64_t at = 0;
  if (cs_array_claim_parse(theirs, theirs_len, &at) != CS_E_OK || !cs_array_claim_stale(at, wall_ns(), w->claim_ttl_ns))
    return rt_refuse(rc, msg, msg_size, "array %s: slot %llu is already written (its claim is another writer's)",
                     w->meta.id, (unsigned long long)index);
  bool seen = false;
  rc = slot_visible(w, index, &seen, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (seen)
    return rt_refuse(CS_E_SLOT_WRITTEN, msg, msg_size, "array %s: slot %llu is already written", w->meta.id,
                     (unsigned long long)index);
  pthread_mutex_lock(&w->store_lock);
  cs_store_result res;
  bool same = false;
  /* Still the stale claim read: deleted (a missing key is as good). */
  bool deleted = claim_delete_if_locked(w, key, theirs, theirs_len, &rc, &res, &same);
  bool gone = !same && rc == CS_E_OK && res.outcome == CS_OUT_NOT_FOUND;
  /* A claim made since (or bytes too long to be ours): the create-only PUT below says whose. */
  bool other = (!same && rc == CS_E_OK && res.outcome == CS_OUT_OK) || rc == CS_E_TOO_LARGE;
  if (!same && !gone && !other) {
    pthread_mutex_unlock(&w->store_lock);
    return rt_refuse(CS_E_IO, msg, msg_size, "array %s: slot %llu's stale claim %s could not be read again (%s)",
                     w->meta.id, (unsigned long long)index, key, rc != CS_E_OK ? cs_strerror(rc) : outcome_text(&res));
  }
  if (same && !deleted) {
    pthread_mutex_unlock(&w->store_lock);
    return rt_refuse(CS_E_IO, msg, msg_size, "array %s: slot %llu's stale claim %s could not be deleted (%s)", w->meta.id,
                     (unsigned long long)index, key, rc != CS_E_OK ? cs_strerror(rc) : outcome_text(&res));
  }
  rc = claim_put_locked(w, key, claim, claim_len, theirs, sizeof theirs, &theirs_len, msg, msg_size);
  pthread_mutex_unlock(&w->store_lock);
  if (rc == CS_E_SLOT_WRITTEN)
    return rt_refuse(rc, msg, msg_size, "array %s: slot %llu is already written (another writer took its stale claim over)",
                     w->meta.id, (unsigned long long)index);
  *taken_over = rc == CS_E_OK && same;
  return rc;
}

/* Appends a write (each slot once: the taken bitmap refuses a second); sorted by slot before a flush looks. */
static int write_remember(capstore_array_writer *w, uint64_t slot, const char *nonce) {
  if (w->write_count == w->write_cap) {
    size_t cap = w->write_cap == 0 ? 64 : 2 * w->write_cap;
    array_write *grown = realloc(w->writes, cap * sizeof *grown);
    if (grown == NULL) return CS_E_NO_MEMORY;
    w->writes = grown;
    w->write_cap = cap;
  }
  array_write *x = &w->writes[w->write_count++];
  *x = (array_write){.slot = slot, .state = W_OWED};
  memcpy(x->nonce, nonce, NONCE_HEX + 1);
  w->writes_sorted = w->write_count == 1 || (w->writes_sorted && w->writes[w->write_count - 2].slot < slot);
  return CS_E_OK;
}

int capstore_array_write_chunk(capstore_array_writer *w, uint64_t index, const void *elements, size_t len, char *msg,
                               size_t msg_size) {
  ok_msg(msg, msg_size);
  if (w == NULL || elements == NULL)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "capstore_array_write_chunk: a NULL argument");
  uint64_t max = cs_array_chunk_stored_max(&w->meta, index);
  if (max == 0)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array %s: chunk index %llu is out of range (%llu chunks)",
                  w->meta.id, (unsigned long long)index, (unsigned long long)w->chunks);
  uint64_t want = cs_array_chunk_bytes(&w->meta.geometry, index);
  if (len != want) /* before anything is allocated for it */
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "array %s: chunk %llu is %llu bytes (its elements), not %zu",
                     w->meta.id, (unsigned long long)index, (unsigned long long)want, len);
  uint8_t *stored = malloc((size_t)max);
  if (stored == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory to encode chunk %llu", (unsigned long long)index);
  size_t stored_len = 0;
  char why[160] = "the chunk's encode failed";
  int rc = cs_array_chunk_encode(&w->meta, index, elements, len, stored, (size_t)max, &stored_len, why, sizeof why);
  if (rc != CS_E_OK) rc = rt_refuse(rc, msg, msg_size, "array %s: %s", w->meta.id, why);
  char nonce[NONCE_HEX + 1];
  if (rc == CS_E_OK && nonce_make(nonce) != CS_E_OK) rc = rt_refuse(CS_E_IO, msg, msg_size, "getrandom failed");
  pthread_mutex_lock(&w->lock);
  if (rc == CS_E_OK && bit_get(w->taken, index))
    rc = rt_refuse(CS_E_SLOT_WRITTEN, msg, msg_size, "array %s: slot %llu is already written", w->meta.id,
                (unsigned long long)index);
  if (rc == CS_E_OK) bit_set(w->taken, index); /* held while the claim and the record go out */
  pthread_mutex_unlock(&w->lock);
  bool held = rc == CS_E_OK; /* this call holds the slot's bit */
  char key[CS_KEY_MAX];
  snprintf(key, sizeof key, "%.700sarrays/%s/slots/%llu", w->prefix, w->meta.id, (unsigned long long)index);
  char claim[CS_ARRAY_CLAIM_BYTES_MAX];
  size_t claim_len = 0;
  bool taken_over = false; /* counted once the record is admitted */
  if (rc == CS_E_OK && w->store.enforces_if_none_match) {
    if (cs_array_claim_format(nonce, wall_ns(), claim, &claim_len) != CS_E_OK) abort(); /* nonce_make's hex */
    rc = slot_claim(w, index, key, claim, claim_len, &taken_over, msg, msg_size);
    if (rc == CS_E_SLOT_WRITTEN) held = false; /* taken for good: the bit stays */
  }
  if (rc == CS_E_OK) {
    cs_pack_meta m;
    record_meta(w, false, index, nonce, stored_len, &m);
    rc = record_write(w, &m, stored, stored_len, msg, msg_size);
  }
  free(stored);
  bool admitted = rc == CS_E_OK;
  if (!admitted && held && w->store.enforces_if_none_match) {
    /*
     * No record of this write was admitted: its claim (made, or of unknown outcome) would hold the slot with no
     * data, so it is taken back. Best effort: a claim that stays leaves the slot claimed and unwritten.
     */
    cs_store_result res;
    int read_rc;
    bool same;
    pthread_mutex_lock(&w->store_lock); /* only our own claim: once made, nobody else's can be under the key */
    (void)claim_delete_if_locked(w, key, claim, claim_len, &read_rc, &res, &same);
    pthread_mutex_unlock(&w->store_lock);
  }
  pthread_mutex_lock(&w->lock);
  if (admitted && taken_over) w->claims_taken_over++;
  if (admitted && write_remember(w, index, nonce) != CS_E_OK) /* the record is out: its slot stays held */
    rc = rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory to remember the write of slot %llu", (unsigned long long)index);
  if (!admitted && held) w->taken[index / 8] &= (uint8_t) ~(1u << (index % 8)); /* the slot is free again */
  pthread_mutex_unlock(&w->lock);
  return rc;
}

/* ---- flush ------------------------------------------------------------------------------------------------ */

int capstore_array_flush(capstore_array_writer *w, uint64_t deadline_ns, capstore_array_flush_report *report,
                         char *msg, size_t msg_size) {
  ok_msg(msg, msg_size);
  capstore_array_flush_report local;
  if (report == NULL) report = &local;
  memset(report, 0, sizeof *report);
  if (w == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "capstore_array_flush: a NULL writer");
  capstore_flush_report fr;
  int rc = capstore_flush(w->cs, deadline_ns, &fr, msg, msg_size);
  bool ask = rc == CS_E_OK || rc == CS_E_CORRUPT; /* set-aside packs: the catalog says what became of ours */
  pthread_mutex_lock(&w->lock);
  rt_array_walk k;
  if (ask) rc = winners_ask(w, &k, msg, msg_size);
  if (ask && rc == CS_E_OK) rc = geometry_judge(w, &k, report->geometry_diff, sizeof report->geometry_diff, msg, msg_size);
  report->geometry_conflict = ask && rc == CS_E_CONFLICT;
  report->writes = w->write_count;
  report->claims_taken_over = w->claims_taken_over;
  for (size_t i = 0; i < w->write_count; i++) {
    const array_write *x = &w->writes[i];
    if (x->state == W_ACCEPTED) report->accepted++;
    if (x->state == W_OWED) report->owed++;
    if (x->state != W_REFUSED) continue;
    if (report->refused_named < CS_ARRAY_REFUSED_NAMED) report->refused_slots[report->refused_named++] = x->slot;
    report->refused++;
  }
  pthread_mutex_unlock(&w->lock);
  if (rc != CS_E_OK) return rc;
  if (report->owed > 0)
    return rt_refuse(CS_E_TIMEOUT, msg, msg_size, "array %s: %llu of %llu writes are not visible yet", w->meta.id,
                  (unsigned long long)report->owed, (unsigned long long)report->writes);
  if (report->refused > 0)
    return rt_refuse(CS_E_SLOT_WRITTEN, msg, msg_size,
                  "array %s: %llu of %llu writes lost their slots to another write (slot %llu first)", w->meta.id,
                  (unsigned long long)report->refused, (unsigned long long)report->writes,
                  (unsigned long long)report->refused_slots[0]);
  return CS_E_OK;
}

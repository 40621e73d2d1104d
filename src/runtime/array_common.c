/* What capture arrays' writers and readers share (array_internal.h). */
#include "array_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool text_is(const cs_pack_text *t, const char *s) { return t->len == strlen(s) && memcmp(t->bytes, s, t->len) == 0; }

static int walk_add(void *ctx, const cs_array_candidate *c) {
  rt_array_walk *k = ctx;
  /* A chunk of another geometry (or before any) is no candidate: it never reaches the arbiter. */
  if (!c->geometry && (!k->have_geometry || !text_is(&c->geometry_hash, k->geometry_hash))) {
    if (k->arbiter.any_chunk && c->slot < k->arbiter.slot) k->out_of_order = true; /* still the catalog's order */
    return k->out_of_order ? 1 : 0;
  }
  cs_array_verdict v = cs_array_arbiter_next(&k->arbiter, c->geometry, c->slot, c->first_version);
  if (v == CS_ARRAY_OUT_OF_ORDER) {
    k->out_of_order = true;
    return 1;
  }
  if (v != CS_ARRAY_WINS) return 0; /* only the first candidate of a slot counts */
  if (c->geometry) {
    k->have_geometry = true;
    k->geometry = *c;
    k->geometry.nonce = k->geometry.capture_id = (cs_pack_text){NULL, 0};
    size_t n = c->nonce.len > RT_ARRAY_NONCE_HEX ? RT_ARRAY_NONCE_HEX : c->nonce.len;
    memcpy(k->geometry_nonce, c->nonce.bytes, n);
    k->geometry_nonce[n] = '\0';
    n = c->geometry_hash.len > CS_ARRAY_META_HASH_HEX ? CS_ARRAY_META_HASH_HEX : c->geometry_hash.len;
    memcpy(k->geometry_hash, c->geometry_hash.bytes, n);
    k->geometry_hash[n] = '\0';
    return 0;
  }
  if (c->slot >= k->chunks) return 0; /* a foreign slot is no slot */
  return k->winner != NULL ? k->winner(k->ctx, c) : 0;
}

/*
 * A read the catalog refused without answering (ClickHouse: 289 a replica behind the last quorum write, 286,
 * 285, 242; throttled): nothing was handed to the walk, and it goes again after a short wait, up to
 * RT_ARRAY_READ_TRIES tries of each request (50 + 100 + 200 + 400 ms between them), before the caller hears
 * of it.
 */
static bool read_again(int rc, const cs_catalog_result *res, uint32_t *tries) {
  if (rc != CS_E_OK || (res->outcome != CS_OUT_REFUSED && res->outcome != CS_OUT_THROTTLED)) return false;
  if (++*tries >= RT_ARRAY_READ_TRIES) return false;
  uint64_t ms = UINT64_C(25) << *tries;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  return true;
}

int rt_array_winners(cs_catalog *catalog, bool *kind_checked, const char *id, rt_array_walk *walk, char *msg,
                     size_t msg_size) {
  if (!*kind_checked) { /* once per handle: the tables suit the configuration (capstore_catalog_check) */
    int checked = capstore_catalog_check(catalog, msg, msg_size);
    if (checked != CS_E_OK) return checked;
    *kind_checked = true;
  }
  walk->have_geometry = walk->out_of_order = false;
  walk->requests = 0;
  memset(&walk->arbiter, 0, sizeof walk->arbiter);
  walk->geometry_nonce[0] = walk->geometry_hash[0] = '\0';
  cs_cat_head head;
  cs_catalog_result res;
  memset(&res, 0, sizeof res);
  cs_uuid nobody;
  memset(&nobody, 0, sizeof nobody);
  int rc;
  uint32_t tries = 0;
  do {
    memset(&res, 0, sizeof res);
    rc = catalog->ops->head(catalog->self, &nobody, &head, &res);
    walk->requests++;
  } while (read_again(rc, &res, &tries));
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK)
    return rt_refuse(rc != CS_E_OK ? rc : CS_E_IO, msg, msg_size, "array %s: the catalog's head: %s", id,
                     rc != CS_E_OK ? cs_strerror(rc) : res.detail);
  cs_pack_text text = cs_pack_text_of(id);
  tries = 0; /* each request its own tries */
  /*
   * Windows of slots in ascending order, the geometry with the first: one request for arrays of up to
   * RT_ARRAY_WINDOW_SLOTS chunks. An answer refused for its size (a ClickHouse answer is capped) is asked
   * again in halves; nothing of it was handed to the walk (the adapter parses an answer only once it is whole).
   */
  uint64_t end = walk->slot_to == 0 || walk->slot_to > walk->chunks ? walk->chunks : walk->slot_to;
  uint64_t width = RT_ARRAY_WINDOW_SLOTS, from = walk->slot_from < end ? walk->slot_from : end;
  bool first = true;
  while (first || from < end) {
    uint64_t to = end - from < width ? end : from + width;
    cs_array_window window = {.with_geometry = first, .slot_from = from, .slot_to = to};
    memset(&res, 0, sizeof res);
    rc = catalog->ops->array_candidates(catalog->self, head.watermark, &text, &window, walk_add, walk, &res);
    walk->requests++;
    if (!walk->out_of_order && read_again(rc, &res, &tries)) continue; /* the same window again */
    bool too_large = rc == CS_E_OK && res.outcome == CS_OUT_SERVER_ERROR &&
                     strcmp(res.detail, CS_CLICKHOUSE_ANSWER_TOO_LARGE) == 0;
    if (too_large && to - from > 1) {
      width = (to - from) / 2;
      continue;
    }
    if (walk->out_of_order)
      return rt_refuse(CS_E_CORRUPT, msg, msg_size, "array %s: the catalog answered its candidates out of order", id);
    if (rc != CS_E_OK) return rt_refuse(rc, msg, msg_size, "array %s: the catalog's candidates: %s", id, cs_strerror(rc));
    if (res.outcome != CS_OUT_OK)
      return rt_refuse(CS_E_IO, msg, msg_size, "array %s: the catalog's candidates: %s", id, res.detail);
    from = to;
    first = false;
    tries = 0;
  }
  return CS_E_OK;
}

int rt_array_geometry_fetch(cs_store *store, const cs_array_candidate *c, const char *want_hash,
                            cs_array_meta *out, char *msg, size_t msg_size) {
  if (c->stored_length == 0 || c->stored_length > CS_ARRAY_META_BYTES_MAX)
    return rt_refuse(CS_E_CORRUPT, msg, msg_size, "array geometry record in %s: %llu bytes is not a document", c->key,
                     (unsigned long long)c->stored_length);
  char *doc = malloc((size_t)c->stored_length);
  if (doc == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for an array's geometry");
  cs_range range = {.offset = c->offset, .length = c->stored_length};
  size_t got = 0;
  cs_store_result res;
  memset(&res, 0, sizeof res);
  int rc = store->ops->get(store->self, c->key, &range, doc, (size_t)c->stored_length, &got, &res);
  char why[160];
  if (rc != CS_E_OK)
    rt_refuse(rc, msg, msg_size, "array geometry record in %s: %s", c->key, cs_strerror(rc));
  else if (res.outcome != CS_OUT_OK || got != c->stored_length)
    rc = rt_refuse(CS_E_IO, msg, msg_size, "array geometry record in %s: GET failed (%s)", c->key,
                   res.detail[0] != '\0' ? res.detail : "short read");
  else if (cs_crc32(0, doc, got) != c->crc32)
    rc = rt_refuse(CS_E_CORRUPT, msg, msg_size, "array geometry record in %s fails its CRC-32", c->key);
  else if (cs_array_meta_decode(doc, got, out, why, sizeof why) != CS_E_OK)
    rc = rt_refuse(CS_E_CORRUPT, msg, msg_size, "array geometry record in %s: %s", c->key, why);
  else {
    char hash[CS_ARRAY_META_HASH_HEX + 1];
    if (cs_array_meta_hash(out, hash) != CS_E_OK || strcmp(hash, want_hash) != 0)
      rc = rt_refuse(CS_E_CORRUPT, msg, msg_size, "array geometry record in %s: its bytes are not the geometry its "
                     "descriptor names", c->key);
  }
  free(doc);
  return rc;
}

uint64_t rt_array_nonce_hash(const cs_pack_text *nonce) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (size_t i = 0; i < nonce->len; i++) h = (h ^ (uint8_t)nonce->bytes[i]) * UINT64_C(0x100000001b3);
  return h == 0 ? 1 : h;
}

/*
 * The simulator's models of the object store and the catalog. Each primitive
 * applies atomically at the server's clock (the world's true time), which is
 * the statement-level atomicity ClickHouse gives and the per-object atomicity
 * S3 gives. Faults that lose or delay requests live in the network (world.c);
 * what a server answers for a status override lives here.
 */
#include "world.h"
#include "model_adapter.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the object store --------------------------------------------------- */

/* Sim pack ids carry their truth index in the last four bytes. */
static uint32_t truth_of(const sim_world *w, const cs_uuid *id) {
  uint32_t index = (uint32_t)id->bytes[12] << 24 | (uint32_t)id->bytes[13] << 16 |
                   (uint32_t)id->bytes[14] << 8 | id->bytes[15];
  if (index < w->pack_count && cs_uuid_equal(&w->packs[index].ref.pack_id, id)) return index;
  return SIM_NONE;
}


static int key_compare(const sim_object *obj, const char *key, uint32_t key_len) {
  uint32_t n = obj->ref.key_len < key_len ? obj->ref.key_len : key_len;
  int c = memcmp(obj->ref.key, key, n);
  if (c != 0) return c;
  return obj->ref.key_len < key_len ? -1 : obj->ref.key_len > key_len ? 1 : 0;
}

/* First position in the sorted order whose key is >= key. */
static uint32_t order_lower_bound(const sim_world *w, const char *key, uint32_t key_len) {
  uint32_t lo = 0, hi = w->object_count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (key_compare(&w->objects[w->order[mid]], key, key_len) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The slot holding key, a lost one (gone) included, or SIM_NONE. */
static uint32_t store_slot_find(const sim_world *w, const char *key, uint32_t key_len) {
  uint32_t pos = order_lower_bound(w, key, key_len);
  if (pos < w->object_count && key_compare(&w->objects[w->order[pos]], key, key_len) == 0)
    return w->order[pos];
  return SIM_NONE;
}

uint32_t sim_store_find(const sim_world *w, const char *key, uint32_t key_len) {
  uint32_t found = store_slot_find(w, key, key_len);
  return found != SIM_NONE && !w->objects[found].gone ? found : SIM_NONE;
}

void sim_store_put_object(sim_world *w, const cs_pack_ref *ref, bool is_pack, uint32_t pack) {
  uint32_t found = store_slot_find(w, ref->key, ref->key_len);
  if (found == SIM_NONE) {
    if (w->object_count >= SIM_OBJECTS_MAX) sim_bail(w, SIM_EXIT_MODEL, "model bound: objects");
    uint32_t pos = order_lower_bound(w, ref->key, ref->key_len);
    found = w->object_count++;
    memmove(&w->order[pos + 1], &w->order[pos], (w->object_count - 1 - pos) * sizeof w->order[0]);
    w->order[pos] = (uint16_t)found;
  }
  sim_object *obj = &w->objects[found];
  obj->ref = *ref;
  obj->is_pack = is_pack;
  obj->gone = false;
  obj->pack = pack;
}

static bool prefix_matches(const char *prefix, const char *key) {
  size_t n = strlen(prefix);
  return strncmp(prefix, key, n) == 0;
}

static cs_plan_method method_of(cs_op op) {
  switch (op) {
  case CS_OP_STORE_PUT: return CS_PLAN_METHOD_PUT;
  case CS_OP_STORE_HEAD: return CS_PLAN_METHOD_HEAD;
  case CS_OP_STORE_LIST: return CS_PLAN_METHOD_LIST;
  default: return CS_PLAN_METHOD_ANY;
  }
}

static cs_outcome outcome_of_status(uint32_t status) {
  switch (status) {
  case 400: return CS_OUT_INVALID;
  case 403: return CS_OUT_FORBIDDEN;
  case 404: return CS_OUT_NOT_FOUND;
  case 412: return CS_OUT_PRECONDITION;
  case 413: return CS_OUT_TOO_LARGE;
  case 429:
  case 503: return CS_OUT_THROTTLED;
  default: return status >= 500 ? CS_OUT_SERVER_ERROR : CS_OUT_INVALID;
  }
}

/* A status window matching this request answers for the server. */
static bool store_status_override(sim_world *w, sim_req *req) {
  const char *key = req->op == CS_OP_STORE_LIST ? w->prefix : req->ref.key;
  for (uint32_t i = 0; i < SIM_WINDOWS_MAX; i++) {
    const sim_fault_window *win = &w->windows[i];
    if (!win->active || win->catalog || win->status == 0 || w->now_ns >= win->until_ns) continue;
    if (win->method != CS_PLAN_METHOD_ANY && win->method != method_of(req->op)) continue;
    if (!prefix_matches(win->prefix, key)) continue;
    req->outcome = outcome_of_status(win->status);
    return true;
  }
  return false;
}

static void head_fill(const sim_object *obj, cs_head_info *head) {
  memset(head, 0, sizeof *head);
  head->is_pack = obj->is_pack;
  if (!obj->is_pack) {
    head->size_bytes = obj->ref.size_bytes;
    return;
  }
  head->size_bytes = obj->ref.size_bytes;
  head->index_bytes = obj->ref.index_bytes;
  head->record_count = obj->ref.record_count;
  head->created_at_ns = obj->ref.created_at_ns;
  head->pack_id = obj->ref.pack_id;
  memcpy(head->sha256, obj->ref.sha256, sizeof head->sha256);
}

/*
 * Path order, as s3rver walks its directory tree: each key is stored as the file
 * "<key>._S3rver_object", entries sort bytewise within a directory and a
 * directory is walked in place, so compare the stored names with '/' lowest.
 */
static int path_compare(const char *a, const char *b) {
  static const char suffix[] = "._S3rver_object";
  const char *sa = suffix, *sb = suffix;
  for (;;) {
    unsigned x = (unsigned char)(*a ? *a : *sa), y = (unsigned char)(*b ? *b : *sb);
    if (x == y) {
      if (x == 0) return 0;
      if (*a) a++; else sa++;
      if (*b) b++; else sb++;
      continue;
    }
    unsigned rx = x == 0 ? 0 : x == '/' ? 1 : x + 1, ry = y == 0 ? 0 : y == '/' ? 1 : y + 1;
    return rx < ry ? -1 : 1;
  }
}

/*
 * LIST on a store that walks a directory tree (store_list_path_order, as
 * s3rver): the page holds the keys after the token (bytewise, as the server
 * filters its start-after) that come first in path order, and the token is
 * its last key. Keys that sort after the token in path order but below it
 * bytewise are never listed: paging skips them.
 */
static void store_list_path(sim_world *w, sim_req *req, uint32_t pos, uint32_t limit) {
  bool more = false;
  for (; pos < w->object_count; pos++) {
    uint32_t index = w->order[pos];
    const char *key = w->objects[index].ref.key;
    if (!prefix_matches(w->prefix, key)) break;
    if (w->objects[index].gone) continue;
    uint32_t at = req->key_count;
    while (at > 0 && path_compare(key, w->objects[req->keys[at - 1]].ref.key) < 0) at--;
    if (at == limit) {
      more = true;
      continue;
    }
    if (req->key_count == limit) more = true; /* the page's last key drops off */
    uint32_t last = req->key_count < limit ? req->key_count : limit - 1;
    memmove(&req->keys[at + 1], &req->keys[at], (last - at) * sizeof req->keys[0]);
    req->keys[at] = index;
    if (req->key_count < limit) req->key_count++;
  }
  sim_cov_mark(w, SIM_COV_FAULT_LIST_PATH_ORDER);
  if (more && req->key_count > 0) {
    const sim_object *last = &w->objects[req->keys[req->key_count - 1]];
    memcpy(req->next_token, last->ref.key, last->ref.key_len + 1);
  }
  req->outcome = CS_OUT_OK;
}

static void store_list_keys(sim_world *w, sim_req *req) {
  uint32_t prefix_len = (uint32_t)strlen(w->prefix);
  uint32_t pos = req->token[0] != '\0' ? order_lower_bound(w, req->token, (uint32_t)strlen(req->token))
                                       : order_lower_bound(w, w->prefix, prefix_len);
  if (req->token[0] != '\0' && pos < w->object_count &&
      key_compare(&w->objects[w->order[pos]], req->token, (uint32_t)strlen(req->token)) == 0)
    pos++;
  req->key_count = 0;
  req->next_token[0] = '\0';
  uint32_t limit = req->count < SIM_BATCH_MAX ? req->count : SIM_BATCH_MAX;
  if (limit == 0) limit = 1;
  if (w->store_list_path_order) {
    store_list_path(w, req, pos, limit);
    return;
  }
  for (; pos < w->object_count; pos++) {
    const sim_object *obj = &w->objects[w->order[pos]];
    if (!prefix_matches(w->prefix, obj->ref.key)) break;
    if (obj->gone) continue;
    if (req->key_count == limit) {
      const sim_object *last = &w->objects[req->keys[req->key_count - 1]];
      memcpy(req->next_token, last->ref.key, last->ref.key_len + 1);
      break;
    }
    req->keys[req->key_count++] = w->order[pos];
  }
  req->outcome = CS_OUT_OK;
}

/*
 * opaque_tokens: the continuation token is not a key but an opaque string,
 * as S3's ContinuationToken (here the decimal number of the page's last
 * object plus one: 1 to 5 bytes). A token the store never gave is refused.
 */
static void store_list(sim_world *w, sim_req *req) {
  if (w->opaque_tokens && req->token[0] != '\0') {
    char *end = NULL;
    unsigned long v = strtoul(req->token, &end, 10);
    if (*end != '\0' || req->token[0] == '0' || v == 0 || v > w->object_count) {
      req->key_count = 0;
      req->next_token[0] = '\0';
      req->outcome = CS_OUT_INVALID;
      return;
    }
    const cs_pack_ref *last = &w->objects[v - 1].ref;
    memcpy(req->token, last->key, last->key_len + 1);
  }
  store_list_keys(w, req);
  if (w->opaque_tokens && req->next_token[0] != '\0' && req->key_count > 0)
    snprintf(req->next_token, sizeof req->next_token, "%" PRIu32, req->keys[req->key_count - 1] + 1);
}

/* ---- a store that lies (store_other_bytes, store_changes) --------------- */

static bool faults_chance(sim_world *w, sim_fault fault, uint32_t divisor) {
  const sim_profile *pr = &w->profile;
  return !w->liveness && pr->on[fault] && cs_prng_below(&w->prng_faults, 1000) < pr->rate_permille[fault] / divisor;
}

/*
 * The store puts other bytes of the same size under the object's key (its
 * checksum metadata no longer names its pack's bytes), or loses it (HEAD
 * answers 404, LIST leaves it out, until a PUT brings it back).
 */
static void store_damage(sim_world *w, uint32_t index, bool vanish) {
  sim_object *obj = &w->objects[index];
  if (vanish) {
    obj->gone = true;
  } else {
    for (int i = 0; i < 32; i += 8) {
      uint64_t r = cs_prng_next(&w->prng_faults) | 1u; /* odd: the first byte always changes */
      for (int k = 0; k < 8; k++) obj->ref.sha256[i + k] ^= (uint8_t)(r >> (8 * k));
    }
  }
  if (obj->pack != SIM_NONE) w->packs[obj->pack].damaged_ns = w->now_ns;
  w->counters.store_damaged++;
}

/* A plan's store window of other-bytes or vanish, while it lasts. */
static cs_plan_mode lie_window(const sim_world *w) {
  for (uint32_t i = 0; i < SIM_WINDOWS_MAX; i++) {
    const sim_fault_window *win = &w->windows[i];
    if (!win->active || win->catalog || win->status != 0 || w->now_ns >= win->until_ns) continue;
    if (win->mode == CS_PLAN_MODE_OTHER_BYTES || win->mode == CS_PLAN_MODE_VANISH) return win->mode;
  }
  return CS_PLAN_MODE_NONE;
}

/*
 * A PUT the store applied: it may keep other bytes of the same size (a torn
 * or replaced upload; store_other_bytes), or the object may change or vanish
 * right after, before the uploader's verifying HEAD (store_changes).
 */
static void put_lie(sim_world *w, uint32_t index) {
  cs_plan_mode mode = lie_window(w);
  if (mode == CS_PLAN_MODE_NONE && faults_chance(w, F_STORE_OTHER_BYTES, 4)) mode = CS_PLAN_MODE_OTHER_BYTES;
  if (mode == CS_PLAN_MODE_NONE && faults_chance(w, F_STORE_CHANGES, 8))
    mode = cs_prng_below(&w->prng_faults, 2) == 0 ? CS_PLAN_MODE_VANISH : CS_PLAN_MODE_OTHER_BYTES;
  if (mode != CS_PLAN_MODE_NONE) store_damage(w, index, mode == CS_PLAN_MODE_VANISH);
  if (mode != CS_PLAN_MODE_NONE) sim_cov_fault(w, mode == CS_PLAN_MODE_VANISH ? F_STORE_CHANGES : F_STORE_OTHER_BYTES);
}

/* A LIST page was answered: one of its packs may change or vanish before reconcile HEADs it. */
static void list_lie(sim_world *w, const sim_req *req) {
  if (req->key_count == 0 || !faults_chance(w, F_STORE_CHANGES, 4)) return;
  uint32_t index = req->keys[cs_prng_below(&w->prng_faults, req->key_count)];
  if (w->objects[index].is_pack && !w->objects[index].gone) {
    store_damage(w, index, cs_prng_below(&w->prng_faults, 2) == 0);
    sim_cov_fault(w, F_STORE_CHANGES);
  }
}

/*
 * store_changes: a page's continuation token is too long for the service to
 * hold (S3's tokens are opaque): the pass must end there, named in
 * last_error, and the next LIST start a new pass.
 */
static void list_token_lie(sim_world *w, sim_req *req) {
  if (req->next_token[0] == '\0' || !faults_chance(w, F_STORE_CHANGES, 16)) return;
  req->token_too_long = true;
  sim_cov_fault(w, F_STORE_CHANGES);
}

/* store_changes on the fault clock: some pack object changes or vanishes, whoever has read it. */
void sim_store_damage_random(sim_world *w) {
  for (int tries = 0; tries < 8 && w->object_count > 0; tries++) {
    uint32_t index = (uint32_t)cs_prng_below(&w->prng_faults, w->object_count);
    const sim_object *obj = &w->objects[index];
    if (!obj->is_pack || obj->gone || obj->pack == SIM_NONE) continue;
    store_damage(w, index, cs_prng_below(&w->prng_faults, 2) == 0);
    sim_cov_fault(w, F_STORE_CHANGES);
    return;
  }
}

/* A HEAD of a pack's key by the pack's owner: what the owner could learn of the store's lies. */
static void head_seen(sim_world *w, const sim_req *req, uint32_t found) {
  uint32_t pack = truth_of(w, &req->ref.pack_id);
  if (pack == SIM_NONE) return;
  sim_pack *sp = &w->packs[pack];
  if (sp->proc != req->proc || sp->ref.key_len != req->ref.key_len ||
      memcmp(sp->ref.key, req->ref.key, sp->ref.key_len) != 0)
    return;
  sp->owner_head_ns = w->now_ns;
  if (found == SIM_NONE) return;
  const sim_object *obj = &w->objects[found];
  if (obj->is_pack && memcmp(obj->ref.sha256, sp->ref.sha256, 32) == 0) sp->owner_right_ns = w->now_ns;
  else { /* other bytes under its key: sent again, set aside only when they stay (6.1) */
    const sim_proc *p = &w->procs[req->proc];
    if (sp->mismatch_gen[p->index] != p->svc_gen) sp->mismatch_gen[p->index] = p->svc_gen, sp->mismatch_count[p->index] = 0;
    /* Only a mismatch after a PUT of its that landed says the store keeps other bytes; an outage says nothing. */
    if (sp->put_since_mismatch[p->index] && !req->head_only) { /* an upload's HEAD, not reconcile's */
      sp->put_since_mismatch[p->index] = false;
      if (++sp->mismatch_count[p->index] >= p->svc_cfg.index_attempts_max) sp->conflict = true;
    }
  }
}

/* The store lost the pack's bytes after its owner had seen them there, and the owner has not looked since. */
static bool store_lost(const sim_world *w, uint32_t pack) {
  const sim_pack *sp = &w->packs[pack];
  return sp->damaged_ns != 0 && sp->owner_right_ns != 0 && sp->damaged_ns > sp->owner_head_ns;
}

/* The store holds the pack's own bytes under its key. */
static bool holds_bytes(const sim_world *w, uint32_t pack) {
  const sim_pack *sp = &w->packs[pack];
  uint32_t obj = sim_store_find(w, sp->ref.key, sp->ref.key_len);
  return obj != SIM_NONE && w->objects[obj].is_pack && memcmp(w->objects[obj].ref.sha256, sp->ref.sha256, 32) == 0;
}

bool sim_store_holds(const sim_world *w, uint32_t pack) { return holds_bytes(w, pack) || store_lost(w, pack); }

bool sim_pack_may_set_aside(const sim_world *w, uint32_t pack) {
  const sim_pack *sp = &w->packs[pack];
  return sp->poison_large || sp->poison_invalid || sp->conflict || sim_catalog_refuses_alone(w, pack);
}

bool sim_pack_may_set_aside_now(const sim_world *w, uint32_t pack) {
  const sim_pack *sp = &w->packs[pack];
  /* Other bytes excuse a set-aside only by the owner's service that saw the store keep them. */
  const sim_proc *owner = &w->procs[sp->proc];
  bool conflict_now = sp->conflict && sp->mismatch_gen[sp->proc] == owner->svc_gen &&
                      sp->mismatch_count[sp->proc] >= owner->svc_cfg.index_attempts_max;
  /* A rejected row (checked when it landed) sets it aside wherever it is: "rejected by the lease holder". */
  return sp->poison_large || sp->poison_invalid || conflict_now || sp->rejected || sim_catalog_refuses_alone(w, pack);
}

bool sim_pack_excused(const sim_world *w, uint32_t pack) {
  const sim_pack *sp = &w->packs[pack];
  bool lost = store_lost(w, pack) && !holds_bytes(w, pack);
  return sp->poison_large || sp->poison_invalid || sim_catalog_refuses_alone(w, pack) || sp->conflict || lost;
}

void sim_store_apply(sim_world *w, sim_req *req) {
  req->applied = true;
  if (store_status_override(w, req)) {
    req->applied = false;
    return;
  }
  switch (req->op) {
  case CS_OP_STORE_PUT: {
    uint32_t pack = truth_of(w, &req->ref.pack_id);
    if (pack != SIM_NONE) w->packs[pack].puts++;
    if (pack != SIM_NONE && w->packs[pack].proc == req->proc) w->packs[pack].put_since_mismatch[req->proc] = true;
    sim_store_put_object(w, &req->ref, true, pack);
    put_lie(w, sim_store_find(w, req->ref.key, req->ref.key_len));
    req->outcome = CS_OUT_OK;
    return;
  }
  case CS_OP_STORE_HEAD: {
    uint32_t found = sim_store_find(w, req->ref.key, req->ref.key_len);
    head_seen(w, req, found);
    if (found == SIM_NONE) {
      req->outcome = CS_OUT_NOT_FOUND;
      return;
    }
    head_fill(&w->objects[found], &req->head);
    req->outcome = CS_OUT_OK;
    return;
  }
  case CS_OP_STORE_LIST:
    w->counters.store_lists++;
    store_list(w, req);
    list_lie(w, req);
    list_token_lie(w, req);
    return;
  default: sim_bail(w, SIM_EXIT_CRASH, "store got op %s", cs_op_name(req->op));
  }
}

/* ---- the catalog -------------------------------------------------------- */

uint64_t sim_catalog_now(const sim_world *w) {
  uint64_t r = w->catalog_clock_ns;
  return r > 1 ? w->now_ns - w->now_ns % r : w->now_ns;
}

static uint64_t head_term(const sim_world *w) {
  return w->claim_count == 0 ? 0 : w->claims[w->claim_count - 1].term;
}

/* Claims at the head term are the last ones appended (claims only go to head + 1). */
static uint32_t head_first(const sim_world *w) {
  uint64_t term = head_term(w);
  uint32_t i = w->claim_count;
  while (i > 0 && w->claims[i - 1].term == term) i--;
  return i;
}

/*
 * The claims a request's replica sees (sim/replicas.c): every one in the log
 * (r == SIM_NONE: one server, or replicas with the quorum, whose consistent
 * reads see every confirmed write), or, with asynchronous replicas, those
 * that reached replica r. Its head: the highest term seen, and where to
 * start looking for its claims.
 */
typedef struct head_view {
  uint32_t r;
  uint64_t term;
  uint32_t from;
} head_view;

static bool claim_seen(const sim_world *w, const sim_claim *c, uint32_t r) {
  return r == SIM_NONE || c->seen_ns[r] <= w->now_ns;
}

static head_view view_head(const sim_world *w, uint32_t r) {
  head_view v = {r, 0, 0};
  if (r == SIM_NONE) {
    v.term = head_term(w);
    v.from = head_first(w);
    return v;
  }
  for (uint32_t i = 0; i < w->claim_count; i++)
    if (claim_seen(w, &w->claims[i], r) && w->claims[i].term > v.term) v.term = w->claims[i].term;
  return v;
}

static bool at_head(const sim_world *w, const head_view *v, const sim_claim *c) {
  return c->term == v->term && claim_seen(w, c, v->r);
}

static bool head_expired(const sim_world *w, const head_view *v) {
  uint64_t now = sim_catalog_now(w);
  for (uint32_t i = v->from; i < w->claim_count; i++)
    if (at_head(w, v, &w->claims[i]) && w->claims[i].expires_ns > now) return false;
  return true;
}

static bool head_free_for(const sim_world *w, const head_view *v, const cs_uuid *lease_id) {
  bool all_expired = true, all_mine = true;
  uint64_t now = sim_catalog_now(w);
  for (uint32_t i = v->from; i < w->claim_count; i++) {
    if (!at_head(w, v, &w->claims[i])) continue;
    if (w->claims[i].expires_ns > now) all_expired = false;
    if (!cs_uuid_equal(&w->claims[i].lease_id, lease_id)) all_mine = false;
  }
  return all_expired || all_mine;
}

/* How long until the head's last live claim expires, by the catalog's clock. */
static uint64_t head_busy_for(const sim_world *w, const head_view *v) {
  uint64_t now = sim_catalog_now(w), last = now;
  for (uint32_t i = v->from; i < w->claim_count; i++)
    if (at_head(w, v, &w->claims[i]) && w->claims[i].expires_ns > last) last = w->claims[i].expires_ns;
  return last - now;
}

/* The sole live claimant of the head term (its proc), or SIM_NONE: the whole log's (the checker's truth). */
uint32_t sim_catalog_holder(const sim_world *w, uint64_t server_now_ns, uint64_t *term) {
  uint32_t first = head_first(w);
  *term = head_term(w);
  if (w->claim_count == 0 || w->claim_count - first != 1) return SIM_NONE;
  const sim_claim *claim = &w->claims[first];
  if (claim->released || claim->expires_ns <= server_now_ns) return SIM_NONE;
  return claim->proc;
}

/* The head's only claim as replica r sees it, or NULL. */
static const sim_claim *head_sole(const sim_world *w, const head_view *v) {
  const sim_claim *sole = NULL;
  for (uint32_t i = v->from; i < w->claim_count; i++) {
    if (!at_head(w, v, &w->claims[i])) continue;
    if (sole != NULL) return NULL;
    sole = &w->claims[i];
  }
  return sole;
}

static bool fence_passes(const sim_world *w, const cs_uuid *lease_id, uint32_t r) {
  head_view v = view_head(w, r);
  const sim_claim *claim = head_sole(w, &v);
  return claim != NULL && !claim->released && cs_uuid_equal(&claim->lease_id, lease_id) &&
         claim->expires_ns > sim_catalog_now(w) + w->fence_margin_ns;
}

static void claim_append(sim_world *w, const sim_req *req, uint64_t term, uint64_t expires_ns, bool released) {
  if (w->claim_count >= SIM_CLAIMS_MAX) sim_bail(w, SIM_EXIT_MODEL, "model bound: claims");
  sim_claim *claim = &w->claims[w->claim_count++];
  claim->term = term;
  claim->lease_id = req->lease_id;
  claim->proc = req->proc;
  claim->acquired_ns = w->now_ns;
  claim->expires_ns = expires_ns;
  claim->released = released;
  sim_replicas_stamp(w, req->replica, claim->seen_ns);
  sim_replicas_claim_written(w);
}

/*
 * A claim lands at base + 1 when the head is still at base and free for the
 * claimant. With catalog_claims_concurrent (ClickHouse: the claim is one
 * INSERT ... SELECT that reads the head and appends) a second claim at the
 * same base, within SIM_CONTEST_WINDOW_NS of one that landed on a base free
 * for anyone, read the same head and lands too: two claims at one term. The
 * late claimant always reads back two claims; the first may have read back
 * "sole" before the late claim landed, and its fenced writes pass until then
 * (rows of one already past its fence may land after it: still the only
 * writer of that term, sim_check_effective_write). On replicas with the
 * quorum a claim whose quorum timed out lands later (sim_catalog_land).
 */
static void catalog_claim(sim_world *w, sim_req *req) {
  req->outcome = CS_OUT_OK;
  head_view v = view_head(w, sim_replica_view(w, req));
  if (v.term == req->term && head_free_for(w, &v, &req->lease_id)) {
    bool free_for_anyone = head_expired(w, &v);
    req->claim_expires_ns = sim_catalog_now(w) + w->base_svc.lease_ttl_ns;
    if (sim_replicas_quorum_late(w, req)) {
      req->land_pending = true;
      return;
    }
    sim_cov_claim(w, req);
    sim_check_claim(w, req->proc, req->term + 1);
    claim_append(w, req, req->term + 1, req->claim_expires_ns, false);
    w->contest_term = free_for_anyone ? req->term + 1 : 0;
    if (free_for_anyone && w->catalog_claims_concurrent) sim_cov_mark(w, SIM_COV_FAULT_CLAIMS_CONCURRENT);
    w->contest_until_ns = w->now_ns + SIM_CONTEST_WINDOW_NS;
    return;
  }
  uint64_t head = head_term(w);
  if (w->catalog_claims_concurrent && head == req->term + 1 && w->contest_term == head &&
      w->now_ns < w->contest_until_ns && !cs_uuid_equal(&w->claims[w->claim_count - 1].lease_id, &req->lease_id)) {
    claim_append(w, req, head, sim_catalog_now(w) + w->base_svc.lease_ttl_ns, false);
    w->counters.contested_terms++;
    sim_cov_mark(w, SIM_COV_SIT_CONTESTED_TERM);
  }
}

static void catalog_release(sim_world *w, sim_req *req) {
  req->outcome = CS_OUT_OK;
  uint32_t r = sim_replica_view(w, req);
  head_view v = view_head(w, r);
  bool last_mine;
  if (r == SIM_NONE) {
    last_mine = w->claim_count > 0 && cs_uuid_equal(&w->claims[w->claim_count - 1].lease_id, &req->lease_id);
  } else {
    const sim_claim *sole = head_sole(w, &v);
    last_mine = sole != NULL && cs_uuid_equal(&sole->lease_id, &req->lease_id);
  }
  if (v.term == req->term && head_free_for(w, &v, &req->lease_id) && last_mine) {
    req->claim_expires_ns = sim_catalog_now(w) + w->fence_margin_ns; /* free for others after the margin */
    if (sim_replicas_quorum_late(w, req)) {
      req->land_pending = true;
      return;
    }
    claim_append(w, req, req->term + 1, req->claim_expires_ns, true);
    sim_cov_mark(w, SIM_COV_SIT_RELEASE_APPLIED);
  } else {
    sim_cov_mark(w, SIM_COV_SIT_RELEASE_NOOP);
  }
}

/* A claim or release whose quorum timed out lands when the replicas fetched it, with the row it was written as. */
static void land_claim(sim_world *w, sim_req *req) {
  bool released = req->op == CS_OP_CAT_RELEASE;
  if (!released) {
    sim_cov_claim(w, req);
    sim_check_claim(w, req->proc, req->term + 1);
  }
  /* Parallel quorum writes (--replica-defect 3) let other claims land meanwhile: this row lies below the
     head, which it no longer changes (a simplification: the model's log keeps terms in order). */
  if (head_term(w) != req->term && w->replica_defect == SIM_REPLICA_DEFECT_PARALLEL) return;
  if (head_term(w) != req->term)
    sim_bail(w, SIM_EXIT_MODEL, "p%u's %s of term %" PRIu64 " landed late on head %" PRIu64 ": the claims table "
             "took a write while it was pending", req->proc, cs_op_name(req->op), req->term + 1, head_term(w));
  claim_append(w, req, req->term + 1, req->claim_expires_ns, released);
}

/* The watermark replica r sees. */
static uint64_t watermark_at(const sim_world *w, uint32_t r) {
  if (r == SIM_NONE) return w->watermark;
  uint64_t m = 0;
  for (uint32_t i = 0; i < w->publish_count; i++)
    if (w->publishes[i].seen_ns[r] <= w->now_ns && w->publishes[i].version > m) m = w->publishes[i].version;
  return m;
}

static void catalog_read_claims(sim_world *w, sim_req *req) {
  memset(&req->claims, 0, sizeof req->claims);
  uint32_t r = sim_replica_view(w, req);
  bool mine = false;
  for (uint32_t i = 0; i < w->claim_count; i++) {
    const sim_claim *claim = &w->claims[i];
    if (claim->term != req->term || !claim_seen(w, claim, r)) continue;
    req->claims.claim_count++;
    mine = !claim->released && cs_uuid_equal(&claim->lease_id, &req->lease_id) &&
           claim->expires_ns > sim_catalog_now(w);
  }
  req->claims.sole_mine = req->claims.claim_count == 1 && mine;
  req->outcome = CS_OUT_OK;
  if (req->claims.sole_mine)
    sim_replicas_barrier(w, req, fence_passes(w, &req->lease_id, r), watermark_at(w, r), w->inventory_version_max);
}


/*
 * INDEX as the adapters send it (docs/catalog-protocol.md): the descriptor
 * rows in bulk, unfenced, then the inventory rows (one per pack) in a fenced
 * statement. Only the inventory statement has a size: the column list and
 * the fence, and a row per pack with its key, measured against the server's
 * limit before any row is sent, so the batch is refused whole (halving fixes
 * it) and a pack's own rows never count. The lengths are the ClickHouse
 * adapter's with its default table prefix (measured: 651 bytes, and 150
 * bytes plus the key a pack).
 */
#define SIM_INVENTORY_FIXED_BYTES 651u
#define SIM_INVENTORY_ROW_BYTES 150u

static uint64_t inventory_row_bytes(const sim_world *w, uint32_t pack) {
  return SIM_INVENTORY_ROW_BYTES + w->packs[pack].ref.key_len;
}

/* The smallest statement limit that holds one pack's inventory row (the world's keys are under 128 bytes, or long_keys). */
uint64_t sim_catalog_statement_floor(const sim_world *w) {
  return SIM_INVENTORY_FIXED_BYTES + SIM_INVENTORY_ROW_BYTES + (w->long_keys ? CS_KEY_MAX : 128u);
}

/* Only a statement limit below one pack's inventory row (a plan's too_large window) refuses a pack alone. */
bool sim_catalog_refuses_alone(const sim_world *w, uint32_t pack) {
  return SIM_INVENTORY_FIXED_BYTES + inventory_row_bytes(w, pack) > w->catalog_insert_bytes_max;
}

/*
 * The request ended in a lost answer or a timeout: half the time the
 * connection went while the descriptor rows were on the wire or answering,
 * so the inventory statement was never sent.
 */
static bool index_cut_between(sim_world *w, const sim_req *req) {
  bool lost = req->has_forced && (req->forced == CS_OUT_UNKNOWN || req->forced == CS_OUT_TIMEOUT);
  return lost && cs_prng_below(&w->prng_net, 2) == 0;
}

static void catalog_index(sim_world *w, sim_req *req) {
  req->outcome = CS_OUT_OK;
  uint64_t bytes = SIM_INVENTORY_FIXED_BYTES;
  bool invalid = false;
  for (uint32_t i = 0; i < req->count; i++) {
    uint32_t pack = req->packs[i];
    if (pack == SIM_NONE) {
      w->counters.index_foreign++;
      continue;
    }
    bytes += inventory_row_bytes(w, pack);
    invalid = invalid || w->packs[pack].poison_invalid;
  }
  if (bytes > w->catalog_insert_bytes_max) {
    req->outcome = CS_OUT_TOO_LARGE; /* measured before any row was sent */
    sim_cov_fault(w, F_CATALOG_TOO_LARGE);
    return;
  }
  if (invalid) {
    req->outcome = CS_OUT_INVALID; /* a value refused before sending, or the rows' body refused whole */
    return;
  }
  req->rows_landed = true; /* unfenced: a stale holder's rows land too, named by nothing */
  if (index_cut_between(w, req)) {
    w->counters.orphan_index_writes++;
    sim_cov_mark(w, SIM_COV_SIT_ORPHAN_INDEX_CUT);
    return;
  }
  if (!fence_passes(w, &req->lease_id, sim_replica_view(w, req))) {
    w->counters.fenced_refused++;
    w->counters.orphan_index_writes++;
    sim_cov_mark(w, SIM_COV_SIT_FENCE_REFUSED_INDEX);
    return;
  }
  /*
   * Late rows (docs/catalog-protocol.md): inventory rows only above the
   * watermark and at or above every inventory row, checked with the fence.
   */
  if (req->version <= w->watermark || req->version < w->inventory_version_max) {
    req->version_refused = true; /* the world checks its answer (deliver_reply) */
    /* Above the floor its sender read, and above the watermark: only a late quorum INDEX landed since sits above it. */
    if (req->version > w->watermark && w->replicas != 0 && w->inventory_version_max == w->late_raise_version &&
        w->late_raise_ns > w->floor_read_ns[req->proc]) {
      req->version_refused_late = true;
      sim_cov_mark(w, SIM_COV_SIT_INDEX_BELOW_LATE_ROWS);
    }
    w->counters.index_late_refused++;
    w->counters.orphan_index_writes++;
    sim_cov_mark(w, SIM_COV_SIT_INDEX_LATE_REFUSED);
    return;
  }
  sim_check_fence_passed(w, req);
  req->land_pending = true; /* the fence passed now; the inventory rows land a little later */
  sim_replicas_quorum_late(w, req);
}

/* The inventory rows land: they name the descriptor rows at (pack, version), which landed before them. */
static void land_index(sim_world *w, sim_req *req) {
  if (!req->rows_landed) sim_bail(w, SIM_EXIT_SAFETY, "p%u's inventory rows landed without their descriptors", req->proc);
  sim_check_effective_write(w, req);
  /*
   * Packs never become visible below the watermark: a reader that pinned it
   * saw them absent, and a capture array's first visible version decides its
   * slots (docs/arrays.md). The doubtful INDEX's sender waits out the landing
   * delay before it publishes above it (index_settle_ns).
   */
  if (req->version <= w->watermark)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's inventory rows at v%" PRIu64 " landed at or below the watermark %" PRIu64
             " (sent %.6f): its packs became visible retroactively", req->proc, req->version, w->watermark,
             (double)req->sent_ns / 1e9);
  req->inventory_landed = true;
  if (req->version > w->inventory_version_max) {
    if (req->quorum_late) w->late_raise_ns = w->now_ns, w->late_raise_version = req->version;
    w->inventory_version_max = req->version;
  }
  for (uint32_t i = 0; i < req->count; i++) {
    sim_pack *pack = req->packs[i] == SIM_NONE ? NULL : &w->packs[req->packs[i]];
    if (pack != NULL && (pack->min_version == 0 || req->version < pack->min_version))
      pack->min_version = req->version;
  }
}

static void catalog_publish(sim_world *w, sim_req *req) {
  req->outcome = CS_OUT_OK;
  if (!fence_passes(w, &req->lease_id, sim_replica_view(w, req))) {
    w->counters.fenced_refused++;
    sim_cov_mark(w, SIM_COV_SIT_FENCE_REFUSED_PUBLISH);
    return;
  }
  sim_check_fence_passed(w, req);
  req->land_pending = true;
  sim_replicas_quorum_late(w, req);
}

static void land_publish(sim_world *w, sim_req *req) {
  sim_check_effective_write(w, req);
  sim_check_publish(w, req);
  if (w->publish_count >= SIM_PUBLISH_MAX) sim_bail(w, SIM_EXIT_MODEL, "model bound: publishes");
  sim_publish *pub = &w->publishes[w->publish_count++];
  pub->version = req->version;
  pub->term = req->term;
  pub->proc = req->proc;
  pub->at_ns = w->now_ns;
  pub->lease_id = req->lease_id;
  sim_replicas_stamp(w, req->replica, pub->seen_ns);
  if (req->version > w->watermark) {
    w->watermark = req->version;
    w->watermark_sent_ns = req->sent_ns;
    sim_arrays_poll(w); /* a reader of the capture array refreshes at the new watermark */
  }
}

/* Rejected rows for set-aside packs; only poison may be rejected. */
static void catalog_reject(sim_world *w, sim_req *req) {
  req->outcome = CS_OUT_OK;
  if (!fence_passes(w, &req->lease_id, sim_replica_view(w, req))) {
    w->counters.fenced_refused++;
    sim_cov_mark(w, SIM_COV_SIT_FENCE_REFUSED_REJECT);
    return;
  }
  sim_check_fence_passed(w, req);
  req->land_pending = true;
  sim_replicas_quorum_late(w, req);
}

static void land_reject(sim_world *w, sim_req *req) {
  sim_check_effective_write(w, req);
  for (uint32_t i = 0; i < req->count; i++) {
    uint32_t pack = req->packs[i];
    if (pack == SIM_NONE) continue;
    sim_pack *sp = &w->packs[pack];
    if (!sim_pack_may_set_aside(w, pack)) {
      char id[CS_UUID_TEXT_LEN + 1];
      cs_uuid_format(&sp->ref.pack_id, id);
      sim_bail(w, SIM_EXIT_SAFETY, "p%u recorded healthy pack %s as rejected", req->proc, id);
    }
    sp->rejected = true;
  }
  w->counters.rejects_landed++;
}

/*
 * The rows of a fenced write land at most apply_delay after its fence was
 * checked (replication or merge lag); the fence margin must cover that delay.
 */
void sim_catalog_land(sim_world *w, sim_req *req) {
  req->land_pending = false;
  switch (req->op) {
  case CS_OP_CAT_INDEX: land_index(w, req); return;
  case CS_OP_CAT_PUBLISH: land_publish(w, req); return;
  case CS_OP_CAT_REJECT: land_reject(w, req); return;
  case CS_OP_CAT_CLAIM:
  case CS_OP_CAT_RELEASE: land_claim(w, req); return;
  default: sim_bail(w, SIM_EXIT_CRASH, "land of %s", cs_op_name(req->op));
  }
}

bool sim_catalog_committed(const sim_world *w, uint32_t pack) {
  if (pack == SIM_NONE) return false;
  uint64_t v = w->packs[pack].min_version;
  return v != 0 && v <= w->watermark;
}

void sim_catalog_apply(sim_world *w, sim_req *req) {
  req->applied = true;
  sim_cov_catalog(w);
  if (sim_replicas_refuse(w, req)) return;
  switch (req->op) {
  case CS_OP_CAT_HEAD: {
    uint32_t r = sim_replica_view(w, req);
    head_view v = view_head(w, r);
    req->cat_head.head_term = v.term;
    req->cat_head.head_free = head_free_for(w, &v, &req->lease_id);
    req->cat_head.watermark = watermark_at(w, r);
    req->cat_head.index_floor = w->inventory_version_max;
    w->floor_read_ns[req->proc] = w->now_ns;
    req->cat_head.busy_for_ns = req->cat_head.head_free ? 0 : head_busy_for(w, &v);
    req->outcome = CS_OUT_OK;
    return;
  }
  case CS_OP_CAT_CLAIM: catalog_claim(w, req); return;
  case CS_OP_CAT_READ_CLAIMS: catalog_read_claims(w, req); return;
  case CS_OP_CAT_RELEASE: catalog_release(w, req); return;
  case CS_OP_CAT_INDEX: catalog_index(w, req); return;
  case CS_OP_CAT_PUBLISH: catalog_publish(w, req); return;
  case CS_OP_CAT_COMMITTED:
    for (uint32_t i = 0; i < req->count; i++) {
      uint32_t pack = req->packs[i];
      req->held[i] = sim_catalog_committed(w, pack);
      req->rejected[i] = pack != SIM_NONE && w->packs[pack].rejected;
    }
    req->outcome = CS_OUT_OK;
    return;
  case CS_OP_CAT_REJECT: catalog_reject(w, req); return;
  default: sim_bail(w, SIM_EXIT_CRASH, "catalog got op %s", cs_op_name(req->op));
  }
}

uint32_t sim_truth_of(const sim_world *w, const cs_uuid *id) { return truth_of(w, id); }

/* ---- the catalog's search (readers) -------------------------------------- */

void sim_packs_created_between(const sim_world *w, uint64_t from_ns, uint64_t to_ns, uint32_t *lo, uint32_t *hi) {
  uint32_t a = 0, b = w->pack_count;
  while (a < b) { /* the first pack created at or after from_ns */
    uint32_t mid = a + (b - a) / 2;
    if (w->packs[mid].ref.created_at_ns < from_ns) a = mid + 1;
    else b = mid;
  }
  *lo = a;
  b = w->pack_count;
  while (a < b) { /* the first pack created after to_ns */
    uint32_t mid = a + (b - a) / 2;
    if (w->packs[mid].ref.created_at_ns <= to_ns) a = mid + 1;
    else b = mid;
  }
  *hi = a;
}

/*
 * A search page as both catalogs answer it (catalog.h search): rows of packs
 * whose inventory version is at or below the watermark and that have no
 * rejected row, in pack id order after the cursor. The model pages by pack
 * (every record of a pack on one page); the filter is a window of creation
 * times, which is a range of truth indexes (creation times only grow).
 */
uint32_t sim_catalog_search(const sim_world *w, uint64_t watermark, uint64_t from_ns, uint64_t to_ns,
                            const cs_uuid *after, uint32_t *packs, uint32_t max) {
  uint32_t lo, hi, n = 0;
  sim_packs_created_between(w, from_ns, to_ns, &lo, &hi);
  for (uint32_t i = lo; i < hi; i++) {
    const sim_pack *sp = &w->packs[i];
    if (sp->min_version == 0 || sp->min_version > watermark || sp->rejected) continue;
    if (after != NULL && cs_uuid_compare(&sp->ref.pack_id, after) <= 0) continue;
    uint32_t at = n < max ? n : max;
    while (at > 0 && cs_uuid_compare(&sp->ref.pack_id, &w->packs[packs[at - 1]].ref.pack_id) < 0) at--;
    if (at == max) continue; /* above the page's last id: a later page */
    uint32_t last = n < max ? n : max - 1;
    memmove(&packs[at + 1], &packs[at], (last - at) * sizeof packs[0]);
    packs[at] = i;
    if (n < max) n++;
  }
  return n;
}

/* Conditional create: a create-only PUT of a present key is refused only where the store enforces it. */
bool sim_store_create_refused(const sim_world *w, const char *key, uint32_t key_len) {
  return w->store_if_none_match && sim_store_find(w, key, key_len) != SIM_NONE;
}

/* Removes the object at key; the last object moves into its slot. Returns the freed slot or SIM_NONE. */
uint32_t sim_store_delete_object(sim_world *w, const char *key, uint32_t key_len) {
  uint32_t pos = order_lower_bound(w, key, key_len);
  if (pos >= w->object_count || key_compare(&w->objects[w->order[pos]], key, key_len) != 0) return SIM_NONE;
  uint32_t gone = w->order[pos];
  memmove(&w->order[pos], &w->order[pos + 1], (w->object_count - 1 - pos) * sizeof w->order[0]);
  uint32_t last = --w->object_count;
  if (gone == last) return gone;
  w->objects[gone] = w->objects[last];
  for (uint32_t i = 0; i < w->object_count; i++)
    if (w->order[i] == last) w->order[i] = (uint16_t)gone;
  return gone;
}

void sim_models_init(sim_world *w) {
  w->object_count = 0;
  w->claim_count = 0;
  w->publish_count = 0;
  w->watermark = 0;
}

/*
 * The simulator's models behind cs_store_ops and cs_catalog_ops (see
 * model_adapter.h). Every primitive builds one sim_req and hands it to the
 * model's own apply function, so the answers are the model's; a model bail
 * (a bound, or a checker's safety verdict) comes back as CS_OUT_INVALID with
 * the model's reason in detail.
 */
#include "model_adapter.h"

#include "world.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * CS_SEC_NS + (uint64_t)ts.tv_nsec;
}

static sim_world *world_new(sim_result *result) {
  sim_world *w = calloc(1, sizeof *w);
  if (w == NULL) return NULL;
  w->result = result;
  sim_models_init(w);
  w->catalog_insert_bytes_max = UINT64_MAX;
  w->catalog_unhealthy_until_ns = UINT64_MAX; /* the renewal-timing checker judges a service, not this adapter */
  w->last_holder_proc = SIM_NONE;
  return w;
}

/* ---- the store ------------------------------------------------------------ */

typedef struct model_store {
  sim_world *w;
  sim_result result;
  sim_req req;
  uint8_t *bytes[SIM_OBJECTS_MAX]; /* by object index: what the model does not keep */
} model_store;

static void store_res(cs_store_result *res, cs_outcome outcome, const char *detail) {
  res->outcome = outcome;
  res->http_status = 0;
  snprintf(res->detail, sizeof res->detail, "%.200s", detail == NULL ? "" : detail);
}

static bool store_apply(model_store *m) {
  if (setjmp(m->w->bail) != 0) return false;
  sim_store_apply(m->w, &m->req);
  return true;
}

static bool store_put_plain(model_store *m) {
  if (setjmp(m->w->bail) != 0) return false;
  sim_store_put_object(m->w, &m->req.ref, false, SIM_NONE);
  return true;
}

static int ms_put(void *self, const char *key, const void *bytes, size_t len, const cs_object_info *meta,
                  bool if_none_match, cs_store_result *res) {
  model_store *m = self;
  if (key == NULL || res == NULL || (bytes == NULL && len > 0)) return CS_E_INVALID_ARGUMENT;
  memset(&m->req, 0, sizeof m->req);
  if (cs_pack_ref_set_key(&m->req.ref, key, strlen(key)) != CS_E_OK) return CS_E_TOO_LARGE;
  if (if_none_match && sim_store_create_refused(m->w, key, m->req.ref.key_len)) {
    store_res(res, CS_OUT_PRECONDITION, "model: object exists");
    return CS_E_OK;
  }
  uint8_t *copy = malloc(len == 0 ? 1 : len);
  if (copy == NULL) return CS_E_NO_MEMORY;
  if (len > 0) memcpy(copy, bytes, len);
  m->req.op = CS_OP_STORE_PUT;
  m->req.ref.size_bytes = len;
  bool is_pack = meta != NULL && meta->is_pack;
  if (is_pack) {
    m->req.ref.pack_id = meta->pack_id;
    memcpy(m->req.ref.sha256, meta->sha256, 32);
    m->req.ref.record_count = meta->record_count;
    m->req.ref.created_at_ns = meta->created_at_ns;
  }
  bool ok = is_pack ? store_apply(m) : store_put_plain(m);
  if (!ok) {
    free(copy);
    store_res(res, CS_OUT_INVALID, m->result.reason);
    return CS_E_OK;
  }
  uint32_t index = sim_store_find(m->w, key, m->req.ref.key_len);
  free(m->bytes[index]);
  m->bytes[index] = copy;
  store_res(res, CS_OUT_OK, NULL);
  return CS_E_OK;
}

static int ms_head(void *self, const char *key, cs_object_info *info, cs_store_result *res) {
  model_store *m = self;
  if (key == NULL || info == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  memset(&m->req, 0, sizeof m->req);
  memset(info, 0, sizeof *info);
  if (cs_pack_ref_set_key(&m->req.ref, key, strlen(key)) != CS_E_OK) return CS_E_TOO_LARGE;
  m->req.op = CS_OP_STORE_HEAD;
  if (!store_apply(m)) {
    store_res(res, CS_OUT_INVALID, m->result.reason);
    return CS_E_OK;
  }
  store_res(res, m->req.outcome, NULL);
  if (m->req.outcome != CS_OUT_OK) return CS_E_OK;
  info->is_pack = m->req.head.is_pack;
  info->size_bytes = m->req.head.size_bytes;
  info->pack_id = m->req.head.pack_id;
  memcpy(info->sha256, m->req.head.sha256, 32);
  info->record_count = m->req.head.record_count;
  info->created_at_ns = m->req.head.created_at_ns;
  return CS_E_OK;
}

/* HTTP Range semantics, as dirstore: a long suffix is the whole object; an offset past the end is refused. */
static bool range_resolve(const cs_range *range, uint64_t size, uint64_t *offset, uint64_t *length) {
  if (range == NULL) {
    *offset = 0;
    *length = size;
    return true;
  }
  if (range->suffix) {
    if (range->length == 0) return false;
    *length = range->length < size ? range->length : size;
    *offset = size - *length;
    return true;
  }
  if (range->offset >= size || range->length == 0) return false;
  *offset = range->offset;
  *length = size - range->offset < range->length ? size - range->offset : range->length;
  return true;
}

static int ms_get(void *self, const char *key, const cs_range *range, void *buf, size_t cap, size_t *got,
                  cs_store_result *res) {
  model_store *m = self;
  if (key == NULL || got == NULL || res == NULL || (buf == NULL && cap > 0)) return CS_E_INVALID_ARGUMENT;
  *got = 0;
  uint32_t index = sim_store_find(m->w, key, (uint32_t)strlen(key));
  if (index == SIM_NONE) {
    store_res(res, CS_OUT_NOT_FOUND, "model: no such key");
    return CS_E_OK;
  }
  uint64_t offset = 0, length = 0;
  uint64_t size = m->w->objects[index].ref.size_bytes;
  if (range != NULL && range->suffix && range->length < size && m->w->store_suffix_from_start) {
    char detail[128];
    snprintf(detail, sizeof detail, "model: bytes=-%llu answered as bytes 0-%llu/%llu (refused)",
             (unsigned long long)range->length, (unsigned long long)range->length, (unsigned long long)size);
    store_res(res, CS_OUT_INVALID, detail);
    return CS_E_OK;
  }
  if (!range_resolve(range, size, &offset, &length)) {
    store_res(res, CS_OUT_INVALID, "model: range not satisfiable");
    return CS_E_OK;
  }
  if (length > cap) return CS_E_TOO_LARGE;
  if (length > 0) memcpy(buf, m->bytes[index] + offset, (size_t)length);
  *got = (size_t)length;
  store_res(res, CS_OUT_OK, NULL);
  return CS_E_OK;
}

/*
 * The model lists under w->prefix, which holds 63 bytes: a longer prefix is
 * listed under its first 63 bytes and filtered here, taking model pages until
 * one key matches or the listing ends, so every page still makes progress.
 */
static int ms_list(void *self, const char *prefix, const char *token, uint32_t max_keys, cs_list_page *page,
                   cs_store_result *res) {
  model_store *m = self;
  if (prefix == NULL || token == NULL || page == NULL || res == NULL || page->keys == NULL || max_keys == 0)
    return CS_E_INVALID_ARGUMENT;
  if (strlen(token) >= CS_KEY_MAX) return CS_E_TOO_LARGE;
  uint32_t limit = max_keys < page->key_capacity ? max_keys : page->key_capacity;
  size_t prefix_len = strlen(prefix);
  snprintf(m->w->prefix, sizeof m->w->prefix, "%s", prefix);
  char next[CS_KEY_MAX];
  snprintf(next, sizeof next, "%s", token);
  page->key_count = 0;
  for (uint32_t round = 0; round <= SIM_OBJECTS_MAX && page->key_count == 0; round++) {
    memset(&m->req, 0, sizeof m->req);
    memcpy(m->req.token, next, sizeof next);
    m->req.op = CS_OP_STORE_LIST;
    m->req.count = limit;
    if (!store_apply(m)) {
      store_res(res, CS_OUT_INVALID, m->result.reason);
      return CS_E_OK;
    }
    for (uint32_t i = 0; i < m->req.key_count; i++) {
      const char *key = m->w->objects[m->req.keys[i]].ref.key;
      if (strncmp(key, prefix, prefix_len) == 0) snprintf(page->keys[page->key_count++], CS_KEY_MAX, "%s", key);
    }
    memcpy(next, m->req.next_token, sizeof next);
    if (next[0] == '\0') break;
  }
  snprintf(page->next_token, sizeof page->next_token, "%s", next);
  store_res(res, m->req.outcome, NULL);
  return CS_E_OK;
}

static int ms_del(void *self, const char *key, cs_store_result *res) {
  model_store *m = self;
  if (key == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  uint32_t gone = sim_store_delete_object(m->w, key, (uint32_t)strlen(key));
  if (gone != SIM_NONE) {
    free(m->bytes[gone]);
    uint32_t last = m->w->object_count; /* the object that moved into gone, if any */
    m->bytes[gone] = gone == last ? NULL : m->bytes[last];
    m->bytes[last] = NULL;
  }
  store_res(res, CS_OUT_OK, NULL); /* like S3: deleting an absent key succeeds */
  return CS_E_OK;
}

static void ms_close(void *self) {
  model_store *m = self;
  for (uint32_t i = 0; i < SIM_OBJECTS_MAX; i++) free(m->bytes[i]);
  free(m->w);
  free(m);
}

static const cs_store_ops model_store_ops = {
    .name = "model", .put = ms_put, .head = ms_head, .get = ms_get, .list = ms_list, .del = ms_del, .close = ms_close};

int sim_model_store_open(uint32_t switches, cs_store *out) {
  if (out == NULL) return CS_E_INVALID_ARGUMENT;
  model_store *m = calloc(1, sizeof *m);
  if (m == NULL) return CS_E_NO_MEMORY;
  m->w = world_new(&m->result);
  if (m->w == NULL) {
    free(m);
    return CS_E_NO_MEMORY;
  }
  m->w->store_if_none_match = (switches & SIM_STORE_IF_NONE_MATCH) != 0;
  m->w->store_list_path_order = (switches & SIM_STORE_LIST_PATH_ORDER) != 0;
  m->w->store_suffix_from_start = (switches & SIM_STORE_SUFFIX_FROM_START) != 0;
  /* Every field: a reused cs_store must not keep an old store's queue. The flags stay false until probed. */
  *out = (cs_store){.ops = &model_store_ops, .self = m};
  return CS_E_OK;
}

/* ---- the catalog ---------------------------------------------------------- */

typedef struct model_row {
  cs_uuid pack_id;
  uint64_t version;
  char key[CS_KEY_MAX];
  cs_pack_record record; /* text points into text */
  char *text;
} model_row;

/* An inventory row: it names the descriptor rows of (pack_id, version). */
typedef struct model_named {
  cs_uuid pack_id;
  uint64_t version;
  cs_pack_ref ref; /* the inventory row's values (LIST_PACKS) */
} model_named;

typedef struct model_catalog {
  sim_world *w;
  sim_result result;
  sim_req req;
  uint64_t start_ns;
  uint64_t advance_ns;
  model_row *rows; /* every descriptor row that landed, orphans included */
  size_t row_count, row_capacity;
  model_named *named;
  size_t named_count, named_capacity;
} model_catalog;

static void cat_res(cs_catalog_result *res, cs_outcome outcome, const char *detail) {
  res->outcome = outcome;
  res->server_code = 0;
  snprintf(res->detail, sizeof res->detail, "%.200s", detail == NULL ? "" : detail);
}

static void clock_sync(model_catalog *m) { m->w->now_ns = mono_ns() - m->start_ns + m->advance_ns; }

/* The proc standing for lease_id (procs are only a lease-id table here), or SIM_NONE when full. */
static uint32_t proc_of(model_catalog *m, const cs_uuid *lease_id) {
  for (uint32_t i = 0; i < m->w->proc_count; i++)
    if (cs_uuid_equal(&m->w->procs[i].lease_id, lease_id)) return i;
  if (m->w->proc_count >= SIM_PROCS_MAX) return SIM_NONE;
  sim_proc *p = &m->w->procs[m->w->proc_count];
  p->index = m->w->proc_count;
  p->kind = PROC_RIVAL;
  p->alive = false; /* no live service behind it: the takeover checker has nothing to protect */
  p->lease_id = *lease_id;
  return m->w->proc_count++;
}

/* The model's pack index for id, registering it when add; SIM_NONE when unknown (or full). */
static uint32_t pack_of(model_catalog *m, const cs_uuid *id, const cs_pack_ref *ref) {
  for (uint32_t i = 0; i < m->w->pack_count; i++)
    if (cs_uuid_equal(&m->w->packs[i].ref.pack_id, id)) return i;
  if (m->w->pack_count >= SIM_PACKS_MAX) return SIM_NONE;
  if (ref == NULL && id == NULL) return SIM_NONE;
  sim_pack *pack = &m->w->packs[m->w->pack_count];
  memset(pack, 0, sizeof *pack);
  if (ref != NULL) pack->ref = *ref;
  pack->ref.pack_id = *id;
  pack->proc = SIM_NONE;
  return m->w->pack_count++;
}

/* Applies the request; a fenced write's rows land at once (the bare model has no apply delay). */
static bool cat_apply(model_catalog *m) {
  if (setjmp(m->w->bail) != 0) return false;
  sim_catalog_apply(m->w, &m->req);
  if (m->req.land_pending) sim_catalog_land(m->w, &m->req);
  return true;
}

/* Prepares the request for op by lease_id; false when the model's lease table is full. */
static bool req_begin(model_catalog *m, cs_op op, const cs_uuid *lease_id) {
  memset(&m->req, 0, sizeof m->req);
  m->req.op = op;
  m->req.to_catalog = true;
  clock_sync(m);
  if (lease_id == NULL) return true;
  m->req.lease_id = *lease_id;
  m->req.proc = proc_of(m, lease_id);
  return m->req.proc != SIM_NONE;
}

static int cat_finish(model_catalog *m, cs_catalog_result *res) {
  if (!cat_apply(m)) cat_res(res, CS_OUT_INVALID, m->result.reason);
  else cat_res(res, m->req.outcome, NULL);
  return CS_E_OK;
}

static int mc_schema_ensure(void *self, cs_catalog_result *res) {
  (void)self;
  if (res == NULL) return CS_E_INVALID_ARGUMENT;
  cat_res(res, CS_OUT_OK, NULL); /* the model has no tables */
  return CS_E_OK;
}

static int mc_head(void *self, const cs_uuid *lease_id, cs_cat_head *out, cs_catalog_result *res) {
  model_catalog *m = self;
  if (lease_id == NULL || out == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  if (!req_begin(m, CS_OP_CAT_HEAD, lease_id)) return CS_E_FULL;
  cat_finish(m, res);
  *out = m->req.cat_head;
  return CS_E_OK;
}

static int mc_claim(void *self, const cs_uuid *lease_id, uint64_t base_term, uint64_t ttl_ns, cs_catalog_result *res) {
  model_catalog *m = self;
  if (lease_id == NULL || res == NULL || ttl_ns == 0) return CS_E_INVALID_ARGUMENT;
  if (!req_begin(m, CS_OP_CAT_CLAIM, lease_id)) return CS_E_FULL;
  m->req.term = base_term;
  m->w->base_svc.lease_ttl_ns = ttl_ns;
  return cat_finish(m, res);
}

static int mc_read_claims(void *self, const cs_uuid *lease_id, uint64_t term, cs_claims *out, cs_catalog_result *res) {
  model_catalog *m = self;
  if (lease_id == NULL || out == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  if (!req_begin(m, CS_OP_CAT_READ_CLAIMS, lease_id)) return CS_E_FULL;
  m->req.term = term;
  cat_finish(m, res);
  *out = m->req.claims;
  return CS_E_OK;
}

static int mc_release(void *self, const cs_uuid *lease_id, uint64_t term, uint64_t margin_ns, cs_catalog_result *res) {
  model_catalog *m = self;
  if (lease_id == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  if (!req_begin(m, CS_OP_CAT_RELEASE, lease_id)) return CS_E_FULL;
  m->req.term = term;
  m->w->fence_margin_ns = margin_ns;
  return cat_finish(m, res);
}

/* Deep copy of a record's text into one block owned by row. */
static bool row_fill(model_row *row, const cs_pack_record *src) {
  row->record = *src;
  cs_pack_text *fields[] = {&row->record.meta.capture_id,  &row->record.meta.tenant_id,
                            &row->record.meta.experiment_id, &row->record.meta.run_id,
                            &row->record.meta.session_id,  &row->record.meta.request_id,
                            &row->record.meta.sequence_id, &row->record.meta.model_id,
                            &row->record.meta.model_revision, &row->record.meta.adapter_revision,
                            &row->record.meta.capture_policy_version, &row->record.meta.hook_name};
  size_t total = 0;
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) total += fields[i]->len + 1;
  row->text = malloc(total);
  if (row->text == NULL) return false;
  char *p = row->text;
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    if (fields[i]->bytes == NULL) continue;
    memcpy(p, fields[i]->bytes, fields[i]->len);
    p[fields[i]->len] = '\0';
    fields[i]->bytes = p;
    p += fields[i]->len + 1;
  }
  return true;
}

static bool rows_store(model_catalog *m, uint64_t version, const cs_index_pack *packs, uint32_t pack_count) {
  for (uint32_t i = 0; i < pack_count; i++) {
    for (uint32_t r = 0; r < packs[i].record_count; r++) {
      if (m->row_count == m->row_capacity) {
        size_t cap = m->row_capacity == 0 ? 64 : m->row_capacity * 2;
        model_row *rows = realloc(m->rows, cap * sizeof *rows);
        if (rows == NULL) return false;
        m->rows = rows;
        m->row_capacity = cap;
      }
      model_row *row = &m->rows[m->row_count];
      row->pack_id = packs[i].ref->pack_id;
      row->version = version;
      snprintf(row->key, sizeof row->key, "%s", packs[i].ref->key);
      if (!row_fill(row, &packs[i].records[r])) return false;
      m->row_count++;
    }
  }
  return true;
}

static bool named_store(model_catalog *m, uint64_t version, const cs_index_pack *packs, uint32_t pack_count) {
  if (m->named_count + pack_count > m->named_capacity) {
    size_t cap = m->named_capacity == 0 ? 64 : m->named_capacity;
    while (cap < m->named_count + pack_count) cap *= 2;
    model_named *named = realloc(m->named, cap * sizeof *named);
    if (named == NULL) return false;
    m->named = named;
    m->named_capacity = cap;
  }
  for (uint32_t i = 0; i < pack_count; i++)
    m->named[m->named_count++] = (model_named){packs[i].ref->pack_id, version, *packs[i].ref};
  return true;
}

static bool is_named(const model_catalog *m, const cs_uuid *pack_id, uint64_t version) {
  for (size_t i = 0; i < m->named_count; i++)
    if (m->named[i].version == version && cs_uuid_equal(&m->named[i].pack_id, pack_id)) return true;
  return false;
}

/*
 * catalog.h's key rule, as cs_catalog_index_keys_ok words it (the model does
 * not link the adapters): no NUL in a pack's object key. Record texts may
 * hold U+0000; the model keeps them byte for byte. False with res INVALID
 * naming the first offence.
 */
static bool key_rule_ok(const cs_index_pack *packs, uint32_t pack_count, cs_catalog_result *res) {
  for (uint32_t i = 0; i < pack_count; i++) {
    const cs_pack_ref *ref = packs[i].ref;
    const char *nul = memchr(ref->key, '\0', ref->key_len);
    if (nul == NULL) continue;
    char id[CS_UUID_TEXT_LEN + 1], quoted[128]; /* the sentence fits the detail whole */
    cs_uuid_format(&ref->pack_id, id);
    cs_quote_bytes(ref->key, ref->key_len, 96, quoted, sizeof quoted);
    res->outcome = CS_OUT_INVALID;
    res->server_code = 0;
    snprintf(res->detail, sizeof res->detail, "index: pack %s: key '%s' holds a NUL byte at byte %zu", id, quoted,
             (size_t)(nul - ref->key));
    return false;
  }
  return true;
}

static int mc_index(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version,
                    const cs_index_pack *packs, uint32_t pack_count, cs_catalog_result *res) {
  model_catalog *m = self;
  if (lease_id == NULL || res == NULL || (packs == NULL && pack_count > 0)) return CS_E_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < pack_count; i++)
    if (packs[i].ref == NULL || packs[i].ref->key_len >= CS_KEY_MAX ||
        (packs[i].records == NULL && packs[i].record_count > 0))
      return CS_E_INVALID_ARGUMENT;
  if (!key_rule_ok(packs, pack_count, res)) return CS_E_OK; /* nothing reaches the model */
  if (!req_begin(m, CS_OP_CAT_INDEX, lease_id)) return CS_E_FULL;
  if (pack_count > SIM_BATCH_MAX) {
    cat_res(res, CS_OUT_TOO_LARGE, "model: more packs than one batch holds");
    return CS_E_OK;
  }
  for (uint32_t i = 0; i < pack_count; i++) {
    m->req.packs[i] = pack_of(m, &packs[i].ref->pack_id, packs[i].ref);
    if (m->req.packs[i] == SIM_NONE) return CS_E_FULL;
  }
  m->req.count = pack_count;
  m->req.version = version;
  m->w->fence_margin_ns = margin_ns;
  cat_finish(m, res);
  /* The rows land unfenced, as the real adapters' bulk insert does; only the inventory is fenced. */
  if (m->req.rows_landed && !rows_store(m, version, packs, pack_count)) return CS_E_NO_MEMORY;
  if (m->req.inventory_landed && !named_store(m, version, packs, pack_count)) return CS_E_NO_MEMORY;
  return CS_E_OK;
}

static int mc_publish(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version, uint64_t term,
                      uint32_t pack_count, cs_catalog_result *res) {
  model_catalog *m = self;
  if (lease_id == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  if (!req_begin(m, CS_OP_CAT_PUBLISH, lease_id)) return CS_E_FULL;
  m->req.version = version;
  m->req.term = term;
  m->req.count = pack_count;
  m->w->fence_margin_ns = margin_ns;
  return cat_finish(m, res);
}

static int mc_reject(void *self, const cs_uuid *lease_id, uint64_t margin_ns, const cs_uuid *ids, uint32_t count,
                     cs_catalog_result *res) {
  model_catalog *m = self;
  if (lease_id == NULL || res == NULL || (ids == NULL && count > 0)) return CS_E_INVALID_ARGUMENT;
  if (!req_begin(m, CS_OP_CAT_REJECT, lease_id)) return CS_E_FULL;
  if (count > SIM_BATCH_MAX) return CS_E_TOO_LARGE;
  for (uint32_t i = 0; i < count; i++) {
    m->req.packs[i] = pack_of(m, &ids[i], NULL);
    if (m->req.packs[i] == SIM_NONE) return CS_E_FULL;
    /* The model's checker allows rejected rows only for poison; here the caller decides what is poison. */
    m->w->packs[m->req.packs[i]].poison_large = true;
  }
  m->req.count = count;
  m->w->fence_margin_ns = margin_ns;
  return cat_finish(m, res);
}

static int mc_committed(void *self, const cs_uuid *ids, uint32_t count, bool *held, bool *rejected,
                        cs_catalog_result *res) {
  model_catalog *m = self;
  if (res == NULL || (count > 0 && (ids == NULL || held == NULL || rejected == NULL))) return CS_E_INVALID_ARGUMENT;
  cat_res(res, CS_OUT_OK, NULL);
  for (uint32_t done = 0; done < count;) {
    uint32_t n = count - done < SIM_BATCH_MAX ? count - done : SIM_BATCH_MAX;
    req_begin(m, CS_OP_CAT_COMMITTED, NULL);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t found = SIM_NONE;
      for (uint32_t p = 0; p < m->w->pack_count && found == SIM_NONE; p++)
        if (cs_uuid_equal(&m->w->packs[p].ref.pack_id, &ids[done + i])) found = p;
      m->req.packs[i] = found;
    }
    m->req.count = n;
    cat_finish(m, res);
    if (res->outcome != CS_OUT_OK) return CS_E_OK;
    memcpy(held + done, m->req.held, n * sizeof *held);
    memcpy(rejected + done, m->req.rejected, n * sizeof *rejected);
    done += n;
  }
  return CS_E_OK;
}

static int text_cmp(const cs_pack_text *a, const cs_pack_text *b) {
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->bytes, b->bytes, n);
  return c != 0 ? c : (a->len > b->len) - (a->len < b->len);
}

static int mc_read_descriptors(void *self, uint64_t watermark, const cs_uuid *pack_id, cs_descriptor_row *rows,
                               uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  model_catalog *m = self;
  if (pack_id == NULL || count == NULL || res == NULL || (rows == NULL && capacity > 0)) return CS_E_INVALID_ARGUMENT;
  *count = 0;
  for (size_t i = 0; i < m->row_count; i++) {
    const model_row *row = &m->rows[i];
    if (!cs_uuid_equal(&row->pack_id, pack_id) || row->version > watermark) continue;
    if (!is_named(m, &row->pack_id, row->version)) continue; /* an orphan: no inventory row names it */
    uint32_t slot = 0;
    while (slot < *count && text_cmp(&rows[slot].record.meta.capture_id, &row->record.meta.capture_id) != 0) slot++;
    if (slot < *count && rows[slot].version >= row->version) continue; /* argMax(version) */
    if (slot == *count && *count == capacity) return CS_E_NO_MEMORY;
    if (slot == *count) (*count)++;
    rows[slot].pack_id = row->pack_id;
    snprintf(rows[slot].key, sizeof rows[slot].key, "%s", row->key);
    rows[slot].record = row->record;
    rows[slot].version = row->version;
  }
  cat_res(res, CS_OUT_OK, NULL);
  return CS_E_OK;
}

/* The inventory as the real catalogs list it: per pack the highest version <= watermark, by pack id. */
static int mc_list_packs(void *self, uint64_t watermark, const cs_uuid *after, cs_inventory_row *rows,
                         uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  model_catalog *m = self;
  if (count == NULL || res == NULL || (rows == NULL && capacity > 0)) return CS_E_INVALID_ARGUMENT;
  *count = 0;
  const cs_uuid *floor = after;
  for (;;) {
    /* The next pack id above floor, and its highest version <= watermark. */
    const model_named *best = NULL;
    for (size_t i = 0; i < m->named_count; i++) {
      const model_named *n = &m->named[i];
      if (n->version > watermark || (floor != NULL && cs_uuid_compare(&n->pack_id, floor) <= 0)) continue;
      int c = best == NULL ? -1 : cs_uuid_compare(&n->pack_id, &best->pack_id);
      if (c < 0 || (c == 0 && n->version > best->version)) best = n;
    }
    if (best == NULL || *count == capacity) break;
    rows[*count].ref = best->ref;
    rows[*count].ref.index_bytes = 0;
    rows[*count].version = best->version;
    floor = &rows[*count].ref.pack_id;
    (*count)++;
  }
  cat_res(res, CS_OUT_OK, NULL);
  return CS_E_OK;
}

/*
 * catalog.h's filter rule, as cs_search_filter_check words it (the model
 * does not link the adapters): lists within CS_SEARCH_LIST_MAX with their
 * values present, ranges with min <= max ([min, max) non-empty for the
 * tokens), numbers within 2^63 - 1, a known dtype.
 */
static bool search_filter_ok(const cs_search_filter *f) {
  if (f == NULL || f->hook_name_count > CS_SEARCH_LIST_MAX || f->capture_id_count > CS_SEARCH_LIST_MAX) return false;
  if ((f->hook_name_count > 0 && f->hook_names == NULL) || (f->capture_id_count > 0 && f->capture_ids == NULL))
    return false;
  for (uint32_t i = 0; i < f->hook_name_count; i++)
    if (f->hook_names[i].bytes == NULL) return false;
  for (uint32_t i = 0; i < f->capture_id_count; i++)
    if (f->capture_ids[i].bytes == NULL) return false;
  if ((f->has_layer && f->layer_min > f->layer_max) || (f->has_step && f->step_min > f->step_max) ||
      (f->has_tokens && f->token_min >= f->token_max) ||
      (f->has_captured_at && f->captured_min_ns > f->captured_max_ns))
    return false;
  if (f->has_dtype && (unsigned)f->dtype >= (unsigned)CS_DTYPE_COUNT_) return false; /* cs_dtype_name lives outside the cores the mutants link */
  return !((f->has_step && f->step_max > (uint64_t)INT64_MAX) ||
           (f->has_tokens && f->token_max > (uint64_t)INT64_MAX) ||
           (f->has_captured_at && f->captured_max_ns > (uint64_t)INT64_MAX));
}

static bool text_in(const cs_pack_text *value, const cs_pack_text *list, uint32_t count) {
  for (uint32_t i = 0; i < count; i++)
    if (text_cmp(value, &list[i]) == 0) return true;
  return false;
}

/* Whether the filter selects the record: every set field matches, a list by any of its values. */
static bool search_selects(const cs_search_filter *f, const cs_pack_meta *r) {
  const cs_pack_text *want[8] = {&f->tenant_id,  &f->experiment_id, &f->run_id,   &f->session_id,
                                 &f->request_id, &f->sequence_id,   &f->model_id, &f->model_revision};
  const cs_pack_text *have[8] = {&r->tenant_id,  &r->experiment_id, &r->run_id,   &r->session_id,
                                 &r->request_id, &r->sequence_id,   &r->model_id, &r->model_revision};
  for (int i = 0; i < 8; i++)
    if (want[i]->bytes != NULL && (have[i]->bytes == NULL || text_cmp(want[i], have[i]) != 0)) return false;
  if (f->hook_name_count > 0 && !text_in(&r->hook_name, f->hook_names, f->hook_name_count)) return false;
  if (f->capture_id_count > 0 && !text_in(&r->capture_id, f->capture_ids, f->capture_id_count)) return false;
  if (f->has_layer && (r->layer_number < f->layer_min || r->layer_number > f->layer_max)) return false;
  if (f->has_step && (r->step_number < f->step_min || r->step_number > f->step_max)) return false;
  if (f->has_tokens && !(r->token_start < f->token_max && r->token_end > f->token_min)) return false;
  if (f->has_captured_at && (r->captured_at_ns < f->captured_min_ns || r->captured_at_ns > f->captured_max_ns))
    return false;
  return !f->has_dtype || r->dtype == f->dtype;
}

/* A row's place in a search's order: (pack id bytes, offset, capture id bytes). */
static int search_order_cmp(const model_row *a, const cs_uuid *pack_id, uint64_t offset, const cs_pack_text *id) {
  int c = cs_uuid_compare(&a->pack_id, pack_id);
  if (c != 0) return c;
  if (a->record.offset != offset) return a->record.offset < offset ? -1 : 1;
  return text_cmp(&a->record.meta.capture_id, id);
}

static bool search_after(const model_row *row, const cs_search_key *after) {
  if (after == NULL) return true;
  cs_pack_text id = {after->capture_id, after->capture_id_len};
  return search_order_cmp(row, &after->pack_id, after->offset, &id) > 0;
}

static const model_named *named_at(const model_catalog *m, const cs_uuid *pack_id, uint64_t version) {
  for (size_t i = 0; i < m->named_count; i++)
    if (m->named[i].version == version && cs_uuid_equal(&m->named[i].pack_id, pack_id)) return &m->named[i];
  return NULL;
}

static bool pack_rejected(const model_catalog *m, const cs_uuid *pack_id) {
  for (uint32_t i = 0; i < m->w->pack_count; i++)
    if (cs_uuid_equal(&m->w->packs[i].ref.pack_id, pack_id)) return m->w->packs[i].rejected;
  return false;
}

/* A row readers see at watermark: an inventory row names it there and its pack has no rejected row. */
static bool row_visible(const model_catalog *m, const model_row *row, uint64_t watermark) {
  return row->version <= watermark && is_named(m, &row->pack_id, row->version) && !pack_rejected(m, &row->pack_id);
}

/* Row pointers into m->rows: their difference is the landing order, which breaks every tie. */
static int landing_cmp(const model_row *x, const model_row *y) { return (x > y) - (x < y); }

/* Per capture, its highest version first. */
static int by_capture_version(const void *pa, const void *pb) {
  const model_row *x = *(const model_row *const *)pa, *y = *(const model_row *const *)pb;
  int c = cs_uuid_compare(&x->pack_id, &y->pack_id);
  if (c == 0) c = text_cmp(&x->record.meta.capture_id, &y->record.meta.capture_id);
  if (c == 0 && x->version != y->version) c = x->version > y->version ? -1 : 1;
  return c != 0 ? c : landing_cmp(x, y);
}

static int by_search_order(const void *pa, const void *pb) {
  const model_row *x = *(const model_row *const *)pa, *y = *(const model_row *const *)pb;
  int c = search_order_cmp(x, &y->pack_id, y->record.offset, &y->record.meta.capture_id);
  return c != 0 ? c : landing_cmp(x, y);
}

/*
 * SEARCH over the rows that landed, as catalog.h says: a row is visible when
 * an inventory row names its (pack id, version) at or below the watermark
 * and its pack has no rejected row; each (pack id, capture id) resolves to
 * its highest visible version, and is answered when a row of it there
 * matches the filter and follows the key (the first such row, by landing
 * order, where copies landed twice).
 */
static int mc_search(void *self, uint64_t watermark, const cs_search_filter *filter, const cs_search_key *after,
                     cs_search_row *rows, uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  model_catalog *m = self;
  if (count == NULL || res == NULL || (rows == NULL && capacity > 0) || !search_filter_ok(filter) ||
      (after != NULL && after->capture_id_len > CS_SEARCH_KEY_ID_MAX))
    return CS_E_INVALID_ARGUMENT;
  *count = 0;
  const model_row **order = malloc((m->row_count == 0 ? 1 : m->row_count) * sizeof *order);
  if (order == NULL) return CS_E_NO_MEMORY;
  size_t visible = 0, chosen = 0;
  for (size_t i = 0; i < m->row_count; i++) {
    const model_row *row = &m->rows[i];
    if (row_visible(m, row, watermark)) order[visible++] = row;
  }
  qsort(order, visible, sizeof *order, by_capture_version);
  for (size_t g = 0; g < visible;) { /* one capture: its rows at its highest version come first */
    const model_row *top = order[g], *pick = NULL;
    size_t next = g;
    for (; next < visible; next++) {
      const model_row *row = order[next];
      if (!cs_uuid_equal(&row->pack_id, &top->pack_id) ||
          text_cmp(&row->record.meta.capture_id, &top->record.meta.capture_id) != 0)
        break;
      if (pick == NULL && row->version == top->version && search_selects(filter, &row->record.meta) &&
          search_after(row, after))
        pick = row;
    }
    if (pick != NULL) order[chosen++] = pick; /* chosen <= g: a slot already read */
    g = next;
  }
  qsort(order, chosen, sizeof *order, by_search_order);
  for (size_t i = 0; i < chosen && *count < capacity; i++) {
    const model_row *row = order[i];
    const model_named *named = named_at(m, &row->pack_id, row->version);
    if (named == NULL) continue; /* never: the row is visible */
    cs_search_row *out = &rows[(*count)++];
    memset(out, 0, sizeof *out);
    out->d.pack_id = row->pack_id;
    snprintf(out->d.key, sizeof out->d.key, "%s", row->key);
    out->d.record = row->record;
    out->d.version = row->version;
    out->pack_size_bytes = named->ref.size_bytes;
    memcpy(out->pack_sha256, named->ref.sha256, 32);
    uint64_t end = 0; /* the pack's last record at that version: every row of it that landed */
    for (size_t j = 0; j < m->row_count; j++) {
      const model_row *other = &m->rows[j];
      if (other->version == row->version && cs_uuid_equal(&other->pack_id, &row->pack_id) &&
          other->record.offset + other->record.stored_length > end)
        end = other->record.offset + other->record.stored_length;
    }
    out->footer_offset = end <= 64 ? 64 : (end + 63) / 64 * 64;
  }
  free(order);
  cat_res(res, CS_OUT_OK, NULL);
  return CS_E_OK;
}

static bool text_is(const cs_pack_text *t, const char *s) {
  cs_pack_text want = cs_pack_text_of(s);
  return text_cmp(t, &want) == 0;
}

/* Per capture, its lowest version first. */
static int by_capture_first(const void *pa, const void *pb) {
  const model_row *x = *(const model_row *const *)pa, *y = *(const model_row *const *)pb;
  int c = cs_uuid_compare(&x->pack_id, &y->pack_id);
  if (c == 0) c = text_cmp(&x->record.meta.capture_id, &y->record.meta.capture_id);
  if (c == 0 && x->version != y->version) c = x->version < y->version ? -1 : 1;
  return c != 0 ? c : landing_cmp(x, y);
}

/* ARRAY_CANDIDATES' order: the geometry first, then slot, first version, pack id, capture id. */
static int by_candidate_order(const void *pa, const void *pb) {
  const model_row *x = *(const model_row *const *)pa, *y = *(const model_row *const *)pb;
  bool gx = text_is(&x->record.meta.hook_name, CS_ARRAY_HOOK_GEOMETRY);
  bool gy = text_is(&y->record.meta.hook_name, CS_ARRAY_HOOK_GEOMETRY);
  if (gx != gy) return gx ? -1 : 1;
  if (x->record.meta.step_number != y->record.meta.step_number)
    return x->record.meta.step_number < y->record.meta.step_number ? -1 : 1;
  if (x->version != y->version) return x->version < y->version ? -1 : 1;
  int c = cs_uuid_compare(&x->pack_id, &y->pack_id);
  if (c == 0) c = text_cmp(&x->record.meta.capture_id, &y->record.meta.capture_id);
  return c;
}

/* ARRAY_CANDIDATES as catalog.h says: visible rows of the array, each (pack, capture) at its lowest version. */
static int mc_array_candidates(void *self, uint64_t watermark, const cs_pack_text *array_id,
                               const cs_array_window *window, cs_array_candidate_fn emit, void *ctx,
                               cs_catalog_result *res) {
  model_catalog *m = self;
  if (array_id == NULL || array_id->bytes == NULL || array_id->len == 0 || emit == NULL || res == NULL)
    return CS_E_INVALID_ARGUMENT;
  const model_row **order = malloc((m->row_count == 0 ? 1 : m->row_count) * sizeof *order);
  if (order == NULL) return CS_E_NO_MEMORY;
  size_t visible = 0, chosen = 0;
  for (size_t i = 0; i < m->row_count; i++) {
    const model_row *row = &m->rows[i];
    const cs_pack_meta *meta = &row->record.meta;
    bool geometry = text_is(&meta->hook_name, CS_ARRAY_HOOK_GEOMETRY);
    bool chunk = text_is(&meta->hook_name, CS_ARRAY_HOOK_CHUNK);
    if (window != NULL) {
      geometry = geometry && window->with_geometry;
      chunk = chunk && meta->step_number >= window->slot_from && meta->step_number < window->slot_to;
    }
    if (text_cmp(&meta->run_id, array_id) != 0 || !(geometry || chunk)) continue;
    if (row_visible(m, row, watermark)) order[visible++] = row;
  }
  qsort(order, visible, sizeof *order, by_capture_first);
  for (size_t i = 0; i < visible; i++)
    if (i == 0 || !cs_uuid_equal(&order[i - 1]->pack_id, &order[i]->pack_id) ||
        text_cmp(&order[i - 1]->record.meta.capture_id, &order[i]->record.meta.capture_id) != 0)
      order[chosen++] = order[i];
  qsort(order, chosen, sizeof *order, by_candidate_order);
  int stop = 0;
  for (size_t i = 0; i < chosen && stop == 0; i++) {
    const model_row *row = order[i];
    cs_array_candidate a;
    memset(&a, 0, sizeof a);
    a.geometry = text_is(&row->record.meta.hook_name, CS_ARRAY_HOOK_GEOMETRY);
    a.slot = row->record.meta.step_number;
    a.nonce = row->record.meta.request_id;
    a.geometry_hash = row->record.meta.sequence_id;
    a.capture_id = row->record.meta.capture_id;
    a.pack_id = row->pack_id;
    snprintf(a.key, sizeof a.key, "%s", row->key);
    a.offset = row->record.offset;
    a.stored_length = row->record.stored_length;
    a.crc32 = row->record.crc32;
    a.first_version = row->version;
    stop = emit(ctx, &a);
  }
  free(order);
  cat_res(res, CS_OUT_OK, NULL);
  return stop;
}

static void mc_close(void *self) {
  model_catalog *m = self;
  for (size_t i = 0; i < m->row_count; i++) free(m->rows[i].text);
  free(m->rows);
  free(m->named);
  free(m->w);
  free(m);
}

static const cs_catalog_ops model_catalog_ops = {.name = "model",
                                                 .schema_ensure = mc_schema_ensure,
                                                 .head = mc_head,
                                                 .claim = mc_claim,
                                                 .read_claims = mc_read_claims,
                                                 .release = mc_release,
                                                 .index = mc_index,
                                                 .publish = mc_publish,
                                                 .reject = mc_reject,
                                                 .committed = mc_committed,
                                                 .read_descriptors = mc_read_descriptors,
                                                 .list_packs = mc_list_packs,
                                                 .search = mc_search,
                                                 .array_candidates = mc_array_candidates,
                                                 .close = mc_close};

int sim_model_catalog_open(cs_catalog *out) {
  if (out == NULL) return CS_E_INVALID_ARGUMENT;
  model_catalog *m = calloc(1, sizeof *m);
  if (m == NULL) return CS_E_NO_MEMORY;
  m->w = world_new(&m->result);
  if (m->w == NULL) {
    free(m);
    return CS_E_NO_MEMORY;
  }
  m->start_ns = mono_ns() - CS_SEC_NS; /* the world's clock starts at one second, never at zero */
  out->ops = &model_catalog_ops;
  out->self = m;
  return CS_E_OK;
}

void sim_model_catalog_advance(cs_catalog *catalog, uint64_t ns) {
  if (catalog == NULL || catalog->ops != &model_catalog_ops) return;
  model_catalog *m = catalog->self;
  m->advance_ns += ns;
}

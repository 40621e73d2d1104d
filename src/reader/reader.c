/*
 * The reader (capstore.h, docs/reader.md): search the catalog at a pinned
 * watermark with a keyset cursor, then read payloads back through the
 * read-planning core (src/core/read_plan.c) and the store's asynchronous
 * form, verifying each pack's trailer and footer, binding every catalog
 * field to the footer and checking every payload's CRC-32.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "reader_internal.h"
#include "../runtime/runtime_internal.h" /* rt_refuse */

int capstore_reader_open(const capstore_config *cfg, capstore_reader **out, char *msg, size_t msg_size) {
  if (cfg == NULL || out == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cfg and out must be given");
  *out = NULL;
  capstore_reader *r = calloc(1, sizeof *r);
  if (r == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "reader: out of memory");
  pthread_mutex_init(&r->lock, NULL);
  /*
   * The reader's GETs in flight are the read's own bound (capstore_read_options.inflight_max), not the
   * service's (service.store_inflight_max, sized for uploads): its store allows RD_INFLIGHT_MAX unless
   * the configuration sets store.s3.max_connections, which then caps every read.
   */
  capstore_config store_cfg = *cfg;
  if (store_cfg.s3_max_connections == 0) store_cfg.s3_max_connections = RD_INFLIGHT_MAX;
  r->spare = rd_spare_new();
  if (r->spare == NULL) {
    pthread_mutex_destroy(&r->lock);
    free(r);
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "reader: out of memory");
  }
  int rc = capstore_open_store(&store_cfg, &r->store, msg, msg_size);
  r->store_open = rc == CS_E_OK;
  if (rc == CS_E_OK) rc = capstore_open_catalog(cfg, &r->catalog, msg, msg_size);
  r->catalog_open = r->store_open && rc == CS_E_OK;
  if (rc == CS_E_OK && r->catalog.ops->search == NULL)
    rc = rt_refuse(CS_E_UNSUPPORTED, msg, msg_size, "the %s catalog cannot search", r->catalog.ops->name);
  if (rc != CS_E_OK) {
    capstore_reader_free(r);
    return rc;
  }
  *out = r;
  return CS_E_OK;
}

void capstore_reader_free(capstore_reader *r) {
  if (r == NULL) return;
  if (r->catalog_open) r->catalog.ops->close(r->catalog.self);
  if (r->store_open) cs_store_close(&r->store); /* abandons stranded requests: then their memory can go */
  rd_read_release(r);
  pthread_mutex_destroy(&r->lock);
  free(r);
}

/* ---- Selections: rows whose text the selection owns ---- */

typedef struct sel_storage {
  char **blocks; /* one block of text per row */
  uint32_t capacity;
} sel_storage;

void capstore_selection_free(capstore_selection *sel) {
  if (sel == NULL) return;
  sel_storage *st = sel->storage_;
  if (st != NULL) {
    for (uint32_t i = 0; i < sel->count; i++) free(st->blocks[i]);
    free(st->blocks);
    free(st);
  }
  free(sel->rows);
  memset(sel, 0, sizeof *sel);
}

/* The twelve text fields of a record, in one order. */
void rd_meta_texts(cs_pack_meta *m, cs_pack_text *out[12]) {
  cs_pack_text *t[12] = {&m->capture_id,  &m->tenant_id,      &m->experiment_id,  &m->run_id,
                         &m->session_id,  &m->request_id,     &m->sequence_id,    &m->model_id,
                         &m->model_revision, &m->adapter_revision, &m->capture_policy_version, &m->hook_name};
  memcpy(out, t, sizeof t);
}

/* Appends row to sel, copying its text into a block the selection owns. CS_E_OK or CS_E_NO_MEMORY. */
static int sel_append(capstore_selection *sel, const cs_search_row *row) {
  sel_storage *st = sel->storage_;
  if (st == NULL) {
    st = calloc(1, sizeof *st);
    if (st == NULL) return CS_E_NO_MEMORY;
    sel->storage_ = st;
  }
  if (sel->count == st->capacity) {
    uint32_t grown = st->capacity == 0 ? 64 : 2 * st->capacity;
    char **blocks = realloc(st->blocks, grown * sizeof *blocks);
    if (blocks == NULL) return CS_E_NO_MEMORY;
    st->blocks = blocks;
    cs_search_row *rows = realloc(sel->rows, grown * sizeof *rows);
    if (rows == NULL) return CS_E_NO_MEMORY;
    sel->rows = rows;
    st->capacity = grown;
  }
  cs_search_row *copy = &sel->rows[sel->count];
  *copy = *row;
  cs_pack_text *texts[12];
  rd_meta_texts(&copy->d.record.meta, texts);
  size_t total = 1;
  for (int i = 0; i < 12; i++) total += texts[i]->bytes != NULL ? texts[i]->len + 1 : 0;
  char *block = malloc(total);
  if (block == NULL) return CS_E_NO_MEMORY;
  char *at = block;
  for (int i = 0; i < 12; i++) {
    if (texts[i]->bytes == NULL) continue;
    memcpy(at, texts[i]->bytes, texts[i]->len);
    at[texts[i]->len] = '\0';
    texts[i]->bytes = at;
    at += texts[i]->len + 1;
  }
  st->blocks[sel->count++] = block;
  return CS_E_OK;
}

int capstore_selection_take(capstore_selection *into, capstore_selection *from) {
  if (into == NULL || from == NULL) return CS_E_INVALID_ARGUMENT;
  if (into->count > 0 && from->count > 0 && into->watermark != from->watermark) return CS_E_STATE;
  sel_storage *src = from->storage_;
  if (into->count == 0 && into->storage_ == NULL) { /* the whole of from, as it is */
    uint64_t watermark = from->count > 0 || into->watermark == 0 ? from->watermark : into->watermark;
    *into = *from;
    into->watermark = watermark;
    memset(from, 0, sizeof *from);
    return CS_E_OK;
  }
  sel_storage *dst = into->storage_;
  if (dst == NULL) {
    dst = calloc(1, sizeof *dst);
    if (dst == NULL) return CS_E_NO_MEMORY;
    into->storage_ = dst;
  }
  uint32_t need = into->count + from->count;
  if (need > dst->capacity) {
    char **blocks = realloc(dst->blocks, need * sizeof *blocks);
    if (blocks == NULL) return CS_E_NO_MEMORY;
    dst->blocks = blocks;
    cs_search_row *rows = realloc(into->rows, need * sizeof *rows);
    if (rows == NULL) return CS_E_NO_MEMORY;
    into->rows = rows;
    dst->capacity = need;
  }
  if (from->count > 0) {
    memcpy(into->rows + into->count, from->rows, from->count * sizeof *from->rows);
    memcpy(dst->blocks + into->count, src->blocks, from->count * sizeof *src->blocks);
    into->count = need;
    into->watermark = from->watermark;
    src->capacity = 0;
    free(src->blocks);
    free(src);
    free(from->rows);
  }
  snprintf(into->cursor, sizeof into->cursor, "%s", from->cursor);
  if (from->count == 0) capstore_selection_free(from);
  memset(from, 0, sizeof *from);
  return CS_E_OK;
}

/*
 * Before the reader's first query: the catalog's tables suit its settings
 * (catalog.h's schema_check: a replicated catalog read without sequential
 * consistency could show a watermark without its rows). CS_E_OK, else
 * CS_E_CONFIG (the tables are of the other kind) or CS_E_IO with msg.
 */
static int kind_checked(capstore_reader *r, char *msg, size_t msg_size) {
  if (r->kind_checked) return CS_E_OK;
  int rc = capstore_catalog_check(&r->catalog, msg, msg_size);
  r->kind_checked = rc == CS_E_OK;
  return rc;
}

/* The catalog's watermark now. CS_E_OK, or CS_E_IO with msg. */
static int head_watermark(capstore_reader *r, uint64_t *watermark, char *msg, size_t msg_size) {
  cs_cat_head head;
  cs_catalog_result res;
  const cs_uuid reader_id = {{0}};
  int checked = kind_checked(r, msg, msg_size);
  if (checked != CS_E_OK) return checked;
  int rc = r->catalog.ops->head(r->catalog.self, &reader_id, &head, &res);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
    return rt_refuse(rc != CS_E_OK ? rc : CS_E_IO, msg, msg_size, "catalog head: %s (%s)",
                         rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome), res.detail);
  }
  *watermark = head.watermark;
  return CS_E_OK;
}

/* One catalog page into sel; *count gets how many rows came. */
static int search_into(capstore_reader *r, uint64_t watermark, const cs_search_filter *filter,
                       const cs_search_key *after, uint32_t page_size, capstore_selection *sel, uint32_t *count,
                       char *msg, size_t msg_size) {
  cs_search_row *rows = calloc(page_size, sizeof *rows);
  if (rows == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "search: out of memory for %u rows", page_size);
  cs_catalog_result res;
  *count = 0;
  int rc = kind_checked(r, msg, msg_size);
  if (rc != CS_E_OK) {
    free(rows);
    return rc;
  }
  rc = r->catalog.ops->search(r->catalog.self, watermark, filter, after, rows, page_size, count, &res);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
    free(rows);
    *count = 0;
    return rt_refuse(rc != CS_E_OK ? rc : CS_E_IO, msg, msg_size, "catalog search: %s (%s)",
                         rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome), res.detail);
  }
  for (uint32_t i = 0; i < *count && rc == CS_E_OK; i++) rc = sel_append(sel, &rows[i]);
  free(rows);
  if (rc != CS_E_OK) return rt_refuse(rc, msg, msg_size, "search: out of memory for the rows' text");
  return CS_E_OK;
}

/* The cursor's watermark and position, checked against the filter and the head. */
static int cursor_resume(capstore_reader *r, const char *cursor, const uint8_t hash[8], rd_cursor *c, char *msg,
                         size_t msg_size) {
  int rc = rd_cursor_parse(cursor, strlen(cursor), c, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (memcmp(c->filter_hash, hash, 8) != 0)
    return rt_refuse(CS_E_CONFLICT, msg, msg_size, "cursor: made for another filter (search again from the start)");
  uint64_t head = 0;
  rc = head_watermark(r, &head, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (c->watermark > head) {
    return rt_refuse(CS_E_STATE, msg, msg_size,
                         "cursor: pinned at watermark %llu, ahead of the catalog's head %llu (another catalog's cursor?)",
                         (unsigned long long)c->watermark, (unsigned long long)head);
  }
  return CS_E_OK;
}

static int search_locked(capstore_reader *r, const cs_search_filter *filter, const char *cursor, uint32_t page_size,
                         capstore_selection *out, char *msg, size_t msg_size);

int capstore_search(capstore_reader *r, const cs_search_filter *filter, const char *cursor, uint32_t page_size,
                    capstore_selection *out, char *msg, size_t msg_size) {
  if (r == NULL || out == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader and out must be given");
  pthread_mutex_lock(&r->lock);
  int rc = search_locked(r, filter, cursor, page_size, out, msg, msg_size);
  pthread_mutex_unlock(&r->lock);
  return rc;
}

static int search_locked(capstore_reader *r, const cs_search_filter *filter, const char *cursor, uint32_t page_size,
                         capstore_selection *out, char *msg, size_t msg_size) {
  if (r == NULL || out == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader and out must be given");
  capstore_selection_free(out);
  int rc = cs_search_filter_check(filter, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (page_size == 0 || page_size > CAPSTORE_PAGE_MAX)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "page size %u: must be 1..%u", page_size,
                         CAPSTORE_PAGE_MAX);
  rd_cursor c;
  memset(&c, 0, sizeof c);
  rc = rd_filter_hash(filter, c.filter_hash);
  if (rc != CS_E_OK) return rt_refuse(rc, msg, msg_size, "search: SHA-256 of the filter failed");
  bool resume = cursor != NULL && cursor[0] != '\0';
  uint8_t hash[8];
  memcpy(hash, c.filter_hash, 8);
  rc = resume ? cursor_resume(r, cursor, hash, &c, msg, msg_size) : head_watermark(r, &c.watermark, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  out->watermark = c.watermark;
  uint32_t count = 0;
  rc = search_into(r, c.watermark, filter, resume ? &c.after : NULL, page_size, out, &count, msg, msg_size);
  if (rc != CS_E_OK) {
    capstore_selection_free(out);
    return rc;
  }
  if (count == page_size) { /* maybe more: the next page starts after the last row (c's hash is the filter's) */
    if (cs_search_key_of(&out->rows[count - 1], &c.after) != CS_E_OK) {
      capstore_selection_free(out);
      return rt_refuse(CS_E_TOO_LARGE, msg, msg_size,
                           "search: a page ends on a record whose capture id is over %u bytes: no cursor can hold it",
                           CS_SEARCH_KEY_ID_MAX);
    }
    rc = rd_cursor_format(&c, out->cursor, sizeof out->cursor);
    assert(rc == CS_E_OK);
  }
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

static int select_locked(capstore_reader *r, uint64_t watermark, const cs_pack_text *ids, uint32_t count,
                         capstore_selection *out, char *msg, size_t msg_size);

int capstore_select(capstore_reader *r, uint64_t watermark, const cs_pack_text *ids, uint32_t count,
                    capstore_selection *out, char *msg, size_t msg_size) {
  if (r == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader, ids and out must be given");
  pthread_mutex_lock(&r->lock);
  int rc = select_locked(r, watermark, ids, count, out, msg, msg_size);
  pthread_mutex_unlock(&r->lock);
  return rc;
}

static int select_locked(capstore_reader *r, uint64_t watermark, const cs_pack_text *ids, uint32_t count,
                         capstore_selection *out, char *msg, size_t msg_size) {
  if (r == NULL || out == NULL || (ids == NULL && count > 0))
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader, ids and out must be given");
  capstore_selection_free(out);
  cs_search_filter filter;
  memset(&filter, 0, sizeof filter);
  filter.capture_ids = ids;
  filter.capture_id_count = count;
  int rc = cs_search_filter_check(&filter, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  uint64_t head = 0;
  rc = head_watermark(r, &head, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (watermark > head)
    return rt_refuse(CS_E_STATE, msg, msg_size, "watermark %llu is ahead of the catalog's head %llu",
                         (unsigned long long)watermark, (unsigned long long)head);
  out->watermark = watermark == 0 ? head : watermark;
  if (count == 0) return CS_E_OK;
  /* An id may be in several packs: page until a short page. */
  cs_search_key after;
  for (bool first = true;; first = false) {
    uint32_t got = 0;
    rc = search_into(r, out->watermark, &filter, first ? NULL : &after, 1000, out, &got, msg, msg_size);
    if (rc != CS_E_OK || got < 1000) break;
    if (cs_search_key_of(&out->rows[out->count - 1], &after) != CS_E_OK) {
      rc = rt_refuse(CS_E_TOO_LARGE, msg, msg_size, "select: a capture id over %u bytes", CS_SEARCH_KEY_ID_MAX);
      break;
    }
  }
  if (rc != CS_E_OK) capstore_selection_free(out);
  return rc;
}

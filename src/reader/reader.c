/*
 * The reader (capstore.h, docs/reader.md): search the catalog at a pinned
 * watermark with a keyset cursor, then read payloads back through the
 * read-planning core (src/core/read_plan.c) and the store's asynchronous
 * form, verifying each pack's trailer and footer, binding every catalog
 * field to the footer and checking every payload's CRC-32.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "reader_internal.h"

struct capstore_reader {
  cs_store store;
  cs_catalog catalog;
  bool store_open, catalog_open;
  /*
   * The store's transfer engine failed with GETs in flight: the store still
   * holds those requests and their buffers, so they are kept here until the
   * store is closed, and the reader refuses further reads.
   */
  bool broken;
  cs_store_request *stranded_requests;
  uint8_t **stranded_buffers;
  uint32_t stranded_count;
};

#define READ_INFLIGHT_DEFAULT 8u

static int reader_refuse(int code, char *msg, size_t msg_size, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
static int reader_refuse(int code, char *msg, size_t msg_size, const char *format, ...) {
  if (msg != NULL && msg_size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(msg, msg_size, format, args);
    va_end(args);
  }
  return code;
}

int capstore_reader_open(const capstore_config *cfg, capstore_reader **out, char *msg, size_t msg_size) {
  if (cfg == NULL || out == NULL) return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cfg and out must be given");
  *out = NULL;
  capstore_reader *r = calloc(1, sizeof *r);
  if (r == NULL) return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "reader: out of memory");
  int rc = capstore_open_store(cfg, &r->store, msg, msg_size);
  r->store_open = rc == CS_E_OK;
  if (rc == CS_E_OK) rc = capstore_open_catalog(cfg, &r->catalog, msg, msg_size);
  r->catalog_open = r->store_open && rc == CS_E_OK;
  if (rc == CS_E_OK && r->catalog.ops->search == NULL)
    rc = reader_refuse(CS_E_UNSUPPORTED, msg, msg_size, "the %s catalog cannot search", r->catalog.ops->name);
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
  for (uint32_t i = 0; i < r->stranded_count; i++) free(r->stranded_buffers[i]);
  free(r->stranded_buffers);
  free(r->stranded_requests);
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
static void meta_texts(cs_pack_meta *m, cs_pack_text *out[12]) {
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
  meta_texts(&copy->d.record.meta, texts);
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

/* The catalog's watermark now. CS_E_OK, or CS_E_IO with msg. */
static int head_watermark(capstore_reader *r, uint64_t *watermark, char *msg, size_t msg_size) {
  cs_cat_head head;
  cs_catalog_result res;
  const cs_uuid reader_id = {{0}};
  int rc = r->catalog.ops->head(r->catalog.self, &reader_id, &head, &res);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
    return reader_refuse(rc != CS_E_OK ? rc : CS_E_IO, msg, msg_size, "catalog head: %s (%s)",
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
  if (rows == NULL) return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "search: out of memory for %u rows", page_size);
  cs_catalog_result res;
  *count = 0;
  int rc = r->catalog.ops->search(r->catalog.self, watermark, filter, after, rows, page_size, count, &res);
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
    free(rows);
    *count = 0;
    return reader_refuse(rc != CS_E_OK ? rc : CS_E_IO, msg, msg_size, "catalog search: %s (%s)",
                         rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome), res.detail);
  }
  for (uint32_t i = 0; i < *count && rc == CS_E_OK; i++) rc = sel_append(sel, &rows[i]);
  free(rows);
  if (rc != CS_E_OK) return reader_refuse(rc, msg, msg_size, "search: out of memory for the rows' text");
  return CS_E_OK;
}

/* The cursor's watermark and position, checked against the filter and the head. */
static int cursor_resume(capstore_reader *r, const char *cursor, const uint8_t hash[8], rd_cursor *c, char *msg,
                         size_t msg_size) {
  int rc = rd_cursor_parse(cursor, strlen(cursor), c, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (memcmp(c->filter_hash, hash, 8) != 0)
    return reader_refuse(CS_E_CONFLICT, msg, msg_size, "cursor: made for another filter (search again from the start)");
  uint64_t head = 0;
  rc = head_watermark(r, &head, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (c->watermark > head) {
    return reader_refuse(CS_E_STATE, msg, msg_size,
                         "cursor: pinned at watermark %llu, ahead of the catalog's head %llu (another catalog's cursor?)",
                         (unsigned long long)c->watermark, (unsigned long long)head);
  }
  return CS_E_OK;
}

int capstore_search(capstore_reader *r, const cs_search_filter *filter, const char *cursor, uint32_t page_size,
                    capstore_selection *out, char *msg, size_t msg_size) {
  if (r == NULL || out == NULL) return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader and out must be given");
  capstore_selection_free(out);
  int rc = cs_search_filter_check(filter, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (page_size == 0 || page_size > CAPSTORE_PAGE_MAX)
    return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "page size %u: must be 1..%u", page_size,
                         CAPSTORE_PAGE_MAX);
  rd_cursor c;
  memset(&c, 0, sizeof c);
  rc = rd_filter_hash(filter, c.filter_hash);
  if (rc != CS_E_OK) return reader_refuse(rc, msg, msg_size, "search: SHA-256 of the filter failed");
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
  if (count == page_size) { /* maybe more: the next page starts after the last row */
    memcpy(c.filter_hash, hash, 8);
    if (cs_search_key_of(&out->rows[count - 1], &c.after) != CS_E_OK) {
      capstore_selection_free(out);
      return reader_refuse(CS_E_TOO_LARGE, msg, msg_size,
                           "search: a page ends on a record whose capture id is over %u bytes: no cursor can hold it",
                           CS_SEARCH_KEY_ID_MAX);
    }
    rc = rd_cursor_format(&c, out->cursor, sizeof out->cursor);
    assert(rc == CS_E_OK);
  }
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

int capstore_select(capstore_reader *r, uint64_t watermark, const cs_pack_text *ids, uint32_t count,
                    capstore_selection *out, char *msg, size_t msg_size) {
  if (r == NULL || out == NULL || (ids == NULL && count > 0))
    return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader, ids and out must be given");
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
    return reader_refuse(CS_E_STATE, msg, msg_size, "watermark %llu is ahead of the catalog's head %llu",
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
      rc = reader_refuse(CS_E_TOO_LARGE, msg, msg_size, "select: a capture id over %u bytes", CS_SEARCH_KEY_ID_MAX);
      break;
    }
  }
  if (rc != CS_E_OK) capstore_selection_free(out);
  return rc;
}

/* ---- Reading ---- */

void capstore_read_options_default(capstore_read_options *opt) {
  assert(opt != NULL);
  cs_read_limits limits;
  cs_read_limits_default(&limits);
  *opt = (capstore_read_options){.byte_limit = INT64_MAX,
                                 .request_limit = INT64_MAX,
                                 .gap_bytes_max = limits.gap_bytes_max,
                                 .span_bytes_max = limits.span_bytes_max,
                                 .inflight_max = READ_INFLIGHT_DEFAULT};
}

/* One pack of the selection: what the catalog says of it, and its row indexes. */
typedef struct read_pack {
  cs_uuid pack_id;
  const char *key;
  uint64_t size_bytes, footer_offset;
  const uint8_t *sha256;
  uint32_t first_row; /* a row of it, for messages */
} read_pack;

/* The plan's inputs and outputs for one read. */
typedef struct read_job {
  const capstore_selection *sel;
  read_pack *packs;
  uint32_t pack_count;
  cs_read_pack *plan_packs;
  cs_read_want *wants;
  uint32_t *order;
  cs_read_span *spans;
  cs_read_plan plan;
  uint8_t **span_bytes;   /* one buffer per span */
  uint32_t *span_of_want; /* the span holding each want (row) */
  uint32_t *tail_of_pack; /* the span holding each pack's footer and trailer */
} read_job;

static void job_free(read_job *job) {
  if (job->span_bytes != NULL)
    for (uint32_t s = 0; s < job->plan.span_count; s++) free(job->span_bytes[s]);
  free(job->span_bytes);
  free(job->packs);
  free(job->plan_packs);
  free(job->wants);
  free(job->order);
  free(job->spans);
  free(job->span_of_want);
  free(job->tail_of_pack);
  memset(job, 0, sizeof *job);
}

static int by_pack_id(const void *a, const void *b) {
  const cs_search_row *x = *(const cs_search_row *const *)a, *y = *(const cs_search_row *const *)b;
  return memcmp(x->d.pack_id.bytes, y->d.pack_id.bytes, 16);
}

/* The packs of the selection (each once), with the rows' pack fields checked to agree. */
static int job_packs(read_job *job, char *msg, size_t msg_size) {
  const capstore_selection *sel = job->sel;
  const cs_search_row **sorted = malloc((sel->count + 1) * sizeof *sorted);
  job->packs = calloc(sel->count + 1, sizeof *job->packs);
  job->plan_packs = calloc(sel->count + 1, sizeof *job->plan_packs);
  job->wants = calloc(sel->count + 1, sizeof *job->wants);
  if (sorted == NULL || job->packs == NULL || job->plan_packs == NULL || job->wants == NULL) {
    free(sorted);
    return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory for %u rows", sel->count);
  }
  for (uint32_t i = 0; i < sel->count; i++) sorted[i] = &sel->rows[i];
  qsort(sorted, sel->count, sizeof *sorted, by_pack_id);
  for (uint32_t i = 0; i < sel->count; i++) {
    const cs_search_row *row = sorted[i];
    read_pack *p = job->pack_count > 0 ? &job->packs[job->pack_count - 1] : NULL;
    if (p == NULL || !cs_uuid_equal(&p->pack_id, &row->d.pack_id)) {
      p = &job->packs[job->pack_count++];
      *p = (read_pack){.pack_id = row->d.pack_id, .key = row->d.key, .size_bytes = row->pack_size_bytes,
                       .footer_offset = row->footer_offset, .sha256 = row->pack_sha256,
                       .first_row = (uint32_t)(row - sel->rows)};
    } else if (strcmp(p->key, row->d.key) != 0 || p->size_bytes != row->pack_size_bytes ||
               p->footer_offset != row->footer_offset || memcmp(p->sha256, row->pack_sha256, 32) != 0) {
      char id[CS_UUID_TEXT_LEN + 1];
      cs_uuid_format(&p->pack_id, id);
      free(sorted);
      return reader_refuse(CS_E_CONFLICT, msg, msg_size,
                           "the catalog's rows of pack %s disagree on its key, size, sha256 or layout", id);
    }
    job->wants[row - sel->rows] = (cs_read_want){.pack = job->pack_count - 1, .offset = row->d.record.offset,
                                                 .length = row->d.record.stored_length};
  }
  free(sorted);
  for (uint32_t k = 0; k < job->pack_count; k++)
    job->plan_packs[k] = (cs_read_pack){.size_bytes = job->packs[k].size_bytes,
                                        .footer_offset = job->packs[k].footer_offset};
  return CS_E_OK;
}

static void cost_of_plan(const cs_read_plan *plan, capstore_read_cost *cost) {
  cost->planned_requests = plan->requests;
  cost->planned_bytes = plan->bytes;
  cost->payload_bytes = plan->payload_bytes;
  cost->packs = plan->pack_count;
}

/* Checks the options, groups the selection by pack and plans; CS_E_TOO_LARGE leaves the plan in cost. */
static int job_plan(read_job *job, const capstore_read_options *opt, capstore_read_cost *cost, char *msg,
                    size_t msg_size) {
  if (opt->byte_limit < 0)
    return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "byte limit %lld: must be >= 0", (long long)opt->byte_limit);
  if (opt->request_limit <= 0)
    return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "request limit %lld: must be > 0",
                         (long long)opt->request_limit);
  int rc = job_packs(job, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  uint32_t n = job->sel->count, span_capacity = n + job->pack_count;
  job->order = calloc(n + 1, sizeof *job->order);
  job->spans = calloc(span_capacity + 1, sizeof *job->spans);
  if (job->order == NULL || job->spans == NULL) return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  cs_read_limits limits = {.gap_bytes_max = opt->gap_bytes_max, .span_bytes_max = opt->span_bytes_max,
                           .byte_limit = (uint64_t)opt->byte_limit, .request_limit = (uint64_t)opt->request_limit,
                           .whole_objects = opt->verify_sha256};
  char why[256];
  rc = cs_read_plan_make(job->plan_packs, job->pack_count, job->wants, n, &limits, job->order, job->spans,
                         span_capacity, &job->plan, why, sizeof why);
  if (rc == CS_E_OK || rc == CS_E_TOO_LARGE) cost_of_plan(&job->plan, cost);
  if (rc == CS_E_INVALID_ARGUMENT) return reader_refuse(rc, msg, msg_size, "the catalog's layout of a record: %s", why);
  if (rc != CS_E_OK) return reader_refuse(rc, msg, msg_size, "read refused: %s", why);
  /* Where each row's payload and each pack's footer will be. */
  job->span_of_want = calloc(n + 1, sizeof *job->span_of_want);
  job->tail_of_pack = calloc(job->pack_count + 1, sizeof *job->tail_of_pack);
  if (job->span_of_want == NULL || job->tail_of_pack == NULL)
    return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  for (uint32_t sp = 0; sp < job->plan.span_count; sp++) {
    const cs_read_span *span = &job->spans[sp];
    for (uint32_t i = span->first; i < span->first + span->count; i++) job->span_of_want[job->order[i]] = sp;
    if (span->tail) job->tail_of_pack[span->pack] = sp;
  }
  return CS_E_OK;
}

int capstore_read_estimate(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                           capstore_read_cost *cost, char *msg, size_t msg_size) {
  if (r == NULL || sel == NULL || opt == NULL || cost == NULL)
    return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader, selection, options and cost must be given");
  memset(cost, 0, sizeof *cost);
  read_job job = {.sel = sel};
  int rc = job_plan(&job, opt, cost, msg, msg_size);
  job_free(&job);
  return rc;
}

/* ---- Fetching: the plan's spans through the store's asynchronous form ---- */

typedef struct fetch {
  capstore_reader *r;
  read_job *job;
  cs_read_exec exec;
  cs_store_request *requests; /* one per span */
  capstore_read_cost *cost;
} fetch;

/* Starts span s's GET. CS_E_OK, or the store's refusal (with msg). */
static int fetch_start(fetch *f, uint32_t s, char *msg, size_t msg_size) {
  const cs_read_span *span = &f->job->spans[s];
  read_job *job = f->job;
  job->span_bytes[s] = malloc(span->length > 0 ? (size_t)span->length : 1);
  if (job->span_bytes[s] == NULL)
    return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory for a %llu-byte range",
                         (unsigned long long)span->length);
  cs_store_request *req = &f->requests[s];
  memset(req, 0, sizeof *req);
  *req = (cs_store_request){.op = CS_STORE_GET, .id = s, .key = job->packs[span->pack].key, .has_range = true,
                            .range = {.offset = span->offset, .length = span->length},
                            .buf = job->span_bytes[s], .cap = (size_t)span->length};
  int rc = cs_store_start(&f->r->store, req);
  if (rc != CS_E_OK) return reader_refuse(rc, msg, msg_size, "store GET of %s: %s", req->key, cs_strerror(rc));
  f->cost->requests++;
  return CS_E_OK;
}

/* A GET came back: the whole range, or an error naming the object. */
static int fetch_done(fetch *f, cs_store_request *req, char *msg, size_t msg_size) {
  const cs_read_span *span = &f->job->spans[req->id];
  f->cost->bytes += req->got;
  if (req->rc != CS_E_OK || req->res.outcome != CS_OUT_OK) {
    return reader_refuse(req->rc != CS_E_OK ? req->rc : CS_E_IO, msg, msg_size, "store GET of %s bytes %llu-%llu: %s (%s)",
                         req->key, (unsigned long long)span->offset, (unsigned long long)(span->offset + span->length),
                         req->rc != CS_E_OK ? cs_strerror(req->rc) : cs_outcome_name(req->res.outcome), req->res.detail);
  }
  if (req->got != span->length) {
    return reader_refuse(CS_E_CORRUPT, msg, msg_size, "store GET of %s: %zu of %llu bytes (a short read)", req->key,
                         req->got, (unsigned long long)span->length);
  }
  return CS_E_OK;
}

/* Every span read, at most inflight_max in flight, never more than planned. */
static int fetch_all(capstore_reader *r, read_job *job, uint32_t inflight_max, capstore_read_cost *cost, char *msg,
                     size_t msg_size) {
  fetch f = {.r = r, .job = job, .cost = cost};
  uint32_t spans = job->plan.span_count;
  job->span_bytes = calloc(spans + 1, sizeof *job->span_bytes);
  f.requests = calloc(spans + 1, sizeof *f.requests);
  if (job->span_bytes == NULL || f.requests == NULL) {
    free(f.requests);
    return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  }
  if (r->store.in_flight_max > 0 && inflight_max > r->store.in_flight_max) inflight_max = r->store.in_flight_max;
  int rc = cs_read_exec_init(&f.exec, &job->plan, inflight_max == 0 ? READ_INFLIGHT_DEFAULT : inflight_max);
  assert(rc == CS_E_OK);
  int err = CS_E_OK;
  char first_msg[512] = "";
  for (;;) {
    uint32_t s;
    while (err == CS_E_OK && cs_read_exec_next(&f.exec, &s) == CS_E_OK) {
      rc = fetch_start(&f, s, first_msg, sizeof first_msg);
      if (rc != CS_E_OK) {
        err = rc;
        cs_read_exec_done(&f.exec, s, rc); /* never sent: it comes back at once */
      }
    }
    if (cs_read_exec_finished(&f.exec, NULL)) break;
    cs_store_request *done = NULL;
    int got = cs_store_reap(&r->store, 1000, &done);
    if (got < 0) { /* the transfer engine failed: the requests stay in flight until the store closes */
      err = got;
      snprintf(first_msg, sizeof first_msg, "store: %s", cs_strerror(got));
      break;
    }
    if (got == 0) continue;
    rc = fetch_done(&f, done, err == CS_E_OK ? first_msg : NULL, sizeof first_msg);
    if (rc != CS_E_OK && err == CS_E_OK) err = rc;
    cs_read_exec_done(&f.exec, (uint32_t)done->id, rc);
  }
  assert(f.exec.issued <= job->plan.requests);
  if (f.exec.inflight > 0) {
    /* Requests the failed engine still holds: theirs until the store closes (capstore_reader_free). */
    r->broken = true;
    r->stranded_requests = f.requests;
    r->stranded_buffers = job->span_bytes;
    r->stranded_count = spans;
    job->span_bytes = NULL;
  } else {
    free(f.requests);
  }
  if (err != CS_E_OK) return reader_refuse(err, msg, msg_size, "%s", first_msg);
  return CS_E_OK;
}

/* ---- Verifying ---- */

/* The bytes [offset, offset + length) in span sp, or NULL when they are not all in it. */
static const uint8_t *bytes_at(const read_job *job, uint32_t sp, uint64_t offset, uint64_t length) {
  assert(sp < job->plan.span_count);
  const cs_read_span *span = &job->spans[sp];
  if (length == 0) return job->span_bytes[sp]; /* an empty record: no byte, listed with any read of its pack */
  if (offset < span->offset || length > span->length || offset - span->offset > span->length - length) return NULL;
  return job->span_bytes[sp] + (offset - span->offset);
}

/* Whether two texts are the same value (absent only equals absent). */
static bool text_equal(const cs_pack_text *a, const cs_pack_text *b) {
  if ((a->bytes == NULL) != (b->bytes == NULL)) return false;
  return a->len == b->len && (a->len == 0 || memcmp(a->bytes, b->bytes, a->len) == 0);
}

/* The first field in which the catalog's record differs from the footer's, or NULL. */
static const char *record_differs(const cs_pack_record *cat, const cs_pack_record *pack) {
  static const char *names[12] = {"capture_id", "tenant_id",      "experiment_id",    "run_id",
                                  "session_id", "request_id",     "sequence_id",      "model_id",
                                  "model_revision", "adapter_revision", "capture_policy_version", "hook_name"};
  cs_pack_record a = *cat, b = *pack;
  cs_pack_text *ta[12], *tb[12];
  meta_texts(&a.meta, ta);
  meta_texts(&b.meta, tb);
  for (int i = 0; i < 12; i++)
    if (!text_equal(ta[i], tb[i])) return names[i];
  const cs_pack_meta *x = &cat->meta, *y = &pack->meta;
  if (x->layer_number != y->layer_number) return "layer_number";
  if (x->producer_rank != y->producer_rank) return "producer_rank";
  if (x->step_number != y->step_number) return "step_number";
  if (x->token_start != y->token_start) return "token_start";
  if (x->token_end != y->token_end) return "token_end";
  if (x->batch_position != y->batch_position) return "batch_position";
  if (x->dtype != y->dtype) return "dtype";
  if (x->rank != y->rank || memcmp(x->shape, y->shape, x->rank * sizeof x->shape[0]) != 0) return "shape";
  if (x->captured_at_ns != y->captured_at_ns) return "captured_at_ns";
  if (cat->offset != pack->offset) return "offset";
  if (cat->stored_length != pack->stored_length) return "stored_length";
  if (cat->decoded_length != pack->decoded_length) return "decoded_length";
  if (cat->crc32 != pack->crc32) return "crc32";
  return NULL;
}

/* The footer's record with this capture id (records in offset order: a search by offset, then the ids there). */
static const cs_pack_record *footer_record(const cs_pack_footer *footer, const cs_pack_record *want) {
  uint32_t lo = 0, hi = footer->record_count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (footer->records[mid].offset < want->offset) lo = mid + 1;
    else hi = mid;
  }
  for (uint32_t i = lo; i < footer->record_count && footer->records[i].offset == want->offset; i++)
    if (text_equal(&footer->records[i].meta.capture_id, &want->meta.capture_id)) return &footer->records[i];
  /* Not at its offset: anywhere (the catalog's offset may be the wrong one). */
  for (uint32_t i = 0; i < footer->record_count; i++)
    if (text_equal(&footer->records[i].meta.capture_id, &want->meta.capture_id)) return &footer->records[i];
  return NULL;
}

/* Pack k's trailer and footer (and with whole objects its SHA-256), then each of its records. */
static int verify_pack(const read_job *job, uint32_t k, bool whole, cs_pack_footer *footer, char *msg, size_t msg_size) {
  const read_pack *p = &job->packs[k];
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&p->pack_id, id);
  uint32_t tail_span = job->tail_of_pack[k];
  const uint8_t *tail = bytes_at(job, tail_span, p->size_bytes - CS_PACK_TRAILER_SIZE, CS_PACK_TRAILER_SIZE);
  assert(tail != NULL);
  cs_pack_trailer trailer;
  cs_pack_error err;
  if (cs_pack_trailer_parse(tail, p->size_bytes, &trailer, &err) != CS_E_OK)
    return reader_refuse(CS_E_CORRUPT, msg, msg_size, "pack %s (%s): its trailer at the catalog's size %llu: %s", id,
                         p->key, (unsigned long long)p->size_bytes, err.message);
  if (trailer.footer_offset != p->footer_offset || trailer.footer_offset + trailer.footer_length + CS_PACK_TRAILER_SIZE !=
                                                        p->size_bytes)
    return reader_refuse(CS_E_CONFLICT, msg, msg_size,
                         "pack %s (%s): its footer starts at %llu, the catalog's records end before %llu", id, p->key,
                         (unsigned long long)trailer.footer_offset, (unsigned long long)p->footer_offset);
  const uint8_t *footer_bytes = bytes_at(job, tail_span, trailer.footer_offset, trailer.footer_length);
  assert(footer_bytes != NULL);
  if (cs_pack_footer_parse(&trailer, footer_bytes, (size_t)trailer.footer_length, footer, &err) != CS_E_OK)
    return reader_refuse(err.kind == CS_PACK_E_NO_MEMORY ? CS_E_NO_MEMORY : CS_E_CORRUPT, msg, msg_size,
                         "pack %s (%s): its footer: %s", id, p->key, err.message);
  if (!cs_uuid_equal(&footer->pack_id, &p->pack_id))
    return reader_refuse(CS_E_CONFLICT, msg, msg_size, "pack %s (%s): the object holds another pack", id, p->key);
  if (whole) {
    const uint8_t *object = bytes_at(job, tail_span, 0, p->size_bytes);
    uint8_t digest[32];
    unsigned int len = 0;
    assert(object != NULL);
    if (EVP_Digest(object, (size_t)p->size_bytes, digest, &len, EVP_sha256(), NULL) != 1 || len != 32)
      return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "pack %s: SHA-256 failed", id);
    if (memcmp(digest, p->sha256, 32) != 0)
      return reader_refuse(CS_E_CORRUPT, msg, msg_size, "pack %s (%s): its SHA-256 differs from the catalog's", id, p->key);
  }
  return CS_E_OK;
}

/* Row i bound to its pack's footer, and its payload's CRC-32. */
static int verify_row(const read_job *job, uint32_t i, const cs_pack_footer *footer, char *msg, size_t msg_size) {
  const cs_search_row *row = &job->sel->rows[i];
  const cs_pack_text *cid = &row->d.record.meta.capture_id;
  int shown = cid->len > 200 ? 200 : (int)cid->len;
  const cs_pack_record *rec = footer_record(footer, &row->d.record);
  if (rec == NULL)
    return reader_refuse(CS_E_CONFLICT, msg, msg_size, "record %.*s: the catalog names pack %s, whose footer lacks it",
                         shown, cid->bytes, row->d.key);
  const char *field = record_differs(&row->d.record, rec);
  if (field != NULL)
    return reader_refuse(CS_E_CONFLICT, msg, msg_size, "record %.*s: the catalog's %s differs from pack %s's footer",
                         shown, cid->bytes, field, row->d.key);
  const uint8_t *bytes = bytes_at(job, job->span_of_want[i], rec->offset, rec->stored_length);
  assert(bytes != NULL); /* the footer's record equals the catalog's, whose bytes the span holds */
  if (cs_crc32(0, bytes, (size_t)rec->stored_length) != rec->crc32)
    return reader_refuse(CS_E_CORRUPT, msg, msg_size, "record %.*s: its payload in %s fails its CRC-32 check", shown,
                         cid->bytes, row->d.key);
  return CS_E_OK;
}

/* Every pack, then every row of it (the plan's order lists each pack's rows together). */
static int verify_all(const read_job *job, bool whole, char *msg, size_t msg_size) {
  uint32_t at = 0, n = job->sel->count;
  for (uint32_t k = 0; k < job->pack_count; k++) {
    cs_pack_footer footer;
    memset(&footer, 0, sizeof footer);
    int rc = verify_pack(job, k, whole, &footer, msg, msg_size);
    for (; at < n && job->wants[job->order[at]].pack == k && rc == CS_E_OK; at++)
      rc = verify_row(job, job->order[at], &footer, msg, msg_size);
    cs_pack_footer_free(&footer);
    if (rc != CS_E_OK) return rc;
  }
  assert(at == n);
  return CS_E_OK;
}

void capstore_payloads_free(capstore_payloads *p) {
  if (p == NULL) return;
  read_job *job = p->storage_;
  if (job != NULL) {
    job_free(job);
    free(job);
  }
  free(p->bytes);
  free(p->length);
  memset(p, 0, sizeof *p);
}

int capstore_read(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                  capstore_payloads *out, char *msg, size_t msg_size) {
  if (r == NULL || sel == NULL || opt == NULL || out == NULL)
    return reader_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader, selection, options and out must be given");
  memset(out, 0, sizeof *out);
  if (r->broken)
    return reader_refuse(CS_E_STATE, msg, msg_size, "this reader's store failed with reads in flight: open a new reader");
  read_job *job = calloc(1, sizeof *job);
  if (job == NULL) return reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  job->sel = sel;
  int rc = job_plan(job, opt, &out->cost, msg, msg_size);
  if (rc == CS_E_OK) rc = fetch_all(r, job, opt->inflight_max, &out->cost, msg, msg_size);
  if (rc == CS_E_OK) rc = verify_all(job, opt->verify_sha256, msg, msg_size);
  if (rc == CS_E_OK) {
    out->bytes = calloc(sel->count + 1, sizeof *out->bytes);
    out->length = calloc(sel->count + 1, sizeof *out->length);
    if (out->bytes == NULL || out->length == NULL) rc = reader_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  }
  if (rc != CS_E_OK) {
    capstore_read_cost cost = out->cost;
    job_free(job);
    free(job);
    free(out->bytes);
    free(out->length);
    memset(out, 0, sizeof *out);
    out->cost = cost;
    return rc;
  }
  for (uint32_t i = 0; i < sel->count; i++) {
    const cs_search_row *row = &sel->rows[i];
    out->bytes[i] = bytes_at(job, job->span_of_want[i], row->d.record.offset, row->d.record.stored_length);
    out->length[i] = row->d.record.stored_length;
  }
  out->count = sel->count;
  out->storage_ = job;
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

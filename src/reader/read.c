/*
 * Reading back (capstore.h, docs/reader.md): plan a selection's ranged GETs
 * with the read-planning core (src/core/read_plan.c), issue them through the
 * store's asynchronous form, and verify as they come in.
 *
 * Memory is the payload and one buffer per GET in flight, never the plan's
 * bytes: each GET lands in a span buffer (a slot) reused from GET to GET,
 * and a worker thread copies the records it holds out into one arena of
 * the wanted bytes (checking each CRC-32 as it copies), keeps the pack's
 * footer and trailer when the GET has them, and hands the slot back. Once
 * every read of a pack is in, a worker verifies that pack (trailer, footer,
 * every catalog field, the CRC-32s) while the next packs' GETs run.
 *
 * A GET that fails with a transient outcome is issued again after a
 * backoff, a bounded number of times (cs_read_exec_retry); the retries are
 * counted (capstore_read_cost.retries) and never take the read past its
 * request limit.
 *
 * Threads: the caller's thread drives the store (one thread at a time, as
 * store.h asks) and RD_WORKERS workers copy and verify. Slot states, the
 * work queues, each pack's count of reads not yet copied and the first
 * error are guarded by work.mutex; a slot's buffer belongs to whoever
 * holds it in its state (the store in SLOT_GET, a worker in SLOT_COPY).
 */
#define _DEFAULT_SOURCE /* madvise */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <openssl/evp.h>

#include "reader_internal.h"
#include "../runtime/runtime_internal.h" /* rt_refuse */
#include "../runtime/thread_name.h"

#define READ_INFLIGHT_DEFAULT 8u
#define READ_RETRY_DEFAULT 3u
#define READ_RETRY_MAX 10u
#define READ_BACKOFF_FIRST_NS (100 * CS_MS_NS) /* then doubling: 100, 200, 400 ms, ... */
#define READ_BACKOFF_MAX_NS (5 * CS_SEC_NS)
#define READ_BUFFER_KEEP_BYTES (UINT64_C(16) << 20) /* larger span buffers go back at the end of the read */
#define READ_HUGE_PAGE ((size_t)2 << 20)
#define READ_PAYLOAD_ALIGN 64u

void capstore_read_options_default(capstore_read_options *opt) {
  assert(opt != NULL);
  cs_read_limits limits;
  cs_read_limits_default(&limits);
  *opt = (capstore_read_options){.byte_limit = INT64_MAX,
                                 .request_limit = INT64_MAX,
                                 .gap_bytes_max = limits.gap_bytes_max,
                                 .span_bytes_max = limits.span_bytes_max,
                                 .inflight_max = READ_INFLIGHT_DEFAULT,
                                 .retry_max = READ_RETRY_DEFAULT};
}

/* One pack of the selection: what the catalog says of it, and what its reads brought so far. */
typedef struct read_pack {
  cs_uuid pack_id;
  const char *key;
  uint64_t size_bytes, footer_offset;
  const uint8_t *sha256;
  uint32_t first, count; /* its wants: order[first .. first + count) */
  uint32_t spans_left;   /* its reads not yet copied out (work.mutex) */
  uint8_t *tail;         /* [footer_offset, size_bytes): its footer and trailer, copied out of its tail read */
  uint8_t digest[32];    /* verify_sha256: the object's SHA-256, taken as its one read came in */
} read_pack;

/* The plan's inputs and outputs for one read, and where each payload goes. */
typedef struct read_job {
  const capstore_selection *sel;
  read_pack *packs;
  uint32_t pack_count;
  cs_read_pack *plan_packs;
  cs_read_want *wants;
  uint32_t *order;
  cs_read_span *spans;
  cs_read_plan plan;
  uint64_t *row_at;  /* each row's payload in the arena (a record wanted twice is there once) */
  uint32_t *row_crc; /* each row's CRC-32, taken as it was copied */
  uint8_t *arena;    /* the payloads, each READ_PAYLOAD_ALIGN-aligned */
  uint64_t arena_bytes;
  uint64_t arena_capacity; /* what arena holds (a spare one may be larger) */
  rd_spare *spare;         /* the reader's: the arena goes back to it (NULL for an estimate) */
  uint64_t span_max; /* the longest read: every span buffer is made this size, once */
} read_job;

static void spare_drop(rd_spare *spare);
static void spare_give(rd_spare *spare, uint8_t *memory, uint64_t bytes);

static void job_free(read_job *job) {
  for (uint32_t k = 0; job->packs != NULL && k < job->pack_count; k++) free(job->packs[k].tail);
  free(job->packs);
  free(job->plan_packs);
  free(job->wants);
  free(job->order);
  free(job->spans);
  free(job->row_at);
  free(job->row_crc);
  if (job->spare != NULL) {
    spare_give(job->spare, job->arena, job->arena_capacity);
    spare_drop(job->spare);
  } else {
    free(job->arena);
  }
  memset(job, 0, sizeof *job);
}

static int by_pack_id(const void *a, const void *b) {
  const cs_search_row *x = *(const cs_search_row *const *)a, *y = *(const cs_search_row *const *)b;
  return memcmp(x->d.pack_id.bytes, y->d.pack_id.bytes, 16);
}

/* Row into its pack (a new one, or the last, whose catalog fields it must repeat). CS_E_OK or CS_E_CONFLICT. */
static int pack_of_row(read_job *job, const cs_search_row *row, char *msg, size_t msg_size) {
  read_pack *p = job->pack_count > 0 ? &job->packs[job->pack_count - 1] : NULL;
  if (p == NULL || !cs_uuid_equal(&p->pack_id, &row->d.pack_id)) {
    p = &job->packs[job->pack_count++];
    *p = (read_pack){.pack_id = row->d.pack_id, .key = row->d.key, .size_bytes = row->pack_size_bytes,
                     .footer_offset = row->footer_offset, .sha256 = row->pack_sha256};
    return CS_E_OK;
  }
  if (strcmp(p->key, row->d.key) != 0 || p->size_bytes != row->pack_size_bytes ||
      p->footer_offset != row->footer_offset || memcmp(p->sha256, row->pack_sha256, 32) != 0) {
    char id[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&p->pack_id, id);
    return rt_refuse(CS_E_CONFLICT, msg, msg_size,
                     "the catalog's rows of pack %s disagree on its key, size, sha256 or layout", id);
  }
  return CS_E_OK;
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
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory for %u rows", sel->count);
  }
  for (uint32_t i = 0; i < sel->count; i++) sorted[i] = &sel->rows[i];
  qsort(sorted, sel->count, sizeof *sorted, by_pack_id);
  int rc = CS_E_OK;
  for (uint32_t i = 0; i < sel->count && rc == CS_E_OK; i++) {
    const cs_search_row *row = sorted[i];
    rc = pack_of_row(job, row, msg, msg_size);
    job->wants[row - sel->rows] = (cs_read_want){.pack = job->pack_count - 1, .offset = row->d.record.offset,
                                                 .length = row->d.record.stored_length};
  }
  free(sorted);
  for (uint32_t k = 0; k < job->pack_count; k++)
    job->plan_packs[k] = (cs_read_pack){.size_bytes = job->packs[k].size_bytes,
                                        .footer_offset = job->packs[k].footer_offset};
  return rc;
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
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "byte limit %lld: must be >= 0", (long long)opt->byte_limit);
  if (opt->request_limit <= 0)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "request limit %lld: must be > 0",
                     (long long)opt->request_limit);
  if (opt->inflight_max > RD_INFLIGHT_MAX || opt->retry_max > READ_RETRY_MAX)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "inflight_max %u, retry_max %u: at most %u and %u",
                     opt->inflight_max, opt->retry_max, RD_INFLIGHT_MAX, READ_RETRY_MAX);
  int rc = job_packs(job, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  uint32_t n = job->sel->count, span_capacity = n + job->pack_count;
  job->order = calloc(n + 1, sizeof *job->order);
  job->spans = calloc(span_capacity + 1, sizeof *job->spans);
  if (job->order == NULL || job->spans == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  cs_read_limits limits = {.gap_bytes_max = opt->gap_bytes_max, .span_bytes_max = opt->span_bytes_max,
                           .byte_limit = (uint64_t)opt->byte_limit, .request_limit = (uint64_t)opt->request_limit,
                           .whole_objects = opt->verify_sha256};
  char why[256];
  rc = cs_read_plan_make(job->plan_packs, job->pack_count, job->wants, n, &limits, job->order, job->spans,
                         span_capacity, &job->plan, why, sizeof why);
  if (rc == CS_E_OK || rc == CS_E_TOO_LARGE) cost_of_plan(&job->plan, cost);
  if (rc == CS_E_INVALID_ARGUMENT) return rt_refuse(rc, msg, msg_size, "the catalog's layout of a record: %s", why);
  if (rc != CS_E_OK) return rt_refuse(rc, msg, msg_size, "read refused: %s", why);
  return CS_E_OK;
}

int capstore_read_estimate(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                           capstore_read_cost *cost, char *msg, size_t msg_size) {
  if (r == NULL || sel == NULL || opt == NULL || cost == NULL)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader, selection, options and cost must be given");
  memset(cost, 0, sizeof *cost);
  read_job job = {.sel = sel};
  int rc = job_plan(&job, opt, cost, msg, msg_size);
  job_free(&job);
  return rc;
}

/* ---- Where the payloads go: one arena of the wanted bytes ---- */

/*
 * Memory for the payloads and the span buffers, READ_PAYLOAD_ALIGN-aligned:
 * huge pages where the kernel has them (the first touch of fresh 4 KiB
 * pages cost 0.24-0.32 GB/s on the VM measured, about as much as the GETs
 * themselves; docs/performance.md, "Reader").
 */
static uint8_t *memory_alloc(uint64_t bytes) {
  if (bytes < READ_HUGE_PAGE) {
    size_t rounded = ((size_t)bytes + READ_PAYLOAD_ALIGN) / READ_PAYLOAD_ALIGN * READ_PAYLOAD_ALIGN; /* > 0 */
    return aligned_alloc(READ_PAYLOAD_ALIGN, rounded);
  }
  size_t rounded = ((size_t)bytes + READ_HUGE_PAGE - 1) / READ_HUGE_PAGE * READ_HUGE_PAGE;
  uint8_t *memory = aligned_alloc(READ_HUGE_PAGE, rounded);
  if (memory == NULL) return NULL;
  (void)madvise(memory, rounded, MADV_HUGEPAGE); /* advice only: without it the memory is the same */
  return memory;
}

rd_spare *rd_spare_new(void) {
  rd_spare *spare = calloc(1, sizeof *spare);
  if (spare == NULL) return NULL;
  pthread_mutex_init(&spare->mutex, NULL);
  spare->refs = 1;
  spare->reader_alive = true;
  return spare;
}

/* One holder fewer; the last frees it. */
static void spare_drop(rd_spare *spare) {
  pthread_mutex_lock(&spare->mutex);
  assert(spare->refs > 0);
  bool last = --spare->refs == 0;
  pthread_mutex_unlock(&spare->mutex);
  if (!last) return;
  free(spare->memory);
  pthread_mutex_destroy(&spare->mutex);
  free(spare);
}

static rd_spare *spare_hold(rd_spare *spare) {
  pthread_mutex_lock(&spare->mutex);
  spare->refs++;
  pthread_mutex_unlock(&spare->mutex);
  return spare;
}

/* Keeps memory for the reader's next read while the reader lives and holds none; else frees it. */
static void spare_give(rd_spare *spare, uint8_t *memory, uint64_t bytes) {
  if (memory == NULL) return;
  pthread_mutex_lock(&spare->mutex);
  bool keep = spare->reader_alive && spare->memory == NULL && bytes >= READ_HUGE_PAGE;
  if (keep) {
    spare->memory = memory;
    spare->bytes = bytes;
    (void)madvise(memory, (size_t)bytes, MADV_FREE); /* reclaimable meanwhile; reused as it is if not */
  }
  pthread_mutex_unlock(&spare->mutex);
  if (!keep) free(memory);
}

/*
 * An arena of at least bytes: the spare when it fits and is not more than
 * twice that (a small read does not pin a large arena), else fresh memory.
 */
static uint8_t *spare_take(rd_spare *spare, uint64_t bytes, uint64_t *capacity) {
  pthread_mutex_lock(&spare->mutex);
  uint8_t *memory = spare->memory;
  uint64_t held = spare->bytes;
  spare->memory = NULL;
  spare->bytes = 0;
  pthread_mutex_unlock(&spare->mutex);
  if (memory != NULL && held >= bytes && held / 2 <= bytes) {
    *capacity = held;
    return memory;
  }
  free(memory);
  *capacity = bytes < READ_HUGE_PAGE ? bytes : (bytes + READ_HUGE_PAGE - 1) / READ_HUGE_PAGE * READ_HUGE_PAGE;
  return memory_alloc(bytes);
}

/*
 * Each row's place in the arena, in the plan's (pack, offset) order: a
 * record wanted twice (the same pack, offset and length) is kept once;
 * each payload starts READ_PAYLOAD_ALIGN-aligned. Then each pack's wants.
 */
static int job_layout(read_job *job, char *msg, size_t msg_size) {
  uint32_t n = job->sel->count;
  job->row_at = calloc(n + 1, sizeof *job->row_at);
  job->row_crc = calloc(n + 1, sizeof *job->row_crc);
  if (job->row_at == NULL || job->row_crc == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  uint64_t at = 0;
  for (uint32_t i = 0; i < n; i++) {
    const cs_read_want *w = &job->wants[job->order[i]];
    const cs_read_want *prev = i > 0 ? &job->wants[job->order[i - 1]] : NULL;
    if (prev != NULL && prev->pack == w->pack && prev->offset == w->offset && prev->length == w->length) {
      job->row_at[job->order[i]] = job->row_at[job->order[i - 1]];
      continue;
    }
    job->row_at[job->order[i]] = at;
    at += (w->length + READ_PAYLOAD_ALIGN - 1) / READ_PAYLOAD_ALIGN * READ_PAYLOAD_ALIGN;
  }
  for (uint32_t i = 0; i < n; i++) {
    read_pack *p = &job->packs[job->wants[job->order[i]].pack];
    if (p->count++ == 0) p->first = i; /* the plan's order lists each pack's wants together */
  }
  for (uint32_t s = 0; s < job->plan.span_count; s++) {
    job->packs[job->spans[s].pack].spans_left++;
    if (job->spans[s].length > job->span_max) job->span_max = job->spans[s].length;
  }
  job->arena_bytes = at;
  job->arena = spare_take(job->spare, at, &job->arena_capacity);
  if (job->arena == NULL)
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory for %llu bytes of payload",
                     (unsigned long long)at);
  return CS_E_OK;
}

/* ---- Verifying: one pack once its reads are in ---- */

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
  rd_meta_texts(&a.meta, ta);
  rd_meta_texts(&b.meta, tb);
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

/* Pack k's trailer and footer (from its tail, copied out), and with whole objects its SHA-256. */
static int verify_pack(const read_job *job, uint32_t k, bool whole, cs_pack_footer *footer, char *msg,
                       size_t msg_size) {
  const read_pack *p = &job->packs[k];
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&p->pack_id, id);
  uint64_t tail_bytes = p->size_bytes - p->footer_offset; /* > 64: the planner checked it */
  assert(p->tail != NULL && tail_bytes > CS_PACK_TRAILER_SIZE);
  cs_pack_trailer trailer;
  cs_pack_error err;
  if (cs_pack_trailer_parse(p->tail + tail_bytes - CS_PACK_TRAILER_SIZE, p->size_bytes, &trailer, &err) != CS_E_OK)
    return rt_refuse(CS_E_CORRUPT, msg, msg_size, "pack %s (%s): its trailer at the catalog's size %llu: %s", id,
                     p->key, (unsigned long long)p->size_bytes, err.message);
  if (trailer.footer_offset != p->footer_offset ||
      trailer.footer_offset + trailer.footer_length + CS_PACK_TRAILER_SIZE != p->size_bytes)
    return rt_refuse(CS_E_CONFLICT, msg, msg_size,
                     "pack %s (%s): its footer starts at %llu, the catalog's records end before %llu", id, p->key,
                     (unsigned long long)trailer.footer_offset, (unsigned long long)p->footer_offset);
  if (cs_pack_footer_parse(&trailer, p->tail, (size_t)trailer.footer_length, footer, &err) != CS_E_OK)
    return rt_refuse(err.kind == CS_PACK_E_NO_MEMORY ? CS_E_NO_MEMORY : CS_E_CORRUPT, msg, msg_size,
                     "pack %s (%s): its footer: %s", id, p->key, err.message);
  if (!cs_uuid_equal(&footer->pack_id, &p->pack_id))
    return rt_refuse(CS_E_CONFLICT, msg, msg_size, "pack %s (%s): the object holds another pack", id, p->key);
  if (whole && memcmp(p->digest, p->sha256, 32) != 0)
    return rt_refuse(CS_E_CORRUPT, msg, msg_size, "pack %s (%s): its SHA-256 differs from the catalog's", id, p->key);
  return CS_E_OK;
}

/* Row i bound to its pack's footer, and its payload's CRC-32 (taken as it was copied) against the footer's. */
static int verify_row(const read_job *job, uint32_t i, const cs_pack_footer *footer, char *msg, size_t msg_size) {
  const cs_search_row *row = &job->sel->rows[i];
  const cs_pack_text *cid = &row->d.record.meta.capture_id;
  int shown = cid->len > 200 ? 200 : (int)cid->len;
  const cs_pack_record *rec = footer_record(footer, &row->d.record);
  if (rec == NULL)
    return rt_refuse(CS_E_CONFLICT, msg, msg_size, "record %.*s: the catalog names pack %s, whose footer lacks it",
                     shown, cid->bytes, row->d.key);
  const char *field = record_differs(&row->d.record, rec);
  if (field != NULL)
    return rt_refuse(CS_E_CONFLICT, msg, msg_size, "record %.*s: the catalog's %s differs from pack %s's footer",
                     shown, cid->bytes, field, row->d.key);
  /* The footer's offset and length are the catalog's (just checked): the bytes copied are the record's. */
  if (job->row_crc[i] != rec->crc32)
    return rt_refuse(CS_E_CORRUPT, msg, msg_size, "record %.*s: its payload in %s fails its CRC-32 check", shown,
                     cid->bytes, row->d.key);
  return CS_E_OK;
}

/* Pack k and every row of it; its tail is freed after (the footer's records are no longer needed). */
static int verify_pack_rows(read_job *job, uint32_t k, bool whole, char *msg, size_t msg_size) {
  read_pack *p = &job->packs[k];
  cs_pack_footer footer;
  memset(&footer, 0, sizeof footer);
  int rc = verify_pack(job, k, whole, &footer, msg, msg_size);
  for (uint32_t i = p->first; i < p->first + p->count && rc == CS_E_OK; i++)
    rc = verify_row(job, job->order[i], &footer, msg, msg_size);
  cs_pack_footer_free(&footer);
  free(p->tail);
  p->tail = NULL;
  return rc;
}

/* ---- Copying: a span's records out of its buffer ---- */

/* The bytes [offset, offset + length) of the span in buf, or NULL when they are not all in it. */
static const uint8_t *span_bytes(const cs_read_span *span, const uint8_t *buf, uint64_t offset, uint64_t length) {
  if (offset < span->offset || length > span->length || offset - span->offset > span->length - length) return NULL;
  return buf + (offset - span->offset);
}

/*
 * Span s's records into the arena (each CRC-32 taken from the copy), and,
 * for a pack's tail read, its footer and trailer (and with whole objects
 * the SHA-256 of it all). CS_E_OK, CS_E_NO_MEMORY, or CS_E_STATE for a plan
 * that lists a record outside its read (never: the planner asserts it).
 */
static int copy_span(read_job *job, uint32_t s, const uint8_t *buf, bool whole, char *msg, size_t msg_size) {
  const cs_read_span *span = &job->spans[s];
  for (uint32_t i = span->first; i < span->first + span->count; i++) {
    uint32_t row = job->order[i];
    const cs_read_want *w = &job->wants[row];
    if (w->length == 0) continue; /* no byte: its CRC-32 is 0, as row_crc starts */
    const uint8_t *from = span_bytes(span, buf, w->offset, w->length);
    if (from == NULL) return rt_refuse(CS_E_STATE, msg, msg_size, "read: a record outside the read planned for it");
    uint8_t *to = job->arena + job->row_at[row];
    memcpy(to, from, (size_t)w->length);
    job->row_crc[row] = cs_crc32(0, to, (size_t)w->length);
  }
  if (!span->tail) return CS_E_OK;
  read_pack *p = &job->packs[span->pack];
  uint64_t tail_bytes = p->size_bytes - p->footer_offset;
  const uint8_t *tail = span_bytes(span, buf, p->footer_offset, tail_bytes);
  assert(tail != NULL); /* a tail read ends at the object's end and starts at or before its footer */
  p->tail = malloc((size_t)tail_bytes);
  if (p->tail == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory for a footer");
  memcpy(p->tail, tail, (size_t)tail_bytes);
  unsigned int len = 0;
  if (whole && (EVP_Digest(buf, (size_t)span->length, p->digest, &len, EVP_sha256(), NULL) != 1 || len != 32))
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: SHA-256 failed");
  return CS_E_OK;
}

/* ---- The slots, the workers and the GETs ---- */

typedef enum slot_state {
  SLOT_FREE = 0, /* its buffer waits for the next GET */
  SLOT_GET,      /* its GET is in the store */
  SLOT_BACKOFF,  /* its GET failed transiently: issued again at retry_at_ns */
  SLOT_COPY,     /* a worker copies its records out */
} slot_state;

typedef struct rd_slot {
  cs_store_request req;
  uint8_t *buf;
  size_t cap;
  uint32_t span;
  uint32_t retried;     /* times its span was issued again */
  uint64_t retry_at_ns;
  slot_state state;     /* work.mutex */
} rd_slot;

typedef struct read_work {
  capstore_reader *r;
  read_job *job;
  bool whole;
  pthread_mutex_t mutex;
  pthread_cond_t work_ready;  /* a queue got an entry, or stop */
  pthread_cond_t slot_freed;  /* a worker handed a slot back (the driver waits on it when no GET is out) */
  rd_slot *slots;
  uint32_t slot_count;
  uint32_t *copy_queue;       /* slots to copy out (a ring of slot_count) */
  uint32_t copy_head, copy_len;
  uint32_t *verify_queue;     /* packs whose reads are all in (a ring of pack_count) */
  uint32_t verify_head, verify_len;
  uint32_t packs_verified;
  bool stop;                  /* the driver is done: drain the queues and return */
  int err;                    /* the first error of a worker */
  char msg[512];
} read_work;

/* The first error wins: rc and msg are kept only where none is kept yet. */
static void first_error(int *err, char *kept, size_t kept_size, int rc, const char *msg) {
  if (*err != CS_E_OK) return;
  *err = rc;
  snprintf(kept, kept_size, "%s", msg);
}

/* Under the mutex. */
static void work_fail(read_work *w, int rc, const char *msg) { first_error(&w->err, w->msg, sizeof w->msg, rc, msg); }

/* A worker's copy of slot i: records out, the slot handed back, the pack queued for verification once complete. */
static void worker_copy(read_work *w, uint32_t i) {
  rd_slot *slot = &w->slots[i];
  char msg[512] = "";
  bool failed = w->err != CS_E_OK;
  pthread_mutex_unlock(&w->mutex);
  int rc = failed ? CS_E_OK : copy_span(w->job, slot->span, slot->buf, w->whole, msg, sizeof msg);
  pthread_mutex_lock(&w->mutex);
  uint32_t k = w->job->spans[slot->span].pack;
  slot->state = SLOT_FREE;
  pthread_cond_signal(&w->slot_freed);
  if (rc != CS_E_OK) work_fail(w, rc, msg);
  assert(w->job->packs[k].spans_left > 0);
  if (--w->job->packs[k].spans_left == 0 && w->err == CS_E_OK) {
    assert(w->verify_len < w->job->pack_count);
    w->verify_queue[(w->verify_head + w->verify_len++) % w->job->pack_count] = k;
  }
}

/* A worker's verification of pack k. */
static void worker_verify(read_work *w, uint32_t k) {
  char msg[512] = "";
  bool failed = w->err != CS_E_OK;
  pthread_mutex_unlock(&w->mutex);
  int rc = failed ? CS_E_OK : verify_pack_rows(w->job, k, w->whole, msg, sizeof msg);
  pthread_mutex_lock(&w->mutex);
  if (rc != CS_E_OK) work_fail(w, rc, msg);
  if (rc != CS_E_OK) pthread_cond_signal(&w->slot_freed); /* a driver waiting for a slot stops sooner */
  w->packs_verified++;
}

/* Copies first (they free slots for the next GETs), then verifications; returns once stopped and drained. */
static void *worker_main(void *context) {
  read_work *w = context;
  rt_thread_name("cs-reader");
  pthread_mutex_lock(&w->mutex);
  for (;;) {
    if (w->copy_len > 0) {
      uint32_t i = w->copy_queue[w->copy_head];
      w->copy_head = (w->copy_head + 1) % w->slot_count;
      w->copy_len--;
      worker_copy(w, i);
      pthread_mutex_unlock(&w->mutex);
      cs_store_wakeup(&w->r->store); /* the driver may wait in reap for a slot to start the next GET in */
      pthread_mutex_lock(&w->mutex);
    } else if (w->verify_len > 0) {
      uint32_t k = w->verify_queue[w->verify_head];
      w->verify_head = (w->verify_head + 1) % w->job->pack_count;
      w->verify_len--;
      worker_verify(w, k);
    } else if (w->stop) {
      break;
    } else {
      pthread_cond_wait(&w->work_ready, &w->mutex);
    }
  }
  pthread_mutex_unlock(&w->mutex);
  return NULL;
}

/* The driver: the plan handed out through the core, the store's GETs, and the retries. */
typedef struct fetch {
  capstore_reader *r;
  read_work *work;
  cs_read_exec exec;
  capstore_read_cost *cost;
  int err;
  char msg[512];
} fetch;

static void fetch_fail(fetch *f, int rc, const char *msg) { first_error(&f->err, f->msg, sizeof f->msg, rc, msg); }

/*
 * Slot's buffer, made to hold the read's longest span (once: a buffer grown
 * span by span is fresh memory again each time, touched first by the thread
 * that drives every transfer). CS_E_OK or CS_E_NO_MEMORY.
 */
static int slot_fit(rd_slot *slot, uint64_t bytes) {
  if (slot->cap >= bytes) return CS_E_OK;
  free(slot->buf);
  slot->cap = 0;
  slot->buf = memory_alloc(bytes);
  if (slot->buf == NULL) return CS_E_NO_MEMORY;
  slot->cap = (size_t)bytes;
  return CS_E_OK;
}

/* Starts the GET of slot's span into its buffer. CS_E_OK, or the refusal (the read fails with it). */
static int fetch_start(fetch *f, rd_slot *slot) {
  read_job *job = f->work->job;
  const cs_read_span *span = &job->spans[slot->span];
  char msg[512];
  if (slot_fit(slot, job->span_max) != CS_E_OK) {
    snprintf(msg, sizeof msg, "read: out of memory for a %llu-byte range", (unsigned long long)span->length);
    fetch_fail(f, CS_E_NO_MEMORY, msg);
    return CS_E_NO_MEMORY;
  }
  slot->req = (cs_store_request){.op = CS_STORE_GET, .id = (uint64_t)(slot - f->work->slots),
                                 .key = job->packs[span->pack].key, .has_range = true,
                                 .range = {.offset = span->offset, .length = span->length},
                                 .buf = slot->buf, .cap = (size_t)span->length};
  int rc = cs_store_start(&f->r->store, &slot->req);
  if (rc != CS_E_OK) {
    snprintf(msg, sizeof msg, "store GET of %s: %s", slot->req.key, cs_strerror(rc));
    fetch_fail(f, rc, msg);
    return rc;
  }
  slot->state = SLOT_GET;
  f->cost->requests++;
  return CS_E_OK;
}

static uint64_t backoff_ns(uint32_t retried) {
  uint64_t ns = READ_BACKOFF_FIRST_NS;
  for (uint32_t i = 0; i < retried && ns < READ_BACKOFF_MAX_NS; i++) ns *= 2;
  return ns < READ_BACKOFF_MAX_NS ? ns : READ_BACKOFF_MAX_NS;
}

/*
 * A GET came back into slot: to the workers when whole, to a backoff when
 * transient and retries are left, else the read's error (naming the object
 * and the range).
 */
static void fetch_done(fetch *f, rd_slot *slot) {
  const cs_store_request *req = &slot->req;
  const cs_read_span *span = &f->work->job->spans[slot->span];
  f->cost->bytes += req->got;
  bool ok = req->rc == CS_E_OK && req->res.outcome == CS_OUT_OK;
  if (ok && req->got == span->length) {
    cs_read_exec_done(&f->exec, slot->span, CS_E_OK);
    pthread_mutex_lock(&f->work->mutex);
    read_work *w = f->work;
    slot->state = SLOT_COPY;
    w->copy_queue[(w->copy_head + w->copy_len++) % w->slot_count] = (uint32_t)(slot - w->slots);
    pthread_cond_signal(&w->work_ready);
    pthread_mutex_unlock(&w->mutex);
    return;
  }
  bool transient = req->rc == CS_E_OK && cs_read_retryable(req->res.outcome);
  if (transient && cs_read_exec_retry(&f->exec, slot->span, slot->retried) == CS_E_OK) {
    slot->state = SLOT_BACKOFF;
    slot->retry_at_ns = capstore_clock_ns() + backoff_ns(slot->retried);
    slot->retried++;
    return;
  }
  char msg[512];
  int rc = !ok ? (req->rc != CS_E_OK ? req->rc : CS_E_IO) : CS_E_CORRUPT;
  if (!ok)
    snprintf(msg, sizeof msg, "store GET of %s bytes %llu-%llu: %s (%s)%s", req->key,
             (unsigned long long)span->offset, (unsigned long long)(span->offset + span->length),
             req->rc != CS_E_OK ? cs_strerror(req->rc) : cs_outcome_name(req->res.outcome), req->res.detail,
             slot->retried > 0 ? ", after retries" : "");
  else
    snprintf(msg, sizeof msg, "store GET of %s: %zu of %llu bytes (a short read)", req->key, req->got,
             (unsigned long long)span->length);
  fetch_fail(f, rc, msg);
  cs_read_exec_done(&f->exec, slot->span, rc);
  slot->state = SLOT_FREE;
}

/* The slots' states now (workers hand slots back meanwhile: a slot seen busy is looked at next time). */
static void slot_states(read_work *w, slot_state *states) {
  pthread_mutex_lock(&w->mutex);
  for (uint32_t i = 0; i < w->slot_count; i++) states[i] = w->slots[i].state;
  pthread_mutex_unlock(&w->mutex);
}

/* Starts what can start: retries that are due, then the plan's next reads into free slots. */
static void fetch_issue(fetch *f, const slot_state *states, uint64_t now_ns) {
  read_work *w = f->work;
  for (uint32_t i = 0; i < w->slot_count; i++) {
    rd_slot *slot = &w->slots[i];
    if (states[i] != SLOT_BACKOFF) continue;
    if (f->err != CS_E_OK) { /* the read failed meanwhile: this retry is not sent */
      cs_read_exec_done(&f->exec, slot->span, f->err);
      slot->state = SLOT_FREE;
    } else if (slot->retry_at_ns <= now_ns && fetch_start(f, slot) == CS_E_OK) {
      f->cost->retries++;
    } else if (slot->retry_at_ns <= now_ns) {
      cs_read_exec_done(&f->exec, slot->span, f->err);
      slot->state = SLOT_FREE;
    }
  }
  for (uint32_t i = 0; i < w->slot_count && f->err == CS_E_OK; i++) {
    rd_slot *slot = &w->slots[i];
    uint32_t s;
    if (states[i] != SLOT_FREE || cs_read_exec_next(&f->exec, &s) != CS_E_OK) continue;
    slot->span = s;
    slot->retried = 0;
    if (fetch_start(f, slot) != CS_E_OK) cs_read_exec_done(&f->exec, s, f->err); /* never sent: back at once */
  }
}

/* How long the driver may wait: until the next retry is due, at most a second; *gets: GETs in the store. */
static uint32_t fetch_wait_ms(const fetch *f, const slot_state *states, uint64_t now_ns, uint32_t *gets) {
  uint64_t wait_ns = CS_SEC_NS;
  *gets = 0;
  for (uint32_t i = 0; i < f->work->slot_count; i++) {
    uint64_t due = f->work->slots[i].retry_at_ns;
    if (states[i] == SLOT_GET) (*gets)++;
    if (states[i] == SLOT_BACKOFF && due <= now_ns) wait_ns = 0;
    else if (states[i] == SLOT_BACKOFF && due - now_ns < wait_ns) wait_ns = due - now_ns;
  }
  return (uint32_t)(wait_ns / CS_MS_NS);
}

/*
 * With no GET in the store nothing comes out of reap: wait for a worker to
 * hand a slot back (when a read could start in it) or for a retry to be due.
 * The check for a free slot is under the mutex the worker signals under, so
 * no hand-back is missed.
 */
static void fetch_wait_slot(fetch *f, uint32_t wait_ms) {
  const cs_read_exec *x = &f->exec;
  bool can_start = f->err == CS_E_OK && x->inflight < x->inflight_max && x->next_span < x->plan->span_count;
  read_work *w = f->work;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)wait_ms * CS_MS_NS;
  until.tv_sec += (time_t)(ns / CS_SEC_NS);
  until.tv_nsec = (long)(ns % CS_SEC_NS);
  pthread_mutex_lock(&w->mutex);
  bool any_free = false;
  for (uint32_t i = 0; i < w->slot_count; i++) any_free = any_free || w->slots[i].state == SLOT_FREE;
  if (!(any_free && can_start) && wait_ms > 0) pthread_cond_timedwait(&w->slot_freed, &w->mutex, &until);
  pthread_mutex_unlock(&w->mutex);
}

/*
 * Every span read, at most inflight_max in flight, never more than planned
 * plus the retries. Returns CS_E_OK, or a negative cs_err for a store whose
 * transfer engine failed (its GETs stay in flight: the caller strands them).
 */
static int fetch_all(fetch *f) {
  slot_state states[RD_SLOTS_MAX];
  for (;;) {
    pthread_mutex_lock(&f->work->mutex);
    int worker_err = f->work->err;
    pthread_mutex_unlock(&f->work->mutex);
    if (worker_err != CS_E_OK) fetch_fail(f, worker_err, "a worker failed"); /* its message wins later */
    uint64_t now_ns = capstore_clock_ns();
    slot_states(f->work, states);
    fetch_issue(f, states, now_ns);
    slot_states(f->work, states);
    uint32_t gets = 0, wait_ms = fetch_wait_ms(f, states, now_ns, &gets);
    if (f->exec.inflight == 0 && (f->err != CS_E_OK || f->exec.completed == f->exec.plan->span_count)) return CS_E_OK;
    if (gets == 0) {
      fetch_wait_slot(f, wait_ms);
      continue;
    }
    cs_store_request *done = NULL;
    int got = cs_store_reap(&f->r->store, wait_ms, &done);
    if (got < 0) {
      char msg[128];
      snprintf(msg, sizeof msg, "store: %s", cs_strerror(got));
      fetch_fail(f, got, msg);
      return got;
    }
    if (got == 1) fetch_done(f, &f->work->slots[done->id]);
  }
}

/* ---- One read: the slots and workers around fetch_all ---- */

/* Slots with the reader's kept buffers, the queues, and the threads. CS_E_OK or CS_E_NO_MEMORY. */
static int work_open(read_work *w, capstore_reader *r, read_job *job, bool whole, uint32_t slots,
                     pthread_t *threads, uint32_t *started) {
  *w = (read_work){.r = r, .job = job, .whole = whole, .slot_count = slots};
  pthread_mutex_init(&w->mutex, NULL);
  pthread_cond_init(&w->work_ready, NULL);
  pthread_cond_init(&w->slot_freed, NULL);
  *started = 0;
  assert(slots <= RD_SLOTS_MAX);
  w->slots = calloc(slots, sizeof *w->slots);
  w->copy_queue = calloc(slots, sizeof *w->copy_queue);
  w->verify_queue = calloc(job->pack_count + 1, sizeof *w->verify_queue);
  if (w->slots == NULL || w->copy_queue == NULL || w->verify_queue == NULL) return CS_E_NO_MEMORY;
  for (uint32_t i = 0; i < slots; i++) {
    w->slots[i].buf = r->buffers[i];
    w->slots[i].cap = r->buffer_bytes[i];
    r->buffers[i] = NULL;
    r->buffer_bytes[i] = 0;
  }
  for (uint32_t t = 0; t < RD_WORKERS; t++)
    if (pthread_create(&threads[t], NULL, worker_main, w) == 0) (*started)++;
  return *started > 0 ? CS_E_OK : CS_E_NO_MEMORY;
}

/* Stops and joins the workers (they drain the queues first); the buffers go back to the reader, or strand. */
static void work_close(read_work *w, capstore_reader *r, pthread_t *threads, uint32_t started, bool strand) {
  pthread_mutex_lock(&w->mutex);
  w->stop = true;
  pthread_cond_broadcast(&w->work_ready);
  pthread_mutex_unlock(&w->mutex);
  for (uint32_t t = 0; t < started; t++) pthread_join(threads[t], NULL);
  pthread_mutex_destroy(&w->mutex);
  pthread_cond_destroy(&w->work_ready);
  pthread_cond_destroy(&w->slot_freed);
  for (uint32_t i = 0; w->slots != NULL && i < w->slot_count; i++) {
    rd_slot *slot = &w->slots[i];
    if (strand && slot->state == SLOT_GET) continue; /* the store still writes into it */
    if (slot->cap <= READ_BUFFER_KEEP_BYTES && r->buffers[i] == NULL) {
      r->buffers[i] = slot->buf;
      r->buffer_bytes[i] = slot->cap;
    } else {
      free(slot->buf);
    }
    slot->buf = NULL;
  }
  if (strand) { /* until the store is closed (rd_read_release) */
    r->stranded = w->slots;
    r->stranded_count = w->slot_count;
  } else {
    free(w->slots);
  }
  free(w->copy_queue);
  free(w->verify_queue);
  w->slots = NULL;
}

void rd_read_release(capstore_reader *r) {
  for (uint32_t i = 0; i < RD_SLOTS_MAX; i++) free(r->buffers[i]);
  if (r->spare != NULL) { /* payloads still out keep it until they are freed, and keep nothing more */
    pthread_mutex_lock(&r->spare->mutex);
    r->spare->reader_alive = false;
    free(r->spare->memory);
    r->spare->memory = NULL;
    pthread_mutex_unlock(&r->spare->mutex);
    spare_drop(r->spare);
    r->spare = NULL;
  }
  for (uint32_t i = 0; i < r->stranded_count; i++) free(r->stranded[i].buf); /* those not stranded are NULL */
  free(r->stranded);
  r->stranded = NULL;
  r->stranded_count = 0;
  for (uint32_t i = 0; i < r->orphan_count; i++) free(r->orphans[i]);
  free(r->orphans);
  r->orphans = NULL;
  r->orphan_count = 0;
}

void rd_orphan(capstore_reader *r, void *p) {
  if (p == NULL) return;
  void **grown = realloc(r->orphans, ((size_t)r->orphan_count + 1) * sizeof *grown);
  if (grown == NULL) return;
  r->orphans = grown;
  r->orphans[r->orphan_count++] = p;
}

/* Every GET of the plan, copied out and verified. */
static int read_verified(capstore_reader *r, read_job *job, const capstore_read_options *opt,
                         capstore_read_cost *cost, char *msg, size_t msg_size) {
  uint32_t inflight = opt->inflight_max == 0 ? READ_INFLIGHT_DEFAULT : opt->inflight_max;
  if (r->store.in_flight_max > 0 && inflight > r->store.in_flight_max) inflight = r->store.in_flight_max;
  read_work w;
  pthread_t threads[RD_WORKERS];
  uint32_t started = 0;
  int rc = work_open(&w, r, job, opt->verify_sha256, inflight + RD_WORKERS, threads, &started);
  if (rc != CS_E_OK) {
    work_close(&w, r, threads, started, false);
    return rt_refuse(rc, msg, msg_size, "read: out of memory or threads for its workers");
  }
  fetch f = {.r = r, .work = &w, .cost = cost};
  rc = cs_read_exec_init(&f.exec, &job->plan, inflight);
  assert(rc == CS_E_OK);
  uint64_t budget = (uint64_t)opt->request_limit - job->plan.requests; /* the plan fits the limit */
  cs_read_exec_retries(&f.exec, opt->retry_max, budget);
  rc = fetch_all(&f);
  bool strand = rc < 0 && f.exec.inflight > 0;
  r->broken = strand;
  work_close(&w, r, threads, started, strand);
  /* A retry counted but not sent (the read failed during its backoff) is in issued only. */
  assert(f.exec.issued - f.exec.retries <= job->plan.requests && cost->requests <= f.exec.issued);
  if (w.err != CS_E_OK) return rt_refuse(w.err, msg, msg_size, "%s", w.msg);
  if (f.err != CS_E_OK) return rt_refuse(f.err, msg, msg_size, "%s", f.msg);
  assert(w.packs_verified == job->pack_count);
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

static int read_locked(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                       capstore_payloads *out, char *msg, size_t msg_size);

int capstore_read(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                  capstore_payloads *out, char *msg, size_t msg_size) {
  if (r == NULL || sel == NULL || opt == NULL || out == NULL)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "reader, selection, options and out must be given");
  memset(out, 0, sizeof *out);
  /* The store, the kept span buffers and the slots serve one read at a time: another thread's read waits. */
  pthread_mutex_lock(&r->lock);
  int rc = read_locked(r, sel, opt, out, msg, msg_size);
  pthread_mutex_unlock(&r->lock);
  return rc;
}

static int read_locked(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                       capstore_payloads *out, char *msg, size_t msg_size) {
  if (r->broken)
    return rt_refuse(CS_E_STATE, msg, msg_size, "this reader's store failed with reads in flight: open a new reader");
  read_job *job = calloc(1, sizeof *job);
  if (job == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
  job->sel = sel;
  job->spare = spare_hold(r->spare);
  int rc = job_plan(job, opt, &out->cost, msg, msg_size);
  if (rc == CS_E_OK) rc = job_layout(job, msg, msg_size);
  if (rc == CS_E_OK) rc = read_verified(r, job, opt, &out->cost, msg, msg_size);
  if (rc == CS_E_OK) {
    out->bytes = calloc(sel->count + 1, sizeof *out->bytes);
    out->length = calloc(sel->count + 1, sizeof *out->length);
    if (out->bytes == NULL || out->length == NULL) rc = rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "read: out of memory");
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
    out->bytes[i] = job->arena + job->row_at[i];
    out->length[i] = sel->rows[i].d.record.stored_length;
  }
  out->count = sel->count;
  out->storage_ = job;
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

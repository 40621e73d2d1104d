/*
 * The service runtime's lanes: threads that carry out blocking primitives
 * for the driver, one job at a time, each with its own adapter handles. A
 * lane maps one action to one adapter call and reports the classified
 * outcome; it never retries and decides nothing (rs_internal.h).
 */
#include "rs_internal.h"
#include "thread_name.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- queues ---------------------------------------------------------------------- */

void rs_lane_push(rs_lane *lane, rs_job *job) {
  assert(lane != NULL && job != NULL && job->busy);
  pthread_mutex_lock(&lane->mutex);
  job->next = NULL;
  if (lane->tail != NULL) lane->tail->next = job;
  else lane->head = job;
  lane->tail = job;
  lane->count++;
  if (lane->count > atomic_load(&lane->queue_peak)) atomic_store(&lane->queue_peak, lane->count);
  pthread_cond_signal(&lane->cond);
  pthread_mutex_unlock(&lane->mutex);
  if (lane->store_open && lane->run == NULL) cs_store_wakeup(&lane->store); /* the store lane may wait in reap */
}

/* Takes the next job; blocks while none and wait; NULL once stopped and empty (or none and !wait). */
static rs_job *lane_take(rs_lane *lane, bool wait) {
  pthread_mutex_lock(&lane->mutex);
  while (lane->head == NULL && !lane->stop && wait) pthread_cond_wait(&lane->cond, &lane->mutex);
  rs_job *job = lane->head;
  if (job != NULL) {
    lane->head = job->next;
    if (lane->head == NULL) lane->tail = NULL;
    lane->count--;
    job->next = NULL;
  }
  pthread_mutex_unlock(&lane->mutex);
  return job;
}

static bool lane_stopped(rs_lane *lane) {
  pthread_mutex_lock(&lane->mutex);
  bool stop = lane->stop && lane->head == NULL;
  pthread_mutex_unlock(&lane->mutex);
  return stop;
}

static void job_done(rs_runtime *rt, rs_job *job) {
  rs_msg msg = {.kind = RS_MSG_DONE, .job = job};
  rs_inbox_post(rt, &msg);
}

/* "cs-store", "cs-catalog", "cs-lease", "cs-spool". */
static void name_lane(const rs_lane *lane) {
  char name[16];
  snprintf(name, sizeof name, "cs-%s", lane->name);
  rt_thread_name(name);
}

static void *lane_main(void *context) {
  rs_lane *lane = context;
  name_lane(lane);
  for (;;) {
    rs_job *job = lane_take(lane, true);
    if (job == NULL) return NULL;
    lane->run(lane->rt, lane, job);
    job_done(lane->rt, job);
  }
}

/* ---- opening handles ------------------------------------------------------------------ */

int rs_store_open(rs_runtime *rt, cs_store *out, char *msg, size_t msg_size) {
  const capstore_config *cfg = &rt->cfg;
  if (cfg->store_dir != NULL) {
    int rc = cs_dirstore_open(cfg->store_dir, out);
    if (rc != CS_E_OK) snprintf(msg, msg_size, "store_dir %s: cannot open (%s)", cfg->store_dir, cs_strerror(rc));
    return rc;
  }
  cs_s3_config s3 = {.endpoint = cfg->s3_endpoint, .bucket = cfg->s3_bucket, .region = rt->s3_region,
                     .access_key_id = rt->s3_key_id, .secret_access_key = rt->s3_secret,
                     .session_token = rt->s3_token, .allow_insecure = cfg->s3_allow_insecure,
                     .request_timeout_ms = (uint32_t)(cfg->service.request_timeout_ns / CS_MS_NS),
                     .max_connections = cfg->s3_max_connections != 0 ? cfg->s3_max_connections
                                                                     : cfg->service.store_inflight_max};
  return cs_s3_open(&s3, out, msg, msg_size);
}

int rs_catalog_open(rs_runtime *rt, cs_catalog *out, char *msg, size_t msg_size) {
  const capstore_config *cfg = &rt->cfg;
  if (cfg->sqlite_path != NULL) {
    int rc = cs_sqlite_catalog_open(cfg->sqlite_path, 0, out);
    if (rc != CS_E_OK) snprintf(msg, msg_size, "sqlite_path %s: cannot open (%s)", cfg->sqlite_path, cs_strerror(rc));
    return rc;
  }
  uint64_t timeout = cfg->catalog_timeout_ns != 0 ? cfg->catalog_timeout_ns : cfg->service.request_timeout_ns;
  char url[2048];
  int n = snprintf(url, sizeof url, "%s", cfg->clickhouse_url);
  if (cfg->clickhouse_database != NULL) /* validated: [A-Za-z0-9_]{1,64} */
    n = snprintf(url, sizeof url, "%s%sdatabase=%s", cfg->clickhouse_url, strchr(cfg->clickhouse_url, '?') ? "&" : "?",
                 cfg->clickhouse_database);
  if (n < 0 || (size_t)n >= sizeof url) {
    snprintf(msg, msg_size, "clickhouse_url is longer than %zu bytes", sizeof url - 1);
    return CS_E_CONFIG;
  }
  cs_clickhouse_config ch = {.url = url,
                             .user = cfg->clickhouse_user != NULL ? cfg->clickhouse_user : "default",
                             .password = cfg->clickhouse_password != NULL ? cfg->clickhouse_password : "",
                             .table_prefix = rt->name,
                             .holder = rt->holder,
                             .connect_timeout_ns = cfg->catalog_connect_timeout_ns,
                             .request_timeout_ns = timeout,
                             .allow_insecure = cfg->clickhouse_allow_insecure,
                             .cluster = cfg->clickhouse_cluster,
                             .insert_quorum = cfg->clickhouse_insert_quorum,
                             .insert_quorum_timeout_ns = cfg->clickhouse_insert_quorum_timeout_ns};
  char why[200];
  if (cs_clickhouse_config_validate(&ch, why, sizeof why) != CS_E_OK) {
    snprintf(msg, msg_size, "%s", why);
    return CS_E_CONFIG;
  }
  int rc = cs_clickhouse_open(&ch, out);
  if (rc != CS_E_OK) snprintf(msg, msg_size, "clickhouse_url: cannot open the catalog (%s)", cs_strerror(rc));
  return rc;
}

/* ---- pack footers -------------------------------------------------------------------- */

static int pread_all(int fd, void *buf, size_t len, uint64_t offset) {
  uint8_t *at = buf;
  while (len > 0) {
    ssize_t n = pread(fd, at, len, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return CS_E_IO;
    at += n;
    len -= (size_t)n;
    offset += (uint64_t)n;
  }
  return CS_E_OK;
}

/* Where a footer's bytes come from: a local file or the store; read answers CS_E_OK or CS_E_IO (why set). */
typedef struct footer_source {
  int (*read)(struct footer_source *src, void *buf, size_t len, uint64_t offset, const char *what);
  int fd;                  /* the local pack */
  cs_store *store;         /* or the object ... */
  const char *key;
  cs_outcome outcome;      /* ... and how the store answered */
  char why[160];
} footer_source;

static int read_fd(footer_source *src, void *buf, size_t len, uint64_t offset, const char *what) {
  if (pread_all(src->fd, buf, len, offset) == CS_E_OK) return CS_E_OK;
  snprintf(src->why, sizeof src->why, "reading the %s: %s", what, strerror(errno));
  return CS_E_IO;
}

/* One ranged GET; a short answer is refused (CS_OUT_INVALID), never parsed. */
static int read_store(footer_source *src, void *buf, size_t len, uint64_t offset, const char *what) {
  cs_store_result res = {0};
  size_t got = 0;
  cs_range range = {.offset = offset, .length = len};
  int rc = src->store->ops->get(src->store->self, src->key, &range, buf, len, &got, &res);
  if (rc == CS_E_OK && res.outcome == CS_OUT_OK && got != len) res.outcome = CS_OUT_INVALID;
  src->outcome = rc != CS_E_OK ? CS_OUT_INVALID : res.outcome;
  if (src->outcome == CS_OUT_OK) return CS_E_OK;
  snprintf(src->why, sizeof src->why, "GET %s: %.100s", what, res.detail);
  return CS_E_IO;
}

/* Trailer then footer of a pack of size bytes: CS_E_IO (read), CS_E_CORRUPT (parse), CS_E_NO_MEMORY. */
static int footer_read(footer_source *src, uint64_t size, cs_pack_footer *footer, uint64_t *footer_len, char *msg,
                       size_t msg_size) {
  uint8_t tail[CS_PACK_TRAILER_SIZE];
  cs_pack_trailer trailer;
  cs_pack_error err;
  if (size < CS_PACK_TRAILER_SIZE) {
    snprintf(msg, msg_size, "a pack of %llu bytes has no trailer", (unsigned long long)size);
    return CS_E_CORRUPT;
  }
  if (src->read(src, tail, sizeof tail, size - CS_PACK_TRAILER_SIZE, "trailer") != CS_E_OK) {
    snprintf(msg, msg_size, "%s", src->why);
    return CS_E_IO;
  }
  if (cs_pack_trailer_parse(tail, size, &trailer, &err) != CS_E_OK) {
    snprintf(msg, msg_size, "trailer: %.120s", err.message);
    return CS_E_CORRUPT;
  }
  uint8_t *bytes = malloc(trailer.footer_length + 1);
  if (bytes == NULL) {
    snprintf(msg, msg_size, "no memory for a footer of %llu bytes", (unsigned long long)trailer.footer_length);
    return CS_E_NO_MEMORY;
  }
  int rc = src->read(src, bytes, trailer.footer_length, trailer.footer_offset, "footer");
  if (rc != CS_E_OK) snprintf(msg, msg_size, "%s", src->why);
  if (rc == CS_E_OK) {
    int parsed = cs_pack_footer_parse(&trailer, bytes, trailer.footer_length, footer, &err);
    if (parsed != CS_E_OK) snprintf(msg, msg_size, "footer: %.120s", err.message);
    /* Short of memory is the process's state, not the pack's: retried, never set aside. */
    if (parsed != CS_E_OK && cs_pack_error_is_verdict(err.kind)) rc = CS_E_CORRUPT;
    else if (parsed != CS_E_OK) rc = err.kind == CS_PACK_E_NO_MEMORY ? CS_E_NO_MEMORY : CS_E_IO;
  }
  free(bytes);
  if (footer_len != NULL) *footer_len = trailer.footer_length;
  return rc;
}

int rs_footer_read_fd(int fd, uint64_t size, cs_pack_footer *footer, uint64_t *footer_len, char *msg,
                      size_t msg_size) {
  footer_source src = {.read = read_fd, .fd = fd};
  return footer_read(&src, size, footer, footer_len, msg, msg_size);
}

/* Trailer and footer of an object in the store (two ranged GETs); outcome says how the store answered. */
static int footer_from_store(cs_store *store, const cs_pack_ref *ref, cs_pack_footer *footer, cs_outcome *outcome,
                             char *msg, size_t msg_size) {
  footer_source src = {.read = read_store, .store = store, .key = ref->key, .outcome = CS_OUT_OK};
  int rc = footer_read(&src, ref->size_bytes, footer, NULL, msg, msg_size);
  *outcome = rc == CS_E_OK ? CS_OUT_OK : rc == CS_E_IO ? src.outcome : CS_OUT_INVALID;
  return rc;
}

/* The key of a pack under the runtime's prefix. */
static int ref_key(rs_runtime *rt, const cs_pack_key_fields *fields, cs_pack_ref *ref, char *msg, size_t msg_size) {
  char key[CS_KEY_MAX];
  size_t key_len = 0;
  cs_pack_error err;
  if (cs_pack_object_key(rt->key_prefix, strlen(rt->key_prefix), fields, key, &key_len, &err) != CS_E_OK) {
    snprintf(msg, msg_size, "object key: %.200s", err.message);
    return CS_E_TOO_LARGE;
  }
  return cs_pack_ref_set_key(ref, key, key_len);
}

/*
 * A pack's index_bytes: its footer's length. The descriptor rows travel in a
 * bulk format of about the footer's size, and a footer is at most 64 MiB,
 * so with the default batch budget (64 MiB) every pack fits alone.
 */
static void ref_fill(cs_pack_ref *ref, const cs_spool_entry *entry, uint64_t footer_len) {
  ref->pack_id = entry->pack_id;
  ref->created_at_ns = entry->created_at_ns;
  ref->size_bytes = entry->size_bytes;
  ref->index_bytes = footer_len;
  ref->record_count = entry->record_count;
  memcpy(ref->sha256, entry->sha256, sizeof ref->sha256);
}

int rs_ref_from_seal(rs_runtime *rt, const cs_spool_entry *entry, const cs_pack_summary *summary,
                     const cs_pack_key_fields *fields, cs_pack_ref *ref) {
  memset(ref, 0, sizeof *ref);
  ref_fill(ref, entry, summary->footer_length);
  char msg[64];
  return ref_key(rt, fields, ref, msg, sizeof msg);
}

int rs_ref_from_spool(rs_runtime *rt, const cs_spool_entry *entry, cs_pack_ref *ref, char *msg, size_t msg_size) {
  int fd = -1;
  cs_spool_entry found;
  int rc = cs_capture_open_pack(rs_capture(rt), &entry->pack_id, &fd, &found);
  if (rc != CS_E_OK) {
    snprintf(msg, msg_size, "opening %s: %s", entry->name, cs_strerror(rc));
    return rc;
  }
  cs_pack_footer footer;
  uint64_t footer_len = 0;
  rc = rs_footer_read_fd(fd, found.size_bytes, &footer, &footer_len, msg, msg_size);
  close(fd);
  if (rc != CS_E_OK) return rc;
  return rs_ref_from_footer(rt, &found, &footer, footer_len, ref, msg, msg_size);
}

int rs_ref_from_footer(rs_runtime *rt, const cs_spool_entry *found, cs_pack_footer *footer, uint64_t footer_len,
                       cs_pack_ref *ref, char *msg, size_t msg_size) {
  int rc;
  cs_pack_key_fields fields;
  cs_pack_error err;
  memset(ref, 0, sizeof *ref);
  ref_fill(ref, found, footer_len);
  rc = cs_pack_footer_key_fields(footer, &fields, &err);
  if (rc != CS_E_OK) snprintf(msg, msg_size, "key fields: %.200s", err.message);
  if (rc == CS_E_OK) rc = ref_key(rt, &fields, ref, msg, msg_size);
  if (rc == CS_E_OK) rs_footer_put(rt, &ref->pack_id, footer, footer_len); /* its INDEX need not parse it again */
  cs_pack_footer_free(footer);
  return rc;
}

/* ---- the catalog and lease lanes ---------------------------------------------------------- */

/*
 * Creates the tables before the first primitive (a catalog down at open is not an error). Once one lane
 * made them, the other lanes skip it: over a WAN each CREATE is a round trip.
 */
static bool schema_ready(rs_lane *lane, rs_job *job) {
  if (lane->schema_ready || atomic_load(&lane->rt->schema_made)) return lane->schema_ready = true;
  cs_catalog_result res = {0};
  int rc = lane->catalog.ops->schema_ensure(lane->catalog.self, &res);
  if (rc == CS_E_OK && res.outcome == CS_OUT_OK) {
    atomic_store(&lane->rt->schema_made, true);
    return lane->schema_ready = true;
  }
  job->outcome = rc != CS_E_OK ? CS_OUT_INVALID : res.outcome;
  snprintf(job->detail, sizeof job->detail, "creating the tables: %.160s", res.detail);
  /* Nothing of the primitive was sent: an outage here reads as one. */
  if (job->outcome == CS_OUT_UNKNOWN || job->outcome == CS_OUT_TIMEOUT) job->outcome = CS_OUT_REFUSED;
  return false;
}

static void catalog_answer(rs_job *job, int rc, const cs_catalog_result *res) {
  job->outcome = rc != CS_E_OK ? CS_OUT_INVALID : res->outcome;
  if (job->outcome != CS_OUT_OK) {
    snprintf(job->detail, sizeof job->detail, "%s: %.170s", cs_op_name(job->act.op),
             rc != CS_E_OK ? cs_strerror(rc) : res->detail);
  }
}

static void run_lease(rs_runtime *rt, rs_lane *lane, rs_job *job) {
  const cs_action *a = &job->act;
  cs_catalog_result res = {0};
  void *self = lane->catalog.self;
  const cs_catalog_ops *ops = lane->catalog.ops;
  if (!schema_ready(lane, job)) return;
  atomic_fetch_add(&rt->catalog_requests, 1);
  int rc = CS_E_INVALID_ARGUMENT;
  switch (a->op) {
  case CS_OP_CAT_HEAD: rc = ops->head(self, &a->lease_id, &job->cat_head, &res); break;
  case CS_OP_CAT_CLAIM: rc = ops->claim(self, &a->lease_id, a->term, rt->cfg.service.lease_ttl_ns, &res); break;
  case CS_OP_CAT_READ_CLAIMS: rc = ops->read_claims(self, &a->lease_id, a->term, &job->claims, &res); break;
  case CS_OP_CAT_RELEASE: rc = ops->release(self, &a->lease_id, a->term, rt->cfg.fence_margin_ns, &res); break;
  default: assert(!"not a lease op");
  }
  catalog_answer(job, rc, &res);
}

/* INDEX: each pack's footer (from the spool, else from the store), then one adapter call. */
static void run_index(rs_runtime *rt, rs_lane *lane, rs_job *job) {
  const cs_action *a = &job->act;
  uint32_t n = a->count;
  cs_pack_footer *footers = calloc(n, sizeof *footers);
  cs_index_pack *packs = calloc(n, sizeof *packs);
  uint32_t parsed = 0;
  job->outcome = CS_OUT_OK;
  if (footers == NULL || packs == NULL) {
    job->outcome = CS_OUT_SERVER_ERROR; /* not the pack's fault: retried */
    snprintf(job->detail, sizeof job->detail, "INDEX: no memory for %u footers", n);
  }
  for (uint32_t i = 0; i < n && job->outcome == CS_OUT_OK; i++, parsed++) {
    const cs_pack_ref *ref = a->packs[i];
    int fd = -1;
    int rc;
    char msg[160] = "";
    if (rs_footer_take(rt, &ref->pack_id, &footers[i]) == CS_E_OK) {
      rc = CS_E_OK; /* parsed while it uploaded */
    } else if (cs_capture_open_pack(rs_capture(rt), &ref->pack_id, &fd, NULL) == CS_E_OK) {
      rc = rs_footer_read_fd(fd, ref->size_bytes, &footers[i], NULL, msg, sizeof msg);
      close(fd);
      if (rc == CS_E_IO || rc == CS_E_NO_MEMORY) job->outcome = CS_OUT_SERVER_ERROR;
      else if (rc != CS_E_OK) job->outcome = CS_OUT_INVALID;
    } else {
      rc = footer_from_store(&lane->store, ref, &footers[i], &job->outcome, msg, sizeof msg);
      if (rc == CS_E_NO_MEMORY) job->outcome = CS_OUT_SERVER_ERROR;
    }
    if (rc != CS_E_OK) {
      atomic_fetch_add(&rt->footer_errors, 1);
      snprintf(job->detail, sizeof job->detail, "INDEX %.60s: %.120s", ref->key, msg);
      break;
    }
    packs[i] = (cs_index_pack){.ref = ref, .records = footers[i].records, .record_count = footers[i].record_count};
    job->sent_bytes += footers[i].record_count;
  }
  if (job->outcome == CS_OUT_OK) {
    cs_catalog_result res = {0};
    atomic_fetch_add(&rt->catalog_requests, 1);
    int rc = lane->catalog.ops->index(lane->catalog.self, &a->lease_id, rt->cfg.fence_margin_ns, a->version, packs,
                                      n, &res);
    catalog_answer(job, rc, &res);
  }
  /* A failed INDEX is retried: its footers go back to the cache so the retry need not parse them again. */
  for (uint32_t i = 0; i < parsed; i++) {
    if (job->outcome != CS_OUT_OK && packs[i].ref != NULL)
      rs_footer_put(rt, &packs[i].ref->pack_id, &footers[i], packs[i].ref->index_bytes); /* a local pack's: its footer's length */
    cs_pack_footer_free(&footers[i]);
  }
  free(footers);
  free(packs);
}

static void run_catalog(rs_runtime *rt, rs_lane *lane, rs_job *job) {
  const cs_action *a = &job->act;
  if (!schema_ready(lane, job)) return;
  if (a->op == CS_OP_CAT_INDEX) {
    run_index(rt, lane, job);
    return;
  }
  cs_catalog_result res = {0};
  void *self = lane->catalog.self;
  const cs_catalog_ops *ops = lane->catalog.ops;
  atomic_fetch_add(&rt->catalog_requests, 1);
  int rc = CS_E_INVALID_ARGUMENT;
  switch (a->op) {
  case CS_OP_CAT_PUBLISH:
    rc = ops->publish(self, &a->lease_id, rt->cfg.fence_margin_ns, a->version, a->term, a->count, &res);
    break;
  case CS_OP_CAT_COMMITTED:
    assert(a->count <= rt->bools_per_job);
    rc = ops->committed(self, a->ids, a->count, job->held, job->rejected, &res);
    break;
  case CS_OP_CAT_REJECT: rc = ops->reject(self, &a->lease_id, rt->cfg.fence_margin_ns, a->ids, a->count, &res); break;
  case CS_OP_CAT_HEAD: /* a cycle's read-back (for_cycle) */
    assert(a->for_cycle);
    rc = ops->head(self, &a->lease_id, &job->cat_head, &res);
    break;
  default: assert(!"not a catalog op");
  }
  catalog_answer(job, rc, &res);
}

/* ---- the spool lane ------------------------------------------------------------------------ */

static void run_spool(rs_runtime *rt, rs_lane *lane, rs_job *job) {
  (void)lane;
  if (job->kind == RS_JOB_STEP || job->kind == RS_JOB_RECOVER) {
    rs_run_step(rt, job);
    return;
  }
  if (job->kind == RS_JOB_ARRIVALS) {
    rs_arrivals_scan(rt, job);
    return;
  }
  const cs_action *a = &job->act;
  char msg[160] = "";
  int rc = a->op == CS_OP_SPOOL_REMOVE
               ? cs_capture_remove_pack(rs_capture(rt), &a->pack->pack_id, msg, sizeof msg)
               : cs_capture_quarantine_pack(rs_capture(rt), &a->pack->pack_id, a->reason, msg, sizeof msg);
  job->outcome = rc == CS_E_OK ? CS_OUT_OK : rc == CS_E_NOT_FOUND ? CS_OUT_NOT_FOUND : CS_OUT_SERVER_ERROR;
  if (rc != CS_E_OK) snprintf(job->detail, sizeof job->detail, "%s: %.170s", cs_op_name(a->op), msg);
}

/* ---- the store lane --------------------------------------------------------------------------- */

static void put_release(rs_job *job) {
  if (job->map != NULL && job->map != MAP_FAILED) munmap(job->map, job->map_len);
  if (job->fd >= 0) close(job->fd);
  job->map = NULL;
  job->fd = -1;
}

/* Prepares job's store request; false when it was answered without one (outcome set). */
static bool store_prepare(rs_runtime *rt, rs_job *job) {
  const cs_action *a = &job->act;
  cs_store_request *req = &job->req;
  memset(req, 0, sizeof *req);
  req->id = (uint64_t)(uintptr_t)job;
  job->fd = -1;
  switch (a->op) {
  case CS_OP_STORE_PUT: {
    cs_spool_entry entry;
    if (cs_capture_open_pack(rs_capture(rt), &a->pack->pack_id, &job->fd, &entry) != CS_E_OK) {
      job->outcome = CS_OUT_NOT_FOUND; /* the pack left the spool */
      snprintf(job->detail, sizeof job->detail, "PUT: %.60s is not in the spool", a->pack->key);
      return false;
    }
    job->map_len = entry.size_bytes;
    job->map = mmap(NULL, job->map_len, PROT_READ, MAP_SHARED, job->fd, 0);
    if (job->map == MAP_FAILED || entry.size_bytes != a->pack->size_bytes) {
      snprintf(job->detail, sizeof job->detail, "PUT: mapping %.60s: %s", a->pack->key, strerror(errno));
      put_release(job);
      job->outcome = CS_OUT_SERVER_ERROR;
      return false;
    }
    job->meta = (cs_object_info){.is_pack = true, .size_bytes = a->pack->size_bytes, .pack_id = a->pack->pack_id,
                                 .record_count = a->pack->record_count, .created_at_ns = a->pack->created_at_ns};
    memcpy(job->meta.sha256, a->pack->sha256, sizeof job->meta.sha256);
    *req = (cs_store_request){.op = CS_STORE_PUT, .id = req->id, .key = a->pack->key, .bytes = job->map,
                              .len = job->map_len, .meta = &job->meta};
    return true;
  }
  case CS_OP_STORE_HEAD: req->op = CS_STORE_HEAD; req->key = a->pack->key; return true;
  case CS_OP_STORE_LIST: {
    cs_list_page *page = calloc(1, sizeof *page);
    if (page == NULL) {
      job->outcome = CS_OUT_SERVER_ERROR;
      return false;
    }
    page->keys = rt->list_keys + (size_t)job->list_slot * rt->cfg.service.list_page_max;
    page->key_capacity = rt->cfg.service.list_page_max;
    *req = (cs_store_request){.op = CS_STORE_LIST, .id = req->id, .key = rt->key_prefix, .token = a->token,
                              .max_keys = a->count != 0 ? a->count : rt->cfg.service.list_page_max, .page = page};
    if (req->max_keys > page->key_capacity) req->max_keys = page->key_capacity;
    return true;
  }
  default: assert(!"not a store op");
  }
  return false;
}

/* index_bytes of a pack found by HEAD: at most its size and the format's footer bound. */
static uint64_t head_index_bytes(uint64_t size) {
  return size < CS_PACK_FOOTER_BYTES_MAX ? size : CS_PACK_FOOTER_BYTES_MAX;
}

static void store_finish(rs_runtime *rt, rs_job *job) {
  cs_store_request *req = &job->req;
  job->outcome = req->rc != CS_E_OK ? CS_OUT_INVALID : req->res.outcome;
  if (job->outcome != CS_OUT_OK) {
    snprintf(job->detail, sizeof job->detail, "%s %.60s: %.100s", cs_op_name(job->act.op),
             req->key != NULL ? req->key : "", req->rc != CS_E_OK ? cs_strerror(req->rc) : req->res.detail);
  }
  switch (job->act.op) {
  case CS_OP_STORE_PUT:
    if (job->outcome == CS_OUT_OK) atomic_fetch_add(&rt->bytes_uploaded, job->map_len);
    put_release(job);
    break;
  case CS_OP_STORE_HEAD: {
    const cs_object_info *info = &req->info;
    job->head = (cs_head_info){.is_pack = info->is_pack, .size_bytes = info->size_bytes,
                               .index_bytes = head_index_bytes(info->size_bytes),
                               .record_count = info->record_count, .created_at_ns = info->created_at_ns,
                               .pack_id = info->pack_id};
    memcpy(job->head.sha256, info->sha256, sizeof job->head.sha256);
    break;
  }
  case CS_OP_STORE_LIST: {
    cs_list_page *page = req->page;
    job->key_count = job->outcome == CS_OUT_OK ? page->key_count : 0;
    for (uint32_t i = 0; i < job->key_count; i++) job->keys[i] = page->keys[i];
    snprintf(job->next_token, sizeof job->next_token, "%s", page->next_token);
    free(page);
    req->page = NULL;
    break;
  }
  default: break;
  }
}

/* The store lane: starts what is queued (up to the store's bound), reaps what finished. */
static void *store_main(void *context) {
  rs_lane *lane = context;
  name_lane(lane);
  rs_runtime *rt = lane->rt;
  rs_job *waiting = NULL; /* refused with CS_E_FULL: started after the next reap */
  uint32_t in_flight = 0;
  for (;;) {
    bool prepared = waiting != NULL; /* a job refused with CS_E_FULL keeps what it prepared */
    rs_job *job = waiting != NULL ? waiting : lane_take(lane, in_flight == 0);
    waiting = NULL;
    if (job != NULL) {
      if (!prepared && !store_prepare(rt, job)) {
        job_done(rt, job);
        continue;
      }
      if (!prepared) atomic_fetch_add(&rt->store_requests, 1);
      int rc = cs_store_start(&lane->store, &job->req);
      if (rc == CS_E_FULL) {
        waiting = job;
      } else if (rc != CS_E_OK) {
        job->req.rc = rc;
        store_finish(rt, job);
        job_done(rt, job);
        continue;
      } else {
        in_flight++;
        continue;
      }
    }
    if (in_flight == 0) {
      if (waiting == NULL && lane_stopped(lane)) return NULL;
      continue;
    }
    cs_store_request *done = NULL;
    int got = cs_store_reap(&lane->store, 1000, &done);
    if (got == 1) {
      in_flight--;
      rs_job *finished = (rs_job *)(uintptr_t)done->id;
      store_finish(rt, finished);
      job_done(rt, finished);
    }
  }
}

/* ---- starting and stopping ---------------------------------------------------------------------- */

rs_lane *rs_lane_of(rs_runtime *rt, const cs_action *act) {
  if (act->for_cycle) return &rt->catalog_lane; /* a cycle's read-back never waits behind a lease step */
  switch (act->op) {
  case CS_OP_STORE_PUT:
  case CS_OP_STORE_HEAD:
  case CS_OP_STORE_LIST: return &rt->store_lane;
  case CS_OP_CAT_HEAD:
  case CS_OP_CAT_CLAIM:
  case CS_OP_CAT_READ_CLAIMS:
  case CS_OP_CAT_RELEASE: return &rt->lease_lane;
  case CS_OP_CAT_INDEX:
  case CS_OP_CAT_PUBLISH:
  case CS_OP_CAT_COMMITTED:
  case CS_OP_CAT_REJECT: return &rt->catalog_lane;
  case CS_OP_SPOOL_REMOVE:
  case CS_OP_SPOOL_QUARANTINE: return &rt->spool_lane;
  default: return NULL;
  }
}

static int lane_init(rs_runtime *rt, rs_lane *lane, const char *name,
                     void (*run)(rs_runtime *, rs_lane *, rs_job *)) {
  lane->name = name;
  lane->rt = rt;
  lane->run = run;
  if (pthread_mutex_init(&lane->mutex, NULL) != 0) return CS_E_NO_MEMORY;
  if (pthread_cond_init(&lane->cond, NULL) != 0) return CS_E_NO_MEMORY;
  return CS_E_OK;
}

static int lane_start(rs_lane *lane, void *(*main_fn)(void *), char *msg, size_t msg_size) {
  if (pthread_create(&lane->thread, NULL, main_fn, lane) != 0) {
    snprintf(msg, msg_size, "cannot start the %s lane's thread", lane->name);
    return CS_E_NO_MEMORY;
  }
  lane->started = true;
  return CS_E_OK;
}

int rs_lanes_start(rs_runtime *rt, char *msg, size_t msg_size) {
  int rc = lane_init(rt, &rt->store_lane, "store", NULL);
  if (rc == CS_E_OK) rc = lane_init(rt, &rt->catalog_lane, "catalog", run_catalog);
  if (rc == CS_E_OK) rc = lane_init(rt, &rt->lease_lane, "lease", run_lease);
  if (rc == CS_E_OK) rc = lane_init(rt, &rt->spool_lane, "spool", run_spool);
  if (rc != CS_E_OK) {
    snprintf(msg, msg_size, "lane initialisation failed");
    return rc;
  }
  /* Handles: the store lane's store, the catalog lane's catalog and store (footers), the lease lane's catalog. */
  rc = rs_store_open(rt, &rt->store_lane.store, msg, msg_size);
  rt->store_lane.store_open = rc == CS_E_OK;
  if (rc == CS_E_OK) rc = rs_store_open(rt, &rt->catalog_lane.store, msg, msg_size);
  rt->catalog_lane.store_open = rc == CS_E_OK;
  if (rc == CS_E_OK) rc = rs_catalog_open(rt, &rt->catalog_lane.catalog, msg, msg_size);
  rt->catalog_lane.catalog_open = rc == CS_E_OK;
  if (rc == CS_E_OK) rc = rs_catalog_open(rt, &rt->lease_lane.catalog, msg, msg_size);
  rt->lease_lane.catalog_open = rc == CS_E_OK;
  if (rc != CS_E_OK) return rc;
  rc = lane_start(&rt->store_lane, store_main, msg, msg_size);
  if (rc == CS_E_OK) rc = lane_start(&rt->catalog_lane, lane_main, msg, msg_size);
  if (rc == CS_E_OK) rc = lane_start(&rt->lease_lane, lane_main, msg, msg_size);
  if (rc == CS_E_OK) rc = lane_start(&rt->spool_lane, lane_main, msg, msg_size);
  return rc;
}

static void lane_stop(rs_lane *lane) {
  if (lane->rt == NULL) return;
  pthread_mutex_lock(&lane->mutex);
  lane->stop = true;
  pthread_cond_broadcast(&lane->cond);
  pthread_mutex_unlock(&lane->mutex);
  if (lane->store_open) cs_store_wakeup(&lane->store);
  if (lane->started) pthread_join(lane->thread, NULL);
  lane->started = false;
  if (lane->store_open) cs_store_close(&lane->store);
  if (lane->catalog_open) lane->catalog.ops->close(lane->catalog.self);
  lane->store_open = lane->catalog_open = false;
  pthread_mutex_destroy(&lane->mutex);
  pthread_cond_destroy(&lane->cond);
  lane->rt = NULL;
}

void rs_lanes_stop(rs_runtime *rt) {
  lane_stop(&rt->spool_lane);
  lane_stop(&rt->store_lane);
  lane_stop(&rt->catalog_lane);
  lane_stop(&rt->lease_lane);
}

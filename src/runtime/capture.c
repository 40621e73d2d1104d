/*
 * The capture sink's public face: configuration, open, the capture calls
 * (the model's hot path), flush, close, removal and statistics. The worker
 * (worker.c) does the packing and sealing.
 *
 * The hot path holds the mutex only to admit the record to the sink core,
 * move the core's actions to the control queue and reserve staging room;
 * the copy happens outside the lock, and the worker is woken only when it
 * sleeps.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "runtime_internal.h"

#define MIB (UINT64_C(1) << 20)
#define SPOOL_RETRY_NS (10 * CS_MS_NS) /* re-check quota at least this often while blocked */

/* ---- Small helpers ---- */

int rt_refuse(int code, char *msg, size_t msg_size, const char *format, ...) {
  if (msg != NULL && msg_size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(msg, msg_size, format, args);
    va_end(args);
  }
  return code;
}

static void msg_clear(char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
}

uint64_t cs_capture_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * CS_SEC_NS + (uint64_t)ts.tv_nsec;
}

uint64_t rt_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * CS_SEC_NS + (uint64_t)ts.tv_nsec;
}

void rt_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t deadline_ns) {
  if (deadline_ns == CS_NEVER) {
    pthread_cond_wait(cond, mutex);
    return;
  }
  struct timespec ts = {.tv_sec = (time_t)(deadline_ns / CS_SEC_NS),
                        .tv_nsec = (long)(deadline_ns % CS_SEC_NS)};
  int rc = pthread_cond_timedwait(cond, mutex, &ts);
  assert(rc == 0 || rc == ETIMEDOUT);
  (void)rc;
}

void rt_wake_worker(cs_capture *cap) {
  if (atomic_load(&cap->worker_sleep) != RT_AWAKE) pthread_cond_signal(&cap->work_cond);
}

void rt_note_error(cs_capture *cap, int err, const char *msg) {
  assert(err < 0);
  if (err == CS_E_SPOOL_FULL && !cap->disk_full) {
    cap->disk_full = true;
    cap->disk_full_check_ns = cs_capture_clock_ns() + RT_DISK_FULL_CHECK_NS;
    /* Room for a pack ends it: the pack size limit, but no more than the file system could ever free. */
    uint64_t need = cap->cfg.sink.pack_bytes_max;
    if (need > 8u * 1024u * 1024u) need = 8u * 1024u * 1024u;
    cap->disk_full_need_bytes = need;
    snprintf(cap->disk_full_msg, sizeof cap->disk_full_msg, "%s", msg);
  }
  if (cap->pending_err != CS_E_OK) return;
  cap->pending_err = err;
  snprintf(cap->pending_msg, sizeof cap->pending_msg, "%s", msg);
}

bool rt_disk_full(cs_capture *cap, uint64_t now_ns) {
  if (!cap->disk_full || now_ns < cap->disk_full_check_ns) return cap->disk_full;
  cap->disk_full_check_ns = now_ns + RT_DISK_FULL_CHECK_NS;
  struct statvfs vfs;
  if (cap->spool_dir == NULL || statvfs(cap->spool_dir, &vfs) != 0) return true;
  /* Room for a pack, or a quarter of a small file system. */
  uint64_t need = cap->disk_full_need_bytes, quarter = (uint64_t)vfs.f_blocks * vfs.f_frsize / 4;
  if (quarter < need) need = quarter;
  if ((uint64_t)vfs.f_bavail * vfs.f_frsize >= need) {
    cap->disk_full = false;
    pthread_cond_signal(&cap->work_cond); /* the worker may be waiting for room */
  }
  return cap->disk_full;
}

void rt_drain_actions(cs_capture *cap, uint64_t record_pack_seq, uint64_t record_entry_seq) {
  cs_sink_action action;
  while (cs_sink_poll(&cap->sink, 0, &action)) {
    assert(cap->control_count < RT_CONTROL_MAX); /* bounded by the core's seal slots */
    /* A seal of the record's own pack runs after the record; any other before it. */
    bool after = action.op == CS_SINK_SEAL && action.pack_seq == record_pack_seq;
    uint32_t at = (cap->control_head + cap->control_count) % RT_CONTROL_MAX;
    cap->control[at].action = action;
    cap->control[at].position = after ? record_entry_seq + 1 : record_entry_seq;
    cap->control_count++;
  }
}

/* ---- Configuration ---- */

/* The CPUs this process may run on (its affinity mask: taskset, cpusets), else those online. */
static long usable_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return sysconf(_SC_NPROCESSORS_ONLN);
}

void cs_capture_config_default(cs_capture_config *cfg) {
  assert(cfg != NULL);
  memset(cfg, 0, sizeof *cfg);
  cs_sink_config_default(&cfg->sink);
  cfg->staging_bytes = 128 * MIB;
  cfg->record_bytes_max = 32 * MIB;
  cfg->device_copies_max = 64;
  cfg->recover_at_open = true;
  cfg->direct_io = true;
  cfg->hash_thread = usable_cpus() >= RT_HASH_THREAD_CPUS;
  cfg->demote_staging = cfg->hash_thread;
}

int cs_capture_config_validate(const cs_capture_config *cfg, char *msg, size_t msg_size) {
  if (cfg == NULL) return rt_refuse(CS_E_CONFIG, msg, msg_size, "config is NULL");
  char sink_msg[160];
  if (cs_sink_config_validate(&cfg->sink, sink_msg, sizeof sink_msg) != CS_E_OK) {
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "sink.%s", sink_msg);
  }
  if (cfg->staging_bytes < MIB) return rt_refuse(CS_E_CONFIG, msg, msg_size, "staging_bytes must be >= 1 MiB");
  if (cfg->staging_bytes > (UINT64_C(1) << 40)) {
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "staging_bytes must be <= 1 TiB");
  }
  if (cfg->record_bytes_max == 0) return rt_refuse(CS_E_CONFIG, msg, msg_size, "record_bytes_max must be > 0");
  if (cfg->record_bytes_max > cfg->staging_bytes / 4) {
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "record_bytes_max must be <= staging_bytes / 4");
  }
  if (cfg->record_bytes_max > cfg->sink.spool_bytes_max) {
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "record_bytes_max must be <= sink.spool_bytes_max");
  }
  if (cfg->device_copies_max > 65536) {
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "device_copies_max must be <= 65536");
  }
  msg_clear(msg, msg_size);
  return CS_E_OK;
}

/* ---- Open ---- */

/* The ring in pinned memory when the device path is on, else plain pages; touched now. */
/*
 * Memory every page of which is in place before the hot path touches it: an anonymous mapping populated by
 * the kernel (MAP_POPULATE: no guest page fault per 4 KiB page, as a memset of a fresh allocation takes), then
 * written once per page here. On this project's VMs (PVM, shadow paging) the first user-space write to each
 * page still traps to the hypervisor after MAP_POPULATE, so the write stays: without it that cost moved into
 * the first captures. NULL when the mapping fails. Released with populated_free and the same size.
 */
static void *populated_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  /* MAP_POPULATE is best effort (a memory cgroup at its limit), and a hypervisor may still trap a page's first
     write: one write per page takes either here, at open, not on the hot path. */
  for (size_t i = 0; i < bytes; i += 4096) ((volatile uint8_t *)p)[i] = 0;
  return p;
}

static void populated_free(void *p, size_t bytes) {
  if (p != NULL) munmap(p, bytes);
}

static int open_ring(cs_capture *cap, char *msg, size_t msg_size) {
  uint64_t capacity = cap->cfg.staging_bytes & ~(uint64_t)(RT_ALIGN - 1);
  void *base = NULL;
  if (cap->device_ok && rt_cuda_host_alloc((size_t)capacity, &base, NULL, 0) == CS_E_OK) {
    cap->ring_pinned = true;
  } else if ((base = populated_alloc((size_t)capacity)) == NULL) { /* every page in place: no fault on the hot path */
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "staging area of %llu bytes: allocation failed",
                  (unsigned long long)capacity);
  }
  cap->ring.base = base;
  cap->ring.capacity = capacity;
  return CS_E_OK;
}

/* The worker's write chunks (see RT_CHUNKS): aligned for direct I/O, touched now. */
static int open_chunks(cs_capture *cap, char *msg, size_t msg_size) {
  size_t bytes = (size_t)(cap->cfg.staging_bytes / 64) & ~(RT_CHUNK_ALIGN - 1);
  if (bytes < RT_CHUNK_BYTES_MIN) bytes = RT_CHUNK_BYTES_MIN;
  if (bytes > RT_CHUNK_BYTES_MAX) bytes = RT_CHUNK_BYTES_MAX;
  void *area = populated_alloc(bytes * RT_CHUNKS); /* page-aligned: RT_CHUNK_ALIGN is the page */
  if (area == NULL) {
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "write chunks of %zu bytes: allocation failed",
                  bytes * RT_CHUNKS);
  }
  cap->chunk_area = area;
  cap->chunk_bytes = bytes;
  for (uint32_t i = 0; i < RT_CHUNKS; i++) cap->chunks_free[i] = RT_CHUNKS - 1 - i;
  cap->chunks_free_count = RT_CHUNKS;
  return CS_E_OK;
}

/* Events for device copies; without a device the device path answers CS_E_UNSUPPORTED. */
static void open_device(cs_capture *cap) {
  if (cap->cfg.device_copies_max == 0) {
    snprintf(cap->device_msg, sizeof cap->device_msg, "the device path is off (device_copies_max is 0)");
    return;
  }
  if (rt_cuda_probe(cap->device_msg, sizeof cap->device_msg) != CS_E_OK) return;
  cap->events = calloc(cap->cfg.device_copies_max, sizeof *cap->events);
  if (cap->events == NULL) {
    snprintf(cap->device_msg, sizeof cap->device_msg, "device event table allocation failed");
    return;
  }
  for (uint32_t i = 0; i < cap->cfg.device_copies_max; i++) {
    if (rt_cuda_event_create(&cap->events[i], cap->device_msg, sizeof cap->device_msg) != CS_E_OK) break;
    cap->events_total++;
  }
  cap->events_free = cap->events_total;
  cap->device_ok = cap->events_total > 0;
}

/*
 * Opens the spool, recovers, and counts what is already there against the
 * quota. A pack recovery could not settle (unreadable, short of memory, or
 * corrupt with a failed rename) does not stop the sink: it stays where it
 * is, out of the listing, reported in stats.recovery (kept, problem), and
 * counts against the quota, since it still takes room on disk. Only a pass
 * that could not go through the directory refuses the open.
 */
static int open_spool(cs_capture *cap, const char *dir, char *msg, size_t msg_size) {
  cs_spool_options options = {.sys = cap->cfg.spool_sys, .create = true, .direct_io = cap->cfg.direct_io};
  int rc = cs_spool_open(dir, &options, &cap->spool, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (cap->cfg.recover_at_open) {
    rc = cs_spool_recover(cap->spool, &cap->stats.recovery);
    if (rc != CS_E_OK) {
      return rt_refuse(rc, msg, msg_size, "spool recovery: %.300s", cs_spool_last_error(cap->spool));
    }
    size_t kept = cs_spool_kept(cap->spool, NULL, 0);
    cs_spool_kept_pack *packs = kept > 0 ? calloc(kept, sizeof *packs) : NULL;
    if (kept > 0 && packs == NULL) {
      return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "kept pack listing allocation failed");
    }
    kept = cs_spool_kept(cap->spool, packs, kept);
    for (size_t i = 0; i < kept; i++) cs_sink_on_recovered(&cap->sink, packs[i].size_bytes);
    free(packs);
  }
  size_t count = 0;
  cs_spool_entry *entries = NULL;
  /* The index (what recovery checked, or the names at open without it): never a name linked in since. */
  rc = cs_spool_entries(cap->spool, NULL, 0, &count);
  if (rc == CS_E_OK && count > 0) {
    entries = calloc(count, sizeof *entries);
    if (entries == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "spool listing allocation failed");
    rc = cs_spool_entries(cap->spool, entries, count, &count);
  }
  if (rc != CS_E_OK) {
    free(entries);
    return rt_refuse(rc, msg, msg_size, "spool listing: %.300s", cs_spool_last_error(cap->spool));
  }
  for (size_t i = 0; i < count; i++) {
    cs_sink_on_recovered(&cap->sink, entries[i].size_bytes);
    cap->stats.recovered_packs++;
    cap->stats.recovered_bytes += entries[i].size_bytes;
  }
  free(entries);
  return CS_E_OK;
}

static int init_sync(cs_capture *cap) {
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr) != 0) return CS_E_NO_MEMORY;
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_mutex_init(&cap->mutex, NULL) | pthread_mutex_init(&cap->spool_mutex, NULL) |
           pthread_cond_init(&cap->work_cond, &attr) | pthread_cond_init(&cap->space_cond, &attr) |
           pthread_cond_init(&cap->done_cond, &attr) | pthread_cond_init(&cap->seal_cond, &attr) |
           pthread_cond_init(&cap->io.cond, &attr) | pthread_cond_init(&cap->chunk_cond, &attr) |
           pthread_cond_init(&cap->hq.cond, &attr);
  pthread_condattr_destroy(&attr);
  return rc == 0 ? CS_E_OK : CS_E_NO_MEMORY;
}

/* Stops the hasher, the writer and the sealer of a capture whose worker never started. */
static void stop_helpers(cs_capture *cap) {
  pthread_mutex_lock(&cap->mutex);
  rt_queue_stop(&cap->hq);
  rt_queue_stop(&cap->io);
  cap->sealer_stop = true;
  pthread_cond_signal(&cap->seal_cond);
  pthread_mutex_unlock(&cap->mutex);
  if (cap->hasher_started) pthread_join(cap->hasher, NULL);
  if (cap->writer_started) pthread_join(cap->writer_thread, NULL);
  if (cap->sealer_started) pthread_join(cap->sealer, NULL);
  cap->hasher_started = false;
  cap->writer_started = false;
  cap->sealer_started = false;
}

/* hash_thread: the hasher's two digest contexts, the first one started. */
static int open_hasher(cs_capture *cap, char *msg, size_t msg_size) {
  if (!cap->cfg.hash_thread) return CS_E_OK;
  cap->hash_ctx = EVP_MD_CTX_new();
  cap->hash_copy = EVP_MD_CTX_new();
  if (cap->hash_ctx == NULL || cap->hash_copy == NULL ||
      EVP_DigestInit_ex(cap->hash_ctx, EVP_sha256(), NULL) != 1) {
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "SHA-256 context for the hash thread: allocation failed");
  }
  return CS_E_OK;
}

/*
 * Starts the sealer, the writer, the hasher (hash_thread) and the worker
 * with every signal blocked: signals belong to the model's threads.
 */
static int start_worker(cs_capture *cap, char *msg, size_t msg_size) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&cap->sealer, NULL, rt_sealer_main, cap);
  cap->sealer_started = rc == 0;
  if (rc == 0) rc = pthread_create(&cap->writer_thread, NULL, rt_writer_main, cap);
  cap->writer_started = cap->sealer_started && rc == 0;
  if (rc == 0 && cap->cfg.hash_thread) {
    rc = pthread_create(&cap->hasher, NULL, rt_hasher_main, cap);
    cap->hasher_started = rc == 0;
  }
  if (rc == 0) rc = pthread_create(&cap->worker, NULL, rt_worker_main, cap);
  cap->worker_started = cap->writer_started && rc == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0) return CS_E_OK;
  stop_helpers(cap);
  return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "pthread_create: %s", strerror(rc));
}

void rt_capture_destroy(cs_capture *cap) {
  for (uint32_t i = 0; i < cap->events_total; i++) rt_cuda_event_destroy(cap->events[i]);
  free(cap->events);
  if (cap->ring.base != NULL) {
    if (cap->ring_pinned) rt_cuda_host_free(cap->ring.base);
    else populated_free(cap->ring.base, (size_t)cap->ring.capacity);
  }
  if (cap->spool != NULL) cs_spool_close(cap->spool);
  populated_free(cap->chunk_area, cap->chunk_bytes * RT_CHUNKS);
  EVP_MD_CTX_free(cap->hash_ctx);
  EVP_MD_CTX_free(cap->hash_copy);
  free(cap->key_tenant);
  free(cap->spool_dir);
  free(cap->key_session);
  pthread_cond_destroy(&cap->work_cond);
  pthread_cond_destroy(&cap->space_cond);
  pthread_cond_destroy(&cap->done_cond);
  pthread_cond_destroy(&cap->seal_cond);
  pthread_cond_destroy(&cap->io.cond);
  pthread_cond_destroy(&cap->chunk_cond);
  pthread_cond_destroy(&cap->hq.cond);
  pthread_mutex_destroy(&cap->spool_mutex);
  pthread_mutex_destroy(&cap->mutex);
  free(cap);
}

int cs_capture_open(const char *spool_dir, const cs_capture_config *cfg, cs_capture **out,
                    char *msg, size_t msg_size) {
  if (out == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "out is NULL");
  *out = NULL;
  if (spool_dir == NULL || spool_dir[0] == '\0') {
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "spool_dir is NULL or empty");
  }
  cs_capture_config defaults;
  cs_capture_config_default(&defaults);
  if (cfg == NULL) cfg = &defaults;
  int rc = cs_capture_config_validate(cfg, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  cs_capture *cap = calloc(1, sizeof *cap);
  if (cap == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "capture allocation failed");
  cap->cfg = *cfg;
  cap->spool_dir = strdup(spool_dir);
  if (cap->spool_dir == NULL || init_sync(cap) != CS_E_OK) {
    free(cap->spool_dir);
    free(cap);
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "mutex or condition initialisation failed");
  }
  rc = cs_sink_init(&cap->sink, &cfg->sink, msg, msg_size);
  assert(rc == CS_E_OK); /* validated above */
  open_device(cap);
  rc = open_ring(cap, msg, msg_size);
  if (rc == CS_E_OK) rc = open_chunks(cap, msg, msg_size);
  if (rc == CS_E_OK) rc = open_hasher(cap, msg, msg_size);
  if (rc == CS_E_OK) rc = open_spool(cap, spool_dir, msg, msg_size);
  if (rc == CS_E_OK) rc = start_worker(cap, msg, msg_size);
  if (rc != CS_E_OK) {
    rt_capture_destroy(cap);
    return rc;
  }
  msg_clear(msg, msg_size);
  *out = cap;
  return CS_E_OK;
}

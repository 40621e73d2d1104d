/*
 * Hand-offs between capture processes and `capstore serve` (docs/operations.md).
 *
 * A capture-role process (CS_ROLE_CAPTURE) seals packs into a private spool,
 * spool_dir/.capture/<uuid>/, whose owner lock it holds. Its hand-off thread
 * links each sealed pack into spool_dir under the same ready name (a hard
 * link: no byte is copied, and the name carries the SHA-256, so EEXIST means
 * the same bytes are there) and fsyncs spool_dir. The private link stays, so
 * the pack keeps counting against this process's quota, until the name is
 * gone from spool_dir: the daemon shipped it (or set it aside, leaving
 * <name>.quarantined). Then the private link is removed and the quota
 * returns. A daemon that is down therefore stops capture at this process's
 * quota, as an in-process runtime would, and never fills the disk.
 *
 * The serving runtime (cfg.serve) scans spool_dir on its spool lane every
 * daemon.scan_interval: cs_capture_admit verifies each ready name it does
 * not hold (the full verifier, as recovery does; a corrupt one is
 * quarantined) and each admitted pack reaches the service as a recovered
 * seal (HEAD before any PUT: a capture process that crashed between a link
 * and its private removal links a shipped pack again, which must be a
 * no-op). The same scan adopts the private spool of a capture process that
 * died: its lock is free, so the daemon takes it, recovers it (stale temp
 * files swept, every pack verified), links its packs in, and removes it.
 */
#define _GNU_SOURCE /* renameat2 */
#include "rs_internal.h"
#include "runtime_internal.h"
#include "thread_name.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MS CS_MS_NS
#define HANDOFF_DIR CS_SPOOL_HANDOFF_DIR
#define NEW_PREFIX ".new-"            /* a private spool being made: never adopted */
#define POLL_NS (20 * MS)             /* how often departures are looked for while packs wait */
#define RETRY_NS (200 * MS)           /* after a failed link */
#define QUARANTINE_SUFFIX ".quarantined"

typedef struct handoff_pack {
  cs_spool_entry entry;
  uint64_t seq;     /* seal order */
  bool link_made;   /* linked into spool_dir, its fsync not yet done */
  bool linked;      /* in spool_dir, fsynced */
} handoff_pack;

struct rs_handoff {
  cs_capture *capture;
  int main_fd;                      /* spool_dir */
  int private_parent_fd;            /* spool_dir/.capture */
  int private_fd;                   /* the private spool itself, open from its making (a rename keeps it valid) */
  char private_name[CS_UUID_TEXT_LEN + 1];
  char private_path[4096];
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mutex;
  pthread_cond_t cond;              /* the thread waits here (CLOCK_MONOTONIC) */
  pthread_cond_t changed;           /* flushes and close wait here */
  handoff_pack *packs;              /* sealed and not yet gone from spool_dir, in seal order */
  uint32_t count, cap;
  uint64_t next_seq;
  bool lost_seal;                   /* a seal could not be queued (no memory): flush and close queue from the index */
  bool stop;
  bool closing;                     /* capstore_close was called: a running flush answers CS_E_CLOSED */
  /* Counters (under mutex) */
  uint64_t linked, shipped, rejected;
  uint32_t report_rejected, report_named; /* since the last flush report */
  cs_uuid report_ids[CS_FLUSH_REJECTED_MAX];
  char last_error[200];
};

/* ---- linking ---------------------------------------------------------------------------------- */

/* Links name from from_fd into to_fd. EEXIST is success: a ready name is its bytes' SHA-256. errno on failure. */
static int link_pack(int from_fd, int to_fd, const char *name) {
  if (linkat(from_fd, name, to_fd, name, 0) == 0 || errno == EEXIST) return 0;
  return errno;
}

static uint64_t now_ns(void) { return cs_capture_clock_ns(); }

static void deadline_ts(uint64_t at, struct timespec *ts) {
  ts->tv_sec = (time_t)(at / CS_SEC_NS);
  ts->tv_nsec = (long)(at % CS_SEC_NS);
}

/* ---- the capture side ----------------------------------------------------------------------------- */

static void on_sealed(void *context, const cs_spool_entry *entry, const cs_pack_summary *summary,
                      const cs_pack_key_fields *fields) {
  (void)summary;
  (void)fields;
  rs_handoff *h = context;
  pthread_mutex_lock(&h->mutex);
  if (h->count == h->cap) {
    uint32_t cap = h->cap == 0 ? 64 : 2 * h->cap;
    handoff_pack *grown = realloc(h->packs, (size_t)cap * sizeof *grown);
    if (grown == NULL) {
      h->lost_seal = true; /* it stays in the private spool; close links it from the index */
      snprintf(h->last_error, sizeof h->last_error, "no memory to queue a sealed pack for hand-off");
      pthread_mutex_unlock(&h->mutex);
      return;
    }
    h->packs = grown;
    h->cap = cap;
  }
  h->packs[h->count++] = (handoff_pack){.entry = *entry, .seq = h->next_seq++};
  pthread_cond_signal(&h->cond);
  pthread_mutex_unlock(&h->mutex);
}

/* Links every queued pack not yet linked, then one fsync of spool_dir. Under mutex (dropped around I/O). */
static bool link_pending(rs_handoff *h) {
  bool any = false, failed = false;
  for (uint32_t i = 0; i < h->count; i++) { /* only this thread removes entries: i stays valid */
    if (h->packs[i].linked || h->packs[i].link_made) continue;
    char name[CS_SPOOL_NAME_MAX + 1];
    memcpy(name, h->packs[i].entry.name, sizeof name);
    pthread_mutex_unlock(&h->mutex);
    int err = link_pack(h->private_fd, h->main_fd, name);
    pthread_mutex_lock(&h->mutex);
    if (err != 0) {
      snprintf(h->last_error, sizeof h->last_error, "linking %.120s into the daemon's spool: %s", name, strerror(err));
      failed = true;
      break; /* the same failure would repeat: try again later */
    }
    h->packs[i].link_made = true;
    any = true;
  }
  if (!any) return !failed;
  pthread_mutex_unlock(&h->mutex);
  int err = fsync(h->main_fd) == 0 ? 0 : errno;
  pthread_mutex_lock(&h->mutex);
  for (uint32_t i = 0; i < h->count; i++) {
    if (!h->packs[i].link_made) continue;
    h->packs[i].link_made = false;
    if (err == 0) { /* durable in the daemon's spool */
      h->packs[i].linked = true;
      h->linked++;
    }
  }
  if (err != 0) {
    snprintf(h->last_error, sizeof h->last_error, "fsync of the daemon's spool: %s", strerror(err));
    return false; /* linked again (EEXIST) and fsynced on the next round */
  }
  if (!failed) h->last_error[0] = '\0';
  return !failed;
}

/* The packs gone from spool_dir: their private links go and their quota returns. Under mutex. */
static bool settle_departures(rs_handoff *h) {
  bool changed = false;
  for (uint32_t i = 0; i < h->count;) {
    handoff_pack *p = &h->packs[i];
    struct stat st;
    if (!p->linked || fstatat(h->main_fd, p->entry.name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
      i++;
      continue;
    }
    char quarantined[CS_SPOOL_NAME_MAX + 32];
    snprintf(quarantined, sizeof quarantined, "%s" QUARANTINE_SUFFIX, p->entry.name);
    bool set_aside = fstatat(h->main_fd, quarantined, &st, AT_SYMLINK_NOFOLLOW) == 0;
    cs_uuid id = p->entry.pack_id;
    char msg[200];
    pthread_mutex_unlock(&h->mutex);
    int rc = cs_capture_remove_pack(h->capture, &id, msg, sizeof msg);
    pthread_mutex_lock(&h->mutex);
    if (rc != CS_E_OK && rc != CS_E_NOT_FOUND) {
      snprintf(h->last_error, sizeof h->last_error, "removing a shipped pack's private link: %.140s", msg);
      i++;
      continue;
    }
    if (set_aside) {
      h->rejected++;
      if (h->report_named < CS_FLUSH_REJECTED_MAX) h->report_ids[h->report_named++] = id;
      h->report_rejected++;
    } else {
      h->shipped++;
    }
    /* The array may have grown meanwhile: find the pack again by its place (nothing else removes). */
    p = &h->packs[i];
    memmove(p, p + 1, (size_t)(h->count - i - 1) * sizeof *p);
    h->count--;
    changed = true;
  }
  return changed;
}

static void *handoff_main(void *context) {
  rs_handoff *h = context;
  rt_thread_name("cs-handoff");
  pthread_mutex_lock(&h->mutex);
  for (;;) {
    bool link_ok = link_pending(h);
    bool changed = settle_departures(h);
    if (changed || h->linked > 0) pthread_cond_broadcast(&h->changed);
    bool unlinked = false;
    for (uint32_t i = 0; i < h->count && !unlinked; i++) unlinked = !h->packs[i].linked;
    if (h->stop && !unlinked) break;
    if (h->stop && !link_ok) break; /* close gave up on the rest: the daemon adopts the private spool */
    struct timespec ts;
    uint64_t wait = !link_ok ? RETRY_NS : h->count > 0 ? POLL_NS : 1000 * MS;
    deadline_ts(now_ns() + wait, &ts);
    if (!unlinked || !link_ok) pthread_cond_timedwait(&h->cond, &h->mutex, &ts);
  }
  pthread_cond_broadcast(&h->changed);
  pthread_mutex_unlock(&h->mutex);
  return NULL;
}

static int open_dir_at(int at, const char *name, bool create, bool follow, char *msg, size_t msg_size,
                       const char *what) {
  if (create && mkdirat(at, name, 0775) != 0 && errno != EEXIST)
    return -rt_refuse(CS_E_IO, msg, msg_size, "cannot create %s: %s", what, strerror(errno));
  int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) return -rt_refuse(CS_E_IO, msg, msg_size, "cannot open %s: %s", what, strerror(errno));
  return fd;
}

int rs_handoff_open(rs_runtime *rt, char *msg, size_t msg_size) {
  rs_handoff *h = calloc(1, sizeof *h);
  if (h == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the hand-off");
  h->main_fd = h->private_parent_fd = h->private_fd = -1;
  rt->handoff = h;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (pthread_mutex_init(&h->mutex, NULL) != 0 || pthread_cond_init(&h->cond, &attr) != 0 ||
      pthread_cond_init(&h->changed, &attr) != 0) {
    pthread_condattr_destroy(&attr);
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the hand-off's locks");
  }
  pthread_condattr_destroy(&attr);
  h->main_fd = open_dir_at(AT_FDCWD, rt->cfg.spool_dir, true, true, msg, msg_size, "spool_dir");
  if (h->main_fd < 0) return -h->main_fd;
  h->private_parent_fd = open_dir_at(h->main_fd, HANDOFF_DIR, true, false, msg, msg_size, "spool_dir/" HANDOFF_DIR);
  if (h->private_parent_fd < 0) return -h->private_parent_fd;
  /* Made under a name the daemon never adopts, locked by the capture's open, then renamed into view. */
  cs_uuid id;
  rt_uuid7 gen = {0};
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  if (rt_uuid7_next(&gen, (uint64_t)wall.tv_sec * CS_SEC_NS + (uint64_t)wall.tv_nsec, &id) != CS_E_OK)
    return rt_refuse(CS_E_IO, msg, msg_size, "getrandom failed");
  cs_uuid_format(&id, h->private_name);
  char made[128];
  snprintf(made, sizeof made, NEW_PREFIX "%s", h->private_name);
  snprintf(h->private_path, sizeof h->private_path, "%s/" HANDOFF_DIR "/%s", rt->cfg.spool_dir, made);
  capstore_config *cfg = &rt->cfg;
  cfg->capture.on_sealed = on_sealed;
  cfg->capture.on_sealed_context = h;
  int rc = cs_capture_open(h->private_path, &cfg->capture, &h->capture, msg, msg_size);
  if (rc != CS_E_OK) {
    (void)unlinkat(h->private_parent_fd, made, AT_REMOVEDIR);
    return rc;
  }
  /*
   * The daemon may run as another user of the spool's group: the private spool and its lock follow
   * .capture's group permissions (and its setgid bit), so the daemon can adopt it if this process dies.
   */
  struct stat parent;
  if (fstat(h->private_parent_fd, &parent) == 0) {
    mode_t group = parent.st_mode & 0070;
    (void)fchmodat(h->private_parent_fd, made, 0700 | group | (parent.st_mode & S_ISGID), 0);
  }
  h->private_fd = openat(h->private_parent_fd, made, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (h->private_fd < 0)
    return rt_refuse(CS_E_IO, msg, msg_size, "cannot open the private spool %s: %s", h->private_path, strerror(errno));
  if (fstat(h->private_parent_fd, &parent) == 0)
    (void)fchmodat(h->private_fd, CS_SPOOL_LOCK_NAME, 0600 | (parent.st_mode & 0060), 0);
  if (renameat(h->private_parent_fd, made, h->private_parent_fd, h->private_name) != 0 ||
      fsync(h->private_parent_fd) != 0) {
    return rt_refuse(CS_E_IO, msg, msg_size, "cannot publish the private spool %s: %s", h->private_path,
                     strerror(errno));
  }
  snprintf(h->private_path, sizeof h->private_path, "%s/" HANDOFF_DIR "/%s", rt->cfg.spool_dir, h->private_name);
  if (pthread_create(&h->thread, NULL, handoff_main, h) != 0)
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "cannot start the hand-off thread");
  h->thread_started = true;
  rt->capture = h->capture;
  atomic_store(&rt->capture_live, h->capture);
  return CS_E_OK;
}

/* Packs sealed before seq still waiting: how many, and how many of them are not linked yet. Under mutex. */
static uint32_t waiting_before(const rs_handoff *h, uint64_t seq, uint32_t *unlinked) {
  uint32_t n = 0;
  *unlinked = 0;
  for (uint32_t i = 0; i < h->count; i++) {
    if (h->packs[i].seq >= seq) continue;
    n++;
    if (!h->packs[i].linked) (*unlinked)++;
  }
  return n;
}

/* Links what the private index holds that no seal queued (a lost seal). */
static void queue_unqueued(rs_handoff *h) {
  size_t count = 0;
  if (cs_capture_list(h->capture, NULL, 0, &count) != CS_E_OK || count == 0) return;
  cs_spool_entry *entries = calloc(count, sizeof *entries);
  if (entries == NULL || cs_capture_list(h->capture, entries, count, &count) != CS_E_OK) {
    free(entries);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    bool queued = false;
    pthread_mutex_lock(&h->mutex);
    for (uint32_t j = 0; j < h->count && !queued; j++) queued = cs_uuid_equal(&h->packs[j].entry.pack_id, &entries[i].pack_id);
    pthread_mutex_unlock(&h->mutex);
    if (!queued) on_sealed(h, &entries[i], NULL, NULL);
  }
  free(entries);
}

int rs_handoff_flush(rs_runtime *rt, uint64_t deadline_ns, capstore_flush_report *report, char *msg,
                     size_t msg_size) {
  rs_handoff *h = rt->handoff;
  char inner[200];
  int rc = cs_capture_flush(h->capture, deadline_ns, inner, sizeof inner);
  if (rc != CS_E_OK) {
    report->stage = "sink";
    return rt_refuse(rc, msg, msg_size, "flush: %s", inner);
  }
  pthread_mutex_lock(&h->mutex);
  bool lost = h->lost_seal;
  pthread_mutex_unlock(&h->mutex);
  if (lost) queue_unqueued(h);
  pthread_mutex_lock(&h->mutex);
  uint64_t target = h->next_seq; /* every pack with a record from before the call is sealed and queued */
  pthread_cond_signal(&h->cond);
  struct timespec ts;
  deadline_ts(deadline_ns, &ts);
  uint32_t unlinked = 0, waiting = waiting_before(h, target, &unlinked);
  while (waiting > 0 && !h->stop && !h->closing && now_ns() < deadline_ns) {
    pthread_cond_timedwait(&h->changed, &h->mutex, &ts);
    waiting = waiting_before(h, target, &unlinked);
  }
  if (waiting > 0 && (h->stop || h->closing)) {
    pthread_mutex_unlock(&h->mutex);
    report->stage = "";
    report->missing_packs = waiting;
    return rt_refuse(CS_E_CLOSED, msg, msg_size, "capstore is closed");
  }
  report->drained = waiting == 0;
  report->missing_packs = waiting;
  report->rejected_count = h->report_rejected;
  report->rejected_named = h->report_named;
  memcpy(report->rejected, h->report_ids, sizeof report->rejected);
  char last_error[sizeof h->last_error];
  snprintf(last_error, sizeof last_error, "%s", h->last_error);
  if (report->drained) h->report_rejected = h->report_named = 0;
  pthread_mutex_unlock(&h->mutex);
  if (!report->drained) {
    report->stage = unlinked > 0 ? "handoff" : "daemon";
    return rt_refuse(CS_E_TIMEOUT, msg, msg_size,
                     "flush: not drained by the deadline (stage %s): %" PRIu32 " pack(s) not yet shipped by capstore "
                     "serve, %" PRIu32 " of them not yet handed to it%s%s",
                     report->stage, waiting, unlinked, unlinked > 0 && last_error[0] != '\0' ? ": " : "",
                     unlinked > 0 ? last_error : "");
  }
  return CS_E_OK;
}

/* Whether dir_fd holds nothing but the spool's lock. */
static bool only_lock_left(int dir_fd) {
  DIR *dir = fdopendir(dup(dir_fd));
  bool only = dir != NULL;
  for (struct dirent *d; only && (d = readdir(dir)) != NULL;)
    only = strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0 || strcmp(d->d_name, CS_SPOOL_LOCK_NAME) == 0;
  if (dir != NULL) closedir(dir);
  return only;
}

/*
 * An empty private spool is removed while its lock is still held (the lock's
 * name is unlinked, the open file keeps the lock): a daemon's scan never
 * finds it free and empty, so it is never taken for a dead process's.
 */
static void remove_private(rs_handoff *h) {
  if (h->private_fd < 0 || !only_lock_left(h->private_fd)) return;
  (void)unlinkat(h->private_fd, CS_SPOOL_LOCK_NAME, 0);
  (void)unlinkat(h->private_parent_fd, h->private_name, AT_REMOVEDIR);
}

/* Stops the hand-off thread once it has linked what it holds (or failed to). */
static void stop_thread(rs_handoff *h) {
  if (!h->thread_started) return;
  pthread_mutex_lock(&h->mutex);
  h->stop = true;
  pthread_cond_signal(&h->cond);
  pthread_mutex_unlock(&h->mutex);
  pthread_join(h->thread, NULL);
  h->thread_started = false;
}

int rs_handoff_close(rs_runtime *rt, uint64_t budget_ns, char *msg, size_t msg_size) {
  rs_handoff *h = rt->handoff;
  uint64_t end = now_ns() + budget_ns;
  char inner[200] = "";
  int rc = cs_capture_close(h->capture, end, inner, sizeof inner);
  if (rc != CS_E_OK) rt_refuse(rc, msg, msg_size, "close: sealing: %s", inner);
  pthread_mutex_lock(&h->mutex);
  bool lost = h->lost_seal;
  pthread_mutex_unlock(&h->mutex);
  if (lost) queue_unqueued(h);
  /* Hand everything over (links, not the daemon's shipping: it owns them now), then stop the thread. */
  pthread_mutex_lock(&h->mutex);
  struct timespec ts;
  deadline_ts(end, &ts);
  uint32_t unlinked = 0;
  (void)waiting_before(h, UINT64_MAX, &unlinked);
  pthread_cond_signal(&h->cond);
  while (unlinked > 0 && now_ns() < end) {
    pthread_cond_timedwait(&h->changed, &h->mutex, &ts);
    (void)waiting_before(h, UINT64_MAX, &unlinked);
  }
  char last_error[sizeof h->last_error];
  snprintf(last_error, sizeof last_error, "%s", h->last_error);
  pthread_mutex_unlock(&h->mutex);
  stop_thread(h);
  if (unlinked > 0) {
    /* The private spool stays; the daemon adopts it once this process's lock is gone. */
    if (rc == CS_E_OK)
      rc = rt_refuse(CS_E_TIMEOUT, msg, msg_size,
                     "close: %" PRIu32 " pack(s) not handed to capstore serve within the budget (%s); they stay in "
                     "%s, which the daemon adopts after this process exits",
                     unlinked, last_error[0] != '\0' ? last_error : "no error seen", h->private_path);
    return rc;
  }
  /* Every pack is in the daemon's spool: the private links go (the daemon's own keep the bytes). */
  pthread_mutex_lock(&h->mutex);
  for (uint32_t i = 0; i < h->count; i++) {
    cs_uuid id = h->packs[i].entry.pack_id;
    pthread_mutex_unlock(&h->mutex);
    (void)cs_capture_remove_pack(h->capture, &id, NULL, 0);
    pthread_mutex_lock(&h->mutex);
  }
  h->count = 0;
  pthread_mutex_unlock(&h->mutex);
  remove_private(h);
  return rc;
}

void rs_handoff_free(rs_runtime *rt) {
  rs_handoff *h = rt->handoff;
  if (h == NULL) return;
  stop_thread(h);
  atomic_store(&rt->capture_live, NULL);
  if (h->capture != NULL) cs_capture_free(h->capture);
  rt->capture = NULL;
  remove_private(h);
  if (h->private_fd >= 0) close(h->private_fd);
  if (h->private_parent_fd >= 0) close(h->private_parent_fd);
  if (h->main_fd >= 0) close(h->main_fd);
  free(h->packs);
  pthread_mutex_destroy(&h->mutex);
  pthread_cond_destroy(&h->cond);
  pthread_cond_destroy(&h->changed);
  free(h);
  rt->handoff = NULL;
}

void rs_handoff_closing(rs_runtime *rt) {
  rs_handoff *h = rt->handoff;
  pthread_mutex_lock(&h->mutex);
  h->closing = true;
  pthread_cond_broadcast(&h->changed);
  pthread_mutex_unlock(&h->mutex);
}

void rs_handoff_stats(rs_runtime *rt, capstore_stats *out) {
  rs_handoff *h = rt->handoff;
  if (h == NULL) return;
  pthread_mutex_lock(&h->mutex);
  out->handoff_linked = h->linked;
  out->handoff_shipped = h->shipped;
  out->handoff_rejected = h->rejected;
  out->handoff_waiting = h->count;
  if (h->last_error[0] != '\0')
    snprintf(out->engine_last_error, sizeof out->engine_last_error, "%.150s", h->last_error);
  pthread_mutex_unlock(&h->mutex);
}

/* ---- the serving side, on the spool lane ------------------------------------------------------------ */

#define ADOPT_TRIES_PER_SCAN 16u   /* private spools tried per scan (a rotating cursor reaches every one) */
#define ADOPT_NAMES_MAX 65536u      /* names read from .capture per scan */

static bool has_suffix(const char *name, const char *suffix) {
  size_t n = strlen(name), k = strlen(suffix);
  return n > k && strcmp(name + n - k, suffix) == 0;
}

/* Moves a quarantined pack (and its reason) of an adopted spool next to the daemon's; never over a file there. */
static void move_sidelined(int private_fd, int main_fd) {
  DIR *dir = fdopendir(dup(private_fd));
  for (struct dirent *d; dir != NULL && (d = readdir(dir)) != NULL;) {
    if (!has_suffix(d->d_name, QUARANTINE_SUFFIX) && !has_suffix(d->d_name, QUARANTINE_SUFFIX ".reason")) continue;
    if (renameat2(private_fd, d->d_name, main_fd, d->d_name, RENAME_NOREPLACE) != 0 && errno == EEXIST)
      (void)unlinkat(private_fd, d->d_name, 0); /* the same pack was set aside here before: one copy is kept */
  }
  if (dir != NULL) closedir(dir);
  (void)fsync(main_fd);
}


/*
 * Adopts one private spool whose owner is gone: recovers it, links its packs
 * into spool_dir, moves its quarantined packs there too, and removes it. The
 * directory is opened without following a link and the spool opened through
 * that very descriptor (/proc/self/fd), so a name swapped for a symbolic link
 * leads nowhere else. Something else left inside (not a pack) sets the
 * directory aside as .stale-<name>, so it is not retried every scan.
 * Returns true when packs moved or the spool was removed.
 */
static bool adopt_one(rs_runtime *rt, int main_fd, int parent_fd, const char *name) {
  int private_fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (private_fd < 0) return false; /* gone meanwhile, or not a directory */
  char path[64], shown[4200];
  snprintf(path, sizeof path, "/proc/self/fd/%d", private_fd);
  snprintf(shown, sizeof shown, "%s/" HANDOFF_DIR "/%s", rt->cfg.spool_dir, name);
  cs_spool_options options = {.create = false};
  cs_spool *spool = NULL;
  char msg[256];
  int rc = cs_spool_open(path, &options, &spool, msg, sizeof msg);
  if (rc != CS_E_OK) {
    if (rc != CS_E_BUSY) { /* CS_E_BUSY: its capture process is alive */
      char why[500];
      snprintf(why, sizeof why, "%.200s: %.250s", shown, msg);
      rs_log_failure(rt, "adopting a private spool", why);
    }
    close(private_fd);
    return false;
  }
  cs_spool_recovery report;
  rc = cs_spool_recover(spool, &report);
  size_t count = 0;
  if (rc == CS_E_OK) rc = cs_spool_entries(spool, NULL, 0, &count);
  cs_spool_entry *entries = count > 0 ? calloc(count, sizeof *entries) : NULL;
  if (rc == CS_E_OK && count > 0 && entries == NULL) rc = CS_E_NO_MEMORY;
  if (rc == CS_E_OK && count > 0) rc = cs_spool_entries(spool, entries, count, &count);
  /*
   * Moved, not linked: the packs belong to the dead process's user, and a hard link to another user's file is
   * refused where fs.protected_hardlinks is on (Debian's default). A name already in spool_dir holds the same bytes
   * (its SHA-256 is in the name): replacing it changes nothing.
   */
  int err = 0;
  for (size_t i = 0; rc == CS_E_OK && i < count && err == 0; i++)
    if (renameat(private_fd, entries[i].name, main_fd, entries[i].name) != 0) err = errno;
  if (rc == CS_E_OK && fsync(main_fd) != 0 && err == 0) err = errno;
  free(entries);
  if (rc != CS_E_OK || err != 0) {
    char why[400];
    snprintf(why, sizeof why, "%.200s: %.90s", shown, err != 0 ? strerror(err) : cs_strerror(rc));
    rs_log_failure(rt, "adopting a private spool", why);
    cs_spool_close(spool);
    close(private_fd);
    return false;
  }
  move_sidelined(private_fd, main_fd);
  /* Empty now but for its lock: removed while the lock is held (its name goes first, the open file keeps it). */
  bool removed = false;
  if (only_lock_left(private_fd)) {
    (void)unlinkat(private_fd, CS_SPOOL_LOCK_NAME, 0);
    removed = unlinkat(parent_fd, name, AT_REMOVEDIR) == 0;
  }
  if (!removed) {
    char aside[128];
    snprintf(aside, sizeof aside, ".stale-%s", name);
    bool renamed = renameat2(parent_fd, name, parent_fd, aside, RENAME_NOREPLACE) == 0;
    char why[4400];
    snprintf(why, sizeof why, "%.300s holds files that are not packs: %s", shown,
             renamed ? "set aside as .stale-<name> (its packs were taken)" : "left in place");
    rs_log_failure(rt, "adopting a private spool", why);
  }
  cs_spool_close(spool);
  close(private_fd);
  if (removed || count > 0) atomic_fetch_add(&rt->adopted_spools, 1);
  return removed || count > 0;
}

static int name_order(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Tries up to ADOPT_TRIES_PER_SCAN private spools (directories with UUID names), from a cursor that rotates. */
static void adopt_private_spools(rs_runtime *rt, int main_fd) {
  int parent_fd = openat(main_fd, HANDOFF_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (parent_fd < 0) return; /* no capture process ever ran here */
  DIR *dir = fdopendir(dup(parent_fd));
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *d; dir != NULL && n < ADOPT_NAMES_MAX && (d = readdir(dir)) != NULL;) {
    cs_uuid id;
    struct stat st;
    if (strlen(d->d_name) != CS_UUID_TEXT_LEN || cs_uuid_parse(d->d_name, CS_UUID_TEXT_LEN, &id) != CS_E_OK) continue;
    if (fstatat(parent_fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (n == cap) {
      size_t grown_cap = cap == 0 ? 16 : 2 * cap;
      char **grown = realloc(names, grown_cap * sizeof *grown);
      if (grown == NULL) break;
      names = grown;
      cap = grown_cap;
    }
    if ((names[n] = strdup(d->d_name)) == NULL) break;
    n++;
  }
  if (dir != NULL) closedir(dir);
  if (n > 1) qsort(names, n, sizeof *names, name_order); /* a stable order for the cursor */
  uint32_t tries = n < ADOPT_TRIES_PER_SCAN ? (uint32_t)n : ADOPT_TRIES_PER_SCAN;
  for (uint32_t i = 0; i < tries; i++) (void)adopt_one(rt, main_fd, parent_fd, names[(rt->adopt_cursor + i) % n]);
  if (n > 0) rt->adopt_cursor = (rt->adopt_cursor + tries) % n;
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  close(parent_fd);
}

/* What one scan admitted, as refs built from the footers its check parsed (each footer parsed once). */
typedef struct arrivals {
  rs_runtime *rt;
  cs_pack_ref *refs;
  uint32_t count;
  cs_uuid *refused;        /* verified, yet no ref can be made of them (no records: no object key): set aside */
  char (*why)[200];
  uint32_t refused_count;
} arrivals;

/* cs_capture_admit's callback, under the spool's lock: builds the ref; the footer goes to the cache for INDEX. */
static void admitted(void *context, const cs_spool_entry *entry, cs_pack_footer *footer, uint64_t footer_length) {
  arrivals *a = context;
  if (a->count >= RS_ARRIVALS_PER_SCAN || a->refused_count >= RS_ARRIVALS_PER_SCAN) return;
  char *why = a->why[a->refused_count];
  int rc = rs_ref_from_footer(a->rt, entry, footer, footer_length, &a->refs[a->count], why, sizeof a->why[0]);
  if (rc == CS_E_OK) {
    a->count++;
  } else if (rc != CS_E_NO_MEMORY) {
    a->refused[a->refused_count++] = entry->pack_id; /* quarantined once the spool's lock is released */
  } else {
    rs_log_failure(a->rt, "reading a handed-in pack", why); /* in the spool: the next start recovers it */
  }
}

void rs_arrivals_scan(rs_runtime *rt, rs_job *job) {
  job->key_count = 0;
  cs_capture *cap = rs_capture(rt);
  if (cap == NULL) return;
  int main_fd = open(rt->cfg.spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (main_fd < 0) {
    char why[300];
    snprintf(why, sizeof why, "%s: %s", rt->cfg.spool_dir, strerror(errno));
    rs_log_failure(rt, "scanning the spool", why);
    return;
  }
  adopt_private_spools(rt, main_fd);
  close(main_fd);
  cs_spool_entry *entries = calloc(RS_ARRIVALS_PER_SCAN, sizeof *entries);
  arrivals a = {.rt = rt, .refs = calloc(RS_ARRIVALS_PER_SCAN, sizeof *a.refs),
                .refused = calloc(RS_ARRIVALS_PER_SCAN, sizeof *a.refused), .why = calloc(RS_ARRIVALS_PER_SCAN, 200)};
  size_t count = 0;
  int rc = entries == NULL || a.refs == NULL || a.refused == NULL || a.why == NULL
               ? CS_E_NO_MEMORY
               : cs_capture_admit(cap, entries, RS_ARRIVALS_PER_SCAN, &count, admitted, &a);
  if (rc != CS_E_OK) rs_log_failure(rt, "scanning the spool", cs_strerror(rc));
  for (uint32_t i = 0; i < a.count; i++) {
    rs_msg msg = {.kind = RS_MSG_ARRIVED, .ref = a.refs[i]};
    rs_inbox_post(rt, &msg);
  }
  for (uint32_t i = 0; i < a.refused_count; i++) {
    char reason[260], msg[200];
    snprintf(reason, sizeof reason, "handed in, but not shippable: %s", a.why[i]);
    rs_log_failure(rt, "a handed-in pack set aside", a.why[i]);
    if (cs_capture_quarantine_pack(cap, &a.refused[i], reason, msg, sizeof msg) != CS_E_OK)
      rs_log_failure(rt, "setting a handed-in pack aside", msg);
    else
      atomic_fetch_add(&rt->arrivals_set_aside, 1);
  }
  free(entries);
  free(a.refs);
  free(a.refused);
  free(a.why);
  job->key_count = (uint32_t)count; /* a full scan: the next one at once */
}

/*
 * Flush, close, free, removal, listing and statistics of the capture sink.
 * Flush and close ask the sink core and wait for the worker to carry out
 * what it decided, each by its deadline.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_internal.h"

static void msg_set(char *msg, size_t msg_size, const char *text) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "%s", text);
}

/* Under the mutex: waits on done_cond; false once deadline_ns has passed. */
static bool wait_done(cs_capture *cap, uint64_t deadline_ns) {
  if (deadline_ns != CS_NEVER && cs_capture_clock_ns() >= deadline_ns) return false;
  rt_cond_wait_until(&cap->done_cond, &cap->mutex, deadline_ns);
  return true;
}

/* Under the mutex: asks the core for a flush, waiting out one still outstanding. */
static int start_flush(cs_capture *cap, uint64_t id, uint64_t deadline_ns) {
  for (;;) {
    if (cap->close_started) return CS_E_CLOSED;
    int rc = cs_sink_flush(&cap->sink, cs_capture_clock_ns(), id);
    if (rc != CS_E_STATE) return rc;
    /* An earlier flush that timed out is still outstanding in the core. */
    if (!wait_done(cap, deadline_ns)) return CS_E_TIMEOUT;
  }
}

/*
 * Under the mutex: when the core answered flush id at once (every record
 * before it packed, no pack open, no seal in flight), its FLUSHED is the one
 * control action and is ready; the caller takes it rather than waiting for
 * the worker, so a flush with nothing to do succeeds whatever its deadline.
 */
static void take_flushed_now(cs_capture *cap, uint64_t id) {
  if (cap->control_count != 1) return;
  const rt_control *head = &cap->control[cap->control_head];
  if (head->action.op != CS_SINK_FLUSHED || head->action.flush_id != id) return;
  if (head->position > cap->ring.consumed_count) return;
  cs_sink_action action = head->action;
  cap->control_head = (cap->control_head + 1) % RT_CONTROL_MAX;
  cap->control_count--;
  rt_take_flushed(cap, &action);
}

static int flush_locked(cs_capture *cap, uint64_t deadline_ns, char *msg, size_t msg_size) {
  if (cap->close_started) return rt_refuse(CS_E_CLOSED, msg, msg_size, "the sink is closed");
  while (cap->flush_active) {
    if (!wait_done(cap, deadline_ns)) return rt_refuse(CS_E_TIMEOUT, msg, msg_size, "flush deadline passed");
    if (cap->close_started) return rt_refuse(CS_E_CLOSED, msg, msg_size, "the sink is closed");
  }
  cap->flush_active = true;
  uint64_t id = ++cap->flush_next_id;
  cap->flush_waiting_id = id; /* its report is taken only while this caller waits for it */
  int rc = start_flush(cap, id, deadline_ns);
  if (rc == CS_E_OK) {
    rt_drain_actions(cap, 0, cap->ring.reserved_count);
    take_flushed_now(cap, id);
    if (cap->flush_done_id < id) rt_wake_worker(cap);
    while (cap->flush_done_id < id && !cap->close_done) {
      if (!wait_done(cap, deadline_ns)) break;
    }
    if (cap->flush_done_id >= id) {
      rc = cap->flush_done_err;
      msg_set(msg, msg_size, cap->flush_done_msg);
    } else {
      rc = cap->close_done ? CS_E_CLOSED : CS_E_TIMEOUT;
    }
  }
  if (rc == CS_E_TIMEOUT) rt_refuse(rc, msg, msg_size, "flush deadline passed; sealing goes on");
  if (rc == CS_E_CLOSED) rt_refuse(rc, msg, msg_size, "the sink is closed");
  cap->flush_waiting_id = 0;
  cap->flush_active = false;
  pthread_cond_broadcast(&cap->done_cond);
  return rc;
}

int cs_capture_flush(cs_capture *cap, uint64_t deadline_ns, char *msg, size_t msg_size) {
  if (cap == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cap is NULL");
  pthread_mutex_lock(&cap->mutex);
  int rc = flush_locked(cap, deadline_ns, msg, msg_size);
  pthread_mutex_unlock(&cap->mutex);
  return rc;
}

/* Joins the worker once, whoever gets here first. */
static void join_worker(cs_capture *cap) {
  pthread_mutex_lock(&cap->mutex);
  bool mine = cap->worker_started && !cap->worker_joined;
  cap->worker_joined = true;
  pthread_mutex_unlock(&cap->mutex);
  if (!mine) return;
  pthread_join(cap->worker, NULL); /* it stops the hasher or the writer, which stops the next */
  if (cap->hasher_started) pthread_join(cap->hasher, NULL);
  pthread_join(cap->writer_thread, NULL);
  pthread_join(cap->sealer, NULL);
}

int cs_capture_close(cs_capture *cap, uint64_t deadline_ns, char *msg, size_t msg_size) {
  if (cap == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cap is NULL");
  pthread_mutex_lock(&cap->mutex);
  if (!cap->close_started) {
    cap->close_started = true;
    int rc = cs_sink_close(&cap->sink, cs_capture_clock_ns());
    assert(rc == CS_E_OK);
    (void)rc;
    rt_drain_actions(cap, 0, cap->ring.reserved_count);
    rt_wake_worker(cap);
    pthread_cond_broadcast(&cap->space_cond); /* blocked producers learn it is closed */
  }
  while (!cap->close_done) {
    if (!wait_done(cap, deadline_ns)) break;
  }
  int rc = CS_E_TIMEOUT;
  if (cap->close_done) {
    rc = cap->close_err;
    msg_set(msg, msg_size, cap->close_msg);
    cap->close_err = CS_E_OK; /* reported once */
    cap->close_msg[0] = '\0';
  } else {
    rt_refuse(rc, msg, msg_size, "close deadline passed; sealing goes on");
  }
  pthread_mutex_unlock(&cap->mutex);
  if (rc != CS_E_TIMEOUT) join_worker(cap);
  return rc;
}

void cs_capture_free(cs_capture *cap) {
  if (cap == NULL) return;
  if (cap->worker_started) {
    /* No more waiting for file system room: free returns even on a disk that stays full. */
    pthread_mutex_lock(&cap->mutex);
    cap->abandon = true;
    pthread_cond_broadcast(&cap->space_cond);
    pthread_cond_signal(&cap->work_cond);
    pthread_mutex_unlock(&cap->mutex);
    (void)cs_capture_close(cap, CS_NEVER, NULL, 0);
    join_worker(cap);
  }
  rt_capture_destroy(cap);
}

/*
 * Under spool_mutex, after a pack left the spool (removed or sidelined) with
 * rc: the sink core hears of its room (the core counts every pack the spool
 * lists, hence under spool_mutex), a full file system has room again, and
 * blocked producers and a waiting worker look again.
 */
static int pack_left(cs_capture *cap, int rc, uint64_t size, char *msg, size_t msg_size) {
  if (rc != CS_E_OK) return rt_refuse(rc, msg, msg_size, "%s", cs_spool_last_error(cap->spool));
  pthread_mutex_lock(&cap->mutex);
  cs_sink_on_removed(&cap->sink, size);
  cap->disk_full = false; /* a pack's room came back */
  pthread_cond_signal(&cap->work_cond);
  pthread_cond_broadcast(&cap->space_cond);
  pthread_mutex_unlock(&cap->mutex);
  msg_set(msg, msg_size, "");
  return CS_E_OK;
}

int cs_capture_remove_pack(cs_capture *cap, const cs_uuid *pack_id, char *msg, size_t msg_size) {
  if (cap == NULL || pack_id == NULL) {
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cap and pack_id must not be NULL");
  }
  pthread_mutex_lock(&cap->spool_mutex);
  uint64_t size = 0;
  int removed = cs_spool_remove(cap->spool, pack_id, &size); /* before size is read: argument order is unspecified */
  int rc = pack_left(cap, removed, size, msg, msg_size);
  pthread_mutex_unlock(&cap->spool_mutex);
  return rc;
}

int cs_capture_quarantine_pack(cs_capture *cap, const cs_uuid *pack_id, const char *reason, char *msg,
                               size_t msg_size) {
  if (cap == NULL || pack_id == NULL || reason == NULL) {
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cap, pack_id and reason must not be NULL");
  }
  pthread_mutex_lock(&cap->spool_mutex);
  uint64_t size = 0;
  int sidelined = cs_spool_quarantine(cap->spool, pack_id, reason, &size); /* before size is read */
  int rc = pack_left(cap, sidelined, size, msg, msg_size);
  pthread_mutex_unlock(&cap->spool_mutex);
  return rc;
}

int cs_capture_open_pack(cs_capture *cap, const cs_uuid *pack_id, int *fd, cs_spool_entry *out) {
  if (cap == NULL || pack_id == NULL || fd == NULL) return CS_E_INVALID_ARGUMENT;
  pthread_mutex_lock(&cap->spool_mutex);
  int rc = cs_spool_open_pack(cap->spool, pack_id, fd, out);
  pthread_mutex_unlock(&cap->spool_mutex);
  return rc;
}

int cs_capture_list(cs_capture *cap, cs_spool_entry *entries, size_t capacity, size_t *count) {
  if (cap == NULL) return CS_E_INVALID_ARGUMENT;
  pthread_mutex_lock(&cap->spool_mutex);
  int rc = cs_spool_entries(cap->spool, entries, capacity, count);
  pthread_mutex_unlock(&cap->spool_mutex);
  return rc;
}

int cs_capture_admit(cs_capture *cap, cs_spool_entry *out, size_t capacity, size_t *count, cs_spool_admit_fn each,
                     void *context) {
  if (cap == NULL || count == NULL) return CS_E_INVALID_ARGUMENT;
  cs_spool_recovery pass;
  pthread_mutex_lock(&cap->spool_mutex);
  int rc = cs_spool_admit(cap->spool, out, capacity, count, &pass, each, context);
  /* Under spool_mutex, as every change of what the spool lists reaches the core. */
  pthread_mutex_lock(&cap->mutex);
  for (size_t i = 0; i < *count; i++) cs_sink_on_recovered(&cap->sink, out[i].size_bytes);
  cap->stats.admitted_packs += *count;
  cap->stats.admitted_bytes += pass.ready_bytes;
  cap->stats.admit_quarantined += pass.quarantined;
  cap->stats.admit_errors += pass.errors;
  pthread_mutex_unlock(&cap->mutex);
  pthread_mutex_unlock(&cap->spool_mutex);
  return rc;
}

void cs_capture_stats_get(cs_capture *cap, cs_capture_stats *out) {
  assert(cap != NULL && out != NULL);
  pthread_mutex_lock(&cap->mutex);
  *out = cap->stats;
  cs_sink_stats_get(&cap->sink, &out->sink);
  out->staging_used_bytes = cap->ring.used;
  pthread_mutex_unlock(&cap->mutex);
}

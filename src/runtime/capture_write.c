/*
 * The capture calls: the model's hot path. Validate outside the lock, admit
 * and reserve under it, copy outside it, publish the entry with one atomic
 * store, and wake the worker only when it sleeps.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_internal.h"

static char *copy_text(cs_pack_text text) {
  char *out = malloc(text.len + 1);
  if (out != NULL && text.len > 0) memcpy(out, text.bytes, text.len);
  return out;
}

static bool text_is(cs_pack_text text, const char *bytes, size_t len) {
  return text.len == len && memcmp(text.bytes, bytes, len) == 0;
}

/*
 * The first admitted record fixes tenant, session and rank (the object key
 * names them). A call made before that carries copies of its own, installed
 * under the mutex only if its record is admitted: a refused record fixes
 * nothing.
 */
typedef struct key_copy {
  char *tenant, *session;
} key_copy;

static void key_copy_free(key_copy *k) {
  free(k->tenant);
  free(k->session);
  k->tenant = k->session = NULL;
}

/* The key field meta differs in from the fixed key, or NULL; key_fixed is set. */
static const char *key_mismatch(const cs_capture *cap, const cs_pack_meta *meta) {
  if (!text_is(meta->tenant_id, cap->key_tenant, cap->key_tenant_len)) return "tenant_id";
  if (!text_is(meta->session_id, cap->key_session, cap->key_session_len)) return "session_id";
  if (meta->producer_rank != cap->key_rank) return "producer_rank";
  return NULL;
}

static int key_refusal(const char *field, char *msg, size_t msg_size) {
  return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size,
                "%s differs from this sink's first record: one sink writes one tenant, session "
                "and rank (the object key names them); open another sink", field);
}

/* Outside the mutex: checks against a fixed key, or copies meta's for admission to install. */
static int check_key(cs_capture *cap, const cs_pack_meta *meta, key_copy *copy, char *msg, size_t msg_size) {
  if (atomic_load_explicit(&cap->key_fixed, memory_order_acquire)) {
    const char *field = key_mismatch(cap, meta);
    return field == NULL ? CS_E_OK : key_refusal(field, msg, msg_size);
  }
  copy->tenant = copy_text(meta->tenant_id);
  copy->session = copy_text(meta->session_id);
  if (copy->tenant != NULL && copy->session != NULL) return CS_E_OK;
  key_copy_free(copy);
  return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "key field copy failed");
}

/* Under the mutex, for an admitted record: installs its key if none is fixed yet. */
static void install_key(cs_capture *cap, const cs_pack_meta *meta, key_copy *copy) {
  if (copy->tenant == NULL || atomic_load_explicit(&cap->key_fixed, memory_order_relaxed)) return;
  cap->key_tenant = copy->tenant;
  cap->key_session = copy->session;
  copy->tenant = copy->session = NULL;
  cap->key_tenant_len = meta->tenant_id.len;
  cap->key_session_len = meta->session_id.len;
  cap->key_rank = meta->producer_rank;
  atomic_store_explicit(&cap->key_fixed, true, memory_order_release);
}

static int validate(cs_capture *cap, const cs_pack_meta *meta, const void *bytes, size_t length,
                    char *msg, size_t msg_size) {
  if (cap == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cap is NULL");
  if (meta == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "meta is NULL");
  if (bytes == NULL && length > 0) {
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "bytes is NULL but length is %zu", length);
  }
  if (length > cap->cfg.record_bytes_max) {
    return rt_refuse(CS_E_TOO_LARGE, msg, msg_size, "record of %zu bytes exceeds record_bytes_max (%llu)",
                  length, (unsigned long long)cap->cfg.record_bytes_max);
  }
  cs_pack_error err;
  if (cs_pack_meta_validate(meta, length, &err) != CS_E_OK) {
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "%s", err.message); /* "descriptor: field ..." */
  }
  return CS_E_OK;
}

/* Internal: admission refused because the spool's file system is full (answered CS_E_SPOOL_FULL). */
#define CS_E_NO_SPACE_ (-1000)

/* The refusal message for an admission error, under the mutex; sealing: the core's CS_E_FULL. */
static int admit_refusal(cs_capture *cap, int rc, bool sealing, uint64_t length, char *msg,
                         size_t msg_size) {
  const cs_sink_config *sc = &cap->cfg.sink;
  const char *policy = sc->full_policy == CS_FULL_REFUSE ? "refused at once (CS_FULL_REFUSE)"
                                                          : "refused after block_max_ns (CS_FULL_BLOCK)";
  cs_sink_stats st;
  cs_sink_stats_get(&cap->sink, &st);
  switch (rc) {
  case CS_E_CLOSED: return rt_refuse(rc, msg, msg_size, "the sink is closed");
  case CS_E_FULL:
    if (sealing) {
      return rt_refuse(rc, msg, msg_size,
                    "sealing is behind (%u packs are being written and fsynced, the most in flight; "
                    "the disk is slower than the captures): %s",
                    st.seals_inflight, policy);
    }
    return rt_refuse(rc, msg, msg_size, "staging area full (%llu of %llu bytes in use; the writer is behind): %s",
                  (unsigned long long)cap->ring.used, (unsigned long long)cap->ring.capacity, policy);
  case CS_E_SPOOL_FULL:
    return rt_refuse(rc, msg, msg_size, "spool quota full (%llu of %llu bytes, %u of %u packs): %s",
                  (unsigned long long)st.spool_bytes, (unsigned long long)sc->spool_bytes_max,
                  st.spool_packs, sc->spool_packs_max, policy);
  case CS_E_NO_SPACE_:
    return rt_refuse(CS_E_SPOOL_FULL, msg, msg_size, "spool file system full (%.200s): %s", cap->disk_full_msg, policy);
  case CS_E_TOO_LARGE:
    return rt_refuse(rc, msg, msg_size, "record of %llu bytes can never fit spool_bytes_max (%llu)",
                  (unsigned long long)length, (unsigned long long)sc->spool_bytes_max);
  default: break;
  }
  return rt_refuse(rc, msg, msg_size, "admission failed: %s", cs_strerror(rc));
}

static uint64_t add_saturating(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* Waits for staging room or quota; false once the policy's time is up. */
static bool wait_for_space(cs_capture *cap, uint64_t give_up_ns, uint64_t retry_ns) {
  if (cap->cfg.sink.full_policy == CS_FULL_REFUSE) return false;
  uint64_t now = cs_capture_clock_ns();
  if (now >= give_up_ns) return false;
  uint64_t until = retry_ns < give_up_ns ? retry_ns : give_up_ns;
  cap->producers_waiting++;
  rt_cond_wait_until(&cap->space_cond, &cap->mutex, until);
  cap->producers_waiting--;
  return true;
}

typedef struct admission {
  const cs_pack_meta *meta;
  uint64_t size;   /* staging bytes */
  uint64_t length; /* payload bytes */
  uint64_t footer_bytes; /* the most its descriptor takes of the pack's footer */
  bool device;
  key_copy key;          /* the call's key while none was fixed (check_key) */
  const char *key_field; /* out: the key field that differs from the one fixed meanwhile */
  rt_entry *entry; /* out */
  bool pressure;   /* out: staging is filling up, wake even a polling worker */
  bool sealing;    /* out: refused CS_E_FULL by the core (every seal slot busy), not by staging */
} admission;

/* Under the mutex: admit to the core, queue its actions, reserve the entry. */
static int admit_locked(cs_capture *cap, admission *a, uint64_t first_try_ns) {
  uint64_t give_up_ns = add_saturating(first_try_ns, cap->cfg.sink.block_max_ns);
  bool waited_staging = false, waited_spool = false;
  for (;;) {
    if (cap->close_started) return CS_E_CLOSED;
    if (a->key.tenant != NULL && atomic_load_explicit(&cap->key_fixed, memory_order_relaxed)) {
      a->key_field = key_mismatch(cap, a->meta); /* another call's record fixed it meanwhile */
      if (a->key_field != NULL) return CS_E_INVALID_ARGUMENT;
    }
    uint64_t now = cs_capture_clock_ns();
    if (rt_disk_full(cap, now)) {
      if (!waited_spool) cap->stats.spool_waits += cap->cfg.sink.full_policy == CS_FULL_BLOCK;
      waited_spool = true;
      if (wait_for_space(cap, give_up_ns, now + RT_DISK_FULL_CHECK_NS)) continue;
      cap->stats.disk_full_refused++;
      return CS_E_NO_SPACE_;
    }
    bool room = rt_ring_fits(&cap->ring, a->size) && (!a->device || cap->events_free > 0);
    if (!room) {
      if (!waited_staging) cap->stats.staging_waits += cap->cfg.sink.full_policy == CS_FULL_BLOCK;
      waited_staging = true;
      if (wait_for_space(cap, give_up_ns, CS_NEVER)) continue;
      cap->stats.staging_refused++;
      return CS_E_FULL;
    }
    uint64_t pack_seq = 0;
    int rc = cs_sink_admit_record(&cap->sink, now, a->length, a->footer_bytes, first_try_ns, &pack_seq);
    a->sealing = rc == CS_E_FULL;
    if (rc == CS_E_WOULD_BLOCK) {
      if (!waited_spool) cap->stats.spool_waits++;
      waited_spool = true;
      wait_for_space(cap, give_up_ns, now + 10 * CS_MS_NS);
      continue;
    }
    if (rc != CS_E_OK) return rc;
    install_key(cap, a->meta, &a->key);
    rt_drain_actions(cap, pack_seq, cap->ring.reserved_count);
    a->entry = rt_ring_reserve(&cap->ring, a->size);
    a->entry->pack_seq = pack_seq;
    a->entry->payload_len = a->length;
    if (a->device) {
      a->entry->event = cap->events[--cap->events_free];
      cap->stats.device_copies++;
    }
    a->pressure = cap->ring.used > cap->ring.capacity / 4 ||
                  (a->device && cap->events_free < cap->events_total / 4);
    return CS_E_OK;
  }
}

int rt_capture_key_reserve(cs_capture *cap, const cs_pack_meta *meta, const char **field) {
  *field = NULL;
  key_copy copy = {0};
  int rc = check_key(cap, meta, &copy, NULL, 0);
  if (rc == CS_E_INVALID_ARGUMENT) {
    *field = key_mismatch(cap, meta);
    return rc;
  }
  if (rc != CS_E_OK) return rc;
  pthread_mutex_lock(&cap->mutex);
  if (copy.tenant != NULL && atomic_load_explicit(&cap->key_fixed, memory_order_relaxed))
    *field = key_mismatch(cap, meta); /* another call's record fixed it meanwhile */
  else
    install_key(cap, meta, &copy);
  pthread_mutex_unlock(&cap->mutex);
  key_copy_free(&copy); /* unless install_key took it */
  return *field != NULL ? CS_E_INVALID_ARGUMENT : CS_E_OK;
}

static int admit(cs_capture *cap, admission *a, char *msg, size_t msg_size) {
  int rc = check_key(cap, a->meta, &a->key, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  uint64_t first_try_ns = cs_capture_clock_ns();
  pthread_mutex_lock(&cap->mutex);
  rc = admit_locked(cap, a, first_try_ns);
  if (rc != CS_E_OK && a->key_field != NULL) key_refusal(a->key_field, msg, msg_size);
  else if (rc != CS_E_OK) rc = admit_refusal(cap, rc, a->sealing, a->length, msg, msg_size);
  pthread_mutex_unlock(&cap->mutex);
  key_copy_free(&a->key); /* unless install_key took it */
  return rc;
}

/*
 * Publishes a filled entry. The seq_cst store pairs with the worker's
 * seq_cst sleep flag: an idle worker is always woken; a polling one only
 * under staging pressure (it looks again within RT_POLL_NS anyway).
 */
static void publish(cs_capture *cap, const admission *a, uint32_t state) {
  atomic_store(&a->entry->state, state);
  int sleep = atomic_load(&cap->worker_sleep);
  if (sleep == RT_IDLE || (sleep == RT_POLLING && a->pressure)) {
    pthread_mutex_lock(&cap->mutex);
    pthread_cond_signal(&cap->work_cond);
    pthread_mutex_unlock(&cap->mutex);
  }
}

int cs_capture_write(cs_capture *cap, const cs_pack_meta *meta, const void *bytes, size_t length,
                     char *msg, size_t msg_size) {
  int rc = validate(cap, meta, bytes, length, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  admission a = {.meta = meta, .size = rt_entry_size(meta, length), .length = length,
                 .footer_bytes = cs_pack_meta_footer_bytes_max(meta)};
  rc = admit(cap, &a, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  rt_entry_fill_meta(a.entry, meta);
  if (length > 0) memcpy(rt_entry_payload(a.entry), bytes, length);
  publish(cap, &a, RT_ENTRY_READY);
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

int cs_capture_write_device(cs_capture *cap, const cs_pack_meta *meta, const void *device_bytes,
                            size_t length, void *stream, char *msg, size_t msg_size) {
  int rc = validate(cap, meta, device_bytes, length, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (!cap->device_ok) return rt_refuse(CS_E_UNSUPPORTED, msg, msg_size, "device path: %s", cap->device_msg);
  admission a = {.meta = meta, .size = rt_entry_size(meta, length), .length = length, .device = true,
                 .footer_bytes = cs_pack_meta_footer_bytes_max(meta)};
  rc = admit(cap, &a, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  rt_entry_fill_meta(a.entry, meta);
  rc = length == 0 ? CS_E_OK
                   : rt_cuda_copy_d2h(rt_entry_payload(a.entry), device_bytes, length, stream,
                                      a.entry->event, msg, msg_size);
  if (rc != CS_E_OK) {
    /* Admitted already: the worker skips it and counts it dropped; the caller hears it now. */
    a.entry->err = rc;
    publish(cap, &a, RT_ENTRY_FAILED);
    return rc;
  }
  publish(cap, &a, length == 0 ? RT_ENTRY_READY : RT_ENTRY_DEVICE);
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  return CS_E_OK;
}

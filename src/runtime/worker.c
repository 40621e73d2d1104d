/*
 * The capture worker and its helpers. The worker takes staged records in
 * admission order and streams them through the pack writer (which hashes
 * them, unless hash_thread) into write chunks, and carries out the sink
 * core's actions in their place in that order: SEAL (finish the pack, hand
 * it on to be sealed), FLUSHED and CLOSED (wake the waiting caller). It also
 * ticks the core at its linger deadline (CLOCK_MONOTONIC). With hash_thread
 * the hasher hashes the chunks in order and makes each pack's trailer. The
 * writer thread writes full chunks to the pack's .open file (and the
 * trailer the hasher made) and passes each seal on after the pack's last
 * bytes; the sealer fsyncs, links and reports the outcome to the core.
 * Hashing, writing and sealing of consecutive packs therefore overlap.
 *
 * A record the worker cannot pack is never dropped silently: it is counted
 * in records_dropped and its error is reported by the next flush or close.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include <sched.h>

#include "runtime_internal.h"
#include "thread_name.h"

/* Linux's SCHED_BATCH (sched.h declares it only under _GNU_SOURCE). */
#ifndef SCHED_BATCH
#define SCHED_BATCH 3
#endif

/*
 * The writer and the sealer mostly wait (for a chunk, for the disk). Under
 * the default policy each wake-up preempted whatever ran on its CPU, often a
 * producer in the middle of a capture call, for the length of an I/O
 * submission: the call's tail latency. SCHED_BATCH keeps their share of the
 * CPU but not the wake-up preemption. Best effort: a refusal changes nothing
 * else. (The worker keeps the default: it is the sink's throughput.)
 */
static void run_in_background(void) {
  struct sched_param param = {.sched_priority = 0};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
}

static uint8_t *chunk_at(const cs_capture *cap, uint32_t chunk) {
  assert(chunk < RT_CHUNKS);
  return cap->chunk_area + (size_t)chunk * cap->chunk_bytes;
}

/* Under the mutex: queues an item for the queue's thread (bounded: see RT_IO_MAX). */
static void queue_push(rt_io_queue *q, const rt_io *item) {
  assert(q->count < RT_IO_MAX);
  q->items[(q->head + q->count) % RT_IO_MAX] = *item;
  q->count++;
  pthread_cond_signal(&q->cond);
}

/* Under the mutex: waits for the next item; false once the queue is stopped and empty. */
static bool queue_take(cs_capture *cap, rt_io_queue *q, rt_io *item) {
  while (q->count == 0 && !q->stop) pthread_cond_wait(&q->cond, &cap->mutex);
  if (q->count == 0) return false;
  *item = q->items[q->head];
  q->head = (q->head + 1) % RT_IO_MAX;
  q->count--;
  return true;
}

void rt_queue_stop(rt_io_queue *q) {
  q->stop = true;
  pthread_cond_signal(&q->cond);
}

/* Under the mutex: the worker's items go to the hasher with hash_thread, else to the writer. */
static void stage_push(cs_capture *cap, const rt_io *item) {
  queue_push(cap->cfg.hash_thread ? &cap->hq : &cap->io, item);
}

/* Worker: takes a free chunk, waiting for the writer to return one. */
static void chunk_take(cs_capture *cap) {
  assert(!cap->has_chunk);
  pthread_mutex_lock(&cap->mutex);
  while (cap->chunks_free_count == 0) pthread_cond_wait(&cap->chunk_cond, &cap->mutex);
  cap->chunk = cap->chunks_free[--cap->chunks_free_count];
  pthread_mutex_unlock(&cap->mutex);
  cap->has_chunk = true;
  cap->chunk_fill = 0;
}

/* Worker: hands the chunk being filled to the writer (nothing when it is empty). */
static void chunk_submit(cs_capture *cap) {
  if (!cap->has_chunk || cap->chunk_fill == 0) return;
  assert(cap->file != NULL && cap->chunk_fill <= cap->chunk_bytes);
  rt_io item = {.kind = RT_IO_WRITE, .chunk = cap->chunk, .length = cap->chunk_fill, .file = cap->file};
  pthread_mutex_lock(&cap->mutex);
  stage_push(cap, &item);
  pthread_mutex_unlock(&cap->mutex);
  cap->has_chunk = false;
  cap->chunk_fill = 0;
}

/* Worker: hands the gathered ring reference to the writer (nothing when there is none). */
static void seg_push(cs_capture *cap) {
  if (cap->seg_length == 0) return;
  assert(cap->file != NULL);
  rt_io item = {.kind = RT_IO_REF, .bytes = cap->seg_bytes, .length = cap->seg_length,
                .entry_seq = cap->ref_seq, .file = cap->file};
  pthread_mutex_lock(&cap->mutex);
  while (cap->refs_pending == RT_REFS_MAX) pthread_cond_wait(&cap->chunk_cond, &cap->mutex);
  cap->refs_pending++;
  if (cap->refs_pending > cap->refs_peak) cap->refs_peak = cap->refs_pending;
  stage_push(cap, &item);
  pthread_mutex_unlock(&cap->mutex);
  cap->seg_length = 0;
}

/*
 * Pack writer callback: gathers the bytes just hashed into a ring reference
 * when they are the large payload being packed, else copies them into
 * chunks. Either way the writer gets them in pack order: a reference first
 * submits the chunk before it, and chunk bytes first push the reference.
 * It never fails: a failed write surfaces at the seal (cs_spool_file_sync),
 * which drops the pack's records and reports the error.
 */
static int write_to_chunks(void *context, const uint8_t *bytes, size_t length) {
  cs_capture *cap = context;
  uintptr_t at = (uintptr_t)bytes;
  if (length > 0 && at >= cap->ref_lo && at < cap->ref_hi) {
    assert(length <= cap->ref_hi - at);
    if (cap->seg_length > 0 && cap->seg_bytes + cap->seg_length == bytes) {
      cap->seg_length += length;
      return 0;
    }
    seg_push(cap);
    chunk_submit(cap);
    cap->seg_bytes = bytes;
    cap->seg_length = length;
    return 0;
  }
  seg_push(cap);
  while (length > 0) {
    if (!cap->has_chunk) chunk_take(cap);
    size_t n = cap->chunk_bytes - cap->chunk_fill;
    if (n > length) n = length;
    memcpy(chunk_at(cap, cap->chunk) + cap->chunk_fill, bytes, n);
    cap->chunk_fill += n;
    bytes += n;
    length -= n;
    if (cap->chunk_fill == cap->chunk_bytes) chunk_submit(cap);
  }
  return 0;
}

static void note_error(cs_capture *cap, int err, const char *msg) {
  pthread_mutex_lock(&cap->mutex);
  rt_note_error(cap, err, msg);
  pthread_mutex_unlock(&cap->mutex);
}

static void pack_fail(cs_capture *cap, int err, const char *msg) {
  if (cap->pack_err == CS_E_OK) cap->pack_err = err;
  note_error(cap, err, msg);
}

/*
 * Without either mutex: waits up to RT_DISK_FULL_CHECK_NS, or until a pack
 * leaves the spool, for the spool file system's room; meanwhile disk_full
 * (with why) tells producers to meet the full policy. *counted makes one
 * wait count once in disk_full_waits. False once cs_capture_free gave up
 * waiting (abandon): the caller then fails what it was doing.
 */
static bool room_wait(cs_capture *cap, const char *why, bool *counted) {
  pthread_mutex_lock(&cap->mutex);
  bool go_on = !cap->abandon;
  if (go_on) {
    uint64_t now = cs_capture_clock_ns();
    if (!*counted) cap->stats.disk_full_waits++;
    *counted = true;
    if (!cap->disk_full) {
      cap->disk_full = true;
      cap->disk_full_check_ns = now + RT_DISK_FULL_CHECK_NS;
      uint64_t need = cap->cfg.sink.pack_bytes_max;
      if (need > 8u * 1024u * 1024u) need = 8u * 1024u * 1024u;
      cap->disk_full_need_bytes = need;
      snprintf(cap->disk_full_msg, sizeof cap->disk_full_msg, "%s", why);
    }
    rt_cond_wait_until(&cap->space_cond, &cap->mutex, now + RT_DISK_FULL_CHECK_NS); /* pack_left broadcasts it */
    go_on = !cap->abandon;
  }
  pthread_mutex_unlock(&cap->mutex);
  return go_on;
}

/* Without either mutex: the room waited for was there; admission goes on. */
static void room_back(cs_capture *cap) {
  pthread_mutex_lock(&cap->mutex);
  cap->disk_full = false;
  if (cap->producers_waiting > 0) pthread_cond_broadcast(&cap->space_cond);
  pthread_mutex_unlock(&cap->mutex);
}

/*
 * Opens a pack: a UUIDv7 id, its temp file and a writer streaming into it.
 * A temp file the file system has no room to create (ENOSPC: no inode, or a
 * directory block) is waited for, not failed: the records stay in staging.
 */
static void pack_open(cs_capture *cap) {
  assert(cap->writer == NULL && cap->file == NULL);
  char text[RT_ERROR_MAX];
  uint64_t created_at_ns = rt_realtime_ns();
  cs_uuid id;
  if (rt_uuid7_next(&cap->ids, created_at_ns, &id) != CS_E_OK) {
    pack_fail(cap, CS_E_IO, "getrandom failed for a pack id");
    return;
  }
  int rc;
  bool waited = false;
  for (;;) {
    pthread_mutex_lock(&cap->spool_mutex);
    rc = cs_spool_begin(cap->spool, &id, &cap->file);
    if (rc != CS_E_OK) snprintf(text, sizeof text, "pack temp file: %.300s", cs_spool_last_error(cap->spool));
    pthread_mutex_unlock(&cap->spool_mutex);
    if (rc != CS_E_SPOOL_FULL || !room_wait(cap, "no room to create a pack's temp file", &waited)) break;
  }
  if (waited && rc == CS_E_OK) room_back(cap);
  if (rc != CS_E_OK) {
    pack_fail(cap, rc, text);
    return;
  }
  cs_pack_writer_config config = {.pack_id = id, .created_at_ns = created_at_ns,
                                  .write = write_to_chunks, .write_context = cap,
                                  .hash_elsewhere = cap->cfg.hash_thread};
  cs_pack_error err;
  rc = cs_pack_writer_open(&config, &cap->writer, &err);
  if (rc != CS_E_OK) {
    snprintf(text, sizeof text, "pack writer: %.300s", err.message);
    pack_fail(cap, rc, text);
  }
}

/* Waits for a device copy; CS_E_OK or the error (noted). */
static int wait_device(cs_capture *cap, rt_entry *entry) {
  char text[RT_ERROR_MAX];
  char cuda[256];
  int rc = rt_cuda_event_wait(entry->event, cuda, sizeof cuda);
  if (rc == CS_E_OK) return CS_E_OK;
  snprintf(text, sizeof text, "device copy of record %.*s failed: %s",
           (int)(entry->meta.capture_id.len < 64 ? entry->meta.capture_id.len : 64),
           entry->meta.capture_id.bytes, cuda);
  note_error(cap, rc, text);
  return rc;
}

/* Appends one staged record to its pack. Without the mutex. */
static void handle_record(cs_capture *cap, rt_entry *entry) {
  uint32_t state = atomic_load(&entry->state);
  assert(state != RT_ENTRY_RESERVED);
  assert(cap->pack_seq == 0 || cap->pack_seq == entry->pack_seq);
  cap->pack_seq = entry->pack_seq;
  int rc = state == RT_ENTRY_FAILED ? entry->err : CS_E_OK; /* the caller was told */
  if (rc == CS_E_OK && state == RT_ENTRY_DEVICE) rc = wait_device(cap, entry);
  if (rc == CS_E_OK && cap->pack_err == CS_E_OK && cap->writer == NULL) pack_open(cap);
  if (rc != CS_E_OK || cap->pack_err != CS_E_OK) {
    cap->pack_dropped++;
    return;
  }
  cs_pack_error err;
  if (entry->payload_len >= RT_REF_BYTES_MIN && !cap->cfg.direct_io) {
    cap->ref_lo = (uintptr_t)rt_entry_payload(entry);
    cap->ref_hi = cap->ref_lo + (uintptr_t)entry->payload_len;
    cap->ref_seq = entry->seq;
  }
  rc = cs_pack_writer_add_record(cap->writer, &entry->meta, rt_entry_payload(entry),
                                 (size_t)entry->payload_len, &err);
  seg_push(cap);
  cap->ref_lo = cap->ref_hi = 0;
  if (rc == CS_E_OK) {
    cap->pack_records++;
    return;
  }
  cap->pack_dropped++;
  char text[RT_ERROR_MAX];
  assert(err.kind != CS_PACK_E_WRITE); /* write_to_chunks never fails */
  /* The writer refused this record only (a duplicate capture id, a limit): it stays usable. */
  snprintf(text, sizeof text, "record dropped: the pack writer refused it: %.300s", err.message);
  note_error(cap, rc, text);
}

/* Finishes the pack's writer (to the footer with hash_thread); CS_E_OK or the error (noted). */
static int finish_pack(cs_capture *cap, cs_pack_summary *summary) {
  cs_pack_error err;
  int rc = cap->cfg.hash_thread ? cs_pack_writer_finish_footer(cap->writer, summary, &err)
                                : cs_pack_writer_finish(cap->writer, summary, &err);
  if (rc != CS_E_OK) {
    char text[RT_ERROR_MAX];
    snprintf(text, sizeof text, "pack finish failed: %.300s", err.message);
    note_error(cap, rc, text);
  }
  return rc;
}

/* Forgets the pack: its file (if any) now belongs to a seal job. */
static void pack_reset(cs_capture *cap) {
  assert(!cap->has_chunk || cap->chunk_fill == 0);
  cs_pack_writer_free(cap->writer);
  cap->writer = NULL;
  cap->file = NULL;
  cap->pack_seq = 0;
  cap->pack_err = CS_E_OK;
  cap->pack_records = 0;
  cap->pack_dropped = 0;
}

/*
 * The date of the pack's object key: its first record's captured_at_ns, as
 * DMI's writer dates it. A pack whose every record the writer refused has no
 * first record; its creation time stands in.
 */
static uint64_t key_date_ns(const cs_capture *cap, const cs_pack_summary *summary) {
  cs_pack_key_fields fields;
  cs_pack_error err;
  if (cs_pack_writer_key_fields(cap->writer, &fields, &err) == CS_E_OK) return fields.captured_at_ns;
  return summary->created_at_ns;
}

/*
 * SEAL (worker): finish the pack, hand its last chunk to the writer and the
 * seal after it, so packing the next pack overlaps this one's writes and
 * fsync. Seals are bounded by the core's seals in flight.
 */
static void handle_seal(cs_capture *cap, const cs_sink_action *action) {
  assert(cap->pack_seq == 0 || cap->pack_seq == action->pack_seq);
  rt_seal_job job = {.pack_seq = action->pack_seq, .file = cap->file, .err = cap->pack_err,
                     .records = cap->pack_records, .dropped = cap->pack_dropped};
  job.empty = job.err == CS_E_OK && cap->writer == NULL; /* every record was dropped (and reported) */
  if (job.err == CS_E_OK && !job.empty) job.err = finish_pack(cap, &job.summary);
  if (job.err == CS_E_OK && !job.empty) job.key_captured_at_ns = key_date_ns(cap, &job.summary);
  if (job.err == CS_E_OK) chunk_submit(cap);
  cap->chunk_fill = 0; /* a failed pack's last bytes are not written: its file is dropped */
  pack_reset(cap);
  rt_io item = {.kind = RT_IO_SEAL, .seal = job};
  pthread_mutex_lock(&cap->mutex);
  stage_push(cap, &item);
  pthread_mutex_unlock(&cap->mutex);
}

/*
 * Under spool_mutex, before the sink core hears of the seal: tells the
 * capture's owner (the service runtime) of a newly sealed pack. The key
 * fields are the sink's fixed ones (set by the capture's first record) and
 * the date of the pack's first record.
 */
static void report_sealed(cs_capture *cap, const cs_spool_entry *entry, const rt_seal_job *job) {
  const cs_pack_summary *summary = &job->summary;
  if (cap->cfg.on_sealed == NULL) return;
  assert(atomic_load_explicit(&cap->key_fixed, memory_order_acquire));
  cs_pack_key_fields fields = {
      .tenant_id = {.bytes = cap->key_tenant, .len = cap->key_tenant_len},
      .session_id = {.bytes = cap->key_session, .len = cap->key_session_len},
      .producer_rank = cap->key_rank,
      .captured_at_ns = job->key_captured_at_ns,
      .pack_id = summary->pack_id,
  };
  cap->cfg.on_sealed(cap->cfg.on_sealed_context, entry, summary, &fields);
}

/* Sealer: fsync (outside every lock), then link and report under the spool mutex. */
static void seal_job(cs_capture *cap, rt_seal_job *job) {
  char text[RT_ERROR_MAX] = "";
  int rc = job->err;
  if (rc == CS_E_OK && !job->empty) {
    rc = cs_spool_file_sync(job->file, &job->summary);
    if (rc != CS_E_OK) snprintf(text, sizeof text, "pack seal failed: %.300s", cs_spool_file_error(job->file));
  }
  uint64_t size = 0;
  cs_spool_seal_result result = CS_SPOOL_SEALED;
  pthread_mutex_lock(&cap->spool_mutex);
  if (rc == CS_E_OK && !job->empty) {
    cs_spool_entry entry;
    rc = cs_spool_seal(cap->spool, job->file, &job->summary, &entry, &result);
    /* No room for the ready name: the synced file was kept; wait for room (removals need the spool mutex). */
    for (bool waited = false; rc == CS_E_SPOOL_FULL;) {
      pthread_mutex_unlock(&cap->spool_mutex);
      bool go_on = room_wait(cap, "a sealed pack waits for room for its name in the spool directory", &waited);
      pthread_mutex_lock(&cap->spool_mutex);
      if (!go_on) {
        snprintf(text, sizeof text, "pack seal failed: %.300s", cs_spool_last_error(cap->spool));
        cs_spool_abort(cap->spool, job->file);
        break;
      }
      rc = cs_spool_seal(cap->spool, job->file, &job->summary, &entry, &result);
      if (rc != CS_E_SPOOL_FULL) {
        pthread_mutex_unlock(&cap->spool_mutex);
        room_back(cap);
        pthread_mutex_lock(&cap->spool_mutex);
      }
    }
    if (rc != CS_E_OK && text[0] == '\0')
      snprintf(text, sizeof text, "pack seal failed: %.300s", cs_spool_last_error(cap->spool));
    size = rc == CS_E_OK ? entry.size_bytes : 0;
    if (rc == CS_E_OK && result == CS_SPOOL_SEALED) report_sealed(cap, &entry, job);
  } else if (job->file != NULL) {
    cs_spool_abort(cap->spool, job->file);
  }
  pthread_mutex_lock(&cap->mutex);
  if (rc != CS_E_OK && rc != job->err) rt_note_error(cap, rc, text);
  int core_rc = cs_sink_on_sealed(&cap->sink, cs_capture_clock_ns(), job->pack_seq, size, rc);
  assert(core_rc == CS_E_OK);
  (void)core_rc;
  /* No file was made for an empty pack: it leaves the spool as it is "sealed". */
  if (job->empty) cs_sink_on_removed(&cap->sink, 0);
  rt_drain_actions(cap, 0, cap->ring.reserved_count);
  rt_wake_worker(cap);
  if (rc == CS_E_OK) {
    cap->stats.records_written += job->records;
    cap->stats.records_dropped += job->dropped;
    cap->stats.packs_sealed += !job->empty && result == CS_SPOOL_SEALED;
    cap->stats.bytes_sealed += size;
  } else {
    cap->stats.records_dropped += job->records + job->dropped;
  }
  /* A seal slot is free again (and a failed seal returned its quota): blocked producers retry now. */
  if (cap->producers_waiting > 0) pthread_cond_broadcast(&cap->space_cond);
  pthread_mutex_unlock(&cap->mutex);
  pthread_mutex_unlock(&cap->spool_mutex);
}

/* Under the mutex: passes a seal on to the sealer, after every chunk of its pack. */
static void seal_push(cs_capture *cap, const rt_seal_job *job) {
  assert(cap->seal_count < RT_SEALS_MAX);
  cap->seal_jobs[(cap->seal_head + cap->seal_count) % RT_SEALS_MAX] = *job;
  cap->seal_count++;
  pthread_cond_signal(&cap->seal_cond);
}

/*
 * Whether releasing an entry should wake producers waiting for staging room.
 * Waking them after every entry made a full ring of small records ping-pong
 * (a producer woke, filled the one entry freed, slept again: two context
 * switches per record). They are woken when the free room crosses an eighth
 * or a half of the ring, when it empties (any record fits then: records are
 * at most a quarter of it), or when a device event comes back to an empty
 * pool.
 */
static bool wake_producers(const rt_ring *ring, uint64_t free_before, bool event_returned) {
  uint64_t free_after = ring->capacity - ring->used;
  assert(free_after >= free_before);
  if (ring->used == 0 || event_returned) return true;
  uint64_t eighth = ring->capacity / 8, half = ring->capacity / 2;
  return (free_before < eighth && free_after >= eighth) || (free_before < half && free_after >= half);
}

/* Under the mutex: releases ring entries through count and wakes producers as above. */
static void release_through(cs_capture *cap, uint64_t count, bool event_returned) {
  uint64_t free_before = cap->ring.capacity - cap->ring.used;
  rt_ring_release_through(&cap->ring, count);
  if (cap->producers_waiting > 0 && wake_producers(&cap->ring, free_before, event_returned)) {
    pthread_cond_broadcast(&cap->space_cond);
  }
}

/*
 * Writer, without the mutex: reserves the spool file system's room for the
 * next length bytes of file before writing them (cs_spool_file_reserve).
 * While the file system is full it waits here, the bytes still in their
 * chunk or staging entry: no record is lost to a full disk. Behind it the
 * worker waits for chunks, staging fills, and producers meet the full
 * policy (disk_full tells them at once). It tries again every
 * RT_DISK_FULL_CHECK_NS and whenever a pack leaves the spool. Only
 * cs_capture_free ends the wait (abandon): the write then fails, and its
 * pack's records are dropped and counted.
 */
static void reserve_room(cs_capture *cap, cs_spool_file *file, size_t length) {
  bool waited = false;
  for (;;) {
    int rc = cs_spool_file_reserve(file, length);
    if (rc != CS_E_SPOOL_FULL) {
      if (waited) room_back(cap); /* there was room for this write */
      return;
    }
    if (!room_wait(cap, "the pack being written waits for room (fallocate: no space)", &waited)) return;
  }
}

/* Writer, without the mutex: reserve, then write (a failed write fails the file; its seal reports it). */
static void write_reserved(cs_capture *cap, cs_spool_file *file, const void *bytes, size_t length) {
  reserve_room(cap, file, length);
  (void)cs_spool_file_write(file, bytes, length);
}

/*
 * The writer thread: writes chunks and ring references in order (outside
 * the lock), each after reserving its room, returns the chunks to the
 * worker and releases the ring entries a reference held. A failed write
 * fails the file; its seal reports it.
 */
void *rt_writer_main(void *context) {
  cs_capture *cap = context;
  rt_thread_name("cs-writer");
  run_in_background();
  pthread_mutex_lock(&cap->mutex);
  rt_io item;
  while (queue_take(cap, &cap->io, &item)) {
    if (item.kind == RT_IO_SEAL) {
      if (item.seal.trailer_pending) { /* hash_thread: the pack's last bytes */
        pthread_mutex_unlock(&cap->mutex);
        write_reserved(cap, item.seal.file, item.seal.trailer, sizeof item.seal.trailer);
        pthread_mutex_lock(&cap->mutex);
      }
      seal_push(cap, &item.seal);
      continue;
    }
    if (item.kind == RT_IO_REF) {
      pthread_mutex_unlock(&cap->mutex);
      write_reserved(cap, item.file, item.bytes, item.length);
      pthread_mutex_lock(&cap->mutex);
      assert(cap->refs_pending > 0);
      cap->refs_pending--;
      /* Its entry, and those the worker finished after it when no reference is left, are free. */
      uint64_t through = item.entry_seq + 1;
      if (cap->refs_pending == 0 || through > cap->ring.consumed_count) through = cap->ring.consumed_count;
      release_through(cap, through, false);
      pthread_cond_signal(&cap->chunk_cond);
      continue;
    }
    assert(item.kind == RT_IO_WRITE && item.length <= cap->chunk_bytes);
    pthread_mutex_unlock(&cap->mutex);
    write_reserved(cap, item.file, chunk_at(cap, item.chunk), item.length);
    pthread_mutex_lock(&cap->mutex);
    assert(cap->chunks_free_count < RT_CHUNKS);
    cap->chunks_free[cap->chunks_free_count++] = item.chunk;
    pthread_cond_signal(&cap->chunk_cond);
  }
  cap->sealer_stop = true; /* the writer's queue was the sealer's only source */
  pthread_cond_signal(&cap->seal_cond);
  pthread_mutex_unlock(&cap->mutex);
  return NULL;
}

/*
 * Hasher: at a pack's seal, the digest of every byte so far is the
 * trailer's; the trailer is made, hashed for the object's SHA-256 and left
 * in the job for the writer. Then the context starts over for the next pack
 * (every pack's items end with its seal, a failed pack's too).
 */
static void hash_seal(cs_capture *cap, rt_seal_job *job) {
  if (job->err == CS_E_OK && !job->empty) {
    unsigned int len = 0, len2 = 0;
    bool ok = !cap->hash_failed && EVP_MD_CTX_copy_ex(cap->hash_copy, cap->hash_ctx) == 1 &&
              EVP_DigestFinal_ex(cap->hash_copy, job->summary.trailer_sha256, &len) == 1 && len == 32;
    if (ok) {
      cs_pack_trailer_encode(&job->summary, job->trailer);
      ok = EVP_DigestUpdate(cap->hash_ctx, job->trailer, sizeof job->trailer) == 1 &&
           EVP_DigestFinal_ex(cap->hash_ctx, job->summary.sha256, &len2) == 1 && len2 == 32;
    }
    if (ok) {
      job->trailer_pending = true;
    } else {
      job->err = CS_E_NO_MEMORY;
      note_error(cap, CS_E_NO_MEMORY, "pack seal failed: SHA-256 on the hash thread failed");
    }
  }
  cap->hash_failed = EVP_DigestInit_ex(cap->hash_ctx, EVP_sha256(), NULL) != 1;
}

/*
 * The hasher thread (hash_thread): feeds the bytes of each item (a chunk, a
 * ring reference) to the pack's SHA-256 in order, finishes the digests at
 * its seal, and passes every item on to the writer. The writer frees chunks
 * and references after it, so nothing it reads changes under it.
 */
void *rt_hasher_main(void *context) {
  cs_capture *cap = context;
  rt_thread_name("cs-hasher");
  pthread_mutex_lock(&cap->mutex);
  rt_io item;
  while (queue_take(cap, &cap->hq, &item)) {
    pthread_mutex_unlock(&cap->mutex);
    if (item.kind == RT_IO_SEAL) {
      hash_seal(cap, &item.seal);
    } else {
      const uint8_t *bytes = item.kind == RT_IO_REF ? item.bytes : chunk_at(cap, item.chunk);
      if (!cap->hash_failed && EVP_DigestUpdate(cap->hash_ctx, bytes, item.length) != 1) cap->hash_failed = true;
    }
    pthread_mutex_lock(&cap->mutex);
    queue_push(&cap->io, &item);
  }
  rt_queue_stop(&cap->io); /* the hasher's queue was the writer's only source */
  pthread_mutex_unlock(&cap->mutex);
  return NULL;
}

void *rt_sealer_main(void *context) {
  cs_capture *cap = context;
  rt_thread_name("cs-sealer");
  run_in_background();
  pthread_mutex_lock(&cap->mutex);
  for (;;) {
    while (cap->seal_count == 0 && !cap->sealer_stop) pthread_cond_wait(&cap->seal_cond, &cap->mutex);
    if (cap->seal_count == 0) break;
    rt_seal_job job = cap->seal_jobs[cap->seal_head];
    cap->seal_head = (cap->seal_head + 1) % RT_SEALS_MAX;
    cap->seal_count--;
    pthread_mutex_unlock(&cap->mutex);
    seal_job(cap, &job);
    pthread_mutex_lock(&cap->mutex);
  }
  pthread_mutex_unlock(&cap->mutex);
  return NULL;
}

/*
 * Under the mutex: the error a flush or close reports, taken once. The
 * core's own (the action's err: a seal that failed since its last report) is
 * not used: every failure the worker passes to the core was noted here
 * first, when it happened, so the core's would report it a second time.
 */
static int take_report(cs_capture *cap, char *msg, size_t msg_size) {
  int err = cap->pending_err;
  snprintf(msg, msg_size, "%s", err != CS_E_OK ? cap->pending_msg : "");
  cap->pending_err = CS_E_OK;
  cap->pending_msg[0] = '\0';
  return err;
}

void rt_take_flushed(cs_capture *cap, const cs_sink_action *action) {
  assert(action->op == CS_SINK_FLUSHED);
  /* A flush that timed out may be answered after a later one its caller took at once (flush_locked). */
  if (action->flush_id <= cap->flush_done_id) return;
  cap->flush_done_id = action->flush_id;
  /* Taken only for a caller still waiting: a timed-out flush leaves the error for the next one. */
  if (action->flush_id == cap->flush_waiting_id) {
    cap->flush_done_err = take_report(cap, cap->flush_done_msg, sizeof cap->flush_done_msg);
  }
}

static void handle_action(cs_capture *cap, const cs_sink_action *action) {
  if (action->op == CS_SINK_SEAL) {
    handle_seal(cap, action);
    return;
  }
  pthread_mutex_lock(&cap->mutex);
  if (action->op == CS_SINK_FLUSHED) {
    rt_take_flushed(cap, action);
  } else {
    assert(action->op == CS_SINK_CLOSED);
    cap->close_err = take_report(cap, cap->close_msg, sizeof cap->close_msg);
    cap->close_done = true;
    pthread_cond_broadcast(&cap->space_cond);
  }
  pthread_cond_broadcast(&cap->done_cond);
  pthread_mutex_unlock(&cap->mutex);
}

/* Under the mutex: the next control action whose records are all consumed. */
static bool control_ready(const cs_capture *cap) {
  return cap->control_count > 0 &&
         cap->control[cap->control_head].position <= cap->ring.consumed_count;
}

/* Under the mutex: true when the loop has something to do now. */
static bool has_work(cs_capture *cap, uint64_t deadline_ns) {
  if (control_ready(cap) || cap->close_done) return true;
  rt_entry *head = rt_ring_next(&cap->ring);
  if (head != NULL && atomic_load(&head->state) != RT_ENTRY_RESERVED) return true;
  return deadline_ns != CS_NEVER && cs_capture_clock_ns() >= deadline_ns;
}

/*
 * Under the mutex: sleeps until woken or deadline_ns (the linger deadline).
 * With a pack open or a record being filled it polls instead (RT_POLL_NS),
 * so producers need not wake it. The flag pairs with the producers' publish.
 */
static void sleep_until(cs_capture *cap, uint64_t deadline_ns) {
  bool active = cs_sink_next_deadline(&cap->sink) != CS_NEVER || /* a pack is open */
                cap->ring.consumed_count < cap->ring.reserved_count;
  if (active) {
    uint64_t poll_ns = cs_capture_clock_ns() + RT_POLL_NS;
    if (poll_ns < deadline_ns) deadline_ns = poll_ns;
  }
  atomic_store(&cap->worker_sleep, active ? RT_POLLING : RT_IDLE);
  if (!has_work(cap, deadline_ns)) rt_cond_wait_until(&cap->work_cond, &cap->mutex, deadline_ns);
  atomic_store(&cap->worker_sleep, RT_AWAKE);
}

/*
 * demote_staging: moves an entry's lines from the worker's caches to the
 * shared one (CLDEMOTE, a hint; older x86 processors execute it as a NOP).
 * The producer that reuses the room then takes its lines from there rather
 * than from the worker's core: measured on 16 cores, the 64 KiB call's p99
 * fell from 15.8 to 12.5 us and the 1 MiB call's from 236 to 156 us; on 2
 * vCPUs it slowed the worker (docs/spool.md).
 */
static void demote_entry(const rt_entry *entry) {
#if defined(__x86_64__) || defined(__i386__)
  const uint8_t *at = (const uint8_t *)entry;
  const uint8_t *end = at + entry->size;
  for (; at < end; at += RT_ALIGN) __asm__ volatile("cldemote (%0)" : : "r"(at) : "memory");
#else
  (void)entry;
#endif
}

/*
 * Under the mutex, before a pack is opened: true while the spool's file
 * system has no room for one (disk_full, or statvfs finds less free than
 * it needs). Opening a pack that cannot fit would lose its records to
 * ENOSPC; waiting keeps them in staging until room returns.
 */
static bool no_room_for_pack(cs_capture *cap) {
  if (cap->abandon) return false; /* cs_capture_free: what cannot be written is dropped, not waited for */
  /*
   * Where the file system reserves (fallocate), the writer waits for room with the bytes kept, so a pack
   * may always open: guessing a pack's room here only stalled small file systems with room for what
   * was actually written (a 2 MiB pack bound on 3 MiB free waited for ever).
   */
  if (cs_spool_reserves(cap->spool)) return false;
  uint64_t now = cs_capture_clock_ns();
  if (cap->disk_full) return rt_disk_full(cap, now);
  struct statvfs vfs;
  if (cap->spool_dir == NULL || statvfs(cap->spool_dir, &vfs) != 0) return false;
  /*
   * A pack's room: the packs sealed so far were this large on average (before the first, the
   * pack size limit up to a quarter of the file system), and every pack still being written
   * and fsynced takes its room from the same free space.
   */
  uint64_t pack = cap->cfg.sink.pack_bytes_max, quarter = (uint64_t)vfs.f_blocks * vfs.f_frsize / 4;
  if (pack > quarter) pack = quarter;
  if (cap->stats.packs_sealed > 0) pack = cap->stats.bytes_sealed / cap->stats.packs_sealed;
  cs_sink_stats st;
  cs_sink_stats_get(&cap->sink, &st);
  uint64_t need = pack * (st.seals_inflight + 1u) + 64u * 1024u;
  uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
  if (free_bytes >= need) return false;
  char text[RT_ERROR_MAX];
  snprintf(text, sizeof text, "the spool's file system has %llu bytes free, a pack needs %llu",
           (unsigned long long)free_bytes, (unsigned long long)need);
  cap->disk_full = true;
  cap->disk_full_need_bytes = need;
  cap->disk_full_check_ns = now + RT_DISK_FULL_CHECK_NS;
  snprintf(cap->disk_full_msg, sizeof cap->disk_full_msg, "%s", text);
  return true;
}

/* Under the mutex: consumes the next entry (unlocking while packing it). */
static void consume(cs_capture *cap, rt_entry *entry) {
  pthread_mutex_unlock(&cap->mutex);
  handle_record(cap, entry);
  if (cap->cfg.demote_staging) demote_entry(entry);
  pthread_mutex_lock(&cap->mutex);
  bool event_returned = entry->event != NULL && cap->events_free == 0;
  if (entry->event != NULL) cap->events[cap->events_free++] = entry->event;
  assert(cap->events_free <= cap->events_total);
  rt_ring_consume(&cap->ring, entry);
  /* With references in flight the writer releases (in order) as it writes them. */
  if (cap->refs_pending == 0) release_through(cap, cap->ring.consumed_count, event_returned);
  else if (event_returned && cap->producers_waiting > 0) pthread_cond_broadcast(&cap->space_cond);
}

void *rt_worker_main(void *context) {
  cs_capture *cap = context;
  rt_thread_name("cs-capture");
  pthread_mutex_lock(&cap->mutex);
  for (;;) {
    if (control_ready(cap)) {
      cs_sink_action action = cap->control[cap->control_head].action;
      cap->control_head = (cap->control_head + 1) % RT_CONTROL_MAX;
      cap->control_count--;
      pthread_mutex_unlock(&cap->mutex);
      handle_action(cap, &action);
      pthread_mutex_lock(&cap->mutex);
      continue;
    }
    uint64_t deadline_ns = cs_sink_next_deadline(&cap->sink);
    if (deadline_ns != CS_NEVER && cs_capture_clock_ns() >= deadline_ns) {
      cs_sink_tick(&cap->sink, cs_capture_clock_ns());
      rt_drain_actions(cap, 0, cap->ring.reserved_count);
      if (control_ready(cap)) continue;
    }
    rt_entry *head = rt_ring_next(&cap->ring);
    if (head != NULL && atomic_load(&head->state) != RT_ENTRY_RESERVED) {
      if (cap->writer == NULL && cap->pack_err == CS_E_OK && no_room_for_pack(cap)) {
        /* The records wait in staging (producers meet the full policy) until a pack fits again. */
        rt_cond_wait_until(&cap->work_cond, &cap->mutex, cs_capture_clock_ns() + RT_DISK_FULL_CHECK_NS);
        continue;
      }
      consume(cap, head);
      continue;
    }
    if (cap->close_done && head == NULL && cap->control_count == 0) break;
    sleep_until(cap, cs_sink_next_deadline(&cap->sink));
  }
  /* CLOSED came after every seal: the queues are empty. The next stage stops the one after it. */
  rt_queue_stop(cap->cfg.hash_thread ? &cap->hq : &cap->io);
  pthread_mutex_unlock(&cap->mutex);
  return NULL;
}

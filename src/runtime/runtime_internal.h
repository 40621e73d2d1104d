/*
 * runtime_internal.h: what the files of the capture runtime (src/runtime)
 * and its CUDA adapter (src/adapters/cuda_copy.c) share. Not installed.
 *
 * Threads: producers (any thread calling cs_capture_write*), the worker
 * (packs: layout, CRC-32, the copy into chunks, and the SHA-256 unless
 * hash_thread), the hasher (hash_thread only: the SHA-256 and the trailer),
 * the writer (writes the chunks and references to the pack's temp file) and
 * the sealer (fsyncs and links finished packs). Everything in cs_capture is
 * guarded by `mutex` except where a field says otherwise. Lock order:
 * spool_mutex, then mutex (never the other way): a
 * seal and its report to the sink core happen under spool_mutex, so a pack
 * listed by a remover is always one the core already counts.
 */
#ifndef CAPSTORE_RUNTIME_INTERNAL_H
#define CAPSTORE_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "capstore/capture.h"

#define RT_HIDDEN __attribute__((visibility("hidden")))
#define RT_ALIGN 64u
#define RT_ERROR_MAX 384u

static inline uint64_t rt_align_up(uint64_t value) {
  return (value + (RT_ALIGN - 1)) & ~(uint64_t)(RT_ALIGN - 1);
}

/* ---- UUIDv7 (uuid7.c) ---- */

typedef struct rt_uuid7 {
  uint64_t last_ms;
  uint32_t counter; /* 12 bits: orders ids made in the same millisecond */
} rt_uuid7;

/*
 * A UUIDv7 for unix_ns (RFC 9562: 48-bit milliseconds, version 7, a 12-bit
 * counter that starts random in each millisecond, variant 10, 62 random
 * bits). Ids from one generator are strictly increasing even when the clock
 * stalls or steps back. random must hold 10 bytes (from getrandom).
 */
RT_HIDDEN void rt_uuid7_make(rt_uuid7 *gen, uint64_t unix_ns, const uint8_t random[10], cs_uuid *out);
/* rt_uuid7_make with CLOCK_REALTIME and getrandom; CS_E_IO when getrandom fails. */
RT_HIDDEN int rt_uuid7_next(rt_uuid7 *gen, uint64_t unix_ns, cs_uuid *out);

/* Writes the formatted sentence to msg (when given) and returns code: every refusal of the runtime (capture.c). */
RT_HIDDEN int rt_refuse(int code, char *msg, size_t msg_size, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * capstore_write without the reserved-hook check: the capture-array writer's path for its records (hooks
 * "capstore.array-*", which capstore_write refuses so no other record can pose as an array's).
 */
typedef struct capstore capstore;
RT_HIDDEN int rt_capstore_write_reserved(capstore *cs, const cs_pack_meta *meta, const void *bytes, size_t length,
                                         char *msg, size_t msg_size);
/*
 * Fixes cs's key (tenant, session, rank: what its first record fixes) to meta's now, as an admitted record
 * would, or finds it fixed to meta's: CS_E_OK. CS_E_INVALID_ARGUMENT with *field the key field that differs
 * when another key is fixed; CS_E_CLOSED, CS_E_NO_MEMORY. The capture-array writer reserves its instance
 * before its geometry claim, so no other tenant's record can be admitted between the claim and its record.
 */
RT_HIDDEN int rt_capstore_key_reserve(capstore *cs, const cs_pack_meta *meta, const char **field);
RT_HIDDEN int rt_capture_key_reserve(cs_capture *cap, const cs_pack_meta *meta, const char **field);

/* ---- Clocks and waits (capture.c) ---- */

RT_HIDDEN uint64_t rt_realtime_ns(void);
/* Waits on cond until signalled or deadline_ns (CLOCK_MONOTONIC; CS_NEVER: no deadline). */
RT_HIDDEN void rt_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t deadline_ns);

/* ---- The staging ring (stage.c) ---- */

enum rt_entry_state {
  RT_ENTRY_RESERVED = 0, /* a producer is filling it */
  RT_ENTRY_READY,        /* host bytes are in place */
  RT_ENTRY_DEVICE,       /* a device copy was started: wait on event */
  RT_ENTRY_FAILED,       /* the producer could not fill it: skip (err says why) */
};

enum rt_entry_kind {
  RT_ENTRY_RECORD = 1,
  RT_ENTRY_WRAP,         /* the rest of the ring is unused: go to offset 0 */
};

/* One staged record: this header, its texts, then its payload (each 64-aligned). */
typedef struct rt_entry {
  alignas(RT_ALIGN) _Atomic uint32_t state;
  uint32_t kind;
  uint64_t size;         /* bytes of the whole entry, a multiple of 64 */
  uint64_t seq;          /* entry number, from 0 */
  uint64_t pack_seq;     /* the sink core's pack */
  uint64_t payload_len;
  uint64_t payload_offset; /* from the entry's start */
  void *event;           /* RT_ENTRY_DEVICE: the copy's completion event */
  int err;               /* RT_ENTRY_FAILED */
  cs_pack_meta meta;     /* text pointers into this entry */
} rt_entry;

/*
 * Entries are reserved at tail, consumed by the worker at next and released
 * at head, all in one order. Consumed is not released: the writer thread may
 * still be writing a consumed entry's payload from the ring (RT_IO_REF).
 */
typedef struct rt_ring {
  uint8_t *base;
  uint64_t capacity; /* a multiple of 64 */
  uint64_t head;     /* offset of the oldest entry held */
  uint64_t next;     /* offset of the next entry to consume */
  uint64_t tail;     /* offset of the next entry to reserve */
  uint64_t used;     /* bytes held, wasted wrap space included */
  uint64_t reserved_count; /* entries reserved so far */
  uint64_t consumed_count; /* entries the worker has finished with */
  uint64_t released_count; /* entries whose bytes are free again */
} rt_ring;

/* Bytes an entry for meta and a payload of length needs. */
RT_HIDDEN uint64_t rt_entry_size(const cs_pack_meta *meta, uint64_t length);
/* True when an entry of size bytes fits now. */
RT_HIDDEN bool rt_ring_fits(const rt_ring *ring, uint64_t size);
/* Reserves size bytes (rt_ring_fits must hold); returns the entry, its seq set. */
RT_HIDDEN rt_entry *rt_ring_reserve(rt_ring *ring, uint64_t size);
/* The next entry to consume, skipping wrap markers; NULL when none is reserved. */
RT_HIDDEN rt_entry *rt_ring_next(rt_ring *ring);
/* Marks the entry rt_ring_next returned consumed (its bytes stay held). */
RT_HIDDEN void rt_ring_consume(rt_ring *ring, rt_entry *entry);
/* Releases consumed entries, oldest first, until released_count reaches count. */
RT_HIDDEN void rt_ring_release_through(rt_ring *ring, uint64_t count);
/* Copies meta's texts after the header and points entry->meta at them. */
RT_HIDDEN void rt_entry_fill_meta(rt_entry *entry, const cs_pack_meta *meta);
static inline uint8_t *rt_entry_payload(rt_entry *entry) {
  return (uint8_t *)entry + entry->payload_offset;
}

/* ---- CUDA adapter (src/adapters/cuda_copy.c) ---- */

/* CS_E_OK when a device is usable; CS_E_UNSUPPORTED with msg otherwise. */
RT_HIDDEN int rt_cuda_probe(char *msg, size_t msg_size);
RT_HIDDEN int rt_cuda_host_alloc(size_t size, void **out, char *msg, size_t msg_size);
RT_HIDDEN void rt_cuda_host_free(void *ptr);
RT_HIDDEN int rt_cuda_event_create(void **out, char *msg, size_t msg_size);
RT_HIDDEN void rt_cuda_event_destroy(void *event);
/* cudaMemcpyAsync(dst, src, D2H, stream) then cudaEventRecord(event, stream). */
RT_HIDDEN int rt_cuda_copy_d2h(void *dst, const void *src, size_t length, void *stream, void *event,
                               char *msg, size_t msg_size);
/* Waits for event on the calling thread (the worker, never a producer). */
RT_HIDDEN int rt_cuda_event_wait(void *event, char *msg, size_t msg_size);

/* ---- The sink ---- */

/* A sink action and the entry count it must wait for before it runs. */
typedef struct rt_control {
  cs_sink_action action;
  uint64_t position;
} rt_control;

#define RT_CONTROL_MAX 16u

/*
 * How the worker sleeps. While a pack is open it polls (wakes every
 * RT_POLL_NS), so producers need not wake it: a wake is a system call that
 * would dominate the capture call's tail latency. Only an idle worker (no
 * pack open) must be woken, or one that polls while staging fills up.
 */
enum rt_sleep { RT_AWAKE = 0, RT_POLLING, RT_IDLE };
#define RT_POLL_NS (1000u * 1000u)
#define RT_DISK_FULL_CHECK_NS (100u * 1000u * 1000u)

/* A finished pack on its way to the sealer thread. */
typedef struct rt_seal_job {
  uint64_t pack_seq;
  cs_spool_file *file;     /* NULL when the pack has no file */
  cs_pack_summary summary;
  uint64_t key_captured_at_ns; /* the first record's captured_at_ns: the object key's date */
  int err;                 /* the pack failed before its seal (noted already) */
  bool empty;              /* every record was dropped: no file, nothing to seal */
  uint32_t records;
  uint32_t dropped;
  bool trailer_pending;    /* hash_thread: the writer writes trailer before the seal */
  uint8_t trailer[CS_PACK_TRAILER_SIZE];
} rt_seal_job;

/* One job per seal in flight in the sink core. */
#define RT_SEALS_MAX CS_SINK_SEALS_MAX

/*
 * Write chunks: the worker copies a pack's bytes (as the pack writer hashes
 * them; large payloads excepted, see RT_IO_REF) into aligned chunks and hands
 * each full one on to the writer thread (through the hasher with
 * hash_thread), which writes it to the temp file in place (the spool writes
 * aligned pieces with O_DIRECT without copying). So hashing never waits for
 * the disk, and the disk never waits for hashing while a chunk is ready. A
 * chunk holds bytes of one pack only: the worker hands over a partial chunk
 * at a seal. The chunk size follows staging_bytes (1/64 of it, 64 KiB to
 * 4 MiB: 2 MiB by default), so the chunks add about an eighth to the staging
 * area's memory (at least 512 KiB). The size is the disk's: one direct write
 * at a time of 1 MiB reached 1.0-1.4 GB/s where 2 and 4 MiB reached 1.5-1.7
 * (docs/spool.md). Eight chunks ride out the disk's slower moments (about
 * 12 ms at 1.3 GB/s) without the worker waiting.
 */
#define RT_CHUNKS 8u
#define RT_CHUNK_BYTES_MIN ((size_t)64 * 1024)
#define RT_CHUNK_BYTES_MAX ((size_t)4 * 1024 * 1024)
#define RT_CHUNK_ALIGN ((size_t)4096)

/*
 * Large payloads skip the chunks: the worker hashes them in the staging ring
 * and hands the writer a reference (RT_IO_REF) to write them from there, so
 * the one copy a large record costs beyond the capture call's own is off the
 * worker, whose hashing is the sink's critical path. The entry stays held in
 * the ring until the writer has written it. Smaller payloads are copied into
 * chunks, which writes them in fewer, larger pieces. At most RT_REFS_MAX
 * references are in flight; the worker waits for the writer beyond that.
 */
#define RT_REF_BYTES_MIN ((size_t)256 * 1024)
#define RT_REFS_MAX 32u

/* An item for the writer thread, in pack byte order: a chunk, a ring reference or a seal. */
enum rt_io_kind { RT_IO_WRITE = 1, RT_IO_REF, RT_IO_SEAL };
typedef struct rt_io {
  uint32_t kind;
  uint32_t chunk;          /* RT_IO_WRITE: index of the chunk */
  size_t length;           /* RT_IO_WRITE, RT_IO_REF: bytes to write */
  const uint8_t *bytes;    /* RT_IO_REF: a payload in the ring */
  uint64_t entry_seq;      /* RT_IO_REF: the ring entry holding it */
  cs_spool_file *file;     /* RT_IO_WRITE, RT_IO_REF: the pack's temp file */
  rt_seal_job seal;        /* RT_IO_SEAL: goes to the sealer after the pack's last bytes */
} rt_io;

/* Chunks, references and seals in flight bound the hasher's and the writer's queues. */
#define RT_IO_MAX (RT_CHUNKS + RT_REFS_MAX + RT_SEALS_MAX)

/* A queue of items for one thread (the hasher's, the writer's), under the mutex. */
typedef struct rt_io_queue {
  rt_io items[RT_IO_MAX];
  uint32_t head;
  uint32_t count;
  pthread_cond_t cond; /* its thread waits here */
  bool stop;           /* its thread ends once the queue is empty */
} rt_io_queue;

/*
 * With hash_thread the items go from the worker to the hasher, which feeds
 * each pack's bytes to its SHA-256 in order, finishes the trailer at its
 * seal and passes every item on to the writer unchanged. A serial stage:
 * the writer frees a chunk or a ring reference after the hasher is done with
 * it, as before. The default turns it on from this many CPUs in the
 * process's affinity mask: the producer, worker, hasher and writer each
 * want one (measured in docs/spool.md).
 */
#define RT_HASH_THREAD_CPUS 4

struct cs_capture {
  cs_capture_config cfg;
  pthread_mutex_t mutex;
  pthread_cond_t work_cond;   /* the worker waits here */
  pthread_cond_t space_cond;  /* producers wait for staging room or quota */
  pthread_cond_t done_cond;   /* flush and close wait here */
  pthread_t worker;
  pthread_t sealer;           /* fsyncs and links finished packs, so packing goes on meanwhile */
  pthread_cond_t seal_cond;   /* the sealer waits here */
  bool sealer_started;
  bool sealer_stop;
  rt_seal_job seal_jobs[RT_SEALS_MAX];
  uint32_t seal_head;
  uint32_t seal_count;
  pthread_t writer_thread;    /* writes chunks to temp files, passes seals on in order */
  pthread_cond_t chunk_cond;  /* the worker waits here for a free chunk */
  bool writer_started;
  rt_io_queue io;             /* the writer's queue */
  uint8_t *chunk_area;        /* RT_CHUNKS x chunk_bytes, page-aligned; populated at open */
  size_t chunk_bytes;
  uint32_t chunks_free[RT_CHUNKS];
  uint32_t chunks_free_count;
  pthread_t hasher;           /* hash_thread: hashes the items between worker and writer */
  bool hasher_started;
  rt_io_queue hq;             /* the hasher's queue */
  EVP_MD_CTX *hash_ctx;       /* the hasher's: the SHA-256 of the pack being hashed */
  EVP_MD_CTX *hash_copy;      /* the hasher's: the digest before the trailer */
  bool hash_failed;           /* the hasher's: an update failed; the pack's seal fails */
  uint32_t refs_pending;      /* RT_IO_REF items queued or being written */
  uint32_t refs_peak;         /* the most refs_pending has been (tests) */
  bool worker_started;
  bool worker_joined;
  atomic_int worker_sleep;    /* RT_AWAKE, RT_POLLING or RT_IDLE; set by the worker under mutex */
  uint32_t producers_waiting;

  cs_sink sink;
  rt_ring ring;
  bool ring_pinned;
  rt_control control[RT_CONTROL_MAX];
  uint32_t control_head;
  uint32_t control_count;

  /* Device copies: a free list of events. */
  void **events;
  uint32_t events_free;
  uint32_t events_total;
  bool device_ok;
  char device_msg[RT_ERROR_MAX];

  /* The key fields every record must share (set once, read without the lock after). */
  atomic_bool key_fixed;
  char *key_tenant;
  size_t key_tenant_len;
  char *key_session;
  size_t key_session_len;
  uint32_t key_rank;

  /* Flush and close. */
  uint64_t flush_next_id;
  uint64_t flush_done_id;
  uint64_t flush_waiting_id; /* the flush whose caller still waits for its answer, or 0 */
  int flush_done_err;
  char flush_done_msg[RT_ERROR_MAX];
  bool flush_active;
  bool close_started;
  bool abandon; /* cs_capture_free: stop waiting for file system room (what cannot be written is dropped) */
  bool close_done;
  int close_err;
  char close_msg[RT_ERROR_MAX];

  /*
   * The spool's file system is full (the writer waits for room to reserve,
   * the worker found no room to open a pack, or a write or seal failed with
   * CS_E_SPOOL_FULL where the file system cannot reserve): admission follows
   * the full policy until a pack leaves the spool, the writer's reservation
   * succeeds, or statvfs shows room for a pack again (checked at most every
   * RT_DISK_FULL_CHECK_NS). A pack whose file system reserves loses no
   * record to a full disk; elsewhere the pack that hit it lost its records
   * (counted, reported by the next flush). Sealed packs are untouched.
   */
  bool disk_full;
  uint64_t disk_full_check_ns;   /* next statvfs */
  uint64_t disk_full_need_bytes; /* free bytes that end the state */
  char disk_full_msg[RT_ERROR_MAX];
  char *spool_dir;               /* for statvfs */

  /* Errors not yet reported by a flush or close (first one wins). */
  int pending_err;
  char pending_msg[RT_ERROR_MAX];

  cs_capture_stats stats;

  /* The spool: used by the worker and by remove/list callers. */
  pthread_mutex_t spool_mutex;
  cs_spool *spool;

  /* Worker-only state. */
  rt_uuid7 ids;
  uint64_t pack_seq;          /* the pack being written, 0 when none */
  cs_pack_writer *writer;
  cs_spool_file *file;
  int pack_err;               /* the open pack failed: its records are dropped */
  uint32_t pack_records;
  uint32_t pack_dropped;
  bool has_chunk;             /* the worker holds chunk (being filled) */
  uint32_t chunk;
  size_t chunk_fill;
  uintptr_t ref_lo, ref_hi;   /* the payload being packed, when large enough to reference */
  uint64_t ref_seq;           /* its entry */
  const uint8_t *seg_bytes;   /* the reference being gathered (seg_length bytes) */
  size_t seg_length;
};

/* Frees everything of a capture whose worker is stopped or never started (capture.c). */
RT_HIDDEN void rt_capture_destroy(cs_capture *cap);

/* Worker, hasher, writer and sealer threads (worker.c). */
RT_HIDDEN void *rt_worker_main(void *context);
RT_HIDDEN void *rt_writer_main(void *context);
RT_HIDDEN void *rt_hasher_main(void *context);
RT_HIDDEN void *rt_sealer_main(void *context);

/* Under mutex: moves the sink's actions to the control queue; position as named. */
RT_HIDDEN void rt_drain_actions(cs_capture *cap, uint64_t record_pack_seq, uint64_t record_entry_seq);
/* Under mutex: wakes the worker if it sleeps (polling or idle). */
RT_HIDDEN void rt_wake_worker(cs_capture *cap);
/* Under the mutex: stops the queue's thread once it has taken every item. */
RT_HIDDEN void rt_queue_stop(rt_io_queue *q);
/* Under mutex: true while the spool's file system is full (statvfs looks again when due). */
RT_HIDDEN bool rt_disk_full(cs_capture *cap, uint64_t now_ns);
/* Under mutex: notes an error for the next flush or close (first one wins); a full file system starts disk_full. */
RT_HIDDEN void rt_note_error(cs_capture *cap, int err, const char *msg);
/* Under the mutex: a flush's FLUSHED: its report (taken once) is the flush's answer. The caller wakes done_cond. */
RT_HIDDEN void rt_take_flushed(cs_capture *cap, const cs_sink_action *action);

#endif

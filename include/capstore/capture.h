/*
 * capstore/capture.h: the capture sink, the model-side entry point. Hooks in
 * the model hand it records (a tensor's bytes plus the 21-field descriptor of
 * pack.h), from host memory or from CUDA device memory; a background thread
 * packs them into dmi-pack-v1 files in a spool directory (spool.h) and seals
 * each pack atomically. docs/spool.md describes the runtime in detail.
 *
 * The capture call is the model's hot path: it validates the descriptor,
 * asks the sink core (sink.h) for admission, reserves room in a bounded
 * in-memory staging area, copies the bytes there (or starts an asynchronous
 * device-to-host copy into it) and returns. The sink core decides sealing
 * (records, bytes, linger on CLOCK_MONOTONIC), flush and close ordering and
 * the spool quota; a full spool follows its policy (block up to block_max_ns,
 * or refuse with CS_E_SPOOL_FULL), never a silent drop. A full staging area
 * (the background thread is behind) follows the same policy and answers
 * CS_E_FULL. Packs get UUIDv7 ids (time-ordered; random bits from getrandom).
 *
 * One sink writes one tenant, session and producer rank (the object key names
 * them): the first admitted record fixes them and a record naming others is
 * refused.
 *
 * Every function is safe to call from several threads at once, except
 * cs_capture_free, which must be the last call. Errors are negative cs_err
 * values; where a msg buffer is given it gets one sentence naming what is
 * wrong (the field, the limit, the failed system call), NUL-terminated when
 * msg_size > 0, and "" on success. Public names use the cs_ prefix.
 */
#ifndef CAPSTORE_CAPTURE_H
#define CAPSTORE_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capstore/pack.h"
#include "capstore/sink.h"
#include "capstore/spool.h"
#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cs_capture_config {
  cs_sink_config sink;          /* sealing, quota and the full policy */
  uint64_t staging_bytes;       /* the bounded in-memory staging area */
  uint64_t record_bytes_max;    /* larger records are refused (CS_E_TOO_LARGE) */
  uint32_t device_copies_max;   /* device copies in flight (CUDA events); 0 disables the device path */
  bool recover_at_open;         /* sweep stale .open files and check ready packs at open */
  bool direct_io;               /* the spool's direct_io (see spool.h). Without it, payloads of
                                   256 KiB or more are written from the staging area (no copy on
                                   the worker), the rest through write chunks; such a payload
                                   then holds its staging room (and that of the records after it)
                                   until its write(2) returns, so size staging_bytes for the
                                   disk's slow moments too */
  bool hash_thread;             /* the packs' SHA-256 on a thread of its own, between the worker
                                   (layout, CRC-32, copy) and the writer: the worker's hashing
                                   was the sink's bound on machines with cores to spare. Off,
                                   the worker hashes too (one thread less, better on 2 CPUs) */
  bool demote_staging;          /* after packing a record the worker demotes its staging lines
                                   to the shared cache (x86 CLDEMOTE; a no-op elsewhere), so a
                                   producer reusing them does not fetch them from the worker's
                                   core: the capture call's tail where the two have cores of
                                   their own. On 2 CPUs it cost the worker more than it saved */
  const cs_spool_sys *spool_sys; /* NULL: the real system calls (tests inject faults) */
  /*
   * Called on the sealer thread for every pack newly sealed into the spool
   * (not for the same bytes sealed again), before a flush waiting for it can
   * return: a flush's caller that hears OK has heard of every pack it covers.
   * It runs under the spool's lock and must not block or call back into the
   * capture; fields gives the pack's object-key fields (its text valid for
   * the call). NULL: no callback.
   */
  void (*on_sealed)(void *context, const cs_spool_entry *entry, const cs_pack_summary *summary,
                    const cs_pack_key_fields *fields);
  void *on_sealed_context;
} cs_capture_config;

/*
 * Defaults: the sink core's defaults, 128 MiB of staging, records up to
 * 32 MiB, 64 device copies in flight, recovery at open, direct I/O (where
 * the spool's file system takes O_DIRECT), hash_thread and demote_staging
 * when the process may run on at least 4 CPUs (its affinity mask; a CPU
 * quota is not seen).
 */
void cs_capture_config_default(cs_capture_config *cfg);

/*
 * CS_E_OK or CS_E_CONFIG with msg naming the field: the sink fields as
 * cs_sink_config_validate; staging_bytes at least 1 MiB; record_bytes_max
 * at least 1, at most staging_bytes / 4 and at most sink.spool_bytes_max.
 */
int cs_capture_config_validate(const cs_capture_config *cfg, char *msg, size_t msg_size);

typedef struct cs_capture cs_capture;

/*
 * Opens (creating it when missing) the spool directory, takes its owner lock
 * (CS_E_BUSY naming the holder's pid), runs recovery when configured, counts
 * the packs already there against the quota and starts the background
 * thread. cfg NULL means cs_capture_config_default's. With recover_at_open
 * the caller states that no other sink writes to this spool (the owner lock
 * makes that true for other processes; a second sink on it in the same
 * process is refused with CS_E_BUSY too). A pack recovery cannot settle
 * (unreadable, out of memory, corrupt with a failed rename) does not stop
 * the open: it is kept in place, never listed or handed out, counted against
 * the quota, and reported in cs_capture_stats.recovery (kept, problem); the
 * next open checks it again. Only a recovery that cannot read the directory
 * (or grow its own tables) refuses the open, with its error.
 */
int cs_capture_open(const char *spool_dir, const cs_capture_config *cfg, cs_capture **out,
                    char *msg, size_t msg_size);

/*
 * Captures one record from host memory: bytes[0 .. length) with descriptor
 * meta (copied; neither needs to outlive the call). Returns CS_E_OK once the
 * bytes are in the staging area. Errors:
 *   CS_E_INVALID_ARGUMENT  NULL cap, meta or bytes (with length > 0); a
 *                          descriptor the format refuses (msg names the
 *                          field); tenant, session or rank differ from the
 *                          sink's first record;
 *   CS_E_TOO_LARGE         length over record_bytes_max or over the spool quota;
 *   CS_E_SPOOL_FULL        the spool quota refuses it, or the spool's file system
 *                          is full (at once under CS_FULL_REFUSE, after block_max_ns
 *                          under CS_FULL_BLOCK). Records already admitted are not
 *                          lost to a full disk: each pack's room is reserved
 *                          (fallocate) before its bytes are written, and the writer
 *                          waits for room with the bytes kept in memory. On a file
 *                          system that cannot reserve, the pack that met ENOSPC
 *                          loses its records (records_dropped; the next flush
 *                          reports it);
 *   CS_E_FULL              the staging area stayed full, or CS_SINK_SEALS_MAX
 *                          packs stayed sealing (the disk is behind; same policy);
 *   CS_E_CLOSED            close has been called.
 * Records are appended to packs in the order their calls were admitted.
 */
int cs_capture_write(cs_capture *cap, const cs_pack_meta *meta, const void *bytes, size_t length,
                     char *msg, size_t msg_size);

/*
 * Captures one record from CUDA device memory. The device-to-host copy is
 * enqueued on `stream` (a cudaStream_t; NULL is the legacy default stream)
 * into pinned staging memory and an event is recorded after it: the copy
 * reads the tensor in stream order, after the kernels that produced it and
 * before any later kernel can overwrite or free it, and the only thing the
 * model's stream waits for is the copy itself. The host never waits: the
 * background thread waits on the event before packing the bytes. The caller
 * may reuse device_bytes for stream-ordered work at once. Errors as
 * cs_capture_write, plus CS_E_UNSUPPORTED (built without CUDA, no device, or
 * device_copies_max 0) and CS_E_IO (the CUDA runtime refused the copy; msg
 * has its error string). A copy that fails after the call returned is
 * counted in records_dropped and reported by the next flush or close.
 */
int cs_capture_write_device(cs_capture *cap, const cs_pack_meta *meta, const void *device_bytes,
                            size_t length, void *stream, char *msg, size_t msg_size);

/*
 * Seals the open pack and waits until every record captured before the call
 * is in a sealed pack, or until deadline_ns (CLOCK_MONOTONIC, see
 * cs_capture_clock_ns; CS_NEVER waits as long as it takes). Returns CS_E_OK,
 * CS_E_TIMEOUT (the seal goes on; a later flush covers it), CS_E_CLOSED, or
 * the first seal or record error since the last flush or close (CS_E_IO,
 * CS_E_INVALID_ARGUMENT for a record the pack writer refused, ...), with msg.
 * With nothing open or sealing it answers at once, whatever the deadline: a
 * deadline already passed polls.
 */
int cs_capture_flush(cs_capture *cap, uint64_t deadline_ns, char *msg, size_t msg_size);

/*
 * Refuses further records, seals everything and stops the background
 * thread, waiting at most until deadline_ns. Returns as flush does; after
 * CS_E_TIMEOUT the sealing goes on and close may be called again. Calling
 * close again after it completed returns CS_E_OK.
 */
int cs_capture_close(cs_capture *cap, uint64_t deadline_ns, char *msg, size_t msg_size);

/*
 * Closes if needed, releases the spool lock, frees. It waits as long as the
 * disk takes, but not for file system room: on a spool whose file system
 * stays full, the records still waiting for room are dropped (the process is
 * going away; close with a deadline first to know what was sealed).
 */
void cs_capture_free(cs_capture *cap);

/* CLOCK_MONOTONIC in nanoseconds: the clock of every deadline here. */
uint64_t cs_capture_clock_ns(void);

/*
 * Removes a sealed pack from the spool after hand-off and returns its quota
 * (wakes producers blocked on a full spool). CS_E_NOT_FOUND, CS_E_IO.
 */
int cs_capture_remove_pack(cs_capture *cap, const cs_uuid *pack_id, char *msg, size_t msg_size);

/*
 * Opens a sealed pack read-only (see cs_spool_open_pack): *fd is the
 * caller's to close; out (may be NULL) gets its entry. CS_E_NOT_FOUND, CS_E_IO.
 */
int cs_capture_open_pack(cs_capture *cap, const cs_uuid *pack_id, int *fd, cs_spool_entry *out);

/*
 * Sidelines a sealed pack (cs_spool_quarantine) and returns its quota:
 * CS_E_NOT_FOUND, CS_E_IO.
 */
int cs_capture_quarantine_pack(cs_capture *cap, const cs_uuid *pack_id, const char *reason, char *msg,
                               size_t msg_size);

/*
 * Lists the sealed packs this capture hands out (cs_spool_entries: its
 * seals, what recovery checked at open, what cs_capture_admit admitted),
 * without reading the directory.
 */
int cs_capture_list(cs_capture *cap, cs_spool_entry *entries, size_t capacity, size_t *count);

/*
 * Admits packs other processes linked into the spool (cs_spool_admit, each
 * and context as there; each runs under the spool's lock: it must not call
 * this capture): each is verified, counted against the quota as a recovered
 * pack, and copied to out (at most capacity per call). CS_E_OK or what
 * stopped the pass; stats say how many were admitted, quarantined or left
 * for a later pass.
 */
int cs_capture_admit(cs_capture *cap, cs_spool_entry *out, size_t capacity, size_t *count, cs_spool_admit_fn each,
                     void *context);

typedef struct cs_capture_stats {
  cs_sink_stats sink;          /* the core's counters and quota use */
  uint64_t records_written;    /* appended to a pack that was sealed */
  uint64_t records_dropped;    /* admitted but not in any sealed pack: refused by the
                                  pack writer, failed device copy, failed seal */
  uint64_t staging_waits;      /* calls that waited for staging room */
  uint64_t staging_refused;    /* calls answered CS_E_FULL for staging room (sealing: sink.refused_sealing) */
  uint64_t spool_waits;        /* calls that waited for spool quota, a seal slot or file system room */
  uint64_t disk_full_refused;  /* calls answered CS_E_SPOOL_FULL because the spool's file system was full */
  uint64_t disk_full_waits;    /* times the writer waited for file system room for a pack it was writing */
  uint64_t device_copies;      /* device records whose copy was started */
  uint64_t packs_sealed;       /* by this sink */
  uint64_t bytes_sealed;       /* sizes of those packs */
  uint32_t recovered_packs;    /* found in the spool at open */
  uint64_t recovered_bytes;
  uint64_t admitted_packs;     /* linked in by other processes and verified (cs_capture_admit) */
  uint64_t admitted_bytes;
  uint64_t admit_quarantined;  /* linked in and found corrupt: quarantined */
  uint64_t admit_errors;       /* linked-in packs that could not be judged yet (tried again later) */
  cs_spool_recovery recovery;  /* what recovery at open did: kept and problem name the packs
                                  it left in place without a verdict */
  uint64_t staging_used_bytes; /* now */
} cs_capture_stats;

void cs_capture_stats_get(cs_capture *cap, cs_capture_stats *out);

#ifdef __cplusplus
}
#endif

#endif

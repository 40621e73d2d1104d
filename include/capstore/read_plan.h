/*
 * capstore/read_plan.h: the read-planning core. Given where the records of a
 * selection lie (each record's stored bytes in its pack object, and each
 * pack's size and footer offset), it plans the ranged GETs that read them:
 * one read of every pack's footer and trailer (the reader verifies both and
 * binds the catalog's fields to the footer), and the payloads grouped by
 * pack, sorted by offset, with ranges whose gap is at most gap_bytes_max
 * merged into one request. It checks the plan against a byte limit and a
 * request limit before any I/O, and says by how much a plan is over.
 *
 * Then it hands the plan's reads out in order, at most inflight_max at a
 * time, and takes their completions: the reader runtime (real stores) and
 * the simulator (models) step it the same way, and it asserts that no more
 * requests are issued than were planned.
 *
 * Pure: no I/O, no clock, no allocation. The caller gives every array.
 */
#ifndef CAPSTORE_READ_PLAN_H
#define CAPSTORE_READ_PLAN_H

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout bounds of dmi-pack-v1 (docs/format.md §1) the planner relies on. */
#define CS_READ_PACK_HEADER_BYTES 64u
#define CS_READ_PACK_TRAILER_BYTES 64u
#define CS_READ_PACK_ALIGN 64u

/* A pack of the selection: its object's size and where its footer starts. */
typedef struct cs_read_pack {
  uint64_t size_bytes;    /* the object's size (the catalog's) */
  uint64_t footer_offset; /* F: the first multiple of 64 after the pack's last record (64 with none) */
} cs_read_pack;

/* One record of the selection: its stored bytes [offset, offset + length) in pack `pack`. */
typedef struct cs_read_want {
  uint32_t pack; /* index into the packs array */
  uint64_t offset;
  uint64_t length;
} cs_read_want;

typedef struct cs_read_limits {
  uint64_t gap_bytes_max;  /* ranges of one pack this close (or overlapping) are read as one */
  uint64_t span_bytes_max; /* a merge across a gap never makes a read longer than this (0: no
                              bound); ranges that overlap or touch are always one read, and one
                              record or one footer longer than it is still one read */
  uint64_t byte_limit;     /* the plan may read at most this many bytes (UINT64_MAX: no limit) */
  uint64_t request_limit;  /* and issue at most this many requests (> 0) */
  bool whole_objects;      /* read each pack whole, [0, size), in one request (to check its SHA-256) */
} cs_read_limits;

/*
 * The default merge (docs/reader.md, "Plan"): a gap is read through when it
 * costs less than one more request would. CS_READ_GAP_BYTES_DEFAULT is that
 * request's cost in bytes; CS_READ_SPAN_BYTES_DEFAULT keeps a read within a
 * whole-request timeout on a slow link (8 MiB in 10 s is 0.84 MB/s).
 */
#define CS_READ_GAP_BYTES_DEFAULT (UINT64_C(256) << 10)
#define CS_READ_SPAN_BYTES_DEFAULT (UINT64_C(8) << 20)

/* Defaults: gaps up to CS_READ_GAP_BYTES_DEFAULT merged, reads up to CS_READ_SPAN_BYTES_DEFAULT, no byte or
   request limit, not whole. */
void cs_read_limits_default(cs_read_limits *limits);

/* One ranged GET of the plan. */
typedef struct cs_read_span {
  uint32_t pack;
  uint64_t offset;
  uint64_t length;
  bool tail;        /* it ends at the object's end: the footer and the trailer are in it */
  uint32_t first;   /* wants order[first .. first + count) lie inside it (in offset order); an empty
                       record (length 0) is listed with a read of its pack wherever it lies */
  uint32_t count;
} cs_read_span;

typedef struct cs_read_plan {
  cs_read_span *spans; /* the caller's array, span_count used, in (pack, offset) order */
  uint32_t span_count;
  uint32_t *order;     /* the caller's array: want indices in (pack, offset) order */
  uint32_t want_count;
  uint32_t pack_count; /* packs with at least one want (each read once for its footer) */
  uint64_t requests;   /* span_count */
  uint64_t bytes;      /* the bytes the spans read */
  uint64_t payload_bytes; /* of those, the wanted records' (each byte once) */
  uint64_t footer_bytes;  /* of those, footers and trailers */
} cs_read_plan;

/*
 * Plans reads of wants[0 .. want_count) over packs[0 .. pack_count).
 * order has want_count entries, spans span_capacity (want_count +
 * pack_count always suffice); plan points into both. Errors, msg naming
 * what is wrong:
 *   CS_E_INVALID_ARGUMENT  a NULL array with a count, limits with
 *                          request_limit 0, a want naming no pack, a record
 *                          outside [64, F) of its pack or not 64-aligned, a
 *                          pack whose footer offset is not aligned or leaves
 *                          no room for a footer and trailer, or a pack over
 *                          2^62 bytes (2^62 itself is planned);
 *   CS_E_FULL              span_capacity is too small;
 *   CS_E_TOO_LARGE         the plan reads more bytes than byte_limit or
 *                          issues more requests than request_limit: msg
 *                          says how many and by how much; *plan is filled
 *                          (an estimate).
 * A pack no want names is not read. Wants may repeat a record: its bytes
 * are read once.
 */
int cs_read_plan_make(const cs_read_pack *packs, uint32_t pack_count, const cs_read_want *wants, uint32_t want_count,
                      const cs_read_limits *limits, uint32_t *order, cs_read_span *spans, uint32_t span_capacity,
                      cs_read_plan *plan, char *msg, size_t msg_size);

/*
 * Handing the plan's reads out: next gives the next span to issue while
 * fewer than inflight_max are out, done takes a completion (CS_E_OK or the
 * read's error). A failed read fails the whole read: nothing more is
 * handed out, and finished says so once the reads out have come back.
 *
 * Retries (none unless cs_read_exec_retries allows them): a read that failed
 * with a transient outcome (cs_read_retryable) may be issued again, the
 * span still out, at most retry_per_read_max times and while the retries
 * fit retry_budget: issued = planned reads handed out + retries, always.
 */
typedef struct cs_read_exec {
  const cs_read_plan *plan;
  uint32_t inflight_max;
  uint32_t next_span;   /* the next span to hand out */
  uint32_t inflight;
  uint32_t completed;
  uint64_t issued;      /* requests issued: the plan's handed out (never more than plan->requests) + retries */
  uint64_t retries;     /* requests issued again after a transient failure */
  uint32_t retry_per_read_max; /* 0: no retries */
  uint64_t retry_budget;       /* retries of the whole read at most */
  int err;              /* the first failed read's error */
} cs_read_exec;

/* CS_E_INVALID_ARGUMENT for a NULL plan or inflight_max 0. */
int cs_read_exec_init(cs_read_exec *exec, const cs_read_plan *plan, uint32_t inflight_max);

/* The next span to read, or CS_E_WOULD_BLOCK (inflight_max out) or CS_E_CLOSED (none left, or failed). */
int cs_read_exec_next(cs_read_exec *exec, uint32_t *span);

/* A read came back with err (CS_E_OK or its error). CS_E_STATE for a span not handed out. */
int cs_read_exec_done(cs_read_exec *exec, uint32_t span, int err);

/* True once every read came back, or one failed and the rest came back; *err: CS_E_OK or the first error. */
bool cs_read_exec_finished(const cs_read_exec *exec, int *err);

/* Allows each read per_read_max retries, and the whole read budget retries (e.g. request_limit - requests). */
void cs_read_exec_retries(cs_read_exec *exec, uint32_t per_read_max, uint64_t budget);

/*
 * Whether a read that failed with outcome is worth issuing again: only the
 * transient ones (refused, timed out, answer lost, 5xx, throttled). Never a
 * 4xx, a refused or malformed answer, or a short read: those fail the same
 * way again.
 */
bool cs_read_retryable(cs_outcome outcome);

/*
 * Span (out, failed with a transient outcome, retried `retried` times so
 * far) may be issued again: CS_E_OK counts the retry, the span stays out;
 * CS_E_TOO_LARGE when its retries or the read's retry budget are spent, or
 * the read already failed (then report the failure with cs_read_exec_done);
 * CS_E_STATE for a span never handed out (or none out); a span already done
 * is not detected: the caller must only retry a span it holds.
 */
int cs_read_exec_retry(cs_read_exec *exec, uint32_t span, uint32_t retried);

#ifdef __cplusplus
}
#endif

#endif

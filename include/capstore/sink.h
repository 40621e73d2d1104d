/*
 * capstore/sink.h: the sink core. It decides when the open pack is sealed
 * (record count, bytes, linger, flush, close) and enforces the spool quota
 * (bytes and packs) with an explicit full policy. It never touches bytes or
 * files: the caller appends each admitted record to the pack the core names
 * and carries out the SEAL actions the core emits.
 *
 * Ordering rule for callers: after every cs_sink_admit, drain cs_sink_poll
 * before appending the record, so a pack sealed to make room is sealed before
 * the next pack receives bytes. Drain cs_sink_poll after every other call too:
 * the action ring is bounded and overflowing it is a caller bug (asserted).
 *
 * Quota: spool bytes are the open pack's record bytes, plus the record bytes
 * of each pack whose seal is in flight, plus the sealed size reported by
 * cs_sink_on_sealed for each sealed pack not yet removed (and recovered
 * packs). Spool packs are the open pack plus every sealed-or-sealing pack not
 * yet removed. A pack's real size includes format overhead, so after a seal
 * the use may exceed the quota; new records are then refused until removals.
 *
 * Seals in flight are bounded by CS_SINK_SEALS_MAX. A record whose admission
 * would need a seal while that many are in flight waits like a record of a
 * full spool (CS_E_WOULD_BLOCK under the block policy) but is refused with
 * CS_E_FULL (the disk is behind) rather than CS_E_SPOOL_FULL. A linger, flush
 * or close seal that finds no free slot is made when a seal completes.
 *
 * The struct is public so callers can embed it; its fields are private.
 */
#ifndef CAPSTORE_SINK_H
#define CAPSTORE_SINK_H

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cs_full_policy {
  CS_FULL_BLOCK = 1,  /* the producer may wait up to block_max_ns, then is refused */
  CS_FULL_REFUSE = 2, /* the record is refused at once (CS_E_SPOOL_FULL, or CS_E_FULL: sealing is behind) */
} cs_full_policy;

typedef struct cs_sink_config {
  uint32_t pack_records_max; /* seal when the open pack holds this many records */
  uint64_t pack_bytes_max;   /* seal when the open pack would exceed this */
  uint64_t pack_footer_bytes_max; /* seal when the open pack's footer (its records' descriptors,
                                     as cs_sink_admit_record counts them) would exceed this */
  uint64_t linger_ns;        /* seal this long after the pack's first record */
  uint64_t spool_bytes_max;  /* quota: sealed + open bytes in the spool */
  uint32_t spool_packs_max;  /* quota: sealed + open packs in the spool */
  cs_full_policy full_policy;
  uint64_t block_max_ns;     /* CS_FULL_BLOCK: longest a producer waits */
} cs_sink_config;

/*
 * Defaults: 4096 records or 64 MiB per pack, footers up to 60 MiB (the
 * format allows 64), linger 1 s, spool 8 GiB and 4096 packs, block for at
 * most 5 s when full.
 */
void cs_sink_config_default(cs_sink_config *cfg);
/*
 * CS_E_OK or CS_E_CONFIG with msg naming the field. Limits are positive,
 * pack_records_max at most the format's 1,000,000, spool_bytes_max at least
 * pack_bytes_max, intervals (linger_ns; block_max_ns under CS_FULL_BLOCK) at
 * least 1 ms. msg is always NUL-terminated when msg_size > 0.
 */
int cs_sink_config_validate(const cs_sink_config *cfg, char *msg, size_t msg_size);

typedef enum cs_seal_reason {
  CS_SEAL_RECORDS = 1,
  CS_SEAL_BYTES,
  CS_SEAL_LINGER,
  CS_SEAL_FLUSH,
  CS_SEAL_CLOSE,
} cs_seal_reason;

const char *cs_seal_reason_name(cs_seal_reason reason);

typedef enum cs_sink_op {
  CS_SINK_SEAL = 1,  /* seal pack pack_seq (records it holds: record_count) */
  CS_SINK_FLUSHED,   /* flush flush_id is done: every pack open or sealing at its call is sealed */
  CS_SINK_CLOSED,    /* close is done: every pack is sealed, admit refuses */
} cs_sink_op;

typedef struct cs_sink_action {
  cs_sink_op op;
  uint64_t pack_seq;
  uint32_t record_count;
  uint64_t record_bytes;
  cs_seal_reason reason;
  uint64_t flush_id;
  /*
   * FLUSHED/CLOSED: CS_E_OK, or the first seal error not yet reported: a
   * failed seal is reported by the next FLUSHED or CLOSED, whichever comes
   * first, and only once.
   */
  int err;
} cs_sink_action;

typedef struct cs_sink_stats {
  uint64_t records_admitted;
  uint64_t bytes_admitted;
  uint64_t packs_sealed;
  uint64_t seal_errors;
  uint64_t refused_full;  /* answers of CS_E_SPOOL_FULL and CS_E_TOO_LARGE */
  uint64_t refused_sealing; /* answers of CS_E_FULL: every seal slot was busy */
  uint64_t would_block;   /* answers of CS_E_WOULD_BLOCK */
  uint64_t refused_closed;
  uint64_t spool_bytes;   /* quota use now: open + sealing + sealed-not-removed */
  uint32_t spool_packs;
  uint32_t open_records;
  uint32_t seals_inflight;
} cs_sink_stats;

#define CS_SINK_PENDING_MAX 8u /* queued actions; bounded */
#define CS_SINK_SEALS_MAX 6u   /* seals in flight; with one FLUSHED and one CLOSED they fit the ring */

/* Private: one seal in flight and the quota its pack holds until it completes. */
typedef struct cs_sink_seal {
  uint64_t pack_seq; /* 0 when the slot is free */
  uint64_t record_bytes;
} cs_sink_seal;

/* The fields are private. */
typedef struct cs_sink {
  cs_sink_config cfg;
  int state;
  uint64_t next_seq;
  uint64_t open_seq;        /* 0 when no pack is open */
  uint32_t open_records;
  uint64_t open_bytes;
  uint64_t open_footer_bytes;
  uint64_t open_first_ns;
  int seal_deferred;        /* 0, CS_SEAL_FLUSH or CS_SEAL_CLOSE: waits for a free seal slot */
  uint64_t flush_id;
  bool flush_busy;          /* from cs_sink_flush until its FLUSHED is polled */
  bool flush_waiting;       /* FLUSHED not yet queued */
  uint64_t flush_boundary_seq; /* the flush waits for every pack up to this one */
  int unreported_err;       /* first seal error not yet reported */
  cs_sink_seal seals[CS_SINK_SEALS_MAX];
  uint32_t seals_count;
  uint64_t seals_bytes;     /* record bytes of the packs in flight */
  uint64_t settled_bytes;   /* sealed or recovered, not removed: real sizes */
  uint32_t settled_packs;
  cs_sink_stats stats;
  cs_sink_action pending[CS_SINK_PENDING_MAX];
  uint32_t pending_head;
  uint32_t pending_count;
} cs_sink;

/* CS_E_OK or CS_E_CONFIG (msg names the field). */
int cs_sink_init(cs_sink *sink, const cs_sink_config *cfg, char *msg, size_t msg_size);

/*
 * Admits one record of record_bytes at now_ns; first_try_ns is when the
 * caller first tried this record (for the bounded block). Returns:
 *   CS_E_OK           the record belongs to pack *pack_seq;
 *   CS_E_WOULD_BLOCK  the spool is full and the policy lets the caller wait
 *                     (retry after a removal, or give up at first_try_ns + block_max_ns);
 *   CS_E_SPOOL_FULL   refused by the quota: the policy is refuse, or the block time ran out;
 *   CS_E_FULL         refused the same way because CS_SINK_SEALS_MAX packs are
 *                     sealing and admitting it would seal another (the disk is behind);
 *   CS_E_TOO_LARGE    the record can never fit the spool quota (record_bytes > spool_bytes_max);
 *   CS_E_CLOSED       the sink is closing or closed;
 *   CS_E_INVALID_ARGUMENT  first_try_ns is after now_ns (not counted).
 * A record larger than pack_bytes_max gets a pack of its own, sealed at once.
 */
int cs_sink_admit(cs_sink *sink, uint64_t now_ns, uint64_t record_bytes, uint64_t first_try_ns,
                  uint64_t *pack_seq);

/*
 * cs_sink_admit for a record whose descriptor takes up to footer_bytes of
 * its pack's footer: the open pack is sealed first when the record's
 * footer_bytes would take the footer past pack_footer_bytes_max, so no
 * admitted record is refused later by the footer's bound. A record whose
 * own footer_bytes exceed the bound is CS_E_TOO_LARGE.
 */
int cs_sink_admit_record(cs_sink *sink, uint64_t now_ns, uint64_t record_bytes, uint64_t footer_bytes,
                         uint64_t first_try_ns, uint64_t *pack_seq);

/*
 * The caller sealed pack_seq (err CS_E_OK) or failed to (size_bytes then 0).
 * A failed seal releases the pack's quota and counts in seal_errors.
 * CS_E_INVALID_ARGUMENT (and nothing changes) when pack_seq has no seal in
 * flight, err is positive, or a failure carries a size.
 */
int cs_sink_on_sealed(cs_sink *sink, uint64_t now_ns, uint64_t pack_seq, uint64_t size_bytes, int err);

/* A sealed pack of size_bytes (as given to cs_sink_on_sealed) left the spool. */
void cs_sink_on_removed(cs_sink *sink, uint64_t size_bytes);

/* Counts a pack found in the spool at start against the quota. */
void cs_sink_on_recovered(cs_sink *sink, uint64_t size_bytes);

/*
 * Seals the open pack (if any) and emits FLUSHED(flush_id) once it and every
 * seal in flight at the call complete; at once when there are none.
 * One flush at a time: CS_E_STATE from the call until its FLUSHED has been
 * polled (flushes are not coalesced). CS_E_CLOSED once closing.
 */
int cs_sink_flush(cs_sink *sink, uint64_t now_ns, uint64_t flush_id);

/*
 * Seals the open pack, refuses further records and emits CLOSED once every
 * seal in flight has completed. CS_E_CLOSED when already closing or closed.
 */
int cs_sink_close(cs_sink *sink, uint64_t now_ns);

/*
 * Linger expiry: call cs_sink_tick at this time. CS_NEVER when nothing is open,
 * when closing, or while every seal slot is busy (the completion seals instead).
 */
uint64_t cs_sink_next_deadline(const cs_sink *sink);
void cs_sink_tick(cs_sink *sink, uint64_t now_ns);

bool cs_sink_poll(cs_sink *sink, uint64_t now_ns, cs_sink_action *out);
void cs_sink_stats_get(const cs_sink *sink, cs_sink_stats *out);

#ifdef __cplusplus
}
#endif

#endif

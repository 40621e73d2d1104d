/*
 * capstore/sink.h: the sink core. It decides when the open pack is sealed
 * (record count, bytes, linger, flush, close) and enforces the spool quota
 * (bytes and packs) with an explicit full policy. It never touches bytes or
 * files: the caller appends each admitted record to the pack the core names
 * and carries out the SEAL actions the core emits.
 *
 * Ordering rule for callers: after every cs_sink_admit, drain cs_sink_poll
 * before appending the record, so a pack sealed to make room is sealed before
 * the next pack receives bytes.
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
  CS_FULL_REFUSE = 2, /* the record is refused at once with CS_E_SPOOL_FULL */
} cs_full_policy;

typedef struct cs_sink_config {
  uint32_t pack_records_max; /* seal when the open pack holds this many records */
  uint64_t pack_bytes_max;   /* seal when the open pack would exceed this */
  uint64_t linger_ns;        /* seal this long after the pack's first record */
  uint64_t spool_bytes_max;  /* quota: sealed + open bytes in the spool */
  uint32_t spool_packs_max;  /* quota: sealed + open packs in the spool */
  cs_full_policy full_policy;
  uint64_t block_max_ns;     /* CS_FULL_BLOCK: longest a producer waits */
} cs_sink_config;

void cs_sink_config_default(cs_sink_config *cfg);
/* CS_E_OK or CS_E_CONFIG with msg naming the field. */
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
  CS_SINK_FLUSHED,   /* flush flush_id is done: every pack open at its call is sealed */
  CS_SINK_CLOSED,    /* close is done: every pack is sealed, admit refuses */
} cs_sink_op;

typedef struct cs_sink_action {
  cs_sink_op op;
  uint64_t pack_seq;
  uint32_t record_count;
  uint64_t record_bytes;
  cs_seal_reason reason;
  uint64_t flush_id;
  int err; /* FLUSHED/CLOSED: CS_E_OK, or the first seal error since the call */
} cs_sink_action;

typedef struct cs_sink_stats {
  uint64_t records_admitted;
  uint64_t bytes_admitted;
  uint64_t packs_sealed;
  uint64_t seal_errors;
  uint64_t refused_full;  /* refused because the spool was full */
  uint64_t would_block;   /* answers of CS_E_WOULD_BLOCK */
  uint64_t refused_closed;
  uint64_t spool_bytes;   /* quota use now: sealed-not-removed + open */
  uint32_t spool_packs;
  uint32_t open_records;
  uint32_t seals_inflight;
} cs_sink_stats;

#define CS_SINK_PENDING_MAX 8u /* queued actions; bounded */

typedef struct cs_sink {
  cs_sink_config cfg;
  int state;
  uint64_t next_seq;
  uint64_t open_seq;
  uint32_t open_records;
  uint64_t open_bytes;
  uint64_t open_first_ns;
  uint64_t flush_id;
  bool flush_waiting;
  uint64_t flush_seal_seq;
  int flush_err;
  int close_err;
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
 *   CS_E_SPOOL_FULL   refused: the policy is refuse, or the block time ran out;
 *   CS_E_TOO_LARGE    the record can never fit the spool quota;
 *   CS_E_CLOSED       the sink is closing or closed.
 */
int cs_sink_admit(cs_sink *sink, uint64_t now_ns, uint64_t record_bytes, uint64_t first_try_ns,
                  uint64_t *pack_seq);

/* The caller sealed pack_seq (err CS_E_OK) or failed to (size_bytes then 0). */
int cs_sink_on_sealed(cs_sink *sink, uint64_t now_ns, uint64_t pack_seq, uint64_t size_bytes, int err);

/* A sealed pack of size_bytes left the spool (handed off or quarantined). */
void cs_sink_on_removed(cs_sink *sink, uint64_t size_bytes);

/* Counts a pack found in the spool at start against the quota. */
void cs_sink_on_recovered(cs_sink *sink, uint64_t size_bytes);

/* Seals the open pack (if any) and emits FLUSHED(flush_id) once sealed. */
int cs_sink_flush(cs_sink *sink, uint64_t now_ns, uint64_t flush_id);

/* Seals the open pack, refuses further records and emits CLOSED once sealed. */
int cs_sink_close(cs_sink *sink, uint64_t now_ns);

/* Linger expiry and the like: call cs_sink_tick at this time. */
uint64_t cs_sink_next_deadline(const cs_sink *sink);
void cs_sink_tick(cs_sink *sink, uint64_t now_ns);

bool cs_sink_poll(cs_sink *sink, uint64_t now_ns, cs_sink_action *out);
void cs_sink_stats_get(const cs_sink *sink, cs_sink_stats *out);

#ifdef __cplusplus
}
#endif

#endif

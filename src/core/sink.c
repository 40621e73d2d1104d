/*
 * The sink core: when to seal the open pack (record count, bytes, linger,
 * flush, close) and the spool quota with its full policy. Pure: time comes in
 * as now_ns, actions go out through a bounded ring, nothing is allocated.
 */
#include "capstore/sink.h"

#include <assert.h>
#include <string.h>

enum sink_state {
  SINK_OPEN = 1,
  SINK_CLOSING,
  SINK_CLOSED,
};

/* One FLUSHED and one CLOSED may queue beside every seal in flight. */
_Static_assert(CS_SINK_SEALS_MAX + 2u <= CS_SINK_PENDING_MAX, "the action ring must hold every seal");

#define SINK_RECORDS_LIMIT 1000000u /* dmi-pack-v1: at most this many records per pack */
#define SINK_MIB (UINT64_C(1) << 20)
#define SINK_GIB (UINT64_C(1) << 30)

static uint64_t add_saturating(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Copies text into msg, truncating; msg stays NUL-terminated. */
static void message_set(char *msg, size_t msg_size, const char *text) {
  assert(text != NULL);
  if (msg == NULL || msg_size == 0) return;
  size_t length = strlen(text);
  if (length >= msg_size) length = msg_size - 1;
  memcpy(msg, text, length);
  msg[length] = '\0';
  assert(strlen(msg) < msg_size);
}

static int config_refuse(char *msg, size_t msg_size, const char *text) {
  message_set(msg, msg_size, text);
  return CS_E_CONFIG;
}

void cs_sink_config_default(cs_sink_config *cfg) {
  assert(cfg != NULL);
  memset(cfg, 0, sizeof *cfg);
  cfg->pack_records_max = 4096;
  cfg->pack_bytes_max = 64 * SINK_MIB;
  cfg->pack_footer_bytes_max = 60 * SINK_MIB;
  cfg->linger_ns = CS_SEC_NS;
  cfg->spool_bytes_max = 8 * SINK_GIB;
  cfg->spool_packs_max = 4096;
  cfg->full_policy = CS_FULL_BLOCK;
  cfg->block_max_ns = 5 * CS_SEC_NS;
  assert(cfg->spool_bytes_max >= cfg->pack_bytes_max);
}

int cs_sink_config_validate(const cs_sink_config *cfg, char *msg, size_t msg_size) {
  assert(cfg != NULL);
  if (cfg->pack_records_max == 0) return config_refuse(msg, msg_size, "pack_records_max must be > 0");
  if (cfg->pack_records_max > SINK_RECORDS_LIMIT)
    return config_refuse(msg, msg_size, "pack_records_max must be <= 1000000");
  if (cfg->pack_bytes_max == 0) return config_refuse(msg, msg_size, "pack_bytes_max must be > 0");
  if (cfg->pack_footer_bytes_max < 64 * 1024 || cfg->pack_footer_bytes_max > 64 * SINK_MIB)
    return config_refuse(msg, msg_size, "pack_footer_bytes_max must be 64 KiB..64 MiB (the format's footer bound)");
  if (cfg->linger_ns < CS_MS_NS) return config_refuse(msg, msg_size, "linger_ns must be >= 1 ms");
  if (cfg->spool_bytes_max == 0) return config_refuse(msg, msg_size, "spool_bytes_max must be > 0");
  if (cfg->spool_bytes_max < cfg->pack_bytes_max)
    return config_refuse(msg, msg_size, "spool_bytes_max must be >= pack_bytes_max");
  if (cfg->spool_packs_max == 0) return config_refuse(msg, msg_size, "spool_packs_max must be > 0");
  if (cfg->full_policy != CS_FULL_BLOCK && cfg->full_policy != CS_FULL_REFUSE)
    return config_refuse(msg, msg_size, "full_policy must be CS_FULL_BLOCK or CS_FULL_REFUSE");
  if (cfg->full_policy == CS_FULL_BLOCK && cfg->block_max_ns < CS_MS_NS)
    return config_refuse(msg, msg_size, "block_max_ns must be >= 1 ms under CS_FULL_BLOCK");
  message_set(msg, msg_size, "");
  return CS_E_OK;
}

int cs_sink_init(cs_sink *sink, const cs_sink_config *cfg, char *msg, size_t msg_size) {
  assert(sink != NULL);
  assert(cfg != NULL);
  int err = cs_sink_config_validate(cfg, msg, msg_size);
  if (err != CS_E_OK) return err;
  memset(sink, 0, sizeof *sink);
  sink->cfg = *cfg;
  sink->state = SINK_OPEN;
  sink->next_seq = 1;
  return CS_E_OK;
}

const char *cs_seal_reason_name(cs_seal_reason reason) {
  switch (reason) {
  case CS_SEAL_RECORDS: return "records";
  case CS_SEAL_BYTES: return "bytes";
  case CS_SEAL_LINGER: return "linger";
  case CS_SEAL_FLUSH: return "flush";
  case CS_SEAL_CLOSE: return "close";
  }
  return "bad_reason";
}

static uint64_t sink_spool_bytes(const cs_sink *sink) {
  assert(sink->open_seq != 0 || sink->open_bytes == 0);
  assert(sink->seals_count != 0 || sink->seals_bytes == 0);
  return sink->open_bytes + sink->seals_bytes + sink->settled_bytes;
}

static uint32_t sink_spool_packs(const cs_sink *sink) {
  assert(sink->seals_count <= CS_SINK_SEALS_MAX);
  assert(sink->open_seq != 0 || sink->open_records == 0);
  return (sink->open_seq != 0 ? 1u : 0u) + sink->seals_count + sink->settled_packs;
}

static void sink_push(cs_sink *sink, const cs_sink_action *action) {
  assert(sink->pending_count < CS_SINK_PENDING_MAX); /* overflow: the caller did not poll */
  assert(sink->pending_head < CS_SINK_PENDING_MAX);
  uint32_t index = (sink->pending_head + sink->pending_count) % CS_SINK_PENDING_MAX;
  sink->pending[index] = *action;
  sink->pending_count++;
}

/* Hands the open pack to a free seal slot and queues its SEAL action. */
static void sink_seal_open(cs_sink *sink, cs_seal_reason reason) {
  assert(sink->open_seq != 0 && sink->open_records > 0);
  assert(sink->seals_count < CS_SINK_SEALS_MAX);
  uint32_t slot = 0;
  while (sink->seals[slot].pack_seq != 0) slot++;
  assert(slot < CS_SINK_SEALS_MAX);
  sink->seals[slot].pack_seq = sink->open_seq;
  sink->seals[slot].record_bytes = sink->open_bytes;
  sink->seals_count++;
  sink->seals_bytes += sink->open_bytes;
  cs_sink_action action = {
      .op = CS_SINK_SEAL,
      .pack_seq = sink->open_seq,
      .record_count = sink->open_records,
      .record_bytes = sink->open_bytes,
      .reason = reason,
  };
  sink_push(sink, &action);
  sink->open_seq = 0;
  sink->open_records = 0;
  sink->open_bytes = 0;
  sink->open_footer_bytes = 0;
  sink->open_first_ns = 0;
  sink->seal_deferred = 0;
}

/* Seals the open pack for flush or close now, or once a seal slot frees. */
static void sink_seal_or_defer(cs_sink *sink, cs_seal_reason reason) {
  assert(reason == CS_SEAL_FLUSH || reason == CS_SEAL_CLOSE);
  assert(sink->state != SINK_CLOSED);
  if (sink->open_seq == 0) return;
  if (sink->seals_count < CS_SINK_SEALS_MAX) {
    sink_seal_open(sink, reason);
    return;
  }
  sink->seal_deferred = (int)reason;
}

static uint64_t sink_linger_deadline(const cs_sink *sink) {
  assert(sink->open_seq != 0);
  assert(sink->cfg.linger_ns >= CS_MS_NS);
#if CAPSTORE_MUTANT == 31 /* the linger doubled */
  return add_saturating(sink->open_first_ns, 2 * sink->cfg.linger_ns);
#endif
  return add_saturating(sink->open_first_ns, sink->cfg.linger_ns);
}

/* Makes a deferred flush or close seal, or a linger seal that is due. */
static void sink_seal_due(cs_sink *sink, uint64_t now_ns) {
  assert(sink->seal_deferred == 0 || sink->open_seq != 0);
  if (sink->open_seq == 0 || sink->seals_count == CS_SINK_SEALS_MAX) return;
  if (sink->seal_deferred != 0) {
    sink_seal_open(sink, (cs_seal_reason)sink->seal_deferred);
    return;
  }
  if (sink->state == SINK_OPEN && now_ns >= sink_linger_deadline(sink)) sink_seal_open(sink, CS_SEAL_LINGER);
  assert(sink->seal_deferred == 0);
}

static int sink_take_error(cs_sink *sink) {
  int err = sink->unreported_err;
  assert(err <= 0);
  sink->unreported_err = CS_E_OK;
  return err;
}

/* True when every pack up to the flush boundary is sealed (or failed). */
static bool sink_flush_done(const cs_sink *sink) {
  assert(sink->flush_waiting);
  if (sink->open_seq != 0 && sink->open_seq <= sink->flush_boundary_seq) return false;
  for (uint32_t slot = 0; slot < CS_SINK_SEALS_MAX; slot++) {
    uint64_t seq = sink->seals[slot].pack_seq;
    if (seq != 0 && seq <= sink->flush_boundary_seq) return false;
  }
  return true;
}

/* Queues FLUSHED and CLOSED once what they wait for is sealed. */
static void sink_complete(cs_sink *sink) {
  assert(sink->state != SINK_CLOSED || sink->seals_count == 0);
  if (sink->flush_waiting && sink_flush_done(sink)) {
    cs_sink_action action = {.op = CS_SINK_FLUSHED, .flush_id = sink->flush_id};
    action.err = sink_take_error(sink);
    sink_push(sink, &action);
    sink->flush_waiting = false;
  }
  if (sink->state == SINK_CLOSING && sink->open_seq == 0 && sink->seals_count == 0) {
    cs_sink_action action = {.op = CS_SINK_CLOSED};
    action.err = sink_take_error(sink);
    sink_push(sink, &action);
    sink->state = SINK_CLOSED;
  }
}

/* What admitting a record of record_bytes would do to the open pack. */
typedef struct admit_plan {
  bool seal_before; /* the open pack is sealed first to make room */
  bool new_pack;    /* the record starts a pack */
  bool seal_after;  /* the record's pack is sealed right after it */
} admit_plan;

static admit_plan sink_admit_plan(const cs_sink *sink, uint64_t record_bytes, uint64_t footer_bytes) {
  assert(sink->open_seq == 0 || sink->open_bytes <= sink->cfg.pack_bytes_max);
  assert(sink->open_records < sink->cfg.pack_records_max);
  assert(sink->open_footer_bytes <= sink->cfg.pack_footer_bytes_max);
  admit_plan plan = {0};
#if CAPSTORE_MUTANT == 30 /* a pack grows past its byte limit: the record that overflows it joins it */
  plan.seal_before = sink->open_seq != 0 && (sink->open_bytes > sink->cfg.pack_bytes_max ||
#else
  plan.seal_before = sink->open_seq != 0 && (record_bytes > sink->cfg.pack_bytes_max - sink->open_bytes ||
#endif
                                             footer_bytes > sink->cfg.pack_footer_bytes_max - sink->open_footer_bytes);
  plan.new_pack = sink->open_seq == 0 || plan.seal_before;
  uint32_t records_after = plan.new_pack ? 1u : sink->open_records + 1u;
  uint64_t bytes_after = plan.new_pack ? record_bytes : sink->open_bytes + record_bytes;
  plan.seal_after = records_after >= sink->cfg.pack_records_max || bytes_after > sink->cfg.pack_bytes_max;
  return plan;
}

/* Why a record cannot be admitted now, if it cannot. */
typedef enum admit_room { ADMIT_FITS = 0, ADMIT_QUOTA, ADMIT_SEALS } admit_room;

static admit_room sink_admit_room(const cs_sink *sink, uint64_t record_bytes, const admit_plan *plan) {
  assert(record_bytes <= sink->cfg.spool_bytes_max);
  assert(plan->new_pack || !plan->seal_before);
  uint64_t spool_bytes = sink_spool_bytes(sink);
  uint64_t packs_after = (uint64_t)sink_spool_packs(sink) + (plan->new_pack ? 1u : 0u);
  uint32_t seals_after = sink->seals_count + (plan->seal_before ? 1u : 0u) + (plan->seal_after ? 1u : 0u);
#if CAPSTORE_MUTANT == 32 /* the pack quota admits one pack more */
  if (packs_after > sink->cfg.spool_packs_max + 1) return ADMIT_QUOTA;
#else
  if (packs_after > sink->cfg.spool_packs_max) return ADMIT_QUOTA;
#endif
  if (spool_bytes > sink->cfg.spool_bytes_max) return ADMIT_QUOTA;
  if (record_bytes > sink->cfg.spool_bytes_max - spool_bytes) return ADMIT_QUOTA;
  return seals_after <= CS_SINK_SEALS_MAX ? ADMIT_FITS : ADMIT_SEALS;
}

/*
 * The answer for a record the spool cannot take now, by the full policy:
 * the quota (CS_E_SPOOL_FULL) or every seal slot busy (CS_E_FULL: the disk
 * is behind, not the uploads).
 */
static int sink_refuse_full(cs_sink *sink, uint64_t now_ns, uint64_t first_try_ns, admit_room room) {
  assert(first_try_ns <= now_ns && room != ADMIT_FITS);
  assert(sink->cfg.full_policy == CS_FULL_BLOCK || sink->cfg.full_policy == CS_FULL_REFUSE);
  uint64_t give_up_ns = add_saturating(first_try_ns, sink->cfg.block_max_ns);
#if CAPSTORE_MUTANT == 34 /* a producer blocked without a bound */
  give_up_ns = CS_NEVER;
#endif
  if (sink->cfg.full_policy == CS_FULL_BLOCK && now_ns < give_up_ns) {
    sink->stats.would_block++;
    return CS_E_WOULD_BLOCK;
  }
  if (room == ADMIT_SEALS) {
    sink->stats.refused_sealing++;
    return CS_E_FULL;
  }
#if CAPSTORE_MUTANT != 33 /* mutant 33: a refusal for the quota is not counted */
  sink->stats.refused_full++;
#endif
  return CS_E_SPOOL_FULL;
}

int cs_sink_admit(cs_sink *sink, uint64_t now_ns, uint64_t record_bytes, uint64_t first_try_ns,
                  uint64_t *pack_seq) {
  return cs_sink_admit_record(sink, now_ns, record_bytes, 0, first_try_ns, pack_seq);
}

int cs_sink_admit_record(cs_sink *sink, uint64_t now_ns, uint64_t record_bytes, uint64_t footer_bytes,
                         uint64_t first_try_ns, uint64_t *pack_seq) {
  assert(sink != NULL && pack_seq != NULL);
  assert(sink->state >= SINK_OPEN && sink->state <= SINK_CLOSED);
  if (first_try_ns > now_ns) return CS_E_INVALID_ARGUMENT;
  if (sink->state != SINK_OPEN) {
    sink->stats.refused_closed++;
    return CS_E_CLOSED;
  }
  if (record_bytes > sink->cfg.spool_bytes_max || footer_bytes > sink->cfg.pack_footer_bytes_max) {
    sink->stats.refused_full++;
    return CS_E_TOO_LARGE;
  }
  admit_plan plan = sink_admit_plan(sink, record_bytes, footer_bytes);
  admit_room room = sink_admit_room(sink, record_bytes, &plan);
  if (room != ADMIT_FITS) return sink_refuse_full(sink, now_ns, first_try_ns, room);
  if (plan.seal_before) sink_seal_open(sink, CS_SEAL_BYTES);
  if (plan.new_pack) {
    assert(sink->open_seq == 0);
    sink->open_seq = sink->next_seq++;
    sink->open_first_ns = now_ns;
  }
  sink->open_records++;
  sink->open_bytes += record_bytes;
  sink->open_footer_bytes += footer_bytes;
  *pack_seq = sink->open_seq;
  sink->stats.records_admitted++;
  sink->stats.bytes_admitted += record_bytes;
  if (plan.seal_after) {
    bool by_count = sink->open_records >= sink->cfg.pack_records_max;
    sink_seal_open(sink, by_count ? CS_SEAL_RECORDS : CS_SEAL_BYTES);
  }
  assert(sink_spool_bytes(sink) <= sink->cfg.spool_bytes_max);
  return CS_E_OK;
}

static uint32_t sink_seal_slot(const cs_sink *sink, uint64_t pack_seq) {
  assert(sink->seals_count <= CS_SINK_SEALS_MAX);
  if (pack_seq == 0) return CS_SINK_SEALS_MAX;
  uint32_t slot = 0;
  while (slot < CS_SINK_SEALS_MAX && sink->seals[slot].pack_seq != pack_seq) slot++;
  return slot;
}

int cs_sink_on_sealed(cs_sink *sink, uint64_t now_ns, uint64_t pack_seq, uint64_t size_bytes, int err) {
  assert(sink != NULL);
  assert(sink->state >= SINK_OPEN && sink->state <= SINK_CLOSED);
  if (err > 0 || (err != CS_E_OK && size_bytes != 0)) return CS_E_INVALID_ARGUMENT;
  uint32_t slot = sink_seal_slot(sink, pack_seq);
  if (slot == CS_SINK_SEALS_MAX) return CS_E_INVALID_ARGUMENT;
  uint64_t record_bytes = sink->seals[slot].record_bytes;
  assert(sink->seals_count > 0 && sink->seals_bytes >= record_bytes);
  sink->seals[slot].pack_seq = 0;
  sink->seals[slot].record_bytes = 0;
  sink->seals_count--;
  sink->seals_bytes -= record_bytes;
  if (err == CS_E_OK) {
    sink->settled_bytes += size_bytes;
    sink->settled_packs++;
    sink->stats.packs_sealed++;
  } else {
    sink->stats.seal_errors++;
    if (sink->unreported_err == CS_E_OK) sink->unreported_err = err;
  }
  sink_seal_due(sink, now_ns);
  sink_complete(sink);
  return CS_E_OK;
}

void cs_sink_on_removed(cs_sink *sink, uint64_t size_bytes) {
  assert(sink != NULL);
  assert(sink->settled_packs > 0); /* only a sealed, not yet removed pack can leave */
  assert(sink->settled_bytes >= size_bytes);
  sink->settled_packs--;
  sink->settled_bytes -= size_bytes;
}

void cs_sink_on_recovered(cs_sink *sink, uint64_t size_bytes) {
  assert(sink != NULL);
  assert(sink->settled_packs < UINT32_MAX);
  assert(sink->settled_bytes <= UINT64_MAX - size_bytes);
  sink->settled_packs++;
  sink->settled_bytes += size_bytes;
}

int cs_sink_flush(cs_sink *sink, uint64_t now_ns, uint64_t flush_id) {
  assert(sink != NULL);
  assert(sink->state >= SINK_OPEN && sink->state <= SINK_CLOSED);
  (void)now_ns;
  if (sink->state != SINK_OPEN) return CS_E_CLOSED;
  if (sink->flush_busy) return CS_E_STATE;
  assert(!sink->flush_waiting);
  sink->flush_busy = true;
  sink->flush_waiting = true;
  sink->flush_id = flush_id;
  sink->flush_boundary_seq = sink->open_seq != 0 ? sink->open_seq : sink->next_seq - 1;
  sink_seal_or_defer(sink, CS_SEAL_FLUSH);
  sink_complete(sink);
  return CS_E_OK;
}

int cs_sink_close(cs_sink *sink, uint64_t now_ns) {
  assert(sink != NULL);
  assert(sink->state >= SINK_OPEN && sink->state <= SINK_CLOSED);
  (void)now_ns;
  if (sink->state != SINK_OPEN) return CS_E_CLOSED;
  sink->state = SINK_CLOSING;
  sink_seal_or_defer(sink, CS_SEAL_CLOSE);
  sink_complete(sink);
  return CS_E_OK;
}

uint64_t cs_sink_next_deadline(const cs_sink *sink) {
  assert(sink != NULL);
  assert(sink->seals_count <= CS_SINK_SEALS_MAX);
  if (sink->state != SINK_OPEN || sink->open_seq == 0) return CS_NEVER;
  if (sink->seals_count == CS_SINK_SEALS_MAX) return CS_NEVER;
  return sink_linger_deadline(sink);
}

void cs_sink_tick(cs_sink *sink, uint64_t now_ns) {
  assert(sink != NULL);
  assert(sink->state >= SINK_OPEN && sink->state <= SINK_CLOSED);
  sink_seal_due(sink, now_ns);
}

bool cs_sink_poll(cs_sink *sink, uint64_t now_ns, cs_sink_action *out) {
  assert(sink != NULL && out != NULL);
  assert(sink->pending_count <= CS_SINK_PENDING_MAX);
  (void)now_ns;
  if (sink->pending_count == 0) return false;
  *out = sink->pending[sink->pending_head];
  sink->pending_head = (sink->pending_head + 1) % CS_SINK_PENDING_MAX;
  sink->pending_count--;
  if (out->op == CS_SINK_FLUSHED) {
    assert(sink->flush_busy && !sink->flush_waiting);
    sink->flush_busy = false;
  }
  return true;
}

void cs_sink_stats_get(const cs_sink *sink, cs_sink_stats *out) {
  assert(sink != NULL && out != NULL);
  assert(sink->seals_count <= CS_SINK_SEALS_MAX);
  *out = sink->stats;
  out->spool_bytes = sink_spool_bytes(sink);
  out->spool_packs = sink_spool_packs(sink);
  out->open_records = sink->open_records;
  out->seals_inflight = sink->seals_count;
}

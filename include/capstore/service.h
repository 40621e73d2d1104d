/*
 * capstore/service.h: the service core. It uploads sealed packs, verifies
 * them, indexes them into the catalog under a fenced lease, reconciles the
 * bucket against the catalog and answers flushes. It performs no I/O: events
 * with now_ns go in, actions come out of cs_service_poll, and the caller asks
 * cs_service_next_deadline when to call again.
 *
 * An action is one primitive request with an id; its completion comes back as
 * a CS_EV_DONE event carrying that id and an outcome. Memory referenced by an
 * action (pack refs, id lists) stays valid until its completion is delivered.
 * Memory referenced by an event only needs to live for the call.
 */
#ifndef CAPSTORE_SERVICE_H
#define CAPSTORE_SERVICE_H

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cs_role {
  CS_ROLE_PUBLISHER = 1, /* holds the lease, indexes, reconciles */
  CS_ROLE_UPLOADER = 2,  /* uploads its own spool; hands off at a verified upload */
  CS_ROLE_CAPTURE = 3,   /* the runtime only (capstore.h): captures and hands each sealed pack to the
                            `capstore serve` that owns the spool; no service runs. Never a service's role */
} cs_role;

typedef struct cs_service_config {
  cs_role role;
  uint32_t spool_packs_max;       /* pack table size: the spool quota in packs */
  uint32_t cycle_packs_max;       /* packs uploaded per cycle: the owed bound */
  uint32_t store_inflight_max;    /* parallel object-store requests */
  uint64_t index_batch_bytes_max; /* catalog byte budget for one index insert */
  uint32_t index_attempts_max;    /* content refusals before a pack is set aside; also the HEADs showing
                                     other bytes under a pack's key before it is set aside */
  uint64_t backoff_base_ns;
  uint64_t backoff_cap_ns;
  uint64_t lease_ttl_ns;
  uint64_t lease_guard_ns;        /* local margin before our own view of expiry */
  uint64_t reconcile_interval_ns; /* 0: no periodic pass (only the start pass, if on) */
  bool reconcile_at_start;        /* a pass at start (off for a bucket prefix others write) */
  uint32_t list_page_max;         /* keys asked for per LIST page */
  uint32_t flush_max;             /* concurrent flushes */
  uint32_t rejected_max;          /* set-aside packs remembered by name */
  uint64_t request_timeout_ns;    /* the adapters' whole-request timeout */
  /*
   * The store's LIST pages are complete: cs_store_probe's lists_bytewise.
   * An uploader hands its packs off at a verified upload and counts on the
   * publisher's reconcile to find them, so it refuses a store whose pages can
   * skip keys; a publisher indexes its own packs from its spool and runs (its
   * reconcile of others' leftovers may miss some there). Default false (not
   * known): set it from the probe; an uploader is refused until it is true.
   */
  bool store_lists_complete;
  /*
   * After an INDEX whose outcome is unknown (it may land later), the next
   * PUBLISH waits this long after the first INDEX accepted at a higher
   * version, so rows of the doubtful one have landed or been refused before
   * the watermark passes their version (docs/catalog-protocol.md, "Late
   * rows"). At least the catalog's worst apply delay: the runtime sets the
   * fence margin, which covers it. 0: no wait (unsafe where rows land late).
   */
  uint64_t index_settle_ns;
} cs_service_config;

/* Fills cfg with the documented defaults for role. */
void cs_service_config_default(cs_service_config *cfg, cs_role role);

/*
 * Validates cfg. Returns CS_E_OK or CS_E_CONFIG with a message naming the
 * field written to msg (always NUL-terminated when msg_size > 0).
 */
int cs_service_config_validate(const cs_service_config *cfg, char *msg, size_t msg_size);

/*
 * Validates an endpoint URL for the adapters' configuration: an explicit
 * scheme, https:// always, http:// only when allow_insecure, a non-empty host
 * (no spaces, no userinfo; an IPv6 address in brackets, "[::1]"), an
 * optional port 1..65535. Returns CS_E_OK or
 * CS_E_CONFIG with msg naming field and what is wrong.
 */
int cs_endpoint_validate(const char *field, const char *url, bool allow_insecure, char *msg, size_t msg_size);

/* Bytes of caller memory cs_service_init needs for cfg (0 if cfg is invalid). */
size_t cs_service_memory_size(const cs_service_config *cfg);

typedef enum cs_op {
  CS_OP_NONE = 0,
  /* Object store. */
  CS_OP_STORE_PUT,      /* pack: upload the pack's bytes with its metadata */
  CS_OP_STORE_HEAD,     /* pack (key, and pack_id where known) */
  CS_OP_STORE_LIST,     /* prefix page after token */
  /* Spool. */
  CS_OP_SPOOL_REMOVE,     /* pack: remove from the spool (hand-off done) */
  CS_OP_SPOOL_QUARANTINE, /* pack: set aside in the spool with reason */
  /* Catalog (statement-level primitives). */
  CS_OP_CAT_HEAD,        /* lease head term, whether it is free for us, watermark */
  CS_OP_CAT_CLAIM,       /* claim term base_term + 1 iff the head is base_term and free or ours */
  CS_OP_CAT_READ_CLAIMS, /* claims at term */
  CS_OP_CAT_RELEASE,     /* tombstone at term + 1 iff the head is term and ours; others wait out the margin */
  CS_OP_CAT_INDEX,       /* fenced insert of descriptors and inventory for packs at version */
  CS_OP_CAT_PUBLISH,     /* fenced insert of the publish row for version */
  CS_OP_CAT_COMMITTED,   /* which of ids are indexed (published inventory), which rejected */
  CS_OP_CAT_REJECT,      /* fenced insert of rejected rows for ids (set-aside packs) */
  /* Notifications to the driver; they need no completion. */
  CS_OP_FLUSH_DONE,
  CS_OP_STOPPED,
  CS_OP_COUNT_
} cs_op;

const char *cs_op_name(cs_op op);
/* True for ops that expect a CS_EV_DONE completion. */
bool cs_op_is_request(cs_op op);

#define CS_FLUSH_REJECTED_MAX 8u

typedef struct cs_flush_result {
  uint64_t flush_id;
  bool drained;            /* every pack sealed before the call is visible */
  uint32_t missing_packs;  /* sealed before the call, not yet handed off */
  uint32_t owed_packs;     /* uploaded, not yet in the catalog */
  uint32_t rejected_count; /* set aside since the last report (all of them) */
  uint32_t rejected_named; /* how many of them are in rejected[] */
  cs_uuid rejected[CS_FLUSH_REJECTED_MAX];
  int err;                 /* CS_E_OK, CS_E_TIMEOUT, CS_E_FULL, CS_E_CLOSED */
} cs_flush_result;

typedef struct cs_action {
  uint64_t id; /* request id, echoed by the completion; 0 for notifications */
  cs_op op;
  cs_uuid lease_id; /* catalog writes: the lease the statement is fenced on */
  uint64_t term;    /* CLAIM: base term; READ_CLAIMS/RELEASE: term; INDEX/PUBLISH: fence term */
  uint64_t version; /* INDEX, PUBLISH */
  const cs_pack_ref *pack;           /* PUT, HEAD, SPOOL_* */
  const cs_pack_ref *const *packs;   /* INDEX */
  const cs_uuid *ids;                /* COMMITTED, REJECT */
  uint32_t count;                    /* packs in INDEX, ids in COMMITTED and REJECT, keys in LIST */
  bool head_only;    /* HEAD by key from a LIST page: pack_id may be unknown */
  bool for_cycle;    /* CAT_HEAD: a publish cycle's read-back, not a lease step; a driver runs it beside the
                        cycle's INDEX and PUBLISH so that it never holds up a renewal */
  const char *token; /* LIST continuation (NUL-terminated; "" for the first page) */
  const char *reason; /* SPOOL_QUARANTINE: why, static text */
  cs_flush_result flush; /* FLUSH_DONE */
} cs_action;

typedef enum cs_event_kind {
  CS_EV_START = 1,   /* begin: claim the lease, reconcile */
  CS_EV_SEALED,      /* a pack is sealed in the spool (pack, recovered) */
  CS_EV_DONE,        /* completion of action id with outcome and results */
  CS_EV_FLUSH,       /* flush_id, deadline_ns */
  CS_EV_STOP,        /* stop starting work; STOPPED once nothing is in flight */
  CS_EV_RELEASE,     /* release the lease if held */
  CS_EV_BACKLOG,     /* key_count more own packs sealed in the spool wait outside the table, never
                        reported (the driver's backlog at start); each is reported later with backlog set */
} cs_event_kind;

/* HEAD results. */
typedef struct cs_head_info {
  bool is_pack;          /* carries dmi-format=dmi-pack-v1 metadata */
  uint64_t size_bytes;
  uint64_t index_bytes;
  uint32_t record_count;
  uint64_t created_at_ns;
  cs_uuid pack_id;
  uint8_t sha256[32];
} cs_head_info;

/* CAT_HEAD results. */
typedef struct cs_cat_head {
  uint64_t head_term;  /* 0 when no claim was ever made */
  bool head_free;      /* every claim at head_term expired, or all are ours */
  uint64_t watermark;  /* highest published version, 0 when none */
  uint64_t index_floor; /* highest version of any inventory row, published or not, 0 when none */
  /*
   * When the head is not free: how long, by the catalog's clock, until its
   * last live claim expires (a released holder's tombstone: the fence
   * margin). 0: unknown. Only a hint for when to look again: waiting less or
   * more is never unsafe, the claim and its read-back decide.
   */
  uint64_t busy_for_ns;
} cs_cat_head;

/* READ_CLAIMS results. */
typedef struct cs_claims {
  uint32_t claim_count;
  bool sole_mine; /* exactly one claim, ours, not expired */
  /*
   * A replicated catalog (docs/catalog-protocol.md, "Replicated catalog")
   * answers a new holding's sole claim only after a fenced quorum write has
   * passed every earlier holder's pending ones, and then reads these: the
   * watermark and the highest inventory version from that point on. 0 when
   * not read (one server: CAT_HEAD's answer before the claim already holds).
   */
  uint64_t watermark;
  uint64_t index_floor;
} cs_claims;

typedef struct cs_event {
  cs_event_kind kind;
  uint64_t id;        /* DONE: the action id; FLUSH: the flush id */
  cs_outcome outcome; /* DONE */
  /* SEALED */
  const cs_pack_ref *pack;
  bool recovered; /* found in the spool at start: it may already be uploaded */
  bool backlog;   /* reported again from the driver's backlog: refused CS_E_FULL before, or counted by
                     CS_EV_BACKLOG. A SEALED refused CS_E_FULL must be reported again (backlog set)
                     once a pack leaves the table: until then no flush sealed after it drains */
  /* FLUSH */
  uint64_t deadline_ns;
  /* DONE payloads, by op */
  cs_head_info head;
  cs_cat_head cat_head;
  cs_claims claims;
  const bool *held;          /* COMMITTED: one per id, indexed at a published version */
  const bool *rejected;      /* COMMITTED: one per id, recorded as rejected (NULL: none) */
  const char *const *keys;   /* LIST: key_count NUL-terminated keys */
  uint32_t key_count;
  const char *next_token;    /* LIST: NULL or "" when this was the last page */
} cs_event;

typedef enum cs_lease_state {
  CS_LEASE_NONE = 0,     /* uploader, or not yet claimed */
  CS_LEASE_CLAIMING,
  CS_LEASE_HELD,
  CS_LEASE_BUSY,         /* another holder's claim is live */
  CS_LEASE_QUARANTINED,  /* unknown outcome on a lease write: wait one TTL */
  CS_LEASE_RELEASED,
} cs_lease_state;

const char *cs_lease_state_name(cs_lease_state state);

#define CS_LAST_ERROR_MAX 160u

typedef struct cs_snapshot {
  uint64_t spooled;          /* packs sealed and known */
  uint64_t uploaded;         /* verified uploads */
  uint64_t indexed;          /* packs confirmed in the catalog */
  uint64_t handed_off;       /* packs removed from the spool */
  uint32_t pending_index;    /* owed to the catalog now */
  uint32_t pending_spool;    /* in the table, not yet handed off */
  uint64_t set_aside;
  uint64_t batch_splits;
  uint64_t upload_mismatches; /* HEADs that showed other bytes under an own pack's key; it was sent again */
  uint64_t reconcile_passes;
  uint64_t reconcile_adopted;
  uint64_t reconcile_skipped;
  uint64_t reconcile_head_errors;
  uint64_t reconcile_list_errors;  /* LIST refused (not an outage): the pass ends, retried later */
  uint64_t cycles;
  uint64_t cycles_failed;
  uint64_t fenced_out;       /* indexed packs the catalog did not confirm */
  uint64_t requests;         /* requests issued */
  uint32_t inflight;         /* requests in flight now */
  uint32_t inflight_max_seen;
  cs_lease_state lease_state;
  uint64_t lease_term;
  uint64_t lease_renewals;
  uint64_t watermark;
  uint64_t oldest_unshipped_age_ns;
  uint32_t rejected_count;   /* entries in the rejected list now: it only grows until it holds rejected_max;
                                then a new entry replaces the oldest one the catalog has recorded, or, with
                                none recorded, the pack is only counted (flushes count it without its name) */
  uint32_t backlog;          /* own packs sealed in the spool waiting outside the table: flushes count them missing */
  char last_error[CS_LAST_ERROR_MAX];
} cs_snapshot;

typedef struct cs_service cs_service;

/*
 * Initializes a service in mem (mem_size >= cs_service_memory_size(cfg),
 * aligned for uint64_t). lease_id identifies this process's lease claims.
 * seed starts the PRNG of the jitters (backoff, contested claims), folded
 * with lease_id so that processes given one seed still jitter apart.
 * Returns CS_E_OK, CS_E_CONFIG (msg names the field) or CS_E_NO_MEMORY.
 */
int cs_service_init(cs_service **out, void *mem, size_t mem_size, const cs_service_config *cfg,
                    const cs_uuid *lease_id, uint64_t seed, char *msg, size_t msg_size);

/*
 * Delivers one event at now_ns. Returns CS_E_OK, CS_E_INVALID_ARGUMENT for a
 * malformed event (no event, an unknown kind, a SEALED with no pack or a key
 * of 0 or CS_KEY_MAX bytes or more, a completion of an unknown id or with an
 * outcome past the last), CS_E_FULL when a sealed pack does not fit the table
 * (the spool quota should have refused it) or when flush answers are waiting
 * to be polled (poll, then flush again), CS_E_CLOSED for SEALED after STOP.
 * A refused event is taken nowhere: no pack, request or count moves (flushes
 * whose deadline has come are still answered).
 */
int cs_service_on_event(cs_service *svc, uint64_t now_ns, const cs_event *ev);

/* Writes the next action to out and returns true, or returns false when none. */
bool cs_service_poll(cs_service *svc, uint64_t now_ns, cs_action *out);

/* When the service next needs to be called with no event (CS_NEVER when idle). */
uint64_t cs_service_next_deadline(const cs_service *svc);

void cs_service_snapshot(const cs_service *svc, uint64_t now_ns, cs_snapshot *out);

/* True once STOPPED has been emitted. */
bool cs_service_stopped(const cs_service *svc);

/* Occupancy of the bounded tables, for the simulator's memory invariant. */
typedef struct cs_service_usage {
  uint32_t packs_used, packs_max;
  uint32_t owed_used, owed_max;
  uint32_t inflight_used, inflight_max;
  uint32_t flush_used, flush_max;
} cs_service_usage;
void cs_service_usage_get(const cs_service *svc, cs_service_usage *out);

#ifdef __cplusplus
}
#endif

#endif

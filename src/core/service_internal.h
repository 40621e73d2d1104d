/*
 * The service core's private state. Only src/core/service*.c include this.
 * All memory is carved out of the caller's buffer at init; nothing grows.
 */
#ifndef CAPSTORE_SERVICE_INTERNAL_H
#define CAPSTORE_SERVICE_INTERNAL_H

#include "capstore/service.h"

#ifndef CAPSTORE_MUTANT
#define CAPSTORE_MUTANT 0
#endif

/* Where a pack is on its way from the spool to the catalog. */
typedef enum pack_stage {
  STAGE_FREE = 0,
  STAGE_SPOOLED,   /* sealed in our spool, not yet uploaded */
  STAGE_UPLOADING, /* part of this cycle's uploads */
  STAGE_OWED,      /* verified in the store, owed to the catalog */
  STAGE_INDEXED,   /* inserted at this cycle's version, not yet confirmed */
  STAGE_DONE,      /* handed off: confirmed in the catalog (or verified, for uploaders) */
  STAGE_SET_ASIDE, /* rejected: quarantine in the spool pending */
} pack_stage;

#define STAGE_COUNT_ 7

typedef enum upload_step {
  UPLOAD_NONE = 0,
  UPLOAD_HEAD_FIRST, /* it may already be there: HEAD before PUT */
  UPLOAD_PUT,
  UPLOAD_VERIFY,     /* HEAD after PUT */
} upload_step;

typedef struct pack_slot {
  cs_pack_ref ref;
  uint64_t seal_seq;     /* order of arrival; flush boundaries compare it */
  uint64_t sealed_at_ns;
  uint64_t retry_at_ns;  /* spool action retry time */
  uint32_t attempts;     /* content refusals by the catalog */
  uint32_t mismatches;   /* HEADs of its key that showed other bytes (torn uploads sent again) */
  uint8_t stage;
  uint8_t upload;
  bool own;              /* in our spool (false: adopted from the bucket) */
  bool in_spool;         /* adopted, and sealed in our spool too: its hand-off removes it there */
  bool maybe_uploaded;   /* a PUT may have applied, or recovered at start */
  bool busy;             /* a request on this pack is in flight */
  bool queued;           /* in this cycle's work list */
  const char *reason;    /* set-aside reason, static text */
} pack_slot;

typedef enum req_lane {
  LANE_CYCLE = 1,
  LANE_LEASE,
  LANE_SPOOL,
} req_lane;

typedef struct request {
  uint64_t id;      /* 0: free */
  cs_op op;
  req_lane lane;
  uint32_t slot;    /* pack slot, or page entry for reconcile HEADs */
  uint64_t sent_ns;
} request;

typedef enum cycle_phase {
  PHASE_IDLE = 0,
  PHASE_UPLOAD,
  PHASE_INDEX,
  PHASE_PUBLISH,
  PHASE_CONFIRM,
  PHASE_RECON_LIST,
  PHASE_RECON_COMMITTED,
  PHASE_RECON_HEAD,
  PHASE_REJECT,         /* record set-aside packs in the catalog */
  PHASE_REJECT_CONFIRM, /* and read back which rows took */
  PHASE_STANDBY,        /* another publisher holds the lease: ask which owed packs it indexed */
} cycle_phase;

typedef enum lease_step {
  LEASE_STEP_IDLE = 0,
  LEASE_STEP_HEAD,
  LEASE_STEP_CLAIM,
  LEASE_STEP_READ,
  LEASE_STEP_RELEASE,
} lease_step;

typedef struct batch_range {
  uint32_t first; /* index into work[] */
  uint32_t count;
} batch_range;

enum { PAGE_CANDIDATE = 0, PAGE_HELD, PAGE_QUERYING, PAGE_DONE };

typedef struct page_entry {
  cs_pack_ref ref; /* key and pack id from the LIST page */
  uint8_t state;   /* PAGE_CANDIDATE, PAGE_HELD, PAGE_QUERYING, PAGE_DONE */
} page_entry;

typedef struct flush_entry {
  uint64_t id;
  uint64_t deadline_ns;
  uint64_t boundary_seq;
  bool active;
} flush_entry;

typedef struct rejected_entry {
  cs_uuid pack_id;
  uint64_t seq;   /* age: lower is older; 0 marks a free entry */
  bool reported;  /* named by a flush answer */
  bool recorded;  /* in the catalog's rejected rows (uploaders: nothing to record) */
} rejected_entry;

struct cs_service {
  cs_service_config cfg;
  cs_uuid lease_id;
  cs_prng prng;

  pack_slot *slots;        /* spool_packs_max + cycle_packs_max */
  uint32_t slot_count;
  uint32_t own_used;
  uint32_t adopted_used;
  uint32_t stage_count[STAGE_COUNT_]; /* slots per stage (FREE not counted) */
  uint64_t next_seal_seq;
  /*
   * Own packs sealed in the spool that wait outside the table: refused
   * CS_E_FULL, or beyond it at start (CS_EV_BACKLOG). The driver reports
   * each again, with backlog set, as the table gets room. backlog_seq is a
   * seal sequence taken when the backlog last became non-empty: at or before
   * every one of them, so a flush called after it waits for them all.
   */
  uint32_t backlog;
  uint64_t backlog_seq;

  request *requests;
  uint32_t request_max;
  uint64_t next_request_id;

  /* The cycle: one pipeline of phases. */
  cycle_phase phase;
  bool cycle_failed;
  bool cycle_active;
  uint32_t failures;        /* consecutive failed cycles */
  uint64_t backoff_until_ns;
  uint32_t *work;           /* slot indexes in this cycle's upload/index set */
  uint32_t work_count;
  uint32_t work_next;       /* next upload to start */
  batch_range *batches;     /* stack of index batches */
  uint32_t batch_count;
  const cs_pack_ref **batch_refs; /* the INDEX action's pack list */
  uint32_t indexed_in_cycle;
  uint32_t verified_in_cycle;       /* uploads of this cycle verified: none, and a spooled pack may join */
  bool publish_sent;        /* this cycle's PUBLISH went out */
  bool confirm_sent;        /* this cycle's COMMITTED check went out */
  uint64_t version;         /* this cycle's index version */
  uint64_t cycle_term;      /* the term our holding began at when the version was chosen */
  uint64_t next_version;
  uint64_t index_doubt_version; /* highest version of an INDEX whose outcome is unknown; 0: none */
  uint64_t index_settle_ns;     /* a PUBLISH above the doubt waits until then; 0: not yet set */
  bool settle_asked;            /* this cycle's CAT_HEAD read-back after a doubt is sent */
  bool settle_known;            /* and answered: the cycle's rows are in; index_settle_ns is set */
  cs_uuid *ids;             /* COMMITTED ids */
  uint32_t *id_slots;       /* CONFIRM: slot per id */
  uint32_t id_count;

  /* Reconcile. */
  bool reconcile_due;
  bool reconcile_errors;
  bool recon_active;       /* a pass is in progress */
  bool last_was_reconcile; /* the last cycle served reconcile: the next serves uploads first */
  bool last_was_reject;    /* the last cycle served rejected rows: the next serves the rest first */
  /*
   * Rejected rows back off on their own: the cycles in between (another turn,
   * a reconcile page) succeed and reset failures, so a REJECT the catalog kept
   * refusing went out again every few milliseconds (seed 400199334).
   */
  uint32_t reject_failures;    /* consecutive failed attempts at the rejected rows */
  uint64_t reject_retry_at_ns; /* no attempt before this */
  uint64_t reconcile_next_ns;
  page_entry *page;
  uint32_t page_count;
  bool page_listed;  /* the page for token has been listed */
  bool page_checked; /* the page's ids went through the committed-ids query */
  uint32_t page_adopted; /* packs this page's HEADs adopted */
  uint32_t cycle_pages;  /* LIST pages issued in this cycle */
  bool page_last;
  char token[CS_KEY_MAX];
  char next_token[CS_KEY_MAX];

  /* The lease. */
  cs_lease_state lease;
  lease_step lease_step;   /* the lease request in flight */
  lease_step lease_todo;   /* the lease request to issue next */
  uint64_t lease_term;
  uint64_t lease_held_from_term; /* the term this holding began at; renewals keep it */
  uint64_t lease_base_term;   /* the claim in flight is at base + 1 */
  uint64_t lease_claim_sent_ns;
  uint64_t lease_expires_ns;  /* our conservative local view */
  uint64_t lease_next_ns;     /* next lease action (renew, retry, end of quarantine) */
  uint64_t lease_watermark;   /* highest watermark seen at the catalog */
  uint64_t lease_index_floor; /* highest inventory version seen at the catalog's head */
  bool lease_renewing;
  bool lease_renew_at_cycle; /* mutant 3 only */
  bool release_wanted;

  flush_entry *flushes;
  rejected_entry *rejected;  /* rejected_max entries, found by scan */
  uint32_t rejected_len;     /* entries in use */
  uint64_t rejected_seq;
  uint32_t rejected_unnamed; /* evicted before any flush named them: counted in the next answer */

  /* Notifications (FLUSH_DONE, STOPPED) waiting for poll. */
  cs_action *notes;
  uint32_t note_head;
  uint32_t note_count;
  uint32_t note_max;

  uint64_t last_now_ns; /* the latest now_ns seen, for next_deadline */
  bool started;
  bool stopping;
  bool stopped;
  cs_snapshot stats;
};

/* Shared by service.c, service_cycle.c and service_lease.c. */
bool cs_svc_is_publisher(const cs_service *svc);
/* Moves slot to stage, keeping the per-stage counts. */
void cs_svc_stage_set(cs_service *svc, pack_slot *slot, pack_stage stage);
uint32_t cs_svc_stage_count(const cs_service *svc, pack_stage stage);
void cs_svc_set_error(cs_service *svc, const char *what, const char *detail, cs_outcome outcome);
uint32_t cs_svc_slot_index(const cs_service *svc, const pack_slot *slot);
pack_slot *cs_svc_slot_find(cs_service *svc, const cs_uuid *pack_id);
pack_slot *cs_svc_slot_alloc(cs_service *svc, bool own);
void cs_svc_slot_free(cs_service *svc, pack_slot *slot);
uint32_t cs_svc_owed_count(const cs_service *svc);
bool cs_svc_lease_usable(const cs_service *svc, uint64_t now_ns);
request *cs_svc_req_alloc(cs_service *svc, cs_op op, req_lane lane, uint32_t slot, uint64_t now_ns);
void cs_svc_req_free(cs_service *svc, request *req);
uint32_t cs_svc_lane_inflight(const cs_service *svc, req_lane lane, bool store_only);
void cs_svc_action_init(cs_action *out, const request *req);
bool cs_svc_rejected_has(const cs_service *svc, const cs_uuid *pack_id);
uint32_t cs_svc_rejected_unrecorded(const cs_service *svc);
void cs_svc_rejected_mark_recorded(cs_service *svc, const cs_uuid *pack_id);
void cs_svc_set_aside(cs_service *svc, pack_slot *slot, const char *reason);

void cs_svc_cycle_on_done(cs_service *svc, uint64_t now_ns, const request *req, const cs_event *ev);
bool cs_svc_cycle_poll(cs_service *svc, uint64_t now_ns, cs_action *out);
uint64_t cs_svc_cycle_deadline(const cs_service *svc);
void cs_svc_spool_on_done(cs_service *svc, uint64_t now_ns, const request *req, const cs_event *ev);
bool cs_svc_spool_poll(cs_service *svc, uint64_t now_ns, cs_action *out);
uint64_t cs_svc_spool_deadline(const cs_service *svc);
void cs_svc_lease_on_done(cs_service *svc, uint64_t now_ns, const request *req, const cs_event *ev);
bool cs_svc_lease_poll(cs_service *svc, uint64_t now_ns, cs_action *out);
uint64_t cs_svc_lease_deadline(const cs_service *svc);

void cs_svc_recon_begin(cs_service *svc);
bool cs_svc_recon_advance(cs_service *svc, uint64_t now_ns);
bool cs_svc_recon_gather_more(const cs_service *svc, uint64_t now_ns);
bool cs_svc_recon_list_issue(cs_service *svc, uint64_t now_ns, cs_action *out);
bool cs_svc_recon_committed_issue(cs_service *svc, uint64_t now_ns, cs_action *out);
bool cs_svc_recon_head_issue(cs_service *svc, uint64_t now_ns, cs_action *out);
void cs_svc_recon_list_on_done(cs_service *svc, uint64_t now_ns, const cs_event *ev);
void cs_svc_recon_committed_on_done(cs_service *svc, const cs_event *ev);
void cs_svc_recon_head_on_done(cs_service *svc, const request *req, const cs_event *ev);

#endif

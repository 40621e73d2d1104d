/*
 * sim/world.h: the simulator's world, private to sim/. Fixed-size tables
 * sized here; exceeding one is a simulator crash (exit code SIM_EXIT_CRASH),
 * never a silent truncation.
 */
#ifndef CAPSTORE_SIM_WORLD_H
#define CAPSTORE_SIM_WORLD_H

#include "sim.h"

#include "capstore/array.h"
#include "capstore/read_plan.h"

#include <setjmp.h>

#define SIM_PROCS_MAX 6u
#define SIM_OBJECTS_MAX 65536u
#define SIM_EVENTS_MAX 65536u
#define SIM_REQS_MAX 1024u
#define SIM_PACKS_MAX 65536u
/* The workload stops capturing when this many packs exist (a long run with a
   millisecond linger seals one pack per record): the rest of the table is for
   the packs still open, plan seals and the store's other objects. */
#define SIM_WORKLOAD_PACKS_MAX (SIM_PACKS_MAX - 8192u)
#define SIM_CLAIMS_MAX 262144u
#define SIM_PUBLISH_MAX 262144u
#define SIM_FILES_MAX 1024u
#define SIM_BATCH_MAX 256u
#define SIM_PENDING_PACKS 64u
#define SIM_FLUSHES_MAX 16u
#define SIM_NONE UINT32_MAX
/* A seal may come this much after the linger: the pump runs at the deadline, give or take a tick. */
#define SIM_LINGER_SLACK_NS (50u * CS_MS_NS)
#define SIM_CORNERS_MAX 3u
#define SIM_WAKES_MAX 8u /* config bounds drawn to an edge in one seed */

typedef enum proc_kind { PROC_PUBLISHER = 1, PROC_UPLOADER, PROC_RIVAL } proc_kind;

/* What the world knows about every pack ever sealed: the ground truth. */
typedef struct sim_pack {
  cs_pack_ref ref;
  uint32_t proc;
  uint64_t capture_first; /* capture ids [capture_first, capture_first + ref.record_count) */
  bool durable;           /* its seal was acknowledged */
  bool poison_large;      /* too large for any index batch */
  bool poison_invalid;    /* the catalog refuses its content */
  bool removed;           /* gone from its spool */
  bool rejected;          /* the catalog holds a rejected row for it */
  uint64_t min_version;   /* lowest inventory version, 0 when never indexed */
  uint64_t sealed_order;  /* when its SEALED reached the current service */
  uint32_t puts;          /* PUTs applied by the store */
  uint32_t reported;      /* times a flush of reporter named it as set aside */
  cs_uuid reporter;       /* lease id of the service that last reported it */
  /* What each proc's current service was told (svc_gen, 0 = nothing): the checker's memory. */
  uint32_t verified_gen[SIM_PROCS_MAX];  /* a HEAD showed it as a pack, with this size and checksum: */
  uint64_t verified_size[SIM_PROCS_MAX];
  uint64_t verified_sha8[SIM_PROCS_MAX]; /* the checksum's first 8 bytes */
  uint32_t held_gen[SIM_PROCS_MAX];      /* a committed-ids answer said the catalog holds it */
  uint32_t too_large_gen[SIM_PROCS_MAX]; /* an INDEX of it alone was refused as too large */
  uint32_t head_first_gen[SIM_PROCS_MAX]; /* the service must HEAD it before a PUT: recovered, or a PUT of it
                                             landed but was answered with a failure */
  uint32_t invalid_gen[SIM_PROCS_MAX];   /* ... refused for its content, invalid_count times */
  uint32_t invalid_count[SIM_PROCS_MAX];
  /* A store that lies (store_other_bytes, store_changes): what its owner could know. */
  uint32_t mismatch_gen[SIM_PROCS_MAX];  /* its owner's service (svc_gen) saw other bytes under its key, */
  uint32_t mismatch_count[SIM_PROCS_MAX]; /* ... this many times, each after a PUT of its that applied */
  bool put_since_mismatch[SIM_PROCS_MAX]; /* a PUT of its owner applied since the last counted mismatch */
  bool conflict;          /* its owner saw other bytes under its key index_attempts_max times: it may be set aside */
  uint64_t damaged_ns;    /* when the store last put other bytes under its key or lost it (0: never) */
  uint64_t owner_head_ns; /* when a HEAD of its key by its owner last applied */
  uint64_t owner_right_ns; /* when such a HEAD last found its own bytes */
} sim_pack;

typedef struct sim_object {
  cs_pack_ref ref;   /* key, and for packs the metadata */
  bool is_pack;
  bool gone;         /* lost by the store (store_changes): absent to HEAD and LIST until a PUT */
  uint32_t pack;     /* truth index or SIM_NONE */
} sim_object;

#define SIM_REPLICAS_MAX 3u
#define SIM_REPLICA_WINDOWS_MAX 4u
/* The catalog's tables a quorum write goes to: ClickHouse admits one pending quorum write per table. */
typedef enum sim_table { SIM_TABLE_CLAIMS, SIM_TABLE_INVENTORY, SIM_TABLE_PUBLISHES, SIM_TABLE_REJECTED, SIM_TABLES_ } sim_table;
/* A replica (or, replica == SIM_NONE, the coordinator) down from from_ns until until_ns. */
typedef struct sim_replica_window {
  uint32_t replica;
  uint64_t from_ns, until_ns;
} sim_replica_window;

typedef struct sim_claim {
  uint64_t term;
  cs_uuid lease_id;
  uint32_t proc;
  uint64_t acquired_ns; /* true time (for the checkers) */
  uint64_t expires_ns;  /* the catalog's stamp: its clock (sim_catalog_now) + TTL */
  bool released;        /* a release tombstone */
  uint64_t seen_ns[SIM_REPLICAS_MAX]; /* replica defect 1 (asynchronous replicas): when each replica has it */
} sim_claim;

typedef struct sim_publish {
  uint64_t version;
  uint64_t term;
  uint32_t proc;
  uint64_t at_ns;
  cs_uuid lease_id;
  uint64_t seen_ns[SIM_REPLICAS_MAX]; /* replica defect 1: when each replica has it */
} sim_publish;

/* A request on the wire, with its payload copied at send time. */
typedef struct sim_req {
  bool used;
  uint32_t svc_gen;           /* the service instance that sent it */
  uint32_t refs;              /* scheduled ARRIVE/REPLY events still to come */
  cs_outcome forced;          /* network outcome that replaces the server's, or CS_OUT_OK */
  bool has_forced;
  uint32_t proc;
  uint32_t incarnation;
  uint64_t action_id;
  cs_op op;
  bool to_catalog;
  bool head_only;
  bool applied;
  bool answered;
  bool delivered;             /* its completion reached the service that sent it */
  bool land_pending;          /* a fenced write passed its fence; its rows land later */
  bool rows_landed;           /* INDEX: its descriptor rows landed (unfenced, at arrival) */
  bool inventory_landed;      /* INDEX: its inventory rows landed (fenced): the rows are named */
  bool reply_after_land;      /* the answer leaves once the rows landed (or the fence refused) */
  bool version_refused;       /* INDEX: refused for its version (below an inventory row, or at or below W) */
  bool version_refused_late;  /* ... only by inventory rows of a late quorum INDEX landed after the sender read its floor */
  bool token_too_long;        /* LIST: the store answers a continuation token of CS_KEY_MAX bytes or more */
  bool held_by_pause;         /* not yet written to the socket when its process paused */
  uint64_t fence_term;        /* fenced writes: the head term its fence passed at */
  uint32_t replica;           /* a replicated catalog: the replica its sender talks to */
  bool quorum_late;           /* its quorum timed out (319): its rows land when the replicas fetch them */
  uint64_t claim_expires_ns;  /* CLAIM or RELEASE landing late: the expiry its row was written with */
  uint64_t reply_half_ns;     /* the answer's way back */
  cs_uuid lease_id;
  uint64_t term;
  uint64_t version;
  uint32_t count;
  uint32_t packs[SIM_BATCH_MAX];  /* INDEX: truth indexes; COMMITTED: truth or SIM_NONE */
  cs_pack_ref ref;                /* PUT/HEAD */
  char token[CS_KEY_MAX];
  uint64_t sent_ns;               /* true time */
  /* The answer. */
  cs_outcome outcome;
  cs_head_info head;
  cs_cat_head cat_head;
  cs_claims claims;
  bool held[SIM_BATCH_MAX];
  bool rejected[SIM_BATCH_MAX];
  uint32_t key_count;
  uint32_t keys[SIM_BATCH_MAX];  /* object indexes */
  char next_token[CS_KEY_MAX];
} sim_req;

typedef enum file_state { FILE_FREE = 0, FILE_OPEN, FILE_READY, FILE_QUARANTINED } file_state;

typedef struct sim_file {
  uint8_t state;
  bool synced;     /* data fsynced */
  bool linked;     /* the ready name is durable (directory fsynced) */
  bool removing;   /* a removal or quarantine is under way (the spool lane runs it before a new listing) */
  bool backlog;    /* ready, but the service's table was full when it was reported: reported again later */
  bool was_backlog; /* once in the backlog: a flush counts the backlog whole, from its first pack's sequence */
  uint32_t pack;   /* truth index */
  /* The snapshot ledger (checker): the service that was told of it, when, and whether a reconcile was under way. */
  uint32_t told_gen;     /* svc_gen of the service whose SEALED took it (0: none) */
  bool told_late;        /* told after that service listed the store: reconcile may hold it in an adopted slot */
  uint64_t told_local_ns;
  uint64_t ready_local_ns; /* when it became ready (its seal durable, or handed in): flush's missing count */
} sim_file;

/* A pack the sink has opened or is sealing, by sink sequence number. */
typedef struct sim_pending_pack {
  bool used;
  bool sealing;   /* its SEAL was carried out: a file exists */
  uint64_t seq;
  uint64_t capture_first;
  uint32_t records;
  uint64_t bytes;
  uint64_t footer;         /* its records' descriptor bytes (cs_sink_admit_record) */
  uint64_t first_local_ns; /* when its first record was admitted (the linger clock) */
} sim_pending_pack;

typedef struct sim_flush_call {
  bool used;
  uint64_t id;
  uint64_t called_local_ns;
  uint64_t deadline_local_ns;
  uint64_t boundary_order;
  uint32_t expect;     /* cs_plan_flush_expect */
  bool from_engine;
  bool after_stop;     /* called after the service was told to stop: answered CS_E_CLOSED at once */
  uint64_t set_aside_at_call; /* the service's set-aside count when the flush was called */
  bool backlog_at_call;       /* packs waited outside the service's full table at the call */
  uint32_t svc_gen;           /* the service it was called on */
} sim_flush_rec;

typedef struct sim_proc {
  uint32_t index;
  proc_kind kind;
  bool alive;
  uint32_t incarnation;
  uint64_t paused_until_ns;
  uint64_t last_pause_end_ns;
  uint64_t last_pause_end_local_ns;
  uint64_t pause_on_write_ns; /* armed: pause this long right after the next fenced write is sent */
  bool reopen_wanted;         /* a new engine opens on this spool once the close is done */
  bool start_refused;         /* the world refused the START_SERVICE of the engine's operation in flight */
  uint32_t starts_refused;    /* how many were */
  bool open_step_failed;      /* the world failed an open step of the engine's operation in flight */
  bool seal_failed;           /* a SEAL_SINK of this engine failed: none of its later opens may sweep (engine.h) */
  bool swept_in_open;         /* the open under way issued SWEEP_OPEN */
  uint64_t step_deadline_ns;  /* the deadline of the step in flight (local clock) */
  uint64_t reopen_delay_ns;   /* after the close's REPORT */
  int64_t skew_ns;
  int32_t drift_ppm;
  cs_uuid lease_id;
  /* Cores. */
  cs_service_config svc_cfg;
  cs_service *svc;
  void *svc_mem;
  size_t svc_mem_size;
  bool svc_started;
  bool svc_stop_sent;
  uint32_t svc_gen;         /* bumped at every service start; older completions are dropped */
  uint32_t bad_event_probes; /* SEALED events delivered: every 16th is preceded by a malformed event */
  uint64_t lease_req_action; /* the lease step in flight (its action id), 0 for none ... */
  uint32_t lease_req_gen;    /* ... of the service of this generation */
  uint32_t store_inflight;     /* object-store requests (PUT, HEAD, LIST) of this generation's service in flight ... */
  uint32_t store_inflight_gen; /* ... of the service of this generation */
  uint64_t held_term;          /* the last term a read-back of this generation's claims showed solely ours ... */
  uint32_t held_term_gen;      /* ... by the service of this generation */
  uint64_t claim_terms[8];   /* the last distinct terms this generation's service claimed (CAT_CLAIM: base + 1; a ring) ... */
  uint32_t claim_terms_n;    /* ... how many were sent ... */
  uint32_t claim_terms_gen;  /* ... by the service of this generation */
  cs_sink_config sink_cfg;
  cs_sink sink;
  bool sink_open;
  bool sink_flush_waiting;    /* a FLUSH_SINK step's flush awaits its FLUSHED ... */
  uint64_t sink_flush_wait_id;  /* ... its id ... */
  uint64_t sink_flush_wait_seq; /* ... and the last pack it waits for: every pack open or sealing at the call */
  bool sink_closed;
  bool seal_asked;    /* the engine asked this sink to seal and close */
  int sink_err_kept;  /* a seal error the sink reported to a flush or close the engine had given up on */
  cs_engine engine;
  cs_engine_config engine_cfg;
  cs_engine_step step;      /* engine step in flight */
  uint64_t step_id;
  uint64_t step_flush_id;   /* service flush the step waits for */
  bool step_waits_release;
  uint64_t engine_op_started_local;
  cs_engine_opkind engine_op;
  /* Spool. */
  sim_file files[SIM_FILES_MAX];
  uint32_t files_end;       /* past the highest file ever allocated: the loops over files stop here */
  sim_pending_pack pending[SIM_PENDING_PACKS];
  /* Capture workload. */
  uint64_t next_capture_id; /* (index << 40) + records admitted so far */
  bool capturing;
  bool workload;
  uint64_t capture_retry_first_local; /* 0 when no record is waiting */
  uint64_t capture_retry_bytes;
  uint64_t sink_refused;    /* admits the current sink answered with a refusal (not would-block) */
  uint64_t sink_blocked;    /* admits it answered would-block */
  uint64_t last_admit_seq;  /* the pack the last admitted record joined */
  uint64_t sink_flush_seq;  /* the open pack when the sink was last asked to flush or seal (it seals that one) */
  uint64_t seals_full_local_ns; /* last time every seal slot of the sink was busy */
  uint64_t engine_op_started_ns; /* true time the close or replace in progress began */
  bool engine_op_slow_disk;      /* the disk was slow within 15 s before it began (a seal may wait) */
  uint64_t sink_sealed_ok, sink_seal_errors; /* seal completions the current sink took (its stats must agree) */
  uint32_t engine_starts;        /* operations asked of the engine (every fifth is preceded by a forbidden one) */
  /* Flushes issued to the service. */
  sim_flush_rec flushes[SIM_FLUSHES_MAX];
  uint64_t next_flush_id;
  /* Crash points armed by a plan. */
  int crash_point;  /* -1 none, else cs_plan_crash_point */
  uint64_t crash_uploaded_base;
  uint64_t crash_indexed_base;
  /* Failed requests in the current one-second bucket (the backoff invariant). */
  uint64_t fail_bucket_start_ns;
  uint32_t fail_bucket_count;
  uint64_t forbidden_heads; /* reconcile HEADs answered 403 to the current service */
  uint64_t failed_heads;    /* reconcile HEADs that failed in any way (not OK, not 404) */
  uint64_t refused_lists;   /* reconcile LISTs refused (failed, not an outage) */
  uint64_t reported_total;  /* set-aside packs the current service's flushes reported */
  uint32_t split_bound;     /* after a batch refused as too large: the next INDEX holds at most this many */
  uint64_t split_cycle;     /* the service's cycle count when split_bound was set: it holds in that cycle */
  uint64_t splits_seen;     /* multi-pack batches the catalog refused (too large or invalid): splits */
  /* The snapshot ledger of the current service (6.11): what it was seen to do, counted outside it. */
  uint64_t led_requests;    /* request actions it emitted */
  uint32_t led_inflight;    /* of those, not yet completed */
  uint32_t led_inflight_max;
  uint64_t led_handed_off;  /* removals completed (OK or not found) */
  bool led_listed;          /* it sent a reconcile LIST */
  uint64_t list_cycle;      /* the service's cycle count at its last LIST */
  uint32_t list_cycle_pages; /* LISTs it sent in that cycle */
  bool token_refused;        /* it was given a continuation token too long to hold: its pass ends there */
  uint64_t svc_events;      /* events given to its services so far */
  const cs_service *svc_quiet; /* the service as the last pump left it quiet: */
  uint64_t svc_events_quiet;   /* svc_events then */
  uint64_t svc_deadline_quiet; /* its next deadline then */
  uint64_t svc_start_local_ns;
  uint64_t engine_flush_mark; /* next_capture_id when the engine flush in progress was called */
  uint64_t engine_flush_low;  /* the first record then still in the sink (unsealed) */
  uint64_t lease_ops_bucket_start_ns; /* the request-volume bound on lease requests (one TTL) */
  uint64_t renewal_claim_local_ns; /* local time of the current service's last renewal claim (0: none) */
  uint64_t renewal_fenced_out;     /* its fenced_out then: a write fenced out since renews at once */
  uint32_t lease_ops_bucket;
  uint32_t lease_ops_starts;       /* services started within that bucket */
  uint64_t list_bucket_start_ns; /* the request-volume bound on reconcile LISTs (one interval) */
  uint32_t list_bucket;
  uint64_t engine_op_budget_ns;  /* close or replace in progress: its budget */
  /* Wake-up bookkeeping. */
  uint64_t wake_at_ns;
  uint64_t wakes[SIM_WAKES_MAX]; /* times of pending wakes (0: free), so one time is scheduled once */
  uint32_t spins;           /* consecutive quiet pumps with a deadline already due */
  uint64_t probed_deadline; /* the service deadline last probed one nanosecond early (schedule_wake) */
  uint32_t deadline_probes; /* service deadlines seen as the earliest, for the one-in-four probe */
  /* Stats carried across incarnations. */
  cs_snapshot last_snapshot;
  uint64_t cycles_total;
  uint64_t indexed_total;
  uint64_t set_aside_total;
  uint64_t splits_total;
  uint64_t mismatches_total;
  uint64_t skipped_total;
  uint64_t head_errors_total;
  uint64_t cycles_failed_total;
  char last_error[CS_LAST_ERROR_MAX];
} sim_proc;

typedef enum ev_kind {
  EV_WAKE = 1,      /* a proc's cores asked to be called */
  EV_ARRIVE,        /* a request reaches its server */
  EV_REPLY,         /* an answer (or its absence) reaches the client */
  EV_SEAL_STEP,     /* the next step of a spool seal */
  EV_SPOOL_DONE,    /* a spool removal/quarantine finished */
  EV_CAPTURE,       /* the capture workload's next record */
  EV_RESTART,       /* a crashed proc starts again */
  EV_PLAN,          /* a plan step is due */
  EV_RANDOM_FAULT,  /* the swarm's fault clock ticks */
  EV_FLUSH_CALL,    /* the workload calls flush on its engine */
  EV_PHASE,         /* end of the safety phase */
  EV_LIVENESS_CHECK,
  EV_FAULT_END,     /* a timed fault ends */
  EV_RESUME,        /* a paused proc resumes */
  EV_LAND,          /* a fenced write's rows land at the catalog */
  EV_REOPEN,        /* a new engine opens on the spool of a closed one */
  EV_REARRIVE,      /* a shipped pack is linked into its spool again and arrives (a = pack, b = svc_gen) */
  EV_READ_START,    /* a reader starts its next read (a = reader) */
  EV_READ_ANSWER,   /* a reader's catalog or store request is answered (a = reader, b = read << 16 | tag) */
} ev_kind;

typedef struct sim_event {
  uint64_t at_ns;
  uint64_t seq;
  ev_kind kind;
  uint32_t proc;
  uint32_t incarnation;
  uint64_t a; /* kind-specific */
  uint64_t b;
} sim_event;

/* A timed fault on one server (from a plan or the swarm). */
typedef struct sim_fault_window {
  bool active;
  bool catalog;         /* else store */
  cs_plan_mode mode;
  uint32_t status;      /* store status override (0: mode applies) */
  cs_plan_method method;
  char prefix[CS_PLAN_TEXT_MAX];
  uint64_t until_ns;
} sim_fault_window;

#define SIM_WINDOWS_MAX 16u

typedef struct sim_counters {
  uint64_t admitted_records;
  uint64_t refused_records;
  uint64_t workload_budget_stops; /* processes that stopped capturing at SIM_WORKLOAD_PACKS_MAX */
  uint64_t durable_records;
  uint64_t flush_calls;
  uint64_t flush_drained;
  uint64_t flush_not_drained;
  uint64_t flush_late;
  uint64_t flush_expect_failed;
  uint64_t rejected_reported;
  uint64_t rival_acquired;
  uint64_t holder_changes;
  uint64_t fenced_refused;
  uint64_t contested_terms;
  uint64_t landed_in_contest;   /* fenced writes whose rows landed after a late claim contested their term */
  uint64_t index_foreign;
  uint64_t orphan_index_writes; /* INDEXes whose descriptor rows landed and inventory did not */
  uint64_t index_late_refused;  /* INDEXes refused for their version: a higher one's rows or publish landed first */
  uint64_t cycles_during_fault;
  uint64_t crashes;
  uint64_t pauses;
  uint64_t replace_done;
  uint64_t close_done;
  uint64_t engine_failures;
  uint64_t open_failed; /* opens (or replaces) that left the engine IDLE */
  uint64_t store_damaged;   /* objects the store changed or lost (store_other_bytes, store_changes) */
  uint64_t slow_seal_steps; /* seal or spool steps a slow disk stretched to seconds */
  uint64_t reopen_done;     /* engines opened again on their spool after a close */
  uint64_t sealed_refused;  /* SEALED events the service refused with a full table */
  uint64_t store_lists;     /* LIST pages the store answered */
  uint64_t arrivals;        /* seals reported to their service as arrivals (recovered) and taken */
  uint64_t rearrivals;      /* shipped packs linked into their spool again and reported as arrivals */
  uint64_t index_of_committed; /* packs in INDEX batches that the catalog already held at a published version */
  uint64_t rejects_landed;  /* REJECT statements whose rows landed */
  uint64_t reads_started, reads_ok, reads_failed, reads_refused; /* readers' reads */
  uint64_t array_writes, array_accepted, array_refused_flush, array_refused_claim, array_refused_local;
  uint64_t array_claims_lost, array_polls, array_set_aside; /* capture arrays (sim/arrays.c) */
  uint64_t array_claims_taken_over, array_slices_read;
  /* A replicated catalog (sim/replicas.c). */
  uint64_t quorum_late;          /* quorum writes answered 319 whose rows landed later */
  uint64_t quorum_busy_refused;  /* writes refused (286): an earlier quorum write to the table was pending */
  uint64_t replica_refused;      /* requests refused by a replica or the coordinator down, or a replica behind */
  uint64_t barriers;             /* new holdings whose barrier went in */
  uint64_t barrier_refused;      /* barriers refused (286): a predecessor's quorum write was pending */
} sim_counters;

/* coverage.c: one run's marks, and what it remembers to see a change between steps. */
typedef struct sim_cov_proc {
  uint32_t svc_gen;        /* the service the fields below were read from */
  int lease;               /* its lease state at the last step */
  uint64_t batch_splits, recon_passes, recon_adopted, recon_head_errors, recon_list_errors, renewals;
} sim_cov_proc;

typedef struct sim_cov_run {
  bool on;                 /* counted for --coverage and for plans (their cov_NAME counters) */
  uint64_t hits[SIM_COV_COUNT_];
  sim_cov_proc procs[SIM_PROCS_MAX];
  uint8_t recovered[SIM_PACKS_MAX / 8]; /* packs a service found in its spool at start */
} sim_cov_run;


/*
 * Readers (the `readers` draw, sim/reader.c): processes that search the
 * catalog at a pinned watermark and read the records back through the
 * read-planning core (src/core/read_plan.c), as src/reader/reader.c does,
 * while the capture processes run under faults. They only read: no request
 * of theirs changes the store or the catalog, and every draw comes from
 * prng_readers, so the rest of a run is the same with or without them.
 */
#define SIM_READERS_MAX 2u
#define SIM_READ_PACKS_MAX 96u              /* packs a read's filter window holds */
#define SIM_READ_WANTS_MAX 64u              /* records one read asks for */
#define SIM_READ_SPANS_MAX (2u * SIM_READ_WANTS_MAX) /* want_count + pack_count always suffice */
#define SIM_READ_TAG_CATALOG 0xffffu        /* EV_READ_ANSWER's tag of a catalog answer (else a span) */

typedef enum sim_read_phase { READ_IDLE = 0, READ_HEAD, READ_PAGE, READ_FETCH } sim_read_phase;

/* What one ranged GET came back with: the object under the key when the store answered. */
typedef struct sim_read_answer {
  bool sent, answered;
  cs_outcome outcome;
  bool found;          /* an object was there (OK) */
  bool is_pack;
  uint32_t object_pack; /* its truth index (SIM_NONE for a foreign object) */
  uint64_t size_bytes;
  uint8_t sha256[32];  /* the object's checksum: other bytes have another */
  bool true_bytes;     /* the span's pack's own bytes, as captured */
} sim_read_answer;

/* One record a read returned: where its bytes came from. */
typedef struct sim_read_record {
  uint32_t want;        /* index into wants */
  uint32_t src_pack;    /* the truth index of the object the bytes were read from */
  bool src_true;        /* that object held its pack's own bytes */
  bool in_span;         /* the record's range lies in the read that returned it */
  uint64_t offset, length;
} sim_read_record;

typedef struct sim_reader {
  uint32_t index;
  sim_read_phase phase;
  uint64_t read_id;         /* reads started so far (the current one's number) */
  /* The search: a filter window of pack creation times, pinned at W, paged by pack id. */
  uint64_t watermark;       /* W: the catalog head's watermark when the search began */
  uint64_t from_ns, to_ns;  /* packs created in [from_ns, to_ns] */
  uint32_t page_max;        /* packs a page */
  uint64_t think_max_ns;    /* how long the reader may wait between pages */
  bool has_after;
  cs_uuid after;            /* the cursor: the last pack id of the last page */
  uint32_t pages;
  cs_outcome catalog_outcome; /* how the catalog request in flight ends (OK: answered when it arrives) */
  uint64_t rejects_at_pin;  /* rejected rows landed when W was pinned (a reject meanwhile excuses its pack) */
  uint32_t found_count;
  uint32_t found[SIM_READ_PACKS_MAX]; /* packs the pages showed, in page order */
  /* The read: the chosen records, their packs, the plan and its requests. */
  uint32_t want_count, pack_count;
  uint32_t pack_truth[SIM_READ_WANTS_MAX];
  cs_read_pack packs[SIM_READ_WANTS_MAX];
  cs_read_want wants[SIM_READ_WANTS_MAX];
  uint64_t want_capture[SIM_READ_WANTS_MAX]; /* each want's capture id */
  uint32_t order[SIM_READ_WANTS_MAX];
  cs_read_span spans[SIM_READ_SPANS_MAX];
  cs_read_limits limits;
  uint64_t estimate_requests, estimate_bytes; /* the plan without limits (capstore_read_estimate) */
  bool over_budget;         /* the estimate exceeds a limit: the plan must be refused */
  int plan_rc;
  char plan_msg[256];       /* the planner's message (a refusal says how much over) */
  cs_read_plan plan;
  cs_read_exec exec;
  uint32_t inflight_max;
  uint32_t inflight;        /* GETs sent and not yet answered (counted outside the exec) */
  uint32_t pending;         /* EV_READ_ANSWER events scheduled and not yet handled: a read waits for one */
  uint64_t issued, issued_bytes; /* GETs sent for this read, and the bytes they asked for */
  bool retried;             /* --reader-defect 3: a failed GET was sent once more */
  bool failed_seen;         /* a GET of this read came back failed: nothing more may be sent */
  bool result_overflow;     /* more records came back than result holds */
  sim_read_answer answers[SIM_READ_SPANS_MAX];
  uint32_t result_count;
  sim_read_record result[SIM_READ_SPANS_MAX];
} sim_reader;

/* Capture arrays (sim/arrays.c): chunk writes among the records of the capture processes. */
#define SIM_ARRAY_SLOTS_MAX 64u
#define SIM_ARRAY_WRITES_MAX 4096u
enum { SIM_ARRAY_OWED = 0, SIM_ARRAY_ACCEPTED, SIM_ARRAY_REFUSED };
typedef struct sim_array_write {
  uint64_t capture_id;
  uint32_t proc;
  uint32_t slot;
  uint32_t pack;      /* the durable pack holding its record, SIM_NONE until found */
  uint32_t scan_from; /* packs below it were looked at */
  uint32_t answer;    /* SIM_ARRAY_OWED, ACCEPTED or REFUSED: what its writer's flush learned */
  uint64_t accepted_watermark;
} sim_array_write;

typedef struct sim_world {
  const sim_options *opts;
  sim_result *result;
  jmp_buf bail;
  sim_profile profile;
  cs_prng prng_net, prng_storage, prng_workload, prng_faults, prng_cores, prng_quirks;
  uint64_t now_ns;
  uint64_t seq;
  uint64_t events_run;
  uint64_t trace_hash;
  bool liveness;
  bool done;
  uint64_t safety_end_ns;
  uint64_t liveness_end_ns;
  uint32_t heap_len;
  /* Processes. */
  sim_proc procs[SIM_PROCS_MAX];
  uint32_t proc_count;
  /* Ground truth. */
  uint32_t pack_count;
  uint64_t sealed_order;
  /* Object store model. */
  uint32_t object_count;
  bool store_if_none_match;        /* the store enforces conditional create */
  bool long_keys;                  /* pack keys CS_KEY_MAX - 1 bytes long (the rank padded) */
  bool opaque_tokens;              /* LIST continuation tokens are opaque short strings, not keys (S3) */
  bool big_footers;                /* records with descriptors of up to 8 KiB against a 64 KiB footer bound */
  /*
   * Hand-offs (capstore serve, src/runtime/rs_handoff.c): other capture
   * processes link sealed packs into the spool, and each reaches the service
   * as a SEALED with recovered set, at any time. Drawn from prng_arrivals.
   */
  uint32_t arrival_permille;       /* seals reported as arrivals (0: none, the knob is off) */
  uint32_t rearrival_permille;     /* removals after which the pack is linked in again (a capture process
                                      crashed before removing its private link) and arrives once more */
  cs_prng prng_arrivals;           /* the knob and its draws: a stream of its own, so other draws stay */
  /* Readers (sim/reader.c): drawn from a stream of their own; 0 when the draw is off. */
  uint32_t reader_count;
  cs_prng prng_readers;
  sim_reader readers[SIM_READERS_MAX];
  /* Capture arrays (sim/arrays.c): drawn from a stream of their own; off when `arrays` is false. */
  bool arrays;
  cs_prng prng_arrays;
  uint32_t array_slots;               /* the array's chunk count (8 .. SIM_ARRAY_SLOTS_MAX) */
  uint32_t array_permille;            /* admitted records that are chunk writes */
  uint32_t array_claim_lost_permille; /* claims left without their record (a crash between the two) */
  uint32_t array_write_count;
  bool array_claims;                  /* writers claim slots first (a store that enforces If-None-Match) */
  bool array_claimed[SIM_ARRAY_SLOTS_MAX]; /* the slot's claim object exists */
  uint64_t array_claim_at[SIM_ARRAY_SLOTS_MAX]; /* when it was made (taken over once arrays.claim_ttl old) */
  uint64_t array_claim_ttl_ns;
  uint32_t array_local_inc[SIM_PROCS_MAX]; /* the incarnation whose memory array_local is */
  uint64_t array_local[SIM_PROCS_MAX];     /* bit per slot: written, or seen won, by that incarnation */
  uint32_t array_winner[SIM_ARRAY_SLOTS_MAX]; /* the checker's: the write a reader saw win the slot */
  bool array_complete;
  cs_array_stamp array_complete_stamp;
  bool array_cache_valid;             /* a reader's cache: each slot's write (SIM_NONE: zeros), and its stamp */
  uint32_t array_cache[SIM_ARRAY_SLOTS_MAX];
  cs_array_stamp array_cache_stamp;
  cs_array_geometry array_geom;       /* its shape: the slots are its chunks, in C order (a stream of its own) */
  cs_prng prng_array_reads;           /* the slices a reader reads (a stream of its own) */
  sim_array_write array_writes[SIM_ARRAY_WRITES_MAX];
  bool store_list_path_order;      /* LIST walks a directory tree (s3rver): pages in path order,
                                      paging on from a key skips keys sorting below it bytewise */
  bool store_suffix_from_start;    /* bytes=-n answered as bytes=0-n (s3rver); used by the adapter */
  /* Catalog switches (ClickHouse 18.16 against the serializing model; docs/clickhouse.md). */
  uint64_t catalog_clock_ns;       /* resolution of the catalog's clock: 0 or 1 exact, CS_SEC_NS as now() */
  bool catalog_claims_concurrent;  /* a claim is an INSERT ... SELECT: two at one free base within
                                      SIM_CONTEST_WINDOW_NS both land (a contested term) */
  uint64_t contest_term, contest_until_ns; /* the last claim that landed on a base free for anyone */
  /*
   * A catalog of ClickHouse replicas (sim/replicas.c, docs/catalog-protocol.md
   * "Replicated catalog"): 0 for one server. Its draws come from a stream of
   * their own, so a seed runs as before with it off.
   */
  uint32_t replicas;
  uint32_t replica_defect;
  cs_prng prng_replicas;
  uint32_t quorum_timeout_permille;  /* quorum writes not confirmed in time (319): they land later */
  uint32_t replica_behind_permille;  /* consistent reads on a replica behind the last quorum part (289) */
  uint64_t replica_lag_max_ns;       /* how late a timed-out quorum write lands (asynchronous: how far a replica lags) */
  uint64_t table_pending_until_ns[SIM_TABLES_]; /* a quorum write to the table is not yet confirmed (286) */
  uint32_t replica_window_count;
  sim_replica_window replica_windows[SIM_REPLICA_WINDOWS_MAX];
  uint32_t barrier_inc[SIM_PROCS_MAX];   /* a proc's adapter: the incarnation whose barrier went in */
  cs_uuid barrier_lease[SIM_PROCS_MAX];
  uint64_t barrier_term[SIM_PROCS_MAX];
  /*
   * A holding chooses its versions above the index floor it read (HEAD, the
   * barrier's read); a timed-out quorum INDEX landing after that read may sit
   * above them, and the holding's INDEX is then refused for its version and
   * answered OK (docs/catalog-protocol.md, "Replicated catalog", rule 4).
   */
  uint64_t floor_read_ns[SIM_PROCS_MAX]; /* when the proc was last answered an index floor */
  uint64_t late_raise_ns;                /* when a late quorum INDEX last raised inventory_version_max */
  uint64_t late_raise_version;           /* to this version */
  /* Catalog model. */
  uint32_t claim_count;
  uint32_t publish_count;
  uint64_t watermark;
  uint64_t watermark_sent_ns; /* when the publish that set the watermark was sent */
  uint64_t inventory_version_max; /* the highest version of any landed inventory row */
  uint64_t catalog_insert_bytes_max; /* the server's statement limit, which INDEX's inventory part meets */
  uint64_t catalog_insert_bytes_server; /* the limit without faults (what healing restores) */
  uint64_t fence_margin_ns;
  uint64_t apply_delay_max_ns; /* rows land up to this long after the fence check */
  uint64_t last_holder_term;
  uint32_t last_holder_proc;
  uint32_t lease_ops_max_seen;
  uint32_t list_max_seen;
  uint64_t close_over_max_ns;
  uint64_t linger_over_max_ns; /* the most lease requests a proc sent within one TTL */
  uint32_t effective_term_proc[64]; /* proc with effective writes, by term % 64 */
  uint64_t effective_term[64];
  /* Network. */
  sim_req reqs[SIM_REQS_MAX];
  sim_fault_window windows[SIM_WINDOWS_MAX];
  uint64_t catalog_unhealthy_until_ns;
  uint64_t slow_disk_until_ns; /* spool steps take seconds until then (slow_disk) */
  /* Config shared by procs. */
  cs_service_config base_svc;
  cs_sink_config base_sink;
  cs_engine_config base_engine;
  uint64_t capture_interval_ns;
  uint64_t flush_interval_ns;
  uint64_t restart_delay_ns;
  uint32_t uploaders;
  uint32_t rivals;
  bool workload;
  sim_counters counters;
  char prefix[64];
  sim_cov_run cov;
  uint64_t liveness_extra_ns;           /* config_corners: longer timers need a longer liveness bound */
  uint32_t backoff_answers_max;         /* failed answers a backing-off process may get in one second */
  uint32_t corner_count;                /* config_corners: bounds drawn to an edge */
  uint8_t corners[SIM_CORNERS_MAX];     /* their rows in corners.c's table */
  bool corner_max[SIM_CORNERS_MAX];     /* at the maximum (else the minimum) */
  /* Large tables last: sim_run clears only what comes before them; every entry
     is written in full before it is read. */
  sim_event heap[SIM_EVENTS_MAX];
  sim_pack packs[SIM_PACKS_MAX];
  sim_object objects[SIM_OBJECTS_MAX];
  uint16_t order[SIM_OBJECTS_MAX]; /* object indexes sorted by key (SIM_OBJECTS_MAX <= 65536) */
  sim_claim claims[SIM_CLAIMS_MAX];
  sim_publish publishes[SIM_PUBLISH_MAX];
} sim_world;

/* world.c */
void sim_bail(sim_world *w, int exit_code, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
void sim_schedule(sim_world *w, uint64_t at_ns, ev_kind kind, uint32_t proc, uint64_t a, uint64_t b);
uint64_t sim_local_now(const sim_world *w, const sim_proc *p);
void sim_proc_pump(sim_world *w, sim_proc *p);

/* models.c: the object store and the catalog. */
void sim_models_init(sim_world *w);
void sim_store_apply(sim_world *w, sim_req *req);
void sim_catalog_apply(sim_world *w, sim_req *req);
void sim_catalog_land(sim_world *w, sim_req *req);
bool sim_catalog_committed(const sim_world *w, uint32_t pack);
bool sim_catalog_refuses_alone(const sim_world *w, uint32_t pack);
uint64_t sim_catalog_statement_floor(const sim_world *w);
uint32_t sim_store_find(const sim_world *w, const char *key, uint32_t key_len);
void sim_store_put_object(sim_world *w, const cs_pack_ref *ref, bool is_pack, uint32_t pack);
uint32_t sim_truth_of(const sim_world *w, const cs_uuid *id);
/* store_changes on the fault clock: a pack object in the store changes or vanishes. */
void sim_store_damage_random(sim_world *w);
/*
 * The store holds the pack's own bytes under its key, or lost them after its
 * owner saw them there and before the owner looked again (no core could tell).
 */
bool sim_store_holds(const sim_world *w, uint32_t pack);
/* Setting the pack aside is right: poison, or its owner saw other bytes under its key. */
bool sim_pack_may_set_aside(const sim_world *w, uint32_t pack);
/* The same, for a set-aside now by its owner's service (other bytes count only where that service saw them). */
bool sim_pack_may_set_aside_now(const sim_world *w, uint32_t pack);
/* The pack need not become visible: poison, a conflict its owner saw, or lost by the store. */
bool sim_pack_excused(const sim_world *w, uint32_t pack);
uint32_t sim_catalog_holder(const sim_world *w, uint64_t server_now_ns, uint64_t *term);
/* The catalog's clock: the world's time at the catalog's resolution. */
uint64_t sim_catalog_now(const sim_world *w);
/* How long after a claim lands another at the same free base still lands beside it. */
#define SIM_CONTEST_WINDOW_NS (50u * CS_MS_NS)

/* The catalog's search (docs/reader.md): up to max packs created in [from_ns, to_ns], visible at the
   watermark (an inventory version at or below it, no rejected row), with ids above after (NULL: from the
   first), in pack id order, into packs. Returns how many. */
uint32_t sim_catalog_search(const sim_world *w, uint64_t watermark, uint64_t from_ns, uint64_t to_ns,
                            const cs_uuid *after, uint32_t *packs, uint32_t max);
/* The truth indexes [*lo, *hi) of the packs created in [from_ns, to_ns] (creation times only grow). */
void sim_packs_created_between(const sim_world *w, uint64_t from_ns, uint64_t to_ns, uint32_t *lo, uint32_t *hi);

/* reader.c: the readers, and the record layout inside a pack the catalog and the reader agree on. */
void sim_readers_start(sim_world *w);
/* arrays.c: capture arrays in the swarm. */
void sim_arrays_setup(sim_world *w, bool swarm, bool all);
/* replicas.c: a catalog of ClickHouse replicas. */
void sim_replicas_setup(sim_world *w, bool swarm, bool all);
int sim_replicas_after_plan(sim_world *w);
void sim_replicas_print(const sim_world *w, FILE *out);
uint32_t sim_replica_of(const sim_world *w, const sim_proc *p);
uint32_t sim_replica_view(const sim_world *w, const sim_req *req);
void sim_replicas_stamp(sim_world *w, uint32_t own, uint64_t seen_ns[SIM_REPLICAS_MAX]);
int sim_table_of(cs_op op);
bool sim_replicas_refuse(sim_world *w, sim_req *req);
bool sim_replicas_quorum_late(sim_world *w, sim_req *req);
void sim_replicas_claim_written(sim_world *w);
uint64_t sim_replicas_land_delay(sim_world *w, sim_req *req, uint64_t delay_ns);
void sim_replicas_barrier(sim_world *w, sim_req *req, bool fence_ok, uint64_t watermark, uint64_t index_floor);
/* world.c: the catalog is not healthy for the liveness and theft checks until then (plus two TTLs). */
void sim_mark_catalog_unhealthy(sim_world *w, uint64_t until_ns);
void sim_arrays_admitted(sim_world *w, sim_proc *p, uint64_t capture_id);
void sim_arrays_poll(sim_world *w);
void sim_check_region_blocks(sim_world *w, const cs_array_geometry *g, const cs_array_piece *p, uint64_t block);
void sim_arrays_flush_drained(sim_world *w, sim_proc *p, const sim_flush_rec *rec);
void sim_reader_event(sim_world *w, const sim_event *ev);
/* Record `record` of the pack lies at [*offset, *offset + *length); the footer starts at the returned F. */
uint64_t sim_pack_layout(const sim_world *w, uint32_t pack, uint32_t record, uint64_t *offset, uint64_t *length);
/* The network's fault for a request sent now: a window's, or a per-request one drawn from prng. */
cs_plan_mode sim_net_mode(sim_world *w, bool catalog, cs_prng *prng);

/* checker.c */
void sim_check_removal(sim_world *w, sim_proc *p, uint32_t pack);
void sim_check_flush_done(sim_world *w, sim_proc *p, const cs_flush_result *res);
void sim_check_fence_passed(sim_world *w, sim_req *req);
void sim_check_effective_write(sim_world *w, const sim_req *req);
void sim_check_publish(sim_world *w, const sim_req *req);
void sim_check_claim(sim_world *w, uint32_t proc, uint64_t term);
void sim_check_step(sim_world *w);
void sim_check_proc(sim_world *w, const sim_proc *p);
/* A call that set a pack aside left last_error "set aside <its id>: <why>" (6.11), naming a pack that may be. */
typedef struct sim_svc_marks {
  uint64_t set_aside;    /* the snapshot's set_aside */
  uint64_t rejected_seq; /* the seq of the newest entry of the rejected list */
} sim_svc_marks;
sim_svc_marks sim_svc_marks_of(const cs_service *svc);         /* read-only white-box reads (coverage.c) */
bool sim_svc_rejected_newest(const cs_service *svc, cs_uuid *id);
void sim_check_set_aside_named(sim_world *w, const sim_proc *p, sim_svc_marks before);
bool sim_svc_request_live(const cs_service *svc, uint64_t id); /* id is in the service's request table (coverage.c) */
void sim_check_send(sim_world *w, sim_proc *p, const cs_action *act, const sim_req *req);
void sim_check_lease_step_done(sim_proc *p, const sim_req *req); /* a lease step's answer reached its service */
/* PUT, HEAD and LIST: the object-store requests that store_inflight_max bounds. */
static inline bool sim_op_is_store(cs_op op) {
  return op == CS_OP_STORE_PUT || op == CS_OP_STORE_HEAD || op == CS_OP_STORE_LIST;
}
void sim_check_reply(sim_world *w, sim_proc *p, const sim_req *req, const cs_event *ev);
void sim_check_engine_report(sim_world *w, sim_proc *p, const cs_engine_action *act);
void sim_check_service_start(sim_world *w, sim_proc *p);
/* The snapshot ledger: a SEALED the service took (rc CS_E_OK), a request sent, one completed. */
void sim_ledger_told(sim_world *w, sim_proc *p, uint32_t file, int rc, bool recovered);
void sim_ledger_sent(sim_proc *p);
void sim_ledger_done(sim_proc *p, cs_op op, cs_outcome outcome);
/* A failed answer is named in the snapshot's last_error at once (6.11). */
void sim_check_error_named(sim_world *w, const sim_proc *p, cs_op op, cs_outcome outcome);
/* A LIST answered with a continuation token too long to hold: named in last_error; the pass ends there. */
void sim_check_token_refused(sim_world *w, sim_proc *p);
void sim_check_claim_named(sim_world *w, const sim_proc *p, const cs_claims *claims);
void sim_check_config_rules(sim_world *w); /* 6.10, once per run (config_rules.c) */
void sim_check_api_rules(sim_world *w);    /* the cores' helpers and refusals, once per run (api_rules.c) */
void sim_check_engine_rules(sim_world *w, cs_prng *r); /* the engine against a model of engine.h (engine_rules.c) */
bool sim_config_valid_by_spec(const cs_service_config *cfg);
void sim_check_admit(sim_world *w, const sim_proc *p, int rc, uint64_t first_try_local_ns, const cs_sink_stats *before,
                     uint64_t record_bytes);
/* A record that started a new pack: the open one had no room for it (or its linger had come, or a flush). */
void sim_check_admit_seal(sim_world *w, sim_proc *p, uint64_t seq, uint64_t bytes, uint64_t footer);
void sim_check_sink_seal(sim_world *w, const sim_proc *p, const sim_pending_pack *pp);
void sim_check_backoff(sim_world *w, sim_proc *p);
bool sim_check_drained(sim_world *w, char *why, size_t why_size);
uint64_t sim_visible_records(const sim_world *w);
/* Readers (docs/simulator.md, "Readers"): one check per clause, each failure names its invariant. */
bool sim_read_visible(const sim_world *w, uint32_t pack, uint64_t watermark);
void sim_check_read_page(sim_world *w, const sim_reader *r, uint64_t answered_at, const uint32_t *packs, uint32_t n);
void sim_check_read_search(sim_world *w, const sim_reader *r);
void sim_check_read_plan(sim_world *w, const sim_reader *r);
void sim_check_read_get(sim_world *w, const sim_reader *r, uint32_t span);
void sim_check_read_done(sim_world *w, const sim_reader *r, int rc);

/*
 * coverage.c: the hooks that count marks. They only read the world and the
 * cores (no PRNG draw, no event, nothing the trace hash sees).
 */
void sim_cov_mark(sim_world *w, sim_cov_id mark);
void sim_cov_fault(sim_world *w, sim_fault fault);
void sim_cov_check_table(sim_world *w);
void sim_cov_observe(sim_world *w, const sim_proc *p);
void sim_cov_send(sim_world *w, const sim_req *req, cs_plan_mode mode);
void sim_cov_reply(sim_world *w, const sim_req *req, const cs_event *ev);
void sim_cov_action(sim_world *w, const sim_proc *p, const cs_action *act);
void sim_cov_flush_done(sim_world *w, const sim_proc *p, const sim_flush_rec *rec, const cs_flush_result *res);
void sim_cov_sink_action(sim_world *w, const cs_sink_action *act);
void sim_cov_engine_action(sim_world *w, const cs_engine_action *act);
void sim_cov_admit(sim_world *w, const sim_proc *p, int rc);
void sim_cov_sealed(sim_world *w, uint32_t pack, uint64_t sink_seq, int service_rc);
void sim_cov_crash(sim_world *w);
void sim_cov_service_start(sim_world *w, const sim_proc *p);
void sim_cov_recovered(sim_world *w, uint32_t pack);
void sim_cov_sweep(sim_world *w, const sim_proc *p);
void sim_cov_claim(sim_world *w, const sim_req *req);
void sim_cov_catalog(sim_world *w);
/* A plan's counter cov_NAME: the run's count of mark NAME. */
bool sim_cov_counter(const sim_world *w, const char *name, uint64_t *out);

/* plan_run.c */
int sim_plan_apply_settings(sim_world *w, const cs_plan *plan);
void sim_plan_step(sim_world *w, const cs_plan_step *step);
bool sim_plan_counter(const sim_world *w, const char *name, uint64_t *out);
/* Checks every `expect` line; bails with SIM_EXIT_PLAN naming the first that fails. */
void sim_plan_check_expects(sim_world *w);


/* world.c helpers used by plan_run.c */
void sim_seal_direct(sim_world *w, sim_proc *p, const cs_plan_step *step);
void sim_proc_crash(sim_world *w, sim_proc *p);
void sim_engine_start(sim_world *w, sim_proc *p, cs_engine_opkind op, uint64_t arg_ns);
void sim_flush_call(sim_world *w, sim_proc *p, uint64_t deadline_rel_ns, uint32_t expect);
void sim_window_add(sim_world *w, const sim_fault_window *win);
/* A new engine on p's spool once its close is done (a plan's `reopen`, the swarm's close, liveness). */
void sim_reopen_request(sim_world *w, sim_proc *p, uint64_t delay_ns);

/* corners.c: configuration bounds at their edges (config_corners). */
/* Draws one to three bounds of the service, sink and engine configs to their minimum or maximum. */
void sim_corners_draw(sim_world *w);
/* One line naming the drawn config, the corners marked. */
void sim_config_print(const sim_world *w, FILE *out);

#endif

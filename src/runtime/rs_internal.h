/*
 * rs_internal.h: what the service runtime's files share (rs_lanes.c,
 * rs_driver.c, rs_api.c). Not installed.
 *
 * Threads: the driver (rs_driver.c) owns the engine and service cores and is
 * the only thread that touches them. Blocking primitives run on lanes, each a
 * thread with its own bounded job queue and its own adapter handles: the
 * store lane (one thread driving the store's asynchronous form: curl multi
 * for S3, the queued form for dirstore), the catalog lane (INDEX, PUBLISH,
 * COMMITTED, REJECT), the lease lane (HEAD, CLAIM, READ_CLAIMS, RELEASE: its
 * own connection, so a slow index never delays a renewal) and the spool lane
 * (removals, quarantines and the sink's blocking steps). A finished job and a
 * sealed pack reach the driver through its inbox, one FIFO, so a pack sealed
 * before a sink flush returned is delivered before that flush's completion.
 */
#ifndef CAPSTORE_RS_INTERNAL_H
#define CAPSTORE_RS_INTERNAL_H

#define RS_S3_REGION_MAX 128 /* bytes of an S3 region name, its NUL included */

#include <pthread.h>
#include <stdatomic.h>

#include "capstore/capstore.h"

#define RS_HIDDEN __attribute__((visibility("hidden")))

/* What a job is. */
enum rs_job_kind {
  RS_JOB_ACTION = 1, /* a service request (cs_action) */
  RS_JOB_STEP,       /* an engine step that blocks (sink open, flush, seal) */
  RS_JOB_RECOVER,    /* report more packs a previous process left in the spool (the backlog) */
  RS_JOB_ARRIVALS,   /* serving: admit the packs capture processes handed into the spool (rs_handoff.c) */
};

typedef struct rs_job rs_job;
struct rs_job {
  uint32_t kind;
  bool busy;                 /* taken from the pool */
  cs_action act;             /* RS_JOB_ACTION: the service's request (its memory lives until completion) */
  cs_engine_action step;     /* RS_JOB_STEP */
  /* The answer */
  cs_outcome outcome;
  int err;                   /* RS_JOB_STEP: the step's result */
  char detail[200];          /* what went wrong, for the log and last error */
  cs_head_info head;
  cs_cat_head cat_head;
  cs_claims claims;
  bool *held;                /* COMMITTED: cycle_packs_max/list_page_max entries, from the pool */
  bool *rejected;
  uint32_t list_slot;        /* LIST: the page buffer it holds */
  uint32_t key_count;
  const char **keys;         /* LIST: pointers into the page buffer */
  char next_token[CS_KEY_MAX];
  uint64_t sent_bytes;       /* PUT: bytes sent; INDEX: rows sent */
  /* The store lane's request and what it holds while in flight. */
  cs_store_request req;
  cs_object_info meta;
  void *map;                 /* PUT: the pack mapped read-only */
  size_t map_len;
  int fd;
  rs_job *next;              /* lane queue */
};

/* A bounded FIFO of jobs for one lane. */
typedef struct rs_lane {
  const char *name;
  pthread_t thread;
  bool started;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  rs_job *head, *tail;
  uint32_t count;
  bool stop;
  struct rs_runtime *rt;
  void (*run)(struct rs_runtime *rt, struct rs_lane *lane, rs_job *job); /* carries out one job */
  /* The lane's own handles. */
  cs_store store;
  bool store_open;
  cs_catalog catalog;
  bool catalog_open;
  bool schema_ready;
  _Atomic uint32_t queue_peak;
} rs_lane;

/* The footer cache (rs_footers.c). */
#define RS_FOOTER_CACHE 8u
#define RS_PREFETCH_MAX 64u
#define RS_FOOTER_CACHE_BYTES ((uint64_t)64 << 20) /* footer bytes the cache holds (parsed: a few times more) */
#define RS_FOOTER_CACHED_MAX ((uint64_t)16 << 20)  /* a larger footer is parsed by its INDEX */

typedef struct rs_footer_entry {
  cs_uuid pack_id;
  cs_pack_footer footer;
  uint64_t footer_bytes; /* its length in the pack */
  bool used;
  uint64_t seq; /* insertion order: the smallest is evicted */
} rs_footer_entry;

typedef struct rs_footers {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  pthread_t thread;
  bool initialized, started, stop;
  rs_footer_entry entries[RS_FOOTER_CACHE];
  uint64_t seq;
  uint64_t bytes; /* footer bytes of the entries in use */
  cs_uuid queue[RS_PREFETCH_MAX];
  uint32_t head, queued;
  bool parsing;           /* the prefetch thread is parsing parsing_id's footer */
  cs_uuid parsing_id;
  pthread_cond_t parsed;  /* broadcast when a parse ends: INDEX waits rather than parse the same footer twice */
  _Atomic uint64_t hits;
} rs_footers;

/* What the inbox carries to the driver. */
enum rs_msg_kind { RS_MSG_DONE = 1, RS_MSG_SEALED, RS_MSG_RECOVERED, RS_MSG_ARRIVED };

typedef struct rs_handoff rs_handoff;

typedef struct rs_msg {
  uint32_t kind;
  rs_job *job;      /* DONE */
  cs_pack_ref ref;  /* SEALED, RECOVERED */
} rs_msg;

/* An API call waiting for the driver. */
enum rs_call_kind { RS_CALL_NONE = 0, RS_CALL_OPEN, RS_CALL_FLUSH, RS_CALL_CLOSE };

typedef struct rs_runtime {
  capstore_config cfg;
  /* Copies of the config's strings that came from the environment or defaults. */
  char name[72];
  char key_prefix[CS_KEY_MAX];
  char s3_region[RS_S3_REGION_MAX];
  char *s3_key_id, *s3_secret, *s3_token;
  char holder[128];

  cs_capture *capture;        /* owned by the spool lane's steps; capture calls are thread safe */
  _Atomic(cs_capture *) capture_live;

  /* The driver's */
  pthread_t driver;
  bool driver_started;
  cs_engine engine;
  cs_service *svc;
  void *svc_mem;
  size_t svc_mem_size;
  cs_uuid lease_id;
  uint64_t seed;
  bool svc_started;
  uint64_t step_id;           /* the engine step in flight */
  cs_engine_step step;
  bool step_waits_release;
  uint64_t step_flush_id;
  uint64_t next_flush_id;
  cs_flush_result last_flush;

  /* Lanes and the job pool. */
  rs_lane store_lane, catalog_lane, lease_lane, spool_lane;
  rs_job *jobs;
  uint32_t job_count;          /* action jobs first (the core's request bound), then RS_STEP_JOBS */
  bool *bool_pool;            /* 2 x per_job bools per job (COMMITTED answers) */
  uint32_t bools_per_job;
  char (*list_keys)[CS_KEY_MAX]; /* RS_LIST_SLOTS pages of list_page_max keys */
  const char **list_ptrs;
  bool list_busy[2];

  /* The inbox (under mutex) and the API call slot. */
  pthread_mutex_t mutex;
  pthread_cond_t inbox_cond;  /* the driver waits here */
  pthread_cond_t call_cond;   /* API callers wait here */
  rs_msg *inbox;
  uint32_t inbox_head, inbox_count, inbox_max;
  uint32_t call_kind;         /* the call the driver should start; NONE when taken */
  uint64_t call_arg_ns;
  uint64_t call_seq;          /* calls started */
  uint64_t call_done_seq;     /* calls answered */
  int call_err;
  cs_flush_result call_flush;
  char call_stage[16];
  char call_msg[256];
  cs_engine_step failed_step; /* the first step of the current call that failed, from the engine's log at REPORT */
  uint32_t call_log_start;    /* the engine's log_count when the current call began */
  bool close_requested;       /* capstore_close was called: a running flush is cut short, new ones refused */
  cs_snapshot call_snap;      /* the service's snapshot at a flush's REPORT (counts when it never ran) */
  bool stopping;              /* the close's REPORT came: the driver ends */
  bool closed;
  int close_err;
  char close_msg[256];
  bool inbox_closed;          /* the driver ended: later messages are dropped (a late seal's pack
                                 stays in the spool, and the next start recovers it) */

  /*
   * Packs found in the spool at open beyond what the service's table takes
   * (spool_packs_max): reported one by one as packs leave the spool, so a
   * spool left fuller than this process's quota drains instead of wedging
   * capture. Written by the spool lane at open; then backlog_next by the
   * recover job only, while recover_busy.
   */
  cs_pack_ref *recovered;     /* the spool's packs at open, reported with START (then freed) */
  uint32_t recovered_count;
  cs_spool_entry *backlog;
  uint32_t backlog_count, backlog_next;
  uint32_t recover_credit;    /* packs that left the spool and were not yet replaced by the backlog */
  uint32_t unreadable_at_open; /* packs in the spool at open whose ref could not be built: counted
                                  outside the table (CS_EV_BACKLOG), shipped by a later start */
  /*
   * Packs the service refused for a full table (CS_E_FULL) after open: it
   * counts them outside the table until each is reported again, with
   * backlog set, as a pack leaves the spool. Driver thread only.
   */
  cs_pack_ref *refused;
  uint32_t refused_count, refused_cap;
  bool recover_busy;
  rs_job recover_job;

  rs_footers footers;

  /* Serving (cfg.serve): the arrivals scan, one at a time on the spool lane. Driver thread only. */
  bool arrivals_busy;
  rs_job arrivals_job;
  uint64_t arrivals_next_ns;
  _Atomic uint64_t adopted_spools; /* private spools of dead capture processes taken over */
  uint32_t adopt_cursor;      /* the spool lane's: where the next scan's adoption tries start */
  _Atomic uint64_t arrivals_set_aside; /* handed-in packs that verified but cannot ship (no records): quarantined */
  /* Capture role (CS_ROLE_CAPTURE): the hand-off to capstore serve instead of the service. */
  rs_handoff *handoff;
  /* The catalog's tables were created by one of the lanes: the others need not ask again. */
  _Atomic bool schema_made;

  /* Counters (atomic: read by stats without the driver). */
  _Atomic uint64_t store_requests;
  _Atomic uint64_t catalog_requests;
  _Atomic uint64_t bytes_uploaded;
  _Atomic uint64_t descriptors_indexed;
  _Atomic uint64_t footer_errors;
  cs_snapshot snap;           /* the driver's latest, under mutex */
  uint32_t engine_failures;
  char engine_last_error[160];
} rs_runtime;

#define RS_LIST_SLOTS 2u
/* Serving: packs one arrivals scan admits at most (its messages wait in the inbox; two scans may overlap there). */
#define RS_ARRIVALS_PER_SCAN 256u
/* Jobs for the engine's blocking steps: one runs, the others are steps the engine timed out, still on the lane. */
#define RS_STEP_JOBS 4u

/* ---- rs_lanes.c ---- */
RS_HIDDEN int rs_lanes_start(rs_runtime *rt, char *msg, size_t msg_size);
/* Stops every lane after its queue empties and joins it; closes their handles. */
RS_HIDDEN void rs_lanes_stop(rs_runtime *rt);
/* Hands a job to its lane (never blocks; the job pool bounds the queues). */
RS_HIDDEN void rs_lane_push(rs_lane *lane, rs_job *job);
/* The lane a service op runs on. */
RS_HIDDEN rs_lane *rs_lane_of(rs_runtime *rt, const cs_action *act);
/* Opens a store / catalog handle from the config (each lane has its own). */
RS_HIDDEN int rs_store_open(rs_runtime *rt, cs_store *out, char *msg, size_t msg_size);
RS_HIDDEN int rs_catalog_open(rs_runtime *rt, cs_catalog *out, char *msg, size_t msg_size);
/* Reads a local pack's trailer and footer into a ref (key, index_bytes) for recovery. */
RS_HIDDEN int rs_ref_from_spool(rs_runtime *rt, const cs_spool_entry *entry, cs_pack_ref *ref, char *msg,
                                size_t msg_size);
/* The same from a footer already parsed (taken: cached for INDEX, or freed). */
RS_HIDDEN int rs_ref_from_footer(rs_runtime *rt, const cs_spool_entry *found, cs_pack_footer *footer,
                                 uint64_t footer_len, cs_pack_ref *ref, char *msg, size_t msg_size);
/* The ref of a freshly sealed pack (the capture's on_sealed). */
RS_HIDDEN int rs_ref_from_seal(rs_runtime *rt, const cs_spool_entry *entry, const cs_pack_summary *summary,
                               const cs_pack_key_fields *fields, cs_pack_ref *ref);

/* The capture, once the spool lane opened it (NULL before). */
static inline cs_capture *rs_capture(rs_runtime *rt) { return atomic_load(&rt->capture_live); }

/* ---- rs_footers.c ---- */
RS_HIDDEN int rs_footers_start(rs_runtime *rt);
/* Stops the prefetch thread and empties the cache; prefetches queued later are dropped. */
RS_HIDDEN void rs_footers_stop(rs_runtime *rt);
/* rs_footers_stop, then frees its lock (after the sink is freed: a late seal may still queue). */
RS_HIDDEN void rs_footers_free(rs_runtime *rt);
RS_HIDDEN void rs_footer_prefetch(rs_runtime *rt, const cs_uuid *pack_id);
RS_HIDDEN int rs_footer_take(rs_runtime *rt, const cs_uuid *pack_id, cs_pack_footer *out);
RS_HIDDEN void rs_footer_put(rs_runtime *rt, const cs_uuid *pack_id, cs_pack_footer *footer, uint64_t footer_bytes);
/* Trailer and footer of the local pack open at fd (size bytes): rs_lanes.c. */
RS_HIDDEN int rs_footer_read_fd(int fd, uint64_t size, cs_pack_footer *footer, uint64_t *footer_len, char *msg,
                                size_t msg_size);

/* ---- rs_handoff.c ---- */
/* Capture role: the private spool, its capture (rt->capture) and the hand-off thread. */
RS_HIDDEN int rs_handoff_open(rs_runtime *rt, char *msg, size_t msg_size);
RS_HIDDEN int rs_handoff_flush(rs_runtime *rt, uint64_t deadline_ns, capstore_flush_report *report, char *msg,
                               size_t msg_size);
/* Seals, hands every pack over (within budget_ns) and stops the thread. */
RS_HIDDEN int rs_handoff_close(rs_runtime *rt, uint64_t budget_ns, char *msg, size_t msg_size);
RS_HIDDEN void rs_handoff_free(rs_runtime *rt);
/* capstore_close was called: a flush waiting for the daemon answers CS_E_CLOSED at once. */
RS_HIDDEN void rs_handoff_closing(rs_runtime *rt);
RS_HIDDEN void rs_handoff_stats(rs_runtime *rt, capstore_stats *out);
/* Serving, on the spool lane: adopts dead capture processes' spools, admits handed-in packs, posts them. */
RS_HIDDEN void rs_arrivals_scan(rs_runtime *rt, rs_job *job);

/* ---- rs_driver.c ---- */
/* Records a failure as the runtime's last error (any thread). */
RS_HIDDEN void rs_log_failure(rs_runtime *rt, const char *what, const char *detail);
/* Opens the capture and builds the refs of the packs already in its spool (before the engine starts). */
RS_HIDDEN int rs_open_sink(rs_runtime *rt, char *msg, size_t msg_size);
/* The engine's blocking steps (OPEN_SINK, FLUSH_SINK, SEAL_SINK), run on the spool lane. */
RS_HIDDEN void rs_run_step(rs_runtime *rt, rs_job *job);
RS_HIDDEN void *rs_driver_main(void *context);
/* Under mutex: appends msg to the inbox and wakes the driver. */
RS_HIDDEN void rs_inbox_post_locked(rs_runtime *rt, const rs_msg *msg);
RS_HIDDEN void rs_inbox_post(rs_runtime *rt, const rs_msg *msg);

#endif

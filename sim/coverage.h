/*
 * sim/coverage.h: coverage marks. A mark counts, per run, that something the
 * simulator exists to exercise happened: a fault kind took effect, a core was
 * seen in a state after a step, a request ended with an outcome, a core
 * issued an action, a situation where bugs hide came about. `capstore-sim
 * --coverage` prints the marks no run reached; CI requires every mark below
 * whose reason is "" to be reached across its seeds (tests/sim.cmake).
 *
 * Every mark is one line of SIM_COV_MARKS: X(ID, "name", "why not required").
 * An empty reason makes the mark required. Names are [a-z0-9_] so a plan can
 * expect one as the counter cov_NAME. Marks that are indexed by a core's enum
 * (faults, outcomes, ops, states) keep that enum's order: coverage.c asserts it.
 */
#ifndef CAPSTORE_SIM_COVERAGE_H
#define CAPSTORE_SIM_COVERAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define SIM_COV_MARKS(X) \
  /* Fault kinds that took effect, in sim_fault order, then the store's and catalog's quirks. */ \
  X(FAULT_STORE_OUTAGE, "fault_store_outage", "") \
  X(FAULT_STORE_STALL, "fault_store_stall", "") \
  X(FAULT_STORE_5XX, "fault_store_5xx", "") \
  X(FAULT_STORE_THROTTLE, "fault_store_throttle", "") \
  X(FAULT_STORE_UNKNOWN, "fault_store_unknown", "") \
  X(FAULT_STORE_SLOW, "fault_store_slow", "") \
  X(FAULT_STORE_403_HEAD, "fault_store_403_head", "") \
  X(FAULT_CATALOG_OUTAGE, "fault_catalog_outage", "") \
  X(FAULT_CATALOG_STALL, "fault_catalog_stall", "") \
  X(FAULT_CATALOG_UNKNOWN, "fault_catalog_unknown", "") \
  X(FAULT_CATALOG_TOO_LARGE, "fault_catalog_too_large", "") \
  X(FAULT_RIVALS, "fault_rivals", "") \
  X(FAULT_PAUSE_HOLDER, "fault_pause_holder", "") \
  X(FAULT_CLOCK_SKEW, "fault_clock_skew", "") \
  X(FAULT_POISON_LARGE, "fault_poison_large", "") \
  X(FAULT_POISON_INVALID, "fault_poison_invalid", "") \
  X(FAULT_FOREIGN_OBJECTS, "fault_foreign_objects", "") \
  X(FAULT_CRASHES, "fault_crashes", "") \
  X(FAULT_TORN_WRITES, "fault_torn_writes", "rare (0.19% of seeds): a crash between link and directory fsync") \
  X(FAULT_DISK_FULL, "fault_disk_full", "") \
  X(FAULT_UPLOADERS, "fault_uploaders", "") \
  X(FAULT_REPLACE, "fault_replace", "") \
  X(FAULT_STORE_OTHER_BYTES, "fault_store_other_bytes", "") \
  X(FAULT_STORE_CHANGES, "fault_store_changes", "") \
  X(FAULT_SLOW_DISK, "fault_slow_disk", "") \
  X(FAULT_CLOSE, "fault_close", "") \
  X(FAULT_CLOSE_STALLED, "fault_close_stalled", "") \
  X(FAULT_CONFIG_CORNERS, "fault_config_corners", "") \
  X(FAULT_CATALOG_5XX, "fault_catalog_5xx", "") \
  X(FAULT_CATALOG_THROTTLE, "fault_catalog_throttle", "") \
  X(FAULT_LIST_PATH_ORDER, "fault_list_path_order", "") \
  X(FAULT_CLAIMS_CONCURRENT, "fault_claims_concurrent", "") \
  X(FAULT_CATALOG_CLOCK_S, "fault_catalog_clock_s", "") \
  /* Outcomes of store requests, in cs_outcome order. */ \
  X(OUT_STORE_OK, "out_store_ok", "") \
  X(OUT_STORE_REFUSED, "out_store_refused", "") \
  X(OUT_STORE_TIMEOUT, "out_store_timeout", "") \
  X(OUT_STORE_UNKNOWN, "out_store_unknown", "") \
  X(OUT_STORE_SERVER_ERROR, "out_store_server_error", "") \
  X(OUT_STORE_THROTTLED, "out_store_throttled", "") \
  X(OUT_STORE_FORBIDDEN, "out_store_forbidden", "") \
  X(OUT_STORE_NOT_FOUND, "out_store_not_found", "") \
  X(OUT_STORE_PRECONDITION, "out_store_precondition", "no conditional PUT is sent or enforced") \
  X(OUT_STORE_TOO_LARGE, "out_store_too_large", "not drawn yet: a store that refuses a pack's PUT (413)") \
  X(OUT_STORE_INVALID, "out_store_invalid", "not drawn yet: a store that refuses a pack's PUT (400)") \
  /* Outcomes of catalog requests, in cs_outcome order. */ \
  X(OUT_CATALOG_OK, "out_catalog_ok", "") \
  X(OUT_CATALOG_REFUSED, "out_catalog_refused", "") \
  X(OUT_CATALOG_TIMEOUT, "out_catalog_timeout", "") \
  X(OUT_CATALOG_UNKNOWN, "out_catalog_unknown", "") \
  X(OUT_CATALOG_SERVER_ERROR, "out_catalog_server_error", "") \
  X(OUT_CATALOG_THROTTLED, "out_catalog_throttled", "") \
  X(OUT_CATALOG_FORBIDDEN, "out_catalog_forbidden", "the catalog model has no status faults") \
  X(OUT_CATALOG_NOT_FOUND, "out_catalog_not_found", "the catalog model has no status faults") \
  X(OUT_CATALOG_PRECONDITION, "out_catalog_precondition", "the catalog model has no status faults") \
  X(OUT_CATALOG_TOO_LARGE, "out_catalog_too_large", "") \
  X(OUT_CATALOG_INVALID, "out_catalog_invalid", "") \
  /* Spool operations: the file was there, or was already gone. */ \
  X(OUT_SPOOL_OK, "out_spool_ok", "") \
  X(OUT_SPOOL_NOT_FOUND, "out_spool_not_found", "a pack leaves the spool once: its file is always there") \
  /* Actions the service issued, in cs_op order (from CS_OP_STORE_PUT). */ \
  X(OP_STORE_PUT, "op_store_put", "") \
  X(OP_STORE_HEAD, "op_store_head", "") \
  X(OP_STORE_LIST, "op_store_list", "") \
  X(OP_SPOOL_REMOVE, "op_spool_remove", "") \
  X(OP_SPOOL_QUARANTINE, "op_spool_quarantine", "") \
  X(OP_CAT_HEAD, "op_cat_head", "") \
  X(OP_CAT_CLAIM, "op_cat_claim", "") \
  X(OP_CAT_READ_CLAIMS, "op_cat_read_claims", "") \
  X(OP_CAT_RELEASE, "op_cat_release", "") \
  X(OP_CAT_INDEX, "op_cat_index", "") \
  X(OP_CAT_PUBLISH, "op_cat_publish", "") \
  X(OP_CAT_COMMITTED, "op_cat_committed", "") \
  X(OP_CAT_REJECT, "op_cat_reject", "") \
  X(OP_FLUSH_DONE, "op_flush_done", "") \
  X(OP_STOPPED, "op_stopped", "") \
  /* Steps the engine issued, in cs_engine_step order (from CS_STEP_START_SERVICE). */ \
  X(STEP_START_SERVICE, "step_start_service", "") \
  X(STEP_SWEEP_OPEN, "step_sweep_open", "") \
  X(STEP_OPEN_SINK, "step_open_sink", "") \
  X(STEP_FLUSH_SINK, "step_flush_sink", "") \
  X(STEP_FLUSH_SERVICE, "step_flush_service", "") \
  X(STEP_SEAL_SINK, "step_seal_sink", "") \
  X(STEP_STOP_CAPTURE, "step_stop_capture", "") \
  X(STEP_DRAIN_SERVICE, "step_drain_service", "") \
  X(STEP_STOP_SERVICE, "step_stop_service", "") \
  X(STEP_RELEASE_LEASE, "step_release_lease", "") \
  X(STEP_REPORT, "step_report", "") \
  /* The engine's operations as reported, in cs_engine_opkind order: done, or failed. */ \
  X(REPORT_OPEN_OK, "report_open_ok", "") \
  X(REPORT_OPEN_FAILED, "report_open_failed", "") \
  X(REPORT_FLUSH_OK, "report_flush_ok", "") \
  X(REPORT_FLUSH_FAILED, "report_flush_failed", "") \
  X(REPORT_CLOSE_OK, "report_close_ok", "") \
  X(REPORT_CLOSE_FAILED, "report_close_failed", "") \
  X(REPORT_REPLACE_OK, "report_replace_ok", "") \
  X(REPORT_REPLACE_FAILED, "report_replace_failed", "") \
  /* The sink's seals by reason (cs_seal_reason order), and its reports. */ \
  X(SEAL_RECORDS, "seal_records", "") \
  X(SEAL_BYTES, "seal_bytes", "") \
  X(SEAL_LINGER, "seal_linger", "") \
  X(SEAL_FLUSH, "seal_flush", "") \
  X(SEAL_CLOSE, "seal_close", "") \
  X(SINK_FLUSHED, "sink_flushed", "") \
  X(SINK_CLOSED_REPORT, "sink_closed_report", "") \
  /* States seen after a step: the service's lease (cs_lease_state order) ... */ \
  X(LEASE_NONE, "lease_none", "") \
  X(LEASE_CLAIMING, "lease_claiming", "") \
  X(LEASE_HELD, "lease_held", "") \
  X(LEASE_BUSY, "lease_busy", "") \
  X(LEASE_QUARANTINED, "lease_quarantined", "") \
  X(LEASE_RELEASED, "lease_released", "") \
  /* ... its cycle phase (cycle_phase order, src/core/service_internal.h) ... */ \
  X(PHASE_IDLE, "phase_idle", "") \
  X(PHASE_UPLOAD, "phase_upload", "") \
  X(PHASE_INDEX, "phase_index", "") \
  X(PHASE_PUBLISH, "phase_publish", "") \
  X(PHASE_CONFIRM, "phase_confirm", "") \
  X(PHASE_RECON_LIST, "phase_recon_list", "") \
  X(PHASE_RECON_COMMITTED, "phase_recon_committed", "") \
  X(PHASE_RECON_HEAD, "phase_recon_head", "") \
  X(PHASE_REJECT, "phase_reject", "") \
  X(PHASE_REJECT_CONFIRM, "phase_reject_confirm", "") \
  X(PHASE_STANDBY, "phase_standby", "") \
  /* ... the stages its packs are in (pack_stage order, from STAGE_SPOOLED) ... */ \
  X(STAGE_SPOOLED, "stage_spooled", "") \
  X(STAGE_UPLOADING, "stage_uploading", "") \
  X(STAGE_OWED, "stage_owed", "") \
  X(STAGE_INDEXED, "stage_indexed", "") \
  X(STAGE_DONE, "stage_done", "") \
  X(STAGE_SET_ASIDE, "stage_set_aside", "") \
  /* ... its life and its tables at their bounds ... */ \
  X(SVC_BACKOFF, "svc_backoff", "") \
  X(SVC_BACKOFF_CAPPED, "svc_backoff_capped", "") \
  X(SVC_STOPPING, "svc_stopping", "") \
  X(SVC_STOPPED, "svc_stopped", "") \
  X(BOUND_SPOOL_TABLE, "bound_spool_table", "") \
  X(BOUND_ADOPTED, "bound_adopted", "") \
  X(BOUND_OWED, "bound_owed", "") \
  X(BOUND_CYCLE_WORK, "bound_cycle_work", "") \
  X(BOUND_STORE_INFLIGHT, "bound_store_inflight", "") \
  X(BOUND_FLUSHES, "bound_flushes", "the engine has one flush in flight at a time, the table holds 8") \
  X(BOUND_REJECTED, "bound_rejected", "") \
  /* ... the engine (cs_engine_state order) ... */ \
  X(ENGINE_IDLE, "engine_idle", "open's steps finish in the pump that starts them and never fail") \
  X(ENGINE_OPENING, "engine_opening", "open's steps finish in the pump that starts them") \
  X(ENGINE_OPEN, "engine_open", "") \
  X(ENGINE_FLUSHING, "engine_flushing", "") \
  X(ENGINE_CLOSING, "engine_closing", "") \
  X(ENGINE_REPLACING, "engine_replacing", "") \
  X(ENGINE_CLOSED, "engine_closed", "") \
  /* ... and the sink (enum sink_state of src/core/sink.c), with its seal slots. */ \
  X(SINK_OPEN, "sink_open", "") \
  X(SINK_CLOSING, "sink_closing", "") \
  X(SINK_CLOSED, "sink_closed", "") \
  X(SINK_SEAL_DEFERRED, "sink_seal_deferred", "not drawn yet: seals take milliseconds, six slots never fill (a slow disk)") \
  X(SINK_SEALS_FULL, "sink_seals_full", "not drawn yet: seals take milliseconds, six slots never fill (a slow disk)") \
  /* Situations: index batches and set-aside packs (by the service's reason) ... */ \
  X(SIT_BATCH_SPLIT, "sit_batch_split", "") \
  X(SIT_SET_ASIDE_BATCH_BYTES, "sit_set_aside_batch_bytes", "") \
  X(SIT_SET_ASIDE_CATALOG_TOO_LARGE, "sit_set_aside_catalog_too_large", "not drawn yet: a statement limit below one pack's rows") \
  X(SIT_SET_ASIDE_INVALID, "sit_set_aside_invalid", "") \
  X(SIT_SET_ASIDE_OTHER_BYTES, "sit_set_aside_other_bytes", "not drawn yet: a store holding other bytes under a pack's key") \
  X(SIT_SET_ASIDE_STORE_REFUSED, "sit_set_aside_store_refused", "not drawn yet: a store that refuses a pack's PUT") \
  X(SIT_SET_ASIDE_BY_HOLDER, "sit_set_aside_by_holder", "") \
  X(SIT_SET_ASIDE_OTHER, "sit_set_aside_other", "a reason coverage.c does not know: only mutants 10 and 12 have one") \
  /* ... the lease, from the service's side ... */ \
  X(SIT_LEASE_RENEWED, "sit_lease_renewed", "") \
  X(SIT_LEASE_EXPIRED, "sit_lease_expired", "") \
  X(SIT_LEASE_LOST_UNKNOWN, "sit_lease_lost_unknown", "") \
  X(SIT_LEASE_RENEW_LOST, "sit_lease_renew_lost", "rare (0.13% of seeds)") \
  X(SIT_LEASE_CLAIM_UNKNOWN, "sit_lease_claim_unknown", "") \
  X(SIT_LEASE_CLAIM_LOST, "sit_lease_claim_lost", "") \
  X(SIT_CONTESTED_SEEN, "sit_contested_seen", "") \
  /* ... and from the catalog's ... */ \
  X(SIT_CONTESTED_TERM, "sit_contested_term", "") \
  X(SIT_CLAIM_RENEWAL, "sit_claim_renewal", "") \
  X(SIT_CLAIM_TAKEOVER, "sit_claim_takeover", "") \
  X(SIT_RIVAL_ACQUIRED, "sit_rival_acquired", "") \
  X(SIT_RELEASE_APPLIED, "sit_release_applied", "") \
  X(SIT_RELEASE_NOOP, "sit_release_noop", "") \
  X(SIT_FENCE_REFUSED_INDEX, "sit_fence_refused_index", "") \
  X(SIT_FENCE_REFUSED_PUBLISH, "sit_fence_refused_publish", "") \
  X(SIT_FENCE_REFUSED_REJECT, "sit_fence_refused_reject", "rare (0.38% of seeds)") \
  X(SIT_ORPHAN_INDEX_CUT, "sit_orphan_index_cut", "") \
  X(SIT_INDEX_LATE_REFUSED, "sit_index_late_refused", "") \
  X(SIT_STALL_DELIVERED_LATE, "sit_stall_delivered_late", "") \
  X(SIT_MAYBE_APPLIED_DID, "sit_maybe_applied_did", "") \
  X(SIT_MAYBE_APPLIED_DID_NOT, "sit_maybe_applied_did_not", "") \
  X(SIT_PAUSE_AFTER_WRITE, "sit_pause_after_write", "") \
  /* ... flush answers ... */ \
  X(SIT_FLUSH_DRAINED, "sit_flush_drained", "") \
  X(SIT_FLUSH_NOT_DRAINED, "sit_flush_not_drained", "") \
  X(SIT_FLUSH_FULL, "sit_flush_full", "the engine has one flush in flight at a time, the table holds 8") \
  X(SIT_FLUSH_CLOSED, "sit_flush_closed", "the engine never flushes a service it has stopped") \
  X(SIT_FLUSH_LATE_PAUSED, "sit_flush_late_paused", "") \
  X(SIT_FLUSH_NAMED_REJECTED, "sit_flush_named_rejected", "") \
  X(SIT_FLUSH_REJECTED_UNNAMED, "sit_flush_rejected_unnamed", "") \
  /* ... reconcile ... */ \
  X(SIT_RECON_PASS, "sit_recon_pass", "") \
  X(SIT_RECON_ADOPT, "sit_recon_adopt", "") \
  X(SIT_RECON_SKIP_KEY, "sit_recon_skip_key", "") \
  X(SIT_RECON_SKIP_FOREIGN, "sit_recon_skip_foreign", "") \
  X(SIT_RECON_HEAD_GONE, "sit_recon_head_gone", "not drawn yet: objects deleted between a LIST and its HEAD") \
  X(SIT_RECON_HEAD_ERROR, "sit_recon_head_error", "") \
  X(SIT_RECON_LIST_ERROR, "sit_recon_list_error", "not drawn yet: LIST refused for good (403); plans reach it") \
  X(SIT_FOREIGN_UUID, "sit_foreign_uuid", "") \
  X(SIT_FOREIGN_KEY, "sit_foreign_key", "") \
  X(SIT_FOREIGN_ODD_SEGMENT, "sit_foreign_odd_segment", "") \
  /* ... the spool across crashes and restarts ... */ \
  X(SIT_RECOVERED_PACK, "sit_recovered_pack", "") \
  X(SIT_QUARANTINE_RECOVERED, "sit_quarantine_recovered", "") \
  X(SIT_READY_NAME_LOST, "sit_ready_name_lost", "rare (0.09% of seeds): a crash between link and directory fsync") \
  X(SIT_OPEN_SWEPT, "sit_open_swept", "") \
  X(SIT_UPLOADER_HANDOFF, "sit_uploader_handoff", "") \
  X(SIT_SERVICE_ABANDONED, "sit_service_abandoned", "rare (0.08% of seeds)") \
  X(SIT_SEAL_OUTLIVED_SINK, "sit_seal_outlived_sink", "rare (0.25% of seeds)") \
  X(SIT_SEAL_OUTLIVED_SERVICE, "sit_seal_outlived_service", "") \
  X(SIT_SEAL_ERROR_REPORTED, "sit_seal_error_reported", "") \
  /* ... packs handed into the spool by other capture processes (capstore serve) ... */ \
  X(SIT_ARRIVAL, "sit_arrival", "") \
  X(SIT_REARRIVAL, "sit_rearrival", "") \
  X(SIT_REARRIVAL_SAME_SERVICE, "sit_rearrival_same_service", "") \
  X(SIT_BAD_EVENT, "sit_bad_event", "") /* a malformed event handed to a service, refused */ \
  X(SIT_START_REFUSED, "sit_start_refused", "") /* a disk_full seed's service start refused: the open ends there */ \
  /* ... and a full spool, by the sink's answer and policy. */ \
  X(SIT_DISK_FULL_BLOCK, "sit_disk_full_block", "") \
  X(SIT_DISK_FULL_BLOCK_GAVE_UP, "sit_disk_full_block_gave_up", "") \
  X(SIT_DISK_FULL_REFUSE, "sit_disk_full_refuse", "") \
  X(SIT_ADMIT_SEALS_BUSY, "sit_admit_seals_busy", "not drawn yet: seals take milliseconds, six slots never fill (a slow disk)") \
  /* Readers (the readers draw): searches, plans, budgets and what their GETs met. */ \
  X(READ_OK, "read_ok", "") \
  X(READ_EMPTY, "read_empty", "") \
  X(READ_PAGED, "read_paged", "") \
  X(READ_WATERMARK_MOVED, "read_watermark_moved", "") \
  X(READ_CATALOG_FAILED, "read_catalog_failed", "") \
  X(READ_MERGED, "read_merged", "") \
  X(READ_WHOLE, "read_whole", "") \
  X(READ_BUDGET_REFUSED, "read_budget_refused", "") \
  X(READ_BUDGET_EXACT, "read_budget_exact", "") \
  X(READ_GET_FAILED, "read_get_failed", "") \
  X(READ_OBJECT_LOST, "read_object_lost", "") \
  X(READ_OTHER_BYTES, "read_other_bytes", "") \
  X(READ_CHANGED_MID_READ, "read_changed_mid_read", "") \
  /* Capture arrays (the arrays draw, sim/arrays.c). */ \
  X(SIT_ARRAY_SECOND_CANDIDATE, "sit_array_second_candidate", "") \
  X(SIT_ARRAY_REFUSED_AT_FLUSH, "sit_array_refused_at_flush", "") \
  X(SIT_ARRAY_CLAIM_REFUSED, "sit_array_claim_refused", "") \
  X(SIT_ARRAY_CLAIM_TAKEN_OVER, "sit_array_claim_taken_over", "") \
  X(SIT_ARRAY_COMPLETE, "sit_array_complete", "") \
  X(SIT_ARRAY_SLICE_READ, "sit_array_slice_read", "") \
  X(SIT_ARRAY_SLICE_EDGE, "sit_array_slice_edge", "") /* a slice read through an edge chunk, cut short */ \
  /* A catalog of replicas (the replicas draw, sim/replicas.c). */ \
  X(SIT_QUORUM_LATE, "sit_quorum_late", "") \
  X(SIT_QUORUM_LATE_LANDED_AFTER_LEASE, "sit_quorum_late_landed_after_lease", "") \
  X(SIT_QUORUM_BUSY, "sit_quorum_busy", "") \
  X(SIT_REPLICA_BEHIND, "sit_replica_behind", "") \
  X(SIT_REPLICA_DOWN, "sit_replica_down", "") \
  X(SIT_COORDINATOR_DOWN, "sit_coordinator_down", "") \
  X(SIT_BARRIER, "sit_barrier", "") \
  X(SIT_BARRIER_REFUSED, "sit_barrier_refused", "") \
  X(SIT_INDEX_BELOW_LATE_ROWS, "sit_index_below_late_rows", "rare: a predecessor's timed-out INDEX landing above a new holding's floor (seed 287 --replicas 3 --replica-defect 2; seed 621 --replicas 2 --replica-defect 2, where the settle lift matters: mutant 63)") \
  X(SIT_REPLICA_FAILOVER, "sit_replica_failover", "")

#define SIM_COV_ENUM_(id, name, why) SIM_COV_##id,
typedef enum sim_cov_id { SIM_COV_MARKS(SIM_COV_ENUM_) SIM_COV_COUNT_ } sim_cov_id;
#undef SIM_COV_ENUM_

/* Marks summed over runs (seeds or plans). */
typedef struct sim_coverage {
  uint64_t runs;
  uint64_t hits[SIM_COV_COUNT_];       /* marks counted over all runs */
  uint64_t runs_hit[SIM_COV_COUNT_];   /* runs that reached the mark */
  uint64_t first_seed[SIM_COV_COUNT_]; /* the first run's seed that reached it: replay it */
} sim_coverage;

const char *sim_cov_name(sim_cov_id mark);
/* The mark named name, or SIM_COV_COUNT_ when there is none. */
sim_cov_id sim_cov_by_name(const char *name);
/* Why the mark is not required (static text), or NULL when CI requires it. */
const char *sim_cov_why_optional(sim_cov_id mark);
/* Adds one run's marks (hits[SIM_COV_COUNT_]) to total. */
void sim_cov_add(sim_coverage *total, const uint64_t *hits, uint64_t seed);
/*
 * Prints which marks no run reached (required first, then optional with the
 * reason); verbose adds every mark's runs, hits and first seed. The output
 * depends only on total. Returns how many required marks no run reached.
 */
uint32_t sim_cov_report(const sim_coverage *total, bool verbose, FILE *out);

#endif

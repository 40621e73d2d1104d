/*
 * sim/sim.h: the deterministic simulator. One thread, virtual time, one
 * seeded PRNG split into sub-streams. The cores under test (service, sink,
 * engine) run unchanged; the world models the object store, the catalog, the
 * spool file system, the network and the processes' clocks, and injects faults.
 */
#ifndef CAPSTORE_SIM_H
#define CAPSTORE_SIM_H

#include "capstore/engine.h"
#include "capstore/service.h"
#include "capstore/sink.h"
#include "coverage.h"
#include "plan.h"

#include <stdio.h>

/* ---- exit codes: what kind of failure a run found ---------------------- */
enum {
  SIM_EXIT_OK = 0,
  SIM_EXIT_USAGE = 2,
  SIM_EXIT_CRASH = 3,    /* an assertion or a model bound broke: a bug, not a finding */
  SIM_EXIT_SAFETY = 4,   /* an invariant was violated */
  SIM_EXIT_LIVENESS = 5, /* did not drain after faults healed */
  SIM_EXIT_PLAN = 6,     /* a plan's expectation did not hold */
  SIM_EXIT_MODEL = 7,    /* a simulator table bound was hit: the harness's limit, not a finding */
  SIM_EXIT_COVERAGE = 8, /* --require-coverage: a required coverage mark was never reached */
};

/* ---- the swarm profile -------------------------------------------------- */

typedef enum sim_fault {
  F_STORE_OUTAGE = 0,
  F_STORE_STALL,
  F_STORE_5XX,
  F_STORE_THROTTLE,
  F_STORE_UNKNOWN,
  F_STORE_SLOW,
  F_STORE_403_HEAD,
  F_CATALOG_OUTAGE,
  F_CATALOG_STALL,
  F_CATALOG_UNKNOWN,
  F_CATALOG_TOO_LARGE,
  F_RIVALS,
  F_PAUSE_HOLDER,
  F_CLOCK_SKEW,
  F_POISON_LARGE,
  F_POISON_INVALID,
  F_FOREIGN_OBJECTS,
  F_CRASHES,
  F_TORN_WRITES,
  F_DISK_FULL,
  F_UPLOADERS,
  F_REPLACE,
  F_STORE_OTHER_BYTES, /* the store keeps other bytes of the same size under a pack's key */
  F_STORE_CHANGES,     /* objects change or vanish between a read of them and a later one */
  F_SLOW_DISK,         /* spool seals, fsyncs and removals that take seconds */
  F_CLOSE,             /* a capture process closes its engine and reopens one on the same spool */
  F_CLOSE_STALLED,     /* the same, with the store or the catalog stalled at close time */
  F_CONFIG_CORNERS,    /* one to three config bounds at their minimum or maximum */
  F_CATALOG_5XX,       /* a catalog request answered 5xx, not applied */
  F_CATALOG_THROTTLE,  /* a catalog request answered throttled (429/503), not applied */
  F_COUNT_
} sim_fault;

/*
 * The store's and the catalog's behaviours drawn beside the profile (their own
 * stream), as named in the profile line and to --without.
 */
#define SIM_WITHOUT_LIST_PATH_ORDER (UINT64_C(1) << 36)
#define SIM_WITHOUT_CLAIMS_CONCURRENT (UINT64_C(1) << 37)
#define SIM_WITHOUT_CATALOG_CLOCK_S (UINT64_C(1) << 38)
#define SIM_WITHOUT_LONG_KEYS (UINT64_C(1) << 39)
/* Packs handed into the spool by other capture processes (capstore serve): bits past the 32 above. */
#define SIM_WITHOUT_ARRIVALS (UINT64_C(1) << 32)
/* Reader processes that search and read back while the others run (sim/reader.c). */
#define SIM_WITHOUT_READERS (UINT64_C(1) << 33)
/* Chunk writes of a capture array among the records (sim/arrays.c). */
#define SIM_WITHOUT_ARRAYS (UINT64_C(1) << 34)
/* A catalog of ClickHouse replicas (sim/replicas.c). */
#define SIM_WITHOUT_REPLICAS (UINT64_C(1) << 35)
/* A full disk refusing a new sink (disk_full seeds), added after seeds were recorded. */
#define SIM_WITHOUT_OPEN_REFUSED (UINT64_C(1) << 40)
_Static_assert(F_COUNT_ <= 32, "fault kinds and the SIM_WITHOUT_ bits share without_mask");

typedef struct sim_profile {
  bool on[F_COUNT_];
  uint32_t rate_permille[F_COUNT_]; /* per-opportunity probability, in 1/1000 */
} sim_profile;

const char *sim_fault_name(sim_fault fault);
/* The fault kind named name, or F_COUNT_ when there is none. */
sim_fault sim_fault_by_name(const char *name);
/* Draws a swarm profile: each fault on or off with its own rate. */
void sim_profile_draw(sim_profile *profile, cs_prng *prng, uint64_t late_seed);
/* Named profiles: "swarm" (drawn), "none", "all". CS_E_NOT_FOUND otherwise. */
int sim_profile_named(sim_profile *profile, const char *name, cs_prng *prng, uint64_t late_seed);
void sim_profile_print(const sim_profile *profile, FILE *out);

/* ---- run options and results ------------------------------------------ */

typedef struct sim_options {
  uint64_t seed;
  const char *profile_name; /* NULL: swarm */
  const cs_plan *plan;      /* NULL: the random workload */
  const char *plan_path;    /* for the replay line */
  bool trace;               /* print every event */
  FILE *out;                /* where to print; never NULL */
  uint64_t duration_ns;     /* safety phase length (default 10 simulated minutes) */
  uint64_t liveness_ns;     /* liveness bound */
  uint64_t without_mask;    /* fault kinds forced off after the draw (for minimising); also
                               the SIM_WITHOUT_ bits */
  sim_coverage *coverage;   /* NULL, or where the run adds its coverage marks */
  uint32_t reader_defect;   /* 0, or a defect the readers re-introduce to show the checker catches it
                               (SIM_READER_DEFECT_*; --reader-defect N, a self-check of the checker) */
  uint32_t replicas;        /* 0: drawn; else every seed runs on a catalog of this many replicas (2 or 3) */
  uint32_t replica_defect;  /* 0, or a rule of the replicated catalog left out (SIM_REPLICA_DEFECT_*;
                               --replica-defect N: the swarm must find what the rule prevents) */
} sim_options;

/*
 * The replicated catalog's rules left out (--replica-defect N,
 * docs/catalog-protocol.md "Replicated catalog"): what each rule prevents
 * must then fail a run.
 */
enum {
  SIM_REPLICA_DEFECT_NO_QUORUM = 1, /* rule 1: asynchronous replication, reads of the client's replica */
  SIM_REPLICA_DEFECT_NO_BARRIER,    /* rule 4: a new holding reads no watermark after a quorum write */
  SIM_REPLICA_DEFECT_PARALLEL,      /* rule 2: parallel quorum writes (insert_quorum_parallel=1, the default of
                                       later ClickHouse): no 286, so no barrier waits out a predecessor's write */
  SIM_REPLICA_DEFECT_COUNT_
};

/* The readers' defects (--reader-defect N): each breaks one reader invariant of sim/checker.c. */
enum {
  SIM_READER_DEFECT_HEAD_PAGES = 1, /* pages after the first read at the catalog's head, not at W */
  SIM_READER_DEFECT_NO_PAYLOAD_CHECK, /* payload reads taken without checking what came back (the footer is) */
  SIM_READER_DEFECT_RETRY,          /* a failed GET is sent once more, beyond the plan */
  SIM_READER_DEFECT_READ_REFUSED,   /* a plan refused for its budget is read anyway */
  SIM_READER_DEFECT_COUNT_
};

typedef struct sim_result {
  int exit_code;
  uint64_t trace_hash;
  uint64_t events;
  uint64_t sim_end_ns;
  char reason[512];
} sim_result;

/* Runs one seed (or one plan). Never exits the process. */
void sim_run(const sim_options *opts, sim_result *result);

#endif

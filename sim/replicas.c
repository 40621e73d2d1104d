/*
 * A catalog of ClickHouse replicas in the swarm (docs/simulator.md,
 * "Replicated catalog"; docs/catalog-protocol.md, "Replicated catalog").
 * In a quarter of swarm seeds (every seed of "all", every seed under
 * --replicas N) the catalog is one shard of 2 or 3 replicas run as the
 * adapter runs them (catalog.clickhouse.cluster): every write a quorum write
 * of every replica, every read sequentially consistent. Each process talks
 * to one replica, and to the next one after each restart (a publisher that
 * fails over). What the model draws:
 *
 *   - quorum writes not confirmed within insert_quorum_timeout: answered 319
 *     (UNKNOWN), not undone; their rows land when the replicas fetch them,
 *     up to replica_lag_max later, past their writer's lease, and never
 *     while a replica or the coordinator is down (the quorum is every replica);
 *   - one pending quorum write per table: every other write to that table is
 *     refused (286) until it is confirmed (a claim's quorum takes
 *     SIM_CONTEST_WINDOW_NS: two simultaneous claims are one holder and one
 *     286, where one server's INSERT ... SELECT contests the term);
 *   - a consistent read on a replica behind the last quorum part (289);
 *   - a replica down (writes 285, its own clients refused) and the
 *     coordinator down (writes 242, consistent reads refused), in windows;
 *   - the adapter's barrier: a new holding's sole claim is answered only after
 *     fenced quorum writes into publishes and rejected went in (286 while a
 *     predecessor's is pending), with the watermark and the highest inventory
 *     version read after them (cs_claims).
 *
 * A consistent read sees every confirmed write and no pending one, on any
 * replica, so the catalog's tables stay one log: a write lands in it when it
 * is confirmed. The rules can be left out (--replica-defect N, sim.h):
 * without the quorum (1) replication is asynchronous, each replica has its
 * own view of claims and publishes (rows reach the other replicas 9 to 67 ms
 * later, up to replica_lag_max after a pause in fetching) and the swarm must
 * find two holders of a term; without the barrier (2) a new holding starts
 * from the head it read before its claim; with parallel quorum writes (3,
 * insert_quorum_parallel=1, the default of ClickHouse releases after 18.16)
 * no write waits for another's quorum (no 286) and the barrier passes while
 * a predecessor's write is pending: the swarm must find a version published
 * twice.
 *
 * The draws come from a stream of their own: a seed runs as before with
 * replicas off.
 */
#include "world.h"

#include <string.h>

static bool chance(cs_prng *prng, uint32_t permille) { return cs_prng_below(prng, 1000) < permille; }

static bool quorum_on(const sim_world *w) {
  return w->replicas != 0 && w->replica_defect != SIM_REPLICA_DEFECT_NO_QUORUM;
}

void sim_replicas_setup(sim_world *w, bool swarm, bool all) {
  cs_prng_seed(&w->prng_replicas, w->opts->seed ^ UINT64_C(0x7265706c69636173));
  bool on = swarm ? cs_prng_below(&w->prng_replicas, 4) == 0 : all;
  if (w->opts->replicas != 0) on = true;
  /* A plan sets its own (sim_replicas_after_plan); --replica-defect still applies. */
  w->replica_defect = w->opts->replica_defect;
  if (!on || w->opts->plan != NULL || (w->opts->without_mask & SIM_WITHOUT_REPLICAS)) return;
  w->replicas = w->opts->replicas != 0 ? w->opts->replicas : 2 + (uint32_t)cs_prng_below(&w->prng_replicas, 2);
  /* A quorum write that times out (319) in half of them, a replica behind on a consistent read in half. */
  w->quorum_timeout_permille = cs_prng_below(&w->prng_replicas, 2) == 0 ? 5 + (uint32_t)cs_prng_below(&w->prng_replicas, 46) : 0;
  w->replica_behind_permille = cs_prng_below(&w->prng_replicas, 2) == 0 ? 5 + (uint32_t)cs_prng_below(&w->prng_replicas, 26) : 0;
  /* Replication lag after a pause in fetching: about 10 s seen live, up to two TTLs here. */
  w->replica_lag_max_ns = CS_SEC_NS + cs_prng_below(&w->prng_replicas, 2 * w->base_svc.lease_ttl_ns);
  /* Replicas and the coordinator down, in windows of the safety phase (half of them). */
  if (cs_prng_below(&w->prng_replicas, 2) == 0) {
    uint32_t n = 1 + (uint32_t)cs_prng_below(&w->prng_replicas, SIM_REPLICA_WINDOWS_MAX);
    for (uint32_t i = 0; i < n; i++) {
      sim_replica_window *win = &w->replica_windows[w->replica_window_count++];
      bool coordinator = cs_prng_below(&w->prng_replicas, 3) == 0;
      win->replica = coordinator ? SIM_NONE : (uint32_t)cs_prng_below(&w->prng_replicas, w->replicas);
      win->from_ns = cs_prng_below(&w->prng_replicas, w->opts->duration_ns);
      win->until_ns = win->from_ns + CS_SEC_NS + cs_prng_below(&w->prng_replicas, 60 * CS_SEC_NS);
    }
  }
  /* Quorum writes serialize claims per table: one server's contested terms (INSERT ... SELECT) do not arise. */
  /* One pending quorum write a table: claims are serial (a parallel quorum contests them as one server does). */
  if (quorum_on(w) && w->replica_defect != SIM_REPLICA_DEFECT_PARALLEL) w->catalog_claims_concurrent = false;
}

int sim_replicas_after_plan(sim_world *w) {
  if (w->opts->replicas != 0 && !(w->opts->without_mask & SIM_WITHOUT_REPLICAS)) w->replicas = w->opts->replicas;
  if (w->opts->without_mask & SIM_WITHOUT_REPLICAS) w->replicas = 0;
  if (w->replicas == 0) {
    w->quorum_timeout_permille = w->replica_behind_permille = 0;
    return CS_E_OK;
  }
  if (w->replicas < 2 || w->replicas > SIM_REPLICAS_MAX || w->quorum_timeout_permille > 1000 ||
      w->replica_behind_permille > 1000)
    return CS_E_CONFIG;
  if (w->replica_lag_max_ns == 0) w->replica_lag_max_ns = 10 * CS_SEC_NS;
  /* One pending quorum write a table: claims are serial (a parallel quorum contests them as one server does). */
  if (quorum_on(w) && w->replica_defect != SIM_REPLICA_DEFECT_PARALLEL) w->catalog_claims_concurrent = false;
  return CS_E_OK;
}

void sim_replicas_print(const sim_world *w, FILE *out) {
  if (w->replicas == 0) return;
  fprintf(out, " catalog_replicas=%u(quorum_timeouts:%u/1000,behind:%u/1000,lag_max:%.1fs,windows:%u%s)", w->replicas,
          w->quorum_timeout_permille, w->replica_behind_permille, (double)w->replica_lag_max_ns / 1e9,
          w->replica_window_count,
          w->replica_defect == SIM_REPLICA_DEFECT_NO_QUORUM    ? ",defect:no_quorum"
          : w->replica_defect == SIM_REPLICA_DEFECT_NO_BARRIER ? ",defect:no_barrier"
          : w->replica_defect == SIM_REPLICA_DEFECT_PARALLEL   ? ",defect:parallel_quorum"
                                                               : "");
}

/* The replica a process talks to: the next one after each restart (a publisher failing over). */
uint32_t sim_replica_of(const sim_world *w, const sim_proc *p) {
  return w->replicas == 0 ? 0 : (p->index + p->incarnation) % w->replicas;
}

/* The replica whose own view a request reads: only without the quorum; else every confirmed row (SIM_NONE). */
uint32_t sim_replica_view(const sim_world *w, const sim_req *req) {
  return w->replicas != 0 && !quorum_on(w) ? req->replica : SIM_NONE;
}

/* When each replica has a row written now through replica own: all at once with the quorum, else after their lag. */
void sim_replicas_stamp(sim_world *w, uint32_t own, uint64_t seen_ns[SIM_REPLICAS_MAX]) {
  for (uint32_t r = 0; r < SIM_REPLICAS_MAX; r++) seen_ns[r] = w->now_ns;
  if (w->replicas == 0 || quorum_on(w)) return;
  for (uint32_t r = 0; r < w->replicas; r++) {
    if (r == own) continue;
    uint64_t lag = 9 * CS_MS_NS + cs_prng_below(&w->prng_replicas, 59 * CS_MS_NS);
    if (chance(&w->prng_replicas, 60)) lag = cs_prng_below(&w->prng_replicas, w->replica_lag_max_ns + 1);
    seen_ns[r] = w->now_ns + lag;
  }
}

/* Whom a window takes down: a replica, the coordinator (SIM_NONE), or any replica (ANY_REPLICA). */
#define ANY_REPLICA (SIM_NONE - 1u)

static const sim_replica_window *down_now(const sim_world *w, uint32_t whom) {
  if (w->liveness) return NULL; /* faults healed */
  for (uint32_t i = 0; i < w->replica_window_count; i++) {
    const sim_replica_window *win = &w->replica_windows[i];
    bool match = whom == ANY_REPLICA ? win->replica != SIM_NONE : win->replica == whom;
    if (match && win->from_ns <= w->now_ns && w->now_ns < win->until_ns) return win;
  }
  return NULL;
}

/* A quorum write to the table is pending until until_ns (286 to every other write to it). */
static void table_pending(sim_world *w, int table, uint64_t until_ns) {
  if (until_ns > w->table_pending_until_ns[table]) w->table_pending_until_ns[table] = until_ns;
}

/*
 * The first moment from at_ns on that no window covers: a quorum of every
 * replica cannot complete while one of them or the coordinator is down.
 */
static uint64_t after_windows(const sim_world *w, uint64_t at_ns) {
  if (w->liveness) return at_ns; /* faults healed */
  for (bool moved = true; moved;) {
    moved = false;
    for (uint32_t i = 0; i < w->replica_window_count; i++) {
      const sim_replica_window *win = &w->replica_windows[i];
      if (win->from_ns <= at_ns && at_ns < win->until_ns) at_ns = win->until_ns, moved = true;
    }
  }
  return at_ns;
}

/* How long after now a timed-out quorum write lands: after the 319, when every replica has fetched it. */
static uint64_t late_delay(sim_world *w) {
  uint64_t delay = w->base_svc.request_timeout_ns / 2 + cs_prng_below(&w->prng_replicas, w->replica_lag_max_ns + 1);
  delay = after_windows(w, w->now_ns + delay) - w->now_ns;
  sim_mark_catalog_unhealthy(w, w->now_ns + delay);
  return delay;
}

int sim_table_of(cs_op op) {
  switch (op) {
  case CS_OP_CAT_CLAIM:
  case CS_OP_CAT_RELEASE: return SIM_TABLE_CLAIMS;
  case CS_OP_CAT_INDEX: return SIM_TABLE_INVENTORY;
  case CS_OP_CAT_PUBLISH: return SIM_TABLE_PUBLISHES;
  case CS_OP_CAT_REJECT: return SIM_TABLE_REJECTED;
  default: return -1; /* a read */
  }
}

static bool refuse(sim_world *w, sim_req *req, uint64_t until_ns, sim_cov_id mark) {
  req->outcome = CS_OUT_REFUSED;
  w->counters.replica_refused++;
  sim_mark_catalog_unhealthy(w, until_ns);
  sim_cov_mark(w, mark);
  return true;
}

/*
 * Before the catalog applies a request: the replicated catalog's refusals.
 * True when refused (req->outcome set; nothing applied).
 */
bool sim_replicas_refuse(sim_world *w, sim_req *req) {
  if (w->replicas == 0) return false;
  const sim_replica_window *win = down_now(w, req->replica);
  if (win != NULL) return refuse(w, req, win->until_ns, SIM_COV_SIT_REPLICA_DOWN);
  int table = sim_table_of(req->op);
  win = down_now(w, SIM_NONE);
  /* Without the coordinator every replica is read-only (242), and a consistent read cannot check its quorum part. */
  if (win != NULL && (table >= 0 || quorum_on(w))) return refuse(w, req, win->until_ns, SIM_COV_SIT_COORDINATOR_DOWN);
  if (!quorum_on(w)) return false;
  if (table < 0) {
    if (!w->liveness && chance(&w->prng_replicas, w->replica_behind_permille))
      return refuse(w, req, w->now_ns, SIM_COV_SIT_REPLICA_BEHIND); /* 289 */
    return false;
  }
  win = down_now(w, ANY_REPLICA);
  if (win != NULL) return refuse(w, req, win->until_ns, SIM_COV_SIT_REPLICA_DOWN); /* 285: fewer replicas than the quorum */
  if (w->table_pending_until_ns[table] > w->now_ns && w->replica_defect != SIM_REPLICA_DEFECT_PARALLEL) {
    w->counters.quorum_busy_refused++;
    return refuse(w, req, w->table_pending_until_ns[table], SIM_COV_SIT_QUORUM_BUSY); /* 286 */
  }
  return false;
}

/* A write about to leave rows: does its quorum time out (319)? Then it lands late and answers UNKNOWN. */
bool sim_replicas_quorum_late(sim_world *w, sim_req *req) {
  if (!quorum_on(w) || w->liveness || !chance(&w->prng_replicas, w->quorum_timeout_permille)) return false;
  req->quorum_late = true;
  if (!req->has_forced) req->has_forced = true, req->forced = CS_OUT_UNKNOWN;
  w->counters.quorum_late++;
  sim_cov_mark(w, SIM_COV_SIT_QUORUM_LATE);
  return true;
}

/* A claim or release that landed now: its quorum is confirmed after SIM_CONTEST_WINDOW_NS (286 to others until then). */
void sim_replicas_claim_written(sim_world *w) {
  if (quorum_on(w)) table_pending(w, SIM_TABLE_CLAIMS, w->now_ns + SIM_CONTEST_WINDOW_NS);
}

/*
 * A write whose rows land after delay_ns (drawn by the caller): a timed-out
 * one lands later, when the replicas fetch it; either way its table has a
 * pending quorum write until then. Returns the delay to use.
 */
uint64_t sim_replicas_land_delay(sim_world *w, sim_req *req, uint64_t delay_ns) {
  if (!quorum_on(w)) return delay_ns;
  if (req->quorum_late) delay_ns = late_delay(w);
  int table = sim_table_of(req->op);
  if (table >= 0) table_pending(w, table, w->now_ns + delay_ns);
  return delay_ns;
}

/*
 * The adapter's barrier (ch_barrier): after a new holding's sole claim,
 * fenced quorum writes into publishes and rejected, then the watermark and
 * the highest inventory version read after them. A renewal (the next term of
 * the lease whose barrier went in, same adapter) needs none. Called with
 * req->claims.sole_mine set; may refuse the read or clear sole_mine.
 */
void sim_replicas_barrier(sim_world *w, sim_req *req, bool fence_ok, uint64_t watermark, uint64_t index_floor) {
  if (w->replicas == 0 || w->replica_defect == SIM_REPLICA_DEFECT_NO_BARRIER) return;
  uint32_t p = req->proc;
  if (w->barrier_inc[p] == req->incarnation + 1 && cs_uuid_equal(&w->barrier_lease[p], &req->lease_id) &&
      w->barrier_term[p] + 1 == req->term) {
    w->barrier_term[p] = req->term;
    return;
  }
  if (quorum_on(w)) {
    uint64_t until = w->table_pending_until_ns[SIM_TABLE_PUBLISHES];
    if (w->table_pending_until_ns[SIM_TABLE_REJECTED] > until) until = w->table_pending_until_ns[SIM_TABLE_REJECTED];
    if (w->replica_defect == SIM_REPLICA_DEFECT_PARALLEL) until = 0; /* no write waits for another's quorum */
    if (down_now(w, ANY_REPLICA) != NULL || until > w->now_ns) {
      req->outcome = CS_OUT_REFUSED; /* 285 or 286: the holding does not start; the claim is retried */
      w->counters.barrier_refused++;
      sim_mark_catalog_unhealthy(w, until > w->now_ns ? until : w->now_ns);
      sim_cov_mark(w, SIM_COV_SIT_BARRIER_REFUSED);
      return;
    }
  }
  if (!fence_ok) { /* fenced out: the claim expired meanwhile, no barrier row */
    req->claims.sole_mine = false;
    return;
  }
  /* The barrier rows are quorum writes too: one may time out (UNKNOWN), and keeps its table pending until it lands. */
  if (sim_replicas_quorum_late(w, req)) {
    table_pending(w, SIM_TABLE_PUBLISHES, w->now_ns + late_delay(w));
    return;
  }
  if (quorum_on(w))
    for (int t = SIM_TABLE_PUBLISHES; t <= SIM_TABLE_REJECTED; t++) table_pending(w, t, w->now_ns + SIM_CONTEST_WINDOW_NS);
  req->claims.watermark = watermark;
  req->claims.index_floor = index_floor;
  w->floor_read_ns[p] = w->now_ns;
  w->barrier_inc[p] = req->incarnation + 1;
  w->barrier_lease[p] = req->lease_id;
  w->barrier_term[p] = req->term;
  w->counters.barriers++;
  sim_cov_mark(w, SIM_COV_SIT_BARRIER);
}

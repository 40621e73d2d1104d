/*
 * Configuration corners (config_corners): every bound of the service, sink
 * and engine configs at its minimum and at its maximum in some seeds, so the
 * code that only runs at an edge runs too: a table of one, a page of one, a
 * timer that never fires, a sum that saturates. A seed with the fault on
 * draws one to three bounds, each to its minimum or its maximum; the config
 * line after the profile names them, so a failure says which corner it met.
 *
 * An edge is the validator's, except where the world cannot run it (each
 * such row says why): the world's round trip and fence margin put a floor
 * under the lease and the request timeout, and tables sized by a bound cost
 * memory per process.
 */
#include "world.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

typedef enum corner_target { T_SVC = 1, T_SINK, T_ENGINE } corner_target;

typedef enum corner_id {
  /* Sink rows first: the service's batch floor is computed from the sink's pack bounds. */
  C_PACK_RECORDS = 0,
  C_PACK_BYTES,
  C_LINGER,
  C_SPOOL_BYTES,
  C_SINK_SPOOL_PACKS,
  C_BLOCK_MAX,
  C_SPOOL_PACKS,
  C_CYCLE_PACKS,
  C_STORE_INFLIGHT,
  C_BATCH_BYTES,
  C_ATTEMPTS,
  C_BACKOFF_BASE,
  C_BACKOFF_CAP,
  C_LEASE_TTL,
  C_LEASE_GUARD,
  C_RECONCILE_INTERVAL,
  C_RECONCILE_START_ONLY,
  C_LIST_PAGE,
  C_FLUSH_MAX,
  C_REJECTED_MAX,
  C_REQUEST_TIMEOUT,
  C_START_TIMEOUT,
  C_STOP_RESERVE,
  C_COUNT_
} corner_id;

typedef struct corner_def {
  const char *name; /* the plan setting's name where there is one */
  corner_target target;
  size_t offset;    /* within the target config */
  uint8_t width;    /* 4 or 8 bytes */
  bool time;        /* printed in seconds */
} corner_def;

#define SVC(name, field, w, t) {name, T_SVC, offsetof(cs_service_config, field), w, t}
#define SINK(name, field, w, t) {name, T_SINK, offsetof(cs_sink_config, field), w, t}
#define ENG(name, field, t) {name, T_ENGINE, offsetof(cs_engine_config, field), 8, t}

static const corner_def corner_defs[C_COUNT_] = {
    [C_PACK_RECORDS] = SINK("pack_records", pack_records_max, 4, false),
    [C_PACK_BYTES] = SINK("pack_bytes", pack_bytes_max, 8, false),
    [C_LINGER] = SINK("linger", linger_ns, 8, true),
    [C_SPOOL_BYTES] = SINK("spool_bytes", spool_bytes_max, 8, false),
    [C_SINK_SPOOL_PACKS] = SINK("sink_spool_packs", spool_packs_max, 4, false),
    [C_BLOCK_MAX] = SINK("block_max", block_max_ns, 8, true),
    [C_SPOOL_PACKS] = SVC("spool_packs", spool_packs_max, 4, false),
    [C_CYCLE_PACKS] = SVC("cycle_packs", cycle_packs_max, 4, false),
    [C_STORE_INFLIGHT] = SVC("store_inflight", store_inflight_max, 4, false),
    [C_BATCH_BYTES] = SVC("batch_bytes", index_batch_bytes_max, 8, false),
    [C_ATTEMPTS] = SVC("attempts", index_attempts_max, 4, false),
    [C_BACKOFF_BASE] = SVC("backoff_base", backoff_base_ns, 8, true),
    [C_BACKOFF_CAP] = SVC("backoff_cap", backoff_cap_ns, 8, true),
    [C_LEASE_TTL] = SVC("lease_ttl", lease_ttl_ns, 8, true),
    [C_LEASE_GUARD] = SVC("lease_guard", lease_guard_ns, 8, true),
    [C_RECONCILE_INTERVAL] = SVC("reconcile_interval", reconcile_interval_ns, 8, true),
    [C_RECONCILE_START_ONLY] = SVC("reconcile_start_only", reconcile_interval_ns, 8, true),
    [C_LIST_PAGE] = SVC("list_page", list_page_max, 4, false),
    [C_FLUSH_MAX] = SVC("flush_max", flush_max, 4, false),
    [C_REJECTED_MAX] = SVC("rejected_max", rejected_max, 4, false),
    [C_REQUEST_TIMEOUT] = SVC("request_timeout", request_timeout_ns, 8, true),
    [C_START_TIMEOUT] = ENG("start_timeout", start_timeout_ns, true),
    [C_STOP_RESERVE] = ENG("stop_reserve", stop_reserve_ns, true),
};

#define HOUR_NS (3600 * CS_SEC_NS)

/*
 * The smallest budget that holds one healthy pack: the largest index_bytes
 * the sink can seal (256 bytes and 96 a record, world.c's exec_sink_seal,
 * with at most pack_records_max records, or as many 256-byte records, the
 * smallest the workload writes, as fit pack_bytes_max and one more), and, as
 * the world's catalog takes the budget for its statement limit, one pack's
 * inventory statement.
 */
static uint64_t batch_floor(const sim_world *w) {
  uint64_t records = w->base_sink.pack_records_max;
  uint64_t by_bytes = w->base_sink.pack_bytes_max / 256u + 1u;
  if (by_bytes < records) records = by_bytes;
  uint64_t floor = 256u + 96u * records;
  return floor > sim_catalog_statement_floor(w) ? floor : sim_catalog_statement_floor(w);
}

/*
 * The fence passes only while the claim outlives now + margin (the margin
 * grows by a tick of a catalog clock of whole seconds); a holder renews every
 * TTL/3. Four margins leave room for one renewal and one write between them;
 * the validator's 3 ms could never pass the world's fence at all.
 */
static uint64_t ttl_floor(const sim_world *w) { return 4 * w->fence_margin_ns; }

/* The edge of row id: its minimum, or its maximum when max. */
static uint64_t corner_value(const sim_world *w, corner_id id, bool max) {
  const cs_service_config *svc = &w->base_svc;
  switch (id) {
  case C_PACK_RECORDS: return max ? 1000000 : 1;
  case C_PACK_BYTES: return max ? w->base_sink.spool_bytes_max : 1;
  case C_LINGER: return max ? UINT64_MAX : CS_MS_NS;
  case C_SPOOL_BYTES: return max ? UINT64_MAX : w->base_sink.pack_bytes_max;
  /* The world caps the sink's pack quota at the service's table (proc_setup). */
  case C_SINK_SPOOL_PACKS: return max ? svc->spool_packs_max : 1;
  case C_BLOCK_MAX: return max ? UINT64_MAX : CS_MS_NS;
  /*
   * Not the validator's 1,000,000 and 65,536: at 65,536 the tables take 78 MB
   * a process, cleared at every service start, and every pack lookup scans
   * them (2 to 37 s a seed). Past the world's 1,024 spool files a larger
   * spool bound never binds; a cycle's packs may travel in one INDEX, which
   * the world's requests hold up to SIM_BATCH_MAX of.
   */
  case C_SPOOL_PACKS: return max ? 4096 : 1;
  case C_CYCLE_PACKS: return max ? SIM_BATCH_MAX : 1;
  case C_STORE_INFLIGHT: return max ? 256 : 1;
  /* The validator's 1 byte makes every healthy pack too large for any batch. */
  case C_BATCH_BYTES: return max ? UINT64_MAX : batch_floor(w);
  case C_ATTEMPTS: return max ? 1000 : 1;
  case C_BACKOFF_BASE: return max ? HOUR_NS : CS_MS_NS;
  case C_BACKOFF_CAP: return max ? HOUR_NS : svc->backoff_base_ns;
  case C_LEASE_TTL: return max ? HOUR_NS : ttl_floor(w);
  case C_LEASE_GUARD: return max ? svc->lease_ttl_ns / 3 - 1 : 0;
  case C_RECONCILE_INTERVAL: return max ? 7 * 24 * HOUR_NS : CS_MS_NS;
  case C_RECONCILE_START_ONLY: return 0;
  case C_LIST_PAGE: return max ? 1000 : 1;
  case C_FLUSH_MAX: return max ? 64 : 1;
  case C_REJECTED_MAX: return max ? 65536 : 1;
  /* The world's slowest healthy answer is about 155 ms (3 ms and 150 ms of apply delay); 1 ms times out all. */
  case C_REQUEST_TIMEOUT: return max ? HOUR_NS : 200 * CS_MS_NS;
  case C_START_TIMEOUT:
  case C_STOP_RESERVE: return max ? UINT64_MAX : CS_MS_NS;
  case C_COUNT_: break;
  }
  return 0;
}

/*
 * Rows a seed may not draw. With uploaders, a reconcile that only runs at
 * start (or once a week) leaves the packs they hand off unindexed, as the
 * config documents (reconcile_interval_ns 0 is for a prefix nobody else
 * writes).
 */
static bool corner_allowed(const sim_world *w, corner_id id, bool max) {
  if (id == C_RECONCILE_START_ONLY || (id == C_RECONCILE_INTERVAL && max)) return w->uploaders == 0;
  /*
   * A pack a record: uploaders hand off some 6,000 packs each in ten minutes,
   * and the publisher's reconcile indexes a cycle's worth (about 150 ms
   * each) at a time, hours of backlog past the liveness bound. The
   * publisher's own spool quota bounds its own backlog.
   */
  if ((id == C_PACK_RECORDS || id == C_PACK_BYTES) && !max) return w->uploaders == 0;
  return true;
}

static size_t corner_offset(const corner_def *def) {
  size_t base = def->target == T_SVC    ? offsetof(sim_world, base_svc)
                : def->target == T_SINK ? offsetof(sim_world, base_sink)
                                        : offsetof(sim_world, base_engine);
  return base + def->offset;
}

static uint8_t *corner_field(sim_world *w, const corner_def *def) { return (uint8_t *)w + corner_offset(def); }

static uint64_t corner_get(const sim_world *w, const corner_def *def) {
  const uint8_t *at = (const uint8_t *)w + corner_offset(def);
  if (def->width == 4) {
    uint32_t v;
    memcpy(&v, at, 4);
    return v;
  }
  uint64_t v;
  memcpy(&v, at, 8);
  return v;
}

static void corner_set(sim_world *w, corner_id id, bool max) {
  const corner_def *def = &corner_defs[id];
  uint64_t v = corner_value(w, id, max);
  uint8_t *at = corner_field(w, def);
  if (def->width == 4) {
    uint32_t v32 = (uint32_t)v;
    memcpy(at, &v32, 4);
  } else {
    memcpy(at, &v, 8);
  }
  /* Its two edges: reconcile at start only (min), and never, neither at start nor later (max). */
  if (id == C_RECONCILE_START_ONLY) w->base_svc.reconcile_at_start = !max;
}

static void profile_off(sim_world *w, sim_fault fault) {
  w->profile.on[fault] = false;
  w->profile.rate_permille[fault] = 0;
}

/* What one bound at an edge asks of the others, so every config stays valid and the world honest. */
static void corners_settle(sim_world *w) {
  cs_service_config *svc = &w->base_svc;
  if (w->base_sink.spool_bytes_max < w->base_sink.pack_bytes_max) w->base_sink.spool_bytes_max = w->base_sink.pack_bytes_max;
  if (svc->backoff_cap_ns < svc->backoff_base_ns) svc->backoff_cap_ns = svc->backoff_base_ns;
  if (svc->lease_guard_ns >= svc->lease_ttl_ns / 3) svc->lease_guard_ns = svc->lease_ttl_ns / 3 - 1;
  /* No healthy pack exceeds the batch floor; a poison one is one byte over the budget, which UINT64_MAX has not. */
  if (svc->index_batch_bytes_max < batch_floor(w)) svc->index_batch_bytes_max = batch_floor(w);
  if (svc->index_batch_bytes_max == UINT64_MAX) profile_off(w, F_POISON_LARGE);
  /* A pack the catalog refuses is set aside after 1,000 attempts: hours of backoff, past any liveness bound. */
  if (svc->index_attempts_max == 1000) profile_off(w, F_POISON_INVALID);
  /*
   * Likewise with every backoff an hour long (base at its maximum): each
   * refusal fails a cycle and sleeps up to an hour, and a run with dozens of
   * refused packs drains in days (seed 5011572: 60 simulated hours of
   * renewals overflowed the claims table).
   */
  if (svc->backoff_base_ns >= HOUR_NS) profile_off(w, F_POISON_INVALID);
}

/*
 * How much longer than the default the liveness phase may take at these
 * bounds: a dead holder's claim (and a contested term) must expire, a backoff
 * may sleep out its cap, and a stalled request answers at its timeout.
 */
static uint64_t liveness_waits(const cs_service_config *cfg) {
  /* A refused pack is set aside after index_attempts_max failed cycles, each backing off up to the cap. */
  return 2 * cfg->lease_ttl_ns + (cfg->index_attempts_max + 2) * cfg->backoff_cap_ns + 2 * cfg->request_timeout_ns;
}

static uint64_t liveness_extra(const cs_service_config *now, const cs_service_config *before) {
  uint64_t a = liveness_waits(now), b = liveness_waits(before);
  return a > b ? a - b : 0;
}

/*
 * The backoff invariant's bound: failed answers in one second. A failing
 * cycle brings at most its request table's worth (2 per parallel store
 * request, 2 more); ten such cycles a second at the default config (100). A
 * small base adds the doubling cycles that fit the first 100 ms; a cap under
 * a second allows about 2 / cap cycles a second with full jitter (twice that).
 */
static uint32_t backoff_answers_max(const cs_service_config *cfg) {
  uint64_t per_cycle = 2u * cfg->store_inflight_max + 2u;
  uint64_t cycles = 10;
  for (uint64_t b = cfg->backoff_base_ns; b < 100 * CS_MS_NS; b *= 2) cycles++;
  if (cfg->backoff_cap_ns < CS_SEC_NS) cycles += 4 * CS_SEC_NS / cfg->backoff_cap_ns;
  uint64_t n = per_cycle * cycles;
  return n < 100 ? 100 : n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

void sim_corners_draw(sim_world *w) {
  w->corner_count = 0;
  w->backoff_answers_max = backoff_answers_max(&w->base_svc);
  if (!w->profile.on[F_CONFIG_CORNERS] || w->opts->plan != NULL) return;
  cs_prng *r = &w->prng_faults;
  uint32_t want = 1 + (uint32_t)cs_prng_below(r, SIM_CORNERS_MAX);
  for (uint32_t tries = 0; tries < 16 && w->corner_count < want; tries++) {
    corner_id id = (corner_id)cs_prng_below(r, C_COUNT_);
    bool max = cs_prng_below(r, 2) == 1;
    bool taken = false;
    for (uint32_t i = 0; i < w->corner_count; i++) taken = taken || w->corners[i] == id;
    if (taken || !corner_allowed(w, id, max)) continue;
    w->corners[w->corner_count] = (uint8_t)id;
    w->corner_max[w->corner_count] = max;
    w->corner_count++;
    sim_cov_fault(w, F_CONFIG_CORNERS);
  }
  /* In table order, so a bound computed from another (the batch floor) sees it at its edge. */
  for (uint32_t i = 1; i < w->corner_count; i++)
    for (uint32_t k = i; k > 0 && w->corners[k - 1] > w->corners[k]; k--) {
      uint8_t id = w->corners[k];
      bool max = w->corner_max[k];
      w->corners[k] = w->corners[k - 1];
      w->corner_max[k] = w->corner_max[k - 1];
      w->corners[k - 1] = id;
      w->corner_max[k - 1] = max;
    }
  cs_service_config before = w->base_svc;
  for (uint32_t i = 0; i < w->corner_count; i++) corner_set(w, (corner_id)w->corners[i], w->corner_max[i]);
  corners_settle(w);
  w->liveness_extra_ns = liveness_extra(&w->base_svc, &before);
  w->backoff_answers_max = backoff_answers_max(&w->base_svc);
  char msg[160];
  if (cs_sink_config_validate(&w->base_sink, msg, sizeof msg) != CS_E_OK ||
      cs_engine_config_validate(&w->base_engine, msg, sizeof msg) != CS_E_OK)
    sim_bail(w, SIM_EXIT_CRASH, "config corners made an invalid config: %s", msg);
}

static void print_value(FILE *out, const corner_def *def, uint64_t v) {
  if (v == UINT64_MAX) fputs("max", out);
  else if (def->time) fprintf(out, "%gs", (double)v / 1e9);
  else fprintf(out, "%" PRIu64, v);
}

void sim_config_print(const sim_world *w, FILE *out) {
  static const corner_id shown[] = {C_CYCLE_PACKS, C_LIST_PAGE, C_STORE_INFLIGHT, C_REJECTED_MAX,
                                    C_RECONCILE_INTERVAL};
  fputs("config:", out);
  for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
    const corner_def *def = &corner_defs[shown[i]];
    fprintf(out, " %s=", def->name);
    print_value(out, def, corner_get(w, def));
  }
  fprintf(out, " reconcile_at_start=%d corners=", w->base_svc.reconcile_at_start ? 1 : 0);
  if (w->corner_count == 0) fputs("none", out);
  for (uint32_t i = 0; i < w->corner_count; i++) {
    const corner_def *def = &corner_defs[w->corners[i]];
    if (w->corners[i] == C_RECONCILE_START_ONLY) {
      fprintf(out, "%s%s", i > 0 ? "," : "", w->corner_max[i] ? "reconcile_never" : "reconcile_start_only");
      continue;
    }
    fprintf(out, "%s%s=%s(", i > 0 ? "," : "", def->name, w->corner_max[i] ? "max" : "min");
    print_value(out, def, corner_get(w, def));
    fputc(')', out);
  }
  fputc('\n', out);
}

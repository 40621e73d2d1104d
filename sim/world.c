/*
 * The simulator's world: the event loop, the network, the processes that run
 * the cores, the spool file system, the capture workload and swarm faults.
 * Everything random comes from the world's sub-streams; events are ordered by
 * (time, sequence), so a seed gives one trace, byte for byte.
 */
#include "world.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- bail-out, trace ---------------------------------------------------- */

void sim_bail(sim_world *w, int exit_code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->result->reason, sizeof w->result->reason, fmt, ap);
  va_end(ap);
  w->result->exit_code = exit_code;
  longjmp(w->bail, 1);
}

static void hash_u64(sim_world *w, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    w->trace_hash ^= (v >> (8 * i)) & 0xffu;
    w->trace_hash *= UINT64_C(0x100000001b3);
  }
}

static const char *ev_name(ev_kind kind) {
  static const char *const names[] = {"?",      "wake",   "arrive",  "reply", "seal_step",
                                      "spool",  "capture", "restart", "plan",  "fault",
                                      "flush",  "phase",  "live_check", "fault_end", "resume",
                                      "land",   "reopen", "rearrive", "read", "read_answer"};
  return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

/* ---- the event heap ----------------------------------------------------- */

static bool ev_before(const sim_event *a, const sim_event *b) {
  return a->at_ns < b->at_ns || (a->at_ns == b->at_ns && a->seq < b->seq);
}

void sim_schedule(sim_world *w, uint64_t at_ns, ev_kind kind, uint32_t proc, uint64_t a, uint64_t b) {
  if (w->heap_len >= SIM_EVENTS_MAX) sim_bail(w, SIM_EXIT_MODEL, "model bound: event heap");
  sim_event ev = {.at_ns = at_ns < w->now_ns ? w->now_ns : at_ns, .seq = w->seq++, .kind = kind,
                  .proc = proc, .a = a, .b = b};
  ev.incarnation = proc < w->proc_count ? w->procs[proc].incarnation : 0;
  uint32_t i = w->heap_len++;
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (!ev_before(&ev, &w->heap[parent])) break;
    w->heap[i] = w->heap[parent];
    i = parent;
  }
  w->heap[i] = ev;
}

static bool heap_pop(sim_world *w, sim_event *out) {
  if (w->heap_len == 0) return false;
  *out = w->heap[0];
  sim_event last = w->heap[--w->heap_len];
  uint32_t i = 0;
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= w->heap_len) break;
    if (child + 1 < w->heap_len && ev_before(&w->heap[child + 1], &w->heap[child])) child++;
    if (!ev_before(&w->heap[child], &last)) break;
    w->heap[i] = w->heap[child];
    i = child;
  }
  if (w->heap_len > 0) w->heap[i] = last;
  return true;
}

/* ---- clocks -------------------------------------------------------------- */

static uint64_t local_of(const sim_proc *p, uint64_t true_ns) {
  __int128 drift = (__int128)true_ns * p->drift_ppm / 1000000;
  return (uint64_t)((__int128)true_ns + p->skew_ns + drift);
}

uint64_t sim_local_now(const sim_world *w, const sim_proc *p) { return local_of(p, w->now_ns); }

static uint64_t true_of_local(const sim_proc *p, uint64_t local_ns) {
  if (local_ns == CS_NEVER) return CS_NEVER;
  __int128 base = (__int128)local_ns - p->skew_ns;
  if (base < 0) return 0;
  __int128 guess = base * 1000000 / (1000000 + p->drift_ppm);
  /* A deadline centuries away (a bound at its maximum): the run ends long before it. */
  if (guess > (__int128)(UINT64_MAX / 2)) return UINT64_MAX / 2;
  uint64_t t = (uint64_t)guess;
  while (local_of(p, t) < local_ns) t++;
  return t;
}

static uint64_t rand_range(cs_prng *prng, uint64_t lo, uint64_t hi) {
  return lo + cs_prng_below(prng, hi - lo + 1);
}

static bool chance(cs_prng *prng, uint32_t permille) { return cs_prng_below(prng, 1000) < permille; }

/* How long a spool step takes: lo..hi ns, or 0.5 to 5 s while the disk is slow (slow_disk). */
static uint64_t disk_delay(sim_world *w, uint64_t lo, uint64_t hi) {
  if (w->now_ns >= w->slow_disk_until_ns) return rand_range(&w->prng_storage, lo, hi);
  w->counters.slow_seal_steps++;
  return rand_range(&w->prng_storage, CS_SEC_NS / 2, 5 * CS_SEC_NS);
}

/* ---- requests on the wire ------------------------------------------------ */

static sim_req *req_alloc(sim_world *w, uint32_t *index) {
  for (uint32_t i = 0; i < SIM_REQS_MAX; i++) {
    if (w->reqs[i].used) continue;
    memset(&w->reqs[i], 0, sizeof w->reqs[i]);
    w->reqs[i].used = true;
    *index = i;
    return &w->reqs[i];
  }
  sim_bail(w, SIM_EXIT_MODEL, "model bound: requests in flight");
}

static void req_release(sim_req *req) {
  assert(req->refs > 0);
  if (--req->refs == 0) req->used = false;
}

static const sim_fault_window *window_for(const sim_world *w, bool catalog) {
  for (uint32_t i = 0; i < SIM_WINDOWS_MAX; i++) {
    const sim_fault_window *win = &w->windows[i];
    if (win->active && win->catalog == catalog && win->status == 0 && w->now_ns < win->until_ns)
      return win;
  }
  return NULL;
}

/* The swarm's per-request faults for this target, drawn at send time. */
static cs_plan_mode random_mode(sim_world *w, bool catalog, cs_prng *prng) {
  if (w->liveness) return CS_PLAN_MODE_NONE;
  const sim_profile *pr = &w->profile;
  sim_fault unknown = catalog ? F_CATALOG_UNKNOWN : F_STORE_UNKNOWN;
  if (pr->on[unknown] && chance(prng, pr->rate_permille[unknown] / 4)) return CS_PLAN_MODE_UNKNOWN;
  sim_fault e5xx = catalog ? F_CATALOG_5XX : F_STORE_5XX, throttle = catalog ? F_CATALOG_THROTTLE : F_STORE_THROTTLE;
  if (pr->on[e5xx] && chance(prng, pr->rate_permille[e5xx] / 4)) return CS_PLAN_MODE_5XX;
  if (pr->on[throttle] && chance(prng, pr->rate_permille[throttle] / 4)) return CS_PLAN_MODE_THROTTLE;
  return CS_PLAN_MODE_NONE;
}

/* The readers' requests meet the same windows, and per-request faults drawn from their own stream. */
cs_plan_mode sim_net_mode(sim_world *w, bool catalog, cs_prng *prng) {
  const sim_fault_window *win = window_for(w, catalog);
  return win != NULL ? win->mode : random_mode(w, catalog, prng);
}

void sim_mark_catalog_unhealthy(sim_world *w, uint64_t until_ns) {
  uint64_t end = until_ns + 2 * w->base_svc.lease_ttl_ns;
  if (end > w->catalog_unhealthy_until_ns) w->catalog_unhealthy_until_ns = end;
}

/*
 * Every event the sim gives a service goes through here: the pump knows whether one came since it last ran,
 * and a call that set a pack aside is seen naming it (sim_check_set_aside_named).
 */
static int svc_event(sim_world *w, sim_proc *p, uint64_t now_ns, const cs_event *ev) {
  p->svc_events++;
  sim_svc_marks before = sim_svc_marks_of(p->svc);
  int rc = cs_service_on_event(p->svc, now_ns, ev);
  sim_check_set_aside_named(w, p, before);
  return rc;
}

/* Every poll of a service's actions, likewise. */
static bool svc_poll(sim_world *w, sim_proc *p, uint64_t now_ns, cs_action *out) {
  sim_svc_marks before = sim_svc_marks_of(p->svc);
  bool got = cs_service_poll(p->svc, now_ns, out);
  sim_check_set_aside_named(w, p, before);
  return got;
}

/* splitmix64's finaliser: the draws that must not move any PRNG stream (a fault added after seeds were recorded). */
static uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

/* A stalled request's own draw: the seed and the request's number, mixed. */
static uint64_t stall_hash(const sim_world *w, uint32_t index) {
  return mix64(w->opts->seed ^ ((uint64_t)index * UINT64_C(0x9e3779b97f4a7c15)) ^
               ((uint64_t)w->reqs[index].version << 32));
}

static bool stall_delivered_late(const sim_world *w, uint32_t index) { return (stall_hash(w, index) >> 63) != 0; }

static void net_send(sim_world *w, sim_proc *p, uint32_t index) {
  sim_req *req = &w->reqs[index];
  const sim_fault_window *win = window_for(w, req->to_catalog);
  cs_plan_mode mode = win != NULL ? win->mode : random_mode(w, req->to_catalog, &w->prng_faults);
  sim_cov_send(w, req, mode);
  if (req->to_catalog && mode != CS_PLAN_MODE_NONE && mode != CS_PLAN_MODE_TOO_LARGE)
    sim_mark_catalog_unhealthy(w, win != NULL ? win->until_ns : w->now_ns);
  uint64_t latency = rand_range(&w->prng_net, 500000, 3000000);
  if (req->op == CS_OP_STORE_PUT) latency += req->ref.size_bytes * 10; /* 100 MB/s */
  if (mode == CS_PLAN_MODE_SLOW) latency = latency * 10 + 200 * CS_MS_NS;
  uint64_t timeout = p->svc_cfg.request_timeout_ns;
  req->refs = 1;
  switch (mode) {
  case CS_PLAN_MODE_CUT:
    req->has_forced = true, req->forced = CS_OUT_REFUSED;
    sim_schedule(w, w->now_ns + CS_MS_NS, EV_REPLY, p->index, index, 0);
    return;
  case CS_PLAN_MODE_STALL:
    /* The request hangs until its timeout: the catalog is not healthy for its sender before that. */
    if (req->to_catalog) sim_mark_catalog_unhealthy(w, w->now_ns + timeout);
    req->has_forced = true, req->forced = CS_OUT_TIMEOUT;
    sim_schedule(w, w->now_ns + timeout, EV_REPLY, p->index, index, 0);
    if (req->op == CS_OP_CAT_INDEX && stall_delivered_late(w, index)) {
      /*
       * Half the stalled INDEXes still reach the catalog, after their sender gave up: a partition that heals
       * with the request in a socket's buffer, TCP retransmitting. Up to three lease TTLs late, past renewals,
       * the sender's retries at higher versions and their PUBLISHes (late rows, docs/catalog-protocol.md).
       * Drawn from a hash of the seed and the request, not a PRNG stream: no other draw of the run moves.
       */
      req->refs = 2;
      uint64_t late = stall_hash(w, index) % (3 * w->base_svc.lease_ttl_ns + 1);
      sim_cov_mark(w, SIM_COV_SIT_STALL_DELIVERED_LATE);
      sim_schedule(w, w->now_ns + timeout + late, EV_ARRIVE, p->index, index, 0);
    }
    return;
  case CS_PLAN_MODE_5XX:
  case CS_PLAN_MODE_THROTTLE:
    req->has_forced = true;
    req->forced = mode == CS_PLAN_MODE_5XX ? CS_OUT_SERVER_ERROR : CS_OUT_THROTTLED;
    sim_schedule(w, w->now_ns + latency, EV_REPLY, p->index, index, 0);
    return;
  case CS_PLAN_MODE_UNKNOWN:
    req->has_forced = true, req->forced = CS_OUT_UNKNOWN;
    break;
  default: break;
  }
  bool fenced = req->op == CS_OP_CAT_INDEX || req->op == CS_OP_CAT_PUBLISH || req->op == CS_OP_CAT_REJECT;
  if (fenced && !req->has_forced && latency + w->apply_delay_max_ns <= timeout) {
    /* The answer leaves after the rows landed: see EV_ARRIVE and EV_LAND. */
    req->reply_after_land = true;
    req->reply_half_ns = latency / 2;
    sim_schedule(w, w->now_ns + latency / 2, EV_ARRIVE, p->index, index, 0);
    return;
  }
  req->refs = 2;
  sim_schedule(w, w->now_ns + latency / 2, EV_ARRIVE, p->index, index, 0);
  /*
   * A fenced write is answered only once its rows landed (or the fence
   * refused them): where that may come after the timeout, the sender's
   * timeout answers first. An OK never runs ahead of the rows it reports.
   */
  if (latency > timeout || (fenced && !req->has_forced)) {
    req->has_forced = true, req->forced = CS_OUT_TIMEOUT;
    latency = timeout;
  }
  sim_schedule(w, w->now_ns + latency, EV_REPLY, p->index, index, 0);
}

static void deliver_reply(sim_world *w, sim_proc *p, sim_req *req) {
  /*
   * Only a doubtful INDEX (its sender heard no answer) may come late and be
   * refused for its version: one answered OK was chosen below the inventory
   * the holding started above (mutant 62), and its packs would never show.
   * On a catalog of replicas a predecessor's timed-out INDEX may land above
   * it after its holding read the floor: answered OK, it names nothing, and
   * the committed-ids check finds its packs not held (they go again).
   */
  if (req->version_refused && !req->has_forced && !req->version_refused_late)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's INDEX at v%" PRIu64 " was refused for its version (at or below the "
             "watermark, or below an inventory row) and answered OK", req->proc, req->version);
  cs_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = CS_EV_DONE;
  ev.id = req->action_id;
  ev.outcome = req->has_forced ? req->forced : req->outcome;
  ev.head = req->head;
  ev.cat_head = req->cat_head;
  ev.claims = req->claims;
  ev.held = req->held;
  ev.rejected = req->rejected;
  const char *keys[SIM_BATCH_MAX];
  for (uint32_t i = 0; i < req->key_count; i++) keys[i] = w->objects[req->keys[i]].ref.key;
  ev.keys = keys;
  ev.key_count = req->key_count;
  static char token_too_long[CS_KEY_MAX + 64];
  if (token_too_long[0] == '\0') memset(token_too_long, 'k', sizeof token_too_long - 1);
  ev.next_token = req->token_too_long && ev.outcome == CS_OUT_OK ? token_too_long : req->next_token;
  /* The last page says so with NULL or "" (service.h): half the time each. */
  if (req->op == CS_OP_STORE_LIST && ev.next_token[0] == '\0' && (req->action_id & 1) != 0) ev.next_token = NULL;
  hash_u64(w, (uint64_t)req->op << 32 | (uint64_t)ev.outcome);
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f p%u  %s id=%" PRIu64 " -> %s\n", (double)w->now_ns / 1e9, p->index, cs_op_name(req->op),
            req->action_id, cs_outcome_name(ev.outcome));
  if (cs_outcome_is_outage(ev.outcome)) sim_check_backoff(w, p);
  if (req->head_only && ev.outcome == CS_OUT_FORBIDDEN) p->forbidden_heads++;
  sim_check_reply(w, p, req, &ev);
  sim_cov_reply(w, req, &ev);
  sim_check_lease_step_done(p, req);
  req->delivered = true;
  int rc = svc_event(w, p, sim_local_now(w, p), &ev);
  if (rc != CS_E_OK) sim_bail(w, SIM_EXIT_CRASH, "proc %u: completion refused: %s", p->index, cs_strerror(rc));
  sim_ledger_done(p, req->op, ev.outcome);
  sim_check_error_named(w, p, req->op, ev.outcome);
  if (req->op == CS_OP_CAT_READ_CLAIMS && ev.outcome == CS_OUT_OK && !ev.claims.sole_mine)
    sim_check_claim_named(w, p, &ev.claims);
  if (req->op == CS_OP_STORE_LIST && req->token_too_long && ev.outcome == CS_OUT_OK) sim_check_token_refused(w, p);
}

/* ---- the spool ------------------------------------------------------------ */

static uint32_t file_alloc(sim_world *w, sim_proc *p) {
  for (uint32_t i = 0; i < SIM_FILES_MAX; i++) {
    if (p->files[i].state != FILE_FREE) continue;
    if (i >= p->files_end) p->files_end = i + 1;
    return i;
  }
  sim_bail(w, SIM_EXIT_MODEL, "model bound: spool files of proc %u", p->index);
}

static uint32_t file_of_pack(const sim_proc *p, uint32_t pack) {
  for (uint32_t i = 0; i < p->files_end; i++)
    if (p->files[i].state != FILE_FREE && p->files[i].pack == pack) return i;
  return SIM_NONE;
}

static void pack_make_id(sim_world *w, uint32_t index, cs_uuid *id) {
  uint64_t ms = w->now_ns / CS_MS_NS + UINT64_C(1764460800000);
  uint64_t r = cs_prng_next(&w->prng_storage);
  for (int i = 0; i < 6; i++) id->bytes[i] = (uint8_t)(ms >> (40 - 8 * i));
  id->bytes[6] = (uint8_t)(0x70 | (r & 0x0f));
  id->bytes[7] = (uint8_t)(r >> 8);
  id->bytes[8] = (uint8_t)(0x80 | ((r >> 16) & 0x3f));
  for (int i = 9; i < 12; i++) id->bytes[i] = (uint8_t)(r >> (8 * (i - 6)));
  for (int i = 0; i < 4; i++) id->bytes[12 + i] = (uint8_t)(index >> (24 - 8 * i));
}

/* A new truth pack: id, key, sizes, checksum; poison by the swarm's dice. */
static uint32_t pack_create(sim_world *w, sim_proc *p, uint32_t records, uint64_t bytes, uint64_t index_bytes) {
  if (w->pack_count >= SIM_PACKS_MAX) sim_bail(w, SIM_EXIT_MODEL, "model bound: packs");
  uint32_t index = w->pack_count++;
  sim_pack *pack = &w->packs[index];
  memset(pack, 0, sizeof *pack);
  pack->proc = p->index;
  pack_make_id(w, index, &pack->ref.pack_id);
  char id_text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&pack->ref.pack_id, id_text);
  char key[CS_KEY_MAX];
  /* Under a path-order store, sessions "s" and "s-N": bytewise "s-N/" sorts first, path order "s". */
  char session[16];
  if (!w->store_list_path_order) snprintf(session, sizeof session, "s%u", p->index);
  else if (p->index == 0) snprintf(session, sizeof session, "s");
  else snprintf(session, sizeof session, "s-%u", p->index);
  int n = snprintf(key, sizeof key, "%sv1/tenant=t/date=2026-11-30/session=%s/rank=0/%s.dmi-pack",
                   w->prefix, session, id_text);
  if (w->long_keys) {
    /* The rank padded with leading zeros to the longest key there is (the keys of one process sort as before). */
    int pad = (int)CS_KEY_MAX - 1 - n;
    n = snprintf(key, sizeof key, "%sv1/tenant=t/date=2026-11-30/session=%s/rank=%0*d/%s.dmi-pack", w->prefix,
                 session, pad + 1, 0, id_text);
  }
  cs_pack_ref_set_key(&pack->ref, key, (size_t)n);
  pack->ref.created_at_ns = w->now_ns;
  pack->ref.record_count = records;
  pack->ref.size_bytes = bytes + 64u * records + 256u;
  pack->ref.index_bytes = index_bytes;
  for (int i = 0; i < 32; i += 8) {
    uint64_t r = cs_prng_next(&w->prng_storage);
    memcpy(pack->ref.sha256 + i, &r, 8);
  }
  const sim_profile *pr = &w->profile;
  if (!w->liveness && pr->on[F_POISON_LARGE] && chance(&w->prng_faults, pr->rate_permille[F_POISON_LARGE] / 8)) {
    pack->poison_large = true;
    pack->ref.index_bytes = w->base_svc.index_batch_bytes_max + 1;
  } else if (!w->liveness && pr->on[F_POISON_INVALID] &&
             chance(&w->prng_faults, pr->rate_permille[F_POISON_INVALID] / 8)) {
    pack->poison_invalid = true;
  }
  return index;
}

/* When every seal slot of the sink is busy, its linger seals wait: the checker excuses them. */
static void seals_full_note(sim_world *w, sim_proc *p) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++) n += p->pending[i].used && p->pending[i].sealing;
  if (n >= CS_SINK_SEALS_MAX) p->seals_full_local_ns = sim_local_now(w, p);
}

/*
 * The service's pack table is full: more packs in the spool than it holds (a
 * bound at its minimum, or seals of a replaced sink landing late). As the
 * runtime does with the packs beyond the table at start (its backlog,
 * rs_driver.c), the pack is reported again, as recovered, each time a pack
 * leaves the spool.
 */
/* Full means full (service.h): a SEALED refused as full finds every own slot of the table holding a pack. */
static void check_full_means_full(sim_world *w, const sim_proc *p) {
  cs_snapshot snap;
  cs_service_snapshot(p->svc, 0, &snap);
  if (snap.pending_spool < p->svc_cfg.spool_packs_max)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's service refused a SEALED as full with %u of %u table slots in use", p->index,
             snap.pending_spool, p->svc_cfg.spool_packs_max);
}

static void sealed_refused(sim_world *w, sim_proc *p, uint32_t file) {
  w->counters.sealed_refused++;
  check_full_means_full(w, p);
  p->files[file].backlog = true;
  p->files[file].was_backlog = true;
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f p%u  SEALED refused (table full): pack %u waits in the backlog\n",
            (double)w->now_ns / 1e9, p->index, p->files[file].pack);
}

/*
 * Reports ready spool file `file` to p's service again, as recovered (listed,
 * not sealed by this service): at the service's start, for the first file of
 * the backlog when a pack left the spool (`from_backlog`), or for a file whose
 * removal failed after the service that asked was replaced. The ledger
 * records what the service was told; a full table sends a new report to the
 * backlog, and a backlog file stays there. CLOSED (a stopped service) is an
 * answer; any other refusal ends the run as a crash.
 */
static void tell_recovered(sim_world *w, sim_proc *p, uint32_t file, bool from_backlog) {
  sim_file *f = &p->files[file];
  sim_pack *pack = &w->packs[f->pack];
  if (!from_backlog) {
    pack->sealed_order = ++w->sealed_order;
    sim_cov_recovered(w, f->pack);
  }
  cs_event ev = {.kind = CS_EV_SEALED, .pack = &pack->ref, .recovered = true, .backlog = from_backlog};
  int rc = svc_event(w, p, sim_local_now(w, p), &ev);
  sim_ledger_told(w, p, file, rc, true);
  if (rc == CS_E_OK) {
    f->backlog = false;
  } else if (rc == CS_E_FULL) {
    if (from_backlog) check_full_means_full(w, p); /* it stays in the backlog */
    else sealed_refused(w, p, file);
  } else if (rc != CS_E_CLOSED) {
    sim_bail(w, SIM_EXIT_CRASH, "%s SEALED refused: %s", from_backlog ? "backlog" : "recovered", cs_strerror(rc));
  }
}

/* A pack left the spool: the first one of the backlog is reported again. */
static void backlog_next(sim_world *w, sim_proc *p) {
  for (uint32_t i = 0; i < p->files_end; i++) {
    sim_file *f = &p->files[i];
    if (f->state != FILE_READY || !f->backlog || f->removing) continue;
    tell_recovered(w, p, i, true);
    return;
  }
}

/*
 * Hand-offs (capstore serve): a pack another capture process sealed and linked
 * into this spool reaches the service as a SEALED with recovered set, at any
 * time (src/runtime/rs_handoff.c, rs_driver.c deliver_sealed). The world
 * models it by reporting some of a process's own seals that way: the service
 * cannot tell the two apart, and must HEAD before any PUT of it.
 */
static bool seal_arrives(sim_world *w) {
  return w->arrival_permille != 0 && chance(&w->prng_arrivals, w->arrival_permille);
}

static void arrival_taken(sim_world *w, const sim_proc *p, uint32_t pack, int rc) {
  if (rc != CS_E_OK) return; /* full: it waits in the backlog; closed: the next start recovers it */
  w->counters.arrivals++;
  sim_cov_mark(w, SIM_COV_SIT_ARRIVAL);
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f p%u  SEALED as an arrival (recovered): pack %u\n", (double)w->now_ns / 1e9, p->index,
            pack);
}

/* A seal of this pack is still in flight (a sink's, perhaps one this process replaced). */
static bool seal_in_flight(const sim_world *w, const sim_proc *p, uint32_t pack) {
  const sim_pack *sp = &w->packs[pack];
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
    if (p->pending[i].used && p->pending[i].sealing && p->pending[i].capture_first == sp->capture_first &&
        p->pending[i].records == sp->ref.record_count)
      return true;
  return false;
}

/* The service answers ev (NULL: no event) CS_E_INVALID_ARGUMENT and takes nothing (service.h). */
static void bad_event_check(sim_world *w, sim_proc *p, const cs_event *ev, const char *what, bool closed_ok) {
  uint64_t local = sim_local_now(w, p);
  cs_snapshot before, after;
  cs_service_snapshot(p->svc, local, &before);
  int rc = cs_service_on_event(p->svc, local, ev);
  cs_service_snapshot(p->svc, local, &after);
  if ((rc != CS_E_INVALID_ARGUMENT && !(closed_ok && rc == CS_E_CLOSED)) || before.spooled != after.spooled ||
      before.pending_spool != after.pending_spool || before.pending_index != after.pending_index ||
      before.requests != after.requests || before.inflight != after.inflight || before.backlog != after.backlog ||
      before.set_aside != after.set_aside || before.handed_off != after.handed_off)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's service took %s (answered %d; spooled %" PRIu64 " -> %" PRIu64
             ", requests %" PRIu64 " -> %" PRIu64 ", in flight %u -> %u), not refused CS_E_INVALID_ARGUMENT with"
             " nothing taken", p->index, what, rc, before.spooled, after.spooled, before.requests, after.requests,
             before.inflight, after.inflight);
}

/*
 * A malformed event is refused CS_E_INVALID_ARGUMENT and taken nowhere
 * (service.h): right after every 16th SEALED of a process, its service is
 * handed one of seven in turn, at the SEALED's own instant (so the flushes
 * it answers were answered by the SEALED's call already: the run goes on as
 * without it):
 * a SEALED with an empty key, with a key of CS_KEY_MAX bytes, with no pack, a
 * completion of no request (then of each id from 1 to 64 the request table
 * does not hold), an event of no kind, no event at all, and the
 * completion of a request in flight with an outcome past the last (the
 * request stays in flight: its real answer comes later). A stopping service
 * answers a SEALED CS_E_CLOSED first. Nothing it counts may move.
 */
static void bad_event_refused(sim_world *w, sim_proc *p, const cs_pack_ref *ref) {
  cs_pack_ref bad = *ref;
  cs_event ev = {.kind = CS_EV_SEALED, .pack = &bad};
  static const char *const what[] = {"a SEALED with an empty key", "a SEALED with a key of CS_KEY_MAX bytes",
                                     "a SEALED with no pack",      "a completion of no request",
                                     "an event of no kind",        "no event",
                                     "a completion with an outcome past the last"};
  uint32_t k = p->bad_event_probes / 16 % 7;
  if (k == 0) bad.key_len = 0;
  if (k == 1) bad.key_len = CS_KEY_MAX;
  if (k == 2) ev.pack = NULL;
  if (k == 3) {
    /* An id never issued, and every small id not in flight (answered long ago, or not issued yet; the service's own
       table says which are in flight: spool and lease work are not the world's network requests). */
    ev = (cs_event){.kind = CS_EV_DONE, .id = UINT64_MAX, .outcome = CS_OUT_OK};
    bad_event_check(w, p, &ev, what[k], false);
    for (uint64_t id = 1; id <= 64; id++) {
      if (sim_svc_request_live(p->svc, id)) continue;
      ev.id = id;
      bad_event_check(w, p, &ev, "a completion of a request not in flight", false);
    }
    sim_cov_mark(w, SIM_COV_SIT_BAD_EVENT);
    return;
  }
  if (k == 4) ev = (cs_event){.kind = (cs_event_kind)(CS_EV_BACKLOG + 1)};
  if (k == 6) {
    ev = (cs_event){.kind = CS_EV_DONE, .id = UINT64_MAX, .outcome = CS_OUT_COUNT_};
    for (uint32_t i = 0; i < SIM_REQS_MAX; i++) {
      const sim_req *req = &w->reqs[i];
      if (req->used && !req->delivered && req->proc == p->index && req->incarnation == p->incarnation &&
          req->svc_gen == p->svc_gen) {
        ev.id = req->action_id;
        break;
      }
    }
  }
  bad_event_check(w, p, k == 5 ? NULL : &ev, what[k], k <= 2 && p->svc_stop_sent);
  sim_cov_mark(w, SIM_COV_SIT_BAD_EVENT);
}

/*
 * A malformed seal completion changes nothing and is refused
 * CS_E_INVALID_ARGUMENT (sink.h): every eighth seal's completion is preceded
 * by one of three in turn: a positive err, a failure that names a size, and
 * the completion of a seal the sink never began.
 */
static void sink_bad_sealed(sim_world *w, sim_proc *p, uint64_t seq, uint64_t size_bytes) {
  static const char *const what[] = {"a positive err", "a failure with a size", "a seal it never began"};
  uint32_t k = (uint32_t)(seq / 8 % 3);
  cs_sink before;
  memcpy(&before, &p->sink, sizeof before); /* padding included */
  int rc = k == 0   ? cs_sink_on_sealed(&p->sink, sim_local_now(w, p), seq, size_bytes, 1)
           : k == 1 ? cs_sink_on_sealed(&p->sink, sim_local_now(w, p), seq, size_bytes + 1, CS_E_IO)
                    : cs_sink_on_sealed(&p->sink, sim_local_now(w, p), seq + (UINT64_C(1) << 40), 0, CS_E_OK);
  if (rc != CS_E_INVALID_ARGUMENT || memcmp(&before, &p->sink, sizeof before) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink answered %d (%s) to a seal completion with %s%s", p->index, rc,
             cs_strerror(rc), what[k], memcmp(&before, &p->sink, sizeof before) != 0 ? ", and changed" : "");
}

/*
 * Tells the sink a seal ended; its answer as cs_sink_on_sealed's. The sink's
 * stats count every seal it took, sealed or failed (sink.h), and nothing else.
 */
static int sink_sealed(sim_world *w, sim_proc *p, uint64_t seq, uint64_t size_bytes, int err) {
  if (seq != 0 && (seq & 7) == 5) sink_bad_sealed(w, p, seq, size_bytes);
  int rc = cs_sink_on_sealed(&p->sink, sim_local_now(w, p), seq, size_bytes, err);
  if (rc == CS_E_OK) {
    p->sink_sealed_ok += err == CS_E_OK;
    p->sink_seal_errors += err != CS_E_OK;
  }
  cs_sink_stats st;
  cs_sink_stats_get(&p->sink, &st);
  if (st.packs_sealed != p->sink_sealed_ok || st.seal_errors != p->sink_seal_errors)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink counts %" PRIu64 " packs sealed and %" PRIu64 " seal errors; it took %"
             PRIu64 " and %" PRIu64, p->index, st.packs_sealed, st.seal_errors, p->sink_sealed_ok, p->sink_seal_errors);
  return rc;
}

static void seal_ack(sim_world *w, sim_proc *p, uint32_t file, int err) {
  seals_full_note(w, p);
  sim_file *f = &p->files[file];
  sim_pack *pack = &w->packs[f->pack];
  uint64_t seq = 0;
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++) {
    sim_pending_pack *pp = &p->pending[i];
    if (pp->used && pp->capture_first == pack->capture_first && pp->records == pack->ref.record_count) {
      seq = pp->seq;
      pp->used = false;
    }
  }
  if (err != CS_E_OK) {
    f->state = FILE_FREE;
    if (seq != 0) (void)sink_sealed(w, p, seq, 0, err);
    return;
  }
  pack->durable = true;
  w->counters.durable_records += pack->ref.record_count;
  /* A seal the old sink finished after a replace counts against the new sink's quota. */
  if (seq == 0 || sink_sealed(w, p, seq, pack->ref.size_bytes, CS_E_OK) != CS_E_OK)
    cs_sink_on_recovered(&p->sink, pack->ref.size_bytes);
  /*
   * A pack a new service already recovered (its ready name was listed while
   * the old sink's seal was still in flight) and handed off is being removed:
   * its seal's end is no news to anyone (a real spool lists a ready file once;
   * reporting it again would upload it again, seed 40000921).
   */
  if (f->removing) return;
  /* Refused at the start already (a full table): it waits in the backlog and is reported from there, once. */
  if (f->backlog) return;
  pack->sealed_order = ++w->sealed_order;
  /*
   * Reported anew: the service may upload it again (checker). Not when this
   * service already took it (listed at its start while this seal was in
   * flight, its pending entry swept): a second SEALED is a no-op that keeps
   * the verification it had (seed 7002596).
   */
  if (f->told_gen != p->svc_gen) pack->verified_gen[p->index] = 0;
  bool arrival = seal_arrives(w);
  cs_event ev = {.kind = CS_EV_SEALED, .pack = &pack->ref, .recovered = arrival};
  int rc = svc_event(w, p, sim_local_now(w, p), &ev);
  if (++p->bad_event_probes % 16 == 0) bad_event_refused(w, p, &pack->ref);
  sim_ledger_told(w, p, file, rc, arrival);
  sim_cov_sealed(w, f->pack, seq, rc);
  if (arrival) arrival_taken(w, p, f->pack, rc);
  /* A seal that outlived its service stays ready in the spool; the next start recovers it. */
  if (rc == CS_E_FULL) sealed_refused(w, p, file);
  else if (rc != CS_E_OK && rc != CS_E_CLOSED)
    sim_bail(w, SIM_EXIT_CRASH, "proc %u: SEALED refused: %s", p->index, cs_strerror(rc));
}

/* Seal steps: 1 written and fsynced, 2 linked to the ready name, 3 directory fsynced. */
static void seal_step(sim_world *w, sim_proc *p, uint32_t file, uint64_t stage) {
  sim_file *f = &p->files[file];
  if (f->state == FILE_FREE) return;
  const sim_profile *pr = &w->profile;
  if (stage == 1) {
    if (!w->liveness && pr->on[F_DISK_FULL] && chance(&w->prng_storage, pr->rate_permille[F_DISK_FULL] / 8)) {
      sim_cov_fault(w, F_DISK_FULL);
      seal_ack(w, p, file, CS_E_IO); /* ENOSPC on write */
      return;
    }
    f->synced = true;
    sim_schedule(w, w->now_ns + disk_delay(w, 100000, 1000000), EV_SEAL_STEP, p->index, file, 2);
    return;
  }
  if (stage == 2) {
    f->state = FILE_READY;
    f->ready_local_ns = sim_local_now(w, p);
    sim_schedule(w, w->now_ns + disk_delay(w, 100000, 2000000), EV_SEAL_STEP, p->index, file, 3);
    return;
  }
  f->linked = true;
  seal_ack(w, p, file, CS_E_OK);
}

static void exec_sink_seal(sim_world *w, sim_proc *p, const cs_sink_action *act) {
  sim_pending_pack *pp = NULL;
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
    if (p->pending[i].used && p->pending[i].seq == act->pack_seq && act->pack_seq != 0) pp = &p->pending[i];
  if (pp == NULL || pp->records == 0) {
    (void)sink_sealed(w, p, act->pack_seq, 0, CS_E_OK);
    if (pp != NULL) pp->used = false;
    return;
  }
  if (act->record_count != pp->records)
    sim_bail(w, SIM_EXIT_SAFETY, "proc %u: sink sealed pack %" PRIu64 " with %u records, %u were admitted",
             p->index, act->pack_seq, act->record_count, pp->records);
  sim_check_sink_seal(w, p, pp);
  pp->sealing = true;
  seals_full_note(w, p);
  uint32_t pack = pack_create(w, p, pp->records, pp->bytes, 256u + 96u * pp->records);
  w->packs[pack].capture_first = pp->capture_first;
  uint32_t file = file_alloc(w, p);
  p->files[file] = (sim_file){.state = FILE_OPEN, .pack = pack};
  uint64_t write_ns = pp->bytes * 5 + disk_delay(w, 200000, 3000000);
  sim_schedule(w, w->now_ns + write_ns, EV_SEAL_STEP, p->index, file, 1);
}

/* A plan's `seal` step: packs appear sealed and durable at once. */
void sim_seal_direct(sim_world *w, sim_proc *p, const cs_plan_step *step) {
  for (uint32_t i = 0; i < step->count; i++) {
    uint32_t pack = pack_create(w, p, step->records, step->size_bytes, step->index_bytes);
    sim_pack *sp = &w->packs[pack];
    sp->capture_first = p->next_capture_id;
    p->next_capture_id += step->records;
    w->counters.admitted_records += step->records;
    sp->poison_large = step->index_bytes > w->base_svc.index_batch_bytes_max;
    uint32_t file = file_alloc(w, p);
    p->files[file] = (sim_file){.state = FILE_READY, .synced = true, .linked = true, .pack = pack,
                              .ready_local_ns = sim_local_now(w, p)};
    sp->durable = true;
    w->counters.durable_records += step->records;
    if (!p->alive || p->svc == NULL) continue;
    cs_sink_on_recovered(&p->sink, sp->ref.size_bytes);
    sp->sealed_order = ++w->sealed_order;
    bool arrival = seal_arrives(w);
    cs_event ev = {.kind = CS_EV_SEALED, .pack = &sp->ref, .recovered = arrival};
    int rc = svc_event(w, p, sim_local_now(w, p), &ev);
    sim_ledger_told(w, p, file, rc, arrival);
    sim_cov_sealed(w, pack, 1, rc);
    if (arrival) arrival_taken(w, p, pack, rc);
    if (rc == CS_E_FULL) sealed_refused(w, p, file); /* a full table: the pack waits in the backlog */
    else if (rc != CS_E_OK) sim_bail(w, SIM_EXIT_CRASH, "plan seal refused: %s", cs_strerror(rc));
  }
  sim_proc_pump(w, p);
}


/* ---- service actions ------------------------------------------------------ */

static void proc_pause(sim_world *w, sim_proc *p, uint64_t for_ns);

static void send_request(sim_world *w, sim_proc *p, const cs_action *act) {
  uint32_t index;
  sim_req *req = req_alloc(w, &index);
  req->proc = p->index;
  req->incarnation = p->incarnation;
  req->svc_gen = p->svc_gen;
  req->action_id = act->id;
  req->op = act->op;
  req->to_catalog = act->op >= CS_OP_CAT_HEAD && act->op <= CS_OP_CAT_REJECT;
  req->lease_id = act->lease_id;
  req->replica = sim_replica_of(w, p);
  req->term = act->term;
  req->version = act->version;
  req->count = act->count;
  req->head_only = act->head_only;
  req->sent_ns = w->now_ns;
  if (act->pack != NULL) req->ref = *act->pack;
  if (act->token != NULL) snprintf(req->token, sizeof req->token, "%s", act->token);
  if (act->op == CS_OP_CAT_INDEX || act->op == CS_OP_CAT_COMMITTED || act->op == CS_OP_CAT_REJECT) {
    if (act->count > SIM_BATCH_MAX) sim_bail(w, SIM_EXIT_CRASH, "batch of %u exceeds the model", act->count);
    for (uint32_t i = 0; i < act->count; i++) {
      const cs_uuid *id = act->op == CS_OP_CAT_INDEX ? &act->packs[i]->pack_id : &act->ids[i];
      req->packs[i] = sim_truth_of(w, id);
    }
  }
  sim_check_send(w, p, act, req);
  net_send(w, p, index);
  bool fenced = act->op == CS_OP_CAT_INDEX || act->op == CS_OP_CAT_PUBLISH || act->op == CS_OP_CAT_REJECT;
  if (fenced && p->pause_on_write_ns != 0) {
    /* A pause between deciding to write and the bytes leaving: the write arrives late. */
    uint64_t d = p->pause_on_write_ns;
    p->pause_on_write_ns = 0;
    sim_cov_mark(w, SIM_COV_SIT_PAUSE_AFTER_WRITE);
    proc_pause(w, p, d);
  }
}

static void spool_op(sim_world *w, sim_proc *p, const cs_action *act) {
  uint32_t pack = sim_truth_of(w, &act->pack->pack_id);
  if (pack == SIM_NONE) sim_bail(w, SIM_EXIT_SAFETY, "proc %u: spool op on an unknown pack", p->index);
  if (act->op == CS_OP_SPOOL_REMOVE && p->crash_point == CS_PLAN_CRASH_BEFORE_REMOVE) {
    p->crash_point = -1;
    sim_proc_crash(w, p);
    return;
  }
  if (act->op == CS_OP_SPOOL_REMOVE) sim_check_removal(w, p, pack);
  /* service.h: a SPOOL_QUARANTINE says why (the spool keeps the reason beside the pack). */
  if (act->op == CS_OP_SPOOL_QUARANTINE && (act->reason == NULL || act->reason[0] == '\0'))
    sim_bail(w, SIM_EXIT_SAFETY, "proc %u: pack %s quarantined with no reason", p->index, act->pack->key);
  if (act->op == CS_OP_SPOOL_QUARANTINE && !sim_pack_may_set_aside_now(w, pack))
    sim_bail(w, SIM_EXIT_SAFETY, "proc %u: healthy pack %s set aside (%s)", p->index, act->pack->key,
             act->reason != NULL ? act->reason : "");
  uint32_t file = file_of_pack(p, pack);
  if (file != SIM_NONE) p->files[file].removing = true;
  /* disk_full: a removal or quarantine may fail with an I/O error (the runtime answers it server_error). */
  const sim_profile *pr = &w->profile;
  bool fails = file != SIM_NONE && !w->liveness && pr->on[F_DISK_FULL] &&
               chance(&w->prng_storage, pr->rate_permille[F_DISK_FULL] / 4);
  sim_schedule(w, w->now_ns + disk_delay(w, 50000, 500000), EV_SPOOL_DONE, p->index, act->id,
               pack | (uint64_t)(act->op == CS_OP_SPOOL_QUARANTINE) << 32 | (uint64_t)fails << 33 |
                   (uint64_t)p->svc_gen << 34);
}

/*
 * A capture process that crashed after its hand-off and before removing its
 * private link: the daemon adopts its private spool and links the pack, which
 * was shipped and removed, into the spool again (rs_handoff.c). Drawn at the
 * removal; the link comes 10 ms to 5 s later (the daemon's next scan). b
 * names the service that asked for the removal (0: one already abandoned).
 */
static void rearrival_draw(sim_world *w, const sim_proc *p, uint32_t pack, bool current) {
  if (w->rearrival_permille == 0 || w->liveness || !chance(&w->prng_arrivals, w->rearrival_permille)) return;
  uint64_t delay = rand_range(&w->prng_arrivals, 10 * CS_MS_NS, 5 * CS_SEC_NS);
  sim_schedule(w, w->now_ns + delay, EV_REARRIVE, p->index, pack, current ? p->svc_gen : 0);
}

/*
 * The same bytes under the same ready name are in the spool again, and
 * arrive as recovered: the service must HEAD first, find them, and hand the
 * pack off again (for a publisher: the catalog holds it already). A service
 * not started yet finds the file when it lists the spool; one stopping
 * answers CLOSED, and the next start recovers it. The sink counts the file
 * against its quota, as the capture process's private link did.
 */
static void rearrive(sim_world *w, sim_proc *p, uint32_t pack, uint64_t gen) {
  sim_pack *sp = &w->packs[pack];
  if (!sp->removed || sp->proc != p->index || file_of_pack(p, pack) != SIM_NONE) return;
  uint32_t file = file_alloc(w, p);
  p->files[file] = (sim_file){.state = FILE_READY, .synced = true, .linked = true, .pack = pack,
                              .ready_local_ns = sim_local_now(w, p)};
  sp->removed = false;
  sp->verified_gen[p->index] = 0; /* reported anew: the upload is verified again before it is indexed */
  if (p->sink_open) cs_sink_on_recovered(&p->sink, sp->ref.size_bytes);
  w->counters.rearrivals++;
  sim_cov_mark(w, SIM_COV_SIT_REARRIVAL);
  if (gen != 0 && gen == p->svc_gen) sim_cov_mark(w, SIM_COV_SIT_REARRIVAL_SAME_SERVICE);
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f p%u  REARRIVE pack %u (shipped by %s service)\n", (double)w->now_ns / 1e9, p->index,
            pack, gen != 0 && gen == p->svc_gen ? "this" : "an earlier");
  if (p->svc != NULL && p->svc_started) tell_recovered(w, p, file, false);
}

static void spool_done(sim_world *w, sim_proc *p, uint64_t action_id, uint64_t b) {
  uint32_t pack = (uint32_t)b;
  bool quarantine = ((b >> 32) & 1) != 0;
  bool fails = ((b >> 33) & 1) != 0;
  bool current = (uint32_t)(b >> 34) == (p->svc_gen & 0x3fffffffu);
  uint32_t file = file_of_pack(p, pack);
  if (fails && file != SIM_NONE) {
    p->files[file].removing = false; /* the file stays where it was */
    if (!current) {
      /*
       * The service that asked is gone; the one running skipped this file at
       * its start (a removal was under way). The runtime's start listing runs
       * after the queued removal and so lists it: report it now, as recovered.
       */
      if (p->svc != NULL && p->alive && p->svc_started && !cs_service_stopped(p->svc) &&
          p->files[file].state == FILE_READY && !p->files[file].backlog && p->files[file].told_gen != p->svc_gen) {
        tell_recovered(w, p, file, false);
      }
      return;
    }
    sim_cov_fault(w, F_DISK_FULL);
    cs_event ev = {.kind = CS_EV_DONE, .id = action_id, .outcome = CS_OUT_SERVER_ERROR};
    int rc = svc_event(w, p, sim_local_now(w, p), &ev);
    if (rc != CS_E_OK) sim_bail(w, SIM_EXIT_CRASH, "spool completion refused: %s", cs_strerror(rc));
    sim_ledger_done(p, quarantine ? CS_OP_SPOOL_QUARANTINE : CS_OP_SPOOL_REMOVE, ev.outcome);
    sim_check_error_named(w, p, quarantine ? CS_OP_SPOOL_QUARANTINE : CS_OP_SPOOL_REMOVE, ev.outcome);
    return;
  }
  if (file != SIM_NONE) {
    p->files[file].removing = false;
    p->files[file].state = quarantine ? FILE_QUARANTINED : FILE_FREE;
    if (!quarantine) w->packs[pack].removed = true;
    if (p->sink_open) cs_sink_on_removed(&p->sink, w->packs[pack].ref.size_bytes);
    if (!quarantine) rearrival_draw(w, p, pack, current);
  }
  if (!current) return; /* the file operation happened; its service was abandoned */
  sim_cov_mark(w, file != SIM_NONE ? SIM_COV_OUT_SPOOL_OK : SIM_COV_OUT_SPOOL_NOT_FOUND);
  cs_event ev = {.kind = CS_EV_DONE, .id = action_id,
                 .outcome = file != SIM_NONE ? CS_OUT_OK : CS_OUT_NOT_FOUND};
  int rc = svc_event(w, p, sim_local_now(w, p), &ev);
  if (rc != CS_E_OK) sim_bail(w, SIM_EXIT_CRASH, "spool completion refused: %s", cs_strerror(rc));
  sim_ledger_done(p, quarantine ? CS_OP_SPOOL_QUARANTINE : CS_OP_SPOOL_REMOVE, ev.outcome);
  if (file != SIM_NONE) backlog_next(w, p);
}

static sim_flush_rec *flush_rec(sim_proc *p, uint64_t id) {
  for (uint32_t i = 0; i < SIM_FLUSHES_MAX; i++)
    if (p->flushes[i].used && p->flushes[i].id == id) return &p->flushes[i];
  return NULL;
}

static void on_flush_done(sim_world *w, sim_proc *p, const cs_action *act) {
  sim_check_flush_done(w, p, &act->flush);
  sim_flush_rec *rec = flush_rec(p, act->flush.flush_id);
  sim_cov_flush_done(w, p, rec, &act->flush);
  if (rec != NULL) rec->used = false;
  if ((p->step == CS_STEP_FLUSH_SERVICE || p->step == CS_STEP_DRAIN_SERVICE) &&
      p->step_flush_id == act->flush.flush_id) {
    uint64_t id = p->step_id;
    p->step = CS_STEP_NONE;
    cs_engine_on_step_done(&p->engine, sim_local_now(w, p), id, act->flush.drained ? CS_E_OK : CS_E_TIMEOUT);
  }
}

static void exec_service_action(sim_world *w, sim_proc *p, const cs_action *act) {
  hash_u64(w, (uint64_t)act->op << 48 | act->id);
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f p%u  %s id=%" PRIu64 " term=%" PRIu64 " v=%" PRIu64 " n=%u\n",
            (double)w->now_ns / 1e9, p->index, cs_op_name(act->op), act->id, act->term, act->version,
            act->count);
  sim_cov_action(w, p, act);
  if (cs_op_is_request(act->op)) sim_ledger_sent(p);
  switch (act->op) {
  case CS_OP_SPOOL_REMOVE:
  case CS_OP_SPOOL_QUARANTINE: spool_op(w, p, act); return;
  case CS_OP_FLUSH_DONE: on_flush_done(w, p, act); return;
  case CS_OP_STOPPED:
    if (p->step == CS_STEP_STOP_SERVICE) {
      uint64_t id = p->step_id;
      p->step = CS_STEP_NONE;
      cs_engine_on_step_done(&p->engine, sim_local_now(w, p), id, CS_E_OK);
    }
    return;
  default:
    if (!cs_op_is_request(act->op)) sim_bail(w, SIM_EXIT_CRASH, "unknown action %d", (int)act->op);
    send_request(w, p, act);
    return;
  }
}

/* A service flush; expect is a cs_plan_flush_expect for plan checks. */
static uint64_t service_flush(sim_world *w, sim_proc *p, uint64_t deadline_local, uint32_t expect) {
  sim_flush_rec *rec = NULL;
  for (uint32_t i = 0; i < SIM_FLUSHES_MAX && rec == NULL; i++)
    if (!p->flushes[i].used) rec = &p->flushes[i];
  if (rec == NULL) sim_bail(w, SIM_EXIT_MODEL, "model bound: flushes of proc %u", p->index);
  *rec = (sim_flush_rec){.used = true, .id = ++p->next_flush_id, .called_local_ns = sim_local_now(w, p),
                         .deadline_local_ns = deadline_local, .boundary_order = w->sealed_order,
                         .expect = expect, .svc_gen = p->svc_gen, .after_stop = p->svc_stop_sent};
  w->counters.flush_calls++;
  cs_snapshot snap;
  cs_service_snapshot(p->svc, 0, &snap);
  rec->set_aside_at_call = snap.set_aside;
  for (uint32_t i = 0; i < p->files_end; i++)
    rec->backlog_at_call = rec->backlog_at_call || (p->files[i].state == FILE_READY && p->files[i].backlog);
  cs_event ev = {.kind = CS_EV_FLUSH, .id = rec->id, .deadline_ns = deadline_local};
  int rc = svc_event(w, p, sim_local_now(w, p), &ev);
  if (rc == CS_E_FULL && rec->after_stop) { /* the answers of the stop wait to be polled: no room for one more */
    rec->used = false;
    return 0;
  }
  if (rc != CS_E_OK) sim_bail(w, SIM_EXIT_CRASH, "flush refused: %s", cs_strerror(rc));
  return rec->id;
}

/* ---- sink actions ----------------------------------------------------------- */

static void engine_step_done(sim_world *w, sim_proc *p, cs_engine_step step, int err) {
  if (p->step != step) return;
  uint64_t id = p->step_id;
  p->step = CS_STEP_NONE;
  /* engine.h: a step is on time only when completed strictly before its deadline. */
  if (step == CS_STEP_SEAL_SINK && (err != CS_E_OK || sim_local_now(w, p) >= p->step_deadline_ns)) p->seal_failed = true;
  /* The same completion twice, or a positive err, changes nothing (engine.h): every eighth step is told so. */
  if ((id & 7) == 3) {
    cs_engine before = p->engine;
    int bad = cs_engine_on_step_done(&p->engine, sim_local_now(w, p), id, 1);
    if (bad != CS_E_INVALID_ARGUMENT || memcmp(&before, &p->engine, sizeof before) != 0)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u's engine answered %s to a step completion with a positive err%s", p->index,
               cs_strerror(bad), memcmp(&before, &p->engine, sizeof before) != 0 ? ", and changed" : "");
  }
  cs_engine_on_step_done(&p->engine, sim_local_now(w, p), id, err);
}

/*
 * The sink's answer to a flush (FLUSHED) or a close (CLOSED), with the first
 * seal error not yet reported. One that comes after the engine gave up on
 * its step (the step's deadline passed and the sequence went on) has no
 * caller: its error is kept for the next flush or close of this sink, as the
 * runtime keeps a timed-out flush's error for the next caller
 * (src/runtime/worker.c, rt_take_flushed). Dropping it made a later flush
 * report success over records a failed seal had lost (seed 300013306).
 */
static void sink_answer(sim_world *w, sim_proc *p, cs_engine_step step, bool current, int err) {
  if (!current || p->step != step) {
    if (p->sink_err_kept == CS_E_OK) p->sink_err_kept = err;
    return;
  }
  if (err == CS_E_OK) err = p->sink_err_kept;
  p->sink_err_kept = CS_E_OK;
  engine_step_done(w, p, step, err);
}

static void exec_sink_action(sim_world *w, sim_proc *p, const cs_sink_action *act) {
  hash_u64(w, (uint64_t)act->op << 56 | act->pack_seq);
  sim_cov_sink_action(w, act);
  switch (act->op) {
  case CS_SINK_SEAL: exec_sink_seal(w, p, act); return;
  case CS_SINK_FLUSHED:
    if (p->sink_flush_waiting && act->flush_id == p->sink_flush_wait_id) p->sink_flush_waiting = false;
    sink_answer(w, p, CS_STEP_FLUSH_SINK, act->flush_id == p->step_id, act->err);
    return;
  case CS_SINK_CLOSED:
    p->sink_closed = true;
    sink_answer(w, p, CS_STEP_SEAL_SINK, true, act->err);
    return;
  }
  sim_bail(w, SIM_EXIT_CRASH, "unknown sink action %d", (int)act->op);
}

/* ---- engine steps ------------------------------------------------------------- */

static void stats_fold(sim_proc *p) {
  if (p->svc == NULL) return;
  cs_snapshot snap;
  cs_service_snapshot(p->svc, 0, &snap);
  p->cycles_total += snap.cycles;
  p->cycles_failed_total += snap.cycles_failed;
  p->indexed_total += snap.indexed;
  p->set_aside_total += snap.set_aside;
  p->splits_total += snap.batch_splits;
  p->mismatches_total += snap.upload_mismatches;
  p->skipped_total += snap.reconcile_skipped;
  p->head_errors_total += snap.reconcile_head_errors;
  if (snap.last_error[0] != '\0') memcpy(p->last_error, snap.last_error, sizeof p->last_error);
  p->svc = NULL;
}

static void service_start(sim_world *w, sim_proc *p) {
  /* An old service that did not stop in time is abandoned (its completions are dropped),
     but it must at least have been told to stop. */
  if (p->svc != NULL && !cs_service_stopped(p->svc) && p->svc_started && !p->svc_stop_sent)
    sim_bail(w, SIM_EXIT_SAFETY, "proc %u: a new service started while the old one was never stopped", p->index);
  sim_cov_service_start(w, p);
  stats_fold(p);
  p->svc_gen++;
  p->svc_stop_sent = false;
  for (int i = 0; i < 16; i += 8) {
    uint64_t r = cs_prng_next(&w->prng_cores);
    memcpy(p->lease_id.bytes + i, &r, 8);
  }
  char msg[128];
  int rc = cs_service_init(&p->svc, p->svc_mem, p->svc_mem_size, &p->svc_cfg, &p->lease_id,
                           cs_prng_next(&w->prng_cores), msg, sizeof msg);
  if (rc != CS_E_OK) sim_bail(w, SIM_EXIT_CRASH, "service init: %s", msg);
  p->svc_started = true;
  p->forbidden_heads = 0;
  sim_check_service_start(w, p);
  uint64_t local = sim_local_now(w, p);
  /* A service not yet started emits nothing (service.h): the driver polls it as soon as it exists. */
  cs_action early;
  if (cs_service_poll(p->svc, local, &early))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's service emitted %s before its START", p->index, cs_op_name(early.op));
  cs_event start = {.kind = CS_EV_START};
  svc_event(w, p, local, &start);
  for (uint32_t i = 0; i < p->files_end; i++) {
    p->files[i].backlog = false;
    /* The listing runs on the spool lane after the removals queued before it: those packs are gone. */
    if (p->files[i].state != FILE_READY || p->files[i].removing) continue;
    if (seal_in_flight(w, p, p->files[i].pack)) continue; /* its seal's end reports it (seal_ack), once */
    tell_recovered(w, p, i, false);
  }
}

/* Some sink's seal is still writing its file: a sink replaced or closed before its seals ended. */
static bool any_seal_in_flight(const sim_proc *p) {
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
    if (p->pending[i].used && p->pending[i].sealing) return true;
  return false;
}

static void sweep_open(sim_world *w, sim_proc *p) {
  if (p->sink_open && !p->sink_closed)
    sim_bail(w, SIM_EXIT_SAFETY, "proc %u: .open files swept while a sink writes", p->index);
  /* The .open file of a seal in flight would vanish under its writer, and the pack's records with it. */
  if (any_seal_in_flight(p))
    sim_bail(w, SIM_EXIT_SAFETY, "proc %u: .open files swept while an earlier sink's seal still writes one", p->index);
  sim_cov_sweep(w, p);
  for (uint32_t i = 0; i < p->files_end; i++)
    if (p->files[i].state == FILE_OPEN) p->files[i].state = FILE_FREE;
  memset(p->pending, 0, sizeof p->pending);
}

static void sink_open(sim_world *w, sim_proc *p) {
  /* A sink that was asked to seal but was late may still finish in the background. */
  if (p->sink_open && !p->sink_closed && !p->seal_asked)
    sim_bail(w, SIM_EXIT_SAFETY, "proc %u: a new sink opened before the old one was sealed", p->index);
  char msg[128];
  if (cs_sink_init(&p->sink, &p->sink_cfg, msg, sizeof msg) != CS_E_OK)
    sim_bail(w, SIM_EXIT_CRASH, "sink init: %s", msg);
  p->sink_flush_waiting = false;
  p->sink_sealed_ok = 0;
  p->sink_seal_errors = 0;
  /* The old sink's records that never reached a seal are gone with it (never durable);
     its seals in flight still finish and are matched by their captures. */
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
    if (p->pending[i].used && !p->pending[i].sealing) p->pending[i].used = false;
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
    if (p->pending[i].used) p->pending[i].seq = 0; /* old numbering: never matched by seq again */
  /*
   * Ready packs count against the new sink's quota. One whose seal is still
   * in flight counts again when the seal ends (seal_ack): the sink's count
   * errs high, never low, so its removal never finds it uncounted.
   */
  for (uint32_t i = 0; i < p->files_end; i++)
    if (p->files[i].state == FILE_READY) cs_sink_on_recovered(&p->sink, w->packs[p->files[i].pack].ref.size_bytes);
  p->sink_open = true;
  p->sink_closed = false;
  p->sink_err_kept = CS_E_OK; /* the old sink's unheard errors were its own (the checker holds a flush to its sink) */
  p->last_admit_seq = 0; /* a new sink numbers its packs afresh */
  p->sink_flush_seq = 0;
  p->seal_asked = false;
  p->capturing = p->workload && !w->liveness;
  p->capture_retry_first_local = 0;
  p->sink_refused = 0;
  p->sink_blocked = 0;
  if (p->capturing) sim_schedule(w, w->now_ns + w->capture_interval_ns, EV_CAPTURE, p->index, 0, 0);
}

/*
 * A full disk's draw for this process and service generation: a hash of the
 * seed, the process, its service generation and a salt per question, not a
 * PRNG stream, so that no other draw of a disk_full seed moved when these
 * faults came in.
 */
static bool disk_full_hit(const sim_world *w, const sim_proc *p, uint64_t salt) {
  uint64_t x = mix64(w->opts->seed ^ salt ^ ((uint64_t)p->index << 56) ^ p->svc_gen);
  return x % 1000 < w->profile.rate_permille[F_DISK_FULL] / 4;
}

/* Whether a full disk refuses this service generation's new sink. */
static bool open_refused(const sim_world *w, const sim_proc *p) {
  return disk_full_hit(w, p, UINT64_C(0x6f70656e5f73696e));
}

/*
 * Whether the process cannot make this generation's service (the runtime's
 * start refused: its memory not given); each refusal draws afresh.
 */
static bool start_refused(const sim_world *w, const sim_proc *p) {
  return !w->liveness && w->profile.on[F_DISK_FULL] && !(w->opts->without_mask & SIM_WITHOUT_OPEN_REFUSED) &&
         disk_full_hit(w, p, UINT64_C(0x73746172745f7366) ^ (uint64_t)p->starts_refused << 32);
}

static bool exec_step_now(sim_world *w, sim_proc *p, const cs_engine_action *act) {
  switch (act->step) {
  case CS_STEP_START_SERVICE:
    /*
     * A start refused made no service: the engine ends the open there, with
     * nothing to stop and no lease to release (engine.c), and reports it IDLE;
     * the process opens again later. Stopping a service that never started
     * would stop the one before it a second time, or nothing.
     */
    if (start_refused(w, p)) {
      sim_cov_fault(w, F_DISK_FULL);
      sim_cov_mark(w, SIM_COV_SIT_START_REFUSED);
      p->open_step_failed = true;
      p->start_refused = true;
      p->starts_refused++; /* the next start draws afresh; the stopped service before stays as it was */
      engine_step_done(w, p, CS_STEP_START_SERVICE, CS_E_NO_MEMORY);
      return false;
    }
    service_start(w, p);
    return true;
  case CS_STEP_SWEEP_OPEN: sweep_open(w, p); return true;
  case CS_STEP_OPEN_SINK:
    /*
     * A full disk can refuse the new sink (its lock file, a directory fsync):
     * the open fails, the engine stops the service it started and releases
     * the lease, and reports the failure IDLE; the process opens again later.
     */
    if (!w->liveness && w->profile.on[F_DISK_FULL] && !(w->opts->without_mask & SIM_WITHOUT_OPEN_REFUSED) &&
        open_refused(w, p)) {
      sim_cov_fault(w, F_DISK_FULL);
      p->open_step_failed = true;
      engine_step_done(w, p, CS_STEP_OPEN_SINK, CS_E_IO);
      return false;
    }
    sink_open(w, p);
    return true;
  case CS_STEP_STOP_CAPTURE: p->capturing = false; return true;
  case CS_STEP_FLUSH_SINK: {
    /* A sink that cannot take the flush (closed, or a flush of its own under way) answers with its error. */
    p->sink_flush_seq = p->last_admit_seq;
    int rc = p->sink_open ? cs_sink_flush(&p->sink, act->deadline_ns, act->id) : CS_E_CLOSED;
    if (rc != CS_E_OK && rc != CS_E_CLOSED && rc != CS_E_STATE)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink answered a flush with %d (%s), not one sink.h names", p->index, rc,
               cs_strerror(rc));
    if (rc == CS_E_OK && (act->id & 3) == 1) { /* a second flush while this one is under way: CS_E_STATE, nothing changed */
      cs_sink before;
      memcpy(&before, &p->sink, sizeof before);
      int again = cs_sink_flush(&p->sink, act->deadline_ns, act->id + 1);
      if (again != CS_E_STATE || memcmp(&before, &p->sink, sizeof before) != 0)
        sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink answered %d (%s) to a flush while its flush is under way, not "
                 "CS_E_STATE with nothing changed", p->index, again, cs_strerror(again));
    }
    if (rc == CS_E_OK) {
      /* sink.h: FLUSHED once the open pack and every seal in flight at the call complete (checked after every pump). */
      p->sink_flush_waiting = true;
      p->sink_flush_wait_id = act->id;
      p->sink_flush_wait_seq = 0;
      for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
        if (p->pending[i].used && p->pending[i].seq > p->sink_flush_wait_seq) p->sink_flush_wait_seq = p->pending[i].seq;
    }
    if (rc != CS_E_OK) engine_step_done(w, p, CS_STEP_FLUSH_SINK, rc == CS_E_CLOSED ? CS_E_OK : rc);
    return false;
  }
  case CS_STEP_SEAL_SINK:
    p->seal_asked = true;
    p->sink_flush_seq = p->last_admit_seq;
    if (!p->sink_open || p->sink_closed) return true;
    return cs_sink_close(&p->sink, sim_local_now(w, p)) != CS_E_OK;
  case CS_STEP_FLUSH_SERVICE:
  case CS_STEP_DRAIN_SERVICE:
    if (p->svc == NULL || cs_service_stopped(p->svc)) return true;
    p->step_flush_id = service_flush(w, p, act->deadline_ns, CS_PLAN_EXPECT_ANY);
    return false;
  case CS_STEP_STOP_SERVICE: {
    if (p->svc == NULL || cs_service_stopped(p->svc)) return true;
    cs_event ev = {.kind = CS_EV_STOP};
    p->svc_stop_sent = true;
    svc_event(w, p, sim_local_now(w, p), &ev);
    /* Every fourth stopped service is asked for one more flush: it answers CS_E_CLOSED (service.h). */
    if (p->svc_gen % 4 == 0) (void)service_flush(w, p, sim_local_now(w, p) + CS_SEC_NS, CS_PLAN_EXPECT_ANY);
    return false;
  }
  case CS_STEP_RELEASE_LEASE: {
    if (p->svc == NULL || p->kind == PROC_UPLOADER) return true;
    cs_event ev = {.kind = CS_EV_RELEASE};
    svc_event(w, p, sim_local_now(w, p), &ev);
    p->step_waits_release = true;
    return false;
  }
  default: break;
  }
  sim_bail(w, SIM_EXIT_CRASH, "unknown engine step %d", (int)act->step);
}

/*
 * A close that reports every step done released the lease (DESIGN.md 6.9):
 * with the catalog healthy, the closed service no longer holds the head term.
 * A successor would only wait out the TTL, so nothing else would notice.
 */
static void close_released_check(sim_world *w, const sim_proc *p, const cs_engine_action *act) {
  if (act->err != CS_E_OK || p->kind == PROC_UPLOADER || w->now_ns < w->catalog_unhealthy_until_ns) return;
  uint64_t term;
  if (sim_catalog_holder(w, sim_catalog_now(w), &term) == p->index && w->claim_count > 0 &&
      cs_uuid_equal(&w->claims[w->claim_count - 1].lease_id, &p->lease_id))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u closed (every step done) but still holds term %" PRIu64 " with the catalog healthy",
             p->index, term);
}

/*
 * engine.h: an open sweeps stale .open files (SWEEP_OPEN between
 * START_SERVICE and OPEN_SINK) unless a SEAL_SINK of this engine failed
 * before it: that sink may still be writing its .open files, so no later
 * open of this engine sweeps. Judged when OPEN_SINK is issued (every step
 * before it succeeded).
 */
static void check_open_sweep(sim_world *w, sim_proc *p, cs_engine_step step) {
  if (step == CS_STEP_START_SERVICE) p->swept_in_open = false;
  if (step == CS_STEP_SWEEP_OPEN) p->swept_in_open = true;
  if (step != CS_STEP_OPEN_SINK || p->swept_in_open != p->seal_failed) return;
  sim_bail(w, SIM_EXIT_SAFETY, p->seal_failed ? "p%u's engine swept .open files at an open after a SEAL_SINK of it"
           " failed (that sink may still write them)" : "p%u's engine opened a sink without sweeping stale .open files,"
           " though no SEAL_SINK of it failed", p->index);
}

static void exec_engine_action(sim_world *w, sim_proc *p, const cs_engine_action *act) {
  hash_u64(w, (uint64_t)act->step << 40 | act->id);
  if (w->opts->trace)
    fprintf(w->opts->out, "%12.6f p%u  engine %s err=%d\n", (double)w->now_ns / 1e9, p->index,
            cs_engine_step_name(act->step), act->err);
  /* The engine went on while its SEAL_SINK waited for our answer: that seal timed out. */
  if (p->step == CS_STEP_SEAL_SINK) p->seal_failed = true;
  sim_cov_engine_action(w, act);
  if (act->step == CS_STEP_REPORT) {
    sim_check_engine_report(w, p, act);
    if (act->opkind == CS_ENGINE_OP_CLOSE) close_released_check(w, p, act);
    if (act->opkind == CS_ENGINE_OP_CLOSE) w->counters.close_done++;
    if (act->opkind == CS_ENGINE_OP_CLOSE && p->reopen_wanted)
      sim_schedule(w, w->now_ns + (w->liveness ? CS_MS_NS : p->reopen_delay_ns), EV_REOPEN, p->index, 0, 0);
    if (act->opkind == CS_ENGINE_OP_REPLACE) w->counters.replace_done++;
    if (act->err != CS_E_OK) w->counters.engine_failures++;
    p->engine_op = CS_ENGINE_OP_NONE;
    /* A failed open leaves the engine IDLE: the process opens it again after a second. */
    if (p->engine.state == CS_ENGINE_IDLE && (act->opkind == CS_ENGINE_OP_OPEN || act->opkind == CS_ENGINE_OP_REPLACE)) {
      w->counters.open_failed++;
      p->reopen_wanted = true;
      sim_schedule(w, w->now_ns + (w->liveness ? CS_MS_NS : CS_SEC_NS), EV_REOPEN, p->index, 0, 0);
    }
    p->open_step_failed = false;
    p->start_refused = false;
    return;
  }
  if (p->start_refused && (act->step == CS_STEP_STOP_SERVICE || act->step == CS_STEP_RELEASE_LEASE))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's engine issued %s after its service's start was refused: nothing started",
             p->index, cs_engine_step_name(act->step));
  check_open_sweep(w, p, act->step);
  p->step = act->step;
  p->step_id = act->id;
  p->step_deadline_ns = act->deadline_ns;
  p->step_waits_release = false;
  if (exec_step_now(w, p, act)) engine_step_done(w, p, act->step, CS_E_OK);
}

static bool release_check(sim_world *w, sim_proc *p) {
  if (p->step != CS_STEP_RELEASE_LEASE || !p->step_waits_release || p->svc == NULL) return false;
  cs_snapshot snap;
  cs_service_snapshot(p->svc, 0, &snap);
  if (snap.lease_state != CS_LEASE_RELEASED) return false;
  uint64_t term;
  /* With the catalog healthy a release takes effect: we are no longer the live holder. */
  if (sim_catalog_holder(w, sim_catalog_now(w), &term) == p->index && w->now_ns >= w->catalog_unhealthy_until_ns &&
      w->claim_count > 0 && cs_uuid_equal(&w->claims[w->claim_count - 1].lease_id, &p->lease_id))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u released its lease but still holds term %" PRIu64 " with the catalog healthy",
             p->index, term);
  engine_step_done(w, p, CS_STEP_RELEASE_LEASE, CS_E_OK);
  return true;
}

/* ---- the pump: run a proc's cores until they have nothing more to say ---- */

/*
 * Notes a wake at t; false when a pending wake at or before t covers it
 * (*covered_by gets the earliest such): that wake pumps the process, which
 * asks for its next deadline again. Without it a deadline that comes back
 * after each short backoff (a lease timer an hour away) queued one wake per
 * cycle: seed 400042635 (1 ms backoff, an hour's lease) queued 65,000 until
 * the event heap overflowed; matching only the same time, with the soonest
 * note forgotten when all 8 were pending, still let a mid-range deadline
 * pile up (the review counted 5,989 copies; now the heap stays under 500).
 * Notes are added only below every pending one, so they fill only with 8
 * ever-earlier pending wakes; then the latest is forgotten (its wake stays
 * queued; forgotten, it can only be queued twice).
 */
static bool wake_note(sim_proc *p, uint64_t now_ns, uint64_t t, uint64_t *covered_by) {
  uint32_t free_slot = SIM_WAKES_MAX, latest = 0;
  uint64_t cover = 0;
  for (uint32_t i = 0; i < SIM_WAKES_MAX; i++) {
    /* A pending wake at or before t covers it: that wake pumps the process, which asks for t again. */
    if (p->wakes[i] > now_ns && p->wakes[i] <= t && (cover == 0 || p->wakes[i] < cover)) cover = p->wakes[i];
    /* Past times are free too: a wake deferred by a pause fired later than noted. */
    if (p->wakes[i] <= now_ns && free_slot == SIM_WAKES_MAX) free_slot = i;
    if (p->wakes[i] > p->wakes[latest]) latest = i;
  }
  if (cover != 0) {
    *covered_by = cover;
    return false;
  }
  p->wakes[free_slot < SIM_WAKES_MAX ? free_slot : latest] = t;
  return true;
}

static void wake_forget(sim_proc *p, uint64_t t) {
  for (uint32_t i = 0; i < SIM_WAKES_MAX; i++)
    if (p->wakes[i] == t) p->wakes[i] = 0;
}

static void schedule_wake(sim_world *w, sim_proc *p) {
  uint64_t local = sim_local_now(w, p);
  uint64_t at = cs_engine_next_deadline(&p->engine);
  uint64_t svc_at = p->svc != NULL ? cs_service_next_deadline(p->svc) : CS_NEVER;
  if (svc_at < at) at = svc_at;
  if (p->sink_open) {
    uint64_t d = cs_sink_next_deadline(&p->sink);
    if (d < at) at = d;
  }
  if (at == CS_NEVER) return;
  /*
   * One service deadline in four that wakes the process is probed a nanosecond early, once: with no event
   * since, nothing may be due then (the quiet check in sim_proc_pump), so a timer that fires when now is
   * one short of its time (a >= turned >= deadline - 1) fails the run. The probe moves no draw and
   * no core's behaviour: the pump at D - 1 finds nothing to do and wakes again at D. Its wake events are
   * hashed, so it changes the event count and the trace hash (not the --trace text).
   */
  if (at == svc_at && at > local + 1 && at != p->probed_deadline && (p->deadline_probes++ & 3) == 0) {
    p->probed_deadline = at;
    at--;
  }
  /* After a quiet pump nothing is due: a deadline at or before now makes a real driver spin. */
  p->spins = at <= local ? p->spins + 1 : 0;
  if (p->spins > 0)
    sim_bail(w, SIM_EXIT_LIVENESS, "p%u busy loop: next deadline %" PRIu64 " ns is not after now %" PRIu64
             " ns but nothing is due (engine %" PRIu64 ", service %" PRIu64 ", sink %" PRIu64 ")", p->index, at, local,
             cs_engine_next_deadline(&p->engine), p->svc != NULL ? cs_service_next_deadline(p->svc) : CS_NEVER,
             p->sink_open ? cs_sink_next_deadline(&p->sink) : CS_NEVER);
  uint64_t t = at <= local ? w->now_ns + CS_MS_NS : true_of_local(p, at);
  if (p->wake_at_ns > w->now_ns && p->wake_at_ns <= t) return; /* an earlier wake is pending */
  uint64_t cover = 0;
  if (!wake_note(p, w->now_ns, t, &cover)) { /* a pending wake at or before t will ask again */
    p->wake_at_ns = cover;
    return;
  }
  p->wake_at_ns = t;
  sim_schedule(w, t, EV_WAKE, p->index, 0, 0);
}

void sim_proc_pump(sim_world *w, sim_proc *p) {
  if (!p->alive || p->paused_until_ns > w->now_ns) return;
  /* Time has passed since the last pump: let the timers of sink and engine act. */
  cs_engine_tick(&p->engine, sim_local_now(w, p));
  if (p->sink_open) cs_sink_tick(&p->sink, sim_local_now(w, p));
  for (uint32_t turn = 0;; turn++) {
    if (turn > 100000) sim_bail(w, SIM_EXIT_CRASH, "proc %u: cores never go quiet", p->index);
    uint64_t local = sim_local_now(w, p);
    bool progress = false;
    cs_action act;
    while (p->svc != NULL && svc_poll(w, p, local, &act)) {
      /*
       * Work that falls due by time alone is announced by the deadline
       * (service.h): with no event since the service last went quiet and
       * its deadline still ahead, it has nothing to do.
       */
      if (p->svc_events == p->svc_events_quiet && p->svc == p->svc_quiet && local < p->svc_deadline_quiet)
        sim_bail(w, SIM_EXIT_SAFETY, "p%u's service sent %s at %.6f s with no event since it went quiet and its"
                 " deadline %" PRIu64 " ns ahead (a wake its deadline did not announce)", p->index,
                 cs_op_name(act.op), (double)local / 1e9, p->svc_deadline_quiet - local);
      exec_service_action(w, p, &act);
      progress = true;
      if (!p->alive) return;
    }
    cs_sink_action sa;
    while (p->sink_open && cs_sink_poll(&p->sink, local, &sa)) {
      exec_sink_action(w, p, &sa);
      progress = true;
    }
    cs_engine_action ea;
    while (cs_engine_poll(&p->engine, local, &ea)) {
      exec_engine_action(w, p, &ea);
      progress = true;
    }
    if (release_check(w, p)) progress = true;
    if (!progress) break;
  }
  /* sink.h: a flush is answered once the packs it waits for are sealed (or failed), not later. */
  if (p->sink_open && p->sink_flush_waiting) {
    bool owed = false;
    for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++)
      owed = owed || (p->pending[i].used && p->pending[i].seq != 0 && p->pending[i].seq <= p->sink_flush_wait_seq);
    if (!owed)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink has not answered flush id=%" PRIu64 " though every pack it waits for"
               " (up to pack %" PRIu64 ") is sealed", p->index, p->sink_flush_wait_id, p->sink_flush_wait_seq);
  }
  /* engine.h: a step issued with no time left fails at once, so no step in flight is past its deadline. */
  if (cs_engine_next_deadline(&p->engine) <= sim_local_now(w, p))
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's engine holds step %s past its deadline (%.6f s, now %.6f s): a step issued"
             " with no time left must fail at once", p->index, cs_engine_step_name(p->engine.step_inflight),
             (double)cs_engine_next_deadline(&p->engine) / 1e9, (double)sim_local_now(w, p) / 1e9);
  sim_check_step(w);
  sim_check_proc(w, p);
  sim_cov_observe(w, p);
  if (p->svc != NULL) {
    p->svc_quiet = p->svc;
    p->svc_events_quiet = p->svc_events;
    p->svc_deadline_quiet = cs_service_next_deadline(p->svc);
  }
  schedule_wake(w, p);
}

static void proc_wake(sim_world *w, sim_proc *p) { sim_proc_pump(w, p); }

/* ---- the capture workload --------------------------------------------------- */

static sim_pending_pack *pending_for(sim_world *w, sim_proc *p, uint64_t seq) {
  sim_pending_pack *free_slot = NULL;
  for (uint32_t i = 0; i < SIM_PENDING_PACKS; i++) {
    if (p->pending[i].used && p->pending[i].seq == seq && seq != 0) return &p->pending[i];
    if (!p->pending[i].used && free_slot == NULL) free_slot = &p->pending[i];
  }
  if (free_slot == NULL) sim_bail(w, SIM_EXIT_MODEL, "model bound: pending packs of proc %u", p->index);
  *free_slot = (sim_pending_pack){.used = true, .seq = seq, .capture_first = p->next_capture_id};
  return free_slot;
}

static void capture(sim_world *w, sim_proc *p) {
  if (!p->capturing || !p->sink_open || p->sink_closed) return;
  if (w->pack_count >= SIM_WORKLOAD_PACKS_MAX) {
    /* The world's tables bound a run, not the service: the workload ends here, and the run goes on without it. */
    p->capturing = false;
    w->counters.workload_budget_stops++;
    if (w->opts->trace)
      fprintf(w->opts->out, "%12.6f p%u  workload ends: %u packs made (the world holds %u)\n", (double)w->now_ns / 1e9,
              p->index, w->pack_count, SIM_PACKS_MAX);
    return;
  }
  uint64_t local = sim_local_now(w, p);
  uint64_t bytes = p->capture_retry_first_local != 0 ? p->capture_retry_bytes
                                                     : rand_range(&w->prng_workload, 256, 16384);
  /* big_footers: sizes near multiples of 4 KiB, so packs meet their byte bound exactly now and then. */
  if (w->big_footers && p->capture_retry_first_local == 0) bytes = 4096 * (1 + bytes % 8) + bytes % 3 - 1;
  uint64_t first = p->capture_retry_first_local != 0 ? p->capture_retry_first_local : local;
  uint64_t seq = 0;
  cs_sink_stats before;
  cs_sink_stats_get(&p->sink, &before);
  if (p->next_capture_id % 61 == 7) {
    /* A first try after now is refused as an invalid argument, counted nowhere (sink.h). */
    uint64_t none = 0;
    int bad = cs_sink_admit(&p->sink, local, bytes, local + 1, &none);
    cs_sink_stats after;
    cs_sink_stats_get(&p->sink, &after);
    if (bad != CS_E_INVALID_ARGUMENT || none != 0 || memcmp(&before, &after, sizeof before) != 0)
      sim_bail(w, SIM_EXIT_SAFETY, "p%u's sink answered %s to a record whose first try is after now%s", p->index,
               cs_strerror(bad), memcmp(&before, &after, sizeof before) != 0 ? ", and counted it" : "");
  }
  /* Each record's descriptor bytes, derived from its size so no draw moves (big_footers: up to 8 KiB). */
  uint64_t footer = w->big_footers ? 4096 * (1 + (bytes / 7) % 2) + (bytes / 5) % 3 - 1 : 64 + bytes % 449;
  int rc = cs_sink_admit_record(&p->sink, local, bytes, footer, first, &seq);
  sim_cov_admit(w, p, rc);
  if (rc == CS_E_OK) sim_check_admit_seal(w, p, seq, bytes, footer);
  uint64_t next = w->now_ns + rand_range(&w->prng_workload, 1, 2 * w->capture_interval_ns);
  if (rc == CS_E_WOULD_BLOCK) p->sink_blocked++;
  else if (rc != CS_E_OK) p->sink_refused++;
  sim_check_admit(w, p, rc, first, &before, bytes);
  if (rc == CS_E_WOULD_BLOCK) {
    p->capture_retry_first_local = first;
    p->capture_retry_bytes = bytes;
    next = w->now_ns + 20 * CS_MS_NS;
  } else {
    p->capture_retry_first_local = 0;
    if (rc == CS_E_OK) {
      sim_pending_pack *pp = pending_for(w, p, seq);
      if (pp->records == 0) pp->capture_first = p->next_capture_id, pp->first_local_ns = local;
      if (pp->capture_first + pp->records != p->next_capture_id)
        sim_bail(w, SIM_EXIT_CRASH, "proc %u: records of pack %" PRIu64 " interleave", p->index, seq);
      pp->records++;
      pp->bytes += bytes;
      pp->footer += footer;
      p->last_admit_seq = seq;
      sim_arrays_admitted(w, p, p->next_capture_id);
      p->next_capture_id++;
      w->counters.admitted_records++;
    } else {
      w->counters.refused_records++;
    }
  }
  sim_proc_pump(w, p);
  if (p->capturing) sim_schedule(w, next, EV_CAPTURE, p->index, 0, 0);
}

/* ---- crashes, restarts, pauses ----------------------------------------------- */

void sim_proc_crash(sim_world *w, sim_proc *p) {
  if (!p->alive) return;
  if (w->opts->trace) fprintf(w->opts->out, "%12.6f p%u  CRASH\n", (double)w->now_ns / 1e9, p->index);
  stats_fold(p);
  p->alive = false;
  p->incarnation++;
  p->svc_started = false;
  p->sink_open = false;
  p->sink_closed = false;
  p->capturing = false;
  p->step = CS_STEP_NONE;
  p->engine_op = CS_ENGINE_OP_NONE;
  p->wake_at_ns = 0;
  memset(p->wakes, 0, sizeof p->wakes);
  p->pause_on_write_ns = 0;
  p->reopen_wanted = false;
  memset(p->pending, 0, sizeof p->pending);
  memset(p->flushes, 0, sizeof p->flushes);
  w->counters.crashes++;
  sim_cov_crash(w);
  bool torn = w->profile.on[F_TORN_WRITES];
  for (uint32_t i = 0; i < p->files_end; i++) {
    sim_file *f = &p->files[i];
    /* A ready name whose directory entry was never fsynced may vanish. */
    if (f->state == FILE_READY && !f->linked && (torn || chance(&w->prng_storage, 500))) {
      f->state = FILE_OPEN;
      sim_cov_mark(w, torn ? SIM_COV_FAULT_TORN_WRITES : SIM_COV_SIT_READY_NAME_LOST);
    }
    f->removing = false; /* a removal under way dies with the process: the rename never happened */
  }
  uint64_t delay = w->liveness ? CS_MS_NS : w->restart_delay_ns / 2 + cs_prng_below(&w->prng_faults, w->restart_delay_ns);
  sim_schedule(w, w->now_ns + delay, EV_RESTART, p->index, 0, 0);
}

static void proc_open(sim_world *w, sim_proc *p) {
  char msg[128];
  p->seal_failed = false; /* a new engine */
  p->swept_in_open = false;
  if (cs_engine_init(&p->engine, &p->engine_cfg, msg, sizeof msg) != CS_E_OK)
    sim_bail(w, SIM_EXIT_CRASH, "engine init: %s", msg);
  p->engine_op = CS_ENGINE_OP_OPEN;
  if (cs_engine_open(&p->engine, sim_local_now(w, p)) != CS_E_OK) sim_bail(w, SIM_EXIT_CRASH, "engine open refused");
  sim_proc_pump(w, p);
}

static void proc_restart(sim_world *w, sim_proc *p) {
  if (p->alive || (w->liveness && p->kind == PROC_RIVAL)) return;
  p->alive = true;
  p->paused_until_ns = 0;
  if (w->replicas > 1) sim_cov_mark(w, SIM_COV_SIT_REPLICA_FAILOVER); /* it talks to the next replica now */
  proc_open(w, p);
}

/*
 * A new engine opens on the spool of a closed one, in the same process. The
 * spool's owner lock stays with a sink still sealing after a close that timed
 * out (the runtime's close waits for those seals), so the open waits for it,
 * and for the seals of any sink an earlier failed replace left sealing.
 */
static void proc_reopen(sim_world *w, sim_proc *p) {
  bool idle = p->engine.state == CS_ENGINE_IDLE && p->engine_op == CS_ENGINE_OP_NONE; /* a failed open */
  if (!p->alive || !p->reopen_wanted || (p->engine.state != CS_ENGINE_CLOSED && !idle)) return;
  if ((p->sink_open && !p->sink_closed) || any_seal_in_flight(p)) {
    sim_schedule(w, w->now_ns + CS_SEC_NS, EV_REOPEN, p->index, 0, 0);
    return;
  }
  p->reopen_wanted = false;
  w->counters.reopen_done++;
  if (w->opts->trace) fprintf(w->opts->out, "%12.6f p%u  REOPEN\n", (double)w->now_ns / 1e9, p->index);
  proc_open(w, p);
}

void sim_reopen_request(sim_world *w, sim_proc *p, uint64_t delay_ns) {
  if (!p->alive) return;
  p->reopen_wanted = true;
  p->reopen_delay_ns = delay_ns;
  /* A close still running schedules the reopen at its REPORT. */
  if (p->engine.state == CS_ENGINE_CLOSED && p->engine_op == CS_ENGINE_OP_NONE)
    sim_schedule(w, w->now_ns + delay_ns, EV_REOPEN, p->index, 0, 0);
}

static void proc_pause(sim_world *w, sim_proc *p, uint64_t for_ns) {
  if (!p->alive || p->paused_until_ns > w->now_ns) return;
  p->paused_until_ns = w->now_ns + for_ns;
  /* A pause ends with the safety phase at the latest: what it defers must not land hours into liveness. */
  if (p->paused_until_ns > w->safety_end_ns && w->safety_end_ns > w->now_ns) p->paused_until_ns = w->safety_end_ns;
  w->counters.pauses++;
  sim_schedule(w, p->paused_until_ns, EV_RESUME, p->index, 0, 0);
}

/*
 * engine.h: an operation the engine's state forbids is refused with
 * CS_E_STATE and changes nothing. Asked before every fifth operation: an
 * open of an engine that is not idle, or a close of one that is (no draw of
 * the PRNG, so the run goes on as it would have).
 */
static void engine_forbidden_check(sim_world *w, sim_proc *p, uint64_t local) {
  cs_engine before = p->engine;
  bool idle = p->engine.state == CS_ENGINE_IDLE;
  int rc = idle ? cs_engine_close(&p->engine, local, CS_SEC_NS) : cs_engine_open(&p->engine, local);
  if (rc != CS_E_STATE || memcmp(&before, &p->engine, sizeof before) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "p%u's engine in state %d took a %s its state forbids (answered %d, not CS_E_STATE with"
             " nothing changed)", p->index, (int)before.state, idle ? "close" : "open", rc);
}

void sim_engine_start(sim_world *w, sim_proc *p, cs_engine_opkind op, uint64_t arg_ns) {
  if (!p->alive) return;
  uint64_t local = sim_local_now(w, p);
  if (++p->engine_starts % 5 == 0) engine_forbidden_check(w, p, local);
  int rc = CS_E_STATE;
  if (op == CS_ENGINE_OP_CLOSE) rc = cs_engine_close(&p->engine, local, arg_ns);
  if (op == CS_ENGINE_OP_REPLACE) rc = cs_engine_replace(&p->engine, local, arg_ns);
  if (op == CS_ENGINE_OP_FLUSH) rc = cs_engine_flush(&p->engine, local, local + arg_ns);
  if (rc == CS_E_OK) {
    p->engine_op = op, p->engine_op_started_local = local, p->engine_op_budget_ns = arg_ns, p->engine_op_started_ns = w->now_ns;
    /* A seal in flight waits for the disk: three steps drawn slow before the close take up to 15 s. */
    p->engine_op_slow_disk = w->slow_disk_until_ns != 0 && w->slow_disk_until_ns + 15 * CS_SEC_NS >= w->now_ns;
  }
  if (rc == CS_E_OK && op == CS_ENGINE_OP_FLUSH) {
    /*
     * The records then in the sink: its open pack's and its seals' in flight
     * (the flush waits for both). Seals of a sink this one replaced (seq 0)
     * are not this sink's: a flush does not wait for them (docs/simulator.md).
     */
    p->engine_flush_mark = p->next_capture_id;
    p->engine_flush_low = p->next_capture_id;
    cs_sink_stats st;
    cs_sink_stats_get(&p->sink, &st);
    for (uint32_t i = 0; p->sink_open && (st.open_records > 0 || st.seals_inflight > 0) && i < SIM_PENDING_PACKS; i++)
      if (p->pending[i].used && p->pending[i].seq != 0 && p->pending[i].records > 0 &&
          p->pending[i].capture_first < p->engine_flush_low)
        p->engine_flush_low = p->pending[i].capture_first;
  }
  sim_proc_pump(w, p);
}

void sim_flush_call(sim_world *w, sim_proc *p, uint64_t deadline_rel_ns, uint32_t expect) {
  if (!p->alive || p->svc == NULL) return;
  service_flush(w, p, sim_local_now(w, p) + deadline_rel_ns, expect);
  sim_proc_pump(w, p);
}

void sim_window_add(sim_world *w, const sim_fault_window *win) {
  for (uint32_t i = 0; i < SIM_WINDOWS_MAX; i++) {
    if (w->windows[i].active && w->now_ns < w->windows[i].until_ns) continue;
    w->windows[i] = *win;
    w->windows[i].active = true;
    if (win->catalog && win->mode != CS_PLAN_MODE_TOO_LARGE) sim_mark_catalog_unhealthy(w, win->until_ns);
    if (win->catalog && win->mode == CS_PLAN_MODE_TOO_LARGE) w->catalog_insert_bytes_max = 1;
    sim_schedule(w, win->until_ns, EV_FAULT_END, SIM_NONE, i, 0);
    return;
  }
}

static void window_end(sim_world *w, uint32_t i) {
  sim_fault_window *win = &w->windows[i];
  if (!win->active || w->now_ns < win->until_ns) return;
  win->active = false;
  if (win->catalog && win->mode == CS_PLAN_MODE_TOO_LARGE)
    w->catalog_insert_bytes_max = w->catalog_insert_bytes_server;
  for (uint32_t k = 0; k < w->proc_count; k++) sim_proc_pump(w, &w->procs[k]);
}

/* ---- the swarm's fault clock ---------------------------------------------------- */

static uint32_t holder_proc(const sim_world *w) {
  uint64_t term;
  return sim_catalog_holder(w, sim_catalog_now(w), &term);
}

static void foreign_object(sim_world *w) {
  cs_pack_ref ref;
  memset(&ref, 0, sizeof ref);
  char key[CS_KEY_MAX];
  int n;
  uint64_t kind = cs_prng_below(&w->prng_faults, 3);
  if (kind < 2) {
    /*
     * A pack-shaped key: a pack id nobody sealed, or (kind 1) one under a
     * key with an empty, "." or ".." segment that S3 lists as written and
     * no pack key has (store.h's key rule refuses it): never HEADed.
     */
    static const char *const odd[] = {"tenant=t//date=2026-11-30", "tenant=t/./date=2026-11-30",
                                      "tenant=t/../date=2026-11-30"};
    cs_uuid id;
    for (int i = 0; i < 16; i++) id.bytes[i] = (uint8_t)cs_prng_next(&w->prng_faults);
    char text[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&id, text);
    const char *middle = kind == 0 ? "tenant=t/date=2026-11-30" : odd[cs_prng_below(&w->prng_faults, 3)];
    n = snprintf(key, sizeof key, "%sv1/%s/session=x/rank=0/%s.dmi-pack", w->prefix, middle, text);
    sim_cov_mark(w, kind == 0 ? SIM_COV_SIT_FOREIGN_UUID : SIM_COV_SIT_FOREIGN_ODD_SEGMENT);
  } else {
    n = snprintf(key, sizeof key, "%sv1/tenant=t/notes-%" PRIu64 ".txt", w->prefix, cs_prng_next(&w->prng_faults) % 1000);
    sim_cov_mark(w, SIM_COV_SIT_FOREIGN_KEY);
  }
  cs_pack_ref_set_key(&ref, key, (size_t)n);
  ref.size_bytes = 100;
  sim_store_put_object(w, &ref, false, SIM_NONE);
  sim_cov_fault(w, F_FOREIGN_OBJECTS);
}

static void random_window(sim_world *w, bool catalog, cs_plan_mode mode, uint64_t max_ns) {
  sim_fault_window win;
  memset(&win, 0, sizeof win);
  win.catalog = catalog;
  win.mode = mode;
  win.until_ns = w->now_ns + rand_range(&w->prng_faults, CS_SEC_NS, max_ns);
  sim_window_add(w, &win);
}

/*
 * A process closes its engine (seal, stop capture, drain within the budget,
 * stop, release) and opens a new one on the same spool 1 ms to 10 s later.
 * stalled: the store or the catalog stalls from the close until after its
 * budget, so the drain, the stop and the release meet requests never answered.
 */
static void random_close(sim_world *w, bool stalled) {
  cs_prng *r = &w->prng_faults;
  sim_proc *p = &w->procs[cs_prng_below(r, w->proc_count)];
  if (!p->alive || p->paused_until_ns > w->now_ns || p->engine.state != CS_ENGINE_OPEN ||
      p->engine_op != CS_ENGINE_OP_NONE)
    return;
  uint64_t budget = rand_range(r, CS_SEC_NS, (stalled ? 10 : 20) * CS_SEC_NS);
  if (stalled) {
    sim_fault_window win;
    memset(&win, 0, sizeof win);
    win.catalog = cs_prng_below(r, 2) == 0;
    win.mode = CS_PLAN_MODE_STALL;
    win.until_ns = w->now_ns + budget + rand_range(r, CS_SEC_NS, 20 * CS_SEC_NS);
    sim_window_add(w, &win);
  }
  sim_reopen_request(w, p, rand_range(r, CS_MS_NS, 10 * CS_SEC_NS));
  sim_engine_start(w, p, CS_ENGINE_OP_CLOSE, budget);
  sim_cov_fault(w, stalled ? F_CLOSE_STALLED : F_CLOSE);
}

static void random_faults(sim_world *w) {
  const sim_profile *pr = &w->profile;
  cs_prng *r = &w->prng_faults;
  if (pr->on[F_STORE_OUTAGE] && chance(r, pr->rate_permille[F_STORE_OUTAGE])) random_window(w, false, CS_PLAN_MODE_CUT, 20 * CS_SEC_NS);
  if (pr->on[F_STORE_STALL] && chance(r, pr->rate_permille[F_STORE_STALL])) random_window(w, false, CS_PLAN_MODE_STALL, 20 * CS_SEC_NS);
  if (pr->on[F_STORE_SLOW] && chance(r, pr->rate_permille[F_STORE_SLOW])) random_window(w, false, CS_PLAN_MODE_SLOW, 20 * CS_SEC_NS);
  if (pr->on[F_CATALOG_OUTAGE] && chance(r, pr->rate_permille[F_CATALOG_OUTAGE])) random_window(w, true, CS_PLAN_MODE_CUT, 20 * CS_SEC_NS);
  if (pr->on[F_CATALOG_STALL] && chance(r, pr->rate_permille[F_CATALOG_STALL])) random_window(w, true, CS_PLAN_MODE_STALL, 20 * CS_SEC_NS);
  if (pr->on[F_STORE_403_HEAD] && chance(r, pr->rate_permille[F_STORE_403_HEAD])) {
    sim_fault_window win;
    memset(&win, 0, sizeof win);
    win.status = 403;
    win.method = CS_PLAN_METHOD_HEAD;
    snprintf(win.prefix, sizeof win.prefix, "%sv1/tenant=t/date=2026-11-30/session=x/", w->prefix);
    win.until_ns = w->now_ns + rand_range(r, CS_SEC_NS, 30 * CS_SEC_NS);
    sim_window_add(w, &win);
  }
  if (pr->on[F_FOREIGN_OBJECTS] && chance(r, pr->rate_permille[F_FOREIGN_OBJECTS])) foreign_object(w);
  if (pr->on[F_CRASHES] && chance(r, pr->rate_permille[F_CRASHES])) sim_proc_crash(w, &w->procs[cs_prng_below(r, w->proc_count)]);
  if (pr->on[F_REPLACE] && chance(r, pr->rate_permille[F_REPLACE])) {
    sim_proc *p = &w->procs[cs_prng_below(r, w->proc_count)];
    if (p->kind != PROC_RIVAL && p->alive && p->paused_until_ns <= w->now_ns && p->engine.state == CS_ENGINE_OPEN &&
        p->engine_op == CS_ENGINE_OP_NONE)
      sim_engine_start(w, p, CS_ENGINE_OP_REPLACE, rand_range(r, CS_SEC_NS, 20 * CS_SEC_NS));
  }
  if (pr->on[F_SLOW_DISK] && chance(r, pr->rate_permille[F_SLOW_DISK])) {
    uint64_t until = w->now_ns + rand_range(r, CS_SEC_NS, 20 * CS_SEC_NS);
    if (until > w->slow_disk_until_ns) w->slow_disk_until_ns = until;
    sim_cov_fault(w, F_SLOW_DISK);
  }
  if (pr->on[F_STORE_CHANGES] && chance(r, pr->rate_permille[F_STORE_CHANGES])) sim_store_damage_random(w);
  if (pr->on[F_CLOSE] && chance(r, pr->rate_permille[F_CLOSE])) random_close(w, false);
  if (pr->on[F_CLOSE_STALLED] && chance(r, pr->rate_permille[F_CLOSE_STALLED])) random_close(w, true);
  if (pr->on[F_PAUSE_HOLDER] && chance(r, pr->rate_permille[F_PAUSE_HOLDER])) {
    uint32_t holder = holder_proc(w);
    uint64_t d = rand_range(r, w->base_svc.lease_ttl_ns / 2, 3 * w->base_svc.lease_ttl_ns);
    if (holder != SIM_NONE && cs_prng_below(r, 2) == 0) proc_pause(w, &w->procs[holder], d);
    else if (holder != SIM_NONE) w->procs[holder].pause_on_write_ns = d;
  }
  sim_schedule(w, w->now_ns + CS_SEC_NS, EV_RANDOM_FAULT, SIM_NONE, 0, 0);
}

/* ---- phases ------------------------------------------------------------------------ */

/*
 * The liveness bound grows with the backlog the safety phase left: a cycle
 * takes cycle_packs_max packs through HEAD, INDEX, PUBLISH and the committed
 * check, under a second even with every fenced write's rows landing late.
 * Uploaders that ran for ten minutes against a stalled catalog can leave
 * thousands of packs for the publisher's reconcile to adopt (seeds 30003772
 * and 30029176 left 3,600: still draining, not stuck, when 300 s ran out).
 */
static uint64_t backlog_allowance(const sim_world *w) {
  uint64_t backlog = 0;
  for (uint32_t i = 0; i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    if (sp->durable && !sp->poison_large && !sp->poison_invalid && !sim_catalog_committed(w, i)) backlog++;
  }
  /*
   * Poison packs wait for their rejected rows: with the rejected list full
   * (rejected_max entries waiting for rows) a pass records rejected_max of
   * them, and the rest wait for the next pass (seed 40001862: rejected_max 2).
   */
  uint64_t poison = 0;
  for (uint32_t i = 0; i < w->pack_count; i++) {
    const sim_pack *sp = &w->packs[i];
    poison += sp->durable && (sp->poison_large || sp->poison_invalid) && !sp->rejected;
  }
  uint64_t interval = w->base_svc.reconcile_interval_ns != 0 ? w->base_svc.reconcile_interval_ns : 0;
  return backlog * CS_SEC_NS / w->base_svc.cycle_packs_max + poison * interval / w->base_svc.rejected_max;
}

/*
 * With config corners drawn: each pack the catalog refuses fails a cycle per
 * attempt, and a failed cycle may back off as long as the cap (an hour at its
 * maximum): the liveness bound grows by that much for each one still spooled.
 */
static uint64_t poison_wait(const sim_world *w) {
  if (w->corner_count == 0) return 0;
  uint64_t n = 0;
  for (uint32_t i = 0; i < w->pack_count; i++)
    n += w->packs[i].durable && w->packs[i].poison_invalid && !w->packs[i].rejected;
  return n * w->base_svc.index_attempts_max * w->base_svc.backoff_cap_ns;
}

static void liveness_begin(sim_world *w) {
  w->liveness = true;
  if (w->opts->trace) fprintf(w->opts->out, "%12.6f     LIVENESS: faults healed\n", (double)w->now_ns / 1e9);
  for (uint32_t i = 0; i < SIM_WINDOWS_MAX; i++) w->windows[i].active = false;
  w->slow_disk_until_ns = 0;
  w->catalog_insert_bytes_max = w->catalog_insert_bytes_server;
  for (uint32_t i = 0; i < w->proc_count; i++) {
    sim_proc *p = &w->procs[i];
    p->capturing = false;
    p->pause_on_write_ns = 0; /* a pause armed in the safety phase would strike in this one */
    if (p->paused_until_ns >= w->now_ns) { /* a swarm pause ends here at the latest */
      p->paused_until_ns = 0;
      p->last_pause_end_ns = w->now_ns;
      p->last_pause_end_local_ns = sim_local_now(w, p);
    }
    if (p->kind == PROC_RIVAL) {
      /* Rivals go away (their claims expire) so the capture processes' publisher can drain. */
      sim_proc_crash(w, p);
      continue;
    }
    if (p->alive && (p->engine.state == CS_ENGINE_CLOSING || p->engine.state == CS_ENGINE_CLOSED))
      sim_reopen_request(w, p, CS_MS_NS); /* a closed engine's spool is drained by a new one */
    if (!p->alive) proc_restart(w, p);
    else if (p->sink_open && !p->sink_closed) {
      p->sink_flush_seq = p->last_admit_seq;
      cs_sink_flush(&p->sink, sim_local_now(w, p), 0); /* seal what is open */
      sim_proc_pump(w, p);
    }
  }
  w->liveness_end_ns = w->now_ns + w->opts->liveness_ns + w->liveness_extra_ns + poison_wait(w) + backlog_allowance(w);
  sim_schedule(w, w->now_ns + CS_SEC_NS, EV_LIVENESS_CHECK, SIM_NONE, 0, 0);
}

/*
 * At the end every pack a running service set aside has been counted by one of its flush answers (6.3): a last
 * flush, due at once, counts the rest, and the answers together count exactly what it set aside (one set aside
 * with no room in the list and no flush after it would otherwise go unchecked). Asked outside the event queue
 * once the run is decided: no event or draw moves.
 */
static void final_reported_check(sim_world *w) {
  for (uint32_t i = 0; i < w->proc_count; i++) {
    sim_proc *p = &w->procs[i];
    if (!p->alive || p->svc == NULL || p->svc_stop_sent || cs_service_stopped(p->svc)) continue;
    uint64_t local = sim_local_now(w, p);
    cs_event ev = {.kind = CS_EV_FLUSH, .id = UINT64_MAX, .deadline_ns = local};
    if (cs_service_on_event(p->svc, local, &ev) != CS_E_OK) continue;
    cs_action act;
    bool answered = false;
    uint64_t counted = p->reported_total; /* with every answer polled here: an older flush may fall due now too */
    for (uint32_t n = 0; !answered && n < 100000 && cs_service_poll(p->svc, local, &act); n++) {
      if (act.op != CS_OP_FLUSH_DONE) continue;
      counted += act.flush.rejected_count;
      answered = act.flush.flush_id == UINT64_MAX;
    }
    if (!answered) sim_bail(w, SIM_EXIT_SAFETY, "p%u never answered a flush due at once", p->index);
    if (act.flush.err == CS_E_FULL || act.flush.err == CS_E_CLOSED) continue;
    cs_snapshot snap;
    cs_service_snapshot(p->svc, local, &snap);
    if (counted != snap.set_aside)
      sim_bail(w, SIM_EXIT_SAFETY, "at the end p%u's flush answers counted %" PRIu64 " set-aside packs; it set aside %"
               PRIu64, p->index, counted, snap.set_aside);
  }
}

static void liveness_check(sim_world *w) {
  char why[256];
  if (sim_check_drained(w, why, sizeof why)) {
    final_reported_check(w);
    w->done = true;
    return;
  }
  if (w->now_ns >= w->liveness_end_ns)
    sim_bail(w, SIM_EXIT_LIVENESS, "not drained %.0f s after faults healed: %s",
             (double)w->opts->liveness_ns / 1e9, why);
  sim_schedule(w, w->now_ns + CS_SEC_NS, EV_LIVENESS_CHECK, SIM_NONE, 0, 0);
}

/* ---- dispatch -------------------------------------------------------------------- */

static bool defer_if_paused(sim_world *w, const sim_event *ev, sim_proc *p) {
  if (p->paused_until_ns <= w->now_ns) return false;
  sim_schedule(w, p->paused_until_ns, ev->kind, ev->proc, ev->a, ev->b);
  return true;
}

static void crash_points(sim_world *w, sim_proc *p) {
  if (p->crash_point != CS_PLAN_CRASH_AFTER_UPLOAD && p->crash_point != CS_PLAN_CRASH_AFTER_INDEX) return;
  if (p->svc == NULL) return;
  cs_snapshot snap;
  cs_service_snapshot(p->svc, 0, &snap);
  bool hit = p->crash_point == CS_PLAN_CRASH_AFTER_UPLOAD ? snap.uploaded > p->crash_uploaded_base
                                                          : snap.indexed > p->crash_indexed_base;
  if (!hit) return;
  p->crash_point = -1;
  sim_proc_crash(w, p);
}

static void on_reply(sim_world *w, const sim_event *ev, sim_proc *p) {
  sim_req *req = &w->reqs[ev->a];
  if (req->incarnation == p->incarnation && p->alive && p->paused_until_ns > w->now_ns) {
    sim_schedule(w, p->paused_until_ns, EV_REPLY, ev->proc, ev->a, 0);
    return; /* the same reference moves on */
  }
  if (req->incarnation == p->incarnation && p->alive && req->svc_gen == p->svc_gen) {
    deliver_reply(w, p, req);
    req_release(req);
    crash_points(w, p);
    sim_proc_pump(w, p);
    return;
  }
  req_release(req);
}

static void periodic_flush(sim_world *w, sim_proc *p) {
  if (w->liveness) return;
  if (p->alive && p->workload && p->paused_until_ns <= w->now_ns && p->engine.state == CS_ENGINE_OPEN &&
      p->engine_op == CS_ENGINE_OP_NONE)
    sim_engine_start(w, p, CS_ENGINE_OP_FLUSH, 2 * CS_SEC_NS);
  sim_schedule(w, w->now_ns + w->flush_interval_ns, EV_FLUSH_CALL, p->index, 0, 0);
}

/* After a server applied a request: schedule its rows' landing, or its answer. */
static void after_apply(sim_world *w, uint32_t proc, uint32_t index, sim_req *req) {
  if (req->land_pending) {
    req->refs++;
    uint64_t delay = sim_replicas_land_delay(w, req, cs_prng_below(&w->prng_net, w->apply_delay_max_ns + 1));
    sim_schedule(w, w->now_ns + delay, EV_LAND, proc, index, 0);
    if (req->quorum_late && req->reply_after_land) {
      /* 319 once insert_quorum_timeout (half the request timeout) passed, not after the rows: they land later. */
      req->reply_after_land = false;
      req->refs++;
      sim_schedule(w, w->now_ns + w->procs[proc].svc_cfg.request_timeout_ns / 2 + req->reply_half_ns, EV_REPLY, proc,
                   index, 0);
    }
  } else if (req->reply_after_land) {
    req->refs++;
    sim_schedule(w, w->now_ns + req->reply_half_ns, EV_REPLY, proc, index, 0);
  }
  req_release(req);
}

static void dispatch_proc(sim_world *w, const sim_event *ev, sim_proc *p) {
  bool stale = ev->incarnation != p->incarnation || !p->alive;
  switch (ev->kind) {
  case EV_REPLY: on_reply(w, ev, p); return;
  case EV_ARRIVE: {
    sim_req *req = &w->reqs[ev->a];
    /* A paused process has not yet written its request to the socket. */
    if (req->incarnation == p->incarnation && p->alive && p->paused_until_ns > w->now_ns) {
      req->held_by_pause = true;
      sim_schedule(w, p->paused_until_ns, EV_ARRIVE, ev->proc, ev->a, 0);
      return;
    }
    /* One it never wrote dies with it: a process that crashed while paused sends nothing it held. */
    if (req->held_by_pause && (req->incarnation != p->incarnation || !p->alive)) {
      req_release(req);
      return;
    }
    if (req->to_catalog) sim_catalog_apply(w, req);
    else sim_store_apply(w, req);
    after_apply(w, ev->proc, (uint32_t)ev->a, req);
    return;
  }
  case EV_LAND: {
    sim_req *req = &w->reqs[ev->a];
    sim_catalog_land(w, req);
    if (req->reply_after_land) {
      req->refs++;
      sim_schedule(w, w->now_ns + req->reply_half_ns, EV_REPLY, ev->proc, ev->a, 0);
    }
    req_release(req);
    return;
  }
  case EV_RESTART: proc_restart(w, p); return;
  case EV_RESUME:
    sim_cov_fault(w, F_PAUSE_HOLDER);
    p->last_pause_end_ns = w->now_ns;
    p->last_pause_end_local_ns = sim_local_now(w, p);
    sim_proc_pump(w, p);
    return;
  default: break;
  }
  if (stale || defer_if_paused(w, ev, p)) return;
  switch (ev->kind) {
  case EV_WAKE:
    if (p->wake_at_ns == w->now_ns) p->wake_at_ns = 0;
    wake_forget(p, w->now_ns);
    proc_wake(w, p);
    return;
  case EV_SEAL_STEP:
    seal_step(w, p, (uint32_t)ev->a, ev->b);
    sim_proc_pump(w, p);
    return;
  case EV_SPOOL_DONE:
    spool_done(w, p, ev->a, ev->b);
    crash_points(w, p);
    sim_proc_pump(w, p);
    return;
  case EV_CAPTURE: capture(w, p); return;
  case EV_FLUSH_CALL: periodic_flush(w, p); return;
  case EV_REOPEN: proc_reopen(w, p); return;
  case EV_REARRIVE:
    rearrive(w, p, (uint32_t)ev->a, ev->b);
    sim_proc_pump(w, p);
    return;
  default: sim_bail(w, SIM_EXIT_CRASH, "event %s for a proc", ev_name(ev->kind));
  }
}

static void dispatch(sim_world *w, const sim_event *ev) {
  hash_u64(w, ev->at_ns);
  hash_u64(w, (uint64_t)ev->kind << 32 | ev->proc);
  hash_u64(w, ev->a ^ (ev->b << 1));
  if (w->opts->trace && ev->kind != EV_WAKE)
    fprintf(w->opts->out, "%12.6f p%d %s a=%" PRIu64 " b=%" PRIu64 "\n", (double)ev->at_ns / 1e9,
            ev->proc == SIM_NONE ? -1 : (int)ev->proc, ev_name(ev->kind), ev->a, ev->b);
  if (ev->proc != SIM_NONE) {
    if (ev->proc >= w->proc_count) sim_bail(w, SIM_EXIT_CRASH, "event for proc %u", ev->proc);
    dispatch_proc(w, ev, &w->procs[ev->proc]);
    return;
  }
  switch (ev->kind) {
  case EV_PLAN: sim_plan_step(w, &w->opts->plan->steps[ev->a]); return;
  case EV_RANDOM_FAULT:
    if (!w->liveness) random_faults(w);
    return;
  case EV_PHASE:
    if (w->opts->plan != NULL) sim_plan_check_expects(w);
    liveness_begin(w);
    return;
  case EV_LIVENESS_CHECK: liveness_check(w); return;
  case EV_FAULT_END: window_end(w, (uint32_t)ev->a); return;
  case EV_READ_START:
  case EV_READ_ANSWER: sim_reader_event(w, ev); return;
  default: sim_bail(w, SIM_EXIT_CRASH, "event %s without a proc", ev_name(ev->kind));
  }
}

/* ---- setup and the run ------------------------------------------------------------- */

static void config_defaults(sim_world *w) {
  cs_service_config_default(&w->base_svc, CS_ROLE_PUBLISHER);
  w->base_svc.spool_packs_max = 48;
  w->base_svc.cycle_packs_max = 8;
  w->base_svc.store_inflight_max = 4;
  w->base_svc.index_batch_bytes_max = 16384;
  w->base_svc.backoff_base_ns = 100 * CS_MS_NS;
  w->base_svc.backoff_cap_ns = 10 * CS_SEC_NS;
  w->base_svc.lease_ttl_ns = 10 * CS_SEC_NS;
  w->base_svc.lease_guard_ns = CS_SEC_NS;
  w->base_svc.reconcile_interval_ns = 60 * CS_SEC_NS;
  w->base_svc.list_page_max = 16;
  w->base_svc.rejected_max = 32;
  w->base_svc.request_timeout_ns = 2 * CS_SEC_NS;
  cs_sink_config_default(&w->base_sink);
  w->base_sink.pack_records_max = 32;
  w->base_sink.pack_bytes_max = 256 * 1024;
  w->base_sink.linger_ns = 2 * CS_SEC_NS;
  w->base_sink.spool_bytes_max = 8 * 1024 * 1024;
  w->base_sink.spool_packs_max = 48;
  w->base_sink.full_policy = CS_FULL_BLOCK;
  w->base_sink.block_max_ns = CS_SEC_NS;
  cs_engine_config_default(&w->base_engine);
  w->base_engine.stop_reserve_ns = 5 * CS_SEC_NS;
  w->capture_interval_ns = 100 * CS_MS_NS;
  w->flush_interval_ns = 30 * CS_SEC_NS;
  w->restart_delay_ns = 5 * CS_SEC_NS;
  w->fence_margin_ns = 200 * CS_MS_NS;
  w->apply_delay_max_ns = 150 * CS_MS_NS;
  w->workload = true;
  snprintf(w->prefix, sizeof w->prefix, "cat/");
}

static void profile_shape(sim_world *w) {
  const sim_profile *pr = &w->profile;
  /* The service's own bounds vary too: small tables reach their edges. */
  static const uint32_t rejected_max[] = {2, 8, 32};
  static const uint64_t reconcile_s[] = {20, 60, 120};
  if (w->opts->plan != NULL) goto faults; /* plans set what they need */
  w->base_svc.rejected_max = rejected_max[cs_prng_below(&w->prng_faults, 3)];
  w->base_svc.reconcile_interval_ns = reconcile_s[cs_prng_below(&w->prng_faults, 3)] * CS_SEC_NS;
  w->base_svc.cycle_packs_max = 2 + (uint32_t)cs_prng_below(&w->prng_faults, 15);
  w->base_svc.list_page_max = 1 + (uint32_t)cs_prng_below(&w->prng_faults, 32);
  w->base_svc.store_inflight_max = 1 + (uint32_t)cs_prng_below(&w->prng_faults, 4);
  /* A quarter of the seeds run without the start pass: the periodic one must find what is left. */
  w->base_svc.reconcile_at_start = cs_prng_below(&w->prng_faults, 4) != 0;
faults:
  w->uploaders = pr->on[F_UPLOADERS] ? 1 + (uint32_t)cs_prng_below(&w->prng_faults, 2) : 0;
  w->rivals = pr->on[F_RIVALS] ? 1 + (uint32_t)cs_prng_below(&w->prng_faults, 2) : 0;
  w->catalog_insert_bytes_max = w->base_svc.index_batch_bytes_max;
  /* A statement limit that holds the inventory rows of 3 to 14 packs (sim_catalog_refuses_alone): splits. */
  /* Above one pack's inventory row (the floor), so that only a plan's window refuses a pack alone. */
  uint64_t low = w->long_keys ? sim_catalog_statement_floor(w) : 1536;
  if (pr->on[F_CATALOG_TOO_LARGE]) w->catalog_insert_bytes_max = low + cs_prng_below(&w->prng_faults, 2560);
  if (pr->on[F_DISK_FULL]) {
    w->base_sink.spool_packs_max = 8;
    w->base_sink.spool_bytes_max = 1024 * 1024;
    w->base_sink.full_policy = cs_prng_below(&w->prng_faults, 2) ? CS_FULL_BLOCK : CS_FULL_REFUSE;
  }
}

static void proc_setup(sim_world *w, uint32_t index, proc_kind kind) {
  sim_proc *p = &w->procs[index];
  memset(p, 0, sizeof *p);
  p->index = index;
  p->kind = kind;
  p->next_capture_id = (uint64_t)index << 40;
  p->crash_point = -1;
  p->svc_cfg = w->base_svc;
  p->svc_cfg.role = kind == PROC_UPLOADER ? CS_ROLE_UPLOADER : CS_ROLE_PUBLISHER;
  p->sink_cfg = w->base_sink;
  if (p->sink_cfg.spool_packs_max > p->svc_cfg.spool_packs_max) p->sink_cfg.spool_packs_max = p->svc_cfg.spool_packs_max;
  p->engine_cfg = w->base_engine;
  p->workload = w->workload && kind != PROC_RIVAL;
  if (w->profile.on[F_CLOCK_SKEW]) {
    p->skew_ns = (int64_t)cs_prng_below(&w->prng_faults, CS_SEC_NS);
    p->drift_ppm = (int32_t)cs_prng_below(&w->prng_faults, 401) - 200;
  }
  p->svc_mem_size = cs_service_memory_size(&p->svc_cfg);
  if (p->svc_mem_size == 0)
    sim_bail(w, sim_config_valid_by_spec(&p->svc_cfg) ? SIM_EXIT_SAFETY : SIM_EXIT_USAGE,
             "config rule (6.10): no memory size for p%u's service config (refused)", p->index);
  p->svc_mem = aligned_alloc(16, (p->svc_mem_size + 15) & ~(size_t)15);
  if (p->svc_mem == NULL) sim_bail(w, SIM_EXIT_CRASH, "out of memory");
}

static void world_setup(sim_world *w) {
  config_defaults(w);
  cs_prng root;
  cs_prng_seed(&root, w->opts->seed);
  cs_prng_split(&root, &w->prng_faults);
  cs_prng_split(&root, &w->prng_net);
  cs_prng_split(&root, &w->prng_storage);
  cs_prng_split(&root, &w->prng_workload);
  cs_prng_split(&root, &w->prng_cores);
  cs_prng_split(&root, &w->prng_quirks);
  const char *name = w->opts->plan != NULL && w->opts->profile_name == NULL ? "none" : w->opts->profile_name;
  if (sim_profile_named(&w->profile, name == NULL ? "swarm" : name, &w->prng_faults,
                        w->opts->seed ^ UINT64_C(0x6c6174655f666c74)) != CS_E_OK)
    sim_bail(w, SIM_EXIT_USAGE, "unknown profile '%s'", name);
  for (uint32_t i = 0; i < F_COUNT_; i++)
    if (w->opts->without_mask & (UINT64_C(1) << i)) w->profile.on[i] = false, w->profile.rate_permille[i] = 0;
  /*
   * Pack keys of the longest length the key rule allows (CS_KEY_MAX - 1
   * bytes): a sixteenth of swarm seeds, drawn from a stream of its own so the
   * other draws of a seed stay as they were.
   */
  bool swarm_keys = name == NULL || strcmp(name, "swarm") == 0;
  cs_prng keys;
  cs_prng_seed(&keys, w->opts->seed ^ UINT64_C(0x6c6f6e675f6b6579));
  w->long_keys = swarm_keys && cs_prng_below(&keys, 16) == 0 && !(w->opts->without_mask & SIM_WITHOUT_LONG_KEYS);
  /* Continuation tokens as S3 gives them (opaque, here 1 to 5 bytes) in a quarter of swarm seeds. */
  w->opaque_tokens = swarm_keys && cs_prng_below(&keys, 4) == 0;
  /* Descriptors of up to 8 KiB a record against the smallest footer bound (64 KiB) in a quarter of them. */
  w->big_footers = swarm_keys && cs_prng_below(&keys, 4) == 0;
  if (w->big_footers) {
    w->base_sink.pack_footer_bytes_max = 64 * 1024;
    w->base_sink.pack_records_max = 2 + (uint32_t)cs_prng_below(&keys, 31); /* 2 to 32 records a pack */
  }
  profile_shape(w);
  /* A store that lists in path order (s3rver): a quarter of swarm seeds, every seed of "all". */
  bool swarm = name == NULL || strcmp(name, "swarm") == 0;
  w->store_list_path_order = swarm ? cs_prng_below(&w->prng_quirks, 4) == 0 : strcmp(name, "all") == 0;
  if (w->opts->without_mask & SIM_WITHOUT_LIST_PATH_ORDER) w->store_list_path_order = false;
  /* A catalog like ClickHouse 18.16: claims that can contest a term (half), a clock of whole seconds (a quarter). */
  w->catalog_claims_concurrent = swarm ? cs_prng_below(&w->prng_quirks, 2) == 0 : strcmp(name, "all") == 0;
  if (w->opts->without_mask & SIM_WITHOUT_CLAIMS_CONCURRENT) w->catalog_claims_concurrent = false;
  bool clock_s = swarm ? cs_prng_below(&w->prng_quirks, 4) == 0 : strcmp(name, "all") == 0;
  if (w->opts->without_mask & SIM_WITHOUT_CATALOG_CLOCK_S) clock_s = false;
  w->catalog_clock_ns = clock_s ? CS_SEC_NS : 0;
  /*
   * Packs handed into the spool by other capture processes (capstore serve):
   * a quarter of swarm seeds (every seed of "all"), drawn from a stream of
   * its own so a seed's other draws stay as they were. Plans set them.
   */
  cs_prng_seed(&w->prng_arrivals, w->opts->seed ^ UINT64_C(0x6172726976616c73));
  if (swarm ? cs_prng_below(&w->prng_arrivals, 4) == 0 : strcmp(name, "all") == 0) {
    w->arrival_permille = 100 + (uint32_t)cs_prng_below(&w->prng_arrivals, 901);  /* 10% to every seal */
    w->rearrival_permille = 10 + (uint32_t)cs_prng_below(&w->prng_arrivals, 191); /* 1% to 20% of removals */
  }
  /*
   * Readers that search and read back while the others run (sim/reader.c):
   * one or two in a quarter of swarm seeds (every seed of "all"), drawn from
   * a stream of their own that also feeds every draw they make, so a seed
   * runs as before with them off. Plans run without them.
   */
  cs_prng_seed(&w->prng_readers, w->opts->seed ^ UINT64_C(0x7265616465727321));
  if (swarm ? cs_prng_below(&w->prng_readers, 4) == 0 : strcmp(name, "all") == 0)
    w->reader_count = 1 + (uint32_t)cs_prng_below(&w->prng_readers, SIM_READERS_MAX);
  if (w->opts->plan != NULL || (w->opts->without_mask & SIM_WITHOUT_READERS)) w->reader_count = 0;
  /* Chunk writes of a capture array among the records (sim/arrays.c): a draw of their own, the same way. */
  sim_arrays_setup(w, swarm, strcmp(name == NULL ? "swarm" : name, "all") == 0);
  /* A catalog of replicas (sim/replicas.c): a draw of its own, the same way. */
  sim_replicas_setup(w, swarm, strcmp(name == NULL ? "swarm" : name, "all") == 0);
  if (w->opts->plan != NULL) {
    w->workload = false;
    if (sim_plan_apply_settings(w, w->opts->plan) != CS_E_OK) {
      char why[sizeof w->result->reason];
      memcpy(why, w->result->reason, sizeof why);
      sim_bail(w, SIM_EXIT_USAGE, "%s", why);
    }
    w->catalog_insert_bytes_max = w->catalog_insert_bytes_max == 0 ? w->base_svc.index_batch_bytes_max : w->catalog_insert_bytes_max;
    if (sim_replicas_after_plan(w) != CS_E_OK)
      sim_bail(w, SIM_EXIT_USAGE, "replicas is 0, 2 or 3; quorum_timeouts and replicas_behind are per thousand: at most 1000");
  }
  if (w->arrival_permille > 1000 || w->rearrival_permille > 1000)
    sim_bail(w, SIM_EXIT_USAGE, "arrivals and rearrivals are per thousand: at most 1000");
  if (w->opts->without_mask & SIM_WITHOUT_ARRIVALS) w->arrival_permille = 0, w->rearrival_permille = 0;
  /* What healing restores: a plan's statement limit is the server's configuration, not a fault. */
  w->catalog_insert_bytes_server = w->opts->plan != NULL ? w->catalog_insert_bytes_max : w->base_svc.index_batch_bytes_max;
  /*
   * The fence margin must cover the rows' landing delay and one tick of the
   * catalog's clock (after the plan's settings, which may set either): between
   * the fence check and the rows landing, a clock of whole seconds can jump a
   * second, and the claim be expired by it.
   */
  if (w->catalog_clock_ns > 1) w->fence_margin_ns += w->catalog_clock_ns;
  /* A PUBLISH after a doubtful INDEX waits out the rows' landing delay, as the runtime's (the margin covers it). */
  w->base_svc.index_settle_ns = w->fence_margin_ns;
  char msg[160];
  w->base_svc.store_lists_complete = true; /* what the probe finds on the model without the switch */
  if (w->store_list_path_order) {
    /*
     * The service hears it from the store probe: uploaders refuse such a store. A standby
     * publisher's packs, too, are found only by the holder's reconcile, so such a store is
     * run with one publisher (docs/catalog-protocol.md): no rivals either.
     */
    w->base_svc.store_lists_complete = false;
    cs_service_config up = w->base_svc;
    up.role = CS_ROLE_UPLOADER;
    if (cs_service_config_validate(&up, msg, sizeof msg) == CS_E_CONFIG) w->uploaders = 0; /* refused */
    w->rivals = 0;
  }
  sim_corners_draw(w); /* after everything that decides the processes, before the config is checked */
  if (cs_service_config_validate(&w->base_svc, msg, sizeof msg) != CS_E_OK) {
    /* A plan's setting out of range is a usage error; a config the contract accepts refused is a defect (6.10). */
    if (sim_config_valid_by_spec(&w->base_svc))
      sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): the service refused a config the contract accepts: %s", msg);
    sim_bail(w, SIM_EXIT_USAGE, "config: %s", msg);
  }
  if (w->uploaders > SIM_PROCS_MAX - 1 || w->rivals > SIM_PROCS_MAX - 1 || 1 + w->uploaders + w->rivals > SIM_PROCS_MAX)
    sim_bail(w, SIM_EXIT_USAGE, "at most %u processes: 1 publisher + uploaders + rivals", SIM_PROCS_MAX);
  w->proc_count = 1 + w->uploaders + w->rivals;
  proc_setup(w, 0, PROC_PUBLISHER);
  for (uint32_t i = 0; i < w->uploaders; i++) proc_setup(w, 1 + i, PROC_UPLOADER);
  for (uint32_t i = 0; i < w->rivals; i++) proc_setup(w, 1 + w->uploaders + i, PROC_RIVAL);
  sim_models_init(w);
}

static void world_start(sim_world *w) {
  const cs_plan *plan = w->opts->plan;
  w->safety_end_ns = plan != NULL && plan->end_ns != 0 ? plan->end_ns : w->opts->duration_ns;
  for (uint32_t i = 0; plan != NULL && i < plan->step_count; i++)
    if (plan->steps[i].at_ns >= w->safety_end_ns)
      sim_bail(w, SIM_EXIT_USAGE, "plan line %u: step at or after the end (%.3f s): faults heal there", plan->steps[i].line,
               (double)w->safety_end_ns / 1e9);
  for (uint32_t i = 0; i < w->proc_count; i++) {
    sim_proc *p = &w->procs[i];
    bool plan_rival = plan != NULL && p->kind == PROC_RIVAL;
    if (plan_rival) continue; /* started by the plan's `rival start` */
    if (p->kind == PROC_RIVAL) {
      sim_schedule(w, cs_prng_below(&w->prng_faults, 60 * CS_SEC_NS), EV_RESTART, i, 0, 0);
      continue;
    }
    p->alive = true;
    proc_open(w, p);
    if (p->workload) sim_schedule(w, w->flush_interval_ns, EV_FLUSH_CALL, i, 0, 0);
  }
  if (plan != NULL)
    for (uint32_t i = 0; i < plan->step_count; i++) sim_schedule(w, plan->steps[i].at_ns, EV_PLAN, SIM_NONE, i, 0);
  else
    sim_schedule(w, CS_SEC_NS, EV_RANDOM_FAULT, SIM_NONE, 0, 0);
  sim_schedule(w, w->safety_end_ns, EV_PHASE, SIM_NONE, 0, 0);
  sim_readers_start(w);
}

static void world_free(sim_world *w) {
  for (uint32_t i = 0; i < w->proc_count; i++) free(w->procs[i].svc_mem);
}

void sim_run(const sim_options *opts, sim_result *result) {
  static sim_world world;
  sim_world *w = &world;
  memset(w, 0, offsetof(sim_world, heap));
  memset(result, 0, sizeof *result);
  w->opts = opts;
  w->result = result;
  w->trace_hash = UINT64_C(0xcbf29ce484222325);
  if (setjmp(w->bail) != 0) {
    if (opts->coverage != NULL) sim_cov_add(opts->coverage, w->cov.hits, opts->seed);
    result->trace_hash = w->trace_hash;
    result->events = w->events_run;
    result->sim_end_ns = w->now_ns;
    world_free(w);
    return;
  }
  sim_cov_check_table(w);
  w->cov.on = opts->coverage != NULL || opts->plan != NULL;
  world_setup(w);
  fprintf(opts->out, "seed=%" PRIu64 " profile: ", opts->seed);
  sim_profile_print(&w->profile, opts->out);
  if (w->store_list_path_order) fputs(" store=list_path_order", opts->out);
  if (w->long_keys) fputs(" keys=long_keys", opts->out);
  if (w->opaque_tokens) fputs(" list=opaque_tokens", opts->out);
  if (w->big_footers) fputs(" records=big_footers", opts->out);
  if (w->reader_count != 0) fprintf(opts->out, " readers=%u", w->reader_count);
  if (w->arrays)
    fprintf(opts->out, " arrays=slots:%u,writes:%u/1000%s", w->array_slots, w->array_permille,
            w->array_claims ? ",claims" : "");
  if (w->arrival_permille != 0 || w->rearrival_permille != 0)
    fprintf(opts->out, " spool=arrivals(seals:%u/1000,rearrivals:%u/1000)", w->arrival_permille, w->rearrival_permille);
  if (w->catalog_claims_concurrent || w->catalog_clock_ns > 1)
    fprintf(opts->out, " catalog=%s%s%s", w->catalog_claims_concurrent ? "claims_concurrent" : "",
            w->catalog_claims_concurrent && w->catalog_clock_ns > 1 ? "," : "",
            w->catalog_clock_ns > 1 ? "catalog_clock_s" : "");
  sim_replicas_print(w, opts->out);
  fprintf(opts->out, " procs=%u uploaders=%u rivals=%u\n", w->proc_count, w->uploaders, w->rivals);
  sim_config_print(w, opts->out);
  sim_check_config_rules(w);
  sim_check_api_rules(w);
  world_start(w);
  sim_event ev;
  while (!w->done && heap_pop(w, &ev)) {
    w->now_ns = ev.at_ns;
    w->events_run++;
    dispatch(w, &ev);
  }
  if (!w->done) sim_bail(w, SIM_EXIT_LIVENESS, "the world ran out of events before draining");
  if (opts->coverage != NULL) sim_cov_add(opts->coverage, w->cov.hits, opts->seed);
  result->exit_code = SIM_EXIT_OK;
  result->trace_hash = w->trace_hash;
  result->events = w->events_run;
  result->sim_end_ns = w->now_ns;
  world_free(w);
}

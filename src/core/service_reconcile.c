/*
 * Reconcile: list the catalog's own prefix page by page, ask the catalog which
 * pack ids on the page it holds, HEAD only the missing ones and adopt the real
 * packs among them as owed (DESIGN.md 6.8). A key without a canonical UUID
 * pack id, or with a segment no pack key has (empty, "." or ".."), is skipped
 * and never reaches the catalog or a HEAD; a failed HEAD is an error,
 * counted apart from skipped objects, named in last_error and retried on the
 * next pass.
 */
#include "service_internal.h"

#include <assert.h>
#include <string.h>

static uint32_t page_count_state(const cs_service *svc, uint8_t state) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < svc->page_count; i++) n += svc->page[i].state == state;
  return n;
}

/* The pass ends here; the next one comes after the interval (or backoff_cap). */
static void recon_pass_end(cs_service *svc, uint64_t now_ns) {
  svc->recon_active = false;
  svc->reconcile_due = false;
  uint64_t interval = svc->cfg.reconcile_interval_ns;
#if CAPSTORE_MUTANT == 38 /* the reconcile interval read in the wrong unit (ms as us) */
  interval /= 1000;
#endif
  if (interval == 0 && svc->reconcile_errors) interval = svc->cfg.backoff_cap_ns;
  svc->reconcile_next_ns = interval == 0 ? 0 : (interval > CS_NEVER - 1 - now_ns ? CS_NEVER - 1 : now_ns + interval);
  svc->reconcile_errors = false;
}

static bool flush_waiting(const cs_service *svc) {
  for (uint32_t i = 0; i < svc->cfg.flush_max; i++)
    if (svc->flushes[i].active) return true;
  return false;
}

/*
 * True when the pass may list its next page in this cycle (see cycle_advance):
 * the page just finished adopted something and was not the last; nothing of
 * our own waits to upload and no flush waits (adoptions count as owed); the
 * lease is usable; and the cycle has neither a cycle's worth of adoptions nor
 * of pages. So a bucket of packs the catalog already holds ends the cycle at
 * each page as before, and a looping token cannot keep a cycle going.
 */
bool cs_svc_recon_gather_more(const cs_service *svc, uint64_t now_ns) {
  return svc->recon_active && svc->page_listed && !svc->page_last && svc->page_adopted > 0 &&
         page_count_state(svc, PAGE_CANDIDATE) == 0 && page_count_state(svc, PAGE_QUERYING) == 0 &&
         svc->adopted_used < svc->cfg.cycle_packs_max && cs_svc_owed_count(svc) < svc->cfg.cycle_packs_max &&
         svc->cycle_pages < svc->cfg.cycle_packs_max && cs_svc_stage_count(svc, STAGE_SPOOLED) == 0 &&
         !flush_waiting(svc) && cs_svc_lease_usable(svc, now_ns);
}

/* The phase that continues the pass, or PHASE_IDLE when this cycle should end. */
static cycle_phase recon_next_phase(cs_service *svc, uint64_t now_ns, bool *next_page) {
  *next_page = false;
  if (!svc->page_listed) return PHASE_RECON_LIST;
  if (svc->page_count > 0 && !svc->page_checked) return PHASE_RECON_COMMITTED;
  if (page_count_state(svc, PAGE_CANDIDATE) > 0) return PHASE_RECON_HEAD;
  assert(page_count_state(svc, PAGE_QUERYING) == 0);
  if (!svc->page_last) {
    /* The page is finished: the next page, in this cycle while it gathers adoptions, else the next. */
    bool more = cs_svc_recon_gather_more(svc, now_ns) && cs_svc_owed_count(svc) > 0;
    memcpy(svc->token, svc->next_token, sizeof svc->token);
    svc->page_listed = false;
    svc->page_count = 0;
    *next_page = more;
    return more ? PHASE_RECON_LIST : PHASE_IDLE;
  }
  svc->stats.reconcile_passes++;
  recon_pass_end(svc, now_ns);
  return PHASE_IDLE;
}

void cs_svc_recon_begin(cs_service *svc) {
  if (!svc->recon_active) {
    svc->recon_active = true;
    svc->token[0] = '\0';
    svc->page_listed = false;
    svc->page_count = 0;
  }
  if (!svc->page_listed) svc->phase = PHASE_RECON_LIST;
  else if (svc->page_count > 0 && !svc->page_checked) svc->phase = PHASE_RECON_COMMITTED;
  else svc->phase = PHASE_RECON_HEAD;
  assert(svc->recon_active);
}

bool cs_svc_recon_advance(cs_service *svc, uint64_t now_ns) {
  assert(!svc->cycle_failed);
  bool next_page = false;
  cycle_phase next = recon_next_phase(svc, now_ns, &next_page);
  /* Within one cycle only move forward on the same page, or on to the next while gathering adoptions. */
  if (next == PHASE_IDLE || (next == PHASE_RECON_LIST && !next_page) || next == svc->phase) return false;
  svc->phase = next;
  return true;
}

bool cs_svc_recon_list_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (cs_svc_lane_inflight(svc, LANE_CYCLE, false) != 0 || svc->page_listed) return false;
  request *req = cs_svc_req_alloc(svc, CS_OP_STORE_LIST, LANE_CYCLE, 0, now_ns);
  svc->cycle_pages++;
  cs_svc_action_init(out, req);
  out->token = svc->token;
  out->count = svc->cfg.list_page_max;
  return true;
}

/*
 * True when key[0..len) has a segment no pack key has: empty, "." or "..".
 * Stores refuse such keys (store.h's key rule) and leave them out of LIST
 * pages; one listed anyway is not a pack of ours, and a HEAD of it or an
 * adoption under it could name another object than the one listed.
 */
static bool key_segment_odd(const char *key, size_t len) {
  assert(key != NULL && len < CS_KEY_MAX);
#if CAPSTORE_MUTANT == 41 /* a listed key with an empty, "." or ".." segment is HEADed and adopted */
  return false;
#endif
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i < len && key[i] != '/') continue;
    size_t seg = i - start;
    if (seg == 0 || (seg <= 2 && key[start] == '.' && key[i - 1] == '.')) return true;
    start = i + 1;
  }
  assert(start == len + 1);
  return false;
}

static void page_add(cs_service *svc, const char *key) {
  size_t len = strnlen(key, CS_KEY_MAX);
  cs_uuid id;
#if CAPSTORE_MUTANT == 20 /* a key that names no pack id is looked up anyway (a zero id) */
  if (cs_key_pack_id(key, len, &id) != CS_E_OK) memset(&id, 0, sizeof id);
  if (len >= CS_KEY_MAX || key_segment_odd(key, len)) {
#else
  if (len >= CS_KEY_MAX || key_segment_odd(key, len) || cs_key_pack_id(key, len, &id) != CS_E_OK) {
#endif
    svc->stats.reconcile_skipped++;
    return;
  }
  if (cs_svc_slot_find(svc, &id) != NULL) return; /* ours, already on its way */
  if (cs_svc_rejected_has(svc, &id)) return;       /* set aside once; never adopted again */
  page_entry *entry = &svc->page[svc->page_count++];
  memset(entry, 0, sizeof *entry);
  entry->ref.pack_id = id;
  int rc = cs_pack_ref_set_key(&entry->ref, key, len);
  assert(rc == CS_E_OK);
  entry->state = PAGE_CANDIDATE;
}

void cs_svc_recon_list_on_done(cs_service *svc, uint64_t now_ns, const cs_event *ev) {
  if (ev->outcome != CS_OUT_OK) {
    cs_svc_set_error(svc, "reconcile LIST", svc->token, ev->outcome);
    svc->cycle_failed = true;
    if (!cs_outcome_is_outage(ev->outcome)) {
      /* Refused for good (403, invalid): retrying at once would not help. */
      svc->stats.reconcile_list_errors++;
      svc->reconcile_errors = true;
      recon_pass_end(svc, now_ns);
    }
    return;
  }
  svc->page_count = 0;
  svc->page_adopted = 0;
  uint32_t n = ev->key_count < svc->cfg.list_page_max ? ev->key_count : svc->cfg.list_page_max;
  for (uint32_t i = 0; i < n && ev->keys != NULL; i++)
    if (ev->keys[i] != NULL) page_add(svc, ev->keys[i]);
  svc->page_listed = true;
  svc->page_checked = false;
  size_t token_len = ev->next_token == NULL ? 0 : strnlen(ev->next_token, CS_KEY_MAX);
  svc->page_last = token_len == 0;
  if (token_len >= CS_KEY_MAX) {
    cs_svc_set_error(svc, "reconcile LIST", "continuation token too long", CS_OUT_INVALID);
    svc->reconcile_errors = true;
    svc->page_last = true;
  } else if (token_len > 0) {
    memcpy(svc->next_token, ev->next_token, token_len);
    svc->next_token[token_len] = '\0';
  }
}

bool cs_svc_recon_committed_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (cs_svc_lane_inflight(svc, LANE_CYCLE, false) != 0 || svc->page_checked) return false;
  assert(svc->page_count <= svc->cfg.list_page_max);
  for (uint32_t i = 0; i < svc->page_count; i++) svc->ids[i] = svc->page[i].ref.pack_id;
  request *req = cs_svc_req_alloc(svc, CS_OP_CAT_COMMITTED, LANE_CYCLE, 0, now_ns);
  cs_svc_action_init(out, req);
  out->ids = svc->ids;
  out->count = svc->page_count;
  return true;
}

void cs_svc_recon_committed_on_done(cs_service *svc, const cs_event *ev) {
  if (ev->outcome != CS_OUT_OK || ev->held == NULL) {
    cs_svc_set_error(svc, "reconcile committed-ids", "page", ev->outcome);
    svc->cycle_failed = true;
    return;
  }
  for (uint32_t i = 0; i < svc->page_count; i++) {
    bool known = ev->held[i] || (ev->rejected != NULL && ev->rejected[i]);
#if CAPSTORE_MUTANT == 21 /* reconcile HEADs every key of the page, held or not */
    known = known && ev->rejected != NULL && ev->rejected[i];
#endif
    svc->page[i].state = known ? PAGE_HELD : PAGE_CANDIDATE;
  }
  svc->page_checked = true;
}

bool cs_svc_recon_head_issue(cs_service *svc, uint64_t now_ns, cs_action *out) {
  if (cs_svc_lane_inflight(svc, LANE_CYCLE, true) >= svc->cfg.store_inflight_max) return false;
  uint32_t querying = page_count_state(svc, PAGE_QUERYING);
  if (cs_svc_owed_count(svc) + querying >= svc->cfg.cycle_packs_max) return false;
  if (svc->adopted_used + querying >= svc->cfg.cycle_packs_max) return false;
  for (uint32_t i = 0; i < svc->page_count; i++) {
    page_entry *entry = &svc->page[i];
    if (entry->state != PAGE_CANDIDATE) continue;
    entry->state = PAGE_QUERYING;
    request *req = cs_svc_req_alloc(svc, CS_OP_STORE_HEAD, LANE_CYCLE, i, now_ns);
    cs_svc_action_init(out, req);
    out->pack = &entry->ref;
    out->head_only = true;
    return true;
  }
  return false;
}

static void adopt(cs_service *svc, page_entry *entry, const cs_head_info *head) {
  if (cs_svc_slot_find(svc, &entry->ref.pack_id) != NULL) return;
  pack_slot *slot = cs_svc_slot_alloc(svc, false);
  assert(slot != NULL); /* bounded by recon_head_issue */
  svc->page_adopted++;
  slot->ref = entry->ref;
  slot->ref.size_bytes = head->size_bytes;
  slot->ref.index_bytes = head->index_bytes;
  slot->ref.record_count = head->record_count;
  slot->ref.created_at_ns = head->created_at_ns;
  memcpy(slot->ref.sha256, head->sha256, sizeof slot->ref.sha256);
  cs_svc_stage_set(svc, slot, STAGE_OWED);
  slot->maybe_uploaded = true;
  svc->stats.reconcile_adopted++;
}

void cs_svc_recon_head_on_done(cs_service *svc, const request *req, const cs_event *ev) {
  assert(req->slot < svc->page_count);
  page_entry *entry = &svc->page[req->slot];
  assert(entry->state == PAGE_QUERYING);
  entry->state = PAGE_DONE;
  if (ev->outcome == CS_OUT_OK) {
    if (ev->head.is_pack && cs_uuid_equal(&ev->head.pack_id, &entry->ref.pack_id))
      adopt(svc, entry, &ev->head);
    else
      svc->stats.reconcile_skipped++; /* a foreign object under our prefix */
    return;
  }
  if (ev->outcome == CS_OUT_NOT_FOUND) return; /* deleted since the LIST */
#if CAPSTORE_MUTANT == 6 /* a HEAD error counted as a skipped object */
  svc->stats.reconcile_skipped++;
  return;
#endif
#if CAPSTORE_MUTANT == 19 /* only a refusal counts as a HEAD error; a HEAD that timed out or failed does not */
  if (!cs_outcome_is_outage(ev->outcome)) svc->stats.reconcile_head_errors++;
#else
  svc->stats.reconcile_head_errors++;
#endif
  cs_svc_set_error(svc, "reconcile HEAD", entry->ref.key, ev->outcome);
  if (cs_outcome_is_outage(ev->outcome)) {
    entry->state = PAGE_CANDIDATE;
    svc->cycle_failed = true;
    return;
  }
  svc->reconcile_errors = true;
}

/*
 * libFuzzer target for the service core's step function: the fuzzer chooses
 * the events, the timestamps, the order in which requests complete and their
 * outcomes and answers. The core must never crash or trip an assertion,
 * never exceed a bound, never issue a request with id 0, and never emit a
 * catalog write without the lease it holds.
 */
#include "capstore/service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTSTANDING_MAX 64u

typedef struct input {
  const uint8_t *data;
  size_t size;
  size_t at;
} input;

static uint8_t take(input *in) { return in->at < in->size ? in->data[in->at++] : 0; }

static uint64_t take_u32(input *in) {
  uint64_t v = 0;
  for (int i = 0; i < 4; i++) v = v << 8 | take(in);
  return v;
}

typedef struct pending {
  uint64_t id;
  cs_op op;
  uint32_t count;
  cs_pack_ref pack;
} pending;

static pending outstanding[OUTSTANDING_MAX];
static uint32_t outstanding_count;

static void check(int cond) {
  if (!cond) abort();
}

static void record(const cs_action *act) {
  check(act->id != 0);
  check(outstanding_count < OUTSTANDING_MAX);
  pending *p = &outstanding[outstanding_count++];
  memset(p, 0, sizeof *p);
  p->id = act->id;
  p->op = act->op;
  p->count = act->count;
  if (act->pack != NULL) p->pack = *act->pack;
}

static void drain(cs_service *svc, uint64_t now) {
  cs_action act;
  for (int guard = 0; guard < 256 && cs_service_poll(svc, now, &act); guard++) {
    if (!cs_op_is_request(act.op)) continue;
    if (act.op == CS_OP_CAT_INDEX || act.op == CS_OP_CAT_PUBLISH) {
      cs_snapshot snap;
      cs_service_snapshot(svc, now, &snap);
      check(snap.lease_state == CS_LEASE_HELD && act.term == snap.lease_term);
    }
    record(&act);
  }
  cs_service_usage usage;
  cs_service_usage_get(svc, &usage);
  check(usage.packs_used <= usage.packs_max && usage.inflight_used <= usage.inflight_max);
  check(usage.flush_used <= usage.flush_max);
}

static void answer(cs_service *svc, uint64_t now, input *in) {
  if (outstanding_count == 0) return;
  uint32_t pick = take(in) % outstanding_count;
  pending p = outstanding[pick];
  outstanding[pick] = outstanding[--outstanding_count];
  static bool held[1024];
  static char key_storage[4][64];
  static const char *keys[4];
  cs_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = CS_EV_DONE;
  ev.id = p.id;
  ev.outcome = (cs_outcome)(take(in) % CS_OUT_COUNT_);
  uint8_t shape = take(in);
  ev.head.is_pack = shape & 1;
  ev.head.size_bytes = (shape & 2) ? p.pack.size_bytes : take_u32(in);
  if (shape & 4) memcpy(ev.head.sha256, p.pack.sha256, 32);
  ev.head.pack_id = p.pack.pack_id;
  ev.head.index_bytes = take_u32(in);
  ev.cat_head.head_term = take(in);
  ev.cat_head.head_free = shape & 8;
  ev.cat_head.watermark = take(in);
  ev.claims.claim_count = take(in) % 3;
  ev.claims.sole_mine = shape & 16;
  for (uint32_t i = 0; i < 1024; i++) held[i] = (take(in) & 1) != 0;
  ev.held = held;
  for (uint32_t i = 0; i < 4; i++) {
    uint8_t b = take(in);
    snprintf(key_storage[i], sizeof key_storage[i], b & 1 ? "c/v1/x/0190a0b0-0000-7000-8000-0000000000%02x.dmi-pack"
                                                          : "c/v1/x/junk-%u", b);
    keys[i] = key_storage[i];
  }
  ev.keys = keys;
  ev.key_count = take(in) % 5;
  ev.next_token = (shape & 32) ? keys[0] : "";
  check(cs_service_on_event(svc, now, &ev) == CS_E_OK);
}

static void seal(cs_service *svc, uint64_t now, input *in, uint32_t *next_pack) {
  cs_pack_ref ref;
  memset(&ref, 0, sizeof ref);
  uint32_t n = (*next_pack)++;
  memcpy(ref.pack_id.bytes, &n, sizeof n);
  ref.size_bytes = take_u32(in);
  ref.index_bytes = take_u32(in) % 40000;
  ref.record_count = take(in);
  ref.sha256[0] = take(in);
  char key[80];
  int len = snprintf(key, sizeof key, "c/v1/p/%u.dmi-pack", n);
  cs_pack_ref_set_key(&ref, key, (size_t)len);
  cs_event ev = {.kind = CS_EV_SEALED, .pack = &ref, .recovered = take(in) & 1};
  int rc = cs_service_on_event(svc, now, &ev);
  check(rc == CS_E_OK || rc == CS_E_FULL || rc == CS_E_CLOSED);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input in = {.data = data, .size = size};
  cs_service_config cfg;
  cs_service_config_default(&cfg, (take(&in) & 1) ? CS_ROLE_PUBLISHER : CS_ROLE_UPLOADER);
  cfg.store_lists_complete = true;
  cfg.spool_packs_max = 8;
  cfg.cycle_packs_max = 4;
  cfg.store_inflight_max = 2;
  cfg.index_batch_bytes_max = 20000;
  cfg.list_page_max = 4;
  cfg.flush_max = 2;
  cfg.rejected_max = 4;
  static _Alignas(16) uint8_t mem[1 << 20];
  check(cs_service_memory_size(&cfg) <= sizeof mem);
  cs_service *svc = NULL;
  cs_uuid lease = {{1}};
  check(cs_service_init(&svc, mem, sizeof mem, &cfg, &lease, 7, NULL, 0) == CS_E_OK);
  outstanding_count = 0;
  uint64_t now = 0;
  uint32_t next_pack = 1;
  cs_event start = {.kind = CS_EV_START};
  check(cs_service_on_event(svc, now, &start) == CS_E_OK);
  while (in.at < in.size) {
    uint8_t op = take(&in);
    now += (uint64_t)take(&in) * (op & 0x80 ? CS_SEC_NS : CS_MS_NS);
    switch (op % 8) {
    case 0: seal(svc, now, &in, &next_pack); break;
    case 1:
    case 2:
    case 3: answer(svc, now, &in); break;
    case 4: {
      cs_event ev = {.kind = CS_EV_FLUSH, .id = take(&in), .deadline_ns = now + take(&in) * CS_MS_NS};
      check(cs_service_on_event(svc, now, &ev) == CS_E_OK);
      break;
    }
    case 5: {
      cs_event ev = {.kind = (take(&in) & 1) ? CS_EV_STOP : CS_EV_RELEASE};
      check(cs_service_on_event(svc, now, &ev) == CS_E_OK);
      break;
    }
    case 6: {
      cs_event ev = {.kind = CS_EV_DONE, .id = 1000000 + take(&in), .outcome = CS_OUT_OK};
      check(cs_service_on_event(svc, now, &ev) == CS_E_INVALID_ARGUMENT);
      break;
    }
    default: {
      uint64_t dl = cs_service_next_deadline(svc);
      if (dl != CS_NEVER && dl > now && dl - now < 3600 * CS_SEC_NS) now = dl;
      break;
    }
    }
    drain(svc, now);
  }
  cs_snapshot snap;
  cs_service_snapshot(svc, now, &snap);
  check(snap.inflight == outstanding_count);
  return 0;
}

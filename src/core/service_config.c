/* The service core's configuration: defaults, validation and memory sizing. */
#include "service_internal.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

void cs_service_config_default(cs_service_config *cfg, cs_role role) {
  assert(cfg != NULL);
  memset(cfg, 0, sizeof *cfg);
  cfg->role = role;
  cfg->spool_packs_max = 1024;
  cfg->cycle_packs_max = 64;
  cfg->store_inflight_max = 4;
  cfg->index_batch_bytes_max = 8u * 1024u * 1024u;
  cfg->index_attempts_max = 5;
  cfg->backoff_base_ns = 200 * CS_MS_NS;
  cfg->backoff_cap_ns = 30 * CS_SEC_NS;
  cfg->lease_ttl_ns = 30 * CS_SEC_NS;
  cfg->lease_guard_ns = 2 * CS_SEC_NS;
  cfg->reconcile_interval_ns = 300 * CS_SEC_NS;
  cfg->reconcile_at_start = true;
  cfg->list_page_max = 1000;
  cfg->flush_max = 8;
  cfg->rejected_max = 256;
  cfg->request_timeout_ns = 10 * CS_SEC_NS;
  cfg->store_lists_complete = false; /* unknown until the store is probed */
  cfg->index_settle_ns = CS_SEC_NS; /* the ClickHouse adapter's default fence margin */
}

/* Writes "field: why" into msg and returns CS_E_CONFIG. */
static int refuse(char *msg, size_t msg_size, const char *field, const char *why) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "%s %s", field, why);
  return CS_E_CONFIG;
}

#define NEED(cond, field, why)                                                                   \
  do {                                                                                           \
    if (!(cond)) return refuse(msg, msg_size, field, why);                                       \
  } while (0)

int cs_service_config_validate(const cs_service_config *cfg, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  NEED(cfg != NULL, "config", "is missing");
  NEED(cfg->role == CS_ROLE_PUBLISHER || cfg->role == CS_ROLE_UPLOADER, "role",
       "must be publisher or uploader");
  NEED(cfg->spool_packs_max >= 1 && cfg->spool_packs_max <= 1000000, "spool_packs_max",
       "must be 1..1000000");
  NEED(cfg->cycle_packs_max >= 1 && cfg->cycle_packs_max <= 65536, "cycle_packs_max",
       "must be 1..65536");
  NEED(cfg->store_inflight_max >= 1 && cfg->store_inflight_max <= 256, "store_inflight_max",
       "must be 1..256");
  NEED(cfg->index_batch_bytes_max >= 1, "index_batch_bytes_max", "must be > 0");
  NEED(cfg->index_attempts_max >= 1 && cfg->index_attempts_max <= 1000, "index_attempts_max",
       "must be 1..1000");
  NEED(cfg->backoff_base_ns >= CS_MS_NS, "backoff_base_ns", "must be >= 1 ms");
  NEED(cfg->backoff_cap_ns >= cfg->backoff_base_ns, "backoff_cap_ns", "must be >= backoff_base_ns");
  NEED(cfg->backoff_cap_ns <= 3600 * CS_SEC_NS, "backoff_cap_ns", "must be <= 1 h");
  NEED(cfg->lease_ttl_ns >= 3 * CS_MS_NS, "lease_ttl_ns", "must be >= 3 ms");
  NEED(cfg->lease_ttl_ns <= 3600 * CS_SEC_NS, "lease_ttl_ns", "must be <= 1 h");
#if CAPSTORE_MUTANT == 42 /* a guard of exactly a third of the TTL is accepted */
  NEED(cfg->lease_guard_ns <= cfg->lease_ttl_ns / 3, "lease_guard_ns", "must be < lease_ttl_ns / 3");
#else
  NEED(cfg->lease_guard_ns < cfg->lease_ttl_ns / 3, "lease_guard_ns", "must be < lease_ttl_ns / 3");
#endif
  NEED(cfg->reconcile_interval_ns == 0 || cfg->reconcile_interval_ns >= CS_MS_NS,
       "reconcile_interval_ns", "must be 0 (start only) or >= 1 ms");
  NEED(cfg->reconcile_interval_ns <= 7 * 24 * 3600 * CS_SEC_NS, "reconcile_interval_ns", "must be <= 7 days");
  NEED(cfg->request_timeout_ns <= 3600 * CS_SEC_NS, "request_timeout_ns", "must be <= 1 h");
  NEED(cfg->list_page_max >= 1 && cfg->list_page_max <= 1000, "list_page_max", "must be 1..1000");
  NEED(cfg->flush_max >= 1 && cfg->flush_max <= 64, "flush_max", "must be 1..64");
  NEED(cfg->rejected_max >= 1 && cfg->rejected_max <= 65536, "rejected_max", "must be 1..65536");
  NEED(cfg->request_timeout_ns >= CS_MS_NS, "request_timeout_ns", "must be >= 1 ms");
  NEED(cfg->index_settle_ns <= 3600 * CS_SEC_NS, "index_settle_ns", "must be <= 1 h");
#if CAPSTORE_MUTANT == 13 /* an uploader runs on a store whose LIST pages skip keys */
  NEED(true, "store_lists_complete",
#else
  NEED(cfg->role != CS_ROLE_UPLOADER || cfg->store_lists_complete, "store_lists_complete",
#endif
       "is false (the store's LIST pages can skip keys): an uploader's packs would be found only by a "
       "reconcile that may skip them; run uploaders on a store that lists bytewise");
  return CS_E_OK;
}

/* Parses an optional ":port" at text[0..len); true when absent or 1..65535. */
static bool port_ok(const char *text, size_t len) {
  if (len == 0) return true;
  if (text[0] != ':' || len < 2 || len > 6) return false;
  uint32_t port = 0;
  for (size_t i = 1; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') return false;
    port = port * 10 + (uint32_t)(text[i] - '0');
  }
  return port >= 1 && port <= 65535;
}

#define IPV6_TEXT_MAX 45 /* "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255" */

static bool ipv6_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
}

/*
 * What is wrong with host[0..len), an IPv6 literal in brackets and an
 * optional ":port" after it (RFC 3986: "[::1]:8123"); NULL when nothing.
 * The literal is held to hex digits, ':' and '.' (no zone identifier).
 */
static const char *ipv6_host_problem(const char *host, size_t len) {
  assert(len > 0 && host[0] == '[');
  const char *close = memchr(host, ']', len);
  if (close == NULL) return "has an IPv6 address without its closing ']'";
  size_t text_len = (size_t)(close - host) - 1;
  if (text_len == 0) return "has an empty IPv6 address in brackets";
  bool colon = false, other = false;
  for (size_t i = 1; i <= text_len; i++) {
    other = other || !ipv6_char(host[i]);
    colon = colon || host[i] == ':';
  }
  if (!colon || other || text_len > IPV6_TEXT_MAX) {
    return "has a malformed IPv6 address in brackets (hex digits, ':' and '.' only)";
  }
  size_t rest = len - (size_t)(close - host) - 1;
  assert(rest < len);
  if (rest > 0 && close[1] != ':') return "has something other than :port after ']'";
  return port_ok(close + 1, rest) ? NULL : "has a port outside 1..65535";
}

/* The same for a host name or IPv4 address and an optional ":port". */
static const char *name_host_problem(const char *host, size_t len) {
  assert(len > 0 && host[0] != '[');
  if (memchr(host, '[', len) != NULL || memchr(host, ']', len) != NULL) {
    return "has a '[' or ']' outside an IPv6 address in brackets";
  }
  const char *colon = memchr(host, ':', len);
  size_t name_len = colon == NULL ? len : (size_t)(colon - host);
  if (colon != NULL && memchr(colon + 1, ':', len - name_len - 1) != NULL) {
    return "has an IPv6 address without brackets (write https://[address]:port/)";
  }
  if (name_len == 0) return "has no host name";
  return port_ok(host + name_len, len - name_len) ? NULL : "has a port outside 1..65535";
}

int cs_endpoint_validate(const char *field, const char *url, bool allow_insecure, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (field == NULL) field = "endpoint";
  NEED(url != NULL && url[0] != '\0', field, "is empty");
  size_t skip;
  if (strncmp(url, "https://", 8) == 0) skip = 8;
  else if (strncmp(url, "http://", 7) == 0) skip = 7;
  else return refuse(msg, msg_size, field, "needs an explicit scheme: https:// (or http:// when insecure is allowed)");
  NEED(skip == 8 || allow_insecure, field, "uses http:// but insecure endpoints are not allowed");
  const char *host = url + skip;
  size_t host_len = strcspn(host, "/?#");
  NEED(host_len > 0, field, "has no host");
  for (size_t i = 0; i < host_len; i++) {
    unsigned char c = (unsigned char)host[i];
    NEED(c > 0x20 && c < 0x7f && c != '@', field, "has a space, a control byte or userinfo in its host");
  }
  const char *problem = host[0] == '[' ? ipv6_host_problem(host, host_len) : name_host_problem(host, host_len);
  NEED(problem == NULL, field, problem);
  return CS_E_OK;
}

/* Rounds n up to a multiple of 16 so every carved array stays aligned. */
static size_t align16(size_t n) { return (n + 15u) & ~(size_t)15u; }

typedef struct layout {
  size_t service, slots, requests, work, batches, batch_refs, ids, id_slots, page, flushes,
      rejected, notes, total;
} layout;

static uint32_t id_capacity(const cs_service_config *cfg) {
  return cfg->cycle_packs_max > cfg->list_page_max ? cfg->cycle_packs_max : cfg->list_page_max;
}

static void layout_compute(const cs_service_config *cfg, layout *out) {
  uint32_t slot_count = cfg->spool_packs_max + cfg->cycle_packs_max;
  uint32_t request_max = 2u * cfg->store_inflight_max + 2u;
  uint32_t ids = id_capacity(cfg);
  size_t at = 0;
  out->service = at, at += align16(sizeof(cs_service));
  out->slots = at, at += align16(sizeof(pack_slot) * slot_count);
  out->requests = at, at += align16(sizeof(request) * request_max);
  out->work = at, at += align16(sizeof(uint32_t) * cfg->cycle_packs_max);
  out->batches = at, at += align16(sizeof(batch_range) * cfg->cycle_packs_max);
  out->batch_refs = at, at += align16(sizeof(cs_pack_ref *) * cfg->cycle_packs_max);
  out->ids = at, at += align16(sizeof(cs_uuid) * ids);
  out->id_slots = at, at += align16(sizeof(uint32_t) * ids);
  out->page = at, at += align16(sizeof(page_entry) * cfg->list_page_max);
  out->flushes = at, at += align16(sizeof(flush_entry) * cfg->flush_max);
  out->rejected = at, at += align16(sizeof(rejected_entry) * cfg->rejected_max);
  out->notes = at, at += align16(sizeof(cs_action) * (cfg->flush_max + 2u));
  out->total = at;
}

size_t cs_service_memory_size(const cs_service_config *cfg) {
  if (cs_service_config_validate(cfg, NULL, 0) != CS_E_OK) return 0;
  layout l;
  layout_compute(cfg, &l);
  return l.total;
}

int cs_service_init(cs_service **out, void *mem, size_t mem_size, const cs_service_config *cfg,
                    const cs_uuid *lease_id, uint64_t seed, char *msg, size_t msg_size) {
  if (out == NULL || lease_id == NULL) return CS_E_INVALID_ARGUMENT;
  int rc = cs_service_config_validate(cfg, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  layout l;
  layout_compute(cfg, &l);
  if (mem == NULL || mem_size < l.total || ((uintptr_t)mem & 15u) != 0) {
    if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "memory: need %zu bytes, 16-aligned", l.total);
    return CS_E_NO_MEMORY;
  }
  uint8_t *base = mem;
  memset(base, 0, l.total);
  cs_service *svc = (cs_service *)(void *)(base + l.service);
  svc->cfg = *cfg;
  svc->lease_id = *lease_id;
  /*
   * The jitters (backoff, contested claims) must differ between processes:
   * two with one seed would back off in step and contest every term again.
   * Lease ids are unique per instance, so they are folded into the seed.
   */
  uint64_t mixed = seed;
  for (int i = 0; i < 16; i++) mixed = (mixed ^ lease_id->bytes[i]) * UINT64_C(0x100000001b3);
  cs_prng_seed(&svc->prng, mixed);
  svc->slots = (pack_slot *)(void *)(base + l.slots);
  svc->slot_count = cfg->spool_packs_max + cfg->cycle_packs_max;
  svc->requests = (request *)(void *)(base + l.requests);
  svc->request_max = 2u * cfg->store_inflight_max + 2u;
  svc->work = (uint32_t *)(void *)(base + l.work);
  svc->batches = (batch_range *)(void *)(base + l.batches);
  svc->batch_refs = (const cs_pack_ref **)(void *)(base + l.batch_refs);
  svc->ids = (cs_uuid *)(void *)(base + l.ids);
  svc->id_slots = (uint32_t *)(void *)(base + l.id_slots);
  svc->page = (page_entry *)(void *)(base + l.page);
  svc->flushes = (flush_entry *)(void *)(base + l.flushes);
  svc->rejected = (rejected_entry *)(void *)(base + l.rejected);
  svc->notes = (cs_action *)(void *)(base + l.notes);
  svc->note_max = cfg->flush_max + 2u;
  svc->next_request_id = 1;
  svc->next_seal_seq = 1;
  svc->next_version = 1;
  svc->lease = CS_LEASE_NONE;
  *out = svc;
  assert(svc->slot_count > 0 && svc->request_max >= 4);
  return CS_E_OK;
}

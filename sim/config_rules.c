/*
 * Clause 6.10 seen by the checker: the service, sink and engine configs are validated at
 * construction, and a bad value is refused with a message naming the field.
 *
 * The rules below are the simulator's own copy of the contract's limits
 * (docs/operations.md, include/capstore/service.h), written without reading
 * the core's checks: every bound is tried at its edge (accepted) and one
 * step past it (refused, the message starting with the field's name), from a
 * valid base. Endpoints get a corpus of URLs, each with the verdict the rule
 * gives. Runs once per run, before the world starts: a validation that
 * drifts from the contract fails seed 1.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "world.h"

#define MS CS_MS_NS
#define SEC CS_SEC_NS
#define HOUR (3600 * SEC)

typedef enum which_config { SVC, SINK, ENGINE } which_config;

typedef struct bound_rule {
  which_config which;
  const char *field;
  size_t offset;
  uint8_t width;   /* 4 or 8 bytes */
  uint64_t min;    /* smallest accepted */
  uint64_t max;    /* largest accepted; UINT64_MAX: none */
  bool zero_ok;    /* 0 is accepted too (reconcile_interval_ns: start only) */
} bound_rule;

#define RULE32(f, lo, hi) {SVC, #f, offsetof(cs_service_config, f), 4, lo, hi, false}
#define RULE64(f, lo, hi) {SVC, #f, offsetof(cs_service_config, f), 8, lo, hi, false}
#define SINK32(f, lo, hi) {SINK, #f, offsetof(cs_sink_config, f), 4, lo, hi, false}
#define SINK64(f, lo, hi) {SINK, #f, offsetof(cs_sink_config, f), 8, lo, hi, false}
#define ENG64(f, lo, hi) {ENGINE, #f, offsetof(cs_engine_config, f), 8, lo, hi, false}
#define KIB 1024u
#define MIB (1024u * KIB)

static const bound_rule bounds[] = {
    RULE32(spool_packs_max, 1, 1000000),
    RULE32(cycle_packs_max, 1, 65536),
    RULE32(store_inflight_max, 1, 256),
    RULE64(index_batch_bytes_max, 1, UINT64_MAX),
    RULE32(index_attempts_max, 1, 1000),
    RULE64(backoff_base_ns, MS, 30 * SEC), /* the base's top is the cap (30 s in the base config) */
    RULE64(backoff_cap_ns, 30 * SEC, HOUR), /* its floor is the base (30 s here, set below) */
    RULE64(lease_ttl_ns, 3 * MS, HOUR),
    {SVC, "reconcile_interval_ns", offsetof(cs_service_config, reconcile_interval_ns), 8, MS, 7 * 24 * HOUR, true},
    RULE64(request_timeout_ns, MS, HOUR),
    RULE64(index_settle_ns, 0, HOUR),
    RULE32(list_page_max, 1, 1000),
    RULE32(flush_max, 1, 64),
    RULE32(rejected_max, 1, 65536),
    SINK32(pack_records_max, 1, 1000000),
    SINK64(pack_bytes_max, 1, 64 * MIB), /* its top is spool_bytes_max (64 MiB in the base config) */
    SINK64(pack_footer_bytes_max, 64 * KIB, 64 * MIB),
    SINK64(linger_ns, MS, UINT64_MAX),
    SINK64(spool_bytes_max, 64 * MIB, UINT64_MAX), /* its floor is pack_bytes_max */
    SINK32(spool_packs_max, 1, UINT32_MAX),
    SINK64(block_max_ns, MS, UINT64_MAX),
    ENG64(start_timeout_ns, MS, UINT64_MAX),
    ENG64(stop_reserve_ns, MS, UINT64_MAX),
};

/* One config of each kind; a rule changes the one it names. */
typedef struct configs {
  cs_service_config svc;
  cs_sink_config sink;
  cs_engine_config engine;
} configs;

/* Valid configs every rule starts from: a rule's edges stay inside every other rule. */
static configs base_configs(void) {
  configs c;
  cs_service_config_default(&c.svc, CS_ROLE_PUBLISHER);
  c.svc.backoff_base_ns = 30 * SEC;
  c.svc.backoff_cap_ns = 30 * SEC;
  c.svc.lease_guard_ns = 0; /* under lease_ttl_ns / 3 at every TTL the rule tries */
  cs_sink_config_default(&c.sink);
  c.sink.pack_bytes_max = 64 * MIB;
  c.sink.spool_bytes_max = 64 * MIB;
  cs_engine_config_default(&c.engine);
  return c;
}

static void set_field(configs *c, const bound_rule *r, uint64_t v) {
  uint8_t *base = r->which == SVC ? (uint8_t *)&c->svc : r->which == SINK ? (uint8_t *)&c->sink : (uint8_t *)&c->engine;
  uint8_t *at = base + r->offset;
  if (r->width == 4) {
    uint32_t v32 = (uint32_t)v;
    memcpy(at, &v32, 4);
  } else {
    memcpy(at, &v, 8);
  }
}

/* The config must be accepted (field NULL) or refused with a message that starts with field. */
static void expect_of(sim_world *w, which_config which, const configs *c, const char *field, const char *what) {
  char msg[256];
  int rc = which == SVC    ? cs_service_config_validate(&c->svc, msg, sizeof msg)
           : which == SINK ? cs_sink_config_validate(&c->sink, msg, sizeof msg)
                           : cs_engine_config_validate(&c->engine, msg, sizeof msg);
  if (field == NULL && rc != CS_E_OK)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): %s was refused: %s", what, msg);
  if (field == NULL) return;
  size_t n = strlen(field);
  if (rc != CS_E_CONFIG)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): %s was not refused (rc %d)", what, rc);
  if (strncmp(msg, field, n) != 0 || msg[n] != ' ')
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): %s was refused without naming %s: '%s'", what, field, msg);
}

static void expect(sim_world *w, const cs_service_config *cfg, const char *field, const char *what) {
  configs c = base_configs();
  c.svc = *cfg;
  expect_of(w, SVC, &c, field, what);
}

/* The field a value past r's edge is refused under: the other side of a rule that ties two fields. */
static const char *refused_as(const bound_rule *r, bool over) {
  if (over && strcmp(r->field, "backoff_base_ns") == 0) return "backoff_cap_ns";
  if (over && strcmp(r->field, "pack_bytes_max") == 0) return "spool_bytes_max";
  return r->field;
}

static void check_bound(sim_world *w, const bound_rule *r) {
  char what[160];
  uint64_t width_max = r->width == 4 ? UINT32_MAX : UINT64_MAX;
  configs c = base_configs();
  set_field(&c, r, r->min);
  snprintf(what, sizeof what, "%s = %" PRIu64 " (its smallest)", r->field, r->min);
  expect_of(w, r->which, &c, NULL, what);
  if (r->min > 0) {
    c = base_configs();
    set_field(&c, r, r->min - 1);
    snprintf(what, sizeof what, "%s = %" PRIu64 " (under its smallest)", r->field, r->min - 1);
    expect_of(w, r->which, &c, r->zero_ok && r->min - 1 == 0 ? NULL : refused_as(r, false), what);
  }
  if (r->zero_ok) {
    c = base_configs();
    set_field(&c, r, 0);
    snprintf(what, sizeof what, "%s = 0", r->field);
    expect_of(w, r->which, &c, NULL, what);
  }
  uint64_t top = r->max < width_max ? r->max : width_max;
  c = base_configs();
  set_field(&c, r, top);
  snprintf(what, sizeof what, "%s = %" PRIu64 " (its largest)", r->field, top);
  expect_of(w, r->which, &c, NULL, what);
  if (r->max < width_max) {
    c = base_configs();
    set_field(&c, r, r->max + 1);
    snprintf(what, sizeof what, "%s = %" PRIu64 " (over its largest)", r->field, r->max + 1);
    expect_of(w, r->which, &c, refused_as(r, true), what);
  }
}

static cs_service_config base_config(void) { return base_configs().svc; }

/* The rules that tie two fields. */
static void check_relations(sim_world *w) {
  cs_service_config cfg = base_config();
  cfg.lease_ttl_ns = 30 * SEC;
  cfg.lease_guard_ns = 10 * SEC - 1;
  expect(w, &cfg, NULL, "lease_guard_ns just under lease_ttl_ns / 3");
  cfg.lease_guard_ns = 10 * SEC;
  expect(w, &cfg, "lease_guard_ns", "lease_guard_ns = lease_ttl_ns / 3");
  cfg = base_config();
  cfg.lease_ttl_ns = 3 * MS;
  cfg.lease_guard_ns = 0;
  expect(w, &cfg, NULL, "lease_ttl_ns = 3 ms with no guard");
  cfg.lease_guard_ns = 1 * MS;
  expect(w, &cfg, "lease_guard_ns", "lease_guard_ns = 1 ms with lease_ttl_ns = 3 ms");
  cfg = base_config();
  cfg.backoff_base_ns = 5 * SEC;
  cfg.backoff_cap_ns = 5 * SEC - 1;
  expect(w, &cfg, "backoff_cap_ns", "backoff_cap_ns under backoff_base_ns");
  cfg = base_config();
  cfg.role = (cs_role)7;
  expect(w, &cfg, "role", "role 7");
  cfg = base_config();
  cfg.role = CS_ROLE_UPLOADER;
  cfg.store_lists_complete = false;
  expect(w, &cfg, "store_lists_complete", "an uploader on a store whose LIST pages skip keys");
  cfg.store_lists_complete = true;
  expect(w, &cfg, NULL, "an uploader on a store that lists bytewise");
  cfg.role = CS_ROLE_PUBLISHER;
  cfg.store_lists_complete = false;
  expect(w, &cfg, NULL, "a publisher on a store whose LIST pages skip keys");
  configs c = base_configs();
  c.sink.full_policy = (cs_full_policy)9;
  expect_of(w, SINK, &c, "full_policy", "full_policy 9");
  c = base_configs();
  c.sink.full_policy = CS_FULL_REFUSE;
  c.sink.block_max_ns = 0;
  expect_of(w, SINK, &c, NULL, "block_max_ns = 0 when full captures are refused, not blocked");
  c.sink.full_policy = CS_FULL_BLOCK;
  expect_of(w, SINK, &c, "block_max_ns", "block_max_ns = 0 when full captures block");
}

typedef struct endpoint_case {
  const char *url;
  bool insecure_ok;
  bool valid;
} endpoint_case;

static const endpoint_case endpoints[] = {
    {"https://s3.example.com", false, true},
    {"https://s3.example.com:9000/bucket", false, true},
    {"https://10.0.0.1:1/", false, true},
    {"https://h:65535", false, true},
    {"https://[::1]:8123/", false, true},
    {"https://[2001:db8::1]", false, true},
    {"http://127.0.0.1:8123", true, true},
    {"http://127.0.0.1:8123", false, false},
    {"", false, false},
    {"s3.example.com", false, false},
    {"ftp://s3.example.com", false, false},
    {"https://", false, false},
    {"https:///path", false, false},
    {"https://:9000", false, false},
    {"https://h:0", false, false},
    {"https://h:65536", false, false},
    {"https://h:", false, false},
    {"https://h:12a", false, false},
    {"https://user@h", false, false},
    {"https://h st", false, false},
    {"https://::1", false, false},
    {"https://[::1", false, false},
    {"https://[]:80", false, false},
    {"https://[zz::1]", false, false},
    {"https://[::1]x", false, false},
    {"https://[::1]:0", false, false},
    {"https://h]", false, false},
    {"https://@h", false, false},
    {"https://h\x7f", false, false},
    {"https://h\x1f:80", false, false},
    {"https://[::`1]", false, false},
    {"https://[::g1]", false, false},
    {"https://[fe80::1%25eth0]", false, false},
    {"https://[FE80::A:b]:443", false, true},
    {"https://[2001:db8::9a]", false, true},
    {"http:/hh", true, false},
    {"https:/hh", false, false},
};

static void check_endpoints(sim_world *w) {
  for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++) {
    const endpoint_case *c = &endpoints[i];
    char msg[256];
    int rc = cs_endpoint_validate("catalog_url", c->url, c->insecure_ok, msg, sizeof msg);
    if (c->valid && rc != CS_E_OK)
      sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): endpoint '%s'%s was refused: %s", c->url,
               c->insecure_ok ? " (insecure allowed)" : "", msg);
    if (!c->valid && rc != CS_E_CONFIG)
      sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): endpoint '%s'%s was not refused", c->url,
               c->insecure_ok ? " (insecure allowed)" : "");
    if (!c->valid && strncmp(msg, "catalog_url ", 12) != 0)
      sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): endpoint '%s' was refused without naming its field: '%s'",
               c->url, msg);
  }
}

/* The documented defaults (include/capstore/service.h, sink.h, engine.h), field by field and nothing else set. */
static void check_defaults(sim_world *w) {
  cs_service_config want, got;
  memset(&want, 0, sizeof want);
  want.role = CS_ROLE_UPLOADER;
  want.spool_packs_max = 1024;
  want.cycle_packs_max = 64;
  want.store_inflight_max = 4;
  want.index_batch_bytes_max = 8 * MIB;
  want.index_attempts_max = 5;
  want.backoff_base_ns = 200 * MS;
  want.backoff_cap_ns = 30 * SEC;
  want.lease_ttl_ns = 30 * SEC;
  want.lease_guard_ns = 2 * SEC;
  want.reconcile_interval_ns = 300 * SEC;
  want.reconcile_at_start = true;
  want.list_page_max = 1000;
  want.flush_max = 8;
  want.rejected_max = 256;
  want.request_timeout_ns = 10 * SEC;
  want.store_lists_complete = false;
  want.index_settle_ns = SEC;
  cs_service_config_default(&got, CS_ROLE_UPLOADER);
  if (memcmp(&want, &got, sizeof want) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): the service config's defaults are not the documented ones");
  cs_sink_config sink_want, sink_got;
  memset(&sink_want, 0, sizeof sink_want);
  sink_want.pack_records_max = 4096;
  sink_want.pack_bytes_max = 64 * MIB;
  sink_want.pack_footer_bytes_max = 60 * MIB;
  sink_want.linger_ns = SEC;
  sink_want.spool_bytes_max = 8192ull * MIB;
  sink_want.spool_packs_max = 4096;
  sink_want.full_policy = CS_FULL_BLOCK;
  sink_want.block_max_ns = 5 * SEC;
  cs_sink_config_default(&sink_got);
  if (memcmp(&sink_want, &sink_got, sizeof sink_want) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): the sink config's defaults are not the documented ones");
  cs_engine_config eng_want, eng_got;
  memset(&eng_want, 0, sizeof eng_want);
  eng_want.start_timeout_ns = 30 * SEC;
  eng_want.stop_reserve_ns = 5 * SEC;
  cs_engine_config_default(&eng_got);
  if (memcmp(&eng_want, &eng_got, sizeof eng_want) != 0)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): the engine config's defaults are not the documented ones");
}

/* Construction refuses what it cannot use: no output, no lease id, too little or unaligned memory. */
static void check_init_arguments(sim_world *w) {
  cs_service_config cfg = base_config();
  cfg.spool_packs_max = 8; /* small tables: the memory below holds them */
  cfg.cycle_packs_max = 4;
  cfg.list_page_max = 8;
  cfg.rejected_max = 4;
  static uint64_t mem[1 << 14];
  size_t need = cs_service_memory_size(&cfg);
  cs_uuid id;
  memset(&id, 1, sizeof id);
  cs_service *svc = NULL;
  char msg[128];
  if (need == 0 || need > sizeof mem)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): memory size %zu for the base config", need);
  if (cs_service_init(NULL, mem, sizeof mem, &cfg, &id, 1, msg, sizeof msg) != CS_E_INVALID_ARGUMENT ||
      cs_service_init(&svc, mem, sizeof mem, &cfg, NULL, 1, msg, sizeof msg) != CS_E_INVALID_ARGUMENT)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): service init without an output or a lease id was not refused");
  msg[0] = '\0';
  if (cs_service_init(&svc, mem, need - 1, &cfg, &id, 1, msg, sizeof msg) != CS_E_NO_MEMORY ||
      strstr(msg, "memory") == NULL ||
      cs_service_init(&svc, (uint8_t *)mem + 8, need, &cfg, &id, 1, msg, sizeof msg) != CS_E_NO_MEMORY)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): service init with too little or unaligned memory was not refused"
             " with a message naming the memory: '%s'", msg);
  if (cs_service_init(&svc, mem, need, &cfg, &id, 1, msg, sizeof msg) != CS_E_OK || svc == NULL)
    sim_bail(w, SIM_EXIT_SAFETY, "config rule (6.10): service init refused the base config: %s", msg);
}

void sim_check_config_rules(sim_world *w) {
  check_defaults(w);
  check_init_arguments(w);
  check_relations(w);
  for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) check_bound(w, &bounds[i]);
  check_endpoints(w);
}

/* The contract's verdict on a service config, from the rules above (not the core's checks). */
bool sim_config_valid_by_spec(const cs_service_config *c) {
  bool ok = c->role == CS_ROLE_PUBLISHER || c->role == CS_ROLE_UPLOADER;
  ok = ok && c->spool_packs_max >= 1 && c->spool_packs_max <= 1000000;
  ok = ok && c->cycle_packs_max >= 1 && c->cycle_packs_max <= 65536;
  ok = ok && c->store_inflight_max >= 1 && c->store_inflight_max <= 256;
  ok = ok && c->index_batch_bytes_max >= 1;
  ok = ok && c->index_attempts_max >= 1 && c->index_attempts_max <= 1000;
  ok = ok && c->backoff_base_ns >= MS && c->backoff_cap_ns >= c->backoff_base_ns && c->backoff_cap_ns <= HOUR;
  ok = ok && c->lease_ttl_ns >= 3 * MS && c->lease_ttl_ns <= HOUR && c->lease_guard_ns < c->lease_ttl_ns / 3;
  ok = ok && (c->reconcile_interval_ns == 0 || c->reconcile_interval_ns >= MS) &&
       c->reconcile_interval_ns <= 7 * 24 * HOUR;
  ok = ok && c->request_timeout_ns >= MS && c->request_timeout_ns <= HOUR;
  ok = ok && c->list_page_max >= 1 && c->list_page_max <= 1000;
  ok = ok && c->flush_max >= 1 && c->flush_max <= 64;
  ok = ok && c->rejected_max >= 1 && c->rejected_max <= 65536;
  ok = ok && c->index_settle_ns <= HOUR;
  return ok && (c->role != CS_ROLE_UPLOADER || c->store_lists_complete);
}

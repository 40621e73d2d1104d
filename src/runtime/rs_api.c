/*
 * The service runtime's public API (capstore.h): configuration, open, the
 * capture calls, flush, close and stats. API calls never touch a core: they
 * post a call to the driver and wait for the engine's REPORT.
 */
#include "rs_internal.h"
#include "runtime_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#define MS CS_MS_NS
#define SEC CS_SEC_NS
#define KEY_PREFIX_MAX 256u
#define FLUSH_POLL_NS (20 * MS) /* what a flush whose deadline passed gets: a poll */

struct capstore {
  rs_runtime rt;
  pthread_mutex_t api_mutex; /* one API call (open, flush, close) at a time */
};

uint64_t capstore_clock_ns(void) { return cs_capture_clock_ns(); }

void capstore_config_default(capstore_config *cfg) {
  assert(cfg != NULL);
  memset(cfg, 0, sizeof *cfg);
  cfg->name = "capstore";
  cfg->role = CS_ROLE_PUBLISHER;
  cfg->reconcile_at_start = true;
  cfg->fence_margin_ns = 0; /* by catalog: 100 ms for SQLite (transactions), 1 s for ClickHouse */
  cfg->probe_store = true;
  cfg->array_claim_ttl_ns = 15 * 60 * CS_SEC_NS;
  cs_capture_config_default(&cfg->capture);
  cs_service_config_default(&cfg->service, CS_ROLE_PUBLISHER);
  cfg->service.reconcile_interval_ns = 0; /* no periodic pass unless configured */
  /* A pack's index_bytes is its footer's length, at most 64 MiB: every pack fits a batch alone. */
  cfg->service.index_batch_bytes_max = CS_PACK_FOOTER_BYTES_MAX;
  cs_engine_config_default(&cfg->engine);
  cfg->engine.stop_reserve_ns = 2 * SEC; /* of a close's budget, kept for the stop and the lease release */
  cfg->daemon.listen = "127.0.0.1:9741";
  cfg->daemon.log_format = "logfmt";
  cfg->daemon.close_timeout_ns = 30 * SEC;
  cfg->daemon.scan_interval_ns = 100 * MS;
  cfg->daemon.stats_interval_ns = 60 * SEC;
}

/* ---- validation --------------------------------------------------------------------------- */

static bool has_control(const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
    if (*p < 0x20 || *p == 0x7f) return true;
  return false;
}

static bool name_ok(const char *name) {
  size_t len = strlen(name);
  if (len == 0 || len > 64) return false;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

/* True when text is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
static bool utf8_ok(const char *text) {
  const unsigned char *p = (const unsigned char *)text;
  while (*p != 0) {
    unsigned char c = *p;
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4)) return false;
    uint32_t cp = n == 1 ? c : c & (0x7fu >> n);
    for (size_t i = 1; i < n; i++) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (p[i] & 0x3fu);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
      return false;
    p += n;
  }
  return true;
}

/* S3's bucket rules: 3..63 of a-z 0-9 . -, starting and ending with a letter or digit, no "..". */
static bool bucket_ok(const char *name) {
  size_t len = strlen(name);
  if (len < 3 || len > 63 || strstr(name, "..") != NULL) return false;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && ((c != '.' && c != '-') || i == 0 || i == len - 1)) return false;
  }
  return true;
}

/* Empty, or segments ending in '/', none empty, "." or "..", no control byte. */
static const char *key_prefix_problem(const char *prefix) {
  size_t len = strlen(prefix);
  if (len == 0) return NULL;
  if (len > KEY_PREFIX_MAX) return "is longer than 256 bytes";
  if (prefix[len - 1] != '/') return "must end with '/'";
  if (has_control(prefix)) return "has a control byte";
  if (!utf8_ok(prefix)) return "is not UTF-8 (object keys are)";
  for (const char *seg = prefix; *seg != '\0';) {
    size_t n = strcspn(seg, "/");
    if (n == 0) return "has an empty segment ('//' or a leading '/')";
    if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
      return "has a '.' or '..' segment";
    seg += n + 1;
  }
  return NULL;
}

/* A config string, or the environment's value for it when NULL. */
static const char *or_env(const char *value, const char *variable) {
  return value != NULL ? value : getenv(variable);
}

/*
 * cs_endpoint_validate, with its http:// refusal naming the option the
 * operator sets to allow it (the core knows no option names) and what
 * would travel in clear.
 */
static int endpoint_check(const char *field, const char *url, bool allow_insecure, const char *option,
                          const char *in_clear, char *msg, size_t msg_size) {
  int rc = cs_endpoint_validate(field, url, allow_insecure, msg, msg_size);
  if (rc == CS_E_OK || allow_insecure || strncmp(url, "http://", 7) != 0) return rc;
  return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s uses http://, which sends %s in clear: set %s to allow it", field,
                   in_clear, option);
}

static int validate_store(const capstore_config *cfg, char *msg, size_t msg_size) {
  bool dir = cfg->store_dir != NULL, s3 = cfg->s3_endpoint != NULL;
  if (dir == s3) return rt_refuse(CS_E_CONFIG, msg, msg_size, "store: set exactly one of store_dir and s3_endpoint");
  if (dir) {
    if (cfg->store_dir[0] == '\0') return rt_refuse(CS_E_CONFIG, msg, msg_size, "store_dir is empty");
    return CS_E_OK;
  }
  int rc = endpoint_check("s3_endpoint", cfg->s3_endpoint, cfg->s3_allow_insecure, "s3_allow_insecure",
                          "the access key id, session token and data", msg, msg_size);
  if (rc != CS_E_OK) return rc;
  const char *path = strchr(strstr(cfg->s3_endpoint, "://") + 3, '/');
  if (strpbrk(cfg->s3_endpoint, "?#") != NULL || (path != NULL && strcmp(path, "/") != 0))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "s3_endpoint must be scheme://host[:port] without a path, query or fragment");
  if (cfg->s3_bucket == NULL || !bucket_ok(cfg->s3_bucket))
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                  "s3_bucket must be 3..63 of a-z 0-9 . - (a letter or digit first and last, no '..')");
  const char *fields[][2] = {{"s3_region", or_env(cfg->s3_region, "AWS_REGION")},
                             {"s3_access_key_id", or_env(cfg->s3_access_key_id, "AWS_ACCESS_KEY_ID")},
                             {"s3_secret_access_key", or_env(cfg->s3_secret_access_key, "AWS_SECRET_ACCESS_KEY")},
                             {"s3_session_token", or_env(cfg->s3_session_token, "AWS_SESSION_TOKEN")}};
  for (size_t i = 0; i < 4; i++) {
    const char *value = fields[i][1];
    bool needed = i == 1 || i == 2;
    if (value == NULL || value[0] == '\0') {
      if (needed)
        return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s is not set (nor $%s)", fields[i][0],
                      i == 1 ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY");
      continue;
    }
    /* The value is never printed: it may be a secret. */
    if (has_control(value)) return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s has a control byte (CR, LF, ...)", fields[i][0]);
    if (i == 0 && strlen(value) >= RS_S3_REGION_MAX)
      return rt_refuse(CS_E_CONFIG, msg, msg_size, "s3_region is %zu bytes; at most %d", strlen(value), RS_S3_REGION_MAX - 1);
  }
  return CS_E_OK;
}

/* True when url's query holds the parameter name ("?name=..." or "&name=...", any case). */
static bool url_query_has(const char *url, const char *name) {
  const char *q = strchr(url, '?');
  size_t n = strlen(name);
  for (const char *p = q; p != NULL; p = strchr(p + 1, '&'))
    if (strncasecmp(p + 1, name, n) == 0 && (p[1 + n] == '=' || p[1 + n] == '&' || p[1 + n] == '\0')) return true;
  return false;
}

static int validate_catalog(const capstore_config *cfg, char *msg, size_t msg_size) {
  bool lite = cfg->sqlite_path != NULL, ch = cfg->clickhouse_url != NULL;
  if (lite == ch) return rt_refuse(CS_E_CONFIG, msg, msg_size, "catalog: set exactly one of sqlite_path and clickhouse_url");
  if (lite) {
    if (cfg->sqlite_path[0] == '\0') return rt_refuse(CS_E_CONFIG, msg, msg_size, "sqlite_path is empty");
    if (cfg->clickhouse_cluster != NULL || cfg->clickhouse_insert_quorum != 0 ||
        cfg->clickhouse_insert_quorum_timeout_ns != 0)
      return rt_refuse(CS_E_CONFIG, msg, msg_size, "clickhouse_cluster and its quorum are for a ClickHouse catalog");
    return CS_E_OK;
  }
  char setting[64]; /* the adapter's own rule (cs_clickhouse_config_validate), in this API's names */
  if (cs_clickhouse_url_replication_setting(cfg->clickhouse_url, setting, sizeof setting))
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                     "clickhouse_url carries the replication setting '%s' in its query: set clickhouse_cluster and "
                     "clickhouse_insert_quorum instead (the adapter sends them with every statement and checks the "
                     "tables match)", setting);
  uint64_t timeout = cfg->catalog_timeout_ns != 0 ? cfg->catalog_timeout_ns : cfg->service.request_timeout_ns;
  cs_clickhouse_config replication = {.url = cfg->clickhouse_url, .allow_insecure = cfg->clickhouse_allow_insecure,
                                      .request_timeout_ns = timeout, .cluster = cfg->clickhouse_cluster,
                                      .insert_quorum = cfg->clickhouse_insert_quorum,
                                      .insert_quorum_timeout_ns = cfg->clickhouse_insert_quorum_timeout_ns};
  char why[200];
  if (cfg->clickhouse_cluster != NULL || cfg->clickhouse_insert_quorum != 0 ||
      cfg->clickhouse_insert_quorum_timeout_ns != 0) {
    if (cs_clickhouse_config_validate(&replication, why, sizeof why) != CS_E_OK)
      return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s", why);
  }
  int rc = endpoint_check("clickhouse_url", cfg->clickhouse_url, cfg->clickhouse_allow_insecure,
                          "clickhouse_allow_insecure", "the user and password", msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (cfg->clickhouse_user != NULL && (cfg->clickhouse_user[0] == '\0' || has_control(cfg->clickhouse_user)))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "clickhouse_user must be non-empty without control bytes");
  if (cfg->clickhouse_database != NULL && !name_ok(cfg->clickhouse_database))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "clickhouse_database must be 1..64 of A-Z a-z 0-9 _");
  if (cfg->clickhouse_database != NULL && strstr(cfg->clickhouse_url, "database=") != NULL)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "clickhouse_url names a database and so does clickhouse_database");
  if (strchr(cfg->clickhouse_url, '#') != NULL)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "clickhouse_url has a fragment ('#')");
  if (url_query_has(cfg->clickhouse_url, "password") || url_query_has(cfg->clickhouse_url, "user"))
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                     "clickhouse_url carries a user or password in its query: set clickhouse_user and the password "
                     "(never in a URL, which is printed and logged)");
  if (cfg->clickhouse_password != NULL && has_control(cfg->clickhouse_password))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "clickhouse_password has a control byte (CR, LF, ...)");
  if (cfg->catalog_connect_timeout_ns != 0 && cfg->catalog_connect_timeout_ns < MS)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "catalog_connect_timeout_ns must be 0 (default) or >= 1 ms");
  if (cfg->catalog_timeout_ns != 0 && cfg->catalog_timeout_ns < MS)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "catalog_timeout_ns must be 0 (default) or >= 1 ms");
  return CS_E_OK;
}

static int validate_daemon(const capstore_config *cfg, char *msg, size_t msg_size) {
  const char *format = cfg->daemon.log_format;
  if (format != NULL && strcmp(format, "logfmt") != 0 && strcmp(format, "json") != 0)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "daemon.log_format must be logfmt or json");
  if (cfg->daemon.listen != NULL && has_control(cfg->daemon.listen))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "daemon.listen has a control byte");
  if (cfg->daemon.scan_interval_ns < MS || cfg->daemon.scan_interval_ns > 60 * SEC)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "daemon.scan_interval_ns must be >= 1 ms and <= 60 s");
  if (cfg->daemon.close_timeout_ns <= cfg->engine.stop_reserve_ns)
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                     "daemon.close_timeout_ns must be > engine.stop_reserve_ns: a smaller budget drains nothing");
  if (cfg->daemon.stats_interval_ns != 0 && cfg->daemon.stats_interval_ns < SEC)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "daemon.stats_interval_ns must be 0 (none) or >= 1 s");
  return CS_E_OK;
}

/* A capture-role process opens no store and no catalog: naming one is a mistake worth saying. */
static int validate_capture_role(const capstore_config *cfg, char *msg, size_t msg_size) {
  if (cfg->store_dir != NULL || cfg->s3_endpoint != NULL || cfg->s3_bucket != NULL)
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                     "role CS_ROLE_CAPTURE hands packs to capstore serve, which owns the store: leave store_dir and "
                     "s3_* unset here");
  if (cfg->sqlite_path != NULL || cfg->clickhouse_url != NULL)
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                     "role CS_ROLE_CAPTURE hands packs to capstore serve, which owns the catalog: leave sqlite_path and "
                     "clickhouse_url unset here");
  if (cfg->serve) return rt_refuse(CS_E_CONFIG, msg, msg_size, "serve needs role CS_ROLE_PUBLISHER or CS_ROLE_UPLOADER");
  char inner[200];
  if (cs_capture_config_validate(&cfg->capture, inner, sizeof inner) != CS_E_OK)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "capture.%s", inner);
  return CS_E_OK;
}

/* The service's config as the runtime runs it; the store's LIST order only when lists_known (after the probe). */
static int validate_service(const capstore_config *cfg, bool lists_known, char *msg, size_t msg_size) {
  cs_service_config svc = cfg->service;
  svc.role = cfg->role;
  svc.reconcile_at_start = cfg->reconcile_at_start;
  if (!lists_known) svc.store_lists_complete = true;
  char inner[200];
  if (cs_service_config_validate(&svc, inner, sizeof inner) != CS_E_OK)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "service.%s", inner);
  return CS_E_OK;
}

/* Everything but the store's LIST order, which needs the store (lists_known: it is known). */
static int validate(const capstore_config *cfg, bool lists_known, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (cfg == NULL) return rt_refuse(CS_E_CONFIG, msg, msg_size, "config is NULL");
  if (cfg->name == NULL || !name_ok(cfg->name))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "name must be 1..64 of A-Z a-z 0-9 _");
  if (cfg->role != CS_ROLE_PUBLISHER && cfg->role != CS_ROLE_UPLOADER && cfg->role != CS_ROLE_CAPTURE)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "role must be CS_ROLE_PUBLISHER, CS_ROLE_UPLOADER or CS_ROLE_CAPTURE");
  if (cfg->spool_dir == NULL || cfg->spool_dir[0] == '\0') return rt_refuse(CS_E_CONFIG, msg, msg_size, "spool_dir is not set");
  int rc = validate_daemon(cfg, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (cfg->array_claim_ttl_ns < SEC)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "arrays.claim_ttl must be at least 1 s");
  if (cfg->role == CS_ROLE_CAPTURE) return validate_capture_role(cfg, msg, msg_size);
  rc = validate_store(cfg, msg, msg_size);
  if (rc == CS_E_OK) rc = validate_catalog(cfg, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (cfg->key_prefix != NULL) {
    const char *problem = key_prefix_problem(cfg->key_prefix);
    if (problem != NULL) return rt_refuse(CS_E_CONFIG, msg, msg_size, "key_prefix %s", problem);
    bool reconciles = cfg->reconcile_at_start || cfg->service.reconcile_interval_ns != 0;
    if (cfg->key_prefix[0] == '\0' && reconciles && cfg->role == CS_ROLE_PUBLISHER)
      return rt_refuse(CS_E_CONFIG, msg, msg_size,
                    "key_prefix is empty while reconcile is on: reconcile lists one catalog's own prefix");
  }
  rc = validate_service(cfg, lists_known, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  char inner[200];
  if (cs_capture_config_validate(&cfg->capture, inner, sizeof inner) != CS_E_OK)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "capture.%s", inner);
  if (cs_engine_config_validate(&cfg->engine, inner, sizeof inner) != CS_E_OK)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "engine.%s", inner);
  if (cfg->fence_margin_ns != 0 && (cfg->fence_margin_ns < MS || cfg->fence_margin_ns >= cfg->service.lease_ttl_ns / 3))
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                  "fence_margin_ns must be 0 (the catalog's default) or >= 1 ms and < service.lease_ttl_ns / 3");
  if (cfg->service.index_batch_bytes_max < CS_PACK_FOOTER_BYTES_MAX)
    return rt_refuse(CS_E_CONFIG, msg, msg_size,
                  "service.index_batch_bytes_max must be >= 64 MiB (a footer's bound): a smaller budget would set "
                  "healthy packs aside");
  return CS_E_OK;
}

int capstore_config_validate(const capstore_config *cfg, char *msg, size_t msg_size) {
  return validate(cfg, false, msg, msg_size);
}

size_t capstore_key_prefix(const capstore_config *cfg, char *out, size_t size) {
  assert(cfg != NULL && (cfg->key_prefix != NULL || cfg->name != NULL));
  assert(out != NULL || size == 0);
  int len = cfg->key_prefix != NULL ? snprintf(out, size, "%s", cfg->key_prefix)
                                    : snprintf(out, size, "%s/", cfg->name);
  return len < 0 ? 0 : (size_t)len;
}

/* ---- open ------------------------------------------------------------------------------------- */

/* Replaces *field with a copy owned by the runtime (NULL stays NULL). */
static bool own(const char **field) {
  if (*field == NULL) return true;
  *field = strdup(*field);
  return *field != NULL;
}

static void disown(const char **field) {
  free((void *)(uintptr_t)*field);
  *field = NULL;
}

#define OWNED_FIELDS(X)                                                                                  \
  X(spool_dir) X(store_dir) X(s3_endpoint) X(s3_bucket) X(sqlite_path) X(clickhouse_url) X(clickhouse_user) \
  X(clickhouse_password) X(clickhouse_database) X(clickhouse_cluster)

static bool own_strings(rs_runtime *rt, const capstore_config *cfg) {
  bool ok = true;
#define OWN(f) ok = own(&rt->cfg.f) && ok;
  OWNED_FIELDS(OWN)
#undef OWN
  snprintf(rt->name, sizeof rt->name, "%s", cfg->name);
  rt->cfg.name = rt->name;
  capstore_key_prefix(cfg, rt->key_prefix, sizeof rt->key_prefix);
  rt->cfg.key_prefix = rt->key_prefix;
  if (cfg->s3_endpoint != NULL) {
    const char *region = or_env(cfg->s3_region, "AWS_REGION");
    snprintf(rt->s3_region, sizeof rt->s3_region, "%s", region != NULL && region[0] != '\0' ? region : "us-east-1");
    const char *token = or_env(cfg->s3_session_token, "AWS_SESSION_TOKEN");
    rt->s3_key_id = strdup(or_env(cfg->s3_access_key_id, "AWS_ACCESS_KEY_ID"));
    rt->s3_secret = strdup(or_env(cfg->s3_secret_access_key, "AWS_SECRET_ACCESS_KEY"));
    rt->s3_token = token != NULL && token[0] != '\0' ? strdup(token) : NULL;
    ok = ok && rt->s3_key_id != NULL && rt->s3_secret != NULL;
  }
  /* Secrets live in the runtime's copies only; the config keeps no pointer to the caller's. */
  rt->cfg.s3_region = rt->cfg.s3_access_key_id = rt->cfg.s3_secret_access_key = rt->cfg.s3_session_token = NULL;
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  snprintf(rt->holder, sizeof rt->holder, "%s:%ld", host, (long)getpid());
  return ok;
}

static void free_strings(rs_runtime *rt) {
#define DISOWN(f) disown(&rt->cfg.f);
  OWNED_FIELDS(DISOWN)
#undef DISOWN
  if (rt->s3_secret != NULL) OPENSSL_cleanse(rt->s3_secret, strlen(rt->s3_secret));
  if (rt->s3_token != NULL) OPENSSL_cleanse(rt->s3_token, strlen(rt->s3_token));
  free(rt->s3_key_id);
  free(rt->s3_secret);
  free(rt->s3_token);
}

/* The capture's on_sealed: the pack's ref goes to the driver through the inbox. */
static void on_sealed(void *context, const cs_spool_entry *entry, const cs_pack_summary *summary,
                      const cs_pack_key_fields *fields) {
  rs_runtime *rt = context;
  rs_msg msg = {.kind = RS_MSG_SEALED};
  if (rs_ref_from_seal(rt, entry, summary, fields, &msg.ref) != CS_E_OK) return; /* key too long: refused at capture */
  rs_inbox_post(rt, &msg);
  rs_footer_prefetch(rt, &entry->pack_id);
}

/* Whether the store's LIST pages are complete: dirstore's flag, else the probe's answer. */
static int probe_store(rs_runtime *rt, char *msg, size_t msg_size) {
  cs_store store;
  int rc = rs_store_open(rt, &store, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  bool complete = store.lists_bytewise;
  if (rt->cfg.s3_endpoint != NULL && rt->cfg.probe_store) {
    char prefix[CS_KEY_MAX], lease[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&rt->lease_id, lease);
    snprintf(prefix, sizeof prefix, "%.256sprobe/%s/", rt->key_prefix, lease);
    cs_store_result res = {0};
    if (cs_store_probe(&store, prefix, &res) == CS_E_OK && res.outcome == CS_OUT_OK) complete = store.lists_bytewise;
  }
  cs_store_close(&store);
  rt->cfg.service.store_lists_complete = complete;
  return CS_E_OK;
}

static int alloc_tables(rs_runtime *rt) {
  const cs_service_config *svc = &rt->cfg.service;
  rt->svc_mem_size = cs_service_memory_size(svc);
  rt->svc_mem = aligned_alloc(64, (rt->svc_mem_size + 63u) & ~(size_t)63u);
  rt->job_count = 2u * svc->store_inflight_max + 2u + RS_STEP_JOBS; /* the core's request bound, and steps */
  rt->jobs = calloc(rt->job_count, sizeof *rt->jobs);
  rt->bools_per_job = svc->cycle_packs_max > svc->list_page_max ? svc->cycle_packs_max : svc->list_page_max;
  rt->bool_pool = calloc((size_t)rt->job_count * 2u * rt->bools_per_job, sizeof *rt->bool_pool);
  rt->list_keys = calloc((size_t)RS_LIST_SLOTS * svc->list_page_max, sizeof *rt->list_keys);
  rt->list_ptrs = calloc((size_t)RS_LIST_SLOTS * svc->list_page_max, sizeof *rt->list_ptrs);
  rt->inbox_max = 2u * svc->spool_packs_max + rt->job_count + 8u;
  if (rt->cfg.serve) rt->inbox_max += 2u * RS_ARRIVALS_PER_SCAN; /* a periodic scan's and the close's */
  rt->inbox = calloc(rt->inbox_max, sizeof *rt->inbox);
  if (rt->svc_mem == NULL || rt->jobs == NULL || rt->bool_pool == NULL || rt->list_keys == NULL ||
      rt->list_ptrs == NULL || rt->inbox == NULL)
    return CS_E_NO_MEMORY;
  for (uint32_t i = 0; i < rt->job_count; i++) {
    rt->jobs[i].held = rt->bool_pool + (size_t)i * 2u * rt->bools_per_job;
    rt->jobs[i].rejected = rt->jobs[i].held + rt->bools_per_job;
  }
  return CS_E_OK;
}

static int init_sync(capstore *cs) {
  rs_runtime *rt = &cs->rt;
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr) != 0) return CS_E_NO_MEMORY;
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int bad = pthread_mutex_init(&rt->mutex, NULL) | pthread_cond_init(&rt->inbox_cond, &attr) |
            pthread_cond_init(&rt->call_cond, NULL) | pthread_mutex_init(&cs->api_mutex, NULL);
  pthread_condattr_destroy(&attr);
  return bad != 0 ? CS_E_NO_MEMORY : CS_E_OK;
}

/* Posts an API call to the driver and waits for the engine's REPORT. Under api_mutex. */
static int call(rs_runtime *rt, uint32_t kind, uint64_t arg_ns) {
  pthread_mutex_lock(&rt->mutex);
  rt->call_kind = kind;
  rt->call_arg_ns = arg_ns;
  rt->call_msg[0] = '\0';
  uint64_t seq = ++rt->call_seq;
  pthread_cond_signal(&rt->inbox_cond);
  while (rt->call_done_seq < seq) pthread_cond_wait(&rt->call_cond, &rt->mutex);
  int err = rt->call_err;
  pthread_mutex_unlock(&rt->mutex);
  return err;
}

/*
 * Stops the driver and the lanes. The capture is freed only with free_capture
 * (capstore_free, a failed open): after a close, capture calls racing it must
 * still find a live (closed) sink that answers CS_E_CLOSED.
 */
static void teardown(capstore *cs, bool free_capture) {
  rs_runtime *rt = &cs->rt;
  if (rt->driver_started) {
    pthread_mutex_lock(&rt->mutex);
    rt->stopping = true;
    pthread_cond_signal(&rt->inbox_cond);
    pthread_mutex_unlock(&rt->mutex);
    pthread_join(rt->driver, NULL);
    rt->driver_started = false;
  }
  pthread_mutex_lock(&rt->mutex);
  rt->inbox_closed = true;
  pthread_mutex_unlock(&rt->mutex);
  rs_lanes_stop(rt);
  if (!free_capture) return;
  rs_footers_stop(rt);
  if (rt->handoff != NULL) rs_handoff_free(rt); /* frees the capture too */
  atomic_store(&rt->capture_live, NULL);
  if (rt->capture != NULL) cs_capture_free(rt->capture);
  rt->capture = NULL;
}

static void destroy(capstore *cs) {
  rs_runtime *rt = &cs->rt;
  free(rt->svc_mem);
  free(rt->jobs);
  free(rt->bool_pool);
  free(rt->list_keys);
  free(rt->list_ptrs);
  free(rt->inbox);
  free(rt->backlog);
  free(rt->refused);
  free(rt->recovered);
  rs_footers_free(rt); /* the sink is gone: nothing queues a prefetch any more */
  free_strings(rt);
  free(cs);
}

/* mkdir -p of path's parent directories (with the last component too when whole). */
static int make_parents(const char *field, const char *path, bool whole, char *msg, size_t msg_size) {
  char buf[4096];
  if (path == NULL) return CS_E_OK;
  if (strlen(path) >= sizeof buf) return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s is longer than 4095 bytes", field);
  snprintf(buf, sizeof buf, "%s", path);
  size_t len = strlen(buf);
  for (size_t i = 1; i <= len; i++) {
    if (buf[i] != '/' && !(whole && buf[i] == '\0')) continue;
    char keep = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return rt_refuse(CS_E_IO, msg, msg_size, "%s: cannot create %s: %s", field, buf, strerror(errno));
    buf[i] = keep;
  }
  return CS_E_OK;
}

static int open_runtime(capstore *cs, char *msg, size_t msg_size) {
  rs_runtime *rt = &cs->rt;
  int rc = make_parents("spool_dir", rt->cfg.spool_dir, false, msg, msg_size);
  if (rc == CS_E_OK) rc = make_parents("store_dir", rt->cfg.store_dir, false, msg, msg_size);
  if (rc == CS_E_OK) rc = make_parents("sqlite_path", rt->cfg.sqlite_path, false, msg, msg_size);
  if (rc == CS_E_OK) rc = probe_store(rt, msg, msg_size);
  /* Only the service's part again: the rest was validated before the strings moved into the runtime. */
  if (rc == CS_E_OK) rc = validate_service(&rt->cfg, true, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (alloc_tables(rt) != CS_E_OK) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the runtime's tables");
  char inner[160];
  if (cs_engine_init(&rt->engine, &rt->cfg.engine, inner, sizeof inner) != CS_E_OK)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "engine.%s", inner);
  if (rs_footers_start(rt) != CS_E_OK) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "cannot start the prefetch thread");
  rc = rs_lanes_start(rt, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  rc = rs_open_sink(rt, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (pthread_create(&rt->driver, NULL, rs_driver_main, rt) != 0)
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "cannot start the driver thread");
  rt->driver_started = true;
  rc = call(rt, RS_CALL_OPEN, 0);
  if (rc != CS_E_OK) {
    pthread_mutex_lock(&rt->mutex);
    rt_refuse(rc, msg, msg_size, "open failed: %s", rt->call_msg[0] != '\0' ? rt->call_msg : cs_strerror(rc));
    pthread_mutex_unlock(&rt->mutex);
  }
  return rc;
}

/* Capture role: no store, catalog, service or driver; the hand-off to capstore serve (rs_handoff.c). */
static int open_capture_role(capstore *cs, char *msg, size_t msg_size) {
  rs_runtime *rt = &cs->rt;
  int rc = make_parents("spool_dir", rt->cfg.spool_dir, false, msg, msg_size);
  if (rc == CS_E_OK) rc = rs_handoff_open(rt, msg, msg_size);
  return rc;
}

int capstore_open(const capstore_config *cfg, capstore **out, char *msg, size_t msg_size) {
  if (out == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "out is NULL");
  *out = NULL;
  int rc = validate(cfg, false, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  capstore *cs = calloc(1, sizeof *cs);
  if (cs == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the runtime");
  rs_runtime *rt = &cs->rt;
  rt->cfg = *cfg;
  rt->cfg.service.role = cfg->role;
  rt->cfg.service.reconcile_at_start = cfg->reconcile_at_start;
  if (rt->cfg.capture.sink.spool_packs_max > rt->cfg.service.spool_packs_max)
    rt->cfg.capture.sink.spool_packs_max = rt->cfg.service.spool_packs_max;
  if (rt->cfg.fence_margin_ns == 0) rt->cfg.fence_margin_ns = cfg->sqlite_path != NULL ? 100 * MS : 1 * SEC;
  /* The margin covers the catalog's apply delay: what a PUBLISH after a doubtful INDEX waits out. */
  rt->cfg.service.index_settle_ns = rt->cfg.fence_margin_ns;
  rt->cfg.capture.on_sealed = on_sealed;
  rt->cfg.capture.on_sealed_context = rt;
  if (!own_strings(rt, cfg) || init_sync(cs) != CS_E_OK) {
    destroy(cs);
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory for the runtime");
  }
  if (getrandom(rt->lease_id.bytes, sizeof rt->lease_id.bytes, 0) != (ssize_t)sizeof rt->lease_id.bytes ||
      getrandom(&rt->seed, sizeof rt->seed, 0) != (ssize_t)sizeof rt->seed) {
    destroy(cs);
    return rt_refuse(CS_E_IO, msg, msg_size, "getrandom failed");
  }
  rc = cfg->role == CS_ROLE_CAPTURE ? open_capture_role(cs, msg, msg_size) : open_runtime(cs, msg, msg_size);
  if (rc != CS_E_OK) {
    teardown(cs, true);
    destroy(cs);
    return rc;
  }
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  *out = cs;
  return CS_E_OK;
}

/* A runtime holding only cfg's resolved strings, for opening one adapter. */
static rs_runtime *adapter_runtime(const capstore_config *cfg) {
  rs_runtime *rt = calloc(1, sizeof *rt);
  if (rt == NULL) return NULL;
  rt->cfg = *cfg;
  if (cfg->name == NULL) rt->cfg.name = "capstore";
  if (!own_strings(rt, &rt->cfg)) {
    free_strings(rt);
    free(rt);
    return NULL;
  }
  return rt;
}

int capstore_open_store(const capstore_config *cfg, cs_store *out, char *msg, size_t msg_size) {
  if (cfg == NULL || out == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cfg and out must not be NULL");
  int rc = validate_store(cfg, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  rs_runtime *rt = adapter_runtime(cfg);
  if (rt == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory");
  rc = rs_store_open(rt, out, msg, msg_size);
  free_strings(rt);
  free(rt);
  return rc;
}

int capstore_open_catalog(const capstore_config *cfg, cs_catalog *out, char *msg, size_t msg_size) {
  if (cfg == NULL || out == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cfg and out must not be NULL");
  int rc = validate_catalog(cfg, msg, msg_size);
  if (rc == CS_E_OK && cfg->name != NULL && !name_ok(cfg->name))
    rc = rt_refuse(CS_E_CONFIG, msg, msg_size, "name must be 1..64 of A-Z a-z 0-9 _");
  if (rc != CS_E_OK) return rc;
  rs_runtime *rt = adapter_runtime(cfg);
  if (rt == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "no memory");
  rc = rs_catalog_open(rt, out, msg, msg_size);
  free_strings(rt);
  free(rt);
  return rc;
}

/* ---- capture, flush, close ---------------------------------------------------------------------- */

int rt_capstore_write_reserved(capstore *cs, const cs_pack_meta *meta, const void *bytes, size_t length, char *msg,
                               size_t msg_size) {
  if (cs == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cs is NULL");
  cs_capture *cap = rs_capture(&cs->rt);
  if (cap == NULL) return rt_refuse(CS_E_CLOSED, msg, msg_size, "capstore is closed");
  return cs_capture_write(cap, meta, bytes, length, msg, msg_size);
}

int rt_capstore_key_reserve(capstore *cs, const cs_pack_meta *meta, const char **field) {
  *field = NULL;
  cs_capture *cap = cs == NULL ? NULL : rs_capture(&cs->rt);
  return cap == NULL ? CS_E_CLOSED : rt_capture_key_reserve(cap, meta, field);
}

/* A hook name capture arrays reserve ("capstore.array-*"): only their writer may use it. */
static bool hook_reserved(const cs_pack_meta *meta) {
  static const char reserved[] = "capstore.array-";
  return meta != NULL && meta->hook_name.bytes != NULL && meta->hook_name.len >= sizeof reserved - 1 &&
         memcmp(meta->hook_name.bytes, reserved, sizeof reserved - 1) == 0;
}

int capstore_write(capstore *cs, const cs_pack_meta *meta, const void *bytes, size_t length, char *msg,
                   size_t msg_size) {
  if (cs == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cs is NULL");
  if (hook_reserved(meta))
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "hook_name '%.*s' is reserved for capture arrays "
                     "(capstore_array_write_chunk writes them)", (int)(meta->hook_name.len > 64 ? 64 : meta->hook_name.len),
                     meta->hook_name.bytes);
  cs_capture *cap = rs_capture(&cs->rt);
  if (cap == NULL) return rt_refuse(CS_E_CLOSED, msg, msg_size, "capstore is closed");
  return cs_capture_write(cap, meta, bytes, length, msg, msg_size);
}

int capstore_write_device(capstore *cs, const cs_pack_meta *meta, const void *device_bytes, size_t length,
                          void *stream, char *msg, size_t msg_size) {
  if (cs == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cs is NULL");
  if (hook_reserved(meta))
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "hook_name '%.*s' is reserved for capture arrays",
                     (int)(meta->hook_name.len > 64 ? 64 : meta->hook_name.len), meta->hook_name.bytes);
  cs_capture *cap = rs_capture(&cs->rt);
  if (cap == NULL) return rt_refuse(CS_E_CLOSED, msg, msg_size, "capstore is closed");
  return cs_capture_write_device(cap, meta, device_bytes, length, stream, msg, msg_size);
}

static void fill_report(rs_runtime *rt, capstore_flush_report *report) {
  const cs_flush_result *f = &rt->call_flush;
  memset(report, 0, sizeof *report);
  report->drained = f->drained;
  report->missing_packs = f->missing_packs;
  report->owed_packs = f->owed_packs;
  if (f->flush_id == 0 && rt->call_err != CS_E_OK) {
    /* The service's flush never ran (the sink's step used the time): what the service holds now. */
    report->missing_packs = rt->call_snap.pending_spool;
    report->owed_packs = rt->call_snap.pending_index;
  }
  report->rejected_count = f->rejected_count;
  report->rejected_named = f->rejected_named;
  memcpy(report->rejected, f->rejected, sizeof report->rejected);
  report->stage = "";
  if (rt->call_err == CS_E_OK) return;
  /* Nothing new is uploaded while packs are owed to the catalog: owed packs make the catalog the stage. */
  if (rt->failed_step == CS_STEP_FLUSH_SINK) report->stage = "sink";
  else if (!report->drained) report->stage = report->owed_packs == 0 && report->missing_packs > 0 ? "upload" : "catalog";
}

/* Names the set-aside packs in msg. */
static void name_rejected(const capstore_flush_report *report, char *msg, size_t msg_size) {
  int n = snprintf(msg, msg_size, "drained, but %" PRIu32 " pack(s) were set aside:", report->rejected_count);
  for (uint32_t i = 0; i < report->rejected_named && n >= 0 && (size_t)n < msg_size; i++) {
    char id[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&report->rejected[i], id);
    n += snprintf(msg + n, msg_size - (size_t)n, " %s", id);
  }
}

int capstore_flush(capstore *cs, uint64_t deadline_ns, capstore_flush_report *report, char *msg, size_t msg_size) {
  capstore_flush_report local;
  if (report == NULL) report = &local;
  memset(report, 0, sizeof *report);
  report->stage = "";
  if (cs == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cs is NULL");
  rs_runtime *rt = &cs->rt;
  /* A deadline passed (or within 20 ms) polls: the sink and the service get 20 ms to say they hold nothing. */
  uint64_t now = capstore_clock_ns();
  if (deadline_ns < now + FLUSH_POLL_NS) deadline_ns = now + FLUSH_POLL_NS;
  pthread_mutex_lock(&cs->api_mutex);
  pthread_mutex_lock(&rt->mutex);
  bool closing = rt->close_requested;
  pthread_mutex_unlock(&rt->mutex);
  if (rt->closed || closing) {
    pthread_mutex_unlock(&cs->api_mutex);
    return rt_refuse(CS_E_CLOSED, msg, msg_size, "capstore is closed");
  }
  if (rt->handoff != NULL) {
    int rc = rs_handoff_flush(rt, deadline_ns, report, msg, msg_size);
    pthread_mutex_unlock(&cs->api_mutex);
    if (rc == CS_E_OK && report->rejected_count > 0) {
      name_rejected(report, msg, msg_size);
      return CS_E_CORRUPT;
    }
    return rc == CS_E_OK ? rt_refuse(CS_E_OK, msg, msg_size, "%s", "") : rc;
  }
  int rc = call(rt, RS_CALL_FLUSH, deadline_ns);
  pthread_mutex_lock(&rt->mutex);
  fill_report(rt, report);
  char step_msg[256];
  snprintf(step_msg, sizeof step_msg, "%s", rt->call_msg);
  pthread_mutex_unlock(&rt->mutex);
  pthread_mutex_unlock(&cs->api_mutex);
  if (rc == CS_E_OK && report->rejected_count > 0) {
    name_rejected(report, msg, msg_size);
    return CS_E_CORRUPT;
  }
  if (rc == CS_E_OK) return rt_refuse(CS_E_OK, msg, msg_size, "%s", "");
  if (step_msg[0] != '\0') return rt_refuse(rc, msg, msg_size, "flush: %s", step_msg);
  if (rc == CS_E_TIMEOUT)
    return rt_refuse(rc, msg, msg_size,
                  "flush: not drained by the deadline (stage %s): %" PRIu32 " pack(s) not yet in the catalog, %" PRIu32
                  " of them uploaded and owed to it",
                  report->stage, report->missing_packs, report->owed_packs);
  return rt_refuse(rc, msg, msg_size, "flush: %s", cs_strerror(rc));
}

int capstore_close(capstore *cs, uint64_t budget_ns, char *msg, size_t msg_size) {
  if (cs == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "cs is NULL");
  rs_runtime *rt = &cs->rt;
  /* Cut a running flush short and refuse new ones, so the close does not queue behind them. */
  pthread_mutex_lock(&rt->mutex);
  rt->close_requested = true;
  pthread_cond_signal(&rt->inbox_cond);
  pthread_mutex_unlock(&rt->mutex);
  if (rt->handoff != NULL) rs_handoff_closing(rt);
  pthread_mutex_lock(&cs->api_mutex);
  if (rt->closed) {
    int rc = rt_refuse(rt->close_err, msg, msg_size, "%s", rt->close_msg);
    pthread_mutex_unlock(&cs->api_mutex);
    return rc;
  }
  int rc;
  if (rt->handoff != NULL) {
    rc = rs_handoff_close(rt, budget_ns, rt->close_msg, sizeof rt->close_msg);
  } else {
    rc = call(rt, RS_CALL_CLOSE, budget_ns);
    pthread_mutex_lock(&rt->mutex);
    if (rc != CS_E_OK)
      snprintf(rt->close_msg, sizeof rt->close_msg, "close: %.240s", rt->call_msg[0] != '\0' ? rt->call_msg : cs_strerror(rc));
    pthread_mutex_unlock(&rt->mutex);
  }
  rt->close_err = rc;
  teardown(cs, false);
  rt->closed = true;
  rc = rt_refuse(rt->close_err, msg, msg_size, "%s", rt->close_msg);
  pthread_mutex_unlock(&cs->api_mutex);
  return rc;
}

void capstore_free(capstore *cs) {
  if (cs == NULL) return;
  if (!cs->rt.closed) (void)capstore_close(cs, 30 * SEC, NULL, 0);
  teardown(cs, true); /* the sink: waits for seals a timed-out close left running */
  pthread_mutex_destroy(&cs->api_mutex);
  pthread_mutex_destroy(&cs->rt.mutex);
  pthread_cond_destroy(&cs->rt.inbox_cond);
  pthread_cond_destroy(&cs->rt.call_cond);
  destroy(cs);
}

/* ---- stats ------------------------------------------------------------------------------------------- */

void capstore_stats_get(capstore *cs, capstore_stats *out) {
  assert(cs != NULL && out != NULL);
  rs_runtime *rt = &cs->rt;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&rt->mutex);
  out->service = rt->snap;
  out->engine_failures = rt->engine_failures;
  snprintf(out->engine_last_error, sizeof out->engine_last_error, "%s", rt->engine_last_error);
  pthread_mutex_unlock(&rt->mutex);
  cs_capture *cap = rs_capture(rt);
  if (cap != NULL) cs_capture_stats_get(cap, &out->capture);
  out->captured_records = out->capture.sink.records_admitted; /* counted by the sink, no second counter on the hot path */
  out->store_requests = atomic_load(&rt->store_requests);
  out->catalog_requests = atomic_load(&rt->catalog_requests);
  out->bytes_uploaded = atomic_load(&rt->bytes_uploaded);
  out->descriptors_indexed = atomic_load(&rt->descriptors_indexed);
  out->footer_errors = atomic_load(&rt->footer_errors);
  out->footer_cache_hits = atomic_load(&rt->footers.hits);
  uint32_t peaks[] = {atomic_load(&rt->store_lane.queue_peak), atomic_load(&rt->catalog_lane.queue_peak),
                      atomic_load(&rt->lease_lane.queue_peak), atomic_load(&rt->spool_lane.queue_peak)};
  for (size_t i = 0; i < 4; i++)
    if (peaks[i] > out->lane_queue_peak) out->lane_queue_peak = peaks[i];
  out->adopted_spools = atomic_load(&rt->adopted_spools);
  out->arrivals_set_aside = atomic_load(&rt->arrivals_set_aside);
  rs_handoff_stats(rt, out);
}

int capstore_catalog_check(cs_catalog *catalog, char *msg, size_t msg_size) {
  if (catalog == NULL || catalog->ops == NULL)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "capstore_catalog_check: no catalog");
  if (catalog->ops->schema_check == NULL) return CS_E_OK;
  cs_catalog_result res;
  memset(&res, 0, sizeof res);
  int rc = catalog->ops->schema_check(catalog->self, &res);
  if (rc == CS_E_OK && res.outcome == CS_OUT_OK) return CS_E_OK;
  return rt_refuse(rc != CS_E_OK ? rc : res.outcome == CS_OUT_INVALID ? CS_E_CONFIG : CS_E_IO, msg, msg_size,
                   "catalog: %s (%s)", rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome), res.detail);
}

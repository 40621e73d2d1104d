/*
 * The configuration file (settings.h, docs/configuration.md): one table of
 * keys, each naming its field of capstore_config, its type and the C field
 * path the runtime's validation names (so that a refusal can be told in
 * the file's words). JSON is read by jansson; whole-line '#' comments are
 * blanked first (a JSON string cannot hold a raw newline, so such a line is
 * never inside a string), which keeps line numbers.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "capstore/capstore.h"
#include "capstore/settings.h"
#include "runtime_internal.h"

#define FILE_BYTES_MAX (1u << 20)

typedef enum key_kind { K_TEXT, K_BOOL, K_U32, K_SIZE, K_DURATION, K_ROLE, K_FULL, K_SECRET } key_kind;

typedef struct key_def {
  capstore_setting_info info;
  key_kind kind;
  size_t offset;     /* into capstore_config; unused for secrets */
  const char *field; /* the C field path validation names ("service.lease_ttl_ns"); for secrets, the variable */
} key_def;

#define F(member) offsetof(capstore_config, member)
#define TEXT "text"
#define BOOL "bool"
#define COUNT "count"
#define SIZE "size"
#define DUR "duration"

static const key_def keys[] = {
    {{"name", TEXT, "the catalog's name: ClickHouse table prefix and, with '/', the key prefix"}, K_TEXT, F(name), "name"},
    {{"role", "publisher|uploader|capture", "publisher: lease, index, reconcile; uploader: upload and hand off; capture: hand packs to capstore serve"}, K_ROLE, F(role), "role"},
    {{"spool_dir", TEXT, "the local spool (created with its parents)"}, K_TEXT, F(spool_dir), "spool_dir"},
    {{"key_prefix", TEXT, "object keys start with this: empty or 'a/b/' (default '<name>/')"}, K_TEXT, F(key_prefix), "key_prefix"},
    {{"store.dir", TEXT, "a directory as the object store (or store.s3.*)"}, K_TEXT, F(store_dir), "store_dir"},
    {{"store.s3.endpoint", TEXT, "https://host[:port] of an S3-compatible store"}, K_TEXT, F(s3_endpoint), "s3_endpoint"},
    {{"store.s3.bucket", TEXT, "the bucket"}, K_TEXT, F(s3_bucket), "s3_bucket"},
    {{"store.s3.region", TEXT, "the signing region (default $AWS_REGION, else us-east-1)"}, K_TEXT, F(s3_region), "s3_region"},
    {{"store.s3.allow_insecure", BOOL, "allow an http:// endpoint (loopback tests)"}, K_BOOL, F(s3_allow_insecure), "s3_allow_insecure"},
    {{"store.s3.max_connections", COUNT, "requests in flight (0: service.store_inflight_max)"}, K_U32, F(s3_max_connections), "s3_max_connections"},
    {{"store.s3.access_key_id", "secret", "not in files: $AWS_ACCESS_KEY_ID"}, K_SECRET, 0, "AWS_ACCESS_KEY_ID"},
    {{"store.s3.secret_access_key", "secret", "not in files: $AWS_SECRET_ACCESS_KEY"}, K_SECRET, 0, "AWS_SECRET_ACCESS_KEY"},
    {{"store.s3.session_token", "secret", "not in files: $AWS_SESSION_TOKEN"}, K_SECRET, 0, "AWS_SESSION_TOKEN"},
    {{"store.probe", BOOL, "probe S3 at open for conditional create, suffix ranges and LIST order"}, K_BOOL, F(probe_store), "probe_store"},
    {{"catalog.sqlite", TEXT, "an SQLite file as the catalog (or catalog.clickhouse.url)"}, K_TEXT, F(sqlite_path), "sqlite_path"},
    {{"catalog.clickhouse.url", TEXT, "https://host:port/ of ClickHouse's HTTP interface"}, K_TEXT, F(clickhouse_url), "clickhouse_url"},
    {{"catalog.clickhouse.user", TEXT, "the user (default 'default')"}, K_TEXT, F(clickhouse_user), "clickhouse_user"},
    {{"catalog.clickhouse.database", TEXT, "the database, made by the operator (default: the user's)"}, K_TEXT, F(clickhouse_database), "clickhouse_database"},
    {{"catalog.clickhouse.allow_insecure", BOOL, "allow an http:// URL (user and password then go in clear)"}, K_BOOL, F(clickhouse_allow_insecure), "clickhouse_allow_insecure"},
    {{"catalog.clickhouse.cluster", TEXT, "a replicated catalog: the cluster's name in remote_servers (tables ON CLUSTER)"}, K_TEXT, F(clickhouse_cluster), "clickhouse_cluster"},
    {{"catalog.clickhouse.insert_quorum", COUNT, "with cluster: replicas each write must reach: all of them"}, K_U32, F(clickhouse_insert_quorum), "clickhouse_insert_quorum"},
    {{"catalog.clickhouse.insert_quorum_timeout", DUR, "with cluster: how long a write waits for its quorum (0: half of catalog.timeout)"}, K_DURATION, F(clickhouse_insert_quorum_timeout_ns), "clickhouse_insert_quorum_timeout_ns"},
    {{"catalog.clickhouse.password", "secret", "not in files: $CAPSTORE_CLICKHOUSE_PASSWORD"}, K_SECRET, 0, "CAPSTORE_CLICKHOUSE_PASSWORD"},
    {{"catalog.connect_timeout", DUR, "connection timeout (0: 5 s)"}, K_DURATION, F(catalog_connect_timeout_ns), "catalog_connect_timeout_ns"},
    {{"catalog.timeout", DUR, "whole-request timeout (0: service.request_timeout)"}, K_DURATION, F(catalog_timeout_ns), "catalog_timeout_ns"},
    {{"catalog.fence_margin", DUR, "the fence's margin, above the catalog's apply delay (0: 100 ms SQLite, 1 s ClickHouse)"}, K_DURATION, F(fence_margin_ns), "fence_margin_ns"},
    {{"arrays.claim_ttl", DUR, "a slot claim this old with no visible record may be taken by another writer"}, K_DURATION, F(array_claim_ttl_ns), "array_claim_ttl_ns"},
    {{"reconcile.at_start", BOOL, "a reconcile pass at start (off for a prefix other catalogs write)"}, K_BOOL, F(reconcile_at_start), "reconcile_at_start"},
    {{"reconcile.interval", DUR, "the periodic pass (0: none); uploaders' packs are indexed by it"}, K_DURATION, F(service.reconcile_interval_ns), "service.reconcile_interval_ns"},
    {{"capture.staging", SIZE, "the in-memory staging area"}, K_SIZE, F(capture.staging_bytes), "capture.staging_bytes"},
    {{"capture.record_max", SIZE, "larger records are refused"}, K_SIZE, F(capture.record_bytes_max), "capture.record_bytes_max"},
    {{"capture.device_copies_max", COUNT, "CUDA copies in flight (0 disables device capture)"}, K_U32, F(capture.device_copies_max), "capture.device_copies_max"},
    {{"capture.recover_at_open", BOOL, "sweep stale temp files and check ready packs at open"}, K_BOOL, F(capture.recover_at_open), "capture.recover_at_open"},
    {{"capture.direct_io", BOOL, "O_DIRECT pack writes where the file system takes them"}, K_BOOL, F(capture.direct_io), "capture.direct_io"},
    {{"capture.hash_thread", BOOL, "SHA-256 on a thread of its own (default: on with 4 or more CPUs)"}, K_BOOL, F(capture.hash_thread), "capture.hash_thread"},
    {{"capture.demote_staging", BOOL, "CLDEMOTE staging lines after packing (default: on with 4 or more CPUs)"}, K_BOOL, F(capture.demote_staging), "capture.demote_staging"},
    {{"capture.pack_records_max", COUNT, "seal a pack at this many records"}, K_U32, F(capture.sink.pack_records_max), "capture.sink.pack_records_max"},
    {{"capture.pack_bytes_max", SIZE, "seal a pack before it would pass this size"}, K_SIZE, F(capture.sink.pack_bytes_max), "capture.sink.pack_bytes_max"},
    {{"capture.pack_footer_bytes_max", SIZE, "seal a pack before its footer would pass this size"}, K_SIZE, F(capture.sink.pack_footer_bytes_max), "capture.sink.pack_footer_bytes_max"},
    {{"capture.linger", DUR, "seal a pack this long after its first record"}, K_DURATION, F(capture.sink.linger_ns), "capture.sink.linger_ns"},
    {{"capture.spool_bytes_max", SIZE, "spool quota in bytes (sealed and open packs)"}, K_SIZE, F(capture.sink.spool_bytes_max), "capture.sink.spool_bytes_max"},
    {{"capture.spool_packs_max", COUNT, "spool quota in packs"}, K_U32, F(capture.sink.spool_packs_max), "capture.sink.spool_packs_max"},
    {{"capture.full_policy", "block|refuse", "when the spool is full: wait up to capture.block_max, or refuse at once"}, K_FULL, F(capture.sink.full_policy), "capture.sink.full_policy"},
    {{"capture.block_max", DUR, "the longest a capture call waits when full (block)"}, K_DURATION, F(capture.sink.block_max_ns), "capture.sink.block_max_ns"},
    {{"service.spool_packs_max", COUNT, "the service's pack table"}, K_U32, F(service.spool_packs_max), "service.spool_packs_max"},
    {{"service.cycle_packs_max", COUNT, "packs uploaded per cycle (the bound on what is owed the catalog)"}, K_U32, F(service.cycle_packs_max), "service.cycle_packs_max"},
    {{"service.store_inflight_max", COUNT, "parallel object-store requests"}, K_U32, F(service.store_inflight_max), "service.store_inflight_max"},
    {{"service.index_batch_bytes_max", SIZE, "byte budget of one index insert (at least 64 MiB)"}, K_SIZE, F(service.index_batch_bytes_max), "service.index_batch_bytes_max"},
    {{"service.index_attempts_max", COUNT, "content refusals before a pack is set aside"}, K_U32, F(service.index_attempts_max), "service.index_attempts_max"},
    {{"service.backoff_base", DUR, "first retry delay"}, K_DURATION, F(service.backoff_base_ns), "service.backoff_base_ns"},
    {{"service.backoff_cap", DUR, "longest retry delay"}, K_DURATION, F(service.backoff_cap_ns), "service.backoff_cap_ns"},
    {{"service.lease_ttl", DUR, "the publisher lease's time to live"}, K_DURATION, F(service.lease_ttl_ns), "service.lease_ttl_ns"},
    {{"service.lease_guard", DUR, "local margin before the lease's expiry"}, K_DURATION, F(service.lease_guard_ns), "service.lease_guard_ns"},
    {{"service.list_page_max", COUNT, "keys asked for per LIST page"}, K_U32, F(service.list_page_max), "service.list_page_max"},
    {{"service.flush_max", COUNT, "flushes in flight at once"}, K_U32, F(service.flush_max), "service.flush_max"},
    {{"service.rejected_max", COUNT, "set-aside packs remembered by name"}, K_U32, F(service.rejected_max), "service.rejected_max"},
    {{"service.request_timeout", DUR, "the adapters' whole-request timeout"}, K_DURATION, F(service.request_timeout_ns), "service.request_timeout_ns"},
    {{"service.store_lists_complete", BOOL, "the store's LIST pages are complete (set by the probe; an uploader needs it)"}, K_BOOL, F(service.store_lists_complete), "service.store_lists_complete"},
    {{"engine.start_timeout", DUR, "each step of the engine's open"}, K_DURATION, F(engine.start_timeout_ns), "engine.start_timeout_ns"},
    {{"daemon.listen", TEXT, "host:port of capstore serve's /metrics and /status (empty: none)"}, K_TEXT, F(daemon.listen), "daemon.listen"},
    {{"daemon.log", TEXT, "capstore serve's log file, reopened on SIGHUP (empty: standard error)"}, K_TEXT, F(daemon.log_path), "daemon.log_path"},
    {{"daemon.log_format", "logfmt|json", "one event per line, as logfmt or as JSON"}, K_TEXT, F(daemon.log_format), "daemon.log_format"},
    {{"daemon.close_timeout", DUR, "the close budget on SIGTERM or SIGINT"}, K_DURATION, F(daemon.close_timeout_ns), "daemon.close_timeout_ns"},
    {{"daemon.scan_interval", DUR, "how often capstore serve looks for packs capture processes handed in"}, K_DURATION, F(daemon.scan_interval_ns), "daemon.scan_interval_ns"},
    {{"daemon.stats_interval", DUR, "a stats line in the log this often (0: none)"}, K_DURATION, F(daemon.stats_interval_ns), "daemon.stats_interval_ns"},
    {{"engine.stop_reserve", DUR, "kept back from a close's budget for the stop and the lease release"}, K_DURATION, F(engine.stop_reserve_ns), "engine.stop_reserve_ns"},
};
#define KEY_COUNT (sizeof keys / sizeof keys[0])

struct capstore_settings {
  capstore_config cfg;
  char *owned[KEY_COUNT]; /* the text values set, one per key */
  bool seen[KEY_COUNT];   /* set by the file being parsed: a key given twice (nested and dotted) is refused */
  char *password;         /* from CAPSTORE_CLICKHOUSE_PASSWORD at validate */
};

int capstore_settings_new(capstore_settings **out) {
  if (out == NULL) return CS_E_INVALID_ARGUMENT;
  capstore_settings *s = calloc(1, sizeof *s);
  if (s == NULL) return CS_E_NO_MEMORY;
  capstore_config_default(&s->cfg);
  *out = s;
  return CS_E_OK;
}

void capstore_settings_free(capstore_settings *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < KEY_COUNT; i++) free(s->owned[i]);
  if (s->password != NULL) {
    memset(s->password, 0, strlen(s->password)); /* a secret does not outlive its use */
    free(s->password);
  }
  free(s);
}

const capstore_config *capstore_settings_config(const capstore_settings *s) { return s == NULL ? NULL : &s->cfg; }

static capstore_setting_info key_infos[KEY_COUNT];
static pthread_once_t key_infos_once = PTHREAD_ONCE_INIT;
static void key_infos_fill(void) {
  for (size_t i = 0; i < KEY_COUNT; i++) key_infos[i] = keys[i].info;
}

const capstore_setting_info *capstore_settings_keys(size_t *count) {
  pthread_once(&key_infos_once, key_infos_fill);
  if (count != NULL) *count = KEY_COUNT;
  return key_infos;
}

static const key_def *find_key(const char *key) {
  for (size_t i = 0; i < KEY_COUNT; i++)
    if (strcmp(keys[i].info.key, key) == 0) return &keys[i];
  return NULL;
}

/* True when some key lies under section ("store" for "store.dir"). */
static bool is_section(const char *section) {
  size_t n = strlen(section);
  for (size_t i = 0; i < KEY_COUNT; i++)
    if (strncmp(keys[i].info.key, section, n) == 0 && keys[i].info.key[n] == '.') return true;
  return false;
}

/* Edit distance, for "did you mean" (keys are short; a bounded row). */
static size_t distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return SIZE_MAX;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

static int unknown_key(const char *key, char *msg, size_t msg_size) {
  const char *best = NULL;
  size_t best_d = 4; /* suggest only a near miss */
  for (size_t i = 0; i < KEY_COUNT; i++) {
    size_t d = distance(key, keys[i].info.key);
    if (d < best_d) best_d = d, best = keys[i].info.key;
  }
  char quoted[200];
  cs_quote_bytes(key, strlen(key), 120, quoted, sizeof quoted);
  if (best != NULL) return rt_refuse(CS_E_CONFIG, msg, msg_size, "unknown key '%s' (did you mean %s?)", quoted, best);
  return rt_refuse(CS_E_CONFIG, msg, msg_size, "unknown key '%s' (docs/configuration.md lists them)", quoted);
}

/* ---- values ---------------------------------------------------------------------------------- */

static const char *skip_space(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

/*
 * "12", "1.5", "0.25": a decimal number as whole and fraction (at most 9
 * digits after the point). Returns the end, or NULL for no number.
 */
static const char *parse_decimal(const char *p, uint64_t *whole, uint64_t *frac, uint32_t *frac_digits) {
  const char *start = p;
  *whole = 0, *frac = 0, *frac_digits = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    uint64_t digit = (uint64_t)(*p - '0');
    if (*whole > (UINT64_MAX - digit) / 10) return NULL; /* every value up to 2^64 - 1, none past it */
    *whole = *whole * 10 + digit;
  }
  if (p == start) return NULL;
  if (*p == '.') {
    p++;
    const char *fstart = p;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (*frac_digits == 9) return NULL;
      *frac = *frac * 10 + (uint64_t)(*p - '0');
      (*frac_digits)++;
    }
    if (p == fstart) return NULL;
  }
  return p;
}

/* whole.frac x unit, exactly, or false (too large, or not a whole number of the base unit). */
static bool scale(uint64_t whole, uint64_t frac, uint32_t frac_digits, uint64_t unit, uint64_t *out) {
  if (unit != 0 && whole > UINT64_MAX / unit) return false;
  uint64_t v = whole * unit;
  uint64_t pow10 = 1;
  for (uint32_t i = 0; i < frac_digits; i++) pow10 *= 10;
  /* frac / pow10 x unit, exact: frac < 10^9 and unit <= 2^40 or 3.6e12 keep this in 64 bits only when
     split: (frac x (unit / pow10)) when pow10 divides unit, else through 128 bits. */
  unsigned __int128 part = (unsigned __int128)frac * unit;
  if (part % pow10 != 0) return false;
  part /= pow10;
  if (part > UINT64_MAX - v) return false;
  *out = v + (uint64_t)part;
  return true;
}

typedef struct unit {
  const char *name;
  uint64_t factor;
} unit;

static const unit duration_units[] = {{"ns", 1}, {"us", 1000}, {"ms", 1000000}, {"s", 1000000000ull},
                                      {"m", 60000000000ull}, {"h", 3600000000000ull}};
static const unit size_units[] = {{"B", 1},
                                  {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40},
                                  {"kB", 1000}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000ull},
                                  {"TB", 1000000000000ull}};

static int parse_quantity(const char *key, const char *text, const unit *units, size_t unit_count, bool unit_required,
                          uint64_t *out, char *msg, size_t msg_size) {
  const char *what = units == duration_units ? "a duration" : "a size";
  const char *hint = units == duration_units ? "ns, us, ms, s, m, h" : "B, KiB, MiB, GiB, TiB, kB, MB, GB, TB";
  uint64_t whole, frac;
  uint32_t digits;
  const char *p = parse_decimal(skip_space(text), &whole, &frac, &digits);
  char quoted[100];
  cs_quote_bytes(text, strlen(text), 60, quoted, sizeof quoted);
  if (p == NULL)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: '%s' is not %s (a number and a unit: %s)", key, quoted, what, hint);
  p = skip_space(p);
  if (*p == '\0') {
    if (whole == 0 && digits == 0) return *out = 0, CS_E_OK;
    if (unit_required || digits > 0)
      return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: %s needs a unit (%s): '%s'", key, what, hint, quoted);
    return *out = whole, CS_E_OK; /* a size in bytes */
  }
  for (size_t i = 0; i < unit_count; i++) {
    size_t n = strlen(units[i].name);
    if (strncmp(p, units[i].name, n) != 0 || *skip_space(p + n) != '\0') continue;
    if (!scale(whole, frac, digits, units[i].factor, out))
      return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: '%s' is too large or not a whole number of %s", key, quoted,
                    units == duration_units ? "nanoseconds" : "bytes");
    return CS_E_OK;
  }
  return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: '%s' has no known unit (%s)", key, quoted, hint);
}

static int parse_count(const char *key, const char *text, uint64_t max, uint64_t *out, char *msg, size_t msg_size) {
  uint64_t whole, frac;
  uint32_t digits;
  const char *p = parse_decimal(text, &whole, &frac, &digits);
  char quoted[100];
  cs_quote_bytes(text, strlen(text), 60, quoted, sizeof quoted);
  if (p == NULL || *p != '\0' || digits > 0 || whole > max)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: '%s' is not a whole number from 0 to %" PRIu64, key, quoted, max);
  *out = whole;
  return CS_E_OK;
}

static int secret_refused(const key_def *k, char *msg, size_t msg_size) {
  return rt_refuse(CS_E_CONFIG, msg, msg_size,
                "%s: secrets are not read from configuration; set %s in the environment", k->info.key, k->field);
}

/* Sets k from text (the value's own bytes for a text key; no NUL inside). */
static int set_text(capstore_settings *s, const key_def *k, const char *value, char *msg, size_t msg_size) {
  void *field = (char *)&s->cfg + k->offset;
  uint64_t v = 0;
  int rc;
  switch (k->kind) {
    case K_SECRET:
      return secret_refused(k, msg, msg_size);
    case K_TEXT: {
      char *copy = strdup(value);
      if (copy == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "%s: out of memory", k->info.key);
      size_t index = (size_t)(k - keys);
      free(s->owned[index]);
      s->owned[index] = copy;
      *(const char **)field = copy;
      return CS_E_OK;
    }
    case K_BOOL:
      if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
        return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: expected true or false", k->info.key);
      *(bool *)field = value[0] == 't';
      return CS_E_OK;
    case K_U32:
      rc = parse_count(k->info.key, value, UINT32_MAX, &v, msg, msg_size);
      if (rc == CS_E_OK) *(uint32_t *)field = (uint32_t)v;
      return rc;
    case K_SIZE:
      rc = parse_quantity(k->info.key, value, size_units, sizeof size_units / sizeof size_units[0], false, &v, msg,
                          msg_size);
      if (rc == CS_E_OK) *(uint64_t *)field = v;
      return rc;
    case K_DURATION:
      rc = parse_quantity(k->info.key, value, duration_units, sizeof duration_units / sizeof duration_units[0], true,
                          &v, msg, msg_size);
      if (rc == CS_E_OK) *(uint64_t *)field = v;
      return rc;
    case K_ROLE:
      if (strcmp(value, "publisher") == 0) {
        *(cs_role *)field = CS_ROLE_PUBLISHER;
      } else if (strcmp(value, "uploader") == 0) {
        *(cs_role *)field = CS_ROLE_UPLOADER;
      } else if (strcmp(value, "capture") == 0) {
        *(cs_role *)field = CS_ROLE_CAPTURE;
      } else {
        return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: expected publisher, uploader or capture", k->info.key);
      }
      return CS_E_OK;
    case K_FULL:
      if (strcmp(value, "block") == 0) {
        *(cs_full_policy *)field = CS_FULL_BLOCK;
      } else if (strcmp(value, "refuse") == 0) {
        *(cs_full_policy *)field = CS_FULL_REFUSE;
      } else {
        return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: expected block or refuse", k->info.key);
      }
      return CS_E_OK;
  }
  return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: no such kind of value", k->info.key);
}

int capstore_settings_set(capstore_settings *s, const char *key, const char *value, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (s == NULL || key == NULL || value == NULL)
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "settings, key and value must not be NULL");
  const key_def *k = find_key(key);
  if (k == NULL) return unknown_key(key, msg, msg_size);
  return set_text(s, k, value, msg, msg_size);
}

/* ---- the file ---------------------------------------------------------------------------------- */

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "a whole number";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE: return "true or false";
    case JSON_NULL: return "null";
  }
  return "a value";
}

/* One leaf: the JSON type the key takes, then the value through set_text. */
static int set_json(capstore_settings *s, const key_def *k, const json_t *v, char *msg, size_t msg_size) {
  char number[32];
  const char *text = NULL;
  if (k->kind == K_SECRET) return secret_refused(k, msg, msg_size);
  if (json_is_null(v))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: null is not a value (leave the key out for its default)",
                  k->info.key);
  switch (k->kind) {
    case K_BOOL:
      if (!json_is_boolean(v)) break;
      text = json_is_true(v) ? "true" : "false";
      break;
    case K_U32:
    case K_SIZE:
    case K_DURATION:
      if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 0) return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: %" JSON_INTEGER_FORMAT " is negative", k->info.key, n);
        snprintf(number, sizeof number, "%" JSON_INTEGER_FORMAT, n);
        text = number;
      } else if (json_is_string(v) && k->kind != K_U32) {
        text = json_string_value(v);
      }
      break;
    default: /* text and the choices */
      if (json_is_string(v)) text = json_string_value(v);
      break;
  }
  if (text == NULL) {
    const char *want = k->kind == K_BOOL ? "true or false"
                       : k->kind == K_U32 ? "a whole number"
                       : k->kind == K_SIZE ? "a size (bytes, or text such as \"64MiB\")"
                       : k->kind == K_DURATION ? "a duration (text such as \"30s\")"
                                               : "a string";
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: expected %s, got %s", k->info.key, want, json_kind(v));
  }
  if (json_is_string(v) && strlen(text) != json_string_length(v))
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: the value holds a NUL byte (\\u0000)", k->info.key);
  return set_text(s, k, text, msg, msg_size);
}

static int walk(capstore_settings *s, json_t *obj, const char *prefix, unsigned depth, char *msg, size_t msg_size) {
  const char *name;
  json_t *v;
  json_object_foreach(obj, name, v) {
    char path[256];
    if (name[0] == '\0') return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s%san empty key", prefix, prefix[0] ? ": " : "");
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", name) >= sizeof path)
      return unknown_key(path, msg, msg_size);
    const key_def *k = find_key(path);
    int rc;
    if (k != NULL && s->seen[k - keys]) {
      rc = rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: given twice (once nested, once dotted)", path);
    } else if (k != NULL) {
      s->seen[k - keys] = true;
      rc = set_json(s, k, v, msg, msg_size);
    } else if (json_is_object(v) && is_section(path) && depth < 4) {
      rc = walk(s, v, path, depth + 1, msg, msg_size);
    } else if (is_section(path)) {
      rc = rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: expected an object of keys, got %s", path, json_kind(v));
    } else {
      rc = unknown_key(path, msg, msg_size);
    }
    if (rc != CS_E_OK) return rc;
  }
  return CS_E_OK;
}

int capstore_settings_parse(capstore_settings *s, const char *text, size_t len, const char *origin, char *msg,
                            size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (s == NULL || (text == NULL && len > 0))
    return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "settings and text must not be NULL");
  if (origin == NULL) origin = "configuration";
  if (len > FILE_BYTES_MAX)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: %zu bytes; a configuration is at most %u", origin, len, FILE_BYTES_MAX);
  char *copy = malloc(len + 1);
  if (copy == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "%s: out of memory", origin);
  if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) { /* a UTF-8 byte order mark: editors write one; skip it */
    memset(copy, ' ', 3);
    memcpy(copy + 3, text + 3, len - 3);
  } else if (len > 0) {
    memcpy(copy, text, len);
  }
  copy[len] = '\0';
  /* Whole-line comments become blanks: the same lines and columns for jansson's messages. */
  for (size_t i = 0; i < len;) {
    size_t j = i;
    while (j < len && (copy[j] == ' ' || copy[j] == '\t')) j++;
    size_t end = j;
    while (end < len && copy[end] != '\n') end++;
    if (j < len && copy[j] == '#') memset(copy + j, ' ', end - j);
    i = end + 1;
  }
  json_error_t err;
  json_t *root = json_loadb(copy, len, JSON_REJECT_DUPLICATES, &err);
  free(copy);
  if (root == NULL)
    return rt_refuse(CS_E_CONFIG, msg, msg_size, "%s:%d:%d: %s", origin, err.line, err.column, err.text);
  char inner[400];
  int rc = CS_E_OK;
  memset(s->seen, 0, sizeof s->seen);
  if (!json_is_object(root)) {
    rc = rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: expected an object of keys, got %s", origin, json_kind(root));
  } else if ((rc = walk(s, root, "", 0, inner, sizeof inner)) != CS_E_OK) {
    rt_refuse(rc, msg, msg_size, "%s: %s", origin, inner);
  }
  json_decref(root);
  return rc;
}

int capstore_settings_load(capstore_settings *s, const char *path, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (s == NULL || path == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "settings and path must not be NULL");
  FILE *f = fopen(path, "rb");
  if (f == NULL) return rt_refuse(CS_E_IO, msg, msg_size, "%s: %s", path, strerror(errno));
  char *buf = malloc(FILE_BYTES_MAX + 1);
  if (buf == NULL) {
    fclose(f);
    return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "%s: out of memory", path);
  }
  size_t n = fread(buf, 1, FILE_BYTES_MAX + 1, f);
  int failed = ferror(f);
  int saved = errno;
  fclose(f);
  int rc;
  if (failed)
    rc = rt_refuse(CS_E_IO, msg, msg_size, "%s: %s", path, strerror(saved));
  else if (n > FILE_BYTES_MAX)
    rc = rt_refuse(CS_E_CONFIG, msg, msg_size, "%s: over %u bytes; a configuration is at most that", path, FILE_BYTES_MAX);
  else
    rc = capstore_settings_parse(s, buf, n, path, msg, msg_size);
  free(buf);
  return rc;
}

/* ---- validation in the file's words ------------------------------------------------------------ */

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

/*
 * Rewrites each C field path in text as its file key ("service.lease_ttl_ns"
 * -> "service.lease_ttl"); a bare field after a prefixed one is read in that
 * one's struct ("service.lease_guard_ns must be below lease_ttl_ns").
 */
static void in_file_words(const char *text, char *out, size_t cap) {
  size_t o = 0;
  char scope[32] = "";
  for (const char *p = text; *p != '\0' && o + 1 < cap;) {
    if (!ident_char(*p)) {
      out[o++] = *p++;
      continue;
    }
    const char *start = p;
    while (ident_char(*p)) p++;
    size_t n = (size_t)(p - start);
    while (n > 0 && start[n - 1] == '.') n--; /* a sentence's full stop */
    char token[128], scoped[160];
    snprintf(token, sizeof token, "%.*s", (int)n, start);
    const char *replacement = strcmp(token, "CS_FULL_BLOCK") == 0    ? "capture.full_policy block"
                              : strcmp(token, "CS_FULL_REFUSE") == 0   ? "capture.full_policy refuse"
                              : strcmp(token, "CS_ROLE_PUBLISHER") == 0 ? "publisher"
                              : strcmp(token, "CS_ROLE_UPLOADER") == 0  ? "uploader"
                              : strcmp(token, "CS_ROLE_CAPTURE") == 0   ? "capture"
                                                                       : NULL;
    for (size_t i = 0; i < KEY_COUNT && replacement == NULL; i++) {
      if (keys[i].kind == K_SECRET) continue;
      snprintf(scoped, sizeof scoped, "%s%s", scope, token);
      if (strcmp(keys[i].field, token) == 0 || (scope[0] != '\0' && strcmp(keys[i].field, scoped) == 0))
        replacement = keys[i].info.key;
    }
    if (replacement != NULL && strchr(token, '.') != NULL) {
      const char *dot = strrchr(token, '.');
      snprintf(scope, sizeof scope, "%.*s", (int)(dot - token + 1), token); /* "service." */
    }
    int w = snprintf(out + o, cap - o, "%s%.*s", replacement != NULL ? replacement : token, (int)((size_t)(p - start) - n),
                     start + n);
    if (w < 0 || (size_t)w >= cap - o) {
      o = cap - 1;
      break;
    }
    o += (size_t)w;
  }
  out[o] = '\0';
}

int capstore_settings_validate(capstore_settings *s, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (s == NULL) return rt_refuse(CS_E_INVALID_ARGUMENT, msg, msg_size, "settings is NULL");
  const char *password = getenv("CAPSTORE_CLICKHOUSE_PASSWORD");
  if (s->password != NULL) {
    memset(s->password, 0, strlen(s->password));
    free(s->password);
    s->password = NULL;
  }
  s->cfg.clickhouse_password = NULL;
  if (password != NULL && s->cfg.clickhouse_url != NULL) {
    s->password = strdup(password);
    if (s->password == NULL) return rt_refuse(CS_E_NO_MEMORY, msg, msg_size, "out of memory");
    s->cfg.clickhouse_password = s->password;
  }
  char inner[400];
  int rc = capstore_config_validate(&s->cfg, inner, sizeof inner);
  if (rc == CS_E_OK) return CS_E_OK;
  /* The secrets come from the environment: name the variable, not the C field. */
  static const char *const secret_fields[][2] = {{"s3_access_key_id", "AWS_ACCESS_KEY_ID"},
                                                 {"s3_secret_access_key", "AWS_SECRET_ACCESS_KEY"},
                                                 {"s3_session_token", "AWS_SESSION_TOKEN"},
                                                 {"clickhouse_password", "CAPSTORE_CLICKHOUSE_PASSWORD"}};
  for (size_t i = 0; i < sizeof secret_fields / sizeof secret_fields[0]; i++) {
    size_t n = strlen(secret_fields[i][0]);
    if (strncmp(inner, secret_fields[i][0], n) != 0 || inner[n] != ' ') continue;
    if (strstr(inner, "not set") != NULL)
      return rt_refuse(rc, msg, msg_size, "%s is not set (S3 credentials come from the environment)", secret_fields[i][1]);
    return rt_refuse(rc, msg, msg_size, "%s has a control byte (CR, LF, ...)", secret_fields[i][1]);
  }
  char words[600];
  in_file_words(inner, words, sizeof words);
  return rt_refuse(rc, msg, msg_size, "%s", words);
}

/* ---- the effective configuration ---------------------------------------------------------------- */

static void duration_text(uint64_t ns, char *out, size_t cap) {
  for (size_t i = sizeof duration_units / sizeof duration_units[0]; i-- > 0;) {
    if (ns != 0 && ns % duration_units[i].factor == 0) {
      snprintf(out, cap, "%" PRIu64 "%s", ns / duration_units[i].factor, duration_units[i].name);
      return;
    }
  }
  snprintf(out, cap, "%" PRIu64 "%s", ns, ns == 0 ? "" : "ns");
}

static json_t *size_json(uint64_t bytes) {
  static const uint64_t binary[] = {1ull << 40, 1ull << 30, 1ull << 20, 1ull << 10};
  static const char *names[] = {"TiB", "GiB", "MiB", "KiB"};
  for (size_t i = 0; i < 4; i++) {
    if (bytes != 0 && bytes % binary[i] == 0) {
      char text[48];
      snprintf(text, sizeof text, "%" PRIu64 "%s", bytes / binary[i], names[i]);
      return json_string(text);
    }
  }
  if (bytes > (uint64_t)INT64_MAX) { /* past a JSON integer jansson holds: the digits as text */
    char text[32];
    snprintf(text, sizeof text, "%" PRIu64, bytes);
    return json_string(text);
  }
  return json_integer((json_int_t)bytes);
}

/* Puts value at the dotted key's place in root, making the sections. */
static void put(json_t *root, const char *key, json_t *value) {
  char path[128];
  snprintf(path, sizeof path, "%s", key);
  json_t *obj = root;
  char *seg = path;
  for (char *dot; (dot = strchr(seg, '.')) != NULL; seg = dot + 1) {
    *dot = '\0';
    json_t *sub = json_object_get(obj, seg);
    if (sub == NULL) {
      sub = json_object();
      json_object_set_new(obj, seg, sub);
    }
    obj = sub;
  }
  json_object_set_new(obj, seg, value);
}

size_t capstore_settings_json(const capstore_settings *s, char *buf, size_t size) {
  if (buf != NULL && size > 0) buf[0] = '\0';
  if (s == NULL) return 0;
  json_t *root = json_object();
  for (size_t i = 0; i < KEY_COUNT; i++) {
    const key_def *k = &keys[i];
    const void *field = (const char *)&s->cfg + k->offset;
    json_t *v = NULL;
    char text[48];
    switch (k->kind) {
      case K_SECRET: break;
      case K_TEXT: {
        const char *t = *(const char *const *)field;
        if (t != NULL) v = json_string(t);
        break;
      }
      case K_BOOL: v = json_boolean(*(const bool *)field); break;
      case K_U32: v = json_integer(*(const uint32_t *)field); break;
      case K_SIZE: v = size_json(*(const uint64_t *)field); break;
      case K_DURATION:
        duration_text(*(const uint64_t *)field, text, sizeof text);
        v = json_string(text);
        break;
      case K_ROLE: {
        cs_role role = *(const cs_role *)field;
        v = json_string(role == CS_ROLE_UPLOADER ? "uploader" : role == CS_ROLE_CAPTURE ? "capture" : "publisher");
        break;
      }
      case K_FULL: v = json_string(*(const cs_full_policy *)field == CS_FULL_REFUSE ? "refuse" : "block"); break;
    }
    if (v != NULL) put(root, k->info.key, v);
  }
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (text == NULL) return 0;
  size_t n = strlen(text);
  if (buf != NULL && size > 0) snprintf(buf, size, "%s\n", text);
  free(text);
  return n + 1;
}

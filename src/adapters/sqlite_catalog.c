/*
 * The SQLite catalog (include/capstore/sqlite_catalog.h). Each primitive of
 * docs/catalog-protocol.md is one statement, or one BEGIN IMMEDIATE
 * transaction where it writes several rows (INDEX, REJECT), so the fence is
 * evaluated and the rows inserted under one write lock. Every value is a bound
 * parameter. The server clock is CLOCK_REALTIME of the process running the
 * statement: processes sharing a database share the host's clock.
 */
#include "capstore/sqlite_catalog.h"

#include <assert.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(CS_CATALOG_SCHEMA_VERSION == 1u, "the table names below carry the schema version");
#define T_LEASE "cs_lease_v1"
#define T_PUBLISH "cs_publish_v1"
#define T_INVENTORY "cs_inventory_v1"
#define T_DESCRIPTOR "cs_descriptor_v1"
#define T_REJECTED "cs_rejected_v1"

/*
 * The fence: the head term has exactly one claim, ours, expiring after now +
 * margin, and no tombstone (a release writes acquired_at_ns = expires_at_ns;
 * a claim always has a TTL).
 */
#define FENCE_SQL                                                                                              \
  "(SELECT count(*) FROM " T_LEASE " WHERE term = (SELECT max(term) FROM " T_LEASE ")) = 1 AND "              \
  "(SELECT count(*) FROM " T_LEASE " WHERE term = (SELECT max(term) FROM " T_LEASE ") AND lease_id = :lease " \
  "AND expires_at_ns > :now + :margin AND expires_at_ns > acquired_at_ns) = 1"

/* The head term `t` is free for :lease: every claim at it expired, or all are ours. */
#define FREE_SQL(t)                                                                                   \
  "(NOT EXISTS (SELECT 1 FROM " T_LEASE " WHERE term = " t " AND expires_at_ns > :now) OR "         \
  "NOT EXISTS (SELECT 1 FROM " T_LEASE " WHERE term = " t " AND lease_id <> :lease))"

static const char schema_sql[] =
    "BEGIN IMMEDIATE;"
    "CREATE TABLE IF NOT EXISTS " T_LEASE " (term INTEGER NOT NULL, lease_id BLOB NOT NULL,"
    " acquired_at_ns INTEGER NOT NULL, expires_at_ns INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS " T_LEASE "_term ON " T_LEASE " (term);"
    "CREATE TABLE IF NOT EXISTS " T_PUBLISH " (version INTEGER NOT NULL, term INTEGER NOT NULL,"
    " lease_id BLOB NOT NULL, pack_count INTEGER NOT NULL, published_at_ns INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS " T_PUBLISH "_version ON " T_PUBLISH " (version);"
    "CREATE TABLE IF NOT EXISTS " T_INVENTORY " (pack_id BLOB NOT NULL, version INTEGER NOT NULL,"
    " object_key TEXT NOT NULL, size_bytes INTEGER NOT NULL, record_count INTEGER NOT NULL,"
    " created_at_ns INTEGER NOT NULL, sha256 BLOB NOT NULL);"
    "CREATE INDEX IF NOT EXISTS " T_INVENTORY "_pack ON " T_INVENTORY " (pack_id, version);"
    "CREATE INDEX IF NOT EXISTS " T_INVENTORY "_version ON " T_INVENTORY " (version);"
    "CREATE TABLE IF NOT EXISTS " T_DESCRIPTOR " (pack_id BLOB NOT NULL, version INTEGER NOT NULL,"
    " object_key TEXT NOT NULL, capture_id TEXT NOT NULL, tenant_id TEXT NOT NULL, experiment_id TEXT NOT NULL,"
    " run_id TEXT NOT NULL, session_id TEXT NOT NULL, request_id TEXT NOT NULL, sequence_id TEXT NOT NULL,"
    " model_id TEXT NOT NULL, model_revision TEXT NOT NULL, adapter_revision TEXT,"
    " capture_policy_version TEXT NOT NULL, hook_name TEXT NOT NULL, layer_number INTEGER NOT NULL,"
    " producer_rank INTEGER NOT NULL, step_number INTEGER NOT NULL, token_start INTEGER NOT NULL,"
    " token_end INTEGER NOT NULL, batch_position INTEGER NOT NULL, dtype TEXT NOT NULL, shape BLOB NOT NULL,"
    " captured_at_ns INTEGER NOT NULL, record_offset INTEGER NOT NULL, stored_length INTEGER NOT NULL,"
    " decoded_length INTEGER NOT NULL, crc32 INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS " T_DESCRIPTOR "_pack ON " T_DESCRIPTOR " (pack_id, capture_id, version);"
    /* A search walks this index in its order and stops at the page's end. */
    "CREATE INDEX IF NOT EXISTS " T_DESCRIPTOR "_order ON " T_DESCRIPTOR " (pack_id, record_offset, capture_id);"
    /* An array's candidates (array_candidates) without a scan of every descriptor. */
    "CREATE INDEX IF NOT EXISTS " T_DESCRIPTOR "_array ON " T_DESCRIPTOR " (run_id, hook_name);"
    "CREATE TABLE IF NOT EXISTS " T_REJECTED " (pack_id BLOB NOT NULL, reason TEXT NOT NULL,"
    " lease_id BLOB NOT NULL, rejected_at_ns INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS " T_REJECTED "_pack ON " T_REJECTED " (pack_id);"
    "COMMIT;";

/* The twelve text fields of a record, in column order after object_key. */
#define TEXT_FIELDS 12

typedef struct sqlite_catalog {
  sqlite3 *db;
  char **row_text; /* read_descriptors' text, freed at the next call */
  uint32_t row_text_count;
} sqlite_catalog;

static uint64_t server_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * CS_SEC_NS + (uint64_t)ts.tv_nsec;
}

static cs_outcome outcome_of(int rc) {
  switch (rc & 0xff) {
  case SQLITE_OK:
  case SQLITE_DONE:
  case SQLITE_ROW: return CS_OUT_OK;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return CS_OUT_THROTTLED;
  case SQLITE_TOOBIG: return CS_OUT_TOO_LARGE;
  case SQLITE_CONSTRAINT:
  case SQLITE_MISMATCH:
  case SQLITE_RANGE: return CS_OUT_INVALID;
  case SQLITE_PERM:
  case SQLITE_READONLY:
  case SQLITE_AUTH: return CS_OUT_FORBIDDEN;
  default: return CS_OUT_SERVER_ERROR;
  }
}

static void res_set(sqlite_catalog *c, cs_catalog_result *res, int rc) {
  res->outcome = outcome_of(rc);
  res->server_code = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : rc;
  snprintf(res->detail, sizeof res->detail, "%s", res->server_code == 0 ? "" : sqlite3_errmsg(c->db));
}

/* Binders by parameter name; a name the statement does not use is skipped. */
static int bind_i64(sqlite3_stmt *st, const char *name, uint64_t value) {
  int i = sqlite3_bind_parameter_index(st, name);
  return i == 0 ? SQLITE_OK : sqlite3_bind_int64(st, i, (sqlite3_int64)value);
}

static int bind_blob(sqlite3_stmt *st, const char *name, const void *bytes, int len) {
  int i = sqlite3_bind_parameter_index(st, name);
  return i == 0 ? SQLITE_OK : sqlite3_bind_blob(st, i, bytes, len, SQLITE_TRANSIENT);
}

static int bind_text(sqlite3_stmt *st, int index, const cs_pack_text *text) {
  if (text->bytes == NULL) return sqlite3_bind_null(st, index);
  if (text->len > INT32_MAX) return SQLITE_TOOBIG;
  return sqlite3_bind_text(st, index, text->bytes, (int)text->len, SQLITE_TRANSIENT);
}

static int prepare(sqlite_catalog *c, const char *sql, sqlite3_stmt **st) {
  return sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
}

/* Binds :lease, :now and the given term/margin/ttl/version names, then steps once. */
typedef struct params {
  const cs_uuid *lease;
  uint64_t now, term, base, margin, ttl, version, count;
} params;

static int bind_params(sqlite3_stmt *st, const params *p) {
  int rc = p->lease != NULL ? bind_blob(st, ":lease", p->lease->bytes, 16) : SQLITE_OK;
  if (rc == SQLITE_OK) rc = bind_i64(st, ":now", p->now);
  if (rc == SQLITE_OK) rc = bind_i64(st, ":term", p->term);
  if (rc == SQLITE_OK) rc = bind_i64(st, ":base", p->base);
  if (rc == SQLITE_OK) rc = bind_i64(st, ":margin", p->margin);
  if (rc == SQLITE_OK) rc = bind_i64(st, ":ttl", p->ttl);
  if (rc == SQLITE_OK) rc = bind_i64(st, ":version", p->version);
  if (rc == SQLITE_OK) rc = bind_i64(st, ":count", p->count);
  return rc;
}

/* Runs one write statement; the answer is OK whether or not a row went in (the fence decides). */
static int exec_write(sqlite_catalog *c, const char *sql, const params *p, cs_catalog_result *res) {
  sqlite3_stmt *st = NULL;
  int rc = prepare(c, sql, &st);
  if (rc == SQLITE_OK) rc = bind_params(st, p);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  res_set(c, res, rc);
  sqlite3_finalize(st);
  return CS_E_OK;
}

static int sc_schema_ensure(void *self, cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (res == NULL) return CS_E_INVALID_ARGUMENT;
  int rc = sqlite3_exec(c->db, schema_sql, NULL, NULL, NULL);
  res_set(c, res, rc);
  if (rc != SQLITE_OK) sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
  return CS_E_OK;
}

static int sc_head(void *self, const cs_uuid *lease_id, cs_cat_head *out, cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (lease_id == NULL || out == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  static const char sql[] = "WITH h AS (SELECT coalesce(max(term), 0) AS t FROM " T_LEASE ") SELECT h.t, " FREE_SQL(
      "h.t") ", (SELECT coalesce(max(version), 0) FROM " T_PUBLISH "), (SELECT coalesce(max(expires_at_ns), :now) - :now"
             " FROM " T_LEASE " WHERE term = h.t AND expires_at_ns > :now), (SELECT coalesce(max(version), 0) FROM "
             T_INVENTORY ") FROM h";
  memset(out, 0, sizeof *out);
  sqlite3_stmt *st = NULL;
  params p = {.lease = lease_id, .now = server_now_ns()};
  int rc = prepare(c, sql, &st);
  if (rc == SQLITE_OK) rc = bind_params(st, &p);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    out->head_term = (uint64_t)sqlite3_column_int64(st, 0);
    out->head_free = sqlite3_column_int(st, 1) != 0;
    out->watermark = (uint64_t)sqlite3_column_int64(st, 2);
    int64_t busy_for = sqlite3_column_int64(st, 3);
    out->busy_for_ns = out->head_free || busy_for < 0 ? 0 : (uint64_t)busy_for;
    out->index_floor = (uint64_t)sqlite3_column_int64(st, 4);
  }
  res_set(c, res, rc == SQLITE_ROW ? SQLITE_OK : rc == SQLITE_DONE ? SQLITE_INTERNAL : rc);
  sqlite3_finalize(st);
  return CS_E_OK;
}

static int sc_claim(void *self, const cs_uuid *lease_id, uint64_t base_term, uint64_t ttl_ns, cs_catalog_result *res) {
  if (lease_id == NULL || res == NULL || ttl_ns == 0 || ttl_ns > (uint64_t)INT64_MAX / 4 ||
      base_term >= (uint64_t)INT64_MAX)
    return CS_E_INVALID_ARGUMENT;
  static const char sql[] = "INSERT INTO " T_LEASE " (term, lease_id, acquired_at_ns, expires_at_ns) "
                            "SELECT :base + 1, :lease, :now, :now + :ttl WHERE (SELECT coalesce(max(term), 0) FROM " T_LEASE
                            ") = :base AND " FREE_SQL(":base");
  params p = {.lease = lease_id, .now = server_now_ns(), .base = base_term, .ttl = ttl_ns};
  return exec_write(self, sql, &p, res);
}

static int sc_read_claims(void *self, const cs_uuid *lease_id, uint64_t term, cs_claims *out, cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (lease_id == NULL || out == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  static const char sql[] = "SELECT count(*), coalesce(sum(lease_id = :lease AND expires_at_ns > :now AND "
                            "expires_at_ns > acquired_at_ns), 0) FROM " T_LEASE
                            " WHERE term = :term";
  memset(out, 0, sizeof *out);
  sqlite3_stmt *st = NULL;
  params p = {.lease = lease_id, .now = server_now_ns(), .term = term};
  int rc = prepare(c, sql, &st);
  if (rc == SQLITE_OK) rc = bind_params(st, &p);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    out->claim_count = (uint32_t)sqlite3_column_int64(st, 0);
    out->sole_mine = out->claim_count == 1 && sqlite3_column_int64(st, 1) == 1;
  }
  res_set(c, res, rc == SQLITE_ROW ? SQLITE_OK : rc == SQLITE_DONE ? SQLITE_INTERNAL : rc);
  sqlite3_finalize(st);
  return CS_E_OK;
}

static int sc_release(void *self, const cs_uuid *lease_id, uint64_t term, uint64_t margin_ns, cs_catalog_result *res) {
  if (lease_id == NULL || res == NULL || term >= (uint64_t)INT64_MAX || margin_ns >= (uint64_t)INT64_MAX / 4)
    return CS_E_INVALID_ARGUMENT;
  static const char sql[] = "INSERT INTO " T_LEASE " (term, lease_id, acquired_at_ns, expires_at_ns) "
                            "SELECT :term + 1, :lease, :now + :margin, :now + :margin WHERE (SELECT coalesce(max(term), 0) FROM " T_LEASE
                            ") = :term AND " FREE_SQL(":term") " AND (SELECT lease_id FROM " T_LEASE
                            " ORDER BY rowid DESC LIMIT 1) = :lease";
  params p = {.lease = lease_id, .now = server_now_ns(), .term = term, .margin = margin_ns};
  return exec_write(self, sql, &p, res);
}

/* Inside a write transaction: does the fence pass for p? rc answers SQLite's code. */
/*
 * Inventory rows only at a version above the watermark and at or above every
 * inventory row: a late INDEX (its sender saw no answer and indexed again at
 * a higher version) can no longer make its packs visible below the watermark
 * (docs/catalog-protocol.md, "Late rows").
 */
static int version_check(sqlite_catalog *c, uint64_t version, bool *passes) {
  sqlite3_stmt *st = NULL;
  *passes = false;
  int rc = prepare(c, "SELECT (SELECT coalesce(max(version), 0) FROM " T_INVENTORY ") <= ?1 AND "
                      "(SELECT coalesce(max(version), 0) FROM " T_PUBLISH ") < ?1", &st);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 1, (sqlite3_int64)version);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *passes = sqlite3_column_int(st, 0) == 1;
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

static int fence_check(sqlite_catalog *c, const params *p, bool *passes) {
  sqlite3_stmt *st = NULL;
  *passes = false;
  int rc = prepare(c, "SELECT " FENCE_SQL, &st);
  if (rc == SQLITE_OK) rc = bind_params(st, p);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *passes = sqlite3_column_int(st, 0) == 1;
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

static int insert_descriptor(sqlite3_stmt *st, const cs_pack_ref *ref, const cs_pack_record *r, uint64_t version) {
  const cs_pack_meta *m = &r->meta;
  const cs_pack_text *texts[TEXT_FIELDS] = {&m->capture_id,  &m->tenant_id,       &m->experiment_id, &m->run_id,
                                            &m->session_id,  &m->request_id,      &m->sequence_id,   &m->model_id,
                                            &m->model_revision, &m->adapter_revision, &m->capture_policy_version,
                                            &m->hook_name};
  const char *dtype = cs_dtype_name(m->dtype);
  if (dtype == NULL || m->rank > CS_PACK_RANK_MAX || m->capture_id.bytes == NULL) return SQLITE_MISMATCH;
  uint8_t shape[4 * CS_PACK_RANK_MAX];
  for (uint32_t i = 0; i < m->rank; i++)
    for (int b = 0; b < 4; b++) shape[4 * i + (uint32_t)b] = (uint8_t)(m->shape[i] >> (8 * b));
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  int rc = sqlite3_bind_blob(st, 1, ref->pack_id.bytes, 16, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)version);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 3, ref->key, (int)ref->key_len, SQLITE_TRANSIENT);
  for (int i = 0; i < TEXT_FIELDS && rc == SQLITE_OK; i++) rc = bind_text(st, 4 + i, texts[i]);
  const sqlite3_int64 ints[] = {m->layer_number, m->producer_rank, (sqlite3_int64)m->step_number,
                                (sqlite3_int64)m->token_start, (sqlite3_int64)m->token_end, m->batch_position};
  for (int i = 0; i < 6 && rc == SQLITE_OK; i++) rc = sqlite3_bind_int64(st, 16 + i, ints[i]);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 22, dtype, -1, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 23, shape, (int)(4 * m->rank), SQLITE_TRANSIENT);
  const sqlite3_int64 tail[] = {(sqlite3_int64)m->captured_at_ns, (sqlite3_int64)r->offset,
                                (sqlite3_int64)r->stored_length, (sqlite3_int64)r->decoded_length, r->crc32};
  for (int i = 0; i < 5 && rc == SQLITE_OK; i++) rc = sqlite3_bind_int64(st, 24 + i, tail[i]);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int insert_inventory(sqlite3_stmt *st, const cs_pack_ref *ref, uint64_t version) {
  sqlite3_reset(st);
  int rc = sqlite3_bind_blob(st, 1, ref->pack_id.bytes, 16, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)version);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 3, ref->key, (int)ref->key_len, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 4, (sqlite3_int64)ref->size_bytes);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 5, ref->record_count);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 6, (sqlite3_int64)ref->created_at_ns);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 7, ref->sha256, 32, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Descriptors first, then inventory rows, as the protocol orders them (one transaction here). */
static int index_rows(sqlite_catalog *c, uint64_t version, const cs_index_pack *packs, uint32_t pack_count) {
  static const char desc_sql[] = "INSERT INTO " T_DESCRIPTOR " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                                 "?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)";
  static const char inv_sql[] = "INSERT INTO " T_INVENTORY " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
  sqlite3_stmt *desc = NULL, *inv = NULL;
  int rc = prepare(c, desc_sql, &desc);
  if (rc == SQLITE_OK) rc = prepare(c, inv_sql, &inv);
  for (uint32_t i = 0; i < pack_count && rc == SQLITE_OK; i++)
    for (uint32_t r = 0; r < packs[i].record_count && rc == SQLITE_OK; r++)
      rc = insert_descriptor(desc, packs[i].ref, &packs[i].records[r], version);
  for (uint32_t i = 0; i < pack_count && rc == SQLITE_OK; i++) rc = insert_inventory(inv, packs[i].ref, version);
  sqlite3_finalize(desc);
  sqlite3_finalize(inv);
  return rc;
}

static int reject_rows(sqlite_catalog *c, const params *p, const cs_uuid *ids, uint32_t count) {
  sqlite3_stmt *st = NULL;
  int rc = prepare(c, "INSERT INTO " T_REJECTED " VALUES (?1, 'set aside', ?2, ?3)", &st);
  for (uint32_t i = 0; i < count && rc == SQLITE_OK; i++) {
    sqlite3_reset(st);
    rc = sqlite3_bind_blob(st, 1, ids[i].bytes, 16, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 2, p->lease->bytes, 16, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 3, (sqlite3_int64)p->now);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

/* BEGIN IMMEDIATE; fence; rows (index or reject); COMMIT. A fence that fails commits nothing and answers OK. */
static int fenced_transaction(sqlite_catalog *c, const params *p, const cs_index_pack *packs, uint32_t pack_count,
                              const cs_uuid *ids, uint32_t id_count, cs_catalog_result *res) {
  int rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
  bool passes = false;
  if (rc == SQLITE_OK) rc = fence_check(c, p, &passes);
  if (rc == SQLITE_OK && passes && packs != NULL) rc = version_check(c, p->version, &passes);
  if (rc == SQLITE_OK && passes && packs != NULL) rc = index_rows(c, p->version, packs, pack_count);
  if (rc == SQLITE_OK && passes && ids != NULL) rc = reject_rows(c, p, ids, id_count);
  if (rc == SQLITE_OK) rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
  res_set(c, res, rc);
  if (rc != SQLITE_OK) sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
  return CS_E_OK;
}

static int sc_index(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version, const cs_index_pack *packs,
                    uint32_t pack_count, cs_catalog_result *res) {
  if (lease_id == NULL || res == NULL || (packs == NULL && pack_count > 0) || margin_ns > (uint64_t)INT64_MAX / 4 ||
      version > (uint64_t)INT64_MAX)
    return CS_E_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < pack_count; i++)
    if (packs[i].ref == NULL || packs[i].ref->key_len >= CS_KEY_MAX ||
        (packs[i].records == NULL && packs[i].record_count > 0))
      return CS_E_INVALID_ARGUMENT;
  if (!cs_catalog_index_keys_ok(packs, pack_count, res->detail, sizeof res->detail)) {
    res->outcome = CS_OUT_INVALID; /* nothing stored: catalog.h's key rule */
    res->server_code = 0;
    return CS_E_OK;
  }
  params p = {.lease = lease_id, .now = server_now_ns(), .margin = margin_ns, .version = version};
  return fenced_transaction(self, &p, packs, pack_count, NULL, 0, res);
}

static int sc_publish(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version, uint64_t term,
                      uint32_t pack_count, cs_catalog_result *res) {
  if (lease_id == NULL || res == NULL || margin_ns > (uint64_t)INT64_MAX / 4 || version > (uint64_t)INT64_MAX)
    return CS_E_INVALID_ARGUMENT;
  static const char sql[] = "INSERT INTO " T_PUBLISH " (version, term, lease_id, pack_count, published_at_ns) "
                            "SELECT :version, :term, :lease, :count, :now WHERE " FENCE_SQL;
  params p = {.lease = lease_id, .now = server_now_ns(), .margin = margin_ns, .version = version, .term = term,
              .count = pack_count};
  return exec_write(self, sql, &p, res);
}

static int sc_reject(void *self, const cs_uuid *lease_id, uint64_t margin_ns, const cs_uuid *ids, uint32_t count,
                     cs_catalog_result *res) {
  if (lease_id == NULL || res == NULL || (ids == NULL && count > 0) || margin_ns > (uint64_t)INT64_MAX / 4)
    return CS_E_INVALID_ARGUMENT;
  static const cs_uuid none;
  params p = {.lease = lease_id, .now = server_now_ns(), .margin = margin_ns};
  return fenced_transaction(self, &p, NULL, 0, ids == NULL ? &none : ids, count, res);
}

static int sc_committed(void *self, const cs_uuid *ids, uint32_t count, bool *held, bool *rejected,
                        cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (res == NULL || (count > 0 && (ids == NULL || held == NULL || rejected == NULL))) return CS_E_INVALID_ARGUMENT;
  static const char sql[] = "SELECT EXISTS (SELECT 1 FROM " T_INVENTORY " WHERE pack_id = ?1 AND version <= "
                            "(SELECT coalesce(max(version), 0) FROM " T_PUBLISH ")), "
                            "EXISTS (SELECT 1 FROM " T_REJECTED " WHERE pack_id = ?1)";
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL); /* one snapshot for every id */
  if (rc == SQLITE_OK) rc = prepare(c, sql, &st);
  for (uint32_t i = 0; i < count && rc == SQLITE_OK; i++) {
    sqlite3_reset(st);
    rc = sqlite3_bind_blob(st, 1, ids[i].bytes, 16, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) break;
    held[i] = sqlite3_column_int(st, 0) != 0;
    rejected[i] = sqlite3_column_int(st, 1) != 0;
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_OK) rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
  res_set(c, res, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc);
  if (rc != SQLITE_OK) sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
  return CS_E_OK;
}

static void row_text_free(sqlite_catalog *c) {
  for (uint32_t i = 0; i < c->row_text_count; i++) free(c->row_text[i]);
  free(c->row_text);
  c->row_text = NULL;
  c->row_text_count = 0;
}

/* Copies column i's text into out[cap] whole, or answers why not: a NUL byte is refused, never cut at. */
static const char *key_from_column(sqlite3_stmt *st, int i, char *out, size_t cap) {
  const char *text = (const char *)sqlite3_column_text(st, i);
  size_t len = (size_t)sqlite3_column_bytes(st, i);
  if (text == NULL) return "a row's key is NULL";
  if (len >= cap) return "a row's key is longer than CS_KEY_MAX";
  if (memchr(text, '\0', len) != NULL) return "a row's key holds a NUL byte";
  memcpy(out, text, len);
  out[len] = '\0';
  return NULL;
}

/*
 * Fills one descriptor row from the result columns; its text lives in one
 * block kept until the next read, each text whole by its byte count (a NUL
 * inside is U+0000, kept) and NUL-terminated. Returns NULL, or what is wrong
 * with the row (a key the adapter never writes: another writer's row).
 */
static const char *row_from_columns(sqlite_catalog *c, sqlite3_stmt *st, cs_descriptor_row *row) {
  memset(row, 0, sizeof *row);
  if (sqlite3_column_bytes(st, 0) != 16) return "a row's pack_id is not 16 bytes";
  memcpy(row->pack_id.bytes, sqlite3_column_blob(st, 0), 16);
  row->version = (uint64_t)sqlite3_column_int64(st, 1);
  const char *problem = key_from_column(st, 2, row->key, sizeof row->key);
  if (problem != NULL) return problem;
  cs_pack_meta *m = &row->record.meta;
  cs_pack_text *texts[TEXT_FIELDS] = {&m->capture_id,  &m->tenant_id,       &m->experiment_id, &m->run_id,
                                      &m->session_id,  &m->request_id,      &m->sequence_id,   &m->model_id,
                                      &m->model_revision, &m->adapter_revision, &m->capture_policy_version,
                                      &m->hook_name};
  const unsigned char *text[TEXT_FIELDS];
  size_t len[TEXT_FIELDS], total = 0;
  for (int i = 0; i < TEXT_FIELDS; i++) { /* the text first, then its byte count, as SQLite asks */
    bool absent = sqlite3_column_type(st, 3 + i) == SQLITE_NULL;
    if (absent && i != 9) return "a row's text is NULL"; /* only adapter_revision may be */
    text[i] = absent ? NULL : sqlite3_column_text(st, 3 + i);
    if (!absent && text[i] == NULL) return "no memory for a row's text";
    len[i] = absent ? 0 : (size_t)sqlite3_column_bytes(st, 3 + i);
    total += len[i] + 1;
  }
  char *block = malloc(total);
  if (block == NULL) return "no memory for a row's text";
  c->row_text[c->row_text_count++] = block;
  for (int i = 0; i < TEXT_FIELDS; i++) {
    if (text[i] == NULL) continue; /* adapter_revision absent */
    memcpy(block, text[i], len[i]);
    block[len[i]] = '\0';
    *texts[i] = (cs_pack_text){block, len[i]};
    block += len[i] + 1;
  }
  m->layer_number = (int32_t)sqlite3_column_int64(st, 15);
  m->producer_rank = (uint32_t)sqlite3_column_int64(st, 16);
  m->step_number = (uint64_t)sqlite3_column_int64(st, 17);
  m->token_start = (uint64_t)sqlite3_column_int64(st, 18);
  m->token_end = (uint64_t)sqlite3_column_int64(st, 19);
  m->batch_position = (uint32_t)sqlite3_column_int64(st, 20);
  const char *dtype = (const char *)sqlite3_column_text(st, 21); /* by its byte count: "float32\0x" is none */
  if (cs_dtype_parse(dtype, (size_t)sqlite3_column_bytes(st, 21), &m->dtype) != CS_E_OK) m->dtype = CS_DTYPE_COUNT_;
  int shape_bytes = sqlite3_column_bytes(st, 22);
  const uint8_t *shape = sqlite3_column_blob(st, 22);
  if (m->dtype == CS_DTYPE_COUNT_) return "a row's dtype is unknown";
  if (shape_bytes % 4 != 0 || shape_bytes > 4 * (int)CS_PACK_RANK_MAX) return "a row's shape is malformed";
  m->rank = (uint32_t)shape_bytes / 4;
  for (uint32_t i = 0; i < m->rank; i++)
    m->shape[i] = (uint32_t)shape[4 * i] | (uint32_t)shape[4 * i + 1] << 8 | (uint32_t)shape[4 * i + 2] << 16 |
                  (uint32_t)shape[4 * i + 3] << 24;
  m->captured_at_ns = (uint64_t)sqlite3_column_int64(st, 23);
  row->record.offset = (uint64_t)sqlite3_column_int64(st, 24);
  row->record.stored_length = (uint64_t)sqlite3_column_int64(st, 25);
  row->record.decoded_length = (uint64_t)sqlite3_column_int64(st, 26);
  row->record.crc32 = (uint32_t)sqlite3_column_int64(st, 27);
  return NULL;
}

static int sc_read_descriptors(void *self, uint64_t watermark, const cs_uuid *pack_id, cs_descriptor_row *rows,
                               uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (pack_id == NULL || count == NULL || res == NULL || (rows == NULL && capacity > 0) ||
      watermark > (uint64_t)INT64_MAX)
    return CS_E_INVALID_ARGUMENT;
  /* One row per capture id: the highest version at or below the reader's watermark (argMax). */
  /* Only rows an inventory row names at their (pack_id, version), as docs/catalog-protocol.md says readers see. */
  static const char sql[] = "SELECT * FROM " T_DESCRIPTOR " d WHERE d.pack_id = ?1 AND d.version = (SELECT max(e.version) "
                            "FROM " T_DESCRIPTOR " e JOIN " T_INVENTORY " i ON i.pack_id = e.pack_id AND i.version = "
                            "e.version WHERE e.pack_id = d.pack_id AND e.capture_id = d.capture_id "
                            "AND e.version <= ?2) GROUP BY d.capture_id ORDER BY d.capture_id";
  *count = 0;
  row_text_free(c);
  c->row_text = calloc(capacity == 0 ? 1 : capacity, sizeof *c->row_text);
  if (c->row_text == NULL) return CS_E_NO_MEMORY;
  sqlite3_stmt *st = NULL;
  int rc = prepare(c, sql, &st);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 1, pack_id->bytes, 16, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)watermark);
  int err = CS_E_OK;
  const char *problem = NULL;
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) break;
    if (*count == capacity) {
      err = CS_E_NO_MEMORY;
      break;
    }
    problem = row_from_columns(c, st, &rows[*count]);
    if (problem != NULL) {
      rc = SQLITE_CORRUPT;
      break;
    }
    (*count)++;
  }
  sqlite3_finalize(st);
  res_set(c, res, rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc);
  if (problem != NULL) { /* nothing half-read is answered */
    *count = 0;
    snprintf(res->detail, sizeof res->detail, "read_descriptors: %s", problem);
  }
  return err;
}

/* The inventory at watermark, one row per pack (its highest version there), by pack id after `after`. */
static int sc_list_packs(void *self, uint64_t watermark, const cs_uuid *after, cs_inventory_row *rows,
                         uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (count == NULL || res == NULL || (rows == NULL && capacity > 0) || watermark > (uint64_t)INT64_MAX)
    return CS_E_INVALID_ARGUMENT;
  *count = 0;
  /* SQLite gives a bare column the values of the row max() chose: the highest version's. Blobs compare bytewise. */
  static const char sql[] = "SELECT pack_id, object_key, size_bytes, record_count, created_at_ns, sha256, max(version) "
                            "FROM " T_INVENTORY " WHERE version <= ?1 AND pack_id > ?2 GROUP BY pack_id "
                            "ORDER BY pack_id LIMIT ?3";
  static const uint8_t none[1] = {0};
  sqlite3_stmt *st = NULL;
  int rc = prepare(c, sql, &st);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 1, (sqlite3_int64)watermark);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 2, after != NULL ? after->bytes : none, after != NULL ? 16 : 0,
                                              SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 3, (sqlite3_int64)capacity);
  const char *problem = NULL;
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) break;
    cs_inventory_row *row = &rows[*count];
    memset(row, 0, sizeof *row);
    const void *id = sqlite3_column_blob(st, 0);
    const char *key = (const char *)sqlite3_column_text(st, 1);
    const void *sha = sqlite3_column_blob(st, 5);
    sqlite3_int64 size = sqlite3_column_int64(st, 2), records = sqlite3_column_int64(st, 3);
    sqlite3_int64 created = sqlite3_column_int64(st, 4), version = sqlite3_column_int64(st, 6);
    if (id == NULL || sqlite3_column_bytes(st, 0) != 16 || sha == NULL || sqlite3_column_bytes(st, 5) != 32 ||
        key == NULL || size < 0 || records < 0 || records > UINT32_MAX || created < 0 || version < 0 ||
        cs_pack_ref_set_key(&row->ref, key, (size_t)sqlite3_column_bytes(st, 1)) != CS_E_OK) {
      problem = "an inventory row out of its types";
      rc = SQLITE_CORRUPT;
      break;
    }
    memcpy(row->ref.pack_id.bytes, id, 16);
    memcpy(row->ref.sha256, sha, 32);
    row->ref.size_bytes = (uint64_t)size;
    row->ref.record_count = (uint32_t)records;
    row->ref.created_at_ns = (uint64_t)created;
    row->version = (uint64_t)version;
    (*count)++;
  }
  sqlite3_finalize(st);
  res_set(c, res, rc == SQLITE_DONE ? SQLITE_OK : rc);
  if (problem != NULL) {
    *count = 0;
    snprintf(res->detail, sizeof res->detail, "list_packs: %s", problem);
  }
  return CS_E_OK;
}

/* A search statement's text as it is built (SQL fragments only: every value is a bound parameter). */
typedef struct sql_text {
  char text[8192];
  size_t len;
  bool overflow;
} sql_text;

static void sql_add(sql_text *q, const char *fragment) {
  size_t n = strlen(fragment);
  if (q->len + n >= sizeof q->text) {
    q->overflow = true;
    return;
  }
  memcpy(q->text + q->len, fragment, n + 1);
  q->len += n;
}

/* " AND d.<column> IN (?, ...)" for a list of count values. */
static void sql_in(sql_text *q, const char *column, uint32_t count) {
  sql_add(q, " AND d.");
  sql_add(q, column);
  sql_add(q, " IN (");
  for (uint32_t i = 0; i < count; i++) sql_add(q, i == 0 ? "?" : ", ?");
  sql_add(q, ")");
}

/* The eight equality fields of a filter, their columns in the same order. */
static const char *const search_text_columns[8] = {"tenant_id",  "experiment_id", "run_id",   "session_id",
                                                   "request_id", "sequence_id",   "model_id", "model_revision"};

static void search_texts(const cs_search_filter *f, const cs_pack_text *out[8]) {
  out[0] = &f->tenant_id;
  out[1] = &f->experiment_id;
  out[2] = &f->run_id;
  out[3] = &f->session_id;
  out[4] = &f->request_id;
  out[5] = &f->sequence_id;
  out[6] = &f->model_id;
  out[7] = &f->model_revision;
}

/*
 * The search statement: visible rows (an inventory row at their version, at
 * or below the watermark, the highest such version of their capture, no
 * rejected row), the filter's conditions, the keyset position, the order.
 * Parameters are positional, in the order search_bind binds them.
 */
static void search_sql(sql_text *q, const cs_search_filter *f, bool after) {
  /*
   * One row per (pack, capture): its highest visible version, and of copies at that version the first
   * (rowid). No GROUP BY: SQLite then walks the order index from the cursor and stops at the LIMIT
   * (EXPLAIN QUERY PLAN: "SEARCH d USING INDEX ..._order"), where a GROUP BY sorted every visible row.
   */
  /* The inventory by subqueries, not a JOIN: two inventory rows at one (pack, version) must not show a record twice. */
  /* (A pack indexed twice at one version, by a publisher that crashed between INDEX and PUBLISH and a successor
     reusing the version, has two inventory rows there: the latest is taken.) */
  sql_add(q, "SELECT d.*, (SELECT i.size_bytes FROM " T_INVENTORY " i WHERE i.pack_id = d.pack_id AND i.version = "
             "d.version ORDER BY i.rowid DESC LIMIT 1), (SELECT i.sha256 FROM " T_INVENTORY " i WHERE i.pack_id = "
             "d.pack_id AND i.version = d.version ORDER BY i.rowid DESC LIMIT 1) FROM " T_DESCRIPTOR
             " d WHERE d.version <= ? AND d.version = (SELECT "
             "max(e.version) FROM " T_DESCRIPTOR " e JOIN " T_INVENTORY " j ON j.pack_id = e.pack_id AND j.version = "
             "e.version WHERE e.pack_id = d.pack_id AND e.capture_id = d.capture_id AND e.version <= ?) AND d.rowid = "
             "(SELECT min(e.rowid) FROM " T_DESCRIPTOR " e WHERE e.pack_id = d.pack_id AND e.capture_id = d.capture_id "
             "AND e.version = d.version) AND NOT EXISTS (SELECT 1 FROM " T_REJECTED " r WHERE r.pack_id = d.pack_id)");
  const cs_pack_text *texts[8];
  search_texts(f, texts);
  for (int i = 0; i < 8; i++) {
    if (texts[i]->bytes == NULL) continue;
    sql_add(q, " AND d.");
    sql_add(q, search_text_columns[i]);
    sql_add(q, " = ?");
  }
  if (f->hook_name_count > 0) sql_in(q, "hook_name", f->hook_name_count);
  if (f->capture_id_count > 0) sql_in(q, "capture_id", f->capture_id_count);
  if (f->has_layer) sql_add(q, " AND d.layer_number BETWEEN ? AND ?");
  if (f->has_step) sql_add(q, " AND d.step_number BETWEEN ? AND ?");
  if (f->has_tokens) sql_add(q, " AND d.token_start < ? AND d.token_end > ?");
  if (f->has_captured_at) sql_add(q, " AND d.captured_at_ns BETWEEN ? AND ?");
  if (f->has_dtype) sql_add(q, " AND d.dtype = ?");
  if (after) sql_add(q, " AND (d.pack_id, d.record_offset, d.capture_id) > (?, ?, ?)");
  sql_add(q, " ORDER BY d.pack_id, d.record_offset, d.capture_id LIMIT ?");
}

static int bind_list(sqlite3_stmt *st, int *at, const cs_pack_text *values, uint32_t count) {
  int rc = SQLITE_OK;
  for (uint32_t i = 0; i < count && rc == SQLITE_OK; i++) rc = bind_text(st, (*at)++, &values[i]);
  return rc;
}

static int bind_pair(sqlite3_stmt *st, int *at, int64_t a, int64_t b) {
  int rc = sqlite3_bind_int64(st, (*at)++, a);
  return rc == SQLITE_OK ? sqlite3_bind_int64(st, (*at)++, b) : rc;
}

static int search_bind(sqlite3_stmt *st, uint64_t watermark, const cs_search_filter *f, const cs_search_key *after,
                       uint32_t capacity) {
  int at = 1;
  int rc = bind_pair(st, &at, (int64_t)watermark, (int64_t)watermark);
  const cs_pack_text *texts[8];
  search_texts(f, texts);
  for (int i = 0; i < 8 && rc == SQLITE_OK; i++)
    if (texts[i]->bytes != NULL) rc = bind_text(st, at++, texts[i]);
  if (rc == SQLITE_OK) rc = bind_list(st, &at, f->hook_names, f->hook_name_count);
  if (rc == SQLITE_OK) rc = bind_list(st, &at, f->capture_ids, f->capture_id_count);
  if (rc == SQLITE_OK && f->has_layer) rc = bind_pair(st, &at, f->layer_min, f->layer_max);
  if (rc == SQLITE_OK && f->has_step) rc = bind_pair(st, &at, (int64_t)f->step_min, (int64_t)f->step_max);
  if (rc == SQLITE_OK && f->has_tokens) rc = bind_pair(st, &at, (int64_t)f->token_max, (int64_t)f->token_min);
  if (rc == SQLITE_OK && f->has_captured_at)
    rc = bind_pair(st, &at, (int64_t)f->captured_min_ns, (int64_t)f->captured_max_ns);
  if (rc == SQLITE_OK && f->has_dtype) rc = sqlite3_bind_text(st, at++, cs_dtype_name(f->dtype), -1, SQLITE_STATIC);
  if (rc == SQLITE_OK && after != NULL) {
    cs_pack_text id = {after->capture_id, after->capture_id_len};
    rc = sqlite3_bind_blob(st, at++, after->pack_id.bytes, 16, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, at++, (sqlite3_int64)after->offset);
    if (rc == SQLITE_OK) rc = bind_text(st, at++, &id);
  }
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, at++, (sqlite3_int64)capacity);
  return rc;
}

/* The search columns after the descriptor's: the pack's size and sha256. */
static const char *search_row_from_columns(sqlite_catalog *c, sqlite3_stmt *st, cs_search_row *row) {
  memset(row, 0, sizeof *row);
  const char *problem = row_from_columns(c, st, &row->d);
  if (problem != NULL) return problem;
  sqlite3_int64 size = sqlite3_column_int64(st, 28);
  const void *sha = sqlite3_column_blob(st, 29);
  if (sha == NULL || sqlite3_column_bytes(st, 29) != 32 || size < 0) return "a search row's pack fields are out of their types";
  row->pack_size_bytes = (uint64_t)size;
  memcpy(row->pack_sha256, sha, 32);
  return NULL;
}

/*
 * Each row's footer offset: the first multiple of 64 at or after the end of
 * its pack's last record at its version, one statement per pack of the page
 * (rows come in pack order). Returns an SQLite code; *problem for bad data.
 */
static int search_footers(sqlite_catalog *c, cs_search_row *rows, uint32_t count, const char **problem) {
  /* The last record by offset (walking the order index backwards: no scan of the pack), the longest at it. */
  static const char sql[] = "SELECT record_offset + stored_length FROM " T_DESCRIPTOR " WHERE pack_id = ?1 AND "
                            "version = ?2 ORDER BY record_offset DESC, stored_length DESC LIMIT 1";
  sqlite3_stmt *st = NULL;
  int rc = count > 0 ? prepare(c, sql, &st) : SQLITE_OK;
  for (uint32_t i = 0; i < count && rc == SQLITE_OK; i++) {
    if (i > 0 && cs_uuid_equal(&rows[i].d.pack_id, &rows[i - 1].d.pack_id) && rows[i].d.version == rows[i - 1].d.version) {
      rows[i].footer_offset = rows[i - 1].footer_offset;
      continue;
    }
    sqlite3_reset(st);
    rc = sqlite3_bind_blob(st, 1, rows[i].d.pack_id.bytes, 16, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)rows[i].d.version);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
      if (rc == SQLITE_DONE) rc = SQLITE_CORRUPT, *problem = "a row's pack has no rows at its version";
      break;
    }
    sqlite3_int64 end = sqlite3_column_int64(st, 0);
    if (end < 0 || (uint64_t)end > (uint64_t)INT64_MAX) {
      *problem = "a pack's records end out of range";
      rc = SQLITE_CORRUPT;
      break;
    }
    rows[i].footer_offset = end <= 64 ? 64 : ((uint64_t)end + 63) / 64 * 64;
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

static int sc_search(void *self, uint64_t watermark, const cs_search_filter *filter, const cs_search_key *after,
                     cs_search_row *rows, uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (count == NULL || res == NULL || (rows == NULL && capacity > 0) || watermark > (uint64_t)INT64_MAX ||
      cs_search_filter_check(filter, NULL, 0) != CS_E_OK || (after != NULL && after->capture_id_len > CS_SEARCH_KEY_ID_MAX))
    return CS_E_INVALID_ARGUMENT;
  *count = 0;
  sql_text *sql = calloc(1, sizeof *sql); /* 8 KiB: off the stack */
  if (sql == NULL) return CS_E_NO_MEMORY;
  search_sql(sql, filter, after != NULL);
  if (sql->overflow) {
    free(sql);
    return CS_E_TOO_LARGE;
  }
  row_text_free(c);
  c->row_text = calloc(capacity == 0 ? 1 : capacity, sizeof *c->row_text);
  if (c->row_text == NULL) {
    free(sql);
    return CS_E_NO_MEMORY;
  }
  sqlite3_stmt *st = NULL;
  int rc = prepare(c, sql->text, &st);
  free(sql);
  if (rc == SQLITE_OK) rc = search_bind(st, watermark, filter, after, capacity);
  const char *problem = NULL;
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) break;
    assert(*count < capacity); /* LIMIT */
    problem = search_row_from_columns(c, st, &rows[*count]);
    if (problem != NULL) {
      rc = SQLITE_CORRUPT;
      break;
    }
    (*count)++;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_DONE) rc = search_footers(c, rows, *count, &problem);
  res_set(c, res, rc == SQLITE_DONE ? SQLITE_OK : rc);
  if (problem != NULL || res->outcome != CS_OUT_OK) *count = 0;
  if (problem != NULL) snprintf(res->detail, sizeof res->detail, "search: %s", problem);
  return CS_E_OK;
}

/* Column text as a cs_pack_text (NULL bytes for SQL NULL). */
static cs_pack_text column_text(sqlite3_stmt *st, int col) {
  const char *bytes = (const char *)sqlite3_column_text(st, col);
  return (cs_pack_text){bytes, bytes == NULL ? 0 : (size_t)sqlite3_column_bytes(st, col)};
}

static int sc_array_candidates(void *self, uint64_t watermark, const cs_pack_text *array_id,
                               const cs_array_window *window, cs_array_candidate_fn emit, void *ctx,
                               cs_catalog_result *res) {
  sqlite_catalog *c = self;
  if (array_id == NULL || array_id->bytes == NULL || array_id->len == 0 || array_id->len > INT32_MAX || emit == NULL ||
      res == NULL || watermark > (uint64_t)INT64_MAX)
    return CS_E_INVALID_ARGUMENT;
  /* Each (pack, capture) at its lowest visible version; the order makes each slot's first row its winner. */
  static const char sql[] =
      "SELECT d.hook_name = '" CS_ARRAY_HOOK_GEOMETRY "' AS g, d.step_number, d.request_id, d.capture_id, d.pack_id,"
      " d.object_key, d.record_offset, d.stored_length, d.crc32, min(d.version) AS v, d.sequence_id FROM " T_DESCRIPTOR
      " d WHERE d.run_id = ?1 AND ((d.hook_name = '" CS_ARRAY_HOOK_GEOMETRY "' AND ?3) OR (d.hook_name = '"
      CS_ARRAY_HOOK_CHUNK "' AND d.step_number >= ?4 AND d.step_number < ?5))"
      " AND d.version <= ?2 AND EXISTS (SELECT 1 FROM " T_INVENTORY " i WHERE i.pack_id = d.pack_id AND i.version ="
      " d.version) AND NOT EXISTS (SELECT 1 FROM " T_REJECTED " r WHERE r.pack_id = d.pack_id)"
      " GROUP BY d.pack_id, d.capture_id ORDER BY g DESC, d.step_number, v, d.pack_id, d.capture_id";
  sqlite3_stmt *st = NULL;
  int rc = prepare(c, sql, &st);
  if (rc == SQLITE_OK) rc = bind_text(st, 1, array_id);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)watermark);
  /* Slots are step numbers, held as INTEGER: the window is cut to what an INTEGER holds. */
  uint64_t from = window != NULL ? window->slot_from : 0, to = window != NULL ? window->slot_to : UINT64_MAX;
  if (rc == SQLITE_OK) rc = sqlite3_bind_int(st, 3, window == NULL || window->with_geometry);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 4, (sqlite3_int64)(from > INT64_MAX ? INT64_MAX : from));
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 5, (sqlite3_int64)(to > INT64_MAX ? INT64_MAX : to));
  int stop = 0;
  const char *problem = NULL;
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) break;
    cs_array_candidate a;
    memset(&a, 0, sizeof a);
    a.geometry = sqlite3_column_int64(st, 0) != 0;
    sqlite3_int64 slot = sqlite3_column_int64(st, 1), offset = sqlite3_column_int64(st, 6);
    sqlite3_int64 stored = sqlite3_column_int64(st, 7), crc = sqlite3_column_int64(st, 8);
    sqlite3_int64 version = sqlite3_column_int64(st, 9);
    a.nonce = column_text(st, 2);
    a.capture_id = column_text(st, 3);
    a.geometry_hash = column_text(st, 10);
    cs_pack_text key = column_text(st, 5);
    const void *pack = sqlite3_column_blob(st, 4);
    if (slot < 0) continue; /* a step past 2^63 (an INTEGER holds it negative): no array has such a slot */
    if (pack == NULL || sqlite3_column_bytes(st, 4) != 16 || a.nonce.bytes == NULL || a.capture_id.bytes == NULL ||
        a.geometry_hash.bytes == NULL || key.bytes == NULL || key.len >= CS_KEY_MAX || offset < 0 || stored < 0 ||
        crc < 0 || crc > (sqlite3_int64)UINT32_MAX || version < 0) {
      problem = "array_candidates: a row is out of its types";
      rc = SQLITE_CORRUPT;
      break;
    }
    memcpy(a.pack_id.bytes, pack, 16);
    memcpy(a.key, key.bytes, key.len);
    a.slot = (uint64_t)slot;
    a.offset = (uint64_t)offset;
    a.stored_length = (uint64_t)stored;
    a.crc32 = (uint32_t)crc;
    a.first_version = (uint64_t)version;
    stop = emit(ctx, &a);
    if (stop != 0) {
      rc = SQLITE_DONE;
      break;
    }
  }
  sqlite3_finalize(st);
  res_set(c, res, rc == SQLITE_DONE ? SQLITE_OK : rc);
  if (problem != NULL) snprintf(res->detail, sizeof res->detail, "%s", problem);
  return stop;
}

static void sc_close(void *self) {
  sqlite_catalog *c = self;
  row_text_free(c);
  sqlite3_close(c->db);
  free(c);
}

static const cs_catalog_ops sqlite_ops = {.name = "sqlite",
                                          .schema_ensure = sc_schema_ensure,
                                          .head = sc_head,
                                          .claim = sc_claim,
                                          .read_claims = sc_read_claims,
                                          .release = sc_release,
                                          .index = sc_index,
                                          .publish = sc_publish,
                                          .reject = sc_reject,
                                          .committed = sc_committed,
                                          .read_descriptors = sc_read_descriptors,
                                          .list_packs = sc_list_packs,
                                          .search = sc_search,
                                          .array_candidates = sc_array_candidates,
                                          .close = sc_close};

int cs_sqlite_catalog_open(const char *path, uint32_t busy_timeout_ms, cs_catalog *out) {
  if (path == NULL || path[0] == '\0' || out == NULL) return CS_E_INVALID_ARGUMENT;
  sqlite_catalog *c = calloc(1, sizeof *c);
  if (c == NULL) return CS_E_NO_MEMORY;
  int rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(c->db, busy_timeout_ms == 0 ? 5000 : (int)busy_timeout_ms);
  if (rc == SQLITE_OK) rc = sqlite3_exec(c->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_exec(c->db, "PRAGMA synchronous=FULL", NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_close(c->db);
    free(c);
    return rc == SQLITE_NOMEM ? CS_E_NO_MEMORY : CS_E_IO;
  }
  out->ops = &sqlite_ops;
  out->self = c;
  return CS_E_OK;
}

int cs_sqlite_catalog_tables(const cs_catalog *catalog, char *buf, size_t buf_size) {
  if (catalog == NULL || catalog->ops != &sqlite_ops || buf == NULL || buf_size == 0) return CS_E_INVALID_ARGUMENT;
  const sqlite_catalog *c = catalog->self;
  sqlite3_stmt *st = NULL;
  buf[0] = '\0';
  if (sqlite3_prepare_v2(c->db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", -1, &st, NULL) !=
      SQLITE_OK)
    return CS_E_IO;
  size_t used = 0;
  int err = CS_E_OK;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    int n = snprintf(buf + used, buf_size - used, "%s%s", used == 0 ? "" : ",", name);
    if (n < 0 || (size_t)n >= buf_size - used) {
      err = CS_E_TOO_LARGE;
      break;
    }
    used += (size_t)n;
  }
  sqlite3_finalize(st);
  return err;
}

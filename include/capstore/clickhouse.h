/*
 * capstore/clickhouse.h: the ClickHouse catalog adapter (HTTP interface,
 * libcurl). Works on ClickHouse 18.16 (Debian 12) and current releases; see
 * docs/clickhouse.md for the schema, the statements and the quirks it handles.
 *
 * Each cs_catalog_ops primitive is one statement, sent with
 * wait_end_of_query=1 and answered in TabSeparated. INDEX is two: the
 * descriptor rows as the body of an unfenced INSERT ... FORMAT TabSeparated
 * (catalog.h's bulk form; no statement size limit applies to them), then the
 * fenced inventory statement. Every value is validated (ids are canonical
 * UUIDs) or escaped before it is sent; a record text may hold U+0000 (sent
 * as \0, read back whole), an object key holding NUL is refused (catalog.h's
 * key rule: outcome INVALID, nothing sent). The adapter never retries. A
 * transport failure is REFUSED only when libcurl wrote no request byte
 * (connect refused, TLS handshake or certificate verification failed);
 * otherwise it is UNKNOWN: the statement may have applied.
 */
#ifndef CAPSTORE_CLICKHOUSE_H
#define CAPSTORE_CLICKHOUSE_H

#include "capstore/catalog.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cs_clickhouse_config {
  const char *url;           /* "https://host:8443/"; http:// only with allow_insecure */
  const char *user;          /* X-ClickHouse-User */
  const char *password;      /* X-ClickHouse-Key */
  const char *table_prefix;  /* [A-Za-z0-9_]{1,64}; tables are <prefix>_<name>_v<schema> */
  const char *holder;        /* free text written into claims (host:pid); NULL: "" */
  uint64_t connect_timeout_ns;  /* 0: 5 s */
  uint64_t request_timeout_ns;  /* whole request; 0: 30 s */
  /*
   * Bounds every statement (sent as max_query_size; 0: 262144, the server's
   * default). INDEX's descriptor rows travel as a body and are not bounded
   * by it; its inventory statement (about 300 bytes a pack) is.
   */
  uint64_t query_bytes_max;
  uint64_t answer_bytes_max;    /* larger answers are a SERVER_ERROR; 0: 16 MiB */
  bool allow_insecure;          /* permit an http:// url (loopback tests, a trusted network) */
  /*
   * A replicated catalog (docs/catalog-protocol.md, "Replicated catalog"):
   * the cluster's name in the servers' remote_servers, or NULL for one
   * server. With it, the tables are ReplicatedMergeTree made ON CLUSTER, and
   * every statement carries insert_quorum, insert_quorum_timeout and
   * select_sequential_consistency=1. The schema check refuses tables of the
   * other kind (clients with and without the settings never mix).
   */
  const char *cluster;          /* [A-Za-z0-9_.-]{1,64} */
  uint32_t insert_quorum;       /* with cluster: replicas a write must reach: all the cluster's (checked) */
  uint64_t insert_quorum_timeout_ns; /* 0: half of request_timeout_ns; must be below it */
} cs_clickhouse_config;

/*
 * Checks cfg->url as cs_endpoint_validate does (service.h): an explicit
 * https:// scheme, or http:// only with allow_insecure; a host, an optional
 * port; and no replication setting in its query
 * (cs_clickhouse_url_replication_setting). Returns CS_E_OK, or CS_E_CONFIG
 * with msg naming the field ("clickhouse.url", "clickhouse.allow_insecure")
 * and, for a replication setting, the parameter; CS_E_INVALID_ARGUMENT for a
 * NULL cfg.
 */
int cs_clickhouse_config_validate(const cs_clickhouse_config *cfg, char *msg, size_t msg_size);

/*
 * Finds a query parameter of url (before any '#') that the replicated mode
 * sends itself: a name that, percent-decoded as the server decodes it and in
 * any case, starts with insert_quorum (insert_quorum_timeout,
 * insert_quorum_parallel, ...) or is select_sequential_consistency or
 * distributed_ddl_task_timeout. Returns true with that name in name (as
 * written, where it is one of those five settings; "insert_quorum*" for any
 * other name of the family, whose bytes are not echoed; cap at least 32),
 * false with "" when there is none or url is NULL.
 */
bool cs_clickhouse_url_replication_setting(const char *url, char *name, size_t cap);

/*
 * Opens the adapter (no request is sent). libcurl may speak HTTP and HTTPS
 * only (HTTPS only without allow_insecure) and follows no redirect. Returns
 * CS_E_OK, CS_E_CONFIG for a url cs_clickhouse_config_validate refuses or a
 * bad prefix, CS_E_NO_MEMORY.
 */
int cs_clickhouse_open(const cs_clickhouse_config *cfg, cs_catalog *out);

/* The name of a table of the schema ("claims", ...) with prefix and version. */
int cs_clickhouse_table_name(const char *prefix, const char *table, char *out, size_t cap);

/*
 * Parses "Code: N" from an error body. Returns CS_E_OK with *code, or
 * CS_E_PARSE when the body names no code.
 */
int cs_clickhouse_parse_error(const char *body, size_t len, int32_t *code);

/*
 * Classifies an HTTP answer (status, body) into an outcome; *code gets
 * "Code: N" or 0. A replicated table's refusals that say the statement did
 * not apply (285 too few replicas, 286 an earlier quorum write pending, 289
 * replica behind, 242 read-only without ZooKeeper, 999 coordination) are
 * REFUSED; 319 (quorum status unknown) may have applied: UNKNOWN. A 200
 * answer is an error only when a line starts "Code: N" (an exception written
 * after rows); "Code: N" inside a row is data.
 */
cs_outcome cs_clickhouse_classify(long http_status, const char *body, size_t len, int32_t *code);

/*
 * A strict TabSeparated reader over a mutable buffer: fields are unescaped in
 * place and NUL-terminated, their lengths the truth: \0 decodes to a NUL byte
 * inside a field (U+0000 in a text), so a caller that reads a field as a C
 * string must first check it holds none. A raw NUL byte (the server escapes
 * it), an unknown escape, a short or long row or a missing final newline is
 * CS_E_PARSE.
 */
typedef struct cs_clickhouse_tsv {
  char *cur;
  char *end;
} cs_clickhouse_tsv;

/* Returns 1 with fields[0..count) (NULL for \N), 0 at the end, CS_E_PARSE. */
int cs_clickhouse_tsv_next(cs_clickhouse_tsv *tsv, char **fields, size_t *lengths, uint32_t count);

/*
 * The schema check's answer (rows of table name and engine, and one row ""
 * and the current database; exposed for the fuzzer): sets exists[i] for
 * each of names[5] present, copies the database name (A-Z a-z 0-9 _) into
 * db. CS_E_CONFIG with detail when a table's engine is of the other kind
 * (Replicated* exactly when replicated), CS_E_PARSE for anything else
 * unexpected. body is unescaped in place.
 */
int cs_clickhouse_tables_answer(char *body, size_t len, const char *const names[5], bool replicated, bool exists[5],
                                char *db, size_t db_cap, char *detail, size_t detail_cap);

/* Strict unsigned decimal (no sign, no spaces, no overflow): CS_E_OK or CS_E_PARSE. */
int cs_clickhouse_parse_u64(const char *text, uint64_t *out);

/*
 * Fills row from the CS_CATALOG_DESCRIPTOR_COLUMN_COUNT fields of one row of
 * a READ_DESCRIPTORS answer, as cs_clickhouse_tsv_next gives them: the twelve
 * texts point into the fields, whole by their lengths (a NUL inside kept);
 * every other field (pack id, key, numbers, dtype, shape) must hold no NUL,
 * the key must fit CS_KEY_MAX, only adapter_revision may be \N. Returns
 * CS_E_OK or CS_E_PARSE.
 */
int cs_clickhouse_descriptor_row(char **fields, const size_t *lengths, cs_descriptor_row *row);

/* The columns of a LIST_PACKS answer row, in order. */
#define CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT 7u
/*
 * Fills row from one row of a LIST_PACKS answer: pack id (canonical UUID
 * text), key (no NUL, under CS_KEY_MAX), size, sha256 (64 lowercase hex
 * digits), record count (32 bits), created_at, version. No field may be
 * \N or hold a NUL. Returns CS_E_OK or CS_E_PARSE.
 */
int cs_clickhouse_inventory_row(char **fields, const size_t *lengths, cs_inventory_row *row);

/* The columns of a SEARCH answer row: the descriptor's, then the pack's size, sha256 and end of its last record. */
#define CS_CLICKHOUSE_SEARCH_COLUMN_COUNT (CS_CATALOG_DESCRIPTOR_COLUMN_COUNT + 3u)
/*
 * Fills row from one row of a SEARCH answer: the descriptor's columns as
 * cs_clickhouse_descriptor_row reads them, then the inventory row's size,
 * its sha256 (64 lowercase hex digits) and the end of the pack's last
 * record at that version (max(offset + stored_length)), from which
 * footer_offset is the first multiple of 64 at or after it, at least 64.
 * No field past the twelve texts may be \N or hold a NUL. Returns CS_E_OK
 * or CS_E_PARSE (an end whose footer offset overflows included).
 */
int cs_clickhouse_search_row(char **fields, const size_t *lengths, cs_search_row *row);

/*
 * ARRAY_CANDIDATES' answer: one TabSeparated row per candidate, the columns
 * g (1 for the geometry, 0 for a chunk), step_number, request_id,
 * capture_id, pack_id, key, offset, stored_length, crc32, first version,
 * sequence_id (the geometry hash). The three texts point into fields (unescaped in place); CS_E_PARSE for any
 * field out of its type.
 */
#define CS_CLICKHOUSE_ARRAY_COLUMN_COUNT 11u

/* The detail of an answer refused for its size (over the adapter's answer_bytes_max; outcome SERVER_ERROR). */
#define CS_CLICKHOUSE_ANSWER_TOO_LARGE "answer exceeds answer_bytes_max"
int cs_clickhouse_array_candidate_row(char **fields, const size_t *lengths, cs_array_candidate *out);

#ifdef __cplusplus
}
#endif

#endif

/*
 * capstore/capstore.h: the umbrella header and the service runtime, the one
 * object a capture process opens: capture -> spool -> object store ->
 * catalog, driven by the engine and service cores (engine.h, service.h)
 * with the real adapters.
 *
 *   capstore_config cfg;
 *   capstore_config_default(&cfg);
 *   cfg.spool_dir = "spool"; cfg.store_dir = "bucket"; cfg.sqlite_path = "catalog.db";
 *   capstore *cs;
 *   if (capstore_open(&cfg, &cs, msg, sizeof msg) != CS_E_OK) ... msg names the field
 *   capstore_write(cs, &meta, bytes, length, msg, sizeof msg);      // the model's hot path
 *   capstore_flush(cs, capstore_clock_ns() + 10 * CS_SEC_NS, &report, msg, sizeof msg);
 *   capstore_close(cs, 10 * CS_SEC_NS, msg, sizeof msg);
 *   capstore_free(cs);
 *
 * Threads: one driver thread steps the engine and service cores; every
 * blocking primitive runs on a lane of its own (store, catalog, lease,
 * spool) with a bounded queue, and every answer comes back to the driver as
 * an event. The driver holds no policy: retries, backoff, batch splitting,
 * set-aside, the fence and the close order are the cores', so what the
 * simulator proves is what runs. docs/operations.md describes it.
 *
 * Every function is safe to call from several threads at once, except
 * capstore_free and capstore_reader_free, each the last call on its object
 * (a reader's calls on one reader run one at a time). Errors are negative cs_err
 * values; msg gets one sentence naming what is wrong ("" on success).
 */
#ifndef CAPSTORE_CAPSTORE_H
#define CAPSTORE_CAPSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capstore/capture.h"
#include "capstore/catalog.h"
#include "capstore/clickhouse.h"
#include "capstore/dirstore.h"
#include "capstore/engine.h"
#include "capstore/pack.h"
#include "capstore/read_plan.h"
#include "capstore/s3.h"
#include "capstore/service.h"
#include "capstore/settings.h"
#include "capstore/sink.h"
#include "capstore/spool.h"
#include "capstore/sqlite_catalog.h"
#include "capstore/store.h"
#include "capstore/types.h"
#include "capstore/arrays.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct capstore_config {
  /*
   * The catalog's name ([A-Za-z0-9_]{1,64}): its ClickHouse tables' prefix and, with "/", its key
   * prefix. The SQLite catalog's tables carry no prefix: one catalog per SQLite file.
   */
  const char *name;
  /*
   * CS_ROLE_PUBLISHER (default) or CS_ROLE_UPLOADER: this process runs the service. CS_ROLE_CAPTURE:
   * this process only captures; it seals packs into a private spool under spool_dir/.capture/ and
   * hands each to the `capstore serve` daemon that owns spool_dir (a hard link, so no byte is
   * copied); no store or catalog is opened here, and none may be configured.
   */
  cs_role role;
  const char *spool_dir;         /* required: the local spool (created when missing) */

  /* The object store: store_dir (a dirstore), or s3_endpoint + s3_bucket. Exactly one. */
  const char *store_dir;
  const char *s3_endpoint;       /* "https://host[:port]"; http:// only with s3_allow_insecure */
  const char *s3_bucket;
  const char *s3_region;         /* NULL: $AWS_REGION, else "us-east-1" */
  const char *s3_access_key_id;  /* NULL: $AWS_ACCESS_KEY_ID */
  const char *s3_secret_access_key; /* NULL: $AWS_SECRET_ACCESS_KEY */
  const char *s3_session_token;  /* NULL: $AWS_SESSION_TOKEN (may be unset) */
  bool s3_allow_insecure;
  uint32_t s3_max_connections;   /* requests in flight; 0: service.store_inflight_max (a reader's: 64) */
  /* Object keys start with this; NULL: "<name>/". Empty, or ends with '/'; no "." or ".." segment. */
  const char *key_prefix;

  /* The catalog: sqlite_path, or clickhouse_url. Exactly one. */
  const char *sqlite_path;
  const char *clickhouse_url;    /* "https://host:8443/"; http:// only with clickhouse_allow_insecure */
  const char *clickhouse_user;   /* NULL: "default" */
  const char *clickhouse_password; /* NULL: none */
  const char *clickhouse_database; /* [A-Za-z0-9_]{1,64}, made by the operator; NULL: the user's default */
  bool clickhouse_allow_insecure;
  /* A replicated catalog (docs/operations.md, "A replicated catalog"): the cluster's name in the servers'
     remote_servers, NULL for one server; the replicas a write must reach (all of them); its timeout
     (0: half the catalog timeout). */
  const char *clickhouse_cluster;
  uint32_t clickhouse_insert_quorum;
  uint64_t clickhouse_insert_quorum_timeout_ns;
  uint64_t catalog_connect_timeout_ns; /* 0: 5 s */
  uint64_t catalog_timeout_ns;   /* whole request; 0: service.request_timeout_ns */

  /* Reconcile: the pass at start (off for a bucket prefix other catalogs write) and a periodic one. */
  bool reconcile_at_start;       /* default true */
  /* service.reconcile_interval_ns: 0 (the default here) runs no periodic pass */

  uint64_t fence_margin_ns;      /* the fence's margin, above the catalog's apply delay; 0 (default):
                                    100 ms on SQLite (transactional), 1 s on ClickHouse */
  bool probe_store;              /* run cs_store_probe at open (S3; default true) */
  /*
   * Capture arrays on a store that enforces If-None-Match (docs/arrays.md, "Who wins a slot"): a slot's
   * claim this old whose slot has no visible record may be taken by another writer (its writer died between
   * the claim and its record). Default 15 min; at least 1 s. Writers' wall clocks are compared.
   */
  uint64_t array_claim_ttl_ns;

  cs_capture_config capture;     /* the sink: sealing, quota, staging, device copies */
  cs_service_config service;     /* the service's bounds, timers and retries */
  cs_engine_config engine;       /* start timeout and the stop reserve of close */

  /*
   * Serving: the runtime also takes the packs capture-role processes hand into spool_dir
   * (scanned every daemon.scan_interval_ns; each pack is verified as recovery does, then
   * shipped; a crashed capture process's private spool is adopted). capstore serve sets it.
   */
  bool serve;
  struct {
    const char *listen;          /* "host:port" serving /metrics and /status; "" none. "127.0.0.1:9741" */
    const char *log_path;        /* the log file (reopened on SIGHUP); NULL or "": stderr */
    const char *log_format;      /* "logfmt" (default) or "json": one event per line */
    uint64_t close_timeout_ns;   /* the close budget on SIGTERM or SIGINT; default 30 s */
    uint64_t scan_interval_ns;   /* how often serving scans the spool for hand-offs; default 100 ms */
    uint64_t stats_interval_ns;  /* a stats line in the log this often; 0 none; default 60 s */
  } daemon;
} capstore_config;

/* The documented defaults: publisher, name "capstore", reconcile at start only, the catalog's fence margin. */
void capstore_config_default(capstore_config *cfg);

/*
 * Validates cfg without opening anything (credentials from the environment
 * included). CS_E_OK, or CS_E_CONFIG with msg naming the field and the rule.
 * No secret ever appears in msg.
 */
int capstore_config_validate(const capstore_config *cfg, char *msg, size_t msg_size);

typedef struct capstore capstore;

/*
 * Validates cfg, opens the store and the catalog (creating the catalog's
 * tables; a catalog that does not answer yet is not an error: the service
 * waits for it), opens the spool (recovering what a previous process left)
 * and starts the service. Returns once the engine's open finished (at most
 * engine.start_timeout_ns). CS_E_CONFIG (msg names the field), CS_E_BUSY
 * (another process owns the spool), CS_E_IO, CS_E_NO_MEMORY, CS_E_TIMEOUT.
 */
int capstore_open(const capstore_config *cfg, capstore **out, char *msg, size_t msg_size);

/* cs_capture_write and cs_capture_write_device on the runtime's sink. */
int capstore_write(capstore *cs, const cs_pack_meta *meta, const void *bytes, size_t length, char *msg,
                   size_t msg_size);
int capstore_write_device(capstore *cs, const cs_pack_meta *meta, const void *device_bytes, size_t length,
                          void *stream, char *msg, size_t msg_size);

/* What a flush found. */
typedef struct capstore_flush_report {
  bool drained;               /* every record captured before the call is queryable */
  const char *stage;          /* the stage that did not finish: "sink", "upload", "catalog", or ""; in the capture
                                 role "handoff" (not yet linked into the daemon's spool) or "daemon" (linked, not
                                 yet shipped: in the catalog for a publisher daemon, handed off for an uploader) */
  uint32_t missing_packs;     /* sealed before the call, not yet in the catalog (when the service's
                                 flush never ran: every pack the service holds) */
  uint32_t owed_packs;        /* of them, uploaded and owed to the catalog (nothing new is uploaded
                                 while any is owed: the stage is then "catalog") */
  uint32_t rejected_count;    /* set aside since the last report */
  uint32_t rejected_named;
  cs_uuid rejected[CS_FLUSH_REJECTED_MAX];
} capstore_flush_report;

/*
 * Seals the open pack and waits until every record captured before the call
 * is queryable in the catalog, or until deadline_ns (CLOCK_MONOTONIC,
 * capstore_clock_ns). CS_E_OK: drained, and no pack was set aside since the
 * last report. CS_E_CORRUPT: drained, but report->rejected names packs set
 * aside (msg names them too). CS_E_TIMEOUT: not drained by the deadline;
 * report->stage says where it stopped. Other errors as cs_capture_flush
 * (a seal failed), CS_E_BUSY (the sink's earlier flushes are still running)
 * and CS_E_CLOSED (close was called, also while this flush ran). A deadline
 * already passed polls: the flush gets 20 ms. report may be NULL.
 */
int capstore_flush(capstore *cs, uint64_t deadline_ns, capstore_flush_report *report, char *msg,
                   size_t msg_size);

/*
 * Seals the sink, stops capture, drains the service within budget_ns,
 * stops it and releases the lease; each failed step is logged and the rest
 * still run. engine.stop_reserve_ns (2 s here) of the budget is kept for the
 * stop and the release, so a budget at or below it drains nothing: give the
 * drain what it needs on top. A flush running when close is called answers
 * CS_E_CLOSED at once. Returns CS_E_OK or the first failure (msg names the
 * step). Closing again returns the first close's answer. The sink stays
 * allocated (closed) until capstore_free.
 */
int capstore_close(capstore *cs, uint64_t budget_ns, char *msg, size_t msg_size);

/* Closes (with a 30 s budget) if needed and frees everything. */
void capstore_free(capstore *cs);

/* CLOCK_MONOTONIC in nanoseconds: the clock of every deadline here. */
uint64_t capstore_clock_ns(void);

/*
 * The object store and the catalog that cfg names, opened as the runtime
 * opens them (credentials from the environment included), for readers and
 * tools. Only the store or catalog half of cfg is validated. The caller
 * closes them (cs_store_close, catalog->ops->close). CS_E_CONFIG (msg names
 * the field), or the adapter's error.
 */
int capstore_open_store(const capstore_config *cfg, cs_store *out, char *msg, size_t msg_size);
int capstore_open_catalog(const capstore_config *cfg, cs_catalog *out, char *msg, size_t msg_size);

/*
 * Before a tool's or reader's first query on a catalog opened above: its
 * tables suit the configuration (catalog.h's schema_check; creates nothing):
 * a replicated ClickHouse catalog's tables only with clickhouse_cluster set,
 * and back. CS_E_OK (also for a catalog with nothing to check), CS_E_CONFIG
 * with msg naming the table, CS_E_IO when the catalog did not answer.
 */
int capstore_catalog_check(cs_catalog *catalog, char *msg, size_t msg_size);

/*
 * The object key prefix of cfg, under which the runtime writes and lists:
 * cfg->key_prefix, or "<name>/" when it is NULL. Writes at most size bytes,
 * NUL-terminated; returns the length the whole prefix needs (as snprintf),
 * so size too small shows. A validated cfg's prefix fits CS_KEY_MAX.
 */
size_t capstore_key_prefix(const capstore_config *cfg, char *out, size_t size);

/* Per-stage counts of the service, the sink and the runtime. */
typedef struct capstore_stats {
  cs_snapshot service;
  cs_capture_stats capture;
  uint64_t captured_records;   /* records the sink admitted (capture.sink.records_admitted) */
  uint64_t store_requests;     /* primitives sent to the object store */
  uint64_t catalog_requests;   /* primitives sent to the catalog */
  uint64_t bytes_uploaded;     /* pack bytes sent by PUTs answered OK */
  uint64_t descriptors_indexed;/* descriptor rows sent by INDEX calls answered OK */
  uint64_t footer_errors;      /* packs whose footer could not be read for INDEX */
  uint64_t footer_cache_hits;  /* INDEX found the footer parsed already (while the pack uploaded) */
  uint64_t lane_queue_peak;    /* most jobs waiting on one lane */
  uint32_t engine_failures;    /* failed engine steps so far */
  char engine_last_error[160];
  uint64_t adopted_spools;     /* serving: private spools of dead capture processes taken over */
  uint64_t arrivals_set_aside; /* serving: handed-in packs that verified but cannot ship (no records): quarantined
                                  (those that failed the check: capture.admit_quarantined) */
  /* Capture role: packs handed to capstore serve (linked into its spool), shipped by it, set aside by it, and
     sealed here but not yet shipped (still counted against this process's quota). */
  uint64_t handoff_linked, handoff_shipped, handoff_rejected;
  uint32_t handoff_waiting;
} capstore_stats;

void capstore_stats_get(capstore *cs, capstore_stats *out);

/*
 * The stats as one JSON object, or as Prometheus text exposition
 * (capstore_* metrics). Writes at most size bytes, NUL-terminated; returns
 * the length the whole text needs (as snprintf), so size too small shows.
 */
size_t capstore_stats_json(capstore *cs, char *buf, size_t size);
size_t capstore_stats_prometheus(capstore *cs, char *buf, size_t size);

/* ---- Reading back (src/reader/, docs/reader.md) ----------------------------------------------- */

/*
 * A reader of the store and catalog cfg names: no spool, no lease, any
 * number beside the capture processes and the daemon. It searches the
 * catalog at a pinned watermark and reads payloads back verified. Its
 * calls may come from several threads; on one reader they run one at a
 * time (a second waits for the first). CS_E_CONFIG (msg names the field) or the
 * adapter's error.
 */
typedef struct capstore_reader capstore_reader;
int capstore_reader_open(const capstore_config *cfg, capstore_reader **out, char *msg, size_t msg_size);
void capstore_reader_free(capstore_reader *r);

#define CAPSTORE_PAGE_MAX 10000u  /* rows of one search page */
#define CAPSTORE_CURSOR_MAX 8192u /* a cursor's text, its NUL included */

/*
 * A selection: rows of the catalog visible at one watermark, their text
 * owned by the selection (capstore_selection_free). cursor is the next
 * page's, "" when this page was the last.
 */
typedef struct capstore_selection {
  uint64_t watermark;
  uint32_t count;
  cs_search_row *rows;
  char cursor[CAPSTORE_CURSOR_MAX];
  void *storage_; /* private */
} capstore_selection;
void capstore_selection_free(capstore_selection *sel);

/*
 * Moves the rows of from (a later page at the same watermark) to the end of
 * into, leaving from empty; into's cursor becomes from's. CS_E_STATE when
 * the watermarks differ (into not empty), CS_E_NO_MEMORY (nothing moved).
 */
int capstore_selection_take(capstore_selection *into, capstore_selection *from);

/*
 * One page of at most page_size (1 .. CAPSTORE_PAGE_MAX) records filter
 * selects (catalog.h: cs_search_filter), in (pack id, offset, capture id)
 * order. cursor NULL or "" starts a search: it pins the catalog's watermark
 * now. A cursor from the previous page goes on at its watermark, so paging
 * to the end shows each record visible there once, whatever is published
 * meanwhile. Refused with msg naming why: CS_E_INVALID_ARGUMENT (the filter,
 * the page size), CS_E_PARSE (not a cursor, damaged or forged), CS_E_CONFLICT
 * (a cursor made for another filter), CS_E_STATE (a cursor pinned at a
 * watermark ahead of the catalog's head: another catalog's, or one rolled
 * back); CS_E_IO when the catalog did not answer. out must be zeroed or
 * hold an earlier selection, which is freed first.
 */
int capstore_search(capstore_reader *r, const cs_search_filter *filter, const char *cursor, uint32_t page_size,
                    capstore_selection *out, char *msg, size_t msg_size);

/*
 * Every record with one of ids[0 .. count) (count <= CS_SEARCH_LIST_MAX) at
 * watermark (0: the catalog's now; above the head is CS_E_STATE), each
 * visible record once (an id captured into several packs shows once per
 * pack). The selection holds them all (its cursor is "").
 */
int capstore_select(capstore_reader *r, uint64_t watermark, const cs_pack_text *ids, uint32_t count,
                    capstore_selection *out, char *msg, size_t msg_size);

typedef struct capstore_read_options {
  int64_t byte_limit;      /* the plan may read at most this many bytes; < 0 is refused */
  int64_t request_limit;   /* and issue at most this many GETs, retries included; <= 0 is refused */
  uint64_t gap_bytes_max;  /* ranges of one pack this close are read as one: what a request costs, in bytes
                              (default 256 KiB, docs/reader.md "Plan") */
  uint64_t span_bytes_max; /* but no merged read longer than this (default 8 MiB; 0: no bound) */
  uint32_t inflight_max;   /* GETs in flight at once (default 8, at most 64; store.s3.max_connections caps it
                              when set) */
  uint32_t retry_max;      /* times one GET is issued again after a transient failure (default 3, at most 10) */
  bool verify_sha256;      /* read each pack whole and check its SHA-256 too (one GET per pack) */
} capstore_read_options;

/* No byte or request limit, the merge defaults above, 8 in flight, 3 retries a GET, no SHA-256. */
void capstore_read_options_default(capstore_read_options *opt);

/* What a read cost: the plan, and what it did. A read that succeeds issued planned_requests + retries. */
typedef struct capstore_read_cost {
  uint64_t planned_requests, planned_bytes; /* the plan (a refused one's too) */
  uint64_t payload_bytes;                   /* the records' own bytes in it */
  uint32_t packs;                           /* packs read (each footer once) */
  uint64_t requests, bytes;                 /* GETs issued (retries included) and bytes they returned */
  uint64_t retries;                         /* of those, GETs issued again after a transient failure */
} capstore_read_cost;

/* Payloads of a selection, in its order, owned here (capstore_payloads_free); each starts 64-byte aligned. */
typedef struct capstore_payloads {
  uint32_t count;
  const uint8_t **bytes; /* bytes[i]: row i's payload (length[i] bytes) */
  uint64_t *length;
  capstore_read_cost cost;
  void *storage_; /* private */
} capstore_payloads;
void capstore_payloads_free(capstore_payloads *p);

/*
 * Reads every record of sel back. Plans first (catalog rows grouped by
 * pack, sorted by offset, close ranges merged, each pack's footer and
 * trailer read once) and refuses a plan over either limit before any GET
 * (CS_E_TOO_LARGE, msg saying by how much; out->cost holds the plan). Then
 * the GETs, at most inflight_max at a time, never more than planned plus
 * the retries of GETs that failed transiently (timeouts, lost answers, 5xx,
 * throttling; never a 4xx or a wrong answer), each GET at most retry_max
 * times and all within request_limit. Memory: the payloads, and one buffer
 * per GET in flight plus two, each the size of the plan's longest read
 * (with verify_sha256 the largest pack), those up to 16 MiB kept by the
 * reader until capstore_reader_free; each pack is verified as soon as its reads are in,
 * while later GETs run. Each pack's trailer and footer are verified;
 * every catalog field of each record is bound to its footer
 * (CS_E_CONFLICT: a catalog row that disagrees with the pack it names is
 * an error, not data); each payload's
 * CRC-32 is checked (CS_E_CORRUPT), and with verify_sha256 the object's
 * SHA-256 against the catalog's. A short read or an object whose size
 * differs from the catalog's is an error. Errors name the pack or record;
 * nothing is returned unless everything verified. CS_E_INVALID_ARGUMENT for
 * a negative byte limit or a non-positive request limit, before anything.
 */
int capstore_read(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                  capstore_payloads *out, char *msg, size_t msg_size);

/* The plan of capstore_read without reading: cost's planned fields; refusals as capstore_read's. */
int capstore_read_estimate(capstore_reader *r, const capstore_selection *sel, const capstore_read_options *opt,
                           capstore_read_cost *cost, char *msg, size_t msg_size);

/*
 * The size and field offsets of the structs a binding mirrors without a
 * compiler (the Python package's ctypes structures, python/capstore/_ffi.py,
 * compare themselves with it at import), as one JSON object:
 * {"capstore_selection": {"size": N, "fields": {"watermark": 0, ...}}, ...}.
 * Writes at most size bytes, NUL-terminated; returns the length the whole
 * text needs (as snprintf).
 */
size_t capstore_abi_layout(char *buf, size_t size);

/* The library's version, "MAJOR.MINOR.PATCH" (the CMake project's; `capstore --version` prints it). */
const char *capstore_version(void);

#ifdef __cplusplus
}
#endif

#endif

/*
 * capstore/store.h: the object-store adapter contract. One primitive per
 * call, one request per primitive, no retries, no policy: the answer is
 * classified into a cs_outcome (types.h) and the service core decides what
 * to do. Implemented by the S3 adapter (libcurl + SigV4), the filesystem
 * store (dirstore), and the simulator's model; tests/conformance_store.c runs
 * one suite against all of them.
 *
 * Every function returns CS_E_OK when the request was carried out and its
 * answer classified into res->outcome (which may be a failure outcome), or a
 * negative cs_err when the call itself is wrong (bad argument, buffer too
 * small) and nothing was sent.
 */
#ifndef CAPSTORE_STORE_H
#define CAPSTORE_STORE_H

#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The object metadata set of DESIGN.md section 3, as written and as read back. */
typedef struct cs_object_info {
  bool is_pack;          /* dmi-format=dmi-pack-v1 present */
  uint64_t size_bytes;   /* HEAD: the object's size */
  cs_uuid pack_id;       /* dmi-pack-id */
  uint8_t sha256[32];    /* dmi-sha256 (hex in the metadata) */
  uint32_t record_count; /* dmi-record-count */
  uint64_t created_at_ns;/* dmi-created-at-ns */
} cs_object_info;

typedef struct cs_store_result {
  cs_outcome outcome;
  uint32_t http_status; /* 0 when there was no HTTP answer (or no HTTP at all) */
  char detail[256];     /* the server's error code/message or the transport error */
} cs_store_result;

/* One LIST page; keys live in the caller's buffer. */
typedef struct cs_list_page {
  char (*keys)[CS_KEY_MAX]; /* caller's array of key_capacity keys */
  uint32_t key_capacity;
  uint32_t key_count;
  char next_token[CS_KEY_MAX]; /* "" on the last page */
} cs_list_page;

/* A byte range: offset/length, or the last `length` bytes when suffix. */
typedef struct cs_range {
  uint64_t offset;
  uint64_t length;
  bool suffix;
} cs_range;

/*
 * One primitive as a request object, for callers that keep several in flight
 * (cs_store_start / cs_store_reap below). The caller fills op and that op's
 * fields, and owns the request and every buffer it names until
 * cs_store_reap hands it back; then rc, res and the op's answer fields hold
 * what the synchronous primitive would have returned.
 */
typedef enum cs_store_op {
  CS_STORE_PUT = 1,
  CS_STORE_HEAD,
  CS_STORE_GET,
  CS_STORE_LIST,
  CS_STORE_DEL,
} cs_store_op;

typedef struct cs_store_request {
  cs_store_op op;
  uint64_t id;               /* the caller's; the store never reads it */
  const char *key;           /* PUT, HEAD, GET, DEL; LIST: the prefix (NULL or "" for all) */
  /* PUT */
  const void *bytes;
  size_t len;
  const cs_object_info *meta;
  bool if_none_match;
  /* GET: the range when has_range, into buf (cap bytes) */
  bool has_range;
  cs_range range;
  void *buf;
  size_t cap;
  /* LIST */
  const char *token;         /* NULL or "" for the first page */
  uint32_t max_keys;
  cs_list_page *page;
  /* The answer */
  int rc;                    /* CS_E_OK, or the cs_err of a call that sent nothing */
  cs_store_result res;
  cs_object_info info;       /* HEAD */
  size_t got;                /* GET */
  /* The store's from start until the request is handed back; NULL before (zero-initialise a request). */
  void *internal;
  struct cs_store_request *next;
} cs_store_request;

typedef struct cs_store_ops {
  const char *name;
  /* PUT with metadata; if_none_match asks for create-only (412 when present). */
  int (*put)(void *self, const char *key, const void *bytes, size_t len, const cs_object_info *meta,
             bool if_none_match, cs_store_result *res);
  int (*head)(void *self, const char *key, cs_object_info *info, cs_store_result *res);
  /* GET of a range into buf (cap bytes); *got is what arrived. A short read is CS_OUT_INVALID. */
  int (*get)(void *self, const char *key, const cs_range *range, void *buf, size_t cap, size_t *got,
             cs_store_result *res);
  /*
   * LIST keys under prefix after the continuation token ("" for the first page).
   * Every key of a page starts with prefix and passes cs_store_key_check. An
   * answer naming a key outside the prefix (or an empty one) is refused whole
   * (CS_OUT_INVALID, the key in res->detail) and passes no key up; an object
   * the rule refuses (a "." or ".." segment: S3 holds such keys) is left out
   * of the page, so it cannot stop a walk of the prefix (the S3 adapter names
   * it in the OK answer's res->detail).
   */
  int (*list)(void *self, const char *prefix, const char *token, uint32_t max_keys, cs_list_page *page,
              cs_store_result *res);
  int (*del)(void *self, const char *key, cs_store_result *res);
  void (*close)(void *self);
  /*
   * Optional, both or neither: the asynchronous form. start puts req in
   * flight (CS_E_OK), or refuses it with CS_E_FULL when `in_flight_max`
   * requests are in flight, or with a negative cs_err when the request is
   * malformed; nothing is sent then. reap moves transfers on for at most
   * timeout_ms and hands back one completed request (returns 1), or none
   * (returns 0). Stores without them run each primitive inside the call.
   */
  int (*start)(void *self, cs_store_request *req);
  int (*reap)(void *self, uint32_t timeout_ms, cs_store_request **done);
  /*
   * Optional, with start and reap: makes a reap waiting in another thread
   * return 0 at once (or the next reap, if none waits). The only call that
   * may come from another thread than the one driving the store.
   */
  void (*wakeup)(void *self);
} cs_store_ops;

typedef struct cs_store {
  const cs_store_ops *ops;
  void *self;
  /*
   * What the store does where stores differ (DESIGN.md section 7, and
   * docs/s3.md for the servers measured). The S3 adapter and the model leave
   * them false until cs_store_probe finds otherwise; dirstore sets them.
   */
  bool enforces_if_none_match; /* a second create-only PUT of a key is refused (412) */
  bool exact_suffix_ranges;    /* bytes=-n answers the object's last n bytes */
  bool lists_bytewise;         /* LIST pages come in bytewise key order and paging on
                                  from a page's last key misses no key */
  /* The asynchronous form's bound (ops->start refuses past it); 0 for stores without ops->start,
     which finish each request inside cs_store_start (the queue is the caller's requests). */
  uint32_t in_flight_max;
  /* Requests a store without ops->start completed inside cs_store_start, oldest first. */
  cs_store_request *done_head, *done_tail;
} cs_store;

/*
 * The asynchronous form for every store. cs_store_start puts req in flight
 * (ops->start), or, for a store without one, carries it out now and queues
 * it as completed. Returns CS_E_OK (the request will come back from
 * cs_store_reap), CS_E_FULL (in_flight_max requests are started and not yet
 * reaped: reap one first), CS_E_STATE (this request is started and not yet
 * handed back), or a negative cs_err for a malformed request (nothing was
 * sent, the request is not queued). The bound is what keeps a caller's
 * memory and the store's connections bounded; a core above sets its own.
 * Synchronous primitives are outside the bound: they run beside a full set.
 * A request is handed back once; then it may be started again.
 *
 * cs_store_reap hands back one completed request: queued ones first, then
 * whatever ops->reap finishes within timeout_ms. Returns 1 with *done set,
 * 0 when nothing completed in time (or nothing is in flight), or a negative
 * cs_err when the store's transfer engine failed (the requests stay in
 * flight; close abandons them).
 *
 * cs_store_close closes the store (ops->close) and abandons every request
 * not yet handed back: none comes back, each is the caller's again with rc
 * CS_E_CLOSED, and what the server did with those still running is unknown.
 * A store's open fills every field of its cs_store, so one may be reused.
 *
 * A store is driven by one thread at a time, synchronous calls included.
 */
int cs_store_start(cs_store *store, cs_store_request *req);
int cs_store_reap(cs_store *store, uint32_t timeout_ms, cs_store_request **done);

void cs_store_close(cs_store *store);

/*
 * Wakes a cs_store_reap waiting in the thread that drives the store (it
 * returns 0), from any thread. A no-op for stores without the asynchronous
 * form, whose reap never waits.
 */
void cs_store_wakeup(cs_store *store);

/* Carries out req on the synchronous primitive (what cs_store_start does for stores without ops->start). */
void cs_store_request_run(cs_store *store, cs_store_request *req);

/*
 * The key rule every store holds its callers to before anything is sent, and
 * every LIST page to (see ops->list). A key is 1 to CS_KEY_MAX - 1
 * bytes (a C string, so it holds no NUL) with no "." or ".." segment: HTTP
 * clients and servers resolve those (RFC 3986), so "a/../../other-bucket/x"
 * would be sent, signed, as a request for another bucket's path, and a file
 * system walks out of its root. A LIST prefix (is_prefix) may be NULL or
 * empty and ends in a segment still being written, so only its complete
 * segments (those before a '/') are held to the rule. Returns CS_E_OK, or
 * CS_E_INVALID_ARGUMENT with a sentence naming the key (control bytes
 * escaped as \xNN, cut to fit) and what is wrong in why (NUL-terminated; why
 * may be NULL when why_size is 0). cs_store_start refuses such a request for
 * every store, nothing sent: rc CS_E_INVALID_ARGUMENT, res.outcome
 * CS_OUT_INVALID, the sentence in res.detail; the S3 adapter's and dirstore's
 * synchronous primitives refuse it the same way.
 */
int cs_store_key_check(const char *key, bool is_prefix, char *why, size_t why_size);

/*
 * The probes. Each writes its keys, asks, sets its flag from the answer and
 * deletes the keys. CS_E_OK with res->outcome CS_OUT_OK: the probe ran and
 * the flag says what it found. CS_E_OK with another outcome: the store did
 * not answer a step (res names it); the flag is left false. CS_E_INVALID_ARGUMENT
 * for NULL arguments or a probe key too long.
 *
 * conditional create: creates probe_key twice with If-None-Match: * and sets
 *   enforces_if_none_match when the second is refused with CS_OUT_PRECONDITION.
 * suffix range: writes 256 bytes at probe_key and reads bytes=-16; exact when
 *   exactly the last 16 arrive. An adapter that sees a wrong answer refuses it
 *   (CS_OUT_INVALID), which the probe counts as not exact.
 * list order: writes "<prefix>a", "<prefix>a/b" and "<prefix>a-b" and lists
 *   the prefix one key per page; bytewise when the pages name exactly
 *   a, a-b, a/b in that order. A store that walks a directory tree puts a/b
 *   before a-b, and paging on from a/b then skips a-b.
 */
int cs_store_probe_conditional_create(cs_store *store, const char *probe_key, cs_store_result *res);
int cs_store_probe_suffix_range(cs_store *store, const char *probe_key, cs_store_result *res);
int cs_store_probe_list_order(cs_store *store, const char *probe_prefix, cs_store_result *res);

/*
 * All three probes, with keys under probe_prefix (which should end in '/'):
 * "conditional-create", "suffix-range" and "list/...". Stops at the first
 * probe the store did not answer (res names it). Each probe deletes the keys
 * it tried to write, whatever the answers. Two probers under one prefix
 * disturb each other's verdicts (towards "differs", never towards "exact"):
 * give each its own, e.g. "<catalog>/probe/<lease id>/".
 */
int cs_store_probe(cs_store *store, const char *probe_prefix, cs_store_result *res);

#ifdef __cplusplus
}
#endif

#endif

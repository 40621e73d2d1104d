/*
 * capstore/s3.h: the S3 object-store adapter (cs_store_ops of store.h) over
 * libcurl's multi interface, SigV4-signed (sigv4.h), path-style URLs.
 *
 * One primitive is one request: no retries, no policy. Every answer, or its
 * absence, is classified into a cs_outcome (docs/s3.md has the table).
 * Up to max_connections requests run in parallel on one curl multi handle
 * (cs_store_start / cs_store_reap); the synchronous primitives are one
 * request started and driven to its end on one more connection, beside a
 * full set in flight, and leave the others' answers for cs_store_reap. A
 * request is signed when it starts (x-amz-date): start requests when they
 * are to be sent, not minutes ahead (S3 refuses a date 15 minutes old).
 * One thread drives a store at a time.
 *
 * The pure parts (XML parsers, classification, URL building) are exposed
 * for tests and fuzzers; they use expat but never curl.
 */
#ifndef CAPSTORE_S3_H
#define CAPSTORE_S3_H

#include "capstore/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cs_s3_config {
  const char *endpoint;          /* "https://host[:port]"; http:// only with allow_insecure */
  const char *bucket;
  const char *region;            /* "us-east-1" when NULL or "" */
  const char *access_key_id;
  const char *secret_access_key;
  const char *session_token;     /* NULL when none */
  bool allow_insecure;           /* permit http:// endpoints */
  bool tls_verify_off;           /* only for tests against self-signed servers */
  bool unsigned_payload;         /* x-amz-content-sha256: UNSIGNED-PAYLOAD on PUT */
  uint32_t connect_timeout_ms;   /* 0: 5000 */
  uint32_t request_timeout_ms;   /* whole request; 0: 300000 */
  uint32_t low_speed_bytes_per_s;/* abort below this rate ... (0: 1024) */
  uint32_t low_speed_time_s;     /* ... held this long (0: 30) */
  uint32_t max_connections;      /* requests in flight at once (store.h's in_flight_max); one
                                    more connection serves a synchronous call; 0: 8 */
} cs_s3_config;

/*
 * Validates cfg (cs_endpoint_validate for the endpoint) and opens the
 * adapter into store. Refused (CS_E_CONFIG, msg naming the field, never its
 * value): a control byte (CR, LF, ...) in the region, key id, secret or
 * session token, whose values go into request headers; a '/', ',' or space
 * in the region or key id (the signature's Credential). A session token may
 * be of any length. Returns CS_E_OK, CS_E_CONFIG, or CS_E_NO_MEMORY.
 * store->ops->close releases it.
 */
int cs_s3_open(const cs_s3_config *cfg, cs_store *store, char *msg, size_t msg_size);

/*
 * What the transport said when there was no HTTP answer. REFUSED is decided
 * by whether libcurl wrote a request byte (CURLINFO_REQUEST_SIZE), never by
 * its error code alone: libcurl resends a request whose kept-alive
 * connection died on a fresh connection, and a refused connect or failed
 * TLS handshake there comes after a request the server may have applied.
 */
typedef enum cs_s3_transport {
  CS_S3_TRANSPORT_OK = 0,  /* an HTTP status came back */
  CS_S3_TRANSPORT_REFUSED, /* no request byte written (connect refused, TLS failed, reset first): not applied */
  CS_S3_TRANSPORT_TIMEOUT, /* connect, low-speed or whole-request timeout */
  CS_S3_TRANSPORT_LOST,    /* a request byte left (on any attempt), then reset or no answer: may have applied */
} cs_s3_transport;

/* The outcome of one answer; error_code is the S3 <Code> ("" or NULL when none). */
cs_outcome cs_s3_classify(cs_s3_transport transport, uint32_t http_status, const char *error_code);

/*
 * Parses an S3 <Error> body: Code and Message into the caller's buffers
 * (truncated to fit, NUL-terminated). Returns CS_E_OK, or CS_E_PARSE when the
 * body is not well-formed XML or has no <Error> root.
 */
int cs_s3_parse_error(const char *body, size_t len, char *code, size_t code_size, char *message,
                      size_t message_size);

/*
 * Parses a ListObjectsV2 answer to a LIST of prefix (NULL or "": all) into
 * page (keys up to key_capacity, the continuation token when truncated).
 * The adapter asks for encoding-type=url: an answer saying
 * <EncodingType>url</EncodingType> (anywhere in it; the body is read twice)
 * has each key percent-decoded ("%XX" a byte, "+" a space) before it is
 * checked; an answer without one (s3rver) is read as plain keys. The
 * continuation token is never decoded. Returns CS_E_OK, or CS_E_PARSE /
 * CS_E_TOO_LARGE with a sentence in detail: malformed XML, a DOCTYPE,
 * nesting deeper than 16, a token of CS_KEY_MAX bytes or more, more keys
 * than key_capacity, IsTruncated without a token, an EncodingType other
 * than url, and (the key named) a key with a '%' not followed by two hex
 * digits, a key not under prefix once decoded, an empty key. A refused
 * answer leaves no key in page. A key S3 may hold but capstore cannot (of
 * CS_KEY_MAX bytes or more, holding a NUL once decoded, or refused by
 * cs_store_key_check: a "." or ".." segment) is left out of the page:
 * CS_E_OK, with detail saying how many and naming the first and why ("" when
 * none was).
 */
int cs_s3_parse_list(const char *body, size_t len, const char *prefix, cs_list_page *page, char *detail,
                     size_t detail_size);

/*
 * Writes "<endpoint>/<bucket>/<key>" with the key URI-encoded per segment
 * ('/' kept) into out. Returns the length, or CS_E_TOO_LARGE.
 */
long cs_s3_object_url(const char *endpoint, const char *bucket, const char *key, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif

/*
 * capstore/sigv4.h: AWS Signature Version 4 (HMAC-SHA256) for the S3
 * adapter. Bytes in, strings out: no I/O, no clock (the caller passes the
 * X-Amz-Date), no curl. Checked against the 38 cases of the AWS signing test
 * suite (../shared/sigv4/v4, tests/adapter_test_sigv4.c).
 *
 * Two forms: the Authorization header form (cs_sigv4_sign_header) and the
 * presigned query form (cs_sigv4_sign_query). Both keep every intermediate
 * result (canonical request, string to sign, signature) in the output so a
 * test can check each step.
 */
#ifndef CAPSTORE_SIGV4_H
#define CAPSTORE_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds on what one request may carry; more is CS_E_TOO_LARGE. */
#define CS_SIGV4_HEADERS_MAX 128u
#define CS_SIGV4_QUERY_PARAMS_MAX 256u
#define CS_SIGV4_TEXT_MAX ((size_t)1 << 20) /* any one output string */

#define CS_SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

/* One header as it goes on the wire; the value may hold folded lines. */
typedef struct cs_sigv4_header {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} cs_sigv4_header;

typedef struct cs_sigv4_request {
  const char *method;     /* "GET", "PUT", ... */
  const char *path;       /* raw, not yet URI-encoded; starts with '/' */
  size_t path_len;
  const char *query;      /* as on the wire (percent-encoded), without '?'; may be NULL */
  size_t query_len;
  const cs_sigv4_header *headers; /* must include Host */
  uint32_t header_count;
  /* 64 lowercase hex digits, or CS_SIGV4_UNSIGNED_PAYLOAD; NULL: SHA-256 of body. */
  const char *payload_hash;
  const void *body;
  size_t body_len;
} cs_sigv4_request;

typedef struct cs_sigv4_params {
  const char *access_key_id;
  const char *secret_access_key;
  const char *session_token; /* NULL or "" when none */
  const char *region;
  const char *service;       /* "s3" */
  const char *amz_date;      /* "YYYYMMDDTHHMMSSZ" (16 characters) */
  /* false for S3: the path is signed as given, no dot-segment or slash folding. */
  bool normalize_path;
  /* Header form: add and sign x-amz-content-sha256 (S3 requires it). */
  bool content_sha256_header;
  /* The session token goes on the request but is not signed (STS "after"). */
  bool omit_session_token;
  uint32_t expires_s;        /* query form: X-Amz-Expires */
} cs_sigv4_params;

/* Every intermediate and final result; strings are NUL-terminated, heap-owned. */
typedef struct cs_sigv4_out {
  char *canonical_request;
  char *string_to_sign;
  char *signed_headers;   /* "host;x-amz-date" */
  char *authorization;    /* header form: the Authorization header's value */
  char *query;            /* query form: the whole signed query string (no '?') */
  char payload_hash[65];  /* or "UNSIGNED-PAYLOAD" */
  char signature[65];
} cs_sigv4_out;

/*
 * Header form. Besides out->authorization the caller adds X-Amz-Date
 * (params->amz_date), X-Amz-Security-Token when a token is given, and
 * x-amz-content-sha256 (out->payload_hash) when content_sha256_header.
 * Returns CS_E_OK, CS_E_INVALID_ARGUMENT (missing field, malformed date or
 * payload hash, a header name with a space or colon), CS_E_TOO_LARGE (a bound
 * above), or CS_E_NO_MEMORY. On error out holds nothing to free.
 */
int cs_sigv4_sign_header(const cs_sigv4_params *params, const cs_sigv4_request *req, cs_sigv4_out *out);

/* Query (presigned URL) form; out->query replaces the request's query. Errors as above. */
int cs_sigv4_sign_query(const cs_sigv4_params *params, const cs_sigv4_request *req, cs_sigv4_out *out);

/* Only the canonical request of the header form (for tests and the fuzzer). */
int cs_sigv4_canonical_request(const cs_sigv4_params *params, const cs_sigv4_request *req, char **out);

void cs_sigv4_out_free(cs_sigv4_out *out);

/*
 * URI-encodes in[0..len) into out (cap bytes, NUL-terminated): every byte but
 * A-Z a-z 0-9 - . _ ~ becomes %XX (uppercase), and '/' too unless keep_slash.
 * Returns the encoded length, or -1 (CS_E_INVALID_ARGUMENT) when out is too small.
 */
long cs_sigv4_uri_encode(const char *in, size_t len, bool keep_slash, char *out, size_t cap);

/*
 * Decodes %XX escapes of in[0..len) into out (cap >= len + 1); a '%' not
 * followed by two hex digits stays as it is. Returns the decoded length.
 */
size_t cs_sigv4_uri_decode(const char *in, size_t len, char *out, size_t cap);

/* Lowercase hex SHA-256 of bytes into out[65]. */
void cs_sigv4_sha256_hex(const void *bytes, size_t len, char out[65]);

#ifdef __cplusplus
}
#endif

#endif

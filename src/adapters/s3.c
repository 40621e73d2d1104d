/*
 * The S3 adapter (capstore/s3.h): one primitive, one SigV4-signed request
 * over libcurl's multi interface (its connection cache keeps connections
 * alive between requests), classified into a cs_outcome. No retries.
 */
#include "capstore/s3.h"

#include "capstore/service.h"
#include "capstore/sigv4.h"

#include <assert.h>
#include <stdatomic.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define S3_LIST_BODY_MAX ((size_t)16 << 20)
#define S3_ERROR_BODY_MAX ((size_t)64 << 10)
#define S3_TEXT_FIRST ((size_t)4 << 10) /* the answer buffer's first size; it doubles from there */
#define S3_HEADERS_MAX 12u
/* A LIST query: a continuation token and a prefix (each < CS_KEY_MAX bytes, 3 when encoded) and the rest. */
#define S3_QUERY_MAX (CS_KEY_MAX * 6 + 128)
#define S3_CONTENT_TYPE "application/vnd.dmi.pack"
#define S3_FORMAT "dmi-pack-v1"

/* A request's `internal` while it is answered and waiting in the completed list. */
static char s3_done_mark;
#define S3_DONE ((void *)&s3_done_mark)

typedef struct s3_store {
  char *endpoint, *bucket, *region, *access_key_id, *secret_access_key, *session_token;
  char *host; /* the endpoint's host[:port], the Host header signed and sent */
  cs_s3_config cfg; /* numbers and flags; its strings point at the copies above */
  CURLM *multi;
  uint32_t in_flight;                      /* started, not yet handed back (the bound) */
  uint32_t running;                        /* transfers running, a synchronous one included */
  struct s3_call *live;                    /* those requests' calls */
  cs_store_request *done_head, *done_tail; /* finished, not yet reaped */
  atomic_bool woken;                       /* cs_store_wakeup: the waiting reap returns */
} s3_store;

/* One request and what came back. */
typedef struct s3_call {
  const char *method;
  char path[CS_KEY_MAX * 2];      /* raw: "/bucket/key" */
  char query[S3_QUERY_MAX];       /* encoded, may be empty */
  cs_sigv4_header headers[S3_HEADERS_MAX];
  uint32_t header_count;
  const uint8_t *body;
  size_t body_len, body_sent;
  const char *payload_hash;
  /* Answer. */
  uint8_t *sink;                  /* caller's buffer for a successful GET */
  size_t sink_cap, sink_got;
  char *text;                     /* LIST or error body */
  size_t text_len, text_cap, text_max; /* text_cap: allocated, grown by doubling up to text_max + 1 */
  bool overflow;
  long status;
  char meta[5][160];              /* dmi-format, dmi-pack-id, dmi-sha256, dmi-record-count, dmi-created-at-ns */
  uint64_t content_length;
  bool have_length;
  char content_range[96];         /* "bytes a-b/size" of a 206 */
  /* In flight. */
  struct s3_store *store;
  struct s3_call *live_prev, *live_next;
  cs_store_request *req;
  bool sync;                      /* a synchronous primitive's: never queued for reap */
  CURL *easy;
  struct curl_slist *sent_headers; /* signed, as curl sends them */
  char *url;
  char curl_error[CURL_ERROR_SIZE];
  /* Header values the signer and curl read while the request lives. */
  char sha[65], pack_id[CS_UUID_TEXT_LEN + 1], count[16], created[24], range_text[64];
} s3_call;

static const char *const meta_names[5] = {"x-amz-meta-dmi-format", "x-amz-meta-dmi-pack-id",
                                          "x-amz-meta-dmi-sha256", "x-amz-meta-dmi-record-count",
                                          "x-amz-meta-dmi-created-at-ns"};

static void result_set(cs_store_result *res, cs_outcome outcome, uint32_t status, const char *detail) {
  res->outcome = outcome;
  res->http_status = status;
  snprintf(res->detail, sizeof res->detail, "%s", detail ? detail : "");
}

/* ---- curl callbacks ---- */

/*
 * Makes room for need bytes of answer text (need <= text_max + 1), doubling
 * the buffer: a body of n bytes costs O(log n) reallocations and O(n)
 * copying, however small the pieces curl hands over. False when out of memory.
 */
static bool text_reserve(s3_call *c, size_t need) {
  assert(need <= c->text_max + 1);
  if (need <= c->text_cap) return true;
  size_t cap = c->text_cap ? c->text_cap : S3_TEXT_FIRST;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  if (cap > c->text_max + 1) cap = c->text_max + 1;
  char *grown = realloc(c->text, cap);
  if (!grown) return false;
  c->text = grown;
  c->text_cap = cap;
  return true;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud) {
  s3_call *c = ud;
  size_t n = size * nmemb;
  bool to_sink = c->sink && c->status >= 200 && c->status < 300;
  if (to_sink) {
    if (c->sink_got + n > c->sink_cap) {
      c->overflow = true;
      return 0;
    }
    memcpy(c->sink + c->sink_got, data, n);
    c->sink_got += n;
    return n;
  }
  if (c->text_len + n > c->text_max) {
    c->overflow = true;
    return 0;
  }
  if (!text_reserve(c, c->text_len + n + 1)) return 0;
  memcpy(c->text + c->text_len, data, n);
  c->text_len += n;
  c->text[c->text_len] = '\0';
  return n;
}

static size_t on_read(char *buf, size_t size, size_t nmemb, void *ud) {
  s3_call *c = ud;
  size_t n = size * nmemb;
  size_t left = c->body_len - c->body_sent;
  if (n > left) n = left;
  if (n) memcpy(buf, c->body + c->body_sent, n);
  c->body_sent += n;
  return n;
}

/* The value of header name when line is that header; one too long for out is kept as "" (it parses as nothing). */
static void header_value(const char *line, size_t len, const char *name, char *out, size_t cap) {
  size_t name_len = strlen(name);
  if (len <= name_len || line[name_len] != ':' || strncasecmp(line, name, name_len) != 0) return;
  size_t a = name_len + 1, b = len;
  while (a < b && (line[a] == ' ' || line[a] == '\t')) a++;
  while (b > a && (line[b - 1] == '\r' || line[b - 1] == '\n' || line[b - 1] == ' ')) b--;
  if (b - a >= cap) b = a;
  memcpy(out, line + a, b - a);
  out[b - a] = '\0';
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ud) {
  s3_call *c = ud;
  size_t n = size * nmemb;
  if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
    /* A new response (after a 100 Continue, say): forget the last one's headers. */
    memset(c->meta, 0, sizeof c->meta);
    c->have_length = false;
    c->content_range[0] = '\0';
    unsigned status = 0;
    if (sscanf(line, "HTTP/%*s %u", &status) == 1) c->status = (long)status;
    return n;
  }
  for (int i = 0; i < 5; i++) header_value(line, n, meta_names[i], c->meta[i], sizeof c->meta[i]);
  header_value(line, n, "content-range", c->content_range, sizeof c->content_range);
  char length[32] = "";
  header_value(line, n, "content-length", length, sizeof length);
  if (length[0]) {
    char *end = NULL;
    c->content_length = strtoull(length, &end, 10);
    c->have_length = end && *end == '\0';
  }
  return n;
}

/* ---- Signing and sending ---- */

static void call_header(s3_call *c, const char *name, const char *value) {
  assert(c->header_count < S3_HEADERS_MAX);
  c->headers[c->header_count++] = (cs_sigv4_header){name, strlen(name), value, strlen(value)};
}

/* Appends "name: value", whatever its length (session tokens have no documented maximum); *ok false on failure. */
static struct curl_slist *slist_add(struct curl_slist *list, bool *ok, const char *name, const char *value) {
  size_t name_len = strlen(name), value_len = strlen(value);
  char *line = malloc(name_len + value_len + 3);
  if (!line) {
    *ok = false;
    return list;
  }
  memcpy(line, name, name_len);
  memcpy(line + name_len, ": ", 2);
  memcpy(line + name_len + 2, value, value_len + 1);
  struct curl_slist *next = curl_slist_append(list, line);
  free(line);
  if (!next) *ok = false;
  return next ? next : list;
}

/* Signs c; returns the header list curl sends (NULL on failure, *err set). */
static struct curl_slist *call_sign(s3_store *s, s3_call *c, int *err) {
  char amz_date[17];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
  cs_sigv4_params p = {.access_key_id = s->access_key_id,
                       .secret_access_key = s->secret_access_key,
                       .session_token = s->session_token,
                       .region = s->region,
                       .service = "s3",
                       .amz_date = amz_date,
                       .normalize_path = false,
                       .content_sha256_header = true};
  cs_sigv4_header all[S3_HEADERS_MAX + 1];
  all[0] = (cs_sigv4_header){"host", 4, s->host, strlen(s->host)};
  memcpy(all + 1, c->headers, c->header_count * sizeof c->headers[0]);
  cs_sigv4_request req = {.method = c->method,
                          .path = c->path,
                          .path_len = strlen(c->path),
                          .query = c->query,
                          .query_len = strlen(c->query),
                          .headers = all,
                          .header_count = c->header_count + 1,
                          .payload_hash = c->payload_hash,
                          .body = c->body,
                          .body_len = c->body_len};
  cs_sigv4_out out;
  *err = cs_sigv4_sign_header(&p, &req, &out);
  if (*err != CS_E_OK) return NULL;
  bool ok = true;
  struct curl_slist *list = NULL;
  list = slist_add(list, &ok, "Host", s->host);
  for (uint32_t i = 0; i < c->header_count; i++) list = slist_add(list, &ok, c->headers[i].name, c->headers[i].value);
  list = slist_add(list, &ok, "x-amz-date", amz_date);
  list = slist_add(list, &ok, "x-amz-content-sha256", out.payload_hash);
  if (s->session_token) list = slist_add(list, &ok, "x-amz-security-token", s->session_token);
  list = slist_add(list, &ok, "Authorization", out.authorization);
  struct curl_slist *expect = curl_slist_append(list, "Expect:"); /* no 100-continue round trip */
  if (!expect) ok = false;
  else list = expect;
  cs_sigv4_out_free(&out);
  if (!ok || !list) {
    curl_slist_free_all(list);
    *err = CS_E_NO_MEMORY;
    return NULL;
  }
  return list;
}

/* TLS failures before a connection carried any request: the handshake or the peer's certificate. */
static bool tls_setup_failed(CURLcode cc) {
  switch (cc) {
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION: /* CURLE_SSL_CACERT is the same code */
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_SSL_CLIENTCERT:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_ENGINE_INITFAILED: return true;
  default: return false;
  }
}

/*
 * What the transport said. REFUSED only when libcurl wrote no request byte
 * (CURLINFO_REQUEST_SIZE is 0), whatever the code: libcurl retries a request
 * whose kept-alive connection died on a fresh connection, and counts the
 * bytes of every attempt, so a refused connect or failed handshake on that
 * retry (CURLE_COULDNT_CONNECT, CURLE_SSL_CONNECT_ERROR) comes after a
 * request the server may have applied: LOST then. A size libcurl cannot
 * tell is LOST too.
 */
static cs_s3_transport transport_of(CURLcode cc, CURL *easy) {
  if (cc == CURLE_OK) return CS_S3_TRANSPORT_OK;
  if (cc == CURLE_OPERATION_TIMEDOUT) return CS_S3_TRANSPORT_TIMEOUT;
  long sent = -1;
  if (curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &sent) != CURLE_OK) sent = -1;
  return sent == 0 ? CS_S3_TRANSPORT_REFUSED : CS_S3_TRANSPORT_LOST;
}

/* What a transport failure means for the request, put first in the detail (curl's words may be cut). */
static const char *transport_meaning(cs_s3_transport transport, CURLcode cc) {
  if (transport == CS_S3_TRANSPORT_REFUSED) {
    return tls_setup_failed(cc) ? "TLS failed, nothing was sent: " : "nothing was sent: ";
  }
  return transport == CS_S3_TRANSPORT_LOST ? "the request may have reached the server: " : "";
}

static void easy_setup(s3_store *s, s3_call *c, CURL *easy, const char *url, struct curl_slist *headers) {
  curl_easy_setopt(easy, CURLOPT_URL, url);
  /* The path goes out as signed: curl would otherwise resolve "." and ".." segments (RFC 3986) in it. */
  curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)s->cfg.connect_timeout_ms);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)s->cfg.request_timeout_ms);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, (long)s->cfg.low_speed_bytes_per_s);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, (long)s->cfg.low_speed_time_s);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, s->cfg.tls_verify_off ? 0L : 1L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, s->cfg.tls_verify_off ? 0L : 2L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, s->cfg.allow_insecure ? "http,https" : "https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, c);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, c);
  if (strcmp(c->method, "PUT") == 0) {
    curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(easy, CURLOPT_READDATA, c);
    curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)c->body_len);
  } else if (strcmp(c->method, "HEAD") == 0) {
    curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  } else if (strcmp(c->method, "DELETE") == 0) {
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
}

/* ---- Starting and finishing requests on the multi handle ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void call_free(s3_call *c) {
  if (!c) return;
  if (c->easy) {
    curl_multi_remove_handle(c->store->multi, c->easy);
    curl_easy_cleanup(c->easy);
  }
  curl_slist_free_all(c->sent_headers);
  free(c->url);
  free(c->text);
  free(c);
}

/* Signs c and puts it on the multi handle; on failure nothing was sent and c is the caller's to free. */
static int call_begin(s3_store *s, s3_call *c) {
  char encoded_path[sizeof c->path * 3];
  long path_len = cs_sigv4_uri_encode(c->path, strlen(c->path), true, encoded_path, sizeof encoded_path);
  if (path_len < 0) return CS_E_TOO_LARGE;
  size_t url_size = strlen(s->endpoint) + (size_t)path_len + 1 + strlen(c->query) + 1;
  c->url = malloc(url_size);
  if (!c->url) return CS_E_NO_MEMORY;
  int n = snprintf(c->url, url_size, "%s%s%s%s", s->endpoint, encoded_path, c->query[0] ? "?" : "", c->query);
  assert(n >= 0 && (size_t)n < url_size);
  (void)n;
  int err = CS_E_OK;
  c->sent_headers = call_sign(s, c, &err);
  if (!c->sent_headers) return err;
  c->easy = curl_easy_init();
  if (!c->easy) return CS_E_NO_MEMORY;
  curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, c->curl_error);
  curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
  if (c->text_max == 0) c->text_max = S3_ERROR_BODY_MAX;
  easy_setup(s, c, c->easy, c->url, c->sent_headers);
  if (curl_multi_add_handle(s->multi, c->easy) != CURLM_OK) {
    curl_easy_cleanup(c->easy);
    c->easy = NULL;
    return CS_E_NO_MEMORY;
  }
  return CS_E_OK;
}

/* Classifies what came back for c into res (the transport's error, or the status and S3 error code). */
static void call_classify(s3_call *c, CURLcode cc, cs_store_result *res) {
  long status = 0;
  curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
  cs_s3_transport transport = c->overflow ? CS_S3_TRANSPORT_OK : transport_of(cc, c->easy);
  if (transport != CS_S3_TRANSPORT_OK) {
    result_set(res, cs_s3_classify(transport, 0, NULL), 0, NULL);
    snprintf(res->detail, sizeof res->detail, "%s%.200s", transport_meaning(transport, cc),
             c->curl_error[0] ? c->curl_error : curl_easy_strerror(cc));
    return;
  }
  c->status = status;
  char code[64] = "", message[160] = "";
  if ((status < 200 || status >= 300) && c->text_len) {
    (void)cs_s3_parse_error(c->text, c->text_len, code, sizeof code, message, sizeof message);
  }
  result_set(res, cs_s3_classify(CS_S3_TRANSPORT_OK, (uint32_t)status, code), (uint32_t)status, NULL);
  if (code[0]) snprintf(res->detail, sizeof res->detail, "%s: %s", code, message);
  if (c->overflow && res->outcome == CS_OUT_OK) {
    res->outcome = CS_OUT_INVALID;
    snprintf(res->detail, sizeof res->detail, "the answer is larger than the buffer");
  }
}

static bool hex_sha256(const char *text, uint8_t out[32]) {
  return strlen(text) == 64 && cs_hex_decode(text, 64, CS_HEX_LOWER, out) == CS_E_OK;
}

/* Decimal digits only, at most max (a value past UINT64_MAX is refused, not clamped). */
static bool parse_u64(const char *text, uint64_t max, uint64_t *out) {
  if (text[0] < '0' || text[0] > '9') return false;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || !end || *end != '\0' || v > max) return false;
  *out = v;
  return true;
}

/* is_pack only when the format is right and every other field parses. */
static void info_from_meta(const s3_call *c, cs_object_info *info) {
  memset(info, 0, sizeof *info);
  info->size_bytes = c->have_length ? c->content_length : 0;
  if (strcmp(c->meta[0], S3_FORMAT) != 0) return;
  uint64_t count = 0, created = 0;
  bool ok = cs_uuid_parse(c->meta[1], strlen(c->meta[1]), &info->pack_id) == CS_E_OK;
  ok = ok && hex_sha256(c->meta[2], info->sha256);
  ok = ok && parse_u64(c->meta[3], UINT32_MAX, &count);
  ok = ok && parse_u64(c->meta[4], UINT64_MAX, &created);
  info->record_count = (uint32_t)count;
  info->created_at_ns = created;
  info->is_pack = ok;
}

/* Parses "bytes a-b/size" ("*" size: UINT64_MAX). */
static bool content_range_parse(const char *text, uint64_t *a, uint64_t *b, uint64_t *size) {
  char tail[32];
  unsigned long long x, y;
  if (sscanf(text, "bytes %llu-%llu/%31s", &x, &y, tail) != 3 || y < x) return false;
  if (strcmp(tail, "*") == 0) {
    *size = UINT64_MAX;
  } else {
    uint64_t v;
    if (!parse_u64(tail, UINT64_MAX, &v) || y >= v) return false;
    *size = v;
  }
  *a = x;
  *b = y;
  return true;
}

/* The bytes a ranged GET must return: a suffix longer than the object is the whole object (HTTP). */
static uint64_t range_expected(const cs_range *range, const char *content_range) {
  uint64_t a, b, size;
  if (range->suffix && content_range_parse(content_range, &a, &b, &size) && size != UINT64_MAX &&
      size < range->length) {
    return size;
  }
  return range->length;
}

/* Whether a 206's Content-Range is the range asked for (an offset range may end early at the object's end). */
static bool range_answer_ok(const cs_range *range, const char *content_range, char *why, size_t why_size) {
  uint64_t a, b, size;
  char asked[64];
  if (range->suffix) snprintf(asked, sizeof asked, "bytes=-%" PRIu64, range->length);
  else snprintf(asked, sizeof asked, "bytes=%" PRIu64 "-%" PRIu64, range->offset, range->offset + range->length - 1);
  if (!content_range[0]) {
    snprintf(why, why_size, "206 without Content-Range to %s", asked);
    return false;
  }
  bool ok = content_range_parse(content_range, &a, &b, &size);
  if (ok && range->suffix) {
    uint64_t n = size < range->length ? size : range->length;
    ok = size != UINT64_MAX && a == size - n && b == size - 1;
  } else if (ok) {
    ok = a == range->offset && b <= range->offset + range->length - 1;
  }
  if (!ok) snprintf(why, why_size, "wrong range: Content-Range '%s' answered %s", content_range, asked);
  return ok;
}

/* The GET's checks: the bytes must be the ones asked for; a server that misreads the range is refused. */
static void get_finish(s3_call *c, cs_store_request *req) {
  cs_store_result *res = &req->res;
  const cs_range *range = req->has_range ? &req->range : NULL;
  if (range && c->status == 206 && (res->outcome == CS_OUT_OK || c->overflow)) {
    char why[256];
    if (!range_answer_ok(range, c->content_range, why, sizeof why)) {
      result_set(res, CS_OUT_INVALID, (uint32_t)c->status, why);
    }
  }
  if (res->outcome != CS_OUT_OK) return;
  req->got = c->sink_got;
  uint64_t want = range ? range_expected(range, c->content_range) : 0;
  if (range && c->status != 206) {
    result_set(res, CS_OUT_INVALID, (uint32_t)c->status, "the server ignored the Range header");
  } else if (range && c->sink_got != want) {
    result_set(res, CS_OUT_INVALID, (uint32_t)c->status, NULL);
    snprintf(res->detail, sizeof res->detail, "%s read: %zu of %" PRIu64 " bytes",
             c->sink_got < want ? "short" : "long", c->sink_got, want);
  }
  if (res->outcome != CS_OUT_OK) req->got = 0;
}

/*
 * A 2xx LIST answer that does not parse, or names a key outside the prefix
 * asked for (once url-decoded), is refused whole; keys left out of the page
 * (a dot segment, a NUL, 1,024 bytes or more) are noted in the detail of an
 * OK answer.
 */
static void list_finish(s3_call *c, cs_store_request *req) {
  if (req->res.outcome != CS_OUT_OK) return;
  char detail[sizeof req->res.detail];
  int rc = cs_s3_parse_list(c->text, c->text_len, req->key, req->page, detail, sizeof detail);
  result_set(&req->res, rc == CS_E_OK ? CS_OUT_OK : CS_OUT_INVALID, req->res.http_status, detail);
}

/* A request's call leaves the multi handle and the live list, and is freed. */
static void call_drop(s3_store *s, s3_call *c) {
  if (c->live_prev) c->live_prev->live_next = c->live_next;
  else s->live = c->live_next;
  if (c->live_next) c->live_next->live_prev = c->live_prev;
  call_free(c);
  s->running--;
}

/* A transfer ended: its request gets the answer and joins the completed list (a synchronous one is done); c is freed. */
static void call_finish(s3_store *s, s3_call *c, CURLcode cc) {
  cs_store_request *req = c->req;
  call_classify(c, cc, &req->res);
  req->rc = CS_E_OK;
  if (req->op == CS_STORE_HEAD && req->res.outcome == CS_OUT_OK) info_from_meta(c, &req->info);
  if (req->op == CS_STORE_GET) get_finish(c, req);
  if (req->op == CS_STORE_LIST) list_finish(c, req);
  bool sync = c->sync;
  call_drop(s, c);
  req->next = NULL;
  if (sync) {
    req->internal = NULL; /* done: run_sync returns it */
    return;
  }
  req->internal = S3_DONE;
  if (s->done_tail) s->done_tail->next = req;
  else s->done_head = req;
  s->done_tail = req;
}

/* Moves transfers on for at most timeout_ms, returning once one or more finished (or time is up). */
static int drive(s3_store *s, uint32_t timeout_ms, bool wakeable) {
  double deadline = now_ms() + timeout_ms;
  for (;;) {
    int running = 0;
    if (curl_multi_perform(s->multi, &running) != CURLM_OK) return CS_E_NO_MEMORY;
    bool finished = false;
    CURLMsg *msg;
    int left = 0;
    while ((msg = curl_multi_info_read(s->multi, &left)) != NULL) {
      if (msg->msg != CURLMSG_DONE) continue;
      s3_call *c = NULL;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
      call_finish(s, c, msg->data.result);
      finished = true;
    }
    double wait = deadline - now_ms();
    if (finished || s->running == 0 || wait <= 0) return CS_E_OK;
    if (wakeable && atomic_load(&s->woken)) return CS_E_OK;
    if (curl_multi_poll(s->multi, NULL, 0, wait > 1000 ? 1000 : (int)wait + 1, NULL) != CURLM_OK) return CS_E_IO;
  }
}

/* ---- Preparing each primitive's request ---- */

/* A key (or LIST prefix) the rule refuses (cs_store_key_check): CS_E_INVALID_ARGUMENT, named in res. */
static int key_refuse(const char *key, bool is_prefix, cs_store_result *res) {
  int rc = cs_store_key_check(key, is_prefix, res->detail, sizeof res->detail);
  if (rc != CS_E_OK) res->outcome = CS_OUT_INVALID;
  return rc;
}

/* c's method and its path "/<bucket>/<key>", exactly as it is signed and sent. */
static int call_object(s3_store *s, s3_call *c, const char *method, cs_store_request *req) {
  c->method = method;
  int rc = key_refuse(req->key, false, &req->res);
  if (rc != CS_E_OK) return rc;
  int n = snprintf(c->path, sizeof c->path, "/%s/%s", s->bucket, req->key);
  return n >= 0 && (size_t)n < sizeof c->path ? CS_E_OK : CS_E_TOO_LARGE;
}

static int prepare_put(s3_store *s, s3_call *c, cs_store_request *req) {
  if (req->len && !req->bytes) return CS_E_INVALID_ARGUMENT;
  int rc = call_object(s, c, "PUT", req);
  if (rc != CS_E_OK) return rc;
  const cs_object_info *meta = req->meta;
  c->body = req->bytes;
  c->body_len = req->len;
  call_header(c, "content-type", meta ? S3_CONTENT_TYPE : "application/octet-stream");
  if (meta) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
      c->sha[2 * i] = hex[meta->sha256[i] >> 4];
      c->sha[2 * i + 1] = hex[meta->sha256[i] & 15];
    }
    c->sha[64] = '\0';
    cs_uuid_format(&meta->pack_id, c->pack_id);
    snprintf(c->count, sizeof c->count, "%" PRIu32, meta->record_count);
    snprintf(c->created, sizeof c->created, "%" PRIu64, meta->created_at_ns);
    /* The pack's SHA-256 is the payload's: the signer need not hash it again. */
    c->payload_hash = s->cfg.unsigned_payload ? CS_SIGV4_UNSIGNED_PAYLOAD : c->sha;
    call_header(c, meta_names[0], S3_FORMAT);
    call_header(c, meta_names[1], c->pack_id);
    call_header(c, meta_names[2], c->sha);
    call_header(c, meta_names[3], c->count);
    call_header(c, meta_names[4], c->created);
  } else {
    /* No pack metadata (a plain object): the signer hashes the body. */
    c->payload_hash = s->cfg.unsigned_payload ? CS_SIGV4_UNSIGNED_PAYLOAD : NULL;
  }
  if (req->if_none_match) call_header(c, "if-none-match", "*");
  return CS_E_OK;
}

static int prepare_get(s3_store *s, s3_call *c, cs_store_request *req) {
  const cs_range *range = req->has_range ? &req->range : NULL;
  if (!req->buf || (range && (range->length == 0 || range->length > req->cap))) return CS_E_INVALID_ARGUMENT;
  int rc = call_object(s, c, "GET", req);
  if (rc != CS_E_OK) return rc;
  if (range && range->suffix) snprintf(c->range_text, sizeof c->range_text, "bytes=-%" PRIu64, range->length);
  if (range && !range->suffix) {
    snprintf(c->range_text, sizeof c->range_text, "bytes=%" PRIu64 "-%" PRIu64, range->offset,
             range->offset + range->length - 1);
  }
  if (range) call_header(c, "range", c->range_text);
  c->sink = req->buf;
  c->sink_cap = req->cap;
  return CS_E_OK;
}

/* Appends "&name=<value encoded>" to query (cap bytes); false when it does not fit (nothing is cut). */
static bool query_param(char *query, size_t cap, const char *name, const char *value) {
  size_t n = strlen(query);
  int w = snprintf(query + n, cap - n, "%s%s=", n ? "&" : "", name);
  if (w < 0 || (size_t)w >= cap - n) return false;
  if (cs_sigv4_uri_encode(value, strlen(value), false, query + n + (size_t)w, cap - n - (size_t)w) >= 0) return true;
  query[n] = '\0';
  return false;
}

static int prepare_list(s3_store *s, s3_call *c, cs_store_request *req) {
  cs_list_page *page = req->page;
  const char *prefix = req->key, *token = req->token;
  uint32_t max_keys = req->max_keys;
  if (!page || !page->keys || max_keys == 0 || page->key_capacity == 0) return CS_E_INVALID_ARGUMENT;
  /* A page never holds more than the caller's buffer: ask the server for no more than that. */
  if (max_keys > page->key_capacity) max_keys = page->key_capacity;
  int rc = key_refuse(prefix, true, &req->res);
  if (rc != CS_E_OK) return rc;
  if (token && strlen(token) >= CS_KEY_MAX) return CS_E_INVALID_ARGUMENT;
  page->key_count = 0;
  page->next_token[0] = '\0';
  c->method = "GET";
  snprintf(c->path, sizeof c->path, "/%s", s->bucket);
  char max_text[16];
  snprintf(max_text, sizeof max_text, "%" PRIu32, max_keys);
  /*
   * Written in sorted order, as the signer would sort them anyway. Keys come
   * url-encoded: XML 1.0 cannot hold some bytes a key may (U+0001 arrives as
   * "&#x1;", which fails the whole page); cs_s3_parse_list decodes them when
   * the answer says <EncodingType>url</EncodingType>.
   */
  bool ok = !(token && token[0]) || query_param(c->query, sizeof c->query, "continuation-token", token);
  ok = ok && query_param(c->query, sizeof c->query, "encoding-type", "url");
  ok = ok && query_param(c->query, sizeof c->query, "list-type", "2");
  ok = ok && query_param(c->query, sizeof c->query, "max-keys", max_text);
  ok = ok && (!(prefix && prefix[0]) || query_param(c->query, sizeof c->query, "prefix", prefix));
  assert(ok); /* S3_QUERY_MAX holds the longest token and prefix */
  c->text_max = S3_LIST_BODY_MAX;
  return ok ? CS_E_OK : CS_E_TOO_LARGE;
}

/* ---- The asynchronous form ---- */

/*
 * Starts req. The bound is on requests started and not yet handed back; a
 * synchronous primitive's request is outside it (it is handed back inside
 * the call, on the one connection kept beyond the bound).
 */
static int start(s3_store *s, cs_store_request *req, bool sync) {
  if (req->internal) return CS_E_STATE; /* in flight, or answered and not yet reaped */
  if (!sync && s->in_flight >= s->cfg.max_connections) return CS_E_FULL;
  s3_call *c = calloc(1, sizeof *c);
  if (!c) return CS_E_NO_MEMORY;
  c->store = s;
  c->req = req;
  c->sync = sync;
  memset(&req->res, 0, sizeof req->res);
  memset(&req->info, 0, sizeof req->info);
  req->got = 0;
  req->rc = CS_E_OK;
  int rc;
  switch (req->op) {
    case CS_STORE_PUT: rc = prepare_put(s, c, req); break;
    case CS_STORE_HEAD: rc = call_object(s, c, "HEAD", req); break;
    case CS_STORE_GET: rc = prepare_get(s, c, req); break;
    case CS_STORE_LIST: rc = prepare_list(s, c, req); break;
    case CS_STORE_DEL: rc = call_object(s, c, "DELETE", req); break;
    default: rc = CS_E_INVALID_ARGUMENT; break;
  }
  if (rc == CS_E_OK) rc = call_begin(s, c);
  if (rc != CS_E_OK) {
    call_free(c);
    req->rc = rc;
    return rc;
  }
  req->internal = c;
  c->live_next = s->live;
  if (s->live) s->live->live_prev = c;
  s->live = c;
  if (!sync) s->in_flight++;
  s->running++;
  return CS_E_OK;
}

static int s3_start(void *self, cs_store_request *req) {
  assert(self && req);
  return start(self, req, false);
}

static cs_store_request *done_pop(s3_store *s) {
  cs_store_request *req = s->done_head;
  if (req) {
    s->done_head = req->next;
    if (!s->done_head) s->done_tail = NULL;
    req->next = NULL;
    req->internal = NULL;
    s->in_flight--;
  }
  return req;
}

static int s3_reap(void *self, uint32_t timeout_ms, cs_store_request **done) {
  s3_store *s = self;
  assert(s && done);
  *done = done_pop(s);
  if (*done) return 1;
  double deadline = now_ms() + timeout_ms;
  while (s->running > 0) {
    double wait = deadline - now_ms();
    int rc = drive(s, wait > 0 ? (uint32_t)wait : 0, true);
    if (rc != CS_E_OK) return rc;
    *done = done_pop(s);
    if (*done) return 1;
    if (atomic_exchange(&s->woken, false)) return 0;
    if (wait <= 0) break;
  }
  atomic_store(&s->woken, false);
  return 0;
}

/* From any thread: the reap waiting in curl_multi_poll returns (curl_multi_wakeup is thread safe). */
static void s3_wakeup(void *self) {
  s3_store *s = self;
  atomic_store(&s->woken, true);
  curl_multi_wakeup(s->multi);
}

/*
 * A synchronous primitive: its request started beside any in flight and
 * driven to its end; the others' answers stay queued for s3_reap.
 */
static int run_sync(s3_store *s, cs_store_request *req) {
  int rc = start(s, req, true);
  while (rc == CS_E_OK && req->internal) {
    rc = drive(s, 1000, false);
    if (rc != CS_E_OK) call_drop(s, req->internal); /* the multi handle failed: nothing of it outlives the call */
  }
  return rc == CS_E_OK ? req->rc : rc;
}

/* ---- The synchronous primitives ---- */

static int s3_put(void *self, const char *key, const void *bytes, size_t len, const cs_object_info *meta,
                  bool if_none_match, cs_store_result *res) {
  assert(self && res);
  cs_store_request req = {.op = CS_STORE_PUT, .key = key, .bytes = bytes, .len = len, .meta = meta,
                          .if_none_match = if_none_match};
  int rc = run_sync(self, &req);
  *res = req.res; /* a refused key is named there */
  return rc;
}

static int s3_head(void *self, const char *key, cs_object_info *info, cs_store_result *res) {
  assert(self && res);
  if (!info) return CS_E_INVALID_ARGUMENT;
  cs_store_request req = {.op = CS_STORE_HEAD, .key = key};
  int rc = run_sync(self, &req);
  *res = req.res;
  if (rc == CS_E_OK) *info = req.info;
  return rc;
}

static int s3_get(void *self, const char *key, const cs_range *range, void *buf, size_t cap, size_t *got,
                  cs_store_result *res) {
  assert(self && res);
  if (!got) return CS_E_INVALID_ARGUMENT;
  *got = 0;
  cs_store_request req = {.op = CS_STORE_GET, .key = key, .has_range = range != NULL, .buf = buf, .cap = cap};
  if (range) req.range = *range;
  int rc = run_sync(self, &req);
  *res = req.res;
  if (rc == CS_E_OK) *got = req.got;
  return rc;
}

static int s3_list(void *self, const char *prefix, const char *token, uint32_t max_keys, cs_list_page *page,
                   cs_store_result *res) {
  assert(self && res);
  cs_store_request req = {.op = CS_STORE_LIST, .key = prefix, .token = token, .max_keys = max_keys, .page = page};
  int rc = run_sync(self, &req);
  *res = req.res; /* a refused key is named there */
  return rc;
}

static int s3_del(void *self, const char *key, cs_store_result *res) {
  assert(self && res);
  cs_store_request req = {.op = CS_STORE_DEL, .key = key};
  int rc = run_sync(self, &req);
  *res = req.res; /* a refused key is named there */
  return rc;
}

static void s3_close(void *self) {
  s3_store *s = self;
  if (!s) return;
  /* Requests not yet handed back are abandoned: the running ones' outcome unknown. */
  while (s->live) {
    cs_store_request *req = s->live->req;
    call_drop(s, s->live);
    req->internal = NULL;
    req->rc = CS_E_CLOSED;
  }
  for (cs_store_request *req; (req = done_pop(s)) != NULL;) req->rc = CS_E_CLOSED;
  if (s->multi) curl_multi_cleanup(s->multi);
  free(s->endpoint);
  free(s->host);
  free(s->bucket);
  free(s->region);
  free(s->access_key_id);
  if (s->secret_access_key) memset(s->secret_access_key, 0, strlen(s->secret_access_key));
  free(s->secret_access_key);
  if (s->session_token) memset(s->session_token, 0, strlen(s->session_token));
  free(s->session_token);
  free(s);
}

static const cs_store_ops s3_ops = {.name = "s3",
                                    .put = s3_put,
                                    .head = s3_head,
                                    .get = s3_get,
                                    .list = s3_list,
                                    .del = s3_del,
                                    .close = s3_close,
                                    .start = s3_start,
                                    .reap = s3_reap,
                                    .wakeup = s3_wakeup};

static char *dup_or_null(const char *text) { return text ? strdup(text) : NULL; }

static bool has_control(const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p; p++)
    if (*p < 0x20 || *p == 0x7f) return true;
  return false;
}

/*
 * What goes into a header: no control byte (CR or LF would start a header
 * of the value's choosing); the region and key id also go into the
 * Authorization header's Credential, where '/', ',' and spaces separate
 * fields. The values are never written into msg: they may be secrets.
 */
static int credentials_check(const cs_s3_config *cfg, char *msg, size_t msg_size) {
  const char *fields[] = {"s3.region", "s3.access_key_id", "s3.secret_access_key", "s3.session_token"};
  const char *values[] = {cfg->region, cfg->access_key_id, cfg->secret_access_key, cfg->session_token};
  for (int i = 0; i < 4; i++) {
    if (!values[i]) continue;
    if (has_control(values[i])) {
      snprintf(msg, msg_size, "%s: has a control byte (CR, LF, ...), which would end the header it goes in",
               fields[i]);
      return CS_E_CONFIG;
    }
    if (i < 2 && strpbrk(values[i], "/, ")) {
      snprintf(msg, msg_size, "%s: has a '/', ',' or space, which would break the signature's Credential", fields[i]);
      return CS_E_CONFIG;
    }
  }
  return CS_E_OK;
}

static int config_check(const cs_s3_config *cfg, char *msg, size_t msg_size) {
  if (!cfg || !cfg->endpoint) {
    snprintf(msg, msg_size, "s3.endpoint: missing");
    return CS_E_CONFIG;
  }
  int rc = cs_endpoint_validate("s3.endpoint", cfg->endpoint, cfg->allow_insecure, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (strchr(strstr(cfg->endpoint, "://") + 3, '/')) {
    snprintf(msg, msg_size, "s3.endpoint: no path allowed (path-style URLs add the bucket)");
    return CS_E_CONFIG;
  }
  const char *fields[] = {"s3.bucket", "s3.access_key_id", "s3.secret_access_key"};
  const char *values[] = {cfg->bucket, cfg->access_key_id, cfg->secret_access_key};
  for (int i = 0; i < 3; i++) {
    if (!values[i] || !values[i][0]) {
      snprintf(msg, msg_size, "%s: missing", fields[i]);
      return CS_E_CONFIG;
    }
  }
  if (strchr(cfg->bucket, '/') || strlen(cfg->bucket) > 63 || strcmp(cfg->bucket, ".") == 0 ||
      strcmp(cfg->bucket, "..") == 0 || has_control(cfg->bucket)) {
    snprintf(msg, msg_size, "s3.bucket: not a bucket name");
    return CS_E_CONFIG;
  }
  return credentials_check(cfg, msg, msg_size);
}

int cs_s3_open(const cs_s3_config *cfg, cs_store *store, char *msg, size_t msg_size) {
  assert(store && msg && msg_size);
  msg[0] = '\0';
  int rc = config_check(cfg, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  static bool curl_ready; /* curl_global_init is documented as not thread-safe before 7.84 */
  if (!curl_ready && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return CS_E_NO_MEMORY;
  curl_ready = true;
  s3_store *s = calloc(1, sizeof *s);
  if (!s) return CS_E_NO_MEMORY;
  s->cfg = *cfg;
  s->endpoint = dup_or_null(cfg->endpoint);
  s->bucket = dup_or_null(cfg->bucket);
  s->region = dup_or_null(cfg->region && cfg->region[0] ? cfg->region : "us-east-1");
  s->access_key_id = dup_or_null(cfg->access_key_id);
  s->secret_access_key = dup_or_null(cfg->secret_access_key);
  s->session_token = cfg->session_token && cfg->session_token[0] ? dup_or_null(cfg->session_token) : NULL;
  s->multi = curl_multi_init();
  s->host = dup_or_null(strstr(s->endpoint ? s->endpoint : "://", "://") + 3);
  if (!s->endpoint || !s->host || !s->bucket || !s->region || !s->access_key_id || !s->secret_access_key || !s->multi ||
      (cfg->session_token && cfg->session_token[0] && !s->session_token)) {
    s3_close(s);
    return CS_E_NO_MEMORY;
  }
  if (!s->cfg.connect_timeout_ms) s->cfg.connect_timeout_ms = 5000;
  if (!s->cfg.request_timeout_ms) s->cfg.request_timeout_ms = 300000;
  if (!s->cfg.low_speed_bytes_per_s) s->cfg.low_speed_bytes_per_s = 1024;
  if (!s->cfg.low_speed_time_s) s->cfg.low_speed_time_s = 30;
  if (!s->cfg.max_connections) s->cfg.max_connections = 8;
  /* One connection beyond the bound, for a synchronous primitive beside a full set in flight. */
  curl_multi_setopt(s->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)s->cfg.max_connections + 1);
  curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)s->cfg.max_connections + 1);
  *store = (cs_store){.ops = &s3_ops, .self = s, .in_flight_max = s->cfg.max_connections};
  return CS_E_OK;
}

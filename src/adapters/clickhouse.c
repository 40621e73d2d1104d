/*
 * The ClickHouse catalog adapter: one primitive, one statement over HTTP
 * (docs/clickhouse.md). Values are validated or escaped, never interpolated
 * raw; answers are TabSeparated, parsed strictly; the adapter never retries.
 */
#include "capstore/clickhouse.h"

#include <assert.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CH_PREFIX_MAX 64u
#define CH_TABLE_MAX 128u
#define CH_NOW_NS "(toUInt64(now()) * 1000000000)"
/*
 * now() reads whole seconds, so between a fence check and its rows landing
 * the server's clock can jump a second and a claim expire by it. The fence
 * and the release tombstone therefore add one tick to the caller's margin
 * (which covers the apply delay): the simulator's whole-second clock failed
 * without it (docs/clickhouse.md).
 */
#define CH_CLOCK_TICK_NS ((uint64_t)1000000000)
#define CH_FIELDS_MAX 32u
#define CH_CLUSTER_MAX 64u

typedef struct ch_buf {
  char *bytes;
  size_t len;
  size_t cap;
  size_t max;
  bool overflow;
} ch_buf;

typedef struct ch_adapter {
  CURL *curl;
  struct curl_slist *headers;
  char url[1024];
  char holder[256];
  char claims[CH_TABLE_MAX], descriptors[CH_TABLE_MAX], inventory[CH_TABLE_MAX], publishes[CH_TABLE_MAX],
      rejected[CH_TABLE_MAX];
  uint64_t connect_timeout_ns, request_timeout_ns, query_bytes_max;
  char *insert_url; /* url with query=INSERT INTO descriptors (...) FORMAT TabSeparated */
  ch_buf query;
  ch_buf answer;
  ch_buf stage; /* descriptor rows on their way into the request body */
  char curl_error[CURL_ERROR_SIZE]; /* libcurl's words for the last transport failure */
  /* A replicated catalog (cs_clickhouse_config.cluster): "" for one server. */
  char cluster[CH_CLUSTER_MAX + 1];
  uint32_t quorum;
  /* The last sole claim confirmed after a barrier: the next term of the same lease is a renewal (no barrier). */
  cs_uuid confirmed_lease;
  uint64_t confirmed_term;
  bool confirmed; /* confirmed_lease and confirmed_term hold a barrier that went in */
  bool cluster_ok, checking; /* cluster_check passed (settings fixed); under way */
} ch_adapter;

/* ---- buffers ------------------------------------------------------------- */

static bool buf_reserve(ch_buf *b, size_t extra) {
  if (b->overflow) return false;
  if (b->len + extra + 1 > b->max) {
    b->overflow = true;
    return false;
  }
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap == 0 ? 4096 : b->cap;
  while (cap < b->len + extra + 1) cap *= 2;
  if (cap > b->max) cap = b->max;
  char *bytes = realloc(b->bytes, cap);
  if (bytes == NULL) {
    b->overflow = true;
    return false;
  }
  b->bytes = bytes;
  b->cap = cap;
  return true;
}

static void buf_put(ch_buf *b, const char *bytes, size_t len) {
  if (!buf_reserve(b, len)) return;
  memcpy(b->bytes + b->len, bytes, len);
  b->len += len;
  b->bytes[b->len] = '\0';
}

static void buf_str(ch_buf *b, const char *text) { buf_put(b, text, strlen(text)); }

static void buf_u64(ch_buf *b, uint64_t value) {
  char text[24];
  int n = snprintf(text, sizeof text, "%llu", (unsigned long long)value);
  assert(n > 0 && (size_t)n < sizeof text);
  buf_put(b, text, (size_t)n);
}

/* A quoted string literal: backslash and quote escaped. Returns false on NUL (refused). */
static bool buf_quoted(ch_buf *b, const char *text, size_t len) {
  if (memchr(text, '\0', len) != NULL) return false;
  buf_put(b, "'", 1);
  size_t start = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] != '\\' && text[i] != '\'') continue;
    buf_put(b, text + start, i - start);
    buf_put(b, "\\", 1);
    start = i;
  }
  buf_put(b, text + start, len - start);
  buf_put(b, "'", 1);
  return true;
}

/* A uuid in canonical text, quoted. It is validated by construction (formatted from bytes). */
static void buf_uuid(ch_buf *b, const cs_uuid *id) {
  char text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(id, text);
  cs_uuid check;
  assert(cs_uuid_parse(text, CS_UUID_TEXT_LEN, &check) == CS_E_OK);
  (void)check;
  buf_put(b, "'", 1);
  buf_put(b, text, CS_UUID_TEXT_LEN);
  buf_put(b, "'", 1);
}

static void buf_reset(ch_buf *b) {
  b->len = 0;
  b->overflow = false;
  if (b->bytes != NULL) b->bytes[0] = '\0';
}

/* ---- parsing (exposed for the fuzzer) ----------------------------------- */

int cs_clickhouse_parse_u64(const char *text, uint64_t *out) {
  if (text == NULL) return CS_E_PARSE;
  return cs_decimal_u64(text, strlen(text), true, out);
}

int cs_clickhouse_parse_error(const char *body, size_t len, int32_t *code) {
  static const char tag[] = "Code: ";
  const size_t tag_len = sizeof tag - 1;
  for (size_t i = 0; i + tag_len < len; i++) {
    if (memcmp(body + i, tag, tag_len) != 0) continue;
    size_t j = i + tag_len;
    int64_t value = 0;
    size_t digits = 0;
    while (j < len && body[j] >= '0' && body[j] <= '9' && digits < 6) {
      value = value * 10 + (body[j] - '0');
      j++;
      digits++;
    }
    if (digits == 0 || (j < len && body[j] >= '0' && body[j] <= '9')) return CS_E_PARSE;
    *code = (int32_t)value;
    return CS_E_OK;
  }
  return CS_E_PARSE;
}

static bool body_has(const char *body, size_t len, const char *needle) {
  size_t n = strlen(needle);
  for (size_t i = 0; i + n <= len; i++)
    if (memcmp(body + i, needle, n) == 0) return true;
  return false;
}

/* Codes that say our own statement or values are wrong: the content is refused. */
static bool code_is_invalid(int32_t code) {
  switch (code) {
  case 6:   /* CANNOT_PARSE_TEXT */
  case 25:  /* CANNOT_PARSE_ESCAPE_SEQUENCE */
  case 26:  /* CANNOT_PARSE_QUOTED_STRING */
  case 27:  /* CANNOT_PARSE_INPUT_ASSERTION_FAILED */
  case 32:  /* ATTEMPT_TO_READ_AFTER_EOF */
  case 38:  /* CANNOT_PARSE_DATE */
  case 41:  /* CANNOT_PARSE_DATETIME */
  case 43:  /* ILLEGAL_TYPE_OF_ARGUMENT */
  case 44:  /* ILLEGAL_COLUMN */
  case 53:  /* TYPE_MISMATCH */
  case 62:  /* SYNTAX_ERROR */
  case 69:  /* ARGUMENT_OUT_OF_BOUND */
  case 70:  /* CANNOT_CONVERT_TYPE */
  case 72:  /* CANNOT_PARSE_NUMBER */
  case 117: /* INCORRECT_DATA */
  case 130: /* CANNOT_READ_ARRAY_FROM_TEXT (a shape in the rows' body) */
  case 386: /* NO_COMMON_TYPE */
    return true;
  default: return false;
  }
}

/* A replicated table's refusals of a statement that did not apply: retried sooner than a TTL. */
static bool code_not_applied(int32_t code) {
  switch (code) {
  case 285: /* TOO_FEW_LIVE_REPLICAS: fewer replicas alive than insert_quorum */
  case 286: /* UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE: another quorum insert still pending */
  case 289: /* REPLICA_IS_NOT_IN_QUORUM: a sequentially consistent read on a replica behind */
  case 242: /* TABLE_IS_READ_ONLY: the replica lost ZooKeeper */
  case 999: /* KEEPER_EXCEPTION: a coordination error before the commit */
    return true;
  default: return false;
  }
}

static cs_outcome classify_code(long status, int32_t code, const char *body, size_t len) {
  if (code == 319) return CS_OUT_UNKNOWN; /* UNKNOWN_STATUS_OF_INSERT: the quorum timed out; it may land later */
  if (code_not_applied(code)) return CS_OUT_REFUSED;
  if (code == 202) return CS_OUT_THROTTLED; /* TOO_MANY_SIMULTANEOUS_QUERIES */
  if (code == 62 && body_has(body, len, "Max query size exceeded")) return CS_OUT_TOO_LARGE;
  if (code == 241) return CS_OUT_SERVER_ERROR; /* MEMORY_LIMIT_EXCEEDED */
  if (code == 192 || code == 193 || code == 194 || code == 195 || code == 164 || code == 497 || code == 516)
    return CS_OUT_FORBIDDEN;
  if (code == 60 || code == 81) return CS_OUT_NOT_FOUND; /* UNKNOWN_TABLE, UNKNOWN_DATABASE */
  if (code_is_invalid(code)) return CS_OUT_INVALID;
  return status >= 400 && status < 500 && status != 404 ? CS_OUT_INVALID : CS_OUT_SERVER_ERROR;
}

/*
 * The exception in a 200 answer: the server writes it after the rows it had
 * sent, so it starts a line. Every answer the adapter reads begins its rows
 * with a uuid, a number, a flag or a table name, and TabSeparated escapes a
 * newline inside a value, so text echoed from the tables ("Code: 319" in a
 * record's metadata or a claim's holder) never starts a line: the answer's
 * rows, not an error. Returns true with *code for the first line that starts
 * "Code: N".
 */
static bool answer_exception(const char *body, size_t len, int32_t *code) {
  static const char tag[] = "Code: ";
  for (size_t i = 0; i + sizeof tag - 1 < len; i++) {
    if (i > 0 && body[i - 1] != '\n') continue;
    if (memcmp(body + i, tag, sizeof tag - 1) != 0) continue;
    if (cs_clickhouse_parse_error(body + i, len - i, code) == CS_E_OK) return true;
  }
  *code = 0;
  return false;
}

cs_outcome cs_clickhouse_classify(long http_status, const char *body, size_t len, int32_t *code) {
  *code = 0;
  if (http_status == 200)
    return answer_exception(body, len, code) ? classify_code(http_status, *code, body, len) : CS_OUT_OK;
  bool has_code = cs_clickhouse_parse_error(body, len, code) == CS_E_OK;
  if (has_code) return classify_code(http_status, *code, body, len);
  if (http_status == 413) return CS_OUT_TOO_LARGE;
  if (http_status == 429 || http_status == 503) return CS_OUT_THROTTLED;
  if (http_status == 401 || http_status == 403) return CS_OUT_FORBIDDEN;
  if (http_status == 404) return CS_OUT_NOT_FOUND;
  if (http_status == 412) return CS_OUT_PRECONDITION;
  if (http_status >= 400 && http_status < 500) return CS_OUT_INVALID;
  return CS_OUT_SERVER_ERROR;
}

static int tsv_unescape_char(char c, char *out) {
  switch (c) {
  case 'n': *out = '\n'; return CS_E_OK;
  case 't': *out = '\t'; return CS_E_OK;
  case 'r': *out = '\r'; return CS_E_OK;
  case 'b': *out = '\b'; return CS_E_OK;
  case 'f': *out = '\f'; return CS_E_OK;
  case '\\': *out = '\\'; return CS_E_OK;
  case '\'': *out = '\''; return CS_E_OK;
  case '0': *out = '\0'; return CS_E_OK; /* U+0000 in a text: the caller has the field's length */
  default: return CS_E_PARSE;
  }
}

/* Unescapes one field in place from *cur up to its tab or newline; returns the terminator. */
static int tsv_field(cs_clickhouse_tsv *tsv, char **field, size_t *length, char *term) {
  char *start = tsv->cur, *w = tsv->cur, *p = tsv->cur;
  if (p + 2 <= tsv->end && p[0] == '\\' && p[1] == 'N' && (p + 2 == tsv->end || p[2] == '\t' || p[2] == '\n')) {
    if (p + 2 == tsv->end) return CS_E_PARSE;
    *term = p[2];
    *field = NULL;
    *length = 0;
    tsv->cur = p + 3;
    return CS_E_OK;
  }
  for (; p < tsv->end; p++) {
    if (*p == '\t' || *p == '\n') break;
    if (*p == '\0') return CS_E_PARSE; /* the server writes a NUL as \0, never raw */
    if (*p != '\\') {
      *w++ = *p;
      continue;
    }
    if (++p == tsv->end) return CS_E_PARSE;
    if (tsv_unescape_char(*p, w) != CS_E_OK) return CS_E_PARSE;
    w++;
  }
  if (p == tsv->end) return CS_E_PARSE; /* a row ends with a newline */
  *term = *p;
  *w = '\0';
  *field = start;
  *length = (size_t)(w - start);
  tsv->cur = p + 1;
  return CS_E_OK;
}

int cs_clickhouse_tsv_next(cs_clickhouse_tsv *tsv, char **fields, size_t *lengths, uint32_t count) {
  assert(count > 0 && count <= CH_FIELDS_MAX);
  if (tsv->cur == tsv->end) return 0;
  for (uint32_t i = 0; i < count; i++) {
    char term = '\0';
    if (tsv_field(tsv, &fields[i], &lengths[i], &term) != CS_E_OK) return CS_E_PARSE;
    if ((term == '\n') != (i + 1 == count)) return CS_E_PARSE;
  }
  return 1;
}

int cs_clickhouse_table_name(const char *prefix, const char *table, char *out, size_t cap) {
  size_t n = strlen(prefix);
  if (n == 0 || n > CH_PREFIX_MAX) return CS_E_CONFIG;
  for (size_t i = 0; i < n; i++) {
    char c = prefix[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return CS_E_CONFIG;
  }
  int w = snprintf(out, cap, "%s_%s_v%u", prefix, table, CS_CATALOG_SCHEMA_VERSION);
  return w > 0 && (size_t)w < cap ? CS_E_OK : CS_E_TOO_LARGE;
}

/* ---- HTTP ---------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *user) {
  ch_buf *answer = user;
  size_t n = size * nmemb;
  buf_put(answer, ptr, n);
  return answer->overflow ? 0 : n;
}

static void result_set(cs_catalog_result *res, cs_outcome outcome, int32_t code, const char *detail, size_t len) {
  res->outcome = outcome;
  res->server_code = code;
  if (len >= sizeof res->detail) len = sizeof res->detail - 1;
  memcpy(res->detail, detail, len);
  res->detail[len] = '\0';
  for (size_t i = 0; i < len; i++)
    if (res->detail[i] == '\n' || res->detail[i] == '\r') res->detail[i] = ' ';
}

/* TLS failures before a connection carried any request: the handshake or the peer's certificate. */
static bool curl_tls_refused(CURLcode rc) {
  switch (rc) {
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

/* Failures that come before a request can leave: no connection, or a refused scheme. */
static bool curl_not_connected(CURLcode rc) {
  return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY ||
         rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT;
}

/*
 * REFUSED only when the failure comes before any request and libcurl wrote
 * no request byte (sent_bytes, CURLINFO_REQUEST_SIZE): a kept-alive
 * connection that died after the request and a fresh one that then failed
 * its handshake stay UNKNOWN, as the statement may have applied.
 */
static cs_outcome classify_curl(CURLcode rc, long sent_bytes) {
  if (rc == CURLE_OPERATION_TIMEDOUT) return CS_OUT_TIMEOUT;
  if ((curl_not_connected(rc) || curl_tls_refused(rc)) && sent_bytes == 0) return CS_OUT_REFUSED;
  return CS_OUT_UNKNOWN; /* sent (or partly sent), answer lost */
}

/* What an outcome of a transport failure tells the operator, put first in the detail (the rest may be cut). */
static const char *transport_meaning(cs_outcome outcome, CURLcode rc) {
  if (outcome == CS_OUT_REFUSED) return curl_tls_refused(rc) ? "TLS failed, nothing was sent: " : "nothing was sent: ";
  return outcome == CS_OUT_UNKNOWN ? "the request may have reached the server: " : "";
}

/* Classifies a transport failure into res: its meaning, curl's name for it and curl's own words. */
static void transport_failed(ch_adapter *ch, CURLcode rc, cs_catalog_result *res) {
  long sent_bytes = -1; /* unknown unless libcurl answers: never REFUSED then */
  if (curl_easy_getinfo(ch->curl, CURLINFO_REQUEST_SIZE, &sent_bytes) != CURLE_OK) sent_bytes = -1;
  cs_outcome outcome = classify_curl(rc, sent_bytes);
  const char *what = transport_meaning(outcome, rc);
  char detail[sizeof res->detail];
  bool words = ch->curl_error[0] != '\0';
  snprintf(detail, sizeof detail, "%s%s%s%.120s%s", what, curl_easy_strerror(rc), words ? " (" : "", ch->curl_error,
           words ? ")" : "");
  result_set(res, outcome, 0, detail, strlen(detail));
}

/*
 * Sends the request set up on the handle to url and classifies the answer
 * into res. The answer body stays in ch->answer.
 */
static void ch_perform(ch_adapter *ch, const char *url, cs_catalog_result *res) {
  buf_reset(&ch->answer);
  ch->curl_error[0] = '\0';
  CURL *c = ch->curl;
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &ch->answer);
  CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_WRITE_ERROR && ch->answer.overflow) {
    result_set(res, CS_OUT_SERVER_ERROR, 0, CS_CLICKHOUSE_ANSWER_TOO_LARGE, sizeof CS_CLICKHOUSE_ANSWER_TOO_LARGE - 1);
    return;
  }
  if (rc != CURLE_OK) {
    transport_failed(ch, rc, res);
    return;
  }
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  const char *body = ch->answer.bytes == NULL ? "" : ch->answer.bytes;
  int32_t code = 0;
  cs_outcome outcome = cs_clickhouse_classify(status, body, ch->answer.len, &code);
  if (outcome == CS_OUT_OK) {
    res->outcome = CS_OUT_OK;
    return;
  }
  char detail[sizeof res->detail];
  int n = snprintf(detail, sizeof detail, "HTTP %ld: %.*s", status, (int)(ch->answer.len < 200 ? ch->answer.len : 200),
                   body);
  result_set(res, outcome, code, detail, n > 0 ? (size_t)n : 0);
}

/* A statement over query_bytes_max (the server's max_query_size) is TOO_LARGE without being sent. */
static bool query_too_large(const ch_adapter *ch, cs_catalog_result *res) {
  if (!ch->query.overflow && ch->query.len <= ch->query_bytes_max) return false;
  result_set(res, CS_OUT_TOO_LARGE, 0, "statement exceeds query_bytes_max", 33);
  return true;
}

static bool cluster_ready(ch_adapter *ch, cs_catalog_result *res);

/* Sends ch->query as one statement and classifies the answer into res. */
static void ch_exec(ch_adapter *ch, cs_catalog_result *res) {
  memset(res, 0, sizeof *res);
  assert(ch->query.len > 0 || ch->query.overflow);
  if (query_too_large(ch, res)) return;
  if (!cluster_ready(ch, res)) return;
  curl_easy_setopt(ch->curl, CURLOPT_POSTFIELDS, ch->query.bytes);
  curl_easy_setopt(ch->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)ch->query.len);
  ch_perform(ch, ch->url, res);
}

/* ---- descriptor rows as a request body ------------------------------------ */

#define CH_STAGE_BYTES ((size_t)256 * 1024)

/* The rows of an INDEX batch, formatted into ch->stage a chunk at a time as libcurl reads the body. */
typedef struct ch_rows {
  const cs_index_pack *packs;
  uint32_t pack_count;
  uint64_t version;
  uint32_t pack, record; /* the next row to format */
  ch_buf *stage;
  size_t pos;            /* stage bytes already handed to libcurl */
  uint64_t sent, total;
} ch_rows;

/*
 * Measures the batch's rows (total bytes, row count) and checks every value
 * on the way. Returns false when a value is refused: nothing is sent then.
 */
static bool rows_measure(ch_rows *s, uint64_t *row_count) {
  s->total = 0;
  *row_count = 0;
  for (uint32_t i = 0; i < s->pack_count; i++) {
    for (uint32_t r = 0; r < s->packs[i].record_count; r++) {
      size_t n = cs_catalog_tsv_row(s->packs[i].ref, &s->packs[i].records[r], s->version, NULL, 0);
      if (n == 0) return false;
      s->total += n;
    }
    *row_count += s->packs[i].record_count;
  }
  return true;
}

/* Formats the next rows into the emptied stage, about CH_STAGE_BYTES of them. False when it cannot. */
static bool rows_refill(ch_rows *s) {
  buf_reset(s->stage);
  s->pos = 0;
  while (s->pack < s->pack_count && s->stage->len < CH_STAGE_BYTES) {
    const cs_index_pack *p = &s->packs[s->pack];
    if (s->record == p->record_count) {
      s->pack++;
      s->record = 0;
      continue;
    }
    ch_buf *b = s->stage;
    size_t room = b->cap > b->len ? b->cap - b->len - 1 : 0; /* one byte stays for the terminator */
    size_t n = cs_catalog_tsv_row(p->ref, &p->records[s->record], s->version, b->bytes + b->len, room);
    if (n == 0) return false; /* measured and accepted before: the caller's records changed */
    if (n > room) {
      if (!buf_reserve(b, n)) return false;
      continue;
    }
    b->len += n;
    s->record++;
  }
  return s->stage->len > 0;
}

static size_t on_read(char *dst, size_t size, size_t nitems, void *user) {
  ch_rows *s = user;
  if (s->pos == s->stage->len && s->sent < s->total && !rows_refill(s)) return CURL_READFUNC_ABORT;
  size_t n = s->stage->len - s->pos;
  if (n > size * nitems) n = size * nitems;
  memcpy(dst, s->stage->bytes + s->pos, n);
  s->pos += n;
  s->sent += n;
  return n;
}

/*
 * Sends the batch's descriptor rows as the body of INSERT ... FORMAT
 * TabSeparated, the statement in the URL: the server streams the body
 * through its format parser, so max_query_size does not bound it. Not
 * fenced (docs/clickhouse.md): the rows stay invisible until an inventory
 * row at the same (pack_id, version) names them.
 */
static void ch_send_rows(ch_adapter *ch, ch_rows *s, cs_catalog_result *res) {
  memset(res, 0, sizeof *res);
  if (!cluster_ready(ch, res)) return;
  buf_reset(s->stage); /* the last call's rows stay in it */
  s->pos = 0;
  s->sent = 0;
  CURL *c = ch->curl;
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, (char *)NULL);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
  curl_easy_setopt(c, CURLOPT_READDATA, s);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->total);
  ch_perform(ch, ch->insert_url, res);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, (curl_read_callback)NULL);
  curl_easy_setopt(c, CURLOPT_READDATA, (void *)NULL);
  assert(res->outcome != CS_OUT_OK || s->sent == s->total);
}

/* A 200 answer that does not follow the grammar: the server said something we cannot trust. */
static void answer_malformed(cs_catalog_result *res, const char *what) {
  result_set(res, CS_OUT_SERVER_ERROR, 0, what, strlen(what));
}

static int refuse_content(cs_catalog_result *res, const char *what) {
  memset(res, 0, sizeof *res);
  result_set(res, CS_OUT_INVALID, 0, what, strlen(what));
  return CS_E_OK;
}

/* ---- statements ---------------------------------------------------------- */

/* (SELECT max(term) FROM claims) */
static void q_head_term(ch_adapter *ch) {
  buf_str(&ch->query, "(SELECT max(term) FROM ");
  buf_str(&ch->query, ch->claims);
  buf_str(&ch->query, ")");
}

/* The fence: the head term has exactly one claim, ours, expiring after server now + margin. */
static void q_fence(ch_adapter *ch, const cs_uuid *lease_id, uint64_t margin_ns) {
  ch_buf *q = &ch->query;
  buf_str(q, " WHERE (SELECT count() FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  q_head_term(ch);
  buf_str(q, ") = 1 AND (SELECT count() FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  q_head_term(ch);
  buf_str(q, " AND lease_id = ");
  buf_uuid(q, lease_id);
  buf_str(q, " AND expires_at_ns > " CH_NOW_NS " + ");
  buf_u64(q, margin_ns > UINT64_MAX / 4 ? UINT64_MAX / 4 : margin_ns + CH_CLOCK_TICK_NS); /* no wrap */
  buf_str(q, " AND expires_at_ns > acquired_at_ns) = 1"); /* a tombstone has acquired = expires */
}

static bool answer_u64_row(ch_adapter *ch, uint64_t *values, uint32_t count);

/* The five tables' columns and sort keys, in the order of ch_table_names. */
static const char *const CH_COLUMNS[5] = {
    "(term UInt64, lease_id String, holder String, acquired_at_ns UInt64, expires_at_ns UInt64)",
    ("(pack_id String, key String, capture_id String, tenant_id String, experiment_id String, run_id String,"
    " session_id String, request_id String, sequence_id String, model_id String, model_revision String,"
    " adapter_revision Nullable(String), capture_policy_version String, hook_name String, layer_number Int32,"
    " producer_rank UInt32, step_number UInt64, token_start UInt64, token_end UInt64, batch_position UInt32,"
    " dtype String, shape Array(UInt32), captured_at_ns UInt64, offset UInt64, stored_length UInt64,"
    " decoded_length UInt64, crc32 UInt32, version UInt64)"),
    ("(pack_id String, key String, size_bytes UInt64, sha256 String, record_count UInt32, created_at_ns UInt64,"
     " version UInt64)"),
    "(version UInt64, term UInt64, lease_id String, pack_count UInt32, published_at_ns UInt64)",
    "(pack_id String, lease_id String, reason String, rejected_at_ns UInt64)",
};
static const char *const CH_ORDER_BY[5] = {"(term, lease_id)", "(pack_id, capture_id, version)",
                                           "(pack_id, version)", "version", "pack_id"};

static void ch_table_names(ch_adapter *ch, const char *names[5]) {
  names[0] = ch->claims, names[1] = ch->descriptors, names[2] = ch->inventory, names[3] = ch->publishes,
  names[4] = ch->rejected;
}

/* A text answer field read as a C string: present, NUL-free, shorter than cap. */
static bool field_text(const char *field, size_t len, char *out, size_t cap) {
  if (field == NULL || memchr(field, '\0', len) != NULL || len >= cap) return false;
  memcpy(out, field, len);
  out[len] = '\0';
  return true;
}

static int ch_insert_url(ch_adapter *ch);

/*
 * The cluster (system.clusters) against insert_quorum: one shard, and a
 * quorum of every replica. 18.16's sequentially consistent read checks only
 * that the replica holds the table's last quorum part, not every earlier
 * one: a replica that lags on a part a majority confirmed, then takes a
 * write itself, reads without that part (docs/catalog-protocol.md,
 * "Replicated catalog"). With every replica in each quorum, a confirmed
 * write is on all of them. And a server that knows insert_quorum_parallel
 * (releases after 2020: on by default, quorum writes no longer serialized
 * and sequential consistency not kept) gets it off with every statement.
 */
static bool cluster_check(ch_adapter *ch, cs_catalog_result *res) {
  ch_buf *q = &ch->query;
  buf_reset(q);
  buf_str(q, "SELECT (SELECT count() FROM system.clusters WHERE cluster = ");
  buf_quoted(q, ch->cluster, strlen(ch->cluster)); /* validated: no NUL, no quote */
  buf_str(q, "), (SELECT uniqExact(shard_num) FROM system.clusters WHERE cluster = ");
  buf_quoted(q, ch->cluster, strlen(ch->cluster));
  buf_str(q, "), (SELECT count() FROM system.settings WHERE name = 'insert_quorum_parallel') FORMAT TabSeparated");
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK) return false;
  uint64_t v[3] = {0};
  if (!answer_u64_row(ch, v, 3)) {
    answer_malformed(res, "schema: malformed answer about the cluster");
    return false;
  }
  uint64_t replicas = v[0];
  char detail[sizeof res->detail];
  if (replicas == 0) {
    snprintf(detail, sizeof detail, "catalog.clickhouse.cluster '%s' is not in the server's remote_servers",
             ch->cluster);
  } else if (v[1] != 1) {
    snprintf(detail, sizeof detail, "catalog.clickhouse.cluster '%s' has %llu shards: the catalog needs one", ch->cluster,
             (unsigned long long)v[1]);
  } else if ((uint64_t)ch->quorum != replicas) {
    snprintf(detail, sizeof detail,
             "catalog.clickhouse.insert_quorum %u must be all of cluster '%s''s %llu replicas (18.16's sequential "
             "consistency misses a part a smaller quorum confirmed)",
             ch->quorum, ch->cluster, (unsigned long long)replicas);
  } else {
    if (v[2] != 0 && strstr(ch->url, "&insert_quorum_parallel=0") == NULL) {
      size_t used = strlen(ch->url);
      int n = snprintf(ch->url + used, sizeof ch->url - used, "&insert_quorum_parallel=0");
      free(ch->insert_url);
      ch->insert_url = NULL;
      if (n < 0 || (size_t)n >= sizeof ch->url - used || ch_insert_url(ch) != CS_E_OK) {
        ch->url[used] = '\0';
        result_set(res, CS_OUT_SERVER_ERROR, 0, "no room for insert_quorum_parallel=0", 36);
        return false;
      }
    }
    ch->cluster_ok = true;
    return true;
  }
  result_set(res, CS_OUT_INVALID, 0, detail, strlen(detail));
  return false;
}

/*
 * A replicated client's cluster check runs before its first statement of
 * any kind (an adapter whose tables another made has not run the schema
 * check): the statement waiting in ch->query is kept aside meanwhile. A
 * failed check sent nothing of the statement: an outage there is REFUSED.
 */
static bool cluster_ready(ch_adapter *ch, cs_catalog_result *res) {
  if (ch->cluster[0] == '\0' || ch->cluster_ok || ch->checking) return true;
  ch_buf waiting = ch->query;
  ch->query = (ch_buf){.max = waiting.max};
  ch->checking = true;
  bool ok = cluster_check(ch, res);
  ch->checking = false;
  free(ch->query.bytes);
  ch->query = waiting;
  if (ok) {
    memset(res, 0, sizeof *res);
    return true;
  }
  char detail[sizeof res->detail];
  snprintf(detail, sizeof detail, "checking the cluster, nothing else sent: %.180s", res->detail);
  cs_outcome outcome = cs_outcome_maybe_applied(res->outcome) ? CS_OUT_REFUSED : res->outcome;
  result_set(res, outcome, res->server_code, detail, strlen(detail));
  return false;
}

/*
 * Which of the tables exist, and of which engine: a replicated catalog's
 * are Replicated*, one server's are not, and a client configured for the
 * other kind is refused here, before any statement of the protocol (quorum
 * and sequential consistency hold only if every client sends them). Also
 * the current database (the replicas' ZooKeeper paths name it).
 */
static bool tables_check(ch_adapter *ch, char *db, size_t db_cap, bool exists[5], cs_catalog_result *res) {
  const char *names[5];
  ch_table_names(ch, names);
  ch_buf *q = &ch->query;
  buf_reset(q);
  buf_str(q, "SELECT name, engine FROM system.tables WHERE database = currentDatabase() AND name IN (");
  for (int i = 0; i < 5; i++) {
    if (i > 0) buf_str(q, ",");
    buf_quoted(q, names[i], strlen(names[i]));
  }
  buf_str(q, ") UNION ALL SELECT '', currentDatabase() FORMAT TabSeparated");
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK) return false;
  if (ch->answer.bytes == NULL) {
    answer_malformed(res, "schema: empty answer about the tables");
    return false;
  }
  char detail[sizeof res->detail];
  int rc = cs_clickhouse_tables_answer(ch->answer.bytes, ch->answer.len, names, ch->cluster[0] != '\0', exists, db,
                                       db_cap, detail, sizeof detail);
  if (rc == CS_E_CONFIG) {
    result_set(res, CS_OUT_INVALID, 0, detail, strlen(detail));
    return false;
  }
  if (rc != CS_E_OK) {
    answer_malformed(res, "schema: malformed answer about the tables");
    return false;
  }
  return true;
}

int cs_clickhouse_tables_answer(char *body, size_t len, const char *const names[5], bool replicated, bool exists[5],
                                char *db, size_t db_cap, char *detail, size_t detail_cap) {
  memset(exists, 0, 5 * sizeof exists[0]);
  if (db_cap == 0) return CS_E_PARSE;
  db[0] = '\0';
  cs_clickhouse_tsv tsv = {body, body + len};
  char *fields[2];
  size_t lengths[2];
  int got;
  while ((got = cs_clickhouse_tsv_next(&tsv, fields, lengths, 2)) == 1) {
    char name[CH_TABLE_MAX], engine[64];
    if (!field_text(fields[0], lengths[0], name, sizeof name)) return CS_E_PARSE;
    if (name[0] == '\0') {
      if (db[0] != '\0' || !field_text(fields[1], lengths[1], db, db_cap)) return CS_E_PARSE;
      continue;
    }
    if (!field_text(fields[1], lengths[1], engine, sizeof engine)) return CS_E_PARSE;
    bool ours = false;
    for (int i = 0; i < 5; i++)
      if (strcmp(name, names[i]) == 0) exists[i] = ours = true;
    if (!ours) return CS_E_PARSE; /* the statement asked for these five */
    if ((strncmp(engine, "Replicated", 10) == 0) != replicated) {
      snprintf(detail, detail_cap,
               replicated ? "table %s is %s, not replicated: this catalog is one server's; unset catalog.clickhouse.cluster"
                          : "table %s is %s: this catalog is replicated; set catalog.clickhouse.cluster and insert_quorum",
               name, engine);
      return CS_E_CONFIG;
    }
  }
  size_t n = strlen(db);
  if (got != 0 || n == 0 ||
      strspn(db, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != n)
    return CS_E_PARSE;
  return CS_E_OK;
}

/*
 * Creates the tables that are missing: MergeTree on one server; on a
 * cluster ReplicatedMergeTree ON CLUSTER, one ZooKeeper path per
 * database.table shared by every replica ({shard} and {replica} are the
 * servers' macros).
 */
/* The cluster and the tables' kind (cluster_check, tables_check). */
static bool kind_check(ch_adapter *ch, char *db, size_t db_cap, bool exists[5], cs_catalog_result *res) {
  if (ch->cluster[0] != '\0') {
    ch->checking = true;
    bool ok = cluster_check(ch, res);
    ch->checking = false;
    if (!ok) return false;
  }
  return tables_check(ch, db, db_cap, exists, res);
}

/* catalog.h's schema_check: a reader's, before its first query; creates nothing. */
static int ch_schema_check(void *self, cs_catalog_result *res) {
  ch_adapter *ch = self;
  memset(res, 0, sizeof *res);
  char db[CH_PREFIX_MAX + 1];
  bool exists[5];
  kind_check(ch, db, sizeof db, exists, res);
  return CS_E_OK;
}

static int ch_schema_ensure(void *self, cs_catalog_result *res) {
  ch_adapter *ch = self;
  memset(res, 0, sizeof *res);
  bool replicated = ch->cluster[0] != '\0';
  char db[CH_PREFIX_MAX + 1];
  bool exists[5];
  if (!kind_check(ch, db, sizeof db, exists, res)) return CS_E_OK;
  bool ddl_timed_out = false;
  const char *names[5];
  ch_table_names(ch, names);
  for (int i = 0; i < 5; i++) {
    if (exists[i]) continue;
    ch_buf *q = &ch->query;
    buf_reset(q);
    buf_str(q, "CREATE TABLE IF NOT EXISTS ");
    if (replicated) {
      buf_str(q, db);
      buf_str(q, ".");
    }
    buf_str(q, names[i]);
    if (replicated) {
      buf_str(q, " ON CLUSTER ");
      buf_str(q, ch->cluster); /* validated: [A-Za-z0-9_.-] */
    }
    buf_str(q, " ");
    buf_str(q, CH_COLUMNS[i]);
    if (replicated) {
      buf_str(q, " ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/");
      buf_str(q, db);
      buf_str(q, ".");
      buf_str(q, names[i]);
      buf_str(q, "', '{replica}')");
    } else {
      buf_str(q, " ENGINE = MergeTree");
    }
    buf_str(q, " ORDER BY ");
    buf_str(q, CH_ORDER_BY[i]);
    ch_exec(ch, res);
    /* 159: a replica down did not answer within distributed_ddl_task_timeout; it creates the table on its return */
    if (res->outcome != CS_OUT_OK && !(replicated && res->server_code == 159)) return CS_E_OK;
    ddl_timed_out = ddl_timed_out || res->outcome != CS_OUT_OK;
  }
  if (ddl_timed_out) { /* made here? then the catalog can start without the replica */
    if (!tables_check(ch, db, sizeof db, exists, res)) return CS_E_OK;
    for (int i = 0; i < 5; i++)
      if (!exists[i]) {
        result_set(res, CS_OUT_SERVER_ERROR, 159, "schema: a table was not made on this replica", 44);
        return CS_E_OK;
      }
  }
  return CS_E_OK;
}

/*
 * A field that is not free text (a number, an id, a key): present and free
 * of NUL bytes, so the C-string parsers below see all of it ("1\02" is not 1).
 */
static bool field_plain(const char *field, size_t len) { return field != NULL && memchr(field, '\0', len) == NULL; }

/* Reads exactly one row of `count` unsigned integers. */
static bool answer_u64_row(ch_adapter *ch, uint64_t *values, uint32_t count) {
  char *fields[CH_FIELDS_MAX];
  size_t lengths[CH_FIELDS_MAX];
  assert(count <= CH_FIELDS_MAX);
  if (ch->answer.bytes == NULL) return false;
  cs_clickhouse_tsv tsv = {ch->answer.bytes, ch->answer.bytes + ch->answer.len};
  if (cs_clickhouse_tsv_next(&tsv, fields, lengths, count) != 1) return false;
  for (uint32_t i = 0; i < count; i++)
    if (!field_plain(fields[i], lengths[i]) || cs_clickhouse_parse_u64(fields[i], &values[i]) != CS_E_OK) return false;
  return cs_clickhouse_tsv_next(&tsv, fields, lengths, count) == 0;
}

static int ch_head(void *self, const cs_uuid *lease_id, cs_cat_head *out, cs_catalog_result *res) {
  ch_adapter *ch = self;
  ch_buf *q = &ch->query;
  buf_reset(q);
  buf_str(q, "SELECT ");
  q_head_term(ch);
  buf_str(q, ", (SELECT count() FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  q_head_term(ch);
  buf_str(q, " AND expires_at_ns > " CH_NOW_NS "), (SELECT countIf(lease_id != ");
  buf_uuid(q, lease_id);
  buf_str(q, ") FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  q_head_term(ch);
  buf_str(q, "), (SELECT max(version) FROM ");
  buf_str(q, ch->publishes);
  buf_str(q, "), (SELECT greatest(max(expires_at_ns), " CH_NOW_NS ") - " CH_NOW_NS " FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  q_head_term(ch);
  buf_str(q, "), (SELECT max(version) FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, ") FORMAT TabSeparated");
  memset(out, 0, sizeof *out);
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK) return CS_E_OK;
  uint64_t v[6];
  if (!answer_u64_row(ch, v, 6)) {
    answer_malformed(res, "head: malformed answer");
    return CS_E_OK;
  }
  out->head_term = v[0];
  out->head_free = v[1] == 0 || v[2] == 0; /* every claim expired, or all are ours */
  out->watermark = v[3];
  out->busy_for_ns = out->head_free ? 0 : v[4]; /* the head's last claim to expire, by the server's clock */
  out->index_floor = v[5];
  return CS_E_OK;
}

/* The head term is `term` and every claim at it expired or is ours. */
static void q_head_is(ch_adapter *ch, const cs_uuid *lease_id, uint64_t term, bool require_ours) {
  ch_buf *q = &ch->query;
  buf_str(q, " WHERE ");
  q_head_term(ch);
  buf_str(q, " = ");
  buf_u64(q, term);
  buf_str(q, require_ours ? " AND (SELECT count() FROM " : " AND ((SELECT count() FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  buf_u64(q, term);
  buf_str(q, require_ours ? ") > 0 AND " : " AND expires_at_ns > " CH_NOW_NS ") = 0 OR ");
  buf_str(q, "(SELECT countIf(lease_id != ");
  buf_uuid(q, lease_id);
  buf_str(q, ") FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  buf_u64(q, term);
  buf_str(q, require_ours ? ") = 0" : ") = 0)");
}

/* A claim (acquired now, expiring after ttl_ns > 0) or a release tombstone (both at now + ttl_ns). */
static void q_claim_insert(ch_adapter *ch, const cs_uuid *lease_id, uint64_t term, uint64_t ttl_ns, bool tombstone) {
  ch_buf *q = &ch->query;
  buf_reset(q);
  buf_str(q, "INSERT INTO ");
  buf_str(q, ch->claims);
  buf_str(q, " (term, lease_id, holder, acquired_at_ns, expires_at_ns) SELECT ");
  buf_u64(q, term);
  buf_str(q, ", ");
  buf_uuid(q, lease_id);
  buf_str(q, ", ");
  bool ok = buf_quoted(q, ch->holder, strlen(ch->holder));
  assert(ok); /* checked at open */
  (void)ok;
  if (tombstone) {
    buf_str(q, ", " CH_NOW_NS " + ");
    buf_u64(q, ttl_ns);
    buf_str(q, ", " CH_NOW_NS " + ");
    buf_u64(q, ttl_ns);
  } else {
    buf_str(q, ", " CH_NOW_NS ", " CH_NOW_NS " + ");
    buf_u64(q, ttl_ns);
  }
  buf_str(q, " FROM system.one");
}

static int ch_claim(void *self, const cs_uuid *lease_id, uint64_t base_term, uint64_t ttl_ns,
                    cs_catalog_result *res) {
  ch_adapter *ch = self;
  if (base_term == UINT64_MAX || ttl_ns == 0 || ttl_ns > UINT64_MAX / 4) return CS_E_INVALID_ARGUMENT;
  q_claim_insert(ch, lease_id, base_term + 1, ttl_ns, false);
  q_head_is(ch, lease_id, base_term, false);
  ch_exec(ch, res);
  return CS_E_OK;
}

static int ch_release(void *self, const cs_uuid *lease_id, uint64_t term, uint64_t margin_ns, cs_catalog_result *res) {
  ch_adapter *ch = self;
  if (term == UINT64_MAX || margin_ns > UINT64_MAX / 4) return CS_E_INVALID_ARGUMENT;
  q_claim_insert(ch, lease_id, term + 1, margin_ns + CH_CLOCK_TICK_NS, true); /* others wait out the margin */
  q_head_is(ch, lease_id, term, true);
  ch_exec(ch, res);
  return CS_E_OK;
}

/* The fenced insert of a publish row (PUBLISH's, or at version 0 a replicated holding's barrier) into ch->query. */
static void q_publish_row(ch_adapter *ch, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version, uint64_t term,
                          uint32_t pack_count) {
  ch_buf *q = &ch->query;
  buf_reset(q);
  buf_str(q, "INSERT INTO ");
  buf_str(q, ch->publishes);
  buf_str(q, " (version, term, lease_id, pack_count, published_at_ns) SELECT ");
  buf_u64(q, version);
  buf_str(q, ", ");
  buf_u64(q, term);
  buf_str(q, ", ");
  buf_uuid(q, lease_id);
  buf_str(q, ", ");
  buf_u64(q, pack_count);
  buf_str(q, ", " CH_NOW_NS " FROM system.one");
  q_fence(ch, lease_id, margin_ns);
}

/*
 * A replicated catalog's new holding (docs/catalog-protocol.md, "Replicated
 * catalog"): a predecessor's quorum write that timed out (319) is not undone
 * and may land later, after this holder read the watermark before its claim.
 * So the holder first makes a fenced quorum write of its own into publishes,
 * a version-0 row (no version: it moves no watermark). ClickHouse admits one
 * pending quorum write per table, so it goes in only once every earlier one
 * has reached its quorum (286 until then: REFUSED, the claim is retried),
 * and the sequentially consistent read after it sees them all. The read
 * also says whether the barrier row went in (a fenced-out insert answers OK
 * and writes nothing); it fills out->watermark and out->index_floor. A
 * renewal (the next term of the lease whose barrier went in) needs none:
 * nobody held in between.
 */
static void ch_barrier(ch_adapter *ch, const cs_uuid *lease_id, uint64_t term, cs_claims *out,
                       cs_catalog_result *res) {
  if (ch->confirmed && cs_uuid_equal(&ch->confirmed_lease, lease_id) && ch->confirmed_term == term - 1) {
    ch->confirmed_term = term;
    return;
  }
  ch_buf *q = &ch->query;
  q_publish_row(ch, lease_id, 0, 0, term, 0);
  ch_exec(ch, res);
  if (res->outcome == CS_OUT_OK) { /* rejected rows too: a late one would hide a pack this holder publishes */
    buf_reset(q);
    buf_str(q, "INSERT INTO ");
    buf_str(q, ch->rejected);
    buf_str(q, " (pack_id, lease_id, reason, rejected_at_ns) SELECT '', ");
    buf_uuid(q, lease_id);
    buf_str(q, ", 'barrier', " CH_NOW_NS " FROM system.one");
    q_fence(ch, lease_id, 0);
    ch_exec(ch, res);
  }
  if (res->outcome == CS_OUT_OK) {
    buf_reset(q);
    buf_str(q, "SELECT (SELECT count() FROM ");
    buf_str(q, ch->publishes);
    buf_str(q, " WHERE version = 0 AND term = ");
    buf_u64(q, term);
    buf_str(q, " AND lease_id = ");
    buf_uuid(q, lease_id);
    buf_str(q, "), (SELECT max(version) FROM ");
    buf_str(q, ch->publishes);
    buf_str(q, "), (SELECT max(version) FROM ");
    buf_str(q, ch->inventory);
    buf_str(q, ") FORMAT TabSeparated");
    ch_exec(ch, res);
  }
  uint64_t v[3];
  if (res->outcome == CS_OUT_OK && !answer_u64_row(ch, v, 3)) answer_malformed(res, "barrier: malformed answer");
  if (res->outcome != CS_OUT_OK) {
    /* The claim holds, but what a predecessor left is unknown: not an answer the service may act on. */
    char detail[sizeof res->detail];
    snprintf(detail, sizeof detail, "replicated barrier: %.180s", res->detail);
    result_set(res, res->outcome, res->server_code, detail, strlen(detail));
    return;
  }
  if (v[0] == 0) { /* fenced out: the claim expired meanwhile */
    out->sole_mine = false;
    return;
  }
  out->watermark = v[1];
  out->index_floor = v[2];
  ch->confirmed_lease = *lease_id;
  ch->confirmed_term = term;
  ch->confirmed = true;
}

static int ch_read_claims(void *self, const cs_uuid *lease_id, uint64_t term, cs_claims *out,
                          cs_catalog_result *res) {
  ch_adapter *ch = self;
  ch_buf *q = &ch->query;
  memset(out, 0, sizeof *out);
  buf_reset(q);
  buf_str(q, "SELECT count(), countIf(lease_id = ");
  buf_uuid(q, lease_id);
  buf_str(q, " AND expires_at_ns > " CH_NOW_NS " AND expires_at_ns > acquired_at_ns) FROM ");
  buf_str(q, ch->claims);
  buf_str(q, " WHERE term = ");
  buf_u64(q, term);
  buf_str(q, " FORMAT TabSeparated");
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK) return CS_E_OK;
  uint64_t v[2];
  if (!answer_u64_row(ch, v, 2) || v[0] > UINT32_MAX || v[1] > v[0]) {
    answer_malformed(res, "read_claims: malformed answer");
    return CS_E_OK;
  }
  out->claim_count = (uint32_t)v[0];
  out->sole_mine = v[0] == 1 && v[1] == 1;
  if (out->sole_mine && ch->cluster[0] != '\0') ch_barrier(ch, lease_id, term, out, res);
  return CS_E_OK;
}

/* ---- writes: index, publish, reject -------------------------------------- */

/* INSERT INTO t (cols) SELECT x.1, ..., x.n FROM system.one ARRAY JOIN [ */
static void q_insert_array_head(ch_buf *q, const char *table, const char *columns, uint32_t column_count) {
  buf_str(q, "INSERT INTO ");
  buf_str(q, table);
  buf_str(q, " (");
  buf_str(q, columns);
  buf_str(q, ") SELECT ");
  for (uint32_t i = 1; i <= column_count; i++) {
    if (i > 1) buf_str(q, ", ");
    buf_str(q, "tupleElement(x, ");
    buf_u64(q, i);
    buf_str(q, ")");
  }
  buf_str(q, " FROM system.one ARRAY JOIN [");
}

static int index_validate(const cs_index_pack *packs, uint32_t pack_count) {
  if (packs == NULL || pack_count == 0) return CS_E_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < pack_count; i++) {
    const cs_pack_ref *ref = packs[i].ref;
    if (ref == NULL || ref->key_len >= CS_KEY_MAX || packs[i].record_count != ref->record_count ||
        (packs[i].record_count > 0 && packs[i].records == NULL))
      return CS_E_INVALID_ARGUMENT;
  }
  return CS_E_OK;
}

/* The batch's inventory rows, fenced: INSERT ... SELECT ... ARRAY JOIN [(row), ...] <fence>. False on a NUL in a key. */
static bool q_inventory(ch_adapter *ch, const cs_index_pack *packs, uint32_t pack_count, uint64_t version,
                        const cs_uuid *lease_id, uint64_t margin_ns) {
  ch_buf *q = &ch->query;
  buf_reset(q);
  q_insert_array_head(q, ch->inventory, "pack_id, key, size_bytes, sha256, record_count, created_at_ns, version", 7);
  for (uint32_t i = 0; i < pack_count; i++) {
    const cs_pack_ref *ref = packs[i].ref;
    char hex[65];
    for (int b = 0; b < 32; b++) snprintf(hex + 2 * b, 3, "%02x", ref->sha256[b]);
    buf_str(q, i > 0 ? ",(" : "(");
    buf_uuid(q, &ref->pack_id);
    buf_str(q, ",");
    if (!buf_quoted(q, ref->key, ref->key_len)) return false;
    buf_str(q, ",");
    buf_u64(q, ref->size_bytes);
    buf_str(q, ",'");
    buf_str(q, hex);
    buf_str(q, "',");
    buf_u64(q, ref->record_count);
    buf_str(q, ",");
    buf_u64(q, ref->created_at_ns);
    buf_str(q, ",");
    buf_u64(q, version);
    buf_str(q, ")");
  }
  buf_str(q, "] AS x");
  q_fence(ch, lease_id, margin_ns);
  /*
   * Late rows: only above the watermark and at or above every inventory row
   * (docs/catalog-protocol.md). 18.16 answers max() of an empty table as 0.
   */
  buf_str(q, " AND (SELECT max(version) FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, ") <= ");
  buf_u64(q, version);
  buf_str(q, " AND (SELECT max(version) FROM ");
  buf_str(q, ch->publishes);
  buf_str(q, ") < ");
  buf_u64(q, version);
  return true;
}

/*
 * INDEX is two requests: the descriptor rows in bulk (unfenced), then, only
 * if they answered OK, the fenced inventory statement. The inventory
 * statement is built and measured first, so a batch whose inventory rows
 * exceed query_bytes_max is TOO_LARGE before any row is sent; the rows
 * themselves are never too large. A refused value is INVALID, nothing sent.
 */
static int ch_index(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version,
                    const cs_index_pack *packs, uint32_t pack_count, cs_catalog_result *res) {
  ch_adapter *ch = self;
  int err = index_validate(packs, pack_count);
  if (err != CS_E_OK) return err;
  memset(res, 0, sizeof *res);
  if (!cs_catalog_index_keys_ok(packs, pack_count, res->detail, sizeof res->detail)) {
    res->outcome = CS_OUT_INVALID; /* catalog.h's key rule: nothing sent */
    return CS_E_OK;
  }
  if (!q_inventory(ch, packs, pack_count, version, lease_id, margin_ns))
    return refuse_content(res, "index: key holds a NUL byte"); /* never: the key rule ran first */
  if (query_too_large(ch, res)) return CS_E_OK;
  ch_rows rows = {.packs = packs, .pack_count = pack_count, .version = version, .stage = &ch->stage};
  uint64_t row_count = 0;
  if (!rows_measure(&rows, &row_count))
    return refuse_content(res, "index: a descriptor value is refused (absent text, bad dtype or rank)");
  if (row_count > 0) {
    ch_send_rows(ch, &rows, res);
    if (res->outcome != CS_OUT_OK) return CS_E_OK; /* the inventory must never exist without its descriptors */
  }
  ch_exec(ch, res);
  return CS_E_OK;
}

static int ch_publish(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version, uint64_t term,
                      uint32_t pack_count, cs_catalog_result *res) {
  ch_adapter *ch = self;
  if (version == 0) return CS_E_INVALID_ARGUMENT; /* version 0 is a replicated holding's barrier row */
  q_publish_row(ch, lease_id, margin_ns, version, term, pack_count);
  ch_exec(ch, res);
  return CS_E_OK;
}

/* [a,b] for ARRAY JOIN, or (a,b) for IN: 18.16 refuses an array on the right of IN. */
static void q_uuid_list(ch_buf *q, const cs_uuid *ids, uint32_t count, bool for_in) {
  buf_str(q, for_in ? "(" : "[");
  for (uint32_t i = 0; i < count; i++) {
    if (i > 0) buf_str(q, ",");
    buf_uuid(q, &ids[i]);
  }
  buf_str(q, for_in ? ")" : "]");
}

static int ch_reject(void *self, const cs_uuid *lease_id, uint64_t margin_ns, const cs_uuid *ids, uint32_t count,
                     cs_catalog_result *res) {
  ch_adapter *ch = self;
  ch_buf *q = &ch->query;
  if (ids == NULL || count == 0) return CS_E_INVALID_ARGUMENT;
  buf_reset(q);
  buf_str(q, "INSERT INTO ");
  buf_str(q, ch->rejected);
  buf_str(q, " (pack_id, lease_id, reason, rejected_at_ns) SELECT x, ");
  buf_uuid(q, lease_id);
  buf_str(q, ", 'set-aside', " CH_NOW_NS " FROM system.one ARRAY JOIN ");
  q_uuid_list(q, ids, count, false);
  buf_str(q, " AS x");
  q_fence(ch, lease_id, margin_ns);
  ch_exec(ch, res);
  return CS_E_OK;
}

/* ---- reads: committed, descriptors --------------------------------------- */

static bool parse_bool(const char *text, size_t len, bool *out) {
  if (text == NULL || len != 1 || (text[0] != '0' && text[0] != '1')) return false;
  *out = text[0] == '1';
  return true;
}

static int ch_committed(void *self, const cs_uuid *ids, uint32_t count, bool *held, bool *rejected,
                        cs_catalog_result *res) {
  ch_adapter *ch = self;
  ch_buf *q = &ch->query;
  if (ids == NULL || held == NULL || rejected == NULL || count == 0) return CS_E_INVALID_ARGUMENT;
  buf_reset(q);
  buf_str(q, "SELECT id, id IN (SELECT pack_id FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE version <= (SELECT max(version) FROM ");
  buf_str(q, ch->publishes);
  buf_str(q, ") AND pack_id IN ");
  q_uuid_list(q, ids, count, true);
  buf_str(q, "), id IN (SELECT pack_id FROM ");
  buf_str(q, ch->rejected);
  buf_str(q, " WHERE pack_id IN ");
  q_uuid_list(q, ids, count, true);
  buf_str(q, ") FROM system.one ARRAY JOIN ");
  q_uuid_list(q, ids, count, false);
  buf_str(q, " AS id FORMAT TabSeparated");
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK) return CS_E_OK;
  if (ch->answer.bytes == NULL) {
    answer_malformed(res, "committed: empty answer");
    return CS_E_OK;
  }
  cs_clickhouse_tsv tsv = {ch->answer.bytes, ch->answer.bytes + ch->answer.len};
  char *f[3];
  size_t len[3];
  for (uint32_t i = 0; i < count; i++) {
    cs_uuid id;
    if (cs_clickhouse_tsv_next(&tsv, f, len, 3) != 1 || f[0] == NULL || len[0] != CS_UUID_TEXT_LEN ||
        cs_uuid_parse(f[0], len[0], &id) != CS_E_OK || !cs_uuid_equal(&id, &ids[i]) ||
        !parse_bool(f[1], len[1], &held[i]) || !parse_bool(f[2], len[2], &rejected[i])) {
      answer_malformed(res, "committed: malformed answer");
      return CS_E_OK;
    }
  }
  if (cs_clickhouse_tsv_next(&tsv, f, len, 3) != 0) answer_malformed(res, "committed: extra rows");
  return CS_E_OK;
}

static int parse_i32(const char *text, int32_t *out) {
  if (text == NULL) return CS_E_PARSE;
  bool negative = text[0] == '-';
  uint64_t magnitude = 0;
  if (cs_clickhouse_parse_u64(text + (negative ? 1 : 0), &magnitude) != CS_E_OK) return CS_E_PARSE;
  if (negative ? magnitude > UINT64_C(2147483648) || magnitude == 0 : magnitude > INT32_MAX) return CS_E_PARSE;
  *out = negative ? (int32_t)(-(int64_t)magnitude) : (int32_t)magnitude;
  return CS_E_OK;
}

static int parse_u32(const char *text, uint32_t *out) {
  uint64_t value = 0;
  if (cs_clickhouse_parse_u64(text, &value) != CS_E_OK || value > UINT32_MAX) return CS_E_PARSE;
  *out = (uint32_t)value;
  return CS_E_OK;
}

/* "[1,2,3]" into shape; "[]" is rank 0. */
static int parse_shape(char *text, uint32_t *shape, uint32_t *rank) {
  size_t n = text == NULL ? 0 : strlen(text);
  if (n < 2 || text[0] != '[' || text[n - 1] != ']') return CS_E_PARSE;
  text[n - 1] = '\0';
  *rank = 0;
  if (n == 2) return CS_E_OK;
  char *p = text + 1;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma != NULL) *comma = '\0';
    if (*rank >= CS_PACK_RANK_MAX || parse_u32(p, &shape[*rank]) != CS_E_OK) return CS_E_PARSE;
    (*rank)++;
    if (comma == NULL) return CS_E_OK;
    p = comma + 1;
  }
}

static cs_pack_text text_of(const char *field, size_t len) {
  cs_pack_text t = {field, len};
  return t;
}

int cs_clickhouse_descriptor_row(char **f, const size_t *len, cs_descriptor_row *row) {
  memset(row, 0, sizeof *row);
  cs_pack_meta *m = &row->record.meta;
  for (uint32_t i = 0; i < CS_CATALOG_DESCRIPTOR_COLUMN_COUNT; i++)
    if ((i < 2 || i >= 14) && !field_plain(f[i], len[i])) return CS_E_PARSE; /* only the twelve texts hold NUL */
  if (len[0] != CS_UUID_TEXT_LEN || cs_uuid_parse(f[0], len[0], &row->pack_id) != CS_E_OK) return CS_E_PARSE;
  if (len[1] >= CS_KEY_MAX) return CS_E_PARSE;
  memcpy(row->key, f[1], len[1] + 1);
  cs_pack_text *texts[12] = {&m->capture_id, &m->tenant_id, &m->experiment_id, &m->run_id,
                             &m->session_id, &m->request_id, &m->sequence_id, &m->model_id,
                             &m->model_revision, &m->adapter_revision, &m->capture_policy_version, &m->hook_name};
  for (int i = 0; i < 12; i++) {
    if (f[2 + i] == NULL && i != 9) return CS_E_PARSE;
    *texts[i] = text_of(f[2 + i], len[2 + i]);
  }
  uint64_t step = 0, start = 0, end = 0, captured = 0, offset = 0, stored = 0, decoded = 0, version = 0;
  if (parse_i32(f[14], &m->layer_number) != CS_E_OK || parse_u32(f[15], &m->producer_rank) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[16], &step) != CS_E_OK || cs_clickhouse_parse_u64(f[17], &start) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[18], &end) != CS_E_OK || parse_u32(f[19], &m->batch_position) != CS_E_OK ||
      f[20] == NULL || cs_dtype_parse(f[20], len[20], &m->dtype) != CS_E_OK ||
      parse_shape(f[21], m->shape, &m->rank) != CS_E_OK || cs_clickhouse_parse_u64(f[22], &captured) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[23], &offset) != CS_E_OK || cs_clickhouse_parse_u64(f[24], &stored) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[25], &decoded) != CS_E_OK || parse_u32(f[26], &row->record.crc32) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[27], &version) != CS_E_OK)
    return CS_E_PARSE;
  m->step_number = step;
  m->token_start = start;
  m->token_end = end;
  m->captured_at_ns = captured;
  row->record.offset = offset;
  row->record.stored_length = stored;
  row->record.decoded_length = decoded;
  row->version = version;
  return CS_E_OK;
}

static int ch_read_descriptors(void *self, uint64_t watermark, const cs_uuid *pack_id, cs_descriptor_row *rows,
                               uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  ch_adapter *ch = self;
  ch_buf *q = &ch->query;
  if (pack_id == NULL || count == NULL || (rows == NULL && capacity > 0)) return CS_E_INVALID_ARGUMENT;
  *count = 0;
  buf_reset(q);
  buf_str(q, "SELECT ");
  buf_str(q, CS_CATALOG_DESCRIPTOR_COLUMNS);
  buf_str(q, " FROM (SELECT * FROM ");
  buf_str(q, ch->descriptors);
  buf_str(q, " WHERE pack_id = ");
  buf_uuid(q, pack_id);
  buf_str(q, " AND version <= ");
  buf_u64(q, watermark);
  buf_str(q, " AND (pack_id, version) IN (SELECT pack_id, version FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE pack_id = ");
  buf_uuid(q, pack_id);
  buf_str(q, ") ORDER BY capture_id, version DESC LIMIT 1 BY capture_id) ORDER BY offset FORMAT TabSeparated");
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK) return CS_E_OK;
  if (ch->answer.len == 0) return CS_E_OK;
  cs_clickhouse_tsv tsv = {ch->answer.bytes, ch->answer.bytes + ch->answer.len};
  char *f[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  size_t len[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  for (;;) {
    int got = cs_clickhouse_tsv_next(&tsv, f, len, CS_CATALOG_DESCRIPTOR_COLUMN_COUNT);
    if (got == 0) return CS_E_OK;
    if (got < 0) break;
    if (*count == capacity) return CS_E_NO_MEMORY;
    if (cs_clickhouse_descriptor_row(f, len, &rows[*count]) != CS_E_OK ||
        !cs_uuid_equal(&rows[*count].pack_id, pack_id))
      break;
    (*count)++;
  }
  *count = 0;
  answer_malformed(res, "read_descriptors: malformed answer");
  return CS_E_OK;
}

int cs_clickhouse_inventory_row(char **f, const size_t *len, cs_inventory_row *row) {
  memset(row, 0, sizeof *row);
  for (uint32_t i = 0; i < CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT; i++)
    if (!field_plain(f[i], len[i])) return CS_E_PARSE;
  cs_pack_ref *ref = &row->ref;
  if (len[0] != CS_UUID_TEXT_LEN || cs_uuid_parse(f[0], len[0], &ref->pack_id) != CS_E_OK) return CS_E_PARSE;
  if (cs_pack_ref_set_key(ref, f[1], len[1]) != CS_E_OK) return CS_E_PARSE;
  if (len[3] != 64 || cs_hex_decode(f[3], 64, CS_HEX_LOWER, ref->sha256) != CS_E_OK) return CS_E_PARSE;
  if (cs_clickhouse_parse_u64(f[2], &ref->size_bytes) != CS_E_OK || parse_u32(f[4], &ref->record_count) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[5], &ref->created_at_ns) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[6], &row->version) != CS_E_OK)
    return CS_E_PARSE;
  return CS_E_OK;
}

static int ch_list_packs(void *self, uint64_t watermark, const cs_uuid *after, cs_inventory_row *rows,
                         uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  ch_adapter *ch = self;
  ch_buf *q = &ch->query;
  if (count == NULL || res == NULL || (rows == NULL && capacity > 0)) return CS_E_INVALID_ARGUMENT;
  *count = 0;
  if (capacity == 0) { /* nothing to ask for: answered here, as SQLite's LIMIT 0 answers, without a statement */
    res->outcome = CS_OUT_OK;
    res->server_code = 0;
    res->detail[0] = '\0';
    return CS_E_OK;
  }
  /* pack_id is canonical lowercase UUID text: its string order is the bytes' order. */
  buf_reset(q);
  buf_str(q, "SELECT pack_id, argMax(key, version), argMax(size_bytes, version), argMax(sha256, version),"
             " argMax(record_count, version), argMax(created_at_ns, version), max(version) FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE version <= ");
  buf_u64(q, watermark);
  if (after != NULL) {
    buf_str(q, " AND pack_id > ");
    buf_uuid(q, after);
  }
  buf_str(q, " GROUP BY pack_id ORDER BY pack_id LIMIT ");
  buf_u64(q, capacity);
  buf_str(q, " FORMAT TabSeparated");
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK || ch->answer.len == 0) return CS_E_OK;
  cs_clickhouse_tsv tsv = {ch->answer.bytes, ch->answer.bytes + ch->answer.len};
  char *f[CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT];
  size_t len[CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT];
  for (;;) {
    int got = cs_clickhouse_tsv_next(&tsv, f, len, CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT);
    if (got == 0) return CS_E_OK;
    if (got < 0 || *count == capacity || cs_clickhouse_inventory_row(f, len, &rows[*count]) != CS_E_OK ||
        rows[*count].version > watermark ||
        (after != NULL && cs_uuid_compare(&rows[*count].ref.pack_id, after) <= 0) ||
        (*count > 0 && cs_uuid_compare(&rows[*count].ref.pack_id, &rows[*count - 1].ref.pack_id) <= 0))
      break;
    (*count)++;
  }
  *count = 0;
  answer_malformed(res, "list_packs: malformed answer");
  return CS_E_OK;
}

/* ---- search ----------------------------------------------------------------- */

/*
 * A string literal of any bytes: control bytes (NUL included), DEL, the
 * backslash and the quote as \xHH, which the SQL parser reads back byte for
 * byte. Record texts may hold U+0000 (docs/format.md), so search values and
 * the keyset's capture id travel this way; an object key never does.
 */
static void buf_text(ch_buf *b, const char *text, size_t len) {
  static const char hex[] = "0123456789abcdef";
  buf_put(b, "'", 1);
  size_t start = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c >= 0x20 && c != 0x7f && c != '\\' && c != '\'') continue;
    buf_put(b, text + start, i - start);
    char escape[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
    buf_put(b, escape, sizeof escape);
    start = i + 1;
  }
  buf_put(b, text + start, len - start);
  buf_put(b, "'", 1);
}

static void buf_i64(ch_buf *b, int64_t value) {
  char text[24];
  int n = snprintf(text, sizeof text, "%lld", (long long)value);
  assert(n > 0 && (size_t)n < sizeof text);
  buf_put(b, text, (size_t)n);
}

/* Above every pack id (canonical UUID text is [0-9a-f-]): a cut that bounds nothing. */
#define CH_PAST_IDS "'\\xFF'"

typedef struct ch_search_q {
  const cs_search_filter *filter;
  const cs_search_key *after;
  uint64_t watermark;
  uint32_t capacity;
  bool unfiltered; /* the filter selects every row: the inventory's record counts bound a page */
} ch_search_q;

static bool search_filter_empty(const cs_search_filter *f) {
  const cs_pack_text *texts[8] = {&f->tenant_id,  &f->experiment_id, &f->run_id,   &f->session_id,
                                  &f->request_id, &f->sequence_id,   &f->model_id, &f->model_revision};
  for (int i = 0; i < 8; i++)
    if (texts[i]->bytes != NULL) return false;
  return f->hook_name_count == 0 && f->capture_id_count == 0 && !f->has_layer && !f->has_step && !f->has_tokens &&
         !f->has_captured_at && !f->has_dtype;
}

static void q_and(ch_buf *q, bool *first) {
  if (!*first) buf_str(q, " AND ");
  *first = false;
}

static void q_text_in(ch_buf *q, const char *column, const cs_pack_text *values, uint32_t count) {
  buf_str(q, column);
  buf_str(q, " IN (");
  for (uint32_t i = 0; i < count; i++) {
    if (i > 0) buf_str(q, ", ");
    buf_text(q, values[i].bytes, values[i].len);
  }
  buf_str(q, ")");
}

static void q_range_u64(ch_buf *q, const char *column, uint64_t min, uint64_t max) {
  buf_str(q, column);
  buf_str(q, " >= ");
  buf_u64(q, min);
  buf_str(q, " AND ");
  buf_str(q, column);
  buf_str(q, " <= ");
  buf_u64(q, max);
}

/* The filter as one parenthesized condition; (1) selects every row. */
static void q_search_filter(ch_buf *q, const cs_search_filter *f) {
  static const char *const columns[8] = {"tenant_id",  "experiment_id", "run_id",   "session_id",
                                         "request_id", "sequence_id",   "model_id", "model_revision"};
  const cs_pack_text *texts[8] = {&f->tenant_id,  &f->experiment_id, &f->run_id,   &f->session_id,
                                  &f->request_id, &f->sequence_id,   &f->model_id, &f->model_revision};
  bool first = true;
  buf_str(q, "(");
  for (int i = 0; i < 8; i++) {
    if (texts[i]->bytes == NULL) continue;
    q_and(q, &first);
    buf_str(q, columns[i]);
    buf_str(q, " = ");
    buf_text(q, texts[i]->bytes, texts[i]->len);
  }
  if (f->hook_name_count > 0) {
    q_and(q, &first);
    q_text_in(q, "hook_name", f->hook_names, f->hook_name_count);
  }
  if (f->capture_id_count > 0) {
    q_and(q, &first);
    q_text_in(q, "capture_id", f->capture_ids, f->capture_id_count);
  }
  if (f->has_layer) {
    q_and(q, &first);
    buf_str(q, "layer_number >= ");
    buf_i64(q, f->layer_min);
    buf_str(q, " AND layer_number <= ");
    buf_i64(q, f->layer_max);
  }
  if (f->has_step) {
    q_and(q, &first);
    q_range_u64(q, "step_number", f->step_min, f->step_max);
  }
  if (f->has_tokens) { /* [token_start, token_end) meets [token_min, token_max) */
    q_and(q, &first);
    buf_str(q, "token_start < ");
    buf_u64(q, f->token_max);
    buf_str(q, " AND token_end > ");
    buf_u64(q, f->token_min);
  }
  if (f->has_captured_at) {
    q_and(q, &first);
    q_range_u64(q, "captured_at_ns", f->captured_min_ns, f->captured_max_ns);
  }
  if (f->has_dtype) {
    q_and(q, &first);
    const char *name = cs_dtype_name(f->dtype);
    buf_str(q, "dtype = ");
    buf_text(q, name, strlen(name));
  }
  buf_str(q, first ? "1)" : ")");
}

/* After the key in (pack id, offset, capture id) order, spelled out (no tuple comparison). */
static void q_search_keyset(ch_buf *q, const cs_search_key *after) {
  if (after == NULL) {
    buf_str(q, "1");
    return;
  }
  buf_str(q, "(pack_id > ");
  buf_uuid(q, &after->pack_id);
  buf_str(q, " OR (pack_id = ");
  buf_uuid(q, &after->pack_id);
  buf_str(q, " AND (offset > ");
  buf_u64(q, after->offset);
  buf_str(q, " OR (offset = ");
  buf_u64(q, after->offset);
  buf_str(q, " AND capture_id > ");
  buf_text(q, after->capture_id, after->capture_id_len);
  buf_str(q, "))))");
}

/* "pack_id >= 'A' AND " (or > when strict), nothing without a key: the primary key's range starts there. */
static void q_from_pack(ch_buf *q, const ch_search_q *s, bool strict) {
  if (s->after == NULL) return;
  buf_str(q, strict ? "pack_id > " : "pack_id >= ");
  buf_uuid(q, &s->after->pack_id);
  buf_str(q, " AND ");
}

static void q_visible_version(ch_buf *q, const ch_search_q *s) {
  buf_str(q, "version <= ");
  buf_u64(q, s->watermark);
}

static void q_not_rejected(ch_adapter *ch) {
  buf_str(&ch->query, "pack_id NOT IN (SELECT pack_id FROM ");
  buf_str(&ch->query, ch->rejected);
  buf_str(&ch->query, ")");
}

/*
 * Running counts per pack: "(SELECT <expr> FROM (SELECT ids, c FROM (<rows
 * of pack_id, n>)))" where ids are the pack ids in order and c[i] the sum of
 * n over ids[1..i]. q_running_open writes from " FROM" to the inner rows.
 */
static void q_running_open(ch_buf *q) {
  buf_str(q, " FROM (SELECT arraySort(groupArray(pack_id)) AS ids,"
             " arrayCumSum(arraySort((cs_n, cs_p) -> cs_p, groupArray(n), groupArray(pack_id))) AS c FROM (");
}

/* The first pack id whose running count reaches the page, or past every id. */
static void q_first_reaching(ch_buf *q, const ch_search_q *s) {
  buf_str(q, "if(c[-1] >= ");
  buf_u64(q, s->capacity);
  buf_str(q, ", ids[arrayFirstIndex(cs_s -> cs_s >= ");
  buf_u64(q, s->capacity);
  buf_str(q, ", c)], " CH_PAST_IDS ")");
}

/*
 * Where a page without a filter ends by the inventory: the first pack after
 * the key by which the record counts of the visible packs (each at its
 * highest visible version) reach the page. Past every id with a filter.
 */
static void q_bound(ch_adapter *ch, const ch_search_q *s) {
  ch_buf *q = &ch->query;
  if (!s->unfiltered) {
    buf_str(q, CH_PAST_IDS);
    return;
  }
  buf_str(q, "(SELECT ");
  q_first_reaching(q, s);
  q_running_open(q);
  buf_str(q, "SELECT pack_id, argMax(record_count, version) AS n FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE ");
  q_from_pack(q, s, true);
  q_visible_version(q, s);
  buf_str(q, " AND ");
  q_not_rejected(ch);
  buf_str(q, " GROUP BY pack_id)))");
}

/*
 * Where the page ends, from the descriptors: per pack after the key, the
 * captures of its rows at its highest visible version that the filter
 * selects. Each of them is a row of the answer (that version is its
 * highest), so the first pack by which they reach the page bounds it. Under
 * the bound: there the inventory promised as many; if the rows hold fewer
 * (a catalog whose rows disagree with its inventory), throwIf fails the
 * statement rather than answer a short page (Code: 395).
 */
static void q_cut(ch_adapter *ch, const ch_search_q *s) {
  ch_buf *q = &ch->query;
  buf_str(q, "(SELECT concat(");
  q_first_reaching(q, s);
  buf_str(q, ", substring(toString(throwIf(c[-1] < ");
  buf_u64(q, s->capacity);
  buf_str(q, " AND ");
  q_bound(ch, s);
  buf_str(q, " != " CH_PAST_IDS ")), 1, 0))");
  q_running_open(q);
  buf_str(q, "SELECT pack_id, uniqExact(capture_id) AS n FROM ");
  buf_str(q, ch->descriptors);
  buf_str(q, " PREWHERE ");
  q_from_pack(q, s, true);
  buf_str(q, "pack_id <= ");
  q_bound(ch, s);
  buf_str(q, " AND ");
  q_visible_version(q, s);
  buf_str(q, " AND ");
  q_search_filter(q, s->filter);
  buf_str(q, " WHERE (pack_id, version) IN (SELECT pack_id, max(version) FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE ");
  q_from_pack(q, s, true);
  q_visible_version(q, s);
  buf_str(q, " AND ");
  q_not_rejected(ch);
  buf_str(q, " GROUP BY pack_id) GROUP BY pack_id)))");
}

/*
 * Per visible (pack, version) from the key to the bound: the inventory's
 * size and sha256, the end of the pack's last record there, whether it is
 * the pack's highest visible version (cs_top) and, where it is not (a pack
 * indexed at several versions), the captures whose highest visible version
 * it is (cs_keep).
 */
static void q_search_packs(ch_adapter *ch, const ch_search_q *s) {
  ch_buf *q = &ch->query;
  buf_str(q, "SELECT pack_id, version, size_bytes, sha256, cs_end, cs_top, cs_keep FROM (SELECT pack_id, version,"
             " max(offset + stored_length) AS cs_end FROM ");
  buf_str(q, ch->descriptors);
  buf_str(q, " PREWHERE ");
  q_from_pack(q, s, false);
  buf_str(q, "pack_id <= ");
  q_bound(ch, s);
  buf_str(q, " AND ");
  q_visible_version(q, s);
  buf_str(q, " GROUP BY pack_id, version) ANY INNER JOIN (SELECT pack_id, version, size_bytes, sha256, cs_top,"
             " if(cs_top, emptyArrayString(), cs_ids) AS cs_keep FROM (SELECT pack_id, t.1 AS version, t.2 AS size_bytes,"
             " t.3 AS sha256, t.1 = cs_vmax AS cs_top FROM (SELECT pack_id, max(version) AS cs_vmax,"
             " groupArray((version, size_bytes, sha256)) AS vs FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE ");
  q_from_pack(q, s, false);
  q_visible_version(q, s);
  buf_str(q, " AND ");
  q_not_rejected(ch);
  buf_str(q, " GROUP BY pack_id) ARRAY JOIN vs AS t) ANY LEFT JOIN (SELECT pack_id, cs_v AS version,"
             " groupArray(capture_id) AS cs_ids FROM (SELECT pack_id, capture_id, max(version) AS cs_v FROM ");
  buf_str(q, ch->descriptors);
  buf_str(q, " PREWHERE ");
  q_from_pack(q, s, false);
  buf_str(q, "pack_id <= ");
  q_bound(ch, s);
  buf_str(q, " AND ");
  q_visible_version(q, s);
  buf_str(q, " AND pack_id IN (SELECT pack_id FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE ");
  q_from_pack(q, s, false);
  q_visible_version(q, s);
  buf_str(q, " GROUP BY pack_id HAVING uniqExact(version) > 1) WHERE (pack_id, version) IN (SELECT pack_id, version FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE ");
  q_from_pack(q, s, false);
  q_visible_version(q, s);
  buf_str(q, ") GROUP BY pack_id, capture_id) GROUP BY pack_id, cs_v) USING (pack_id, version)) USING (pack_id, version)");
}

/*
 * SEARCH as one statement (docs/clickhouse.md, "SEARCH"). The descriptor
 * rows from the key to the cut, read through PREWHERE (the filter and the
 * keyset first, the other columns only for the rows they select), joined to
 * their visible (pack, version) (no inventory row, a rejected pack or a
 * version over the watermark: no row), kept at their capture's highest
 * visible version, one per capture, in (pack id, offset, capture id)
 * order. The cut is a scalar of the outermost query, which 18.16 computes
 * once (a scalar in a subquery is computed for every analysis of it).
 */
static void q_search(ch_adapter *ch, const ch_search_q *s) {
  ch_buf *q = &ch->query;
  buf_reset(q);
  buf_str(q, "SELECT " CS_CATALOG_DESCRIPTOR_COLUMNS ", size_bytes, sha256, cs_end FROM ");
  buf_str(q, ch->descriptors);
  buf_str(q, " ANY INNER JOIN (");
  q_search_packs(ch, s);
  buf_str(q, ") USING (pack_id, version) PREWHERE ");
  q_from_pack(q, s, false);
  buf_str(q, "pack_id <= ");
  q_cut(ch, s);
  buf_str(q, " AND ");
  q_visible_version(q, s);
  buf_str(q, " AND ");
  q_search_filter(q, s->filter);
  buf_str(q, " AND ");
  q_search_keyset(q, s->after);
  buf_str(q, " WHERE cs_top OR has(cs_keep, capture_id) ORDER BY pack_id, offset, capture_id"
             " LIMIT 1 BY pack_id, capture_id LIMIT ");
  buf_u64(q, s->capacity);
  buf_str(q, " FORMAT TabSeparated");
}

int cs_clickhouse_search_row(char **f, const size_t *len, cs_search_row *row) {
  memset(row, 0, sizeof *row);
  if (cs_clickhouse_descriptor_row(f, len, &row->d) != CS_E_OK) return CS_E_PARSE;
  const uint32_t at = CS_CATALOG_DESCRIPTOR_COLUMN_COUNT;
  for (uint32_t i = at; i < CS_CLICKHOUSE_SEARCH_COLUMN_COUNT; i++)
    if (!field_plain(f[i], len[i])) return CS_E_PARSE;
  uint64_t end = 0;
  if (cs_clickhouse_parse_u64(f[at], &row->pack_size_bytes) != CS_E_OK || len[at + 1] != 64 ||
      cs_hex_decode(f[at + 1], 64, CS_HEX_LOWER, row->pack_sha256) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[at + 2], &end) != CS_E_OK || end > UINT64_MAX - 63)
    return CS_E_PARSE;
  row->footer_offset = end <= 64 ? 64 : (end + 63) / 64 * 64;
  return CS_E_OK;
}

/* row's position against (pack id, offset, capture id): <0, 0, >0. */
static int search_position_cmp(const cs_search_row *row, const cs_uuid *pack_id, uint64_t offset, const char *id,
                               size_t id_len) {
  int c = cs_uuid_compare(&row->d.pack_id, pack_id);
  if (c != 0) return c;
  if (row->d.record.offset != offset) return row->d.record.offset < offset ? -1 : 1;
  const cs_pack_text *own = &row->d.record.meta.capture_id;
  size_t n = own->len < id_len ? own->len : id_len;
  c = n == 0 ? 0 : memcmp(own->bytes, id, n);
  return c != 0 ? c : (own->len > id_len) - (own->len < id_len);
}

/* A row the statement could not have answered: over the watermark, or not after the key or the row before. */
static bool search_row_out_of_place(const cs_search_row *rows, uint32_t i, uint64_t watermark,
                                    const cs_search_key *after) {
  if (rows[i].d.version > watermark) return true;
  if (i > 0) {
    const cs_search_row *prev = &rows[i - 1];
    const cs_pack_text *id = &prev->d.record.meta.capture_id;
    return search_position_cmp(&rows[i], &prev->d.pack_id, prev->d.record.offset, id->bytes, id->len) <= 0;
  }
  return after != NULL &&
         search_position_cmp(&rows[i], &after->pack_id, after->offset, after->capture_id, after->capture_id_len) <= 0;
}

/*
 * SEARCH (catalog.h): the statement of q_search, its rows read by
 * cs_clickhouse_search_row and held to the order (strictly after the key
 * and each other, at or below the watermark, no more than capacity), text
 * in the answer buffer until the next call.
 */
static int ch_search(void *self, uint64_t watermark, const cs_search_filter *filter, const cs_search_key *after,
                     cs_search_row *rows, uint32_t capacity, uint32_t *count, cs_catalog_result *res) {
  ch_adapter *ch = self;
  if (count == NULL || res == NULL || (rows == NULL && capacity > 0) ||
      cs_search_filter_check(filter, NULL, 0) != CS_E_OK ||
      (after != NULL && after->capture_id_len > CS_SEARCH_KEY_ID_MAX))
    return CS_E_INVALID_ARGUMENT;
  *count = 0;
  if (capacity == 0) { /* nothing to ask for: answered here, as list_packs does */
    memset(res, 0, sizeof *res);
    res->outcome = CS_OUT_OK;
    return CS_E_OK;
  }
  ch_search_q s = {.filter = filter, .after = after, .watermark = watermark, .capacity = capacity,
                 .unfiltered = search_filter_empty(filter)};
  q_search(ch, &s);
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK) {
    if (res->server_code == 395) { /* throwIf: the descriptor rows hold fewer captures than the inventory counts */
      static const char what[] = "search: the catalog's descriptor rows hold fewer captures than its inventory rows"
                                 " count (Code: 395, throwIf)";
      result_set(res, CS_OUT_SERVER_ERROR, 395, what, sizeof what - 1);
    }
    return CS_E_OK;
  }
  if (ch->answer.len == 0) return CS_E_OK;
  cs_clickhouse_tsv tsv = {ch->answer.bytes, ch->answer.bytes + ch->answer.len};
  char *f[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  size_t len[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  for (;;) {
    int got = cs_clickhouse_tsv_next(&tsv, f, len, CS_CLICKHOUSE_SEARCH_COLUMN_COUNT);
    if (got == 0) return CS_E_OK;
    if (got < 0 || *count == capacity || cs_clickhouse_search_row(f, len, &rows[*count]) != CS_E_OK ||
        search_row_out_of_place(rows, *count, watermark, after))
      break;
    (*count)++;
  }
  *count = 0;
  answer_malformed(res, "search: malformed answer");
  return CS_E_OK;
}

/* ---- capture arrays -------------------------------------------------------- */

int cs_clickhouse_array_candidate_row(char **f, const size_t *len, cs_array_candidate *out) {
  memset(out, 0, sizeof *out);
  for (uint32_t i = 0; i < CS_CLICKHOUSE_ARRAY_COLUMN_COUNT; i++)
    if ((i < 2 || (i > 3 && i < 10)) && !field_plain(f[i], len[i]))
      return CS_E_PARSE; /* only the nonce, the capture id and the geometry hash are free text */
  if (f[2] == NULL || f[3] == NULL || f[10] == NULL) return CS_E_PARSE;
  if (len[0] != 1 || (f[0][0] != '0' && f[0][0] != '1')) return CS_E_PARSE;
  out->geometry = f[0][0] == '1';
  out->nonce = text_of(f[2], len[2]);
  out->capture_id = text_of(f[3], len[3]);
  out->geometry_hash = text_of(f[10], len[10]);
  if (len[4] != CS_UUID_TEXT_LEN || cs_uuid_parse(f[4], len[4], &out->pack_id) != CS_E_OK) return CS_E_PARSE;
  if (len[5] >= CS_KEY_MAX) return CS_E_PARSE;
  memcpy(out->key, f[5], len[5] + 1);
  if (cs_clickhouse_parse_u64(f[1], &out->slot) != CS_E_OK || cs_clickhouse_parse_u64(f[6], &out->offset) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[7], &out->stored_length) != CS_E_OK || parse_u32(f[8], &out->crc32) != CS_E_OK ||
      cs_clickhouse_parse_u64(f[9], &out->first_version) != CS_E_OK)
    return CS_E_PARSE;
  return CS_E_OK;
}

static int ch_array_candidates(void *self, uint64_t watermark, const cs_pack_text *array_id,
                               const cs_array_window *window, cs_array_candidate_fn emit, void *ctx,
                               cs_catalog_result *res) {
  ch_adapter *ch = self;
  ch_buf *q = &ch->query;
  if (array_id == NULL || array_id->bytes == NULL || array_id->len == 0 || emit == NULL || res == NULL)
    return CS_E_INVALID_ARGUMENT;
  /* Each (pack, capture) at its lowest visible version; the order makes each slot's first row its winner. */
  buf_reset(q);
  buf_str(q, "SELECT hook_name = '" CS_ARRAY_HOOK_GEOMETRY "' AS g, step_number, request_id, capture_id, pack_id, key,"
             " offset, stored_length, crc32, min(version) AS v, sequence_id FROM ");
  buf_str(q, ch->descriptors);
  buf_str(q, " WHERE run_id = ");
  buf_text(q, array_id->bytes, array_id->len);
  uint64_t from = window != NULL ? window->slot_from : 0, to = window != NULL ? window->slot_to : UINT64_MAX;
  buf_str(q, " AND (");
  buf_str(q, window == NULL || window->with_geometry ? "hook_name = '" CS_ARRAY_HOOK_GEOMETRY "' OR " : "");
  buf_str(q, "(hook_name = '" CS_ARRAY_HOOK_CHUNK "' AND step_number >= ");
  buf_u64(q, from);
  buf_str(q, " AND step_number < ");
  buf_u64(q, to);
  buf_str(q, ")) AND version <= ");
  buf_u64(q, watermark);
  buf_str(q, " AND (pack_id, version) IN (SELECT pack_id, version FROM ");
  buf_str(q, ch->inventory);
  buf_str(q, " WHERE version <= ");
  buf_u64(q, watermark);
  buf_str(q, ") AND ");
  q_not_rejected(ch);
  buf_str(q, " GROUP BY pack_id, capture_id, g, step_number, request_id, key, offset, stored_length, crc32, sequence_id"
             " ORDER BY g DESC, step_number, v, pack_id, capture_id FORMAT TabSeparated");
  ch_exec(ch, res);
  if (res->outcome != CS_OUT_OK || ch->answer.len == 0) return CS_E_OK;
  cs_clickhouse_tsv tsv = {ch->answer.bytes, ch->answer.bytes + ch->answer.len};
  char *f[CS_CLICKHOUSE_ARRAY_COLUMN_COUNT];
  size_t len[CS_CLICKHOUSE_ARRAY_COLUMN_COUNT];
  for (;;) {
    int got = cs_clickhouse_tsv_next(&tsv, f, len, CS_CLICKHOUSE_ARRAY_COLUMN_COUNT);
    if (got == 0) return CS_E_OK;
    cs_array_candidate a;
    if (got < 0 || cs_clickhouse_array_candidate_row(f, len, &a) != CS_E_OK || a.first_version > watermark) break;
    int stop = emit(ctx, &a);
    if (stop != 0) return stop;
  }
  answer_malformed(res, "array_candidates: malformed answer");
  return CS_E_OK;
}

/* ---- open and close ------------------------------------------------------ */

static void ch_close(void *self) {
  ch_adapter *ch = self;
  if (ch == NULL) return;
  if (ch->curl != NULL) curl_easy_cleanup(ch->curl);
  curl_slist_free_all(ch->headers);
  free(ch->insert_url);
  free(ch->query.bytes);
  free(ch->answer.bytes);
  free(ch->stage.bytes);
  free(ch);
}

static const cs_catalog_ops CH_OPS = {
    .name = "clickhouse",
    .schema_ensure = ch_schema_ensure,
    .schema_check = ch_schema_check,
    .head = ch_head,
    .claim = ch_claim,
    .read_claims = ch_read_claims,
    .release = ch_release,
    .index = ch_index,
    .publish = ch_publish,
    .reject = ch_reject,
    .committed = ch_committed,
    .read_descriptors = ch_read_descriptors,
    .list_packs = ch_list_packs,
    .search = ch_search,
    .array_candidates = ch_array_candidates,
    .close = ch_close,
};

static bool header_safe(const char *text) { return text != NULL && strpbrk(text, "\r\n") == NULL; }

static int ch_headers(ch_adapter *ch, const cs_clickhouse_config *cfg) {
  char line[512];
  const char *user = cfg->user == NULL ? "default" : cfg->user;
  const char *key = cfg->password == NULL ? "" : cfg->password;
  if (!header_safe(user) || !header_safe(key)) return CS_E_CONFIG;
  const char *lines[4] = {"X-ClickHouse-User: ", "X-ClickHouse-Key: ", "Content-Type: text/plain", "Expect:"};
  const char *values[4] = {user, key, "", ""};
  for (int i = 0; i < 4; i++) {
    int n = snprintf(line, sizeof line, "%s%s", lines[i], values[i]);
    if (n < 0 || (size_t)n >= sizeof line) return CS_E_CONFIG;
    struct curl_slist *next = curl_slist_append(ch->headers, line);
    if (next == NULL) return CS_E_NO_MEMORY;
    ch->headers = next;
  }
  return CS_E_OK;
}

/* The replicated mode's settings (cs_clickhouse_config.cluster): named, a quorum, its timeout below the request's. */
static int cluster_validate(const cs_clickhouse_config *cfg, char *msg, size_t msg_size) {
  const char *why = NULL;
  uint64_t request = cfg->request_timeout_ns == 0 ? 30 * CS_SEC_NS : cfg->request_timeout_ns;
  if (cfg->cluster == NULL) {
    if (cfg->insert_quorum != 0 || cfg->insert_quorum_timeout_ns != 0)
      why = "catalog.clickhouse.insert_quorum is for a replicated catalog: set catalog.clickhouse.cluster too";
  } else if (cfg->cluster[0] == '\0' || strlen(cfg->cluster) > CH_CLUSTER_MAX ||
             strspn(cfg->cluster, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") !=
                 strlen(cfg->cluster)) {
    why = "catalog.clickhouse.cluster must be 1..64 of A-Z a-z 0-9 _ . -";
  } else if (cfg->insert_quorum == 0) {
    why = "catalog.clickhouse.insert_quorum must be set with catalog.clickhouse.cluster (all its replicas)";
  } else if (cfg->insert_quorum_timeout_ns != 0 &&
             (cfg->insert_quorum_timeout_ns >= request || cfg->insert_quorum_timeout_ns < CS_MS_NS)) {
    why = "catalog.clickhouse.insert_quorum_timeout must be at least 1 ms and below the catalog's request timeout "
          "(catalog.timeout, else service.request_timeout): a write must answer 319 before the client gives up on it";
  }
  if (why == NULL) return CS_E_OK;
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "%s", why);
  return CS_E_CONFIG;
}

/*
 * The parameter name at text (up to '=', '&', '#' or the end), percent-decoded
 * as the server decodes it, into out (cap >= 1), cut at cap - 1 bytes; a
 * control byte becomes '?' so the name can be printed. Returns the end of the name.
 */
static const char *query_name(const char *text, char *out, size_t cap) {
  assert(cap > 0);
  size_t n = 0;
  const char *p = text;
  while (*p != '\0' && *p != '=' && *p != '&' && *p != '#') {
    char c = *p++;
    if (c == '%' && cs_hex_value(p[0], CS_HEX_ANY) >= 0 && cs_hex_value(p[1], CS_HEX_ANY) >= 0) {
      c = (char)(cs_hex_value(p[0], CS_HEX_ANY) << 4 | cs_hex_value(p[1], CS_HEX_ANY));
      p += 2;
    }
    if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    if (n + 1 < cap) out[n++] = c;
  }
  out[n] = '\0';
  return p;
}

/* The settings the replicated mode sends itself: from the url too, the server would take two values. */
static bool replication_setting(const char *name) {
  return strncasecmp(name, "insert_quorum", 13) == 0 || strcasecmp(name, "select_sequential_consistency") == 0 ||
         strcasecmp(name, "distributed_ddl_task_timeout") == 0;
}

bool cs_clickhouse_url_replication_setting(const char *url, char *name, size_t cap) {
  assert(name != NULL && cap >= 32); /* a name cut to 31 bytes or more cannot pass for one of 29 */
  name[0] = '\0';
  const char *p = url == NULL ? NULL : strchr(url, '?');
  const char *end = p == NULL ? NULL : strchr(p, '#');
  while (p != NULL && (end == NULL || p < end)) {
    const char *after = query_name(p + 1, name, cap);
    if (replication_setting(name)) {
      /* Named as the server knows it; another name of the family is not echoed byte for byte (any bytes). */
      static const char *const known[] = {"insert_quorum", "insert_quorum_timeout", "insert_quorum_parallel",
                                          "select_sequential_consistency", "distributed_ddl_task_timeout"};
      bool exact = false;
      for (size_t k = 0; k < sizeof known / sizeof known[0] && !exact; k++) exact = strcasecmp(name, known[k]) == 0;
      if (!exact) snprintf(name, cap, "insert_quorum*");
      return true;
    }
    p = strchr(after, '&');
  }
  name[0] = '\0';
  return false;
}

/* The url's query: no setting the replicated mode sends itself (cs_clickhouse_config.cluster and its quorum do). */
static int url_query_validate(const char *url, char *msg, size_t msg_size) {
  char name[64];
  if (!cs_clickhouse_url_replication_setting(url, name, sizeof name)) return CS_E_OK;
  if (msg != NULL && msg_size > 0)
    snprintf(msg, msg_size,
             "clickhouse.url carries the replication setting '%s' in its query: set catalog.clickhouse.cluster and "
             "catalog.clickhouse.insert_quorum instead (sent with every statement)", name);
  return CS_E_CONFIG;
}

int cs_clickhouse_config_validate(const cs_clickhouse_config *cfg, char *msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (cfg == NULL) return CS_E_INVALID_ARGUMENT;
  if (cluster_validate(cfg, msg, msg_size) != CS_E_OK) return CS_E_CONFIG;
  int rc = cs_endpoint_validate("clickhouse.url", cfg->url, cfg->allow_insecure, msg, msg_size);
  if (rc == CS_E_OK) return url_query_validate(cfg->url, msg, msg_size);
  if (cfg->allow_insecure || cfg->url == NULL || strncmp(cfg->url, "http://", 7) != 0) return rc;
  if (msg != NULL && msg_size > 0)
    snprintf(msg, msg_size, "clickhouse.url uses http:// but clickhouse.allow_insecure is false");
  return CS_E_CONFIG;
}

static int ch_configure(ch_adapter *ch, const cs_clickhouse_config *cfg) {
  const char *prefix = cfg->table_prefix == NULL ? "capstore" : cfg->table_prefix;
  const char *names[5] = {"claims", "descriptors", "inventory", "publishes", "rejected"};
  char *outs[5] = {ch->claims, ch->descriptors, ch->inventory, ch->publishes, ch->rejected};
  for (int i = 0; i < 5; i++)
    if (cs_clickhouse_table_name(prefix, names[i], outs[i], CH_TABLE_MAX) != CS_E_OK) return CS_E_CONFIG;
  const char *holder = cfg->holder == NULL ? "" : cfg->holder;
  if (strlen(holder) >= sizeof ch->holder) return CS_E_CONFIG;
  memcpy(ch->holder, holder, strlen(holder) + 1);
  ch->connect_timeout_ns = cfg->connect_timeout_ns == 0 ? 5 * CS_SEC_NS : cfg->connect_timeout_ns;
  ch->request_timeout_ns = cfg->request_timeout_ns == 0 ? 30 * CS_SEC_NS : cfg->request_timeout_ns;
  ch->query_bytes_max = cfg->query_bytes_max == 0 ? 262144 : cfg->query_bytes_max;
  if (ch->connect_timeout_ns < CS_MS_NS || ch->request_timeout_ns < CS_MS_NS || ch->query_bytes_max < 4096)
    return CS_E_CONFIG;
  ch->query.max = ch->query_bytes_max + 2;
  ch->answer.max = cfg->answer_bytes_max == 0 ? 16u << 20 : cfg->answer_bytes_max;
  ch->stage.max = CS_PACK_FOOTER_BYTES_MAX; /* one row never comes near it */
  int n = snprintf(ch->url, sizeof ch->url, "%s%swait_end_of_query=1&max_query_size=%llu", cfg->url,
                   strchr(cfg->url, '?') == NULL ? "?" : "&", (unsigned long long)ch->query_bytes_max);
  if (n < 0 || (size_t)n >= sizeof ch->url) return CS_E_CONFIG;
  if (cfg->cluster != NULL) {
    /*
     * Every statement: writes wait for the quorum (answering 319 when it
     * times out, before libcurl gives up), reads see only replicas holding
     * every quorum write, and ON CLUSTER DDL waits for the replicas within
     * half the request's time.
     */
    memcpy(ch->cluster, cfg->cluster, strlen(cfg->cluster) + 1);
    ch->quorum = cfg->insert_quorum;
    uint64_t quorum_ms = (cfg->insert_quorum_timeout_ns != 0 ? cfg->insert_quorum_timeout_ns
                                                               : ch->request_timeout_ns / 2) / CS_MS_NS;
    uint64_t ddl_s = ch->request_timeout_ns / 2 / CS_SEC_NS;
    size_t used = (size_t)n;
    n = snprintf(ch->url + used, sizeof ch->url - used,
                 "&insert_quorum=%u&insert_quorum_timeout=%llu&select_sequential_consistency=1"
                 "&distributed_ddl_task_timeout=%llu",
                 ch->quorum, (unsigned long long)(quorum_ms > 0 ? quorum_ms : 1),
                 (unsigned long long)(ddl_s > 0 ? ddl_s : 1));
    if (n < 0 || (size_t)n >= sizeof ch->url - used) return CS_E_CONFIG;
  }
  return ch_headers(ch, cfg);
}

/*
 * The server parses a body into blocks of this many rows, each held in
 * memory whole and written as its own part: a 1,000,000-record pack of long
 * metadata (667 MB of rows) took 1.9 GiB as one block and was refused by a
 * 2 GB max_memory_usage; in blocks of 65,536 it went in. Packs of up to
 * this many records stay one part.
 */
#define CH_INSERT_BLOCK_ROWS 65536u

/* url&max_insert_block_size=..&query=<INSERT INTO descriptors (...) FORMAT TabSeparated, URL-encoded>. */
static int ch_insert_url(ch_adapter *ch) {
  char statement[CH_TABLE_MAX + sizeof CS_CATALOG_DESCRIPTOR_COLUMNS + 64];
  int n = snprintf(statement, sizeof statement, "INSERT INTO %s (%s) FORMAT TabSeparated", ch->descriptors,
                   CS_CATALOG_DESCRIPTOR_COLUMNS);
  assert(n > 0 && (size_t)n < sizeof statement);
  char *escaped = curl_easy_escape(ch->curl, statement, n);
  if (escaped == NULL) return CS_E_NO_MEMORY;
  size_t len = strlen(ch->url) + strlen(escaped) + 64;
  ch->insert_url = malloc(len);
  if (ch->insert_url != NULL)
    snprintf(ch->insert_url, len, "%s&max_insert_block_size=%u&query=%s", ch->url, CH_INSERT_BLOCK_ROWS, escaped);
  curl_free(escaped);
  return ch->insert_url == NULL ? CS_E_NO_MEMORY : CS_E_OK;
}

/* The handle's fixed options: HTTP(S) only (https only unless insecure is allowed), no redirects, timeouts. */
static int ch_curl_setup(ch_adapter *ch, const cs_clickhouse_config *cfg) {
  ch->curl = curl_easy_init();
  if (ch->curl == NULL) return CS_E_NO_MEMORY;
  CURL *c = ch->curl;
  const char *protocols = cfg->allow_insecure ? "http,https" : "https";
  if (curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, protocols) != CURLE_OK ||
      curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, protocols) != CURLE_OK)
    return CS_E_CONFIG;
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 0L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, ch->headers);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ch->curl_error);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(ch->connect_timeout_ns / CS_MS_NS));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(ch->request_timeout_ns / CS_MS_NS));
  curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, (long)CH_STAGE_BYTES);
  return ch_insert_url(ch);
}

int cs_clickhouse_open(const cs_clickhouse_config *cfg, cs_catalog *out) {
  if (cfg == NULL || out == NULL || cs_clickhouse_config_validate(cfg, NULL, 0) != CS_E_OK) return CS_E_CONFIG;
  ch_adapter *ch = calloc(1, sizeof *ch);
  if (ch == NULL) return CS_E_NO_MEMORY;
  int err = ch_configure(ch, cfg);
  if (err == CS_E_OK) err = ch_curl_setup(ch, cfg);
  if (err != CS_E_OK) {
    ch_close(ch);
    return err;
  }
  out->ops = &CH_OPS;
  out->self = ch;
  return CS_E_OK;
}

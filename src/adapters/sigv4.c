/*
 * AWS Signature Version 4 (capstore/sigv4.h): canonical request, string to
 * sign, signing key and signature, in the header and the presigned query
 * form. Pure: no clock, no I/O; OpenSSL only for SHA-256 and HMAC-SHA256.
 */
#include "capstore/sigv4.h"

#include "capstore/types.h"

#include <assert.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"

/* A growable string with a hard bound; the first failure sticks. */
typedef struct sbuf {
  char *data;
  size_t len;
  size_t cap;
  int err;
} sbuf;

static void sb_put(sbuf *sb, const char *bytes, size_t n) {
  if (sb->err != CS_E_OK) return;
  if (sb->len + n + 1 > CS_SIGV4_TEXT_MAX) {
    sb->err = CS_E_TOO_LARGE;
    return;
  }
  if (sb->len + n + 1 > sb->cap) {
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + n + 1) cap *= 2;
    char *grown = realloc(sb->data, cap);
    if (!grown) {
      sb->err = CS_E_NO_MEMORY;
      return;
    }
    sb->data = grown;
    sb->cap = cap;
  }
  if (n) memcpy(sb->data + sb->len, bytes, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

static void sb_puts(sbuf *sb, const char *s) { sb_put(sb, s, strlen(s)); }
static void sb_putc(sbuf *sb, char c) { sb_put(sb, &c, 1); }

/* Hands the string over (an empty string when nothing was written); NULL on failure. */
static char *sb_take(sbuf *sb) {
  sb_put(sb, "", 0);
  if (sb->err != CS_E_OK) {
    free(sb->data);
    sb->data = NULL;
    return NULL;
  }
  char *s = sb->data;
  sb->data = NULL;
  sb->len = sb->cap = 0;
  return s;
}

static bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

static void sb_encode(sbuf *sb, const char *in, size_t len, bool keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)in[i];
    if (is_unreserved(c) || (keep_slash && c == '/')) {
      sb_putc(sb, (char)c);
      continue;
    }
    char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
    sb_put(sb, esc, 3);
  }
}

long cs_sigv4_uri_encode(const char *in, size_t len, bool keep_slash, char *out, size_t cap) {
  assert(in || len == 0);
  assert(out && cap > 0);
  static const char hex[] = "0123456789ABCDEF";
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)in[i];
    bool plain = is_unreserved(c) || (keep_slash && c == '/');
    size_t need = plain ? 1 : 3;
    if (n + need + 1 > cap) return CS_E_INVALID_ARGUMENT;
    if (plain) {
      out[n++] = (char)c;
      continue;
    }
    out[n++] = '%';
    out[n++] = hex[c >> 4];
    out[n++] = hex[c & 15];
  }
  out[n] = '\0';
  return (long)n;
}

size_t cs_sigv4_uri_decode(const char *in, size_t len, char *out, size_t cap) {
  assert(in || len == 0);
  assert(out && cap > len);
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    uint8_t byte;
    if (in[i] == '%' && i + 2 < len && cs_hex_decode(in + i + 1, 2, CS_HEX_ANY, &byte) == CS_E_OK) {
      out[n++] = (char)byte;
      i += 2;
      continue;
    }
    out[n++] = in[i];
  }
  out[n] = '\0';
  return n;
}

static void hex_encode(const unsigned char *bytes, size_t len, char *out) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = hex[bytes[i] >> 4];
    out[2 * i + 1] = hex[bytes[i] & 15];
  }
  out[2 * len] = '\0';
}

void cs_sigv4_sha256_hex(const void *bytes, size_t len, char out[65]) {
  unsigned char digest[32];
  unsigned int digest_len = 0;
  int ok = EVP_Digest(len ? bytes : "", len, digest, &digest_len, EVP_sha256(), NULL);
  assert(ok == 1 && digest_len == 32);
  (void)ok;
  hex_encode(digest, 32, out);
}

static void hmac_sha256(const void *key, size_t key_len, const char *msg, size_t msg_len, unsigned char out[32]) {
  unsigned int out_len = 0;
  unsigned char *r = HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, msg_len, out, &out_len);
  assert(r && out_len == 32);
  (void)r;
}

/* ---- The canonical URI ---- */

/* RFC 3986 dot-segment removal plus empty-segment folding ("//" -> "/"). */
static void path_normalized(sbuf *sb, const char *path, size_t len) {
  size_t starts[512], lens[512];
  size_t depth = 0;
  bool trailing = len > 0 && path[len - 1] == '/';
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && path[j] != '/') j++;
    size_t seg = j - i;
    bool dot = seg == 1 && path[i] == '.';
    bool dotdot = seg == 2 && path[i] == '.' && path[i + 1] == '.';
    if (dotdot && depth > 0) depth--;
    if ((dot || dotdot) && j == len) trailing = true;
    if (seg > 0 && !dot && !dotdot) {
      if (depth == sizeof starts / sizeof starts[0]) {
        sb->err = CS_E_TOO_LARGE;
        return;
      }
      starts[depth] = i;
      lens[depth] = seg;
      depth++;
    }
    i = j + 1;
  }
  for (size_t d = 0; d < depth; d++) {
    sb_putc(sb, '/');
    sb_encode(sb, path + starts[d], lens[d], false);
  }
  if (depth == 0 || trailing) sb_putc(sb, '/');
}

static void canonical_uri(sbuf *sb, const cs_sigv4_request *req, bool normalize) {
  if (req->path_len == 0) {
    sb_putc(sb, '/');
    return;
  }
  if (normalize) {
    path_normalized(sb, req->path, req->path_len);
    return;
  }
  sb_encode(sb, req->path, req->path_len, true);
}

/* ---- The canonical query ---- */

typedef struct qparam {
  char *key; /* encoded */
  char *value;
} qparam;

typedef struct qlist {
  qparam items[CS_SIGV4_QUERY_PARAMS_MAX];
  uint32_t count;
} qlist;

static void qlist_free(qlist *q) {
  for (uint32_t i = 0; i < q->count; i++) {
    free(q->items[i].key);
    free(q->items[i].value);
  }
  q->count = 0;
}

/* Decodes then strictly re-encodes one key or value of the wire query. */
static char *reencode(const char *in, size_t len, int *err) {
  char *raw = malloc(len + 1);
  if (!raw) {
    *err = CS_E_NO_MEMORY;
    return NULL;
  }
  size_t raw_len = cs_sigv4_uri_decode(in, len, raw, len + 1);
  sbuf sb = {0};
  sb_encode(&sb, raw, raw_len, false);
  free(raw);
  char *s = sb_take(&sb);
  if (!s) *err = sb.err;
  return s;
}

static int qlist_add(qlist *q, char *key, char *value) {
  if (!key || !value || q->count == CS_SIGV4_QUERY_PARAMS_MAX) {
    free(key);
    free(value);
    return q->count == CS_SIGV4_QUERY_PARAMS_MAX ? CS_E_TOO_LARGE : CS_E_NO_MEMORY;
  }
  q->items[q->count].key = key;
  q->items[q->count].value = value;
  q->count++;
  return CS_E_OK;
}

static int qlist_parse(qlist *q, const char *query, size_t len) {
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && query[j] != '&') j++;
    if (j > i) {
      size_t eq = i;
      while (eq < j && query[eq] != '=') eq++;
      int err = CS_E_OK;
      char *key = reencode(query + i, eq - i, &err);
      char *value = eq < j ? reencode(query + eq + 1, j - eq - 1, &err) : reencode("", 0, &err);
      int rc = qlist_add(q, key, value);
      if (rc != CS_E_OK) return err != CS_E_OK ? err : rc;
    }
    i = j + 1;
  }
  return CS_E_OK;
}

static int qparam_compare(const void *a, const void *b) {
  const qparam *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : strcmp(x->value, y->value);
}

static void qlist_write(sbuf *sb, qlist *q) {
  qsort(q->items, q->count, sizeof q->items[0], qparam_compare);
  for (uint32_t i = 0; i < q->count; i++) {
    if (i) sb_putc(sb, '&');
    sb_puts(sb, q->items[i].key);
    sb_putc(sb, '=');
    sb_puts(sb, q->items[i].value);
  }
}

/* ---- Canonical headers ---- */

typedef struct hentry {
  char *name;  /* lowercased */
  char *value; /* trimmed, whitespace runs folded to one space */
  uint32_t order;
} hentry;

typedef struct hlist {
  hentry items[CS_SIGV4_HEADERS_MAX + 4];
  uint32_t count;
} hlist;

static void hlist_free(hlist *h) {
  for (uint32_t i = 0; i < h->count; i++) {
    free(h->items[i].name);
    free(h->items[i].value);
  }
  h->count = 0;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static bool header_name_valid(const char *name, size_t len) {
  if (len == 0) return false;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c <= ' ' || c == ':' || c >= 0x7f) return false;
  }
  return true;
}

static int hlist_add(hlist *h, const char *name, size_t name_len, const char *value, size_t value_len) {
  if (!header_name_valid(name, name_len)) return CS_E_INVALID_ARGUMENT;
  if (value_len && memchr(value, '\0', value_len)) return CS_E_INVALID_ARGUMENT;
  if (h->count == sizeof h->items / sizeof h->items[0]) return CS_E_TOO_LARGE;
  sbuf n = {0}, v = {0};
  for (size_t i = 0; i < name_len; i++) {
    char c = name[i];
    sb_putc(&n, (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c);
  }
  size_t a = 0, b = value_len;
  while (a < b && is_space(value[a])) a++;
  while (b > a && is_space(value[b - 1])) b--;
  for (size_t i = a; i < b; i++) {
    if (!is_space(value[i])) {
      sb_putc(&v, value[i]);
    } else if (!is_space(value[i - 1])) {
      sb_putc(&v, ' ');
    }
  }
  int err = n.err != CS_E_OK ? n.err : v.err;
  char *ns = sb_take(&n), *vs = sb_take(&v);
  if (!ns || !vs) {
    free(ns);
    free(vs);
    return err != CS_E_OK ? err : CS_E_NO_MEMORY;
  }
  h->items[h->count] = (hentry){.name = ns, .value = vs, .order = h->count};
  h->count++;
  return CS_E_OK;
}

static int hentry_compare(const void *a, const void *b) {
  const hentry *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x->order < y->order ? -1 : (x->order > y->order);
}

/* Sorted, duplicates joined with commas in the order they came. */
static void hlist_write(hlist *h, sbuf *canonical, sbuf *signed_headers) {
  qsort(h->items, h->count, sizeof h->items[0], hentry_compare);
  for (uint32_t i = 0; i < h->count; i++) {
    bool same = i > 0 && strcmp(h->items[i].name, h->items[i - 1].name) == 0;
    if (same) {
      sb_putc(canonical, ',');
      sb_puts(canonical, h->items[i].value);
      continue;
    }
    if (i > 0) {
      sb_putc(canonical, '\n');
      sb_putc(signed_headers, ';');
    }
    sb_puts(canonical, h->items[i].name);
    sb_putc(canonical, ':');
    sb_puts(canonical, h->items[i].value);
    sb_puts(signed_headers, h->items[i].name);
  }
  if (h->count) sb_putc(canonical, '\n');
}

/* ---- Signing ---- */

typedef enum sign_form { FORM_HEADER, FORM_QUERY } sign_form;

static bool has_token(const cs_sigv4_params *p) { return p->session_token && p->session_token[0]; }

static bool date_valid(const char *d) {
  if (!d || strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z') return false;
  for (int i = 0; i < 15; i++) {
    if (i != 8 && (d[i] < '0' || d[i] > '9')) return false;
  }
  return true;
}

static bool payload_hash_valid(const char *h) {
  if (strcmp(h, CS_SIGV4_UNSIGNED_PAYLOAD) == 0) return true;
  if (strlen(h) != 64) return false;
  for (int i = 0; i < 64; i++) {
    if (cs_hex_value(h[i], CS_HEX_LOWER) < 0) return false;
  }
  return true;
}

static int inputs_check(const cs_sigv4_params *p, const cs_sigv4_request *req) {
  if (!p || !req || !req->method || !req->method[0]) return CS_E_INVALID_ARGUMENT;
  if (!p->access_key_id || !p->secret_access_key || !p->region || !p->service) return CS_E_INVALID_ARGUMENT;
  if (!p->access_key_id[0] || !p->region[0] || !p->service[0] || !date_valid(p->amz_date)) {
    return CS_E_INVALID_ARGUMENT;
  }
  if ((req->path_len && !req->path) || (req->query_len && !req->query) || (req->body_len && !req->body)) {
    return CS_E_INVALID_ARGUMENT;
  }
  if (req->header_count > CS_SIGV4_HEADERS_MAX) return CS_E_TOO_LARGE;
  if (req->header_count && !req->headers) return CS_E_INVALID_ARGUMENT;
  if (req->payload_hash && !payload_hash_valid(req->payload_hash)) return CS_E_INVALID_ARGUMENT;
  return CS_E_OK;
}

static void credential_scope(sbuf *sb, const cs_sigv4_params *p) {
  sb_put(sb, p->amz_date, 8);
  sb_putc(sb, '/');
  sb_puts(sb, p->region);
  sb_putc(sb, '/');
  sb_puts(sb, p->service);
  sb_puts(sb, "/aws4_request");
}

/* The request's headers plus those the header form adds and signs. */
static int headers_collect(hlist *h, const cs_sigv4_params *p, const cs_sigv4_request *req, sign_form form,
                           const char *payload_hash) {
  for (uint32_t i = 0; i < req->header_count; i++) {
    const cs_sigv4_header *hd = &req->headers[i];
    if (!hd->name || (hd->value_len && !hd->value)) return CS_E_INVALID_ARGUMENT;
    int rc = hlist_add(h, hd->name, hd->name_len, hd->value ? hd->value : "", hd->value_len);
    if (rc != CS_E_OK) return rc;
  }
  if (form == FORM_QUERY) return CS_E_OK;
  int rc = hlist_add(h, "x-amz-date", 10, p->amz_date, strlen(p->amz_date));
  if (rc == CS_E_OK && has_token(p) && !p->omit_session_token) {
    rc = hlist_add(h, "x-amz-security-token", 20, p->session_token, strlen(p->session_token));
  }
  if (rc == CS_E_OK && p->content_sha256_header) {
    rc = hlist_add(h, "x-amz-content-sha256", 20, payload_hash, strlen(payload_hash));
  }
  return rc;
}

/* The X-Amz-* parameters of the query form, encoded, in the order AWS writes them. */
static int presign_params(qlist *q, const cs_sigv4_params *p, const char *signed_headers, bool with_token) {
  sbuf cred = {0};
  sb_puts(&cred, p->access_key_id);
  sb_putc(&cred, '/');
  credential_scope(&cred, p);
  char expires[16];
  snprintf(expires, sizeof expires, "%u", (unsigned)p->expires_s);
  const char *names[] = {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders",
                         "X-Amz-Expires", "X-Amz-Security-Token"};
  const char *values[] = {SIGV4_ALGORITHM, cred.data ? cred.data : "", p->amz_date, signed_headers, expires,
                          p->session_token};
  int rc = cred.err;
  size_t n = with_token ? 6 : 5;
  for (size_t i = 0; i < n && rc == CS_E_OK; i++) {
    sbuf k = {0}, v = {0};
    sb_encode(&k, names[i], strlen(names[i]), false);
    sb_encode(&v, values[i], strlen(values[i]), false);
    rc = qlist_add(q, sb_take(&k), sb_take(&v));
  }
  free(cred.data);
  return rc;
}

/* Canonical request of either form; fills out->signed_headers and payload_hash. */
static int build_canonical(const cs_sigv4_params *p, const cs_sigv4_request *req, sign_form form,
                           cs_sigv4_out *out) {
  if (req->payload_hash) {
    snprintf(out->payload_hash, sizeof out->payload_hash, "%s", req->payload_hash);
  } else {
    cs_sigv4_sha256_hex(req->body, req->body_len, out->payload_hash);
  }
  hlist *h = calloc(1, sizeof *h);
  qlist *q = calloc(1, sizeof *q);
  int rc = (h && q) ? CS_E_OK : CS_E_NO_MEMORY;
  if (rc == CS_E_OK) rc = headers_collect(h, p, req, form, out->payload_hash);
  sbuf canon = {0}, hdrs = {0}, names = {0};
  if (rc == CS_E_OK) {
    hlist_write(h, &hdrs, &names);
    rc = names.err != CS_E_OK ? names.err : hdrs.err;
  }
  if (rc == CS_E_OK) rc = qlist_parse(q, req->query, req->query_len);
  bool signed_token = has_token(p) && !p->omit_session_token;
  if (rc == CS_E_OK && form == FORM_QUERY) rc = presign_params(q, p, names.data ? names.data : "", signed_token);
  if (rc == CS_E_OK) {
    sb_puts(&canon, req->method);
    sb_putc(&canon, '\n');
    canonical_uri(&canon, req, p->normalize_path);
    sb_putc(&canon, '\n');
    qlist_write(&canon, q);
    sb_putc(&canon, '\n');
    sb_put(&canon, hdrs.data ? hdrs.data : "", hdrs.len);
    sb_putc(&canon, '\n');
    sb_put(&canon, names.data ? names.data : "", names.len);
    sb_putc(&canon, '\n');
    sb_puts(&canon, out->payload_hash);
    rc = canon.err;
  }
  free(hdrs.data);
  if (rc == CS_E_OK) {
    out->canonical_request = sb_take(&canon);
    out->signed_headers = sb_take(&names);
  }
  free(canon.data);
  free(names.data);
  if (h) hlist_free(h);
  if (q) qlist_free(q);
  free(h);
  free(q);
  return rc;
}

static int sign_strings(const cs_sigv4_params *p, cs_sigv4_out *out) {
  char hash[65];
  cs_sigv4_sha256_hex(out->canonical_request, strlen(out->canonical_request), hash);
  sbuf sts = {0};
  sb_puts(&sts, SIGV4_ALGORITHM "\n");
  sb_puts(&sts, p->amz_date);
  sb_putc(&sts, '\n');
  credential_scope(&sts, p);
  sb_putc(&sts, '\n');
  sb_puts(&sts, hash);
  int rc = sts.err;
  out->string_to_sign = sb_take(&sts);
  if (!out->string_to_sign) return rc != CS_E_OK ? rc : CS_E_NO_MEMORY;

  sbuf key = {0};
  sb_puts(&key, "AWS4");
  sb_puts(&key, p->secret_access_key);
  if (key.err != CS_E_OK) {
    free(key.data);
    return key.err;
  }
  unsigned char k[32];
  hmac_sha256(key.data, key.len, p->amz_date, 8, k);
  OPENSSL_cleanse(key.data, key.len);
  free(key.data);
  hmac_sha256(k, 32, p->region, strlen(p->region), k);
  hmac_sha256(k, 32, p->service, strlen(p->service), k);
  hmac_sha256(k, 32, "aws4_request", 12, k);
  unsigned char sig[32];
  hmac_sha256(k, 32, out->string_to_sign, strlen(out->string_to_sign), sig);
  OPENSSL_cleanse(k, sizeof k);
  hex_encode(sig, 32, out->signature);
  return CS_E_OK;
}

static int sign_common(const cs_sigv4_params *p, const cs_sigv4_request *req, sign_form form, cs_sigv4_out *out) {
  assert(out);
  memset(out, 0, sizeof *out);
  int rc = inputs_check(p, req);
  if (rc == CS_E_OK) rc = build_canonical(p, req, form, out);
  if (rc == CS_E_OK) rc = sign_strings(p, out);
  if (rc != CS_E_OK) cs_sigv4_out_free(out);
  return rc;
}

int cs_sigv4_sign_header(const cs_sigv4_params *params, const cs_sigv4_request *req, cs_sigv4_out *out) {
  int rc = sign_common(params, req, FORM_HEADER, out);
  if (rc != CS_E_OK) return rc;
  sbuf auth = {0};
  sb_puts(&auth, SIGV4_ALGORITHM " Credential=");
  sb_puts(&auth, params->access_key_id);
  sb_putc(&auth, '/');
  credential_scope(&auth, params);
  sb_puts(&auth, ", SignedHeaders=");
  sb_puts(&auth, out->signed_headers);
  sb_puts(&auth, ", Signature=");
  sb_puts(&auth, out->signature);
  rc = auth.err;
  out->authorization = sb_take(&auth);
  if (!out->authorization) {
    cs_sigv4_out_free(out);
    return rc != CS_E_OK ? rc : CS_E_NO_MEMORY;
  }
  return CS_E_OK;
}

int cs_sigv4_sign_query(const cs_sigv4_params *params, const cs_sigv4_request *req, cs_sigv4_out *out) {
  int rc = sign_common(params, req, FORM_QUERY, out);
  if (rc != CS_E_OK) return rc;
  qlist *q = calloc(1, sizeof *q);
  if (!q) {
    cs_sigv4_out_free(out);
    return CS_E_NO_MEMORY;
  }
  /* The token goes on the URL even when it was left out of the signature. */
  rc = presign_params(q, params, out->signed_headers, has_token(params));
  sbuf query = {0};
  if (req->query_len) {
    sb_put(&query, req->query, req->query_len);
    sb_putc(&query, '&');
  }
  for (uint32_t i = 0; i < q->count; i++) {
    sb_puts(&query, q->items[i].key);
    sb_putc(&query, '=');
    sb_puts(&query, q->items[i].value);
    sb_putc(&query, '&');
  }
  sb_puts(&query, "X-Amz-Signature=");
  sb_puts(&query, out->signature);
  qlist_free(q);
  free(q);
  if (rc == CS_E_OK) rc = query.err;
  out->query = sb_take(&query);
  if (rc != CS_E_OK || !out->query) {
    cs_sigv4_out_free(out);
    return rc != CS_E_OK ? rc : CS_E_NO_MEMORY;
  }
  return CS_E_OK;
}

int cs_sigv4_canonical_request(const cs_sigv4_params *params, const cs_sigv4_request *req, char **canonical) {
  assert(canonical);
  *canonical = NULL;
  cs_sigv4_out out;
  memset(&out, 0, sizeof out);
  int rc = inputs_check(params, req);
  if (rc == CS_E_OK) rc = build_canonical(params, req, FORM_HEADER, &out);
  if (rc != CS_E_OK) return rc;
  *canonical = out.canonical_request;
  out.canonical_request = NULL;
  cs_sigv4_out_free(&out);
  return CS_E_OK;
}

void cs_sigv4_out_free(cs_sigv4_out *out) {
  if (!out) return;
  free(out->canonical_request);
  free(out->string_to_sign);
  free(out->signed_headers);
  free(out->authorization);
  free(out->query);
  memset(out, 0, sizeof *out);
}

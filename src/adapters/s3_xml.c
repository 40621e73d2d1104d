/*
 * The pure parts of the S3 adapter (capstore/s3.h): the ListObjectsV2 and
 * Error body parsers (expat, bounded: fixed text buffers, a depth limit, no
 * DOCTYPE), the outcome classification and path-style URL building. No curl.
 */
#include "capstore/s3.h"

#include "capstore/sigv4.h"

#include <assert.h>
#include <expat.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define XML_DEPTH_MAX 16u
/* An element's text: a url-encoded key of CS_KEY_MAX - 1 bytes is 3 characters a byte. */
#define XML_TEXT_MAX (3u * CS_KEY_MAX + 1u)
/* Bytes of a key a message quotes, each up to 4 characters (\xNN), then "...". */
#define QUOTE_BYTES_MAX 80u
#define QUOTE_SIZE (QUOTE_BYTES_MAX * 4u + 8u)

cs_outcome cs_s3_classify(cs_s3_transport transport, uint32_t http_status, const char *error_code) {
  if (transport == CS_S3_TRANSPORT_REFUSED) return CS_OUT_REFUSED;
  if (transport == CS_S3_TRANSPORT_TIMEOUT) return CS_OUT_TIMEOUT;
  if (transport == CS_S3_TRANSPORT_LOST) return CS_OUT_UNKNOWN;
  const char *code = error_code ? error_code : "";
  if (http_status >= 200 && http_status < 300) return CS_OUT_OK;
  if (http_status == 429 || strcmp(code, "SlowDown") == 0) return CS_OUT_THROTTLED;
  if (http_status == 413 || strcmp(code, "EntityTooLarge") == 0) return CS_OUT_TOO_LARGE;
  if (http_status >= 500 && http_status < 600) return CS_OUT_SERVER_ERROR;
  if (http_status == 403) return CS_OUT_FORBIDDEN;
  if (http_status == 404) return CS_OUT_NOT_FOUND;
  if (http_status == 412) return CS_OUT_PRECONDITION;
  return CS_OUT_INVALID;
}

/* ---- A bounded expat walk shared by both parsers ---- */

typedef enum xml_kind { XML_LIST, XML_ERROR } xml_kind;

typedef struct xml_walk {
  XML_Parser parser;
  xml_kind kind;
  uint32_t depth;
  char names[XML_DEPTH_MAX][32]; /* element names on the path (truncated) */
  char text[XML_TEXT_MAX];
  size_t text_len;
  bool text_overflow;
  bool root_seen;
  int err;
  char detail[256];
  /* XML_LIST */
  bool scan;                /* the first pass: only <EncodingType> is read */
  bool url_encoded;         /* the answer said <EncodingType>url</EncodingType> (the first pass found it) */
  cs_list_page *page;
  const char *prefix; /* every key must start with it */
  size_t prefix_len;
  char key[XML_TEXT_MAX];   /* the listed key, decoded; it may hold NULs (key_len says) */
  size_t key_len;
  uint32_t left_out;        /* listed keys capstore cannot hold, not on the page */
  char left_out_first[QUOTE_SIZE + 64]; /* the first of them and why, for the note */
  bool truncated;
  /* XML_ERROR */
  char *code;
  size_t code_size;
  char *message;
  size_t message_size;
} xml_walk;

static void walk_fail(xml_walk *w, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void walk_fail(xml_walk *w, int err, const char *fmt, ...) {
  if (w->err != CS_E_OK) return;
  w->err = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->detail, sizeof w->detail, fmt, ap);
  va_end(ap);
  XML_StopParser(w->parser, XML_FALSE);
}

/* Local name: S3 answers carry a default namespace; expat is not namespace-aware here. */
static bool at(const xml_walk *w, uint32_t depth, const char *name) {
  return w->depth == depth && strcmp(w->names[depth - 1], name) == 0;
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs) {
  xml_walk *w = ud;
  (void)attrs;
  if (w->err != CS_E_OK) return;
  if (w->depth == XML_DEPTH_MAX) {
    walk_fail(w, CS_E_PARSE, "XML nested deeper than %u", XML_DEPTH_MAX);
    return;
  }
  if (w->depth == 0) {
    const char *root = w->kind == XML_LIST ? "ListBucketResult" : "Error";
    if (strcmp(name, root) != 0) {
      walk_fail(w, CS_E_PARSE, "root element is not <%s>", root);
      return;
    }
    w->root_seen = true;
  }
  snprintf(w->names[w->depth], sizeof w->names[0], "%s", name);
  w->depth++;
  w->text_len = 0;
  w->text_overflow = false;
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len) {
  xml_walk *w = ud;
  if (w->err != CS_E_OK || len <= 0) return;
  size_t n = (size_t)len;
  if (w->text_len + n >= sizeof w->text) {
    n = sizeof w->text - 1 - w->text_len;
    w->text_overflow = true;
  }
  memcpy(w->text + w->text_len, s, n);
  w->text_len += n;
  w->text[w->text_len] = '\0';
}

/*
 * Decodes S3's url encoding of text[0..len) into out (len + 1 bytes, NUL
 * after the key): "%XX" is the byte 0xXX, "+" a space (S3 writes a space as
 * "+" and a plus as "%2B"; botocore reads keys with unquote_plus), any other
 * byte itself. cut: text is the head of a longer key, so an escape cut off
 * at its end is dropped. Returns the length decoded, which may hold NULs, or
 * -1 at a '%' not followed by two hex digits.
 */
static long url_decode(const char *text, size_t len, bool cut, char *out) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == '+') {
      out[n++] = ' ';
      continue;
    }
    if (text[i] != '%') {
      out[n++] = text[i];
      continue;
    }
    if (cut && len - i < 3) break;
    uint8_t byte;
    if (len - i < 3 || cs_hex_decode(text + i + 1, 2, CS_HEX_ANY, &byte) != CS_E_OK) return -1;
    out[n++] = (char)byte;
    i += 2;
  }
  assert(n <= len);
  out[n] = '\0';
  return (long)n;
}

/* The listed key in w->text, decoded where the answer is url-encoded, into w->key; false (w failed) when it is not. */
static bool list_key_read(xml_walk *w) {
  if (!w->url_encoded) {
    memcpy(w->key, w->text, w->text_len + 1);
    w->key_len = w->text_len;
    return true;
  }
  long n = url_decode(w->text, w->text_len, w->text_overflow, w->key);
  if (n >= 0) {
    w->key_len = (size_t)n;
    return true;
  }
  char quoted[QUOTE_SIZE];
  cs_quote_bytes(w->text, w->text_len, QUOTE_BYTES_MAX, quoted, sizeof quoted);
  walk_fail(w, CS_E_PARSE, "listed key '%s' is not url-encoded: a '%%' without two hex digits", quoted);
  return false;
}

/*
 * Whether the listed key in w->key cannot be held in a page: it is
 * CS_KEY_MAX bytes or longer (S3 allows 1,024), holds a NUL, or the store
 * rule refuses it (cs_store_key_check: a "." or ".." segment). Such a key is
 * counted, and the first one's sentence kept in w->left_out_first.
 */
static bool list_key_unholdable(xml_walk *w) {
  char why[sizeof w->left_out_first];
  char quoted[QUOTE_SIZE];
  cs_quote_bytes(w->key, w->key_len, QUOTE_BYTES_MAX, quoted, sizeof quoted);
  if (w->text_overflow || w->key_len >= CS_KEY_MAX) {
    snprintf(why, sizeof why, "key '%s' is CS_KEY_MAX (%u) bytes or longer", quoted, CS_KEY_MAX);
  } else if (memchr(w->key, '\0', w->key_len) != NULL) {
    snprintf(why, sizeof why, "key '%s' holds a NUL byte", quoted);
  } else if (cs_store_key_check(w->key, false, why, sizeof why) == CS_E_OK) {
    return false;
  }
  if (w->left_out++ == 0) memcpy(w->left_out_first, why, sizeof why);
  return true;
}

/*
 * Whether the listed key in w->text goes on the page, decoded (w->key). A
 * key the answer may not name (not url-encoded as the answer says, empty,
 * not under the prefix asked for) means the server is wrong: the whole
 * answer is refused with the key named, and no key is passed up. A key S3
 * may hold but capstore cannot (list_key_unholdable) is left out and
 * counted, so such an object under the prefix cannot stop a walk of it at
 * its page.
 */
static bool list_key_keep(xml_walk *w) {
  if (!list_key_read(w)) return false;
  if (w->key_len == 0) {
    walk_fail(w, CS_E_PARSE, "a listed key is empty");
    return false;
  }
  char quoted[QUOTE_SIZE];
  cs_quote_bytes(w->key, w->key_len, QUOTE_BYTES_MAX, quoted, sizeof quoted);
  if (w->key_len < w->prefix_len || memcmp(w->key, w->prefix, w->prefix_len) != 0) {
    walk_fail(w, CS_E_PARSE, "listed key '%s' is not under the prefix asked for", quoted);
    return false;
  }
  return !list_key_unholdable(w);
}

/* The first pass: whether the answer's keys are url-encoded (an encoding capstore cannot read is refused). */
static void list_scan_end(xml_walk *w) {
  if (!at(w, 2, "EncodingType")) return;
  if (strcmp(w->text, "url") == 0 && !w->text_overflow) {
    w->url_encoded = true;
    return;
  }
  char quoted[QUOTE_SIZE];
  cs_quote_bytes(w->text, w->text_len, QUOTE_BYTES_MAX, quoted, sizeof quoted);
  walk_fail(w, CS_E_PARSE, "EncodingType '%s' is not url, the one capstore asks for", quoted);
}

static void list_end(xml_walk *w) {
  cs_list_page *page = w->page;
  if (w->scan) {
    list_scan_end(w);
    return;
  }
  bool key = w->depth == 3 && strcmp(w->names[1], "Contents") == 0 && strcmp(w->names[2], "Key") == 0;
  if (key) {
    if (page->key_count == page->key_capacity) {
      walk_fail(w, CS_E_TOO_LARGE, "more than the %u keys asked for", page->key_capacity);
      return;
    }
    if (!list_key_keep(w)) return;
    assert(w->key_len < CS_KEY_MAX && strlen(w->key) == w->key_len);
    memcpy(page->keys[page->key_count], w->key, w->key_len + 1);
    page->key_count++;
    return;
  }
  /* The token is not url-encoded (ListObjectsV2 encodes Delimiter, Prefix, Key and StartAfter). */
  if (at(w, 2, "NextContinuationToken")) {
    if (w->text_overflow || w->text_len >= CS_KEY_MAX) {
      walk_fail(w, CS_E_TOO_LARGE, "a continuation token of %u bytes or more", CS_KEY_MAX);
      return;
    }
    memcpy(page->next_token, w->text, w->text_len + 1);
    return;
  }
  if (at(w, 2, "IsTruncated")) w->truncated = strcmp(w->text, "true") == 0;
}

static void error_end(xml_walk *w) {
  if (at(w, 2, "Code") && w->code_size) snprintf(w->code, w->code_size, "%s", w->text);
  if (at(w, 2, "Message") && w->message_size) snprintf(w->message, w->message_size, "%s", w->text);
}

static void XMLCALL on_end(void *ud, const XML_Char *name) {
  xml_walk *w = ud;
  (void)name;
  if (w->err != CS_E_OK) return;
  assert(w->depth > 0);
  if (w->kind == XML_LIST) list_end(w);
  if (w->kind == XML_ERROR) error_end(w);
  w->depth--;
  w->text_len = 0;
  w->text[0] = '\0';
  w->text_overflow = false;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid, const XML_Char *pubid,
                               int has_internal_subset) {
  (void)name;
  (void)sysid;
  (void)pubid;
  (void)has_internal_subset;
  walk_fail(ud, CS_E_PARSE, "a DOCTYPE in an S3 answer");
}

static int walk_run(xml_walk *w, const char *body, size_t len) {
  if (len > (size_t)1 << 30) {
    snprintf(w->detail, sizeof w->detail, "an XML body of %zu bytes", len);
    return CS_E_TOO_LARGE;
  }
  w->parser = XML_ParserCreate("UTF-8");
  if (!w->parser) return CS_E_NO_MEMORY;
  XML_SetUserData(w->parser, w);
  XML_SetElementHandler(w->parser, on_start, on_end);
  XML_SetCharacterDataHandler(w->parser, on_text);
  XML_SetStartDoctypeDeclHandler(w->parser, on_doctype);
  enum XML_Status st = XML_Parse(w->parser, body ? body : "", (int)len, XML_TRUE);
  if (st != XML_STATUS_OK && w->err == CS_E_OK) {
    w->err = CS_E_PARSE;
    snprintf(w->detail, sizeof w->detail, "invalid XML at line %lu: %s",
             (unsigned long)XML_GetCurrentLineNumber(w->parser), XML_ErrorString(XML_GetErrorCode(w->parser)));
  }
  XML_ParserFree(w->parser);
  w->parser = NULL;
  if (w->err == CS_E_OK && !w->root_seen) {
    w->err = CS_E_PARSE;
    snprintf(w->detail, sizeof w->detail, "an empty XML body");
  }
  return w->err;
}

int cs_s3_parse_error(const char *body, size_t len, char *code, size_t code_size, char *message,
                      size_t message_size) {
  assert(code || code_size == 0);
  assert(message || message_size == 0);
  if (code_size) code[0] = '\0';
  if (message_size) message[0] = '\0';
  xml_walk w;
  memset(&w, 0, sizeof w);
  w.kind = XML_ERROR;
  w.code = code;
  w.code_size = code_size;
  w.message = message;
  w.message_size = message_size;
  return walk_run(&w, body, len);
}

/* The note on keys left out of an accepted page, cut to fit ("..." at its end then). */
static void left_out_note(xml_walk *w) {
  int n = snprintf(w->detail, sizeof w->detail, "left out %u listed key%s capstore cannot hold, first: %s",
                   w->left_out, w->left_out == 1 ? "" : "s", w->left_out_first);
  if (n >= (int)sizeof w->detail) memcpy(w->detail + sizeof w->detail - 4, "...", 4);
}

static void list_walk_init(xml_walk *w, bool scan, bool url_encoded, const char *prefix, cs_list_page *page) {
  memset(w, 0, sizeof *w);
  w->kind = XML_LIST;
  w->scan = scan;
  w->url_encoded = url_encoded;
  w->page = page;
  w->prefix = prefix ? prefix : "";
  w->prefix_len = strlen(w->prefix);
}

/*
 * Two passes over the body: the first finds whether the keys are
 * url-encoded (<EncodingType> may come after them), the second reads them.
 */
int cs_s3_parse_list(const char *body, size_t len, const char *prefix, cs_list_page *page, char *detail,
                     size_t detail_size) {
  assert(page && (page->keys || page->key_capacity == 0));
  assert(detail || detail_size == 0);
  page->key_count = 0;
  page->next_token[0] = '\0';
  static_assert(XML_TEXT_MAX >= 3u * (CS_KEY_MAX - 1u) + 1u, "an encoded key of CS_KEY_MAX - 1 bytes fits");
  xml_walk w;
  list_walk_init(&w, true, false, prefix, page);
  int rc = walk_run(&w, body, len);
  if (rc == CS_E_OK) {
    list_walk_init(&w, false, w.url_encoded, prefix, page);
    rc = walk_run(&w, body, len);
  }
  if (rc == CS_E_OK && w.truncated && page->next_token[0] == '\0') {
    rc = CS_E_PARSE;
    snprintf(w.detail, sizeof w.detail, "IsTruncated without a NextContinuationToken");
  }
  if (rc == CS_E_OK && !w.truncated) page->next_token[0] = '\0';
  if (rc != CS_E_OK) page->key_count = 0;
  if (rc == CS_E_OK && w.left_out > 0) left_out_note(&w);
  if (detail_size) snprintf(detail, detail_size, "%s", w.detail);
  return rc;
}

long cs_s3_object_url(const char *endpoint, const char *bucket, const char *key, char *out, size_t cap) {
  assert(endpoint && bucket && key && out);
  size_t ep = strlen(endpoint);
  while (ep > 0 && endpoint[ep - 1] == '/') ep--;
  int n = snprintf(out, cap, "%.*s/%s/", (int)ep, endpoint, bucket);
  if (n < 0 || (size_t)n >= cap) return CS_E_TOO_LARGE;
  long k = cs_sigv4_uri_encode(key, strlen(key), true, out + n, cap - (size_t)n);
  if (k < 0) return CS_E_TOO_LARGE;
  return n + k;
}

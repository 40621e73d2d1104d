/* Reading JSON with jansson, with u64 integers above 2^63-1 carried beside it. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack_json.h"

#define INT64_LIMIT UINT64_C(9223372036854775807)

typedef struct scan_state {
  const uint8_t *in;
  size_t len;
  pk_buf out;        /* the rewritten text, begun at the first placeholder */
  size_t copied;     /* bytes of in already copied into out */
  bool rewriting;
} scan_state;

static bool is_number_char(uint8_t c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

static bool big_push(pk_json_doc *doc, uint64_t value, uint64_t rewritten_end,
                     uint64_t original_end) {
  if (doc->big_count == doc->big_cap) {
    size_t cap = doc->big_cap == 0 ? 16 : doc->big_cap * 2;
    uint64_t *a = realloc(doc->big, cap * sizeof *a);
    if (a != NULL) doc->big = a;
    uint64_t *b = realloc(doc->big_rewritten, cap * sizeof *b);
    if (b != NULL) doc->big_rewritten = b;
    uint64_t *c = realloc(doc->big_original, cap * sizeof *c);
    if (c != NULL) doc->big_original = c;
    if (a == NULL || b == NULL || c == NULL) return false;
    doc->big_cap = cap;
  }
  doc->big[doc->big_count] = value;
  doc->big_rewritten[doc->big_count] = rewritten_end;
  doc->big_original[doc->big_count] = original_end;
  doc->big_count++;
  return true;
}

/* Digits to a u64; false on overflow. */
static bool parse_magnitude(const uint8_t *digits, size_t count, uint64_t *out) {
  uint64_t value = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t digit = (uint64_t)(digits[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

/* Replaces in[start, end) (an integer above 2^63-1) by the placeholder "<k>.5". */
static int substitute(scan_state *s, pk_json_doc *doc, size_t start, size_t end, uint64_t value,
                      cs_pack_error *err) {
  pk_buf_put(&s->out, s->in + s->copied, start - s->copied);
  pk_buf_put_u64(&s->out, doc->big_count);
  pk_buf_put(&s->out, ".5", 2);
  s->copied = end;
  s->rewriting = true;
  if (s->out.failed || !big_push(doc, value, s->out.len, end)) {
    return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "%s: allocation failed while reading integers", doc->what);
  }
  return CS_E_OK;
}

/* Classifies the number token in[start, end): refuse, leave, or substitute. */
static int scan_number(scan_state *s, pk_json_doc *doc, size_t start, size_t end,
                       cs_pack_error *err) {
  const uint8_t *token = s->in + start;
  size_t len = end - start;
  uint64_t at = doc->base_offset + start;
  for (size_t i = 0; i < len; i++) {
    if (token[i] == '.' || token[i] == 'e' || token[i] == 'E') {
      return pk_fail(err, CS_PACK_E_FIELD_TYPE, CS_PACK_NO_RECORD, at, "",
                     "%s: the number at offset %llu is not an integer; no field of the "
                     "format holds a fraction or an exponent",
                     doc->what, (unsigned long long)at);
    }
  }
  bool negative = token[0] == '-';
  const uint8_t *digits = token + (negative ? 1 : 0);
  size_t count = len - (negative ? 1 : 0);
  for (size_t i = 0; i < count; i++) {
    if (digits[i] < '0' || digits[i] > '9') return CS_E_OK; /* not a number: jansson refuses */
  }
  if (count == 0 || (count > 1 && digits[0] == '0')) return CS_E_OK;
  uint64_t magnitude = 0;
  if (!parse_magnitude(digits, count, &magnitude) ||
      (negative && magnitude > INT64_LIMIT + 1)) {
    return pk_fail(err, CS_PACK_E_FIELD_RANGE, CS_PACK_NO_RECORD, at, "",
                   "%s: the integer at offset %llu is outside -2^63 .. 2^64-1", doc->what,
                   (unsigned long long)at);
  }
  if (negative || magnitude <= INT64_LIMIT) return CS_E_OK;
  return substitute(s, doc, start, end, magnitude, err);
}

/* Walks the text outside strings and handles every number token. */
static int prescan(scan_state *s, pk_json_doc *doc, cs_pack_error *err) {
  bool in_string = false;
  size_t i = 0;
  while (i < s->len) {
    uint8_t c = s->in[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = false;
      i++;
    } else if (c == '"') {
      in_string = true;
      i++;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i + 1;
      while (end < s->len && is_number_char(s->in[end])) end++;
      int rc = scan_number(s, doc, i, end, err);
      if (rc != CS_E_OK) return rc;
      i = end;
    } else {
      i++;
    }
  }
  if (s->rewriting) pk_buf_put(&s->out, s->in + s->copied, s->len - s->copied);
  if (s->out.failed) {
    return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "%s: allocation failed while reading integers", doc->what);
  }
  return CS_E_OK;
}

/* Maps a position in the rewritten text back to the original text. */
static uint64_t original_position(const pk_json_doc *doc, uint64_t position) {
  uint64_t shift = 0;
  for (size_t k = 0; k < doc->big_count && doc->big_rewritten[k] <= position; k++) {
    shift = doc->big_original[k] - doc->big_rewritten[k];
  }
  return position + shift;
}

int pk_jin_load(const uint8_t *text, size_t len, uint64_t base_offset, const char *what,
                pk_json_doc *out, cs_pack_error *err) {
  assert(out != NULL && what != NULL && (text != NULL || len == 0));
  memset(out, 0, sizeof *out);
  out->base_offset = base_offset;
  out->what = what;
  scan_state s = {.in = text, .len = len};
  int rc = prescan(&s, out, err);
  if (rc != CS_E_OK) {
    pk_buf_free(&s.out);
    pk_jin_free(out);
    return rc;
  }
  const char *parse_text = s.rewriting ? (const char *)s.out.data : (const char *)text;
  size_t parse_len = s.rewriting ? s.out.len : len;
  json_error_t jerr;
  out->root = json_loadb(parse_text == NULL ? "" : parse_text, parse_len,
                         JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  pk_buf_free(&s.out);
  if (out->root == NULL) {
    uint64_t at = base_offset + original_position(out, (uint64_t)(jerr.position < 0 ? 0 : jerr.position));
    pk_jin_free(out);
    return pk_fail(err, CS_PACK_E_FOOTER_JSON, CS_PACK_NO_RECORD, at, "",
                   "%s: invalid JSON near offset %llu: %s", what, (unsigned long long)at,
                   jerr.text);
  }
  return CS_E_OK;
}

void pk_jin_free(pk_json_doc *doc) {
  assert(doc != NULL);
  json_decref(doc->root);
  free(doc->big);
  free(doc->big_rewritten);
  free(doc->big_original);
  memset(doc, 0, sizeof *doc);
}

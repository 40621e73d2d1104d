/*
 * Reading JSON with jansson: a scan of the text first (numbers jansson cannot
 * hold, and the memory the tree would cost), then the tree.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack_json.h"

#define INT64_LIMIT UINT64_C(9223372036854775807)

/*
 * Upper bounds, in bytes, of everything jansson 2.14 allocates per token on
 * a 64-bit glibc system, blocks it frees again included (the arena below
 * never reuses one), allocator overhead included: measured with a counting
 * allocator; unit.test_pack_json_cost checks that the estimate stays above
 * it for the worst shapes and for writers' footers, and fuzz_footer_cost on
 * any bytes. An object is its struct and first hash table; a pair its entry,
 * key copy and share of the table's doublings; an element its share of an
 * array's doublings; the longest token is held up to five times by the
 * lexer's buffer while it doubles, and by its copy. A key is held twice: the
 * string the lexer hands over, and the pair's own copy.
 */
enum {
  COST_BASE = 4096,
  COST_OBJECT = 256,
  COST_ARRAY = 160,
  COST_PAIR = 144,   /* plus the key's length */
  COST_STRING = 80,  /* plus the string's length */
  COST_NUMBER = 32,
  COST_ELEMENT = 40, /* each value after the first in a container */
  COST_TOKEN_COPIES = 5,
  COST_PLACEHOLDER = 120, /* outside jansson: a side-table entry, with its array's growth */
};

typedef struct scan_state {
  const uint8_t *in;
  size_t len;
  pk_buf out;        /* the rewritten text, begun at the first placeholder */
  size_t copied;     /* bytes of in already copied into out */
  bool rewriting;
  uint64_t cost;     /* estimated bytes jansson allocates: the arena */
  uint64_t other;    /* the scan's own: the side table and the rewritten text */
  size_t longest;    /* the longest string or number token */
  size_t last_body;  /* the length of the last string, a key if ':' follows */
} scan_state;

static bool is_number_char(uint8_t c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Digits from *i on; false when there is none. */
static bool skip_digits(const uint8_t *t, size_t len, size_t *i) {
  size_t start = *i;
  while (*i < len && is_digit(t[*i])) (*i)++;
  return *i > start;
}

/*
 * Whether t[0, len) is a JSON number (RFC 8259 §6), and if so whether it has
 * a fraction or an exponent.
 */
static bool number_syntax(const uint8_t *t, size_t len, bool *is_real) {
  size_t i = 0;
  if (i < len && t[i] == '-') i++;
  if (i < len && t[i] == '0') i++;
  else if (!skip_digits(t, len, &i)) return false;
  *is_real = false;
  if (i < len && t[i] == '.') {
    i++;
    if (!skip_digits(t, len, &i)) return false;
    *is_real = true;
  }
  if (i < len && (t[i] == 'e' || t[i] == 'E')) {
    i++;
    if (i < len && (t[i] == '+' || t[i] == '-')) i++;
    if (!skip_digits(t, len, &i)) return false;
    *is_real = true;
  }
  return i == len;
}

static bool number_push(pk_json_doc *doc, pk_jin_number number) {
  if (doc->number_count == doc->number_cap) {
    size_t cap = doc->number_cap == 0 ? 16 : doc->number_cap * 2;
    pk_jin_number *grown = realloc(doc->numbers, cap * sizeof *grown);
    if (grown == NULL) return false;
    doc->numbers = grown;
    doc->number_cap = cap;
  }
  doc->numbers[doc->number_count++] = number;
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

static int no_memory(const pk_json_doc *doc, cs_pack_error *err) {
  return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                 "%s: allocation failed while reading numbers", doc->what);
}

/* Replaces in[start, end) by the placeholder "<k>.5", k naming its entry. */
static int substitute(scan_state *s, pk_json_doc *doc, size_t start, size_t end,
                      pk_jin_number_kind kind, uint64_t value, cs_pack_error *err) {
  pk_buf_put(&s->out, s->in + s->copied, start - s->copied);
  pk_buf_put_u64(&s->out, doc->number_count);
  pk_buf_put(&s->out, ".5", 2);
  s->copied = end;
  s->rewriting = true;
  pk_jin_number number = {.kind = kind,
                          .value = value,
                          .rewritten_end = s->out.len,
                          .original_end = end,
                          .original_start = doc->base_offset + start};
  if (s->out.failed || !number_push(doc, number)) return no_memory(doc, err);
  return CS_E_OK;
}

/*
 * Classifies the number token in[start, end): leave it (jansson holds it, or
 * refuses its syntax), or substitute a placeholder for a real or an integer
 * beyond what jansson holds.
 */
static int scan_number(scan_state *s, pk_json_doc *doc, size_t start, size_t end,
                       cs_pack_error *err) {
  const uint8_t *token = s->in + start;
  size_t len = end - start;
  bool is_real = false;
  if (!number_syntax(token, len, &is_real)) return CS_E_OK; /* jansson names the error */
  if (is_real) return substitute(s, doc, start, end, PK_JIN_REAL, 0, err);
  bool negative = token[0] == '-';
  const uint8_t *digits = token + (negative ? 1 : 0);
  size_t count = len - (negative ? 1 : 0);
  uint64_t magnitude = 0;
  if (!parse_magnitude(digits, count, &magnitude) ||
      (negative && magnitude > INT64_LIMIT + 1)) {
    return substitute(s, doc, start, end, PK_JIN_OUT_OF_RANGE, 0, err);
  }
  if (negative || magnitude <= INT64_LIMIT) return CS_E_OK;
  return substitute(s, doc, start, end, PK_JIN_BIG, magnitude, err);
}

static void note_token(scan_state *s, size_t len) {
  if (len > s->longest) s->longest = len;
}

/* Walks the text: numbers outside strings, and the cost of every token. */
static int prescan(scan_state *s, pk_json_doc *doc, cs_pack_error *err) {
  size_t i = 0;
  while (i < s->len) {
    uint8_t c = s->in[i];
    if (c == '"') {
      size_t end = i + 1;
      while (end < s->len && s->in[end] != '"') end += s->in[end] == '\\' ? 2 : 1;
      size_t body = (end < s->len ? end : s->len) - i - 1;
      s->cost += COST_STRING + body;
      s->last_body = body;
      note_token(s, body);
      i = end + 1;
    } else if (c == '-' || is_digit(c)) {
      size_t end = i + 1;
      while (end < s->len && is_number_char(s->in[end])) end++;
      int rc = scan_number(s, doc, i, end, err);
      if (rc != CS_E_OK) return rc;
      s->cost += COST_NUMBER;
      note_token(s, end - i);
      i = end;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      /* A bare word: jansson's lexer keeps all of it (true, false, null, or an invalid token). */
      size_t end = i + 1;
      while (end < s->len && ((s->in[end] >= 'a' && s->in[end] <= 'z') || (s->in[end] >= 'A' && s->in[end] <= 'Z')))
        end++;
      note_token(s, end - i);
      i = end;
    } else {
      /* A key was counted as a string: ':' turns it into a pair, with its second copy. */
      if (c == '{') s->cost += COST_OBJECT;
      else if (c == '[') s->cost += COST_ARRAY;
      else if (c == ':') s->cost += COST_PAIR - COST_STRING + s->last_body + s->last_body / 4;
      else if (c == ',') s->cost += COST_ELEMENT;
      i++;
    }
  }
  if (s->rewriting) pk_buf_put(&s->out, s->in + s->copied, s->len - s->copied);
  if (s->out.failed) return no_memory(doc, err);
  s->cost += COST_BASE + (uint64_t)COST_TOKEN_COPIES * s->longest;
  /* The rewritten text grew by doubling: its buffer, and the one before it. */
  s->other = (uint64_t)COST_PLACEHOLDER * doc->number_count + 2u * (uint64_t)s->out.cap;
  return CS_E_OK;
}

/* Maps a position in the rewritten text back to the original text. */
static uint64_t original_position(const pk_json_doc *doc, uint64_t position) {
  uint64_t shift = 0;
  for (size_t k = 0; k < doc->number_count && doc->numbers[k].rewritten_end <= position; k++) {
    shift = doc->numbers[k].original_end - doc->numbers[k].rewritten_end;
  }
  return position + shift;
}

int pk_jin_cost(const uint8_t *text, size_t len, uint64_t *cost, cs_pack_error *err) {
  assert(cost != NULL && (text != NULL || len == 0));
  pk_json_doc doc = {.what = "JSON"};
  scan_state s = {.in = text, .len = len};
  int rc = prescan(&s, &doc, err);
  *cost = s.cost;
  pk_buf_free(&s.out);
  pk_jin_free(&doc);
  return rc;
}

/*
 * The tree's memory, taken before jansson starts. jansson 2.14 is not safe
 * when an allocation fails mid-parse: its lexer drops a byte it could not
 * save (a good footer then reads with a wrong value), an assertion aborts
 * the process, a failed string ends in a NULL dereference. So the scan's
 * estimate (which the tests show is at least everything jansson allocates,
 * freed blocks included) is allocated at once, and jansson's allocations on
 * this thread are carved from it while it parses. Only that one allocation
 * can fail, cleanly, before jansson runs. Should the estimate ever fall
 * short, the rest of the parse spills to malloc (a correct tree, somewhat
 * over the bound: the tests exist so that it does not happen), and the tree
 * is then freed block by block; any allocation that failed (ENOMEM) makes the
 * parse no_memory whatever jansson returned.
 *
 * jansson's allocator is process-wide: it is replaced only if it is still
 * jansson's default (malloc, free), by functions that behave exactly as the
 * defaults on every thread that is not parsing a footer, and a parse uses
 * the arena only while they are still installed. A program that installed
 * its own (before or after) keeps it; footers are then parsed without the
 * arena, and an allocation failure there is still reported as no_memory
 * (ENOMEM) but is exposed to jansson's defects. Installing writes jansson's
 * two global function pointers once, at the first parse: a program that
 * parses JSON with jansson on other threads at that very moment races with
 * it (as it would with any json_set_alloc_funcs call).
 */
typedef struct jin_arena {
  uintptr_t base;
  size_t size;
  size_t used;
  bool spilled; /* blocks past the arena came from malloc */
} jin_arena;

static _Thread_local jin_arena *current_arena;
size_t pk_jin_arena_cap_for_tests;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;

static void *arena_malloc(size_t n) {
  jin_arena *a = current_arena;
  if (a == NULL) return malloc(n);
  size_t need = (n + 15) & ~(size_t)15;
  if (need < n || need > a->size - a->used) {
    a->spilled = true;
    return malloc(n);
  }
  void *p = (void *)(a->base + a->used);
  a->used += need;
  return p;
}

static void arena_free(void *p) {
  jin_arena *a = current_arena;
  if (a != NULL && (uintptr_t)p >= a->base && (uintptr_t)p - a->base < a->size) return;
  free(p);
}

static void arena_install(void) {
  json_malloc_t m = NULL;
  json_free_t f = NULL;
  json_get_alloc_funcs(&m, &f);
  if (m == malloc && f == free) json_set_alloc_funcs(arena_malloc, arena_free);
}

/* Whether jansson allocates through the arena functions now. */
static bool arena_in_use(void) {
  pthread_once(&arena_once, arena_install);
  json_malloc_t m = NULL;
  json_free_t f = NULL;
  json_get_alloc_funcs(&m, &f);
  return m == arena_malloc && f == arena_free;
}

uint64_t pk_jin_cost_limit(size_t len) {
  return (uint64_t)CS_PACK_FOOTER_COST_FACTOR * len + CS_PACK_FOOTER_COST_SLACK;
}

int pk_jin_load(const uint8_t *text, size_t len, uint64_t base_offset, const char *what,
                pk_json_doc *out, cs_pack_error *err) {
  assert(out != NULL && what != NULL && (text != NULL || len == 0));
  memset(out, 0, sizeof *out);
  out->base_offset = base_offset;
  out->what = what;
  scan_state s = {.in = text, .len = len};
  int rc = prescan(&s, out, err);
  out->cost = s.cost;
  if (rc == CS_E_OK && s.cost + s.other > pk_jin_cost_limit(len)) {
    rc = pk_fail(err, CS_PACK_E_FOOTER_COMPLEX, CS_PACK_NO_RECORD, base_offset, "",
                 "%s: its %zu bytes of JSON would cost about %llu bytes of memory to parse, "
                 "over the limit of %u x its length + %u (too many small values)",
                 what, len, (unsigned long long)(s.cost + s.other), CS_PACK_FOOTER_COST_FACTOR,
                 CS_PACK_FOOTER_COST_SLACK);
  }
  if (rc != CS_E_OK) {
    pk_buf_free(&s.out);
    pk_jin_free(out);
    return rc;
  }
  jin_arena arena = {.size = (size_t)s.cost};
  if (pk_jin_arena_cap_for_tests != 0 && pk_jin_arena_cap_for_tests < arena.size) {
    arena.size = pk_jin_arena_cap_for_tests;
  }
  if (arena_in_use()) {
    out->arena = malloc(arena.size);
    if (out->arena == NULL) {
      pk_buf_free(&s.out);
      pk_jin_free(out);
      return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                     "%s: out of memory: parsing %zu bytes of JSON takes up to %llu bytes", what,
                     len, (unsigned long long)s.cost);
    }
    arena.base = (uintptr_t)out->arena;
    current_arena = &arena;
  }
  const char *parse_text = s.rewriting ? (const char *)s.out.data : (const char *)text;
  size_t parse_len = s.rewriting ? s.out.len : len;
  json_error_t jerr;
  errno = 0; /* malloc sets ENOMEM; jansson sometimes reports its failure as a syntax error */
  out->root = json_loadb(parse_text == NULL ? "" : parse_text, parse_len,
                         JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  bool short_of_memory = errno == ENOMEM;
  current_arena = NULL;
  out->arena_size = arena.size;
  out->arena_spilled = arena.spilled;
  pk_buf_free(&s.out);
  if (out->root != NULL && short_of_memory) {
    pk_jin_free(out); /* a tree built past a failed allocation may hold wrong values */
    return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                   "%s: out of memory while parsing %zu bytes of JSON", what, len);
  }
  if (out->root == NULL) {
    uint64_t at = base_offset + original_position(out, (uint64_t)(jerr.position < 0 ? 0 : jerr.position));
    pk_jin_free(out);
    if (short_of_memory || json_error_code(&jerr) == json_error_out_of_memory ||
        jerr.text[0] == '\0') {
      /* The process is short of memory (jansson says nothing when its first
         allocation fails, and a syntax error when one in its lexer does); the
         text may be perfectly good. */
      return pk_fail(err, CS_PACK_E_NO_MEMORY, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "",
                     "%s: out of memory while parsing %zu bytes of JSON", what, len);
    }
    return pk_fail(err, CS_PACK_E_FOOTER_JSON, CS_PACK_NO_RECORD, at, "",
                   "%s: invalid JSON near offset %llu: %s", what, (unsigned long long)at,
                   jerr.text);
  }
  return CS_E_OK;
}

void pk_jin_free(pk_json_doc *doc) {
  assert(doc != NULL);
  if (doc->arena == NULL) {
    json_decref(doc->root);
  } else if (doc->arena_spilled && doc->root != NULL) {
    /* Some blocks came from malloc: free those, pass over the arena's. */
    jin_arena arena = {.base = (uintptr_t)doc->arena, .size = doc->arena_size};
    current_arena = &arena;
    json_decref(doc->root);
    current_arena = NULL;
  } /* else the whole tree is in the arena, and goes with it */
  free(doc->arena);
  free(doc->numbers);
  memset(doc, 0, sizeof *doc);
}

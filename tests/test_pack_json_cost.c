/*
 * The footer's memory bound: the scan's estimate of jansson's tree stays
 * above what jansson really allocates (a counting allocator measures it), for
 * the worst shapes and for writers' footers; writers' footers fit the limit;
 * and an allocation failure inside jansson is reported as no memory, never as
 * a bad footer.
 */
#include <errno.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "test_pack_util.h"

#include "../src/pack/pack_json.h"

/* Live and peak bytes jansson holds, each block counted as glibc sizes it plus its header. */
static size_t live_bytes;
static size_t peak_bytes;
static size_t total_bytes; /* every block ever allocated: what an arena that never reuses needs */
static long fail_after = -1; /* allocations left before one fails; -1: never */

static void *counting_malloc(size_t size) {
  if (fail_after == 0) {
    errno = ENOMEM; /* as malloc does */
    return NULL;
  }
  if (fail_after > 0) fail_after--;
  void *p = malloc(size);
  if (p != NULL) {
    live_bytes += malloc_usable_size(p) + sizeof(size_t);
    total_bytes += malloc_usable_size(p) + sizeof(size_t);
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
  }
  return p;
}

static void counting_free(void *p) {
  if (p != NULL) live_bytes -= malloc_usable_size(p) + sizeof(size_t);
  free(p);
}

static int setup(void **state) {
  (void)state;
  json_set_alloc_funcs(counting_malloc, counting_free);
  return 0;
}

/* "[" element "," element ... "]" with count elements, or wrapped as {"k0":element,...}. */
static char *repeat(const char *open, const char *element, const char *close, size_t count,
                    bool keyed, size_t *len_out) {
  size_t element_len = strlen(element);
  size_t cap = strlen(open) + strlen(close) + count * (element_len + 24) + 1;
  char *text = malloc(cap);
  size_t len = (size_t)snprintf(text, cap, "%s", open);
  for (size_t i = 0; i < count; i++) {
    if (i > 0) text[len++] = ',';
    if (keyed) len += (size_t)snprintf(text + len, cap - len, "\"%zu\":", i);
    memcpy(text + len, element, element_len);
    len += element_len;
  }
  len += (size_t)snprintf(text + len, cap - len, "%s", close);
  *len_out = len;
  return text;
}

/*
 * The estimate, and every byte jansson allocates for text, freed blocks
 * included (what the reader's arena must hold), for text jansson accepts as it is.
 */
static void measure(const char *text, size_t len, uint64_t *estimate, size_t *peak) {
  cs_pack_error err;
  assert_int_equal(pk_jin_cost((const uint8_t *)text, len, estimate, &err), CS_E_OK);
  live_bytes = peak_bytes = total_bytes = 0;
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  if (root == NULL) fail_msg("jansson refused the shape: %s", jerr.text);
  *peak = total_bytes;
  json_decref(root);
  assert_int_equal(live_bytes, 0);
}

static void test_estimate_bounds_worst_shapes(void **state) {
  (void)state;
  const struct {
    const char *open, *element, *close;
    bool keyed;
  } shapes[] = {
      {"[", "{}", "]", false},         {"{\"records\":[", "{}", "]}", false},
      {"[", "[]", "]", false},         {"[", "1", "]", false},
      {"[", "-9223372036854775808", "]", false},
      {"[", "0.5", "]", false},        {"[", "\"\"", "]", false},
      {"[", "\"\\u00e9\\n\"", "]", false},
      {"[", "null", "]", false},       {"[", "true", "]", false},
      {"{", "1", "}", true},           {"{", "{}", "}", true},
      {"{", "[]", "}", true},          {"[", "{\"a\":[]}", "]", false},
      {"[", "{\"a\":1,\"b\":2,\"c\":3}", "]", false},
      {"[", "[[[[[[[[]]]]]]]]", "]", false},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    for (size_t count = 1; count <= 200000; count *= 20) {
      size_t len = 0;
      char *text = repeat(shapes[i].open, shapes[i].element, shapes[i].close, count,
                          shapes[i].keyed, &len);
      uint64_t estimate = 0;
      size_t peak = 0;
      measure(text, len, &estimate, &peak);
      if (count == 160000) {
        print_message("shape %-24s x %zu: jansson %.1f x, estimate %.1f x (%.2f)\n", shapes[i].element, count,
                      (double)peak / (double)len, (double)estimate / (double)len, (double)estimate / (double)peak);
      }
      if (peak > estimate) {
        fail_msg("shape %zu x %zu (%s): jansson allocated %zu bytes, over the estimate %llu",
                 i, count, shapes[i].element, peak, (unsigned long long)estimate);
      }
      free(text);
    }
  }
}

static void test_estimate_bounds_long_tokens(void **state) {
  (void)state;
  /* One long string, one deep nesting (jansson's limit is 2048), one long key. */
  size_t n = 4u << 20;
  char *text = malloc(n + 8);
  text[0] = '[';
  text[1] = '"';
  memset(text + 2, 'x', n);
  memcpy(text + 2 + n, "\"]", 2);
  uint64_t estimate = 0;
  size_t peak = 0;
  measure(text, n + 4, &estimate, &peak);
  assert_true(peak <= estimate);
  text[0] = '{';
  memcpy(text + 2 + n, "\":1}", 4);
  measure(text, n + 6, &estimate, &peak);
  assert_true(peak <= estimate);
  for (size_t i = 0; i < 2000; i++) {
    text[i] = '[';
    text[4000 - 1 - i] = ']';
  }
  measure(text, 4000, &estimate, &peak);
  assert_true(peak <= estimate);
  /* A long bare word: jansson's lexer keeps every letter before it refuses the token. */
  text[0] = '[';
  memset(text + 1, 'n', n);
  text[n + 1] = ']';
  cs_pack_error err;
  assert_int_equal(pk_jin_cost((const uint8_t *)text, n + 2, &estimate, &err), CS_E_OK);
  live_bytes = peak_bytes = total_bytes = 0;
  json_error_t jerr;
  assert_null(json_loadb(text, n + 2, 0, &jerr)); /* an invalid token, after the lexer held it all */
  if (total_bytes > estimate) {
    fail_msg("a bare word of %zu bytes: jansson allocated %zu bytes, over the estimate %llu", n, total_bytes,
             (unsigned long long)estimate);
  }
  free(text);
}

/* Objects of many long keys: jansson holds each key twice (the lexer's string, the pair's copy). */
static void test_estimate_bounds_long_keys(void **state) {
  (void)state;
  const size_t key_lengths[] = {1, 40, 66, 200, 1006, 5000};
  for (size_t k = 0; k < sizeof key_lengths / sizeof key_lengths[0]; k++) {
    size_t key_len = key_lengths[k];
    size_t count = 2000000 / (key_len + 16) + 1;
    size_t cap = count * (key_len + 24) + 16;
    char *text = malloc(cap);
    size_t len = 0;
    text[len++] = '{';
    for (size_t i = 0; i < count; i++) {
      if (i > 0) text[len++] = ',';
      int n = snprintf(text + len, cap - len, "\"%zu", i);
      len += (size_t)n;
      size_t pad = key_len > (size_t)(n - 1) ? key_len - (size_t)(n - 1) : 0;
      memset(text + len, 'k', pad);
      len += pad;
      memcpy(text + len, "\":1", 3);
      len += 3;
    }
    text[len++] = '}';
    uint64_t estimate = 0;
    size_t total = 0;
    measure(text, len, &estimate, &total);
    print_message("%zu keys of %zu bytes: jansson %.2f x, estimate %.2f x\n", count, key_len,
                  (double)total / (double)len, (double)estimate / (double)len);
    if (total > estimate) {
      fail_msg("keys of %zu bytes: jansson allocated %zu bytes, over the estimate %llu", key_len,
               total, (unsigned long long)estimate);
    }
    free(text);
  }
}

/* A writer's footer of count records with the given metadata text and rank. */
static tp_bytes writer_pack(uint32_t count, const char *word, uint32_t rank) {
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  for (uint32_t i = 0; i < count; i++) {
    char id[32];
    snprintf(id, sizeof id, "%u", i);
    cs_pack_meta m = tp_meta(id, 0);
    cs_pack_text t = cs_pack_text_of(word);
    m.tenant_id = m.experiment_id = m.run_id = m.session_id = m.request_id = t;
    m.sequence_id = m.model_id = m.model_revision = m.capture_policy_version = m.hook_name = t;
    m.rank = rank; /* a scalar holds one byte; any other shape has a zero dimension */
    for (uint32_t d = 0; d < rank; d++) m.shape[d] = 0;
    m.step_number = m.token_start = m.token_end = m.captured_at_ns = 0;
    cs_pack_error err;
    int rc = cs_pack_writer_add_record(w, &m, "x", rank == 0 ? 1 : 0, &err);
    if (rc != CS_E_OK) fail_msg("record %u: %s", i, err.message);
  }
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  cs_pack_writer_free(w);
  return out;
}

/* Writers' footers, down to the cheapest records the format allows, fit the limit. */
static void test_writer_footers_fit(void **state) {
  (void)state;
  const struct {
    const char *word;
    uint32_t rank;
  } kinds[] = {{"a", 0}, {"a", 32}, {"tenant-production-cluster-7", 3}};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    tp_bytes p = writer_pack(20000, kinds[k].word, kinds[k].rank);
    const uint8_t *t = tp_trailer(&p);
    const char *footer = (const char *)p.data + tp_get_le(t + 12, 8);
    size_t len = (size_t)tp_get_le(t + 20, 8);
    uint64_t estimate = 0;
    size_t peak = 0;
    measure(footer, len, &estimate, &peak);
    assert_true(peak <= estimate);
    print_message("writer's footer (%s, rank %u): %zu bytes, jansson allocates %.1f x, estimate %.1f x\n",
                  kinds[k].word, kinds[k].rank, len, (double)peak / (double)len,
                  (double)estimate / (double)len);
    if (estimate > pk_jin_cost_limit(len) - CS_PACK_FOOTER_COST_SLACK) {
      fail_msg("a writer's footer (%s, rank %u) costs %.1f x its length", kinds[k].word,
               kinds[k].rank, (double)estimate / (double)len);
    }
    cs_pack_error err = tp_verify(&p);
    assert_int_equal(err.kind, CS_PACK_OK);
    tp_free(&p);
  }
}

/*
 * A program that installs its own jansson allocator after capstore's first
 * parse keeps it, and the footers parsed after that are freed through it
 * (before: the reader kept treating them as arena trees and leaked them all).
 */
static void test_allocator_replaced_after_first_parse(void **state) {
  (void)state;
  tp_bytes p = writer_pack(50, "word", 2);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    json_set_alloc_funcs(malloc, free); /* jansson's defaults: the reader installs its arena */
    cs_pack_error err;
    if (cs_pack_verify_buffer(p.data, p.len, NULL, &err) != CS_E_OK) _exit(2);
    json_set_alloc_funcs(counting_malloc, counting_free);
    live_bytes = peak_bytes = total_bytes = 0;
    for (int i = 0; i < 3; i++) {
      if (cs_pack_verify_buffer(p.data, p.len, NULL, &err) != CS_E_OK) _exit(3);
    }
    if (total_bytes == 0) _exit(4); /* the program's allocator was not used */
    _exit(live_bytes == 0 ? 0 : 5);  /* every block it gave was given back */
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) != 0) fail_msg("child exit %d (4: allocator unused, 5: leaked)", WEXITSTATUS(status));
  tp_free(&p);
}

/*
 * An arena that falls short (capped here; the estimate is tested never to)
 * spills to malloc: the footer still reads right, and its tree is freed
 * block by block, the arena's blocks passed over.
 */
static void test_arena_spill(void **state) {
  (void)state;
  tp_bytes p = writer_pack(300, "word", 2);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    json_set_alloc_funcs(malloc, free); /* the reader's arena, not this test's counter */
    pk_jin_arena_cap_for_tests = 4096;
    cs_pack_error err;
    if (cs_pack_verify_buffer(p.data, p.len, NULL, &err) != CS_E_OK) _exit(2);
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < 200; i++) {
      if (cs_pack_verify_buffer(p.data, p.len, NULL, &err) != CS_E_OK) _exit(3);
    }
    struct mallinfo2 after = mallinfo2();
    /* 200 leaked trees would hold megabytes; a freed one nothing */
    _exit(after.uordblks <= before.uordblks + 65536 ? 0 : 4);
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) != 0) fail_msg("child exit %d (2, 3: refused, 4: leaked)", WEXITSTATUS(status));
  tp_free(&p);
}

/* jansson's first allocation failing: it says nothing; the reader says no_memory. */
static void test_failed_allocation_is_no_memory(void **state) {
  (void)state;
  tp_bytes p = writer_pack(3, "word", 2);
  fail_after = 0;
  cs_pack_error err;
  int rc = cs_pack_verify_buffer(p.data, p.len, NULL, &err);
  fail_after = -1;
  assert_int_equal(rc, CS_E_NO_MEMORY);
  tp_expect(err, CS_PACK_E_NO_MEMORY, "out of memory while parsing");
  tp_free(&p);
}

/* The process's size in bytes (/proc/self/statm). */
static uint64_t address_space_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%llu", &pages), 1);
  fclose(f);
  return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * A large valid footer parsed under address-space limits from tight to loose
 * (ulimit -v, as an operator sets it): each answer is the footer or
 * no_memory, never a bad footer, and never a crash (jansson itself is not
 * safe when malloc fails mid-parse, so the reader asks for the tree's memory
 * first).
 */
static void test_memory_limit_is_not_corruption(void **state) {
  (void)state;
#if defined(__SANITIZE_ADDRESS__)
  skip(); /* ASan reserves terabytes of shadow address space: RLIMIT_AS cannot apply */
#endif
  tp_bytes p = writer_pack(8000, "a", 1);
  int outcomes[3] = {0};
  malloc_trim(0); /* free heap memory would be parsed into without the limit seeing it */
  for (uint64_t extra_mb = 4; extra_mb <= 124; extra_mb += 8) {
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
      json_set_alloc_funcs(malloc, free); /* jansson's defaults: the reader parses in its arena */
      uint64_t limit = address_space_bytes() + extra_mb * 1024 * 1024;
      struct rlimit rl = {.rlim_cur = limit, .rlim_max = limit};
      if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(9);
      cs_pack_error err;
      int rc = cs_pack_verify_buffer(p.data, p.len, NULL, &err);
      if (rc == CS_E_OK) _exit(0);
      if (err.kind == CS_PACK_E_NO_MEMORY && rc == CS_E_NO_MEMORY) _exit(1);
      fprintf(stderr, "limit +%llu MB: %s: %s\n", (unsigned long long)extra_mb,
              cs_pack_error_kind_name(err.kind), err.message);
      _exit(2);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (WIFSIGNALED(status)) {
      fail_msg("limit +%llu MB: the parse died of signal %d", (unsigned long long)extra_mb,
               WTERMSIG(status));
    }
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) <= 1);
    outcomes[WEXITSTATUS(status)]++;
  }
  print_message("footer of %u bytes: %d limits parsed it, %d answered no_memory\n",
                (unsigned)tp_get_le(tp_trailer(&p) + 20, 8), outcomes[0], outcomes[1]);
  assert_true(outcomes[0] > 0 && outcomes[1] > 0);
  tp_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      /* First, while the heap holds little free memory the limit would not see. */
      cmocka_unit_test(test_memory_limit_is_not_corruption),
      /* Also before any parse in this process: its child must be the first to parse. */
      cmocka_unit_test(test_allocator_replaced_after_first_parse),
      cmocka_unit_test(test_arena_spill),
      cmocka_unit_test(test_estimate_bounds_worst_shapes),
      cmocka_unit_test(test_estimate_bounds_long_tokens),
      cmocka_unit_test(test_estimate_bounds_long_keys),
      cmocka_unit_test(test_writer_footers_fit),
      cmocka_unit_test(test_failed_allocation_is_no_memory),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

/*
 * libFuzzer target for the footer's memory bound and its out-of-memory path.
 *
 * Each input is footer JSON under a synthetic trailer. Checked:
 *   1. the scan's estimate is at least everything jansson allocates for the
 *      text, freed blocks included (what the reader's arena must hold; a
 *      counting allocator measures it), whatever the text;
 *   2. text over the limit is refused as footer_complex before jansson
 *      allocates anything;
 *   3. when jansson's first allocation fails, the answer is no_memory, never
 *      a bad footer. (Failures further into a parse are not injected: jansson
 *      2.14 itself can crash or garble a value on some of them, which is why
 *      the reader parses in an arena it allocates first; the counting
 *      allocator installed here keeps the arena out, and
 *      unit.test_pack_json_cost and unit.test_spool run the reader under
 *      address-space limits and failing allocations instead.)
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "../src/pack/pack_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t live_bytes;
static size_t total_bytes; /* freed blocks included: what the reader's arena must hold */
static size_t allocations;
static long fail_after = -1;

static void *counting_malloc(size_t n) {
  if (fail_after == 0) {
    fail_after = -1;
    errno = ENOMEM;
    return NULL;
  }
  if (fail_after > 0) fail_after--;
  void *p = malloc(n);
  if (p != NULL) {
    allocations++;
    live_bytes += malloc_usable_size(p) + sizeof(size_t);
    total_bytes += malloc_usable_size(p) + sizeof(size_t);
  }
  return p;
}

static void counting_free(void *p) {
  if (p != NULL) live_bytes -= malloc_usable_size(p) + sizeof(size_t);
  free(p);
}

static cs_pack_error_kind parse(const uint8_t *text, size_t len) {
  cs_pack_trailer t = {.major_version = 1,
                       .object_size = 128 + (uint64_t)len,
                       .footer_offset = 64,
                       .footer_length = (uint64_t)len,
                       .footer_crc32 = (uint32_t)crc32_z(0, text, len)};
  cs_pack_footer f;
  cs_pack_error err;
  int rc = cs_pack_footer_parse(&t, text, len, &f, &err);
  if (rc == CS_E_OK) cs_pack_footer_free(&f);
  return rc == CS_E_OK ? CS_PACK_OK : err.kind;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_set_alloc_funcs(counting_malloc, counting_free);
  uint64_t estimate = 0;
  cs_pack_error err;
  if (pk_jin_cost(data, size, &estimate, &err) != CS_E_OK) abort(); /* only allocation fails */
  /* 1. jansson's tree of the text as it is (its own refusals of big numbers aside). */
  live_bytes = total_bytes = 0;
  json_error_t jerr;
  json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                            &jerr);
  if (total_bytes > estimate) abort();
  json_decref(root);
  if (live_bytes != 0) abort();
  /* 2. over the limit: refused with nothing built. */
  allocations = 0;
  cs_pack_error_kind plain = parse(data, size);
  if (estimate > pk_jin_cost_limit(size)) {
    if (plain != CS_PACK_E_FOOTER_COMPLEX || allocations != 0) abort();
  }
  /* 3. out of memory at jansson's start. */
  if (allocations > 0) {
    fail_after = 0;
    cs_pack_error_kind failed = parse(data, size);
    fail_after = -1;
    if (failed != CS_PACK_E_NO_MEMORY) abort();
  }
  return 0;
}

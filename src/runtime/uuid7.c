/*
 * UUIDv7 pack ids (RFC 9562, section 5.7, with the monotonic counter of
 * section 6.2 method 1): unix milliseconds in the first 48 bits, then a
 * 12-bit counter in rand_a, then 62 random bits. Keys and catalog rows
 * ordered by pack id are then ordered by time.
 */
#include <assert.h>
#include <string.h>
#include <sys/random.h>

#include "runtime_internal.h"

#define UUID7_COUNTER_MAX 0xfffu

void rt_uuid7_make(rt_uuid7 *gen, uint64_t unix_ns, const uint8_t random[10], cs_uuid *out) {
  assert(gen != NULL && random != NULL && out != NULL);
  uint64_t ms = unix_ns / CS_MS_NS;
  if (ms > gen->last_ms) {
    gen->last_ms = ms;
    /* A random start with the top bit clear leaves room to count in this millisecond. */
    gen->counter = ((uint32_t)random[0] << 4 | random[1] >> 4) & 0x7ffu;
  } else if (gen->counter < UUID7_COUNTER_MAX) {
    gen->counter++;
  } else {
    /* The counter ran out (or the clock went back): borrow the next millisecond. */
    gen->last_ms++;
    gen->counter = 0;
  }
  ms = gen->last_ms;
  assert(ms < (UINT64_C(1) << 48) && gen->counter <= UUID7_COUNTER_MAX);
  uint8_t *b = out->bytes;
  for (int i = 0; i < 6; i++) b[i] = (uint8_t)(ms >> (40 - 8 * i));
  b[6] = (uint8_t)(0x70 | (gen->counter >> 8));
  b[7] = (uint8_t)(gen->counter & 0xff);
  memcpy(b + 8, random + 2, 8);
  b[8] = (uint8_t)(0x80 | (b[8] & 0x3f));
}

int rt_uuid7_next(rt_uuid7 *gen, uint64_t unix_ns, cs_uuid *out) {
  uint8_t random[10];
  if (getrandom(random, sizeof random, 0) != (ssize_t)sizeof random) return CS_E_IO;
  rt_uuid7_make(gen, unix_ns, random, out);
  return CS_E_OK;
}

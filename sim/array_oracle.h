/*
 * sim/array_oracle.h: brute-force answers about an array's geometry, written
 * apart from the core's (src/core/array.c) so that each holds the other: the
 * simulator's slice reader (sim/arrays.c) and the unit property test
 * (tests/test_array.c) both judge the core by them.
 */
#ifndef CAPSTORE_SIM_ARRAY_ORACLE_H
#define CAPSTORE_SIM_ARRAY_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

#include "capstore/array.h"

/* Moves `at` to the next coordinate of the box [lo, hi), the last dimension fastest; false after the last. */
static inline bool array_oracle_next(uint32_t dims, const uint64_t lo[CS_ARRAY_DIMS_MAX],
                                     const uint64_t hi[CS_ARRAY_DIMS_MAX], uint64_t at[CS_ARRAY_DIMS_MAX]) {
  for (uint32_t d = dims; d-- > 0;) {
    if (++at[d] < hi[d]) return true;
    at[d] = lo[d];
  }
  return false;
}

/*
 * The blocks of block_bytes that piece p's region [lo, hi) of its chunk
 * touches, every byte of every element counted: sets their bits in want
 * (zeroed by the caller, large enough) and returns how many.
 */
static inline uint64_t array_oracle_region_blocks(const cs_array_geometry *g, const cs_array_piece *p,
                                                  uint64_t block_bytes, uint64_t *want) {
  uint64_t count = 0, at[CS_ARRAY_DIMS_MAX] = {0};
  for (uint32_t d = 0; d < CS_ARRAY_DIMS_MAX; d++) at[d] = p->lo[d];
  do {
    uint64_t o = 0;
    for (uint32_t d = 0; d < g->dims; d++) o = o * p->chunk_shape[d] + at[d];
    for (uint64_t b = o * g->item_bytes; b < (o + 1) * g->item_bytes; b++) {
      uint64_t k = b / block_bytes;
      count += (want[k / 64] >> (k % 64) & 1) == 0;
      want[k / 64] |= UINT64_C(1) << (k % 64);
    }
  } while (array_oracle_next(g->dims, p->lo, p->hi, at));
  return count;
}

#endif

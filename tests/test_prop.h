/*
 * tests/test_prop.h: the seeded property-test driver of the cmocka unit tests
 * (test_read_plan.c, test_array.c). A property test runs prop_one(prng) for
 * seeds 1..runs; CAPSTORE_SEED=<seed> runs that one seed alone. A failed
 * PROP_CHECK names the condition, the seed and the command that replays it.
 * Include after <cmocka.h> and capstore/types.h, once per test file.
 */
#ifndef CAPSTORE_TEST_PROP_H
#define CAPSTORE_TEST_PROP_H

#include <stdint.h>
#include <stdlib.h>

static uint64_t prop_seed;
static const char *prop_binary = "the test binary";

#define PROP_CHECK(cond)                                                                        \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      print_error("property failed: %s (seed %llu); replay: CAPSTORE_SEED=%llu %s\n", #cond,    \
                  (unsigned long long)prop_seed, (unsigned long long)prop_seed, prop_binary);   \
      fail();                                                                                   \
    }                                                                                           \
  } while (0)

/* Runs one(prng) for seeds 1..runs, or for $CAPSTORE_SEED alone; binary names the test in replay lines. */
static inline void prop_run(void (*one)(cs_prng *), uint64_t runs, const char *binary) {
  const char *env = getenv("CAPSTORE_SEED");
  uint64_t first = env != NULL ? strtoull(env, NULL, 10) : 1;
  prop_binary = binary;
  if (env != NULL) runs = 1;
  for (uint64_t i = 0; i < runs; i++) {
    prop_seed = first + i;
    cs_prng prng;
    cs_prng_seed(&prng, prop_seed);
    one(&prng);
  }
}

#endif

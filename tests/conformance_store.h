/*
 * tests/conformance_store.h: one conformance suite for every object store
 * (store.h): the simulator's model, dirstore, and the S3 adapter. Stable API:
 * adapters' tests call conformance_store_run and nothing else.
 *
 * Each case gets a fresh, empty store from open_fn(ctx) and gives it back with
 * close_fn(store, ctx). Every case starts with cs_store_probe, and the
 * probed behaviours must be exactly what the caller says the store does
 * (expect), so a store cannot pass by regressing into a weaker behaviour.
 * Where a behaviour differs (conditional create not enforced, suffix ranges
 * answered wrongly, LIST not bytewise) the case asserts the documented
 * alternative and prints the difference.
 *
 * The suite runs twice: once on the synchronous primitives, once with every
 * primitive made a request through cs_store_start / cs_store_reap (group
 * "<group>-async"); a case of its own keeps several requests in flight up to
 * the store's in_flight_max.
 *
 * Returns the number of failed cases (0 when all pass), as cmocka does.
 */
#ifndef CAPSTORE_TESTS_CONFORMANCE_STORE_H
#define CAPSTORE_TESTS_CONFORMANCE_STORE_H

#include "capstore/store.h"

/* What the store does where stores differ (store.h), as the probes must find it. */
typedef struct conformance_store_expect {
  bool enforces_if_none_match;
  bool exact_suffix_ranges;
  bool lists_bytewise;
} conformance_store_expect;

int conformance_store_run(const char *group, cs_store *(*open_fn)(void *ctx),
                          void (*close_fn)(cs_store *store, void *ctx), void *ctx,
                          const conformance_store_expect *expect);

#endif

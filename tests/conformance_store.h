/*
 * tests/conformance_store.h: one conformance suite for every object store
 * (store.h): the simulator's model, dirstore, and the S3 adapter. Stable API:
 * adapters' tests call conformance_store_run and nothing else.
 *
 * Each case gets a fresh, empty store from open_fn(ctx) and gives it back with
 * close_fn(store, ctx). The suite probes conditional create itself
 * (cs_store_probe_conditional_create) and, where it is not enforced, asserts
 * the other documented behaviour (the second create-only PUT replaces) and
 * prints "conditional create not enforced by <ops->name>".
 *
 * Suffix ranges are not probed: a store must answer them exactly or fail the
 * suite (the service reads every pack's trailer with one suffix range).
 *
 * Returns the number of failed cases (0 when all pass), as cmocka does.
 */
#ifndef CAPSTORE_TESTS_CONFORMANCE_STORE_H
#define CAPSTORE_TESTS_CONFORMANCE_STORE_H

#include "capstore/store.h"

int conformance_store_run(const char *group, cs_store *(*open_fn)(void *ctx),
                          void (*close_fn)(cs_store *store, void *ctx), void *ctx);

#endif

/*
 * tests/conformance_catalog.h: one conformance suite for every catalog
 * (catalog.h): the simulator's model, SQLite and ClickHouse. Stable API:
 * adapters' tests call conformance_catalog_run (or the _backend form for the
 * optional hooks) and nothing else.
 *
 * Each case gets a fresh, empty catalog from open_fn(ctx) (schema not yet
 * ensured) and gives it back with close_fn(catalog, ctx). Cases that need
 * expiry (expiry_and_takeover, fence) size their TTLs and waits from the
 * backend's clock_resolution_ns R: TTL = 200 ms + 2R, wait TTL + R + 100 ms
 * (the whole suite sleeps 2 x (300 ms + 3R): about 0.6 s at the default 1 ms,
 * 6.6 s at ClickHouse 18.16's 1 s). Time is the catalog's own clock: the suite
 * never tells the catalog what time it is.
 *
 * Where a catalog serializes its statements (SQLite, the model), two claims
 * at one base term cannot both land; the suite then prints "contested term
 * not producible on <ops->name>" and checks the serialized answer instead.
 *
 * Returns the number of failed cases (0 when all pass).
 */
#ifndef CAPSTORE_TESTS_CONFORMANCE_CATALOG_H
#define CAPSTORE_TESTS_CONFORMANCE_CATALOG_H

#include "capstore/catalog.h"

#define CONFORMANCE_CLOCK_RESOLUTION_DEFAULT_NS (1u * CS_MS_NS)
#define CONFORMANCE_CLOCK_RESOLUTION_MAX_NS (2u * CS_SEC_NS)

typedef struct conformance_catalog_backend {
  cs_catalog *(*open_fn)(void *ctx);
  void (*close_fn)(cs_catalog *catalog, void *ctx);
  /* Optional: a second connection to the catalog `first` is on, closed with close_second_fn. */
  cs_catalog *(*reopen_fn)(cs_catalog *first, void *ctx);
  void (*close_second_fn)(cs_catalog *second, void *ctx);
  /* Optional: true when every table present carries CS_CATALOG_SCHEMA_VERSION in its name. */
  bool (*schema_versioned_fn)(cs_catalog *catalog, void *ctx);
  /* The granularity of the catalog's clock (the times it stamps claims with and
   * checks expiry against), in ns. 0 means CONFORMANCE_CLOCK_RESOLUTION_DEFAULT_NS;
   * over CONFORMANCE_CLOCK_RESOLUTION_MAX_NS the suite refuses to run (fails). */
  uint64_t clock_resolution_ns;
  void *ctx;
} conformance_catalog_backend;

int conformance_catalog_run(const char *group, cs_catalog *(*open_fn)(void *ctx),
                            void (*close_fn)(cs_catalog *catalog, void *ctx), void *ctx);

int conformance_catalog_run_backend(const char *group, const conformance_catalog_backend *backend);

#endif

/*
 * The conformance suites against the simulator's models: the store with
 * conditional create enforced and not (w->store_if_none_match), and the
 * catalog. A model that passes here is the reference the real adapters are
 * held to.
 */
#include "conformance_catalog.h"
#include "conformance_store.h"
#include "model_adapter.h"

#include <stdio.h>
#include <stdlib.h>

static cs_store *store_open(void *ctx) {
  cs_store *store = calloc(1, sizeof *store);
  if (store == NULL || sim_model_store_open(*(const bool *)ctx, store) != CS_E_OK) {
    free(store);
    return NULL;
  }
  return store;
}

static void store_close(cs_store *store, void *ctx) {
  (void)ctx;
  store->ops->close(store->self);
  free(store);
}

static cs_catalog *catalog_open(void *ctx) {
  (void)ctx;
  cs_catalog *catalog = calloc(1, sizeof *catalog);
  if (catalog == NULL || sim_model_catalog_open(catalog) != CS_E_OK) {
    free(catalog);
    return NULL;
  }
  return catalog;
}

static void catalog_close(cs_catalog *catalog, void *ctx) {
  (void)ctx;
  catalog->ops->close(catalog->self);
  free(catalog);
}

int main(void) {
  bool enforced = true, not_enforced = false;
  int failed = conformance_store_run("model store, conditional create enforced", store_open, store_close, &enforced);
  failed += conformance_store_run("model store, conditional create not enforced", store_open, store_close,
                                  &not_enforced);
  failed += conformance_catalog_run("model catalog", catalog_open, catalog_close, NULL);
  return failed == 0 ? 0 : 1;
}

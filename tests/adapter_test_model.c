/*
 * The conformance suites against the simulator's models: the store as AWS
 * S3 behaves and as s3rver does (the model's switches, found by the probes),
 * and the catalog. A model that passes here is the reference the real adapters are
 * held to.
 */
#include "conformance_catalog.h"
#include "conformance_store.h"
#include "model_adapter.h"

#include <stdio.h>
#include <stdlib.h>

static cs_store *store_open(void *ctx) {
  cs_store *store = calloc(1, sizeof *store);
  if (store == NULL || sim_model_store_open(*(const uint32_t *)ctx, store) != CS_E_OK) {
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

/* The probes find exactly the switches the model was opened with, for all eight. */
static int probes_find_switches(void) {
  int failed = 0;
  for (uint32_t switches = 0; switches < 8; switches++) {
    cs_store *s = store_open(&switches);
    cs_store_result res;
    int rc = s == NULL ? CS_E_NO_MEMORY : cs_store_probe(s, "probe/", &res);
    bool ok = rc == CS_E_OK && res.outcome == CS_OUT_OK &&
              s->enforces_if_none_match == ((switches & SIM_STORE_IF_NONE_MATCH) != 0) &&
              s->lists_bytewise == ((switches & SIM_STORE_LIST_PATH_ORDER) == 0) &&
              s->exact_suffix_ranges == ((switches & SIM_STORE_SUFFIX_FROM_START) == 0);
    printf("[ %s ] probe of the model store with switches %u: if-none-match %d, lists bytewise %d, exact suffix %d\n",
           ok ? "    OK" : "FAILED", switches, s != NULL && s->enforces_if_none_match,
           s != NULL && s->lists_bytewise, s != NULL && s->exact_suffix_ranges);
    failed += !ok;
    if (s != NULL) store_close(s, NULL);
  }
  return failed;
}

int main(void) {
  uint32_t aws = SIM_STORE_LIKE_AWS, s3rver = SIM_STORE_LIKE_S3RVER;
  int failed = probes_find_switches();
  static const conformance_store_expect like_aws = {true, true, true}, like_s3rver = {false, false, false};
  failed += conformance_store_run("model store, as AWS S3 (every behaviour exact)", store_open, store_close, &aws,
                                  &like_aws);
  failed += conformance_store_run("model store, as s3rver (no conditional create, path-order LIST, suffix "
                                  "ranges from the start)", store_open, store_close, &s3rver, &like_s3rver);
  failed += conformance_catalog_run("model catalog", catalog_open, catalog_close, NULL);
  return failed == 0 ? 0 : 1;
}

/*
 * sim/model_adapter.h: the simulator's models of the object store and the
 * catalog (sim/models.c) behind the store.h and catalog.h contracts, so that
 * tests/conformance_*.c runs the same suite against the model and the real
 * adapters. Each open allocates its own sim_world used as a bare server.
 *
 * The model's clock is the world's now_ns: real monotonic time since open plus
 * whatever the test added with sim_model_catalog_advance. What the model does
 * not hold itself (object bytes, descriptor rows) the adapter keeps beside it;
 * lease, fence, watermark, committed and rejected answers are the model's.
 */
#ifndef CAPSTORE_SIM_MODEL_ADAPTER_H
#define CAPSTORE_SIM_MODEL_ADAPTER_H

#include "capstore/catalog.h"
#include "capstore/store.h"

typedef struct sim_world sim_world;

/*
 * A store on the model, with the behaviours where stores differ as the
 * switches say (the world's fields of the same names):
 *   SIM_STORE_IF_NONE_MATCH: a create-only PUT of a present key answers
 *     CS_OUT_PRECONDITION (AWS S3, dirstore); without it the PUT replaces
 *     like a plain one (s3rver);
 *   SIM_STORE_LIST_PATH_ORDER: LIST pages in path order and paging on from a
 *     key skips the keys that sort after it in path order but below it
 *     bytewise (s3rver);
 *   SIM_STORE_SUFFIX_FROM_START: bytes=-n of a longer object is answered
 *     with bytes 0-n, which an adapter refuses: the model answers
 *     CS_OUT_INVALID naming it, as the S3 adapter does on s3rver.
 * SIM_STORE_LIKE_AWS is none of the quirks; SIM_STORE_LIKE_S3RVER all three.
 * The out->flags are left false: probe them. Returns CS_E_OK or CS_E_NO_MEMORY.
 */
enum {
  SIM_STORE_IF_NONE_MATCH = 1u << 0,
  SIM_STORE_LIST_PATH_ORDER = 1u << 1,
  SIM_STORE_SUFFIX_FROM_START = 1u << 2,
};
#define SIM_STORE_LIKE_AWS ((uint32_t)SIM_STORE_IF_NONE_MATCH)
#define SIM_STORE_LIKE_S3RVER ((uint32_t)(SIM_STORE_LIST_PATH_ORDER | SIM_STORE_SUFFIX_FROM_START))
int sim_model_store_open(uint32_t switches, cs_store *out);

/* A catalog on the model with fence margins as the caller passes them. */
int sim_model_catalog_open(cs_catalog *out);

/* Moves the catalog model's clock forward by ns (on top of real time). */
void sim_model_catalog_advance(cs_catalog *catalog, uint64_t ns);

/* models.c: the store model's conditional create and delete, used by the adapter. */
bool sim_store_create_refused(const sim_world *w, const char *key, uint32_t key_len);
uint32_t sim_store_delete_object(sim_world *w, const char *key, uint32_t key_len);

#endif

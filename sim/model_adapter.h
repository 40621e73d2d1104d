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
 * A store on the model. enforce_if_none_match sets w->store_if_none_match:
 * off, a create-only PUT of a present key replaces it like a plain PUT (the
 * local test servers); on, it answers CS_OUT_PRECONDITION (AWS S3, dirstore).
 * out->enforces_if_none_match is left false: probe it. Returns CS_E_OK or
 * CS_E_NO_MEMORY.
 */
int sim_model_store_open(bool enforce_if_none_match, cs_store *out);

/* A catalog on the model with fence margins as the caller passes them. */
int sim_model_catalog_open(cs_catalog *out);

/* Moves the catalog model's clock forward by ns (on top of real time). */
void sim_model_catalog_advance(cs_catalog *catalog, uint64_t ns);

/* models.c: the store model's conditional create and delete, used by the adapter. */
bool sim_store_create_refused(const sim_world *w, const char *key, uint32_t key_len);
uint32_t sim_store_delete_object(sim_world *w, const char *key, uint32_t key_len);

#endif

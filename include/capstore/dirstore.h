/*
 * capstore/dirstore.h: the filesystem object store, the embedded default for
 * one machine. It keeps the store.h contract on a local directory: create-only
 * PUTs are enforced (link(2) refuses an existing name), plain PUTs replace
 * atomically (rename(2)), an object never appears without its metadata (both
 * live in one file published by one link or rename), LIST pages come in
 * bytewise key order. Layout and key mapping: docs/adapters.md.
 */
#ifndef CAPSTORE_DIRSTORE_H
#define CAPSTORE_DIRSTORE_H

#include "capstore/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest file name a key segment may map to; longer segments are CS_OUT_INVALID. */
#define CS_DIRSTORE_NAME_MAX 240u

/*
 * Opens (creating when absent) a store rooted at root and fills *out;
 * out->enforces_if_none_match is true. Returns CS_E_OK, CS_E_INVALID_ARGUMENT
 * (root empty or too long), CS_E_IO (the directories cannot be created) or
 * CS_E_NO_MEMORY. Close with out->ops->close(out->self).
 */
int cs_dirstore_open(const char *root, cs_store *out);

#ifdef __cplusplus
}
#endif

#endif

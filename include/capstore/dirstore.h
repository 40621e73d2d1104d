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

#include "capstore/spool.h"
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

/*
 * The same with the file-system calls taken from sys (spool.h's table; NULL:
 * the real ones), for fault injection. Durability: a PUT answers OK only
 * after the object's bytes, its name and every directory it created were
 * fsynced; a PUT or DELETE whose last fsync (the directory's) fails answers
 * CS_OUT_UNKNOWN (applied, maybe not durably). A failed readdir fails the
 * LIST (never a page with keys missing). Opening removes temp files of dead
 * writers.
 */
int cs_dirstore_open_with(const char *root, const cs_spool_sys *sys, cs_store *out);

#ifdef __cplusplus
}
#endif

#endif

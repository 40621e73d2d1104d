/*
 * What a capture array's writer (array_writer.c) and reader
 * (src/reader/array_reader.c) share: the walk over the catalog's candidates
 * that picks each slot's winner, and the fetch of the geometry record.
 */
#ifndef CAPSTORE_ARRAY_INTERNAL_H
#define CAPSTORE_ARRAY_INTERNAL_H

#include "capstore/capstore.h"
#include "runtime_internal.h"

#define RT_ARRAY_NONCE_HEX 32u
/* Slots one ARRAY_CANDIDATES request asks for (halved while an answer is too large for the adapter). */
#define RT_ARRAY_WINDOW_SLOTS 32768u
/* Every array record's tenant and session: one sink (one tenant and session) holds the writes of any array. */
#define RT_ARRAY_TENANT "capstore-arrays"
#define RT_ARRAY_SESSION "arrays"

/* One walk over ARRAY_CANDIDATES: the geometry's winner, and `winner` called once per slot with its winner. */
#define RT_ARRAY_READ_TRIES 5u /* a catalog read refused without an answer: tries before the caller hears of it */

typedef struct rt_array_walk {
  uint64_t chunks;                                  /* slots at or past it are not the array's: skipped */
  uint64_t slot_from, slot_to;                      /* the slots asked for, with the geometry (slot_to 0: all) */
  int (*winner)(void *ctx, const cs_array_candidate *c); /* nonzero stops the walk (out of memory) */
  void *ctx;
  /* The answer */
  bool have_geometry;
  cs_array_candidate geometry;                      /* its texts not kept */
  char geometry_nonce[RT_ARRAY_NONCE_HEX + 1];      /* cut to RT_ARRAY_NONCE_HEX bytes */
  char geometry_hash[CS_ARRAY_META_HASH_HEX + 1];   /* its sequence_id: chunks written for another are skipped */
  bool out_of_order;
  cs_array_arbiter arbiter; /* the walk's state */
  uint32_t requests;        /* catalog requests the walk made: the head, then one a window of slots */
} rt_array_walk;

/*
 * Asks the catalog for the head's watermark and then the array's candidates
 * at it, in windows of RT_ARRAY_WINDOW_SLOTS slots (one request up to that
 * many chunks; halved when an answer is too large); fills walk's answer and calls walk->winner for
 * each slot's winner: the first candidate of the slot in the catalog's
 * order (which is checked) among those written for the geometry that won
 * (its hash in the record's sequence_id). Chunks written for another
 * geometry (a writer that lost the array's creation to another geometry)
 * never take a slot, and without a visible geometry no chunk does. CS_E_OK, CS_E_IO (the catalog did not answer,
 * msg says), CS_E_CORRUPT (out of order), or the winner callback's code.
 */
/* *kind_checked: the handle's capstore_catalog_check passed (run first when false; one request, not counted). */
RT_HIDDEN int rt_array_winners(cs_catalog *catalog, bool *kind_checked, const char *id, rt_array_walk *walk, char *msg,
                               size_t msg_size);

/*
 * The geometry a candidate names: its record fetched whole, checked against its CRC-32, decoded, and its hash
 * (cs_array_meta_hash) checked against want_hash, the name its record carries.
 */
RT_HIDDEN int rt_array_geometry_fetch(cs_store *store, const cs_array_candidate *c, const char *want_hash,
                                      cs_array_meta *out, char *msg, size_t msg_size);

/* A nonce's 64-bit identity (FNV-1a over its text, never 0: a stamp's 0 means no write yet). */
RT_HIDDEN uint64_t rt_array_nonce_hash(const cs_pack_text *nonce);

#endif

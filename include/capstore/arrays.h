/*
 * capstore/arrays.h: capture arrays on the runtime (DESIGN.md section 7,
 * docs/arrays.md). An array has a fixed geometry; many writers, in many
 * processes, each fill some chunks (slots) in any order, each slot written
 * once; readers watch the fill and read slices while it is in progress.
 *
 *   Writer (any process that captures: publisher or capture role):
 *     capstore_array_writer_open(cs, &access, &meta, &w, msg, n);   // creates the array, or joins it
 *     capstore_array_write_chunk(w, index, bytes, len, msg, n);      // CS_E_SLOT_WRITTEN: taken
 *     capstore_array_flush(w, deadline, &report, msg, n);            // which writes won their slots
 *     capstore_array_writer_free(w);
 *
 *   Reader:
 *     capstore_array_open(reader, id, &a, msg, n);                   // geometry, winners, stamp
 *     capstore_array_read(a, &slice, out, out_len, unwritten, &stats, msg, n);
 *     capstore_array_refresh(a, msg, n); capstore_array_stamp(a, &stamp); capstore_array_written(a, ...);
 *     capstore_array_close(a);
 *
 * A chunk write is one record in an ordinary pack (catalog.h: hook
 * CS_ARRAY_HOOK_CHUNK, run_id the array id, sequence_id its geometry's
 * hash, request_id the write's nonce, step_number the slot; tenant and
 * session the same for every array, so one capstore instance writes any
 * number of arrays but no records of another tenant or session), so it
 * travels the spool, upload and the publisher's lease like every capture.
 * Who wins a slot:
 *   - a store that enforces If-None-Match (the dirstore; S3 services where
 *     cs_store_probe finds it): the writer first creates the slot's claim
 *     object arrays/<id>/slots/<index> create-only; the second claim is
 *     answered CS_E_SLOT_WRITTEN at once and never reaches the pack. A
 *     claim older than the access config's array_claim_ttl_ns whose slot
 *     has no visible record (its writer died before its record reached the
 *     spool) is taken over: deleted and made again. The catalog still
 *     decides: if the first claimer's record arrives after all, the slot's
 *     winner is the first indexed, and the other writer's flush says so;
 *   - any other store: every write's record is indexed, and the slot's
 *     winner is its candidate with the lowest first visible version
 *     (catalog.h, array_candidates); the others are refused, and their
 *     writers learn it from capstore_array_flush.
 * Readers take each slot's winner the same way, so a write is "accepted"
 * exactly when readers see it.
 */
#ifndef CAPSTORE_ARRAYS_H
#define CAPSTORE_ARRAYS_H

#include "capstore/array.h"
#include "capstore/array_chunk.h"
#include "capstore/array_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct capstore capstore;
typedef struct capstore_config capstore_config;
typedef struct capstore_reader capstore_reader;
typedef struct capstore_flush_report capstore_flush_report;

typedef struct capstore_array_writer capstore_array_writer;

/*
 * Opens a writer of the array meta describes on cs, creating the array or
 * joining it. access names the object store and catalog the array lives in
 * (only its store and catalog halves and name/key_prefix are read): for a
 * publisher, the config cs was opened with; for a capture-role process,
 * the daemon's. The geometry document is written as a record of its own
 * (hook CS_ARRAY_HOOK_GEOMETRY); where the store enforces If-None-Match it
 * is also claimed at arrays/<id>/geometry, whose first creator wins (a
 * probe of the store that cannot answer refuses the open). An array that exists
 * with another geometry is refused with CS_E_CONFLICT naming the field
 * that differs (found at open where the geometry is claimed or already
 * visible, otherwise by capstore_array_flush). Creating an array that
 * exists with the same geometry joins it.
 */
int capstore_array_writer_open(capstore *cs, const capstore_config *access, const cs_array_meta *meta,
                               capstore_array_writer **out, char *msg, size_t msg_size);

/*
 * Writes chunk `index`: exactly cs_array_chunk_bytes(geometry, index) bytes
 * of elements in C order (an all-zero chunk counts as written). Encodes the
 * stored form (Blosc when the array's codec says so), claims the slot where
 * the store enforces If-None-Match, and hands the record to cs (returns
 * once it is admitted, like capstore_write). CS_E_INVALID_ARGUMENT for an
 * index out of range or a wrong size (msg names which); CS_E_SLOT_WRITTEN
 * when the slot is known to be taken (written before through this writer,
 * refused at the claim, or seen won by another write at the last flush);
 * capstore_write's errors otherwise (CS_E_INVALID_ARGUMENT naming the
 * reason when cs already holds records of another tenant or session).
 * Safe from several threads on one writer.
 */
int capstore_array_write_chunk(capstore_array_writer *w, uint64_t index, const void *elements, size_t len, char *msg,
                               size_t msg_size);

#define CS_ARRAY_REFUSED_NAMED 16u
typedef struct capstore_array_flush_report {
  uint64_t writes;     /* writes this writer made (accepted at write_chunk) */
  uint64_t accepted;   /* of them, the winners of their slots, visible to readers */
  uint64_t refused;    /* of them, slots another write won (the first write stays) */
  uint64_t owed;       /* of them, not yet visible (the flush timed out) */
  uint32_t refused_named;
  uint64_t refused_slots[CS_ARRAY_REFUSED_NAMED]; /* the first refused slots, ascending */
  bool geometry_conflict;                           /* the array's geometry is another's */
  char geometry_diff[64];                           /* the first field that differs */
  /* Writes since open whose record went out under a claim that replaced a stale one (arrays.claim_ttl) this
     writer read and deleted. When writers race for one stale claim, the one that deleted it may lose the new
     claim to another, and then nobody counts it. */
  uint64_t claims_taken_over;
} capstore_array_flush_report;

/*
 * Flushes cs (capstore_flush: every record captured before the call
 * queryable) and then asks the catalog, in one request, which slots this
 * writer's writes won. CS_E_OK: every write is accepted. CS_E_SLOT_WRITTEN:
 * every write is answered, and report->refused of them lost their slots
 * (msg names the first). CS_E_CONFLICT: the array's geometry is another's.
 * CS_E_TIMEOUT: not drained, or some writes still owed. capstore_flush's
 * other errors as they are. report may be NULL.
 */
int capstore_array_flush(capstore_array_writer *w, uint64_t deadline_ns, capstore_array_flush_report *report,
                         char *msg, size_t msg_size);

/* Frees the writer (its writes stay in cs, which must outlive the calls above). */
void capstore_array_writer_free(capstore_array_writer *w);

/* ---- Reading ------------------------------------------------------------------------- */

typedef struct capstore_array capstore_array;

/*
 * Opens array `id` on reader r (which must outlive it): one catalog request
 * for the array's candidates, then one GET of its geometry record (checked
 * against its CRC-32 and decoded). CS_E_NOT_FOUND when no geometry of the
 * array is visible yet.
 */
int capstore_array_open(capstore_reader *r, const char *id, capstore_array **out, char *msg, size_t msg_size);

/* The array's document (id, geometry, dtype, codec, attributes). */
const cs_array_meta *capstore_array_meta(const capstore_array *a);

/*
 * Asks the catalog again (one request) for each slot's winner and the
 * stamp. A slot, once written, keeps its winner: a refresh that finds
 * another, or a geometry that changed, is CS_E_CORRUPT.
 */
int capstore_array_refresh(capstore_array *a, char *msg, size_t msg_size);

/* The stamp of the last refresh (cs_array_stamp_make; changed_at_ns is the catalog version of the last write). */
void capstore_array_stamp(const capstore_array *a, cs_array_stamp *out);

/*
 * The written slots as of the last refresh: bit i of bitmap (bitmap_bytes
 * long, at least (chunks + 7) / 8, else CS_E_NO_MEMORY) set when slot i
 * holds data. *written gets the count.
 */
int capstore_array_written(const capstore_array *a, uint8_t *bitmap, size_t bitmap_bytes, uint64_t *written);

typedef struct capstore_array_read_stats {
  uint64_t catalog_requests;
  cs_array_read_stats chunks; /* ranged reads, bytes, units verified, Blosc blocks decoded */
  uint64_t chunks_read;       /* written chunks the slice overlapped */
  uint64_t chunks_unwritten;  /* unwritten chunks the slice overlapped (read as zeros) */
} capstore_array_read_stats;

/*
 * Reads slice s into out (dense C order, out_len must be exactly the
 * slice's bytes). Refreshes first (one catalog request), so nothing read is
 * older than the stamp it was judged against: a slot unwritten at an
 * earlier refresh is never read as zeros after it was written. Fetches
 * only the chunks the slice overlaps and, in each, only the verification
 * units (Blosc blocks) the slice needs, each verified before use.
 * Unwritten chunks read as zeros; where `unwritten` is not NULL (a bitmap
 * over chunk indices, unwritten_bytes long, at least (chunks + 7) / 8) their
 * bits are set and every other bit is cleared. CS_E_CORRUPT when stored
 * bytes fail their checks (msg names the chunk), CS_E_IO for a store error.
 */
int capstore_array_read(capstore_array *a, const cs_array_slice *s, void *out, size_t out_len, uint8_t *unwritten,
                        size_t unwritten_bytes, capstore_array_read_stats *stats, char *msg, size_t msg_size);

void capstore_array_close(capstore_array *a);

#ifdef __cplusplus
}
#endif

#endif

/*
 * The reader's internals (src/reader/): the search cursor's text form and the
 * filter's hash it carries. Not installed; the fuzz target includes it.
 */
#ifndef CAPSTORE_READER_INTERNAL_H
#define CAPSTORE_READER_INTERNAL_H

#include <pthread.h>

#include "capstore/capstore.h"

#define RD_HIDDEN __attribute__((visibility("hidden")))

/* GETs one read keeps in flight at most, and the reader's store's bound unless configured lower. */
#define RD_INFLIGHT_MAX 64u
/* Threads that copy each GET's records out and verify each pack as its reads come in. */
#define RD_WORKERS 2u
/* Span buffers: one per GET in flight, and one per worker so a copy never holds up the next GET. */
#define RD_SLOTS_MAX (RD_INFLIGHT_MAX + RD_WORKERS)

struct rd_slot;

/*
 * Payload memory the freed payloads of a reader's read hand back for its
 * next read: fresh memory is zeroed by the kernel at its first touch, which
 * cost as much CPU as the copies (docs/performance.md, "Reader"). Shared by
 * the reader and every payloads of it (which may outlive the reader): refs
 * counts them, and memory is kept only while the reader lives. Kept memory
 * is given back to the kernel lazily (MADV_FREE): it may reclaim it.
 */
typedef struct rd_spare {
  pthread_mutex_t mutex;
  uint32_t refs;
  bool reader_alive;
  uint8_t *memory; /* one arena, or NULL */
  uint64_t bytes;
} rd_spare;

struct capstore_reader {
  cs_store store;
  cs_catalog catalog;
  bool store_open, catalog_open;
  /*
   * The store's transfer engine failed with GETs in flight: the store still
   * holds those requests and their buffers, so they are kept here until the
   * store is closed, and the reader refuses further reads.
   */
  bool broken;
  bool kind_checked; /* the catalog's schema_check passed (before the first query) */
  struct rd_slot *stranded;
  uint32_t stranded_count;
  void **orphans; /* other memory the failed engine's requests still name (an array read's), rd_orphan */
  uint32_t orphan_count;
  /* Span buffers kept from one read to the next (the first touch of fresh memory is slow). */
  uint8_t *buffers[RD_SLOTS_MAX];
  size_t buffer_bytes[RD_SLOTS_MAX];
  rd_spare *spare;
  /* Calls on one reader run one at a time (capstore.h): the catalog connection, the store, the kept buffers. */
  pthread_mutex_t lock;
};

/* The twelve text fields of a record, in one order. */
RD_HIDDEN void rd_meta_texts(cs_pack_meta *m, cs_pack_text *out[12]);

/* Frees what reads left with the reader: kept buffers, the spare arena, and stranded requests (after the store is
   closed). */
RD_HIDDEN void rd_read_release(capstore_reader *r);

/* Keeps p until the store is closed (then rd_read_release frees it): memory a stranded request names. Out of
   memory, p is left to leak rather than freed under the store. */
RD_HIDDEN void rd_orphan(capstore_reader *r, void *p);

/* A reader's spare (refs 1), or NULL when out of memory. */
RD_HIDDEN rd_spare *rd_spare_new(void);

/* What a cursor carries: the pinned watermark, the filter's hash and the last row's position. */
typedef struct rd_cursor {
  uint64_t watermark;
  uint8_t filter_hash[8];
  cs_search_key after;
} rd_cursor;

/* The first 8 bytes of the SHA-256 of the filter's canonical encoding (every field, tagged, with lengths). */
int rd_filter_hash(const cs_search_filter *filter, uint8_t out[8]);

/* Writes c as cursor text (NUL-terminated) into out[size]; CS_E_TOO_LARGE when it does not fit. */
int rd_cursor_format(const rd_cursor *c, char *out, size_t size);

/*
 * Parses cursor text. CS_E_PARSE with msg naming what is wrong: not a
 * capstore cursor (prefix, length, characters), a check that fails (the
 * text was changed: damaged or forged), fields out of range.
 */
int rd_cursor_parse(const char *text, size_t len, rd_cursor *out, char *msg, size_t msg_size);

#endif

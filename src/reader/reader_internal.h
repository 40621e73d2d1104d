/*
 * The reader's internals (src/reader/): the search cursor's text form and the
 * filter's hash it carries. Not installed; the fuzz target includes it.
 */
#ifndef CAPSTORE_READER_INTERNAL_H
#define CAPSTORE_READER_INTERNAL_H

#include "capstore/capstore.h"

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

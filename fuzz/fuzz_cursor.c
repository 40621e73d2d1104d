/*
 * libFuzzer target for the search cursor's parser (src/reader/cursor.c): any
 * bytes as a cursor. A cursor that parses must be canonical: formatting what
 * was parsed gives the same text back (so no two texts name one position,
 * and a changed character is always caught). The parser must not read past
 * the text, and a refusal must say what is wrong.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/reader/reader_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1); /* exactly the text: ASan sees any read past it */
  if (text == NULL) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  rd_cursor c;
  char msg[256];
  int rc = rd_cursor_parse(text, size, &c, msg, sizeof msg);
  if (rc == CS_E_OK) {
    static char again[CAPSTORE_CURSOR_MAX];
    if (rd_cursor_format(&c, again, sizeof again) != CS_E_OK) abort();
    if (strlen(again) != size || memcmp(again, text, size) != 0) abort();
    if (c.after.capture_id_len > CS_SEARCH_KEY_ID_MAX) abort();
  } else if (rc != CS_E_PARSE || strncmp(msg, "cursor: ", 8) != 0) {
    abort();
  }
  free(text);
  return 0;
}

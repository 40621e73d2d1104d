/*
 * cli_walk.c: the tools' two walks, page by page: every object key under a
 * prefix (the store's LIST) and every pack of the catalog at a watermark
 * (list_packs). The walk owns the page buffer and the paging; each item goes
 * to the caller's callback.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

#define WALK_PAGE 1000u

/* "<what>: <error or outcome>[: <detail>]" into err; the walk's answer for it. */
static int walk_failed(const char *what, int rc, cs_outcome outcome, const char *detail, char *err, size_t err_size) {
  snprintf(err, err_size, "%s: %s%s%s", what, rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(outcome),
           detail[0] != '\0' ? ": " : "", detail);
  return rc != CS_E_OK ? rc : CS_E_IO;
}

int cli_store_walk(cs_store *store, const char *prefix, cli_key_fn each, void *context, char *err, size_t err_size) {
  assert(store != NULL && prefix != NULL && each != NULL);
  char(*keys)[CS_KEY_MAX] = calloc(WALK_PAGE, CS_KEY_MAX);
  if (keys == NULL) return snprintf(err, err_size, "store: out of memory"), CS_E_NO_MEMORY;
  char token[CS_KEY_MAX] = "";
  int rc = CS_E_OK;
  do {
    cs_list_page page = {.keys = keys, .key_capacity = WALK_PAGE};
    cs_store_result res = {0};
    rc = store->ops->list(store->self, prefix, token, WALK_PAGE, &page, &res);
    if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
      rc = walk_failed("store LIST", rc, res.outcome, res.detail, err, err_size);
      break;
    }
    assert(page.key_count <= WALK_PAGE);
    for (uint32_t k = 0; k < page.key_count && rc == CS_E_OK; k++) rc = each(context, keys[k]);
    snprintf(token, sizeof token, "%s", page.next_token);
  } while (rc == CS_E_OK && token[0] != '\0');
  free(keys);
  return rc;
}

int cli_catalog_walk(cs_catalog *cat, uint64_t watermark, cli_pack_fn each, void *context, char *err,
                     size_t err_size) {
  assert(cat != NULL && each != NULL);
  cs_inventory_row *rows = calloc(WALK_PAGE, sizeof *rows);
  if (rows == NULL) return snprintf(err, err_size, "catalog: out of memory"), CS_E_NO_MEMORY;
  cs_uuid after;
  int rc = CS_E_OK;
  for (bool first = true; rc == CS_E_OK; first = false) {
    uint32_t count = 0;
    cs_catalog_result res = {0};
    rc = cat->ops->list_packs(cat->self, watermark, first ? NULL : &after, rows, WALK_PAGE, &count, &res);
    if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
      rc = walk_failed("catalog list_packs", rc, res.outcome, res.detail, err, err_size);
      break;
    }
    assert(count <= WALK_PAGE);
    for (uint32_t i = 0; i < count && rc == CS_E_OK; i++) rc = each(context, &rows[i]);
    if (count < WALK_PAGE) break; /* a page shorter than asked for is the last (catalog.h) */
    after = rows[count - 1].ref.pack_id;
  }
  free(rows);
  return rc;
}

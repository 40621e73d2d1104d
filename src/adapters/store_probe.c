/*
 * The store probes (include/capstore/store.h): what a store does where
 * stores differ, found by asking it, for every store behind store.h.
 */
#include <stdio.h>
#include <string.h>

#include "capstore/store.h"

static bool answered(int rc, const cs_store_result *res) { return rc == CS_E_OK && res->outcome == CS_OUT_OK; }

int cs_store_probe_conditional_create(cs_store *store, const char *probe_key, cs_store_result *res) {
  if (store == NULL || store->ops == NULL || probe_key == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  static const char probe_bytes[] = "capstore conditional create probe";
  cs_store_result second, cleanup;
  store->enforces_if_none_match = false;
  int rc = store->ops->put(store->self, probe_key, probe_bytes, sizeof probe_bytes - 1, NULL, false, res);
  if (answered(rc, res)) {
    rc = store->ops->put(store->self, probe_key, probe_bytes, sizeof probe_bytes - 1, NULL, true, &second);
    if (rc == CS_E_OK) {
      store->enforces_if_none_match = second.outcome == CS_OUT_PRECONDITION;
      *res = second.outcome == CS_OUT_PRECONDITION || second.outcome == CS_OUT_OK ? *res : second;
    }
  }
  /* Whatever was answered, the key may exist (a PUT whose outcome is unknown): delete it. */
  (void)store->ops->del(store->self, probe_key, &cleanup);
  return rc;
}

int cs_store_probe_suffix_range(cs_store *store, const char *probe_key, cs_store_result *res) {
  if (store == NULL || store->ops == NULL || probe_key == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  enum { SIZE = 256, TAIL = 16 };
  uint8_t bytes[SIZE], got[SIZE];
  for (size_t i = 0; i < SIZE; i++) bytes[i] = (uint8_t)(i * 13 + 5);
  store->exact_suffix_ranges = false;
  cs_store_result answer, cleanup;
  int rc = store->ops->put(store->self, probe_key, bytes, SIZE, NULL, false, res);
  if (answered(rc, res)) {
    cs_range tail = {.length = TAIL, .suffix = true};
    size_t n = 0;
    rc = store->ops->get(store->self, probe_key, &tail, got, sizeof got, &n, &answer);
    if (rc == CS_E_OK && answer.outcome == CS_OUT_OK) {
      store->exact_suffix_ranges = n == TAIL && memcmp(got, bytes + SIZE - TAIL, TAIL) == 0;
    } else if (rc == CS_E_OK && answer.outcome != CS_OUT_INVALID) {
      *res = answer; /* no answer to judge: an outage, a refusal */
    }
  }
  (void)store->ops->del(store->self, probe_key, &cleanup); /* even after an unknown PUT */
  return rc;
}

int cs_store_probe_list_order(cs_store *store, const char *probe_prefix, cs_store_result *res) {
  if (store == NULL || store->ops == NULL || probe_prefix == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  static const char *const names[] = {"a", "a-b", "a/b"}; /* bytewise order */
  enum { NAMES = 3, PAGES_MAX = 8 };
  char keys[NAMES][CS_KEY_MAX];
  size_t prefix_len = strlen(probe_prefix);
  if (prefix_len + 4 > CS_KEY_MAX - 1) return CS_E_INVALID_ARGUMENT;
  store->lists_bytewise = false;
  int rc = CS_E_OK;
  size_t written = 0;
  /* Written out of order, so a store that keeps insertion order is not taken for bytewise. */
  static const int put_order[NAMES] = {2, 0, 1};
  for (size_t i = 0; i < NAMES; i++) snprintf(keys[i], CS_KEY_MAX, "%s%s", probe_prefix, names[i]);
  for (; written < NAMES; written++) {
    rc = store->ops->put(store->self, keys[put_order[written]], "x", 1, NULL, false, res);
    if (!answered(rc, res)) {
      written++; /* its outcome may be unknown: it is deleted too */
      break;
    }
  }
  if (answered(rc, res) && written == NAMES) {
    char page_keys[1][CS_KEY_MAX];
    cs_list_page page = {.keys = page_keys, .key_capacity = 1};
    char token[CS_KEY_MAX] = "";
    size_t seen = 0;
    bool in_order = true;
    for (int pages = 0; pages < PAGES_MAX; pages++) {
      rc = store->ops->list(store->self, probe_prefix, token, 1, &page, res);
      if (!answered(rc, res)) break;
      for (uint32_t i = 0; i < page.key_count && i < 1; i++, seen++) {
        if (seen >= NAMES || strcmp(page_keys[i], keys[seen]) != 0) in_order = false;
      }
      if (page.next_token[0] == '\0') break; /* an empty page with a token goes on (PAGES_MAX bounds it) */
      memcpy(token, page.next_token, CS_KEY_MAX);
    }
    if (answered(rc, res)) store->lists_bytewise = in_order && seen == NAMES;
  }
  cs_store_result cleanup;
  for (size_t i = 0; i < written; i++) (void)store->ops->del(store->self, keys[put_order[i]], &cleanup);
  return rc;
}

int cs_store_probe(cs_store *store, const char *probe_prefix, cs_store_result *res) {
  if (store == NULL || store->ops == NULL || probe_prefix == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  char key[CS_KEY_MAX];
  if (snprintf(key, sizeof key, "%sconditional-create", probe_prefix) >= (int)sizeof key) return CS_E_INVALID_ARGUMENT;
  int rc = cs_store_probe_conditional_create(store, key, res);
  if (!answered(rc, res)) return rc;
  snprintf(key, sizeof key, "%ssuffix-range", probe_prefix);
  rc = cs_store_probe_suffix_range(store, key, res);
  if (!answered(rc, res)) return rc;
  if (snprintf(key, sizeof key, "%slist/", probe_prefix) >= (int)sizeof key) return CS_E_INVALID_ARGUMENT;
  return cs_store_probe_list_order(store, key, res);
}

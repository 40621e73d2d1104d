/*
 * The asynchronous form of the store contract (include/capstore/store.h)
 * for every store: stores with ops->start keep requests in flight, the
 * others carry each one out inside cs_store_start and queue it as done.
 */
#include <stdio.h>
#include <string.h>

#include "capstore/store.h"

#define KEY_QUOTE_MAX 120u /* bytes of a refused key a message shows */

/* Longest part of a key a refusal quotes; the rest is "...". */

/*
 * The length (1 or 2) of the first "." or ".." segment of key[0..len), or 0
 * if none; a prefix's last segment, not yet ended by a '/', is not one.
 */
static size_t dot_segment(const char *key, size_t len, bool is_prefix) {
  for (size_t start = 0; start <= len;) {
    const char *slash = memchr(key + start, '/', len - start);
    size_t end = slash != NULL ? (size_t)(slash - key) : len;
    size_t seg = end - start;
    bool complete = slash != NULL || !is_prefix;
    if (complete && (seg == 1 || seg == 2) && key[start] == '.' && key[end - 1] == '.') return seg;
    start = end + 1;
  }
  return 0;
}

/* What is wrong with key (not NULL), or NULL when it is one the rule allows. */
static const char *key_problem(const char *key, bool is_prefix) {
  size_t len = strnlen(key, CS_KEY_MAX);
  if (len == 0 && !is_prefix) return "is empty";
  if (len >= CS_KEY_MAX) return "is CS_KEY_MAX (1024) bytes or longer";
  switch (dot_segment(key, len, is_prefix)) {
    case 1: return "has a '.' segment (keys are sent as written; HTTP and file systems would resolve it)";
    case 2: return "has a '..' segment (keys are sent as written; HTTP and file systems would resolve it)";
    default: return NULL;
  }
}

int cs_store_key_check(const char *key, bool is_prefix, char *why, size_t why_size) {
  if (why_size > 0) why[0] = '\0';
  if (key == NULL && is_prefix) return CS_E_OK;
  const char *problem = key == NULL ? "is missing (NULL)" : key_problem(key, is_prefix);
  if (problem == NULL) return CS_E_OK;
  if (why_size > 0) {
    char quoted[KEY_QUOTE_MAX * 4 + 8] = "";
    if (key != NULL) cs_quote_bytes(key, strlen(key), KEY_QUOTE_MAX, quoted, sizeof quoted);
    snprintf(why, why_size, "%s '%s' %s", is_prefix ? "key prefix" : "key", quoted, problem);
  }
  return CS_E_INVALID_ARGUMENT;
}

void cs_store_request_run(cs_store *store, cs_store_request *req) {
  const cs_store_ops *ops = store->ops;
  memset(&req->res, 0, sizeof req->res);
  req->got = 0;
  switch (req->op) {
    case CS_STORE_PUT:
      req->rc = ops->put(store->self, req->key, req->bytes, req->len, req->meta, req->if_none_match, &req->res);
      break;
    case CS_STORE_HEAD:
      memset(&req->info, 0, sizeof req->info);
      req->rc = ops->head(store->self, req->key, &req->info, &req->res);
      break;
    case CS_STORE_GET:
      req->rc = ops->get(store->self, req->key, req->has_range ? &req->range : NULL, req->buf, req->cap, &req->got,
                         &req->res);
      break;
    case CS_STORE_LIST:
      req->rc = ops->list(store->self, req->key ? req->key : "", req->token ? req->token : "", req->max_keys,
                          req->page, &req->res);
      break;
    case CS_STORE_DEL:
      req->rc = ops->del(store->self, req->key, &req->res);
      break;
    default:
      req->rc = CS_E_INVALID_ARGUMENT;
      break;
  }
}

/* True when the key rule refuses req's key: req is answered here (rc, res), nothing sent. */
static bool key_refused(cs_store_request *req) {
  char why[sizeof req->res.detail];
  if (cs_store_key_check(req->key, req->op == CS_STORE_LIST, why, sizeof why) == CS_E_OK) return false;
  memset(&req->res, 0, sizeof req->res);
  req->res.outcome = CS_OUT_INVALID;
  memcpy(req->res.detail, why, sizeof why);
  req->rc = CS_E_INVALID_ARGUMENT;
  return true;
}

int cs_store_start(cs_store *store, cs_store_request *req) {
  if (store == NULL || store->ops == NULL || req == NULL) return CS_E_INVALID_ARGUMENT;
  if (req->op < CS_STORE_PUT || req->op > CS_STORE_DEL) return CS_E_INVALID_ARGUMENT;
  if (req->internal != NULL) return CS_E_STATE; /* in flight, or answered and not yet reaped */
  if (key_refused(req)) return req->rc;
  req->next = NULL;
  if (store->ops->start != NULL) return store->ops->start(store->self, req);
  cs_store_request_run(store, req);
  if (req->rc != CS_E_OK) return req->rc;
  req->internal = store; /* queued until reaped */
  if (store->done_tail != NULL) store->done_tail->next = req;
  else store->done_head = req;
  store->done_tail = req;
  return CS_E_OK;
}

int cs_store_reap(cs_store *store, uint32_t timeout_ms, cs_store_request **done) {
  if (store == NULL || store->ops == NULL || done == NULL) return CS_E_INVALID_ARGUMENT;
  *done = NULL;
  if (store->done_head != NULL) {
    *done = store->done_head;
    store->done_head = (*done)->next;
    if (store->done_head == NULL) store->done_tail = NULL;
    (*done)->next = NULL;
    (*done)->internal = NULL;
    return 1;
  }
  if (store->ops->reap == NULL) return 0;
  return store->ops->reap(store->self, timeout_ms, done);
}

void cs_store_wakeup(cs_store *store) {
  if (store == NULL || store->ops == NULL || store->ops->wakeup == NULL) return;
  store->ops->wakeup(store->self);
}

void cs_store_close(cs_store *store) {
  if (store == NULL || store->ops == NULL) return;
  /* Queued and never handed back: abandoned, as the adapter's close abandons what it has in flight. */
  for (cs_store_request *req = store->done_head, *next; req != NULL; req = next) {
    next = req->next;
    req->next = NULL;
    req->internal = NULL;
    req->rc = CS_E_CLOSED;
  }
  store->ops->close(store->self);
  *store = (cs_store){0};
}

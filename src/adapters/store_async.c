/*
 * The asynchronous form of the store contract (include/capstore/store.h)
 * for every store: stores with ops->start keep requests in flight, the
 * others carry each one out inside cs_store_start and queue it as done.
 */
#include <string.h>

#include "capstore/store.h"

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

int cs_store_start(cs_store *store, cs_store_request *req) {
  if (store == NULL || store->ops == NULL || req == NULL) return CS_E_INVALID_ARGUMENT;
  if (req->op < CS_STORE_PUT || req->op > CS_STORE_DEL) return CS_E_INVALID_ARGUMENT;
  if (req->internal != NULL) return CS_E_STATE; /* in flight, or answered and not yet reaped */
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

/*
 * The footer cache: parsed footers of packs sealed (or recovered) in this
 * process, so INDEX need not read and parse a footer again. A prefetch
 * thread parses each newly sealed pack's footer while the pack uploads (the
 * parse is most of an INDEX's time: 100-150 ms for 4,096 records here, the
 * SQL or HTTP of it a fraction). Purely an optimization: INDEX parses a
 * footer itself when the cache does not hold it, and a full queue or cache
 * drops, never blocks. Bounded: RS_FOOTER_CACHE parsed footers,
 * RS_PREFETCH_MAX queued pack ids.
 */
#include "rs_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Takes the cache's entry for pack_id into *out (CS_E_OK), or CS_E_NOT_FOUND. */
int rs_footer_take(rs_runtime *rt, const cs_uuid *pack_id, cs_pack_footer *out) {
  rs_footers *fc = &rt->footers;
  int rc = CS_E_NOT_FOUND;
  pthread_mutex_lock(&fc->mutex);
  for (uint32_t i = 0; i < RS_FOOTER_CACHE && rc != CS_E_OK; i++) {
    if (!fc->entries[i].used || !cs_uuid_equal(&fc->entries[i].pack_id, pack_id)) continue;
    *out = fc->entries[i].footer;
    fc->entries[i].used = false;
    rc = CS_E_OK;
  }
  pthread_mutex_unlock(&fc->mutex);
  if (rc == CS_E_OK) atomic_fetch_add(&fc->hits, 1);
  return rc;
}

/* Gives footer to the cache (it owns it then), evicting the oldest entry when full. */
void rs_footer_put(rs_runtime *rt, const cs_uuid *pack_id, cs_pack_footer *footer) {
  rs_footers *fc = &rt->footers;
  cs_pack_footer evicted = {0};
  pthread_mutex_lock(&fc->mutex);
  uint32_t at = 0;
  for (uint32_t i = 0; i < RS_FOOTER_CACHE; i++) {
    if (!fc->entries[i].used) {
      at = i;
      break;
    }
    if (fc->entries[i].seq < fc->entries[at].seq) at = i;
  }
  if (fc->entries[at].used) evicted = fc->entries[at].footer;
  fc->entries[at] = (rs_footer_entry){.pack_id = *pack_id, .footer = *footer, .used = true, .seq = ++fc->seq};
  pthread_mutex_unlock(&fc->mutex);
  memset(footer, 0, sizeof *footer);
  cs_pack_footer_free(&evicted);
}

/* From any thread (the sealer's on_sealed): queues pack_id for the prefetch thread; dropped when full. */
void rs_footer_prefetch(rs_runtime *rt, const cs_uuid *pack_id) {
  rs_footers *fc = &rt->footers;
  pthread_mutex_lock(&fc->mutex);
  if (fc->started && fc->queued < RS_PREFETCH_MAX) {
    fc->queue[(fc->head + fc->queued) % RS_PREFETCH_MAX] = *pack_id;
    fc->queued++;
    pthread_cond_signal(&fc->cond);
  }
  pthread_mutex_unlock(&fc->mutex);
}

static void *prefetch_main(void *context) {
  rs_runtime *rt = context;
  rs_footers *fc = &rt->footers;
  pthread_mutex_lock(&fc->mutex);
  for (;;) {
    while (fc->queued == 0 && !fc->stop) pthread_cond_wait(&fc->cond, &fc->mutex);
    if (fc->stop) break;
    cs_uuid id = fc->queue[fc->head];
    fc->head = (fc->head + 1) % RS_PREFETCH_MAX;
    fc->queued--;
    pthread_mutex_unlock(&fc->mutex);
    int fd = -1;
    cs_spool_entry entry;
    cs_pack_footer footer;
    char msg[160];
    if (cs_capture_open_pack(rs_capture(rt), &id, &fd, &entry) == CS_E_OK) {
      if (rs_footer_read_fd(fd, entry.size_bytes, &footer, NULL, msg, sizeof msg) == CS_E_OK) rs_footer_put(rt, &id, &footer);
      close(fd);
    }
    pthread_mutex_lock(&fc->mutex);
  }
  pthread_mutex_unlock(&fc->mutex);
  return NULL;
}

int rs_footers_start(rs_runtime *rt) {
  rs_footers *fc = &rt->footers;
  if (pthread_mutex_init(&fc->mutex, NULL) != 0 || pthread_cond_init(&fc->cond, NULL) != 0) return CS_E_NO_MEMORY;
  fc->initialized = true;
  if (pthread_create(&fc->thread, NULL, prefetch_main, rt) != 0) return CS_E_NO_MEMORY;
  pthread_mutex_lock(&fc->mutex);
  fc->started = true;
  pthread_mutex_unlock(&fc->mutex);
  return CS_E_OK;
}

void rs_footers_stop(rs_runtime *rt) {
  rs_footers *fc = &rt->footers;
  if (!fc->initialized) return;
  pthread_mutex_lock(&fc->mutex);
  bool started = fc->started;
  fc->stop = true;
  fc->started = false;
  pthread_cond_signal(&fc->cond);
  pthread_mutex_unlock(&fc->mutex);
  if (started) pthread_join(fc->thread, NULL);
  pthread_mutex_lock(&fc->mutex);
  for (uint32_t i = 0; i < RS_FOOTER_CACHE; i++)
    if (fc->entries[i].used) cs_pack_footer_free(&fc->entries[i].footer);
  memset(fc->entries, 0, sizeof fc->entries);
  pthread_mutex_unlock(&fc->mutex);
}

void rs_footers_free(rs_runtime *rt) {
  rs_footers *fc = &rt->footers;
  if (!fc->initialized) return;
  rs_footers_stop(rt);
  pthread_mutex_destroy(&fc->mutex);
  pthread_cond_destroy(&fc->cond);
  fc->initialized = false;
}

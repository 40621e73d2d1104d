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
#include "thread_name.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Under the mutex: frees entry i (its footer into *out when out, else freed by the caller from *drop). */
static void entry_take(rs_footers *fc, uint32_t i, cs_pack_footer *out) {
  *out = fc->entries[i].footer;
  fc->bytes -= fc->entries[i].footer_bytes;
  memset(&fc->entries[i], 0, sizeof fc->entries[i]);
}

/* Takes the cache's entry for pack_id into *out (CS_E_OK), or CS_E_NOT_FOUND. */
int rs_footer_take(rs_runtime *rt, const cs_uuid *pack_id, cs_pack_footer *out) {
  rs_footers *fc = &rt->footers;
  int rc = CS_E_NOT_FOUND;
  pthread_mutex_lock(&fc->mutex);
  /* Being parsed now: wait for it rather than parse it a second time on the same cores. */
  while (fc->parsing && cs_uuid_equal(&fc->parsing_id, pack_id)) pthread_cond_wait(&fc->parsed, &fc->mutex);
  for (uint32_t i = 0; i < RS_FOOTER_CACHE && rc != CS_E_OK; i++) {
    if (!fc->entries[i].used || !cs_uuid_equal(&fc->entries[i].pack_id, pack_id)) continue;
    entry_take(fc, i, out);
    rc = CS_E_OK;
  }
  pthread_mutex_unlock(&fc->mutex);
  if (rc == CS_E_OK) atomic_fetch_add(&fc->hits, 1);
  return rc;
}

/* Under the mutex: the oldest entry in use, or RS_FOOTER_CACHE when none. */
static uint32_t oldest(const rs_footers *fc) {
  uint32_t at = RS_FOOTER_CACHE;
  for (uint32_t i = 0; i < RS_FOOTER_CACHE; i++)
    if (fc->entries[i].used && (at == RS_FOOTER_CACHE || fc->entries[i].seq < fc->entries[at].seq)) at = i;
  return at;
}

/*
 * Gives footer (footer_bytes long in its pack) to the cache, which owns it
 * then; the oldest entries make room (RS_FOOTER_CACHE entries,
 * RS_FOOTER_CACHE_BYTES). A footer over RS_FOOTER_CACHED_MAX is freed.
 */
void rs_footer_put(rs_runtime *rt, const cs_uuid *pack_id, cs_pack_footer *footer, uint64_t footer_bytes) {
  rs_footers *fc = &rt->footers;
  if (footer_bytes > RS_FOOTER_CACHED_MAX || !fc->initialized) {
    cs_pack_footer_free(footer);
    return;
  }
  cs_pack_footer evicted[RS_FOOTER_CACHE];
  uint32_t evicted_count = 0;
  pthread_mutex_lock(&fc->mutex);
  uint32_t free_at = RS_FOOTER_CACHE;
  for (uint32_t i = 0; i < RS_FOOTER_CACHE && free_at == RS_FOOTER_CACHE; i++)
    if (!fc->entries[i].used) free_at = i;
  while (free_at == RS_FOOTER_CACHE || fc->bytes + footer_bytes > RS_FOOTER_CACHE_BYTES) {
    uint32_t at = oldest(fc);
    if (at == RS_FOOTER_CACHE) break;
    entry_take(fc, at, &evicted[evicted_count++]);
    if (free_at == RS_FOOTER_CACHE) free_at = at;
  }
  fc->entries[free_at] = (rs_footer_entry){.pack_id = *pack_id, .footer = *footer, .footer_bytes = footer_bytes,
                                           .used = true, .seq = ++fc->seq};
  fc->bytes += footer_bytes;
  pthread_mutex_unlock(&fc->mutex);
  memset(footer, 0, sizeof *footer);
  for (uint32_t i = 0; i < evicted_count; i++) cs_pack_footer_free(&evicted[i]);
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
  rt_thread_name("cs-footers");
  rs_footers *fc = &rt->footers;
  pthread_mutex_lock(&fc->mutex);
  for (;;) {
    while (fc->queued == 0 && !fc->stop) pthread_cond_wait(&fc->cond, &fc->mutex);
    if (fc->stop) break;
    cs_uuid id = fc->queue[fc->head];
    fc->head = (fc->head + 1) % RS_PREFETCH_MAX;
    fc->queued--;
    fc->parsing = true;
    fc->parsing_id = id;
    pthread_mutex_unlock(&fc->mutex);
    int fd = -1;
    cs_spool_entry entry;
    cs_pack_footer footer;
    char msg[160];
    uint64_t footer_bytes = 0;
    if (cs_capture_open_pack(rs_capture(rt), &id, &fd, &entry) == CS_E_OK) {
      if (rs_footer_read_fd(fd, entry.size_bytes, &footer, &footer_bytes, msg, sizeof msg) == CS_E_OK)
        rs_footer_put(rt, &id, &footer, footer_bytes);
      close(fd);
    }
    pthread_mutex_lock(&fc->mutex);
    fc->parsing = false;
    pthread_cond_broadcast(&fc->parsed);
  }
  pthread_mutex_unlock(&fc->mutex);
  return NULL;
}

int rs_footers_start(rs_runtime *rt) {
  rs_footers *fc = &rt->footers;
  if (pthread_mutex_init(&fc->mutex, NULL) != 0 || pthread_cond_init(&fc->cond, NULL) != 0 ||
      pthread_cond_init(&fc->parsed, NULL) != 0)
    return CS_E_NO_MEMORY;
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
  fc->bytes = 0;
  pthread_mutex_unlock(&fc->mutex);
}

void rs_footers_free(rs_runtime *rt) {
  rs_footers *fc = &rt->footers;
  if (!fc->initialized) return;
  rs_footers_stop(rt);
  pthread_mutex_destroy(&fc->mutex);
  pthread_cond_destroy(&fc->cond);
  pthread_cond_destroy(&fc->parsed);
  fc->initialized = false;
}

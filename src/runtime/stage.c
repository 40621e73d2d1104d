/*
 * The staging ring: variable-size entries in one contiguous byte area,
 * reserved in admission order under the capture mutex and filled by their
 * producers outside it. The worker consumes them in the same order, and
 * they are released in it too (after the writer is done with them). An
 * entry never straddles the end: the unused end is marked with a wrap entry.
 */
#include <assert.h>
#include <string.h>

#include "runtime_internal.h"

_Static_assert(sizeof(rt_entry) % RT_ALIGN == 0, "entries keep 64-byte alignment");

static uint64_t text_bytes(const cs_pack_meta *meta) {
  const cs_pack_text *texts[] = {
      &meta->capture_id, &meta->tenant_id, &meta->experiment_id, &meta->run_id,
      &meta->session_id, &meta->request_id, &meta->sequence_id, &meta->model_id,
      &meta->model_revision, &meta->adapter_revision, &meta->capture_policy_version,
      &meta->hook_name,
  };
  uint64_t total = 0;
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    if (texts[i]->bytes != NULL) total += texts[i]->len;
  }
  return total;
}

uint64_t rt_entry_size(const cs_pack_meta *meta, uint64_t length) {
  assert(meta != NULL);
  return sizeof(rt_entry) + rt_align_up(text_bytes(meta)) + rt_align_up(length);
}

bool rt_ring_fits(const rt_ring *ring, uint64_t size) {
  assert(size % RT_ALIGN == 0 && ring->used <= ring->capacity);
  if (ring->used == 0) return size <= ring->capacity;
  if (ring->used == ring->capacity) return false;
  if (ring->tail > ring->head) {
    /* Free: [tail, capacity) then [0, head). */
    return size <= ring->capacity - ring->tail || size <= ring->head;
  }
  assert(ring->tail < ring->head);
  return size <= ring->head - ring->tail;
}

rt_entry *rt_ring_reserve(rt_ring *ring, uint64_t size) {
  assert(rt_ring_fits(ring, size));
  if (ring->used == 0) { /* everything reserved was released: start over at 0 */
    assert(ring->released_count == ring->reserved_count);
    ring->head = ring->next = ring->tail = 0;
  }
  if (ring->tail >= ring->head && size > ring->capacity - ring->tail) {
    uint64_t waste = ring->capacity - ring->tail;
    rt_entry *wrap = (rt_entry *)(ring->base + ring->tail);
    wrap->kind = RT_ENTRY_WRAP;
    wrap->size = waste;
    atomic_store_explicit(&wrap->state, RT_ENTRY_READY, memory_order_relaxed);
    ring->used += waste;
    ring->tail = 0;
  }
  rt_entry *entry = (rt_entry *)(ring->base + ring->tail);
  atomic_store_explicit(&entry->state, RT_ENTRY_RESERVED, memory_order_relaxed);
  entry->kind = RT_ENTRY_RECORD;
  entry->size = size;
  entry->seq = ring->reserved_count++;
  entry->event = NULL;
  entry->err = CS_E_OK;
  ring->used += size;
  ring->tail += size;
  if (ring->tail == ring->capacity) ring->tail = 0;
  assert(ring->used <= ring->capacity);
  return entry;
}

rt_entry *rt_ring_next(rt_ring *ring) {
  assert(ring->consumed_count <= ring->reserved_count);
  if (ring->consumed_count == ring->reserved_count) return NULL;
  rt_entry *entry = (rt_entry *)(ring->base + ring->next);
  if (entry->kind == RT_ENTRY_WRAP) {
    assert(entry->size == ring->capacity - ring->next);
    ring->next = 0; /* its space is given back at release */
    entry = (rt_entry *)ring->base;
  }
  assert(entry->kind == RT_ENTRY_RECORD && entry->seq == ring->consumed_count);
  return entry;
}

void rt_ring_consume(rt_ring *ring, rt_entry *entry) {
  assert((uint8_t *)entry == ring->base + ring->next && entry->seq == ring->consumed_count);
  ring->next += entry->size;
  if (ring->next == ring->capacity) ring->next = 0;
  ring->consumed_count++;
}

void rt_ring_release_through(rt_ring *ring, uint64_t count) {
  assert(count <= ring->consumed_count);
  while (ring->released_count < count) {
    rt_entry *entry = (rt_entry *)(ring->base + ring->head);
    if (entry->kind == RT_ENTRY_WRAP) {
      assert(entry->size == ring->capacity - ring->head);
      ring->used -= entry->size;
      ring->head = 0;
      entry = (rt_entry *)ring->base;
    }
    assert(entry->kind == RT_ENTRY_RECORD && entry->seq == ring->released_count);
    assert(ring->used >= entry->size);
    ring->used -= entry->size;
    ring->head += entry->size;
    if (ring->head == ring->capacity) ring->head = 0;
    ring->released_count++;
    entry->kind = 0; /* a released entry is never read again */
  }
}

static void copy_text(uint8_t **cursor, cs_pack_text *dst, cs_pack_text src) {
  if (src.bytes == NULL) {
    dst->bytes = NULL;
    dst->len = 0;
    return;
  }
  if (src.len > 0) memcpy(*cursor, src.bytes, src.len);
  dst->bytes = (const char *)*cursor;
  dst->len = src.len;
  *cursor += src.len;
}

void rt_entry_fill_meta(rt_entry *entry, const cs_pack_meta *meta) {
  assert(entry != NULL && meta != NULL);
  entry->meta = *meta;
  uint8_t *cursor = (uint8_t *)entry + sizeof(rt_entry);
  cs_pack_meta *m = &entry->meta;
  copy_text(&cursor, &m->capture_id, meta->capture_id);
  copy_text(&cursor, &m->tenant_id, meta->tenant_id);
  copy_text(&cursor, &m->experiment_id, meta->experiment_id);
  copy_text(&cursor, &m->run_id, meta->run_id);
  copy_text(&cursor, &m->session_id, meta->session_id);
  copy_text(&cursor, &m->request_id, meta->request_id);
  copy_text(&cursor, &m->sequence_id, meta->sequence_id);
  copy_text(&cursor, &m->model_id, meta->model_id);
  copy_text(&cursor, &m->model_revision, meta->model_revision);
  copy_text(&cursor, &m->adapter_revision, meta->adapter_revision);
  copy_text(&cursor, &m->capture_policy_version, meta->capture_policy_version);
  copy_text(&cursor, &m->hook_name, meta->hook_name);
  entry->payload_offset = sizeof(rt_entry) + rt_align_up((uint64_t)(cursor - ((uint8_t *)entry + sizeof(rt_entry))));
  assert(entry->payload_offset + rt_align_up(entry->payload_len) == entry->size);
}

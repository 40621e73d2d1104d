/* Small containers of the pack module: a growable buffer, an arena, an id set. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "pack_internal.h"

static bool buf_reserve(pk_buf *buf, size_t extra) {
  if (buf->failed) return false;
  if (extra <= buf->cap - buf->len) return true;
  if (extra > SIZE_MAX / 2 - buf->len) {
    buf->failed = true;
    return false;
  }
  size_t cap = buf->cap < 256 ? 256 : buf->cap;
  while (cap - buf->len < extra) cap *= 2;
  uint8_t *data = realloc(buf->data, cap);
  if (data == NULL) {
    buf->failed = true;
    return false;
  }
  buf->data = data;
  buf->cap = cap;
  return true;
}

void pk_buf_put(pk_buf *buf, const void *bytes, size_t len) {
  assert(buf != NULL && (bytes != NULL || len == 0));
  if (len == 0 || !buf_reserve(buf, len)) return;
  memcpy(buf->data + buf->len, bytes, len);
  buf->len += len;
  assert(buf->len <= buf->cap);
}

void pk_buf_put_text(pk_buf *buf, const char *text) {
  assert(text != NULL);
  pk_buf_put(buf, text, strlen(text));
}

void pk_buf_put_u64(pk_buf *buf, uint64_t value) {
  char digits[20];
  uint32_t count = 0;
  do {
    digits[sizeof digits - 1 - count] = (char)('0' + value % 10);
    value /= 10;
    count++;
  } while (value != 0);
  assert(count <= sizeof digits);
  pk_buf_put(buf, digits + sizeof digits - count, count);
}

void pk_buf_put_i64(pk_buf *buf, int64_t value) {
  if (value >= 0) {
    pk_buf_put_u64(buf, (uint64_t)value);
    return;
  }
  pk_buf_put(buf, "-", 1);
  /* -(value + 1) + 1 avoids overflow at INT64_MIN. */
  pk_buf_put_u64(buf, (uint64_t)(-(value + 1)) + 1u);
}

void pk_buf_free(pk_buf *buf) {
  assert(buf != NULL);
  free(buf->data);
  buf->data = NULL;
  buf->len = 0;
  buf->cap = 0;
  buf->failed = false;
}

uint32_t pk_u64_digits(uint64_t value) {
  uint32_t count = 1;
  while (value >= 10) {
    value /= 10;
    count++;
  }
  assert(count <= 20);
  return count;
}

/* ---- Arena ---- */

#define ARENA_BLOCK_BYTES ((size_t)1 << 20)

typedef struct arena_block {
  struct arena_block *next;
  size_t used;
  size_t cap;
  char data[];
} arena_block;

struct pk_arena {
  arena_block *head;
};

pk_arena *pk_arena_new(void) { return calloc(1, sizeof(pk_arena)); }

const char *pk_arena_copy(pk_arena *arena, const char *bytes, size_t len) {
  assert(arena != NULL && (bytes != NULL || len == 0));
  if (len >= SIZE_MAX - sizeof(arena_block) - ARENA_BLOCK_BYTES) return NULL;
  arena_block *block = arena->head;
  if (block == NULL || block->cap - block->used < len + 1) {
    size_t cap = len + 1 > ARENA_BLOCK_BYTES ? len + 1 : ARENA_BLOCK_BYTES;
    block = malloc(sizeof(arena_block) + cap);
    if (block == NULL) return NULL;
    block->next = arena->head;
    block->used = 0;
    block->cap = cap;
    arena->head = block;
  }
  char *out = block->data + block->used;
  if (len > 0) memcpy(out, bytes, len);
  out[len] = '\0';
  block->used += len + 1;
  assert(block->used <= block->cap);
  return out;
}

void pk_arena_free(pk_arena *arena) {
  if (arena == NULL) return;
  arena_block *block = arena->head;
  while (block != NULL) {
    arena_block *next = block->next;
    free(block);
    block = next;
  }
  free(arena);
}

/* ---- Id set: open addressing over copies held in an arena ---- */

typedef struct idset_slot {
  uint64_t hash;
  const char *bytes; /* NULL: empty slot */
  size_t len;
} idset_slot;

struct pk_idset {
  idset_slot *slots;
  size_t slot_count; /* a power of two */
  size_t used;
  pk_arena *arena;
};

static uint64_t id_hash(const char *bytes, size_t len) {
  uint64_t hash = UINT64_C(0xcbf29ce484222325);
  for (size_t i = 0; i < len; i++) hash = (hash ^ (uint8_t)bytes[i]) * UINT64_C(0x100000001b3);
  hash ^= hash >> 33;
  hash *= UINT64_C(0xff51afd7ed558ccd);
  return hash ^ (hash >> 33);
}

pk_idset *pk_idset_new(void) {
  pk_idset *set = calloc(1, sizeof *set);
  if (set == NULL) return NULL;
  set->slot_count = 1024;
  set->slots = calloc(set->slot_count, sizeof(idset_slot));
  set->arena = pk_arena_new();
  if (set->slots == NULL || set->arena == NULL) {
    pk_idset_free(set);
    return NULL;
  }
  return set;
}

static idset_slot *idset_find(const pk_idset *set, uint64_t hash, const char *bytes, size_t len) {
  size_t mask = set->slot_count - 1;
  for (size_t probe = 0; probe < set->slot_count; probe++) {
    idset_slot *slot = &set->slots[(hash + probe) & mask];
    if (slot->bytes == NULL) return slot;
    if (slot->hash == hash && slot->len == len && memcmp(slot->bytes, bytes, len) == 0) {
      return slot;
    }
  }
  assert(!"id set full: the load factor bound was broken");
  return NULL;
}

static bool idset_grow(pk_idset *set) {
  size_t count = set->slot_count * 2;
  idset_slot *slots = calloc(count, sizeof(idset_slot));
  if (slots == NULL) return false;
  idset_slot *old = set->slots;
  size_t old_count = set->slot_count;
  set->slots = slots;
  set->slot_count = count;
  for (size_t i = 0; i < old_count; i++) {
    if (old[i].bytes == NULL) continue;
    *idset_find(set, old[i].hash, old[i].bytes, old[i].len) = old[i];
  }
  free(old);
  return true;
}

int pk_idset_add(pk_idset *set, const char *bytes, size_t len) {
  assert(set != NULL && set->used < set->slot_count);
  if ((set->used + 1) * 10 > set->slot_count * 7 && !idset_grow(set)) return -1;
  uint64_t hash = id_hash(bytes, len);
  idset_slot *slot = idset_find(set, hash, bytes, len);
  if (slot->bytes != NULL) return 0;
  const char *copy = pk_arena_copy(set->arena, bytes, len);
  if (copy == NULL) return -1;
  slot->hash = hash;
  slot->bytes = copy;
  slot->len = len;
  set->used++;
  return 1;
}

bool pk_idset_contains(const pk_idset *set, const char *bytes, size_t len) {
  assert(set != NULL);
  return idset_find(set, id_hash(bytes, len), bytes, len)->bytes != NULL;
}

void pk_idset_free(pk_idset *set) {
  if (set == NULL) return;
  free(set->slots);
  pk_arena_free(set->arena);
  free(set);
}

/*
 * capstore/catalog.h: the catalog adapter contract. Each primitive of
 * docs/catalog-protocol.md is one call and (apart from INDEX, which is
 * descriptors then inventory) one statement. Adapters validate or escape every
 * value and never retry. Implemented by ClickHouse (HTTP), SQLite (embedded)
 * and the simulator's model; tests/conformance_catalog.c runs one suite
 * against all of them.
 *
 * Return values as in store.h: CS_E_OK with res->outcome classified, or a
 * negative cs_err when nothing was sent.
 */
#ifndef CAPSTORE_CATALOG_H
#define CAPSTORE_CATALOG_H

#include "capstore/pack.h"
#include "capstore/service.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema version the adapters create; tables carry it in their names. */
#define CS_CATALOG_SCHEMA_VERSION 1u

typedef struct cs_catalog_result {
  cs_outcome outcome;
  int32_t server_code; /* ClickHouse "Code: N", SQLite result code; 0 when none */
  char detail[256];
} cs_catalog_result;

/* A pack to index: its identity and its footer's records. */
typedef struct cs_index_pack {
  const cs_pack_ref *ref;
  const cs_pack_record *records;
  uint32_t record_count;
} cs_index_pack;

/* A descriptor as a reader resolves it: one row per capture id, argMax(version). */
typedef struct cs_descriptor_row {
  cs_uuid pack_id;
  char key[CS_KEY_MAX];
  cs_pack_record record; /* text fields point into the adapter's row storage */
  uint64_t version;
} cs_descriptor_row;

/* A pack as the catalog's inventory names it: the row of its highest version at or below a watermark. */
typedef struct cs_inventory_row {
  cs_pack_ref ref; /* pack id, key, size, sha256, record count, created_at (index_bytes 0) */
  uint64_t version;
} cs_inventory_row;

/*
 * What a search selects. A text field with bytes == NULL, a list with count
 * 0 and a range whose has_ flag is false select every value; set fields
 * must all match (AND), a list matches any of its values (OR). Ranges are
 * inclusive, apart from the tokens' (a record's [token_start, token_end)
 * must meet [token_min, token_max)).
 */
#define CS_SEARCH_LIST_MAX 256u /* values of one list (hook names, capture ids) */
typedef struct cs_search_filter {
  cs_pack_text tenant_id;
  cs_pack_text experiment_id;
  cs_pack_text run_id;
  cs_pack_text session_id;
  cs_pack_text request_id;
  cs_pack_text sequence_id;
  cs_pack_text model_id;
  cs_pack_text model_revision;
  const cs_pack_text *hook_names; /* any of these */
  uint32_t hook_name_count;
  const cs_pack_text *capture_ids; /* any of these (select / resolve by id) */
  uint32_t capture_id_count;
  bool has_layer;
  int32_t layer_min, layer_max;
  bool has_step;
  uint64_t step_min, step_max;
  bool has_tokens;
  uint64_t token_min, token_max;
  bool has_captured_at;
  uint64_t captured_min_ns, captured_max_ns;
  bool has_dtype;
  cs_dtype dtype;
} cs_search_filter;

/*
 * A position in a search's order: (pack id bytes, record offset, capture id
 * bytes), the last row of a page. The capture id is copied (at most
 * CS_SEARCH_KEY_ID_MAX bytes: a longer one cannot end a page).
 */
#define CS_SEARCH_KEY_ID_MAX 4000u
typedef struct cs_search_key {
  cs_uuid pack_id;
  uint64_t offset;
  size_t capture_id_len;
  char capture_id[CS_SEARCH_KEY_ID_MAX];
} cs_search_key;

/* A search result: the descriptor and what a reader needs of its pack. */
typedef struct cs_search_row {
  cs_descriptor_row d;      /* pack id, key, record (text in the adapter's storage), version */
  uint64_t pack_size_bytes; /* the inventory row's, at d.version */
  uint8_t pack_sha256[32];
  uint64_t footer_offset;   /* the first multiple of 64 after the pack's last record (its rows at d.version) */
} cs_search_row;

/*
 * Capture arrays (docs/arrays.md). A chunk write is one record in an
 * ordinary pack, named by its descriptor: hook_name CS_ARRAY_HOOK_CHUNK,
 * run_id the array id, sequence_id the hash of the geometry it was written
 * for (cs_array_meta_hash), request_id the write's nonce, step_number the
 * slot. The array's geometry document is one record too (hook_name
 * CS_ARRAY_HOOK_GEOMETRY, sequence_id its own hash, step_number 0). Who wins a slot is decided from
 * the candidates by their first visible version (cs_array_candidate), never
 * by the highest: a pack indexed again later must not move a slot.
 */
#define CS_ARRAY_HOOK_CHUNK "capstore.array-chunk"
#define CS_ARRAY_HOOK_GEOMETRY "capstore.array-geometry"

/* One candidate of an array: one (pack id, capture id) at its lowest visible version. */
typedef struct cs_array_candidate {
  bool geometry;           /* the geometry document (hook CS_ARRAY_HOOK_GEOMETRY), not a chunk */
  uint64_t slot;           /* step_number: the chunk index */
  cs_pack_text nonce;      /* request_id (text in the adapter's storage until emit returns) */
  cs_pack_text geometry_hash; /* sequence_id: the geometry it was written for (the same storage) */
  cs_pack_text capture_id;
  cs_uuid pack_id;
  char key[CS_KEY_MAX];
  uint64_t offset;         /* the record in its pack */
  uint64_t stored_length;
  uint32_t crc32;
  uint64_t first_version;  /* its lowest version visible at the watermark */
} cs_array_candidate;

/*
 * Which candidates one ARRAY_CANDIDATES request answers: the geometry's
 * (with_geometry) and the chunks of slots [slot_from, slot_to). An array
 * too large for one answer is walked in windows of slots, each a request
 * (ClickHouse's answers are capped: docs/catalog-protocol.md).
 */
typedef struct cs_array_window {
  bool with_geometry;
  uint64_t slot_from;
  uint64_t slot_to;
} cs_array_window;

/* Called once per candidate, in order; a nonzero return stops the walk and is answered. */
typedef int (*cs_array_candidate_fn)(void *ctx, const cs_array_candidate *candidate);

typedef struct cs_catalog_ops {
  const char *name;
  /* Creates the versioned tables if absent; idempotent. Refuses (INVALID) tables that do not suit the client. */
  int (*schema_ensure)(void *self, cs_catalog_result *res);
  /*
   * Optional (NULL: nothing to check): creating nothing, refuses (INVALID)
   * tables present that do not suit this client, as schema_ensure does: a
   * replicated ClickHouse catalog's tables to a client without its quorum
   * and consistency settings, and back. Readers call it before their first
   * query.
   */
  int (*schema_check)(void *self, cs_catalog_result *res);
  int (*head)(void *self, const cs_uuid *lease_id, cs_cat_head *out, cs_catalog_result *res);
  int (*claim)(void *self, const cs_uuid *lease_id, uint64_t base_term, uint64_t ttl_ns, cs_catalog_result *res);
  int (*read_claims)(void *self, const cs_uuid *lease_id, uint64_t term, cs_claims *out, cs_catalog_result *res);
  /*
   * Writes the tombstone at term + 1, only while term is the head and every
   * claim at it is this lease's. The tombstone expires at now + margin_ns (the
   * fences' margin): the holder's own fenced writes fail at once, and nobody
   * else finds the head free before the writes the holder sent before it,
   * which land within the margin, have landed.
   */
  int (*release)(void *self, const cs_uuid *lease_id, uint64_t term, uint64_t margin_ns, cs_catalog_result *res);
  /* Fenced: applies only for the sole live holder of the head term, expiring after now + margin. */
  int (*index)(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version, const cs_index_pack *packs,
               uint32_t pack_count, cs_catalog_result *res);
  int (*publish)(void *self, const cs_uuid *lease_id, uint64_t margin_ns, uint64_t version, uint64_t term,
                 uint32_t pack_count, cs_catalog_result *res);
  int (*reject)(void *self, const cs_uuid *lease_id, uint64_t margin_ns, const cs_uuid *ids, uint32_t count,
                cs_catalog_result *res);
  /* held[i]: indexed at a version <= the watermark; rejected[i]: has a rejected row. */
  int (*committed)(void *self, const cs_uuid *ids, uint32_t count, bool *held, bool *rejected,
                   cs_catalog_result *res);
  /* Descriptors of one pack visible at watermark, one per capture id (argMax by version). */
  int (*read_descriptors)(void *self, uint64_t watermark, const cs_uuid *pack_id, cs_descriptor_row *rows,
                          uint32_t capacity, uint32_t *count, cs_catalog_result *res);
  /*
   * The packs indexed at a version <= watermark, one row each (its highest
   * such version), in the catalog's order of pack ids, after `after` (NULL:
   * from the first); at most capacity rows, *count gets how many. Paging
   * with the last row's pack id as `after` visits every such pack once; a
   * page shorter than capacity is the last. Inventory rows only: a pack
   * whose descriptors landed without its inventory (an orphan) is not listed.
   * For tools (fsck, status) and readers; the service never calls it.
   */
  int (*list_packs)(void *self, uint64_t watermark, const cs_uuid *after, cs_inventory_row *rows, uint32_t capacity,
                    uint32_t *count, cs_catalog_result *res);
  /*
   * The records visible at watermark that filter selects: descriptor rows
   * an inventory row names at their (pack_id, version), version <= the
   * watermark, of packs with no rejected row; one per (pack id, capture id),
   * its highest such version. In (pack id, offset, capture id) order, after
   * `after` (NULL: from the first); at most capacity rows. A page shorter
   * than capacity is the last. Text lives in the adapter until its next
   * call. CS_E_INVALID_ARGUMENT (nothing sent) for a list over
   * CS_SEARCH_LIST_MAX, a range whose min is over its max, or a NULL list
   * with a count.
   */
  int (*search)(void *self, uint64_t watermark, const cs_search_filter *filter, const cs_search_key *after,
                cs_search_row *rows, uint32_t capacity, uint32_t *count, cs_catalog_result *res);
  /*
   * The candidates of one array visible at watermark (visible as for
   * SEARCH: an inventory row names the row's (pack id, version) at or below
   * the watermark and the pack has no rejected row): the descriptor rows
   * whose run_id is array_id and whose hook_name is CS_ARRAY_HOOK_CHUNK
   * or CS_ARRAY_HOOK_GEOMETRY, one per (pack id, capture id) at its LOWEST
   * visible version. In one request, in the order (geometry first, then
   * slot, first_version, pack id bytes, capture id bytes): the first
   * candidate of each slot is the slot's winner. window (NULL: everything)
   * limits the answer to the geometry's candidates if asked and the chunks
   * of its slots. emit sees each in turn; a
   * nonzero return from it stops the walk and is returned (res still says
   * how the request went). CS_E_INVALID_ARGUMENT (nothing sent) for a NULL
   * argument or an empty id.
   */
  int (*array_candidates)(void *self, uint64_t watermark, const cs_pack_text *array_id, const cs_array_window *window,
                          cs_array_candidate_fn emit, void *ctx, cs_catalog_result *res);
  void (*close)(void *self);
} cs_catalog_ops;

typedef struct cs_catalog {
  const cs_catalog_ops *ops;
  void *self;
} cs_catalog;

/* CS_E_OK, or CS_E_INVALID_ARGUMENT with msg naming what is wrong with the filter (the adapters' check). */
int cs_search_filter_check(const cs_search_filter *filter, char *msg, size_t msg_size);

/* Sets key to row's position; CS_E_TOO_LARGE when its capture id is over CS_SEARCH_KEY_ID_MAX. */
int cs_search_key_of(const cs_search_row *row, cs_search_key *key);

/*
 * The bulk form of descriptor rows (src/adapters/catalog_util.c): one
 * TabSeparated line per record, the columns in CS_CATALOG_DESCRIPTOR_COLUMNS
 * order. Text is escaped as ClickHouse's TabSeparated input reads it
 * (backslash, tab, newline, carriage return and NUL as \\ \t \n \r \0), an
 * absent adapter_revision is \N, the shape is [d0,d1,...]. A NUL byte in the
 * key (the key rule, cs_catalog_index_keys_ok), any other absent text, an
 * unknown dtype or a rank over CS_PACK_RANK_MAX is refused. The ClickHouse
 * adapter sends INDEX's descriptor rows in this form; its size is what a
 * pack costs an INDEX.
 */
#define CS_CATALOG_DESCRIPTOR_COLUMNS                                                                          \
  "pack_id, key, capture_id, tenant_id, experiment_id, run_id, session_id, request_id, sequence_id, model_id,"   \
  " model_revision, adapter_revision, capture_policy_version, hook_name, layer_number, producer_rank,"          \
  " step_number, token_start, token_end, batch_position, dtype, shape, captured_at_ns, offset, stored_length,"  \
  " decoded_length, crc32, version"
#define CS_CATALOG_DESCRIPTOR_COLUMN_COUNT 28u

/*
 * Formats one descriptor row (ending in a newline) of record rec of pack ref
 * at version. Returns the row's length in bytes, or 0 when a value is
 * refused (above). Writes the row into out only when it fits in cap, like
 * snprintf without the terminator: out may be NULL with cap 0 to measure.
 */
size_t cs_catalog_tsv_row(const cs_pack_ref *ref, const cs_pack_record *rec, uint64_t version, char *out, size_t cap);

/*
 * The bytes a pack's descriptor rows cost an INDEX in the bulk form, with
 * the version at its widest (20 digits): what the runtime puts in
 * cs_pack_ref.index_bytes. The inventory row (one small row per pack) is not
 * counted. A record the bulk form refuses counts nothing (INDEX then refuses
 * the pack as invalid). ref->key must be set.
 */
uint64_t cs_catalog_index_bytes(const cs_pack_ref *ref, const cs_pack_record *records, uint32_t record_count);

/*
 * The key rule of INDEX, the same for every catalog: no NUL byte in a pack's
 * object key. The key names an object in the store and is a C string there
 * (cs_store_key_check); SQLite would store it and a reader that cut it at
 * the NUL would get another key. Record texts are not held to it: U+0000 is
 * a valid text character (docs/format.md) and every catalog keeps it byte
 * for byte. Every adapter checks the whole batch before it sends anything
 * and answers a batch that breaks the rule CS_E_OK with outcome
 * CS_OUT_INVALID and this detail. Each ref's key_len must be under
 * CS_KEY_MAX (the adapters answer CS_E_INVALID_ARGUMENT otherwise). Returns
 * true when every key is clean; false with detail naming the first offence,
 * the key quoted with control bytes as \xNN ("index: pack <id>: key
 * 'cat/a\x00b.dmi-pack' holds a NUL byte at byte 5"). The simulator's model
 * applies the same rule on its own (it does not link the adapters).
 */
bool cs_catalog_index_keys_ok(const cs_index_pack *packs, uint32_t pack_count, char *detail, size_t detail_size);

#ifdef __cplusplus
}
#endif

#endif

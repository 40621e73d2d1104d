/*
 * capstore_abi_layout: the size and field offsets of every struct a binding
 * mirrors without a compiler (python/capstore/_ffi.py, through ctypes). The
 * binding compares its own layout with this at import and refuses to load
 * a library it does not match, instead of reading fields at wrong offsets.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "capstore/capstore.h"

typedef struct abi_field {
  const char *type;
  size_t size;
  const char *field;
  size_t offset;
} abi_field;

#define F(type, field) {#type, sizeof(type), #field, offsetof(type, field)}

/* Grouped by struct, each struct's fields in declaration order. */
static const abi_field abi_fields[] = {
    F(cs_pack_text, bytes),
    F(cs_pack_text, len),
    F(cs_pack_meta, capture_id),
    F(cs_pack_meta, tenant_id),
    F(cs_pack_meta, experiment_id),
    F(cs_pack_meta, run_id),
    F(cs_pack_meta, session_id),
    F(cs_pack_meta, request_id),
    F(cs_pack_meta, sequence_id),
    F(cs_pack_meta, model_id),
    F(cs_pack_meta, model_revision),
    F(cs_pack_meta, adapter_revision),
    F(cs_pack_meta, capture_policy_version),
    F(cs_pack_meta, hook_name),
    F(cs_pack_meta, layer_number),
    F(cs_pack_meta, producer_rank),
    F(cs_pack_meta, step_number),
    F(cs_pack_meta, token_start),
    F(cs_pack_meta, token_end),
    F(cs_pack_meta, batch_position),
    F(cs_pack_meta, dtype),
    F(cs_pack_meta, rank),
    F(cs_pack_meta, shape),
    F(cs_pack_meta, captured_at_ns),
    F(cs_pack_record, meta),
    F(cs_pack_record, offset),
    F(cs_pack_record, stored_length),
    F(cs_pack_record, decoded_length),
    F(cs_pack_record, crc32),
    F(cs_descriptor_row, pack_id),
    F(cs_descriptor_row, key),
    F(cs_descriptor_row, record),
    F(cs_descriptor_row, version),
    F(cs_search_row, d),
    F(cs_search_row, pack_size_bytes),
    F(cs_search_row, pack_sha256),
    F(cs_search_row, footer_offset),
    F(cs_search_filter, tenant_id),
    F(cs_search_filter, experiment_id),
    F(cs_search_filter, run_id),
    F(cs_search_filter, session_id),
    F(cs_search_filter, request_id),
    F(cs_search_filter, sequence_id),
    F(cs_search_filter, model_id),
    F(cs_search_filter, model_revision),
    F(cs_search_filter, hook_names),
    F(cs_search_filter, hook_name_count),
    F(cs_search_filter, capture_ids),
    F(cs_search_filter, capture_id_count),
    F(cs_search_filter, has_layer),
    F(cs_search_filter, layer_min),
    F(cs_search_filter, layer_max),
    F(cs_search_filter, has_step),
    F(cs_search_filter, step_min),
    F(cs_search_filter, step_max),
    F(cs_search_filter, has_tokens),
    F(cs_search_filter, token_min),
    F(cs_search_filter, token_max),
    F(cs_search_filter, has_captured_at),
    F(cs_search_filter, captured_min_ns),
    F(cs_search_filter, captured_max_ns),
    F(cs_search_filter, has_dtype),
    F(cs_search_filter, dtype),
    F(capstore_selection, watermark),
    F(capstore_selection, count),
    F(capstore_selection, rows),
    F(capstore_selection, cursor),
    F(capstore_selection, storage_),
    F(capstore_read_options, byte_limit),
    F(capstore_read_options, request_limit),
    F(capstore_read_options, gap_bytes_max),
    F(capstore_read_options, span_bytes_max),
    F(capstore_read_options, inflight_max),
    F(capstore_read_options, retry_max),
    F(capstore_read_options, verify_sha256),
    F(capstore_read_cost, planned_requests),
    F(capstore_read_cost, planned_bytes),
    F(capstore_read_cost, payload_bytes),
    F(capstore_read_cost, packs),
    F(capstore_read_cost, requests),
    F(capstore_read_cost, bytes),
    F(capstore_read_cost, retries),
    F(capstore_payloads, count),
    F(capstore_payloads, bytes),
    F(capstore_payloads, length),
    F(capstore_payloads, cost),
    F(capstore_payloads, storage_),
    F(capstore_flush_report, drained),
    F(capstore_flush_report, stage),
    F(capstore_flush_report, missing_packs),
    F(capstore_flush_report, owed_packs),
    F(capstore_flush_report, rejected_count),
    F(capstore_flush_report, rejected_named),
    F(capstore_flush_report, rejected),
};

typedef struct abi_out {
  char *buf;
  size_t size, len;
} abi_out;

static void put(abi_out *o, const char *text) {
  for (; *text != '\0'; text++, o->len++) {
    if (o->len + 1 < o->size) o->buf[o->len] = *text;
  }
}

static void put_size(abi_out *o, size_t value) {
  char tmp[24];
  snprintf(tmp, sizeof tmp, "%zu", value);
  put(o, tmp);
}

size_t capstore_abi_layout(char *buf, size_t size) {
  abi_out o = {buf, size, 0};
  put(&o, "{");
  size_t n = sizeof abi_fields / sizeof abi_fields[0];
  for (size_t i = 0; i < n; i++) {
    const abi_field *f = &abi_fields[i];
    bool first = i == 0 || strcmp(abi_fields[i - 1].type, f->type) != 0;
    if (first) {
      put(&o, i == 0 ? "\"" : "}},\"");
      put(&o, f->type);
      put(&o, "\":{\"size\":");
      put_size(&o, f->size);
      put(&o, ",\"fields\":{\"");
    } else {
      put(&o, ",\"");
    }
    put(&o, f->field);
    put(&o, "\":");
    put_size(&o, f->offset);
  }
  put(&o, "}}}");
  if (size > 0) buf[o.len < size ? o.len : size - 1] = '\0';
  return o.len;
}

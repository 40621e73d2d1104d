/*
 * Canonical JSON, byte for byte what Python's
 * json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
 * emits for the footer: printable ASCII other than '"' and '\\' as itself;
 * \" \\ \b \f \n \r \t; every other code point below 0x20, DEL and all of
 * non-ASCII as \u with four lowercase hex digits (a surrogate pair above U+FFFF).
 */
#include <assert.h>
#include <string.h>

#include "pack_internal.h"

static void put_u_escape(pk_buf *buf, uint32_t unit) {
  static const char digits[] = "0123456789abcdef";
  assert(unit <= 0xFFFF);
  char out[6] = {'\\', 'u', digits[(unit >> 12) & 15], digits[(unit >> 8) & 15],
                 digits[(unit >> 4) & 15], digits[unit & 15]};
  pk_buf_put(buf, out, sizeof out);
}

/* The two-character escape of c, or 0 when c has none. */
static char short_escape(uint32_t c) {
  switch (c) {
  case '"': return '"';
  case '\\': return '\\';
  case '\b': return 'b';
  case '\f': return 'f';
  case '\n': return 'n';
  case '\r': return 'r';
  case '\t': return 't';
  default: return 0;
  }
}

static void put_code_point(pk_buf *buf, uint32_t cp) {
  char escape = short_escape(cp);
  if (escape != 0) {
    char out[2] = {'\\', escape};
    pk_buf_put(buf, out, 2);
  } else if (cp >= 0x20 && cp <= 0x7E) {
    char out = (char)cp;
    pk_buf_put(buf, &out, 1);
  } else if (cp <= 0xFFFF) {
    put_u_escape(buf, cp);
  } else {
    assert(cp <= 0x10FFFF);
    uint32_t v = cp - 0x10000;
    put_u_escape(buf, 0xD800 + (v >> 10));
    put_u_escape(buf, 0xDC00 + (v & 0x3FF));
  }
}

void pk_json_string(pk_buf *buf, const char *bytes, size_t len) {
  const uint8_t *data = (const uint8_t *)bytes;
  pk_buf_put(buf, "\"", 1);
  size_t pos = 0;
  while (pos < len) {
    /* Runs of plain printable ASCII go out in one copy. */
    size_t run = pos;
    while (run < len && data[run] >= 0x20 && data[run] <= 0x7E && data[run] != '"' &&
           data[run] != '\\') {
      run++;
    }
    pk_buf_put(buf, data + pos, run - pos);
    pos = run;
    if (pos == len) break;
    uint32_t cp = 0;
    bool ok = pk_utf8_next(data, len, &pos, &cp);
    assert(ok && "text reaching the JSON encoder was validated as UTF-8");
    if (!ok) return;
    put_code_point(buf, cp);
  }
  pk_buf_put(buf, "\"", 1);
}

static void put_key(pk_buf *buf, const char *key, bool first) {
  if (!first) pk_buf_put(buf, ",", 1);
  pk_buf_put(buf, "\"", 1);
  pk_buf_put_text(buf, key);
  pk_buf_put(buf, "\":", 2);
}

static void put_text(pk_buf *buf, const char *key, cs_pack_text text) {
  put_key(buf, key, false);
  if (text.bytes == NULL) {
    pk_buf_put_text(buf, "null");
    return;
  }
  pk_json_string(buf, text.bytes, text.len);
}

static void put_u64(pk_buf *buf, const char *key, uint64_t value) {
  put_key(buf, key, false);
  pk_buf_put_u64(buf, value);
}

static void put_shape(pk_buf *buf, const cs_pack_meta *meta) {
  assert(meta->rank <= CS_PACK_RANK_MAX);
  put_key(buf, "shape", false);
  pk_buf_put(buf, "[", 1);
  for (uint32_t i = 0; i < meta->rank; i++) {
    if (i > 0) pk_buf_put(buf, ",", 1);
    pk_buf_put_u64(buf, meta->shape[i]);
  }
  pk_buf_put(buf, "]", 1);
}

void pk_json_meta(pk_buf *buf, const cs_pack_meta *meta) {
  assert(meta != NULL && cs_dtype_name(meta->dtype) != NULL);
  /* Keys in pk_meta_field_names order; test_pack checks the two agree. */
  pk_buf_put(buf, "{", 1);
  put_key(buf, "adapter_revision", true);
  if (meta->adapter_revision.bytes == NULL) {
    pk_buf_put_text(buf, "null");
  } else {
    pk_json_string(buf, meta->adapter_revision.bytes, meta->adapter_revision.len);
  }
  put_u64(buf, "batch_position", meta->batch_position);
  put_text(buf, "capture_id", meta->capture_id);
  put_text(buf, "capture_policy_version", meta->capture_policy_version);
  put_u64(buf, "captured_at_ns", meta->captured_at_ns);
  put_text(buf, "dtype", cs_pack_text_of(cs_dtype_name(meta->dtype)));
  put_text(buf, "experiment_id", meta->experiment_id);
  put_text(buf, "hook_name", meta->hook_name);
  put_key(buf, "layer_number", false);
  pk_buf_put_i64(buf, meta->layer_number);
  put_text(buf, "model_id", meta->model_id);
  put_text(buf, "model_revision", meta->model_revision);
  put_u64(buf, "producer_rank", meta->producer_rank);
  put_text(buf, "request_id", meta->request_id);
  put_text(buf, "run_id", meta->run_id);
  put_text(buf, "sequence_id", meta->sequence_id);
  put_text(buf, "session_id", meta->session_id);
  put_shape(buf, meta);
  put_u64(buf, "step_number", meta->step_number);
  put_text(buf, "tenant_id", meta->tenant_id);
  put_u64(buf, "token_end", meta->token_end);
  put_u64(buf, "token_start", meta->token_start);
  pk_buf_put(buf, "}", 1);
}

void pk_json_patch_crc(pk_buf *buf, size_t at, uint32_t crc32) {
  static const char digits[] = "0123456789abcdef";
  assert(buf != NULL);
  if (buf->failed) return;
  assert(at + 8 <= buf->len && buf->data[at - 1] == '"' && buf->data[at + 8] == '"');
  for (uint32_t i = 0; i < 8; i++) buf->data[at + i] = (uint8_t)digits[(crc32 >> (28 - 4 * i)) & 15];
}

size_t pk_json_record(pk_buf *buf, const cs_pack_meta *meta, uint64_t offset, uint64_t length,
                      uint32_t crc32) {
  pk_buf_put_text(buf, "{\"checksum\":\"");
  size_t crc_at = buf->len;
  pk_buf_put_text(buf, "00000000\",\"codec\":\"none\",\"decoded_length\":");
  pk_json_patch_crc(buf, crc_at, crc32);
  pk_buf_put_u64(buf, length);
  pk_buf_put_text(buf, ",\"metadata\":");
  pk_json_meta(buf, meta);
  put_u64(buf, "offset", offset);
  put_u64(buf, "stored_length", length);
  pk_buf_put(buf, "}", 1);
  return crc_at;
}

void pk_json_footer_head(pk_buf *buf, const cs_uuid *pack_id, uint64_t created_at_ns) {
  char id_text[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(pack_id, id_text);
  pk_buf_put_text(buf, "{\"created_at_ns\":");
  pk_buf_put_u64(buf, created_at_ns);
  pk_buf_put_text(buf, ",\"format\":\"dmi-pack\",\"major_version\":");
  pk_buf_put_u64(buf, CS_PACK_MAJOR_VERSION);
  pk_buf_put_text(buf, ",\"minor_version\":");
  pk_buf_put_u64(buf, CS_PACK_MINOR_VERSION);
  pk_buf_put_text(buf, ",\"pack_id\":\"");
  pk_buf_put_text(buf, id_text);
  pk_buf_put_text(buf, "\",\"records\":[");
}

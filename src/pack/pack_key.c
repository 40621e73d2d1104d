/*
 * The object key rule and the object metadata set.
 *
 * <prefix>v1/tenant=<t>/date=<yyyy-mm-dd>/session=<s>/rank=<r>/<pack_id>.dmi-pack
 *
 * Each of t, s and r is one segment: percent-encoded except A-Za-z0-9 - _ . =
 * (so '~' is %7E, '/' is %2F; hex uppercase). A segment whose encoded form is
 * over 160 bytes, or starts with "sha256-", becomes "sha256-" and the
 * lowercase hex SHA-256 of the raw value bytes, which keeps keys short and
 * makes a value that looks like a hash unable to collide with one.
 *
 * The date is the UTC day of the first record's captured_at_ns, computed as
 * DMI's writer computes it (see dmi_epoch_seconds), so that a pack gets the
 * same key from either writer: reconcile and dedup go by key.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "pack_internal.h"

static const char hash_prefix[] = "sha256-";
#define HASH_PREFIX_LEN (sizeof hash_prefix - 1)
#define HASHED_SEGMENT_LEN (HASH_PREFIX_LEN + 64)

static bool unreserved(uint8_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '=';
}

/* Encoded length of value, stopping early once it passes limit. */
static size_t encoded_length(const uint8_t *value, size_t len, size_t limit) {
  size_t total = 0;
  for (size_t i = 0; i < len && total <= limit; i++) total += unreserved(value[i]) ? 1 : 3;
  return total;
}

static bool sha256_hex(const uint8_t *bytes, size_t len, char out[65]) {
  uint8_t digest[32];
  unsigned int digest_len = 0;
  if (EVP_Digest(bytes, len, digest, &digest_len, EVP_sha256(), NULL) != 1 || digest_len != 32) {
    return false;
  }
  pk_hex_lower(digest, 32, out);
  return true;
}

int cs_pack_key_segment(const char *value_in, size_t len, char *out, size_t out_size,
                        size_t *out_len) {
  static const char digits[] = "0123456789ABCDEF";
  const uint8_t *value = (const uint8_t *)value_in;
  assert((value != NULL || len == 0) && out != NULL && out_len != NULL);
  size_t encoded = encoded_length(value, len, CS_PACK_SEGMENT_BYTES_MAX);
  bool hashed = encoded > CS_PACK_SEGMENT_BYTES_MAX ||
                (len >= HASH_PREFIX_LEN && memcmp(value, hash_prefix, HASH_PREFIX_LEN) == 0);
  if (hashed) {
    if (out_size < HASHED_SEGMENT_LEN + 1) return CS_E_TOO_LARGE;
    memcpy(out, hash_prefix, HASH_PREFIX_LEN);
    if (!sha256_hex(value, len, out + HASH_PREFIX_LEN)) return CS_E_NO_MEMORY;
    *out_len = HASHED_SEGMENT_LEN;
    return CS_E_OK;
  }
  if (out_size < encoded + 1) return CS_E_TOO_LARGE;
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    if (unreserved(value[i])) {
      out[o++] = (char)value[i];
      continue;
    }
    out[o++] = '%';
    out[o++] = digits[value[i] >> 4];
    out[o++] = digits[value[i] & 15];
  }
  assert(o == encoded && o <= CS_PACK_SEGMENT_BYTES_MAX);
  out[o] = '\0';
  *out_len = o;
  return CS_E_OK;
}

/* Days since 1970-01-01 to a civil date (proleptic Gregorian; H. Hinnant's algorithm). */
static void civil_from_days(uint64_t days, uint32_t *year, uint32_t *month, uint32_t *day) {
  uint64_t z = days + 719468;
  uint64_t era = z / 146097;
  uint64_t doe = z - era * 146097;
  uint64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  uint64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  uint64_t mp = (5 * doy + 2) / 153;
  uint64_t d = doy - (153 * mp + 2) / 5 + 1;
  uint64_t m = mp < 10 ? mp + 3 : mp - 9;
  uint64_t y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  assert(m >= 1 && m <= 12 && d >= 1 && d <= 31);
  *year = (uint32_t)y;
  *month = (uint32_t)m;
  *day = (uint32_t)d;
}

/*
 * The whole seconds of ns as DMI gets them from
 * datetime.fromtimestamp(ns / 1e9, tz=timezone.utc): ns is rounded to a
 * double, divided by 1e9 in doubles, and the fraction is rounded to whole
 * microseconds half to even (CPython's _PyTime_DoubleToDenominator), a
 * rounding up to 1,000,000 carrying into the next second. So the last
 * 500 to 1,024 ns of a second (640 ns from 2006 to 2042: the half
 * microsecond plus half a double step of the nanoseconds and of the seconds)
 * give the next second, and at a UTC midnight the next day's date.
 * volatile keeps each step one IEEE double operation (no fused
 * multiply-add, no excess precision), as CPython does.
 */
static uint64_t dmi_epoch_seconds(uint64_t ns) {
  volatile double seconds = (double)ns / 1e9;
  assert(seconds >= 0.0 && seconds < 18446744074.0);
  uint64_t whole = (uint64_t)seconds;
  volatile double micros = (seconds - (double)whole) * 1e6; /* the subtraction is exact */
  uint64_t micros_floor = (uint64_t)micros;
  double rest = micros - (double)micros_floor; /* exact: micros < 2^20 */
  bool up = rest > 0.5 || (rest == 0.5 && (micros_floor & 1u) != 0);
  assert(micros_floor + up <= 1000000u);
  return whole + (micros_floor + up == 1000000u ? 1u : 0u);
}

/* Appends text to out[CS_KEY_MAX]; false when it would not fit with its NUL. */
static bool key_put(char *out, size_t *len, const char *text, size_t text_len) {
  if (text_len >= CS_KEY_MAX - *len) return false;
  memcpy(out + *len, text, text_len);
  *len += text_len;
  out[*len] = '\0';
  return true;
}

static bool key_put_segment(char *out, size_t *len, const char *name, cs_pack_text value) {
  char segment[3 * CS_PACK_SEGMENT_BYTES_MAX + 3 + 1];
  size_t segment_len = 0;
  if (cs_pack_key_segment(value.bytes, value.len, segment, sizeof segment, &segment_len) != 0) {
    return false;
  }
  return key_put(out, len, name, strlen(name)) && key_put(out, len, segment, segment_len);
}

int cs_pack_object_key(const char *prefix, size_t prefix_len, const cs_pack_key_fields *fields,
                       char out[CS_KEY_MAX], size_t *out_len, cs_pack_error *err) {
  pk_clear(err);
  if (fields == NULL || out == NULL || out_len == NULL || (prefix == NULL && prefix_len > 0) ||
      (prefix_len > 0 && prefix[prefix_len - 1] != '/') ||
      (prefix_len > 0 && memchr(prefix, '\0', prefix_len) != NULL)) {
    return pk_fail(err, CS_PACK_E_ARGUMENT, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "prefix",
                   "the key prefix must be empty or end with '/' (and contain no NUL)");
  }
  uint32_t year = 0, month = 0, day = 0;
  civil_from_days(dmi_epoch_seconds(fields->captured_at_ns) / 86400u, &year, &month, &day);
  char date[32];
  int date_len = snprintf(date, sizeof date, "/date=%04u-%02u-%02u", year, month, day);
  char rank[16];
  int rank_len = snprintf(rank, sizeof rank, "%u", fields->producer_rank);
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&fields->pack_id, id);
  size_t len = 0;
  out[0] = '\0';
  bool ok = key_put(out, &len, prefix, prefix_len) && key_put(out, &len, "v1", 2) &&
            key_put_segment(out, &len, "/tenant=", fields->tenant_id) &&
            key_put(out, &len, date, (size_t)date_len) &&
            key_put_segment(out, &len, "/session=", fields->session_id) &&
            key_put_segment(out, &len, "/rank=", (cs_pack_text){rank, (size_t)rank_len}) &&
            key_put(out, &len, "/", 1) && key_put(out, &len, id, CS_UUID_TEXT_LEN) &&
            key_put(out, &len, ".dmi-pack", 9);
  if (!ok) {
    return pk_fail(err, CS_PACK_E_KEY_TOO_LONG, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "prefix",
                   "the object key would be %u bytes or more with a prefix of %zu bytes",
                   CS_KEY_MAX, prefix_len);
  }
  *out_len = len;
  return CS_E_OK;
}

int cs_pack_footer_key_fields(const cs_pack_footer *footer, cs_pack_key_fields *out,
                              cs_pack_error *err) {
  pk_clear(err);
  assert(footer != NULL && out != NULL);
  if (footer->record_count == 0) {
    return pk_fail(err, CS_PACK_E_STATE, CS_PACK_NO_RECORD, CS_PACK_NO_OFFSET, "records",
                   "a pack without records has no object key");
  }
  /* Later records may name other tenants, sessions or ranks (DMI writes such packs): the first names the pack. */
  const cs_pack_meta *first = &footer->records[0].meta;
  *out = (cs_pack_key_fields){.tenant_id = first->tenant_id,
                              .session_id = first->session_id,
                              .producer_rank = first->producer_rank,
                              .captured_at_ns = first->captured_at_ns,
                              .pack_id = footer->pack_id};
  return CS_E_OK;
}

void cs_pack_object_meta_fill(const cs_pack_summary *summary, cs_pack_object_meta *out) {
  assert(summary != NULL && out != NULL);
  memset(out, 0, sizeof *out);
  out->content_type = CS_PACK_CONTENT_TYPE;
  cs_pack_object_meta_entry *e = out->entries;
  e[0].name = "dmi-format";
  snprintf(e[0].value, sizeof e[0].value, "%s", CS_PACK_FORMAT_NAME);
  e[1].name = "dmi-pack-id";
  cs_uuid_format(&summary->pack_id, e[1].value);
  e[2].name = "dmi-sha256";
  pk_hex_lower(summary->sha256, 32, e[2].value);
  e[3].name = "dmi-record-count";
  snprintf(e[3].value, sizeof e[3].value, "%u", summary->record_count);
  e[4].name = "dmi-created-at-ns";
  snprintf(e[4].value, sizeof e[4].value, "%llu", (unsigned long long)summary->created_at_ns);
  assert(strlen(e[2].value) == 64);
}

/* The shared vocabulary: error names, outcomes, UUID text, keys, the PRNG. */
#include "capstore/types.h"

#include <assert.h>
#include <string.h>

void cs_quote_bytes(const char *bytes, size_t len, size_t max_bytes, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  assert(out != NULL && cap >= 8 && (bytes != NULL || len == 0));
  size_t n = 0, i = 0;
  for (; i < len && i < max_bytes && n + 8 < cap; i++) { /* room for one more byte, "..." and the NUL */
    unsigned char c = (unsigned char)bytes[i];
    if (c >= 0x20 && c != 0x7f) {
      out[n++] = (char)c;
      continue;
    }
    out[n++] = '\\';
    out[n++] = 'x';
    out[n++] = hex[c >> 4];
    out[n++] = hex[c & 15u];
  }
  out[n] = '\0';
  if (i < len) memcpy(out + n, "...", 4);
}

const char *cs_strerror(int err) {
  switch ((cs_err)err) {
  case CS_E_OK: return "ok";
  case CS_E_INVALID_ARGUMENT: return "invalid argument";
  case CS_E_CONFIG: return "invalid configuration";
  case CS_E_NO_MEMORY: return "not enough memory given";
  case CS_E_FULL: return "bounded table full";
  case CS_E_SPOOL_FULL: return "spool full";
  case CS_E_WOULD_BLOCK: return "spool full, caller may wait";
  case CS_E_CLOSED: return "closed";
  case CS_E_STATE: return "not valid in this state";
  case CS_E_TIMEOUT: return "deadline passed";
  case CS_E_NOT_FOUND: return "not found";
  case CS_E_PARSE: return "parse error";
  case CS_E_TOO_LARGE: return "too large";
  case CS_E_IO: return "i/o error";
  case CS_E_CONFLICT: return "conflicting bytes for one id";
  case CS_E_CORRUPT: return "corrupt";
  case CS_E_BUSY: return "busy: owned by another";
  case CS_E_UNSUPPORTED: return "unsupported version or feature";
  case CS_E_SLOT_WRITTEN: return "array slot already written";
  }
  return "unknown error";
}

const char *cs_outcome_name(cs_outcome outcome) {
  static const char *const names[CS_OUT_COUNT_] = {
      "ok",        "refused",   "timeout",   "unknown",      "server_error", "throttled",
      "forbidden", "not_found", "precondition", "too_large", "invalid",
  };
  if ((unsigned)outcome >= (unsigned)CS_OUT_COUNT_) return "bad_outcome";
  return names[outcome];
}

bool cs_outcome_is_outage(cs_outcome outcome) {
  return outcome == CS_OUT_REFUSED || outcome == CS_OUT_TIMEOUT || outcome == CS_OUT_UNKNOWN ||
         outcome == CS_OUT_SERVER_ERROR || outcome == CS_OUT_THROTTLED;
}

bool cs_outcome_maybe_applied(cs_outcome outcome) {
  return outcome == CS_OUT_TIMEOUT || outcome == CS_OUT_UNKNOWN || outcome == CS_OUT_SERVER_ERROR;
}

int cs_hex_value(char c, cs_hex_case accept) {
  assert(accept == CS_HEX_LOWER || accept == CS_HEX_UPPER || accept == CS_HEX_ANY);
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f' && (accept & CS_HEX_LOWER) != 0) return c - 'a' + 10;
  if (c >= 'A' && c <= 'F' && (accept & CS_HEX_UPPER) != 0) return c - 'A' + 10;
  return -1;
}

int cs_decimal_u64(const char *text, size_t len, bool canonical, uint64_t *out) {
  assert(out != NULL);
  if (text == NULL || len == 0 || (canonical && len > 1 && text[0] == '0')) return CS_E_PARSE;
  uint64_t value = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') return CS_E_PARSE;
    uint64_t digit = (uint64_t)(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return CS_E_PARSE;
    value = value * 10 + digit;
  }
  *out = value;
  return CS_E_OK;
}

int cs_hex_decode(const char *text, size_t text_len, cs_hex_case accept, uint8_t *out) {
  assert(text != NULL || text_len == 0);
  assert(out != NULL || text_len < 2);
  if (text_len % 2 != 0) return CS_E_PARSE;
  for (size_t i = 0; i < text_len / 2; i++) {
    int hi = cs_hex_value(text[2 * i], accept);
    int lo = cs_hex_value(text[2 * i + 1], accept);
    if (hi < 0 || lo < 0) return CS_E_PARSE;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return CS_E_OK;
}

int cs_uuid_parse(const char *text, size_t text_len, cs_uuid *out) {
  static const uint8_t group_digits[5] = {8, 4, 4, 4, 12}; /* 8-4-4-4-12, a dash between */
  assert(out != NULL);
  if (text == NULL || text_len != CS_UUID_TEXT_LEN) return CS_E_PARSE;
  cs_uuid id;
  size_t pos = 0, byte_index = 0;
  for (size_t g = 0; g < 5; g++) {
    if (g > 0 && text[pos++] != '-') return CS_E_PARSE;
    if (cs_hex_decode(text + pos, group_digits[g], CS_HEX_LOWER, id.bytes + byte_index) != CS_E_OK) return CS_E_PARSE;
    pos += group_digits[g];
    byte_index += group_digits[g] / 2u;
  }
  assert(pos == CS_UUID_TEXT_LEN && byte_index == 16);
  *out = id;
  return CS_E_OK;
}

void cs_uuid_format(const cs_uuid *id, char out[CS_UUID_TEXT_LEN + 1]) {
  static const char digits[] = "0123456789abcdef";
  assert(id != NULL && out != NULL);
  uint32_t pos = 0;
  for (uint32_t i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[pos++] = '-';
    out[pos++] = digits[id->bytes[i] >> 4];
    out[pos++] = digits[id->bytes[i] & 15];
  }
  assert(pos == CS_UUID_TEXT_LEN);
  out[pos] = '\0';
}

bool cs_uuid_equal(const cs_uuid *a, const cs_uuid *b) {
  return memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

int cs_uuid_compare(const cs_uuid *a, const cs_uuid *b) {
  return memcmp(a->bytes, b->bytes, sizeof a->bytes);
}

int cs_key_pack_id(const char *key, size_t key_len, cs_uuid *out) {
  static const char suffix[] = ".dmi-pack";
  const size_t suffix_len = sizeof suffix - 1;
  if (key == NULL || key_len < CS_UUID_TEXT_LEN + suffix_len) return CS_E_PARSE;
  if (memcmp(key + key_len - suffix_len, suffix, suffix_len) != 0) return CS_E_PARSE;
  size_t start = key_len - suffix_len - CS_UUID_TEXT_LEN;
  /* The uuid must be the whole last segment. */
  if (start > 0 && key[start - 1] != '/') return CS_E_PARSE;
  return cs_uuid_parse(key + start, CS_UUID_TEXT_LEN, out);
}

int cs_pack_ref_set_key(cs_pack_ref *ref, const char *key, size_t key_len) {
  assert(ref != NULL);
  if (key_len >= CS_KEY_MAX) return CS_E_TOO_LARGE;
  memcpy(ref->key, key, key_len);
  ref->key[key_len] = '\0';
  ref->key_len = (uint32_t)key_len;
  return CS_E_OK;
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

void cs_prng_seed(cs_prng *prng, uint64_t seed) {
  assert(prng != NULL);
  uint64_t x = seed;
  for (uint32_t i = 0; i < 4; i++) prng->state[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t cs_prng_next(cs_prng *prng) {
  uint64_t *s = prng->state;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t cs_prng_below(cs_prng *prng, uint64_t bound) {
  if (bound == 0) return 0;
  /* Lemire's nearly-divisionless method would be faster; rejection keeps it exact. */
  uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = cs_prng_next(prng);
    if (r >= threshold) return r % bound;
  }
}

void cs_prng_split(cs_prng *parent, cs_prng *child) {
  cs_prng_seed(child, cs_prng_next(parent));
}

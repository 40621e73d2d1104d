/*
 * The cores' vocabulary and refusals, held to the contract once per run
 * (docs/simulator.md, "API rules"): what a caller hands the pure helpers of
 * src/core (error and outcome names, decimal, hex and UUID text, pack keys,
 * quoted bytes, the PRNG the replay lines depend on, an array's geometry,
 * slices and slot claims) and what must come back.
 *
 * Like config_rules.c, the rules are the simulator's own reading of the
 * headers (include/capstore/types.h, array.h), written without the core's
 * code: every answer is judged by an oracle here. Unlike it, the inputs are
 * drawn, from a stream of their own (the seed mixed with a constant), so
 * every seed tries other values and no other draw of the run moves. Bad
 * input must be refused with the error the header names (and the dimension
 * named in the message, where the header says so), good input answered
 * exactly. Runs before the world starts: a helper that drifts from its
 * contract fails the first seed that draws the input it mishandles.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "capstore/engine.h"
#include "capstore/read_plan.h"
#include "capstore/sink.h"
#include "world.h"

#define RULE_FAIL(w, ...) sim_bail((w), SIM_EXIT_SAFETY, "api rule: " __VA_ARGS__)

static uint64_t below(cs_prng *r, uint64_t n) { return cs_prng_below(r, n); }

/*
 * A refusal's message in a buffer of one byte is the empty string, and in none (NULL, or size 0) nothing is
 * written at all: call, naming the buffer sm_ and its size sz_, is tried each way around a sentinel.
 */
#define CHECK_SHORT_MESSAGE(w, what, call)                                                                          \
  do {                                                                                                               \
    char one_[2] = {'x', 'y'};                                                                                       \
    char *sm_ = one_;                                                                                                \
    size_t sz_ = 1;                                                                                             \
    int rc1_ = (call);                                                                                               \
    if (one_[0] != '\0' || one_[1] != 'y')                                                                           \
      RULE_FAIL(w, "%s: a message in a buffer of one byte is not the empty string (%d)", what, rc1_);             \
    sz_ = 0;                                                                                                    \
    one_[0] = 'x';                                                                                                   \
    int rc0_ = (call);                                                                                               \
    sm_ = NULL;                                                                                                      \
    int rcn_ = (call);                                                                                               \
    if (one_[0] != 'x' || rc0_ != rc1_ || rcn_ != rc1_)                                                              \
      RULE_FAIL(w, "%s: without a message buffer the answer changed (%d, %d, %d) or a byte was written", what, rc1_, \
                rc0_, rcn_);                                                                                         \
  } while (0)

/* ---- the PRNG: the stream every replay line names ---------------------------------------------------------- */

/* splitmix64 and xoshiro256** as published (Vigna), written here apart from src/core/types.c. */
static uint64_t oracle_splitmix(uint64_t *x) {
  *x += 0x9e3779b97f4a7c15u;
  uint64_t z = *x;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

typedef struct oracle_prng {
  uint64_t s[4];
} oracle_prng;

static void oracle_seed(oracle_prng *o, uint64_t seed) {
  for (int i = 0; i < 4; i++) o->s[i] = oracle_splitmix(&seed);
}

static uint64_t oracle_next(oracle_prng *o) {
  uint64_t x = o->s[1] * 5;
  uint64_t out = ((x << 7) | (x >> 57)) * 9;
  uint64_t t = o->s[1] << 17;
  o->s[2] ^= o->s[0];
  o->s[3] ^= o->s[1];
  o->s[1] ^= o->s[2];
  o->s[0] ^= o->s[3];
  o->s[2] ^= t;
  o->s[3] = (o->s[3] << 45) | (o->s[3] >> 19);
  return out;
}

/* Uniform below bound by rejection of the lowest 2^64 mod bound values (0 for bound 0). */
static uint64_t oracle_below(oracle_prng *o, uint64_t bound) {
  if (bound == 0) return 0;
  unsigned __int128 span = (unsigned __int128)1 << 64;
  uint64_t reject = (uint64_t)(span % bound);
  for (;;) {
    uint64_t v = oracle_next(o);
    if (v >= reject) return v % bound;
  }
}

static void check_prng(sim_world *w, cs_prng *r) {
  uint64_t seed = cs_prng_next(r);
  cs_prng core;
  oracle_prng o;
  cs_prng_seed(&core, seed);
  oracle_seed(&o, seed);
  for (int i = 0; i < 16; i++) {
    uint64_t got = cs_prng_next(&core), want = oracle_next(&o);
    if (got != want)
      RULE_FAIL(w, "the PRNG seeded with %" PRIu64 " gave %" PRIx64 " as value %d; xoshiro256** gives %" PRIx64
                " (every replay line names this stream)", seed, got, i, want);
  }
  static const uint64_t fixed[] = {1, 2, 3, 7, 10, 64, 1000, (UINT64_C(1) << 63) + 1, UINT64_MAX};
  for (int i = 0; i < 24; i++) {
    uint64_t bound = i < 9 ? fixed[i] : cs_prng_next(r) >> below(r, 64);
    if (i == 9) bound = 0;
    uint64_t got = cs_prng_below(&core, bound), want = oracle_below(&o, bound);
    if (got != want || (bound > 0 && got >= bound))
      RULE_FAIL(w, "cs_prng_below(%" PRIu64 ") gave %" PRIu64 "; uniform by rejection gives %" PRIu64, bound, got,
                want);
  }
  cs_prng child;
  oracle_prng oc;
  cs_prng_split(&core, &child);
  oracle_seed(&oc, oracle_next(&o));
  for (int i = 0; i < 4; i++)
    if (cs_prng_next(&child) != oracle_next(&oc) || cs_prng_next(&core) != oracle_next(&o))
      RULE_FAIL(w, "cs_prng_split: the child is not seeded with the parent's next value, or the parent moved more");
}

/* ---- error and outcome names ------------------------------------------------------------------------------- */

static void check_names(sim_world *w, cs_prng *r) {
  const char *seen[19];
  for (int e = 0; e >= CS_E_SLOT_WRITTEN; e--) {
    const char *name = cs_strerror(e);
    if (name == NULL || name[0] == '\0' || strcmp(name, "unknown error") == 0)
      RULE_FAIL(w, "error %d has no name of its own", e);
    for (int k = 0; k < -e; k++)
      if (strcmp(seen[k], name) == 0) RULE_FAIL(w, "errors %d and %d share the name '%s'", -k, e, name);
    seen[-e] = name;
  }
  if (strcmp(cs_strerror(CS_E_OK), "ok") != 0) RULE_FAIL(w, "CS_E_OK is not named \"ok\"");
  int past = below(r, 2) == 0 ? CS_E_SLOT_WRITTEN - 1 - (int)below(r, 1000) : 1 + (int)below(r, 1000);
  if (strcmp(cs_strerror(past), "unknown error") != 0)
    RULE_FAIL(w, "error %d, no error of the API, is named '%s', not \"unknown error\"", past, cs_strerror(past));
  /* The outcomes: names as docs/catalog-protocol.md and the status lines print them; which are outages (the
     service backs off and retries) and which may have been applied (the service must look before it repeats). */
  static const char *const names[CS_OUT_COUNT_] = {"ok",        "refused",   "timeout",      "unknown",
                                                   "server_error", "throttled", "forbidden", "not_found",
                                                   "precondition", "too_large", "invalid"};
  for (int o = 0; o < (int)CS_OUT_COUNT_; o++) {
    const char *name = cs_outcome_name((cs_outcome)o);
    if (name == NULL || strcmp(name, names[o]) != 0) RULE_FAIL(w, "outcome %d named '%s', not '%s'", o, name, names[o]);
    bool outage = o == CS_OUT_REFUSED || o == CS_OUT_TIMEOUT || o == CS_OUT_UNKNOWN || o == CS_OUT_SERVER_ERROR ||
                  o == CS_OUT_THROTTLED;
    bool maybe = o == CS_OUT_TIMEOUT || o == CS_OUT_UNKNOWN || o == CS_OUT_SERVER_ERROR;
    if (cs_outcome_is_outage((cs_outcome)o) != outage || cs_outcome_maybe_applied((cs_outcome)o) != maybe)
      RULE_FAIL(w, "outcome %s: outage %d (want %d), maybe applied %d (want %d)", names[o],
                (int)cs_outcome_is_outage((cs_outcome)o), (int)outage, (int)cs_outcome_maybe_applied((cs_outcome)o),
                (int)maybe);
  }
  cs_outcome bad = (cs_outcome)(CS_OUT_COUNT_ + below(r, 100));
  if (strcmp(cs_outcome_name(bad), "bad_outcome") != 0 || cs_outcome_is_outage(bad) || cs_outcome_maybe_applied(bad))
    RULE_FAIL(w, "outcome %d, past the last, is named '%s' or counted an outage", (int)bad, cs_outcome_name(bad));
}

/* Names the status lines, traces and messages print: each value of a table has one of its own, and a value past
   the table gets the table's "bad" name. */
typedef const char *(*name_fn)(int);
static const char *op_name(int v) { return cs_op_name((cs_op)v); }
static const char *lease_name(int v) { return cs_lease_state_name((cs_lease_state)v); }
static const char *step_name(int v) { return cs_engine_step_name((cs_engine_step)v); }
static const char *reason_name(int v) { return cs_seal_reason_name((cs_seal_reason)v); }

static void check_table(sim_world *w, cs_prng *r, const char *what, name_fn name, int first, int last, const char *bad) {
  for (int v = first; v <= last; v++) {
    const char *n = name(v);
    if (n == NULL || n[0] == '\0' || strcmp(n, bad) == 0) RULE_FAIL(w, "%s %d has no name of its own", what, v);
    for (int u = first; u < v; u++)
      if (strcmp(name(u), n) == 0) RULE_FAIL(w, "%s %d and %d share the name '%s'", what, u, v, n);
  }
  int past = last + 1 + (int)below(r, 50);
  if (name(past) == NULL || strcmp(name(past), bad) != 0) RULE_FAIL(w, "%s %d, past the last, is not named '%s'", what, past, bad);
}

static void check_tables(sim_world *w, cs_prng *r) {
  check_table(w, r, "operation", op_name, CS_OP_NONE + 1, CS_OP_COUNT_ - 1, "bad_op");
  check_table(w, r, "lease state", lease_name, CS_LEASE_NONE, CS_LEASE_RELEASED, "bad_state");
  check_table(w, r, "engine step", step_name, CS_STEP_START_SERVICE, CS_STEP_COUNT_ - 1, "bad_step");
  check_table(w, r, "seal reason", reason_name, CS_SEAL_RECORDS, CS_SEAL_CLOSE, "bad_reason");
}

/* ---- decimal and hex text ---------------------------------------------------------------------------------- */

/* The verdict on len bytes of decimal text, by 128-bit arithmetic. */
static bool oracle_decimal(const char *t, size_t len, bool canonical, uint64_t *out) {
  if (len == 0 || len > 40) return false;
  if (canonical && len > 1 && t[0] == '0') return false;
  unsigned __int128 v = 0;
  for (size_t i = 0; i < len; i++) {
    if (t[i] < '0' || t[i] > '9') return false;
    v = v * 10 + (unsigned)(t[i] - '0');
    if (v > UINT64_MAX) return false;
  }
  *out = (uint64_t)v;
  return true;
}

static void check_decimal(sim_world *w, cs_prng *r) {
  for (int i = 0; i < 64; i++) {
    char t[48];
    uint64_t v = cs_prng_next(r) >> below(r, 64);
    if (i == 0) v = UINT64_MAX;
    if (i == 1) v = 0;
    int n = snprintf(t, sizeof t, "%s%" PRIu64, below(r, 4) != 0 ? "" : below(r, 2) ? "0" : "00", v);
    switch (below(r, 6)) {
    case 0: t[below(r, (uint64_t)n)] = "/:a -"[below(r, 5)]; break;      /* a byte that is no digit */
    case 1: n = (int)below(r, (uint64_t)n); break;                         /* cut (maybe to nothing) */
    case 2: if (n < 40) t[n++] = (char)('0' + below(r, 10)); break;        /* a digit more: maybe past 2^64 - 1 */
    default: break;
    }
    if (i == 2) n = snprintf(t, sizeof t, "18446744073709551616"); /* 2^64 */
    if (i == 3) n = snprintf(t, sizeof t, "18446744073709551620");
    bool canonical = below(r, 2) == 0;
    uint64_t want = 0, got = 0xdeadbeef;
    bool ok = oracle_decimal(t, (size_t)n, canonical, &want);
    int rc = cs_decimal_u64(n == 0 && below(r, 2) == 0 ? NULL : t, (size_t)n, canonical, &got);
    if (ok ? rc != CS_E_OK || got != want : rc != CS_E_PARSE)
      RULE_FAIL(w, "cs_decimal_u64('%.*s', canonical %d) gave %d (%" PRIu64 "); want %s %" PRIu64, n, t,
                (int)canonical, rc, got, ok ? "ok" : "a parse error", want);
  }
}

static int oracle_hex_digit(char c, cs_hex_case accept) {
  static const char lower[] = "0123456789abcdef", upper[] = "0123456789ABCDEF";
  for (int i = 0; i < 16; i++) {
    if (c == lower[i] && (i < 10 || (accept & CS_HEX_LOWER))) return i;
    if (c == upper[i] && (i < 10 || (accept & CS_HEX_UPPER))) return i;
  }
  return -1;
}

static void check_hex(sim_world *w, cs_prng *r) {
  static const cs_hex_case cases[] = {CS_HEX_LOWER, CS_HEX_UPPER, CS_HEX_ANY};
  for (int a = 0; a < 3; a++)
    for (int c = 0; c < 256; c++)
      if (cs_hex_value((char)c, cases[a]) != oracle_hex_digit((char)c, cases[a]))
        RULE_FAIL(w, "cs_hex_value(0x%02x, case %d) gave %d", c, (int)cases[a], cs_hex_value((char)c, cases[a]));
  for (int i = 0; i < 32; i++) {
    uint8_t bytes[16], got[17];
    char t[34];
    size_t n = below(r, 17);
    cs_hex_case accept = cases[below(r, 3)];
    for (size_t k = 0; k < n; k++) {
      bytes[k] = (uint8_t)cs_prng_next(r);
      snprintf(t + 2 * k, 3, below(r, 2) ? "%02x" : "%02X", bytes[k]);
    }
    size_t len = 2 * n;
    if (n > 0 && below(r, 3) == 0) t[below(r, len)] = "g/:G`@"[below(r, 6)];
    if (n > 0 && below(r, 5) == 0) len--; /* odd */
    bool ok = len % 2 == 0;
    for (size_t k = 0; k < len; k++) ok = ok && oracle_hex_digit(t[k], accept) >= 0;
    got[n] = 0x5a;
    int rc = cs_hex_decode(t, len, accept, got);
    if (ok ? rc != CS_E_OK || memcmp(got, bytes, len / 2) != 0 || got[n] != 0x5a : rc != CS_E_PARSE)
      RULE_FAIL(w, "cs_hex_decode('%.*s', case %d) gave %d; want %s", (int)len, t, (int)accept, rc,
                ok ? "the bytes (and nothing past them)" : "a parse error");
  }
}

/* ---- UUIDs and pack keys ----------------------------------------------------------------------------------- */

static void oracle_uuid_text(const uint8_t b[16], char out[37]) {
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Canonical lowercase 8-4-4-4-12 text of exactly 36 bytes, by position. */
static bool oracle_uuid_parse(const char *t, size_t len, uint8_t out[16]) {
  if (len != 36) return false;
  int nib = 0;
  for (size_t i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (t[i] != '-') return false;
      continue;
    }
    int v = oracle_hex_digit(t[i], CS_HEX_LOWER);
    if (v < 0) return false;
    if (nib % 2 == 0) out[nib / 2] = (uint8_t)(v << 4);
    else out[nib / 2] |= (uint8_t)v;
    nib++;
  }
  return true;
}

static int sign(int x) { return (x > 0) - (x < 0); }

static void check_uuids(sim_world *w, cs_prng *r) {
  for (int i = 0; i < 32; i++) {
    cs_uuid id, back;
    for (int k = 0; k < 16; k++) id.bytes[k] = (uint8_t)cs_prng_next(r);
    char text[37], formatted[CS_UUID_TEXT_LEN + 1];
    oracle_uuid_text(id.bytes, text);
    cs_uuid_format(&id, formatted);
    if (strcmp(text, formatted) != 0) RULE_FAIL(w, "cs_uuid_format gave '%s', want '%s'", formatted, text);
    size_t len = 36;
    switch (below(r, 6)) {
    case 0: text[below(r, 36)] = "AFg-/0a"[below(r, 7)]; break; /* a character changed: maybe still valid */
    case 1: len = below(r, 2) ? 35 : 37; text[36] = 'a'; break;
    default: break;
    }
    uint8_t want[16];
    bool ok = oracle_uuid_parse(text, len, want);
    int rc = cs_uuid_parse(text, len, &back);
    if (ok ? rc != CS_E_OK || memcmp(back.bytes, want, 16) != 0 : rc != CS_E_PARSE)
      RULE_FAIL(w, "cs_uuid_parse('%.*s') gave %d; want %s", (int)len, text, rc, ok ? "its bytes" : "a parse error");
    /* Keys: "<prefix><uuid>.dmi-pack" where the uuid is the whole last segment. */
    static const char *const prefixes[] = {"", "a/", "spool/x/", "/", "ab", "a/b"};
    static const char *const suffixes[] = {".dmi-pack", ".dmi-pack", ".dmi-pac", ".dmi-packs", ".DMI-PACK", ""};
    size_t pi = below(r, 6), si = below(r, 6);
    char key[96];
    int kn = snprintf(key, sizeof key, "%s%.*s%s", prefixes[pi], (int)len, text, suffixes[si]);
    bool key_ok = ok && si < 2 && (prefixes[pi][0] == '\0' || prefixes[pi][strlen(prefixes[pi]) - 1] == '/');
    cs_uuid kid;
    rc = cs_key_pack_id(key, (size_t)kn, &kid);
    if (key_ok ? rc != CS_E_OK || memcmp(kid.bytes, want, 16) != 0 : rc != CS_E_PARSE)
      RULE_FAIL(w, "cs_key_pack_id('%s') gave %d; want %s", key, rc, key_ok ? "its pack id" : "a parse error");
    /* Order: byte by byte, as the catalog's ids sort. */
    cs_uuid other = id;
    if (below(r, 4) != 0) other.bytes[below(r, 16)] = (uint8_t)cs_prng_next(r);
    int want_cmp = 0;
    for (int k = 0; k < 16 && want_cmp == 0; k++) want_cmp = (id.bytes[k] > other.bytes[k]) - (id.bytes[k] < other.bytes[k]);
    if (sign(cs_uuid_compare(&id, &other)) != want_cmp || cs_uuid_equal(&id, &other) != (want_cmp == 0))
      RULE_FAIL(w, "cs_uuid_compare/equal disagree with the bytes' order");
  }
  if (cs_key_pack_id(NULL, 0, &(cs_uuid){{0}}) != CS_E_PARSE) RULE_FAIL(w, "cs_key_pack_id took no key");
  /* A pack reference holds keys shorter than CS_KEY_MAX, whole. */
  static char key[CS_KEY_MAX + 2];
  cs_pack_ref ref;
  for (int i = 0; i < 4; i++) {
    size_t len = i == 0 ? CS_KEY_MAX - 1 : i == 1 ? CS_KEY_MAX : below(r, CS_KEY_MAX + 2);
    for (size_t k = 0; k < len; k++) key[k] = (char)('a' + below(r, 26));
    memset(&ref, 0x5a, sizeof ref);
    int rc = cs_pack_ref_set_key(&ref, key, len);
    bool ok = len < CS_KEY_MAX;
    if (ok ? rc != CS_E_OK || ref.key_len != len || memcmp(ref.key, key, len) != 0 || ref.key[len] != '\0'
           : rc != CS_E_TOO_LARGE)
      RULE_FAIL(w, "cs_pack_ref_set_key of %zu bytes gave %d; want %s", len, rc, ok ? "the key, whole" : "too large");
  }
}

/* ---- quoted bytes ------------------------------------------------------------------------------------------ */

/* Undoes the quoting: the bytes shown, and whether "..." ends it; false when out is not quoting's form. */
static bool oracle_unquote(const char *out, uint8_t *bytes, size_t *n, bool *cut) {
  size_t len = strlen(out), i = 0;
  *n = 0;
  *cut = len >= 3 && strcmp(out + len - 3, "...") == 0;
  if (*cut) len -= 3;
  while (i < len) {
    uint8_t c = (uint8_t)out[i];
    if (c < 0x20 || c == 0x7f) return false; /* a raw control byte */
    if (c != '\\') {
      bytes[(*n)++] = c, i++;
      continue;
    }
    int hi, lo;
    if (i + 3 >= len + 0 || out[i + 1] != 'x' || (hi = oracle_hex_digit(out[i + 2], CS_HEX_LOWER)) < 0 ||
        (lo = oracle_hex_digit(out[i + 3], CS_HEX_LOWER)) < 0)
      return false;
    uint8_t v = (uint8_t)(hi << 4 | lo);
    if (v >= 0x20 && v != 0x7f) return false; /* only control bytes and DEL are escaped */
    bytes[(*n)++] = v;
    i += 4;
  }
  return true;
}

static void check_quote(sim_world *w, cs_prng *r) {
  for (int i = 0; i < 48; i++) {
    char in[64], out[272];
    size_t len = below(r, sizeof in + 1), max = below(r, 80), cap = 8 + below(r, 253);
    for (size_t k = 0; k < len; k++) {
      uint64_t kind = below(r, 4);
      in[k] = kind == 0 ? (char)below(r, 0x20) : kind == 1 ? (char)(0x7f + below(r, 0x81)) : (char)(0x20 + below(r, 0x5f));
      if (in[k] == '\\' || in[k] == '.') in[k] = '_'; /* kept raw: a backslash or dots would read as quoting's own */
    }
    memset(out, 0x5a, sizeof out);
    cs_quote_bytes(len == 0 && below(r, 2) ? NULL : in, len, max, out, cap);
    if (memchr(out, '\0', cap) == NULL) RULE_FAIL(w, "cs_quote_bytes wrote past its %zu bytes or no NUL", cap);
    if (out[cap] != 0x5a) RULE_FAIL(w, "cs_quote_bytes wrote past its %zu bytes", cap);
    uint8_t shown[64];
    size_t n;
    bool cut;
    if (!oracle_unquote(out, shown, &n, &cut))
      RULE_FAIL(w, "cs_quote_bytes gave '%s': not the quoted form (control bytes and DEL as \\xNN)", out);
    size_t whole = len < max ? len : max;
    /* What is shown is a prefix of the input; "..." says exactly that some of it is not; room for a fourth of
       the buffer's bytes, less the "..." and NUL, is always used. */
    if (n > whole || memcmp(shown, in, n) != 0 || cut != (n < len) || (n < whole && n < (cap - 8) / 4))
      RULE_FAIL(w, "cs_quote_bytes of %zu bytes (at most %zu, %zu of room) showed %zu%s", len, max, cap, n,
                cut ? " and \"...\"" : "");
  }
}

/* ---- arrays ------------------------------------------------------------------------------------------------ */

typedef enum geom_defect { G_OK, G_DIMS, G_ITEM, G_SHAPE, G_CHUNK, G_CHUNKS_MAX, G_CHUNK_BYTES } geom_defect;

/* The first thing wrong with g, in the order the header lists them, and its dimension. */
static geom_defect oracle_geometry(const cs_array_geometry *g, uint32_t *dim) {
  *dim = 0;
  if (g->dims < 1 || g->dims > CS_ARRAY_DIMS_MAX) return G_DIMS;
  if (g->item_bytes != 1 && g->item_bytes != 2 && g->item_bytes != 4 && g->item_bytes != 8) return G_ITEM;
  unsigned __int128 chunks = 1, chunk_bytes = g->item_bytes;
  for (uint32_t d = 0; d < g->dims; d++) {
    *dim = d;
    if (g->shape[d] == 0) return G_SHAPE;
    if (g->chunk[d] == 0 || g->chunk[d] > g->shape[d]) return G_CHUNK;
    chunks *= (g->shape[d] + g->chunk[d] - 1) / g->chunk[d];
    if (chunks > CS_ARRAY_CHUNKS_MAX) return G_CHUNKS_MAX;
    chunk_bytes *= g->chunk[d];
    if (chunk_bytes > CS_ARRAY_CHUNK_BYTES_MAX) return G_CHUNK_BYTES;
  }
  return G_OK;
}

/* A message names dimension d as the header's refusals do: "[d]" or "dimension d". */
static bool names_dim(const char *msg, uint32_t d) {
  char a[16], b[24];
  snprintf(a, sizeof a, "[%u]", d);
  snprintf(b, sizeof b, "dimension %u", d);
  return strstr(msg, a) != NULL || strstr(msg, b) != NULL;
}

static void draw_geometry(cs_prng *r, cs_array_geometry *g) {
  static const uint32_t items[] = {1, 2, 4, 8};
  memset(g, 0, sizeof *g);
  g->dims = 1 + (uint32_t)below(r, CS_ARRAY_DIMS_MAX);
  g->item_bytes = items[below(r, 4)];
  for (uint32_t d = 0; d < g->dims; d++) {
    g->shape[d] = 1 + below(r, d < 3 ? 9 : 3);
    g->chunk[d] = 1 + below(r, g->shape[d]);
  }
}

static void check_geometry_answers(sim_world *w, cs_prng *r, const cs_array_geometry *g) {
  uint64_t grid[CS_ARRAY_DIMS_MAX], count = 1, total = g->item_bytes;
  for (uint32_t d = 0; d < g->dims; d++) {
    grid[d] = (g->shape[d] + g->chunk[d] - 1) / g->chunk[d];
    count *= grid[d];
    total *= g->shape[d];
  }
  if (cs_array_chunk_count(g) != count || cs_array_total_bytes(g) != total)
    RULE_FAIL(w, "array of %u dimensions: %" PRIu64 " chunks and %" PRIu64 " bytes; want %" PRIu64 " and %" PRIu64,
              g->dims, cs_array_chunk_count(g), cs_array_total_bytes(g), count, total);
  for (int i = 0; i < 6; i++) {
    uint64_t index = i == 0 ? count - 1 : below(r, count);
    uint64_t coords[CS_ARRAY_DIMS_MAX], origin[CS_ARRAY_DIMS_MAX], shape[CS_ARRAY_DIMS_MAX], rest = index;
    uint64_t bytes = g->item_bytes;
    if (cs_array_chunk_at(g, index, coords, origin, shape) != CS_E_OK)
      RULE_FAIL(w, "array: chunk %" PRIu64 " of %" PRIu64 " refused", index, count);
    for (uint32_t d = g->dims; d-- > 0;) { /* C order: the last dimension fastest */
      uint64_t c = rest % grid[d], o = c * g->chunk[d];
      uint64_t extent = g->shape[d] - o < g->chunk[d] ? g->shape[d] - o : g->chunk[d];
      rest /= grid[d];
      bytes *= extent;
      if (coords[d] != c || origin[d] != o || shape[d] != extent)
        RULE_FAIL(w, "array: chunk %" PRIu64 " in dimension %u at grid %" PRIu64 ", origin %" PRIu64 ", %" PRIu64
                  " long; want %" PRIu64 ", %" PRIu64 ", %" PRIu64, index, d, coords[d], origin[d], shape[d], c, o,
                  extent);
    }
    if (cs_array_chunk_bytes(g, index) != bytes)
      RULE_FAIL(w, "array: chunk %" PRIu64 " is %" PRIu64 " bytes; want %" PRIu64, index,
                cs_array_chunk_bytes(g, index), bytes);
  }
  uint64_t past = count + below(r, 3);
  if (cs_array_chunk_at(g, past, NULL, NULL, NULL) != CS_E_INVALID_ARGUMENT || cs_array_chunk_bytes(g, past) != 0)
    RULE_FAIL(w, "array: chunk %" PRIu64 " of %" PRIu64 " (past the grid) was not refused", past, count);
}

static void check_geometries(sim_world *w, cs_prng *r) {
  char msg[160];
  if (cs_array_geometry_check(NULL, msg, sizeof msg) != CS_E_INVALID_ARGUMENT) RULE_FAIL(w, "array: no geometry taken");
  for (int i = 0; i < 30; i++) {
    cs_array_geometry g;
    draw_geometry(r, &g);
    uint32_t d = (uint32_t)below(r, g.dims);
    switch (i % 10) {
    case 0: g.dims = below(r, 2) ? 0 : CS_ARRAY_DIMS_MAX + 1 + (uint32_t)below(r, 4); break;
    case 1: g.item_bytes = (uint32_t[]){0, 3, 5, 16}[below(r, 4)]; break;
    case 2: g.shape[d] = 0; break;
    case 3: g.chunk[d] = below(r, 2) ? 0 : g.shape[d] + 1 + below(r, 2); break;
    case 4: /* too many chunks: 2^24 of them at dimension d, or one past */
    case 5: /* chunks of 2^30 bytes, or more */
      if (below(r, 2)) /* every other dimension 1 long: exactly at the bound, or exactly one past */
        for (uint32_t k = 0; k < g.dims; k++)
          if (k != d) g.shape[k] = g.chunk[k] = 1;
      if (i % 10 == 4) {
        g.shape[d] = g.chunk[d] * (CS_ARRAY_CHUNKS_MAX + below(r, 2));
      } else {
        g.chunk[d] = (CS_ARRAY_CHUNK_BYTES_MAX / g.item_bytes) + below(r, 2) * (below(r, 2) ? 1 : 1000);
        g.shape[d] = g.chunk[d];
      }
      break;
    case 6: /* a chunk count whose product wraps 2^64 to a small number: refused, not taken as that number */
    case 7: { /* the same for a chunk's elements */
      if (g.dims < 2) g.dims = 2, g.shape[1] = g.chunk[1] = 1;
      d = 1 + (uint32_t)below(r, g.dims - 1);
      uint64_t before = 1; /* the product of dimensions before d, at least 2 */
      g.shape[0] = g.chunk[0] = 2 + below(r, 7);
      if (i % 10 == 6) g.chunk[0] = 1;
      for (uint32_t k = 0; k < d; k++)
        before *= i % 10 == 6 ? (g.shape[k] + g.chunk[k] - 1) / g.chunk[k] : g.chunk[k];
      uint64_t wrap = UINT64_MAX / before + 1; /* before * wrap = 2^64 + less than before */
      g.shape[d] = wrap;
      g.chunk[d] = i % 10 == 6 ? 1 : wrap;
      break;
    }
    default: break;
    }
    uint32_t dim;
    geom_defect want = oracle_geometry(&g, &dim);
    msg[0] = '\0';
    int rc = cs_array_geometry_check(&g, msg, sizeof msg);
    int rc_quiet = cs_array_geometry_check(&g, below(r, 2) ? NULL : msg, 0);
    if (want == G_OK) {
      if (rc != CS_E_OK || rc_quiet != CS_E_OK) RULE_FAIL(w, "array: a valid geometry refused: %s", msg);
      if (g.shape[0] <= 9 && g.dims <= 3) check_geometry_answers(w, r, &g);
      continue;
    }
    if (rc != CS_E_INVALID_ARGUMENT || rc_quiet != CS_E_INVALID_ARGUMENT)
      RULE_FAIL(w, "array: a geometry with defect %d (dimension %u) was taken (%d)", (int)want, dim, rc);
    if (want >= G_SHAPE && !names_dim(msg, dim))
      RULE_FAIL(w, "array: a geometry refused for dimension %u with a message that does not name it: '%s'", dim, msg);
    CHECK_SHORT_MESSAGE(w, "array geometry", cs_array_geometry_check(&g, sm_, sz_));
    /* A short buffer gets a cut, terminated message. */
    char small[8];
    memset(small, 0x5a, sizeof small);
    size_t cap = 1 + below(r, sizeof small);
    cs_array_geometry_check(&g, small, cap);
    if (memchr(small, '\0', cap) == NULL || (cap < sizeof small && small[cap] != 0x5a))
      RULE_FAIL(w, "array: a refusal's message overran its %zu bytes", cap);
  }
}

/* The byte b of the element at global linear index i: what every chunk of the pieces check holds. */
static uint8_t piece_byte(uint64_t i, uint32_t b) { return (uint8_t)(i * 131u + b * 7u + 1u); }

/* The Blosc blocks a piece needs, with block sizes that make from one block to thousands (the map's words counted past 64 blocks). */
static void check_piece_blocks(sim_world *w, cs_prng *r, const cs_array_piece *p, const cs_array_geometry *g,
                               uint64_t chunk_bytes) {
  uint64_t small_max = chunk_bytes / 64 > 1 ? chunk_bytes / 64 : 1;
  sim_check_region_blocks(w, g, p, 1 + (below(r, 2) ? below(r, small_max) : below(r, chunk_bytes + 8)));
}

/*
 * Every piece of a valid slice, copied out of chunks that hold piece_byte of
 * each element's global index, must leave the slice buffer (C order, the
 * slice's shape) holding each element's bytes, and nothing past it written;
 * a chunk given as NULL reads as zeros; copied back (slice -> chunk) into a
 * zeroed chunk, a piece writes exactly its region. Pieces come in chunk-index
 * order, each chunk once, with their per-dimension entries past dims 0
 * (array.h). Up to 8 dimensions: the swarm's arrays have at most 3.
 */
static void check_pieces(sim_world *w, cs_prng *r, const cs_array_geometry *g, const cs_array_slice *s,
                         uint64_t elements) {
  enum { CAP = 4096 };
  static uint8_t slice[CAP * 8 + 16], chunk[CAP * 8], back[CAP * 8];
  uint32_t ib = g->item_bytes;
  uint64_t chunk_elems = 1, stride[CS_ARRAY_DIMS_MAX], sstride[CS_ARRAY_DIMS_MAX];
  for (uint32_t d = 0; d < g->dims; d++) chunk_elems *= g->chunk[d];
  if (elements == 0 || elements > CAP || chunk_elems > CAP) return;
  for (uint32_t d = g->dims; d-- > 0;) {
    stride[d] = d + 1 == g->dims ? 1 : stride[d + 1] * g->shape[d + 1];
    sstride[d] = d + 1 == g->dims ? 1 : sstride[d + 1] * (s->stop[d + 1] - s->start[d + 1]);
  }
  memset(slice, 0xa5, sizeof slice);
  cs_array_slice_iter it;
  if (cs_array_slice_begin(&it, g, s) != CS_E_OK) RULE_FAIL(w, "array: a valid slice was not begun");
  cs_array_piece p;
  uint64_t count = 0, prev = 0;
  while (cs_array_slice_next(&it, &p)) {
    if ((count > 0 && p.chunk_index <= prev) || p.chunk_index >= cs_array_chunk_count(g))
      RULE_FAIL(w, "array: piece of chunk %" PRIu64 " after chunk %" PRIu64 " (of %" PRIu64 ")", p.chunk_index, prev,
                cs_array_chunk_count(g));
    prev = p.chunk_index;
    count++;
    uint64_t origin[CS_ARRAY_DIMS_MAX], cshape[CS_ARRAY_DIMS_MAX], n = 1;
    if (cs_array_chunk_at(g, p.chunk_index, NULL, origin, cshape) != CS_E_OK)
      RULE_FAIL(w, "array: a piece names chunk %" PRIu64 ", which is refused", p.chunk_index);
    for (uint32_t d = 0; d < CS_ARRAY_DIMS_MAX; d++) {
      bool past = d >= g->dims;
      if (past ? (p.chunk_shape[d] | p.lo[d] | p.hi[d] | p.at[d]) != 0
               : p.chunk_shape[d] != cshape[d] || p.lo[d] >= p.hi[d] || p.hi[d] > cshape[d] ||
                     origin[d] + p.lo[d] != (s->start[d] > origin[d] ? s->start[d] : origin[d]) ||
                     origin[d] + p.hi[d] != (s->stop[d] < origin[d] + cshape[d] ? s->stop[d] : origin[d] + cshape[d]) ||
                     p.at[d] != origin[d] + p.lo[d] - s->start[d])
        RULE_FAIL(w, "array: the piece of chunk %" PRIu64 " is wrong at dimension %u of %u", p.chunk_index, d, g->dims);
      if (!past) n *= cshape[d];
    }
    /* The chunk's bytes: each element's, by its global index. */
    uint64_t local[CS_ARRAY_DIMS_MAX] = {0};
    for (uint64_t e = 0; e < n; e++) {
      uint64_t rest = e, gi = 0;
      for (uint32_t d = g->dims; d-- > 0;) local[d] = rest % cshape[d], rest /= cshape[d];
      for (uint32_t d = 0; d < g->dims; d++) gi += (origin[d] + local[d]) * stride[d];
      for (uint32_t b = 0; b < ib; b++) chunk[e * ib + b] = piece_byte(gi, b);
    }
    check_piece_blocks(w, r, &p, g, n * ib);
    bool unwritten = (p.chunk_index & 3) == 2; /* some chunks read as zeros */
    cs_array_piece_copy(g, s, &p, unwritten ? NULL : chunk, slice, true);
    /* The region in the slice, checked now, so that a zeroed chunk is told from a written one. */
    memset(back, 0, n * ib);
    for (uint64_t e = 0; e < n; e++) {
      uint64_t rest = e, si = 0;
      bool in = true;
      for (uint32_t d = g->dims; d-- > 0;) local[d] = rest % cshape[d], rest /= cshape[d];
      for (uint32_t d = 0; d < g->dims; d++) {
        in = in && local[d] >= p.lo[d] && local[d] < p.hi[d];
        si += (local[d] - p.lo[d] + p.at[d]) * sstride[d];
      }
      if (!in) continue;
      for (uint32_t b = 0; b < ib; b++) {
        uint8_t want = unwritten ? 0 : chunk[e * ib + b];
        if (slice[si * ib + b] != want)
          RULE_FAIL(w, "array: byte %u of element %" PRIu64 " of chunk %" PRIu64 " reads %u in the slice; want %u", b, e,
                    p.chunk_index, slice[si * ib + b], want);
        back[e * ib + b] = unwritten ? 0 : chunk[e * ib + b]; /* what a copy back must write */
      }
    }
    if (!unwritten) {
      static uint8_t into[CAP * 8];
      memset(into, 0, n * ib);
      cs_array_piece_copy(g, s, &p, into, slice, false);
      if (memcmp(into, back, n * ib) != 0)
        RULE_FAIL(w, "array: a piece copied back into chunk %" PRIu64 " wrote other bytes than its region's", p.chunk_index);
    }
  }
  for (size_t i = elements * ib; i < elements * ib + 16; i++)
    if (slice[i] != 0xa5) RULE_FAIL(w, "array: a slice of %" PRIu64 " bytes was written past its end", elements * ib);
  /* Every overlapped chunk given once, and at the end every element holds its chunk's bytes (or zeros). */
  uint64_t want_count = 1, grid[CS_ARRAY_DIMS_MAX];
  for (uint32_t d = 0; d < g->dims; d++) {
    want_count *= (s->stop[d] - 1) / g->chunk[d] - s->start[d] / g->chunk[d] + 1;
    grid[d] = (g->shape[d] + g->chunk[d] - 1) / g->chunk[d];
  }
  if (count != want_count)
    RULE_FAIL(w, "array: a slice overlapping %" PRIu64 " chunks gave %" PRIu64 " pieces", want_count, count);
  for (uint64_t e = 0; e < elements; e++) {
    uint64_t rest = e, gi = 0, ci = 0;
    for (uint32_t d = g->dims; d-- > 0;) {
      uint64_t ext = s->stop[d] - s->start[d];
      gi += (s->start[d] + rest % ext) * stride[d];
      rest /= ext;
    }
    uint64_t left = gi;
    uint64_t coord[CS_ARRAY_DIMS_MAX];
    for (uint32_t d = g->dims; d-- > 0;) coord[d] = left % g->shape[d], left /= g->shape[d];
    for (uint32_t d = 0; d < g->dims; d++) ci = ci * grid[d] + coord[d] / g->chunk[d];
    for (uint32_t b = 0; b < ib; b++) {
      uint8_t want = (ci & 3) == 2 ? 0 : piece_byte(gi, b);
      if (slice[e * ib + b] != want)
        RULE_FAIL(w, "array: element %" PRIu64 " of a slice (chunk %" PRIu64 ") holds %u at byte %u after every piece; "
                  "want %u", e, ci, slice[e * ib + b], b, want);
    }
  }
}

/* What cs_array_stamp_make was given, and what array.h says the stamp is. */
typedef struct stamp_in {
  const cs_array_geometry *g;
  uint64_t nonce, written, at;
  bool ok;
  cs_array_stamp st;
} stamp_in;

/*
 * Stamps (array.h): refused exactly when the values cannot describe the array
 * (more chunks written than it has, a nonce without a write or a write
 * without one), the output then untouched; else identity (nonce, size) always,
 * the count and time only while filling, nothing that moves once complete; two
 * stamps equal exactly when they name the same array in the same state of
 * fill, and the same array exactly when nonce and size agree.
 */
static void check_stamps(sim_world *w, cs_prng *r) {
  cs_array_geometry ga, gb;
  draw_geometry(r, &ga);
  gb = ga;
  if (below(r, 2)) gb.shape[0] += 1 + below(r, 2), gb.chunk[0] = 1; /* another size, another count */
  stamp_in in[8];
  for (int i = 0; i < 8; i++) {
    stamp_in *x = &in[i];
    x->g = i < 5 ? &ga : &gb;
    uint64_t chunks = cs_array_chunk_count(x->g);
    x->nonce = below(r, 3);
    uint64_t pick = below(r, 4);
    x->written = pick == 0 ? 0 : pick == 1 ? chunks : pick == 2 ? chunks + 1 + below(r, 2) : 1 + below(r, chunks);
    x->at = below(r, 3);
    if (i > 0 && below(r, 3) == 0) x->nonce = in[i - 1].nonce, x->written = in[i - 1].written; /* near twins */
    x->ok = x->written <= chunks && (x->written == 0) == (x->nonce == 0);
    cs_array_stamp before;
    memset(&before, 0x5c, sizeof before);
    x->st = before;
    int rc = cs_array_stamp_make(x->g, x->nonce, x->written, x->at, &x->st);
    if (!x->ok) {
      if (rc != CS_E_CORRUPT || memcmp(&x->st, &before, sizeof before) != 0)
        RULE_FAIL(w, "array: a stamp of %" PRIu64 " of %" PRIu64 " chunks written, nonce %" PRIu64 ", was not refused "
                  "untouched (%d)", x->written, chunks, x->nonce, rc);
      continue;
    }
    uint64_t total = x->g->item_bytes;
    for (uint32_t d = 0; d < x->g->dims; d++) total *= x->g->shape[d];
    uint32_t state = x->written == 0 ? CS_ARRAY_EMPTY : x->written < chunks ? CS_ARRAY_FILLING : CS_ARRAY_COMPLETE;
    bool filling = state == CS_ARRAY_FILLING;
    if (rc != CS_E_OK || x->st.nonce != x->nonce || x->st.total_bytes != total || x->st.state != state ||
        x->st.written != (filling ? x->written : 0) || x->st.changed_at_ns != (filling ? x->at : 0))
      RULE_FAIL(w, "array: the stamp of %" PRIu64 " of %" PRIu64 " chunks written (nonce %" PRIu64 ", at %" PRIu64
                ") is state %u, %" PRIu64 " written at %" PRIu64 ", nonce %" PRIu64 ", %" PRIu64 " bytes (%d)",
                x->written, chunks, x->nonce, x->at, x->st.state, x->st.written, x->st.changed_at_ns, x->st.nonce,
                x->st.total_bytes, rc);
  }
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) {
      const stamp_in *a = &in[i], *b = &in[j];
      if (!a->ok || !b->ok) continue;
      bool same = a->nonce == b->nonce && a->st.total_bytes == b->st.total_bytes;
      bool equal = same && a->st.state == b->st.state &&
                   (a->st.state != CS_ARRAY_FILLING || (a->written == b->written && a->at == b->at));
      if (cs_array_stamp_same_array(&a->st, &b->st) != same || cs_array_stamp_equal(&a->st, &b->st) != equal)
        RULE_FAIL(w, "array: stamps %d and %d (states %u, %u) answered same array %d, equal %d; want %d, %d", i, j,
                  a->st.state, b->st.state, (int)cs_array_stamp_same_array(&a->st, &b->st),
                  (int)cs_array_stamp_equal(&a->st, &b->st), (int)same, (int)equal);
    }
}

/*
 * The slot arbiter (array.h) against a model of its header: candidates in
 * the catalog's order (the geometry's first, then by slot, then by version),
 * each slot's first one wins and every later one loses; a candidate out of
 * that order (a geometry after a chunk, a lower slot, a lower version of the
 * same slot) is refused, and the sequence judged no further.
 */
static void check_arbiter(sim_world *w, cs_prng *r) {
  for (int round = 0; round < 16; round++) {
    cs_array_arbiter a;
    memset(&a, 0, sizeof a);
    bool m_chunk = false, m_geom = false;
    uint64_t m_slot = 0, m_version = 0, slot = below(r, 3), version = below(r, 4);
    uint32_t geoms = (uint32_t)below(r, 3), n = 2 + (uint32_t)below(r, 12), bad_at = (uint32_t)below(r, 3 * n);
    for (uint32_t i = 0; i < geoms + n; i++) {
      bool geometry = i < geoms;
      uint64_t s_ = 0, v = 0;
      if (!geometry) {
        uint32_t step = (uint32_t)below(r, 3); /* the same slot, a later one, or the same slot again at its version */
        if (step == 1) slot += 1 + below(r, 3), version = below(r, 4);
        else if (step == 0) version += below(r, 3);
        s_ = slot, v = version;
      }
      if (i == bad_at && i > 0) { /* one candidate out of the catalog's order */
        switch (below(r, 3)) {
        case 0: geometry = true; break;
        case 1: s_ = slot > 0 ? slot - 1 - below(r, slot) : s_; break;
        default: v = version > 0 ? version - 1 : v; break;
        }
      }
      cs_array_verdict want;
      if (geometry) {
        want = m_chunk ? CS_ARRAY_OUT_OF_ORDER : m_geom ? CS_ARRAY_LOSES : CS_ARRAY_WINS;
        if (want != CS_ARRAY_OUT_OF_ORDER) m_geom = true;
      } else if (m_chunk && (s_ < m_slot || (s_ == m_slot && v < m_version))) {
        want = CS_ARRAY_OUT_OF_ORDER;
      } else {
        want = !m_chunk || s_ != m_slot ? CS_ARRAY_WINS : CS_ARRAY_LOSES;
        m_chunk = true, m_slot = s_, m_version = v;
      }
      cs_array_verdict got = cs_array_arbiter_next(&a, geometry, geometry ? below(r, 9) : s_, geometry ? 0 : v);
      if (got != want)
        RULE_FAIL(w, "array: arbiter candidate %u (%s, slot %" PRIu64 ", version %" PRIu64 ") answered %d; want %d", i,
                  geometry ? "geometry" : "chunk", s_, v, (int)got, (int)want);
      if (want == CS_ARRAY_OUT_OF_ORDER) break;
    }
  }
}

static void check_slices(sim_world *w, cs_prng *r) {
  char msg[160];
  for (int i = 0; i < 24; i++) {
    cs_array_geometry g;
    draw_geometry(r, &g);
    cs_array_slice s;
    memset(&s, 0, sizeof s);
    unsigned __int128 elements = 1;
    for (uint32_t d = 0; d < g.dims; d++) {
      uint64_t a = below(r, g.shape[d] + 1), b = below(r, g.shape[d] + 1);
      s.start[d] = a < b ? a : b;
      s.stop[d] = a < b ? b : a;
      elements *= s.stop[d] - s.start[d];
    }
    uint32_t d = (uint32_t)below(r, g.dims);
    int defect = (int)below(r, 3); /* 0 none, 1 start after stop, 2 stop past the shape */
    if (defect == 1 && s.stop[d] < UINT64_MAX) s.start[d] = s.stop[d] + 1 + below(r, 2);
    if (defect == 2) s.stop[d] = g.shape[d] + 1 + below(r, 3);
    /* The first bad dimension, as the header orders the checks. */
    int bad = -1;
    for (uint32_t k = 0; k < g.dims && bad < 0; k++)
      if (s.start[k] > s.stop[k] || s.stop[k] > g.shape[k]) bad = (int)k;
    msg[0] = '\0';
    int rc = cs_array_slice_check(&g, &s, msg, sizeof msg);
    cs_array_slice_iter it;
    int begin = cs_array_slice_begin(&it, &g, &s);
    if (bad < 0) {
      if (rc != CS_E_OK || begin != CS_E_OK) RULE_FAIL(w, "array: a slice inside the shape was refused: %s", msg);
      if (cs_array_slice_elements(&g, &s) != (uint64_t)elements)
        RULE_FAIL(w, "array: a slice of %" PRIu64 " elements counted %" PRIu64, (uint64_t)elements,
                  cs_array_slice_elements(&g, &s));
      cs_array_piece p;
      if (elements == 0 && cs_array_slice_next(&it, &p)) RULE_FAIL(w, "array: an empty slice gave a piece");
      check_pieces(w, r, &g, &s, (uint64_t)elements);
      /* And a slice of the same geometry that is not empty in any dimension (a drawn one often is, in one of 8). */
      uint64_t n = 1;
      for (uint32_t k = 0; k < g.dims; k++) {
        s.start[k] = below(r, g.shape[k]);
        s.stop[k] = s.start[k] + 1 + below(r, g.shape[k] - s.start[k]);
        n *= s.stop[k] - s.start[k];
      }
      check_pieces(w, r, &g, &s, n);
      continue;
    }
    if (rc != CS_E_INVALID_ARGUMENT || begin != CS_E_INVALID_ARGUMENT || !names_dim(msg, (uint32_t)bad))
      RULE_FAIL(w, "array: a slice bad at dimension %d was answered %d (begin %d): '%s'", bad, rc, begin, msg);
    CHECK_SHORT_MESSAGE(w, "array slice", cs_array_slice_check(&g, &s, sm_, sz_));
  }
  cs_array_geometry g;
  draw_geometry(r, &g);
  cs_array_slice s = {{0}, {0}};
  cs_array_slice_iter it;
  if (cs_array_slice_check(&g, NULL, msg, sizeof msg) != CS_E_INVALID_ARGUMENT ||
      cs_array_slice_check(NULL, &s, msg, sizeof msg) != CS_E_INVALID_ARGUMENT ||
      cs_array_slice_begin(NULL, &g, &s) != CS_E_INVALID_ARGUMENT)
    RULE_FAIL(w, "array: a slice check without a geometry, a slice or an iterator was not refused");
  g.chunk[0] = 0;
  if (cs_array_slice_begin(&it, &g, &s) != CS_E_INVALID_ARGUMENT)
    RULE_FAIL(w, "array: a slice of an invalid geometry was begun");
}

static void check_claims(sim_world *w, cs_prng *r) {
  for (int i = 0; i < 32; i++) {
    char nonce[CS_ARRAY_CLAIM_NONCE_HEX + 1], body[CS_ARRAY_CLAIM_BYTES_MAX + 8], want[CS_ARRAY_CLAIM_BYTES_MAX + 8];
    for (uint32_t k = 0; k < CS_ARRAY_CLAIM_NONCE_HEX; k++) nonce[k] = "0123456789abcdef"[below(r, 16)];
    nonce[CS_ARRAY_CLAIM_NONCE_HEX] = '\0';
    bool nonce_ok = below(r, 4) != 0;
    if (!nonce_ok) nonce[below(r, CS_ARRAY_CLAIM_NONCE_HEX)] = "AFg -/:`@G"[below(r, 10)]; /* the digits' neighbours */
    uint64_t at = i == 0 ? UINT64_MAX : i == 1 ? 0 : cs_prng_next(r) >> below(r, 64);
    size_t len = 0;
    int rc = cs_array_claim_format(nonce, at, body, &len);
    if (!nonce_ok) {
      if (rc != CS_E_INVALID_ARGUMENT) RULE_FAIL(w, "array: a claim with the nonce '%s' was formatted", nonce);
      continue;
    }
    int wn = snprintf(want, sizeof want, "%s %" PRIu64, nonce, at);
    if (rc != CS_E_OK || len != (size_t)wn || memcmp(body, want, len) != 0)
      RULE_FAIL(w, "array: the claim of %s at %" PRIu64 " is '%.*s', want '%s'", nonce, at, (int)len, body, want);
    /* Its bytes read back; other bytes (a claim from the first writers, torn, or not a claim) never parse. */
    switch (below(r, 7)) {
    case 0: body[below(r, len)] = "A -0x/:`g@"[below(r, 10)]; break;
    case 1: len = below(r, len); break;
    case 2: if (len < CS_ARRAY_CLAIM_BYTES_MAX + 1) body[len++] = (char)('0' + below(r, 10)); break;
    case 3: /* a leading zero */
      memmove(body + CS_ARRAY_CLAIM_NONCE_HEX + 2, body + CS_ARRAY_CLAIM_NONCE_HEX + 1, len - CS_ARRAY_CLAIM_NONCE_HEX - 1);
      body[CS_ARRAY_CLAIM_NONCE_HEX + 1] = '0';
      len++;
      break;
    default: break;
    }
    uint64_t got = 0, t = 0;
    bool ok = len > CS_ARRAY_CLAIM_NONCE_HEX + 1 && len <= CS_ARRAY_CLAIM_BYTES_MAX && body[CS_ARRAY_CLAIM_NONCE_HEX] == ' ';
    for (uint32_t k = 0; ok && k < CS_ARRAY_CLAIM_NONCE_HEX; k++) ok = oracle_hex_digit(body[k], CS_HEX_LOWER) >= 0;
    ok = ok && oracle_decimal(body + CS_ARRAY_CLAIM_NONCE_HEX + 1, len - CS_ARRAY_CLAIM_NONCE_HEX - 1, true, &t);
    rc = cs_array_claim_parse(body, len, &got);
    if (ok ? rc != CS_E_OK || got != t : rc != CS_E_PARSE)
      RULE_FAIL(w, "array: the claim '%.*s' read back as %d (%" PRIu64 "); want %s", (int)len, body, rc, got,
                ok ? "its time" : "a parse error (never taken over)");
    /* Stale: at least ttl old; a claim from the future never. */
    uint64_t now = below(r, 2) ? at + below(r, 1000) : at - below(r, 1000), ttl = below(r, 1200);
    if (i % 8 == 2) now = at + (ttl = below(r, 2)); /* exactly the TTL old, a TTL of 0 or 1 */
    bool stale = now >= at && now - at >= ttl;
    if (cs_array_claim_stale(at, now, ttl) != stale)
      RULE_FAIL(w, "array: a claim made at %" PRIu64 " with a TTL of %" PRIu64 " judged %s at %" PRIu64, at, ttl,
                stale ? "fresh" : "stale", now);
  }
  uint64_t at;
  if (cs_array_claim_parse(NULL, 40, &at) != CS_E_PARSE) RULE_FAIL(w, "array: no claim bytes parsed");
}

/* ---- the read planner's refusals and its hand-out with retries --------------------------------------------- */

/* A pack of the selection per docs/format.md: F a multiple of 64 past the header, a footer and trailer after it. */
static bool oracle_pack_ok(const cs_read_pack *p) {
  return p->footer_offset >= 64 && p->footer_offset % 64 == 0 && p->size_bytes > p->footer_offset &&
         p->size_bytes - p->footer_offset > 64 && p->size_bytes <= (UINT64_C(1) << 62);
}

static bool oracle_want_ok(const cs_read_want *x, const cs_read_pack *packs, uint32_t pack_count) {
  if (x->pack >= pack_count) return false;
  uint64_t f = packs[x->pack].footer_offset;
  return x->offset >= 64 && x->offset % 64 == 0 && x->offset <= f && x->length <= f - x->offset;
}

/*
 * whole_objects: one read [0, size) per named pack, in pack order, listing every want of its pack and marked as the
 * tail; its bytes are the packs' sizes. With one read too few it is refused as full.
 */
static void check_whole_plan(sim_world *w, const cs_read_pack *packs, uint32_t pc, const cs_read_want *wants, uint32_t wc,
                             uint32_t *order, cs_read_span *spans, uint64_t payload) {
  cs_read_limits lim;
  cs_read_limits_default(&lim);
  lim.whole_objects = true;
  cs_read_plan plan;
  char msg[200];
  int rc = cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg);
  if (rc != CS_E_OK) RULE_FAIL(w, "read plan (whole objects): a valid selection refused: %s", msg);
  uint32_t named = 0;
  uint64_t bytes = 0, footers = 0;
  for (uint32_t p = 0; p < pc; p++) {
    uint32_t wanted = 0;
    for (uint32_t k = 0; k < wc; k++) wanted += wants[k].pack == p;
    if (wanted == 0) continue;
    const cs_read_span *x = named < plan.span_count ? &spans[named] : NULL;
    if (x == NULL || x->pack != p || x->offset != 0 || x->length != packs[p].size_bytes || !x->tail || x->count != wanted)
      RULE_FAIL(w, "read plan (whole objects): pack %u's %u records are not in read %u of [0, %" PRIu64 ") as its tail", p,
                wanted, named, packs[p].size_bytes);
    for (uint32_t j = x->first; j < x->first + x->count; j++)
      if (j >= wc || wants[order[j]].pack != p) RULE_FAIL(w, "read plan (whole objects): read %u lists a record of another pack", named);
    named++;
    bytes += packs[p].size_bytes;
    footers += packs[p].size_bytes - packs[p].footer_offset;
  }
  if (plan.span_count != named || plan.requests != named || plan.pack_count != named || plan.bytes != bytes ||
      plan.footer_bytes != footers || plan.payload_bytes != payload)
    RULE_FAIL(w, "read plan (whole objects): %u reads of %" PRIu64 " bytes (footers %" PRIu64 ", payload %" PRIu64
              ") for %u packs of %" PRIu64 " bytes (footers %" PRIu64 ", payload %" PRIu64 ")", plan.span_count,
              plan.bytes, plan.footer_bytes, plan.payload_bytes, named, bytes, footers, payload);
  if (named > 0 && cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, named - 1, &plan, msg, sizeof msg) != CS_E_FULL)
    RULE_FAIL(w, "read plan (whole objects): %u packs in %u reads were not refused as full", named, named - 1);
}

/* Written after a selection's order array: the planner must leave it. */
#define ORDER_GUARD UINT32_C(0x600dF00d)

static void check_plan_refusals(sim_world *w, cs_prng *r) {
  cs_read_limits lim;
  memset(&lim, 0x5a, sizeof lim);
  cs_read_limits_default(&lim);
  if (lim.gap_bytes_max != (UINT64_C(256) << 10) || lim.span_bytes_max != (UINT64_C(8) << 20) ||
      lim.byte_limit != UINT64_MAX || lim.request_limit != UINT64_MAX || lim.whole_objects)
    RULE_FAIL(w, "read limits: the defaults are not 256 KiB gaps, 8 MiB reads, no byte or request limit, not whole");
  enum { PACKS = 4, WANTS = 6 };
  for (int i = 0; i < 24; i++) {
    cs_read_pack packs[PACKS];
    cs_read_want wants[WANTS];
    uint32_t order[WANTS + 1]; /* order[wc] is a guard the planner must not write */
    cs_read_span spans[WANTS + PACKS];
    cs_read_plan plan;
    char msg[200];
    uint32_t pc = 1 + (uint32_t)below(r, PACKS), wc = (uint32_t)below(r, WANTS + 1);
    for (uint32_t p = 0; p < pc; p++) {
      packs[p].footer_offset = 64 * (1 + below(r, 16));
      packs[p].size_bytes = packs[p].footer_offset + 65 + below(r, 300);
    }
    for (uint32_t k = 0; k < wc; k++) {
      wants[k].pack = (uint32_t)below(r, pc);
      uint64_t f = packs[wants[k].pack].footer_offset;
      wants[k].offset = 64 * (1 + below(r, f / 64));
      wants[k].length = below(r, f - wants[k].offset + 1);
    }
    /* At most one defect, in a pack or a record; or an edge that must be planned. */
    uint32_t at;
    switch (below(r, 3) == 0 ? 0 : 1 + below(r, 12)) {
    case 1: packs[at = (uint32_t)below(r, pc)].footer_offset = below(r, 64); break;
    case 2: packs[at = (uint32_t)below(r, pc)].footer_offset += 1 + below(r, 63); break;
    case 3: at = (uint32_t)below(r, pc); packs[at].size_bytes = packs[at].footer_offset + below(r, 65); break;
    case 4: packs[at = (uint32_t)below(r, pc)].size_bytes = (UINT64_C(1) << 62) + 1 + below(r, 2); break;
    case 5: if (wc > 0) wants[at = (uint32_t)below(r, wc)].pack = pc + (uint32_t)below(r, 3); break;
    case 6: if (wc > 0) wants[at = (uint32_t)below(r, wc)].offset = below(r, 64); break;
    case 7: if (wc > 0) wants[at = (uint32_t)below(r, wc)].offset += 1 + below(r, 63); break;
    case 8:
      if (wc > 0) {
        at = (uint32_t)below(r, wc);
        wants[at].offset = packs[wants[at].pack].footer_offset + 64 * (1 + below(r, 2));
      }
      break;
    case 9:
      if (wc > 0) {
        at = (uint32_t)below(r, wc);
        wants[at].length = packs[wants[at].pack].footer_offset - wants[at].offset + 1 + below(r, 64);
      }
      break;
    case 10: /* a pack of exactly 2^62 bytes, or between 2^61 and 2^62: planned */
      at = (uint32_t)below(r, pc);
      packs[at].size_bytes = below(r, 2) ? UINT64_C(1) << 62 : (UINT64_C(1) << 61) + 1 + below(r, UINT64_C(1) << 61);
      break;
    case 11: /* a record wanted again one byte longer (the read must reach its last byte), or to the footer */
      if (wc > 1) {
        at = (uint32_t)below(r, wc);
        uint32_t again = (at + 1 + (uint32_t)below(r, wc - 1)) % wc;
        uint64_t f = packs[wants[at].pack].footer_offset;
        wants[again] = wants[at];
        wants[again].length = below(r, 2) && wants[at].length < f - wants[at].offset ? wants[at].length + 1
                                                                                      : f - wants[at].offset;
      }
      break;
    case 12: /* a record that ends exactly at its pack's footer */
      if (wc > 0) {
        at = (uint32_t)below(r, wc);
        wants[at].length = packs[wants[at].pack].footer_offset - wants[at].offset;
      }
      break;
    default: break;
    }
    order[wc] = ORDER_GUARD;
    (void)at;
    int bad_pack = -1, bad_want = -1;
    for (uint32_t p = 0; p < pc && bad_pack < 0; p++)
      if (!oracle_pack_ok(&packs[p])) bad_pack = (int)p;
    for (uint32_t k = 0; k < wc && bad_pack < 0 && bad_want < 0; k++)
      if (!oracle_want_ok(&wants[k], packs, pc)) bad_want = (int)k;
    cs_read_limits_default(&lim);
    msg[0] = '\0';
    int rc = cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg);
    if (bad_pack >= 0 || bad_want >= 0) {
      char name[32];
      snprintf(name, sizeof name, bad_pack >= 0 ? "pack %d " : "record %d ", bad_pack >= 0 ? bad_pack : bad_want);
      if (rc != CS_E_INVALID_ARGUMENT || strncmp(msg, name, strlen(name)) != 0)
        RULE_FAIL(w, "read plan: a selection with a bad %s was answered %d: '%s'", name, rc, msg);
      CHECK_SHORT_MESSAGE(w, "read plan", cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, sm_,
                                                            sz_));
      continue;
    }
    if (rc != CS_E_OK) RULE_FAIL(w, "read plan: a valid selection of %u records refused: %s", wc, msg);
    if (order[wc] != ORDER_GUARD) RULE_FAIL(w, "read plan: the order array of %u entries written past its end", wc);
    CHECK_SHORT_MESSAGE(w, "read plan (planned)",
                        cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, sm_, sz_));
    /* Its payload is the wanted bytes, each once; its footers each named pack's [F, size); every want lies in a
       read of its pack that lists it (an empty one is listed by one); and its bytes are its reads'. By brute force
       over each pack's bytes. */
    uint64_t payload = 0, footers = 0, read_bytes = 0;
    for (uint32_t p = 0; p < pc; p++) {
      uint8_t seen[64 * 17] = {0};
      bool named = false;
      for (uint32_t k = 0; k < wc; k++) {
        if (wants[k].pack != p) continue;
        named = true;
        for (uint64_t b = wants[k].offset; b < wants[k].offset + wants[k].length; b++) payload += !seen[b], seen[b] = 1;
      }
      if (named) footers += packs[p].size_bytes - packs[p].footer_offset;
    }
    for (uint32_t sp = 0; sp < plan.span_count; sp++) read_bytes += spans[sp].length;
    for (uint32_t k = 0; k < wc; k++) {
      bool inside = false;
      for (uint32_t sp = 0; sp < plan.span_count && !inside; sp++) {
        const cs_read_span *x = &spans[sp];
        bool listed = false;
        for (uint32_t j = x->first; j < x->first + x->count && j < wc; j++) listed = listed || order[j] == k;
        /* an empty record is listed with a read of its pack wherever it lies (read_plan.h) */
        inside = listed && x->pack == wants[k].pack &&
                 (wants[k].length == 0 ||
                  (x->offset <= wants[k].offset && wants[k].offset + wants[k].length <= x->offset + x->length));
      }
      if (!inside) RULE_FAIL(w, "read plan: record %u (pack %u, [%" PRIu64 ", +%" PRIu64 ")) lies in no read that lists it", k,
                             wants[k].pack, wants[k].offset, wants[k].length);
    }
    /* And every read lists only records of its pack that lie in it (an empty one wherever it lies), each record once. */
    uint64_t listed_total = 0;
    for (uint32_t sp = 0; sp < plan.span_count; sp++) {
      const cs_read_span *x = &spans[sp];
      listed_total += x->count;
      for (uint32_t j = x->first; j < x->first + x->count; j++) {
        const cs_read_want *y = j < wc ? &wants[order[j]] : NULL;
        if (y == NULL || y->pack != x->pack ||
            (y->length > 0 && (y->offset < x->offset || y->offset + y->length > x->offset + x->length)))
          RULE_FAIL(w, "read plan: read %u (pack %u, [%" PRIu64 ", +%" PRIu64 ")) lists position %u, a record not in it",
                    sp, x->pack, x->offset, x->length, j);
      }
    }
    if (listed_total != wc) RULE_FAIL(w, "read plan: the reads list %" PRIu64 " records of %u", listed_total, wc);
    if (plan.payload_bytes != payload || plan.footer_bytes != footers || plan.bytes != read_bytes)
      RULE_FAIL(w, "read plan: payload %" PRIu64 ", footers %" PRIu64 ", bytes %" PRIu64 "; the wants hold %" PRIu64
                " bytes, their packs' footers %" PRIu64 ", the reads %" PRIu64, plan.payload_bytes, plan.footer_bytes,
                plan.bytes, payload, footers, read_bytes);
    uint64_t bytes = plan.bytes, requests = plan.requests;
    if (wc > 0 && cs_read_plan_make(packs, pc, wants, wc, &lim, order, NULL, 0, &plan, msg, sizeof msg) != CS_E_FULL)
      RULE_FAIL(w, "read plan: no room for spans was not refused as full");
    if (wc > 0) {
      uint32_t fewer = (uint32_t)requests - 1; /* one read too few */
      if (cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, fewer, &plan, msg, sizeof msg) != CS_E_FULL)
        RULE_FAIL(w, "read plan: %u reads for a plan of %" PRIu64 " were not refused as full", fewer, requests);
      CHECK_SHORT_MESSAGE(w, "read plan without room for its spans",
                          cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, fewer, &plan, sm_, sz_));
    }
    check_whole_plan(w, packs, pc, wants, wc, order, spans, payload);
    if (order[wc] != ORDER_GUARD) RULE_FAIL(w, "read plan: the order array of %u entries written past its end", wc);
    /* The limits: exactly at them is planned, one under is refused saying by how much, the plan filled. */
    lim.byte_limit = bytes;
    lim.request_limit = requests > 0 ? requests : 1;
    if (cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg) != CS_E_OK)
      RULE_FAIL(w, "read plan: a plan of %" PRIu64 " bytes and %" PRIu64 " requests refused at exactly those limits: %s",
                bytes, requests, msg);
    if (bytes > 0) {
      lim.byte_limit = bytes - 1;
      rc = cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg);
      if (rc != CS_E_TOO_LARGE || plan.bytes != bytes || strstr(msg, "1 bytes over") == NULL)
        RULE_FAIL(w, "read plan: a plan of %" PRIu64 " bytes under a limit one less answered %d: '%s'", bytes, rc, msg);
      CHECK_SHORT_MESSAGE(w, "read plan over its byte limit",
                          cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, sm_, sz_));
      lim.byte_limit = UINT64_MAX;
    }
    if (requests > 1) {
      lim.request_limit = requests - 1;
      rc = cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg);
      if (rc != CS_E_TOO_LARGE || plan.requests != requests || strstr(msg, ": 1 over") == NULL)
        RULE_FAIL(w, "read plan: a plan of %" PRIu64 " requests under a limit one less answered %d: '%s'", requests, rc,
                  msg);
      CHECK_SHORT_MESSAGE(w, "read plan over its request limit",
                          cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, sm_, sz_));
    }
    lim.request_limit = 0;
    if (cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg) !=
            CS_E_INVALID_ARGUMENT || strstr(msg, "request_limit") == NULL)
      RULE_FAIL(w, "read plan: a request limit of 0 was not refused naming it: '%s'", msg);
    /* Every array with a count must be given. */
    cs_read_limits_default(&lim);
    const char *which = NULL;
    switch (below(r, 6)) {
    case 0: rc = cs_read_plan_make(NULL, pc, wants, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg), which = "packs"; break;
    case 1: rc = wc == 0 ? CS_E_INVALID_ARGUMENT : cs_read_plan_make(packs, pc, NULL, wc, &lim, order, spans, wc + pc, &plan, msg, sizeof msg), which = "wants"; break;
    case 2: rc = wc == 0 ? CS_E_INVALID_ARGUMENT : cs_read_plan_make(packs, pc, wants, wc, &lim, NULL, spans, wc + pc, &plan, msg, sizeof msg), which = "order"; break;
    case 3: rc = cs_read_plan_make(packs, pc, wants, wc, &lim, order, NULL, wc + pc, &plan, msg, sizeof msg), which = "spans"; break;
    case 4: rc = cs_read_plan_make(packs, pc, wants, wc, NULL, order, spans, wc + pc, &plan, msg, sizeof msg), which = "limits"; break;
    default: rc = cs_read_plan_make(packs, pc, wants, wc, &lim, order, spans, wc + pc, NULL, msg, sizeof msg), which = "plan"; break;
    }
    if (rc != CS_E_INVALID_ARGUMENT) RULE_FAIL(w, "read plan: no %s array given, and %d", which, rc);
  }
}

/* The hand-out of a plan's reads with retries, against a model of its rules. */
static void check_exec(sim_world *w, cs_prng *r) {
  for (cs_outcome o = CS_OUT_OK; o < CS_OUT_COUNT_; o++) {
    bool want = o == CS_OUT_REFUSED || o == CS_OUT_TIMEOUT || o == CS_OUT_UNKNOWN || o == CS_OUT_SERVER_ERROR ||
                o == CS_OUT_THROTTLED;
    if (cs_read_retryable(o) != want) RULE_FAIL(w, "read: outcome %s judged %sretryable", cs_outcome_name(o), want ? "not " : "");
  }
  cs_read_exec exec;
  cs_read_plan plan = {.span_count = 3, .requests = 3};
  if (cs_read_exec_init(&exec, &plan, 0) != CS_E_INVALID_ARGUMENT || cs_read_exec_init(&exec, NULL, 1) != CS_E_INVALID_ARGUMENT ||
      cs_read_exec_init(NULL, &plan, 1) != CS_E_INVALID_ARGUMENT)
    RULE_FAIL(w, "read: a hand-out with no plan, no exec or nothing in flight allowed was begun");
  enum { SPANS = 12 };
  for (int i = 0; i < 8; i++) {
    uint32_t n = (uint32_t)below(r, SPANS + 1), inflight_max = 1 + (uint32_t)below(r, 4);
    uint32_t per = (uint32_t)below(r, 4);
    uint64_t budget = below(r, 6);
    plan = (cs_read_plan){.span_count = n, .requests = n};
    if (cs_read_exec_init(&exec, &plan, inflight_max) != CS_E_OK) RULE_FAIL(w, "read: a hand-out refused");
    cs_read_exec_retries(&exec, per, budget);
    bool out[SPANS] = {false};
    uint32_t retried[SPANS] = {0}, handed = 0, inflight = 0, completed = 0;
    uint64_t retries = 0;
    int first_err = CS_E_OK;
    for (int step = 0; step < 200; step++) {
      bool finished = inflight == 0 && (first_err != CS_E_OK || completed == n);
      int err = -99;
      if (cs_read_exec_finished(&exec, &err) != finished || err != first_err)
        RULE_FAIL(w, "read: finished says %d (error %d) with %u of %u back, %u out, first error %d",
                  (int)cs_read_exec_finished(&exec, NULL), err, completed, n, inflight, first_err);
      if (finished) break;
      uint32_t span = UINT32_MAX;
      if (below(r, 2) == 0 || inflight == 0) {
        int rc = cs_read_exec_next(&exec, &span);
        int want = first_err != CS_E_OK || handed == n ? CS_E_CLOSED : inflight == inflight_max ? CS_E_WOULD_BLOCK : CS_E_OK;
        if (rc != want || (rc == CS_E_OK && span != handed))
          RULE_FAIL(w, "read: next gave %d (span %u); want %d (span %u)", rc, span, want, handed);
        if (rc == CS_E_OK) out[handed++] = true, inflight++;
        if (rc != CS_E_OK && inflight == 0) break; /* nothing out and nothing to hand out: a failed read ends */
        continue;
      }
      uint32_t s;
      do s = (uint32_t)below(r, handed); while (!out[s]);
      if (below(r, 10) == 0) { /* a span never handed out */
        uint32_t never = handed + (uint32_t)below(r, 3);
        if (cs_read_exec_done(&exec, never, CS_E_OK) != CS_E_STATE || cs_read_exec_retry(&exec, never, 0) != CS_E_STATE)
          RULE_FAIL(w, "read: a completion or retry of span %u, never handed out, was taken", never);
      }
      uint64_t kind = below(r, 3);
      if (kind == 1) { /* a transient failure: retried when the rules allow */
        bool may = first_err == CS_E_OK && retried[s] < per && retries < budget;
        int rc = cs_read_exec_retry(&exec, s, retried[s]);
        if (rc != (may ? CS_E_OK : CS_E_TOO_LARGE))
          RULE_FAIL(w, "read: retry %u of span %u (%u allowed a read, %" PRIu64 " of %" PRIu64 " spent) gave %d", retried[s] + 1,
                    s, per, retries, budget, rc);
        if (may) {
          retried[s]++, retries++;
          if (exec.issued != handed + retries || exec.retries != retries)
            RULE_FAIL(w, "read: %" PRIu64 " issued, %" PRIu64 " retries; want %" PRIu64 ", %" PRIu64, exec.issued,
                      exec.retries, handed + retries, retries);
          continue;
        }
      }
      int e = kind == 0 ? CS_E_OK : CS_E_IO;
      if (cs_read_exec_done(&exec, s, e) != CS_E_OK) RULE_FAIL(w, "read: the completion of span %u refused", s);
      out[s] = false, inflight--, completed++;
      if (e != CS_E_OK && first_err == CS_E_OK) first_err = e;
    }
  }
}

/*
 * A message in a buffer of every size from one byte to one past its length: the longest prefix that fits and a
 * NUL inside the buffer, never a byte past it (a sentinel follows). full is the message in a buffer with room.
 */
typedef int (*validate_fn)(const void *cfg, char *msg, size_t msg_size);

static int validate_engine(const void *cfg, char *msg, size_t msg_size) {
  return cs_engine_config_validate(cfg, msg, msg_size);
}

static int validate_sink(const void *cfg, char *msg, size_t msg_size) {
  return cs_sink_config_validate(cfg, msg, msg_size);
}

static void check_message_fits(sim_world *w, const char *what, validate_fn validate, const void *cfg) {
  char full[256];
  int rc = validate(cfg, full, sizeof full);
  size_t length = strlen(full);
  if (length + 1 >= sizeof full) RULE_FAIL(w, "%s: a message of %zu bytes", what, length);
  for (size_t size = 1; size <= length + 1; size++) {
    char buf[257];
    memset(buf, '#', sizeof buf);
    int got = validate(cfg, buf, size);
    size_t want = length < size ? length : size - 1;
    if (got != rc || buf[size] != '#' || memchr(buf, '\0', size) == NULL || strlen(buf) != want ||
        memcmp(buf, full, want) != 0)
      RULE_FAIL(w, "%s: the message \"%s\" in a buffer of %zu bytes is not its first %zu bytes inside the buffer"
                " (answer %d, then %d)", what, full, size, want, rc, got);
  }
}

/* The engine's and the sink's config refusals write their message only where there is room for it. */
static void check_config_messages(sim_world *w, cs_prng *r) {
  cs_engine_config e;
  cs_engine_config_default(&e);
  if (below(r, 2)) e.start_timeout_ns = below(r, CS_MS_NS);
  else e.stop_reserve_ns = below(r, CS_MS_NS);
  CHECK_SHORT_MESSAGE(w, "engine config", cs_engine_config_validate(&e, sm_, sz_));
  check_message_fits(w, "engine config", validate_engine, &e);
  cs_engine_config_default(&e);
  CHECK_SHORT_MESSAGE(w, "engine config (valid)", cs_engine_config_validate(&e, sm_, sz_));
  cs_sink_config k;
  cs_sink_config_default(&k);
  k.pack_records_max = 0;
  CHECK_SHORT_MESSAGE(w, "sink config", cs_sink_config_validate(&k, sm_, sz_));
  check_message_fits(w, "sink config", validate_sink, &k);
}

void sim_check_api_rules(sim_world *w) {
  cs_prng r;
  cs_prng_seed(&r, w->opts->seed ^ UINT64_C(0x6170692072756c65));
  check_prng(w, &r);
  check_names(w, &r);
  check_tables(w, &r);
  check_decimal(w, &r);
  check_hex(w, &r);
  check_uuids(w, &r);
  check_quote(w, &r);
  check_geometries(w, &r);
  check_slices(w, &r);
  check_claims(w, &r);
  check_stamps(w, &r);
  check_arbiter(w, &r);
  check_plan_refusals(w, &r);
  check_exec(w, &r);
  check_config_messages(w, &r);
  sim_check_engine_rules(w, &r);
}

/*
 * capstore/types.h: the vocabulary shared by the pure cores, the simulator and
 * the real adapters: errors, outcomes, identifiers and pack references.
 *
 * Everything here has an explicit size; times are uint64_t nanoseconds named
 * *_ns. Nothing here allocates or performs I/O.
 */
#ifndef CAPSTORE_TYPES_H
#define CAPSTORE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A deadline that never comes: a core with nothing scheduled answers this. */
#define CS_NEVER UINT64_MAX

#define CS_MS_NS UINT64_C(1000000)
#define CS_SEC_NS UINT64_C(1000000000)

/* Longest object key the cores carry (S3's own limit is 1024 bytes). */
#define CS_KEY_MAX 1024u

/*
 * Errors are negative integers from this one enum; cs_strerror names them.
 * Zero is success. New errors go at the end so numbers stay stable.
 */
typedef enum cs_err {
  CS_E_OK = 0,
  CS_E_INVALID_ARGUMENT = -1, /* a caller passed a value outside its contract */
  CS_E_CONFIG = -2,           /* a config field is out of range */
  CS_E_NO_MEMORY = -3,        /* a buffer given at init is too small */
  CS_E_FULL = -4,             /* a bounded table or queue is full */
  CS_E_SPOOL_FULL = -5,       /* the spool quota refuses the record */
  CS_E_WOULD_BLOCK = -6,      /* the spool is full; the caller may wait */
  CS_E_CLOSED = -7,           /* the object is closed or stopping */
  CS_E_STATE = -8,            /* the call is not valid in the current state */
  CS_E_TIMEOUT = -9,          /* a deadline passed */
  CS_E_NOT_FOUND = -10,       /* the thing named does not exist */
  CS_E_PARSE = -11,           /* input bytes do not follow their grammar */
  CS_E_TOO_LARGE = -12,       /* a value exceeds its size bound */
  CS_E_IO = -13,              /* an operating-system call failed */
  CS_E_CONFLICT = -14,        /* the same id names different bytes */
  CS_E_CORRUPT = -15,         /* stored bytes fail their checksum or format */
  CS_E_BUSY = -16,            /* another owner holds the resource */
  CS_E_UNSUPPORTED = -17,     /* a format or feature version is not known */
  CS_E_SLOT_WRITTEN = -18,    /* a capture array's slot was already written: the first write stays */
} cs_err;

/* A static English description of err; never NULL. */
const char *cs_strerror(int err);

/*
 * Writes at most max_bytes of bytes[0..len) into out (cap bytes, at least 8)
 * for a message: control bytes, DEL and NUL as \xNN, then "..." when cut
 * (by max_bytes or by cap). Always NUL-terminated. Keys and names from
 * outside are shown this way, so a message never carries a raw control byte.
 */
void cs_quote_bytes(const char *bytes, size_t len, size_t max_bytes, char *out, size_t cap);

/*
 * The closed set of outcomes a primitive request can end with. Adapters
 * classify every answer (or its absence) into exactly one of these.
 */
typedef enum cs_outcome {
  CS_OUT_OK = 0,
  CS_OUT_REFUSED,      /* connection refused or reset before sending: not applied */
  CS_OUT_TIMEOUT,      /* no answer in time: may or may not have applied */
  CS_OUT_UNKNOWN,      /* sent, answer lost: may or may not have applied */
  CS_OUT_SERVER_ERROR, /* 5xx */
  CS_OUT_THROTTLED,    /* 503 SlowDown, 429, ClickHouse too many queries */
  CS_OUT_FORBIDDEN,    /* 403 */
  CS_OUT_NOT_FOUND,    /* 404 */
  CS_OUT_PRECONDITION, /* 412 */
  CS_OUT_TOO_LARGE,    /* the request is larger than the server accepts */
  CS_OUT_INVALID,      /* the server refuses the content itself */
  CS_OUT_COUNT_
} cs_outcome;

const char *cs_outcome_name(cs_outcome outcome);

/* True for outcomes that say nothing about the request's content: outages. */
bool cs_outcome_is_outage(cs_outcome outcome);

/* True when the request may have been applied although no success came back. */
bool cs_outcome_maybe_applied(cs_outcome outcome);

/* A 128-bit identifier (UUIDv7 for packs), raw bytes in network order. */
typedef struct cs_uuid {
  uint8_t bytes[16];
} cs_uuid;

/* Canonical text form: 36 characters, lowercase hex, dashes at 8-4-4-4-12. */
#define CS_UUID_TEXT_LEN 36u

/*
 * Parses exactly CS_UUID_TEXT_LEN characters of canonical lowercase text.
 * Returns CS_E_OK, or CS_E_PARSE for anything else (uppercase included).
 */
int cs_uuid_parse(const char *text, size_t text_len, cs_uuid *out);

/* Which letters a hex digit may use: canonical text is lowercase, dirstore's escapes uppercase. */
typedef enum cs_hex_case {
  CS_HEX_LOWER = 1, /* 0-9 a-f */
  CS_HEX_UPPER = 2, /* 0-9 A-F */
  CS_HEX_ANY = 3    /* 0-9 a-f A-F */
} cs_hex_case;

/* The value (0..15) of the hex digit c when accept allows its letter case; -1 for anything else. */
int cs_hex_value(char c, cs_hex_case accept);

/*
 * The len decimal digits of text as a u64. CS_E_OK, or CS_E_PARSE for no
 * digits, a byte other than 0-9, a value past 2^64 - 1, or (canonical) a
 * leading zero of a number other than 0.
 */
int cs_decimal_u64(const char *text, size_t len, bool canonical, uint64_t *out);

/*
 * Decodes the text_len hex digits of text into out[text_len / 2], the first
 * digit the high half of out[0]. Returns CS_E_OK, or CS_E_PARSE for an odd
 * text_len or a character that is not a digit accept allows (out may then
 * be partly written).
 */
int cs_hex_decode(const char *text, size_t text_len, cs_hex_case accept, uint8_t *out);

/* Writes the canonical text and a terminating NUL into out[37]. */
void cs_uuid_format(const cs_uuid *id, char out[CS_UUID_TEXT_LEN + 1]);

bool cs_uuid_equal(const cs_uuid *a, const cs_uuid *b);
int cs_uuid_compare(const cs_uuid *a, const cs_uuid *b);

/*
 * Extracts the pack id from an object key whose last segment is
 * "<canonical uuid>.dmi-pack". Returns CS_E_OK or CS_E_PARSE.
 */
int cs_key_pack_id(const char *key, size_t key_len, cs_uuid *out);

/*
 * What the cores know of a pack: identity, sizes, checksum and its object key.
 * The cores never see payload bytes.
 */
typedef struct cs_pack_ref {
  cs_uuid pack_id;
  uint64_t created_at_ns;
  uint64_t size_bytes;   /* the whole object */
  uint64_t index_bytes;  /* what its descriptor rows cost a catalog insert */
  uint32_t record_count;
  uint32_t key_len;
  uint8_t sha256[32];    /* of the whole object */
  char key[CS_KEY_MAX];  /* object key, NUL-terminated, key_len bytes */
} cs_pack_ref;

/* Copies key into ref->key; CS_E_TOO_LARGE when it does not fit. */
int cs_pack_ref_set_key(cs_pack_ref *ref, const char *key, size_t key_len);

/*
 * A small deterministic PRNG (xoshiro256**, seeded by splitmix64). Cores take
 * all randomness from one of these, seeded at init.
 */
typedef struct cs_prng {
  uint64_t state[4];
} cs_prng;

void cs_prng_seed(cs_prng *prng, uint64_t seed);
uint64_t cs_prng_next(cs_prng *prng);
/* Uniform in [0, bound); bound 0 answers 0. */
uint64_t cs_prng_below(cs_prng *prng, uint64_t bound);
/* Derives an independent sub-stream, e.g. one per fault kind. */
void cs_prng_split(cs_prng *parent, cs_prng *child);

#ifdef __cplusplus
}
#endif

#endif

/*
 * capstore/settings.h: one configuration for the library and the command: a
 * JSON file (whole-line '#' comments allowed) whose nested keys name the
 * fields of capstore_config, every key documented
 * in docs/configuration.md and listed by capstore_settings_keys.
 *
 *   capstore_settings *s;
 *   capstore_settings_new(&s);                                   // the documented defaults
 *   if (capstore_settings_load(s, "capstore.json", msg, sizeof msg) != CS_E_OK) ... msg names key and rule
 *   capstore_settings_set(s, "service.lease_ttl", "30s", msg, sizeof msg);  // one key as text
 *   if (capstore_settings_validate(s, msg, sizeof msg) != CS_E_OK) ...
 *   capstore_open(capstore_settings_config(s), &cs, msg, sizeof msg);
 *   capstore_settings_free(s);                                   // after the runtime is freed
 *
 * Values: text; true/false; whole numbers (counts); sizes as bytes or text
 * with a unit ("64MiB", "8 GiB", "512KiB", "1GB"); durations as text with a
 * unit ("250ms", "1.5s", "5m"; 0 alone means none). An unknown key, a value
 * of the wrong type or out of range is refused with the key and the rule
 * named. Secrets are never read from the file: S3 credentials come from
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, the
 * ClickHouse password from CAPSTORE_CLICKHOUSE_PASSWORD; a secret key in a
 * file is refused with the variable to use. No message quotes a secret.
 *
 * A settings object is not thread-safe; the config it hands out points into
 * it and lives until capstore_settings_free.
 */
#ifndef CAPSTORE_SETTINGS_H
#define CAPSTORE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct capstore_config;

typedef struct capstore_settings capstore_settings;

/* The documented defaults (capstore_config_default). CS_E_OK or CS_E_NO_MEMORY. */
int capstore_settings_new(capstore_settings **out);
void capstore_settings_free(capstore_settings *s);

/*
 * Reads a configuration file over what s holds (keys it does not name keep
 * their values). CS_E_OK, CS_E_IO (msg names the file and the system's
 * reason), or CS_E_CONFIG: msg names the file, and the line and column of
 * a JSON error, or the key and the rule broken ("capstore.json:
 * service.lease_ttl: a duration needs a unit (ns, us, ms, s, m, h): 30").
 * Files over 1 MiB are refused. On an error s may hold some of the file's
 * values: start again from capstore_settings_new.
 */
int capstore_settings_load(capstore_settings *s, const char *path, char *msg, size_t msg_size);
/* The same from text (len bytes, no terminator needed); origin names it in messages. */
int capstore_settings_parse(capstore_settings *s, const char *text, size_t len, const char *origin, char *msg,
                            size_t msg_size);

/*
 * Sets one key ("catalog.clickhouse.url", "capture.linger") from text, as a
 * file's value would set it (a string value is the text itself; a bool
 * "true" or "false"; numbers, sizes and durations as above). CS_E_OK or
 * CS_E_CONFIG naming the key and the rule.
 */
int capstore_settings_set(capstore_settings *s, const char *key, const char *value, char *msg, size_t msg_size);

/*
 * Reads CAPSTORE_CLICKHOUSE_PASSWORD, then checks everything the runtime
 * will (capstore_config_validate); a refusal names the file's key, not the
 * C field. CS_E_OK or CS_E_CONFIG.
 */
int capstore_settings_validate(capstore_settings *s, char *msg, size_t msg_size);

/* The configuration s holds (validated or not): valid until capstore_settings_free. */
const struct capstore_config *capstore_settings_config(const capstore_settings *s);

/*
 * The effective configuration as one JSON object in the file's form (every
 * key, defaults included; no secret, only whether one is set). Writes at
 * most size bytes, NUL-terminated; returns the length the whole text needs.
 */
size_t capstore_settings_json(const capstore_settings *s, char *buf, size_t size);

/* One key of the file, for tools and docs. */
typedef struct capstore_setting_info {
  const char *key;   /* "service.lease_ttl" */
  const char *type;  /* "text", "bool", "count", "size", "duration", or the choices ("publisher|uploader") */
  const char *doc;   /* one line */
} capstore_setting_info;

/* The keys a file may hold, in documentation order; *count gets their number. */
const capstore_setting_info *capstore_settings_keys(size_t *count);

#ifdef __cplusplus
}
#endif

#endif

/*
 * The configuration file (capstore/settings.h): every kind of value, the
 * refusals a user sees (key and rule named, the file's line and column),
 * secrets only from the environment and never printed, the effective
 * configuration round-tripping through its JSON, and a file that opens a
 * real runtime which captures, flushes and closes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capstore/capstore.h"

static capstore_settings *fresh(void) {
  capstore_settings *s;
  assert_int_equal(capstore_settings_new(&s), CS_E_OK);
  return s;
}

/* Parses text into fresh settings; returns the answer, the message in msg. */
static int parse(capstore_settings **out, const char *text, char *msg, size_t msg_size) {
  *out = fresh();
  return capstore_settings_parse(*out, text, strlen(text), "test.json", msg, msg_size);
}

static void refused(const char *text, const char *want) {
  capstore_settings *s;
  char msg[600];
  int rc = parse(&s, text, msg, sizeof msg);
  if (rc == CS_E_OK) rc = capstore_settings_validate(s, msg, sizeof msg);
  if (rc != CS_E_CONFIG || strstr(msg, want) == NULL) print_error("for %s\ngot %d '%s'\nwant '%s'\n", text, rc, msg, want);
  assert_int_equal(rc, CS_E_CONFIG);
  assert_non_null(strstr(msg, want));
  assert_null(strstr(msg, "hunter2")); /* no message quotes a secret */
  capstore_settings_free(s);
}

#define BASE "\"spool_dir\": \"/x\", \"store\": {\"dir\": \"/y\"}, \"catalog\": {\"sqlite\": \"/z\"}"

static void test_defaults_are_the_runtime_defaults(void **state) {
  (void)state;
  capstore_settings *s = fresh();
  capstore_config want;
  capstore_config_default(&want);
  const capstore_config *got = capstore_settings_config(s);
  assert_string_equal(got->name, want.name);
  assert_int_equal(got->role, want.role);
  assert_int_equal(got->service.lease_ttl_ns, want.service.lease_ttl_ns);
  assert_int_equal(got->capture.sink.linger_ns, want.capture.sink.linger_ns);
  assert_int_equal(got->capture.staging_bytes, want.capture.staging_bytes);
  char msg[300];
  assert_int_equal(capstore_settings_validate(s, msg, sizeof msg), CS_E_CONFIG);
  assert_string_equal(msg, "spool_dir is not set");
  capstore_settings_free(s);
}

static void test_every_kind_of_value(void **state) {
  (void)state;
  static const char text[] =
      "# a comment line\n"
      "{\n"
      "  \"spool_dir\": \"/var/spool/cs\",\n"
      "    # an indented comment with \"quotes\" and { braces\n"
      "  \"role\": \"uploader\",\n"
      "  \"store\": {\"s3\": {\"endpoint\": \"https://s3.example:9000\", \"bucket\": \"b-1\", \"max_connections\": 32}},\n"
      "  \"catalog\": {\"clickhouse\": {\"url\": \"https://ch.example:8443/\", \"user\": \"cap\"}, \"timeout\": \"1.5s\"},\n"
      "  \"reconcile\": {\"at_start\": false, \"interval\": \"5m\"},\n"
      "  \"capture\": {\"staging\": \"256 MiB\", \"record_max\": 1048576, \"linger\": \"250ms\", \"full_policy\": \"refuse\",\n"
      "              \"spool_bytes_max\": \"2GB\", \"block_max\": \"1500us\"},\n"
      "  \"service.lease_ttl\": \"2h\",\n"
      "  \"service\": {\"backoff_base\": \"0.25s\", \"index_batch_bytes_max\": \"1.5GiB\", \"store_lists_complete\": true}\n"
      "}\n";
  capstore_settings *s;
  char msg[300];
  assert_int_equal(parse(&s, text, msg, sizeof msg), CS_E_OK);
  assert_string_equal(msg, "");
  const capstore_config *c = capstore_settings_config(s);
  assert_string_equal(c->spool_dir, "/var/spool/cs");
  assert_int_equal(c->role, CS_ROLE_UPLOADER);
  assert_string_equal(c->s3_endpoint, "https://s3.example:9000");
  assert_string_equal(c->s3_bucket, "b-1");
  assert_int_equal(c->s3_max_connections, 32);
  assert_string_equal(c->clickhouse_url, "https://ch.example:8443/");
  assert_string_equal(c->clickhouse_user, "cap");
  assert_int_equal(c->catalog_timeout_ns, 1500000000ull);
  assert_false(c->reconcile_at_start);
  assert_int_equal(c->service.reconcile_interval_ns, 300ull * CS_SEC_NS);
  assert_int_equal(c->capture.staging_bytes, 256ull << 20);
  assert_int_equal(c->capture.record_bytes_max, 1048576);
  assert_int_equal(c->capture.sink.linger_ns, 250000000ull);
  assert_int_equal(c->capture.sink.full_policy, CS_FULL_REFUSE);
  assert_int_equal(c->capture.sink.spool_bytes_max, 2000000000ull);
  assert_int_equal(c->capture.sink.block_max_ns, 1500000ull);
  assert_int_equal(c->service.lease_ttl_ns, 7200ull * CS_SEC_NS);
  assert_int_equal(c->service.backoff_base_ns, 250000000ull);
  assert_int_equal(c->service.index_batch_bytes_max, 3ull << 29);
  assert_true(c->service.store_lists_complete);
  /* A later file or set() changes only what it names. */
  assert_int_equal(capstore_settings_set(s, "capture.linger", "2s", msg, sizeof msg), CS_E_OK);
  assert_int_equal(c->capture.sink.linger_ns, 2ull * CS_SEC_NS);
  assert_string_equal(c->spool_dir, "/var/spool/cs");
  capstore_settings_free(s);
}

static void test_keys_and_types_refused_by_name(void **state) {
  (void)state;
  refused("{" BASE ", \"service\": {\"lease_tl\": \"30s\"}}", "unknown key 'service.lease_tl' (did you mean service.lease_ttl?)");
  refused("{" BASE ", \"frobnicate\": 1}", "unknown key 'frobnicate' (docs/configuration.md lists them)");
  refused("{" BASE ", \"service\": 5}", "service: expected an object of keys, got a whole number");
  refused("{" BASE ", \"service\": {\"lease_ttl\": 30}}", "service.lease_ttl: a duration needs a unit (ns, us, ms, s, m, h): '30'");
  refused("{" BASE ", \"service\": {\"lease_ttl\": \"30 parsecs\"}}", "service.lease_ttl: '30 parsecs' has no known unit");
  refused("{" BASE ", \"service\": {\"lease_ttl\": \"1.5ns\"}}", "not a whole number of nanoseconds");
  refused("{" BASE ", \"service\": {\"lease_ttl\": \"s\"}}", "service.lease_ttl: 's' is not a duration");
  refused("{" BASE ", \"service\": {\"lease_ttl\": \"99999999999h\"}}", "too large");
  refused("{" BASE ", \"service\": {\"lease_ttl\": true}}", "service.lease_ttl: expected a duration");
  refused("{" BASE ", \"capture\": {\"staging\": \"0.5B\"}}", "not a whole number of bytes");
  refused("{" BASE ", \"capture\": {\"staging\": \"99999999999TiB\"}}", "too large");
  refused("{" BASE ", \"capture\": {\"staging\": 1.5}}", "capture.staging: expected a size");
  refused("{" BASE ", \"service\": {\"flush_max\": -1}}", "service.flush_max: -1 is negative");
  refused("{" BASE ", \"service\": {\"flush_max\": \"3\"}}", "service.flush_max: expected a whole number, got a string");
  refused("{" BASE ", \"service\": {\"flush_max\": 4294967296}}", "service.flush_max: '4294967296' is not a whole number from 0 to 4294967295");
  refused("{" BASE ", \"reconcile\": {\"at_start\": \"yes\"}}", "reconcile.at_start: expected true or false, got a string");
  refused("{" BASE ", \"role\": \"boss\"}", "role: expected publisher, uploader or capture");
  refused("{" BASE ", \"capture\": {\"full_policy\": \"drop\"}}", "capture.full_policy: expected block or refuse");
  refused("{" BASE ", \"key_prefix\": null}", "key_prefix: null is not a value (leave the key out for its default)");
  refused("{" BASE ", \"name\": [\"a\"]}", "name: expected a string, got an array");
}

static void test_edges_reported_by_review(void **state) {
  (void)state;
  /* A key given twice, once nested and once dotted, in either order. */
  refused("{" BASE ", \"service.lease_ttl\": \"7s\", \"service\": {\"lease_ttl\": \"9s\"}}",
          "service.lease_ttl: given twice (once nested, once dotted)");
  refused("{" BASE ", \"service\": {\"lease_ttl\": \"9s\"}, \"service.lease_ttl\": \"7s\"}", "given twice");
  /* A user or password in the ClickHouse URL's query: refused, the value never quoted. */
  refused("{\"spool_dir\": \"/x\", \"store\": {\"dir\": \"/y\"}, "
          "\"catalog\": {\"clickhouse\": {\"url\": \"https://ch:8443/?user=u&password=hunter2\"}}}",
          "catalog.clickhouse.url carries a user or password in its query");
  /* A replication setting in its query, percent-encoded: refused by name, pointing at the file's keys. */
  refused("{\"spool_dir\": \"/x\", \"store\": {\"dir\": \"/y\"}, "
          "\"catalog\": {\"clickhouse\": {\"url\": \"https://ch:8443/?insert%5Fquorum%5Ftimeout=1\"}}}",
          "catalog.clickhouse.url carries the replication setting 'insert_quorum_timeout' in its query: set "
          "catalog.clickhouse.cluster and catalog.clickhouse.insert_quorum instead");
  /* Values up to 2^64 - 1 reach a field by any unit, and the effective JSON parses back (the fuzz target's property). */
  capstore_settings *s, *back;
  char msg[300], json[8192];
  assert_int_equal(parse(&s, "{" BASE ", \"capture\": {\"linger\": \"18446744073.709551615s\", "
                             "\"spool_bytes_max\": \"18446744073709551.615kB\"}}", msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_settings_config(s)->capture.sink.linger_ns, UINT64_MAX);
  assert_int_equal(capstore_settings_config(s)->capture.sink.spool_bytes_max, UINT64_MAX);
  capstore_settings_json(s, json, sizeof json);
  assert_int_equal(parse(&back, json, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_settings_config(back)->capture.sink.linger_ns, UINT64_MAX);
  assert_int_equal(capstore_settings_config(back)->capture.sink.spool_bytes_max, UINT64_MAX);
  capstore_settings_free(s);
  capstore_settings_free(back);
  refused("{" BASE ", \"capture\": {\"spool_bytes_max\": \"18446744073709551616\"}}", "is not a size");
  /* A UTF-8 byte order mark is skipped. */
  assert_int_equal(parse(&s, "\xef\xbb\xbf{" BASE "}", msg, sizeof msg), CS_E_OK);
  capstore_settings_free(s);
  /* Refusals name the environment variable or the choice, not C names. */
  unsetenv("AWS_ACCESS_KEY_ID");
  refused("{\"spool_dir\": \"/x\", \"store\": {\"s3\": {\"endpoint\": \"https://s3:9000\", \"bucket\": \"bkt\"}}, "
          "\"catalog\": {\"sqlite\": \"/z\"}}",
          "AWS_ACCESS_KEY_ID is not set (S3 credentials come from the environment)");
  refused("{" BASE ", \"capture\": {\"block_max\": \"0\"}}", "capture.block_max must be >= 1 ms under capture.full_policy block");
}

static void test_json_errors_name_line_and_column(void **state) {
  (void)state;
  refused("{\n  \"spool_dir\": \"/x\",\n}", "test.json:3:1:");
  refused("{\"spool_dir\": \"/x\", \"spool_dir\": \"/y\"}", "duplicate object key");
  refused("[1, 2]", "test.json: expected an object of keys, got an array");
  refused("{\"spool_dir\": \"/x\\u0000y\"}", "test.json:1:");
  refused("", "test.json:");
  /* A comment is a whole line only: '#' after a value is a JSON error. */
  refused("{\"spool_dir\": \"/x\" # no\n}", "test.json:1:");
  /* A '#' inside a string is text. */
  capstore_settings *s;
  char msg[300];
  assert_int_equal(parse(&s, "{\"spool_dir\": \"/x#1\"}", msg, sizeof msg), CS_E_OK);
  assert_string_equal(capstore_settings_config(s)->spool_dir, "/x#1");
  capstore_settings_free(s);
}

static void test_validation_speaks_in_file_keys(void **state) {
  (void)state;
  refused("{" BASE ", \"service\": {\"lease_guard\": \"40s\"}}", "service.lease_guard must be < service.lease_ttl / 3");
  refused("{" BASE ", \"capture\": {\"linger\": \"0\"}}", "capture.linger must be >= 1 ms");
  refused("{" BASE ", \"capture\": {\"record_max\": \"100MiB\"}}", "capture.record_max must be <= capture.staging / 4");
  refused("{\"spool_dir\": \"/x\", \"store\": {\"dir\": \"/y\", \"s3\": {\"endpoint\": \"https://a\"}}, \"catalog\": {\"sqlite\": \"/z\"}}",
          "store: set exactly one of store.dir and store.s3.endpoint");
  refused("{\"spool_dir\": \"/x\", \"store\": {\"dir\": \"/y\"}, \"catalog\": {\"sqlite\": \"/z\", \"clickhouse\": {\"url\": \"http://h:1/\"}}}",
          "catalog: set exactly one of catalog.sqlite and catalog.clickhouse.url");
  refused("{\"spool_dir\": \"/x\", \"store\": {\"dir\": \"/y\"}, \"catalog\": {\"clickhouse\": {\"url\": \"http://h:8123/\"}}}",
          "catalog.clickhouse.allow_insecure");
}

static void test_secrets_only_from_the_environment(void **state) {
  (void)state;
  refused("{" BASE ", \"catalog.clickhouse.password\": \"hunter2\"}",
          "catalog.clickhouse.password: secrets are not read from configuration; set CAPSTORE_CLICKHOUSE_PASSWORD");
  refused("{" BASE ", \"store.s3.secret_access_key\": \"hunter2\"}", "set AWS_SECRET_ACCESS_KEY in the environment");
  capstore_settings *s = fresh();
  char msg[600];
  assert_int_equal(capstore_settings_set(s, "store.s3.access_key_id", "AKIA", msg, sizeof msg), CS_E_CONFIG);
  assert_null(strstr(msg, "AKIA"));
  capstore_settings_free(s);

  static const char ch[] = "{\"spool_dir\": \"/x\", \"store\": {\"dir\": \"/y\"},"
                           " \"catalog\": {\"clickhouse\": {\"url\": \"https://ch:8443/\"}}}";
  setenv("CAPSTORE_CLICKHOUSE_PASSWORD", "pa55word", 1);
  assert_int_equal(parse(&s, ch, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_settings_validate(s, msg, sizeof msg), CS_E_OK);
  assert_string_equal(capstore_settings_config(s)->clickhouse_password, "pa55word");
  char json[8192];
  capstore_settings_json(s, json, sizeof json);
  assert_null(strstr(json, "pa55word"));
  assert_null(strstr(json, "password"));
  /* A password with a line break is refused without being quoted. */
  setenv("CAPSTORE_CLICKHOUSE_PASSWORD", "pa55\r\nX-Evil: 1", 1);
  assert_int_equal(capstore_settings_validate(s, msg, sizeof msg), CS_E_CONFIG);
  assert_string_equal(msg, "CAPSTORE_CLICKHOUSE_PASSWORD has a control byte (CR, LF, ...)");
  unsetenv("CAPSTORE_CLICKHOUSE_PASSWORD");
  assert_int_equal(capstore_settings_validate(s, msg, sizeof msg), CS_E_OK);
  assert_null(capstore_settings_config(s)->clickhouse_password);
  capstore_settings_free(s);
}

static void test_effective_json_round_trips(void **state) {
  (void)state;
  static const char text[] = "{" BASE ", \"key_prefix\": \"team/a/\", \"service\": {\"lease_ttl\": \"90s\", "
                             "\"backoff_base\": \"1500ms\"}, \"capture\": {\"staging\": 3000000}}";
  capstore_settings *a, *b;
  char msg[300];
  assert_int_equal(parse(&a, text, msg, sizeof msg), CS_E_OK);
  size_t need = capstore_settings_json(a, NULL, 0);
  assert_true(need > 100);
  char *first = malloc(need), *second = malloc(need);
  assert_int_equal(capstore_settings_json(a, first, need), need);
  assert_non_null(strstr(first, "\"lease_ttl\": \"90s\""));
  assert_non_null(strstr(first, "\"backoff_base\": \"1500ms\""));
  assert_non_null(strstr(first, "\"staging\": 3000000"));
  assert_non_null(strstr(first, "\"pack_bytes_max\": \"64MiB\""));
  assert_int_equal(parse(&b, first, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_settings_json(b, second, need), need);
  assert_string_equal(first, second);
  assert_int_equal(memcmp(&capstore_settings_config(a)->service, &capstore_settings_config(b)->service,
                          sizeof(cs_service_config)), 0);
  /* Too small a buffer: truncated, terminated, and the length it needs. */
  char tiny[16];
  assert_int_equal(capstore_settings_json(a, tiny, sizeof tiny), need);
  assert_int_equal(strlen(tiny), sizeof tiny - 1);
  free(first);
  free(second);
  capstore_settings_free(a);
  capstore_settings_free(b);
}

static void test_files(void **state) {
  (void)state;
  capstore_settings *s = fresh();
  char msg[600];
  assert_int_equal(capstore_settings_load(s, "/nonexistent/capstore.json", msg, sizeof msg), CS_E_IO);
  assert_string_equal(msg, "/nonexistent/capstore.json: No such file or directory");
  char path[] = "/tmp/capstore-settings-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputc('{', f);
  for (int i = 0; i < 70000; i++) fputs("          \n", f); /* 770 KB of blanks: within the bound */
  fputs("\"spool_dir\": \"/x\"}", f);
  fclose(f);
  assert_int_equal(capstore_settings_load(s, path, msg, sizeof msg), CS_E_OK);
  f = fopen(path, "a");
  for (int i = 0; i < 30000; i++) fputs("          \n", f);
  fclose(f);
  assert_int_equal(capstore_settings_load(s, path, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "a configuration is at most"));
  unlink(path);
  capstore_settings_free(s);
}

/* The file opens a real runtime (dirstore + SQLite) that captures, flushes and closes. */
static void test_a_file_runs_the_runtime(void **state) {
  (void)state;
  char dir[] = "/tmp/capstore-settings-run-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char text[1024];
  snprintf(text, sizeof text,
           "# one machine, no server\n{\"spool_dir\": \"%s/spool\", \"store\": {\"dir\": \"%s/bucket\"},\n"
           " \"catalog\": {\"sqlite\": \"%s/catalog.db\"}, \"capture\": {\"staging\": \"8MiB\", \"record_max\": \"1MiB\"}}\n",
           dir, dir, dir);
  capstore_settings *s;
  char msg[600];
  assert_int_equal(parse(&s, text, msg, sizeof msg), CS_E_OK);
  assert_int_equal(capstore_settings_validate(s, msg, sizeof msg), CS_E_OK);
  capstore *cs;
  int rc = capstore_open(capstore_settings_config(s), &cs, msg, sizeof msg);
  if (rc != CS_E_OK) print_error("open: %s\n", msg);
  assert_int_equal(rc, CS_E_OK);
  float row[16] = {1.5f};
  cs_pack_meta m = {.capture_id = cs_pack_text_of("c1"), .tenant_id = cs_pack_text_of("t"),
                    .experiment_id = cs_pack_text_of("e"), .run_id = cs_pack_text_of("r"),
                    .session_id = cs_pack_text_of("s"), .request_id = cs_pack_text_of("q"),
                    .sequence_id = cs_pack_text_of("x"), .model_id = cs_pack_text_of("m"),
                    .model_revision = cs_pack_text_of("v"), .capture_policy_version = cs_pack_text_of("p"),
                    .hook_name = cs_pack_text_of("h"), .dtype = CS_DTYPE_FLOAT32, .rank = 1, .shape = {16},
                    .captured_at_ns = 1700000000000000000ull};
  assert_int_equal(capstore_write(cs, &m, row, sizeof row, msg, sizeof msg), CS_E_OK);
  capstore_flush_report report;
  assert_int_equal(capstore_flush(cs, capstore_clock_ns() + 30 * CS_SEC_NS, &report, msg, sizeof msg), CS_E_OK);
  assert_true(report.drained);
  assert_int_equal(capstore_close(cs, 10 * CS_SEC_NS, msg, sizeof msg), CS_E_OK);
  capstore_free(cs);
  capstore_settings_free(s);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_are_the_runtime_defaults),
      cmocka_unit_test(test_every_kind_of_value),
      cmocka_unit_test(test_keys_and_types_refused_by_name),
      cmocka_unit_test(test_json_errors_name_line_and_column),
      cmocka_unit_test(test_edges_reported_by_review),
      cmocka_unit_test(test_validation_speaks_in_file_keys),
      cmocka_unit_test(test_secrets_only_from_the_environment),
      cmocka_unit_test(test_effective_json_round_trips),
      cmocka_unit_test(test_files),
      cmocka_unit_test(test_a_file_runs_the_runtime),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * capstore config check|keys|defaults: the configuration file
 * (capstore/settings.h, docs/configuration.md) from the command line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "capstore/capstore.h"
#include "cli.h"

static int config_usage(FILE *out) {
  fprintf(out,
          "usage: capstore config check FILE   validate FILE as the runtime will; print the\n"
          "                                    effective configuration (defaults filled in)\n"
          "       capstore config keys         every key a file may hold: type and meaning\n"
          "       capstore config defaults     the defaults as a file to start from (spool_dir,\n"
          "                                    store and catalog set to examples to replace)\n"
          "\n"
          "A configuration is a JSON object of nested keys (\"service\": {\"lease_ttl\": \"30s\"});\n"
          "whole lines starting with '#' are comments. Sizes take units (\"64MiB\"), durations\n"
          "must (\"250ms\", \"30s\"). Secrets come from the environment only: AWS_ACCESS_KEY_ID,\n"
          "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, CAPSTORE_CLICKHOUSE_PASSWORD.\n"
          "docs/configuration.md describes every key.\n"
          "\n"
          "exit status: 0 valid; 1 invalid or unreadable (the key and the rule on stderr); 2 usage.\n"
          "\n"
          "example: capstore config defaults > capstore.json && capstore config check capstore.json\n");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

/* Prints the effective configuration of s on stdout. */
static int print_json(const capstore_settings *s) {
  size_t need = capstore_settings_json(s, NULL, 0);
  char *text = malloc(need + 1);
  if (need == 0 || text == NULL) {
    free(text);
    fprintf(stderr, "capstore config: out of memory\n");
    return CLI_EXIT_FAILURE;
  }
  capstore_settings_json(s, text, need + 1);
  fputs(text, stdout);
  free(text);
  return CLI_EXIT_OK;
}

capstore_settings *cli_settings_load(const char *command, const char *path) {
  capstore_settings *s;
  char msg[600];
  if (capstore_settings_new(&s) != CS_E_OK) {
    fprintf(stderr, "capstore %s: out of memory\n", command);
    return NULL;
  }
  if (capstore_settings_load(s, path, msg, sizeof msg) != CS_E_OK) { /* its messages name the file */
    fprintf(stderr, "capstore %s: %s\n", command, msg);
  } else if (capstore_settings_validate(s, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore %s: %s: %s\n", command, path, msg);
  } else {
    return s;
  }
  capstore_settings_free(s);
  return NULL;
}

int cli_embedded_paths_exist(const capstore_config *cfg, char *err, size_t err_size) {
  struct stat st;
  if (cfg->store_dir != NULL && stat(cfg->store_dir, &st) != 0)
    return snprintf(err, err_size, "store.dir %s: %s (nothing was stored here yet, or CONFIG names another)",
                    cfg->store_dir, strerror(errno)), -1;
  if (cfg->sqlite_path != NULL && stat(cfg->sqlite_path, &st) != 0)
    return snprintf(err, err_size, "catalog.sqlite %s: %s (nothing was published here yet, or CONFIG names another)",
                    cfg->sqlite_path, strerror(errno)), -1;
  return 0;
}

static int config_check(const char *path) {
  capstore_settings *s = cli_settings_load("config", path);
  if (s == NULL) return CLI_EXIT_FAILURE;
  int code = print_json(s);
  static const char *secrets[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                  "CAPSTORE_CLICKHOUSE_PASSWORD"};
  fprintf(stderr, "capstore config: %s is valid; from the environment:", path);
  for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
    fprintf(stderr, " %s %s%s", secrets[i], getenv(secrets[i]) != NULL ? "set" : "unset",
            i + 1 < sizeof secrets / sizeof secrets[0] ? "," : "\n");
  capstore_settings_free(s);
  return code;
}

static int config_keys(void) {
  size_t n;
  const capstore_setting_info *info = capstore_settings_keys(&n);
  for (size_t i = 0; i < n; i++) printf("%-34s %-18s %s\n", info[i].key, info[i].type, info[i].doc);
  return CLI_EXIT_OK;
}

static int config_defaults(void) {
  capstore_settings *s;
  if (capstore_settings_new(&s) != CS_E_OK) return fprintf(stderr, "capstore config: out of memory\n"), CLI_EXIT_FAILURE;
  size_t need = capstore_settings_json(s, NULL, 0);
  char *text = malloc(need + 1);
  json_t *doc = NULL;
  if (text != NULL && need > 0) {
    capstore_settings_json(s, text, need + 1);
    doc = json_loads(text, 0, NULL);
  }
  free(text);
  capstore_settings_free(s);
  if (doc == NULL) return fprintf(stderr, "capstore config: out of memory\n"), CLI_EXIT_FAILURE;
  /* Their defaults follow the CPUs of the machine that runs, not of this one: a file leaves them out. */
  json_t *capture = json_object_get(doc, "capture");
  json_object_del(capture, "hash_thread");
  json_object_del(capture, "demote_staging");
  /* The three keys every configuration must set, as placeholders to replace. */
  json_t *top = json_object();
  json_object_set_new(top, "spool_dir", json_string("/var/lib/capstore/spool"));
  json_object_set_new(top, "store", json_pack("{s:s}", "dir", "/var/lib/capstore/bucket"));
  json_object_set_new(top, "catalog", json_pack("{s:s}", "sqlite", "/var/lib/capstore/catalog.db"));
  json_object_update_recursive(top, doc);
  json_decref(doc);
  printf("# capstore's defaults (docs/configuration.md); spool_dir, store and catalog are examples to replace\n");
  int rc = json_dumpf(top, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  printf("\n");
  json_decref(top);
  return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

int cli_config_main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return config_usage(stdout);
  if (argc == 3 && strcmp(argv[1], "check") == 0) return config_check(argv[2]);
  if (argc == 2 && strcmp(argv[1], "keys") == 0) return config_keys();
  if (argc == 2 && strcmp(argv[1], "defaults") == 0) return config_defaults();
  if (argc >= 2) fprintf(stderr, "capstore config: unknown arguments starting at '%s'\n", argv[1]);
  return config_usage(stderr);
}

/*
 * capstore config check|keys|defaults: the configuration file
 * (capstore/settings.h, docs/configuration.md) from the command line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/capstore.h"
#include "cli.h"

static int config_usage(FILE *out) {
  fprintf(out,
          "usage: capstore config check FILE   validate FILE as the runtime will; print the\n"
          "                                    effective configuration (defaults filled in)\n"
          "       capstore config keys         every key a file may hold: type and meaning\n"
          "       capstore config defaults     the defaults as a file to start from\n"
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
  int code = print_json(s);
  capstore_settings_free(s);
  return code;
}

int cli_config_main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return config_usage(stdout);
  if (argc == 3 && strcmp(argv[1], "check") == 0) return config_check(argv[2]);
  if (argc == 2 && strcmp(argv[1], "keys") == 0) return config_keys();
  if (argc == 2 && strcmp(argv[1], "defaults") == 0) return config_defaults();
  if (argc >= 2) fprintf(stderr, "capstore config: unknown arguments starting at '%s'\n", argv[1]);
  return config_usage(stderr);
}

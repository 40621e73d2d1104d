/*
 * capstore: the command-line tool. main() only dispatches to a subcommand
 * group; add a group by adding one line to `commands` and one file.
 */
#include <stdio.h>
#include <string.h>

#include "capstore/capstore.h"
#include "cli.h"

typedef struct cli_command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv);
} cli_command;

static const cli_command commands[] = {
    {"demo", "capture tensors on the embedded defaults and read them all back", cli_demo_main},
    {"config", "check a configuration file; list its keys and defaults", cli_config_main},
    {"fsck", "check the spool, the store and the catalog against each other", cli_fsck_main},
    {"ls", "search the catalog: a table of the records a filter selects", cli_ls_main},
    {"pack", "inspect, verify and build dmi-pack-v1 files", cli_pack_main},
    {"read", "read records back, verified, as .npy files (numpy opens them)", cli_read_main},
    {"serve", "the side-car daemon: ship a spool, serve /metrics and /status", cli_serve_main},
    {"status", "where the data of a configuration stands: spool, catalog, store", cli_status_main},
    {"spool", "list, check and sweep a capture spool directory", cli_spool_main},
};

static int usage(FILE *out) {
  fprintf(out,
          "usage: capstore COMMAND [ARGUMENTS]\n"
          "       capstore COMMAND --help\n"
          "       capstore --version\n"
          "\n"
          "capstore captures tensors into a local spool of dmi-pack-v1 files, uploads the\n"
          "packs to an object store (a directory, or S3) and indexes them into a catalog\n"
          "(SQLite, or ClickHouse). This command runs the demo and looks after a\n"
          "deployment; the library (capstore/capstore.h) is what capture processes link.\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  }
  fprintf(out,
          "\n"
          "CONFIG (serve, fsck, status, config check) is a configuration file: docs/configuration.md.\n"
          "\n"
          "exit status: each command's --help lists its own; 2 is always a usage error.\n"
          "\n"
          "examples:\n"
          "  capstore demo                                 capture, flush and read back (no server)\n"
          "  capstore status capstore-demo/capstore.json   what the demo's spool, catalog and store hold\n"
          "  capstore fsck capstore-demo/capstore.json     check them against each other\n");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

const char *cli_program = "capstore";

int main(int argc, char **argv) {
  if (argc > 0 && argv[0] != NULL && strchr(argv[0], '/') != NULL) cli_program = argv[0]; /* as the user ran it */
  if (argc < 2) return usage(stderr);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) return usage(stdout);
  if (strcmp(argv[1], "--version") == 0) return printf("capstore %s\n", capstore_version()) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "capstore: unknown command '%s'\n", argv[1]);
  return usage(stderr);
}

/*
 * cli.h: the subcommands of the capstore command. Each takes argv starting at
 * its own name and returns the process exit status: 0 success, 1 failure
 * (reason on stderr), 2 usage error.
 */
#ifndef CAPSTORE_CLI_H
#define CAPSTORE_CLI_H

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAILURE 1
#define CLI_EXIT_USAGE 2

/* capstore pack info|verify|build|key ... (cmd_pack.c) */
int cli_pack_main(int argc, char **argv);

/* capstore spool list|check|sweep DIR (cmd_spool.c) */
int cli_spool_main(int argc, char **argv);

/* capstore pack build SPEC OUT (cmd_pack_build.c) */
int cli_pack_build(const char *spec_path, const char *out_path);

#endif

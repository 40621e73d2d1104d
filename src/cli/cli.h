/*
 * cli.h: the subcommands of the capstore command. Each takes argv starting at
 * its own name and returns the process exit status: 0 success, 1 failure
 * (reason on stderr), 2 usage error.
 */
#ifndef CAPSTORE_CLI_H
#define CAPSTORE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "capstore/catalog.h"
#include "capstore/settings.h"
#include "capstore/store.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAILURE 1
#define CLI_EXIT_USAGE 2

/* The command as the user ran it ("./build/capstore"), or "capstore" when it came from PATH: for hints. */
extern const char *cli_program;

/* capstore demo [--dir DIR] [--threads N] [--records N] [--quiet] (cmd_demo.c) */
int cli_demo_main(int argc, char **argv);

/* capstore config check FILE | keys | defaults (cmd_config.c) */
int cli_config_main(int argc, char **argv);

/* The exit status of a command that could not read its configuration or a source it names. */
#define CLI_EXIT_UNREADABLE 3

/*
 * Loads and validates the configuration file path for command `command`
 * ("fsck"): *out on success (the caller frees it), else NULL with the
 * reason on stderr ("capstore fsck: x.json: service.lease_ttl: ...").
 */
capstore_settings *cli_settings_load(const char *command, const char *path);

/* capstore fsck CONFIG [--deep] [--json] [--repair] (cmd_fsck.c) */
int cli_fsck_main(int argc, char **argv);

/* capstore status CONFIG [--json] (cmd_status.c) */
int cli_status_main(int argc, char **argv);

/* capstore serve CONFIG [--listen HOST:PORT] [--log FILE] [--log-format logfmt|json] (cmd_serve.c) */
int cli_serve_main(int argc, char **argv);

/* capstore ls CONFIG [FILTERS] and capstore read CONFIG [FILTERS] --out DIR (cmd_read.c) */
int cli_ls_main(int argc, char **argv);
int cli_read_main(int argc, char **argv);

/* capstore pack info|verify|build|key ... (cmd_pack.c) */
int cli_pack_main(int argc, char **argv);

/* What a file that is not a regular one is, for messages: "a FIFO", "a directory", ... */
static inline const char *cli_file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of another kind";
}

/* capstore spool list|check|sweep DIR (cmd_spool.c) */
int cli_spool_main(int argc, char **argv);

typedef struct name_list {
  char **names;
  size_t count;
  size_t cap;
} name_list;

/* What a spool directory holds, by name alone (no lock taken, nothing read). */
typedef struct spool_names {
  name_list ready;       /* parseable ready names, sorted (pack id order) */
  name_list quarantined; /* "<ready name>.quarantined", sorted */
  size_t open_count;     /* ".<...>.open" temp files */
  size_t other_count;    /* anything else but the lock and the private spools' directory */
  /* Capture-role processes' private spools (CS_SPOOL_HANDOFF_DIR/<uuid>/): how many, how many of them have a live
     owner (the others were left by a process that died: a serving daemon adopts them), their ready packs. */
  size_t private_spools, private_live, private_ready;
  size_t private_dead_ready; /* of private_ready, those in spools whose owner died (stranded until adopted) */
} spool_names;

#define REASON_BYTES_MAX 512u

/* Reads the names of the directory dirfd; 0, or -1 with errno set. */
int cli_spool_scan(int dirfd, spool_names *out);
void cli_spool_names_free(spool_names *names);
/* The pid the spool's lock file records (0: none) and whether that process runs; no lock is taken. */
bool cli_spool_owner(int dirfd, long *pid);

/*
 * The tools read; they never create. A store.dir or catalog.sqlite that does
 * not exist would be made by opening it: -1 with err naming it instead.
 */
struct capstore_config;
int cli_embedded_paths_exist(const struct capstore_config *cfg, char *err, size_t err_size);

/*
 * The walks of the tools (cli_walk.c), a page of 1000 at a time. Each item
 * goes to the callback; a callback's answer other than CS_E_OK stops the walk
 * and is its answer (the callback writes its own message). The walk's own
 * failures are a cs_err with err naming them ("store LIST: ...",
 * "catalog list_packs: ..."): the adapter's error, CS_E_IO for an outcome
 * other than OK, CS_E_NO_MEMORY.
 */
typedef int (*cli_key_fn)(void *context, const char *key);
typedef int (*cli_pack_fn)(void *context, const cs_inventory_row *row);

/* Every key under prefix, in the store's LIST order. */
int cli_store_walk(cs_store *store, const char *prefix, cli_key_fn each, void *context, char *err, size_t err_size);

/* Every pack of the catalog at watermark (list_packs), in the catalog's pack id order. */
int cli_catalog_walk(cs_catalog *cat, uint64_t watermark, cli_pack_fn each, void *context, char *err,
                     size_t err_size);

/* The first line of "<quarantined name>.reason" ("(no reason recorded)" when none can be read). */
void cli_spool_read_reason(int dirfd, const char *quarantined, char reason[REASON_BYTES_MAX]);

/*
 * capstore pack build SPEC OUT [--allow-outside-paths] (cmd_pack_build.c).
 * Payload files must resolve inside the spec's directory unless
 * allow_outside_paths; OUT is written through an exclusive temp file.
 */
int cli_pack_build(const char *spec_path, const char *out_path, bool allow_outside_paths);

/*
 * The same from a spec's text (not NUL-terminated), its payload_file paths
 * relative to spec_dir (ending in '/', an existing directory) and confined to
 * it, the pack written to out, no messages: the spec parser's fuzz target
 * (fuzz/fuzz_pack_spec.c).
 */
int cli_pack_build_text(const uint8_t *text, size_t len, const char *spec_dir, FILE *out);

#endif

/*
 * capstore status CONFIG: where the data of a configuration stands, from the
 * outside (no daemon needed): the spool by name (ready packs, their bytes and
 * the oldest one's age, packs in progress, set aside, the process that owns
 * it), the catalog at its watermark (lease term, whether the lease is held,
 * packs, records and bytes published) and the store (pack objects under the
 * catalog's prefix). Read-only; takes no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "capstore/capstore.h"
#include "cli.h"

typedef struct status {
  /* spool */
  bool spool_missing;
  size_t ready, in_progress, set_aside;
  uint64_t ready_bytes, oldest_ready_ns; /* created_at of the oldest ready pack; 0 when none */
  long owner_pid;                        /* from the lock file; 0 when none recorded */
  bool owner_running;
  /* catalog */
  cs_cat_head head;
  uint64_t packs, records, bytes;
  /* store */
  uint64_t objects, other_objects;
} status;

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * CS_SEC_NS + (uint64_t)ts.tv_nsec;
}

static int read_spool(const capstore_config *cfg, status *st, char *err, size_t err_size) {
  int dirfd = open(cfg->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0 && errno == ENOENT) return st->spool_missing = true, 0;
  if (dirfd < 0) return snprintf(err, err_size, "spool %s: %s", cfg->spool_dir, strerror(errno)), -1;
  spool_names names;
  if (cli_spool_scan(dirfd, &names) != 0) {
    snprintf(err, err_size, "spool %s: %s", cfg->spool_dir, strerror(errno));
    cli_spool_names_free(&names);
    close(dirfd);
    return -1;
  }
  st->ready = names.ready.count;
  st->in_progress = names.open_count;
  st->set_aside = names.quarantined.count;
  for (size_t i = 0; i < names.ready.count; i++) {
    cs_spool_entry e;
    struct stat sb;
    (void)cs_spool_parse_ready_name(names.ready.names[i], &e); /* the scan kept parseable names only */
    if (fstatat(dirfd, names.ready.names[i], &sb, AT_SYMLINK_NOFOLLOW) == 0) st->ready_bytes += (uint64_t)sb.st_size;
    if (st->oldest_ready_ns == 0 || e.created_at_ns < st->oldest_ready_ns) st->oldest_ready_ns = e.created_at_ns;
  }
  /* The owner: the pid its lock file records, and whether that process still runs (no lock is taken). */
  st->owner_running = cli_spool_owner(dirfd, &st->owner_pid);
  cli_spool_names_free(&names);
  close(dirfd);
  return 0;
}

/* One catalog pack: counted with its records and bytes. */
static int count_pack(void *context, const cs_inventory_row *row) {
  status *st = context;
  st->packs++;
  st->records += row->ref.record_count;
  st->bytes += row->ref.size_bytes;
  return CS_E_OK;
}

static int read_catalog(const capstore_config *cfg, status *st, char *err, size_t err_size) {
  cs_catalog cat;
  char msg[512];
  if (capstore_open_catalog(cfg, &cat, msg, sizeof msg) != CS_E_OK) return snprintf(err, err_size, "catalog: %s", msg), -1;
  cs_catalog_result res;
  cs_uuid reader = {{0}};
  int rc = cat.ops->head(cat.self, &reader, &st->head, &res);
  int code = 0;
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) {
    snprintf(err, err_size, "catalog head: %s: %s", rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome),
             strstr(res.detail, "no such table") != NULL || res.server_code == 60
                 ? "the catalog has no capstore tables (nothing was ever published to it, or CONFIG names another)"
                 : res.detail);
    code = -1;
  }
  if (code == 0 && cli_catalog_walk(&cat, st->head.watermark, count_pack, st, err, err_size) != CS_E_OK) code = -1;
  cat.ops->close(cat.self);
  return code;
}

/* One listed key: a pack object, or another object. */
static int count_object(void *context, const char *key) {
  status *st = context;
  cs_uuid id;
  if (cs_key_pack_id(key, strlen(key), &id) == CS_E_OK)
    st->objects++;
  else
    st->other_objects++;
  return CS_E_OK;
}

static int read_store(const capstore_config *cfg, status *st, char *err, size_t err_size) {
  cs_store store;
  char msg[512], prefix[CS_KEY_MAX];
  if (capstore_open_store(cfg, &store, msg, sizeof msg) != CS_E_OK) return snprintf(err, err_size, "store: %s", msg), -1;
  capstore_key_prefix(cfg, prefix, sizeof prefix);
  int code = cli_store_walk(&store, prefix, count_object, st, err, err_size) == CS_E_OK ? 0 : -1;
  cs_store_close(&store);
  return code;
}

static const char *age_text(uint64_t created_ns, char *out, size_t cap) {
  uint64_t now = wall_ns();
  if (created_ns == 0) return snprintf(out, cap, "-"), out;
  double s = created_ns > now ? 0.0 : (double)(now - created_ns) / 1e9;
  if (s < 120)
    snprintf(out, cap, "%.1f s", s);
  else if (s < 7200)
    snprintf(out, cap, "%.1f min", s / 60);
  else
    snprintf(out, cap, "%.1f h", s / 3600);
  return out;
}

static void print_text(const capstore_config *cfg, const status *st, const char *config) {
  char age[32];
  printf("capstore status %s\n", config);
  if (st->spool_missing) {
    printf("  spool    %s: missing (nothing captured here yet)\n", cfg->spool_dir);
  } else {
    printf("  spool    %s: %zu ready packs (%.1f MiB), oldest unshipped %s; %zu in progress; %zu set aside\n",
           cfg->spool_dir, st->ready, (double)st->ready_bytes / 1048576.0, age_text(st->oldest_ready_ns, age, sizeof age),
           st->in_progress, st->set_aside);
    if (st->owner_pid > 0)
      printf("           owner: pid %ld (%s)\n", st->owner_pid, st->owner_running ? "running" : "not running");
    else
      printf("           owner: none recorded\n");
  }
  printf("  catalog  %s: watermark %" PRIu64 "; lease term %" PRIu64 " (%s)\n",
         cfg->sqlite_path != NULL ? cfg->sqlite_path : cfg->clickhouse_url, st->head.watermark, st->head.head_term,
         st->head.head_term == 0 ? "never claimed"
         : st->head.head_free  ? "free"
                               : "held, or released less than the fence margin ago");
  printf("           published: %" PRIu64 " packs, %" PRIu64 " records, %.1f MiB\n", st->packs, st->records,
         (double)st->bytes / 1048576.0);
  printf("  store    %s: %" PRIu64 " pack objects, %" PRIu64 " other objects\n",
         cfg->store_dir != NULL ? cfg->store_dir : cfg->s3_bucket, st->objects, st->other_objects);
}

static void print_json(const capstore_config *cfg, const status *st) {
  uint64_t now = wall_ns();
  json_t *root = json_pack(
      "{s:{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:b}, s:{s:I, s:I, s:b, s:I, s:I, s:I}, s:{s:I, s:I}}", "spool",
      "dir", cfg->spool_dir, "missing", st->spool_missing, "ready_packs", (json_int_t)st->ready, "ready_bytes",
      (json_int_t)st->ready_bytes, "oldest_unshipped_age_ns",
      (json_int_t)(st->oldest_ready_ns == 0 || st->oldest_ready_ns > now ? 0 : now - st->oldest_ready_ns),
      "in_progress", (json_int_t)st->in_progress, "set_aside", (json_int_t)st->set_aside, "owner_pid",
      (json_int_t)st->owner_pid, "owner_running", st->owner_running, "catalog", "watermark",
      (json_int_t)st->head.watermark, "lease_term", (json_int_t)st->head.head_term, "lease_free", st->head.head_free,
      "packs", (json_int_t)st->packs, "records", (json_int_t)st->records, "bytes", (json_int_t)st->bytes, "store",
      "pack_objects", (json_int_t)st->objects, "other_objects", (json_int_t)st->other_objects);
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (text != NULL) printf("%s\n", text);
  free(text);
  json_decref(root);
}

static int status_usage(FILE *out) {
  fprintf(out,
          "usage: capstore status CONFIG [--json]\n"
          "\n"
          "Where the data of CONFIG (docs/configuration.md) stands, read from the\n"
          "outside: the spool by name (ready packs, bytes, the oldest unshipped pack's\n"
          "age, packs in progress and set aside, the pid that owns the spool and whether\n"
          "it runs), the catalog at its watermark (the lease term and whether it is held;\n"
          "packs, records and bytes published) and the store (pack objects under the\n"
          "catalog's prefix). Read-only; no lock is taken, so it runs beside a service.\n"
          "\n"
          "options:\n"
          "  --json   one JSON object on stdout\n"
          "\n"
          "exit status: 0 read; 2 usage; 3 CONFIG invalid or a source could not be read\n"
          "             (the reason on stderr).\n"
          "\n"
          "example: capstore status capstore-demo/capstore.json\n");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

int cli_status_main(int argc, char **argv) {
  const char *config = NULL;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return status_usage(stdout);
    if (strcmp(argv[i], "--json") == 0) json = true;
    else if (argv[i][0] != '-' && config == NULL) config = argv[i];
    else {
      fprintf(stderr, "capstore status: unknown argument '%s'\n", argv[i]);
      return status_usage(stderr);
    }
  }
  if (config == NULL) return status_usage(stderr);
  capstore_settings *s = cli_settings_load("status", config);
  if (s == NULL) return CLI_EXIT_UNREADABLE;
  char msg[600];
  status st;
  memset(&st, 0, sizeof st);
  const capstore_config *cfg = capstore_settings_config(s);
  int code = CLI_EXIT_UNREADABLE;
  if (cli_embedded_paths_exist(cfg, msg, sizeof msg) != 0 || read_spool(cfg, &st, msg, sizeof msg) != 0 || read_catalog(cfg, &st, msg, sizeof msg) != 0 ||
      read_store(cfg, &st, msg, sizeof msg) != 0) {
    fprintf(stderr, "capstore status: could not read: %s\n", msg);
  } else {
    if (json)
      print_json(cfg, &st);
    else
      print_text(cfg, &st, config);
    code = CLI_EXIT_OK;
  }
  capstore_settings_free(s);
  return code;
}

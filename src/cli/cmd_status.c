/*
 * capstore status CONFIG: where the data of a configuration stands, from the
 * outside (no daemon needed): the spool by name (ready packs, their bytes and
 * the oldest one's age, packs in progress, set aside, the process that owns
 * it), the catalog at its watermark (lease term, whether the lease is held,
 * packs, records and bytes published) and the store (pack objects under the
 * catalog's prefix). Read-only; takes no lock. When a capstore serve owns
 * the spool and daemon.listen names a fixed port, its own snapshot (GET
 * /status) is printed instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "capstore/capstore.h"
#include "cli.h"
#include "serve.h"

#define DAEMON_BODY_MAX (4u << 20)
#define DAEMON_CONNECT_TIMEOUT_MS 1000L
#define DAEMON_TIMEOUT_MS 3000L

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
  if (capstore_catalog_check(&cat, msg, sizeof msg) != CS_E_OK) { /* a replicated catalog needs its settings */
    cat.ops->close(cat.self);
    return snprintf(err, err_size, "%s", msg), -1;
  }
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

/* ---- a running daemon's own snapshot ---------------------------------------------------------------- */

typedef struct body {
  char *text;
  size_t len;
} body;

static size_t on_body(char *data, size_t size, size_t count, void *arg) {
  body *b = arg;
  size_t n = size * count;
  if (b->len + n > DAEMON_BODY_MAX) return 0; /* too big for a snapshot: curl fails the transfer */
  char *bigger = realloc(b->text, b->len + n + 1);
  if (bigger == NULL) return 0;
  memcpy(bigger + b->len, data, n);
  b->text = bigger;
  b->len += n;
  b->text[b->len] = '\0';
  return n;
}

/* GET url: the body (heap, NUL-terminated) of a 200 answer, or NULL with why in note. */
static char *http_get(const char *url, char *note, size_t note_size) {
  CURL *curl = curl_easy_init();
  if (curl == NULL) return snprintf(note, note_size, "curl: out of memory"), NULL;
  body b = {NULL, 0};
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, url);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*"); /* the daemon is on this host: never through a proxy */
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, DAEMON_CONNECT_TIMEOUT_MS);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, DAEMON_TIMEOUT_MS);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  CURLcode rc = curl_easy_perform(curl);
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(curl);
  if (rc == CURLE_OK && code == 200 && b.text != NULL) return b.text;
  if (rc != CURLE_OK)
    snprintf(note, note_size, "%s", error[0] != '\0' ? error : curl_easy_strerror(rc));
  else
    snprintf(note, note_size, "HTTP %ld", code);
  free(b.text);
  return NULL;
}

/*
 * The /status document of the capstore serve that owns the spool (its pid
 * is the lock file's), when daemon.listen names a fixed port: NULL when
 * there is none to ask; NULL with why in note when the asking failed.
 */
static json_t *daemon_status(const capstore_config *cfg, const status *st, char **raw, char *url, size_t url_size,
                             char *note, size_t note_size) {
  serve_addr addr;
  char err[300];
  const char *listen = cfg->daemon.listen;
  if (!st->owner_running || listen == NULL || listen[0] == '\0') return NULL;
  if (serve_addr_parse(listen, &addr, err, sizeof err) != 0 || addr.port == 0) return NULL;
  serve_addr_url(&addr, "/status", url, url_size);
  char *text = http_get(url, note, note_size);
  if (text == NULL) return NULL;
  json_error_t error;
  json_t *doc = json_loads(text, 0, &error);
  json_t *pid = json_object_get(doc, "pid");
  if (doc == NULL || !json_is_integer(pid) || json_integer_value(pid) != st->owner_pid) {
    snprintf(note, note_size, "%s", doc == NULL ? "its answer is not JSON" : "it answers for another process (pid)");
    json_decref(doc);
    free(text);
    return NULL;
  }
  *raw = text;
  return doc;
}

static uint64_t num(const json_t *doc, const char *key) {
  json_t *v = json_object_get(doc, key);
  return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static const char *text_of(const json_t *doc, const char *key) {
  const char *v = json_string_value(json_object_get(doc, key));
  return v != NULL ? v : "";
}

static void print_daemon(const json_t *d, const char *config, const char *url) {
  printf("capstore status %s: from capstore serve (pid %" PRIu64 ", %s)\n", config, num(d, "pid"), url);
  printf("  daemon   %s for %" PRIu64 " s; role %s; capstore %s\n", text_of(d, "state"), num(d, "uptime_s"),
         text_of(d, "role"), text_of(d, "version"));
  printf("  spool    %s: %" PRIu64 " packs spooled, %" PRIu64 " uploaded, %" PRIu64 " indexed, %" PRIu64
         " handed off\n",
         text_of(d, "spool_dir"), num(d, "packs_spooled"), num(d, "packs_uploaded"),
         num(d, "packs_indexed"), num(d, "packs_handed_off"));
  printf("           now: %" PRIu64 " owed to the catalog, %" PRIu64 " not handed off, %" PRIu64
         " waiting outside the table; %" PRIu64 " set aside; oldest unshipped %.1f s\n",
         num(d, "packs_pending_index"), num(d, "packs_pending_spool"), num(d, "packs_outside_table"),
         num(d, "packs_set_aside"), (double)num(d, "oldest_unshipped_age_ns") / 1e9);
  printf("  lease    %s, term %" PRIu64 "; watermark %" PRIu64 "; %.1f MiB uploaded\n", text_of(d, "lease"),
         num(d, "lease_term"), num(d, "watermark"), (double)num(d, "bytes_uploaded") / 1048576.0);
  printf("  errors   service: %s\n           engine: %s\n",
         text_of(d, "last_error")[0] != '\0' ? text_of(d, "last_error") : "none",
         text_of(d, "engine_last_error")[0] != '\0' ? text_of(d, "engine_last_error") : "none");
  printf("  store    %s\n  catalog  %s\n", text_of(d, "store"), text_of(d, "catalog"));
}

/* When a capstore serve owns the spool and answers: its snapshot printed, true. */
static bool print_from_daemon(const capstore_config *cfg, const status *st, const char *config, bool json) {
  char url[200], note[CURL_ERROR_SIZE + 64] = "";
  char *raw = NULL;
  json_t *doc = daemon_status(cfg, st, &raw, url, sizeof url, note, sizeof note);
  if (doc == NULL) {
    if (note[0] != '\0')
      fprintf(stderr, "capstore status: the spool's owner (pid %ld) runs, but no capstore serve of it answered at %s "
                      "(%s): read from the outside instead\n", st->owner_pid, url, note);
    return false;
  }
  if (json)
    printf("%s%s", raw, raw[0] != '\0' && raw[strlen(raw) - 1] == '\n' ? "" : "\n");
  else
    print_daemon(doc, config, url);
  json_decref(doc);
  free(raw);
  return true;
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
          "When the spool's owner runs and CONFIG's daemon.listen names a fixed port\n"
          "(not 0), the owner is asked first: a capstore serve answers with its own\n"
          "snapshot (GET /status: per-stage counts, packs owed to the catalog, the\n"
          "oldest unshipped age, the lease state and term, the last errors), which is\n"
          "printed instead. When none answers, it says so and reads from the outside.\n"
          "\n"
          "options:\n"
          "  --json   one JSON object on stdout (a daemon's: its /status document as sent)\n"
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
  if (cli_embedded_paths_exist(cfg, msg, sizeof msg) != 0 || read_spool(cfg, &st, msg, sizeof msg) != 0) {
    fprintf(stderr, "capstore status: could not read: %s\n", msg);
  } else if (print_from_daemon(cfg, &st, config, json)) {
    code = CLI_EXIT_OK;
  } else if (read_catalog(cfg, &st, msg, sizeof msg) != 0 || read_store(cfg, &st, msg, sizeof msg) != 0) {
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

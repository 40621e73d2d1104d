/*
 * capstore fsck CONFIG: the spool, the object store and the catalog that a
 * configuration names, checked against each other. Read-only: the spool is
 * read by name (no lock), the store by LIST and HEAD (and GET with --deep),
 * the catalog at its watermark (list_packs, committed). --repair does only
 * what the service's own protocol does: it opens the runtime once on the
 * configuration (a publisher reconciles at start, adopting orphan objects;
 * every service hands off the spool packs the catalog holds), drains, closes,
 * and checks again.
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
#include <openssl/evp.h>

#include "capstore/capstore.h"
#include "cli.h"

#define EXIT_FOUND 1
#define EXIT_UNCHECKED CLI_EXIT_UNREADABLE
#define EXAMPLES_MAX 5u
#define PROGRESS_EVERY 1000u /* items listed between progress lines */

typedef enum kind {
  K_SPOOL_HELD,
  K_ORPHAN,
  K_MISSING,
  K_DIFFERS,
  K_SET_ASIDE,
  K_COUNT_
} kind;

static const struct {
  const char *name;  /* JSON */
  const char *title; /* the report's line */
  const char *hint;
} kinds[K_COUNT_] = {
    {"spool_packs_in_catalog", "spool packs the catalog holds", "the service hands these off; --repair runs it"},
    {"orphan_objects", "objects the catalog does not know", "a publisher's reconcile indexes these; --repair runs it"},
    {"catalog_packs_without_object", "catalog packs without an object", "data the catalog promises is gone"},
    {"objects_differing_from_catalog", "objects that differ from the catalog", "size, sha256 or identity"},
    {"set_aside_packs", "set-aside packs in the spool", "`capstore spool list` shows their reasons"},
};

typedef struct finding {
  uint64_t count;
  uint32_t examples;
  char example[EXAMPLES_MAX][400];
} finding;

/* A pack as the catalog lists it (compact: no 1 KiB key buffer each). */
typedef struct cat_pack {
  cs_uuid id;
  char *key;
  uint64_t size;
  uint8_t sha256[32];
  uint32_t records;
  uint64_t created;
} cat_pack;

typedef struct obj {
  cs_uuid id;
  char *key;
} obj;

typedef struct fsck_run {
  const capstore_config *cfg;
  bool deep, tty;
  /* what was read */
  uint64_t watermark;
  cat_pack *cat;
  size_t cat_count, cat_cap;
  obj *objs;
  size_t obj_count, obj_cap;
  uint64_t other_objects, rejected_objects, heads, gets;
  uint64_t stray_copies;    /* objects of a catalog pack under another key than the catalog's (harmless) */
  uint64_t foreign_objects; /* unknown objects under a prefix this configuration does not reconcile */
  uint64_t in_flight;       /* unknown objects whose pack still waits in the spool: uploaded, not yet indexed */
  uint64_t awaiting_handoff;/* spool packs the catalog holds while the spool's owner runs */
  bool reconciles;          /* the configuration reconciles its prefix (at start or periodically) */
  long owner_pid;
  bool owner_running;
  size_t spool_ready, spool_pending, spool_open;
  size_t private_spools, private_live, private_ready; /* capture processes' private spools (role capture) */
  cs_uuid *spool_ids; /* the ready packs' ids, sorted */
  bool spool_missing;
  finding found[K_COUNT_];
  char error[600];
} fsck_run;

static void add_example(finding *f, const char *text) {
  f->count++;
  if (f->examples < EXAMPLES_MAX) snprintf(f->example[f->examples++], sizeof f->example[0], "%s", text);
}

static void progress(const fsck_run *r, const char *what, uint64_t done, uint64_t total) {
  if (!r->tty) return;
  if (total > 0)
    fprintf(stderr, "\rfsck: %s %" PRIu64 " of %" PRIu64 "   ", what, done, total);
  else
    fprintf(stderr, "\rfsck: %s %" PRIu64 "   ", what, done);
}

static int id_cmp(const void *a, const void *b) { return cs_uuid_compare(a, b); }

static const cat_pack *cat_find(const fsck_run *r, const cs_uuid *id) {
  return r->cat_count == 0 ? NULL : bsearch(id, r->cat, r->cat_count, sizeof *r->cat, id_cmp);
}

/* The store's object of pack id under key, or NULL; *copies gets how many objects hold that pack id. */
static const obj *obj_find(const fsck_run *r, const cs_uuid *id, const char *key, size_t *copies) {
  *copies = 0;
  const obj *hit = r->obj_count == 0 ? NULL : bsearch(id, r->objs, r->obj_count, sizeof *r->objs, id_cmp);
  if (hit == NULL) return NULL;
  while (hit > r->objs && cs_uuid_equal(&hit[-1].id, id)) hit--; /* the first of the run of equal ids */
  const obj *found = NULL;
  for (; hit < r->objs + r->obj_count && cs_uuid_equal(&hit->id, id); hit++) {
    (*copies)++;
    if (strcmp(hit->key, key) == 0) found = hit;
  }
  return found;
}

static bool grow(void **items, size_t *cap, size_t count, size_t size) {
  if (count < *cap) return true;
  size_t next = *cap == 0 ? 256 : *cap * 2;
  void *bigger = realloc(*items, next * size);
  if (bigger == NULL) return false;
  *items = bigger;
  *cap = next;
  return true;
}

static int fail(fsck_run *r, const char *what, int rc, cs_outcome outcome, const char *detail) {
  snprintf(r->error, sizeof r->error, "%s: %s%s%s", what, rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(outcome),
           detail != NULL && detail[0] != '\0' ? ": " : "", detail != NULL ? detail : "");
  return EXIT_UNCHECKED;
}

/* One catalog pack, kept (compact); progress once a page. */
static int add_cat_pack(void *context, const cs_inventory_row *row) {
  fsck_run *r = context;
  if (!grow((void **)&r->cat, &r->cat_cap, r->cat_count, sizeof *r->cat)) {
    fail(r, "catalog", CS_E_NO_MEMORY, CS_OUT_OK, NULL);
    return CS_E_NO_MEMORY;
  }
  cat_pack *p = &r->cat[r->cat_count];
  p->key = strdup(row->ref.key);
  if (p->key == NULL) {
    fail(r, "catalog", CS_E_NO_MEMORY, CS_OUT_OK, NULL);
    return CS_E_NO_MEMORY;
  }
  p->id = row->ref.pack_id;
  p->size = row->ref.size_bytes;
  memcpy(p->sha256, row->ref.sha256, 32);
  p->records = row->ref.record_count;
  p->created = row->ref.created_at_ns;
  if (++r->cat_count % PROGRESS_EVERY == 0) progress(r, "catalog packs listed:", r->cat_count, 0);
  return CS_E_OK;
}

/* The catalog's packs at its watermark, in pack id order. */
static int read_catalog(fsck_run *r, cs_catalog *cat) {
  cs_catalog_result res;
  cs_cat_head head;
  cs_uuid reader = {{0}};
  int rc = cat->ops->head(cat->self, &reader, &head, &res);
  if (rc == CS_E_OK && res.outcome != CS_OUT_OK &&
      (strstr(res.detail, "no such table") != NULL || res.server_code == 60 /* ClickHouse: unknown table */))
    return fail(r, "catalog head", rc, res.outcome,
                "the catalog has no capstore tables (nothing was ever published to it, or CONFIG names another)");
  if (rc != CS_E_OK || res.outcome != CS_OUT_OK) return fail(r, "catalog head", rc, res.outcome, res.detail);
  r->watermark = head.watermark;
  if (cli_catalog_walk(cat, r->watermark, add_cat_pack, r, r->error, sizeof r->error) != CS_E_OK)
    return EXIT_UNCHECKED;
  progress(r, "catalog packs listed:", r->cat_count, 0);
  /* list_packs pages in the catalog's id order; bsearch needs bytewise order, which both catalogs give. */
  if (r->cat_count > 1) qsort(r->cat, r->cat_count, sizeof *r->cat, id_cmp);
  return CLI_EXIT_OK;
}

/* One listed key: a pack object is kept, any other object counted; progress once a page. */
static int add_obj(void *context, const char *key) {
  fsck_run *r = context;
  cs_uuid id;
  if (cs_key_pack_id(key, strlen(key), &id) != CS_E_OK) {
    r->other_objects++;
  } else if (!grow((void **)&r->objs, &r->obj_cap, r->obj_count, sizeof *r->objs) ||
             (r->objs[r->obj_count].key = strdup(key)) == NULL) {
    fail(r, "store", CS_E_NO_MEMORY, CS_OUT_OK, NULL);
    return CS_E_NO_MEMORY;
  } else {
    r->objs[r->obj_count++].id = id;
  }
  uint64_t listed = r->obj_count + r->other_objects;
  if (listed % PROGRESS_EVERY == 0) progress(r, "store objects listed:", listed, 0);
  return CS_E_OK;
}

/* Every pack object under the catalog's key prefix (other objects are counted). */
static int read_store(fsck_run *r, cs_store *store) {
  char prefix[CS_KEY_MAX];
  capstore_key_prefix(r->cfg, prefix, sizeof prefix);
  if (cli_store_walk(store, prefix, add_obj, r, r->error, sizeof r->error) != CS_E_OK) return EXIT_UNCHECKED;
  progress(r, "store objects listed:", r->obj_count + r->other_objects, 0);
  if (r->obj_count > 1) qsort(r->objs, r->obj_count, sizeof *r->objs, id_cmp);
  return CLI_EXIT_OK;
}

/* held/rejected for ids, in batches. */
static int committed(fsck_run *r, cs_catalog *cat, const cs_uuid *ids, size_t n, bool *held, bool *rejected) {
  for (size_t done = 0; done < n;) {
    uint32_t batch = n - done < 256 ? (uint32_t)(n - done) : 256;
    cs_catalog_result res;
    int rc = cat->ops->committed(cat->self, ids + done, batch, held + done, rejected + done, &res);
    if (rc != CS_E_OK || res.outcome != CS_OUT_OK) return fail(r, "catalog committed", rc, res.outcome, res.detail);
    done += batch;
  }
  return CLI_EXIT_OK;
}

/* The object's bytes hashed (--deep): false with why when it cannot be read. */
static bool object_sha256(fsck_run *r, cs_store *store, const char *key, uint64_t size, uint8_t out[32], char *why,
                          size_t why_size) {
  uint8_t *bytes = malloc(size > 0 ? (size_t)size : 1);
  if (bytes == NULL) return snprintf(why, why_size, "no memory for %" PRIu64 " bytes", size), false;
  size_t got = 0;
  cs_store_result res;
  cs_range range = {.offset = 0, .length = size};
  int rc = size == 0 ? CS_E_OK : store->ops->get(store->self, key, &range, bytes, (size_t)size, &got, &res);
  r->gets++;
  bool ok = rc == CS_E_OK && (size == 0 || res.outcome == CS_OUT_OK) && got == size;
  if (!ok) {
    snprintf(why, why_size, "GET failed: %s", rc != CS_E_OK ? cs_strerror(rc) : cs_outcome_name(res.outcome));
  } else {
    unsigned int len = 32;
    ok = EVP_Digest(bytes, (size_t)size, out, &len, EVP_sha256(), NULL) == 1;
    if (!ok) snprintf(why, why_size, "SHA-256 failed");
  }
  free(bytes);
  return ok;
}

static void hex(const uint8_t *bytes, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

/* Each catalog pack against its object: present, and HEAD (and --deep the bytes) agreeing. */
static int check_objects(fsck_run *r, cs_store *store) {
  char text[400];
  for (size_t i = 0; i < r->cat_count; i++) {
    const cat_pack *p = &r->cat[i];
    size_t copies = 0;
    const obj *o = obj_find(r, &p->id, p->key, &copies);
    progress(r, "objects checked:", i + 1, r->cat_count);
    r->stray_copies += o != NULL ? copies - 1 : copies;
    if (o == NULL) {
      snprintf(text, sizeof text, "%.300s%s", p->key, copies == 0 ? "" : " (the store holds the pack under another key)");
      add_example(&r->found[K_MISSING], text);
      continue;
    }
    cs_object_info info;
    cs_store_result res;
    int rc = store->ops->head(store->self, p->key, &info, &res);
    r->heads++;
    if (rc != CS_E_OK || (res.outcome != CS_OUT_OK && res.outcome != CS_OUT_NOT_FOUND))
      return fail(r, "store HEAD", rc, res.outcome, res.detail);
    const char *differs = NULL;
    char detail[200] = "";
    if (res.outcome == CS_OUT_NOT_FOUND) {
      snprintf(text, sizeof text, "%.300s (gone since the listing)", p->key);
      add_example(&r->found[K_MISSING], text);
      continue;
    }
    if (!info.is_pack) differs = "no pack metadata";
    else if (!cs_uuid_equal(&info.pack_id, &p->id)) differs = "another pack id";
    else if (info.size_bytes != p->size)
      snprintf(detail, sizeof detail, "size %" PRIu64 " in the catalog, %" PRIu64 " in the store", p->size,
               info.size_bytes), differs = detail;
    else if (memcmp(info.sha256, p->sha256, 32) != 0) differs = "sha256 metadata";
    else if (info.record_count != p->records) differs = "record count";
    else if (info.created_at_ns != p->created) differs = "created_at";
    if (differs == NULL && r->deep) {
      uint8_t sha[32];
      char why[120];
      if (!object_sha256(r, store, p->key, p->size, sha, why, sizeof why)) {
        snprintf(detail, sizeof detail, "%s", why);
        differs = detail;
      } else if (memcmp(sha, p->sha256, 32) != 0) {
        char a[65], b[65];
        hex(p->sha256, 32, a);
        hex(sha, 32, b);
        snprintf(detail, sizeof detail, "bytes hash to %.12s..., the catalog says %.12s...", b, a);
        differs = detail;
      }
    }
    if (differs != NULL) {
      snprintf(text, sizeof text, "%.250s: %s", p->key, differs);
      add_example(&r->found[K_DIFFERS], text);
    }
  }
  return CLI_EXIT_OK;
}

/* Store objects the catalog does not name: orphans, unless the catalog rejected the pack. */
static bool spool_holds(const fsck_run *r, const cs_uuid *id) {
  return r->spool_ready > 0 && bsearch(id, r->spool_ids, r->spool_ready, sizeof *r->spool_ids, id_cmp) != NULL;
}

static int check_orphans(fsck_run *r, cs_catalog *cat) {
  size_t n = 0;
  cs_uuid *ids = malloc((r->obj_count + 1) * sizeof *ids);
  const obj **which = malloc((r->obj_count + 1) * sizeof *which);
  if (ids == NULL || which == NULL) {
    free(ids);
    free(which);
    return fail(r, "store", CS_E_NO_MEMORY, CS_OUT_OK, NULL);
  }
  for (size_t i = 0; i < r->obj_count; i++) {
    if (cat_find(r, &r->objs[i].id) != NULL) continue;
    which[n] = &r->objs[i];
    ids[n++] = r->objs[i].id;
  }
  bool *held = calloc(n + 1, 1), *rejected = calloc(n + 1, 1);
  int code = held == NULL || rejected == NULL ? fail(r, "store", CS_E_NO_MEMORY, CS_OUT_OK, NULL)
                                              : committed(r, cat, ids, n, held, rejected);
  for (size_t i = 0; code == CLI_EXIT_OK && i < n; i++) {
    if (rejected[i]) {
      r->rejected_objects++;
    } else if (held[i]) { /* published after the listing began */
    } else if (spool_holds(r, &ids[i])) {
      r->in_flight++; /* uploaded, its INDEX not yet done: the service that owns the spool finishes it */
    } else if (!r->reconciles) {
      r->foreign_objects++; /* a shared prefix: another catalog's, not this one's to adopt */
    } else {
      add_example(&r->found[K_ORPHAN], which[i]->key);
    }
  }
  free(ids);
  free(which);
  free(held);
  free(rejected);
  return code;
}

/* The spool by name: ready packs the catalog holds, and set-aside packs (with whether the catalog recorded them). */
static int check_spool(fsck_run *r, cs_catalog *cat) {
  int dirfd = open(r->cfg->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0 && errno == ENOENT) {
    r->spool_missing = true;
    return CLI_EXIT_OK;
  }
  if (dirfd < 0) {
    snprintf(r->error, sizeof r->error, "spool %s: %s", r->cfg->spool_dir, strerror(errno));
    return EXIT_UNCHECKED;
  }
  spool_names names;
  if (cli_spool_scan(dirfd, &names) != 0) {
    snprintf(r->error, sizeof r->error, "spool %s: %s", r->cfg->spool_dir, strerror(errno));
    cli_spool_names_free(&names);
    close(dirfd);
    return EXIT_UNCHECKED;
  }
  r->spool_ready = names.ready.count;
  r->spool_open = names.open_count;
  r->private_spools = names.private_spools;
  r->private_live = names.private_live;
  r->private_ready = names.private_ready;
  r->owner_running = cli_spool_owner(dirfd, &r->owner_pid);
  r->spool_ids = calloc(names.ready.count + 1, sizeof *r->spool_ids);
  if (r->spool_ids == NULL) {
    cli_spool_names_free(&names);
    close(dirfd);
    return fail(r, "spool", CS_E_NO_MEMORY, CS_OUT_OK, NULL);
  }
  for (size_t i = 0; i < names.ready.count; i++) {
    cs_spool_entry e;
    (void)cs_spool_parse_ready_name(names.ready.names[i], &e);
    r->spool_ids[i] = e.pack_id; /* name order is pack id order */
  }
  for (size_t i = 0; i < names.ready.count; i++) {
    cs_spool_entry e;
    (void)cs_spool_parse_ready_name(names.ready.names[i], &e); /* the scan kept parseable names only */
    if (cat_find(r, &e.pack_id) == NULL)
      r->spool_pending++;
    else if (r->owner_running)
      r->awaiting_handoff++; /* the running service hands it off next */
    else
      add_example(&r->found[K_SPOOL_HELD], names.ready.names[i]);
  }
  size_t n = names.quarantined.count;
  cs_uuid *ids = calloc(n + 1, sizeof *ids);
  bool *held = calloc(n + 1, 1), *rejected = calloc(n + 1, 1);
  int code = ids == NULL || held == NULL || rejected == NULL ? fail(r, "spool", CS_E_NO_MEMORY, CS_OUT_OK, NULL)
                                                             : CLI_EXIT_OK;
  for (size_t i = 0; code == CLI_EXIT_OK && i < n; i++) {
    char ready[CS_SPOOL_NAME_MAX + 1];
    snprintf(ready, sizeof ready, "%.*s", (int)(strlen(names.quarantined.names[i]) - strlen(".quarantined")),
             names.quarantined.names[i]);
    cs_spool_entry e;
    (void)cs_spool_parse_ready_name(ready, &e);
    ids[i] = e.pack_id;
  }
  if (code == CLI_EXIT_OK) code = committed(r, cat, ids, n, held, rejected);
  for (size_t i = 0; code == CLI_EXIT_OK && i < n; i++) {
    char reason[REASON_BYTES_MAX], text[400];
    cli_spool_read_reason(dirfd, names.quarantined.names[i], reason);
    char id[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&ids[i], id);
    snprintf(text, sizeof text, "%s: %.200s (%s in the catalog)", id, reason,
             rejected[i] ? "recorded as rejected" : "not recorded");
    add_example(&r->found[K_SET_ASIDE], text);
  }
  free(ids);
  free(held);
  free(rejected);
  cli_spool_names_free(&names);
  close(dirfd);
  return code;
}

static void run_free(fsck_run *r) {
  for (size_t i = 0; i < r->cat_count; i++) free(r->cat[i].key);
  for (size_t i = 0; i < r->obj_count; i++) free(r->objs[i].key);
  free(r->cat);
  free(r->objs);
  free(r->spool_ids);
  r->cat = NULL;
  r->objs = NULL;
  r->spool_ids = NULL;
  r->cat_count = r->cat_cap = r->obj_count = r->obj_cap = 0;
}

/* One whole check; EXIT_UNCHECKED with r->error when a source could not be read. */
static int check(fsck_run *r) {
  char msg[512];
  if (cli_embedded_paths_exist(r->cfg, r->error, sizeof r->error) != 0) return EXIT_UNCHECKED;
  r->reconciles = r->cfg->reconcile_at_start || r->cfg->service.reconcile_interval_ns != 0;
  cs_store store;
  cs_catalog cat;
  if (capstore_open_store(r->cfg, &store, msg, sizeof msg) != CS_E_OK) {
    snprintf(r->error, sizeof r->error, "store: %s", msg);
    return EXIT_UNCHECKED;
  }
  if (capstore_open_catalog(r->cfg, &cat, msg, sizeof msg) != CS_E_OK) {
    snprintf(r->error, sizeof r->error, "catalog: %s", msg);
    cs_store_close(&store);
    return EXIT_UNCHECKED;
  }
  if (capstore_catalog_check(&cat, msg, sizeof msg) != CS_E_OK) { /* a replicated catalog needs its settings */
    snprintf(r->error, sizeof r->error, "%s", msg);
    cat.ops->close(cat.self);
    cs_store_close(&store);
    return EXIT_UNCHECKED;
  }
  int code = read_catalog(r, &cat);
  if (code == CLI_EXIT_OK) code = read_store(r, &store);
  if (code == CLI_EXIT_OK) code = check_objects(r, &store);
  if (code == CLI_EXIT_OK) code = check_spool(r, &cat);
  if (code == CLI_EXIT_OK) code = check_orphans(r, &cat);
  if (r->tty) fprintf(stderr, "\r%-60s\r", "");
  cat.ops->close(cat.self);
  cs_store_close(&store);
  return code;
}

static uint64_t total_found(const fsck_run *r) {
  uint64_t n = 0;
  for (int k = 0; k < K_COUNT_; k++) n += r->found[k].count;
  return n;
}

static void report_text(const fsck_run *r, const char *config) {
  printf("capstore fsck %s\n", config);
  if (r->spool_missing)
    printf("  spool    %s: missing (nothing captured here yet)\n", r->cfg->spool_dir);
  else
    printf("  spool    %s: %zu ready packs (%zu not yet in the catalog), %zu in progress\n", r->cfg->spool_dir,
           r->spool_ready, r->spool_pending, r->spool_open);
  printf("  store    %s: %zu pack objects (%" PRIu64 " of packs the catalog rejected), %" PRIu64 " other objects\n",
         r->cfg->store_dir != NULL ? r->cfg->store_dir : r->cfg->s3_bucket, r->obj_count, r->rejected_objects,
         r->other_objects);
  if (r->in_flight + r->awaiting_handoff + r->stray_copies + r->foreign_objects > 0)
    printf("           in flight: %" PRIu64 " uploaded packs still in the spool, %" PRIu64
           " indexed packs awaiting the running service's hand-off;\n           %" PRIu64
           " copies of catalog packs under other keys; %" PRIu64 " objects of other catalogs (this one does not reconcile)\n",
           r->in_flight, r->awaiting_handoff, r->stray_copies, r->foreign_objects);
  if (r->owner_pid > 0)
    printf("           the spool's owner: pid %ld (%s)\n", r->owner_pid, r->owner_running ? "running" : "not running");
  if (r->private_spools > 0)
    printf("           capture processes' private spools: %zu (%zu live, %zu left by a process that died: capstore "
           "serve adopts them), %zu ready packs in them\n",
           r->private_spools, r->private_live, r->private_spools - r->private_live, r->private_ready);
  printf("  catalog  %s: watermark %" PRIu64 ", %zu packs\n",
         r->cfg->sqlite_path != NULL ? r->cfg->sqlite_path : r->cfg->clickhouse_url, r->watermark, r->cat_count);
  printf("  checked  %" PRIu64 " HEADs%s", r->heads, r->deep ? "" : "\n");
  if (r->deep) printf(", %" PRIu64 " objects read and hashed\n", r->gets);
  printf("\n");
  for (int k = 0; k < K_COUNT_; k++) {
    const finding *f = &r->found[k];
    printf("  %-38s %" PRIu64 "%s%s%s\n", kinds[k].title, f->count, f->count > 0 ? "  (" : "",
           f->count > 0 ? kinds[k].hint : "", f->count > 0 ? ")" : "");
    for (uint32_t e = 0; e < f->examples; e++) printf("      %s\n", f->example[e]);
    if (f->count > f->examples) printf("      ... and %" PRIu64 " more\n", f->count - f->examples);
  }
  uint64_t n = total_found(r);
  printf("\n%s\n", n == 0 ? "clean" : "inconsistent");
}

static void report_json(const fsck_run *r) {
  json_t *root = json_pack("{s:b, s:I, s:{s:s, s:b, s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:I, s:I}, s:{s:I}}",
                           "clean", total_found(r) == 0, "watermark", (json_int_t)r->watermark,
                           "spool", "dir", r->cfg->spool_dir, "missing", r->spool_missing, "ready",
                           (json_int_t)r->spool_ready, "pending", (json_int_t)r->spool_pending, "in_progress",
                           (json_int_t)r->spool_open, "store", "pack_objects", (json_int_t)r->obj_count,
                           "rejected_objects", (json_int_t)r->rejected_objects, "other_objects",
                           (json_int_t)r->other_objects, "heads", (json_int_t)r->heads, "gets",
                           (json_int_t)r->gets, "catalog", "packs", (json_int_t)r->cat_count);
  json_t *flight = json_pack("{s:I, s:I, s:I, s:I, s:I, s:b}", "uploaded_in_spool", (json_int_t)r->in_flight,
                             "awaiting_handoff", (json_int_t)r->awaiting_handoff, "stray_copies",
                             (json_int_t)r->stray_copies, "other_catalogs_objects", (json_int_t)r->foreign_objects,
                             "spool_owner_pid", (json_int_t)r->owner_pid, "spool_owner_running", r->owner_running);
  json_object_set_new(flight, "private_spools",
                      json_pack("{s:I, s:I, s:I}", "count", (json_int_t)r->private_spools, "live",
                                (json_int_t)r->private_live, "ready_packs", (json_int_t)r->private_ready));
  json_object_set_new(root, "in_flight", flight);
  json_t *findings = json_object();
  for (int k = 0; k < K_COUNT_; k++) {
    json_t *examples = json_array();
    for (uint32_t e = 0; e < r->found[k].examples; e++) json_array_append_new(examples, json_string(r->found[k].example[e]));
    json_object_set_new(findings, kinds[k].name,
                        json_pack("{s:I, s:o}", "count", (json_int_t)r->found[k].count, "examples", examples));
  }
  json_object_set_new(root, "findings", findings);
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (text != NULL) printf("%s\n", text);
  free(text);
  json_decref(root);
}

/* What --repair did: ran the service once, was refused (another owns the work), or failed (the reason on stderr). */
typedef enum repair_answer { REPAIR_RAN, REPAIR_REFUSED, REPAIR_FAILED } repair_answer;

/*
 * Runs the service's own protocol once: open (recovery, a publisher's reconcile at start if configured), drain,
 * close. Refused while a publisher elsewhere holds the catalog's lease or a service owns the spool: the running
 * service repairs these itself.
 */
static repair_answer repair(const capstore_config *cfg, bool tty) {
  char msg[512];
  /* A running publisher elsewhere holds the lease: it reconciles and hands off on its own, and ours would wait. */
  if (cfg->role == CS_ROLE_PUBLISHER) {
    cs_catalog cat;
    cs_cat_head head;
    cs_catalog_result res;
    cs_uuid reader = {{0}};
    if (capstore_open_catalog(cfg, &cat, msg, sizeof msg) != CS_E_OK) {
      fprintf(stderr, "capstore fsck: --repair: catalog: %s\n", msg);
      return REPAIR_FAILED;
    }
    int hrc = cat.ops->head(cat.self, &reader, &head, &res);
    /* A lease released moments ago stays busy for the fence margin (a tombstone): wait that out, once. */
    if (hrc == CS_E_OK && res.outcome == CS_OUT_OK && !head.head_free && head.busy_for_ns > 0 &&
        head.busy_for_ns <= 5 * CS_SEC_NS) {
      uint64_t wait = head.busy_for_ns + 50 * CS_MS_NS;
      struct timespec pause = {(time_t)(wait / CS_SEC_NS), (long)(wait % CS_SEC_NS)};
      nanosleep(&pause, NULL);
      hrc = cat.ops->head(cat.self, &reader, &head, &res);
    }
    cat.ops->close(cat.self);
    if (hrc == CS_E_OK && res.outcome == CS_OUT_OK && !head.head_free) {
      fprintf(stderr,
              "capstore fsck: --repair: a publisher holds the catalog's lease (term %" PRIu64
              "): it repairs these itself; run --repair when none runs (or after its lease expires)\n",
              head.head_term);
      return REPAIR_REFUSED;
    }
  }
  capstore *cs;
  /* A progress line on a terminal, which a refusal or failure below ends with a new line. */
  if (tty) fprintf(stderr, "fsck: repairing: running the service once on this configuration...");
  int rc = capstore_open(cfg, &cs, msg, sizeof msg);
  if (rc == CS_E_BUSY) {
    fprintf(stderr, "%scapstore fsck: --repair: a service owns the spool (%s); it repairs these on its own\n",
            tty ? "\n" : "", msg);
    return REPAIR_REFUSED;
  }
  if (rc != CS_E_OK) {
    fprintf(stderr, "%scapstore fsck: --repair: open: %s\n", tty ? "\n" : "", msg);
    return REPAIR_FAILED;
  }
  /* A publisher's reconcile pass at start adopts the orphans: wait for it (it needs the lease first). */
  uint64_t deadline = capstore_clock_ns() + 120 * CS_SEC_NS;
  capstore_stats st;
  for (capstore_stats_get(cs, &st); cfg->role == CS_ROLE_PUBLISHER && cfg->reconcile_at_start &&
                                    st.service.reconcile_passes == 0 && capstore_clock_ns() < deadline;
       capstore_stats_get(cs, &st)) {
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  capstore_flush_report report;
  rc = capstore_flush(cs, deadline, &report, msg, sizeof msg);
  int crc = capstore_close(cs, 30 * CS_SEC_NS, msg, sizeof msg);
  capstore_stats_get(cs, &st);
  capstore_free(cs);
  if (tty) fprintf(stderr, "\r%-80s\r", "");
  fprintf(stderr, "capstore fsck: repair: the service ran: %" PRIu64 " reconcile passes, %" PRIu64 " objects adopted, %" PRIu64
                  " packs handed off; flush %s, close %s\n",
          st.service.reconcile_passes, st.service.reconcile_adopted, st.service.handed_off, cs_strerror(rc),
          cs_strerror(crc));
  return REPAIR_RAN;
}

static int fsck_usage(FILE *out) {
  fprintf(out,
          "usage: capstore fsck CONFIG [--deep] [--json] [--repair]\n"
          "\n"
          "Checks the spool, the object store and the catalog that CONFIG names\n"
          "(docs/configuration.md) against each other, at the catalog's watermark:\n"
          "  spool packs the catalog holds         (a stopped service left them; --repair hands them off)\n"
          "  objects the catalog does not know     (orphans; --repair lets a publisher's reconcile adopt them)\n"
          "  catalog packs without an object       (data the catalog promises is gone)\n"
          "  objects that differ from the catalog  (size, sha256, pack id, record count, created_at)\n"
          "  set-aside packs in the spool          (with whether the catalog recorded them)\n"
          "\n"
          "Read-only by default: the spool is read by name (no lock; a running service is\n"
          "fine), the store by LIST and one HEAD per catalog pack, the catalog by reads.\n"
          "\n"
          "options:\n"
          "  --deep     also read every catalog pack's object and check its SHA-256\n"
          "  --json     the report as one JSON object on stdout\n"
          "  --repair   run the service's own protocol once (open the runtime on CONFIG,\n"
          "             reconcile at start, drain, close), then check again; refused while\n"
          "             a service owns the spool or another publisher holds the catalog's\n"
          "             lease (the read-only report stands). Nothing else is changed.\n"
          "\n"
          "exit status: 0 clean; 1 inconsistencies found (after --repair: still found);\n"
          "             2 usage; 3 could not check (CONFIG invalid, a source unreadable).\n"
          "\n"
          "example: capstore fsck /etc/capstore.json --deep\n");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

int cli_fsck_main(int argc, char **argv) {
  const char *config = NULL;
  bool deep = false, json = false, fix = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return fsck_usage(stdout);
    if (strcmp(argv[i], "--deep") == 0) deep = true;
    else if (strcmp(argv[i], "--json") == 0) json = true;
    else if (strcmp(argv[i], "--repair") == 0) fix = true;
    else if (argv[i][0] != '-' && config == NULL) config = argv[i];
    else {
      fprintf(stderr, "capstore fsck: unknown argument '%s'\n", argv[i]);
      return fsck_usage(stderr);
    }
  }
  if (config == NULL) return fsck_usage(stderr);
  capstore_settings *s = cli_settings_load("fsck", config);
  if (s == NULL) return CLI_EXIT_UNREADABLE;
  fsck_run run = {.cfg = capstore_settings_config(s), .deep = deep, .tty = !json && isatty(STDERR_FILENO)};
  int code = check(&run);
  if (code == CLI_EXIT_OK && fix && (run.found[K_SPOOL_HELD].count > 0 || run.found[K_ORPHAN].count > 0)) {
    if (run.found[K_ORPHAN].count > 0 && (run.cfg->role != CS_ROLE_PUBLISHER || !run.cfg->reconcile_at_start))
      fprintf(stderr, "capstore fsck: --repair: orphans are adopted by a publisher's reconcile at start; this "
                      "configuration %s, so they stay\n",
              run.cfg->role != CS_ROLE_PUBLISHER ? "is an uploader's" : "turns reconcile.at_start off");
    repair_answer done = repair(run.cfg, run.tty);
    if (done == REPAIR_RAN) {
      run_free(&run);
      fsck_run again = {.cfg = run.cfg, .deep = deep, .tty = run.tty};
      run = again;
      code = check(&run);
    } else if (done == REPAIR_FAILED) {
      code = EXIT_UNCHECKED;
    }
    /* Refused: the read-only check's report stands (it found something: exit 1), the refusal on stderr. */
  }
  if (code == CLI_EXIT_OK) {
    if (json)
      report_json(&run);
    else
      report_text(&run, config);
    code = total_found(&run) == 0 ? CLI_EXIT_OK : EXIT_FOUND;
  } else if (run.error[0] != '\0') {
    fprintf(stderr, "capstore fsck: could not check: %s\n", run.error);
  }
  run_free(&run);
  capstore_settings_free(s);
  return code;
}

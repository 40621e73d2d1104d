/*
 * capstore ls CONFIG [FILTERS] and capstore read CONFIG [FILTERS] --out DIR:
 * the reader (capstore.h) from the command line. Both pin the catalog's
 * watermark, show what reading the selection would cost (bytes and
 * requests, planned before any GET) and honour --byte-limit and
 * --request-limit. ls prints a table (or JSON lines) page by page with the
 * cursor of the next page; read writes each payload as a file (.npy for the
 * numeric dtypes numpy knows, raw otherwise) and a manifest.jsonl.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "capstore/capstore.h"
#include "cli.h"

#define LS_LIMIT_DEFAULT 50u
#define ID_ARGS_MAX CS_SEARCH_LIST_MAX

typedef struct read_args {
  const char *config;
  cs_search_filter filter;
  cs_pack_text hooks[CS_SEARCH_LIST_MAX], ids[ID_ARGS_MAX];
  uint64_t limit;      /* records at most (ls: one page's worth by default) */
  uint32_t page_size;
  const char *cursor;
  bool json, raw, sha256, quiet;
  const char *out_dir;
  capstore_read_options opt;
} read_args;

static int usage(FILE *out, bool is_read) {
  fprintf(out,
          "usage: capstore %s CONFIG [FILTERS] %s\n"
          "\n"
          "%s"
          "\n"
          "Filters (all must match; a repeated --hook or --id matches any):\n"
          "  --tenant T --experiment E --run R --session S --request Q --sequence Q\n"
          "  --model M --revision V        text fields, exact\n"
          "  --hook NAME                   a hook name (repeat for several)\n"
          "  --id CAPTURE_ID               a capture id (repeat for several)\n"
          "  --layer A[..B] --step A[..B]  inclusive ranges\n"
          "  --tokens A..B                 records whose tokens meet [A, B)\n"
          "  --since NS --until NS         capture time (ns since the epoch), inclusive\n"
          "  --dtype D                     bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64\n"
          "\n"
          "Reading (both show the plan first):\n"
          "  --byte-limit N     refuse a plan that reads more than N bytes (before any GET)\n"
          "  --request-limit N  refuse a plan of more than N GETs\n"
          "  --gap N            read ranges of one pack closer than N bytes as one (default 256 KiB)\n"
          "  --limit N          at most N records (ls: default %u, 0 for all)\n"
          "  --page-size N      rows per catalog query (default 1000, at most %u)\n"
          "%s"
          "\n"
          "exit status: 0 done; 1 refused (over a limit, a bad cursor) or failed (the reason on stderr);\n"
          "             2 usage; 3 CONFIG unreadable.\n"
          "\n"
          "example: %s\n",
          is_read ? "read" : "ls", is_read ? "--out DIR [--sha256] [--raw]" : "[--cursor C] [--json]",
          is_read ? "Reads the selected records back, verified (trailer, footer, every catalog field bound to the\n"
                    "footer, CRC-32), and writes each payload into DIR: <capture id>.npy for numeric dtypes\n"
                    "(numpy.load opens it), <capture id>.bin otherwise (bfloat16, or --raw), and manifest.jsonl\n"
                    "with one line of metadata per file.\n"
                  : "Lists the selected records at the catalog's watermark, in (pack, offset) order, one page;\n"
                    "the last line gives the cursor of the next page (--cursor C goes on at the same watermark).\n",
          LS_LIMIT_DEFAULT, CAPSTORE_PAGE_MAX,
          is_read ? "  --sha256           read each pack whole and check its SHA-256 too\n"
                    "  --raw              every payload as raw bytes (.bin)\n"
                    "  --quiet            no progress line\n"
                  : "  --cursor C         the next page of an earlier ls with the same filters\n"
                    "  --json             one JSON object per record (and a last {\"cursor\": ...})\n",
          is_read ? "capstore read capstore-demo/capstore.json --step 0..3 --hook layers.mlp.act --out step0"
                  : "capstore ls capstore-demo/capstore.json --run demo-1 --layer 0..3 --limit 20");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

static bool parse_u64_text(const char *text, uint64_t *out) {
  if (text == NULL || *text == '\0' || *text == '-' || *text == '+') return false;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

/* "A" or "A..B" (A..B inclusive; "A.." open above). */
static bool parse_range(const char *text, uint64_t *lo, uint64_t *hi, uint64_t top) {
  const char *dots = strstr(text, "..");
  if (dots == NULL) {
    if (!parse_u64_text(text, lo)) return false;
    *hi = *lo;
    return true;
  }
  char first[32];
  size_t n = (size_t)(dots - text);
  if (n == 0 || n >= sizeof first) return false;
  memcpy(first, text, n);
  first[n] = '\0';
  if (!parse_u64_text(first, lo)) return false;
  if (dots[2] == '\0') return *hi = top, true;
  return parse_u64_text(dots + 2, hi);
}

static bool parse_layer(const char *text, int32_t *lo, int32_t *hi) {
  /* Layers start at -1: "-1", "-1..3". */
  const char *dots = strstr(text, "..");
  char first[32];
  size_t n = dots != NULL ? (size_t)(dots - text) : strlen(text);
  if (n == 0 || n >= sizeof first) return false;
  memcpy(first, text, n);
  first[n] = '\0';
  char *end = NULL;
  errno = 0;
  long a = strtol(first, &end, 10);
  if (errno != 0 || *end != '\0' || a < -1 || a > CS_PACK_LAYER_MAX) return false;
  long b = a;
  if (dots != NULL) {
    if (dots[2] == '\0') b = CS_PACK_LAYER_MAX;
    else {
      b = strtol(dots + 2, &end, 10);
      if (errno != 0 || *end != '\0' || b < -1 || b > CS_PACK_LAYER_MAX) return false;
    }
  }
  *lo = (int32_t)a, *hi = (int32_t)b;
  return true;
}

/* One option with its value; false (after a message) when it is not one or its value is bad. */
static bool take_option(read_args *a, const char *name, const char *value, bool *used_value) {
  cs_search_filter *f = &a->filter;
  *used_value = true;
  struct { const char *name; cs_pack_text *field; } texts[] = {
      {"--tenant", &f->tenant_id},   {"--experiment", &f->experiment_id}, {"--run", &f->run_id},
      {"--session", &f->session_id}, {"--request", &f->request_id},       {"--sequence", &f->sequence_id},
      {"--model", &f->model_id},     {"--revision", &f->model_revision},
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
    if (strcmp(name, texts[i].name) == 0) return *texts[i].field = cs_pack_text_of(value), true;
  uint64_t v = 0;
  if (strcmp(name, "--hook") == 0) {
    if (f->hook_name_count == CS_SEARCH_LIST_MAX) return false;
    a->hooks[f->hook_name_count++] = cs_pack_text_of(value);
    f->hook_names = a->hooks;
    return true;
  }
  if (strcmp(name, "--id") == 0) {
    if (f->capture_id_count == ID_ARGS_MAX) return false;
    a->ids[f->capture_id_count++] = cs_pack_text_of(value);
    f->capture_ids = a->ids;
    return true;
  }
  if (strcmp(name, "--layer") == 0) return f->has_layer = true, parse_layer(value, &f->layer_min, &f->layer_max);
  if (strcmp(name, "--step") == 0) return f->has_step = true, parse_range(value, &f->step_min, &f->step_max, INT64_MAX);
  if (strcmp(name, "--tokens") == 0) {
    f->has_tokens = true;
    return strstr(value, "..") != NULL && parse_range(value, &f->token_min, &f->token_max, INT64_MAX);
  }
  if (strcmp(name, "--since") == 0 || strcmp(name, "--until") == 0) {
    if (!parse_u64_text(value, &v)) return false;
    if (!f->has_captured_at) f->captured_min_ns = 0, f->captured_max_ns = INT64_MAX;
    f->has_captured_at = true;
    if (name[2] == 's') f->captured_min_ns = v;
    else f->captured_max_ns = v;
    return true;
  }
  if (strcmp(name, "--dtype") == 0) return f->has_dtype = true, cs_dtype_parse(value, strlen(value), &f->dtype) == CS_E_OK;
  if (strcmp(name, "--byte-limit") == 0) return parse_u64_text(value, &v) && v <= INT64_MAX && (a->opt.byte_limit = (int64_t)v, true);
  if (strcmp(name, "--request-limit") == 0)
    return parse_u64_text(value, &v) && v <= INT64_MAX && (a->opt.request_limit = (int64_t)v, true);
  if (strcmp(name, "--gap") == 0) return parse_u64_text(value, &a->opt.gap_bytes_max);
  if (strcmp(name, "--limit") == 0) return parse_u64_text(value, &a->limit);
  if (strcmp(name, "--page-size") == 0)
    return parse_u64_text(value, &v) && v >= 1 && v <= CAPSTORE_PAGE_MAX && (a->page_size = (uint32_t)v, true);
  if (strcmp(name, "--cursor") == 0) return a->cursor = value, true;
  if (strcmp(name, "--out") == 0) return a->out_dir = value, true;
  *used_value = false;
  return false;
}

/* Parses argv; CLI_EXIT_OK, or the usage exit (after a message). */
static int parse_args(int argc, char **argv, bool is_read, read_args *a) {
  const char *cmd = is_read ? "read" : "ls";
  memset(a, 0, sizeof *a);
  capstore_read_options_default(&a->opt);
  a->limit = is_read ? 0 : LS_LIMIT_DEFAULT;
  a->page_size = 1000;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return usage(stdout, is_read), -1;
    if (strcmp(arg, "--json") == 0 && !is_read) { a->json = true; continue; }
    if (strcmp(arg, "--raw") == 0 && is_read) { a->raw = true; continue; }
    if (strcmp(arg, "--sha256") == 0 && is_read) { a->sha256 = true; continue; }
    if (strcmp(arg, "--quiet") == 0 && is_read) { a->quiet = true; continue; }
    if (arg[0] != '-' && a->config == NULL) { a->config = arg; continue; }
    if (arg[0] == '-' && i + 1 < argc) {
      bool used = false;
      if (take_option(a, arg, argv[i + 1], &used)) { i++; continue; }
      if (used) {
        fprintf(stderr, "capstore %s: %s: bad value '%s'\n", cmd, arg, argv[i + 1]);
        return usage(stderr, is_read);
      }
    }
    fprintf(stderr, "capstore %s: unknown argument '%s'\n", cmd, arg);
    return usage(stderr, is_read);
  }
  if (a->config == NULL) return fprintf(stderr, "capstore %s: CONFIG is missing\n", cmd), usage(stderr, is_read);
  if (is_read && a->out_dir == NULL) return fprintf(stderr, "capstore read: --out DIR is missing\n"), usage(stderr, true);
  if (a->limit > 0 && a->limit < a->page_size) a->page_size = (uint32_t)a->limit;
  a->opt.verify_sha256 = a->sha256;
  return CLI_EXIT_OK;
}

static void human_bytes(uint64_t bytes, char *out, size_t size) {
  if (bytes < 10 * 1024) snprintf(out, size, "%" PRIu64 " B", bytes);
  else if (bytes < 10ull << 20) snprintf(out, size, "%.1f KiB", (double)bytes / 1024);
  else if (bytes < 10ull << 30) snprintf(out, size, "%.1f MiB", (double)bytes / (1 << 20));
  else snprintf(out, size, "%.2f GiB", (double)bytes / (1 << 30));
}

/* "planned: ..." on stderr; the estimate's refusal (over a limit) is returned. */
static int show_plan(const char *cmd, capstore_reader *r, const capstore_selection *sel, const read_args *a) {
  capstore_read_cost cost;
  char msg[512], bytes[32], payload[32];
  int rc = capstore_read_estimate(r, sel, &a->opt, &cost, msg, sizeof msg);
  human_bytes(cost.planned_bytes, bytes, sizeof bytes);
  human_bytes(cost.payload_bytes, payload, sizeof payload);
  if (rc == CS_E_OK || rc == CS_E_TOO_LARGE)
    fprintf(stderr, "capstore %s: reading %u records (%s of payload) from %u packs takes %" PRIu64 " GETs, %s\n", cmd,
            sel->count, payload, cost.packs, cost.planned_requests, bytes);
  if (rc != CS_E_OK) fprintf(stderr, "capstore %s: %s\n", cmd, msg);
  return rc;
}

/* Pages of the search into one selection, up to a->limit records (0: all). */
static int gather(const char *cmd, capstore_reader *r, const read_args *a, capstore_selection *all, char *next_cursor,
                  size_t cursor_size) {
  capstore_selection page;
  memset(&page, 0, sizeof page);
  char cursor[CAPSTORE_CURSOR_MAX] = "", msg[512];
  if (a->cursor != NULL) snprintf(cursor, sizeof cursor, "%s", a->cursor);
  next_cursor[0] = '\0';
  for (;;) {
    uint32_t size = a->page_size;
    if (a->limit > 0 && a->limit - all->count < size) size = (uint32_t)(a->limit - all->count);
    int rc = capstore_search(r, &a->filter, cursor, size, &page, msg, sizeof msg);
    if (rc != CS_E_OK) {
      fprintf(stderr, "capstore %s: %s\n", cmd, msg);
      capstore_selection_free(&page);
      return rc;
    }
    rc = capstore_selection_take(all, &page);
    if (rc != CS_E_OK) {
      fprintf(stderr, "capstore %s: out of memory for the selection\n", cmd);
      capstore_selection_free(&page);
      return rc;
    }
    snprintf(cursor, sizeof cursor, "%s", all->cursor); /* the page's, moved with its rows */
    if (cursor[0] == '\0' || (a->limit > 0 && all->count >= a->limit)) break;
  }
  snprintf(next_cursor, cursor_size, "%s", cursor);
  capstore_selection_free(&page);
  return CS_E_OK;
}

static void shape_text(const cs_pack_meta *m, char *out, size_t size) {
  size_t len = (size_t)snprintf(out, size, "[");
  for (uint32_t i = 0; i < m->rank && len < size; i++)
    len += (size_t)snprintf(out + len, size - len, "%s%" PRIu32, i == 0 ? "" : ",", m->shape[i]);
  if (len < size) snprintf(out + len, size - len, "]");
}

static json_t *row_json(const cs_search_row *row) {
  const cs_pack_meta *m = &row->d.record.meta;
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&row->d.pack_id, id);
  json_t *shape = json_array();
  for (uint32_t i = 0; i < m->rank; i++) json_array_append_new(shape, json_integer(m->shape[i]));
  json_t *o = json_object();
  json_object_set_new(o, "capture_id", json_stringn(m->capture_id.bytes, m->capture_id.len));
  json_object_set_new(o, "tenant_id", json_stringn(m->tenant_id.bytes, m->tenant_id.len));
  json_object_set_new(o, "experiment_id", json_stringn(m->experiment_id.bytes, m->experiment_id.len));
  json_object_set_new(o, "run_id", json_stringn(m->run_id.bytes, m->run_id.len));
  json_object_set_new(o, "session_id", json_stringn(m->session_id.bytes, m->session_id.len));
  json_object_set_new(o, "request_id", json_stringn(m->request_id.bytes, m->request_id.len));
  json_object_set_new(o, "sequence_id", json_stringn(m->sequence_id.bytes, m->sequence_id.len));
  json_object_set_new(o, "model_id", json_stringn(m->model_id.bytes, m->model_id.len));
  json_object_set_new(o, "model_revision", json_stringn(m->model_revision.bytes, m->model_revision.len));
  json_object_set_new(o, "hook_name", json_stringn(m->hook_name.bytes, m->hook_name.len));
  json_object_set_new(o, "layer_number", json_integer(m->layer_number));
  json_object_set_new(o, "step_number", json_integer((json_int_t)m->step_number));
  json_object_set_new(o, "token_start", json_integer((json_int_t)m->token_start));
  json_object_set_new(o, "token_end", json_integer((json_int_t)m->token_end));
  json_object_set_new(o, "dtype", json_string(cs_dtype_name(m->dtype)));
  json_object_set_new(o, "shape", shape);
  json_object_set_new(o, "captured_at_ns", json_integer((json_int_t)m->captured_at_ns));
  json_object_set_new(o, "bytes", json_integer((json_int_t)row->d.record.stored_length));
  json_object_set_new(o, "crc32", json_integer(row->d.record.crc32));
  json_object_set_new(o, "pack_id", json_string(id));
  json_object_set_new(o, "key", json_string(row->d.key));
  json_object_set_new(o, "offset", json_integer((json_int_t)row->d.record.offset));
  json_object_set_new(o, "version", json_integer((json_int_t)row->d.version));
  return o;
}

static void print_json_line(json_t *o) {
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (text != NULL) puts(text);
  free(text);
  json_decref(o);
}

/* The widest of a text column (at least its title's, at most max). */
static int column_width(const capstore_selection *sel, bool hook, int title, int max) {
  size_t w = (size_t)title;
  for (uint32_t i = 0; i < sel->count; i++) {
    const cs_pack_meta *m = &sel->rows[i].d.record.meta;
    size_t len = hook ? m->hook_name.len : m->capture_id.len;
    if (len > w) w = len;
  }
  return w > (size_t)max ? max : (int)w;
}

static void print_table(const capstore_selection *sel) {
  int id_w = column_width(sel, false, 10, 64), hook_w = column_width(sel, true, 4, 40);
  printf("%-*s  %-*s %6s %8s %-13s %-9s %-14s %10s\n", id_w, "CAPTURE ID", hook_w, "HOOK", "LAYER", "STEP", "TOKENS",
         "DTYPE", "SHAPE", "BYTES");
  for (uint32_t i = 0; i < sel->count; i++) {
    const cs_pack_meta *m = &sel->rows[i].d.record.meta;
    char tokens[48], shape[64];
    snprintf(tokens, sizeof tokens, "%" PRIu64 "..%" PRIu64, m->token_start, m->token_end);
    shape_text(m, shape, sizeof shape);
    int id_len = m->capture_id.len > (size_t)id_w ? id_w : (int)m->capture_id.len;
    int hook_len = m->hook_name.len > (size_t)hook_w ? hook_w : (int)m->hook_name.len;
    printf("%.*s%*s  %.*s%*s %6" PRId32 " %8" PRIu64 " %-13s %-9s %-14s %10" PRIu64 "\n", id_len, m->capture_id.bytes,
           id_w - id_len, "", hook_len, m->hook_name.bytes, hook_w - hook_len, "", m->layer_number, m->step_number,
           tokens, cs_dtype_name(m->dtype), shape, sel->rows[i].d.record.stored_length);
  }
}

static capstore_reader *open_reader(const char *cmd, const char *config, capstore_settings **s) {
  *s = cli_settings_load(cmd, config);
  if (*s == NULL) return NULL;
  capstore_reader *r = NULL;
  char msg[512];
  if (capstore_reader_open(capstore_settings_config(*s), &r, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore %s: %s\n", cmd, msg);
    capstore_settings_free(*s);
    *s = NULL;
  }
  return r;
}

int cli_ls_main(int argc, char **argv) {
  read_args a;
  int code = parse_args(argc, argv, false, &a);
  if (code != CLI_EXIT_OK) return code < 0 ? CLI_EXIT_OK : code;
  capstore_settings *s = NULL;
  capstore_reader *r = open_reader("ls", a.config, &s);
  if (r == NULL) return s == NULL ? CLI_EXIT_UNREADABLE : CLI_EXIT_FAILURE;
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  char next[CAPSTORE_CURSOR_MAX];
  code = gather("ls", r, &a, &sel, next, sizeof next) == CS_E_OK ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
  if (code == CLI_EXIT_OK) {
    if (show_plan("ls", r, &sel, &a) == CS_E_TOO_LARGE) code = CLI_EXIT_FAILURE;
    if (a.json) {
      for (uint32_t i = 0; i < sel.count; i++) print_json_line(row_json(&sel.rows[i]));
      json_t *last = json_object();
      json_object_set_new(last, "watermark", json_integer((json_int_t)sel.watermark));
      json_object_set_new(last, "records", json_integer(sel.count));
      json_object_set_new(last, "cursor", next[0] != '\0' ? json_string(next) : json_null());
      print_json_line(last);
    } else {
      print_table(&sel);
      printf("\n%u records at watermark %" PRIu64 "%s\n", sel.count, sel.watermark,
             next[0] != '\0' ? "; more: --cursor" : " (the last page)");
      if (next[0] != '\0') printf("%s\n", next);
    }
  }
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  capstore_settings_free(s);
  return code;
}

/* ---- read: payloads as files ---- */

/* numpy's descr of a dtype, or NULL (bfloat16 has none). */
static const char *npy_descr(cs_dtype dtype) {
  static const char *const descr[CS_DTYPE_COUNT_] = {"|b1", "|u1", "|i1", "<i2", "<i4", "<i8", "<f2", NULL, "<f4", "<f8"};
  return dtype < CS_DTYPE_COUNT_ ? descr[dtype] : NULL;
}

/* The .npy v1.0 header of a C-order array: magic, version, length, the dict padded to 64 bytes with "\n". */
static size_t npy_header(const cs_pack_meta *m, char *out, size_t size) {
  char dict[600];
  size_t len = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                                npy_descr(m->dtype));
  for (uint32_t i = 0; i < m->rank; i++)
    len += (size_t)snprintf(dict + len, sizeof dict - len, "%" PRIu32 "%s", m->shape[i], m->rank == 1 ? "," : (i + 1 < m->rank ? ", " : ""));
  len += (size_t)snprintf(dict + len, sizeof dict - len, "), }");
  size_t total = 10 + len + 1;
  size_t padded = (total + 63) / 64 * 64;
  if (padded > size) return 0;
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  uint16_t header_len = (uint16_t)(padded - 10);
  out[8] = (char)(header_len & 0xff);
  out[9] = (char)(header_len >> 8);
  memcpy(out + 10, dict, len);
  memset(out + 10 + len, ' ', padded - total);
  out[padded - 1] = '\n';
  return padded;
}

/*
 * A file name for a capture id: [A-Za-z0-9._-] kept, every other byte "%XX";
 * never empty or hidden. A name cut at 180 bytes gets "~" and the CRC-32 of
 * the whole id, so two long ids that share their first bytes differ; an id
 * in several packs of the selection gets "@<pack id>".
 */
static void file_name(const cs_search_row *row, bool twice, char *out, size_t size) {
  const cs_pack_text *id = &row->d.record.meta.capture_id;
  size_t len = 0, i = 0;
  for (; i < id->len && len < 180; i++) {
    unsigned char c = (unsigned char)id->bytes[i];
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                (c == '.' && i > 0);
    len += keep ? (size_t)snprintf(out + len, size - len, "%c", c) : (size_t)snprintf(out + len, size - len, "%%%02X", c);
  }
  if (len == 0) len = (size_t)snprintf(out, size, "%%");
  if (i < id->len) len += (size_t)snprintf(out + len, size - len, "~%08x", cs_crc32(0, id->bytes, id->len));
  if (twice) { /* the same capture id in another pack: the pack tells them apart */
    char pack[CS_UUID_TEXT_LEN + 1];
    cs_uuid_format(&row->d.pack_id, pack);
    snprintf(out + len, size - len, "@%s", pack);
  }
}

/* Writes a file afresh: a symbolic link in its place is refused, never followed. */
static int write_file(const char *dir, const char *name, const char *header, size_t header_len, const uint8_t *bytes,
                      uint64_t length) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "wb");
  if (f == NULL) {
    close(fd);
    return -1;
  }
  bool ok = (header_len == 0 || fwrite(header, 1, header_len, f) == header_len) &&
            (length == 0 || fwrite(bytes, 1, (size_t)length, f) == length);
  return fclose(f) == 0 && ok ? 0 : -1;
}

static const capstore_selection *sort_sel;
static char (*sort_names)[512];

static int by_capture_id(const void *a, const void *b) {
  const cs_pack_text *x = &sort_sel->rows[*(const uint32_t *)a].d.record.meta.capture_id;
  const cs_pack_text *y = &sort_sel->rows[*(const uint32_t *)b].d.record.meta.capture_id;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n > 0 ? memcmp(x->bytes, y->bytes, n) : 0;
  return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

static int by_name(const void *a, const void *b) {
  return strcmp(sort_names[*(const uint32_t *)a], sort_names[*(const uint32_t *)b]);
}

/*
 * Every row's file name, unique: ids seen twice (sorted once, not compared
 * pairwise) get their pack; any name still repeated is refused. NULL after a
 * message.
 */
static char (*file_names(const read_args *a, const capstore_selection *sel))[512] {
  char (*names)[512] = calloc(sel->count + 1, sizeof *names);
  uint32_t *order = calloc(sel->count + 1, sizeof *order);
  bool *twice = calloc(sel->count + 1, sizeof *twice);
  if (names == NULL || order == NULL || twice == NULL) {
    fprintf(stderr, "capstore read: out of memory for %u file names\n", sel->count);
    free(names), free(order), free(twice);
    return NULL;
  }
  for (uint32_t i = 0; i < sel->count; i++) order[i] = i;
  sort_sel = sel;
  qsort(order, sel->count, sizeof *order, by_capture_id);
  for (uint32_t i = 1; i < sel->count; i++)
    if (by_capture_id(&order[i - 1], &order[i]) == 0) twice[order[i - 1]] = twice[order[i]] = true;
  for (uint32_t i = 0; i < sel->count; i++) {
    const cs_search_row *row = &sel->rows[i];
    file_name(row, twice[i], names[i], sizeof names[i] - 8);
    bool npy = !a->raw && npy_descr(row->d.record.meta.dtype) != NULL;
    strcat(names[i], npy ? ".npy" : ".bin");
  }
  sort_names = names;
  qsort(order, sel->count, sizeof *order, by_name);
  for (uint32_t i = 1; i < sel->count; i++) {
    if (strcmp(names[order[i - 1]], names[order[i]]) == 0) {
      fprintf(stderr, "capstore read: two records would be written to %s; nothing was written\n", names[order[i]]);
      free(names), names = NULL;
      break;
    }
  }
  free(order);
  free(twice);
  return names;
}

/* Writes every payload and the manifest; CLI_EXIT_OK or CLI_EXIT_FAILURE. */
static int write_all(const read_args *a, const capstore_selection *sel, const capstore_payloads *p) {
  char path[4096];
  if (mkdir(a->out_dir, 0777) != 0 && errno != EEXIST)
    return fprintf(stderr, "capstore read: %s: %s\n", a->out_dir, strerror(errno)), CLI_EXIT_FAILURE;
  snprintf(path, sizeof path, "%s/manifest.jsonl", a->out_dir);
  FILE *manifest = fopen(path, "w");
  if (manifest == NULL) return fprintf(stderr, "capstore read: %s: %s\n", path, strerror(errno)), CLI_EXIT_FAILURE;
  bool tty = !a->quiet && isatty(STDERR_FILENO);
  char (*names)[512] = file_names(a, sel);
  if (names == NULL) {
    fclose(manifest);
    return CLI_EXIT_FAILURE;
  }
  for (uint32_t i = 0; i < sel->count; i++) {
    const cs_search_row *row = &sel->rows[i];
    const char *name = names[i];
    char header[1024];
    size_t header_len = 0;
    bool npy = !a->raw && npy_descr(row->d.record.meta.dtype) != NULL;
    if (npy) header_len = npy_header(&row->d.record.meta, header, sizeof header);
    if (npy && header_len == 0) {
      fprintf(stderr, "\ncapstore read: %s: the .npy header does not fit\n", name);
      free(names);
      fclose(manifest);
      return CLI_EXIT_FAILURE;
    }
    if (write_file(a->out_dir, name, header, header_len, p->bytes[i], p->length[i]) != 0) {
      fprintf(stderr, "\ncapstore read: %s/%s: %s\n", a->out_dir, name, strerror(errno));
      free(names);
      fclose(manifest);
      return CLI_EXIT_FAILURE;
    }
    json_t *o = row_json(row);
    json_object_set_new(o, "file", json_string(name));
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (line != NULL) fprintf(manifest, "%s\n", line);
    free(line);
    if (tty && (i % 256 == 0 || i + 1 == sel->count)) fprintf(stderr, "\r  writing %u/%u files", i + 1, sel->count);
  }
  free(names);
  if (tty) fprintf(stderr, "\n");
  if (fclose(manifest) != 0) return fprintf(stderr, "capstore read: %s: %s\n", path, strerror(errno)), CLI_EXIT_FAILURE;
  return CLI_EXIT_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cli_read_main(int argc, char **argv) {
  read_args a;
  int code = parse_args(argc, argv, true, &a);
  if (code != CLI_EXIT_OK) return code < 0 ? CLI_EXIT_OK : code;
  capstore_settings *s = NULL;
  capstore_reader *r = open_reader("read", a.config, &s);
  if (r == NULL) return s == NULL ? CLI_EXIT_UNREADABLE : CLI_EXIT_FAILURE;
  capstore_selection sel;
  memset(&sel, 0, sizeof sel);
  capstore_payloads p;
  memset(&p, 0, sizeof p);
  char next[CAPSTORE_CURSOR_MAX], msg[512];
  code = gather("read", r, &a, &sel, next, sizeof next) == CS_E_OK ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
  if (code == CLI_EXIT_OK && show_plan("read", r, &sel, &a) != CS_E_OK) code = CLI_EXIT_FAILURE;
  if (code == CLI_EXIT_OK) {
    double start = now_s();
    if (capstore_read(r, &sel, &a.opt, &p, msg, sizeof msg) != CS_E_OK) {
      fprintf(stderr, "capstore read: %s\n", msg);
      code = CLI_EXIT_FAILURE;
    } else {
      double took = now_s() - start;
      char bytes[32];
      human_bytes(p.cost.bytes, bytes, sizeof bytes);
      fprintf(stderr, "capstore read: %" PRIu64 " GETs, %s in %.2f s (%.1f MB/s), every record verified\n",
              p.cost.requests, bytes, took, took > 0 ? (double)p.cost.bytes / took / 1e6 : 0.0);
      code = write_all(&a, &sel, &p);
      if (code == CLI_EXIT_OK)
        printf("%u records written to %s (manifest.jsonl lists them)%s\n", sel.count, a.out_dir,
               next[0] != '\0' ? "; --limit reached: more may match" : "");
    }
  }
  capstore_payloads_free(&p);
  capstore_selection_free(&sel);
  capstore_reader_free(r);
  capstore_settings_free(s);
  return code;
}

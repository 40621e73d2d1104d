/*
 * capstore pack build SPEC OUT: writes a pack from a JSON spec.
 *
 * {"pack_id": "<uuid>", "created_at_ns": N, "records": [
 *    {"metadata": {<the 21 fields, as in the footer>}, "payload_hex": "00ff"},
 *    {"metadata": {...}, "payload_file": "path, relative to the spec's directory"}]}
 *
 * Integers may use the whole u64 range. The pack goes to OUT.tmp first and is
 * renamed to OUT only once complete, so OUT never holds a partial pack.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capstore/pack.h"
#include "cli.h"
#include "pack_json.h"

#define FILE_CHUNK_BYTES ((size_t)64 * 1024)

typedef struct build_ctx {
  const char *spec_path;
  bool quiet; /* no messages (the fuzz target) */
  const char *spec_dir; /* with a trailing '/', or "" */
  const pk_json_doc *doc;
  cs_pack_writer *writer;
  pk_arena *arena;
  cs_pack_error err;
} build_ctx;

static int spec_error(build_ctx *b, const char *format, ...) PK_PRINTF(2, 3);

static int spec_error(build_ctx *b, const char *format, ...) {
  if (b->quiet) return CLI_EXIT_FAILURE;
  fprintf(stderr, "capstore pack build: %s: ", b->spec_path);
  va_list args;
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
  fputc('\n', stderr);
  return CLI_EXIT_FAILURE;
}

static int pack_error(build_ctx *b) {
  if (b->quiet) return CLI_EXIT_FAILURE;
  fprintf(stderr, "capstore pack build: %s: %s: %s\n", b->spec_path,
          cs_pack_error_kind_name(b->err.kind), b->err.message);
  return CLI_EXIT_FAILURE;
}

static int write_file(void *context, const uint8_t *bytes, size_t length) {
  return fwrite(bytes, 1, length, (FILE *)context) == length ? 0 : -1;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int add_hex_payload(build_ctx *b, const cs_pack_meta *meta, const json_t *hex) {
  const char *text = json_string_value(hex);
  size_t len = json_string_length(hex);
  if (text == NULL || len % 2 != 0) return spec_error(b, "%s", "payload_hex is not an even number of hex digits");
  uint8_t *bytes = malloc(len / 2 + 1);
  if (bytes == NULL) return spec_error(b, "%s", "out of memory");
  for (size_t i = 0; i < len / 2; i++) {
    int hi = hex_digit(text[2 * i]);
    int lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      free(bytes);
      return spec_error(b, "%s", "payload_hex holds a character that is not a hex digit");
    }
    bytes[i] = (uint8_t)(hi << 4 | lo);
  }
  int rc = cs_pack_writer_add_record(b->writer, meta, bytes, len / 2, &b->err);
  free(bytes);
  return rc == CS_E_OK ? CLI_EXIT_OK : pack_error(b);
}

/* Streams a payload file into the open record, one chunk at a time. */
static int stream_file(build_ctx *b, int fd, const char *path) {
  uint8_t *chunk = malloc(FILE_CHUNK_BYTES);
  if (chunk == NULL) return spec_error(b, "%s", "out of memory");
  int status = CLI_EXIT_OK;
  for (;;) {
    ssize_t n = read(fd, chunk, FILE_CHUNK_BYTES);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = spec_error(b, "cannot read payload_file %s: %s", path, strerror(errno));
    if (n <= 0) break;
    if (cs_pack_writer_append(b->writer, chunk, (size_t)n, &b->err) != CS_E_OK) {
      status = pack_error(b);
      break;
    }
  }
  free(chunk);
  return status;
}

static int add_file_payload(build_ctx *b, const cs_pack_meta *meta, const json_t *name) {
  if (!json_is_string(name)) return spec_error(b, "%s", "payload_file is not a string");
  const char *file = json_string_value(name);
  size_t need = strlen(b->spec_dir) + strlen(file) + 1;
  char *path = malloc(need);
  if (path == NULL) return spec_error(b, "%s", "out of memory");
  snprintf(path, need, "%s%s", file[0] == '/' ? "" : b->spec_dir, file);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO is refused below, not waited on */
  struct stat st;
  int status = CLI_EXIT_OK;
  if (fd < 0 || fstat(fd, &st) != 0) {
    status = spec_error(b, "cannot open payload_file %s: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = spec_error(b, "payload_file %s is not a regular file", path);
  } else if (cs_pack_writer_begin_record(b->writer, meta, (uint64_t)st.st_size, &b->err) != 0) {
    status = pack_error(b);
  } else {
    status = stream_file(b, fd, path);
    if (status == CLI_EXIT_OK && cs_pack_writer_end_record(b->writer, &b->err) != CS_E_OK) {
      status = pack_error(b);
    }
  }
  if (fd >= 0) close(fd);
  free(path);
  return status;
}

static int add_record(build_ctx *b, const json_t *record, size_t index) {
  char path[48];
  snprintf(path, sizeof path, "spec records[%zu]", index);
  pk_jin_ctx ctx = {.doc = b->doc, .record = (uint32_t)index, .path = path};
  json_t *hex = json_object_get(record, "payload_hex");
  json_t *file = json_object_get(record, "payload_file");
  if (!json_is_object(record) || json_object_size(record) != 2 || (hex == NULL) == (file == NULL)) {
    return spec_error(b, "%s: needs metadata and exactly one of payload_hex, payload_file", path);
  }
  snprintf(path, sizeof path, "spec records[%zu].metadata", index);
  cs_pack_meta meta;
  if (pk_jin_meta(&ctx, json_object_get(record, "metadata"), b->arena, &meta, &b->err) != 0) {
    return pack_error(b);
  }
  return hex != NULL ? add_hex_payload(b, &meta, hex) : add_file_payload(b, &meta, file);
}

static int read_spec_config(build_ctx *b, cs_pack_writer_config *config) {
  static const char *const keys[] = {"created_at_ns", "pack_id", "records"};
  pk_jin_ctx ctx = {.doc = b->doc, .record = CS_PACK_NO_RECORD, .path = "spec"};
  json_t *root = b->doc->root;
  if (!json_is_object(root)) return spec_error(b, "%s", "the spec is not a JSON object");
  if (pk_jin_keys(&ctx, root, keys, 3, &b->err) != 0 ||
      pk_jin_u64(&ctx, root, "created_at_ns", &config->created_at_ns, &b->err) != 0) {
    return pack_error(b);
  }
  json_t *id = json_object_get(root, "pack_id");
  if (!json_is_string(id) ||
      cs_uuid_parse(json_string_value(id), json_string_length(id), &config->pack_id) != 0) {
    return spec_error(b, "%s", "pack_id is not a canonical lowercase UUID");
  }
  if (!json_is_array(json_object_get(root, "records"))) {
    return spec_error(b, "%s", "records is not an array");
  }
  return CLI_EXIT_OK;
}

/* Writes the whole pack into out; CLI_EXIT_OK once finished. */
static int build_into(build_ctx *b, FILE *out) {
  cs_pack_writer_config config = {.write = write_file, .write_context = out};
  int status = read_spec_config(b, &config);
  if (status != CLI_EXIT_OK) return status;
  if (cs_pack_writer_open(&config, &b->writer, &b->err) != CS_E_OK) return pack_error(b);
  json_t *records = json_object_get(b->doc->root, "records");
  for (size_t i = 0; i < json_array_size(records) && status == CLI_EXIT_OK; i++) {
    status = add_record(b, json_array_get(records, i), i);
  }
  if (status == CLI_EXIT_OK && cs_pack_writer_finish(b->writer, NULL, &b->err) != CS_E_OK) {
    status = pack_error(b);
  }
  return status;
}

/* Reads the whole spec file into *text (NUL-terminated). */
static int read_spec(build_ctx *b, uint8_t **text, size_t *len) {
  FILE *f = fopen(b->spec_path, "rb");
  if (f == NULL) return spec_error(b, "cannot open: %s", strerror(errno));
  pk_buf buf = {0};
  uint8_t chunk[4096];
  size_t n = 0;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) pk_buf_put(&buf, chunk, n);
  bool ok = !ferror(f) && !buf.failed;
  fclose(f);
  pk_buf_put(&buf, "", 1);
  if (!ok || buf.failed) {
    pk_buf_free(&buf);
    return spec_error(b, "%s", "cannot read the spec");
  }
  *text = buf.data;
  *len = buf.len - 1;
  return CLI_EXIT_OK;
}

static char *directory_of(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t len = slash == NULL ? 0 : (size_t)(slash - path) + 1;
  char *dir = malloc(len + 1);
  if (dir == NULL) return NULL;
  memcpy(dir, path, len);
  dir[len] = '\0';
  return dir;
}

/* Builds into OUT.tmp, then renames it over OUT. */
static int build_file(build_ctx *b, const char *out_path) {
  size_t need = strlen(out_path) + 5;
  char *tmp = malloc(need);
  if (tmp == NULL) return spec_error(b, "%s", "out of memory");
  snprintf(tmp, need, "%s.tmp", out_path);
  FILE *out = fopen(tmp, "wb");
  int status = out == NULL ? spec_error(b, "cannot create %s: %s", tmp, strerror(errno)) : build_into(b, out);
  if (out != NULL && fclose(out) != 0 && status == CLI_EXIT_OK) {
    status = spec_error(b, "cannot write %s: %s", tmp, strerror(errno));
  }
  if (status == CLI_EXIT_OK && rename(tmp, out_path) != 0) {
    status = spec_error(b, "cannot rename to %s: %s", out_path, strerror(errno));
  }
  if (status != CLI_EXIT_OK) unlink(tmp);
  free(tmp);
  return status;
}

/* Parses the spec text and builds the pack into out_path (via OUT.tmp) or, without one, into out. */
static int build_from_text(build_ctx *b, const uint8_t *text, size_t len, const char *out_path, FILE *out) {
  pk_json_doc doc;
  b->doc = &doc;
  b->arena = pk_arena_new();
  int status = CLI_EXIT_OK;
  if (b->spec_dir == NULL || b->arena == NULL) {
    status = spec_error(b, "%s", "out of memory");
  } else if (pk_jin_load(text, len, 0, "spec", &doc, &b->err) != CS_E_OK) {
    status = pack_error(b);
  } else {
    status = out_path != NULL ? build_file(b, out_path) : build_into(b, out);
    pk_jin_free(&doc);
  }
  cs_pack_writer_free(b->writer);
  pk_arena_free(b->arena);
  return status;
}

int cli_pack_build(const char *spec_path, const char *out_path) {
  build_ctx b = {.spec_path = spec_path};
  uint8_t *text = NULL;
  size_t len = 0;
  int status = read_spec(&b, &text, &len);
  if (status != CLI_EXIT_OK) return status;
  char *spec_dir = directory_of(spec_path);
  b.spec_dir = spec_dir;
  status = build_from_text(&b, text, len, out_path, NULL);
  free(spec_dir);
  free(text);
  return status;
}

int cli_pack_build_text(const uint8_t *text, size_t len, const char *spec_dir, FILE *out) {
  build_ctx b = {.spec_path = "spec", .quiet = true, .spec_dir = spec_dir};
  return build_from_text(&b, text, len, NULL, out);
}

/*
 * capstore pack build SPEC OUT [--allow-outside-paths]: writes a pack from a JSON spec.
 *
 * {"pack_id": "<uuid>", "created_at_ns": N, "records": [
 *    {"metadata": {<the 21 fields, as in the footer>}, "payload_hex": "00ff"},
 *    {"metadata": {...}, "payload_file": "path, relative to the spec's directory"}]}
 *
 * Integers may use the whole u64 range. Records may mix tenants, sessions and
 * ranks, as DMI's writer allows (the object key names the first record's).
 *
 * A spec is untrusted input: its payload files must resolve (symbolic links
 * followed) inside the spec's directory, so a spec cannot embed
 * /home/u/.aws/credentials or ../../secret; --allow-outside-paths lifts that.
 * The check holds for the file actually opened, whatever is renamed or
 * swapped for a link meanwhile: the spec's directory is opened once and each
 * payload is opened beneath it by the kernel (openat2, RESOLVE_BENEATH), or,
 * where openat2 is missing or refuses an absolute link, opened as a path
 * only (O_PATH) and read only once /proc/self/fd says where it lies.
 * The pack goes to a temp file beside OUT, created exclusively (never through
 * a planted link) and renamed over OUT only once complete and synced, so OUT
 * never holds a partial pack; a failed build removes the temp file.
 */
#define _GNU_SOURCE /* realpath, O_PATH, syscall; before any header */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef SYS_openat2
#include <linux/openat2.h>
#endif

#include "capstore/pack.h"
#include "cli.h"
#include "pack_json.h"

#define FILE_CHUNK_BYTES ((size_t)64 * 1024)
#define TEMP_ATTEMPTS 16 /* temp names tried before giving up (each is random) */

typedef struct build_ctx {
  const char *spec_path;
  bool quiet; /* no messages (the fuzz target) */
  const char *spec_dir; /* with a trailing '/', or "" */
  const char *spec_root; /* the spec's directory, resolved; NULL: payload files may be anywhere */
  int root_fd; /* the spec's directory, opened once: the spec is read from it, payloads confined to it */
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

static int add_hex_payload(build_ctx *b, const cs_pack_meta *meta, const json_t *hex) {
  const char *text = json_string_value(hex);
  size_t len = json_string_length(hex);
  if (text == NULL || len % 2 != 0) return spec_error(b, "%s", "payload_hex is not an even number of hex digits");
  uint8_t *bytes = malloc(len / 2 + 1);
  if (bytes == NULL) return spec_error(b, "%s", "out of memory");
  if (cs_hex_decode(text, len, CS_HEX_ANY, bytes) != CS_E_OK) {
    free(bytes);
    return spec_error(b, "%s", "payload_hex holds a character that is not a hex digit");
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

/* Whether resolved (an absolute path without links) is root or lies under it. */
static bool path_inside(const char *resolved, const char *root) {
  size_t len = strlen(root);
  if (len == 1 && root[0] == '/') return true;
  return strncmp(resolved, root, len) == 0 && (resolved[len] == '\0' || resolved[len] == '/');
}

/*
 * Refuses a payload path that is absolute or resolves (`..` and symbolic
 * links followed) outside the spec's directory, naming where it leads.
 * Checked before the file is opened, so that, unless something is swapped in
 * meanwhile (open_confined's concern), nothing outside is even opened.
 */
static int confine_path(build_ctx *b, const char *file, const char *path) {
  if (file[0] == '/') {
    return spec_error(b, "payload_file %s is an absolute path, outside the spec's directory %s "
                         "(--allow-outside-paths allows it)", file, b->spec_root);
  }
  char *real = realpath(path, NULL);
  if (real == NULL) return spec_error(b, "cannot open payload_file %s: %s", path, strerror(errno));
  if (!path_inside(real, b->spec_root)) {
    int status = spec_error(b, "payload_file %s resolves to %s, outside the spec's directory %s "
                               "(--allow-outside-paths allows it)", file, real, b->spec_root);
    free(real);
    return status;
  }
  free(real);
  return CLI_EXIT_OK;
}

#define PAYLOAD_OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)

/*
 * Opens file beneath the spec's directory; the kernel refuses (EXDEV) any
 * step out of it: "..", an absolute link, a link leading out. -1 with errno
 * ENOSYS where openat2 is missing (Linux < 5.6, or a seccomp filter).
 */
static int open_beneath(int root_fd, const char *file) {
#ifdef SYS_openat2
  struct open_how how = {.flags = PAYLOAD_OPEN_FLAGS, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  return (int)syscall(SYS_openat2, root_fd, file, &how, sizeof how);
#else
  (void)root_fd;
  (void)file;
  errno = ENOSYS;
  return -1;
#endif
}

/*
 * The fallback: file opened as a path only (O_PATH reads nothing and acts on
 * no device), kept only if /proc/self/fd says it lies inside the spec's
 * directory, then opened for reading through that same descriptor. Returns
 * the descriptor to read, or -1 after reporting.
 */
static int open_verified(build_ctx *b, const char *file, const char *path) {
  int located = openat(b->root_fd, file, O_PATH | O_CLOEXEC);
  if (located < 0) {
    spec_error(b, "cannot open payload_file %s: %s", path, strerror(errno));
    return -1;
  }
  char link[64];
  char where[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", located);
  ssize_t n = readlink(link, where, sizeof where);
  if (n >= 0 && (size_t)n >= sizeof where) {
    n = -1;
    errno = ENAMETOOLONG;
  }
  if (n >= 0) where[n] = '\0';
  int fd = -1;
  if (n < 0) {
    spec_error(b, "cannot tell where payload_file %s lies (%s: %s); refused", file, link, strerror(errno));
  } else if (!path_inside(where, b->spec_root)) {
    spec_error(b, "payload_file %s resolves to %s, outside the spec's directory %s "
                  "(--allow-outside-paths allows it)", file, where, b->spec_root);
  } else if ((fd = open(link, PAYLOAD_OPEN_FLAGS)) < 0) {
    spec_error(b, "cannot open payload_file %s: %s", path, strerror(errno));
  }
  close(located);
  return fd;
}

/*
 * Opens a payload confined to the spec's directory: the path checked first
 * (a clear message, nothing outside opened), then the file opened so that
 * what is read lies inside whatever was swapped in between.
 */
static int open_confined(build_ctx *b, const char *file, const char *path) {
  assert(b->spec_root != NULL && b->root_fd >= 0);
  if (confine_path(b, file, path) != CLI_EXIT_OK) return -1;
  int fd = open_beneath(b->root_fd, file);
  if (fd >= 0) return fd;
  /* EXDEV: a way out, or an absolute link back in; ENOSYS, EPERM: no openat2; EAGAIN: a rename raced. */
  if (errno == EXDEV || errno == ENOSYS || errno == EPERM || errno == EAGAIN) return open_verified(b, file, path);
  spec_error(b, "cannot open payload_file %s: %s", path, strerror(errno));
  return -1;
}

/* Opens a payload file (a FIFO is refused, not waited on); *fd stays -1 on failure. */
static int open_payload(build_ctx *b, const char *file, const char *path, int *fd, struct stat *st) {
  *fd = -1;
  int opened = -1;
  if (b->spec_root == NULL) {
    opened = open(path, PAYLOAD_OPEN_FLAGS);
    if (opened < 0) return spec_error(b, "cannot open payload_file %s: %s", path, strerror(errno));
  } else {
    opened = open_confined(b, file, path);
    if (opened < 0) return CLI_EXIT_FAILURE;
  }
  int status = CLI_EXIT_OK;
  if (fstat(opened, st) != 0) {
    status = spec_error(b, "cannot open payload_file %s: %s", path, strerror(errno));
  } else if (!S_ISREG(st->st_mode)) {
    status = spec_error(b, "payload_file %s is not a regular file", path);
  }
  if (status == CLI_EXIT_OK) *fd = opened;
  else close(opened);
  return status;
}

/* One record whose payload is the open file's bytes. */
static int add_file_record(build_ctx *b, const cs_pack_meta *meta, int fd, const struct stat *st,
                           const char *path) {
  if (cs_pack_writer_begin_record(b->writer, meta, (uint64_t)st->st_size, &b->err) != CS_E_OK) {
    return pack_error(b);
  }
  int status = stream_file(b, fd, path);
  if (status == CLI_EXIT_OK && cs_pack_writer_end_record(b->writer, &b->err) != CS_E_OK) {
    status = pack_error(b);
  }
  return status;
}

static int add_file_payload(build_ctx *b, const cs_pack_meta *meta, const json_t *name) {
  if (!json_is_string(name)) return spec_error(b, "%s", "payload_file is not a string");
  const char *file = json_string_value(name);
  if (strlen(file) != json_string_length(name)) {
    return spec_error(b, "%s", "payload_file holds a NUL character");
  }
  size_t need = strlen(b->spec_dir) + strlen(file) + 1;
  char *path = malloc(need);
  if (path == NULL) return spec_error(b, "%s", "out of memory");
  snprintf(path, need, "%s%s", file[0] == '/' ? "" : b->spec_dir, file);
  int fd = -1;
  struct stat st;
  int status = open_payload(b, file, path, &fd, &st);
  if (status == CLI_EXIT_OK) status = add_file_record(b, meta, fd, &st, path);
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
  cs_pack_writer_config config = {.write = write_file, .write_context = out, .mixed_keys = true};
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

/*
 * The most a spec may hold: a footer's worth of metadata and as much again of
 * payload_hex (larger payloads belong in payload_file).
 */
#define SPEC_BYTES_MAX ((uint64_t)CS_PACK_FOOTER_BYTES_MAX + 64u * 1024u * 1024u)

/* Reads exactly len bytes of fd into text; 0, or -1 with errno set (EIO: it shrank, EFBIG: it grew). */
static int read_exactly(int fd, uint8_t *text, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, text + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return -1;
    }
    got += (size_t)n;
  }
  uint8_t extra;
  ssize_t n = read(fd, &extra, 1);
  if (n == 0) return 0;
  if (n > 0) errno = EFBIG;
  return -1;
}

/*
 * Opens the spec: only a regular file is read (the open never waits:
 * O_NONBLOCK, as a FIFO without a writer would block it forever), and only
 * one of at most SPEC_BYTES_MAX bytes. *size is its size.
 */
static int open_spec(build_ctx *b, int *fd, uint64_t *size) {
  /* Read from the directory payloads are confined to: root_fd, opened before. */
  const char *slash = strrchr(b->spec_path, '/');
  const char *name = slash == NULL ? b->spec_path : slash + 1;
  *fd = openat(b->root_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  struct stat st;
  if (*fd < 0 || fstat(*fd, &st) != 0) return spec_error(b, "cannot open: %s", strerror(errno));
  if (!S_ISREG(st.st_mode)) return spec_error(b, "is %s, not a regular file", cli_file_kind(st.st_mode));
  *size = (uint64_t)st.st_size;
  if (*size > SPEC_BYTES_MAX) {
    return spec_error(b, "the spec is %llu bytes, more than a spec may hold (%llu); "
                         "put large payloads in payload_file", (unsigned long long)*size,
                      (unsigned long long)SPEC_BYTES_MAX);
  }
  return CLI_EXIT_OK;
}

/* Reads the whole spec file into *text (NUL-terminated). */
static int read_spec(build_ctx *b, uint8_t **text, size_t *len) {
  int fd = -1;
  uint64_t size = 0;
  int status = open_spec(b, &fd, &size);
  uint8_t *bytes = status == CLI_EXIT_OK ? malloc((size_t)size + 1) : NULL;
  if (status == CLI_EXIT_OK && bytes == NULL) status = spec_error(b, "%s", "out of memory");
  if (status == CLI_EXIT_OK && read_exactly(fd, bytes, (size_t)size) != 0) {
    const char *why = errno == EFBIG ? "it grew while it was read" : strerror(errno);
    status = spec_error(b, "cannot read the spec: %s", why);
  }
  if (fd >= 0) close(fd);
  if (status != CLI_EXIT_OK) {
    free(bytes);
    return status;
  }
  bytes[size] = '\0';
  *text = bytes;
  *len = (size_t)size;
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

/*
 * Creates "<out_path>.tmp-<8 random hex digits>" exclusively: O_EXCL with
 * O_NOFOLLOW never opens an existing file or follows a planted link, and a
 * random name cannot be planted in advance. *tmp_out is the caller's to free.
 */
static int create_temp(build_ctx *b, const char *out_path, char **tmp_out, FILE **file_out) {
  size_t need = strlen(out_path) + sizeof ".tmp-01234567";
  char *tmp = malloc(need);
  if (tmp == NULL) return spec_error(b, "%s", "out of memory");
  int fd = -1;
  for (int attempt = 0; attempt < TEMP_ATTEMPTS && fd < 0; attempt++) {
    uint32_t suffix = 0;
    if (getrandom(&suffix, sizeof suffix, 0) != (ssize_t)sizeof suffix) suffix ^= (uint32_t)attempt * 2654435761u;
    snprintf(tmp, need, "%s.tmp-%08x", out_path, (unsigned)suffix);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  FILE *file = fd < 0 ? NULL : fdopen(fd, "wb");
  if (file == NULL) {
    int status = spec_error(b, "cannot create a temp file beside %s: %s", out_path, strerror(errno));
    if (fd >= 0) {
      close(fd);
      unlink(tmp);
    }
    free(tmp);
    return status;
  }
  *tmp_out = tmp;
  *file_out = file;
  return CLI_EXIT_OK;
}

/* Builds into a new temp file beside OUT, syncs it, then renames it over OUT (a link there is replaced). */
static int build_file(build_ctx *b, const char *out_path) {
  char *tmp = NULL;
  FILE *out = NULL;
  int status = create_temp(b, out_path, &tmp, &out);
  if (status != CLI_EXIT_OK) return status;
  status = build_into(b, out);
  if (status == CLI_EXIT_OK && (fflush(out) != 0 || fsync(fileno(out)) != 0)) {
    status = spec_error(b, "cannot write %s: %s", tmp, strerror(errno));
  }
  if (fclose(out) != 0 && status == CLI_EXIT_OK) {
    status = spec_error(b, "cannot write %s: %s", tmp, strerror(errno));
  }
  if (status == CLI_EXIT_OK && rename(tmp, out_path) != 0) {
    status = spec_error(b, "cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
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

/*
 * The spec's directory, opened once: the spec is read from it and payload
 * files are confined to it, so swapping a directory above it between the
 * two cannot point them at different places.
 */
static int open_spec_dir(build_ctx *b) {
  const char *dir = b->spec_dir[0] == '\0' ? "." : b->spec_dir;
  b->root_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (b->root_fd < 0) return spec_error(b, "cannot open the spec's directory %s: %s", dir, strerror(errno));
  return CLI_EXIT_OK;
}

/* Where the opened directory lies: payload files must lie under it. */
static int resolve_root(build_ctx *b, char **root) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", b->root_fd);
  *root = realpath(link, NULL);
  struct stat opened, named;
  if (*root == NULL) {
    /* No /proc: the directory's name, if it is still the one opened. */
    *root = realpath(b->spec_dir[0] == '\0' ? "." : b->spec_dir, NULL);
    if (*root == NULL) return spec_error(b, "cannot resolve the spec's directory: %s", strerror(errno));
    if (fstat(b->root_fd, &opened) != 0 || stat(*root, &named) != 0 || opened.st_dev != named.st_dev ||
        opened.st_ino != named.st_ino) {
      return spec_error(b, "the spec's directory %s changed while it was opened; refused", *root);
    }
  }
  return CLI_EXIT_OK;
}

int cli_pack_build(const char *spec_path, const char *out_path, bool allow_outside_paths) {
  build_ctx b = {.spec_path = spec_path, .root_fd = -1};
  uint8_t *text = NULL;
  size_t len = 0;
  char *spec_dir = directory_of(spec_path);
  if (spec_dir == NULL) return spec_error(&b, "%s", "out of memory");
  b.spec_dir = spec_dir;
  int status = open_spec_dir(&b);
  if (status == CLI_EXIT_OK) status = read_spec(&b, &text, &len);
  if (status != CLI_EXIT_OK) {
    if (b.root_fd >= 0) close(b.root_fd);
    free(spec_dir);
    return status;
  }
  char *root = NULL;
  if (!allow_outside_paths) status = resolve_root(&b, &root);
  b.spec_root = root;
  if (status == CLI_EXIT_OK) status = build_from_text(&b, text, len, out_path, NULL);
  if (b.root_fd >= 0) close(b.root_fd);
  free(root);
  free(spec_dir);
  free(text);
  return status;
}

int cli_pack_build_text(const uint8_t *text, size_t len, const char *spec_dir, FILE *out) {
  build_ctx b = {.spec_path = "spec", .quiet = true, .spec_dir = spec_dir, .root_fd = -1};
  char *root = NULL;
  int status = open_spec_dir(&b);
  if (status == CLI_EXIT_OK) status = resolve_root(&b, &root);
  b.spec_root = root;
  if (status == CLI_EXIT_OK) status = build_from_text(&b, text, len, NULL, out);
  if (b.root_fd >= 0) close(b.root_fd);
  free(root);
  return status;
}

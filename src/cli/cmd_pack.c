/*
 * capstore pack: info, verify, key and build for dmi-pack-v1 files.
 *
 * The file I/O lives here; src/pack only sees bytes. Reading follows the
 * format's order: the trailer (last 64 bytes), then the footer range it
 * names, then (verify, key) every byte once, in order, in 1 MiB reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capstore/pack.h"
#include "cli.h"
#include "pack_json.h"

#define READ_CHUNK_BYTES ((size_t)1 << 20)

typedef struct opened_pack {
  const char *path;
  int fd;
  uint64_t size;
  cs_pack_trailer trailer;
  cs_pack_header header;
  cs_pack_footer footer;
  bool footer_parsed;
} opened_pack;

static int report(const char *command, const char *path, const cs_pack_error *err) {
  fprintf(stderr, "capstore pack %s: %s: %s: %s\n", command, path,
          cs_pack_error_kind_name(err->kind), err->message);
  return CLI_EXIT_FAILURE;
}

static int report_errno(const char *command, const char *path, const char *what) {
  fprintf(stderr, "capstore pack %s: %s: %s: %s\n", command, path, what, strerror(errno));
  return CLI_EXIT_FAILURE;
}

/* Reads exactly len bytes at offset; 0, or -1 with errno set (EIO for a short file). */
static int read_at(int fd, uint64_t offset, void *buf, size_t len) {
  uint8_t *out = buf;
  while (len > 0) {
    ssize_t n = pread(fd, out, len, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return -1;
    }
    out += n;
    offset += (uint64_t)n;
    len -= (size_t)n;
  }
  return 0;
}

static void close_pack(opened_pack *p) {
  if (p->footer_parsed) cs_pack_footer_free(&p->footer);
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
  p->footer_parsed = false;
}

/*
 * Trailer, then footer, then header: everything but the payloads. Only a
 * regular file is read: the open never waits (O_NONBLOCK: a FIFO without a
 * writer would block it forever) and what fstat says is not one is refused.
 */
static int open_pack(const char *command, const char *path, opened_pack *p) {
  memset(p, 0, sizeof *p);
  p->path = path;
  p->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  struct stat st;
  if (p->fd < 0 || fstat(p->fd, &st) != 0) return report_errno(command, path, "open");
  if (!S_ISREG(st.st_mode)) {
    fprintf(stderr, "capstore pack %s: %s: open: is %s, not a regular file\n", command, path,
            cli_file_kind(st.st_mode));
    return CLI_EXIT_FAILURE;
  }
  p->size = (uint64_t)st.st_size;
  cs_pack_error err;
  uint8_t tail[CS_PACK_TRAILER_SIZE] = {0};
  if (p->size >= CS_PACK_TRAILER_SIZE &&
      read_at(p->fd, p->size - CS_PACK_TRAILER_SIZE, tail, sizeof tail) != 0) {
    return report_errno(command, path, "read trailer");
  }
  if (cs_pack_trailer_parse(tail, p->size, &p->trailer, &err) != CS_E_OK) {
    return report(command, path, &err);
  }
  uint8_t *footer = malloc(p->trailer.footer_length + 1);
  if (footer == NULL) return report_errno(command, path, "allocate footer");
  if (read_at(p->fd, p->trailer.footer_offset, footer, p->trailer.footer_length) != 0) {
    free(footer);
    return report_errno(command, path, "read footer");
  }
  int rc = cs_pack_footer_parse(&p->trailer, footer, p->trailer.footer_length, &p->footer, &err);
  free(footer);
  if (rc != CS_E_OK) return report(command, path, &err);
  p->footer_parsed = true;
  uint8_t head[CS_PACK_HEADER_SIZE];
  if (read_at(p->fd, 0, head, sizeof head) != 0) return report_errno(command, path, "read header");
  if (cs_pack_header_parse(head, &p->header, &err) != CS_E_OK ||
      cs_pack_header_check(&p->header, &p->trailer, &p->footer, &err) != CS_E_OK) {
    return report(command, path, &err);
  }
  return CLI_EXIT_OK;
}

/* Streams the whole file through the full verifier. */
static int verify_pack(const char *command, opened_pack *p, cs_pack_summary *summary) {
  cs_pack_error err;
  cs_pack_verifier *v = NULL;
  if (cs_pack_verifier_new(&p->trailer, &p->footer, &v, &err) != CS_E_OK) {
    return report(command, p->path, &err);
  }
  uint8_t *chunk = malloc(READ_CHUNK_BYTES);
  int status = chunk == NULL ? report_errno(command, p->path, "allocate") : CLI_EXIT_OK;
  for (uint64_t at = 0; status == CLI_EXIT_OK && at < p->size;) {
    size_t n = p->size - at < READ_CHUNK_BYTES ? (size_t)(p->size - at) : READ_CHUNK_BYTES;
    if (read_at(p->fd, at, chunk, n) != 0) {
      status = report_errno(command, p->path, "read");
    } else if (cs_pack_verifier_update(v, chunk, n, &err) != CS_E_OK) {
      status = report(command, p->path, &err);
    }
    at += n;
  }
  if (status == CLI_EXIT_OK && cs_pack_verifier_finish(v, summary, &err) != CS_E_OK) {
    status = report(command, p->path, &err);
  }
  free(chunk);
  cs_pack_verifier_free(v);
  return status;
}

static void put_hex_field(pk_buf *out, const char *key, const uint8_t *bytes, size_t len) {
  char hex[65];
  pk_hex_lower(bytes, len, hex);
  pk_buf_put_text(out, key);
  pk_buf_put(out, "\"", 1);
  pk_buf_put_text(out, hex);
  pk_buf_put(out, "\"", 1);
}

static void put_header_json(pk_buf *out, const cs_pack_header *h) {
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&h->pack_id, id);
  pk_buf_put_text(out, "{\"created_at_ns\":");
  pk_buf_put_u64(out, h->created_at_ns);
  pk_buf_put_text(out, ",\"flags\":");
  pk_buf_put_u64(out, h->flags);
  pk_buf_put_text(out, ",\"header_size\":");
  pk_buf_put_u64(out, h->header_size);
  pk_buf_put_text(out, ",\"magic\":\"DMIPACK\\u0000\",\"major_version\":");
  pk_buf_put_u64(out, h->major_version);
  pk_buf_put_text(out, ",\"minor_version\":");
  pk_buf_put_u64(out, h->minor_version);
  pk_buf_put_text(out, ",\"pack_id\":\"");
  pk_buf_put_text(out, id);
  pk_buf_put_text(out, "\"}");
}

static void put_trailer_json(pk_buf *out, const cs_pack_trailer *t) {
  uint8_t crc[4] = {(uint8_t)(t->footer_crc32 >> 24), (uint8_t)(t->footer_crc32 >> 16),
                    (uint8_t)(t->footer_crc32 >> 8), (uint8_t)t->footer_crc32};
  put_hex_field(out, "{\"footer_crc32\":", crc, 4);
  pk_buf_put_text(out, ",\"footer_length\":");
  pk_buf_put_u64(out, t->footer_length);
  pk_buf_put_text(out, ",\"footer_offset\":");
  pk_buf_put_u64(out, t->footer_offset);
  pk_buf_put_text(out, ",\"magic\":\"DMIFTR\\u0000\\u0000\",\"major_version\":");
  pk_buf_put_u64(out, t->major_version);
  pk_buf_put_text(out, ",\"minor_version\":");
  pk_buf_put_u64(out, t->minor_version);
  put_hex_field(out, ",\"sha256\":", t->sha256, 32);
  pk_buf_put_text(out, "}");
}

static int print_buf(pk_buf *out) {
  pk_buf_put(out, "\n", 1);
  bool ok = !out->failed && fwrite(out->data, 1, out->len, stdout) == out->len;
  pk_buf_free(out);
  if (!ok || fflush(stdout) != 0) {
    fprintf(stderr, "capstore pack: writing the output failed\n");
    return CLI_EXIT_FAILURE;
  }
  return CLI_EXIT_OK;
}

/* capstore pack info FILE: header, trailer and footer as one JSON object. */
static int cmd_info(const char *path) {
  opened_pack p;
  int status = open_pack("info", path, &p);
  if (status != CLI_EXIT_OK) {
    close_pack(&p);
    return status;
  }
  char *footer_json = NULL;
  size_t footer_len = 0;
  cs_pack_error err;
  if (cs_pack_footer_encode(&p.footer, &footer_json, &footer_len, &err) != CS_E_OK) {
    close_pack(&p);
    return report("info", path, &err);
  }
  pk_buf out = {0};
  pk_buf_put_text(&out, "{\"file\":");
  pk_json_string(&out, path, strlen(path));
  pk_buf_put_text(&out, ",\"footer\":");
  pk_buf_put(&out, footer_json, footer_len);
  pk_buf_put_text(&out, p.footer.canonical ? ",\"footer_canonical\":true" : ",\"footer_canonical\":false");
  pk_buf_put_text(&out, ",\"header\":");
  put_header_json(&out, &p.header);
  pk_buf_put_text(&out, ",\"payloads_verified\":false,\"size_bytes\":");
  pk_buf_put_u64(&out, p.size);
  pk_buf_put_text(&out, ",\"trailer\":");
  put_trailer_json(&out, &p.trailer);
  pk_buf_put_text(&out, "}");
  free(footer_json);
  close_pack(&p);
  return print_buf(&out);
}

/* capstore pack verify FILE: every check; "ok" and the checksum on stdout. */
static int cmd_verify(const char *path) {
  opened_pack p;
  cs_pack_summary summary;
  int status = open_pack("verify", path, &p);
  if (status == CLI_EXIT_OK) status = verify_pack("verify", &p, &summary);
  close_pack(&p);
  if (status != CLI_EXIT_OK) return status;
  char sha[65];
  pk_hex_lower(summary.sha256, 32, sha);
  printf("ok %s: %u records, %llu bytes, sha256 %s\n", path, summary.record_count,
         (unsigned long long)summary.size_bytes, sha);
  return fflush(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

static void put_key_json(pk_buf *out, const char *key, size_t key_len,
                         const cs_pack_object_meta *meta) {
  pk_buf_put_text(out, "{\"content_type\":");
  pk_json_string(out, meta->content_type, strlen(meta->content_type));
  pk_buf_put_text(out, ",\"key\":");
  pk_json_string(out, key, key_len);
  pk_buf_put_text(out, ",\"metadata\":{");
  for (uint32_t i = 0; i < CS_PACK_OBJECT_META_COUNT; i++) {
    if (i > 0) pk_buf_put(out, ",", 1);
    pk_json_string(out, meta->entries[i].name, strlen(meta->entries[i].name));
    pk_buf_put(out, ":", 1);
    pk_json_string(out, meta->entries[i].value, strlen(meta->entries[i].value));
  }
  pk_buf_put_text(out, "}}");
}

/* capstore pack key FILE [--prefix P]: the object key and object metadata (verifies all). */
static int cmd_key(const char *path, const char *prefix) {
  opened_pack p;
  cs_pack_summary summary;
  int status = open_pack("key", path, &p);
  if (status == CLI_EXIT_OK) status = verify_pack("key", &p, &summary);
  cs_pack_error err;
  cs_pack_key_fields fields;
  char key[CS_KEY_MAX];
  size_t key_len = 0;
  if (status == CLI_EXIT_OK &&
      (cs_pack_footer_key_fields(&p.footer, &fields, &err) != CS_E_OK ||
       cs_pack_object_key(prefix, strlen(prefix), &fields, key, &key_len, &err) != CS_E_OK)) {
    status = report("key", path, &err);
  }
  close_pack(&p);
  if (status != CLI_EXIT_OK) return status;
  cs_pack_object_meta meta;
  cs_pack_object_meta_fill(&summary, &meta);
  pk_buf out = {0};
  put_key_json(&out, key, key_len, &meta);
  return print_buf(&out);
}

static int pack_usage(FILE *out) {
  fprintf(out,
          "usage: capstore pack info FILE        header, trailer and footer as JSON\n"
          "       capstore pack verify FILE      check every byte; reason on stderr\n"
          "       capstore pack key FILE [--prefix PREFIX]\n"
          "                                      object key and object metadata\n"
          "       capstore pack build SPEC OUT [--allow-outside-paths]\n"
          "                                      write a pack from a JSON spec (payload\n"
          "                                      files only from the spec's directory)\n"
          "\n"
          "FILE is a dmi-pack-v1 file (docs/format.md): a spool's .dmi-pack.ready file, or\n"
          "an object's bytes fetched from the store.\n"
          "\n"
          "exit status: 0 done (verify: every byte checked); 1 the file is refused or\n"
          "             unreadable (the reason on stderr); 2 usage.\n"
          "\n"
          "example: capstore pack verify spool/01a2...-b3df0.1796...7152.4096.832a...9fb3.dmi-pack.ready\n");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

int cli_pack_main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return pack_usage(stdout);
  if (argc == 3 && strcmp(argv[1], "info") == 0) return cmd_info(argv[2]);
  if (argc == 3 && strcmp(argv[1], "verify") == 0) return cmd_verify(argv[2]);
  if (argc == 3 && strcmp(argv[1], "key") == 0) return cmd_key(argv[2], "");
  if (argc == 5 && strcmp(argv[1], "key") == 0 && strcmp(argv[3], "--prefix") == 0) {
    return cmd_key(argv[2], argv[4]);
  }
  if (argc == 4 && strcmp(argv[1], "build") == 0) return cli_pack_build(argv[2], argv[3], false);
  if (argc == 5 && strcmp(argv[1], "build") == 0 && strcmp(argv[4], "--allow-outside-paths") == 0) {
    return cli_pack_build(argv[2], argv[3], true);
  }
  return pack_usage(stderr);
}

/*
 * The log of capstore serve: one event per line, as logfmt
 *   ts=2026-12-02T06:40:01.123Z level=info event=listening addr=127.0.0.1:41234
 * or as JSON
 *   {"ts":"2026-12-02T06:40:01.123Z","level":"info","event":"listening","addr":"127.0.0.1:41234"}
 * Values are escaped the same way in both: a quote, a backslash, a control
 * byte or a newline can never end a value or a line early, and bytes that
 * are not UTF-8 become U+FFFD (so a JSON line is always valid JSON). A line
 * is built whole in a bounded buffer and written with one write(2), so lines
 * from two threads never interleave in an O_APPEND file.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

#define LOG_MODE 0640
/* Kept free at the end of a line: a cut value's "...", its closing quote, the JSON brace, the newline, the NUL. */
#define LINE_TAIL 16u

typedef struct line {
  char *buf;
  size_t limit; /* the size less LINE_TAIL */
  size_t len;
  bool full;    /* a value was cut: nothing more is added */
} line;

static void put_raw(line *l, const char *text, size_t n) {
  if (l->full) return;
  if (l->len + n > l->limit) {
    l->full = true;
    return;
  }
  memcpy(l->buf + l->len, text, n);
  l->len += n;
}

static void put_text(line *l, const char *text) { put_raw(l, text, strlen(text)); }

/* The length of the valid UTF-8 sequence at p (1..4), or 0 (overlong, surrogate, above U+10FFFF, cut short). */
static size_t utf8_length(const unsigned char *p) {
  if (p[0] < 0x80) return 1;
  size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
  if (n == 0 || p[0] > 0xf4) return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0; /* a NUL ends the text here too */
  if (n == 3 && p[0] == 0xe0 && p[1] < 0xa0) return 0; /* overlong */
  if (n == 3 && p[0] == 0xed && p[1] >= 0xa0) return 0; /* a surrogate */
  if (n == 4 && p[0] == 0xf0 && p[1] < 0x90) return 0; /* overlong */
  if (n == 4 && p[0] == 0xf4 && p[1] >= 0x90) return 0; /* above U+10FFFF */
  return n;
}

/* One unit of a quoted value, escaped: into out (>= 8 bytes); *used gets the input bytes it took. */
static size_t escape_unit(const unsigned char *p, char *out, size_t *used) {
  static const char hex[] = "0123456789abcdef";
  *used = 1;
  switch (p[0]) {
  case '"': return memcpy(out, "\\\"", 2), 2;
  case '\\': return memcpy(out, "\\\\", 2), 2;
  case '\n': return memcpy(out, "\\n", 2), 2;
  case '\r': return memcpy(out, "\\r", 2), 2;
  case '\t': return memcpy(out, "\\t", 2), 2;
  default: break;
  }
  if (p[0] < 0x20 || p[0] == 0x7f) {
    memcpy(out, "\\u00", 4);
    out[4] = hex[p[0] >> 4];
    out[5] = hex[p[0] & 0xf];
    return 6;
  }
  size_t n = utf8_length(p);
  if (n == 0) return memcpy(out, "\\ufffd", 6), 6;
  *used = n;
  memcpy(out, p, n);
  return n;
}

/* A value in quotes, escaped; cut with "..." when the line has no room for all of it. */
static void put_quoted(line *l, const char *text) {
  if (l->full) return;
  put_raw(l, "\"", 1);
  const unsigned char *p = (const unsigned char *)(text != NULL ? text : "");
  while (*p != '\0' && !l->full) {
    char unit[8];
    size_t used;
    size_t n = escape_unit(p, unit, &used);
    if (l->len + n + 4 > l->limit) { /* keep room for "..." within the limit */
      memcpy(l->buf + l->len, "...", 3);
      l->len += 3;
      l->full = true;
      break;
    }
    memcpy(l->buf + l->len, unit, n);
    l->len += n;
    p += used;
  }
  /* The closing quote always fits: LINE_TAIL keeps room for it. */
  l->buf[l->len++] = '"';
}

/* logfmt leaves a value bare when it is plain printable ASCII without a quote, '=' or backslash. */
static bool bare_ok(const char *text) {
  if (text == NULL || text[0] == '\0') return false;
  for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
    if (*p <= 0x20 || *p >= 0x7f || *p == '"' || *p == '=' || *p == '\\') return false;
  return true;
}

static void put_key(line *l, bool json, bool first, const char *key) {
  assert(key != NULL && key[0] != '\0' && strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(key));
  if (json) {
    put_text(l, first ? "\"" : ",\"");
    put_text(l, key);
    put_text(l, "\":");
  } else {
    if (!first) put_raw(l, " ", 1);
    put_text(l, key);
    put_raw(l, "=", 1);
  }
}

static void put_field(line *l, bool json, const serve_field *f) {
  char number[24];
  /* The key goes in only with room for a value after it (a number, or at least "..." quoted). */
  if (l->full || l->len + strlen(f->key) + 8 + sizeof number > l->limit) {
    l->full = true;
    return;
  }
  put_key(l, json, false, f->key);
  switch (f->kind) {
  case SERVE_U64:
    snprintf(number, sizeof number, "%llu", (unsigned long long)f->number);
    put_text(l, number);
    break;
  case SERVE_BOOL: put_text(l, f->number != 0 ? "true" : "false"); break;
  case SERVE_TEXT:
  default:
    if (!json && bare_ok(f->text) && l->len + strlen(f->text) <= l->limit)
      put_text(l, f->text);
    else
      put_quoted(l, f->text);
    break;
  }
}

size_t serve_log_format(char *buf, size_t size, bool json, uint64_t wall_ns, const char *level, const char *event,
                        const serve_field *fields, size_t count) {
  assert(buf != NULL && size >= 256);
  line l = {buf, size - LINE_TAIL, 0, false};
  time_t sec = (time_t)(wall_ns / 1000000000u);
  struct tm tm;
  gmtime_r(&sec, &tm);
  char ts[48];
  size_t n = strftime(ts, sizeof ts - 6, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + n, sizeof ts - n, ".%03uZ", (unsigned)(wall_ns % 1000000000u / 1000000u));
  if (json) put_raw(&l, "{", 1);
  put_key(&l, json, true, "ts");
  if (json) put_quoted(&l, ts); else put_text(&l, ts);
  serve_field head[] = {SF_TEXT("level", level), SF_TEXT("event", event)};
  for (size_t i = 0; i < 2; i++) put_field(&l, json, &head[i]);
  for (size_t i = 0; i < count; i++) put_field(&l, json, &fields[i]);
  if (json) l.buf[l.len++] = '}';
  l.buf[l.len++] = '\n';
  l.buf[l.len] = '\0';
  assert(l.len < size);
  return l.len;
}

static int open_append(const char *path, char *err, size_t err_size) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, LOG_MODE);
  if (fd < 0) snprintf(err, err_size, "log %s: %s", path, strerror(errno));
  return fd;
}

int serve_log_open(serve_log *log, const char *path, bool json, char *err, size_t err_size) {
  memset(log, 0, sizeof *log);
  log->json = json;
  log->fd = STDERR_FILENO;
  if (path != NULL && path[0] != '\0') {
    log->fd = open_append(path, err, err_size);
    if (log->fd < 0) return -1;
    log->path = path;
  }
  pthread_mutex_init(&log->mutex, NULL);
  return 0;
}

int serve_log_reopen(serve_log *log, char *err, size_t err_size) {
  if (log->path == NULL) return 0;
  int fd = open_append(log->path, err, err_size);
  if (fd < 0) return -1;
  pthread_mutex_lock(&log->mutex);
  int old = log->fd;
  log->fd = fd;
  pthread_mutex_unlock(&log->mutex);
  close(old);
  return 1;
}

void serve_log_close(serve_log *log) {
  if (log->path != NULL) close(log->fd);
  log->fd = STDERR_FILENO;
  log->path = NULL;
  pthread_mutex_destroy(&log->mutex);
}

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void serve_log_event(serve_log *log, const char *level, const char *event, const serve_field *fields, size_t count) {
  char text[SERVE_LOG_LINE_MAX];
  size_t len = serve_log_format(text, sizeof text, log->json, wall_ns(), level, event, fields, count);
  pthread_mutex_lock(&log->mutex);
  /* A log that cannot be written has nowhere to say so: the line is lost, the daemon goes on. */
  for (size_t done = 0; done < len;) {
    ssize_t n = write(log->fd, text + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += (size_t)n;
  }
  pthread_mutex_unlock(&log->mutex);
}

/*
 * serve.h: the parts of `capstore serve` (cmd_serve.c): its log (serve_log.c),
 * its listen address (serve_addr.c, which `capstore status` shares) and its
 * HTTP endpoint (serve_http.c). Only the command links libmicrohttpd; the
 * library never does.
 */
#ifndef CAPSTORE_CLI_SERVE_H
#define CAPSTORE_CLI_SERVE_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "capstore/capstore.h"

/* ---- the log: one event per line, logfmt or JSON (serve_log.c) ---------------------------------------- */

typedef enum serve_field_kind { SERVE_TEXT, SERVE_U64, SERVE_BOOL } serve_field_kind;

/* One key=value of an event. Keys are fixed words of this program; values are escaped. */
typedef struct serve_field {
  const char *key;
  serve_field_kind kind;
  const char *text; /* SERVE_TEXT (NULL writes "") */
  uint64_t number;  /* SERVE_U64; SERVE_BOOL: 0 or 1 */
} serve_field;

#define SF_TEXT(k, v) ((serve_field){(k), SERVE_TEXT, (v), 0})
#define SF_U64(k, v) ((serve_field){(k), SERVE_U64, NULL, (uint64_t)(v)})
#define SF_BOOL(k, v) ((serve_field){(k), SERVE_BOOL, NULL, (v) ? 1u : 0u})

/* A line is cut to this (values end in "..."), so one event is one bounded write. */
#define SERVE_LOG_LINE_MAX 16384u

typedef struct serve_log {
  pthread_mutex_t mutex; /* the endpoint's thread logs too */
  int fd;                /* the file, or STDERR_FILENO */
  const char *path;      /* NULL: standard error */
  bool json;
} serve_log;

/*
 * Opens path for appending (O_APPEND | O_CREAT | O_CLOEXEC, mode 0640 before
 * the umask), or standard error when path is NULL or "". 0, or -1 with err
 * naming the file and the system's reason.
 */
int serve_log_open(serve_log *log, const char *path, bool json, char *err, size_t err_size);

/*
 * Opens the log's path again (logrotate moved the file away) and switches to
 * it; the old file stays in use when the new one cannot be opened. 1 when
 * reopened, 0 when logging to standard error (nothing to do), -1 with err.
 */
int serve_log_reopen(serve_log *log, char *err, size_t err_size);

void serve_log_close(serve_log *log);

/* Writes one event (ts, level, event, then fields in order) as one line. */
void serve_log_event(serve_log *log, const char *level, const char *event, const serve_field *fields, size_t count);

#define SERVE_LOG(log, level, event, ...)                                                            \
  serve_log_event((log), (level), (event), (const serve_field[]){__VA_ARGS__},                       \
                  sizeof((const serve_field[]){__VA_ARGS__}) / sizeof(serve_field))

/*
 * The line serve_log_event writes, at wall-clock time wall_ns, into buf
 * (size >= 256), newline-terminated and NUL-terminated: its length. Pure,
 * for the unit test.
 */
size_t serve_log_format(char *buf, size_t size, bool json, uint64_t wall_ns, const char *level, const char *event,
                        const serve_field *fields, size_t count);

/* ---- the listen address (serve_addr.c) --------------------------------------------------------------- */

typedef struct serve_addr {
  struct sockaddr_storage sa; /* the port included */
  socklen_t sa_len;
  bool ipv6;
  uint16_t port;
  char host[INET6_ADDRSTRLEN]; /* the literal, without brackets ("localhost" resolved: 127.0.0.1) */
} serve_addr;

/*
 * Parses "HOST:PORT": HOST an IPv4 literal, an IPv6 literal in brackets, or
 * localhost (127.0.0.1); PORT 0..65535 (0: a free one, chosen at bind). 0, or
 * -1 with err saying what is wrong (the caller names the key or option).
 */
int serve_addr_parse(const char *text, serve_addr *out, char *err, size_t err_size);

/* "127.0.0.1:9741" or "[::1]:9741" with port in place of the parsed one. */
void serve_addr_format(const serve_addr *addr, uint16_t port, char *out, size_t size);

/* The URL of path on this host: "http://127.0.0.1:9741/status" (an unspecified address: its loopback). */
void serve_addr_url(const serve_addr *addr, const char *path, char *out, size_t size);

/* ---- the HTTP endpoint (serve_http.c) ---------------------------------------------------------------- */

/* What the endpoint reports beside the runtime's stats; set before it starts, read by its thread. */
typedef struct serve_state {
  capstore *cs;
  const capstore_config *cfg;
  const char *config_path;
  const char *store;   /* "dir:PATH" or "s3:ENDPOINT/BUCKET" (no credential) */
  const char *catalog; /* "sqlite:PATH" or "clickhouse:URL" (no credential, query or fragment) */
  char listen[80];     /* the bound address: written once, before listen_ready */
  atomic_bool listen_ready;
  long pid;
  uint64_t started_ns; /* capstore_clock_ns at start */
  atomic_bool closing;
  serve_log *log;
} serve_state;

typedef struct serve_http serve_http;

/*
 * Serves /metrics, /status and /healthz on addr from a thread of its own;
 * *bound_port gets the port bound (addr's, or the one chosen for port 0).
 * 0, or -1 with err.
 */
int serve_http_start(serve_http **out, const serve_addr *addr, serve_state *state, uint16_t *bound_port, char *err,
                     size_t err_size);

/* Stops the endpoint (connections in progress are cut) and frees it. NULL is a no-op. */
void serve_http_stop(serve_http *http);

/* The /status document: the stats object with the daemon's fields first. Heap text (free), or NULL. */
char *serve_status_json(serve_state *state);

#endif

/*
 * The HTTP endpoint of capstore serve, on libmicrohttpd's own thread:
 *   GET /metrics   the runtime's stats as Prometheus text exposition 0.0.4
 *   GET /status    the stats as one JSON object, the daemon's fields first
 *   GET /healthz   "ok" while the process serves (and while it closes)
 * HEAD as GET; another method on these paths is 405, another path 404.
 * Each answer is made from the runtime's stats at the time of the request
 * (capstore_stats_* take the runtime's mutex for a copy; nothing here waits
 * on the service).
 */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <microhttpd.h>

#include "serve.h"

#define CONNECTIONS_MAX 32u
#define CONNECTION_TIMEOUT_S 10u
#define STATS_BYTES_FIRST 16384u
#define STATS_TRIES_MAX 4u /* the stats grow between two calls only by a few digits */

/* libmicrohttpd's messages logged per window at most (a client flood must not flood the log). */
#define MESSAGES_PER_WINDOW 20u
#define MESSAGE_WINDOW_NS (60ull * 1000 * 1000 * 1000)

struct serve_http {
  struct MHD_Daemon *daemon;
  serve_state *state;
  atomic_bool started;   /* MHD_start_daemon returned */
  char start_error[256]; /* what libmicrohttpd said while starting (its thread does not write it) */
  /* The message window (libmicrohttpd's one polling thread calls the logger: no lock needed). */
  uint64_t window_start_ns;
  uint32_t window_messages;
  uint64_t suppressed;
};

typedef size_t (*stats_text_fn)(capstore *cs, char *buf, size_t size);

/* The whole text of a capstore_stats_* call, in a buffer grown to its length; heap (free), or NULL. */
static char *stats_text(capstore *cs, stats_text_fn fn, size_t *length) {
  size_t size = STATS_BYTES_FIRST;
  for (uint32_t attempt = 0; attempt < STATS_TRIES_MAX; attempt++) {
    char *buf = malloc(size);
    if (buf == NULL) return NULL;
    size_t need = fn(cs, buf, size);
    if (need < size) return *length = need, buf;
    free(buf);
    size = need + 1024; /* room for the counters to grow a few digits before the next call */
  }
  return NULL;
}

static const char *role_name(cs_role role) {
  return role == CS_ROLE_PUBLISHER ? "publisher" : role == CS_ROLE_UPLOADER ? "uploader" : "capture";
}

char *serve_status_json(serve_state *state) {
  size_t length;
  char *text = stats_text(state->cs, capstore_stats_json, &length);
  if (text == NULL) return NULL;
  json_error_t error;
  json_t *stats = json_loadb(text, length, 0, &error);
  free(text);
  if (stats == NULL || !json_is_object(stats)) return json_decref(stats), NULL;
  uint64_t now = capstore_clock_ns();
  uint64_t uptime_s = now > state->started_ns ? (now - state->started_ns) / 1000000000u : 0;
  json_t *doc = json_pack("{s:s, s:I, s:s, s:I, s:s, s:s, s:s, s:s, s:s, s:s}", "state",
                          atomic_load(&state->closing) ? "closing" : "serving", "pid", (json_int_t)state->pid,
                          "version", capstore_version(), "uptime_s", (json_int_t)uptime_s, "config",
                          state->config_path, "role", role_name(state->cfg->role), "spool_dir", state->cfg->spool_dir,
                          "store", state->store, "catalog", state->catalog, "listen",
                          atomic_load(&state->listen_ready) ? state->listen : "");
  char *text_out = NULL;
  if (doc != NULL && json_object_update(doc, stats) == 0)
    text_out = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(doc);
  json_decref(stats);
  if (text_out == NULL) return NULL;
  size_t n = strlen(text_out);
  char *out = malloc(n + 2); /* ends with a newline, as a document on a terminal should */
  if (out != NULL) memcpy(out, text_out, n), memcpy(out + n, "\n", 2);
  free(text_out);
  return out;
}

/* Queues status with body (taken: freed by libmicrohttpd) and its content type; extra header when allow. */
static enum MHD_Result answer(struct MHD_Connection *connection, unsigned int status, char *body, size_t length,
                              const char *content_type, bool allow) {
  struct MHD_Response *response = MHD_create_response_from_buffer(length, body, MHD_RESPMEM_MUST_FREE);
  if (response == NULL) return free(body), MHD_NO;
  enum MHD_Result rc = MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (rc == MHD_YES && allow) rc = MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  if (rc == MHD_YES) rc = MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (rc == MHD_YES) rc = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return rc;
}

static enum MHD_Result answer_text(struct MHD_Connection *connection, unsigned int status, const char *text,
                                   bool allow) {
  char *body = strdup(text);
  if (body == NULL) return MHD_NO;
  return answer(connection, status, body, strlen(body), "text/plain; charset=utf-8", allow);
}

typedef enum route { ROUTE_NONE, ROUTE_METRICS, ROUTE_STATUS, ROUTE_HEALTHZ } route;

static route route_of(const char *url) {
  if (strcmp(url, "/metrics") == 0) return ROUTE_METRICS;
  if (strcmp(url, "/status") == 0) return ROUTE_STATUS;
  if (strcmp(url, "/healthz") == 0) return ROUTE_HEALTHZ;
  return ROUTE_NONE;
}

static enum MHD_Result serve_route(serve_http *http, struct MHD_Connection *connection, route r) {
  size_t length = 0;
  char *body = NULL;
  switch (r) {
  case ROUTE_METRICS:
    body = stats_text(http->state->cs, capstore_stats_prometheus, &length);
    if (body == NULL) break;
    return answer(connection, MHD_HTTP_OK, body, length, "text/plain; version=0.0.4; charset=utf-8", false);
  case ROUTE_STATUS:
    body = serve_status_json(http->state);
    if (body == NULL) break;
    return answer(connection, MHD_HTTP_OK, body, strlen(body), "application/json", false);
  case ROUTE_HEALTHZ: return answer_text(connection, MHD_HTTP_OK, "ok\n", false);
  case ROUTE_NONE:
  default: break;
  }
  assert(r != ROUTE_NONE && r != ROUTE_HEALTHZ);
  return answer_text(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", false);
}

static bool has_body(struct MHD_Connection *connection) {
  const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  const char *chunked = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  return chunked != NULL || (length != NULL && strspn(length, "0") != strlen(length));
}

/*
 * libmicrohttpd's request callback: called with the headers, then for each
 * part of a body, then once with none. An answer queued at the first call
 * ends the connection after it (libmicrohttpd reads no further): refusals
 * do that; a GET is answered at the last call so that the connection can
 * be kept alive for the next scrape. A GET carrying a body is refused at
 * once, so no body is ever read.
 */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **request_state) {
  static int headers_seen; /* its address marks a request whose headers were seen */
  (void)version;
  (void)upload_data;
  serve_http *http = cls;
  route r = route_of(url);
  if (r == ROUTE_NONE) return answer_text(connection, MHD_HTTP_NOT_FOUND, "not found: /metrics, /status, /healthz\n", false);
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
    return answer_text(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: GET or HEAD\n", true);
  if (*request_state == NULL) {
    if (has_body(connection)) return answer_text(connection, MHD_HTTP_BAD_REQUEST, "a GET has no body\n", false);
    *request_state = &headers_seen;
    return MHD_YES;
  }
  if (*upload_data_size != 0) return MHD_NO; /* has_body let no body through: cut the connection */
  return serve_route(http, connection, r);
}

/* libmicrohttpd's own messages (a bind refused, a connection it dropped): into the log. */
static void on_mhd_message(void *cls, const char *format, va_list args) __attribute__((format(printf, 2, 0)));
static void on_mhd_message(void *cls, const char *format, va_list args) {
  serve_http *http = cls;
  char text[256];
  vsnprintf(text, sizeof text, format, args);
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) text[--n] = '\0';
  if (!atomic_load(&http->started)) snprintf(http->start_error, sizeof http->start_error, "%s", text);
  /* At most MESSAGES_PER_WINDOW a minute; the next window's first says how many were left out. */
  uint64_t now = capstore_clock_ns();
  if (now - http->window_start_ns >= MESSAGE_WINDOW_NS) {
    if (http->suppressed > 0)
      SERVE_LOG(http->state->log, "warn", "http", SF_TEXT("message", "http messages left out of the log"),
                SF_U64("suppressed", http->suppressed));
    http->window_start_ns = now;
    http->window_messages = 0;
    http->suppressed = 0;
  }
  if (http->window_messages >= MESSAGES_PER_WINDOW) {
    http->suppressed++;
    return;
  }
  http->window_messages++;
  SERVE_LOG(http->state->log, "warn", "http", SF_TEXT("message", text));
}

int serve_http_start(serve_http **out, const serve_addr *addr, serve_state *state, uint16_t *bound_port, char *err,
                     size_t err_size) {
  serve_http *http = calloc(1, sizeof *http);
  if (http == NULL) return snprintf(err, err_size, "out of memory"), -1;
  http->state = state;
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
  if (addr->ipv6) flags |= MHD_USE_IPv6;
  errno = 0;
  /* The logger first: libmicrohttpd prints the options before it to stderr itself. */
  http->daemon = MHD_start_daemon(flags, addr->port, NULL, NULL, on_request, http, MHD_OPTION_EXTERNAL_LOGGER,
                                  on_mhd_message, http, MHD_OPTION_SOCK_ADDR, &addr->sa, MHD_OPTION_CONNECTION_LIMIT,
                                  (unsigned int)CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
                                  (unsigned int)CONNECTION_TIMEOUT_S, MHD_OPTION_END);
  if (http->daemon == NULL) {
    char where[80];
    serve_addr_format(addr, addr->port, where, sizeof where);
    snprintf(err, err_size, "listen on %s: %s", where,
             http->start_error[0] != '\0' ? http->start_error : errno != 0 ? strerror(errno) : "refused");
    free(http);
    return -1;
  }
  atomic_store(&http->started, true);
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_BIND_PORT);
  *bound_port = info != NULL && info->port != 0 ? info->port : addr->port;
  *out = http;
  return 0;
}

void serve_http_stop(serve_http *http) {
  if (http == NULL) return;
  MHD_stop_daemon(http->daemon);
  free(http);
}

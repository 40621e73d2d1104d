/*
 * The TCP fault switch (faults/tcp_switch.h): one acceptor thread and one
 * thread per connection, plain POSIX sockets. Every thread polls with a short
 * timeout and checks the switch's generation, so a mode change or a stop
 * reaches every connection within POLL_MS.
 */
#include "tcp_switch.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "capstore/types.h"

#define POLL_MS 20
#define PENDING_MAX 65536u
#define METHOD_MAX 16u
#define PREFIX_MAX 512u

typedef enum sw_mode { MODE_PASS = 0, MODE_CUT, MODE_STALL, MODE_HTTP, MODE_WAN } sw_mode;

typedef struct sw_rule {
  char method[METHOD_MAX];
  char prefix[PREFIX_MAX];
  uint32_t status; /* 0: hold */
  uint64_t delay_ns;        /* wan: one-way delay of each direction */
  uint64_t rate_bytes_s;    /* wan: each direction's rate, per connection */
} sw_rule;

typedef struct sw_conn {
  struct cs_tcp_switch *sw;
  pthread_t thread;
  int client;
  uint64_t gen;
  bool used;
  bool done;
} sw_conn;

struct cs_tcp_switch {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  pthread_t acceptor;
  int listen_fd;
  uint16_t port;
  uint16_t target;
  sw_mode mode;
  sw_rule rule;
  uint64_t gen;
  uint64_t applied_gen;
  int listen_error;
  bool stopping;
  cs_tcp_switch_stats stats;
  sw_conn conns[CS_TCP_SWITCH_CONNECTIONS_MAX];
};

static void close_reset(int fd) {
  if (fd < 0) return;
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
}

static int listen_on(uint16_t port, uint16_t *bound) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
    close(fd);
    return -1;
  }
  *bound = ntohs(addr.sin_port);
  return fd;
}

static int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static bool send_all(int fd, const char *bytes, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, bytes, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    len -= (size_t)n;
  }
  return true;
}

/* True when this connection must end: the mode changed since it was accepted, or the switch stops. */
static bool conn_stale(sw_conn *c) {
  pthread_mutex_lock(&c->sw->mu);
  bool stale = c->sw->stopping || c->sw->gen != c->gen;
  pthread_mutex_unlock(&c->sw->mu);
  return stale;
}

/* ---- the HTTP-aware client stream ---------------------------------------- */

typedef struct sw_stream {
  char pending[PENDING_MAX];
  size_t len;
  uint64_t body_left;
  bool raw; /* no more inspection: pass mode, chunked bodies, an oversized head */
} sw_stream;

static const char *find_head_end(const char *bytes, size_t len) {
  for (size_t i = 0; i + 4 <= len; i++)
    if (memcmp(bytes + i, "\r\n\r\n", 4) == 0) return bytes + i + 4;
  return NULL;
}

/* Content-Length of a head (0 when absent); *chunked for Transfer-Encoding. */
static uint64_t head_body_length(const char *head, size_t len, bool *chunked) {
  uint64_t value = 0;
  *chunked = false;
  for (const char *line = head; line < head + len;) {
    const char *eol = memchr(line, '\n', (size_t)(head + len - line));
    if (eol == NULL) break;
    size_t n = (size_t)(eol - line);
    if (n > 15 && strncasecmp(line, "Content-Length:", 15) == 0) {
      value = 0;
      for (const char *p = line + 15; p < eol; p++)
        if (*p >= '0' && *p <= '9') value = value * 10 + (uint64_t)(*p - '0');
    }
    if (n > 18 && strncasecmp(line, "Transfer-Encoding:", 18) == 0) *chunked = true;
    line = eol + 1;
  }
  return value;
}

static bool rule_matches(const sw_rule *rule, const char *head, size_t len) {
  size_t m = strlen(rule->method), p = strlen(rule->prefix);
  if (len < m + 1 + p || memcmp(head, rule->method, m) != 0 || head[m] != ' ') return false;
  return memcmp(head + m + 1, rule->prefix, p) == 0;
}

static void consume(sw_stream *s, size_t n) {
  assert(n <= s->len);
  memmove(s->pending, s->pending + n, s->len - n);
  s->len -= n;
}

/* Answers an injected status after reading the request body away; the connection then closes. */
static void answer_injected(sw_conn *c, sw_stream *s, const sw_rule *rule, bool is_head) {
  uint64_t left = s->body_left;
  size_t drop = left < s->len ? (size_t)left : s->len;
  consume(s, drop);
  left -= drop;
  char scratch[4096];
  while (left > 0 && !conn_stale(c)) {
    struct pollfd pfd = {c->client, POLLIN, 0};
    if (poll(&pfd, 1, POLL_MS) <= 0) continue;
    ssize_t n = recv(c->client, scratch, sizeof scratch, 0);
    if (n <= 0) return;
    left -= (uint64_t)n < left ? (uint64_t)n : left;
  }
  char body[96];
  int body_len = snprintf(body, sizeof body, "capstore tcp_switch: injected %u\n", rule->status);
  char head[256];
  int head_len = snprintf(head, sizeof head,
                          "HTTP/1.1 %u Injected\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                          "Connection: close\r\n\r\n",
                          rule->status, body_len);
  send_all(c->client, head, (size_t)head_len);
  if (!is_head) send_all(c->client, body, (size_t)body_len);
  pthread_mutex_lock(&c->sw->mu);
  c->sw->stats.injected++;
  pthread_mutex_unlock(&c->sw->mu);
  shutdown(c->client, SHUT_WR);
}

/* A held request: read and discard the client's bytes, never answer, until the mode changes. */
static void hold_request(sw_conn *c) {
  pthread_mutex_lock(&c->sw->mu);
  c->sw->stats.held++;
  pthread_mutex_unlock(&c->sw->mu);
  char scratch[4096];
  while (!conn_stale(c)) {
    struct pollfd pfd = {c->client, POLLIN, 0};
    if (poll(&pfd, 1, POLL_MS) <= 0) continue;
    if (recv(c->client, scratch, sizeof scratch, 0) <= 0) return;
  }
}

/*
 * Forwards what it can of the client's bytes upstream. Returns 1 to go on,
 * 0 when an injected answer ended the connection, -1 on a send error.
 */
static int stream_forward(sw_conn *c, sw_stream *s, const sw_rule *rule, int upstream) {
  while (s->len > 0) {
    if (s->raw || s->body_left > 0) {
      size_t n = s->raw || s->body_left > s->len ? s->len : (size_t)s->body_left;
      if (!send_all(upstream, s->pending, n)) return -1;
      consume(s, n);
      if (!s->raw) s->body_left -= n;
      continue;
    }
    const char *end = find_head_end(s->pending, s->len);
    if (end == NULL) {
      s->raw = s->len == sizeof s->pending; /* an oversized head: give up inspecting */
      return 1;
    }
    size_t head_len = (size_t)(end - s->pending);
    bool chunked = false;
    s->body_left = head_body_length(s->pending, head_len, &chunked);
    if (rule_matches(rule, s->pending, head_len)) {
      bool is_head = head_len >= 5 && memcmp(s->pending, "HEAD ", 5) == 0;
      consume(s, head_len);
      if (rule->status == 0) {
        hold_request(c);
        return 0;
      }
      answer_injected(c, s, rule, is_head);
      return 0;
    }
    if (!send_all(upstream, s->pending, head_len)) return -1;
    consume(s, head_len);
    s->raw = chunked;
  }
  return 1;
}

/* ---- connections --------------------------------------------------------- */

static void conn_stall(sw_conn *c) {
  char scratch[4096];
  while (!conn_stale(c)) {
    struct pollfd pfd = {c->client, POLLIN, 0};
    if (poll(&pfd, 1, POLL_MS) <= 0) continue;
    if (recv(c->client, scratch, sizeof scratch, 0) <= 0) return;
  }
}

/* Relays until either side closes; client bytes go through the stream (HTTP rules). */
static void conn_relay(sw_conn *c, sw_mode mode, const sw_rule *rule) {
  int upstream = connect_to(c->sw->target);
  if (upstream < 0) return;
  sw_stream *s = calloc(1, sizeof *s);
  if (s == NULL) {
    close_reset(upstream);
    return;
  }
  s->raw = mode == MODE_PASS;
  char scratch[16384];
  bool open = true;
  while (open && !conn_stale(c)) {
    struct pollfd pfd[2] = {{c->client, POLLIN, 0}, {upstream, POLLIN, 0}};
    if (poll(pfd, 2, POLL_MS) <= 0) continue;
    if (pfd[1].revents != 0) {
      ssize_t n = recv(upstream, scratch, sizeof scratch, 0);
      open = n > 0 && send_all(c->client, scratch, (size_t)n);
    }
    if (open && pfd[0].revents != 0) {
      size_t room = sizeof s->pending - s->len;
      ssize_t n = room == 0 ? 0 : recv(c->client, s->pending + s->len, room, 0);
      if (n > 0) s->len += (size_t)n;
      open = n > 0 && stream_forward(c, s, rule, upstream) == 1;
    }
  }
  free(s);
  if (conn_stale(c)) {
    close_reset(upstream);
  } else {
    close(upstream);
  }
}

/* ---- the WAN mode -------------------------------------------------------- */

#define WAN_PIPE_BYTES (1u << 20) /* bytes in flight one way: a full pipe stops reading (backpressure) */
#define WAN_SEGMENTS 512u
#define WAN_READ_MAX 16384u

/*
 * One direction of a shaped connection: a link of rate_bytes_s followed by
 * delay_ns of propagation. A segment read at t leaves the link at
 * max(t, link free) + len / rate and is delivered delay_ns later.
 */
typedef struct wan_pipe {
  char *buf; /* ring of WAN_PIPE_BYTES */
  size_t head, len;
  struct {
    size_t len;
    uint64_t at_ns;
  } seg[WAN_SEGMENTS];
  uint32_t seg_head, seg_count;
  uint64_t link_free_ns;
  bool eof;      /* the source closed: shut the destination's write side once drained */
  bool shut;
} wan_pipe;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool wan_room(const wan_pipe *p) { return p->len < WAN_PIPE_BYTES && p->seg_count < WAN_SEGMENTS; }

/* Reads what fits from fd into the pipe. False when fd closed or failed. */
static bool wan_read(wan_pipe *p, int fd, const sw_rule *rule, uint64_t extra_ns) {
  size_t tail = (p->head + p->len) % WAN_PIPE_BYTES;
  size_t room = WAN_PIPE_BYTES - p->len;
  size_t contiguous = WAN_PIPE_BYTES - tail < room ? WAN_PIPE_BYTES - tail : room;
  if (contiguous > WAN_READ_MAX) contiguous = WAN_READ_MAX;
  ssize_t n = recv(fd, p->buf + tail, contiguous, 0);
  if (n <= 0) return false;
  uint64_t now = mono_ns();
  uint64_t start = p->link_free_ns > now ? p->link_free_ns : now;
  p->link_free_ns = start + (uint64_t)n * 1000000000u / rule->rate_bytes_s;
  uint32_t at = (p->seg_head + p->seg_count) % WAN_SEGMENTS;
  p->seg[at].len = (size_t)n;
  p->seg[at].at_ns = p->link_free_ns + rule->delay_ns + extra_ns;
  p->seg_count++;
  p->len += (size_t)n;
  return true;
}

/* Delivers every segment due by now to fd. False on a send error. */
static bool wan_deliver(wan_pipe *p, int fd) {
  uint64_t now = mono_ns();
  while (p->seg_count > 0 && p->seg[p->seg_head].at_ns <= now) {
    size_t left = p->seg[p->seg_head].len;
    while (left > 0) {
      size_t run = WAN_PIPE_BYTES - p->head < left ? WAN_PIPE_BYTES - p->head : left;
      if (!send_all(fd, p->buf + p->head, run)) return false;
      p->head = (p->head + run) % WAN_PIPE_BYTES;
      p->len -= run;
      left -= run;
    }
    p->seg_head = (p->seg_head + 1) % WAN_SEGMENTS;
    p->seg_count--;
  }
  if (p->eof && p->seg_count == 0 && !p->shut) {
    shutdown(fd, SHUT_WR);
    p->shut = true;
  }
  return true;
}

/* Milliseconds until the pipe's next delivery (POLL_MS when none is queued). */
static int wan_wait_ms(const wan_pipe *p, int wait) {
  if (p->seg_count == 0) return wait;
  uint64_t now = mono_ns(), at = p->seg[p->seg_head].at_ns;
  int ms = at <= now ? 0 : (int)((at - now + 999999u) / 1000000u);
  return ms < wait ? ms : wait;
}

/*
 * Relays through two shaped pipes. The connection's first bytes wait one
 * more round trip (the handshake a real WAN costs; loopback's is free).
 */
static void conn_relay_wan(sw_conn *c, const sw_rule *rule) {
  int upstream = connect_to(c->sw->target);
  if (upstream < 0) return;
  wan_pipe *up = calloc(1, sizeof *up), *down = calloc(1, sizeof *down);
  char *bufs = malloc(2u * WAN_PIPE_BYTES);
  if (up == NULL || down == NULL || bufs == NULL) {
    free(up), free(down), free(bufs);
    close_reset(upstream);
    return;
  }
  up->buf = bufs;
  down->buf = bufs + WAN_PIPE_BYTES;
  bool first = true, ok = true;
  while (ok && !conn_stale(c) && !(up->shut && down->shut)) {
    struct pollfd pfd[2] = {{c->client, !up->eof && wan_room(up) ? POLLIN : 0, 0},
                            {upstream, !down->eof && wan_room(down) ? POLLIN : 0, 0}};
    int wait = wan_wait_ms(down, wan_wait_ms(up, POLL_MS));
    if (poll(pfd, 2, wait) < 0 && errno != EINTR) break;
    /* POLLHUP and POLLERR come even when POLLIN was not asked for: read only into a pipe with room. */
    if ((pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) && !up->eof && wan_room(up)) {
      if (!wan_read(up, c->client, rule, first ? 2 * rule->delay_ns : 0)) up->eof = true;
      first = false;
    }
    if ((pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) && !down->eof && wan_room(down))
      if (!wan_read(down, upstream, rule, 0)) down->eof = true;
    ok = wan_deliver(up, upstream) && wan_deliver(down, c->client);
  }
  free(up), free(down), free(bufs);
  if (conn_stale(c) || !ok) {
    close_reset(upstream);
  } else {
    close(upstream);
  }
}

static void *conn_main(void *arg) {
  sw_conn *c = arg;
  cs_tcp_switch *sw = c->sw;
  pthread_mutex_lock(&sw->mu);
  sw_mode mode = sw->mode;
  sw_rule rule = sw->rule;
  pthread_mutex_unlock(&sw->mu);
  if (mode == MODE_STALL) conn_stall(c);
  if (mode == MODE_PASS || mode == MODE_HTTP) conn_relay(c, mode, &rule);
  if (mode == MODE_WAN) conn_relay_wan(c, &rule);
  bool reset = conn_stale(c);
  if (reset) {
    close_reset(c->client);
  } else {
    close(c->client);
  }
  pthread_mutex_lock(&sw->mu);
  if (reset) sw->stats.reset++;
  c->done = true;
  pthread_cond_broadcast(&sw->cond);
  pthread_mutex_unlock(&sw->mu);
  return NULL;
}

/* ---- the acceptor -------------------------------------------------------- */

/* Joins finished connection threads. Called with the lock held. */
static void reap(cs_tcp_switch *sw) {
  for (uint32_t i = 0; i < CS_TCP_SWITCH_CONNECTIONS_MAX; i++) {
    sw_conn *c = &sw->conns[i];
    if (!c->used || !c->done) continue;
    pthread_join(c->thread, NULL);
    c->used = false;
  }
}

/* Applies a mode change: a cut closes the listener, any other mode listens again. Lock held. */
static void apply_mode(cs_tcp_switch *sw) {
  sw->listen_error = 0;
  if (sw->mode == MODE_CUT && sw->listen_fd >= 0) {
    close(sw->listen_fd);
    sw->listen_fd = -1;
  }
  if (sw->mode != MODE_CUT && sw->listen_fd < 0) {
    uint16_t bound = 0;
    sw->listen_fd = listen_on(sw->port, &bound);
    if (sw->listen_fd < 0) sw->listen_error = CS_E_IO;
  }
  sw->applied_gen = sw->gen;
  pthread_cond_broadcast(&sw->cond);
}

static void accept_one(cs_tcp_switch *sw, int fd) {
  sw->stats.accepted++;
  for (uint32_t i = 0; i < CS_TCP_SWITCH_CONNECTIONS_MAX; i++) {
    sw_conn *c = &sw->conns[i];
    if (c->used) continue;
    *c = (sw_conn){.sw = sw, .client = fd, .gen = sw->gen, .used = true, .done = false};
    if (pthread_create(&c->thread, NULL, conn_main, c) == 0) return;
    c->used = false;
    break;
  }
  close_reset(fd); /* the bound: no slot left */
}

static void *acceptor_main(void *arg) {
  cs_tcp_switch *sw = arg;
  pthread_mutex_lock(&sw->mu);
  while (!sw->stopping) {
    if (sw->applied_gen != sw->gen) apply_mode(sw);
    reap(sw);
    int lfd = sw->listen_fd;
    pthread_mutex_unlock(&sw->mu);
    struct pollfd pfd = {lfd, POLLIN, 0};
    int ready = poll(lfd >= 0 ? &pfd : NULL, lfd >= 0 ? 1 : 0, POLL_MS);
    int fd = ready > 0 ? accept(lfd, NULL, NULL) : -1;
    pthread_mutex_lock(&sw->mu);
    if (fd < 0) continue;
    if (sw->stopping || sw->gen != sw->applied_gen) {
      close_reset(fd); /* accepted under a mode that is being left */
      continue;
    }
    accept_one(sw, fd);
  }
  pthread_mutex_unlock(&sw->mu);
  return NULL;
}

/* ---- control ------------------------------------------------------------- */

int cs_tcp_switch_start(uint16_t listen_port, uint16_t target_port, cs_tcp_switch **out) {
  if (out == NULL || target_port == 0) return CS_E_INVALID_ARGUMENT;
  cs_tcp_switch *sw = calloc(1, sizeof *sw);
  if (sw == NULL) return CS_E_NO_MEMORY;
  sw->target = target_port;
  sw->listen_fd = listen_on(listen_port, &sw->port);
  if (sw->listen_fd < 0) {
    free(sw);
    return CS_E_IO;
  }
  pthread_mutex_init(&sw->mu, NULL);
  pthread_cond_init(&sw->cond, NULL);
  if (pthread_create(&sw->acceptor, NULL, acceptor_main, sw) != 0) {
    close(sw->listen_fd);
    pthread_mutex_destroy(&sw->mu);
    pthread_cond_destroy(&sw->cond);
    free(sw);
    return CS_E_IO;
  }
  *out = sw;
  return CS_E_OK;
}

uint16_t cs_tcp_switch_port(const cs_tcp_switch *sw) { return sw->port; }

static bool old_connections(const cs_tcp_switch *sw) {
  for (uint32_t i = 0; i < CS_TCP_SWITCH_CONNECTIONS_MAX; i++)
    if (sw->conns[i].used && !sw->conns[i].done && sw->conns[i].gen != sw->gen) return true;
  return false;
}

/* Sets the mode and waits until the acceptor applied it and every older connection ended. */
static int set_mode(cs_tcp_switch *sw, sw_mode mode, const sw_rule *rule) {
  pthread_mutex_lock(&sw->mu);
  sw->mode = mode;
  if (rule != NULL) sw->rule = *rule;
  sw->gen++;
  while (sw->applied_gen != sw->gen || old_connections(sw)) pthread_cond_wait(&sw->cond, &sw->mu);
  int err = sw->listen_error;
  pthread_mutex_unlock(&sw->mu);
  return err;
}

int cs_tcp_switch_pass(cs_tcp_switch *sw) { return set_mode(sw, MODE_PASS, NULL); }
int cs_tcp_switch_cut(cs_tcp_switch *sw) { return set_mode(sw, MODE_CUT, NULL); }
int cs_tcp_switch_stall(cs_tcp_switch *sw) { return set_mode(sw, MODE_STALL, NULL); }

/* The http mode with one rule; status 0 holds the matching requests. */
static int set_rule(cs_tcp_switch *sw, const char *method, const char *path_prefix, uint32_t status) {
  sw_rule rule;
  memset(&rule, 0, sizeof rule);
  if (method == NULL || path_prefix == NULL || method[0] == '\0' || strlen(method) >= sizeof rule.method ||
      strlen(path_prefix) >= sizeof rule.prefix)
    return CS_E_INVALID_ARGUMENT;
  memcpy(rule.method, method, strlen(method));
  memcpy(rule.prefix, path_prefix, strlen(path_prefix));
  rule.status = status;
  return set_mode(sw, MODE_HTTP, &rule);
}

int cs_tcp_switch_http(cs_tcp_switch *sw, const char *method, const char *path_prefix, uint32_t status) {
  if (status < 100 || status > 599) return CS_E_INVALID_ARGUMENT;
  return set_rule(sw, method, path_prefix, status);
}

int cs_tcp_switch_http_hold(cs_tcp_switch *sw, const char *method, const char *path_prefix) {
  return set_rule(sw, method, path_prefix, 0);
}

int cs_tcp_switch_wan(cs_tcp_switch *sw, uint64_t delay_ns, uint64_t rate_bytes_per_s) {
  if (sw == NULL || rate_bytes_per_s == 0 || delay_ns > 60ull * 1000000000u) return CS_E_INVALID_ARGUMENT;
  sw_rule rule;
  memset(&rule, 0, sizeof rule);
  rule.delay_ns = delay_ns;
  rule.rate_bytes_s = rate_bytes_per_s;
  return set_mode(sw, MODE_WAN, &rule);
}

void cs_tcp_switch_stats_get(cs_tcp_switch *sw, cs_tcp_switch_stats *out) {
  pthread_mutex_lock(&sw->mu);
  *out = sw->stats;
  pthread_mutex_unlock(&sw->mu);
}

void cs_tcp_switch_stop(cs_tcp_switch *sw) {
  if (sw == NULL) return;
  pthread_mutex_lock(&sw->mu);
  sw->stopping = true;
  pthread_mutex_unlock(&sw->mu);
  pthread_join(sw->acceptor, NULL);
  for (uint32_t i = 0; i < CS_TCP_SWITCH_CONNECTIONS_MAX; i++)
    if (sw->conns[i].used) pthread_join(sw->conns[i].thread, NULL);
  if (sw->listen_fd >= 0) close(sw->listen_fd);
  pthread_mutex_destroy(&sw->mu);
  pthread_cond_destroy(&sw->cond);
  free(sw);
}

/*
 * The TCP fault switch against a tiny HTTP server run by this test: each mode
 * (pass, cut, stall, http rules, hold) proved with a real client (libcurl), next to
 * the request the same mode lets through.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <curl/curl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "capstore/types.h"
#include "tcp_switch.h"

/* ---- a tiny HTTP server: answers 200 "hello <METHOD> <path>", keep-alive ---- */

typedef struct tiny_server {
  int fd;
  uint16_t port;
  pthread_t thread;
  volatile int stop;
} tiny_server;

static void tiny_serve(int fd) {
  char buf[65536];
  size_t len = 0;
  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 2000) <= 0) return;
    ssize_t n = recv(fd, buf + len, sizeof buf - len - 1, 0);
    if (n <= 0) return;
    len += (size_t)n;
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (end == NULL) continue;
    size_t body = 0;
    char *cl = strstr(buf, "Content-Length: ");
    if (cl != NULL && cl < end) body = (size_t)strtoul(cl + 16, NULL, 10);
    size_t need = (size_t)(end + 4 - buf) + body;
    while (len < need) {
      n = recv(fd, buf + len, sizeof buf - len - 1, 0);
      if (n <= 0) return;
      len += (size_t)n;
    }
    char method[16] = {0}, path[256] = {0};
    sscanf(buf, "%15s %255s", method, path);
    char text[400], answer[600];
    int tl = snprintf(text, sizeof text, "hello %s %s", method, path);
    int al = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", tl,
                      strcmp(method, "HEAD") == 0 ? "" : text);
    if (send(fd, answer, (size_t)al, MSG_NOSIGNAL) != al) return;
    memmove(buf, buf + need, len - need);
    len -= need;
  }
}

static void *tiny_main(void *arg) {
  tiny_server *s = arg;
  while (!s->stop) {
    struct pollfd pfd = {s->fd, POLLIN, 0};
    if (poll(&pfd, 1, 20) <= 0) continue;
    int fd = accept(s->fd, NULL, NULL);
    if (fd < 0) continue;
    tiny_serve(fd); /* one connection at a time is enough here */
    close(fd);
  }
  return NULL;
}

static void tiny_start(tiny_server *s) {
  memset(s, 0, sizeof *s);
  s->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  assert_int_equal(bind(s->fd, (struct sockaddr *)&addr, sizeof addr), 0);
  assert_int_equal(listen(s->fd, 16), 0);
  getsockname(s->fd, (struct sockaddr *)&addr, &len);
  s->port = ntohs(addr.sin_port);
  assert_int_equal(pthread_create(&s->thread, NULL, tiny_main, s), 0);
}

static void tiny_stop(tiny_server *s) {
  s->stop = 1;
  pthread_join(s->thread, NULL);
  close(s->fd);
}

/* ---- a client ------------------------------------------------------------ */

typedef struct answer {
  CURLcode rc;
  long status;
  char body[512];
  size_t len;
  double seconds;
} answer;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *user) {
  answer *a = user;
  size_t n = size * nmemb;
  size_t room = sizeof a->body - 1 - a->len;
  memcpy(a->body + a->len, ptr, n < room ? n : room);
  a->len += n < room ? n : room;
  a->body[a->len] = '\0';
  return n;
}

static CURL *g_curl; /* one handle: kept-alive connections are reused, as the adapters do */

static answer request(uint16_t port, const char *method, const char *path, const char *body, long timeout_ms) {
  answer a;
  memset(&a, 0, sizeof a);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
  CURL *c = g_curl;
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
  if (strcmp(method, "HEAD") == 0) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  if (body != NULL) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  a.rc = curl_easy_perform(c);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  a.seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
  return a;
}

typedef struct fixture {
  tiny_server server;
  cs_tcp_switch *sw;
  uint16_t port;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  tiny_start(&f->server);
  assert_int_equal(cs_tcp_switch_start(0, f->server.port, &f->sw), CS_E_OK);
  f->port = cs_tcp_switch_port(f->sw);
  assert_true(f->port != 0 && f->port != f->server.port);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  cs_tcp_switch_stop(f->sw);
  tiny_stop(&f->server);
  free(f);
  return 0;
}

static void test_pass_relays(void **state) {
  fixture *f = *state;
  answer a = request(f->port, "GET", "/x", NULL, 2000);
  assert_int_equal(a.rc, CURLE_OK);
  assert_int_equal(a.status, 200);
  assert_string_equal(a.body, "hello GET /x");
  a = request(f->port, "PUT", "/y", "payload", 2000); /* same kept-alive connection */
  assert_int_equal(a.status, 200);
  assert_string_equal(a.body, "hello PUT /y");
}

static void test_cut_refuses_then_pass_heals(void **state) {
  fixture *f = *state;
  assert_int_equal(request(f->port, "GET", "/a", NULL, 2000).status, 200);
  assert_int_equal(cs_tcp_switch_cut(f->sw), CS_E_OK);
  answer a = request(f->port, "GET", "/a", NULL, 2000);
  assert_int_equal(a.rc, CURLE_COULDNT_CONNECT);
  cs_tcp_switch_stats st;
  cs_tcp_switch_stats_get(f->sw, &st);
  assert_true(st.reset >= 1); /* the kept-alive connection was reset */
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
  a = request(f->port, "GET", "/b", NULL, 2000);
  assert_int_equal(a.rc, CURLE_OK);
  assert_string_equal(a.body, "hello GET /b");
}

static void test_stall_times_out(void **state) {
  fixture *f = *state;
  assert_int_equal(cs_tcp_switch_stall(f->sw), CS_E_OK);
  answer a = request(f->port, "POST", "/q", "SELECT 1", 300);
  assert_int_equal(a.rc, CURLE_OPERATION_TIMEDOUT);
  assert_true(a.seconds >= 0.25 && a.seconds < 2.0);
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
  assert_int_equal(request(f->port, "GET", "/z", NULL, 2000).status, 200);
}

static void test_http_rules(void **state) {
  fixture *f = *state;
  assert_int_equal(cs_tcp_switch_http(f->sw, "HEAD", "/bucket/", 403), CS_E_OK);
  answer a = request(f->port, "HEAD", "/bucket/k1", NULL, 2000);
  assert_int_equal(a.rc, CURLE_OK);
  assert_int_equal(a.status, 403);
  assert_int_equal(request(f->port, "HEAD", "/other/k1", NULL, 2000).status, 200); /* another prefix */
  a = request(f->port, "GET", "/bucket/k1", NULL, 2000);                          /* another method */
  assert_int_equal(a.status, 200);
  assert_string_equal(a.body, "hello GET /bucket/k1");
  assert_int_equal(cs_tcp_switch_http(f->sw, "PUT", "", 503), CS_E_OK);
  a = request(f->port, "PUT", "/bucket/k2", "some body bytes", 2000);
  assert_int_equal(a.rc, CURLE_OK);
  assert_int_equal(a.status, 503);
  assert_non_null(strstr(a.body, "injected 503"));
  a = request(f->port, "POST", "/bucket/k2", "body", 2000);
  assert_int_equal(a.status, 200);
  assert_string_equal(a.body, "hello POST /bucket/k2");
  /* A request that passes first, then one that matches, on one kept-alive connection. */
  assert_int_equal(request(f->port, "PUT", "/k3", "x", 2000).status, 503);
  cs_tcp_switch_stats st;
  cs_tcp_switch_stats_get(f->sw, &st);
  assert_int_equal(st.injected, 3);
  assert_int_equal(cs_tcp_switch_http(f->sw, "PUT", "", 99), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_tcp_switch_http(f->sw, "", "/", 503), CS_E_INVALID_ARGUMENT);
}

static void test_http_hold(void **state) {
  fixture *f = *state;
  assert_int_equal(cs_tcp_switch_http_hold(f->sw, "GET", "/held/"), CS_E_OK);
  answer a = request(f->port, "GET", "/held/k", NULL, 300);
  assert_int_equal(a.rc, CURLE_OPERATION_TIMEDOUT); /* read, never answered */
  assert_true(a.seconds >= 0.25 && a.seconds < 2.0);
  a = request(f->port, "GET", "/free/k", NULL, 2000);
  assert_int_equal(a.status, 200);
  assert_string_equal(a.body, "hello GET /free/k");
  cs_tcp_switch_stats st;
  cs_tcp_switch_stats_get(f->sw, &st);
  assert_int_equal(st.held, 1);
  assert_int_equal(st.injected, 0);
  assert_int_equal(cs_tcp_switch_http_hold(f->sw, "", "/"), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
  assert_int_equal(request(f->port, "GET", "/held/k", NULL, 2000).status, 200);
}

/*
 * The wan mode: a round trip costs 2 x the delay, a new connection one more
 * (its handshake), and a body waits its length over the rate; pass is fast again.
 */
static void test_wan_shapes(void **state) {
  fixture *f = *state;
  assert_int_equal(cs_tcp_switch_wan(f->sw, 40 * CS_MS_NS, 0), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_tcp_switch_wan(f->sw, 61 * CS_SEC_NS, 1000), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_tcp_switch_wan(f->sw, 40 * CS_MS_NS, 250000), CS_E_OK);
  answer a = request(f->port, "GET", "/first", NULL, 5000); /* handshake + request: 4 x 40 ms */
  assert_int_equal(a.status, 200);
  assert_string_equal(a.body, "hello GET /first");
  assert_true(a.seconds >= 0.160);
  assert_true(a.seconds < 0.160 + 1.0); /* generous: a shared machine is noisy */
  a = request(f->port, "GET", "/again", NULL, 5000); /* kept alive: one round trip */
  assert_string_equal(a.body, "hello GET /again");
  assert_true(a.seconds >= 0.080);
  assert_true(a.seconds < 0.080 + 1.0);
  static char body[50001];
  memset(body, 'b', sizeof body - 1);
  a = request(f->port, "PUT", "/big", body, 5000); /* 50,000 bytes at 250,000 B/s: 0.2 s, then the round trip */
  assert_string_equal(a.body, "hello PUT /big");
  assert_true(a.seconds >= 0.280);
  assert_true(a.seconds < 0.280 + 1.0);
  assert_int_equal(cs_tcp_switch_pass(f->sw), CS_E_OK);
  a = request(f->port, "GET", "/fast", NULL, 5000);
  assert_string_equal(a.body, "hello GET /fast");
  assert_true(a.seconds < 0.160); /* no wan delay: under one handshake */
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  g_curl = curl_easy_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pass_relays, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cut_refuses_then_pass_heals, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stall_times_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_hold, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wan_shapes, setup, teardown),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  curl_easy_cleanup(g_curl);
  curl_global_cleanup();
  return failed;
}

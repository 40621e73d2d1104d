/*
 * The ClickHouse adapter against peers where TLS fails, without a server
 * (issue 12, item 8). A TLS failure comes before any request byte leaves, so
 * the statement cannot have applied: the answer is REFUSED, its detail names
 * TLS and says nothing was sent. The peers, each a thread on 127.0.0.1:
 *   plain     a plain HTTP peer on an https:// url: the handshake fails;
 *   selfsign  a TLS peer whose certificate no CA signed: verification fails;
 *   swallow   the twin: a plain HTTP peer (allow_insecure) that reads the
 *             request and closes without answering: UNKNOWN, since the
 *             statement may have applied;
 *   vanish    a plain HTTP peer that answers one request on a kept-alive
 *             connection, reads the next one, then closes it and stops
 *             listening: libcurl retries on a fresh connection, which is
 *             refused. The statement reached the peer, so the answer is
 *             UNKNOWN, never REFUSED (it was REFUSED before the fix).
 * Each peer records what it received, so the test also shows that no
 * statement and no credential reached a peer that failed TLS. Last,
 * list_packs with no room answers without a statement (nobody listening).
 */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "capstore/clickhouse.h"

#define PASSWORD "tls-test-secret"

typedef enum peer_mode { PEER_PLAIN, PEER_SELFSIGN, PEER_SWALLOW, PEER_VANISH } peer_mode;

typedef struct peer {
  peer_mode mode;
  int listen_fd;
  uint16_t port;
  pthread_t thread;
  SSL_CTX *tls;
  /* What the peer saw: raw bytes on the socket, and for TLS whether the handshake completed. */
  char received[8192];
  size_t received_len;
  int handshake_ok;
  int requests; /* vanish: whole requests read */
} peer;

/* Reads what arrives within timeout_ms (or until the buffer is full or the client closes). */
static void peer_read_raw(peer *p, int fd, int timeout_ms) {
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  while (p->received_len < sizeof p->received && poll(&pfd, 1, timeout_ms) == 1) {
    ssize_t n = read(fd, p->received + p->received_len, sizeof p->received - p->received_len);
    if (n <= 0) return;
    p->received_len += (size_t)n;
    if (memmem(p->received, p->received_len, "\r\n\r\n", 4) != NULL && p->mode != PEER_PLAIN) return;
  }
}

/* Reads one whole request (headers, then Content-Length bytes of body); false when the client closed first. */
static bool peer_read_request(peer *p, int fd) {
  size_t start = p->received_len;
  for (;;) {
    const char *head = p->received + start;
    const char *end = memmem(head, p->received_len - start, "\r\n\r\n", 4);
    if (end != NULL) {
      const char *cl = memmem(head, (size_t)(end - head), "Content-Length: ", 16);
      size_t body = cl == NULL ? 0 : strtoul(cl + 16, NULL, 10);
      if (p->received_len - start >= (size_t)(end + 4 - head) + body) return true;
    }
    if (p->received_len == sizeof p->received) return false;
    ssize_t n = read(fd, p->received + p->received_len, sizeof p->received - p->received_len);
    if (n <= 0) return false;
    p->received_len += (size_t)n;
  }
}

/* Answers the first request, takes the second, then vanishes: connection closed and nobody listening. */
static void peer_vanish(peer *p, int fd) {
  static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  if (!peer_read_request(p, fd) || write(fd, ok, sizeof ok - 1) != (ssize_t)(sizeof ok - 1)) return;
  p->requests = 1;
  if (!peer_read_request(p, fd)) return;
  p->requests = 2;
  close(p->listen_fd);
  p->listen_fd = -1;
}

static void *peer_main(void *arg) {
  peer *p = arg;
  struct pollfd pfd = {.fd = p->listen_fd, .events = POLLIN};
  if (poll(&pfd, 1, 10000) != 1) return NULL;
  int fd = accept(p->listen_fd, NULL, NULL);
  if (fd < 0) return NULL;
  if (p->mode == PEER_SELFSIGN) {
    SSL *ssl = SSL_new(p->tls);
    SSL_set_fd(ssl, fd);
    p->handshake_ok = SSL_accept(ssl) == 1;
    if (p->handshake_ok) { /* never expected: read what the client would send */
      int n = SSL_read(ssl, p->received, (int)sizeof p->received);
      p->received_len = n > 0 ? (size_t)n : 0;
    }
    SSL_free(ssl);
  } else if (p->mode == PEER_VANISH) {
    peer_vanish(p, fd);
  } else {
    peer_read_raw(p, fd, p->mode == PEER_PLAIN ? 300 : 5000);
    if (p->mode == PEER_PLAIN) {
      static const char answer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      ssize_t w = write(fd, answer, sizeof answer - 1);
      (void)w;
    }
  }
  close(fd);
  return NULL;
}

/* A self-signed P-256 certificate for 127.0.0.1, made in memory. */
static SSL_CTX *tls_self_signed(void) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *cert = X509_new();
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  assert_non_null(key);
  assert_non_null(cert);
  assert_non_null(ctx);
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME *name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1", -1, -1, 0);
  X509_set_issuer_name(cert, name);
  assert_true(X509_sign(cert, key, EVP_sha256()) > 0);
  assert_int_equal(SSL_CTX_use_certificate(ctx, cert), 1);
  assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
  X509_free(cert);
  EVP_PKEY_free(key);
  return ctx;
}

static void peer_start(peer *p, peer_mode mode) {
  memset(p, 0, sizeof *p);
  p->mode = mode;
  p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(p->listen_fd >= 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  assert_int_equal(bind(p->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
  assert_int_equal(listen(p->listen_fd, 4), 0);
  assert_int_equal(getsockname(p->listen_fd, (struct sockaddr *)&addr, &len), 0);
  p->port = ntohs(addr.sin_port);
  if (mode == PEER_SELFSIGN) p->tls = tls_self_signed();
  assert_int_equal(pthread_create(&p->thread, NULL, peer_main, p), 0);
}

static void peer_stop(peer *p) {
  pthread_join(p->thread, NULL);
  if (p->listen_fd >= 0) close(p->listen_fd);
  SSL_CTX_free(p->tls);
}

/* PUBLISHes (fenced writes: whether one may have applied is what matters) to the peer; the last one's answer. */
static cs_catalog_result publish_to_n(const peer *p, bool https, int count) {
  char url[64];
  snprintf(url, sizeof url, "%s://127.0.0.1:%u/", https ? "https" : "http", (unsigned)p->port);
  cs_clickhouse_config cfg = {.url = url,
                              .user = "capstore",
                              .password = PASSWORD,
                              .table_prefix = "tls",
                              .connect_timeout_ns = 5 * CS_SEC_NS,
                              .request_timeout_ns = 10 * CS_SEC_NS,
                              .allow_insecure = !https};
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_OK);
  const cs_uuid lease = {{0xa0, 1, 2, 3, 4, 5, 0x70, 7, 0x88, 9, 10, 11, 12, 13, 14, 15}};
  cs_catalog_result res;
  for (int i = 0; i < count; i++) {
    memset(&res, 0, sizeof res);
    assert_int_equal(cat.ops->publish(cat.self, &lease, CS_SEC_NS, 3, 1, 1, &res), CS_E_OK);
    if (i + 1 < count) assert_int_equal(res.outcome, CS_OUT_OK);
  }
  cat.ops->close(cat.self);
  return res;
}

static cs_catalog_result publish_to(const peer *p, bool https) { return publish_to_n(p, https, 1); }

static void assert_refused_tls(const cs_catalog_result *res) {
  print_message("answer: outcome %d, detail '%s'\n", (int)res->outcome, res->detail);
  if (res->outcome != CS_OUT_REFUSED || strstr(res->detail, "TLS") == NULL ||
      strstr(res->detail, "nothing was sent") == NULL)
    fail_msg("outcome %d, detail '%s': want REFUSED naming TLS and that nothing was sent", (int)res->outcome,
             res->detail);
}

/* No statement and no credential in what the peer received. */
static void assert_nothing_sent(const peer *p) {
  assert_null(memmem(p->received, p->received_len, "INSERT", 6));
  assert_null(memmem(p->received, p->received_len, PASSWORD, sizeof PASSWORD - 1));
  assert_null(memmem(p->received, p->received_len, "X-ClickHouse", 12));
}

static void test_handshake_fails(void **state) {
  (void)state;
  peer p;
  peer_start(&p, PEER_PLAIN);
  cs_catalog_result res = publish_to(&p, true);
  peer_stop(&p);
  assert_refused_tls(&res);
  assert_true(p.received_len > 0); /* a ClientHello came, and only that */
  assert_int_equal((unsigned char)p.received[0], 0x16); /* a TLS handshake record */
  assert_nothing_sent(&p);
}

static void test_certificate_refused(void **state) {
  (void)state;
  peer p;
  peer_start(&p, PEER_SELFSIGN);
  cs_catalog_result res = publish_to(&p, true);
  peer_stop(&p);
  assert_refused_tls(&res);
  assert_false(p.handshake_ok);
  assert_int_equal(p.received_len, 0);
  if (strstr(res.detail, "certificate") == NULL) fail_msg("detail '%s' does not name the certificate", res.detail);
}

/* The twin: the request left and no answer came: the statement may have applied. */
static void test_sent_then_closed_is_unknown(void **state) {
  (void)state;
  peer p;
  peer_start(&p, PEER_SWALLOW);
  cs_catalog_result res = publish_to(&p, false);
  peer_stop(&p);
  assert_int_equal(res.outcome, CS_OUT_UNKNOWN);
  assert_null(strstr(res.detail, "nothing was sent"));
  assert_non_null(memmem(p.received, p.received_len, "POST ", 5)); /* it did leave */
}

/* A kept-alive connection took the statement and died; the retry found nobody: UNKNOWN, never REFUSED. */
static void test_sent_then_refused_is_unknown(void **state) {
  (void)state;
  peer p;
  peer_start(&p, PEER_VANISH);
  cs_catalog_result res = publish_to_n(&p, false, 2);
  peer_stop(&p);
  print_message("answer: outcome %d, detail '%s'\n", (int)res.outcome, res.detail);
  assert_int_equal(p.requests, 2); /* the second statement reached the peer */
  if (res.outcome != CS_OUT_UNKNOWN || strstr(res.detail, "nothing was sent") != NULL)
    fail_msg("outcome %d, detail '%s': want UNKNOWN (the statement left)", (int)res.outcome, res.detail);
}

/* A loopback port nobody listens on (bound and let go). */
static uint16_t unused_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

/* Its twin: nobody listening from the start: REFUSED, nothing was sent. */
static void test_refused_connect(void **state) {
  (void)state;
  peer p;
  memset(&p, 0, sizeof p);
  p.port = unused_port();
  cs_catalog_result res = publish_to(&p, false);
  if (res.outcome != CS_OUT_REFUSED || strstr(res.detail, "nothing was sent") == NULL)
    fail_msg("outcome %d, detail '%s': want REFUSED, nothing sent", (int)res.outcome, res.detail);
}

/*
 * list_packs with no room asks nothing: OK with no rows even where nobody
 * listens. Its twin, room for one row, goes out and is refused.
 */
static void test_list_packs_without_room_sends_nothing(void **state) {
  (void)state;
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%u/", (unsigned)unused_port());
  cs_clickhouse_config cfg = {.url = url, .user = "capstore", .password = PASSWORD, .table_prefix = "tls",
                              .connect_timeout_ns = 5 * CS_SEC_NS, .request_timeout_ns = 10 * CS_SEC_NS,
                              .allow_insecure = true};
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_OK);
  cs_inventory_row row;
  uint32_t count = 99;
  cs_catalog_result res;
  memset(&res, 0, sizeof res);
  res.outcome = CS_OUT_UNKNOWN;
  assert_int_equal(cat.ops->list_packs(cat.self, 5, NULL, NULL, 0, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(count, 0);
  count = 99;
  assert_int_equal(cat.ops->list_packs(cat.self, 5, NULL, &row, 1, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  assert_int_equal(count, 0);
  cat.ops->close(cat.self);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_handshake_fails),
      cmocka_unit_test(test_certificate_refused),
      cmocka_unit_test(test_sent_then_closed_is_unknown),
      cmocka_unit_test(test_sent_then_refused_is_unknown),
      cmocka_unit_test(test_refused_connect),
      cmocka_unit_test(test_list_packs_without_room_sends_nothing),
  };
  return cmocka_run_group_tests_name("clickhouse tls", tests, NULL, NULL);
}

/*
 * daemon.listen: "HOST:PORT" where HOST is an IPv4 literal, an IPv6 literal
 * in brackets, or localhost (127.0.0.1). No name is resolved: a daemon binds
 * exactly the address its configuration names, and `capstore status` finds it
 * there.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static int refuse(char *err, size_t err_size, const char *text, const char *why) {
  snprintf(err, err_size, "'%s': %s (HOST:PORT, HOST an IPv4 literal, [IPv6] or localhost)", text, why);
  return -1;
}

/* Splits text into host (brackets removed) and port text; -1 when the shape is wrong. */
static int split(const char *text, char *host, size_t host_size, const char **port, bool *bracketed) {
  const char *colon;
  *bracketed = text[0] == '[';
  if (*bracketed) {
    const char *close = strchr(text, ']');
    if (close == NULL || close[1] != ':') return -1;
    colon = close + 1;
    text++;
    if ((size_t)(close - text) >= host_size) return -1;
    memcpy(host, text, (size_t)(close - text));
    host[close - text] = '\0';
  } else {
    colon = strrchr(text, ':');
    if (colon == NULL || (size_t)(colon - text) >= host_size) return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    if (strchr(host, ':') != NULL) return -1; /* an IPv6 literal without brackets */
  }
  *port = colon + 1;
  return 0;
}

static int parse_port(const char *text, uint16_t *out) {
  if (text[0] == '\0' || strlen(text) > 5 || strspn(text, "0123456789") != strlen(text)) return -1;
  long port = strtol(text, NULL, 10);
  if (port > 65535) return -1;
  *out = (uint16_t)port;
  return 0;
}

int serve_addr_parse(const char *text, serve_addr *out, char *err, size_t err_size) {
  memset(out, 0, sizeof *out);
  char host[sizeof out->host];
  const char *port;
  bool bracketed;
  if (text == NULL || split(text, host, sizeof host, &port, &bracketed) != 0 || host[0] == '\0')
    return refuse(err, err_size, text != NULL ? text : "", "not HOST:PORT");
  if (parse_port(port, &out->port) != 0) return refuse(err, err_size, text, "the port must be a number 0..65535");
  if (!bracketed && strcmp(host, "localhost") == 0) snprintf(host, sizeof host, "127.0.0.1");
  if (bracketed) {
    struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&out->sa;
    if (inet_pton(AF_INET6, host, &sa->sin6_addr) != 1) return refuse(err, err_size, text, "not an IPv6 literal");
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(out->port);
    out->sa_len = sizeof *sa;
    out->ipv6 = true;
  } else {
    struct sockaddr_in *sa = (struct sockaddr_in *)&out->sa;
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
      return refuse(err, err_size, text, "not an IPv4 literal, [IPv6] or localhost (names are not resolved)");
    sa->sin_family = AF_INET;
    sa->sin_port = htons(out->port);
    out->sa_len = sizeof *sa;
  }
  memcpy(out->host, host, sizeof out->host);
  return 0;
}

void serve_addr_format(const serve_addr *addr, uint16_t port, char *out, size_t size) {
  assert(addr->host[0] != '\0');
  snprintf(out, size, addr->ipv6 ? "[%s]:%u" : "%s:%u", addr->host, (unsigned)port);
}

void serve_addr_url(const serve_addr *addr, const char *path, char *out, size_t size) {
  assert(path[0] == '/');
  const char *host = addr->host;
  if (addr->ipv6 && strcmp(host, "::") == 0) host = "::1";
  if (!addr->ipv6 && strcmp(host, "0.0.0.0") == 0) host = "127.0.0.1";
  snprintf(out, size, addr->ipv6 ? "http://[%s]:%u%s" : "http://%s:%u%s", host, (unsigned)addr->port, path);
}

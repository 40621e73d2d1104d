/*
 * faults/tcp_switch.h: the TCP fault switch. A small real TCP proxy on
 * 127.0.0.1 that a test puts between capstore and a live server, and flips
 * from the test process:
 *
 *   pass   relay bytes both ways
 *   cut    stop listening (new connections are refused) and reset every
 *          open connection
 *   stall  accept, read and discard, never answer
 *   http   answer `status` to requests whose method and path prefix match
 *          (e.g. 403 to HEAD under a prefix, 503 to PUT); relay the rest
 *   hold   the http mode's match, never answered: the request is read and
 *          left waiting while other connections are relayed
 *   wan    relay both ways through a shaped link: each direction of each
 *          connection at a rate, then a one-way delay; a connection's first
 *          bytes wait one more round trip (the handshake)
 *
 * Every mode change resets the connections opened before it, so a client's
 * kept-alive connection cannot carry the old mode on. Plain POSIX sockets and
 * threads; bounded: at most CS_TCP_SWITCH_CONNECTIONS_MAX open connections
 * (more are reset at accept).
 */
#ifndef CAPSTORE_TCP_SWITCH_H
#define CAPSTORE_TCP_SWITCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CS_TCP_SWITCH_CONNECTIONS_MAX 64u

typedef struct cs_tcp_switch cs_tcp_switch;

typedef struct cs_tcp_switch_stats {
  uint64_t accepted;  /* connections accepted */
  uint64_t injected;  /* requests answered by an http rule */
  uint64_t reset;     /* connections reset by a cut or a mode change */
  uint64_t held;      /* requests held by a hold rule */
} cs_tcp_switch_stats;

/*
 * Listens on 127.0.0.1 (port 0: any free port) and relays to
 * 127.0.0.1:target_port, starting in pass mode. Returns 0, or a negative
 * cs_err (CS_E_IO when a socket call fails, CS_E_NO_MEMORY).
 */
int cs_tcp_switch_start(uint16_t listen_port, uint16_t target_port, cs_tcp_switch **out);

/* The port the switch listens on (kept across cut and back). */
uint16_t cs_tcp_switch_port(const cs_tcp_switch *sw);

/* Each returns once the mode is in force: 0 or CS_E_IO (cannot listen again). */
int cs_tcp_switch_pass(cs_tcp_switch *sw);
int cs_tcp_switch_cut(cs_tcp_switch *sw);
int cs_tcp_switch_stall(cs_tcp_switch *sw);
/* method: "HEAD", "PUT", ... (exact); path_prefix: "" matches every path; status 100..599. */
int cs_tcp_switch_http(cs_tcp_switch *sw, const char *method, const char *path_prefix, uint32_t status);

/* Holds requests whose method and path prefix match (never answered); relays the rest. */
int cs_tcp_switch_http_hold(cs_tcp_switch *sw, const char *method, const char *path_prefix);

/*
 * The wan mode: every connection's bytes, each way, leave a link of
 * rate_bytes_per_s (per connection and direction) and arrive delay_ns later
 * (a round trip is 2 x delay_ns); at most 1 MiB in flight each way, then the
 * sender is held back. CS_E_INVALID_ARGUMENT for a zero rate or a delay over 60 s.
 */
int cs_tcp_switch_wan(cs_tcp_switch *sw, uint64_t delay_ns, uint64_t rate_bytes_per_s);

void cs_tcp_switch_stats_get(cs_tcp_switch *sw, cs_tcp_switch_stats *out);

/* Resets every connection, stops the threads and frees the switch. */
void cs_tcp_switch_stop(cs_tcp_switch *sw);

#ifdef __cplusplus
}
#endif

#endif

/*
 * base/sock.h - small socket helpers (in the spirit of Redis's anet).
 *
 * Functions returning int give a file descriptor (>= 0) or an mc_status
 * (< 0) and record the cause with mc_set_error.  Host strings may be names,
 * IPv4 or IPv6 literals ("[::1]" brackets are accepted).
 */
#ifndef MC_BASE_SOCK_H
#define MC_BASE_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "mooncake/status.h"

/* Split "host:port", "[v6]:port" or "host" into host (no brackets) and port.
 * A missing or invalid port yields def_port.  Returns false if host does not fit. */
bool mc_sock_split_hostport(const char *s, char *host, size_t host_len, uint16_t *port,
			    uint16_t def_port);

/* mc_sock_listen, _listen_range and _connect return a socket (>= 0) or a
 * negative mc_status; the rest return mc_status. */

/* Listen on port (0 = kernel's choice) of host: an IP address or a name
 * (resolved, IPv4 first; "[v6]" accepted), or every interface when host is
 * mc_sock_host_is_any (dual-stack [::] falling back to 0.0.0.0).
 * Non-blocking, SO_REUSEADDR. */
int mc_sock_listen_on(const char *host, uint16_t port, int backlog);
/* mc_sock_listen_on(NULL, ...): every interface. */
int mc_sock_listen(uint16_t port, int backlog);
/* Listen on a random free port in [min, max] of host (up to tries attempts). */
int mc_sock_listen_range_on(const char *host, uint16_t min, uint16_t max, int tries, int backlog);
int mc_sock_listen_range(uint16_t min, uint16_t max, int tries, int backlog);
/* NULL, "", "0.0.0.0", "::" and "[::]": every interface. */
bool mc_sock_host_is_any(const char *host);
/* host's first address (IPv4 first; "[v6]" accepted): MC_OK, or MC_ERR_DNS. */
mc_status mc_sock_resolve(const char *host, struct sockaddr_storage *ss_out, socklen_t *len_out);
/* 127.0.0.0/8, ::1 and IPv4-mapped 127/8. */
bool mc_sock_addr_is_loopback(const struct sockaddr_storage *ss);
/* The local port a socket is bound to, or 0. */
uint16_t mc_sock_local_port(int fd);

/* Connect to host:port with a timeout; returns a blocking or non-blocking
 * (nonblock) socket with TCP_NODELAY.  All getaddrinfo results are tried. */
int mc_sock_connect(const char *host, uint16_t port, int timeout_ms, bool nonblock);

mc_status mc_sock_set_nonblock(int fd, bool on);
mc_status mc_sock_set_nodelay(int fd);
mc_status mc_sock_set_bufsize(int fd, int bytes);
/* Acknowledge what came in now and leave delayed-ACK ("ping-pong") mode, as
 * after a short exchange the kernel would delay the ACKs of the bulk that
 * follows (docs/security.md, the handshake's cost).  Not TCP: no-op. */
void mc_sock_quickack(int fd);
/* Start the socket's congestion control afresh (its name set to reno and
 * back), so that a connection's first exchanges, a handshake's few small
 * frames, leave no bandwidth or round count behind for the bulk that
 * follows: with BBR they made one connection in a few leave start-up at
 * once and pace the bulk at the handshake's rate (docs/security.md).  Only
 * where the kernel lets any process choose both (tcp_allowed_congestion_
 * control), so it always gets its own back.  Not TCP: no-op. */
void mc_sock_restart_cc(int fd);

/* Blocking I/O of exactly len bytes with a deadline (absolute CLOCK_MONOTONIC
 * milliseconds, 0 = none), on a socket in either mode.  MC_OK, MC_ERR_TIMEOUT,
 * MC_ERR_CONN_CLOSED, MC_ERR_SOCKET. */
mc_status mc_sock_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ms);
mc_status mc_sock_read_full(int fd, void *buf, size_t len, uint64_t deadline_ms);
/* Wait until fd is ready for events (poll's POLLIN/POLLOUT), until the
 * absolute deadline_ms (0: none): MC_OK, MC_ERR_TIMEOUT or MC_ERR_SOCKET. */
mc_status mc_sock_wait(int fd, short events, uint64_t deadline_ms);

/* First UP, RUNNING, non-loopback IPv4 address of this host ("127.0.0.1" if none). */
void mc_sock_local_ip(char *buf, size_t len);

#endif

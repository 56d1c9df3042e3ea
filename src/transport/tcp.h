/* transport/tcp.h - what the engine needs from the TCP transport besides the vtable. */
#ifndef MC_TRANSPORT_TCP_H
#define MC_TRANSPORT_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mc_transport;

/* The peer object for host:port (created on first use, lives as long as the
 * transport).  proto_version is the target's tcp_proto_version; addrs are
 * the target's published paths ("mc_tcp_addrs", naddrs 0 = host only):
 * the peer's connections spread over them and fail over between them. */
void *mc_tcp_peer_get(struct mc_transport *tp, const char *host, uint16_t port, int proto_version,
		      const char *const *addrs, size_t naddrs);
/* True once a connection to the peer failed since the last refresh; the
 * engine then refetches the target's descriptor before the next submit. */
bool mc_tcp_peer_failed(void *peer);
void mc_tcp_peer_clear_failed(void *peer);
uint16_t mc_tcp_data_port(struct mc_transport *tp);
/* How many incoming data connections worker serves now (tests, diagnostics):
 * accepted connections are dealt to the workers round-robin. */
unsigned mc_tcp_worker_sconns(struct mc_transport *tp, unsigned worker);

#endif

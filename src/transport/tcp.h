/*
 * transport/tcp.h - what the TCP transport offers besides its vtable: a
 * look at its worker loads (tests, diagnostics) and its timeouts, which
 * the same-host transport, whose fallback it is, reuses.
 */
#ifndef MC_TRANSPORT_TCP_H
#define MC_TRANSPORT_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mc_transport;

/* MC_TCP_IO_TIMEOUT_MS and MC_TCP_CONNECT_TIMEOUT_MS of tp (a tcp transport). */
void mc_tcp_timeouts(struct mc_transport *tp, uint64_t *io_ms_out, uint64_t *connect_ms_out);
/* How many incoming data connections worker serves now (tests, diagnostics):
 * accepted connections are dealt to the workers round-robin. */
unsigned mc_tcp_worker_sconns(struct mc_transport *tp, unsigned worker);
/* Write payload bytes the target side of tp received through a
 * connection's staging buffer and copied into memory, rather than straight
 * into it (tests, diagnostics). */
uint64_t mc_tcp_staged_in(struct mc_transport *tp);

#endif

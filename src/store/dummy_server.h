/*
 * store/dummy_server.h - the daemon's side of dummy clients: what
 * mooncake_client runs beside its real client (docs/design.md, "Dummy
 * clients"; threads in docs/threads.md).
 *
 * The server listens on the abstract Unix socket
 * @mooncake_client_<port>.sock and serves each connected dummy from a
 * thread of its own, running the dummy's calls on the real client `real`
 * (borrowed: it must outlive the server) on the dummy's shared memory,
 * which it maps and registers with the real client's engine.
 */
#ifndef MC_STORE_DUMMY_SERVER_H
#define MC_STORE_DUMMY_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_store;
struct mc_dummy_server;

/* Most dummies served at once; more are refused at accept. */
#define MC_DUMMY_MAX_CONNS 256
/* Start serving on @mooncake_client_<port>.sock.  A dummy silent for
 * expire_ms (no request, no ping) is expired; 0 takes MC_DUMMY_EXPIRE_MS
 * (store/client_config.c, 10 s by default as upstream).  MC_ERR_SOCKET when the name is
 * taken (another daemon serves that port). */
mc_status mc_dummy_server_start(struct mc_store *real, uint16_t port, uint32_t expire_ms,
				struct mc_dummy_server **out);
/* Disconnect every dummy (their regions deregistered and unmapped), stop,
 * free.  NULL is a no-op. */
void mc_dummy_server_stop(struct mc_dummy_server *srv);
/* Dummies connected now. */
unsigned mc_dummy_server_conns(struct mc_dummy_server *srv);
/* Dummies expired for silence so far. */
uint64_t mc_dummy_server_expired(struct mc_dummy_server *srv);

/* The socket name's bytes after the leading NUL, for a port. */
void mc_dummy_socket_name(uint16_t port, char *out, size_t cap);

#endif

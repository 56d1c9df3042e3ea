/*
 * store/offload_client.h - a reader's connections to offload RPC servers
 * (store/offload_server.h): one pool per store client, connections kept
 * per endpoint ("host:port") between calls.
 *
 * A call sends one request and waits for its answer, connecting first
 * when no idle connection to the endpoint is kept; the whole exchange,
 * connect included, has one deadline (timeout_ms).  A connection kept
 * idle that turns out closed (the owner restarted, or dropped it idle) is
 * replaced once by a fresh one before the call fails.  A failed
 * connection is closed, never kept.  An owner that dies mid-call fails it
 * at once with MC_ERR_RPC_FAIL (its kernel closes the socket); one that
 * hangs fails it with MC_ERR_RPC_TIMEOUT at the deadline.
 *
 * Threads: any number of callers at once; each call uses its own
 * connection (taken out of the pool, or new), so calls to one owner run
 * side by side.
 */
#ifndef MC_STORE_OFFLOAD_CLIENT_H
#define MC_STORE_OFFLOAD_CLIENT_H

#include <stdint.h>

#include "mooncake/status.h"
#include "store/proto.h"

struct mc_offload_pool;

mc_status mc_offload_pool_new(int64_t timeout_ms, struct mc_offload_pool **out);
/* Closes every kept connection.  No call may be in flight.  NULL: no-op. */
void mc_offload_pool_free(struct mc_offload_pool *p);

/*
 * Request (type, body) to endpoint; on MC_OK *resp_out holds the decoded
 * answer (mc_store_msg_release).  An error answer returns its status with
 * its text in mc_last_error() and nothing to release; MC_ERR_RPC_FAIL
 * (cannot connect, connection lost), MC_ERR_RPC_TIMEOUT, MC_ERR_PROTOCOL
 * (an answer that does not decode or does not match), MC_ERR_INVALID_PARAMS
 * (a bad endpoint), the encoder's errors.
 */
mc_status mc_offload_pool_call(struct mc_offload_pool *p, const char *endpoint, uint16_t type,
			       const void *body, struct mc_store_msg *resp_out);

/* Connections opened since mc_offload_pool_new (tests: reuse). */
uint64_t mc_offload_pool_connects(struct mc_offload_pool *p);

#endif

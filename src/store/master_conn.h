/*
 * store/master_conn.h - the store client's connection to the master.
 *
 * One TCP connection carries every RPC of a client (docs/protocol.md,
 * "Store client <-> master protocol").  Any number of threads may call at
 * once: each request gets its own id and requests are pipelined on the one
 * socket.  A waiting caller reads the socket itself whenever no other
 * thread does, handing other callers' answers to them by id, so a lone
 * caller needs no thread hand-off; it polls the socket without sleeping
 * for MC_RPC_BUSY_POLL_US (default 50, 0 = off) before it blocks.  A
 * receiver thread only watches an idle connection for a hang-up.  A call
 * that does not get its answer by its deadline
 * (MC_RPC_TIMEOUT_MS, default 30000, negative = none) fails with
 * MC_ERR_RPC_TIMEOUT; the late answer is dropped when it arrives.  A
 * transport failure fails every call in flight with MC_ERR_RPC_FAIL and
 * the next call reconnects (connect deadline MC_RPC_CONNECT_TIMEOUT_MS),
 * sending ServiceReady first; a master of another protocol major version
 * is MC_ERR_INVALID_VERSION.
 *
 * Threads: every function may be called from any thread.
 * mc_master_conn_free may run while calls are in flight (they fail with
 * MC_ERR_RPC_FAIL and free waits until they have returned), but no call
 * may start once it has begun.
 */
#ifndef MC_STORE_MASTER_CONN_H
#define MC_STORE_MASTER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "store/proto.h"

struct mc_master_conn;

/*
 * Create a connection to addr ("host:port", port 50051 when absent) and
 * connect it (ServiceReady included).  addr may instead name an HA
 * cluster's coordinator, "etcd://h:p[;h:p...]" or "redis://host[:port]":
 * the connection then reads the leader view of MC_STORE_CLUSTER_ID
 * (meta/coord.h), connects to the leader, follows it after a failover
 * (each connect waits up to MC_MASTER_FAILOVER_TIMEOUT_MS for a leader
 * that answers) and repeats a call once on the new leader when the old
 * one refused it as not the leader, or when a read or ping lost its
 * answer with the connection.  MC_OK; MC_ERR_INVALID_PARAMS (bad
 * address); MC_ERR_RPC_FAIL or MC_ERR_RPC_TIMEOUT (master unreachable);
 * MC_ERR_INVALID_VERSION; MC_ERR_NOMEM.
 */
mc_status mc_master_conn_new(const char *addr, struct mc_master_conn **out);
/* Close the socket, stop the receiver, free.  NULL is a no-op. */
void mc_master_conn_free(struct mc_master_conn *c);

/*
 * Send request (type, body) and wait for its answer.  On MC_OK *resp_out
 * holds the decoded response body (release with mc_store_msg_release).
 * An error response returns its status (its text in mc_last_error) and
 * leaves nothing to release; so do MC_ERR_RPC_FAIL, MC_ERR_RPC_TIMEOUT,
 * MC_ERR_PROTOCOL (an answer that does not decode) and the encoder's
 * errors (MC_ERR_INVALID_KEY for an over-long key, ...).
 */
mc_status mc_master_conn_call(struct mc_master_conn *c, uint16_t type, const void *body,
			      struct mc_store_msg *resp_out);

/*
 * Work for the calling thread while a call's answer is on its way: fn(arg)
 * does one short piece (a few microseconds) and returns whether more is
 * left.  It runs between the request being written and its answer being
 * read, where the caller would otherwise poll or sleep, and no lock of c
 * is held; a piece that runs late delays the answer's pick-up by its own
 * length at most.  What is left when the answer comes stays to the
 * caller.  A put hashes its bytes there while its Start is in flight
 * (client_put.c).
 */
typedef bool (*mc_master_conn_work_fn)(void *arg);

/* mc_master_conn_call, with fn(arg) run while the answer is awaited (a
 * repeat of the call after a lost answer runs without it). */
mc_status mc_master_conn_call_working(struct mc_master_conn *c, uint16_t type, const void *body,
				      struct mc_store_msg *resp_out, mc_master_conn_work_fn fn,
				      void *arg);

/* Drop the connection now (calls in flight fail); the next call reconnects. */
void mc_master_conn_reset(struct mc_master_conn *c);

/* Who read the answers that reached their callers, since mc_master_conn_new. */
struct mc_master_conn_stats {
	uint64_t own;	      /* by the caller that waited for it */
	uint64_t for_others;  /* by a caller holding the read role for another */
	uint64_t by_receiver; /* by the receiver thread (after a hang-up) */
};
void mc_master_conn_stats(struct mc_master_conn *c, struct mc_master_conn_stats *out);
/* The protocol minor version of the master last connected to (0 before
 * the first connection): a request field appended in minor N is sent
 * only when this is at least N (docs/protocol.md, "Versions"). */
unsigned mc_master_conn_peer_minor(struct mc_master_conn *c);
/* Which connection this is: the number of connections made so far while
 * one is up, 0 while none is (lost, or not made yet).  What a call learnt
 * holds only while the epoch it was made under lasts (a new connection
 * may reach a restarted master, or a new leader). */
uint64_t mc_master_conn_epoch(struct mc_master_conn *c);

/*
 * With an HA address: when a connect reaches a leader other than the one
 * connected to before (a failover), fn(arg, &segs) lists the segments of
 * client client_id (mc_alloc'ed, c frees it; 0: none) and they are
 * remounted (ReMountSegment) on the new leader before the connection
 * carries any call, so that no call of this client finds its own objects
 * hidden there.  fn runs with the connection's send lock held: it must
 * not call into c, nor wait on a lock held across a call into c.  Set
 * before the first call.
 */
typedef size_t (*mc_master_conn_segments_fn)(void *arg, struct mc_store_segment **segs_out);
void mc_master_conn_on_new_leader(struct mc_master_conn *c, const struct mc_store_uuid *client_id,
				  mc_master_conn_segments_fn fn, void *arg);

/* Did a connect reach a leader of a new view (a failover) less than ms
 * ago?  (Other clients' objects stay hidden there until they remount.) */
bool mc_master_conn_new_leader_within(struct mc_master_conn *c, uint64_t ms);

/* How many times a connect reached a leader of a new view: a call that
 * spans a change of it may have reached a leader that never saw the
 * call's earlier steps (a put's Start). */
uint64_t mc_master_conn_leader_changes(struct mc_master_conn *c);

/* Count every call's round trip in m (client_metrics.h; NULL: none).  Set
 * before the first call; m must outlive c. */
struct mc_client_metrics;
void mc_master_conn_set_metrics(struct mc_master_conn *c, struct mc_client_metrics *m);

#endif

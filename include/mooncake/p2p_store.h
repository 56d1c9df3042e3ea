/*
 * mooncake/p2p_store.h - the master-less P2P store for checkpoints.
 *
 * Upstream's mooncake-p2p-store (Go) in C, with the same etcd layout, so
 * peers of either kind share one catalog (spec components.md 3).  An object
 * is a list of buffers in one process, split into shards of at most
 * max_shard_size bytes.  register() publishes it under
 * "mooncake/checkpoint/<name>" with this process as the "gold" holder of
 * every shard; get_replica() pulls every shard into the caller's buffers
 * with Transfer Engine READs from a holder (a random replica first, then
 * the replicas in order, then gold), then adds this process to every
 * shard's replica list, so later readers spread over more holders.  Every
 * catalog change is a compare-and-swap on the key's etcd mod_revision.
 * The data stays in the caller's memory, which must remain mapped and
 * unchanged until unregister() / delete_replica().
 *
 * Fixed against upstream (3.5): get_replica's re-check reads fresh
 * metadata and gives up after MC_P2P_PULL_ROUNDS rounds instead of looping;
 * the receiver's size list must equal the stored one; locations advertise
 * the engine's real name (host:rpc_port in P2PHANDSHAKE mode), not the
 * constructor argument; registrations are counted per range, so repeated
 * pulls never leak one.
 *
 * Errors (upstream sentinel -> status):
 *   ErrInvalidArgument   MC_ERR_INVALID_PARAMS
 *   ErrAddressOverlapped MC_ERR_ADDRESS_OVERLAPPED
 *   ErrPayloadOpened     MC_ERR_EXISTS (the name is open in this process)
 *   key already exists   MC_ERR_OBJECT_ALREADY_EXISTS
 *   ErrPayloadNotOpened  MC_ERR_NOT_FOUND (not open in this process)
 *   ErrPayloadNotFound   MC_ERR_OBJECT_NOT_FOUND (no such key in etcd)
 *   ErrTooManyRetries    MC_ERR_TRANSFER_FAIL (every attempt at a shard failed)
 *   ErrTransferEngine    the engine's status
 * and MC_ERR_METADATA / MC_ERR_ETCD_TRANSACTION_FAIL from etcd.
 * mc_last_error() says what failed.
 *
 * Threads: any function from any thread; one object name is operated on by
 * one call at a time (a second call on an open name gets MC_ERR_EXISTS).
 * mc_p2p_store_free must not race with other calls.
 */
#ifndef MOONCAKE_P2P_STORE_H
#define MOONCAKE_P2P_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_p2p_store;

/* Shard attempts: max(MC_P2P_MIN_ATTEMPTS, replicas + gold) per shard. */
#define MC_P2P_MIN_ATTEMPTS 3
/* Full pulls get_replica makes while holders leave under it. */
#define MC_P2P_PULL_ROUNDS 3
#define MC_P2P_KEY_PREFIX  "mooncake/checkpoint/"

struct mc_p2p_params {
	/* etcd endpoints of the catalog: "etcd://h:p[,h:p]" or "h:p[,h:p]" */
	const char *metadata_uri;
	/* "host:port" as upstream's localServerName: the host is the address
	 * peers reach; in etcd mode the whole string names the segment */
	const char *local_server_name;
	/* the engine's metadata: NULL = metadata_uri (upstream), or
	 * "P2PHANDSHAKE" (the engine is then named host:rpc_port) */
	const char *te_metadata_uri;
	/* "tcp" (NULL) or "rdma" (falls back to tcp without a device) */
	const char *protocol;
};

struct mc_p2p_info {
	char *name;
	uint64_t max_shard_size;
	uint64_t total_size;
	uint64_t *size_list;
	size_t nsizes;
};

MC_API mc_status mc_p2p_store_new(const struct mc_p2p_params *params, struct mc_p2p_store **out);
/* Leaves: takes what is still open here out of the catalog (as unregister and
 * delete_replica do; upstream's Close leaves its entries, so readers kept
 * trying a holder that was gone), then unregisters the memory and stops the
 * engine. */
MC_API void mc_p2p_store_free(struct mc_p2p_store *s);
/* The engine's real segment name, which the catalog advertises. */
MC_API const char *mc_p2p_store_local_name(const struct mc_p2p_store *s);

/* Publish n buffers as name.  max_shard_size: a power of two <= 4 GiB.
 * location: where the memory is ("cpu:0"; NULL = "cpu:0").  force_create
 * overwrites an existing key, dropping its holders (a new version of the
 * object makes the old replicas stale). */
MC_API mc_status mc_p2p_register(struct mc_p2p_store *s, const char *name, void *const *addrs,
				 const uint64_t *sizes, size_t n, uint64_t max_shard_size,
				 const char *location, bool force_create);
/* Withdraw this process as gold; the key goes when no holder is left. */
MC_API mc_status mc_p2p_unregister(struct mc_p2p_store *s, const char *name);
/* Objects whose names start with prefix, in key order (malloc'ed array). */
MC_API mc_status mc_p2p_list(struct mc_p2p_store *s, const char *prefix,
			     struct mc_p2p_info **infos_out, size_t *n_out);
MC_API void mc_p2p_infos_free(struct mc_p2p_info *infos, size_t n);
/* Pull name into n buffers whose sizes equal the stored size list, then
 * become a replica holder. */
MC_API mc_status mc_p2p_get_replica(struct mc_p2p_store *s, const char *name, void *const *addrs,
				    const uint64_t *sizes, size_t n);
/* Withdraw this process as a replica holder; the key goes when none is left. */
MC_API mc_status mc_p2p_delete_replica(struct mc_p2p_store *s, const char *name);

#ifdef __cplusplus
}
#endif

#endif

/*
 * meta/coord.h - a leader election record ("view") in a coordinator:
 * etcd or Redis.  The master's election (master/ha.c) campaigns and renews
 * through it; store clients read it to find the leader.
 *
 * The view names the leader's RPC address and a view version that only
 * grows (spec store.md 6.2):
 *   etcd   the key holds "host:port" under a lease of ttl seconds, created
 *          only if absent (a txn comparing create_revision with 0); the
 *          version is the key's create revision.
 *   redis  a hash with leader_address, view_version and owner_token, taken
 *          only if absent and renewed by a Lua script that checks the
 *          owner token; the version is INCR of "<key>:version", which
 *          outlives the hash.
 * Connection strings: "etcd://h:p[;h:p...]" (or ',' separated) and
 * "redis://[[user]:password@]host[:port]", as meta/meta.h's.
 *
 * Threads: one struct mc_coord is used by one thread at a time.
 */
#ifndef MC_META_COORD_H
#define MC_META_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_coord;

struct mc_coord_view {
	bool present;	  /* a leader holds the key */
	char addr[256];	  /* its RPC address "host:port" */
	uint64_t version; /* its view version */
};

/*
 * Open a coordinator client for uri (etcd:// or redis://) and prove it
 * answers; every request is bounded by timeout_ms.  MC_ERR_INVALID_PARAMS
 * for another scheme or a bad uri, MC_ERR_METADATA (the endpoints and their
 * reasons in mc_last_error) when nothing answers.
 */
mc_status mc_coord_open(const char *uri, long timeout_ms, struct mc_coord **out);
void mc_coord_close(struct mc_coord *c);

/* The key of a cluster's view: "mooncake-store/<cluster_id>/master_view". */
void mc_coord_view_key(const char *cluster_id, char *buf, size_t len);

/*
 * Try to become the leader: write addr under key with a ttl_s lifetime
 * only if no one holds it.  MC_OK with *won_out (and *version_out when
 * won); an error when the coordinator failed (nothing is held then).
 */
mc_status mc_coord_campaign(struct mc_coord *c, const char *key, const char *addr, int64_t ttl_s,
			    bool *won_out, uint64_t *version_out);
/*
 * Extend what campaign won by its ttl.  MC_OK with *held_out false when it
 * is gone (expired, taken by another); an error when the coordinator did
 * not answer (the caller counts its own deadline).
 */
mc_status mc_coord_renew(struct mc_coord *c, bool *held_out);
/* Give up what campaign won (best effort: it expires anyway). */
void mc_coord_resign(struct mc_coord *c);
/* Read the view under key.  MC_OK (present false when nobody holds it). */
mc_status mc_coord_read(struct mc_coord *c, const char *key, struct mc_coord_view *out);
/*
 * End the view under key if it is still the one of version (its leader is
 * known to be gone): etcd revokes its lease, Redis deletes the hash, so the
 * key is free at once and its holder's next renewal finds it gone.  MC_OK
 * with *ended_out false when another view (or none) holds the key.
 */
mc_status mc_coord_evict(struct mc_coord *c, const char *key, uint64_t version, bool *ended_out);

/* ---- the backends (coord.c dispatches; their files implement) ---- */
struct mc_coord_ops {
	mc_status (*campaign)(struct mc_coord *c, const char *key, const char *addr, int64_t ttl_s,
			      bool *won_out, uint64_t *version_out);
	mc_status (*renew)(struct mc_coord *c, bool *held_out);
	void (*resign)(struct mc_coord *c);
	mc_status (*read)(struct mc_coord *c, const char *key, struct mc_coord_view *out);
	mc_status (*evict)(struct mc_coord *c, const char *key, uint64_t version, bool *ended_out);
	void (*close)(struct mc_coord *c);
};

struct mc_coord {
	const struct mc_coord_ops *ops;
};

mc_status mc_coord_etcd_open(const char *uri, long timeout_ms, struct mc_coord **out);
mc_status mc_coord_redis_open(const char *uri, long timeout_ms, struct mc_coord **out);

#endif

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
 * Candidates.  Before a master campaigns it posts how far its copy of the
 * leader's log reaches, so the most caught-up one can be chosen
 * (master/ha.c).  One entry per master, named by its RPC address, alive
 * for ttl seconds unless posted again:
 *   etcd   the key "<view key>/candidates/<addr>" under a lease of the
 *          coordinator client's own (kept alive by each post); listed with
 *          a prefix read.
 *   redis  the field <addr> of the hash "<view key>/candidates", its value
 *          "<deadline ms> <entry>"; the deadline is the server's TIME plus
 *          ttl, set and checked by Lua scripts, so a listing drops the
 *          lapsed fields in the same atomic step.
 * The entry's bytes (mc_coord_cand_encode) are "1 <view> <seq> <electing>"
 * in decimal; mc_coord_cand_decode checks every byte of them.
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

/* ---- candidates ---- */

#define MC_COORD_CAND_LEN 80 /* an encoded entry, NUL included, at most */
#define MC_COORD_CAND_MAX 64 /* entries a listing returns at most */

struct mc_coord_cand {
	char addr[256]; /* its RPC address "host:port" */
	uint64_t view;	/* the view whose leader's log it holds (0: none) */
	uint64_t seq;	/* that log applied through */
	bool electing;	/* it saw the view end and is choosing a leader */
};

/* Is a more caught up than b (view, then seq; the lower address on a tie)? */
bool mc_coord_cand_better(const struct mc_coord_cand *a, const struct mc_coord_cand *b);
/* The entry's bytes (not the address) into buf[MC_COORD_CAND_LEN]. */
void mc_coord_cand_encode(const struct mc_coord_cand *c, char *buf, size_t len);
/*
 * Decode an entry read from the coordinator: name (len nlen) is the
 * address it is posted under, val (len vlen) its bytes.  Pure; every byte
 * is checked: MC_ERR_METADATA with a message for an empty, too long or
 * unprintable name, and for bytes other than "1 <view> <seq> <0|1>"
 * (decimal u64s without sign, spaces or leading zeros).
 */
mc_status mc_coord_cand_decode(const char *name, size_t nlen, const char *val, size_t vlen,
			       struct mc_coord_cand *out);
/* The key entries are posted under: "<view key>/candidates". */
void mc_coord_cand_key(const char *view_key, char *buf, size_t len);
/*
 * Post (or refresh) this master's entry under the view key, alive for
 * ttl_s from now unless posted again.  An error when the coordinator
 * failed.
 */
mc_status mc_coord_cand_post(struct mc_coord *c, const char *key, const struct mc_coord_cand *me,
			     int64_t ttl_s);
/*
 * The live entries under the view key (at most max, the rest ignored),
 * in no order.  Entries that do not decode are skipped with a warning
 * (another version's, or damaged): they never stop an election.
 */
mc_status mc_coord_cand_list(struct mc_coord *c, const char *key, struct mc_coord_cand *out,
			     size_t max, size_t *n_out);
/* Remove this master's entry (best effort: it lapses anyway). */
void mc_coord_cand_drop(struct mc_coord *c, const char *key, const char *addr);

/* ---- the backends (coord.c dispatches; their files implement) ---- */
struct mc_coord_ops {
	mc_status (*campaign)(struct mc_coord *c, const char *key, const char *addr, int64_t ttl_s,
			      bool *won_out, uint64_t *version_out);
	mc_status (*renew)(struct mc_coord *c, bool *held_out);
	void (*resign)(struct mc_coord *c);
	mc_status (*read)(struct mc_coord *c, const char *key, struct mc_coord_view *out);
	mc_status (*evict)(struct mc_coord *c, const char *key, uint64_t version, bool *ended_out);
	mc_status (*cand_post)(struct mc_coord *c, const char *key, const char *addr,
			       const char *entry, int64_t ttl_s);
	/* calls add(arg, name, nlen, val, vlen) for each live entry */
	mc_status (*cand_list)(struct mc_coord *c, const char *key,
			       void (*add)(void *arg, const char *name, size_t nlen,
					   const char *val, size_t vlen),
			       void *arg);
	void (*cand_drop)(struct mc_coord *c, const char *key, const char *addr);
	void (*close)(struct mc_coord *c);
};

struct mc_coord {
	const struct mc_coord_ops *ops;
};

mc_status mc_coord_etcd_open(const char *uri, long timeout_ms, struct mc_coord **out);
mc_status mc_coord_redis_open(const char *uri, long timeout_ms, struct mc_coord **out);

#endif

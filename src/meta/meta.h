/*
 * meta/meta.h - metadata store backends behind one small vtable.
 *
 * A backend stores opaque values under string keys: get/put/del.  The
 * backend is chosen from the connection string's scheme:
 *   http://, https://   meta_http.c (libcurl; the whole URI is the base URL,
 *                       requests are METHOD <base>?key=<percent-encoded key>;
 *                       only HTTP 200 is success, 404 on GET = not found)
 *   mem://<name>        meta_mem.c: an in-process table shared by every
 *                       client opened with the same name (tests, and engines
 *                       embedded in one process)
 *   etcd://h:p[,h:p...], bare h:p[,h:p...]
 *                       meta_etcd.c (etcd v3 JSON gateway; entries live under
 *                       a per-client lease kept alive by a thread)
 *   redis://[[user]:password@]host[:port]
 *                       meta_redis.c (hiredis; every key is SET with a TTL
 *                       that a thread refreshes, and re-SET if it vanished)
 * "P2PHANDSHAKE" is handled by the engine, not here.
 *
 * Threads: a struct mc_meta may be used from many threads at once.
 */
#ifndef MC_META_META_H
#define MC_META_META_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_meta;

struct mc_meta_ops {
	const char *name;
	mc_status (*get)(struct mc_meta *m, const char *key, char **value_out, size_t *len_out);
	mc_status (*put)(struct mc_meta *m, const char *key, const char *value, size_t len);
	mc_status (*del)(struct mc_meta *m, const char *key);
	void (*resync)(struct mc_meta *m);
	void (*close)(struct mc_meta *m);
};

struct mc_meta {
	const struct mc_meta_ops *ops;
	char *uri;
};

/* Open a backend for uri.  MC_ERR_INVALID_PARAMS for an unknown scheme,
 * MC_ERR_NOT_SUPPORTED for a scheme whose backend is not built. */
mc_status mc_meta_open(const char *uri, struct mc_meta **out);
void mc_meta_close(struct mc_meta *m);

/* MC_OK with a malloc'ed, NUL-terminated value; MC_ERR_NOT_FOUND when the
 * key is absent; MC_ERR_METADATA (or MC_ERR_TIMEOUT) when the service fails. */
static inline mc_status mc_meta_get(struct mc_meta *m, const char *key, char **value_out,
				    size_t *len_out)
{
	return m->ops->get(m, key, value_out, len_out);
}

/* MC_OK; MC_ERR_EXISTS when the service refuses to overwrite (an rpc_meta key
 * held by another engine); MC_ERR_METADATA when the service fails. */
static inline mc_status mc_meta_put(struct mc_meta *m, const char *key, const char *value,
				    size_t len)
{
	return m->ops->put(m, key, value, len);
}

/* MC_OK, or MC_ERR_NOT_FOUND when absent. */
static inline mc_status mc_meta_del(struct mc_meta *m, const char *key)
{
	return m->ops->del(m, key);
}

/* Put back, now, the keys this client wrote that the service lost (a
 * restarted in-memory server); blocks for the requests it makes.  The http
 * backend also does this periodically; for the others, whose keys come
 * back on their own (lease, TTL refresh), it does nothing. */
static inline void mc_meta_resync(struct mc_meta *m)
{
	m->ops->resync(m);
}

/* The resync of backends that need none. */
void mc_meta_no_resync(struct mc_meta *m);

/* Backend constructors (used by mc_meta_open and by tests). */
mc_status mc_meta_http_open(const char *uri, struct mc_meta **out);
mc_status mc_meta_mem_open(const char *uri, struct mc_meta **out);
/* Grants the client's lease, so an unreachable etcd fails here with
 * MC_ERR_METADATA naming every endpoint tried. */
mc_status mc_meta_etcd_open(const char *uri, struct mc_meta **out);
/* Connects, authenticates and PINGs, so an unreachable or refusing Redis
 * fails here with MC_ERR_METADATA naming the endpoint; a bad uri or
 * MC_REDIS_DB_INDEX is MC_ERR_INVALID_PARAMS. */
mc_status mc_meta_redis_open(const char *uri, struct mc_meta **out);

/*
 * etcd only (MC_ERR_INVALID_PARAMS for another backend): keys that live
 * outside the client's lease, read with their revisions and changed by
 * compare-and-swap.  Used by the P2P store's catalog (src/p2p/), whose keys
 * outlive the process that wrote them.
 */
struct mc_etcd_kv {
	char *key;   /* NUL-terminated */
	char *value; /* NUL-terminated; len bytes */
	size_t len;
	int64_t mod_revision;
};

/* Keys in [key, range_end) (range_end NULL: key alone) into a malloc'ed
 * array (NULL, 0 when none); revision_out (may be NULL) is the store's
 * revision at the read. */
mc_status mc_meta_etcd_range(struct mc_meta *m, const char *key, const char *range_end,
			     struct mc_etcd_kv **kvs_out, size_t *n_out, int64_t *revision_out);
void mc_etcd_kvs_free(struct mc_etcd_kv *kvs, size_t n);
/* Put key (no lease) iff its mod_revision is still mod_revision, or, with
 * mod_revision 0, iff it does not exist.  MC_ERR_ETCD_TRANSACTION_FAIL when
 * the compare failed.  A request repeated on another member after a lost
 * answer may have been applied: callers make their changes idempotent. */
mc_status mc_meta_etcd_cas_put(struct mc_meta *m, const char *key, const char *value, size_t len,
			       int64_t mod_revision);
/* Delete key iff its mod_revision is still mod_revision (> 0). */
mc_status mc_meta_etcd_cas_del(struct mc_meta *m, const char *key, int64_t mod_revision);
/* Put key with no lease and no compare (overwrites). */
mc_status mc_meta_etcd_put_unleased(struct mc_meta *m, const char *key, const char *value,
				    size_t len);

#endif

/*
 * store/dummy_client.h - a dummy client's side (docs/design.md, "Dummy
 * clients"): the connection to a mooncake_client daemon that a struct
 * mc_store set up with mc_store_setup_dummy forwards its calls to.  Only
 * the store client's files include this; the API is mooncake/store.h.
 *
 * Every call may come from any thread; one request is on the socket at a
 * time (the connection's lock).  Calls fail with MC_ERR_RPC_FAIL while the
 * daemon is unreachable; the pinger reconnects once a second.
 */
#ifndef MC_STORE_DUMMY_CLIENT_H
#define MC_STORE_DUMMY_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "mooncake/store.h"

struct mc_dummy;

/* How long a dummy waits for one answer before it gives up on the daemon. */
#define MC_DUMMY_CALL_TIMEOUT_MS 300000
/* the handshake with the daemon when a cluster secret is set (base/auth_hs.h) */
#define MC_DUMMY_AUTH_TIMEOUT_MS 5000

mc_status mc_dummy_open(const char *server_address, uint64_t local_buffer_size,
			struct mc_dummy **out);
void mc_dummy_close(struct mc_dummy *d);
/* 0 connected, 2 the daemon is unreachable. */
int mc_dummy_health(struct mc_dummy *d);
/* The daemon's segment name (as its HELLO said). */
const char *mc_dummy_hostname(struct mc_dummy *d);

mc_status mc_dummy_register(struct mc_dummy *d, void *addr, size_t len);
mc_status mc_dummy_unregister(struct mc_dummy *d, void *addr);
mc_status mc_dummy_check(struct mc_dummy *d, const void *buf, size_t len);

/* Zero-copy puts and gets of n keys, each from (into) nbufs[i] buffers. */
mc_status mc_dummy_put_multi(struct mc_dummy *d, const char *const *keys, void *const *const *bufs,
			     const size_t *const *lens, const size_t *nbufs, size_t n,
			     const struct mc_store_config *cfg, bool upsert, mc_status *results);
mc_status mc_dummy_get_multi(struct mc_dummy *d, const char *const *keys, void *const *const *bufs,
			     const size_t *const *lens, const size_t *nbufs, size_t n,
			     int64_t *results);
/* Copy-based calls, staged through the local buffer. */
mc_status mc_dummy_put_copy(struct mc_dummy *d, const char *key, const void *const *parts,
			    const size_t *lens, size_t nparts, const struct mc_store_config *cfg,
			    bool upsert);
int64_t mc_dummy_get_copy(struct mc_dummy *d, const char *key, mc_store_alloc_fn alloc, void *ctx);
/* Copy-based batches: staged in the local buffer, as many keys per
 * request as fit in it at once (a value larger than the whole buffer is
 * that key's MC_ERR_INVALID_PARAMS); the first failure in key order. */
mc_status mc_dummy_put_copy_batch(struct mc_dummy *d, const char *const *keys,
				  const void *const *values, const size_t *lens, size_t n,
				  const struct mc_store_config *cfg, bool upsert,
				  mc_status *results);
mc_status mc_dummy_get_copy_batch(struct mc_dummy *d, const char *const *keys, size_t n,
				  mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results);
/* EXIST, GET_SIZE, REMOVE (type from store/dummy_proto.h) of n keys. */
mc_status mc_dummy_keys(struct mc_dummy *d, uint16_t type, const char *const *keys, size_t n,
			bool force, int64_t *results);
struct mc_dummy_req;
struct mc_dummy_resp;
/* Any request (store/dummy_proto.h) and its answer, which the caller
 * releases (mc_dummy_resp_release) whatever the status. */
mc_status mc_dummy_call(struct mc_dummy *d, const struct mc_dummy_req *q,
			struct mc_dummy_resp *resp);
/* The same with q's config set from cfg (NULL: one replica). */
mc_status mc_dummy_call_cfg(struct mc_dummy *d, struct mc_dummy_req *q,
			    const struct mc_store_config *cfg, struct mc_dummy_resp *resp);
/* The same with q's items made of n keys and their buffers, located in
 * the registered regions (a buffer outside them names no region: the
 * daemon refuses it). */
mc_status mc_dummy_call_bufs(struct mc_dummy *d, struct mc_dummy_req *q, const char *const *keys,
			     void *const *const *bufs, const size_t *const *lens,
			     const size_t *nbufs, size_t n, struct mc_dummy_resp *resp);
/* remove_by_regex (pattern) or remove_all (pattern NULL). */
int64_t mc_dummy_remove_many(struct mc_dummy *d, const char *pattern, bool force);

#endif

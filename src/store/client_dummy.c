/*
 * store/client_dummy.c - what a struct mc_store set up as a dummy client
 * does in the store's public calls (mooncake/store.h): the checks a real
 * client makes before asking anyone, then the call through the daemon
 * (store/dummy_client.c).  The public calls in client_xfer.c branch here
 * when s->dummy is set; nothing here touches the master or the engine.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/log.h"
#include "store/client_int.h"
#include "store/dummy_client.h"

mc_status mc_store_dummy_put_copy(struct mc_store *s, const char *key, const void *const *parts,
				  const size_t *lens, size_t nparts,
				  const struct mc_store_config *cfg, bool upsert)
{
	mc_status rc = mc_store_check_key(key);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, true, 1);
	if (rc == MC_OK && nparts && (!parts || !lens))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "put: NULL parts");
	if (rc != MC_OK)
		return rc;
	return mc_dummy_put_copy(s->dummy, key, parts, lens, nparts, cfg, upsert);
}

mc_status mc_store_dummy_put_one(struct mc_store *s, const char *key, const void *buf, size_t len,
				 const struct mc_store_config *cfg, bool upsert)
{
	void *const bv[1] = {(void *)buf};
	void *const *bufs[1] = {bv};
	const size_t *lp[1] = {&len};
	size_t one = 1;
	mc_status res, rc = mc_store_check_key(key);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, true, 1);
	if (rc != MC_OK || len == 0)
		return rc; /* len 0: a no-op success, as upstream */
	return mc_dummy_put_multi(s->dummy, &key, bufs, lp, &one, 1, cfg, upsert, &res);
}

int64_t mc_store_dummy_get_one(struct mc_store *s, const char *key, void *buf, size_t cap)
{
	void *const bv[1] = {buf};
	void *const *bufs[1] = {bv};
	const size_t *lp[1] = {&cap};
	size_t one = 1;
	int64_t r;
	mc_status rc = mc_store_check_key(key);
	if (rc != MC_OK)
		return rc;
	rc = mc_dummy_get_multi(s->dummy, &key, bufs, lp, &one, 1, &r);
	return rc == MC_OK ? r : rc;
}

/* Checks common to the dummy's batch calls: arrays present, keys and
 * buffer counts sane.  MC_OK or the failure (every result set to it). */
mc_status mc_store_dummy_multi_check(const char *const *keys, void *const *const *bufs,
				     const size_t *const *lens, const size_t *nbufs, size_t n,
				     mc_status *sts, int64_t *r64)
{
	mc_status rc = MC_OK;
	if (n && (!keys || !bufs || !lens))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch: NULL arrays");
	for (size_t i = 0; rc == MC_OK && i < n; i++) {
		rc = mc_store_check_key(keys[i]);
		if (rc == MC_OK && nbufs && nbufs[i] && (!bufs[i] || !lens[i]))
			rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch: NULL buffer list");
	}
	for (size_t i = 0; rc != MC_OK && i < n; i++) {
		if (sts)
			sts[i] = rc;
		if (r64)
			r64[i] = rc;
	}
	return rc;
}

/* One buffer per key: as pointer lists of one. */
static mc_status mc_store_dummy_flat(struct mc_store *s, const char *const *keys, void *const *bufs,
				     const size_t *lens, size_t n,
				     const struct mc_store_config *cfg, bool put, bool upsert,
				     mc_status *sts, int64_t *r64)
{
	void *const **bl = mc_calloc(n + 1, sizeof(*bl));
	const size_t **ll = mc_calloc(n + 1, sizeof(*ll));
	size_t *nb = mc_calloc(n + 1, sizeof(*nb));
	mc_status rc = MC_OK;

	if (!bl || !ll || !nb)
		rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
	else if (n && (!keys || !bufs || !lens))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch: NULL arrays");
	if (rc == MC_OK) {
		for (size_t i = 0; i < n; i++) {
			bl[i] = &bufs[i];
			ll[i] = &lens[i];
			nb[i] = 1;
		}
		rc = mc_store_dummy_multi_check(keys, bl, ll, nb, n, sts, r64);
	}
	if (rc == MC_OK && n)
		rc = put ? mc_dummy_put_multi(s->dummy, keys, bl, ll, nb, n, cfg, upsert, sts)
			 : mc_dummy_get_multi(s->dummy, keys, bl, ll, nb, n, r64);
	mc_free(bl);
	mc_free(ll);
	mc_free(nb);
	return rc;
}

mc_status mc_store_dummy_put_flat(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *lens, size_t n, const struct mc_store_config *cfg,
				  bool upsert, mc_status *results)
{
	return mc_store_dummy_flat(s, keys, bufs, lens, n, cfg, true, upsert, results, NULL);
}

mc_status mc_store_dummy_get_flat(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *caps, size_t n, int64_t *results)
{
	return mc_store_dummy_flat(s, keys, bufs, caps, n, NULL, false, false, NULL, results);
}

/* Copy-based batches go key by key through the local buffer: one request
 * each, the results as a real client's batch gives them. */
mc_status mc_store_dummy_put_batch(struct mc_store *s, const char *const *keys,
				   const void *const *values, const size_t *lens, size_t n,
				   const struct mc_store_config *cfg, bool upsert,
				   mc_status *results)
{
	mc_status rc = mc_store_check_config(cfg, true, n);
	if (rc == MC_OK && n && (!keys || !values || !lens))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "put_batch: NULL arrays");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		struct mc_store_config one = {.replica_num = 1};
		mc_status r;
		if (cfg) {
			one = *cfg;
			if (cfg->n_group_ids == n)
				one.group_id = cfg->group_ids[i];
			one.group_ids = NULL;
			one.n_group_ids = 0;
		}
		r = mc_store_dummy_put_copy(s, keys[i], &values[i], &lens[i], 1, &one, upsert);
		if (results)
			results[i] = r;
		if (rc == MC_OK && r != MC_OK)
			rc = r;
	}
	return rc;
}

struct nth {
	mc_store_batch_alloc_fn alloc;
	void *ctx;
	size_t i;
};

static void *alloc_nth(void *ctx, size_t size)
{
	struct nth *a = ctx;
	return a->alloc(a->ctx, a->i, size);
}

mc_status mc_store_dummy_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
					 mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results)
{
	mc_status rc = MC_OK;
	if (n && (!keys || !alloc || !results)) {
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_get: NULL arrays or allocator");
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		struct nth a = {alloc, ctx, i};
		results[i] = mc_store_check_key(keys[i]);
		if (results[i] == MC_OK)
			results[i] = mc_dummy_get_copy(s->dummy, keys[i], alloc_nth, &a);
		if (rc == MC_OK && results[i] < 0)
			rc = (mc_status)results[i];
	}
	return rc;
}

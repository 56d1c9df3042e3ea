/*
 * store/client_calls.c - the store client's public put and get calls:
 * their argument checks, the value calls (put, put_parts, upsert and
 * their batch forms, straight from the caller's memory), the zero-copy
 * calls (put_from, get_into and their batch and multi-buffer forms), and
 * the timed entry points, which count every call in the client's metrics.
 * The puts themselves are client_put.c, the gets client_get.c, the
 * transfers client_xfer.c, ranged reads client_ranges.c; a dummy client's
 * calls go to client_dummy.c.
 *
 * Threads: any number of callers at once; nothing here takes a lock.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"
#include "store/dummy_client.h"

#include "base/alloc.h"
#include "base/log.h"
#include "store/client_metrics.h"

/* ---- value calls ------------------------------------------------------------------------- */

/*
 * put/put_parts/upsert: the value's parts go to the engine as they are, one
 * request per part and replica, without a copy through the local buffer.
 * The engine's transports read the initiator's memory wherever it is (TCP
 * sends from it, the same-host and local paths copy from it); a transport
 * that can only send registered memory stages unregistered memory itself,
 * as te/stage.c does for device memory.  The call is synchronous, so the
 * parts need to stay valid only while it runs.
 */
static mc_status put_value(struct mc_store *s, const char *key, const void *const *parts,
			   const size_t *lens, size_t nparts, const struct mc_store_config *cfg,
			   bool upsert)
{
	uint64_t len = 0;
	mc_status rc;

	rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, true, 1);
	if (rc != MC_OK)
		return rc;
	for (size_t i = 0; i < nparts; i++) {
		if (lens[i] && !parts[i])
			return mc_set_error(MC_ERR_INVALID_PARAMS, "NULL part with a length");
		len += lens[i];
	}
	if (len == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put of an empty value");
	return mc_store_put_one(s, key, (void *const *)(uintptr_t)parts, lens, nparts, len, cfg,
				upsert);
}

static mc_status untimed_put(struct mc_store *s, const char *key, const void *value, size_t len,
			     const struct mc_store_config *config)
{
	return put_value(s, key, &value, &len, 1, config, false);
}

static mc_status untimed_put_parts(struct mc_store *s, const char *key, const void *const *parts,
				   const size_t *lens, size_t nparts,
				   const struct mc_store_config *config)
{
	if ((!parts || !lens) && nparts)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put_parts: NULL arrays");
	return put_value(s, key, parts, lens, nparts, config, false);
}

static mc_status untimed_upsert(struct mc_store *s, const char *key, const void *value, size_t len,
				const struct mc_store_config *config)
{
	return put_value(s, key, &value, &len, 1, config, true);
}

static mc_status untimed_upsert_parts(struct mc_store *s, const char *key, const void *const *parts,
				      const size_t *lens, size_t nparts,
				      const struct mc_store_config *config)
{
	if ((!parts || !lens) && nparts)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "upsert_parts: NULL arrays");
	return put_value(s, key, parts, lens, nparts, config, true);
}

/* The up-front check of one key of a batch put with one buffer per key. */
static mc_status one_value_check(const char *key, const void *buf, size_t len)
{
	mc_status rc = mc_store_check_key(key);
	if (rc == MC_OK && (!len || !buf))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "empty value for %s", key);
	return rc;
}

/* The call's own bookkeeping could not be allocated: every key not
 * refused up front fails with MC_ERR_NOMEM, the others keep their code. */
static void results_nomem(mc_status *results, size_t n)
{
	for (size_t i = 0; results && i < n; i++)
		if (results[i] == MC_OK)
			results[i] = MC_ERR_NOMEM;
}

/* put_batch/upsert_batch: as put_value, every value straight from the
 * caller's memory, all keys in one BatchPutStart, one engine batch and one
 * BatchPutEnd. */
static mc_status put_batch_values(struct mc_store *s, const char *const *keys,
				  const void *const *values, const size_t *lens, size_t n,
				  const struct mc_store_config *config, bool upsert,
				  mc_status *results)
{
	mc_status *res = results, rc;
	void *const **bufs = NULL;
	const size_t **blens = NULL;
	size_t *nbufs = NULL;
	uint64_t *totals = NULL;

	rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_config(config, true, n);
	if (rc == MC_OK && n && (!keys || !values || !lens))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "put_batch: NULL arrays");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	if (!res)
		res = mc_calloc(n, sizeof(*res));
	for (size_t i = 0; res && i < n; i++)
		res[i] = one_value_check(keys[i], values[i], lens[i]);
	bufs = mc_calloc(n, sizeof(*bufs));
	blens = mc_calloc(n, sizeof(*blens));
	nbufs = mc_calloc(n, sizeof(*nbufs));
	totals = mc_calloc(n, sizeof(*totals));
	if (!res || !bufs || !blens || !nbufs || !totals) {
		results_nomem(results, n);
		rc = MC_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		bufs[i] = (void *const *)(uintptr_t)&values[i];
		blens[i] = &lens[i];
		nbufs[i] = 1;
		totals[i] = lens[i];
	}
	mc_store_put_many(s, keys, bufs, blens, nbufs, totals, n, config, upsert, res);
	rc = mc_store_first_failure(res, n);
out:
	if (res != results)
		mc_free(res);
	mc_free(bufs);
	mc_free(blens);
	mc_free(nbufs);
	mc_free(totals);
	return rc;
}

static mc_status untimed_put_batch(struct mc_store *s, const char *const *keys,
				   const void *const *values, const size_t *lens, size_t n,
				   const struct mc_store_config *config, mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_put_batch(s, keys, values, lens, n, config, false, results);
	return put_batch_values(s, keys, values, lens, n, config, false, results);
}

static mc_status untimed_upsert_batch(struct mc_store *s, const char *const *keys,
				      const void *const *values, const size_t *lens, size_t n,
				      const struct mc_store_config *config, mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_put_batch(s, keys, values, lens, n, config, true, results);
	return put_batch_values(s, keys, values, lens, n, config, true, results);
}

static int64_t untimed_get_alloc(struct mc_store *s, const char *key, mc_store_alloc_fn alloc,
				 void *ctx)
{
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK && !alloc)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_alloc: NULL allocator");
	if (rc != MC_OK)
		return rc;
	return mc_store_get_one(s, key, NULL, NULL, 0, 0, alloc, ctx);
}

static mc_status put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			  const struct mc_store_config *cfg, bool upsert)
{
	void *bufs[1] = {(void *)(uintptr_t)buf};
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, true, 1);
	if (rc != MC_OK)
		return rc;
	if (len == 0)
		return MC_OK; /* upstream: a no-op */
	if (!buf)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put_from: NULL buffer");
	rc = mc_store_check_buffer(s, buf, len);
	if (rc != MC_OK)
		return rc;
	return mc_store_put_one(s, key, bufs, &len, 1, len, cfg, upsert);
}

static mc_status untimed_put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
				  const struct mc_store_config *config)
{
	return put_from(s, key, buf, len, config, false);
}

static mc_status untimed_upsert_from(struct mc_store *s, const char *key, const void *buf,
				     size_t len, const struct mc_store_config *config)
{
	return put_from(s, key, buf, len, config, true);
}

static int64_t untimed_get_into(struct mc_store *s, const char *key, void *buf, size_t cap)
{
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK && !buf && cap)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_into: NULL buffer");
	if (rc == MC_OK)
		rc = mc_store_check_dest(s, buf, cap);
	if (rc != MC_OK)
		return rc;
	return mc_store_get_one(s, key, &buf, &cap, 1, cap, NULL, NULL);
}

/* The argument checks the batch zero-copy calls share. */
static mc_status batch_begin(struct mc_store *s, const char *const *keys, const void *arrays,
			     size_t n, const struct mc_store_config *cfg)
{
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, false, n);
	if (rc == MC_OK && n && (!keys || !arrays))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch call: NULL arrays");
	return rc;
}

static mc_status batch_put_multi(struct mc_store *s, const char *const *keys,
				 void *const *const *bufs, const size_t *const *lens,
				 const size_t *nbufs, size_t n, const struct mc_store_config *cfg,
				 bool upsert, mc_status *results)
{
	mc_status *res = results;
	uint64_t *totals;
	mc_status rc;

	if (!res)
		res = mc_calloc(n ? n : 1, sizeof(*res));
	totals = mc_calloc(n ? n : 1, sizeof(*totals));
	for (size_t i = 0; i < n; i++) {
		mc_status st = mc_store_check_key(keys[i]);
		uint64_t total = 0;
		for (size_t b = 0; st == MC_OK && b < nbufs[i]; b++) {
			if (lens[i][b] && !bufs[i][b])
				st = mc_set_error(MC_ERR_INVALID_PARAMS, "NULL buffer for %s",
						  keys[i]);
			else
				st = mc_store_check_buffer(s, bufs[i][b], lens[i][b]);
			total += lens[i][b];
		}
		if (st == MC_OK && total == 0)
			st = mc_set_error(MC_ERR_INVALID_PARAMS, "empty value for %s", keys[i]);
		if (res)
			res[i] = st;
		if (totals)
			totals[i] = total;
	}
	if (!res || !totals) {
		results_nomem(results, n);
		if (res != results)
			mc_free(res);
		mc_free(totals);
		return MC_ERR_NOMEM;
	}
	mc_store_put_many(s, keys, bufs, lens, nbufs, totals, n, cfg, upsert, res);
	rc = mc_store_first_failure(res, n);
	if (res != results)
		mc_free(res);
	mc_free(totals);
	return rc;
}

/* One buffer per key, as the arrays the multi-buffer batch forms take. */
struct one_buf_views {
	void *const **bufs;
	const size_t **lens;
	size_t *nbufs;
};

static void one_buf_views_free(struct one_buf_views *v)
{
	mc_free(v->bufs);
	mc_free(v->lens);
	mc_free(v->nbufs);
}

static mc_status one_buf_views_new(void *const *bufs, const size_t *lens, size_t n,
				   struct one_buf_views *v)
{
	v->bufs = mc_calloc(n, sizeof(*v->bufs));
	v->lens = mc_calloc(n, sizeof(*v->lens));
	v->nbufs = mc_calloc(n, sizeof(*v->nbufs));
	if (!v->bufs || !v->lens || !v->nbufs) {
		one_buf_views_free(v);
		return MC_ERR_NOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		v->bufs[i] = &bufs[i];
		v->lens[i] = &lens[i];
		v->nbufs[i] = 1;
	}
	return MC_OK;
}

static mc_status batch_put_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				const size_t *lens, size_t n, const struct mc_store_config *config,
				bool upsert, mc_status *results)
{
	struct one_buf_views v;
	mc_status rc = batch_begin(s, keys, bufs, n, config);
	if (rc == MC_OK && n && !lens)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_put_from: NULL lens");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	if (one_buf_views_new(bufs, lens, n, &v) != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = one_value_check(keys[i], bufs[i], lens[i]);
		results_nomem(results, n);
		return MC_ERR_NOMEM;
	}
	rc = batch_put_multi(s, keys, v.bufs, v.lens, v.nbufs, n, config, upsert, results);
	one_buf_views_free(&v);
	return rc;
}

static mc_status untimed_batch_put_from(struct mc_store *s, const char *const *keys,
					void *const *bufs, const size_t *lens, size_t n,
					const struct mc_store_config *config, mc_status *results)
{
	return batch_put_from(s, keys, bufs, lens, n, config, false, results);
}

static mc_status untimed_batch_upsert_from(struct mc_store *s, const char *const *keys,
					   void *const *bufs, const size_t *lens, size_t n,
					   const struct mc_store_config *config, mc_status *results)
{
	return batch_put_from(s, keys, bufs, lens, n, config, true, results);
}

static mc_status untimed_batch_put_from_multi_buffers(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
						      const size_t *nbufs, size_t n,
						      const struct mc_store_config *config,
						      mc_status *results)
{
	mc_status rc = batch_begin(s, keys, bufs, n, config);
	if (rc == MC_OK && n && (!lens || !nbufs))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch call: NULL lens");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	return batch_put_multi(s, keys, bufs, lens, nbufs, n, config, false, results);
}

static mc_status batch_get_multi(struct mc_store *s, const char *const *keys,
				 void *const *const *bufs, const size_t *const *lens,
				 const size_t *nbufs, size_t n, int64_t *results)
{
	int64_t *res = results;
	mc_status rc;

	if (!res)
		res = mc_calloc(n, sizeof(*res));
	if (!res)
		return MC_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		res[i] = mc_store_check_key(keys[i]);
		for (size_t b = 0; res[i] == MC_OK && b < nbufs[i]; b++)
			if (lens[i][b] && !bufs[i][b])
				res[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "NULL buffer for %s",
						      keys[i]);
			else
				res[i] = mc_store_check_dest(s, bufs[i][b], lens[i][b]);
	}
	mc_store_get_many(s, keys, bufs, lens, nbufs, n, NULL, NULL, res);
	rc = mc_store_first_failure_i64(res, n);
	if (res != results)
		mc_free(res);
	return rc;
}

static mc_status untimed_batch_get_into(struct mc_store *s, const char *const *keys,
					void *const *bufs, const size_t *caps, size_t n,
					int64_t *results)
{
	struct one_buf_views v;
	mc_status rc = batch_begin(s, keys, bufs, n, NULL);
	if (rc == MC_OK && n && !caps)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_get_into: NULL caps");
	if (rc == MC_OK && n)
		rc = one_buf_views_new(bufs, caps, n, &v);
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	rc = batch_get_multi(s, keys, v.bufs, v.lens, v.nbufs, n, results);
	one_buf_views_free(&v);
	return rc;
}

static mc_status untimed_batch_get_into_multi_buffers(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
						      const size_t *nbufs, size_t n,
						      int64_t *results)
{
	mc_status rc = batch_begin(s, keys, bufs, n, NULL);
	if (rc == MC_OK && n && (!lens || !nbufs))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch call: NULL lens");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	return batch_get_multi(s, keys, bufs, lens, nbufs, n, results);
}

static mc_status untimed_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
					 mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results)
{
	mc_status rc;

	if (s && s->dummy)
		return mc_store_dummy_batch_get_alloc(s, keys, n, alloc, ctx, results);
	rc = mc_store_check_ready(s);

	if (rc == MC_OK && n && (!keys || !alloc || !results))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_get: NULL arrays or allocator");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		results[i] = mc_store_check_key(keys[i]);
	mc_store_get_many(s, keys, NULL, NULL, NULL, n, alloc, ctx, results);
	return mc_store_first_failure_i64(results, n);
}

/* ---- timed entry points ------------------------------------------------------------------ */

/*
 * Every public call that moves object bytes is timed here and counted in
 * the client's metrics (client_metrics.h: calls, failures, bytes moved,
 * latency by op_name and in upstream's four histograms).  The untimed_*
 * functions above are the calls themselves; mc_store_get and
 * mc_store_batch_get (client_get.c) go through the timed get_alloc
 * forms.
 */

static uint64_t t_start(const struct mc_store *s)
{
	return mc_client_metrics_start(s ? s->metrics : NULL);
}

static mc_status t_end(struct mc_store *s, enum mc_cm_op op, uint64_t t0, mc_status rc,
		       uint64_t bytes)
{
	if (t0)
		mc_client_metrics_op(s->metrics, op, t0, rc == MC_OK, rc == MC_OK ? bytes : 0);
	return rc;
}

static int64_t t_end_i64(struct mc_store *s, enum mc_cm_op op, uint64_t t0, int64_t n)
{
	if (t0)
		mc_client_metrics_op(s->metrics, op, t0, n >= 0, n > 0 ? (uint64_t)n : 0);
	return n;
}

static uint64_t sum_lens(const size_t *lens, size_t n)
{
	uint64_t t = 0;
	for (size_t i = 0; lens && i < n; i++)
		t += lens[i];
	return t;
}

/* Bytes of the keys of a batch put that succeeded (all when results is NULL). */
static uint64_t put_bytes(const size_t *lens, size_t n, const mc_status *results)
{
	uint64_t t = 0;
	for (size_t i = 0; lens && i < n; i++)
		if (!results || results[i] == MC_OK)
			t += lens[i];
	return t;
}

static uint64_t put_multi_bytes(const size_t *const *lens, const size_t *nbufs, size_t n,
				const mc_status *results)
{
	uint64_t t = 0;
	for (size_t i = 0; lens && nbufs && i < n; i++)
		if (!results || results[i] == MC_OK)
			t += sum_lens(lens[i], nbufs[i]);
	return t;
}

static uint64_t got_bytes(const int64_t *results, size_t n)
{
	uint64_t t = 0;
	for (size_t i = 0; results && i < n; i++)
		if (results[i] > 0)
			t += (uint64_t)results[i];
	return t;
}

static mc_status t_end_batch_get(struct mc_store *s, enum mc_cm_op op, uint64_t t0, mc_status rc,
				 const int64_t *results, size_t n)
{
	if (t0)
		mc_client_metrics_op(s->metrics, op, t0, rc == MC_OK, got_bytes(results, n));
	return rc;
}

mc_status mc_store_put(struct mc_store *s, const char *key, const void *value, size_t len,
		       const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, &value, &len, 1, config, false)
			       : untimed_put(s, key, value, len, config);
	return t_end(s, MC_CM_OP_PUT, t0, rc, len);
}

mc_status mc_store_put_parts(struct mc_store *s, const char *key, const void *const *parts,
			     const size_t *lens, size_t nparts,
			     const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, parts, lens, nparts, config, false)
			       : untimed_put_parts(s, key, parts, lens, nparts, config);
	return t_end(s, MC_CM_OP_PUT_PARTS, t0, rc, parts ? sum_lens(lens, nparts) : 0);
}

mc_status mc_store_upsert(struct mc_store *s, const char *key, const void *value, size_t len,
			  const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, &value, &len, 1, config, true)
			       : untimed_upsert(s, key, value, len, config);
	return t_end(s, MC_CM_OP_UPSERT, t0, rc, len);
}

mc_status mc_store_upsert_parts(struct mc_store *s, const char *key, const void *const *parts,
				const size_t *lens, size_t nparts,
				const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, parts, lens, nparts, config, true)
			       : untimed_upsert_parts(s, key, parts, lens, nparts, config);
	return t_end(s, MC_CM_OP_UPSERT_PARTS, t0, rc, parts ? sum_lens(lens, nparts) : 0);
}

mc_status mc_store_put_batch(struct mc_store *s, const char *const *keys, const void *const *values,
			     const size_t *lens, size_t n, const struct mc_store_config *config,
			     mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = untimed_put_batch(s, keys, values, lens, n, config, results);
	return t_end(s, MC_CM_OP_PUT_BATCH, t0, rc, put_bytes(lens, n, results));
}

mc_status mc_store_upsert_batch(struct mc_store *s, const char *const *keys,
				const void *const *values, const size_t *lens, size_t n,
				const struct mc_store_config *config, mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = untimed_upsert_batch(s, keys, values, lens, n, config, results);
	return t_end(s, MC_CM_OP_UPSERT_BATCH, t0, rc, put_bytes(lens, n, results));
}

int64_t mc_store_get_alloc(struct mc_store *s, const char *key, mc_store_alloc_fn alloc, void *ctx)
{
	uint64_t t0 = t_start(s);
	int64_t r = s && s->dummy ? (key && *key ? mc_dummy_get_copy(s->dummy, key, alloc, ctx)
						 : mc_set_error(MC_ERR_INVALID_PARAMS, "empty key"))
				  : untimed_get_alloc(s, key, alloc, ctx);
	return t_end_i64(s, MC_CM_OP_GET, t0, r);
}

mc_status mc_store_put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			    const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy ? mc_store_dummy_put_one(s, key, buf, len, config, false)
				     : untimed_put_from(s, key, buf, len, config);
	return t_end(s, MC_CM_OP_PUT_FROM, t0, rc, len);
}

mc_status mc_store_upsert_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			       const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy ? mc_store_dummy_put_one(s, key, buf, len, config, true)
				     : untimed_upsert_from(s, key, buf, len, config);
	return t_end(s, MC_CM_OP_UPSERT_FROM, t0, rc, len);
}

int64_t mc_store_get_into(struct mc_store *s, const char *key, void *buf, size_t cap)
{
	uint64_t t0 = t_start(s);
	int64_t r = s && s->dummy ? mc_store_dummy_get_one(s, key, buf, cap)
				  : untimed_get_into(s, key, buf, cap);
	return t_end_i64(s, MC_CM_OP_GET_INTO, t0, r);
}

mc_status mc_store_batch_put_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *lens, size_t n,
				  const struct mc_store_config *config, mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc =
		s && s->dummy
			? mc_store_dummy_put_flat(s, keys, bufs, lens, n, config, false, results)
			: untimed_batch_put_from(s, keys, bufs, lens, n, config, results);
	return t_end(s, MC_CM_OP_BATCH_PUT_FROM, t0, rc, put_bytes(lens, n, results));
}

mc_status mc_store_batch_upsert_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				     const size_t *lens, size_t n,
				     const struct mc_store_config *config, mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc =
		s && s->dummy
			? mc_store_dummy_put_flat(s, keys, bufs, lens, n, config, true, results)
			: untimed_batch_upsert_from(s, keys, bufs, lens, n, config, results);
	return t_end(s, MC_CM_OP_BATCH_UPSERT_FROM, t0, rc, put_bytes(lens, n, results));
}

mc_status mc_store_batch_put_from_multi_buffers(struct mc_store *s, const char *const *keys,
						void *const *const *bufs, const size_t *const *lens,
						const size_t *nbufs, size_t n,
						const struct mc_store_config *config,
						mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc;
	if (s && s->dummy) {
		rc = mc_store_dummy_multi_check(keys, bufs, lens, nbufs, n, results, NULL);
		if (rc == MC_OK && n)
			rc = mc_dummy_put_multi(s->dummy, keys, bufs, lens, nbufs, n, config, false,
						results);
	} else {
		rc = untimed_batch_put_from_multi_buffers(s, keys, bufs, lens, nbufs, n, config,
							  results);
	}
	return t_end(s, MC_CM_OP_BATCH_PUT_FROM_MULTI, t0, rc,
		     put_multi_bytes(lens, nbufs, n, results));
}

mc_status mc_store_batch_get_into(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *caps, size_t n, int64_t *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy ? mc_store_dummy_get_flat(s, keys, bufs, caps, n, results)
				     : untimed_batch_get_into(s, keys, bufs, caps, n, results);
	return t_end_batch_get(s, MC_CM_OP_BATCH_GET_INTO, t0, rc, results, n);
}

mc_status mc_store_batch_get_into_multi_buffers(struct mc_store *s, const char *const *keys,
						void *const *const *bufs, const size_t *const *lens,
						const size_t *nbufs, size_t n, int64_t *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc;
	if (s && s->dummy) {
		rc = mc_store_dummy_multi_check(keys, bufs, lens, nbufs, n, NULL, results);
		if (rc == MC_OK && n)
			rc = mc_dummy_get_multi(s->dummy, keys, bufs, lens, nbufs, n, results);
	} else {
		rc = untimed_batch_get_into_multi_buffers(s, keys, bufs, lens, nbufs, n, results);
	}
	return t_end_batch_get(s, MC_CM_OP_BATCH_GET_INTO_MULTI, t0, rc, results, n);
}

mc_status mc_store_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
				   mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = untimed_batch_get_alloc(s, keys, n, alloc, ctx, results);
	return t_end_batch_get(s, MC_CM_OP_BATCH_GET, t0, rc, results, n);
}

mc_status mc_store_get_into_ranges(struct mc_store *s, const struct mc_store_range_read *reads,
				   size_t n)
{
	if (s && s->dummy)
		return mc_store_dummy_get_into_ranges(s, reads, n);
	uint64_t t0 = t_start(s);
	mc_status rc = mc_store_get_into_ranges_untimed(s, reads, n);
	uint64_t bytes = 0;

	if (!t0)
		return rc;
	for (size_t i = 0; reads && i < n; i++)
		bytes += got_bytes(reads[i].results, reads[i].results ? reads[i].nranges : 0);
	mc_client_metrics_op(s->metrics, MC_CM_OP_GET_INTO_RANGES, t0, rc == MC_OK, bytes);
	return rc;
}

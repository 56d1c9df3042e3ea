/*
 * store/client_dummy.c - what a struct mc_store set up as a dummy client
 * does in the store's public calls (mooncake/store.h): the checks a real
 * client makes before asking anyone, then the call through the daemon
 * (store/dummy_client.c).  The public calls in client_calls.c branch here
 * when s->dummy is set; nothing here touches the master or the engine.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "store/client_int.h"
#include "store/dummy_client.h"
#include "store/dummy_proto.h"

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

/* Copy-based batches are staged in the local buffer and go as one request
 * (or as few as fit in it at once), the results as a real client's batch
 * gives them. */
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
	{
		bool keys_ok = true;
		for (size_t i = 0; i < n && keys_ok; i++)
			keys_ok = keys[i] && *keys[i] && strlen(keys[i]) <= MC_STORE_KEY_MAX;
		if (keys_ok && n > 1) {
			mc_status *r = results ? results : mc_calloc(n, sizeof(*r));
			if (!r)
				return mc_set_error(MC_ERR_NOMEM, "out of memory");
			rc = mc_dummy_put_copy_batch(s->dummy, keys, values, lens, n, cfg, upsert,
						     r);
			if (r != results)
				mc_free(r);
			return rc;
		}
	}
	/* one key, or a bad key among them: key by key, each checked */
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
	{
		bool keys_ok = true;
		for (size_t i = 0; i < n && keys_ok; i++)
			keys_ok = mc_store_check_key(keys[i]) == MC_OK &&
				  strlen(keys[i]) <= MC_STORE_KEY_MAX;
		if (keys_ok && n > 1)
			return mc_dummy_get_copy_batch(s->dummy, keys, n, alloc, ctx, results);
	}
	/* one key, or a bad key among them: key by key, each checked */
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

/* ---- sessions, ranges, replicas, tasks and segments through the daemon ---- */

/* Keys-only items for q (the codec checks each key); free with mc_free. */
static mc_status key_items(struct mc_dummy_req *q, const char *const *keys, size_t n)
{
	if (n > UINT32_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "too many keys");
	q->items = mc_calloc(n + 1, sizeof(*q->items));
	if (!q->items)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		q->items[i].key = mc_proto_str_c(keys[i]);
	q->n_items = (uint32_t)n;
	return MC_OK;
}

/* results[i] from the answer, or the call's status where it has none. */
static void copy_results(const struct mc_dummy_resp *r, mc_status rc, size_t n, mc_status *sts,
			 int64_t *r64)
{
	for (size_t i = 0; i < n; i++) {
		int64_t v = i < r->n_results ? r->results[i] : rc;
		if (sts)
			sts[i] = (mc_status)v;
		if (r64)
			r64[i] = v;
	}
}

mc_status mc_store_dummy_session_keys(struct mc_store *s, uint16_t type, const char *const *keys,
				      const uint64_t *sizes, size_t n,
				      const struct mc_store_config *cfg, mc_status *results)
{
	struct mc_dummy_req q = {.type = type};
	struct mc_dummy_resp r = {0};
	bool start_put = type == MC_DUMMY_MSG_PUT_SESSION_START;
	mc_status rc = MC_OK;

	if (n &&
	    (!keys || (type != MC_DUMMY_MSG_GET_SESSION_END && !results) || (start_put && !sizes)))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "session call: NULL arrays");
	if (rc == MC_OK && start_put)
		rc = mc_store_check_config(cfg, false, n);
	if (rc == MC_OK && n == 0)
		return MC_OK;
	if (rc == MC_OK)
		rc = key_items(&q, keys, n);
	if (rc == MC_OK && start_put) {
		q.nums = (uint64_t *)sizes;
		q.n_nums = (uint32_t)n;
		rc = mc_dummy_call_cfg(s->dummy, &q, cfg, &r);
	} else if (rc == MC_OK) {
		rc = mc_dummy_call(s->dummy, &q, &r);
	}
	if (results && type != MC_DUMMY_MSG_GET_SESSION_END)
		copy_results(&r, rc, n, results, NULL);
	mc_dummy_resp_release(&r);
	mc_free(q.items);
	return rc;
}

mc_status mc_store_dummy_ranges(struct mc_store *s, bool put, const char *const *keys,
				void *const *const *bufs, const size_t *const *lens,
				const uint64_t *const *offsets, const size_t *nbufs, size_t n,
				int64_t *results)
{
	struct mc_dummy_req q = {.type = put ? MC_DUMMY_MSG_PUT_RANGES : MC_DUMMY_MSG_GET_RANGES};
	struct mc_dummy_resp r = {0};
	size_t total = 0, at = 0;
	mc_status rc = MC_OK;

	if (n && (!keys || !bufs || !lens || !offsets || !nbufs || !results))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "ranged call: NULL arrays");
	for (size_t i = 0; rc == MC_OK && i < n; i++) {
		if (nbufs[i] && (!bufs[i] || !lens[i] || !offsets[i]))
			rc = mc_set_error(MC_ERR_INVALID_PARAMS, "ranged call: NULL buffer list");
		total += nbufs[i];
	}
	if (rc == MC_OK && total > UINT32_MAX)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "ranged call: too many buffers");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	q.nums = mc_calloc(total + 1, sizeof(*q.nums));
	if (!q.nums)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < nbufs[i]; j++)
			q.nums[at++] = offsets[i][j];
	q.n_nums = (uint32_t)total;
	rc = mc_dummy_call_bufs(s->dummy, &q, keys, bufs, lens, nbufs, n, &r);
	copy_results(&r, rc, n, NULL, results);
	mc_dummy_resp_release(&r);
	mc_free(q.nums);
	return rc;
}

/* Each read as a key whose buffers are its ranges' destinations. */
mc_status mc_store_dummy_get_into_ranges(struct mc_store *s,
					 const struct mc_store_range_read *reads, size_t n)
{
	struct mc_dummy_req q = {.type = MC_DUMMY_MSG_GET_INTO_RANGES};
	struct mc_dummy_resp r = {0};
	const char **keys = NULL;
	void ***bufs = NULL;
	size_t **lens = NULL, *nb = NULL;
	size_t total = 0, at = 0;
	mc_status rc = MC_OK;

	if (n && !reads)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "get_into_ranges: NULL reads");
	for (size_t i = 0; i < n; i++) {
		if (reads[i].nranges && (!reads[i].ranges || !reads[i].results))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "get_into_ranges: NULL ranges or results");
		total += reads[i].nranges;
	}
	if (n == 0 || total == 0)
		return MC_OK;
	if (total > UINT32_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "get_into_ranges: too many ranges");
	keys = mc_calloc(n, sizeof(*keys));
	bufs = mc_calloc(n, sizeof(*bufs));
	lens = mc_calloc(n, sizeof(*lens));
	nb = mc_calloc(n, sizeof(*nb));
	q.nums = mc_calloc(total, sizeof(*q.nums));
	if (!keys || !bufs || !lens || !nb || !q.nums)
		rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
	for (size_t i = 0; rc == MC_OK && i < n; i++) {
		const struct mc_store_range_read *rd = &reads[i];
		keys[i] = rd->key;
		nb[i] = rd->nranges;
		bufs[i] = mc_calloc(rd->nranges + 1, sizeof(void *));
		lens[i] = mc_calloc(rd->nranges + 1, sizeof(size_t));
		if (!bufs[i] || !lens[i]) {
			rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
			break;
		}
		for (size_t j = 0; j < rd->nranges; j++) {
			bufs[i][j] = (char *)rd->buf + rd->ranges[j].dst_offset;
			lens[i][j] = (size_t)rd->ranges[j].length;
			q.nums[at++] = rd->ranges[j].src_offset;
		}
	}
	if (rc == MC_OK) {
		q.n_nums = (uint32_t)total;
		rc = mc_store_dummy_multi_check(keys, (void *const *const *)bufs,
						(const size_t *const *)lens, nb, n, NULL, NULL);
	}
	if (rc == MC_OK)
		rc = mc_dummy_call_bufs(s->dummy, &q, keys, (void *const *const *)bufs,
					(const size_t *const *)lens, nb, n, &r);
	at = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < reads[i].nranges; j++, at++)
			reads[i].results[j] = at < r.n_results ? r.results[at] : rc;
	mc_dummy_resp_release(&r);
	for (size_t i = 0; bufs && lens && i < n; i++) {
		mc_free(bufs[i]);
		mc_free(lens[i]);
	}
	mc_free(keys);
	mc_free(bufs);
	mc_free(lens);
	mc_free(nb);
	mc_free(q.nums);
	return rc;
}

int64_t mc_store_dummy_replica_desc(struct mc_store *s, const char *key,
				    struct mc_store_replica_desc *out, size_t cap)
{
	struct mc_dummy_req q = {.type = MC_DUMMY_MSG_REPLICA_DESC};
	struct mc_dummy_resp r = {0};
	struct mc_dummy_item it;
	mc_status rc = mc_store_check_key(key);
	size_t n;

	if (rc == MC_OK && cap && !out)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_replica_desc: NULL out");
	if (rc != MC_OK)
		return rc;
	memset(&it, 0, sizeof(it));
	it.key = mc_proto_str_c(key);
	q.items = &it;
	q.n_items = 1;
	rc = mc_dummy_call(s->dummy, &q, &r);
	if (rc == MC_OK && (r.n_results % 4 || r.n_strs != r.n_results / 4 * 3))
		rc = mc_set_error(MC_ERR_PROTOCOL, "ReplicaDesc: %u numbers and %u strings",
				  r.n_results, r.n_strs);
	n = rc == MC_OK ? r.n_results / 4 : 0;
	for (size_t i = 0; i < n && i < cap; i++) {
		struct mc_store_replica_desc *d = &out[i];
		memset(d, 0, sizeof(*d));
		d->status = (int)r.results[4 * i];
		d->type = (int)r.results[4 * i + 1];
		d->size = (uint64_t)r.results[4 * i + 2];
		d->address = (uint64_t)r.results[4 * i + 3];
		snprintf(d->segment_name, sizeof(d->segment_name), "%s",
			 r.strs[3 * i].ptr ? r.strs[3 * i].ptr : "");
		snprintf(d->transport_endpoint, sizeof(d->transport_endpoint), "%s",
			 r.strs[3 * i + 1].ptr ? r.strs[3 * i + 1].ptr : "");
		snprintf(d->protocol, sizeof(d->protocol), "%s",
			 r.strs[3 * i + 2].ptr ? r.strs[3 * i + 2].ptr : "");
	}
	mc_dummy_resp_release(&r);
	return rc == MC_OK ? (int64_t)n : rc;
}

int64_t mc_store_dummy_replica_clear(struct mc_store *s, const char *const *keys, size_t n,
				     const char *segment_name, bool *cleared)
{
	struct mc_dummy_req q = {.type = MC_DUMMY_MSG_REPLICA_CLEAR,
				 .text = mc_proto_str_c(segment_name)};
	struct mc_dummy_resp r = {0};
	int64_t count;
	mc_status rc = MC_OK;

	for (size_t i = 0; cleared && i < n; i++)
		cleared[i] = false;
	if (n && !keys)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "batch_replica_clear: NULL keys");
	if (n == 0)
		return 0;
	rc = key_items(&q, keys, n);
	if (rc == MC_OK)
		rc = mc_dummy_call(s->dummy, &q, &r);
	if (rc == MC_OK && r.n_results != n + 1)
		rc = mc_set_error(MC_ERR_PROTOCOL, "ReplicaClear: %u results for %zu keys",
				  r.n_results, n);
	count = rc == MC_OK ? r.results[0] : rc;
	for (size_t i = 0; rc == MC_OK && cleared && i < n; i++)
		cleared[i] = r.results[i + 1] != 0;
	mc_dummy_resp_release(&r);
	mc_free(q.items);
	return count;
}

/* COPY_TASK (key, targets), MOVE_TASK (key, source, target): the task's id. */
mc_status mc_store_dummy_create_task(struct mc_store *s, const char *key,
				     const char *const *targets, size_t ntargets,
				     struct mc_store_task_uuid *id_out)
{
	struct mc_dummy_req q = {.type = ntargets == SIZE_MAX ? MC_DUMMY_MSG_MOVE_TASK
							      : MC_DUMMY_MSG_COPY_TASK};
	struct mc_dummy_resp r = {0};
	size_t nt = ntargets == SIZE_MAX ? 2 : ntargets;
	mc_status rc = MC_OK;

	if (id_out)
		*id_out = (struct mc_store_task_uuid){0, 0};
	if (!key || !id_out || (nt && !targets))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "task: NULL key, targets or id_out");
	if (nt >= UINT32_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "task: too many targets");
	q.strs = mc_calloc(nt + 1, sizeof(*q.strs));
	if (!q.strs)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	q.strs[0] = mc_proto_str_c(key);
	for (size_t i = 0; i < nt; i++) {
		if (!targets[i]) {
			mc_free(q.strs);
			return mc_set_error(MC_ERR_INVALID_PARAMS, "task: NULL segment name");
		}
		q.strs[i + 1] = mc_proto_str_c(targets[i]);
	}
	q.n_strs = (uint32_t)nt + 1;
	rc = mc_dummy_call(s->dummy, &q, &r);
	if (r.n_results >= 2)
		*id_out =
			(struct mc_store_task_uuid){(uint64_t)r.results[0], (uint64_t)r.results[1]};
	mc_dummy_resp_release(&r);
	mc_free(q.strs);
	return rc;
}

mc_status mc_store_dummy_query_task(struct mc_store *s, const struct mc_store_task_uuid *id,
				    struct mc_store_task_state *out)
{
	struct mc_dummy_req q = {.type = MC_DUMMY_MSG_QUERY_TASK};
	struct mc_dummy_resp r = {0};
	mc_status rc;

	if (!id || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "query_task: NULL id or out");
	memset(out, 0, sizeof(*out));
	q.a = id->first;
	q.b = id->second;
	rc = mc_dummy_call(s->dummy, &q, &r);
	if (rc == MC_OK && r.n_results != 6)
		rc = mc_set_error(MC_ERR_PROTOCOL, "QueryTask: %u results", r.n_results);
	if (rc == MC_OK) {
		out->id = *id;
		out->type = (int)r.results[0];
		out->status = (int)r.results[1];
		out->created_at_ms_epoch = (uint64_t)r.results[2];
		out->last_updated_at_ms_epoch = (uint64_t)r.results[3];
		out->assigned_client.first = (uint64_t)r.results[4];
		out->assigned_client.second = (uint64_t)r.results[5];
		snprintf(out->message, sizeof(out->message), "%s", r.text.ptr ? r.text.ptr : "");
	}
	mc_dummy_resp_release(&r);
	return rc;
}

/* The segment calls: type from store/dummy_proto.h; text the segment id
 * or the path; the id of a new segment to id_out. */
mc_status mc_store_dummy_segment(struct mc_store *s, uint16_t type, const char *text, uint64_t a,
				 uint64_t b, const char *protocol, const char *location,
				 char *id_out, uint64_t *allocated_out)
{
	struct mc_proto_str strs[3];
	struct mc_dummy_req q = {.type = type, .a = a, .b = b};
	struct mc_dummy_resp r = {0};
	bool mount = type == MC_DUMMY_MSG_MOUNT_SEGMENT || type == MC_DUMMY_MSG_ALLOC_MOUNT_SEGMENT;
	mc_status rc;

	if (mount && !id_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "mount: NULL id_out");
	if (mount)
		id_out[0] = 0;
	if (type == MC_DUMMY_MSG_MOUNT_SEGMENT) {
		strs[0] = mc_proto_str_c(text);
		strs[1] = mc_proto_str_c(protocol);
		strs[2] = mc_proto_str_c(location);
		q.strs = strs;
		q.n_strs = 3;
	} else if (type == MC_DUMMY_MSG_ALLOC_MOUNT_SEGMENT) {
		strs[0] = mc_proto_str_c(protocol);
		strs[1] = mc_proto_str_c(location);
		q.strs = strs;
		q.n_strs = 2;
	} else if (type != MC_DUMMY_MSG_UNMOUNT_LOCAL_DISK) {
		if (!text || !*text)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "unmount: empty segment id");
		q.text = mc_proto_str_c(text);
	}
	rc = mc_dummy_call(s->dummy, &q, &r);
	if (rc == MC_OK && mount)
		snprintf(id_out, MC_STORE_SEGMENT_ID_MAX, "%s", r.text.ptr ? r.text.ptr : "");
	if (rc == MC_OK && allocated_out)
		*allocated_out = r.n_results ? (uint64_t)r.results[0] : 0;
	mc_dummy_resp_release(&r);
	return rc;
}

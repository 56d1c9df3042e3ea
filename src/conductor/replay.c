/*
 * conductor/replay.c - the virtual-time replay of replay.h.
 *
 * One pass over the requests in arrival order; nothing runs concurrently,
 * so there is no event queue: a prefill instance is a FIFO server whose
 * free_at the scheduler reads and books, and a decode instance is a list
 * of booked jobs that the scheduler's TBT prediction counts (pruned once
 * they can no longer matter).  Per request the cost is one prefix match
 * per cache (O(blocks) hash lookups each) plus the scheduler's O(nodes)
 * pass, so the conversation trace replays in a fraction of a second.
 *
 * Metrics follow paper.md 5: the token-weighted hit rate counts
 * min(512 m, input_length) for the prefix m the request actually reused
 * (its own blocks plus fetched ones); prefill time is the cost model's
 * incremental prefill; TTFT is queue + transfer + prefill.  Replica
 * snapshots (Fig. 11) count, every snapshot_every_s of trace time, how
 * many node caches hold each key; the copies come only from fetches
 * (hot-block replication as a side effect of scheduling, paper 4.4).
 *
 * Recency is per node by default: a cache's LRU order moves only with
 * what runs on that node (and a fetch from it), as the reference replay
 * does.  With object_lru it is per block across the nodes, as the
 * master's per-segment LRU orders by one stamp per object: a request
 * refreshes every copy of its blocks (docs/conductor.md, Figure 11).
 */
#include "conductor/replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "conductor/cache.h"

void mc_replay_config_defaults(struct mc_replay_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->nodes = 10;
	cfg->capacity_blocks = 3000000 / 512;
	cfg->speedup = 1;
	cfg->seed = 1;
	mc_sched_config_defaults(&cfg->sched);
	mc_costmodel_defaults(&cfg->cost);
}

struct decode_side {
	struct mc_sched_decode_job *jobs;
	size_t n, cap;
};

static int cmp_order(const void *a, const void *b, void *arg)
{
	const struct mc_trace *t = arg;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int64_t ti = t->reqs[i].timestamp_ms, tj = t->reqs[j].timestamp_ms;
	if (ti != tj)
		return ti < tj ? -1 : 1;
	return i < j ? -1 : i > j;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * Count the replicas of every cached key: all caches' keys into one
 * array, sorted, run lengths.  A snapshot costs O(K log K) for K cached
 * blocks, taken every 30 s of trace time.  keys and reps are the caller's
 * scratch space of at least K entries.
 */
static size_t count_replicas(struct mc_kvcache *const *caches, uint32_t n, uint64_t *keys,
			     struct mc_replay_replica *reps)
{
	size_t k = 0, m = 0;
	for (uint32_t i = 0; i < n; i++)
		k += mc_kvcache_lru_order(caches[i], keys + k, mc_kvcache_size(caches[i]));
	qsort(keys, k, sizeof(*keys), cmp_u64);
	for (size_t i = 0; i < k; i++) {
		if (m && reps[m - 1].key == keys[i])
			reps[m - 1].replicas++;
		else
			reps[m++] = (struct mc_replay_replica){.key = keys[i], .replicas = 1};
	}
	return m;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, size_t n, double q)
{
	if (!n)
		return 0;
	size_t k = (size_t)ceil(q * (double)n);
	return sorted[k ? k - 1 : 0];
}

void mc_replay_order(const struct mc_trace *t, size_t *order)
{
	for (size_t i = 0; i < t->n; i++)
		order[i] = i;
	qsort_r(order, t->n, sizeof(*order), cmp_order, (void *)t);
}

void mc_replay_summarise(const struct mc_replay_config *cfg, const struct mc_replay_sums *sums,
			 double *ttfts, size_t n, struct mc_replay_result *out)
{
	double sum = 0;

	if (out->input_tokens)
		out->token_hit_rate = (double)out->hit_tokens / (double)out->input_tokens;
	if (!n)
		return;
	out->prefill_s_per_request = sums->prefill_s / (double)n;
	out->transfer_s_per_request = sums->transfer_s / (double)n;
	if (cfg->decode_nodes)
		out->tbt_avg_s = sums->tbt_s / (double)n;
	for (size_t i = 0; i < n; i++)
		sum += ttfts[i];
	out->ttft_avg_s = sum / (double)n;
	qsort(ttfts, n, sizeof(*ttfts), cmp_double);
	out->ttft_p50_s = quantile(ttfts, n, 0.5);
	out->ttft_p90_s = quantile(ttfts, n, 0.9);
}

/*
 * object_lru: the store keeps one recency stamp per object, and the
 * conductor's lookup of a request stamps every block of it that any
 * segment holds (its read lease), whatever it decides; so every copy of
 * such a block is used now, in every cache.  Last to first, as an admit
 * stamps them, so that a prefix's root is the most recent.  Rejected
 * requests too: their lookup happened.
 */
static void touch_everywhere(struct mc_kvcache *const *caches, uint32_t n,
			     const struct mc_trace_req *r)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t b = r->n_blocks; b-- > 0;)
			(void)mc_kvcache_touch(caches[i], r->hash_ids[b]);
}

/* Drop jobs that ended before now; keep the rest in booking order. */
static void prune(struct decode_side *d, double now, double t_d)
{
	size_t w = 0;
	for (size_t r = 0; r < d->n; r++)
		if (d->jobs[r].start_s + t_d > now)
			d->jobs[w++] = d->jobs[r];
	d->n = w;
}

mc_status mc_replay_run(const struct mc_replay_config *cfg, const struct mc_trace *t,
			const struct mc_replay_hooks *hooks, struct mc_replay_result *out)
{
	static const struct mc_replay_hooks no_hooks;
	uint64_t *snap_keys = NULL;
	struct mc_replay_replica *snap_reps = NULL;
	bool snapshots;
	double next_snap = 0;
	struct mc_kvcache **caches = NULL;
	struct mc_sched_prefill *pre = NULL;
	struct mc_sched_decode *dec = NULL;
	struct decode_side *side = NULL;
	uint32_t *prefix = NULL;
	size_t *order = NULL;
	double *ttfts = NULL;
	uint32_t n_caches;
	uint64_t rng = cfg->seed ? cfg->seed : 1;
	double prefill_sum = 0, transfer_sum = 0, tbt_sum = 0;
	size_t n_ttft = 0;
	mc_status st = MC_OK;
	struct mc_sched_config sc = cfg->sched;

	memset(out, 0, sizeof(*out));
	if (!cfg->nodes || cfg->speedup <= 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "replay needs nodes > 0 and speedup > 0");
	if (cfg->global_pool && cfg->capacity_blocks > MC_KVCACHE_MAX_BLOCKS / cfg->nodes)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "global pool of %u x %llu blocks is too big", cfg->nodes,
				    (unsigned long long)cfg->capacity_blocks);
	if (!hooks)
		hooks = &no_hooks;
	n_caches = cfg->global_pool ? 1 : cfg->nodes;
	snapshots = hooks->snapshot && cfg->snapshot_every_s > 0 && !cfg->global_pool;
	caches = mc_calloc(n_caches, sizeof(*caches));
	pre = mc_calloc(cfg->nodes, sizeof(*pre));
	prefix = mc_calloc(cfg->nodes, sizeof(*prefix));
	order = mc_calloc(t->n ? t->n : 1, sizeof(*order));
	ttfts = mc_calloc(t->n ? t->n : 1, sizeof(*ttfts));
	dec = mc_calloc(cfg->decode_nodes ? cfg->decode_nodes : 1, sizeof(*dec));
	side = mc_calloc(cfg->decode_nodes ? cfg->decode_nodes : 1, sizeof(*side));
	if (snapshots) {
		uint64_t total = cfg->capacity_blocks * cfg->nodes;
		if (cfg->capacity_blocks && total / cfg->capacity_blocks != cfg->nodes) {
			st = mc_set_error(MC_ERR_INVALID_PARAMS, "too many blocks to snapshot");
			goto out;
		}
		snap_keys = mc_calloc(total ? total : 1, sizeof(*snap_keys));
		snap_reps = mc_calloc(total ? total : 1, sizeof(*snap_reps));
		if (!snap_keys || !snap_reps) {
			st = mc_set_error(MC_ERR_NOMEM, "no memory for replica snapshots");
			goto out;
		}
	}
	if (!caches || !pre || !prefix || !order || !ttfts || !dec || !side) {
		st = mc_set_error(MC_ERR_NOMEM, "no memory for a replay of %zu requests", t->n);
		goto out;
	}
	for (uint32_t i = 0; i < n_caches; i++) {
		uint64_t cap =
			cfg->global_pool ? cfg->capacity_blocks * cfg->nodes : cfg->capacity_blocks;
		if ((st = mc_kvcache_new(cap, &caches[i])) != MC_OK)
			goto out;
	}
	for (uint32_t i = 0; i < cfg->nodes; i++)
		pre[i].up = true;
	for (uint32_t d = 0; d < cfg->decode_nodes; d++)
		dec[d].up = true;
	mc_replay_order(t, order);

	for (size_t k = 0; k < t->n; k++) {
		const struct mc_trace_req *r = &t->reqs[order[k]];
		double now = (double)r->timestamp_ms / 1000.0 / cfg->speedup;
		struct mc_sched_req sr = {.input_len = r->input_length, .n_blocks = r->n_blocks};
		struct mc_sched_choice ch;
		uint32_t out_len = cfg->output_length_one ? 1 : r->output_length;

		while (snapshots && now >= next_snap) {
			size_t m = count_replicas(caches, n_caches, snap_keys, snap_reps);
			hooks->snapshot(next_snap, snap_reps, m, hooks->snapshot_arg);
			next_snap += cfg->snapshot_every_s;
		}

		if (cfg->global_pool) {
			uint32_t m =
				(uint32_t)mc_kvcache_match(caches[0], r->hash_ids, r->n_blocks);
			for (uint32_t i = 0; i < cfg->nodes; i++)
				prefix[i] = m;
		} else {
			for (uint32_t i = 0; i < cfg->nodes; i++)
				prefix[i] = (uint32_t)mc_kvcache_match(caches[i], r->hash_ids,
								       r->n_blocks);
		}
		for (uint32_t d = 0; d < cfg->decode_nodes; d++) {
			prune(&side[d], now, sc.decode_time_s);
			dec[d].jobs = side[d].jobs;
			dec[d].n_jobs = side[d].n;
			dec[d].ctx_tokens = mc_sched_decode_ctx_at(&sc, &dec[d], now);
		}
		st = mc_sched_pick(&sc, &cfg->cost, pre, cfg->nodes, prefix, dec, cfg->decode_nodes,
				   &sr, now, &rng, &ch);
		if (st != MC_OK)
			goto out;
		if (cfg->object_lru && !cfg->global_pool)
			touch_everywhere(caches, n_caches, r);
		out->requests++;
		if (hooks->request)
			hooks->request(order[k], now, r, &ch, hooks->request_arg);
		if (hooks->progress && (k % 1024 == 0 || k + 1 == t->n))
			hooks->progress(k + 1, t->n, hooks->progress_arg);
		if (ch.verdict != MC_SCHED_ACCEPT) {
			out->rejected++;
			continue;
		}
		mc_sched_commit_prefill(&ch, pre, now);
		if (now + ch.ttft_s > out->end_s)
			out->end_s = now + ch.ttft_s;
		out->input_tokens += r->input_length;
		out->hit_tokens += ch.prefix_tokens;
		prefill_sum += ch.prefill_s;
		transfer_sum += ch.transfer_s;
		ttfts[n_ttft++] = ch.ttft_s;
		if (ch.fetch_from >= 0) {
			out->fetches++;
			out->fetched_blocks += ch.fetch_blocks;
			/* the source's copy was read: a use, for its LRU */
			for (uint32_t b = ch.local_blocks; b < ch.prefix_blocks; b++)
				mc_kvcache_touch(caches[ch.fetch_from], r->hash_ids[b]);
		}
		mc_kvcache_admit(caches[cfg->global_pool ? 0 : ch.prefill], r->hash_ids,
				 r->n_blocks);
		if (ch.decode >= 0) {
			struct decode_side *d = &side[ch.decode];
			if (d->n == d->cap) {
				size_t cap = d->cap ? d->cap * 2 : 64;
				struct mc_sched_decode_job *j =
					mc_realloc(d->jobs, cap * sizeof(*j));
				if (!j) {
					st = mc_set_error(MC_ERR_NOMEM,
							  "no memory for decode jobs");
					goto out;
				}
				d->jobs = j;
				d->cap = cap;
			}
			d->jobs[d->n++] = (struct mc_sched_decode_job){
				.start_s = now + ch.ttft_s,
				.ctx_tokens = r->input_length + out_len,
			};
			tbt_sum += ch.tbt_s;
		}
	}
	if (snapshots) { /* the state the last request left */
		size_t m = count_replicas(caches, n_caches, snap_keys, snap_reps);
		hooks->snapshot(next_snap, snap_reps, m, hooks->snapshot_arg);
	}
	for (uint32_t i = 0; i < n_caches; i++)
		out->evictions += mc_kvcache_evictions(caches[i]);
	mc_replay_summarise(cfg,
			    &(struct mc_replay_sums){.prefill_s = prefill_sum,
						     .transfer_s = transfer_sum,
						     .tbt_s = tbt_sum},
			    ttfts, n_ttft, out);
out:
	if (caches)
		for (uint32_t i = 0; i < n_caches; i++)
			mc_kvcache_free(caches[i]);
	if (side)
		for (uint32_t d = 0; d < cfg->decode_nodes; d++)
			mc_free(side[d].jobs);
	mc_free(caches);
	mc_free(pre);
	mc_free(prefix);
	mc_free(order);
	mc_free(ttfts);
	mc_free(dec);
	mc_free(side);
	mc_free(snap_keys);
	mc_free(snap_reps);
	return st;
}

/*
 * conductor/replay.h - the offline replay: a trace run through block
 * caches and the scheduler in virtual time, without the store.
 *
 * Each request arrives at its timestamp (divided by speedup), the
 * scheduler (sched.h) picks a prefill instance over the caches' prefix
 * matches, the instance's queue is booked with the cost model's times
 * and the request's blocks are admitted into the chosen cache at
 * dispatch (paper.md 5.5); a fetch (global policy) touches the blocks on
 * the instance it reads from and leaves a copy on the one that fetched
 * (with object_lru every copy of every block the request names is
 * touched, as the store's per-object recency does).
 * With a global pool every instance sees one shared LRU of nodes x
 * capacity blocks.  Decode instances, when there are any, take each
 * request for output_length x TBT seconds after its prefill.
 */
#ifndef MC_CONDUCTOR_REPLAY_H
#define MC_CONDUCTOR_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conductor/costmodel.h"
#include "conductor/sched.h"
#include "conductor/trace.h"
#include "mooncake/status.h"

struct mc_replay_config {
	uint32_t nodes;		  /* prefill instances */
	uint32_t decode_nodes;	  /* decode instances (0: no decode side) */
	uint64_t capacity_blocks; /* per prefill instance */
	bool global_pool;	  /* one shared cache of nodes x capacity_blocks */
	bool output_length_one;	  /* every request generates one token (Fig. 10) */
	double speedup;		  /* arrivals compressed this many times (1: as traced) */
	uint64_t seed;		  /* of the random policy */
	double snapshot_every_s;  /* replica snapshots (Fig. 11) this often; 0: none */
	/* one recency per block across the nodes, as the master keeps one
	 * stamp per object: every request refreshes each of its blocks in
	 * every cache that holds it (the conductor's lookup stamps them all),
	 * not only in the cache it runs on and the one it fetches from */
	bool object_lru;
	struct mc_sched_config sched;
	struct mc_costmodel cost;
};

/* 10 nodes of 3M tokens, local caches, Algorithm 1, the paper's cost model. */
void mc_replay_config_defaults(struct mc_replay_config *cfg);

struct mc_replay_result {
	uint64_t requests; /* scheduled (admitted + rejected) */
	uint64_t rejected;
	uint64_t input_tokens; /* of admitted requests */
	uint64_t hit_tokens;   /* reused tokens of admitted requests */
	uint64_t fetches;      /* admitted requests that fetched */
	uint64_t fetched_blocks;
	uint64_t evictions;
	double token_hit_rate;	      /* hit_tokens / input_tokens */
	double prefill_s_per_request; /* mean predicted prefill compute */
	double ttft_avg_s, ttft_p50_s, ttft_p90_s;
	double tbt_avg_s; /* mean predicted TBT (decode instances only) */
	double transfer_s_per_request;
	double end_s; /* virtual time the last prefill ends */
};

/* Progress callback: done of total requests; may be NULL. */
typedef void (*mc_replay_progress_cb)(size_t done, size_t total, void *arg);

/* One key's replica count: how many prefill caches hold it. */
struct mc_replay_replica {
	uint64_t key;
	uint32_t replicas;
};

/* A replica snapshot at virtual time t_s: every key some cache holds, in
 * increasing key order (valid during the call only). */
typedef void (*mc_replay_snapshot_cb)(double t_s, const struct mc_replay_replica *keys, size_t n,
				      void *arg);

/* One request's outcome: index is its place in the trace file (0-based),
 * arrival_s its arrival in replay time; ch the scheduler's choice (its
 * verdict says whether it was admitted). */
typedef void (*mc_replay_request_cb)(size_t index, double arrival_s, const struct mc_trace_req *r,
				     const struct mc_sched_choice *ch, void *arg);

/* Where mc_replay_run reports; every member may be NULL. */
struct mc_replay_hooks {
	mc_replay_progress_cb progress;
	void *progress_arg;
	mc_replay_snapshot_cb snapshot; /* every snapshot_every_s, local caches only */
	void *snapshot_arg;
	mc_replay_request_cb request; /* every request, in replay order */
	void *request_arg;
};

/*
 * Replay t under cfg into *out, reporting through hooks (may be NULL).
 * Requests run in timestamp order, ties in file order; a snapshot due at
 * time T is taken before the first request arriving at T or later.  MC_ERR_INVALID_PARAMS for a
 * config that cannot run (no nodes, a capacity beyond a cache's), MC_ERR_NOMEM.
 */
mc_status mc_replay_run(const struct mc_replay_config *cfg, const struct mc_trace *t,
			const struct mc_replay_hooks *hooks, struct mc_replay_result *out);

/* Indices of t's requests (order has t->n entries) in replay order:
 * timestamp, ties in file order. */
void mc_replay_order(const struct mc_trace *t, size_t *order);
/* Per-request time sums of a replay's served requests. */
struct mc_replay_sums {
	double prefill_s, transfer_s, tbt_s;
};
/* The closing figures of out from its counts, the sums and the n served
 * requests' TTFTs: hit rate, per-request means, TTFT mean, p50 and p90
 * (nearest rank).  Sorts ttfts. */
void mc_replay_summarise(const struct mc_replay_config *cfg, const struct mc_replay_sums *sums,
			 double *ttfts, size_t n, struct mc_replay_result *out);

#endif

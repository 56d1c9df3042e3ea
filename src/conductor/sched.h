/*
 * conductor/sched.h - Algorithm 1 of the paper (4.2): choose the prefill
 * instance, the reused prefix and where it is fetched from, and the decode
 * instance of one request; reject it when a prediction breaks an SLO.
 *
 * The scheduler is a pure function over a table of instances: the caller
 * says how many leading blocks of the request each prefill instance holds
 * (from its caches today, from the store later), when each instance's
 * queue drains and what each decode instance is running, and passes the
 * time.  It returns a choice and changes nothing; mc_sched_commit_prefill
 * books the choice on the instance table, and copying the fetched blocks
 * into the chosen instance's cache (hot-block replication, 4.4) is the
 * caller's side of the fetch.
 */
#ifndef MC_CONDUCTOR_SCHED_H
#define MC_CONDUCTOR_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "conductor/costmodel.h"
#include "mooncake/status.h"

/* Prefill selection policies (paper 4.2 and Fig. 5). */
enum mc_sched_policy {
	MC_SCHED_RANDOM, /* any instance that is up, uniformly */
	MC_SCHED_LOAD,	 /* the shortest queue, cache-blind */
	MC_SCHED_PREFIX, /* the longest local prefix, ties to the shortest queue */
	MC_SCHED_LOCAL,	 /* local-cache-aware: least TTFT over local prefixes, no fetch */
	MC_SCHED_GLOBAL, /* global-cache-aware: Algorithm 1, fetching the best prefix */
};

/* "random", "load", "prefix", "local", "global". */
const char *mc_sched_policy_name(enum mc_sched_policy p);
/* MC_ERR_INVALID_PARAMS for an unknown name. */
mc_status mc_sched_policy_parse(const char *name, enum mc_sched_policy *out);

struct mc_sched_config {
	enum mc_sched_policy policy;
	double balancing_threshold; /* kvcache_balancing_threshold: fetch when best / local > it */
	bool fetch_only_if_faster;  /* and transfer + prefill beats recompute (4.3) */
	bool reject;		    /* reject on predicted TTFT or TBT above the SLO */
	bool predict_decode;	    /* judge decode load when prefill would end (4.5) */
	double decode_time_s;	    /* t_d: the uniform decode time prediction assumes */
};

/* The options of struct mc_sched_config but the policy (base/config). */
extern const struct mc_config_entry mc_sched_config_table[];
extern const size_t mc_sched_config_table_len;

/* Global policy, then the table's defaults: threshold 1.0, fetch gated by
 * cost, rejection off, prediction on with t_d = 20 s. */
void mc_sched_config_defaults(struct mc_sched_config *cfg);

struct mc_sched_prefill {
	double free_at_s;     /* when the instance's queue drains (virtual time) */
	double bandwidth_Bps; /* its transfer rate; <= 0: the cost model's */
	bool up;
};

/* A request running (or booked to run) on a decode instance. */
struct mc_sched_decode_job {
	double start_s; /* when it joins the decode batch (its prefill ends) */
	uint32_t ctx_tokens;
};

struct mc_sched_decode {
	double ctx_tokens; /* context held by its batch now */
	/* booked jobs for prediction (predict_decode): those with
	 * start <= t < start + decode_time_s are running at t */
	const struct mc_sched_decode_job *jobs;
	size_t n_jobs;
	bool up;
};

struct mc_sched_req {
	uint32_t input_len; /* prompt tokens */
	uint32_t n_blocks;  /* keys of the prompt */
};

enum mc_sched_verdict {
	MC_SCHED_ACCEPT,
	MC_SCHED_REJECT_TTFT,
	MC_SCHED_REJECT_TBT,
};

struct mc_sched_choice {
	int prefill;		/* index into the prefill table */
	int decode;		/* index into the decode table, -1 without decode instances */
	uint32_t local_blocks;	/* leading blocks the chosen instance holds */
	uint32_t prefix_blocks; /* blocks reused: local ones plus fetched ones */
	int fetch_from;		/* instance the blocks [local, prefix) come from, -1: none */
	uint32_t fetch_blocks;	/* prefix_blocks - local_blocks */
	uint32_t prefix_tokens; /* min(prefix_blocks x block_tokens, input_len) */
	double queue_s;
	double transfer_s;
	double prefill_s;
	double ttft_s; /* queue + transfer + prefill */
	double tbt_s;  /* predicted on the chosen decode instance; 0 without one */
	enum mc_sched_verdict verdict;
};

/*
 * Choose for req at time now_s.  prefix_blocks[i] is how many leading keys
 * of req prefill instance i holds (values above req->n_blocks count as
 * n_blocks).  rng is the state of the random policy (any non-zero value;
 * advanced).  Returns MC_OK with *out filled (out->verdict says whether the
 * request is admitted), MC_ERR_NOT_FOUND when no prefill instance is up, or
 * MC_ERR_INVALID_PARAMS.
 */
mc_status mc_sched_pick(const struct mc_sched_config *cfg, const struct mc_costmodel *cm,
			const struct mc_sched_prefill *pre, size_t n_pre,
			const uint32_t *prefix_blocks, const struct mc_sched_decode *dec,
			size_t n_dec, const struct mc_sched_req *req, double now_s, uint64_t *rng,
			struct mc_sched_choice *out);

/* Book an admitted choice: the chosen instance is busy until now + TTFT. */
void mc_sched_commit_prefill(const struct mc_sched_choice *ch, struct mc_sched_prefill *pre,
			     double now_s);

/* Context tokens decode instance d runs at time t (its jobs, or its
 * ctx_tokens when it books none). */
double mc_sched_decode_ctx_at(const struct mc_sched_config *cfg, const struct mc_sched_decode *d,
			      double t);

#endif

/*
 * conductor/sched.c - Algorithm 1 (paper 4.2) and its simpler rivals
 * (Fig. 5) over a table of instances.
 *
 * For every prefill instance that is up the scheduler predicts
 * TTFT = queue + transfer + prefill with the cost model, where queue is
 * what the instance has left (free_at - now) and the prefix is either the
 * instance's own or, for the global policy, the best one in the pool when
 * best / own exceeds kvcache_balancing_threshold (an own prefix of 0
 * makes the ratio infinite) and fetching beats recomputing (4.3).  The
 * fetch runs at the slower of the two instances' rates, which is where
 * congestion at a hot sender would enter.  The policies differ only in
 * which instance they take: random, the shortest queue, the longest own
 * prefix, or the least TTFT.  Ties go to the lowest index, so a choice is
 * a function of its inputs (and of rng for random).
 *
 * Decode is chosen by the least predicted TBT once the request joins:
 * with predict_decode, load is counted at the moment the request's
 * prefill would end, adding the booked requests that will have started
 * by then and dropping those that will have decoded for decode_time_s
 * (the system-level prediction of the arXiv report, paper.md 4.5), so
 * that rejecting on it does not oscillate.  Nothing here keeps state.
 */
#include "conductor/sched.h"

#include <stddef.h>
#include <string.h>

#include "base/log.h"

static const char *const policy_names[] = {
	[MC_SCHED_RANDOM] = "random", [MC_SCHED_LOAD] = "load",	    [MC_SCHED_PREFIX] = "prefix",
	[MC_SCHED_LOCAL] = "local",   [MC_SCHED_GLOBAL] = "global",
};

const char *mc_sched_policy_name(enum mc_sched_policy p)
{
	return (unsigned)p < sizeof(policy_names) / sizeof(policy_names[0]) ? policy_names[p]
									    : "unknown";
}

mc_status mc_sched_policy_parse(const char *name, enum mc_sched_policy *out)
{
	for (size_t i = 0; i < sizeof(policy_names) / sizeof(policy_names[0]); i++)
		if (name && strcmp(name, policy_names[i]) == 0) {
			*out = (enum mc_sched_policy)i;
			return MC_OK;
		}
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "unknown policy \"%s\" (random, load, prefix, local, global)",
			    name ? name : "");
}

#define SC_OPT(name, field, type, def, doc, lo, hi)             \
	{                                                       \
		.f = { name,                                    \
		       NULL,                                    \
		       def,                                     \
		       doc,                                     \
		       offsetof(struct mc_sched_config, field), \
		       type,                                    \
		       lo,                                      \
		       hi }                                     \
	}

const struct mc_config_entry mc_sched_config_table[] = {
	SC_OPT("kvcache_balancing_threshold", balancing_threshold, MC_CONFIG_DOUBLE, "1.0",
	       "global policy: fetch the best prefix when best / own exceeds this", 0, 1000000),
	SC_OPT("fetch_only_if_faster", fetch_only_if_faster, MC_CONFIG_BOOL, "true",
	       "and only when transfer + prefill beats prefilling from the own prefix (4.3)", 0, 0),
	SC_OPT("reject", reject, MC_CONFIG_BOOL, "false",
	       "reject requests whose predicted TTFT or TBT breaks its SLO (4.5)", 0, 0),
	SC_OPT("predict_decode", predict_decode, MC_CONFIG_BOOL, "true",
	       "judge decode load at the moment the prefill would end, not now", 0, 0),
	SC_OPT("decode_time_s", decode_time_s, MC_CONFIG_DOUBLE, "20",
	       "the uniform decode time the load prediction assumes, seconds", 0, 1000000),
};
const size_t mc_sched_config_table_len =
	sizeof(mc_sched_config_table) / sizeof(mc_sched_config_table[0]);

void mc_sched_config_defaults(struct mc_sched_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->policy = MC_SCHED_GLOBAL;
	mc_config_entry_defaults(mc_sched_config_table, mc_sched_config_table_len, cfg);
}

/* xorshift64*: the random policy's generator. */
static uint64_t next_rand(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static uint32_t tokens_of(const struct mc_costmodel *cm, const struct mc_sched_req *req,
			  uint32_t blocks)
{
	uint64_t t = (uint64_t)blocks * cm->block_tokens;
	return t < req->input_len ? (uint32_t)t : req->input_len;
}

static double min_rate(const struct mc_costmodel *cm, double a, double b)
{
	double dflt = mc_cost_transfer_Bps(cm);
	if (a <= 0)
		a = dflt;
	if (b <= 0)
		b = dflt;
	return a < b ? a : b;
}

/* The plan for instance i: its prefix, fetch and predicted times. */
static void plan(const struct mc_sched_config *cfg, const struct mc_costmodel *cm,
		 const struct mc_sched_prefill *pre, int i, uint32_t local, int best_i,
		 uint32_t best, const struct mc_sched_req *req, double now_s,
		 struct mc_sched_choice *c)
{
	memset(c, 0, sizeof(*c));
	c->prefill = i;
	c->decode = -1;
	c->fetch_from = -1;
	c->local_blocks = local;
	c->prefix_blocks = local;
	c->queue_s = pre[i].free_at_s > now_s ? pre[i].free_at_s - now_s : 0;
	if (cfg->policy == MC_SCHED_GLOBAL && best > local &&
	    (local == 0 || (double)best / local > cfg->balancing_threshold)) {
		double rate = min_rate(cm, pre[i].bandwidth_Bps, pre[best_i].bandwidth_Bps);
		uint32_t lt = tokens_of(cm, req, local), bt = tokens_of(cm, req, best);
		if (!cfg->fetch_only_if_faster ||
		    mc_cost_fetch_wins(cm, req->input_len, lt, bt, rate)) {
			c->prefix_blocks = best;
			c->fetch_from = best_i;
			c->fetch_blocks = best - local;
			c->transfer_s = mc_cost_transfer_s(cm, (double)bt - lt, rate);
		}
	}
	c->prefix_tokens = tokens_of(cm, req, c->prefix_blocks);
	c->prefill_s = mc_cost_prefill_s(cm, req->input_len, c->prefix_tokens);
	c->ttft_s = mc_cost_ttft_s(c->queue_s, c->transfer_s, c->prefill_s);
}

double mc_sched_decode_ctx_at(const struct mc_sched_config *cfg, const struct mc_sched_decode *d,
			      double t)
{
	double ctx = 0;
	if (!d->jobs)
		return d->ctx_tokens;
	for (size_t j = 0; j < d->n_jobs; j++)
		if (d->jobs[j].start_s <= t && t < d->jobs[j].start_s + cfg->decode_time_s)
			ctx += d->jobs[j].ctx_tokens;
	return ctx;
}

mc_status mc_sched_pick(const struct mc_sched_config *cfg, const struct mc_costmodel *cm,
			const struct mc_sched_prefill *pre, size_t n_pre,
			const uint32_t *prefix_blocks, const struct mc_sched_decode *dec,
			size_t n_dec, const struct mc_sched_req *req, double now_s, uint64_t *rng,
			struct mc_sched_choice *out)
{
	int best_i = -1, pick = -1;
	uint32_t best = 0;
	size_t n_up = 0;
	struct mc_sched_choice c, chosen;

	if (!cfg || !cm || !pre || !prefix_blocks || !req || !out || (n_dec && !dec) ||
	    n_pre > (size_t)INT32_MAX || n_dec > (size_t)INT32_MAX || cm->block_tokens <= 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "scheduler called without its tables");
	for (size_t i = 0; i < n_pre; i++) {
		uint32_t m = prefix_blocks[i] < req->n_blocks ? prefix_blocks[i] : req->n_blocks;
		if (!pre[i].up)
			continue;
		n_up++;
		if (best_i < 0 || m > best) {
			best = m;
			best_i = (int)i;
		}
	}
	if (!n_up)
		return mc_set_error(MC_ERR_NOT_FOUND, "no prefill instance is up");
	memset(&chosen, 0, sizeof(chosen));
	chosen.prefill = -1;

	if (cfg->policy == MC_SCHED_RANDOM) {
		size_t k = (size_t)(next_rand(rng) % n_up);
		for (size_t i = 0; i < n_pre; i++)
			if (pre[i].up && !k--) {
				pick = (int)i;
				break;
			}
	}
	for (size_t i = 0; i < n_pre; i++) {
		uint32_t m = prefix_blocks[i] < req->n_blocks ? prefix_blocks[i] : req->n_blocks;
		bool better;
		if (!pre[i].up || (pick >= 0 && (int)i != pick))
			continue;
		plan(cfg, cm, pre, (int)i, m, best_i, best, req, now_s, &c);
		if (chosen.prefill < 0) {
			better = true;
		} else if (cfg->policy == MC_SCHED_LOAD) {
			better = c.queue_s < chosen.queue_s;
		} else if (cfg->policy == MC_SCHED_PREFIX) {
			better = c.local_blocks > chosen.local_blocks ||
				 (c.local_blocks == chosen.local_blocks &&
				  c.queue_s < chosen.queue_s);
		} else {
			better = c.ttft_s < chosen.ttft_s;
		}
		if (better)
			chosen = c;
	}

	/* decode: the least predicted TBT once the request has joined */
	for (size_t d = 0; d < n_dec; d++) {
		double t = cfg->predict_decode ? now_s + chosen.ttft_s : now_s;
		double tbt;
		if (!dec[d].up)
			continue;
		tbt = mc_cost_tbt_s(cm, mc_sched_decode_ctx_at(cfg, &dec[d], t) + req->input_len);
		if (chosen.decode < 0 || tbt < chosen.tbt_s) {
			chosen.decode = (int)d;
			chosen.tbt_s = tbt;
		}
	}
	chosen.verdict = MC_SCHED_ACCEPT;
	if (cfg->reject) {
		if (chosen.ttft_s > cm->ttft_slo_s)
			chosen.verdict = MC_SCHED_REJECT_TTFT;
		else if (n_dec && (chosen.decode < 0 || chosen.tbt_s > cm->tbt_slo_s))
			chosen.verdict = MC_SCHED_REJECT_TBT;
	}
	*out = chosen;
	return MC_OK;
}

void mc_sched_commit_prefill(const struct mc_sched_choice *ch, struct mc_sched_prefill *pre,
			     double now_s)
{
	if (ch->verdict != MC_SCHED_ACCEPT || ch->prefill < 0)
		return;
	pre[ch->prefill].free_at_s = now_s + ch->ttft_s;
}

/*
 * tests/unit/test_conductor_sched.c - Algorithm 1 and the other prefill
 * policies (conductor/sched.h) on small tables whose answer can be worked
 * out by hand: which instance, which prefix, fetched from where, the
 * predicted times, decode by predicted TBT, and early rejection.
 *
 * Requests are 16 blocks of 512 tokens (8192 tokens) unless a case says
 * otherwise; T(8192) = 0.938316 s and T(8192, 4096) = 0.482143 s.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/sched.h"

#define assert_near(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

static struct mc_costmodel cm;
static struct mc_sched_config cfg;
static struct mc_sched_prefill pre[4];
static const struct mc_sched_req req16 = {.input_len = 8192, .n_blocks = 16};
static uint64_t rng = 1;

static int setup(void **state)
{
	mc_costmodel_defaults(&cm);
	mc_sched_config_defaults(&cfg);
	for (int i = 0; i < 4; i++)
		pre[i] = (struct mc_sched_prefill){.free_at_s = 0, .bandwidth_Bps = 0, .up = true};
	rng = 1;
	return 0;
}

static struct mc_sched_choice pick(size_t n, const uint32_t *prefix, const struct mc_sched_req *r,
				   double now)
{
	struct mc_sched_choice c;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, n, prefix, NULL, 0, r, now, &rng, &c),
			 MC_OK);
	return c;
}

static void load_takes_the_shortest_queue(void **state)
{
	const uint32_t prefix[3] = {16, 0, 8};
	cfg.policy = MC_SCHED_LOAD;
	pre[0].free_at_s = 15;
	pre[1].free_at_s = 12;
	pre[2].free_at_s = 19;
	struct mc_sched_choice c = pick(3, prefix, &req16, 10);
	assert_int_equal(c.prefill, 1);
	assert_near(c.queue_s, 2, 1e-12);
	assert_int_equal(c.prefix_blocks, 0); /* cache-blind: instance 1 holds nothing */
	assert_int_equal(c.fetch_from, -1);
	/* queues already drained count as 0, and ties go to the lowest index */
	c = pick(3, prefix, &req16, 30);
	assert_int_equal(c.prefill, 0);
	assert_near(c.queue_s, 0, 0);
	assert_int_equal(c.prefix_blocks, 16);
	assert_int_equal(c.prefix_tokens, 8192);
	assert_near(c.ttft_s, 0, 1e-12);
}

static void prefix_takes_the_longest_local_match(void **state)
{
	const uint32_t prefix[3] = {4, 8, 8};
	cfg.policy = MC_SCHED_PREFIX;
	pre[1].free_at_s = 100;
	pre[2].free_at_s = 50;
	struct mc_sched_choice c = pick(3, prefix, &req16, 0);
	assert_int_equal(c.prefill, 2); /* 8 blocks, the shorter queue of the two */
	assert_int_equal(c.prefix_blocks, 8);
	assert_near(c.ttft_s, 50 + 0.482143, 1e-5);
}

/* local-cache-aware: queue + prefill over its own prefix, no fetch. */
static void local_weighs_queue_against_own_prefix(void **state)
{
	const uint32_t prefix[2] = {8, 0};
	cfg.policy = MC_SCHED_LOCAL;
	pre[0].free_at_s = 10;
	struct mc_sched_choice c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.prefill, 1); /* 0.94 s beats 10 + 0.48 s */
	assert_int_equal(c.prefix_blocks, 0);
	assert_near(c.ttft_s, 0.938316, 1e-5);
	pre[0].free_at_s = 0.3;
	c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.prefill, 0); /* 0.3 + 0.48 s beats 0.94 s */
	assert_near(c.ttft_s, 0.3 + 0.482143, 1e-5);
}

/* global-cache-aware: the idle instance fetches the busy one's prefix. */
static void global_fetches_the_best_prefix(void **state)
{
	const uint32_t prefix[3] = {8, 0, 0};
	cfg.policy = MC_SCHED_GLOBAL;
	pre[0].free_at_s = 10;
	struct mc_sched_choice c = pick(3, prefix, &req16, 0);
	double xfer = 4096 * 327680.0 / 87e9;
	assert_int_equal(c.prefill, 1);
	assert_int_equal(c.local_blocks, 0);
	assert_int_equal(c.prefix_blocks, 8);
	assert_int_equal(c.fetch_from, 0);
	assert_int_equal(c.fetch_blocks, 8);
	assert_int_equal(c.prefix_tokens, 4096);
	assert_near(c.transfer_s, xfer, 1e-12);
	assert_near(c.prefill_s, 0.482143, 1e-5);
	assert_near(c.ttft_s, xfer + 0.482143, 1e-5);
	/* the holder itself, idle, needs no fetch and wins */
	pre[0].free_at_s = 0;
	c = pick(3, prefix, &req16, 0);
	assert_int_equal(c.prefill, 0);
	assert_int_equal(c.fetch_from, -1);
	assert_near(c.transfer_s, 0, 0);
}

/* best / own must exceed kvcache_balancing_threshold (4 blocks own, 8 best: 2). */
static void threshold_gates_the_fetch(void **state)
{
	const uint32_t prefix[2] = {8, 4};
	pre[0].free_at_s = 10;
	cfg.balancing_threshold = 1.0;
	struct mc_sched_choice c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.prefill, 1);
	assert_int_equal(c.fetch_from, 0);
	assert_int_equal(c.fetch_blocks, 4);
	cfg.balancing_threshold = 2.0; /* 2 > 2 is false */
	c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.prefill, 1);
	assert_int_equal(c.fetch_from, -1);
	assert_int_equal(c.prefix_blocks, 4);
	assert_near(c.ttft_s, mc_cost_prefill_s(&cm, 8192, 2048), 1e-9);
	/* an own prefix of 0 makes the ratio infinite: any threshold fetches */
	const uint32_t zero[2] = {8, 0};
	cfg.balancing_threshold = 1e9;
	c = pick(2, zero, &req16, 0);
	assert_int_equal(c.fetch_from, 0);
}

/* 4.3: over a slow link recomputing wins, and no fetch is planned. */
static void slow_link_recomputes(void **state)
{
	const uint32_t prefix[2] = {8, 0};
	pre[0].free_at_s = 10;
	pre[1].bandwidth_Bps = 1e9; /* 1.34 s for 4096 tokens */
	struct mc_sched_choice c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.prefill, 1);
	assert_int_equal(c.fetch_from, -1);
	assert_near(c.ttft_s, 0.938316, 1e-5);
	/* the sender's rate counts as well: the slower end sets the time */
	pre[1].bandwidth_Bps = 0;
	pre[0].bandwidth_Bps = 1e9;
	c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.fetch_from, -1);
	cfg.fetch_only_if_faster = false;
	c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.fetch_from, 0);
	assert_near(c.transfer_s, 4096 * 327680.0 / 1e9, 1e-9);
}

/* A partial last block counts only the prompt's own tokens. */
static void partial_last_block_counts_its_tokens(void **state)
{
	const struct mc_sched_req r = {.input_len = 1000, .n_blocks = 2};
	const uint32_t prefix[1] = {5}; /* more than the request has: 2 */
	struct mc_sched_choice c = pick(1, prefix, &r, 0);
	assert_int_equal(c.prefix_blocks, 2);
	assert_int_equal(c.prefix_tokens, 1000);
	assert_near(c.prefill_s, 0, 1e-12);
}

static void random_picks_only_instances_that_are_up(void **state)
{
	const uint32_t prefix[4] = {0, 0, 0, 0};
	int seen[4] = {0};
	uint64_t again;
	cfg.policy = MC_SCHED_RANDOM;
	pre[2].up = false;
	for (int k = 0; k < 300; k++)
		seen[pick(4, prefix, &req16, 0).prefill]++;
	assert_int_equal(seen[2], 0);
	assert_true(seen[0] > 50 && seen[1] > 50 && seen[3] > 50);
	/* the same state gives the same choice */
	again = rng;
	int first = pick(4, prefix, &req16, 0).prefill;
	rng = again;
	assert_int_equal(pick(4, prefix, &req16, 0).prefill, first);
}

static void down_instances_are_never_chosen(void **state)
{
	const uint32_t prefix[2] = {16, 0};
	struct mc_sched_choice c;
	pre[0].up = false;
	c = pick(2, prefix, &req16, 0);
	assert_int_equal(c.prefill, 1);
	assert_int_equal(c.fetch_from, -1); /* its blocks are not reachable either */
	pre[1].up = false;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 2, prefix, NULL, 0, &req16, 0, &rng, &c),
			 MC_ERR_NOT_FOUND);
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 2, NULL, NULL, 0, &req16, 0, &rng, &c),
			 MC_ERR_INVALID_PARAMS);
}

static void commit_books_the_queue(void **state)
{
	const uint32_t prefix[2] = {0, 0};
	cfg.policy = MC_SCHED_LOAD;
	struct mc_sched_choice c = pick(2, prefix, &req16, 5);
	mc_sched_commit_prefill(&c, pre, 5);
	assert_near(pre[0].free_at_s, 5 + 0.938316, 1e-5);
	c = pick(2, prefix, &req16, 5);
	assert_int_equal(c.prefill, 1);
	mc_sched_commit_prefill(&c, pre, 5);
	c = pick(2, prefix, &req16, 5.5);
	assert_int_equal(c.prefill, 0);
	assert_near(c.queue_s, 0.438316, 1e-5);
	/* a rejected choice books nothing */
	c.verdict = MC_SCHED_REJECT_TTFT;
	mc_sched_commit_prefill(&c, pre, 5.5);
	assert_near(pre[0].free_at_s, 5 + 0.938316, 1e-5);
}

/* Decode: least predicted TBT, counted when the request's prefill ends. */
static void decode_by_predicted_tbt(void **state)
{
	const uint32_t prefix[1] = {0};
	/* instance 0 is busy now but its jobs finish (t_d = 20 s) before
	 * this prefill ends; instance 1 is idle now but a big job joins it */
	const struct mc_sched_decode_job j0[] = {{.start_s = 0, .ctx_tokens = 900000}};
	const struct mc_sched_decode_job j1[] = {{.start_s = 20, .ctx_tokens = 500000}};
	struct mc_sched_decode dec[2] = {
		{.ctx_tokens = 900000, .jobs = j0, .n_jobs = 1, .up = true},
		{.ctx_tokens = 0, .jobs = j1, .n_jobs = 1, .up = true},
	};
	struct mc_sched_choice c;
	pre[0].free_at_s = 25; /* prefill ends at 25 + 0.94 s */
	cfg.decode_time_s = 20;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 2, &req16, 1, &rng, &c),
			 MC_OK);
	assert_int_equal(c.decode, 0);
	assert_near(c.tbt_s, mc_cost_tbt_s(&cm, 8192), 1e-12);
	/* without prediction the load of now decides */
	cfg.predict_decode = false;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 2, &req16, 1, &rng, &c),
			 MC_OK);
	assert_int_equal(c.decode, 1);
	assert_near(c.tbt_s, mc_cost_tbt_s(&cm, 8192), 1e-12);
	assert_near(mc_sched_decode_ctx_at(&cfg, &dec[1], 20), 500000, 0);
	assert_near(mc_sched_decode_ctx_at(&cfg, &dec[1], 40), 0, 0);
}

static void predictions_above_the_slo_are_rejected(void **state)
{
	const uint32_t prefix[1] = {0};
	struct mc_sched_decode dec[1] = {{.ctx_tokens = 0, .up = true}};
	struct mc_sched_choice c;
	cfg.reject = true;
	pre[0].free_at_s = 29; /* 29 + 0.94 s: under 30 */
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 1, &req16, 0, &rng, &c),
			 MC_OK);
	assert_int_equal(c.verdict, MC_SCHED_ACCEPT);
	pre[0].free_at_s = 29.1;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 1, &req16, 0, &rng, &c),
			 MC_OK);
	assert_int_equal(c.verdict, MC_SCHED_REJECT_TTFT);
	pre[0].free_at_s = 0;
	/* TBT 100 ms holds (0.1 - 0.00875) / 2.048e-8 = 4.455M tokens of context */
	dec[0].ctx_tokens = 4.46e6;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 1, &req16, 0, &rng, &c),
			 MC_OK);
	assert_int_equal(c.verdict, MC_SCHED_REJECT_TBT);
	dec[0].ctx_tokens = 4.4e6;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 1, &req16, 0, &rng, &c),
			 MC_OK);
	assert_int_equal(c.verdict, MC_SCHED_ACCEPT);
	/* no decode instance up: nothing can decode it */
	dec[0].up = false;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 1, &req16, 0, &rng, &c),
			 MC_OK);
	assert_int_equal(c.verdict, MC_SCHED_REJECT_TBT);
	assert_int_equal(c.decode, -1);
	cfg.reject = false;
	pre[0].free_at_s = 100;
	assert_int_equal(mc_sched_pick(&cfg, &cm, pre, 1, prefix, dec, 1, &req16, 0, &rng, &c),
			 MC_OK);
	assert_int_equal(c.verdict, MC_SCHED_ACCEPT);
}

static void policy_names_round_trip(void **state)
{
	enum mc_sched_policy p;
	for (int i = MC_SCHED_RANDOM; i <= MC_SCHED_GLOBAL; i++) {
		assert_int_equal(mc_sched_policy_parse(mc_sched_policy_name(i), &p), MC_OK);
		assert_int_equal(p, i);
	}
	assert_int_equal(mc_sched_policy_parse("fastest", &p), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_sched_policy_parse(NULL, &p), MC_ERR_INVALID_PARAMS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(load_takes_the_shortest_queue, setup),
		cmocka_unit_test_setup(prefix_takes_the_longest_local_match, setup),
		cmocka_unit_test_setup(local_weighs_queue_against_own_prefix, setup),
		cmocka_unit_test_setup(global_fetches_the_best_prefix, setup),
		cmocka_unit_test_setup(threshold_gates_the_fetch, setup),
		cmocka_unit_test_setup(slow_link_recomputes, setup),
		cmocka_unit_test_setup(partial_last_block_counts_its_tokens, setup),
		cmocka_unit_test_setup(random_picks_only_instances_that_are_up, setup),
		cmocka_unit_test_setup(down_instances_are_never_chosen, setup),
		cmocka_unit_test_setup(commit_books_the_queue, setup),
		cmocka_unit_test_setup(decode_by_predicted_tbt, setup),
		cmocka_unit_test_setup(predictions_above_the_slo_are_rejected, setup),
		cmocka_unit_test_setup(policy_names_round_trip, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

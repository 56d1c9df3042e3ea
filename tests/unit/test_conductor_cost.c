/*
 * tests/unit/test_conductor_cost.c - the cost model (conductor/costmodel.h)
 * against numbers worked out by hand from paper.md 5.4 and Table 1: the
 * fitted prefill times beside Fig. 14a, the 95%-prefix saving (A17), the
 * least reuse bandwidth of Eq. 2 (A15), the theoretical transfer times of
 * Fig. 13b (A18) and the fetch-versus-recompute decision (4.3).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/costmodel.h"

#define assert_near(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

static void sizes_follow_table_1(void **state)
{
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	assert_near(mc_cost_kv_bytes_per_token(&cm), 327680, 0);
	/* 128k tokens are 40 GiB; 1 TB holds 3.05M tokens (A16) */
	assert_near(131072 * mc_cost_kv_bytes_per_token(&cm), 40.0 * (1ull << 30), 1);
	assert_near(1e12 / mc_cost_kv_bytes_per_token(&cm), 3.05e6, 0.01e6);
	/* 800 Gbps at 87% is 87 GB/s, below the 128 GB/s host to device */
	assert_near(mc_cost_transfer_Bps(&cm), 87e9, 1);
	cm.nic_bps = 8 * 200e9;
	cm.nic_efficiency = 1;
	assert_near(mc_cost_transfer_Bps(&cm), 128e9, 1);
}

/* T(n) = 1.082e-4 n + 7.74e-10 n^2 beside the Fig. 14a read-offs. */
static void prefill_fit_follows_figure_14a(void **state)
{
	static const double n[] = {8192, 16384, 32768, 65536, 131072};
	static const double read_off[] = {1.0, 2.0, 4.5, 10.3, 27.5};
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	assert_near(mc_cost_prefill_full_s(&cm, 8192), 0.886374 + 0.051942, 1e-5);
	assert_near(mc_cost_prefill_full_s(&cm, 131072), 14.181990 + 13.297219, 1e-5);
	for (int i = 0; i < 5; i++)
		assert_true(fabs(mc_cost_prefill_full_s(&cm, n[i]) / read_off[i] - 1) < 0.07);
	assert_near(mc_cost_prefill_full_s(&cm, 0), 0, 0);
}

/* Reusing a prefix: T(n) - T(p); p is clamped to [0, n]. */
static void incremental_prefill_subtracts_the_prefix(void **state)
{
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	assert_near(mc_cost_prefill_s(&cm, 8192, 4096), 0.938316 - (0.443187 + 0.012986), 1e-5);
	assert_near(mc_cost_prefill_s(&cm, 8192, 0), mc_cost_prefill_full_s(&cm, 8192), 1e-12);
	assert_near(mc_cost_prefill_s(&cm, 8192, -5), mc_cost_prefill_full_s(&cm, 8192), 1e-12);
	assert_near(mc_cost_prefill_s(&cm, 8192, 9000), 0, 1e-12);
	/* A17: a 95% prefix at 128k saves 92.7% (fit) and 91.5% (Eq. 1) */
	double n = 131072, p = 0.95 * n;
	assert_near(1 - mc_cost_prefill_s(&cm, n, p) / mc_cost_prefill_full_s(&cm, n), 0.927,
		    0.001);
	assert_near(mc_cost_flops(&cm, p) / mc_cost_flops(&cm, n), 0.915, 0.001);
}

/* Table 1 at 100% MFU: 0.46 s at 8k tokens and 24.3 s at 128k. */
static void flops_follow_equation_1(void **state)
{
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	assert_near(mc_cost_flops(&cm, 8192) / cm.gpu_flops, 0.458, 0.001);
	assert_near(mc_cost_flops(&cm, 131072) / cm.gpu_flops, 24.24, 0.01);
}

/* A15: reuse of an 8192-token prefix beats recompute above 5.86 GB/s on
 * 8xA800 and 18.6 GB/s on 8xH800. */
static void least_reuse_bandwidth_follows_equation_2(void **state)
{
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	assert_near(mc_cost_min_reuse_Bps(&cm, 8192) / 1e9, 5.86, 0.01);
	cm.gpu_flops = 8 * 989e12;
	assert_near(mc_cost_min_reuse_Bps(&cm, 8192) / 1e9, 18.57, 0.01);
}

/* A18: a synthetic prompt's KV (15,325 tokens on average) over the link. */
static void transfer_times_follow_figure_13b(void **state)
{
	static const double gbps[] = {24, 40, 80, 100, 160, 400};
	static const double secs[] = {1.674, 1.004, 0.502, 0.402, 0.251, 0.100};
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	cm.nic_efficiency = 1;
	for (int i = 0; i < 6; i++) {
		cm.nic_bps = gbps[i] * 1e9;
		assert_near(mc_cost_transfer_s(&cm, 15325, 0), secs[i], 0.001);
	}
	assert_near(mc_cost_transfer_s(&cm, 1000, 327680e3), 1.0, 1e-9);
	assert_near(mc_cost_transfer_s(&cm, 0, 0), 0, 0);
}

/* 4.3: fetching 4096 tokens at 87 GB/s (15 ms) and prefilling the other
 * half beats recomputing all 8192 (0.94 s); at 1 GB/s (1.34 s) it does not. */
static void fetch_wins_only_when_faster(void **state)
{
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	assert_near(mc_cost_transfer_s(&cm, 4096, 0), 4096 * 327680.0 / 87e9, 1e-12);
	assert_true(mc_cost_fetch_wins(&cm, 8192, 0, 4096, 0));
	assert_false(mc_cost_fetch_wins(&cm, 8192, 0, 4096, 1e9));
	assert_false(mc_cost_fetch_wins(&cm, 8192, 4096, 4096, 0));
	assert_false(mc_cost_fetch_wins(&cm, 8192, 4096, 1024, 0));
	/* the break-even rate lies between: 4096 x 327680 / (T(8192) - T(8192, 4096)) */
	double be = 4096 * 327680.0 / (0.938316 - 0.482143);
	assert_true(mc_cost_fetch_wins(&cm, 8192, 0, 4096, be * 1.01));
	assert_false(mc_cost_fetch_wins(&cm, 8192, 0, 4096, be * 0.99));
}

static void ttft_and_tbt_add_up(void **state)
{
	struct mc_costmodel cm;
	mc_costmodel_defaults(&cm);
	assert_near(mc_cost_ttft_s(1.5, 0.25, 2), 3.75, 1e-12);
	assert_near(mc_cost_tbt_s(&cm, 0), 0.00875, 1e-9);
	assert_near(mc_cost_tbt_s(&cm, 10000), 0.00875 + 10000 * 2.048e-8, 1e-9);
	assert_near(mc_cost_tbt_s(&cm, -3), 0.00875, 1e-9);
	assert_near(cm.ttft_slo_s, 30, 0);
	assert_near(cm.tbt_slo_s, 0.1, 0);
}

/* A fitted regression from a file; anything wrong leaves the model as it was. */
static void model_file_overlays_all_or_nothing(void **state)
{
	struct mc_costmodel cm, before;
	static const char fit[] = "{\"prefill_lin_s\": 1.1e-4, \"prefill_quad_s\": 7.5e-10, "
				  "\"layers\": 64, \"ttft_slo_s\": 10}";
	static const char *const bad[] = {
		"",
		"[1]",
		"{\"prefill_lin_s\": 1e-4,}",
		"{\"bogus\": 1}",
		"{\"prefill_lin_s\": \"fast\"}",
		"{\"layers\": 1.5}",
		"{\"nic_bps\": 0}",
		"{\"prefill_lin_s\": -1}",
		"{\"ttft_slo_s\": 5, \"ttft_slo_s\": 6}",
		"{\"prefill_quad_s\": 1e-9, \"gqa\": 0}",
	};
	mc_costmodel_defaults(&cm);
	assert_int_equal(mc_costmodel_load_buffer(&cm, fit, strlen(fit)), MC_OK);
	assert_near(cm.prefill_lin_s, 1.1e-4, 0);
	assert_near(cm.prefill_quad_s, 7.5e-10, 0);
	assert_int_equal(cm.layers, 64);
	assert_near(cm.ttft_slo_s, 10, 0);
	assert_near(cm.nic_bps, 800e9, 0); /* untouched keys keep their value */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		before = cm;
		if (mc_costmodel_load_buffer(&cm, bad[i], strlen(bad[i])) == MC_OK)
			fail_msg("accepted %s", bad[i]);
		assert_memory_equal(&cm, &before, sizeof(cm));
	}
	assert_int_equal(mc_costmodel_load_file(&cm, "/nonexistent/cost.json"),
			 MC_ERR_FILE_NOT_FOUND);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sizes_follow_table_1),
		cmocka_unit_test(prefill_fit_follows_figure_14a),
		cmocka_unit_test(incremental_prefill_subtracts_the_prefix),
		cmocka_unit_test(flops_follow_equation_1),
		cmocka_unit_test(least_reuse_bandwidth_follows_equation_2),
		cmocka_unit_test(transfer_times_follow_figure_13b),
		cmocka_unit_test(fetch_wins_only_when_faster),
		cmocka_unit_test(ttft_and_tbt_add_up),
		cmocka_unit_test(model_file_overlays_all_or_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

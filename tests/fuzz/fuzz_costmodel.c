/*
 * tests/fuzz/fuzz_costmodel.c - the cost-model file loader
 * (mc_costmodel_load_buffer, conductor/costmodel.h) on arbitrary bytes.
 *
 * Whatever the input, the loader must not crash or leak, must leave the
 * model untouched when it refuses, and a model it accepts must keep the
 * table's promises: positive rates, SLOs and G, integers in their range,
 * so that the scheduler never divides by zero.
 */
#include <stdint.h>
#include <string.h>

#include "conductor/costmodel.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_costmodel cm, before;
	mc_costmodel_defaults(&cm);
	before = cm;
	if (mc_costmodel_load_buffer(&cm, (const char *)data, size) != MC_OK) {
		check(memcmp(&cm, &before, sizeof(cm)) == 0);
		return 0;
	}
	check(cm.gpu_flops > 0 && cm.nic_bps > 0 && cm.nic_efficiency > 0);
	check(cm.ttft_slo_s > 0 && cm.tbt_slo_s > 0);
	check(cm.layers >= 1 && cm.dim >= 1 && cm.gqa >= 1 && cm.elem_size >= 1);
	check(cm.block_tokens >= 1);
	check(cm.prefill_lin_s >= 0 && cm.prefill_quad_s >= 0 && cm.h2d_Bps >= 0);
	check(mc_cost_transfer_Bps(&cm) > 0);
	return 0;
}

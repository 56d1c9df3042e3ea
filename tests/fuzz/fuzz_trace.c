/*
 * tests/fuzz/fuzz_trace.c - the trace loader (conductor/trace.h) on
 * arbitrary bytes.
 *
 * The input is a whole trace file's text, loaded both ways: strict (the
 * first malformed line fails) and with MC_TRACE_SKIP_BAD.  Whatever the
 * bytes, neither may crash or leak; the skipping load must succeed
 * (allocation aside), keep at least the requests the strict one kept, and
 * every request it returns must point at exactly n_blocks keys inside the
 * trace's pool.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conductor/trace.h"
#include "fuzz.h"

static void check_trace(const struct mc_trace *t)
{
	size_t keys = 0;
	for (size_t i = 0; i < t->n; i++) {
		const struct mc_trace_req *r = &t->reqs[i];
		check(r->timestamp_ms >= 0);
		check((r->n_blocks == 0) == (r->hash_ids == NULL));
		if (r->n_blocks)
			check(r->hash_ids >= t->pool &&
			      r->hash_ids + r->n_blocks <= t->pool + t->pool_n);
		keys += r->n_blocks;
	}
	check(keys == t->pool_n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_trace strict, skip;
	mc_status st_strict, st_skip;

	mc_trace_init(&strict);
	st_strict = mc_trace_load_buffer(&strict, (const char *)data, size, 1, 0);
	check_trace(&strict);
	mc_trace_init(&skip);
	st_skip = mc_trace_load_buffer(&skip, (const char *)data, size, 1, MC_TRACE_SKIP_BAD);
	check_trace(&skip);
	if (st_skip != MC_ERR_NOMEM && st_skip != MC_ERR_TOO_LARGE)
		check(st_skip == MC_OK);
	check(skip.n >= strict.n);
	if (st_strict == MC_OK)
		check(skip.skipped == 0 && skip.n == strict.n);
	mc_trace_release(&strict);
	mc_trace_release(&skip);
	return 0;
}

/*
 * tests/unit/test_store_faults.c - the store client's batch calls when an
 * allocation fails somewhere on their way.
 *
 * Each case sweeps mc_alloc_fault_arm(n) over the first allocations of one
 * call against an in-process master over loopback.  The failing
 * allocation may land in the client, its engine or the master (they share
 * the allocator), so the cases assert what must hold wherever it lands:
 * every per-key result is written, a key refused up front keeps its own
 * code, and a key reported stored reads back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "master/server.h"
#include "mooncake/store.h"
#include "store_t.h"
#include "support.h"

#define SWEEP	 80
#define SENTINEL ((mc_status)12345)
#define LEN	 4096

static struct mc_store *S;

static int group_setup(void **state)
{
	(void)state;
	if (st_master_start(NULL) != 0)
		return -1;
	S = st_client_new(16ull << 20, 16ull << 20);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	mc_store_free(S);
	st_master_stop();
	return 0;
}

/* A key reported stored reads back whole. */
static void expect_stored(const char *key, const void *want)
{
	void *got = NULL;
	int64_t n = mc_store_get(S, key, &got);
	if (n != LEN)
		fail_msg("%s reported stored, get gives %lld (%s)", key, (long long)n,
			 mc_last_error());
	assert_memory_equal(got, want, LEN);
	free(got);
}

/* put_batch and upsert_batch: the empty key (refused before anything is
 * sent) keeps MC_ERR_INVALID_PARAMS whatever fails for the others. */
static void put_batch_keeps_per_key_results(void **state)
{
	static char v[2][LEN];
	(void)state;
	mc_test_fill(v[0], LEN, 1);
	mc_test_fill(v[1], LEN, 2);
	for (long n = 1; n <= SWEEP; n++) {
		for (int upsert = 0; upsert < 2; upsert++) {
			char k[2][48];
			const char *keys[3] = {k[0], k[1], ""};
			const void *vals[3] = {v[0], v[1], v[0]};
			size_t lens[3] = {LEN, LEN, LEN};
			mc_status res[3] = {SENTINEL, SENTINEL, SENTINEL};
			for (int i = 0; i < 2; i++)
				snprintf(k[i], sizeof(k[i]), "pb-%d-%ld-%d", upsert, n, i);
			mc_alloc_fault_arm(n);
			if (upsert)
				(void)mc_store_upsert_batch(S, keys, vals, lens, 3, NULL, res);
			else
				(void)mc_store_put_batch(S, keys, vals, lens, 3, NULL, res);
			mc_alloc_fault_arm(0);
			if (res[2] != MC_ERR_INVALID_PARAMS)
				fail_msg(
					"fault %ld upsert %d: empty key's result %d, results %d %d",
					n, upsert, res[2], res[0], res[1]);
			for (int i = 0; i < 2; i++) {
				assert_int_not_equal(res[i], SENTINEL);
				if (res[i] == MC_OK)
					expect_stored(k[i], v[i]);
			}
		}
	}
}

/* batch_put_from: every result is written, even when the call's own
 * bookkeeping cannot be allocated; the empty key keeps its own code. */
static void batch_put_from_fills_every_result(void **state)
{
	void *buf = aligned_alloc(4096, 2 * LEN);
	(void)state;
	assert_non_null(buf);
	mc_test_fill(buf, 2 * LEN, 3);
	assert_int_equal(mc_store_register_buffer(S, buf, 2 * LEN), MC_OK);
	for (long n = 1; n <= SWEEP; n++) {
		char k[2][48];
		const char *keys[3] = {k[0], k[1], ""};
		void *bufs[3] = {buf, (char *)buf + LEN, buf};
		size_t lens[3] = {LEN, LEN, LEN};
		mc_status res[3] = {SENTINEL, SENTINEL, SENTINEL};
		for (int i = 0; i < 2; i++)
			snprintf(k[i], sizeof(k[i]), "pf-%ld-%d", n, i);
		mc_alloc_fault_arm(n);
		(void)mc_store_batch_put_from(S, keys, bufs, lens, 3, NULL, res);
		mc_alloc_fault_arm(0);
		if (res[2] != MC_ERR_INVALID_PARAMS)
			fail_msg("fault %ld: empty key's result %d, results %d %d", n, res[2],
				 res[0], res[1]);
		for (int i = 0; i < 2; i++) {
			assert_int_not_equal(res[i], SENTINEL);
			if (res[i] == MC_OK)
				expect_stored(k[i], bufs[i]);
		}
	}
	assert_int_equal(mc_store_unregister_buffer(S, buf), MC_OK);
	free(buf);
}

/* batch_is_exist: every result is written (1, 0 or a status). */
static void batch_is_exist_fills_every_result(void **state)
{
	static char v[LEN];
	const char *keys[2] = {"ex-present", "ex-absent"};
	(void)state;
	mc_test_fill(v, LEN, 4);
	assert_int_equal(mc_store_put(S, keys[0], v, LEN, NULL), MC_OK);
	for (long n = 1; n <= SWEEP; n++) {
		int res[2] = {SENTINEL, SENTINEL};
		mc_status rc;
		mc_alloc_fault_arm(n);
		rc = mc_store_batch_is_exist(S, keys, 2, res);
		mc_alloc_fault_arm(0);
		for (int i = 0; i < 2; i++)
			if (res[i] == SENTINEL)
				fail_msg("fault %ld: result %d not written (call gave %d)", n, i,
					 rc);
		if (rc == MC_OK) {
			assert_int_equal(res[0], 1);
			assert_int_equal(res[1], 0);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(put_batch_keeps_per_key_results),
		cmocka_unit_test(batch_put_from_fills_every_result),
		cmocka_unit_test(batch_is_exist_fills_every_result),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/*
 * tests/unit/test_store_credit.c - puts through put credits
 * (store/client_credit.c, MC_STORE_PUT_CREDIT; master/credit.c) against an
 * in-process master over loopback: one-key and batch puts of same-sized
 * values go without PutStart and PutEnd (counted by the client's
 * per-message metrics), another client reads every object back with its
 * checksum checked, insert-if-absent keeps the first value, and what must
 * go the two-call way does: a config asking more of the placement, an
 * upsert, a master of minor 11.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mooncake/store.h"
#include "store/client_int.h" /* s->metrics */
#include "store/client_metrics.h"
#include "store/master_conn.h"
#include "store/proto.h"
#include "store_t.h"

#define SEG_SIZE  (64ull << 20)
#define LBUF_SIZE (16ull << 20)

static struct mc_store *A, *B;

static uint64_t rpcs(struct mc_store *s, uint16_t type)
{
	return atomic_load(&s->metrics->rpc[type].count);
}

static void fill(char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (char)(seed * 131 + i * 7 + (i >> 9));
}

static void one_key_puts_skip_start_and_end(void **state)
{
	const size_t len = 4096;
	char *v = malloc(len);
	uint64_t start0 = rpcs(A, MC_STORE_PUT_START), end0 = rpcs(A, MC_STORE_PUT_END);
	uint64_t cr0 = rpcs(A, MC_STORE_PUT_CREDIT);
	char key[32];

	(void)state;
	assert_non_null(v);
	for (unsigned i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "one-%u", i);
		fill(v, len, i);
		assert_int_equal(mc_store_put(A, key, v, len, NULL), MC_OK);
	}
	assert_int_equal(rpcs(A, MC_STORE_PUT_START), start0);
	assert_int_equal(rpcs(A, MC_STORE_PUT_END), end0);
	/* one ask for the first block, then one exchange a put */
	assert_int_equal(rpcs(A, MC_STORE_PUT_CREDIT) - cr0, 41);
	for (unsigned i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "one-%u", i);
		fill(v, len, i);
		st_expect_get(B, key, v, len);
	}
	/* insert-if-absent: success, the first value stays */
	fill(v, len, 999);
	assert_int_equal(mc_store_put(A, "one-3", v, len, NULL), MC_OK);
	fill(v, len, 3);
	st_expect_get(B, "one-3", v, len);
	free(v);
}

static void batches_skip_start_and_end(void **state)
{
	enum { N = 32 };
	const size_t len = 64 << 10; /* several chunks: chunk sums travel too */
	char *vals = malloc(N * len);
	const char *keys[N];
	const void *vp[N];
	size_t lens[N];
	mc_status res[N];
	char names[N][32];
	uint64_t bs0 = rpcs(A, MC_STORE_BATCH_PUT_START), cr0 = rpcs(A, MC_STORE_PUT_CREDIT);

	(void)state;
	assert_non_null(vals);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < N; i++) {
			snprintf(names[i], sizeof(names[i]), "batch-%d-%d", round, i);
			keys[i] = names[i];
			fill(vals + i * len, len, (unsigned)(round * N + i));
			vp[i] = vals + i * len;
			lens[i] = len;
		}
		assert_int_equal(mc_store_put_batch(A, keys, vp, lens, N, NULL, res), MC_OK);
		for (int i = 0; i < N; i++)
			assert_int_equal(res[i], MC_OK);
		for (int i = 0; i < N; i++)
			st_expect_get(B, keys[i], vals + i * len, len);
	}
	assert_int_equal(rpcs(A, MC_STORE_BATCH_PUT_START), bs0);
	/* the first batch asks for its blocks first: 4 exchanges for 3 batches */
	assert_int_equal(rpcs(A, MC_STORE_PUT_CREDIT) - cr0, 4);
	/* each answer decoded into an arena sized from the ones before, which
	 * holds its credits' strings until a later batch has used them */
	assert_true(atomic_load(&A->answer_per_key[MC_STORE_ANSWER_CREDIT]) > 0);
	free(vals);
}

static void others_go_the_two_call_way(void **state)
{
	char v[1000];
	struct mc_store_config two = {.replica_num = 2};
	uint64_t start0 = rpcs(A, MC_STORE_PUT_START), ups0 = rpcs(A, MC_STORE_UPSERT_START);
	uint64_t cr0 = rpcs(A, MC_STORE_PUT_CREDIT);

	(void)state;
	fill(v, sizeof(v), 7);
	assert_int_equal(mc_store_put(A, "two", v, sizeof(v), &two), MC_OK);
	assert_int_equal(rpcs(A, MC_STORE_PUT_START), start0 + 1);
	assert_int_equal(mc_store_upsert(A, "two", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(rpcs(A, MC_STORE_UPSERT_START), ups0 + 1);
	assert_int_equal(rpcs(A, MC_STORE_PUT_CREDIT), cr0);
	st_expect_get(B, "two", v, sizeof(v));

	/* a master of minor 11 is never asked */
	mc_store_proto_minor_set(11);
	{
		struct mc_store *old = st_client_new(0, LBUF_SIZE);

		assert_int_equal(mc_store_put(old, "old", v, sizeof(v), NULL), MC_OK);
		assert_int_equal(rpcs(old, MC_STORE_PUT_CREDIT), 0);
		assert_int_equal(rpcs(old, MC_STORE_PUT_START), 1);
		mc_store_free(old);
	}
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	st_expect_get(B, "old", v, sizeof(v));

	/* a value over 4 MiB takes the two calls and leaves no block held for it */
	{
		size_t big_len = (4u << 20) + 1;
		char *big = malloc(big_len);

		assert_non_null(big);
		fill(big, big_len, 9);
		start0 = rpcs(A, MC_STORE_PUT_START);
		cr0 = rpcs(A, MC_STORE_PUT_CREDIT);
		assert_int_equal(mc_store_put(A, "big", big, big_len, NULL), MC_OK);
		assert_int_equal(mc_store_put(A, "big2", big, big_len, NULL), MC_OK);
		assert_int_equal(rpcs(A, MC_STORE_PUT_START), start0 + 2);
		assert_int_equal(rpcs(A, MC_STORE_PUT_CREDIT), cr0);
		st_expect_get(B, "big2", big, big_len);
		free(big);
	}
}

/* A preferred segment: the credits are asked for there, the objects land there. */
static void preferred_segment_puts(void **state)
{
	char v[8192];
	struct mc_store_config on_a = st_prefer(A), on_b = st_prefer(B);
	uint64_t start0 = rpcs(B, MC_STORE_PUT_START), cr0 = rpcs(B, MC_STORE_PUT_CREDIT);
	char key[32];

	(void)state;
	for (unsigned i = 0; i < 20; i++) {
		struct mc_store_replica_desc d[2];
		const struct mc_store_config *c = i % 2 ? &on_b : &on_a;

		snprintf(key, sizeof(key), "pref-%u", i);
		fill(v, sizeof(v), 100 + i);
		assert_int_equal(mc_store_put(B, key, v, sizeof(v), c), MC_OK);
		assert_int_equal(mc_store_get_replica_desc(A, key, d, 2), 1);
		assert_string_equal(d[0].segment_name, c->preferred_segment);
		st_expect_get(A, key, v, sizeof(v));
	}
	assert_int_equal(rpcs(B, MC_STORE_PUT_START), start0);
	/* each put asks for its segment's next block: no ask alone after the first two */
	assert_int_equal(rpcs(B, MC_STORE_PUT_CREDIT) - cr0, 22);
}

/* A credit the master does not know (as after a new leader): refused, and
 * the put goes the two-call way and succeeds. */
static void a_refused_credit_falls_back(void **state)
{
	char v[4096];
	uint64_t start0, cr0;
	uint32_t n;

	(void)state;
	fill(v, sizeof(v), 11);
	assert_int_equal(mc_store_put(A, "warm", v, sizeof(v), NULL), MC_OK);
	pthread_mutex_lock(&A->credits.lock);
	n = A->credits.n;
	for (uint32_t i = 0; i < n; i++)
		A->credits.v[i].rep.id += 1u << 30; /* ids the master never gave */
	pthread_mutex_unlock(&A->credits.lock);
	assert_true(n >= 1);
	start0 = rpcs(A, MC_STORE_PUT_START);
	cr0 = rpcs(A, MC_STORE_PUT_CREDIT);
	fill(v, sizeof(v), 12);
	assert_int_equal(mc_store_put(A, "refused", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(rpcs(A, MC_STORE_PUT_CREDIT), cr0 + 1);
	assert_int_equal(rpcs(A, MC_STORE_PUT_START), start0 + 1);
	st_expect_get(B, "refused", v, sizeof(v));
}

/* Credits belong to the connection they were granted over: a master that
 * restarted (or a new leader) may have placed other objects over them, so
 * after a reconnect none of the old ones is written or named. */
static void a_new_connection_drops_the_credits(void **state)
{
	char v[4096];
	uint64_t old[64];
	uint32_t n;

	(void)state;
	fill(v, sizeof(v), 21);
	assert_int_equal(mc_store_put(A, "before-reset-1", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(mc_store_put(A, "before-reset-2", v, sizeof(v), NULL), MC_OK);
	pthread_mutex_lock(&A->credits.lock);
	n = A->credits.n < 64 ? A->credits.n : 64;
	for (uint32_t i = 0; i < n; i++)
		old[i] = A->credits.v[i].rep.id;
	pthread_mutex_unlock(&A->credits.lock);
	assert_true(n >= 1);
	mc_master_conn_reset(A->conn);
	fill(v, sizeof(v), 22);
	assert_int_equal(mc_store_put(A, "after-reset", v, sizeof(v), NULL), MC_OK);
	uint32_t kept = 0; /* old credits still in the pool (asserted unlocked) */

	pthread_mutex_lock(&A->credits.lock);
	for (uint32_t i = 0; i < A->credits.n; i++)
		for (uint32_t j = 0; j < n; j++)
			kept += A->credits.v[i].rep.id == old[j];
	pthread_mutex_unlock(&A->credits.lock);
	assert_int_equal(kept, 0);
	st_expect_get(B, "after-reset", v, sizeof(v));
}

static int setup(void **state)
{
	(void)state;
	setenv("MC_SHM_DISABLE", "1", 1);
	setenv("MC_STORE_PUT_CREDIT", "64", 1);
	return st_setup_pair(st_no_eviction, SEG_SIZE, LBUF_SIZE, &A, &B);
}

static int teardown(void **state)
{
	(void)state;
	st_teardown_pair(A, B);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_key_puts_skip_start_and_end),
		cmocka_unit_test(batches_skip_start_and_end),
		cmocka_unit_test(others_go_the_two_call_way),
		cmocka_unit_test(a_refused_credit_falls_back),
		cmocka_unit_test(preferred_segment_puts),
		cmocka_unit_test(a_new_connection_drops_the_credits),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

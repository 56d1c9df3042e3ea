/*
 * tests/unit/test_conductor_cache.c - the conductor's block cache
 * (conductor/cache.h): the hand-checkable LRU cases of paper.md 5.3
 * (selftest), prefix matching, pins that are never evicted, and a long
 * random run checked against a naive LRU written here in a few lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/cache.h"

static struct mc_kvcache *new_cache(uint64_t cap)
{
	struct mc_kvcache *c;
	assert_int_equal(mc_kvcache_new(cap, &c), MC_OK);
	return c;
}

/* selftest 1: nothing matches in an empty cache, and a capacity-0 cache stores nothing. */
static void empty_cache_matches_nothing(void **state)
{
	struct mc_kvcache *c = new_cache(4), *z = new_cache(0);
	const uint64_t req[] = {0, 1, 2};
	assert_int_equal(mc_kvcache_match(c, req, 3), 0);
	assert_int_equal(mc_kvcache_admit(z, req, 3), 0);
	assert_int_equal(mc_kvcache_insert(z, 7), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_kvcache_size(z), 0);
	mc_kvcache_free(c);
	mc_kvcache_free(z);
}

/* selftest 2: a request seen before matches in full; a sibling shares its prefix only. */
static void repeat_and_shared_prefix_match(void **state)
{
	struct mc_kvcache *c = new_cache(16);
	const uint64_t a[] = {0, 1, 2, 3}, b[] = {0, 1, 9}, d[] = {5, 1, 2};
	assert_int_equal(mc_kvcache_admit(c, a, 4), 4);
	assert_int_equal(mc_kvcache_match(c, a, 4), 4);
	assert_int_equal(mc_kvcache_match(c, b, 3), 2);
	/* a prefix match stops at the first miss even when later keys are cached */
	assert_int_equal(mc_kvcache_match(c, d, 3), 0);
	mc_kvcache_free(c);
}

/* selftest 3: a full cache evicts its least recently used block. */
static void full_cache_evicts_least_recent(void **state)
{
	struct mc_kvcache *c = new_cache(2);
	assert_int_equal(mc_kvcache_insert(c, 1), MC_OK);
	assert_int_equal(mc_kvcache_insert(c, 2), MC_OK);
	assert_int_equal(mc_kvcache_insert(c, 3), MC_OK);
	assert_false(mc_kvcache_contains(c, 1));
	assert_true(mc_kvcache_contains(c, 2));
	assert_true(mc_kvcache_contains(c, 3));
	assert_int_equal(mc_kvcache_evictions(c), 1);
	mc_kvcache_free(c);
}

/* selftest 4: a touch makes a block the most recent, so the other one goes. */
static void touch_protects_from_eviction(void **state)
{
	struct mc_kvcache *c = new_cache(2);
	assert_int_equal(mc_kvcache_insert(c, 1), MC_OK);
	assert_int_equal(mc_kvcache_insert(c, 2), MC_OK);
	assert_true(mc_kvcache_touch(c, 1));
	assert_int_equal(mc_kvcache_insert(c, 3), MC_OK);
	assert_true(mc_kvcache_contains(c, 1));
	assert_false(mc_kvcache_contains(c, 2));
	assert_false(mc_kvcache_touch(c, 2));
	mc_kvcache_free(c);
}

/* selftest 5: a request stamps its blocks last to first, so the root of
 * its prefix is the most recent and the leaf is evicted first. */
static void request_root_is_most_recent(void **state)
{
	struct mc_kvcache *c = new_cache(3);
	const uint64_t r[] = {10, 11, 12};
	uint64_t order[3];
	assert_int_equal(mc_kvcache_admit(c, r, 3), 3);
	assert_int_equal(mc_kvcache_lru_order(c, order, 3), 3);
	assert_int_equal(order[0], 10);
	assert_int_equal(order[1], 11);
	assert_int_equal(order[2], 12);
	assert_int_equal(mc_kvcache_insert(c, 99), MC_OK);
	assert_false(mc_kvcache_contains(c, 12));
	assert_true(mc_kvcache_contains(c, 10));
	mc_kvcache_free(c);
}

/* selftest 6: a request longer than the cache stores its head, never
 * evicting its own blocks; the tail is not stored. */
static void request_longer_than_cache_keeps_its_head(void **state)
{
	struct mc_kvcache *c = new_cache(2);
	const uint64_t r[] = {1, 2, 3, 4};
	assert_int_equal(mc_kvcache_admit(c, r, 4), 2);
	assert_true(mc_kvcache_contains(c, 1));
	assert_true(mc_kvcache_contains(c, 2));
	assert_false(mc_kvcache_contains(c, 3));
	assert_int_equal(mc_kvcache_pinned(c), 0);
	assert_int_equal(mc_kvcache_match(c, r, 4), 2);
	mc_kvcache_free(c);
}

/* selftest 7: a second request reusing a prefix refreshes it; the
 * unshared blocks of the first are the ones evicted. */
static void reused_prefix_survives_new_requests(void **state)
{
	struct mc_kvcache *c = new_cache(4);
	const uint64_t a[] = {0, 1, 2}, b[] = {0, 3}, d[] = {0, 4};
	assert_int_equal(mc_kvcache_admit(c, a, 3), 3); /* order 0 1 2 */
	assert_int_equal(mc_kvcache_admit(c, b, 2), 2); /* 0 3 1 2 */
	assert_int_equal(mc_kvcache_admit(c, d, 2), 2); /* 0 4 3 1; 2 evicted */
	assert_false(mc_kvcache_contains(c, 2));
	assert_int_equal(mc_kvcache_match(c, a, 3), 2);
	assert_int_equal(mc_kvcache_match(c, d, 2), 2);
	mc_kvcache_free(c);
}

/* Pinned blocks are skipped by eviction; a cache full of them refuses. */
static void pinned_blocks_are_never_evicted(void **state)
{
	struct mc_kvcache *c = new_cache(3);
	const uint64_t running[] = {1, 2};
	mc_status st;
	assert_int_equal(mc_kvcache_acquire(c, running, 2, &st), 2);
	assert_int_equal(st, MC_OK);
	assert_int_equal(mc_kvcache_pinned(c), 2);
	assert_int_equal(mc_kvcache_pins(c, 1), 1);
	for (uint64_t k = 100; k < 110; k++)
		assert_int_equal(mc_kvcache_insert(c, k), MC_OK);
	assert_true(mc_kvcache_contains(c, 1));
	assert_true(mc_kvcache_contains(c, 2));
	assert_true(mc_kvcache_contains(c, 109));
	assert_false(mc_kvcache_remove(c, 1));
	/* pin the third slot too: nothing is evictable */
	assert_int_equal(mc_kvcache_pin(c, 109), MC_OK);
	assert_int_equal(mc_kvcache_insert(c, 200), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_kvcache_size(c), 3);
	/* a second request pins the same block: it stays until both let go */
	assert_int_equal(mc_kvcache_pin(c, 1), MC_OK);
	assert_int_equal(mc_kvcache_pins(c, 1), 2);
	mc_kvcache_release(c, running, 2);
	assert_int_equal(mc_kvcache_pins(c, 1), 1);
	assert_int_equal(mc_kvcache_insert(c, 200), MC_OK); /* 2 was the only free one */
	assert_false(mc_kvcache_contains(c, 2));
	assert_true(mc_kvcache_contains(c, 1));
	assert_int_equal(mc_kvcache_unpin(c, 1), MC_OK);
	assert_int_equal(mc_kvcache_unpin(c, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_kvcache_unpin(c, 12345), MC_ERR_NOT_FOUND);
	assert_int_equal(mc_kvcache_pin(c, 12345), MC_ERR_NOT_FOUND);
	assert_int_equal(mc_kvcache_unpin(c, 109), MC_OK);
	assert_int_equal(mc_kvcache_pinned(c), 0);
	mc_kvcache_free(c);
}

/* A request that meets a cache full of another's pins stores what fits. */
static void acquire_stops_at_a_full_pinned_cache(void **state)
{
	struct mc_kvcache *c = new_cache(3);
	const uint64_t a[] = {1, 2}, b[] = {7, 8, 9};
	mc_status st;
	assert_int_equal(mc_kvcache_acquire(c, a, 2, &st), 2);
	assert_int_equal(mc_kvcache_acquire(c, b, 3, &st), 1);
	assert_int_equal(st, MC_ERR_NO_AVAILABLE_HANDLE);
	mc_kvcache_release(c, b, 1);
	mc_kvcache_release(c, a, 2);
	assert_int_equal(mc_kvcache_pinned(c), 0);
	assert_int_equal(mc_kvcache_size(c), 3);
	mc_kvcache_free(c);
}

static void capacity_above_the_limit_is_refused(void **state)
{
	struct mc_kvcache *c = (struct mc_kvcache *)1;
	assert_int_equal(mc_kvcache_new((uint64_t)MC_KVCACHE_MAX_BLOCKS + 1, &c),
			 MC_ERR_INVALID_PARAMS);
	assert_null(c);
}

/* ---- against a naive LRU ---- */

struct naive {
	uint64_t *keys; /* keys[0] most recent */
	size_t n, cap;
};

static void naive_insert(struct naive *l, uint64_t key)
{
	size_t i;
	for (i = 0; i < l->n && l->keys[i] != key; i++)
		;
	if (i == l->n) {
		if (l->n == l->cap)
			i = l->n - 1; /* evict the last */
		else
			i = l->n++;
	}
	memmove(l->keys + 1, l->keys, i * sizeof(uint64_t));
	l->keys[0] = key;
}

static void matches_a_naive_lru_over_a_long_run(void **state)
{
	const size_t cap = 97;
	struct mc_kvcache *c = new_cache(cap);
	struct naive l = {calloc(cap, sizeof(uint64_t)), 0, cap};
	uint64_t *order = calloc(cap, sizeof(uint64_t));
	uint64_t x = 88172645463325252ull;

	for (int step = 0; step < 200000; step++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t key = x % 400;
		if (x % 5 == 0) {
			bool present = false;
			for (size_t i = 0; i < l.n; i++)
				present |= l.keys[i] == key;
			assert_int_equal(mc_kvcache_contains(c, key), present);
			if (present) {
				assert_true(mc_kvcache_remove(c, key));
				for (size_t i = 0; i < l.n; i++)
					if (l.keys[i] == key) {
						memmove(l.keys + i, l.keys + i + 1,
							(l.n - i - 1) * sizeof(uint64_t));
						l.n--;
						break;
					}
			}
			continue;
		}
		assert_int_equal(mc_kvcache_insert(c, key), MC_OK);
		naive_insert(&l, key);
	}
	assert_int_equal(mc_kvcache_size(c), l.n);
	assert_int_equal(mc_kvcache_lru_order(c, order, cap), l.n);
	for (size_t i = 0; i < l.n; i++)
		assert_int_equal(order[i], l.keys[i]);
	free(order);
	free(l.keys);
	mc_kvcache_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(empty_cache_matches_nothing),
		cmocka_unit_test(repeat_and_shared_prefix_match),
		cmocka_unit_test(full_cache_evicts_least_recent),
		cmocka_unit_test(touch_protects_from_eviction),
		cmocka_unit_test(request_root_is_most_recent),
		cmocka_unit_test(request_longer_than_cache_keeps_its_head),
		cmocka_unit_test(reused_prefix_survives_new_requests),
		cmocka_unit_test(pinned_blocks_are_never_evicted),
		cmocka_unit_test(acquire_stops_at_a_full_pinned_cache),
		cmocka_unit_test(capacity_above_the_limit_is_refused),
		cmocka_unit_test(matches_a_naive_lru_over_a_long_run),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_alloc.c - the master's offset allocator and replica placement.
 *
 * Allocator cases compare against a shadow model (a bitmap of owned units
 * plus the list of live blocks) and call mc_offset_alloc_check, which walks
 * every internal invariant, after each phase.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "master/alloc.h"
#include "mooncake/status.h"
#include "support.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)
#define GIB (1ull << 30)

static struct mc_offset_alloc *new_alloc(uint64_t base, uint64_t size, uint64_t align)
{
	struct mc_offset_alloc *a = NULL;

	assert_int_equal(mc_offset_alloc_new(base, size, align, &a), MC_OK);
	assert_non_null(a);
	return a;
}

static struct mc_offset_alloc_stats stats_of(const struct mc_offset_alloc *a)
{
	struct mc_offset_alloc_stats s;

	mc_offset_alloc_stats(a, &s);
	return s;
}

static uint64_t must_alloc(struct mc_offset_alloc *a, uint64_t len)
{
	uint64_t addr = 0;

	assert_int_equal(mc_offset_alloc_alloc(a, len, &addr), MC_OK);
	return addr;
}

static void assert_empty(const struct mc_offset_alloc *a)
{
	struct mc_offset_alloc_stats s = stats_of(a);

	assert_true(mc_offset_alloc_check(a));
	assert_int_equal(s.nblocks, 0);
	assert_int_equal(s.nfree_blocks, 1);
	assert_int_equal(s.used_bytes, 0);
	assert_int_equal(s.requested_bytes, 0);
	assert_int_equal(s.largest_free, s.capacity);
	assert_int_equal(s.free_bytes, s.capacity);
}

static void new_rejects_bad_parameters(void **state)
{
	struct mc_offset_alloc *a = NULL;
	(void)state;
	assert_int_equal(mc_offset_alloc_new(0, MIB, 0, &a), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_new(0, MIB, 48, &a), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_new(UINT64_MAX - 10, 100, 1, &a), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_new(0x1001, 4000, 4096, &a), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_new(0, 0, 64, &a), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_new(UINT64_MAX - 4095, 4095, 4096, &a),
			 MC_ERR_INVALID_PARAMS);
	assert_null(a);
	mc_offset_alloc_free(NULL);
}

static void unaligned_range_is_trimmed_inwards(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0x1001, 3 * 4096 + 100, 4096);
	(void)state;
	assert_int_equal(mc_offset_alloc_base(a), 0x2000);
	assert_int_equal(mc_offset_alloc_capacity(a), 0x2000);
	assert_int_equal(must_alloc(a, 1), 0x2000);
	assert_int_equal(must_alloc(a, 4096), 0x3000);
	assert_true(mc_offset_alloc_check(a));
	mc_offset_alloc_free(a);
}

static void lengths_round_up_and_addresses_align(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0x10000, 16 * MIB, 64);
	static const uint64_t lens[] = {1, 63, 64, 65, 100, 4095, 4097, 12345, 1000000};
	uint64_t addrs[MC_ARRAY_SIZE(lens)], len, used = 0, req = 0;
	size_t i;
	(void)state;
	for (i = 0; i < MC_ARRAY_SIZE(lens); i++) {
		addrs[i] = must_alloc(a, lens[i]);
		assert_int_equal(addrs[i] % 64, 0);
		assert_true(addrs[i] >= 0x10000 && addrs[i] + lens[i] <= 0x10000 + 16 * MIB);
		used += (lens[i] + 63) / 64 * 64;
		req += lens[i];
	}
	assert_int_equal(stats_of(a).used_bytes, used);
	assert_int_equal(stats_of(a).requested_bytes, req);
	assert_int_equal(stats_of(a).nblocks, MC_ARRAY_SIZE(lens));
	for (i = 0; i < MC_ARRAY_SIZE(lens); i++) {
		assert_int_equal(mc_offset_alloc_lookup(a, addrs[i], &len), MC_OK);
		assert_int_equal(len, lens[i]);
		if (i)
			assert_true(addrs[i] >= addrs[i - 1] + (lens[i - 1] + 63) / 64 * 64);
	}
	assert_true(mc_offset_alloc_check(a));
	for (i = 0; i < MC_ARRAY_SIZE(lens); i++)
		assert_int_equal(mc_offset_alloc_release(a, addrs[i]), MC_OK);
	assert_empty(a);
	mc_offset_alloc_free(a);
}

static void neighbours_coalesce_at_once(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0, 4 * MIB, 4096);
	uint64_t b[4];
	int i;
	(void)state;
	for (i = 0; i < 4; i++)
		b[i] = must_alloc(a, MIB);
	assert_int_equal(stats_of(a).nfree_blocks, 0);
	assert_int_equal(stats_of(a).largest_free, 0);
	assert_int_equal(mc_offset_alloc_release(a, b[0]), MC_OK);
	assert_int_equal(mc_offset_alloc_release(a, b[2]), MC_OK);
	assert_int_equal(stats_of(a).nfree_blocks, 2);
	assert_int_equal(stats_of(a).largest_free, MIB);
	assert_true(mc_offset_alloc_check(a));
	/* freeing the middle block merges both sides into one */
	assert_int_equal(mc_offset_alloc_release(a, b[1]), MC_OK);
	assert_int_equal(stats_of(a).nfree_blocks, 1);
	assert_int_equal(stats_of(a).largest_free, 3 * MIB);
	assert_true(mc_offset_alloc_check(a));
	/* the merged hole is reusable as one block */
	assert_int_equal(must_alloc(a, 3 * MIB), 0);
	assert_int_equal(mc_offset_alloc_release(a, 0), MC_OK);
	assert_int_equal(mc_offset_alloc_release(a, b[3]), MC_OK);
	assert_empty(a);
	mc_offset_alloc_free(a);
}

static void exhaustion_fails_at_once_and_changes_nothing(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0, 64 * MIB, 4096);
	struct mc_offset_alloc_stats before, after;
	uint64_t addr = 0xdead, i;
	(void)state;
	/* the whole range in one block, and nothing more */
	assert_int_equal(must_alloc(a, 64 * MIB), 0);
	assert_int_equal(mc_offset_alloc_alloc(a, 1, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(addr, 0xdead);
	assert_int_equal(mc_offset_alloc_release(a, 0), MC_OK);
	assert_int_equal(mc_offset_alloc_alloc(a, 64 * MIB + 1, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_offset_alloc_alloc(a, UINT64_MAX, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	for (i = 0; i < 64; i++)
		must_alloc(a, MIB);
	before = stats_of(a);
	assert_int_equal(mc_offset_alloc_alloc(a, 4096, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_offset_alloc_alloc(a, 1, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	after = stats_of(a);
	assert_memory_equal(&before, &after, sizeof(before));
	assert_int_equal(addr, 0xdead);
	assert_true(mc_offset_alloc_check(a));
	/* enough free bytes in total, but no single hole large enough */
	assert_int_equal(mc_offset_alloc_release(a, 0), MC_OK);
	assert_int_equal(mc_offset_alloc_release(a, 2 * MIB), MC_OK);
	assert_int_equal(mc_offset_alloc_alloc(a, 2 * MIB, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	addr = must_alloc(a, MIB);
	assert_true(addr == 0 || addr == 2 * MIB);
	assert_true(mc_offset_alloc_check(a));
	mc_offset_alloc_free(a);
}

static void zero_length_is_invalid(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0, MIB, 64);
	uint64_t addr;
	(void)state;
	assert_int_equal(mc_offset_alloc_alloc(a, 0, &addr), MC_ERR_INVALID_PARAMS);
	assert_empty(a);
	mc_offset_alloc_free(a);
}

static void double_free_and_bogus_addresses_are_refused(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0x100000, 16 * MIB, 4096);
	struct mc_offset_alloc_stats before, after;
	uint64_t x, y, z, len;
	(void)state;
	x = must_alloc(a, 8192);
	y = must_alloc(a, 4096);
	z = must_alloc(a, 3 * 4096ull);
	assert_int_equal(mc_offset_alloc_release(a, y), MC_OK);
	before = stats_of(a);
	assert_int_equal(mc_offset_alloc_release(a, y), MC_ERR_INVALID_PARAMS); /* double free */
	assert_int_equal(mc_offset_alloc_release(a, x + 4096), MC_ERR_INVALID_PARAMS); /* inside */
	/* misaligned */
	assert_int_equal(mc_offset_alloc_release(a, x + 64), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_release(a, 0), MC_ERR_INVALID_PARAMS); /* below base */
	assert_int_equal(mc_offset_alloc_release(a, 0x100000 + 16 * MIB), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_release(a, UINT64_MAX), MC_ERR_INVALID_PARAMS);
	/* the free block after z */
	assert_int_equal(mc_offset_alloc_release(a, z + 3 * 4096ull), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_lookup(a, y, &len), MC_ERR_INVALID_PARAMS);
	after = stats_of(a);
	assert_memory_equal(&before, &after, sizeof(before));
	assert_true(mc_offset_alloc_check(a));
	assert_int_equal(mc_offset_alloc_release(a, x), MC_OK);
	assert_int_equal(mc_offset_alloc_release(a, z), MC_OK);
	assert_int_equal(mc_offset_alloc_release(a, z), MC_ERR_INVALID_PARAMS);
	assert_empty(a);
	mc_offset_alloc_free(a);
}

static void free_all_returns_to_one_block(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0, 64 * MIB, 4096);
	uint64_t addr;
	int i;
	(void)state;
	for (i = 0; i < 1000; i++)
		assert_int_equal(mc_offset_alloc_alloc(a, (uint64_t)(i % 7 + 1) * 4096, &addr),
				 MC_OK);
	mc_offset_alloc_free_all(a);
	assert_empty(a);
	assert_int_equal(must_alloc(a, 64 * MIB), 0);
	mc_offset_alloc_free(a);
}

/* ---- randomized stress against a shadow model ---- */

struct shadow {
	uint64_t *bits; /* one bit per unit: owned by a live block */
	uint64_t *addr; /* live blocks */
	uint64_t *len;
	size_t n;
	uint64_t used_units;
	uint64_t requested;
};

static uint64_t xs(uint64_t *s)
{
	return mc_alloc_rand(s);
}

static bool shadow_range_clear(const struct shadow *sh, uint64_t u, uint64_t n)
{
	uint64_t i;

	for (i = u; i < u + n; i++)
		if (sh->bits[i >> 6] & (1ull << (i & 63)))
			return false;
	return true;
}

static void shadow_mark(struct shadow *sh, uint64_t u, uint64_t n, bool set)
{
	uint64_t i;

	for (i = u; i < u + n; i++) {
		if (set)
			sh->bits[i >> 6] |= 1ull << (i & 63);
		else
			sh->bits[i >> 6] &= ~(1ull << (i & 63));
	}
}

static uint64_t stress_len(uint64_t *rng, uint64_t unit)
{
	uint64_t r = xs(rng) % 100;

	if (r < 50)
		return 1 + xs(rng) % (16 * unit); /* small, often not a unit multiple */
	if (r < 85)
		return unit * (1 + xs(rng) % 256);
	if (r < 98)
		return 1 + xs(rng) % (2048 * unit);
	return unit * (4096 + xs(rng) % 8192); /* rare large */
}

static void stress_matches_shadow_model(void **state)
{
	const uint64_t unit = 4096, base = 0x7f0000000000ull, units = 65536;
	struct mc_offset_alloc *a = new_alloc(base, units * unit, unit);
	struct shadow sh = {0};
	struct mc_offset_alloc_stats s;
	uint64_t rng = 0x5eed, addr, len, u, n, got;
	size_t k;
	int op, fails = 0, allocs = 0;
	(void)state;

	sh.bits = calloc(units / 64, sizeof(uint64_t));
	sh.addr = calloc(units, sizeof(uint64_t));
	sh.len = calloc(units, sizeof(uint64_t));
	assert_true(sh.bits && sh.addr && sh.len);
	for (op = 0; op < 100000; op++) {
		/* drift between mostly-empty and mostly-full phases */
		bool grow = ((op / 5000) & 1) ? xs(&rng) % 100 < 40 : xs(&rng) % 100 < 70;

		if (grow || !sh.n) {
			len = stress_len(&rng, unit);
			n = (len + unit - 1) / unit;
			if (mc_offset_alloc_alloc(a, len, &addr) != MC_OK) {
				/* a failure means no free block of a larger class exists */
				s = stats_of(a);
				assert_true(s.largest_free / unit <= n + n / 32);
				fails++;
				continue;
			}
			allocs++;
			assert_int_equal((addr - base) % unit, 0);
			u = (addr - base) / unit;
			assert_true(u + n <= units);
			assert_true(shadow_range_clear(&sh, u, n));
			shadow_mark(&sh, u, n, true);
			sh.addr[sh.n] = addr;
			sh.len[sh.n] = len;
			sh.n++;
			sh.used_units += n;
			sh.requested += len;
		} else {
			k = xs(&rng) % sh.n;
			assert_int_equal(mc_offset_alloc_lookup(a, sh.addr[k], &got), MC_OK);
			assert_int_equal(got, sh.len[k]);
			assert_int_equal(mc_offset_alloc_release(a, sh.addr[k]), MC_OK);
			n = (sh.len[k] + unit - 1) / unit;
			shadow_mark(&sh, (sh.addr[k] - base) / unit, n, false);
			sh.used_units -= n;
			sh.requested -= sh.len[k];
			sh.n--;
			sh.addr[k] = sh.addr[sh.n];
			sh.len[k] = sh.len[sh.n];
		}
		if (op % 2000 == 0) {
			assert_true(mc_offset_alloc_check(a));
			s = stats_of(a);
			assert_int_equal(s.used_bytes, sh.used_units * unit);
			assert_int_equal(s.requested_bytes, sh.requested);
			assert_int_equal(s.nblocks, sh.n);
		}
	}
	assert_true(allocs > 30000);
	assert_true(fails > 0); /* the full phases did reach exhaustion */
	assert_true(mc_offset_alloc_check(a));
	while (sh.n) {
		k = xs(&rng) % sh.n;
		assert_int_equal(mc_offset_alloc_release(a, sh.addr[k]), MC_OK);
		assert_int_equal(mc_offset_alloc_release(a, sh.addr[k]), MC_ERR_INVALID_PARAMS);
		sh.n--;
		sh.addr[k] = sh.addr[sh.n];
		sh.len[k] = sh.len[sh.n];
	}
	assert_empty(a);
	free(sh.bits);
	free(sh.addr);
	free(sh.len);
	mc_offset_alloc_free(a);
}

static void uniform_sizes_refill_to_full_utilisation(void **state)
{
	/* 3-unit objects (like fixed-size KV blocks) in an exact multiple of their size */
	const uint64_t unit = 4096, obj = 3 * unit - 17, nobj = 5000;
	struct mc_offset_alloc *a = new_alloc(0, nobj * 3 * unit, unit);
	uint64_t *addrs = calloc(nobj, sizeof(uint64_t)), rng = 7, i, j, t, addr;
	(void)state;
	assert_non_null(addrs);
	for (i = 0; i < nobj; i++)
		addrs[i] = must_alloc(a, obj);
	assert_int_equal(stats_of(a).free_bytes, 0);
	for (int round = 0; round < 5; round++) {
		for (i = nobj - 1; i > 0; i--) {
			j = xs(&rng) % (i + 1);
			t = addrs[i];
			addrs[i] = addrs[j];
			addrs[j] = t;
		}
		for (i = 0; i < nobj / 2; i++)
			assert_int_equal(mc_offset_alloc_release(a, addrs[i]), MC_OK);
		assert_true(mc_offset_alloc_check(a));
		for (i = 0; i < nobj / 2; i++)
			addrs[i] = must_alloc(a, obj);
		assert_int_equal(stats_of(a).free_bytes, 0);
		assert_int_equal(mc_offset_alloc_alloc(a, 1, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	}
	assert_true(mc_offset_alloc_check(a));
	free(addrs);
	mc_offset_alloc_free(a);
}

static void terabyte_ranges_use_64_bit_offsets(void **state)
{
	const uint64_t base = 0x7f0000000000ull, tib = 1ull << 40;
	struct mc_offset_alloc *a = new_alloc(base, tib, 64);
	struct mc_offset_alloc *b;
	uint64_t big[3], small[100], addr;
	int i;
	(void)state;
	assert_int_equal(mc_offset_alloc_capacity(a), tib);
	for (i = 0; i < 3; i++) {
		big[i] = must_alloc(a, 256 * GIB + 1);
		assert_int_equal(big[i] % 64, 0);
	}
	for (i = 0; i < 100; i++) {
		small[i] = must_alloc(a, 64 * (uint64_t)(i + 1));
		assert_true(small[i] >= base && small[i] < base + tib);
	}
	assert_int_equal(mc_offset_alloc_alloc(a, 256 * GIB, &addr), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(must_alloc(a, 255 * GIB), big[2] + 256 * GIB + 64 + 5050ull * 64);
	assert_true(mc_offset_alloc_check(a));
	assert_int_equal(mc_offset_alloc_release(a, big[1]), MC_OK);
	assert_int_equal(stats_of(a).largest_free, 256 * GIB + 64);
	mc_offset_alloc_free_all(a);
	assert_empty(a);
	assert_int_equal(must_alloc(a, tib), base);
	mc_offset_alloc_free(a);

	/* byte granularity over 2^40 units */
	b = new_alloc(0, tib, 1);
	assert_int_equal(must_alloc(b, 1), 0);
	assert_int_equal(must_alloc(b, tib - 2), 1);
	assert_int_equal(must_alloc(b, 1), tib - 1);
	assert_int_equal(mc_offset_alloc_release(b, 1), MC_OK);
	assert_int_equal(must_alloc(b, 3), 1);
	assert_true(mc_offset_alloc_check(b));
	mc_offset_alloc_free(b);
}

static void nomem_leaves_allocator_intact(void **state)
{
	struct mc_offset_alloc *a = NULL;
	struct mc_offset_alloc_stats before, after;
	uint64_t addr;
	int i, nomem = 0, n;
	(void)state;
	for (n = 1; n <= 3; n++) {
		mc_alloc_fault_arm(n);
		assert_int_equal(mc_offset_alloc_new(0, GIB, 4096, &a), MC_ERR_NOMEM);
		assert_null(a);
	}
	mc_alloc_fault_arm(0);
	a = new_alloc(0, GIB, 4096);
	for (i = 0; i < 300; i++) {
		before = stats_of(a);
		mc_alloc_fault_arm(1);
		if (mc_offset_alloc_alloc(a, 4096, &addr) == MC_ERR_NOMEM) {
			nomem++;
			after = stats_of(a);
			assert_memory_equal(&before, &after, sizeof(before));
			assert_true(mc_offset_alloc_check(a));
			mc_alloc_fault_arm(0);
			must_alloc(a, 4096);
		}
		mc_alloc_fault_arm(0);
	}
	assert_true(nomem >= 4); /* both arrays had to grow several times */
	assert_int_equal(stats_of(a).nblocks, 300);
	assert_true(mc_offset_alloc_check(a));
	mc_offset_alloc_free(a);
}

/* ---- placement ---- */

struct cluster {
	uint32_t n;
	struct mc_offset_alloc *allocs[200];
	struct mc_offset_alloc *const *lists[200];
	struct mc_alloc_target targets[200];
};

/* n targets, one allocator each, capacities caps[i] (or cap for all when caps is NULL). */
static struct cluster *cluster_new(uint32_t n, const uint64_t *caps, uint64_t cap)
{
	struct cluster *c = calloc(1, sizeof(*c));
	uint32_t i;

	assert_non_null(c);
	assert_true(n <= 200);
	c->n = n;
	for (i = 0; i < n; i++) {
		c->allocs[i] = new_alloc((uint64_t)(i + 1) << 40, caps ? caps[i] : cap, 4096);
		c->targets[i].name = "seg";
		c->targets[i].allocs = &c->allocs[i];
		c->targets[i].nallocs = 1;
	}
	return c;
}

static void cluster_free(struct cluster *c)
{
	uint32_t i;

	for (i = 0; i < c->n; i++)
		mc_offset_alloc_free(c->allocs[i]);
	free(c);
}

static uint32_t place(struct cluster *c, uint64_t len, uint32_t r, enum mc_alloc_strategy st,
		      const uint32_t *pref, uint32_t npref, uint64_t *rng,
		      struct mc_alloc_placement *out)
{
	struct mc_alloc_request req = {
		.len = len,
		.replica_num = r,
		.strategy = st,
		.preferred = pref,
		.npreferred = npref,
	};
	uint32_t n = 0;

	assert_int_equal(mc_alloc_place(c->targets, c->n, &req, rng, out, &n), MC_OK);
	return n;
}

static void replicas_land_on_distinct_targets(void **state)
{
	struct cluster *c = cluster_new(8, NULL, 256 * MIB);
	struct mc_alloc_placement out[8];
	uint64_t rng = 1;
	uint32_t i, j, n, st;
	int round;
	(void)state;
	for (st = 0; st < 2; st++) {
		for (round = 0; round < 200; round++) {
			n = place(c, 64 * KIB, 3, (enum mc_alloc_strategy)st, NULL, 0, &rng, out);
			assert_int_equal(n, 3);
			for (i = 0; i < n; i++) {
				assert_ptr_equal(out[i].alloc, c->allocs[out[i].target]);
				assert_int_equal(out[i].alloc_index, 0);
				assert_true(out[i].addr >= mc_offset_alloc_base(out[i].alloc));
				for (j = 0; j < i; j++)
					assert_int_not_equal(out[i].target, out[j].target);
			}
		}
	}
	/* more replicas than targets: best effort, one per target */
	n = place(c, 64 * KIB, 12, MC_ALLOC_RANDOM, NULL, 0, &rng, out);
	assert_int_equal(n, 8);
	for (i = 0; i < 8; i++)
		assert_true(mc_offset_alloc_check(c->allocs[i]));
	cluster_free(c);
}

static void preferred_targets_come_first_in_order(void **state)
{
	struct cluster *c = cluster_new(10, NULL, 16 * MIB);
	struct mc_alloc_placement out[4];
	const uint32_t pref[] = {7, 7, 2, 5};
	uint64_t rng = 2, addr;
	uint32_t n, i;
	(void)state;
	for (i = 0; i < 50; i++) {
		n = place(c, 4096, 1, MC_ALLOC_RANDOM, pref, 1, &rng, out);
		assert_int_equal(n, 1);
		assert_int_equal(out[0].target, 7);
		n = place(c, 4096, 3, MC_ALLOC_FREE_RATIO_FIRST, pref, 4, &rng, out);
		assert_int_equal(n, 3);
		assert_int_equal(out[0].target, 7); /* the duplicate 7 is skipped */
		assert_int_equal(out[1].target, 2);
		assert_int_equal(out[2].target, 5);
	}
	/* a full preferred target falls back to the strategy */
	while (mc_offset_alloc_alloc(c->allocs[7], MIB, &addr) == MC_OK)
		;
	n = place(c, MIB, 2, MC_ALLOC_RANDOM, pref, 1, &rng, out);
	assert_int_equal(n, 2);
	assert_int_not_equal(out[0].target, 7);
	assert_int_not_equal(out[1].target, 7);
	cluster_free(c);
}

static void free_ratio_first_prefers_the_emptiest(void **state)
{
	/* six targets (within the 6 x replicas sample) at different fill levels */
	static const uint64_t fill_mib[] = {50, 10, 90, 0, 70, 30};
	struct cluster *c = cluster_new(6, NULL, 100 * MIB);
	struct mc_alloc_placement out[3];
	uint64_t rng = 3, addr;
	uint32_t i, n;
	(void)state;
	for (i = 0; i < 6; i++)
		if (fill_mib[i])
			assert_int_equal(
				mc_offset_alloc_alloc(c->allocs[i], fill_mib[i] * MIB, &addr),
				MC_OK);
	for (i = 0; i < 20; i++) {
		n = place(c, 4096, 1, MC_ALLOC_FREE_RATIO_FIRST, NULL, 0, &rng, out);
		assert_int_equal(n, 1);
		assert_int_equal(out[0].target, 3);
		assert_int_equal(mc_offset_alloc_release(out[0].alloc, out[0].addr), MC_OK);
		n = place(c, 4096, 3, MC_ALLOC_FREE_RATIO_FIRST, NULL, 0, &rng, out);
		assert_int_equal(n, 3);
		assert_int_equal(out[0].target, 3);
		assert_int_equal(out[1].target, 1);
		assert_int_equal(out[2].target, 5);
		for (n = 0; n < 3; n++)
			assert_int_equal(mc_offset_alloc_release(out[n].alloc, out[n].addr), MC_OK);
	}
	/* free ratio is relative: a small empty target beats a big half-full one */
	cluster_free(c);
	{
		static const uint64_t caps[] = {GIB, 8 * MIB};
		c = cluster_new(2, caps, 0);
		assert_int_equal(mc_offset_alloc_alloc(c->allocs[0], GIB / 2, &addr), MC_OK);
		n = place(c, 4096, 1, MC_ALLOC_FREE_RATIO_FIRST, NULL, 0, &rng, out);
		assert_int_equal(n, 1);
		assert_int_equal(out[0].target, 1);
		cluster_free(c);
	}
}

static void random_spreads_evenly(void **state)
{
	struct cluster *c = cluster_new(10, NULL, 64 * MIB);
	struct mc_alloc_placement out[1];
	unsigned counts[10] = {0};
	uint64_t rng = 4;
	uint32_t i;
	(void)state;
	for (i = 0; i < 20000; i++) {
		assert_int_equal(place(c, 4096, 1, MC_ALLOC_RANDOM, NULL, 0, &rng, out), 1);
		counts[out[0].target]++;
		assert_int_equal(mc_offset_alloc_release(out[0].alloc, out[0].addr), MC_OK);
	}
	for (i = 0; i < 10; i++)
		assert_true(counts[i] > 1700 && counts[i] < 2300);
	cluster_free(c);
}

static void random_skips_targets_that_cannot_fit(void **state)
{
	struct cluster *c = cluster_new(20, NULL, 16 * MIB);
	struct mc_alloc_placement out[2];
	uint64_t rng = 5, addr;
	uint32_t i, n;
	(void)state;
	for (i = 0; i < 20; i++)
		if (i != 4 && i != 13)
			assert_int_equal(mc_offset_alloc_alloc(c->allocs[i], 15 * MIB, &addr),
					 MC_OK);
	for (i = 0; i < 50; i++) {
		n = place(c, 2 * MIB, 2, i & 1 ? MC_ALLOC_RANDOM : MC_ALLOC_FREE_RATIO_FIRST, NULL,
			  0, &rng, out);
		assert_int_equal(n, 2);
		assert_true(out[0].target == 4 || out[0].target == 13);
		assert_true(out[1].target == 4 || out[1].target == 13);
		assert_int_equal(mc_offset_alloc_release(out[0].alloc, out[0].addr), MC_OK);
		assert_int_equal(mc_offset_alloc_release(out[1].alloc, out[1].addr), MC_OK);
	}
	cluster_free(c);
}

static void random_walk_tries_at_most_100_targets(void **state)
{
	/* 150 targets, only one with room: a walk of 100 from a random start misses it 1/3 of the
	 * time */
	struct cluster *c = cluster_new(150, NULL, 4 * MIB);
	struct mc_alloc_request req = {.len = MIB, .replica_num = 1, .strategy = MC_ALLOC_RANDOM};
	struct mc_alloc_placement out[1];
	uint64_t rng = 6, addr;
	uint32_t i, n, ok = 0, miss = 0;
	mc_status st;
	(void)state;
	for (i = 0; i < 150; i++)
		if (i != 77)
			assert_int_equal(mc_offset_alloc_alloc(c->allocs[i], 4 * MIB, &addr),
					 MC_OK);
	for (i = 0; i < 300; i++) {
		st = mc_alloc_place(c->targets, c->n, &req, &rng, out, &n);
		if (st == MC_OK) {
			assert_int_equal(out[0].target, 77);
			assert_int_equal(mc_offset_alloc_release(out[0].alloc, out[0].addr), MC_OK);
			ok++;
		} else {
			assert_int_equal(st, MC_ERR_NO_AVAILABLE_HANDLE);
			miss++;
		}
	}
	assert_true(ok > 150 && ok < 250);
	assert_true(miss > 50);
	cluster_free(c);
}

static void multi_allocator_target_uses_each_chunk(void **state)
{
	struct mc_offset_alloc *chunks[3];
	struct mc_offset_alloc *const *list = chunks;
	struct mc_alloc_target t = {.name = "host:1", .allocs = list, .nallocs = 3};
	struct mc_alloc_request req = {.len = MIB, .replica_num = 2};
	struct mc_alloc_placement out[2];
	unsigned seen[3] = {0};
	uint64_t rng = 7, addr;
	uint32_t i, n;
	(void)state;
	for (i = 0; i < 3; i++)
		chunks[i] = new_alloc((uint64_t)(i + 1) << 32, 64 * MIB, 4096);
	for (i = 0; i < 300; i++) {
		assert_int_equal(mc_alloc_place(&t, 1, &req, &rng, out, &n), MC_OK);
		assert_int_equal(n, 1); /* one target, so one replica */
		assert_ptr_equal(out[0].alloc, chunks[out[0].alloc_index]);
		seen[out[0].alloc_index]++;
		assert_int_equal(mc_offset_alloc_release(out[0].alloc, out[0].addr), MC_OK);
	}
	for (i = 0; i < 3; i++)
		assert_true(seen[i] > 50);
	/* two chunks full: the third is found whichever chunk is tried first */
	assert_int_equal(mc_offset_alloc_alloc(chunks[0], 64 * MIB, &addr), MC_OK);
	assert_int_equal(mc_offset_alloc_alloc(chunks[2], 64 * MIB, &addr), MC_OK);
	for (i = 0; i < 20; i++) {
		assert_int_equal(mc_alloc_place(&t, 1, &req, &rng, out, &n), MC_OK);
		assert_int_equal(out[0].alloc_index, 1);
	}
	for (i = 0; i < 3; i++)
		mc_offset_alloc_free(chunks[i]);
}

static void large_samples_and_nomem_in_placement(void **state)
{
	struct cluster *c = cluster_new(100, NULL, 64 * MIB);
	struct mc_alloc_request req = {.len = MIB, .replica_num = 12};
	struct mc_alloc_placement out[12];
	const uint32_t pref[] = {0};
	uint64_t rng = 9;
	uint32_t i, j, k, n = 0;
	mc_status st = MC_OK;
	(void)state;
	/* 6 x 12 = 72 sampled targets: more than the on-stack buffer holds */
	req.strategy = MC_ALLOC_FREE_RATIO_FIRST;
	req.preferred = pref;
	req.npreferred = 1;
	for (i = 0; i < 20; i++) {
		assert_int_equal(mc_alloc_place(c->targets, c->n, &req, &rng, out, &n), MC_OK);
		assert_int_equal(n, 12);
		assert_int_equal(out[0].target, 0);
		for (j = 0; j < n; j++)
			for (k = 0; k < j; k++)
				assert_int_not_equal(out[j].target, out[k].target);
	}
	assert_int_equal(mc_offset_alloc_used_bytes(c->allocs[0]), 20 * MIB);
	cluster_free(c);

	/* an allocator that cannot grow its records: NOMEM once nothing else fits */
	c = cluster_new(1, NULL, 64 * MIB);
	req.replica_num = 1;
	req.npreferred = 0;
	req.len = 4096;
	req.strategy = MC_ALLOC_RANDOM; /* one attempt: the injected fault fires only once */
	for (i = 0; i < 40; i++) {
		mc_alloc_fault_arm(1);
		st = mc_alloc_place(c->targets, c->n, &req, &rng, out, &n);
		mc_alloc_fault_arm(0);
		if (st != MC_OK)
			break;
	}
	assert_int_equal(st, MC_ERR_NOMEM);
	assert_true(mc_offset_alloc_check(c->allocs[0]));
	cluster_free(c);
}

static void placement_failures(void **state)
{
	struct cluster *c = cluster_new(4, NULL, 4 * MIB);
	struct mc_alloc_request req = {.len = 8 * MIB, .replica_num = 2};
	struct mc_alloc_placement out[2];
	const uint32_t bad_pref[] = {1, 4};
	uint64_t rng = 8;
	uint32_t n = 12345, i;
	(void)state;
	assert_int_equal(mc_alloc_place(c->targets, c->n, &req, &rng, out, &n),
			 MC_ERR_NO_AVAILABLE_HANDLE);
	req.strategy = MC_ALLOC_FREE_RATIO_FIRST;
	assert_int_equal(mc_alloc_place(c->targets, c->n, &req, &rng, out, &n),
			 MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_alloc_place(c->targets, 0, &req, &rng, out, &n),
			 MC_ERR_NO_AVAILABLE_HANDLE);
	req.len = 0;
	assert_int_equal(mc_alloc_place(c->targets, c->n, &req, &rng, out, &n),
			 MC_ERR_INVALID_PARAMS);
	req.len = MIB;
	req.replica_num = 0;
	assert_int_equal(mc_alloc_place(c->targets, c->n, &req, &rng, out, &n),
			 MC_ERR_INVALID_PARAMS);
	req.replica_num = 2;
	req.preferred = bad_pref;
	req.npreferred = 2;
	assert_int_equal(mc_alloc_place(c->targets, c->n, &req, &rng, out, &n),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(n, 12345);
	for (i = 0; i < c->n; i++)
		assert_int_equal(stats_of(c->allocs[i]).nblocks, 0); /* nothing leaked */
	cluster_free(c);
}

static void strategy_names_parse(void **state)
{
	enum mc_alloc_strategy s = MC_ALLOC_RANDOM;
	(void)state;
	assert_true(mc_alloc_strategy_parse("free_ratio_first", &s));
	assert_int_equal(s, MC_ALLOC_FREE_RATIO_FIRST);
	assert_true(mc_alloc_strategy_parse("random", &s));
	assert_int_equal(s, MC_ALLOC_RANDOM);
	assert_false(mc_alloc_strategy_parse("Random", &s));
	assert_false(mc_alloc_strategy_parse("", &s));
	assert_string_equal(mc_alloc_strategy_name(MC_ALLOC_FREE_RATIO_FIRST), "free_ratio_first");
	assert_string_equal(mc_alloc_strategy_name(MC_ALLOC_RANDOM), "random");
}

static int u64_cmp(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
	return a < b ? -1 : a > b;
}

/* The log's replay: the blocks one allocator handed out, claimed in a new
 * one, give the same allocator; overlaps and strays are refused. */
static void claim_rebuilds_what_alloc_handed_out(void **state)
{
	struct mc_offset_alloc *a = new_alloc(0x10000, 16 * MIB, 64);
	struct mc_offset_alloc *b = new_alloc(0x10000, 16 * MIB, 64);
	struct mc_offset_alloc_stats sa, sb;
	uint64_t addrs[300], len;
	uint32_t cur = 0;
	size_t i, n = 0;
	(void)state;
	for (i = 0; i < 300; i++)
		addrs[n++] = must_alloc(a, 1 + (i * 7919) % 40000);
	for (i = 0; i < n; i += 3) /* holes, so claims meet free gaps */
		assert_int_equal(mc_offset_alloc_release(a, addrs[i]), MC_OK);
	for (i = 0, n = 0; i < 300; i++)
		if (i % 3)
			addrs[n++] = addrs[i];
	qsort(addrs, n, sizeof(addrs[0]), u64_cmp);
	for (i = 0; i < n; i++) {
		assert_int_equal(mc_offset_alloc_lookup(a, addrs[i], &len), MC_OK);
		assert_int_equal(mc_offset_alloc_claim(b, addrs[i], len, &cur), MC_OK);
	}
	assert_true(mc_offset_alloc_check(b));
	mc_offset_alloc_stats(a, &sa);
	mc_offset_alloc_stats(b, &sb);
	assert_int_equal(sa.used_bytes, sb.used_bytes);
	assert_int_equal(sa.requested_bytes, sb.requested_bytes);
	assert_int_equal(sa.nblocks, sb.nblocks);
	/* out of order: the cursor falls back to the lowest block */
	cur = 0;
	assert_int_equal(mc_offset_alloc_claim(b, addrs[0], 1, &cur), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_claim(b, addrs[n - 1] + 1, 1, &cur),
			 MC_ERR_INVALID_PARAMS); /* misaligned */
	assert_int_equal(mc_offset_alloc_claim(b, 0x10000 + 16 * MIB, 64, &cur),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_offset_alloc_claim(b, 0x10000 + 16 * MIB - 64, 128, &cur),
			 MC_ERR_INVALID_PARAMS);
	for (i = 0; i < n; i++)
		assert_int_equal(mc_offset_alloc_release(b, addrs[i]), MC_OK);
	assert_empty(b);
	/* a claim is then an ordinary block */
	assert_int_equal(mc_offset_alloc_claim(b, 0x10000 + 4096, 100, &cur), MC_OK);
	assert_int_equal(must_alloc(b, 4096), 0x10000);
	assert_true(mc_offset_alloc_check(b));
	mc_offset_alloc_free(a);
	mc_offset_alloc_free(b);
}

/* A remount sizes the tables once for its run of claims (expect): the
 * blocks claimed before are still found after the table is rebuilt, and
 * the claims of the run grow nothing. */
static void expect_sizes_once_for_a_run_of_claims(void **state)
{
	enum { N = 6000 };
	struct mc_offset_alloc *b = new_alloc(0x10000, 64 * MIB, 64);
	uint64_t len, meta;
	uint32_t cur = 0;

	(void)state;
	for (int i = 0; i < N / 2; i++) /* every other slot of 128 bytes */
		assert_int_equal(mc_offset_alloc_claim(b, 0x10000 + (uint64_t)i * 256, 100, &cur),
				 MC_OK);
	mc_offset_alloc_expect(b, N / 2);
	assert_true(mc_offset_alloc_check(b));
	meta = stats_of(b).meta_bytes;
	for (int i = 0; i < N / 2; i++) {
		assert_int_equal(mc_offset_alloc_lookup(b, 0x10000 + (uint64_t)i * 256, &len),
				 MC_OK);
		assert_int_equal(len, 100);
	}
	/* the run: back to back, as a segment's objects mostly are */
	cur = 0;
	for (int i = N / 2; i < N; i++) {
		uint64_t addr = 0x10000 + (uint64_t)N / 2 * 256 + (uint64_t)(i - N / 2) * 128;

		if (i + 8 < N)
			mc_offset_alloc_prefetch(b, addr + 8 * 128);
		assert_int_equal(mc_offset_alloc_claim(b, addr, 100, &cur), MC_OK);
	}
	assert_true(stats_of(b).meta_bytes <= meta); /* nothing grew */
	assert_true(mc_offset_alloc_check(b));
	for (int i = 0; i < N; i++)
		assert_int_equal(
			mc_offset_alloc_release(b, i < N / 2 ? 0x10000 + (uint64_t)i * 256
							     : 0x10000 + (uint64_t)N / 2 * 256 +
								       (uint64_t)(i - N / 2) * 128),
			MC_OK);
	assert_empty(b);
	mc_offset_alloc_prefetch(b, 0); /* below the range: nothing */
	mc_offset_alloc_free(b);
}

/*
 * The block table grows incrementally: after the alloc that doubles it the
 * old table is still held (its size shows in meta_bytes) and drains over
 * the next operations, while lookups, releases (of blocks still in the old
 * table too) and claims keep working.  Before, the whole table was rehashed
 * in that one alloc (0.5-1 s at 50 M blocks).
 */
static void table_grows_a_piece_per_operation(void **state)
{
	enum { N = 20000 };
	struct mc_offset_alloc *a = new_alloc(0x100000, 64 * MIB, 64);
	uint64_t *addrs = calloc(N, sizeof(*addrs)), len, prev_meta = 0, rng = 7;
	int live = 0, drained = 0;

	(void)state;
	assert_non_null(addrs);
	for (int i = 0; i < N; i++) {
		struct mc_offset_alloc_stats s;

		addrs[live++] = must_alloc(a, 64);
		if (i % 7 == 3) { /* release an earlier block, often one in the old table */
			int k = (int)(mc_alloc_rand(&rng) % (uint64_t)live);

			assert_int_equal(mc_offset_alloc_release(a, addrs[k]), MC_OK);
			assert_int_equal(mc_offset_alloc_release(a, addrs[k]),
					 MC_ERR_INVALID_PARAMS);
			addrs[k] = addrs[--live];
		}
		s = stats_of(a);
		/* the tables never shrink here, so less metadata is an old table
		 * given back some operations after the doubling that replaced it */
		if (prev_meta && s.meta_bytes < prev_meta)
			drained++;
		prev_meta = s.meta_bytes;
		if (i % 2500 == 0 || i == N - 1) {
			assert_true(mc_offset_alloc_check(a));
			for (int k = 0; k < live; k++) {
				assert_int_equal(mc_offset_alloc_lookup(a, addrs[k], &len), MC_OK);
				assert_int_equal(len, 64);
			}
		}
	}
	assert_true(drained >= 8); /* 16 -> 2^16 slots: a dozen doublings */
	for (int k = 0; k < live; k++) {
		assert_int_equal(mc_offset_alloc_release(a, addrs[k]), MC_OK);
		if (k % 1000 == 0)
			assert_true(mc_offset_alloc_check(a));
	}
	assert_empty(a);
	free(addrs);
	mc_offset_alloc_free(a);
}

/* mc_free_later gives a block back page by page (those read as zero after)
 * and frees it with the last step; NULL is a no-op; a busy one frees its
 * block when given another (ASan/valgrind would see a leak or a double free). */
static void free_later_gives_back_in_pieces(void **state)
{
	struct mc_free_later f = {0};
	size_t len = 4 * MIB;
	unsigned char *p = malloc(len), *q = malloc(len);
	size_t zero_from = 0, zero_to = 0;

	(void)state;
	assert_non_null(p);
	assert_non_null(q);
	memset(p, 0xab, len);
	mc_free_later_start(&f, NULL, 123);
	assert_true(mc_free_later_step(&f, MIB));
	mc_free_later_start(&f, p, len);
	assert_false(mc_free_later_step(&f, MIB));
	/* some whole pages of the first MiB are zero now, nothing past it is */
	for (size_t i = 0; i < len; i++) {
		if (p[i] == 0 && !zero_to)
			zero_from = i;
		if (p[i] == 0)
			zero_to = i + 1;
		else
			assert_int_equal(p[i], 0xab);
	}
	assert_true(zero_to > zero_from && zero_to - zero_from >= MIB / 2);
	assert_true(zero_to <= MIB);
	assert_false(mc_free_later_step(&f, MIB));
	assert_int_equal(p[len - 1], 0xab);
	mc_free_later_start(&f, q, len); /* frees p at once */
	assert_ptr_equal(f.p, q);
	assert_false(mc_free_later_step(&f, len - 1));
	assert_true(mc_free_later_step(&f, 1));
	assert_null(f.p);
	assert_true(mc_free_later_step(&f, 1));
	mc_free_later_finish(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(new_rejects_bad_parameters),
		cmocka_unit_test(unaligned_range_is_trimmed_inwards),
		cmocka_unit_test(lengths_round_up_and_addresses_align),
		cmocka_unit_test(neighbours_coalesce_at_once),
		cmocka_unit_test(exhaustion_fails_at_once_and_changes_nothing),
		cmocka_unit_test(zero_length_is_invalid),
		cmocka_unit_test(double_free_and_bogus_addresses_are_refused),
		cmocka_unit_test(free_all_returns_to_one_block),
		cmocka_unit_test(stress_matches_shadow_model),
		cmocka_unit_test(uniform_sizes_refill_to_full_utilisation),
		cmocka_unit_test(terabyte_ranges_use_64_bit_offsets),
		cmocka_unit_test(nomem_leaves_allocator_intact),
		cmocka_unit_test(replicas_land_on_distinct_targets),
		cmocka_unit_test(preferred_targets_come_first_in_order),
		cmocka_unit_test(free_ratio_first_prefers_the_emptiest),
		cmocka_unit_test(random_spreads_evenly),
		cmocka_unit_test(random_skips_targets_that_cannot_fit),
		cmocka_unit_test(random_walk_tries_at_most_100_targets),
		cmocka_unit_test(multi_allocator_target_uses_each_chunk),
		cmocka_unit_test(large_samples_and_nomem_in_placement),
		cmocka_unit_test(placement_failures),
		cmocka_unit_test(strategy_names_parse),
		cmocka_unit_test(expect_sizes_once_for_a_run_of_claims),
		cmocka_unit_test(claim_rebuilds_what_alloc_handed_out),
		cmocka_unit_test(table_grows_a_piece_per_operation),
		cmocka_unit_test(free_later_gives_back_in_pieces),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

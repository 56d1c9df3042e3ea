/*
 * alloc_bench - the master's segment allocator and replica placement.
 *
 * Cases, one line each:
 *
 *   mixed_fillF  - one 64 GiB segment (4 KiB units) filled to F% with
 *                  objects of 4 KiB .. 4 MiB (uniform octave, then uniform
 *                  inside it, so sizes are rarely page multiples), then
 *                  --ops steady-state pairs of "release a random live block,
 *                  allocate a new random size".  ops_per_s counts allocs and
 *                  releases both; ns_per_op is the mean of either.
 *                  meta_B_per_block is the allocator's own heap use divided
 *                  by its live blocks.
 *   first_fail   - fill an empty segment with the same sizes until the first
 *                  allocation fails; util is used/capacity at that moment
 *                  (upstream reports 0.85 for random sizes, store.md 11.1).
 *   place_S_rR   - 16 segments of 64 GiB at 50% fill, R replicas of 1 MiB
 *                  with strategy S, each placement released again at once.
 *
 * Everything is bookkeeping: no segment memory exists or is touched.
 * Only the timed loop is measured, in thread CPU time: the loop never
 * sleeps or does I/O, so on an idle machine that equals wall time, and on
 * a shared one (the 2-core CI box) it does not count time spent waiting
 * for a core.  --quick shrinks the op counts for a CI
 * smoke run; --seed changes the random stream.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "master/alloc.h"

#define PROG	 "alloc_bench"
#define SEG_SIZE (64ull << 30)
#define SEG_BASE 0x7f0000000000ull
#define UNIT	 4096ull

static uint64_t rng;

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rand_size(void)
{
	unsigned e = 12 + (unsigned)(mc_alloc_rand(&rng) %
				     10); /* octaves 4 KiB .. 2 MiB: sizes up to 4 MiB */

	return (1ull << e) + mc_alloc_rand(&rng) % (1ull << e);
}

struct live {
	uint64_t *addr;
	size_t n;
	size_t cap;
};

static void live_push(struct live *l, uint64_t addr)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 1024;
		l->addr = realloc(l->addr, l->cap * sizeof(*l->addr));
		if (!l->addr) {
			(void)fprintf(stderr, PROG ": out of memory\n");
			exit(1);
		}
	}
	l->addr[l->n++] = addr;
}

static uint64_t live_take_random(struct live *l)
{
	size_t k;
	uint64_t addr;

	if (!l->n) {
		(void)fprintf(stderr, PROG ": no live block to release\n");
		exit(1);
	}
	k = mc_alloc_rand(&rng) % l->n;
	addr = l->addr[k];

	l->addr[k] = l->addr[--l->n];
	return addr;
}

static struct mc_offset_alloc *seg_new(uint64_t base)
{
	struct mc_offset_alloc *a;

	if (mc_offset_alloc_new(base, SEG_SIZE, UNIT, &a) != MC_OK) {
		(void)fprintf(stderr, PROG ": cannot create an allocator\n");
		exit(1);
	}
	return a;
}

/* Fill a to fill_pct percent of its capacity, recording blocks in l. */
static void fill_to(struct mc_offset_alloc *a, struct live *l, unsigned fill_pct)
{
	uint64_t target = mc_offset_alloc_capacity(a) / 100 * fill_pct, addr;
	unsigned misses = 0;

	while (mc_offset_alloc_used_bytes(a) < target && misses < 1000) {
		if (mc_offset_alloc_alloc(a, rand_size(), &addr) == MC_OK)
			live_push(l, addr);
		else
			misses++;
	}
}

static void bench_mixed(unsigned fill_pct, uint64_t ops)
{
	struct mc_offset_alloc *a = seg_new(SEG_BASE);
	struct mc_offset_alloc_stats s;
	struct live l = {0};
	uint64_t i, addr, fails = 0, t0, ns;

	fill_to(a, &l, fill_pct);
	t0 = cpu_ns();
	for (i = 0; i < ops && l.n; i++) {
		mc_offset_alloc_release(a, live_take_random(&l));
		if (mc_offset_alloc_alloc(a, rand_size(), &addr) == MC_OK)
			live_push(&l, addr);
		else
			fails++;
	}
	ns = cpu_ns() - t0;
	mc_offset_alloc_stats(a, &s);
	printf("%s case=mixed_fill%u capacity_GiB=%" PRIu64 " live_blocks=%" PRIu64
	       " free_blocks=%" PRIu64 " util=%.3f ops=%" PRIu64 " ops_per_s=%.0f ns_per_op=%.1f"
	       " alloc_fail=%" PRIu64 " meta_B_per_block=%.1f\n",
	       PROG, fill_pct, s.capacity >> 30, s.nblocks, s.nfree_blocks,
	       (double)s.used_bytes / (double)s.capacity, 2 * i, 2e9 * (double)i / (double)ns,
	       (double)ns / (double)(2 * i), fails, (double)s.meta_bytes / (double)s.nblocks);
	free(l.addr);
	mc_offset_alloc_free(a);
}

static void bench_first_fail(unsigned rounds)
{
	struct mc_offset_alloc *a = seg_new(SEG_BASE);
	struct mc_offset_alloc_stats s;
	struct live l = {0};
	double util_sum = 0, util_min = 1;
	uint64_t addr, allocs = 0, t0, ns = 0;
	unsigned r;

	for (r = 0; r < rounds; r++) {
		/* start each round from a churned state, not a pristine one */
		mc_offset_alloc_free_all(a);
		l.n = 0;
		fill_to(a, &l, 50);
		for (uint64_t i = 0; i < l.n / 2; i++)
			mc_offset_alloc_release(a, live_take_random(&l));
		t0 = cpu_ns();
		while (mc_offset_alloc_alloc(a, rand_size(), &addr) == MC_OK) {
			live_push(&l, addr);
			allocs++;
		}
		ns += cpu_ns() - t0;
		mc_offset_alloc_stats(a, &s);
		util_sum += (double)s.used_bytes / (double)s.capacity;
		if ((double)s.used_bytes / (double)s.capacity < util_min)
			util_min = (double)s.used_bytes / (double)s.capacity;
	}
	printf("%s case=first_fail rounds=%u util_avg=%.4f util_min=%.4f allocs=%" PRIu64
	       " ns_per_alloc=%.1f\n",
	       PROG, rounds, util_sum / rounds, util_min, allocs, (double)ns / (double)allocs);
	free(l.addr);
	mc_offset_alloc_free(a);
}

static void bench_place(enum mc_alloc_strategy st, uint32_t replicas, uint64_t ops)
{
	enum { NSEG = 16 };
	struct mc_offset_alloc *segs[NSEG];
	struct mc_alloc_target targets[NSEG];
	struct mc_alloc_placement out[NSEG];
	struct mc_alloc_request req = {.len = 1 << 20, .replica_num = replicas, .strategy = st};
	struct live l = {0};
	uint64_t i, t0, ns, placed = 0;
	uint32_t n, j, k;

	for (k = 0; k < NSEG; k++) {
		segs[k] = seg_new(SEG_BASE + ((uint64_t)k << 40));
		fill_to(segs[k], &l, 50);
		targets[k].name = "bench";
		targets[k].allocs = &segs[k];
		targets[k].nallocs = 1;
	}
	t0 = cpu_ns();
	for (i = 0; i < ops; i++) {
		if (mc_alloc_place(targets, NSEG, &req, &rng, out, &n) != MC_OK)
			continue;
		placed += n;
		for (j = 0; j < n; j++)
			mc_offset_alloc_release(out[j].alloc, out[j].addr);
	}
	ns = cpu_ns() - t0;
	printf("%s case=place_%s_r%u segments=%d placements=%" PRIu64 " replicas=%" PRIu64
	       " placements_per_s=%.0f ns_per_placement=%.1f\n",
	       PROG, mc_alloc_strategy_name(st), replicas, NSEG, ops, placed,
	       1e9 * (double)ops / (double)ns, (double)ns / (double)ops);
	for (k = 0; k < NSEG; k++)
		mc_offset_alloc_free(segs[k]);
	free(l.addr);
}

int main(int argc, char **argv)
{
	uint64_t ops = 2000000, seed = 42;
	unsigned rounds = 20;
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			ops = 20000;
			rounds = 2;
		} else if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
			ops = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			seed = strtoull(argv[++i], NULL, 0);
		} else {
			(void)fprintf(stderr, "usage: %s [--quick] [--ops N] [--seed S]\n", PROG);
			return 2;
		}
	}
	rng = seed;
	bench_mixed(50, ops);
	bench_mixed(90, ops);
	bench_first_fail(rounds);
	bench_place(MC_ALLOC_RANDOM, 1, ops / 2);
	bench_place(MC_ALLOC_RANDOM, 3, ops / 2);
	bench_place(MC_ALLOC_FREE_RATIO_FIRST, 1, ops / 2);
	bench_place(MC_ALLOC_FREE_RATIO_FIRST, 3, ops / 2);
	return 0;
}

/*
 * te_local_bench - the engine's local copy path against plain memcpy.
 *
 * A transfer whose target is the engine's own segment (id 0) never leaves
 * the process: the engine copies with memcpy, possibly on its worker
 * threads.  This program measures, in one run, what that path costs
 * compared to a single thread calling memcpy on the same buffers:
 *
 *   memcpy  - one thread copies --size bytes from src to dst in block-sized
 *             memcpy calls;
 *   engine  - one batch of --size / block WRITE requests from src to dst
 *             (both registered, dst addressed through segment 0), submitted
 *             and waited for.
 *
 * Both buffers are larger than the caches (256 MiB by default) and
 * prefaulted; every figure is the median of --runs runs.  One line per block
 * size:
 *
 *   local block=B bytes=N memcpy_GB/s=X engine_GB/s=Y ratio=Y/X
 *
 * --quick shrinks the sizes for a CI smoke run.  Only the public API is
 * used.
 */
#include <mooncake/mooncake.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PROG "te_local_bench"
#include "bench_util.h"

static struct {
	uint64_t size;
	uint64_t min_block;
	uint64_t max_block;
	unsigned runs;
	const char *metadata;
	unsigned workers;
} opt = {
	.size = 256ull << 20,
	.min_block = 1ull << 20,
	.max_block = 64ull << 20,
	.runs = 5,
	.metadata = "P2PHANDSHAKE",
	.workers = 0,
};

static uint8_t *buffer_alloc(uint64_t size, int fill)
{
	uint8_t *p = buffer_map(size);

	memset(p, fill, size);
	return p;
}

static double memcpy_gbs(uint8_t *dst, const uint8_t *src, uint64_t block)
{
	uint64_t t0 = now_ns();

	for (uint64_t off = 0; off < opt.size; off += block)
		memcpy(dst + off, src + off, block);
	/* Keep the copy from being optimised away or reordered past the clock. */
	__asm__ __volatile__("" : : "r"(dst) : "memory");
	return (double)opt.size / (double)(now_ns() - t0);
}

static double engine_gbs(struct mc_te *te, struct mc_xfer_req *reqs, size_t n)
{
	struct mc_xfer_status xs;
	mc_batch_id id;
	mc_status st;
	uint64_t t0 = now_ns(), t1;

	st = mc_te_batch_new(te, n, &id);
	if (st != MC_OK)
		die_status("cannot allocate a batch", st);
	st = mc_te_submit(te, id, reqs, n);
	if (st != MC_OK)
		die_status("cannot submit", st);
	st = mc_te_batch_wait(te, id, 60000, &xs);
	if (st != MC_OK)
		die_status("local transfer failed", xs.error ? xs.error : st);
	t1 = now_ns();
	st = mc_te_batch_free(te, id);
	if (st != MC_OK)
		die_status("cannot free the batch", st);
	return (double)opt.size / (double)(t1 - t0);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: %s [--size BYTES] [--min_block BYTES] [--max_block BYTES] [--runs N]\n"
		"          [--metadata URI] [--workers N] [--quick]\n",
		PROG);
}

static uint64_t parse_u64(const char *s, const char *name)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || !v || *s == '-') {
		fprintf(stderr, "%s: bad value '%s' for --%s\n", PROG, s, name);
		exit(2);
	}
	return v;
}

static void parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"size", required_argument, NULL, 's'},
		{"min_block", required_argument, NULL, 'b'},
		{"max_block", required_argument, NULL, 'B'},
		{"runs", required_argument, NULL, 'r'},
		{"metadata", required_argument, NULL, 'm'},
		{"workers", required_argument, NULL, 'w'},
		{"quick", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			opt.size = parse_u64(optarg, "size");
			break;
		case 'b':
			opt.min_block = parse_u64(optarg, "min_block");
			break;
		case 'B':
			opt.max_block = parse_u64(optarg, "max_block");
			break;
		case 'r':
			opt.runs = (unsigned)parse_u64(optarg, "runs");
			break;
		case 'm':
			opt.metadata = optarg;
			break;
		case 'w':
			opt.workers = (unsigned)parse_u64(optarg, "workers");
			break;
		case 'q':
			opt.size = 32ull << 20;
			opt.min_block = 1ull << 20;
			opt.max_block = 4ull << 20;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		usage(stderr);
		exit(2);
	}
	if (opt.runs > MAX_RUNS)
		opt.runs = MAX_RUNS;
	if (opt.max_block > opt.size)
		opt.max_block = opt.size;
	if (opt.min_block > opt.max_block) {
		fprintf(stderr, "%s: --min_block exceeds --max_block / --size\n", PROG);
		exit(2);
	}
}

int main(int argc, char **argv)
{
	struct mc_te_params p;
	struct mc_xfer_req *reqs;
	struct mc_te *te;
	uint8_t *src, *dst;
	mc_status st;
	int rc = 0;

	parse_args(argc, argv);

	memset(&p, 0, sizeof(p));
	p.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL;
	p.metadata_uri = opt.metadata;
	p.local_name = "127.0.0.1";
	p.protocol = "tcp";
	if (opt.workers) {
		p.field_mask |= MC_TE_PARAM_WORKERS;
		p.workers = opt.workers;
	}
	st = mc_te_new(&p, &te);
	if (st != MC_OK)
		die_status("cannot create the transfer engine", st);

	src = buffer_alloc(opt.size, 0x5A);
	dst = buffer_alloc(opt.size, 0);
	st = mc_te_register(te, src, opt.size, "cpu:0", true);
	if (st != MC_OK)
		die_status("cannot register the source", st);
	st = mc_te_register(te, dst, opt.size, "cpu:0", true);
	if (st != MC_OK)
		die_status("cannot register the destination", st);
	reqs = calloc(opt.size / opt.min_block + 1, sizeof(*reqs));
	if (!reqs) {
		fprintf(stderr, "%s: out of memory\n", PROG);
		return EXIT_FAILURE;
	}

	printf("# %s: %" PRIu64 " bytes per copy, median of %u runs, engine metadata %s\n", PROG,
	       opt.size, opt.runs, opt.metadata);
	for (uint64_t block = opt.min_block; block <= opt.max_block; block <<= 1) {
		double mc[MAX_RUNS] = {0}, en[MAX_RUNS] = {0}, mc_med, en_med;
		size_t n = 0;

		for (uint64_t off = 0; off + block <= opt.size; off += block, n++) {
			reqs[n].opcode = MC_OP_WRITE;
			reqs[n].source = src + off;
			reqs[n].target_id = MC_LOCAL_SEGMENT;
			reqs[n].target_offset = (uint64_t)(uintptr_t)(dst + off);
			reqs[n].length = block;
		}
		/* One untimed round of each, then alternate so drift hits both. */
		memcpy_gbs(dst, src, block);
		engine_gbs(te, reqs, n);
		for (unsigned r = 0; r < opt.runs; r++) {
			mc[r] = memcpy_gbs(dst, src, block);
			en[r] = engine_gbs(te, reqs, n);
		}
		mc_med = median(mc, (int)opt.runs);
		en_med = median(en, (int)opt.runs);
		printf("local block=%" PRIu64 " bytes=%" PRIu64
		       " memcpy_GB/s=%.2f engine_GB/s=%.2f ratio=%.2f\n",
		       block, n * block, mc_med, en_med, mc_med > 0 ? en_med / mc_med : 0);
		fflush(stdout);
	}
	/* The engine's copy must be a copy: clear dst, copy once more, compare. */
	{
		size_t n = 0;

		for (uint64_t off = 0; off + opt.min_block <= opt.size; off += opt.min_block, n++) {
			reqs[n].opcode = MC_OP_WRITE;
			reqs[n].source = src + off;
			reqs[n].target_id = MC_LOCAL_SEGMENT;
			reqs[n].target_offset = (uint64_t)(uintptr_t)(dst + off);
			reqs[n].length = opt.min_block;
		}
		memset(dst, 0, opt.size);
		engine_gbs(te, reqs, n);
		if (memcmp(src, dst, n * opt.min_block)) {
			fprintf(stderr, "%s: the engine's copy differs from the source\n", PROG);
			rc = EXIT_FAILURE;
		}
	}

	free(reqs);
	mc_te_deregister(te, src);
	mc_te_deregister(te, dst);
	mc_te_free(te);
	munmap(src, opt.size);
	munmap(dst, opt.size);
	return rc;
}

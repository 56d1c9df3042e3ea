/*
 * te_call_bench - per-call cost of the Transfer Engine's C API, the baseline
 * for the Python binding's overhead (bench/py_overhead.py).
 *
 * Two roles:
 *
 *   te_call_bench --serve [--size N] [--host ADDR]
 *       a P2P target on 127.0.0.1 (or ADDR): registers N bytes (default 16 MiB,
 *       prefaulted), prints "READY name=<host:port> addr=0x... size=N" and
 *       serves until stdin closes;
 *
 *   te_call_bench --peer NAME --addr A [--iters N] [--batch-iters M] [--interactive]
 *       an initiator that times, against that target, exactly the C calls
 *       mooncake.engine makes for
 *         read_4k:    transfer_sync_read of 4 KiB
 *         batch_128x64k: batch_transfer_sync_read of 128 x 64 KiB
 *         batch_32x4k: one batch of the reads a store batch get of 32 x 4 KiB
 *                      makes (each value and its 32-byte trailer), the
 *                      floor under store_bench's batch_get_into at 4 KiB
 *       i.e. per call: mc_te_open_segment (a cache hit), mc_te_batch_new,
 *       mc_te_submit, mc_te_batch_wait, mc_te_batch_discard.  Each op is
 *       warmed up, then timed as one loop; one line per op:
 *
 *         op=read_4k iters=N mean_us=X
 *
 *       With --interactive it prints READY once connected and then runs one
 *       timed loop per stdin line "<op> <iters>", so that a driver
 *       (bench/py_overhead.py) can interleave short C and Python loops and
 *       both see the same machine load.
 *
 *   te_call_bench --agg --peer NAME --addr A --block B --window W [--batch N]
 *       one initiator of bench/store_aggregate.py's engine reference: it
 *       registers W bytes and, per stdin line, moves them in W / B / N
 *       synchronous calls of N B-byte requests each (one batch per call:
 *       the calls above), walking [A, A + W) of the target as a store
 *       client's single-key (N = 1, the default) or N-key batch calls walk
 *       its keys; W / B must be a multiple of N:
 *
 *         write | read  -> OK bytes=N t0=S t1=S p99_us=X
 *         quit (or end of input) exits
 *
 *       t0 and t1 are CLOCK_MONOTONIC seconds around the phase,
 *       comparable between processes on one host; p99_us is per call.  It
 *       prints READY once connected.
 *
 * --host ADDR (any role) names the engine ADDR rather than 127.0.0.1, as
 * when bench/store_aggregate.py --netns-mbit puts the targets and the
 * initiators in different network namespaces.
 *
 * Only the public API is used.
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

#define PROG "te_call_bench"
#include "bench_util.h"

#define BATCH_N	    128
#define BATCH_PIECE (64u << 10)
#define SMALL	    4096u
#define SMALL_N	    32
#define TRAILER	    32u
#define TIMEOUT_MS  30000

static void *buffer_alloc(uint64_t size)
{
	void *p = buffer_map(size);

	memset(p, 0x5a, size);
	return p;
}

/* --host: the address this engine listens on and names itself by. */
static const char *local_host = "127.0.0.1";

static struct mc_te *engine_new(void)
{
	struct mc_te_params p = {
		.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL,
		.metadata_uri = "P2PHANDSHAKE",
		.local_name = local_host,
		.protocol = "tcp",
	};
	struct mc_te *te = NULL;
	mc_status st = mc_te_new(&p, &te);

	if (st != MC_OK)
		die_status("mc_te_new", st);
	return te;
}

/* What the binding does for one synchronous call (python/engine.c xfer_sync). */
static mc_status sync_call(struct mc_te *te, const char *peer, struct mc_xfer_req *reqs, size_t n)
{
	mc_segment_id seg;
	mc_batch_id id;
	mc_status st;

	st = mc_te_open_segment(te, peer, &seg);
	if (st != MC_OK)
		return st;
	for (size_t i = 0; i < n; i++)
		reqs[i].target_id = seg;
	st = mc_te_batch_new(te, n, &id);
	if (st != MC_OK)
		return st;
	st = mc_te_submit(te, id, reqs, n);
	if (st == MC_OK)
		st = mc_te_batch_wait(te, id, TIMEOUT_MS, NULL);
	mc_te_batch_discard(te, id);
	return st;
}

static void time_op(struct mc_te *te, const char *peer, const char *name, struct mc_xfer_req *reqs,
		    size_t n, unsigned iters, unsigned warm)
{
	uint64_t t0;
	mc_status st;

	for (unsigned i = 0; i < warm; i++) {
		st = sync_call(te, peer, reqs, n);
		if (st != MC_OK)
			die_status(name, st);
	}
	t0 = now_ns();
	for (unsigned i = 0; i < iters; i++) {
		st = sync_call(te, peer, reqs, n);
		if (st != MC_OK)
			die_status(name, st);
	}
	printf("op=%s iters=%u mean_us=%.3f\n", name, iters,
	       (double)(now_ns() - t0) / 1000.0 / iters);
	fflush(stdout);
}

static int serve(uint64_t size)
{
	struct mc_te *te = engine_new();
	void *buf = buffer_alloc(size);
	mc_status st = mc_te_register(te, buf, size, "cpu:0", true);
	char line[64];

	if (st != MC_OK)
		die_status("mc_te_register", st);
	printf("READY name=%s addr=0x%" PRIxPTR " size=%" PRIu64 "\n", mc_te_local_name(te),
	       (uintptr_t)buf, size);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	mc_te_deregister(te, buf);
	mc_te_free(te);
	munmap(buf, size);
	return 0;
}

static int initiate(const char *peer, uint64_t raddr, unsigned iters, unsigned batch_iters,
		    int interactive)
{
	char line[128], op[64];
	struct mc_te *te = engine_new();
	uint64_t size = (uint64_t)BATCH_N * BATCH_PIECE;
	char *buf = buffer_alloc(size);
	struct mc_xfer_req small, batch[BATCH_N], smalls[2 * SMALL_N];
	mc_status st = mc_te_register(te, buf, size, "cpu:0", true);

	if (st != MC_OK)
		die_status("mc_te_register", st);
	small = (struct mc_xfer_req){
		.opcode = MC_OP_READ, .source = buf, .target_offset = raddr, .length = SMALL};
	for (size_t i = 0; i < BATCH_N; i++)
		batch[i] = (struct mc_xfer_req){.opcode = MC_OP_READ,
						.source = buf + i * BATCH_PIECE,
						.target_offset = raddr + i * BATCH_PIECE,
						.length = BATCH_PIECE};
	for (size_t i = 0; i < 2 * SMALL_N; i++) {
		uint64_t off = (i / 2) * (SMALL + TRAILER) + (i % 2 ? SMALL : 0);
		smalls[i] = (struct mc_xfer_req){.opcode = MC_OP_READ,
						 .source = buf + off,
						 .target_offset = raddr + off,
						 .length = i % 2 ? TRAILER : SMALL};
	}
	if (!interactive) {
		time_op(te, peer, "read_4k", &small, 1, iters, iters / 10 + 1);
		time_op(te, peer, "batch_32x4k", smalls, 2 * SMALL_N, iters, iters / 10 + 1);
		time_op(te, peer, "batch_128x64k", batch, BATCH_N, batch_iters,
			batch_iters / 10 + 1);
	} else {
		/* connect and warm up, then one timed loop per request */
		time_op(te, peer, "warmup", &small, 1, 1, 10);
		printf("READY\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin)) {
			unsigned n;
			if (sscanf(line, "%63s %u", op, &n) != 2 || n == 0)
				continue;
			if (strcmp(op, "read_4k") == 0)
				time_op(te, peer, op, &small, 1, n, 0);
			else if (strcmp(op, "batch_32x4k") == 0)
				time_op(te, peer, op, smalls, 2 * SMALL_N, n, 0);
			else if (strcmp(op, "batch_128x64k") == 0)
				time_op(te, peer, op, batch, BATCH_N, n, 0);
			else
				printf("op=%s error=unknown\n", op);
			fflush(stdout);
		}
	}
	mc_te_deregister(te, buf);
	mc_te_free(te);
	munmap(buf, size);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* --agg: phases of window / block / batch calls of batch requests each, on
 * command. */
static int aggregate(const char *peer, uint64_t raddr, uint64_t block, uint64_t window,
		     size_t batch)
{
	struct mc_te *te = engine_new();
	size_t calls = (size_t)(window / block) / batch;
	char *buf = buffer_alloc(window);
	uint64_t *lat = calloc(calls, sizeof(*lat));
	struct mc_xfer_req *reqs = calloc(batch, sizeof(*reqs));
	char line[64];
	mc_status st = mc_te_register(te, buf, window, "cpu:0", true);

	if (st != MC_OK)
		die_status("mc_te_register", st);
	if (!lat || !reqs)
		die("out of memory");
	reqs[0] = (struct mc_xfer_req){
		.opcode = MC_OP_READ, .source = buf, .target_offset = raddr, .length = block};
	st = sync_call(te, peer, reqs, 1); /* connect */
	if (st != MC_OK)
		die_status("first read", st);
	printf("READY\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		bool wr = !strncmp(line, "write", 5), rd = !strncmp(line, "read", 4);
		double t0, t1;

		if (!strncmp(line, "quit", 4))
			break;
		if (!wr && !rd) {
			printf("ERR unknown command\n");
			fflush(stdout);
			continue;
		}
		t0 = now_s();
		for (size_t c = 0; c < calls; c++) {
			uint64_t c0 = now_ns();

			for (size_t j = 0; j < batch; j++) {
				uint64_t off = (c * batch + j) * block;

				reqs[j] = (struct mc_xfer_req){.opcode = wr ? MC_OP_WRITE
									    : MC_OP_READ,
							       .source = buf + off,
							       .target_offset = raddr + off,
							       .length = block};
			}
			st = sync_call(te, peer, reqs, batch);
			if (st != MC_OK)
				die_status(wr ? "write" : "read", st);
			lat[c] = now_ns() - c0;
		}
		t1 = now_s();
		qsort(lat, calls, sizeof(*lat), cmp_u64);
		printf("OK bytes=%" PRIu64 " t0=%.6f t1=%.6f p99_us=%.1f\n",
		       (uint64_t)(calls * batch) * block, t0, t1,
		       (double)lat[(calls * 99 + 99) / 100 - 1] / 1000.0);
		fflush(stdout);
	}
	free(lat);
	free(reqs);
	mc_te_deregister(te, buf);
	mc_te_free(te);
	munmap(buf, window);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s --serve [--size N] [--host ADDR]\n"
		"       %s --peer NAME --addr A [--iters N] [--batch-iters M] "
		"[--interactive]\n"
		"       %s --agg --peer NAME --addr A --block B --window W [--batch N] "
		"[--host ADDR]\n",
		PROG, PROG, PROG);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"serve", no_argument, NULL, 's'},
		{"size", required_argument, NULL, 'z'},
		{"peer", required_argument, NULL, 'p'},
		{"addr", required_argument, NULL, 'a'},
		{"iters", required_argument, NULL, 'i'},
		{"batch-iters", required_argument, NULL, 'b'},
		{"interactive", no_argument, NULL, 'I'},
		{"agg", no_argument, NULL, 'g'},
		{"block", required_argument, NULL, 'B'},
		{"window", required_argument, NULL, 'w'},
		{"host", required_argument, NULL, 'H'},
		{"batch", required_argument, NULL, 'N'},
		{NULL, 0, NULL, 0},
	};
	uint64_t size = 16ull << 20, addr = 0, block = 0, window = 0;
	unsigned iters = 2000, batch_iters = 100;
	uint64_t agg_batch = 1;
	const char *peer = NULL;
	int serve_mode = 0, interactive = 0, agg = 0, c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			serve_mode = 1;
			break;
		case 'z':
			size = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			peer = optarg;
			break;
		case 'a':
			addr = strtoull(optarg, NULL, 0);
			break;
		case 'i':
			iters = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			batch_iters = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'I':
			interactive = 1;
			break;
		case 'g':
			agg = 1;
			break;
		case 'B':
			block = strtoull(optarg, NULL, 0);
			break;
		case 'w':
			window = strtoull(optarg, NULL, 0);
			break;
		case 'H':
			local_host = optarg;
			break;
		case 'N':
			agg_batch = strtoull(optarg, NULL, 0);
			break;
		default:
			usage();
		}
	}
	if (serve_mode) {
		if (size < (uint64_t)BATCH_N * BATCH_PIECE)
			size = (uint64_t)BATCH_N * BATCH_PIECE;
		return serve(size);
	}
	if (agg) {
		if (!peer || !addr || !block || window < block)
			usage();
		if (agg_batch < 1)
			die("--batch must be at least 1");
		if ((window / block) % agg_batch)
			die("--window of %" PRIu64 " blocks is not a multiple of --batch=%" PRIu64,
			    window / block, agg_batch);
		return aggregate(peer, addr, block, window, (size_t)agg_batch);
	}
	if (!peer || !addr || !iters || !batch_iters)
		usage();
	return initiate(peer, addr, iters, batch_iters, interactive);
}

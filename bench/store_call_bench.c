/*
 * store_call_bench - the C side of bench/py_store_overhead.py: the store
 * calls mooncake.store makes, timed through the public C API only
 * (<mooncake/store.h>).
 *
 *   store_call_bench --mode=holder --master=H:P --metadata=URI [--segment=BYTES]
 *       contributes a global segment, puts the objects both readers read
 *         pyov/4k          4 KiB
 *         pyov/64k/<i>     64 KiB each, i = 0..127
 *       (their only replicas are on this holder), prints
 *         READY hostname=<segment name>
 *       and serves until stdin closes.
 *
 *   store_call_bench --mode=client --master=H:P --metadata=URI
 *       a pure client (no segment) with an 8 MiB registered buffer that
 *       prints READY and then runs one timed loop per stdin line
 *       "<op> <iters>", answering "op=<op> iters=<n> mean_us=<x>":
 *         get_into_4k      mc_store_get_into of pyov/4k
 *         batch_128x64k    mc_store_batch_get_into of the 128 pyov/64k keys
 *       Every call's result is checked (size read) and each loop starts
 *       with one untimed warm-up call.
 *
 * Exit status: 0, 1 when a store call fails, 2 on bad flags.
 */
#include <mooncake/mooncake.h>
#include <mooncake/store.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PROG "store_call_bench"
#include "bench_util.h"

#define BATCH_N	    128
#define BATCH_PIECE (64u << 10)
#define SMALL	    4096u
#define KEY_LEN	    32

static struct {
	const char *mode;
	const char *master;
	const char *metadata;
	uint64_t segment;
} opt = {
	.mode = "client",
	.master = "127.0.0.1:50051",
	.metadata = "P2PHANDSHAKE",
	.segment = 64u << 20,
};

static struct mc_store *store;
static char keys_buf[BATCH_N][KEY_LEN];
static const char *keys[BATCH_N];

static void die_result(const char *what, int64_t st)
{
	fprintf(stderr, "%s: %s: %" PRId64 " (%s)\n", PROG, what, st,
		st < 0 ? mc_strerror((mc_status)st) : "unexpected size");
	exit(1);
}

static void setup(uint64_t segment)
{
	struct mc_store_params p = {
		.local_hostname = "127.0.0.1",
		.metadata_server = opt.metadata,
		.global_segment_size = segment,
		.local_buffer_size = 16u << 20,
		.protocol = "tcp",
		.master_server_addr = opt.master,
	};
	mc_status st = mc_store_new(&store);

	if (st != MC_OK)
		die_result("mc_store_new", st);
	st = mc_store_setup(store, &p);
	if (st != MC_OK)
		die_result("mc_store_setup", st);
	for (int i = 0; i < BATCH_N; i++) {
		snprintf(keys_buf[i], KEY_LEN, "pyov/64k/%d", i);
		keys[i] = keys_buf[i];
	}
}

static int holder(void)
{
	size_t size = (size_t)BATCH_N * BATCH_PIECE;
	char *buf = buffer_map(size), line[64];
	void *bufs[BATCH_N];
	size_t lens[BATCH_N];
	mc_status res[BATCH_N], st;

	setup(opt.segment);
	for (size_t i = 0; i < size; i++)
		buf[i] = (char)(i * 131 + 7);
	st = mc_store_register_buffer(store, buf, size);
	if (st != MC_OK)
		die_result("mc_store_register_buffer", st);
	st = mc_store_put_from(store, "pyov/4k", buf, SMALL, NULL);
	if (st != MC_OK)
		die_result("put_from pyov/4k", st);
	for (int i = 0; i < BATCH_N; i++) {
		bufs[i] = buf + (size_t)i * BATCH_PIECE;
		lens[i] = BATCH_PIECE;
	}
	st = mc_store_batch_put_from(store, keys, bufs, lens, BATCH_N, NULL, res);
	if (st != MC_OK)
		die_result("batch_put_from", st);
	for (int i = 0; i < BATCH_N; i++)
		if (res[i] != MC_OK)
			die_result(keys[i], res[i]);
	printf("READY hostname=%s\n", mc_store_hostname(store));
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	mc_store_free(store);
	return 0;
}

static void get_4k(char *buf)
{
	int64_t n = mc_store_get_into(store, "pyov/4k", buf, SMALL);

	if (n != SMALL)
		die_result("get_into pyov/4k", n);
}

static void get_batch(void *const *bufs, const size_t *caps)
{
	int64_t res[BATCH_N];
	mc_status st = mc_store_batch_get_into(store, keys, bufs, caps, BATCH_N, res);

	if (st != MC_OK)
		die_result("batch_get_into", st);
	for (int i = 0; i < BATCH_N; i++)
		if (res[i] != BATCH_PIECE)
			die_result(keys[i], res[i]);
}

static int client(void)
{
	size_t size = (size_t)BATCH_N * BATCH_PIECE;
	char *buf = buffer_map(size), line[128], op[64];
	void *bufs[BATCH_N];
	size_t caps[BATCH_N];
	unsigned iters;
	mc_status st;

	setup(0);
	st = mc_store_register_buffer(store, buf, size);
	if (st != MC_OK)
		die_result("mc_store_register_buffer", st);
	for (int i = 0; i < BATCH_N; i++) {
		bufs[i] = buf + (size_t)i * BATCH_PIECE;
		caps[i] = BATCH_PIECE;
	}
	get_4k(buf);
	get_batch(bufs, caps);
	printf("READY\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		uint64_t t0;
		bool small;

		if (sscanf(line, "%63s %u", op, &iters) != 2 || iters == 0)
			continue;
		small = strcmp(op, "get_into_4k") == 0;
		if (!small && strcmp(op, "batch_128x64k") != 0) {
			printf("op=%s error=unknown\n", op);
			fflush(stdout);
			continue;
		}
		if (small)
			get_4k(buf);
		else
			get_batch(bufs, caps);
		t0 = now_ns();
		for (unsigned i = 0; i < iters; i++) {
			if (small)
				get_4k(buf);
			else
				get_batch(bufs, caps);
		}
		printf("op=%s iters=%u mean_us=%.3f\n", op, iters,
		       (double)(now_ns() - t0) / 1000.0 / iters);
		fflush(stdout);
	}
	mc_store_unregister_buffer(store, buf);
	mc_store_free(store);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"mode", required_argument, NULL, 'o'},
		{"master", required_argument, NULL, 'm'},
		{"metadata", required_argument, NULL, 'd'},
		{"segment", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			opt.mode = optarg;
			break;
		case 'm':
			opt.master = optarg;
			break;
		case 'd':
			opt.metadata = optarg;
			break;
		case 's':
			opt.segment = strtoull(optarg, NULL, 0);
			break;
		case 'h':
			printf("usage: %s --mode=holder|client --master=H:P --metadata=URI "
			       "[--segment=BYTES]\n",
			       PROG);
			return 0;
		default:
			return 2;
		}
	}
	if (strcmp(opt.mode, "holder") == 0)
		return holder();
	if (strcmp(opt.mode, "client") == 0)
		return client();
	fprintf(stderr, "%s: unknown mode '%s'\n", PROG, opt.mode);
	return 2;
}

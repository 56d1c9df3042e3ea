/*
 * master_sweep_bench - how long the master's RPC loop stops for the sweep
 * after an unmount (docs/design.md, "Master": the sweep runs in slices).
 *
 *   master_sweep_bench [--objects=1000000] [--slice-us=100] [--runs=1]
 *
 * An in-process master (master/master.h, no network: the daemon runs the
 * same calls under its lock, so the longest call is the longest pause of
 * its loop) gets two fake segments, --objects one-replica objects on the
 * first and one probe object on the second, then per run:
 *   - case=sliced: UnmountSegment of the first segment (timed), then
 *     mc_master_sweep_run(--slice-us) until it is done, with a Get of the
 *     probe object and of a swept key between slices (both checked);
 *   - case=one_call: the same table again, swept in one call
 *     (mc_master_sweep_run(0)), which is what one unmount used to cost.
 * One line per case: "case=<name> objects=.. unmount_us=.. slices=..
 * max_pause_us=.. p50_slice_us=.. p99_slice_us=.. max_slice_cpu_us=..
 * sweep_ms=.. wall_ms=..", where max_pause_us is the longest single call
 * (the unmount or a slice, wall clock), max_slice_cpu_us the longest
 * slice in this thread's CPU time (what it costs, preemption on a busy
 * machine left out), sweep_ms the time spent sweeping and wall_ms from
 * the unmount to the end of the sweep, requests between slices included.
 * unmount_us includes freeing the segment's allocator (its block records);
 * the first case of a process pays that through munmap, later ones reuse
 * the heap.
 *
 * Exit status: 0, 1 when a call fails or a check does not hold, 2 on bad
 * flags.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master.h"
#include "mooncake/log.h"
#include "store/proto.h"

#define PROG "master_sweep_bench"
#include "bench_util.h"

#define FRAME_KEYS 1000
#define KEY_LEN	   24

static struct {
	uint64_t objects;
	uint64_t slice_us;
	int runs;
} opt = {
	.objects = 1000000,
	.slice_us = 100,
	.runs = 1,
};

static const struct mc_store_uuid client_id = {0x5ee9, 0x4e6e};
static const struct mc_store_uuid seg_a = {0x5ee9, 1}, seg_b = {0x5ee9, 2};
static uint64_t now_ms = 1000000;

static double us_since(uint64_t t0)
{
	return (double)(now_ns() - t0) / 1e3;
}

/* This thread's CPU time: a slice's own cost, whatever else the machine runs. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One request, handled in process; returns its status. */
static mc_status handle(struct mc_master *m, uint16_t type, const void *body, size_t body_len)
{
	static struct mc_buf out;
	struct mc_store_msg q;

	memset(&q, 0, sizeof(q));
	q.hdr.type = type;
	q.hdr.req_id = 1;
	memcpy(&q.body, body, body_len);
	mc_buf_reset(&out);
	return mc_master_handle(m, &q, now_ms, &out);
}

#define HANDLE(m, type, body) handle((m), (type), &(body), sizeof(body))

static void must(mc_status st, const char *what)
{
	if (st != MC_OK)
		die("%s: %s: %s", what, mc_status_name(st), mc_last_error());
}

static struct mc_store_segment segment(struct mc_store_uuid id, const char *name, uint64_t base)
{
	return (struct mc_store_segment){
		.id = id,
		.name = mc_proto_str_c(name),
		.base = base,
		.size = 1ull << 40,
		.te_endpoint = mc_proto_str_c(name),
		.protocol = mc_proto_str_c("tcp"),
		.host_id = mc_proto_str_c(""),
	};
}

static int key_of(char *buf, uint64_t i)
{
	return snprintf(buf, KEY_LEN, "key-%012" PRIu64, i);
}

/* Mount both segments and put the objects (on a) and the probe (on b). */
static void load(struct mc_master *m)
{
	static char names[FRAME_KEYS][KEY_LEN];
	static struct mc_store_put_item items[FRAME_KEYS];
	static struct mc_store_object_meta metas[FRAME_KEYS];
	struct mc_store_mount_req ma = {client_id, segment(seg_a, "sweep-a:1", 1ull << 44)};
	struct mc_store_mount_req mb = {client_id, segment(seg_b, "sweep-b:1", 1ull << 45)};
	struct mc_store_put_start_req ps = {
		.client_id = client_id,
		.key = mc_proto_str_c("probe"),
		.value_len = 64,
		.config = {.replica_num = 1, .preferred_segment = mc_proto_str_c("sweep-b:1")}};
	struct mc_store_put_end_req pe = {.client_id = client_id,
					  .replica_type = MC_STORE_REPLICA_ALL,
					  .key = mc_proto_str_c("probe")};

	must(HANDLE(m, MC_STORE_MOUNT_SEGMENT, ma), "mount a");
	must(HANDLE(m, MC_STORE_MOUNT_SEGMENT, mb), "mount b");
	must(HANDLE(m, MC_STORE_PUT_START, ps), "put probe");
	must(HANDLE(m, MC_STORE_PUT_END, pe), "end probe");
	for (uint64_t first = 0; first < opt.objects; first += FRAME_KEYS) {
		uint32_t n = (uint32_t)(opt.objects - first < FRAME_KEYS ? opt.objects - first
									 : FRAME_KEYS);
		struct mc_store_batch_put_start_req bs = {
			.client_id = client_id,
			.config = {.replica_num = 1,
				   .preferred_segment = mc_proto_str_c("sweep-a:1")},
			.n_items = n,
			.items = items};
		struct mc_store_batch_put_end_req be = {.client_id = client_id,
							.replica_type = MC_STORE_REPLICA_ALL,
							.n_items = n,
							.items = metas};

		for (uint32_t i = 0; i < n; i++) {
			int len = key_of(names[i], first + i);

			items[i] = (struct mc_store_put_item){.key = {names[i], (uint32_t)len},
							      .value_len = 64};
			metas[i] = (struct mc_store_object_meta){.key = {names[i], (uint32_t)len}};
		}
		must(HANDLE(m, MC_STORE_BATCH_PUT_START, bs), "batch put start");
		must(HANDLE(m, MC_STORE_BATCH_PUT_END, be), "batch put end");
	}
	if (mc_master_sweep_pending(m))
		die("a sweep is pending before the unmount");
}

static mc_status get(struct mc_master *m, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(""), mc_proto_str_c(key)};

	return HANDLE(m, MC_STORE_GET_REPLICA_LIST, r);
}

static void one_case(bool sliced)
{
	struct mc_master_config cfg;
	struct mc_master *m;
	struct mc_master_metrics x;
	struct mc_store_unmount_req u = {client_id, seg_a};
	double *slices = NULL, unmount_us, sweep_us = 0, max_us, max_cpu_us = 0, p50, p99;
	size_t n = 0, cap = 0;
	char gone[KEY_LEN];
	uint64_t t0, c0, wall0;

	mc_master_config_defaults(&cfg);
	cfg.client_ttl_ms = 1ull << 40; /* nobody pings here */
	must(mc_master_new(&cfg, &m), "master");
	load(m);
	key_of(gone, opt.objects / 2);
	wall0 = t0 = now_ns();
	must(HANDLE(m, MC_STORE_UNMOUNT_SEGMENT, u), "unmount");
	unmount_us = us_since(t0);
	max_us = unmount_us;
	for (bool more = true; more;) {
		c0 = cpu_ns();
		t0 = now_ns();
		more = mc_master_sweep_run(m, sliced ? opt.slice_us : 0);
		if ((double)(cpu_ns() - c0) / 1e3 > max_cpu_us)
			max_cpu_us = (double)(cpu_ns() - c0) / 1e3;
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			slices = realloc(slices, cap * sizeof(*slices));
			if (!slices)
				die("out of memory");
		}
		slices[n] = us_since(t0);
		sweep_us += slices[n];
		if (slices[n] > max_us)
			max_us = slices[n];
		n++;
		/* what the loop serves between slices */
		if (get(m, "probe") != MC_OK)
			die("the probe object on the other segment is not readable");
		if (get(m, gone) != MC_ERR_OBJECT_NOT_FOUND)
			die("%s, on the unmounted segment, is still found", gone);
	}
	{
		double wall_ms = us_since(wall0) / 1e3;

		qsort(slices, n, sizeof(*slices), cmp_double);
		p50 = slices[n / 2];
		p99 = slices[(n * 99) / 100];
		mc_master_metrics(m, &x);
		if (x.key_count != 1)
			die("%" PRIu64 " objects left after the sweep, 1 expected", x.key_count);
		printf("case=%s objects=%" PRIu64 " unmount_us=%.1f slices=%zu max_pause_us=%.1f "
		       "p50_slice_us=%.1f p99_slice_us=%.1f max_slice_cpu_us=%.1f sweep_ms=%.1f "
		       "wall_ms=%.1f\n",
		       sliced ? "sliced" : "one_call", opt.objects, unmount_us, n, max_us, p50, p99,
		       max_cpu_us, sweep_us / 1e3, wall_ms);
		fflush(stdout);
	}
	free(slices);
	mc_master_free(m);
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"objects", required_argument, NULL, 'o'},
		{"slice-us", required_argument, NULL, 's'},
		{"runs", required_argument, NULL, 'r'},
		{NULL, 0, NULL, 0},
	};
	int o;

	while ((o = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (o) {
		case 'o':
			opt.objects = strtoull(optarg, NULL, 10);
			break;
		case 's':
			opt.slice_us = strtoull(optarg, NULL, 10);
			break;
		case 'r':
			opt.runs = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: %s [--objects=N] [--slice-us=US] [--runs=N]\n",
				PROG);
			return 2;
		}
	}
	if (opt.objects == 0 || opt.slice_us == 0 || opt.runs < 1) {
		fprintf(stderr, "%s: --objects, --slice-us and --runs must be positive\n", PROG);
		return 2;
	}
	mc_log_set_level(MC_LOG_WARN);
	for (int r = 0; r < opt.runs; r++) {
		one_case(true);
		one_case(false);
	}
	return 0;
}

/*
 * master_sweep_bench - how long the master's RPC loop stops for the sweep
 * after an unmount (docs/design.md, "Master": the sweep runs in slices).
 *
 *   master_sweep_bench [--objects=1000000] [--slice-us=100] [--runs=1]
 *                      [--case=unmount|removeall]
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
 * --case=removeall runs, instead, one RemoveAll (force) of every object
 * as the daemon does: the job started by mc_master_handle_start, then
 * mc_master_job_run(--slice-us) with the Gets and, every 10 ms of wall,
 * mc_master_tick in between (the daemon's loop), with the daemon's malloc
 * settings (mallopt M_MXFAST 0, M_TRIM_THRESHOLD -1, tools/mooncake_master.c);
 * the line is "case=removeall objects=.. slices=.. max_pause_us=..
 * max_tick_us=.. p50_slice_us=.. p99_slice_us=.. max_slice_cpu_us=..
 * max_tick_cpu_us=.. removed=.. wall_ms=.."; every object, the probe
 * included, must be gone and counted.
 *
 * Exit status: 0, 1 when a call fails or a check does not hold, 2 on bad
 * flags.
 */
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
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
	bool removeall;
} opt = {
	.objects = 1000000,
	.slice_us = 100,
	.runs = 1,
};

static const struct mc_store_uuid client_id = {0x5ee9, 0x4e6e};
static const struct mc_store_uuid seg_a = {0x5ee9, 1}, seg_b = {0x5ee9, 2};
static uint64_t now_ms = 1000000;

/* The longest call of load() (a table or allocator growing), wall and CPU. */
static double load_max_us, load_max_cpu_us;

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
		for (int k = 0; k < 2; k++) {
			uint64_t t0 = now_ns(), c0 = cpu_ns();
			double w, c;

			if (k == 0)
				must(HANDLE(m, MC_STORE_BATCH_PUT_START, bs), "batch put start");
			else
				must(HANDLE(m, MC_STORE_BATCH_PUT_END, be), "batch put end");
			w = us_since(t0);
			c = (double)(cpu_ns() - c0) / 1e3;
			load_max_us = w > load_max_us ? w : load_max_us;
			load_max_cpu_us = c > load_max_cpu_us ? c : load_max_cpu_us;
		}
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

static void slice_push(double **v, size_t *n, size_t *cap, double x)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 1024;
		*v = realloc(*v, *cap * sizeof(**v));
		if (!*v)
			die("out of memory");
	}
	(*v)[(*n)++] = x;
}

/* One RemoveAll (force) in slices, as the daemon's loop runs it. */
static void removeall_case(void)
{
	struct mc_master_config cfg;
	struct mc_master *m;
	struct mc_master_metrics x;
	struct mc_master_job *job = NULL;
	struct mc_store_remove_all_req r = {.tenant = mc_proto_str_c(""), .force = true};
	struct mc_store_msg q;
	struct mc_buf out;
	double *slices = NULL, max_us = 0, max_cpu_us = 0, max_tick_us = 0, max_tick_cpu_us = 0;
	double shrink_max_us = 0, shrink_max_cpu_us = 0;
	size_t n = 0, cap = 0;
	char gone[KEY_LEN];
	uint64_t t0, c0, wall0, last_tick;
	mc_status st;

	mc_master_config_defaults(&cfg);
	cfg.client_ttl_ms = 1ull << 40;
	must(mc_master_new(&cfg, &m), "master");
	load(m);
	key_of(gone, opt.objects / 2);
	memset(&q, 0, sizeof(q));
	q.hdr.type = MC_STORE_REMOVE_ALL;
	q.hdr.req_id = 1;
	q.body.remove_all_req = r;
	mc_buf_init(&out);
	wall0 = last_tick = now_ns();
	t0 = now_ns();
	c0 = cpu_ns();
	st = mc_master_handle_start(m, &q, now_ms, &out, &job);
	max_us = us_since(t0);
	max_cpu_us = (double)(cpu_ns() - c0) / 1e3;
	if (st != MC_INPROGRESS || !job)
		die("RemoveAll did not start a job: %s", mc_status_name(st));
	while (st == MC_INPROGRESS) {
		double w, c;

		c0 = cpu_ns();
		t0 = now_ns();
		st = mc_master_job_run(m, job, now_ms, opt.slice_us, &out);
		w = us_since(t0);
		c = (double)(cpu_ns() - c0) / 1e3;
		max_us = w > max_us ? w : max_us;
		max_cpu_us = c > max_cpu_us ? c : max_cpu_us;
		slice_push(&slices, &n, &cap, w);
		/* a request between slices, answered whether RemoveAll took it yet or not */
		if (get(m, "probe") != MC_OK && get(m, "probe") != MC_ERR_OBJECT_NOT_FOUND)
			die("a Get between RemoveAll's slices failed");
		if (now_ns() - last_tick >= 10000000ull) {
			last_tick = now_ns();
			c0 = cpu_ns();
			now_ms += 10;
			mc_master_tick(m, now_ms);
			w = us_since(last_tick);
			c = (double)(cpu_ns() - c0) / 1e3;
			max_tick_us = w > max_tick_us ? w : max_tick_us;
			max_tick_cpu_us = c > max_tick_cpu_us ? c : max_tick_cpu_us;
		}
	}
	must(st, "RemoveAll");
	if (get(m, gone) != MC_ERR_OBJECT_NOT_FOUND)
		die("%s is still found after RemoveAll", gone);
	/* then the ticks that shrink the emptied table (halving by halving, each
	 * moving 2^16 slots a tick): the table had at most 2 * 4/3 * objects slots */
	{
		uint64_t ticks = 2 * (opt.objects * 8 / 3) / 65536 + 64;

		for (uint64_t i = 0; i < ticks; i++) {
			double w, c;

			t0 = now_ns();
			c0 = cpu_ns();
			now_ms += 10;
			mc_master_tick(m, now_ms);
			w = us_since(t0);
			c = (double)(cpu_ns() - c0) / 1e3;
			shrink_max_us = w > shrink_max_us ? w : shrink_max_us;
			shrink_max_cpu_us = c > shrink_max_cpu_us ? c : shrink_max_cpu_us;
		}
	}
	{
		struct mc_store_count_resp cnt;
		int64_t removed;
		double wall_ms = us_since(wall0) / 1e3;

		if (out.len < MC_PROTO_HDR_LEN ||
		    mc_store_remove_all_response_decode(out.data + MC_PROTO_HDR_LEN,
							out.len - MC_PROTO_HDR_LEN, &cnt) != MC_OK)
			die("RemoveAll gave no response that decodes");
		removed = cnt.count;
		qsort(slices, n, sizeof(*slices), cmp_double);
		mc_master_metrics(m, &x);
		if (x.key_count != 0 || (uint64_t)removed != opt.objects + 1)
			die("RemoveAll: %" PRIu64 " objects left, %" PRId64 " counted, %" PRIu64
			    " expected",
			    x.key_count, removed, opt.objects + 1);
		printf("case=removeall objects=%" PRIu64 " slices=%zu max_pause_us=%.1f "
		       "max_tick_us=%.1f p50_slice_us=%.1f p99_slice_us=%.1f "
		       "max_slice_cpu_us=%.1f max_tick_cpu_us=%.1f removed=%" PRId64
		       " wall_ms=%.1f load_max_call_us=%.1f load_max_call_cpu_us=%.1f "
		       "shrink_max_tick_us=%.1f shrink_max_tick_cpu_us=%.1f\n",
		       opt.objects, n, max_us, max_tick_us, slices[n / 2], slices[(n * 99) / 100],
		       max_cpu_us, max_tick_cpu_us, removed, wall_ms, load_max_us, load_max_cpu_us,
		       shrink_max_us, shrink_max_cpu_us);
		fflush(stdout);
	}
	free(slices);
	mc_buf_release(&out);
	mc_master_free(m);
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"objects", required_argument, NULL, 'o'},
		{"slice-us", required_argument, NULL, 's'},
		{"runs", required_argument, NULL, 'r'},
		{"case", required_argument, NULL, 'c'},
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
		case 'c':
			if (strcmp(optarg, "removeall") == 0)
				opt.removeall = true;
			else if (strcmp(optarg, "unmount") != 0)
				opt.runs = 0; /* refused below */
			break;
		default:
			fprintf(stderr,
				"usage: %s [--objects=N] [--slice-us=US] [--runs=N] "
				"[--case=unmount|removeall]\n",
				PROG);
			return 2;
		}
	}
	if (opt.objects == 0 || opt.slice_us == 0 || opt.runs < 1) {
		fprintf(stderr, "%s: --objects, --slice-us and --runs must be positive\n", PROG);
		return 2;
	}
	mc_log_set_level(MC_LOG_WARN);
	if (opt.removeall) {
		/* the daemon's malloc settings (tools/mooncake_master.c) */
		mallopt(M_MXFAST, 0);
		mallopt(M_TRIM_THRESHOLD, -1);
		for (int r = 0; r < opt.runs; r++)
			removeall_case();
		return 0;
	}
	for (int r = 0; r < opt.runs; r++) {
		one_case(true);
		one_case(false);
	}
	return 0;
}

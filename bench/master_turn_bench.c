/*
 * master_turn_bench - what one turn of the master's RPC loop costs while its
 * tables fill, and what one BatchExistKey costs per key, in process.
 *
 *   master_turn_bench [--objects=16000000] [--value-size=1024] [--slow-ms=10]
 *                     [--exist-runs=0] [--duration=2]
 *
 * The load is store_proto_bench --load's (keys "load-<i>", BatchPutStart +
 * BatchPutEnd of 1000 keys, one fake 1 TiB segment), run as the daemon's
 * loop runs it: each request frame decoded in an arena, handled (the
 * response encoded), released; mc_master_tick every 10 ms of wall time;
 * the daemon's malloc settings (tools/mooncake_master.c).  The frames are
 * built beforehand and not timed.  Each call (a request or a tick) is timed
 * in this thread's CPU time and wall time, with the minor page faults in
 * it, so a long one can be told apart: work (CPU), faults, or waiting for a
 * CPU.  Prints
 *
 *   SLOW kind=start|end|tick objects=.. cpu_us=.. wall_us=.. minflt=.. mono_s=..
 *
 * for each call over --slow-ms of CPU (mono_s is CLOCK_MONOTONIC at its
 * start: `perf record -k CLOCK_MONOTONIC` then `perf script --time` picks
 * out its samples), and at the end
 *
 *   load objects=.. s=.. keys_per_s=.. calls=.. over_10ms_cpu=..
 *        over_50ms_cpu=.. max_cpu_us=.. max_wall_us=.. p99_cpu_us=..
 *        max_tick_cpu_us=..
 *
 * With --exist-runs=N, then N runs of --duration seconds of BatchExistKey
 * of 1000 random loaded keys (decode, handle, release, as above), and one
 * line "exist keys_per_s=.. decode_ns_per_key=.. handle_ns_per_key=..
 * release_ns_per_key=.." (medians of the runs, in this thread's CPU time:
 * keys per CPU second): the master's side of the call without the
 * socket, split into its parts.
 *
 * Exit status: 0, 1 when a call fails, 2 on bad flags.
 */
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/compiler.h"
#include "base/time.h"
#include "master/master.h"
#include "mooncake/log.h"
#include "store/proto.h"

#define PROG "master_turn_bench"
#include "bench_util.h"

#define FRAME_KEYS 1000
#define KEY_LEN	   32
#define TICK_NS	   10000000ull

static struct {
	uint64_t objects;
	uint64_t value_size;
	double slow_ms;
	int exist_runs;
	double duration;
} opt = {
	.objects = 16000000,
	.value_size = 1024,
	.slow_ms = 10,
	.duration = 2,
};

static const struct mc_store_uuid client_id = {0x7e57, 0x7a1e};
static const struct mc_store_uuid seg_id = {0x7e57, 1};
static struct mc_store_decode_arena arena;
static struct mc_buf out;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long minflt(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_minflt : 0;
}

/* A built request frame: decoded, handled and released as the loop does. */
static void serve(struct mc_master *m, const struct mc_buf *frame, const char *what)
{
	struct mc_store_msg q;
	mc_status st;

	arena.used = arena.spilled = 0;
	st = mc_store_msg_decode_in(&arena, frame->data, frame->len, MC_PROTO_MAX_PAYLOAD, &q);
	if (st != MC_OK)
		die_status(what, st);
	mc_buf_reset(&out);
	st = mc_master_handle(m, &q, mc_now_ms(), &out);
	mc_store_msg_release_in(&arena, &q);
	if (st != MC_OK)
		die_status(what, st);
}

static void encode(struct mc_buf *b, uint16_t type, const void *body)
{
	mc_status st;

	mc_buf_reset(b);
	st = mc_store_request_encode(b, type, 1, body);
	if (st != MC_OK)
		die_status("encode", st);
}

struct turns {
	uint64_t calls, over10, over50, max_cpu, max_wall, max_tick_cpu;
	uint64_t *cpu; /* every call's CPU ns, for the p99 */
};

static void account(struct turns *t, const char *kind, uint64_t objects, uint64_t cpu,
		    uint64_t wall, long flt, double mono_s)
{
	t->cpu[t->calls++] = cpu;
	t->over10 += cpu > 10000000ull;
	t->over50 += cpu > 50000000ull;
	t->max_cpu = cpu > t->max_cpu ? cpu : t->max_cpu;
	t->max_wall = wall > t->max_wall ? wall : t->max_wall;
	if (kind[0] == 't' && cpu > t->max_tick_cpu)
		t->max_tick_cpu = cpu;
	if ((double)cpu >= opt.slow_ms * 1e6) {
		printf("SLOW kind=%s objects=%" PRIu64 " cpu_us=%.0f wall_us=%.0f minflt=%ld "
		       "mono_s=%.6f\n",
		       kind, objects, (double)cpu / 1e3, (double)wall / 1e3, flt, mono_s);
		fflush(stdout);
	}
}

/* Time fn's call as one turn. */
#define TURN(t, kind, objects, call)                                                  \
	do {                                                                          \
		long f0_ = minflt();                                                  \
		uint64_t w0_ = now_ns(), c0_ = cpu_ns();                              \
		call;                                                                 \
		uint64_t c1_ = cpu_ns(), w1_ = now_ns();                              \
		account((t), (kind), (objects), c1_ - c0_, w1_ - w0_, minflt() - f0_, \
			(double)w0_ / 1e9);                                           \
	} while (0)

static int key_of(char *buf, uint64_t i)
{
	return snprintf(buf, KEY_LEN, "load-%" PRIu64, i);
}

static void load(struct mc_master *m)
{
	static char names[FRAME_KEYS][KEY_LEN];
	static struct mc_store_put_item items[FRAME_KEYS];
	static struct mc_store_object_meta metas[FRAME_KEYS];
	struct mc_store_segment seg = {
		.id = seg_id,
		.name = mc_proto_str_c("turn-bench:1"),
		.base = 1ull << 44,
		.size = 1ull << 40,
		.te_endpoint = mc_proto_str_c("turn-bench:1"),
		.protocol = mc_proto_str_c("tcp"),
		.host_id = mc_proto_str_c(""),
	};
	struct mc_store_mount_req mr = {client_id, seg};
	struct mc_buf fs, fe;
	struct turns t = {0};
	uint64_t t0, last_tick;
	size_t cap = (size_t)(opt.objects / FRAME_KEYS + 2) * 2 + 1000000;
	double s;

	t.cpu = malloc(cap * sizeof(*t.cpu));
	if (!t.cpu)
		die("out of memory");
	mc_buf_init(&fs);
	mc_buf_init(&fe);
	encode(&fs, MC_STORE_MOUNT_SEGMENT, &mr);
	serve(m, &fs, "mount");
	t0 = last_tick = now_ns();
	for (uint64_t first = 0; first < opt.objects; first += FRAME_KEYS) {
		uint32_t n = (uint32_t)MC_MIN(opt.objects - first, FRAME_KEYS);
		struct mc_store_batch_put_start_req bs = {
			.client_id = client_id,
			.config = {.replica_num = 1,
				   .preferred_segment = mc_proto_str_c("turn-bench:1")},
			.n_items = n,
			.items = items};
		struct mc_store_batch_put_end_req be = {.client_id = client_id,
							.replica_type = MC_STORE_REPLICA_ALL,
							.n_items = n,
							.items = metas};

		for (uint32_t i = 0; i < n; i++) {
			int len = key_of(names[i], first + i);

			items[i] = (struct mc_store_put_item){.key = {names[i], (uint32_t)len},
							      .value_len = opt.value_size};
			metas[i] = (struct mc_store_object_meta){.key = {names[i], (uint32_t)len}};
		}
		encode(&fs, MC_STORE_BATCH_PUT_START, &bs);
		encode(&fe, MC_STORE_BATCH_PUT_END, &be);
		TURN(&t, "start", first, serve(m, &fs, "BatchPutStart"));
		TURN(&t, "end", first + n, serve(m, &fe, "BatchPutEnd"));
		if (now_ns() - last_tick >= TICK_NS && t.calls + 1 < cap) {
			last_tick = now_ns();
			TURN(&t, "tick", first + n, (void)mc_master_tick(m, mc_now_ms()));
		}
	}
	s = (double)(now_ns() - t0) / 1e9;
	qsort(t.cpu, t.calls, sizeof(*t.cpu), cmp_u64);
	printf("load objects=%" PRIu64 " s=%.2f keys_per_s=%.0f calls=%" PRIu64
	       " over_10ms_cpu=%" PRIu64 " over_50ms_cpu=%" PRIu64
	       " max_cpu_us=%.0f max_wall_us=%.0f p99_cpu_us=%.0f max_tick_cpu_us=%.0f\n",
	       opt.objects, s, (double)opt.objects / s, t.calls, t.over10, t.over50,
	       (double)t.max_cpu / 1e3, (double)t.max_wall / 1e3,
	       (double)t.cpu[t.calls * 99 / 100] / 1e3, (double)t.max_tick_cpu / 1e3);
	fflush(stdout);
	free(t.cpu);
	mc_buf_release(&fs);
	mc_buf_release(&fe);
}

/* One run of BatchExistKey calls: keys per second of this thread's CPU
 * time (a loaded machine's waits left out) and the parts' CPU ns per key. */
static void exist_run(struct mc_master *m, double parts[4])
{
	enum { NFRAMES = 64 };
	static char names[FRAME_KEYS][KEY_LEN];
	static struct mc_proto_str keys[FRAME_KEYS];
	static struct mc_buf frames[NFRAMES];
	static uint64_t seed = 1;
	uint64_t dec = 0, han = 0, rel = 0, nk = 0, t0, end;

	for (int f = 0; f < NFRAMES; f++) {
		struct mc_store_keys_req kr = {
			.tenant = mc_proto_str_c(""), .n_keys = FRAME_KEYS, .keys = keys};

		for (uint32_t i = 0; i < FRAME_KEYS; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			keys[i].len = (uint32_t)key_of(names[i], (seed >> 33) % opt.objects);
			keys[i].ptr = names[i];
		}
		encode(&frames[f], MC_STORE_BATCH_EXIST_KEY, &kr);
	}
	t0 = cpu_ns();
	end = now_ns() + (uint64_t)(opt.duration * 1e9);
	for (int f = 0; now_ns() < end; f = (f + 1) % NFRAMES) {
		struct mc_store_msg q;
		uint64_t a, b, c, d;
		mc_status st;

		a = cpu_ns();
		arena.used = arena.spilled = 0;
		st = mc_store_msg_decode_in(&arena, frames[f].data, frames[f].len,
					    MC_PROTO_MAX_PAYLOAD, &q);
		b = cpu_ns();
		if (st != MC_OK)
			die_status("decode", st);
		mc_buf_reset(&out);
		st = mc_master_handle(m, &q, mc_now_ms(), &out);
		c = cpu_ns();
		mc_store_msg_release_in(&arena, &q);
		d = cpu_ns();
		if (st != MC_OK)
			die_status("BatchExistKey", st);
		dec += b - a;
		han += c - b;
		rel += d - c;
		nk += FRAME_KEYS;
	}
	parts[0] = (double)nk / ((double)(cpu_ns() - t0) / 1e9);
	parts[1] = (double)dec / (double)nk;
	parts[2] = (double)han / (double)nk;
	parts[3] = (double)rel / (double)nk;
}

static void exist(struct mc_master *m)
{
	double v[4][MAX_RUNS], parts[4];

	for (int r = 0; r < opt.exist_runs; r++) {
		exist_run(m, parts);
		for (int k = 0; k < 4; k++)
			v[k][r] = parts[k];
	}
	printf("exist keys_per_s=%.0f decode_ns_per_key=%.1f handle_ns_per_key=%.1f "
	       "release_ns_per_key=%.1f\n",
	       median(v[0], opt.exist_runs), median(v[1], opt.exist_runs),
	       median(v[2], opt.exist_runs), median(v[3], opt.exist_runs));
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"objects", required_argument, NULL, 'o'},
		{"value-size", required_argument, NULL, 'v'},
		{"slow-ms", required_argument, NULL, 's'},
		{"exist-runs", required_argument, NULL, 'e'},
		{"duration", required_argument, NULL, 'd'},
		{NULL, 0, NULL, 0},
	};
	struct mc_master_config cfg;
	struct mc_master *m;
	int o;

	while ((o = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (o) {
		case 'o':
			opt.objects = strtoull(optarg, NULL, 10);
			break;
		case 'v':
			opt.value_size = strtoull(optarg, NULL, 10);
			break;
		case 's':
			opt.slow_ms = atof(optarg);
			break;
		case 'e':
			opt.exist_runs = atoi(optarg);
			break;
		case 'd':
			opt.duration = atof(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [--objects=N] [--value-size=B] [--slow-ms=MS] "
				"[--exist-runs=N] [--duration=S]\n",
				PROG);
			return 2;
		}
	}
	if (opt.objects == 0 || opt.value_size == 0 || opt.exist_runs < 0 ||
	    opt.exist_runs > MAX_RUNS || opt.duration <= 0) {
		fprintf(stderr, "%s: bad flags (--exist-runs at most %d)\n", PROG, MAX_RUNS);
		return 2;
	}
	mc_log_set_level(MC_LOG_WARN);
	/* the daemon's malloc settings (tools/mooncake_master.c) */
	mallopt(M_MXFAST, 0);
	mallopt(M_TRIM_THRESHOLD, -1);
	mc_master_config_defaults(&cfg);
	cfg.client_ttl_ms = 1ull << 40; /* nobody pings here */
	if (mc_master_new(&cfg, &m) != MC_OK)
		die("no master");
	mc_buf_init(&out);
	/* the loop's decode arena, at the size a 1000-key frame grows it to */
	arena.cap = 4u << 20;
	arena.base = malloc(arena.cap);
	if (!arena.base)
		die("out of memory");
	load(m);
	if (opt.exist_runs)
		exist(m);
	mc_master_free(m);
	mc_buf_release(&out);
	free(arena.base);
	return 0;
}

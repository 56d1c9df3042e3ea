/*
 * store_proto_bench - the master's metadata path measured on the wire, and
 * a loader for the master's memory per object (bench/master_rss.py).
 *
 * It speaks the store protocol (docs/protocol.md) directly through
 * store/proto.h over one blocking TCP connection, so it needs no segment
 * memory and no Transfer Engine: it mounts a fake segment (the master only
 * does bookkeeping on segments and never touches their memory) and creates
 * objects on it with BatchPutStart + BatchPutEnd, 1000 keys per frame.
 * The master must run with --mount_probe=false, or it refuses the fake
 * segment (no engine answers its probe).
 * This is the one bench that links the internal archive: the public API
 * has no batch GetReplicaList call, and the loader must stop short of any
 * data transfer.
 *
 *   store_proto_bench --master=H:P [--keys=1000] [--batch=1000] [--runs=5]
 *                     [--duration=2] [--json]
 *       Creates --keys objects, then measures ExistKey, BatchExistKey,
 *       GetReplicaList and BatchGetReplicaList at batch 1 and --batch:
 *       calls/s, keys/s and p50/p99 round-trip latency per call (medians
 *       of --runs runs of --duration seconds).  One line per case:
 *       "case=<name> batch=<n> ops/s=.. keys/s=.. p50_us=.. p99_us=..".
 *
 *   store_proto_bench --master=H:P --clients=N [--duration=2] [--master-pid=PID]
 *       N client processes at once, each with its own connection, fake
 *       segment and keys, looping over ExistKey, GetReplicaList, PutStart,
 *       PutEnd and Remove for --duration seconds: total calls/s, the spread
 *       of the per-client rates (min/median/max: is anyone starved), the
 *       median and worst of the per-client p99s, and with --master-pid the
 *       master's CPU time per call.
 *
 *   store_proto_bench --master=H:P --load=N [--value-size=1024]
 *       Creates N objects ("load-<i>"), printing "loaded <n>" now and then
 *       and "DONE objects=<n> s=<t> keys/s=<r>" at the end, then keeps the
 *       fake client alive (Ping every second) until stdin closes, so the
 *       objects stay while the caller measures the master.
 *
 *       The lines "removeall" and "unmount" on its stdin make it call
 *       RemoveAll or UnmountSegment and print how long the call took
 *       ("idle": nothing, the baseline).
 *
 *   store_proto_bench --master=H:P --probe
 *       ExistKey on its own connection, back to back, until stdin closes;
 *       prints the longest round trip (the longest the master's loop kept
 *       a ready client waiting) and the p99/p99.9.
 *
 *   store_proto_bench --master=H:P --recover=N
 *       The --load client come back after a master restart (bench/
 *       master_restart.py): mounts the same fake segment, which binds the
 *       objects a restarted master replayed from its log and snapshot, and
 *       checks with ExistKey that load-0, load-<N-1> and 1,000 keys between
 *       are served; prints "RECOVERED objects=<n> s=<mount and checks>".
 *
 *   store_proto_bench --decode [--batch=73] [--runs=5] [--duration=2]
 *       No master: the CPU time the master's RPC loop spends decoding and
 *       releasing one BatchGetReplicaList request of --batch keys, with a
 *       malloc per string and list (mc_store_msg_decode) and in a decode
 *       arena (mc_store_msg_decode_in, as the loop does), alternately,
 *       medians of --runs runs: "decode batch=N malloc_us=.. arena_us=..".
 *
 * Exit status: 0 success, 1 a call failed, 2 bad flags.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "store/proto.h"

#define PROG "store_proto_bench"
#include "bench_util.h"

#define KEY_LEN	   48
#define FRAME_KEYS 1000

static struct {
	const char *master;
	int keys;
	int batch;
	int runs;
	double duration;
	uint64_t load;
	uint64_t recover;
	uint64_t value_size;
	bool json;
} opt = {
	.master = "127.0.0.1:50051",
	.keys = 1000,
	.batch = 1000,
	.runs = 5,
	.duration = 2.0,
	.value_size = 1024,
};

static int fd = -1;
static uint64_t next_id = 1;
static struct mc_buf out;
static uint8_t *in;
static size_t in_cap;
static struct mc_store_uuid client_id;
static struct mc_store_uuid seg_id = {0x5eed, 0xfa4e};
static double last_ping;
static char seg_name[64] = "proto-bench:1"; /* per process in --clients mode */

/* ------------------------------------------------------------------------ */
/* Connection                                                                */

static void connect_master(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
	int one = 1;

	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		die("bad --master '%s'", addr);
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		die("cannot resolve '%s'", addr);
	fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen))
		die("connect %s: %s", addr, strerror(errno));
	freeaddrinfo(ai);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void send_all(const void *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w <= 0)
			die("send: %s", strerror(errno));
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
}

static void recv_all(void *p, size_t n)
{
	while (n) {
		ssize_t r = recv(fd, p, n, 0);

		if (r <= 0)
			die("recv: %s", r ? strerror(errno) : "connection closed by the master");
		p = (uint8_t *)p + r;
		n -= (size_t)r;
	}
}

/* Send the request body of type, wait for its response, decode it into m
 * (release with mc_store_msg_release).  Returns the response status. */
static mc_status call(uint16_t type, const void *body, struct mc_store_msg *m)
{
	struct mc_proto_hdr h;
	size_t flen;
	uint64_t id = next_id++;
	mc_status st;

	mc_buf_reset(&out);
	st = mc_store_request_encode(&out, type, id, body);
	if (st != MC_OK)
		die("encode %s: %s", mc_store_msg_name(type), mc_status_name(st));
	send_all(out.data, out.len);
	if (in_cap < MC_PROTO_HDR_LEN) {
		in_cap = 1u << 20;
		in = malloc(in_cap);
		if (!in)
			die("out of memory");
	}
	recv_all(in, MC_PROTO_HDR_LEN);
	st = mc_proto_frame_peek(in, MC_PROTO_HDR_LEN, MC_PROTO_MAX_PAYLOAD, &h, &flen);
	if (st != MC_OK && st != MC_INPROGRESS)
		die("bad response header: %s", mc_status_name(st));
	if (flen > in_cap) {
		in_cap = flen;
		in = realloc(in, in_cap);
		if (!in)
			die("out of memory");
	}
	recv_all(in + MC_PROTO_HDR_LEN, flen - MC_PROTO_HDR_LEN);
	st = mc_store_msg_decode(in, flen, MC_PROTO_MAX_PAYLOAD, m);
	if (st != MC_OK)
		die("decode %s response: %s", mc_store_msg_name(type), mc_status_name(st));
	if (m->hdr.req_id != id)
		die("response id %" PRIu64 " for request %" PRIu64, m->hdr.req_id, id);
	return (mc_status)m->hdr.status;
}

static void call_ok(uint16_t type, const void *body, struct mc_store_msg *m)
{
	mc_status st = call(type, body, m);

	if (st != MC_OK)
		die("%s: %s (%d): %.*s", mc_store_msg_name(type), mc_status_name(st), st,
		    (int)m->error.len, m->error.ptr ? m->error.ptr : "");
}

static struct mc_store_segment fake_segment(void)
{
	struct mc_store_segment s = {
		.id = seg_id,
		.name = mc_proto_str_c(seg_name),
		.base = 1ull << 44,
		.size = 1ull << 40, /* the master's default max_segment_size */
		.te_endpoint = mc_proto_str_c(seg_name),
		.protocol = mc_proto_str_c("tcp"),
		.host_id = mc_proto_str_c(""),
	};

	return s;
}

static void ping(void)
{
	struct mc_store_client_req req = {client_id};
	struct mc_store_msg m;

	call_ok(MC_STORE_PING, &req, &m);
	if (m.body.ping_resp.client_status == MC_STORE_CLIENT_NEED_REMOUNT) {
		struct mc_store_segment s = fake_segment();
		struct mc_store_remount_req rr = {client_id, 1, &s};
		struct mc_store_msg m2;

		call_ok(MC_STORE_REMOUNT_SEGMENT, &rr, &m2);
		mc_store_msg_release(&m2);
	}
	mc_store_msg_release(&m);
	last_ping = now_s();
}

static void hello_and_mount(void)
{
	struct mc_store_hello hello = {mc_proto_str_c(PROG)};
	struct mc_store_mount_req mr;
	struct mc_store_msg m;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	client_id.first = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
	client_id.second = (uint64_t)ts.tv_sec;
	seg_id.second ^= client_id.first;
	call_ok(MC_STORE_SERVICE_READY, &hello, &m);
	mc_store_msg_release(&m);
	mr.client_id = client_id;
	mr.segment = fake_segment();
	call_ok(MC_STORE_MOUNT_SEGMENT, &mr, &m);
	mc_store_msg_release(&m);
	ping();
}

/* Unmount the fake segment: its objects go at once. */
static void unmount(void)
{
	struct mc_store_unmount_req ur = {client_id, seg_id};
	struct mc_store_msg m;

	call_ok(MC_STORE_UNMOUNT_SEGMENT, &ur, &m);
	mc_store_msg_release(&m);
}

/* Create keys [first, first + n) named prefix<i> with BatchPutStart+End. */
static void create_objects(const char *prefix, uint64_t first, size_t n)
{
	static char(*names)[KEY_LEN];
	static struct mc_store_put_item *items;
	static struct mc_store_object_meta *metas;
	struct mc_store_batch_put_start_req ps = {0};
	struct mc_store_batch_put_end_req pe = {0};
	struct mc_store_msg m;

	if (!names) {
		names = calloc(FRAME_KEYS, sizeof(*names));
		items = calloc(FRAME_KEYS, sizeof(*items));
		metas = calloc(FRAME_KEYS, sizeof(*metas));
		if (!names || !items || !metas)
			die("out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		int len = snprintf(names[i], KEY_LEN, "%s%" PRIu64, prefix, first + i);

		items[i] = (struct mc_store_put_item){
			.key = {names[i], (uint32_t)len},
			.value_len = opt.value_size,
		};
		metas[i] = (struct mc_store_object_meta){.key = {names[i], (uint32_t)len}};
	}
	ps.client_id = client_id;
	ps.config.replica_num = 1;
	ps.config.preferred_segment = mc_proto_str_c(seg_name);
	ps.n_items = (uint32_t)n;
	ps.items = items;
	call_ok(MC_STORE_BATCH_PUT_START, &ps, &m);
	for (size_t i = 0; i < n; i++)
		if (m.body.batch_put_start_resp.items[i].status != MC_OK)
			die("BatchPutStart %s: %s", names[i],
			    mc_status_name(m.body.batch_put_start_resp.items[i].status));
	mc_store_msg_release(&m);
	pe.client_id = client_id;
	pe.replica_type = MC_STORE_REPLICA_ALL;
	pe.n_items = (uint32_t)n;
	pe.items = metas;
	call_ok(MC_STORE_BATCH_PUT_END, &pe, &m);
	for (size_t i = 0; i < n; i++)
		if (m.body.batch_status_resp.statuses[i] != MC_OK)
			die("BatchPutEnd %s: %s", names[i],
			    mc_status_name(m.body.batch_status_resp.statuses[i]));
	mc_store_msg_release(&m);
}

/* ------------------------------------------------------------------------ */
/* Measurements                                                              */

static struct meta_result run_case(uint16_t type, size_t batch, struct mc_proto_str *keys,
				   size_t nkeys)
{
	size_t cap = 1 << 16, n = 0, at = 0;
	double *lat = malloc(cap * sizeof(*lat)), busy = 0, t_end = now_s() + opt.duration;
	struct meta_result r;

	if (!lat)
		die("out of memory");
	do {
		struct mc_store_key_req kr = {.key = keys[at]};
		struct mc_store_keys_req ks = {.n_keys = (uint32_t)batch, .keys = keys + at};
		bool single = type == MC_STORE_EXIST_KEY || type == MC_STORE_GET_REPLICA_LIST;
		struct mc_store_msg m;
		double t0 = now_s(), dt;

		call_ok(type, single ? (const void *)&kr : (const void *)&ks, &m);
		dt = now_s() - t0;
		if (type == MC_STORE_EXIST_KEY && !m.body.exist_resp.exists)
			die("ExistKey: key missing");
		if (type == MC_STORE_BATCH_GET_REPLICA_LIST &&
		    (m.body.batch_replica_list.n_items != batch ||
		     m.body.batch_replica_list.items[0].status != MC_OK))
			die("BatchGetReplicaList: wrong answer");
		mc_store_msg_release(&m);
		busy += dt;
		if (n == cap) {
			cap *= 2;
			lat = realloc(lat, cap * sizeof(*lat));
			if (!lat)
				die("out of memory");
		}
		lat[n++] = dt * 1e6;
		at = single ? (at + 1) % nkeys : (at + batch) % (nkeys - batch + 1);
	} while (now_s() < t_end);
	qsort(lat, n, sizeof(*lat), cmp_double);
	r.ops = (double)n / busy;
	r.keys = r.ops * (double)batch;
	r.p50 = lat[(size_t)ceil(0.50 * (double)n) - 1];
	r.p99 = lat[(size_t)ceil(0.99 * (double)n) - 1];
	free(lat);
	return r;
}

static void meta_main(void)
{
	size_t n = (size_t)opt.keys;
	struct mc_proto_str *keys = calloc(n, sizeof(*keys));
	char(*names)[KEY_LEN] = calloc(n, sizeof(*names));
	char prefix[32];
	struct meta_result rs[MAX_RUNS];
	static const struct {
		const char *name;
		uint16_t type;
		bool batched;
	} cases[] = {
		{"exist", MC_STORE_EXIST_KEY, false},
		{"batch_exist", MC_STORE_BATCH_EXIST_KEY, true},
		{"replica_list", MC_STORE_GET_REPLICA_LIST, false},
		{"batch_replica_list", MC_STORE_BATCH_GET_REPLICA_LIST, true},
	};

	if (!keys || !names)
		die("out of memory");
	if ((size_t)opt.batch > n)
		opt.batch = (int)n;
	snprintf(prefix, sizeof(prefix), "pb-%d-", (int)getpid());
	for (size_t i = 0; i < n; i += FRAME_KEYS)
		create_objects(prefix, i, n - i < FRAME_KEYS ? n - i : FRAME_KEYS);
	for (size_t i = 0; i < n; i++) {
		int len = snprintf(names[i], KEY_LEN, "%s%zu", prefix, i);

		keys[i] = (struct mc_proto_str){names[i], (uint32_t)len};
	}
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t batch = cases[c].batched ? (size_t)opt.batch : 1;

		for (int r = 0; r < opt.runs; r++) {
			rs[r] = run_case(cases[c].type, batch, keys, n);
			ping();
		}
		report_meta(cases[c].name, batch, rs, opt.runs, opt.json);
	}
	free(keys);
	free(names);
}

/* Mount (the replayed objects are bound to it) and check they are served. */
static void recover_main(void)
{
	double t0 = now_s();
	uint64_t step = opt.recover > 1000 ? opt.recover / 1000 : 1;

	hello_and_mount();
	for (uint64_t i = 0; i < opt.recover; i += step) {
		uint64_t k = i + step >= opt.recover ? opt.recover - 1 : i;
		char name[KEY_LEN];
		int len = snprintf(name, KEY_LEN, "load-%" PRIu64, k);
		struct mc_store_key_req kr = {.key = {name, (uint32_t)len}};
		struct mc_store_msg m;

		call_ok(MC_STORE_EXIST_KEY, &kr, &m);
		if (!m.body.exist_resp.exists)
			die("%s is not served after the remount", name);
		mc_store_msg_release(&m);
		if (k == opt.recover - 1)
			break;
	}
	printf("RECOVERED objects=%" PRIu64 " s=%.3f\n", opt.recover, now_s() - t0);
	fflush(stdout);
}

static void load_main(void)
{
	double t0 = now_s(), t;
	uint64_t done = 0, next_report = 1000000;

	while (done < opt.load) {
		size_t n = opt.load - done < FRAME_KEYS ? (size_t)(opt.load - done) : FRAME_KEYS;

		create_objects("load-", done, n);
		done += n;
		if (now_s() - last_ping > 1.0)
			ping();
		if (done >= next_report) {
			printf("loaded %" PRIu64 "\n", done);
			fflush(stdout);
			next_report += 1000000;
		}
	}
	t = now_s() - t0;
	printf("DONE objects=%" PRIu64 " s=%.2f keys/s=%.0f\n", done, t, (double)done / t);
	fflush(stdout);
	/* Keep the fake client (and so its objects) alive until stdin closes;
	 * the lines "removeall" and "unmount" on stdin do that and answer
	 * "REMOVED count=<n> s=<t>" and "UNMOUNTED s=<t>" (master_rss.py
	 * --pauses times the loop around them with --probe). */
	for (;;) {
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		char buf[256];
		ssize_t n;

		if (poll(&p, 1, 1000) > 0) {
			n = read(STDIN_FILENO, buf, sizeof(buf) - 1);
			if (n <= 0)
				break;
			buf[n] = '\0';
			if (strstr(buf, "removeall")) {
				struct mc_store_remove_all_req rr = {.tenant = mc_proto_str_c(""),
								     .force = true};
				struct mc_store_msg m;

				t0 = now_s();
				call_ok(MC_STORE_REMOVE_ALL, &rr, &m);
				printf("REMOVED count=%" PRId64 " s=%.3f\n",
				       m.body.count_resp.count, now_s() - t0);
				mc_store_msg_release(&m);
			} else if (strstr(buf, "idle")) { /* the baseline: nothing */
				printf("IDLE s=0\n");
			} else if (strstr(buf, "unmount")) {
				t0 = now_s();
				unmount();
				printf("UNMOUNTED s=%.3f\n", now_s() - t0);
			}
			fflush(stdout);
		}
		ping();
	}
}

/*
 * --probe: ExistKey("load-0") on its own connection, one call after the
 * other, until stdin closes: the longest round trip is the longest the
 * master's RPC loop kept a ready client waiting.  Prints "READY" after
 * the first call and "PROBE calls=<n> max_us=.. p99_us=.. p999_us=..
 * at_s=<when the longest began, seconds after READY>" at the end.
 */
static void probe_main(void)
{
	struct mc_proto_str key = mc_proto_str_c("load-0");
	size_t cap = 1 << 20, n = 0;
	double *lat = malloc(cap * sizeof(*lat)), worst = 0, worst_at = 0, start;

	if (!lat)
		die("out of memory");
	start = now_s();
	for (bool ready = false;;) {
		struct mc_store_key_req kr = {.key = key};
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		struct mc_store_msg m;
		double t0 = now_s(), dt;
		char buf[64];

		call_ok(MC_STORE_EXIST_KEY, &kr, &m);
		dt = now_s() - t0;
		mc_store_msg_release(&m);
		if (!ready) {
			printf("READY\n");
			fflush(stdout);
			ready = true;
			start = now_s();
			continue;
		}
		if (dt > worst) {
			worst = dt;
			worst_at = t0 - start;
		}
		if (n == cap) {
			double *v = realloc(lat, 2 * cap * sizeof(*lat));
			if (!v)
				die("out of memory");
			lat = v;
			cap *= 2;
		}
		lat[n++] = dt;
		if (poll(&p, 1, 0) > 0 && read(STDIN_FILENO, buf, sizeof(buf)) <= 0)
			break;
	}
	qsort(lat, n, sizeof(*lat), cmp_double);
	printf("PROBE calls=%zu max_us=%.0f p99_us=%.1f p999_us=%.1f at_s=%.3f\n", n, worst * 1e6,
	       n ? lat[(size_t)((double)(n - 1) * 0.99)] * 1e6 : 0.0,
	       n ? lat[(size_t)((double)(n - 1) * 0.999)] * 1e6 : 0.0, worst_at);
	fflush(stdout);
	free(lat);
}

/* ------------------------------------------------------------------------ */
/* The request codec alone (--decode)                                        */

/* CPU seconds of this process */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One run of the decode loop for opt.duration CPU seconds: us per call. */
static double decode_run(const struct mc_buf *frame, struct mc_store_decode_arena *a)
{
	double t0 = cpu_s(), t;
	uint64_t n = 0;

	do {
		for (int i = 0; i < 256; i++, n++) {
			struct mc_store_msg m;
			mc_status st = a ? mc_store_msg_decode_in(a, frame->data, frame->len,
								  MC_PROTO_MAX_PAYLOAD, &m)
					 : mc_store_msg_decode(frame->data, frame->len,
							       MC_PROTO_MAX_PAYLOAD, &m);
			if (st != MC_OK) {
				fprintf(stderr, PROG ": decode: %s\n", mc_last_error());
				exit(1);
			}
			if (a) {
				mc_store_msg_release_in(a, &m);
				a->used = a->spilled = 0;
			} else {
				mc_store_msg_release(&m);
			}
		}
		t = cpu_s() - t0;
	} while (t < opt.duration);
	return t / (double)n * 1e6;
}

static int decode_main(void)
{
	struct mc_proto_str *keys = calloc((size_t)opt.batch, sizeof(*keys));
	char *names = calloc((size_t)opt.batch, 32);
	size_t cap = (size_t)opt.batch * 64 + 4096;
	uint8_t *abuf = malloc(cap);
	struct mc_store_decode_arena a = {.base = abuf, .cap = cap};
	struct mc_store_keys_req q = {.n_keys = (uint32_t)opt.batch};
	double ma[MAX_RUNS], ar[MAX_RUNS];
	struct mc_buf frame;

	if (!keys || !names || !abuf) {
		fprintf(stderr, PROG ": no memory\n");
		return 1;
	}
	for (int i = 0; i < opt.batch; i++) {
		char *k = names + (size_t)i * 32;
		snprintf(k, 32, "kv_%016" PRIx64, (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15));
		keys[i] = mc_proto_str_c(k);
	}
	q.keys = keys;
	mc_buf_init(&frame);
	if (mc_store_request_encode(&frame, MC_STORE_BATCH_GET_REPLICA_LIST, 1, &q) != MC_OK) {
		fprintf(stderr, PROG ": encode: %s\n", mc_last_error());
		return 1;
	}
	for (int r = 0; r < opt.runs; r++) { /* alternating, the arena second */
		ma[r] = decode_run(&frame, NULL);
		ar[r] = decode_run(&frame, &a);
	}
	qsort(ma, (size_t)opt.runs, sizeof(double), cmp_double);
	qsort(ar, (size_t)opt.runs, sizeof(double), cmp_double);
	if (opt.json)
		printf("{\"case\": \"decode\", \"batch\": %d, \"frame_bytes\": %zu, "
		       "\"malloc_us\": %.3f, \"arena_us\": %.3f}\n",
		       opt.batch, frame.len, ma[opt.runs / 2], ar[opt.runs / 2]);
	else
		printf("decode batch=%d frame_bytes=%zu malloc_us=%.3f arena_us=%.3f\n", opt.batch,
		       frame.len, ma[opt.runs / 2], ar[opt.runs / 2]);
	mc_buf_release(&frame);
	free(keys);
	free(names);
	free(abuf);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Many clients at once (--clients=N)                                        */

struct client_result {
	double ops_per_s;
	double p50_us, p99_us;
	uint64_t ops;
};

/*
 * One client process's loop: ExistKey, GetReplicaList (on its own keys),
 * then PutStart + PutEnd of a fresh key and Remove of it, again and again
 * for --duration seconds after the start byte arrives on start_fd; every
 * call's round trip is one sample.
 */
static struct client_result client_loop(int start_fd)
{
	size_t n = 64, cap = 1 << 16, ns = 0;
	double *lat = malloc(cap * sizeof(*lat)), t_end, t0;
	char names[64][KEY_LEN], fresh[KEY_LEN];
	struct mc_proto_str keys[64];
	struct client_result r = {0};
	uint64_t i = 0;
	char go;

	if (!lat)
		die("out of memory");
	create_objects(seg_name, 0, n);
	for (size_t k = 0; k < n; k++) {
		int len = snprintf(names[k], KEY_LEN, "%s%zu", seg_name, k);
		keys[k] = (struct mc_proto_str){names[k], (uint32_t)len};
	}
	if (read(start_fd, &go, 1) != 1)
		die("no start signal");
	t0 = now_s();
	t_end = t0 + opt.duration;
	while (now_s() < t_end) {
		struct mc_store_msg m;
		double a;
		int step = (int)(i % 5);
		if (step == 0 || step == 1) {
			struct mc_store_key_req kr = {.key = keys[i % n]};
			a = now_s();
			call_ok(step == 0 ? MC_STORE_EXIST_KEY : MC_STORE_GET_REPLICA_LIST, &kr,
				&m);
		} else {
			int len = snprintf(fresh, KEY_LEN, "%sf%" PRIu64, seg_name, i / 5);
			struct mc_proto_str key = {fresh, (uint32_t)len};
			a = now_s();
			if (step == 2) {
				struct mc_store_put_start_req ps = {.client_id = client_id,
								    .key = key,
								    .value_len = opt.value_size};
				ps.config.replica_num = 1;
				ps.config.preferred_segment = mc_proto_str_c(seg_name);
				call_ok(MC_STORE_PUT_START, &ps, &m);
			} else if (step == 3) {
				struct mc_store_put_end_req pe = {.client_id = client_id,
								  .replica_type =
									  MC_STORE_REPLICA_ALL,
								  .key = key};
				call_ok(MC_STORE_PUT_END, &pe, &m);
			} else {
				struct mc_store_remove_req rr = {.key = key, .force = true};
				call_ok(MC_STORE_REMOVE, &rr, &m);
			}
		}
		mc_store_msg_release(&m);
		if (ns == cap) {
			cap *= 2;
			lat = realloc(lat, cap * sizeof(*lat));
			if (!lat)
				die("out of memory");
		}
		lat[ns++] = (now_s() - a) * 1e6;
		i++;
		if (now_s() - last_ping > 1.0)
			ping();
	}
	qsort(lat, ns, sizeof(*lat), cmp_double);
	r.ops = ns;
	r.ops_per_s = (double)ns / (now_s() - t0);
	r.p50_us = lat[(size_t)ceil(0.50 * (double)ns) - 1];
	r.p99_us = lat[(size_t)ceil(0.99 * (double)ns) - 1];
	free(lat);
	return r;
}

static int cmp_result(const void *a, const void *b)
{
	double x = ((const struct client_result *)a)->ops_per_s,
	       y = ((const struct client_result *)b)->ops_per_s;
	return (x > y) - (x < y);
}

/*
 * --clients=N: N processes, each with its own connection, fake segment and
 * keys, all released at once by one byte each on their start pipes (no
 * sleep), each sending back its result on its own pipe.
 */
static int clients_main(int nclients, long master_pid)
{
	struct client_result *rs = calloc((size_t)nclients, sizeof(*rs));
	int(*go)[2] = calloc((size_t)nclients, sizeof(*go));
	int(*back)[2] = calloc((size_t)nclients, sizeof(*back));
	pid_t *pids = calloc((size_t)nclients, sizeof(*pids));
	double cpu0, cpu1, t0, t1, total = 0, p99s[4096], p50s[4096];
	uint64_t ops = 0;

	if (!rs || !go || !back || !pids || nclients > 4096)
		die("out of memory");
	for (int c = 0; c < nclients; c++) {
		if (pipe(go[c]) || pipe(back[c]))
			die("pipe: %s", strerror(errno));
		pids[c] = fork();
		if (pids[c] < 0)
			die("fork: %s", strerror(errno));
		if (pids[c] == 0) {
			struct client_result r;
			snprintf(seg_name, sizeof(seg_name), "proto-bench-%d:1", (int)getpid());
			mc_buf_init(&out);
			connect_master(opt.master);
			hello_and_mount();
			/* ready: the parent waits for this byte before starting anyone */
			if (write(back[c][1], "R", 1) != 1)
				_exit(1);
			r = client_loop(go[c][0]);
			unmount();
			if (write(back[c][1], &r, sizeof(r)) != (ssize_t)sizeof(r))
				_exit(1);
			_exit(0);
		}
		close(go[c][0]);
		close(back[c][1]);
	}
	for (int c = 0; c < nclients; c++) {
		char r;
		if (read(back[c][0], &r, 1) != 1)
			die("client %d did not start", c);
	}
	cpu0 = master_pid ? proc_cpu_s(master_pid) : -1;
	t0 = now_s();
	for (int c = 0; c < nclients; c++)
		if (write(go[c][1], "G", 1) != 1)
			die("client %d: %s", c, strerror(errno));
	for (int c = 0; c < nclients; c++) {
		int st;
		if (read(back[c][0], &rs[c], sizeof(rs[c])) != (ssize_t)sizeof(rs[c]))
			die("client %d sent no result", c);
		waitpid(pids[c], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			die("client %d failed", c);
	}
	t1 = now_s();
	cpu1 = master_pid ? proc_cpu_s(master_pid) : -1;
	for (int c = 0; c < nclients; c++) {
		total += rs[c].ops_per_s;
		ops += rs[c].ops;
		p99s[c] = rs[c].p99_us;
		p50s[c] = rs[c].p50_us;
	}
	qsort(rs, (size_t)nclients, sizeof(*rs), cmp_result);
	qsort(p99s, (size_t)nclients, sizeof(double), cmp_double);
	qsort(p50s, (size_t)nclients, sizeof(double), cmp_double);
	{
		double med_rate = rs[nclients / 2].ops_per_s;
		double cpu_us = cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) * 1e6 / (double)ops : -1;
		if (opt.json)
			printf("{\"case\":\"clients\",\"clients\":%d,\"ops_per_s\":%.0f,"
			       "\"client_min\":%.0f,\"client_median\":%.0f,\"client_max\":%.0f,"
			       "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p99_max_us\":%.1f,"
			       "\"master_cpu_us_per_op\":%.2f,\"wall_s\":%.2f}\n",
			       nclients, total, rs[0].ops_per_s, med_rate,
			       rs[nclients - 1].ops_per_s, p50s[nclients / 2], p99s[nclients / 2],
			       p99s[nclients - 1], cpu_us, t1 - t0);
		else
			printf("case=clients clients=%d ops/s=%.0f per_client min=%.0f median=%.0f "
			       "max=%.0f p50_us=%.1f p99_us=%.1f p99_max_us=%.1f "
			       "master_cpu_us/op=%.2f\n",
			       nclients, total, rs[0].ops_per_s, med_rate,
			       rs[nclients - 1].ops_per_s, p50s[nclients / 2], p99s[nclients / 2],
			       p99s[nclients - 1], cpu_us);
	}
	free(rs);
	free(go);
	free(back);
	free(pids);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"master", required_argument, NULL, 'M'},
		{"keys", required_argument, NULL, 'k'},
		{"batch", required_argument, NULL, 'b'},
		{"runs", required_argument, NULL, 'r'},
		{"duration", required_argument, NULL, 'd'},
		{"load", required_argument, NULL, 'L'},
		{"recover", required_argument, NULL, 'R'},
		{"value-size", required_argument, NULL, 'v'},
		{"clients", required_argument, NULL, 'C'},
		{"master-pid", required_argument, NULL, 'P'},
		{"probe", no_argument, NULL, 'p'},
		{"decode", no_argument, NULL, 'D'},
		{"json", no_argument, NULL, 'j'},
		{"quick", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int o, clients = 0;
	long master_pid = 0;
	bool probe = false, decode = false;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'M':
			opt.master = optarg;
			break;
		case 'k':
			opt.keys = atoi(optarg);
			break;
		case 'b':
			opt.batch = atoi(optarg);
			break;
		case 'r':
			opt.runs = atoi(optarg);
			break;
		case 'd':
			opt.duration = atof(optarg);
			break;
		case 'L':
			opt.load = strtoull(optarg, NULL, 0);
			break;
		case 'R':
			opt.recover = strtoull(optarg, NULL, 0);
			break;
		case 'v':
			opt.value_size = strtoull(optarg, NULL, 0);
			break;
		case 'C':
			clients = atoi(optarg);
			if (clients < 1 || clients > 4096)
				goto bad;
			break;
		case 'P':
			master_pid = atol(optarg);
			break;
		case 'p':
			probe = true;
			break;
		case 'D':
			decode = true;
			break;
		case 'j':
			opt.json = true;
			break;
		case 'q':
			opt.runs = 1;
			opt.duration = 0.3;
			break;
		case 'h':
			printf("usage: " PROG " --master=H:P [--keys=N] [--batch=N] [--runs=N]\n"
			       "       [--duration=S] [--json] [--quick] | --load=N [--value-size=B]\n"
			       "       | --recover=N | --probe\n"
			       "       | --clients=N [--duration=S] [--master-pid=PID] [--json]\n"
			       "       | --decode [--batch=N] [--runs=N] [--duration=S] [--json]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (clients) {
		if (optind != argc || !(opt.duration > 0))
			goto bad;
		return clients_main(clients, master_pid);
	}
	if (optind != argc || opt.keys < 1 || opt.batch < 1 || opt.runs < 1 ||
	    opt.runs > MAX_RUNS || !(opt.duration > 0) || !opt.value_size) {
	bad:
		fprintf(stderr, PROG ": bad arguments (see --help)\n");
		return 2;
	}
	if (decode)
		return decode_main();
	mc_buf_init(&out);
	connect_master(opt.master);
	if (opt.recover || probe) {
		if (probe) {
			struct mc_store_hello hello = {mc_proto_str_c(PROG)};
			struct mc_store_msg m;

			call_ok(MC_STORE_SERVICE_READY, &hello, &m);
			mc_store_msg_release(&m);
			probe_main();
		} else {
			recover_main();
		}
		mc_buf_release(&out);
		free(in);
		close(fd);
		return 0;
	}
	hello_and_mount();
	if (opt.load)
		load_main();
	else
		meta_main();
	unmount();
	mc_buf_release(&out);
	free(in);
	close(fd);
	return 0;
}

/*
 * store_proto_bench - the master's metadata path measured on the wire, and
 * a loader for the master's memory per object (bench/master_rss.py).
 *
 * It speaks the store protocol (docs/protocol.md) directly through
 * store/proto.h over one blocking TCP connection, so it needs no segment
 * memory and no Transfer Engine: it mounts a fake segment (the master only
 * does bookkeeping on segments and never touches their memory) and creates
 * objects on it with BatchPutStart + BatchPutEnd, 1000 keys per frame.
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
 *   store_proto_bench --master=H:P --load=N [--value-size=1024]
 *       Creates N objects ("load-<i>"), printing "loaded <n>" now and then
 *       and "DONE objects=<n> s=<t> keys/s=<r>" at the end, then keeps the
 *       fake client alive (Ping every second) until stdin closes, so the
 *       objects stay while the caller measures the master.
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
		.name = mc_proto_str_c("proto-bench:1"),
		.base = 1ull << 44,
		.size = 1ull << 40, /* the master's default max_segment_size */
		.te_endpoint = mc_proto_str_c("proto-bench:1"),
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
	ps.config.preferred_segment = mc_proto_str_c("proto-bench:1");
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
	/* Keep the fake client (and so its objects) alive until stdin closes. */
	for (;;) {
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		char buf[256];

		if (poll(&p, 1, 1000) > 0 && read(STDIN_FILENO, buf, sizeof(buf)) <= 0)
			break;
		ping();
	}
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
		{"value-size", required_argument, NULL, 'v'},
		{"json", no_argument, NULL, 'j'},
		{"quick", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int o;

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
		case 'v':
			opt.value_size = strtoull(optarg, NULL, 0);
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
			       "       [--duration=S] [--json] [--quick] | --load=N [--value-size=B]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind != argc || opt.keys < 1 || opt.batch < 1 || opt.runs < 1 ||
	    opt.runs > MAX_RUNS || !(opt.duration > 0) || !opt.value_size) {
		fprintf(stderr, PROG ": bad arguments (see --help)\n");
		return 2;
	}
	mc_buf_init(&out);
	connect_master(opt.master);
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

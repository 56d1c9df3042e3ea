/*
 * master_regex_bench - single-key latency of the master while a regex call
 * scans every key (the master has one RPC thread; a regex call runs as a
 * job in slices between other requests, master/server.c).
 *
 *   master_regex_bench [--keys=1000000] [--scans=3] [--pattern='7777$']
 *                      [--budget=10s] [--baseline=1]
 *
 * Starts a master in this process (master/server.h, loopback, any free
 * port), creates --keys objects "key-<7 digits>" on a fake segment with
 * BatchPutStart + BatchPutEnd over the wire, then:
 *   - baseline: ExistKey calls one after another for --baseline seconds;
 *   - --scans times: one connection sends GetReplicaListByRegex(--pattern)
 *     and waits for it, while another makes ExistKey calls one after
 *     another until the scan's answer is in.
 * One line per case: "case=<name> keys=.. scan_ms=.. matched=.. probes=..
 * p50_us=.. p99_us=.. max_us=..", latencies of the single-key calls
 * (round trips over loopback, client included).  The default pattern
 * matches 100 keys, so the answer is small and the time is the scan's.
 *
 * Exit status: 0, 1 when a call fails, 2 on bad flags.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "master/server.h"
#include "mooncake/log.h"
#include "store/proto.h"

#define PROG "master_regex_bench"
#include "bench_util.h"

#define FRAME_KEYS 1000
#define KEY_LEN	   16

static struct {
	uint64_t keys;
	int scans;
	const char *pattern;
	const char *budget;
	double baseline;
} opt = {
	.keys = 1000000,
	.scans = 3,
	.pattern = "7777$",
	.budget = "10s",
	.baseline = 1.0,
};

struct conn {
	int fd;
	uint64_t next_id;
	struct mc_buf out;
	uint8_t *in;
	size_t in_cap;
};

static const struct mc_store_uuid client_id = {0xbe7c, 0x4e6e};
static const struct mc_store_uuid seg_id = {0x5eed, 0x4e6e};

/* ---- connections ------------------------------------------------------------ */

static void conn_open(struct conn *c, uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1;

	memset(c, 0, sizeof(*c));
	c->next_id = 1;
	mc_buf_init(&c->out);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof(a)))
		die("connect 127.0.0.1:%u: %s", port, strerror(errno));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void conn_close(struct conn *c)
{
	close(c->fd);
	mc_buf_release(&c->out);
	free(c->in);
}

static void io_all(struct conn *c, void *p, size_t n, bool out)
{
	while (n) {
		ssize_t r = out ? send(c->fd, p, n, MSG_NOSIGNAL) : recv(c->fd, p, n, 0);

		if (r <= 0)
			die("%s: %s", out ? "send" : "recv",
			    r ? strerror(errno) : "connection closed by the master");
		p = (uint8_t *)p + r;
		n -= (size_t)r;
	}
}

/* One request and its decoded answer (release m); dies unless it succeeded. */
static void call_ok(struct conn *c, uint16_t type, const void *body, struct mc_store_msg *m)
{
	struct mc_proto_hdr h;
	size_t flen;
	uint64_t id = c->next_id++;
	mc_status st;

	mc_buf_reset(&c->out);
	if (mc_store_request_encode(&c->out, type, id, body) != MC_OK)
		die("encode %s", mc_store_msg_name(type));
	io_all(c, c->out.data, c->out.len, true);
	if (c->in_cap < MC_PROTO_HDR_LEN) {
		c->in_cap = 1u << 16;
		c->in = malloc(c->in_cap);
		if (!c->in)
			die("out of memory");
	}
	io_all(c, c->in, MC_PROTO_HDR_LEN, false);
	st = mc_proto_frame_peek(c->in, MC_PROTO_HDR_LEN, MC_PROTO_MAX_PAYLOAD, &h, &flen);
	if (st != MC_OK && st != MC_INPROGRESS)
		die("bad response header: %s", mc_status_name(st));
	if (flen > c->in_cap) {
		c->in_cap = flen;
		c->in = realloc(c->in, flen);
		if (!c->in)
			die("out of memory");
	}
	io_all(c, c->in + MC_PROTO_HDR_LEN, flen - MC_PROTO_HDR_LEN, false);
	if (mc_store_msg_decode(c->in, flen, MC_PROTO_MAX_PAYLOAD, m) != MC_OK)
		die("decode %s response", mc_store_msg_name(type));
	if (m->hdr.req_id != id)
		die("response id %" PRIu64 " for request %" PRIu64, m->hdr.req_id, id);
	if (m->hdr.status != MC_OK)
		die("%s: %s: %.*s", mc_store_msg_name(type), mc_status_name(m->hdr.status),
		    (int)m->error.len, m->error.ptr ? m->error.ptr : "");
}

/* ---- loading ------------------------------------------------------------------ */

static void load(struct conn *c)
{
	static char names[FRAME_KEYS][KEY_LEN];
	static struct mc_store_put_item items[FRAME_KEYS];
	static struct mc_store_object_meta metas[FRAME_KEYS];
	struct mc_store_mount_req mr = {
		client_id,
		{.id = seg_id,
		 .name = mc_proto_str_c("regex-bench:1"),
		 .base = 1ull << 44,
		 .size = 1ull << 40,
		 .te_endpoint = mc_proto_str_c("regex-bench:1"),
		 .protocol = mc_proto_str_c("tcp"),
		 .host_id = mc_proto_str_c("")},
	};
	struct mc_store_msg m;

	call_ok(c, MC_STORE_MOUNT_SEGMENT, &mr, &m);
	mc_store_msg_release(&m);
	for (uint64_t first = 0; first < opt.keys; first += FRAME_KEYS) {
		uint32_t n =
			(uint32_t)(opt.keys - first < FRAME_KEYS ? opt.keys - first : FRAME_KEYS);
		struct mc_store_batch_put_start_req ps = {.client_id = client_id,
							  .config = {.replica_num = 1},
							  .n_items = n,
							  .items = items};
		struct mc_store_batch_put_end_req pe = {.client_id = client_id,
							.replica_type = MC_STORE_REPLICA_ALL,
							.n_items = n,
							.items = metas};

		for (uint32_t i = 0; i < n; i++) {
			int len = snprintf(names[i], KEY_LEN, "key-%07" PRIu64, first + i);

			items[i] = (struct mc_store_put_item){.key = {names[i], (uint32_t)len},
							      .value_len = 64};
			metas[i] = (struct mc_store_object_meta){.key = {names[i], (uint32_t)len}};
		}
		call_ok(c, MC_STORE_BATCH_PUT_START, &ps, &m);
		mc_store_msg_release(&m);
		call_ok(c, MC_STORE_BATCH_PUT_END, &pe, &m);
		mc_store_msg_release(&m);
	}
}

/* ---- measuring ---------------------------------------------------------------- */

struct scan {
	uint16_t port;
	atomic_bool done;
	double ms;
	uint32_t matched;
};

static void *scan_main(void *arg)
{
	struct scan *sc = arg;
	struct mc_store_regex_req rq = {mc_proto_str_c(""), mc_proto_str_c(opt.pattern)};
	struct mc_store_msg m;
	struct conn c;
	double t0;

	conn_open(&c, sc->port);
	t0 = now_s();
	call_ok(&c, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq, &m);
	sc->ms = (now_s() - t0) * 1e3;
	sc->matched = m.body.regex_replica_list.n_items;
	mc_store_msg_release(&m);
	atomic_store(&sc->done, true);
	conn_close(&c);
	return NULL;
}

struct lat {
	double *v;
	size_t n, cap;
};

/* ExistKey calls until *stop (or for secs when stop is NULL). */
static void probe(struct conn *c, struct lat *l, atomic_bool *stop, double secs)
{
	struct mc_store_key_req r = {mc_proto_str_c(""), mc_proto_str_c("key-0000000")};
	double end = now_s() + secs;

	l->n = 0;
	while (stop ? !atomic_load(stop) : now_s() < end) {
		struct mc_store_msg m;
		double t0 = now_s();

		call_ok(c, MC_STORE_EXIST_KEY, &r, &m);
		if (!m.body.exist_resp.exists)
			die("key-0000000 does not exist");
		mc_store_msg_release(&m);
		if (l->n == l->cap) {
			l->cap = l->cap ? l->cap * 2 : 1 << 16;
			l->v = realloc(l->v, l->cap * sizeof(*l->v));
			if (!l->v)
				die("out of memory");
		}
		l->v[l->n++] = (now_s() - t0) * 1e6;
	}
}

static void report(const char *name, struct lat *l, const struct scan *sc)
{
	double p50 = 0, p99 = 0, max = 0;

	if (l->n) {
		qsort(l->v, l->n, sizeof(*l->v), cmp_double);
		p50 = l->v[l->n / 2];
		p99 = l->v[(l->n * 99) / 100];
		max = l->v[l->n - 1];
	}
	printf("case=%s keys=%" PRIu64 " scan_ms=%.1f matched=%u probes=%zu p50_us=%.1f "
	       "p99_us=%.1f max_us=%.1f\n",
	       name, opt.keys, sc ? sc->ms : 0.0, sc ? sc->matched : 0u, l->n, p50, p99, max);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"keys", required_argument, NULL, 'k'},
		{"scans", required_argument, NULL, 's'},
		{"pattern", required_argument, NULL, 'p'},
		{"budget", required_argument, NULL, 'b'},
		{"baseline", required_argument, NULL, 'B'},
		{NULL, 0, NULL, 0},
	};
	static const char *const set[][2] = {
		{"rpc_port", "0"},
		{"rpc_address", "127.0.0.1"},
		{"metrics_port", "0"},
		{"metrics_host", "127.0.0.1"},
		{"enable_metric_reporting", "false"},
		{"mount_probe", "false"}, /* the keys live on a fake segment, no engine */
	};
	struct mc_master_server_config cfg;
	struct mc_master_server *srv;
	struct conn c;
	struct lat l = {0};
	char err[256];
	int o;

	while ((o = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (o) {
		case 'k':
			opt.keys = strtoull(optarg, NULL, 10);
			break;
		case 's':
			opt.scans = atoi(optarg);
			break;
		case 'p':
			opt.pattern = optarg;
			break;
		case 'b':
			opt.budget = optarg;
			break;
		case 'B':
			opt.baseline = atof(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [--keys=N] [--scans=N] [--pattern=RE] "
				"[--budget=DURATION] [--baseline=SECONDS]\n",
				PROG);
			return 2;
		}
	}
	if (opt.keys == 0 || opt.scans < 0)
		die("--keys must be positive and --scans not negative");
	mc_log_set_level(MC_LOG_WARN);
	mc_master_server_config_defaults(&cfg);
	for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
		if (mc_master_server_config_set(&cfg, set[i][0], set[i][1], err, sizeof(err)))
			die("%s", err);
	if (mc_master_server_config_set(&cfg, "regex_time_budget", opt.budget, err, sizeof(err)))
		die("%s", err);
	if (mc_master_server_start(&cfg, &srv) != MC_OK)
		die("master: %s", mc_last_error());
	conn_open(&c, mc_master_server_rpc_port(srv));
	{
		double t0 = now_s();

		load(&c);
		fprintf(stderr, "%s: %" PRIu64 " keys loaded in %.1f s\n", PROG, opt.keys,
			now_s() - t0);
	}
	probe(&c, &l, NULL, opt.baseline);
	report("baseline", &l, NULL);
	for (int i = 0; i < opt.scans; i++) {
		struct scan sc = {.port = mc_master_server_rpc_port(srv)};
		pthread_t t;

		atomic_init(&sc.done, false);
		if (pthread_create(&t, NULL, scan_main, &sc))
			die("pthread_create failed");
		probe(&c, &l, &sc.done, 0);
		pthread_join(t, NULL);
		report("during_scan", &l, &sc);
	}
	conn_close(&c);
	free(l.v);
	mc_master_server_stop(srv);
	mc_master_server_config_release(&cfg);
	return 0;
}

/*
 * conductor_bench - mooncake_conductor's /schedule as a client sees it,
 * beside the master's BatchGetReplicaList for the same keys (issue 17,
 * "Performance"; docs/benchmarks.md, "Conductor scheduling latency").
 *
 * It is pointed at a running master (started with --mount_probe=false) and
 * a running conductor; bench/conductor_bench.py starts both on loopback and
 * runs this.  What it does:
 *
 *   1. Mounts --instances fake segments from one store client (one master
 *      connection, as store_proto_bench does: the master only keeps books
 *      on segments, so no segment memory and no Transfer Engine are needed;
 *      the conductor never reads block data either) and puts --blocks
 *      objects of --value-size bytes on them with BatchPutStart + End, each
 *      block's replicas on the segments chosen below.
 *   2. Registers --instances prefill instances (one per segment) and
 *      --decode decode instances with the conductor.
 *   3. Builds a pool of --requests (4096) /schedule bodies ({"keys": [integer
 *      block keys], "input_length": N}), each a chain of block keys whose
 *      leading part is resident, so that prefixes hit:
 *        synthetic (default): the blocks are chains of --keys=MIN-MAX
 *          blocks, chain c on segment c % instances, every fourth chain's
 *          first half also on a second segment; a request is one chain,
 *          resident up to a cut drawn in [len/2, len] and fresh
 *          (never-stored) keys after it;
 *        --trace FILE: the requests are the trace's lines in order
 *          (--requests of them, default all; hash_ids renumbered densely;
 *          lengths outside --keys, when given, skipped).  Each line is
 *          placed where a cache-aware scheduler would have run it: on the
 *          segment that first stored its prefix when it shares more than a
 *          root block with an earlier line, else on line % instances.  A
 *          block used by two or more lines is resident on the segment of
 *          every line using it (computed or fetched there and kept: the
 *          hot-block replication of paper 4.4, without eviction); blocks
 *          used once are never stored (the request computes them);
 *          the rest of --blocks is filled with chains no request names.
 *   4. Measures, --runs times alternately for --duration seconds each:
 *        master: BatchGetReplicaList of each request's keys (the store
 *          keys the conductor derives: key_prefix + 16 hex digits) over one
 *          master connection (store/master_conn.c, the conductor's own
 *          client code) -- the store-lookup share of a /schedule;
 *        conductor: POST /schedule of the same bodies over one keep-alive
 *          HTTP/1.1 connection (raw socket; the client's own cost is the
 *          send, the read and a search for "prefix_blocks");
 *        health: GET /health over one such connection, the HTTP round trip
 *          with no work behind it (the floor under a /schedule).
 *      and then, with --concurrency K > 1, both again with K threads (K
 *      HTTP connections; K callers on the one master connection, as the
 *      conductor's HTTP threads share theirs).
 *   Meanwhile a reporter thread posts every instance's load every
 *   --report-ms (prefill queue_s drawn in [0, 2] s, decode ctx_tokens in
 *   [0, 256k]), as live instances would, and pings the master each second
 *   for the fake client's liveness.  Percentiles are over all samples of
 *   a case (all runs pooled); calls/s is the median of the runs'.  With
 *   --master-pid / --conductor-pid each case also gets the processes' CPU
 *   time per call.  At the end the fake segments are unmounted (their
 *   objects go) unless --keep.
 *
 * Output: a table, or with --json one JSON object {"config": {...},
 * "cases": [...]}.  Exit status: 0, 1 a call failed, 2 bad flags.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conductor/trace.h"
#include "store/master_conn.h"
#include "store/proto.h"

#define PROG "conductor_bench"
#include "bench_util.h"

#define FRAME_KEYS 1000
#define MAX_SEGS   64 /* a block's replicas are a 64-bit mask */
#define KEY_W	   40 /* a store key: prefix (<= 23) + 16 hex + NUL */

static struct {
	const char *master, *conductor, *conductor_b, *trace, *key_prefix;
	uint64_t blocks, value_size;
	int instances, decode, requests, runs, concurrency, report_ms;
	uint32_t kmin, kmax;
	bool keys_given, json, keep;
	double duration;
	long master_pid, conductor_pid, conductor_b_pid;
	uint64_t seed;
} opt = {
	.master = "127.0.0.1:50051",
	.conductor = "127.0.0.1:8090",
	.key_prefix = "kv_",
	.blocks = 1000000,
	.value_size = 64,
	.instances = 16,
	.decode = 4,
	.requests = 0, /* 4096 synthetic, every line of a trace */
	.runs = 3,
	.concurrency = 1,
	.report_ms = 100,
	.kmin = 16,
	.kmax = 128,
	.duration = 5,
	.seed = 1,
};

/* ---- small helpers ------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void) /* splitmix64 */
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rnd_in(uint64_t lo, uint64_t hi) /* [lo, hi] */
{
	return lo + rnd() % (hi - lo + 1);
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);
	if (!p)
		die("out of memory");
	return p;
}

static void split_hostport(const char *addr, char *host, size_t cap, const char **port)
{
	const char *colon = strrchr(addr, ':');

	if (!colon || (size_t)(colon - addr) >= cap)
		die("bad address '%s' (want HOST:PORT)", addr);
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	*port = colon + 1;
}

/* ---- HTTP/1.1 keep-alive client ------------------------------------------ */

struct hconn {
	int fd;
	char *buf;
	size_t cap, len;
};

static void hconn_open(struct hconn *h, const char *addr)
{
	char host[256];
	const char *port;
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
	int one = 1;

	split_hostport(addr, host, sizeof(host), &port);
	if (getaddrinfo(host, port, &hints, &ai))
		die("cannot resolve '%s'", addr);
	h->fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (h->fd < 0 || connect(h->fd, ai->ai_addr, ai->ai_addrlen))
		die("connect %s: %s", addr, strerror(errno));
	freeaddrinfo(ai);
	setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	h->cap = 1 << 16;
	h->buf = xcalloc(1, h->cap);
	h->len = 0;
}

static void hconn_close(struct hconn *h)
{
	close(h->fd);
	free(h->buf);
}

/* Send req (a whole HTTP request), read one response; its status code,
 * its body in *body / *body_len (valid until the next call). */
static int hconn_call(struct hconn *h, const char *req, size_t req_len, const char **body,
		      size_t *body_len)
{
	size_t hdr_len = 0, total = 0;
	int code = 0;

	while (req_len) {
		ssize_t w = send(h->fd, req, req_len, MSG_NOSIGNAL);
		if (w <= 0)
			die("send to the conductor: %s", strerror(errno));
		req += w;
		req_len -= (size_t)w;
	}
	h->len = 0;
	for (;;) {
		ssize_t r;

		if (!hdr_len && h->len >= 4) {
			char *end = memmem(h->buf, h->len, "\r\n\r\n", 4), *cl;
			if (end) {
				hdr_len = (size_t)(end - h->buf) + 4;
				*end = '\0';
				if (sscanf(h->buf, "HTTP/1.%*d %d", &code) != 1)
					die("bad response status line");
				cl = strcasestr(h->buf, "\r\nContent-Length:");
				if (!cl)
					die("response without Content-Length");
				total = hdr_len + strtoull(cl + 17, NULL, 10);
				if (strcasestr(h->buf, "\r\nConnection: close"))
					die("the conductor closes the connection (no keep-alive)");
			}
		}
		if (hdr_len && h->len >= total)
			break;
		if (h->len == h->cap || (total && total > h->cap)) {
			h->cap = total > h->cap * 2 ? total : h->cap * 2;
			h->buf = realloc(h->buf, h->cap);
			if (!h->buf)
				die("out of memory");
		}
		r = recv(h->fd, h->buf + h->len, h->cap - h->len, 0);
		if (r <= 0)
			die("recv from the conductor: %s",
			    r ? strerror(errno) : "connection closed");
		h->len += (size_t)r;
	}
	*body = h->buf + hdr_len;
	*body_len = total - hdr_len;
	return code;
}

/* A whole request of method and path with a JSON body, into a fresh string. */
static char *http_request(const char *method, const char *path, const char *body, size_t *len)
{
	char *s;
	int n = asprintf(&s,
			 "%s %s HTTP/1.1\r\nHost: conductor\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\n\r\n%s",
			 method, path, strlen(body), body);
	if (n < 0)
		die("out of memory");
	*len = (size_t)n;
	return s;
}

/* One call that must answer 2xx. */
static void http_ok(struct hconn *h, const char *method, const char *path, const char *body)
{
	size_t len, blen;
	const char *b;
	char *req = http_request(method, path, body, &len);
	int code = hconn_call(h, req, len, &b, &blen);

	if (code < 200 || code > 299)
		die("%s %s: HTTP %d: %.*s", method, path, code, (int)blen, b);
	free(req);
}

/* ---- the store side: fake segments and blocks ----------------------------- */

static struct mc_master_conn *loader; /* the fake client's connection */
static struct mc_store_uuid client_id;
static char seg_names[MAX_SEGS][64];
static struct mc_store_uuid seg_ids[MAX_SEGS];
static uint64_t key_base; /* integer keys are key_base + i, unique per run */

static void call_ok(struct mc_master_conn *c, uint16_t type, const void *body,
		    struct mc_store_msg *m)
{
	mc_status st = mc_master_conn_call(c, type, body, m);
	if (st != MC_OK)
		die_status(mc_store_msg_name(type), st);
}

static struct mc_store_segment fake_segment(int i)
{
	return (struct mc_store_segment){
		.id = seg_ids[i],
		.name = mc_proto_str_c(seg_names[i]),
		.base = (uint64_t)(i + 1) << 44,
		.size = 1ull << 40,
		.te_endpoint = mc_proto_str_c(seg_names[i]),
		.protocol = mc_proto_str_c("tcp"),
		.host_id = mc_proto_str_c(""),
	};
}

static void mount_segments(void)
{
	struct timespec ts;
	struct mc_store_msg m;

	clock_gettime(CLOCK_REALTIME, &ts);
	client_id.first = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
	client_id.second = (uint64_t)ts.tv_sec ^ 0xc0d0c7042ull;
	for (int i = 0; i < opt.instances; i++) {
		struct mc_store_mount_req mr;

		snprintf(seg_names[i], sizeof(seg_names[i]), "cbench-%d-seg%02d:1", (int)getpid(),
			 i);
		seg_ids[i] = (struct mc_store_uuid){client_id.first ^ (uint64_t)(i + 1),
						    0x5e6u + (uint64_t)i};
		mr.client_id = client_id;
		mr.segment = fake_segment(i);
		call_ok(loader, MC_STORE_MOUNT_SEGMENT, &mr, &m);
		mc_store_msg_release(&m);
	}
}

static void unmount_segments(void)
{
	for (int i = 0; i < opt.instances; i++) {
		struct mc_store_unmount_req ur = {client_id, seg_ids[i]};
		struct mc_store_msg m;

		call_ok(loader, MC_STORE_UNMOUNT_SEGMENT, &ur, &m);
		mc_store_msg_release(&m);
	}
}

static void ping_master(void)
{
	struct mc_store_client_req req = {client_id};
	struct mc_store_msg m;

	call_ok(loader, MC_STORE_PING, &req, &m);
	if (m.body.ping_resp.client_status == MC_STORE_CLIENT_NEED_REMOUNT)
		die("the master forgot the fake client (client_ttl too short?)");
	mc_store_msg_release(&m);
}

static int key_name(char *s, uint64_t id)
{
	return snprintf(s, KEY_W, "%s%016" PRIx64, opt.key_prefix, key_base + id);
}

/* A block to store: its id and the segments of its replicas (bit i: segment i). */
struct block {
	uint64_t id;
	uint64_t segs;
};

static int cmp_block(const void *a, const void *b)
{
	const struct block *x = a, *y = b;
	if (x->segs != y->segs)
		return (x->segs > y->segs) - (x->segs < y->segs);
	return (x->id > y->id) - (x->id < y->id);
}

/* Put blocks[i, i + n), all with the placement of blocks[i]. */
static void put_frame(const struct block *b, size_t n)
{
	static char(*names)[KEY_W];
	static struct mc_store_put_item *items;
	static struct mc_store_object_meta *metas;
	struct mc_store_batch_put_start_req ps = {0};
	struct mc_store_batch_put_end_req pe = {0};
	struct mc_proto_str pref[MAX_SEGS];
	struct mc_store_msg m;

	if (!names) {
		names = xcalloc(FRAME_KEYS, sizeof(*names));
		items = xcalloc(FRAME_KEYS, sizeof(*items));
		metas = xcalloc(FRAME_KEYS, sizeof(*metas));
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t len = (uint32_t)key_name(names[i], b[i].id);

		items[i] = (struct mc_store_put_item){.key = {names[i], len},
						      .value_len = opt.value_size};
		metas[i] = (struct mc_store_object_meta){.key = {names[i], len}};
	}
	for (int i = 0; i < opt.instances; i++)
		if (b[0].segs >> i & 1)
			pref[ps.config.n_preferred_segments++] = mc_proto_str_c(seg_names[i]);
	ps.client_id = client_id;
	ps.config.replica_num = ps.config.n_preferred_segments;
	ps.config.preferred_segments = pref;
	ps.n_items = (uint32_t)n;
	ps.items = items;
	call_ok(loader, MC_STORE_BATCH_PUT_START, &ps, &m);
	for (size_t i = 0; i < n; i++) {
		const struct mc_store_put_start_item *it = &m.body.batch_put_start_resp.items[i];
		if (it->status != MC_OK)
			die("BatchPutStart %s: %s", names[i], mc_status_name(it->status));
		if (it->n_replicas != ps.config.replica_num)
			die("BatchPutStart %s: %u replicas, not %u", names[i], it->n_replicas,
			    ps.config.replica_num);
	}
	mc_store_msg_release(&m);
	pe.client_id = client_id;
	pe.replica_type = MC_STORE_REPLICA_ALL;
	pe.n_items = (uint32_t)n;
	pe.items = metas;
	call_ok(loader, MC_STORE_BATCH_PUT_END, &pe, &m);
	for (size_t i = 0; i < n; i++)
		if (m.body.batch_status_resp.statuses[i] != MC_OK)
			die("BatchPutEnd %s: %s", names[i],
			    mc_status_name(m.body.batch_status_resp.statuses[i]));
	mc_store_msg_release(&m);
}

/* Store every block (sorted by placement here), FRAME_KEYS a frame. */
static double put_blocks(struct block *b, size_t n)
{
	double t0 = now_s(), last_ping = t0;
	size_t i = 0;

	qsort(b, n, sizeof(*b), cmp_block);
	while (i < n) {
		size_t j = i + 1;
		while (j < n && j - i < FRAME_KEYS && b[j].segs == b[i].segs)
			j++;
		put_frame(b + i, j - i);
		i = j;
		if (now_s() - last_ping > 1.0) {
			ping_master();
			last_ping = now_s();
		}
	}
	return now_s() - t0;
}

/* ---- the requests -------------------------------------------------------- */

struct req {
	uint32_t n_keys, resident; /* resident: the leading keys that are stored */
	uint64_t *ids;
	char *http; /* the whole POST /schedule */
	size_t http_len;
	struct mc_proto_str *keys; /* the store keys, for the master's reference */
};

static struct req *reqs;
static size_t n_reqs;
static uint64_t fresh_next; /* ids of never-stored keys */

static void req_finish(struct req *r, uint32_t input_length)
{
	size_t cap = 64 + (size_t)r->n_keys * 22, w;
	char *body = xcalloc(1, cap), *text = xcalloc(r->n_keys, KEY_W);

	w = (size_t)snprintf(body, cap, "{\"keys\":[");
	for (uint32_t i = 0; i < r->n_keys; i++)
		w += (size_t)snprintf(body + w, cap - w, "%s%" PRIu64, i ? "," : "",
				      key_base + r->ids[i]);
	snprintf(body + w, cap - w, "],\"input_length\":%u}", input_length);
	r->http = http_request("POST", "/schedule", body, &r->http_len);
	free(body);
	r->keys = xcalloc(r->n_keys, sizeof(*r->keys));
	for (uint32_t i = 0; i < r->n_keys; i++) {
		char *s = text + (size_t)i * KEY_W;
		r->keys[i] = (struct mc_proto_str){s, (uint32_t)key_name(s, r->ids[i])};
	}
}

/* Filler chains of 64 blocks, ids [first, first + n), round robin. */
static void fill_chains(struct block *b, uint64_t first, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (struct block){first + i,
				      1ull << ((first + i) / 64 % (uint64_t)opt.instances)};
}

static size_t build_synthetic(struct block **out)
{
	struct block *b = xcalloc(opt.blocks, sizeof(*b));
	uint64_t *chain_start = NULL, *chain_len = NULL;
	size_t n_chains = 0, cap = 0;
	uint64_t id = 0;

	while (id < opt.blocks) {
		uint64_t len = rnd_in(opt.kmin, opt.kmax), half;
		int s0 = (int)(n_chains % (size_t)opt.instances), s1 = -1;

		if (id + len > opt.blocks)
			len = opt.blocks - id;
		if (n_chains % 4 == 0 && opt.instances > 1)
			s1 = (s0 + 1 + (int)rnd_in(0, (uint64_t)opt.instances - 2)) % opt.instances;
		half = len / 2;
		for (uint64_t i = 0; i < len; i++)
			b[id + i] = (struct block){
				id + i, 1ull << s0 | (i < half && s1 >= 0 ? 1ull << s1 : 0)};
		if (n_chains == cap) {
			cap = cap ? cap * 2 : 1024;
			chain_start = realloc(chain_start, cap * sizeof(*chain_start));
			chain_len = realloc(chain_len, cap * sizeof(*chain_len));
			if (!chain_start || !chain_len)
				die("out of memory");
		}
		chain_start[n_chains] = id;
		chain_len[n_chains++] = len;
		id += len;
	}
	fresh_next = opt.blocks;
	n_reqs = opt.requests ? (size_t)opt.requests : 4096;
	reqs = xcalloc(n_reqs, sizeof(*reqs));
	for (size_t q = 0; q < n_reqs; q++) {
		struct req *r = &reqs[q];
		size_t c;
		uint64_t len, cut;

		do /* the last chain may be short */
			c = (size_t)rnd_in(0, n_chains - 1);
		while (chain_len[c] < opt.kmin && n_chains > 1);
		len = chain_len[c];
		cut = rnd_in(len / 2, len);
		r->n_keys = (uint32_t)len;
		r->resident = (uint32_t)cut;
		r->ids = xcalloc(len, sizeof(*r->ids));
		for (uint64_t i = 0; i < len; i++)
			r->ids[i] = i < cut ? chain_start[c] + i : fresh_next++;
		req_finish(r, (uint32_t)(len * 512 - 100));
	}
	free(chain_start);
	free(chain_len);
	*out = b;
	return (size_t)opt.blocks;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static size_t build_trace(struct block **out)
{
	struct mc_trace t;
	uint64_t *uniq, n_all = 0, d = 0;
	uint32_t *uses, depth = 0;
	int16_t *seg0, home;
	uint64_t *segs;
	struct block *b;
	size_t nb = 0;
	mc_status st;

	mc_trace_init(&t);
	st = mc_trace_load_file(&t, opt.trace, 0);
	if (st != MC_OK)
		die_status(opt.trace, st);
	for (size_t i = 0; i < t.n; i++)
		n_all += t.reqs[i].n_blocks;
	uniq = xcalloc(n_all, sizeof(*uniq));
	for (size_t i = 0, w = 0; i < t.n; i++)
		for (uint32_t k = 0; k < t.reqs[i].n_blocks; k++)
			uniq[w++] = t.reqs[i].hash_ids[k];
	qsort(uniq, n_all, sizeof(*uniq), cmp_u64);
	for (uint64_t i = 0; i < n_all; i++)
		if (!d || uniq[d - 1] != uniq[i])
			uniq[d++] = uniq[i];
	uses = xcalloc(d, sizeof(*uses));
	seg0 = xcalloc(d, sizeof(*seg0));
	segs = xcalloc(d, sizeof(*segs));
	n_reqs = 0;
	reqs = xcalloc(t.n, sizeof(*reqs));
	for (size_t i = 0; i < t.n; i++) {
		const struct mc_trace_req *tr = &t.reqs[i];
		struct req *r;

		if (!tr->n_blocks ||
		    (opt.keys_given && (tr->n_blocks < opt.kmin || tr->n_blocks > opt.kmax)))
			continue;
		if (opt.requests && n_reqs == (size_t)opt.requests)
			break;
		r = &reqs[n_reqs++];
		r->n_keys = tr->n_blocks;
		r->ids = xcalloc(tr->n_blocks, sizeof(*r->ids));
		for (uint32_t k = 0; k < tr->n_blocks; k++) {
			uint64_t *p = bsearch(&tr->hash_ids[k], uniq, d, sizeof(*uniq), cmp_u64);
			r->ids[k] = (uint64_t)(p - uniq);
		}
		/* where a cache-aware scheduler would have run it: on the holder of
		 * its prefix when it shares more than a root block, else spread */
		while (depth < r->n_keys && uses[r->ids[depth]])
			depth++;
		home = depth >= 2 ? seg0[r->ids[depth - 1]]
				  : (int16_t)((n_reqs - 1) % (size_t)opt.instances);
		for (uint32_t k = 0; k < r->n_keys; k++) {
			uint64_t x = r->ids[k];

			if (uses[x]++ == 0)
				seg0[x] = home;
			segs[x] |= 1ull << home; /* computed or fetched here, and kept */
		}
		depth = 0;
	}
	if (!n_reqs)
		die("%s: no request with %u-%u blocks", opt.trace, opt.kmin, opt.kmax);
	b = xcalloc(opt.blocks > d ? opt.blocks : d, sizeof(*b));
	for (uint64_t x = 0; x < d && nb < opt.blocks; x++)
		if (uses[x] >= 2)
			b[nb++] = (struct block){x, segs[x]};
	for (size_t q = 0; q < n_reqs; q++) { /* the leading run that is stored */
		struct req *r = &reqs[q];
		while (r->resident < r->n_keys && uses[r->ids[r->resident]] >= 2)
			r->resident++;
	}
	if (nb < opt.blocks) {
		fill_chains(b + nb, d, (size_t)(opt.blocks - nb));
		nb = (size_t)opt.blocks;
	}
	for (size_t q = 0, i = 0; q < n_reqs; i++) {
		const struct mc_trace_req *tr = &t.reqs[i];
		if (!tr->n_blocks ||
		    (opt.keys_given && (tr->n_blocks < opt.kmin || tr->n_blocks > opt.kmax)))
			continue;
		req_finish(&reqs[q++], tr->input_length);
	}
	free(uniq);
	free(uses);
	free(seg0);
	free(segs);
	mc_trace_release(&t);
	*out = b;
	return nb;
}

/* ---- the reporter: load reports and the fake client's pings --------------- */

static atomic_bool stop_reporter;
static atomic_uint_fast64_t reports_sent;

static void report_all(struct hconn *h)
{
	char path[64], body[96];

	for (int i = 0; i < opt.instances; i++) {
		snprintf(path, sizeof(path), "/instances/cb-p%02d/load", i);
		if (opt.report_ms > 0)
			snprintf(body, sizeof(body), "{\"queue_s\":%.3f}",
				 (double)rnd_in(0, 2000) / 1e3);
		else
			snprintf(body, sizeof(body), "{}"); /* a heartbeat, no load */
		http_ok(h, "POST", path, body);
	}
	for (int i = 0; i < opt.decode; i++) {
		snprintf(path, sizeof(path), "/instances/cb-d%02d/load", i);
		if (opt.report_ms > 0)
			snprintf(body, sizeof(body), "{\"ctx_tokens\":%" PRIu64 "}",
				 rnd_in(0, 262144));
		else
			snprintf(body, sizeof(body), "{}");
		http_ok(h, "POST", path, body);
	}
	reports_sent += (uint64_t)(opt.instances + opt.decode);
}

static void *reporter_main(void *arg)
{
	struct hconn h, hb;
	double next_ping = now_s() + 1.0;
	uint64_t step = (uint64_t)(opt.report_ms > 0 ? opt.report_ms : 1000) * 1000000ull;
	struct timespec at;

	(void)arg;
	hconn_open(&h, opt.conductor);
	if (opt.conductor_b)
		hconn_open(&hb, opt.conductor_b);
	clock_gettime(CLOCK_MONOTONIC, &at);
	while (!stop_reporter) {
		uint64_t ns = (uint64_t)at.tv_nsec + step;

		report_all(&h);
		if (opt.conductor_b)
			report_all(&hb);
		if (now_s() >= next_ping) {
			ping_master();
			next_ping += 1.0;
		}
		/* a periodic timer (the report interval), not a wait for an event */
		at.tv_sec += (time_t)(ns / 1000000000ull);
		at.tv_nsec = (long)(ns % 1000000000ull);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
	}
	hconn_close(&h);
	if (opt.conductor_b)
		hconn_close(&hb);
	return NULL;
}

/* ---- measurement --------------------------------------------------------- */

enum target { T_MASTER, T_CONDUCTOR, T_HEALTH };

/* GET /health: the HTTP round trip alone, the floor under a /schedule */
static const char health_req[] = "GET /health HTTP/1.1\r\nHost: conductor\r\n\r\n";

struct worker {
	enum target target;
	const char *addr; /* the conductor's */
	int index, threads;
	struct mc_master_conn *mconn;
	pthread_barrier_t *go;
	double *lat; /* us */
	size_t n, cap;
	uint64_t http_200, http_429, http_other, prefix_blocks, fetch_blocks, keys, found;
	double elapsed_s;
	int last_code;
	char last_body[512];
};

static void sample_add(struct worker *w, double us)
{
	if (w->n == w->cap) {
		w->cap = w->cap ? w->cap * 2 : 1 << 16;
		w->lat = realloc(w->lat, w->cap * sizeof(*w->lat));
		if (!w->lat)
			die("out of memory");
	}
	w->lat[w->n++] = us;
}

static uint64_t json_uint_after(const char *body, size_t len, const char *field)
{
	const char *p = memmem(body, len, field, strlen(field));
	return p ? strtoull(p + strlen(field), NULL, 10) : 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct hconn h;
	size_t at = (size_t)w->index * (n_reqs / (size_t)w->threads + 1) % n_reqs;
	double t0, t_end;

	if (w->target != T_MASTER)
		hconn_open(&h, w->addr);
	pthread_barrier_wait(w->go);
	t0 = now_s();
	t_end = t0 + opt.duration;
	while (now_s() < t_end) {
		const struct req *r = &reqs[at];
		uint64_t a = now_ns(), z;

		if (w->target == T_MASTER) {
			struct mc_store_keys_req kr = {.n_keys = r->n_keys, .keys = r->keys};
			struct mc_store_msg m;

			call_ok(w->mconn, MC_STORE_BATCH_GET_REPLICA_LIST, &kr, &m);
			z = now_ns();
			if (m.body.batch_replica_list.n_items != r->n_keys)
				die("BatchGetReplicaList: %u answers for %u keys",
				    m.body.batch_replica_list.n_items, r->n_keys);
			for (uint32_t i = 0; i < r->n_keys; i++)
				w->found += m.body.batch_replica_list.items[i].status == MC_OK;
			mc_store_msg_release(&m);
		} else if (w->target == T_HEALTH) {
			const char *body;
			size_t blen;
			int code = hconn_call(&h, health_req, sizeof(health_req) - 1, &body, &blen);

			z = now_ns();
			if (code != 200)
				die("/health answered HTTP %d", code);
		} else {
			const char *body;
			size_t blen;
			int code = hconn_call(&h, r->http, r->http_len, &body, &blen);

			z = now_ns();
			if (code == 200)
				w->http_200++;
			else if (code == 429)
				w->http_429++;
			else {
				w->http_other++;
				w->last_code = code;
				snprintf(w->last_body, sizeof(w->last_body), "%.*s", (int)blen,
					 body);
			}
			w->prefix_blocks += json_uint_after(body, blen, "\"prefix_blocks\":");
			w->fetch_blocks += json_uint_after(body, blen, "\"fetch_blocks\":");
		}
		w->keys += r->n_keys;
		sample_add(w, (double)(z - a) / 1e3);
		at = (at + 1) % n_reqs;
	}
	w->elapsed_s = now_s() - t0;
	if (w->target != T_MASTER)
		hconn_close(&h);
	return NULL;
}

/* All runs of one case, pooled. */
struct result {
	const char *name;
	enum target target;
	const char *addr; /* the conductor's (A's or --conductor-b's) */
	long pid;	  /* its pid, or 0 */
	int conns;
	double rate[MAX_RUNS];
	int runs;
	double *lat;
	size_t n, cap;
	uint64_t http_200, http_429, http_other, prefix_blocks, fetch_blocks, keys, found, calls;
	double master_cpu_s, conductor_cpu_s;
};

static void run_once(struct result *res, struct mc_master_conn *mconn)
{
	int k = res->conns;
	struct worker *ws = xcalloc((size_t)k, sizeof(*ws));
	pthread_t *th = xcalloc((size_t)k, sizeof(*th));
	pthread_barrier_t go;
	double c0 = proc_cpu_s(opt.master_pid), d0 = proc_cpu_s(res->pid), el = 0;
	uint64_t calls = 0;

	pthread_barrier_init(&go, NULL, (unsigned)k);
	for (int i = 0; i < k; i++) {
		ws[i] = (struct worker){.target = res->target,
					.addr = res->addr,
					.index = i,
					.threads = k,
					.mconn = mconn,
					.go = &go};
		if (pthread_create(&th[i], NULL, worker_main, &ws[i]))
			die("pthread_create failed");
	}
	for (int i = 0; i < k; i++) {
		struct worker *w = &ws[i];

		pthread_join(th[i], NULL);
		if (w->http_other)
			die("/schedule answered HTTP %d: %s", w->last_code, w->last_body);
		if (res->n + w->n > res->cap) {
			res->cap = (res->n + w->n) * 2;
			res->lat = realloc(res->lat, res->cap * sizeof(*res->lat));
			if (!res->lat)
				die("out of memory");
		}
		memcpy(res->lat + res->n, w->lat, w->n * sizeof(*w->lat));
		res->n += w->n;
		calls += w->n;
		el = w->elapsed_s > el ? w->elapsed_s : el;
		res->http_200 += w->http_200;
		res->http_429 += w->http_429;
		res->prefix_blocks += w->prefix_blocks;
		res->fetch_blocks += w->fetch_blocks;
		res->keys += w->keys;
		res->found += w->found;
		free(w->lat);
	}
	if (c0 >= 0)
		res->master_cpu_s += proc_cpu_s(opt.master_pid) - c0;
	if (d0 >= 0)
		res->conductor_cpu_s += proc_cpu_s(res->pid) - d0;
	res->calls += calls;
	res->rate[res->runs++] = (double)calls / el;
	pthread_barrier_destroy(&go);
	free(ws);
	free(th);
}

static double pct(const double *sorted, size_t n, double p)
{
	size_t i = (size_t)ceil(p * (double)n);
	return n ? sorted[i ? i - 1 : 0] : 0;
}

static void report(struct result *rs, int n_cases, size_t n_blocks, double load_s)
{
	double mean_keys = 0, mean_resident = 0;
	uint32_t kmin = UINT32_MAX, kmax = 0;

	for (size_t q = 0; q < n_reqs; q++) {
		kmin = reqs[q].n_keys < kmin ? reqs[q].n_keys : kmin;
		kmax = reqs[q].n_keys > kmax ? reqs[q].n_keys : kmax;
		mean_keys += reqs[q].n_keys;
		mean_resident += reqs[q].resident;
	}
	mean_keys /= (double)n_reqs;
	mean_resident /= (double)n_reqs;
	if (opt.json) {
		printf("{\"config\":{\"blocks\":%zu,\"value_size\":%" PRIu64
		       ",\"instances\":%d,\"decode\":%d,\"segments\":%d,\"client_processes\":1,"
		       "\"source\":\"%s\",\"keys_min\":%u,\"keys_max\":%u,\"requests\":%zu,"
		       "\"mean_keys\":%.1f,\"mean_resident_prefix\":%.1f,\"duration_s\":%g,"
		       "\"runs\":%d,\"report_ms\":%d,\"load_s\":%.2f},\"cases\":[",
		       n_blocks, opt.value_size, opt.instances, opt.decode, opt.instances,
		       opt.trace ? opt.trace : "synthetic", kmin, kmax, n_reqs, mean_keys,
		       mean_resident, opt.duration, opt.runs, opt.report_ms, load_s);
	} else {
		printf("conductor_bench: %zu blocks of %" PRIu64 " B on %d segments (1 client), %d "
		       "prefill + %d decode instances, load %.1f s\n",
		       n_blocks, opt.value_size, opt.instances, opt.instances, opt.decode, load_s);
		printf("requests: %zu from %s, keys per call %u-%u, mean %.1f (resident prefix %.1f), "
		       "%d run(s) x %g s per case, load reports every %d ms\n",
		       n_reqs, opt.trace ? opt.trace : "synthetic chains", kmin, kmax, mean_keys,
		       mean_resident, opt.runs, opt.duration, opt.report_ms);
		printf("%-28s %5s %9s %8s %8s %8s %8s %8s %8s  %s\n", "case", "conns", "calls/s",
		       "p50_us", "p99_us", "p999_us", "mean_us", "mst_cpu", "cnd_cpu", "answers");
	}
	for (int c = 0; c < n_cases; c++) {
		struct result *r = &rs[c];
		double sum = 0, rate = median(r->rate, r->runs), mc, cc;

		qsort(r->lat, r->n, sizeof(*r->lat), cmp_double);
		for (size_t i = 0; i < r->n; i++)
			sum += r->lat[i];
		mc = opt.master_pid > 0 ? r->master_cpu_s * 1e6 / (double)r->calls : -1;
		cc = r->pid > 0 ? r->conductor_cpu_s * 1e6 / (double)r->calls : -1;
		if (opt.json) {
			printf("%s{\"case\":\"%s\",\"conns\":%d,\"calls\":%" PRIu64
			       ",\"calls_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
			       "\"p999_us\":%.1f,\"mean_us\":%.1f,\"max_us\":%.1f,"
			       "\"master_cpu_us_per_call\":%.1f,\"conductor_cpu_us_per_call\":%.1f",
			       c ? "," : "", r->name, r->conns, r->calls, rate,
			       pct(r->lat, r->n, 0.5), pct(r->lat, r->n, 0.99),
			       pct(r->lat, r->n, 0.999), sum / (double)r->n, r->lat[r->n - 1], mc,
			       cc);
			if (r->target == T_CONDUCTOR)
				printf(",\"http_200\":%" PRIu64 ",\"http_429\":%" PRIu64
				       ",\"mean_prefix_blocks\":%.2f,\"mean_fetch_blocks\":%.2f}",
				       r->http_200, r->http_429,
				       (double)r->prefix_blocks / (double)r->calls,
				       (double)r->fetch_blocks / (double)r->calls);
			else if (r->target == T_HEALTH)
				printf("}");
			else
				printf(",\"mean_keys_found\":%.2f}",
				       (double)r->found / (double)r->calls);
		} else {
			char ans[160];

			if (r->target == T_CONDUCTOR)
				snprintf(ans, sizeof(ans),
					 "200: %" PRIu64 ", 429: %" PRIu64
					 "; prefix %.1f blocks, fetched %.1f",
					 r->http_200, r->http_429,
					 (double)r->prefix_blocks / (double)r->calls,
					 (double)r->fetch_blocks / (double)r->calls);
			else if (r->target == T_HEALTH)
				snprintf(ans, sizeof(ans), "the HTTP round trip alone");
			else
				snprintf(ans, sizeof(ans), "keys found %.1f per call",
					 (double)r->found / (double)r->calls);
			printf("%-28s %5d %9.0f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f  %s\n", r->name,
			       r->conns, rate, pct(r->lat, r->n, 0.5), pct(r->lat, r->n, 0.99),
			       pct(r->lat, r->n, 0.999), sum / (double)r->n, mc, cc, ans);
		}
	}
	if (opt.json) {
		printf("],\"load_reports\":%" PRIu64 "}\n", (uint64_t)reports_sent);
	} else {
		if (n_cases >= 3) {
			double m50 = pct(rs[0].lat, rs[0].n, 0.5),
			       s50 = pct(rs[1].lat, rs[1].n, 0.5),
			       h50 = pct(rs[2].lat, rs[2].n, 0.5);
			printf("at one connection, p50: master round trip %.1f us (%.0f%% of a "
			       "/schedule), HTTP round trip %.1f us (%.0f%%), the rest %+.1f us; p99 "
			       "%+.1f us over the master's\n",
			       m50, 100 * m50 / s50, h50, 100 * h50 / s50, s50 - m50 - h50,
			       pct(rs[1].lat, rs[1].n, 0.99) - pct(rs[0].lat, rs[0].n, 0.99));
		}
		if (opt.conductor_b) {
			double m50 = pct(rs[0].lat, rs[0].n, 0.5),
			       m99 = pct(rs[0].lat, rs[0].n, 0.99);
			printf("added over the master's round trip at one connection, p50 / p99: "
			       "A %+.1f / %+.1f us, B %+.1f / %+.1f us\n",
			       pct(rs[1].lat, rs[1].n, 0.5) - m50,
			       pct(rs[1].lat, rs[1].n, 0.99) - m99,
			       pct(rs[3].lat, rs[3].n, 0.5) - m50,
			       pct(rs[3].lat, rs[3].n, 0.99) - m99);
		}
		printf("load reports sent: %" PRIu64 "; cpu columns: us of CPU per call "
		       "(-1: no --master-pid / --conductor-pid)\n",
		       (uint64_t)reports_sent);
	}
	fflush(stdout);
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--master=H:P] [--conductor=H:P] [--blocks=1000000]\n"
		   "       [--instances=16] [--decode=4] [--keys=16-128] [--trace=FILE]\n"
		   "       [--requests=N] [--duration=5] [--runs=3] [--concurrency=1]\n"
		   "       [--report-ms=100] [--value-size=64] [--key-prefix=kv_] [--seed=1]\n"
		   "       [--master-pid=PID] [--conductor-pid=PID] [--keep] [--json]\n"
		   "       [--conductor-b=H:P [--conductor-b-pid=PID]]  (a second conductor\n"
		   "       on the same master, measured alternately with the first: A/B)\n"
		   "The master must run with --mount_probe=false (fake segments);\n"
		   "bench/conductor_bench.py starts one and a conductor and runs this.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"master", required_argument, NULL, 'M'},
		{"conductor", required_argument, NULL, 'C'},
		{"blocks", required_argument, NULL, 'b'},
		{"instances", required_argument, NULL, 'i'},
		{"decode", required_argument, NULL, 'D'},
		{"keys", required_argument, NULL, 'k'},
		{"trace", required_argument, NULL, 't'},
		{"requests", required_argument, NULL, 'q'},
		{"duration", required_argument, NULL, 'd'},
		{"runs", required_argument, NULL, 'r'},
		{"concurrency", required_argument, NULL, 'c'},
		{"report-ms", required_argument, NULL, 'R'},
		{"value-size", required_argument, NULL, 'v'},
		{"key-prefix", required_argument, NULL, 'p'},
		{"seed", required_argument, NULL, 's'},
		{"master-pid", required_argument, NULL, 'P'},
		{"conductor-pid", required_argument, NULL, 'Q'},
		{"conductor-b", required_argument, NULL, 'B'},
		{"conductor-b-pid", required_argument, NULL, 'X'},
		{"keep", no_argument, NULL, 'K'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct result rs[8] = {0};
	struct mc_master_conn *reader;
	struct block *blocks;
	pthread_t rep;
	size_t n_blocks;
	double load_s;
	int o, n_cases = 0;
	mc_status st;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;

		switch (o) {
		case 'M':
			opt.master = optarg;
			break;
		case 'C':
			opt.conductor = optarg;
			break;
		case 'b':
			opt.blocks = strtoull(optarg, NULL, 0);
			break;
		case 'i':
			opt.instances = atoi(optarg);
			break;
		case 'D':
			opt.decode = atoi(optarg);
			break;
		case 'k':
			opt.kmin = (uint32_t)strtoul(optarg, &end, 10);
			opt.kmax = *end == '-' ? (uint32_t)strtoul(end + 1, &end, 10) : opt.kmin;
			if (*end || !opt.kmin || opt.kmax < opt.kmin)
				goto bad;
			opt.keys_given = true;
			break;
		case 't':
			opt.trace = optarg;
			break;
		case 'q':
			opt.requests = atoi(optarg);
			break;
		case 'd':
			opt.duration = atof(optarg);
			break;
		case 'r':
			opt.runs = atoi(optarg);
			break;
		case 'c':
			opt.concurrency = atoi(optarg);
			break;
		case 'R':
			opt.report_ms = atoi(optarg);
			break;
		case 'v':
			opt.value_size = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			opt.key_prefix = optarg;
			break;
		case 's':
			opt.seed = strtoull(optarg, NULL, 0);
			break;
		case 'P':
			opt.master_pid = atol(optarg);
			break;
		case 'Q':
			opt.conductor_pid = atol(optarg);
			break;
		case 'B':
			opt.conductor_b = optarg;
			break;
		case 'X':
			opt.conductor_b_pid = atol(optarg);
			break;
		case 'K':
			opt.keep = true;
			break;
		case 'j':
			opt.json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return 2;
		}
	}
	if (optind != argc || opt.blocks < 1 || opt.instances < 1 || opt.instances > MAX_SEGS ||
	    opt.decode < 0 || opt.decode > 99 || opt.requests < 0 || !(opt.duration > 0) ||
	    opt.runs < 1 || opt.runs > MAX_RUNS || opt.concurrency < 1 || opt.concurrency > 1024 ||
	    opt.report_ms < 0 || !opt.value_size || strlen(opt.key_prefix) > KEY_W - 17) {
	bad:
		fprintf(stderr, PROG ": bad arguments\n");
		usage(stderr);
		return 2;
	}
	mc_log_set_level(MC_LOG_WARN);
	rng_state = opt.seed;
	key_base = ((uint64_t)getpid() & 0xffffu) << 36;

	st = mc_master_conn_new(opt.master, &loader);
	if (st != MC_OK)
		die_status("connect to the master", st);
	st = mc_master_conn_new(opt.master, &reader);
	if (st != MC_OK)
		die_status("connect to the master", st);
	mount_segments();
	n_blocks = opt.trace ? build_trace(&blocks) : build_synthetic(&blocks);
	load_s = put_blocks(blocks, n_blocks);
	free(blocks);
	for (int ci = 0; ci < (opt.conductor_b ? 2 : 1); ci++) {
		struct hconn h;
		char body[256];

		hconn_open(&h, ci ? opt.conductor_b : opt.conductor);
		for (int i = 0; i < opt.instances; i++) {
			snprintf(body, sizeof(body),
				 "{\"id\":\"cb-p%02d\",\"role\":\"prefill\",\"segment\":\"%.63s\"}",
				 i, seg_names[i]);
			http_ok(&h, "POST", "/instances", body);
		}
		for (int i = 0; i < opt.decode; i++) {
			snprintf(body, sizeof(body), "{\"id\":\"cb-d%02d\",\"role\":\"decode\"}",
				 i);
			http_ok(&h, "POST", "/instances", body);
		}
		hconn_close(&h);
	}
	if (pthread_create(&rep, NULL, reporter_main, NULL))
		die("pthread_create failed");

	/* 0 master, 1 A's /schedule, 2 A's /health, 3 B's /schedule (with
	 * --conductor-b); A and B alternate, in turn first in a run */
	rs[n_cases++] = (struct result){
		.name = "master BatchGetReplicaList", .target = T_MASTER, .conns = 1};
	rs[n_cases++] = (struct result){.name = opt.conductor_b ? "A conductor /schedule"
								: "conductor /schedule",
					.target = T_CONDUCTOR,
					.addr = opt.conductor,
					.pid = opt.conductor_pid,
					.conns = 1};
	rs[n_cases++] = (struct result){.name = "conductor GET /health",
					.target = T_HEALTH,
					.addr = opt.conductor,
					.pid = opt.conductor_pid,
					.conns = 1};
	if (opt.conductor_b)
		rs[n_cases++] = (struct result){.name = "B conductor /schedule",
						.target = T_CONDUCTOR,
						.addr = opt.conductor_b,
						.pid = opt.conductor_b_pid,
						.conns = 1};
	for (int r = 0; r < opt.runs; r++) {
		run_once(&rs[0], reader);
		if (opt.conductor_b && r % 2) {
			run_once(&rs[3], reader);
			run_once(&rs[1], reader);
		} else {
			run_once(&rs[1], reader);
			if (opt.conductor_b)
				run_once(&rs[3], reader);
		}
		run_once(&rs[2], reader);
	}
	if (opt.concurrency > 1) {
		int first = n_cases;

		rs[n_cases++] = (struct result){.name = "master BatchGetReplicaList",
						.target = T_MASTER,
						.conns = opt.concurrency};
		rs[n_cases++] = (struct result){.name = rs[1].name,
						.target = T_CONDUCTOR,
						.addr = opt.conductor,
						.pid = opt.conductor_pid,
						.conns = opt.concurrency};
		if (opt.conductor_b)
			rs[n_cases++] = (struct result){.name = "B conductor /schedule",
							.target = T_CONDUCTOR,
							.addr = opt.conductor_b,
							.pid = opt.conductor_b_pid,
							.conns = opt.concurrency};
		for (int r = 0; r < opt.runs; r++) {
			bool b_first = opt.conductor_b && r % 2;

			run_once(&rs[first], reader);
			run_once(&rs[first + (b_first ? 2 : 1)], reader);
			if (opt.conductor_b)
				run_once(&rs[first + (b_first ? 1 : 2)], reader);
		}
	}
	stop_reporter = true;
	pthread_join(rep, NULL);
	report(rs, n_cases, n_blocks, load_s);

	if (!opt.keep)
		unmount_segments();
	for (int c = 0; c < n_cases; c++)
		free(rs[c].lat);
	for (size_t q = 0; q < n_reqs; q++) {
		free(reqs[q].ids);
		free(reqs[q].http);
		free((void *)reqs[q].keys[0].ptr);
		free(reqs[q].keys);
	}
	free(reqs);
	mc_master_conn_free(reader);
	mc_master_conn_free(loader);
	return 0;
}

/*
 * tests/unit/test_offload.c - the SSD tier's offload RPC
 * (store/offload_server.h, store/offload_client.h) with a real disk store
 * on real files and two Transfer Engines over loopback: objects staged
 * and read back byte-exact with the engine, tenants kept apart, missing
 * and wrong-size objects refused, a staging buffer too small served in
 * part and never overrun, unreleased batches reclaimed after their ttl,
 * malformed frames and connections over the cap cut, a kept connection
 * to a restarted server replaced, a stopped server failing the call at
 * once; and the disk-key encoding of (tenant, key).
 *
 * The cases that touch files run in a directory under /tmp (the disk) and
 * under /dev/shm (tmpfs, where it exists).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/sock.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/client_int.h"
#include "store/disk_store.h"
#include "store/offload_client.h"
#include "store/offload_server.h"
#include "store/proto.h"
#include "support.h"

#define RBUF (8u << 20)

struct fix {
	char dir[256];
	struct mc_disk_store *ds;
	struct mc_te *owner, *reader;
	struct mc_offload_server *srv;
	struct mc_offload_pool *pool;
	struct mc_offload_config cfg;
	uint8_t *rbuf; /* the reader's registered destination */
};

static struct fix F;

static void put_obj(const char *tenant, const char *key, uint64_t len, uint64_t seed)
{
	char dk[MC_STORE_KEY_MAX];
	size_t kl = mc_offload_disk_key(tenant, strlen(tenant), key, strlen(key), dk, sizeof(dk));
	void *v = malloc(len ? len : 1);
	struct mc_disk_obj o;

	assert_true(kl > 0);
	mc_test_fill(v, len, seed);
	o = (struct mc_disk_obj){.key = dk, .key_len = kl, .data = v, .len = len};
	assert_int_equal(mc_disk_store_put(F.ds, &o, 1, NULL), MC_OK);
	free(v);
}

static void server_start(uint64_t buf_size, int64_t ttl_ms, int64_t max_conns, uint16_t port)
{
	mc_offload_config_init(&F.cfg);
	F.cfg.buffer_size = buf_size;
	F.cfg.gc_ttl_ms = ttl_ms;
	F.cfg.rpc_max_connections = max_conns;
	assert_int_equal(mc_offload_server_start(&F.cfg, "127.0.0.1", port, F.ds, F.owner, &F.srv),
			 MC_OK);
}

static int fix_setup(void **state)
{
	struct mc_disk_store_config dc;
	static int gen;
	char uri[64];

	memset(&F, 0, sizeof(F));
	if (!mc_test_tmpdir(*state, "mc-offload", F.dir, sizeof(F.dir)))
		return -1;
	mc_disk_store_config_init(&dc);
	free(dc.path);
	dc.path = strdup(F.dir);
	dc.max_total_size = 1ull << 30;
	if (mc_disk_store_open(&dc, &F.ds) != MC_OK) {
		fprintf(stderr, "open: %s\n", mc_last_error());
		return -1;
	}
	mc_disk_store_config_release(&dc);
	snprintf(uri, sizeof(uri), "mem://test_offload_%d", gen++);
	F.owner = mc_test_engine_new(uri, "owner");
	F.reader = mc_test_engine_new(uri, "reader");
	if (!F.owner || !F.reader)
		return -1;
	F.rbuf = mmap(NULL, RBUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (F.rbuf == MAP_FAILED || mc_te_register(F.reader, F.rbuf, RBUF, "cpu:0", true) != MC_OK)
		return -1;
	return mc_offload_pool_new(5000, &F.pool) == MC_OK ? 0 : -1;
}

static int fix_teardown(void **state)
{
	(void)state;
	mc_offload_pool_free(F.pool);
	mc_offload_server_stop(F.srv);
	mc_te_free(F.reader);
	mc_te_free(F.owner);
	munmap(F.rbuf, RBUF);
	mc_disk_store_close(F.ds);
	return mc_test_rmtree(F.dir);
}

/* BatchGetOffloadObject of n (tenant, key, size) items. */
static mc_status get(const struct mc_store_offload_rpc_item *items, uint32_t n,
		     struct mc_store_msg *resp)
{
	struct mc_store_offload_rpc_get_req req = {n, (struct mc_store_offload_rpc_item *)items};
	return mc_offload_pool_call(F.pool, mc_offload_server_endpoint(F.srv),
				    MC_STORE_BATCH_GET_OFFLOAD_OBJECT, &req, resp);
}

static mc_status release(uint64_t id)
{
	struct mc_store_offload_rpc_release_req req = {id};
	struct mc_store_msg resp;
	mc_status rc = mc_offload_pool_call(F.pool, mc_offload_server_endpoint(F.srv),
					    MC_STORE_RELEASE_OFFLOAD_BUFFER, &req, &resp);
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	return rc;
}

/* TE-reads len bytes at addr of the answer's segment into F.rbuf + off and
 * checks them against the seed. */
static void read_check(const struct mc_store_offload_rpc_get_resp *r, uint64_t addr, uint64_t len,
		       uint64_t seed)
{
	mc_segment_id seg;
	struct mc_xfer_req x = {
		.opcode = MC_OP_READ, .source = F.rbuf, .length = len, .target_offset = addr};
	uint8_t *want = malloc(len ? len : 1);

	assert_true(len <= RBUF);
	assert_int_equal(mc_te_open_segment(F.reader, r->segment.ptr, &seg), MC_OK);
	x.target_id = seg;
	memset(F.rbuf, 0xee, len);
	assert_int_equal(mc_te_transfer_sync(F.reader, &x, 1, 5000), MC_OK);
	mc_test_fill(want, len, seed);
	assert_memory_equal(F.rbuf, want, len);
	free(want);
}

#define ITEM(t, k, n) \
	((struct mc_store_offload_rpc_item){mc_proto_str_c(t), mc_proto_str_c(k), (n)})

/* ---- cases ------------------------------------------------------------------------------- */

static void objects_are_staged_and_read_back(void **state)
{
	struct mc_store_offload_rpc_item items[] = {
		ITEM("", "a", 1000),	   ITEM("default", "b", 300000), ITEM("t1", "a", 5000),
		ITEM("", "missing", 10),   ITEM("", "a", 999),		 ITEM("t2", "a", 5000),
		ITEM("", "\x01odd", 4096),
	};
	struct mc_offload_server_stats st;
	struct mc_store_msg m;
	const struct mc_store_offload_rpc_get_resp *r;

	(void)state;
	put_obj("", "a", 1000, 1);
	put_obj("", "b", 300000, 2);
	put_obj("t1", "a", 5000, 3);
	put_obj("", "\x01odd", 4096, 4);
	server_start(4u << 20, 5000, 64, 0);
	assert_int_equal(get(items, MC_ARRAY_SIZE(items), &m), MC_OK);
	r = &m.body.offload_rpc_get_resp;
	assert_int_equal(r->n_items, MC_ARRAY_SIZE(items));
	assert_true(r->batch_id != 0);
	assert_int_equal(r->gc_ttl_ms, 5000);
	assert_string_equal(r->segment.ptr, mc_te_local_name(F.owner));
	assert_int_equal(r->items[0].status, MC_OK);
	assert_int_equal(r->items[1].status, MC_OK);
	assert_int_equal(r->items[2].status, MC_OK);
	assert_int_equal(r->items[3].status, MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(r->items[4].status, MC_ERR_OBJECT_NOT_FOUND); /* wrong size */
	assert_int_equal(r->items[5].status, MC_ERR_OBJECT_NOT_FOUND); /* other tenant */
	assert_int_equal(r->items[6].status, MC_OK);
	assert_int_equal(r->items[0].address % 4096, 0);
	read_check(r, r->items[0].address, 1000, 1);
	read_check(r, r->items[1].address, 300000, 2);
	read_check(r, r->items[2].address, 5000, 3);
	read_check(r, r->items[6].address, 4096, 4);
	mc_offload_server_stats(F.srv, &st);
	assert_int_equal(st.batches, 1);
	assert_int_equal(st.objects, 4);
	assert_int_equal(st.live_batches, 1);
	assert_int_equal(release(r->batch_id), MC_OK);
	assert_int_equal(release(r->batch_id), MC_ERR_OBJECT_NOT_FOUND);
	mc_offload_server_stats(F.srv, &st);
	assert_int_equal(st.live_batches, 0);
	assert_int_equal(st.staged_bytes, 0);
	assert_int_equal(st.released, 1);
	/* one connection served every call */
	assert_int_equal(mc_offload_pool_connects(F.pool), 1);
	mc_store_msg_release(&m);
}

static void a_small_buffer_serves_what_fits(void **state)
{
	struct mc_store_offload_rpc_item items[6];
	struct mc_store_msg m, m2;
	const struct mc_store_offload_rpc_get_resp *r;
	char keys[6][8];

	(void)state;
	for (int i = 0; i < 5; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		put_obj("", keys[i], 300000, 10 + i);
		items[i] = ITEM("", keys[i], 300000);
	}
	put_obj("", "huge", 2u << 20, 99);
	items[5] = ITEM("", "huge", 2u << 20);
	server_start(1u << 20, 5000, 64, 0);
	assert_int_equal(get(items, 6, &m), MC_OK);
	r = &m.body.offload_rpc_get_resp;
	/* 3 x 300000 (293 KiB each at 4 KiB) fit in 1 MiB, the rest do not */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(r->items[i].status, MC_OK);
		read_check(r, r->items[i].address, 300000, 10 + i);
	}
	assert_int_equal(r->items[3].status, MC_ERR_BUFFER_OVERFLOW);
	assert_int_equal(r->items[4].status, MC_ERR_BUFFER_OVERFLOW);
	assert_int_equal(r->items[5].status, MC_ERR_BUFFER_OVERFLOW);
	/* with the first batch live, the rest get what is left: none fits */
	assert_int_equal(get(&items[3], 2, &m2), MC_OK);
	assert_int_equal(m2.body.offload_rpc_get_resp.batch_id, 0);
	assert_int_equal(m2.body.offload_rpc_get_resp.items[0].status, MC_ERR_BUFFER_OVERFLOW);
	mc_store_msg_release(&m2);
	/* after the release they are served */
	assert_int_equal(release(r->batch_id), MC_OK);
	assert_int_equal(get(&items[3], 3, &m2), MC_OK);
	r = &m2.body.offload_rpc_get_resp;
	assert_int_equal(r->items[0].status, MC_OK);
	assert_int_equal(r->items[1].status, MC_OK);
	assert_int_equal(r->items[2].status, MC_ERR_BUFFER_OVERFLOW); /* never fits */
	read_check(r, r->items[0].address, 300000, 13);
	read_check(r, r->items[1].address, 300000, 14);
	assert_int_equal(release(r->batch_id), MC_OK);
	mc_store_msg_release(&m2);
	mc_store_msg_release(&m);
}

static void unreleased_batches_are_reclaimed(void **state)
{
	struct mc_store_offload_rpc_item it = ITEM("", "x", 700000);
	struct mc_offload_server_stats st;
	struct mc_store_msg m;
	uint64_t t0, id;

	(void)state;
	put_obj("", "x", 700000, 5);
	server_start(1u << 20, 200, 64, 0);
	t0 = mc_now_ms();
	assert_int_equal(get(&it, 1, &m), MC_OK);
	id = m.body.offload_rpc_get_resp.batch_id;
	assert_int_equal(m.body.offload_rpc_get_resp.items[0].status, MC_OK);
	mc_store_msg_release(&m);
	/* the buffer is taken: a second copy does not fit */
	assert_int_equal(get(&it, 1, &m), MC_OK);
	assert_int_equal(m.body.offload_rpc_get_resp.items[0].status, MC_ERR_BUFFER_OVERFLOW);
	mc_store_msg_release(&m);
	do {
		mc_offload_server_stats(F.srv, &st);
		assert_true(mc_now_ms() - t0 < 5000);
		if (!st.reclaimed)
			usleep(10000);
	} while (!st.reclaimed);
	assert_true(mc_now_ms() - t0 >= 200);
	assert_int_equal(st.live_batches, 0);
	assert_int_equal(release(id), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(&it, 1, &m), MC_OK);
	assert_int_equal(m.body.offload_rpc_get_resp.items[0].status, MC_OK);
	mc_store_msg_release(&m);
}

/* A raw connection to the server. */
static int raw_connect(void)
{
	int fd = mc_sock_connect("127.0.0.1", mc_offload_server_port(F.srv), 2000, false);
	assert_true(fd >= 0);
	return fd;
}

/* The server closes fd within the deadline. */
static void closed_by_server(int fd)
{
	uint8_t b[64];
	mc_status rc = mc_sock_read_full(fd, b, sizeof(b), mc_now_ms() + 3000);
	assert_int_equal(rc, MC_ERR_CONN_CLOSED);
	close(fd);
}

static void bad_frames_and_extra_connections_are_cut(void **state)
{
	static const char junk[] = "GET / HTTP/1.1\r\n\r\n_padding_to_the_header_length_";
	struct mc_store_offload_rpc_item it = ITEM("", "y", 10);
	struct mc_offload_server_stats st;
	struct mc_store_msg m;
	struct mc_buf b;
	uint64_t t0;
	int fd, a, c, d;

	(void)state;
	put_obj("", "y", 10, 6);
	server_start(1u << 20, 5000, 2, 0);
	fd = raw_connect();
	assert_int_equal(mc_sock_write_full(fd, junk, sizeof(junk), 0), MC_OK);
	closed_by_server(fd);
	/* a request message the server does not serve is answered, not cut */
	fd = raw_connect();
	mc_buf_init(&b);
	assert_int_equal(mc_store_request_encode(&b, MC_STORE_PING, 5,
						 &(struct mc_store_client_req){{1, 2}}),
			 MC_OK);
	assert_int_equal(mc_sock_write_full(fd, b.data, b.len, 0), MC_OK);
	{
		uint8_t h[MC_PROTO_HDR_LEN];
		struct mc_proto_hdr hd;
		assert_int_equal(mc_sock_read_full(fd, h, sizeof(h), mc_now_ms() + 3000), MC_OK);
		assert_int_equal(mc_proto_hdr_decode(h, 1u << 20, &hd), MC_OK);
		assert_int_equal(hd.status, MC_ERR_NOT_SUPPORTED);
		assert_int_equal(hd.req_id, 5);
	}
	close(fd);
	mc_buf_release(&b);
	/* the server saw both go */
	t0 = mc_now_ms();
	for (;;) {
		mc_offload_server_stats(F.srv, &st);
		if (!st.open_connections)
			break;
		assert_true(mc_now_ms() - t0 < 3000);
		usleep(1000);
	}
	/* cap 2: the third connection is closed at once */
	a = raw_connect();
	c = raw_connect();
	d = raw_connect();
	closed_by_server(d);
	mc_offload_server_stats(F.srv, &st);
	assert_true(st.refused >= 1);
	assert_true(st.bad_frames >= 1);
	close(a);
	close(c);
	/* and the server still serves */
	for (int i = 0; i < 100; i++) {
		mc_status rc = get(&it, 1, &m);
		if (rc == MC_OK)
			break;
		usleep(10000); /* the two closes reach the server's loop */
	}
	assert_int_equal(m.body.offload_rpc_get_resp.items[0].status, MC_OK);
	mc_store_msg_release(&m);
}

static void a_restarted_or_stopped_server(void **state)
{
	struct mc_store_offload_rpc_item it = ITEM("", "z", 100);
	struct mc_store_msg m;
	uint16_t port;
	uint64_t t0;

	(void)state;
	put_obj("", "z", 100, 7);
	server_start(1u << 20, 5000, 64, 0);
	port = mc_offload_server_port(F.srv);
	assert_int_equal(get(&it, 1, &m), MC_OK);
	mc_store_msg_release(&m);
	/* the kept connection dies with the server; a new one on the port serves */
	mc_offload_server_stop(F.srv);
	F.srv = NULL;
	server_start(1u << 20, 5000, 64, port);
	assert_int_equal(get(&it, 1, &m), MC_OK);
	assert_int_equal(m.body.offload_rpc_get_resp.items[0].status, MC_OK);
	mc_store_msg_release(&m);
	assert_int_equal(mc_offload_pool_connects(F.pool), 2);
	/* no server at all: the call fails at once, not at its deadline */
	mc_offload_server_stop(F.srv);
	t0 = mc_now_ms();
	{
		char ep[64];
		struct mc_store_offload_rpc_get_req req = {1, &it};
		snprintf(ep, sizeof(ep), "127.0.0.1:%u", port);
		F.srv = NULL;
		assert_int_equal(mc_offload_pool_call(F.pool, ep, MC_STORE_BATCH_GET_OFFLOAD_OBJECT,
						      &req, &m),
				 MC_ERR_RPC_FAIL);
		assert_int_equal(
			mc_offload_pool_call(F.pool, "nonsense", MC_STORE_RELEASE_OFFLOAD_BUFFER,
					     &(struct mc_store_offload_rpc_release_req){1}, &m),
			MC_ERR_INVALID_PARAMS);
	}
	assert_true(mc_now_ms() - t0 < 2000);
}

/* ---- the reader's path (client_disk_read.c) ---------------------------------------------- */

/* A client with only what the disk reads use. */
static void reader_make(struct mc_store *s)
{
	memset(s, 0, sizeof(*s));
	s->te = F.reader;
	s->offload_pool = F.pool;
	snprintf(s->tenant, sizeof(s->tenant), "default");
}

static struct mc_store_replica disk_rep(const char *endpoint, uint64_t size, uint64_t off)
{
	return (struct mc_store_replica){.status = MC_STORE_REPLICA_COMPLETE,
					 .type = MC_STORE_REPLICA_LOCAL_DISK,
					 .size = size,
					 .address = off,
					 .transport_endpoint = mc_proto_str_c(endpoint)};
}

static void disk_io(struct mc_store_io *io, const char *key, void *const *bufs, const size_t *lens,
		    size_t nbufs, uint64_t len, const struct mc_store_replica *rep)
{
	*io = (struct mc_store_io){.bufs = bufs,
				   .lens = lens,
				   .nbufs = nbufs,
				   .len = len,
				   .reps = rep,
				   .nreps = 1,
				   .key = mc_proto_str_c(key)};
}

static void reader_reads_whole_objects_and_ranges(void **state)
{
	uint8_t *a = malloc(300000), *b = malloc(2000), *want = malloc(300000);
	void *abufs[] = {a, a + 100000}, *bbufs[] = {b}, *cbufs[] = {b};
	size_t alens[] = {100000, 200000}, blens[] = {2000}, clens[] = {2000};
	struct mc_store_replica ra, rb, rc, rd;
	struct mc_store_io ios[4];
	struct mc_offload_server_stats st;
	struct mc_store s;
	const char *ep;

	(void)state;
	put_obj("", "a", 300000, 21);
	put_obj("", "b", 5000, 22);
	server_start(4u << 20, 5000, 64, 0);
	ep = mc_offload_server_endpoint(F.srv);
	reader_make(&s);
	ra = disk_rep(ep, 300000, 0);
	rb = disk_rep(ep, 5000, 1000); /* bytes [1000, 3000) */
	rc = disk_rep(ep, 10, 0);
	rd = disk_rep(ep, 300000, 0);
	disk_io(&ios[0], "a", abufs, alens, 2, 300000, &ra);
	disk_io(&ios[1], "b", bbufs, blens, 1, 2000, &rb);
	disk_io(&ios[2], "nope", cbufs, clens, 1, 10, &rc);
	disk_io(&ios[3], "a", abufs, alens, 2, 300000, &rd);
	ios[3].status = MC_ERR_INVALID_PARAMS; /* not taking part */
	mc_store_disk_read(&s, ios, 4);
	assert_int_equal(ios[0].status, MC_OK);
	assert_int_equal(ios[1].status, MC_OK);
	assert_int_equal(ios[2].status, MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(ios[3].status, MC_ERR_INVALID_PARAMS);
	mc_test_fill(want, 300000, 21);
	assert_memory_equal(a, want, 300000);
	mc_test_fill(want, 5000, 22);
	assert_memory_equal(b, want + 1000, 2000);
	assert_int_equal(atomic_load(&s.offload_reads), 2);
	/* the batch was released */
	mc_offload_server_stats(F.srv, &st);
	assert_int_equal(st.released, 1);
	assert_int_equal(st.live_batches, 0);
	free(a);
	free(b);
	free(want);
}

static void reader_asks_again_for_what_did_not_fit(void **state)
{
	enum { N = 7, LEN = 300000 };
	uint8_t *dst = malloc((size_t)N * LEN + (3u << 20)), *want = malloc(3u << 20);
	struct mc_store_replica reps[N + 1];
	struct mc_store_io ios[N + 1];
	void *bufs[N + 1];
	size_t lens[N + 1];
	char keys[N][8];
	struct mc_offload_server_stats st;
	struct mc_store s;
	const char *ep;

	(void)state;
	server_start(1u << 20, 5000, 64, 0); /* three fit at a time */
	ep = mc_offload_server_endpoint(F.srv);
	reader_make(&s);
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "r%d", i);
		put_obj("", keys[i], LEN, 30 + i);
		reps[i] = disk_rep(ep, LEN, 0);
		bufs[i] = dst + (size_t)i * LEN;
		lens[i] = LEN;
		disk_io(&ios[i], keys[i], &bufs[i], &lens[i], 1, LEN, &reps[i]);
	}
	put_obj("", "big", 3u << 20, 40); /* never fits */
	reps[N] = disk_rep(ep, 3u << 20, 0);
	bufs[N] = dst + (size_t)N * LEN;
	lens[N] = 3u << 20;
	disk_io(&ios[N], "big", &bufs[N], &lens[N], 1, 3u << 20, &reps[N]);
	mc_store_disk_read(&s, ios, N + 1);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ios[i].status, MC_OK);
		mc_test_fill(want, LEN, 30 + i);
		assert_memory_equal(bufs[i], want, LEN);
	}
	assert_int_equal(ios[N].status, MC_ERR_BUFFER_OVERFLOW);
	assert_int_equal(atomic_load(&s.offload_reads), N);
	mc_offload_server_stats(F.srv, &st);
	assert_true(st.batches >= 3);
	assert_int_equal(st.live_batches, 0);
	free(dst);
	free(want);
}

static void reader_fails_in_bounded_time_without_an_owner(void **state)
{
	uint8_t buf[64];
	void *bufs[] = {buf};
	size_t lens[] = {sizeof(buf)};
	struct mc_store_replica r;
	struct mc_store_io io;
	struct mc_store s;
	char ep[64];
	uint64_t t0;
	uint16_t port;
	pid_t pid;
	int lfd;

	(void)state;
	/* nothing listens: refused at once */
	port = mc_test_free_port();
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", port);
	reader_make(&s);
	r = disk_rep(ep, sizeof(buf), 0);
	disk_io(&io, "k", bufs, lens, 1, sizeof(buf), &r);
	t0 = mc_now_ms();
	mc_store_disk_read(&s, &io, 1);
	assert_int_equal(io.status, MC_ERR_RPC_FAIL);
	assert_true(mc_now_ms() - t0 < 1000);
	/* an owner that accepts and never answers: the call's deadline */
	mc_offload_pool_free(F.pool);
	assert_int_equal(mc_offload_pool_new(300, &F.pool), MC_OK);
	s.offload_pool = F.pool;
	lfd = mc_sock_listen_on("127.0.0.1", 0, 8);
	assert_true(lfd >= 0);
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", mc_sock_local_port(lfd));
	r = disk_rep(ep, sizeof(buf), 0);
	io.status = MC_OK;
	t0 = mc_now_ms();
	mc_store_disk_read(&s, &io, 1);
	assert_int_equal(io.status, MC_ERR_RPC_TIMEOUT);
	assert_true(mc_now_ms() - t0 >= 250);
	assert_true(mc_now_ms() - t0 < 3000);
	close(lfd);
	/* an owner that dies mid-call: its socket closes, the call fails at once */
	lfd = mc_sock_listen_on("127.0.0.1", 0, 8);
	assert_true(lfd >= 0);
	assert_int_equal(mc_sock_set_nonblock(lfd, false), MC_OK);
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", mc_sock_local_port(lfd));
	r = disk_rep(ep, sizeof(buf), 0);
	io.status = MC_OK;
	pid = fork();
	if (pid == 0) {
		int c = accept(lfd, NULL, NULL);
		char b1;
		if (c >= 0)
			(void)!read(c, &b1, 1); /* the request has begun to arrive */
		_exit(0);
	}
	assert_true(pid > 0);
	t0 = mc_now_ms();
	mc_store_disk_read(&s, &io, 1);
	assert_int_equal(io.status, MC_ERR_RPC_FAIL);
	assert_true(mc_now_ms() - t0 < 250);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	close(lfd);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void accept_pauses_when_descriptors_run_out(void **state)
{
	struct mc_offload_server_stats st;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct rlimit old, low;
	static int fill[4096];
	uint8_t h[MC_PROTO_HDR_LEN];
	struct mc_proto_hdr hd;
	struct mc_buf b;
	int n = 0, c, used;
	uint64_t t0;

	(void)state;
	put_obj("", "e", 10, 8);
	server_start(1u << 20, 5000, 64, 0);
	used = open_fds();
	assert_true(used > 0 && used < 2000);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)used + 32;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	c = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(c >= 0);
	while (n < (int)MC_ARRAY_SIZE(fill) && (fill[n] = dup(c)) >= 0)
		n++;
	assert_int_equal(errno, EMFILE);
	sa.sin_port = htons(mc_offload_server_port(F.srv));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* the server cannot accept it: it pauses its listener instead of spinning */
	t0 = mc_now_ms();
	for (;;) {
		mc_offload_server_stats(F.srv, &st);
		if (st.accept_pauses)
			break;
		assert_true(mc_now_ms() - t0 < 3000);
		usleep(1000);
	}
	while (n)
		close(fill[--n]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	/* descriptors are back: the waiting connection is served */
	mc_buf_init(&b);
	assert_int_equal(mc_store_request_encode(&b, MC_STORE_RELEASE_OFFLOAD_BUFFER, 9,
						 &(struct mc_store_offload_rpc_release_req){77}),
			 MC_OK);
	assert_int_equal(mc_sock_write_full(c, b.data, b.len, mc_now_ms() + 3000), MC_OK);
	assert_int_equal(mc_sock_read_full(c, h, sizeof(h), mc_now_ms() + 3000), MC_OK);
	assert_int_equal(mc_proto_hdr_decode(h, 1u << 20, &hd), MC_OK);
	assert_int_equal(hd.req_id, 9);
	assert_int_equal(hd.status, MC_ERR_OBJECT_NOT_FOUND); /* no batch 77 */
	mc_buf_release(&b);
	close(c);
}

static void disk_keys_keep_tenants_apart(void **state)
{
	char out[MC_STORE_KEY_MAX + 8], big[MC_STORE_KEY_MAX + 1];
	const char *t, *k;
	size_t tl, kl, n;

	(void)state;
	n = mc_offload_disk_key("", 0, "key", 3, out, sizeof(out));
	assert_int_equal(n, 3);
	assert_memory_equal(out, "key", 3);
	assert_int_equal(mc_offload_disk_key("default", 7, "key", 3, out, sizeof(out)), 3);
	n = mc_offload_disk_key("ten", 3, "key", 3, out, sizeof(out));
	assert_int_equal(n, 9);
	assert_memory_equal(out,
			    "\x01"
			    "3:tenkey",
			    9);
	assert_true(mc_offload_disk_key_split(out, n, &t, &tl, &k, &kl));
	assert_int_equal(tl, 3);
	assert_memory_equal(t, "ten", 3);
	assert_int_equal(kl, 3);
	assert_memory_equal(k, "key", 3);
	/* a default-tenant key that starts with the mark is wrapped too */
	n = mc_offload_disk_key("", 0, "\x01x", 2, out, sizeof(out));
	assert_int_equal(n, 5);
	assert_true(mc_offload_disk_key_split(out, n, &t, &tl, &k, &kl));
	assert_int_equal(tl, 0);
	assert_int_equal(kl, 2);
	assert_memory_equal(k, "\x01x", 2);
	/* a tenant that looks like a prefix of another's key stays apart */
	assert_int_equal(mc_offload_disk_key("a", 1, "1:bc", 4, out, sizeof(out)), 8);
	assert_memory_equal(out,
			    "\x01"
			    "1:a1:bc",
			    8);
	n = mc_offload_disk_key("a1:b", 4, "c", 1, out, sizeof(out));
	assert_memory_equal(out,
			    "\x01"
			    "4:a1:bc",
			    8);
	/* refused: empty key, NUL, too long */
	assert_int_equal(mc_offload_disk_key("", 0, "", 0, out, sizeof(out)), 0);
	assert_int_equal(mc_offload_disk_key("", 0, "a\0b", 3, out, sizeof(out)), 0);
	assert_int_equal(mc_offload_disk_key("t\0", 2, "ab", 2, out, sizeof(out)), 0);
	memset(big, 'x', sizeof(big));
	assert_int_equal(mc_offload_disk_key("", 0, big, MC_STORE_KEY_MAX, out, sizeof(out)),
			 MC_STORE_KEY_MAX);
	assert_int_equal(mc_offload_disk_key("", 0, big, MC_STORE_KEY_MAX + 1, out, sizeof(out)),
			 0);
	/* mark, "1:", "t" and the key: 4096 bytes fit, 4097 do not */
	assert_int_equal(mc_offload_disk_key("t", 1, big, MC_STORE_KEY_MAX - 4, out, sizeof(out)),
			 MC_STORE_KEY_MAX);
	assert_int_equal(mc_offload_disk_key("t", 1, big, MC_STORE_KEY_MAX - 3, out, sizeof(out)),
			 0);
	assert_int_equal(mc_offload_disk_key("t", 1, "ab", 2, out, 4), 0); /* cap */
	/* splits that fail */
	assert_false(mc_offload_disk_key_split("\x01", 1, &t, &tl, &k, &kl));
	assert_false(mc_offload_disk_key_split("\x01"
					       "9:ab",
					       5, &t, &tl, &k, &kl));
	assert_false(mc_offload_disk_key_split("\x01"
					       "2:ab",
					       5, &t, &tl, &k, &kl));
	assert_false(mc_offload_disk_key_split("\x01"
					       "x:ab",
					       5, &t, &tl, &k, &kl));
}

static void settings_come_from_the_environment(void **state)
{
	struct mc_offload_config c;

	(void)state;
	mc_offload_config_init(&c);
	assert_int_equal(c.buffer_size, 1342177280ull);
	assert_int_equal(c.gc_ttl_ms, 5000);
	assert_int_equal(c.heartbeat_interval_s, 10);
	setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "64m", 1);
	setenv("MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS", "750", 1);
	setenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "2", 1);
	mc_offload_config_init(&c);
	assert_int_equal(c.buffer_size, 64ull << 20);
	assert_int_equal(c.gc_ttl_ms, 750);
	assert_int_equal(c.heartbeat_interval_s, 2);
	unsetenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES");
	unsetenv("MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS");
	unsetenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS");
}

/* With a cluster secret the server answers only readers that prove it;
 * one with another secret or none never reaches a handler. */
static void secret_guards_the_offload_rpc(void **state)
{
	struct mc_store_offload_rpc_item items[] = {ITEM("", "a", 1000)};
	struct mc_offload_server_stats st;
	struct mc_store_msg m;

	(void)state;
	put_obj("", "a", 1000, 1);
	setenv("MC_AUTH_SECRET", "offload-secret", 1);
	server_start(4u << 20, 5000, 64, 0);
	mc_offload_pool_free(F.pool);
	assert_int_equal(mc_offload_pool_new(2000, &F.pool), MC_OK);
	assert_int_equal(get(items, 1, &m), MC_OK);
	assert_int_equal(m.body.offload_rpc_get_resp.items[0].status, MC_OK);
	assert_int_equal(release(m.body.offload_rpc_get_resp.batch_id), MC_OK);
	mc_store_msg_release(&m);

	setenv("MC_AUTH_SECRET", "another", 1);
	mc_offload_pool_free(F.pool);
	assert_int_equal(mc_offload_pool_new(2000, &F.pool), MC_OK);
	assert_int_equal(get(items, 1, &m), MC_ERR_RPC_FAIL);
	unsetenv("MC_AUTH_SECRET");
	mc_offload_pool_free(F.pool);
	assert_int_equal(mc_offload_pool_new(2000, &F.pool), MC_OK);
	assert_int_not_equal(get(items, 1, &m), MC_OK);
	mc_offload_server_stats(F.srv, &st);
	assert_int_equal(st.batches, 1); /* only the authenticated request was served */
}

#define CASE(f, base) cmocka_unit_test_prestate_setup_teardown(f, fix_setup, fix_teardown, base)
#define CASES(base)                                                                                \
	CASE(objects_are_staged_and_read_back, base), CASE(a_small_buffer_serves_what_fits, base), \
		CASE(unreleased_batches_are_reclaimed, base),                                      \
		CASE(bad_frames_and_extra_connections_are_cut, base),                              \
		CASE(a_restarted_or_stopped_server, base),                                         \
		CASE(reader_reads_whole_objects_and_ranges, base),                                 \
		CASE(reader_asks_again_for_what_did_not_fit, base)

int main(void)
{
	static char on_disk[] = "/tmp", on_tmpfs[] = "/dev/shm";
	const struct CMUnitTest tests[] = {
		CASES(on_disk),
		CASES(on_tmpfs),
		cmocka_unit_test_setup_teardown(reader_fails_in_bounded_time_without_an_owner,
						fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(accept_pauses_when_descriptors_run_out, fix_setup,
						fix_teardown),
		cmocka_unit_test(disk_keys_keep_tenants_apart),
		cmocka_unit_test(settings_come_from_the_environment),
		cmocka_unit_test_prestate_setup_teardown(secret_guards_the_offload_rpc, fix_setup,
							 fix_teardown, on_disk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_shm.c - the same-host transport (transport/shm.c): its
 * request codec, two engines in one process (process_vm_* on our own pid
 * exercises the same kernel path as two processes), bounds checks, the
 * switch, the fallbacks to TCP, and a raw client that sends garbage.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "meta/desc.h"
#include "mooncake/te.h"
#include "support.h"
#include "te/engine.h"
#include "transport/shm.h"
#include "transport/transport.h"

#define BUF (16u << 20)

struct pair {
	struct mc_te *a, *b;
	char *abuf, *bbuf;
	mc_segment_id b_id;
};

static int setup_with(void **state, const char *uri, const char *a_env, const char *b_env)
{
	struct pair *p = calloc(1, sizeof(*p));
	if (a_env)
		setenv(a_env, "1", 1);
	p->a = mc_test_engine_new(uri, "shm-a");
	if (a_env)
		unsetenv(a_env);
	if (b_env)
		setenv(b_env, "1", 1);
	p->b = mc_test_engine_new(uri, "shm-b");
	if (b_env)
		unsetenv(b_env);
	assert_non_null(p->a);
	assert_non_null(p->b);
	p->abuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	p->bbuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_int_equal(mc_te_register(p->a, p->abuf, BUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_register(p->b, p->bbuf, BUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_open_segment(p->a, "shm-b", &p->b_id), MC_OK);
	*state = p;
	return 0;
}

static int setup_on(void **state)
{
	return setup_with(state, "mem://test_shm_on", NULL, NULL);
}

static int setup_busy_poll(void **state, const char *us)
{
	int rc;
	setenv("MC_SHM_BUSY_POLL_US", us, 1);
	rc = setup_on(state);
	unsetenv("MC_SHM_BUSY_POLL_US");
	return rc;
}

/* one second: far longer than any gap between two requests of the test */
static int setup_busy_poll_long(void **state)
{
	return setup_busy_poll(state, "1000000");
}

static int setup_busy_poll_off(void **state)
{
	return setup_busy_poll(state, "0");
}

static int setup_switch_off(void **state)
{
	return setup_with(state, "mem://test_shm_off", "MC_SHM_DISABLE", NULL);
}

static int setup_peer_incapable(void **state)
{
	return setup_with(state, "mem://test_shm_incapable", NULL, "MC_SHM_DISABLE");
}

static int teardown_pair(void **state)
{
	struct pair *p = *state;
	mc_te_free(p->a);
	mc_te_free(p->b);
	munmap(p->abuf, BUF);
	munmap(p->bbuf, BUF);
	free(p);
	return 0;
}

static int xfer(struct mc_te *te, int op, void *local, mc_segment_id seg, uint64_t addr,
		uint64_t len)
{
	struct mc_xfer_req r = {.opcode = op,
				.source = local,
				.target_id = seg,
				.target_offset = addr,
				.length = len};
	return mc_te_transfer_sync(te, &r, 1, 10000);
}

static uint64_t copied(struct mc_te *te)
{
	uint64_t c = 0;
	struct mc_transport *shm = mc_te_transport(te, "shm");
	if (shm)
		mc_shm_stats(shm, &c, NULL);
	return c;
}

/* The segment's peer if the same-host transport reaches it, else NULL. */
static struct mc_peer *seg_shm_peer(struct mc_te *te, mc_segment_id id)
{
	struct mc_peer *peer;
	pthread_rwlock_rdlock(&te->seg_lock);
	peer = te->segs[id]->peer;
	pthread_rwlock_unlock(&te->seg_lock);
	return peer && peer->tp->ops == &mc_shm_transport_ops ? peer : NULL;
}

/* Sizes 1 B .. 16 MiB - 64 at unaligned offsets, both directions, every byte checked. */
/* How often the same-host transport's threads (mc-shm-*) of this process
 * blocked so far: the sum of their voluntary context switches (a
 * sched_yield or a preemption is not counted there). */
static long shm_thread_sleeps(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	long sum = 0;
	int found = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[300], comm[32] = "", line[128];
		FILE *f;
		long v;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if (!(f = fopen(path, "r")))
			continue; /* the thread ended */
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
		if (strncmp(comm, "mc-shm-", 7) != 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
				sum += v;
		fclose(f);
		found++;
	}
	closedir(d);
	/* two engines: a receiver and MC_SHM_WORKERS workers each */
	assert_true(found >= 4);
	return sum;
}

static void roundtrip_sizes(struct pair *p)
{
	static const size_t sizes[] = {
		1, 2, 7, 4095, 4097, 65539, (1 << 20) - 1, 1 << 20, (3 << 20) + 5, (8 << 20) - 64};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i], loff = 3 + i, roff = 17 + 5 * i;
		char *back = p->abuf + (8 << 20) + 1;
		mc_test_fill(p->abuf + loff, len, i + 10);
		memset(p->bbuf, 0, len + roff + 64);
		assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf + loff, p->b_id,
				      (uint64_t)(uintptr_t)(p->bbuf + roff), len),
				 MC_OK);
		assert_memory_equal(p->abuf + loff, p->bbuf + roff, len);
		for (size_t g = 0; g < 64; g++) /* nothing past the range */
			assert_int_equal(p->bbuf[roff + len + g], 0);
		memset(back, 0, len);
		assert_int_equal(xfer(p->a, MC_OP_READ, back, p->b_id,
				      (uint64_t)(uintptr_t)(p->bbuf + roff), len),
				 MC_OK);
		assert_memory_equal(back, p->bbuf + roff, len);
	}
}

/* ---- codec -------------------------------------------------------------------- */

static void codec_roundtrip_and_rejects(void **state)
{
	struct mc_shm_req r = {.opcode = MC_SHM_OP_WRITE,
			       .id = 0x1122334455667788ull,
			       .local = 0x7f0000001000ull,
			       .remote = 0x7f0000802001ull,
			       .len = 12345},
			  d;
	uint8_t f[MC_SHM_REQ_LEN], bad[MC_SHM_REQ_LEN], resp[MC_SHM_RESP_LEN];
	const char *why = "x";
	uint64_t id;
	uint32_t st;
	(void)state;

	mc_shm_req_encode(&r, f);
	assert_int_equal(mc_shm_req_decode(f, &d, &why), MC_OK);
	assert_null(why);
	assert_int_equal(d.opcode, r.opcode);
	assert_true(d.id == r.id && d.local == r.local && d.remote == r.remote && d.len == r.len);

	memcpy(bad, f, sizeof(f));
	bad[0] ^= 1;
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);
	assert_string_equal(why, "bad magic");
	memcpy(bad, f, sizeof(f));
	bad[4] = 9;
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);
	memcpy(bad, f, sizeof(f));
	bad[7] = 1;
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);
	memcpy(bad, f, sizeof(f));
	bad[5] = 3;
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);
	assert_string_equal(why, "unknown opcode");

	r.len = 0;
	mc_shm_req_encode(&r, bad);
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);
	r.len = UINT64_MAX - 10;
	mc_shm_req_encode(&r, bad);
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);
	assert_string_equal(why, "range wraps around");
	r.len = 16;
	r.remote = UINT64_MAX - 8;
	mc_shm_req_encode(&r, bad);
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);
	r = (struct mc_shm_req){.opcode = MC_SHM_OP_HELLO, .local = 0x1000, .len = 2};
	mc_shm_req_encode(&r, bad);
	assert_int_equal(mc_shm_req_decode(bad, &d, &why), MC_ERR_PROTOCOL);

	mc_shm_resp_encode(77, MC_SHM_ST_REJECTED, resp);
	assert_int_equal(mc_shm_resp_decode(resp, &id, &st), MC_OK);
	assert_true(id == 77 && st == MC_SHM_ST_REJECTED);
	resp[1] ^= 0xff;
	assert_int_equal(mc_shm_resp_decode(resp, &id, &st), MC_ERR_PROTOCOL);
}

/* Regression: the receiver's timeout scan read the clock once, then looked
 * at each lane; a lane whose first request a submitter stamped in between
 * had progress later than "now", the unsigned difference was huge, and the
 * lane went down as "no progress within the i/o timeout" at once (test_engine
 * under load, 96 requests failed within seconds of a 30 s timeout). */
static void a_lane_stamped_after_the_clock_read_is_not_stuck(void **state)
{
	(void)state;
	assert_false(mc_shm_lane_stuck(1000, 1001, 5, 30000)); /* stamped later */
	assert_false(mc_shm_lane_stuck(1000, 1000, 5, 30000));
	assert_false(mc_shm_lane_stuck(31000, 1000, 5, 30000)); /* exactly the timeout */
	assert_true(mc_shm_lane_stuck(31001, 1000, 5, 30000));
	assert_false(mc_shm_lane_stuck(99999, 1000, 0, 30000)); /* nothing queued */
}

static void descriptor_field_is_optional(void **state)
{
	const char *without = "{\"name\":\"x\",\"protocol\":\"tcp\",\"tcp_data_port\":1,"
			      "\"buffers\":[]}";
	const char *with =
		"{\"name\":\"x\",\"protocol\":\"tcp\",\"tcp_data_port\":1,"
		"\"mc_host_id\":\"h\",\"mc_shm_ep\":\"mooncake-shm.1.ab\",\"buffers\":[]}";
	struct mc_seg_desc *d = NULL, *c = NULL;
	char *json = NULL;
	(void)state;

	assert_int_equal(mc_seg_desc_decode(without, strlen(without), &d), MC_OK);
	assert_null(d->shm_ep);
	mc_seg_desc_free(d);
	assert_int_equal(mc_seg_desc_decode(with, strlen(with), &d), MC_OK);
	assert_string_equal(d->shm_ep, "mooncake-shm.1.ab");
	assert_int_equal(mc_seg_desc_encode(d, &json), MC_OK);
	assert_non_null(strstr(json, "\"mc_shm_ep\":\"mooncake-shm.1.ab\""));
	assert_int_equal(mc_seg_desc_dup(d, &c), MC_OK);
	assert_string_equal(c->shm_ep, d->shm_ep);
	mc_free(json);
	mc_seg_desc_free(c);
	mc_seg_desc_free(d);
}

/* ---- engines ------------------------------------------------------------------- */

static void same_host_path_moves_every_byte(void **state)
{
	struct pair *p = *state;
	uint64_t before;
	assert_non_null(mc_te_transport(p->a, "shm"));
	assert_non_null(seg_shm_peer(p->a, p->b_id));
	before = copied(p->a);
	roundtrip_sizes(p);
	assert_true(copied(p->a) >= before + 20); /* the shm transport finished them */
}

static void many_requests_in_flight(void **state)
{
	struct pair *p = *state;
	enum { N = 1000 };
	struct mc_xfer_req *reqs = calloc(N, sizeof(*reqs));
	mc_batch_id b;
	struct mc_xfer_status st;
	size_t off = 0;

	mc_test_fill(p->abuf, 8 << 20, 5);
	for (size_t i = 0; i < N; i++) {
		size_t len = 1 + (i * 131) % 7000;
		reqs[i] = (struct mc_xfer_req){.opcode = MC_OP_WRITE,
					       .source = p->abuf + off,
					       .target_id = p->b_id,
					       .target_offset =
						       (uint64_t)(uintptr_t)(p->bbuf + off + 1),
					       .length = len};
		off += len + 1;
	}
	assert_int_equal(mc_te_batch_new(p->a, N, &b), MC_OK);
	assert_int_equal(mc_te_submit(p->a, b, reqs, N), MC_OK);
	assert_int_equal(mc_te_batch_wait(p->a, b, 10000, &st), MC_OK);
	assert_int_equal(st.state, MC_XFER_COMPLETED);
	assert_int_equal(mc_te_batch_free(p->a, b), MC_OK);
	for (size_t i = 0; i < N; i++)
		assert_memory_equal(reqs[i].source, (char *)(uintptr_t)reqs[i].target_offset,
				    reqs[i].length);
	free(reqs);
}

static void out_of_range_is_rejected_and_memory_untouched(void **state)
{
	struct pair *p = *state;
	uint64_t base = (uint64_t)(uintptr_t)p->bbuf;
	char *copy = malloc(BUF);
	memset(p->bbuf, 0x5a, BUF);
	memcpy(copy, p->bbuf, BUF);
	mc_test_fill(p->abuf, 8192, 99);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, base + BUF - 100, 8192),
			 MC_ERR_REMOTE_REJECTED);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, base - 10, 100),
			 MC_ERR_REMOTE_REJECTED);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, base + BUF, 1),
			 MC_ERR_REMOTE_REJECTED);
	assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf, p->b_id, base + BUF - 1, 2),
			 MC_ERR_REMOTE_REJECTED);
	/* our own address space is not the target's: unregistered there */
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, (uint64_t)(uintptr_t)copy, 64),
			 MC_ERR_REMOTE_REJECTED);
	assert_memory_equal(p->bbuf, copy, BUF);
	/* the path keeps working */
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, base + 1, 8192), MC_OK);
	assert_memory_equal(p->abuf, p->bbuf + 1, 8192);
	free(copy);
}

static void switch_off_uses_tcp(void **state)
{
	struct pair *p = *state;
	assert_null(mc_te_transport(p->a, "shm"));
	assert_null(seg_shm_peer(p->a, p->b_id));
	roundtrip_sizes(p);
}

static void peer_without_capability_uses_tcp(void **state)
{
	struct pair *p = *state;
	struct mc_seg_desc *d = NULL;
	assert_non_null(mc_te_transport(p->a, "shm"));
	assert_int_equal(mc_te_local_desc(p->b, &d), MC_OK);
	assert_null(d->shm_ep); /* not advertised */
	mc_seg_desc_free(d);
	assert_null(seg_shm_peer(p->a, p->b_id));
	roundtrip_sizes(p);
	assert_int_equal(copied(p->a), 0);
}

static void other_host_uses_tcp(void **state)
{
	struct pair *p = *state;
	mc_segment_id id;
	/* pretend the initiator boots elsewhere, then refetch the descriptor */
	snprintf(p->a->host_id, sizeof(p->a->host_id), "another-host");
	assert_int_equal(mc_te_reopen_segment(p->a, "shm-b", &id), MC_OK);
	assert_int_equal(id, p->b_id);
	assert_null(seg_shm_peer(p->a, id));
	roundtrip_sizes(p);
	assert_int_equal(copied(p->a), 0);
}

/* Connect to worker 0 of b's endpoint. */
static int raw_connect(struct pair *p)
{
	struct mc_seg_desc *d = NULL;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, n;
	assert_int_equal(mc_te_local_desc(p->b, &d), MC_OK);
	assert_non_null(d->shm_ep);
	n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s.0", d->shm_ep);
	mc_seg_desc_free(d);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(
		connect(fd, (struct sockaddr *)&sa,
			(socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)),
		0);
	return fd;
}

static bool closed_within(int fd, int ms)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	char c;
	return poll(&pf, 1, ms) == 1 && recv(fd, &c, 1, 0) == 0;
}

static void malformed_request_closes_connection(void **state)
{
	struct pair *p = *state;
	static const uint8_t probe = 1;
	struct mc_shm_req hello = {
		.opcode = MC_SHM_OP_HELLO, .local = (uint64_t)(uintptr_t)&probe, .len = 1};
	uint8_t f[MC_SHM_REQ_LEN], resp[MC_SHM_RESP_LEN];
	uint64_t id;
	uint32_t st;
	int fd = raw_connect(p);

	/* a hello is answered with the worker count */
	mc_shm_req_encode(&hello, f);
	assert_int_equal(send(fd, f, sizeof(f), 0), (ssize_t)sizeof(f));
	assert_int_equal(recv(fd, resp, sizeof(resp), MSG_WAITALL), (ssize_t)sizeof(resp));
	assert_int_equal(mc_shm_resp_decode(resp, &id, &st), MC_OK);
	assert_int_equal(st, MC_SHM_ST_OK);
	assert_int_equal(id, 2);
	/* garbage: the target closes the connection */
	memset(f, 0xee, sizeof(f));
	assert_int_equal(send(fd, f, sizeof(f), 0), (ssize_t)sizeof(f));
	assert_true(closed_within(fd, 5000));
	close(fd);

	/* a half frame followed by a hang-up is harmless too */
	fd = raw_connect(p);
	assert_int_equal(send(fd, f, 17, 0), 17);
	close(fd);

	/* and engines keep working */
	mc_test_fill(p->abuf, 4096, 3);
	assert_int_equal(
		xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, (uint64_t)(uintptr_t)p->bbuf + 5, 4096),
		MC_OK);
	assert_memory_equal(p->abuf, p->bbuf + 5, 4096);
}

/*
 * Many requests in one send: the target copies consecutive small ones of
 * one direction with one process_vm_* call (a run), yet checks each range,
 * answers each in order with its own status, and a failing one (the
 * initiator's page unmapped, the target range unregistered) neither stops
 * nor spoils its neighbours.
 */
static void requests_in_one_send_answered_in_order(void **state)
{
	struct pair *p = *state;
	enum { SMALL = 70, N = 7 + SMALL };
	uint64_t a = (uint64_t)(uintptr_t)p->abuf, b = (uint64_t)(uintptr_t)p->bbuf;
	/* a page no access may touch: PROT_NONE, not unmapped, so that no other
	 * mapping of this process (the sanitizers' own) can land there meanwhile */
	char *hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct mc_shm_req r[N] = {
		{MC_SHM_OP_WRITE, 0, a, b + 100, 4096},
		{MC_SHM_OP_WRITE, 0, (uint64_t)(uintptr_t)hole, b + 8192, 4096},
		{MC_SHM_OP_WRITE, 0, a, b + BUF - 10, 4096},
		{MC_SHM_OP_WRITE, 0, a + 4096, b + 16384, 300},
		{MC_SHM_OP_READ, 0, a + (1 << 20), b + 100, 4096},
		{MC_SHM_OP_WRITE, 0, a + (2 << 20), b + (4 << 20), 512 << 10},
		{MC_SHM_OP_READ, 0, a + (3 << 20), b + 16384, 300},
	};
	static const uint32_t want[7] = {MC_SHM_ST_OK, MC_SHM_ST_FAULT, MC_SHM_ST_REJECTED,
					 MC_SHM_ST_OK, MC_SHM_ST_OK,	MC_SHM_ST_OK,
					 MC_SHM_ST_OK};
	uint8_t *f = calloc(N, MC_SHM_REQ_LEN), resp[N * MC_SHM_RESP_LEN];
	int fd = raw_connect(p);

	assert_true(hole != MAP_FAILED);
	mc_test_fill(p->abuf, 4 << 20, 21);
	memset(p->bbuf, 0, 8 << 20);
	for (int i = 0; i < SMALL; i++) /* more than one run holds */
		r[7 + i] = (struct mc_shm_req){MC_SHM_OP_WRITE, 0, a + (5 << 20) + 64 * (uint64_t)i,
					       b + (6 << 20) + 64 * (uint64_t)i, 64};
	for (int i = 0; i < N; i++) {
		r[i].id = 1000 + (uint64_t)i;
		mc_shm_req_encode(&r[i], f + i * MC_SHM_REQ_LEN);
	}
	assert_int_equal(send(fd, f, N * MC_SHM_REQ_LEN, 0), (ssize_t)(N * MC_SHM_REQ_LEN));
	assert_int_equal(recv(fd, resp, sizeof(resp), MSG_WAITALL), (ssize_t)sizeof(resp));
	for (int i = 0; i < N; i++) {
		uint64_t id;
		uint32_t st;
		assert_int_equal(mc_shm_resp_decode(resp + i * MC_SHM_RESP_LEN, &id, &st), MC_OK);
		assert_int_equal(id, 1000 + (uint64_t)i);
		assert_int_equal(st, i < 7 ? want[i] : MC_SHM_ST_OK);
	}
	assert_memory_equal(p->bbuf + 100, p->abuf, 4096);
	for (int g = 0; g < 4096; g++) /* the failed ones wrote nothing */
		assert_int_equal(p->bbuf[8192 + g], 0);
	assert_memory_equal(p->bbuf + 16384, p->abuf + 4096, 300);
	assert_memory_equal(p->abuf + (1 << 20), p->abuf, 4096); /* read back */
	assert_memory_equal(p->bbuf + (4 << 20), p->abuf + (2 << 20), 512 << 10);
	assert_memory_equal(p->abuf + (3 << 20), p->abuf + 4096, 300);
	assert_memory_equal(p->bbuf + (6 << 20), p->abuf + (5 << 20), 64 * SMALL);
	close(fd);
	free(f);
	munmap(hole, 4096);
}

/* n one-key writes of 4 KiB back to back; returns the blocks of the
 * same-host threads meanwhile */
static long sleeps_over_small_writes(struct pair *p, int n)
{
	long before;
	mc_test_fill(p->abuf, 4096, 9);
	/* the first connects the lanes and wakes every thread once */
	assert_int_equal(
		xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, (uint64_t)(uintptr_t)p->bbuf, 4096),
		MC_OK);
	before = shm_thread_sleeps();
	for (int i = 0; i < n; i++)
		assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id,
				      (uint64_t)(uintptr_t)p->bbuf + 4096 * (uint64_t)(i % 64),
				      4096),
				 MC_OK);
	assert_memory_equal(p->abuf, p->bbuf + 4096 * ((n - 1) % 64), 4096);
	return shm_thread_sleeps() - before;
}

/* Back-to-back small requests find the target's worker and the initiator's
 * receiver awake (MC_SHM_BUSY_POLL_US): neither sleeps per request, where
 * each wake-up costs more than the copy. */
static void busy_poll_keeps_threads_awake(void **state)
{
	enum { N = 200 };
	long sleeps = sleeps_over_small_writes(*state, N);
	assert_true(copied(((struct pair *)*state)->a) >= N);
	if (sleeps >= N / 4)
		fail_msg("same-host threads blocked %ld times over %d requests", sleeps, N);
}

/* ... and with it 0 they sleep between requests: the receiver at least
 * once per answer (the counter above does count blocking) */
static void no_busy_poll_sleeps_per_request(void **state)
{
	enum { N = 200 };
	long sleeps = sleeps_over_small_writes(*state, N);
	if (sleeps < N / 2)
		fail_msg("same-host threads blocked only %ld times over %d requests", sleeps, N);
}

static void deregistration_waits_for_copies(void **state)
{
	struct pair *p = *state;
	/* a second region on b, written in a loop while it is deregistered:
	 * every write either completes or is rejected, and none crashes */
	size_t len = 4 << 20;
	char *extra = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mc_batch_id b;
	struct mc_xfer_req reqs[8];
	assert_int_equal(mc_te_register(p->b, extra, len, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_reopen_segment(p->a, "shm-b", &p->b_id), MC_OK);
	for (int i = 0; i < 8; i++)
		reqs[i] = (struct mc_xfer_req){.opcode = MC_OP_WRITE,
					       .source = p->abuf,
					       .target_id = p->b_id,
					       .target_offset = (uint64_t)(uintptr_t)extra +
								(uint64_t)i * (len / 8),
					       .length = len / 8};
	assert_int_equal(mc_te_batch_new(p->a, 8, &b), MC_OK);
	assert_int_equal(mc_te_submit(p->a, b, reqs, 8), MC_OK);
	assert_int_equal(mc_te_deregister(p->b, extra), MC_OK);
	munmap(extra, len); /* safe: deregistration waited for in-flight copies */
	mc_te_batch_wait(p->a, b, 10000, NULL);
	assert_int_equal(mc_te_batch_free(p->a, b), MC_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(codec_roundtrip_and_rejects),
		cmocka_unit_test(descriptor_field_is_optional),
		cmocka_unit_test(a_lane_stamped_after_the_clock_read_is_not_stuck),
		cmocka_unit_test_setup_teardown(same_host_path_moves_every_byte, setup_on,
						teardown_pair),
		cmocka_unit_test_setup_teardown(many_requests_in_flight, setup_on, teardown_pair),
		cmocka_unit_test_setup_teardown(out_of_range_is_rejected_and_memory_untouched,
						setup_on, teardown_pair),
		cmocka_unit_test_setup_teardown(switch_off_uses_tcp, setup_switch_off,
						teardown_pair),
		cmocka_unit_test_setup_teardown(peer_without_capability_uses_tcp,
						setup_peer_incapable, teardown_pair),
		cmocka_unit_test_setup_teardown(other_host_uses_tcp, setup_on, teardown_pair),
		cmocka_unit_test_setup_teardown(malformed_request_closes_connection, setup_on,
						teardown_pair),
		cmocka_unit_test_setup_teardown(deregistration_waits_for_copies, setup_on,
						teardown_pair),
		cmocka_unit_test_setup_teardown(requests_in_one_send_answered_in_order, setup_on,
						teardown_pair),
		cmocka_unit_test_setup_teardown(busy_poll_keeps_threads_awake, setup_busy_poll_long,
						teardown_pair),
		cmocka_unit_test_setup_teardown(no_busy_poll_sleeps_per_request,
						setup_busy_poll_off, teardown_pair),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

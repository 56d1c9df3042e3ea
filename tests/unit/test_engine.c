/*
 * tests/unit/test_engine.c - two engines in one process over loopback TCP
 * (in-process metadata and P2P), plus the local path and the API's checks.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/xsum.h"
#include "meta/desc.h"
#include "meta/meta.h"
#include "mooncake/te.h"
#include "slow_mem.h"
#include "support.h"
#include "te/batch.h"
#include "te/engine.h"
#include "transport/tcp.h"
#include "transport/transport.h"

#define BUF (8u << 20)

struct pair {
	struct mc_te *a, *b;
	char *abuf, *bbuf;
	char *scratch; /* a page registered with a only, not remotely accessible */
	mc_segment_id b_id;
};

/* Local buffers of a request must be registered with its engine: register
 * a test's own buffer for local use only (not published). */
static void reg_local(struct mc_te *te, void *buf, size_t len)
{
	assert_int_equal(mc_te_register(te, buf, len, "cpu:0", false), MC_OK);
}

static void unreg_local(struct mc_te *te, void *buf)
{
	assert_int_equal(mc_te_deregister(te, buf), MC_OK);
}

static struct mc_te *new_engine(const char *uri, const char *name)
{
	struct mc_te *te = mc_test_engine_new(uri, name);
	assert_non_null(te);
	return te;
}

static int setup_pair(void **state, const char *uri)
{
	struct pair *p = calloc(1, sizeof(*p));
	p->a = new_engine(uri, "127.0.0.1");
	p->b = new_engine(uri, strcmp(uri, "P2PHANDSHAKE") ? "engine-b" : "127.0.0.1");
	p->abuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	p->bbuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_int_equal(mc_te_register(p->a, p->abuf, BUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_register(p->b, p->bbuf, BUF, "cpu:0", true), MC_OK);
	p->scratch = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	reg_local(p->a, p->scratch, 4096);
	assert_int_equal(mc_te_open_segment(p->a, mc_te_local_name(p->b), &p->b_id), MC_OK);
	assert_true(p->b_id != MC_LOCAL_SEGMENT);
	*state = p;
	return 0;
}

static int setup_mem(void **state)
{
	return setup_pair(state, "mem://test_engine");
}

static int setup_p2p(void **state)
{
	return setup_pair(state, "P2PHANDSHAKE");
}

/* setup_pair with env (NULL-terminated name/value pairs) set while the
 * engines are created.  MC_SHM_DISABLE keeps same-host engines on TCP. */
static int setup_pair_env(void **state, const char *uri, const char *const *env)
{
	int rc;
	for (size_t i = 0; env[i]; i += 2)
		setenv(env[i], env[i + 1], 1);
	rc = setup_pair(state, uri);
	for (size_t i = 0; env[i]; i += 2)
		unsetenv(env[i]);
	return rc;
}

/* Both engines speak upstream's legacy v1 framing as initiators. */
static int setup_v1(void **state)
{
	static const char *const env[] = {
		"MC_TCP_PROTO", "1", "MC_TCP_LANES_PER_PEER", "1", "MC_SHM_DISABLE", "1", NULL};
	return setup_pair_env(state, "mem://test_engine_v1", env);
}

static int teardown_pair(void **state)
{
	struct pair *p = *state;
	mc_te_free(p->a);
	mc_te_free(p->b);
	munmap(p->abuf, BUF);
	munmap(p->bbuf, BUF);
	munmap(p->scratch, 4096);
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

/* Upstream's v1 framing reports a write complete once it left the
 * initiator, before the target stored it.  A read on the same connection is
 * answered only after every earlier request was applied, so it fences the
 * writes (the v1 setup uses one connection per peer). */
static void fence(struct pair *p)
{
	assert_int_equal(
		xfer(p->a, MC_OP_READ, p->scratch, p->b_id, (uint64_t)(uintptr_t)p->bbuf, 1),
		MC_OK);
}

static void write_read_roundtrip_sizes(void **state)
{
	struct pair *p = *state;
	static const size_t sizes[] = {1, 7, 4095, 65539, 1 << 20, (4 << 20) + 1};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i], loff = 3 + i, roff = 11 + 2 * i;
		mc_test_fill(p->abuf + loff, len, i + 1);
		memset(p->bbuf, 0, len + roff + 16);
		assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf + loff, p->b_id,
				      (uint64_t)(uintptr_t)(p->bbuf + roff), len),
				 MC_OK);
		fence(p);
		assert_memory_equal(p->abuf + loff, p->bbuf + roff, len);
		memset(p->abuf + (4 << 20) - 1, 0, len);
		assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf + (4 << 20) - 1, p->b_id,
				      (uint64_t)(uintptr_t)(p->bbuf + roff), len),
				 MC_OK);
		assert_memory_equal(p->abuf + (4 << 20) - 1, p->bbuf + roff, len);
	}
}

static void out_of_range_write_is_rejected_and_memory_untouched(void **state)
{
	struct pair *p = *state;
	uint64_t base = (uint64_t)(uintptr_t)p->bbuf;
	char *copy = malloc(BUF);
	memset(p->bbuf, 0x5a, BUF);
	memcpy(copy, p->bbuf, BUF);
	mc_test_fill(p->abuf, 8192, 99);
	/* straddles the end */
	assert_int_not_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, base + BUF - 100, 8192),
			     MC_OK);
	/* just past the end */
	assert_int_not_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, base + BUF, 1), MC_OK);
	/* address 0 */
	assert_int_not_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, 0, 16), MC_OK);
	/* read from unregistered memory */
	assert_int_not_equal(xfer(p->a, MC_OP_READ, p->abuf, p->b_id, base - 4096, 16), MC_OK);
	assert_memory_equal(copy, p->bbuf, BUF);
	/* the target still serves */
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, base + 64, 8192), MC_OK);
	assert_memory_equal(p->abuf, p->bbuf + 64, 8192);
	free(copy);
}

static void batch_of_mixed_requests(void **state)
{
	struct pair *p = *state;
	struct mc_xfer_req reqs[128];
	struct mc_xfer_status st;
	mc_batch_id id;
	size_t chunk = BUF / 128;

	mc_test_fill(p->abuf, BUF, 7);
	mc_test_fill(p->bbuf, BUF, 8);
	for (int i = 0; i < 128; i++) {
		reqs[i].opcode = i % 2 ? MC_OP_READ : MC_OP_WRITE;
		reqs[i].source = p->abuf + i * chunk;
		reqs[i].target_id = p->b_id;
		reqs[i].target_offset = (uint64_t)(uintptr_t)(p->bbuf + i * chunk);
		reqs[i].length = chunk - (size_t)i;
	}
	assert_int_equal(mc_te_batch_new(p->a, 128, &id), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, reqs, 128), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, reqs, 1), MC_ERR_TOO_MANY_REQUESTS);
	assert_int_equal(mc_te_batch_wait(p->a, id, 10000, &st), MC_OK);
	assert_int_equal(st.state, MC_XFER_COMPLETED);
	fence(p);
	for (int i = 0; i < 128; i++) {
		struct mc_xfer_status ts;
		assert_int_equal(mc_te_task_status(p->a, id, (size_t)i, &ts), MC_OK);
		assert_int_equal(ts.state, MC_XFER_COMPLETED);
		assert_memory_equal(p->abuf + i * chunk, p->bbuf + i * chunk, chunk - (size_t)i);
	}
	assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);
	assert_int_equal(mc_te_batch_free(p->a, id), MC_ERR_BATCH_NOT_FOUND);
	assert_int_equal(mc_te_submit(p->a, 12345, reqs, 1), MC_ERR_BATCH_NOT_FOUND);
}

/*
 * mc_te_batch_on_task_end (the store hashes read bytes there): the callback
 * runs once per task, with the task's status, after a read's bytes have
 * landed and before mc_te_batch_wait returns; it is refused once the batch
 * has tasks.
 */
struct ends {
	const struct mc_xfer_req *reqs;
	atomic_uint calls[8];
	atomic_int status[8];
	atomic_bool landed[8]; /* the bytes were in place when it ran */
};

static void on_end(void *arg, size_t k, mc_status status)
{
	struct ends *e = arg;
	const struct mc_xfer_req *r = &e->reqs[k];

	atomic_fetch_add(&e->calls[k], 1);
	atomic_store(&e->status[k], status);
	atomic_store(&e->landed[k],
		     status == MC_OK && memcmp(r->source, (void *)(uintptr_t)r->target_offset,
					       r->length) == 0);
}

static void task_end_callback_runs_before_the_wait_returns(void **state)
{
	struct pair *p = *state;
	uint64_t base = (uint64_t)(uintptr_t)p->bbuf;
	/* one byte, a page, more than a slice, 3 MiB, nothing */
	static const uint64_t lens[5] = {1, 4096, (1 << 20) + 7, 3 << 20, 0};
	struct mc_xfer_req reqs[5];
	struct ends e = {.reqs = reqs};
	struct mc_xfer_status st;
	mc_batch_id id;
	uint64_t off = 0;

	mc_test_fill(p->bbuf, BUF, 41);
	memset(p->abuf, 0, BUF);
	for (int i = 0; i < 5; i++) {
		reqs[i] = (struct mc_xfer_req){.opcode = MC_OP_READ,
					       .source = p->abuf + off,
					       .target_id = p->b_id,
					       .target_offset = base + off,
					       .length = lens[i]};
		off += lens[i] + 64;
	}
	assert_int_equal(mc_te_batch_new(p->a, 5, &id), MC_OK);
	assert_int_equal(mc_te_batch_on_task_end(p->a, id, on_end, &e), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, reqs, 5), MC_OK);
	assert_int_equal(mc_te_batch_on_task_end(p->a, id, on_end, &e), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_te_batch_wait(p->a, id, 10000, &st), MC_OK);
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(atomic_load(&e.calls[i]), 1);
		assert_int_equal(atomic_load(&e.status[i]), MC_OK);
		assert_true(atomic_load(&e.landed[i]));
	}
	assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);
	assert_int_equal(mc_te_batch_on_task_end(p->a, id, on_end, &e), MC_ERR_BATCH_NOT_FOUND);

	/* a read the target refuses: its status, once */
	memset(&e, 0, sizeof(e));
	e.reqs = reqs;
	reqs[0].target_offset = base + BUF;
	reqs[0].length = 16;
	assert_int_equal(mc_te_batch_new(p->a, 1, &id), MC_OK);
	assert_int_equal(mc_te_batch_on_task_end(p->a, id, on_end, &e), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, reqs, 1), MC_OK);
	(void)mc_te_batch_wait(p->a, id, 10000, &st);
	assert_int_equal(st.state, MC_XFER_FAILED);
	assert_int_equal(atomic_load(&e.calls[0]), 1);
	assert_int_equal(atomic_load(&e.status[0]), st.error);
	assert_int_not_equal(st.error, MC_OK);
	assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);
}

static void local_segment_copies_and_checks_bounds(void **state)
{
	struct pair *p = *state;
	uint64_t base = (uint64_t)(uintptr_t)p->abuf;
	char src[1000];
	mc_test_fill(src, sizeof(src), 3);
	reg_local(p->a, src, sizeof(src));
	assert_int_equal(xfer(p->a, MC_OP_WRITE, src, MC_LOCAL_SEGMENT, base + 5, sizeof(src)),
			 MC_OK);
	assert_memory_equal(src, p->abuf + 5, sizeof(src));
	assert_int_equal(xfer(p->a, MC_OP_WRITE, src, MC_LOCAL_SEGMENT, base + BUF - 10, 100),
			 MC_ERR_ADDRESS_NOT_REGISTERED);
	/* large: goes through the copy pool */
	mc_test_fill(p->abuf, 4 << 20, 5);
	reg_local(p->a, p->bbuf, BUF);
	assert_int_equal(xfer(p->a, MC_OP_READ, p->bbuf, MC_LOCAL_SEGMENT, base, 8 << 20), MC_OK);
	assert_memory_equal(p->bbuf, p->abuf, 8 << 20);
	unreg_local(p->a, p->bbuf);
	unreg_local(p->a, src);
}

/* The local side of a request must lie inside one registered range: a
 * length past the buffer, a wild pointer or unregistered memory is refused
 * before any byte moves, and neither side's memory changes. */
static void local_ranges_must_be_registered(void **state)
{
	struct pair *p = *state;
	uint64_t dst = (uint64_t)(uintptr_t)p->bbuf;
	char *heap = malloc(4096);
	struct mc_xfer_req two[2] = {
		{.opcode = MC_OP_WRITE,
		 .source = p->abuf,
		 .target_id = p->b_id,
		 .target_offset = dst,
		 .length = 64},
		{.opcode = MC_OP_WRITE,
		 .source = p->abuf + BUF - 8,
		 .target_id = p->b_id,
		 .target_offset = dst + 64,
		 .length = 64},
	};

	memset(p->abuf, 0x11, BUF);
	memset(p->bbuf, 0x22, 4096);
	/* past the end of the registered buffer, both directions */
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf + BUF - 8, p->b_id, dst, 64),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "registered"));
	assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf + BUF - 8, p->b_id, dst, 64),
			 MC_ERR_INVALID_PARAMS);
	/* a wild pointer and unregistered memory */
	assert_int_equal(xfer(p->a, MC_OP_READ, (void *)(uintptr_t)0x10, p->b_id, dst, 64),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(xfer(p->a, MC_OP_READ, heap, p->b_id, dst, 64), MC_ERR_INVALID_PARAMS);
	assert_int_equal(xfer(p->a, MC_OP_READ, (void *)(uintptr_t)0x10, MC_LOCAL_SEGMENT,
			      (uint64_t)(uintptr_t)p->abuf, 64),
			 MC_ERR_INVALID_PARAMS);
	/* one bad request fails the whole submit: the good one did not start */
	assert_int_equal(mc_te_transfer_sync(p->a, two, 2, 10000), MC_ERR_INVALID_PARAMS);
	for (int i = 0; i < 4096; i++)
		assert_int_equal((unsigned char)p->bbuf[i], 0x22);
	for (size_t i = BUF - 64; i < BUF; i++)
		assert_int_equal((unsigned char)p->abuf[i], 0x11);
	/* and the same ranges once registered */
	reg_local(p->a, heap, 4096);
	assert_int_equal(xfer(p->a, MC_OP_READ, heap, p->b_id, dst, 64), MC_OK);
	assert_int_equal((unsigned char)heap[63], 0x22);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf + BUF - 64, p->b_id, dst, 64), MC_OK);
	unreg_local(p->a, heap);
	free(heap);
}

/* The registrations that need page 1 of m to be a hole: alone, as part of a
 * range, and in a batch whose other entry is good (all or nothing).  Any
 * allocation in this process (malloc, a sanitizer's own) may place a new
 * one-page mapping into that hole at any time, the kernel's first choice
 * for it: then the results mean nothing, and this returns false with
 * anything registered by it undone. */
static bool refuses_the_hole(struct pair *p, char *m, size_t pg)
{
	struct mc_te_buffer both[2] = {{.addr = m, .length = pg}, {.addr = m + pg, .length = pg}};
	mc_status alone, range, batch, left;
	bool named;

	alone = mc_te_register(p->a, m + pg, pg, "cpu:0", true);
	named = strstr(mc_last_error(), "not mapped") != NULL;
	range = mc_te_register(p->a, m, 2 * pg, "cpu:0", true);
	batch = mc_te_register_batch(p->a, both, 2, "cpu:0");
	left = mc_te_deregister(p->a, m);
	if (msync(m + pg, pg, MS_ASYNC) == 0) { /* mapped now: not ours */
		mc_te_deregister(p->a, m + pg);
		return false;
	}
	assert_int_equal(alone, MC_ERR_INVALID_PARAMS);
	assert_true(named);
	assert_int_equal(range, MC_ERR_INVALID_PARAMS);
	assert_int_equal(batch, MC_ERR_INVALID_PARAMS);
	assert_int_equal(left, MC_ERR_ADDRESS_NOT_REGISTERED); /* the good entry went too */
	return true;
}

/* Registration refuses host memory the process cannot read and write in
 * every page: a hole, a read-only page, a PROT_NONE guard page.
 * Regression: under ASan with detect_stack_use_after_return (CI's options)
 * the hole was filled by the sanitizer's own mapping in about one run of
 * ten, and the hole's refusals failed; such a run is now tried again. */
static void registration_refuses_unmapped_memory(void **state)
{
	struct pair *p = *state;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	char *m = MAP_FAILED;
	int tries;
	mc_status rc;

	for (tries = 0; tries < 8; tries++) {
		m = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		assert_true(m != MAP_FAILED);
		assert_int_equal(munmap(m + pg, pg), 0); /* a hole in the middle */
		assert_int_equal(mprotect(m + 2 * pg, pg, PROT_READ), 0);
		assert_int_equal(mprotect(m + 3 * pg, pg, PROT_NONE), 0);
		if (refuses_the_hole(p, m, pg))
			break;
		munmap(m, pg); /* page 1 belongs to someone else now */
		munmap(m + 2 * pg, 2 * pg);
	}
	assert_true(tries < 8);
	assert_int_equal(mc_te_register(p->a, m + 2 * pg, pg, "cpu:0", true),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "writable"));
	assert_int_equal(mc_te_register(p->a, m + 3 * pg, 1, "cpu:0", false),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_te_register(p->a, (void *)(uintptr_t)0x10, 4096, "cpu:0", true),
			 MC_ERR_INVALID_PARAMS);
	/* a good range still registers */
	rc = mc_te_register(p->a, m, pg, "cpu:0", true);
	if (rc != MC_OK)
		print_error("good range refused: %s\n", mc_last_error());
	assert_int_equal(rc, MC_OK);
	assert_int_equal(mc_te_deregister(p->a, m), MC_OK);
	munmap(m, pg);
	munmap(m + 2 * pg, 2 * pg);
}

static void notify_and_probe(void **state)
{
	struct pair *p = *state;
	struct mc_te_notify *list;
	size_t n;
	assert_int_equal(mc_te_notify_send(p->a, p->b_id, "kv", "done:1"), MC_OK);
	assert_int_equal(mc_te_notify_recv(p->b, &list, &n), MC_OK);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].name, "kv");
	assert_string_equal(list[0].msg, "done:1");
	mc_te_notify_free(list, n);
	assert_int_equal(mc_te_notify_recv(p->b, &list, &n), MC_OK);
	assert_int_equal(n, 0);
	assert_int_equal(mc_te_probe(p->a, mc_te_local_name(p->b)), MC_OK);
}

/* mc_te_probe_within: a listener that accepts but never answers is given up
 * on after the caller's bound, not the handshake timeout (5 s here). */
static void probe_within_is_bounded(void **state)
{
	struct pair *p = *state;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	char name[64];
	struct timespec t0, t1;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	long ms;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4), 0); /* the kernel accepts; nobody answers */
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(name, sizeof(name), "127.0.0.1:%u", ntohs(sa.sin_port));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_not_equal(mc_te_probe_within(p->a, name, 200), MC_OK);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms < 4000); /* 200 ms, with a loaded machine's slack; not 5 s */
	assert_int_equal(mc_te_probe_within(p->a, mc_te_local_name(p->b), 1000), MC_OK);
	close(fd);
}

static void registration_rules(void **state)
{
	struct pair *p = *state;
	assert_int_equal(mc_te_register(p->a, p->abuf + 10, 10, "cpu:0", true),
			 MC_ERR_ADDRESS_OVERLAPPED);
	assert_int_equal(mc_te_register(p->a, NULL, 10, "cpu:0", true), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_te_register(p->a, p->abuf, 0, "cpu:0", true), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_te_deregister(p->a, p->abuf + 1), MC_ERR_ADDRESS_NOT_REGISTERED);
}

static void unknown_segment_fails_fast(void **state)
{
	struct pair *p = *state;
	mc_segment_id id;
	assert_int_not_equal(mc_te_open_segment(p->a, "no-such-engine:1", &id), MC_OK);
}

static void malformed_descriptor_is_reported_with_its_name(void **state)
{
	struct pair *p = *state;
	struct mc_meta *m;
	char *k1 = mc_meta_key_rpc("bogus-seg"), *k2 = mc_meta_key_segment("bogus-seg");
	const char *rpc = "{\"ip_or_host_name\":\"127.0.0.1\",\"rpc_port\":1}";
	const char *bad =
		"{\"name\":\"bogus-seg\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"x\","
		"\"addr\":0,\"length\":5}]}";
	mc_segment_id id;

	assert_int_equal(mc_meta_open("mem://test_engine", &m), MC_OK);
	assert_int_equal(mc_meta_put(m, k1, rpc, strlen(rpc)), MC_OK);
	assert_int_equal(mc_meta_put(m, k2, bad, strlen(bad)), MC_OK);
	assert_int_equal(mc_te_open_segment(p->a, "bogus-seg", &id), MC_ERR_MALFORMED_JSON);
	assert_non_null(strstr(mc_last_error(), "bogus-seg"));
	/* the engine keeps working with good segments */
	assert_int_equal(mc_te_probe(p->a, mc_te_local_name(p->b)), MC_OK);
	mc_meta_del(m, k1);
	mc_meta_del(m, k2);
	mc_meta_close(m);
	free(k1);
	free(k2);
}

/* Regression: with more read data queued than the server's output high
 * water mark, requests parked in its staging buffer were never resumed once
 * the socket drained within the same call, and the batch hung. */
static void many_large_reads_in_flight_complete(void **state)
{
	struct pair *p = *state;
	enum { N = 96, BLK = 1 << 20 };
	char *local = malloc((size_t)N * BLK);
	struct mc_xfer_req reqs[N];
	struct mc_xfer_status st;
	mc_batch_id id;

	reg_local(p->a, local, (size_t)N * BLK);

	mc_test_fill(p->bbuf, BUF, 21);
	for (int i = 0; i < N; i++) {
		reqs[i].opcode = MC_OP_READ;
		reqs[i].source = local + (size_t)i * BLK;
		reqs[i].target_id = p->b_id;
		reqs[i].target_offset = (uint64_t)(uintptr_t)(p->bbuf + (size_t)(i % 8) * BLK);
		reqs[i].length = BLK;
	}
	assert_int_equal(mc_te_batch_new(p->a, N, &id), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, reqs, N), MC_OK);
	assert_int_equal(mc_te_batch_wait(p->a, id, 20000, &st), MC_OK);
	for (int i = 0; i < N; i++)
		assert_memory_equal(local + (size_t)i * BLK, p->bbuf + (size_t)(i % 8) * BLK, BLK);
	assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);
	unreg_local(p->a, local);
	free(local);
}

/* TCP only, one connection per peer. */
static int setup_one_lane(void **state)
{
	static const char *const env[] = {"MC_SHM_DISABLE", "1", "MC_TCP_LANES_PER_PEER", "1",
					  NULL};
	return setup_pair_env(state, "mem://test_engine_one_lane", env);
}

/* TCP only, 2 workers and 4 connections per peer on both sides. */
static int setup_tcp_lanes(void **state)
{
	static const char *const env[] = {
		"MC_SHM_DISABLE", "1", "MC_TCP_WORKERS", "2", "MC_TCP_LANES_PER_PEER", "4", NULL};
	return setup_pair_env(state, "mem://test_engine_lanes", env);
}

/* The same with MC_TCP_LANE_FILL=128k (off by default). */
static int setup_tcp_lanes_fill(void **state)
{
	static const char *const env[] = {"MC_SHM_DISABLE",
					  "1",
					  "MC_TCP_WORKERS",
					  "2",
					  "MC_TCP_LANES_PER_PEER",
					  "4",
					  "MC_TCP_LANE_FILL",
					  "128k",
					  NULL};
	return setup_pair_env(state, "mem://test_engine_lanes_fill", env);
}

/* Regression: the target's worker that woke first accepted a peer's whole
 * burst of connections, so one core did all the receiving for that peer.
 * One 1 MiB write opens all 4 lanes at once; the target deals them out. */
static void accepted_connections_are_spread_over_workers(void **state)
{
	struct pair *p = *state;
	struct mc_te *b = p->b;
	char *src = malloc(1 << 20);
	struct mc_xfer_req req = {.opcode = MC_OP_WRITE,
				  .source = src,
				  .target_id = p->b_id,
				  .target_offset = (uint64_t)(uintptr_t)p->bbuf,
				  .length = 1 << 20};

	mc_test_fill(src, 1 << 20, 5);
	reg_local(p->a, src, 1 << 20);
	assert_int_equal(mc_te_transfer_sync(p->a, &req, 1, 20000), MC_OK);
	assert_memory_equal(p->bbuf, src, 1 << 20);
	/* every slice was served, so every connection was adopted */
	assert_int_equal(mc_tcp_worker_sconns(mc_te_transport(b, "tcp"), 0), 2);
	assert_int_equal(mc_tcp_worker_sconns(mc_te_transport(b, "tcp"), 1), 2);
	unreg_local(p->a, src);
	free(src);
}

static unsigned target_sconns(struct pair *p)
{
	struct mc_transport *tp = mc_te_transport(p->b, "tcp");

	return mc_tcp_worker_sconns(tp, 0) + mc_tcp_worker_sconns(tp, 1);
}

/* A value of big bytes and its small trailer right after it, written from
 * src to the start of b's buffer: the two requests of a store put. */
static void value_and_trailer(const struct pair *p, char *src, size_t big, size_t small,
			      struct mc_xfer_req req[2])
{
	uint64_t at = (uint64_t)(uintptr_t)p->bbuf;

	req[0] = (struct mc_xfer_req){.opcode = MC_OP_WRITE,
				      .source = src,
				      .target_id = p->b_id,
				      .target_offset = at,
				      .length = big};
	req[1] = (struct mc_xfer_req){.opcode = MC_OP_WRITE,
				      .source = src + big,
				      .target_id = p->b_id,
				      .target_offset = at + big,
				      .length = small};
}

/* A small request of the batch whose slice was dealt last goes on that
 * slice's connection (the store's 32-byte trailer beside its 64 KiB value),
 * whether it comes in the same submit or the next one; one of another batch,
 * or a large one, takes the next lane.  Each lane opens its own connection
 * on first use, so the target's count of connections tells the lanes used. */
static void a_small_slice_rides_its_batchs_lane(void **state)
{
	struct pair *p = *state;
	const size_t big = 64 << 10;
	char *src = malloc(2 * big);
	struct mc_xfer_req req[2];
	mc_batch_id id;

	value_and_trailer(p, src, big, 32, req);
	mc_test_fill(src, 2 * big, 9);
	reg_local(p->a, src, 2 * big);
	/* value and trailer in one submit: one lane */
	assert_int_equal(mc_te_transfer_sync(p->a, req, 2, 20000), MC_OK);
	assert_int_equal(target_sconns(p), 1);
	/* the value, then the trailer in a second submit of the same batch */
	assert_int_equal(mc_te_batch_new(p->a, 2, &id), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, &req[0], 1), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, &req[1], 1), MC_OK);
	assert_int_equal(mc_te_batch_wait(p->a, id, 20000, NULL), MC_OK);
	assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);
	assert_int_equal(target_sconns(p), 2);
	/* a small request alone, of a new batch: dealt, a third lane */
	assert_int_equal(mc_te_transfer_sync(p->a, &req[1], 1, 20000), MC_OK);
	assert_int_equal(target_sconns(p), 3);
	/* two large ones of one batch: dealt, the fourth lane and the first */
	req[1].length = big;
	assert_int_equal(mc_te_transfer_sync(p->a, req, 2, 20000), MC_OK);
	assert_int_equal(target_sconns(p), 4);
	assert_memory_equal(p->bbuf, src, 2 * big);
	unreg_local(p->a, src);
	free(src);
}

/* n objects of 4 KiB, each with its 32-byte trailer, read from b's buffer
 * into dst in one batch (a store batch get's requests). */
static void read_small_objects(struct pair *p, char *dst, size_t n)
{
	enum { VAL = 4096, TR = 32 };
	struct mc_xfer_req *req = calloc(2 * n, sizeof(*req));
	uint64_t at = (uint64_t)(uintptr_t)p->bbuf;

	for (size_t i = 0; i < 2 * n; i++) {
		size_t off = (i / 2) * (VAL + TR) + (i % 2 ? VAL : 0);
		req[i] = (struct mc_xfer_req){.opcode = MC_OP_READ,
					      .source = dst + off,
					      .target_id = p->b_id,
					      .target_offset = at + off,
					      .length = i % 2 ? TR : VAL};
	}
	assert_int_equal(mc_te_transfer_sync(p->a, req, 2 * n, 20000), MC_OK);
	assert_memory_equal(dst, p->bbuf, n * (VAL + TR));
	free(req);
}

/* With MC_TCP_LANE_FILL=128k a batch's small slices fill a lane with 128 KiB
 * of its bytes before the next lane is dealt: a store batch get of 32 x 4 KiB
 * (32 x 4,128 bytes with the trailers) wakes one worker a side, not four;
 * one of 64 uses two lanes; 64 KiB values are still spread over every lane.
 * Each lane opens its own connection on first use. */
static void small_slices_fill_a_lane_before_the_next(void **state)
{
	struct pair *p = *state;
	const size_t big = 64 << 10;
	char *dst = malloc(8 * big);
	struct mc_xfer_req req[4];

	mc_test_fill(p->bbuf, 8 * big, 13);
	reg_local(p->a, dst, 8 * big);
	read_small_objects(p, dst, 32);
	assert_int_equal(target_sconns(p), 1);
	read_small_objects(p, dst, 64); /* the next lane, filled, and one more */
	assert_int_equal(target_sconns(p), 3);
	for (size_t i = 0; i < 4; i++)
		req[i] = (struct mc_xfer_req){.opcode = MC_OP_READ,
					      .source = dst + i * big,
					      .target_id = p->b_id,
					      .target_offset =
						      (uint64_t)(uintptr_t)p->bbuf + i * big,
					      .length = big};
	assert_int_equal(mc_te_transfer_sync(p->a, req, 4, 20000), MC_OK);
	assert_memory_equal(dst, p->bbuf, 4 * big);
	assert_int_equal(target_sconns(p), 4);
	unreg_local(p->a, dst);
	free(dst);
}

/* A large write followed by a small one on the same connection (a value
 * and its trailer, one lane here) and then the next large one: the target
 * fetches a header with at most LONE_TAIL (2 KiB) after it following a large
 * write and the small request after it, so of each further pair no more
 * than those 2 KiB and the small payload pass its staging buffer; the rest
 * lands straight in memory.  The first pair, on a fresh connection, may be
 * staged whole. */
static void large_writes_skip_the_staging_buffer_past_a_small_one(void **state)
{
	struct pair *p = *state;
	struct mc_transport *tp = mc_te_transport(p->b, "tcp");
	const size_t big = 64 << 10, small = 32;
	char *src = malloc(big + small);
	uint64_t before;
	struct mc_xfer_req req[2];

	value_and_trailer(p, src, big, small, req);
	mc_test_fill(src, big + small, 11);
	reg_local(p->a, src, big + small);
	assert_int_equal(mc_te_transfer_sync(p->a, req, 2, 20000), MC_OK);
	before = mc_tcp_staged_in(tp);
	for (int i = 0; i < 8; i++)
		assert_int_equal(mc_te_transfer_sync(p->a, req, 2, 20000), MC_OK);
	assert_true(mc_tcp_staged_in(tp) - before <= 8 * (2048 + small));
	assert_memory_equal(p->bbuf, src, big + small);
	unreg_local(p->a, src);
	free(src);
}

/* A raw data connection to te's TCP port, for hand-made frames. */
static int raw_connect(struct mc_te *te)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(mc_te_tcp_port(te))};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = {.tv_sec = 60};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* op: MC_TCP_OP_READ or MC_TCP_OP_WRITE */
static void v2_hdr(uint8_t hdr[MC_TCP_HDR_LEN], uint8_t op, uint64_t size, uint64_t addr)
{
	struct mc_tcp_hdr h = {.size = size, .addr = addr, .opcode = op | MC_TCP_OP_V2};
	mc_tcp_hdr_encode(&h, hdr);
}

/* Waits on batches of more than 1 MiB sleep on the futex at once, and
 * small ones poll first; either way every wait is woken by the last
 * task's end (which skips the wake-up call when nobody sleeps), never
 * left to its timeout.  Reads and writes alternate so both sides' workers
 * end tasks. */
static void every_wait_is_woken(void **state)
{
	struct pair *p = *state;
	uint64_t addr = (uint64_t)(uintptr_t)p->bbuf;
	const uint64_t lens[] = {(2u << 20) + 1, 4096, (1u << 20) + 4096, 1};

	mc_test_fill(p->abuf, 4u << 20, 17);
	for (int i = 0; i < 200; i++) {
		uint64_t len = lens[i % 4];

		/* a wake-up lost would end in MC_ERR_TIMEOUT after 10 s */
		assert_int_equal(
			xfer(p->a, i & 1 ? MC_OP_READ : MC_OP_WRITE, p->abuf, p->b_id, addr, len),
			MC_OK);
	}
	assert_memory_equal(p->abuf, p->bbuf, (2u << 20) + 1);
}

/* Writes back to back on one data connection, large and small, some with
 * a checksum trailer, in one stream: the target receives the rest of a large payload and what
 * follows it (the next header, a few KiB of the next payload) in one call, so a request's bytes
 * split anywhere between its destination and the staging buffer must still land whole.  The stream
 * goes out at once, then cut in pieces of odd sizes. */
static void writes_back_to_back_land_whole(void **state)
{
	struct pair *p = *state;
	const uint64_t sizes[] = {65536 + 100, 32, 40960, 56, 102400, 65536, 65536, 7, 33000};
	const size_t n = sizeof(sizes) / sizeof(sizes[0]);
	const size_t cuts[] = {0, 1000, 4093, 65559};
	uint64_t base = (uint64_t)(uintptr_t)p->bbuf, total = 0;
	char *src, *stream;

	for (size_t i = 0; i < n; i++)
		total += sizes[i];
	src = malloc(total);
	stream = malloc(total + n * (MC_TCP_HDR_LEN + MC_TCP_SUM_LEN));
	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
		int fd = raw_connect(p->b);
		size_t len = 0, off = 0;

		memset(p->bbuf, 0, total);
		mc_test_fill(src, total, (uint32_t)(31 + c));
		for (size_t i = 0; i < n; i++) {
			bool sum = (i + c) % 3 == 1; /* some carry a checksum trailer */

			v2_hdr((uint8_t *)stream + len,
			       (uint8_t)(MC_TCP_OP_WRITE | (sum ? MC_TCP_OP_SUM : 0)), sizes[i],
			       base + off);
			len += MC_TCP_HDR_LEN;
			memcpy(stream + len, src + off, sizes[i]);
			len += sizes[i];
			if (sum) {
				mc_tcp_sum_encode(mc_xsum(src + off, sizes[i]),
						  (uint8_t *)stream + len);
				len += MC_TCP_SUM_LEN;
			}
			off += sizes[i];
		}
		for (size_t at = 0; at < len;) {
			size_t k = cuts[c] ? MC_MIN(cuts[c], len - at) : len - at;
			ssize_t w = send(fd, stream + at, k, MSG_NOSIGNAL);

			assert_true(w > 0);
			at += (size_t)w;
		}
		for (size_t i = 0; i < n; i++) {
			uint8_t st[8];
			uint32_t code = UINT32_MAX;
			size_t got = 0;

			while (got < sizeof(st)) {
				ssize_t r = recv(fd, st + got, sizeof(st) - got, 0);
				assert_true(r > 0);
				got += (size_t)r;
			}
			assert_int_equal(mc_tcp_status_decode(st, &code), MC_OK);
			assert_int_equal(code, MC_TCP_STATUS_OK);
		}
		assert_memory_equal(p->bbuf, src, total);
		close(fd);
	}
	free(stream);
	free(src);
}

/* Regression: a client that asks for a large read and hangs up must not
 * kill the target with SIGPIPE; the target keeps serving. */
static void client_hangup_during_read_does_not_kill_target(void **state)
{
	struct pair *p = *state;
	uint8_t hdr[MC_TCP_HDR_LEN];
	uint64_t addr = (uint64_t)(uintptr_t)p->bbuf;

	v2_hdr(hdr, MC_TCP_OP_READ, BUF, addr);
	for (int round = 0; round < 20; round++) {
		int fd = raw_connect(p->b);
		assert_int_equal(send(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
		close(fd);
	}
	/* still alive and serving */
	mc_test_fill(p->abuf, 4096, 5);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, addr, 4096), MC_OK);
	assert_memory_equal(p->abuf, p->bbuf, 4096);
}

/* TCP only, one worker on each side: every connection shares it. */
static int setup_one_worker(void **state)
{
	static const char *const env[] = {"MC_SHM_DISABLE", "1", "MC_TCP_WORKERS", "1", NULL};
	return setup_pair_env(state, "mem://test_engine_one_worker", env);
}

static bool recv_status_ok(int fd)
{
	uint8_t st[8];
	size_t got = 0;
	while (got < sizeof(st)) {
		ssize_t n = recv(fd, st + got, sizeof(st) - got, 0);
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	uint32_t code;
	return mc_tcp_status_decode(st, &code) == MC_OK && code == MC_TCP_STATUS_OK;
}

/* A peer streaming writes from the page cache (sendfile: the kernel sends
 * pages by reference). */
struct streamer {
	int fd, memfd;
	uint64_t addr, size; /* request i writes size bytes at addr + i * size */
	int count;
	atomic_bool done;
};

static void *stream_writes(void *arg)
{
	struct streamer *st = arg;
	sigset_t pipe_sig; /* a closed socket fails sendfile() with EPIPE, not a signal */
	sigemptyset(&pipe_sig);
	sigaddset(&pipe_sig, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_sig, NULL);
	for (int i = 0; i < st->count; i++) {
		uint8_t hdr[MC_TCP_HDR_LEN];
		off_t off = 0;
		v2_hdr(hdr, MC_TCP_OP_WRITE, st->size, st->addr + (uint64_t)i * st->size);
		if (send(st->fd, hdr, sizeof(hdr), MSG_MORE) != (ssize_t)sizeof(hdr))
			break;
		while ((uint64_t)off < st->size)
			if (sendfile(st->fd, st->memfd, &off, (size_t)(st->size - (uint64_t)off)) <=
			    0)
				goto out;
	}
out:
	atomic_store(&st->done, true);
	return NULL;
}

/* Regression: a connection whose peer sent faster than the target's worker
 * copied kept that worker reading it until the peer stopped, so every other
 * connection of the worker waited (and one waiting mid-request was then
 * closed as "stalled" with megabytes unread: the multipath failover test
 * failed that way under TSan on a loaded machine).  With one worker, a small
 * write on a second connection is answered while the stream on the first is
 * still going. */
static void a_saturating_connection_does_not_starve_the_others(void **state)
{
	struct pair *p = *state;
	enum { BLK = 1 << 20, COUNT = 64 };
	struct streamer st = {.size = BLK, .count = COUNT};
	uint64_t base = (uint64_t)(uintptr_t)p->bbuf;
	uint8_t hdr[MC_TCP_HDR_LEN];
	char small[4096];
	struct mc_test_slow_mem slow;
	pthread_t th;
	bool streaming_when_answered;
	int b;

	if (!mc_test_slow_mem_open(&slow, (size_t)BLK * COUNT, 0))
		skip(); /* no userfaultfd for us (vm.unprivileged_userfaultfd) */
	assert_int_equal(mc_te_register(p->b, slow.base, slow.len, "cpu:0", true), MC_OK);
	st.memfd = memfd_create("stream", 0);
	assert_true(st.memfd >= 0);
	assert_int_equal(ftruncate(st.memfd, BLK), 0);
	st.fd = raw_connect(p->b);
	st.addr = (uint64_t)(uintptr_t)slow.base;
	assert_int_equal(pthread_create(&th, NULL, stream_writes, &st), 0);
	assert_true(recv_status_ok(st.fd)); /* the stream is flowing */

	b = raw_connect(p->b);
	mc_test_fill(small, sizeof(small), 9);
	v2_hdr(hdr, MC_TCP_OP_WRITE, sizeof(small), base);
	assert_int_equal(send(b, hdr, sizeof(hdr), MSG_MORE), (ssize_t)sizeof(hdr));
	assert_int_equal(send(b, small, sizeof(small), 0), (ssize_t)sizeof(small));
	assert_true(recv_status_ok(b));
	streaming_when_answered = !atomic_load(&st.done);
	assert_memory_equal(p->bbuf, small, sizeof(small));

	pthread_join(th, NULL);
	for (int i = 1; i < COUNT; i++)
		assert_true(recv_status_ok(st.fd));
	close(b);
	close(st.fd);
	close(st.memfd);
	assert_int_equal(mc_te_deregister(p->b, slow.base), MC_OK);
	mc_test_slow_mem_close(&slow);
	assert_true(streaming_when_answered);
}

/* Deregistration waits a bounded time (MC_TE_DEREGISTER_WAIT_MS, 200 ms
 * here) for transfers using the range, then cuts their connections. */
static int setup_dereg_wait(void **state)
{
	static const char *const env[] = {"MC_SHM_DISABLE", "1", "MC_TE_DEREGISTER_WAIT_MS", "200",
					  NULL};
	return setup_pair_env(state, "mem://test_engine_dereg", env);
}

enum { SLOW_LEN = 16 << 20, SLOW_PAGE_US = 500 }; /* >= 2 s to read it all */

/* Start a read of b's slow range into dst (registered with a); the task id. */
static mc_batch_id start_slow_read(struct pair *p, struct mc_test_slow_mem *slow, char *dst)
{
	struct mc_xfer_req r = {.opcode = MC_OP_READ,
				.source = dst,
				.target_id = p->b_id,
				.target_offset = (uint64_t)(uintptr_t)slow->base,
				.length = SLOW_LEN};
	mc_batch_id id;
	assert_int_equal(mc_te_batch_new(p->a, 1, &id), MC_OK);
	assert_int_equal(mc_te_submit(p->a, id, &r, 1), MC_OK);
	return id;
}

/* Regression (failed before: the local side of a task held no reference, so
 * mc_te_deregister returned at once and the worker went on writing the read's
 * bytes into memory the caller then unmapped).  Deregistering the local
 * buffer of a slow read waits for it, then cuts it: when the call returns
 * the task has ended (and, since a fix of the completion order, its state
 * says so: the registration was dropped before the state was stored, and a
 * zero-copy run once saw WAITING here). */
static void deregister_during_a_slow_read_waits_then_cuts(void **state)
{
	struct pair *p = *state;
	struct mc_test_slow_mem slow;
	struct mc_xfer_status st;
	mc_batch_id id;
	char *dst;

	if (!mc_test_slow_mem_open(&slow, SLOW_LEN, SLOW_PAGE_US))
		skip(); /* no userfaultfd for us (vm.unprivileged_userfaultfd) */
	assert_int_equal(mc_te_register(p->b, slow.base, slow.len, "cpu:0", true), MC_OK);
	dst = mmap(NULL, SLOW_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(dst != MAP_FAILED);
	reg_local(p->a, dst, SLOW_LEN);
	id = start_slow_read(p, &slow, dst);

	assert_int_equal(mc_te_deregister(p->a, dst), MC_OK);
	assert_int_equal(mc_te_task_status(p->a, id, 0, &st), MC_OK);
	/* ended: cut (the usual case, the read needs seconds) or, when the
	 * target could send faster than the pages come (zero-copy may map them
	 * without a fault), finished within the wait */
	assert_true(st.state == MC_XFER_FAILED || st.state == MC_XFER_COMPLETED);
	munmap(dst, SLOW_LEN); /* safe now: nothing writes there any more */
	assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);

	assert_int_equal(mc_te_deregister(p->b, slow.base), MC_OK);
	mc_test_slow_mem_close(&slow);
}

/* Regression (failed before: the target's deregistration waited for the
 * whole read, however long the peer took).  Deregistering memory a peer is
 * reading returns after the bounded wait; the peer's read fails. */
static void deregister_of_memory_being_served_is_bounded(void **state)
{
	struct pair *p = *state;
	struct mc_test_slow_mem slow;
	struct mc_xfer_status st;
	mc_batch_id id;
	char *dst;

	if (!mc_test_slow_mem_open(&slow, SLOW_LEN, SLOW_PAGE_US))
		skip();
	assert_int_equal(mc_te_register(p->b, slow.base, slow.len, "cpu:0", true), MC_OK);
	dst = mmap(NULL, SLOW_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(dst != MAP_FAILED);
	reg_local(p->a, dst, SLOW_LEN);
	id = start_slow_read(p, &slow, dst);
	/* the target is serving it once its first bytes arrive */
	do {
		assert_int_equal(mc_te_task_status(p->a, id, 0, &st), MC_OK);
	} while (st.state == MC_XFER_WAITING && mc_test_slow_mem_served(&slow) == 0);

	assert_int_equal(mc_te_deregister(p->b, slow.base), MC_OK);
	mc_test_slow_mem_close(&slow); /* b serves none of it any more */
	assert_int_not_equal(mc_te_batch_wait(p->a, id, 30000, &st), MC_OK);
	assert_int_equal(st.state, MC_XFER_FAILED);
	assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);
	unreg_local(p->a, dst);
	munmap(dst, SLOW_LEN);
}

/* Regression: a task could show COMPLETED before the batch's in-flight
 * count dropped, so freeing right after polling returned MC_ERR_BATCH_BUSY. */
static void free_right_after_polling_completed(void **state)
{
	struct pair *p = *state;
	struct mc_xfer_req r = {.opcode = MC_OP_WRITE,
				.source = p->abuf,
				.target_id = p->b_id,
				.target_offset = (uint64_t)(uintptr_t)p->bbuf,
				.length = 64};
	for (int i = 0; i < 3000; i++) {
		struct mc_xfer_status st;
		mc_batch_id id;
		assert_int_equal(mc_te_batch_new(p->a, 1, &id), MC_OK);
		assert_int_equal(mc_te_submit(p->a, id, &r, 1), MC_OK);
		do {
			assert_int_equal(mc_te_task_status(p->a, id, 0, &st), MC_OK);
		} while (st.state == MC_XFER_WAITING);
		assert_int_equal(st.state, MC_XFER_COMPLETED);
		assert_int_equal(mc_te_batch_free(p->a, id), MC_OK);
	}
}

/* A range registered MC_TE_REGISTER_READ_ONLY serves remote reads and
 * refuses remote writes with the bytes untouched; once deregistered it
 * refuses both.  Locally it may be a write's source, never a read's
 * destination; a PROT_READ mapping registers read-only only. */
static void read_only_region_refuses_writes(void **state)
{
	struct pair *p = *state;
	size_t len = 4 * 4096;
	char *ro = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *copy = malloc(len), *rdonly;
	uint64_t base = (uint64_t)(uintptr_t)ro;
	mc_segment_id id;

	memset(ro, 0x5a, len);
	memcpy(copy, ro, len);
	assert_int_equal(mc_te_register_flags(p->b, ro, len, "cpu:0", true, 0x2),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(
		mc_te_register_flags(p->b, ro, len, "cpu:0", true, MC_TE_REGISTER_READ_ONLY),
		MC_OK);
	assert_int_equal(mc_te_reopen_segment(p->a, mc_te_local_name(p->b), &id), MC_OK);
	mc_test_fill(p->abuf, len, 7);
	assert_int_not_equal(xfer(p->a, MC_OP_WRITE, p->abuf, id, base, 64), MC_OK);
	assert_int_not_equal(xfer(p->a, MC_OP_WRITE, p->abuf, id, base + 4096, len - 4096), MC_OK);
	assert_memory_equal(copy, ro, len);
	/* reads are served, and the connection still works for other ranges */
	assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf, id, base + 100, 1000), MC_OK);
	assert_memory_equal(p->abuf, copy + 100, 1000);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, id, (uint64_t)(uintptr_t)p->bbuf, 64),
			 MC_OK);
	/* the target's own local path refuses the write too */
	assert_int_not_equal(xfer(p->b, MC_OP_WRITE, p->bbuf, MC_LOCAL_SEGMENT, base, 64), MC_OK);
	assert_memory_equal(copy, ro, len);
	/* a read-only range is a source, never a destination, of local requests */
	assert_int_equal(
		xfer(p->b, MC_OP_WRITE, ro, MC_LOCAL_SEGMENT, (uint64_t)(uintptr_t)p->bbuf, 64),
		MC_OK);
	assert_memory_equal(p->bbuf, copy, 64);
	assert_int_equal(
		xfer(p->b, MC_OP_READ, ro, MC_LOCAL_SEGMENT, (uint64_t)(uintptr_t)p->bbuf, 64),
		MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "read-only"));
	assert_memory_equal(copy, ro, len);
	/* deregistered: both refused, nothing changes */
	assert_int_equal(mc_te_deregister(p->b, ro), MC_OK);
	assert_int_equal(mc_te_reopen_segment(p->a, mc_te_local_name(p->b), &id), MC_OK);
	assert_int_not_equal(xfer(p->a, MC_OP_READ, p->abuf, id, base, 64), MC_OK);
	assert_int_not_equal(xfer(p->a, MC_OP_WRITE, p->abuf, id, base, 64), MC_OK);
	assert_memory_equal(copy, ro, len);
	/* a PROT_READ mapping: refused read-write, taken read-only */
	rdonly = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_int_equal(mc_te_register(p->b, rdonly, 4096, "cpu:0", true), MC_ERR_INVALID_PARAMS);
	assert_int_equal(
		mc_te_register_flags(p->b, rdonly, 4096, "cpu:0", true, MC_TE_REGISTER_READ_ONLY),
		MC_OK);
	assert_int_equal(mc_te_reopen_segment(p->a, mc_te_local_name(p->b), &id), MC_OK);
	assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf, id, (uint64_t)(uintptr_t)rdonly, 64),
			 MC_OK);
	assert_int_not_equal(xfer(p->a, MC_OP_WRITE, p->abuf, id, (uint64_t)(uintptr_t)rdonly, 64),
			     MC_OK); /* refused, not a SIGSEGV in the target */
	assert_int_equal(mc_te_deregister(p->b, rdonly), MC_OK);
	munmap(rdonly, 4096);
	munmap(ro, len);
	free(copy);
}

/* A batch wait polls only while what is left to move could end within its
 * polling window: 1 MiB or less of the tasks not yet ended (te/batch.c). */
static void a_wait_polls_only_for_little_left(void **state)
{
	struct mc_task t[3];
	struct mc_batch b = {.ntasks = 3, .tasks = t};
	(void)state;

	memset(t, 0, sizeof(t));
	for (int i = 0; i < 3; i++) {
		atomic_store(&t[i].state, MC_XFER_WAITING);
		t[i].length = 512u << 10;
	}
	assert_false(mc_batch_wait_spins(&b)); /* 1.5 MiB left */
	atomic_store(&t[0].bytes, 256u << 10);
	assert_false(mc_batch_wait_spins(&b)); /* 1.25 MiB */
	atomic_store(&t[1].state, MC_XFER_COMPLETED);
	assert_true(mc_batch_wait_spins(&b)); /* 768 KiB: one ended */
	t[2].length = 800u << 10;
	assert_false(mc_batch_wait_spins(&b)); /* 1,056 KiB */
	atomic_store(&t[2].state, MC_XFER_FAILED);
	assert_true(mc_batch_wait_spins(&b));
	b.ntasks = 0;
	assert_true(mc_batch_wait_spins(&b));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(write_read_roundtrip_sizes, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(write_read_roundtrip_sizes, setup_p2p,
						teardown_pair),
		cmocka_unit_test_setup_teardown(write_read_roundtrip_sizes, setup_v1,
						teardown_pair),
		cmocka_unit_test_setup_teardown(batch_of_mixed_requests, setup_v1, teardown_pair),
		cmocka_unit_test(a_wait_polls_only_for_little_left),
		cmocka_unit_test_setup_teardown(out_of_range_write_is_rejected_and_memory_untouched,
						setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(batch_of_mixed_requests, setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(batch_of_mixed_requests, setup_p2p, teardown_pair),
		cmocka_unit_test_setup_teardown(task_end_callback_runs_before_the_wait_returns,
						setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(task_end_callback_runs_before_the_wait_returns,
						setup_v1, teardown_pair),
		cmocka_unit_test_setup_teardown(local_segment_copies_and_checks_bounds, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(notify_and_probe, setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(notify_and_probe, setup_p2p, teardown_pair),
		cmocka_unit_test_setup_teardown(probe_within_is_bounded, setup_p2p, teardown_pair),
		cmocka_unit_test_setup_teardown(registration_rules, setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(unknown_segment_fails_fast, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(malformed_descriptor_is_reported_with_its_name,
						setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(free_right_after_polling_completed, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(accepted_connections_are_spread_over_workers,
						setup_tcp_lanes, teardown_pair),
		cmocka_unit_test_setup_teardown(a_small_slice_rides_its_batchs_lane,
						setup_tcp_lanes, teardown_pair),
		cmocka_unit_test_setup_teardown(small_slices_fill_a_lane_before_the_next,
						setup_tcp_lanes_fill, teardown_pair),
		cmocka_unit_test_setup_teardown(
			large_writes_skip_the_staging_buffer_past_a_small_one, setup_one_lane,
			teardown_pair),
		cmocka_unit_test_setup_teardown(many_large_reads_in_flight_complete, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(local_ranges_must_be_registered, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(read_only_region_refuses_writes, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(read_only_region_refuses_writes, setup_one_worker,
						teardown_pair),
		cmocka_unit_test_setup_teardown(registration_refuses_unmapped_memory, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(every_wait_is_woken, setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(writes_back_to_back_land_whole, setup_mem,
						teardown_pair),
		cmocka_unit_test_setup_teardown(writes_back_to_back_land_whole, setup_one_worker,
						teardown_pair),
		cmocka_unit_test_setup_teardown(client_hangup_during_read_does_not_kill_target,
						setup_mem, teardown_pair),
		cmocka_unit_test_setup_teardown(a_saturating_connection_does_not_starve_the_others,
						setup_one_worker, teardown_pair),
		cmocka_unit_test_setup_teardown(deregister_during_a_slow_read_waits_then_cuts,
						setup_dereg_wait, teardown_pair),
		cmocka_unit_test_setup_teardown(deregister_of_memory_being_served_is_bounded,
						setup_dereg_wait, teardown_pair),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_devmem.c - device memory end to end: registration at
 * "cuda:N", and round trips whose local buffer, target range or both are
 * device memory, over TCP, the same-host transport and the local path, two
 * engines in one process.  Every byte is checked (read back through the
 * backend), and so are the bytes just past each range.
 *
 * Built twice from this file:
 *   test_devmem (suite unit): the emulated backend of tests/support, whose
 *     "device memory" faults on any direct access, so the staging of the
 *     initiator (te/stage.c) and of both targets (TCP server, same-host
 *     worker) is what these tests exercise, under ASan and TSan too;
 *   test_gpu (suite gpu, CUDA builds only, -DMC_TEST_CUDA): the real CUDA
 *     backend with cudaMalloc'ed memory; exits 77 when there is no device.
 *
 * Chunks are 64 KiB and the initiator has 4 buffers here (unless
 * MC_GPU_STAGE_CHUNK / MC_GPU_STAGE_BUFFERS say otherwise), so the larger
 * requests take many chunks through both sides' pipelines.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "mem/devmem.h"
#include "mooncake/te.h"
#include "support.h"
#include "te/engine.h"

#ifndef MC_TEST_CUDA
#include "devmem_emu.h"
#endif

#define DEVBUF	(32u << 20)
#define HOSTBUF (32u << 20)
#define CHUNK	(64u << 10)

static const struct mc_devmem_ops *ops;

enum path { PATH_TCP, PATH_SHM, PATH_LOCAL };

struct rig {
	enum path path;
	struct mc_te *a, *b; /* b == a for PATH_LOCAL */
	mc_segment_id b_id;
	char *adev, *bdev;   /* device memory, registered */
	char *ahost, *bhost; /* host memory, registered */
	char *scratch;	     /* unregistered host memory for filling and checking */
	char *scratch2;
};

static void *dev_alloc_on(int want)
{
	void *p = NULL;
	if (ops->dev_alloc(want, DEVBUF, &p) != MC_OK && want > 0)
		assert_int_equal(ops->dev_alloc(0, DEVBUF, &p), MC_OK); /* one device only */
	assert_non_null(p);
	return p;
}

static void *host_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	return p;
}

static int setup_path(void **state, enum path path, const char *uri)
{
	struct rig *r = calloc(1, sizeof(*r));
	assert_non_null(r);
	r->path = path;
	if (path == PATH_TCP)
		setenv("MC_SHM_DISABLE", "1", 1);
	r->a = mc_test_engine_new(uri, "dev-a");
	r->b = path == PATH_LOCAL ? r->a : mc_test_engine_new(uri, "dev-b");
	unsetenv("MC_SHM_DISABLE");
	assert_non_null(r->a);
	assert_non_null(r->b);
	assert_non_null(r->a->devmem);
	r->adev = dev_alloc_on(0);
	r->bdev = path == PATH_LOCAL ? r->adev + DEVBUF / 2 : dev_alloc_on(1);
	r->ahost = host_map(HOSTBUF);
	r->bhost = path == PATH_LOCAL ? r->ahost + HOSTBUF / 2 : host_map(HOSTBUF);
	r->scratch = host_map(DEVBUF);
	r->scratch2 = host_map(DEVBUF);
	if (path == PATH_LOCAL) {
		assert_int_equal(mc_te_register(r->a, r->adev, DEVBUF, "cuda:0", true), MC_OK);
		assert_int_equal(mc_te_register(r->a, r->ahost, HOSTBUF, "cpu:0", true), MC_OK);
		r->b_id = MC_LOCAL_SEGMENT;
	} else {
		assert_int_equal(mc_te_register(r->a, r->adev, DEVBUF, "cuda:0", true), MC_OK);
		assert_int_equal(mc_te_register(r->a, r->ahost, HOSTBUF, "cpu:0", true), MC_OK);
		assert_int_equal(mc_te_register(r->b, r->bdev, DEVBUF, "*", true), MC_OK);
		assert_int_equal(mc_te_register(r->b, r->bhost, HOSTBUF, "cpu:0", true), MC_OK);
		assert_int_equal(mc_te_open_segment(r->a, "dev-b", &r->b_id), MC_OK);
	}
	*state = r;
	return 0;
}

static int setup_tcp(void **state)
{
	return setup_path(state, PATH_TCP, "mem://test_devmem_tcp");
}

static int setup_shm(void **state)
{
	return setup_path(state, PATH_SHM, "mem://test_devmem_shm");
}

static int setup_local(void **state)
{
	return setup_path(state, PATH_LOCAL, "mem://test_devmem_local");
}

static int teardown_rig(void **state)
{
	struct rig *r = *state;
	mc_te_free(r->a); /* the initiator first: its lanes close, the target shrugs */
	if (r->b != r->a)
		mc_te_free(r->b);
	ops->dev_free(r->adev);
	if (r->path != PATH_LOCAL) {
		ops->dev_free(r->bdev);
		munmap(r->bhost, HOSTBUF);
	}
	munmap(r->ahost, HOSTBUF);
	munmap(r->scratch, DEVBUF);
	munmap(r->scratch2, DEVBUF);
	free(r);
	return 0;
}

/* Put len pattern bytes (seed) at p, device or host memory, followed by
 * `guard` zero bytes. */
static void put_bytes(struct rig *r, char *p, size_t len, uint64_t seed, size_t guard)
{
	mc_test_fill(r->scratch, len, seed);
	memset(r->scratch + len, 0, guard);
	assert_int_equal(ops->copy(p, r->scratch, len + guard), MC_OK);
}

static void zero_bytes(struct rig *r, char *p, size_t len)
{
	memset(r->scratch, 0, len);
	assert_int_equal(ops->copy(p, r->scratch, len), MC_OK);
}

/* The len bytes at p are the pattern of seed, and the guard bytes after
 * them are zero. */
static void check_bytes(struct rig *r, const char *p, size_t len, uint64_t seed, size_t guard)
{
	mc_test_fill(r->scratch, len, seed);
	assert_int_equal(ops->copy(r->scratch2, p, len + guard), MC_OK);
	assert_memory_equal(r->scratch, r->scratch2, len);
	for (size_t g = 0; g < guard; g++)
		assert_int_equal(r->scratch2[len + g], 0);
}

static int xfer(struct rig *r, int op, char *local, const char *remote, uint64_t len)
{
	struct mc_xfer_req q = {.opcode = op,
				.source = local,
				.target_id = r->b_id,
				.target_offset = (uint64_t)(uintptr_t)remote,
				.length = len};
	return mc_te_transfer_sync(r->a, &q, 1, 30000);
}

static const size_t sizes[] = {1,	  4095,		 CHUNK - 1,	  CHUNK,
			       CHUNK + 1, 3 * CHUNK + 7, (1u << 20) + 13, (3u << 20) + 5};

/*
 * For every size, at odd offsets: write from `src` (on a) to `dst` (on b),
 * check dst; then read dst back into `back` (on a), check back.  src,
 * dst and back are each device or host memory.
 */
static void roundtrip(struct rig *r, char *src, char *dst, char *back)
{
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i], soff = 3 + i, doff = 17 + 5 * i, boff = 1 + 2 * i;
		uint64_t seed = 100 + i;

		put_bytes(r, src + soff, len, seed, 0);
		zero_bytes(r, dst, doff + len + 64);
		assert_int_equal(xfer(r, MC_OP_WRITE, src + soff, dst + doff, len), MC_OK);
		check_bytes(r, dst + doff, len, seed, 64);

		zero_bytes(r, back, boff + len + 64);
		assert_int_equal(xfer(r, MC_OP_READ, back + boff, dst + doff, len), MC_OK);
		check_bytes(r, back + boff, len, seed, 64);
	}
}

/* a's buffers: sources in the first quarter, read-back ranges in the
 * second; locally, b's buffers are the second halves of a's. */
static char *back_of(char *abuf)
{
	return abuf + DEVBUF / 4;
}

static void device_to_device(void **state)
{
	struct rig *r = *state;
#ifndef MC_TEST_CUDA
	uint64_t before = mc_devmem_emu_async_copies();
#endif
	roundtrip(r, r->adev, r->bdev, back_of(r->adev));
#ifndef MC_TEST_CUDA
	/* staged, not copied directly: the 3 MiB + 5 request alone is that many
	 * chunks, each copied out of one device and into the other, both ways */
	if (r->path != PATH_LOCAL) {
		uint64_t chunk = r->a->stage_cfg.stage_chunk;
		assert_true(mc_devmem_emu_async_copies() - before >=
			    4 * (((3u << 20) + 5 + chunk - 1) / chunk));
	}
#endif
}

static void device_to_host(void **state)
{
	struct rig *r = *state;
	roundtrip(r, r->adev, r->bhost, back_of(r->adev));
}

static void host_to_device(void **state)
{
	struct rig *r = *state;
	roundtrip(r, r->ahost, r->bdev, back_of(r->ahost));
}

/*
 * One batch of 48 requests mixing every combination and size, so chunks of
 * many requests share the initiator's four buffers and the targets' two
 * per connection; every range is checked afterwards.
 */
static void many_mixed_requests_in_one_batch(void **state)
{
	struct rig *r = *state;
	enum { N = 48 };
	struct mc_xfer_req q[N];
	struct mc_xfer_status st;
	uint64_t off_a = 0, off_b = 0;
	mc_batch_id id;
	size_t len[N];
	char *src[N], *dst[N];

	for (int i = 0; i < N; i++) {
		bool sdev = i % 2, ddev = (i / 2) % 2;
		len[i] = (size_t)((i * 7919u) % (96u << 10)) + 1 + (i % 3) * CHUNK;
		src[i] = (sdev ? r->adev : r->ahost) + off_a;
		dst[i] = (ddev ? r->bdev : r->bhost) + off_b;
		off_a += len[i] + 64;
		off_b += len[i] + 64;
		put_bytes(r, src[i], len[i], 1000 + (uint64_t)i, 0);
		zero_bytes(r, dst[i], len[i] + 64);
		q[i] = (struct mc_xfer_req){.opcode = MC_OP_WRITE,
					    .source = src[i],
					    .target_id = r->b_id,
					    .target_offset = (uint64_t)(uintptr_t)dst[i],
					    .length = len[i]};
	}
	assert_true(off_a <= DEVBUF / 4 && off_b <= DEVBUF / 2);
	assert_int_equal(mc_te_batch_new(r->a, N, &id), MC_OK);
	assert_int_equal(mc_te_submit(r->a, id, q, N), MC_OK);
	assert_int_equal(mc_te_batch_wait(r->a, id, 30000, &st), MC_OK);
	assert_int_equal(st.state, MC_XFER_COMPLETED);
	assert_int_equal(mc_te_batch_free(r->a, id), MC_OK);
	for (int i = 0; i < N; i++)
		check_bytes(r, dst[i], len[i], 1000 + (uint64_t)i, 64);

	/* and all of them back, reads this time, into cleared sources */
	for (int i = 0; i < N; i++) {
		zero_bytes(r, src[i], len[i]);
		q[i].opcode = MC_OP_READ;
	}
	assert_int_equal(mc_te_batch_new(r->a, N, &id), MC_OK);
	assert_int_equal(mc_te_submit(r->a, id, q, N), MC_OK);
	assert_int_equal(mc_te_batch_wait(r->a, id, 30000, &st), MC_OK);
	assert_int_equal(mc_te_batch_free(r->a, id), MC_OK);
	for (int i = 0; i < N; i++)
		check_bytes(r, src[i], len[i], 1000 + (uint64_t)i, 0);
}

/* A device-memory request to a range the target never registered fails,
 * and neither side's memory changes. */
static void unregistered_target_fails_and_leaves_memory_alone(void **state)
{
	struct rig *r = *state;
	char *stray = host_map(1u << 20);
	size_t len = 3 * CHUNK + 1;

	memset(stray, 0x5a, 1u << 20);
	put_bytes(r, r->adev, len, 7, 0);
	assert_int_not_equal(xfer(r, MC_OP_WRITE, r->adev, stray, len), MC_OK);
	assert_int_not_equal(xfer(r, MC_OP_READ, r->adev, stray, len), MC_OK);
	for (size_t i = 0; i < (1u << 20); i++)
		assert_int_equal((unsigned char)stray[i], 0x5a);
	check_bytes(r, r->adev, len, 7, 0);
	/* and the engine still works afterwards */
	zero_bytes(r, r->bdev, len);
	assert_int_equal(xfer(r, MC_OP_WRITE, r->adev, r->bdev, len), MC_OK);
	check_bytes(r, r->bdev, len, 7, 0);
	munmap(stray, 1u << 20);
}

/* Freeing the initiator while a staged request is in flight: the request
 * ends (either way), nothing is leaked, the target lives on. */
static void engine_free_with_staged_requests_in_flight(void **state)
{
	struct rig *r = *state;
	struct mc_xfer_req q = {.opcode = MC_OP_WRITE,
				.source = r->adev,
				.target_id = r->b_id,
				.target_offset = (uint64_t)(uintptr_t)r->bdev,
				.length = 4u << 20};
	mc_batch_id id;

	assert_int_equal(mc_te_batch_new(r->a, 1, &id), MC_OK);
	assert_int_equal(mc_te_submit(r->a, id, &q, 1), MC_OK);
	assert_int_equal(mc_te_batch_discard(r->a, id), MC_OK);
	mc_te_free(r->a);
	r->a = mc_test_engine_new(
		r->path == PATH_TCP ? "mem://test_devmem_tcp" : "mem://test_devmem_shm", "dev-a");
	assert_non_null(r->a);
	assert_int_equal(mc_te_register(r->a, r->adev, DEVBUF, "cuda:0", true), MC_OK);
	assert_int_equal(mc_te_open_segment(r->a, "dev-b", &r->b_id), MC_OK);
	put_bytes(r, r->adev, CHUNK * 2, 9, 0);
	assert_int_equal(xfer(r, MC_OP_WRITE, r->adev, r->bdev, CHUNK * 2), MC_OK);
	check_bytes(r, r->bdev, CHUNK * 2, 9, 0);
}

static struct mc_memreg_entry *find_entry(struct mc_te *te, const void *p)
{
	struct mc_memreg_entry *e = NULL;
	pthread_rwlock_rdlock(&te->memreg.lock);
	for (size_t i = 0; i < te->memreg.n; i++)
		if (te->memreg.v[i]->addr == (uint64_t)(uintptr_t)p)
			e = te->memreg.v[i];
	pthread_rwlock_unlock(&te->memreg.lock);
	return e;
}

/* The pointer decides: "*" on device memory is recorded as cuda:N, a
 * "cuda:0" label on host memory stays host memory; without a backend a
 * cuda:N location is refused. */
static void registration_follows_the_pointer(void **state)
{
	struct rig *r = *state;
	struct mc_memreg_entry *e;
	char *host = host_map(1u << 20);
	void *dev = dev_alloc_on(0);
	struct mc_te *plain;

	e = find_entry(r->b, r->bdev);
	assert_non_null(e);
	assert_true(e->dev >= 0);
	assert_int_equal(strncmp(e->location, "cuda:", 5), 0);
	assert_int_equal(mc_devmem_location_device(e->location), e->dev);
	assert_int_equal(mc_te_register(r->a, host, 1u << 20, "cuda:0", true), MC_OK);
	e = find_entry(r->a, host);
	assert_non_null(e);
	assert_int_equal(e->dev, -1);
	assert_int_equal(mc_te_deregister(r->a, host), MC_OK);

	assert_int_equal(mc_devmem_location_device("cuda:3"), 3);
	assert_int_equal(mc_devmem_location_device("cuda:"), -1);
	assert_int_equal(mc_devmem_location_device("cuda:1x"), -1);
	assert_int_equal(mc_devmem_location_device("cpu:0"), -1);
	assert_int_equal(mc_devmem_location_device("*"), -1);
	assert_int_equal(mc_devmem_location_device(NULL), -1);

	mc_devmem_set_backend(NULL);
	plain = mc_test_engine_new("mem://test_devmem_plain", "plain");
	mc_devmem_set_backend(ops);
	assert_non_null(plain);
	assert_null(plain->devmem);
	assert_int_equal(mc_te_register(plain, host, 1u << 20, "cuda:0", true),
			 MC_ERR_DEVICE_NOT_FOUND);
	assert_int_equal(mc_te_register(plain, host, 1u << 20, "cpu:0", true), MC_OK);
	mc_te_free(plain);
	ops->dev_free(dev);
	munmap(host, 1u << 20);
}

#ifndef MC_TEST_CUDA
/* What makes the emulation worth having: the library cannot touch its
 * "device memory" directly; the kernel refuses (as it would a GPU address). */
static void emulated_memory_is_out_of_the_hosts_reach(void **state)
{
	void *dev = dev_alloc_on(1);
	char buf[64] = {1};
	struct iovec mine = {buf, sizeof(buf)}, theirs = {dev, sizeof(buf)};
	(void)state;

	assert_int_equal(ops->ptr_device(dev), 1);
	assert_int_equal(ops->ptr_device(buf), -1);
	errno = 0;
	assert_int_equal(process_vm_writev(getpid(), &mine, 1, &theirs, 1, 0), -1);
	assert_int_equal(errno, EFAULT);
	assert_int_equal(ops->copy(dev, buf, sizeof(buf)), MC_OK);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(ops->copy(buf, dev, sizeof(buf)), MC_OK);
	assert_int_equal(buf[0], 1);
	ops->dev_free(dev);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
#ifndef MC_TEST_CUDA
		cmocka_unit_test(emulated_memory_is_out_of_the_hosts_reach),
#endif
		cmocka_unit_test_setup_teardown(registration_follows_the_pointer, setup_tcp,
						teardown_rig),
		cmocka_unit_test_setup_teardown(device_to_device, setup_tcp, teardown_rig),
		cmocka_unit_test_setup_teardown(device_to_host, setup_tcp, teardown_rig),
		cmocka_unit_test_setup_teardown(host_to_device, setup_tcp, teardown_rig),
		cmocka_unit_test_setup_teardown(many_mixed_requests_in_one_batch, setup_tcp,
						teardown_rig),
		cmocka_unit_test_setup_teardown(unregistered_target_fails_and_leaves_memory_alone,
						setup_tcp, teardown_rig),
		cmocka_unit_test_setup_teardown(engine_free_with_staged_requests_in_flight,
						setup_tcp, teardown_rig),
		cmocka_unit_test_setup_teardown(device_to_device, setup_shm, teardown_rig),
		cmocka_unit_test_setup_teardown(device_to_host, setup_shm, teardown_rig),
		cmocka_unit_test_setup_teardown(host_to_device, setup_shm, teardown_rig),
		cmocka_unit_test_setup_teardown(many_mixed_requests_in_one_batch, setup_shm,
						teardown_rig),
		cmocka_unit_test_setup_teardown(unregistered_target_fails_and_leaves_memory_alone,
						setup_shm, teardown_rig),
		cmocka_unit_test_setup_teardown(engine_free_with_staged_requests_in_flight,
						setup_shm, teardown_rig),
		cmocka_unit_test_setup_teardown(device_to_device, setup_local, teardown_rig),
		cmocka_unit_test_setup_teardown(device_to_host, setup_local, teardown_rig),
		cmocka_unit_test_setup_teardown(host_to_device, setup_local, teardown_rig),
	};

	/* unless a run asks for others (the CI runs use these) */
	setenv("MC_GPU_STAGE_CHUNK", "64k", 0);
	setenv("MC_GPU_STAGE_BUFFERS", "4", 0);
#ifdef MC_TEST_CUDA
	ops = mc_devmem();
	if (!ops) {
		printf("1..0 # SKIP no CUDA device (or no CUDA runtime)\n");
		return 77;
	}
#else
	ops = &mc_devmem_emu_ops;
	mc_devmem_set_backend(ops);
#endif
	return cmocka_run_group_tests(tests, NULL, NULL);
}

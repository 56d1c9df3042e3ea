/*
 * tests/unit/test_store_devmem.c - the store client with device memory.
 *
 * vLLM's store connector hands the client GPU addresses.  The client copies
 * replicas in its own segment with memcpy (MC_STORE_MEMCPY), which device
 * memory must never see: such buffers go through the engine, whose device
 * copies move them.  The emulated backend (tests/support/devmem_emu.c)
 * maps its "device memory" PROT_NONE, so a memcpy of it faults.  One
 * in-process master, one client whose own segment holds every replica.
 *
 * Reads into device memory are checked (client_verify.c, "reads into
 * device memory"): their bytes are hashed in the engine's pinned staging
 * buffers before the copy to the device.  The same program, built with
 * -DMC_TEST_CUDA=1, is gpu_store_verify: the real CUDA backend with
 * cudaMalloc'ed buffers, exit 77 without a device; only the checked reads
 * run there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "master/server.h"
#include "mem/devmem.h"
#include "mooncake/store.h"
#include "store/client_int.h" /* the holder's segment, the client's metrics */
#include "store/client_metrics.h"
#include "store_t.h"
#include "support.h"
#ifndef MC_TEST_CUDA
#include "devmem_emu.h"
#endif

static struct mc_store *S;
static const struct mc_devmem_ops *dm;

static int group_setup(void **state)
{
	(void)state;
#ifndef MC_TEST_CUDA
	dm = &mc_devmem_emu_ops;
	mc_devmem_set_backend(dm); /* before any engine */
#endif
	if (st_master_start(NULL) != 0)
		return -1;
	S = st_client_new(16 << 20, 4 << 20);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	mc_store_free(S);
	st_master_stop();
	return 0;
}

#ifndef MC_TEST_CUDA /* device 1, and the emulation's own checks */
/* Device memory in and out of the client's own segment: put_from,
 * get_into, the multi-buffer and ranged reads, and a put session. */
static void device_buffers_skip_the_memcpy_shortcut(void **state)
{
	enum { LEN = 256 << 10 };
	struct mc_store_config own = {.replica_num = 1, .preferred_segment = mc_store_hostname(S)};
	char *host = malloc(LEN), *back = malloc(LEN);
	void *src = NULL, *dst = NULL;
	const char *key = "dev-1";
	(void)state;
	assert_int_equal(dm->dev_alloc(0, LEN, &src), MC_OK);
	assert_int_equal(dm->dev_alloc(1, LEN, &dst), MC_OK);
	mc_test_fill(host, LEN, 301);
	assert_int_equal(dm->copy(src, host, LEN), MC_OK);
	assert_int_equal(mc_store_register_buffer(S, src, LEN), MC_OK);
	assert_int_equal(mc_store_register_buffer(S, dst, LEN), MC_OK);
	assert_int_equal(mc_store_register_buffer(S, back, LEN), MC_OK);

	assert_int_equal(mc_store_put_from(S, key, src, LEN, &own), MC_OK);
	{
		void *got = NULL;
		assert_int_equal(mc_store_get(S, key, &got), LEN);
		assert_memory_equal(got, host, LEN);
		free(got);
	}
	assert_int_equal(mc_store_get_into(S, key, dst, LEN), LEN);
	assert_int_equal(dm->copy(back, dst, LEN), MC_OK);
	assert_memory_equal(back, host, LEN);
	{
		/* scatter into a device buffer and a host one */
		void *b[2] = {(char *)dst + 100, back};
		size_t l[2] = {1000, LEN - 1000};
		void *const *bufs[1] = {b};
		const size_t *lens[1] = {l};
		size_t nb[1] = {2};
		int64_t got;
		memset(back, 0, LEN);
		assert_int_equal(
			mc_store_batch_get_into_multi_buffers(S, &key, bufs, lens, nb, 1, &got),
			MC_OK);
		assert_int_equal(got, LEN);
		assert_memory_equal(back, host + 1000, LEN - 1000);
		assert_int_equal(dm->copy(back, (char *)dst + 100, 1000), MC_OK);
		assert_memory_equal(back, host, 1000);
	}
	{
		struct mc_store_range r = {.dst_offset = 10, .src_offset = 5000, .length = 3000};
		int64_t got;
		struct mc_store_range_read rd = {key, dst, &r, 1, &got};
		assert_int_equal(mc_store_get_into_ranges(S, &rd, 1), MC_OK);
		assert_int_equal(got, 3000);
		assert_int_equal(dm->copy(back, (char *)dst + 10, 3000), MC_OK);
		assert_memory_equal(back, host + 5000, 3000);
	}
	{
		/* a put session filled from device memory in two ranges */
		const char *sk = "dev-session";
		uint64_t size = LEN;
		void *b[2] = {(char *)src + LEN / 2, src};
		size_t l[2] = {LEN / 2, LEN / 2};
		uint64_t o[2] = {LEN / 2, 0};
		void *const *bufs[1] = {b};
		const size_t *lens[1] = {l};
		const uint64_t *offs[1] = {o};
		size_t nb[1] = {2};
		mc_status st;
		int64_t got;
		void *whole = NULL;
		assert_int_equal(mc_store_batch_put_session_start(S, &sk, &size, 1, &own, &st),
				 MC_OK);
		assert_int_equal(mc_store_batch_put_from_multi_buffer_ranges(S, &sk, bufs, lens,
									     offs, nb, 1, &got),
				 MC_OK);
		assert_int_equal(got, LEN);
		assert_int_equal(mc_store_batch_put_session_end(S, &sk, 1, &st), MC_OK);
		assert_int_equal(mc_store_get(S, sk, &whole), LEN);
		assert_memory_equal(whole, host, LEN);
		free(whole);
	}
	assert_int_equal(mc_store_unregister_buffer(S, src), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(S, dst), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(S, back), MC_OK);
	dm->dev_free(src);
	dm->dev_free(dst);
	free(host);
	free(back);
}

#endif
/* A client with a segment of its own, beside S, to hold replicas that S
 * reads through the engine. */
static struct mc_store *holder_new(void)
{
	return st_client_new(32 << 20, 4 << 20);
}

/* Flip a byte of key's first replica, through its holder's mapping (in
 * this process). */
static void flip_first_replica(const char *key, size_t at)
{
	struct mc_store_replica_desc d[2];

	assert_true(mc_store_get_replica_desc(S, key, d, 2) >= 1);
	((volatile char *)(uintptr_t)d[0].address)[at] ^= 0x10;
}

/*
 * A whole read into device memory from another holder (over TCP, so
 * through the staging buffers) is checked: its bytes are hashed in the
 * pinned buffers before their copy to the device.  Good objects of one and
 * of many staging chunks arrive exact; a byte flipped in the holder's copy
 * fails get_into and batch_get_into with MC_ERR_CHECKSUM_MISMATCH (one
 * replica), counted; with two replicas the good one is served, exact.
 */
static void device_reads_are_checked_in_the_staging_buffers(void **state)
{
	enum { BIG = (3 << 20) + 4099, SMALL = 5000 };
	struct mc_store *H = holder_new(), *H2 = holder_new();
	const char *two_names[2] = {mc_store_hostname(H), mc_store_hostname(H2)};
	struct mc_store_config on_h = {.replica_num = 1, .preferred_segment = mc_store_hostname(H)};
	struct mc_store_config two = {
		.replica_num = 2, .preferred_segments = two_names, .n_preferred_segments = 2};
	char *host = malloc(BIG), *back = malloc(BIG);
	void *dst = NULL;
	uint64_t bad0 = atomic_load(&S->metrics->checksum_mismatches);
	const char *keys[4] = {"dv-small", "dv-big", "dv-bad", "dv-two"};

	(void)state;
	assert_int_equal(dm->dev_alloc(0, 2 * (size_t)BIG, &dst), MC_OK);
	assert_int_equal(mc_store_register_buffer(S, dst, 2 * (size_t)BIG), MC_OK);
	mc_test_fill(host, BIG, 77);
	assert_int_equal(mc_store_put(S, keys[0], host, SMALL, &on_h), MC_OK);
	assert_int_equal(mc_store_put(S, keys[1], host, BIG, &on_h), MC_OK);
	assert_int_equal(mc_store_put(S, keys[2], host, BIG, &on_h), MC_OK);
	assert_int_equal(mc_store_put(S, keys[3], host, BIG, &two), MC_OK);
	/* good ones arrive exact */
	for (int i = 0; i < 2; i++) {
		size_t len = i ? BIG : SMALL;

		assert_int_equal(mc_store_get_into(S, keys[i], dst, BIG), len);
		memset(back, 0, BIG);
		assert_int_equal(dm->copy(back, dst, len), MC_OK);
		assert_memory_equal(back, host, len);
	}
	assert_int_equal(atomic_load(&S->metrics->checksum_mismatches), bad0);
	/* one replica, flipped: the distinct code */
	flip_first_replica(keys[2], BIG - 7);
	assert_int_equal(mc_store_get_into(S, keys[2], dst, BIG), MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(atomic_load(&S->metrics->checksum_mismatches), bad0 + 1);
	/* two replicas, the first flipped: the other is served, exact, in a
	 * batch beside a good one */
	flip_first_replica(keys[3], 1 << 20);
	{
		const char *k[2] = {keys[1], keys[3]};
		void *bufs[2] = {dst, (char *)dst + BIG};
		size_t caps[2] = {BIG, BIG};
		int64_t res[2];

		assert_int_equal(mc_store_batch_get_into(S, k, bufs, caps, 2, res), MC_OK);
		assert_int_equal(res[0], BIG);
		assert_int_equal(res[1], BIG);
		for (int i = 0; i < 2; i++) {
			memset(back, 0, BIG);
			assert_int_equal(dm->copy(back, bufs[i], BIG), MC_OK);
			assert_memory_equal(back, host, BIG);
		}
	}
	assert_int_equal(atomic_load(&S->metrics->checksum_mismatches), bad0 + 2);
	assert_int_equal(mc_store_unregister_buffer(S, dst), MC_OK);
	dm->dev_free(dst);
	mc_store_free(H);
	mc_store_free(H2);
	free(host);
	free(back);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#ifndef MC_TEST_CUDA
		cmocka_unit_test(device_buffers_skip_the_memcpy_shortcut),
#endif
		cmocka_unit_test(device_reads_are_checked_in_the_staging_buffers),
	};
#ifdef MC_TEST_CUDA
	dm = mc_devmem();
	if (!dm) {
		printf("1..0 # SKIP no CUDA device (or no CUDA runtime)\n");
		return 77;
	}
#endif
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

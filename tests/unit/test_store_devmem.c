/*
 * tests/unit/test_store_devmem.c - the store client with device memory.
 *
 * vLLM's store connector hands the client GPU addresses.  The client copies
 * replicas in its own segment with memcpy (MC_STORE_MEMCPY), which device
 * memory must never see: such buffers go through the engine, whose device
 * copies move them.  The emulated backend (tests/support/devmem_emu.c)
 * maps its "device memory" PROT_NONE, so a memcpy of it faults.  One
 * in-process master, one client whose own segment holds every replica.
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
#include "devmem_emu.h"
#include "master/server.h"
#include "mooncake/store.h"
#include "support.h"

static struct mc_master_server *master;
static struct mc_store *S;
static const struct mc_devmem_ops *dm = &mc_devmem_emu_ops;

static int group_setup(void **state)
{
	char addr[64], meta[128];
	struct mc_store_params p = {
		.local_hostname = "127.0.0.1",
		.metadata_server = meta,
		.global_segment_size = 16 << 20,
		.local_buffer_size = 4 << 20,
		.protocol = "tcp",
		.master_server_addr = addr,
	};
	(void)state;
	mc_devmem_set_backend(dm); /* before any engine */
	master = mc_test_master_start(NULL, addr, sizeof(addr), meta, sizeof(meta));
	if (!master)
		return -1;
	if (mc_store_new(&S) != MC_OK || mc_store_setup(S, &p) != MC_OK)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	mc_store_free(S);
	mc_master_server_stop(master);
	return 0;
}

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(device_buffers_skip_the_memcpy_shortcut),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

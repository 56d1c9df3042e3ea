/*
 * tests/unit/test_store_mount.c - a store client's extra segments
 * (client_mount.c) against an in-process master over loopback: a file
 * segment whose bytes are the objects', an allocated one, the refusals,
 * and mounts and frees on several threads while the heartbeat runs (for
 * ASan and TSan; tests/python/test_store_mount.py covers the Python
 * class, a master restart and the SSD tier).
 *
 * The writer W has no global segment, so every object lands in an extra
 * one; R, with none either, reads them through the engine.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "master/server.h"
#include "mooncake/store.h"
#include "store_t.h"
#include "support.h"

#define MiB (1ull << 20)

static struct mc_store *W, *R;

/* No global segment: every object lands in an extra one. */
static int group_setup(void **state)
{
	(void)state;
	return st_setup_pair(NULL, 0, 4 * MiB, &W, &R);
}

static int group_teardown(void **state)
{
	(void)state;
	st_teardown_pair(W, R);
	return 0;
}

/* A file of size bytes under /tmp, unlinked (the fd keeps it); its path in path. */
static int temp_file(uint64_t size, char *path, size_t cap)
{
	int fd;

	snprintf(path, cap, "/tmp/mc-test-mount-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	return fd;
}

static void file_segment_holds_the_objects(void **state)
{
	char path[64], id[MC_STORE_SEGMENT_ID_MAX];
	static char val[256 << 10], file[16 << 20];
	int fd = temp_file(16 * MiB, path, sizeof(path));

	(void)state;
	for (size_t i = 0; i < sizeof(val); i++)
		val[i] = (char)(i * 7 + 3);
	assert_int_equal(mc_store_put(W, "fs/k", val, sizeof(val), NULL),
			 MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_store_mount_segment(W, path, 16 * MiB, 0, NULL, NULL, id), MC_OK);
	assert_int_equal(mc_store_put(W, "fs/k", val, sizeof(val), NULL), MC_OK);
	/* the bytes are in the file itself */
	assert_int_equal(pread(fd, file, sizeof(file), 0), sizeof(file));
	assert_non_null(memmem(file, sizeof(file), val, sizeof(val)));
	st_expect_get(R, "fs/k", val, sizeof(val));
	assert_int_equal(mc_store_unmount_and_free_segment(W, id, 0), MC_OK);
	assert_int_equal(mc_store_is_exist(R, "fs/k"), 0);
	assert_int_equal(mc_store_unmount_and_free_segment(W, id, 0), MC_ERR_INVALID_PARAMS);
	close(fd);
	unlink(path);
}

static void refusals(void **state)
{
	char path[64], id[MC_STORE_SEGMENT_ID_MAX];
	int fd = temp_file(MiB, path, sizeof(path));
	uint64_t got = 1;
	long page = sysconf(_SC_PAGESIZE);

	(void)state;
	assert_int_equal(mc_store_mount_segment(W, "/nonexistent/x", MiB, 0, NULL, NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "cannot open"));
	assert_int_equal(mc_store_mount_segment(W, "/dev/null", MiB, 0, NULL, NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_mount_segment(W, path, 0, 0, NULL, NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_mount_segment(W, path, MiB + 1, 0, NULL, NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "past the end"));
	assert_int_equal(mc_store_mount_segment(W, path, MiB, (uint64_t)page, NULL, NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_mount_segment(W, path, 4096, 1, NULL, NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_mount_segment(W, path, MiB, UINT64_MAX - 100, NULL, NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_mount_segment(W, path, MiB, 0, "rdma", NULL, id),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_mount_segment(W, path, MiB, 0, NULL, NULL, NULL),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_allocate_and_mount_segment(W, 0, NULL, NULL, id, &got),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_allocate_and_mount_segment(W, UINT64_MAX, NULL, NULL, id, &got),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_unmount_and_free_segment(W, "7-7", 0), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_unmount_and_free_segment(W, "7-", 0), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_unmount_and_free_segment(W, NULL, 0), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_unmount_and_free_segment(W, "1-2", 3601ull * 1000),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_unmount_local_disk_segment(W, 0), MC_ERR_INVALID_PARAMS);
	close(fd);
	unlink(path);
}

/* Four threads each mount, put, read back and free allocated segments,
 * while the heartbeat pings and the reader reads.  A thread's object may
 * land in another thread's segment, freed meanwhile: a put or get may
 * then fail, but a get never answers other bytes. */
static atomic_int puts_ok, gets_ok;

static void *churn_main(void *arg)
{
	uintptr_t t = (uintptr_t)arg;
	char id[MC_STORE_SEGMENT_ID_MAX], key[64], val[4096];
	uint64_t got = 0;

	for (int round = 0; round < 5; round++) {
		void *back = NULL;
		int64_t n;

		if (mc_store_allocate_and_mount_segment(W, 2 * MiB, "tcp", NULL, id, &got) !=
			    MC_OK ||
		    got != 2 * MiB)
			return (void *)"mount";
		snprintf(key, sizeof(key), "churn/%u/%d", (unsigned)t, round);
		memset(val, (int)(t * 16 + (uintptr_t)round), sizeof(val));
		if (mc_store_put(W, key, val, sizeof(val), NULL) == MC_OK)
			atomic_fetch_add(&puts_ok, 1);
		n = mc_store_get(R, key, &back);
		if (n >= 0 && (n != (int64_t)sizeof(val) || memcmp(back, val, sizeof(val)) != 0)) {
			free(back);
			return (void *)"get (other bytes)";
		}
		free(back);
		if (n >= 0)
			atomic_fetch_add(&gets_ok, 1);
		if (mc_store_unmount_and_free_segment(W, id, round % 2 ? 20 : 0) != MC_OK)
			return (void *)"free";
	}
	return NULL;
}

static void mounts_and_frees_on_many_threads(void **state)
{
	pthread_t th[4];
	char id[MC_STORE_SEGMENT_ID_MAX];
	uint64_t got = 0;

	(void)state;
	/* one segment that stays, so a put never finds the cluster empty */
	assert_int_equal(mc_store_allocate_and_mount_segment(W, 8 * MiB, NULL, NULL, id, &got),
			 MC_OK);
	for (uintptr_t i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, churn_main, (void *)i), 0);
	for (int i = 0; i < 4; i++) {
		void *why = NULL;
		pthread_join(th[i], &why);
		if (why)
			fail_msg("thread %d: %s failed: %s", i, (const char *)why, mc_last_error());
	}
	assert_true(atomic_load(&puts_ok) > 0 && atomic_load(&gets_ok) > 0);
	/* close frees what is left (ASan: nothing leaks) */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(file_segment_holds_the_objects),
		cmocka_unit_test(refusals),
		cmocka_unit_test(mounts_and_frees_on_many_threads),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

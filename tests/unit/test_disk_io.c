/*
 * tests/unit/test_disk_io.c - the SSD tier's file I/O (store/disk_io.h)
 * on real files: batches through io_uring and through the forced
 * pread/pwrite fallback give the same bytes, every operation moves all
 * its bytes or fails with its own status, a staging buffer registered as
 * a fixed buffer is read and written in place, and O_DIRECT is used where
 * the directory takes it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "store/disk_io.h"
#include "support.h"

static char dir[256];
static int dirfd_ = -1;

static int dir_setup(void **state)
{
	if (!mc_test_tmpdir(*state, "mc-disk-io", dir, sizeof(dir)))
		return -1;
	dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return dirfd_ < 0 ? -1 : 0;
}

static int dir_teardown(void **state)
{
	(void)state;
	close(dirfd_);
	return mc_test_rmtree(dir);
}

static int new_file(const char *name, int extra_flags)
{
	int fd = openat(dirfd_, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | extra_flags, 0644);
	assert_true(fd >= 0);
	return fd;
}

/* 50 writes of sizes from 1 byte to 3 MiB, laid end to end, then read
 * back in one batch; the ring is 4 deep, so most wait for a free slot. */
static void batches_round_trip(bool uring)
{
	enum { N = 50 };
	struct mc_disk_io_params p = {.use_uring = uring, .depth = 4};
	struct mc_disk_io *io;
	struct mc_disk_op ops[N];
	char *src[N], *dst[N];
	size_t len[N];
	uint64_t off = 0;
	int fd = new_file(uring ? "ring" : "sync", 0);

	assert_int_equal(mc_disk_io_new(&p, &io), MC_OK);
	assert_int_equal(mc_disk_io_uring(io), uring);
	for (int i = 0; i < N; i++) {
		len[i] = i == 7 ? (3u << 20) : (size_t)1 + (size_t)i * 977;
		src[i] = malloc(len[i]);
		dst[i] = calloc(1, len[i]);
		mc_test_fill(src[i], len[i], (uint64_t)i);
		ops[i] = (struct mc_disk_op){fd, true, src[i], len[i], off, MC_ERR_INTERNAL, false};
		off += len[i];
	}
	assert_int_equal(mc_disk_io_run(io, ops, N), MC_OK);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].status, MC_OK);
		ops[i].write = false;
		ops[i].buf = dst[i];
		ops[i].status = MC_ERR_INTERNAL;
	}
	assert_int_equal(mc_disk_io_run(io, ops, N), MC_OK);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].status, MC_OK);
		assert_memory_equal(dst[i], src[i], len[i]);
		free(src[i]);
		free(dst[i]);
	}
	/* a read past the end fails alone, with its own status and reason */
	{
		char a[100], b[100];
		struct mc_disk_op two[2] = {
			{fd, false, a, sizeof(a), 0, MC_OK, false},
			{fd, false, b, sizeof(b), off - 10, MC_OK, false},
		};
		assert_int_equal(mc_disk_io_run(io, two, 2), MC_ERR_FILE_READ_FAIL);
		assert_int_equal(two[0].status, MC_OK);
		assert_int_equal(two[1].status, MC_ERR_FILE_READ_FAIL);
		assert_non_null(strstr(mc_last_error(), "past the end"));
	}
	/* a descriptor that is not open: every op fails, none hangs */
	{
		char a[10];
		struct mc_disk_op bad = {987654, false, a, sizeof(a), 0, MC_OK, false};
		assert_int_equal(mc_disk_io_run(io, &bad, 1), MC_ERR_FILE_READ_FAIL);
		assert_non_null(strstr(mc_last_error(), "Bad file descriptor"));
	}
	close(fd);
	mc_disk_io_free(io);
}

static void batches_through_io_uring(void **state)
{
	(void)state;
	batches_round_trip(true);
}

static void batches_through_the_fallback(void **state)
{
	(void)state;
	batches_round_trip(false);
}

/* The staging buffer registered as a fixed buffer, with O_DIRECT where
 * the directory takes it: aligned blocks in and out of it, in place. */
static void fixed_staging_buffer(void **state)
{
	const size_t len = 1u << 20;
	struct mc_disk_io_params p = {.use_uring = true};
	struct mc_disk_io *io;
	uint8_t *stage = aligned_alloc(4096, len), *copy = malloc(len);
	bool direct = mc_disk_dir_direct(dirfd_);
	struct mc_disk_op ops[4];
	int fd;
	(void)state;

	p.fixed = stage;
	p.fixed_len = len;
	assert_int_equal(mc_disk_io_new(&p, &io), MC_OK);
	if (geteuid() == 0) /* root may lock the pages; others depend on RLIMIT_MEMLOCK */
		assert_true(mc_disk_io_fixed(io));
	fd = new_file("staged", direct ? O_DIRECT : 0);
	mc_test_fill(stage, len, 9);
	memcpy(copy, stage, len);
	for (int i = 0; i < 4; i++)
		ops[i] = (struct mc_disk_op){fd,
					     true,
					     stage + (size_t)i * (len / 4),
					     len / 4,
					     (uint64_t)(3 - i) * (len / 4),
					     MC_OK,
					     direct};
	assert_int_equal(mc_disk_io_run(io, ops, 4), MC_OK);
	memset(stage, 0, len);
	/* read each quarter back into the place it was written from */
	for (int i = 0; i < 4; i++) {
		ops[i].write = false;
		ops[i].buf = stage + (size_t)i * (len / 4);
		ops[i].off = (uint64_t)(3 - i) * (len / 4);
	}
	assert_int_equal(mc_disk_io_run(io, ops, 4), MC_OK);
	assert_memory_equal(stage, copy, len);
	close(fd);
	mc_disk_io_free(io);
	free(stage);
	free(copy);
}

static void direct_probe_leaves_nothing(void **state)
{
	DIR *d;
	struct dirent *de;
	int entries = 0;
	(void)state;
	(void)mc_disk_dir_direct(dirfd_);
	(void)mc_disk_dir_direct(dirfd_);
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			entries++;
	closedir(d);
	assert_int_equal(entries, 0);
}

static void bad_params(void **state)
{
	struct mc_disk_io *io = (void *)1;
	struct mc_disk_io_params p = {.use_uring = true, .depth = 100000};
	(void)state;
	assert_int_equal(mc_disk_io_new(&p, &io), MC_ERR_INVALID_PARAMS);
	assert_null(io);
	p.depth = 0;
	p.fixed_len = 4096;
	assert_int_equal(mc_disk_io_new(&p, &io), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_disk_io_run(NULL, NULL, 0), MC_OK);
}

#define IN(t, where) \
	cmocka_unit_test_prestate_setup_teardown(t, dir_setup, dir_teardown, (void *)where)

int main(void)
{
	const struct CMUnitTest tests[] = {
		IN(batches_through_io_uring, "/tmp"),
		IN(batches_through_io_uring, "/dev/shm"),
		IN(batches_through_the_fallback, "/tmp"),
		IN(fixed_staging_buffer, "/tmp"),
		IN(fixed_staging_buffer, "/dev/shm"),
		IN(direct_probe_leaves_nothing, "/tmp"),
		IN(direct_probe_leaves_nothing, "/dev/shm"),
		cmocka_unit_test(bad_params),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_disk_store.c - the SSD tier's local disk store
 * (store/disk_store.h) on real files: objects written in buckets, read
 * back, found again after a restart and after a writer is killed, damage
 * refused, removal leaving no file behind, caps and eviction (fifo, lru,
 * none, the watermarks, a reader holding a bucket), one process per
 * directory, bad directories refused.
 *
 * Every case runs twice: in a directory under /tmp (the machine's disk)
 * and under /dev/shm (tmpfs, where it exists).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "store/disk_io.h"
#include "store/disk_store.h"
#include "support.h"

static char dir[256];
/* the backend under test: the cases that hold for both run with each */
static bool fpk;

static int dir_setup(void **state)
{
	fpk = false;
	return mc_test_tmpdir(*state, "mc-dstore", dir, sizeof(dir)) ? 0 : -1;
}

static int dir_setup_fpk(void **state)
{
	int rc = dir_setup(state);
	fpk = true;
	return rc;
}

static int dir_teardown(void **state)
{
	(void)state;
	return mc_test_rmtree(dir);
}

/* A configuration for dir, whatever the environment says. */
static void cfg_make(struct mc_disk_store_config *cfg)
{
	mc_disk_store_config_init(cfg);
	free(cfg->path);
	cfg->path = strdup(dir);
	cfg->max_total_size = 1ull << 30;
	cfg->max_physical_bytes = 0;
	cfg->bucket_keys_limit = 500;
	cfg->bucket_size_limit = 256u << 20;
	cfg->watermark_eviction = true;
	free(cfg->eviction_policy);
	cfg->eviction_policy = strdup("fifo");
	free(cfg->backend);
	cfg->backend = strdup(fpk ? "file_per_key_storage_backend" : "bucket_storage_backend");
}

static struct mc_disk_store *open_ok(struct mc_disk_store_config *cfg)
{
	struct mc_disk_store *ds = NULL;
	mc_status st = mc_disk_store_open(cfg, &ds);
	if (st != MC_OK)
		fprintf(stderr, "open: %s\n", mc_last_error());
	assert_int_equal(st, MC_OK);
	return ds;
}

/* Files ending in suffix, recursively under path. */
static size_t count_tree(const char *path, const char *suffix)
{
	DIR *d = opendir(path);
	struct dirent *de;
	size_t n = 0, s = strlen(suffix);
	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);
		char sub[1024];
		if (de->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		if (de->d_type == DT_DIR)
			n += count_tree(sub, suffix);
		else if (l > s && strcmp(de->d_name + l - s, suffix) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Files of the bucket backend ending in suffix; with the file-per-key
 * backend, ".bucket" and ".meta" both count its .kv files (each is data
 * and index at once). */
static size_t count_files(const char *suffix)
{
	DIR *d;
	if (fpk) {
		char sub[512];
		snprintf(sub, sizeof(sub), "%s/file_per_key_dir", dir);
		if (strcmp(suffix, ".bucket") == 0 || strcmp(suffix, ".meta") == 0)
			return count_tree(sub, ".kv");
		return count_tree(sub, suffix);
	}
	d = opendir(dir);
	struct dirent *de;
	size_t n = 0, s = strlen(suffix);
	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);
		if (l > s && strcmp(de->d_name + l - s, suffix) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* The name of the first file (in name order) ending in suffix. */
static void first_file(const char *suffix, char *out, size_t cap)
{
	struct dirent **v;
	int n = scandir(dir, &v, NULL, alphasort);
	size_t s = strlen(suffix);
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		size_t l = strlen(v[i]->d_name);
		if (!out[0] && l > s && strcmp(v[i]->d_name + l - s, suffix) == 0)
			snprintf(out, cap, "%s/%s", dir, v[i]->d_name);
		free(v[i]);
	}
	free(v);
	assert_true(out[0] != '\0');
}

static void key_of(char *out, size_t cap, int i)
{
	snprintf(out, cap, "key-%06d", i);
}

static size_t len_of(int i)
{
	return (size_t)(i * 977) % 20000 + 1;
}

/* Puts keys [from, to) with their values (seeded by seed), n per call. */
static void put_range(struct mc_disk_store *ds, int from, int to, int per_call, uint64_t seed)
{
	for (int i = from; i < to; i += per_call) {
		int n = to - i < per_call ? to - i : per_call;
		struct mc_disk_obj *o = calloc((size_t)n, sizeof(*o));
		char(*keys)[32] = calloc((size_t)n, 32);
		for (int j = 0; j < n; j++) {
			key_of(keys[j], 32, i + j);
			o[j].key = keys[j];
			o[j].key_len = strlen(keys[j]);
			o[j].len = len_of(i + j);
			o[j].data = malloc(o[j].len);
			mc_test_fill((void *)o[j].data, o[j].len, seed + (uint64_t)(i + j));
		}
		assert_int_equal(mc_disk_store_put(ds, o, (size_t)n, NULL), MC_OK);
		for (int j = 0; j < n; j++) {
			assert_int_equal(o[j].status, MC_OK);
			free((void *)o[j].data);
		}
		free(o);
		free(keys);
	}
}

/* Key i reads back with the value of seed. */
static void check_key(struct mc_disk_store *ds, int i, uint64_t seed)
{
	char key[32];
	size_t len = len_of(i);
	char *want = malloc(len), *got = malloc(len);
	uint64_t n = 0;
	key_of(key, sizeof(key), i);
	mc_test_fill(want, len, seed + (uint64_t)i);
	assert_int_equal(mc_disk_store_get(ds, key, strlen(key), got, len, &n), MC_OK);
	assert_int_equal(n, len);
	assert_memory_equal(got, want, len);
	free(want);
	free(got);
}

static bool has_key(struct mc_disk_store *ds, int i)
{
	char key[32];
	key_of(key, sizeof(key), i);
	return mc_disk_store_contains(ds, key, strlen(key), NULL);
}

/* ---- round trips and restarts ------------------------------------------------------------ */

static void round_trip_many_keys_across_buckets(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	struct mc_disk_get g[3];
	char bufs[3][20000], small[4];
	(void)state;
	cfg_make(&cfg);
	cfg.bucket_keys_limit = 50;
	ds = open_ok(&cfg);
	put_range(ds, 0, 400, 100, 1); /* 8 buckets of 50 keys */
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.objects, 400);
	assert_int_equal(st.buckets, 8);
	assert_int_equal(count_files(".bucket"), 8);
	assert_true(st.logical_bytes > 0 && st.physical_bytes > 0);
	for (int i = 0; i < 400; i++)
		check_key(ds, i, 1);

	/* batched, with a missing key and a buffer too small */
	g[0] = (struct mc_disk_get){
		.key = "key-000007", .key_len = 10, .dst = bufs[0], .cap = 20000};
	g[1] = (struct mc_disk_get){.key = "nope", .key_len = 4, .dst = bufs[1], .cap = 20000};
	g[2] = (struct mc_disk_get){
		.key = "key-000399", .key_len = 10, .dst = bufs[2], .cap = 20000};
	assert_int_equal(mc_disk_store_get_batch(ds, g, 3), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(g[0].status, MC_OK);
	assert_int_equal(g[0].len, len_of(7));
	assert_int_equal(g[1].status, MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(g[2].status, MC_OK);
	assert_int_equal(mc_disk_store_get(ds, "key-000002", 10, small, sizeof(small), NULL),
			 MC_ERR_BUFFER_OVERFLOW);
	/* all 400 in one batch: eight buckets, one batch of I/O */
	{
		struct mc_disk_get *all = calloc(400, sizeof(*all));
		char(*keys)[32] = calloc(400, 32);
		char *want = malloc(20000);
		for (int i = 0; i < 400; i++) {
			key_of(keys[i], 32, i);
			all[i] = (struct mc_disk_get){.key = keys[i],
						      .key_len = strlen(keys[i]),
						      .dst = malloc(20000),
						      .cap = 20000};
		}
		assert_int_equal(mc_disk_store_get_batch(ds, all, 400), MC_OK);
		for (int i = 0; i < 400; i++) {
			assert_int_equal(all[i].status, MC_OK);
			assert_int_equal(all[i].len, len_of(i));
			mc_test_fill(want, len_of(i), 1 + (uint64_t)i);
			assert_memory_equal(all[i].dst, want, len_of(i));
			free(all[i].dst);
		}
		free(want);
		free(keys);
		free(all);
	}
	mc_disk_store_stats(ds, &st);
	assert_true(st.reads >= 802);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void restart_finds_every_object(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	(void)state;
	cfg_make(&cfg);
	cfg.bucket_keys_limit = 64;
	ds = open_ok(&cfg);
	put_range(ds, 0, 300, 100, 7);
	/* a key replaced by a newer write, one removed: both stay so after a restart */
	put_range(ds, 10, 11, 1, 99);
	assert_int_equal(mc_disk_store_remove(ds, "key-000020", 10), MC_OK);
	mc_disk_store_close(ds);

	ds = open_ok(&cfg);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.objects, 299);
	assert_int_equal(st.rescan_objects, 299);
	{
		/* what the client re-registers with the master: every key, its size */
		struct mc_disk_keys all = {0};
		bool seen[300] = {false};
		assert_int_equal(mc_disk_store_list(ds, &all), MC_OK);
		assert_int_equal(all.n, 299);
		for (size_t k = 0; k < all.n; k++) {
			int i = atoi(all.v[k].key + 4);
			assert_true(i >= 0 && i < 300 && i != 20 && !seen[i]);
			seen[i] = true;
			assert_int_equal(all.v[k].len, len_of(i));
			assert_int_equal(all.v[k].key_len, strlen(all.v[k].key));
		}
		mc_disk_keys_release(&all);
	}
	for (int i = 0; i < 300; i++) {
		if (i == 20)
			assert_false(has_key(ds, i));
		else
			check_key(ds, i, i == 10 ? 99 : 7);
	}
	/* new buckets sort after the old ones: the newest copy still wins */
	put_range(ds, 30, 31, 1, 55);
	mc_disk_store_close(ds);
	ds = open_ok(&cfg);
	check_key(ds, 30, 55);
	check_key(ds, 10, 99);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void append_groups_and_reports_each_key(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_keys done = {0};
	struct mc_disk_store *ds;
	struct mc_disk_obj o[25];
	char keys[25][32], val[100];
	(void)state;
	cfg_make(&cfg);
	cfg.bucket_keys_limit = 10;
	ds = open_ok(&cfg);
	memset(val, 'v', sizeof(val));
	for (int i = 0; i < 25; i++) {
		key_of(keys[i], 32, i);
		o[i] = (struct mc_disk_obj){keys[i], strlen(keys[i]), val, sizeof(val), MC_OK};
	}
	assert_int_equal(mc_disk_store_append(ds, o, 25, &done, NULL), MC_OK);
	assert_int_equal(done.n, 20);
	for (int i = 0; i < 25; i++)
		assert_int_equal(o[i].status, i < 20 ? MC_OK : MC_INPROGRESS);
	assert_int_equal(mc_disk_store_pending(ds), 5);
	assert_int_equal(count_files(".bucket"), 2);
	assert_false(has_key(ds, 22)); /* waiting */
	mc_disk_keys_release(&done);
	assert_int_equal(mc_disk_store_flush(ds, &done, NULL), MC_OK);
	assert_int_equal(done.n, 5);
	assert_string_equal(done.v[0].key, "key-000020");
	assert_int_equal(done.v[0].status, MC_OK);
	assert_int_equal(done.v[0].len, sizeof(val));
	assert_true(has_key(ds, 22));
	assert_int_equal(mc_disk_store_pending(ds), 0);
	mc_disk_keys_release(&done);
	/* a bad key is refused on its own */
	o[0].key_len = 0;
	assert_int_equal(mc_disk_store_append(ds, o, 2, &done, NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(o[0].status, MC_ERR_INVALID_PARAMS);
	assert_int_equal(o[1].status, MC_INPROGRESS);
	mc_disk_keys_release(&done);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

/* ---- crashes ------------------------------------------------------------------------------ */

/* A child writes buckets of 8 x 256 KiB, telling the parent after each;
 * the parent kills it in the middle of a later one. */
static void killed_writer_leaves_nothing_incomplete(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store *ds;
	int pfd[2], done = 0, status;
	pid_t pid;
	(void)state;
	cfg_make(&cfg);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct mc_disk_store *c = NULL;
		close(pfd[0]);
		if (mc_disk_store_open(&cfg, &c) != MC_OK)
			_exit(2);
		for (int b = 0; b < 10000; b++) {
			struct mc_disk_obj o[8];
			char keys[8][32];
			for (int j = 0; j < 8; j++) {
				key_of(keys[j], 32, b * 8 + j);
				o[j] = (struct mc_disk_obj){keys[j], strlen(keys[j]), NULL,
							    len_of(b * 8 + j), MC_OK};
			}
			/* each value is its own buffer, filled as check_key expects */
			char *vals = malloc(8 * 20000);
			for (int j = 0; j < 8; j++) {
				mc_test_fill(vals + j * 20000, o[j].len, 3 + (uint64_t)(b * 8 + j));
				o[j].data = vals + j * 20000;
			}
			if (mc_disk_store_put(c, o, 8, NULL) != MC_OK)
				_exit(3);
			free(vals);
			if (write(pfd[1], &b, sizeof(b)) != sizeof(b))
				_exit(4);
		}
		_exit(0);
	}
	close(pfd[1]);
	/* while the child holds the directory, this process is refused */
	{
		int b;
		assert_int_equal(read(pfd[0], &b, sizeof(b)), sizeof(b));
		done = b + 1;
		ds = NULL;
		assert_int_equal(mc_disk_store_open(&cfg, &ds), MC_ERR_FILE_LOCK_FAIL);
		assert_non_null(strstr(mc_last_error(), "in use by another process"));
		while (done < 5 && read(pfd[0], &b, sizeof(b)) == sizeof(b))
			done = b + 1;
	}
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	close(pfd[0]);

	ds = open_ok(&cfg);
	/* every bucket the child finished is there, whole */
	for (int i = 0; i < done * 8; i++)
		check_key(ds, i, 3);
	/* anything else found is complete too; nothing half-written is */
	for (int i = done * 8; i < (done + 50) * 8; i++)
		if (has_key(ds, i))
			check_key(ds, i, 3);
	assert_int_equal(count_files(".meta.tmp"), 0);
	assert_int_equal(count_files(".bucket"), count_files(".meta"));
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void crash_leftovers_are_dropped(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	char path[512];
	FILE *f;
	(void)state;
	cfg_make(&cfg);
	ds = open_ok(&cfg);
	put_range(ds, 0, 10, 10, 5);
	mc_disk_store_close(ds);
	/* as a crash leaves them: a data file without its index, an
	 * interrupted index, tombstones of a deleted bucket */
	snprintf(path, sizeof(path), "%s/00000000000000000001-0000000000.bucket", dir);
	assert_non_null(f = fopen(path, "w"));
	fputs("half a record", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/00000000000000000002-0000000000.meta.tmp", dir);
	assert_non_null(f = fopen(path, "w"));
	fclose(f);
	snprintf(path, sizeof(path), "%s/00000000000000000003-0000000000.dead", dir);
	assert_non_null(f = fopen(path, "w"));
	fclose(f);
	ds = open_ok(&cfg);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.objects, 10);
	for (int i = 0; i < 10; i++)
		check_key(ds, i, 5);
	assert_int_equal(count_files(".bucket"), 1);
	assert_int_equal(count_files(".meta.tmp"), 0);
	assert_int_equal(count_files(".dead"), 0);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void checksum_damage_drops_the_key(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	struct mc_disk_obj o[3];
	char val[3][10000], got[10000], path[512];
	int fd;
	uint8_t c;
	(void)state;
	cfg_make(&cfg);
	ds = open_ok(&cfg);
	for (int i = 0; i < 3; i++) {
		memset(val[i], 'a' + i, sizeof(val[i]));
		o[i] = (struct mc_disk_obj){i == 0   ? "k0"
					    : i == 1 ? "k1"
						     : "k2",
					    2, val[i], sizeof(val[i]), MC_OK};
	}
	assert_int_equal(mc_disk_store_put(ds, o, 3, NULL), MC_OK);
	/* records of 4 KiB of header and key plus 12 KiB of value: k1's value at 20 KiB */
	first_file(".bucket", path, sizeof(path));
	assert_true((fd = open(path, O_RDWR)) >= 0);
	assert_int_equal(pread(fd, &c, 1, 16384 + 4096 + 777), 1);
	assert_int_equal(c, 'b');
	c ^= 0x40;
	assert_int_equal(pwrite(fd, &c, 1, 16384 + 4096 + 777), 1);
	close(fd);
	{
		/* through the batch: k1 refused, k0 and k2 served */
		static char g0[10000], g2[10000];
		struct mc_disk_get g[3] = {
			{.key = "k0", .key_len = 2, .dst = g0, .cap = sizeof(g0)},
			{.key = "k1", .key_len = 2, .dst = got, .cap = sizeof(got)},
			{.key = "k2", .key_len = 2, .dst = g2, .cap = sizeof(g2)},
		};
		assert_int_equal(mc_disk_store_get_batch(ds, g, 3), MC_ERR_CHECKSUM_MISMATCH);
		assert_int_equal(g[0].status, MC_OK);
		assert_int_equal(g[1].status, MC_ERR_CHECKSUM_MISMATCH);
		assert_int_equal(g[2].status, MC_OK);
		assert_memory_equal(g0, val[0], sizeof(g0));
		assert_memory_equal(g2, val[2], sizeof(g2));
	}
	assert_false(mc_disk_store_contains(ds, "k1", 2, NULL));
	assert_int_equal(mc_disk_store_get(ds, "k1", 2, got, sizeof(got), NULL),
			 MC_ERR_OBJECT_NOT_FOUND);
	/* and through a single get: k0's value damaged too */
	assert_true((fd = open(path, O_RDWR)) >= 0);
	assert_int_equal(pwrite(fd, "!", 1, 4096 + 5), 1);
	close(fd);
	assert_int_equal(mc_disk_store_get(ds, "k0", 2, got, sizeof(got), NULL),
			 MC_ERR_CHECKSUM_MISMATCH);
	assert_false(mc_disk_store_contains(ds, "k0", 2, NULL));
	assert_int_equal(mc_disk_store_get(ds, "k2", 2, got, sizeof(got), NULL), MC_OK);
	assert_memory_equal(got, val[2], sizeof(got));
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.checksum_failures, 2);
	assert_int_equal(st.objects, 1);
	mc_disk_store_close(ds);
	/* never served again, after a restart either, even with a torn
	 * tombstone after the good one (a crash while appending) */
	first_file(".dead", path, sizeof(path));
	assert_true((fd = open(path, O_WRONLY | O_APPEND)) >= 0);
	assert_int_equal(write(fd, "torn!!!", 7), 7);
	close(fd);
	ds = open_ok(&cfg);
	assert_false(mc_disk_store_contains(ds, "k1", 2, NULL));
	assert_false(mc_disk_store_contains(ds, "k0", 2, NULL));
	assert_true(mc_disk_store_contains(ds, "k2", 2, NULL));
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

/* ---- removal ------------------------------------------------------------------------------ */

static void remove_frees_the_bucket_when_all_keys_are_gone(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	uint64_t n = 0;
	(void)state;
	cfg_make(&cfg);
	ds = open_ok(&cfg);
	put_range(ds, 0, 3, 3, 1);
	put_range(ds, 3, 6, 3, 1);
	assert_int_equal(count_files(".bucket"), 2);
	assert_int_equal(mc_disk_store_remove(ds, "key-000000", 10), MC_OK);
	assert_int_equal(mc_disk_store_remove(ds, "key-000001", 10), MC_OK);
	assert_int_equal(count_files(".bucket"), 2);
	assert_int_equal(mc_disk_store_remove(ds, "key-000001", 10), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mc_disk_store_remove(ds, "key-000002", 10), MC_OK);
	assert_int_equal(count_files(".bucket"), 1);
	assert_int_equal(count_files(".meta"), 1);
	assert_int_equal(count_files(".dead"), 0);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.buckets, 1);
	assert_int_equal(st.objects, 3);
	check_key(ds, 4, 1);
	assert_int_equal(mc_disk_store_remove_all(ds, &n), MC_OK);
	assert_int_equal(n, 3);
	assert_int_equal(count_files(".bucket"), 0);
	assert_int_equal(count_files(".meta"), 0);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.objects, 0);
	assert_int_equal(st.logical_bytes, 0);
	assert_int_equal(st.physical_bytes, 0);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

/* ---- caps and eviction -------------------------------------------------------------------- */

/* One bucket per 8-byte key of 64 KiB: 69,632 bytes of data, 76 of index. */
/* one 64 KiB object: its record, and (buckets) its .meta */
#define ONE_BUCKET (69632u + (fpk ? 0u : 76u))

static void put_one(struct mc_disk_store *ds, const char *key, mc_status want,
		    struct mc_disk_keys *evicted)
{
	static char val[65536];
	struct mc_disk_obj o = {key, strlen(key), val, sizeof(val), MC_OK};
	assert_int_equal(mc_disk_store_put(ds, &o, 1, evicted), want);
	assert_int_equal(o.status, want);
}

static void fifo_evicts_the_oldest_bucket(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_keys ev = {0};
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	char got[65536];
	(void)state;
	cfg_make(&cfg);
	cfg.max_total_size = 3 * ONE_BUCKET + 100;
	ds = open_ok(&cfg);
	put_one(ds, "a-key-01", MC_OK, &ev);
	put_one(ds, "b-key-01", MC_OK, &ev);
	put_one(ds, "c-key-01", MC_OK, &ev);
	assert_int_equal(ev.n, 0);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.logical_bytes, 3 * ONE_BUCKET);
	/* reads do not matter to fifo */
	assert_int_equal(mc_disk_store_get(ds, "a-key-01", 8, got, sizeof(got), NULL), MC_OK);
	put_one(ds, "d-key-01", MC_OK, &ev);
	assert_int_equal(ev.n, 1);
	assert_string_equal(ev.v[0].key, "a-key-01");
	assert_false(mc_disk_store_contains(ds, "a-key-01", 8, NULL));
	assert_int_equal(count_files(".bucket"), 3);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.evicted_objects, 1);
	assert_int_equal(st.evicted_buckets, 1);
	mc_disk_keys_release(&ev);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void lru_evicts_the_least_recently_read_bucket(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_keys ev = {0};
	struct mc_disk_store *ds;
	char got[65536];
	(void)state;
	cfg_make(&cfg);
	free(cfg.eviction_policy);
	cfg.eviction_policy = strdup("lru");
	cfg.max_total_size = 3 * ONE_BUCKET + 100;
	ds = open_ok(&cfg);
	put_one(ds, "a-key-01", MC_OK, &ev);
	put_one(ds, "b-key-01", MC_OK, &ev);
	put_one(ds, "c-key-01", MC_OK, &ev);
	assert_int_equal(mc_disk_store_get(ds, "c-key-01", 8, got, sizeof(got), NULL), MC_OK);
	assert_int_equal(mc_disk_store_get(ds, "a-key-01", 8, got, sizeof(got), NULL), MC_OK);
	/* b was never read: it goes first, then c (read before a) */
	put_one(ds, "d-key-01", MC_OK, &ev);
	put_one(ds, "e-key-01", MC_OK, &ev);
	assert_int_equal(ev.n, 2);
	assert_string_equal(ev.v[0].key, "b-key-01");
	assert_string_equal(ev.v[1].key, "c-key-01");
	assert_true(mc_disk_store_contains(ds, "a-key-01", 8, NULL));
	mc_disk_keys_release(&ev);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void eviction_waits_for_a_reader(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_keys ev = {0};
	struct mc_disk_store *ds;
	struct mc_disk_read rd;
	char got[65536];
	(void)state;
	cfg_make(&cfg);
	cfg.max_total_size = 2 * ONE_BUCKET + 100;
	ds = open_ok(&cfg);
	put_one(ds, "a-key-01", MC_OK, &ev);
	put_one(ds, "b-key-01", MC_OK, &ev);
	assert_int_equal(mc_disk_store_read_begin(ds, "a-key-01", 8, &rd), MC_OK);
	assert_int_equal(rd.len, 65536);
	put_one(ds, "c-key-01", MC_OK, &ev); /* evicts a's bucket, which is being read */
	assert_int_equal(ev.n, 1);
	assert_string_equal(ev.v[0].key, "a-key-01");
	assert_false(mc_disk_store_contains(ds, "a-key-01", 8, NULL));
	assert_int_equal(count_files(".bucket"), 3); /* its files wait for the reader */
	assert_int_equal(mc_disk_store_read_into(ds, &rd, got, sizeof(got)), MC_OK);
	mc_disk_store_read_end(ds, &rd);
	assert_int_equal(count_files(".bucket"), 2);
	assert_int_equal(count_files(".meta"), 2);
	mc_disk_keys_release(&ev);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void policy_none_refuses_writes_past_the_cap(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_keys ev = {0};
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	(void)state;
	cfg_make(&cfg);
	free(cfg.eviction_policy);
	cfg.eviction_policy = strdup("none");
	cfg.max_total_size = 2 * ONE_BUCKET + 100;
	ds = open_ok(&cfg);
	put_one(ds, "a-key-01", MC_OK, &ev);
	put_one(ds, "b-key-01", MC_OK, &ev);
	put_one(ds, "c-key-01", MC_ERR_FILE_WRITE_FAIL, &ev);
	assert_non_null(strstr(mc_last_error(), "eviction policy is none"));
	assert_int_equal(ev.n, 0);
	assert_true(mc_disk_store_contains(ds, "a-key-01", 8, NULL));
	assert_false(mc_disk_store_contains(ds, "c-key-01", 8, NULL));
	assert_int_equal(count_files(".bucket"), 2);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.write_failures, 1);
	/* the physical cap too */
	mc_disk_store_close(ds);
	cfg.max_total_size = 1ull << 30;
	cfg.max_physical_bytes = 1;
	ds = open_ok(&cfg);
	put_one(ds, "c-key-01", MC_ERR_FILE_WRITE_FAIL, &ev);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

/*
 * MOONCAKE_OFFLOAD_ENABLE_EVICTION=false (upstream's switch of the
 * file-per-key backend): a write past the cap fails, nothing is evicted,
 * whatever the policy says; the bucket backend has its policy and ignores it.
 */
static void enable_eviction_off_refuses_file_per_key_writes(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_keys ev = {0};
	struct mc_disk_store *ds;
	(void)state;
	cfg_make(&cfg);
	cfg.enable_eviction = false;
	cfg.max_total_size = 2 * ONE_BUCKET + 100;
	ds = open_ok(&cfg);
	put_one(ds, "a-key-01", MC_OK, &ev);
	put_one(ds, "b-key-01", MC_OK, &ev);
	if (fpk) {
		put_one(ds, "c-key-01", MC_ERR_FILE_WRITE_FAIL, &ev);
		assert_non_null(strstr(mc_last_error(), "MOONCAKE_OFFLOAD_ENABLE_EVICTION"));
		assert_int_equal(ev.n, 0);
		assert_true(mc_disk_store_contains(ds, "a-key-01", 8, NULL));
		assert_false(mc_disk_store_contains(ds, "c-key-01", 8, NULL));
		/* nor does the watermark pass evict */
		assert_int_equal(mc_disk_store_evict(ds, 0, &ev), MC_OK);
		assert_int_equal(ev.n, 0);
	} else {
		put_one(ds, "c-key-01", MC_OK, &ev);
		assert_int_equal(ev.n, 1);
		assert_string_equal(ev.v[0].key, "a-key-01");
	}
	assert_int_equal(count_files(".bucket"), 2);
	/* on again: the same store evicts the oldest file */
	mc_disk_store_close(ds);
	mc_disk_keys_release(&ev);
	cfg.enable_eviction = true;
	ds = open_ok(&cfg);
	put_one(ds, "d-key-01", MC_OK, &ev);
	assert_int_equal(ev.n, 1);
	mc_disk_keys_release(&ev);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void watermark_pass_evicts_down_to_low(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_keys ev = {0};
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	char key[16];
	(void)state;
	cfg_make(&cfg);
	cfg.max_total_size = 10 * ONE_BUCKET;
	ds = open_ok(&cfg);
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "w-%02d", i);
		put_one(ds, key, MC_OK, &ev);
	}
	assert_int_equal(mc_disk_store_evict(ds, 0, &ev), MC_OK);
	assert_int_equal(ev.n, 2); /* 100% -> 80% */
	assert_string_equal(ev.v[0].key, "w-00");
	assert_string_equal(ev.v[1].key, "w-01");
	mc_disk_store_stats(ds, &st);
	assert_true(st.logical_bytes <= 8 * ONE_BUCKET);
	mc_disk_keys_release(&ev);
	assert_int_equal(mc_disk_store_evict(ds, 0, &ev), MC_OK); /* below high: nothing */
	assert_int_equal(ev.n, 0);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

static void full_disk_fails_the_write_and_keeps_the_store(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	struct rlimit old, lim;
	struct sigaction ign = {.sa_handler = SIG_IGN}, prev;
	(void)state;
	cfg_make(&cfg);
	ds = open_ok(&cfg);
	put_range(ds, 0, 5, 5, 2);
	/* the file size limit stands in for a full disk (EFBIG as ENOSPC) */
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 32 << 10;
	sigaction(SIGXFSZ, &ign, &prev);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	put_one(ds, "big-key1", MC_ERR_FILE_WRITE_FAIL, NULL);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	sigaction(SIGXFSZ, &prev, NULL);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.objects, 5);
	assert_int_equal(st.buckets, fpk ? 5 : 1);
	assert_int_equal(count_files(".bucket"), fpk ? 5 : 1);
	for (int i = 0; i < 5; i++)
		check_key(ds, i, 2);
	put_one(ds, "big-key1", MC_OK, NULL);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
}

/* ---- threads ---------------------------------------------------------------------------- */

struct race {
	struct mc_disk_store *ds;
	atomic_bool stop;
	atomic_int bad, served;
	atomic_uint seed;
};

/* An RPC thread: any key, read whole and right, or not found. */
static void *race_reader(void *arg)
{
	struct race *r = arg;
	unsigned seed = atomic_fetch_add(&r->seed, 1);
	char *got = malloc(20000), *want = malloc(20000);
	while (!atomic_load(&r->stop)) {
		int i = (int)(rand_r(&seed) % 160);
		char key[32];
		uint64_t n = 0;
		mc_status st;
		key_of(key, sizeof(key), i);
		if (rand_r(&seed) % 2) {
			st = mc_disk_store_get(r->ds, key, strlen(key), got, 20000, &n);
		} else {
			struct mc_disk_get g = {
				.key = key, .key_len = strlen(key), .dst = got, .cap = 20000};
			mc_disk_store_get_batch(r->ds, &g, 1);
			st = g.status;
			n = g.len;
		}
		if (st == MC_OK) {
			mc_test_fill(want, len_of(i), 11 + (uint64_t)i);
			if (n != len_of(i) || memcmp(got, want, n) != 0)
				atomic_fetch_add(&r->bad, 1);
			atomic_fetch_add(&r->served, 1);
		} else if (st != MC_ERR_OBJECT_NOT_FOUND) {
			atomic_fetch_add(&r->bad, 1);
		}
		if (rand_r(&seed) % 8 == 0) {
			mc_status rs = mc_disk_store_remove(r->ds, key, strlen(key));
			if (rs != MC_OK && rs != MC_ERR_OBJECT_NOT_FOUND)
				atomic_fetch_add(&r->bad, 1);
		}
	}
	free(got);
	free(want);
	return NULL;
}

/* The heartbeat writes (and evicts) while readers read and remove. */
static void readers_race_the_writer(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct race r = {.seed = 1};
	pthread_t th[3];
	uint64_t found = 0;
	(void)state;
	cfg_make(&cfg);
	cfg.max_total_size = 6 * 4 * 24576; /* about six buckets of four keys */
	r.ds = open_ok(&cfg);
	for (int t = 0; t < 3; t++)
		assert_int_equal(pthread_create(&th[t], NULL, race_reader, &r), 0);
	for (int round = 0; round < 3; round++)
		for (int b = 0; b < 40; b++) {
			struct mc_disk_keys ev = {0};
			put_range(r.ds, b * 4, b * 4 + 4, 4, 11);
			assert_int_equal(mc_disk_store_evict(r.ds, 0, &ev), MC_OK);
			mc_disk_keys_release(&ev);
		}
	atomic_store(&r.stop, true);
	for (int t = 0; t < 3; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(atomic_load(&r.bad), 0);
	mc_disk_store_stats(r.ds, &st);
	for (int i = 0; i < 160; i++)
		found += has_key(r.ds, i);
	assert_int_equal(st.objects, found);
	assert_int_equal(st.buckets, count_files(".bucket"));
	assert_true(st.logical_bytes <= cfg.max_total_size);
	mc_disk_store_close(r.ds);
	/* what a restart finds is what was there */
	r.ds = open_ok(&cfg);
	mc_disk_store_stats(r.ds, &st);
	assert_int_equal(st.objects, found);
	for (int i = 0; i < 160; i++)
		if (has_key(r.ds, i))
			check_key(r.ds, i, 11);
	mc_disk_store_close(r.ds);
	mc_disk_store_config_release(&cfg);
}

/* ---- directories and settings ------------------------------------------------------------- */

static void one_process_per_directory(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store *ds, *again = NULL;
	int status;
	pid_t pid;
	(void)state;
	cfg_make(&cfg);
	ds = open_ok(&cfg);
	put_range(ds, 0, 3, 3, 1);
	/* a second open, here or in another process: refused */
	assert_int_equal(mc_disk_store_open(&cfg, &again), MC_ERR_FILE_LOCK_FAIL);
	assert_null(again);
	pid = fork();
	if (pid == 0) {
		struct mc_disk_store *c = NULL;
		mc_status st = mc_disk_store_open(&cfg, &c);
		_exit(st == MC_ERR_FILE_LOCK_FAIL && strstr(mc_last_error(), "pid") ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	mc_disk_store_close(ds);
	/* once the owner is gone, the next process takes the directory over */
	pid = fork();
	if (pid == 0) {
		struct mc_disk_store *c = NULL;
		if (mc_disk_store_open(&cfg, &c) != MC_OK ||
		    !mc_disk_store_contains(c, "key-000002", 10, NULL))
			_exit(1);
		mc_disk_store_close(c);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	mc_disk_store_config_release(&cfg);
}

static mc_status open_at(struct mc_disk_store_config *cfg, const char *path)
{
	struct mc_disk_store *ds = NULL;
	mc_status st;
	free(cfg->path);
	cfg->path = path ? strdup(path) : NULL;
	st = mc_disk_store_open(cfg, &ds);
	mc_disk_store_close(ds);
	return st;
}

static void bad_directories_and_settings_are_refused(void **state)
{
	struct mc_disk_store_config cfg;
	char path[512];
	FILE *f;
	(void)state;
	cfg_make(&cfg);
	assert_int_equal(open_at(&cfg, NULL), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"));
	assert_int_equal(open_at(&cfg, "/proc/mc-no-such/offload"), MC_ERR_FILE_OPEN_FAIL);
	assert_non_null(strstr(mc_last_error(), "cannot create"));
	assert_int_equal(open_at(&cfg, "/proc"), MC_ERR_FILE_OPEN_FAIL); /* even for root */
	assert_non_null(strstr(mc_last_error(), "not writable"));
	snprintf(path, sizeof(path), "%s/a-file", dir);
	assert_non_null(f = fopen(path, "w"));
	fclose(f);
	assert_int_equal(open_at(&cfg, path), MC_ERR_FILE_OPEN_FAIL);
	assert_non_null(strstr(mc_last_error(), "not a directory"));
	if (geteuid() != 0) {
		snprintf(path, sizeof(path), "%s/ro", dir);
		assert_int_equal(mkdir(path, 0555), 0);
		assert_int_equal(open_at(&cfg, path), MC_ERR_FILE_OPEN_FAIL);
	}
	/* a missing directory is created, parents too */
	snprintf(path, sizeof(path), "%s/new/sub", dir);
	assert_int_equal(open_at(&cfg, path), MC_OK);

	free(cfg.backend);
	cfg.backend = strdup("offset_allocator_storage_backend");
	assert_int_equal(open_at(&cfg, path), MC_ERR_NOT_SUPPORTED);
	assert_non_null(strstr(mc_last_error(), "not yet implemented"));
	free(cfg.backend);
	cfg.backend = strdup("no_such_backend");
	assert_int_equal(open_at(&cfg, path), MC_ERR_INVALID_PARAMS);
	free(cfg.backend);
	cfg.backend = strdup("bucket_storage_backend");
	free(cfg.eviction_policy);
	cfg.eviction_policy = strdup("random");
	assert_int_equal(open_at(&cfg, path), MC_ERR_INVALID_PARAMS);
	mc_disk_store_config_release(&cfg);
}

static void settings_come_from_the_environment(void **state)
{
	struct mc_disk_store_config cfg;
	(void)state;
	setenv("MOONCAKE_BUCKET_EVICTION_POLICY", "lru", 1);
	setenv("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "7", 1);
	setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "/x/y", 1);
	mc_disk_store_config_init(&cfg);
	assert_string_equal(cfg.eviction_policy, "lru");
	assert_int_equal(cfg.bucket_keys_limit, 7);
	assert_string_equal(cfg.path, "/x/y");
	assert_int_equal(cfg.bucket_size_limit, 256u << 20);
	assert_string_equal(cfg.backend, "bucket_storage_backend");
	assert_true(cfg.watermark_eviction);
	mc_disk_store_config_release(&cfg);
	/* the upstream name wins over the older one */
	setenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "none", 1);
	mc_disk_store_config_init(&cfg);
	assert_string_equal(cfg.eviction_policy, "none");
	mc_disk_store_config_release(&cfg);
	unsetenv("MOONCAKE_BUCKET_EVICTION_POLICY");
	unsetenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY");
	unsetenv("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT");
	unsetenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
	/* the file-per-key eviction switch: on by default, the older name
	 * ENABLE_EVICTION read too, the upstream one winning */
	mc_disk_store_config_init(&cfg);
	assert_true(cfg.enable_eviction);
	mc_disk_store_config_release(&cfg);
	setenv("ENABLE_EVICTION", "false", 1);
	mc_disk_store_config_init(&cfg);
	assert_false(cfg.enable_eviction);
	mc_disk_store_config_release(&cfg);
	setenv("MOONCAKE_OFFLOAD_ENABLE_EVICTION", "true", 1);
	mc_disk_store_config_init(&cfg);
	assert_true(cfg.enable_eviction);
	mc_disk_store_config_release(&cfg);
	unsetenv("ENABLE_EVICTION");
	setenv("MOONCAKE_OFFLOAD_ENABLE_EVICTION", "off", 1);
	mc_disk_store_config_init(&cfg);
	assert_false(cfg.enable_eviction);
	mc_disk_store_config_release(&cfg);
	unsetenv("MOONCAKE_OFFLOAD_ENABLE_EVICTION");
}

/*
 * The store opens its data files O_DIRECT where the directory takes it
 * (the disk; tmpfs too on Linux 6.6 and later), every bucket byte then
 * moving through it, and buffered when MC_STORE_OFFLOAD_DIRECT_IO is off;
 * both ways, and with io_uring forced off, every value (unaligned memory,
 * odd lengths, batched and single) reads back byte-exact, put through
 * put and through append (whose pending copies are aligned).
 */
static void direct_io_where_taken_and_the_switch(void **state)
{
	struct {
		bool direct, uring;
	} runs[3] = {{true, true}, {false, true}, {true, false}};
	(void)state;
	for (int r = 0; r < 3; r++) {
		struct mc_disk_store_config cfg;
		struct mc_disk_store_stats st;
		struct mc_disk_keys done = {0};
		struct mc_disk_store *ds;
		struct mc_disk_obj o[4];
		char k[4][8] = {"app-0", "app-1", "app-2", "app-3"};
		char *v[4];
		bool takes;
		int dfd = open(dir, O_RDONLY | O_DIRECTORY);

		assert_true(dfd >= 0);
		takes = mc_disk_dir_direct(dfd);
		close(dfd);
		if (r == 0)
			fprintf(stderr, "%s %s O_DIRECT\n", dir, takes ? "takes" : "does not take");
		cfg_make(&cfg);
		cfg.direct_io = runs[r].direct;
		cfg.use_uring = runs[r].uring;
		cfg.bucket_keys_limit = 7;
		/* pending copies: an arena of 3 + 7 blocks; the last object is larger */
		cfg.bucket_size_limit = 3 * 4096;
		ds = open_ok(&cfg);
		put_range(ds, 0, 60, 20, 40 + (uint64_t)r);
		for (int i = 0; i < 4; i++) {
			size_t len = i < 3 ? 4999 : 100000;
			v[i] = malloc(len + (size_t)i);
			mc_test_fill(v[i], len + (size_t)i, 90 + (uint64_t)i);
			o[i] = (struct mc_disk_obj){
				.key = k[i], .key_len = 5, .data = v[i] + i, .len = len};
		}
		assert_int_equal(mc_disk_store_append(ds, o, 2, &done, NULL), MC_OK);
		assert_int_equal(mc_disk_store_append(ds, o + 2, 2, &done, NULL), MC_OK);
		assert_int_equal(mc_disk_store_flush(ds, &done, NULL), MC_OK);
		assert_int_equal(done.n, 4);
		mc_disk_store_stats(ds, &st);
		assert_int_equal(st.direct, runs[r].direct && takes);
		if (st.direct) {
			assert_true(st.direct_ops > 0);
			assert_true(st.direct_bytes >= st.written_bytes - st.buckets * 4096u * 2);
		} else {
			assert_int_equal(st.direct_ops, 0);
		}
		for (int i = 0; i < 60; i++)
			check_key(ds, i, 40 + (uint64_t)r);
		for (int i = 0; i < 4; i++) {
			size_t len = i < 3 ? 4999 : 100000;
			char *got = malloc(len + 1);
			uint64_t n = 0;
			assert_int_equal(mc_disk_store_get(ds, k[i], 5, got + 1, len, &n), MC_OK);
			assert_int_equal(n, len);
			assert_memory_equal(got + 1, v[i] + i, len);
			free(got);
			free(v[i]);
		}
		mc_disk_keys_release(&done);
		mc_disk_store_close(ds);
		/* and again after a restart, through the other setting */
		cfg.direct_io = !runs[r].direct;
		ds = open_ok(&cfg);
		for (int i = 0; i < 60; i++)
			check_key(ds, i, 40 + (uint64_t)r);
		assert_int_equal(mc_disk_store_remove_all(ds, NULL), MC_OK);
		mc_disk_store_close(ds);
		mc_disk_store_config_release(&cfg);
	}
}

/* ---- io_uring: the staging buffer as a fixed buffer, the fallback -------------------------- */

/* Reads into a registered staging buffer run as READ_FIXED; reads
 * elsewhere do not; a store without io_uring refuses the registration
 * and reads on through pread. */
static void staging_buffer_reads_run_as_read_fixed(void **state)
{
	const size_t stage_len = 1u << 20;
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st0, st;
	struct mc_disk_get g[4];
	struct mc_disk_store *ds;
	char keys[4][32];
	uint8_t *stage = aligned_alloc(4096, stage_len);
	(void)state;
	cfg_make(&cfg);
	cfg.use_uring = true;
	ds = open_ok(&cfg);
	put_range(ds, 0, 4, 4, 11);
	mc_disk_store_stats(ds, &st0);
	if (!st0.uring) {
		mc_disk_store_close(ds);
		mc_disk_store_config_release(&cfg);
		free(stage);
		skip(); /* the kernel or a sandbox refuses io_uring here */
	}
	assert_false(st0.fixed);
	assert_int_equal(mc_disk_store_register_staging(ds, stage, stage_len), MC_OK);
	mc_disk_store_stats(ds, &st);
	assert_true(st.fixed);
	for (int i = 0; i < 4; i++) {
		key_of(keys[i], sizeof(keys[i]), i);
		g[i] = (struct mc_disk_get){
			keys[i], strlen(keys[i]), stage + (size_t)i * 65536, 65536, 0, MC_OK};
	}
	assert_int_equal(mc_disk_store_get_batch(ds, g, 4), MC_OK);
	mc_disk_store_stats(ds, &st);
	assert_true(st.fixed_ops >= st0.fixed_ops + 4);
	assert_true(st.fixed_bytes >= st0.fixed_bytes + len_of(0) + len_of(1));
	for (int i = 0; i < 4; i++) {
		char *want = malloc(len_of(i));
		assert_int_equal(g[i].len, len_of(i));
		mc_test_fill(want, len_of(i), 11 + (uint64_t)i);
		assert_memory_equal(g[i].dst, want, len_of(i));
		free(want);
	}
	/* a destination outside it: the plain opcodes */
	st0 = st;
	check_key(ds, 2, 11);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.fixed_ops, st0.fixed_ops);
	mc_disk_store_close(ds);

	/* io_uring off: nothing to register, pread/pwrite serve */
	cfg.use_uring = false;
	ds = open_ok(&cfg);
	mc_disk_store_stats(ds, &st);
	assert_false(st.uring);
	assert_int_equal(mc_disk_store_register_staging(ds, stage, stage_len),
			 MC_ERR_NOT_SUPPORTED);
	for (int i = 0; i < 4; i++)
		check_key(ds, i, 11);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.fixed_ops, 0);
	mc_disk_store_close(ds);
	mc_disk_store_config_release(&cfg);
	free(stage);
}

/* A kernel that refuses io_uring (here a seccomp filter answering EPERM to
 * io_uring_setup, as a container's profile does): the store opens on
 * pread/pwrite with one logged line, writes, restarts and reads. */
static void refused_io_uring_falls_back_to_pread(void **state)
{
	pid_t pid;
	int wst = 0;
	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
		struct mc_disk_store_config cfg;
		struct mc_disk_store_stats st;
		struct mc_disk_store *ds = NULL;
		char key[32], got[20000];
		uint64_t n = 0;
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
			_exit(77);
		cfg_make(&cfg);
		cfg.use_uring = true;
		if (mc_disk_store_open(&cfg, &ds) != MC_OK)
			_exit(2);
		mc_disk_store_stats(ds, &st);
		if (st.uring)
			_exit(3);
		for (int i = 0; i < 8; i++) {
			char val[5000];
			struct mc_disk_obj o = {key, 0, val, sizeof(val), MC_OK};
			key_of(key, sizeof(key), i);
			o.key_len = strlen(key);
			memset(val, 'a' + i, sizeof(val));
			if (mc_disk_store_put(ds, &o, 1, NULL) != MC_OK)
				_exit(4);
		}
		mc_disk_store_close(ds);
		if (mc_disk_store_open(&cfg, &ds) != MC_OK)
			_exit(5);
		for (int i = 0; i < 8; i++) {
			key_of(key, sizeof(key), i);
			if (mc_disk_store_get(ds, key, strlen(key), got, sizeof(got), &n) !=
				    MC_OK ||
			    n != 5000 || got[0] != 'a' + i || got[4999] != 'a' + i)
				_exit(6);
		}
		mc_disk_store_close(ds);
		mc_disk_store_config_release(&cfg);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &wst, 0), pid);
	assert_true(WIFEXITED(wst));
	if (WEXITSTATUS(wst) == 77)
		skip(); /* no seccomp here */
	assert_int_equal(WEXITSTATUS(wst), 0);
}

/* ---- the file-per-key backend ---------------------------------------------------------- */

/* The path of key i's file: the one .kv file that holds its key. */
static void fpk_file_of(const char *key, char *out, size_t cap)
{
	char top[512];
	DIR *d1;
	struct dirent *a;
	out[0] = '\0';
	snprintf(top, sizeof(top), "%s/file_per_key_dir", dir);
	d1 = opendir(top);
	assert_non_null(d1);
	while (!out[0] && (a = readdir(d1)) != NULL) {
		char p1[1024];
		DIR *d2;
		struct dirent *b;
		if (a->d_name[0] == '.')
			continue;
		snprintf(p1, sizeof(p1), "%s/%s", top, a->d_name);
		d2 = opendir(p1);
		while (d2 && !out[0] && (b = readdir(d2)) != NULL) {
			char p2[1280];
			DIR *d3;
			struct dirent *c;
			if (b->d_name[0] == '.')
				continue;
			snprintf(p2, sizeof(p2), "%s/%s", p1, b->d_name);
			d3 = opendir(p2);
			while (d3 && !out[0] && (c = readdir(d3)) != NULL) {
				char f[1536], head[128];
				int fd;
				if (c->d_name[0] == '.')
					continue;
				snprintf(f, sizeof(f), "%s/%s", p2, c->d_name);
				fd = open(f, O_RDONLY);
				if (fd >= 0 && pread(fd, head, sizeof(head), 0) == sizeof(head) &&
				    memcmp(head + 64, key, strlen(key)) == 0)
					snprintf(out, cap, "%s", f);
				if (fd >= 0)
					close(fd);
			}
			if (d3)
				closedir(d3);
		}
		if (d2)
			closedir(d2);
	}
	closedir(d1);
	assert_true(out[0] != '\0');
}

static void fpk_one_file_per_key_and_crash_leftovers(void **state)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	char path[1536], tmp[1600], key[32], got[20000];
	uint64_t n = 0;
	int fd;
	(void)state;
	fpk = true;
	cfg_make(&cfg);
	ds = open_ok(&cfg);
	put_range(ds, 0, 20, 7, 3); /* groups of 7: still one file each */
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.buckets, 20);
	assert_int_equal(count_files(".kv"), 20);
	assert_int_equal(count_files(".tmp"), 0);
	/* a remove deletes the file */
	assert_int_equal(mc_disk_store_remove(ds, "key-000019", 10), MC_OK);
	assert_int_equal(count_files(".kv"), 19);
	/* a rotted value: refused on read, the key and its file dropped */
	key_of(key, sizeof(key), 5);
	fpk_file_of(key, path, sizeof(path));
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "X", 1, 4096 + 3), 1);
	close(fd);
	assert_int_equal(mc_disk_store_get(ds, key, strlen(key), got, sizeof(got), &n),
			 MC_ERR_CHECKSUM_MISMATCH);
	assert_false(has_key(ds, 5));
	assert_int_equal(count_files(".kv"), 18);
	mc_disk_store_close(ds);

	/* a client killed mid-write leaves a .tmp (deleted), a torn file is
	 * dropped, a header torn in the middle too */
	key_of(key, sizeof(key), 6);
	fpk_file_of(key, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	assert_int_equal(rename(path, tmp), 0);
	key_of(key, sizeof(key), 7);
	fpk_file_of(key, path, sizeof(path));
	assert_int_equal(truncate(path, 4096 + 10), 0);
	key_of(key, sizeof(key), 8);
	fpk_file_of(key, path, sizeof(path));
	assert_int_equal(truncate(path, 30), 0);
	ds = open_ok(&cfg);
	mc_disk_store_stats(ds, &st);
	assert_int_equal(st.objects, 15);
	assert_int_equal(count_files(".kv"), 15);
	assert_int_equal(count_files(".tmp"), 0);
	for (int i = 0; i < 19; i++) {
		if (i >= 5 && i <= 8)
			assert_false(has_key(ds, i));
		else
			check_key(ds, i, 3);
	}
	assert_int_equal(mc_disk_store_remove_all(ds, NULL), MC_OK);
	assert_int_equal(count_files(".kv"), 0);
	mc_disk_store_close(ds);

	/* MOONCAKE_OFFLOAD_FSDIR names the subdirectory; one name only */
	free(cfg.fsdir);
	cfg.fsdir = strdup("mine");
	ds = open_ok(&cfg);
	put_range(ds, 0, 3, 3, 4);
	mc_disk_store_close(ds);
	snprintf(path, sizeof(path), "%s/mine", dir);
	assert_int_equal(count_tree(path, ".kv"), 3);
	free(cfg.fsdir);
	cfg.fsdir = strdup("../elsewhere");
	assert_int_equal(mc_disk_store_open(&cfg, &ds), MC_ERR_INVALID_PARAMS);
	mc_disk_store_config_release(&cfg);
}

#define CASES(base)                                                                                \
	cmocka_unit_test_prestate_setup_teardown(round_trip_many_keys_across_buckets, dir_setup,   \
						 dir_teardown, base),                              \
		cmocka_unit_test_prestate_setup_teardown(restart_finds_every_object, dir_setup,    \
							 dir_teardown, base),                      \
		cmocka_unit_test_prestate_setup_teardown(append_groups_and_reports_each_key,       \
							 dir_setup, dir_teardown, base),           \
		cmocka_unit_test_prestate_setup_teardown(killed_writer_leaves_nothing_incomplete,  \
							 dir_setup, dir_teardown, base),           \
		cmocka_unit_test_prestate_setup_teardown(crash_leftovers_are_dropped, dir_setup,   \
							 dir_teardown, base),                      \
		cmocka_unit_test_prestate_setup_teardown(checksum_damage_drops_the_key, dir_setup, \
							 dir_teardown, base),                      \
		cmocka_unit_test_prestate_setup_teardown(                                          \
			remove_frees_the_bucket_when_all_keys_are_gone, dir_setup, dir_teardown,   \
			base),                                                                     \
		cmocka_unit_test_prestate_setup_teardown(fifo_evicts_the_oldest_bucket, dir_setup, \
							 dir_teardown, base),                      \
		cmocka_unit_test_prestate_setup_teardown(                                          \
			lru_evicts_the_least_recently_read_bucket, dir_setup, dir_teardown, base), \
		cmocka_unit_test_prestate_setup_teardown(eviction_waits_for_a_reader, dir_setup,   \
							 dir_teardown, base),                      \
		cmocka_unit_test_prestate_setup_teardown(                                          \
			enable_eviction_off_refuses_file_per_key_writes, dir_setup, dir_teardown,  \
			base),                                                                     \
		cmocka_unit_test_prestate_setup_teardown(policy_none_refuses_writes_past_the_cap,  \
							 dir_setup, dir_teardown, base),           \
		cmocka_unit_test_prestate_setup_teardown(watermark_pass_evicts_down_to_low,        \
							 dir_setup, dir_teardown, base),           \
		cmocka_unit_test_prestate_setup_teardown(                                          \
			full_disk_fails_the_write_and_keeps_the_store, dir_setup, dir_teardown,    \
			base),                                                                     \
		cmocka_unit_test_prestate_setup_teardown(readers_race_the_writer, dir_setup,       \
							 dir_teardown, base),                      \
		cmocka_unit_test_prestate_setup_teardown(one_process_per_directory, dir_setup,     \
							 dir_teardown, base),                      \
		cmocka_unit_test_prestate_setup_teardown(bad_directories_and_settings_are_refused, \
							 dir_setup, dir_teardown, base),           \
		cmocka_unit_test_prestate_setup_teardown(direct_io_where_taken_and_the_switch,     \
							 dir_setup, dir_teardown, base),           \
		cmocka_unit_test_prestate_setup_teardown(staging_buffer_reads_run_as_read_fixed,   \
							 dir_setup, dir_teardown, base),           \
		cmocka_unit_test_prestate_setup_teardown(refused_io_uring_falls_back_to_pread,     \
							 dir_setup, dir_teardown, base)

/* The cases that hold for both backends, with the file-per-key one. */
#define FPK(name, base) \
	cmocka_unit_test_prestate_setup_teardown(name, dir_setup_fpk, dir_teardown, base)
#define FPK_CASES(base)                                                                   \
	FPK(restart_finds_every_object, base), FPK(fifo_evicts_the_oldest_bucket, base),  \
		FPK(lru_evicts_the_least_recently_read_bucket, base),                     \
		FPK(eviction_waits_for_a_reader, base),                                   \
		FPK(policy_none_refuses_writes_past_the_cap, base),                       \
		FPK(enable_eviction_off_refuses_file_per_key_writes, base),               \
		FPK(watermark_pass_evicts_down_to_low, base),                             \
		FPK(full_disk_fails_the_write_and_keeps_the_store, base),                 \
		FPK(readers_race_the_writer, base), FPK(one_process_per_directory, base), \
		FPK(direct_io_where_taken_and_the_switch, base),                          \
		FPK(fpk_one_file_per_key_and_crash_leftovers, base),                      \
		FPK(staging_buffer_reads_run_as_read_fixed, base),                        \
		FPK(refused_io_uring_falls_back_to_pread, base)

int main(void)
{
	static char on_disk[] = "/tmp", on_tmpfs[] = "/dev/shm";
	const struct CMUnitTest tests[] = {
		CASES(on_disk),
		CASES(on_tmpfs),
		FPK_CASES(on_disk),
		FPK_CASES(on_tmpfs),
		cmocka_unit_test(settings_come_from_the_environment),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

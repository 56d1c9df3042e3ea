/*
 * tests/unit/test_offload_hb.c - the offload heartbeat thread of a client
 * with the SSD tier (store/client_offload.c), against an in-process master
 * with --enable_offload over loopback, on real files: objects put are
 * written to disk by the heartbeat and get their LOCAL_DISK replicas,
 * removes delete the disk copies (no .bucket file left), a remount request
 * wakes a heartbeat that sleeps a long period at once, close wakes and
 * joins it at once, and a client started again on the same directory
 * re-registers what is there, read back byte-exact by another client
 * through the owner's offload RPC.
 *
 * Three threads meet here (the heartbeat, the offload RPC server, the
 * caller's), so the program is part of the TSan stage (scripts/test.sh).
 * Waits are bounded polls of what the master answers, never sleeps
 * standing in for an event.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/time.h"
#include "master/server.h"
#include "mooncake/store.h"
#include "store/client_int.h"
#include "store/client_metrics.h"
#include "store/proto.h"
#include "store_t.h"
#include "support.h"

#define SEG_SIZE  (16u << 20)
#define LBUF_SIZE (4u << 20)
#define OBJ_SIZE  (100u * 1000u) /* not a block multiple */
#define WAIT_MS	  15000

static char dir[256];

static void with_offload(struct mc_master_server_config *c)
{
	c->master.enable_offload = true;
	c->master.default_kv_lease_ttl_ms = 200;
}

static int group_setup(void **state)
{
	(void)state;
	setenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "1", 1);
	setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "8388608", 1);
	setenv("MC_STORE_PREFAULT", "off", 1);
	return st_master_start(with_offload);
}

static int group_teardown(void **state)
{
	(void)state;
	st_master_stop();
	return 0;
}

static int dir_setup(void **state)
{
	(void)state;
	return mc_test_tmpdir("/tmp", "mc-offload-hb", dir, sizeof(dir)) ? 0 : -1;
}

static int dir_teardown(void **state)
{
	(void)state;
	return mc_test_rmtree(dir);
}

static struct mc_store *client_new(const char *ssd)
{
	struct mc_store_params p = st_params(ssd ? SEG_SIZE : 0, LBUF_SIZE);

	p.enable_ssd_offload = ssd != NULL;
	p.ssd_offload_path = ssd;
	return st_client_open(&p);
}

static void put_obj(struct mc_store *s, const char *key, uint64_t seed)
{
	char *v = malloc(OBJ_SIZE);
	struct mc_store_config c = {.replica_num = 1, .preferred_segment = mc_store_hostname(s)};
	mc_test_fill(v, OBJ_SIZE, seed);
	assert_int_equal(mc_store_put(s, key, v, OBJ_SIZE, &c), MC_OK);
	free(v);
}

/* Whether the master lists a complete LOCAL_DISK replica of key. */
static bool on_disk(struct mc_store *s, const char *key)
{
	struct mc_store_replica_desc d[4];
	int64_t n = mc_store_get_replica_desc(s, key, d, 4);
	for (int64_t i = 0; i < n && i < 4; i++)
		if (d[i].type == MC_STORE_REPLICA_LOCAL_DISK &&
		    d[i].status == MC_STORE_REPLICA_COMPLETE)
			return true;
	return false;
}

static size_t count_buckets(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;
	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);
		if (l > 7 && strcmp(de->d_name + l - 7, ".bucket") == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* What a wait is for: s and keys as the predicate reads them. */
struct cond {
	struct mc_store *s;
	const char *const *keys;
	size_t n;
};

static bool keys_on_disk(const struct cond *c)
{
	for (size_t i = 0; i < c->n; i++)
		if (!on_disk(c->s, c->keys[i]))
			return false;
	return true;
}

static bool no_bucket_left(const struct cond *c)
{
	(void)c;
	return count_buckets() == 0;
}

static bool first_pass_done(const struct cond *c)
{
	return atomic_load(&c->s->ohb_passes) >= 1;
}

static bool second_pass_done(const struct cond *c)
{
	return atomic_load(&c->s->ohb_passes) >= 2;
}

static bool key_exists(const struct cond *c)
{
	return mc_store_is_exist(c->s, c->keys[0]) == 1;
}

/* Polls until pred holds or WAIT_MS pass: the ms it took, or -1. */
static int64_t wait_for(bool (*pred)(const struct cond *), struct cond c)
{
	uint64_t t0 = mc_now_ms();
	while (mc_now_ms() - t0 < WAIT_MS) {
		if (pred(&c))
			return (int64_t)(mc_now_ms() - t0);
		usleep(10 * 1000);
	}
	return -1;
}

static void heartbeat_offloads_and_removes(void **state)
{
	const char *keys[4] = {"hb-a", "hb-b", "hb-c", "hb-d"};
	struct mc_store *s;
	(void)state;
	s = client_new(dir);
	for (int i = 0; i < 4; i++)
		put_obj(s, keys[i], 10 + (uint64_t)i);
	assert_true(wait_for(keys_on_disk, (struct cond){s, keys, 4}) >= 0);
	assert_true(count_buckets() >= 1);
	/* removes reach the disk through the next heartbeat: no file is left */
	for (int i = 0; i < 4; i++)
		assert_int_equal(mc_store_remove(s, keys[i], true), MC_OK);
	assert_true(wait_for(no_bucket_left, (struct cond){s, NULL, 0}) >= 0);
	mc_store_free(s);
}

/* A heartbeat that sleeps 30 s is woken by a remount request at once (it
 * mounts again and takes the pending offload), and by close. */
static void remount_and_close_wake_the_heartbeat(void **state)
{
	const char *key = "hb-wake";
	struct mc_store *s;
	uint64_t t0;
	int64_t took;
	(void)state;
	setenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "30", 1);
	s = client_new(dir);
	setenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "1", 1);
	/* the thread's first pass runs at start: once it is done, the thread
	 * sleeps 30 s and only a wake-up takes the object put now */
	assert_true(wait_for(first_pass_done, (struct cond){s, NULL, 0}) >= 0);
	put_obj(s, key, 77);
	mc_store_offload_remount(s);
	took = wait_for(keys_on_disk, (struct cond){s, &key, 1});
	assert_true(took >= 0);
	assert_true(took < 10000); /* far under the 30 s period */
	/* the key reaches the disk before the woken pass is counted: wait for
	 * the count, then check that the wake-up gave one pass, not a loop */
	assert_true(wait_for(second_pass_done, (struct cond){s, NULL, 0}) >= 0);
	assert_int_equal(atomic_load(&s->ohb_passes), 2);
	t0 = mc_now_ms();
	mc_store_free(s); /* wakes and joins the sleeping thread */
	assert_true(mc_now_ms() - t0 < 10000);
}

/* A client started again on the same directory re-registers what is
 * there; another client reads it back through the owner's offload RPC. */
static void restart_re_registers_and_a_reader_gets_it(void **state)
{
	const char *key = "hb-restart";
	struct mc_store *s, *r;
	char *want = malloc(OBJ_SIZE), *got = malloc(OBJ_SIZE);
	(void)state;
	s = client_new(dir);
	put_obj(s, key, 99);
	assert_true(wait_for(keys_on_disk, (struct cond){s, &key, 1}) >= 0);
	mc_store_free(s);
	r = client_new(NULL);
	assert_int_equal(mc_store_is_exist(r, key), 0); /* the owner and its replicas went */
	s = client_new(dir);
	assert_true(wait_for(key_exists, (struct cond){r, &key, 1}) >= 0);
	mc_test_fill(want, OBJ_SIZE, 99);
	assert_int_equal(mc_store_register_buffer(r, got, OBJ_SIZE), MC_OK);
	assert_int_equal(mc_store_get_into(r, key, got, OBJ_SIZE), (int64_t)OBJ_SIZE);
	assert_memory_equal(got, want, OBJ_SIZE);
	assert_true(mc_store_offload_rpc_read_count(r) >= 1);
	mc_store_unregister_buffer(r, got);
	mc_store_free(r);
	mc_store_free(s);
	free(want);
	free(got);
}

/* Flip a byte of key's memory replica, straight through the holder's
 * mapping (it is in this process). */
static void flip_mem(struct mc_store *s, const char *key, size_t at)
{
	struct mc_store_replica_desc d[4];
	int64_t n = mc_store_get_replica_desc(s, key, d, 4);

	for (int64_t i = 0; i < n && i < 4; i++)
		if (d[i].type == MC_STORE_REPLICA_MEMORY) {
			((volatile char *)(uintptr_t)d[i].address)[at] ^= 0x10;
			return;
		}
	fail_msg("%s has no memory replica", key);
}

/* Flip the byte at value offset at of the object whose value is v (n
 * bytes, found nowhere else) in the .bucket file that holds it. */
static void flip_on_disk(const char *v, size_t n, size_t at)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool done = false;

	assert_non_null(d);
	while (!done && (de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);
		char path[512], *b;
		const char *hit;
		FILE *f;
		long len;

		if (l <= 7 || strcmp(de->d_name + l - 7, ".bucket") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		assert_non_null(f = fopen(path, "r+b"));
		assert_int_equal(fseek(f, 0, SEEK_END), 0);
		len = ftell(f);
		assert_true(len >= 0);
		assert_non_null(b = malloc((size_t)len + 1));
		rewind(f);
		assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
		hit = memmem(b, (size_t)len, v, n);
		if (hit) {
			unsigned char x = (unsigned char)hit[at] ^ 0x10;

			assert_int_equal(fseek(f, (long)(hit - b) + (long)at, SEEK_SET), 0);
			assert_int_equal(fputc(x, f), x);
			done = true;
		}
		assert_int_equal(fclose(f), 0);
		free(b);
	}
	closedir(d);
	assert_true(done);
}

/* How many complete replicas of type key has. */
static size_t count_type(struct mc_store *s, const char *key, int type)
{
	struct mc_store_replica_desc d[4];
	int64_t n = mc_store_get_replica_desc(s, key, d, 4);
	size_t k = 0;

	for (int64_t i = 0; i < n && i < 4; i++)
		k += d[i].type == type && d[i].status == MC_STORE_REPLICA_COMPLETE;
	return k;
}

#define RG_GUARD 64

/* Range [off, off + len) of key into dst (guarded): its result; on
 * success the bytes equal obj's; nothing outside the range moves. */
static int64_t range_read(struct mc_store *s, const char *key, uint64_t off, uint64_t len,
			  const char *obj, char *dst)
{
	struct mc_store_range rg = {.dst_offset = RG_GUARD, .src_offset = off, .length = len};
	int64_t res = 0;
	struct mc_store_range_read rr = {key, dst, &rg, 1, &res};

	memset(dst, 0xEE, len + 2 * RG_GUARD);
	(void)mc_store_get_into_ranges(s, &rr, 1);
	if (res >= 0)
		assert_memory_equal(dst + RG_GUARD, obj + off, len);
	for (size_t i = 0; i < RG_GUARD; i++) {
		assert_int_equal((unsigned char)dst[i], 0xEE);
		assert_int_equal((unsigned char)dst[RG_GUARD + len + i], 0xEE);
	}
	return res;
}

/*
 * Objects with a chunk-sum trailer (minor 10) on the SSD tier: the disk
 * copy holds the value only, and a read of it, whole or a range (which
 * reads the whole copy), is checked by the trailer the reader builds from
 * the bytes against the object's trailer hash.  A byte that went bad in
 * memory before the offload (so the record's own checksum covers it) is
 * caught that way: -801, never the bytes; one flipped on disk is refused
 * by the record's checksum; an intact copy serves the object, whole and
 * ranged, once its memory replica failed.  (A whole read lands in the
 * caller's buffer before its check, so only a range's buffer is looked at
 * after a failure.)
 */
static void trailer_objects_on_disk_are_checked(void **state)
{
	enum { T = MC_STORE_TCHUNK, OBJ = (300 << 10) + 5, RG = 64 << 10 };
	const char *keys[3] = {"td-good", "td-bad", "td-flip"};
	struct mc_store *s, *r;
	char *want[3], *got = malloc(OBJ + 2 * RG_GUARD);
	struct mc_store_config c = {.replica_num = 1};
	uint64_t reads0, bad0;
	(void)state;
	setenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "30", 1);
	s = client_new(dir);
	setenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "1", 1);
	s->trailers = true;
	c.preferred_segment = mc_store_hostname(s);
	/* the first pass is done: the objects wait for the wake-up below */
	assert_true(wait_for(first_pass_done, (struct cond){s, NULL, 0}) >= 0);
	for (int i = 0; i < 3; i++) {
		want[i] = malloc(OBJ);
		mc_test_fill(want[i], OBJ, 4242 + (uint64_t)i);
		assert_int_equal(mc_store_put(s, keys[i], want[i], OBJ, &c), MC_OK);
	}
	flip_mem(s, "td-bad", 3 * T + 9); /* before the offload copies it */
	mc_store_offload_remount(s);
	assert_true(wait_for(keys_on_disk, (struct cond){s, keys, 3}) >= 0);
	/* the pass that copied them is counted after it: the copies are
	 * done (and ordered before the flips below, for TSan) */
	assert_true(wait_for(second_pass_done, (struct cond){s, NULL, 0}) >= 0);
	for (int i = 0; i < 3; i++)
		flip_mem(s, keys[i], 7 * T + 1); /* every memory replica fails now */
	flip_on_disk(want[2], OBJ, 5 * T + 3);

	r = client_new(NULL);
	assert_int_equal(mc_store_register_buffer(r, got, OBJ + 2 * RG_GUARD), MC_OK);
	reads0 = mc_store_offload_rpc_read_count(r);
	bad0 = atomic_load(&r->metrics->checksum_mismatches);
	/* an intact disk copy: a range (unaligned, after the memory replica
	 * failed and went), then the whole object */
	assert_int_equal(range_read(r, "td-good", 6 * T + 7, RG, want[0], got), RG);
	assert_int_equal(atomic_load(&r->metrics->checksum_mismatches), bad0 + 1);
	assert_int_equal(count_type(r, "td-good", MC_STORE_REPLICA_MEMORY), 0);
	assert_int_equal(range_read(r, "td-good", 9 * T + 100, RG, want[0], got), RG);
	assert_int_equal(mc_store_get_into(r, "td-good", got, OBJ), OBJ);
	assert_memory_equal(got, want[0], OBJ);
	assert_true(mc_store_offload_rpc_read_count(r) >= reads0 + 3);
	/* bad before the offload: the rebuilt trailer gives it away, for a
	 * range (its memory chunks fail, then the disk copy) far from the
	 * byte flipped before the offload, as for the whole object */
	assert_int_equal(range_read(r, "td-bad", 6 * T, RG, want[1], got),
			 MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(mc_store_get_into(r, "td-bad", got, OBJ), MC_ERR_CHECKSUM_MISMATCH);
	/* flipped on disk: refused, never the bytes */
	assert_true(range_read(r, "td-flip", 7 * T, RG, want[2], got) < 0);
	assert_true(mc_store_get_into(r, "td-flip", got, OBJ) < 0);
	mc_store_unregister_buffer(r, got);
	mc_store_free(r);
	mc_store_free(s);
	for (int i = 0; i < 3; i++)
		free(want[i]);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(heartbeat_offloads_and_removes, dir_setup,
						dir_teardown),
		cmocka_unit_test_setup_teardown(remount_and_close_wake_the_heartbeat, dir_setup,
						dir_teardown),
		cmocka_unit_test_setup_teardown(restart_re_registers_and_a_reader_gets_it,
						dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(trailer_objects_on_disk_are_checked, dir_setup,
						dir_teardown),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

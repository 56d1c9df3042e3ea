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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(heartbeat_offloads_and_removes, dir_setup,
						dir_teardown),
		cmocka_unit_test_setup_teardown(remount_and_close_wake_the_heartbeat, dir_setup,
						dir_teardown),
		cmocka_unit_test_setup_teardown(restart_re_registers_and_a_reader_gets_it,
						dir_setup, dir_teardown),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/*
 * tests/unit/test_master_wal.c - the master on its write-ahead log
 * (master/wal_log.c): what a master accepted comes back in a new master
 * replaying the same directory, hidden until its segment is mounted again,
 * dropped when it never is; a torn tail is cut; a log that cannot be
 * written refuses to acknowledge (the daemon's side: a real server).
 *
 * The "crash" is the first master freed without any shutdown of its own:
 * what the second one knows comes from the log's files alone (the log is
 * closed, which writes nothing the commits had not written).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../support/master_t.h"
#include "../support/support.h"
#include "master/master.h"
#include "master/wal.h"
#include "master/wal_rec.h"

static const struct mc_store_uuid C1 = {1, 1}, S1 = {10, 1}, S2 = {10, 2};
#define BASE1 0x100000000ull
#define BASE2 0x200000000ull
#define SEGSZ (64ull << 20)

struct replay_arg {
	struct mc_master *m;
	uint64_t now;
};

static mc_status apply(void *arg, const struct mc_wal_rec *r)
{
	struct replay_arg *x = arg;
	return mc_master_wal_replay(x->m, r->type, r->payload, r->len, x->now);
}

/* A master on the log in dir (replayed), as the daemon starts one. */
static struct mt *start(const char *dir, struct mc_wal **w, uint64_t *replayed)
{
	struct mc_master_config cfg;
	struct mc_wal_open_info info;
	struct mt *t;
	struct replay_arg x;

	mt_cfg_init(&cfg);
	cfg.client_ttl_ms = 10000;
	t = mt_new(&cfg);
	x.m = t->m;
	x.now = t->now;
	assert_int_equal(mc_wal_open(dir, MC_WAL_FSYNC_NO, 0, apply, &x, w, &info), MC_OK);
	if (replayed)
		*replayed = info.replayed;
	mc_master_set_wal(t->m, *w);
	return t;
}

/* The daemon's group commit after a request. */
static void commit(struct mc_wal *w)
{
	assert_int_equal(mc_wal_commit(w), MC_OK);
}

static void crash(struct mt *t, struct mc_wal *w)
{
	mc_master_set_wal(t->m, NULL);
	assert_int_equal(mc_wal_close(w), MC_OK);
	mt_free(t);
}

static void ping_alive(struct mt *t, struct mc_store_uuid c)
{
	(void)mt_ping(t, c);
}

static uint64_t first_addr(struct mt *t, const char *key)
{
	assert_int_equal(mt_get(t, key), MC_OK);
	assert_true(t->resp.body.replica_list.n_replicas >= 1);
	return t->resp.body.replica_list.replicas[0].address;
}

static void objects_come_back_after_remount(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	uint64_t a1, a2, a3, n;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mwal", dir, sizeof(dir)));
	t = start(dir, &w, &n);
	assert_int_equal(n, 0);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	commit(w);
	mt_put_ok(t, C1, "k1", 1000);
	commit(w);
	mt_put_ok(t, C1, "k2", 70000);
	commit(w);
	mt_put_ok(t, C1, "k3", 5);
	commit(w);
	assert_int_equal(mt_rm(t, "k3", false), MC_OK);		       /* removed: stays removed */
	mt_put_ok(t, C1, "k3", 4096);				       /* and put again */
	assert_int_equal(mt_put_start(t, C1, "inflight", 100), MC_OK); /* never completed */
	commit(w);
	a1 = first_addr(t, "k1");
	a2 = first_addr(t, "k2");
	a3 = first_addr(t, "k3");
	crash(t, w);

	t = start(dir, &w, &n);
	assert_true(n >= 6);
	/* hidden until the segment is back */
	assert_int_not_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(mt_exist(t, "inflight"), 0);
	assert_int_equal(mt_ping(t, C1), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	commit(w);
	assert_int_equal(first_addr(t, "k1"), a1);
	assert_int_equal(first_addr(t, "k2"), a2);
	assert_int_equal(first_addr(t, "k3"), a3);
	assert_int_equal(mt_exist(t, "inflight"), 0);
	assert_int_equal(mt_metrics(t).key_count, 3);
	/* the bound ranges are taken: a new put gets other space */
	mt_put_ok(t, C1, "k4", 1000);
	{
		uint64_t a4 = first_addr(t, "k4");
		assert_true(a4 + 1000 <= a1 || a4 >= a1 + 1000);
		assert_true(a4 + 1000 <= a2 || a4 >= a2 + 70000);
		assert_true(a4 + 1000 <= a3 || a4 >= a3 + 4096);
	}
	commit(w);
	/* and a second restart sees the same, k4 included */
	crash(t, w);
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(first_addr(t, "k1"), a1);
	assert_int_equal(mt_get(t, "k4"), MC_OK);
	assert_int_equal(mt_metrics(t).key_count, 4);
	crash(t, w);
	mc_test_rmtree(dir);
}

static void segment_that_never_returns_drops_its_objects(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_store_replicate_config two = mt_cfg1();
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mwal", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ), MC_OK);
	two.replica_num = 2;
	assert_int_equal(mt_put_start_cfg(t, C1, NULL, "both", 100, NULL, &two, false), MC_OK);
	assert_int_equal(mt_put_end(t, C1, "both"), MC_OK);
	commit(w);
	crash(t, w);

	t = start(dir, &w, NULL);
	/* only seg2 comes back, at another size: not the same segment */
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ / 2), MC_OK);
	assert_int_not_equal(mt_get(t, "both"), MC_OK);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "both"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	commit(w);
	crash(t, w);

	t = start(dir, &w, NULL);
	/* seg2 was mounted as another range since: its old replica is gone */
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ / 2), MC_OK);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "both"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].segment_name.len, 4);
	assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr, "seg1", 4);
	commit(w);
	crash(t, w);

	t = start(dir, &w, NULL);
	/* nothing comes back within the client TTL */
	t->now += 10001;
	ping_alive(t, C1);
	mc_master_tick(t->m, t->now);
	while (mc_master_sweep_run(t->m, 0))
		;
	commit(w);
	assert_int_equal(mt_metrics(t).key_count, 0);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_exist(t, "both"), 0);
	commit(w);
	crash(t, w);
	/* and the drop itself was logged */
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_exist(t, "both"), 0);
	crash(t, w);
	mc_test_rmtree(dir);
}

/* The newest file of the log in dir. */
static void last_file(const char *dir, char *path, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char best[256] = "";

	assert_non_null(d);
	while ((e = readdir(d)))
		if (strncmp(e->d_name, "wal-", 4) == 0 && strcmp(e->d_name, best) > 0)
			snprintf(best, sizeof(best), "%s", e->d_name);
	closedir(d);
	assert_true(best[0]);
	snprintf(path, len, "%s/%s", dir, best);
}

static void torn_tail_is_cut_and_the_rest_kept(void **state)
{
	char dir[256], path[512];
	struct mc_wal *w;
	struct mt *t;
	int fd;
	static const uint8_t torn[] = {40, 0, 0, 0, 1, 0, 0, 0, 9, 9, 9};
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mwal", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	commit(w);
	crash(t, w);
	last_file(dir, path, sizeof(path));
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, torn, sizeof(torn)), (ssize_t)sizeof(torn));
	close(fd);

	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	mt_put_ok(t, C1, "k2", 1000); /* appended after the cut */
	commit(w);
	crash(t, w);
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(mt_get(t, "k2"), MC_OK);
	crash(t, w);
	mc_test_rmtree(dir);
}

static void newer_payload_version_is_refused(void **state)
{
	struct mc_master_config cfg;
	struct mt *t;
	static const uint8_t p[] = {MC_WALREC_VERSION + 1, 0, 0};
	(void)state;
	mt_cfg_init(&cfg);
	t = mt_new(&cfg);
	assert_int_equal(mc_master_wal_replay(t->m, MC_WALREC_OBJ_DEL, p, sizeof(p), t->now),
			 MC_ERR_INVALID_VERSION);
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(objects_come_back_after_remount),
		cmocka_unit_test(segment_that_never_returns_drops_its_objects),
		cmocka_unit_test(torn_tail_is_cut_and_the_rest_kept),
		cmocka_unit_test(newer_payload_version_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

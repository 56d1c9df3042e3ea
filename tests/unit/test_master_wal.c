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
 *
 * Snapshots (master/snap.c, mc_master_snap_dump): what the daemon's forked
 * child does, done here in the test's process: rotate the log, dump the
 * tables, keep retention_count snapshots and drop the log files the oldest
 * one kept covers; a start loads the newest valid one and replays the log
 * after it.
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
#include <xxhash.h>

#include "../support/master_t.h"
#include "../support/support.h"
#include "../support/wal_t.h"
#include "master/master.h"
#include "master/snap.h"
#include "master/wal.h"
#include "master/wal_rec.h"
#include "mooncake/log.h"

static const struct mc_store_uuid C1 = {1, 1}, S1 = {10, 1}, S2 = {10, 2};
#define BASE1 0x100000000ull
#define BASE2 0x200000000ull
#define SEGSZ (64ull << 20)

/* A master with a 10 s client TTL on the log in dir, loaded as how says. */
static struct mt *start_as(const char *dir, enum mt_wal_load how, struct mc_wal **w,
			   uint64_t *replayed, struct mc_snap_load_info *si)
{
	struct mc_master_config cfg;

	mt_cfg_init(&cfg);
	cfg.client_ttl_ms = 10000;
	return mt_wal_start(&cfg, dir, how, w, replayed, si);
}

/* A master on the log in dir (replayed), as the daemon starts one. */
static struct mt *start(const char *dir, struct mc_wal **w, uint64_t *replayed)
{
	return start_as(dir, MT_WAL_LOG, w, replayed, NULL);
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
	mt_wal_commit(w);
	mt_put_ok(t, C1, "k1", 1000);
	mt_wal_commit(w);
	mt_put_ok(t, C1, "k2", 70000);
	mt_wal_commit(w);
	mt_put_ok(t, C1, "k3", 5);
	mt_wal_commit(w);
	assert_int_equal(mt_rm(t, "k3", false), MC_OK);		       /* removed: stays removed */
	mt_put_ok(t, C1, "k3", 4096);				       /* and put again */
	assert_int_equal(mt_put_start(t, C1, "inflight", 100), MC_OK); /* never completed */
	mt_wal_commit(w);
	a1 = first_addr(t, "k1");
	a2 = first_addr(t, "k2");
	a3 = first_addr(t, "k3");
	mt_wal_crash(t, w);

	t = start(dir, &w, &n);
	assert_true(n >= 6);
	/* hidden until the segment is back */
	assert_int_not_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(mt_exist(t, "inflight"), 0);
	assert_int_equal(mt_ping(t, C1), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
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
	mt_wal_commit(w);
	/* and a second restart sees the same, k4 included */
	mt_wal_crash(t, w);
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(first_addr(t, "k1"), a1);
	assert_int_equal(mt_get(t, "k4"), MC_OK);
	assert_int_equal(mt_metrics(t).key_count, 4);
	mt_wal_crash(t, w);
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
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	t = start(dir, &w, NULL);
	/* only seg2 comes back, at another size: not the same segment */
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ / 2), MC_OK);
	assert_int_not_equal(mt_get(t, "both"), MC_OK);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "both"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	t = start(dir, &w, NULL);
	/* seg2 was mounted as another range since: its old replica is gone */
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ / 2), MC_OK);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "both"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].segment_name.len, 4);
	assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr, "seg1", 4);
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	t = start(dir, &w, NULL);
	/* nothing comes back within the client TTL */
	t->now += 10001;
	ping_alive(t, C1);
	mc_master_tick(t->m, t->now);
	while (mc_master_sweep_run(t->m, 0))
		;
	mt_wal_commit(w);
	assert_int_equal(mt_metrics(t).key_count, 0);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_exist(t, "both"), 0);
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	/* and the drop itself was logged */
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_exist(t, "both"), 0);
	mt_wal_crash(t, w);
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
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	last_file(dir, path, sizeof(path));
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, torn, sizeof(torn)), (ssize_t)sizeof(torn));
	close(fd);

	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	mt_put_ok(t, C1, "k2", 1000); /* appended after the cut */
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(mt_get(t, "k2"), MC_OK);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/* HA: a VIEW record (a leader's take-over) replays as the view of what
 * follows, and the records after it are applied as usual. */
static void view_record_replays(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	uint64_t n = 0;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mwal", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mc_master_wal_view_version(t->m), 0);
	mc_master_wal_view(t->m, 7, "127.0.0.1:50051");
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	mc_master_wal_view(t->m, 9, "127.0.0.1:50052");
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	t = start(dir, &w, &n);
	assert_int_equal(n, 4);
	assert_int_equal(mc_master_wal_view_version(t->m), 9);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	mt_wal_crash(t, w);
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

/* ---- snapshots -------------------------------------------------------------- */

/* A master as the daemon starts one with --enable_snapshot_restore. */
static struct mt *start_snap(const char *dir, struct mc_wal **w, struct mc_snap_load_info *si)
{
	return start_as(dir, MT_WAL_SNAP_BULK, w, NULL, si);
}

static unsigned count_files(const char *dir, const char *prefix, const char *suffix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name), sl = strlen(suffix);

		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && l >= sl &&
		    strcmp(e->d_name + l - sl, suffix) == 0)
			n++;
	}
	closedir(d);
	return n;
}

static void snap_file(const char *dir, uint64_t seq, char *path, size_t len)
{
	snprintf(path, len, "%s/snap-%016llx.snap", dir, (unsigned long long)seq);
}

/* A snapshot names the view of the log it continues: the VIEW record's file
 * is cut with the rest, and an HA master's directory still says which view
 * it holds (server_ha.c, the candidate position). */
static void view_survives_a_snapshot(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	unsigned dropped;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mview", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	mc_master_wal_view(t->m, 7, "127.0.0.1:50051");
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	mt_wal_commit(w);
	(void)mt_wal_snapshot(t, w, dir, 1, &dropped);
	assert_int_equal(dropped, 1); /* the VIEW record's file is gone */
	mt_wal_crash(t, w);
	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(mc_master_wal_view_version(t->m), 7);
	/* and the next snapshot names it again */
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k2", 1000);
	mt_wal_commit(w);
	(void)mt_wal_snapshot(t, w, dir, 1, &dropped);
	mt_wal_crash(t, w);
	t = start_snap(dir, &w, &si);
	assert_int_equal(mc_master_wal_view_version(t->m), 7);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

struct truncating {
	struct mt_replay x;
	const char *path;
	bool done;
};

/* Apply an entry, then cut the file under the loader's mapping. */
static mc_status apply_then_truncate(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	struct truncating *a = arg;
	mc_status st = mc_master_wal_replay(a->x.m, type, p, len, a->x.now);

	if (!a->done) {
		a->done = true;
		assert_int_equal(truncate(a->path, 0), 0);
	}
	return st;
}

/* A mapped snapshot whose file shrinks while it is read (or hits an I/O
 * error) faults with SIGBUS: the load fails with an error naming it, not
 * the process, and the next start falls back to the previous snapshot. */
static void snapshot_truncated_while_read_falls_back(void **state)
{
	char dir[256], path[300], bad[320];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	struct mc_master_config cfg;
	struct truncating a = {0};
	uint64_t s1, s2;
	unsigned dropped;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mbus", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	mt_wal_commit(w);
	s1 = mt_wal_snapshot(t, w, dir, 2, &dropped);
	mt_put_ok(t, C1, "k2", 1000);
	mt_put_ok(t, C1, "k3", 1000);
	mt_wal_commit(w);
	s2 = mt_wal_snapshot(t, w, dir, 2, &dropped);
	mt_put_ok(t, C1, "k4", 1000);
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	snap_file(dir, s2, path, sizeof(path));
	mt_cfg_init(&cfg);
	t = mt_new(&cfg);
	mt_replay_init(&a.x, t, NULL);
	a.path = path;
	assert_int_equal(mc_snap_load(dir, apply_then_truncate, &a, &si), MC_ERR_FILE_READ_FAIL);
	assert_non_null(strstr(mc_last_error(), "SIGBUS"));
	assert_true(a.done);
	mt_free(t);
	snprintf(bad, sizeof(bad), "%s.bad", path);
	assert_int_equal(access(bad, F_OK), 0);

	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(si.seq, s1);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(mt_get(t, "k3"), MC_OK);
	assert_int_equal(mt_get(t, "k4"), MC_OK);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

static void snapshot_then_puts_then_crash_restores_all(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	uint64_t a1, a2, a4, seq;
	unsigned dropped;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "msnap", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	mt_put_ok(t, C1, "k2", 70000);
	mt_put_ok(t, C1, "k3", 5);
	assert_int_equal(mt_put_start(t, C1, "inflight", 100), MC_OK); /* never completed */
	mt_wal_commit(w);
	a1 = first_addr(t, "k1");
	a2 = first_addr(t, "k2");
	assert_int_equal(count_files(dir, "wal-", ".log"), 1);
	seq = mt_wal_snapshot(t, w, dir, 2, &dropped);
	assert_true(seq >= 4);
	/* the log is cut: the file the snapshot covers is gone */
	assert_int_equal(dropped, 1);
	assert_int_equal(count_files(dir, "wal-", ".log"), 1);
	assert_int_equal(count_files(dir, "snap-", ".snap"), 1);
	/* after it: one more, one removed */
	mt_put_ok(t, C1, "k4", 4096);
	assert_int_equal(mt_rm(t, "k3", false), MC_OK);
	mt_wal_commit(w);
	a4 = first_addr(t, "k4");
	mt_wal_crash(t, w);

	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(si.seq, seq);
	assert_int_equal(si.rejected, 0);
	assert_int_not_equal(mt_get(t, "k1"), MC_OK); /* hidden until the remount */
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	assert_int_equal(first_addr(t, "k1"), a1);
	assert_int_equal(first_addr(t, "k2"), a2);
	assert_int_equal(first_addr(t, "k4"), a4);
	assert_int_equal(mt_exist(t, "k3"), 0);
	assert_int_equal(mt_exist(t, "inflight"), 0);
	assert_int_equal(mt_metrics(t).key_count, 3);
	mt_wal_crash(t, w);

	/* without the snapshot the cut log cannot start */
	{
		struct mc_wal *w2;
		struct mt *t2;
		struct mc_master_config cfg;
		struct mt_replay x;

		mt_cfg_init(&cfg);
		t2 = mt_new(&cfg);
		mt_replay_init(&x, t2, NULL);
		assert_int_not_equal(
			mc_wal_open(dir, MC_WAL_FSYNC_NO, 0, mt_replay_log, &x, &w2, NULL), MC_OK);
		mt_free(t2);
	}
	mc_test_rmtree(dir);
}

/* A snapshot taken while the object table is being resized (the daemon
 * forks at any tick) holds every object once, from the old table and the
 * new one, and moves nothing: the child's walk must not write the tables
 * (each page written is a page copied). */
static void snapshot_during_a_resize(void **state)
{
	enum { N = 800 }; /* the table doubled at 769: 20-odd inserts in */
	char dir[256], k[32];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	uint64_t seq;
	unsigned dropped;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "msnapr", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	for (int i = 0; i < N; i++) {
		snprintf(k, sizeof(k), "key-%d", i);
		mt_put_ok(t, C1, k, 100 + (uint64_t)i);
	}
	mt_wal_commit(w);
	assert_true(mc_master_table_resizing(t->m));
	seq = mt_wal_snapshot(t, w, dir, 2, &dropped);
	assert_true(mc_master_table_resizing(t->m)); /* the dump moved nothing */
	mt_wal_crash(t, w);

	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(si.seq, seq);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	assert_int_equal(mt_metrics(t).key_count, N);
	for (int i = 0; i < N; i++) {
		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_exist(t, k), 1);
	}
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/* A snapshot taken while segments still wait for their remount keeps
 * their objects (hidden), and they come back when the segment does. */
static void snapshot_keeps_waiting_segments(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	uint64_t a1;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "msnap", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	mt_wal_commit(w);
	a1 = first_addr(t, "k1");
	mt_wal_crash(t, w);
	t = start_snap(dir, &w, &si);
	assert_false(si.found);
	(void)mt_wal_snapshot(t, w, dir, 2, NULL); /* seg1 waiting */
	mt_wal_crash(t, w);
	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(first_addr(t, "k1"), a1);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/*
 * A remount binds the replicas its segment's list names (wal_log.c), in
 * any order: here from a snapshot (loaded in bulk), with objects removed and put again while the
 * segment waits (the list still names them: the kept, emptied objects must not be bound, and with
 * more than 4096 of them the lists are compacted), and a second segment that comes back first.
 */
#define NWAIT 6000
#define NGONE 4500
static void check_after_remount(struct mt *t, const uint64_t *addr)
{
	char key[32];

	for (int i = 0; i < NWAIT; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		if (i < 10) /* put again on seg2 while seg1 waited */
			assert_true(first_addr(t, key) >= BASE2);
		else if (i < NGONE)
			assert_int_equal(mt_exist(t, key), 0);
		else
			assert_int_equal(first_addr(t, key), addr[i]);
	}
	assert_int_equal(mt_metrics(t).key_count, NWAIT - NGONE + 10);
}

static void remount_binds_its_list_only(void **state)
{
	char dir[256], key[32];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	static uint64_t addr[NWAIT];
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mlist", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	for (int i = 0; i < NWAIT; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		mt_put_ok(t, C1, key, 1000 + (uint64_t)(i % 7) * 64);
		addr[i] = first_addr(t, key);
	}
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ), MC_OK);
	mt_wal_commit(w);
	(void)mt_wal_snapshot(t, w, dir, 2, NULL);
	mt_wal_crash(t, w);

	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(mt_metrics(t).key_count, NWAIT);
	assert_int_not_equal(mt_get(t, "k0"), MC_OK); /* hidden */
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ), MC_OK);
	for (int i = 0; i < NGONE; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(mt_rm(t, key, true), MC_OK);
	}
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		mt_put_ok(t, C1, key, 2000);
	}
	mt_wal_commit(w);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	check_after_remount(t, addr);
	/* the bound ranges are taken: what seg1 gives now lies outside them */
	for (int i = 0; i < 20; i++) {
		uint64_t a;

		snprintf(key, sizeof(key), "new%d", i);
		mt_put_ok(t, C1, key, 1000);
		a = first_addr(t, key);
		for (int j = NGONE; a < BASE2 && j < NWAIT; j++)
			assert_true(a + 1000 <= addr[j] || a >= addr[j] + 1000 + 6 * 64);
		assert_int_equal(mt_rm(t, key, true), MC_OK);
	}
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	/* and the log after the snapshot replays to the same */
	t = start_snap(dir, &w, &si);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ), MC_OK);
	check_after_remount(t, addr);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/*
 * The snapshot lists the objects by segment, then address (wal_log.c,
 * dump_sorted): a restart allocates them in that order and the remount's
 * claims need no sort.  Objects on two segments, some removed and put
 * again into the holes (so neither the table's nor the puts' order is the
 * address order).  Without memory for the order the dump writes the
 * table's order, and the remount sorts: every replica is bound again at
 * its address either way.  The same when the daemon asks for no sort (too
 * little memory left for it: sort_needs_a_share_of_the_headroom).
 */
#define NORD 3000
struct order_seen {
	struct mc_store_uuid segs[4];
	unsigned nsegs, seg_at; /* segs in the file's order; the current run */
	uint64_t last, n, unsorted;
};

static mc_status order_entry(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	static struct mc_walrec r;
	struct order_seen *o = arg;
	unsigned k;

	assert_int_equal(mc_walrec_decode(type, p, len, &r), MC_OK);
	if (type == MC_WALREC_SEG_MOUNT) {
		assert_int_equal(o->n, 0); /* the segments first */
		assert_true(o->nsegs < 4);
		o->segs[o->nsegs++] = r.u.seg.id;
		return MC_OK;
	}
	assert_int_equal(type, MC_WALREC_OBJ_PUT);
	for (k = 0; k < o->nsegs; k++)
		if (o->segs[k].first == r.u.obj.reps[0].seg.first &&
		    o->segs[k].second == r.u.obj.reps[0].seg.second)
			break;
	assert_true(k < o->nsegs);
	if (o->n && (k < o->seg_at || (k == o->seg_at && r.u.obj.reps[0].addr <= o->last)))
		o->unsorted++;
	o->seg_at = k;
	o->last = r.u.obj.reps[0].addr;
	o->n++;
	return MC_OK;
}

static struct order_seen read_order(const char *dir, uint64_t seq)
{
	char path[512];
	struct order_seen o;
	uint8_t *buf;
	long len;
	FILE *f;

	memset(&o, 0, sizeof(o));
	snap_file(dir, seq, path, sizeof(path));
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	rewind(f);
	buf = malloc((size_t)len);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	assert_int_equal(mc_snap_decode(buf, (size_t)len, NULL, order_entry, &o), MC_OK);
	free(buf);
	return o;
}

static void snapshot_lists_objects_in_address_order(void **state)
{
	char dir[256], key[32];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	static uint64_t addr[NORD], size[NORD];
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "morder", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ), MC_OK);
	for (int i = 0; i < NORD; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		size[i] = 1000 + (uint64_t)(i % 5) * 64;
		mt_put_ok(t, C1, key, size[i]);
	}
	for (int i = 0; i < NORD; i += 3) { /* holes, filled again out of order */
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(mt_rm(t, key, true), MC_OK);
	}
	for (int i = NORD - 3; i >= 0; i -= 3) {
		snprintf(key, sizeof(key), "k%d", i);
		size[i] = 1000;
		mt_put_ok(t, C1, key, size[i]);
	}
	for (int i = 0; i < NORD; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		addr[i] = first_addr(t, key);
	}
	mt_wal_commit(w);

	/* sorted; the sort's memory not had; the sort not asked for (too
	 * little headroom, mc_master_snap_sort_fits) */
	for (int pass = 0; pass < 3; pass++) {
		struct mc_snap_writer *sw;
		struct order_seen o;
		uint64_t seq, oldest;

		assert_int_equal(mc_wal_rotate(w), MC_OK);
		seq = mc_wal_last_seq(w);
		assert_int_equal(mc_snap_writer_open(dir, seq, &sw), MC_OK);
		if (pass == 1)
			mc_alloc_fault_arm(1); /* the order's count: the table's order */
		assert_int_equal(mc_master_snap_dump(t->m, sw, pass != 2), MC_OK);
		mc_alloc_fault_arm(0);
		assert_int_equal(mc_snap_writer_finish(sw), MC_OK);
		assert_int_equal(mc_snap_retain(dir, 1, &oldest), MC_OK);
		assert_int_equal(mc_wal_drop_through(w, oldest, NULL), MC_OK);
		o = read_order(dir, seq);
		assert_int_equal(o.nsegs, 2);
		assert_int_equal(o.n, NORD);
		if (pass == 0)
			assert_int_equal(o.unsorted, 0);
		else
			assert_true(o.unsorted > 0);
		mt_wal_crash(t, w);

		t = start_snap(dir, &w, &si);
		assert_true(si.found);
		assert_int_equal(mt_metrics(t).key_count, NORD);
		assert_int_equal(mt_mount(t, C1, S2, "seg2", BASE2, SEGSZ), MC_OK);
		assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
		mt_wal_commit(w);
		for (int i = 0; i < NORD; i++) {
			snprintf(key, sizeof(key), "k%d", i);
			assert_int_equal(first_addr(t, key), addr[i]);
		}
		/* the bound ranges are taken: a new put lands outside every one */
		mt_put_ok(t, C1, "new", 1000);
		{
			uint64_t a = first_addr(t, "new");

			for (int i = 0; i < NORD; i++)
				assert_true(a + 1000 <= addr[i] || a >= addr[i] + size[i]);
		}
		assert_int_equal(mt_rm(t, "new", true), MC_OK);
		mt_wal_commit(w);
	}
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/*
 * Whether the snapshot child sorts (server_snap.c asks before it forks):
 * its arrays, 32 bytes per object, must fit in 1/MC_MASTER_SNAP_SORT_SHARE
 * of the memory the process may still take; an unknown headroom sorts.
 */
static void sort_needs_a_share_of_the_headroom(void **state)
{
	const uint64_t g = 1ull << 30;
	char dir[256], key[32];
	struct mc_wal *w;
	struct mt *t;
	uint64_t empty, need;
	(void)state;

	/* 100 M objects: about 3.2 GB */
	need = 100000000ull * 32;
	assert_true(mc_master_snap_sort_fits(need, UINT64_MAX));
	assert_true(mc_master_snap_sort_fits(need, need * MC_MASTER_SNAP_SORT_SHARE));
	assert_false(mc_master_snap_sort_fits(need, need * MC_MASTER_SNAP_SORT_SHARE - 1));
	assert_false(mc_master_snap_sort_fits(need, 4 * g));
	assert_true(mc_master_snap_sort_fits(need, 8 * g));
	assert_false(mc_master_snap_sort_fits(1, 0));
	assert_true(mc_master_snap_sort_fits(0, 0));

	/* the estimate: 32 bytes for each object, whatever the segments */
	assert_true(mc_test_tmpdir(NULL, "msortb", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	empty = mc_master_snap_sort_bytes(t->m);
	assert_true(empty > 0 && empty < 64 * 1024);
	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		mt_put_ok(t, C1, key, 1000);
	}
	assert_int_equal(mc_master_snap_sort_bytes(t->m), empty + 100 * 32);
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/* A snapshot's entry, encoded as the writer does. */
static void snap_put_rec(struct mc_snap_writer *sw, const struct mc_walrec *r)
{
	struct mc_buf b;

	mc_buf_init(&b);
	mc_walrec_encode(&b, r);
	assert_int_equal(b.err, MC_OK);
	assert_int_equal(mc_snap_writer_add(sw, r->type, b.data, (uint32_t)b.len), MC_OK);
	mc_buf_release(&b);
}

static void snap_obj(struct mc_snap_writer *sw, const char *key, uint64_t addr, uint64_t size)
{
	struct mc_walrec r;

	mc_walrec_clear(&r);
	r.type = MC_WALREC_OBJ_PUT;
	r.u.obj.tenant = (struct mc_walrec_str){"default", 7};
	r.u.obj.key = (struct mc_walrec_str){key, (uint16_t)strlen(key)};
	r.u.obj.size = size;
	r.u.obj.nrep = 1;
	r.u.obj.reps[0].kind = MC_WALREC_REP_MEMORY;
	r.u.obj.reps[0].seg = S1;
	r.u.obj.reps[0].addr = addr;
	snap_put_rec(sw, &r);
}

/*
 * A snapshot whose replicas overlap or lie outside their segment (a bug
 * or a hand-made file: its checksums hold) is not trusted for them: the
 * remount binds the first of two overlapping ranges, refuses the second
 * and the one outside (logged with the first refused address and why),
 * and those objects are dropped, never served over another one's bytes.
 */
static void remount_refuses_overlapping_and_outside_ranges(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	struct mc_snap_writer *sw;
	struct mc_walrec r;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mbad", dir, sizeof(dir)));
	assert_int_equal(mc_snap_writer_open(dir, 1, &sw), MC_OK);
	mc_walrec_clear(&r);
	r.type = MC_WALREC_SEG_MOUNT;
	r.u.seg.id = S1;
	r.u.seg.client = C1;
	r.u.seg.base = BASE1;
	r.u.seg.size = SEGSZ;
	r.u.seg.name = (struct mc_walrec_str){"seg1", 4};
	r.u.seg.te_endpoint = (struct mc_walrec_str){"127.0.0.1:1", 11};
	r.u.seg.protocol = (struct mc_walrec_str){"tcp", 3};
	snap_put_rec(sw, &r);
	snap_obj(sw, "ok", BASE1, 4096);
	snap_obj(sw, "over", BASE1 + 2048, 4096);	 /* inside "ok" */
	snap_obj(sw, "out", BASE1 + SEGSZ - 1024, 4096); /* past the end */
	snap_obj(sw, "ok2", BASE1 + 8192, 4096);
	assert_int_equal(mc_snap_writer_finish(sw), MC_OK);

	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(mt_metrics(t).key_count, 4); /* hidden, all four */
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	assert_int_equal(first_addr(t, "ok"), BASE1);
	assert_int_equal(first_addr(t, "ok2"), BASE1 + 8192);
	assert_int_not_equal(mt_get(t, "over"), MC_OK);
	assert_int_not_equal(mt_get(t, "out"), MC_OK);
	while (mc_master_sweep_run(t->m, 0))
		;
	mt_wal_commit(w);
	assert_int_equal(mt_metrics(t).key_count, 2);
	/* what the refused ones claimed stays with "ok": a new put goes elsewhere */
	mt_put_ok(t, C1, "new", 4096);
	{
		uint64_t a = first_addr(t, "new");

		assert_true(a >= BASE1 + 4096 && (a + 4096 <= BASE1 + 8192 || a >= BASE1 + 12288));
	}
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

static void corrupt_newest_snapshot_falls_back(void **state)
{
	char dir[256], path[512];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	uint64_t s1, s2;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "msnap", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	mt_wal_commit(w);
	s1 = mt_wal_snapshot(t, w, dir, 2, NULL);
	mt_put_ok(t, C1, "k2", 1000);
	mt_wal_commit(w);
	s2 = mt_wal_snapshot(t, w, dir, 2, NULL);
	mt_put_ok(t, C1, "k3", 1000);
	mt_wal_commit(w);
	/* a third: the first one goes, the log is kept from the second one */
	mt_put_ok(t, C1, "k4", 1000);
	mt_wal_commit(w);
	{
		uint64_t s3 = mt_wal_snapshot(t, w, dir, 2, NULL);

		assert_int_equal(count_files(dir, "snap-", ".snap"), 2);
		snap_file(dir, s1, path, sizeof(path));
		assert_int_not_equal(access(path, F_OK), 0);
		s1 = s2;
		s2 = s3;
	}
	mt_put_ok(t, C1, "k5", 1000);
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	snap_file(dir, s2, path, sizeof(path));
	/* in the body: its checksum fails */
	assert_true(mc_test_flip_byte(path, MC_SNAP_HDR_LEN + 10));

	t = start_snap(dir, &w, &si);
	assert_true(si.found);
	assert_int_equal(si.seq, s1);
	assert_int_equal(si.rejected, 1);
	assert_int_equal(count_files(dir, "snap-", ".snap.bad"), 1);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	/* the older snapshot and the log after it: everything */
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(mt_get(t, "k2"), MC_OK);
	assert_int_equal(mt_get(t, "k3"), MC_OK);
	assert_int_equal(mt_get(t, "k4"), MC_OK);
	assert_int_equal(mt_get(t, "k5"), MC_OK);
	mt_wal_crash(t, w);

	/* a torn one (cut short) is set aside the same way */
	snap_file(dir, s1, path, sizeof(path));
	assert_int_equal(truncate(path, MC_SNAP_HDR_LEN + 3), 0);
	{
		struct mc_master_config cfg;
		struct mt_replay x;

		mt_cfg_init(&cfg);
		t = mt_new(&cfg);
		mt_replay_init(&x, t, NULL);
		if (mc_snap_load(dir, mt_replay_snap, &x, &si) != MC_OK)
			fail_msg("%s", mc_last_error());
		assert_false(si.found);
		assert_int_equal(si.rejected, 1);
		mt_free(t);
	}
	mc_test_rmtree(dir);
}

static void newer_snapshot_version_is_refused(void **state)
{
	char dir[256], path[512];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	struct mt_replay x;
	struct mc_master_config cfg;
	uint64_t seq, sum;
	uint8_t h[MC_SNAP_HDR_LEN];
	int fd;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "msnap", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_put_ok(t, C1, "k1", 1000);
	mt_wal_commit(w);
	seq = mt_wal_snapshot(t, w, dir, 2, NULL);
	mt_wal_crash(t, w);
	/* version 2, its header checksum made to match: a newer master's file */
	snap_file(dir, seq, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	h[8] = MC_SNAP_VERSION + 1;
	sum = XXH3_64bits(h, 40);
	for (int i = 0; i < 8; i++)
		h[40 + i] = (uint8_t)(sum >> (8 * i));
	assert_int_equal(pwrite(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);

	mt_cfg_init(&cfg);
	t = mt_new(&cfg);
	mt_replay_init(&x, t, NULL);
	assert_int_equal(mc_snap_load(dir, mt_replay_snap, &x, &si), MC_ERR_INVALID_VERSION);
	assert_non_null(strstr(mc_last_error(), "newer"));
	/* refused, not set aside: the operator decides */
	assert_int_equal(access(path, F_OK), 0);
	mt_free(t);
	mc_test_rmtree(dir);
}

/* FetchTasks of client c: how many tasks it was handed. */
static uint32_t fetch_n(struct mt *t, struct mc_store_uuid c)
{
	struct mc_store_fetch_tasks_req r = {c, 16};

	assert_int_equal(mt_call(t, MC_STORE_FETCH_TASKS, &r), MC_OK);
	return t->resp.body.fetch_tasks_resp.n_tasks;
}

/* Under-replicated objects after the sweeps have run. */
static uint64_t under(struct mt *t)
{
	mc_master_tick(t->m, t->now);
	while (mc_master_sweep_pending(t->m))
		mc_master_tick(t->m, t->now);
	return mt_metrics(t).repair_under_replicated;
}

/*
 * The repair queue is not logged but comes back: an object that lost a
 * memory replica (its segment unmounted for good) before the crash is
 * logged as its OBJ_PUT (both replicas) and the SEG_UNMOUNT, so the
 * replay's sweep finds it under-replicated again and queues its repair;
 * once its source segment is back a copy task is handed out.
 */
static void repair_queue_comes_back(void **state)
{
	static const struct mc_store_uuid C2 = {2, 2}, S3 = {10, 3};
	struct mc_store_replicate_config two = mt_cfg1();
	struct mc_store_unmount_req u = {C2, S2};
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	(void)state;
	two.replica_num = 2;
	assert_true(mc_test_tmpdir(NULL, "mwal", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_mount(t, C2, S2, "seg2", BASE2, SEGSZ), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, C1, "", "r", 4096, "", &two, false), MC_OK);
	assert_int_equal(mt_put_end(t, C1, "r"), MC_OK);
	mt_put_ok(t, C1, "one", 4096); /* one replica wanted: nothing to repair */
	mt_wal_commit(w);
	assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	mt_wal_commit(w);
	assert_int_equal(under(t), 1);
	mt_wal_crash(t, w); /* before any copy was handed out */

	t = start(dir, &w, NULL);
	assert_int_equal(under(t), 1);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_mount(t, C2, S3, "seg3", BASE2, SEGSZ), MC_OK);
	mt_wal_commit(w);
	assert_int_equal(mt_get(t, "r"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	t->now += 1000;
	assert_int_equal(under(t), 1);
	assert_int_equal(fetch_n(t, C1), 1); /* the copy of r, from seg1 */
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/* ---- chunk checksums (minor 9) ------------------------------------------------ */

/* PutEnd of key with checksum sum and nsums chunk sums (i * 3 + 1). */
static mc_status put_end_sums(struct mt *t, const char *key, uint64_t sum, uint32_t nsums)
{
	uint64_t v[8];
	struct mc_store_put_end_req r = {
		.client_id = C1,
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
		.checksum = {true, sum},
		.n_chunk_sums = nsums,
		.chunk_sums = v,
	};

	for (uint32_t i = 0; i < nsums && i < 8; i++)
		v[i] = i * 3 + 1;
	return mt_call(t, MC_STORE_PUT_END, &r);
}

/* BatchGetReplicaList of key: its chunk sums are (i * 3 + 1), n of them,
 * when asked; never when not. */
static void expect_sums(struct mt *t, const char *key, uint32_t n)
{
	struct mc_proto_str k = mc_proto_str_c(key);
	struct mc_store_keys_req r = {.n_keys = 1, .keys = &k};
	const struct mc_store_batch_replica_list *l = &t->resp.body.batch_replica_list;

	assert_int_equal(mt_call(t, MC_STORE_BATCH_GET_REPLICA_LIST, &r), MC_OK);
	assert_int_equal(l->n_chunks, 0);
	r.want = (struct mc_proto_opt_u64){true, MC_STORE_WANT_CHUNKS};
	assert_int_equal(mt_call(t, MC_STORE_BATCH_GET_REPLICA_LIST, &r), MC_OK);
	assert_int_equal(l->n_items, 1);
	assert_int_equal(l->items[0].status, MC_OK);
	assert_true(l->items[0].list.checksum.present);
	assert_int_equal(l->n_chunks, 1);
	assert_int_equal(l->chunks[0].n, n);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(l->chunks[0].v[i], i * 3 + 1);
}

/*
 * A writer's chunk checksums are kept with the object, listed only to a
 * request that wants them, and come back from the log and from a snapshot;
 * a count that does not match the object's size is refused, a list without
 * the object's checksum too.  A later replica (an added copy) does not
 * disturb them.
 */
static void chunk_checksums_survive_log_and_snapshot(void **state)
{
	enum { C = MC_STORE_CHUNK };
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mwalc", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(mt_put_start(t, C1, "c3", 2 * C + 5), MC_OK);
	assert_int_equal(put_end_sums(t, "c3", 77, 2), MC_ERR_INVALID_PARAMS); /* 3 chunks */
	{
		struct mc_store_put_end_req r = {.client_id = C1,
						 .replica_type = MC_STORE_REPLICA_ALL,
						 .key = mc_proto_str_c("c3"),
						 .n_chunk_sums = 3,
						 .chunk_sums = (uint64_t[3]){1, 4, 7}};
		assert_int_equal(mt_call(t, MC_STORE_PUT_END, &r), MC_ERR_INVALID_PARAMS);
	}
	assert_int_equal(put_end_sums(t, "c3", 77, 3), MC_OK);
	assert_int_equal(mt_put_start(t, C1, "c1", C), MC_OK); /* one chunk: none */
	assert_int_equal(put_end_sums(t, "c1", 5, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(put_end_sums(t, "c1", 5, 0), MC_OK);
	mt_put_ok(t, C1, "plain", 3 * C); /* no checksums at all */
	mt_wal_commit(w);
	expect_sums(t, "c3", 3);
	expect_sums(t, "c1", 0);
	mt_wal_crash(t, w);

	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	expect_sums(t, "c3", 3);
	assert_int_equal(t->resp.body.batch_replica_list.items[0].list.checksum.value, 77);
	assert_int_equal(mt_get(t, "plain"), MC_OK);
	assert_false(t->resp.body.replica_list.checksum.present);
	/* a snapshot, then the log after it */
	mt_wal_snapshot(t, w, dir, 2, NULL);
	assert_int_equal(mt_put_start(t, C1, "c5", 4 * C + 1), MC_OK);
	assert_int_equal(put_end_sums(t, "c5", 9, 5), MC_OK);
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	t = start_snap(dir, &w, &si);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	expect_sums(t, "c3", 3);
	expect_sums(t, "c5", 5);
	assert_int_equal(t->resp.body.batch_replica_list.items[0].list.checksum.value, 9);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/* PutStart of key (len bytes, trailer tl: 0 none) and PutEnd with checksum sum. */
static mc_status put_trailer(struct mt *t, const char *key, uint64_t len, uint64_t tl, uint64_t sum)
{
	struct mc_store_put_start_req s = {.client_id = C1,
					   .key = mc_proto_str_c(key),
					   .value_len = len,
					   .config = {.replica_num = 1},
					   .trailer_len = {tl != 0, tl}};
	struct mc_store_put_end_req e = {.client_id = C1,
					 .replica_type = MC_STORE_REPLICA_ALL,
					 .key = mc_proto_str_c(key),
					 .checksum = {true, sum}};
	mc_status st = mt_call(t, MC_STORE_PUT_START, &s);

	return st == MC_OK ? mt_call(t, MC_STORE_PUT_END, &e) : st;
}

/* key as a reader of minor 10 sees it (GetReplicaList and the batch
 * form): its size, and the trailer's hash instead of a checksum */
static void expect_trailer(struct mt *t, const char *key, uint64_t len, uint64_t sum)
{
	struct mc_proto_str k = mc_proto_str_c(key);
	struct mc_store_keys_req r = {.n_keys = 1, .keys = &k};
	const struct mc_store_batch_replica_list *l = &t->resp.body.batch_replica_list;

	assert_int_equal(mt_get(t, key), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, len);
	assert_false(t->resp.body.replica_list.checksum.present);
	assert_true(t->resp.body.replica_list.table_cksum.present);
	assert_int_equal(t->resp.body.replica_list.table_cksum.value, sum);
	assert_int_equal(mt_call(t, MC_STORE_BATCH_GET_REPLICA_LIST, &r), MC_OK);
	assert_int_equal(l->n_tables, 1);
	assert_true(l->tables[0].present);
	assert_int_equal(l->tables[0].value, sum);
	assert_false(l->items[0].list.checksum.present);
}

/*
 * Minor 10's trailers: PutStart asks for the trailer of its value; the
 * master allocates value + trailer (the next object's block starts after
 * it), lists the value's size and, to a reader of minor 10, the trailer's
 * hash as table_cksum (checksum absent); a reader of minor 9 gets neither
 * (it reads unchecked).  A wrong length, a trailer on a value of one
 * chunk, chunk sums for an object with a trailer are refused.  The flag
 * and the allocation come back from the log and from a snapshot (a new
 * object after a restart does not overlap the trailer).
 */
static void trailer_objects_survive_log_and_snapshot(void **state)
{
	enum { T = MC_STORE_TCHUNK, LEN = 10 * T + 3 };
	const uint64_t tl = mc_store_trailer_len(LEN);
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_snap_load_info si;
	uint64_t a1;
	(void)state;
	assert_int_equal(tl, 8 * 11);
	assert_int_equal(mc_store_untrailer(LEN + tl), LEN);
	assert_true(mc_test_tmpdir(NULL, "mwalt", dir, sizeof(dir)));
	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	assert_int_equal(put_trailer(t, "bad", LEN, tl + 8, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(put_trailer(t, "bad", T, 8, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(put_trailer(t, "t1", LEN, tl, 0x1234), MC_OK);
	{
		struct mc_store_put_start_req s = {
			.client_id = C1,
			.key = mc_proto_str_c("t2"),
			.value_len = 2 * MC_STORE_CHUNK + 1,
			.config = {.replica_num = 1},
			.trailer_len = {true, mc_store_trailer_len(2 * MC_STORE_CHUNK + 1)}};
		assert_int_equal(mt_call(t, MC_STORE_PUT_START, &s), MC_OK);
		assert_int_equal(put_end_sums(t, "t2", 7, 3), MC_ERR_INVALID_PARAMS);
	}
	mt_put_ok(t, C1, "plain", 1000);
	a1 = first_addr(t, "t1");
	assert_true(first_addr(t, "plain") >= a1 + LEN + tl || first_addr(t, "plain") + 1000 <= a1);
	mt_wal_commit(w);
	expect_trailer(t, "t1", LEN, 0x1234);
	/* a reader of minor 9: no checksum at all */
	t->minor = 9;
	assert_int_equal(mt_get(t, "t1"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, LEN);
	assert_false(t->resp.body.replica_list.checksum.present);
	assert_false(t->resp.body.replica_list.table_cksum.present);
	{
		struct mc_proto_str k = mc_proto_str_c("t1");
		struct mc_store_keys_req r = {.n_keys = 1, .keys = &k};

		assert_int_equal(mt_call(t, MC_STORE_BATCH_GET_REPLICA_LIST, &r), MC_OK);
		assert_int_equal(t->resp.body.batch_replica_list.n_tables, 0);
		assert_false(t->resp.body.batch_replica_list.items[0].list.checksum.present);
	}
	t->minor = 0;
	mt_wal_crash(t, w);

	t = start(dir, &w, NULL);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	expect_trailer(t, "t1", LEN, 0x1234);
	assert_int_equal(first_addr(t, "t1"), a1);
	mt_wal_snapshot(t, w, dir, 2, NULL);
	assert_int_equal(put_trailer(t, "t3", LEN, tl, 0x77), MC_OK);
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	t = start_snap(dir, &w, &si);
	assert_int_equal(mt_mount(t, C1, S1, "seg1", BASE1, SEGSZ), MC_OK);
	mt_wal_commit(w);
	expect_trailer(t, "t1", LEN, 0x1234);
	expect_trailer(t, "t3", LEN, 0x77);
	/* the trailer's bytes stay the object's: a new block does not overlap */
	for (int i = 0; i < 64; i++) {
		char k[16];

		snprintf(k, sizeof(k), "n%d", i);
		mt_put_ok(t, C1, k, 64);
		assert_true(first_addr(t, k) >= a1 + LEN + tl || first_addr(t, k) + 64 <= a1);
	}
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(objects_come_back_after_remount),
		cmocka_unit_test(segment_that_never_returns_drops_its_objects),
		cmocka_unit_test(torn_tail_is_cut_and_the_rest_kept),
		cmocka_unit_test(newer_payload_version_is_refused),
		cmocka_unit_test(view_record_replays),
		cmocka_unit_test(view_survives_a_snapshot),
		cmocka_unit_test(snapshot_truncated_while_read_falls_back),
		cmocka_unit_test(snapshot_then_puts_then_crash_restores_all),
		cmocka_unit_test(chunk_checksums_survive_log_and_snapshot),
		cmocka_unit_test(trailer_objects_survive_log_and_snapshot),
		cmocka_unit_test(snapshot_keeps_waiting_segments),
		cmocka_unit_test(snapshot_during_a_resize),
		cmocka_unit_test(remount_binds_its_list_only),
		cmocka_unit_test(snapshot_lists_objects_in_address_order),
		cmocka_unit_test(sort_needs_a_share_of_the_headroom),
		cmocka_unit_test(remount_refuses_overlapping_and_outside_ranges),
		cmocka_unit_test(corrupt_newest_snapshot_falls_back),
		cmocka_unit_test(newer_snapshot_version_is_refused),
		cmocka_unit_test(repair_queue_comes_back),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_master_wal_tasks.c - copy and move tasks and drain jobs
 * in the master's write-ahead log and snapshots (master/tasks_wal.c): their
 * records' codec (round trip, every cut refused, versions), a restart from
 * the log and from a snapshot (tasks answer QueryTask with their state,
 * handed-out ones pending again with their tries, the id sequence past
 * every logged id), a torn tail after a task record, and a drain job
 * whose segment never comes back, which fails instead of reporting success.
 *
 * The "crash" is a master freed without any shutdown of its own
 * (tests/support/wal_t.h).  With MC_WAL_TASK_SEEDS=DIR the log and snapshot
 * files of the restart tests are copied to DIR/wal/ and DIR/snap/ (how the
 * fuzz corpora's seeds of these records were made).
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
#include <unistd.h>

#include "../support/master_t.h"
#include "../support/support.h"
#include "../support/wal_t.h"
#include "master/master.h"
#include "master/snap.h"
#include "master/wal.h"
#include "master/wal_rec.h"
#include "mooncake/log.h"

#define MIB (1ull << 20)

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2}, CC = {3, 3};
static const struct mc_store_uuid SA = {10, 1}, SB = {20, 2}, SC = {30, 3};

/* ---- codec ---- */

static void encode(const struct mc_walrec *r, struct mc_buf *b)
{
	mc_buf_init(b);
	mc_walrec_encode(b, r);
	assert_int_equal(b->err, MC_OK);
}

/* r encodes, decodes to the same fields (checked by the caller through
 * *d, which points into *keep: the caller releases it) and re-encodes to
 * the same bytes; every shorter cut is refused. */
static void round_trip(const struct mc_walrec *r, struct mc_walrec *d, struct mc_buf *keep)
{
	struct mc_buf b, again;

	encode(r, &b);
	encode(r, keep);
	assert_int_equal(b.data[0], 3); /* the version of the new records */
	assert_int_equal(mc_walrec_decode(r->type, b.data, b.len, d), MC_OK);
	encode(d, &again);
	assert_int_equal(again.len, b.len);
	assert_memory_equal(again.data, b.data, b.len);
	for (size_t n = 0; n < b.len; n++) {
		struct mc_walrec x;

		assert_int_equal(mc_walrec_decode(r->type, b.data, n, &x), MC_ERR_MALFORMED_JSON);
	}
	/* one byte more is refused too */
	{
		static struct mc_walrec x;

		mc_buf_append(&b, "", 1);
		assert_int_equal(mc_walrec_decode(r->type, b.data, b.len, &x),
				 MC_ERR_MALFORMED_JSON);
		/* as a version 2 payload (what an older master writes for OBJ_PUT) */
		b.data[0] = 2;
		assert_int_equal(mc_walrec_decode(r->type, b.data, b.len - 1, &x),
				 MC_ERR_MALFORMED_JSON);
		b.data[0] = MC_WALREC_VERSION + 1;
		assert_int_equal(mc_walrec_decode(r->type, b.data, b.len - 1, &x),
				 MC_ERR_INVALID_VERSION);
	}
	mc_buf_release(&b);
	mc_buf_release(&again);
	assert_int_equal(mc_walrec_decode(r->type, keep->data, keep->len, d), MC_OK);
}

static void names_are(const struct mc_walrec_names *l, const char *const *want, uint32_t n)
{
	const uint8_t *pos = l->raw;
	struct mc_walrec_str s;

	assert_int_equal(l->n, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(mc_walrec_names_next(l, &pos, &s));
		assert_int_equal(s.len, strlen(want[i]));
		assert_memory_equal(s.p, want[i], s.len);
	}
	assert_false(mc_walrec_names_next(l, &pos, &s));
}

static void codec_round_trip(void **state)
{
	static const char *const targets[] = {"b:1", "c:1"}, *const segs[] = {"a:1"};
	static struct mc_walrec r, d;
	struct mc_buf keep;
	(void)state;

	mc_walrec_clear(&r);
	r.type = MC_WALREC_TASK;
	r.u.task.id = (struct mc_store_uuid){7, 42};
	r.u.task.type = MC_STORE_TASK_REPLICA_MOVE;
	r.u.task.status = MC_STORE_TASK_PROCESSING;
	r.u.task.tries = 3;
	r.u.task.tenant = (struct mc_walrec_str){"t1", 2};
	r.u.task.key = (struct mc_walrec_str){"key", 3};
	r.u.task.size = 4096;
	r.u.task.src_seg = SA;
	r.u.task.src_addr = 0x100000;
	r.u.task.client = CA;
	r.u.task.created = 11;
	r.u.task.updated = 12;
	r.u.task.targets = (struct mc_walrec_names){.n = 2, .v = targets};
	r.u.task.msg = (struct mc_walrec_str){"m", 1};
	round_trip(&r, &d, &keep);
	assert_int_equal(d.u.task.id.second, 42);
	assert_int_equal(d.u.task.type, MC_STORE_TASK_REPLICA_MOVE);
	assert_int_equal(d.u.task.status, MC_STORE_TASK_PROCESSING);
	assert_int_equal(d.u.task.tries, 3);
	assert_int_equal(d.u.task.src_addr, 0x100000);
	assert_int_equal(d.u.task.updated, 12);
	names_are(&d.u.task.targets, targets, 2);

	mc_buf_release(&keep);
	mc_walrec_clear(&r);
	r.type = MC_WALREC_JOB;
	r.u.job.id = (struct mc_store_uuid){9, 43};
	r.u.job.status = MC_JOB_RUNNING;
	r.u.job.max_conc = 4;
	r.u.job.succeeded = 5;
	r.u.job.bytes = 5000;
	r.u.job.segs = (struct mc_walrec_names){.n = 1, .v = segs};
	r.u.job.targets = (struct mc_walrec_names){.n = 2, .v = targets};
	round_trip(&r, &d, &keep);
	assert_int_equal(d.u.job.status, MC_JOB_RUNNING);
	assert_int_equal(d.u.job.max_conc, 4);
	assert_int_equal(d.u.job.succeeded, 5);
	names_are(&d.u.job.segs, segs, 1);
	names_are(&d.u.job.targets, targets, 2);

	mc_buf_release(&keep);
	mc_walrec_clear(&r);
	r.type = MC_WALREC_TASK_SEQ;
	r.u.seq = 99;
	round_trip(&r, &d, &keep);
	assert_int_equal(d.u.seq, 99);

	mc_buf_release(&keep);
	mc_walrec_clear(&r);
	r.type = MC_WALREC_SEG_GRACEFUL;
	r.u.grace.seg = SB;
	r.u.grace.deadline_epoch_ms = 1234567;
	round_trip(&r, &d, &keep);
	assert_int_equal(d.u.grace.seg.second, SB.second);
	assert_int_equal(d.u.grace.deadline_epoch_ms, 1234567);
	mc_buf_release(&keep);
}

/* Fields a decoder must refuse: a bad type or status, no target, an
 * empty name. */
static void codec_refuses_bad_fields(void **state)
{
	static const char *const one[] = {"b:1"}, *const empty[] = {""};
	static struct mc_walrec r, d;
	struct mc_buf b;
	(void)state;

	mc_walrec_clear(&r);
	r.type = MC_WALREC_TASK;
	r.u.task.key = (struct mc_walrec_str){"k", 1};
	r.u.task.targets = (struct mc_walrec_names){.n = 1, .v = one};
	encode(&r, &b);
	assert_int_equal(mc_walrec_decode(r.type, b.data, b.len, &d), MC_OK);
	b.data[17] = 9; /* the type, after the version and the id */
	assert_int_equal(mc_walrec_decode(r.type, b.data, b.len, &d), MC_ERR_MALFORMED_JSON);
	b.data[17] = 0;
	b.data[18] = 4; /* the status */
	assert_int_equal(mc_walrec_decode(r.type, b.data, b.len, &d), MC_ERR_MALFORMED_JSON);
	mc_buf_release(&b);
	r.u.task.targets.n = 0;
	encode(&r, &b);
	assert_int_equal(mc_walrec_decode(r.type, b.data, b.len, &d), MC_ERR_MALFORMED_JSON);
	mc_buf_release(&b);
	r.u.task.targets = (struct mc_walrec_names){.n = 1, .v = empty};
	encode(&r, &b);
	assert_int_equal(mc_walrec_decode(r.type, b.data, b.len, &d), MC_ERR_MALFORMED_JSON);
	mc_buf_release(&b);
	mc_walrec_clear(&r);
	r.type = MC_WALREC_JOB; /* no segment */
	encode(&r, &b);
	assert_int_equal(mc_walrec_decode(r.type, b.data, b.len, &d), MC_ERR_MALFORMED_JSON);
	mc_buf_release(&b);
}

/* ---- a master on a log ---- */

/* A master on the log in dir, after the newest snapshot there if any. */
static struct mt *start(const char *dir, struct mc_wal **w, uint64_t ttl_ms)
{
	struct mc_master_config cfg;

	mt_cfg_init(&cfg);
	cfg.client_ttl_ms = ttl_ms;
	cfg.max_retry_attempts = 2;
	return mt_wal_start(&cfg, dir, MT_WAL_SNAP, w, NULL, NULL);
}

/* Copy dir's files with prefix to $MC_WAL_TASK_SEEDS/sub/name. */
static void seed_out(const char *dir, const char *prefix, const char *sub, const char *name)
{
	const char *out = getenv("MC_WAL_TASK_SEEDS");
	char from[512], to[512], cmd[1400];
	DIR *d;
	struct dirent *e;

	if (!out || !(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(from, sizeof(from), "%s/%s", dir, e->d_name);
		snprintf(to, sizeof(to), "%s/%s/%s", out, sub, name);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
		assert_int_equal(system(cmd), 0);
		break;
	}
	closedir(d);
}

/* ---- the task RPCs ---- */

static mc_status copy_task(struct mt *t, const char *key, const char *target,
			   struct mc_store_uuid *id)
{
	struct mc_proto_str v[1] = {mc_proto_str_c(target)};
	struct mc_store_copy_task_req r = {mc_proto_str_c(""), mc_proto_str_c(key), 1, v};
	mc_status st = mt_call(t, MC_STORE_CREATE_COPY_TASK, &r);

	if (st == MC_OK)
		*id = t->resp.body.task_id.id;
	return st;
}

static mc_status move_task(struct mt *t, const char *key, const char *src, const char *dst,
			   struct mc_store_uuid *id)
{
	struct mc_store_move_task_req r = {mc_proto_str_c(""), mc_proto_str_c(key),
					   mc_proto_str_c(src), mc_proto_str_c(dst)};
	mc_status st = mt_call(t, MC_STORE_CREATE_MOVE_TASK, &r);

	if (st == MC_OK)
		*id = t->resp.body.task_id.id;
	return st;
}

static int query(struct mt *t, struct mc_store_uuid id)
{
	struct mc_store_task_id q = {id};
	mc_status st = mt_call(t, MC_STORE_QUERY_TASK, &q);

	return st == MC_OK ? t->resp.body.task_info.status : st;
}

static uint32_t fetch(struct mt *t, struct mc_store_uuid client, struct mc_store_uuid *ids,
		      uint32_t cap)
{
	struct mc_store_fetch_tasks_req r = {client, 8};
	uint32_t n;

	assert_int_equal(mt_call(t, MC_STORE_FETCH_TASKS, &r), MC_OK);
	n = t->resp.body.fetch_tasks_resp.n_tasks;
	for (uint32_t i = 0; i < n && i < cap; i++)
		ids[i] = t->resp.body.fetch_tasks_resp.tasks[i].id;
	return n;
}

static mc_status done(struct mt *t, struct mc_store_uuid client, struct mc_store_uuid id)
{
	struct mc_store_task_done_req r = {client, id, MC_OK, mc_proto_str_c("")};

	return mt_call(t, MC_STORE_MARK_TASK_TO_COMPLETE, &r);
}

static void put_on(struct mt *t, const char *key, uint64_t len, const char *seg)
{
	struct mc_store_replicate_config c = mt_cfg1();

	c.preferred_segment = mc_proto_str_c(seg);
	assert_int_equal(mt_put_start_cfg(t, CA, "", key, len, "", &c, false), MC_OK);
	assert_int_equal(mt_put_end(t, CA, key), MC_OK);
}

static void mount2(struct mt *t)
{
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
}

static bool same(struct mc_store_uuid a, struct mc_store_uuid b)
{
	return a.first == b.first && a.second == b.second;
}

/*
 * Tasks and a drain job before a crash, and what the restarted master
 * answers: a pending copy, a handed-out move (pending again), a finished
 * copy, a running job; new ids follow the logged ones; after the remount
 * the owner is handed both tasks and they finish.  With snap, the same
 * after a snapshot that holds them all (the log after it is empty).
 */
static void tasks_and_job_survive(bool snap)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_store_uuid cp = {0, 0}, mv = {0, 0}, fin = {0, 0}, job = {0, 0}, nid = {0, 0},
			     got[8];
	struct mc_master_drain_info info;
	const char *a[] = {"a:1"};
	char err[256];

	assert_true(mc_test_tmpdir(NULL, "mwtask", dir, sizeof(dir)));
	t = start(dir, &w, 60000);
	mount2(t);
	put_on(t, "done", 100, "a:1");
	put_on(t, "cp", 100, "a:1");
	put_on(t, "mv", 100, "a:1");
	mt_wal_commit(w);
	assert_int_equal(copy_task(t, "done", "b:1", &fin), MC_OK);
	assert_int_equal(fetch(t, CA, got, 8), 1);
	assert_int_equal(done(t, CA, fin), MC_OK);
	assert_int_equal(move_task(t, "mv", "a:1", "b:1", &mv), MC_OK);
	assert_int_equal(fetch(t, CA, got, 8), 1); /* handed out */
	assert_int_equal(query(t, mv), MC_STORE_TASK_PROCESSING);
	assert_int_equal(copy_task(t, "cp", "b:1", &cp), MC_OK); /* pending */
	mt_wal_commit(w);
	/* the drain of c:1, which holds nothing */
	assert_int_equal(mt_mount(t, CC, SC, "c:1", 0x2000000, MIB), MC_OK);
	{
		const char *c[] = {"c:1"};

		assert_int_equal(
			mc_master_drain_create(t->m, c, 1, a, 1, 2, t->now, &job, err, sizeof(err)),
			MC_OK);
	}
	mt_wal_commit(w);
	if (snap) {
		mt_wal_snapshot(t, w, dir, 2, NULL);
		seed_out(dir, "snap-", "snap", "file_tasks_jobs");
	} else {
		seed_out(dir, "wal-", "wal", "master_task_job_records");
	}
	mt_wal_crash(t, w);

	t = start(dir, &w, 60000);
	assert_int_equal(query(t, fin), MC_STORE_TASK_SUCCESS);
	assert_int_equal(query(t, mv), MC_STORE_TASK_PENDING); /* handed out: pending again */
	assert_int_equal(t->resp.body.task_info.type, MC_STORE_TASK_REPLICA_MOVE);
	assert_true(same(t->resp.body.task_info.assigned_client, CA));
	assert_int_equal(query(t, cp), MC_STORE_TASK_PENDING);
	assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
	assert_true(info.status <= MC_JOB_RUNNING);
	assert_int_equal(info.nsegments, 1);
	assert_string_equal(info.segments[0], "c:1");
	/* the segments wait: the tasks stay pending through ticks */
	for (int i = 0; i < 5; i++) {
		mc_master_tick(t->m, t->now);
		t->now += 200;
	}
	assert_int_equal(query(t, cp), MC_STORE_TASK_PENDING);
	assert_int_equal(query(t, mv), MC_STORE_TASK_PENDING);
	assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
	assert_int_equal(info.status, MC_JOB_RUNNING);
	assert_non_null(strstr(info.message, "waiting for segment 'c:1'"));
	/* remounted: the owner of a:1 gets both tasks, and they finish */
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_NEED_REMOUNT);
	mount2(t);
	mt_wal_commit(w);
	t->now += 200;
	mc_master_tick(t->m, t->now);
	{
		uint32_t n = fetch(t, CA, got, 8);
		bool saw_cp = false, saw_mv = false;

		assert_true(n >= 2);
		for (uint32_t i = 0; i < n && i < 8; i++) {
			saw_cp |= same(got[i], cp);
			saw_mv |= same(got[i], mv);
			if (same(got[i], cp) || same(got[i], mv))
				assert_int_equal(done(t, CA, got[i]), MC_OK);
		}
		assert_true(saw_cp && saw_mv);
	}
	assert_int_equal(query(t, cp), MC_STORE_TASK_SUCCESS);
	assert_int_equal(query(t, mv), MC_STORE_TASK_SUCCESS);
	/* c:1 back: it drains (a new lap finds nothing on it) and goes */
	assert_int_equal(mt_mount(t, CC, SC, "c:1", 0x2000000, MIB), MC_OK);
	assert_int_equal(copy_task(t, "done", "c:1", &nid), MC_ERR_SEGMENT_NOT_FOUND);
	for (int i = 0; i < 10; i++) {
		mc_master_tick(t->m, t->now);
		t->now += 200;
	}
	assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
	assert_int_equal(info.status, MC_JOB_SUCCEEDED);
	/* a new task's id is past every logged one */
	put_on(t, "new", 100, "a:1");
	assert_int_equal(copy_task(t, "new", "b:1", &nid), MC_OK);
	assert_true(nid.second > job.second && nid.second > cp.second);
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	/* a second restart: the finished ones stay finished */
	t = start(dir, &w, 60000);
	assert_int_equal(query(t, cp), MC_STORE_TASK_SUCCESS);
	assert_int_equal(query(t, mv), MC_STORE_TASK_SUCCESS);
	assert_int_equal(query(t, nid), MC_STORE_TASK_PENDING);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

static void tasks_survive_the_log(void **state)
{
	(void)state;
	tasks_and_job_survive(false);
}

static void tasks_survive_a_snapshot(void **state)
{
	(void)state;
	tasks_and_job_survive(true);
}

/* A hand-out that found no space counts toward max_retry_attempts (2
 * here) across a restart: the third such hand-out fails the task. */
static void retry_bound_is_kept(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_store_uuid id = {0, 0}, got[4];
	(void)state;

	assert_true(mc_test_tmpdir(NULL, "mwtask", dir, sizeof(dir)));
	t = start(dir, &w, 60000);
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, 8192), MC_OK);
	put_on(t, "big", 16384, "a:1");
	assert_int_equal(copy_task(t, "big", "b:1", &id), MC_OK);
	assert_int_equal(fetch(t, CA, got, 4), 0); /* no room on b:1: tries 1 */
	assert_int_equal(fetch(t, CA, got, 4), 0); /* tries 2 */
	assert_int_equal(query(t, id), MC_STORE_TASK_PENDING);
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	t = start(dir, &w, 60000);
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, 8192), MC_OK);
	t->now += 200;
	mc_master_tick(t->m, t->now); /* the scan gives it to a:1's owner */
	assert_int_equal(query(t, id), MC_STORE_TASK_PENDING);
	assert_int_equal(fetch(t, CA, got, 4), 0); /* tries 3: past the bound */
	assert_int_equal(query(t, id), MC_STORE_TASK_FAILED);
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/* A torn record after a task's: the tail is cut, the task kept. */
static void torn_tail_after_a_task(void **state)
{
	char dir[256], path[512] = "";
	struct mc_wal *w;
	struct mt *t;
	struct mc_store_uuid id = {0, 0};
	DIR *d;
	struct dirent *e;
	FILE *f;
	static const uint8_t torn[] = {60, 0, 0, 0, 6, 0, 0, 0, 9, 9, 9, 9, 3};
	(void)state;

	assert_true(mc_test_tmpdir(NULL, "mwtask", dir, sizeof(dir)));
	t = start(dir, &w, 60000);
	mount2(t);
	put_on(t, "k", 100, "a:1");
	assert_int_equal(copy_task(t, "k", "b:1", &id), MC_OK);
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d)))
		if (strncmp(e->d_name, "wal-", 4) == 0)
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
	closedir(d);
	f = fopen(path, "ab");
	assert_non_null(f);
	assert_int_equal(fwrite(torn, 1, sizeof(torn), f), sizeof(torn));
	fclose(f);

	t = start(dir, &w, 60000);
	assert_int_equal(query(t, id), MC_STORE_TASK_PENDING);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

/* A drain job whose segment never comes back after a restart fails,
 * naming it, instead of reporting SUCCEEDED with nothing moved. */
static void drain_of_a_segment_that_never_returns_fails(void **state)
{
	char dir[256];
	struct mc_wal *w;
	struct mt *t;
	struct mc_store_uuid job;
	struct mc_master_drain_info info;
	const char *a[] = {"a:1"};
	char err[256];
	(void)state;

	assert_true(mc_test_tmpdir(NULL, "mwtask", dir, sizeof(dir)));
	t = start(dir, &w, 2000);
	mount2(t);
	put_on(t, "k", 100, "a:1");
	assert_int_equal(
		mc_master_drain_create(t->m, a, 1, NULL, 0, 2, t->now, &job, err, sizeof(err)),
		MC_OK);
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	t = start(dir, &w, 2000);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK); /* a:1 never */
	for (int i = 0; i < 40; i++) {
		mc_master_tick(t->m, t->now);
		t->now += 200;
	}
	assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
	assert_int_equal(info.status, MC_JOB_FAILED);
	assert_non_null(strstr(info.message, "'a:1'"));
	assert_int_equal(mt_exist(t, "k"), 0); /* it went with its segment */
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	/* and stays failed */
	t = start(dir, &w, 2000);
	assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
	assert_int_equal(info.status, MC_JOB_FAILED);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

static bool seg_status(void *arg, const struct mc_master_segment_info *s)
{
	char *out = arg;

	snprintf(out + strlen(out), 128 - strlen(out), "%s=%s;", s->name,
		 mc_master_segment_status_name(s->status));
	return true;
}

/* A graceful unmount's deadline is in the log and in a snapshot: the
 * segment, mounted again after a restart, is unmounting again and goes
 * when its grace period (counted in wall-clock time) is over, not never. */
static void graceful_deadline_survives(bool snap)
{
	char dir[256], st[128];
	struct mc_wal *w;
	struct mt *t;
	struct mc_store_graceful_unmount_req g = {CA, SA, 60000};

	assert_true(mc_test_tmpdir(NULL, "mwtask", dir, sizeof(dir)));
	t = start(dir, &w, 120000);
	mount2(t);
	put_on(t, "k", 100, "a:1");
	assert_int_equal(mt_call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &g), MC_OK);
	mt_wal_commit(w);
	if (snap) {
		mt_wal_snapshot(t, w, dir, 2, NULL);
		seed_out(dir, "snap-", "snap", "file_seg_graceful");
	} else {
		seed_out(dir, "wal-", "wal", "master_seg_graceful_records");
	}
	mt_wal_crash(t, w);

	t = start(dir, &w, 120000);
	mount2(t);
	mt_wal_commit(w);
	st[0] = '\0';
	mc_master_foreach_segment(t->m, seg_status, st);
	assert_string_equal(st, "a:1=GRACEFULLY_UNMOUNTING;b:1=OK;");
	assert_int_equal(mt_get(t, "k"), MC_OK); /* readable meanwhile */
	mt_wal_crash(t, w);
	/* a second restart (the remount logged it again) */
	t = start(dir, &w, 120000);
	mount2(t);
	mc_master_tick(t->m, t->now + 50000);
	st[0] = '\0';
	mc_master_foreach_segment(t->m, seg_status, st);
	assert_string_equal(st, "a:1=GRACEFULLY_UNMOUNTING;b:1=OK;");
	mc_master_tick(t->m, t->now + 61000);
	st[0] = '\0';
	mc_master_foreach_segment(t->m, seg_status, st);
	assert_string_equal(st, "b:1=OK;");
	mt_wal_commit(w);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

static void graceful_deadline_in_the_log(void **state)
{
	(void)state;
	graceful_deadline_survives(false);
}

static void graceful_deadline_in_a_snapshot(void **state)
{
	(void)state;
	graceful_deadline_survives(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(codec_round_trip),
		cmocka_unit_test(codec_refuses_bad_fields),
		cmocka_unit_test(tasks_survive_the_log),
		cmocka_unit_test(tasks_survive_a_snapshot),
		cmocka_unit_test(retry_bound_is_kept),
		cmocka_unit_test(torn_tail_after_a_task),
		cmocka_unit_test(drain_of_a_segment_that_never_returns_fails),
		cmocka_unit_test(graceful_deadline_in_the_log),
		cmocka_unit_test(graceful_deadline_in_a_snapshot),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

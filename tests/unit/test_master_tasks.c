/*
 * tests/unit/test_master_tasks.c - copy and move tasks, replica repair
 * and drain jobs on the master (master/tasks.c), driven with explicit
 * time through the real codec (tests/support/master_t.h).  The clients'
 * side is played here: a fetch takes the tasks handed out, a report says
 * whether the bytes were written.  The real transfers are in
 * tests/integration/test_store_repair.py.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "master/master.h"
#include "master_t.h"
#include "mooncake/status.h"
#include "store/proto.h"
#include "support.h"

#define MIB (1ull << 20)

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2}, CC = {3, 3};
static const struct mc_store_uuid SA = {10, 1}, SB = {20, 2}, SC = {30, 3};

static void mount3(struct mt *t)
{
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CC, SC, "c:1", 0x2000000, MIB), MC_OK);
}

/* Put key (len bytes) by CA with n replicas, the first preferred on seg. */
static void put_on(struct mt *t, const char *key, uint64_t len, uint32_t n, const char *seg)
{
	struct mc_store_replicate_config c = mt_cfg1();

	c.replica_num = n;
	if (seg)
		c.preferred_segment = mc_proto_str_c(seg);
	assert_int_equal(mt_put_start_cfg(t, CA, "", key, len, "", &c, false), MC_OK);
	assert_int_equal(mt_put_end(t, CA, key), MC_OK);
}

static mc_status copy_task(struct mt *t, const char *key, const char *const *targets, uint32_t n,
			   struct mc_store_uuid *id)
{
	struct mc_proto_str v[8];
	struct mc_store_copy_task_req r = {mc_proto_str_c(""), mc_proto_str_c(key), n, v};
	mc_status st;

	for (uint32_t i = 0; i < n; i++)
		v[i] = mc_proto_str_c(targets[i]);
	st = mt_call(t, MC_STORE_CREATE_COPY_TASK, &r);
	if (st == MC_OK && id)
		*id = t->resp.body.task_id.id;
	return st;
}

static mc_status move_task(struct mt *t, const char *key, const char *src, const char *dst,
			   struct mc_store_uuid *id)
{
	struct mc_store_move_task_req r = {mc_proto_str_c(""), mc_proto_str_c(key),
					   mc_proto_str_c(src), mc_proto_str_c(dst)};
	mc_status st = mt_call(t, MC_STORE_CREATE_MOVE_TASK, &r);

	if (st == MC_OK && id)
		*id = t->resp.body.task_id.id;
	return st;
}

/* QueryTask: the status (enum mc_store_task_status) or a negative code. */
static int query(struct mt *t, struct mc_store_uuid id)
{
	struct mc_store_task_id q = {id};
	mc_status st = mt_call(t, MC_STORE_QUERY_TASK, &q);

	return st == MC_OK ? t->resp.body.task_info.status : st;
}

/* FetchTasks of client: the ids handed out into ids (up to cap). */
static uint32_t fetch(struct mt *t, struct mc_store_uuid client, uint32_t batch,
		      struct mc_store_uuid *ids, uint32_t cap)
{
	struct mc_store_fetch_tasks_req r = {client, batch};
	uint32_t n;

	assert_int_equal(mt_call(t, MC_STORE_FETCH_TASKS, &r), MC_OK);
	n = t->resp.body.fetch_tasks_resp.n_tasks;
	for (uint32_t i = 0; i < n && i < cap; i++)
		ids[i] = t->resp.body.fetch_tasks_resp.tasks[i].id;
	return n;
}

static mc_status done(struct mt *t, struct mc_store_uuid client, struct mc_store_uuid id,
		      mc_status st)
{
	struct mc_store_task_done_req r = {client, id, st, mc_proto_str_c(st ? "boom" : "")};

	return mt_call(t, MC_STORE_MARK_TASK_TO_COMPLETE, &r);
}

/* The segment names of key's readable replicas, sorted, comma-joined. */
static const char *where(struct mt *t, const char *key, char *buf, size_t cap)
{
	const struct mc_store_replica_list *l;
	char names[8][16];
	uint32_t n;

	buf[0] = '\0';
	if (mt_get(t, key) != MC_OK)
		return "absent";
	l = &t->resp.body.replica_list;
	n = l->n_replicas < 8 ? l->n_replicas : 8;
	for (uint32_t i = 0; i < n; i++)
		snprintf(names[i], sizeof(names[i]), "%.*s", (int)l->replicas[i].segment_name.len,
			 l->replicas[i].segment_name.ptr);
	qsort(names, n, sizeof(names[0]), (int (*)(const void *, const void *))strcmp);
	for (uint32_t i = 0; i < n; i++)
		snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "", names[i]);
	return buf;
}

/* ------------------------------------------------------------------------ */

static void test_copy_task(void **state)
{
	struct mt *t = mt_new_default();
	const char *bc[] = {"b:1", "c:1"}, *bad[] = {"zz:9"}, *twice[] = {"b:1", "b:1"};
	struct mc_store_uuid id = {0, 0}, got[4], none = {77, 77};
	char w[64];

	(void)state;
	mount3(t);
	put_on(t, "k", 100, 1, "a:1");
	/* the codes of a bad request */
	assert_int_equal(copy_task(t, "nope", bc, 2, NULL), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(copy_task(t, "k", bad, 1, NULL), MC_ERR_SEGMENT_NOT_FOUND);
	assert_int_equal(copy_task(t, "k", bc, 0, NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(copy_task(t, "k", twice, 2, NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(query(t, none), MC_ERR_TASK_NOT_FOUND);

	assert_int_equal(copy_task(t, "k", bc, 2, &id), MC_OK);
	assert_int_equal(query(t, id), MC_STORE_TASK_PENDING);
	assert_int_equal(t->resp.body.task_info.type, MC_STORE_TASK_REPLICA_COPY);
	assert_true(t->resp.body.task_info.assigned_client.first == CA.first);
	/* one task per object; the object cannot go while it runs */
	assert_int_equal(copy_task(t, "k", bc, 2, NULL), MC_ERR_OBJECT_HAS_REPLICATION_TASK);
	assert_int_equal(mt_rm(t, "k", true), MC_ERR_OBJECT_HAS_REPLICATION_TASK);

	/* only the source's owner gets it, with blocks on both targets */
	assert_int_equal(fetch(t, CB, 8, got, 4), 0);
	assert_int_equal(fetch(t, CA, 8, got, 4), 1);
	{
		const struct mc_store_task_assignment *a = &t->resp.body.fetch_tasks_resp.tasks[0];

		assert_int_equal(a->n_targets, 2);
		assert_memory_equal(a->source.segment_name.ptr, "a:1", 3);
		assert_int_equal(a->source.size, 100);
		assert_int_equal(a->targets[0].status, MC_STORE_REPLICA_PROCESSING);
		assert_non_null(strstr(a->payload.ptr, "\"key\":\"k\""));
	}
	assert_int_equal(query(t, id), MC_STORE_TASK_PROCESSING);
	assert_string_equal(where(t, "k", w, sizeof(w)), "a:1"); /* not readable yet */
	assert_int_equal(mt_metrics(t).allocated_bytes, 300);
	/* only its holder reports it */
	assert_int_equal(done(t, CB, id, MC_OK), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(done(t, CA, id, MC_OK), MC_OK);
	assert_int_equal(query(t, id), MC_STORE_TASK_SUCCESS);
	assert_string_equal(where(t, "k", w, sizeof(w)), "a:1,b:1,c:1");
	assert_int_equal(done(t, CA, id, MC_OK), MC_ERR_TASK_NOT_FOUND); /* finished */
	/* a target holding a copy already is skipped */
	assert_int_equal(copy_task(t, "k", bc, 2, &id), MC_OK);
	assert_int_equal(
		fetch(t, CA, 8, got, 4) + fetch(t, CB, 8, got, 4) + fetch(t, CC, 8, got, 4), 1);
	assert_int_equal(t->resp.body.fetch_tasks_resp.n_tasks, 0);
	assert_int_equal(mt_metrics(t).master_create_copy_task.requests, 7);
	assert_int_equal(mt_metrics(t).master_create_copy_task.failures, 5);
	assert_int_equal(mt_metrics(t).tasks_succeeded, 1);
	mt_free(t);
}

static void test_move_task(void **state)
{
	struct mc_master_config cfg;
	struct mt *t;
	struct mc_store_uuid id = {0, 0}, got[4];
	char w[64];

	(void)state;
	mt_cfg_init(&cfg);
	cfg.pending_task_timeout_ms = 5000;
	cfg.processing_task_timeout_ms = 5000;
	cfg.max_total_pending_tasks = 1;
	t = mt_new(&cfg);
	mount3(t);
	put_on(t, "m", 100, 1, "a:1");
	put_on(t, "n", 100, 1, "a:1");
	assert_int_equal(move_task(t, "m", "a:1", "a:1", NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(move_task(t, "m", "b:1", "c:1", NULL), MC_ERR_REPLICA_NOT_FOUND);
	assert_int_equal(move_task(t, "m", "a:1", "zz:9", NULL), MC_ERR_SEGMENT_NOT_FOUND);
	assert_int_equal(move_task(t, "gone", "a:1", "b:1", NULL), MC_ERR_OBJECT_NOT_FOUND);

	/* a failed transfer gives the block back and leaves the source */
	assert_int_equal(move_task(t, "m", "a:1", "b:1", &id), MC_OK);
	assert_int_equal(query(t, id), MC_STORE_TASK_PENDING);
	assert_int_equal(move_task(t, "n", "a:1", "b:1", NULL), MC_ERR_TASK_PENDING_LIMIT_EXCEEDED);
	assert_int_equal(fetch(t, CA, 8, got, 4), 1);
	assert_int_equal(done(t, CA, id, MC_ERR_TRANSFER_FAIL), MC_OK);
	assert_int_equal(query(t, id), MC_STORE_TASK_FAILED);
	assert_non_null(strstr(t->resp.body.task_info.message.ptr, "(-800 TRANSFER_FAIL)"));
	assert_string_equal(where(t, "m", w, sizeof(w)), "a:1");
	assert_int_equal(mt_metrics(t).allocated_bytes, 200);

	/* a success: the replica is on the target only */
	assert_int_equal(move_task(t, "m", "a:1", "b:1", &id), MC_OK);
	assert_int_equal(move_task(t, "m", "a:1", "b:1", NULL), MC_ERR_OBJECT_HAS_REPLICATION_TASK);
	assert_int_equal(fetch(t, CA, 8, got, 4), 1);
	assert_int_equal(done(t, CA, id, MC_OK), MC_OK);
	assert_string_equal(where(t, "m", w, sizeof(w)), "b:1");
	assert_int_equal(mt_metrics(t).allocated_bytes, 200);
	assert_int_equal(move_task(t, "m", "b:1", "b:1", NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(move_task(t, "n", "a:1", "b:1", NULL), MC_OK);
	assert_int_equal(move_task(t, "m", "b:1", "a:1", NULL), MC_ERR_TASK_PENDING_LIMIT_EXCEEDED);

	/* never handed out: fails at the pending timeout, never hangs */
	t->now += 5000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).tasks_failed, 2);
	assert_int_equal(mt_metrics(t).tasks_active, 0);
	/* handed out, never reported: the processing timeout, its block back */
	assert_int_equal(move_task(t, "n", "a:1", "b:1", &id), MC_OK);
	assert_int_equal(fetch(t, CA, 8, got, 4), 1);
	assert_int_equal(mt_metrics(t).allocated_bytes, 300);
	t->now += 5000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(query(t, id), MC_STORE_TASK_FAILED);
	assert_non_null(strstr(t->resp.body.task_info.message.ptr, "not reported in time"));
	assert_int_equal(mt_metrics(t).allocated_bytes, 200);
	assert_int_equal(done(t, CA, id, MC_OK), MC_ERR_TASK_NOT_FOUND); /* a late report */
	assert_string_equal(where(t, "n", w, sizeof(w)), "a:1");
	mt_free(t);
}

static void test_sources_and_targets_that_vanish(void **state)
{
	struct mc_master_config cfg;
	const char *b[] = {"b:1"}, *c[] = {"c:1"};
	struct mc_store_uuid id = {0, 0}, id2 = {0, 0}, got[4];
	struct mt *t;
	char w[64];

	(void)state;
	mc_master_config_defaults(&cfg); /* clients expire */
	t = mt_new(&cfg);
	mount3(t);
	put_on(t, "one", 100, 1, "a:1");
	put_on(t, "two", 100, 2, "a:1");
	/* a's death: the copy of "one" (its only source) fails, never hangs;
	 * the copy of "two" takes its other replica as the source */
	assert_int_equal(copy_task(t, "one", c, 1, &id), MC_OK);
	assert_int_equal(copy_task(t, "two", c, 1, &id2), MC_OK);
	assert_int_equal(query(t, id2), MC_STORE_TASK_PENDING);
	if (t->resp.body.task_info.assigned_client.first != CA.first) {
		/* two's source is on b or c already: nothing to re-source */
		assert_true(t->resp.body.task_info.assigned_client.first == CB.first ||
			    t->resp.body.task_info.assigned_client.first == CC.first);
	}
	t->now += 6000;
	(void)mt_ping(t, CB);
	(void)mt_ping(t, CC);
	t->now += 5000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(query(t, id), MC_STORE_TASK_FAILED);
	assert_int_equal(query(t, id2), MC_STORE_TASK_PENDING);
	assert_true(t->resp.body.task_info.assigned_client.first != CA.first);
	mt_free(t);

	/* the target goes while the copy runs: it fails, nothing is listed */
	mt_cfg_init(&cfg);
	t = mt_new(&cfg);
	mount3(t);
	put_on(t, "k", 100, 1, "a:1");
	assert_int_equal(copy_task(t, "k", b, 1, &id), MC_OK);
	assert_int_equal(fetch(t, CA, 8, got, 4), 1);
	{
		struct mc_store_unmount_req u = {CB, SB};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	assert_int_equal(done(t, CA, id, MC_OK), MC_OK);
	assert_int_equal(query(t, id), MC_STORE_TASK_FAILED);
	assert_non_null(strstr(t->resp.body.task_info.message.ptr, "SEGMENT_NOT_FOUND"));
	assert_string_equal(where(t, "k", w, sizeof(w)), "a:1");
	/* the holder goes while it runs a copy: it fails at the next scan */
	assert_int_equal(copy_task(t, "k", c, 1, &id), MC_OK);
	assert_int_equal(fetch(t, CA, 8, got, 4), 1);
	assert_int_equal(mt_metrics(t).allocated_bytes, 200);
	{
		struct mc_store_unmount_req u = {CA, SA};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	assert_int_equal(done(t, CA, id, MC_ERR_TRANSFER_FAIL), MC_OK);
	assert_int_equal(query(t, id), MC_STORE_TASK_FAILED);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mt_free(t);
}

/* Play every client until repair is done; returns the tasks run. */
static uint32_t run_clients(struct mt *t, const struct mc_store_uuid *clients, uint32_t nc,
			    uint32_t max_rounds, uint32_t *most_at_once)
{
	uint32_t total = 0;

	for (uint32_t round = 0; round < max_rounds; round++) {
		for (uint32_t c = 0; c < nc; c++) {
			struct mc_store_uuid ids[64];
			uint32_t n = fetch(t, clients[c], 64, ids, 64);

			if (most_at_once && n > *most_at_once)
				*most_at_once = n;
			for (uint32_t i = 0; i < n; i++)
				assert_int_equal(done(t, clients[c], ids[i], MC_OK), MC_OK);
			total += n;
		}
		if (mt_metrics(t).repair_under_replicated == 0)
			break;
		t->now += 100;
		for (uint32_t c = 0; c < nc; c++)
			(void)mt_ping(t, clients[c]);
		mc_master_tick(t->m, t->now);
	}
	return total;
}

static void test_repair_after_expiry(void **state)
{
	struct mc_master_config cfg;
	const struct mc_store_uuid live[] = {CB, CC};
	struct mt *t;
	char key[16], w[64];
	uint32_t on_a = 0, most = 0;

	(void)state;
	mc_master_config_defaults(&cfg);
	cfg.replica_repair_max_inflight = 4;
	t = mt_new(&cfg);
	mount3(t);
	for (int i = 0; i < 30; i++) {
		snprintf(key, sizeof(key), "r%d", i);
		put_on(t, key, 1000, 2, NULL);
		on_a += strstr(where(t, key, w, sizeof(w)), "a:1") != NULL;
	}
	assert_true(on_a > 0);
	/* A goes silent: its replicas die with it; B and C stay */
	t->now += 6000;
	(void)mt_ping(t, CB);
	(void)mt_ping(t, CC);
	t->now += 5000;
	mc_master_tick(t->m, t->now);
	while (mc_master_sweep_pending(t->m))
		mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).repair_under_replicated, on_a);
	/* repair runs within its bounds: 4 copies at once at most */
	assert_int_equal(run_clients(t, live, 2, 200, &most), on_a);
	assert_true(most <= 4);
	assert_int_equal(mt_metrics(t).repair_under_replicated, 0);
	assert_int_equal(mt_metrics(t).repair_done, on_a);
	assert_int_equal(mt_metrics(t).repair_bytes, on_a * 1000ull);
	for (int i = 0; i < 30; i++) {
		snprintf(key, sizeof(key), "r%d", i);
		assert_string_equal(where(t, key, w, sizeof(w)), "b:1,c:1");
	}
	mt_free(t);
}

static void test_repair_bounds_and_switch(void **state)
{
	struct mc_master_config cfg;
	const struct mc_store_uuid live[] = {CB, CC};
	struct mc_store_uuid ids[64];
	struct mt *t;
	char key[16];
	uint32_t n;

	(void)state;
	/* the byte budget: 2,000 bytes a second of 1,000-byte objects */
	mt_cfg_init(&cfg);
	cfg.replica_repair_bytes_per_sec = 2000;
	t = mt_new(&cfg);
	mount3(t);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "b%d", i);
		put_on(t, key, 1000, 2, i % 2 ? "b:1" : "c:1");
	}
	/* b:1 goes at once (an unmount); half the objects lose a copy */
	{
		struct mc_store_unmount_req u = {CB, SB};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	while (mc_master_sweep_pending(t->m))
		mc_master_tick(t->m, t->now);
	assert_true(mt_metrics(t).repair_under_replicated >= 20);
	n = fetch(t, CA, 64, ids, 64) + fetch(t, CC, 64, ids, 64);
	assert_true(n >= 1 && n <= 2); /* a second's worth */
	t->now += 1000;
	mc_master_tick(t->m, t->now);
	assert_true(fetch(t, CA, 64, ids, 64) + fetch(t, CC, 64, ids, 64) <= 2);
	mt_free(t);

	/* switched off: nothing is queued */
	mt_cfg_init(&cfg);
	cfg.enable_replica_repair = false;
	t = mt_new(&cfg);
	mount3(t);
	put_on(t, "x", 1000, 2, "b:1");
	{
		struct mc_store_unmount_req u = {CB, SB};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	while (mc_master_sweep_pending(t->m))
		mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).repair_under_replicated, 0);
	assert_int_equal(run_clients(t, live, 2, 3, NULL), 0);
	mt_free(t);
}

static void test_repair_parks_until_a_mount(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_uuid ids[4];
	char w[64];
	uint32_t n = 0;

	(void)state;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	put_on(t, "p", 1000, 2, NULL);
	{
		struct mc_store_unmount_req u = {CB, SB};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	while (mc_master_sweep_pending(t->m))
		mc_master_tick(t->m, t->now);
	/* no segment to copy to: retried a second apart, then parked */
	for (int i = 0; i < 40; i++) {
		t->now += 1000;
		mc_master_tick(t->m, t->now);
		assert_int_equal(fetch(t, CA, 4, ids, 4), 0);
	}
	assert_int_equal(mt_metrics(t).repair_given_up, 1);
	assert_int_equal(mt_metrics(t).repair_under_replicated, 1); /* still short */
	/* a new segment: the parked repair runs */
	assert_int_equal(mt_mount(t, CC, SC, "c:1", 0x2000000, MIB), MC_OK);
	for (int i = 0; i < 5 && n == 0; i++) {
		mc_master_tick(t->m, t->now);
		n = fetch(t, CA, 4, ids, 4);
	}
	assert_int_equal(n, 1);
	assert_int_equal(done(t, CA, ids[0], MC_OK), MC_OK);
	assert_string_equal(where(t, "p", w, sizeof(w)), "a:1,c:1");
	assert_int_equal(mt_metrics(t).repair_under_replicated, 0);
	mt_free(t);
}

static void test_dynamic_replication(void **state)
{
	struct mc_master_config cfg;
	struct mc_store_uuid ids[4];
	struct mt *t;
	char w[64], mode[16];
	uint32_t n;

	(void)state;
	/* enforce: 8 gets in a 10 s window (0.8 QPS) make a key hot */
	mt_cfg_init(&cfg);
	snprintf(mode, sizeof(mode), "enforce");
	cfg.dynamic_replication_mode = mode;
	t = mt_new(&cfg);
	mount3(t);
	put_on(t, "hot", 1000, 1, "a:1");
	put_on(t, "cold", 1000, 1, "a:1");
	for (int i = 0; i < 7; i++) {
		assert_int_equal(mt_get(t, "hot"), MC_OK);
		assert_int_equal(mt_get(t, "cold"), MC_OK);
	}
	assert_int_equal(fetch(t, CA, 4, ids, 4), 0);
	assert_int_equal(mt_get(t, "hot"), MC_OK); /* the 8th */
	n = fetch(t, CA, 4, ids, 4);
	assert_int_equal(n, 1);
	assert_int_equal(done(t, CA, ids[0], MC_OK), MC_OK);
	assert_int_equal(mt_metrics(t).dynrep_queued, 1);
	assert_non_null(strstr(where(t, "hot", w, sizeof(w)), ","));
	/* where() is a get too: cold's 8th, so it turns hot now */
	assert_null(strstr(where(t, "cold", w, sizeof(w)), ","));
	assert_int_equal(mt_metrics(t).dynrep_queued, 2);
	assert_int_equal(fetch(t, CA, 4, ids, 4), 1);
	assert_int_equal(done(t, CA, ids[0], MC_OK), MC_OK);
	assert_non_null(strstr(where(t, "cold", w, sizeof(w)), ","));
	/* at the cap (2): hot again next window, no third copy */
	t->now += 10000;
	for (int i = 0; i < 20; i++)
		assert_int_equal(mt_get(t, "hot"), MC_OK);
	assert_int_equal(
		fetch(t, CA, 4, ids, 4) + fetch(t, CB, 4, ids, 4) + fetch(t, CC, 4, ids, 4), 0);
	assert_int_equal(mt_metrics(t).dynrep_queued, 2);
	mt_free(t);

	/* observe: counted, nothing copied; off: nothing at all */
	snprintf(mode, sizeof(mode), "observe");
	cfg.dynamic_replication_mode = mode;
	t = mt_new(&cfg);
	mount3(t);
	put_on(t, "hot", 1000, 1, "a:1");
	for (int i = 0; i < 8; i++)
		assert_int_equal(mt_get(t, "hot"), MC_OK);
	assert_int_equal(fetch(t, CA, 4, ids, 4), 0);
	assert_int_equal(mt_metrics(t).dynrep_candidates, 1);
	assert_int_equal(mt_metrics(t).dynrep_queued, 0);
	mt_free(t);
	cfg.dynamic_replication_mode = NULL;
	t = mt_new(&cfg);
	mount3(t);
	put_on(t, "hot", 1000, 1, "a:1");
	for (int i = 0; i < 8; i++)
		assert_int_equal(mt_get(t, "hot"), MC_OK);
	assert_int_equal(mt_metrics(t).dynrep_candidates, 0);
	mt_free(t);
}

static bool seg_status(void *arg, const struct mc_master_segment_info *s)
{
	char *out = arg;

	snprintf(out + strlen(out), 128 - strlen(out), "%s=%s;", s->name,
		 mc_master_segment_status_name(s->status));
	return true;
}

/* A drained segment that goes before its objects moved (its client
 * unmounts it, or expires) fails the job, naming it: it used to report
 * SUCCEEDED ("drained and unmounted") with nothing moved. */
static void test_drain_of_a_segment_that_goes(void **state)
{
	struct mt *t = mt_new_default();
	const char *a[] = {"a:1"};
	struct mc_store_unmount_req u = {CA, SA};
	struct mc_store_uuid job;
	struct mc_master_drain_info info;
	char err[256];

	(void)state;
	mount3(t);
	put_on(t, "k", 1000, 1, "a:1");
	assert_int_equal(
		mc_master_drain_create(t->m, a, 1, NULL, 0, 2, t->now, &job, err, sizeof(err)),
		MC_OK);
	assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	for (int round = 0; round < 20; round++) {
		mc_master_tick(t->m, t->now);
		t->now += 200;
	}
	assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
	assert_int_equal(info.status, MC_JOB_FAILED);
	assert_int_equal(info.succeeded_units, 0);
	assert_non_null(strstr(info.message, "'a:1'"));
	mt_free(t);
}

static void test_drain(void **state)
{
	struct mt *t = mt_new_default();
	const char *a[] = {"a:1"}, *zz[] = {"zz:9"}, *b[] = {"b:1"};
	const struct mc_store_uuid all[] = {CA, CB, CC};
	struct mc_store_uuid job, none = {1, 2};
	struct mc_master_drain_info info;
	char err[256], w[64], st[128] = "", key[16];

	(void)state;
	mount3(t);
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "d%d", i);
		put_on(t, key, 1000, 1, "a:1");
	}
	assert_int_equal(
		mc_master_drain_create(t->m, zz, 1, NULL, 0, 2, t->now, &job, err, sizeof(err)),
		MC_ERR_SEGMENT_NOT_FOUND);
	assert_int_equal(
		mc_master_drain_create(t->m, a, 1, a, 1, 2, t->now, &job, err, sizeof(err)),
		MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_master_drain_query(t->m, &none, &info), MC_ERR_JOB_NOT_FOUND);
	assert_int_equal(
		mc_master_drain_create(t->m, a, 1, NULL, 0, 2, t->now, &job, err, sizeof(err)),
		MC_OK);
	mc_master_foreach_segment(t->m, seg_status, st);
	assert_string_equal(st, "a:1=DRAINING;b:1=OK;c:1=OK;");
	/* a drained segment takes no new replicas */
	put_on(t, "new", 1000, 1, "a:1");
	assert_string_not_equal(where(t, "new", w, sizeof(w)), "a:1");
	/* moves run, max_concurrency at once; reads keep working throughout */
	for (int round = 0; round < 50; round++) {
		uint32_t active = 0;

		mc_master_tick(t->m, t->now);
		assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
		assert_true(info.active_units <= 2);
		if (info.status != MC_JOB_RUNNING && info.status != MC_JOB_CREATED)
			break;
		for (int c = 0; c < 3; c++) {
			struct mc_store_uuid ids[8];
			uint32_t n = fetch(t, all[c], 8, ids, 8);

			active += n;
			for (uint32_t i = 0; i < n; i++)
				assert_int_equal(done(t, all[c], ids[i], MC_OK), MC_OK);
		}
		assert_true(active <= 2);
		assert_int_equal(mt_get(t, "d3"), MC_OK);
		t->now += 100;
	}
	assert_int_equal(info.status, MC_JOB_SUCCEEDED);
	assert_int_equal(info.succeeded_units, 10);
	assert_int_equal(info.migrated_bytes, 10000);
	st[0] = '\0';
	mc_master_foreach_segment(t->m, seg_status, st);
	assert_string_equal(st, "b:1=OK;c:1=OK;"); /* unmounted */
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "d%d", i);
		assert_int_equal(mt_get(t, key), MC_OK);
		assert_null(strstr(where(t, key, w, sizeof(w)), "a:1"));
	}
	mt_free(t);

	/* targets too small: units blocked, nothing dropped, the segment stays */
	t = mt_new_default();
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, 4096), MC_OK);
	put_on(t, "big", 8192, 1, "a:1");
	assert_int_equal(
		mc_master_drain_create(t->m, a, 1, b, 1, 4, t->now, &job, err, sizeof(err)), MC_OK);
	for (int round = 0; round < 20; round++) {
		mc_master_tick(t->m, t->now);
		t->now += 1000; /* a lap a second */
	}
	assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
	assert_int_equal(info.status, MC_JOB_FAILED);
	assert_int_equal(info.blocked_units, 1);
	assert_non_null(strstr(info.message, "blocked"));
	st[0] = '\0';
	mc_master_foreach_segment(t->m, seg_status, st);
	assert_string_equal(st, "a:1=OK;b:1=OK;");
	assert_string_equal(where(t, "big", w, sizeof(w)), "a:1");

	/* a put in flight on the segment holds the drain until it ends */
	{
		struct mc_store_replicate_config cf = mt_cfg1();

		cf.preferred_segment = mc_proto_str_c("a:1");
		assert_int_equal(mt_put_start_cfg(t, CA, "", "late", 100, "", &cf, false), MC_OK);
	}
	assert_int_equal(mt_mount(t, CC, SC, "c:1", 0x2000000, MIB), MC_OK);
	assert_int_equal(
		mc_master_drain_create(t->m, a, 1, NULL, 0, 4, t->now, &job, err, sizeof(err)),
		MC_OK);
	for (int round = 0; round < 30; round++) {
		struct mc_store_uuid ids[8];
		uint32_t n;

		if (round == 3)
			assert_int_equal(mt_put_end(t, CA, "late"), MC_OK);
		mc_master_tick(t->m, t->now);
		n = fetch(t, CA, 8, ids, 8);
		for (uint32_t i = 0; i < n; i++)
			assert_int_equal(done(t, CA, ids[i], MC_OK), MC_OK);
		assert_int_equal(mc_master_drain_query(t->m, &job, &info), MC_OK);
		if (round < 3)
			assert_int_equal(info.status, MC_JOB_RUNNING);
		t->now += 500;
	}
	assert_int_equal(info.status, MC_JOB_SUCCEEDED);
	assert_true(!strcmp(where(t, "late", w, sizeof(w)), "b:1") || !strcmp(w, "c:1"));
	assert_string_equal(where(t, "big", w, sizeof(w)), "c:1"); /* b:1 is too small */

	/* cancel: the segment takes replicas again */
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(
		mc_master_drain_create(t->m, a, 1, NULL, 0, 1, t->now, &job, err, sizeof(err)),
		MC_OK);
	assert_int_equal(mc_master_drain_cancel(t->m, &job, t->now, &info), MC_OK);
	assert_int_equal(info.status, MC_JOB_CANCELED);
	st[0] = '\0';
	mc_master_foreach_segment(t->m, seg_status, st);
	assert_string_equal(st, "b:1=OK;c:1=OK;a:1=OK;");
	mt_free(t);
}

/*
 * A copy whose target block cannot be had for want of the master's own
 * memory (the allocator cannot grow its block records: NOMEM) starts no
 * eviction round, which frees segment space, not memory: the complete,
 * unleased objects stay.  b:1 holds 16 blocks, so the next block grows
 * the records; each allocation of one FetchTasks fails in turn.  A fetch
 * that answers OK with nothing handed out failed in the target's block.
 */
static void test_task_nomem_evicts_nothing(void **state)
{
	static const char *const b[] = {"b:1"};
	struct mt *t = mt_new_default();
	struct mc_store_uuid id = {0, 0};
	bool hit = false;

	(void)state;
	mount3(t);
	for (int i = 0; i < 16; i++) {
		char k[16];

		snprintf(k, sizeof(k), "f%d", i);
		put_on(t, k, 4096, 1, "b:1");
	}
	put_on(t, "k", 4096, 1, "a:1");
	assert_int_equal(copy_task(t, "k", b, 1, &id), MC_OK);
	for (long n = 1; n <= 64; n++) {
		struct mc_store_msg req;
		struct mc_buf out;
		mc_status st;

		memset(&req, 0, sizeof(req));
		req.hdr.type = MC_STORE_FETCH_TASKS;
		req.hdr.req_id = 1;
		req.body.fetch_tasks_req.client_id = CA;
		req.body.fetch_tasks_req.batch = 8;
		mc_buf_init(&out);
		mc_alloc_fault_arm(n);
		st = mc_master_handle(t->m, &req, t->now, &out);
		mc_alloc_fault_arm(0);
		mc_buf_release(&out);
		mc_master_tick(t->m, t->now);
		assert_int_equal(mt_metrics(t).attempted_evictions, 0);
		assert_int_equal(mt_metrics(t).key_count, 17);
		if (st == MC_OK && query(t, id) == MC_STORE_TASK_PROCESSING)
			break; /* past the last allocation */
		hit |= st == MC_OK;
	}
	assert_true(hit); /* the fault did land in the allocator */
	assert_int_equal(query(t, id), MC_STORE_TASK_PROCESSING);
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_task),
		cmocka_unit_test(test_move_task),
		cmocka_unit_test(test_sources_and_targets_that_vanish),
		cmocka_unit_test(test_repair_after_expiry),
		cmocka_unit_test(test_repair_bounds_and_switch),
		cmocka_unit_test(test_repair_parks_until_a_mount),
		cmocka_unit_test(test_dynamic_replication),
		cmocka_unit_test(test_drain),
		cmocka_unit_test(test_drain_of_a_segment_that_goes),
		cmocka_unit_test(test_task_nomem_evicts_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_master_table.c - the master's object table at size: a
 * resize in steps, RemoveAll in steps, many objects, allocation failures
 * inside the master, and a randomized stress that checks the accounting
 * after every step.  As test_master.c (and with its harness,
 * tests/support/master_t.h): every request goes through the real codec
 * both ways and time is an argument, so nothing sleeps.
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

#include "master/master.h"
#include "master_t.h"
#include "mooncake/status.h"
#include "store/proto.h"
#include "support.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2}, CC = {3, 3};
static const struct mc_store_uuid SA = {10, 1}, SB = {20, 2}, SC = {30, 3};

/* BatchExistKey and BatchGetReplicaList of key-<lo> .. key-<lo+n-1>, an
 * empty key and an absent one agree with live[] and with the one-key calls
 * (the batch path looks keys up several at a time, mc_master_obj_find_many). */
static void batch_check(struct mt *t, const bool *live, int lo, int n)
{
	char names[40][32];
	struct mc_proto_str ks[42];
	struct mc_store_keys_req kr = {mc_proto_str_c(""), (uint32_t)n + 2, ks, {false, 0}};

	assert_true(n <= 40);
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "key-%d", lo + i);
		ks[i] = mc_proto_str_c(names[i]);
	}
	ks[n] = mc_proto_str_c("");
	ks[n + 1] = mc_proto_str_c("absent");
	assert_int_equal(mt_call(t, MC_STORE_BATCH_EXIST_KEY, &kr), MC_OK);
	{
		const struct mc_store_batch_exist_resp *r = &t->resp.body.batch_exist_resp;

		assert_int_equal(r->n_items, n + 2);
		for (int i = 0; i < n; i++) {
			assert_int_equal(r->items[i].status, MC_OK);
			assert_int_equal(r->items[i].exists, live[lo + i]);
		}
		assert_int_equal(r->items[n].status, MC_ERR_INVALID_PARAMS);
		assert_int_equal(r->items[n + 1].status, MC_OK);
		assert_false(r->items[n + 1].exists);
	}
	assert_int_equal(mt_call(t, MC_STORE_BATCH_GET_REPLICA_LIST, &kr), MC_OK);
	{
		const struct mc_store_batch_replica_list *r = &t->resp.body.batch_replica_list;

		assert_int_equal(r->n_items, n + 2);
		for (int i = 0; i < n; i++) {
			assert_int_equal(r->items[i].status,
					 live[lo + i] ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
			if (live[lo + i])
				assert_int_equal(r->items[i].list.n_replicas, 1);
		}
		assert_int_equal(r->items[n].status, MC_ERR_INVALID_PARAMS);
		assert_int_equal(r->items[n + 1].status, MC_ERR_OBJECT_NOT_FOUND);
	}
	for (int i = 0; i < n; i += 7)
		assert_int_equal(mt_exist(t, names[i]), live[lo + i]);
}

static void test_table_resize_in_steps(void **state)
{
	/* lookups, removes and inserts while the table grows (and later
	 * shrinks) in steps, against a shadow of what must exist */
	struct mt *t = mt_new_default();
	enum { N = 6000 };
	static bool live[N];
	uint64_t n_live = 0;

	(void)state;
	memset(live, 0, sizeof(live));
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	for (int i = 0; i < N; i++) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		mt_put_ok(t, CA, k, 64);
		live[i] = true;
		n_live++;
		if (i % 5 == 0 && i >= 3) {
			snprintf(k, sizeof(k), "key-%d", i - 3);
			assert_int_equal(mt_rm(t, k, true),
					 live[i - 3] ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
			n_live -= live[i - 3];
			live[i - 3] = false;
		}
		snprintf(k, sizeof(k), "key-%d", i / 2);
		assert_int_equal(mt_exist(t, k), live[i / 2]);
		if (i % 97 == 0 && i >= 40) /* also while a resize is under way */
			batch_check(t, live, i - 40, 40);
	}
	assert_int_equal(mt_metrics(t).key_count, n_live);
	for (int i = 0; i < N; i++) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_exist(t, k), live[i]);
		if (i % 10 != 0 && live[i]) { /* leave a tenth: the table shrinks */
			assert_int_equal(mt_rm(t, k, true), MC_OK);
			live[i] = false;
			n_live--;
		}
		if (i % 100 == 0)
			mc_master_tick(t->m, t->now);
	}
	for (int i = 0; i + 40 <= N; i += 400)
		batch_check(t, live, i, 40);
	for (int r = 0; r < 8; r++) {
		mc_master_tick(t->m, t->now);
		for (int i = 0; i < N; i += 7) {
			char k[32];

			snprintf(k, sizeof(k), "key-%d", i);
			assert_int_equal(mt_exist(t, k), live[i]);
		}
	}
	assert_int_equal(mt_metrics(t).key_count, n_live);
	assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), (int64_t)n_live);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mt_free(t);
}

static void test_reseed_only_an_empty_table(void **state)
{
	/* a new seed for an empty table (before a snapshot loads); one that
	 * holds objects keeps its seed, or they could not be found again */
	struct mt *t = mt_new_default();
	char k[32];

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	mc_master_table_reseed(t->m, 12345);
	for (int i = 0; i < 300; i++) {
		snprintf(k, sizeof(k), "seeded-%d", i);
		mt_put_ok(t, CA, k, 64);
	}
	mc_master_table_reseed(t->m, 67890);
	for (int i = 0; i < 300; i++) {
		snprintf(k, sizeof(k), "seeded-%d", i);
		assert_int_equal(mt_exist(t, k), 1);
	}
	mt_free(t);
}

static void test_remove_all_in_steps(void **state)
{
	/* RemoveAll as the admin endpoint runs it: steps with other requests in
	 * between (puts of new keys, removes of old ones), while the table is
	 * big enough to take many steps */
	struct mt *t = mt_new_default();
	enum { N = 20000 };
	struct mc_master_job *j;
	int manual = 0, added = 0, steps = 0;
	int64_t n;
	bool done;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	for (int i = 0; i < N; i++) {
		char k[32];

		snprintf(k, sizeof(k), "old-%d", i);
		mt_put_ok(t, CA, k, 64);
	}
	j = mc_master_remove_all_begin(t->m, NULL, 0, true);
	assert_non_null(j);
	do {
		char k[32];

		done = mc_master_remove_all_step(t->m, j, t->now, 1);
		steps++;
		snprintf(k, sizeof(k), "new-%d", added++);
		mt_put_ok(t, CA, k, 64);
		snprintf(k, sizeof(k), "old-%d", N - 1 - manual);
		if (mt_rm(t, k, true) == MC_OK)
			manual++;
	} while (!done);
	n = mc_master_remove_all_end(t->m, j);
	assert_true(steps > 10); /* it did take steps */
	for (int i = 0; i < N; i++) {
		char k[32];

		snprintf(k, sizeof(k), "old-%d", i);
		assert_int_equal(mt_exist(t, k), 0); /* present throughout: removed */
	}
	{
		int gone = 0;

		for (int i = 0; i < added; i++) {
			char k[32];

			snprintf(k, sizeof(k), "new-%d", i);
			gone += !mt_exist(t, k);
		}
		/* every object is counted once: the old ones not removed by hand
		 * and the new ones that are gone */
		assert_int_equal(n, N - manual + gone);
		assert_int_equal(mt_metrics(t).key_count, (uint64_t)(added - gone));
	}
	/* the blocking form takes the rest */
	{
		int64_t left = (int64_t)mt_metrics(t).key_count;

		assert_true(left > 0);
		assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), left);
	}
	assert_int_equal(mt_metrics(t).key_count, 0);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mt_free(t);
}

/* Put key-<from> .. key-<to - 1> (64 bytes each), marking them live. */
static void put_range(struct mt *t, bool *live, int from, int to)
{
	for (int i = from; i < to; i++) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		mt_put_ok(t, CA, k, 64);
		live[i] = true;
	}
}

static void test_requests_during_resize(void **state)
{
	/* The table doubles at 769 and 1537 objects (3/4 of 1024 and 2048
	 * slots).  Each move has ended before the next doubling (the resizing
	 * flag drops in between), and requests of every kind during one, held
	 * open by sending no tick, see every object once, whichever table it
	 * is in: lookups one by one and batched, removes, RemoveAll in steps
	 * with puts and removes between the steps. */
	struct mt *t = mt_new_default();
	enum { N = 3000 };
	static bool live[N];
	int n = 0, starts = 0, manual = 0, added = 0, resizing_steps = 0, hi;
	bool was = false, done;
	struct mc_master_job *j;
	int64_t removed;

	(void)state;
	memset(live, 0, sizeof(live));
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	/* to 20 objects into the second move */
	while (starts < 2 || n < 1537 + 20) {
		bool now;

		put_range(t, live, n, n + 1);
		n++;
		now = mc_master_table_resizing(t->m);
		starts += now && !was;
		was = now;
		if (n == 769 || n == 1537)
			assert_true(now); /* this insert doubled the table */
	}
	assert_int_equal(starts, 2);
	assert_true(mc_master_table_resizing(t->m));
	for (int i = 0; i < n; i++) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_exist(t, k), 1);
		if (i % 3 == 0) { /* from both tables: most are still in the old one */
			assert_int_equal(mt_rm(t, k, true), MC_OK);
			live[i] = false;
			assert_int_equal(mt_exist(t, k), 0);
		}
	}
	for (int i = 0; i + 40 <= n; i += 200)
		batch_check(t, live, i, 40);
	assert_true(mc_master_table_resizing(t->m)); /* all of it mid-move */

	/* RemoveAll in steps while the move goes on under the puts between */
	hi = n;
	j = mc_master_remove_all_begin(t->m, NULL, 0, true);
	assert_non_null(j);
	do {
		char k[32];

		resizing_steps += mc_master_table_resizing(t->m);
		done = mc_master_remove_all_step(t->m, j, t->now, 1);
		snprintf(k, sizeof(k), "new-%d", added++);
		mt_put_ok(t, CA, k, 64);
		while (hi > 0 && !live[--hi])
			;
		snprintf(k, sizeof(k), "key-%d", hi);
		/* unless the walk took it first: then it counts in removed */
		if (live[hi] && mt_rm(t, k, true) == MC_OK) {
			live[hi] = false;
			manual++;
		}
	} while (!done);
	removed = mc_master_remove_all_end(t->m, j);
	assert_true(resizing_steps > 1);
	assert_true(manual > 1);
	{
		int old_left = 0, gone = 0;

		for (int i = 0; i < n; i++) {
			char k[32];

			snprintf(k, sizeof(k), "key-%d", i);
			assert_int_equal(mt_exist(t, k), 0); /* present at the start: removed */
			old_left += live[i];
		}
		for (int i = 0; i < added; i++) {
			char k[32];

			snprintf(k, sizeof(k), "new-%d", i);
			gone += !mt_exist(t, k);
		}
		/* each object counted once: the old ones not removed by hand, and
		 * the new ones that are gone */
		assert_int_equal(removed, old_left + gone);
		assert_int_equal(mt_metrics(t).key_count, (uint64_t)(added - gone));
	}
	{
		int64_t left = (int64_t)mt_metrics(t).key_count; /* before, not as an argument */

		assert_true(left > 0);
		assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), left);
	}
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mt_free(t);
}

static void test_resize_spreads_its_move(void **state)
{
	/* The move after a doubling is spread over the inserts that follow:
	 * each moves its due share (old slots left / inserts left before the
	 * next doubling) and one more, whole runs at a time, so a batch of
	 * puts right after a doubling pays a few slots per key, not nine (the
	 * turns of 10-15 ms of CPU at 16 M objects).  The table doubles at
	 * 12289 objects (3/4 of 16384 slots) and again at 24577: the move of
	 * the 16384 old slots takes more than a third of the inserts between
	 * (with 9 slots each it ended within a tenth) and ends before the
	 * next doubling.  No tick runs here, so only the inserts move slots. */
	struct mt *t = mt_new_default();
	enum { FIRST = 12289, NEXT = 24577 };
	static bool live[NEXT];
	int n = 0, ended = 0;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	put_range(t, live, 0, FIRST - 1);
	assert_false(mc_master_table_resizing(t->m));
	put_range(t, live, FIRST - 1, FIRST);
	assert_true(mc_master_table_resizing(t->m)); /* this insert doubled the table */
	for (n = FIRST; n < NEXT - 1 && !ended; n++) {
		put_range(t, live, n, n + 1);
		if (!mc_master_table_resizing(t->m))
			ended = n + 1;
	}
	print_message("# move of 16384 slots ended at %d objects, %d inserts after the doubling\n",
		      ended, ended - FIRST);
	assert_true(ended > 0);				 /* before the next doubling */
	assert_true(ended - FIRST > (NEXT - FIRST) / 3); /* spread out */
	for (int i = 0; i < ended; i += 97) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_exist(t, k), 1);
	}
	mt_free(t);
}

static void test_eviction_sees_the_old_table(void **state)
{
	/* A full pool while the table is being resized: the objects not moved
	 * yet are in the old table, and they are the oldest.  The table is
	 * small (one eviction window covers it), so the round is exact: the
	 * oldest leases go, wherever they sit. */
	struct mc_master_config cfg;
	struct mt *t;
	enum { OBJ = 4096, N = 800 };
	int n = 0;

	(void)state;
	mt_cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	t = mt_new(&cfg);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, (uint64_t)N * OBJ), MC_OK);
	for (;;) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", n);
		if (mt_put_start(t, CA, k, OBJ) != MC_OK)
			break;
		assert_int_equal(mt_put_end(t, CA, k), MC_OK);
		n++;
		t->now++; /* each lease a millisecond after the one before */
	}
	assert_int_equal(n, N);
	assert_true(mc_master_table_resizing(t->m)); /* doubled at 769 */
	t->now += 60000;			     /* every lease is over */
	mc_master_tick(t->m, t->now);
	/* ceil(0.05 * 800) = 40, the 40 oldest */
	assert_int_equal(mt_metrics(t).evicted_key_count, 40);
	for (int i = 0; i < N; i++) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_exist(t, k), i >= 40);
	}
	mt_free(t);
}

static void test_many_objects_table(void **state)
{
	/* grow and shrink the table; remove-all and regex over a big one */
	struct mt *t = mt_new_default();
	struct mc_buf out;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	for (int i = 0; i < 5000; i++) {
		char k[32];
		struct mc_store_put_start_req r = {.client_id = CA,
						   .key = mc_proto_str_c(k),
						   .value_len = 64,
						   .config = mt_cfg1()};
		struct mc_store_msg req;

		snprintf(k, sizeof(k), "key-%d", i);
		r.key = mc_proto_str_c(k);
		memset(&req, 0, sizeof(req));
		req.hdr.type = MC_STORE_PUT_START;
		req.body.put_start_req = r;
		mc_buf_init(&out);
		assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_OK);
		mc_buf_release(&out);
	}
	assert_int_equal(mt_metrics(t).key_count, 5000);
	for (int i = 0; i < 5000; i += 2) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_put_end(t, CA, k), MC_OK);
	}
	for (int i = 0; i < 5000; i += 3) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_exist(t, k), i % 2 == 0);
	}
	assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), 2500);
	for (int i = 1; i < 5000; i += 2) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(mt_revoke(t, CA, k), MC_OK);
	}
	assert_int_equal(mt_metrics(t).key_count, 0);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mc_master_tick(t->m, t->now);
	mt_put_ok(t, CA, "again", 10);
	assert_int_equal(mt_get(t, "again"), MC_OK);
	mt_free(t);
}

/* Hand a hand-built request to the master with no codec around it (the
 * codec allocates too, which would spoil fault injection). */
static mc_status raw(struct mc_master *m, uint16_t type, const void *body, size_t body_len,
		     uint64_t now, struct mc_buf *out)
{
	struct mc_store_msg req;

	memset(&req, 0, sizeof(req));
	req.hdr.type = type;
	memcpy(&req.body, body, body_len);
	mc_buf_reset(out);
	return mc_master_handle(m, &req, now, out);
}

#define RAW(m, type, body, now, out) raw(m, type, &(body), sizeof(body), now, out)

static void test_alloc_failures(void **state)
{
	/* fail the nth allocation inside a sequence of calls, for every n;
	 * afterwards the master must still account for every byte */
	(void)state;
	for (long n = 1; n <= 120; n++) {
		struct mc_master_config cfg;
		struct mc_master *m;
		struct mc_buf out;
		struct mc_master_metrics x;
		uint64_t now = 1000;
		struct mc_store_mount_req ma = {CA, mt_seg(SA, "a:1", 0x100000, MIB)};
		struct mc_store_mount_req mb = {CB, mt_seg(SB, "b:1", 0x900000, MIB)};
		struct mc_store_put_item items[3] = {
			{mc_proto_str_c("k2"), 100, mc_proto_str_c("g")},
			{mc_proto_str_c("k3"), 100, mc_proto_str_c("")},
			{mc_proto_str_c("k4"), 100, mc_proto_str_c("h")},
		};
		struct mc_store_batch_put_start_req bs = {
			.client_id = CA, .config = mt_cfg1(), .n_items = 3, .items = items};
		struct mc_store_put_start_req ps = {.client_id = CA,
						    .key = mc_proto_str_c("k1"),
						    .value_len = 10,
						    .group_id = mc_proto_str_c("g"),
						    .config = mt_cfg1()};
		struct mc_store_put_end_req pe = {.client_id = CA,
						  .replica_type = MC_STORE_REPLICA_ALL,
						  .key = mc_proto_str_c("k1"),
						  .checksum = {true, 5}};
		struct mc_store_object_meta metas[3] = {{mc_proto_str_c("k2"), {false, 0}},
							{mc_proto_str_c("k3"), {true, 1}},
							{mc_proto_str_c("k4"), {false, 0}}};
		struct mc_store_batch_put_end_req be = {.client_id = CA,
							.replica_type = MC_STORE_REPLICA_ALL,
							.n_items = 3,
							.items = metas};
		struct mc_proto_str keys[3] = {mc_proto_str_c("k1"), mc_proto_str_c("k2"),
					       mc_proto_str_c("k9")};
		struct mc_store_keys_req kr = {mc_proto_str_c(""), 3, keys, {false, 0}};
		struct mc_store_regex_req rq = {mc_proto_str_c(""), mc_proto_str_c("k")};
		struct mc_store_key_req gk = {mc_proto_str_c(""), mc_proto_str_c("k1")};

		mt_cfg_init(&cfg);
		cfg.enable_multi_tenants = true;
		assert_int_equal(mc_master_new(&cfg, &m), MC_OK);
		mc_buf_init(&out);
		assert_int_equal(mc_buf_reserve(&out, 1 << 16), MC_OK);
		mc_alloc_fault_arm(n);
		(void)RAW(m, MC_STORE_MOUNT_SEGMENT, ma, now, &out);
		(void)RAW(m, MC_STORE_MOUNT_SEGMENT, mb, now, &out);
		(void)RAW(m, MC_STORE_PUT_START, ps, now, &out);
		bs.config.replica_num = 2;
		(void)RAW(m, MC_STORE_BATCH_PUT_START, bs, now, &out);
		(void)RAW(m, MC_STORE_PUT_END, pe, now, &out);
		(void)RAW(m, MC_STORE_BATCH_PUT_END, be, now, &out);
		bs.config.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
		items[1].value_len = 300;
		bs.tenant = mc_proto_str_c("t2");
		(void)RAW(m, MC_STORE_BATCH_UPSERT_START, bs, now, &out);
		be.tenant = bs.tenant;
		(void)RAW(m, MC_STORE_BATCH_UPSERT_END, be, now, &out);
		(void)RAW(m, MC_STORE_BATCH_UPSERT_START, bs, now, &out);
		(void)RAW(m, MC_STORE_GET_REPLICA_LIST, gk, now, &out);
		(void)RAW(m, MC_STORE_BATCH_GET_REPLICA_LIST, kr, now, &out);
		(void)RAW(m, MC_STORE_GET_REPLICA_LIST_BY_REGEX, rq, now, &out);
		mc_master_tick(m, now);
		mc_alloc_fault_arm(0);

		/* everything in flight times out, everything parked is released */
		now += 10000000;
		mc_master_tick(m, now);
		mc_master_tick(m, now + 2000);
		mc_master_remove_all(m, NULL, true, now);
		mc_master_metrics(m, &x);
		assert_int_equal(x.key_count, 0);
		assert_int_equal(x.allocated_bytes, 0);
		assert_int_equal(x.discarded_staging_bytes, 0);
		assert_int_equal(x.soft_pin_key_count, 0);
		mc_buf_release(&out);
		mc_master_free(m);
	}
}

/* ---- randomized stress: no crash, consistent accounting ---- */

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

struct seg_sum {
	uint64_t used, cap;
};

static bool sum_segments(void *arg, const struct mc_master_segment_info *s)
{
	struct seg_sum *ss = arg;

	ss->used += s->used_bytes;
	ss->cap += s->capacity_bytes;
	assert_true(s->used_bytes <= s->capacity_bytes);
	return true;
}

static void check_accounting(struct mt *t)
{
	struct seg_sum ss = {0, 0};
	struct mc_master_metrics x = mt_metrics(t);

	mc_master_foreach_segment(t->m, sum_segments, &ss);
	assert_int_equal(ss.used, x.allocated_bytes);
	assert_int_equal(ss.cap, x.total_capacity_bytes);
	assert_true(x.discarded_staging_bytes <= x.allocated_bytes);
	assert_true(x.soft_pin_key_count <= x.key_count);
}

static void stress_one(uint64_t seed, bool tenants)
{
	static const char *keys[] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7",
				     "k8", "k9", "ka", "kb", "kc", "kd", "ke", "kf"};
	static const char *tn[] = {"", "t1", "t2"};
	static const char *gr[] = {"", "", "g1", "g2"};
	static const char *names[] = {"a:1", "b:1", "c:1", "a:1"};
	const struct mc_store_uuid clients[3] = {CA, CB, CC};
	const struct mc_store_uuid segids[4] = {SA, SB, SC, {99, 9}};
	struct mc_master_config cfg;
	struct mt *t;
	uint64_t x = seed;

	mt_cfg_init(&cfg);
	cfg.client_ttl_ms = 10000;
	cfg.put_start_discard_timeout_ms = 3000;
	cfg.put_start_release_timeout_ms = 20000;
	cfg.enable_multi_tenants = tenants;
	cfg.rng_seed = seed;
	t = mt_new(&cfg);
	for (int step = 0; step < 4000; step++) {
		uint32_t ci = rnd(&x) % 3, si = rnd(&x) % 4;
		struct mc_store_uuid cl = clients[ci];
		const char *k = keys[rnd(&x) % 16], *tenant = tn[rnd(&x) % 3];
		struct mc_store_replicate_config c = mt_cfg1();
		uint32_t op = rnd(&x) % 24;

		c.replica_num = 1 + rnd(&x) % 3;
		c.with_hard_pin = rnd(&x) % 8 == 0;
		c.soft_pin_action = rnd(&x) % 3;
		if (c.soft_pin_action == MC_STORE_SOFT_PIN_ENABLE && rnd(&x) % 2) {
			c.soft_pin_ttl_ms.present = true;
			c.soft_pin_ttl_ms.value = rnd(&x) % 30000;
		}
		if (rnd(&x) % 4 == 0)
			c.preferred_segment = mc_proto_str_c(names[rnd(&x) % 4]);
		switch (op) {
		case 0: /* mount: segment si owned by client si % 3 */
			(void)mt_mount(t, clients[si % 3], segids[si], names[si],
				       0x1000000 * (si + 1), 64 * KIB + rnd(&x) % (64 * KIB));
			break;
		case 1: {
			struct mc_store_segment sg =
				mt_seg(segids[ci], names[ci], 0x1000000 * (ci + 1), 64 * KIB);
			struct mc_store_remount_req r = {cl, 1, &sg};

			(void)mt_call(t, MC_STORE_REMOUNT_SEGMENT, &r);
			break;
		}
		case 2: {
			struct mc_store_unmount_req r = {cl, segids[si]};

			if (rnd(&x) % 4 == 0)
				(void)mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &r);
			break;
		}
		case 3: {
			struct mc_store_graceful_unmount_req r = {clients[si % 3], segids[si],
								  rnd(&x) % 5000};

			if (rnd(&x) % 4 == 0)
				(void)mt_call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &r);
			break;
		}
		case 4:
		case 5:
			(void)mt_ping(t, cl);
			break;
		case 6:
			(void)mt_exist(t, k);
			break;
		case 7:
			(void)mt_get_t(t, tenant, k);
			break;
		case 8:
		case 9:
		case 10:
			(void)mt_put_start_cfg(t, cl, tenant, k, 1 + rnd(&x) % 20000,
					       gr[rnd(&x) % 4], &c, op == 10);
			break;
		case 11:
		case 12:
			(void)mt_put_end_t(t, cl, tenant, k, op == 12);
			break;
		case 13: {
			struct mc_store_put_revoke_req r = {.client_id = cl,
							    .tenant = mc_proto_str_c(tenant),
							    .replica_type = MC_STORE_REPLICA_ALL,
							    .key = mc_proto_str_c(k)};

			(void)mt_call(t, rnd(&x) % 2 ? MC_STORE_PUT_REVOKE : MC_STORE_UPSERT_REVOKE,
				      &r);
			break;
		}
		case 14: {
			struct mc_store_remove_req r = {mc_proto_str_c(tenant), mc_proto_str_c(k),
							rnd(&x) % 2};

			(void)mt_call(t, MC_STORE_REMOVE, &r);
			break;
		}
		case 15: {
			struct mc_store_put_item it[3];
			struct mc_store_batch_put_start_req r = {.client_id = cl,
								 .tenant = mc_proto_str_c(tenant),
								 .config = c,
								 .n_items = 3,
								 .items = it};

			for (int i = 0; i < 3; i++) {
				it[i].key = mc_proto_str_c(keys[rnd(&x) % 16]);
				it[i].value_len = rnd(&x) % 9000;
				it[i].group_id = mc_proto_str_c(gr[rnd(&x) % 4]);
			}
			(void)mt_call(t,
				      rnd(&x) % 2 ? MC_STORE_BATCH_PUT_START
						  : MC_STORE_BATCH_UPSERT_START,
				      &r);
			break;
		}
		case 16: {
			struct mc_store_object_meta it[3];
			struct mc_store_batch_put_end_req r = {.client_id = cl,
							       .tenant = mc_proto_str_c(tenant),
							       .replica_type = MC_STORE_REPLICA_ALL,
							       .n_items = 3,
							       .items = it};

			for (int i = 0; i < 3; i++) {
				it[i].key = mc_proto_str_c(keys[rnd(&x) % 16]);
				it[i].checksum.present = rnd(&x) % 2;
				it[i].checksum.value = 9;
			}
			(void)mt_call(
				t, rnd(&x) % 2 ? MC_STORE_BATCH_PUT_END : MC_STORE_BATCH_UPSERT_END,
				&r);
			break;
		}
		case 17: {
			struct mc_proto_str ks[4];
			struct mc_store_keys_req r = {mc_proto_str_c(tenant), 4, ks, {false, 0}};
			struct mc_store_batch_put_revoke_req rv = {.client_id = cl,
								   .tenant = mc_proto_str_c(tenant),
								   .replica_type =
									   MC_STORE_REPLICA_MEMORY,
								   .n_keys = 4,
								   .keys = ks};
			struct mc_store_batch_remove_req rm_ = {mc_proto_str_c(tenant), rnd(&x) % 2,
								4, ks};
			uint16_t types[4] = {MC_STORE_BATCH_EXIST_KEY,
					     MC_STORE_BATCH_GET_REPLICA_LIST,
					     MC_STORE_BATCH_PUT_REVOKE, MC_STORE_BATCH_REMOVE};
			uint32_t w = rnd(&x) % 4;

			for (int i = 0; i < 4; i++)
				ks[i] = mc_proto_str_c(keys[rnd(&x) % 16]);
			(void)mt_call(t, types[w],
				      w < 2    ? (const void *)&r
				      : w == 2 ? (const void *)&rv
					       : (const void *)&rm_);
			break;
		}
		case 18: {
			struct mc_store_regex_req r = {mc_proto_str_c(tenant),
						       mc_proto_str_c("k[0-7]")};
			struct mc_store_remove_regex_req rr = {
				mc_proto_str_c(tenant), mc_proto_str_c("k[8-9a]"), rnd(&x) % 2};

			(void)mt_call(t, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &r);
			if (rnd(&x) % 4 == 0)
				(void)mt_call(t, MC_STORE_REMOVE_BY_REGEX, &rr);
			break;
		}
		case 19:
			if (rnd(&x) % 8 == 0)
				(void)mc_master_remove_all(t->m, tenant, rnd(&x) % 2, t->now);
			break;
		case 20:
		case 21:
			t->now += rnd(&x) % 3000;
			/* fall through */
		default:
			mc_master_tick(t->m, t->now);
			break;
		}
		check_accounting(t);
	}
	/* drain: keep the live clients alive, let every timer fire */
	t->now += 100000;
	for (int i = 0; i < 3; i++)
		(void)mt_ping(t, clients[i]);
	mc_master_tick(t->m, t->now);
	mc_master_tick(t->m, t->now + 1000);
	(void)mc_master_remove_all(t->m, NULL, true, t->now);
	check_accounting(t);
	assert_int_equal(mt_metrics(t).key_count, 0);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	assert_int_equal(mt_metrics(t).discarded_staging_bytes, 0);
	mt_free(t);
}

static void test_random_stress(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 12; seed++)
		stress_one(seed * 0x9E3779B97F4A7C15ull, seed % 2);
}

/* A new HA leader counts every object as leased for one TTL from its
 * take-over (mc_master_lease_all, server_ha.c): the old leader's leases are
 * in no log, and a reader's read or location cache entry may rest on one.
 * Plain removes wait it out, forced ones do not. */
/* mc_master_mem_usage (issue 12's breakdown of bytes per object) counts
 * every object once, in either table while a resize is under way, with its
 * key's bytes, and the table and the allocator beside them. */
static void test_mem_usage_counts_every_object(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_master_mem_usage u;
	uint64_t keys = 0, hdr;
	bool seen_resizing = false;
	enum { N = 3000 };

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	mc_master_mem_usage(t->m, &u);
	assert_int_equal(u.objects, 0);
	assert_true(u.alloc_meta > 0);
	for (int i = 0; i < N; i++) {
		char k[32];

		keys += (uint64_t)snprintf(k, sizeof(k), "key-%d", i);
		mt_put_ok(t, CA, k, 64);
		if (!mc_master_table_resizing(t->m) && i != N - 1)
			continue;
		seen_resizing |= mc_master_table_resizing(t->m);
		mc_master_mem_usage(t->m, &u);
		assert_int_equal(u.objects, (uint64_t)i + 1);
		assert_int_equal(u.key_bytes, keys);
	}
	assert_true(seen_resizing);
	hdr = u.header_bytes / u.objects;
	assert_int_equal(u.header_bytes, hdr * N);
	assert_true(hdr >= 40);
	assert_true(u.record_heap >= u.header_bytes + u.key_bytes);
	assert_true(u.table_bytes >= (uint64_t)N * sizeof(uint64_t));
	assert_int_equal(u.ext_heap, 0); /* one replica, no checksum */
	assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), N);
	mc_master_mem_usage(t->m, &u);
	assert_int_equal(u.objects, 0);
	assert_int_equal(u.key_bytes, 0);
	assert_int_equal(u.record_heap, 0);
	mt_free(t);
}

static void test_take_over_leases_every_object(void **state)
{
	struct mt *t = mt_new_default();

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	mt_put_ok(t, CA, "never-read", 10);
	mt_put_ok(t, CA, "forced", 10);
	mc_master_lease_all(t->m, t->now);
	assert_int_equal(mt_rm(t, "never-read", false), MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(mc_master_remove_all(t->m, NULL, false, t->now), 0);
	assert_int_equal(mt_rm(t, "forced", true), MC_OK);
	t->now += 9999;
	assert_int_equal(mt_rm(t, "never-read", false), MC_ERR_OBJECT_HAS_LEASE);
	t->now += 1;
	assert_int_equal(mt_rm(t, "never-read", false), MC_OK);
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_many_objects_table),
		cmocka_unit_test(test_reseed_only_an_empty_table),
		cmocka_unit_test(test_remove_all_in_steps),
		cmocka_unit_test(test_table_resize_in_steps),
		cmocka_unit_test(test_requests_during_resize),
		cmocka_unit_test(test_resize_spreads_its_move),
		cmocka_unit_test(test_eviction_sees_the_old_table),
		cmocka_unit_test(test_alloc_failures),
		cmocka_unit_test(test_random_stress),
		cmocka_unit_test(test_take_over_leases_every_object),
		cmocka_unit_test(test_mem_usage_counts_every_object),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

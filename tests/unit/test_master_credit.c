/*
 * tests/unit/test_master_credit.c - put credits (master/credit.c,
 * PutCredit, protocol minor 12): grants, objects completed in them, what
 * is refused (a block outside the client's credit, bad sizes), credits
 * reclaimed (given back, timed out, their client expired), and the log:
 * an object completed through a credit comes back after a crash, an
 * unused credit does not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../support/master_t.h"
#include "../support/support.h"
#include "../support/wal_t.h"
#include "master/master.h"

#define MIB  (1ull << 20)
#define BASE 0x100000000ull

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2};
static const struct mc_store_uuid SA = {10, 1};

/* One PutCredit of client: n items, the release ids, the want sizes. */
static mc_status credit_call(struct mt *t, struct mc_store_uuid client,
			     struct mc_store_credit_item *items, uint32_t n, uint64_t *release,
			     uint32_t nrel, uint64_t *want, uint32_t nwant)
{
	struct mc_store_put_credit_req r = {
		.client_id = client,
		.n_items = n,
		.items = items,
		.n_release = nrel,
		.release = release,
		.n_want = nwant,
		.want = want,
	};
	return mt_call(t, MC_STORE_PUT_CREDIT, &r);
}

/* Ask for one credit of size bytes; its descriptor in *out. */
static void grant1(struct mt *t, struct mc_store_uuid client, uint64_t size,
		   struct mc_store_replica *out)
{
	uint64_t want = size;

	assert_int_equal(credit_call(t, client, NULL, 0, NULL, 0, &want, 1), MC_OK);
	if (t->resp.body.put_credit_resp.n_credits != 1)
		fprintf(stderr, "no credit at %llu: %llu allocated\n", (unsigned long long)t->now,
			(unsigned long long)mt_metrics(t).allocated_bytes);
	assert_int_equal(t->resp.body.put_credit_resp.n_credits, 1);
	*out = t->resp.body.put_credit_resp.credits[0];
	out->segment_name.ptr = NULL; /* the answer's strings go with it */
	out->transport_endpoint.ptr = NULL;
	out->protocol.ptr = NULL;
}

/* Complete key in credit r (value len bytes, checksum sum); the item's status. */
static mc_status complete(struct mt *t, struct mc_store_uuid client, const char *key,
			  const struct mc_store_replica *r, uint64_t len, uint64_t addr,
			  uint64_t sum)
{
	struct mc_store_credit_item it = {
		.key = mc_proto_str_c(key),
		.value_len = len,
		.credit = r->id,
		.address = addr,
		.checksum = {true, sum},
	};
	mc_status st = credit_call(t, client, &it, 1, NULL, 0, NULL, 0);

	assert_int_equal(st, MC_OK);
	assert_int_equal(t->resp.body.put_credit_resp.n_items, 1);
	assert_int_equal(t->resp.body.put_credit_resp.n_credits, 0);
	return t->resp.body.put_credit_resp.statuses[0];
}

/*
 * A want that does not fit is not a put that needs room: the completion of
 * an object that fills most of the segment asks for another block of its
 * size, none is granted, and the next tick evicts nothing (it used to
 * evict the object just completed, unleased, as a failed PutStart's room).
 */
static void test_want_that_does_not_fit_evicts_nothing(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replica a;
	struct mc_store_credit_item it = {
		.key = mc_proto_str_c("big"),
		.value_len = 600000,
		.checksum = {true, 7},
	};
	uint64_t want = 600000;
	uint64_t fails0;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, MIB), MC_OK);
	grant1(t, CA, 600000, &a);
	it.credit = a.id;
	it.address = a.address;
	fails0 = mt_metrics(t).put_start_alloc_failures;
	assert_int_equal(credit_call(t, CA, &it, 1, NULL, 0, &want, 1), MC_OK);
	assert_int_equal(t->resp.body.put_credit_resp.statuses[0], MC_OK);
	assert_int_equal(t->resp.body.put_credit_resp.n_credits, 0);
	t->now += 100;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_get(t, "big"), MC_OK);
	assert_int_equal(mt_metrics(t).key_count, 1);
	/* not a put's failure either */
	assert_int_equal(mt_metrics(t).put_start_alloc_failures, fails0);
	mt_free(t);
}

/*
 * Blocks asked ahead stop at the eviction watermark (0.90 by default): a
 * client that completes an object and asks for more blocks than the pool
 * holds below it gets only those below, and the next tick evicts nothing
 * (before, its credits took the pool over the watermark and the tick
 * evicted the object just completed).
 */
static void test_credits_stop_at_the_eviction_watermark(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replica a;
	struct mc_store_credit_item it = {
		.key = mc_proto_str_c("live"),
		.value_len = 100000,
		.checksum = {true, 7},
	};
	uint64_t want[16];

	(void)state;
	for (int i = 0; i < 16; i++)
		want[i] = 100000;
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, MIB), MC_OK);
	grant1(t, CA, 100000, &a);
	it.credit = a.id;
	it.address = a.address;
	assert_int_equal(credit_call(t, CA, &it, 1, NULL, 0, want, 16), MC_OK);
	assert_int_equal(t->resp.body.put_credit_resp.statuses[0], MC_OK);
	/* 1 MiB * 0.90 = 943,718 bytes: the object and 8 blocks of 100,000 */
	assert_int_equal(t->resp.body.put_credit_resp.n_credits, 8);
	assert_int_equal(mt_metrics(t).allocated_bytes, 900000);
	t->now += 100;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_get(t, "live"), MC_OK);
	assert_int_equal(mt_metrics(t).key_count, 1);
	mt_free(t);
}

static void test_grant_and_complete(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replica a, b;
	struct mc_master_req_counter ps0, pe0;
	uint64_t want[2] = {1000, 1000};

	(void)state;
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, MIB), MC_OK);
	ps0 = mt_metrics(t).master_put_start;
	assert_int_equal(credit_call(t, CA, NULL, 0, NULL, 0, want, 2), MC_OK);
	assert_int_equal(t->resp.body.put_credit_resp.n_items, 0);
	assert_int_equal(t->resp.body.put_credit_resp.n_credits, 2);
	/* an ask alone is no put */
	assert_int_equal(mt_metrics(t).master_put_start.requests, ps0.requests);
	a = t->resp.body.put_credit_resp.credits[0];
	b = t->resp.body.put_credit_resp.credits[1];
	assert_int_equal(a.type, MC_STORE_REPLICA_MEMORY);
	assert_int_equal(a.status, MC_STORE_REPLICA_PROCESSING);
	assert_int_equal(a.size, 1000);
	assert_memory_equal(a.segment_name.ptr, "a:1", 3);
	assert_memory_equal(a.transport_endpoint.ptr, "a:1", 3);
	assert_true(a.address >= BASE && a.address + 1000 <= BASE + MIB);
	assert_int_not_equal(a.id, b.id);
	assert_true(b.address + 1000 <= a.address || b.address >= a.address + 1000);
	/* reserved space is used space; nothing is visible yet */
	assert_int_equal(mt_metrics(t).allocated_bytes, 2000);
	assert_int_equal(mt_metrics(t).key_count, 0);

	ps0 = mt_metrics(t).master_put_start;
	pe0 = mt_metrics(t).master_put_end;
	assert_int_equal(complete(t, CA, "k1", &a, 1000, a.address, 0x1234), MC_OK);
	/* upstream's put series count it: one PutStart and one PutEnd */
	assert_int_equal(mt_metrics(t).master_put_start.requests, ps0.requests + 1);
	assert_int_equal(mt_metrics(t).master_put_end.requests, pe0.requests + 1);
	assert_int_equal(mt_metrics(t).master_put_end.failures, pe0.failures);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].status, MC_STORE_REPLICA_COMPLETE);
	assert_int_equal(t->resp.body.replica_list.replicas[0].address, a.address);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 1000);
	assert_true(t->resp.body.replica_list.checksum.present);
	assert_int_equal(t->resp.body.replica_list.checksum.value, 0x1234);
	/* a credit completes one object only (a failed PutEnd in the series) */
	assert_int_equal(complete(t, CA, "k1b", &a, 1000, a.address, 1), MC_ERR_INVALID_WRITE);
	assert_int_equal(mt_metrics(t).master_put_end.failures, pe0.failures + 1);
	/* the second, and a new one in the same frame */
	{
		struct mc_store_credit_item it = {.key = mc_proto_str_c("k2"),
						  .value_len = 1000,
						  .credit = b.id,
						  .address = b.address};
		uint64_t w = 1000;

		assert_int_equal(credit_call(t, CA, &it, 1, NULL, 0, &w, 1), MC_OK);
		assert_int_equal(t->resp.body.put_credit_resp.statuses[0], MC_OK);
		assert_int_equal(t->resp.body.put_credit_resp.n_credits, 1);
	}
	assert_int_equal(mt_exist(t, "k2"), 1);
	assert_int_equal(mt_metrics(t).key_count, 2);
	assert_int_equal(mt_metrics(t).allocated_bytes, 3000);
	/* the object is a plain one: removed, its block is free again once
	 * the remover spoiled it (a leased object's, master/spoil.c) */
	assert_int_equal(mt_rm(t, "k1", true), MC_OK);
	{
		struct mc_store_spoil_done_req d = {0, NULL};
		uint64_t id = 0;

		if (t->resp.body.remove_resp.n_spoil) {
			id = t->resp.body.remove_resp.spoil[0].id;
			d = (struct mc_store_spoil_done_req){1, &id};
		}
		assert_int_equal(mt_call(t, MC_STORE_SPOIL_DONE, &d), MC_OK);
	}
	assert_int_equal(mt_metrics(t).allocated_bytes, 2000);
	mt_free(t);
}

static void test_refused(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replica a;
	uint64_t bad;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, MIB), MC_OK);
	grant1(t, CA, 4096, &a);
	/* no such credit */
	struct mc_store_replica none = a;
	none.id = a.id + 100;
	assert_int_equal(complete(t, CA, "x", &none, 4096, a.address, 1), MC_ERR_INVALID_WRITE);
	/* another client's credit */
	assert_int_equal(complete(t, CB, "x", &a, 4096, a.address, 1), MC_ERR_INVALID_WRITE);
	/* a block outside the credit: another address, a larger or smaller size */
	assert_int_equal(complete(t, CA, "x", &a, 4096, a.address + 4096, 1), MC_ERR_INVALID_WRITE);
	assert_int_equal(complete(t, CA, "x", &a, 8192, a.address, 1), MC_ERR_INVALID_WRITE);
	assert_int_equal(complete(t, CA, "x", &a, 100, a.address, 1), MC_ERR_INVALID_WRITE);
	assert_int_equal(mt_exist(t, "x"), 0);
	/* none of that used it up */
	assert_int_equal(complete(t, CA, "x", &a, 4096, a.address, 1), MC_OK);
	assert_int_equal(mt_exist(t, "x"), 1);

	/* bad asks refuse the whole frame */
	bad = 0;
	assert_int_equal(credit_call(t, CA, NULL, 0, NULL, 0, &bad, 1), MC_ERR_INVALID_PARAMS);
	bad = 65 * MIB;
	assert_int_equal(credit_call(t, CA, NULL, 0, NULL, 0, &bad, 1), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "credit"));
	/* a size that does not fit is granted nothing, and is no error */
	bad = 2 * MIB;
	assert_int_equal(credit_call(t, CA, NULL, 0, NULL, 0, &bad, 1), MC_OK);
	assert_int_equal(t->resp.body.put_credit_resp.n_credits, 0);

	/* an existing key: insert-if-absent, the block goes back */
	grant1(t, CA, 4096, &a);
	assert_int_equal(mt_metrics(t).allocated_bytes, 8192);
	assert_int_equal(complete(t, CA, "x", &a, 4096, a.address, 1),
			 MC_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(mt_metrics(t).allocated_bytes, 4096);
	/* a bad key or trailer: refused, the block goes back */
	grant1(t, CA, 4096, &a);
	assert_int_equal(complete(t, CA, "", &a, 4096, a.address, 1), MC_ERR_INVALID_PARAMS);
	grant1(t, CA, 4096 + 8, &a);
	{
		struct mc_store_credit_item it = {.key = mc_proto_str_c("tr"),
						  .value_len = 4096,
						  .trailer_len = 8,
						  .credit = a.id,
						  .address = a.address};

		assert_int_equal(credit_call(t, CA, &it, 1, NULL, 0, NULL, 0), MC_OK);
		assert_int_equal(t->resp.body.put_credit_resp.statuses[0], MC_ERR_INVALID_PARAMS);
	}
	assert_int_equal(mt_metrics(t).allocated_bytes, 4096);
	mt_free(t);
}

static void test_reclaimed(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replica a, b;
	struct mc_master_metrics x;
	uint64_t id;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, MIB), MC_OK);
	/* given back: free at once */
	grant1(t, CA, 1000, &a);
	id = a.id;
	assert_int_equal(mt_metrics(t).allocated_bytes, 1000);
	assert_int_equal(credit_call(t, CA, NULL, 0, &id, 1, NULL, 0), MC_OK);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	assert_int_equal(complete(t, CA, "late", &a, 1000, a.address, 1), MC_ERR_INVALID_WRITE);

	/* unused for 10 s: parked (a late write may be under way), then freed */
	grant1(t, CA, 1000, &a);
	t->now += 9999;
	mc_master_tick(t->m, t->now);
	assert_int_equal(complete(t, CA, "k", &a, 1000, a.address, 1), MC_OK);
	grant1(t, CA, 1000, &b);
	t->now += 10000;
	mc_master_tick(t->m, t->now);
	x = mt_metrics(t);
	assert_int_equal(x.discarded_staging_bytes, 1000);
	assert_int_equal(x.allocated_bytes, 2000);
	assert_int_equal(complete(t, CA, "k2", &b, 1000, b.address, 1), MC_ERR_INVALID_WRITE);
	mc_master_tick(t->m, t->now + 600000);
	assert_int_equal(mt_metrics(t).discarded_staging_bytes, 0);
	assert_int_equal(mt_metrics(t).allocated_bytes, 1000);
	mt_free(t);

	t = mt_new_liveness();
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, MIB), MC_OK);

	/* its client expires: parked too (the credit is on B's segment: CA
	 * mounts its own after the grant, and so is alive, and expires) */
	grant1(t, CA, 1000, &a);
	assert_int_equal(mt_mount(t, CA, (struct mc_store_uuid){11, 1}, "ca:1", BASE * 2, MIB),
			 MC_OK);
	assert_int_equal(mt_ping(t, CB), MC_STORE_CLIENT_OK);
	t->now += 6000;
	assert_int_equal(mt_ping(t, CB), MC_STORE_CLIENT_OK);
	t->now += 5000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(mt_metrics(t).discarded_staging_bytes, 1000);
	assert_int_equal(complete(t, CA, "k3", &a, 1000, a.address, 1), MC_ERR_INVALID_WRITE);
	mt_free(t);
}

static void test_none_granted_with_local_first(void **state)
{
	struct mc_master_config cfg;
	struct mt *t;
	uint64_t want = 100;

	(void)state;
	mt_cfg_init(&cfg);
	cfg.strategy = MC_ALLOC_LOCAL_FIRST;
	t = mt_new(&cfg);
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, MIB), MC_OK);
	assert_int_equal(credit_call(t, CA, NULL, 0, NULL, 0, &want, 1), MC_OK);
	assert_int_equal(t->resp.body.put_credit_resp.n_credits, 0);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mt_free(t);
}

static void test_log_replay(void **state)
{
	char dir[256];
	struct mc_master_config cfg;
	struct mc_wal *w;
	struct mt *t;
	struct mc_store_replica a, b;

	(void)state;
	assert_true(mc_test_tmpdir(NULL, "mcred", dir, sizeof(dir)));
	mt_cfg_init(&cfg);
	t = mt_wal_start(&cfg, dir, MT_WAL_LOG, &w, NULL, NULL);
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, 64 * MIB), MC_OK);
	mt_wal_commit(w);
	grant1(t, CA, 70000, &a);
	grant1(t, CA, 70000, &b); /* never used */
	assert_int_equal(complete(t, CA, "kc", &a, 70000, a.address, 0xabcdef), MC_OK);
	mt_wal_commit(w);
	mt_wal_crash(t, w);

	t = mt_wal_start(&cfg, dir, MT_WAL_LOG, &w, NULL, NULL);
	assert_int_equal(mt_mount(t, CB, SA, "a:1", BASE, 64 * MIB), MC_OK);
	mt_wal_commit(w);
	assert_int_equal(mt_get(t, "kc"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].address, a.address);
	assert_true(t->resp.body.replica_list.checksum.present);
	assert_int_equal(t->resp.body.replica_list.checksum.value, 0xabcdef);
	/* the unused credit was never logged: only the object's bytes are taken */
	assert_int_equal(mt_metrics(t).allocated_bytes, 70000);
	assert_int_equal(complete(t, CA, "kb", &b, 70000, b.address, 1), MC_ERR_INVALID_WRITE);
	mt_wal_crash(t, w);
	mc_test_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grant_and_complete),
		cmocka_unit_test(test_want_that_does_not_fit_evicts_nothing),
		cmocka_unit_test(test_credits_stop_at_the_eviction_watermark),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_reclaimed),
		cmocka_unit_test(test_none_granted_with_local_first),
		cmocka_unit_test(test_log_replay),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

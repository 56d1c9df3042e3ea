/*
 * tests/unit/test_master_spoil.c - spoil lists (master/spoil.c, protocol
 * minor 13; docs/design.md "Gets without the master"): what the master
 * parks and lists when a writer overrides a leased object, and when it lets
 * the blocks go (the remover's SpoilDone, or the lease's end), on the
 * in-process master of tests/support/master_t.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../support/master_t.h"
#include "master/master.h"
#include "store/proto.h"

static const struct mc_store_uuid CA = {1, 1};
static const struct mc_store_uuid SA = {10, 1};
#define BASE 0x100000000ull
#define LEN  4096u

/* A master with one segment and a complete, checksummed object k. */
static struct mt *setup_obj(const char *key)
{
	struct mt *t = mt_new_default();
	struct mc_store_put_end_req end = {
		.client_id = CA,
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
		.checksum = {true, 0x5eed},
	};

	assert_int_equal(mt_mount(t, CA, SA, "seg-a", BASE, 1 << 20), MC_OK);
	assert_int_equal(mt_put_start(t, CA, key, LEN), MC_OK);
	assert_int_equal(mt_call(t, MC_STORE_PUT_END, &end), MC_OK);
	return t;
}

static mc_status rm_force(struct mt *t, const char *key)
{
	struct mc_store_remove_req r = {mc_proto_str_c(""), mc_proto_str_c(key), true};

	return mt_call(t, MC_STORE_REMOVE, &r);
}

static mc_status spoil_done(struct mt *t, uint64_t id)
{
	struct mc_store_spoil_done_req r = {1, &id};

	return mt_call(t, MC_STORE_SPOIL_DONE, &r);
}

/* A force remove of a leased object lists its block (id not 0, the lease
 * left as spoil_ms) and keeps it allocated until SpoilDone names it. */
static void leased_force_remove_parks_until_spoil_done(void **state)
{
	struct mt *t = setup_obj("k");
	const struct mc_store_remove_resp *r;
	uint64_t id, alloc;
	(void)state;

	assert_int_equal(mt_get(t, "k"), MC_OK); /* the lease */
	t->now += 1000;
	alloc = mt_metrics(t).allocated_bytes;
	assert_int_equal(rm_force(t, "k"), MC_OK);
	r = &t->resp.body.remove_resp;
	assert_int_equal(r->n_spoil, 1);
	assert_int_equal(r->spoil[0].address, BASE);
	assert_int_equal(r->spoil[0].size, LEN);
	assert_int_equal(r->spoil[0].type, MC_STORE_REPLICA_MEMORY);
	assert_true(r->spoil_ms.present);
	assert_int_equal(r->spoil_ms.value, 9000);
	id = r->spoil[0].id;
	assert_int_not_equal(id, 0);
	assert_int_equal(mt_exist(t, "k"), 0);
	assert_int_equal(mt_metrics(t).allocated_bytes, alloc); /* parked */
	assert_int_equal(spoil_done(t, id + 1000), MC_OK);	/* unknown: ignored */
	assert_int_equal(mt_metrics(t).allocated_bytes, alloc);
	assert_int_equal(spoil_done(t, id), MC_OK);
	assert_true(mt_metrics(t).allocated_bytes < alloc);
	assert_int_equal(spoil_done(t, id), MC_OK); /* twice: nothing */
	mt_free(t);
}

/* A remover that never says: the block comes back at the lease's end. */
static void lease_end_releases_without_spoil_done(void **state)
{
	struct mt *t = setup_obj("k");
	uint64_t alloc;
	(void)state;

	assert_int_equal(mt_get(t, "k"), MC_OK);
	alloc = mt_metrics(t).allocated_bytes;
	assert_int_equal(rm_force(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.remove_resp.n_spoil, 1);
	t->now += 9999;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).allocated_bytes, alloc);
	t->now += 1;
	mc_master_tick(t->m, t->now);
	assert_true(mt_metrics(t).allocated_bytes < alloc);
	mt_free(t);
}

/* Nothing is listed, and the block goes at once, for an unleased object
 * or a remover of minor 12; an object without a checksum (never cached)
 * neither.  BatchRemove lists every leased key's. */
static void unleased_old_or_unchecked_lists_nothing(void **state)
{
	struct mt *t = setup_obj("k");
	const char *keys[2] = {"k2", "k3"};
	struct mc_proto_str kv[2] = {mc_proto_str_c(keys[0]), mc_proto_str_c(keys[1])};
	struct mc_store_batch_remove_req br = {mc_proto_str_c(""), true, 2, kv};
	uint64_t alloc = mt_metrics(t).allocated_bytes;
	(void)state;

	assert_int_equal(rm_force(t, "k"), MC_OK); /* never read: no lease */
	assert_int_equal(t->resp.body.remove_resp.n_spoil, 0);
	assert_false(t->resp.body.remove_resp.spoil_ms.present);
	assert_true(mt_metrics(t).allocated_bytes < alloc);
	mt_free(t);

	t = setup_obj("k");
	alloc = mt_metrics(t).allocated_bytes;
	assert_int_equal(mt_get(t, "k"), MC_OK);
	t->minor = 12; /* an older remover */
	assert_int_equal(rm_force(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.remove_resp.n_spoil, 0);
	assert_true(mt_metrics(t).allocated_bytes < alloc);
	t->minor = 0;

	mt_put_ok(t, CA, "k1", LEN); /* no checksum: never cached */
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(rm_force(t, "k1"), MC_OK);
	assert_int_equal(t->resp.body.remove_resp.n_spoil, 0);

	for (int i = 0; i < 2; i++) {
		struct mc_store_put_end_req end = {.client_id = CA,
						   .replica_type = MC_STORE_REPLICA_ALL,
						   .key = kv[i],
						   .checksum = {true, 7}};

		assert_int_equal(mt_put_start(t, CA, keys[i], LEN), MC_OK);
		assert_int_equal(mt_call(t, MC_STORE_PUT_END, &end), MC_OK);
		assert_int_equal(mt_get(t, keys[i]), MC_OK);
	}
	assert_int_equal(mt_call(t, MC_STORE_BATCH_REMOVE, &br), MC_OK);
	assert_int_equal(t->resp.body.batch_remove_resp.n_items, 2);
	assert_int_equal(t->resp.body.batch_remove_resp.n_spoil, 2);
	assert_int_not_equal(t->resp.body.batch_remove_resp.spoil[0].id,
			     t->resp.body.batch_remove_resp.spoil[1].id);
	mt_free(t);
}

/* An upsert to another size lists the old block with id 0 (it stays in
 * the PutStart parking, put_start_release_timeout); to the same size (in
 * place) and a plain PutStart list nothing. */
static void upsert_lists_the_old_block(void **state)
{
	struct mt *t = setup_obj("k");
	struct mc_store_replicate_config c = mt_cfg1();
	const struct mc_store_put_start_resp *r = &t->resp.body.put_start_resp;
	(void)state;

	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "", "k", LEN, "", &c, true), MC_OK);
	assert_int_equal(r->n_spoil, 0); /* in place: rewritten */
	assert_int_equal(mt_revoke(t, CA, "k"), MC_OK);
	mt_free(t);

	t = setup_obj("k");
	r = &t->resp.body.put_start_resp;
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "", "k", 2 * LEN, "", &c, true), MC_OK);
	assert_int_equal(r->n_spoil, 1);
	assert_int_equal(r->spoil[0].address, BASE);
	assert_int_equal(r->spoil[0].id, 0);
	assert_true(r->spoil_ms.present && r->spoil_ms.value >= 600000);
	assert_int_not_equal(r->replicas[0].address, BASE);
	assert_int_equal(mt_put_start(t, CA, "k9", LEN), MC_OK);
	assert_int_equal(r->n_spoil, 0);
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(leased_force_remove_parks_until_spoil_done),
		cmocka_unit_test(lease_end_releases_without_spoil_done),
		cmocka_unit_test(unleased_old_or_unchecked_lists_nothing),
		cmocka_unit_test(upsert_lists_the_old_block),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

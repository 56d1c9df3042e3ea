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
	t->minor = 12; /* an older remover: listed nothing (its holder is: below) */
	assert_int_equal(rm_force(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.remove_resp.n_spoil, 0);
	t->minor = 0;
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(t->resp.body.ping_resp.n_spoil, 1);
	assert_int_equal(spoil_done(t, t->resp.body.ping_resp.spoil[0].id), MC_OK);
	assert_true(mt_metrics(t).allocated_bytes < alloc);

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

/* A master with one segment of 64 MiB whose owner CA mounted it with
 * minor (0: the current one). */
static struct mt *setup_holder(uint8_t minor)
{
	struct mt *t = mt_new_default();

	t->minor = minor;
	assert_int_equal(mt_mount(t, CA, SA, "seg-a", BASE, 64 << 20), MC_OK);
	t->minor = 0;
	return t;
}

static void put_checked(struct mt *t, const char *key)
{
	struct mc_store_put_end_req end = {.client_id = CA,
					   .replica_type = MC_STORE_REPLICA_ALL,
					   .key = mc_proto_str_c(key),
					   .checksum = {true, 9}};

	assert_int_equal(mt_put_start(t, CA, key, LEN), MC_OK);
	assert_int_equal(mt_call(t, MC_STORE_PUT_END, &end), MC_OK);
}

/*
 * Holders spoil (minor 15, master/hspoil.c): a force remove of a leased
 * object by a remover of minor 12 lists it nothing, parks the block and
 * lists it (id, address, the value's size) once, in its owner's next Ping
 * answer, with the parking left; the owner's SpoilDone gives it back.  An
 * upsert of minor 12 to another size: listed with id 0.  The list of one
 * answer is at most MC_STORE_HSPOIL_MAX long, the rest comes in the next.
 * The owner's replicas are cacheable (no nocache in a minor-15 list).
 */
static void old_writers_overrides_are_listed_to_the_holder(void **state)
{
	struct mt *t = setup_holder(0);
	const struct mc_store_ping_resp *p = &t->resp.body.ping_resp;
	struct mc_store_replicate_config c = mt_cfg1();
	uint32_t n = MC_STORE_HSPOIL_MAX + 6, seen = 0;
	uint64_t alloc, id;
	char key[32];
	(void)state;

	put_checked(t, "k");
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_false(t->resp.body.replica_list.nocache.present);
	t->now += 1000;
	alloc = mt_metrics(t).allocated_bytes;
	t->minor = 12;
	assert_int_equal(rm_force(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.remove_resp.n_spoil, 0);
	t->minor = 0;
	assert_int_equal(mt_metrics(t).allocated_bytes, alloc); /* parked */
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(p->n_spoil, 1);
	assert_int_equal(p->spoil[0].address, BASE);
	assert_int_equal(p->spoil[0].size, LEN);
	assert_true(p->spoil_ms.present);
	assert_int_equal(p->spoil_ms.value, 9000);
	id = p->spoil[0].id;
	assert_int_not_equal(id, 0);
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(p->n_spoil, 0); /* listed once */
	/* a pinger of minor 14 is listed nothing */
	t->minor = 14;
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(p->n_spoil, 0);
	t->minor = 0;
	assert_int_equal(spoil_done(t, id), MC_OK);
	assert_true(mt_metrics(t).allocated_bytes < alloc);

	/* an upsert to another size by a writer of minor 12: id 0 */
	put_checked(t, "u");
	assert_int_equal(mt_get(t, "u"), MC_OK);
	t->minor = 12;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "u", 2 * LEN, "", &c, true), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_spoil, 0);
	t->minor = 0;
	assert_int_equal(mt_revoke(t, CA, "u"), MC_OK);
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(p->n_spoil, 1);
	assert_int_equal(p->spoil[0].id, 0);

	/* many: the cap per answer, the rest in the next */
	for (uint32_t i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "m%u", i);
		put_checked(t, key);
		assert_int_equal(mt_get(t, key), MC_OK);
	}
	t->minor = 12;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "m%u", i);
		assert_int_equal(rm_force(t, key), MC_OK);
	}
	t->minor = 0;
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(p->n_spoil, MC_STORE_HSPOIL_MAX);
	seen += p->n_spoil;
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(p->n_spoil, 6);
	seen += p->n_spoil;
	assert_int_equal(seen, n);
	mt_free(t);
}

/*
 * A holder of minor 14 (it fences, it does not spoil): its blocks are not
 * parked for a remover of minor 12 (nobody would spoil them: freed at
 * once, as before), and a replica list to a reader of minor 15 marks its
 * replica not to be cached; to a reader of minor 14, no mark.
 */
static void old_holders_are_marked_not_to_cache(void **state)
{
	struct mt *t = setup_holder(14);
	uint64_t alloc;
	(void)state;

	put_checked(t, "k");
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_true(t->resp.body.replica_list.nocache.present);
	assert_int_equal(t->resp.body.replica_list.nocache.value, 1);
	t->minor = 14;
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_false(t->resp.body.replica_list.nocache.present);
	t->minor = 12;
	alloc = mt_metrics(t).allocated_bytes;
	assert_int_equal(rm_force(t, "k"), MC_OK);
	assert_true(mt_metrics(t).allocated_bytes < alloc);
	t->minor = 14;
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(t->resp.body.ping_resp.n_spoil, 0);
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(leased_force_remove_parks_until_spoil_done),
		cmocka_unit_test(lease_end_releases_without_spoil_done),
		cmocka_unit_test(unleased_old_or_unchecked_lists_nothing),
		cmocka_unit_test(upsert_lists_the_old_block),
		cmocka_unit_test(old_writers_overrides_are_listed_to_the_holder),
		cmocka_unit_test(old_holders_are_marked_not_to_cache),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

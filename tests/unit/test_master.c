/*
 * tests/unit/test_master.c - the master's object model (master/master.h),
 * driven with explicit time: its configuration and refusals of bad
 * requests, puts, gets and existence, End and Revoke, leases, pre-empted
 * and released puts, upserts, eviction with pins and groups, tenants,
 * batches, BatchReplicaClear, regex requests and the admin queries.
 *
 * Every request goes through the real codec both ways (the harness in
 * tests/support/master_t.h), so what is checked is what a client would
 * see.  No test sleeps: time is the now_ms argument.  Segments (mounts,
 * reports, placement, liveness, unmounts and the sweep) are in
 * test_master_segments.c; the table-at-size and stress cases are in
 * test_master_table.c.
 */
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

#define KIB (1ull << 10)
#define MIB (1ull << 20)

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2}, CC = {3, 3};
static const struct mc_store_uuid SA = {10, 1}, SB = {20, 2};

/* ------------------------------------------------------------------------ */

static void test_config_and_hello(void **state)
{
	struct mc_master_config cfg;
	struct mc_master *m;
	struct mt *t;
	struct mc_store_hello h = {mc_proto_str_c("client 1")};
	struct mc_store_msg req;
	struct mc_buf out;

	(void)state;
	mc_master_config_defaults(&cfg);
	cfg.eviction_ratio = 1.5;
	assert_int_equal(mc_master_new(&cfg, &m), MC_ERR_INVALID_PARAMS);
	mc_master_config_defaults(&cfg);
	cfg.default_kv_soft_pin_ttl_ms = cfg.max_kv_soft_pin_ttl_ms + 1;
	assert_int_equal(mc_master_new(&cfg, &m), MC_ERR_INVALID_PARAMS);
	mc_master_config_defaults(&cfg);
	cfg.default_kv_lease_ttl_ms = 0;
	assert_int_equal(mc_master_new(&cfg, &m), MC_ERR_INVALID_PARAMS);

	mc_master_config_defaults(&cfg);
	cfg.version = "test-version";
	t = mt_new(&cfg);
	assert_int_equal(mt_call(t, MC_STORE_SERVICE_READY, &h), MC_OK);
	assert_int_equal(t->resp.body.hello.version.len, strlen("test-version"));
	assert_memory_equal(t->resp.body.hello.version.ptr, "test-version", 12);

	/* an unknown type and a response frame are refused, one frame each */
	memset(&req, 0, sizeof(req));
	req.hdr.type = 999;
	req.hdr.req_id = 7;
	mc_buf_init(&out);
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_NOT_SUPPORTED);
	assert_true(out.len > MC_PROTO_HDR_LEN);
	/* so are the numbers between and just past the known ones */
	for (size_t i = 0; i < 3; i++) {
		static const uint16_t gaps[] = {0, 15, MC_STORE_BATCH_REPLICA_CLEAR + 1};
		mc_buf_reset(&out);
		req.hdr.type = gaps[i];
		assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_NOT_SUPPORTED);
	}
	mc_buf_reset(&out);
	req.hdr.type = MC_STORE_PING;
	req.hdr.flags = MC_PROTO_F_RESPONSE;
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_INVALID_PARAMS);
	/* a hand-filled request with a count but no array does not crash */
	mc_buf_reset(&out);
	memset(&req, 0, sizeof(req));
	req.hdr.type = MC_STORE_BATCH_EXIST_KEY;
	req.body.keys_req.n_keys = 5;
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_INVALID_PARAMS);
	mc_buf_reset(&out);
	req.hdr.type = MC_STORE_REPORT_UNREACHABLE;
	req.body.unreachable_req.n_segments = 2;
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_INVALID_PARAMS);
	mc_buf_reset(&out);
	memset(&req.body, 0, sizeof(req.body));
	req.hdr.type = MC_STORE_REMOUNT_SEGMENT;
	req.body.remount_req.n_segments = 3;
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_INVALID_PARAMS);
	mc_buf_reset(&out);
	req.hdr.type = MC_STORE_BATCH_PUT_START;
	memset(&req.body, 0, sizeof(req.body));
	req.body.batch_put_start_req.config.replica_num = 1;
	req.body.batch_put_start_req.config.n_preferred_segments = 9;
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_INVALID_PARAMS);
	/* strings with a length but no bytes */
	mc_buf_reset(&out);
	memset(&req, 0, sizeof(req));
	req.hdr.type = MC_STORE_GET_REPLICA_LIST;
	req.body.key_req.key.len = 5;
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_INVALID_PARAMS);
	mc_buf_reset(&out);
	memset(&req, 0, sizeof(req));
	req.hdr.type = MC_STORE_PUT_START;
	req.body.put_start_req.config.replica_num = 1;
	req.body.put_start_req.key = mc_proto_str_c("k");
	req.body.put_start_req.value_len = 1;
	req.body.put_start_req.group_id.len = 3;
	assert_int_equal(mc_master_handle(t->m, &req, t->now, &out), MC_ERR_INVALID_PARAMS);
	mc_buf_release(&out);
	assert_string_equal(mc_master_segment_status_name(MC_SEGMENT_GRACEFULLY_UNMOUNTING),
			    "GRACEFULLY_UNMOUNTING");
	assert_string_equal(mc_master_segment_status_name(77), "UNDEFINED");
	mt_free(t);
}

static void test_put_get_exist(void **state)
{
	struct mt *t = mt_new_default();
	const struct mc_store_replica *r;
	struct mc_store_replicate_config c = mt_cfg1();
	uint64_t addr;

	(void)state;
	assert_int_equal(mt_put_start(t, CA, "k1", 1000), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);

	assert_int_equal(mt_put_start(t, CA, "k1", 1000), MC_OK);
	r = mt_first_replica_start(t);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 1);
	assert_int_equal(r->status, MC_STORE_REPLICA_PROCESSING);
	assert_int_equal(r->type, MC_STORE_REPLICA_MEMORY);
	assert_int_equal(r->size, 1000);
	assert_true(r->address >= 0x10000 && r->address + 1000 <= 0x10000 + MIB);
	assert_memory_equal(r->segment_name.ptr, "b:1", 3);
	assert_memory_equal(r->transport_endpoint.ptr, "b:1", 3);
	assert_memory_equal(r->protocol.ptr, "tcp", 3);
	addr = r->address;

	/* readers see nothing until PutEnd */
	assert_int_equal(mt_get(t, "k1"), MC_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(mt_exist(t, "k1"), 0);
	assert_int_equal(mt_put_start(t, CB, "k1", 1000), MC_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(mt_put_end(t, CA, "k1"), MC_OK);
	assert_int_equal(mt_get(t, "k1"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.lease_ttl_ms, 10000);
	assert_false(t->resp.body.replica_list.checksum.present);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].status, MC_STORE_REPLICA_COMPLETE);
	assert_int_equal(t->resp.body.replica_list.replicas[0].address, addr);
	assert_int_equal(mt_exist(t, "k1"), 1);
	assert_int_equal(mt_exist(t, "nope"), 0);
	assert_int_equal(mt_exist(t, ""), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_get(t, "nope"), MC_ERR_OBJECT_NOT_FOUND);
	assert_non_null(strstr(t->err, "nope"));
	assert_int_equal(mt_get(t, ""), MC_ERR_INVALID_PARAMS);

	/* insert-if-absent */
	assert_int_equal(mt_put_start(t, CA, "k1", 1000), MC_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(mt_put_start(t, CA, "k1", 5), MC_ERR_OBJECT_ALREADY_EXISTS);

	/* checksum is kept and returned */
	{
		struct mc_store_put_end_req e = {.client_id = CA,
						 .replica_type = MC_STORE_REPLICA_MEMORY,
						 .key = mc_proto_str_c("ck"),
						 .checksum = {true, 0xabcdef}};

		assert_int_equal(mt_put_start(t, CA, "ck", 10), MC_OK);
		assert_int_equal(mt_call(t, MC_STORE_PUT_END, &e), MC_OK);
		assert_int_equal(mt_get(t, "ck"), MC_OK);
		assert_true(t->resp.body.replica_list.checksum.present);
		assert_int_equal(t->resp.body.replica_list.checksum.value, 0xabcdef);
	}

	/* validation (spec 2.5) */
	assert_int_equal(mt_put_start(t, CA, "", 10), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_put_start(t, CA, "z", 0), MC_ERR_INVALID_PARAMS);
	c.replica_num = 0;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false),
			 MC_ERR_INVALID_PARAMS);
	c = mt_cfg1();
	c.nof_replica_num = 1;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false),
			 MC_ERR_INVALID_PARAMS);
	c = mt_cfg1();
	c.dfs_replica_num = 1;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_NOT_SUPPORTED);
	c.dfs_replica_num = 2;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false),
			 MC_ERR_INVALID_PARAMS);
	c = mt_cfg1();
	c.soft_pin_ttl_ms.present = true;
	c.soft_pin_ttl_ms.value = 10;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false),
			 MC_ERR_INVALID_PARAMS);
	c.soft_pin_action = MC_STORE_SOFT_PIN_DISABLE;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false),
			 MC_ERR_INVALID_PARAMS);
	c.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
	c.soft_pin_ttl_ms.value = 86400001;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false),
			 MC_ERR_INVALID_PARAMS);
	c.soft_pin_action = 9;
	c.soft_pin_ttl_ms.present = false;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "z", 10, "", &c, false),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_get(t, "z"), MC_ERR_OBJECT_NOT_FOUND);
	/* bigger than the segment, or than anything */
	assert_int_equal(mt_put_start(t, CA, "huge", 2 * MIB), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mt_put_start(t, CA, "huge", (1ull << 47) - 1), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mt_put_start(t, CA, "huge", UINT64_MAX), MC_ERR_INVALID_PARAMS);
	/* 2^47 and up: the size's top bit marks a trailer (master_int.h) */
	assert_int_equal(mt_put_start(t, CA, "huge", 1ull << 47), MC_ERR_INVALID_PARAMS);

	{
		struct mc_master_metrics x = mt_metrics(t);

		assert_int_equal(x.key_count, 2);
		assert_int_equal(x.allocated_bytes, 1010);
		assert_int_equal(x.value_size_count, 2); /* successful PutStarts only */
		assert_int_equal(x.value_size_buckets[0], 2);
		assert_int_equal(x.value_size_sum, 1010);
		assert_int_equal(x.put_start_alloc_failures, 3);
		assert_int_equal(x.master_exist_key.requests, 4);
		assert_int_equal(x.master_exist_key.failures, 1);
		assert_int_equal(x.total_get_nums, 5);
		assert_int_equal(x.valid_get_nums, 2);
		assert_int_equal(x.mem_cache_hit_nums, 2);
		assert_int_equal(x.mem_cache_hit_bytes, 1010);
		assert_int_equal(x.master_put_end.requests, 2);
		assert_int_equal(x.master_get_replica_list.failures, 4);
	}
	mt_free(t);
}

static void test_end_revoke_rules(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_put_end_req e = {.client_id = CA, .key = mc_proto_str_c("k")};

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	assert_int_equal(mt_put_start(t, CA, "k", 300), MC_OK);
	assert_int_equal(mt_metrics(t).allocated_bytes, 300);
	assert_int_equal(mt_put_end(t, CB, "k"), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(mt_put_end(t, CC, "k"), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(mt_revoke(t, CB, "k"), MC_ERR_ILLEGAL_CLIENT);
	e.replica_type = 77;
	assert_int_equal(mt_call(t, MC_STORE_PUT_END, &e), MC_ERR_INVALID_PARAMS);
	e.replica_type = MC_STORE_REPLICA_NOF_SSD;
	assert_int_equal(mt_call(t, MC_STORE_PUT_END, &e), MC_ERR_INVALID_WRITE);
	assert_int_equal(mt_put_end(t, CA, "missing"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_revoke(t, CA, "k"), MC_OK);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	assert_int_equal(mt_get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_revoke(t, CA, "k"), MC_ERR_OBJECT_NOT_FOUND);

	mt_put_ok(t, CA, "k", 300);
	assert_int_equal(mt_put_end(t, CA, "k"), MC_OK); /* idempotent */
	assert_int_equal(mt_put_end(t, CB, "k"), MC_OK);
	assert_int_equal(mt_revoke(t, CA, "k"), MC_ERR_INVALID_WRITE);
	{
		struct mc_master_metrics x = mt_metrics(t);

		assert_int_equal(x.master_put_revoke.requests, 4);
		assert_int_equal(x.master_put_revoke.failures, 3);
	}
	mt_free(t);
}

static void test_lease(void **state)
{
	struct mt *t = mt_new_default();

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	assert_int_equal(mt_put_start(t, CA, "p", 10), MC_OK);
	assert_int_equal(mt_rm(t, "p", true), MC_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(mt_put_end(t, CA, "p"), MC_OK);
	/* PutEnd gives no protection */
	assert_int_equal(mt_rm(t, "p", false), MC_OK);
	assert_int_equal(mt_rm(t, "p", false), MC_ERR_OBJECT_NOT_FOUND);

	mt_put_ok(t, CA, "k", 10);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(mt_rm(t, "k", false), MC_ERR_OBJECT_HAS_LEASE);
	t->now += 9999;
	assert_int_equal(mt_rm(t, "k", false), MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(mt_exist(t, "k"), 1); /* exist extends it */
	t->now += 9999;
	assert_int_equal(mt_rm(t, "k", false), MC_ERR_OBJECT_HAS_LEASE);
	t->now += 1;
	assert_int_equal(mt_rm(t, "k", false), MC_OK);

	mt_put_ok(t, CA, "f", 10);
	assert_int_equal(mt_get(t, "f"), MC_OK);
	assert_int_equal(mt_rm(t, "f", true), MC_OK);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mt_free(t);
}

static void test_zombie_preempt_release(void **state)
{
	struct mt *t = mt_new_default();
	uint64_t t0;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	t0 = t->now;
	assert_int_equal(mt_put_start(t, CA, "z", 500), MC_OK);
	t->now = t0 + 29999;
	assert_int_equal(mt_put_start(t, CB, "z", 500), MC_ERR_OBJECT_ALREADY_EXISTS);
	t->now = t0 + 30000;
	assert_int_equal(mt_put_start(t, CB, "z", 700), MC_OK);
	{
		struct mc_master_metrics x = mt_metrics(t);

		assert_int_equal(x.put_start_discard_cnt, 1);
		assert_int_equal(x.discarded_staging_bytes, 500);
		assert_int_equal(x.allocated_bytes, 1200); /* parked space is still taken */
	}
	assert_int_equal(mt_put_end(t, CA, "z"), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(mt_put_end(t, CB, "z"), MC_OK);
	mc_master_tick(t->m, t0 + 30000 + 599999);
	assert_int_equal(mt_metrics(t).discarded_staging_bytes, 500);
	mc_master_tick(t->m, t0 + 30000 + 600000);
	{
		struct mc_master_metrics x = mt_metrics(t);

		assert_int_equal(x.discarded_staging_bytes, 0);
		assert_int_equal(x.put_start_release_cnt, 1);
		assert_int_equal(x.allocated_bytes, 700);
	}

	/* a put never ended nor pre-empted is reclaimed after the release timeout */
	t->now = t0 + 700000;
	assert_int_equal(mt_put_start(t, CA, "y", 100), MC_OK);
	mc_master_tick(t->m, t->now + 600000);
	assert_int_equal(mt_get(t, "y"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_metrics(t).allocated_bytes, 700);
	mt_free(t);
}

static void test_upsert(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config c = mt_cfg1();
	uint64_t a1, a2;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	/* A: absent = put */
	assert_int_equal(mt_put_start_cfg(t, CA, "", "u", 100, "", &c, true), MC_OK);
	a1 = mt_first_replica_start(t)->address;
	assert_int_equal(mt_put_end_t(t, CA, "", "u", true), MC_OK);
	assert_int_equal(mt_get(t, "u"), MC_OK);

	/* B: same size, same blocks, unreadable until UpsertEnd (leases not checked) */
	assert_int_equal(mt_put_start_cfg(t, CB, "", "u", 100, "", &c, true), MC_OK);
	assert_int_equal(mt_first_replica_start(t)->address, a1);
	assert_int_equal(mt_first_replica_start(t)->status, MC_STORE_REPLICA_PROCESSING);
	assert_int_equal(mt_get(t, "u"), MC_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(mt_put_end_t(t, CA, "", "u", true), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(mt_put_end_t(t, CB, "", "u", true), MC_OK);
	assert_int_equal(mt_get(t, "u"), MC_OK);
	assert_int_equal(mt_metrics(t).discarded_staging_bytes, 0);

	/* C: other size: new blocks, old ones parked */
	assert_int_equal(mt_put_start_cfg(t, CA, "", "u", 200, "", &c, true), MC_OK);
	a2 = mt_first_replica_start(t)->address;
	assert_true(a2 != a1);
	assert_int_equal(mt_first_replica_start(t)->size, 200);
	assert_int_equal(mt_metrics(t).discarded_staging_bytes, 100);
	assert_int_equal(mt_put_end_t(t, CA, "", "u", true), MC_OK);
	assert_int_equal(mt_get(t, "u"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 200);

	/* an in-flight upsert is pre-empted at once */
	assert_int_equal(mt_put_start_cfg(t, CA, "", "u", 300, "", &c, true), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CB, "", "u", 400, "", &c, true), MC_OK);
	assert_int_equal(mt_put_end_t(t, CA, "", "u", true), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(mt_put_end_t(t, CB, "", "u", true), MC_OK);
	assert_int_equal(mt_get(t, "u"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 400);

	/* UpsertRevoke drops the object */
	assert_int_equal(mt_put_start_cfg(t, CA, "", "u", 400, "", &c, true), MC_OK);
	{
		struct mc_store_put_revoke_req r = {.client_id = CA,
						    .replica_type = MC_STORE_REPLICA_ALL,
						    .key = mc_proto_str_c("u")};

		assert_int_equal(mt_call(t, MC_STORE_UPSERT_REVOKE, &r), MC_OK);
	}
	assert_int_equal(mt_get(t, "u"), MC_ERR_OBJECT_NOT_FOUND);
	/* but put (not upsert) still refuses an existing key */
	mt_put_ok(t, CA, "w", 10);
	assert_int_equal(mt_put_start(t, CA, "w", 20), MC_ERR_OBJECT_ALREADY_EXISTS);
	mt_free(t);
}

/* ---- eviction ---- */

/* 64 KiB objects on a 1 MiB segment: 16 fit. */
#define OBJ (64 * KIB)

static void fill(struct mt *t, const char *prefix, int n, const struct mc_store_replicate_config *c)
{
	for (int i = 0; i < n; i++) {
		char k[32];

		snprintf(k, sizeof(k), "%s%d", prefix, i);
		assert_int_equal(mt_put_start_cfg(t, CA, "", k, OBJ, "", c, false), MC_OK);
		assert_int_equal(mt_put_end(t, CA, k), MC_OK);
		t->now++;
	}
}

static void test_full_pool_and_eviction(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config c = mt_cfg1();
	struct mc_master_metrics x;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "o", 14, &c); /* 87.5%: below the watermark */
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).attempted_evictions, 0);
	fill(t, "p", 2, &c); /* full */
	/* the pool is full: -200 at once, and the next tick evicts */
	assert_int_equal(mt_get(t, "o0"), MC_OK); /* leased: never evicted */
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mt_metrics(t).put_start_alloc_failures, 1);
	mc_master_tick(t->m, t->now);
	x = mt_metrics(t);
	assert_int_equal(x.attempted_evictions, 1);
	assert_int_equal(x.successful_evictions, 1);
	/* used 100% > 90%: target = 0.05 + 0.10 = 0.15 of 16 -> 3 (ceil) */
	assert_int_equal(x.evicted_key_count, 3);
	assert_int_equal(x.evicted_size_bytes, 3 * OBJ);
	assert_int_equal(x.key_count, 13);
	/* oldest lease first: o1, o2, o3 (o0 is leased) */
	assert_int_equal(mt_get(t, "o0"), MC_OK);
	assert_int_equal(mt_get(t, "o1"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "o2"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "o3"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "o4"), MC_OK);
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_OK);
	mt_free(t);
}

static void test_eviction_after_alloc_failure_only(void **state)
{
	struct mc_master_config cfg;
	struct mt *t;
	struct mc_store_replicate_config c = mt_cfg1();

	(void)state;
	mt_cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	t = mt_new(&cfg);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "o", 16, &c);
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).attempted_evictions, 0);
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).evicted_key_count, 1); /* ceil(0.05 * 16) */
	assert_int_equal(mt_get(t, "o0"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_OK);
	/* in-flight objects are never evicted */
	assert_int_equal(mt_put_start(t, CA, "r", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_put_end(t, CA, "q"), MC_OK);
	mt_free(t);
}

/* A PutStart of key (OBJ bytes) by CA with the nth allocation of the
 * master failing (the codec's are outside the armed window). */
static mc_status put_start_faulted(struct mt *t, const char *key, long nth)
{
	struct mc_store_msg req;
	struct mc_buf out;
	mc_status st;

	memset(&req, 0, sizeof(req));
	req.hdr.type = MC_STORE_PUT_START;
	req.hdr.req_id = 1;
	req.body.put_start_req.client_id = CA;
	req.body.put_start_req.key = mc_proto_str_c(key);
	req.body.put_start_req.value_len = OBJ;
	req.body.put_start_req.config = mt_cfg1();
	mc_buf_init(&out);
	mc_alloc_fault_arm(nth);
	st = mc_master_handle(t->m, &req, t->now, &out);
	mc_alloc_fault_arm(0);
	mc_buf_release(&out);
	return st;
}

/*
 * A PutStart refused for want of the master's own memory (the allocator
 * could not grow its block records: NOMEM) starts no eviction round: that
 * frees segment space, not memory, and would drop the complete objects no
 * reader has leased yet with the segment nearly empty.  (unit_store_faults
 * saw such a put reported stored and then not found.)  The sweep fails
 * each allocation of one PutStart in turn; with 16 live blocks the
 * allocator grows its records, so one of them is the allocator's.
 */
static void test_no_eviction_after_nomem(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config c = mt_cfg1();
	bool hit = false;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	fill(t, "o", 16, &c); /* 1 MiB of 64: complete, unleased */
	mc_master_tick(t->m, t->now);
	for (long n = 1; n <= 64; n++) {
		uint64_t before = mt_metrics(t).put_start_alloc_failures;
		mc_status st = put_start_faulted(t, "x", n);

		if (st == MC_OK)
			break; /* past the last allocation */
		assert_int_equal(st, MC_ERR_NOMEM);
		hit |= mt_metrics(t).put_start_alloc_failures == before + 1;
		mc_master_tick(t->m, t->now);
		assert_int_equal(mt_metrics(t).attempted_evictions, 0);
		assert_int_equal(mt_metrics(t).key_count, 16);
	}
	assert_true(hit); /* the fault did land in the allocator */
	assert_int_equal(mt_get(t, "o15"), MC_OK);
	mt_free(t);
}

static void test_pins(void **state)
{
	struct mc_master_config cfg;
	struct mt *t;
	struct mc_store_replicate_config hard = mt_cfg1(), soft = mt_cfg1(), plain = mt_cfg1();
	struct mc_master_metrics x;

	(void)state;
	mt_cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	cfg.eviction_ratio = 1.0; /* evict everything evictable */
	t = mt_new(&cfg);
	hard.with_hard_pin = true;
	soft.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
	soft.soft_pin_ttl_ms.present = true;
	soft.soft_pin_ttl_ms.value = 60000;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "h", 4, &hard);
	fill(t, "s", 8, &soft);
	fill(t, "n", 4, &plain);
	x = mt_metrics(t);
	assert_int_equal(x.soft_pin_key_count, 8);

	/* pass 1 takes the plain ones, below the lower bound (half of 16), so
	 * pass 2 takes the soft-pinned ones; hard-pinned never */
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	x = mt_metrics(t);
	assert_int_equal(x.evicted_key_count, 12);
	assert_int_equal(x.soft_pin_key_count, 0);
	for (int i = 0; i < 4; i++) {
		char k[8];

		snprintf(k, sizeof(k), "h%d", i);
		assert_int_equal(mt_get(t, k), MC_OK);
	}
	/* the hard pin yields to an explicit remove */
	t->now += 20000;
	assert_int_equal(mt_rm(t, "h0", false), MC_OK);
	mt_free(t);

	/* soft pins kept when not allowed; and they expire */
	mt_cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	cfg.eviction_ratio = 1.0;
	cfg.allow_evict_soft_pinned_objects = false;
	t = mt_new(&cfg);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "s", 4, &soft);
	fill(t, "n", 12, &plain);
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	x = mt_metrics(t);
	assert_int_equal(x.evicted_key_count, 12);
	assert_int_equal(x.key_count, 4);
	assert_int_equal(x.soft_pin_key_count, 4);
	fill(t, "m", 12, &plain);
	t->now += 60000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).soft_pin_key_count, 0);
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).key_count, 0); /* pins expired: ordinary cache */

	/* ENABLE with TTL 0 = no pin; the default TTL applies without a TTL */
	soft.soft_pin_ttl_ms.value = 0;
	fill(t, "z", 1, &soft);
	assert_int_equal(mt_metrics(t).soft_pin_key_count, 0);
	soft.soft_pin_ttl_ms.present = false;
	fill(t, "d", 1, &soft);
	assert_int_equal(mt_metrics(t).soft_pin_key_count, 1);
	t->now += 1800000 - 2; /* fill() stepped the clock once after PutEnd */
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).soft_pin_key_count, 1);
	/* upsert PRESERVE keeps the pin, DISABLE drops it */
	assert_int_equal(mt_put_start_cfg(t, CA, "", "d0", OBJ, "", &plain, true), MC_OK);
	assert_int_equal(mt_put_end_t(t, CA, "", "d0", true), MC_OK);
	assert_int_equal(mt_metrics(t).soft_pin_key_count, 1);
	plain.soft_pin_action = MC_STORE_SOFT_PIN_DISABLE;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "d0", OBJ, "", &plain, true), MC_OK);
	assert_int_equal(mt_put_end_t(t, CA, "", "d0", true), MC_OK);
	assert_int_equal(mt_metrics(t).soft_pin_key_count, 0);
	mt_free(t);
}

static void test_groups(void **state)
{
	struct mc_master_config cfg;
	struct mt *t;
	struct mc_store_replicate_config c = mt_cfg1();

	(void)state;
	mt_cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	cfg.eviction_ratio = 1.0;
	t = mt_new(&cfg);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	for (int i = 0; i < 3; i++) {
		char k[8];

		snprintf(k, sizeof(k), "g%d", i);
		assert_int_equal(mt_put_start_cfg(t, CA, "", k, OBJ, "grp", &c, false), MC_OK);
		assert_int_equal(mt_put_end(t, CA, k), MC_OK);
	}
	fill(t, "n", 13, &c);
	/* a read of one member leases the whole group */
	assert_int_equal(mt_get(t, "g0"), MC_OK);
	assert_int_equal(mt_rm(t, "g2", false), MC_ERR_OBJECT_HAS_LEASE);
	/* eviction: the group is skipped while a member holds a lease */
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).key_count, 3);
	assert_int_equal(mt_get(t, "g1"), MC_OK);
	/* the same group name in a new put joins it (tenant-scoped) */
	t->now += 20000;
	fill(t, "m", 12, &c);
	assert_int_equal(mt_put_start_cfg(t, CA, "", "g3", OBJ, "grp", &c, false), MC_OK);
	assert_int_equal(mt_put_end(t, CA, "g3"), MC_OK);
	/* leases gone: evicting any member takes the whole group */
	assert_int_equal(mt_put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).key_count, 0);
	mt_free(t);
}

static void test_tenants(void **state)
{
	struct mc_master_config cfg;
	struct mt *t;
	struct mc_store_replicate_config c = mt_cfg1();

	(void)state;
	/* off: every tenant is the default one */
	t = mt_new_default();
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "ta", "k", 10, "", &c, false), MC_OK);
	assert_int_equal(mt_put_end_t(t, CA, "ta", "k", false), MC_OK);
	assert_int_equal(mt_get_t(t, "tb", "k"), MC_OK);
	assert_int_equal(mt_get_t(t, "", "k"), MC_OK);
	mt_free(t);

	/* on: separate namespaces */
	mt_cfg_init(&cfg);
	cfg.enable_multi_tenants = true;
	t = mt_new(&cfg);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "ta", "k", 10, "", &c, false), MC_OK);
	assert_int_equal(mt_put_end_t(t, CA, "ta", "k", false), MC_OK);
	assert_int_equal(mt_get_t(t, "tb", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get_t(t, "", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get_t(t, "default", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get_t(t, "ta", "k"), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "tb", "k", 20, "", &c, false), MC_OK);
	assert_int_equal(mt_put_end_t(t, CA, "tb", "k", false), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "", "k", 30, "", &c, false), MC_OK);
	assert_int_equal(mt_put_end_t(t, CA, "default", "k", false), MC_OK);
	assert_int_equal(mt_get_t(t, "tb", "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 20);
	assert_int_equal(mt_get_t(t, "default", "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 30);
	t->now += 20000;
	assert_int_equal(mc_master_remove_all(t->m, "ta", false, t->now), 1);
	assert_int_equal(mc_master_remove_all(t->m, "nobody", false, t->now), 0);
	assert_int_equal(mt_get_t(t, "ta", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get_t(t, "tb", "k"), MC_OK);
	t->now += 20000;
	{
		struct mc_store_remove_all_req r = {mc_proto_str_c(""), false};

		assert_int_equal(mt_call(t, MC_STORE_REMOVE_ALL, &r), MC_OK);
		assert_int_equal(t->resp.body.count_resp.count, 2);
	}
	mt_free(t);
}

static void test_batches(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_put_item items[4] = {
		{mc_proto_str_c("b0"), 10, mc_proto_str_c("")},
		{mc_proto_str_c(""), 10, mc_proto_str_c("")},
		{mc_proto_str_c("b2"), 0, mc_proto_str_c("")},
		{mc_proto_str_c("b3"), 30, mc_proto_str_c("")},
	};
	struct mc_store_batch_put_start_req bs = {
		.client_id = CA, .config = mt_cfg1(), .n_items = 4, .items = items};
	struct mc_store_object_meta metas[3] = {
		{mc_proto_str_c("b0"), {false, 0}},
		{mc_proto_str_c("b3"), {true, 7}},
		{mc_proto_str_c("nope"), {false, 0}},
	};
	struct mc_store_batch_put_end_req be = {.client_id = CA,
						.replica_type = MC_STORE_REPLICA_ALL,
						.n_items = 3,
						.items = metas};
	struct mc_proto_str keys[4] = {mc_proto_str_c("b0"), mc_proto_str_c("b3"),
				       mc_proto_str_c("x"), mc_proto_str_c("")};
	struct mc_store_keys_req kr = {mc_proto_str_c(""), 4, keys, {false, 0}};
	struct mc_master_metrics x;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	assert_int_equal(mt_call(t, MC_STORE_BATCH_PUT_START, &bs), MC_OK);
	{
		const struct mc_store_batch_put_start_resp *r = &t->resp.body.batch_put_start_resp;

		assert_int_equal(r->n_items, 4);
		assert_int_equal(r->items[0].status, MC_OK);
		assert_int_equal(r->items[0].n_replicas, 1);
		assert_int_equal(r->items[0].replicas[0].size, 10);
		assert_int_equal(r->items[1].status, MC_ERR_INVALID_PARAMS);
		assert_int_equal(r->items[2].status, MC_ERR_INVALID_PARAMS);
		assert_int_equal(r->items[3].status, MC_OK);
		assert_int_equal(r->items[3].replicas[0].size, 30);
		assert_true(r->items[3].replicas[0].address != r->items[0].replicas[0].address);
	}
	assert_int_equal(mt_call(t, MC_STORE_BATCH_PUT_END, &be), MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.n_items, 3);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[2], MC_ERR_OBJECT_NOT_FOUND);

	assert_int_equal(mt_call(t, MC_STORE_BATCH_EXIST_KEY, &kr), MC_OK);
	{
		const struct mc_store_batch_exist_resp *r = &t->resp.body.batch_exist_resp;

		assert_int_equal(r->n_items, 4);
		assert_true(r->items[0].exists && r->items[1].exists);
		assert_int_equal(r->items[2].status, MC_OK);
		assert_false(r->items[2].exists);
		assert_int_equal(r->items[3].status, MC_ERR_INVALID_PARAMS);
	}
	assert_int_equal(mt_call(t, MC_STORE_BATCH_GET_REPLICA_LIST, &kr), MC_OK);
	{
		const struct mc_store_batch_replica_list *r = &t->resp.body.batch_replica_list;

		assert_int_equal(r->n_items, 4);
		assert_int_equal(r->items[0].status, MC_OK);
		assert_int_equal(r->items[0].list.replicas[0].size, 10);
		assert_int_equal(r->items[1].status, MC_OK);
		assert_int_equal(r->items[1].list.replicas[0].size, 30);
		assert_true(r->items[1].list.checksum.present);
		assert_int_equal(r->items[1].list.checksum.value, 7);
		assert_int_equal(r->items[2].status, MC_ERR_OBJECT_NOT_FOUND);
		assert_int_equal(r->items[3].status, MC_ERR_INVALID_PARAMS);
	}
	/* batch revoke: one in flight, one complete, one missing */
	{
		struct mc_proto_str rk[3] = {mc_proto_str_c("r0"), mc_proto_str_c("b0"),
					     mc_proto_str_c("zz")};
		struct mc_store_batch_put_revoke_req br = {.client_id = CA,
							   .replica_type = MC_STORE_REPLICA_ALL,
							   .n_keys = 3,
							   .keys = rk};

		assert_int_equal(mt_put_start(t, CA, "r0", 5), MC_OK);
		assert_int_equal(mt_call(t, MC_STORE_BATCH_PUT_REVOKE, &br), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_ERR_INVALID_WRITE);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[2],
				 MC_ERR_OBJECT_NOT_FOUND);
		assert_int_equal(mt_call(t, MC_STORE_BATCH_UPSERT_REVOKE, &br), MC_OK);
	}
	/* batch upsert: same size in place, other size moved */
	{
		struct mc_store_put_item up[2] = {{mc_proto_str_c("b0"), 10, mc_proto_str_c("")},
						  {mc_proto_str_c("b3"), 99, mc_proto_str_c("")}};
		struct mc_store_batch_put_start_req us = {
			.client_id = CB, .config = mt_cfg1(), .n_items = 2, .items = up};
		struct mc_store_object_meta um[2] = {{mc_proto_str_c("b0"), {false, 0}},
						     {mc_proto_str_c("b3"), {false, 0}}};
		struct mc_store_batch_put_end_req ue = {.client_id = CB,
							.replica_type = MC_STORE_REPLICA_ALL,
							.n_items = 2,
							.items = um};

		assert_int_equal(mt_call(t, MC_STORE_BATCH_UPSERT_START, &us), MC_OK);
		assert_int_equal(t->resp.body.batch_put_start_resp.items[0].status, MC_OK);
		assert_int_equal(t->resp.body.batch_put_start_resp.items[1].status, MC_OK);
		assert_int_equal(t->resp.body.batch_put_start_resp.items[1].replicas[0].size, 99);
		assert_int_equal(mt_call(t, MC_STORE_BATCH_UPSERT_END, &ue), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_OK);
	}
	/* batch remove: leased ones refused unless forced */
	{
		struct mc_proto_str rk[3] = {mc_proto_str_c("b0"), mc_proto_str_c("b3"),
					     mc_proto_str_c("zz")};
		struct mc_store_batch_remove_req br = {mc_proto_str_c(""), false, 3, rk};

		assert_int_equal(mt_get(t, "b0"), MC_OK);
		assert_int_equal(mt_call(t, MC_STORE_BATCH_REMOVE, &br), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0],
				 MC_ERR_OBJECT_HAS_LEASE);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[2],
				 MC_ERR_OBJECT_NOT_FOUND);
		br.force = true;
		assert_int_equal(mt_call(t, MC_STORE_BATCH_REMOVE, &br), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
	}
	x = mt_metrics(t);
	assert_int_equal(x.master_batch_put_start.requests, 2);
	assert_int_equal(x.master_batch_put_start.items, 6);
	assert_int_equal(x.master_batch_put_start.failed_items, 2);
	assert_int_equal(x.master_batch_put_start.partial_successes, 1);
	assert_int_equal(x.master_batch_put_end.requests, 2);
	assert_int_equal(x.master_batch_put_end.failed_items, 1);
	assert_int_equal(x.master_batch_exist_key.items, 4);
	assert_int_equal(x.master_batch_exist_key.failed_items, 1);
	assert_int_equal(x.master_batch_get_replica_list.failed_items, 2);
	assert_int_equal(x.master_batch_put_revoke.requests, 2);
	assert_int_equal(x.master_batch_put_revoke.failures, 1); /* nothing left to revoke */
	assert_int_equal(x.allocated_bytes, 30); /* b3's old blocks, parked by the upsert */
	assert_int_equal(x.discarded_staging_bytes, 30);
	assert_int_equal(x.key_count, 0);
	mt_free(t);
}

/* BatchReplicaClear of keys (NULL-terminated); returns how many were
 * cleared and checks they are want (NULL-terminated), in order. */
static void clear_want(struct mt *t, struct mc_store_uuid client, const char *segment,
		       const char *const *keys, const char *const *want)
{
	struct mc_proto_str ks[16];
	struct mc_store_replica_clear_req r = {client, mc_proto_str_c(""), mc_proto_str_c(segment),
					       0, ks};
	const struct mc_store_keys_resp *got;
	uint32_t n = 0;

	while (keys[r.n_keys]) {
		ks[r.n_keys] = mc_proto_str_c(keys[r.n_keys]);
		r.n_keys++;
	}
	assert_int_equal(mt_call(t, MC_STORE_BATCH_REPLICA_CLEAR, &r), MC_OK);
	got = &t->resp.body.keys_resp;
	while (want[n])
		n++;
	assert_int_equal(got->n_keys, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(got->keys[i].len, strlen(want[i]));
		assert_memory_equal(got->keys[i].ptr, want[i], got->keys[i].len);
	}
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE	  ((const char *const[]){NULL})

static void test_batch_replica_clear(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config two = mt_cfg1(), soft = mt_cfg1(), one = mt_cfg1();
	struct mc_master_metrics x;

	(void)state;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	two.replica_num = 2;
	soft.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
	soft.soft_pin_ttl_ms.present = true;
	soft.soft_pin_ttl_ms.value = 60000;

	mt_put_ok(t, CA, "x", 100);				/* CA's, no lease: cleared */
	mt_put_ok(t, CB, "y", 100);				/* CB's: kept */
	assert_int_equal(mt_put_start(t, CA, "p", 100), MC_OK); /* being written: kept */
	mt_put_ok(t, CA, "l", 100);
	assert_int_equal(mt_get(t, "l"), MC_OK); /* leased: kept */
	assert_int_equal(mt_put_start_cfg(t, CA, "", "s", 100, "", &soft, false), MC_OK);
	assert_int_equal(mt_put_end(t, CA, "s"), MC_OK); /* soft-pinned, CA's: cleared */
	mt_put_ok(t, CA, "u", 100);
	assert_int_equal(mt_put_start_cfg(t, CB, "", "u", 100, "", &one, true), MC_OK);
	assert_int_equal(mt_put_end_t(t, CB, "", "u", true), MC_OK); /* upserted: now CB's */

	/* an unknown client wrote nothing */
	clear_want(t, CC, "", KEYS("x", "s"), NONE);
	clear_want(t, CA, "", KEYS("x", "y", "p", "l", "s", "u", "missing", ""), KEYS("x", "s"));
	assert_int_equal(mt_get(t, "x"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "s"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_metrics(t).soft_pin_key_count, 0);
	assert_int_equal(mt_exist(t, "y"), 1);
	assert_int_equal(mt_exist(t, "u"), 1);
	clear_want(t, CB, "", KEYS("u"), NONE); /* exist leased it */
	t->now += 20000;
	clear_want(t, CB, "", KEYS("u"), KEYS("u"));
	clear_want(t, CA, "", KEYS("l", "x"), KEYS("l"));
	assert_int_equal(mt_put_end(t, CA, "p"), MC_OK);
	clear_want(t, CA, "", KEYS("p"), KEYS("p"));
	x = mt_metrics(t);
	assert_int_equal(x.master_batch_replica_clear.requests, 6);
	assert_int_equal(x.master_batch_replica_clear.items, 2 + 8 + 1 + 1 + 2 + 1);
	assert_int_equal(x.master_batch_replica_clear.failed_items, 2 + 6 + 1 + 0 + 1 + 0);

	/* by segment: only the replicas there; the object goes with its last */
	assert_int_equal(mt_put_start_cfg(t, CA, "", "two", 100, "", &two, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_int_equal(mt_put_end(t, CA, "two"), MC_OK);
	clear_want(t, CA, "nowhere:1", KEYS("two"), NONE);
	clear_want(t, CA, "b:1", KEYS("two"), KEYS("two"));
	assert_int_equal(mt_get(t, "two"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr, "a:1", 3);
	t->now += 20000;
	clear_want(t, CA, "b:1", KEYS("two"), NONE);
	clear_want(t, CA, "a:1", KEYS("two"), KEYS("two"));
	assert_int_equal(mt_get(t, "two"), MC_ERR_OBJECT_NOT_FOUND);

	/* a writer without segments keeps its identity while it has objects */
	mt_put_ok(t, CC, "c", 100);
	mc_master_tick(t->m, t->now);
	clear_want(t, CC, "", KEYS("c"), KEYS("c"));
	clear_want(t, CB, "", KEYS("y"), KEYS("y"));
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	assert_int_equal(mt_metrics(t).key_count, 0);
	mt_free(t);
}

static bool collect_key(void *arg, const char *key, size_t len)
{
	int *n = arg;

	(void)key;
	(void)len;
	(*n)++;
	return true;
}

static void test_regex_and_queries(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_regex_req rq = {mc_proto_str_c(""), mc_proto_str_c("^layer[0-9]+$")};
	struct mc_store_remove_regex_req rr = {mc_proto_str_c(""), mc_proto_str_c("ay"), false};
	struct mc_buf out;
	int n = 0;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	mt_put_ok(t, CA, "layer1", 10);
	mt_put_ok(t, CA, "layer22", 10);
	mt_put_ok(t, CA, "layerX", 10);
	mt_put_ok(t, CA, "other", 10);
	assert_int_equal(mt_put_start(t, CA, "layer3", 10), MC_OK); /* in flight: not listed */

	assert_int_equal(mt_call(t, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq), MC_OK);
	assert_int_equal(t->resp.body.regex_replica_list.n_items, 2);
	assert_int_equal(t->resp.body.regex_replica_list.items[0].list.n_replicas, 1);
	/* leased now */
	assert_int_equal(mt_rm(t, "layer1", false), MC_ERR_OBJECT_HAS_LEASE);
	rq.pattern = mc_proto_str_c("([a-z");
	assert_int_equal(mt_call(t, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "([a-z"));
	rr.pattern = mc_proto_str_c("*(");
	assert_int_equal(mt_call(t, MC_STORE_REMOVE_BY_REGEX, &rr), MC_ERR_INVALID_PARAMS);

	/* search semantics; leased and in-flight ones are skipped */
	rr.pattern = mc_proto_str_c("ay");
	assert_int_equal(mt_call(t, MC_STORE_REMOVE_BY_REGEX, &rr), MC_OK);
	assert_int_equal(t->resp.body.count_resp.count, 1); /* layerX */

	/* admin queries */
	mc_master_foreach_key(t->m, NULL, collect_key, &n);
	assert_int_equal(n, 3);
	mc_buf_init(&out);
	assert_int_equal(mc_master_query_replicas(t->m, NULL, "other", 5, false, t->now, &out),
			 MC_OK);
	{
		struct mc_store_replica_list l;

		assert_int_equal(mc_store_payload_decode(MC_STORE_GET_REPLICA_LIST, true, out.data,
							 out.len, &l),
				 MC_OK);
		assert_int_equal(l.n_replicas, 1);
		assert_int_equal(l.replicas[0].size, 10);
		mc_store_replica_list_release(&l);
	}
	assert_int_equal(mt_rm(t, "other", false), MC_OK); /* no lease from the read-only query */
	assert_int_equal(mc_master_query_replicas(t->m, "", "layer3", 6, true, t->now, &out),
			 MC_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(mc_master_query_replicas(t->m, "", "gone", 4, true, t->now, &out),
			 MC_ERR_OBJECT_NOT_FOUND);
	mc_buf_reset(&out);
	assert_int_equal(mc_master_query_replicas(t->m, "", "layer22", 7, true, t->now, &out),
			 MC_OK);
	mc_buf_release(&out);

	/* RemoveAll skips leased (unless forced) and in-flight objects */
	t->now += 5000;
	assert_int_equal(mt_get(t, "layer22"), MC_OK);
	assert_int_equal(mc_master_remove_all(t->m, NULL, false, t->now), 0);
	assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), 2);
	assert_int_equal(mt_metrics(t).key_count, 1); /* layer3, in flight */
	{
		struct mc_master_metrics x = mt_metrics(t);

		assert_int_equal(x.master_get_replica_list_by_regex.requests, 2);
		assert_int_equal(x.master_get_replica_list_by_regex.failures, 1);
		assert_int_equal(x.master_remove_by_regex.requests, 2);
		assert_int_equal(x.master_remove_all.requests, 2);
	}
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_and_hello),
		cmocka_unit_test(test_put_get_exist),
		cmocka_unit_test(test_end_revoke_rules),
		cmocka_unit_test(test_lease),
		cmocka_unit_test(test_zombie_preempt_release),
		cmocka_unit_test(test_upsert),
		cmocka_unit_test(test_full_pool_and_eviction),
		cmocka_unit_test(test_eviction_after_alloc_failure_only),
		cmocka_unit_test(test_no_eviction_after_nomem),
		cmocka_unit_test(test_pins),
		cmocka_unit_test(test_groups),
		cmocka_unit_test(test_tenants),
		cmocka_unit_test(test_batches),
		cmocka_unit_test(test_batch_replica_clear),
		cmocka_unit_test(test_regex_and_queries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

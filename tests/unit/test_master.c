/*
 * tests/unit/test_master.c - the master's object model (master/master.h),
 * driven with explicit time.
 *
 * Every request goes through the real codec both ways: the test encodes
 * it with mc_store_request_encode, decodes it with mc_store_msg_decode,
 * hands it to mc_master_handle and decodes the response frame, so what is
 * checked is what a client would see.  No test sleeps: time is the
 * now_ms argument.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master/master.h"
#include "mooncake/status.h"
#include "store/proto.h"
#include "support.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

struct t {
	struct mc_master *m;
	uint64_t now;
	struct mc_store_msg resp; /* last response, decoded */
	bool have_resp;
	char err[512];
};

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2}, CC = {3, 3};
static const struct mc_store_uuid SA = {10, 1}, SB = {20, 2}, SC = {30, 3};

static struct t *t_new_cfg(const struct mc_master_config *cfg)
{
	struct t *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(mc_master_new(cfg, &t->m), MC_OK);
	t->now = 1000000;
	return t;
}

/* Defaults, except that clients never expire unless a test asks. */
static void cfg_init(struct mc_master_config *cfg)
{
	mc_master_config_defaults(cfg);
	cfg->client_ttl_ms = 1000000000000ull;
}

static struct t *t_new(void)
{
	struct mc_master_config cfg;

	cfg_init(&cfg);
	return t_new_cfg(&cfg);
}

static struct t *t_new_liveness(void)
{
	struct mc_master_config cfg;

	mc_master_config_defaults(&cfg);
	return t_new_cfg(&cfg);
}

static void t_free(struct t *t)
{
	if (t->have_resp)
		mc_store_msg_release(&t->resp);
	mc_master_free(t->m);
	free(t);
}

/* Encode, decode, handle, decode the answer.  Returns the response status. */
static mc_status call(struct t *t, uint16_t type, const void *body)
{
	struct mc_buf b, out;
	struct mc_store_msg req;
	mc_status st;

	mc_buf_init(&b);
	mc_buf_init(&out);
	assert_int_equal(mc_store_request_encode(&b, type, 42, body), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MC_PROTO_MAX_PAYLOAD, &req), MC_OK);
	st = mc_master_handle(t->m, &req, t->now, &out);
	mc_store_msg_release(&req);
	if (t->have_resp)
		mc_store_msg_release(&t->resp);
	t->have_resp = false;
	assert_int_equal(mc_store_msg_decode(out.data, out.len, MC_PROTO_MAX_PAYLOAD, &t->resp),
			 MC_OK);
	t->have_resp = true;
	assert_int_equal(t->resp.hdr.req_id, 42);
	assert_int_equal(t->resp.hdr.type, type);
	assert_true(t->resp.hdr.flags & MC_PROTO_F_RESPONSE);
	assert_int_equal(t->resp.hdr.status, st);
	t->err[0] = '\0';
	if (st != MC_OK) {
		snprintf(t->err, sizeof(t->err), "%.*s", (int)t->resp.error.len,
			 t->resp.error.ptr ? t->resp.error.ptr : "");
		assert_true(t->resp.error.len > 0); /* every error names its cause */
	}
	mc_buf_release(&b);
	mc_buf_release(&out);
	return st;
}

static struct mc_store_segment seg(struct mc_store_uuid id, const char *name, uint64_t base,
				   uint64_t size)
{
	struct mc_store_segment s = {
		.id = id,
		.name = mc_proto_str_c(name),
		.base = base,
		.size = size,
		.te_endpoint = mc_proto_str_c(name),
		.protocol = mc_proto_str_c("tcp"),
		.host_id = mc_proto_str_c("h"),
	};
	return s;
}

static mc_status mount(struct t *t, struct mc_store_uuid client, struct mc_store_uuid id,
		       const char *name, uint64_t base, uint64_t size)
{
	struct mc_store_mount_req r = {client, seg(id, name, base, size)};

	return call(t, MC_STORE_MOUNT_SEGMENT, &r);
}

static struct mc_store_replicate_config cfg1(void)
{
	struct mc_store_replicate_config c = {.replica_num = 1};
	return c;
}

static mc_status put_start_cfg(struct t *t, struct mc_store_uuid client, const char *tenant,
			       const char *key, uint64_t len, const char *group,
			       const struct mc_store_replicate_config *cfg, bool upsert)
{
	struct mc_store_put_start_req r = {
		.client_id = client,
		.tenant = mc_proto_str_c(tenant),
		.key = mc_proto_str_c(key),
		.value_len = len,
		.group_id = mc_proto_str_c(group),
		.config = *cfg,
	};
	return call(t, upsert ? MC_STORE_UPSERT_START : MC_STORE_PUT_START, &r);
}

static mc_status put_start(struct t *t, struct mc_store_uuid client, const char *key, uint64_t len)
{
	struct mc_store_replicate_config c = cfg1();
	return put_start_cfg(t, client, "", key, len, "", &c, false);
}

static mc_status put_end_t(struct t *t, struct mc_store_uuid client, const char *tenant,
			   const char *key, bool upsert)
{
	struct mc_store_put_end_req r = {
		.client_id = client,
		.tenant = mc_proto_str_c(tenant),
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
	};
	return call(t, upsert ? MC_STORE_UPSERT_END : MC_STORE_PUT_END, &r);
}

static mc_status put_end(struct t *t, struct mc_store_uuid client, const char *key)
{
	return put_end_t(t, client, "", key, false);
}

static mc_status revoke(struct t *t, struct mc_store_uuid client, const char *key)
{
	struct mc_store_put_revoke_req r = {
		.client_id = client,
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
	};
	return call(t, MC_STORE_PUT_REVOKE, &r);
}

static void put_ok(struct t *t, struct mc_store_uuid client, const char *key, uint64_t len)
{
	assert_int_equal(put_start(t, client, key, len), MC_OK);
	assert_int_equal(put_end(t, client, key), MC_OK);
}

static mc_status get_t(struct t *t, const char *tenant, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(tenant), mc_proto_str_c(key)};
	return call(t, MC_STORE_GET_REPLICA_LIST, &r);
}

static mc_status get(struct t *t, const char *key)
{
	return get_t(t, "", key);
}

static int exist(struct t *t, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(""), mc_proto_str_c(key)};
	mc_status st = call(t, MC_STORE_EXIST_KEY, &r);

	return st != MC_OK ? st : t->resp.body.exist_resp.exists;
}

static mc_status rm(struct t *t, const char *key, bool force)
{
	struct mc_store_remove_req r = {mc_proto_str_c(""), mc_proto_str_c(key), force};
	return call(t, MC_STORE_REMOVE, &r);
}

static mc_status ping(struct t *t, struct mc_store_uuid client)
{
	struct mc_store_client_req r = {client};
	mc_status st = call(t, MC_STORE_PING, &r);

	assert_int_equal(st, MC_OK);
	return t->resp.body.ping_resp.client_status;
}

static struct mc_master_metrics metrics(struct t *t)
{
	struct mc_master_metrics x;

	mc_master_metrics(t->m, &x);
	return x;
}

static const struct mc_store_replica *first_replica_start(struct t *t)
{
	assert_true(t->resp.body.put_start_resp.n_replicas >= 1);
	return &t->resp.body.put_start_resp.replicas[0];
}

/* ------------------------------------------------------------------------ */

static void test_config_and_hello(void **state)
{
	struct mc_master_config cfg;
	struct mc_master *m;
	struct t *t;
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
	t = t_new_cfg(&cfg);
	assert_int_equal(call(t, MC_STORE_SERVICE_READY, &h), MC_OK);
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
		static const uint16_t gaps[] = {0, 7, MC_STORE_BATCH_REPLICA_CLEAR + 1};
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
	t_free(t);
}

static void test_ping_mount_remount(void **state)
{
	struct t *t = t_new_liveness();
	struct mc_store_remount_req rr = {CA, 0, NULL};
	struct mc_store_segment segs[2];

	(void)state;
	assert_int_equal(ping(t, CA), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(metrics(t).active_clients, 1);

	/* bad segments */
	assert_int_equal(mount(t, CB, SB, "", 0x1000, MIB), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x1000, 0), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mount(t, CB, SB, "b:1", UINT64_MAX - 100, MIB), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x1000, 64), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "b:1"));

	/* mount is idempotent by id and makes the client alive */
	assert_int_equal(mount(t, CB, SB, "b:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x100000, MIB), MC_OK);
	assert_int_equal(metrics(t).total_capacity_bytes, MIB);
	assert_int_equal(ping(t, CB), MC_STORE_CLIENT_OK);
	assert_int_equal(metrics(t).active_clients, 2);

	/* silence past client_ttl: expired, NEED_REMOUNT, segment gone */
	put_ok(t, CA, "k", 100);
	t->now += 5000;
	assert_int_equal(ping(t, CA), MC_STORE_CLIENT_OK);
	t->now += 6000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(ping(t, CB), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(metrics(t).total_capacity_bytes, 0);
	assert_int_equal(get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(metrics(t).key_count, 0);

	/* remount with all segments (idempotent) brings it back */
	segs[0] = seg(SB, "b:1", 0x100000, MIB);
	segs[1] = seg(SC, "b:1", 0x900000, MIB);
	rr.client_id = CB;
	rr.n_segments = 2;
	rr.segments = segs;
	assert_int_equal(call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(ping(t, CB), MC_STORE_CLIENT_OK);
	assert_int_equal(metrics(t).total_capacity_bytes, 2 * MIB);
	put_ok(t, CA, "k", 100);
	assert_int_equal(get(t, "k"), MC_OK);

	{
		struct mc_master_metrics x = metrics(t);

		assert_int_equal(x.master_ping.requests, 7);
		assert_int_equal(x.master_mount_segment.requests, 6);
		assert_int_equal(x.master_mount_segment.failures, 4);
		assert_int_equal(x.master_remount_segment.requests, 3);
	}
	t_free(t);
}

/* issue 11: a mount must not claim more than a host could have */
static void test_absurd_segments_refused(void **state)
{
	struct mc_master_config cfg;
	struct t *t = t_new();
	struct mc_store_segment bad = seg(SC, "c:1", 0x7f0000000000ull, 8ull << 60);
	struct mc_store_remount_req rr = {CB, 1, &bad};
	const uint64_t base = 0x7f0000000000ull;

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", base, 8ull << 60), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "larger than max_segment_size"));
	assert_int_equal(mount(t, CB, SB, "b:1", base, MC_MASTER_MAX_SEGMENT_SIZE + 1),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mount(t, CB, SB, "b:1", (1ull << 57) - MIB, 2 * MIB),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "user-space"));
	assert_int_equal(call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_ERR_INVALID_PARAMS);
	assert_int_equal(metrics(t).total_capacity_bytes, 0);
	/* the largest allowed, ending right at the top of user space, is fine */
	assert_int_equal(mount(t, CB, SB, "b:1", (1ull << 57) - MC_MASTER_MAX_SEGMENT_SIZE,
			       MC_MASTER_MAX_SEGMENT_SIZE),
			 MC_OK);
	assert_int_equal(metrics(t).total_capacity_bytes, MC_MASTER_MAX_SEGMENT_SIZE);
	t_free(t);

	/* the cap is a setting */
	cfg_init(&cfg);
	cfg.max_segment_size = 4 * MIB;
	t = t_new_cfg(&cfg);
	assert_int_equal(mount(t, CB, SB, "b:1", base, 8 * MIB), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mount(t, CB, SB, "b:1", base, 4 * MIB), MC_OK);
	t_free(t);
}

static void test_put_get_exist(void **state)
{
	struct t *t = t_new();
	const struct mc_store_replica *r;
	struct mc_store_replicate_config c = cfg1();
	uint64_t addr;

	(void)state;
	assert_int_equal(put_start(t, CA, "k1", 1000), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);

	assert_int_equal(put_start(t, CA, "k1", 1000), MC_OK);
	r = first_replica_start(t);
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
	assert_int_equal(get(t, "k1"), MC_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(exist(t, "k1"), 0);
	assert_int_equal(put_start(t, CB, "k1", 1000), MC_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(put_end(t, CA, "k1"), MC_OK);
	assert_int_equal(get(t, "k1"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.lease_ttl_ms, 10000);
	assert_false(t->resp.body.replica_list.checksum.present);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].status, MC_STORE_REPLICA_COMPLETE);
	assert_int_equal(t->resp.body.replica_list.replicas[0].address, addr);
	assert_int_equal(exist(t, "k1"), 1);
	assert_int_equal(exist(t, "nope"), 0);
	assert_int_equal(exist(t, ""), MC_ERR_INVALID_PARAMS);
	assert_int_equal(get(t, "nope"), MC_ERR_OBJECT_NOT_FOUND);
	assert_non_null(strstr(t->err, "nope"));
	assert_int_equal(get(t, ""), MC_ERR_INVALID_PARAMS);

	/* insert-if-absent */
	assert_int_equal(put_start(t, CA, "k1", 1000), MC_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(put_start(t, CA, "k1", 5), MC_ERR_OBJECT_ALREADY_EXISTS);

	/* checksum is kept and returned */
	{
		struct mc_store_put_end_req e = {.client_id = CA,
						 .replica_type = MC_STORE_REPLICA_MEMORY,
						 .key = mc_proto_str_c("ck"),
						 .checksum = {true, 0xabcdef}};

		assert_int_equal(put_start(t, CA, "ck", 10), MC_OK);
		assert_int_equal(call(t, MC_STORE_PUT_END, &e), MC_OK);
		assert_int_equal(get(t, "ck"), MC_OK);
		assert_true(t->resp.body.replica_list.checksum.present);
		assert_int_equal(t->resp.body.replica_list.checksum.value, 0xabcdef);
	}

	/* validation (spec 2.5) */
	assert_int_equal(put_start(t, CA, "", 10), MC_ERR_INVALID_PARAMS);
	assert_int_equal(put_start(t, CA, "z", 0), MC_ERR_INVALID_PARAMS);
	c.replica_num = 0;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_INVALID_PARAMS);
	c = cfg1();
	c.nof_replica_num = 1;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_INVALID_PARAMS);
	c = cfg1();
	c.dfs_replica_num = 1;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_NOT_SUPPORTED);
	c.dfs_replica_num = 2;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_INVALID_PARAMS);
	c = cfg1();
	c.soft_pin_ttl_ms.present = true;
	c.soft_pin_ttl_ms.value = 10;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_INVALID_PARAMS);
	c.soft_pin_action = MC_STORE_SOFT_PIN_DISABLE;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_INVALID_PARAMS);
	c.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
	c.soft_pin_ttl_ms.value = 86400001;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_INVALID_PARAMS);
	c.soft_pin_action = 9;
	c.soft_pin_ttl_ms.present = false;
	assert_int_equal(put_start_cfg(t, CA, "", "z", 10, "", &c, false), MC_ERR_INVALID_PARAMS);
	assert_int_equal(get(t, "z"), MC_ERR_OBJECT_NOT_FOUND);
	/* bigger than the segment, or than anything */
	assert_int_equal(put_start(t, CA, "huge", 2 * MIB), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(put_start(t, CA, "huge", 1ull << 47), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(put_start(t, CA, "huge", UINT64_MAX), MC_ERR_INVALID_PARAMS);
	assert_int_equal(put_start(t, CA, "huge", 1ull << 48), MC_ERR_INVALID_PARAMS);

	{
		struct mc_master_metrics x = metrics(t);

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
	t_free(t);
}

static void test_end_revoke_rules(void **state)
{
	struct t *t = t_new();
	struct mc_store_put_end_req e = {.client_id = CA, .key = mc_proto_str_c("k")};

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	assert_int_equal(put_start(t, CA, "k", 300), MC_OK);
	assert_int_equal(metrics(t).allocated_bytes, 300);
	assert_int_equal(put_end(t, CB, "k"), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_end(t, CC, "k"), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(revoke(t, CB, "k"), MC_ERR_ILLEGAL_CLIENT);
	e.replica_type = 77;
	assert_int_equal(call(t, MC_STORE_PUT_END, &e), MC_ERR_INVALID_PARAMS);
	e.replica_type = MC_STORE_REPLICA_NOF_SSD;
	assert_int_equal(call(t, MC_STORE_PUT_END, &e), MC_ERR_INVALID_WRITE);
	assert_int_equal(put_end(t, CA, "missing"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(revoke(t, CA, "k"), MC_OK);
	assert_int_equal(metrics(t).allocated_bytes, 0);
	assert_int_equal(get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(revoke(t, CA, "k"), MC_ERR_OBJECT_NOT_FOUND);

	put_ok(t, CA, "k", 300);
	assert_int_equal(put_end(t, CA, "k"), MC_OK); /* idempotent */
	assert_int_equal(put_end(t, CB, "k"), MC_OK);
	assert_int_equal(revoke(t, CA, "k"), MC_ERR_INVALID_WRITE);
	{
		struct mc_master_metrics x = metrics(t);

		assert_int_equal(x.master_put_revoke.requests, 4);
		assert_int_equal(x.master_put_revoke.failures, 3);
	}
	t_free(t);
}

static void test_lease(void **state)
{
	struct t *t = t_new();

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	assert_int_equal(put_start(t, CA, "p", 10), MC_OK);
	assert_int_equal(rm(t, "p", true), MC_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(put_end(t, CA, "p"), MC_OK);
	/* PutEnd gives no protection */
	assert_int_equal(rm(t, "p", false), MC_OK);
	assert_int_equal(rm(t, "p", false), MC_ERR_OBJECT_NOT_FOUND);

	put_ok(t, CA, "k", 10);
	assert_int_equal(get(t, "k"), MC_OK);
	assert_int_equal(rm(t, "k", false), MC_ERR_OBJECT_HAS_LEASE);
	t->now += 9999;
	assert_int_equal(rm(t, "k", false), MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(exist(t, "k"), 1); /* exist extends it */
	t->now += 9999;
	assert_int_equal(rm(t, "k", false), MC_ERR_OBJECT_HAS_LEASE);
	t->now += 1;
	assert_int_equal(rm(t, "k", false), MC_OK);

	put_ok(t, CA, "f", 10);
	assert_int_equal(get(t, "f"), MC_OK);
	assert_int_equal(rm(t, "f", true), MC_OK);
	assert_int_equal(metrics(t).allocated_bytes, 0);
	t_free(t);
}

static void test_zombie_preempt_release(void **state)
{
	struct t *t = t_new();
	uint64_t t0;

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	t0 = t->now;
	assert_int_equal(put_start(t, CA, "z", 500), MC_OK);
	t->now = t0 + 29999;
	assert_int_equal(put_start(t, CB, "z", 500), MC_ERR_OBJECT_ALREADY_EXISTS);
	t->now = t0 + 30000;
	assert_int_equal(put_start(t, CB, "z", 700), MC_OK);
	{
		struct mc_master_metrics x = metrics(t);

		assert_int_equal(x.put_start_discard_cnt, 1);
		assert_int_equal(x.discarded_staging_bytes, 500);
		assert_int_equal(x.allocated_bytes, 1200); /* parked space is still taken */
	}
	assert_int_equal(put_end(t, CA, "z"), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_end(t, CB, "z"), MC_OK);
	mc_master_tick(t->m, t0 + 30000 + 599999);
	assert_int_equal(metrics(t).discarded_staging_bytes, 500);
	mc_master_tick(t->m, t0 + 30000 + 600000);
	{
		struct mc_master_metrics x = metrics(t);

		assert_int_equal(x.discarded_staging_bytes, 0);
		assert_int_equal(x.put_start_release_cnt, 1);
		assert_int_equal(x.allocated_bytes, 700);
	}

	/* a put never ended nor pre-empted is reclaimed after the release timeout */
	t->now = t0 + 700000;
	assert_int_equal(put_start(t, CA, "y", 100), MC_OK);
	mc_master_tick(t->m, t->now + 600000);
	assert_int_equal(get(t, "y"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(metrics(t).allocated_bytes, 700);
	t_free(t);
}

static void test_upsert(void **state)
{
	struct t *t = t_new();
	struct mc_store_replicate_config c = cfg1();
	uint64_t a1, a2;

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0x10000, MIB), MC_OK);
	/* A: absent = put */
	assert_int_equal(put_start_cfg(t, CA, "", "u", 100, "", &c, true), MC_OK);
	a1 = first_replica_start(t)->address;
	assert_int_equal(put_end_t(t, CA, "", "u", true), MC_OK);
	assert_int_equal(get(t, "u"), MC_OK);

	/* B: same size, same blocks, unreadable until UpsertEnd (leases not checked) */
	assert_int_equal(put_start_cfg(t, CB, "", "u", 100, "", &c, true), MC_OK);
	assert_int_equal(first_replica_start(t)->address, a1);
	assert_int_equal(first_replica_start(t)->status, MC_STORE_REPLICA_PROCESSING);
	assert_int_equal(get(t, "u"), MC_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(put_end_t(t, CA, "", "u", true), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_end_t(t, CB, "", "u", true), MC_OK);
	assert_int_equal(get(t, "u"), MC_OK);
	assert_int_equal(metrics(t).discarded_staging_bytes, 0);

	/* C: other size: new blocks, old ones parked */
	assert_int_equal(put_start_cfg(t, CA, "", "u", 200, "", &c, true), MC_OK);
	a2 = first_replica_start(t)->address;
	assert_true(a2 != a1);
	assert_int_equal(first_replica_start(t)->size, 200);
	assert_int_equal(metrics(t).discarded_staging_bytes, 100);
	assert_int_equal(put_end_t(t, CA, "", "u", true), MC_OK);
	assert_int_equal(get(t, "u"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 200);

	/* an in-flight upsert is pre-empted at once */
	assert_int_equal(put_start_cfg(t, CA, "", "u", 300, "", &c, true), MC_OK);
	assert_int_equal(put_start_cfg(t, CB, "", "u", 400, "", &c, true), MC_OK);
	assert_int_equal(put_end_t(t, CA, "", "u", true), MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_end_t(t, CB, "", "u", true), MC_OK);
	assert_int_equal(get(t, "u"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 400);

	/* UpsertRevoke drops the object */
	assert_int_equal(put_start_cfg(t, CA, "", "u", 400, "", &c, true), MC_OK);
	{
		struct mc_store_put_revoke_req r = {.client_id = CA,
						    .replica_type = MC_STORE_REPLICA_ALL,
						    .key = mc_proto_str_c("u")};

		assert_int_equal(call(t, MC_STORE_UPSERT_REVOKE, &r), MC_OK);
	}
	assert_int_equal(get(t, "u"), MC_ERR_OBJECT_NOT_FOUND);
	/* but put (not upsert) still refuses an existing key */
	put_ok(t, CA, "w", 10);
	assert_int_equal(put_start(t, CA, "w", 20), MC_ERR_OBJECT_ALREADY_EXISTS);
	t_free(t);
}

/* ---- eviction ---- */

/* 64 KiB objects on a 1 MiB segment: 16 fit. */
#define OBJ (64 * KIB)

static void fill(struct t *t, const char *prefix, int n, const struct mc_store_replicate_config *c)
{
	for (int i = 0; i < n; i++) {
		char k[32];

		snprintf(k, sizeof(k), "%s%d", prefix, i);
		assert_int_equal(put_start_cfg(t, CA, "", k, OBJ, "", c, false), MC_OK);
		assert_int_equal(put_end(t, CA, k), MC_OK);
		t->now++;
	}
}

static void test_full_pool_and_eviction(void **state)
{
	struct t *t = t_new();
	struct mc_store_replicate_config c = cfg1();
	struct mc_master_metrics x;

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "o", 14, &c); /* 87.5%: below the watermark */
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).attempted_evictions, 0);
	fill(t, "p", 2, &c); /* full */
	/* the pool is full: -200 at once, and the next tick evicts */
	assert_int_equal(get(t, "o0"), MC_OK); /* leased: never evicted */
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(metrics(t).put_start_alloc_failures, 1);
	mc_master_tick(t->m, t->now);
	x = metrics(t);
	assert_int_equal(x.attempted_evictions, 1);
	assert_int_equal(x.successful_evictions, 1);
	/* used 100% > 90%: target = 0.05 + 0.10 = 0.15 of 16 -> 3 (ceil) */
	assert_int_equal(x.evicted_key_count, 3);
	assert_int_equal(x.evicted_size_bytes, 3 * OBJ);
	assert_int_equal(x.key_count, 13);
	/* oldest lease first: o1, o2, o3 (o0 is leased) */
	assert_int_equal(get(t, "o0"), MC_OK);
	assert_int_equal(get(t, "o1"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "o2"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "o3"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "o4"), MC_OK);
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_OK);
	t_free(t);
}

static void test_eviction_after_alloc_failure_only(void **state)
{
	struct mc_master_config cfg;
	struct t *t;
	struct mc_store_replicate_config c = cfg1();

	(void)state;
	cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	t = t_new_cfg(&cfg);
	assert_int_equal(mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "o", 16, &c);
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).attempted_evictions, 0);
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).evicted_key_count, 1); /* ceil(0.05 * 16) */
	assert_int_equal(get(t, "o0"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_OK);
	/* in-flight objects are never evicted */
	assert_int_equal(put_start(t, CA, "r", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(put_end(t, CA, "q"), MC_OK);
	t_free(t);
}

static void test_pins(void **state)
{
	struct mc_master_config cfg;
	struct t *t;
	struct mc_store_replicate_config hard = cfg1(), soft = cfg1(), plain = cfg1();
	struct mc_master_metrics x;

	(void)state;
	cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	cfg.eviction_ratio = 1.0; /* evict everything evictable */
	t = t_new_cfg(&cfg);
	hard.with_hard_pin = true;
	soft.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
	soft.soft_pin_ttl_ms.present = true;
	soft.soft_pin_ttl_ms.value = 60000;
	assert_int_equal(mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "h", 4, &hard);
	fill(t, "s", 8, &soft);
	fill(t, "n", 4, &plain);
	x = metrics(t);
	assert_int_equal(x.soft_pin_key_count, 8);

	/* pass 1 takes the plain ones, below the lower bound (half of 16), so
	 * pass 2 takes the soft-pinned ones; hard-pinned never */
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	x = metrics(t);
	assert_int_equal(x.evicted_key_count, 12);
	assert_int_equal(x.soft_pin_key_count, 0);
	for (int i = 0; i < 4; i++) {
		char k[8];

		snprintf(k, sizeof(k), "h%d", i);
		assert_int_equal(get(t, k), MC_OK);
	}
	/* the hard pin yields to an explicit remove */
	t->now += 20000;
	assert_int_equal(rm(t, "h0", false), MC_OK);
	t_free(t);

	/* soft pins kept when not allowed; and they expire */
	cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	cfg.eviction_ratio = 1.0;
	cfg.allow_evict_soft_pinned_objects = false;
	t = t_new_cfg(&cfg);
	assert_int_equal(mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	fill(t, "s", 4, &soft);
	fill(t, "n", 12, &plain);
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	x = metrics(t);
	assert_int_equal(x.evicted_key_count, 12);
	assert_int_equal(x.key_count, 4);
	assert_int_equal(x.soft_pin_key_count, 4);
	fill(t, "m", 12, &plain);
	t->now += 60000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).soft_pin_key_count, 0);
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).key_count, 0); /* pins expired: ordinary cache */

	/* ENABLE with TTL 0 = no pin; the default TTL applies without a TTL */
	soft.soft_pin_ttl_ms.value = 0;
	fill(t, "z", 1, &soft);
	assert_int_equal(metrics(t).soft_pin_key_count, 0);
	soft.soft_pin_ttl_ms.present = false;
	fill(t, "d", 1, &soft);
	assert_int_equal(metrics(t).soft_pin_key_count, 1);
	t->now += 1800000 - 2; /* fill() stepped the clock once after PutEnd */
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).soft_pin_key_count, 1);
	/* upsert PRESERVE keeps the pin, DISABLE drops it */
	assert_int_equal(put_start_cfg(t, CA, "", "d0", OBJ, "", &plain, true), MC_OK);
	assert_int_equal(put_end_t(t, CA, "", "d0", true), MC_OK);
	assert_int_equal(metrics(t).soft_pin_key_count, 1);
	plain.soft_pin_action = MC_STORE_SOFT_PIN_DISABLE;
	assert_int_equal(put_start_cfg(t, CA, "", "d0", OBJ, "", &plain, true), MC_OK);
	assert_int_equal(put_end_t(t, CA, "", "d0", true), MC_OK);
	assert_int_equal(metrics(t).soft_pin_key_count, 0);
	t_free(t);
}

static void test_groups(void **state)
{
	struct mc_master_config cfg;
	struct t *t;
	struct mc_store_replicate_config c = cfg1();

	(void)state;
	cfg_init(&cfg);
	cfg.eviction_high_watermark_ratio = 1.0;
	cfg.eviction_ratio = 1.0;
	t = t_new_cfg(&cfg);
	assert_int_equal(mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	for (int i = 0; i < 3; i++) {
		char k[8];

		snprintf(k, sizeof(k), "g%d", i);
		assert_int_equal(put_start_cfg(t, CA, "", k, OBJ, "grp", &c, false), MC_OK);
		assert_int_equal(put_end(t, CA, k), MC_OK);
	}
	fill(t, "n", 13, &c);
	/* a read of one member leases the whole group */
	assert_int_equal(get(t, "g0"), MC_OK);
	assert_int_equal(rm(t, "g2", false), MC_ERR_OBJECT_HAS_LEASE);
	/* eviction: the group is skipped while a member holds a lease */
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).key_count, 3);
	assert_int_equal(get(t, "g1"), MC_OK);
	/* the same group name in a new put joins it (tenant-scoped) */
	t->now += 20000;
	fill(t, "m", 12, &c);
	assert_int_equal(put_start_cfg(t, CA, "", "g3", OBJ, "grp", &c, false), MC_OK);
	assert_int_equal(put_end(t, CA, "g3"), MC_OK);
	/* leases gone: evicting any member takes the whole group */
	assert_int_equal(put_start(t, CA, "q", OBJ), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(metrics(t).key_count, 0);
	t_free(t);
}

static void test_tenants(void **state)
{
	struct mc_master_config cfg;
	struct t *t;
	struct mc_store_replicate_config c = cfg1();

	(void)state;
	/* off: every tenant is the default one */
	t = t_new();
	assert_int_equal(mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	assert_int_equal(put_start_cfg(t, CA, "ta", "k", 10, "", &c, false), MC_OK);
	assert_int_equal(put_end_t(t, CA, "ta", "k", false), MC_OK);
	assert_int_equal(get_t(t, "tb", "k"), MC_OK);
	assert_int_equal(get_t(t, "", "k"), MC_OK);
	t_free(t);

	/* on: separate namespaces */
	cfg_init(&cfg);
	cfg.enable_multi_tenants = true;
	t = t_new_cfg(&cfg);
	assert_int_equal(mount(t, CB, SB, "b:1", 0, MIB), MC_OK);
	assert_int_equal(put_start_cfg(t, CA, "ta", "k", 10, "", &c, false), MC_OK);
	assert_int_equal(put_end_t(t, CA, "ta", "k", false), MC_OK);
	assert_int_equal(get_t(t, "tb", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_t(t, "", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_t(t, "default", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_t(t, "ta", "k"), MC_OK);
	assert_int_equal(put_start_cfg(t, CA, "tb", "k", 20, "", &c, false), MC_OK);
	assert_int_equal(put_end_t(t, CA, "tb", "k", false), MC_OK);
	assert_int_equal(put_start_cfg(t, CA, "", "k", 30, "", &c, false), MC_OK);
	assert_int_equal(put_end_t(t, CA, "default", "k", false), MC_OK);
	assert_int_equal(get_t(t, "tb", "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 20);
	assert_int_equal(get_t(t, "default", "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 30);
	t->now += 20000;
	assert_int_equal(mc_master_remove_all(t->m, "ta", false, t->now), 1);
	assert_int_equal(mc_master_remove_all(t->m, "nobody", false, t->now), 0);
	assert_int_equal(get_t(t, "ta", "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_t(t, "tb", "k"), MC_OK);
	t->now += 20000;
	{
		struct mc_store_remove_all_req r = {mc_proto_str_c(""), false};

		assert_int_equal(call(t, MC_STORE_REMOVE_ALL, &r), MC_OK);
		assert_int_equal(t->resp.body.count_resp.count, 2);
	}
	t_free(t);
}

static void test_liveness_and_unmount(void **state)
{
	struct t *t = t_new_liveness();
	struct mc_store_replicate_config c = cfg1();
	struct mc_store_remount_req rr = {CA, 0, NULL};

	(void)state;
	assert_int_equal(mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	/* an object on A's segment; A writing an object onto B's segment */
	c.preferred_segment = mc_proto_str_c("a:1");
	assert_int_equal(put_start_cfg(t, CB, "", "onA", 100, "", &c, false), MC_OK);
	assert_memory_equal(first_replica_start(t)->segment_name.ptr, "a:1", 3);
	assert_int_equal(put_end(t, CB, "onA"), MC_OK);
	c.preferred_segment = mc_proto_str_c("b:1");
	assert_int_equal(put_start_cfg(t, CA, "", "byA", 100, "", &c, false), MC_OK);
	assert_memory_equal(first_replica_start(t)->segment_name.ptr, "b:1", 3);
	assert_int_equal(metrics(t).allocated_bytes, 200);

	/* B keeps pinging, A goes silent */
	t->now += 6000;
	assert_int_equal(ping(t, CB), MC_STORE_CLIENT_OK);
	t->now += 5000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(get(t, "onA"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "byA"), MC_ERR_OBJECT_NOT_FOUND);
	{
		struct mc_master_metrics x = metrics(t);

		assert_int_equal(x.allocated_bytes, 0);
		assert_int_equal(x.key_count, 0);
		assert_int_equal(x.active_clients, 1);
		assert_int_equal(x.total_capacity_bytes, MIB);
	}
	assert_int_equal(put_end(t, CA, "byA"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(ping(t, CA), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(ping(t, CA), MC_STORE_CLIENT_OK);

	/* explicit unmount: replicas dead at once, in-flight puts fail at End */
	c.preferred_segment = mc_proto_str_c("b:1");
	assert_int_equal(put_start_cfg(t, CA, "", "w", 100, "", &c, false), MC_OK);
	assert_int_equal(put_start_cfg(t, CA, "", "v", 100, "", &c, false), MC_OK);
	assert_int_equal(put_end(t, CA, "v"), MC_OK);
	{
		struct mc_store_unmount_req u = {CB, SB};

		assert_int_equal(call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
		assert_int_equal(call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK); /* idempotent */
	}
	assert_int_equal(get(t, "v"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(put_end(t, CA, "w"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(metrics(t).key_count, 0);
	assert_int_equal(metrics(t).total_capacity_bytes, 0);
	assert_int_equal(metrics(t).master_unmount_segment.requests, 2);
	t_free(t);
}

static bool count_graceful(void *arg, const struct mc_master_segment_info *s)
{
	assert_int_equal(s->status, MC_SEGMENT_GRACEFULLY_UNMOUNTING);
	assert_string_equal(s->name, "b:1");
	assert_int_equal(s->capacity_bytes, MIB);
	assert_int_equal(s->used_bytes, 100);
	assert_int_equal(s->client_id.first, CB.first);
	(*(int *)arg)++;
	return true;
}

static void test_graceful_unmount(void **state)
{
	struct t *t = t_new();
	struct mc_store_graceful_unmount_req g = {CA, SB, 5000};

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	put_ok(t, CA, "k", 100);
	assert_int_equal(call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &g), MC_ERR_INVALID_PARAMS);
	g.client_id = CB;
	g.segment_id = SC;
	assert_int_equal(call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &g), MC_ERR_SEGMENT_NOT_FOUND);
	g.segment_id = SB;
	assert_int_equal(call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &g), MC_OK);
	/* readable, not allocatable */
	assert_int_equal(get(t, "k"), MC_OK);
	assert_int_equal(put_start(t, CA, "k2", 100), MC_ERR_NO_AVAILABLE_HANDLE);
	{
		int n = 0;

		mc_master_foreach_segment(t->m, count_graceful, &n);
		assert_int_equal(n, 1);
	}
	t->now += 4999;
	assert_int_equal(ping(t, CB), MC_STORE_CLIENT_OK);
	mc_master_tick(t->m, t->now);
	assert_int_equal(get(t, "k"), MC_OK);
	t->now += 1;
	mc_master_tick(t->m, t->now);
	assert_int_equal(get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(metrics(t).total_capacity_bytes, 0);
	t_free(t);
}

static bool seg_order(void *arg, const struct mc_master_segment_info *s)
{
	char *buf = arg;
	size_t n = strlen(buf);

	buf[n] = s->name[0];
	buf[n + 1] = '\0';
	return n + 2 < 16;
}

static void test_multi_replica(void **state)
{
	struct t *t = t_new();
	struct mc_store_replicate_config c = cfg1();
	const struct mc_proto_str prefs[2] = {mc_proto_str_c("zz:9"), mc_proto_str_c("c:1")};

	(void)state;
	assert_int_equal(mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	/* a second segment with the same name: still one target */
	assert_int_equal(mount(t, CB, SC, "b:1", 0x1900000, MIB), MC_OK);
	c.replica_num = 2;
	assert_int_equal(put_start_cfg(t, CA, "", "two", 100, "", &c, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_true(t->resp.body.put_start_resp.replicas[0].segment_name.ptr[0] !=
		    t->resp.body.put_start_resp.replicas[1].segment_name.ptr[0]);
	assert_int_equal(put_end(t, CA, "two"), MC_OK);
	assert_int_equal(get(t, "two"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	/* best effort: 3 wanted, 2 names */
	c.replica_num = 3;
	assert_int_equal(put_start_cfg(t, CA, "", "three", 100, "", &c, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_int_equal(metrics(t).put_start_partial_allocations, 1);
	assert_int_equal(put_end(t, CA, "three"), MC_OK);
	/* preferred list: unknown names dropped */
	c.replica_num = 1;
	c.n_preferred_segments = 2;
	c.preferred_segments = (struct mc_proto_str *)prefs;
	assert_int_equal(mount(t, CC, (struct mc_store_uuid){40, 4}, "c:1", 0x4000000, MIB), MC_OK);
	assert_int_equal(put_start_cfg(t, CA, "", "pref", 100, "", &c, false), MC_OK);
	assert_memory_equal(first_replica_start(t)->segment_name.ptr, "c:1", 3);
	assert_int_equal(put_end(t, CA, "pref"), MC_OK);
	/* same node first */
	{
		struct mc_store_mount_req r = {
			CC, seg((struct mc_store_uuid){50, 5}, "d:1", 0x8000000, MIB)};
		struct mc_store_replicate_config d = cfg1();

		r.segment.host_id = mc_proto_str_c("hostD");
		assert_int_equal(call(t, MC_STORE_MOUNT_SEGMENT, &r), MC_OK);
		d.prefer_alloc_in_same_node = true;
		d.host_id = mc_proto_str_c("hostD");
		for (int i = 0; i < 4; i++) {
			char k[8];

			snprintf(k, sizeof(k), "n%d", i);
			assert_int_equal(put_start_cfg(t, CA, "", k, 8, "", &d, false), MC_OK);
			assert_memory_equal(first_replica_start(t)->segment_name.ptr, "d:1", 3);
			assert_int_equal(revoke(t, CA, k), MC_OK);
		}
	}
	assert_int_equal(metrics(t).allocated_bytes, 500);
	/* unmounting one copy's segment keeps the object readable */
	{
		struct mc_store_unmount_req u = {CA, SA};

		assert_int_equal(call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	assert_int_equal(get(t, "two"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr, "b:1", 3);
	{
		char order[16] = "";

		mc_master_foreach_segment(t->m, seg_order, order);
		assert_string_equal(order, "bbcd"); /* mount order, a:1 gone */
		/* a new mount reuses a:1's slot but comes last */
		assert_int_equal(mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
		order[0] = '\0';
		mc_master_foreach_segment(t->m, seg_order, order);
		assert_string_equal(order, "bbcda");
	}
	t->now += 20000;
	assert_int_equal(rm(t, "two", false), MC_OK);
	assert_int_equal(rm(t, "three", false), MC_OK);
	assert_int_equal(rm(t, "pref", false), MC_OK);
	assert_int_equal(metrics(t).allocated_bytes, 0);
	t_free(t);
}

static void test_batches(void **state)
{
	struct t *t = t_new();
	struct mc_store_put_item items[4] = {
		{mc_proto_str_c("b0"), 10, mc_proto_str_c("")},
		{mc_proto_str_c(""), 10, mc_proto_str_c("")},
		{mc_proto_str_c("b2"), 0, mc_proto_str_c("")},
		{mc_proto_str_c("b3"), 30, mc_proto_str_c("")},
	};
	struct mc_store_batch_put_start_req bs = {
		.client_id = CA, .config = cfg1(), .n_items = 4, .items = items};
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
	struct mc_store_keys_req kr = {mc_proto_str_c(""), 4, keys};
	struct mc_master_metrics x;

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	assert_int_equal(call(t, MC_STORE_BATCH_PUT_START, &bs), MC_OK);
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
	assert_int_equal(call(t, MC_STORE_BATCH_PUT_END, &be), MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.n_items, 3);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[2], MC_ERR_OBJECT_NOT_FOUND);

	assert_int_equal(call(t, MC_STORE_BATCH_EXIST_KEY, &kr), MC_OK);
	{
		const struct mc_store_batch_exist_resp *r = &t->resp.body.batch_exist_resp;

		assert_int_equal(r->n_items, 4);
		assert_true(r->items[0].exists && r->items[1].exists);
		assert_int_equal(r->items[2].status, MC_OK);
		assert_false(r->items[2].exists);
		assert_int_equal(r->items[3].status, MC_ERR_INVALID_PARAMS);
	}
	assert_int_equal(call(t, MC_STORE_BATCH_GET_REPLICA_LIST, &kr), MC_OK);
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

		assert_int_equal(put_start(t, CA, "r0", 5), MC_OK);
		assert_int_equal(call(t, MC_STORE_BATCH_PUT_REVOKE, &br), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_ERR_INVALID_WRITE);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[2],
				 MC_ERR_OBJECT_NOT_FOUND);
		assert_int_equal(call(t, MC_STORE_BATCH_UPSERT_REVOKE, &br), MC_OK);
	}
	/* batch upsert: same size in place, other size moved */
	{
		struct mc_store_put_item up[2] = {{mc_proto_str_c("b0"), 10, mc_proto_str_c("")},
						  {mc_proto_str_c("b3"), 99, mc_proto_str_c("")}};
		struct mc_store_batch_put_start_req us = {
			.client_id = CB, .config = cfg1(), .n_items = 2, .items = up};
		struct mc_store_object_meta um[2] = {{mc_proto_str_c("b0"), {false, 0}},
						     {mc_proto_str_c("b3"), {false, 0}}};
		struct mc_store_batch_put_end_req ue = {.client_id = CB,
							.replica_type = MC_STORE_REPLICA_ALL,
							.n_items = 2,
							.items = um};

		assert_int_equal(call(t, MC_STORE_BATCH_UPSERT_START, &us), MC_OK);
		assert_int_equal(t->resp.body.batch_put_start_resp.items[0].status, MC_OK);
		assert_int_equal(t->resp.body.batch_put_start_resp.items[1].status, MC_OK);
		assert_int_equal(t->resp.body.batch_put_start_resp.items[1].replicas[0].size, 99);
		assert_int_equal(call(t, MC_STORE_BATCH_UPSERT_END, &ue), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_OK);
	}
	/* batch remove: leased ones refused unless forced */
	{
		struct mc_proto_str rk[3] = {mc_proto_str_c("b0"), mc_proto_str_c("b3"),
					     mc_proto_str_c("zz")};
		struct mc_store_batch_remove_req br = {mc_proto_str_c(""), false, 3, rk};

		assert_int_equal(get(t, "b0"), MC_OK);
		assert_int_equal(call(t, MC_STORE_BATCH_REMOVE, &br), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0],
				 MC_ERR_OBJECT_HAS_LEASE);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[2],
				 MC_ERR_OBJECT_NOT_FOUND);
		br.force = true;
		assert_int_equal(call(t, MC_STORE_BATCH_REMOVE, &br), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
	}
	x = metrics(t);
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
	t_free(t);
}

/* BatchReplicaClear of keys (NULL-terminated); returns how many were
 * cleared and checks they are want (NULL-terminated), in order. */
static void clear_want(struct t *t, struct mc_store_uuid client, const char *segment,
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
	assert_int_equal(call(t, MC_STORE_BATCH_REPLICA_CLEAR, &r), MC_OK);
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
	struct t *t = t_new();
	struct mc_store_replicate_config two = cfg1(), soft = cfg1(), one = cfg1();
	struct mc_master_metrics x;

	(void)state;
	assert_int_equal(mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	two.replica_num = 2;
	soft.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
	soft.soft_pin_ttl_ms.present = true;
	soft.soft_pin_ttl_ms.value = 60000;

	put_ok(t, CA, "x", 100);			     /* CA's, no lease: cleared */
	put_ok(t, CB, "y", 100);			     /* CB's: kept */
	assert_int_equal(put_start(t, CA, "p", 100), MC_OK); /* being written: kept */
	put_ok(t, CA, "l", 100);
	assert_int_equal(get(t, "l"), MC_OK); /* leased: kept */
	assert_int_equal(put_start_cfg(t, CA, "", "s", 100, "", &soft, false), MC_OK);
	assert_int_equal(put_end(t, CA, "s"), MC_OK); /* soft-pinned, CA's: cleared */
	put_ok(t, CA, "u", 100);
	assert_int_equal(put_start_cfg(t, CB, "", "u", 100, "", &one, true), MC_OK);
	assert_int_equal(put_end_t(t, CB, "", "u", true), MC_OK); /* upserted: now CB's */

	/* an unknown client wrote nothing */
	clear_want(t, CC, "", KEYS("x", "s"), NONE);
	clear_want(t, CA, "", KEYS("x", "y", "p", "l", "s", "u", "missing", ""), KEYS("x", "s"));
	assert_int_equal(get(t, "x"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "s"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(metrics(t).soft_pin_key_count, 0);
	assert_int_equal(exist(t, "y"), 1);
	assert_int_equal(exist(t, "u"), 1);
	clear_want(t, CB, "", KEYS("u"), NONE); /* exist leased it */
	t->now += 20000;
	clear_want(t, CB, "", KEYS("u"), KEYS("u"));
	clear_want(t, CA, "", KEYS("l", "x"), KEYS("l"));
	assert_int_equal(put_end(t, CA, "p"), MC_OK);
	clear_want(t, CA, "", KEYS("p"), KEYS("p"));
	x = metrics(t);
	assert_int_equal(x.master_batch_replica_clear.requests, 6);
	assert_int_equal(x.master_batch_replica_clear.items, 2 + 8 + 1 + 1 + 2 + 1);
	assert_int_equal(x.master_batch_replica_clear.failed_items, 2 + 6 + 1 + 0 + 1 + 0);

	/* by segment: only the replicas there; the object goes with its last */
	assert_int_equal(put_start_cfg(t, CA, "", "two", 100, "", &two, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_int_equal(put_end(t, CA, "two"), MC_OK);
	clear_want(t, CA, "nowhere:1", KEYS("two"), NONE);
	clear_want(t, CA, "b:1", KEYS("two"), KEYS("two"));
	assert_int_equal(get(t, "two"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr, "a:1", 3);
	t->now += 20000;
	clear_want(t, CA, "b:1", KEYS("two"), NONE);
	clear_want(t, CA, "a:1", KEYS("two"), KEYS("two"));
	assert_int_equal(get(t, "two"), MC_ERR_OBJECT_NOT_FOUND);

	/* a writer without segments keeps its identity while it has objects */
	put_ok(t, CC, "c", 100);
	mc_master_tick(t->m, t->now);
	clear_want(t, CC, "", KEYS("c"), KEYS("c"));
	clear_want(t, CB, "", KEYS("y"), KEYS("y"));
	assert_int_equal(metrics(t).allocated_bytes, 0);
	assert_int_equal(metrics(t).key_count, 0);
	t_free(t);
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
	struct t *t = t_new();
	struct mc_store_regex_req rq = {mc_proto_str_c(""), mc_proto_str_c("^layer[0-9]+$")};
	struct mc_store_remove_regex_req rr = {mc_proto_str_c(""), mc_proto_str_c("ay"), false};
	struct mc_buf out;
	int n = 0;

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	put_ok(t, CA, "layer1", 10);
	put_ok(t, CA, "layer22", 10);
	put_ok(t, CA, "layerX", 10);
	put_ok(t, CA, "other", 10);
	assert_int_equal(put_start(t, CA, "layer3", 10), MC_OK); /* in flight: not listed */

	assert_int_equal(call(t, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq), MC_OK);
	assert_int_equal(t->resp.body.regex_replica_list.n_items, 2);
	assert_int_equal(t->resp.body.regex_replica_list.items[0].list.n_replicas, 1);
	/* leased now */
	assert_int_equal(rm(t, "layer1", false), MC_ERR_OBJECT_HAS_LEASE);
	rq.pattern = mc_proto_str_c("([a-z");
	assert_int_equal(call(t, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "([a-z"));
	rr.pattern = mc_proto_str_c("*(");
	assert_int_equal(call(t, MC_STORE_REMOVE_BY_REGEX, &rr), MC_ERR_INVALID_PARAMS);

	/* search semantics; leased and in-flight ones are skipped */
	rr.pattern = mc_proto_str_c("ay");
	assert_int_equal(call(t, MC_STORE_REMOVE_BY_REGEX, &rr), MC_OK);
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
	assert_int_equal(rm(t, "other", false), MC_OK); /* no lease from the read-only query */
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
	assert_int_equal(get(t, "layer22"), MC_OK);
	assert_int_equal(mc_master_remove_all(t->m, NULL, false, t->now), 0);
	assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), 2);
	assert_int_equal(metrics(t).key_count, 1); /* layer3, in flight */
	{
		struct mc_master_metrics x = metrics(t);

		assert_int_equal(x.master_get_replica_list_by_regex.requests, 2);
		assert_int_equal(x.master_get_replica_list_by_regex.failures, 1);
		assert_int_equal(x.master_remove_by_regex.requests, 2);
		assert_int_equal(x.master_remove_all.requests, 2);
	}
	t_free(t);
}

static void test_table_resize_in_steps(void **state)
{
	/* lookups, removes and inserts while the table grows (and later
	 * shrinks) in steps, against a shadow of what must exist */
	struct t *t = t_new();
	enum { N = 6000 };
	static bool live[N];
	uint64_t n_live = 0;

	(void)state;
	memset(live, 0, sizeof(live));
	assert_int_equal(mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	for (int i = 0; i < N; i++) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		put_ok(t, CA, k, 64);
		live[i] = true;
		n_live++;
		if (i % 5 == 0 && i >= 3) {
			snprintf(k, sizeof(k), "key-%d", i - 3);
			assert_int_equal(rm(t, k, true),
					 live[i - 3] ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
			n_live -= live[i - 3];
			live[i - 3] = false;
		}
		snprintf(k, sizeof(k), "key-%d", i / 2);
		assert_int_equal(exist(t, k), live[i / 2]);
	}
	assert_int_equal(metrics(t).key_count, n_live);
	for (int i = 0; i < N; i++) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(exist(t, k), live[i]);
		if (i % 10 != 0 && live[i]) { /* leave a tenth: the table shrinks */
			assert_int_equal(rm(t, k, true), MC_OK);
			live[i] = false;
			n_live--;
		}
		if (i % 100 == 0)
			mc_master_tick(t->m, t->now);
	}
	for (int r = 0; r < 8; r++) {
		mc_master_tick(t->m, t->now);
		for (int i = 0; i < N; i += 7) {
			char k[32];

			snprintf(k, sizeof(k), "key-%d", i);
			assert_int_equal(exist(t, k), live[i]);
		}
	}
	assert_int_equal(metrics(t).key_count, n_live);
	assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), (int64_t)n_live);
	assert_int_equal(metrics(t).allocated_bytes, 0);
	t_free(t);
}

static void test_many_objects_table(void **state)
{
	/* grow and shrink the table; remove-all and regex over a big one */
	struct t *t = t_new();
	struct mc_buf out;

	(void)state;
	assert_int_equal(mount(t, CB, SB, "b:1", 0, 64 * MIB), MC_OK);
	for (int i = 0; i < 5000; i++) {
		char k[32];
		struct mc_store_put_start_req r = {.client_id = CA,
						   .key = mc_proto_str_c(k),
						   .value_len = 64,
						   .config = cfg1()};
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
	assert_int_equal(metrics(t).key_count, 5000);
	for (int i = 0; i < 5000; i += 2) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(put_end(t, CA, k), MC_OK);
	}
	for (int i = 0; i < 5000; i += 3) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(exist(t, k), i % 2 == 0);
	}
	assert_int_equal(mc_master_remove_all(t->m, NULL, true, t->now), 2500);
	for (int i = 1; i < 5000; i += 2) {
		char k[32];

		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(revoke(t, CA, k), MC_OK);
	}
	assert_int_equal(metrics(t).key_count, 0);
	assert_int_equal(metrics(t).allocated_bytes, 0);
	mc_master_tick(t->m, t->now);
	put_ok(t, CA, "again", 10);
	assert_int_equal(get(t, "again"), MC_OK);
	t_free(t);
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
		struct mc_store_mount_req ma = {CA, seg(SA, "a:1", 0x100000, MIB)};
		struct mc_store_mount_req mb = {CB, seg(SB, "b:1", 0x900000, MIB)};
		struct mc_store_put_item items[3] = {
			{mc_proto_str_c("k2"), 100, mc_proto_str_c("g")},
			{mc_proto_str_c("k3"), 100, mc_proto_str_c("")},
			{mc_proto_str_c("k4"), 100, mc_proto_str_c("h")},
		};
		struct mc_store_batch_put_start_req bs = {
			.client_id = CA, .config = cfg1(), .n_items = 3, .items = items};
		struct mc_store_put_start_req ps = {.client_id = CA,
						    .key = mc_proto_str_c("k1"),
						    .value_len = 10,
						    .group_id = mc_proto_str_c("g"),
						    .config = cfg1()};
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
		struct mc_store_keys_req kr = {mc_proto_str_c(""), 3, keys};
		struct mc_store_regex_req rq = {mc_proto_str_c(""), mc_proto_str_c("k")};
		struct mc_store_key_req gk = {mc_proto_str_c(""), mc_proto_str_c("k1")};

		cfg_init(&cfg);
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

static void check_accounting(struct t *t)
{
	struct seg_sum ss = {0, 0};
	struct mc_master_metrics x = metrics(t);

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
	struct t *t;
	uint64_t x = seed;

	cfg_init(&cfg);
	cfg.client_ttl_ms = 10000;
	cfg.put_start_discard_timeout_ms = 3000;
	cfg.put_start_release_timeout_ms = 20000;
	cfg.enable_multi_tenants = tenants;
	cfg.rng_seed = seed;
	t = t_new_cfg(&cfg);
	for (int step = 0; step < 4000; step++) {
		uint32_t ci = rnd(&x) % 3, si = rnd(&x) % 4;
		struct mc_store_uuid cl = clients[ci];
		const char *k = keys[rnd(&x) % 16], *tenant = tn[rnd(&x) % 3];
		struct mc_store_replicate_config c = cfg1();
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
			(void)mount(t, clients[si % 3], segids[si], names[si], 0x1000000 * (si + 1),
				    64 * KIB + rnd(&x) % (64 * KIB));
			break;
		case 1: {
			struct mc_store_segment sg =
				seg(segids[ci], names[ci], 0x1000000 * (ci + 1), 64 * KIB);
			struct mc_store_remount_req r = {cl, 1, &sg};

			(void)call(t, MC_STORE_REMOUNT_SEGMENT, &r);
			break;
		}
		case 2: {
			struct mc_store_unmount_req r = {cl, segids[si]};

			if (rnd(&x) % 4 == 0)
				(void)call(t, MC_STORE_UNMOUNT_SEGMENT, &r);
			break;
		}
		case 3: {
			struct mc_store_graceful_unmount_req r = {clients[si % 3], segids[si],
								  rnd(&x) % 5000};

			if (rnd(&x) % 4 == 0)
				(void)call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &r);
			break;
		}
		case 4:
		case 5:
			(void)ping(t, cl);
			break;
		case 6:
			(void)exist(t, k);
			break;
		case 7:
			(void)get_t(t, tenant, k);
			break;
		case 8:
		case 9:
		case 10:
			(void)put_start_cfg(t, cl, tenant, k, 1 + rnd(&x) % 20000, gr[rnd(&x) % 4],
					    &c, op == 10);
			break;
		case 11:
		case 12:
			(void)put_end_t(t, cl, tenant, k, op == 12);
			break;
		case 13: {
			struct mc_store_put_revoke_req r = {.client_id = cl,
							    .tenant = mc_proto_str_c(tenant),
							    .replica_type = MC_STORE_REPLICA_ALL,
							    .key = mc_proto_str_c(k)};

			(void)call(t, rnd(&x) % 2 ? MC_STORE_PUT_REVOKE : MC_STORE_UPSERT_REVOKE,
				   &r);
			break;
		}
		case 14: {
			struct mc_store_remove_req r = {mc_proto_str_c(tenant), mc_proto_str_c(k),
							rnd(&x) % 2};

			(void)call(t, MC_STORE_REMOVE, &r);
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
			(void)call(t,
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
			(void)call(t,
				   rnd(&x) % 2 ? MC_STORE_BATCH_PUT_END : MC_STORE_BATCH_UPSERT_END,
				   &r);
			break;
		}
		case 17: {
			struct mc_proto_str ks[4];
			struct mc_store_keys_req r = {mc_proto_str_c(tenant), 4, ks};
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
			(void)call(t, types[w],
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

			(void)call(t, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &r);
			if (rnd(&x) % 4 == 0)
				(void)call(t, MC_STORE_REMOVE_BY_REGEX, &rr);
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
		(void)ping(t, clients[i]);
	mc_master_tick(t->m, t->now);
	mc_master_tick(t->m, t->now + 1000);
	(void)mc_master_remove_all(t->m, NULL, true, t->now);
	check_accounting(t);
	assert_int_equal(metrics(t).key_count, 0);
	assert_int_equal(metrics(t).allocated_bytes, 0);
	assert_int_equal(metrics(t).discarded_staging_bytes, 0);
	t_free(t);
}

static void test_random_stress(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 12; seed++)
		stress_one(seed * 0x9E3779B97F4A7C15ull, seed % 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_and_hello),
		cmocka_unit_test(test_ping_mount_remount),
		cmocka_unit_test(test_absurd_segments_refused),
		cmocka_unit_test(test_put_get_exist),
		cmocka_unit_test(test_end_revoke_rules),
		cmocka_unit_test(test_lease),
		cmocka_unit_test(test_zombie_preempt_release),
		cmocka_unit_test(test_upsert),
		cmocka_unit_test(test_full_pool_and_eviction),
		cmocka_unit_test(test_eviction_after_alloc_failure_only),
		cmocka_unit_test(test_pins),
		cmocka_unit_test(test_groups),
		cmocka_unit_test(test_tenants),
		cmocka_unit_test(test_liveness_and_unmount),
		cmocka_unit_test(test_graceful_unmount),
		cmocka_unit_test(test_multi_replica),
		cmocka_unit_test(test_batches),
		cmocka_unit_test(test_batch_replica_clear),
		cmocka_unit_test(test_regex_and_queries),
		cmocka_unit_test(test_many_objects_table),
		cmocka_unit_test(test_table_resize_in_steps),
		cmocka_unit_test(test_alloc_failures),
		cmocka_unit_test(test_random_stress),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

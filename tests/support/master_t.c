/* tests/support/master_t.c - see master_t.h. */
#include "master_t.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

struct mt *mt_new(const struct mc_master_config *cfg)
{
	struct mt *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(mc_master_new(cfg, &t->m), MC_OK);
	t->now = 1000000;
	return t;
}

void mt_free(struct mt *t)
{
	if (t->have_resp)
		mc_store_msg_release(&t->resp);
	mc_master_free(t->m);
	free(t);
}

void mt_cfg_init(struct mc_master_config *cfg)
{
	mc_master_config_defaults(cfg);
	cfg->client_ttl_ms = 1000000000000ull;
}

struct mt *mt_new_default(void)
{
	struct mc_master_config cfg;

	mt_cfg_init(&cfg);
	return mt_new(&cfg);
}

struct mt *mt_new_liveness(void)
{
	struct mc_master_config cfg;

	mc_master_config_defaults(&cfg);
	return mt_new(&cfg);
}

/* Encode, decode, handle, decode the answer.  Returns the response status. */
mc_status mt_call(struct mt *t, uint16_t type, const void *body)
{
	struct mc_buf b, out;
	struct mc_store_msg req;
	mc_status st;

	mc_buf_init(&b);
	mc_buf_init(&out);
	assert_int_equal(mc_store_request_encode(&b, type, 42, body), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MC_PROTO_MAX_PAYLOAD, &req), MC_OK);
	if (t->minor)
		req.hdr.minor = t->minor;
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

struct mc_store_segment mt_seg(struct mc_store_uuid id, const char *name, uint64_t base,
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

mc_status mt_mount(struct mt *t, struct mc_store_uuid client, struct mc_store_uuid id,
		   const char *name, uint64_t base, uint64_t size)
{
	struct mc_store_mount_req r = {client, mt_seg(id, name, base, size)};

	return mt_call(t, MC_STORE_MOUNT_SEGMENT, &r);
}

struct mc_store_replicate_config mt_cfg1(void)
{
	struct mc_store_replicate_config c = {.replica_num = 1};
	return c;
}

mc_status mt_put_start_cfg(struct mt *t, struct mc_store_uuid client, const char *tenant,
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
	return mt_call(t, upsert ? MC_STORE_UPSERT_START : MC_STORE_PUT_START, &r);
}

mc_status mt_put_start(struct mt *t, struct mc_store_uuid client, const char *key, uint64_t len)
{
	struct mc_store_replicate_config c = mt_cfg1();
	return mt_put_start_cfg(t, client, "", key, len, "", &c, false);
}

mc_status mt_put_end_t(struct mt *t, struct mc_store_uuid client, const char *tenant,
		       const char *key, bool upsert)
{
	struct mc_store_put_end_req r = {
		.client_id = client,
		.tenant = mc_proto_str_c(tenant),
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
	};
	return mt_call(t, upsert ? MC_STORE_UPSERT_END : MC_STORE_PUT_END, &r);
}

mc_status mt_put_end(struct mt *t, struct mc_store_uuid client, const char *key)
{
	return mt_put_end_t(t, client, "", key, false);
}

mc_status mt_revoke(struct mt *t, struct mc_store_uuid client, const char *key)
{
	struct mc_store_put_revoke_req r = {
		.client_id = client,
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
	};
	return mt_call(t, MC_STORE_PUT_REVOKE, &r);
}

void mt_put_ok(struct mt *t, struct mc_store_uuid client, const char *key, uint64_t len)
{
	assert_int_equal(mt_put_start(t, client, key, len), MC_OK);
	assert_int_equal(mt_put_end(t, client, key), MC_OK);
}

mc_status mt_get_t(struct mt *t, const char *tenant, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(tenant), mc_proto_str_c(key)};
	return mt_call(t, MC_STORE_GET_REPLICA_LIST, &r);
}

mc_status mt_get(struct mt *t, const char *key)
{
	return mt_get_t(t, "", key);
}

int mt_exist(struct mt *t, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(""), mc_proto_str_c(key)};
	mc_status st = mt_call(t, MC_STORE_EXIST_KEY, &r);

	return st != MC_OK ? st : t->resp.body.exist_resp.exists;
}

mc_status mt_rm(struct mt *t, const char *key, bool force)
{
	struct mc_store_remove_req r = {mc_proto_str_c(""), mc_proto_str_c(key), force};
	return mt_call(t, MC_STORE_REMOVE, &r);
}

mc_status mt_ping(struct mt *t, struct mc_store_uuid client)
{
	struct mc_store_client_req r = {client};
	mc_status st = mt_call(t, MC_STORE_PING, &r);

	assert_int_equal(st, MC_OK);
	return t->resp.body.ping_resp.client_status;
}

struct mc_master_metrics mt_metrics(struct mt *t)
{
	struct mc_master_metrics x;

	mc_master_metrics(t->m, &x);
	return x;
}

const struct mc_store_replica *mt_first_replica_start(struct mt *t)
{
	assert_true(t->resp.body.put_start_resp.n_replicas >= 1);
	return &t->resp.body.put_start_resp.replicas[0];
}

/* tests/unit/test_desc.c - segment descriptor / rpc_meta JSON, metadata keys, timestamps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/log.h"
#include "meta/desc.h"
#include "mooncake/status.h"
#include "support.h"

/* The spec's illustrative TCP descriptor (transfer-engine.md 3.3.3). */
static const char spec_tcp[] =
	"{\"name\":\"10.0.0.5:15231\",\"protocol\":\"tcp\",\"tcp_data_port\":16044,"
	"\"tcp_proto_version\":2,\"timestamp\":\"2026-08-22 10:00:00.123456\",\"buffers\":[{"
	"\"name\":\"10.0.0.5:15231\",\"addr\":140211928170496,\"length\":1048576}]}";

/* An RDMA descriptor as upstream writes it, with a trailing newline. */
static const char spec_rdma[] =
	"{\"name\":\"node1\",\"protocol\":\"rdma\",\"tcp_data_port\":0,\"tcp_proto_version\":2,"
	"\"timestamp\":\"2026-08-22 10:00:00.000001\","
	"\"devices\":[{\"name\":\"mlx5_0\",\"lid\":0,"
	"\"gid\":\"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:05\"}],"
	"\"priority_matrix\":{\"cpu:0\":[[\"mlx5_0\"],[]]},"
	"\"buffers\":[{\"name\":\"cpu:0\",\"addr\":139637976727552,\"length\":4294967296,"
	"\"rkey\":[2097407],\"lkey\":[2097407]},"
	"{\"name\":\"cuda:1\",\"addr\":9223372036854775807,\"length\":1,"
	"\"rkey\":[],\"lkey\":[7]}]}\n";

static struct mc_seg_desc *decode_ok(const char *json)
{
	struct mc_seg_desc *d = NULL;
	int rc = mc_seg_desc_decode(json, strlen(json), &d);
	if (rc != MC_OK)
		fail_msg("decode failed: %s\n%s", mc_last_error(), json);
	assert_non_null(d);
	return d;
}

/* Decoding must fail with MALFORMED_JSON and the error text must name what. */
static void expect_malformed(const char *json, const char *what)
{
	struct mc_seg_desc *d = (struct mc_seg_desc *)0x1;
	int rc = mc_seg_desc_decode(json, strlen(json), &d);
	if (rc != MC_ERR_MALFORMED_JSON)
		fail_msg("expected MALFORMED_JSON, got %d for %s", rc, json);
	assert_ptr_equal(d, (struct mc_seg_desc *)0x1); /* output untouched on failure */
	if (!strstr(mc_last_error(), what))
		fail_msg("error '%s' does not mention '%s'", mc_last_error(), what);
}

static void spec_tcp_example_decodes(void **state)
{
	struct mc_seg_desc *d;
	(void)state;
	d = decode_ok(spec_tcp);
	assert_string_equal(d->name, "10.0.0.5:15231");
	assert_string_equal(d->protocol, "tcp");
	assert_int_equal(d->tcp_data_port, 16044);
	assert_int_equal(d->tcp_proto_version, 2);
	assert_string_equal(d->timestamp, "2026-08-22 10:00:00.123456");
	assert_null(d->host_id);
	assert_int_equal(d->nbuffers, 1);
	assert_string_equal(d->buffers[0].name, "10.0.0.5:15231");
	assert_true(d->buffers[0].addr == 140211928170496ull);
	assert_true(d->buffers[0].length == 1048576);
	mc_seg_desc_free(d);
}

static void rdma_descriptor_decodes_ignoring_rdma_fields(void **state)
{
	struct mc_seg_desc *d;
	(void)state;
	d = decode_ok(spec_rdma);
	assert_string_equal(d->protocol, "rdma");
	assert_int_equal(d->tcp_data_port, 0);
	assert_int_equal(d->nbuffers, 2);
	assert_string_equal(d->buffers[0].name, "cpu:0");
	assert_true(d->buffers[0].addr == 139637976727552ull);
	assert_true(d->buffers[0].length == 4294967296ull);
	assert_string_equal(d->buffers[1].name, "cuda:1");
	assert_true(d->buffers[1].addr == (uint64_t)INT64_MAX); /* largest accepted */
	mc_seg_desc_free(d);
}

static void key_order_newline_and_defaults(void **state)
{
	struct mc_seg_desc *d;
	(void)state;
	/* reversed order, unknown fields, whitespace and newline, no version/port/buffers */
	d = decode_ok("  {\"future\":{\"x\":[1,2.5,null]},\"protocol\":\"tcp\",\n"
		      "\"name\":\"a/b\"}\n");
	assert_string_equal(d->name, "a/b");
	assert_int_equal(d->tcp_proto_version, 1); /* absent => 1 */
	assert_int_equal(d->tcp_data_port, 0);
	assert_null(d->timestamp);
	assert_int_equal(d->nbuffers, 0);
	assert_null(d->buffers);
	mc_seg_desc_free(d);

	/* the input need not be NUL-terminated: only len bytes are read */
	{
		char buf[sizeof(spec_tcp) + 8];
		struct mc_seg_desc *e = NULL;
		memcpy(buf, spec_tcp, sizeof(spec_tcp) - 1);
		memcpy(buf + sizeof(spec_tcp) - 1, "garbage!", 8);
		assert_int_equal(mc_seg_desc_decode(buf, sizeof(spec_tcp) - 1, &e), MC_OK);
		assert_int_equal(e->nbuffers, 1);
		mc_seg_desc_free(e);
	}
}

static void round_trip_preserves_every_field(void **state)
{
	struct mc_seg_buffer bufs[3] = {
		{.name = "seg", .addr = 0x1000, .length = 1},
		{.name = "seg", .addr = (uint64_t)INT64_MAX, .length = (uint64_t)INT64_MAX},
		{.name = "caf\xc3\xa9 \"quoted\" \\ /", .addr = 0x7f0000000000ull, .length = 4096},
	};
	struct mc_seg_desc in = {
		.name = "host-1",
		.protocol = "tcp",
		.tcp_data_port = 65535,
		.tcp_proto_version = 2,
		.timestamp = "2026-01-02 03:04:05.000006",
		.host_id = "0f6e1c2a-boot",
		.buffers = bufs,
		.nbuffers = 3,
	};
	struct mc_seg_desc *out, *dup;
	char *json, *json2;
	(void)state;

	assert_int_equal(mc_seg_desc_encode(&in, &json), MC_OK);
	assert_null(strchr(json, '\n')); /* compact, no trailing newline */
	assert_null(strstr(json, ": "));
	assert_non_null(strstr(json, "\"mc_host_id\":\"0f6e1c2a-boot\""));
	assert_non_null(strstr(json, "\"addr\":9223372036854775807")); /* integer, not double */
	out = decode_ok(json);
	assert_string_equal(out->name, in.name);
	assert_string_equal(out->protocol, in.protocol);
	assert_int_equal(out->tcp_data_port, 65535);
	assert_int_equal(out->tcp_proto_version, 2);
	assert_string_equal(out->timestamp, in.timestamp);
	assert_string_equal(out->host_id, in.host_id);
	assert_int_equal(out->nbuffers, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_string_equal(out->buffers[i].name, bufs[i].name);
		assert_true(out->buffers[i].addr == bufs[i].addr);
		assert_true(out->buffers[i].length == bufs[i].length);
	}

	/* dup is deep and re-encodes to the same bytes */
	assert_int_equal(mc_seg_desc_dup(out, &dup), MC_OK);
	assert_ptr_not_equal(dup->buffers, out->buffers);
	assert_ptr_not_equal(dup->buffers[2].name, out->buffers[2].name);
	mc_seg_desc_free(out);
	assert_int_equal(mc_seg_desc_encode(dup, &json2), MC_OK);
	assert_string_equal(json, json2);
	mc_seg_desc_free(dup);
	mc_free(json);
	mc_free(json2);
}

static void encode_fills_timestamp_and_omits_absent_host_id(void **state)
{
	struct mc_seg_desc in = {.name = "n", .protocol = "tcp", .tcp_proto_version = 1};
	struct mc_seg_desc *out;
	char *json;
	(void)state;
	assert_int_equal(mc_seg_desc_encode(&in, &json), MC_OK);
	assert_null(strstr(json, "mc_host_id"));
	assert_non_null(strstr(json, "\"buffers\":[]"));
	out = decode_ok(json);
	assert_non_null(out->timestamp);
	assert_int_equal(strlen(out->timestamp), 26);
	mc_seg_desc_free(out);
	mc_free(json);
}

/* "mc_tcp_addrs" (multi-path TCP): optional, bounded, round-trips, ignored by
 * readers that do not know it and absent from what single-path engines write. */
static void tcp_addrs_round_trip_and_bounds(void **state)
{
	char *addrs[2] = {"10.1.0.1", "fd00::1"};
	char long_addr[MC_SEG_MAX_TCP_ADDR_LEN + 2];
	char *many[MC_SEG_MAX_TCP_ADDRS + 1];
	struct mc_seg_desc in = {.name = "n",
				 .protocol = "tcp",
				 .tcp_proto_version = 2,
				 .tcp_addrs = addrs,
				 .ntcp_addrs = 2};
	struct mc_seg_desc *out, *dup;
	char *json, *json2, doc[8192];
	int len;
	(void)state;

	assert_int_equal(mc_seg_desc_encode(&in, &json), MC_OK);
	assert_non_null(strstr(json, "\"mc_tcp_addrs\":[\"10.1.0.1\",\"fd00::1\"]"));
	out = decode_ok(json);
	assert_int_equal(out->ntcp_addrs, 2);
	assert_string_equal(out->tcp_addrs[0], "10.1.0.1");
	assert_string_equal(out->tcp_addrs[1], "fd00::1");
	assert_int_equal(mc_seg_desc_dup(out, &dup), MC_OK);
	assert_ptr_not_equal(dup->tcp_addrs[1], out->tcp_addrs[1]);
	assert_int_equal(mc_seg_desc_encode(dup, &json2), MC_OK);
	assert_string_equal(json, json2);
	mc_seg_desc_free(out);
	mc_seg_desc_free(dup);
	mc_free(json);
	mc_free(json2);

	/* absent, null and [] all mean "rpc_meta's host only"; single-path
	 * engines do not write the field at all */
	in.ntcp_addrs = 0;
	assert_int_equal(mc_seg_desc_encode(&in, &json), MC_OK);
	assert_null(strstr(json, "mc_tcp_addrs"));
	mc_free(json);
	out = decode_ok("{\"name\":\"a\",\"protocol\":\"tcp\"}");
	assert_int_equal(out->ntcp_addrs, 0);
	assert_null(out->tcp_addrs);
	mc_seg_desc_free(out);
	out = decode_ok("{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":null}");
	assert_int_equal(out->ntcp_addrs, 0);
	mc_seg_desc_free(out);
	out = decode_ok("{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":[]}");
	assert_int_equal(out->ntcp_addrs, 0);
	mc_seg_desc_free(out);

	/* wrong shapes and sizes are rejected, naming the field */
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":\"10.0.0.1\"}",
			 "mc_tcp_addrs");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":[1]}",
			 "mc_tcp_addrs[0]");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":[\"a\",\"\"]}",
			 "mc_tcp_addrs[1]");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":[[\"a\"]]}",
			 "mc_tcp_addrs[0]");
	memset(long_addr, 'a', sizeof(long_addr) - 1);
	long_addr[sizeof(long_addr) - 1] = '\0';
	snprintf(doc, sizeof(doc),
		 "{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":[\"%s\"]}", long_addr);
	expect_malformed(doc, "mc_tcp_addrs[0]");
	long_addr[sizeof(long_addr) - 2] = '\0'; /* exactly the limit */
	snprintf(doc, sizeof(doc),
		 "{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":[\"%s\"]}", long_addr);
	out = decode_ok(doc);
	assert_int_equal(strlen(out->tcp_addrs[0]), MC_SEG_MAX_TCP_ADDR_LEN);
	mc_seg_desc_free(out);
	len = snprintf(doc, sizeof(doc), "{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_tcp_addrs\":[");
	for (int i = 0; i <= MC_SEG_MAX_TCP_ADDRS; i++)
		len += snprintf(doc + len, sizeof(doc) - (size_t)len, "%s\"10.0.0.%d\"",
				i ? "," : "", i);
	snprintf(doc + len, sizeof(doc) - (size_t)len, "]}");
	expect_malformed(doc, "mc_tcp_addrs");

	/* the encoder refuses what the decoder would reject */
	for (int i = 0; i <= MC_SEG_MAX_TCP_ADDRS; i++)
		many[i] = "10.0.0.1";
	in.tcp_addrs = many;
	in.ntcp_addrs = MC_SEG_MAX_TCP_ADDRS + 1;
	assert_int_equal(mc_seg_desc_encode(&in, &json), MC_ERR_INVALID_PARAMS);
	in.ntcp_addrs = 1;
	many[0] = "";
	assert_int_equal(mc_seg_desc_encode(&in, &json), MC_ERR_INVALID_PARAMS);
}

static void encode_refuses_what_peers_reject(void **state)
{
	struct mc_seg_buffer b = {.name = "x", .addr = 1, .length = 1};
	struct mc_seg_desc d = {.name = "n",
				.protocol = "tcp",
				.tcp_proto_version = 1,
				.buffers = &b,
				.nbuffers = 1};
	char *json = NULL;
	(void)state;
	b.addr = 0;
	assert_int_equal(mc_seg_desc_encode(&d, &json), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "buffers[0].addr"));
	b.addr = (uint64_t)INT64_MAX + 1; /* jansson cannot carry it; decode would refuse */
	assert_int_equal(mc_seg_desc_encode(&d, &json), MC_ERR_INVALID_PARAMS);
	b.addr = 1;
	b.length = 0;
	assert_int_equal(mc_seg_desc_encode(&d, &json), MC_ERR_INVALID_PARAMS);
	b.length = 1;
	b.name = "";
	assert_int_equal(mc_seg_desc_encode(&d, &json), MC_ERR_INVALID_PARAMS);
	b.name = "\xff\xfe"; /* not UTF-8 */
	assert_int_equal(mc_seg_desc_encode(&d, &json), MC_ERR_INVALID_PARAMS);
	b.name = "x";
	d.protocol = NULL;
	assert_int_equal(mc_seg_desc_encode(&d, &json), MC_ERR_INVALID_PARAMS);
	assert_null(json);
}

static void bad_inputs_are_malformed_json(void **state)
{
	(void)state;
	expect_malformed("", "invalid json");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\"", "invalid json"); /* truncated */
	expect_malformed("[1,2]", "not a json object");
	expect_malformed("\"tcp\"", "not a json object");
	expect_malformed("42", "not a json object");
	expect_malformed("null", "not a json object");
	expect_malformed("{\"protocol\":\"tcp\"}", "name");
	expect_malformed("{\"name\":\"a\"}", "protocol");
	expect_malformed("{\"name\":\"\",\"protocol\":\"tcp\"}", "name");
	expect_malformed("{\"name\":7,\"protocol\":\"tcp\"}", "name");
	expect_malformed("{\"name\":\"a\",\"protocol\":[\"tcp\",\"rdma\"]}", "protocol");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"tcp_data_port\":65536}",
			 "tcp_data_port");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"tcp_data_port\":\"80\"}",
			 "tcp_data_port");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"tcp_proto_version\":0}",
			 "tcp_proto_version");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"timestamp\":5}", "timestamp");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"mc_host_id\":[]}", "mc_host_id");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"buffers\":{}}", "buffers");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"buffers\":[3]}", "buffers[0]");
}

static void bad_buffers_name_the_field(void **state)
{
	(void)state;
#define DESC(b)                                                                         \
	"{\"name\":\"a\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"a\",\"addr\":1," \
	"\"length\":1}," b "]}"
	/* sanity: the frame itself is valid */
	mc_seg_desc_free(decode_ok(DESC("{\"name\":\"a\",\"addr\":2,\"length\":2}")));
	expect_malformed(DESC("{\"addr\":2,\"length\":2}"), "buffers[1].name");
	expect_malformed(DESC("{\"name\":\"\",\"addr\":2,\"length\":2}"), "buffers[1].name");
	expect_malformed(DESC("{\"name\":\"a\",\"length\":2}"), "buffers[1].addr");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":0,\"length\":2}"), "buffers[1].addr");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":-4096,\"length\":2}"), "buffers[1].addr");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":4096.0,\"length\":2}"), "buffers[1].addr");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":1e6,\"length\":2}"), "buffers[1].addr");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":\"4096\",\"length\":2}"),
			 "buffers[1].addr");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":2,\"length\":0}"), "buffers[1].length");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":2,\"length\":-1}"), "buffers[1].length");
	expect_malformed(DESC("{\"name\":\"a\",\"addr\":2,\"length\":true}"), "buffers[1].length");
#undef DESC
}

static void integers_above_int64_max_are_rejected_clearly(void **state)
{
	(void)state;
	/* 2^64-1 and 2^63: jansson cannot hold them; we refuse instead of rounding */
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"a\","
			 "\"addr\":18446744073709551615,\"length\":1}]}",
			 "INT64_MAX");
	expect_malformed("{\"name\":\"a\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"a\","
			 "\"addr\":1,\"length\":9223372036854775808}]}",
			 "too big integer");
}

static void rpc_meta_round_trip_and_validation(void **state)
{
	struct mc_rpc_meta in = {.ip_or_host_name = "10.0.0.5", .rpc_port = 15231};
	struct mc_rpc_meta out = {0};
	char *json;
	(void)state;

	assert_int_equal(mc_rpc_meta_encode(&in, &json), MC_OK);
	assert_string_equal(json, "{\"ip_or_host_name\":\"10.0.0.5\",\"rpc_port\":15231}");
	assert_int_equal(mc_rpc_meta_decode(json, strlen(json), &out), MC_OK);
	assert_string_equal(out.ip_or_host_name, "10.0.0.5");
	assert_int_equal(out.rpc_port, 15231);
	mc_rpc_meta_release(&out);
	assert_null(out.ip_or_host_name);
	mc_free(json);

	/* key order and newline as etcd writers leave them */
	json = "{\"rpc_port\":65535,\"ip_or_host_name\":\"fe80::1\",\"x\":1}\n";
	assert_int_equal(mc_rpc_meta_decode(json, strlen(json), &out), MC_OK);
	assert_int_equal(out.rpc_port, 65535);
	assert_string_equal(out.ip_or_host_name, "fe80::1");
	mc_rpc_meta_release(&out);

	static const char *const bad[] = {
		"{\"ip_or_host_name\":\"h\",\"rpc_port\":65536}",
		"{\"ip_or_host_name\":\"h\",\"rpc_port\":-1}",
		"{\"ip_or_host_name\":\"h\",\"rpc_port\":\"1\"}",
		"{\"ip_or_host_name\":\"h\"}",
		"{\"ip_or_host_name\":\"\",\"rpc_port\":1}",
		"{\"rpc_port\":1}",
		"[]",
		"{",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		out.ip_or_host_name = NULL;
		out.rpc_port = 7;
		assert_int_equal(mc_rpc_meta_decode(bad[i], strlen(bad[i]), &out),
				 MC_ERR_MALFORMED_JSON);
		assert_null(out.ip_or_host_name); /* untouched */
		assert_int_equal(out.rpc_port, 7);
	}
	assert_int_equal(mc_rpc_meta_decode(bad[0], strlen(bad[0]), &out), MC_ERR_MALFORMED_JSON);
	assert_non_null(strstr(mc_last_error(), "rpc_port"));

	in.ip_or_host_name = "";
	assert_int_equal(mc_rpc_meta_encode(&in, &json), MC_ERR_INVALID_PARAMS);
}

static void keys_follow_cluster_id_and_slash_rule(void **state)
{
	char *k;
	(void)state;
	unsetenv("MC_METADATA_CLUSTER_ID");
	k = mc_meta_key_rpc("node1:1234");
	assert_string_equal(k, "mooncake/rpc_meta/node1:1234");
	mc_free(k);
	k = mc_meta_key_segment("node1:1234");
	assert_string_equal(k, "mooncake/ram/node1:1234");
	mc_free(k);
	k = mc_meta_key_segment("nvmeof/x"); /* contains '/': verbatim after the prefix */
	assert_string_equal(k, "mooncake/nvmeof/x");
	mc_free(k);

	setenv("MC_METADATA_CLUSTER_ID", "prod", 1);
	k = mc_meta_key_rpc("n");
	assert_string_equal(k, "mooncake/prod/rpc_meta/n");
	mc_free(k);
	k = mc_meta_key_segment("n");
	assert_string_equal(k, "mooncake/prod/ram/n");
	mc_free(k);
	setenv("MC_METADATA_CLUSTER_ID", "prod/", 1); /* trailing '/' not doubled */
	k = mc_meta_key_segment("a/b");
	assert_string_equal(k, "mooncake/prod/a/b");
	mc_free(k);
	setenv("MC_METADATA_CLUSTER_ID", "", 1); /* empty = unset */
	k = mc_meta_key_segment("n");
	assert_string_equal(k, "mooncake/ram/n");
	mc_free(k);
	unsetenv("MC_METADATA_CLUSTER_ID");
}

static void timestamp_has_upstream_shape(void **state)
{
	char buf[32];
	int y, mo, d, h, mi, s, us;
	char tail;
	(void)state;
	mc_seg_timestamp(buf, sizeof(buf));
	assert_int_equal(strlen(buf), 26);
	assert_int_equal(
		sscanf(buf, "%4d-%2d-%2d %2d:%2d:%2d.%6d%c", &y, &mo, &d, &h, &mi, &s, &us, &tail),
		7);
	assert_true(y >= 2024 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31);
	assert_true(h < 24 && mi < 60 && s <= 60 && us < 1000000);
	assert_int_equal(buf[4], '-');
	assert_int_equal(buf[10], ' ');
	assert_int_equal(buf[19], '.');
	/* a short buffer is truncated, never overrun */
	memset(buf, 'x', sizeof(buf));
	mc_seg_timestamp(buf, 5);
	assert_int_equal(strlen(buf), 4);
	assert_int_equal(buf[5], 'x');
}

static void decode_survives_allocation_failures(void **state)
{
	(void)state;
	/* fail each mc_malloc in turn: every path must clean up (ASan checks leaks) */
	for (long n = 1; n < 64; n++) {
		struct mc_seg_desc *d = NULL;
		int rc;
		mc_alloc_fault_arm(n);
		rc = mc_seg_desc_decode(spec_rdma, strlen(spec_rdma), &d);
		mc_alloc_fault_arm(0);
		if (rc == MC_OK) {
			assert_int_equal(d->nbuffers, 2);
			mc_seg_desc_free(d);
		} else {
			assert_int_equal(rc, MC_ERR_NOMEM);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(spec_tcp_example_decodes),
		cmocka_unit_test(rdma_descriptor_decodes_ignoring_rdma_fields),
		cmocka_unit_test(key_order_newline_and_defaults),
		cmocka_unit_test(round_trip_preserves_every_field),
		cmocka_unit_test(encode_fills_timestamp_and_omits_absent_host_id),
		cmocka_unit_test(tcp_addrs_round_trip_and_bounds),
		cmocka_unit_test(encode_refuses_what_peers_reject),
		cmocka_unit_test(bad_inputs_are_malformed_json),
		cmocka_unit_test(bad_buffers_name_the_field),
		cmocka_unit_test(integers_above_int64_max_are_rejected_clearly),
		cmocka_unit_test(rpc_meta_round_trip_and_validation),
		cmocka_unit_test(keys_follow_cluster_id_and_slash_rule),
		cmocka_unit_test(timestamp_has_upstream_shape),
		cmocka_unit_test(decode_survives_allocation_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_dummy_proto.c - the dummy client <-> daemon codec
 * (store/dummy_proto.h): a Put with a config and multi-buffer items and an
 * answer survive a round trip through the stream framing; every request
 * type round-trips; malformed payloads (short, padded, bad boolean, empty
 * or oversized key, a forged count) are refused with MC_ERR_PROTOCOL, and
 * bad input to the encoder leaves the buffer as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mooncake/log.h"
#include "store/dummy_proto.h"
#include "store/proto.h"

static void put_round_trip(void **state)
{
	struct mc_dummy_buf b0[1] = {{0, 64, 4096}};
	struct mc_dummy_buf b1[2] = {{3, 0, 10}, {3, 100, 20}};
	struct mc_dummy_item items[2] = {{mc_proto_str_c("k0"), 1, b0},
					 {mc_proto_str_c("key-one"), 2, b1}};
	struct mc_proto_str pref[2] = {mc_proto_str_c("a:1"), mc_proto_str_c("b:2")};
	struct mc_dummy_req q = {.type = MC_DUMMY_MSG_PUT, .flags = MC_DUMMY_F_UPSERT};
	struct mc_dummy_req got;
	struct mc_proto_hdr h;
	struct mc_buf b;
	size_t flen;
	(void)state;

	q.config.replica_num = 2;
	q.config.with_hard_pin = true;
	q.config.soft_pin_ttl_ms = 1234;
	q.config.preferred_segment = mc_proto_str_c("seg:9");
	q.config.n_preferred_segments = 2;
	q.config.preferred_segments = pref;
	q.config.group_id = mc_proto_str_c("g");
	q.n_items = 2;
	q.items = items;
	mc_buf_init(&b);
	assert_int_equal(mc_dummy_req_encode(&b, 42, &q), MC_OK);
	assert_int_equal(mc_proto_frame_peek(b.data, b.len - 1, MC_DUMMY_MAX_PAYLOAD, &h, &flen),
			 MC_INPROGRESS);
	assert_int_equal(mc_proto_frame_peek(b.data, b.len, MC_DUMMY_MAX_PAYLOAD, &h, &flen),
			 MC_OK);
	assert_int_equal(flen, b.len);
	assert_int_equal(h.type, MC_DUMMY_MSG_PUT);
	assert_int_equal(h.req_id, 42);
	assert_int_equal(h.flags & MC_PROTO_F_RESPONSE, 0);
	assert_int_equal(
		mc_dummy_req_decode(h.type, b.data + MC_PROTO_HDR_LEN, h.payload_len, &got), MC_OK);
	assert_int_equal(got.flags, MC_DUMMY_F_UPSERT);
	assert_int_equal(got.config.replica_num, 2);
	assert_true(got.config.with_hard_pin);
	assert_false(got.config.with_soft_pin);
	assert_int_equal(got.config.soft_pin_ttl_ms, 1234);
	assert_string_equal(got.config.preferred_segment.ptr, "seg:9");
	assert_int_equal(got.config.n_preferred_segments, 2);
	assert_string_equal(got.config.preferred_segments[1].ptr, "b:2");
	assert_string_equal(got.config.group_id.ptr, "g");
	assert_int_equal(got.n_items, 2);
	assert_string_equal(got.items[1].key.ptr, "key-one");
	assert_int_equal(got.items[1].nbufs, 2);
	assert_int_equal(got.items[1].bufs[1].region, 3);
	assert_int_equal(got.items[1].bufs[1].offset, 100);
	assert_int_equal(got.items[1].bufs[1].len, 20);
	assert_int_equal(got.items[0].bufs[0].offset, 64);
	mc_dummy_req_release(&got);
	mc_buf_release(&b);
}

static void answer_round_trip(void **state)
{
	int64_t res[3] = {5, -704, 1ll << 40};
	struct mc_proto_str strs[2] = {{"", 0}, {"seg:1", 5}};
	struct mc_dummy_resp r = {3, res, {"why", 3}, 2, strs}, got;
	struct mc_proto_hdr h;
	struct mc_buf b;
	size_t flen;
	(void)state;

	mc_buf_init(&b);
	assert_int_equal(mc_dummy_resp_encode(&b, MC_DUMMY_MSG_GET, 7, MC_ERR_INVALID_PARAMS, &r),
			 MC_OK);
	assert_int_equal(mc_proto_frame_peek(b.data, b.len, MC_DUMMY_MAX_PAYLOAD, &h, &flen),
			 MC_OK);
	assert_true(h.flags & MC_PROTO_F_RESPONSE);
	assert_int_equal(h.status, MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_dummy_resp_decode(b.data + MC_PROTO_HDR_LEN, h.payload_len, &got),
			 MC_OK);
	assert_int_equal(got.n_results, 3);
	assert_int_equal(got.results[1], -704);
	assert_int_equal(got.results[2], 1ll << 40);
	assert_string_equal(got.text.ptr, "why");
	assert_int_equal(got.n_strs, 2);
	assert_int_equal(got.strs[0].len, 0); /* an empty string in a list survives */
	assert_string_equal(got.strs[1].ptr, "seg:1");
	mc_dummy_resp_release(&got);
	mc_buf_release(&b);
}

static void every_type_round_trips(void **state)
{
	struct mc_dummy_buf bufs[2] = {{0, 8, 16}, {2, 0, 4}};
	struct mc_dummy_item it = {mc_proto_str_c("k"), 2, bufs};
	struct mc_proto_str strs[3] = {mc_proto_str_c("key"), mc_proto_str_c(""),
				       mc_proto_str_c("seg:2")};
	uint64_t nums[2] = {7, 1ull << 40};
	(void)state;
	for (uint16_t t = MC_DUMMY_MSG_FIRST; t <= MC_DUMMY_MSG_LAST; t++) {
		struct mc_dummy_req q = {.type = t,
					 .flags = 1,
					 .a = 11,
					 .b = 22,
					 .text = mc_proto_str_c("x"),
					 .n_strs = 3,
					 .strs = strs,
					 .n_nums = 2,
					 .nums = nums,
					 .n_items = 1,
					 .items = &it};
		struct mc_dummy_req got;
		struct mc_buf b, again;
		mc_buf_init(&b);
		mc_buf_init(&again);
		assert_int_equal(mc_dummy_req_encode(&b, t, &q), MC_OK);
		assert_int_equal(mc_dummy_req_decode(t, b.data + MC_PROTO_HDR_LEN,
						     b.len - MC_PROTO_HDR_LEN, &got),
				 MC_OK);
		assert_int_equal(mc_dummy_req_encode(&again, t, &got), MC_OK);
		assert_int_equal(again.len, b.len);
		assert_memory_equal(again.data, b.data, b.len);
		assert_string_not_equal(mc_dummy_msg_name(t), "unknown");
		mc_dummy_req_release(&got);
		mc_buf_release(&b);
		mc_buf_release(&again);
	}
}

static mc_status decode(uint16_t type, const void *p, size_t n)
{
	struct mc_dummy_req q;
	mc_status rc = mc_dummy_req_decode(type, p, n, &q);
	if (rc == MC_OK)
		mc_dummy_req_release(&q);
	return rc;
}

static void malformed_payloads_are_refused(void **state)
{
	static const uint8_t ping_padded[1] = {0};
	static const uint8_t map_short[15] = {0};
	static const uint8_t forged_count[5] = {0xff, 0xff, 0xff, 0xff, 0};
	static const uint8_t empty_key[8] = {1, 0, 0, 0, 0, 0, 0, 0};
	static const uint8_t bad_bool[20] = {0, 1, 0, 0, 0, 7};
	/* GetRanges: 2 numbers announced, one there */
	static const uint8_t short_nums[12] = {2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
	/* CopyTask: a string list whose count runs past the payload */
	static const uint8_t forged_strs[8] = {0xff, 0xff, 0, 0, 1, 0, 0, 0};
	uint8_t big_key[4 + 4 + MC_STORE_KEY_MAX + 1] = {1, 0, 0, 0};
	uint32_t klen = MC_STORE_KEY_MAX + 1;
	struct mc_dummy_item it = {{NULL, 0}, 0, NULL};
	struct mc_dummy_req q = {.type = MC_DUMMY_MSG_EXIST, .n_items = 1, .items = &it};
	struct mc_buf b;
	(void)state;

	memcpy(big_key + 4, &klen, 4);
	assert_int_equal(decode(MC_DUMMY_MSG_PING, ping_padded, 1), MC_ERR_PROTOCOL);
	assert_int_equal(decode(MC_DUMMY_MSG_MAP_REGION, map_short, 15), MC_ERR_PROTOCOL);
	assert_int_equal(decode(MC_DUMMY_MSG_EXIST, forged_count, 5), MC_ERR_PROTOCOL);
	assert_int_equal(decode(MC_DUMMY_MSG_EXIST, empty_key, 8), MC_ERR_PROTOCOL);
	assert_int_equal(decode(MC_DUMMY_MSG_EXIST, big_key, sizeof(big_key)), MC_ERR_PROTOCOL);
	assert_non_null(strstr(mc_last_error(), "key of 4097 bytes"));
	assert_int_equal(decode(MC_DUMMY_MSG_PUT, bad_bool, sizeof(bad_bool)), MC_ERR_PROTOCOL);
	assert_non_null(strstr(mc_last_error(), "boolean 7"));
	assert_int_equal(decode(MC_DUMMY_MSG_GET_RANGES, short_nums, sizeof(short_nums)),
			 MC_ERR_PROTOCOL);
	assert_int_equal(decode(MC_DUMMY_MSG_COPY_TASK, forged_strs, sizeof(forged_strs)),
			 MC_ERR_PROTOCOL);
	assert_int_equal(decode(MC_DUMMY_MSG_LAST + 1, NULL, 0), MC_ERR_PROTOCOL);
	assert_int_equal(decode(MC_DUMMY_MSG_FIRST - 1, NULL, 0), MC_ERR_PROTOCOL);
	/* the encoder refuses an empty key and leaves earlier bytes alone */
	mc_buf_init(&b);
	mc_buf_append(&b, "abc", 3);
	assert_int_equal(mc_dummy_req_encode(&b, 1, &q), MC_ERR_INVALID_KEY);
	assert_int_equal(b.len, 3);
	assert_int_equal(b.err, MC_OK);
	mc_buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(put_round_trip),
		cmocka_unit_test(answer_round_trip),
		cmocka_unit_test(every_type_round_trips),
		cmocka_unit_test(malformed_payloads_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_tensor_hdr.c - the stored-tensor header codec
 * (mooncake/tensor_hdr.h): the byte layout, round trips of full, shard,
 * scalar and empty tensors at any alignment, and every malformed header
 * refused with MC_ERR_INVALID_PARAMS, leaving the output alone, and the
 * rule it breaks named in mc_last_error() (each case checks a word only
 * that rule's message holds, so every rule is tested on its own).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mooncake/log.h"
#include "mooncake/tensor_hdr.h"

/* A stored 2x3 float32 tensor: header, then 24 payload bytes. */
#define PAYLOAD 24
#define TOTAL	(MC_TENSOR_HDR_SIZE + PAYLOAD)

static void sample(struct mc_tensor_hdr *h)
{
	mc_tensor_hdr_init(h);
	h->dtype = MC_TENSOR_DTYPE_FLOAT32;
	h->ndim = 2;
	h->global_shape[0] = h->local_shape[0] = 2;
	h->global_shape[1] = h->local_shape[1] = 3;
	h->data_bytes = PAYLOAD;
}

static mc_status decode_at(const struct mc_tensor_hdr *h, uint64_t total, size_t misalign,
			   struct mc_tensor_hdr *out)
{
	static uint8_t buf[TOTAL + 16];
	mc_tensor_hdr_encode(h, buf + misalign);
	return mc_tensor_hdr_decode(buf + misalign, total, out);
}

static void layout_is_upstreams(void **state)
{
	struct mc_tensor_hdr h;
	uint8_t b[MC_TENSOR_HDR_SIZE];
	uint32_t u32;
	uint64_t u64;
	int64_t i64;
	(void)state;

	sample(&h);
	mc_tensor_hdr_encode(&h, b);
	memcpy(&u32, b, 4);
	assert_int_equal(u32, MC_TENSOR_MAGIC);
	assert_int_equal(b[4] | b[5] << 8, MC_TENSOR_VERSION); /* tests run little-endian */
	assert_int_equal(b[6] | b[7] << 8, MC_TENSOR_HDR_SIZE);
	memcpy(&u64, b + 24, 8);
	assert_int_equal(u64, MC_TENSOR_HDR_SIZE); /* data_offset */
	memcpy(&u64, b + 32, 8);
	assert_int_equal(u64, PAYLOAD); /* data_bytes */
	memcpy(&i64, b + 40 + 8, 8);
	assert_int_equal(i64, 3); /* global_shape[1] */
	memcpy(&i64, b + 104 + 2 * 8, 8);
	assert_int_equal(i64, -1); /* local_shape[2], past ndim */
}

static void full_shard_scalar_and_empty_round_trip(void **state)
{
	struct mc_tensor_hdr h, out;
	(void)state;

	for (size_t mis = 0; mis < 8; mis++) {
		sample(&h);
		memset(&out, 0, sizeof(out));
		assert_int_equal(decode_at(&h, TOTAL, mis, &out), MC_OK);
		assert_memory_equal(&out, &h, sizeof(h));
	}

	/* shard 1 of 2 along dim 0 of a 4x3 tensor */
	sample(&h);
	h.global_shape[0] = 4;
	h.layout_kind = MC_TENSOR_LAYOUT_SHARD;
	h.axis_count = 1;
	h.axes[0] = (struct mc_tensor_axis){
		.kind = MC_TENSOR_AXIS_TP, .shard_rank = 1, .shard_count = 2, .split_dim = 0};
	assert_int_equal(decode_at(&h, TOTAL, 0, &out), MC_OK);
	assert_memory_equal(&out, &h, sizeof(h));

	/* a 0-dimensional bfloat16 scalar */
	mc_tensor_hdr_init(&h);
	h.dtype = MC_TENSOR_DTYPE_BFLOAT16;
	h.data_bytes = 2;
	assert_int_equal(decode_at(&h, MC_TENSOR_HDR_SIZE + 2, 3, &out), MC_OK);
	assert_memory_equal(&out, &h, sizeof(h));

	/* a 0x5 int64 tensor: no payload */
	mc_tensor_hdr_init(&h);
	h.dtype = MC_TENSOR_DTYPE_INT64;
	h.ndim = 2;
	h.global_shape[0] = h.local_shape[0] = 0;
	h.global_shape[1] = h.local_shape[1] = 5;
	assert_int_equal(decode_at(&h, MC_TENSOR_HDR_SIZE, 0, &out), MC_OK);
	assert_memory_equal(&out, &h, sizeof(h));

	/* a payload placed past a gap after the header */
	sample(&h);
	h.data_offset = MC_TENSOR_HDR_SIZE + 8;
	assert_int_equal(mc_tensor_hdr_validate(&h, TOTAL + 8), MC_OK);
}

/* One header fault: what to break, and a word of the reason expected. */
struct fault {
	const char *what;
	void (*breakit)(struct mc_tensor_hdr *h, uint64_t *total);
	const char *reason;
};

#define FAULT(name, ...)                                                   \
	static void break_##name(struct mc_tensor_hdr *h, uint64_t *total) \
	{                                                                  \
		(void)h;                                                   \
		(void)total;                                               \
		__VA_ARGS__;                                               \
	}
#define ROW(name, reason_)                   \
	{                                    \
#name, break_##name, reason_ \
	}

FAULT(empty, *total = 0)
FAULT(short_by_one, *total = MC_TENSOR_HDR_SIZE - 1)
FAULT(magic, h->magic ^= 1)
FAULT(version, h->version = 2)
FAULT(header_size, h->header_size = MC_TENSOR_HDR_SIZE - 1)
FAULT(dtype_negative, h->dtype = -1)
FAULT(dtype_unknown, h->dtype = MC_TENSOR_DTYPE_COUNT)
FAULT(ndim_negative, h->ndim = -1)
FAULT(ndim_too_big, h->ndim = MC_TENSOR_MAX_DIMS + 1)
FAULT(layout, h->layout_kind = 2)
FAULT(axis_count, h->axis_count = MC_TENSOR_MAX_AXES + 1)
FAULT(global_negative, h->global_shape[0] = -2)
FAULT(local_unset_within_ndim, h->local_shape[1] = -1)
FAULT(global_set_past_ndim, h->global_shape[2] = 0)
FAULT(local_set_past_ndim, h->local_shape[7] = 1)
FAULT(numel_overflows, {
	h->local_shape[0] = (int64_t)1 << 32;
	h->local_shape[1] = (int64_t)1 << 32;
})
FAULT(bytes_overflow, {
	h->local_shape[0] = (int64_t)1 << 62;
	h->local_shape[1] = 1;
	h->data_bytes = *total - h->data_offset;
})
FAULT(axis_kind_negative, {
	h->axis_count = 1;
	h->axes[0] = (struct mc_tensor_axis){.kind = -1, .shard_count = 1};
})
FAULT(axis_kind_too_big, {
	h->axis_count = 1;
	h->axes[0] = (struct mc_tensor_axis){.kind = MC_TENSOR_AXIS_KIND_MAX + 1, .shard_count = 1};
})
FAULT(shard_count_zero, {
	h->axis_count = 1;
	h->axes[0] = (struct mc_tensor_axis){.kind = 1, .shard_count = 0};
})
FAULT(shard_rank_past_count, {
	h->axis_count = 2;
	h->axes[0] = (struct mc_tensor_axis){.kind = 1, .shard_count = 2};
	h->axes[1] = (struct mc_tensor_axis){.kind = 1, .shard_rank = 2, .shard_count = 2};
})
FAULT(shard_rank_negative, {
	h->axis_count = 1;
	h->axes[0] = (struct mc_tensor_axis){.kind = 1, .shard_rank = -1, .shard_count = 2};
})
FAULT(split_dim_below_minus_one, {
	h->axis_count = 1;
	h->axes[0] = (struct mc_tensor_axis){.kind = 1, .shard_count = 1, .split_dim = -2};
})
FAULT(split_dim_past_ndim, {
	h->axis_count = 1;
	h->axes[0] = (struct mc_tensor_axis){.kind = 1, .shard_count = 1, .split_dim = 2};
})
FAULT(data_offset_inside_header, h->data_offset = MC_TENSOR_HDR_SIZE - 1)
FAULT(data_offset_past_object, h->data_offset = *total + 1)
FAULT(data_bytes_past_object, h->data_bytes = PAYLOAD + 1)
FAULT(object_longer_than_data, *total += 1)
FAULT(data_bytes_not_shape, {
	h->local_shape[1] = 4;
	h->global_shape[1] = 4;
})
FAULT(data_bytes_not_dtype, h->dtype = MC_TENSOR_DTYPE_FLOAT64)

static const struct fault faults[] = {
	ROW(empty, "object of 0 bytes is shorter"),
	ROW(short_by_one, "object of 303 bytes is shorter"),
	ROW(magic, "bad magic 0x4d4f4f4f"),
	ROW(version, "unknown version 2"),
	ROW(header_size, "header_size 303 is not 304"),
	ROW(dtype_negative, "unknown dtype code -1"),
	ROW(dtype_unknown, "unknown dtype code 15"),
	ROW(ndim_negative, "ndim -1 outside 0..8"),
	ROW(ndim_too_big, "ndim 9 outside 0..8"),
	ROW(layout, "unknown layout kind 2"),
	ROW(axis_count, "axis_count 5 > 4"),
	ROW(global_negative, "dimension 0 is negative: -2 x 2"),
	ROW(local_unset_within_ndim, "dimension 1 is negative: 3 x -1"),
	ROW(global_set_past_ndim, "dimension 2 past ndim 2 is 0 x -1"),
	ROW(local_set_past_ndim, "dimension 7 past ndim 2 is -1 x 1"),
	ROW(numel_overflows, "element count overflows 64 bits at dimension 1"),
	ROW(bytes_overflow, "payload size overflows 64 bits"),
	ROW(axis_kind_negative, "axis 0 kind -1 outside 0..4"),
	ROW(axis_kind_too_big, "axis 0 kind 5 outside 0..4"),
	ROW(shard_count_zero, "axis 0 shard_count 0 < 1"),
	ROW(shard_rank_past_count, "axis 1 shard_rank 2 outside 0..1"),
	ROW(shard_rank_negative, "axis 0 shard_rank -1 outside 0..1"),
	ROW(split_dim_below_minus_one, "axis 0 split_dim -2 outside -1..1"),
	ROW(split_dim_past_ndim, "axis 0 split_dim 2 outside -1..1"),
	ROW(data_offset_inside_header, "data_offset 303 outside 304..328"),
	ROW(data_offset_past_object, "data_offset 329 outside 304..328"),
	ROW(data_bytes_past_object, "data_bytes 25 but 24 bytes follow"),
	ROW(object_longer_than_data, "data_bytes 24 but 25 bytes follow"),
	ROW(data_bytes_not_shape, "data_bytes 24 is not 8 elements of 4 bytes (float32)"),
	ROW(data_bytes_not_dtype, "data_bytes 24 is not 6 elements of 8 bytes (float64)"),
};

static void each_malformed_header_is_refused_with_its_reason(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
		struct mc_tensor_hdr h, out, untouched;
		uint64_t total = TOTAL;
		mc_status st;

		sample(&h);
		faults[i].breakit(&h, &total);
		memset(&out, 0xa5, sizeof(out));
		untouched = out;
		st = decode_at(&h, total, i % 8, &out);
		if (st != MC_ERR_INVALID_PARAMS || !strstr(mc_last_error(), faults[i].reason))
			fail_msg("%s: got %d (%s), want ERR_INVALID_PARAMS and \"%s\"",
				 faults[i].what, st, mc_last_error(), faults[i].reason);
		assert_non_null(strstr(mc_last_error(), "stored tensor: "));
		assert_non_null(strstr(mc_last_error(), "(ERR_INVALID_PARAMS)"));
		assert_memory_equal(&out, &untouched, sizeof(out));
		assert_int_equal(mc_tensor_hdr_validate(&h, total), MC_ERR_INVALID_PARAMS);
		assert_non_null(strstr(mc_last_error(), faults[i].reason));
	}
}

static void names_and_sizes_cover_the_format(void **state)
{
	static const size_t sizes[MC_TENSOR_DTYPE_COUNT] = {4, 8, 1, 1, 2, 2, 4, 4,
							    8, 8, 1, 2, 2, 1, 1};
	(void)state;

	assert_int_equal(MC_TENSOR_DTYPE_COUNT, 15);
	for (int32_t d = 0; d < MC_TENSOR_DTYPE_COUNT; d++) {
		assert_int_equal(mc_tensor_dtype_size(d), sizes[d]);
		assert_non_null(mc_tensor_dtype_name(d));
	}
	assert_string_equal(mc_tensor_dtype_name(MC_TENSOR_DTYPE_FLOAT32), "float32");
	assert_string_equal(mc_tensor_dtype_name(MC_TENSOR_DTYPE_FLOAT8_E5M2), "float8_e5m2");
	assert_int_equal(mc_tensor_dtype_size(-1), 0);
	assert_int_equal(mc_tensor_dtype_size(MC_TENSOR_DTYPE_COUNT), 0);
	assert_null(mc_tensor_dtype_name(MC_TENSOR_DTYPE_COUNT));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(layout_is_upstreams),
		cmocka_unit_test(full_shard_scalar_and_empty_round_trip),
		cmocka_unit_test(each_malformed_header_is_refused_with_its_reason),
		cmocka_unit_test(names_and_sizes_cover_the_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

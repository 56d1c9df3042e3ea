/*
 * tests/unit/test_conductor_answer.c - the hand-encoded /schedule answer
 * (conductor/answer.h): every shape it writes parses back with jansson to
 * the values it was given -- the two ranges of the reused prefix, null
 * refs, echoed keys and request ids, the rejection's fields -- strings
 * with quotes and control bytes are escaped, and times keep their value
 * to the nanosecond.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/buf.h"
#include "conductor/answer.h"

static json_t *parse(struct mc_buf *b)
{
	json_error_t err;
	json_t *j;

	assert_int_equal(b->err, MC_OK);
	j = json_loadb((const char *)b->data, b->len, JSON_REJECT_DUPLICATES, &err);
	if (!j)
		fail_msg("not JSON (%s): %.*s", err.text, (int)b->len, (const char *)b->data);
	return j;
}

static const struct mc_conductor_ref refs[] = {
	{"pa", "127.0.0.1:15000"},
	{"pb", "127.0.0.1:15001"},
};
static const uint32_t matches[] = {4, 1};

static void fetch_is_two_ranges(void **state)
{
	struct mc_sched_choice ch = {.prefill = 1,
				     .decode = 0,
				     .local_blocks = 1,
				     .prefix_blocks = 4,
				     .fetch_from = 0,
				     .fetch_blocks = 3,
				     .prefix_tokens = 2048,
				     .queue_s = 0,
				     .transfer_s = 0.05,
				     .prefill_s = 0.058,
				     .ttft_s = 0.108,
				     .tbt_s = 0.0088};
	struct mc_conductor_ref d = {"d0", ""};
	struct mc_conductor_answer a = {
		.ch = &ch, .pre = refs, .matches = matches, .n_pre = 2, .decode = &d};
	struct mc_buf b;
	json_t *j, *r;

	(void)state;
	mc_buf_init(&b);
	mc_conductor_answer_encode(&a, &b);
	j = parse(&b);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "prefill"), "id")),
			    "pb");
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "decode"), "id")),
			    "d0");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(j, "fetch_from"), "segment")),
		"127.0.0.1:15000");
	assert_true(json_real_value(json_object_get(j, "ttft_s")) == 0.108);
	assert_true(json_real_value(json_object_get(json_object_get(j, "predicted"),
						    "transfer_s")) == 0.05);
	assert_int_equal(json_integer_value(json_object_get(j, "prefix_tokens")), 2048);
	r = json_object_get(j, "ranges");
	assert_int_equal(json_array_size(r), 2);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 0), "first")), 0);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 0), "count")), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(r, 0), "instance")),
			    "pb");
	assert_true(json_is_false(json_object_get(json_array_get(r, 0), "fetch")));
	assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 1), "first")), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 1), "count")), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(r, 1), "instance")),
			    "pa");
	assert_true(json_is_true(json_object_get(json_array_get(r, 1), "fetch")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "matches"), "pa")),
			 4);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "matches"), "pb")),
			 1);
	assert_null(json_object_get(j, "keys"));
	assert_null(json_object_get(j, "request_id"));
	assert_null(json_object_get(j, "error"));
	json_decref(j);

	/* the buffer is reused: a reset and a second answer, no prefix at all */
	ch = (struct mc_sched_choice){.prefill = 0, .decode = -1, .fetch_from = -1};
	a.decode = NULL;
	mc_buf_reset(&b);
	mc_conductor_answer_encode(&a, &b);
	j = parse(&b);
	assert_true(json_is_null(json_object_get(j, "decode")));
	assert_true(json_is_null(json_object_get(j, "fetch_from")));
	assert_int_equal(json_array_size(json_object_get(j, "ranges")), 0);
	json_decref(j);
	mc_buf_release(&b);
}

static void keys_ids_and_rejection_are_echoed(void **state)
{
	static const char weird[] = "q\"u\\o\ntab\t\x01\xc3\xa9";
	struct mc_sched_choice ch = {.prefill = 0,
				     .decode = -1,
				     .local_blocks = 2,
				     .prefix_blocks = 2,
				     .fetch_from = -1};
	struct mc_proto_str keys[] = {{"kv_00", 5}, {weird, sizeof(weird) - 1}};
	struct mc_conductor_ref odd[] = {{"p.1", weird}};
	struct mc_conductor_answer a = {.ch = &ch,
					.pre = odd,
					.matches = matches,
					.n_pre = 1,
					.keys = keys,
					.n_keys = 2,
					.echo_keys = true,
					.rid_kind = MC_CONDUCTOR_RID_STR,
					.rid_str = weird,
					.rid_len = sizeof(weird) - 1,
					.error = "predicted TTFT \"4\" s",
					.rejected = "ttft",
					.ttft_slo_s = 0.01,
					.tbt_slo_s = 0.1};
	struct mc_buf b;
	json_t *j;

	(void)state;
	mc_buf_init(&b);
	mc_conductor_answer_encode(&a, &b);
	j = parse(&b);
	assert_string_equal(json_string_value(json_array_get(json_object_get(j, "keys"), 1)),
			    weird);
	assert_string_equal(json_string_value(json_object_get(j, "request_id")), weird);
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(j, "prefill"), "segment")),
		weird);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(j, "ranges"), 0), "segment")),
			    weird);
	assert_string_equal(json_string_value(json_object_get(j, "error")),
			    "predicted TTFT \"4\" s");
	assert_string_equal(json_string_value(json_object_get(j, "rejected")), "ttft");
	assert_true(json_real_value(json_object_get(j, "ttft_slo_s")) == 0.01);
	json_decref(j);

	a.rid_kind = MC_CONDUCTOR_RID_INT;
	a.rid_int = INT64_MIN;
	mc_buf_reset(&b);
	mc_conductor_answer_encode(&a, &b);
	j = parse(&b);
	assert_true(json_integer_value(json_object_get(j, "request_id")) == INT64_MIN);
	json_decref(j);
	mc_buf_release(&b);
}

static double real_back(double v)
{
	struct mc_buf b;
	json_t *j;
	double r;

	mc_buf_init(&b);
	mc_buf_append_str(&b, "[");
	mc_conductor_json_real(&b, v);
	mc_buf_append_str(&b, "]");
	j = parse(&b);
	assert_true(json_is_real(json_array_get(j, 0)) || json_is_null(json_array_get(j, 0)));
	r = json_is_null(json_array_get(j, 0)) ? NAN : json_real_value(json_array_get(j, 0));
	json_decref(j);
	mc_buf_release(&b);
	return r;
}

static void reals_keep_their_value_to_the_nanosecond(void **state)
{
	static const double exact[] = {0, 1, 0.5, 0.108, 30, 0.0088, 123.456789, -2.25, 8999999.5};
	static const double big[] = {9e6, 1e300, -4.5e12, 12345678901.0};

	(void)state;
	for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
		assert_true(real_back(exact[i]) == exact[i]);
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
		assert_true(real_back(big[i]) == big[i]);
	assert_true(fabs(real_back(1.0 / 3) - 1.0 / 3) < 1e-9);
	assert_true(real_back(4e-10) == 0);
	assert_true(real_back(6e-10) == 1e-9);
	assert_true(isnan(real_back(INFINITY)));
	assert_true(isnan(real_back(NAN)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fetch_is_two_ranges),
		cmocka_unit_test(keys_ids_and_rejection_are_echoed),
		cmocka_unit_test(reals_keep_their_value_to_the_nanosecond),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

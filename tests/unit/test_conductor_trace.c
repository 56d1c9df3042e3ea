/*
 * tests/unit/test_conductor_trace.c - the trace loader (conductor/trace.h)
 * and the chained block keys (conductor/chain_hash.h): good lines parsed,
 * every kind of malformed line reported with its line number or skipped
 * by flag, a real file read, and the hash chaining prefixes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "conductor/chain_hash.h"
#include "conductor/trace.h"
#include "mooncake/log.h"

static const char good[] =
	"{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
	"\n"
	"{\"timestamp\": 27, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [0]}\r\n"
	"{\"hash_ids\": [], \"output_length\": 1, \"input_length\": 0, \"timestamp\": 30.0}";

static void good_lines_are_parsed_in_order(void **state)
{
	struct mc_trace t;
	mc_trace_init(&t);
	assert_int_equal(mc_trace_load_buffer(&t, good, strlen(good), 1, 0), MC_OK);
	assert_int_equal(t.n, 3);
	assert_int_equal(t.reqs[0].timestamp_ms, 0);
	assert_int_equal(t.reqs[0].input_length, 1000);
	assert_int_equal(t.reqs[0].output_length, 5);
	assert_int_equal(t.reqs[0].n_blocks, 2);
	assert_int_equal(t.reqs[0].hash_ids[1], 1);
	assert_int_equal(t.reqs[1].timestamp_ms, 27);
	assert_int_equal(t.reqs[1].hash_ids[0], 0);
	assert_int_equal(t.reqs[2].timestamp_ms, 30);
	assert_int_equal(t.reqs[2].n_blocks, 0);
	assert_null(t.reqs[2].hash_ids);
	assert_int_equal(t.skipped, 0);
	mc_trace_release(&t);
}

struct bad_case {
	const char *line;
	mc_status st;
	const char *msg; /* a piece of the message */
};

static const struct bad_case bad_cases[] = {
	{"not json", MC_ERR_MALFORMED_JSON, "line 2:"},
	{"[1, 2]", MC_ERR_MALFORMED_JSON, "not a JSON object"},
	{"{\"timestamp\": 0} {}", MC_ERR_MALFORMED_JSON, "text after"},
	{"{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}", MC_ERR_INVALID_PARAMS,
	 "\"timestamp\" missing"},
	{"{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}",
	 MC_ERR_INVALID_PARAMS, "out of range"},
	{"{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}",
	 MC_ERR_INVALID_PARAMS, "whole number"},
	{"{\"timestamp\": 1, \"input_length\": \"9\", \"output_length\": 1, \"hash_ids\": []}",
	 MC_ERR_INVALID_PARAMS, "not a number"},
	{"{\"timestamp\": 1, \"input_length\": 4294967296, \"output_length\": 1, \"hash_ids\": []}",
	 MC_ERR_INVALID_PARAMS, "out of range"},
	{"{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": 3}",
	 MC_ERR_INVALID_PARAMS, "not an array"},
	{"{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, -2]}",
	 MC_ERR_INVALID_PARAMS, "hash_ids[1]"},
	{"{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, 2.5]}",
	 MC_ERR_INVALID_PARAMS, "hash_ids[1]"},
	{"{\"timestamp\": 1, \"timestamp\": 2, \"input_length\": 1, \"output_length\": 1, "
	 "\"hash_ids\": []}",
	 MC_ERR_MALFORMED_JSON, "duplicate"},
};

/* Each malformed line fails the load with its line number; the good line
 * before it is kept. */
static void malformed_lines_fail_with_their_number(void **state)
{
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		struct mc_trace t;
		char buf[512];
		snprintf(buf, sizeof(buf),
			 "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
			 "\"hash_ids\": [0]}\n%s\n",
			 bad_cases[i].line);
		mc_trace_init(&t);
		assert_int_equal(mc_trace_load_buffer(&t, buf, strlen(buf), 1, 0), bad_cases[i].st);
		assert_non_null(strstr(mc_last_error(), "line 2:"));
		if (!strstr(mc_last_error(), bad_cases[i].msg))
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, mc_last_error(),
				 bad_cases[i].msg);
		assert_int_equal(t.n, 1);
		mc_trace_release(&t);
	}
}

/* With MC_TRACE_SKIP_BAD every malformed line is counted and passed over. */
static void malformed_lines_are_skipped_by_flag(void **state)
{
	struct mc_trace t;
	char buf[4096] = "";
	size_t n_bad = sizeof(bad_cases) / sizeof(bad_cases[0]);
	for (size_t i = 0; i < n_bad; i++) {
		strcat(buf, bad_cases[i].line);
		strcat(buf, "\n{\"timestamp\": 5, \"input_length\": 2, \"output_length\": 1, "
			    "\"hash_ids\": [7]}\n");
	}
	mc_trace_init(&t);
	assert_int_equal(mc_trace_load_buffer(&t, buf, strlen(buf), 1, MC_TRACE_SKIP_BAD), MC_OK);
	assert_int_equal(t.n, n_bad);
	assert_int_equal(t.skipped, n_bad);
	assert_int_equal(t.first_bad_line, 1);
	assert_int_equal(t.reqs[n_bad - 1].hash_ids[0], 7);
	mc_trace_release(&t);
}

static void a_file_is_read_line_by_line(void **state)
{
	char path[] = "/tmp/mc_trace_XXXXXX";
	int fd = mkstemp(path);
	struct mc_trace t;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, good, strlen(good)), (ssize_t)strlen(good));
	assert_int_equal(write(fd, "\n{oops\n", 7), 7);
	close(fd);
	mc_trace_init(&t);
	assert_int_equal(mc_trace_load_file(&t, path, 0), MC_ERR_MALFORMED_JSON);
	assert_non_null(strstr(mc_last_error(), "line 5:"));
	assert_non_null(strstr(mc_last_error(), path));
	assert_int_equal(t.n, 3);
	mc_trace_release(&t);
	mc_trace_init(&t);
	assert_int_equal(mc_trace_load_file(&t, path, MC_TRACE_SKIP_BAD), MC_OK);
	assert_int_equal(t.n, 3);
	assert_int_equal(t.skipped, 1);
	assert_int_equal(t.first_bad_line, 5);
	assert_int_equal(t.reqs[0].hash_ids[0], 0);
	mc_trace_release(&t);
	unlink(path);
	mc_trace_init(&t);
	assert_int_equal(mc_trace_load_file(&t, path, 0), MC_ERR_FILE_NOT_FOUND);
	mc_trace_release(&t);
}

/* The shipped traces load whole and match Table 2 (A1, A2 of paper.md). */
static void the_shipped_traces_match_table_2(void **state)
{
	static const struct {
		const char *name;
		size_t n;
		double avg_in, avg_out;
	} traces[] = {
		{"conversation_trace.jsonl", 12031, 12035, 343},
		{"synthetic_trace.jsonl", 3993, 15325, 149},
	};
	const char *dir = getenv("MC_TRACE_DIR"); /* tests/unit/meson.build: ../shared/traces */
	char path[1024];
	if (!dir)
		skip();
	for (size_t k = 0; k < 2; k++) {
		struct mc_trace t;
		double in = 0, out = 0;
		snprintf(path, sizeof(path), "%s/%s", dir, traces[k].name);
		if (access(path, R_OK) != 0)
			skip();
		mc_trace_init(&t);
		assert_int_equal(mc_trace_load_file(&t, path, 0), MC_OK);
		assert_int_equal(t.n, traces[k].n);
		for (size_t i = 0; i < t.n; i++) {
			in += t.reqs[i].input_length;
			out += t.reqs[i].output_length;
			assert_int_equal(t.reqs[i].n_blocks,
					 mc_chain_hash_blocks(t.reqs[i].input_length, 512));
		}
		assert_int_equal((long)(in / t.n + 0.5), (long)traces[k].avg_in);
		assert_int_equal((long)(out / t.n + 0.5), (long)traces[k].avg_out);
		mc_trace_release(&t);
	}
}

/* ---- chained keys ---- */

static void keys_chain_over_prefixes(void **state)
{
	uint32_t a[10], b[10];
	uint64_t ka[3], kb[3];
	for (uint32_t i = 0; i < 10; i++)
		a[i] = b[i] = i * 7 + 1;
	b[5] = 999; /* second block differs */
	assert_int_equal(mc_chain_hash_blocks(10, 4), 3);
	assert_int_equal(mc_chain_hash_blocks(8, 4), 2);
	assert_int_equal(mc_chain_hash_blocks(0, 4), 0);
	assert_int_equal(mc_chain_hash(a, 10, 4, ka, 3), MC_OK);
	assert_int_equal(mc_chain_hash(b, 10, 4, kb, 3), MC_OK);
	assert_true(ka[0] == kb[0]);
	assert_true(ka[1] != kb[1]);
	/* the third blocks are equal, their keys are not: the key carries the prefix */
	assert_true(ka[2] != kb[2]);
	assert_true(ka[0] == mc_chain_hash_block(0, a, 4));
	assert_true(ka[1] == mc_chain_hash_block(ka[0], a + 4, 4));
	assert_true(ka[2] == mc_chain_hash_block(ka[1], a + 8, 2));
	/* the same tokens after a different key give a different key */
	assert_true(mc_chain_hash_block(1, a, 4) != ka[0]);
	/* pinned values: keys must not change across versions or hosts (XXH3's
	 * output is fixed since xxHash 0.8.0; computed with 0.8.1) */
	assert_true(ka[0] == 0xabe561c46996b7dfull);
	assert_true(ka[1] == 0xe5a993d90036436cull);
	assert_true(ka[2] == 0x89749adb07754ab3ull);
	assert_true(mc_chain_hash_block(0, a, 0) == mc_chain_hash_block(0, b, 0));
}

static void bad_hash_arguments_are_refused(void **state)
{
	uint32_t a[4] = {1, 2, 3, 4};
	uint64_t k[1] = {42};
	assert_int_equal(mc_chain_hash(a, 4, 0, k, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_chain_hash(a, 4, 2, k, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(k[0], 42);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(good_lines_are_parsed_in_order),
		cmocka_unit_test(malformed_lines_fail_with_their_number),
		cmocka_unit_test(malformed_lines_are_skipped_by_flag),
		cmocka_unit_test(a_file_is_read_line_by_line),
		cmocka_unit_test(the_shipped_traces_match_table_2),
		cmocka_unit_test(keys_chain_over_prefixes),
		cmocka_unit_test(bad_hash_arguments_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

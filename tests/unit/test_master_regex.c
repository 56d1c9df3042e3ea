/*
 * tests/unit/test_master_regex.c - the master's regex dialect and limits
 * (master/key_regex.h).
 *
 * Upstream matches keys with std::regex's ECMAScript grammar by search; the
 * cases here are the ones where POSIX ERE (what the master used before)
 * and ECMAScript disagree, and patterns that backtrack exponentially, which
 * must fail on a limit quickly instead of running for minutes.  Every case
 * runs on PCRE2's JIT and on its interpreter.
 *
 * Then the master's two regex calls through mc_master_handle (the dialect
 * as a client sees it, refusals that change nothing) and as jobs run in
 * slices with puts and removes in between (mc_master_handle_start /
 * mc_master_job_run, what the daemon does): every object present for the
 * whole scan is found exactly once, however the table grew meanwhile.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "master/key_regex.h"
#include "master/master.h"
#include "mooncake/status.h"
#include "store/proto.h"

static const struct mc_regex_limits LIM = {
	.match_limit = 1000000,
	.depth_limit = 1000000,
	.heap_bytes = 16u << 20,
};

/* 1 match, 0 no match; the pattern and subject are NUL-free C strings. */
static int hit(const char *pat, const char *s, bool no_jit)
{
	struct mc_regex_limits lim = LIM;
	struct mc_regex *re;
	bool m = false;

	lim.no_jit = no_jit;
	assert_int_equal(mc_regex_new(pat, strlen(pat), &lim, &re), MC_OK);
	assert_int_equal(mc_regex_search(re, s, strlen(s), &m), MC_OK);
	mc_regex_free(re);
	return m;
}

static void dialect(bool no_jit)
{
	/* ECMAScript classes: \d is a digit, not the letter d (POSIX: "d") */
	assert_true(hit("^key_\\d+$", "key_12", no_jit));
	assert_false(hit("^key_\\d+$", "key_dd", no_jit));
	assert_true(hit("^\\w+\\s\\w+$", "a_1 b", no_jit));
	assert_false(hit("^\\w+$", "a-b", no_jit));
	/* non-capturing groups, lazy quantifiers, lookahead */
	assert_true(hit("^(?:ab)+$", "ababab", no_jit));
	assert_false(hit("^(?:ab)+$", "abba", no_jit));
	assert_true(hit("^a+?b$", "aaab", no_jit));
	assert_true(hit("foo(?=bar)", "xfoobar", no_jit));
	assert_false(hit("foo(?=bar)", "xfoobaz", no_jit));
	assert_true(hit("foo(?!bar)", "xfoobaz", no_jit));
	/* search semantics: anywhere in the key */
	assert_true(hit("ay", "layer1", no_jit));
	assert_true(hit("\\d", "abc9", no_jit));
	/* anchors: $ only at the very end, not before a final newline */
	assert_true(hit("^abc$", "abc", no_jit));
	assert_false(hit("^abc$", "abc\n", no_jit));
	assert_false(hit("^bc", "abc", no_jit));
	/* '.' excludes line terminators; [^] takes any byte */
	assert_false(hit("^a.b$", "a\nb", no_jit));
	assert_false(hit("^a.b$", "a\rb", no_jit));
	assert_true(hit("^a[^]b$", "a\nb", no_jit));
	assert_false(hit("a[]b", "ab", no_jit));
	/* \uXXXX; a back-reference to a group that did not take part is empty */
	assert_true(hit("^\\u0041$", "A", no_jit));
	assert_true(hit("^(a)?\\1b$", "b", no_jit));
	assert_true(hit("^(a+)\\1$", "aaaa", no_jit));
	assert_false(hit("^(a+)\\1$", "aaa", no_jit));
	/* case matters */
	assert_false(hit("^KEY$", "key", no_jit));
}

static void test_dialect_jit(void **state)
{
	(void)state;
	dialect(false);
}

static void test_dialect_interpreter(void **state)
{
	(void)state;
	dialect(true);
}

static void test_bytes(void **state)
{
	static const char key[] = {'x', 'a', '\0', 'b', 'y'};
	struct mc_regex *re;
	bool m = false;

	(void)state;
	/* a NUL in the pattern and in the key is a byte like any other */
	assert_int_equal(mc_regex_new("a\0b", 3, &LIM, &re), MC_OK);
	assert_int_equal(mc_regex_search(re, key, sizeof(key), &m), MC_OK);
	assert_true(m);
	mc_regex_free(re);
	/* keys are bytes: a pattern cannot switch to UTF-8 */
	assert_int_equal(mc_regex_new("(*UTF)a", 7, &LIM, &re), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_regex_new("\\xff", 4, &LIM, &re), MC_OK);
	assert_int_equal(mc_regex_search(re, "\xff", 1, &m), MC_OK);
	assert_true(m);
	mc_regex_free(re);
	mc_regex_free(NULL);
}

static void test_bad_patterns(void **state)
{
	static const char *const bad[] = {"([a-z", "*(", "(abc", "a{2,1}", "\\", "(?<n"};
	struct mc_regex *re = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(mc_regex_new(bad[i], strlen(bad[i]), &LIM, &re),
				 MC_ERR_INVALID_PARAMS);
		/* the message quotes the pattern and says what is wrong where */
		assert_non_null(strstr(mc_last_error(), bad[i]));
		assert_non_null(strstr(mc_last_error(), "at offset"));
	}
	assert_int_equal(mc_regex_new("(abc", 4, &LIM, &re), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "missing closing parenthesis"));
}

/* Exponential backtracking ends on a limit, with a message naming it. */
static void catastrophic(bool no_jit)
{
	static const char *const pats[] = {"(a|aa)+$", "^(a+)+\\1b$", "(a*)*!b"};
	struct mc_regex_limits lim = LIM;
	char key[1001];

	lim.no_jit = no_jit;
	memset(key, 'a', 1000);
	key[1000] = 'b'; /* "b" at the end: \1b and !b cannot be skipped by a scan for 'b' */
	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++) {
		struct mc_regex *re;
		bool m = true;
		uint64_t t0 = mc_now_us();
		mc_status st;

		assert_int_equal(mc_regex_new(pats[i], strlen(pats[i]), &lim, &re), MC_OK);
		if (no_jit)
			assert_false(mc_regex_jit(re));
		st = mc_regex_search(re, key, sizeof(key), &m);
		/* a match, no match (PCRE2 may prove it without backtracking), or a limit */
		if (st != MC_OK) {
			assert_int_equal(st, MC_ERR_INVALID_PARAMS);
			assert_non_null(strstr(mc_last_error(), "too complex"));
		}
		/* a million steps: milliseconds; generous for a loaded machine */
		assert_true(mc_now_us() - t0 < 2000000);
		mc_regex_free(re);
	}
	/* this one cannot be short-cut: every split of the a's is tried */
	{
		struct mc_regex *re;
		bool m;

		key[1000] = '!';
		assert_int_equal(mc_regex_new("(a|aa)+$", 8, &lim, &re), MC_OK);
		assert_int_equal(mc_regex_search(re, key, sizeof(key), &m), MC_ERR_INVALID_PARAMS);
		assert_non_null(strstr(mc_last_error(), "match limit of 1000000"));
		mc_regex_free(re);
	}
	/* backtracking memory: deep nesting under a small heap / JIT stack */
	{
		struct mc_regex *re;
		char deep[20001];
		bool m;
		mc_status st;

		lim.heap_bytes = 64u << 10;
		lim.match_limit = lim.depth_limit = 100000000;
		memset(deep, 'a', sizeof(deep) - 1);
		deep[sizeof(deep) - 1] = '!';
		assert_int_equal(mc_regex_new("^(a|ab)*$", 9, &lim, &re), MC_OK);
		st = mc_regex_search(re, deep, sizeof(deep), &m);
		assert_int_equal(st, MC_ERR_INVALID_PARAMS);
		assert_non_null(strstr(mc_last_error(), "too complex"));
		mc_regex_free(re);
	}
}

static void test_catastrophic_jit(void **state)
{
	(void)state;
	catastrophic(false);
}

static void test_catastrophic_interpreter(void **state)
{
	(void)state;
	catastrophic(true);
}

/* ---- the master's regex calls ---------------------------------------------- */

#define NOW 1000000

static const struct mc_store_uuid CA = {1, 1}, SA = {10, 1};

struct call {
	struct mc_master_job *job;
	struct mc_buf out;
	struct mc_store_msg resp;
	char err[512];
};

/* Encode and decode the request, then start it. */
static mc_status start(struct mc_master *m, uint16_t type, const void *body, struct call *c)
{
	struct mc_buf b;
	struct mc_store_msg req;
	mc_status st;

	mc_buf_init(&b);
	mc_buf_init(&c->out);
	assert_int_equal(mc_store_request_encode(&b, type, 7, body), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MC_PROTO_MAX_PAYLOAD, &req), MC_OK);
	st = mc_master_handle_start(m, &req, NOW, &c->out, &c->job);
	mc_store_msg_release(&req);
	mc_buf_release(&b);
	return st;
}

/* Decode the answer of a finished call; its status. */
static mc_status answer(struct call *c, mc_status st)
{
	assert_int_equal(
		mc_store_msg_decode(c->out.data, c->out.len, MC_PROTO_MAX_PAYLOAD, &c->resp),
		MC_OK);
	assert_int_equal(c->resp.hdr.status, st);
	snprintf(c->err, sizeof(c->err), "%.*s", (int)c->resp.error.len,
		 c->resp.error.ptr ? c->resp.error.ptr : "");
	if (st != MC_OK)
		assert_true(c->resp.error.len > 0);
	mc_buf_release(&c->out);
	return st;
}

static void done(struct call *c)
{
	mc_store_msg_release(&c->resp);
}

/* A request run to its end in one go, as mc_master_handle does. */
static mc_status call(struct mc_master *m, uint16_t type, const void *body, struct call *c)
{
	struct mc_buf b;
	struct mc_store_msg req;
	mc_status st;

	mc_buf_init(&b);
	mc_buf_init(&c->out);
	assert_int_equal(mc_store_request_encode(&b, type, 7, body), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MC_PROTO_MAX_PAYLOAD, &req), MC_OK);
	st = mc_master_handle(m, &req, NOW, &c->out);
	mc_store_msg_release(&req);
	mc_buf_release(&b);
	return answer(c, st);
}

static mc_status call0(struct mc_master *m, uint16_t type, const void *body)
{
	struct call c;
	mc_status st = call(m, type, body, &c);

	done(&c);
	return st;
}

static struct mc_master *master_new(uint64_t budget_ms)
{
	struct mc_master_config cfg;
	struct mc_master *m;
	struct mc_store_mount_req r = {
		CA,
		{.id = SA,
		 .name = mc_proto_str_c("a:1"),
		 .base = 0x100000,
		 .size = 256u << 20,
		 .te_endpoint = mc_proto_str_c("a:1"),
		 .protocol = mc_proto_str_c("tcp"),
		 .host_id = mc_proto_str_c("h")},
	};

	mc_master_config_defaults(&cfg);
	cfg.client_ttl_ms = 1000000000000ull;
	cfg.regex_time_budget_ms = budget_ms;
	assert_int_equal(mc_master_new(&cfg, &m), MC_OK);
	assert_int_equal(call0(m, MC_STORE_MOUNT_SEGMENT, &r), MC_OK);
	return m;
}

static void put(struct mc_master *m, const char *key)
{
	struct mc_store_put_start_req ps = {.client_id = CA,
					    .key = mc_proto_str_c(key),
					    .value_len = 16,
					    .config = {.replica_num = 1}};
	struct mc_store_put_end_req pe = {
		.client_id = CA, .replica_type = MC_STORE_REPLICA_ALL, .key = mc_proto_str_c(key)};

	assert_int_equal(call0(m, MC_STORE_PUT_START, &ps), MC_OK);
	assert_int_equal(call0(m, MC_STORE_PUT_END, &pe), MC_OK);
}

static bool exists(struct mc_master *m, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(""), mc_proto_str_c(key)};
	struct call c;
	bool e;

	assert_int_equal(call(m, MC_STORE_EXIST_KEY, &r, &c), MC_OK);
	e = c.resp.body.exist_resp.exists;
	done(&c);
	return e;
}

static void test_master_dialect(void **state)
{
	struct mc_master *m = master_new(10000);
	struct mc_store_remove_regex_req rr = {mc_proto_str_c(""), mc_proto_str_c("^key_\\d+$"),
					       true};
	struct mc_store_regex_req rq = {mc_proto_str_c(""), mc_proto_str_c("^(?:key)_d+$")};
	struct call c;

	(void)state;
	put(m, "key_12");
	put(m, "key_dd");
	put(m, "other");
	/* POSIX ERE read \d as "d": it removed key_dd and kept key_12 */
	assert_int_equal(call(m, MC_STORE_REMOVE_BY_REGEX, &rr, &c), MC_OK);
	assert_int_equal(c.resp.body.count_resp.count, 1);
	done(&c);
	assert_false(exists(m, "key_12"));
	assert_true(exists(m, "key_dd"));
	/* (?: is a group, not an error */
	assert_int_equal(call(m, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq, &c), MC_OK);
	assert_int_equal(c.resp.body.regex_replica_list.n_items, 1);
	assert_int_equal(c.resp.body.regex_replica_list.items[0].key.len, 6);
	assert_memory_equal(c.resp.body.regex_replica_list.items[0].key.ptr, "key_dd", 6);
	done(&c);
	/* a bad pattern: INVALID_PARAMS and PCRE2's reason */
	rq.pattern = mc_proto_str_c("(?:key");
	assert_int_equal(call(m, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq, &c),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(c.err, "missing closing parenthesis"));
	done(&c);
	mc_master_free(m);
}

/* Over a limit or over the budget: INVALID_PARAMS, and nothing removed. */
static void test_master_refusals(void **state)
{
	struct mc_master *m = master_new(10000);
	struct mc_store_remove_regex_req rr = {mc_proto_str_c(""), mc_proto_str_c("(a|aa)+$"),
					       true};
	char key[600];
	struct call c;
	uint64_t t0;

	(void)state;
	memset(key, 'a', sizeof(key));
	for (int i = 0; i < 20; i++) {
		snprintf(key + 500, 100, "!%d", i);
		put(m, key);
	}
	t0 = mc_now_us();
	assert_int_equal(call(m, MC_STORE_REMOVE_BY_REGEX, &rr, &c), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(c.err, "(a|aa)+$"));
	assert_non_null(strstr(c.err, "match limit"));
	done(&c);
	assert_true(mc_now_us() - t0 < 2000000); /* one key's limit, not minutes */
	assert_true(exists(m, key));
	mc_master_free(m);

	/* many keys each under the match limit: the 1 ms budget runs out */
	m = master_new(1);
	for (int i = 0; i < 3000; i++) {
		snprintf(key, sizeof(key), "aaaaaaaaaaaaaaaaaaaa!%d", i);
		put(m, key);
	}
	assert_int_equal(call(m, MC_STORE_REMOVE_BY_REGEX, &rr, &c), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(c.err, "time budget of 1 ms"));
	done(&c);
	assert_true(exists(m, "aaaaaaaaaaaaaaaaaaaa!0"));
	assert_true(exists(m, key));
	{
		struct mc_master_metrics x;

		mc_master_metrics(m, &x);
		assert_int_equal(x.key_count, 3000);
		assert_int_equal(x.master_remove_by_regex.requests, 1);
		assert_int_equal(x.master_remove_by_regex.failures, 1);
	}
	mc_master_free(m);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Slices of a job with puts and removes between them (the table grows). */
static void test_master_scan_in_slices(void **state)
{
	enum { N = 3000, ADD = 40, ADD_MAX = 4000, DROP = 5 };
	struct mc_master *m = master_new(60000);
	struct mc_store_remove_regex_req rr = {mc_proto_str_c(""), mc_proto_str_c("^del/"), true};
	struct mc_store_regex_req rq = {mc_proto_str_c(""), mc_proto_str_c("^keep/")};
	int added = 0, dropped = 0, slices = 0;
	char k[32];
	struct call c;
	mc_status st;

	(void)state;
	for (int i = 0; i < N; i++) {
		snprintf(k, sizeof(k), "del/%d", i);
		put(m, k);
		snprintf(k, sizeof(k), "keep/%d", i);
		put(m, k);
	}
	st = start(m, MC_STORE_REMOVE_BY_REGEX, &rr, &c);
	assert_int_equal(st, MC_INPROGRESS);
	assert_int_equal(c.out.len, 0);
	while (st == MC_INPROGRESS) {
		st = mc_master_job_run(m, c.job, NOW, 1, &c.out);
		slices++;
		if (st != MC_INPROGRESS)
			break;
		for (int i = 0; i < ADD && added < ADD_MAX; i++, added++) {
			snprintf(k, sizeof(k), "new/%d", added);
			put(m, k);
		}
		for (int i = 0; i < DROP && dropped < N / 2; i++, dropped++) {
			struct mc_store_remove_req r = {mc_proto_str_c(""), mc_proto_str_c(k),
							true};

			snprintf(k, sizeof(k), "keep/%d", dropped);
			r.key = mc_proto_str_c(k);
			assert_int_equal(call0(m, MC_STORE_REMOVE, &r), MC_OK);
		}
	}
	assert_true(slices > 4);
	assert_int_equal(answer(&c, st), MC_OK);
	assert_int_equal(c.resp.body.count_resp.count, N);
	done(&c);
	/* 2 N + 145 objects pass 3/4 of 8192 slots: the table grew during the scan */
	assert_true(added >= 200);
	for (int i = 0; i < N; i++) {
		snprintf(k, sizeof(k), "del/%d", i);
		assert_false(exists(m, k));
	}
	for (int i = 0; i < added; i++) {
		snprintf(k, sizeof(k), "new/%d", i);
		assert_true(exists(m, k));
	}

	/* a get: each key still there once, none removed meanwhile */
	added = 0;
	st = start(m, MC_STORE_GET_REPLICA_LIST_BY_REGEX, &rq, &c);
	assert_int_equal(st, MC_INPROGRESS);
	while (st == MC_INPROGRESS) {
		st = mc_master_job_run(m, c.job, NOW, 1, &c.out);
		if (st != MC_INPROGRESS)
			break;
		for (int i = 0; i < ADD && added < ADD_MAX; i++, added++) {
			snprintf(k, sizeof(k), "new2/%d", added);
			put(m, k);
		}
		for (int i = 0; i < DROP && dropped < N; i++, dropped++) {
			struct mc_store_remove_req r = {mc_proto_str_c(""), mc_proto_str_c(k),
							true};

			snprintf(k, sizeof(k), "keep/%d", dropped);
			r.key = mc_proto_str_c(k);
			assert_int_equal(call0(m, MC_STORE_REMOVE, &r), MC_OK);
		}
	}
	assert_int_equal(answer(&c, st), MC_OK);
	{
		const struct mc_store_regex_replica_list *l = &c.resp.body.regex_replica_list;
		char **keys = calloc(l->n_items + 1, sizeof(*keys));

		assert_non_null(keys);
		assert_int_equal(l->n_items, N - dropped);
		for (uint32_t i = 0; i < l->n_items; i++) {
			keys[i] = strndup(l->items[i].key.ptr, l->items[i].key.len);
			assert_non_null(keys[i]);
			assert_int_equal(l->items[i].list.n_replicas, 1);
		}
		qsort(keys, l->n_items, sizeof(*keys), cmp_str);
		for (uint32_t i = 0; i < l->n_items; i++) {
			int n = -1;

			assert_int_equal(sscanf(keys[i], "keep/%d", &n), 1);
			assert_true(n >= dropped && n < N);
			if (i)
				assert_string_not_equal(keys[i - 1], keys[i]);
		}
		for (uint32_t i = 0; i < l->n_items; i++)
			free(keys[i]);
		free(keys);
	}
	done(&c);

	/* a job dropped unfinished changes nothing and frees what it held */
	st = start(m, MC_STORE_REMOVE_BY_REGEX, &rr, &c);
	assert_int_equal(st, MC_INPROGRESS);
	assert_int_equal(mc_master_job_run(m, c.job, NOW, 1, &c.out), MC_INPROGRESS);
	mc_master_job_free(m, c.job);
	mc_buf_release(&c.out);
	assert_true(exists(m, "new/0"));
	mc_master_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dialect_jit),
		cmocka_unit_test(test_dialect_interpreter),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_bad_patterns),
		cmocka_unit_test(test_catastrophic_jit),
		cmocka_unit_test(test_catastrophic_interpreter),
		cmocka_unit_test(test_master_dialect),
		cmocka_unit_test(test_master_refusals),
		cmocka_unit_test(test_master_scan_in_slices),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

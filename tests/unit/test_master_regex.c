/*
 * tests/unit/test_master_regex.c - the master's regex dialect and limits
 * (master/key_regex.h).
 *
 * Upstream matches keys with std::regex's ECMAScript grammar by search; the
 * cases here are the ones where POSIX ERE (what the master used before)
 * and ECMAScript disagree, and patterns that backtrack exponentially, which
 * must fail on a limit quickly instead of running for minutes.  Every case
 * runs on PCRE2's JIT and on its interpreter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/log.h"
#include "base/time.h"
#include "master/key_regex.h"
#include "mooncake/status.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dialect_jit),
		cmocka_unit_test(test_dialect_interpreter),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_bad_patterns),
		cmocka_unit_test(test_catastrophic_jit),
		cmocka_unit_test(test_catastrophic_interpreter),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

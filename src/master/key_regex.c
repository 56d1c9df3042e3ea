/*
 * master/key_regex.c - upstream's regex dialect on PCRE2, with limits.
 *
 * Upstream's master matches keys with std::regex in its default ECMAScript
 * grammar, by search (anywhere in the key).  POSIX regcomp, which this
 * master used first, speaks ERE instead (no \d, no (?:...)), and its
 * back-reference matcher has no bound on time or memory: one request with
 * "^(a+)+\1b$" over a few long keys held the RPC thread for a minute and
 * grew the process by gigabytes.  PCRE2 (libpcre2-8) is a backtracking
 * matcher of the Perl family, close enough to ECMAScript that a handful of
 * options make the common differences go away, and it bounds each match:
 *
 *   - PCRE2_DOLLAR_ENDONLY: '$' matches only at the end (PCRE2 also
 *     matches before a final newline by default);
 *   - PCRE2_MATCH_UNSET_BACKREF: \1 to a group that did not take part
 *     matches the empty string, as ECMAScript says;
 *   - PCRE2_ALT_BSUX: \uXXXX is a code point and \xHH takes two digits;
 *   - PCRE2_ALLOW_EMPTY_CLASS: "[]" never matches and "[^]" is any byte;
 *   - newline convention ANYCRLF: '.' excludes \r and \n (ECMAScript's
 *     line terminators that fit in a byte);
 *   - PCRE2_NEVER_UTF / PCRE2_NEVER_UCP: keys are bytes, as std::regex on a
 *     std::string sees them; a pattern cannot switch to UTF ("(*UTF)"),
 *     which would make PCRE2 refuse keys that are not valid UTF-8.
 *     PCRE2_NEVER_BACKSLASH_C goes with them.
 * \d \w \s are ASCII classes without UCP, as in ECMAScript.  What PCRE2
 * has on top (lookbehind, atomic groups, possessive quantifiers, inline
 * options) is accepted: refusing it would need a second parser, and a
 * pattern that uses it means the same thing in both dialects or is an
 * error upstream.  A NUL in the key is matched like any byte (std::regex
 * on a std::string sees the whole string too).
 *
 * Limits, per match (per key): the match limit counts backtracking steps
 * (about 2 ns each on the JIT, 10 ns on the interpreter, so the default
 * million bounds one key to a few milliseconds); the depth limit bounds the
 * nesting of backtracking points; the heap limit bounds the interpreter's
 * backtracking memory, and the same size caps the JIT's stack.  A match
 * that hits one fails with MC_ERR_INVALID_PARAMS naming it; the caller
 * refuses the whole request (master.c), as std::regex throws
 * error_complexity / error_stack.
 *
 * Memory goes through mc_malloc (a PCRE2 general context), so the test
 * allocator sees it.  This file must never keep state between calls beyond
 * what the struct holds: the master compiles per request.
 */
#define MC_LOG_MODULE "master"
#include "master/key_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/log.h"

#define JIT_STACK_START (32u << 10)
#define SHOW		80 /* pattern bytes quoted in messages */

struct mc_regex {
	pcre2_general_context *gctx;
	pcre2_code *code;
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jstack; /* NULL: interpreter */
	struct mc_regex_limits lim;
};

static void *rx_malloc(PCRE2_SIZE n, void *arg)
{
	(void)arg;
	return mc_malloc(n);
}

static void rx_free(void *p, void *arg)
{
	(void)arg;
	mc_free(p);
}

void mc_regex_free(struct mc_regex *re)
{
	if (!re)
		return;
	if (re->jstack)
		pcre2_jit_stack_free(re->jstack);
	pcre2_match_context_free(re->mctx);
	pcre2_match_data_free(re->md);
	pcre2_code_free(re->code);
	pcre2_general_context_free(re->gctx);
	mc_free(re);
}

static int show(size_t len)
{
	return (int)(len < SHOW ? len : SHOW);
}

mc_status mc_regex_new(const char *pattern, size_t len, const struct mc_regex_limits *lim,
		       struct mc_regex **out)
{
	const uint32_t opts = PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_UNSET_BACKREF | PCRE2_ALT_BSUX |
			      PCRE2_ALLOW_EMPTY_CLASS | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP |
			      PCRE2_NEVER_BACKSLASH_C;
	struct mc_regex *re = mc_calloc(1, sizeof(*re));
	pcre2_compile_context *cctx = NULL;
	PCRE2_SIZE eoff = 0;
	int err = 0;
	mc_status st = MC_ERR_NOMEM;

	if (!re)
		return mc_set_error(MC_ERR_NOMEM, "regex: out of memory");
	re->lim = *lim;
	re->gctx = pcre2_general_context_create(rx_malloc, rx_free, NULL);
	if (re->gctx)
		cctx = pcre2_compile_context_create(re->gctx);
	if (!cctx)
		goto err_nomem;
	pcre2_set_newline(cctx, PCRE2_NEWLINE_ANYCRLF);
	re->code =
		pcre2_compile((PCRE2_SPTR)(pattern ? pattern : ""), len, opts, &err, &eoff, cctx);
	pcre2_compile_context_free(cctx);
	if (!re->code) {
		PCRE2_UCHAR why[160];

		if (err == PCRE2_ERROR_NOMEMORY || err == PCRE2_ERROR_HEAP_FAILED)
			goto err_nomem;
		if (pcre2_get_error_message(err, why, sizeof(why)) < 0)
			snprintf((char *)why, sizeof(why), "PCRE2 error %d", err);
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "bad regular expression '%.*s': %s at offset %zu", show(len),
				  pattern ? pattern : "", (const char *)why, (size_t)eoff);
		goto err_free;
	}
	re->md = pcre2_match_data_create(1, re->gctx);
	re->mctx = pcre2_match_context_create(re->gctx);
	if (!re->md || !re->mctx)
		goto err_nomem;
	pcre2_set_match_limit(re->mctx, lim->match_limit);
	pcre2_set_depth_limit(re->mctx, lim->depth_limit);
	/* the heap limit is in KiB; at least one */
	pcre2_set_heap_limit(
		re->mctx,
		(uint32_t)(lim->heap_bytes >> 10 > UINT32_MAX
				   ? UINT32_MAX
				   : (lim->heap_bytes >> 10 ? lim->heap_bytes >> 10 : 1)));
	/* The JIT is optional (not every platform has one): without it the
	 * interpreter runs the same pattern under the same limits. */
	if (!lim->no_jit && pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0) {
		size_t max = lim->heap_bytes < JIT_STACK_START ? JIT_STACK_START : lim->heap_bytes;

		re->jstack = pcre2_jit_stack_create(JIT_STACK_START, max, re->gctx);
		if (!re->jstack)
			goto err_nomem;
		pcre2_jit_stack_assign(re->mctx, NULL, re->jstack);
	}
	*out = re;
	return MC_OK;

err_nomem:
	st = mc_set_error(MC_ERR_NOMEM, "regex: out of memory compiling '%.*s'", show(len),
			  pattern ? pattern : "");
err_free:
	mc_regex_free(re);
	return st;
}

mc_status mc_regex_search(struct mc_regex *re, const char *s, size_t len, bool *match_out)
{
	int rc = pcre2_match(re->code, (PCRE2_SPTR)(s ? s : ""), len, 0, 0, re->md, re->mctx);
	PCRE2_UCHAR why[120];

	if (rc >= 0) {
		*match_out = true;
		return MC_OK;
	}
	switch (rc) {
	case PCRE2_ERROR_NOMATCH:
		*match_out = false;
		return MC_OK;
	case PCRE2_ERROR_MATCHLIMIT:
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "pattern too complex: the match limit of %u backtracking "
				    "steps was reached on a %zu-byte key",
				    re->lim.match_limit, len);
	case PCRE2_ERROR_DEPTHLIMIT:
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "pattern too complex: the depth limit of %u nested "
				    "backtracking points was reached on a %zu-byte key",
				    re->lim.depth_limit, len);
	case PCRE2_ERROR_HEAPLIMIT:
	case PCRE2_ERROR_JIT_STACKLIMIT:
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "pattern too complex: backtracking needs more than %llu bytes "
				    "on a %zu-byte key",
				    (unsigned long long)re->lim.heap_bytes, len);
	case PCRE2_ERROR_NOMEMORY:
		return mc_set_error(MC_ERR_NOMEM, "regex: out of memory matching a %zu-byte key",
				    len);
	default:
		if (pcre2_get_error_message(rc, why, sizeof(why)) < 0)
			snprintf((char *)why, sizeof(why), "PCRE2 error %d", rc);
		return mc_set_error(MC_ERR_INTERNAL, "regex match failed: %s", (const char *)why);
	}
}

bool mc_regex_jit(const struct mc_regex *re)
{
	return re->jstack != NULL;
}

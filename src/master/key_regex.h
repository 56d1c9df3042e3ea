/*
 * master/key_regex.h - the master's regular expressions: upstream's dialect
 * (ECMAScript, search semantics) on PCRE2, with bounded work per match.
 *
 * A pattern is compiled once per request and matched against many keys.
 * Every match is bounded by the limits it was compiled with (PCRE2's match,
 * depth and heap limits, and the JIT stack), so no key can keep the caller
 * busy for long or make it allocate without bound; the caller bounds the
 * number of keys (the master's time budget, master.c).
 *
 * Threads: a struct mc_regex is used by one thread at a time (it holds its
 * match data and JIT stack).
 */
#ifndef MC_MASTER_KEY_REGEX_H
#define MC_MASTER_KEY_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_regex;

struct mc_regex_limits {
	uint32_t match_limit; /* PCRE2 match limit per key (backtracking steps) */
	uint32_t depth_limit; /* PCRE2 depth limit per key (backtracking nesting) */
	uint64_t heap_bytes;  /* backtracking memory per key (interpreter heap, JIT stack) */
	bool no_jit;	      /* use the interpreter even where PCRE2 has a JIT */
};

/*
 * Compile pattern (len bytes, NULs allowed) in the ECMAScript-like dialect:
 * \d \w \s (ASCII), (?:...), lazy quantifiers, lookahead, back-references
 * (an unset group matches the empty string), \uXXXX, [^] for any byte, $
 * only at the very end, '.' excludes \r and \n.  PCRE2 accepts more than
 * ECMAScript (lookbehind, atomic groups, ...); "(*UTF)" and "(*UCP)" are
 * refused (keys are bytes).  MC_ERR_INVALID_PARAMS with the cause and offset
 * recorded for a bad pattern; MC_ERR_NOMEM.
 */
mc_status mc_regex_new(const char *pattern, size_t len, const struct mc_regex_limits *lim,
		       struct mc_regex **out);
/* NULL is a no-op. */
void mc_regex_free(struct mc_regex *re);

/*
 * Does re match anywhere in s (len bytes)?  *match_out on MC_OK.
 * MC_ERR_INVALID_PARAMS when a limit stopped the match (the message names
 * the limit), MC_ERR_NOMEM, MC_ERR_INTERNAL for anything else PCRE2 says.
 */
mc_status mc_regex_search(struct mc_regex *re, const char *s, size_t len, bool *match_out);

/* Whether matches run on PCRE2's JIT (false: the interpreter). */
bool mc_regex_jit(const struct mc_regex *re);

#endif

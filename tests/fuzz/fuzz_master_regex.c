/*
 * tests/fuzz/fuzz_master_regex.c - the master's regex module
 * (master/key_regex.h) on arbitrary patterns and keys.
 *
 * Patterns come off the wire (GetReplicaListByRegex, RemoveByRegex), so
 * PCRE2's compiler and matcher parse outside bytes here.  Input layout:
 * byte 0 is the pattern's length (low 7 bits) and the engine (high bit set:
 * the interpreter, else the JIT where there is one); the pattern follows,
 * and the rest is the key.  Small limits keep each input fast.  Whatever
 * the input: no crash or leak, a refused pattern says why, and a match
 * ends in one of the statuses key_regex.h promises.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fuzz.h"
#include "master/key_regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_regex_limits lim = {
		.match_limit = 20000,
		.depth_limit = 20000,
		.heap_bytes = 256u << 10,
	};
	struct mc_regex *re;
	size_t plen;
	bool hit = false;
	mc_status st;

	if (size == 0)
		return 0;
	plen = data[0] & 0x7f;
	lim.no_jit = (data[0] & 0x80) != 0;
	if (plen > size - 1)
		plen = size - 1;
	st = mc_regex_new((const char *)data + 1, plen, &lim, &re);
	if (st != MC_OK) {
		check(st == MC_ERR_INVALID_PARAMS || st == MC_ERR_NOMEM);
		check(mc_last_error()[0] != '\0');
		return 0;
	}
	if (lim.no_jit)
		check(!mc_regex_jit(re));
	st = mc_regex_search(re, (const char *)data + 1 + plen, size - 1 - plen, &hit);
	check(st == MC_OK || st == MC_ERR_INVALID_PARAMS || st == MC_ERR_NOMEM);
	mc_regex_free(re);
	return 0;
}

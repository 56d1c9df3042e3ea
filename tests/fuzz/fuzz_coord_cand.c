/*
 * tests/fuzz/fuzz_coord_cand.c - the HA candidate entry's decoder
 * (meta/coord.h, mc_coord_cand_decode) on arbitrary bytes.
 *
 * The entry's name and bytes are read back from etcd or Redis, where any
 * process that can write the coordinator may have put anything.  Input
 * layout: byte 0 is the name's length, the name follows, the rest is the
 * entry's bytes.  Whatever the input: no crash, a refusal is
 * MC_ERR_METADATA with a message, and an accepted entry is canonical:
 * encoding it again gives the same bytes, and its address is the name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fuzz.h"
#include "meta/coord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_coord_cand c;
	char again[MC_COORD_CAND_LEN];
	const char *name, *val;
	size_t nlen, vlen;
	mc_status st;

	if (size == 0)
		return 0;
	nlen = data[0];
	if (nlen > size - 1)
		nlen = size - 1;
	name = (const char *)data + 1;
	val = name + nlen;
	vlen = size - 1 - nlen;
	st = mc_coord_cand_decode(name, nlen, val, vlen, &c);
	if (st != MC_OK) {
		check(st == MC_ERR_METADATA);
		check(mc_last_error()[0] != '\0');
		return 0;
	}
	check(strlen(c.addr) == nlen && memcmp(c.addr, name, nlen) == 0);
	mc_coord_cand_encode(&c, again, sizeof(again));
	check(strlen(again) == vlen && memcmp(again, val, vlen) == 0);
	return 0;
}

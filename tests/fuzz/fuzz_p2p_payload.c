/*
 * tests/fuzz/fuzz_p2p_payload.c - the P2P store's catalog JSON
 * (src/p2p/payload.h), as any peer or etcd user may have written it.
 *
 * When decode accepts the bytes, what the reader then trusts must hold: the
 * sizes add up to size, there is one shard per max_shard_size split of
 * size_list with exactly that size, every location has a non-empty name,
 * counts are within their bounds; and encoding then decoding again gives
 * the same text (a fixed point).  A refusal is MC_ERR_MALFORMED_JSON with a
 * "p2p payload: " reason and leaves the output zeroed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "mooncake/log.h"
#include "p2p/payload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_p2p_payload p, q, zero;
	uint64_t total = 0;
	size_t k = 0, len, len2;
	char *text, *text2;
	mc_status st;

	memset(&zero, 0, sizeof(zero));
	st = mc_p2p_payload_decode((const char *)data, size, &p);
	if (st != MC_OK) {
		check(st == MC_ERR_MALFORMED_JSON || st == MC_ERR_NOMEM);
		check(st == MC_ERR_NOMEM || strncmp(mc_last_error(), "p2p payload: ", 13) == 0);
		check(memcmp(&p, &zero, sizeof(p)) == 0);
		return 0;
	}
	check(p.nsizes >= 1 && p.nsizes <= MC_P2P_BUFFERS_MAX);
	check(p.max_shard_size >= 1 && p.nshards <= MC_P2P_SHARDS_MAX);
	for (size_t b = 0; b < p.nsizes; b++) {
		check(p.size_list[b] > 0);
		total += p.size_list[b];
		for (uint64_t off = 0; off < p.size_list[b]; off += p.max_shard_size, k++) {
			uint64_t want = p.size_list[b] - off < p.max_shard_size
						? p.size_list[b] - off
						: p.max_shard_size;
			check(k < p.nshards && p.shards[k].size == want);
		}
	}
	check(k == p.nshards && total == p.size);
	for (size_t i = 0; i < p.nshards; i++) {
		const struct mc_p2p_locs *l[2] = {&p.shards[i].gold, &p.shards[i].replicas};
		for (int j = 0; j < 2; j++) {
			check(l[j]->n <= MC_P2P_LOCS_MAX);
			for (size_t n = 0; n < l[j]->n; n++)
				check(l[j]->v[n].segment_name[0] != '\0');
		}
	}
	check(mc_p2p_payload_encode(&p, &text, &len) == MC_OK);
	check(mc_p2p_payload_decode(text, len, &q) == MC_OK);
	check(mc_p2p_payload_encode(&q, &text2, &len2) == MC_OK);
	check(len == len2 && memcmp(text, text2, len) == 0);
	mc_free(text);
	mc_free(text2);
	mc_p2p_payload_release(&p);
	mc_p2p_payload_release(&q);
	return 0;
}

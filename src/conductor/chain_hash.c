/*
 * conductor/chain_hash.c - block keys of a prompt: XXH3-64 over the
 * previous block's key and this block's tokens, both little-endian.
 *
 * The streaming XXH3 state takes the previous key and the tokens without
 * copying them into one buffer; on a big-endian host the tokens are
 * swapped in a small stack buffer first so that keys never depend on the
 * host.  Pure functions: no allocation, no state.
 */
#include "conductor/chain_hash.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/endian.h"
#include "base/log.h"

size_t mc_chain_hash_blocks(size_t n_tokens, size_t block_size)
{
	return block_size ? (n_tokens + block_size - 1) / block_size : 0;
}

uint64_t mc_chain_hash_block(uint64_t prev, const uint32_t *tokens, size_t n)
{
	XXH3_state_t st;
	uint8_t key[8];

	mc_put_le64(key, prev);
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, key, sizeof(key));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	XXH3_64bits_update(&st, tokens, n * sizeof(*tokens));
#else
	for (size_t i = 0; i < n;) {
		uint8_t buf[256];
		size_t k = 0;
		for (; i < n && k + 4 <= sizeof(buf); i++, k += 4)
			mc_put_le32(buf + k, tokens[i]);
		XXH3_64bits_update(&st, buf, k);
	}
#endif
	return XXH3_64bits_digest(&st);
}

mc_status mc_chain_hash(const uint32_t *tokens, size_t n_tokens, size_t block_size,
			uint64_t *keys_out, size_t cap)
{
	size_t n;
	uint64_t prev = 0;

	if (!block_size)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "block size 0");
	n = mc_chain_hash_blocks(n_tokens, block_size);
	if (cap < n)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "%zu tokens make %zu blocks, room for %zu", n_tokens, n, cap);
	for (size_t i = 0; i < n; i++) {
		size_t off = i * block_size;
		size_t len = n_tokens - off < block_size ? n_tokens - off : block_size;
		prev = mc_chain_hash_block(prev, tokens + off, len);
		keys_out[i] = prev;
	}
	return MC_OK;
}

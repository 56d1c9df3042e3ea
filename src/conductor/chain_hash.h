/*
 * conductor/chain_hash.h - the chained prefix hash of token blocks.
 *
 * A prompt is cut into blocks of block_size tokens (the last one may be
 * shorter) and block i's key is XXH3-64 over (key of block i-1, the
 * block's tokens): key_0 hashes the tokens after a zero key.  Two prompts
 * therefore share key i exactly when they share every token up to the end
 * of block i, which is what makes a prefix match a walk over keys (paper
 * 4.2, step 1; the traces' hash_ids are such keys).  Tokens are hashed as
 * 32-bit little-endian integers, so keys agree across hosts.
 */
#ifndef MC_CONDUCTOR_CHAIN_HASH_H
#define MC_CONDUCTOR_CHAIN_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

/* Number of blocks (keys) of a prompt of n_tokens: ceil(n_tokens / block_size). */
size_t mc_chain_hash_blocks(size_t n_tokens, size_t block_size);

/* The key of one block of n tokens that follows the block whose key is prev
 * (0 for the first block). */
uint64_t mc_chain_hash_block(uint64_t prev, const uint32_t *tokens, size_t n);

/*
 * Write the keys of tokens[0..n_tokens) cut into block_size blocks into
 * keys_out, which holds cap entries.  Returns MC_OK, or
 * MC_ERR_INVALID_PARAMS when block_size is 0 or cap is smaller than
 * mc_chain_hash_blocks(n_tokens, block_size) (nothing is written then).
 */
mc_status mc_chain_hash(const uint32_t *tokens, size_t n_tokens, size_t block_size,
			uint64_t *keys_out, size_t cap);

#endif

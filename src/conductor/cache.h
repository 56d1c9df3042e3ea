/*
 * conductor/cache.h - a block cache of fixed capacity with LRU eviction
 * and pins, as the replay and the scheduler see a node's (or the global
 * pool's) KV cache.
 *
 * A cache holds up to capacity block keys.  Inserting into a full cache
 * evicts the least recently used block that is not pinned; a pinned block
 * (one an ongoing request is using, paper 4.6) is never evicted, and when
 * every block is pinned an insert fails instead.  All operations are O(1)
 * (a hash map from key to entry, entries linked in recency order); memory
 * grows with what is stored, not with capacity.
 *
 * Not thread-safe: one owner (the replay's loop, later the conductor's).
 */
#ifndef MC_CONDUCTOR_CACHE_H
#define MC_CONDUCTOR_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_kvcache;

/* The most blocks one cache can hold. */
#define MC_KVCACHE_MAX_BLOCKS (UINT32_MAX - 1u)

/* A cache of capacity blocks (0 is allowed: it stores nothing).
 * MC_ERR_INVALID_PARAMS above MC_KVCACHE_MAX_BLOCKS, MC_ERR_NOMEM. */
mc_status mc_kvcache_new(uint64_t capacity, struct mc_kvcache **out);
void mc_kvcache_free(struct mc_kvcache *c);

uint64_t mc_kvcache_capacity(const struct mc_kvcache *c);
uint64_t mc_kvcache_size(const struct mc_kvcache *c);	   /* blocks stored */
uint64_t mc_kvcache_pinned(const struct mc_kvcache *c);	   /* of them, pinned */
uint64_t mc_kvcache_evictions(const struct mc_kvcache *c); /* since creation */

bool mc_kvcache_contains(const struct mc_kvcache *c, uint64_t key);
/* Pin count of key (0 when absent or unpinned). */
uint32_t mc_kvcache_pins(const struct mc_kvcache *c, uint64_t key);

/* Leading keys[0..n) that are all stored: the prefix match, in blocks.
 * Does not change recency. */
size_t mc_kvcache_match(const struct mc_kvcache *c, const uint64_t *keys, size_t n);

/* Make key the most recently used if it is stored and unpinned; returns
 * whether it is stored. */
bool mc_kvcache_touch(struct mc_kvcache *c, uint64_t key);

/*
 * Store key as the most recently used block (touch it if stored),
 * evicting the least recently used unpinned block when full.
 * MC_ERR_NO_AVAILABLE_HANDLE when the cache is full of pinned blocks or
 * has capacity 0; MC_ERR_NOMEM.
 */
mc_status mc_kvcache_insert(struct mc_kvcache *c, uint64_t key);

/* Pin a stored key (pins count up); MC_ERR_NOT_FOUND if it is not stored.
 * A pinned key leaves the recency order until its last unpin, which makes
 * it the most recently used. */
mc_status mc_kvcache_pin(struct mc_kvcache *c, uint64_t key);
/* MC_ERR_NOT_FOUND if not stored, MC_ERR_INVALID_PARAMS if not pinned. */
mc_status mc_kvcache_unpin(struct mc_kvcache *c, uint64_t key);

/* Drop key if stored and unpinned; returns whether it was dropped. */
bool mc_kvcache_remove(struct mc_kvcache *c, uint64_t key);

/*
 * A request's blocks while it runs: insert (or touch) and pin keys in
 * order, stopping at the first that cannot be stored (the cache is full
 * of pinned blocks).  Returns how many leading keys are now stored and
 * pinned; *status_out (may be NULL) is MC_OK or why it stopped.
 */
size_t mc_kvcache_acquire(struct mc_kvcache *c, const uint64_t *keys, size_t n,
			  mc_status *status_out);
/* Unpin keys[0..n) from the last to the first, so that keys[0], the root
 * of the prefix, ends up the most recently used (paper.md 5.2, step 4). */
void mc_kvcache_release(struct mc_kvcache *c, const uint64_t *keys, size_t n);
/* acquire then release: a request's whole update at dispatch; returns how
 * many leading keys were stored. */
size_t mc_kvcache_admit(struct mc_kvcache *c, const uint64_t *keys, size_t n);

/* Keys from the most to the least recently used (pinned ones are not in
 * the order), at most cap of them into keys_out; returns how many. For
 * tests and inspection. */
size_t mc_kvcache_lru_order(const struct mc_kvcache *c, uint64_t *keys_out, size_t cap);

#endif

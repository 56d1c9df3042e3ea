/*
 * master/alloc.h - the master's space allocator for mounted segments, and
 * the replica placement helpers built on it.
 *
 * struct mc_offset_alloc hands out address ranges inside one mounted
 * segment [base, base + size).  It is bookkeeping only: the managed memory
 * belongs to the remote client that mounted it and the allocator never
 * reads or writes it.  Allocate and release are O(1) (amortised over the
 * growth of two internal arrays); freed neighbours coalesce at once.
 *
 * mc_alloc_place() chooses where the replicas of one object go, one replica
 * per segment name, with upstream's `random` and `free_ratio_first`
 * strategies and preferred segments tried first (store.md 3.2).
 *
 * Threads: none of this is thread-safe.  The master's loop thread owns
 * every allocator (STYLE 3.7); nothing here takes a lock.
 */
#ifndef MC_MASTER_ALLOC_H
#define MC_MASTER_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_offset_alloc;

struct mc_offset_alloc_stats {
	uint64_t capacity;	  /* bytes managed (after aligning base and end) */
	uint64_t used_bytes;	  /* bytes in live blocks, each rounded up to min_align */
	uint64_t free_bytes;	  /* capacity - used_bytes */
	uint64_t requested_bytes; /* sum of the lengths callers asked for */
	uint64_t largest_free;	  /* largest single free block, in bytes */
	uint64_t nblocks;	  /* live allocations */
	uint64_t nfree_blocks;	  /* free blocks (1 when nothing is allocated) */
	uint64_t meta_bytes;	  /* heap bytes the allocator itself holds */
};

/*
 * Create an allocator for the range [base, base + size).  min_align is a
 * power of two: every address handed out is a multiple of it and every
 * block is a multiple of it long.  If base or base + size is not aligned,
 * the range is trimmed inwards to min_align boundaries.
 *
 * Returns MC_OK and the new allocator in *alloc_out; MC_ERR_INVALID_PARAMS
 * if min_align is not a power of two, the range wraps around, or nothing is
 * left after trimming; MC_ERR_NOMEM.
 */
mc_status mc_offset_alloc_new(uint64_t base, uint64_t size, uint64_t min_align,
			      struct mc_offset_alloc **alloc_out);

/* Free the allocator and its bookkeeping (live blocks are forgotten).  NULL is a no-op. */
void mc_offset_alloc_free(struct mc_offset_alloc *a);
/* The same, but its big arrays (block records, tables: hundreds of MB at
 * 10^7 blocks, which glibc unmaps in the free call) go to free_big(ctx, p,
 * len), which must mc_free them, at once or later. */
void mc_offset_alloc_free_with(struct mc_offset_alloc *a,
			       void (*free_big)(void *ctx, void *p, size_t len), void *ctx);

/*
 * Release every block at once: the allocator returns to one free block
 * covering the whole range, as after mc_offset_alloc_new.
 */
void mc_offset_alloc_free_all(struct mc_offset_alloc *a);

/*
 * Allocate len bytes (rounded up to min_align).  On MC_OK *addr_out is the
 * block's first address, inside [base, base + size) and aligned to
 * min_align.  Returns MC_ERR_INVALID_PARAMS for len 0,
 * MC_ERR_NO_AVAILABLE_HANDLE at once when no free block can hold len, and
 * MC_ERR_NOMEM when the bookkeeping cannot grow; on failure nothing changes.
 */
mc_status mc_offset_alloc_alloc(struct mc_offset_alloc *a, uint64_t len, uint64_t *addr_out);

/*
 * Release the block that starts at addr (a value mc_offset_alloc_alloc
 * returned).  An address that is not the start of a live block (double
 * free, an address inside a block, outside the range) returns
 * MC_ERR_INVALID_PARAMS and changes nothing.
 */
mc_status mc_offset_alloc_release(struct mc_offset_alloc *a, uint64_t addr);
/*
 * Mark [addr, addr + len) used as if mc_offset_alloc_alloc had returned
 * addr (the master's log replay binds a remounted segment's replicas
 * again).  It must lie inside one free block.  *cursor: a block to start
 * the walk from; set it to 0 for the first of a run of claims in ascending
 * address order and pass it on unchanged (nothing else may touch a in
 * between), so the run walks the blocks once.  MC_OK;
 * MC_ERR_INVALID_PARAMS (misaligned, outside the range, overlapping a used
 * block); MC_ERR_NOMEM.
 */
mc_status mc_offset_alloc_claim(struct mc_offset_alloc *a, uint64_t addr, uint64_t len,
				uint32_t *cursor);
/* Before a run of n claims (a remount): size the used-block table and the
 * block records once for n more, instead of growing them as it goes;
 * nothing (they grow as they go) when the memory cannot be had. */
void mc_offset_alloc_expect(struct mc_offset_alloc *a, uint64_t n);
/* Prefetch the table slot a claim of addr will write (a remount's claims
 * hit the table at random: several misses overlap this way). */
void mc_offset_alloc_prefetch(const struct mc_offset_alloc *a, uint64_t addr);

/*
 * Length the caller asked for when it allocated the live block at addr.
 * Returns MC_OK, or MC_ERR_INVALID_PARAMS if addr is not a live block.
 */
mc_status mc_offset_alloc_lookup(const struct mc_offset_alloc *a, uint64_t addr, uint64_t *len_out);

/*
 * Fill *stats_out.  Every field is O(1) except largest_free, which walks
 * the free list of the highest non-empty size class.
 */
void mc_offset_alloc_stats(const struct mc_offset_alloc *a,
			   struct mc_offset_alloc_stats *stats_out);

/* O(1) getters for the hot callers (placement, eviction watermark). */
uint64_t mc_offset_alloc_base(const struct mc_offset_alloc *a);
uint64_t mc_offset_alloc_capacity(const struct mc_offset_alloc *a);
uint64_t mc_offset_alloc_free_bytes(const struct mc_offset_alloc *a);
uint64_t mc_offset_alloc_used_bytes(const struct mc_offset_alloc *a);

/*
 * Walk every internal structure and verify the invariants written at the
 * top of alloc.c.  O(blocks); for tests and debug assertions.  Returns
 * true when all hold; logs the first violation at error level otherwise.
 */
bool mc_offset_alloc_check(const struct mc_offset_alloc *a);

/* ---- replica placement ---- */

enum mc_alloc_strategy {
	MC_ALLOC_RANDOM,	   /* upstream default */
	MC_ALLOC_FREE_RATIO_FIRST, /* emptiest sampled segments first */
	MC_ALLOC_LOCAL_FIRST,	   /* random here; the master prefers the writer's host
				    * (its preferred list, put.c) for one replica */
};

/* "random" / "free_ratio_first" / "local_first" (case-sensitive, as upstream's
 * flag); false otherwise. */
bool mc_alloc_strategy_parse(const char *s, enum mc_alloc_strategy *strategy_out);
const char *mc_alloc_strategy_name(enum mc_alloc_strategy strategy);

/*
 * One segment name and the allocators mounted under it (a client with
 * several chunks has several).  Replicas of one object always go to
 * different targets.  The caller lists only allocatable segments (not
 * DRAINING, DRAINED, GRACEFULLY_UNMOUNTING or UNMOUNTING).
 */
struct mc_alloc_target {
	const char *name;		       /* borrowed; for logs only */
	struct mc_offset_alloc *const *allocs; /* borrowed */
	uint32_t nallocs;
};

struct mc_alloc_request {
	uint64_t len;	      /* bytes per replica, > 0 */
	uint32_t replica_num; /* wanted replicas, > 0 */
	enum mc_alloc_strategy strategy;
	const uint32_t *preferred; /* indices into targets, tried first in order; may be NULL */
	uint32_t npreferred;	   /* the caller drops names it does not know, as upstream does */
};

struct mc_alloc_placement {
	uint32_t target;	       /* index into targets */
	uint32_t alloc_index;	       /* index into targets[target].allocs */
	struct mc_offset_alloc *alloc; /* targets[target].allocs[alloc_index] */
	uint64_t addr;		       /* block start, release with mc_offset_alloc_release */
};

/*
 * Place up to req->replica_num replicas of req->len bytes, each on a
 * different target, best effort as upstream: fewer replicas than asked is
 * success.  placements_out has room for replica_num entries; on MC_OK the
 * first *nplaced_out (>= 1) are filled, in the order they were placed
 * (preferred targets first).  *rng is the caller's PRNG state (any value;
 * advanced here) so tests can be deterministic.
 *
 * Returns MC_OK; MC_ERR_INVALID_PARAMS for len 0, replica_num 0 or a
 * preferred index out of range (nothing allocated); MC_ERR_NO_AVAILABLE_HANDLE
 * when no replica fits anywhere; MC_ERR_NOMEM when nothing was placed and an
 * allocator could not grow its bookkeeping.
 */
mc_status mc_alloc_place(const struct mc_alloc_target *targets, uint32_t ntargets,
			 const struct mc_alloc_request *req, uint64_t *rng,
			 struct mc_alloc_placement *placements_out, uint32_t *nplaced_out);

/* The PRNG mc_alloc_place uses (splitmix64); exposed for tests and benches. */
uint64_t mc_alloc_rand(uint64_t *rng);

#endif

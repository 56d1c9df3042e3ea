/*
 * master/alloc.c - per-segment space allocator (two-level segregated fit)
 * and replica placement.
 *
 * What it manages.  A client mounts a segment: an address range in its own
 * process that other clients write into with the Transfer Engine.  The
 * master only decides which sub-range each replica gets; it never touches
 * the bytes, which may not even be mapped here.  So, unlike a malloc, every
 * piece of bookkeeping lives in master memory, outside the managed range.
 *
 * Units.  The range is trimmed to min_align boundaries and counted in units
 * of min_align (a power of two, shift = log2).  Offsets and lengths are
 * 64-bit unit counts, so a 2^40-byte segment with 64-byte units is 2^34
 * units and nothing needs scaling (upstream scales to fit 32 bits and
 * loses granularity on big segments).
 *
 * Blocks.  The range is always tiled exactly by blocks, each a 32-byte
 * record in the array recs[] (indices, not pointers, so the array can
 * grow by realloc).  A record holds the block's offset and length, its
 * physical neighbours (prev_phys/next_phys), and either free-list links
 * (free block) or the byte length the caller asked for (used block).
 * Unused records sit on a spare list threaded through the same links.
 *
 * Size classes (TLSF, Masmano et al.).  A length u maps to class
 * fl * 32 + sl: below 32 units the class is u itself; above, fl comes
 * from the most significant bit and sl from the next five bits, so a class
 * spans at most 1/32 of its lower bound.  Each class has a LIFO list of
 * free blocks; sl_bitmap[fl] has bit sl set when list (fl, sl) is
 * non-empty and fl_bitmap has bit fl set when sl_bitmap[fl] != 0, so the
 * first non-empty class at or above any class is two count-trailing-zeros
 * away.
 *
 * Allocation of u units, O(1):
 *   1. look at up to FIT_PROBE blocks at the head of u's own class and take
 *      the first that is long enough (same-size objects, the KV-cache
 *      case, then reuse exact holes instead of splitting larger blocks);
 *   2. otherwise take the head of the first non-empty class above u's:
 *      every block there is longer than any length in u's class, so it
 *      fits without searching;
 *   3. split: the front u units become the used block, the rest (if any)
 *      a new free block.  The record at offset 0 therefore never changes,
 *      which gives the physical chain a fixed head (recs[0]).
 * Release, O(1): find the record by address, mark it free, merge it with a
 * free previous and/or next neighbour (their records go to the spare
 * list), and push the result on its class list.
 *
 * Finding a block by address.  Releases arrive as addresses (that is all a
 * replica descriptor carries), so used blocks are indexed by an
 * open-addressing hash (Fibonacci hashing, linear probing, backward-shift
 * deletion, so no tombstones) that stores only 4-byte record indices and
 * compares against recs[i].off.  Free blocks are deliberately not in it:
 * a double free, an address inside a block, or a made-up address misses
 * the table and is refused with MC_ERR_INVALID_PARAMS before anything is
 * changed.
 *
 * Memory.  Per live allocation: its record (32 bytes), on average about
 * one free-block record more under fragmentation, and 8-16 bytes of hash
 * table (load kept between 1/4 and 1/2), i.e. roughly 40-80 bytes.  Both
 * arrays double when full.  The records grow by realloc (glibc moves a
 * big block by remapping its pages, no copy); the table grows
 * incrementally, as the master's object table does: a bigger one is
 * allocated zeroed (slots hold a record index + 1, 0 is empty, so calloc's
 * lazily zeroed pages need no memset), each later alloc, claim and
 * release moves a few slots of the old one over (whole runs, from a slot
 * that was empty when the move began, so probe sequences of the slots not
 * yet moved stay intact), lookups and deletes look in the new table and
 * then the old one, and the drained old table is given back a piece per
 * operation (mc_free_later).  A rehash of 50 M blocks in one go stopped
 * the master's loop for 0.5-1 s, and 32 slots per operation still cost
 * 10-20 ms per 1000-key BatchPutStart at millions of blocks (a moved slot
 * is two cache misses), so an operation moves old_left / headroom +
 * MIGRATE_OPS slots, headroom being the allocations left before the new
 * table is due to grow: the move ends in time and costs ~3 slots per
 * operation (2 + 1; it was 2 + 4, which ended the move sooner but put
 * twice the misses into each batch of puts right after a growth; the
 * records of the slots being moved are prefetched a few slots ahead).
 * They never shrink except through mc_offset_alloc_free.
 *
 * Invariants (mc_offset_alloc_check verifies all of them):
 *   I1 blocks tile [0, units): the chain from recs[0] by next_phys has
 *      strictly consecutive offsets, prev_phys mirrors next_phys, and the
 *      lengths sum to units;
 *   I2 no two physically adjacent blocks are both free (coalescing is
 *      immediate);
 *   I3 each free block is on exactly the list of class_of(len), and the
 *      bitmaps say exactly which lists are non-empty;
 *   I4 the hash holds exactly the used blocks, each findable by offset;
 *   I5 the counters (used units, requested bytes, used and free block
 *      counts) equal what the chain says;
 *   I6 every record is in the chain or on the spare list, never both.
 * Failure never breaks them: alloc reserves a record and a hash slot before
 * it changes anything, so MC_ERR_NOMEM leaves the allocator as it was.
 *
 * Placement (mc_alloc_place) follows store.md 3.2: preferred targets in
 * order, then for free_ratio_first a sample of min(6 x remaining, n)
 * consecutive targets from a random start sorted by free ratio, then the
 * random walk (random start, consecutive, at most min(100, n) targets
 * tried) for whatever is left; never two replicas on one target; inside a
 * target a random allocator first, then the others in turn.
 */
#define MC_LOG_MODULE "alloc"
#include "master/alloc.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"

#define SL_BITS	       5
#define SL_COUNT       (1u << SL_BITS)
#define NIL	       UINT32_MAX
#define NO_CLASS       UINT32_MAX
#define FREE_BIT       (1ull << 63)
#define FIT_PROBE      4
#define MAX_RECORDS    (UINT32_MAX - 1u)
#define MIN_RECORDS    16u
#define MIN_TABLE_BITS 4u
#define HASH_MUL       0x9E3779B97F4A7C15ull
#define EMPTY	       0u /* a free table slot; others hold a record index + 1 */
#define MIGRATE_OPS    1u /* old slots moved per operation while growing, beyond the due share */
#define MIGRATE_AHEAD  8u /* records prefetched this many old slots ahead */
#define FREE_OP_BYTES  (16u << 10) /* of a drained old table given back per operation */

struct blk {
	uint64_t off;	    /* units from a->base */
	uint64_t len;	    /* units; FREE_BIT set while free */
	uint32_t prev_phys; /* block just below, NIL for recs[0] */
	uint32_t next_phys; /* block just above, NIL for the last */
	union {
		struct {
			uint32_t prev;
			uint32_t next; /* also the spare-list link */
		} free;
		uint64_t req; /* used: bytes the caller asked for */
	} u;
};

MC_STATIC_ASSERT(sizeof(struct blk) == 32, "block record is 32 bytes");

struct mc_offset_alloc {
	uint64_t base;	     /* address of unit 0 */
	uint64_t units;	     /* range length in units */
	unsigned shift;	     /* log2(min_align) */
	unsigned nfl;	     /* first-level classes */
	uint64_t fl_bitmap;  /* bit fl: sl_bitmap[fl] != 0 */
	uint32_t *sl_bitmap; /* [nfl]; bit sl: heads[fl*32+sl] != NIL */
	uint32_t *heads;     /* [nfl * SL_COUNT] free-list heads */
	struct blk *recs;    /* block records */
	uint32_t nrecs;	     /* records handed out at least once */
	uint32_t recs_cap;   /* allocated length of recs */
	uint32_t spare;	     /* recycled records */
	unsigned table_bits; /* log2(table slots) */
	uint32_t *table;     /* used-block index by offset: record index + 1 */
	uint32_t *old;	     /* while growing: the table being drained, else NULL */
	unsigned old_bits;
	size_t old_cursor, old_left;
	struct mc_free_later old_free; /* a drained table, given back in pieces */
	uint64_t used_units;	       /* units in used blocks */
	uint64_t requested_bytes;      /* sum of u.req over used blocks */
	uint64_t nused;		       /* used blocks */
	uint64_t nfree;		       /* free blocks */
	uint32_t cls[];		       /* storage for sl_bitmap and heads */
};

static inline uint64_t blk_len(const struct blk *b)
{
	return b->len & ~FREE_BIT;
}

static inline bool blk_free(const struct blk *b)
{
	return (b->len & FREE_BIT) != 0;
}

static inline unsigned class_of(uint64_t u)
{
	unsigned msb;

	if (u < SL_COUNT)
		return (unsigned)u;
	msb = 63u - (unsigned)__builtin_clzll(u);
	return ((msb - SL_BITS + 1u) << SL_BITS) + (unsigned)((u >> (msb - SL_BITS)) - SL_COUNT);
}

/* First non-empty class >= c, or NO_CLASS. */
static unsigned find_class_ge(const struct mc_offset_alloc *a, unsigned c)
{
	unsigned fl = c >> SL_BITS;
	uint32_t m;
	uint64_t f;

	if (fl >= a->nfl)
		return NO_CLASS;
	m = a->sl_bitmap[fl] & (~0u << (c & (SL_COUNT - 1)));
	if (!m) {
		f = fl + 1 < 64 ? a->fl_bitmap & (~0ull << (fl + 1)) : 0;
		if (!f)
			return NO_CLASS;
		fl = (unsigned)__builtin_ctzll(f);
		m = a->sl_bitmap[fl];
	}
	return (fl << SL_BITS) | (unsigned)__builtin_ctz(m);
}

static void list_insert(struct mc_offset_alloc *a, uint32_t idx)
{
	struct blk *b = &a->recs[idx];
	unsigned c = class_of(blk_len(b));
	uint32_t head = a->heads[c];

	b->u.free.prev = NIL;
	b->u.free.next = head;
	if (head != NIL)
		a->recs[head].u.free.prev = idx;
	a->heads[c] = idx;
	a->sl_bitmap[c >> SL_BITS] |= 1u << (c & (SL_COUNT - 1));
	a->fl_bitmap |= 1ull << (c >> SL_BITS);
	a->nfree++;
}

static void list_remove(struct mc_offset_alloc *a, uint32_t idx)
{
	struct blk *b = &a->recs[idx];
	unsigned c = class_of(blk_len(b));
	unsigned fl = c >> SL_BITS;

	if (b->u.free.prev != NIL)
		a->recs[b->u.free.prev].u.free.next = b->u.free.next;
	else
		a->heads[c] = b->u.free.next;
	if (b->u.free.next != NIL)
		a->recs[b->u.free.next].u.free.prev = b->u.free.prev;
	if (a->heads[c] == NIL) {
		a->sl_bitmap[fl] &= ~(1u << (c & (SL_COUNT - 1)));
		if (!a->sl_bitmap[fl])
			a->fl_bitmap &= ~(1ull << fl);
	}
	a->nfree--;
}

/* Make sure rec_get() can succeed without allocating. */
static bool rec_reserve(struct mc_offset_alloc *a)
{
	uint32_t cap;
	struct blk *recs;

	if (a->spare != NIL || a->nrecs < a->recs_cap)
		return true;
	if (a->recs_cap >= MAX_RECORDS)
		return false;
	cap = a->recs_cap > MAX_RECORDS / 2 ? MAX_RECORDS : a->recs_cap * 2;
	recs = mc_realloc(a->recs, (size_t)cap * sizeof(*recs));
	if (!recs)
		return false;
	a->recs = recs;
	a->recs_cap = cap;
	return true;
}

static uint32_t rec_get(struct mc_offset_alloc *a)
{
	uint32_t idx = a->spare;

	if (idx != NIL) {
		a->spare = a->recs[idx].u.free.next;
		return idx;
	}
	mc_assert(a->nrecs < a->recs_cap);
	return a->nrecs++;
}

static void rec_put(struct mc_offset_alloc *a, uint32_t idx)
{
	a->recs[idx].len = 0;
	a->recs[idx].u.free.next = a->spare;
	a->spare = idx;
}

static inline size_t slot_of(uint64_t key, unsigned bits)
{
	return (size_t)((key * HASH_MUL) >> (64 - bits));
}

/* Slot of t (2^bits slots) holding the used block at unit offset key, or SIZE_MAX. */
static size_t tab_find(const uint32_t *t, unsigned bits, const struct blk *recs, uint64_t key)
{
	size_t mask = ((size_t)1 << bits) - 1;
	size_t i = slot_of(key, bits);
	uint32_t v;

	while ((v = t[i]) != EMPTY) {
		if (recs[v - 1].off == key)
			return i;
		i = (i + 1) & mask;
	}
	return SIZE_MAX;
}

/* Record index of the used block at unit offset key (NIL if none), with the
 * table and slot that hold it. */
static uint32_t table_lookup(const struct mc_offset_alloc *a, uint64_t key, uint32_t **tab_out,
			     unsigned *bits_out, size_t *slot_out)
{
	uint32_t *t = a->table;
	unsigned bits = a->table_bits;
	size_t i = tab_find(t, bits, a->recs, key);

	if (i == SIZE_MAX && a->old) {
		t = a->old;
		bits = a->old_bits;
		i = tab_find(t, bits, a->recs, key);
	}
	if (i == SIZE_MAX)
		return NIL;
	*tab_out = t;
	*bits_out = bits;
	*slot_out = i;
	return t[i] - 1;
}

static void table_put(uint32_t *table, unsigned bits, uint64_t key, uint32_t idx)
{
	size_t mask = ((size_t)1 << bits) - 1;
	size_t i = slot_of(key, bits);

	while (table[i] != EMPTY)
		i = (i + 1) & mask;
	table[i] = idx + 1;
}

/* Move up to budget slots of the old table (whole runs) into the new one;
 * with none left, give back the next piece of a drained one. */
static void table_migrate(struct mc_offset_alloc *a, size_t budget)
{
	size_t omask;

	if (!a->old) {
		(void)mc_free_later_step(&a->old_free, FREE_OP_BYTES);
		return;
	}
	omask = ((size_t)1 << a->old_bits) - 1;
	while (budget) {
		size_t i = a->old_cursor;

		if (a->old_left == 0) {
			mc_free_later_start(&a->old_free, a->old, sizeof(uint32_t) << a->old_bits);
			a->old = NULL;
			return;
		}
		if (a->old[i] == EMPTY) {
			a->old_cursor = (i + 1) & omask;
			a->old_left--;
			budget--;
			continue;
		}
		while (a->old[i] != EMPTY) {
			uint32_t v = a->old[i], ahead = a->old[(i + MIGRATE_AHEAD) & omask];

			if (ahead != EMPTY) /* its record is a miss: overlap it with this one */
				__builtin_prefetch(&a->recs[ahead - 1]);
			table_put(a->table, a->table_bits, a->recs[v - 1].off, v - 1);
			a->old[i] = EMPTY;
			i = (i + 1) & omask;
			a->old_left--;
			if (budget)
				budget--;
		}
		a->old_cursor = i;
	}
}

/* Old slots an operation moves while growing: enough that the move ends
 * before the new table is due to grow (see "Memory" above). */
static size_t migrate_step(const struct mc_offset_alloc *a)
{
	uint64_t cap = ((uint64_t)1 << a->table_bits) / 2;
	uint64_t headroom = cap > a->nused ? cap - a->nused : 1;

	return (size_t)(a->old_left / headroom) + MIGRATE_OPS;
}

/* Make room for one more used block, keeping the load at or under 1/2. */
static bool table_reserve(struct mc_offset_alloc *a)
{
	unsigned bits = a->table_bits + 1;
	size_t n = (size_t)1 << a->table_bits, start = 0;
	uint32_t *t;

	if ((a->nused + 1) * 2 <= n) {
		table_migrate(a, migrate_step(a));
		return true;
	}
	if (bits > 40)
		return false;
	/* first: a failure changes nothing (with one slot beyond the due
	 * share a move can still run when an operation fails here) */
	t = mc_calloc((size_t)1 << bits, sizeof(*t));
	if (!t)
		return false;
	/* the old table drains before the new one fills (migrate_step); a
	 * settle here finds nothing left to move */
	table_migrate(a, SIZE_MAX);
	while (a->table[start] != EMPTY) /* the load is at most 1/2: one is empty */
		start++;
	a->old = a->table;
	a->old_bits = a->table_bits;
	a->old_cursor = start;
	a->old_left = n;
	a->table = t;
	a->table_bits = bits;
	table_migrate(a, migrate_step(a));
	return true;
}

/* Remove slot i of t; shift later members of its cluster back so probes never stop early. */
static void table_delete(uint32_t *t, unsigned bits, const struct blk *recs, size_t i)
{
	size_t mask = ((size_t)1 << bits) - 1;
	size_t j = i, k;

	for (;;) {
		j = (j + 1) & mask;
		if (t[j] == EMPTY)
			break;
		k = slot_of(recs[t[j] - 1].off, bits);
		if (j > i ? (k <= i || k > j) : (k <= i && k > j)) {
			t[i] = t[j];
			i = j;
		}
	}
	t[i] = EMPTY;
}

static void reset(struct mc_offset_alloc *a)
{
	struct blk *b = &a->recs[0];

	memset(a->cls, 0, a->nfl * sizeof(uint32_t));
	memset(a->heads, 0xff, (size_t)a->nfl * SL_COUNT * sizeof(uint32_t));
	table_migrate(a, SIZE_MAX); /* a growth in progress: settle it */
	mc_free_later_finish(&a->old_free);
	memset(a->table, 0, sizeof(uint32_t) << a->table_bits);
	a->fl_bitmap = 0;
	a->nrecs = 1;
	a->spare = NIL;
	a->used_units = 0;
	a->requested_bytes = 0;
	a->nused = 0;
	a->nfree = 0;
	b->off = 0;
	b->len = a->units | FREE_BIT;
	b->prev_phys = NIL;
	b->next_phys = NIL;
	list_insert(a, 0);
}

mc_status mc_offset_alloc_new(uint64_t base, uint64_t size, uint64_t min_align,
			      struct mc_offset_alloc **alloc_out)
{
	uint64_t amask = min_align - 1, start, end, units;
	unsigned shift, nfl;
	struct mc_offset_alloc *a;

	if (!min_align || (min_align & amask)) {
		mc_error("allocator: alignment %" PRIu64 " is not a power of two", min_align);
		return MC_ERR_INVALID_PARAMS;
	}
	if (size > UINT64_MAX - base) {
		mc_error("allocator: range 0x%" PRIx64 "+%" PRIu64 " wraps around", base, size);
		return MC_ERR_INVALID_PARAMS;
	}
	end = (base + size) & ~amask;
	/* Round base up; base + amask cannot wrap when the range holds an aligned unit. */
	start = base > UINT64_MAX - amask ? end : (base + amask) & ~amask;
	shift = (unsigned)__builtin_ctzll(min_align);
	units = end > start ? (end - start) >> shift : 0;
	if (!units || units & FREE_BIT) {
		mc_error("allocator: range 0x%" PRIx64 "+%" PRIu64 " holds no %" PRIu64
			 "-byte aligned block",
			 base, size, min_align);
		return MC_ERR_INVALID_PARAMS;
	}
	nfl = (class_of(units) >> SL_BITS) + 1;
	a = mc_calloc(1, sizeof(*a) + (size_t)nfl * (SL_COUNT + 1) * sizeof(uint32_t));
	if (!a)
		goto err_nomem;
	a->base = start;
	a->units = units;
	a->shift = shift;
	a->nfl = nfl;
	a->sl_bitmap = a->cls;
	a->heads = a->cls + nfl;
	a->recs_cap = MIN_RECORDS;
	a->recs = mc_malloc(MIN_RECORDS * sizeof(*a->recs));
	if (!a->recs)
		goto err_free_alloc;
	a->table_bits = MIN_TABLE_BITS;
	a->table = mc_calloc((size_t)1 << MIN_TABLE_BITS, sizeof(uint32_t));
	if (!a->table)
		goto err_free_recs;
	reset(a);
	*alloc_out = a;
	return MC_OK;

err_free_recs:
	mc_free(a->recs);
err_free_alloc:
	mc_free(a);
err_nomem:
	mc_error("allocator: out of memory creating an allocator for %" PRIu64 " units", units);
	return MC_ERR_NOMEM;
}

void mc_offset_alloc_free(struct mc_offset_alloc *a)
{
	if (!a)
		return;
	mc_offset_alloc_free_with(a, NULL, NULL);
}

void mc_offset_alloc_free_with(struct mc_offset_alloc *a,
			       void (*free_big)(void *ctx, void *p, size_t len), void *ctx)
{
	void *big[4];
	size_t len[4];

	if (!a)
		return;
	big[0] = a->table;
	len[0] = sizeof(uint32_t) << a->table_bits;
	big[1] = a->old;
	len[1] = a->old ? sizeof(uint32_t) << a->old_bits : 0;
	big[2] = a->old_free.p; /* handed over as it is: part of it given back already */
	len[2] = a->old_free.len;
	big[3] = a->recs;
	len[3] = (size_t)a->recs_cap * sizeof(struct blk);
	for (int i = 0; i < 4; i++) {
		if (free_big && big[i])
			free_big(ctx, big[i], len[i]);
		else
			mc_free(big[i]);
	}
	mc_free(a);
}

void mc_offset_alloc_free_all(struct mc_offset_alloc *a)
{
	reset(a);
}

mc_status mc_offset_alloc_alloc(struct mc_offset_alloc *a, uint64_t len, uint64_t *addr_out)
{
	uint64_t u, rem;
	uint32_t idx = NIL, i, r, next;
	unsigned c, n;
	struct blk *b;

	if (!len)
		return MC_ERR_INVALID_PARAMS;
	u = (len >> a->shift) + ((len & ((1ull << a->shift) - 1)) != 0);
	if (u > a->units - a->used_units)
		return MC_ERR_NO_AVAILABLE_HANDLE;
	c = class_of(u);
	for (i = a->heads[c], n = 0; i != NIL && n < FIT_PROBE; i = a->recs[i].u.free.next, n++) {
		if (blk_len(&a->recs[i]) >= u) {
			idx = i;
			break;
		}
	}
	if (idx == NIL) {
		c = find_class_ge(a, c + 1);
		if (c == NO_CLASS)
			return MC_ERR_NO_AVAILABLE_HANDLE;
		idx = a->heads[c];
	}
	rem = blk_len(&a->recs[idx]) - u;
	/* Reserve first: on failure nothing has changed yet. */
	if ((rem && !rec_reserve(a)) || !table_reserve(a)) {
		mc_warn("allocator: out of memory for block records (%" PRIu64 " live blocks)",
			a->nused);
		return MC_ERR_NOMEM;
	}
	list_remove(a, idx);
	if (rem) {
		r = rec_get(a);
		b = &a->recs[idx];
		next = b->next_phys;
		a->recs[r].off = b->off + u;
		a->recs[r].len = rem | FREE_BIT;
		a->recs[r].prev_phys = idx;
		a->recs[r].next_phys = next;
		if (next != NIL)
			a->recs[next].prev_phys = r;
		b->next_phys = r;
		list_insert(a, r);
	}
	b = &a->recs[idx];
	b->len = u;
	b->u.req = len;
	table_put(a->table, a->table_bits, b->off, idx);
	a->used_units += u;
	a->requested_bytes += len;
	a->nused++;
	*addr_out = a->base + (b->off << a->shift);
	return MC_OK;
}

void mc_offset_alloc_expect(struct mc_offset_alloc *a, uint64_t n)
{
	unsigned bits = a->table_bits;
	uint64_t want = a->nused + n, cap = (uint64_t)a->nrecs + n + 1;
	uint32_t *t;

	table_migrate(a, SIZE_MAX); /* a growth in progress: settle it */
	while (bits < 40 && ((uint64_t)1 << bits) < want * 2)
		bits++;
	if (bits > a->table_bits && (t = mc_calloc((size_t)1 << bits, sizeof(*t)))) {
		mc_alloc_hint_huge(t, sizeof(*t) << bits);
		for (size_t i = 0; i < ((size_t)1 << a->table_bits); i++)
			if (a->table[i] != EMPTY)
				table_put(t, bits, a->recs[a->table[i] - 1].off, a->table[i] - 1);
		mc_free_later_start(&a->old_free, a->table, sizeof(uint32_t) << a->table_bits);
		a->table = t;
		a->table_bits = bits;
	}
	if (cap > MAX_RECORDS)
		cap = MAX_RECORDS;
	if (cap > a->recs_cap) {
		struct blk *recs = mc_realloc(a->recs, (size_t)cap * sizeof(*recs));

		if (recs) {
			mc_alloc_hint_huge(recs, (size_t)cap * sizeof(*recs));
			a->recs = recs;
			a->recs_cap = (uint32_t)cap;
		}
	}
}

void mc_offset_alloc_prefetch(const struct mc_offset_alloc *a, uint64_t addr)
{
	if (addr >= a->base)
		__builtin_prefetch(&a->table[slot_of((addr - a->base) >> a->shift, a->table_bits)]);
}

mc_status mc_offset_alloc_claim(struct mc_offset_alloc *a, uint64_t addr, uint64_t len,
				uint32_t *cursor)
{
	uint64_t off, u, bend;
	uint32_t idx = *cursor, front = NIL, tail = NIL;
	struct blk *b;

	if (!len || addr < a->base || ((addr - a->base) & ((1ull << a->shift) - 1)))
		return MC_ERR_INVALID_PARAMS;
	off = (addr - a->base) >> a->shift;
	u = (len >> a->shift) + ((len & ((1ull << a->shift) - 1)) != 0);
	if (off >= a->units || u > a->units - off)
		return MC_ERR_INVALID_PARAMS;
	if (idx >= a->nrecs || a->recs[idx].off > off)
		idx = 0; /* recs[0] is always the lowest block */
	while (idx != NIL && a->recs[idx].off + blk_len(&a->recs[idx]) <= off)
		idx = a->recs[idx].next_phys;
	if (idx == NIL || !blk_free(&a->recs[idx]) ||
	    off + u > a->recs[idx].off + blk_len(&a->recs[idx]))
		return MC_ERR_INVALID_PARAMS; /* overlaps a used block */
	/* reserve first: on failure nothing has changed yet */
	if (!table_reserve(a))
		return MC_ERR_NOMEM;
	bend = a->recs[idx].off + blk_len(&a->recs[idx]);
	if (a->recs[idx].off < off) {
		if (!rec_reserve(a))
			return MC_ERR_NOMEM;
		front = rec_get(a);
	}
	if (off + u < bend) {
		if (!rec_reserve(a)) {
			if (front != NIL)
				rec_put(a, front);
			return MC_ERR_NOMEM;
		}
		tail = rec_get(a);
	}
	list_remove(a, idx);
	if (front != NIL) {
		/* the free part below keeps idx (recs[0] stays the lowest) */
		struct blk *f = &a->recs[front];
		b = &a->recs[idx];
		f->off = off;
		f->prev_phys = idx;
		f->next_phys = b->next_phys;
		if (b->next_phys != NIL)
			a->recs[b->next_phys].prev_phys = front;
		b->next_phys = front;
		b->len = (off - b->off) | FREE_BIT;
		list_insert(a, idx);
		idx = front;
	}
	b = &a->recs[idx];
	if (tail != NIL) {
		struct blk *t = &a->recs[tail];
		t->off = off + u;
		t->len = (bend - off - u) | FREE_BIT;
		t->prev_phys = idx;
		t->next_phys = b->next_phys;
		if (b->next_phys != NIL)
			a->recs[b->next_phys].prev_phys = tail;
		b->next_phys = tail;
		list_insert(a, tail);
	}
	b->off = off;
	b->len = u;
	b->u.req = len;
	table_put(a->table, a->table_bits, b->off, idx);
	a->used_units += u;
	a->requested_bytes += len;
	a->nused++;
	*cursor = idx;
	return MC_OK;
}

/* Record index of the live block at addr, with the table and slot holding
 * it; NIL if none. */
static uint32_t find_live(const struct mc_offset_alloc *a, uint64_t addr, uint32_t **tab_out,
			  unsigned *bits_out, size_t *slot_out)
{
	uint64_t rel;

	if (addr < a->base)
		return NIL;
	rel = addr - a->base;
	if (rel & ((1ull << a->shift) - 1) || (rel >> a->shift) >= a->units)
		return NIL;
	return table_lookup(a, rel >> a->shift, tab_out, bits_out, slot_out);
}

mc_status mc_offset_alloc_release(struct mc_offset_alloc *a, uint64_t addr)
{
	size_t slot = 0;
	uint32_t *tab = NULL;
	unsigned bits = 0;
	uint32_t idx = find_live(a, addr, &tab, &bits, &slot), p, n;
	struct blk *b;

	if (idx == NIL) {
		mc_warn("allocator: release of 0x%" PRIx64 ", which is not a live block", addr);
		return MC_ERR_INVALID_PARAMS;
	}
	table_delete(tab, bits, a->recs, slot);
	table_migrate(a, migrate_step(a));
	b = &a->recs[idx];
	a->used_units -= b->len;
	a->requested_bytes -= b->u.req;
	a->nused--;
	b->len |= FREE_BIT;

	p = b->prev_phys;
	if (p != NIL && blk_free(&a->recs[p])) {
		list_remove(a, p);
		a->recs[p].len += blk_len(b);
		a->recs[p].next_phys = b->next_phys;
		if (b->next_phys != NIL)
			a->recs[b->next_phys].prev_phys = p;
		rec_put(a, idx);
		idx = p;
		b = &a->recs[idx];
	}
	n = b->next_phys;
	if (n != NIL && blk_free(&a->recs[n])) {
		list_remove(a, n);
		b->len += blk_len(&a->recs[n]);
		b->next_phys = a->recs[n].next_phys;
		if (b->next_phys != NIL)
			a->recs[b->next_phys].prev_phys = idx;
		rec_put(a, n);
	}
	list_insert(a, idx);
	return MC_OK;
}

mc_status mc_offset_alloc_lookup(const struct mc_offset_alloc *a, uint64_t addr, uint64_t *len_out)
{
	size_t slot;
	uint32_t *tab;
	unsigned bits;
	uint32_t idx = find_live(a, addr, &tab, &bits, &slot);

	if (idx == NIL)
		return MC_ERR_INVALID_PARAMS;
	*len_out = a->recs[idx].u.req;
	return MC_OK;
}

static uint64_t largest_free_units(const struct mc_offset_alloc *a)
{
	unsigned fl, c;
	uint32_t i;
	uint64_t best = 0;

	if (!a->fl_bitmap)
		return 0;
	fl = 63u - (unsigned)__builtin_clzll(a->fl_bitmap);
	c = (fl << SL_BITS) | (31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]));
	for (i = a->heads[c]; i != NIL; i = a->recs[i].u.free.next)
		best = MC_MAX(best, blk_len(&a->recs[i]));
	return best;
}

void mc_offset_alloc_stats(const struct mc_offset_alloc *a, struct mc_offset_alloc_stats *stats_out)
{
	struct mc_offset_alloc_stats s;

	s.capacity = a->units << a->shift;
	s.used_bytes = a->used_units << a->shift;
	s.free_bytes = s.capacity - s.used_bytes;
	s.requested_bytes = a->requested_bytes;
	s.largest_free = largest_free_units(a) << a->shift;
	s.nblocks = a->nused;
	s.nfree_blocks = a->nfree;
	s.meta_bytes = sizeof(*a) + (uint64_t)a->nfl * (SL_COUNT + 1) * sizeof(uint32_t) +
		       (uint64_t)a->recs_cap * sizeof(struct blk) +
		       (sizeof(uint32_t) << a->table_bits) +
		       (a->old ? sizeof(uint32_t) << a->old_bits : 0) +
		       (a->old_free.len - a->old_free.done);
	*stats_out = s;
}

uint64_t mc_offset_alloc_base(const struct mc_offset_alloc *a)
{
	return a->base;
}

uint64_t mc_offset_alloc_capacity(const struct mc_offset_alloc *a)
{
	return a->units << a->shift;
}

uint64_t mc_offset_alloc_free_bytes(const struct mc_offset_alloc *a)
{
	return (a->units - a->used_units) << a->shift;
}

uint64_t mc_offset_alloc_used_bytes(const struct mc_offset_alloc *a)
{
	return a->used_units << a->shift;
}

#define CHECK(cond, ...)                       \
	do {                                   \
		if (!(cond)) {                 \
			mc_error(__VA_ARGS__); \
			return false;          \
		}                              \
	} while (0)

static bool check_lists(const struct mc_offset_alloc *a)
{
	unsigned c, fl;
	uint32_t i, prev;
	uint64_t nfree = 0, steps;
	bool nonempty;

	for (fl = 0; fl < a->nfl; fl++) {
		CHECK(((a->fl_bitmap >> fl) & 1) == (a->sl_bitmap[fl] != 0),
		      "check: fl bitmap bit %u disagrees with its sl bitmap", fl);
		for (c = fl << SL_BITS; c < (fl + 1) << SL_BITS; c++) {
			nonempty = a->heads[c] != NIL;
			CHECK(((a->sl_bitmap[fl] >> (c & (SL_COUNT - 1))) & 1) == nonempty,
			      "check: sl bitmap bit for class %u disagrees with its list", c);
			prev = NIL;
			steps = 0;
			for (i = a->heads[c]; i != NIL; prev = i, i = a->recs[i].u.free.next) {
				CHECK(i < a->nrecs, "check: class %u links record %u out of range",
				      c, i);
				CHECK(++steps <= a->nfree, "check: class %u list loops", c);
				CHECK(blk_free(&a->recs[i]),
				      "check: used record %u on free list %u", i, c);
				CHECK(class_of(blk_len(&a->recs[i])) == c,
				      "check: record %u of %" PRIu64 " units on class %u", i,
				      blk_len(&a->recs[i]), c);
				CHECK(a->recs[i].u.free.prev == prev, "check: bad prev link at %u",
				      i);
				nfree++;
			}
		}
	}
	CHECK(nfree == a->nfree, "check: %" PRIu64 " blocks on lists, counter says %" PRIu64, nfree,
	      a->nfree);
	return true;
}

bool mc_offset_alloc_check(const struct mc_offset_alloc *a)
{
	uint64_t off = 0, used = 0, req = 0, nused = 0, nfree = 0, nspare = 0, ntable = 0;
	uint32_t i, prev = NIL;
	size_t s, slots = (size_t)1 << a->table_bits;
	bool prev_free = false;

	for (i = 0; i != NIL; prev = i, i = a->recs[i].next_phys) {
		const struct blk *b = &a->recs[i];

		CHECK(i < a->nrecs, "check: chain links record %u out of range", i);
		CHECK(b->prev_phys == prev, "check: record %u prev_phys %u, expected %u", i,
		      b->prev_phys, prev);
		CHECK(b->off == off, "check: record %u at unit %" PRIu64 ", expected %" PRIu64, i,
		      b->off, off);
		CHECK(blk_len(b) > 0 && blk_len(b) <= a->units - off,
		      "check: record %u length %" PRIu64 " out of range", i, blk_len(b));
		off += blk_len(b);
		if (blk_free(b)) {
			CHECK(!prev_free, "check: free records %u and %u are adjacent", prev, i);
			nfree++;
		} else {
			uint32_t *tab;
			unsigned bits;
			size_t slot;

			CHECK(table_lookup(a, b->off, &tab, &bits, &slot) == i,
			      "check: used record %u is not in the table", i);
			used += blk_len(b);
			req += b->u.req;
			nused++;
		}
		prev_free = blk_free(b);
		CHECK(nused + nfree <= a->nrecs, "check: chain loops");
	}
	CHECK(off == a->units, "check: chain covers %" PRIu64 " of %" PRIu64 " units", off,
	      a->units);
	CHECK(used == a->used_units && req == a->requested_bytes && nused == a->nused &&
		      nfree == a->nfree,
	      "check: counters disagree with the chain");
	for (int k = 0; k < 2; k++) {
		const uint32_t *t = k ? a->old : a->table;
		size_t n = k ? (a->old ? (size_t)1 << a->old_bits : 0) : slots;

		for (s = 0; s < n; s++) {
			if (t[s] == EMPTY)
				continue;
			CHECK(t[s] - 1 < a->nrecs && !blk_free(&a->recs[t[s] - 1]),
			      "check: %s table slot %zu holds a free or bogus record",
			      k ? "old" : "", s);
			ntable++;
		}
	}
	CHECK(ntable == a->nused, "check: table holds %" PRIu64 " blocks, %" PRIu64 " used", ntable,
	      a->nused);
	for (i = a->spare; i != NIL; i = a->recs[i].u.free.next) {
		CHECK(i < a->nrecs && ++nspare <= a->nrecs, "check: spare list is broken");
		CHECK(a->recs[i].len == 0, "check: spare record %u has a length", i);
	}
	CHECK(nspare + nused + nfree == a->nrecs,
	      "check: %" PRIu64 " spare + %" PRIu64 " blocks != %u records", nspare, nused + nfree,
	      a->nrecs);
	return check_lists(a);
}

/* ---- placement ---- */

uint64_t mc_alloc_rand(uint64_t *rng)
{
	uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

bool mc_alloc_strategy_parse(const char *s, enum mc_alloc_strategy *strategy_out)
{
	if (!strcmp(s, "random"))
		*strategy_out = MC_ALLOC_RANDOM;
	else if (!strcmp(s, "free_ratio_first"))
		*strategy_out = MC_ALLOC_FREE_RATIO_FIRST;
	else if (!strcmp(s, "local_first"))
		*strategy_out = MC_ALLOC_LOCAL_FIRST;
	else
		return false;
	return true;
}

const char *mc_alloc_strategy_name(enum mc_alloc_strategy strategy)
{
	return strategy == MC_ALLOC_FREE_RATIO_FIRST ? "free_ratio_first"
	       : strategy == MC_ALLOC_LOCAL_FIRST    ? "local_first"
						     : "random";
}

struct place_ctx {
	const struct mc_alloc_target *targets;
	uint32_t ntargets;
	uint64_t len;
	uint32_t want;
	uint64_t *rng;
	struct mc_alloc_placement *out;
	uint32_t n; /* placed so far */
	bool nomem; /* some allocator could not grow */
};

static bool target_used(const struct place_ctx *x, uint32_t t)
{
	uint32_t i;

	for (i = 0; i < x->n; i++)
		if (x->out[i].target == t)
			return true;
	return false;
}

/* Try one target: a random allocator first, then the others in turn. */
static bool try_target(struct place_ctx *x, uint32_t t)
{
	const struct mc_alloc_target *tg = &x->targets[t];
	uint32_t k, j, start;
	uint64_t addr;
	mc_status st;

	if (!tg->nallocs)
		return false;
	start = tg->nallocs > 1 ? (uint32_t)(mc_alloc_rand(x->rng) % tg->nallocs) : 0;
	for (k = 0; k < tg->nallocs; k++) {
		j = start + k < tg->nallocs ? start + k : start + k - tg->nallocs;
		st = mc_offset_alloc_alloc(tg->allocs[j], x->len, &addr);
		if (st == MC_OK) {
			x->out[x->n].target = t;
			x->out[x->n].alloc_index = j;
			x->out[x->n].alloc = tg->allocs[j];
			x->out[x->n].addr = addr;
			x->n++;
			return true;
		}
		if (st == MC_ERR_NOMEM)
			x->nomem = true;
	}
	return false;
}

static void random_walk(struct place_ctx *x)
{
	uint32_t limit = MC_MIN(100u, x->ntargets), tried = 0, i, t;
	uint32_t start = (uint32_t)(mc_alloc_rand(x->rng) % x->ntargets);

	for (i = 0; i < x->ntargets && tried < limit && x->n < x->want; i++) {
		t = start + i < x->ntargets ? start + i : start + i - x->ntargets;
		if (target_used(x, t))
			continue;
		tried++;
		try_target(x, t);
	}
}

struct ratio {
	double ratio;
	uint32_t t;
	uint32_t pos; /* sample order, the tie-break */
};

static int ratio_cmp(const void *pa, const void *pb)
{
	const struct ratio *a = pa, *b = pb;

	if (a->ratio != b->ratio)
		return a->ratio > b->ratio ? -1 : 1;
	return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static double target_free_ratio(const struct mc_alloc_target *tg)
{
	uint64_t cap = 0, fr = 0;
	uint32_t j;

	for (j = 0; j < tg->nallocs; j++) {
		cap += mc_offset_alloc_capacity(tg->allocs[j]);
		fr += mc_offset_alloc_free_bytes(tg->allocs[j]);
	}
	return cap ? (double)fr / (double)cap : 0.0;
}

static void free_ratio_pass(struct place_ctx *x)
{
	struct ratio stack_buf[64], *buf = stack_buf;
	uint64_t want = 6ull * (x->want - x->n);
	uint32_t k = (uint32_t)MC_MIN(want, (uint64_t)x->ntargets), m = 0, i, t;
	uint32_t start = (uint32_t)(mc_alloc_rand(x->rng) % x->ntargets);

	if (k > MC_ARRAY_SIZE(stack_buf)) {
		buf = mc_malloc(k * sizeof(*buf));
		if (!buf)
			return; /* the random walk still runs */
	}
	for (i = 0; i < k; i++) {
		t = start + i < x->ntargets ? start + i : start + i - x->ntargets;
		if (target_used(x, t))
			continue;
		buf[m].ratio = target_free_ratio(&x->targets[t]);
		buf[m].t = t;
		buf[m].pos = m;
		m++;
	}
	qsort(buf, m, sizeof(*buf), ratio_cmp);
	for (i = 0; i < m && x->n < x->want; i++)
		try_target(x, buf[i].t);
	if (buf != stack_buf)
		mc_free(buf);
}

mc_status mc_alloc_place(const struct mc_alloc_target *targets, uint32_t ntargets,
			 const struct mc_alloc_request *req, uint64_t *rng,
			 struct mc_alloc_placement *placements_out, uint32_t *nplaced_out)
{
	struct place_ctx x = {
		.targets = targets,
		.ntargets = ntargets,
		.len = req->len,
		.want = req->replica_num,
		.rng = rng,
		.out = placements_out,
	};
	uint32_t i;

	if (!req->len || !req->replica_num || (req->npreferred && !req->preferred))
		return MC_ERR_INVALID_PARAMS;
	for (i = 0; i < req->npreferred; i++) {
		if (req->preferred[i] >= ntargets) {
			mc_error("placement: preferred target %u of %u does not exist",
				 req->preferred[i], ntargets);
			return MC_ERR_INVALID_PARAMS;
		}
	}
	for (i = 0; i < req->npreferred && x.n < x.want; i++)
		if (!target_used(&x, req->preferred[i]))
			try_target(&x, req->preferred[i]);
	if (x.n < x.want && ntargets) {
		if (req->strategy == MC_ALLOC_FREE_RATIO_FIRST)
			free_ratio_pass(&x);
		if (x.n < x.want)
			random_walk(&x);
	}
	if (!x.n)
		return x.nomem ? MC_ERR_NOMEM : MC_ERR_NO_AVAILABLE_HANDLE;
	*nplaced_out = x.n;
	return MC_OK;
}

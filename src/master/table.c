/*
 * master/table.c - the master's object table: the open-addressing hash of
 * object pointers, its incremental resize and the scan cursor (split out
 * of objects.c, whose header comment describes the table's design).
 */
#define MC_LOG_MODULE "master"
#include "master/master_int.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"

#define TAG_SHIFT     48
#define PTR_MASK      ((1ull << TAG_SHIFT) - 1)
#define MIGRATE_STEP  1u /* old slots moved per insert while resizing, beyond the due share */
#define MIGRATE_AHEAD 8u /* objects of old slots prefetched this far ahead of the move */

/* ------------------------------------------------------------------------ */
/* object table                                                              */

static inline uint64_t obj_hash(const struct mc_master *m, uint16_t tenant, const char *key,
				size_t len)
{
	return XXH3_64bits_withSeed(key, len,
				    m->hash_seed + (uint64_t)tenant * 0x9E3779B97F4A7C15ull);
}

static inline uint64_t slot_make(const struct mc_obj *o, uint64_t h)
{
	return (uint64_t)(uintptr_t)o | (h >> TAG_SHIFT << TAG_SHIFT);
}

static struct mc_obj *probe(const uint64_t *slots, uint64_t mask, uint64_t h, uint16_t tenant,
			    const char *key, size_t len)
{
	uint64_t tag = h >> TAG_SHIFT;
	uint64_t i = h & mask;

	for (;;) {
		uint64_t s = slots[i];
		struct mc_obj *o;

		if (!s)
			return NULL;
		o = (struct mc_obj *)(uintptr_t)(s & PTR_MASK);
		if ((s >> TAG_SHIFT) == tag && o->key_len == len && o->tenant == tenant &&
		    memcmp(o->key, key, len) == 0)
			return o;
		i = (i + 1) & mask;
	}
}

struct mc_obj *mc_master_obj_find(struct mc_master *m, uint16_t tenant, const char *key, size_t len)
{
	uint64_t h = obj_hash(m, tenant, key, len);
	struct mc_obj *o = probe(m->slots, m->mask, h, tenant, key, len);

	if (!o && m->old)
		o = probe(m->old, m->old_mask, h, tenant, key, len);
	return o;
}

void mc_master_obj_prefetch(const struct mc_master *m, uint16_t tenant, const char *key, size_t len)
{
	uint64_t h = obj_hash(m, tenant, key, len);

	__builtin_prefetch(&m->slots[h & m->mask]);
}

/*
 * Batched lookups.  With tens of millions of objects a lookup is two cache
 * misses, the table slot and then the object it points at, and one at a
 * time they run back to back.  Here the key of lookup i is hashed and its
 * home slot prefetched FIND_AHEAD lookups before it is probed, and the
 * object in that slot (when its tag matches) prefetched half-way, so the
 * misses of several keys are in flight together.  Same answers as
 * mc_master_obj_find, key by key.
 */
#define FIND_AHEAD 8u
#define FIND_RING  (4 * FIND_AHEAD) /* > 2 * FIND_AHEAD: written before read */

static inline bool find_key_ok(const struct mc_proto_str *k)
{
	return k->len && k->len <= MC_STORE_KEY_MAX;
}

void mc_master_obj_find_many(struct mc_master *m, uint16_t tenant, const struct mc_proto_str *keys,
			     uint32_t n, struct mc_obj **out)
{
	/* the hash of key i lives at i % FIND_RING from stage one to stage three */
	uint64_t hs[FIND_RING];

	for (uint32_t i = 0; i < n + 2 * FIND_AHEAD; i++) {
		if (i < n && find_key_ok(&keys[i])) {
			uint64_t h = obj_hash(m, tenant, keys[i].ptr, keys[i].len);
			hs[i % FIND_RING] = h;
			__builtin_prefetch(&m->slots[h & m->mask]);
		}
		if (i >= FIND_AHEAD && i - FIND_AHEAD < n && find_key_ok(&keys[i - FIND_AHEAD])) {
			uint64_t h = hs[(i - FIND_AHEAD) % FIND_RING];
			uint64_t sl = m->slots[h & m->mask];
			if (sl && (sl >> TAG_SHIFT) == (h >> TAG_SHIFT))
				__builtin_prefetch((const void *)(uintptr_t)(sl & PTR_MASK));
		}
		if (i >= 2 * FIND_AHEAD) {
			uint32_t j = i - 2 * FIND_AHEAD;
			const struct mc_proto_str *k = &keys[j];
			struct mc_obj *o = NULL;

			if (find_key_ok(k)) {
				uint64_t h = hs[j % FIND_RING];
				o = probe(m->slots, m->mask, h, tenant, k->ptr, k->len);
				if (!o && m->old)
					o = probe(m->old, m->old_mask, h, tenant, k->ptr, k->len);
			}
			out[j] = o;
		}
	}
}

static void table_place(uint64_t *slots, uint64_t mask, uint64_t s, uint64_t h)
{
	uint64_t i = h & mask;

	while (slots[i])
		i = (i + 1) & mask;
	slots[i] = s;
}

/*
 * Incremental resize.  The old table is drained one run (a maximal block
 * of occupied slots) at a time, starting at a slot that was empty when the
 * resize began: every key of a run has its home slot inside the run, so
 * emptying whole runs never breaks a probe sequence of the runs left, and
 * since nothing is inserted into the old table that first slot stays empty
 * and bounds the last run.  Lookups and deletes look in the new table,
 * then the old one; inserts go to the new one, the tick moves slots for
 * a bounded time (tick.c) and each insert moves a few (migrate_step).
 *
 * How many per insert.  A moved slot costs two cache misses (the object,
 * to rehash its key, and its new home), 0.3-0.5 us at tens of millions of
 * objects, and a BatchPutStart of 1000 keys is 1000 inserts in one turn of
 * the loop: 128 slots per insert made that turn 50-100 ms while a table of
 * 2^26 slots drained.  The move only has to end before the new table is
 * due to grow in its turn, which is headroom = 3/4 of its slots - nobjs
 * inserts away, so an insert moves old_left / headroom + MIGRATE_STEP
 * slots: the ratio old_left / headroom never rises, and with one insert of
 * headroom left the step covers what is left.  Right after a doubling that
 * is 1.33 + 1 slots.  The step was 1.33 + 8 before: the move then ended
 * within a seventh of the growth period, but each 1000-key BatchPutStart
 * moved 9,300 slots, a third of its CPU time in the turns after a doubling
 * (at 16 M objects, with the first writes to the new table's pages most
 * of the rest); now the move spans about half the period, and lookups
 * look in both tables that much longer (a second probe only for keys not
 * found in the new one).  The objects of the slots being moved are
 * prefetched MIGRATE_AHEAD slots ahead, so their misses overlap.
 */
void mc_master_table_migrate(struct mc_master *m, uint64_t budget)
{
	while (m->old && budget) {
		uint64_t i = m->old_cursor;

		if (m->old_left == 0) {
			/* hundreds of MB at 10^8 objects: unmapped in one call that
			 * is a pause of its own; the tick gives it back in pieces */
			mc_master_free_later(m, m->old, (m->old_mask + 1) * sizeof(uint64_t));
			m->old = NULL;
			break;
		}
		if (!m->old[i]) {
			m->old_cursor = (i + 1) & m->old_mask;
			m->old_left--;
			budget--;
			continue;
		}
		while (m->old[i]) {
			uint64_t sl = m->old[i];
			uint64_t ahead = m->old[(i + MIGRATE_AHEAD) & m->old_mask];
			const struct mc_obj *o = (const struct mc_obj *)(uintptr_t)(sl & PTR_MASK);

			/* the object is a cache miss (its key is rehashed): start
			 * the one a few slots on while this one is placed */
			if (ahead)
				__builtin_prefetch((const void *)(uintptr_t)(ahead & PTR_MASK));
			table_place(m->slots, m->mask, sl,
				    obj_hash(m, o->tenant, o->key, o->key_len));
			m->old[i] = 0;
			i = (i + 1) & m->old_mask;
			m->old_left--;
			if (budget)
				budget--;
		}
		m->old_cursor = i;
	}
}

/* Old slots an insert moves: enough that the move ends before the new table
 * is due to grow (see above). */
static uint64_t migrate_step(const struct mc_master *m)
{
	uint64_t cap = (m->mask + 1) / 4 * 3, headroom = cap > m->nobjs ? cap - m->nobjs : 1;

	return m->old_left / headroom + MIGRATE_STEP;
}

void mc_master_table_settle(struct mc_master *m)
{
	mc_master_table_migrate(m, UINT64_MAX);
}

bool mc_master_table_resizing(const struct mc_master *m)
{
	return m->old != NULL;
}

/* glibc's chunk for an allocation: its usable size and its size field */
static uint64_t heap_chunk(const void *p)
{
	return p ? (uint64_t)malloc_usable_size((void *)(uintptr_t)p) + sizeof(size_t) : 0;
}

static void usage_walk(const uint64_t *slots, uint64_t mask, struct mc_master_mem_usage *u)
{
	for (uint64_t i = 0; slots && i <= mask; i++) {
		const struct mc_obj *o = (const struct mc_obj *)(uintptr_t)(slots[i] & PTR_MASK);

		if (!o)
			continue;
		u->objects++;
		u->key_bytes += o->key_len;
		u->header_bytes += sizeof(*o);
		u->record_heap += heap_chunk(o);
		u->ext_heap += heap_chunk(o->ext);
	}
	u->table_bytes += slots ? (mask + 1) * sizeof(*slots) : 0;
}

void mc_master_mem_usage(const struct mc_master *m, struct mc_master_mem_usage *out)
{
	memset(out, 0, sizeof(*out));
	usage_walk(m->slots, m->mask, out);
	usage_walk(m->old, m->old_mask, out);
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		struct mc_offset_alloc_stats st;

		if (!m->segs[i].alloc)
			continue;
		mc_offset_alloc_stats(m->segs[i].alloc, &st);
		out->alloc_meta += st.meta_bytes;
	}
}

void mc_master_table_reseed(struct mc_master *m, uint64_t salt)
{
	if (m->nobjs || m->old)
		return;
	m->hash_seed = XXH3_64bits_withSeed(&salt, sizeof(salt), m->hash_seed);
}

mc_status mc_master_table_resize(struct mc_master *m, uint64_t nslots, bool huge)
{
	uint64_t *ns, start = 0;

	mc_master_table_settle(m);
	ns = mc_calloc(nslots, sizeof(uint64_t));
	if (!ns)
		return MC_ERR_NOMEM;
	/* Only where a pause is allowed: the move's first steps touch slots all
	 * over the new table, so with huge pages they fault in (zero, and with
	 * THP defrag=madvise compact for) the whole table in one turn (4.7 s of
	 * CPU at 42 M objects); 4 KiB pages spread that over the move. */
	if (huge)
		mc_alloc_hint_huge(ns, nslots * sizeof(uint64_t));
	while (m->slots[start]) /* the load is below 1: an empty slot exists */
		start++;
	m->old = m->slots;
	m->old_mask = m->mask;
	m->old_cursor = start;
	m->old_left = m->mask + 1;
	m->slots = ns;
	m->mask = nslots - 1;
	mc_master_table_migrate(m, migrate_step(m));
	return MC_OK;
}

/*
 * Scan cursor.  The regex calls walk the table in steps with other
 * requests in between, so the table may grow (and migrate) between two
 * steps; it never shrinks while a cursor is open.  Tables are powers of
 * two and an object's home slot is its hash masked, so with unit the
 * smallest table size seen when the scan began, every table since is a
 * multiple of unit and h & (unit - 1) is a fixed "bucket" of each object.
 * A step takes buckets [pos, pos + n) and, in each table present (the new
 * one and, during a resize, the old one), walks the home slots k * unit +
 * [pos, pos + n) for every k, then on to the end of the last run (linear
 * probing may have pushed an object past its home range, never before it),
 * keeping the objects whose home is in the range.  A step runs under the
 * state lock with nothing moving, and every object lies in exactly one
 * table, so each bucket is visited whole, once.
 */
void mc_master_cursor_open(struct mc_master *m, struct mc_master_cursor *cur)
{
	cur->unit = m->mask + 1;
	if (m->old && m->old_mask + 1 < cur->unit)
		cur->unit = m->old_mask + 1;
	cur->pos = 0;
	m->ncursors++;
}

void mc_master_cursor_close(struct mc_master *m, struct mc_master_cursor *cur)
{
	if (cur->unit) {
		mc_assert(m->ncursors > 0);
		m->ncursors--;
	}
	cur->unit = 0;
	cur->pos = 0;
}

/* Objects of one table whose home slot is in [a, a + n); false if fn ended it. */
static bool walk_range(struct mc_master *m, const uint64_t *slots, uint64_t mask, uint64_t a,
		       uint64_t n, mc_master_obj_fn fn, void *arg)
{
	uint64_t i = a;

	for (uint64_t steps = 0; steps <= mask; steps++, i = (i + 1) & mask) {
		uint64_t s = slots[i], home;
		struct mc_obj *o;

		if (!s) {
			if (steps >= n)
				break;
			continue;
		}
		o = (struct mc_obj *)(uintptr_t)(s & PTR_MASK);
		home = obj_hash(m, o->tenant, o->key, o->key_len) & mask;
		if (((home - a) & mask) < n && !fn(arg, o))
			return false;
	}
	return true;
}

static bool walk_table(struct mc_master *m, const uint64_t *slots, uint64_t mask,
		       const struct mc_master_cursor *cur, uint64_t n, mc_master_obj_fn fn,
		       void *arg)
{
	mc_assert((mask + 1) % cur->unit == 0);
	for (uint64_t base = 0; base <= mask; base += cur->unit) {
		if (!walk_range(m, slots, mask, base + cur->pos, n, fn, arg))
			return false;
	}
	return true;
}

bool mc_master_cursor_step(struct mc_master *m, struct mc_master_cursor *cur, uint64_t slots,
			   mc_master_obj_fn fn, void *arg)
{
	/* slots of the biggest table per bucket of unit */
	uint64_t big = m->old && m->old_mask > m->mask ? m->old_mask + 1 : m->mask + 1;
	uint64_t n = slots / (big / cur->unit);
	bool go;

	if (mc_master_cursor_done(cur))
		return true;
	if (n == 0)
		n = 1;
	if (n > cur->unit - cur->pos)
		n = cur->unit - cur->pos;
	go = walk_table(m, m->slots, m->mask, cur, n, fn, arg);
	if (go && m->old)
		go = walk_table(m, m->old, m->old_mask, cur, n, fn, arg);
	cur->pos += n;
	return go;
}

mc_status mc_master_obj_insert(struct mc_master *m, struct mc_obj *o)
{
	uint64_t h;

	mc_assert(((uintptr_t)o >> TAG_SHIFT) == 0);
	if ((m->nobjs + 1) * 4 > (m->mask + 1) * 3) {
		mc_status st = mc_master_table_resize(m, (m->mask + 1) * 2, false);

		if (st != MC_OK)
			return st;
	}
	h = obj_hash(m, o->tenant, o->key, o->key_len);
	table_place(m->slots, m->mask, slot_make(o, h), h);
	m->nobjs++;
	if (m->old)
		mc_master_table_migrate(m, migrate_step(m));
	return MC_OK;
}

/* Find o's slot in one table by pointer; false if it is not there. */
static bool slot_of(const struct mc_master *m, const uint64_t *slots, uint64_t mask,
		    const struct mc_obj *o, uint64_t *i_out)
{
	uint64_t i = obj_hash(m, o->tenant, o->key, o->key_len) & mask;

	while (slots[i]) {
		if ((slots[i] & PTR_MASK) == (uint64_t)(uintptr_t)o) {
			*i_out = i;
			return true;
		}
		i = (i + 1) & mask;
	}
	return false;
}

/* Empty slot i of a table, pulling later entries of its run back (no
 * tombstones): an entry moves into the hole unless its home slot lies
 * cyclically in (hole, its slot]. */
static void backshift(const struct mc_master *m, uint64_t *slots, uint64_t mask, uint64_t i)
{
	uint64_t j = i;

	for (;;) {
		uint64_t s, home;
		const struct mc_obj *x;

		j = (j + 1) & mask;
		s = slots[j];
		if (!s)
			break;
		x = (const struct mc_obj *)(uintptr_t)(s & PTR_MASK);
		home = obj_hash(m, x->tenant, x->key, x->key_len) & mask;
		if (((j - home) & mask) >= ((j - i) & mask)) {
			slots[i] = s;
			i = j;
		}
	}
	slots[i] = 0;
}

void mc_master_table_delete(struct mc_master *m, const struct mc_obj *o)
{
	uint64_t i;

	if (slot_of(m, m->slots, m->mask, o, &i)) {
		backshift(m, m->slots, m->mask, i);
	} else {
		mc_assert(m->old && slot_of(m, m->old, m->old_mask, o, &i));
		backshift(m, m->old, m->old_mask, i);
	}
	m->nobjs--;
}

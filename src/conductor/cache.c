/*
 * conductor/cache.c - the block cache: an open-addressing hash map from
 * key to entry and the entries on an intrusive doubly linked recency list.
 *
 * Entries live in one array and link to each other by index, not by
 * pointer, so the array can grow (doubling, up to the capacity) without
 * fixing links; a freed entry goes on a free list threaded through the
 * same links.  The map is linear probing over a power-of-two table of
 * entry indices (0 = empty slot) kept at most half full, with
 * backward-shift deletion so no tombstones accumulate over millions of
 * evictions.
 *
 * The recency list holds only unpinned entries: pinning unlinks an entry,
 * the last unpin links it back at the head.  Eviction is then always the
 * tail, O(1), and can never meet a pinned block; a cache whose entries are
 * all pinned has an empty list and refuses the insert.
 *
 * Invariants: size = entries in the map = list length + pinned entries;
 * size <= capacity.
 */
#include "conductor/cache.h"

#include <string.h>

#include "base/alloc.h"
#include "base/log.h"

#define NIL UINT32_MAX

struct entry {
	uint64_t key;
	uint32_t prev; /* towards the head (more recent); free list: unused */
	uint32_t next; /* towards the tail; free list: next free entry */
	uint32_t pins;
};

struct mc_kvcache {
	uint64_t capacity;
	struct entry *e;
	uint32_t e_used; /* entries ever handed out (the array's high mark) */
	uint32_t e_cap;	 /* allocated entries */
	uint32_t free_head;
	uint32_t *slots; /* entry index + 1, or 0 */
	uint64_t mask;	 /* slots - 1 */
	uint64_t size;
	uint64_t pinned;
	uint64_t evictions;
	uint32_t head; /* most recently used, unpinned */
	uint32_t tail; /* least recently used, unpinned */
};

static inline uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

mc_status mc_kvcache_new(uint64_t capacity, struct mc_kvcache **out)
{
	struct mc_kvcache *c;

	*out = NULL;
	if (capacity > MC_KVCACHE_MAX_BLOCKS)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "cache of %llu blocks, more than %u",
				    (unsigned long long)capacity, MC_KVCACHE_MAX_BLOCKS);
	c = mc_calloc(1, sizeof(*c));
	if (!c)
		return mc_set_error(MC_ERR_NOMEM, "no memory for a cache");
	c->capacity = capacity;
	c->slots = mc_calloc(16, sizeof(*c->slots));
	if (!c->slots) {
		mc_free(c);
		return mc_set_error(MC_ERR_NOMEM, "no memory for a cache");
	}
	c->mask = 15;
	c->free_head = NIL;
	c->head = c->tail = NIL;
	*out = c;
	return MC_OK;
}

void mc_kvcache_free(struct mc_kvcache *c)
{
	if (!c)
		return;
	mc_free(c->e);
	mc_free(c->slots);
	mc_free(c);
}

uint64_t mc_kvcache_capacity(const struct mc_kvcache *c)
{
	return c->capacity;
}

uint64_t mc_kvcache_size(const struct mc_kvcache *c)
{
	return c->size;
}

uint64_t mc_kvcache_pinned(const struct mc_kvcache *c)
{
	return c->pinned;
}

uint64_t mc_kvcache_evictions(const struct mc_kvcache *c)
{
	return c->evictions;
}

/* ---- the map ----------------------------------------------------------------------------- */

static uint32_t find(const struct mc_kvcache *c, uint64_t key)
{
	for (uint64_t s = mix(key) & c->mask;; s = (s + 1) & c->mask) {
		uint32_t v = c->slots[s];
		if (!v)
			return NIL;
		if (c->e[v - 1].key == key)
			return v - 1;
	}
}

static void slot_put(uint32_t *slots, uint64_t mask, uint64_t key, uint32_t idx)
{
	uint64_t s = mix(key) & mask;
	while (slots[s])
		s = (s + 1) & mask;
	slots[s] = idx + 1;
}

static mc_status grow_slots(struct mc_kvcache *c)
{
	uint64_t n = (c->mask + 1) * 2;
	uint32_t *slots = mc_calloc(n, sizeof(*slots));
	if (!slots)
		return mc_set_error(MC_ERR_NOMEM, "no memory for %llu cache slots",
				    (unsigned long long)n);
	for (uint64_t s = 0; s <= c->mask; s++)
		if (c->slots[s])
			slot_put(slots, n - 1, c->e[c->slots[s] - 1].key, c->slots[s] - 1);
	mc_free(c->slots);
	c->slots = slots;
	c->mask = n - 1;
	return MC_OK;
}

/* Backward-shift deletion: pull later members of the probe run into the hole. */
static void slot_del(struct mc_kvcache *c, uint64_t key)
{
	uint64_t s = mix(key) & c->mask;
	while (c->e[c->slots[s] - 1].key != key)
		s = (s + 1) & c->mask;
	for (uint64_t j = (s + 1) & c->mask; c->slots[j]; j = (j + 1) & c->mask) {
		uint64_t home = mix(c->e[c->slots[j] - 1].key) & c->mask;
		/* j's entry may move to s unless its home lies cyclically in (s, j] */
		bool stays = s <= j ? (home > s && home <= j) : (home > s || home <= j);
		if (!stays) {
			c->slots[s] = c->slots[j];
			s = j;
		}
	}
	c->slots[s] = 0;
}

/* ---- the recency list -------------------------------------------------------------------- */

static void unlink_lru(struct mc_kvcache *c, uint32_t i)
{
	struct entry *e = &c->e[i];
	if (e->prev != NIL)
		c->e[e->prev].next = e->next;
	else
		c->head = e->next;
	if (e->next != NIL)
		c->e[e->next].prev = e->prev;
	else
		c->tail = e->prev;
	e->prev = e->next = NIL;
}

static void push_head(struct mc_kvcache *c, uint32_t i)
{
	struct entry *e = &c->e[i];
	e->prev = NIL;
	e->next = c->head;
	if (c->head != NIL)
		c->e[c->head].prev = i;
	else
		c->tail = i;
	c->head = i;
}

static void drop(struct mc_kvcache *c, uint32_t i)
{
	unlink_lru(c, i);
	slot_del(c, c->e[i].key);
	c->e[i].next = c->free_head;
	c->free_head = i;
	c->size--;
}

/* ---- operations -------------------------------------------------------------------------- */

bool mc_kvcache_contains(const struct mc_kvcache *c, uint64_t key)
{
	return find(c, key) != NIL;
}

uint32_t mc_kvcache_pins(const struct mc_kvcache *c, uint64_t key)
{
	uint32_t i = find(c, key);
	return i == NIL ? 0 : c->e[i].pins;
}

size_t mc_kvcache_match(const struct mc_kvcache *c, const uint64_t *keys, size_t n)
{
	size_t m = 0;
	while (m < n && find(c, keys[m]) != NIL)
		m++;
	return m;
}

bool mc_kvcache_touch(struct mc_kvcache *c, uint64_t key)
{
	uint32_t i = find(c, key);
	if (i == NIL)
		return false;
	if (!c->e[i].pins) {
		unlink_lru(c, i);
		push_head(c, i);
	}
	return true;
}

static mc_status new_entry(struct mc_kvcache *c, uint32_t *idx_out)
{
	if (c->free_head != NIL) {
		*idx_out = c->free_head;
		c->free_head = c->e[c->free_head].next;
		return MC_OK;
	}
	if (c->e_used == c->e_cap) {
		uint64_t cap = c->e_cap ? (uint64_t)c->e_cap * 2 : 64;
		if (cap > c->capacity)
			cap = c->capacity;
		struct entry *e = mc_realloc(c->e, cap * sizeof(*e));
		if (!e)
			return mc_set_error(MC_ERR_NOMEM, "no memory for %llu cache entries",
					    (unsigned long long)cap);
		c->e = e;
		c->e_cap = (uint32_t)cap;
	}
	*idx_out = c->e_used++;
	return MC_OK;
}

/* Insert without touching recency of an existing entry; *idx_out is its entry. */
static mc_status lookup_or_insert(struct mc_kvcache *c, uint64_t key, uint32_t *idx_out)
{
	uint32_t i = find(c, key);
	mc_status st;

	if (i != NIL) {
		*idx_out = i;
		return MC_OK;
	}
	if (c->size >= c->capacity) {
		if (c->tail == NIL)
			return mc_set_error(MC_ERR_NO_AVAILABLE_HANDLE,
					    "cache of %llu blocks is full of pinned blocks",
					    (unsigned long long)c->capacity);
		drop(c, c->tail);
		c->evictions++;
	}
	if ((c->size + 1) * 2 > c->mask + 1 && (st = grow_slots(c)) != MC_OK)
		return st;
	if ((st = new_entry(c, &i)) != MC_OK)
		return st;
	c->e[i].key = key;
	c->e[i].pins = 0;
	c->e[i].prev = c->e[i].next = NIL;
	slot_put(c->slots, c->mask, key, i);
	c->size++;
	push_head(c, i);
	*idx_out = i;
	return MC_OK;
}

mc_status mc_kvcache_insert(struct mc_kvcache *c, uint64_t key)
{
	uint32_t i;
	mc_status st = lookup_or_insert(c, key, &i);
	if (st == MC_OK && !c->e[i].pins) {
		unlink_lru(c, i);
		push_head(c, i);
	}
	return st;
}

static void pin_entry(struct mc_kvcache *c, uint32_t i)
{
	if (!c->e[i].pins++) {
		unlink_lru(c, i);
		c->pinned++;
	}
}

mc_status mc_kvcache_pin(struct mc_kvcache *c, uint64_t key)
{
	uint32_t i = find(c, key);
	if (i == NIL)
		return mc_set_error(MC_ERR_NOT_FOUND, "block %llu is not cached",
				    (unsigned long long)key);
	if (c->e[i].pins == UINT32_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "block %llu pinned too often",
				    (unsigned long long)key);
	pin_entry(c, i);
	return MC_OK;
}

mc_status mc_kvcache_unpin(struct mc_kvcache *c, uint64_t key)
{
	uint32_t i = find(c, key);
	if (i == NIL)
		return mc_set_error(MC_ERR_NOT_FOUND, "block %llu is not cached",
				    (unsigned long long)key);
	if (!c->e[i].pins)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "block %llu is not pinned",
				    (unsigned long long)key);
	if (!--c->e[i].pins) {
		c->pinned--;
		push_head(c, i);
	}
	return MC_OK;
}

bool mc_kvcache_remove(struct mc_kvcache *c, uint64_t key)
{
	uint32_t i = find(c, key);
	if (i == NIL || c->e[i].pins)
		return false;
	drop(c, i);
	return true;
}

size_t mc_kvcache_acquire(struct mc_kvcache *c, const uint64_t *keys, size_t n,
			  mc_status *status_out)
{
	mc_status st = MC_OK;
	size_t k;

	for (k = 0; k < n; k++) {
		uint32_t i;
		if ((st = lookup_or_insert(c, keys[k], &i)) != MC_OK)
			break;
		if (c->e[i].pins == UINT32_MAX) {
			st = mc_set_error(MC_ERR_INVALID_PARAMS, "block %llu pinned too often",
					  (unsigned long long)keys[k]);
			break;
		}
		pin_entry(c, i);
	}
	if (status_out)
		*status_out = st;
	return k;
}

void mc_kvcache_release(struct mc_kvcache *c, const uint64_t *keys, size_t n)
{
	while (n--)
		(void)mc_kvcache_unpin(c, keys[n]);
}

size_t mc_kvcache_admit(struct mc_kvcache *c, const uint64_t *keys, size_t n)
{
	size_t k = mc_kvcache_acquire(c, keys, n, NULL);
	mc_kvcache_release(c, keys, k);
	return k;
}

size_t mc_kvcache_lru_order(const struct mc_kvcache *c, uint64_t *keys_out, size_t cap)
{
	size_t n = 0;
	for (uint32_t i = c->head; i != NIL && n < cap; i = c->e[i].next)
		keys_out[n++] = c->e[i].key;
	return n;
}

/*
 * master/lru.c - the per-segment LRU (ours, --preferred_segment_lru;
 * paper 4.6, issue 17 part 3): a put whose preferred segment is full
 * makes room there by evicting that segment's least recently used
 * objects (put.c's make_room calls mc_master_evict_target), never a
 * leased or pinned one.  The master's own eviction (tick.c) is global
 * and by watermark; this one is per segment and on demand.
 */
#define MC_LOG_MODULE "master"
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "master/master_int.h"

#define LRU_WINDOW (1u << 18) /* slots one scan looks at, as tick.c's rounds */

/* o has a live memory replica on a segment slot of target t */
static bool on_target(const struct mc_master *m, const struct mc_obj *o, uint32_t t)
{
	uint32_t first = m->tstart[t], end = first + m->targets[t].nallocs;

	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep((struct mc_obj *)o, i);

		if (!mc_master_rep_live(m, r) || mc_master_rep_disk(m, r))
			continue;
		for (uint32_t k = first; k < end; k++)
			if (m->tsegs[k] == r->seg)
				return true;
	}
	return false;
}

/* Release o's memory replicas on target t (every segment of t has its
 * name); the others stay.  Returns how many live memory replicas o keeps. */
static uint32_t drop_target_reps(struct mc_master *m, struct mc_obj *o, uint32_t t)
{
	const char *name = m->targets[t].name;
	uint32_t mem = 0;

	(void)mc_master_obj_drop_seg_reps(m, o, name, strlen(name));
	(void)mc_master_obj_ext_fit(o, o->nrep); /* shrinking never fails */
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		mem += mc_master_rep_live(m, r) && !mc_master_rep_disk(m, r);
	}
	return mem;
}

/*
 * Per-segment LRU (ours, paper 4.6): a put that prefers target t found it
 * full.  Among the objects with a memory replica on t that eviction may
 * take (complete, not hard-pinned, lease expired, not soft-pinned, no
 * task reading it, not in a group, not keep), drop the want least
 * recently used ones (lease deadline, which is the LRU key) from t: an
 * object whose only memory replica is there is evicted as a whole (its
 * disk copies stay), one with replicas elsewhere loses only this one.
 * Blocks a request holds a lease on, or a soft pin, are never taken, so
 * a node under pressure cannot evict what an ongoing request is reading.
 *
 * The candidates come from a per-segment cache: one scan of the table
 * (of a window of it when it is larger than LRU_WINDOW) lists every
 * candidate on t by key, sorted by its LRU key, and later rounds take
 * them in that order, skipping one that is gone, touched since (its key
 * moved: it is now more recent than every entry left, as everything
 * stamped after the scan is) or no longer a candidate; the table is
 * scanned again only when the list runs out.  Exact LRU but for one case:
 * a soft pin or lease that expires untouched after the scan makes its
 * object a candidate the list does not have until the next scan.
 * Returns how many objects lost a replica.
 */
struct mc_lru_ent {
	uint64_t t;
	uint32_t key_off;
	uint16_t key_len, tenant;
};

struct mc_lru_cache {
	uint32_t gen; /* of the segment slot when the list was made */
	bool valid;
	uint32_t head, n, cap;
	struct mc_lru_ent *v;
	char *keys;
	uint32_t keys_len, keys_cap;
};

static int lru_ent_cmp(const void *pa, const void *pb)
{
	const struct mc_lru_ent *a = pa, *b = pb;

	return a->t < b->t ? -1 : a->t > b->t;
}

/* o may go from target t now (see above) */
static bool target_candidate(struct mc_master *m, struct mc_obj *o, uint32_t t,
			     const struct mc_obj *keep, uint64_t now_ms)
{
	return o != keep && !o->group && mc_master_obj_evictable(m, o, now_ms) &&
	       on_target(m, o, t) && !mc_master_task_busy(m, o);
}

/* List target t's candidates into c, oldest first. */
static void lru_scan(struct mc_master *m, struct mc_lru_cache *c, uint32_t t,
		     const struct mc_obj *keep, uint64_t now_ms)
{
	/* both tables while a resize is under way (see evict_round) */
	uint64_t slots = mc_master_table_span(m), window = slots < LRU_WINDOW ? slots : LRU_WINDOW;
	uint64_t start = window == slots ? 0 : mc_alloc_rand(&m->rng) % slots;

	c->head = c->n = 0;
	c->keys_len = 0;
	for (uint64_t k = 0, i = start; k < window; k++, i = i + 1 < slots ? i + 1 : 0) {
		struct mc_obj *o = mc_master_table_at(m, i);

		if (!o || !target_candidate(m, o, t, keep, now_ms))
			continue;
		if (c->keys_len > UINT32_MAX - o->key_len ||
		    !mc_master_grow((void **)&c->v, &c->cap, c->n + 1, sizeof(*c->v)) ||
		    !mc_master_grow((void **)&c->keys, &c->keys_cap, c->keys_len + o->key_len, 1))
			break;
		memcpy(c->keys + c->keys_len, o->key, o->key_len);
		c->v[c->n++] = (struct mc_lru_ent){o->t, c->keys_len, o->key_len, o->tenant};
		c->keys_len += o->key_len;
	}
	qsort(c->v, c->n, sizeof(*c->v), lru_ent_cmp);
}

uint32_t mc_master_evict_target(struct mc_master *m, uint32_t t, uint32_t want,
				const struct mc_obj *keep, uint64_t now_ms)
{
	uint32_t seg, done = 0;
	struct mc_lru_cache *c;
	bool scanned = false;

	if (t >= m->ntargets || want == 0)
		return 0;
	seg = m->tsegs[m->tstart[t]];
	if (seg >= m->nlru) {
		void *p = mc_realloc(m->lru, (size_t)m->nsegs_slots * sizeof(*m->lru));

		if (!p || m->nsegs_slots <= seg)
			return 0;
		m->lru = p;
		memset(m->lru + m->nlru, 0, (size_t)(m->nsegs_slots - m->nlru) * sizeof(*m->lru));
		m->nlru = m->nsegs_slots;
	}
	c = &m->lru[seg];
	if (!c->valid || c->gen != m->segs[seg].gen) {
		c->valid = true;
		c->gen = m->segs[seg].gen;
		c->head = c->n = 0;
	}
	m->met.attempted_evictions++;
	while (done < want) {
		const struct mc_lru_ent *e;
		struct mc_obj *o;
		uint64_t size;

		if (c->head == c->n) {
			if (scanned)
				break;
			lru_scan(m, c, t, keep, now_ms);
			scanned = true;
			continue;
		}
		e = &c->v[c->head++];
		o = mc_master_obj_find(m, e->tenant, c->keys + e->key_off, e->key_len);
		if (!o || o->t != e->t || !target_candidate(m, o, t, keep, now_ms))
			continue;
		size = mc_obj_size(o);
		(void)mc_master_obj_prune(m, o); /* it has a live replica on t */
		if (drop_target_reps(m, o, t) > 0) {
			mc_master_wal_put(m, o); /* readable from its other replicas */
		} else if (mc_master_fs_drop_pending(m, o, false) == 0) {
			mc_master_obj_erase(m, o); /* else readable from disk */
		}
		m->met.evicted_key_count++;
		m->met.evicted_size_bytes += size;
		done++;
	}
	if (done)
		m->met.successful_evictions++;
	return done;
}

void mc_master_lru_free(struct mc_master *m)
{
	for (uint32_t i = 0; i < m->nlru; i++) {
		mc_free(m->lru[i].v);
		mc_free(m->lru[i].keys);
	}
	mc_free(m->lru);
	m->lru = NULL;
	m->nlru = 0;
}

/*
 * master/tick.c - what the master does to its tables on its own time,
 * moved out of objects.c (whose header has the tables and the object
 * layout): eviction, mc_master_tick (client expiry, graceful unmount
 * deadlines, soft pins, parked space, zombie puts, the table's resize
 * and the unmount sweep's slice) and the big frees it gives back in
 * pieces (mc_master_free_later).
 *
 * Eviction (spec 4) is approximate LRU by sampling, as Redis does: a round
 * looks at a window of up to 2^18 consecutive slots from a random start
 * (the whole table when it is smaller, so small tables are exact), keeps
 * the evictable objects (complete, readable, not hard-pinned, lease
 * expired; pass 1 skips live soft pins, pass 2 takes only them), and
 * evicts the ones with the oldest lease deadline (quickselect, no full
 * sort).  Target and lower bound are scaled to the window's share of the
 * table, so a big table is worked through over several 10 ms ticks.
 * Groups: a chosen member pulls in its whole group unless a member holds a
 * lease, in which case the group is skipped; a member pulled in passes the
 * chosen ones' test (memory_can_go), so one that is still owed a disk copy
 * keeps its memory.  A watermark round that frees
 * nothing backs off for EVICT_IDLE_MS.
 *
 * Other per-tick work is proportional to what is due, not to the table:
 * client expiry walks the clients, graceful deadlines the segments, soft
 * pins pop off their heap, parked space leaves a FIFO, the zombie scan
 * (once a second) walks only the in-flight puts, and the unmount sweep
 * gets one slice.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "master/master_int.h"

#define EVICT_WINDOW	(1u << 18) /* slots one eviction round looks at */
#define EVICT_IDLE_MS	100u	   /* back-off after a watermark round freed nothing */
#define PROC_SCAN_MS	1000u
#define MIGRATE_TICK_US 1000u	    /* the table's move in each tick (table.c) */
#define MIGRATE_CHUNK	4096u	    /* old slots between two reads of the clock */
#define SWEEP_TICK_US	100u	    /* the unmount sweep's slice in each tick */
#define FREE_TICK_BYTES (16u << 20) /* of big freed blocks given back per tick (~1 ms) */
#define FREE_LATER_MIN	(1u << 20)  /* smaller blocks are freed at once */

/* ------------------------------------------------------------------------ */
/* eviction                                                                  */

struct cand {
	uint64_t t;
	struct mc_obj *o;
};

/* a complete object with a soft pin that has not expired yet */
static bool soft_pinned(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms)
{
	return (o->flags & MC_OBJ_SOFT) && !(o->flags & MC_OBJ_PROC) &&
	       mc_master_pin_deadline(m, o) > now_ms;
}

/* o has a live memory replica: something eviction can free */
static bool has_mem_rep(const struct mc_master *m, const struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep((struct mc_obj *)o, i);

		if (mc_master_rep_live(m, r) && !mc_master_rep_disk(m, r))
			return true;
	}
	return false;
}

/*
 * o may lose its memory now, leases and pins aside: complete, not
 * hard-pinned, not already chosen, no offload or promotion reading it,
 * memory to free, and no disk copy owed (a DISK file its writer has not
 * reported, an eager offload the backfill has yet to queue).  The same
 * test for a chosen object and for each member its group pulls in, so
 * a group never drops a member that the tier still owes a copy.
 */
static bool memory_can_go(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms)
{
	if (o->flags & (MC_OBJ_PROC | MC_OBJ_HARD | MC_OBJ_MARK | MC_OBJ_OFFL))
		return false;
	if (!has_mem_rep(m, o))
		return false;
	return !mc_master_tier_pending(m, o, now_ms);
}

/* pass 1: not soft-pinned; pass 2: soft-pinned only */
static bool evictable(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms, int pass)
{
	if (mc_master_leased(m, o, now_ms) || !memory_can_go(m, o, now_ms))
		return false;
	return pass == 1 ? !soft_pinned(m, o, now_ms) : soft_pinned(m, o, now_ms);
}

bool mc_master_obj_evictable(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms)
{
	return evictable(m, o, now_ms, 1);
}

/* Put the k smallest (by t) first; O(n) expected. */
static void cand_select(struct cand *c, size_t n, size_t k, uint64_t *rng)
{
	size_t lo = 0, hi = n;

	if (k >= n)
		return;
	while (hi - lo > 1) {
		size_t p = lo + mc_alloc_rand(rng) % (hi - lo), i = lo, j = lo;
		uint64_t pv = c[p].t;
		struct cand tmp;

		/* three-way: [lo, i) < pv, [i, j) == pv, [j, hi) > pv */
		for (size_t x = lo; x < hi; x++) {
			if (c[x].t < pv) {
				tmp = c[x];
				c[x] = c[j];
				c[j] = c[i];
				c[i] = tmp;
				i++;
				j++;
			} else if (c[x].t == pv) {
				tmp = c[x];
				c[x] = c[j];
				c[j] = tmp;
				j++;
			}
		}
		if (k < i)
			hi = i;
		else if (k <= j)
			return;
		else
			lo = j;
	}
}

/* Mark o (and its group) for eviction, appending what was marked to *list. */
static bool mark_for_evict(struct mc_master *m, struct mc_obj *o, uint64_t now_ms, int pass,
			   struct mc_obj ***list, uint32_t *n, uint32_t *cap)
{
	const struct mc_group *g = mc_master_group_of(m, o);
	bool allow_soft = pass == 2;

	if (!g) {
		if (!mc_master_grow((void **)list, cap, *n + 1, sizeof(**list)))
			return false;
		o->flags |= MC_OBJ_MARK;
		(*list)[(*n)++] = o;
		return true;
	}
	for (uint32_t i = 0; i < g->nmem; i++) {
		if (mc_master_leased(m, g->mem[i], now_ms))
			return true; /* a leased member protects the whole group */
	}
	if (!mc_master_grow((void **)list, cap, *n + g->nmem, sizeof(**list)))
		return false;
	for (uint32_t i = 0; i < g->nmem; i++) {
		struct mc_obj *x = g->mem[i];

		if (!memory_can_go(m, x, now_ms))
			continue;
		if (soft_pinned(m, x, now_ms) &&
		    (!allow_soft || !m->cfg.allow_evict_soft_pinned_objects))
			continue;
		x->flags |= MC_OBJ_MARK;
		(*list)[(*n)++] = x;
	}
	return true;
}

/*
 * Offload-on-evict (spec 4.2): an object without a disk copy is queued for
 * offload instead of losing its memory.  true: keep o in memory this
 * round (queued, or the queue refused it and force-evict is off).  With
 * force-evict, at most offloading_queue_limit x offload_cap_ratio objects
 * are queued per round and the others are evicted.
 */
static bool offload_instead(struct mc_master *m, struct mc_obj *o, uint64_t now_ms,
			    uint64_t *queued)
{
	bool force = m->cfg.offload_force_evict;

	if (!m->cfg.enable_offload || !m->cfg.offload_on_evict)
		return false;
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_disk(m, r) && mc_master_rep_live(m, r) &&
		    !mc_master_rep_fs_pending(m, r))
			return false; /* already on disk: memory goes */
	}
	if (force &&
	    (double)*queued >= (double)m->cfg.offloading_queue_limit * m->cfg.offload_cap_ratio)
		return false;
	if (mc_master_ssd_queue(m, o, now_ms) == MC_OK) {
		(*queued)++;
		return true;
	}
	return !force;
}

static uint64_t evict_pass(struct mc_master *m, uint64_t now_ms, int pass, uint64_t want,
			   uint64_t start, uint64_t window, uint64_t *queued)
{
	struct cand *c = NULL;
	uint32_t nc = 0, ccap = 0, nl = 0, lcap = 0;
	struct mc_obj **list = NULL;
	uint64_t evicted = 0, span = mc_master_table_span(m), at = start < span ? start : 0;

	for (uint64_t k = 0; k < window; k++, at = at + 1 < span ? at + 1 : 0) {
		struct mc_obj *o = mc_master_table_at(m, at);

		if (!o || !evictable(m, o, now_ms, pass))
			continue;
		if (!mc_master_grow((void **)&c, &ccap, nc + 1, sizeof(*c)))
			break;
		c[nc].t = o->t;
		c[nc].o = o;
		nc++;
	}
	if (want < nc) {
		cand_select(c, nc, (size_t)want, &m->rng);
		nc = (uint32_t)want;
	}
	for (uint32_t i = 0; i < nc; i++) {
		if (c[i].o->flags & MC_OBJ_MARK)
			continue;
		if (!mark_for_evict(m, c[i].o, now_ms, pass, &list, &nl, &lcap))
			break;
	}
	for (uint32_t i = 0; i < nl; i++) {
		struct mc_obj *o = list[i];
		uint32_t before = mc_master_obj_prune(m, o), left; /* live ones: at least one */

		o->flags &= (uint8_t)~MC_OBJ_MARK;
		if (offload_instead(m, o, now_ms, queued))
			continue; /* stays in memory until its copy is on disk */
		left = mc_master_obj_release_mem_reps(m, o);
		if (left)
			left = mc_master_fs_drop_pending(m, o,
							 false); /* a writer that never reported */
		m->met.evicted_key_count++;
		m->met.evicted_size_bytes += mc_obj_size(o) * (before - left);
		if (left == 0)
			mc_master_obj_erase(m, o); /* else readable from disk */
		evicted++;
	}
	mc_free(c);
	mc_free(list);
	return evicted;
}

/*
 * One round (spec 4.1): target and lower bound are fractions of the
 * evictable objects; a round looks at a window of the table (all of it
 * when it is small) and scales both to the share of the table it sees, so
 * a big table is worked through over several ticks instead of stalling
 * the loop.  Returns the number evicted.
 */
static uint64_t evict_round(struct mc_master *m, uint64_t now_ms)
{
	double used =
		m->capacity_bytes ? (double)m->allocated_bytes / (double)m->capacity_bytes : 0;
	double hw = m->cfg.eviction_high_watermark_ratio;
	double ratio = m->cfg.eviction_ratio;
	double target = MC_MAX(ratio, used - hw + ratio);
	double lower = MC_MAX(target / 2, used - hw);
	/* both tables while a resize is under way: the old one still holds
	 * the objects not moved yet, which are the older ones */
	uint64_t slots = mc_master_table_span(m);
	uint64_t window = slots < EVICT_WINDOW ? slots : EVICT_WINDOW;
	double share = (double)window / (double)slots;
	uint64_t n = m->nobjs - m->nproc;
	uint64_t start = mc_alloc_rand(&m->rng) % slots;
	uint64_t want, low, done, queued = 0;

	if (n == 0)
		return 0;
	target = MC_MIN(target, 1.0);
	lower = MC_MIN(lower, 1.0);
	want = (uint64_t)ceil((double)n * target * share);
	low = lower > 0 ? (uint64_t)ceil((double)n * lower * share) : 0;
	if (want == 0)
		want = 1;
	m->met.attempted_evictions++;
	done = evict_pass(m, now_ms, 1, want, start, window, &queued);
	if (done < low && done < want && m->cfg.allow_evict_soft_pinned_objects)
		done += evict_pass(m, now_ms, 2, want - done, start, window, &queued);
	if (done > 0)
		m->met.successful_evictions++;
	mc_debug("eviction round: %" PRIu64 " of %" PRIu64 " wanted", done, want);
	return done;
}

/* ------------------------------------------------------------------------ */
/* tick                                                                      */

static void revoke_client_puts(struct mc_master *m, uint32_t client)
{
	for (uint32_t i = m->nproc; i-- > 0;) {
		struct mc_obj *o;

		if (i >= m->nproc)
			continue;
		if (m->proc[i].writer != client)
			continue;
		o = m->proc[i].o;
		mc_master_obj_release_reps(m, o);
		mc_master_obj_erase(m, o);
	}
}

static void expire_client(struct mc_master *m, uint32_t slot, uint64_t now_ms)
{
	struct mc_client *c = &m->clients[slot];

	mc_info("client %" PRIu64 "-%" PRIu64 " expired", c->id.first, c->id.second);
	c->alive = false;
	/* leases granted until now end by then: the client's fence holds
	 * until then (Ping's remount_wait_ms, store/client_fence.c) */
	m->expired_leases_end =
		MC_MAX(m->expired_leases_end, now_ms + m->cfg.default_kv_lease_ttl_ms);
	mc_master_ssd_client_gone(m, slot);
	mc_master_credits_drop(m, slot, now_ms);
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		if (m->segs[i].state != MC_SEG_FREE && m->segs[i].client == slot)
			mc_master_seg_unmount(m, i);
	}
	revoke_client_puts(m, slot);
}

/* The discarded list is a FIFO: every entry waits the same timeout. */
static void release_discarded(struct mc_master *m, uint64_t now_ms)
{
	while (m->disc_head < m->ndisc && m->disc[m->disc_head].release_at <= now_ms) {
		const struct mc_discarded *d = &m->disc[m->disc_head++];
		const struct mc_rep r = {d->addr, d->seg, d->gen};

		mc_master_block_release(m, &r, d->size);
		m->disc_bytes -= d->size;
		m->met.put_start_release_cnt++;
	}
	if (m->disc_head == m->ndisc) {
		m->disc_head = m->ndisc = 0;
	} else if (m->disc_head >= 1024 && m->disc_head * 2 >= m->ndisc) {
		memmove(m->disc, m->disc + m->disc_head,
			(m->ndisc - m->disc_head) * sizeof(*m->disc));
		m->ndisc -= m->disc_head;
		m->disc_head = 0;
	}
}

static void expire_zombies(struct mc_master *m, uint64_t now_ms)
{
	for (uint32_t i = m->nproc; i-- > 0;) {
		struct mc_obj *o;

		if (i >= m->nproc)
			continue;
		o = m->proc[i].o;
		if (now_ms - o->t < m->cfg.put_start_release_timeout_ms || now_ms < o->t)
			continue;
		mc_master_obj_release_reps(m, o);
		mc_master_obj_erase(m, o);
		m->met.put_start_release_cnt++;
	}
}

static void free_later_tick(struct mc_master *m);

uint64_t mc_master_tick(struct mc_master *m, uint64_t now_ms)
{
	double used;

	for (uint32_t i = 0; i < m->nclient_slots; i++) {
		struct mc_client *c = &m->clients[i];

		if (c->used && c->alive && c->expiry <= now_ms)
			expire_client(m, i, now_ms);
	}
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		if (m->segs[i].state == MC_SEG_GRACEFUL && m->segs[i].deadline <= now_ms)
			mc_master_seg_unmount(m, i);
	}
	mc_master_wal_expire(m, now_ms);
	mc_master_ssd_tick(m, now_ms);
	mc_master_tasks_tick(m, now_ms);
	if (mc_master_sweep_pending(m))
		(void)mc_master_sweep_run(m, SWEEP_TICK_US);
	while (m->npins && m->pins[0].deadline <= now_ms)
		mc_master_pin_del(m, m->pins[0].o);
	mc_master_credits_tick(m, now_ms);
	if (m->ndisc > m->disc_head)
		release_discarded(m, now_ms);
	if (m->nspoiled)
		mc_master_spoil_tick(m, now_ms);
	if (now_ms - m->last_proc_scan >= PROC_SCAN_MS || now_ms < m->last_proc_scan) {
		m->last_proc_scan = now_ms;
		expire_zombies(m, now_ms);
	}
	used = m->capacity_bytes ? (double)m->allocated_bytes / (double)m->capacity_bytes : 0;
	if (m->need_evict && m->cfg.eviction_ratio > 0) {
		evict_round(m, now_ms);
	} else if (m->capacity_bytes && used > m->cfg.eviction_high_watermark_ratio &&
		   now_ms >= m->evict_idle_until) {
		/* nothing evictable: do not rescan every 10 ms */
		if (evict_round(m, now_ms) == 0)
			m->evict_idle_until = now_ms + EVICT_IDLE_MS;
	}
	m->need_evict = false;
	/* forget clients that hold nothing any more */
	for (uint32_t i = 0; i < m->nclient_slots; i++) {
		struct mc_client *c = &m->clients[i];

		if (c->used && !c->alive && c->nproc == 0 && c->nsegs == 0 && c->nobjs == 0 &&
		    c->ncredits == 0) {
			mc_free(c->credits);
			c->credits = NULL;
			c->credits_cap = 0;
			mc_master_hspoil_client_free(c);
			c->used = false;
		}
	}
	free_later_tick(m);
	if (m->old) {
		/* a slot moved is 0.1-0.5 us: a count of them is no bound on time */
		uint64_t end_us = mc_now_us() + MIGRATE_TICK_US;

		do
			mc_master_table_migrate(m, MIGRATE_CHUNK);
		while (m->old && mc_now_us() < end_us);
	} else if (m->mask + 1 > MC_MASTER_MIN_SLOTS && m->nobjs * 8 < m->mask + 1 &&
		   m->ncursors == 0)
		(void)mc_master_table_resize(m, (m->mask + 1) / 2, false);
	return 10;
}

/* ------------------------------------------------------------------------ */
/* big frees in pieces                                                       */

void mc_master_free_later(void *mp, void *p, size_t len)
{
	struct mc_master *m = mp;
	struct mc_free_later *f = &m->big_free[0];

	if (len < FREE_LATER_MIN) {
		mc_free(p);
		return;
	}
	for (size_t i = 0; i < MC_ARRAY_SIZE(m->big_free); i++) {
		if (!m->big_free[i].p) {
			f = &m->big_free[i];
			break;
		}
	}
	mc_free_later_start(f, p, len); /* all busy: the first one is freed at once */
}

/* Give back up to FREE_TICK_BYTES of the pending blocks, first slot first. */
static void free_later_tick(struct mc_master *m)
{
	size_t budget = FREE_TICK_BYTES;

	for (size_t i = 0; i < MC_ARRAY_SIZE(m->big_free) && budget; i++) {
		struct mc_free_later *f = &m->big_free[i];
		size_t step = MC_MIN(f->len - f->done, budget);

		if (f->p) {
			(void)mc_free_later_step(f, step);
			budget -= step;
		}
	}
}

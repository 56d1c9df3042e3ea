/*
 * master/wal_log.c - the master's side of its write-ahead log (issue 14):
 * the records of the state changes it accepts, and their replay at start.
 *
 * What is logged (payloads in master/wal_rec.h):
 *   - a memory segment mounted (SEG_MOUNT) and unmounted for good
 *     (SEG_UNMOUNT: by request, graceful deadline, client expiry, or a
 *     replayed segment that never came back);
 *   - an object completed by PutEnd, also after an upsert (OBJ_PUT: its
 *     memory replicas by segment id and address, hard pin, checksum, group);
 *   - an object erased for any reason (OBJ_DEL: removed, revoked,
 *     evicted, swept after its segments went);
 *   - a graceful unmount's deadline (SEG_GRACEFUL, in wall-clock time:
 *     a remount after a restart makes the segment GRACEFUL again);
 *   - copy and move tasks and drain jobs: master/tasks_wal.c.
 * Not logged: leases, soft pins, in-flight puts, clients' liveness, the
 * DISK and LOCAL_DISK tiers' replicas (those objects come back with their
 * memory replicas only).
 *
 * Replay.  A SEG_MOUNT makes a segment slot in state MC_SEG_WAIT: known,
 * not mounted, no allocator, no client.  OBJ_PUT inserts the object with
 * its replicas on those slots: not readable (mc_master_rep_live is false
 * there) and not gone (mc_master_obj_gone counts a waiting replica), so it
 * is hidden but kept.  When a client mounts a segment with the same name,
 * base and size, mc_master_seg_mount takes the waiting slot (its
 * generation, so the replicas stay valid) and mc_master_wal_rebind claims
 * each replica's range in the new allocator.  Replay notes each replica
 * it puts on a waiting slot in that slot's list (address, object), so the
 * remount costs that segment's replicas, not a walk of the whole table;
 * an object erased while any slot waits is kept, emptied (no replica), so
 * that no list entry names freed memory, until no slot waits or the kept
 * ones outnumber half the entries (then the lists are compacted: a
 * standby's segments wait for as long as it streams).  A waiting slot not claimed
 * within client_ttl_ms of the replay is unmounted (mc_master_wal_expire):
 * its objects go with the next sweep, each erase logged.
 *
 * Threads: the master's (one caller at a time).
 */
#define MC_LOG_MODULE "master"
#include "master/master_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "master/snap.h"
#include "master/tasks_int.h"
#include "master/wal.h"
#include "master/wal_rec.h"

void mc_master_set_wal(struct mc_master *m, struct mc_wal *w)
{
	m->wal = w;
}

bool mc_master_wal_take_error(struct mc_master *m)
{
	bool e = m->wal_err;

	m->wal_err = false;
	return e;
}

void mc_master_wal_append(struct mc_master *m, const struct mc_walrec *r)
{
	mc_buf_reset(&m->walbuf);
	mc_walrec_encode(&m->walbuf, r);
	if (m->walbuf.err != MC_OK || mc_wal_append(m->wal, r->type, m->walbuf.data,
						    (uint32_t)m->walbuf.len, NULL) != MC_OK) {
		mc_warn("wal: cannot append a record of type %u: %s", r->type, mc_last_error());
		m->wal_err = true; /* the daemon acknowledges nothing of this turn */
	}
}

void mc_master_wal_view(struct mc_master *m, uint64_t version, const char *leader)
{
	struct mc_walrec r = {.type = MC_WALREC_VIEW};

	r.u.view.version = version;
	r.u.view.leader.p = leader;
	r.u.view.leader.len = (uint16_t)MC_MIN(strlen(leader), sizeof(m->wal_view_leader) - 1);
	m->wal_view = version;
	memcpy(m->wal_view_leader, leader, r.u.view.leader.len);
	m->wal_view_leader[r.u.view.leader.len] = '\0';
	if (m->wal)
		mc_master_wal_append(m, &r);
}

uint64_t mc_master_wal_view_version(const struct mc_master *m)
{
	return m->wal_view;
}

static bool rep_is_memory(const struct mc_master *m, const struct mc_rep *r)
{
	return r->seg < m->nsegs_slots && !mc_master_rep_fs(m, r) &&
	       (m->segs[r->seg].state == MC_SEG_MOUNTED ||
		m->segs[r->seg].state == MC_SEG_GRACEFUL ||
		m->segs[r->seg].state == MC_SEG_DRAINING);
}

/* A waiting (replayed, not yet remounted) replica: kept by a snapshot. */
static bool rep_is_waiting(const struct mc_master *m, const struct mc_rep *r)
{
	return r->seg < m->nsegs_slots && m->segs[r->seg].state == MC_SEG_WAIT &&
	       m->segs[r->seg].gen == r->gen;
}

/* o's OBJ_PUT record into r: its live memory replicas, and with waiting
 * its replicas on segments not mounted again yet; false when none. */
static bool obj_rec(const struct mc_master *m, struct mc_obj *o, bool waiting, struct mc_walrec *r)
{
	struct mc_walrec_obj *w = &r->u.obj;
	const struct mc_group *g;

	mc_walrec_clear(r);
	r->type = MC_WALREC_OBJ_PUT;
	w->tenant.p = m->tenants[o->tenant];
	w->tenant.len = (uint16_t)m->tenant_lens[o->tenant];
	w->key.p = o->key;
	w->key.len = o->key_len;
	w->size = mc_obj_size(o);
	w->flags = (o->flags & MC_OBJ_HARD) ? MC_WALREC_F_HARD : 0;
	if (mc_obj_trailer(o))
		w->flags |= MC_WALREC_F_TRAILER;
	if (o->flags & MC_OBJ_CKSUM) {
		w->flags |= MC_WALREC_F_CKSUM;
		w->checksum = o->ext->checksum;
		w->chunks = mc_master_obj_chunks(o, &w->nchunks);
		if (w->nchunks)
			w->flags |= MC_WALREC_F_CHUNKS;
	}
	g = mc_master_group_of(m, o);
	w->group.p = g ? g->name : "";
	w->group.len = g ? (uint16_t)g->name_len : 0;
	for (uint32_t i = 0; i < o->nrep && w->nrep < MC_WALREC_MAX_REPS; i++) {
		const struct mc_rep *rp = mc_master_obj_rep(o, i);

		if (!(mc_master_rep_live(m, rp) && rep_is_memory(m, rp)) &&
		    !(waiting && rep_is_waiting(m, rp)))
			continue;
		w->reps[w->nrep].kind = MC_WALREC_REP_MEMORY;
		w->reps[w->nrep].seg = m->segs[rp->seg].id;
		w->reps[w->nrep].addr = rp->addr;
		w->nrep++;
	}
	return w->nrep != 0;
}

void mc_master_wal_put(struct mc_master *m, struct mc_obj *o)
{
	struct mc_walrec r; /* about 2 KiB */

	if (!m->wal)
		return;
	if (obj_rec(m, o, false, &r))
		mc_master_wal_append(m, &r);
}

void mc_master_wal_del(struct mc_master *m, const struct mc_obj *o)
{
	struct mc_walrec r;

	if (!m->wal)
		return;
	mc_walrec_clear(&r);
	r.type = MC_WALREC_OBJ_DEL;
	r.u.obj.tenant.p = m->tenants[o->tenant];
	r.u.obj.tenant.len = (uint16_t)m->tenant_lens[o->tenant];
	r.u.obj.key.p = o->key;
	r.u.obj.key.len = o->key_len;
	mc_master_wal_append(m, &r);
}

static void seg_rec(const struct mc_master *m, uint32_t slot, struct mc_walrec *r)
{
	const struct mc_seg *s = &m->segs[slot];

	mc_walrec_clear(r);
	r->type = MC_WALREC_SEG_MOUNT;
	r->u.seg.id = s->id;
	if (s->client < m->nclient_slots)
		r->u.seg.client = m->clients[s->client].id;
	r->u.seg.base = s->base;
	r->u.seg.size = s->size;
	r->u.seg.name = (struct mc_walrec_str){s->name, (uint16_t)s->name_len};
	r->u.seg.te_endpoint = (struct mc_walrec_str){s->te_endpoint, (uint16_t)s->te_len};
	r->u.seg.protocol = (struct mc_walrec_str){s->protocol, (uint16_t)s->proto_len};
}

void mc_master_wal_mount(struct mc_master *m, uint32_t slot)
{
	struct mc_walrec r;

	if (!m->wal)
		return;
	seg_rec(m, slot, &r);
	mc_master_wal_append(m, &r);
}

void mc_master_wal_unmount(struct mc_master *m, uint32_t slot)
{
	struct mc_walrec r;

	if (!m->wal)
		return;
	mc_walrec_clear(&r);
	r.type = MC_WALREC_SEG_UNMOUNT;
	r.u.seg.id = m->segs[slot].id;
	mc_master_wal_append(m, &r);
}

/* The epoch deadline of a GRACEFUL segment's (UINT64_MAX: never). */
static uint64_t grace_epoch(const struct mc_seg *s, uint64_t now_ms)
{
	uint64_t left = s->deadline > now_ms ? s->deadline - now_ms : 0;

	return s->deadline == UINT64_MAX ? UINT64_MAX : mc_epoch_ms() + left;
}

static void grace_rec(const struct mc_seg *s, uint64_t epoch_ms, struct mc_walrec *r)
{
	mc_walrec_clear(r);
	r->type = MC_WALREC_SEG_GRACEFUL;
	r->u.grace.seg = s->id;
	r->u.grace.deadline_epoch_ms = epoch_ms;
}

void mc_master_wal_graceful(struct mc_master *m, uint32_t slot, uint64_t now_ms)
{
	struct mc_seg *s = &m->segs[slot];
	struct mc_walrec r;

	s->grace_epoch_ms = grace_epoch(s, now_ms); /* what a snapshot writes */
	if (!m->wal)
		return;
	grace_rec(s, s->grace_epoch_ms, &r);
	mc_master_wal_append(m, &r);
}

void mc_master_wal_graceful_restore(struct mc_master *m, uint32_t slot, uint64_t grace_epoch_ms,
				    uint64_t now_ms)
{
	struct mc_seg *s = &m->segs[slot];
	uint64_t now_epoch = mc_epoch_ms();
	uint64_t left = grace_epoch_ms > now_epoch ? grace_epoch_ms - now_epoch : 0;

	s->state = MC_SEG_GRACEFUL;
	s->deadline = grace_epoch_ms == UINT64_MAX ? UINT64_MAX : now_ms + left;
	m->targets_dirty = true;
	mc_info("wal: segment %s mounted again while being unmounted gracefully: it goes in "
		"%" PRIu64 " ms",
		s->name, left);
	mc_master_wal_graceful(m, slot, now_ms);
}

/* ---- snapshot ---- */

mc_status mc_master_snap_add(struct mc_master *m, struct mc_snap_writer *w,
			     const struct mc_walrec *r)
{
	mc_buf_reset(&m->walbuf);
	mc_walrec_encode(&m->walbuf, r);
	if (m->walbuf.err != MC_OK)
		return m->walbuf.err;
	return mc_snap_writer_add(w, r->type, m->walbuf.data, (uint32_t)m->walbuf.len);
}

#define RADIX_BITS 11 /* radix_sort's digit */

static bool radix_sort(struct mc_wait_ref *v, uint64_t n, uint64_t base);
static int ref_cmp(const void *pa, const void *pb);

uint64_t mc_master_snap_sort_bytes(const struct mc_master *m)
{
	/* dump_sorted's at[] per segment slot and v[] per object, radix_sort's
	 * copy of a segment's run (at most every object) and its counts */
	return ((uint64_t)m->nsegs_slots + 1) * sizeof(uint64_t) +
	       m->nobjs * 2 * sizeof(struct mc_wait_ref) + (1u << RADIX_BITS) * sizeof(uint64_t);
}

bool mc_master_snap_sort_fits(uint64_t need, uint64_t headroom)
{
	return headroom == UINT64_MAX || need <= headroom / MC_MASTER_SNAP_SORT_SHARE;
}

/* The segment slot of the first replica obj_rec(m, o, true) writes, and its
 * address; UINT32_MAX when it writes none (no entry). */
static uint32_t dump_key(const struct mc_master *m, struct mc_obj *o, uint64_t *addr)
{
	if (o->flags & MC_OBJ_PROC)
		return UINT32_MAX;
	for (uint32_t i = 0; i < o->nrep && i < MC_WALREC_MAX_REPS; i++) {
		const struct mc_rep *rp = mc_master_obj_rep(o, i);

		if ((mc_master_rep_live(m, rp) && rep_is_memory(m, rp)) || rep_is_waiting(m, rp)) {
			*addr = rp->addr;
			return rp->seg;
		}
	}
	return UINT32_MAX;
}

#define DUMP_AHEAD 8u /* objects prefetched ahead of the one written */

/*
 * The objects in the order of their first replica: by segment slot, then
 * address.  The restart that loads the file then allocates the objects in
 * that order and lists each segment's replicas already sorted, so the
 * remount's claims walk the objects and the allocator's blocks in memory
 * order, with no sort (at 10 M objects the remount took several times
 * longer on the writer's hash order).  The cost is the writer's (a
 * forked child): 16 bytes per object twice (mc_master_snap_sort_bytes), a
 * sort, and a walk of the objects out of table order.  false, with nothing written, when the
 * arrays cannot be had; else *st is the writer's status.
 */
static bool dump_sorted(struct mc_master *m, struct mc_snap_writer *w, struct mc_walrec *r,
			mc_status *st_out)
{
	uint64_t *at = mc_calloc((size_t)m->nsegs_slots + 1, sizeof(*at)), n, addr;
	struct mc_wait_ref *v = NULL;
	mc_status st = MC_OK;

	if (!at)
		return false;
	for (uint64_t i = 0; i < mc_master_table_span(m); i++) {
		struct mc_obj *o = mc_master_table_at(m, i);
		uint32_t seg = o ? dump_key(m, o, &addr) : UINT32_MAX;

		if (seg != UINT32_MAX)
			at[seg + 1]++;
	}
	for (uint32_t s = 0; s < m->nsegs_slots; s++)
		at[s + 1] += at[s];
	n = at[m->nsegs_slots];
	if (n && !(v = mc_malloc(n * sizeof(*v)))) {
		mc_free(at);
		return false;
	}
	for (uint64_t i = 0; i < mc_master_table_span(m); i++) {
		struct mc_obj *o = mc_master_table_at(m, i);
		uint32_t seg = o ? dump_key(m, o, &addr) : UINT32_MAX;

		if (seg != UINT32_MAX)
			v[at[seg]++] = (struct mc_wait_ref){addr, o};
	}
	/* at[s] is now where slot s's run ends */
	for (uint32_t s = 0; s < m->nsegs_slots; s++) {
		uint64_t from = s ? at[s - 1] : 0, k = at[s] - from;

		if (k > 1 && !radix_sort(v + from, k, m->segs[s].base))
			qsort(v + from, k, sizeof(*v), ref_cmp);
	}
	for (uint64_t i = 0; i < n && st == MC_OK; i++) {
		if (i + DUMP_AHEAD < n)
			__builtin_prefetch(v[i + DUMP_AHEAD].o);
		if (obj_rec(m, v[i].o, true, r))
			st = mc_master_snap_add(m, w, r);
	}
	mc_free(v);
	mc_free(at);
	*st_out = st;
	return true;
}

mc_status mc_master_snap_dump(struct mc_master *m, struct mc_snap_writer *w, bool sorted)
{
	struct mc_walrec r; /* about 2 KiB */
	mc_status st = MC_OK;

	/* the view first: whose log the snapshot continues (HA: a directory's
	 * position, server_ha.c, outlives the log file its VIEW record was in) */
	if (m->wal_view) {
		mc_walrec_clear(&r);
		r.type = MC_WALREC_VIEW;
		r.u.view.version = m->wal_view;
		r.u.view.leader.p = m->wal_view_leader;
		r.u.view.leader.len = (uint16_t)strlen(m->wal_view_leader);
		st = mc_master_snap_add(m, w, &r);
	}
	/* then the segments: replay makes waiting slots the objects then name */
	for (uint32_t i = 0; i < m->nsegs_slots && st == MC_OK; i++) {
		enum mc_seg_state k = m->segs[i].state;

		if (i == m->fs_seg || (k != MC_SEG_MOUNTED && k != MC_SEG_GRACEFUL &&
				       k != MC_SEG_DRAINING && k != MC_SEG_WAIT))
			continue;
		seg_rec(m, i, &r);
		st = mc_master_snap_add(m, w, &r);
		if (st == MC_OK && (k == MC_SEG_GRACEFUL || k == MC_SEG_WAIT) &&
		    m->segs[i].grace_epoch_ms) {
			grace_rec(&m->segs[i], m->segs[i].grace_epoch_ms, &r);
			st = mc_master_snap_add(m, w, &r);
		}
	}
	if (st != MC_OK)
		return st;
	/* the move of a resize is not finished here: that would write both
	 * tables and copy every page of them into this forked child */
	if (sorted && dump_sorted(m, w, &r, &st))
		return st == MC_OK ? mc_master_tasks_snap_dump(m, w) : st;
	/* not asked, or no memory for the order: the tables', which a remount
	 * sorts */
	for (uint64_t i = 0; i < mc_master_table_span(m) && st == MC_OK; i++) {
		struct mc_obj *o = mc_master_table_at(m, i);

		if (!o || (o->flags & MC_OBJ_PROC) || !obj_rec(m, o, true, &r))
			continue;
		st = mc_master_snap_add(m, w, &r);
	}
	return st == MC_OK ? mc_master_tasks_snap_dump(m, w) : st;
}

/* ---- replay ---- */

static bool wait_is(const struct mc_master *m, uint32_t i, const struct mc_store_uuid *id)
{
	return m->segs[i].state == MC_SEG_WAIT && m->segs[i].id.first == id->first &&
	       m->segs[i].id.second == id->second;
}

uint32_t mc_master_wal_wait_find(struct mc_master *m, const struct mc_store_uuid *id)
{
	if (m->wait_hint < m->nsegs_slots && wait_is(m, m->wait_hint, id))
		return m->wait_hint; /* a run of records on one segment */
	for (uint32_t i = 0; i < m->nsegs_slots; i++)
		if (wait_is(m, i, id))
			return m->wait_hint = i;
	return UINT32_MAX;
}

uint32_t mc_master_wal_waiting(const struct mc_master *m, const struct mc_store_segment *in)
{
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		const struct mc_seg *s = &m->segs[i];

		if (s->state == MC_SEG_WAIT && s->base == in->base && s->size == in->size &&
		    s->name_len == in->name.len && memcmp(s->name, in->name.ptr, in->name.len) == 0)
			return i;
	}
	return UINT32_MAX;
}

static void wait_drop(struct mc_master *m, uint32_t slot)
{
	struct mc_seg *s = &m->segs[slot];

	s->gen++; /* its replicas die; the sweep erases objects left with none */
	s->state = MC_SEG_FREE;
	mc_free(s->name);
	mc_free(s->te_endpoint);
	mc_free(s->protocol);
	mc_free(s->host_id);
	s->name = s->te_endpoint = s->protocol = s->host_id = NULL;
	mc_master_wal_list_drop(m, slot);
	m->nwait--;
	m->need_sweep = true;
	if (!m->nwait)
		mc_master_wal_lists_free(m);
}

/* ---- wait lists ---- */

void mc_master_wal_list_drop(struct mc_master *m, uint32_t slot)
{
	struct mc_seg *s = &m->segs[slot];

	m->nwl -= s->wl_n;
	mc_free(s->wl);
	s->wl = NULL;
	s->wl_n = s->wl_cap = 0;
}

void mc_master_wal_lists_free(struct mc_master *m)
{
	for (uint32_t i = 0; m->segs && i < m->nsegs_slots; i++)
		if (m->segs[i].wl)
			mc_master_wal_list_drop(m, i);
	for (uint64_t i = 0; i < m->nwdead; i++)
		mc_free(m->wdead[i]);
	mc_free(m->wdead);
	m->wdead = NULL;
	m->nwdead = m->wdead_cap = 0;
	m->nwl = 0;
	m->wl_off = false;
}

/* A list could not grow: drop them all (no entry may outlive its object),
 * and remounts walk the table until no segment waits. */
static void lists_off(struct mc_master *m)
{
	for (uint32_t i = 0; i < m->nsegs_slots; i++)
		if (m->segs[i].wl)
			mc_master_wal_list_drop(m, i);
	for (uint64_t i = 0; i < m->nwdead; i++)
		mc_free(m->wdead[i]);
	m->nwdead = 0;
	m->wl_off = true;
	mc_warn("wal: out of memory for the remount lists: remounts walk the object table");
}

static void list_add(struct mc_master *m, uint32_t slot, uint64_t addr, struct mc_obj *o)
{
	struct mc_seg *s = &m->segs[slot];

	if (m->wl_off)
		return;
	if (s->wl_n == s->wl_cap) {
		uint64_t nc = s->wl_cap ? s->wl_cap * 2 : 256;
		struct mc_wait_ref *nv = mc_realloc(s->wl, nc * sizeof(*nv));

		if (!nv) {
			lists_off(m);
			return;
		}
		s->wl = nv;
		s->wl_cap = nc;
	}
	s->wl[s->wl_n++] = (struct mc_wait_ref){addr, o};
	m->nwl++;
}

/* o's replica on waiting slot at addr, or NULL (erased, pruned, moved). */
static struct mc_rep *ref_rep(struct mc_master *m, uint32_t slot, const struct mc_wait_ref *w)
{
	for (uint32_t k = 0; k < w->o->nrep; k++) {
		struct mc_rep *r = mc_master_obj_rep(w->o, k);

		if (r->seg == slot && r->gen == m->segs[slot].gen && r->addr == w->addr)
			return r;
	}
	return NULL;
}

/* Drop the entries of kept (erased) objects and of replicas gone, then
 * free the kept objects: amortised over the erases that kept them. */
static void lists_compact(struct mc_master *m)
{
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		struct mc_seg *s = &m->segs[i];
		uint64_t n = 0;

		for (uint64_t j = 0; j < s->wl_n; j++)
			if (ref_rep(m, i, &s->wl[j]))
				s->wl[n++] = s->wl[j];
		m->nwl -= s->wl_n - n;
		s->wl_n = n;
	}
	for (uint64_t i = 0; i < m->nwdead; i++)
		mc_free(m->wdead[i]);
	m->nwdead = 0;
}

bool mc_master_wal_keep_dead(struct mc_master *m, struct mc_obj *o)
{
	/* every erased object, not only those with a waiting replica now: a
	 * remove releases the replicas (nrep 0) before it erases */
	if (m->wl_off || !m->nwl)
		return false;
	if (m->nwdead == m->wdead_cap) {
		uint64_t nc = m->wdead_cap ? m->wdead_cap * 2 : 256;
		struct mc_obj **nv = mc_realloc(m->wdead, nc * sizeof(*nv));

		if (!nv) {
			lists_off(m); /* no list names o any more: free it */
			return false;
		}
		m->wdead = nv;
		m->wdead_cap = nc;
	}
	mc_free(o->ext); /* emptied: no list entry matches it any more */
	o->ext = NULL;
	o->nrep = 0;
	m->wdead[m->nwdead++] = o;
	if (m->nwdead >= 4096 && m->nwdead * 2 > m->nwl)
		lists_compact(m);
	return true;
}

static mc_status replay_mount(struct mc_master *m, const struct mc_walrec_seg *in, uint64_t now)
{
	uint32_t slot = mc_master_wal_wait_find(m, &in->id);
	struct mc_seg *s;

	if (slot != UINT32_MAX &&
	    (m->segs[slot].base != in->base || m->segs[slot].size != in->size ||
	     m->segs[slot].name_len != in->name.len ||
	     memcmp(m->segs[slot].name, in->name.p, in->name.len) != 0)) {
		/* the id mounted again as another range: the old one's replicas die */
		wait_drop(m, slot);
		slot = UINT32_MAX;
	}
	if (slot == UINT32_MAX) {
		slot = mc_master_seg_slot_new(m);
		if (slot == UINT32_MAX)
			return MC_ERR_NOMEM;
		m->nwait++;
	}
	s = &m->segs[slot];
	mc_free(s->name);
	mc_free(s->te_endpoint);
	mc_free(s->protocol);
	mc_free(s->host_id);
	s->name = mc_strndup(in->name.p, in->name.len);
	s->te_endpoint = mc_strndup(in->te_endpoint.p, in->te_endpoint.len);
	s->protocol = mc_strndup(in->protocol.p, in->protocol.len);
	s->host_id = mc_strndup("", 0);
	s->id = in->id;
	s->base = in->base;
	s->size = in->size;
	s->name_len = in->name.len;
	s->te_len = in->te_endpoint.len;
	s->proto_len = in->protocol.len;
	s->alloc = NULL;
	s->used = 0;
	s->client = MC_MASTER_NO_CLIENT;
	s->deadline = now + m->cfg.client_ttl_ms;
	s->grace_epoch_ms = 0; /* a SEG_GRACEFUL after it says otherwise */
	s->state = MC_SEG_WAIT;
	if (!s->name || !s->te_endpoint || !s->protocol || !s->host_id) {
		wait_drop(m, slot);
		return MC_ERR_NOMEM;
	}
	return MC_OK;
}

static mc_status replay_put(struct mc_master *m, const struct mc_walrec_obj *in)
{
	struct mc_rep reps[MC_WALREC_MAX_REPS];
	uint32_t n = 0;
	uint16_t tid;
	struct mc_obj *o;
	mc_status st;

	if (in->size > MC_MASTER_MAX_VALUE) { /* an older master took up to 2^48 - 1 */
		mc_warn("wal: object of %" PRIu64 " bytes, above 2^47 - 1: not kept", in->size);
		return MC_OK;
	}
	for (uint32_t i = 0; i < in->nrep; i++) {
		uint32_t slot = mc_master_wal_wait_find(m, &in->reps[i].seg);

		if (slot == UINT32_MAX || in->reps[i].kind != MC_WALREC_REP_MEMORY)
			continue; /* its segment went before the crash */
		reps[n++] = (struct mc_rep){in->reps[i].addr, slot, m->segs[slot].gen};
	}
	st = mc_master_tenant_intern(m, in->tenant.p, in->tenant.len, &tid);
	if (st != MC_OK)
		return st;
	o = m->bulk ? NULL : mc_master_obj_find(m, tid, in->key.p, in->key.len);
	if (o)
		mc_master_obj_erase(m, o); /* an upsert: the new one replaces it */
	if (!n)
		return MC_OK;
	o = mc_malloc(offsetof(struct mc_obj, key) + in->key.len);
	if (!o)
		return MC_ERR_NOMEM;
	memset(o, 0, offsetof(struct mc_obj, key));
	memcpy(o->key, in->key.p, in->key.len);
	o->key_len = in->key.len;
	o->tenant = tid;
	mc_obj_set_alloc(o, in->size, in->flags & MC_WALREC_F_TRAILER);
	o->aux = MC_MASTER_NO_CLIENT;
	if (in->flags & MC_WALREC_F_CKSUM)
		o->flags |= MC_OBJ_CKSUM;
	if (!mc_master_obj_ext_fit(o, n)) {
		mc_free(o);
		return MC_ERR_NOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		*mc_master_obj_rep(o, i) = reps[i];
	o->nrep = (uint8_t)n;
	if ((in->flags & MC_WALREC_F_CKSUM) &&
	    !mc_master_obj_set_sums(o, true, in->checksum, in->chunks_le, in->nchunks, true)) {
		mc_free(o->ext);
		mc_free(o);
		return MC_ERR_NOMEM;
	}
	if (in->flags & MC_WALREC_F_HARD)
		o->flags |= MC_OBJ_HARD;
	st = mc_master_obj_insert(m, o);
	if (st != MC_OK) {
		mc_free(o->ext);
		mc_free(o);
		return st;
	}
	if (in->group.len && mc_master_group_join(m, tid, in->group.p, in->group.len, o) != MC_OK) {
		mc_master_obj_erase(m, o);
		return MC_ERR_NOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		list_add(m, reps[i].seg, reps[i].addr, o);
	return MC_OK;
}

void mc_master_table_expect(struct mc_master *m, uint64_t n)
{
	uint64_t slots = m->mask + 1;

	if (n > (1ull << 27))
		n = 1ull << 27;
	mc_master_table_settle(m);
	while ((n + m->nobjs) * 4 > slots * 3)
		slots *= 2;
	if (slots > m->mask + 1 && mc_master_table_resize(m, slots, true) == MC_OK)
		mc_master_table_settle(m);
}

void mc_master_snap_load_begin(struct mc_master *m, uint64_t entries)
{
	m->bulk = m->nobjs == 0 && !m->old;
	mc_master_table_expect(m, entries);
}

void mc_master_snap_load_end(struct mc_master *m)
{
	m->bulk = false;
}

void mc_master_wal_hint(struct mc_master *m, uint16_t type, const void *payload, uint32_t len)
{
	struct mc_walrec r;
	bool found;
	uint16_t tid;

	if ((type != MC_WALREC_OBJ_PUT && type != MC_WALREC_OBJ_DEL) ||
	    mc_walrec_decode(type, payload, len, &r) != MC_OK)
		return;
	tid = mc_master_tenant_find(m, r.u.obj.tenant.p, r.u.obj.tenant.len, &found);
	if (found)
		mc_master_obj_prefetch(m, tid, r.u.obj.key.p, r.u.obj.key.len);
}

mc_status mc_master_wal_replay(struct mc_master *m, uint16_t type, const void *payload,
			       uint32_t len, uint64_t now_ms)
{
	struct mc_walrec r;
	mc_status st = mc_walrec_decode(type, payload, len, &r);

	if (st != MC_OK)
		return st;
	switch (type) {
	case MC_WALREC_SEG_MOUNT:
		return replay_mount(m, &r.u.seg, now_ms);
	case MC_WALREC_SEG_UNMOUNT: {
		uint32_t slot = mc_master_wal_wait_find(m, &r.u.seg.id);

		if (slot != UINT32_MAX)
			wait_drop(m, slot);
		return MC_OK;
	}
	case MC_WALREC_OBJ_PUT:
		return replay_put(m, &r.u.obj);
	case MC_WALREC_OBJ_DEL: {
		bool found;
		uint16_t tid =
			mc_master_tenant_find(m, r.u.obj.tenant.p, r.u.obj.tenant.len, &found);
		struct mc_obj *o =
			found ? mc_master_obj_find(m, tid, r.u.obj.key.p, r.u.obj.key.len) : NULL;

		if (o)
			mc_master_obj_erase(m, o);
		return MC_OK;
	}
	case MC_WALREC_VIEW: /* who wrote what follows: nothing to apply */
		m->wal_view = r.u.view.version;
		r.u.view.leader.len =
			(uint16_t)MC_MIN(r.u.view.leader.len, sizeof(m->wal_view_leader) - 1);
		if (r.u.view.leader.len)
			memcpy(m->wal_view_leader, r.u.view.leader.p, r.u.view.leader.len);
		m->wal_view_leader[r.u.view.leader.len] = '\0';
		return MC_OK;
	case MC_WALREC_TASK:
	case MC_WALREC_JOB:
	case MC_WALREC_TASK_SEQ:
		return mc_master_tasks_replay(m, &r, now_ms);
	case MC_WALREC_SEG_GRACEFUL: {
		uint32_t slot = mc_master_wal_wait_find(m, &r.u.grace.seg);

		if (slot != UINT32_MAX)
			m->segs[slot].grace_epoch_ms = r.u.grace.deadline_epoch_ms
							       ? r.u.grace.deadline_epoch_ms
							       : 1; /* 0 is "not" */
		return MC_OK;
	}
	default:
		return MC_ERR_INTERNAL; /* decode refused it */
	}
}

/* ---- remount ---- */

static int ref_cmp(const void *pa, const void *pb)
{
	const struct mc_wait_ref *a = pa, *b = pb;
	return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* Sort v by address, least significant 11 bits first: a snapshot's
 * replicas come in its writer's hash order, and millions of them sort
 * several times faster this way than through qsort's comparisons.  false
 * (v unchanged) when the scratch array cannot be had. */
static bool radix_sort(struct mc_wait_ref *v, uint64_t n, uint64_t base)
{
	enum { BITS = RADIX_BITS, NB = 1 << BITS };
	struct mc_wait_ref *t = mc_malloc(n * sizeof(*t)), *a = v, *b = t;
	uint64_t max = 0, *cnt = mc_malloc(NB * sizeof(*cnt));

	if (!t || !cnt) {
		mc_free(t);
		mc_free(cnt);
		return false;
	}
	for (uint64_t i = 0; i < n; i++)
		max |= v[i].addr - base;
	for (unsigned sh = 0; sh < 64 && (max >> sh); sh += BITS) {
		uint64_t sum = 0;

		memset(cnt, 0, NB * sizeof(*cnt));
		for (uint64_t i = 0; i < n; i++)
			cnt[((a[i].addr - base) >> sh) & (NB - 1)]++;
		for (unsigned d = 0; d < NB; d++) {
			uint64_t c = cnt[d];

			cnt[d] = sum;
			sum += c;
		}
		for (uint64_t i = 0; i < n; i++)
			b[cnt[((a[i].addr - base) >> sh) & (NB - 1)]++] = a[i];
		a = b;
		b = a == v ? t : v;
	}
	if (a != v)
		memcpy(v, a, n * sizeof(*v));
	mc_free(t);
	mc_free(cnt);
	return true;
}

/* Without the lists (they could not grow): the replicas on slot, from a
 * walk of the whole table.  NULL with *n 0 when none or out of memory
 * (then the replicas found so far are bound, the rest are dead). */
static struct mc_wait_ref *walk_refs(struct mc_master *m, uint32_t slot, uint64_t *n_out,
				     uint32_t *lost)
{
	struct mc_seg *s = &m->segs[slot];
	struct mc_wait_ref *v = NULL;
	uint64_t n = 0, cap = 0;

	for (uint64_t i = 0; i < mc_master_table_span(m); i++) {
		struct mc_obj *o = mc_master_table_at(m, i);

		for (uint32_t k = 0; o && k < o->nrep; k++) {
			struct mc_rep *r = mc_master_obj_rep(o, k);

			if (r->seg != slot || r->gen != s->gen)
				continue;
			if (n == cap) {
				uint64_t nc = cap ? cap * 2 : 1024;
				struct mc_wait_ref *nv = mc_realloc(v, nc * sizeof(*v));

				if (!nv) {
					r->gen = s->gen - 1; /* an old generation: dead, never
								readable unbound */
					(*lost)++;
					continue;
				}
				v = nv;
				cap = nc;
			}
			v[n++] = (struct mc_wait_ref){r->addr, o};
		}
	}
	*n_out = n;
	return v;
}

/*
 * A waiting slot was mounted again: claim each replica's range in its new
 * allocator.  The slot's list names them in replay order (often ascending
 * addresses: then no sort), so the cost is this segment's replicas, not
 * the table's; entries of erased objects or gone replicas match no
 * replica any more and are skipped.
 */
#define CLAIM_AHEAD 8u /* claims whose table slot and object are prefetched */

void mc_master_wal_rebind(struct mc_master *m, uint32_t slot)
{
	struct mc_seg *s = &m->segs[slot];
	struct mc_wait_ref *v;
	uint64_t n, bound = 0, bad_addr = 0, bad_size = 0;
	uint32_t cur = 0, lost = 0;
	bool sorted = true, noted = false;
	uint64_t t0 = mc_now_ms();
	const char *why = "no memory to list it"; /* walk_refs lost it */

	if (m->wl_off) {
		v = walk_refs(m, slot, &n, &lost);
	} else {
		v = s->wl;
		n = s->wl_n;
		m->nwl -= n;
		s->wl = NULL;
		s->wl_n = s->wl_cap = 0;
	}
	for (uint64_t i = 1; i < n && sorted; i++)
		sorted = v[i - 1].addr <= v[i].addr;
	/* (an address below base sorts high: its claim fails all the same) */
	if (!sorted && !radix_sort(v, n, s->base))
		qsort(v, n, sizeof(*v), ref_cmp);
	mc_offset_alloc_expect(s->alloc, n);
	for (uint64_t i = 0; i < n; i++) {
		struct mc_rep *r;
		uint64_t size;
		mc_status st;

		if (i + CLAIM_AHEAD < n) {
			mc_offset_alloc_prefetch(s->alloc, v[i + CLAIM_AHEAD].addr);
			__builtin_prefetch(v[i + CLAIM_AHEAD].o);
		}
		r = ref_rep(m, slot, &v[i]);

		if (!r)
			continue; /* erased or gone since its replay */
		size = mc_obj_size(v[i].o);
		st = mc_offset_alloc_claim(s->alloc, r->addr, size, &cur);
		if (st != MC_OK) {
			r->gen = s->gen - 1; /* dead: pruned with the object's next visit */
			if (!noted) {
				noted = true;
				bad_addr = r->addr;
				bad_size = size;
				why = st == MC_ERR_NOMEM ? "no memory for its block"
				      : r->addr < s->base || size > s->size ||
						      r->addr - s->base > s->size - size
					      ? "outside the segment"
					      : "overlapping another replica, empty or misaligned";
			}
			lost++;
			continue;
		}
		s->used += size;
		m->allocated_bytes += size;
		bound++;
	}
	mc_free(v);
	if (!m->nwait)
		mc_master_wal_lists_free(m); /* the kept objects too */
	if (lost) {
		m->need_sweep = true;
		mc_warn("wal: segment %s remounted: %u logged replicas could not be bound again "
			"and are dropped (the first at 0x%" PRIx64 ", %" PRIu64 " bytes: %s)",
			s->name, lost, bad_addr, bad_size, why);
	}
	mc_info("wal: segment %s remounted: %" PRIu64 " logged replicas readable again (%s, "
		"%" PRIu64 " ms)",
		s->name, bound,
		m->wl_off ? "table walked"
		: sorted  ? "in order"
			  : "sorted",
		mc_now_ms() - t0);
}

void mc_master_wal_expire(struct mc_master *m, uint64_t now_ms)
{
	if (!m->nwait)
		return;
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		if (m->segs[i].state != MC_SEG_WAIT || m->segs[i].deadline > now_ms)
			continue;
		mc_warn("wal: segment %s was not mounted again within the client TTL: its objects "
			"are dropped",
			m->segs[i].name);
		mc_master_wal_unmount(m, i);
		wait_drop(m, i);
	}
}

void mc_master_wal_rewait(struct mc_master *m, uint64_t now_ms)
{
	for (uint32_t i = 0; m->nwait && i < m->nsegs_slots; i++)
		if (m->segs[i].state == MC_SEG_WAIT)
			m->segs[i].deadline = now_ms + m->cfg.client_ttl_ms;
}

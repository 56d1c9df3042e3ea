/*
 * master/ssd.c - the master's side of the store's SSD tier (spec store.md
 * 4.2, 5): local-disk segments, LOCAL_DISK replicas, the offload queues
 * and what disk owners must delete (messages 64..69 of store/proto.h).
 *
 * A client's local-disk segment is a segment slot of its own kind
 * (MC_SEG_DISK): no allocator, no placement, never listed among memory
 * segments, its string te_endpoint the client's offload RPC host:port.  A
 * LOCAL_DISK replica is then an ordinary struct mc_rep {addr 0, seg, gen}
 * in the object's replica list, so it costs an object exactly what a
 * memory replica costs (16 bytes in ext) and nothing when absent, and it
 * dies as memory replicas die: unmounting the local-disk segment, the
 * client's expiry or a wipe bumps the slot's generation and every disk
 * replica there is unreadable at once; the sweep then drops them and
 * erases objects left with none.  Readable = a live replica of either
 * kind (objects.c); eviction frees only memory replicas and keeps an
 * object that has a disk copy.
 *
 * Offloads.  An object whose memory replica lies in a segment of a client
 * with a local-disk segment is queued for that client (the copy is
 * node-local): at PutEnd (eager, the default) or by the eviction pass
 * (--offload_on_evict).  While queued or handed out it carries
 * MC_OBJ_OFFL and an entry in m->offl, a small open-addressing table on
 * the object pointer (bounded by the queue limits, so the object header
 * does not grow): its memory replica is then neither evicted, removed
 * (OBJECT_HAS_REPLICATION_TASK) nor rewritten (OBJECT_REPLICA_BUSY) until
 * NotifyOffloadSuccess reports it.  One offload per object at a time and
 * none once it has a disk copy.  Each client's queue is a FIFO ring of
 * object pointers that may hold stale ones (an entry ended by expiry or
 * an unmount sweep): a heartbeat checks every pointer it pops against
 * m->offl.  An offload handed out whose object then went away (its memory
 * segment unmounted) leaves its key in the client's "dead" list, so the
 * report answers OBJECT_NOT_FOUND and the client deletes the copy instead
 * of re-registering a stale value.
 *
 * Removals.  Whatever drops a live LOCAL_DISK replica for the master's own
 * reasons (Remove and its batch, regex and RemoveAll forms, upsert,
 * BatchReplicaClear) queues its key in the owner's "removes", delivered by
 * the next heartbeats.  RemoveAll of every tenant instead sets
 * remove_all for every disk owner and kills all LOCAL_DISK replicas at
 * once.  BatchEvictDiskReplica comes from the owner, which deletes the
 * files itself.
 *
 * Backfill.  Eager offload queues at PutEnd only; what a full queue (an
 * expiry before hand-out, or a failed report, retried with a backoff and
 * at most MC_MASTER_OFFLOAD_RETRIES rounds in a row: notify_round_end)
 * made it miss is queued by a backfill lap over
 * the object table, in slices from the tick ("backfill" below), and keeps
 * its memory from eviction until then (mc_master_tier_pending): an
 * acknowledged put is refused room rather than lost.
 *
 * Nothing here is O(objects) at once except a wipe (RemoveAll is a full
 * scan anyway) and what the sweep does after an unmount; the backfill lap
 * is O(objects) spread over ticks.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "master/master_int.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define HB_ITEMS_DEFAULT 1024u /* offload items per heartbeat when the client says 0 */
#define HB_ITEMS_MAX	 4096u /* and at most, whatever it says */
#define HB_REMOVES_MAX	 4096u /* removes per heartbeat */
#define KEY_SHOW	 80
#define CMS_ROWS	 4
#define CMS_COLS	 4096u		  /* counters per row (power of two) */
#define CMS_AGE_ADDS	 (16u * CMS_COLS) /* halve every counter after this many hits */
#define SCAN_MS		 1000u

#define FAIL(st, ...)	 (snprintf(err, err_len, __VA_ARGS__), (st))

static inline int show(uint32_t len)
{
	return (int)(len < KEY_SHOW ? len : KEY_SHOW);
}

static inline const char *sp(const struct mc_proto_str *s)
{
	return s->ptr ? s->ptr : "";
}

static bool s_ok(const struct mc_proto_str *s)
{
	return s->ptr || s->len == 0;
}

/* ------------------------------------------------------------------------ */
/* the offload table: open addressing on the object pointer                  */

static uint32_t offl_home(const struct mc_master *m, const struct mc_obj *o)
{
	uint64_t x = (uint64_t)(uintptr_t)o;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint32_t)x & m->offl_mask;
}

static struct mc_offl *offl_find(struct mc_master *m, const struct mc_obj *o)
{
	if (!m->offl)
		return NULL;
	for (uint32_t i = offl_home(m, o);; i = (i + 1) & m->offl_mask) {
		if (m->offl[i].o == o)
			return &m->offl[i];
		if (!m->offl[i].o)
			return NULL;
	}
}

/* Room for one more entry, load kept at or below 1/2. */
static bool offl_reserve(struct mc_master *m)
{
	uint32_t n = m->offl ? m->offl_mask + 1 : 0, omask = m->offl_mask;
	struct mc_offl *old = m->offl, *t;

	if ((uint64_t)(m->noffl + 1) * 2 <= n)
		return true;
	n = n ? n * 2 : 64;
	if (n == 0 || !(t = mc_calloc(n, sizeof(*t))))
		return false;
	m->offl = t;
	m->offl_mask = n - 1;
	for (uint32_t i = 0; old && i <= omask; i++) {
		uint32_t j;

		if (!old[i].o)
			continue;
		for (j = offl_home(m, old[i].o); t[j].o; j = (j + 1) & m->offl_mask)
			;
		t[j] = old[i];
	}
	mc_free(old);
	return true;
}

/* Backward-shift deletion: no tombstones. */
static void offl_del(struct mc_master *m, struct mc_offl *e)
{
	uint32_t i = (uint32_t)(e - m->offl), j = i, mask = m->offl_mask;

	m->offl[i].o = NULL;
	m->noffl--;
	for (;;) {
		uint32_t h;

		j = (j + 1) & mask;
		if (!m->offl[j].o)
			return;
		h = offl_home(m, m->offl[j].o);
		if (((j - h) & mask) >= ((j - i) & mask)) {
			m->offl[i] = m->offl[j];
			m->offl[j].o = NULL;
			i = j;
		}
	}
}

/* Give a promotion's PROCESSING block back (if its segment still lives). */
static void dst_release(struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r)
{
	struct mc_seg *s;

	if (!mc_master_rep_live(m, r) || mc_master_rep_disk(m, r))
		return;
	s = &m->segs[r->seg];
	if (mc_offset_alloc_release(s->alloc, r->addr) != MC_OK)
		return;
	s->used -= mc_obj_size(o);
	m->allocated_bytes -= mc_obj_size(o);
}

/* The offload or promotion of e is over (reported, cancelled): the object
 * is free again; a promotion's block not handed to the object is freed. */
static void offl_end(struct mc_master *m, struct mc_offl *e)
{
	struct mc_disk *d = e->client < m->nclient_slots ? m->clients[e->client].disk : NULL;

	if (e->kind == MC_OFFL_PROMOTE) {
		if (e->handed)
			dst_release(m, e->o, &e->dst);
		m->npromo--;
	} else if (d && d->nflight) {
		d->nflight--;
	}
	e->o->flags &= (uint8_t)~MC_OBJ_OFFL;
	offl_del(m, e);
}

/* ------------------------------------------------------------------------ */
/* per-client lists                                                          */

static mc_status dkey_push(struct mc_dkey ***list, uint32_t *n, uint32_t *cap, uint16_t tenant,
			   const char *key, size_t len)
{
	struct mc_dkey *k;

	if (!mc_master_grow((void **)list, cap, *n + 1, sizeof(**list)))
		return MC_ERR_NOMEM;
	if (!(k = mc_malloc(sizeof(*k) + len)))
		return MC_ERR_NOMEM;
	k->tenant = tenant;
	k->len = (uint16_t)len;
	memcpy(k->key, key, len);
	(*list)[(*n)++] = k;
	return MC_OK;
}

static void dkeys_free(struct mc_dkey **list, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		mc_free(list[i]);
}

static void push_key(struct mc_master *m, struct mc_dkey ***list, uint32_t *n, uint32_t *cap,
		     const struct mc_obj *o)
{
	if (dkey_push(list, n, cap, o->tenant, o->key, o->key_len) != MC_OK)
		mc_warn("no memory to remember key '%.*s' for its disk owner: its copy stays",
			show(o->key_len), o->key);
}

static bool ring_push(struct mc_ring *q, struct mc_obj *o)
{
	if (q->len == q->cap) {
		uint32_t ncap = q->cap ? q->cap * 2 : 64;
		struct mc_obj **v;

		if (ncap < q->cap || !(v = mc_malloc((size_t)ncap * sizeof(*v))))
			return false;
		for (uint32_t i = 0; i < q->len; i++)
			v[i] = q->v[(q->head + i) % q->cap];
		mc_free(q->v);
		q->v = v;
		q->cap = ncap;
		q->head = 0;
	}
	q->v[(q->head + q->len) % q->cap] = o;
	q->len++;
	return true;
}

static struct mc_obj *ring_pop(struct mc_ring *q)
{
	struct mc_obj *o;

	if (!q->len)
		return NULL;
	o = q->v[q->head];
	q->head = (q->head + 1) % q->cap;
	q->len--;
	return o;
}

/* End every offload of client (handed ones leave their key in dead if keep_dead). */
static void cancel_offloads(struct mc_master *m, uint32_t client, bool keep_dead)
{
	struct mc_disk *d = m->clients[client].disk;

	for (uint32_t i = 0; m->offl && i <= m->offl_mask;) {
		struct mc_offl *e = &m->offl[i];

		if (e->o && e->client == client) {
			if (e->kind == MC_OFFL_PROMOTE)
				m->met.promotion_cancelled++;
			else if (keep_dead && e->handed && d)
				push_key(m, &d->dead, &d->ndead, &d->dead_cap, e->o);
			offl_end(m, e);
			continue; /* slot i may hold a shifted entry now */
		}
		i++;
	}
	if (d)
		d->q.head = d->q.len = d->pq.head = d->pq.len = 0;
}

static void disk_free(struct mc_disk *d)
{
	dkeys_free(d->rm, d->nrm);
	dkeys_free(d->dead, d->ndead);
	mc_free(d->rm);
	mc_free(d->dead);
	mc_free(d->q.v);
	mc_free(d->pq.v);
	mc_free(d);
}

/* ------------------------------------------------------------------------ */
/* hooks called by objects.c, master.c and put.c                            */

static bool has_disk_rep(const struct mc_master *m, struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_disk(m, r) && mc_master_rep_live(m, r))
			return true;
	}
	return false;
}

/* The client that should copy o to its disk: the owner of a live memory
 * replica with a local-disk segment taking offloads; NO_CLIENT if none. */
static uint32_t offload_owner(const struct mc_master *m, struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);
		uint32_t cl;

		if (!mc_master_rep_live(m, r) || mc_master_rep_disk(m, r))
			continue;
		cl = m->segs[r->seg].client;
		if (cl < m->nclient_slots && m->clients[cl].disk && m->clients[cl].disk->offloading)
			return cl;
	}
	return MC_MASTER_NO_CLIENT;
}

/* Queue o for client (kind: enum mc_offl_kind); limits checked by the caller. */
static mc_status offl_add(struct mc_master *m, struct mc_obj *o, uint32_t client, uint8_t kind,
			  uint64_t now)
{
	struct mc_disk *d = m->clients[client].disk;
	struct mc_offl *e;
	uint32_t i;

	if (!offl_reserve(m) || !ring_push(kind == MC_OFFL_PROMOTE ? &d->pq : &d->q, o))
		return MC_ERR_NOMEM;
	for (i = offl_home(m, o); m->offl[i].o; i = (i + 1) & m->offl_mask)
		;
	e = &m->offl[i];
	memset(e, 0, sizeof(*e));
	e->o = o;
	e->client = client;
	e->kind = kind;
	e->deadline = now + m->cfg.put_start_release_timeout_ms;
	m->noffl++;
	if (kind == MC_OFFL_PROMOTE)
		m->npromo++;
	else
		d->nflight++;
	o->flags |= MC_OBJ_OFFL;
	return MC_OK;
}

mc_status mc_master_ssd_queue(struct mc_master *m, struct mc_obj *o, uint64_t now_ms)
{
	uint32_t cl;
	mc_status st;

	if (!m->cfg.enable_offload)
		return MC_ERR_UNABLE_OFFLOAD;
	if (o->flags & (MC_OBJ_OFFL | MC_OBJ_PROC))
		return MC_ERR_OBJECT_HAS_REPLICATION_TASK;
	if (has_disk_rep(m, o))
		return MC_ERR_REPLICA_ALREADY_EXISTS;
	cl = offload_owner(m, o);
	if (cl == MC_MASTER_NO_CLIENT)
		return MC_ERR_UNABLE_OFFLOAD;
	if (m->clients[cl].disk->nflight >= (uint64_t)m->cfg.offloading_queue_limit) {
		m->met.offload_queue_full++;
		return MC_ERR_KEYS_ULTRA_LIMIT;
	}
	st = offl_add(m, o, cl, MC_OFFL_OFFLOAD, now_ms);
	m->met.offload_queued += st == MC_OK;
	return st;
}

/* Eager mode: offloads are queued at PutEnd only, so one missed there
 * waits for a backfill lap. */
static bool eager(const struct mc_master *m)
{
	return m->cfg.enable_offload && !m->cfg.offload_on_evict;
}

void mc_master_ssd_put_end(struct mc_master *m, struct mc_obj *o, uint64_t now_ms)
{
	uint32_t cl;

	if (!eager(m) || mc_master_ssd_queue(m, o, now_ms) != MC_ERR_KEYS_ULTRA_LIMIT)
		return;
	cl = offload_owner(m, o); /* its queue is full: the backfill queues it later */
	if (cl != MC_MASTER_NO_CLIENT)
		m->clients[cl].disk->backfill = true;
}

void mc_master_ssd_obj_gone(struct mc_master *m, struct mc_obj *o)
{
	struct mc_offl *e = offl_find(m, o);
	struct mc_disk *d;

	if (!e) {
		o->flags &= (uint8_t)~MC_OBJ_OFFL;
		return;
	}
	d = e->client < m->nclient_slots ? m->clients[e->client].disk : NULL;
	if (e->kind == MC_OFFL_PROMOTE)
		m->met.promotion_cancelled++;
	else if (e->handed && d)
		push_key(m, &d->dead, &d->ndead, &d->dead_cap, o);
	offl_end(m, e);
}

void mc_master_ssd_rep_gone(struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r)
{
	uint32_t cl = m->segs[r->seg].client;
	struct mc_disk *d = cl < m->nclient_slots ? m->clients[cl].disk : NULL;

	if (mc_master_rep_fs(m, r)) { /* a DISK replica: its file goes (fs_tier.c) */
		mc_master_fs_rep_gone(m, o, r);
		return;
	}
	if (!d || d->seg != r->seg || d->remove_all)
		return; /* its wipe covers it */
	push_key(m, &d->rm, &d->nrm, &d->rm_cap, o);
}

uint32_t mc_master_ssd_drop_disk_reps(struct mc_master *m, struct mc_obj *o)
{
	uint32_t n = 0, dropped = 0;

	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep r = *mc_master_obj_rep(o, i);

		if (mc_master_rep_disk(m, &r) && mc_master_rep_live(m, &r)) {
			mc_master_ssd_rep_gone(m, o, &r);
			dropped++;
			continue;
		}
		*mc_master_obj_rep(o, n++) = r;
	}
	o->nrep = (uint8_t)n;
	return dropped;
}

void mc_master_ssd_wipe_all(struct mc_master *m)
{
	for (uint32_t cl = 0; cl < m->nclient_slots; cl++) {
		struct mc_disk *d = m->clients[cl].disk;

		if (!m->clients[cl].used || !d)
			continue;
		cancel_offloads(m, cl, true);
		dkeys_free(d->rm, d->nrm);
		d->nrm = 0;
		d->remove_all = true;
		m->segs[d->seg].gen++; /* every LOCAL_DISK replica there dies */
		m->need_sweep = true;
	}
}

void mc_master_ssd_client_gone(struct mc_master *m, uint32_t client)
{
	struct mc_disk *d = m->clients[client].disk;

	if (!d)
		return;
	cancel_offloads(m, client, false);
	mc_master_seg_unmount(m, d->seg);
	m->clients[client].disk = NULL;
	disk_free(d);
}

void mc_master_ssd_free(struct mc_master *m)
{
	mc_master_cursor_close(m, &m->bf);
	for (uint32_t cl = 0; cl < m->nclient_slots; cl++) {
		if (m->clients[cl].disk)
			disk_free(m->clients[cl].disk);
		m->clients[cl].disk = NULL;
	}
	mc_free(m->offl);
	m->offl = NULL;
	m->noffl = m->npromo = 0;
	mc_free(m->cms);
	m->cms = NULL;
}

/* ---- backfill ---- */

/*
 * Eager offload queues an object at PutEnd, and only there: one whose
 * owner's queue was full then (a burst of more puts than
 * --offloading_queue_limit between two heartbeats), or whose offload
 * expired unreported, would stay in memory only for good.  So the owner
 * is marked (mc_disk.backfill), and once its queue has drained below half
 * the limit a backfill lap walks the object table with a cursor, one
 * slice of at most BF_SLICE_US per tick, queueing every object that has a
 * live memory replica of an offloading owner, no live disk copy and no
 * offload queued or in flight.  An object whose owner's queue is full
 * again is skipped and marks the owner for another lap, and the lap
 * pauses until that queue is below half again, so a lap skips at most a
 * step's worth per pause.  A lap starts with the marks of the clients it
 * serves cleared; a miss during the lap marks again, so what it could not
 * see gets the next lap.
 */
#define BF_STEP_SLOTS 256 /* table slots per cursor step (one clock read) */
#define BF_SLICE_US   200 /* most time per tick */

struct bf_ctx {
	struct mc_master *m;
	uint64_t now_ms;
};

static bool bf_low(const struct mc_master *m, const struct mc_disk *d)
{
	return (uint64_t)d->nflight * 2 < (uint64_t)m->cfg.offloading_queue_limit;
}

static bool bf_one(void *arg, struct mc_obj *o)
{
	struct bf_ctx *c = arg;
	struct mc_master *m = c->m;
	struct mc_disk *d;
	uint32_t cl;

	if ((o->flags & (MC_OBJ_OFFL | MC_OBJ_PROC)) || has_disk_rep(m, o))
		return true;
	cl = offload_owner(m, o);
	if (cl == MC_MASTER_NO_CLIENT)
		return true;
	d = m->clients[cl].disk;
	if (d->nflight >= (uint64_t)m->cfg.offloading_queue_limit) {
		d->backfill = true; /* the next lap, once this queue drained */
		m->bf_wait = cl + 1;
		return true;
	}
	if (offl_add(m, o, cl, MC_OFFL_OFFLOAD, c->now_ms) == MC_OK) {
		m->met.offload_queued++;
		m->met.offload_backfilled++;
	}
	return true;
}

/* One slice of the backfill lap; starts one when a marked queue is low. */
static void bf_run(struct mc_master *m, uint64_t now_ms)
{
	struct bf_ctx c = {m, now_ms};
	uint64_t end_us;

	if (!eager(m))
		return;
	if (!m->bf.unit) {
		bool go = false;

		for (uint32_t cl = 0; cl < m->nclient_slots; cl++) {
			struct mc_disk *d = m->clients[cl].disk;

			if (d && d->backfill && bf_low(m, d) && now_ms >= d->bf_after) {
				d->backfill = false;
				go = true;
			}
		}
		if (!go)
			return;
		mc_master_cursor_open(m, &m->bf);
		m->bf_wait = 0;
	}
	if (m->bf_wait) {
		uint32_t cl = m->bf_wait - 1;
		struct mc_disk *d = cl < m->nclient_slots ? m->clients[cl].disk : NULL;

		if (d && !bf_low(m, d))
			return; /* paused until that queue drains */
		m->bf_wait = 0;
	}
	end_us = mc_now_us() + BF_SLICE_US;
	while (!mc_master_cursor_done(&m->bf) && !m->bf_wait) {
		mc_master_cursor_step(m, &m->bf, BF_STEP_SLOTS, bf_one, &c);
		if (mc_now_us() >= end_us)
			return;
	}
	if (mc_master_cursor_done(&m->bf))
		mc_master_cursor_close(m, &m->bf);
}

/* Eager mode: o has no disk copy and no offload, its owner takes offloads
 * and a backfill lap is due or running, which will queue it. */
static bool backfill_owed(const struct mc_master *m, struct mc_obj *o)
{
	uint32_t cl;

	if (!eager(m) || (o->flags & (MC_OBJ_OFFL | MC_OBJ_PROC)))
		return false;
	cl = offload_owner(m, o);
	if (cl == MC_MASTER_NO_CLIENT || (!m->clients[cl].disk->backfill && !m->bf.unit))
		return false;
	return !has_disk_rep(m, o);
}

bool mc_master_tier_pending(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms)
{
	return mc_master_fs_pending(m, o, now_ms) || backfill_owed(m, (struct mc_obj *)o);
}

void mc_master_ssd_tick(struct mc_master *m, uint64_t now_ms)
{
	bf_run(m, now_ms);
	if (!m->noffl || (now_ms - m->last_offl_scan < SCAN_MS && now_ms >= m->last_offl_scan))
		return;
	m->last_offl_scan = now_ms;
	for (uint32_t i = 0; i <= m->offl_mask;) {
		struct mc_offl *e = &m->offl[i];
		struct mc_disk *d;

		if (!e->o || e->deadline > now_ms) {
			i++;
			continue;
		}
		d = e->client < m->nclient_slots ? m->clients[e->client].disk : NULL;
		if (e->kind == MC_OFFL_PROMOTE) {
			m->met.promotion_expired++;
		} else {
			m->met.offload_expired++;
			if (e->handed && d) /* a late report must not register it */
				push_key(m, &d->dead, &d->ndead, &d->dead_cap, e->o);
			else if (d) /* never handed out: no late report to mix up */
				d->backfill = true;
		}
		offl_end(m, e); /* slot i may hold a shifted entry now */
	}
}

/* ---- promotion (spec 5.4) ---- */

/* The count-min estimate of o's hits after counting this one. */
static uint32_t cms_count(struct mc_master *m, const struct mc_obj *o)
{
	uint64_t h = XXH3_64bits_withSeed(o->key, o->key_len, m->hash_seed ^ o->tenant);
	uint32_t h1 = (uint32_t)h, h2 = (uint32_t)(h >> 32) | 1, est = UINT32_MAX;

	if (!m->cms && !(m->cms = mc_calloc((size_t)CMS_ROWS * CMS_COLS, sizeof(uint32_t))))
		return 0;
	if (++m->cms_adds >= CMS_AGE_ADDS) { /* forget old popularity */
		for (uint32_t i = 0; i < CMS_ROWS * CMS_COLS; i++)
			m->cms[i] >>= 1;
		m->cms_adds = 0;
	}
	for (uint32_t r = 0; r < CMS_ROWS; r++) {
		uint32_t *c = &m->cms[r * CMS_COLS + ((h1 + r * h2) & (CMS_COLS - 1))];

		if (*c < UINT32_MAX)
			(*c)++;
		est = MC_MIN(est, *c);
	}
	return est;
}

void mc_master_ssd_hit(struct mc_master *m, struct mc_obj *o, uint64_t now_ms)
{
	uint32_t owner = MC_MASTER_NO_CLIENT;
	double used;

	if (!m->cfg.enable_offload || !m->cfg.promotion_on_hit || (o->flags & MC_OBJ_OFFL))
		return;
	for (uint32_t i = 0; i < o->nrep && owner == MC_MASTER_NO_CLIENT; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_disk(m, r) && mc_master_rep_live(m, r))
			owner = m->segs[r->seg].client;
	}
	if (owner >= m->nclient_slots || !m->clients[owner].disk)
		return;
	if ((int64_t)cms_count(m, o) < m->cfg.promotion_admission_threshold) {
		m->met.promotion_rejected_frequency++;
		return;
	}
	used = m->capacity_bytes ? (double)m->allocated_bytes / (double)m->capacity_bytes : 1.0;
	if (used >= m->cfg.eviction_high_watermark_ratio) {
		m->met.promotion_rejected_watermark++;
		return;
	}
	if ((int64_t)m->npromo >= m->cfg.promotion_queue_limit) {
		m->met.promotion_rejected_cap++;
		return;
	}
	if (offl_add(m, o, owner, MC_OFFL_PROMOTE, now_ms) == MC_OK)
		m->met.promotion_admitted++;
}

static uint64_t promo_id(const struct mc_rep *r)
{
	uint64_t x = r->addr ^ ((uint64_t)r->seg << 40) ^ ((uint64_t)r->gen << 20);

	x ^= x >> 31;
	x *= 0x9E3779B97F4A7C15ull;
	return (x ^ (x >> 29)) | 1;
}

/* One memory block of o's size, preferably in the owner's own segments. */
static bool promo_place(struct mc_master *m, const struct mc_obj *o, uint32_t owner,
			struct mc_rep *out)
{
	uint32_t pref[8], npref = 0, n = 0, seg;
	struct mc_alloc_request req = {0};
	struct mc_alloc_placement p;

	if (mc_master_targets(m) != MC_OK || m->ntargets == 0)
		return false;
	for (uint32_t t = 0; t < m->ntargets && npref < MC_ARRAY_SIZE(pref); t++) {
		if (m->segs[m->tsegs[m->tstart[t]]].client == owner)
			pref[npref++] = t;
	}
	req.len = mc_obj_size(o);
	req.replica_num = 1;
	req.strategy = m->cfg.strategy;
	req.preferred = npref ? pref : NULL;
	req.npreferred = npref;
	if (mc_alloc_place(m->targets, m->ntargets, &req, &m->rng, &p, &n) != MC_OK || n == 0)
		return false;
	seg = m->tsegs[m->tstart[p.target] + p.alloc_index];
	*out = (struct mc_rep){p.addr, seg, m->segs[seg].gen};
	m->segs[seg].used += mc_obj_size(o);
	m->allocated_bytes += mc_obj_size(o);
	return true;
}

/* ------------------------------------------------------------------------ */
/* handlers                                                                  */

static struct mc_disk *disk_of(struct mc_master *m, const struct mc_store_uuid *id,
			       uint32_t *slot_out)
{
	struct mc_client *cl = mc_master_client_find(m, id, slot_out);

	return cl ? cl->disk : NULL;
}

#define NO_DISK(id)                                                                          \
	FAIL(MC_ERR_SEGMENT_NOT_FOUND,                                                       \
	     "client %" PRIu64 "-%" PRIu64 " has no local-disk segment mounted", (id).first, \
	     (id).second)

/* What a batch of n items from client's disk starts with (listed: its item
 * list came): the disk in *d_out, its client's slot in *cl_out, and room
 * for n statuses in *resp.  MC_ERR_INVALID_PARAMS, MC_ERR_SEGMENT_NOT_FOUND
 * or MC_ERR_NOMEM with err written otherwise. */
static mc_status batch_begin(struct mc_master *m, const struct mc_store_uuid *client, uint32_t n,
			     bool listed, struct mc_disk **d_out, uint32_t *cl_out,
			     struct mc_store_batch_status_resp *resp, char *err, size_t err_len)
{
	*d_out = disk_of(m, client, cl_out);
	resp->n_items = n;
	resp->statuses = NULL;
	if (n && !listed)
		return FAIL(MC_ERR_INVALID_PARAMS, "item list missing");
	if (!*d_out)
		return NO_DISK(*client);
	if (!(resp->statuses = mc_master_scratch(m, (size_t)n * sizeof(int32_t) + 1)))
		return FAIL(MC_ERR_NOMEM, "no memory for %u results", n);
	return MC_OK;
}

static mc_status h_mount(struct mc_master *m, const struct mc_store_mount_local_disk_req *r,
			 uint64_t now, uint64_t req_id, struct mc_buf *out, char *err,
			 size_t err_len)
{
	uint32_t cl;
	struct mc_disk *d;
	struct mc_seg *s;
	mc_status st;

	if (!m->cfg.enable_offload)
		return FAIL(MC_ERR_UNABLE_OFFLOAD, "the master runs without --enable_offload");
	if (!s_ok(&r->transport_endpoint))
		return FAIL(MC_ERR_INVALID_PARAMS, "malformed request");
	if ((st = mc_master_client_intern(m, &r->client_id, &cl)) != MC_OK)
		return FAIL(st, "cannot record client");
	d = m->clients[cl].disk;
	if (!d) {
		if (!(d = mc_calloc(1, sizeof(*d))))
			return FAIL(MC_ERR_NOMEM, "no memory");
		st = mc_master_seg_mount_disk(m, cl, sp(&r->transport_endpoint),
					      r->transport_endpoint.len, &d->seg);
		if (st != MC_OK) {
			mc_free(d);
			return FAIL(st, "cannot mount the local-disk segment");
		}
		m->clients[cl].disk = d;
		mc_info("client %" PRIu64 "-%" PRIu64 " mounted its local-disk segment (%.*s)",
			r->client_id.first, r->client_id.second, show(r->transport_endpoint.len),
			sp(&r->transport_endpoint));
	}
	s = &m->segs[d->seg];
	if (s->te_len != r->transport_endpoint.len ||
	    memcmp(s->te_endpoint, sp(&r->transport_endpoint), s->te_len) != 0) {
		/* a restarted client at another endpoint: replicas follow it */
		char *ep = mc_strndup(sp(&r->transport_endpoint), r->transport_endpoint.len);

		if (!ep)
			return FAIL(MC_ERR_NOMEM, "no memory");
		mc_free(s->te_endpoint);
		s->te_endpoint = ep;
		s->te_len = r->transport_endpoint.len;
	}
	d->offloading = r->enable_offloading;
	m->clients[cl].alive = true;
	m->clients[cl].expiry = now + m->cfg.client_ttl_ms;
	return mc_store_mount_local_disk_segment_response_encode(out, req_id, NULL);
}

/* The address of o's live memory replica in client's own segments, or false. */
static bool source_addr(const struct mc_master *m, struct mc_obj *o, uint32_t client,
			uint64_t *addr_out)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_live(m, r) && !mc_master_rep_disk(m, r) &&
		    m->segs[r->seg].client == client) {
			*addr_out = r->addr;
			return true;
		}
	}
	return false;
}

static struct mc_proto_str tenant_str(const struct mc_master *m, uint16_t t)
{
	return (struct mc_proto_str){m->tenants[t], m->tenant_lens[t]};
}

static mc_status h_heartbeat(struct mc_master *m, const struct mc_store_offload_heartbeat_req *r,
			     uint64_t now, uint64_t req_id, struct mc_buf *out, char *err,
			     size_t err_len)
{
	uint32_t cl;
	struct mc_disk *d = disk_of(m, &r->client_id, &cl);
	struct mc_store_offload_heartbeat_resp resp = {0};
	uint32_t want = r->max_items ? MC_MIN(r->max_items, HB_ITEMS_MAX) : HB_ITEMS_DEFAULT;
	uint32_t nrm;
	mc_status st;

	if (!d)
		return NO_DISK(r->client_id);
	d->offloading = r->enable_offloading;
	nrm = MC_MIN(d->nrm, HB_REMOVES_MAX);
	if (r->enable_offloading && d->q.len) {
		resp.offload = mc_malloc((size_t)MC_MIN(want, d->q.len) * sizeof(*resp.offload));
		if (!resp.offload)
			return FAIL(MC_ERR_NOMEM, "no memory");
	}
	if (nrm && !(resp.removes = mc_malloc((size_t)nrm * sizeof(*resp.removes)))) {
		mc_free(resp.offload);
		return FAIL(MC_ERR_NOMEM, "no memory");
	}
	while (resp.offload && resp.n_offload < want && d->q.len) {
		struct mc_obj *o = ring_pop(&d->q);
		struct mc_offl *e = offl_find(m, o);
		uint64_t addr;

		if (!e || e->client != cl || e->handed || e->kind != MC_OFFL_OFFLOAD)
			continue; /* stale: that offload ended already */
		if (!source_addr(m, o, cl, &addr)) {
			offl_end(m, e); /* its memory replica went: nothing to copy */
			continue;
		}
		e->handed = true;
		e->deadline = now + m->cfg.put_start_release_timeout_ms;
		resp.offload[resp.n_offload++] = (struct mc_store_offload_item){
			tenant_str(m, o->tenant), {o->key, o->key_len}, mc_obj_vsize(o), addr};
	}
	for (uint32_t i = 0; i < nrm; i++) {
		const struct mc_dkey *k = d->rm[i];

		resp.removes[i] =
			(struct mc_store_tenant_key){tenant_str(m, k->tenant), {k->key, k->len}};
	}
	resp.n_removes = nrm;
	resp.remove_all = d->remove_all;
	st = mc_store_offload_object_heartbeat_response_encode(out, req_id, &resp);
	mc_free(resp.offload);
	mc_free(resp.removes);
	if (st != MC_OK)
		return FAIL(st, "cannot encode the heartbeat answer");
	/* delivered */
	if (nrm) {
		dkeys_free(d->rm, nrm);
		memmove(d->rm, d->rm + nrm, (size_t)(d->nrm - nrm) * sizeof(*d->rm));
		d->nrm -= nrm;
	}
	d->remove_all = false;
	return MC_OK;
}

static bool dead_take(struct mc_disk *d, uint16_t tenant, const struct mc_proto_str *key)
{
	for (uint32_t i = 0; i < d->ndead; i++) {
		struct mc_dkey *k = d->dead[i];

		if (k->tenant == tenant && k->len == key->len &&
		    !memcmp(k->key, key->ptr, k->len)) {
			mc_free(k);
			d->dead[i] = d->dead[--d->ndead];
			return true;
		}
	}
	return false;
}

static mc_status add_disk_rep(struct mc_master *m, struct mc_obj *o, const struct mc_disk *d)
{
	struct mc_rep *r;

	for (uint32_t i = 0; i < o->nrep; i++) {
		r = mc_master_obj_rep(o, i);
		if (r->seg == d->seg && mc_master_rep_live(m, r))
			return MC_OK; /* has it already */
	}
	if (o->nrep >= MC_MASTER_MAX_REPLICAS)
		return MC_ERR_REPLICA_ALREADY_EXISTS;
	if (!mc_master_obj_ext_fit(o, o->nrep + 1u))
		return MC_ERR_NOMEM;
	r = mc_master_obj_rep(o, o->nrep);
	r->addr = 0;
	r->seg = d->seg;
	r->gen = m->segs[d->seg].gen;
	o->nrep++;
	return MC_OK;
}

/* Re-registration of a copy found on disk: a new object whose only replica
 * is LOCAL_DISK. */
static mc_status obj_from_disk(struct mc_master *m, const struct mc_disk *d, uint16_t tenant,
			       const struct mc_proto_str *key, uint64_t size, uint64_t now)
{
	struct mc_obj *o = mc_malloc(offsetof(struct mc_obj, key) + key->len);
	mc_status st;

	if (!o)
		return MC_ERR_NOMEM;
	memset(o, 0, offsetof(struct mc_obj, key));
	memcpy(o->key, key->ptr, key->len);
	o->key_len = (uint16_t)key->len;
	o->tenant = tenant;
	mc_obj_set_size(o, size);
	o->aux = MC_MASTER_NO_CLIENT; /* written by nobody here */
	o->t = now;
	o->nrep = 1;
	o->r0 = (struct mc_rep){0, d->seg, m->segs[d->seg].gen};
	if ((st = mc_master_obj_insert(m, o)) != MC_OK)
		mc_free(o);
	return st;
}

/* What one notify round reported of the offloads handed to its client. */
struct notify_round {
	bool failed, done;
};

/*
 * After a round with failed offloads and none done: in eager mode the
 * objects keep their memory (backfill_owed) and a backfill lap re-queues
 * them after a backoff of 1, 2, 4, ... s; after MC_MASTER_OFFLOAD_RETRIES
 * such rounds in a row the owner is left alone (its failed objects are then
 * ordinary memory replicas, evictable, rather than pinned for good) until
 * a round with a success starts the count again.
 */
static void notify_round_end(struct mc_master *m, struct mc_disk *d, const struct notify_round *r,
			     uint64_t now)
{
	if (r->done)
		d->fail_streak = 0;
	if (!r->failed || r->done || !eager(m))
		return;
	if (++d->fail_streak > MC_MASTER_OFFLOAD_RETRIES) {
		if (d->fail_streak == MC_MASTER_OFFLOAD_RETRIES + 1)
			mc_warn("offloads to the disk of segment %u failed %u rounds in a row; "
				"no more retries until one succeeds (the memory copies stay, "
				"evictable)",
				d->seg, MC_MASTER_OFFLOAD_RETRIES);
		return;
	}
	d->backfill = true;
	d->bf_after = now + (1000ull << (d->fail_streak - 1));
}

static int32_t notify_one(struct mc_master *m, uint32_t cl, struct mc_disk *d,
			  const struct mc_store_offload_result *it, uint64_t now,
			  struct notify_round *round)
{
	bool found;
	uint16_t tid = mc_master_tenant_find(m, sp(&it->tenant), it->tenant.len, &found);
	struct mc_obj *o;
	struct mc_offl *e;
	mc_status st;

	if (!s_ok(&it->tenant) || !s_ok(&it->key) || it->key.len == 0)
		return MC_ERR_INVALID_PARAMS;
	/* the End rule: dead replicas go first; a gone object is erased (its
	 * handed offload leaves the key in d->dead) and answers OBJECT_NOT_FOUND */
	o = found ? mc_master_obj_find_live(m, tid, it->key.ptr, it->key.len) : NULL;
	e = o && (o->flags & MC_OBJ_OFFL) ? offl_find(m, o) : NULL;
	if (e && e->client == cl && e->handed && e->kind == MC_OFFL_OFFLOAD) {
		/* the report of an offload this client was given */
		offl_end(m, e);
		if (it->status != MC_OK) {
			m->met.offload_failed++;
			round->failed = true;
			return MC_OK; /* memory stays; notify_round_end says for how long */
		}
		if (it->size != mc_obj_vsize(o)) { /* a disk copy holds no trailer */
			m->met.offload_failed++;
			return MC_ERR_INVALID_PARAMS;
		}
		st = add_disk_rep(m, o, d);
		m->met.offload_completed += st == MC_OK;
		round->done |= st == MC_OK;
		return st;
	}
	if (found && dead_take(d, tid, &it->key))
		return MC_ERR_OBJECT_NOT_FOUND; /* went away while it was copied */
	if (it->status != MC_OK)
		return MC_OK; /* a failure of nothing we know of */
	/* re-registration (spec 5.6) */
	if (it->size == 0 || it->size > MC_MASTER_MAX_VALUE)
		return MC_ERR_INVALID_PARAMS;
	if (!o) {
		if (!found &&
		    mc_master_tenant_intern(m, sp(&it->tenant), it->tenant.len, &tid) != MC_OK)
			return MC_ERR_INVALID_PARAMS;
		st = obj_from_disk(m, d, tid, &it->key, it->size, now);
		m->met.offload_reregistered += st == MC_OK;
		return st;
	}
	if (o->flags & MC_OBJ_PROC)
		return MC_ERR_REPLICA_IS_NOT_READY;
	if (mc_obj_vsize(o) != it->size)
		return MC_ERR_INVALID_PARAMS;
	st = add_disk_rep(m, o, d);
	m->met.offload_reregistered += st == MC_OK;
	return st;
}

static mc_status h_notify(struct mc_master *m, const struct mc_store_notify_offload_req *r,
			  uint64_t now, uint64_t req_id, struct mc_buf *out, char *err,
			  size_t err_len)
{
	uint32_t cl;
	struct mc_disk *d;
	struct mc_store_batch_status_resp resp;
	mc_status st = batch_begin(m, &r->client_id, r->n_items, r->items != NULL, &d, &cl, &resp,
				   err, err_len);

	if (st != MC_OK)
		return st;
	struct notify_round round = {false, false};
	for (uint32_t i = 0; i < r->n_items; i++)
		resp.statuses[i] = notify_one(m, cl, d, &r->items[i], now, &round);
	notify_round_end(m, d, &round, now);
	return mc_store_notify_offload_success_response_encode(out, req_id, &resp);
}

static mc_status h_evict(struct mc_master *m, const struct mc_store_evict_disk_req *r,
			 uint64_t req_id, struct mc_buf *out, char *err, size_t err_len)
{
	uint32_t cl, nfail = 0;
	struct mc_disk *d;
	struct mc_store_batch_status_resp resp;
	mc_status st = batch_begin(m, &r->client_id, r->n_items, r->items != NULL, &d, &cl, &resp,
				   err, err_len);

	m->met.master_evict_disk_replica.requests++;
	if (st != MC_OK) {
		/* a refused request, not a lack of memory, counts as failed */
		m->met.master_evict_disk_replica.failures += st != MC_ERR_NOMEM;
		return st;
	}
	for (uint32_t i = 0; i < r->n_items; i++) {
		const struct mc_store_tenant_key *it = &r->items[i];
		bool found;
		uint16_t tid = mc_master_tenant_find(m, sp(&it->tenant), it->tenant.len, &found);
		struct mc_obj *o =
			found && s_ok(&it->key) && it->key.len
				? mc_master_obj_find_live(m, tid, it->key.ptr, it->key.len)
				: NULL;
		uint32_t n = 0, dropped = 0;

		if (!o) {
			resp.statuses[i] = MC_ERR_OBJECT_NOT_FOUND;
			nfail++;
			continue;
		}
		for (uint32_t k = 0; k < o->nrep; k++) {
			struct mc_rep rr = *mc_master_obj_rep(o, k);

			if (rr.seg == d->seg && mc_master_rep_live(m, &rr)) {
				dropped++; /* the owner deletes the files itself */
				continue;
			}
			*mc_master_obj_rep(o, n++) = rr;
		}
		o->nrep = (uint8_t)n;
		if (o->nrep == 0 && !(o->flags & MC_OBJ_PROC))
			mc_master_obj_erase(m, o);
		resp.statuses[i] = dropped ? MC_OK : MC_ERR_REPLICA_NOT_FOUND;
		nfail += !dropped;
	}
	m->met.master_evict_disk_replica.failures += nfail != 0;
	return mc_store_batch_evict_disk_replica_response_encode(out, req_id, &resp);
}

static mc_status h_promo_heartbeat(struct mc_master *m,
				   const struct mc_store_promotion_heartbeat_req *r, uint64_t now,
				   uint8_t minor, uint64_t req_id, struct mc_buf *out, char *err,
				   size_t err_len)
{
	uint32_t cl;
	struct mc_disk *d = disk_of(m, &r->client_id, &cl);
	struct mc_store_promotion_heartbeat_resp resp = {0, NULL};
	uint64_t cap = (uint64_t)m->cfg.promotion_max_per_heartbeat;
	uint32_t want;
	mc_status st;

	if (!d)
		return NO_DISK(r->client_id);
	if (r->max_items && r->max_items < cap)
		cap = r->max_items;
	want = (uint32_t)MC_MIN(cap, (uint64_t)MC_MIN(d->pq.len, HB_ITEMS_MAX));
	if (want && !(resp.tasks = mc_calloc(want, sizeof(*resp.tasks))))
		return FAIL(MC_ERR_NOMEM, "no memory");
	while (resp.n_tasks < want && d->pq.len) {
		struct mc_obj *o = ring_pop(&d->pq);
		struct mc_offl *e = offl_find(m, o);
		struct mc_store_promotion_task *t;
		const struct mc_seg *s;

		if (!e || e->client != cl || e->handed || e->kind != MC_OFFL_PROMOTE)
			continue; /* stale */
		if (mc_master_obj_gone(m, o)) {
			/* no live replica left: the sweep will erase it */
			m->met.promotion_cancelled++;
			offl_end(m, e);
			continue;
		}
		if (!has_disk_rep(m, o) || !promo_place(m, o, cl, &e->dst)) {
			m->met.promotion_failed++; /* no disk copy or no memory: drop it */
			offl_end(m, e);
			continue;
		}
		e->handed = true;
		e->deadline = now + m->cfg.put_start_release_timeout_ms;
		s = &m->segs[e->dst.seg];
		t = &resp.tasks[resp.n_tasks++];
		t->tenant = tenant_str(m, o->tenant);
		t->key = (struct mc_proto_str){o->key, o->key_len};
		t->size = mc_obj_vsize(o); /* the disk copy's bytes, no trailer */
		t->replica = (struct mc_store_replica){
			.id = promo_id(&e->dst),
			.status = MC_STORE_REPLICA_PROCESSING,
			.type = MC_STORE_REPLICA_MEMORY,
			/* the block: room for the trailer, which a promoter
			 * of minor 11 builds from the bytes it read
			 * (client_offload.c); an older one is told the value */
			.size = minor >= 11 ? mc_obj_size(o) : mc_obj_vsize(o),
			.address = e->dst.addr,
			.segment_name = {s->name, s->name_len},
			.transport_endpoint = {s->te_endpoint, s->te_len},
			.protocol = {s->protocol, s->proto_len},
		};
	}
	st = mc_store_promotion_object_heartbeat_response_encode(out, req_id, &resp);
	mc_free(resp.tasks);
	if (st != MC_OK)
		return FAIL(st, "cannot encode the promotion tasks");
	return MC_OK;
}

static int32_t promo_one(struct mc_master *m, uint32_t cl, uint8_t minor,
			 const struct mc_store_promotion_result *it)
{
	bool found;
	uint16_t tid = mc_master_tenant_find(m, sp(&it->tenant), it->tenant.len, &found);
	/* the End rule: a gone object is erased (its promotion and block with
	 * it) and answers OBJECT_NOT_FOUND */
	struct mc_obj *o = found && s_ok(&it->key) && it->key.len
				   ? mc_master_obj_find_live(m, tid, it->key.ptr, it->key.len)
				   : NULL;
	struct mc_offl *e = o && (o->flags & MC_OBJ_OFFL) ? offl_find(m, o) : NULL;
	struct mc_rep *r;

	if (!o)
		return MC_ERR_OBJECT_NOT_FOUND;
	if (!e || e->client != cl || !e->handed || e->kind != MC_OFFL_PROMOTE ||
	    promo_id(&e->dst) != it->replica_id)
		return MC_ERR_REPLICA_NOT_FOUND;
	if (it->status != MC_OK || !mc_master_rep_live(m, &e->dst) ||
	    o->nrep >= MC_MASTER_MAX_REPLICAS || !mc_master_obj_ext_fit(o, o->nrep + 1u)) {
		m->met.promotion_failed++;
		offl_end(m, e); /* frees the block */
		return it->status != MC_OK ? MC_OK : MC_ERR_REPLICA_IS_GONE;
	}
	/* the block becomes a COMPLETE memory replica, first in the list */
	r = mc_master_obj_rep(o, o->nrep);
	*r = o->r0;
	o->r0 = e->dst;
	o->nrep++;
	/* a promoter of minor 11 wrote the trailer it built from the disk
	 * copy's bytes after them: the object's checksum (the trailer's hash)
	 * stays, and a reader checks the block against it.  An older one
	 * wrote none: the checksum goes, and the object is read unchecked. */
	if (minor < 11 && mc_obj_trailer(o) && (o->flags & MC_OBJ_CKSUM))
		(void)mc_master_obj_set_sums(o, false, 0, NULL, 0, false);
	m->met.promotion_completed++;
	m->met.promotion_completed_bytes += mc_obj_size(o);
	e->handed = false; /* the block is the object's now */
	offl_end(m, e);
	return MC_OK;
}

static mc_status h_promo_notify(struct mc_master *m, const struct mc_store_notify_promotion_req *r,
				uint8_t minor, uint64_t req_id, struct mc_buf *out, char *err,
				size_t err_len)
{
	uint32_t cl;
	struct mc_disk *d;
	struct mc_store_batch_status_resp resp;
	mc_status st = batch_begin(m, &r->client_id, r->n_items, r->items != NULL, &d, &cl, &resp,
				   err, err_len);

	if (st != MC_OK)
		return st;
	for (uint32_t i = 0; i < r->n_items; i++)
		resp.statuses[i] = promo_one(m, cl, minor, &r->items[i]);
	return mc_store_notify_promotion_response_encode(out, req_id, &resp);
}

mc_status mc_master_ssd_handle(struct mc_master *m, const struct mc_store_msg *q, uint64_t now_ms,
			       struct mc_buf *out, char *err, size_t err_len)
{
	uint64_t id = q->hdr.req_id;
	uint32_t cl;
	struct mc_disk *d;

	switch (q->hdr.type) {
	case MC_STORE_MOUNT_LOCAL_DISK_SEGMENT:
		return h_mount(m, &q->body.mount_local_disk_req, now_ms, id, out, err, err_len);
	case MC_STORE_UNMOUNT_LOCAL_DISK_SEGMENT:
		if (mc_master_client_find(m, &q->body.client_req.client_id, &cl))
			mc_master_ssd_client_gone(m, cl);
		return mc_store_unmount_local_disk_segment_response_encode(out, id, NULL);
	case MC_STORE_OFFLOAD_OBJECT_HEARTBEAT:
		return h_heartbeat(m, &q->body.offload_heartbeat_req, now_ms, id, out, err,
				   err_len);
	case MC_STORE_NOTIFY_OFFLOAD_SUCCESS:
		return h_notify(m, &q->body.notify_offload_req, now_ms, id, out, err, err_len);
	case MC_STORE_REPORT_SSD_CAPACITY:
		d = disk_of(m, &q->body.ssd_capacity_req.client_id, &cl);
		if (!d)
			return NO_DISK(q->body.ssd_capacity_req.client_id);
		d->total = q->body.ssd_capacity_req.total;
		d->used = q->body.ssd_capacity_req.used;
		return mc_store_report_ssd_capacity_response_encode(out, id, NULL);
	case MC_STORE_BATCH_EVICT_DISK_REPLICA:
		return h_evict(m, &q->body.evict_disk_req, id, out, err, err_len);
	case MC_STORE_PROMOTION_OBJECT_HEARTBEAT:
		return h_promo_heartbeat(m, &q->body.promotion_heartbeat_req, now_ms, q->hdr.minor,
					 id, out, err, err_len);
	case MC_STORE_NOTIFY_PROMOTION:
		return h_promo_notify(m, &q->body.notify_promotion_req, q->hdr.minor, id, out, err,
				      err_len);
	default:
		return FAIL(MC_ERR_NOT_SUPPORTED, "message %u is not an SSD tier message",
			    q->hdr.type);
	}
}

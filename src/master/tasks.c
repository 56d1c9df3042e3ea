/*
 * master/tasks.c - copy and move tasks, replica repair and drain jobs
 * (spec store.md 1.14, 2.3, 6.5, 7.1; issue 15 parts 3, 4 and 6).
 *
 * A task copies one object's bytes from a live memory replica (its
 * source) to blocks on other segments (its targets).  The master never
 * moves bytes: it hands the task to the client that owns the source, on
 * that client's FetchTasks (its heartbeat, once a second, and again at
 * once while tasks keep coming), and that client writes the source's bytes
 * from its own segment to the targets through its Transfer Engine and
 * reports with MarkTaskToComplete.  Upstream's CopyStart/MoveStart happen
 * here at the hand-out (the target blocks are allocated, held by the task
 * and invisible to readers) and its CopyEnd/MoveEnd or the Revokes at the
 * report: success appends the blocks to the object's replicas (a move
 * then drops the source replica), failure gives them back.
 *
 * Who makes tasks:
 *   - CreateCopyTask / CreateMoveTask (the Python calls), with upstream's
 *     checks and codes;
 *   - replica repair (ours; upstream never re-creates a lost replica): the
 *     unmount sweep (and every request that prunes dead replicas) calls
 *     mc_master_repair_note for an object that lost memory replicas but
 *     kept one; it is queued with the count it had, and the tick turns the
 *     queue into one-target copy tasks, at most replica_repair_max_inflight
 *     at once and replica_repair_bytes_per_sec worth of bytes a second
 *     (a token bucket), so repair never takes the whole network from
 *     foreground traffic.  A repair that fails (no space, its source died)
 *     is queued again after a second; after REPAIR_TRIES it is parked
 *     until a segment mounts (mc_master_repair_wake).  After a restart
 *     the queue is rebuilt by the replay's sweep (the log has the object
 *     with all its replicas and the lost segment's unmount); a replica on
 *     a segment that is not mounted again yet (MC_SEG_WAIT) counts as
 *     kept, see mem_kept;
 *   - drain jobs (the HTTP admin API): the drained segments leave
 *     placement (state DRAINING), a table cursor finds the objects with a
 *     replica there and each becomes a move task, max_concurrency at once;
 *     when nothing is left the segments are unmounted (master/drain.c).
 *
 * Objects and tasks: a task remembers its object by pointer; every erase
 * (remove, eviction, the sweep, a client's expiry) goes through
 * mc_master_task_obj_gone first, which clears it, so a pointer held here
 * is always live.  While an object has a task, Remove and Upsert answer
 * OBJECT_HAS_REPLICATION_TASK (the copy reads its replica).  Lookups are
 * linear over the active tasks: repair keeps at most a few dozen in
 * flight and operators' tasks are rare, so the lists stay short; the
 * per-request checks cost nothing while no task is active.
 *
 * The log (master/tasks_wal.c): operators' tasks and drain jobs are
 * logged at every change the tables would miss and come back after a
 * restart or a failover; the master's own tasks only as their ids.
 *
 * Never: block, move bytes, or hand a target block to a reader before the
 * report that filled it.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/compiler.h"
#include "base/log.h"
#include "master/master_int.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define FETCH_MAX	  256  /* tasks one FetchTasks hands out at most */
#define REPAIR_TRIES	  30   /* attempts of one object's repair */
#define REPAIR_BACKOFF_MS 1000 /* between them */
#define SCAN_MS		  100  /* timeouts and dead sources, at most this often */

#include "master/tasks_int.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

bool mc_master_uuid_same(const struct mc_store_uuid *a, const struct mc_store_uuid *b)
{
	return a->first == b->first && a->second == b->second;
}

bool mc_master_seg_named(const struct mc_seg *s, const char *name, size_t len)
{
	return s->name && s->name_len == len && memcmp(s->name, name, len) == 0;
}

/* A memory replica on a segment still mounted (any state but gone). */
bool mc_master_rep_mem_live(const struct mc_master *m, const struct mc_rep *r)
{
	return r->addr != 0 && !mc_master_rep_fs(m, r) && mc_master_rep_live(m, r) &&
	       !mc_master_rep_disk(m, r);
}

static uint32_t mem_count(const struct mc_master *m, struct mc_obj *o)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < o->nrep; i++)
		n += mc_master_rep_mem_live(m, mc_master_obj_rep(o, i));
	return n;
}

/* Memory replicas live or replayed from the log on a segment not mounted
 * again yet (MC_SEG_WAIT, wal_log.c): what o will have once its segments
 * are back.  Repair counts these: a replica that only waits is neither
 * lost nor a source yet. */
static uint32_t mem_kept(const struct mc_master *m, struct mc_obj *o)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		n += mc_master_rep_mem_live(m, r) ||
		     (r->addr != 0 && r->seg < m->nsegs_slots &&
		      m->segs[r->seg].state == MC_SEG_WAIT && m->segs[r->seg].gen == r->gen);
	}
	return n;
}

/* o has a live memory replica on a segment called name. */
struct mc_rep *mc_master_rep_on(const struct mc_master *m, struct mc_obj *o, const char *name,
				size_t len)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_mem_live(m, r) &&
		    mc_master_seg_named(&m->segs[r->seg], name, len))
			return r;
	}
	return NULL;
}

/* A segment called name that takes new replicas (mounted, reachable). */
bool mc_master_seg_name_allocatable(const struct mc_master *m, const char *name, size_t len)
{
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		const struct mc_seg *s = &m->segs[i];

		if (s->state == MC_SEG_MOUNTED && !s->unreachable &&
		    mc_master_seg_named(s, name, len))
			return true;
	}
	return false;
}

/* A block of size on a segment called name; false when none has room. */
/* A block of size on the segment named name: MC_OK, NOMEM when every
 * segment of that name failed for want of the master's own memory (no
 * eviction can help then), else NO_AVAILABLE_HANDLE. */
static mc_status block_alloc(struct mc_master *m, const char *name, size_t len, uint64_t size,
			     struct mc_rep *out)
{
	mc_status why = MC_ERR_NO_AVAILABLE_HANDLE;
	bool full = false;

	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		struct mc_seg *s = &m->segs[i];
		uint64_t addr;
		mc_status st;

		if (s->state != MC_SEG_MOUNTED || s->unreachable ||
		    !mc_master_seg_named(s, name, len))
			continue;
		st = mc_offset_alloc_alloc(s->alloc, size, &addr);
		if (st == MC_ERR_NOMEM) {
			why = st;
			continue;
		}
		if (st != MC_OK) {
			full = true;
			continue;
		}
		out->addr = addr;
		out->seg = i;
		out->gen = s->gen;
		s->used += size;
		m->allocated_bytes += size;
		return MC_OK;
	}
	return full ? MC_ERR_NO_AVAILABLE_HANDLE : why;
}

/* The value bytes t moved, for the byte counters: t->size less the
 * object's chunk-sum trailer, which the copy carries but is not the user's. */
uint64_t mc_master_task_value_bytes(const struct mc_task *t)
{
	return t->o && mc_obj_trailer(t->o) && mc_obj_size(t->o) == t->size ? mc_obj_vsize(t->o)
									    : t->size;
}

static void block_release(struct mc_master *m, const struct mc_rep *r, uint64_t size)
{
	struct mc_seg *s;

	if (r->addr == 0 || !mc_master_rep_live(m, r))
		return; /* none, or its segment went with it */
	s = &m->segs[r->seg];
	if (!s->alloc || mc_offset_alloc_release(s->alloc, r->addr) != MC_OK)
		return;
	s->used -= size;
	m->allocated_bytes -= size;
}

static void fill_desc(const struct mc_master *m, const struct mc_rep *r, uint64_t size,
		      uint8_t status, struct mc_store_replica *d)
{
	mc_master_mem_desc(m, r->seg, r->addr, size, status, d);
	d->id = r->addr ^ ((uint64_t)r->seg << 40) ^ ((uint64_t)r->gen << 20);
}

/* ------------------------------------------------------------------------ */
/* the task lists                                                            */

void mc_master_task_free(struct mc_task *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->nt; i++)
		mc_free(t->tname[i]);
	mc_free(t->tname);
	mc_free(t->dst);
	mc_free(t->key);
	mc_free(t);
}

struct mc_task *mc_master_task_new(struct mc_master *m, uint8_t type, struct mc_obj *o,
				   uint32_t ntargets, uint64_t now)
{
	struct mc_tasks *k = m->tasks;
	struct mc_task *t;

	if (!mc_master_grow((void **)&k->active, &k->active_cap, k->nactive + 1,
			    sizeof(*k->active)))
		return NULL;
	t = mc_calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->key = mc_malloc(o->key_len ? o->key_len : 1);
	t->tname = mc_calloc(ntargets ? ntargets : 1, sizeof(char *));
	t->dst = mc_calloc(ntargets ? ntargets : 1, sizeof(struct mc_rep));
	if (!t->key || !t->tname || !t->dst) {
		mc_master_task_free(t);
		return NULL;
	}
	memcpy(t->key, o->key, o->key_len);
	t->key_len = o->key_len;
	t->tenant = o->tenant;
	t->o = o;
	t->type = type;
	t->status = MC_STORE_TASK_PENDING;
	t->size = mc_obj_size(o);
	t->created = t->updated = now;
	t->id.first = k->id_hi;
	t->id.second = ++k->seq;
	t->client = MC_MASTER_NO_CLIENT;
	return t;
}

bool mc_master_task_add_target(struct mc_task *t, const char *name, size_t len)
{
	char *c = mc_malloc(len + 1);

	if (!c)
		return false;
	memcpy(c, name, len);
	c[len] = '\0';
	t->tname[t->nt++] = c;
	return true;
}

void mc_master_task_set_source(struct mc_master *m, struct mc_task *t, const struct mc_rep *r)
{
	t->src = *r;
	t->client = m->segs[r->seg].client;
	t->cid = t->client < m->nclient_slots ? m->clients[t->client].id
					      : (struct mc_store_uuid){0, 0};
}

void mc_master_task_push(struct mc_master *m, struct mc_task *t)
{
	struct mc_tasks *k = m->tasks;

	k->active[k->nactive++] = t;
	k->npending++;
	m->met.tasks_active = k->nactive;
	mc_master_wal_task(m, t); /* a task of the master's own: its id only */
}

/* t changed (status, tries, source): the log keeps an operator's task. */
static void task_changed(struct mc_master *m, const struct mc_task *t)
{
	if (mc_master_task_logged(t))
		mc_master_wal_task(m, t);
}

/* A source replayed from the log on a segment not mounted again yet. */
static bool src_waits(const struct mc_master *m, const struct mc_rep *r)
{
	return r->addr != 0 && r->seg < m->nsegs_slots && m->segs[r->seg].state == MC_SEG_WAIT &&
	       m->segs[r->seg].gen == r->gen;
}

void mc_master_task_done_push(struct mc_master *m, struct mc_task *t)
{
	struct mc_tasks *k = m->tasks;
	uint32_t cap = (uint32_t)MC_MIN((uint64_t)m->cfg.max_total_finished_tasks, UINT32_MAX / 2);

	if (cap == 0) {
		mc_master_task_free(t);
		return;
	}
	if (!k->done) {
		k->done_cap = MC_MIN(cap, 1024u);
		k->done = mc_calloc(k->done_cap, sizeof(*k->done));
		if (!k->done) {
			mc_master_task_free(t);
			return;
		}
	}
	if (k->ndone == k->done_cap && k->done_cap < cap) {
		/* grow: unroll the ring into a bigger array */
		uint32_t nc = MC_MIN(cap, k->done_cap * 2);
		struct mc_task **v = mc_calloc(nc, sizeof(*v));

		if (v) {
			for (uint32_t i = 0; i < k->ndone; i++)
				v[i] = k->done[(k->done_head + i) % k->done_cap];
			mc_free(k->done);
			k->done = v;
			k->done_cap = nc;
			k->done_head = 0;
		}
	}
	if (k->ndone == k->done_cap) { /* full: the oldest goes */
		mc_master_task_free(k->done[k->done_head]);
		k->done[k->done_head] = t;
		k->done_head = (k->done_head + 1) % k->done_cap;
		return;
	}
	k->done[(k->done_head + k->ndone++) % k->done_cap] = t;
}

struct mc_task *mc_master_task_find(struct mc_master *m, const struct mc_store_uuid *id,
				    uint32_t *active_idx)
{
	struct mc_tasks *k = m->tasks;

	for (uint32_t i = 0; i < k->nactive; i++) {
		if (mc_master_uuid_same(&k->active[i]->id, id)) {
			if (active_idx)
				*active_idx = i;
			return k->active[i];
		}
	}
	if (active_idx)
		*active_idx = UINT32_MAX;
	for (uint32_t i = 0; i < k->ndone; i++) {
		struct mc_task *t = k->done[(k->done_head + i) % k->done_cap];

		if (mc_master_uuid_same(&t->id, id))
			return t;
	}
	return NULL;
}

/* Any task (an operator's, a repair, a drain's move) holds o. */
bool mc_master_task_any(const struct mc_master *m, const struct mc_obj *o)
{
	const struct mc_tasks *k = m->tasks;

	for (uint32_t i = 0; k && i < k->nactive; i++)
		if (k->active[i]->o == o)
			return true;
	return false;
}

bool mc_master_task_busy(struct mc_master *m, struct mc_obj *o)
{
	struct mc_tasks *k = m->tasks;
	bool busy = false;

	for (uint32_t i = 0; k && i < k->nactive; i++) {
		struct mc_task *t = k->active[i];

		if (t->o != o)
			continue;
		if (!t->repair && !t->job)
			busy = true;
	}
	if (busy)
		return true;
	/* the master's own copies give way: they fail at their report */
	for (uint32_t i = 0; k && i < k->nactive; i++)
		if (k->active[i]->o == o)
			k->active[i]->o = NULL;
	return false;
}

void mc_master_task_obj_gone(struct mc_master *m, struct mc_obj *o)
{
	struct mc_tasks *k = m->tasks;

	for (uint32_t i = 0; i < k->nactive; i++)
		if (k->active[i]->o == o)
			k->active[i]->o = NULL;
	for (uint32_t i = 0; i < k->nfound; i++)
		if (k->found[i] == o)
			k->found[i] = NULL;
}

/* ------------------------------------------------------------------------ */
/* repair queue                                                              */

static void repair_gauge(struct mc_master *m)
{
	struct mc_tasks *k = m->tasks;

	m->met.repair_under_replicated =
		(uint64_t)(k->nrq - k->rq_head) + k->repair_inflight + k->nparked;
}

/* e (owned) ran out of tries: kept until a segment mounts (mc_master_repair_wake). */
static void repair_park(struct mc_master *m, struct mc_repair_ent *e)
{
	struct mc_tasks *k = m->tasks;

	m->met.repair_given_up++;
	if (!mc_master_grow((void **)&k->parked, &k->parked_cap, k->nparked + 1,
			    sizeof(*k->parked))) {
		mc_free(e);
		return;
	}
	mc_warn("repair of key '%.*s' parked after %u tries: no segment to copy it to or from; "
		"it is tried again when a segment mounts",
		(int)MC_MIN(e->key_len, 80), e->key, REPAIR_TRIES);
	e->tries = 0;
	e->not_before = 0;
	k->parked[k->nparked++] = e;
	repair_gauge(m);
}

static void repair_push(struct mc_master *m, uint16_t tenant, const char *key, uint16_t key_len,
			uint64_t size, uint8_t want, uint8_t tries, uint64_t not_before)
{
	struct mc_tasks *k = m->tasks;
	struct mc_repair_ent *e;

	if (k->rq_head > 0 && k->rq_head * 2 >= k->nrq) {
		memmove(k->rq, k->rq + k->rq_head, (k->nrq - k->rq_head) * sizeof(*k->rq));
		k->nrq -= k->rq_head;
		k->rq_head = 0;
	}
	if (!mc_master_grow((void **)&k->rq, &k->rq_cap, k->nrq + 1, sizeof(*k->rq)))
		goto fail;
	e = mc_malloc(sizeof(*e) + key_len);
	if (!e)
		goto fail;
	e->not_before = not_before;
	e->size = size;
	e->tenant = tenant;
	e->want = want;
	e->tries = tries;
	e->key_len = key_len;
	memcpy(e->key, key, key_len);
	if (tries >= REPAIR_TRIES) {
		repair_park(m, e);
		return;
	}
	k->rq[k->nrq++] = e;
	repair_gauge(m);
	return;
fail:
	m->met.repair_given_up++;
	mc_warn("no memory to queue the repair of key '%.*s'", (int)MC_MIN(key_len, 80), key);
}

void mc_master_repair_wake(struct mc_master *m)
{
	struct mc_tasks *k = m->tasks;

	if (!k || k->nparked == 0)
		return;
	for (uint32_t i = 0; i < k->nparked; i++) {
		struct mc_repair_ent *e = k->parked[i];

		repair_push(m, e->tenant, e->key, e->key_len, e->size, e->want, 0, 0);
		mc_free(e);
	}
	k->nparked = 0;
	repair_gauge(m);
}

void mc_master_repair_note(struct mc_master *m, struct mc_obj *o, uint32_t lost)
{
	uint32_t want;

	if (!m->tasks || !m->cfg.enable_replica_repair || (o->flags & MC_OBJ_PROC))
		return; /* an in-flight put is the writer's business */
	want = MC_MIN(mem_kept(m, o) + lost, MC_MASTER_MAX_REPLICAS);
	if (mem_kept(m, o) == 0)
		return; /* no memory copy left to copy from */
	repair_push(m, o->tenant, o->key, o->key_len, mc_obj_size(o), (uint8_t)want, 0, 0);
}

/*
 * Hot keys (spec store.md 1.14, upstream's dynamic replication): the gets
 * of each key within the heat window are counted in a count-min sketch
 * (each get adds one to a counter per row; the smallest of its counters
 * is the estimate, never below the truth), cleared when a window ends.
 * The get that brings a key's estimate to qps x window makes it hot, once
 * per window: observe counts it; enforce queues one more memory copy
 * through the repair queue (its bounds apply), while the key has fewer
 * than --dynamic_replication_max_memory_replicas.  A hotter key that stays
 * hot gets one more copy per window up to the cap.
 */
void mc_master_heat_hit(struct mc_master *m, struct mc_obj *o, uint64_t now)
{
	struct mc_tasks *k = m->tasks;
	uint64_t h;
	uint32_t est = UINT32_MAX, have;

	if (!k || !k->heat)
		return;
	if (now - k->heat_start >= m->cfg.dynamic_replication_window_ms || now < k->heat_start) {
		memset(k->heat, 0, HEAT_ROWS * sizeof(*k->heat));
		k->heat_start = now;
	}
	h = XXH3_64bits_withSeed(o->key, o->key_len, k->heat_seed ^ o->tenant);
	for (uint32_t r = 0; r < HEAT_ROWS; r++) {
		uint16_t *c = &k->heat[r][(h >> (r * 16)) % HEAT_COLS];

		if (*c < UINT16_MAX)
			(*c)++;
		est = MC_MIN(est, (uint32_t)*c);
	}
	if (est != k->heat_need || (o->flags & MC_OBJ_PROC))
		return;
	have = mem_count(m, o);
	if (have == 0 || have >= (uint64_t)m->cfg.dynamic_replication_max_memory_replicas)
		return;
	m->met.dynrep_candidates++;
	if (k->dynrep != DYNREP_ENFORCE || mc_master_task_any(m, o))
		return;
	m->met.dynrep_queued++;
	repair_push(m, o->tenant, o->key, o->key_len, mc_obj_size(o), (uint8_t)(have + 1), 0, 0);
}

/* A segment to copy o to: mounted, reachable, with room, holding none of
 * o's replicas; random start.  NULL when there is none. */
const struct mc_seg *mc_master_repair_target(struct mc_master *m, struct mc_obj *o)
{
	uint32_t n = m->nsegs_slots, start;

	if (n == 0)
		return NULL;
	start = (uint32_t)(mc_alloc_rand(&m->rng) % n);
	for (uint32_t j = 0; j < n; j++) {
		const struct mc_seg *s = &m->segs[(start + j) % n];

		if (s->state != MC_SEG_MOUNTED || s->unreachable ||
		    mc_offset_alloc_free_bytes(s->alloc) < mc_obj_size(o) ||
		    mc_master_rep_on(m, o, s->name, s->name_len))
			continue;
		return s;
	}
	return NULL;
}

/* A live memory replica of o to copy from: reachable, its owner alive;
 * random among them.  false when none. */
static bool pick_source(struct mc_master *m, struct mc_obj *o, struct mc_rep *out)
{
	uint32_t cand[MC_MASTER_MAX_REPLICAS], n = 0;

	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);
		const struct mc_seg *s = &m->segs[r->seg];

		if (!mc_master_rep_mem_live(m, r) || s->unreachable ||
		    s->client >= m->nclient_slots || !m->clients[s->client].alive)
			continue;
		cand[n++] = i;
	}
	if (n == 0)
		return false;
	*out = *mc_master_obj_rep(o, cand[mc_alloc_rand(&m->rng) % n]);
	return true;
}

static void repair_refill(struct mc_master *m, uint64_t now)
{
	struct mc_tasks *k = m->tasks;
	double rate = (double)m->cfg.replica_repair_bytes_per_sec;

	if (now > k->last_refill)
		k->tokens += rate * (double)(now - k->last_refill) / 1000.0;
	k->last_refill = now;
	if (k->tokens > rate)
		k->tokens = rate; /* a burst of one second at most */
}

/* Turn queued repairs into copy tasks within the bounds. */
static void repair_run(struct mc_master *m, uint64_t now)
{
	struct mc_tasks *k = m->tasks;
	double rate = (double)m->cfg.replica_repair_bytes_per_sec;

	repair_refill(m, now);
	while (k->rq_head < k->nrq &&
	       k->repair_inflight < (uint64_t)m->cfg.replica_repair_max_inflight &&
	       k->npending < (uint64_t)m->cfg.max_total_pending_tasks) {
		struct mc_repair_ent *e = k->rq[k->rq_head];
		struct mc_obj *o;
		const struct mc_seg *s;
		struct mc_task *t;
		struct mc_rep src;
		bool found;
		uint16_t tid;

		if (e->not_before > now)
			break;
		if (k->tokens < (double)e->size && k->tokens < rate)
			break; /* the byte budget: wait for the refill */
		/* pop it first: the lookup below may queue repairs (a prune) */
		k->rq_head++;
		tid = e->tenant;
		found = tid < m->ntenants;
		o = found ? mc_master_obj_find_live(m, tid, e->key, e->key_len) : NULL;
		if (!o || (o->flags & MC_OBJ_PROC) || mem_kept(m, o) >= e->want ||
		    mem_kept(m, o) == 0) {
			mc_free(e); /* gone, rewritten, or whole again */
			continue;
		}
		s = mc_master_task_any(m, o) ? NULL : mc_master_repair_target(m, o);
		if (!s || !pick_source(m, o, &src)) {
			/* again in a second (a source that waits for its segment
			 * too); past REPAIR_TRIES parked until a mount */
			repair_push(m, e->tenant, e->key, e->key_len, mc_obj_size(o), e->want,
				    (uint8_t)(e->tries + 1), now + REPAIR_BACKOFF_MS);
			mc_free(e);
			continue;
		}
		t = mc_master_task_new(m, MC_STORE_TASK_REPLICA_COPY, o, 1, now);
		if (!t || !mc_master_task_add_target(t, s->name, s->name_len)) {
			mc_master_task_free(t);
			repair_push(m, e->tenant, e->key, e->key_len, mc_obj_size(o), e->want,
				    (uint8_t)(e->tries + 1), now + REPAIR_BACKOFF_MS);
			mc_free(e);
			break;
		}
		mc_master_task_set_source(m, t, &src);
		t->repair = true;
		t->want = e->want;
		t->tries = e->tries; /* carried in the entry when it comes back */
		mc_master_task_push(m, t);
		k->repair_inflight++;
		k->tokens -= (double)mc_obj_size(o);
		mc_free(e);
	}
	repair_gauge(m);
}

/* ------------------------------------------------------------------------ */
/* finishing                                                                 */

static void dst_release(struct mc_master *m, struct mc_task *t)
{
	for (uint32_t i = 0; i < t->nt; i++) {
		block_release(m, &t->dst[i], t->size);
		t->dst[i].addr = 0;
	}
}

/* t (active, index i) leaves the active list; its counters follow. */
void mc_master_task_active_drop(struct mc_master *m, uint32_t i)
{
	struct mc_tasks *k = m->tasks;
	struct mc_task *t = k->active[i];

	if (t->status == MC_STORE_TASK_PENDING)
		k->npending--;
	else
		k->nprocessing--;
	memmove(k->active + i, k->active + i + 1, (k->nactive - i - 1) * sizeof(*k->active));
	k->nactive--;
	m->met.tasks_active = k->nactive;
}

/* Take t off the active list (index i) into the finished ring. */
static void task_finish(struct mc_master *m, uint32_t i, mc_status st, const char *why,
			uint64_t now)
{
	struct mc_task *t = m->tasks->active[i];

	mc_master_task_active_drop(m, i);
	dst_release(m, t); /* what a commit took is 0 by now */
	t->status = st == MC_OK ? MC_STORE_TASK_SUCCESS : MC_STORE_TASK_FAILED;
	t->updated = now;
	if (st == MC_OK)
		snprintf(t->msg, sizeof(t->msg), "%s", why ? why : "");
	else
		snprintf(t->msg, sizeof(t->msg), "%s (%d %s)", why ? why : "", st,
			 mc_status_name(st) + (strncmp(mc_status_name(st), "ERR_", 4) ? 0 : 4));
	if (st == MC_OK)
		m->met.tasks_succeeded++;
	else
		m->met.tasks_failed++;
	if (t->repair) {
		m->tasks->repair_inflight--;
		if (st == MC_OK) {
			m->met.repair_done++;
			m->met.repair_bytes += mc_master_task_value_bytes(t);
		} else {
			m->met.repair_failed++;
		}
		/* still short (two were lost, or this one failed): once more */
		if (t->o && mem_kept(m, t->o) < t->want) {
			repair_push(m, t->tenant, t->key, t->key_len, t->size, t->want,
				    (uint8_t)(st == MC_OK ? t->tries : t->tries + 1),
				    st == MC_OK ? 0 : now + REPAIR_BACKOFF_MS);
		}
		repair_gauge(m);
	}
	if (t->job)
		mc_master_drain_unit_done(m, t, st);
	t->o = NULL;
	task_changed(m, t);
	mc_master_task_done_push(m, t);
}

/* The report of a success: the blocks become replicas of the object (and
 * a move drops its source).  MC_OK or why not. */
static mc_status task_commit(struct mc_master *m, struct mc_task *t, const char **why)
{
	struct mc_obj *o = t->o;
	uint32_t add = 0, held = 0, n;

	if (!o) {
		*why = "the object was removed during the copy";
		return MC_ERR_OBJECT_NOT_FOUND;
	}
	if ((o->flags & MC_OBJ_PROC) || mc_obj_size(o) != t->size) {
		*why = "the object was rewritten during the copy";
		return MC_ERR_OBJECT_NOT_FOUND;
	}
	for (uint32_t i = 0; i < t->nt; i++) {
		held += t->dst[i].addr != 0;
		add += t->dst[i].addr && mc_master_rep_live(m, &t->dst[i]);
	}
	/* every target block went with its segment (a copy whose targets all
	 * held the object already has none and succeeds) */
	if (add == 0 && (held || t->type == MC_STORE_TASK_REPLICA_MOVE)) {
		*why = "the target segment went during the copy";
		return MC_ERR_SEGMENT_NOT_FOUND;
	}
	n = mc_master_obj_prune(m, o);
	if (n + add > MC_MASTER_MAX_REPLICAS || !mc_master_obj_ext_fit(o, n + add)) {
		*why = "no room for more replicas";
		return MC_ERR_NOMEM;
	}
	for (uint32_t i = 0; i < t->nt; i++) {
		if (!t->dst[i].addr || !mc_master_rep_live(m, &t->dst[i]))
			continue;
		*mc_master_obj_rep(o, n++) = t->dst[i];
		t->dst[i].addr = 0; /* the object's now */
	}
	o->nrep = (uint8_t)n;
	if (t->type == MC_STORE_TASK_REPLICA_MOVE) {
		uint32_t k = 0;

		for (uint32_t i = 0; i < o->nrep; i++) {
			struct mc_rep r = *mc_master_obj_rep(o, i);

			if (r.seg == t->src.seg && r.gen == t->src.gen && r.addr == t->src.addr) {
				block_release(m, &r, mc_obj_size(o));
				continue;
			}
			*mc_master_obj_rep(o, k++) = r;
		}
		o->nrep = (uint8_t)k;
		(void)mc_master_obj_ext_fit(o, k); /* shrinking never fails */
	}
	mc_master_wal_put(m, o);
	*why = "";
	return MC_OK;
}

/* ------------------------------------------------------------------------ */
/* hand-out                                                                  */

/* Allocate t's target blocks: MC_OK, or NO_AVAILABLE_HANDLE or NOMEM
 * (nothing kept). */
static mc_status task_alloc(struct mc_master *m, struct mc_task *t)
{
	uint32_t want = 0;

	for (uint32_t i = 0; i < t->nt; i++) {
		size_t len = strlen(t->tname[i]);

		t->dst[i].addr = 0;
		if (mc_master_rep_on(m, t->o, t->tname[i], len))
			continue; /* a copy is there already */
		want++;
		mc_status st = block_alloc(m, t->tname[i], len, t->size, &t->dst[i]);

		if (st != MC_OK) {
			dst_release(m, t);
			if (st == MC_ERR_NO_AVAILABLE_HANDLE)
				m->need_evict = true; /* NOMEM: eviction frees none of it */
			return st;
		}
	}
	(void)want;
	return MC_OK;
}

static void json_str(struct mc_buf *b, const char *s, size_t len)
{
	mc_buf_append(b, "\"", 1);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[8];

		if (c == '"' || c == '\\') {
			e[0] = '\\';
			e[1] = (char)c;
			mc_buf_append(b, e, 2);
		} else if (c < 0x20 || c >= 0x7f) {
			snprintf(e, sizeof(e), "\\u%04x", c);
			mc_buf_append(b, e, 6);
		} else {
			mc_buf_append(b, (const char *)&c, 1);
		}
	}
	mc_buf_append(b, "\"", 1);
}

/* Upstream's payload: {"key":..,"source":..,"targets":[..]}. */
static void payload_json(const struct mc_master *m, const struct mc_task *t, struct mc_buf *b)
{
	const struct mc_seg *s = &m->segs[t->src.seg];

	mc_buf_append(b, "{\"key\":", 7);
	json_str(b, t->key, t->key_len);
	mc_buf_append(b, ",\"source\":", 10);
	json_str(b, s->name ? s->name : "", s->name ? s->name_len : 0);
	mc_buf_append(b, ",\"targets\":[", 12);
	for (uint32_t i = 0; i < t->nt; i++) {
		if (i)
			mc_buf_append(b, ",", 1);
		json_str(b, t->tname[i], strlen(t->tname[i]));
	}
	mc_buf_append(b, "]}", 2);
}

static mc_status h_fetch(struct mc_master *m, const struct mc_store_msg *q, uint64_t now,
			 struct mc_buf *out)
{
	const struct mc_store_fetch_tasks_req *r = &q->body.fetch_tasks_req;
	struct mc_tasks *k = m->tasks;
	struct mc_store_fetch_tasks_resp resp = {0, NULL};
	struct mc_store_task_assignment *a = NULL;
	struct mc_store_replica *reps = NULL;
	struct mc_buf *pl = NULL;
	uint32_t slot, want = MC_MIN(r->batch, FETCH_MAX), nrep = 0;
	mc_status st;

	/* new work first, so a client that reported a batch gets the next at once */
	repair_run(m, now);
	for (uint32_t j = 0; j < k->njobs; j++)
		mc_master_drain_step(m, k->jobs[j], now);
	if (!mc_master_client_find(m, &r->client_id, &slot) || want == 0 || k->nactive == 0)
		return mc_store_fetch_tasks_response_encode(out, q->hdr.req_id, &resp);
	a = mc_calloc(want, sizeof(*a));
	pl = mc_calloc(want, sizeof(*pl));
	/* a target list per task: at most the task's targets, counted below */
	for (uint32_t i = 0; i < k->nactive; i++)
		nrep += k->active[i]->nt;
	reps = mc_calloc(nrep ? nrep : 1, sizeof(*reps));
	if (!a || !pl || !reps) {
		st = MC_ERR_NOMEM;
		goto out;
	}
	nrep = 0;
	for (uint32_t i = 0; i < k->nactive && resp.n_tasks < want; i++) {
		struct mc_task *t = k->active[i];
		struct mc_store_task_assignment *x;

		if (t->status != MC_STORE_TASK_PENDING || t->client != slot || !t->o)
			continue;
		if (k->nprocessing >= (uint64_t)m->cfg.max_total_processing_tasks)
			break;
		if (!mc_master_rep_mem_live(m, &t->src))
			continue; /* the tick finds it another source or fails it */
		if (task_alloc(m, t) != MC_OK) {
			if (++t->tries > (uint64_t)m->cfg.max_retry_attempts) {
				task_finish(m, i, MC_ERR_NO_AVAILABLE_HANDLE,
					    "no space on the target segment(s)", now);
				i--;
			} else {
				task_changed(m, t); /* the bound survives a restart */
			}
			continue;
		}
		t->status = MC_STORE_TASK_PROCESSING;
		t->updated = now;
		k->npending--;
		k->nprocessing++;
		task_changed(m, t);
		x = &a[resp.n_tasks];
		x->id = t->id;
		x->type = t->type;
		mc_buf_init(&pl[resp.n_tasks]);
		payload_json(m, t, &pl[resp.n_tasks]);
		x->payload = (struct mc_proto_str){.ptr = (const char *)pl[resp.n_tasks].data,
						   .len = (uint32_t)pl[resp.n_tasks].len};
		x->created_at_ms = t->created;
		x->max_retry_attempts = (uint32_t)MC_MIN(m->cfg.max_retry_attempts, UINT32_MAX);
		fill_desc(m, &t->src, t->size, MC_STORE_REPLICA_COMPLETE, &x->source);
		x->targets = &reps[nrep];
		for (uint32_t j = 0; j < t->nt; j++) {
			if (!t->dst[j].addr)
				continue;
			fill_desc(m, &t->dst[j], t->size, MC_STORE_REPLICA_PROCESSING,
				  &reps[nrep++]);
			x->n_targets++;
		}
		resp.n_tasks++;
	}
	resp.tasks = a;
	st = mc_store_fetch_tasks_response_encode(out, q->hdr.req_id, &resp);
out:
	for (uint32_t i = 0; pl && i < resp.n_tasks; i++)
		mc_buf_release(&pl[i]);
	mc_free(pl);
	mc_free(a);
	mc_free(reps);
	return st;
}

/* ------------------------------------------------------------------------ */
/* the RPCs                                                                  */

static struct mc_obj *task_object(struct mc_master *m, const struct mc_proto_str *tenant,
				  const struct mc_proto_str *key, char *err, size_t err_len,
				  mc_status *st)
{
	bool found;
	uint16_t tid;
	struct mc_obj *o;

	*st = MC_OK;
	if (key->len == 0 || key->len > MC_STORE_KEY_MAX) {
		*st = FAILT(MC_ERR_INVALID_PARAMS, "empty or too long key");
		return NULL;
	}
	tid = mc_master_tenant_find(m, tenant->ptr ? tenant->ptr : "", tenant->len, &found);
	o = found ? mc_master_obj_find_live(m, tid, key->ptr, key->len) : NULL;
	if (!o) {
		*st = FAILT(MC_ERR_OBJECT_NOT_FOUND, "key '%.*s' not found",
			    (int)MC_MIN(key->len, 80), key->ptr);
		return NULL;
	}
	if (o->flags & MC_OBJ_PROC) {
		*st = FAILT(MC_ERR_REPLICA_IS_NOT_READY, "key '%.*s' is being written",
			    (int)MC_MIN(key->len, 80), key->ptr);
		return NULL;
	}
	if (mc_master_task_any(m, o)) {
		*st = FAILT(MC_ERR_OBJECT_HAS_REPLICATION_TASK,
			    "key '%.*s' has a copy or move task already", (int)MC_MIN(key->len, 80),
			    key->ptr);
		return NULL;
	}
	if (m->tasks->npending >= (uint64_t)m->cfg.max_total_pending_tasks) {
		*st = FAILT(MC_ERR_TASK_PENDING_LIMIT_EXCEEDED,
			    "%u tasks are pending (max_total_pending_tasks)", m->tasks->npending);
		return NULL;
	}
	return o;
}

static mc_status h_create_copy(struct mc_master *m, const struct mc_store_msg *q, uint64_t now,
			       struct mc_buf *out, char *err, size_t err_len)
{
	const struct mc_store_copy_task_req *r = &q->body.copy_task_req;
	struct mc_store_task_id resp;
	struct mc_task *t;
	struct mc_obj *o;
	struct mc_rep src;
	mc_status st;

	if (r->n_targets == 0)
		return FAILT(MC_ERR_INVALID_PARAMS, "no target segment");
	for (uint32_t i = 0; i < r->n_targets; i++) {
		const struct mc_proto_str *n = &r->targets[i];

		if (n->len == 0)
			return FAILT(MC_ERR_INVALID_PARAMS, "empty target segment name");
		for (uint32_t j = 0; j < i; j++)
			if (r->targets[j].len == n->len &&
			    !memcmp(r->targets[j].ptr, n->ptr, n->len))
				return FAILT(MC_ERR_INVALID_PARAMS, "target '%.*s' named twice",
					     (int)MC_MIN(n->len, 80), n->ptr);
		if (!mc_master_seg_name_allocatable(m, n->ptr, n->len))
			return FAILT(MC_ERR_SEGMENT_NOT_FOUND,
				     "target segment '%.*s' is not mounted or takes no replicas",
				     (int)MC_MIN(n->len, 80), n->ptr);
	}
	o = task_object(m, &r->tenant, &r->key, err, err_len, &st);
	if (!o)
		return st;
	if (!pick_source(m, o, &src))
		return FAILT(MC_ERR_REPLICA_NOT_FOUND, "key '%.*s' has no readable memory replica",
			     (int)MC_MIN(r->key.len, 80), r->key.ptr);
	t = mc_master_task_new(m, MC_STORE_TASK_REPLICA_COPY, o, r->n_targets, now);
	if (!t)
		return FAILT(MC_ERR_NOMEM, "no memory for the task");
	for (uint32_t i = 0; i < r->n_targets; i++) {
		if (!mc_master_task_add_target(t, r->targets[i].ptr, r->targets[i].len)) {
			mc_master_task_free(t);
			return FAILT(MC_ERR_NOMEM, "no memory for the task");
		}
	}
	mc_master_task_set_source(m, t, &src);
	mc_master_task_push(m, t);
	resp.id = t->id;
	return mc_store_create_copy_task_response_encode(out, q->hdr.req_id, &resp);
}

/*
 * ChangeReplica (ours: the paper's change_replica, 4.4; upstream has no
 * such RPC).  replica_num 0 answers how many memory replicas the key has.
 * More than it has: one copy task from a random live replica to segments
 * with room that hold none (as many as there are, up to the difference),
 * executed by the source's owner like any copy task; the answer is the
 * count the key will have once it lands.  Fewer: the replicas past the
 * first replica_num (in list order: the oldest stay) are released at once,
 * which a read lease forbids as it forbids a Remove (OBJECT_HAS_LEASE);
 * the answer is the new count.  Disk replicas are neither counted nor
 * touched.
 */
static mc_status h_change_replica(struct mc_master *m, const struct mc_store_msg *q, uint64_t now,
				  struct mc_buf *out, char *err, size_t err_len)
{
	const struct mc_store_change_replica_req *r = &q->body.change_replica_req;
	struct mc_store_count_resp resp;
	uint32_t want = r->replica_num, have;
	struct mc_obj *o;
	mc_status st;

	if (want > MC_MASTER_MAX_REPLICAS)
		return FAILT(MC_ERR_INVALID_PARAMS, "replica_num %u above %u", want,
			     MC_MASTER_MAX_REPLICAS);
	if (want == 0) {
		bool found;
		uint16_t tid;

		if (r->key.len == 0 || r->key.len > MC_STORE_KEY_MAX)
			return FAILT(MC_ERR_INVALID_PARAMS, "empty or too long key");
		tid = mc_master_tenant_find(m, r->tenant.ptr ? r->tenant.ptr : "", r->tenant.len,
					    &found);
		o = found ? mc_master_obj_find_live(m, tid, r->key.ptr, r->key.len) : NULL;
		if (!o)
			return FAILT(MC_ERR_OBJECT_NOT_FOUND, "key '%.*s' not found",
				     (int)MC_MIN(r->key.len, 80), r->key.ptr);
		if (o->flags & MC_OBJ_PROC)
			return FAILT(MC_ERR_REPLICA_IS_NOT_READY, "key '%.*s' is being written",
				     (int)MC_MIN(r->key.len, 80), r->key.ptr);
		resp.count = mem_count(m, o);
		return mc_store_change_replica_response_encode(out, q->hdr.req_id, &resp);
	}
	o = task_object(m, &r->tenant, &r->key, err, err_len, &st);
	if (!o)
		return st;
	have = mem_count(m, o);
	if (want < have) {
		uint32_t n = 0, kept = 0;

		if (mc_master_leased(m, o, now))
			return FAILT(MC_ERR_OBJECT_HAS_LEASE,
				     "key '%.*s' is leased to a reader for %" PRIu64
				     " ms more: its replicas stay",
				     (int)MC_MIN(r->key.len, 80), r->key.ptr,
				     MC_MAX(o->t, m->lease_floor_ms) - now);
		for (uint32_t i = 0; i < o->nrep; i++) {
			struct mc_rep x = *mc_master_obj_rep(o, i);

			if (mc_master_rep_mem_live(m, &x) && kept++ >= want) {
				block_release(m, &x, mc_obj_size(o));
				continue;
			}
			*mc_master_obj_rep(o, n++) = x;
		}
		o->nrep = (uint8_t)n;
		(void)mc_master_obj_ext_fit(o, n); /* shrinking never fails */
		mc_master_wal_put(m, o);
		have = want;
	} else if (want > have) {
		const char *names[MC_MASTER_MAX_REPLICAS];
		uint32_t len[MC_MASTER_MAX_REPLICAS], k = 0, ns = m->nsegs_slots;
		uint32_t start = ns ? (uint32_t)(mc_alloc_rand(&m->rng) % ns) : 0;
		struct mc_rep src;
		struct mc_task *t;

		if (!pick_source(m, o, &src))
			return FAILT(MC_ERR_REPLICA_NOT_FOUND,
				     "key '%.*s' has no readable memory replica",
				     (int)MC_MIN(r->key.len, 80), r->key.ptr);
		for (uint32_t j = 0; j < ns && have + k < want; j++) {
			const struct mc_seg *s = &m->segs[(start + j) % ns];
			bool dup = false;

			if (s->state != MC_SEG_MOUNTED || s->unreachable ||
			    mc_offset_alloc_free_bytes(s->alloc) < mc_obj_size(o) ||
			    mc_master_rep_on(m, o, s->name, s->name_len))
				continue;
			for (uint32_t i = 0; i < k && !dup; i++)
				dup = len[i] == s->name_len && !memcmp(names[i], s->name, len[i]);
			if (dup)
				continue;
			names[k] = s->name;
			len[k++] = s->name_len;
		}
		if (k) {
			t = mc_master_task_new(m, MC_STORE_TASK_REPLICA_COPY, o, k, now);
			if (!t)
				return FAILT(MC_ERR_NOMEM, "no memory for the task");
			for (uint32_t i = 0; i < k; i++) {
				if (!mc_master_task_add_target(t, names[i], len[i])) {
					mc_master_task_free(t);
					return FAILT(MC_ERR_NOMEM, "no memory for the task");
				}
			}
			mc_master_task_set_source(m, t, &src);
			mc_master_task_push(m, t);
		}
		have += k;
	}
	resp.count = have;
	return mc_store_change_replica_response_encode(out, q->hdr.req_id, &resp);
}

static mc_status h_create_move(struct mc_master *m, const struct mc_store_msg *q, uint64_t now,
			       struct mc_buf *out, char *err, size_t err_len)
{
	const struct mc_store_move_task_req *r = &q->body.move_task_req;
	struct mc_store_task_id resp;
	struct mc_task *t;
	struct mc_obj *o;
	struct mc_rep *src;
	const struct mc_seg *ss;
	mc_status st;

	if (r->source.len == 0 || r->target.len == 0)
		return FAILT(MC_ERR_INVALID_PARAMS, "empty source or target segment name");
	if (r->source.len == r->target.len && !memcmp(r->source.ptr, r->target.ptr, r->source.len))
		return FAILT(MC_ERR_INVALID_PARAMS, "source and target are the same segment");
	if (!mc_master_seg_name_allocatable(m, r->target.ptr, r->target.len))
		return FAILT(MC_ERR_SEGMENT_NOT_FOUND,
			     "target segment '%.*s' is not mounted or takes no replicas",
			     (int)MC_MIN(r->target.len, 80), r->target.ptr);
	o = task_object(m, &r->tenant, &r->key, err, err_len, &st);
	if (!o)
		return st;
	src = mc_master_rep_on(m, o, r->source.ptr, r->source.len);
	if (!src)
		return FAILT(MC_ERR_REPLICA_NOT_FOUND,
			     "key '%.*s' has no replica on segment '%.*s'",
			     (int)MC_MIN(r->key.len, 80), r->key.ptr,
			     (int)MC_MIN(r->source.len, 80), r->source.ptr);
	if (mc_master_rep_on(m, o, r->target.ptr, r->target.len))
		return FAILT(MC_ERR_REPLICA_ALREADY_EXISTS,
			     "key '%.*s' has a replica on segment '%.*s' already",
			     (int)MC_MIN(r->key.len, 80), r->key.ptr,
			     (int)MC_MIN(r->target.len, 80), r->target.ptr);
	ss = &m->segs[src->seg];
	if (ss->unreachable || ss->client >= m->nclient_slots || !m->clients[ss->client].alive)
		return FAILT(MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS,
			     "the owner of segment '%.*s' is not reachable",
			     (int)MC_MIN(r->source.len, 80), r->source.ptr);
	t = mc_master_task_new(m, MC_STORE_TASK_REPLICA_MOVE, o, 1, now);
	if (!t || !mc_master_task_add_target(t, r->target.ptr, r->target.len)) {
		mc_master_task_free(t);
		return FAILT(MC_ERR_NOMEM, "no memory for the task");
	}
	mc_master_task_set_source(m, t, src);
	mc_master_task_push(m, t);
	resp.id = t->id;
	return mc_store_create_move_task_response_encode(out, q->hdr.req_id, &resp);
}

static mc_status h_query(struct mc_master *m, const struct mc_store_msg *q, struct mc_buf *out,
			 char *err, size_t err_len)
{
	const struct mc_store_uuid *id = &q->body.task_id.id;
	struct mc_task *t = mc_master_task_find(m, id, NULL);
	struct mc_store_task_info info;

	if (!t)
		return FAILT(MC_ERR_TASK_NOT_FOUND, "no task %" PRIu64 "-%" PRIu64, id->first,
			     id->second);
	memset(&info, 0, sizeof(info));
	info.id = t->id;
	info.type = t->type;
	info.status = t->status;
	info.created_at_ms = t->created;
	info.updated_at_ms = t->updated;
	info.assigned_client = t->cid;
	info.message = mc_proto_str_c(t->msg);
	return mc_store_query_task_response_encode(out, q->hdr.req_id, &info);
}

static mc_status h_done(struct mc_master *m, const struct mc_store_msg *q, uint64_t now,
			struct mc_buf *out, char *err, size_t err_len)
{
	const struct mc_store_task_done_req *r = &q->body.task_done_req;
	uint32_t i, slot;
	struct mc_task *t = mc_master_task_find(m, &r->task_id, &i);
	const char *why = NULL;
	char buf[TASK_MSG];
	mc_status st;

	if (!t || i == UINT32_MAX) {
		if (t) /* finished already (timed out): nothing to do */
			return FAILT(MC_ERR_TASK_NOT_FOUND,
				     "task %" PRIu64 "-%" PRIu64 " is finished already",
				     r->task_id.first, r->task_id.second);
		return FAILT(MC_ERR_TASK_NOT_FOUND, "no task %" PRIu64 "-%" PRIu64,
			     r->task_id.first, r->task_id.second);
	}
	if (!mc_master_client_find(m, &r->client_id, &slot) || slot != t->client)
		return FAILT(MC_ERR_ILLEGAL_CLIENT,
			     "task %" PRIu64 "-%" PRIu64 " was not handed to this client",
			     t->id.first, t->id.second);
	if (t->status != MC_STORE_TASK_PROCESSING)
		return FAILT(MC_ERR_INVALID_PARAMS,
			     "task %" PRIu64 "-%" PRIu64 " was not handed out", t->id.first,
			     t->id.second);
	if (r->status == MC_OK) {
		st = task_commit(m, t, &why);
		if (st == MC_OK && t->job)
			m->met.drain_migrated_bytes += mc_master_task_value_bytes(t);
	} else {
		snprintf(buf, sizeof(buf), "the client failed: %.*s",
			 (int)MC_MIN(r->message.len, 100), r->message.ptr ? r->message.ptr : "");
		why = buf;
		st = r->status < 0 ? (mc_status)r->status : MC_ERR_INTERNAL;
	}
	task_finish(m, i, st, why, now);
	return mc_store_mark_task_to_complete_response_encode(out, q->hdr.req_id, NULL);
}

mc_status mc_master_tasks_handle(struct mc_master *m, const struct mc_store_msg *q, uint64_t now_ms,
				 struct mc_buf *out, char *err, size_t err_len)
{
	switch (q->hdr.type) {
	case MC_STORE_CREATE_COPY_TASK:
		return h_create_copy(m, q, now_ms, out, err, err_len);
	case MC_STORE_CREATE_MOVE_TASK:
		return h_create_move(m, q, now_ms, out, err, err_len);
	case MC_STORE_QUERY_TASK:
		return h_query(m, q, out, err, err_len);
	case MC_STORE_FETCH_TASKS:
		return h_fetch(m, q, now_ms, out);
	case MC_STORE_MARK_TASK_TO_COMPLETE:
		return h_done(m, q, now_ms, out, err, err_len);
	case MC_STORE_CHANGE_REPLICA:
		return h_change_replica(m, q, now_ms, out, err, err_len);
	default:
		return FAILT(MC_ERR_NOT_SUPPORTED, "not a task message");
	}
}

/* ------------------------------------------------------------------------ */
/* tick and lifecycle                                                        */

static void scan_active(struct mc_master *m, uint64_t now)
{
	struct mc_tasks *k = m->tasks;

	for (uint32_t i = 0; i < k->nactive; i++) {
		struct mc_task *t = k->active[i];
		uint64_t age = now > t->updated ? now - t->updated : 0;

		if (t->status == MC_STORE_TASK_PENDING) {
			struct mc_rep src;

			if (!t->o) {
				task_finish(m, i--, MC_ERR_OBJECT_NOT_FOUND,
					    "the object was removed", now);
				continue;
			}
			if (m->cfg.pending_task_timeout_ms &&
			    age >= m->cfg.pending_task_timeout_ms) {
				task_finish(m, i--, MC_ERR_TIMEOUT, "not handed out in time", now);
				continue;
			}
			if (mc_master_rep_mem_live(m, &t->src) &&
			    !m->segs[t->src.seg].unreachable) {
				uint32_t c = m->segs[t->src.seg].client;

				/* restored from the log: its owner mounted it again */
				if (c != t->client && c < m->nclient_slots && m->clients[c].alive) {
					mc_master_task_set_source(m, t, &t->src);
					task_changed(m, t);
				}
				if (t->client < m->nclient_slots && m->clients[t->client].alive)
					continue;
			}
			if (src_waits(m, &t->src))
				continue; /* restored: its segment is not mounted again yet */
			/* its source went: a copy takes another, a move fails */
			if (t->type == MC_STORE_TASK_REPLICA_COPY && pick_source(m, t->o, &src)) {
				mc_master_task_set_source(m, t, &src);
				task_changed(m, t);
				continue;
			}
			task_finish(m, i--, MC_ERR_REPLICA_NOT_FOUND, "the source replica went",
				    now);
		} else if (m->cfg.processing_task_timeout_ms &&
			   age >= m->cfg.processing_task_timeout_ms) {
			task_finish(m, i--, MC_ERR_TIMEOUT, "not reported in time", now);
		} else if (t->client >= m->nclient_slots || !m->clients[t->client].alive) {
			task_finish(m, i--, MC_ERR_CLIENT_NOT_FOUND, "its client expired", now);
		}
	}
}

void mc_master_tasks_tick(struct mc_master *m, uint64_t now_ms)
{
	struct mc_tasks *k = m->tasks;

	if (k->nactive && (now_ms - k->last_scan >= SCAN_MS || now_ms < k->last_scan)) {
		k->last_scan = now_ms;
		scan_active(m, now_ms);
	}
	if (k->rq_head < k->nrq)
		repair_run(m, now_ms);
	for (uint32_t i = 0; i < k->njobs; i++)
		mc_master_drain_step(m, k->jobs[i], now_ms);
}

mc_status mc_master_tasks_init(struct mc_master *m)
{
	const char *mode;
	double need;

	m->tasks = mc_calloc(1, sizeof(*m->tasks));
	if (!m->tasks)
		return MC_ERR_NOMEM;
	m->tasks->id_hi = mc_alloc_rand(&m->rng) | 1;
	mode = m->cfg.dynamic_replication_mode;
	if (!mode || !strcmp(mode, "off"))
		return MC_OK;
	if (!strcmp(mode, "observe"))
		m->tasks->dynrep = DYNREP_OBSERVE;
	else if (!strcmp(mode, "enforce"))
		m->tasks->dynrep = DYNREP_ENFORCE;
	else
		return MC_ERR_INVALID_PARAMS;
	m->cfg.dynamic_replication_mode = NULL; /* borrowed: not kept */
	need = m->cfg.dynamic_replication_qps * (double)m->cfg.dynamic_replication_window_ms /
	       1000.0;
	m->tasks->heat_need = need <= 1		   ? 1
			      : need >= UINT16_MAX ? UINT16_MAX
						   : (uint32_t)ceil(need);
	m->tasks->heat_seed = mc_alloc_rand(&m->rng);
	m->tasks->heat = mc_calloc(HEAT_ROWS, sizeof(*m->tasks->heat));
	return m->tasks->heat ? MC_OK : MC_ERR_NOMEM;
}

void mc_master_tasks_free(struct mc_master *m)
{
	struct mc_tasks *k = m->tasks;

	if (!k)
		return;
	for (uint32_t i = 0; i < k->nactive; i++) {
		dst_release(m, k->active[i]);
		mc_master_task_free(k->active[i]);
	}
	for (uint32_t i = 0; i < k->ndone; i++)
		mc_master_task_free(k->done[(k->done_head + i) % k->done_cap]);
	for (uint32_t i = k->rq_head; i < k->nrq; i++)
		mc_free(k->rq[i]);
	for (uint32_t i = 0; i < k->nparked; i++)
		mc_free(k->parked[i]);
	mc_free(k->parked);
	for (uint32_t i = 0; i < k->njobs; i++)
		mc_master_drain_job_free(k->jobs[i]);
	mc_free(k->heat);
	mc_free(k->jobs);
	mc_free(k->found);
	mc_free(k->active);
	mc_free(k->done);
	mc_free(k->rq);
	mc_free(k);
	m->tasks = NULL;
}

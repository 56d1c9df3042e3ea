/*
 * master/tasks_wal.c - copy and move tasks and drain jobs in the master's
 * write-ahead log and snapshots (issues 14 and 15): a task id or a job id
 * that a client was given answers after a restart or a failover.
 *
 * What is logged (payloads in master/wal_rec.h, version 3):
 *   - an operator's task (CreateCopyTask, CreateMoveTask, ChangeReplica's
 *     copy) as a TASK record at its creation and at every change the
 *     tables would miss: hand-out, a hand-out that found no space (its
 *     tries, so the retry bound holds across a restart), a new source,
 *     the end (status and message);
 *   - a drain job as a JOB record at its creation, at each unit done (its
 *     counters) and at its end;
 *   - a task of the master's own (replica repair, a drain's move) as
 *     TASK_SEQ only: the sequence its id took.  Repairs are rebuilt by the
 *     replay's sweep and a drain's moves by the job's next lap, so they
 *     are not kept; their ids are never handed out again.
 *
 * Replay.  A TASK record replaces what the tables hold of that id: an
 * active task (pending or handed out) comes back PENDING with its tries,
 * its source on the slot of its segment that waits for the remount (the
 * scan keeps it pending until then, then hands it to the segment's owner),
 * and its object found by key (NULL when it went: the scan fails it); a
 * finished one goes to the ring of finished tasks.  The target blocks of a
 * hand-out are not kept: the next hand-out allocates new ones, and a
 * report of the old hand-out is refused (not handed out).  A restored
 * task's clock (updated) restarts at the replay, so its timeouts count
 * from there.  Every record moves the id sequence past its id.  A JOB
 * record does the same for a job; one still running comes back with no
 * lap, no move in flight, and its segments draining again as each is
 * mounted (mc_master_drain_seg_mounted).
 *
 * Threads: the master's (one caller at a time), or a snapshot's child.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "master/snap.h"
#include "master/tasks_int.h"

/* ---- records ---- */

static void task_rec(const struct mc_master *m, const struct mc_task *t, struct mc_walrec *r)
{
	struct mc_walrec_task *w = &r->u.task;

	mc_walrec_clear(r);
	r->type = MC_WALREC_TASK;
	w->id = t->id;
	w->type = t->type;
	w->status = t->status;
	w->tries = t->tries;
	w->tenant.p = t->tenant < m->ntenants ? m->tenants[t->tenant] : "";
	w->tenant.len = t->tenant < m->ntenants ? (uint16_t)m->tenant_lens[t->tenant] : 0;
	w->key.p = t->key;
	w->key.len = t->key_len;
	w->size = t->size;
	if (t->src.addr && t->src.seg < m->nsegs_slots) {
		w->src_seg = m->segs[t->src.seg].id;
		w->src_addr = t->src.addr;
	}
	w->client = t->cid;
	w->created = t->created;
	w->updated = t->updated;
	w->targets.n = (uint16_t)MC_MIN(t->nt, (uint32_t)UINT16_MAX);
	w->targets.v = (const char *const *)t->tname;
	w->msg.p = t->msg;
	w->msg.len = (uint16_t)strnlen(t->msg, sizeof(t->msg));
}

static void job_rec(const struct mc_drain_job *j, struct mc_walrec *r)
{
	struct mc_walrec_job *w = &r->u.job;

	mc_walrec_clear(r);
	r->type = MC_WALREC_JOB;
	w->id = j->id;
	w->status = (uint8_t)j->status;
	w->max_conc = j->max_conc;
	w->created = j->created;
	w->updated = j->updated;
	w->succeeded = j->succeeded;
	w->failed = j->failed;
	w->blocked = j->blocked;
	w->bytes = j->bytes;
	w->segs.n = (uint16_t)MC_MIN(j->nsegs, (uint32_t)UINT16_MAX);
	w->segs.v = (const char *const *)j->segs;
	w->targets.n = (uint16_t)MC_MIN(j->ntargets, (uint32_t)UINT16_MAX);
	w->targets.v = (const char *const *)j->targets;
	w->msg.p = j->msg;
	w->msg.len = (uint16_t)strnlen(j->msg, sizeof(j->msg));
}

static void seq_rec(uint64_t seq, struct mc_walrec *r)
{
	mc_walrec_clear(r);
	r->type = MC_WALREC_TASK_SEQ;
	r->u.seq = seq;
}

void mc_master_wal_task(struct mc_master *m, const struct mc_task *t)
{
	struct mc_walrec r;

	if (!m->wal)
		return;
	if (mc_master_task_logged(t))
		task_rec(m, t, &r);
	else
		seq_rec(t->id.second, &r);
	mc_master_wal_append(m, &r);
}

void mc_master_wal_job(struct mc_master *m, const struct mc_drain_job *j)
{
	struct mc_walrec r;

	if (!m->wal)
		return;
	job_rec(j, &r);
	mc_master_wal_append(m, &r);
}

/* ---- snapshot ---- */

mc_status mc_master_tasks_snap_dump(struct mc_master *m, struct mc_snap_writer *w)
{
	struct mc_tasks *k = m->tasks;
	struct mc_walrec r;
	mc_status st = MC_OK;

	if (!k)
		return MC_OK;
	/* jobs first, in creation order (a task names its job by index) */
	for (uint32_t i = 0; i < k->njobs && st == MC_OK; i++) {
		job_rec(k->jobs[i], &r);
		st = mc_master_snap_add(m, w, &r);
	}
	for (uint32_t i = 0; i < k->ndone && st == MC_OK; i++) {
		const struct mc_task *t = k->done[(k->done_head + i) % k->done_cap];

		if (!mc_master_task_logged(t))
			continue;
		task_rec(m, t, &r);
		st = mc_master_snap_add(m, w, &r);
	}
	for (uint32_t i = 0; i < k->nactive && st == MC_OK; i++) {
		if (!mc_master_task_logged(k->active[i]))
			continue;
		task_rec(m, k->active[i], &r);
		st = mc_master_snap_add(m, w, &r);
	}
	if (st == MC_OK && k->seq) {
		seq_rec(k->seq, &r);
		st = mc_master_snap_add(m, w, &r);
	}
	return st;
}

/* ---- replay ---- */

static void seq_past(struct mc_master *m, uint64_t seq)
{
	if (m->tasks->seq < seq)
		m->tasks->seq = seq;
}

/* Copy the names of l into v (n entries, NULL-initialised); false
 * without memory (what was copied stays for the caller to free). */
static bool names_dup(const struct mc_walrec_names *l, char **v)
{
	const uint8_t *pos = l->raw;
	struct mc_walrec_str s;

	for (uint32_t i = 0; i < l->n; i++) {
		if (!mc_walrec_names_next(l, &pos, &s))
			return false; /* decode checked the list: cannot happen */
		v[i] = mc_strndup(s.p, s.len);
		if (!v[i])
			return false;
	}
	return true;
}

static mc_status replay_task(struct mc_master *m, const struct mc_walrec_task *in, uint64_t now)
{
	struct mc_tasks *k = m->tasks;
	bool active = in->status == MC_STORE_TASK_PENDING || in->status == MC_STORE_TASK_PROCESSING;
	uint32_t idx, slot;
	struct mc_task *t = mc_master_task_find(m, &in->id, &idx);
	uint16_t tid;
	mc_status st;

	seq_past(m, in->id.second);
	if (t && idx != UINT32_MAX) {
		mc_master_task_active_drop(m, idx); /* made again from the record below */
		mc_master_task_free(t);
	} else if (t) {
		/* finished already: a finished task does not change */
		return MC_OK;
	}
	st = mc_master_tenant_intern(m, in->tenant.p, in->tenant.len, &tid);
	if (st != MC_OK)
		return st;
	if (active && !mc_master_grow((void **)&k->active, &k->active_cap, k->nactive + 1,
				      sizeof(*k->active)))
		return MC_ERR_NOMEM;
	t = mc_calloc(1, sizeof(*t));
	if (!t)
		return MC_ERR_NOMEM;
	t->key = mc_malloc(in->key.len);
	t->tname = mc_calloc(in->targets.n, sizeof(char *));
	t->dst = mc_calloc(in->targets.n, sizeof(struct mc_rep));
	if (!t->key || !t->tname || !t->dst) {
		mc_master_task_free(t);
		return MC_ERR_NOMEM;
	}
	t->nt = in->targets.n;
	if (!names_dup(&in->targets, t->tname)) {
		mc_master_task_free(t);
		return MC_ERR_NOMEM;
	}
	memcpy(t->key, in->key.p, in->key.len);
	t->key_len = in->key.len;
	t->tenant = tid;
	t->id = in->id;
	t->type = in->type;
	t->tries = in->tries;
	t->size = in->size;
	t->created = in->created;
	t->cid = in->client;
	t->client = MC_MASTER_NO_CLIENT;
	snprintf(t->msg, sizeof(t->msg), "%.*s", (int)MC_MIN(in->msg.len, TASK_MSG - 1), in->msg.p);
	if (!active) {
		t->status = in->status;
		t->updated = in->updated;
		mc_master_task_done_push(m, t);
		return MC_OK;
	}
	/* pending or handed out: pending again, its clock from now */
	t->status = MC_STORE_TASK_PENDING;
	t->updated = now;
	slot = in->src_addr ? mc_master_wal_wait_find(m, &in->src_seg) : UINT32_MAX;
	if (slot != UINT32_MAX)
		t->src = (struct mc_rep){in->src_addr, slot, m->segs[slot].gen};
	t->o = mc_master_obj_find(m, tid, in->key.p, in->key.len);
	if (t->o && ((t->o->flags & MC_OBJ_PROC) || mc_obj_size(t->o) != t->size))
		t->o = NULL; /* another object of that key: the scan fails the task */
	k->active[k->nactive++] = t;
	k->npending++;
	m->met.tasks_active = k->nactive;
	return MC_OK;
}

static mc_status replay_job(struct mc_master *m, const struct mc_walrec_job *in, uint64_t now)
{
	struct mc_tasks *k = m->tasks;
	struct mc_drain_job *j = mc_master_drain_job_find(m, &in->id);

	seq_past(m, in->id.second);
	if (!j) {
		if (!mc_master_grow((void **)&k->jobs, &k->jobs_cap, k->njobs + 1,
				    sizeof(*k->jobs)))
			return MC_ERR_NOMEM;
		j = mc_calloc(1, sizeof(*j));
		if (!j)
			return MC_ERR_NOMEM;
		j->segs = mc_calloc(in->segs.n, sizeof(char *));
		j->targets = mc_calloc(in->targets.n ? in->targets.n : 1, sizeof(char *));
		if (!j->segs || !j->targets) {
			mc_master_drain_job_free(j);
			return MC_ERR_NOMEM;
		}
		j->nsegs = in->segs.n;
		j->ntargets = in->targets.n;
		if (!names_dup(&in->segs, j->segs) || !names_dup(&in->targets, j->targets)) {
			mc_master_drain_job_free(j);
			return MC_ERR_NOMEM;
		}
		j->id = in->id;
		j->created = in->created;
		j->max_conc = in->max_conc ? in->max_conc : 1;
		k->jobs[k->njobs++] = j;
	}
	j->status = in->status;
	j->succeeded = in->succeeded;
	j->failed = in->failed;
	j->blocked = in->blocked;
	j->bytes = in->bytes;
	j->updated = in->status <= MC_JOB_RUNNING ? now : in->updated;
	snprintf(j->msg, sizeof(j->msg), "%.*s", (int)MC_MIN(in->msg.len, TASK_MSG - 1), in->msg.p);
	/* running: a fresh start (no lap, no move in flight) once its
	 * segments are back; a replay never has a lap open */
	j->active = 0;
	j->laps = 0;
	j->skipped = false;
	j->next_lap = 0;
	return MC_OK;
}

mc_status mc_master_tasks_replay(struct mc_master *m, const struct mc_walrec *r, uint64_t now_ms)
{
	if (!m->tasks)
		return MC_OK;
	switch (r->type) {
	case MC_WALREC_TASK:
		return replay_task(m, &r->u.task, now_ms);
	case MC_WALREC_JOB:
		return replay_job(m, &r->u.job, now_ms);
	case MC_WALREC_TASK_SEQ:
		seq_past(m, r->u.seq);
		return MC_OK;
	default:
		return MC_ERR_INTERNAL;
	}
}

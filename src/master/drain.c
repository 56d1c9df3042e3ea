/*
 * master/drain.c - drain jobs (spec store.md 1.14, 7.1; issue 15 part 6),
 * moved out of master/tasks.c, whose header tells how tasks work.
 *
 * A drain job (mc_master_drain_create, from the admin API in
 * server_drain.c) takes its segments out of placement (state DRAINING); a
 * cursor over the object table finds each object with a replica there and
 * each becomes a move task (tasks.c), at most max_concurrency at once, to
 * the job's target segments or any that take new replicas.  Laps repeat
 * for what a lap passed over (a busy object); when nothing is left the
 * segments are unmounted and the job ends.  mc_master_drain_step runs at
 * the tick and at each FetchTasks; mc_master_drain_unit_done counts a
 * finished move.
 * Jobs are logged at every change (tasks_wal.c) and never forgotten.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "master/master_int.h"
#include "master/tasks_int.h"

#define DRAIN_STEP_SLOTS   256	/* table slots per drain cursor step */
#define DRAIN_STEPS_TICK   64	/* cursor steps per tick per job at most */
#define DRAIN_LAPS	   8	/* table laps a job makes for what it passed over */
#define DRAIN_LAP_MS	   1000 /* between such laps */
#define DRAIN_DEFAULT_CONC 4

static struct mc_drain_job *job_of(struct mc_master *m, const struct mc_task *t)
{
	return t->job && t->job <= m->tasks->njobs ? m->tasks->jobs[t->job - 1] : NULL;
}

void mc_master_drain_unit_done(struct mc_master *m, struct mc_task *t, mc_status st)
{
	struct mc_drain_job *j = job_of(m, t);

	if (!j)
		return;
	j->active--;
	if (st == MC_OK) {
		j->succeeded++;
		j->bytes += mc_master_task_value_bytes(t);
	} else if (st == MC_ERR_NO_AVAILABLE_HANDLE) {
		j->blocked++;
	} else {
		j->failed++;
	}
	mc_master_wal_job(m, j);
}

static bool job_drains(const struct mc_drain_job *j, const struct mc_seg *s)
{
	for (uint32_t i = 0; i < j->nsegs; i++)
		if (mc_master_seg_named(s, j->segs[i], strlen(j->segs[i])))
			return true;
	return false;
}

/* The replica of o on a segment j drains, or NULL. */
static struct mc_rep *job_rep(const struct mc_master *m, const struct mc_drain_job *j,
			      struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_mem_live(m, r) && m->segs[r->seg].state == MC_SEG_DRAINING &&
		    job_drains(j, &m->segs[r->seg]))
			return r;
	}
	return NULL;
}

static bool drain_collect(void *arg, struct mc_obj *o)
{
	struct mc_master *m = arg;
	struct mc_tasks *k = m->tasks;
	struct mc_drain_job *j = k->scan_job;

	if (!job_rep(m, j, o))
		return true;
	if (o->flags & MC_OBJ_PROC) {
		j->skipped = true; /* a put placed before the drain: moved once it ends */
		return true;
	}
	if (!mc_master_grow((void **)&k->found, &k->found_cap, k->nfound + 1, sizeof(*k->found))) {
		j->skipped = true;
		return true;
	}
	k->found[k->nfound++] = o;
	return true;
}

/* A target for o's move: the job's targets in turn, else any segment
 * that takes replicas; one with room and no replica of o. */
static const char *job_target(struct mc_master *m, struct mc_drain_job *j, struct mc_obj *o)
{
	for (uint32_t n = 0; n < j->ntargets; n++) {
		const char *name = j->targets[j->next_target++ % j->ntargets];
		size_t len = strlen(name);

		if (mc_master_rep_on(m, o, name, len))
			continue;
		for (uint32_t i = 0; i < m->nsegs_slots; i++) {
			const struct mc_seg *s = &m->segs[i];

			if (s->state == MC_SEG_MOUNTED && !s->unreachable &&
			    mc_master_seg_named(s, name, len) &&
			    mc_offset_alloc_free_bytes(s->alloc) >= mc_obj_size(o))
				return name;
		}
	}
	if (j->ntargets)
		return NULL;
	{
		const struct mc_seg *s = mc_master_repair_target(m, o);

		return s ? s->name : NULL;
	}
}

static void job_segs_state(struct mc_master *m, struct mc_drain_job *j, int from, int to)
{
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		struct mc_seg *s = &m->segs[i];

		if (s->state == from && job_drains(j, s))
			s->state = to;
	}
	m->targets_dirty = true;
}

static void job_end(struct mc_master *m, struct mc_drain_job *j, int status, uint64_t now)
{
	for (uint32_t u = j->uhead; u < j->nunits; u++)
		mc_free(j->units[u]);
	j->uhead = j->nunits = 0;
	if (j->cur.unit)
		mc_master_cursor_close(m, &j->cur);
	j->cur.unit = 0;
	j->status = status;
	j->updated = now;
	if (status == MC_JOB_SUCCEEDED) {
		for (uint32_t i = 0; i < m->nsegs_slots; i++)
			if (m->segs[i].state == MC_SEG_DRAINING && job_drains(j, &m->segs[i]))
				mc_master_seg_unmount(m, i);
		snprintf(j->msg, sizeof(j->msg), "drained and unmounted");
	} else {
		job_segs_state(m, j, MC_SEG_DRAINING, MC_SEG_MOUNTED);
	}
	mc_master_wal_job(m, j);
}

/*
 * A lap found nothing more to move: the job ends, honestly.  A segment of
 * the job that waits for its remount (the master restarted) holds the job
 * RUNNING: it drains once back (mc_master_drain_seg_mounted starts a new
 * lap).  A segment that went before it was drained (unmounted, its
 * client expired, or it never came back after a restart) fails the job,
 * naming it: its objects were not moved, and those it alone held are
 * lost.  true when the job ended.
 */
static bool job_conclude(struct mc_master *m, struct mc_drain_job *j, uint64_t now)
{
	const char *wait = NULL, *gone = NULL;
	uint32_t ngone = 0;

	for (uint32_t n = 0; n < j->nsegs; n++) {
		size_t len = strlen(j->segs[n]);
		bool draining = false, waiting = false;

		for (uint32_t i = 0; i < m->nsegs_slots; i++) {
			const struct mc_seg *s = &m->segs[i];

			if (!mc_master_seg_named(s, j->segs[n], len))
				continue;
			draining |= s->state == MC_SEG_DRAINING;
			waiting |= s->state == MC_SEG_WAIT;
		}
		if (waiting && !draining && !wait)
			wait = j->segs[n];
		if (!waiting && !draining) {
			gone = gone ? gone : j->segs[n];
			ngone++;
		}
	}
	if (wait && !gone) {
		if (strncmp(j->msg, "waiting", 7) != 0)
			mc_info("drain job %" PRIu64 "-%" PRIu64
				": waiting for segment '%s' to be mounted again",
				j->id.first, j->id.second, wait);
		snprintf(j->msg, sizeof(j->msg), "waiting for segment '%.80s' to be mounted again",
			 wait);
		return false;
	}
	if (gone) {
		snprintf(j->msg, sizeof(j->msg),
			 "%u segment(s) went before drained ('%.40s' first): its objects "
			 "were not moved; %" PRIu64 " unit(s) moved",
			 ngone, gone, j->succeeded);
		mc_warn("drain job %" PRIu64 "-%" PRIu64 " failed: %s", j->id.first, j->id.second,
			j->msg);
		job_end(m, j, MC_JOB_FAILED, now);
		return true;
	}
	job_end(m, j, MC_JOB_SUCCEEDED, now);
	return true;
}

void mc_master_drain_seg_mounted(struct mc_master *m, uint32_t slot)
{
	struct mc_tasks *k = m->tasks;
	struct mc_seg *s = &m->segs[slot];

	for (uint32_t i = 0; k && i < k->njobs; i++) {
		struct mc_drain_job *j = k->jobs[i];

		if (j->status > MC_JOB_RUNNING || s->state != MC_SEG_MOUNTED || !job_drains(j, s))
			continue;
		mc_info("drain job %" PRIu64 "-%" PRIu64 ": segment %s mounted again: it drains",
			j->id.first, j->id.second, s->name);
		s->state = MC_SEG_DRAINING;
		m->targets_dirty = true;
		j->msg[0] = '\0';
		if (!j->cur.unit) {
			j->laps = 0; /* a fresh lap finds what it holds */
			j->skipped = false;
			j->next_lap = 0;
		} else {
			j->skipped = true; /* the lap running may have passed it: one more */
		}
	}
}

/* Queue the units (keys) of one cursor step's objects. */
static void job_collect(struct mc_master *m, struct mc_drain_job *j)
{
	struct mc_tasks *k = m->tasks;

	k->nfound = 0;
	k->scan_job = j;
	mc_master_cursor_step(m, &j->cur, DRAIN_STEP_SLOTS, drain_collect, m);
	if (j->uhead == j->nunits)
		j->uhead = j->nunits = 0;
	for (uint32_t i = 0; i < k->nfound; i++) {
		struct mc_obj *o = k->found[i];
		struct mc_repair_ent *u;

		if (!o)
			continue;
		if (!mc_master_grow((void **)&j->units, &j->units_cap, j->nunits + 1,
				    sizeof(*j->units)) ||
		    !(u = mc_malloc(sizeof(*u) + o->key_len))) {
			j->skipped = true; /* the next lap comes back for it */
			continue;
		}
		memset(u, 0, sizeof(*u));
		u->tenant = o->tenant;
		u->key_len = o->key_len;
		memcpy(u->key, o->key, o->key_len);
		j->units[j->nunits++] = u;
	}
	k->nfound = 0;
}

/* Start the move of one queued unit, if it still has a replica to move. */
static void job_start(struct mc_master *m, struct mc_drain_job *j, struct mc_repair_ent *u,
		      uint64_t now)
{
	struct mc_tasks *k = m->tasks;
	struct mc_obj *o = mc_master_obj_find_live(m, u->tenant, u->key, u->key_len);
	struct mc_rep *r;
	const char *target;
	struct mc_task *t;

	if (!o || (o->flags & MC_OBJ_PROC) || !(r = job_rep(m, j, o)))
		return; /* gone, rewritten or moved off meanwhile */
	if (mc_master_task_any(m, o) || k->npending >= (uint64_t)m->cfg.max_total_pending_tasks) {
		j->skipped = true; /* the next lap comes back for it */
		return;
	}
	target = job_target(m, j, o);
	if (!target) {
		j->blocked++;
		j->skipped = true;
		return;
	}
	t = mc_master_task_new(m, MC_STORE_TASK_REPLICA_MOVE, o, 1, now);
	if (!t || !mc_master_task_add_target(t, target, strlen(target))) {
		mc_master_task_free(t);
		j->skipped = true;
		return;
	}
	mc_master_task_set_source(m, t, r);
	for (uint32_t x = 0; x < k->njobs; x++)
		if (k->jobs[x] == j)
			t->job = x + 1;
	mc_master_task_push(m, t);
	j->active++;
}

/*
 * A job's progress at a tick: start queued units while fewer than
 * max_concurrency run; with the queue empty, the next cursor step fills
 * it; at the end of a lap (all its moves finished) either nothing was
 * passed over (busy objects, puts in flight, no room on a target) and the
 * job succeeds, or another lap comes back for what was, DRAIN_LAP_MS
 * after the last one began, DRAIN_LAPS laps at most.
 */
void mc_master_drain_step(struct mc_master *m, struct mc_drain_job *j, uint64_t now)
{
	if (j->status == MC_JOB_CREATED || j->status == MC_JOB_PLANNING)
		j->status = MC_JOB_RUNNING;
	if (j->status != MC_JOB_RUNNING)
		return;
	for (int steps = 0; steps < DRAIN_STEPS_TICK;) {
		while (j->active < j->max_conc && j->uhead < j->nunits) {
			struct mc_repair_ent *u = j->units[j->uhead++];

			job_start(m, j, u, now);
			mc_free(u);
		}
		if (j->active >= j->max_conc)
			break;
		if (j->cur.unit) {
			if (mc_master_cursor_done(&j->cur)) {
				mc_master_cursor_close(m, &j->cur);
				j->cur.unit = 0;
			} else {
				job_collect(m, j);
				steps++;
			}
			continue;
		}
		if (j->active)
			break; /* the lap's moves finish first */
		if (j->laps > 0 && !j->skipped) {
			if (job_conclude(m, j, now)) /* a lap found nothing to move */
				return;
			break; /* a segment waits for its remount */
		}
		if (j->laps >= DRAIN_LAPS) {
			snprintf(j->msg, sizeof(j->msg),
				 "%" PRIu64 " unit(s) blocked (no space on a target), %" PRIu64
				 " failed, after %u laps: the segments stay mounted",
				 j->blocked, j->failed, DRAIN_LAPS);
			job_end(m, j, MC_JOB_FAILED, now);
			return;
		}
		if (j->laps > 0 && now < j->next_lap)
			break; /* give what was busy or full a moment */
		j->laps++;
		j->next_lap = now + DRAIN_LAP_MS;
		j->skipped = false;
		if (j->laps > 1)
			j->blocked = 0; /* what stays blocked is counted again */
		mc_master_cursor_open(m, &j->cur);
	}
	j->updated = now;
}

mc_status mc_master_drain_create(struct mc_master *m, const char *const *segments,
				 uint32_t nsegments, const char *const *targets, uint32_t ntargets,
				 uint32_t max_concurrency, uint64_t now_ms,
				 struct mc_store_uuid *id_out, char *err, size_t err_len)
{
	struct mc_tasks *k = m->tasks;
	struct mc_drain_job *j;

	if (nsegments == 0)
		return FAILT(MC_ERR_INVALID_PARAMS, "no segments to drain");
	for (uint32_t i = 0; i < nsegments; i++) {
		bool mounted = false;

		for (uint32_t s = 0; s < m->nsegs_slots; s++)
			if (m->segs[s].state == MC_SEG_MOUNTED &&
			    mc_master_seg_named(&m->segs[s], segments[i], strlen(segments[i])))
				mounted = true;
		if (!mounted)
			return FAILT(MC_ERR_SEGMENT_NOT_FOUND,
				     "segment '%.80s' is not mounted (or drains already)",
				     segments[i]);
	}
	for (uint32_t i = 0; i < ntargets; i++) {
		for (uint32_t s = 0; s < nsegments; s++)
			if (strcmp(targets[i], segments[s]) == 0)
				return FAILT(MC_ERR_INVALID_PARAMS,
					     "segment '%.80s' is both drained and a target",
					     targets[i]);
		if (!mc_master_seg_name_allocatable(m, targets[i], strlen(targets[i])))
			return FAILT(MC_ERR_SEGMENT_NOT_FOUND,
				     "target segment '%.80s' is not mounted", targets[i]);
	}
	if (!mc_master_grow((void **)&k->jobs, &k->jobs_cap, k->njobs + 1, sizeof(*k->jobs)))
		return FAILT(MC_ERR_NOMEM, "no memory for the job");
	j = mc_calloc(1, sizeof(*j));
	if (!j)
		return FAILT(MC_ERR_NOMEM, "no memory for the job");
	j->segs = mc_calloc(nsegments, sizeof(char *));
	j->targets = mc_calloc(ntargets ? ntargets : 1, sizeof(char *));
	if (!j->segs || !j->targets)
		goto nomem;
	for (uint32_t i = 0; i < nsegments; i++)
		if (!(j->segs[j->nsegs++] = mc_strdup(segments[i])))
			goto nomem;
	for (uint32_t i = 0; i < ntargets; i++)
		if (!(j->targets[j->ntargets++] = mc_strdup(targets[i])))
			goto nomem;
	j->id.first = k->id_hi ^ 0x4a4f42ull;
	j->id.second = ++k->seq;
	j->status = MC_JOB_CREATED;
	j->created = j->updated = now_ms;
	j->max_conc = max_concurrency ? max_concurrency : DRAIN_DEFAULT_CONC;
	k->jobs[k->njobs++] = j;
	job_segs_state(m, j, MC_SEG_MOUNTED, MC_SEG_DRAINING);
	mc_master_wal_job(m, j);
	mc_info("drain job %" PRIu64 "-%" PRIu64 ": %u segment(s), %u target(s), concurrency %u",
		j->id.first, j->id.second, nsegments, ntargets, j->max_conc);
	*id_out = j->id;
	return MC_OK;
nomem:
	for (uint32_t i = 0; i < j->nsegs; i++)
		mc_free(j->segs[i]);
	for (uint32_t i = 0; i < j->ntargets; i++)
		mc_free(j->targets[i]);
	mc_free(j->segs);
	mc_free(j->targets);
	mc_free(j);
	return FAILT(MC_ERR_NOMEM, "no memory for the job");
}

void mc_master_drain_job_free(struct mc_drain_job *j)
{
	for (uint32_t s = 0; s < j->nsegs; s++)
		mc_free(j->segs[s]);
	for (uint32_t s = 0; s < j->ntargets; s++)
		mc_free(j->targets[s]);
	mc_free(j->segs);
	mc_free(j->targets);
	for (uint32_t u = j->uhead; u < j->nunits; u++)
		mc_free(j->units[u]);
	mc_free(j->units);
	mc_free(j);
}

struct mc_drain_job *mc_master_drain_job_find(struct mc_master *m, const struct mc_store_uuid *id)
{
	for (uint32_t i = 0; i < m->tasks->njobs; i++)
		if (mc_master_uuid_same(&m->tasks->jobs[i]->id, id))
			return m->tasks->jobs[i];
	return NULL;
}

static void job_info(const struct mc_drain_job *j, struct mc_master_drain_info *out)
{
	memset(out, 0, sizeof(*out));
	out->id = j->id;
	out->status = j->status;
	out->created_at_ms = j->created;
	out->updated_at_ms = j->updated;
	out->succeeded_units = j->succeeded;
	out->failed_units = j->failed;
	out->blocked_units = j->blocked;
	out->active_units = j->active;
	out->migrated_bytes = j->bytes;
	out->nsegments = j->nsegs;
	out->segments = (const char *const *)j->segs;
	out->message = j->msg;
}

mc_status mc_master_drain_query(struct mc_master *m, const struct mc_store_uuid *id,
				struct mc_master_drain_info *out)
{
	struct mc_drain_job *j = mc_master_drain_job_find(m, id);

	if (!j)
		return MC_ERR_JOB_NOT_FOUND;
	job_info(j, out);
	return MC_OK;
}

mc_status mc_master_drain_cancel(struct mc_master *m, const struct mc_store_uuid *id,
				 uint64_t now_ms, struct mc_master_drain_info *out)
{
	struct mc_drain_job *j = mc_master_drain_job_find(m, id);

	if (!j)
		return MC_ERR_JOB_NOT_FOUND;
	if (j->status == MC_JOB_CREATED || j->status == MC_JOB_PLANNING ||
	    j->status == MC_JOB_RUNNING) {
		snprintf(j->msg, sizeof(j->msg), "canceled");
		job_end(m, j, MC_JOB_CANCELED, now_ms);
	}
	job_info(j, out);
	return MC_OK;
}

const char *mc_master_job_status_name(int status)
{
	static const char *const names[] = {"CREATED",	 "PLANNING", "RUNNING",
					    "SUCCEEDED", "FAILED",   "CANCELED"};

	return status >= 0 && status < (int)MC_ARRAY_SIZE(names) ? names[status] : "UNKNOWN";
}

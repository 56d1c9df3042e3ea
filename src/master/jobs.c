/*
 * master/jobs.c - the requests that visit every object, run as jobs in
 * slices: GetReplicaListByRegex, RemoveByRegex and RemoveAll (spec store.md
 * 1.7, 1.9).  master.c's handlers start them (mc_master_job_new,
 * mc_master_remove_all_begin); mc_master_job_run runs their slices.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "master/handler_int.h"
#include "master/key_regex.h"
#include "master/master_int.h"

/*
 * GetReplicaListByRegex and RemoveByRegex look at every key of a tenant, so
 * they run as jobs (struct mc_master_job) in steps: the daemon runs one
 * slice of a job per loop turn (server.c), other connections' requests go
 * in between, and a scan over millions of keys no longer stalls the master.
 * A job has two phases:
 *   - scan: the table cursor (objects.c) visits each bucket of the hash
 *     space once; matching keys are copied into j->keys.  The time budget
 *     (regex_time_budget, wall clock from the request's arrival) and the
 *     per-key limits of key_regex.c apply here; a job over either fails with
 *     INVALID_PARAMS and has changed nothing;
 *   - apply: the matched keys are looked up again (they may have gone, or
 *     been replaced, between slices) and removed, in slices too, or their
 *     replica lists are encoded (one response frame, built at once).
 * So the result is that of a scan bucket by bucket with other requests in
 * between, like upstream's walk over its 1024 locked shards: an object
 * present throughout is seen exactly once, one added or removed during the
 * scan may or may not be.
 */
#define SCAN_STEP_SLOTS 512 /* most table slots per cursor step (one clock read) */
#define SCAN_STEP_FIRST 16  /* the first step: the cost of a key is not known yet */
#define SCAN_STEP_US	50  /* what a step should take: costly keys make steps smaller */
#define APPLY_STEP	128 /* removals per clock read */

enum job_phase { JOB_SCAN, JOB_APPLY };

enum job_kind { JOB_REGEX_GET, JOB_REGEX_REMOVE, JOB_REMOVE_ALL };

struct mc_master_job {
	struct mc_master *m;
	struct mc_master_job_origin origin;
	uint16_t tid;
	bool found; /* the tenant exists */
	bool force;
	bool remove; /* RemoveByRegex; else GetReplicaListByRegex */
	bool all;    /* RemoveAll of every tenant */
	enum job_kind kind;
	enum job_phase phase;
	struct mc_regex *re;
	struct mc_master_cursor cur;
	uint64_t deadline_us; /* mc_now_us clock */
	uint64_t budget_ms;
	uint64_t visited;   /* keys matched against */
	uint64_t step;	    /* table slots per cursor step, adapted to the cost of a key */
	struct mc_buf keys; /* matches: u16 length, then the key; RemoveAll: a step's objects */
	uint32_t nkeys;
	size_t off; /* apply: the next key in keys */
	int64_t count;
	struct mc_rep *wiped; /* RemoveAll of every tenant: {seg, gen} its wipe killed */
	uint32_t nwiped;
	mc_status st; /* a scan step's failure */
	char err[ERR_LEN];
	char pat[KEY_SHOW + 1]; /* the pattern's first bytes, for messages */
};

struct mc_master_job_origin *mc_master_job_origin(struct mc_master_job *j)
{
	return &j->origin;
}

void mc_master_job_free(struct mc_master *m, struct mc_master_job *j)
{
	if (!j)
		return;
	mc_master_cursor_close(m, &j->cur);
	mc_regex_free(j->re);
	mc_buf_release(&j->keys);
	mc_free(j->wiped);
	mc_free(j);
}

mc_status mc_master_job_new(struct ctx *c, const struct mc_proto_str *tenant,
			    const struct mc_proto_str *pat, bool remove, bool force)
{
	struct mc_master *m = c->m;
	const struct mc_regex_limits lim = {
		.match_limit = (uint32_t)m->cfg.regex_match_limit,
		.depth_limit = (uint32_t)m->cfg.regex_match_limit,
		.heap_bytes = m->cfg.regex_heap_limit,
	};
	struct mc_master_job *j = mc_calloc(1, sizeof(*j));
	mc_status st;

	if (!j)
		return FAIL(c, MC_ERR_NOMEM, "no memory for the regex scan");
	st = mc_regex_new(sp(pat), pat->len, &lim, &j->re);
	if (st != MC_OK) {
		mc_free(j);
		return FAIL(c, st, "%s", mc_last_error());
	}
	j->m = m;
	j->remove = remove;
	j->kind = remove ? JOB_REGEX_REMOVE : JOB_REGEX_GET;
	j->force = force;
	j->tid = mc_master_tenant_find(m, sp(tenant), tenant->len, &j->found);
	j->budget_ms = m->cfg.regex_time_budget_ms;
	j->step = SCAN_STEP_FIRST;
	j->deadline_us = mc_now_us() + j->budget_ms * 1000;
	mc_buf_init(&j->keys);
	snprintf(j->pat, sizeof(j->pat), "%.*s", show(pat->len), sp(pat));
	if (j->found)
		mc_master_cursor_open(m, &j->cur);
	else
		j->phase = JOB_APPLY; /* nothing can match */
	*c->job = j;
	return MC_INPROGRESS;
}

static bool scan_one(void *arg, struct mc_obj *o)
{
	struct mc_master_job *j = arg;
	uint16_t len = o->key_len;
	bool hit = false;
	mc_status st;

	if (o->tenant != j->tid || (!j->remove && !mc_master_obj_readable(j->m, o)))
		return true;
	j->visited++;
	st = mc_regex_search(j->re, o->key, o->key_len, &hit);
	if (st != MC_OK) {
		j->st = st;
		snprintf(j->err, sizeof(j->err), "regex '%s' refused: %s", j->pat, mc_last_error());
		return false;
	}
	if (hit) {
		mc_buf_append(&j->keys, &len, sizeof(len));
		mc_buf_append(&j->keys, o->key, len);
		j->nkeys++;
	}
	return true;
}

/* The next matched key; false at the end. */
static bool job_key(struct mc_master_job *j, struct mc_proto_str *k)
{
	uint16_t len;

	if (j->off >= j->keys.len)
		return false;
	memcpy(&len, j->keys.data + j->off, sizeof(len));
	k->ptr = (const char *)j->keys.data + j->off + sizeof(len);
	k->len = len;
	j->off += sizeof(len) + len;
	return true;
}

/* Remove up to n matched keys; true when none is left. */
static bool apply_remove(struct mc_master_job *j, uint64_t now_ms, uint32_t n)
{
	struct mc_proto_str k;

	while (n-- > 0) {
		struct mc_obj *o;

		if (!job_key(j, &k))
			return true;
		o = mc_master_obj_find_live(j->m, j->tid, k.ptr, k.len);
		if (o && mc_master_remove_obj(j->m, o, j->force, now_ms) == MC_OK)
			j->count++;
	}
	return j->off >= j->keys.len;
}

/* The response of GetReplicaListByRegex, from the keys still readable. */
static mc_status apply_get(struct ctx *c, struct mc_master_job *j)
{
	struct mc_master *m = c->m;
	struct mc_store_regex_replica_list resp = {0, NULL};
	struct mc_obj **objs = mc_malloc((j->nkeys ? j->nkeys : 1) * sizeof(*objs));
	struct mc_proto_str k;
	uint32_t n = 0, nrep = 0, pos = 0;
	mc_status st;

	resp.items = mc_calloc(j->nkeys ? j->nkeys : 1, sizeof(*resp.items));
	if (!objs || !resp.items) {
		st = FAIL(c, MC_ERR_NOMEM, "no memory for %u matches", j->nkeys);
		goto out;
	}
	while (job_key(j, &k)) {
		struct mc_obj *o = mc_master_obj_find(m, j->tid, k.ptr, k.len);

		if (!o || !mc_master_obj_readable(m, o))
			continue;
		objs[n++] = o;
		nrep += o->nrep;
	}
	if (mc_master_rscratch(m, nrep) != MC_OK) {
		st = FAIL(c, MC_ERR_NOMEM, "no memory for %u matches", n);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		mc_master_grant_lease(m, objs[i], c->now);
		resp.items[i].key.ptr = objs[i]->key;
		resp.items[i].key.len = objs[i]->key_len;
		mc_master_list_fill(m, objs[i], &resp.items[i].list, &pos);
	}
	pos = 0;
	for (uint32_t i = 0; i < n; i++) {
		resp.items[i].list.replicas = &m->rscratch[pos];
		pos += resp.items[i].list.n_replicas;
	}
	resp.n_items = n;
	st = mc_store_get_replica_list_by_regex_response_encode(c->out, c->id, &resp);
out:
	mc_free(objs);
	mc_free(resp.items);
	return st;
}

/* One slice of work; MC_INPROGRESS while more is left. */
static mc_status remove_all_work(struct ctx *c, struct mc_master_job *j, uint64_t end_us);

mc_status mc_master_job_work(struct ctx *c, struct mc_master_job *j, uint64_t end_us)
{
	struct mc_store_count_resp cnt;
	uint64_t now = mc_now_us();

	if (j->kind == JOB_REMOVE_ALL)
		return remove_all_work(c, j, end_us);

	for (;;) {
		uint64_t t0 = now;

		if (j->phase == JOB_SCAN) {
			if (mc_master_cursor_done(&j->cur)) {
				mc_master_cursor_close(c->m, &j->cur);
				j->phase = JOB_APPLY;
				continue;
			}
			if (!mc_master_cursor_step(c->m, &j->cur, j->step, scan_one, j))
				return FAIL(c, j->st, "%s", j->err);
			if (j->keys.err != MC_OK)
				return FAIL(c, MC_ERR_NOMEM, "no memory for %u matching keys",
					    j->nkeys);
			now = mc_now_us();
			/* a step cannot stop half-way: keep it short when keys cost much */
			if (now - t0 > 2 * SCAN_STEP_US)
				j->step = MC_MAX(j->step * SCAN_STEP_US / (now - t0), 1);
			else if (now - t0 < SCAN_STEP_US / 2 && j->step < SCAN_STEP_SLOTS)
				j->step *= 2;
			if (now > j->deadline_us)
				return FAIL(c, MC_ERR_INVALID_PARAMS,
					    "regex '%s' refused: over its time budget of %llu ms "
					    "(regex_time_budget) after matching %llu keys",
					    j->pat, (unsigned long long)j->budget_ms,
					    (unsigned long long)j->visited);
		} else if (!j->remove) {
			return apply_get(c, j);
		} else {
			if (apply_remove(j, c->now, APPLY_STEP)) {
				cnt.count = j->count;
				return mc_store_remove_by_regex_response_encode(c->out, c->id,
										&cnt);
			}
			now = mc_now_us();
		}
		if (now >= end_us)
			return MC_INPROGRESS;
	}
}

/*
 * RemoveAll visits the whole table too, so it is a job as well, but with
 * nothing to match and possibly every object to remove it does not collect
 * keys first (100 million of them would be gigabytes): each cursor step
 * collects the objects it visits, the step returns, and they are removed
 * at once, before anything else runs; the cursor tolerates what removals
 * do to the table between steps.  So RemoveAll is not atomic, as upstream's
 * walk over its shards is not: an object put while it runs may stay, and a
 * client that hangs up before the answer leaves the removal where it got.
 */
static bool collect_one(void *arg, struct mc_obj *o)
{
	struct mc_master_job *j = arg;

	if (j->all || o->tenant == j->tid)
		mc_buf_append(&j->keys, &o, sizeof(o));
	return true;
}

/* o had a replica that this RemoveAll's wipe killed. */
static bool wiped_here(const struct mc_master_job *j, struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		for (uint32_t w = 0; w < j->nwiped; w++) {
			if (r->seg == j->wiped[w].seg && r->gen == j->wiped[w].gen)
				return true;
		}
	}
	return false;
}

struct mc_master_job *mc_master_remove_all_begin(struct mc_master *m, const char *tenant,
						 size_t tenant_len, bool force)
{
	struct mc_master_job *j = mc_calloc(1, sizeof(*j));
	bool all = !tenant || tenant_len == 0 || !m->cfg.enable_multi_tenants;

	/* every tenant: the generations the disk wipe kills, to count what it removes */
	if (!j || (all && !(j->wiped = mc_calloc(m->nclient_slots + 1, sizeof(*j->wiped))))) {
		mc_free(j);
		return NULL;
	}
	m->met.master_remove_all.requests++;
	j->m = m;
	j->kind = JOB_REMOVE_ALL;
	j->remove = true;
	j->force = force;
	j->all = all;
	j->found = true;
	if (!j->all)
		j->tid = mc_master_tenant_find(m, tenant, tenant_len, &j->found);
	j->step = SCAN_STEP_FIRST;
	mc_buf_init(&j->keys);
	if (j->all) {
		for (uint32_t i = 0; i < m->nclient_slots; i++) {
			const struct mc_disk *d = m->clients[i].used ? m->clients[i].disk : NULL;

			if (d)
				j->wiped[j->nwiped++] =
					(struct mc_rep){0, d->seg, m->segs[d->seg].gen};
		}
		mc_master_ssd_wipe_all(m); /* every disk copy goes: the owners wipe their stores */
	}
	if (j->found)
		mc_master_cursor_open(m, &j->cur);
	return j;
}

bool mc_master_remove_all_step(struct mc_master *m, struct mc_master_job *j, uint64_t now_ms,
			       uint64_t slice_us)
{
	uint64_t end_us = slice_us ? mc_now_us() + slice_us : UINT64_MAX;

	while (!mc_master_cursor_done(&j->cur)) {
		uint64_t t0 = mc_now_us(), now;
		struct mc_obj **objs;
		size_t n;

		mc_buf_reset(&j->keys);
		mc_master_cursor_step(m, &j->cur, j->step, collect_one, j);
		if (j->keys.err != MC_OK) {
			/* nothing of this step was collected: the next turn tries again
			 * with a smaller one (the cursor has moved past it, so a few
			 * objects may stay; logged) */
			mc_warn("RemoveAll: no memory for a step of %" PRIu64
				" slots; some objects "
				"stay",
				j->step);
			j->step = 1;
			continue;
		}
		objs = (struct mc_obj **)(void *)j->keys.data;
		n = j->keys.len / sizeof(*objs);
		for (size_t i = 0; i < n; i++) {
			if (!mc_master_obj_gone(m, objs[i])) {
				if (mc_master_remove_obj(m, objs[i], j->force, now_ms) == MC_OK)
					j->count++;
				continue;
			}
			/* gone: erased as the sweep would; counted only when this
			 * call's own wipe took its last replica and it was removable */
			if (wiped_here(j, objs[i]) &&
			    (j->force || !mc_master_leased(m, objs[i], now_ms)))
				j->count++;
			mc_master_obj_erase(m, objs[i]);
		}
		now = mc_now_us();
		if (now - t0 > 2 * SCAN_STEP_US)
			j->step = MC_MAX(j->step * SCAN_STEP_US / (now - t0), 1);
		else if (now - t0 < SCAN_STEP_US / 2 && j->step < SCAN_STEP_SLOTS)
			j->step *= 2;
		if (now >= end_us)
			return false;
	}
	return true;
}

int64_t mc_master_remove_all_end(struct mc_master *m, struct mc_master_job *j)
{
	int64_t n = j ? j->count : 0;

	mc_master_job_free(m, j);
	return n;
}

int64_t mc_master_remove_all(struct mc_master *m, const char *tenant, bool force, uint64_t now_ms)
{
	struct mc_master_job *j =
		mc_master_remove_all_begin(m, tenant, tenant ? strlen(tenant) : 0, force);

	if (!j)
		return MC_ERR_NOMEM;
	mc_master_remove_all_step(m, j, now_ms, 0);
	return mc_master_remove_all_end(m, j);
}

static mc_status remove_all_work(struct ctx *c, struct mc_master_job *j, uint64_t end_us)
{
	struct mc_store_count_resp cnt;
	uint64_t now = mc_now_us();

	if (!mc_master_remove_all_step(c->m, j, c->now, end_us > now ? end_us - now : 1))
		return MC_INPROGRESS;
	cnt.count = j->count;
	return mc_store_remove_all_response_encode(c->out, c->id, &cnt);
}

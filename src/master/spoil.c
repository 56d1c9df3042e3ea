/*
 * master/spoil.c - spoil lists (protocol minor 13; proto.h "Spoil tails",
 * docs/design.md "Gets without the master").
 *
 * A client's location cache reads a block it learnt from GetReplicaList
 * without asking again while the read lease holds.  An override that the
 * lease does not stop - a force Remove or BatchRemove, an UpsertStart or
 * BatchUpsertStart to another size - would leave the old value intact in
 * a freed or parked block, and a cached read would return it, checked.
 * So for a writer that can spoil (its request of minor 13 or later), an
 * override of a leased object parks its memory blocks (not reusable) until
 * the lease ends (and, for an upsert, no earlier than the parking it had
 * anyway), lists them in the answer, and the writer overwrites each
 * block's head before its call returns: a cached read then fails its check
 * and asks the master.  An unleased object has no cached location to
 * spoil: its blocks go as before.  A writer of an older minor is not
 * listed anything (its overrides leave the old value readable from a
 * cache until the lease ends: docs/design.md).
 *
 * A force remove's blocks would otherwise stay out of use for the rest of
 * the lease (seconds: a workload that removes what it just read and puts
 * again would fill its segments), so each gets an id, listed as the
 * replica's id, and the remover's SpoilDone, sent once it wrote them,
 * releases them at once; the lease's end does it otherwise
 * (mc_master_spoil_tick).  An upsert's blocks are parked for
 * put_start_release_timeout anyway: id 0, the discarded list's.
 *
 * The list's strings point into the segments' names: valid until the
 * answer is encoded, in the same loop iteration.
 */
#define MC_LOG_MODULE "master"
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "master/handler_int.h"
#include "master/master_int.h"

void mc_master_spoil_begin(struct mc_master *m, unsigned minor)
{
	m->spoil_on = minor >= MC_STORE_SPOIL_MINOR;
	m->nspoil = 0;
	m->spoil_until = UINT64_MAX;
}

static void fill(const struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r,
		 struct mc_store_replica *d)
{
	mc_master_mem_desc(m, r->seg, r->addr, mc_obj_vsize(o), MC_STORE_REPLICA_COMPLETE, d);
}

/* A force remove's block: parked in m->spoiled under a new id, which
 * SpoilDone names once the remover (or, hspoil.c, the holder) wrote it;
 * false: no memory. */
bool mc_master_spoil_keep(struct mc_master *m, const struct mc_rep *r, uint64_t size,
			  uint64_t until)
{
	struct mc_spoiled *d;

	if (!mc_master_grow((void **)&m->spoiled, &m->spoiled_cap, m->nspoiled + 1,
			    sizeof(*m->spoiled)))
		return false;
	d = &m->spoiled[m->nspoiled++];
	d->id = ++m->spoil_seq;
	d->addr = r->addr;
	d->size = size;
	d->release_at = until;
	d->seg = r->seg;
	d->gen = r->gen;
	return true;
}

static void release_spoiled(struct mc_master *m, uint32_t i)
{
	const struct mc_spoiled *d = &m->spoiled[i];
	const struct mc_rep r = {d->addr, d->seg, d->gen};

	mc_master_block_release(m, &r, d->size); /* nothing if its segment went */
	m->spoiled[i] = m->spoiled[--m->nspoiled];
}

void mc_master_spoil_tick(struct mc_master *m, uint64_t now_ms)
{
	for (uint32_t i = 0; i < m->nspoiled;) {
		if (m->spoiled[i].release_at <= now_ms)
			release_spoiled(m, i); /* its remover never said: the lease is over */
		else
			i++;
	}
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* SpoilDone: the listed blocks are spoiled, reusable now.  The parked list
 * may be long (a force RemoveAll's, hspoil.c): the ids are sorted and the
 * list walked once. */
mc_status mc_master_h_spoil_done(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_spoil_done_req *r = &q->body.spoil_done_req;
	struct mc_master *m = c->m;
	uint64_t *ids;

	if (r->n_ids == 0 || m->nspoiled == 0)
		return mc_store_spoil_done_response_encode(c->out, c->id, NULL);
	ids = mc_master_scratch(m, (size_t)r->n_ids * sizeof(*ids));
	if (!ids)
		return FAIL(c, MC_ERR_NOMEM, "no memory for %u ids", r->n_ids);
	memcpy(ids, r->ids, (size_t)r->n_ids * sizeof(*ids));
	qsort(ids, r->n_ids, sizeof(*ids), id_cmp);
	for (uint32_t i = 0; i < m->nspoiled;) {
		if (bsearch(&m->spoiled[i].id, ids, r->n_ids, sizeof(*ids), id_cmp))
			release_spoiled(m, i); /* the last one moved into i */
		else
			i++;
	}
	return mc_store_spoil_done_response_encode(c->out, c->id, NULL);
}

void mc_master_spoil_park(struct mc_master *m, struct mc_obj *o, uint64_t min_release,
			  uint64_t now_ms)
{
	uint64_t until = MC_MAX(MC_MAX(o->t, m->lease_floor_ms), min_release);
	uint32_t k = 0;

	if (!mc_master_leased(m, o, now_ms) || mc_obj_vsize(o) == 0 || !(o->flags & MC_OBJ_CKSUM))
		return;	    /* nothing a cache holds (only checked objects are cached) */
	if (!m->spoil_on) { /* the writer spoils nothing: the holders do */
		mc_master_hspoil_park(m, o, min_release, until);
		return;
	}
	if (!mc_master_grow((void **)&m->spoil, &m->spoil_cap, m->nspoil + o->nrep,
			    sizeof(*m->spoil)))
		return; /* no memory: released as before (logged by the caller's metrics) */
	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep r = *mc_master_obj_rep(o, i);

		if (!mc_master_rep_live(m, &r) || mc_master_rep_disk(m, &r)) {
			*mc_master_obj_rep(o, k++) = r; /* the caller's */
			continue;
		}
		fill(m, o, &r, &m->spoil[m->nspoil]);
		if (min_release == 0 && mc_master_spoil_keep(m, &r, mc_obj_size(o), until))
			m->spoil[m->nspoil].id = m->spoil_seq; /* SpoilDone releases it early */
		else
			mc_master_block_park_until(m, &r, mc_obj_size(o), until);
		m->nspoil++;
		m->spoil_until = MC_MIN(m->spoil_until, until);
	}
	if (min_release && k < o->nrep)
		m->met.put_start_discard_cnt++; /* as mc_master_obj_discard_reps counts */
	o->nrep = (uint8_t)k;
}

void mc_master_spoil_out(struct mc_master *m, uint64_t now_ms, uint32_t *n,
			 struct mc_store_replica **list, struct mc_proto_opt_u64 *spoil_ms)
{
	*n = m->spoil_on ? m->nspoil : 0;
	*list = *n ? m->spoil : NULL;
	spoil_ms->present = *n != 0;
	spoil_ms->value = *n && m->spoil_until > now_ms ? m->spoil_until - now_ms : 0;
	m->spoil_on = false;
}

void mc_master_spoil_free(struct mc_master *m)
{
	mc_free(m->spoiled);
	m->spoiled = NULL;
	m->nspoiled = m->spoiled_cap = 0;
	mc_free(m->spoil);
	m->spoil = NULL;
	m->nspoil = m->spoil_cap = 0;
	m->spoil_on = false;
}

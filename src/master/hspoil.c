/*
 * master/hspoil.c - holders spoil (protocol minor 15; proto.h "Holders
 * spoil", docs/design.md "Gets without the master").
 *
 * spoil.c has a writer of minor 13 or later spoil the blocks its override
 * of a leased object leaves intact.  A writer that spoils nothing (minor
 * 12 or older, upstream's) and the jobs of a force RemoveByRegex or
 * RemoveAll (no answer to list anything in) would leave the old value
 * readable from a location cache for the rest of the lease.  Here the
 * block's owner does it instead: the block is parked as spoil.c parks it
 * (a remove's under an id in m->spoiled, released at the lease's end or
 * at the owner's SpoilDone; an upsert's on the discarded list, id 0) and
 * queued on its owner (struct mc_client.hq), whose next Ping answers list
 * it, at most MC_STORE_HSPOIL_MAX an answer.  The owner complements the
 * block's head in its own memory (client_hspoil.c).  A block whose owner
 * is older than minor 15 is not parked (nobody would spoil it): it goes
 * as before, and replica lists to readers of minor 15 mark its replicas
 * not to be cached (mc_master_rep_nocache), so no such reader holds it.
 *
 * The queue holds copies: an entry whose segment went (its gen changed)
 * or whose parking is over by the time of the ping is not listed (the
 * block may be someone else's by then).
 */
#define MC_LOG_MODULE "master"
#include <string.h>

#include "base/alloc.h"
#include "master/master_int.h"

void mc_master_client_minor(struct mc_master *m, uint32_t client, unsigned minor)
{
	/* the highest: one process speaks one minor (tests flip it for a
	 * moment to act as an older writer, which a ping may catch) */
	if (client < m->nclient_slots && minor > m->clients[client].minor)
		m->clients[client].minor = (uint8_t)MC_MIN(minor, 255u);
}

static struct mc_client *owner(const struct mc_master *m, const struct mc_rep *r)
{
	const struct mc_seg *s;

	if (!mc_master_rep_live(m, r) || mc_master_rep_disk(m, r))
		return NULL;
	s = &m->segs[r->seg];
	if (s->client >= m->nclient_slots || !m->clients[s->client].used)
		return NULL;
	return &m->clients[s->client];
}

bool mc_master_rep_nocache(const struct mc_master *m, const struct mc_rep *r)
{
	const struct mc_client *cl;

	if (mc_master_rep_disk(m, r))
		return false; /* never cached: a reader caches memory replicas only */
	cl = owner(m, r);
	return !cl || cl->minor < MC_STORE_HSPOIL_MINOR;
}

/* Append d to cl's queue; the caller grew it for one more. */
static void queue(struct mc_client *cl, const struct mc_spoiled *d)
{
	if (cl->hq_head && cl->hq_head >= cl->nhq / 2) { /* compact: the listed half */
		memmove(cl->hq, cl->hq + cl->hq_head, (cl->nhq - cl->hq_head) * sizeof(*cl->hq));
		cl->nhq -= cl->hq_head;
		cl->hq_head = 0;
	}
	cl->hq[cl->nhq++] = *d;
}

void mc_master_hspoil_park(struct mc_master *m, struct mc_obj *o, uint64_t min_release,
			   uint64_t until)
{
	uint32_t k = 0, parked = 0;

	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep r = *mc_master_obj_rep(o, i);
		struct mc_client *cl = owner(m, &r);
		struct mc_spoiled d = {0, r.addr, mc_obj_vsize(o), until, r.seg, r.gen};

		if (!cl || cl->minor < MC_STORE_HSPOIL_MINOR ||
		    !mc_master_grow((void **)&cl->hq, &cl->hq_cap, cl->nhq + 1, sizeof(*cl->hq))) {
			*mc_master_obj_rep(o, k++) = r; /* the caller's, as before */
			continue;
		}
		if (min_release == 0) { /* a remove's: SpoilDone gives it back early */
			if (!mc_master_spoil_keep(m, &r, mc_obj_size(o), until)) {
				*mc_master_obj_rep(o, k++) = r;
				continue;
			}
			d.id = m->spoil_seq;
		} else { /* an upsert's: parked for put_start_release_timeout anyway */
			mc_master_block_park_until(m, &r, mc_obj_size(o), until);
		}
		queue(cl, &d); /* room grown above */
		parked++;
	}
	if (min_release && parked)
		m->met.put_start_discard_cnt++; /* as mc_master_obj_discard_reps counts */
	o->nrep = (uint8_t)k;
}

void mc_master_hspoil_out(struct mc_master *m, uint32_t client, uint64_t now_ms,
			  struct mc_store_ping_resp *resp)
{
	struct mc_client *cl = &m->clients[client];
	uint32_t left = cl->nhq - cl->hq_head, n = 0;
	uint64_t until = UINT64_MAX;
	struct mc_store_hspoil *out;

	if (left == 0)
		return;
	out = mc_master_scratch(m, (size_t)MC_MIN(left, MC_STORE_HSPOIL_MAX) * sizeof(*out));
	if (!out)
		return; /* no memory: the next ping lists them */
	while (cl->hq_head < cl->nhq && n < MC_STORE_HSPOIL_MAX) {
		const struct mc_spoiled *d = &cl->hq[cl->hq_head++];
		const struct mc_rep r = {d->addr, d->seg, d->gen};

		/* its segment went or its parking is over: it may be reused */
		if (d->release_at <= now_ms || !mc_master_rep_live(m, &r) ||
		    m->segs[d->seg].client != client)
			continue;
		out[n++] = (struct mc_store_hspoil){d->id, d->addr, d->size};
		until = MC_MIN(until, d->release_at);
	}
	if (cl->hq_head == cl->nhq)
		cl->hq_head = cl->nhq = 0;
	resp->n_spoil = n;
	resp->spoil = n ? out : NULL;
	resp->spoil_ms = (struct mc_proto_opt_u64){n != 0, n ? until - now_ms : 0};
}

void mc_master_hspoil_client_free(struct mc_client *cl)
{
	mc_free(cl->hq);
	cl->hq = NULL;
	cl->hq_head = cl->nhq = cl->hq_cap = 0;
}

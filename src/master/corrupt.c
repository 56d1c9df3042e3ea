/*
 * master/corrupt.c - ReportCorrupt (message 9, protocol minor 6): a reader
 * names replicas whose bytes failed the object's checksum, and the master
 * drops them (issue 16 part 1; the client side is store/client_verify.c).
 *
 * The checksum is the writer's, given at PutEnd and kept with the object
 * (objects.c, MC_OBJ_CKSUM); the master never sees the bytes, so it
 * trusts the report as it trusts a Remove from any client.  A replica is
 * named by the id GetReplicaList gave it (mc_master_listed_rep_id, which
 * mixes in the object's checksum): an id that no longer names one of the
 * object's replicas (dropped already, the key rewritten since the read,
 * also in place by an upsert of the same size) drops nothing, so a late,
 * repeated or torn read's report is harmless.  A memory block is parked,
 * as a discarded put's is, until put_start_release_timeout, because other
 * readers may still be reading it under their lease (they check the bytes
 * too); a LOCAL_DISK copy is left to its owner to delete (ssd.c).  An
 * object whose last replica goes is erased: every read of it would fail
 * its check anyway.  Objects being
 * written or offloaded are left alone (the report raced with a rewrite, or
 * the offload reads the memory replica and its report settles it).
 *
 * Must never: drop a replica the report does not name, or touch an object
 * of another tenant than the reporter's.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <string.h>

#include "base/log.h"
#include "master/handler_int.h"
#include "master/master_int.h"

/* The id o's replica r has in replica lists (master.c's rep_fill). */
static uint64_t listed_id(const struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r)
{
	if (mc_master_rep_disk(m, r)) {
		const struct mc_rep k = {(uint64_t)(uintptr_t)o, r->seg, r->gen};

		return mc_master_listed_rep_id(o, &k);
	}
	return mc_master_listed_rep_id(o, r);
}

/* Drop o's replica called id, if it still has one; true when it went. */
static bool drop_named(struct ctx *c, struct mc_obj *o, uint64_t id)
{
	struct mc_master *m = c->m;

	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (!mc_master_rep_live(m, r) || mc_master_rep_fs(m, r) || listed_id(m, o, r) != id)
			continue;
		mc_warn("%.*s: replica %" PRIx64
			" on %.*s failed its checksum at a reader; dropped",
			show(o->key_len), o->key, id, show(m->segs[r->seg].name_len),
			m->segs[r->seg].name);
		mc_master_obj_drop_rep(m, o, i, c->now);
		m->met.replicas_reported_corrupt++;
		return true;
	}
	return false;
}

mc_status mc_master_h_report_corrupt(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_corrupt_req *r = &q->body.corrupt_req;
	struct mc_master *m = c->m;
	bool found;
	uint16_t tid = mc_master_tenant_find(m, sp(&r->tenant), r->tenant.len, &found);

	for (uint32_t k = 0; found && k < r->n_items; k++) {
		const struct mc_store_corrupt_item *it = &r->items[k];
		struct mc_obj *o;

		if (it->key.len == 0 || it->key.len > MC_STORE_KEY_MAX)
			continue;
		o = mc_master_obj_find_live(m, tid, sp(&it->key), it->key.len);
		if (!o || (o->flags & (MC_OBJ_PROC | MC_OBJ_OFFL)) ||
		    !drop_named(c, o, it->replica_id))
			continue;
		if (o->nrep == 0)
			mc_master_obj_erase(m, o);
		else
			mc_master_wal_put(m, o); /* the replicas that are left */
	}
	return mc_store_report_corrupt_response_encode(c->out, c->id, NULL);
}

bool mc_master_v_report_corrupt(const struct mc_store_msg *q)
{
	const struct mc_store_corrupt_req *r = &q->body.corrupt_req;

	if (r->n_items && !r->items)
		return false;
	if (!r->tenant.ptr && r->tenant.len)
		return false;
	for (uint32_t i = 0; i < r->n_items; i++)
		if (!r->items[i].key.ptr && r->items[i].key.len)
			return false;
	return true;
}

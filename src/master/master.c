/*
 * master/master.c - mc_master_handle(): one decoded request in, one
 * response frame out (spec store.md 1.4-1.10, 2, 3.2, 6.1).
 *
 * Each handler checks the request for meaning, changes the tables (kept in
 * objects.c, whose header comment has the data layout and the byte
 * budget) and either encodes its typed response or returns a status and
 * writes the cause into a small text buffer, which mc_master_handle turns
 * into an error response.  Nothing here blocks and nothing is O(objects):
 * the regex calls and RemoveAll visit every object, but as jobs run in
 * slices (jobs.c), and an unmount leaves its sweep to mc_master_sweep_run.
 *
 * Responses borrow strings from the tables (segment names, endpoints,
 * keys) and build their lists in per-master scratch arrays that are reused
 * from request to request, so a steady stream of gets or batch exists
 * allocates nothing.
 *
 * The puts (PutStart, PutEnd, PutRevoke and their batch and upsert forms,
 * with the placement of their replicas) are put.c; the command table here
 * sends them there.
 */
#define MC_LOG_MODULE "master"
#include "master/master.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "master/handler_int.h"
#include "master/master_int.h"

/* Resolve (tenant, key) for a read: NULL when absent (unknown tenant too). */
static struct mc_obj *lookup(struct mc_master *m, const struct mc_proto_str *tenant,
			     const struct mc_proto_str *key)
{
	bool found;
	uint16_t tid = mc_master_tenant_find(m, sp(tenant), tenant->len, &found);

	if (!found || key->len == 0 || key->len > MC_STORE_KEY_MAX)
		return NULL;
	return mc_master_obj_find(m, tid, sp(key), key->len);
}

/* lookup for a request that changes the object: see mc_master_obj_find_live. */
static struct mc_obj *lookup_live(struct mc_master *m, const struct mc_proto_str *tenant,
				  const struct mc_proto_str *key)
{
	bool found;
	uint16_t tid = mc_master_tenant_find(m, sp(tenant), tenant->len, &found);

	if (!found || key->len == 0 || key->len > MC_STORE_KEY_MAX)
		return NULL;
	return mc_master_obj_find_live(m, tid, sp(key), key->len);
}

static void rep_fill(const struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r,
		     uint8_t status, struct mc_store_replica *d)
{
	const struct mc_seg *s = &m->segs[r->seg];

	memset(d, 0, sizeof(*d));
	if (mc_master_rep_fs(m, r)) {
		/* DISK: the file under the master's fsdir (fs_tier.c) */
		mc_master_fs_fill((struct mc_master *)m, o, r, d);
		return;
	}
	if (s->state == MC_SEG_DISK) {
		/* LOCAL_DISK: the owner and its offload RPC endpoint (spec 2.2) */
		const struct mc_rep k = {(uint64_t)(uintptr_t)o, r->seg, r->gen};

		d->id = mc_master_listed_rep_id(o, &k);
		d->status = MC_STORE_REPLICA_COMPLETE;
		d->type = MC_STORE_REPLICA_LOCAL_DISK;
		d->size = mc_obj_vsize(o); /* its disk copy holds no trailer */
		d->client_id = m->clients[s->client].id;
		d->transport_endpoint.ptr = s->te_endpoint;
		d->transport_endpoint.len = s->te_len;
		return;
	}
	/* the trailer, if any, follows the value */
	mc_master_mem_desc(m, r->seg, r->addr, mc_obj_vsize(o), status, d);
	d->id = mc_master_listed_rep_id(o, r);
}

/* Append o's live replicas to rscratch at *pos (room reserved by caller):
 * memory replicas first, then LOCAL_DISK ones. */
static bool rep_unreachable(const struct mc_master *m, const struct mc_rep *r)
{
	return !mc_master_rep_disk(m, r) && m->segs[r->seg].unreachable;
}

/* A read list (status COMPLETE) leaves out the replicas on segments a peer
 * reported unreachable, unless nothing else is left to read. */
static bool skip_unreachable(const struct mc_master *m, struct mc_obj *o, uint8_t status)
{
	bool any = false, other = false;

	if (status != MC_STORE_REPLICA_COMPLETE)
		return false;
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (!mc_master_rep_live(m, r) || mc_master_rep_fs_pending(m, r))
			continue;
		if (rep_unreachable(m, r))
			any = true;
		else
			other = true;
	}
	return any && other;
}

uint32_t mc_master_reps_out(struct mc_master *m, struct mc_obj *o, uint8_t status, uint32_t *pos,
			    uint64_t *nocache)
{
	uint32_t n = 0;
	bool skip = skip_unreachable(m, o, status);

	for (int disk = 0; disk < 2; disk++) {
		for (uint32_t i = 0; i < o->nrep; i++) {
			const struct mc_rep *r = mc_master_obj_rep(o, i);

			if (!mc_master_rep_live(m, r) || mc_master_rep_disk(m, r) != disk)
				continue;
			if (status == MC_STORE_REPLICA_COMPLETE && mc_master_rep_fs_pending(m, r))
				continue; /* its file is not written yet */
			if (skip && rep_unreachable(m, r))
				continue; /* a peer could not reach it; another copy is listed */
			rep_fill(m, o, r, status, &m->rscratch[*pos + n]);
			if (mc_master_rep_fs(m, r) && !m->rscratch[*pos + n].file_path.ptr)
				continue; /* no memory for its path: not listed */
			if (nocache && n < 64 && mc_master_rep_nocache(m, r))
				*nocache |= 1ull << n; /* minor 15: its owner cannot spoil */
			n++;
		}
	}
	*pos += n;
	return n;
}

void mc_master_list_fill(struct mc_master *m, struct mc_obj *o, struct mc_store_replica_list *l,
			 uint32_t *pos)
{
	memset(l, 0, sizeof(*l));
	l->lease_ttl_ms = m->cfg.default_kv_lease_ttl_ms;
	if ((o->flags & MC_OBJ_CKSUM) && mc_obj_trailer(o)) {
		l->table_cksum.present = true; /* the trailer's hash, never a whole one */
		l->table_cksum.value = o->ext->checksum;
	} else if (o->flags & MC_OBJ_CKSUM) {
		l->checksum.present = true;
		l->checksum.value = o->ext->checksum;
	}
	l->n_replicas = mc_master_reps_out(m, o, MC_STORE_REPLICA_COMPLETE, pos, &l->nocache.value);
	l->nocache.present = l->nocache.value != 0;
}

/* Status of a get on o (NULL = absent); counts get metrics. */
static mc_status get_status(struct mc_master *m, struct mc_obj *o, uint64_t now)
{
	m->met.total_get_nums++;
	if (!o || mc_master_obj_gone(m, o)) /* gone: absent until the sweep erases it */
		return MC_ERR_OBJECT_NOT_FOUND;
	if (!mc_master_obj_readable(m, o))
		return MC_ERR_REPLICA_IS_NOT_READY;
	m->met.valid_get_nums++;
	/* a memory hit if the first readable replica is in memory (spec 7.2) */
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_live(m, r) && !mc_master_rep_disk(m, r)) {
			m->met.mem_cache_hit_nums++;
			m->met.mem_cache_hit_bytes += mc_obj_size(o);
			return MC_OK;
		}
	}
	m->met.file_cache_hit_nums++;
	m->met.file_cache_hit_bytes += mc_obj_size(o);
	mc_master_ssd_hit(m, o, now);
	return MC_OK;
}

/* ------------------------------------------------------------------------ */
/* segments and clients                                                      */

static mc_status check_segment(struct ctx *c, const struct mc_store_segment *s)
{
	if (s->name.len == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "segment name is empty");
	if (s->size == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "segment %.*s has size 0", show(s->name.len),
			    sp(&s->name));
	if (s->base + s->size < s->base)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "segment %.*s wraps around the address space",
			    show(s->name.len), sp(&s->name));
	if (s->size > c->m->cfg.max_segment_size)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "segment %.*s of %" PRIu64
			    " bytes is larger than max_segment_size (%" PRIu64 " bytes)",
			    show(s->name.len), sp(&s->name), s->size, c->m->cfg.max_segment_size);
	if (s->base + s->size > MC_MASTER_MAX_USER_ADDR)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "segment %.*s [0x%" PRIx64 ", +%" PRIu64
			    ") ends beyond any user-space address (2^57)",
			    show(s->name.len), sp(&s->name), s->base, s->size);
	if (s->size < 2 * MC_MASTER_MIN_ALIGN)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "segment %.*s is smaller than two %u-byte allocation units",
			    show(s->name.len), sp(&s->name), MC_MASTER_MIN_ALIGN);
	return MC_OK;
}

static void client_alive(struct mc_master *m, uint32_t slot, uint64_t now)
{
	m->clients[slot].alive = true;
	m->clients[slot].expiry = now + m->cfg.client_ttl_ms;
	if (m->clients[slot].unreachable) {
		/* it is alive: peers may read from and write to it again */
		for (uint32_t i = 0; i < m->nsegs_slots; i++) {
			struct mc_seg *s = &m->segs[i];

			if (s->client == slot && s->unreachable) {
				s->unreachable = false;
				mc_info("segment %.*s: its owner pinged; reachable again",
					show(s->name_len), s->name);
			}
		}
		m->clients[slot].unreachable = false;
		m->targets_dirty = true;
	}
}

static mc_status mount_one(struct ctx *c, uint32_t client, const struct mc_store_segment *s)
{
	uint32_t slot;
	mc_status st;

	if (mc_master_seg_find(c->m, &s->id, &slot))
		return MC_OK; /* idempotent by segment id */
	st = mc_master_seg_mount(c->m, client, s, c->now);
	if (st == MC_ERR_INVALID_PARAMS)
		return FAIL(c, st,
			    "segment %.*s: range [0x%" PRIx64 ", +%" PRIu64
			    ") holds no %u-byte aligned unit",
			    show(s->name.len), sp(&s->name), s->base, s->size, MC_MASTER_MIN_ALIGN);
	if (st != MC_OK)
		return FAIL(c, st, "cannot mount segment %.*s: %s", show(s->name.len), sp(&s->name),
			    mc_strerror(st));
	return MC_OK;
}

static mc_status h_ping(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_client_req *r = &q->body.client_req;
	/* the view this master leads under (HA: its VIEW record), as upstream */
	struct mc_store_ping_resp resp = {.view_version = (int64_t)c->m->wal_view,
					  .client_status = MC_STORE_CLIENT_NEED_REMOUNT};
	uint32_t slot;
	struct mc_client *cl = mc_master_client_find(c->m, &r->client_id, &slot);

	if (cl && cl->alive) {
		client_alive(c->m, slot, c->now);
		resp.client_status = MC_STORE_CLIENT_OK;
		mc_master_client_minor(c->m, slot, q->hdr.minor);
		if (q->hdr.minor >= MC_STORE_HSPOIL_MINOR) /* blocks for it to spoil */
			mc_master_hspoil_out(c->m, slot, c->now, &resp);
	}
	if (q->hdr.minor >= MC_STORE_FENCE_MINOR) { /* for the pinger's fence */
		resp.client_ttl_ms = (struct mc_proto_opt_u64){true, c->m->cfg.client_ttl_ms};
		resp.remount_wait_ms = (struct mc_proto_opt_u64){
			true,
			c->m->expired_leases_end > c->now ? c->m->expired_leases_end - c->now : 0};
	}
	return mc_store_ping_response_encode(c->out, c->id, &resp);
}

/*
 * A peer's read from these segments failed (spec store.md 6.5: a holder
 * that died, before its expiry unmounts it).  Each mounted memory segment
 * of one of these names, not the reporter's own, is marked: replica lists
 * leave its replicas out while the object has another readable one, and
 * placement skips it, until its owner pings or mounts again.  Unknown
 * names are ignored: the segment may be gone already.
 */
static mc_status h_report_unreachable(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_unreachable_req *r = &q->body.unreachable_req;
	struct mc_master *m = c->m;
	uint32_t reporter = MC_MASTER_NO_CLIENT;

	(void)mc_master_client_find(m, &r->client_id, &reporter);
	for (uint32_t k = 0; k < r->n_segments; k++) {
		const struct mc_proto_str *name = &r->segments[k];

		for (uint32_t i = 0; i < m->nsegs_slots; i++) {
			struct mc_seg *s = &m->segs[i];

			if ((s->state != MC_SEG_MOUNTED && s->state != MC_SEG_GRACEFUL) ||
			    s->unreachable || s->client == reporter || s->name_len != name->len ||
			    memcmp(s->name, name->ptr, name->len) != 0)
				continue;
			s->unreachable = true;
			m->clients[s->client].unreachable = true;
			m->targets_dirty = true;
			m->met.segments_reported_unreachable++;
			mc_warn("segment %.*s: a peer cannot read it; not listed nor allocated "
				"until its owner pings",
				show(s->name_len), s->name);
		}
	}
	return mc_store_report_unreachable_response_encode(c->out, c->id, NULL);
}

static mc_status h_mount(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_mount_req *r = &q->body.mount_req;
	uint32_t client;
	mc_status st = check_segment(c, &r->segment);

	if (st != MC_OK)
		return st;
	st = mc_master_client_intern(c->m, &r->client_id, &client);
	if (st != MC_OK)
		return FAIL(c, st, "cannot record client");
	mc_master_client_minor(c->m, client, q->hdr.minor);
	st = mount_one(c, client, &r->segment);
	if (st != MC_OK)
		return st;
	client_alive(c->m, client, c->now);
	return mc_store_mount_segment_response_encode(c->out, c->id, NULL);
}

static mc_status h_remount(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_remount_req *r = &q->body.remount_req;
	uint32_t client;
	mc_status st;

	if (r->n_segments && !r->segments)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "segment list missing");
	for (uint32_t i = 0; i < r->n_segments; i++) {
		st = check_segment(c, &r->segments[i]);
		if (st != MC_OK)
			return st;
	}
	st = mc_master_client_intern(c->m, &r->client_id, &client);
	if (st != MC_OK)
		return FAIL(c, st, "cannot record client");
	mc_master_client_minor(c->m, client, q->hdr.minor);
	for (uint32_t i = 0; i < r->n_segments; i++) {
		st = mount_one(c, client, &r->segments[i]);
		if (st != MC_OK)
			return st;
	}
	client_alive(c->m, client, c->now);
	return mc_store_remount_segment_response_encode(c->out, c->id, NULL);
}

static mc_status h_unmount(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_unmount_req *r = &q->body.unmount_req;
	uint32_t slot;

	if (mc_master_seg_find(c->m, &r->segment_id, &slot))
		mc_master_seg_unmount(c->m, slot);
	return mc_store_unmount_segment_response_encode(c->out, c->id, NULL);
}

static mc_status h_graceful(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_graceful_unmount_req *r = &q->body.graceful_unmount_req;
	uint32_t slot, client;
	struct mc_seg *s = mc_master_seg_find(c->m, &r->segment_id, &slot);
	struct mc_client *cl = mc_master_client_find(c->m, &r->client_id, &client);

	if (!s)
		return FAIL(c, MC_ERR_SEGMENT_NOT_FOUND,
			    "segment %" PRIu64 "-%" PRIu64 " not mounted", r->segment_id.first,
			    r->segment_id.second);
	if (!cl || s->client != client)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "segment %s is not owned by client %" PRIu64 "-%" PRIu64, s->name,
			    r->client_id.first, r->client_id.second);
	if (r->grace_period_ms == 0) {
		mc_master_seg_unmount(c->m, slot);
	} else {
		uint64_t d = c->now + r->grace_period_ms;

		if (d < c->now) /* saturate: "forever" */
			d = UINT64_MAX;

		if (s->state != MC_SEG_GRACEFUL || d < s->deadline)
			s->deadline = d;
		s->state = MC_SEG_GRACEFUL;
		c->m->targets_dirty = true;
		mc_master_wal_graceful(c->m, slot, c->now);
	}
	return mc_store_graceful_unmount_segment_response_encode(c->out, c->id, NULL);
}

/* ------------------------------------------------------------------------ */
/* reads                                                                     */

static mc_status h_exist(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_key_req *r = &q->body.key_req;
	struct mc_store_exist_resp resp = {false};
	struct mc_obj *o;

	if (r->key.len == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "empty key");
	o = lookup(c->m, &r->tenant, &r->key);
	if (o && mc_master_obj_readable(c->m, o)) {
		mc_master_grant_lease(c->m, o, c->now);
		resp.exists = true;
	}
	return mc_store_exist_key_response_encode(c->out, c->id, &resp);
}

void mc_master_batch_count(struct mc_master_batch_counter *bc, uint32_t n, uint32_t nfail)
{
	bc->requests++;
	bc->items += n;
	bc->failed_items += nfail;
	if (n && nfail == n)
		bc->failures++;
	else if (nfail)
		bc->partial_successes++;
}

/* One status per entry of list (n long, named what in the error). */
mc_status mc_master_status_list(struct ctx *c, uint32_t n, const void *list, const char *what,
				int32_t **out)
{
	if (n && !list)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "%s list missing", what);
	if (!(*out = mc_master_scratch(c->m, (size_t)n * sizeof(int32_t) + 1)))
		return FAIL(c, MC_ERR_NOMEM, "no memory for %u results", n);
	return MC_OK;
}

static mc_status h_batch_exist(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_keys_req *r = &q->body.keys_req;
	struct mc_master *m = c->m;
	struct mc_store_batch_exist_resp resp = {r->n_keys, NULL};
	struct mc_store_exist_item *items;
	struct mc_obj **objs;
	size_t isz = (size_t)r->n_keys * sizeof(*items);
	uint32_t nfail = 0;
	bool found;
	uint16_t tid;

	if (r->n_keys && !r->keys)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "key list missing");
	items = mc_master_scratch(m, isz + (size_t)r->n_keys * sizeof(*objs) + 1);
	if (!items)
		return FAIL(c, MC_ERR_NOMEM, "no memory for %u results", r->n_keys);
	objs = (struct mc_obj **)(void *)((char *)items + isz);
	tid = mc_master_tenant_find(m, sp(&r->tenant), r->tenant.len, &found);
	if (found)
		mc_master_obj_find_many(m, tid, r->keys, r->n_keys, objs);
	for (uint32_t i = 0; i < r->n_keys; i++) {
		const struct mc_proto_str *k = &r->keys[i];
		struct mc_obj *o;

		items[i].status = MC_OK;
		items[i].exists = false;
		if (k->len == 0 || k->len > MC_STORE_KEY_MAX) {
			items[i].status = MC_ERR_INVALID_PARAMS;
			nfail++;
			continue;
		}
		if (!found)
			continue;
		o = objs[i];
		if (o && mc_master_obj_readable(m, o)) {
			mc_master_grant_lease(m, o, c->now);
			items[i].exists = true;
		}
	}
	mc_master_batch_count(&m->met.master_batch_exist_key, r->n_keys, nfail);
	resp.items = items;
	return mc_store_batch_exist_key_response_encode(c->out, c->id, &resp);
}

static mc_status h_get(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_key_req *r = &q->body.key_req;
	struct mc_master *m = c->m;
	struct mc_store_replica_list l;
	struct mc_obj *o;
	uint32_t pos = 0;
	mc_status st;

	if (r->key.len == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "empty key");
	o = lookup(m, &r->tenant, &r->key);
	st = get_status(m, o, c->now);
	if (st == MC_ERR_OBJECT_NOT_FOUND)
		return FAIL(c, st, "key '%.*s' not found", show(r->key.len), sp(&r->key));
	if (st != MC_OK)
		return FAIL(c, st, "key '%.*s' is still being written", show(r->key.len),
			    sp(&r->key));
	if (mc_master_rscratch(m, o->nrep) != MC_OK)
		return FAIL(c, MC_ERR_NOMEM, "no memory for the replica list");
	mc_master_grant_lease(m, o, c->now);
	mc_master_heat_hit(m, o, c->now);
	mc_master_list_fill(m, o, &l, &pos);
	l.replicas = m->rscratch;
	if (q->hdr.minor < 10)
		l.table_cksum.present = false; /* an older reader reads it unchecked */
	if (q->hdr.minor < MC_STORE_HSPOIL_MINOR)
		l.nocache.present = false; /* an older reader refuses the tail */
	return mc_store_get_replica_list_response_encode(c->out, c->id, &l);
}

static mc_status h_batch_get(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_keys_req *r = &q->body.keys_req;
	struct mc_master *m = c->m;
	struct mc_store_batch_replica_list resp = {.n_items = r->n_keys};
	struct mc_store_replica_list_item *items;
	struct mc_store_chunk_sums *chunks = NULL;
	struct mc_proto_opt_u64 *tables;
	struct mc_obj **objs;
	uint32_t nfail = 0, nrep = 0, pos = 0, ntables = 0;
	size_t isz = (size_t)r->n_keys * sizeof(*items), osz = (size_t)r->n_keys * sizeof(*objs);
	size_t tsz = (size_t)r->n_keys * sizeof(*tables);
	uint64_t *nocache;
	uint32_t nnocache = 0;
	/* minor 9: the objects' chunk checksums, for ranged reads */
	bool want = r->want.present && (r->want.value & MC_STORE_WANT_CHUNKS);
	bool found;
	uint16_t tid;

	if (r->n_keys && !r->keys)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "key list missing");
	items = mc_master_scratch(m, isz + osz + 2 * tsz +
					     (want ? r->n_keys * sizeof(*chunks) : 0) + 1);
	if (!items)
		return FAIL(c, MC_ERR_NOMEM, "no memory for %u results", r->n_keys);
	objs = (struct mc_obj **)(void *)((char *)items + isz);
	tables = (struct mc_proto_opt_u64 *)(void *)((char *)items + isz + osz);
	memset(tables, 0, tsz);
	nocache = (uint64_t *)(void *)((char *)items + isz + osz + tsz); /* tsz: room enough */
	memset(nocache, 0, (size_t)r->n_keys * sizeof(*nocache));
	if (want) {
		chunks =
			(struct mc_store_chunk_sums *)(void *)((char *)items + isz + osz + 2 * tsz);
		memset(chunks, 0, r->n_keys * sizeof(*chunks));
	}
	tid = mc_master_tenant_find(m, sp(&r->tenant), r->tenant.len, &found);
	if (found)
		mc_master_obj_find_many(m, tid, r->keys, r->n_keys, objs);
	for (uint32_t i = 0; i < r->n_keys; i++) {
		const struct mc_proto_str *k = &r->keys[i];

		if (!found)
			objs[i] = NULL;
		memset(&items[i], 0, sizeof(items[i]));
		if (k->len == 0 || k->len > MC_STORE_KEY_MAX) {
			objs[i] = NULL;
			items[i].status = MC_ERR_INVALID_PARAMS;
			nfail++;
			continue;
		}
		items[i].status = get_status(m, objs[i], c->now);
		if (items[i].status != MC_OK) {
			objs[i] = NULL;
			nfail++;
			continue;
		}
		nrep += objs[i]->nrep;
	}
	if (mc_master_rscratch(m, nrep) != MC_OK)
		return FAIL(c, MC_ERR_NOMEM, "no memory for %u replicas", nrep);
	for (uint32_t i = 0; i < r->n_keys; i++) {
		if (!objs[i])
			continue;
		mc_master_grant_lease(m, objs[i], c->now);
		mc_master_heat_hit(m, objs[i], c->now);
		mc_master_list_fill(m, objs[i], &items[i].list, &pos);
		/* minor 10: in the batch's own tail; an older reader reads unchecked */
		if (items[i].list.table_cksum.present && q->hdr.minor >= 10) {
			tables[i] = items[i].list.table_cksum;
			ntables++;
		}
		/* minor 15: which replicas the reader must not cache */
		if (items[i].list.nocache.present && q->hdr.minor >= MC_STORE_HSPOIL_MINOR) {
			nocache[i] = items[i].list.nocache.value;
			nnocache++;
		}
		if (chunks) /* points into the object: encoded before anything changes it */
			chunks[i].v =
				(uint64_t *)(uintptr_t)mc_master_obj_chunks(objs[i], &chunks[i].n);
	}
	pos = 0;
	for (uint32_t i = 0; i < r->n_keys; i++) {
		if (!objs[i])
			continue;
		items[i].list.replicas = &m->rscratch[pos];
		pos += items[i].list.n_replicas;
	}
	mc_master_batch_count(&m->met.master_batch_get_replica_list, r->n_keys, nfail);
	resp.items = items;
	resp.chunks = chunks;
	resp.n_chunks = chunks ? r->n_keys : 0;
	resp.tables = tables;
	resp.n_tables = ntables ? r->n_keys : 0;
	resp.nocache = nocache;
	resp.n_nocache = nnocache ? r->n_keys : 0;
	return mc_store_batch_get_replica_list_response_encode(c->out, c->id, &resp);
}

static mc_status h_regex(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_regex_req *r = &q->body.regex_req;

	return mc_master_job_new(c, &r->tenant, &r->pattern, false, false);
}

/* ------------------------------------------------------------------------ */
/* removes                                                                   */

static mc_status remove_one(struct ctx *c, const struct mc_proto_str *tenant,
			    const struct mc_proto_str *key, bool force)
{
	struct mc_obj *o;
	mc_status st;

	if (key->len == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "empty key");
	o = lookup_live(c->m, tenant, key);
	if (!o)
		return FAIL(c, MC_ERR_OBJECT_NOT_FOUND, "key '%.*s' not found", show(key->len),
			    sp(key));
	st = mc_master_remove_obj(c->m, o, force, c->now);
	if (st == MC_ERR_REPLICA_IS_NOT_READY)
		return FAIL(c, st, "key '%.*s' is being written", show(key->len), sp(key));
	if (st == MC_ERR_OBJECT_HAS_LEASE)
		return FAIL(c, st, "key '%.*s' has a read lease", show(key->len), sp(key));
	return st;
}

static mc_status h_remove(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_remove_req *r = &q->body.remove_req;
	struct mc_store_remove_resp resp = {0};
	mc_status st;

	mc_master_spoil_begin(c->m, q->hdr.minor);
	st = remove_one(c, &r->tenant, &r->key, r->force);
	mc_master_spoil_out(c->m, c->now, &resp.n_spoil, &resp.spoil, &resp.spoil_ms);
	if (st != MC_OK)
		return st;
	return mc_store_remove_response_encode(c->out, c->id, &resp);
}

static mc_status h_batch_remove(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_batch_remove_req *r = &q->body.batch_remove_req;
	struct mc_store_batch_remove_resp resp = {.n_items = r->n_keys};
	char *keep = c->err, scratch_err[ERR_LEN];
	mc_status st = mc_master_status_list(c, r->n_keys, r->keys, "key", &resp.statuses);

	if (st != MC_OK)
		return st;
	c->err = scratch_err;
	mc_master_spoil_begin(c->m, q->hdr.minor);
	for (uint32_t i = 0; i < r->n_keys; i++)
		resp.statuses[i] = remove_one(c, &r->tenant, &r->keys[i], r->force);
	mc_master_spoil_out(c->m, c->now, &resp.n_spoil, &resp.spoil, &resp.spoil_ms);
	c->err = keep;
	return mc_store_batch_remove_response_encode(c->out, c->id, &resp);
}

/*
 * BatchReplicaClear (spec 2.3): for each key, skip it unless the object is
 * complete, was written by r->client_id and holds no lease; then remove the
 * whole object (segment_name "") or only its replicas on that segment, and
 * erase it if none is left.  Skipped keys are not errors.
 */
static mc_status h_batch_replica_clear(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_replica_clear_req *r = &q->body.replica_clear_req;
	struct mc_master *m = c->m;
	struct mc_store_keys_resp resp = {0, NULL};
	uint32_t writer = MC_MASTER_NO_CLIENT;
	mc_status st;

	if (r->n_keys) {
		resp.keys = mc_master_scratch(m, (size_t)r->n_keys * sizeof(*resp.keys));
		if (!resp.keys)
			return FAIL(c, MC_ERR_NOMEM, "no memory");
	}
	/* an unknown client wrote nothing here */
	if (mc_master_client_find(m, &r->client_id, &writer)) {
		for (uint32_t i = 0; i < r->n_keys; i++) {
			struct mc_obj *o = lookup_live(m, &r->tenant, &r->keys[i]);

			if (!o || (o->flags & (MC_OBJ_PROC | MC_OBJ_OFFL)) ||
			    mc_master_leased(m, o, c->now) || mc_master_obj_writer(m, o) != writer)
				continue;
			if (r->segment_name.len == 0) {
				mc_master_obj_release_reps(m, o);
			} else if (mc_master_obj_drop_seg_reps(m, o, sp(&r->segment_name),
							       r->segment_name.len) == 0) {
				continue;
			}
			if (o->nrep == 0)
				mc_master_obj_erase(m, o);
			resp.keys[resp.n_keys++] = r->keys[i];
		}
	}
	mc_master_batch_count(&m->met.master_batch_replica_clear, r->n_keys,
			      r->n_keys - resp.n_keys);
	st = mc_store_batch_replica_clear_response_encode(c->out, c->id, &resp);
	return st;
}

static mc_status h_remove_regex(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_remove_regex_req *r = &q->body.remove_regex_req;

	return mc_master_job_new(c, &r->tenant, &r->pattern, true, r->force);
}

/* RemoveAll: a job (see remove_all_work); "" = every tenant. */
static mc_status h_remove_all(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_remove_all_req *r = &q->body.remove_all_req;
	struct mc_master_job *j =
		mc_master_remove_all_begin(c->m, sp(&r->tenant), r->tenant.len, r->force);

	if (!j)
		return FAIL(c, MC_ERR_NOMEM, "no memory for RemoveAll");
	*c->job = j;
	return MC_INPROGRESS;
}

/* ------------------------------------------------------------------------ */
/* dispatch                                                                  */

/* The SSD tier (messages 64..71) lives in ssd.c. */
static mc_status h_ssd(struct ctx *c, const struct mc_store_msg *q)
{
	return mc_master_ssd_handle(c->m, q, c->now, c->out, c->err, ERR_LEN);
}

/* Copy and move tasks (tasks.c). */
static mc_status h_tasks(struct ctx *c, const struct mc_store_msg *q)
{
	return mc_master_tasks_handle(c->m, q, c->now, c->out, c->err, ERR_LEN);
}

static mc_status h_service_ready(struct ctx *c, const struct mc_store_msg *q)
{
	struct mc_store_hello hello = {.version = mc_proto_str_c(c->m->version)};

	(void)q;
	return mc_store_service_ready_response_encode(c->out, c->id, &hello);
}

static mc_status h_get_fsdir(struct ctx *c, const struct mc_store_msg *q)
{
	struct mc_store_fsdir_resp r = {.fsdir = mc_proto_str_c(mc_master_fsdir(c->m))};

	(void)q;
	return mc_store_get_fsdir_response_encode(c->out, c->id, &r);
}

/* The offload RPC goes from client to client (store/offload_server.c). */
static mc_status h_client_only(struct ctx *c, const struct mc_store_msg *q)
{
	return FAIL(c, MC_ERR_NOT_SUPPORTED, "%s is served by a client's offload server",
		    mc_store_msg_name(q->hdr.type));
}

/*
 * The command table: one row per message of MC_STORE_MSG_MAP (store/proto.h),
 * X(NAME, handler, validator, counter).  The validator (NULL: the body has
 * no string or list to check) runs before the handler; the counter is the
 * struct mc_master_metrics member that counts the message's requests and
 * failures (NO_COUNTER: batches count their items themselves and RemoveAll
 * counts in mc_master_remove_all).  Adding an RPC is a row in the protocol's
 * table, a row here and its handler; the asserts below refuse a build where
 * the two tables disagree.
 */
#define NO_COUNTER SIZE_MAX
#define COUNTER(f) offsetof(struct mc_master_metrics, f)

/* clang-format off */
#define MASTER_CMDS(X)                                                                      \
	X(SERVICE_READY, h_service_ready, mc_master_v_hello, NO_COUNTER)                              \
	X(PING, h_ping, NULL, COUNTER(master_ping))                                         \
	X(MOUNT_SEGMENT, h_mount, mc_master_v_mount, COUNTER(master_mount_segment))                   \
	X(REMOUNT_SEGMENT, h_remount, mc_master_v_remount, COUNTER(master_remount_segment))           \
	X(UNMOUNT_SEGMENT, h_unmount, NULL, COUNTER(master_unmount_segment))                \
	X(GRACEFUL_UNMOUNT_SEGMENT, h_graceful, NULL, COUNTER(master_unmount_segment))      \
	X(GET_FSDIR, h_get_fsdir, NULL, NO_COUNTER)                                         \
	X(REPORT_UNREACHABLE, h_report_unreachable, mc_master_v_unreachable, NO_COUNTER)              \
	X(REPORT_CORRUPT, mc_master_h_report_corrupt, mc_master_v_report_corrupt, NO_COUNTER) \
	X(CREATE_COPY_TASK, h_tasks, mc_master_v_copy_task, COUNTER(master_create_copy_task))         \
	X(CREATE_MOVE_TASK, h_tasks, mc_master_v_move_task, COUNTER(master_create_move_task))         \
	X(QUERY_TASK, h_tasks, NULL, COUNTER(master_query_task))                            \
	X(FETCH_TASKS, h_tasks, NULL, COUNTER(master_fetch_tasks))                          \
	X(MARK_TASK_TO_COMPLETE, h_tasks, mc_master_v_task_done, COUNTER(master_update_task))         \
	X(CHANGE_REPLICA, h_tasks, mc_master_v_change_replica, NO_COUNTER)                            \
	X(EXIST_KEY, h_exist, mc_master_v_key, COUNTER(master_exist_key))                             \
	X(BATCH_EXIST_KEY, h_batch_exist, mc_master_v_keys, NO_COUNTER)                               \
	X(GET_REPLICA_LIST, h_get, mc_master_v_key, COUNTER(master_get_replica_list))                 \
	X(BATCH_GET_REPLICA_LIST, h_batch_get, mc_master_v_keys, NO_COUNTER)                          \
	X(GET_REPLICA_LIST_BY_REGEX, h_regex, mc_master_v_regex,                                      \
	  COUNTER(master_get_replica_list_by_regex))                                        \
	X(PUT_START, mc_master_h_put_start, mc_master_v_put_start, COUNTER(master_put_start))         \
	X(PUT_END, mc_master_h_put_end, mc_master_v_put_end, COUNTER(master_put_end))                 \
	X(PUT_REVOKE, mc_master_h_put_revoke, mc_master_v_put_revoke, COUNTER(master_put_revoke))     \
	X(BATCH_PUT_START, mc_master_h_batch_put_start, mc_master_v_batch_put_start, NO_COUNTER)      \
	X(BATCH_PUT_END, mc_master_h_batch_put_end, mc_master_v_batch_put_end, NO_COUNTER)            \
	X(BATCH_PUT_REVOKE, mc_master_h_batch_put_revoke, mc_master_v_batch_put_revoke, NO_COUNTER)   \
	X(UPSERT_START, mc_master_h_put_start, mc_master_v_put_start, COUNTER(master_put_start))      \
	X(UPSERT_END, mc_master_h_put_end, mc_master_v_put_end, COUNTER(master_put_end))              \
	X(UPSERT_REVOKE, mc_master_h_put_revoke, mc_master_v_put_revoke, COUNTER(master_put_revoke))  \
	X(BATCH_UPSERT_START, mc_master_h_batch_put_start, mc_master_v_batch_put_start, NO_COUNTER)   \
	X(BATCH_UPSERT_END, mc_master_h_batch_put_end, mc_master_v_batch_put_end, NO_COUNTER)         \
	X(BATCH_UPSERT_REVOKE, mc_master_h_batch_put_revoke, mc_master_v_batch_put_revoke,            \
	  NO_COUNTER)                                                                                 \
	X(PUT_CREDIT, mc_master_h_put_credit, mc_master_v_put_credit, COUNTER(master_put_credit))     \
	X(SPOIL_DONE, mc_master_h_spoil_done, NULL, NO_COUNTER)                                       \
	X(REMOVE, h_remove, mc_master_v_remove, COUNTER(master_remove))                               \
	X(REMOVE_BY_REGEX, h_remove_regex, mc_master_v_remove_regex, COUNTER(master_remove_by_regex)) \
	X(REMOVE_ALL, h_remove_all, mc_master_v_remove_all, NO_COUNTER)                               \
	X(BATCH_REMOVE, h_batch_remove, mc_master_v_batch_remove, COUNTER(master_remove))             \
	X(BATCH_REPLICA_CLEAR, h_batch_replica_clear, mc_master_v_replica_clear, NO_COUNTER)          \
	X(MOUNT_LOCAL_DISK_SEGMENT, h_ssd, NULL, NO_COUNTER)                  \
	X(UNMOUNT_LOCAL_DISK_SEGMENT, h_ssd, NULL, NO_COUNTER)                \
	X(OFFLOAD_OBJECT_HEARTBEAT, h_ssd, NULL, NO_COUNTER)                  \
	X(NOTIFY_OFFLOAD_SUCCESS, h_ssd, NULL, NO_COUNTER)                    \
	X(REPORT_SSD_CAPACITY, h_ssd, NULL, NO_COUNTER)                       \
	X(BATCH_EVICT_DISK_REPLICA, h_ssd, NULL, NO_COUNTER)                  \
	X(PROMOTION_OBJECT_HEARTBEAT, h_ssd, NULL, NO_COUNTER)                \
	X(NOTIFY_PROMOTION, h_ssd, NULL, NO_COUNTER)                          \
	X(BATCH_GET_OFFLOAD_OBJECT, h_client_only, NULL, NO_COUNTER)                        \
	X(RELEASE_OFFLOAD_BUFFER, h_client_only, NULL, NO_COUNTER)
/* clang-format on */

struct cmd {
	mc_status (*handle)(struct ctx *c, const struct mc_store_msg *q);
	bool (*valid)(const struct mc_store_msg *q); /* NULL: nothing to check */
	size_t counter;				     /* in struct mc_master_metrics */
};

#define ONE(...) +1
#define CMD_ROW(NAME, handler, validator, counter) \
	[MC_STORE_##NAME] = {(handler), (validator), (counter)},

/* Indexed by message type; a row is empty for a number no message has. */
static const struct cmd cmds[] = {MASTER_CMDS(CMD_ROW)};

/* Every protocol message has a row (rows cannot repeat: -Woverride-init). */
MC_STATIC_ASSERT((0 MASTER_CMDS(ONE)) == (0 MC_STORE_MSG_MAP(ONE)),
		 "MASTER_CMDS must have one row per message of MC_STORE_MSG_MAP");
#undef CMD_ROW
#undef ONE

static const struct cmd *cmd_of(uint16_t type)
{
	if (type >= MC_ARRAY_SIZE(cmds) || !cmds[type].handle)
		return NULL;
	return &cmds[type];
}

/* What every request ends with: counters, the error response. */
static mc_status finish(struct ctx *c, uint16_t type, size_t counter, size_t mark, mc_status st)
{
	struct mc_master *m = c->m;

	if (st != MC_OK && c->out->len != mark) {
		/* a handler never leaves half a frame, but be safe */
		c->out->len = mark;
	}
	if (st != MC_OK && !c->err[0])
		snprintf(c->err, ERR_LEN, "cannot encode the response: %s", mc_strerror(st));
	if (counter != NO_COUNTER) {
		struct mc_master_req_counter *rc =
			(struct mc_master_req_counter *)((char *)&m->met + counter);
		rc->requests++;
		rc->failures += st != MC_OK;
	}
	mc_master_fs_reset(m); /* the response holds its paths no more */
	if (st == MC_OK)
		return MC_OK;
	if (mc_store_error_encode(c->out, type, c->id, st, c->err) != MC_OK)
		return MC_ERR_NOMEM;
	return st;
}

mc_status mc_master_handle_start(struct mc_master *m, const struct mc_store_msg *req,
				 uint64_t now_ms, struct mc_buf *out,
				 struct mc_master_job **job_out)
{
	char err[ERR_LEN];
	struct mc_master_job *job = NULL;
	struct ctx c = {m, now_ms, req->hdr.req_id, out, err, &job};
	const struct cmd *cmd = cmd_of(req->hdr.type);
	size_t mark = out->len;
	mc_status st;

	err[0] = '\0';
	*job_out = NULL;
	if (req->hdr.flags & MC_PROTO_F_RESPONSE)
		st = FAIL(&c, MC_ERR_INVALID_PARAMS, "a response frame sent to the master");
	else if (!cmd)
		st = FAIL(&c, MC_ERR_NOT_SUPPORTED, "message type %u is not supported",
			  req->hdr.type);
	else if (cmd->valid && !cmd->valid(req))
		st = FAIL(&c, MC_ERR_INVALID_PARAMS,
			  "malformed %s request: a list or string without its data",
			  mc_store_msg_name(req->hdr.type));
	else
		st = cmd->handle(&c, req);
	if (st == MC_INPROGRESS) {
		struct mc_master_job_origin *o = mc_master_job_origin(job);

		o->type = req->hdr.type;
		o->req_id = req->hdr.req_id;
		o->counter = cmd->counter;
		*job_out = job;
		return MC_INPROGRESS;
	}
	return finish(&c, req->hdr.type, cmd ? cmd->counter : NO_COUNTER, mark, st);
}

mc_status mc_master_job_run(struct mc_master *m, struct mc_master_job *j, uint64_t now_ms,
			    uint64_t slice_us, struct mc_buf *out)
{
	char err[ERR_LEN];
	const struct mc_master_job_origin *o = mc_master_job_origin(j);
	struct ctx c = {m, now_ms, o->req_id, out, err, NULL};
	size_t mark = out->len;
	mc_status st;

	err[0] = '\0';
	st = mc_master_job_work(&c, j, slice_us ? mc_now_us() + slice_us : UINT64_MAX);
	if (st == MC_INPROGRESS)
		return st;
	st = finish(&c, o->type, o->counter, mark, st);
	mc_master_job_free(m, j);
	return st;
}

mc_status mc_master_handle(struct mc_master *m, const struct mc_store_msg *req, uint64_t now_ms,
			   struct mc_buf *out)
{
	struct mc_master_job *job;
	mc_status st = mc_master_handle_start(m, req, now_ms, out, &job);

	while (st == MC_INPROGRESS)
		st = mc_master_job_run(m, job, now_ms, 0, out);
	return st;
}

/* ---- for a daemon that checks mounts first ---- */

bool mc_master_mount_acceptable(struct mc_master *m, const struct mc_store_msg *req)
{
	char err[ERR_LEN];
	struct ctx c = {m, 0, req->hdr.req_id, NULL, err, NULL};
	const struct mc_store_segment *segs;
	uint32_t n;

	if (req->hdr.type == MC_STORE_MOUNT_SEGMENT) {
		if (!mc_master_v_mount(req))
			return false;
		segs = &req->body.mount_req.segment;
		n = 1;
	} else if (req->hdr.type == MC_STORE_REMOUNT_SEGMENT) {
		if (!mc_master_v_remount(req))
			return false;
		segs = req->body.remount_req.segments;
		n = req->body.remount_req.n_segments;
	} else {
		return false;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (check_segment(&c, &segs[i]) != MC_OK)
			return false;
	}
	return true;
}

bool mc_master_segment_mounted(struct mc_master *m, const struct mc_store_uuid *id)
{
	uint32_t slot;

	return mc_master_seg_find(m, id, &slot) != NULL;
}

mc_status mc_master_refuse(struct mc_master *m, const struct mc_store_msg *req, mc_status st,
			   const char *text, struct mc_buf *out)
{
	char err[ERR_LEN];
	struct ctx c = {m, 0, req->hdr.req_id, out, err, NULL};
	const struct cmd *cmd = cmd_of(req->hdr.type);

	if (st == MC_OK || st == MC_INPROGRESS)
		st = MC_ERR_INTERNAL;
	snprintf(err, sizeof(err), "%s", text ? text : "");
	return finish(&c, req->hdr.type, cmd ? cmd->counter : NO_COUNTER, out->len, st);
}

mc_status mc_master_query_replicas(struct mc_master *m, const char *tenant, const char *key,
				   size_t key_len, bool grant_lease, uint64_t now_ms,
				   struct mc_buf *out)
{
	struct mc_proto_str t = mc_proto_str_c(tenant);
	struct mc_proto_str k = {key, (uint32_t)MC_MIN(key_len, (size_t)UINT32_MAX)};
	struct mc_store_replica_list l;
	struct mc_obj *o = key_len <= MC_STORE_KEY_MAX ? lookup(m, &t, &k) : NULL;
	uint32_t pos = 0;
	mc_status st;

	if (grant_lease) {
		st = get_status(m, o, now_ms);
		m->met.master_get_replica_list.requests++;
		m->met.master_get_replica_list.failures += st != MC_OK;
	} else {
		st = !o || mc_master_obj_gone(m, o) ? MC_ERR_OBJECT_NOT_FOUND
		     : mc_master_obj_readable(m, o) ? MC_OK
						    : MC_ERR_REPLICA_IS_NOT_READY;
	}
	if (st != MC_OK)
		return st;
	if (mc_master_rscratch(m, o->nrep) != MC_OK)
		return MC_ERR_NOMEM;
	if (grant_lease)
		mc_master_grant_lease(m, o, now_ms);
	mc_master_list_fill(m, o, &l, &pos);
	l.replicas = m->rscratch;
	return mc_store_body_write(out, MC_STORE_GET_REPLICA_LIST, true, &l);
}

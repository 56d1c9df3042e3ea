/*
 * master/put.c - the master's put handlers: PutStart, PutEnd, PutRevoke,
 * their batch forms and the upsert forms of all of them, with the
 * placement of a value's replicas (strategy, preferred segments, room made
 * on them, local_first's host order) that PutCredit (credit.c) shares.
 * The command table that calls them and the other handlers are master.c,
 * whose header comment says how a handler works.
 *
 * Put rules in one place:
 *   - insert-if-absent: a complete object, or an in-flight one younger than
 *     put_start_discard_timeout_ms, answers OBJECT_ALREADY_EXISTS; an older
 *     in-flight one is pre-empted and its blocks parked until
 *     put_start_release_timeout_ms (a slow writer may still be writing);
 *   - upsert: A absent = put; B same size = the same blocks, back to
 *     PROCESSING; C other size = new blocks, the old ones parked; an
 *     in-flight put or upsert is pre-empted at once; pins and group stay;
 *   - memory replicas only: NoF and DFS tiers are not built here, so a
 *     config asking for them is refused (INVALID_PARAMS, NOT_SUPPORTED);
 *   - End/Revoke must come from the PutStart caller (ILLEGAL_CLIENT); End on
 *     a complete object is an idempotent success, Revoke is INVALID_WRITE;
 *   - the End rule: what changes or completes an object finds it with
 *     mc_master_obj_find_live, so its dead replicas (an unmount the sweep
 *     has not reached yet) go first and an object left with none is erased
 *     and answers OBJECT_NOT_FOUND; reads treat such an object as absent.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "master/handler_int.h"
#include "master/master_int.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static mc_status check_config(struct ctx *c, const struct mc_store_replicate_config *cfg)
{
	const struct mc_master_config *mc = &c->m->cfg;

	if (cfg->replica_num == 0 && cfg->nof_replica_num == 0 && cfg->dfs_replica_num == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "every replica count is 0");
	if (cfg->dfs_replica_num > 1)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "dfs_replica_num %u > 1",
			    cfg->dfs_replica_num);
	if (cfg->dfs_replica_num && cfg->replica_num == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "a DFS replica needs a memory replica");
	if (cfg->prefer_alloc_in_same_node && cfg->nof_replica_num)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "prefer_alloc_in_same_node cannot be used with NoF replicas");
	if (cfg->nof_replica_num)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "NoF replicas requested but this master has no "
			    "NoF tier");
	if (cfg->dfs_replica_num)
		return FAIL(c, MC_ERR_NOT_SUPPORTED,
			    "DFS replicas requested but this master has no "
			    "DFS tier");
	if (cfg->soft_pin_action > MC_STORE_SOFT_PIN_DISABLE)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "unknown soft_pin_action %u",
			    cfg->soft_pin_action);
	if (cfg->soft_pin_ttl_ms.present && cfg->soft_pin_action != MC_STORE_SOFT_PIN_ENABLE)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "soft_pin_ttl_ms given without ENABLE");
	if (cfg->soft_pin_ttl_ms.present && cfg->soft_pin_ttl_ms.value > mc->max_kv_soft_pin_ttl_ms)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "soft_pin_ttl_ms %" PRIu64 " above the maximum %" PRIu64,
			    cfg->soft_pin_ttl_ms.value, mc->max_kv_soft_pin_ttl_ms);
	if (cfg->n_preferred_segments && !cfg->preferred_segments)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "preferred segment list missing");
	return MC_OK;
}

static bool target_named(const struct mc_master *m, const struct mc_proto_str *name, uint32_t *t)
{
	for (uint32_t i = 0; i < m->ntargets; i++) {
		const struct mc_seg *s = &m->segs[m->tsegs[m->tstart[i]]];

		if (s->name_len == name->len && memcmp(s->name, sp(name), name->len) == 0) {
			*t = i;
			return true;
		}
	}
	return false;
}

/* A target in host order (host_order): the sort keys, then the target. */
struct host_slot {
	const char *host, *name;
	uint32_t host_len;
	uint32_t target;
	bool wraps; /* its host sorts before the writer's: after the wrap */
};

static int host_slot_cmp(const void *pa, const void *pb)
{
	const struct host_slot *a = pa, *b = pb;
	uint32_t n = MC_MIN(a->host_len, b->host_len);
	int d;

	if (a->wraps != b->wraps)
		return a->wraps ? 1 : -1;
	d = memcmp(a->host, b->host, n);
	if (d || a->host_len != b->host_len)
		return d ? d : a->host_len < b->host_len ? -1 : 1;
	return strcmp(a->name, b->name);
}

/*
 * local_first, and prefer_alloc_in_same_node, for one replica (spec 3.2):
 * append to pref the targets of every host in cyclic host-id order from
 * the writer's host (from the next greater one when it has none), each
 * host's segment names sorted and rotated by the key's hash, so one host's
 * keys spread over its segments.  O(targets log targets) per put; the list
 * stops at MC_MASTER_MAX_PREFERRED, and the random walk covers the rest.
 * Targets already in pref are skipped.  Returns the new npref.
 */
static uint32_t host_order(struct mc_master *m, const struct mc_proto_str *host, const char *key,
			   size_t key_len, uint32_t *pref, uint32_t npref)
{
	struct host_slot *v = mc_calloc(m->ntargets, sizeof(*v));
	uint64_t h = XXH3_64bits(key, key_len);
	uint32_t n = 0;

	if (!v)
		return npref; /* no preference: the random walk places it */
	for (uint32_t t = 0; t < m->ntargets; t++) {
		const struct mc_seg *s = &m->segs[m->tsegs[m->tstart[t]]];
		uint32_t hl = (uint32_t)strlen(s->host_id), k = MC_MIN(hl, host->len);
		int d = memcmp(s->host_id, sp(host), k);

		v[n++] = (struct host_slot){s->host_id, m->targets[t].name, hl, t,
					    d < 0 || (d == 0 && hl < host->len)};
	}
	qsort(v, n, sizeof(*v), host_slot_cmp);
	for (uint32_t i = 0; i < n && npref < MC_MASTER_MAX_PREFERRED;) {
		uint32_t j = i;

		while (j < n && v[j].wraps == v[i].wraps && v[j].host_len == v[i].host_len &&
		       memcmp(v[j].host, v[i].host, v[i].host_len) == 0)
			j++;
		for (uint32_t k = 0; k < j - i && npref < MC_MASTER_MAX_PREFERRED; k++) {
			uint32_t t = v[i + (uint32_t)((h + k) % (j - i))].target;
			bool dup = false;

			for (uint32_t p = 0; p < npref && !dup; p++)
				dup = pref[p] == t;
			if (!dup)
				pref[npref++] = t;
		}
		i = j;
	}
	mc_free(v);
	return npref;
}

/* A block of len bytes fits on target t now (tried, and given back). */
static bool target_fits(struct mc_master *m, uint32_t t, uint64_t len)
{
	struct mc_alloc_request r = {len, 1, MC_ALLOC_RANDOM, NULL, 0};
	struct mc_alloc_placement p;
	uint64_t free = 0;
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->targets[t].nallocs; i++)
		free += mc_offset_alloc_free_bytes(m->targets[t].allocs[i]);
	if (free < len)
		return false;
	if (mc_alloc_place(&m->targets[t], 1, &r, &m->rng, &p, &n) != MC_OK || n == 0)
		return false;
	(void)mc_offset_alloc_release(p.alloc, p.addr);
	return true;
}

/*
 * preferred_segment_lru (ours, paper 4.6): make room for len bytes on each
 * of the first want explicitly preferred targets by evicting that target's
 * least recently used objects (mc_master_evict_target: never leased, pinned
 * or keep), batch by batch until the block fits or nothing more may go.
 * What still does not fit is placed as upstream does (spilled).
 */
static void make_room(struct ctx *c, const uint32_t *pref, uint32_t npref, uint32_t want,
		      uint64_t len, const struct mc_obj *keep)
{
	struct mc_master *m = c->m;
	uint32_t batch = (uint32_t)m->cfg.preferred_segment_lru_batch;

	for (uint32_t i = 0; i < npref && i < want; i++) {
		while (!target_fits(m, pref[i], len)) {
			if (mc_master_evict_target(m, pref[i], batch, keep, c->now) == 0)
				break;
		}
	}
}

/* Allocate the replicas of one value of key; placements in m->place[0, *n).
 * keep: the object being upserted, which making room must not evict. */
static mc_status place(struct ctx *c, const char *key, size_t key_len, uint64_t len,
		       const struct mc_store_replicate_config *cfg, const struct mc_obj *keep,
		       uint32_t *n_out)
{
	struct mc_master *m = c->m;
	uint32_t pref[MC_MASTER_MAX_PREFERRED], npref = 0, want;
	struct mc_alloc_request req;
	mc_status st = mc_master_targets(m);

	if (st != MC_OK)
		return FAIL(c, st, "no memory for the placement targets");
	if (m->ntargets == 0) {
		m->met.put_start_alloc_failures++;
		return FAIL(c, MC_ERR_NO_AVAILABLE_HANDLE, "no segment is mounted and allocatable");
	}
	want = cfg->replica_num;
	if (want > m->ntargets)
		want = m->ntargets;
	if (want > MC_MASTER_MAX_REPLICAS)
		want = MC_MASTER_MAX_REPLICAS;
	if (!m->place || m->place_cap < want) {
		void *p = mc_realloc(m->place, MC_MASTER_MAX_REPLICAS * sizeof(*m->place));

		if (!p)
			return FAIL(c, MC_ERR_NOMEM, "no memory for the placement");
		m->place = p;
		m->place_cap = MC_MASTER_MAX_REPLICAS;
	}
	if (cfg->preferred_segment.len) {
		if (target_named(m, &cfg->preferred_segment, &pref[0]))
			npref = 1;
	} else {
		for (uint32_t i = 0;
		     i < cfg->n_preferred_segments && npref < MC_MASTER_MAX_PREFERRED; i++) {
			if (target_named(m, &cfg->preferred_segments[i], &pref[npref]))
				npref++;
		}
	}
	if (npref && m->cfg.preferred_segment_lru)
		make_room(c, pref, npref, want, len, keep);
	/* local_first, prefer_alloc_in_same_node: the hosts from the writer's on */
	if (cfg->replica_num == 1 && (m->cfg.strategy == MC_ALLOC_LOCAL_FIRST ||
				      (cfg->prefer_alloc_in_same_node && cfg->host_id.len)))
		npref = host_order(m, &cfg->host_id, key, key_len, pref, npref);
	req.len = len;
	req.replica_num = want;
	req.strategy = m->cfg.strategy;
	req.preferred = npref ? pref : NULL;
	req.npreferred = npref;
	st = mc_alloc_place(m->targets, m->ntargets, &req, &m->rng, m->place, n_out);
	if (st != MC_OK) {
		m->met.put_start_alloc_failures++;
		/* only a want of space makes room: the master's own memory
		 * (NOMEM) is not freed by evicting objects, which would lose
		 * complete unleased objects with the segments nearly empty */
		if (st == MC_ERR_NO_AVAILABLE_HANDLE) {
			m->need_evict = true;
			return FAIL(c, st, "no space for %" PRIu64 " bytes in %u segment(s)", len,
				    m->ntargets);
		}
		return FAIL(c, st, "allocation of %" PRIu64 " bytes failed: %s", len,
			    mc_strerror(st));
	}
	if (*n_out < cfg->replica_num)
		m->met.put_start_partial_allocations++;
	return MC_OK;
}

static void place_undo(struct mc_master *m, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		(void)mc_offset_alloc_release(m->place[i].alloc, m->place[i].addr);
}

/* Install the n placements of m->place as o's replicas (ext sized by caller). */
static void place_install(struct mc_master *m, struct mc_obj *o, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t seg = m->tsegs[m->tstart[m->place[i].target] + m->place[i].alloc_index];
		struct mc_rep *r = mc_master_obj_rep(o, i);

		r->addr = m->place[i].addr;
		r->seg = seg;
		r->gen = m->segs[seg].gen;
		m->segs[seg].used += mc_obj_size(o);
		m->allocated_bytes += mc_obj_size(o);
	}
}

mc_status mc_master_place_block(struct ctx *c, uint64_t len, const struct mc_proto_str *segment,
				struct mc_rep *out)
{
	struct mc_store_replicate_config cfg = {.replica_num = 1, .preferred_segment = *segment};
	struct mc_master *m = c->m;
	uint32_t n = 0, seg;
	mc_status st = place(c, "", 0, len, &cfg, NULL, &n);

	if (st != MC_OK)
		return st;
	if (n == 0)
		return FAIL(c, MC_ERR_NO_AVAILABLE_HANDLE, "no space for %" PRIu64 " bytes", len);
	seg = m->tsegs[m->tstart[m->place[0].target] + m->place[0].alloc_index];
	out->addr = m->place[0].addr;
	out->seg = seg;
	out->gen = m->segs[seg].gen;
	m->segs[seg].used += len;
	m->allocated_bytes += len;
	return MC_OK;
}

/*
 * Record the soft-pin action of a PutStart/UpsertStart for PutEnd, which
 * commits it (spec 2.7).  Returns what the in-flight entry keeps: the TTL
 * for ENABLE, else kept, the deadline of a pin PRESERVE carries over.
 */
static uint64_t pin_pending(struct mc_obj *o, const struct mc_store_replicate_config *cfg,
			    const struct mc_master_config *mc, uint64_t kept)
{
	o->flags &= (uint8_t) ~(MC_OBJ_PIN_SET | MC_OBJ_PIN_CLEAR);
	if (cfg->soft_pin_action == MC_STORE_SOFT_PIN_ENABLE) {
		uint64_t ttl = cfg->soft_pin_ttl_ms.present ? cfg->soft_pin_ttl_ms.value
							    : mc->default_kv_soft_pin_ttl_ms;

		if (ttl) {
			o->flags |= MC_OBJ_PIN_SET;
			return ttl;
		}
		o->flags |= MC_OBJ_PIN_CLEAR;
	} else if (cfg->soft_pin_action == MC_STORE_SOFT_PIN_DISABLE) {
		o->flags |= MC_OBJ_PIN_CLEAR;
	}
	return kept;
}

void mc_master_observe_size(struct mc_master *m, uint64_t len)
{
	uint32_t b = 0;

	while (b < MC_MASTER_VALUE_SIZE_BUCKETS - 1 && len > mc_master_value_size_bounds[b])
		b++;
	m->met.value_size_buckets[b]++;
	m->met.value_size_sum += len;
	m->met.value_size_count++;
}

/* Switch a complete (or pre-empted) object to "being written by client". */
static void begin_write(struct mc_master *m, struct mc_obj *o, uint32_t client, uint64_t now,
			const struct mc_store_replicate_config *cfg)
{
	uint64_t kept = 0;

	if (o->flags & MC_OBJ_PROC) {
		/* a pin still pending from the pre-empted write was never committed */
		if ((o->flags & MC_OBJ_SOFT) && !(o->flags & MC_OBJ_PIN_SET))
			kept = mc_master_proc_of(m, o)->pin;
		mc_master_proc_del(m, o);
	} else if (o->flags & MC_OBJ_SOFT) {
		kept = mc_master_pin_deadline(m, o);
		mc_master_pin_del(m, o);
	}
	o->flags &= (uint8_t)~MC_OBJ_SOFT;
	if (kept)
		o->flags |= MC_OBJ_SOFT; /* PRESERVE carries it to PutEnd */
	o->t = now;
	mc_master_proc_add(m, o, client, pin_pending(o, cfg, &m->cfg, kept));
}

static mc_status upsert_existing(struct ctx *c, struct mc_obj *o, uint32_t client,
				 uint64_t value_len, uint64_t trailer,
				 const struct mc_store_replicate_config *cfg)
{
	struct mc_master *m = c->m;
	uint32_t n;
	mc_status st;

	if (!mc_master_proc_reserve(m, 1))
		return FAIL(c, MC_ERR_NOMEM, "no memory");
	if (o->flags & MC_OBJ_OFFL)
		return FAIL(c, MC_ERR_OBJECT_REPLICA_BUSY,
			    "key '%.*s': its memory replica is being offloaded", show(o->key_len),
			    o->key);
	if (mc_master_task_busy(m, o))
		return FAIL(c, MC_ERR_OBJECT_HAS_REPLICATION_TASK,
			    "key '%.*s' has a copy or move task", show(o->key_len), o->key);
	/* disk copies hold the old value: their owners delete them */
	mc_master_ssd_drop_disk_reps(m, o);
	if (o->flags & MC_OBJ_PROC) /* pre-empt the in-flight write at once */
		mc_master_obj_discard_reps(m, o, c->now);
	if (o->nrep && mc_obj_size(o) == value_len + trailer) { /* case B: in place */
		mc_obj_set_alloc(o, value_len + trailer, trailer != 0);
		begin_write(m, o, client, c->now, cfg);
		return MC_OK;
	}
	/* case C (or a pre-empted write): new blocks first, then park the old */
	st = place(c, o->key, o->key_len, value_len + trailer, cfg, o, &n);
	if (st != MC_OK) {
		if (o->nrep == 0) { /* nothing left to keep */
			mc_master_obj_erase(m, o);
		}
		return st;
	}
	mc_master_spoil_park(m, o, c->now + m->cfg.put_start_release_timeout_ms, c->now);
	mc_master_obj_discard_reps(m, o, c->now);
	if (!mc_master_obj_ext_fit(o, n)) {
		place_undo(m, n);
		mc_master_obj_erase(m, o);
		return FAIL(c, MC_ERR_NOMEM, "no memory for the replica list");
	}
	mc_obj_set_alloc(o, value_len + trailer, trailer != 0);
	place_install(m, o, n);
	o->nrep = (uint8_t)n;
	o->flags &= (uint8_t)~MC_OBJ_CKSUM;
	begin_write(m, o, client, c->now, cfg);
	return MC_OK;
}

/*
 * One PutStart/UpsertStart.  On MC_OK the object's replicas are appended
 * to m->rscratch at *pos (the caller reserved MC_MASTER_MAX_REPLICAS).
 */
static mc_status put_start_one(struct ctx *c, uint32_t client, uint16_t tenant,
			       const struct mc_proto_str *key, uint64_t value_len, uint64_t trailer,
			       const struct mc_proto_str *group,
			       const struct mc_store_replicate_config *cfg, bool upsert,
			       uint32_t *nrep_out, uint32_t *pos)
{
	struct mc_master *m = c->m;
	struct mc_obj *o;
	uint32_t n;
	mc_status st;

	if (key->len == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "empty key");
	if (key->len > MC_STORE_KEY_MAX)
		return FAIL(c, MC_ERR_INVALID_KEY, "key longer than %u bytes", MC_STORE_KEY_MAX);
	if (value_len == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "key '%.*s': value length 0", show(key->len),
			    sp(key));
	if (value_len > MC_MASTER_MAX_VALUE)
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "key '%.*s': value length %" PRIu64 " above 2^47 - 1", show(key->len),
			    sp(key), value_len);
	if (trailer &&
	    (!mc_store_trailer_fits(value_len) || trailer != mc_store_trailer_len(value_len)))
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "key '%.*s': a trailer of %" PRIu64 " bytes for %" PRIu64
			    " (want %" PRIu64 ", for %u to %llu bytes)",
			    show(key->len), sp(key), trailer, value_len,
			    mc_store_trailer_len(value_len), MC_STORE_TCHUNK + 1,
			    (unsigned long long)MC_STORE_TRAILER_MAX);
	o = mc_master_obj_find_live(m, tenant, sp(key), key->len);
	if (o && upsert) {
		st = upsert_existing(c, o, client, value_len, trailer, cfg);
		if (st != MC_OK)
			return st;
		goto out;
	}
	if (o) {
		if (!(o->flags & MC_OBJ_PROC) || c->now < o->t ||
		    c->now - o->t < m->cfg.put_start_discard_timeout_ms)
			return FAIL(c, MC_ERR_OBJECT_ALREADY_EXISTS, "key '%.*s' already exists",
				    show(key->len), sp(key));
		/* a zombie PutStart: pre-empt it, park its blocks */
		mc_master_obj_discard_reps(m, o, c->now);
		mc_master_obj_erase(m, o);
	}
	if (!mc_master_proc_reserve(m, 1))
		return FAIL(c, MC_ERR_NOMEM, "no memory");
	st = place(c, sp(key), key->len, value_len + trailer, cfg, NULL, &n);
	if (st != MC_OK)
		return st;
	o = mc_malloc(offsetof(struct mc_obj, key) + key->len);
	if (!o) {
		place_undo(m, n);
		return FAIL(c, MC_ERR_NOMEM, "no memory for the object");
	}
	memset(o, 0, offsetof(struct mc_obj, key));
	memcpy(o->key, sp(key), key->len);
	o->key_len = (uint16_t)key->len;
	o->tenant = tenant;
	mc_obj_set_alloc(o, value_len + trailer, trailer != 0);
	o->aux = MC_MASTER_NO_CLIENT; /* no writer yet: proc_add sets it */
	if (n > 1 && !mc_master_obj_ext_fit(o, n)) {
		mc_free(o);
		place_undo(m, n);
		return FAIL(c, MC_ERR_NOMEM, "no memory for the replica list");
	}
	place_install(m, o, n);
	o->nrep = (uint8_t)n;
	if (cfg->with_hard_pin)
		o->flags |= MC_OBJ_HARD;
	st = mc_master_obj_insert(m, o);
	if (st != MC_OK) {
		mc_master_obj_release_reps(m, o);
		mc_free(o->ext);
		mc_free(o);
		return FAIL(c, st, "no memory for the object table");
	}
	if (group && group->len) {
		st = mc_master_group_join(m, tenant, sp(group), group->len, o);
		if (st != MC_OK) {
			mc_master_obj_release_reps(m, o);
			mc_master_obj_erase(m, o);
			return FAIL(c, st, "no memory for the object group");
		}
	}
	o->t = c->now;
	mc_master_proc_add(m, o, client, pin_pending(o, cfg, &m->cfg, 0));
out:
	mc_master_observe_size(m, value_len);
	mc_master_fs_begin(m, o, c->now); /* a DISK replica with --root_fs_dir */
	*nrep_out = mc_master_reps_out(m, o, MC_STORE_REPLICA_PROCESSING, pos, NULL);
	return MC_OK;
}

static mc_status put_tenant(struct ctx *c, const struct mc_proto_str *tenant, uint16_t *tid)
{
	mc_status st = mc_master_tenant_intern(c->m, sp(tenant), tenant->len, tid);

	if (st == MC_ERR_INVALID_PARAMS)
		return FAIL(c, st, "too many tenants (at most %u)", MC_MASTER_MAX_TENANTS);
	if (st != MC_OK)
		return FAIL(c, st, "no memory for the tenant");
	return MC_OK;
}

static mc_status put_client(struct ctx *c, const struct mc_store_uuid *id, uint32_t *slot)
{
	mc_status st = mc_master_client_intern(c->m, id, slot);

	return st == MC_OK ? MC_OK : FAIL(c, st, "cannot record client");
}

mc_status mc_master_h_put_start(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_put_start_req *r = &q->body.put_start_req;
	const bool upsert = q->hdr.type == MC_STORE_UPSERT_START;
	struct mc_master *m = c->m;
	struct mc_store_put_start_resp resp;
	uint32_t client, pos = 0, n = 0;
	uint16_t tid;
	mc_status st = check_config(c, &r->config);

	if (st != MC_OK)
		return st;
	if ((st = put_tenant(c, &r->tenant, &tid)) != MC_OK ||
	    (st = put_client(c, &r->client_id, &client)) != MC_OK)
		return st;
	if (mc_master_rscratch(m, MC_MASTER_MAX_REPLICAS) != MC_OK)
		return FAIL(c, MC_ERR_NOMEM, "no memory for the replica list");
	mc_master_spoil_begin(m, upsert ? q->hdr.minor : 0);
	st = put_start_one(c, client, tid, &r->key, r->value_len,
			   r->trailer_len.present ? r->trailer_len.value : 0, &r->group_id,
			   &r->config, upsert, &n, &pos);
	memset(&resp, 0, sizeof(resp));
	mc_master_spoil_out(m, c->now, &resp.n_spoil, &resp.spoil, &resp.spoil_ms);
	if (st != MC_OK)
		return st;
	resp.n_replicas = n;
	resp.replicas = m->rscratch;
	return mc_store_response_encode(c->out, upsert ? MC_STORE_UPSERT_START : MC_STORE_PUT_START,
					c->id, &resp);
}

mc_status mc_master_h_batch_put_start(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_batch_put_start_req *r = &q->body.batch_put_start_req;
	const bool upsert = q->hdr.type == MC_STORE_BATCH_UPSERT_START;
	struct mc_master *m = c->m;
	struct mc_store_batch_put_start_resp resp = {.n_items = r->n_items};
	struct mc_store_put_start_item *items;
	uint32_t client, pos = 0, nfail = 0;
	uint16_t tid;
	mc_status st = check_config(c, &r->config);
	char *keep = c->err;
	char scratch_err[ERR_LEN];

	if (st != MC_OK)
		return st;
	if (r->n_items && !r->items)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "item list missing");
	if (r->n_trailers && r->n_trailers != r->n_items)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "%u trailer lengths for %u items",
			    r->n_trailers, r->n_items);
	if ((st = put_tenant(c, &r->tenant, &tid)) != MC_OK ||
	    (st = put_client(c, &r->client_id, &client)) != MC_OK)
		return st;
	items = mc_master_scratch(m, (size_t)r->n_items * sizeof(*items) + 1);
	if (!items)
		return FAIL(c, MC_ERR_NOMEM, "no memory for %u results", r->n_items);
	c->err = scratch_err; /* per-item causes are not reported */
	mc_master_spoil_begin(m, upsert ? q->hdr.minor : 0);
	for (uint32_t i = 0; i < r->n_items; i++) {
		const struct mc_store_put_item *it = &r->items[i];

		memset(&items[i], 0, sizeof(items[i]));
		if (pos > UINT32_MAX - MC_MASTER_MAX_REPLICAS ||
		    mc_master_rscratch(m, pos + MC_MASTER_MAX_REPLICAS) != MC_OK) {
			items[i].status = MC_ERR_NOMEM;
			nfail++;
			continue;
		}
		items[i].status = put_start_one(c, client, tid, &it->key, it->value_len,
						r->n_trailers ? r->trailers[i] : 0, &it->group_id,
						&r->config, upsert, &items[i].n_replicas, &pos);
		if (items[i].status != MC_OK)
			nfail++;
	}
	c->err = keep;
	pos = 0;
	for (uint32_t i = 0; i < r->n_items; i++) {
		if (items[i].status != MC_OK)
			continue;
		items[i].replicas = &m->rscratch[pos];
		pos += items[i].n_replicas;
	}
	mc_master_batch_count(&m->met.master_batch_put_start, r->n_items, nfail);
	resp.items = items;
	mc_master_spoil_out(m, c->now, &resp.n_spoil, &resp.spoil, &resp.spoil_ms);
	return mc_store_response_encode(
		c->out, upsert ? MC_STORE_BATCH_UPSERT_START : MC_STORE_BATCH_PUT_START, c->id,
		&resp);
}

static mc_status check_type(struct ctx *c, uint8_t type)
{
	switch (type) {
	case MC_STORE_REPLICA_MEMORY:
	case MC_STORE_REPLICA_ALL:
		return MC_OK;
	case MC_STORE_REPLICA_DISK:
		if (c->m->fs_seg != UINT32_MAX)
			return MC_OK; /* End/Revoke of the DISK file (fs_tier.c) */
				      /* fall through */
	case MC_STORE_REPLICA_LOCAL_DISK:
	case MC_STORE_REPLICA_NOF_SSD:
	case MC_STORE_REPLICA_DFS:
		return FAIL(c, MC_ERR_INVALID_WRITE, "no replica of type %u is ever written here",
			    type);
	default:
		return FAIL(c, MC_ERR_INVALID_PARAMS, "unknown replica type %u", type);
	}
}

/* PutEnd: apply the pending soft-pin action (pin is struct mc_proc.pin). */
static void commit_pins(struct mc_master *m, struct mc_obj *o, uint64_t now, uint64_t pin)
{
	if (o->flags & MC_OBJ_PIN_SET) {
		mc_master_pin_add(m, o, now + pin);
	} else if (o->flags & MC_OBJ_PIN_CLEAR) {
		o->flags &= (uint8_t)~MC_OBJ_SOFT;
	} else if (o->flags & MC_OBJ_SOFT) {
		if (pin > now)
			mc_master_pin_add(m, o, pin);
		else
			o->flags &= (uint8_t)~MC_OBJ_SOFT;
	}
	o->flags &= (uint8_t) ~(MC_OBJ_PIN_SET | MC_OBJ_PIN_CLEAR);
}

/* PutEnd/PutRevoke: the object key names in tenant tid, or the error. */
static mc_status put_find(struct ctx *c, uint16_t tid, bool tenant_found,
			  const struct mc_proto_str *key, struct mc_obj **out)
{
	*out = NULL;
	if (key->len == 0)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "empty key");
	if (tenant_found && key->len <= MC_STORE_KEY_MAX)
		*out = mc_master_obj_find_live(c->m, tid, sp(key), key->len);
	if (!*out)
		return FAIL(c, MC_ERR_OBJECT_NOT_FOUND, "key '%.*s' not found", show(key->len),
			    sp(key));
	return MC_OK;
}

/* PutEnd/PutRevoke: only the client writing o may finish it. */
static mc_status put_check_writer(struct ctx *c, const struct mc_store_uuid *client,
				  struct mc_obj *o, const struct mc_proto_str *key)
{
	uint32_t slot;

	if (!mc_master_client_find(c->m, client, &slot) ||
	    slot != mc_master_proc_of(c->m, o)->writer)
		return FAIL(c, MC_ERR_ILLEGAL_CLIENT,
			    "key '%.*s' is being written by another client", show(key->len),
			    sp(key));
	return MC_OK;
}

static mc_status put_end_one(struct ctx *c, const struct mc_store_uuid *client, uint16_t tid,
			     bool tenant_found, const struct mc_proto_str *key,
			     const struct mc_proto_opt_u64 *cksum, const uint64_t *sums,
			     uint32_t nsums)
{
	struct mc_master *m = c->m;
	struct mc_obj *o;
	uint64_t pin;
	mc_status st = put_find(c, tid, tenant_found, key, &o);

	if (st != MC_OK)
		return st;
	if (!(o->flags & MC_OBJ_PROC))
		return MC_OK; /* already complete: idempotent */
	if ((st = put_check_writer(c, client, o, key)) != MC_OK)
		return st;
	pin = mc_master_proc_of(m, o)->pin;
	/* an object with a trailer keeps its chunk sums there, and its
	 * checksum is the trailer's */
	if (nsums && (!cksum || !cksum->present || mc_obj_trailer(o) ||
		      nsums != mc_store_chunk_count(mc_obj_size(o))))
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "key '%.*s': %u chunk checksums for %" PRIu64 " bytes (want %" PRIu64
			    ", with the object's checksum, and no trailer)",
			    show(key->len), sp(key), nsums, mc_obj_vsize(o),
			    mc_store_chunk_count(mc_obj_vsize(o)));
	if (!mc_master_obj_set_sums(o, cksum && cksum->present, cksum ? cksum->value : 0, sums,
				    nsums, false))
		return FAIL(c, MC_ERR_NOMEM, "no memory for the checksum");
	mc_master_proc_del(m, o);
	o->t = c->now; /* lease = now: no protection, but LRU recency */
	commit_pins(m, o, c->now, pin);
	mc_master_ssd_put_end(m, o, c->now);
	mc_master_wal_put(m, o);
	return MC_OK;
}

static mc_status put_revoke_one(struct ctx *c, const struct mc_store_uuid *client, uint16_t tid,
				bool tenant_found, const struct mc_proto_str *key)
{
	struct mc_obj *o;
	mc_status st = put_find(c, tid, tenant_found, key, &o);

	if (st != MC_OK)
		return st;
	if (!(o->flags & MC_OBJ_PROC))
		return FAIL(c, MC_ERR_INVALID_WRITE, "key '%.*s' is not being written",
			    show(key->len), sp(key));
	if ((st = put_check_writer(c, client, o, key)) != MC_OK)
		return st;
	mc_master_obj_release_reps(c->m, o);
	mc_master_obj_erase(c->m, o);
	return MC_OK;
}

/* PutEnd/PutRevoke of the DISK replica (type DISK, --root_fs_dir). */
static mc_status fs_finish_one(struct ctx *c, const struct mc_store_uuid *client, uint16_t tid,
			       bool tenant_found, const struct mc_proto_str *key, bool end,
			       const struct mc_proto_opt_u64 *id)
{
	struct mc_obj *o;
	uint32_t slot;
	mc_status st = put_find(c, tid, tenant_found, key, &o);

	if (st != MC_OK)
		return st;
	if (!mc_master_client_find(c->m, client, &slot))
		return FAIL(c, MC_ERR_ILLEGAL_CLIENT, "key '%.*s' was written by another client",
			    show(key->len), sp(key));
	return mc_master_fs_end(c->m, slot, o, end, id, c->err, ERR_LEN);
}

/* PutEnd(ALL) of an object with a DISK replica: its writer writes no file
 * (it ends with MEMORY when it does), so the DISK replica goes. */
static void fs_end_all(struct ctx *c, uint16_t tid, bool tenant_found,
		       const struct mc_proto_str *key)
{
	struct mc_obj *o;

	if (c->m->fs_seg == UINT32_MAX || !tenant_found || key->len == 0 ||
	    key->len > MC_STORE_KEY_MAX)
		return;
	o = mc_master_obj_find(c->m, tid, sp(key), key->len);
	if (o && !(o->flags & MC_OBJ_PROC))
		mc_master_fs_drop_pending(c->m, o, true);
}

mc_status mc_master_h_put_end(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_put_end_req *r = &q->body.put_end_req;
	const uint16_t type = q->hdr.type;
	bool found;
	uint16_t tid = mc_master_tenant_find(c->m, sp(&r->tenant), r->tenant.len, &found);
	mc_status st = check_type(c, r->replica_type);

	if (st == MC_OK && r->replica_type == MC_STORE_REPLICA_DISK)
		st = fs_finish_one(c, &r->client_id, tid, found, &r->key, true, &r->replica_id);
	else if (st == MC_OK)
		st = put_end_one(c, &r->client_id, tid, found, &r->key, &r->checksum, r->chunk_sums,
				 r->n_chunk_sums);
	if (st == MC_OK && r->replica_type == MC_STORE_REPLICA_ALL)
		fs_end_all(c, tid, found, &r->key);
	if (st != MC_OK)
		return st;
	return mc_store_response_encode(c->out, type, c->id, NULL);
}

mc_status mc_master_h_put_revoke(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_put_revoke_req *r = &q->body.put_revoke_req;
	const uint16_t type = q->hdr.type;
	bool found;
	uint16_t tid = mc_master_tenant_find(c->m, sp(&r->tenant), r->tenant.len, &found);
	mc_status st = check_type(c, r->replica_type);

	if (st == MC_OK && r->replica_type == MC_STORE_REPLICA_DISK)
		st = fs_finish_one(c, &r->client_id, tid, found, &r->key, false, &r->replica_id);
	else if (st == MC_OK)
		st = put_revoke_one(c, &r->client_id, tid, found, &r->key);
	if (st != MC_OK)
		return st;
	return mc_store_response_encode(c->out, type, c->id, NULL);
}

/*
 * BatchPutEnd (end: items, with checksums) and BatchPutRevoke (keys): one
 * status per entry; per-entry causes are not reported.
 */
static mc_status batch_put_finish(struct ctx *c, const struct mc_store_uuid *client,
				  const struct mc_proto_str *tenant, uint8_t replica_type,
				  uint32_t n, const struct mc_store_object_meta *items,
				  const struct mc_store_chunk_sums *chunks, uint32_t nchunks,
				  const struct mc_proto_str *keys, bool end, uint16_t type)
{
	struct mc_store_batch_status_resp resp = {n, NULL};
	bool found;
	uint16_t tid = mc_master_tenant_find(c->m, sp(tenant), tenant->len, &found);
	uint32_t nfail = 0;
	char *keep = c->err, scratch_err[ERR_LEN];
	mc_status st = check_type(c, replica_type);

	if (st == MC_OK)
		st = end ? mc_master_status_list(c, n, items, "item", &resp.statuses)
			 : mc_master_status_list(c, n, keys, "key", &resp.statuses);
	if (st == MC_OK && nchunks && nchunks != n)
		st = FAIL(c, MC_ERR_INVALID_PARAMS, "%u chunk checksum lists for %u items", nchunks,
			  n);
	if (st != MC_OK)
		return st;
	c->err = scratch_err;
	for (uint32_t i = 0; i < n; i++) {
		if (replica_type == MC_STORE_REPLICA_DISK)
			resp.statuses[i] = fs_finish_one(c, client, tid, found,
							 end ? &items[i].key : &keys[i], end, NULL);
		else
			resp.statuses[i] =
				end ? put_end_one(c, client, tid, found, &items[i].key,
						  &items[i].checksum, nchunks ? chunks[i].v : NULL,
						  nchunks ? chunks[i].n : 0)
				    : put_revoke_one(c, client, tid, found, &keys[i]);
		if (end && replica_type == MC_STORE_REPLICA_ALL && resp.statuses[i] == MC_OK)
			fs_end_all(c, tid, found, &items[i].key);
		nfail += resp.statuses[i] != MC_OK;
	}
	c->err = keep;
	mc_master_batch_count(end ? &c->m->met.master_batch_put_end
				  : &c->m->met.master_batch_put_revoke,
			      n, nfail);
	return mc_store_response_encode(c->out, type, c->id, &resp);
}

mc_status mc_master_h_batch_put_end(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_batch_put_end_req *r = &q->body.batch_put_end_req;
	const uint16_t type = q->hdr.type;
	return batch_put_finish(c, &r->client_id, &r->tenant, r->replica_type, r->n_items, r->items,
				r->chunks, r->n_chunks, NULL, true, type);
}

mc_status mc_master_h_batch_put_revoke(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_batch_put_revoke_req *r = &q->body.batch_put_revoke_req;
	const uint16_t type = q->hdr.type;
	return batch_put_finish(c, &r->client_id, &r->tenant, r->replica_type, r->n_keys, NULL,
				NULL, 0, r->keys, false, type);
}

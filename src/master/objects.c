/*
 * master/objects.c - the master's tables: objects, segments, clients,
 * tenants, groups, in-flight puts, soft pins and parked (discarded) space;
 * plus what runs over them: the unmount sweep, the admin queries and the
 * metrics snapshot (eviction and mc_master_tick are in tick.c).  The
 * request handlers are in master.c and put.c.
 *
 * Object table.  One open-addressing hash table (linear probing, load kept
 * at or below 3/4, backward-shift deletion, so no tombstones) of 8-byte
 * slots.  A slot is the object's pointer in the low 48 bits and the top 16
 * bits of the key's hash in the high 16 (user-space pointers on x86-64 and
 * arm64 fit in 48 bits; mc_master_obj_insert asserts it), so a probe that
 * meets another key almost never touches that object's memory.  The hash
 * is XXH3 of the key, seeded per master and per tenant, so tenants are
 * separate namespaces without storing the tenant name per object.  The
 * table doubles when an insert would pass 3/4 load and halves (in the
 * tick) under 1/8, and either resize is incremental (table.c, "Incremental
 * resize"): a rehash of 10 M objects costs about a second of pointer
 * chasing, which must not land on one request, nor may a slice of it that
 * grows with the table (each insert moves a few slots, the tick moves
 * slots for 1 ms).  The regex calls, RemoveAll and the
 * unmount sweep scan in steps with other requests between them, and the
 * admin key listing in one step, through a cursor over the hash space that
 * needs no settled table (see "scan cursor").
 *
 * Object memory.  One allocation per object with the key inline, and
 * nothing in it that only some objects need:
 *
 *     t 8 | r0 {addr 8, seg 4, gen 4} | ext 8 | aux 4 | group 4 |
 *     size 6 | tenant 2 | key_len 2 | flags 1 | nrep 1
 *     = 52 bytes of header, then key_len bytes of key (no NUL).
 *
 * A glibc chunk is the request plus 8, rounded up to 16, so a 20-byte key
 * makes a 72-byte request in an 80-byte chunk.  The table adds 8 / load =
 * 10.7 to 16 bytes per object (13.4 at 10 M objects in 2^24 slots).  The
 * segment allocator adds its 32-byte block record and 8-16 bytes of address
 * hash per replica (alloc.c, "Memory").  Budget for 10 M one-replica
 * objects with 20-byte keys: 80 + 13.4 + ~46 = ~140 bytes; measured with
 * bench/master_mem_bench.c: 139 (20-byte keys), 171 (40), 187 (64), all
 * under the 200-byte target.  Kept out of the object: the replicas beyond
 * the first and the checksum (ext, only when present); UUIDs and strings
 * (segments, clients, tenants and groups are interned, objects hold
 * u16/u32 indices); the pending soft-pin action of an in-flight put
 * (struct mc_proc in m->proc); a soft-pin deadline (struct mc_pin in
 * m->pins).  The writer's client slot (BatchReplicaClear clears only what
 * a client wrote) costs no byte: aux holds it unless aux is busy as the
 * m->proc or m->pins index, and then that entry holds it; a client slot
 * stays taken while it is the writer of any object (mc_client.nobjs).
 * Values are limited to 2^47 - 1 bytes (128 TiB): the size's top bit says
 * whether the replicas end in a chunk-sum trailer (MC_OBJ_HI_TRAILER).
 *
 * Replicas are weak references.  A replica names a segment slot and the
 * slot's generation; unmount (explicit, graceful deadline, client expiry)
 * bumps the generation and drops the allocator, so every replica there is
 * unreadable at that instant, and an object left with no live replica is
 * absent at once (mc_master_obj_gone); the sweep (see "sweep after
 * unmount") then drops the dead replicas and erases the gone objects in
 * slices, and until it reaches one, a request that changes or completes
 * it does so itself (mc_master_obj_find_live: a PutEnd of an in-flight put
 * whose replicas died fails with OBJECT_NOT_FOUND).
 *
 * Object state.  An object is either being written (MC_OBJ_PROC: every
 * replica PROCESSING, t = PutStart time, aux = index in m->proc) or
 * complete (every replica COMPLETE, t = lease deadline, which is also the
 * LRU key).  In-flight puts sit in m->proc, a dense array, so client expiry
 * and the zombie scan visit only them.  Soft-pinned complete objects sit
 * in m->pins, a min-heap on their deadline (aux = heap index), which is the
 * deadline index of spec 2.7.
 *
 * Eviction and the tick (mc_master_tick) are in tick.c.
 */
#define MC_LOG_MODULE "master"
#include "master/master_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "base/log.h"
#include "base/time.h"
#include "mooncake/version.h"

MC_STATIC_ASSERT(offsetof(struct mc_obj, key) == 52, "object header is 52 bytes");

const uint64_t mc_master_value_size_bounds[MC_MASTER_VALUE_SIZE_BUCKETS - 1] = {
	4096, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
};

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */

bool mc_master_grow(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
	uint32_t ncap;
	void *p;

	if (need <= *cap)
		return true;
	ncap = *cap ? *cap : 8;
	while (ncap < need) {
		if (ncap > UINT32_MAX / 2)
			return false;
		ncap *= 2;
	}
	p = mc_realloc(*arr, (size_t)ncap * elem);
	if (!p)
		return false;
	*arr = p;
	*cap = ncap;
	return true;
}

void *mc_master_scratch(struct mc_master *m, size_t n)
{
	if (n > m->iscratch_cap) {
		size_t c = m->iscratch_cap ? m->iscratch_cap : 256;
		void *p;

		while (c < n)
			c *= 2;
		p = mc_realloc(m->iscratch, c);
		if (!p)
			return NULL;
		m->iscratch = p;
		m->iscratch_cap = c;
	}
	return m->iscratch;
}

mc_status mc_master_rscratch(struct mc_master *m, uint32_t n)
{
	return mc_master_grow((void **)&m->rscratch, &m->rscratch_cap, n, sizeof(*m->rscratch))
		       ? MC_OK
		       : MC_ERR_NOMEM;
}

static inline bool uuid_eq(const struct mc_store_uuid *a, const struct mc_store_uuid *b)
{
	return a->first == b->first && a->second == b->second;
}

/* ------------------------------------------------------------------------ */
/* tenants                                                                   */

uint16_t mc_master_tenant_find(struct mc_master *m, const char *name, size_t len, bool *found_out)
{
	*found_out = true;
	if (!m->cfg.enable_multi_tenants || len == 0)
		return 0;
	for (uint32_t i = 0; i < m->ntenants; i++) {
		if (m->tenant_lens[i] == len && memcmp(m->tenants[i], name, len) == 0)
			return (uint16_t)i;
	}
	*found_out = false;
	return 0;
}

mc_status mc_master_tenant_intern(struct mc_master *m, const char *name, size_t len,
				  uint16_t *id_out)
{
	bool found;
	uint16_t id = mc_master_tenant_find(m, name, len, &found);
	uint32_t cap = m->ntenants;
	char *copy;

	if (found) {
		*id_out = id;
		return MC_OK;
	}
	if (m->ntenants >= MC_MASTER_MAX_TENANTS)
		return MC_ERR_INVALID_PARAMS;
	copy = mc_strndup(name, len);
	if (!copy)
		return MC_ERR_NOMEM;
	if (!mc_master_grow((void **)&m->tenants, &cap, m->ntenants + 1, sizeof(char *))) {
		mc_free(copy);
		return MC_ERR_NOMEM;
	}
	cap = m->ntenants;
	if (!mc_master_grow((void **)&m->tenant_lens, &cap, m->ntenants + 1, sizeof(uint32_t))) {
		mc_free(copy);
		return MC_ERR_NOMEM;
	}
	m->tenants[m->ntenants] = copy;
	m->tenant_lens[m->ntenants] = (uint32_t)len;
	*id_out = (uint16_t)m->ntenants++;
	return MC_OK;
}

struct mc_rep *mc_master_obj_rep(struct mc_obj *o, uint32_t i)
{
	return i == 0 ? &o->r0
		      : &((struct mc_rep *)(void *)(o->ext->tail + o->ext->nchunks))[i - 1];
}

bool mc_master_rep_live(const struct mc_master *m, const struct mc_rep *r)
{
	const struct mc_seg *s;

	if (r->seg >= m->nsegs_slots)
		return false;
	s = &m->segs[r->seg];
	return s->state != MC_SEG_FREE && s->state != MC_SEG_WAIT && s->gen == r->gen;
}

bool mc_master_obj_readable(const struct mc_master *m, const struct mc_obj *o)
{
	if (o->flags & MC_OBJ_PROC)
		return false;
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep((struct mc_obj *)o, i);

		if (mc_master_rep_live(m, r) && !mc_master_rep_fs_pending(m, r))
			return true;
	}
	return false;
}

/* Live, or replayed from the log and waiting for its segment (wal_log.c):
 * not readable, but not to be dropped either. */
static inline bool rep_kept(const struct mc_master *m, const struct mc_rep *r)
{
	return mc_master_rep_live(m, r) ||
	       (m->nwait && r->seg < m->nsegs_slots && m->segs[r->seg].state == MC_SEG_WAIT &&
		m->segs[r->seg].gen == r->gen);
}

bool mc_master_obj_gone(const struct mc_master *m, const struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		if (rep_kept(m, mc_master_obj_rep((struct mc_obj *)o, i)))
			return false;
	}
	return true;
}

uint32_t mc_master_obj_prune(struct mc_master *m, struct mc_obj *o)
{
	uint32_t i = 0, n;

	while (i < o->nrep && rep_kept(m, mc_master_obj_rep(o, i)))
		i++;
	if (i == o->nrep)
		return i; /* all live: the object is not written to */
	uint32_t lost = 0;

	for (n = i; i < o->nrep; i++) {
		struct mc_rep r = *mc_master_obj_rep(o, i);

		if (rep_kept(m, &r))
			*mc_master_obj_rep(o, n++) = r;
		else if (r.addr != 0 && !mc_master_rep_fs(m, &r))
			lost++; /* a memory replica (LOCAL_DISK ones have addr 0) */
	}
	o->nrep = (uint8_t)n;
	if (lost && n)
		mc_master_repair_note(m, o, lost);
	return n;
}

struct mc_obj *mc_master_obj_find_live(struct mc_master *m, uint16_t tenant, const char *key,
				       size_t len)
{
	struct mc_obj *o = mc_master_obj_find(m, tenant, key, len);

	if (o && mc_master_obj_prune(m, o) == 0) {
		mc_master_obj_erase(m, o); /* what the sweep would do: nothing is left to free */
		return NULL;
	}
	return o;
}

static void rep_release(struct mc_master *m, const struct mc_rep *r, uint64_t size)
{
	struct mc_seg *s;

	if (!mc_master_rep_live(m, r) || mc_master_rep_disk(m, r))
		return; /* gone already, or a LOCAL_DISK replica: nothing allocated here */
	s = &m->segs[r->seg];
	if (mc_offset_alloc_release(s->alloc, r->addr) != MC_OK) {
		mc_error("replica at 0x%" PRIx64 " on segment %s was not a live block", r->addr,
			 s->name);
		return;
	}
	s->used -= size;
	m->allocated_bytes -= size;
}

void mc_master_obj_release_reps(struct mc_master *m, struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_disk(m, r) && mc_master_rep_live(m, r))
			mc_master_ssd_rep_gone(m, o, r);
		rep_release(m, r, mc_obj_size(o));
	}
	o->nrep = 0;
}

uint32_t mc_master_obj_release_mem_reps(struct mc_master *m, struct mc_obj *o)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep r = *mc_master_obj_rep(o, i);

		if (mc_master_rep_disk(m, &r) && mc_master_rep_live(m, &r))
			*mc_master_obj_rep(o, n++) = r;
		else
			rep_release(m, &r, mc_obj_size(o));
	}
	o->nrep = (uint8_t)n;
	return n;
}

bool mc_master_obj_ext_fit(struct mc_obj *o, uint32_t n)
{
	struct mc_obj_ext *e;

	if (n <= 1 && !(o->flags & MC_OBJ_CKSUM)) {
		mc_free(o->ext);
		o->ext = NULL;
		return true;
	}
	e = mc_realloc(o->ext, sizeof(*e) + (o->ext ? o->ext->nchunks : 0) * sizeof(uint64_t) +
				       (n ? n - 1 : 0) * sizeof(struct mc_rep));
	if (!e)
		return false;
	if (!o->ext) {
		e->checksum = 0;
		e->nchunks = 0;
		e->unused = 0;
	}
	o->ext = e;
	return true;
}

bool mc_master_obj_set_sums(struct mc_obj *o, bool has_cksum, uint64_t cksum, const void *sums,
			    uint32_t nchunks, bool le)
{
	uint32_t extra = o->nrep > 1 ? o->nrep - 1u : 0, old = o->ext ? o->ext->nchunks : 0;
	struct mc_obj_ext *e;

	if (!has_cksum || !sums)
		nchunks = 0;
	if (o->ext && old != nchunks) {
		/* the replicas move: to the front first when the list shrinks */
		if (nchunks < old)
			memmove(o->ext->tail + nchunks, o->ext->tail + old,
				extra * sizeof(struct mc_rep));
		e = mc_realloc(o->ext, sizeof(*e) + nchunks * sizeof(uint64_t) +
					       extra * sizeof(struct mc_rep));
		if (!e) {
			if (nchunks < old) { /* cannot be: a shrink */
				o->ext->nchunks = nchunks;
				return true;
			}
			/* no room for the list: keep the object, unchecked */
			o->flags &= (uint8_t)~MC_OBJ_CKSUM;
			return false;
		}
		if (nchunks > old)
			memmove(e->tail + nchunks, e->tail + old, extra * sizeof(struct mc_rep));
		e->nchunks = nchunks;
		o->ext = e;
	}
	if (!has_cksum) {
		o->flags &= (uint8_t)~MC_OBJ_CKSUM;
		(void)mc_master_obj_ext_fit(o, o->nrep); /* shrinking never fails */
		return true;
	}
	o->flags |= MC_OBJ_CKSUM;
	if (!o->ext) {
		e = mc_calloc(1, sizeof(*e) + nchunks * sizeof(uint64_t));
		if (!e) {
			o->flags &= (uint8_t)~MC_OBJ_CKSUM;
			return false;
		}
		e->nchunks = nchunks;
		o->ext = e;
	}
	o->ext->checksum = cksum;
	for (uint32_t i = 0; i < nchunks; i++)
		o->ext->tail[i] = le ? mc_get_le64((const uint8_t *)sums + 8 * (size_t)i)
				     : ((const uint64_t *)sums)[i];
	return true;
}

const uint64_t *mc_master_obj_chunks(const struct mc_obj *o, uint32_t *n)
{
	*n = (o->flags & MC_OBJ_CKSUM) && o->ext ? o->ext->nchunks : 0;
	return *n ? o->ext->tail : NULL;
}

uint32_t mc_master_obj_drop_seg_reps(struct mc_master *m, struct mc_obj *o, const char *name,
				     size_t len)
{
	uint32_t n = 0, dropped = 0;

	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep r = *mc_master_obj_rep(o, i);
		const struct mc_seg *s = &m->segs[r.seg];

		if (mc_master_rep_live(m, &r) && !mc_master_rep_disk(m, &r) && s->name_len == len &&
		    !memcmp(s->name, name, len)) {
			rep_release(m, &r, mc_obj_size(o));
			dropped++;
			continue;
		}
		*mc_master_obj_rep(o, n++) = r;
	}
	o->nrep = (uint8_t)n;
	return dropped;
}

void mc_master_block_release(struct mc_master *m, const struct mc_rep *r, uint64_t size)
{
	rep_release(m, r, size);
}

void mc_master_block_park(struct mc_master *m, const struct mc_rep *r, uint64_t size,
			  uint64_t now_ms)
{
	mc_master_block_park_until(m, r, size, now_ms + m->cfg.put_start_release_timeout_ms);
}

void mc_master_block_park_until(struct mc_master *m, const struct mc_rep *r, uint64_t size,
				uint64_t release_at)
{
	struct mc_discarded *d;

	if (!mc_master_rep_live(m, r) || mc_master_rep_disk(m, r))
		return;
	if (!mc_master_grow((void **)&m->disc, &m->disc_cap, m->ndisc + 1, sizeof(*m->disc))) {
		/* cannot park it: release now rather than leak it */
		rep_release(m, r, size);
		return;
	}
	d = &m->disc[m->ndisc++];
	d->addr = r->addr;
	d->size = size;
	d->seg = r->seg;
	d->gen = r->gen;
	d->release_at = release_at; /* the FIFO's order may lag: later is safe */
	m->disc_bytes += size;
}

/* Let go of o's replica r: a LOCAL_DISK one is the owner's to delete, a
 * memory block is parked until put_start_release_timeout (a reader may
 * still be reading it); true when a block was parked. */
static bool park_rep(struct mc_master *m, struct mc_obj *o, const struct mc_rep *r, uint64_t now_ms)
{
	uint64_t before = m->ndisc;

	if (!mc_master_rep_live(m, r))
		return false;
	if (mc_master_rep_disk(m, r)) { /* nothing to park: the owner deletes it */
		mc_master_ssd_rep_gone(m, o, r);
		return false;
	}
	mc_master_block_park(m, r, mc_obj_size(o), now_ms);
	return m->ndisc != before;
}

void mc_master_obj_discard_reps(struct mc_master *m, struct mc_obj *o, uint64_t now_ms)
{
	bool parked = false;

	for (uint32_t i = 0; i < o->nrep; i++)
		parked |= park_rep(m, o, mc_master_obj_rep(o, i), now_ms);
	if (parked)
		m->met.put_start_discard_cnt++;
	o->nrep = 0;
}

void mc_master_obj_drop_rep(struct mc_master *m, struct mc_obj *o, uint32_t i, uint64_t now_ms)
{
	(void)park_rep(m, o, mc_master_obj_rep(o, i), now_ms);
	for (; i + 1 < o->nrep; i++)
		*mc_master_obj_rep(o, i) = *mc_master_obj_rep(o, i + 1);
	o->nrep--;
}

void mc_master_grant_lease(struct mc_master *m, struct mc_obj *o, uint64_t now_ms)
{
	uint64_t ttl = m->cfg.default_kv_lease_ttl_ms;
	uint64_t d = now_ms + ttl;
	const struct mc_group *g;

	if (o->t < d)
		o->t = d;
	g = mc_master_group_of(m, o);
	if (!g)
		return;
	for (uint32_t i = 0; i < g->nmem; i++) {
		struct mc_obj *x = g->mem[i];

		/* refreshed only when within half a TTL of expiring (spec 2.6) */
		if (!(x->flags & MC_OBJ_PROC) && x->t < now_ms + ttl / 2)
			x->t = d;
	}
}

void mc_master_lease_all(struct mc_master *m, uint64_t now_ms)
{
	m->lease_floor_ms = now_ms + m->cfg.default_kv_lease_ttl_ms;
}

/* ---- in-flight puts ---- */

void mc_master_proc_add(struct mc_master *m, struct mc_obj *o, uint32_t writer, uint64_t pin)
{
	/* the caller reserved room (proc_cap > nproc) before creating o */
	mc_assert(m->nproc < m->proc_cap);
	mc_assert(!(o->flags & MC_OBJ_PROC));
	/* aux holds the previous writer (NO_CLIENT for a new object) */
	if (o->aux < m->nclient_slots && m->clients[o->aux].nobjs > 0)
		m->clients[o->aux].nobjs--;
	if (writer < m->nclient_slots)
		m->clients[writer].nobjs++;
	o->aux = m->nproc;
	m->proc[m->nproc].o = o;
	m->proc[m->nproc].pin = pin;
	m->proc[m->nproc].writer = writer;
	m->nproc++;
	o->flags |= MC_OBJ_PROC;
	if (writer < m->nclient_slots)
		m->clients[writer].nproc++;
}

void mc_master_proc_del(struct mc_master *m, struct mc_obj *o)
{
	uint32_t i = o->aux;
	uint32_t writer;

	mc_assert(i < m->nproc && m->proc[i].o == o);
	writer = m->proc[i].writer;
	m->proc[i] = m->proc[--m->nproc];
	m->proc[i].o->aux = i;
	o->aux = writer; /* kept: BatchReplicaClear checks it */
	o->flags &= (uint8_t)~MC_OBJ_PROC;
	if (writer < m->nclient_slots && m->clients[writer].nproc > 0)
		m->clients[writer].nproc--;
}

bool mc_master_proc_reserve(struct mc_master *m, uint32_t n)
{
	return mc_master_grow((void **)&m->proc, &m->proc_cap, m->nproc + n, sizeof(*m->proc));
}

/* ---- soft-pin heap ---- */

static void pin_swap(struct mc_master *m, uint32_t a, uint32_t b)
{
	struct mc_pin t = m->pins[a];

	m->pins[a] = m->pins[b];
	m->pins[b] = t;
	m->pins[a].o->aux = a;
	m->pins[b].o->aux = b;
}

static void pin_up(struct mc_master *m, uint32_t i)
{
	while (i > 0) {
		uint32_t p = (i - 1) / 2;

		if (m->pins[p].deadline <= m->pins[i].deadline)
			break;
		pin_swap(m, p, i);
		i = p;
	}
}

static void pin_down(struct mc_master *m, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, s = i;

		if (l < m->npins && m->pins[l].deadline < m->pins[s].deadline)
			s = l;
		if (r < m->npins && m->pins[r].deadline < m->pins[s].deadline)
			s = r;
		if (s == i)
			break;
		pin_swap(m, s, i);
		i = s;
	}
}

void mc_master_pin_add(struct mc_master *m, struct mc_obj *o, uint64_t deadline)
{
	if (!mc_master_grow((void **)&m->pins, &m->pins_cap, m->npins + 1, sizeof(*m->pins))) {
		/* no room in the index: the object stays an ordinary cache entry */
		mc_warn("no memory for the soft-pin index; %.*s is not pinned", (int)o->key_len,
			o->key);
		o->flags &= (uint8_t)~MC_OBJ_SOFT;
		return;
	}
	mc_assert(!(o->flags & MC_OBJ_PROC)); /* aux is the writer */
	o->flags |= MC_OBJ_SOFT;
	m->pins[m->npins].writer = o->aux;
	o->aux = m->npins;
	m->pins[m->npins].deadline = deadline;
	m->pins[m->npins].o = o;
	m->npins++;
	pin_up(m, o->aux);
}

void mc_master_pin_del(struct mc_master *m, struct mc_obj *o)
{
	uint32_t i = o->aux, writer;

	mc_assert(i < m->npins && m->pins[i].o == o);
	writer = m->pins[i].writer;
	m->npins--;
	if (i != m->npins) {
		pin_swap(m, i, m->npins);
		pin_down(m, i);
		pin_up(m, i);
	}
	o->aux = writer;
	o->flags &= (uint8_t)~MC_OBJ_SOFT;
}

/* ---- groups ---- */

static void group_free(struct mc_master *m, struct mc_group *g);

static uint64_t group_hash(const struct mc_master *m, uint16_t tenant, const char *name, size_t len)
{
	return XXH3_64bits_withSeed(name, len, m->group_seed + tenant);
}

struct mc_group *mc_master_group_of(const struct mc_master *m, const struct mc_obj *o)
{
	if (o->group == 0 || o->group > m->ngslots)
		return NULL;
	return m->gslots[o->group - 1];
}

static mc_status group_rehash(struct mc_master *m, uint32_t nb)
{
	struct mc_group **b = mc_calloc(nb, sizeof(*b));

	if (!b)
		return MC_ERR_NOMEM;
	for (uint32_t i = 0; m->gbuckets && i <= m->gmask; i++) {
		struct mc_group *g = m->gbuckets[i], *next;

		for (; g; g = next) {
			next = g->next;
			g->next = b[g->hash & (nb - 1)];
			b[g->hash & (nb - 1)] = g;
		}
	}
	mc_free(m->gbuckets);
	m->gbuckets = b;
	m->gmask = nb - 1;
	return MC_OK;
}

mc_status mc_master_group_join(struct mc_master *m, uint16_t tenant, const char *name, size_t len,
			       struct mc_obj *o)
{
	uint64_t h = group_hash(m, tenant, name, len);
	struct mc_group *g;
	uint32_t slot;

	if (!m->gbuckets && group_rehash(m, 64) != MC_OK)
		return MC_ERR_NOMEM;
	for (g = m->gbuckets[h & m->gmask]; g; g = g->next) {
		if (g->hash == h && g->tenant == tenant && g->name_len == len &&
		    memcmp(g->name, name, len) == 0)
			break;
	}
	if (!g) {
		if (m->ngroups + 1 > m->gmask + 1 && group_rehash(m, (m->gmask + 1) * 2) != MC_OK)
			return MC_ERR_NOMEM;
		if (!m->ngfree && !mc_master_grow((void **)&m->gslots, &m->gslots_cap,
						  m->ngslots + 1, sizeof(*m->gslots)))
			return MC_ERR_NOMEM;
		g = mc_calloc(1, sizeof(*g) + len + 1);
		if (!g)
			return MC_ERR_NOMEM;
		g->hash = h;
		g->tenant = tenant;
		g->name_len = (uint32_t)len;
		memcpy(g->name, name, len);
		slot = m->ngfree ? m->gfree[--m->ngfree] : m->ngslots++;
		g->slot = slot;
		m->gslots[slot] = g;
		g->next = m->gbuckets[h & m->gmask];
		m->gbuckets[h & m->gmask] = g;
		m->ngroups++;
	}
	if (!mc_master_grow((void **)&g->mem, &g->cap, g->nmem + 1, sizeof(*g->mem))) {
		if (g->nmem == 0)
			group_free(m, g);
		return MC_ERR_NOMEM;
	}
	g->mem[g->nmem++] = o;
	o->group = g->slot + 1;
	return MC_OK;
}

static void group_free(struct mc_master *m, struct mc_group *g)
{
	struct mc_group **pp = &m->gbuckets[g->hash & m->gmask];

	while (*pp != g)
		pp = &(*pp)->next;
	*pp = g->next;
	m->gslots[g->slot] = NULL;
	if (mc_master_grow((void **)&m->gfree, &m->gfree_cap, m->ngfree + 1, sizeof(uint32_t)))
		m->gfree[m->ngfree++] = g->slot;
	m->ngroups--;
	mc_free(g->mem);
	mc_free(g);
}

static void group_leave(struct mc_master *m, struct mc_obj *o)
{
	struct mc_group *g = mc_master_group_of(m, o);

	o->group = 0;
	if (!g)
		return;
	for (uint32_t i = 0; i < g->nmem; i++) {
		if (g->mem[i] == o) {
			g->mem[i] = g->mem[--g->nmem];
			break;
		}
	}
	if (g->nmem == 0)
		group_free(m, g);
}

void mc_master_obj_erase(struct mc_master *m, struct mc_obj *o)
{
	mc_master_wal_del(m, o);
	if (m->tasks)
		mc_master_task_obj_gone(m, o);
	mc_master_table_delete(m, o);
	if (o->flags & MC_OBJ_OFFL)
		mc_master_ssd_obj_gone(m, o);
	if (o->flags & MC_OBJ_PROC)
		mc_master_proc_del(m, o);
	else if (o->flags & MC_OBJ_SOFT)
		mc_master_pin_del(m, o);
	/* aux is now the writer */
	if (o->aux < m->nclient_slots && m->clients[o->aux].nobjs > 0)
		m->clients[o->aux].nobjs--;
	group_leave(m, o);
	if (m->nwait && mc_master_wal_keep_dead(m, o))
		return;
	mc_free(o->ext);
	mc_free(o);
}

mc_status mc_master_remove_obj(struct mc_master *m, struct mc_obj *o, bool force, uint64_t now_ms)
{
	if (o->flags & MC_OBJ_PROC)
		return MC_ERR_REPLICA_IS_NOT_READY;
	if (!force && mc_master_leased(m, o, now_ms))
		return MC_ERR_OBJECT_HAS_LEASE;
	if ((o->flags & MC_OBJ_OFFL) || mc_master_task_busy(m, o))
		return MC_ERR_OBJECT_HAS_REPLICATION_TASK; /* a copy reads its memory replica */
	mc_master_spoil_park(m, o, 0, now_ms); /* leased: parked for the remover to spoil */
	mc_master_obj_release_reps(m, o);
	mc_master_obj_erase(m, o);
	return MC_OK;
}

/* ------------------------------------------------------------------------ */
/* clients                                                                   */

struct mc_client *mc_master_client_find(struct mc_master *m, const struct mc_store_uuid *id,
					uint32_t *slot_out)
{
	uint32_t c = m->last_client;

	if (c < m->nclient_slots && m->clients[c].used && uuid_eq(&m->clients[c].id, id)) {
		*slot_out = c;
		return &m->clients[c];
	}
	for (uint32_t i = 0; i < m->nclient_slots; i++) {
		if (m->clients[i].used && uuid_eq(&m->clients[i].id, id)) {
			m->last_client = i;
			*slot_out = i;
			return &m->clients[i];
		}
	}
	return NULL;
}

mc_status mc_master_client_intern(struct mc_master *m, const struct mc_store_uuid *id,
				  uint32_t *slot_out)
{
	uint32_t slot = UINT32_MAX;

	if (mc_master_client_find(m, id, slot_out))
		return MC_OK;
	for (uint32_t i = 0; i < m->nclient_slots; i++) {
		if (!m->clients[i].used) {
			slot = i;
			break;
		}
	}
	if (slot == UINT32_MAX) {
		if (m->nclient_slots >= MC_MASTER_NO_CLIENT - 1 ||
		    !mc_master_grow((void **)&m->clients, &m->clients_cap, m->nclient_slots + 1,
				    sizeof(*m->clients)))
			return MC_ERR_NOMEM;
		slot = m->nclient_slots++;
	}
	memset(&m->clients[slot], 0, sizeof(m->clients[slot]));
	m->clients[slot].id = *id;
	m->clients[slot].used = true;
	*slot_out = slot;
	return MC_OK;
}

/* ------------------------------------------------------------------------ */
/* segments                                                                  */

struct mc_seg *mc_master_seg_find(struct mc_master *m, const struct mc_store_uuid *id,
				  uint32_t *slot_out)
{
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		if (m->segs[i].state != MC_SEG_FREE && m->segs[i].state != MC_SEG_DISK &&
		    m->segs[i].state != MC_SEG_WAIT && uuid_eq(&m->segs[i].id, id)) {
			*slot_out = i;
			return &m->segs[i];
		}
	}
	return NULL;
}

static void seg_strings_free(struct mc_seg *s)
{
	mc_free(s->name);
	mc_free(s->te_endpoint);
	mc_free(s->protocol);
	mc_free(s->host_id);
	s->name = s->te_endpoint = s->protocol = s->host_id = NULL;
}

uint32_t mc_master_seg_slot_new(struct mc_master *m)
{
	uint32_t slot;

	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		if (m->segs[i].state == MC_SEG_FREE)
			return i;
	}
	if (!mc_master_grow((void **)&m->segs, &m->segs_cap, m->nsegs_slots + 1, sizeof(*m->segs)))
		return UINT32_MAX;
	slot = m->nsegs_slots;
	memset(&m->segs[slot], 0, sizeof(m->segs[slot]));
	m->nsegs_slots++;
	return slot;
}

mc_status mc_master_seg_mount_disk(struct mc_master *m, uint32_t client, const char *endpoint,
				   size_t len, uint32_t *slot_out)
{
	uint32_t slot = mc_master_seg_slot_new(m);
	struct mc_seg *s;

	if (slot == UINT32_MAX)
		return MC_ERR_NOMEM;
	s = &m->segs[slot];
	s->name = mc_strdup("");
	s->te_endpoint = mc_strndup(endpoint ? endpoint : "", len);
	s->protocol = mc_strdup("");
	s->host_id = mc_strdup("");
	if (!s->name || !s->te_endpoint || !s->protocol || !s->host_id) {
		seg_strings_free(s);
		return MC_ERR_NOMEM;
	}
	s->name_len = s->proto_len = 0;
	s->te_len = (uint32_t)len;
	s->id = (struct mc_store_uuid){0, 0};
	s->base = s->size = s->used = 0;
	s->alloc = NULL;
	s->deadline = 0;
	s->mount_seq = ++m->mount_seq;
	s->client = client;
	s->state = MC_SEG_DISK;
	if (client != MC_MASTER_NO_CLIENT) /* else the DISK tier's slot (fs_tier.c) */
		m->clients[client].nsegs++;
	*slot_out = slot;
	return MC_OK;
}

mc_status mc_master_seg_mount(struct mc_master *m, uint32_t client,
			      const struct mc_store_segment *in, uint64_t now_ms)
{
	uint32_t slot = mc_master_wal_waiting(m, in);
	bool waited = slot != UINT32_MAX;
	uint64_t grace = waited ? m->segs[slot].grace_epoch_ms : 0;
	struct mc_seg *s;
	mc_status st;

	if (!waited)
		slot = mc_master_seg_slot_new(m);
	if (slot == UINT32_MAX)
		return MC_ERR_NOMEM;
	s = &m->segs[slot];
	if (waited) {
		/* a segment of the log comes back: its slot and generation, so
		 * the replicas replayed onto it are valid again */
		seg_strings_free(s);
		s->state = MC_SEG_FREE;
		m->nwait--;
	}
	s->name = mc_strndup(in->name.ptr ? in->name.ptr : "", in->name.len);
	s->te_endpoint =
		mc_strndup(in->te_endpoint.ptr ? in->te_endpoint.ptr : "", in->te_endpoint.len);
	s->protocol = mc_strndup(in->protocol.ptr ? in->protocol.ptr : "", in->protocol.len);
	s->host_id = mc_strndup(in->host_id.ptr ? in->host_id.ptr : "", in->host_id.len);
	if (!s->name || !s->te_endpoint || !s->protocol || !s->host_id) {
		st = MC_ERR_NOMEM;
		goto err_strings;
	}
	st = mc_offset_alloc_new(in->base, in->size, MC_MASTER_MIN_ALIGN, &s->alloc);
	if (st != MC_OK)
		goto err_strings;
	s->name_len = in->name.len;
	s->te_len = in->te_endpoint.len;
	s->proto_len = in->protocol.len;
	s->id = in->id;
	s->base = in->base;
	s->size = in->size;
	s->used = 0;
	s->deadline = 0;
	s->grace_epoch_ms = 0;
	s->mount_seq = ++m->mount_seq;
	s->client = client;
	s->state = MC_SEG_MOUNTED;
	s->unreachable = false;
	m->capacity_bytes += mc_offset_alloc_capacity(s->alloc);
	m->clients[client].nsegs++;
	m->targets_dirty = true;
	mc_master_wal_mount(m, slot);
	if (waited)
		mc_master_wal_rebind(m, slot);
	mc_master_repair_wake(m); /* room for repairs that found none */
	mc_master_drain_seg_mounted(m, slot);
	if (grace)
		mc_master_wal_graceful_restore(m, slot, grace, now_ms);
	return MC_OK;

err_strings:
	seg_strings_free(s);
	if (waited) {
		mc_master_wal_list_drop(m, slot);
		if (!m->nwait)
			mc_master_wal_lists_free(m);
		s->gen++; /* its replayed replicas are lost with it */
		m->need_sweep = true;
	}
	return st;
}

static void disc_prune(struct mc_master *m);

void mc_master_seg_unmount(struct mc_master *m, uint32_t slot)
{
	struct mc_seg *s = &m->segs[slot];

	if (s->state == MC_SEG_FREE || s->state == MC_SEG_WAIT)
		return;
	if (s->state == MC_SEG_DISK) {
		/* every LOCAL_DISK replica there dies with the generation */
		s->gen++;
		s->state = MC_SEG_FREE;
		if (s->client < m->nclient_slots && m->clients[s->client].nsegs > 0)
			m->clients[s->client].nsegs--;
		seg_strings_free(s);
		m->need_sweep = true;
		return;
	}
	mc_info("unmounting segment %s (%" PRIu64 "-%" PRIu64 ")", s->name, s->id.first,
		s->id.second);
	mc_master_wal_unmount(m, slot);
	m->capacity_bytes -= mc_offset_alloc_capacity(s->alloc);
	m->allocated_bytes -= s->used;
	mc_offset_alloc_free_with(s->alloc, mc_master_free_later, m);
	s->alloc = NULL;
	s->used = 0;
	s->gen++;
	s->state = MC_SEG_FREE;
	if (s->client < m->nclient_slots && m->clients[s->client].nsegs > 0)
		m->clients[s->client].nsegs--;
	seg_strings_free(s);
	m->targets_dirty = true;
	m->need_sweep = true;
	if (m->ndisc > m->disc_head)
		disc_prune(m); /* O(parked), so at once: discarded bytes stay exact */
}

mc_status mc_master_targets(struct mc_master *m)
{
	uint32_t nt = 0, na = 0;

	if (!m->targets_dirty)
		return MC_OK;
	/* worst case one target and one allocator per segment */
	if (m->nsegs_slots + 1 > m->targets_cap) {
		uint32_t cap = m->nsegs_slots + 1;
		void *p;

		if (!(p = mc_realloc(m->targets, cap * sizeof(*m->targets))))
			return MC_ERR_NOMEM;
		m->targets = p;
		if (!(p = mc_realloc(m->tstart, cap * sizeof(*m->tstart))))
			return MC_ERR_NOMEM;
		m->tstart = p;
		if (!(p = mc_realloc(m->tallocs, cap * sizeof(*m->tallocs))))
			return MC_ERR_NOMEM;
		m->tallocs = p;
		if (!(p = mc_realloc(m->tsegs, cap * sizeof(*m->tsegs))))
			return MC_ERR_NOMEM;
		m->tsegs = p;
		m->targets_cap = cap;
	}
	/* group allocatable segments by name, in slot order */
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		const struct mc_seg *s = &m->segs[i];
		bool seen = false;

		if (s->state != MC_SEG_MOUNTED || s->unreachable)
			continue;
		for (uint32_t j = 0; j < i && !seen; j++) {
			const struct mc_seg *p = &m->segs[j];

			seen = p->state == MC_SEG_MOUNTED && !p->unreachable &&
			       p->name_len == s->name_len &&
			       memcmp(p->name, s->name, s->name_len) == 0;
		}
		if (seen)
			continue;
		m->tstart[nt] = na;
		m->targets[nt].name = s->name;
		for (uint32_t j = i; j < m->nsegs_slots; j++) {
			const struct mc_seg *p = &m->segs[j];

			if (p->state == MC_SEG_MOUNTED && !p->unreachable &&
			    p->name_len == s->name_len &&
			    memcmp(p->name, s->name, s->name_len) == 0) {
				m->tallocs[na] = p->alloc;
				m->tsegs[na] = j;
				na++;
			}
		}
		m->targets[nt].nallocs = na - m->tstart[nt];
		nt++;
	}
	for (uint32_t t = 0; t < nt; t++)
		m->targets[t].allocs = &m->tallocs[m->tstart[t]];
	m->ntargets = nt;
	m->ntallocs = na;
	m->targets_dirty = false;
	return MC_OK;
}

/* ------------------------------------------------------------------------ */
/* sweep after unmount                                                       */

/*
 * An unmount bumps the slot's generation, so its replicas are dead at that
 * instant, and parks nothing: the walk that drops them from their objects
 * and erases the objects left with none runs as a cursor over the table
 * (the same cursor as the regex calls and RemoveAll use), one step at a
 * time, from mc_master_tick and from the daemon's loop between requests,
 * so a table of 100 M objects no longer stops the RPC loop for the length
 * of the walk.  Meanwhile nothing reads a dead replica (mc_master_rep_live
 * guards every reader), an object with no live replica is absent to every
 * request (mc_master_obj_gone: not found, not listed, not evicted), and a
 * request that changes an object drops its dead replicas first and erases
 * it if none is left (mc_master_obj_find_live: the End rule).
 *
 * A lap visits every bucket of the hash space once.  Each step prunes the
 * objects it visits in place (no table change) and collects the gone ones,
 * which are erased when the step has returned.  A generation that dies
 * while a lap is under way is covered by the rest of that lap and by one
 * more full lap after it (however many die meanwhile), so every object
 * present at an unmount is visited after it.
 */
#define SWEEP_STEP_FIRST 64
#define SWEEP_STEP_MAX	 1024 /* table slots per step (one clock read) */
#define SWEEP_STEP_US	 50   /* what a step should take */

/* Parked space of a dead generation: its allocator is gone with it. */
static void disc_prune(struct mc_master *m)
{
	uint32_t k = 0;

	for (uint32_t i = m->disc_head; i < m->ndisc; i++) {
		const struct mc_rep r = {m->disc[i].addr, m->disc[i].seg, m->disc[i].gen};

		if (mc_master_rep_live(m, &r))
			m->disc[k++] = m->disc[i];
		else
			m->disc_bytes -= m->disc[i].size;
	}
	m->disc_head = 0;
	m->ndisc = k;
}

static bool sweep_one(void *arg, struct mc_obj *o)
{
	struct mc_master *m = arg;

	if (mc_master_obj_prune(m, o) != 0)
		return true;
	if (!mc_master_grow((void **)&m->sweep_gone, &m->sweep_gone_cap, m->nsweep_gone + 1,
			    sizeof(*m->sweep_gone))) {
		m->sweep_again = true; /* absent anyway; the next lap retries */
		return true;
	}
	m->sweep_gone[m->nsweep_gone++] = o;
	return true;
}

bool mc_master_sweep_pending(const struct mc_master *m)
{
	return m->need_sweep || m->sweep.unit != 0;
}

bool mc_master_sweep_run(struct mc_master *m, uint64_t slice_us)
{
	uint64_t end_us = slice_us ? mc_now_us() + slice_us : UINT64_MAX;

	if (m->need_sweep) {
		m->need_sweep = false;
		if (!m->sweep.unit) {
			mc_master_cursor_open(m, &m->sweep);
			if (!m->sweep_step)
				m->sweep_step = SWEEP_STEP_FIRST;
		} else if (m->sweep.pos > 0) {
			m->sweep_again = true; /* the part behind the cursor needs a new lap */
		}
	}
	while (m->sweep.unit) {
		uint64_t t0 = mc_now_us(), now;

		if (mc_master_cursor_done(&m->sweep)) {
			mc_master_cursor_close(m, &m->sweep);
			if (!m->sweep_again)
				return false;
			m->sweep_again = false;
			mc_master_cursor_open(m, &m->sweep);
			continue;
		}
		m->nsweep_gone = 0;
		mc_master_cursor_step(m, &m->sweep, m->sweep_step, sweep_one, m);
		for (uint32_t i = 0; i < m->nsweep_gone; i++)
			mc_master_obj_erase(m, m->sweep_gone[i]);
		now = mc_now_us();
		if (now - t0 > 2 * SWEEP_STEP_US)
			m->sweep_step = MC_MAX(m->sweep_step * SWEEP_STEP_US / (now - t0), 1);
		else if (now - t0 < SWEEP_STEP_US / 2 && m->sweep_step < SWEEP_STEP_MAX)
			m->sweep_step *= 2;
		if (now >= end_us)
			return true;
	}
	return false;
}

/* ------------------------------------------------------------------------ */
/* lifecycle                                                                 */

void mc_master_config_defaults(struct mc_master_config *c)
{
	memset(c, 0, sizeof(*c));
	c->default_kv_lease_ttl_ms = 10000;
	c->default_kv_soft_pin_ttl_ms = 1800000;
	c->max_kv_soft_pin_ttl_ms = 86400000;
	c->allow_evict_soft_pinned_objects = true;
	c->eviction_ratio = 0.05;
	c->eviction_high_watermark_ratio = 0.90;
	c->preferred_segment_lru_batch = 1;
	c->client_ttl_ms = 10000;
	c->max_segment_size = MC_MASTER_MAX_SEGMENT_SIZE;
	c->put_start_discard_timeout_ms = 30000;
	c->put_start_release_timeout_ms = 600000;
	c->strategy = MC_ALLOC_RANDOM;
	c->enable_multi_tenants = false;
	c->version = "mooncake-c " MC_VERSION_STRING;
	c->rng_seed = 0x6d6f6f6e63616b65ull;
	c->regex_time_budget_ms = 10000;
	c->regex_match_limit = 1000000;
	c->regex_heap_limit = 16u << 20;
	c->offloading_queue_limit = 50000;
	c->offload_cap_ratio = 0.5;
	c->promotion_admission_threshold = 2;
	c->promotion_queue_limit = 50000;
	c->promotion_max_per_heartbeat = 1;
	c->max_total_finished_tasks = 10000;
	c->max_total_pending_tasks = 10000;
	c->max_total_processing_tasks = 10000;
	c->pending_task_timeout_ms = 300000;
	c->processing_task_timeout_ms = 300000;
	c->max_retry_attempts = 10;
	c->enable_replica_repair = true;
	c->replica_repair_max_inflight = 64;
	c->replica_repair_bytes_per_sec = 1ull << 30;
	c->dynamic_replication_window_ms = 10000;
	c->dynamic_replication_qps = 0.8;
	c->dynamic_replication_max_memory_replicas = 2;
}

mc_status mc_master_new(const struct mc_master_config *c, struct mc_master **out)
{
	struct mc_master *m;

	if (!(c->eviction_ratio >= 0 && c->eviction_ratio <= 1) ||
	    !(c->eviction_high_watermark_ratio >= 0 && c->eviction_high_watermark_ratio <= 1) ||
	    c->default_kv_soft_pin_ttl_ms > c->max_kv_soft_pin_ttl_ms ||
	    c->default_kv_lease_ttl_ms == 0 || c->client_ttl_ms == 0 ||
	    c->put_start_discard_timeout_ms == 0 || c->put_start_release_timeout_ms == 0 ||
	    c->regex_time_budget_ms == 0 || c->regex_match_limit < 1 ||
	    c->regex_match_limit > UINT32_MAX || c->regex_heap_limit < 1024 ||
	    c->offloading_queue_limit < 1 || c->offloading_queue_limit > UINT32_MAX ||
	    !(c->offload_cap_ratio >= 0 && c->offload_cap_ratio <= 1) ||
	    c->preferred_segment_lru_batch < 1) {
		mc_error("invalid master configuration");
		return MC_ERR_INVALID_PARAMS;
	}
	m = mc_calloc(1, sizeof(*m));
	if (!m)
		return MC_ERR_NOMEM;
	m->cfg = *c;
	mc_buf_init(&m->walbuf);
	m->version = mc_strdup(c->version ? c->version : "mooncake-c " MC_VERSION_STRING);
	m->slots = mc_calloc(MC_MASTER_MIN_SLOTS, sizeof(uint64_t));
	m->tenants = mc_calloc(1, sizeof(char *));
	m->tenant_lens = mc_calloc(1, sizeof(uint32_t));
	if (!m->version || !m->slots || !m->tenants || !m->tenant_lens ||
	    !(m->tenants[0] = mc_strdup("default"))) {
		mc_master_free(m);
		return MC_ERR_NOMEM;
	}
	m->cfg.version = m->version;
	m->tenant_lens[0] = 7;
	m->ntenants = 1;
	m->mask = MC_MASTER_MIN_SLOTS - 1;
	m->rng = c->rng_seed;
	m->hash_seed = mc_alloc_rand(&m->rng);
	m->group_seed = mc_alloc_rand(&m->rng);
	m->last_client = UINT32_MAX;
	if (mc_master_fs_init(m) != MC_OK || mc_master_tasks_init(m) != MC_OK) {
		mc_master_free(m);
		return MC_ERR_NOMEM;
	}
	*out = m;
	return MC_OK;
}

void mc_master_free(struct mc_master *m)
{
	if (!m)
		return;
	if (m->slots)
		mc_master_table_settle(m);
	for (uint64_t i = 0; m->slots && i <= m->mask; i++) {
		struct mc_obj *o = mc_master_table_at(m, i);

		if (o) {
			mc_free(o->ext);
			mc_free(o);
		}
	}
	mc_free(m->slots);
	for (size_t i = 0; i < MC_ARRAY_SIZE(m->big_free); i++)
		mc_free_later_finish(&m->big_free[i]);
	mc_master_wal_lists_free(m);
	for (uint32_t i = 0; m->gslots && i < m->ngslots; i++) {
		if (m->gslots[i]) {
			mc_free(m->gslots[i]->mem);
			mc_free(m->gslots[i]);
		}
	}
	mc_free(m->gslots);
	mc_free(m->gbuckets);
	mc_free(m->gfree);
	mc_master_tasks_free(m); /* first: it releases blocks into the allocators */
	mc_master_lru_free(m);
	mc_master_ssd_free(m);
	mc_master_fs_free(m);
	mc_buf_release(&m->walbuf);
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		if (m->segs[i].state != MC_SEG_FREE) {
			mc_offset_alloc_free(m->segs[i].alloc);
			seg_strings_free(&m->segs[i]);
		}
	}
	mc_free(m->segs);
	for (uint32_t i = 0; i < m->nclient_slots; i++) {
		mc_free(m->clients[i].credits);
		mc_master_hspoil_client_free(&m->clients[i]);
	}
	mc_free(m->clients);
	for (uint32_t i = 0; m->tenants && i < m->ntenants; i++)
		mc_free(m->tenants[i]);
	mc_free(m->tenants);
	mc_free(m->tenant_lens);
	mc_free(m->proc);
	mc_free(m->pins);
	mc_free(m->disc);
	mc_master_spoil_free(m);
	mc_free(m->targets);
	mc_free(m->tallocs);
	mc_free(m->tsegs);
	mc_free(m->tstart);
	mc_free(m->place);
	mc_free(m->rscratch);
	mc_free(m->iscratch);
	mc_free(m->sweep_gone);
	mc_free(m->version);
	mc_free(m);
}

/* ------------------------------------------------------------------------ */
/* admin queries                                                             */

const char *mc_master_segment_status_name(int status)
{
	switch (status) {
	case MC_SEGMENT_OK:
		return "OK";
	case MC_SEGMENT_DRAINING:
		return "DRAINING";
	case MC_SEGMENT_DRAINED:
		return "DRAINED";
	case MC_SEGMENT_GRACEFULLY_UNMOUNTING:
		return "GRACEFULLY_UNMOUNTING";
	case MC_SEGMENT_UNMOUNTING:
		return "UNMOUNTING";
	default:
		return "UNDEFINED";
	}
}

/* tenant filter for the admin calls: false when the tenant is unknown */
static bool admin_tenant(struct mc_master *m, const char *tenant, bool *all_out, uint16_t *id_out)
{
	bool found = true;

	*all_out = false;
	*id_out =
		mc_master_tenant_find(m, tenant ? tenant : "", tenant ? strlen(tenant) : 0, &found);
	return found;
}

struct key_walk {
	struct mc_master *m;
	uint16_t tid;
	mc_master_key_fn fn;
	void *arg;
};

static bool key_one(void *arg, struct mc_obj *o)
{
	const struct key_walk *w = arg;

	if (o->tenant != w->tid || !mc_master_obj_readable(w->m, o))
		return true;
	return w->fn(w->arg, o->key, o->key_len);
}

/* One cursor pass in a single step: both tables of a resize are walked as
 * they are, so nothing has to be migrated first. */
void mc_master_foreach_key(struct mc_master *m, const char *tenant, mc_master_key_fn fn, void *arg)
{
	struct key_walk w = {m, 0, fn, arg};
	struct mc_master_cursor cur;
	bool all;

	if (!admin_tenant(m, tenant, &all, &w.tid))
		return;
	mc_master_cursor_open(m, &cur);
	(void)mc_master_cursor_step(m, &cur, UINT64_MAX, key_one, &w);
	mc_master_cursor_close(m, &cur);
}

void mc_master_foreach_segment(struct mc_master *m, mc_master_segment_fn fn, void *arg)
{
	uint32_t *idx = mc_calloc(m->nsegs_slots ? m->nsegs_slots : 1, sizeof(uint32_t));
	uint32_t n = 0;

	if (!idx)
		return;
	for (uint32_t i = 0; i < m->nsegs_slots; i++) {
		if (m->segs[i].state != MC_SEG_FREE && m->segs[i].state != MC_SEG_DISK &&
		    m->segs[i].state != MC_SEG_WAIT)
			idx[n++] = i;
	}
	/* mount order; a handful of segments, so insertion sort */
	for (uint32_t i = 1; i < n; i++) {
		uint32_t v = idx[i], j = i;

		for (; j > 0 && m->segs[idx[j - 1]].mount_seq > m->segs[v].mount_seq; j--)
			idx[j] = idx[j - 1];
		idx[j] = v;
	}
	for (uint32_t k = 0; k < n; k++) {
		const struct mc_seg *s = &m->segs[idx[k]];
		struct mc_master_segment_info info = {
			.name = s->name,
			.id = s->id,
			.client_id = s->client < m->nclient_slots ? m->clients[s->client].id
								  : (struct mc_store_uuid){0, 0},
			.base = s->base,
			.size = s->size,
			.te_endpoint = s->te_endpoint,
			.protocol = s->protocol,
			.status = s->state,
			.used_bytes = s->used,
			.capacity_bytes = mc_offset_alloc_capacity(s->alloc),
		};

		if (!fn(arg, &info))
			break;
	}
	mc_free(idx);
}

void mc_master_metrics(struct mc_master *m, struct mc_master_metrics *out)
{
	uint64_t alive = 0;

	for (uint32_t i = 0; i < m->nclient_slots; i++)
		alive += m->clients[i].used && m->clients[i].alive;
	*out = m->met;
	out->ssd_total_bytes = out->ssd_used_bytes = out->local_disk_clients = 0;
	for (uint32_t i = 0; i < m->nclient_slots; i++) {
		const struct mc_disk *d = m->clients[i].used ? m->clients[i].disk : NULL;

		if (d) {
			out->ssd_total_bytes += d->total;
			out->ssd_used_bytes += d->used;
			out->local_disk_clients++;
		}
	}
	out->offload_in_flight = m->noffl - m->npromo;
	out->promotion_in_flight = m->npromo;
	out->allocated_bytes = m->allocated_bytes;
	out->total_capacity_bytes = m->capacity_bytes;
	out->key_count = m->nobjs;
	out->soft_pin_key_count = m->npins;
	out->active_clients = alive;
	out->discarded_staging_bytes = m->disc_bytes;
}

/*
 * store/client_loccache.c - the store client's replica-location cache
 * (MC_STORE_LOCATION_CACHE): key -> the replica a get read last, its
 * object's checksum and how long the master's read lease keeps it there,
 * so that a repeated get is one exchange (the read from the holder)
 * instead of two (GetReplicaList, then the read).  docs/design.md,
 * "Gets without the master: the location cache", has the argument for why
 * a cached location is either still valid or caught; in short:
 *
 *   - the lease.  GetReplicaList grants a read lease of lease_ttl_ms
 *     counted from the master's clock when it handled the request, which
 *     is after this client sent it; until it ends the master neither
 *     evicts the object nor removes it without force, nor cuts its
 *     replicas.  An entry is used only until send time + ttl - margin
 *     (LEASE_MARGIN: the master's loop clock may lag the request, clocks
 *     may run at slightly different rates), and a cached read that ends
 *     after that is thrown away as a read past its lease is.
 *   - the checksum.  Only objects with a checksum, or a chunk-sum
 *     trailer's hash, are cached (so not with MC_STORE_VERIFY=0), and
 *     every cached read is checked against it (client_verify.c; a
 *     trailer object's with its trailer, read beside it); a read that
 *     was not checked, failed, or failed its check drops the entry and
 *     the call asks the master as before, without reporting the replica
 *     corrupt (a stale location is not a corrupt replica).  What the
 *     lease does not cover - a force Remove, an Upsert, a move or a
 *     drain, a holder's unmount - frees or rewrites the block, and a read
 *     of memory written since then fails the check.
 *   - this client's own writes drop their keys before they start and after
 *     they end, and bump a write epoch: a get whose lookup was sent before
 *     the last drop does not insert what it learnt.
 *   - a new master connection (reconnect, failover, a restarted master
 *     that may have forgotten its leases) invalidates every entry: an entry
 *     is used only on the connection it was learnt on, and only while that
 *     connection is up.
 *
 *   - spoils (minor 13): a block left intact after another client's
 *     override (an Upsert to another size parks the old blocks, a force
 *     Remove frees them) would still hold the old value, which checks out.
 *     The master parks such blocks of a leased object until the lease
 *     ends and lists them to the overrider, which overwrites each one's
 *     head before its call returns (mc_store_spoil, below), so the check
 *     fails.  Only a master of minor 13 or later lists them.
 *   - the fence (minor 14, client_fence.c): a holder whose pings stop
 *     reaching the master takes its memory out of its engine before the
 *     master can expire it and drop its replicas, so a cached read of it
 *     is refused.
 *   - holders spoil (minor 15, client_hspoil.c): the blocks an overrider
 *     of an older minor (or upstream's) or a force RemoveByRegex or
 *     RemoveAll leaves are spoiled by their holder after its next ping;
 *     a replica whose holder is older than 15 (it neither spoils nor
 *     surely fences) is marked in the replica list and not cached.  Only
 *     a master of minor 15 or later does both: against an older one
 *     nothing is cached.  docs/design.md says what window is left.
 *
 * Memory: at most cap entries (one allocation each: header, key, the
 * replica's strings), least recently used first out; a hash table of
 * chains, power-of-two buckets, cap / 2 or more.  One mutex guards the
 * table, the LRU list and the counters; an entry found is referenced, so
 * the read runs without the lock and a drop meanwhile frees it at the
 * reader's unref.
 */
#define MC_LOG_MODULE "store"
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"
#include "store/client_int.h"
#include "store/client_metrics.h"
#include "store/master_conn.h"

/* The part of a lease not used: an eighth of it, and at least 50 ms. */
#define LEASE_MARGIN_MIN_MS 50u

struct mc_store_loccache {
	pthread_mutex_t lock;
	struct mc_store_loc **buckets;
	uint64_t mask; /* buckets - 1 */
	uint64_t n, cap;
	struct mc_list lru; /* most recently used first */
	/* bumped by every drop: a get inserts only if it did not move since
	 * before its lookup was sent */
	atomic_uint_fast64_t wepoch;
};

uint64_t mc_store_loc_margin_ms(uint64_t ttl_ms)
{
	return MC_MAX(ttl_ms / 8, (uint64_t)LEASE_MARGIN_MIN_MS);
}

mc_status mc_store_loc_init(struct mc_store *s, uint64_t cap)
{
	struct mc_store_loccache *c;
	uint64_t nb = 16;

	s->loc = NULL;
	if (cap == 0)
		return MC_OK;
	while (nb < cap / 2)
		nb *= 2;
	c = mc_calloc(1, sizeof(*c));
	if (!c || !(c->buckets = mc_calloc(nb, sizeof(*c->buckets)))) {
		mc_free(c);
		return mc_set_error(MC_ERR_NOMEM,
				    "no memory for a location cache of %" PRIu64 " entries", cap);
	}
	pthread_mutex_init(&c->lock, NULL);
	c->mask = nb - 1;
	c->cap = cap;
	mc_list_init(&c->lru);
	atomic_init(&c->wepoch, 1);
	s->loc = c;
	return MC_OK;
}

void mc_store_loc_unref(struct mc_store_loc *e)
{
	if (e && atomic_fetch_sub(&e->refs, 1) == 1)
		mc_free(e);
}

/* Take e out of the table and the LRU list (lock held); the table's
 * reference goes. */
static void unlink_locked(struct mc_store_loccache *c, struct mc_store_loc *e)
{
	struct mc_store_loc **p = &c->buckets[e->hash & c->mask];

	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	mc_list_del(&e->lru);
	c->n--;
	mc_store_loc_unref(e);
}

static struct mc_store_loc *find_locked(struct mc_store_loccache *c, uint64_t h, const char *key,
					size_t len)
{
	for (struct mc_store_loc *e = c->buckets[h & c->mask]; e; e = e->hnext)
		if (e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0)
			return e;
	return NULL;
}

void mc_store_loc_free_all(struct mc_store *s)
{
	struct mc_store_loccache *c = s->loc;

	if (!c)
		return;
	mc_store_loc_forget_all(s);
	pthread_mutex_destroy(&c->lock);
	mc_free(c->buckets);
	mc_free(c);
	s->loc = NULL;
}

/* Is e live at now under connection epoch? If not, it goes (lock held). */
static bool live_locked(struct mc_store_loccache *c, struct mc_store_loc *e, uint64_t now,
			uint64_t epoch)
{
	if (now >= e->deadline_ms || e->conn_epoch != epoch) {
		unlink_locked(c, e); /* its lease is over, or its connection */
		return false;
	}
	mc_list_del(&e->lru);
	mc_list_add_head(&c->lru, &e->lru);
	atomic_fetch_add(&e->refs, 1);
	return true;
}

/* Keys are hashed outside the lock, this many at a time. */
#define FIND_BLOCK 64

size_t mc_store_loc_find_many(struct mc_store *s, const char *const *keys, const int64_t *skip,
			      size_t n, struct mc_store_loc **out)
{
	struct mc_store_loccache *c = s->loc;
	uint64_t h[FIND_BLOCK], hits = 0, asked = 0;
	size_t len[FIND_BLOCK];

	memset(out, 0, n * sizeof(*out));
	if (!c)
		return 0;
	for (size_t b = 0; b < n; b += FIND_BLOCK) {
		size_t m = MC_MIN(n - b, (size_t)FIND_BLOCK);
		uint64_t now, epoch;

		for (size_t i = 0; i < m; i++) {
			if (skip && skip[b + i] != MC_OK)
				continue;
			len[i] = strlen(keys[b + i]);
			h[i] = XXH3_64bits(keys[b + i], len[i]);
		}
		now = mc_now_ms();
		epoch = mc_master_conn_epoch(s->conn);
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < m; i++) {
			struct mc_store_loc *e;

			if (skip && skip[b + i] != MC_OK)
				continue;
			asked++;
			e = find_locked(c, h[i], keys[b + i], len[i]);
			if (e && live_locked(c, e, now, epoch)) {
				out[b + i] = e;
				hits++;
			}
		}
		pthread_mutex_unlock(&c->lock);
	}
	if (s->metrics) {
		atomic_fetch_add(&s->metrics->loc_hits, hits);
		atomic_fetch_add(&s->metrics->loc_misses, asked - hits);
	}
	return hits;
}

struct mc_store_loc *mc_store_loc_find(struct mc_store *s, const char *key, size_t len)
{
	struct mc_store_loccache *c = s->loc;
	uint64_t h, now, epoch;
	struct mc_store_loc *e;

	if (!c)
		return NULL;
	h = XXH3_64bits(key, len);
	now = mc_now_ms();
	epoch = mc_master_conn_epoch(s->conn);
	pthread_mutex_lock(&c->lock);
	e = find_locked(c, h, key, len);
	if (e && !live_locked(c, e, now, epoch))
		e = NULL;
	pthread_mutex_unlock(&c->lock);
	if (s->metrics)
		atomic_fetch_add(e ? &s->metrics->loc_hits : &s->metrics->loc_misses, 1);
	return e;
}

void mc_store_loc_mark(struct mc_store *s, struct mc_store_loc_mark *mk)
{
	mk->sent_ms = mc_now_ms();
	mk->wepoch = s->loc ? atomic_load(&s->loc->wepoch) : 0;
	mk->conn_epoch = s->loc ? mc_master_conn_epoch(s->conn) : 0;
}

/* Copy v to *at, NUL-terminated as decoded strings are (the engine takes
 * the segment name as a C string), and point dst at the copy. */
static void str_into(struct mc_proto_str *dst, const struct mc_proto_str *v, char **at)
{
	dst->ptr = *at;
	dst->len = v->len;
	if (v->len)
		memcpy(*at, v->ptr, v->len);
	(*at)[v->len] = '\0';
	*at += v->len + 1;
}

void mc_store_loc_add(struct mc_store *s, const struct mc_store_loc_mark *mk, const char *key,
		      size_t len, const struct mc_store_replica_list *l,
		      const struct mc_store_replica *r)
{
	struct mc_store_loccache *c = s->loc;
	uint64_t ttl = l->lease_ttl_ms, margin = mc_store_loc_margin_ms(ttl), h;
	struct mc_store_loc *e, *old;
	size_t extra;
	char *at;
	bool table =
		!l->checksum.present && l->table_cksum.present && mc_store_trailer_fits(r->size);

	/* a master older than minor 13 lists no spoils (another client's
	 * override would leave the old value readable), one older than 14
	 * tells holders no client_ttl (an expired holder would not fence
	 * itself, client_fence.c), one older than 15 neither has holders
	 * spoil nor says which holders cannot (client_hspoil.c): those
	 * replicas are marked in the list's nocache: docs/design.md */
	if (!c || r->size == 0 || mc_master_conn_peer_minor(s->conn) < MC_STORE_HSPOIL_MINOR ||
	    atomic_load(&s->fenced)) /* fenced: its own segment may be expired */
		return;
	if (r < l->replicas || r >= l->replicas + MC_MIN(l->n_replicas, 64u) ||
	    (l->nocache.present && (l->nocache.value >> (r - l->replicas) & 1)))
		return;
	if ((!l->checksum.present && !table) || r->type != MC_STORE_REPLICA_MEMORY ||
	    r->status != MC_STORE_REPLICA_COMPLETE || ttl <= 2 * margin || mk->conn_epoch == 0 ||
	    mc_now_ms() >= mk->sent_ms + ttl - margin)
		return;
	extra = len + 1 + r->segment_name.len + r->transport_endpoint.len + r->protocol.len + 3;
	e = mc_malloc(sizeof(*e) + extra);
	if (!e)
		return; /* a cache: the next get asks the master again */
	memset(e, 0, sizeof(*e));
	atomic_init(&e->refs, 1);
	e->hash = h = XXH3_64bits(key, len);
	e->deadline_ms = mk->sent_ms + ttl - margin;
	e->conn_epoch = mk->conn_epoch;
	e->cksum = table ? l->table_cksum.value : l->checksum.value;
	e->table = table;
	e->rep = *r;
	e->key_len = len;
	at = e->key;
	memcpy(at, key, len);
	at[len] = '\0';
	at += len + 1;
	str_into(&e->rep.segment_name, &r->segment_name, &at);
	str_into(&e->rep.transport_endpoint, &r->transport_endpoint, &at);
	str_into(&e->rep.protocol, &r->protocol, &at);
	e->rep.file_path = (struct mc_proto_str){NULL, 0};

	pthread_mutex_lock(&c->lock);
	/* a drop since the lookup was sent, or a new connection: what the
	 * lookup learnt may be older than that drop */
	if (atomic_load(&c->wepoch) != mk->wepoch ||
	    mc_master_conn_epoch(s->conn) != mk->conn_epoch) {
		pthread_mutex_unlock(&c->lock);
		mc_free(e);
		return;
	}
	if ((old = find_locked(c, h, key, len)))
		unlink_locked(c, old);
	while (c->n >= c->cap && !mc_list_empty(&c->lru))
		unlink_locked(c, mc_list_entry(c->lru.prev, struct mc_store_loc, lru));
	e->hnext = c->buckets[h & c->mask];
	c->buckets[h & c->mask] = e;
	mc_list_add_head(&c->lru, &e->lru);
	c->n++;
	pthread_mutex_unlock(&c->lock);
}

void mc_store_loc_forget(struct mc_store *s, const char *key, size_t len)
{
	struct mc_store_loccache *c = s->loc;
	struct mc_store_loc *e;
	uint64_t h;

	if (!c)
		return;
	h = XXH3_64bits(key, len);
	pthread_mutex_lock(&c->lock);
	atomic_fetch_add(&c->wepoch, 1);
	if ((e = find_locked(c, h, key, len)))
		unlink_locked(c, e);
	pthread_mutex_unlock(&c->lock);
}

void mc_store_loc_forget_keys(struct mc_store *s, const char *const *keys, size_t n)
{
	for (size_t i = 0; s->loc && i < n; i++)
		if (keys[i])
			mc_store_loc_forget(s, keys[i], strlen(keys[i]));
}

void mc_store_loc_forget_all(struct mc_store *s)
{
	struct mc_store_loccache *c = s->loc;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	atomic_fetch_add(&c->wepoch, 1);
	while (!mc_list_empty(&c->lru))
		unlink_locked(c, mc_list_entry(c->lru.next, struct mc_store_loc, lru));
	pthread_mutex_unlock(&c->lock);
}

uint64_t mc_store_loc_count(struct mc_store *s)
{
	uint64_t n;

	if (!s->loc)
		return 0;
	pthread_mutex_lock(&s->loc->lock);
	n = s->loc->n;
	pthread_mutex_unlock(&s->loc->lock);
	return n;
}

/* Tell the master the force remove's blocks among list (id not 0) may go
 * back into use (SpoilDone); best effort: their lease's end does it too. */
static void spoil_done(struct mc_store *s, const struct mc_store_replica *list, uint32_t n)
{
	struct mc_store_spoil_done_req req = {0, NULL};
	struct mc_store_msg resp;
	uint64_t *ids = mc_calloc(n, sizeof(*ids));

	for (uint32_t i = 0; ids && i < n; i++)
		if (list[i].id)
			ids[req.n_ids++] = list[i].id;
	req.ids = ids;
	if (req.n_ids && mc_master_conn_call(s->conn, MC_STORE_SPOIL_DONE, &req, &resp) == MC_OK)
		mc_store_msg_release(&resp);
	mc_free(ids);
}

/* One head of a parked block, read then written back (mc_store_spoil). */
static struct mc_store_io spoil_io(void **buf, size_t *len, struct mc_store_replica *rep,
				   mc_status status)
{
	return (struct mc_store_io){.bufs = buf,
				    .lens = len,
				    .nbufs = 1,
				    .len = rep->size,
				    .reps = rep,
				    .nreps = 1,
				    .status = status};
}

/*
 * Spoil the blocks an override of this client's parked (the spoil tails of
 * its Remove, BatchRemove, UpsertStart or BatchUpsertStart answer): read
 * each one's first min(MC_STORE_SPOIL_LEN, size) bytes and write their
 * complement back, so those bytes differ from the old value's and any
 * cached read of the block fails its check.  Only while the master keeps
 * them parked: until sent_ms (when the request was sent, before the
 * master's clock started the count) + spoil_ms, less a margin for the
 * write in flight; later the lease is over (no cached location is used)
 * and the block may be reused, so nothing is written.  Best effort: a
 * holder that cannot be reached cannot serve the old value either.
 */
void mc_store_spoil(struct mc_store *s, const struct mc_store_replica *list, uint32_t n,
		    const struct mc_proto_opt_u64 *spoil_ms, uint64_t sent_ms)
{
	struct mc_store_io *ios;
	struct mc_store_replica *reps;
	unsigned char *heads;
	void **bufs;
	size_t *lens;
	uint64_t ms = spoil_ms->present ? spoil_ms->value : 0;
	uint64_t until = sent_ms + ms - MC_MIN(ms, mc_store_loc_margin_ms(ms));
	uint32_t done = 0;

	if (n == 0)
		return;
	if (mc_now_ms() >= until) {
		spoil_done(s, list, n);
		return;
	}
	ios = mc_calloc(n, sizeof(*ios));
	reps = mc_calloc(n, sizeof(*reps));
	heads = mc_calloc(n, MC_STORE_SPOIL_LEN);
	bufs = mc_calloc(n, sizeof(*bufs));
	lens = mc_calloc(n, sizeof(*lens));
	if (!ios || !reps || !heads || !bufs || !lens) {
		mc_warn("no memory to spoil %u parked blocks: cached locations of them stay "
			"readable until their leases end",
			n);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		reps[i] = list[i];
		reps[i].size = MC_MIN(reps[i].size, (uint64_t)MC_STORE_SPOIL_LEN);
		bufs[i] = heads + (size_t)i * MC_STORE_SPOIL_LEN;
		lens[i] = reps[i].size;
		ios[i] = spoil_io(&bufs[i], &lens[i], &reps[i],
				  reps[i].type == MC_STORE_REPLICA_MEMORY && reps[i].size
					  ? MC_OK
					  : MC_ERR_INVALID_REPLICA);
	}
	mc_store_run_transfers(s, ios, n, MC_OP_READ);
	for (uint32_t i = 0; i < n; i++) {
		if (ios[i].status != MC_OK)
			continue;
		for (uint64_t k = 0; k < lens[i]; k++)
			heads[(size_t)i * MC_STORE_SPOIL_LEN + k] ^= 0xff;
		ios[i] = spoil_io(&bufs[i], &lens[i], &reps[i], MC_OK);
		done++;
	}
	if (done == 0 || mc_now_ms() >= until) /* too late to write: may be reused */
		goto out;
	mc_store_run_transfers(s, ios, n, MC_OP_WRITE);
	for (uint32_t i = 0; i < n; i++)
		if (ios[i].status != MC_OK && lens[i])
			mc_debug("spoiling a parked block at %s:0x%" PRIx64 " failed: %s",
				 reps[i].segment_name.ptr ? reps[i].segment_name.ptr : "?",
				 reps[i].address, mc_status_name(ios[i].status));
out:
	mc_free(ios);
	mc_free(reps);
	mc_free(heads);
	mc_free(bufs);
	mc_free(lens);
	spoil_done(s, list, n);
}

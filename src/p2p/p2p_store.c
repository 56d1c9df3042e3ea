/*
 * p2p/p2p_store.c - the master-less P2P store (mooncake/p2p_store.h).
 *
 * Upstream's Go package, redone on our engine and our etcd client.  The
 * pieces:
 *
 *  - The catalog: one etcd key per object ("mooncake/checkpoint/<name>",
 *    JSON of p2p/payload.h), outside any lease, so it outlives the writer
 *    as upstream's does.  Every change is read - modify - compare-and-swap
 *    on the key's mod_revision, repeated on a conflict up to CAS_ATTEMPTS
 *    times.  The modifications are idempotent (adding a location that is
 *    there is a no-op) because our etcd client repeats a request on another
 *    member after a lost answer.
 *
 *  - Registered ranges, counted: the same (addr, len) registered twice is
 *    one engine registration with two references; a range that partly
 *    overlaps one already held is MC_ERR_ADDRESS_OVERLAPPED.  A range goes
 *    to the engine in chunks of at most 4 GiB (one mc_te_register_batch,
 *    all or nothing), which is why max_shard_size must divide 4 GiB: a
 *    shard never straddles two chunks.
 *
 *  - Open names: the objects this process holds, gold (registered here) or
 *    replica (pulled here), with the buffers to unregister when they go.
 *    An entry is inserted before the slow part of a call, so a second call
 *    on the same name fails at once with MC_ERR_EXISTS instead of racing.
 *
 *  - The pull: every shard is read with one engine READ from one holder.
 *    Attempt 0 picks a random replica (a random gold holder when there is
 *    no replica; never ourselves), so readers spread over the holders;
 *    attempt k >= 1 takes
 *    the k-th of (replicas in list order, then gold), cyclically; a shard
 *    gets max(MC_P2P_MIN_ATTEMPTS, holders + 1) attempts, so the walk after
 *    the random pick reaches every holder, gold last (upstream's
 *    max(3, holders) stops one short: with every replica dead, its gold was
 *    never tried), then the pull fails with MC_ERR_TRANSFER_FAIL ("too many
 *    retries").  A reader pulls in
 *    waves (pull_waves): each wave is a batch of reads (in parallel over
 *    the engine's connections) of the next shards only the gold holders
 *    have, from a random shard on (drawn each wave), plus shards other readers already
 *    hold; when a wave has landed its shards are advertised as replicas
 *    (one CAS), and the next wave reads the entry afresh.  So readers that
 *    start together pull different parts from the holder and serve each
 *    other the rest.  At the end, a shard whose holder has left since is
 *    pulled again (the bytes may come from memory being released), at most
 *    MC_P2P_PULL_ROUNDS rounds (upstream loops on the stale entry forever);
 *    a failed get takes its advertised shards back.
 *
 * Locks: s->lock guards the open names and the registered ranges; it is
 * held across an engine (de)registration (short) but never across an etcd
 * request or a transfer.
 */
#define MC_LOG_MODULE "p2p"
#include "mooncake/p2p_store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "meta/meta.h"
#include "mooncake/te.h"
#include "p2p/payload.h"

#define MAX_CHUNK    ((uint64_t)4 << 30)
#define CAS_ATTEMPTS 64
/* a pull attempt's wait: 60 s plus 1 ns per byte (upstream's TE timeout shape) */
#define PULL_WAIT_MS(bytes) (60000 + (int64_t)((bytes) / 1000000))

struct memrange {
	uint64_t addr, len;
	unsigned refs;
};

struct open_obj {
	char *name;
	bool gold;
	bool ready; /* false while the call that opened it runs */
	void **addrs;
	uint64_t *sizes;
	size_t n;
};

struct mc_p2p_store {
	struct mc_meta *meta;
	struct mc_te *te;
	char *local_name;

	pthread_mutex_t lock;
	struct memrange *ranges;
	size_t nranges;
	struct open_obj *objs;
	size_t nobjs;
};

/* ---- small helpers --------------------------------------------------------------- */

static uint64_t rand64(void)
{
	static __thread uint64_t x;

	if (!x)
		x = mc_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&x;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return x;
}

static char *key_of(const char *name)
{
	return mc_asprintf(MC_P2P_KEY_PREFIX "%s", name);
}

static mc_status check_name(const char *name)
{
	if (!name || !*name || strlen(name) > MC_P2P_NAME_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "p2p: an object name is 1 to %d bytes",
				    MC_P2P_NAME_MAX);
	return MC_OK;
}

static mc_status check_lists(const char *what, void *const *addrs, const uint64_t *sizes, size_t n)
{
	if (!n || !addrs || !sizes)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "p2p %s: empty buffer list", what);
	if (n > MC_P2P_BUFFERS_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "p2p %s: %zu buffers, at most %d", what,
				    n, MC_P2P_BUFFERS_MAX);
	for (size_t i = 0; i < n; i++)
		if (!addrs[i] || !sizes[i] || (uint64_t)(uintptr_t)addrs[i] + sizes[i] < sizes[i])
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "p2p %s: buffer %zu is NULL, empty or wraps", what, i);
	return MC_OK;
}

/* ---- registered ranges ------------------------------------------------------------- */

static mc_status range_ref_locked(struct mc_p2p_store *s, void *addr, uint64_t len,
				  const char *location)
{
	uint64_t a = (uint64_t)(uintptr_t)addr, nchunks = (len + MAX_CHUNK - 1) / MAX_CHUNK;
	struct mc_te_buffer *chunks;
	struct memrange *grown;
	mc_status st;

	for (size_t i = 0; i < s->nranges; i++) {
		struct memrange *r = &s->ranges[i];
		if (r->addr == a && r->len == len) {
			r->refs++;
			return MC_OK;
		}
		if (a < r->addr + r->len && r->addr < a + len)
			return mc_set_error(
				MC_ERR_ADDRESS_OVERLAPPED,
				"p2p: [%#llx, +%llu) overlaps the registered [%#llx, +%llu)",
				(unsigned long long)a, (unsigned long long)len,
				(unsigned long long)r->addr, (unsigned long long)r->len);
	}
	grown = mc_realloc(s->ranges, (s->nranges + 1) * sizeof(*grown));
	if (!grown)
		return mc_set_error(MC_ERR_NOMEM, "p2p: out of memory registering");
	s->ranges = grown;
	chunks = mc_calloc(nchunks, sizeof(*chunks));
	if (!chunks)
		return mc_set_error(MC_ERR_NOMEM, "p2p: out of memory registering");
	for (uint64_t i = 0; i < nchunks; i++) {
		chunks[i].addr = (char *)addr + i * MAX_CHUNK;
		chunks[i].length = (size_t)(i + 1 < nchunks ? MAX_CHUNK : len - i * MAX_CHUNK);
	}
	st = mc_te_register_batch(s->te, chunks, nchunks, location);
	mc_free(chunks);
	if (st)
		return st;
	s->ranges[s->nranges++] = (struct memrange){.addr = a, .len = len, .refs = 1};
	return MC_OK;
}

static void range_unref_locked(struct mc_p2p_store *s, void *addr, uint64_t len)
{
	uint64_t a = (uint64_t)(uintptr_t)addr, nchunks = (len + MAX_CHUNK - 1) / MAX_CHUNK;

	for (size_t i = 0; i < s->nranges; i++) {
		struct memrange *r = &s->ranges[i];
		void **chunks;

		if (r->addr != a || r->len != len)
			continue;
		if (--r->refs)
			return;
		s->ranges[i] = s->ranges[--s->nranges];
		chunks = mc_calloc(nchunks, sizeof(*chunks));
		if (!chunks) {
			mc_error("p2p: out of memory deregistering %#llx", (unsigned long long)a);
			return;
		}
		for (uint64_t k = 0; k < nchunks; k++)
			chunks[k] = (char *)addr + k * MAX_CHUNK;
		if (mc_te_deregister_batch(s->te, chunks, nchunks) != MC_OK)
			mc_warn("p2p: deregistering %#llx: %s", (unsigned long long)a,
				mc_last_error());
		mc_free(chunks);
		return;
	}
	mc_warn("p2p: %#llx was not registered", (unsigned long long)a);
}

static void ranges_unref(struct mc_p2p_store *s, void *const *addrs, const uint64_t *sizes,
			 size_t n)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++)
		range_unref_locked(s, addrs[i], sizes[i]);
	pthread_mutex_unlock(&s->lock);
}

static mc_status ranges_ref(struct mc_p2p_store *s, void *const *addrs, const uint64_t *sizes,
			    size_t n, const char *location)
{
	mc_status st = MC_OK;
	size_t i;

	pthread_mutex_lock(&s->lock);
	for (i = 0; i < n && !st; i++)
		st = range_ref_locked(s, addrs[i], sizes[i], location);
	if (st) {
		for (size_t k = 0; k + 1 < i; k++)
			range_unref_locked(s, addrs[k], sizes[k]);
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

/* ---- open names ------------------------------------------------------------------ */

static struct open_obj *obj_find_locked(struct mc_p2p_store *s, const char *name)
{
	for (size_t i = 0; i < s->nobjs; i++)
		if (strcmp(s->objs[i].name, name) == 0)
			return &s->objs[i];
	return NULL;
}

static void obj_free(struct open_obj *o)
{
	mc_free(o->name);
	mc_free(o->addrs);
	mc_free(o->sizes);
}

/* Reserve name (not ready) so no other call works on it meanwhile. */
static mc_status obj_reserve(struct mc_p2p_store *s, const char *name, bool gold,
			     void *const *addrs, const uint64_t *sizes, size_t n)
{
	struct open_obj o = {.gold = gold, .n = n}, *grown;
	mc_status st = MC_OK;

	pthread_mutex_lock(&s->lock);
	if (obj_find_locked(s, name)) {
		st = mc_set_error(MC_ERR_EXISTS,
				  "p2p: '%s' is already open in this process "
				  "(payload has been replicated)",
				  name);
		goto out;
	}
	o.name = mc_strdup(name);
	o.addrs = mc_calloc(n, sizeof(void *));
	o.sizes = mc_calloc(n, sizeof(uint64_t));
	grown = o.name && o.addrs && o.sizes ? mc_realloc(s->objs, (s->nobjs + 1) * sizeof(*grown))
					     : NULL;
	if (!grown) {
		obj_free(&o);
		st = mc_set_error(MC_ERR_NOMEM, "p2p: out of memory opening '%s'", name);
		goto out;
	}
	memcpy(o.addrs, addrs, n * sizeof(void *));
	memcpy(o.sizes, sizes, n * sizeof(uint64_t));
	s->objs = grown;
	s->objs[s->nobjs++] = o;
out:
	pthread_mutex_unlock(&s->lock);
	return st;
}

static void obj_set_ready(struct mc_p2p_store *s, const char *name)
{
	pthread_mutex_lock(&s->lock);
	obj_find_locked(s, name)->ready = true;
	pthread_mutex_unlock(&s->lock);
}

static void obj_drop(struct mc_p2p_store *s, const char *name)
{
	pthread_mutex_lock(&s->lock);
	struct open_obj *o = obj_find_locked(s, name);
	if (o) {
		obj_free(o);
		*o = s->objs[--s->nobjs];
	}
	pthread_mutex_unlock(&s->lock);
}

/* Take a ready entry of the given kind out of service (ready=false) for the
 * call that closes it; its buffers are copied into *copy_out. */
static mc_status obj_claim(struct mc_p2p_store *s, const char *name, bool gold,
			   struct open_obj *copy_out)
{
	struct open_obj *o;
	mc_status st = MC_OK;

	pthread_mutex_lock(&s->lock);
	o = obj_find_locked(s, name);
	if (!o || !o->ready || o->gold != gold) {
		st = mc_set_error(MC_ERR_NOT_FOUND, "p2p: '%s' is not open here as %s", name,
				  gold ? "a registered object" : "a replica");
		goto out;
	}
	o->ready = false;
	*copy_out = *o;
out:
	pthread_mutex_unlock(&s->lock);
	return st;
}

/* ---- catalog --------------------------------------------------------------------- */

/* Read name's entry: MC_ERR_OBJECT_NOT_FOUND when absent. */
static mc_status catalog_read(struct mc_p2p_store *s, const char *key, const char *name,
			      struct mc_p2p_payload *p, int64_t *rev_out)
{
	struct mc_etcd_kv *kvs = NULL;
	size_t n = 0;
	mc_status st = mc_meta_etcd_range(s->meta, key, NULL, &kvs, &n, NULL);

	if (st)
		return st;
	if (!n) {
		mc_etcd_kvs_free(kvs, n);
		return mc_set_error(MC_ERR_OBJECT_NOT_FOUND, "p2p: no object '%s' in the catalog",
				    name);
	}
	*rev_out = kvs[0].mod_revision;
	st = mc_p2p_payload_decode(kvs[0].value, kvs[0].len, p);
	mc_etcd_kvs_free(kvs, n);
	return st;
}

static mc_status catalog_write(struct mc_p2p_store *s, const char *key,
			       const struct mc_p2p_payload *p, int64_t rev)
{
	char *json;
	size_t len;
	mc_status st = mc_p2p_payload_encode(p, &json, &len);

	if (st)
		return st;
	st = mc_meta_etcd_cas_put(s->meta, key, json, len, rev);
	mc_free(json);
	return st;
}

/* What a change does to an entry; false = nothing to write. */
typedef mc_status (*change_fn)(struct mc_p2p_store *s, struct mc_p2p_payload *p, void *arg);

/* Read, change, write back (delete when nobody holds it), by CAS. */
static mc_status catalog_update(struct mc_p2p_store *s, const char *name, change_fn fn, void *arg)
{
	char *key = key_of(name);
	mc_status st = MC_ERR_ETCD_TRANSACTION_FAIL;

	if (!key)
		return mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
	for (int i = 0; i < CAS_ATTEMPTS && st == MC_ERR_ETCD_TRANSACTION_FAIL; i++) {
		struct mc_p2p_payload p;
		int64_t rev = 0;

		st = catalog_read(s, key, name, &p, &rev);
		if (st)
			break;
		st = fn(s, &p, arg);
		if (!st)
			st = mc_p2p_payload_held(&p) ? catalog_write(s, key, &p, rev)
						     : mc_meta_etcd_cas_del(s->meta, key, rev);
		mc_p2p_payload_release(&p);
	}
	if (st == MC_ERR_ETCD_TRANSACTION_FAIL)
		mc_set_error(st, "p2p: '%s' kept changing under %d compare-and-swap attempts", name,
			     CAS_ATTEMPTS);
	mc_free(key);
	return st;
}

static mc_status change_drop_gold(struct mc_p2p_store *s, struct mc_p2p_payload *p, void *arg)
{
	/* only ours: after another peer's force_create the gold is theirs
	 * (upstream clears every gold entry, and so deletes their object) */
	for (size_t i = 0; i < p->nshards; i++)
		mc_p2p_locs_remove(&p->shards[i].gold, s->local_name);
	return MC_OK;
}

static mc_status change_drop_replica(struct mc_p2p_store *s, struct mc_p2p_payload *p, void *arg)
{
	for (size_t i = 0; i < p->nshards; i++)
		mc_p2p_locs_remove(&p->shards[i].replicas, s->local_name);
	return MC_OK;
}

struct add_arg {
	const struct open_obj *obj;
	const bool *mask; /* shards to advertise; NULL = all */
};

/* Shard i of a layout lies at addrs[b] + off: walk the buffers. */
static char *shard_addr(const struct mc_p2p_payload *p, void *const *addrs, size_t shard)
{
	size_t k = 0;

	for (size_t b = 0; b < p->nsizes; b++) {
		for (uint64_t off = 0; off < p->size_list[b]; off += p->max_shard_size, k++)
			if (k == shard)
				return (char *)addrs[b] + off;
	}
	return NULL;
}

static bool same_layout(const struct mc_p2p_payload *p, const uint64_t *sizes, size_t n)
{
	return p->nsizes == n && memcmp(p->size_list, sizes, n * sizeof(*sizes)) == 0;
}

static mc_status change_add_replica(struct mc_p2p_store *s, struct mc_p2p_payload *p, void *arg)
{
	const struct open_obj *o = ((struct add_arg *)arg)->obj;
	const bool *mask = ((struct add_arg *)arg)->mask;
	size_t k = 0;
	mc_status st = MC_OK;

	if (!same_layout(p, o->sizes, o->n))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "p2p: '%s' was replaced by another layout during the pull",
				    o->name);
	for (size_t b = 0; b < p->nsizes && !st; b++)
		for (uint64_t off = 0; off < p->size_list[b] && !st; off += p->max_shard_size, k++)
			if (!mask || mask[k])
				st = mc_p2p_locs_add(&p->shards[k].replicas, s->local_name,
						     (uint64_t)(uintptr_t)o->addrs[b] + off);
	return st;
}

/* ---- pull ----------------------------------------------------------------------- */

struct pull_shard {
	size_t idx;
	char *dst;
	uint64_t size;
	const struct mc_p2p_loc *loc; /* this attempt's holder */
	unsigned max_attempts;
	bool done;
};

/* Replicas of sh held by another peer than self. */
static size_t others(const struct mc_p2p_locs *l, const char *self)
{
	size_t n = 0;

	for (size_t i = 0; i < l->n; i++)
		n += strcmp(l->v[i].segment_name, self) != 0;
	return n;
}

/* The k-th location of l not held by self. */
static const struct mc_p2p_loc *nth_other(const struct mc_p2p_locs *l, const char *self, size_t k)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i].segment_name, self) != 0 && k-- == 0)
			return &l->v[i];
	return NULL;
}

/* Holder for attempt a of shard sh (NULL when it has none): a random
 * replica (every reader that holds the shard serves it), else a random gold
 * holder; then each holder in turn.  Never ourselves.  (Random among every
 * holder, gold included, spread a later pair of readers better over the
 * gold holder and one replica, but loaded the gold holder's link in a
 * fan-out, the case that matters: docs/benchmarks.md.) */
static const struct mc_p2p_loc *pick(const struct mc_p2p_shard *sh, unsigned a, const char *self,
				     bool gold_first)
{
	size_t nr = others(&sh->replicas, self), ng = others(&sh->gold, self), k;

	if (!nr && !ng)
		return NULL;
	if (a == 0)
		k = nr && !(gold_first && ng) ? rand64() % nr : nr + rand64() % ng;
	else
		k = (a - 1) % (nr + ng);
	return k < nr ? nth_other(&sh->replicas, self, k) : nth_other(&sh->gold, self, k - nr);
}

/* One attempt over the shards not done: one batch of READs. */
static void pull_attempt(struct mc_p2p_store *s, struct pull_shard *ps, size_t n, unsigned a)
{
	size_t *task_of = mc_calloc(n, sizeof(size_t)), ntasks = 0;
	uint64_t bytes = 0;
	mc_batch_id batch;

	if (!task_of || mc_te_batch_new(s->te, n, &batch) != MC_OK) {
		mc_free(task_of);
		return; /* the attempt fails as a whole; the next may fare better */
	}
	for (size_t i = 0; i < n; i++) {
		struct mc_xfer_req req;
		mc_segment_id seg;
		mc_status st;

		if (ps[i].done || !ps[i].loc)
			continue;
		st = a == 0 ? mc_te_open_segment(s->te, ps[i].loc->segment_name, &seg)
			    : mc_te_reopen_segment(s->te, ps[i].loc->segment_name, &seg);
		if (st) {
			mc_debug("p2p: shard %zu attempt %u: cannot open %s: %s", ps[i].idx, a,
				 ps[i].loc->segment_name, mc_last_error());
			continue;
		}
		req = (struct mc_xfer_req){.opcode = MC_OP_READ,
					   .source = ps[i].dst,
					   .target_id = seg,
					   .target_offset = ps[i].loc->offset,
					   .length = ps[i].size};
		if (mc_te_submit(s->te, batch, &req, 1) != MC_OK) {
			mc_debug("p2p: shard %zu attempt %u from %s: %s", ps[i].idx, a,
				 ps[i].loc->segment_name, mc_last_error());
			continue;
		}
		task_of[ntasks++] = i;
		bytes += ps[i].size;
	}
	if (ntasks) {
		struct mc_xfer_status bs;
		mc_te_batch_wait(s->te, batch, PULL_WAIT_MS(bytes), &bs);
	}
	for (size_t t = 0; t < ntasks; t++) {
		struct mc_xfer_status ts;
		if (mc_te_task_status(s->te, batch, t, &ts) == MC_OK &&
		    ts.state == MC_XFER_COMPLETED)
			ps[task_of[t]].done = true;
		else
			mc_debug("p2p: shard %zu attempt %u from %s failed (state %d)",
				 ps[task_of[t]].idx, a, ps[task_of[t]].loc->segment_name, ts.state);
	}
	/* a batch that outlived its wait is discarded, not waited for: its
	 * reads may still land in the caller's buffers after the call failed
	 * (the same data, but the caller must not reuse the memory at once;
	 * noted in docs/python.md) */
	if (mc_te_batch_free(s->te, batch) != MC_OK)
		mc_te_batch_discard(s->te, batch);
	mc_free(task_of);
}

/* Pull the shards of p marked in want into addrs, recording in used[i] the
 * holder each came from; MC_ERR_TRANSFER_FAIL after the attempts.
 * gold_first: the first attempt goes to a gold holder (a re-pull after a
 * replica left: gold holders do not come and go with other readers). */
static mc_status pull(struct mc_p2p_store *s, const struct mc_p2p_payload *p, void *const *addrs,
		      const bool *want, struct mc_p2p_loc *used, bool gold_first)
{
	struct pull_shard *ps = mc_calloc(p->nshards, sizeof(*ps));
	unsigned top = 0;
	mc_status st = MC_OK;

	if (!ps)
		return mc_set_error(MC_ERR_NOMEM, "p2p: out of memory pulling '%s'", p->name);
	for (size_t i = 0; i < p->nshards; i++) {
		const struct mc_p2p_shard *sh = &p->shards[i];
		size_t holders = sh->replicas.n + sh->gold.n;

		ps[i] = (struct pull_shard){.idx = i,
					    .dst = shard_addr(p, addrs, i),
					    .size = sh->size,
					    .done = !want[i]};
		ps[i].max_attempts = holders + 1 > MC_P2P_MIN_ATTEMPTS ? (unsigned)holders + 1
								       : MC_P2P_MIN_ATTEMPTS;
		if (ps[i].max_attempts > top)
			top = ps[i].max_attempts;
	}
	for (unsigned a = 0; a < top; a++) {
		bool left = false;

		for (size_t i = 0; i < p->nshards; i++) {
			ps[i].loc = !ps[i].done && a < ps[i].max_attempts
					    ? pick(&p->shards[i], a, s->local_name, gold_first)
					    : NULL;
			left |= ps[i].loc != NULL;
		}
		if (!left)
			break;
		pull_attempt(s, ps, p->nshards, a);
		for (size_t i = 0; i < p->nshards; i++)
			if (ps[i].loc && ps[i].done && !used[i].segment_name) {
				used[i].segment_name = mc_strdup(ps[i].loc->segment_name);
				used[i].offset = ps[i].loc->offset;
				if (!used[i].segment_name)
					st = mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
			}
	}
	for (size_t i = 0; i < p->nshards && !st; i++) {
		const struct mc_p2p_shard *sh = &p->shards[i];
		if (!ps[i].done)
			st = mc_set_error(
				MC_ERR_TRANSFER_FAIL,
				"p2p: too many retries: shard %zu of '%s' failed from every "
				"one of its %zu holders in %u attempts",
				i, p->name, sh->replicas.n + sh->gold.n, ps[i].max_attempts);
	}
	mc_free(ps);
	return st;
}

/* ---- the fan-out: pulls in waves, advertised as they land ------------------------- */

/* A wave takes 1/WAVE_PARTS of the object (at least one shard) of shards
 * that only the gold holders have, from a random starting shard on, plus
 * every shard that other readers already hold: readers that start together
 * pull different parts from the gold holder and serve each other the rest. */
#define WAVE_PARTS 8

static void used_clear(struct mc_p2p_loc *used, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		mc_free(used[i].segment_name);
		used[i] = (struct mc_p2p_loc){0};
	}
}

static bool loc_in(const struct mc_p2p_locs *l, const struct mc_p2p_loc *x)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].offset == x->offset &&
		    strcmp(l->v[i].segment_name, x->segment_name) == 0)
			return true;
	return false;
}

/* Choose the next wave of shards not yet done into want; false when none is left. */
static bool next_wave(const struct mc_p2p_payload *p, const bool *done, size_t start,
		      const char *self, bool *want)
{
	uint64_t cap = p->size / WAVE_PARTS, gold = 0;
	bool any = false;

	for (size_t j = 0; j < p->nshards; j++) {
		size_t i = (start + j) % p->nshards;
		const struct mc_p2p_shard *sh = &p->shards[i];

		want[i] = false;
		if (done[i])
			continue;
		if (others(&sh->replicas, self) > 0) {
			want[i] = any = true;
		} else if (gold < cap) {
			want[i] = any = true;
			gold += sh->size;
		}
	}
	return any;
}

/*
 * Pull every shard of *p (the entry read at the start; replaced by fresher
 * reads) into addrs in waves; after each wave advertise its shards as
 * replicas (one CAS), so other readers can take them from us at once.  At
 * the end, shards whose holder has left since are pulled again (the bytes
 * may have come from memory being released), from a gold holder first, at
 * most MC_P2P_PULL_ROUNDS rounds.
 */
static mc_status pull_waves(struct mc_p2p_store *s, const char *key, const char *name,
			    struct mc_p2p_payload *p, struct open_obj *self, void *const *addrs)
{
	size_t n = p->nshards;
	bool *done = mc_calloc(n ? n : 1, sizeof(bool));
	bool *want = mc_calloc(n ? n : 1, sizeof(bool));
	struct mc_p2p_loc *used = mc_calloc(n ? n : 1, sizeof(*used));
	struct add_arg arg = {.obj = self, .mask = want};
	mc_status st = MC_OK;
	int64_t rev;

	if (!done || !want || !used) {
		st = mc_set_error(MC_ERR_NOMEM, "p2p: out of memory pulling '%s'", name);
		goto out;
	}
	for (unsigned round = 0;; round++) {
		size_t again = 0;

		for (bool first = true;; first = false) {
			if (!first) {
				struct mc_p2p_payload cur = {0};

				st = catalog_read(s, key, name, &cur, &rev);
				if (st)
					goto out;
				mc_p2p_payload_release(p);
				*p = cur;
				if (!same_layout(p, self->sizes, self->n) || p->nshards != n) {
					st = mc_set_error(MC_ERR_INVALID_PARAMS,
							  "p2p get_replica: '%s' was replaced by "
							  "another layout",
							  name);
					goto out;
				}
			}
			/* a fresh random start each wave: readers that chose near
			 * each other once do not go on in step */
			if (!next_wave(p, done, n ? rand64() % n : 0, s->local_name, want))
				break;
			st = pull(s, p, addrs, want, used, round > 0);
			if (st)
				goto out;
			st = catalog_update(s, name, change_add_replica, &arg);
			if (st)
				goto out;
			for (size_t i = 0; i < n; i++)
				done[i] |= want[i];
		}
		/* p is the entry read after the last wave: did our holders stay? */
		for (size_t i = 0; i < n; i++) {
			if (!used[i].segment_name || loc_in(&p->shards[i].gold, &used[i]) ||
			    loc_in(&p->shards[i].replicas, &used[i]))
				continue;
			done[i] = false;
			mc_free(used[i].segment_name);
			used[i] = (struct mc_p2p_loc){0};
			again++;
		}
		if (!again)
			break;
		if (round + 1 >= MC_P2P_PULL_ROUNDS) {
			st = mc_set_error(MC_ERR_TRANSFER_FAIL,
					  "p2p get_replica: too many retries: holders of '%s' left "
					  "during each of %d pulls",
					  name, MC_P2P_PULL_ROUNDS);
			goto out;
		}
	}
out:
	if (used)
		used_clear(used, n);
	mc_free(used);
	mc_free(want);
	mc_free(done);
	return st;
}

/* ---- public API ------------------------------------------------------------------ */

mc_status mc_p2p_store_new(const struct mc_p2p_params *params, struct mc_p2p_store **out)
{
	struct mc_te_params tp = {0};
	struct mc_p2p_store *s;
	char host[256] = "";
	const char *colon;
	mc_status st;

	if (!params || !params->metadata_uri || !params->local_server_name || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "p2p: metadata_uri and local_server_name are required");
	colon = strrchr(params->local_server_name, ':');
	snprintf(host, sizeof(host), "%.*s",
		 (int)(colon ? (size_t)(colon - params->local_server_name)
			     : strlen(params->local_server_name)),
		 params->local_server_name);
	s = mc_calloc(1, sizeof(*s));
	if (!s)
		return mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
	pthread_mutex_init(&s->lock, NULL);
	st = mc_meta_open(params->metadata_uri, &s->meta);
	if (st)
		goto err;
	if (strcmp(s->meta->ops->name, "etcd") != 0) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "p2p: the catalog needs etcd, and %s is not an etcd endpoint",
				  params->metadata_uri);
		goto err;
	}
	tp.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL;
	tp.metadata_uri = params->te_metadata_uri ? params->te_metadata_uri : params->metadata_uri;
	tp.local_name = params->local_server_name;
	tp.protocol = params->protocol ? params->protocol : "tcp";
	if (*host) {
		tp.field_mask |= MC_TE_PARAM_HOST;
		tp.host = host;
	}
	st = mc_te_new(&tp, &s->te);
	if (st)
		goto err;
	s->local_name = mc_strdup(mc_te_local_name(s->te));
	if (!s->local_name) {
		st = mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
		goto err;
	}
	*out = s;
	return MC_OK;
err:
	mc_p2p_store_free(s);
	return st;
}

/* Departure: every object still open here leaves the catalog as
 * unregister / delete_replica would take it out, so no reader picks this
 * peer after its engine is gone (a read already in flight fails its attempt
 * and moves on to the next holder).  Errors are logged, never fatal. */
static void withdraw_all(struct mc_p2p_store *s)
{
	for (;;) {
		char *name = NULL;
		bool gold = false;
		mc_status st;

		pthread_mutex_lock(&s->lock);
		for (size_t i = 0; i < s->nobjs && !name; i++)
			if (s->objs[i].ready) {
				name = mc_strdup(s->objs[i].name);
				gold = s->objs[i].gold;
			}
		pthread_mutex_unlock(&s->lock);
		if (!name)
			return;
		st = gold ? mc_p2p_unregister(s, name) : mc_p2p_delete_replica(s, name);
		if (st)
			mc_warn("p2p: closing: could not take '%s' out of the catalog: %s", name,
				mc_last_error());
		mc_free(name);
	}
}

void mc_p2p_store_free(struct mc_p2p_store *s)
{
	if (!s)
		return;
	if (s->te && s->meta)
		withdraw_all(s);
	for (size_t i = 0; i < s->nobjs; i++)
		obj_free(&s->objs[i]);
	if (s->te) {
		while (s->nranges) {
			s->ranges[0].refs = 1;
			range_unref_locked(s, (void *)(uintptr_t)s->ranges[0].addr,
					   s->ranges[0].len);
		}
		mc_te_free(s->te);
	}
	if (s->meta)
		mc_meta_close(s->meta);
	pthread_mutex_destroy(&s->lock);
	mc_free(s->objs);
	mc_free(s->ranges);
	mc_free(s->local_name);
	mc_free(s);
}

const char *mc_p2p_store_local_name(const struct mc_p2p_store *s)
{
	return s->local_name;
}

mc_status mc_p2p_register(struct mc_p2p_store *s, const char *name, void *const *addrs,
			  const uint64_t *sizes, size_t n, uint64_t max_shard_size,
			  const char *location, bool force_create)
{
	struct mc_p2p_payload p = {0};
	char *key = NULL, *json = NULL;
	size_t len, k = 0;
	mc_status st;

	st = check_name(name);
	if (!st)
		st = check_lists("register", addrs, sizes, n);
	if (st)
		return st;
	if (!max_shard_size || max_shard_size > MAX_CHUNK || MAX_CHUNK % max_shard_size)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "p2p register: max_shard_size %llu does not divide 4 GiB",
				    (unsigned long long)max_shard_size);
	st = obj_reserve(s, name, true, addrs, sizes, n);
	if (st)
		return st;
	st = ranges_ref(s, addrs, sizes, n, location ? location : "cpu:0");
	if (st)
		goto out_drop;
	p.name = (char *)name;
	p.size_list = (uint64_t *)sizes;
	p.nsizes = n;
	p.max_shard_size = max_shard_size;
	for (size_t i = 0; i < n; i++)
		p.size += sizes[i];
	st = mc_p2p_payload_split(&p);
	for (size_t b = 0; b < n && !st; b++)
		for (uint64_t off = 0; off < sizes[b] && !st; off += max_shard_size)
			st = mc_p2p_locs_add(&p.shards[k++].gold, s->local_name,
					     (uint64_t)(uintptr_t)addrs[b] + off);
	if (!st)
		st = mc_p2p_payload_encode(&p, &json, &len);
	key = st ? NULL : key_of(name);
	if (!st && !key)
		st = mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
	if (!st)
		st = force_create ? mc_meta_etcd_put_unleased(s->meta, key, json, len)
				  : mc_meta_etcd_cas_put(s->meta, key, json, len, 0);
	if (st == MC_ERR_ETCD_TRANSACTION_FAIL)
		st = mc_set_error(MC_ERR_OBJECT_ALREADY_EXISTS,
				  "p2p register: key '%s' already exists", key);
	p.name = NULL;
	p.size_list = NULL;
	mc_p2p_payload_release(&p);
	mc_free(key);
	mc_free(json);
	if (st) {
		ranges_unref(s, addrs, sizes, n);
		goto out_drop;
	}
	obj_set_ready(s, name);
	return MC_OK;
out_drop:
	obj_drop(s, name);
	return st;
}

mc_status mc_p2p_unregister(struct mc_p2p_store *s, const char *name)
{
	struct open_obj o;
	mc_status st = check_name(name);

	if (!st)
		st = obj_claim(s, name, true, &o);
	if (st)
		return st;
	st = catalog_update(s, name, change_drop_gold, NULL);
	/* the memory goes either way: the caller asked to stop sharing it */
	ranges_unref(s, o.addrs, o.sizes, o.n);
	obj_drop(s, name);
	return st;
}

mc_status mc_p2p_delete_replica(struct mc_p2p_store *s, const char *name)
{
	struct open_obj o;
	mc_status st = check_name(name);

	if (!st)
		st = obj_claim(s, name, false, &o);
	if (st)
		return st;
	st = catalog_update(s, name, change_drop_replica, NULL);
	ranges_unref(s, o.addrs, o.sizes, o.n);
	obj_drop(s, name);
	return st;
}

mc_status mc_p2p_get_replica(struct mc_p2p_store *s, const char *name, void *const *addrs,
			     const uint64_t *sizes, size_t n)
{
	struct mc_p2p_payload p = {0};
	struct open_obj self = {.addrs = (void **)addrs, .sizes = (uint64_t *)sizes, .n = n};
	char *key = NULL;
	int64_t rev;
	mc_status st;

	st = check_name(name);
	if (!st)
		st = check_lists("get_replica", addrs, sizes, n);
	if (st)
		return st;
	self.name = (char *)name;
	st = obj_reserve(s, name, false, addrs, sizes, n);
	if (st)
		return st;
	key = key_of(name);
	st = key ? catalog_read(s, key, name, &p, &rev)
		 : mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
	if (st)
		goto out_drop;
	if (!same_layout(&p, sizes, n)) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "p2p get_replica: '%s' is stored as %zu buffers totalling %llu "
				  "bytes; the receiver's %zu buffers do not have the same sizes",
				  name, p.nsizes, (unsigned long long)p.size, n);
		goto out_drop;
	}
	st = ranges_ref(s, addrs, sizes, n, "cpu:0");
	if (st)
		goto out_drop;
	st = pull_waves(s, key, name, &p, &self, addrs);
	if (st) {
		/* take back the shards advertised so far (best effort: the
		 * readers that find them gone move on to another holder) */
		mc_status keep = st;
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", mc_last_error());
		catalog_update(s, name, change_drop_replica, NULL);
		st = mc_set_error(keep, "%s", msg);
		goto out_unref;
	}
	mc_p2p_payload_release(&p);
	mc_free(key);
	obj_set_ready(s, name);
	return MC_OK;
out_unref:
	ranges_unref(s, addrs, sizes, n);
out_drop:
	mc_p2p_payload_release(&p);
	mc_free(key);
	obj_drop(s, name);
	return st;
}

mc_status mc_p2p_list(struct mc_p2p_store *s, const char *prefix, struct mc_p2p_info **infos_out,
		      size_t *n_out)
{
	char *from = mc_asprintf(MC_P2P_KEY_PREFIX "%s", prefix ? prefix : "");
	char *to = from ? mc_asprintf("%s\xff", from) : NULL;
	struct mc_etcd_kv *kvs = NULL;
	struct mc_p2p_info *infos = NULL;
	size_t nkv = 0, n = 0;
	mc_status st;

	if (!infos_out || !n_out)
		st = mc_set_error(MC_ERR_INVALID_PARAMS, "p2p list: NULL output");
	else if (!to)
		st = mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
	else
		st = mc_meta_etcd_range(s->meta, from, to, &kvs, &nkv, NULL);
	if (!st && nkv) {
		infos = mc_calloc(nkv, sizeof(*infos));
		if (!infos)
			st = mc_set_error(MC_ERR_NOMEM, "p2p: out of memory");
	}
	for (size_t i = 0; !st && i < nkv; i++) {
		struct mc_p2p_payload p;
		if (mc_p2p_payload_decode(kvs[i].value, kvs[i].len, &p) != MC_OK) {
			mc_warn("p2p list: skipping %s: %s", kvs[i].key, mc_last_error());
			continue;
		}
		infos[n] = (struct mc_p2p_info){.name = p.name,
						.max_shard_size = p.max_shard_size,
						.total_size = p.size,
						.size_list = p.size_list,
						.nsizes = p.nsizes};
		n++;
		p.name = NULL;
		p.size_list = NULL;
		mc_p2p_payload_release(&p);
	}
	mc_etcd_kvs_free(kvs, nkv);
	mc_free(from);
	mc_free(to);
	if (st) {
		mc_p2p_infos_free(infos, n);
		return st;
	}
	*infos_out = infos;
	*n_out = n;
	return MC_OK;
}

void mc_p2p_infos_free(struct mc_p2p_info *infos, size_t n)
{
	for (size_t i = 0; infos && i < n; i++) {
		mc_free(infos[i].name);
		mc_free(infos[i].size_list);
	}
	mc_free(infos);
}

/*
 * store/client_credit.c - puts through put credits (PutCredit, protocol
 * minor 12; the master's side is master/credit.c, the design
 * docs/design.md "Put credits").  With MC_STORE_PUT_CREDIT=N (64 by
 * default; 0: off) a client keeps up to N blocks the master reserved for it;
 * a put of a value that fits one (the same size with its trailer) writes
 * it there and completes it with one PutCredit, which also asks for a
 * block of the same size for the next put.  So a stream of same-sized
 * puts costs one exchange with the master per put (per batch for
 * put_many) instead of two; a put that finds no block asks for one first
 * (the two exchanges of PutStart and PutEnd).
 *
 * What stays as it was: a put returns success only once the master has
 * recorded the object complete (the PutCredit's answer, logged as PutEnd's
 * is); the value's checksum and chunk sums travel as PutEnd's do.  What
 * goes the PutStart/PutEnd way: upserts, configs other than one replica
 * with at most a preferred_segment asked of the placement (pins, lists of
 * preferred segments, groups, same-node placement), a master of minor 11 or older or that grants no
 * credits (DISK tier, local_first: not asked again for a second), and any
 * key whose credit the master refuses (MC_ERR_INVALID_WRITE: a new leader
 * that never granted it, or a credit that timed out there).
 *
 * A credit is used only within MC_STORE_PUT_CREDIT_MS (200) of the call
 * that asked for it and only under the leader that granted it (a new
 * leader knows none and may have placed other objects over it); older
 * ones go back with the next PutCredit (release) or from the heartbeat
 * thread (mc_store_credit_idle), the master parks unused ones after 10 s.
 * A client holds at most POOL_BYTES (64 MiB) of blocks, and uses credits
 * for values of at most VALUE_MAX (4 MiB) only.  The pool holds each answer (its replica
 * descriptors' strings) until the last of its credits is used.
 *
 * Threads: any number of callers; the pool is under credits.lock, held
 * for no call to the master or the engine.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "store/master_conn.h"
#include "store/proto.h"

#define NONE_WAIT_NS 1000000000ull /* no credits granted: ask again after 1 s */
#define POOL_BYTES   (64ull << 20) /* credits held: at most this many bytes of blocks */
/* Values above this go the PutStart/PutEnd way: the saved exchange is a
 * few percent of their transfer, and a block held ahead for them would
 * keep that much of a nearly full pool reserved for up to the window. */
#define VALUE_MAX (4ull << 20)

static mc_status credit_call(struct mc_store *s, const struct mc_store_credit_item *items,
			     uint32_t n, struct mc_store_chunk_sums *chunks, const char *segment,
			     const uint64_t *want, uint32_t nwant, int32_t *st);

struct mc_store_credit_batch {
	uint32_t refs; /* credits of it not yet used (under credits.lock) */
	struct mc_store_msg resp;
	struct mc_store_decode_arena arena; /* resp's strings and lists */
};

static void batch_free(struct mc_store_credit_batch *b)
{
	mc_store_msg_release_in(&b->arena, &b->resp);
	mc_store_decode_arena_free(&b->arena);
	mc_free(b);
}

void mc_store_credit_init(struct mc_store *s, int64_t max, int64_t window_ms)
{
	struct mc_store_credits *k = &s->credits;

	k->max = max > 0 ? (uint32_t)max : 0;
	k->window_ns = (uint64_t)(window_ms > 0 ? window_ms : 0) * 1000000ull;
	k->views = 0;
	k->none_until = 0;
	k->n = 0;
	k->nrel = 0;
}

/* Drop one reference to b (under the lock); the last frees the answer. */
static void batch_unref(struct mc_store_credit_batch *b)
{
	if (--b->refs == 0)
		batch_free(b);
}

/* Queue id to be given back (under the lock); lost when out of memory:
 * the master parks it after its time. */
static void rel_add(struct mc_store_credits *k, uint64_t id)
{
	if (k->nrel == k->rel_cap) {
		uint32_t cap = k->rel_cap ? 2 * k->rel_cap : 16;
		uint64_t *p = mc_realloc(k->rel, cap * sizeof(*p));

		if (!p)
			return;
		k->rel = p;
		k->rel_cap = cap;
	}
	k->rel[k->nrel++] = id;
}

/* Forget the pool's credits that may not be used any more (under the
 * lock): all after a new master connection (a restarted master or a new
 * leader knows none and may have placed other objects over them; a
 * reconnect to the same one leaves them to its 10 s reclaim), those older
 * than the window (given back). */
static void pool_prune(struct mc_store *s, uint64_t now)
{
	struct mc_store_credits *k = &s->credits;
	uint64_t views = mc_master_conn_epoch(s->conn);
	uint32_t j = 0;

	for (uint32_t i = 0; i < k->n; i++) {
		struct mc_store_credit *c = &k->v[i];

		if (views != k->views || now - c->granted_ns > k->window_ns) {
			if (views == k->views)
				rel_add(k, c->rep.id);
			batch_unref(c->b);
			continue;
		}
		k->v[j++] = *c;
	}
	k->n = j;
	if (views != k->views)
		k->nrel = 0;
	k->views = views;
}

void mc_store_credit_fini(struct mc_store *s)
{
	struct mc_store_credits *k = &s->credits;
	struct mc_store_put_credit_req req;
	struct mc_store_msg resp;

	pthread_mutex_lock(&k->lock);
	if (s->conn)
		pool_prune(s, mc_now_ns());
	for (uint32_t i = 0; i < k->n; i++) {
		rel_add(k, k->v[i].rep.id);
		batch_unref(k->v[i].b);
	}
	k->n = 0;
	if (k->nrel && s->conn) {
		memset(&req, 0, sizeof(req));
		req.client_id = s->client_id;
		req.tenant = mc_store_tenant(s);
		req.n_release = k->nrel;
		req.release = k->rel;
		if (mc_master_conn_call(s->conn, MC_STORE_PUT_CREDIT, &req, &resp) == MC_OK)
			mc_store_msg_release(&resp);
	}
	k->nrel = 0;
	mc_free(k->v);
	k->v = NULL;
	mc_free(k->rel);
	k->rel = NULL;
	k->rel_cap = 0;
	pthread_mutex_unlock(&k->lock);
}

void mc_store_credit_idle(struct mc_store *s)
{
	struct mc_store_credits *k = &s->credits;
	bool any;

	if (!k->max)
		return;
	pthread_mutex_lock(&k->lock);
	pool_prune(s, mc_now_ns());
	any = k->nrel != 0;
	pthread_mutex_unlock(&k->lock);
	if (any)
		(void)credit_call(s, NULL, 0, NULL, NULL, NULL, 0, NULL);
}

bool mc_store_credit_on(struct mc_store *s, const struct mc_store_config *cfg, bool upsert)
{
	if (!s->credits.max || upsert || !s->conn || mc_master_conn_peer_minor(s->conn) < 12)
		return false;
	if (cfg && (cfg->replica_num > 1 || cfg->with_soft_pin || cfg->with_hard_pin ||
		    cfg->prefer_alloc_in_same_node || cfg->n_preferred_segments ||
		    (cfg->group_id && *cfg->group_id) || cfg->n_group_ids))
		return false;
	return mc_now_ns() >= __atomic_load_n(&s->credits.none_until, __ATOMIC_RELAXED);
}

/* Take a credit of size on segment ("" or NULL: any) for each out[j]
 * (j < n) that holds none yet (out[j].b NULL), under one lock and one
 * prune for the batch; returns how many found none. */
static uint32_t pool_take_many(struct mc_store *s, const uint64_t *sizes, uint32_t n,
			       const char *segment, struct mc_store_credit *out)
{
	size_t seglen = segment ? strlen(segment) : 0;
	struct mc_store_credits *k = &s->credits;
	uint32_t miss = 0;

	pthread_mutex_lock(&k->lock);
	pool_prune(s, mc_now_ns());
	for (uint32_t j = 0; j < n; j++) {
		bool got = false;

		if (out[j].b)
			continue;
		for (uint32_t i = k->n; i-- > 0;) {
			if (k->v[i].rep.size != sizes[j] ||
			    (seglen && (k->v[i].rep.segment_name.len != seglen ||
					memcmp(k->v[i].rep.segment_name.ptr, segment, seglen))))
				continue;
			out[j] = k->v[i];
			k->v[i] = k->v[--k->n];
			got = true;
			break;
		}
		miss += !got;
	}
	pthread_mutex_unlock(&k->lock);
	return miss;
}

/* Done with a taken credit's descriptor; give it back too (unused). */
static void credit_done(struct mc_store *s, struct mc_store_credit *c, bool give_back)
{
	pthread_mutex_lock(&s->credits.lock);
	if (give_back)
		rel_add(&s->credits, c->rep.id);
	batch_unref(c->b);
	pthread_mutex_unlock(&s->credits.lock);
}

/*
 * One PutCredit: the n items (chunk sums per item, or NULL), the queued
 * give-backs, a want of the sizes in want; the granted credits go into
 * the pool (asked at t0), the items' statuses into st.
 */
static mc_status credit_call(struct mc_store *s, const struct mc_store_credit_item *items,
			     uint32_t n, struct mc_store_chunk_sums *chunks, const char *segment,
			     const uint64_t *want, uint32_t nwant, int32_t *st)
{
	struct mc_store_credits *k = &s->credits;
	struct mc_store_put_credit_req req;
	struct mc_store_credit_batch *b = mc_calloc(1, sizeof(*b));
	struct mc_store_decode_arena *prev;
	uint64_t *rel = NULL, t0 = mc_now_ns(), views = mc_master_conn_epoch(s->conn);
	uint32_t nrel = 0, room;
	mc_status rc;

	if (!b)
		return MC_ERR_NOMEM;
	pthread_mutex_lock(&k->lock);
	rel = k->rel; /* swapped out: given back by this call */
	nrel = k->nrel;
	k->rel = NULL;
	k->nrel = k->rel_cap = 0;
	room = k->max > k->n ? k->max - k->n : 0;
	{
		uint64_t held = 0;
		uint32_t fit = 0;

		for (uint32_t i = 0; i < k->n; i++)
			held += k->v[i].rep.size;
		while (fit < nwant && fit < room && held + want[fit] <= POOL_BYTES)
			held += want[fit++];
		room = fit;
	}
	pthread_mutex_unlock(&k->lock);
	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	req.tenant = mc_store_tenant(s);
	req.segment = mc_proto_str_c(segment);
	req.n_items = n;
	req.items = (struct mc_store_credit_item *)items;
	req.n_chunks = chunks ? n : 0;
	req.chunks = chunks;
	req.n_release = nrel;
	req.release = rel;
	req.n_want = nwant < room ? nwant : room;
	req.want = (uint64_t *)want;
	/* an answer's credits are used by later calls, maybe on other
	 * threads: its arena is its own, freed with it (batch_free) */
	mc_store_answer_arena(s, MC_STORE_ANSWER_CREDIT, n + req.n_want, &b->arena);
	prev = mc_store_decode_arena_use(&b->arena);
	rc = mc_master_conn_call(s->conn, MC_STORE_PUT_CREDIT, &req, &b->resp);
	mc_store_decode_arena_use(prev);
	mc_free(rel);
	if (rc != MC_OK) { /* no answer to release */
		mc_store_decode_arena_free(&b->arena);
		mc_free(b);
		return rc;
	}
	mc_store_answer_learn(s, MC_STORE_ANSWER_CREDIT, n + req.n_want, &b->arena);
	if (b->resp.body.put_credit_resp.n_items != n) {
		uint32_t got = b->resp.body.put_credit_resp.n_items;

		batch_free(b);
		return mc_set_error(MC_ERR_PROTOCOL, "master answered %u of %u items", got, n);
	}
	for (uint32_t i = 0; i < n; i++)
		st[i] = b->resp.body.put_credit_resp.statuses[i];
	pthread_mutex_lock(&k->lock);
	if (req.n_want && b->resp.body.put_credit_resp.n_credits == 0)
		__atomic_store_n(&k->none_until, mc_now_ns() + NONE_WAIT_NS, __ATOMIC_RELAXED);
	if (views != k->views || views != mc_master_conn_epoch(s->conn)) {
		/* granted across a reconnect: not used (nothing to give back
		 * to a master that may not know them) */
		b->refs = 1;
	} else {
		uint32_t nc = b->resp.body.put_credit_resp.n_credits;
		struct mc_store_credit *v;

		if (!k->v && nc)
			k->v = mc_calloc(k->max ? k->max : 1, sizeof(*k->v));
		v = k->v;
		b->refs = 1;
		for (uint32_t i = 0; i < nc; i++) {
			const struct mc_store_replica *r = &b->resp.body.put_credit_resp.credits[i];

			if (!v || k->n >= k->max) {
				rel_add(k, r->id);
				continue;
			}
			v[k->n].rep = *r;
			v[k->n].b = b;
			v[k->n].granted_ns = t0;
			k->n++;
			b->refs++;
		}
	}
	batch_unref(b); /* this call's own reference */
	pthread_mutex_unlock(&k->lock);
	return MC_OK;
}

/* Scratch of one credit put_many call. */
struct cput {
	struct mc_store_io *ios;
	struct mc_store_credit *cr;
	uint32_t *key_of; /* io -> key index */
	uint64_t *sizes;
	struct mc_store_credit_item *items;
	struct mc_store_chunk_sums *chunks;
	int32_t *st;
	uint32_t *item_of; /* item -> io */
};

/* One block for all of a call's arrays (a one-key put makes one
 * allocation here, not eight); each array starts 8-byte aligned. */
#define CPUT_AT(sz) (((sz) + 7) & ~(size_t)7)

static bool cput_alloc(struct cput *p, size_t n)
{
	size_t m = n ? n : 1, at = 0;
	const size_t sz[] = {
		CPUT_AT(m * sizeof(*p->ios)),	 CPUT_AT(m * sizeof(*p->cr)),
		CPUT_AT(m * sizeof(*p->key_of)), CPUT_AT(m * sizeof(*p->sizes)),
		CPUT_AT(m * sizeof(*p->items)),	 CPUT_AT(m * sizeof(*p->chunks)),
		CPUT_AT(m * sizeof(*p->st)),	 CPUT_AT(m * sizeof(*p->item_of)),
	};
	char *base;

	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < MC_ARRAY_SIZE(sz); i++)
		at += sz[i];
	base = mc_calloc(1, at);
	if (!base)
		return false;
	at = 0;
	p->ios = (void *)(base + at), at += sz[0];
	p->cr = (void *)(base + at), at += sz[1];
	p->key_of = (void *)(base + at), at += sz[2];
	p->sizes = (void *)(base + at), at += sz[3];
	p->items = (void *)(base + at), at += sz[4];
	p->chunks = (void *)(base + at), at += sz[5];
	p->st = (void *)(base + at), at += sz[6];
	p->item_of = (void *)(base + at);
	return true;
}

static void cput_free(struct cput *p)
{
	mc_free(p->ios); /* the block */
}

void mc_store_credit_put(struct mc_store *s, const char *const *keys, void *const *const *bufs,
			 const size_t *const *lens, const size_t *nbufs, const uint64_t *totals,
			 size_t n, const struct mc_store_config *cfg, mc_status *results,
			 bool *fallback)
{
	const char *seg = cfg && cfg->preferred_segment ? cfg->preferred_segment : "";
	struct cput p;
	uint32_t nio = 0, nmiss = 0, nitem = 0;
	bool any_chunks = false;
	mc_status rc;

	for (size_t i = 0; i < n; i++)
		fallback[i] = false;
	if (!cput_alloc(&p, n)) {
		for (size_t i = 0; i < n; i++)
			fallback[i] = results[i] == MC_OK;
		cput_free(&p);
		return;
	}
	/* a credit for each key, from the pool; one ask for the missing sizes */
	for (size_t i = 0; i < n; i++) {
		uint64_t size;

		if (results[i] != MC_OK)
			continue;
		size = totals[i] + mc_store_trailer_for(s, totals[i]);
		if (totals[i] > VALUE_MAX || size > MC_STORE_CREDIT_MAX_BLOCK) {
			fallback[i] = true; /* a large value: the two calls */
			continue;
		}
		p.key_of[nio] = (uint32_t)i;
		p.sizes[nio++] = size;
	}
	if (nio && pool_take_many(s, p.sizes, nio, seg, p.cr)) {
		for (uint32_t j = 0; j < nio; j++)
			if (!p.cr[j].b)
				p.sizes[nmiss++] = p.sizes[j]; /* the sizes to ask for */
		(void)credit_call(s, NULL, 0, NULL, seg, p.sizes, nmiss, p.st);
		for (uint32_t j = 0; j < nio; j++) {
			uint32_t i = p.key_of[j];

			p.sizes[j] = totals[i] + mc_store_trailer_for(s, totals[i]);
		}
		(void)pool_take_many(s, p.sizes, nio, seg, p.cr);
	}
	for (uint32_t j = 0; j < nio; j++) {
		uint32_t i = p.key_of[j];
		struct mc_store_io *io = &p.ios[j];

		if (!p.cr[j].b) {
			fallback[i] = true; /* none granted: the two-call way */
			io->status = MC_ERR_INVALID_REPLICA;
			continue;
		}
		p.cr[j].rep.size = totals[i]; /* the value's bytes; the trailer follows */
		io->bufs = bufs[i];
		io->lens = lens[i];
		io->nbufs = nbufs[i];
		io->len = totals[i];
		io->reps = &p.cr[j].rep;
		io->nreps = 1;
		io->key = mc_proto_str_c(keys[i]);
		io->tlen = p.sizes[j] - totals[i];
		io->sign = true;
		io->credit = true;
		io->status = MC_OK;
	}
	mc_store_run_transfers(s, p.ios, nio, MC_OP_WRITE);
	for (uint32_t j = 0; j < nio; j++) {
		uint32_t i = p.key_of[j];
		struct mc_store_credit_item *it;

		if (!p.cr[j].b)
			continue;
		if (p.ios[j].status != MC_OK) {
			/* a failed write: the block goes back; one that did not
			 * move (its holder went, or restarted under its name
			 * and no longer has the block's memory) is put again
			 * the two-call way, else the put failed */
			fallback[i] = p.ios[j].status == MC_ERR_TRANSFER_FAIL;
			results[i] = fallback[i] ? MC_OK : p.ios[j].status;
			if (fallback[i])
				mc_info("put %s: its credit's block could not be written; putting "
					"it again",
					keys[i]);
			credit_done(s, &p.cr[j], true);
			p.cr[j].b = NULL;
			continue;
		}
		it = &p.items[nitem];
		it->key = mc_proto_str_c(keys[i]);
		it->value_len = totals[i];
		it->trailer_len = p.ios[j].tlen;
		it->credit = p.cr[j].rep.id;
		it->address = p.cr[j].rep.address;
		it->checksum.present = p.ios[j].has_cksum;
		it->checksum.value = p.ios[j].cksum;
		p.chunks[nitem].n = p.ios[j].nchunks;
		p.chunks[nitem].v = p.ios[j].chunk_sums;
		any_chunks |= p.ios[j].nchunks != 0;
		p.item_of[nitem++] = j;
	}
	if (nitem) {
		/* complete them, and ask for as many blocks of their sizes */
		for (uint32_t e = 0; e < nitem; e++)
			p.sizes[e] = p.items[e].value_len + p.items[e].trailer_len;
		rc = credit_call(s, p.items, nitem, any_chunks ? p.chunks : NULL, seg, p.sizes,
				 nitem, p.st);
		for (uint32_t e = 0; e < nitem; e++) {
			uint32_t j = p.item_of[e], i = p.key_of[j];
			mc_status st = rc == MC_OK ? (mc_status)p.st[e] : rc;

			if (st == MC_ERR_OBJECT_ALREADY_EXISTS)
				st = MC_OK; /* insert-if-absent: upstream reports success */
			if (st == MC_ERR_INVALID_WRITE) {
				mc_info("put %s: the master refused its credit; putting it again",
					keys[i]);
				fallback[i] = true;
				st = MC_OK;
			}
			results[i] = st;
			credit_done(s, &p.cr[j], false);
		}
	}
	for (uint32_t j = 0; j < nio; j++)
		mc_store_io_sums_free(&p.ios[j]);
	cput_free(&p);
}

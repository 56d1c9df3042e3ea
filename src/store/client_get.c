/*
 * store/client_get.c - the store client's get paths: the replica lookups
 * (GetReplicaList, BatchGetReplicaList, and the wait for an object a
 * failover hid), the reads from the location cache (client_loccache.c),
 * the read of one key (mc_store_get_one) or of a batch (mc_store_get_many),
 * and mc_store_get and mc_store_batch_get, which malloc the values.  The
 * transfers are client_xfer.c; the public calls' argument checks and
 * metrics are client_calls.c.
 *
 * Threads: any number of callers at once, as in client_xfer.c: a call's
 * state is on its stack or in its own allocations.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "mem/hostmem.h" /* mc_hostmem_populate_bufs */
#include "store/client_metrics.h"
#include "store/master_conn.h"
#include "store/proto.h"

/* ---- get --------------------------------------------------------------------------------- */

/*
 * After a failover the new leader hides each object until the client
 * owning its segment has connected and remounted (its own remount is done
 * before its first call, master_conn.c; another client's comes within its
 * heartbeat's reconnect).  A lookup answered REPLICA_IS_NOT_READY that
 * soon after following a new leader is asked again every
 * FAILOVER_RETRY_MS until FAILOVER_HIDDEN_MS have passed since the
 * failover, so a get does not fail for an object that is only waiting for
 * its owner.  (One really being written waits that long at most.)
 */
#define FAILOVER_HIDDEN_MS 5000
#define FAILOVER_RETRY_MS  50

mc_status mc_store_lookup(struct mc_store *s, const char *key, struct mc_store_msg *resp)
{
	struct mc_store_key_req req = {mc_store_tenant(s), mc_proto_str_c(key)};
	mc_status rc = mc_master_conn_call(s->conn, MC_STORE_GET_REPLICA_LIST, &req, resp);

	while (rc == MC_ERR_REPLICA_IS_NOT_READY &&
	       mc_master_conn_new_leader_within(s->conn, FAILOVER_HIDDEN_MS)) {
		struct timespec ts = {0, FAILOVER_RETRY_MS * 1000000L};

		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		rc = mc_master_conn_call(s->conn, MC_STORE_GET_REPLICA_LIST, &req, resp);
	}
	return rc;
}

/*
 * Gets from the location cache (client_loccache.c): a read of the cached
 * replica, checked against the cached checksum, that must end before the
 * entry's lease deadline.  A read that fails, is not checked (mixed host
 * and device buffers) or fails its check drops the entry and the key is
 * asked of the master as without the cache; the replica is not reported
 * corrupt (the location is stale, the replica may be fine).  The calls
 * that allocate the result use the cache only with this file's own
 * allocators, which may be called again (a stale entry's size may be
 * wrong); a caller's allocator is called once, as store.h promises.
 */
static void *malloc_into(void *ctx, size_t size);
static void *malloc_nth(void *ctx, size_t i, size_t size);

/* Fill io for a read of e's object into bufs. */
static void cached_io(struct mc_store_io *io, const struct mc_store_loc *e, void *const *bufs,
		      const size_t *lens, size_t nbufs)
{
	memset(io, 0, sizeof(*io));
	io->bufs = bufs;
	io->lens = lens;
	io->nbufs = nbufs;
	io->len = e->rep.size;
	io->reps = &e->rep;
	io->nreps = 1;
	io->key = (struct mc_proto_str){e->key, (uint32_t)e->key_len};
	io->check = true;
	io->cksum = e->cksum;
	io->cached = true;
	if (e->table) { /* checked by its trailer (client_verify.c) */
		io->tlen = mc_store_trailer_len(io->len);
		io->tbl_at = io->len;
	}
}

/* Did the cached read io of e end well: moved, checked, within the lease
 * at now_ms (read after it ended)?  If not, e goes. */
static bool cached_ok(struct mc_store *s, const struct mc_store_io *io, struct mc_store_loc *e,
		      uint64_t now_ms)
{
	if (io->status == MC_OK && io->checked && now_ms < e->deadline_ms)
		return true;
	atomic_fetch_add(&s->metrics->loc_stale, 1);
	mc_store_loc_forget(s, e->key, e->key_len);
	return false;
}

/* mc_store_get_one from the cache: the size, or MC_INPROGRESS (ask the master). */
static int64_t get_cached(struct mc_store *s, const char *key, void *const *bufs,
			  const size_t *lens, size_t nbufs, uint64_t cap, mc_store_alloc_fn alloc,
			  void *ctx)
{
	struct mc_store_loc *e;
	struct mc_store_io io;
	void *abuf[1];
	size_t alen[1];
	int64_t n = MC_INPROGRESS;

	if ((alloc && alloc != malloc_into) || !(e = mc_store_loc_find(s, key, strlen(key))))
		return MC_INPROGRESS;
	if (alloc) {
		if (e->rep.size > SIZE_MAX || !(abuf[0] = alloc(ctx, (size_t)e->rep.size)))
			goto out; /* the master's answer decides */
		alen[0] = (size_t)e->rep.size;
		bufs = abuf;
		lens = alen;
		nbufs = 1;
	} else if (e->rep.size > cap) {
		goto out;
	}
	cached_io(&io, e, bufs, lens, nbufs);
	mc_store_run_transfers(s, &io, 1, MC_OP_READ);
	if (cached_ok(s, &io, e, mc_now_ms()))
		n = (int64_t)e->rep.size;
out:
	mc_store_loc_unref(e);
	return n;
}

/* Read key into bufs (capacity cap in all), or, with alloc, into one
 * buffer alloc(ctx, size) returns once the size is known; returns the size
 * or a status. */
int64_t mc_store_get_one(struct mc_store *s, const char *key, void *const *bufs, const size_t *lens,
			 size_t nbufs, uint64_t cap, mc_store_alloc_fn alloc, void *ctx)
{
	struct mc_store_loc_mark mk;
	struct mc_store_msg resp;
	const struct mc_store_replica *r;
	struct mc_store_io io;
	uint64_t t0, ttl;
	void *abuf[1];
	size_t alen[1];
	mc_status rc;

	if (s->loc) {
		int64_t n = get_cached(s, key, bufs, lens, nbufs, cap, alloc, ctx);

		if (n != MC_INPROGRESS)
			return n;
	}
	mc_store_loc_mark(s, &mk);
	t0 = mk.sent_ms;
	rc = mc_store_lookup(s, key, &resp);
	if (rc != MC_OK)
		return rc;
	ttl = resp.body.replica_list.lease_ttl_ms;
	r = mc_store_choose_replica(s, &resp.body.replica_list);
	if (!r) {
		rc = mc_set_error(MC_ERR_INVALID_REPLICA, "%s has no replica readable here", key);
		goto out;
	}
	if (alloc) {
		if (r->size > SIZE_MAX || !(abuf[0] = alloc(ctx, (size_t)r->size))) {
			rc = mc_set_error(MC_ERR_NOMEM, "no memory for the %" PRIu64 " bytes of %s",
					  r->size, key);
			goto out;
		}
		alen[0] = (size_t)r->size;
		bufs = abuf;
		lens = alen;
		nbufs = 1;
		mc_hostmem_populate_bufs(abuf, alen, 1); /* fresh from the allocator */
	} else if (r->size > cap) {
		rc = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "%s is %" PRIu64 " bytes, the buffer holds %" PRIu64, key,
				  r->size, cap);
		goto out;
	}
	memset(&io, 0, sizeof(io));
	io.bufs = bufs;
	io.lens = lens;
	io.nbufs = nbufs;
	io.len = r->size;
	io.reps = r;
	io.nreps = 1;
	io.key = mc_proto_str_c(key);
	mc_store_io_alternates(&io, &resp.body.replica_list, r, 0);
	mc_store_run_transfers(s, &io, 1, MC_OP_READ);
	rc = io.status;
	if (rc == MC_OK && mc_store_read_leased(io.reps) && mc_now_ms() > t0 + ttl)
		rc = mc_set_error(MC_ERR_LEASE_EXPIRED,
				  "read of %s outlived its %" PRIu64 " ms lease", key, ttl);
	if (rc == MC_OK) {
		int64_t size = (int64_t)r->size;

		/* read from the replica chosen (no retry), and checked */
		if (s->loc && io.reps == r && io.checked)
			mc_store_loc_add(s, &mk, key, strlen(key), &resp.body.replica_list, r);
		mc_store_msg_release(&resp);
		return size;
	}
out:
	mc_store_msg_release(&resp);
	return rc;
}

static mc_status lookup(struct mc_store *s, struct mc_proto_str *keys, uint32_t n,
			struct mc_store_msg *resp, bool chunks)
{
	struct mc_store_keys_req req = {.tenant = mc_store_tenant(s), .n_keys = n, .keys = keys};
	const struct mc_store_batch_replica_list *l = &resp->body.batch_replica_list;
	mc_status rc;

	/* minor 9: an older master would refuse the tail */
	if (chunks && s->verify && mc_master_conn_peer_minor(s->conn) >= 9)
		req.want = (struct mc_proto_opt_u64){true, MC_STORE_WANT_CHUNKS};
	rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_GET_REPLICA_LIST, &req, resp);
	if (rc != MC_OK)
		return rc;
	if (l->n_items != n || (l->n_chunks && l->n_chunks != n) ||
	    (l->n_tables && l->n_tables != n) || (l->n_nocache && l->n_nocache != n)) {
		rc = mc_set_error(MC_ERR_PROTOCOL,
				  "master answered %u of %u keys (%u chunk lists, %u trailers)",
				  l->n_items, n, l->n_chunks, l->n_tables);
		mc_store_msg_release(resp);
		return rc;
	}
	/* minor 10: each list's trailer hash, from the batch's tail */
	for (uint32_t j = 0; j < l->n_tables; j++)
		resp->body.batch_replica_list.items[j].list.table_cksum = l->tables[j];
	/* minor 15: the replicas not to cache, from the batch's tail */
	for (uint32_t j = 0; j < l->n_nocache; j++)
		resp->body.batch_replica_list.items[j].list.nocache =
			(struct mc_proto_opt_u64){l->nocache[j] != 0, l->nocache[j]};
	return rc;
}

mc_status mc_store_lookup_chunks(struct mc_store *s, struct mc_proto_str *keys, uint32_t n,
				 struct mc_store_msg *resp)
{
	return lookup(s, keys, n, resp, true);
}

mc_status mc_store_lookup_batch_in(struct mc_store *s, struct mc_store_decode_arena *a,
				   struct mc_proto_str *keys, uint32_t n, struct mc_store_msg *resp)
{
	struct mc_store_decode_arena *prev = mc_store_decode_arena_use(a);
	mc_status rc = lookup(s, keys, n, resp, false);

	mc_store_decode_arena_use(prev);
	return rc;
}

/*
 * mc_store_get_many from the cache: the keys with a live entry are read in one
 * engine batch, and each that ends well gets its size in results[]; the
 * others keep MC_OK, for the master.
 */
static void get_many_cached(struct mc_store *s, const char *const *keys, void *const *const *bufs,
			    const size_t *const *lens, const size_t *nbufs, size_t n,
			    mc_store_batch_alloc_fn alloc, void *actx, int64_t *results)
{
	struct mc_store_loc **es;
	struct mc_store_io *ios;
	uint32_t *at;
	void **abufs;
	size_t *alens, nh = 0;
	/* one allocation for the five arrays, each of n (ios first: the
	 * strictest alignment) */
	size_t each = sizeof(*ios) + sizeof(*es) + sizeof(*abufs) + sizeof(*alens) + sizeof(*at);
	void *scratch;

	if (alloc && alloc != malloc_nth)
		return;
	if (n > SIZE_MAX / each || !(scratch = mc_calloc(n, each)))
		return; /* all of them from the master */
	ios = scratch;
	es = (struct mc_store_loc **)(ios + n);
	abufs = (void **)(es + n);
	alens = (size_t *)(abufs + n);
	at = (uint32_t *)(alens + n);
	if (!mc_store_loc_find_many(s, keys, results, n, es))
		goto out;
	for (size_t i = 0; i < n; i++) {
		struct mc_store_loc *e = es[i];
		uint64_t cap = 0;
		bool fits;

		if (!e)
			continue;
		if (alloc) {
			abufs[nh] = e->rep.size <= SIZE_MAX ? alloc(actx, i, (size_t)e->rep.size)
							    : NULL;
			alens[nh] = (size_t)e->rep.size;
			fits = abufs[nh] != NULL;
			if (fits)
				cached_io(&ios[nh], e, &abufs[nh], &alens[nh], 1);
		} else {
			for (size_t b = 0; b < nbufs[i]; b++)
				cap += lens[i][b];
			fits = e->rep.size <= cap; /* if not, the master's answer decides */
			if (fits)
				cached_io(&ios[nh], e, bufs[i], lens[i], nbufs[i]);
		}
		if (!fits) {
			mc_store_loc_unref(e);
			es[i] = NULL;
			continue;
		}
		at[nh++] = (uint32_t)i;
	}
	if (nh) {
		uint64_t now;

		if (alloc)
			mc_hostmem_populate_bufs(abufs, alens, nh);
		mc_store_run_transfers(s, ios, nh, MC_OP_READ);
		now = mc_now_ms(); /* after every read of the batch ended */
		for (size_t j = 0; j < nh; j++)
			if (cached_ok(s, &ios[j], es[at[j]], now))
				results[at[j]] = (int64_t)ios[j].len;
	}
	for (size_t i = 0; i < n; i++)
		mc_store_loc_unref(es[i]);
out:
	mc_free(scratch);
}

/*
 * Batch read: one BatchGetReplicaList, one engine batch, per-key lease
 * checks, for every key whose results[] entry is MC_OK on entry.  Object i
 * lands in bufs[i] (nbufs[i] buffers of lens[i][..] bytes), or, when alloc
 * is given, in what alloc(actx, i, size) returned once its size was known
 * (the caller's to release, read or not; mc_store_batch_get_alloc).
 */
void mc_store_get_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
		       const size_t *const *lens, const size_t *nbufs, size_t n,
		       mc_store_batch_alloc_fn alloc, void *actx, int64_t *results)
{
	struct mc_proto_str *kv = NULL;
	struct mc_store_io *ios = NULL;
	uint32_t *sent = NULL;
	void **alloc_bufs = NULL; /* per sent key: what alloc returned */
	size_t *alloc_lens = NULL;
	struct mc_store_loc_mark mk;
	struct mc_store_decode_arena arena;
	struct mc_store_msg resp;
	uint32_t nsent = 0;
	size_t left = 0; /* keys for the master */
	uint64_t t0;
	mc_status rc;

	if (s->loc)
		get_many_cached(s, keys, bufs, lens, nbufs, n, alloc, actx, results);
	for (size_t i = 0; i < n; i++)
		left += results[i] == MC_OK;
	if (!left)
		return; /* all read from the cache */
	kv = mc_calloc(n, sizeof(*kv));
	ios = mc_calloc(n, sizeof(*ios));
	sent = mc_calloc(n, sizeof(*sent));
	if (alloc) {
		alloc_bufs = mc_calloc(n, sizeof(*alloc_bufs));
		alloc_lens = mc_calloc(n, sizeof(*alloc_lens));
	}
	if (!kv || !ios || !sent || (alloc && (!alloc_bufs || !alloc_lens))) {
		rc = MC_ERR_NOMEM;
		goto fail_all;
	}
	for (size_t i = 0; i < n; i++) {
		if (results[i] != MC_OK)
			continue;
		kv[nsent] = mc_proto_str_c(keys[i]);
		sent[nsent++] = (uint32_t)i;
	}
	if (!nsent)
		goto out;
	mc_store_loc_mark(s, &mk);
	t0 = mk.sent_ms;
	mc_store_answer_arena(s, MC_STORE_ANSWER_LOOKUP, nsent, &arena);
	rc = mc_store_lookup_batch_in(s, &arena, kv, nsent, &resp);
	if (rc != MC_OK) {
		mc_store_decode_arena_free(&arena);
		goto fail_all;
	}
	mc_store_answer_learn(s, MC_STORE_ANSWER_LOOKUP, nsent, &arena);
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_replica_list_item *it =
			&resp.body.batch_replica_list.items[j];
		uint32_t i = sent[j];
		struct mc_store_io *io = &ios[j];
		const struct mc_store_replica *r;
		uint64_t cap = 0;

		io->status = (mc_status)it->status;
		if (io->status != MC_OK)
			continue;
		r = mc_store_choose_replica(s, &it->list);
		if (!r) {
			io->status = MC_ERR_INVALID_REPLICA;
			continue;
		}
		if (alloc) {
			alloc_lens[j] = (size_t)r->size;
			alloc_bufs[j] = alloc(actx, i, (size_t)r->size);
			if (!alloc_bufs[j]) {
				io->status = mc_set_error(
					MC_ERR_NOMEM, "batch_get: no memory for %s (%llu bytes)",
					keys[i], (unsigned long long)r->size);
				continue;
			}
			io->bufs = &alloc_bufs[j];
			io->lens = &alloc_lens[j];
			io->nbufs = 1;
		} else {
			for (size_t b = 0; b < nbufs[i]; b++)
				cap += lens[i][b];
			if (r->size > cap) {
				io->status = MC_ERR_INVALID_PARAMS;
				continue;
			}
			io->bufs = bufs[i];
			io->lens = lens[i];
			io->nbufs = nbufs[i];
		}
		io->len = r->size;
		io->reps = r;
		io->nreps = 1;
		io->key = kv[j];
		mc_store_io_alternates(io, &it->list, r, 0);
	}
	/* what alloc returned may be lazily mapped: fault it in at once
	 * rather than a page at a time in the receive (mem/hostmem.h) */
	if (alloc)
		mc_hostmem_populate_bufs(alloc_bufs, alloc_lens, nsent);
	mc_store_run_transfers(s, ios, nsent, MC_OP_READ);
	for (uint32_t j = 0; j < nsent; j++) {
		uint32_t i = sent[j];
		uint64_t ttl = resp.body.batch_replica_list.items[j].list.lease_ttl_ms;
		const struct mc_store_replica_list *l = &resp.body.batch_replica_list.items[j].list;

		if (ios[j].status != MC_OK) {
			results[i] = ios[j].status;
		} else if (mc_store_read_leased(ios[j].reps) && mc_now_ms() > t0 + ttl) {
			results[i] = MC_ERR_LEASE_EXPIRED;
		} else {
			results[i] = (int64_t)ios[j].len;
			/* read from the replica chosen (no retry), and checked */
			if (s->loc && ios[j].checked && ios[j].reps >= l->replicas &&
			    ios[j].reps < l->replicas + l->n_replicas)
				mc_store_loc_add(s, &mk, keys[i], kv[j].len, l, ios[j].reps);
		}
	}
	mc_store_msg_release_in(&arena, &resp);
	mc_store_decode_arena_free(&arena);
	goto out;
fail_all:
	for (size_t i = 0; i < n; i++)
		if (results[i] == MC_OK)
			results[i] = rc;
out:
	mc_free(kv);
	mc_free(ios);
	mc_free(sent);
	mc_free(alloc_bufs);
	mc_free(alloc_lens);
}

/* ---- the calls that allocate the result -------------------------------------------------- */

static void *malloc_into(void *ctx, size_t size)
{
	void **out = ctx;
	free(*out); /* a second call: a stale cached size (get_cached) */
	*out = malloc(size ? size : 1);
	return *out;
}

int64_t mc_store_get(struct mc_store *s, const char *key, void **value_out)
{
	void *buf = NULL;
	int64_t n;

	if (!value_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "get: NULL value_out");
	n = mc_store_get_alloc(s, key, malloc_into, &buf);
	if (n < 0) {
		free(buf);
		return n;
	}
	*value_out = buf;
	return n;
}

static void *malloc_nth(void *ctx, size_t i, size_t size)
{
	void **values = ctx;
	free(values[i]); /* a second call: a stale cached size (get_many_cached) */
	values[i] = malloc(size ? size : 1);
	return values[i];
}

mc_status mc_store_batch_get(struct mc_store *s, const char *const *keys, size_t n,
			     void **values_out, int64_t *results)
{
	mc_status rc;

	for (size_t i = 0; values_out && i < n; i++)
		values_out[i] = NULL;
	if (n && !values_out) {
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_get: NULL arrays");
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	rc = mc_store_batch_get_alloc(s, keys, n, malloc_nth, values_out, results);
	for (size_t i = 0; results && i < n; i++)
		if (results[i] < 0) {
			free(values_out[i]);
			values_out[i] = NULL;
		}
	return rc;
}

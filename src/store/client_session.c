/*
 * store/client_session.c - batch sessions (spec store.md 1.11): a get
 * session pins what GetReplicaList said about a key (its replica and the
 * lease deadline), a put session what BatchPutStart allocated (every
 * replica), so that many ranged calls can move parts of the object without
 * asking the master again; BatchPutEnd or BatchPutRevoke closes a put
 * session, a get session just ends.  The ranged transfers themselves are
 * client_xfer.c's (struct mc_store_ranges, mc_store_run_transfers).
 *
 * The sessions of a client sit in two tsearch trees keyed by object key
 * (s->get_sessions, s->put_sessions), each node a struct session that owns
 * copies of the replica descriptors, strings and all, in one blob.
 *
 * Invariants, all under sess_lock (a leaf: never held across a master
 * call or a transfer): a ranged call takes a use of each session it
 * touches (users++) and gives it back when its transfers are done; a
 * session taken out of its tree (ended, replaced, or being finished) is
 * detached, and whoever drops the last use of a detached session frees it.
 * Ending a put session detaches it first, so no new ranged write finds it,
 * and waits (awaited, sess_cond) until the uses in flight are done before
 * telling the master; if the master is not reached, the session goes back
 * into its tree for a retry.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"
#include "store/dummy_proto.h"

#include <inttypes.h>
#include <pthread.h>
#include <search.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/master_conn.h"
#include "store/proto.h"

/* ---- the session tables ------------------------------------------------------------------ */

/* One end of a session: what the master said about a key, kept by the
 * client between calls. */
struct session {
	const char *key;		/* in blob; the trees' order */
	uint64_t size;			/* object bytes */
	uint64_t deadline_ms;		/* get: the lease's end (mc_now_ms) */
	struct mc_store_replica *reps;	/* strings in blob */
	uint32_t nreps;			/* get: 1; put: every replica */
	unsigned users;			/* ranged calls using it (sess_lock) */
	bool detached;			/* out of its tree (sess_lock) */
	bool awaited;			/* detached: an ender waits for users == 0 */
	struct mc_store_seq_hash *hash; /* put: the object's checksums, in any order */
	/* get: the object's checksums, to check what its ranged reads cover
	 * (client_ranges.c, mc_store_chk_*) */
	bool has_cksum;
	uint64_t cksum;
	struct mc_store_chunk_sums sums;
	struct mc_proto_opt_u64 table; /* minor 10: its trailer's hash */
	uint64_t lease_ms;	       /* get: the lease granted, ending at deadline_ms */
	char *blob;
};

static int session_cmp(const void *a, const void *b)
{
	return strcmp(((const struct session *)a)->key, ((const struct session *)b)->key);
}

static void session_free(void *p)
{
	struct session *x = p;
	if (!x)
		return;
	mc_store_seq_hash_free(x->hash);
	mc_free(x->sums.v);
	mc_free(x->reps);
	mc_free(x->blob);
	mc_free(x);
}

static void blob_str(char **p, struct mc_proto_str *v)
{
	if (v->len)
		memcpy(*p, v->ptr, v->len);
	(*p)[v->len] = '\0';
	v->ptr = *p;
	*p += (size_t)v->len + 1;
}

/* A session for key over copies of reps (which may point into a response). */
static struct session *session_new(const char *key, uint64_t size,
				   const struct mc_store_replica *reps, uint32_t nreps)
{
	size_t klen = strlen(key) + 1, slen = 0;
	struct session *x;
	char *p;

	for (uint32_t k = 0; k < nreps; k++)
		slen += (size_t)reps[k].segment_name.len + reps[k].transport_endpoint.len +
			reps[k].protocol.len + reps[k].file_path.len + 4;
	x = mc_calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->reps = mc_calloc(nreps ? nreps : 1, sizeof(*x->reps));
	x->blob = mc_malloc(klen + slen);
	if (!x->reps || !x->blob) {
		session_free(x);
		return NULL;
	}
	memcpy(x->blob, key, klen);
	x->key = x->blob;
	p = x->blob + klen;
	for (uint32_t k = 0; k < nreps; k++) {
		x->reps[k] = reps[k];
		blob_str(&p, &x->reps[k].segment_name);
		blob_str(&p, &x->reps[k].transport_endpoint);
		blob_str(&p, &x->reps[k].protocol);
		blob_str(&p, &x->reps[k].file_path);
	}
	x->nreps = nreps;
	x->size = size;
	return x;
}

/* The session of key in tree, or NULL; sess_lock held. */
static struct session *session_find_locked(void *const *tree, const char *key)
{
	struct session probe = {.key = key};
	void *node = tfind(&probe, tree, session_cmp);
	return node ? *(struct session **)node : NULL;
}

/* Take x out of its tree; it is freed now or, when ranged calls still
 * use it, by the last of them.  sess_lock held. */
static void session_drop_locked(void **tree, struct session *x)
{
	tdelete(x, tree, session_cmp);
	x->detached = true;
	if (x->users == 0)
		session_free(x);
}

/* Add x to tree, replacing (and dropping) a session of the same key when
 * replace is set; false when the key has one and replace is not set.
 * sess_lock held. */
static bool session_insert_locked(void **tree, struct session *x, bool replace)
{
	void *node = tsearch(x, tree, session_cmp);
	struct session *old;
	if (!node)
		return false;
	old = *(struct session **)node;
	if (old == x)
		return true;
	if (!replace)
		return false;
	*(struct session **)node = x; /* same key, so the order holds */
	old->detached = true;
	if (old->users == 0)
		session_free(old);
	return true;
}

/* A ranged call is done with x. */
static void session_unuse(struct mc_store *s, struct session *x)
{
	pthread_mutex_lock(&s->sess_lock);
	if (--x->users == 0 && x->detached) {
		if (x->awaited)
			pthread_cond_broadcast(&s->sess_cond);
		else
			session_free(x);
	}
	pthread_mutex_unlock(&s->sess_lock);
}

struct keys_out {
	struct mc_proto_str *v;
	uint32_t n;
};

static void collect_key(const void *node, VISIT which, void *arg)
{
	const struct session *x = *(struct session *const *)node;
	struct keys_out *o = arg;
	if (which == postorder || which == leaf)
		o->v[o->n++] = mc_proto_str_c(x->key);
}

static void count_node(const void *node, VISIT which, void *arg)
{
	(void)node;
	if (which == postorder || which == leaf)
		(*(uint32_t *)arg)++;
}

void mc_store_sessions_drop_all(struct mc_store *s)
{
	struct keys_out o = {NULL, 0};
	uint32_t n = 0;
	struct mc_store_msg resp;

	twalk_r(s->put_sessions, count_node, &n);
	if (n && s->conn && (o.v = mc_calloc(n, sizeof(*o.v)))) {
		twalk_r(s->put_sessions, collect_key, &o);
		if (mc_store_send_put_revoke(s, o.v, o.n, false, &resp) == MC_OK)
			mc_store_msg_release(&resp);
		mc_free(o.v);
	}
	tdestroy(s->put_sessions, session_free);
	tdestroy(s->get_sessions, session_free);
	s->put_sessions = s->get_sessions = NULL;
}

/* ---- session calls ----------------------------------------------------------------------- */

/* Shared checks of the session calls; on failure every result is set. */
static mc_status session_begin(struct mc_store *s, const char *const *keys, size_t n,
			       const void *results, bool need_results)
{
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK && n && (!keys || (need_results && !results)))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "session call: NULL arrays");
	if (rc == MC_OK && n > UINT32_MAX)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "session call: too many keys");
	return rc;
}

mc_status mc_store_batch_get_session_start(struct mc_store *s, const char *const *keys, size_t n,
					   mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_session_keys(s, MC_DUMMY_MSG_GET_SESSION_START, keys, NULL, n,
						   NULL, results);
	struct mc_store_msg resp;
	struct mc_proto_str *kv;
	uint32_t *sent, nsent = 0;
	uint64_t t0;
	mc_status rc = session_begin(s, keys, n, results, true);

	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	kv = mc_calloc(n, sizeof(*kv));
	sent = mc_calloc(n, sizeof(*sent));
	for (size_t i = 0; i < n; i++)
		results[i] = MC_ERR_NOMEM;
	if (!kv || !sent)
		goto out;
	for (size_t i = 0; i < n; i++) {
		results[i] = mc_store_check_key(keys[i]);
		if (results[i] == MC_OK) {
			kv[nsent] = mc_proto_str_c(keys[i]);
			sent[nsent++] = (uint32_t)i;
		}
	}
	if (!nsent)
		goto out;
	t0 = mc_now_ms();
	rc = mc_store_lookup_chunks(s, kv, nsent, &resp);
	if (rc != MC_OK)
		goto out;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_chunk_sums *cs =
			resp.body.batch_replica_list.n_chunks
				? &resp.body.batch_replica_list.chunks[j]
				: NULL;
		const struct mc_store_replica_list_item *it =
			&resp.body.batch_replica_list.items[j];
		const struct mc_store_replica *rep;
		struct session *x;
		uint32_t i = sent[j];

		if (it->status != MC_OK) {
			results[i] = (mc_status)it->status;
			continue;
		}
		rep = mc_store_choose_replica(s, &it->list);
		if (!rep) {
			results[i] = mc_set_error(MC_ERR_INVALID_REPLICA,
						  "%s has no replica readable here", keys[i]);
			continue;
		}
		x = session_new(keys[i], rep->size, rep, 1);
		if (!x) {
			results[i] = MC_ERR_NOMEM;
			continue;
		}
		x->deadline_ms = t0 + it->list.lease_ttl_ms;
		x->lease_ms = it->list.lease_ttl_ms;
		x->has_cksum = it->list.checksum.present;
		x->cksum = it->list.checksum.value;
		x->table = it->list.table_cksum;
		if (cs && cs->n && (x->sums.v = mc_malloc((size_t)cs->n * sizeof(uint64_t)))) {
			memcpy(x->sums.v, cs->v, (size_t)cs->n * sizeof(uint64_t));
			x->sums.n = cs->n; /* no memory: its ranges are read unchecked */
		}
		pthread_mutex_lock(&s->sess_lock);
		if (!session_insert_locked(&s->get_sessions, x, true)) {
			session_free(x);
			results[i] = MC_ERR_NOMEM;
		}
		pthread_mutex_unlock(&s->sess_lock);
	}
	mc_store_msg_release(&resp);
out:
	for (size_t i = 0; i < n; i++)
		if (results[i] == MC_OK && rc != MC_OK)
			results[i] = rc;
	mc_free(kv);
	mc_free(sent);
	return mc_store_first_failure(results, n);
}

mc_status mc_store_batch_get_session_end(struct mc_store *s, const char *const *keys, size_t n)
{
	if (s && s->dummy)
		return mc_store_dummy_session_keys(s, MC_DUMMY_MSG_GET_SESSION_END, keys, NULL, n,
						   NULL, NULL);
	mc_status rc = session_begin(s, keys, n, NULL, false);
	if (rc != MC_OK)
		return rc;
	pthread_mutex_lock(&s->sess_lock);
	for (size_t i = 0; i < n; i++) {
		struct session *x = keys[i] ? session_find_locked(&s->get_sessions, keys[i]) : NULL;
		if (x)
			session_drop_locked(&s->get_sessions, x);
	}
	pthread_mutex_unlock(&s->sess_lock);
	return MC_OK;
}

/*
 * The ranged calls of both session kinds: bufs[i][b] (lens[i][b] bytes)
 * to or from object offset offs[i][b] of key i, through the session's
 * replica (get) or all its replicas (put), in one engine batch.
 */
static mc_status session_ranges(struct mc_store *s, bool put, const char *const *keys,
				void *const *const *bufs, const size_t *const *lens,
				const uint64_t *const *offs, const size_t *nbufs, size_t n,
				int64_t *results)
{
	struct session **xs = NULL;
	size_t *first = NULL, nio = 0, nrep = 0;
	struct mc_store_ranges rs = {0};
	struct mc_store_chk chk = {0};
	struct mc_store_corrupt corrupt = {.n = 0};
	void **tree = put ? &s->put_sessions : &s->get_sessions;
	uint64_t now;
	mc_status rc = session_begin(s, keys, n, results, true);

	if (rc == MC_OK && n && (!bufs || !lens || !offs || !nbufs))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "ranged call: NULL arrays");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	xs = mc_calloc(n, sizeof(*xs));
	first = mc_calloc(n, sizeof(*first));
	if (!xs || !first) {
		mc_free(xs);
		mc_free(first);
		for (size_t i = 0; i < n; i++)
			results[i] = MC_ERR_NOMEM;
		return MC_ERR_NOMEM;
	}
	for (size_t i = 0; i < n; i++)
		results[i] = mc_store_check_key(keys[i]);
	pthread_mutex_lock(&s->sess_lock);
	for (size_t i = 0; i < n; i++) {
		if (results[i] != MC_OK)
			continue;
		xs[i] = session_find_locked(tree, keys[i]);
		if (xs[i])
			xs[i]->users++;
		else
			results[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "no %s session for %s",
						  put ? "put" : "get", keys[i]);
	}
	pthread_mutex_unlock(&s->sess_lock);
	now = mc_now_ms();
	for (size_t i = 0; i < n; i++) {
		if (!xs[i])
			continue;
		if (!put && now > xs[i]->deadline_ms && mc_store_read_leased(xs[i]->reps)) {
			results[i] =
				mc_set_error(MC_ERR_LEASE_EXPIRED,
					     "the get session of %s outlived its lease", keys[i]);
			continue;
		}
		for (size_t b = 0; b < nbufs[i] && results[i] == MC_OK; b++) {
			if (lens[i][b] && !bufs[i][b])
				results[i] = mc_set_error(MC_ERR_INVALID_PARAMS,
							  "NULL buffer for %s", keys[i]);
			else if ((put ? mc_store_check_buffer(s, bufs[i][b], lens[i][b])
				      : mc_store_check_dest(s, bufs[i][b], lens[i][b])) != MC_OK)
				results[i] = MC_ERR_INVALID_PARAMS;
			else if (!mc_store_range_inside(offs[i][b], lens[i][b], xs[i]->size))
				results[i] = mc_set_error(
					MC_ERR_INVALID_PARAMS,
					"range %" PRIu64 "+%zu outside %s (%" PRIu64 " bytes)",
					offs[i][b], lens[i][b], keys[i], xs[i]->size);
		}
		if (results[i] == MC_OK) {
			nio += nbufs[i];
			nrep += nbufs[i] * (put ? xs[i]->nreps : 1);
		}
	}
	rc = mc_store_ranges_init(&rs, nio, nrep);
	if (rc == MC_OK && !put)
		rc = mc_store_chk_init(&chk, nio);
	for (size_t i = 0; i < n; i++) {
		if (!xs[i] || results[i] != MC_OK)
			continue;
		if (rc != MC_OK) {
			results[i] = rc;
			continue;
		}
		first[i] = rs.n;
		for (size_t b = 0; b < nbufs[i]; b++) {
			struct mc_store_chk_obj o = {.key = mc_proto_str_c(xs[i]->key),
						     .rep = xs[i]->reps,
						     .has_cksum = xs[i]->has_cksum,
						     .cksum = xs[i]->cksum,
						     .sums = xs[i]->sums,
						     .table = xs[i]->table};
			if (put)
				rs.ios[mc_store_ranges_add(&rs, bufs[i][b], offs[i][b], lens[i][b],
							   xs[i]->reps, xs[i]->nreps)]
					.key = o.key;
			else /* checked: what it covers of the object */
				(void)mc_store_chk_add(s, &chk, &rs, &o, bufs[i][b], offs[i][b],
						       lens[i][b]);
		}
	}
	if (!put && rs.n && mc_store_chk_ready(s, &chk, &rs) != MC_OK)
		for (size_t k = 0; k < rs.n; k++)
			rs.ios[k].status = MC_ERR_NOMEM;
	mc_store_run_transfers(s, rs.ios, rs.n, put ? MC_OP_WRITE : MC_OP_READ);
	/* a session reads its one replica: a bad one is reported, the call fails */
	for (size_t i = 0; !put && i < n; i++) {
		for (size_t b = 0; xs[i] && results[i] == MC_OK && b < nbufs[i]; b++) {
			struct mc_store_io *io = &rs.ios[first[i] + b];

			io->lease_ttl_ms = xs[i]->lease_ms;
			if (io->status == MC_ERR_CHECKSUM_MISMATCH)
				mc_store_corrupt_add(&corrupt, io,
						     xs[i]->deadline_ms - xs[i]->lease_ms);
		}
	}
	mc_store_report_corrupt(s, &corrupt);
	if (put) {
		/* the object's checksum, as long as its pieces come in order (a
		 * call refused before any transfer wrote nothing) */
		pthread_mutex_lock(&s->sess_lock);
		for (size_t i = 0; i < n; i++)
			for (size_t b = 0;
			     xs[i] && xs[i]->hash && results[i] == MC_OK && b < nbufs[i]; b++)
				mc_store_seq_hash_add(s, xs[i]->hash, offs[i][b], bufs[i][b],
						      lens[i][b],
						      rs.ios[first[i] + b].status == MC_OK);
		pthread_mutex_unlock(&s->sess_lock);
	}
	now = mc_now_ms();
	for (size_t i = 0; i < n; i++) {
		uint64_t total = 0;
		if (!xs[i])
			continue;
		for (size_t b = 0; results[i] == MC_OK && b < nbufs[i]; b++) {
			const struct mc_store_io *io = &rs.ios[first[i] + b];
			if (io->status != MC_OK)
				results[i] = io->status;
			total += lens[i][b]; /* a checked read may have read more */
		}
		for (size_t b = 0; !put && results[i] == MC_OK && b < nbufs[i]; b++)
			mc_store_chk_done(&chk, &rs, first[i] + b);
		if (results[i] == MC_OK && !put && now > xs[i]->deadline_ms &&
		    mc_store_read_leased(xs[i]->reps))
			results[i] = MC_ERR_LEASE_EXPIRED; /* may have raced with a removal */
		if (results[i] == MC_OK)
			results[i] = (int64_t)total;
		session_unuse(s, xs[i]);
	}
	mc_store_chk_release(s, &chk);
	mc_store_ranges_release(&rs);
	mc_free(xs);
	mc_free(first);
	return mc_store_first_failure_i64(results, n);
}

mc_status mc_store_batch_get_into_multi_buffer_ranges(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
						      const uint64_t *const *src_offsets,
						      const size_t *nbufs, size_t n,
						      int64_t *results)
{
	if (s && s->dummy)
		return mc_store_dummy_ranges(s, false, keys, bufs, lens, src_offsets, nbufs, n,
					     results);
	return session_ranges(s, false, keys, bufs, lens, src_offsets, nbufs, n, results);
}

mc_status mc_store_batch_put_from_multi_buffer_ranges(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
						      const uint64_t *const *dst_offsets,
						      const size_t *nbufs, size_t n,
						      int64_t *results)
{
	if (s && s->dummy)
		return mc_store_dummy_ranges(s, true, keys, bufs, lens, dst_offsets, nbufs, n,
					     results);
	return session_ranges(s, true, keys, bufs, lens, dst_offsets, nbufs, n, results);
}

mc_status mc_store_batch_put_session_start(struct mc_store *s, const char *const *keys,
					   const uint64_t *sizes, size_t n,
					   const struct mc_store_config *config, mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_session_keys(s, MC_DUMMY_MSG_PUT_SESSION_START, keys, sizes,
						   n, config, results);
	struct mc_store_msg resp;
	struct mc_proto_str *revoke = NULL;
	uint32_t *sent = NULL, nsent = 0, nrev = 0;
	mc_status rc = session_begin(s, keys, n, results, true);

	if (rc == MC_OK)
		rc = mc_store_check_config(config, false, n);
	if (rc == MC_OK && n && !sizes)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "put_session_start: NULL sizes");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	sent = mc_calloc(n, sizeof(*sent));
	revoke = mc_calloc(n, sizeof(*revoke));
	if (!sent || !revoke) {
		for (size_t i = 0; i < n; i++)
			results[i] = MC_ERR_NOMEM;
		goto out;
	}
	pthread_mutex_lock(&s->sess_lock);
	for (size_t i = 0; i < n; i++) {
		results[i] = mc_store_check_key(keys[i]);
		if (results[i] == MC_OK && !sizes[i])
			results[i] =
				mc_set_error(MC_ERR_INVALID_PARAMS, "empty object %s", keys[i]);
		if (results[i] == MC_OK && session_find_locked(&s->put_sessions, keys[i]))
			results[i] = mc_set_error(MC_ERR_INVALID_PARAMS,
						  "a put session for %s is open", keys[i]);
		if (results[i] == MC_OK)
			sent[nsent++] = (uint32_t)i;
	}
	pthread_mutex_unlock(&s->sess_lock);
	if (!nsent)
		goto out;
	/* no trailer: a session's chunk sums are minor 9's (design.md) */
	rc = mc_store_send_put_start(s, keys, sizes, NULL, sent, nsent, config, false, NULL, &resp);
	if (rc != MC_OK)
		goto out;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_put_start_item *it = &resp.body.batch_put_start_resp.items[j];
		uint32_t i = sent[j];
		struct session *x = NULL;
		bool ok = false;

		if (it->status != MC_OK) {
			results[i] = (mc_status)it->status;
			continue;
		}
		if (it->n_replicas)
			x = session_new(keys[i], sizes[i], it->replicas, it->n_replicas);
		if (x)
			x->hash = mc_store_seq_hash_new(s, sizes[i]);
		if (x) {
			pthread_mutex_lock(&s->sess_lock);
			ok = session_insert_locked(&s->put_sessions, x, false);
			pthread_mutex_unlock(&s->sess_lock);
		}
		if (!ok) {
			results[i] = x ? MC_ERR_INVALID_PARAMS
				       : (it->n_replicas ? MC_ERR_NOMEM : MC_ERR_INVALID_REPLICA);
			session_free(x);
			revoke[nrev++] = mc_proto_str_c(keys[i]);
		}
	}
	if (nrev) {
		struct mc_store_msg rresp;
		if (mc_store_send_put_revoke(s, revoke, nrev, false, &rresp) == MC_OK)
			mc_store_msg_release(&rresp);
	}
	mc_store_msg_release(&resp);
out:
	for (size_t i = 0; i < n; i++)
		if (results[i] == MC_OK && rc != MC_OK)
			results[i] = rc; /* asked for, but the master was not reached */
	mc_free(sent);
	mc_free(revoke);
	return mc_store_first_failure(results, n);
}

/*
 * The checksums of the put sessions being ended, xs[owner[e]] for e < m
 * (no write in flight): what was not hashed as written is read back
 * (mc_store_seq_hash_complete).  A session whose replica did not store
 * what was sent is revoked here, its result MC_ERR_CHECKSUM_MISMATCH, and
 * leaves the lists; returns how many remain, kv, metas, chunks and owner
 * packed.
 */
static uint32_t sign_sessions(struct mc_store *s, struct session **xs, struct mc_proto_str *kv,
			      struct mc_store_object_meta *metas,
			      struct mc_store_chunk_sums *chunks, uint32_t *owner, uint32_t m,
			      mc_status *results, bool *any_chunks)
{
	struct mc_proto_str *bad = mc_calloc(m, sizeof(*bad));
	uint32_t *badi = mc_calloc(m, sizeof(*badi));
	uint32_t kept = 0, nbad = 0;

	for (uint32_t e = 0; e < m; e++) {
		struct session *x = xs[owner[e]];
		mc_status rc = mc_store_seq_hash_complete(s, x->hash, kv[e], x->reps);

		if (rc == MC_ERR_CHECKSUM_MISMATCH && bad && badi) {
			results[owner[e]] = rc;
			bad[nbad] = kv[e];
			badi[nbad++] = owner[e];
			continue; /* revoked below */
		}
		kv[kept] = kv[e];
		metas[kept].key = kv[e];
		metas[kept].checksum = mc_store_seq_hash_done(x->hash); /* absent: unsigned */
		chunks[kept] = mc_store_seq_hash_chunks(x->hash);	/* freed with the session */
		*any_chunks |= chunks[kept].n != 0;
		owner[kept++] = owner[e];
	}
	if (nbad) {
		struct mc_store_msg resp;
		if (mc_store_send_put_revoke(s, bad, nbad, false, &resp) == MC_OK)
			mc_store_msg_release(&resp);
	}
	for (uint32_t e = 0; e < nbad; e++) { /* ended, with the error */
		session_free(xs[badi[e]]);
		xs[badi[e]] = NULL;
	}
	mc_free(bad);
	mc_free(badi);
	return kept;
}

/* End (BatchPutEnd) or revoke (BatchPutRevoke) put sessions. */
static mc_status put_session_finish(struct mc_store *s, const char *const *keys, size_t n,
				    bool revoke, mc_status *results)
{
	struct session **xs;
	struct mc_proto_str *kv = NULL;
	struct mc_store_object_meta *metas = NULL;
	struct mc_store_chunk_sums *chunks = NULL; /* per item */
	bool any_chunks = false;
	uint32_t *owner = NULL, m = 0;
	struct mc_store_msg resp;
	mc_status rc = session_begin(s, keys, n, results, true);

	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	xs = mc_calloc(n, sizeof(*xs));
	kv = mc_calloc(n, sizeof(*kv));
	metas = mc_calloc(n, sizeof(*metas));
	owner = mc_calloc(n, sizeof(*owner));
	chunks = mc_calloc(n, sizeof(*chunks));
	if (!xs || !kv || !metas || !owner || !chunks) {
		for (size_t i = 0; i < n; i++)
			results[i] = MC_ERR_NOMEM;
		rc = MC_ERR_NOMEM;
		goto out;
	}
	/* detach, so no new ranged write finds them, then wait for those in flight */
	pthread_mutex_lock(&s->sess_lock);
	for (size_t i = 0; i < n; i++) {
		results[i] = mc_store_check_key(keys[i]);
		if (results[i] != MC_OK)
			continue;
		xs[i] = session_find_locked(&s->put_sessions, keys[i]);
		if (!xs[i]) {
			results[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "no put session for %s",
						  keys[i]);
			continue;
		}
		tdelete(xs[i], &s->put_sessions, session_cmp);
		xs[i]->detached = true;
		xs[i]->awaited = true;
		kv[m] = mc_proto_str_c(xs[i]->key);
		metas[m].key = kv[m];
		owner[m++] = (uint32_t)i;
	}
	for (uint32_t e = 0; e < m; e++)
		while (xs[owner[e]]->users)
			pthread_cond_wait(&s->sess_cond, &s->sess_lock);
	pthread_mutex_unlock(&s->sess_lock);
	if (!m)
		goto out;
	if (!revoke)
		m = sign_sessions(s, xs, kv, metas, chunks, owner, m, results, &any_chunks);
	if (!m)
		goto out;
	if (revoke) {
		rc = mc_store_send_put_revoke(s, kv, m, false, &resp);
	} else {
		struct mc_store_batch_put_end_req end = {
			.client_id = s->client_id,
			.tenant = mc_store_tenant(s),
			.replica_type = MC_STORE_REPLICA_ALL,
			.n_items = m,
			.items = metas,
			/* minor 9: the chunk checksums, for ranged reads */
			.n_chunks = any_chunks && mc_master_conn_peer_minor(s->conn) >= 9 ? m : 0,
			.chunks = chunks,
		};
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_PUT_END, &end, &resp);
	}
	/* the keys changed: a get meanwhile may have cached their old locations */
	for (uint32_t e = 0; e < m; e++)
		mc_store_loc_forget(s, kv[e].ptr, kv[e].len);
	if (rc == MC_OK && resp.body.batch_status_resp.n_items != m) {
		mc_store_msg_release(&resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "master answered a different number of keys");
	}
	if (rc != MC_OK) {
		/* the master was not reached: the sessions stay, for a retry */
		pthread_mutex_lock(&s->sess_lock);
		for (uint32_t e = 0; e < m; e++) {
			struct session *x = xs[owner[e]];
			x->detached = x->awaited = false;
			if (!session_insert_locked(&s->put_sessions, x, false))
				session_free(x);
			results[owner[e]] = rc;
		}
		pthread_mutex_unlock(&s->sess_lock);
		goto out;
	}
	for (uint32_t e = 0; e < m; e++) {
		results[owner[e]] = (mc_status)resp.body.batch_status_resp.statuses[e];
		session_free(xs[owner[e]]);
	}
	mc_store_msg_release(&resp);
out:
	mc_free(xs);
	mc_free(kv);
	mc_free(metas);
	mc_free(chunks);
	mc_free(owner);
	return mc_store_first_failure(results, n);
}

mc_status mc_store_batch_put_session_end(struct mc_store *s, const char *const *keys, size_t n,
					 mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_session_keys(s, MC_DUMMY_MSG_PUT_SESSION_END, keys, NULL, n,
						   NULL, results);
	return put_session_finish(s, keys, n, false, results);
}

mc_status mc_store_batch_put_session_revoke(struct mc_store *s, const char *const *keys, size_t n,
					    mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_session_keys(s, MC_DUMMY_MSG_PUT_SESSION_REVOKE, keys, NULL,
						   n, NULL, results);
	return put_session_finish(s, keys, n, true, results);
}

/*
 * store/dummy_server.c - the daemon's side of dummy clients
 * (store/dummy_server.h; docs/design.md, "Dummy clients").
 *
 * One acceptor thread takes connections on @mooncake_client_<port>.sock;
 * each connection gets a detached thread that reads frames (store/proto.h
 * framing, store/dummy_proto.h payloads), runs each request on the real
 * client and answers, one request at a time; with
 * MC_DUMMY_CONN_BUSY_POLL_US set, after an answer it polls for the next
 * request that long before it sleeps, as a dummy's calls come back to
 * back.  A connection owns its
 * regions: memfds the dummy sent with SCM_RIGHTS, mapped MAP_SHARED here
 * and registered with the real client, so the engine moves bytes between
 * the dummy's pages and the pool with no copy in this process.  Buffers
 * arrive as (region, offset, length) and are checked against the mapping
 * before any call, so a dummy can name only its own shared memory.
 *
 * With a cluster secret (base/auth.h) a connection's thread first runs the
 * challenge-response handshake (base/auth_hs.h, channel "dummy") within
 * MC_DUMMY_AUTH_TIMEOUT_MS and reads no frame from a peer that did not
 * prove it: the socket is abstract, so any local process of the daemon's
 * user reaches it.
 *
 * What this file must never do: trust a count, offset or length from the
 * socket before checking it; unmap a region while a call on it runs (only
 * the connection's own thread unmaps, between requests); let one dummy's
 * bad frame stop the others (a bad payload is answered MC_ERR_PROTOCOL and
 * the connection goes on; only broken framing closes that one connection).
 */

#define MC_LOG_MODULE "dummy"
#include "store/dummy_server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/auth.h"
#include "base/auth_hs.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/store.h"
#include "store/client_config.h"
#include "store/dummy_client.h"
#include "store/dummy_proto.h"
#include "store/proto.h"

#define MAX_REGIONS 1024
#define MAX_FDS	    4 /* descriptors one recvmsg may carry */

struct region {
	uint64_t id;
	void *base;
	uint64_t len;
};

struct conn {
	struct mc_dummy_server *srv;
	int fd;
	pid_t pid; /* SO_PEERCRED: for the log */
	struct conn *next;
	struct region *regions;
	size_t nregions;
	int pending_fd; /* a descriptor received and not yet claimed by MAP_REGION */
	struct mc_buf in;
	size_t in_off;
	struct mc_buf out; /* the answer being written (kept: no allocation a call) */
	uid_t uid;	   /* the dummy's (SO_PEERCRED) */
};

struct mc_dummy_server {
	struct mc_store *real;
	struct mc_auth_secret auth; /* with one, every dummy proves it first */
	int lfd;
	int wake; /* eventfd: stop */
	uint32_t expire_ms;
	uint32_t busy_poll_us; /* MC_DUMMY_CONN_BUSY_POLL_US */
	pthread_t acceptor;
	pthread_mutex_t lock; /* conns, nconns, stopping */
	pthread_cond_t cond;  /* nconns fell */
	struct conn *conns;
	unsigned nconns;
	bool stopping;
	atomic_uint_fast64_t expired;
};

void mc_dummy_socket_name(uint16_t port, char *out, size_t cap)
{
	snprintf(out, cap, "mooncake_client_%u.sock", port);
}

static socklen_t abstract_addr(uint16_t port, struct sockaddr_un *sa)
{
	char name[64];
	size_t n;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	mc_dummy_socket_name(port, name, sizeof(name));
	n = strlen(name);
	memcpy(sa->sun_path + 1, name, n);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* ---- regions ---- */

static struct region *region_find(struct conn *c, uint64_t id)
{
	for (size_t i = 0; i < c->nregions; i++)
		if (c->regions[i].id == id)
			return &c->regions[i];
	return NULL;
}

static void region_drop(struct conn *c, size_t i)
{
	struct region *r = &c->regions[i];
	mc_store_unregister_buffer(c->srv->real, r->base);
	munmap(r->base, r->len);
	c->regions[i] = c->regions[--c->nregions];
}

static mc_status map_region(struct conn *c, uint64_t id, uint64_t len)
{
	int fd = c->pending_fd;
	struct stat st;
	int seals;
	void *p;
	mc_status rc;

	c->pending_fd = -1;
	if (fd < 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "MapRegion without a descriptor");
	if (region_find(c, id) || c->nregions >= MAX_REGIONS || len == 0 || len > (1ull << 46)) {
		close(fd);
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"MapRegion %llu of %llu bytes: duplicate id, zero or too large, "
			"or too many regions",
			(unsigned long long)id, (unsigned long long)len);
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || seals < 0 || !(seals & F_SEAL_SHRINK) ||
	    (uint64_t)st.st_size < len) {
		close(fd);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "MapRegion %llu: not a memfd sealed against shrinking of at "
				    "least %llu bytes",
				    (unsigned long long)id, (unsigned long long)len);
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return mc_set_error(MC_ERR_NOMEM, "MapRegion %llu: mmap: %s",
				    (unsigned long long)id, strerror(errno));
	rc = mc_store_register_buffer(c->srv->real, p, len);
	if (rc != MC_OK) {
		munmap(p, len);
		return rc;
	}
	if (!c->regions) {
		c->regions = calloc(MAX_REGIONS, sizeof(*c->regions));
		if (!c->regions) {
			mc_store_unregister_buffer(c->srv->real, p);
			munmap(p, len);
			return mc_set_error(MC_ERR_NOMEM, "out of memory");
		}
	}
	c->regions[c->nregions++] = (struct region){id, p, len};
	return MC_OK;
}

/* The daemon's address of one buffer, or NULL (and the error set). */
static void *translate(struct conn *c, const struct mc_dummy_buf *b)
{
	struct region *r = region_find(c, b->region);
	if (!r) {
		mc_set_error(MC_ERR_INVALID_PARAMS, "buffer in unknown region %llu",
			     (unsigned long long)b->region);
		return NULL;
	}
	if (b->offset > r->len || b->len > r->len - b->offset) {
		mc_set_error(MC_ERR_INVALID_PARAMS,
			     "buffer [%llu, +%llu) outside region %llu of %llu bytes",
			     (unsigned long long)b->offset, (unsigned long long)b->len,
			     (unsigned long long)b->region, (unsigned long long)r->len);
		return NULL;
	}
	return (char *)r->base + b->offset;
}

/* ---- requests ---- */

/* Per-key pointer arrays of a PUT or GET, the keys whose buffers check out. */
struct xfer {
	size_t n; /* keys taking part */
	size_t *idx;
	const char **keys;
	void **flat;	 /* one pointer per key (single-buffer calls) */
	size_t *flatlen; /* its length */
	void ***bufs;	 /* multi-buffer calls */
	size_t **lens;
	size_t *nbufs;
	bool single; /* every key has exactly one buffer */
};

static void xfer_free(struct xfer *x)
{
	if (x->bufs)
		for (size_t i = 0; i < x->n; i++) {
			free(x->bufs[i]);
			free(x->lens[i]);
		}
	free(x->idx);
	free(x->keys);
	free(x->flat);
	free(x->flatlen);
	free(x->bufs);
	free(x->lens);
	free(x->nbufs);
}

/* Translate every key's buffers; a key with a bad one gets -600 in res. */
static mc_status xfer_build(struct conn *c, const struct mc_dummy_req *q, int64_t *res,
			    struct xfer *x)
{
	uint32_t n = q->n_items;
	memset(x, 0, sizeof(*x));
	x->idx = calloc(n + 1, sizeof(*x->idx));
	x->keys = calloc(n + 1, sizeof(*x->keys));
	x->flat = calloc(n + 1, sizeof(*x->flat));
	x->flatlen = calloc(n + 1, sizeof(*x->flatlen));
	x->bufs = calloc(n + 1, sizeof(*x->bufs));
	x->lens = calloc(n + 1, sizeof(*x->lens));
	x->nbufs = calloc(n + 1, sizeof(*x->nbufs));
	if (!x->idx || !x->keys || !x->flat || !x->flatlen || !x->bufs || !x->lens || !x->nbufs)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	x->single = true;
	for (uint32_t i = 0; i < n; i++) {
		const struct mc_dummy_item *it = &q->items[i];
		size_t k = x->n;
		bool ok = true;
		x->bufs[k] = calloc(it->nbufs + 1, sizeof(void *));
		x->lens[k] = calloc(it->nbufs + 1, sizeof(size_t));
		if (!x->bufs[k] || !x->lens[k]) {
			free(x->bufs[k]);
			free(x->lens[k]);
			x->bufs[k] = NULL;
			x->lens[k] = NULL;
			return mc_set_error(MC_ERR_NOMEM, "out of memory");
		}
		for (uint32_t j = 0; j < it->nbufs && ok; j++) {
			void *p = translate(c, &it->bufs[j]);
			if (!p)
				ok = false;
			x->bufs[k][j] = p;
			x->lens[k][j] = (size_t)it->bufs[j].len;
		}
		if (!ok) {
			mc_warn("dummy %d: key %s: %s", c->fd, it->key.ptr, mc_last_error());
			res[i] = MC_ERR_INVALID_PARAMS;
			free(x->bufs[k]);
			free(x->lens[k]);
			x->bufs[k] = NULL;
			x->lens[k] = NULL;
			continue;
		}
		if (it->nbufs != 1)
			x->single = false;
		x->idx[k] = i;
		x->keys[k] = it->key.ptr;
		x->nbufs[k] = it->nbufs;
		x->flat[k] = it->nbufs ? x->bufs[k][0] : NULL;
		x->flatlen[k] = it->nbufs ? x->lens[k][0] : 0;
		x->n++;
	}
	return MC_OK;
}

static void config_of(const struct mc_dummy_config *d, struct mc_store_config *c, const char **pref,
		      const char **gids)
{
	memset(c, 0, sizeof(*c));
	c->replica_num = d->replica_num;
	c->with_soft_pin = d->with_soft_pin;
	c->soft_pin_ttl_ms = d->soft_pin_ttl_ms;
	c->with_hard_pin = d->with_hard_pin;
	c->prefer_alloc_in_same_node = d->prefer_alloc_in_same_node;
	c->preferred_segment = d->preferred_segment.ptr;
	for (uint32_t i = 0; i < d->n_preferred_segments; i++)
		pref[i] = d->preferred_segments[i].ptr;
	c->preferred_segments = pref;
	c->n_preferred_segments = d->n_preferred_segments;
	c->group_id = d->group_id.ptr;
	for (uint32_t i = 0; i < d->n_group_ids; i++)
		gids[i] = d->group_ids[i].ptr;
	c->group_ids = gids;
	c->n_group_ids = d->n_group_ids;
}

static mc_status do_put(struct conn *c, const struct mc_dummy_req *q, int64_t *res)
{
	struct mc_store *s = c->srv->real;
	bool upsert = q->flags & MC_DUMMY_F_UPSERT;
	const char **pref = calloc(q->config.n_preferred_segments + 1, sizeof(char *));
	const char **gids = calloc(q->config.n_group_ids + 1, sizeof(char *));
	mc_status *st = calloc(q->n_items + 1, sizeof(*st));
	struct mc_store_config cfg;
	struct xfer x;
	mc_status rc;

	if (!pref || !gids || !st) {
		rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
		goto out_nox;
	}
	config_of(&q->config, &cfg, pref, gids);
	rc = xfer_build(c, q, res, &x);
	if (rc != MC_OK)
		goto out;
	if (x.n == 0) {
		rc = q->n_items ? MC_ERR_INVALID_PARAMS : MC_OK;
	} else if (q->n_items == 1 && x.single) {
		rc = upsert ? mc_store_upsert_from(s, x.keys[0], x.flat[0], x.flatlen[0], &cfg)
			    : mc_store_put_from(s, x.keys[0], x.flat[0], x.flatlen[0], &cfg);
		st[0] = rc;
	} else if (x.single) {
		rc = upsert ? mc_store_batch_upsert_from(s, x.keys, x.flat, x.flatlen, x.n, &cfg,
							 st)
			    : mc_store_batch_put_from(s, x.keys, x.flat, x.flatlen, x.n, &cfg, st);
	} else if (!upsert) {
		rc = mc_store_batch_put_from_multi_buffers(s, x.keys, (void *const *const *)x.bufs,
							   (const size_t *const *)x.lens, x.nbufs,
							   x.n, &cfg, st);
	} else {
		rc = mc_set_error(MC_ERR_NOT_SUPPORTED, "upsert from several buffers per key");
		for (size_t k = 0; k < x.n; k++)
			st[k] = rc;
	}
	for (size_t k = 0; k < x.n; k++)
		res[x.idx[k]] = st[k];
	if (rc == MC_OK && x.n < q->n_items)
		rc = MC_ERR_INVALID_PARAMS;
out:
	xfer_free(&x);
out_nox:
	free(pref);
	free(gids);
	free(st);
	return rc;
}

static mc_status do_get(struct conn *c, const struct mc_dummy_req *q, int64_t *res)
{
	struct mc_store *s = c->srv->real;
	int64_t *r = calloc(q->n_items + 1, sizeof(*r));
	struct xfer x;
	mc_status rc;

	if (!r)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	rc = xfer_build(c, q, res, &x);
	if (rc != MC_OK)
		goto out;
	if (x.n == 0) {
		rc = q->n_items ? MC_ERR_INVALID_PARAMS : MC_OK;
	} else if (q->n_items == 1 && x.single) {
		r[0] = mc_store_get_into(s, x.keys[0], x.flat[0], x.flatlen[0]);
		rc = r[0] < 0 ? (mc_status)r[0] : MC_OK;
	} else if (x.single) {
		rc = mc_store_batch_get_into(s, x.keys, x.flat, x.flatlen, x.n, r);
	} else {
		rc = mc_store_batch_get_into_multi_buffers(s, x.keys, (void *const *const *)x.bufs,
							   (const size_t *const *)x.lens, x.nbufs,
							   x.n, r);
	}
	for (size_t k = 0; k < x.n; k++)
		res[x.idx[k]] = r[k];
	if (rc == MC_OK && x.n < q->n_items)
		rc = MC_ERR_INVALID_PARAMS;
out:
	xfer_free(&x);
	free(r);
	return rc;
}

static const char **keys_of(const struct mc_dummy_req *q)
{
	const char **k = calloc(q->n_items + 1, sizeof(*k));
	if (!k) {
		mc_set_error(MC_ERR_NOMEM, "out of memory");
		return NULL;
	}
	for (uint32_t i = 0; i < q->n_items; i++)
		k[i] = q->items[i].key.ptr;
	return k;
}

static mc_status do_keys(struct conn *c, const struct mc_dummy_req *q, int64_t *res)
{
	struct mc_store *s = c->srv->real;
	bool force = q->flags & MC_DUMMY_F_FORCE;
	const char **keys;
	mc_status rc = MC_OK;

	if (q->n_items == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s without keys",
				    mc_dummy_msg_name(q->type));
	if (q->n_items == 1) {
		const char *k = q->items[0].key.ptr;
		switch (q->type) {
		case MC_DUMMY_MSG_EXIST:
			res[0] = mc_store_is_exist(s, k);
			return res[0] < 0 ? (mc_status)res[0] : MC_OK;
		case MC_DUMMY_MSG_GET_SIZE:
			res[0] = mc_store_get_size(s, k);
			return res[0] < 0 ? (mc_status)res[0] : MC_OK;
		default:
			res[0] = mc_store_remove(s, k, force);
			return (mc_status)res[0];
		}
	}
	if (q->type == MC_DUMMY_MSG_GET_SIZE) { /* a copy-based batch get: each key's */
		for (uint32_t i = 0; i < q->n_items; i++)
			res[i] = mc_store_get_size(s, q->items[i].key.ptr);
		return MC_OK;
	}
	if (!(keys = keys_of(q)))
		return MC_ERR_NOMEM;
	if (q->type == MC_DUMMY_MSG_EXIST) {
		int *r = calloc(q->n_items, sizeof(*r));
		rc = r ? mc_store_batch_is_exist(s, keys, q->n_items, r)
		       : mc_set_error(MC_ERR_NOMEM, "out of memory");
		for (uint32_t i = 0; r && i < q->n_items; i++)
			res[i] = r[i];
		free(r);
	} else {
		mc_status *r = calloc(q->n_items, sizeof(*r));
		rc = r ? mc_store_batch_remove(s, keys, q->n_items, force, r)
		       : mc_set_error(MC_ERR_NOMEM, "out of memory");
		for (uint32_t i = 0; r && i < q->n_items; i++)
			res[i] = r[i];
		free(r);
	}
	free(keys);
	return rc;
}

/* ---- sessions, ranges, replicas, tasks, segments ---- */

/* An answer's extras beyond per-key results: results the handler allocated
 * (replacing the per-key ones), a text and strings, all owned. */
struct extra {
	int64_t *results;
	uint32_t n_results;
	char *text;
	struct mc_proto_str *strs;
	uint32_t n_strs;
};

static void extra_free(struct extra *e)
{
	free(e->results);
	free(e->text);
	for (uint32_t i = 0; i < e->n_strs; i++)
		free((void *)e->strs[i].ptr);
	free(e->strs);
	memset(e, 0, sizeof(*e));
}

static mc_status extra_strs(struct extra *e, uint32_t n)
{
	e->strs = calloc((size_t)n + 1, sizeof(*e->strs));
	if (!e->strs)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	e->n_strs = n;
	return MC_OK;
}

static mc_status extra_str(struct extra *e, uint32_t i, const char *v)
{
	char *c = strdup(v ? v : "");
	if (!c)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	e->strs[i] = mc_proto_str_c(c);
	return MC_OK;
}

/* A string field that must be there (a key, a segment id). */
static mc_status need(const struct mc_proto_str *s, const char *what)
{
	if (!s->ptr || !s->len)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: empty", what);
	return MC_OK;
}

static mc_status do_session_keys(struct conn *c, const struct mc_dummy_req *q, int64_t *res)
{
	struct mc_store *s = c->srv->real;
	const char **keys = keys_of(q);
	mc_status *st = calloc((size_t)q->n_items + 1, sizeof(*st));
	mc_status rc;

	if (!keys || !st) {
		free(keys);
		free(st);
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	}
	switch (q->type) {
	case MC_DUMMY_MSG_GET_SESSION_START:
		rc = mc_store_batch_get_session_start(s, keys, q->n_items, st);
		break;
	case MC_DUMMY_MSG_GET_SESSION_END:
		rc = mc_store_batch_get_session_end(s, keys, q->n_items);
		break;
	case MC_DUMMY_MSG_PUT_SESSION_START: {
		const char **pref = calloc(q->config.n_preferred_segments + 1, sizeof(char *));
		const char **gids = calloc(q->config.n_group_ids + 1, sizeof(char *));
		struct mc_store_config cfg;
		if (!pref || !gids) {
			rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
		} else if (q->n_nums != q->n_items) {
			rc = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "PutSessionStart: %u sizes for %u keys", q->n_nums,
					  q->n_items);
			for (uint32_t i = 0; i < q->n_items; i++)
				st[i] = rc;
		} else {
			config_of(&q->config, &cfg, pref, gids);
			rc = mc_store_batch_put_session_start(s, keys, q->nums, q->n_items, &cfg,
							      st);
		}
		free(pref);
		free(gids);
		break;
	}
	case MC_DUMMY_MSG_PUT_SESSION_END:
		rc = mc_store_batch_put_session_end(s, keys, q->n_items, st);
		break;
	default:
		rc = mc_store_batch_put_session_revoke(s, keys, q->n_items, st);
		break;
	}
	for (uint32_t i = 0; i < q->n_items; i++)
		res[i] = st[i];
	free(keys);
	free(st);
	return rc;
}

/* GET_RANGES / PUT_RANGES: nums hold one object offset per buffer. */
static mc_status do_ranges(struct conn *c, const struct mc_dummy_req *q, int64_t *res)
{
	struct mc_store *s = c->srv->real;
	uint64_t total = 0, at = 0;
	uint64_t **offs = NULL;
	int64_t *r = NULL;
	struct xfer x;
	mc_status rc;

	for (uint32_t i = 0; i < q->n_items; i++)
		total += q->items[i].nbufs;
	if (total != q->n_nums) {
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "%s: %u offsets for %llu buffers",
				  mc_dummy_msg_name(q->type), q->n_nums, (unsigned long long)total);
		for (uint32_t i = 0; i < q->n_items; i++)
			res[i] = rc;
		return rc;
	}
	rc = xfer_build(c, q, res, &x);
	if (rc == MC_OK) {
		offs = calloc(x.n + 1, sizeof(*offs));
		r = calloc(x.n + 1, sizeof(*r));
		if (!offs || !r)
			rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
	}
	/* the offsets of key idx[k] start after those of every earlier item */
	for (size_t k = 0, i = 0; rc == MC_OK && k < x.n; i++) {
		if (i == x.idx[k])
			offs[k++] = q->nums + at;
		at += q->items[i].nbufs;
	}
	if (rc == MC_OK && x.n)
		rc = q->type == MC_DUMMY_MSG_GET_RANGES
			     ? mc_store_batch_get_into_multi_buffer_ranges(
				       s, x.keys, (void *const *const *)x.bufs,
				       (const size_t *const *)x.lens, (const uint64_t *const *)offs,
				       x.nbufs, x.n, r)
			     : mc_store_batch_put_from_multi_buffer_ranges(
				       s, x.keys, (void *const *const *)x.bufs,
				       (const size_t *const *)x.lens, (const uint64_t *const *)offs,
				       x.nbufs, x.n, r);
	for (size_t k = 0; r && k < x.n; k++)
		res[x.idx[k]] = r[k];
	/* as the real call: the first key's failure, in key order */
	for (uint32_t i = 0; r && i < q->n_items; i++)
		if (res[i] < 0) {
			rc = (mc_status)res[i];
			break;
		}
	xfer_free(&x);
	free(offs);
	free(r);
	return rc;
}

/* GET_INTO_RANGES: each item is a read, each of its buffers a range's
 * destination, nums[j] its source offset; results one per range. */
static mc_status do_get_into_ranges(struct conn *c, const struct mc_dummy_req *q, struct extra *e)
{
	struct mc_store *s = c->srv->real;
	uint64_t total = 0, at = 0;
	struct mc_store_range_read *reads;
	struct mc_store_range *ranges;
	size_t nreads = 0;
	mc_status rc = MC_OK, first_bad = MC_OK;

	for (uint32_t i = 0; i < q->n_items; i++)
		total += q->items[i].nbufs;
	if (total != q->n_nums)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "GetIntoRanges: %u offsets for %llu "
				    "ranges",
				    q->n_nums, (unsigned long long)total);
	e->results = calloc(total + 1, sizeof(*e->results));
	reads = calloc((size_t)q->n_items + 1, sizeof(*reads));
	ranges = calloc(total + 1, sizeof(*ranges));
	if (!e->results || !reads || !ranges) {
		free(reads);
		free(ranges);
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	}
	e->n_results = (uint32_t)total;
	for (uint32_t i = 0; i < q->n_items; i++) {
		const struct mc_dummy_item *it = &q->items[i];
		struct mc_store_range_read *rd = &reads[nreads];
		struct region *reg = it->nbufs ? region_find(c, it->bufs[0].region) : NULL;
		uint32_t good = 0;
		/* the ranges of one read go into one region: the first one's */
		rd->key = it->key.ptr;
		rd->buf = reg ? reg->base : NULL;
		rd->ranges = &ranges[at];
		rd->results = &e->results[at];
		for (uint32_t j = 0; j < it->nbufs; j++) {
			const struct mc_dummy_buf *b = &it->bufs[j];
			if (!reg || b->region != reg->id) {
				mc_set_error(MC_ERR_INVALID_PARAMS,
					     "range in region %llu, not the read's",
					     (unsigned long long)b->region);
				break;
			}
			if (!translate(c, b))
				break;
			ranges[at + j] =
				(struct mc_store_range){b->offset, q->nums[at + j], b->len};
			good++;
		}
		if (good == it->nbufs) {
			rd->nranges = good;
			nreads += good > 0; /* a read of no ranges has nothing to do */
		} else {
			/* a read with a range outside the dummy's memory: all of it refused */
			mc_warn("dummy %d: %s: %s", c->fd, it->key.ptr, mc_last_error());
			for (uint32_t j = 0; j < it->nbufs; j++)
				e->results[at + j] = MC_ERR_INVALID_PARAMS;
			first_bad = first_bad ? first_bad : MC_ERR_INVALID_PARAMS;
		}
		at += it->nbufs;
	}
	if (nreads)
		rc = mc_store_get_into_ranges(s, reads, nreads);
	if (first_bad != MC_OK) {
		rc = first_bad;
		mc_set_error(rc, "a range outside the dummy's shared memory");
	}
	free(reads);
	free(ranges);
	return rc;
}

static mc_status do_replica_desc(struct conn *c, const struct mc_dummy_req *q, struct extra *e)
{
	struct mc_store_replica_desc *d = NULL;
	int64_t n = 0;
	size_t cap = 16;
	mc_status rc;

	if (q->n_items != 1)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "ReplicaDesc of %u keys", q->n_items);
	for (int attempt = 0; attempt < 2; attempt++) {
		free(d);
		d = calloc(cap, sizeof(*d));
		if (!d)
			return mc_set_error(MC_ERR_NOMEM, "out of memory");
		n = mc_store_get_replica_desc(c->srv->real, q->items[0].key.ptr, d, cap);
		if (n <= (int64_t)cap)
			break;
		cap = (size_t)n < 4096 ? (size_t)n : 4096;
	}
	if (n < 0) {
		free(d);
		return (mc_status)n;
	}
	if ((size_t)n > cap)
		n = (int64_t)cap;
	e->results = calloc(4 * (size_t)n + 1, sizeof(*e->results));
	rc = e->results ? extra_strs(e, 3 * (uint32_t)n)
			: mc_set_error(MC_ERR_NOMEM, "out of memory");
	for (int64_t i = 0; rc == MC_OK && i < n; i++) {
		e->results[4 * i] = d[i].status;
		e->results[4 * i + 1] = d[i].type;
		e->results[4 * i + 2] = (int64_t)d[i].size;
		e->results[4 * i + 3] = (int64_t)d[i].address;
		rc = extra_str(e, 3 * (uint32_t)i, d[i].segment_name);
		if (rc == MC_OK)
			rc = extra_str(e, 3 * (uint32_t)i + 1, d[i].transport_endpoint);
		if (rc == MC_OK)
			rc = extra_str(e, 3 * (uint32_t)i + 2, d[i].protocol);
	}
	if (rc == MC_OK)
		e->n_results = 4 * (uint32_t)n;
	free(d);
	return rc;
}

/* results: the count cleared, then one 0/1 per key. */
static mc_status do_replica_clear(struct conn *c, const struct mc_dummy_req *q, struct extra *e)
{
	const char **keys = keys_of(q);
	bool *cl = calloc((size_t)q->n_items + 1, sizeof(*cl));
	int64_t n;
	mc_status rc = MC_OK;

	e->results = calloc((size_t)q->n_items + 2, sizeof(*e->results));
	if (!keys || !cl || !e->results) {
		free(keys);
		free(cl);
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	}
	n = mc_store_batch_replica_clear(c->srv->real, keys, q->n_items, q->text.ptr, cl);
	if (n < 0) {
		rc = (mc_status)n;
	} else {
		e->results[0] = n;
		for (uint32_t i = 0; i < q->n_items; i++)
			e->results[i + 1] = cl[i];
		e->n_results = q->n_items + 1;
	}
	free(keys);
	free(cl);
	return rc;
}

static mc_status do_task(struct conn *c, const struct mc_dummy_req *q, struct extra *e)
{
	struct mc_store *s = c->srv->real;
	struct mc_store_task_uuid id = {0, 0};
	mc_status rc;

	e->results = calloc(8, sizeof(*e->results));
	if (!e->results)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	if (q->type == MC_DUMMY_MSG_QUERY_TASK) {
		struct mc_store_task_state st;
		memset(&st, 0, sizeof(st));
		id = (struct mc_store_task_uuid){q->a, q->b};
		rc = mc_store_query_task(s, &id, &st);
		if (rc != MC_OK)
			return rc;
		e->results[0] = st.type;
		e->results[1] = st.status;
		e->results[2] = (int64_t)st.created_at_ms_epoch;
		e->results[3] = (int64_t)st.last_updated_at_ms_epoch;
		e->results[4] = (int64_t)st.assigned_client.first;
		e->results[5] = (int64_t)st.assigned_client.second;
		e->n_results = 6;
		e->text = strndup(st.message, sizeof(st.message));
		return e->text ? MC_OK : mc_set_error(MC_ERR_NOMEM, "out of memory");
	}
	if (q->n_strs < 1 || (q->type == MC_DUMMY_MSG_MOVE_TASK && q->n_strs != 3))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s with %u strings",
				    mc_dummy_msg_name(q->type), q->n_strs);
	if (q->type == MC_DUMMY_MSG_COPY_TASK) {
		const char **t = calloc(q->n_strs, sizeof(*t));
		if (!t)
			return mc_set_error(MC_ERR_NOMEM, "out of memory");
		for (uint32_t i = 1; i < q->n_strs; i++)
			t[i - 1] = q->strs[i].ptr ? q->strs[i].ptr : "";
		rc = mc_store_create_copy_task(s, q->strs[0].ptr ? q->strs[0].ptr : "", t,
					       q->n_strs - 1, &id);
		free(t);
	} else {
		rc = mc_store_create_move_task(s, q->strs[0].ptr ? q->strs[0].ptr : "",
					       q->strs[1].ptr ? q->strs[1].ptr : "",
					       q->strs[2].ptr ? q->strs[2].ptr : "", &id);
	}
	e->results[0] = (int64_t)id.first;
	e->results[1] = (int64_t)id.second;
	e->n_results = 2;
	return rc;
}

static const char *str_at(const struct mc_dummy_req *q, uint32_t i)
{
	return i < q->n_strs && q->strs[i].ptr ? q->strs[i].ptr : "";
}

static mc_status do_segment(struct conn *c, const struct mc_dummy_req *q, struct extra *e)
{
	struct mc_store *s = c->srv->real;
	char id[MC_STORE_SEGMENT_ID_MAX];
	uint64_t allocated = 0;
	mc_status rc;

	id[0] = 0;
	switch (q->type) {
	case MC_DUMMY_MSG_UNMOUNT_SEGMENT:
		if ((rc = need(&q->text, "UnmountSegment: segment id")) != MC_OK)
			return rc;
		return mc_store_unmount_segment(s, q->text.ptr, q->a);
	case MC_DUMMY_MSG_UNMOUNT_FREE_SEGMENT:
		if ((rc = need(&q->text, "UnmountAndFreeSegment: segment id")) != MC_OK)
			return rc;
		return mc_store_unmount_and_free_segment(s, q->text.ptr, q->a);
	case MC_DUMMY_MSG_UNMOUNT_LOCAL_DISK:
		return mc_store_unmount_local_disk_segment(s, q->a);
	case MC_DUMMY_MSG_MOUNT_SEGMENT: {
		struct stat st;
		if (q->n_strs != 3)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "MountSegment with %u strings",
					    q->n_strs);
		/* a daemon run as root serves every user's dummies: it maps only a
		 * file the asking dummy's user owns, never one only root may write */
		if (c->uid != geteuid() && (stat(str_at(q, 0), &st) != 0 || st.st_uid != c->uid))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "mount_segment: '%s' is not a file of the dummy's user "
					    "(uid %u)",
					    str_at(q, 0), (unsigned)c->uid);
		rc = mc_store_mount_segment(s, str_at(q, 0), q->a, q->b, str_at(q, 1), str_at(q, 2),
					    id);
		break;
	}
	default:
		if (q->n_strs != 2)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "AllocateAndMountSegment with %u strings", q->n_strs);
		rc = mc_store_allocate_and_mount_segment(s, q->a, str_at(q, 0), str_at(q, 1), id,
							 &allocated);
		break;
	}
	if (rc != MC_OK)
		return rc;
	e->results = calloc(1, sizeof(*e->results));
	e->text = strdup(id);
	if (!e->results || !e->text)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	e->results[0] = (int64_t)allocated;
	e->n_results = 1;
	return MC_OK;
}

/* Run one decoded request; res has room for max(1, n_items) results. */
static mc_status run(struct conn *c, const struct mc_dummy_req *q, int64_t *res, uint32_t *nres,
		     struct extra *e)
{
	struct mc_store *s = c->srv->real;
	*nres = 0;
	switch (q->type) {
	case MC_DUMMY_MSG_HELLO:
		mc_info("dummy %d: hello from pid %llu (version %s)", c->fd,
			(unsigned long long)q->a, q->text.ptr ? q->text.ptr : "");
		return MC_OK;
	case MC_DUMMY_MSG_PING:
		return MC_OK;
	case MC_DUMMY_MSG_MAP_REGION:
		return map_region(c, q->a, q->b);
	case MC_DUMMY_MSG_UNMAP_REGION:
		for (size_t i = 0; i < c->nregions; i++)
			if (c->regions[i].id == q->a) {
				region_drop(c, i);
				return MC_OK;
			}
		return mc_set_error(MC_ERR_INVALID_PARAMS, "UnmapRegion: unknown region %llu",
				    (unsigned long long)q->a);
	case MC_DUMMY_MSG_PUT:
		*nres = q->n_items;
		return do_put(c, q, res);
	case MC_DUMMY_MSG_GET:
		*nres = q->n_items;
		return do_get(c, q, res);
	case MC_DUMMY_MSG_EXIST:
	case MC_DUMMY_MSG_GET_SIZE:
	case MC_DUMMY_MSG_REMOVE:
		*nres = q->n_items;
		return do_keys(c, q, res);
	case MC_DUMMY_MSG_REMOVE_REGEX:
	case MC_DUMMY_MSG_REMOVE_ALL:
		*nres = 1;
		res[0] = q->type == MC_DUMMY_MSG_REMOVE_ALL
				 ? mc_store_remove_all(s, q->flags & MC_DUMMY_F_FORCE)
				 : mc_store_remove_by_regex(s, q->text.ptr,
							    q->flags & MC_DUMMY_F_FORCE);
		return res[0] < 0 ? (mc_status)res[0] : MC_OK;
	case MC_DUMMY_MSG_GET_SESSION_START:
	case MC_DUMMY_MSG_GET_SESSION_END:
	case MC_DUMMY_MSG_PUT_SESSION_START:
	case MC_DUMMY_MSG_PUT_SESSION_END:
	case MC_DUMMY_MSG_PUT_SESSION_REVOKE:
		*nres = q->type == MC_DUMMY_MSG_GET_SESSION_END ? 0 : q->n_items;
		return do_session_keys(c, q, res);
	case MC_DUMMY_MSG_GET_RANGES:
	case MC_DUMMY_MSG_PUT_RANGES:
		*nres = q->n_items;
		return do_ranges(c, q, res);
	case MC_DUMMY_MSG_GET_INTO_RANGES:
		return do_get_into_ranges(c, q, e);
	case MC_DUMMY_MSG_REPLICA_DESC:
		return do_replica_desc(c, q, e);
	case MC_DUMMY_MSG_REPLICA_CLEAR:
		return do_replica_clear(c, q, e);
	case MC_DUMMY_MSG_COPY_TASK:
	case MC_DUMMY_MSG_MOVE_TASK:
	case MC_DUMMY_MSG_QUERY_TASK:
		return do_task(c, q, e);
	case MC_DUMMY_MSG_UNMOUNT_SEGMENT:
	case MC_DUMMY_MSG_MOUNT_SEGMENT:
	case MC_DUMMY_MSG_ALLOC_MOUNT_SEGMENT:
	case MC_DUMMY_MSG_UNMOUNT_FREE_SEGMENT:
	case MC_DUMMY_MSG_UNMOUNT_LOCAL_DISK:
		return do_segment(c, q, e);
	}
	return mc_set_error(MC_ERR_NOT_SUPPORTED, "unknown request %u", q->type);
}

/* Answer one frame.  MC_OK keeps the connection; an error closes it. */
static mc_status serve_frame(struct conn *c, const struct mc_proto_hdr *h, const uint8_t *payload)
{
	struct mc_dummy_req q;
	struct mc_dummy_resp resp = {0};
	struct extra e = {0};
	int64_t *res = NULL;
	uint32_t nres = 0;
	mc_status rc, wrc;

	if (h->flags & MC_PROTO_F_RESPONSE) {
		mc_warn("dummy %d: an answer where a request belongs", c->fd);
		return MC_ERR_PROTOCOL;
	}
	rc = mc_dummy_req_decode(h->type, payload, h->payload_len, &q);
	if (rc == MC_OK) {
		if (q.type != MC_DUMMY_MSG_MAP_REGION && c->pending_fd >= 0) {
			close(c->pending_fd);
			c->pending_fd = -1;
			rc = mc_set_error(MC_ERR_PROTOCOL, "a descriptor beside %s",
					  mc_dummy_msg_name(q.type));
		} else if (!(res = calloc((size_t)q.n_items + 1, sizeof(*res)))) {
			rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
		} else {
			rc = run(c, &q, res, &nres, &e);
		}
		mc_dummy_req_release(&q);
	} else if (c->pending_fd >= 0) {
		close(c->pending_fd);
		c->pending_fd = -1;
	}
	if (rc != MC_OK)
		mc_debug("dummy %d: %s: %s (%s)", c->fd, mc_dummy_msg_name(h->type),
			 mc_last_error(), mc_status_name(rc));
	resp.n_results = e.results ? e.n_results : nres;
	resp.results = e.results ? e.results : res;
	resp.n_strs = e.n_strs;
	resp.strs = e.strs;
	if (rc != MC_OK)
		resp.text = mc_proto_str_c(mc_last_error());
	else if (h->type == MC_DUMMY_MSG_HELLO)
		resp.text = mc_proto_str_c(mc_store_hostname(c->srv->real));
	else if (e.text)
		resp.text = mc_proto_str_c(e.text);
	mc_buf_reset(&c->out);
	wrc = mc_dummy_resp_encode(&c->out, h->type, h->req_id, rc, &resp);
	free(res); /* before the write: the dummy runs as soon as it is sent */
	extra_free(&e);
	if (wrc == MC_OK)
		wrc = mc_sock_write_full(c->fd, c->out.data, c->out.len, mc_now_ms() + 10000);
	if (c->out.cap > (1u << 20)) /* an odd large answer: do not keep its room */
		mc_buf_release(&c->out);
	return wrc;
}

/* Read what comes (and any descriptors), waiting up to the socket's
 * SO_RCVTIMEO (not at all with MSG_DONTWAIT in flags); MC_ERR_CONN_CLOSED
 * at EOF, MC_ERR_TIMEOUT when nothing came. */
static mc_status receive(struct conn *c, int flags)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
	} ctl;
	struct msghdr m = {0};
	struct iovec iov;
	struct cmsghdr *cm;
	ssize_t n;

	if (mc_buf_reserve(&c->in, 64 << 10) != MC_OK)
		return MC_ERR_NOMEM;
	iov.iov_base = c->in.data + c->in.len;
	iov.iov_len = c->in.cap - c->in.len;
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	do
		n = recvmsg(c->fd, &m, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return MC_ERR_TIMEOUT; /* SO_RCVTIMEO ran out, or nothing there yet */
	if (n < 0)
		return mc_set_error(MC_ERR_SOCKET, "recvmsg: %s", strerror(errno));
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		size_t nfd;
		int *fds;
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		fds = (int *)(void *)CMSG_DATA(cm);
		for (size_t i = 0; i < nfd; i++) {
			if (c->pending_fd < 0) {
				c->pending_fd = fds[i];
			} else {
				close(fds[i]); /* one descriptor per MapRegion */
				mc_warn("dummy %d: a second descriptor before MapRegion", c->fd);
			}
		}
	}
	if (m.msg_flags & MSG_CTRUNC)
		mc_warn("dummy %d: descriptors dropped (too many at once)", c->fd);
	if (n == 0)
		return MC_ERR_CONN_CLOSED;
	c->in.len += (size_t)n;
	return MC_OK;
}

/* Serve every whole frame received; MC_OK to go on reading. */
static mc_status drain(struct conn *c)
{
	for (;;) {
		struct mc_proto_hdr h;
		size_t flen;
		mc_status rc = mc_proto_frame_peek(c->in.data + c->in_off, c->in.len - c->in_off,
						   MC_DUMMY_MAX_PAYLOAD, &h, &flen);
		if (rc == MC_INPROGRESS)
			break;
		if (rc != MC_OK) {
			/* framing is lost: say why where we can, then hang up */
			struct mc_buf out;
			mc_warn("dummy %d: bad frame: %s", c->fd, mc_last_error());
			if (rc != MC_ERR_PROTOCOL) {
				mc_buf_init(&out);
				if (mc_dummy_resp_encode(&out, h.type, h.req_id, rc, NULL) == MC_OK)
					mc_sock_write_full(c->fd, out.data, out.len,
							   mc_now_ms() + 1000);
				mc_buf_release(&out);
			}
			return rc;
		}
		rc = serve_frame(c, &h, c->in.data + c->in_off + MC_PROTO_HDR_LEN);
		if (rc != MC_OK)
			return rc;
		c->in_off += flen;
	}
	if (c->in_off == c->in.len) {
		c->in.len = c->in_off = 0;
	} else if (c->in_off > (1u << 20)) {
		memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
		c->in.len -= c->in_off;
		c->in_off = 0;
	}
	return MC_OK;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct mc_dummy_server *srv = c->srv;
	struct conn **pp;

	if (mc_auth_on(&srv->auth) && mc_auth_hs_run(c->fd, &srv->auth, MC_AUTH_SERVER, "dummy",
						     MC_DUMMY_AUTH_TIMEOUT_MS) != MC_OK) {
		char peer[32];
		snprintf(peer, sizeof(peer), "pid %d", (int)c->pid);
		mc_auth_refused("dummy-client", peer, mc_last_error());
		goto out;
	}
	/* One blocking recvmsg a request, its timeout the expiry (a poll
	 * before it would cost a system call a request for nothing). */
	{
		struct timeval tv = {.tv_sec = srv->expire_ms / 1000,
				     .tv_usec = (srv->expire_ms % 1000) * 1000};
		if (mc_sock_set_nonblock(c->fd, false) != MC_OK ||
		    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
			mc_warn("dummy %d: SO_RCVTIMEO: %s", c->fd, strerror(errno));
			goto out;
		}
	}
	for (;;) {
		mc_status rc = MC_ERR_TIMEOUT;
		/* after an answer, poll for the next request before sleeping: a
		 * dummy's calls come back to back, and each one that finds this
		 * thread asleep pays its wake-up (MC_DUMMY_CONN_BUSY_POLL_US) */
		if (srv->busy_poll_us && c->in.len == 0) {
			uint64_t until = mc_now_us() + srv->busy_poll_us;
			while ((rc = receive(c, MSG_DONTWAIT)) == MC_ERR_TIMEOUT &&
			       mc_now_us() < until)
				sched_yield();
		}
		if (rc == MC_ERR_TIMEOUT)
			rc = receive(c, 0);
		if (rc == MC_ERR_TIMEOUT) {
			mc_warn("dummy %d: silent for %u ms: expired", c->fd, srv->expire_ms);
			atomic_fetch_add(&srv->expired, 1);
			break;
		}
		if (rc != MC_OK || drain(c) != MC_OK)
			break;
	}
out:
	while (c->nregions)
		region_drop(c, c->nregions - 1);
	free(c->regions);
	if (c->pending_fd >= 0)
		close(c->pending_fd);
	mc_buf_release(&c->in);
	mc_buf_release(&c->out);
	pthread_mutex_lock(&srv->lock);
	for (pp = &srv->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	close(c->fd);
	srv->nconns--;
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
	free(c);
	return NULL;
}

/* ---- accepting ---- */

static void accept_one(struct mc_dummy_server *srv)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct conn *c;
	pthread_attr_t attr;
	pthread_t t;
	int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 ||
	    (geteuid() != 0 && cred.uid != geteuid())) {
		mc_warn("dummy: refused a peer of another user");
		close(fd);
		return;
	}
	pthread_mutex_lock(&srv->lock);
	if (srv->stopping || srv->nconns >= MC_DUMMY_MAX_CONNS || !(c = calloc(1, sizeof(*c)))) {
		pthread_mutex_unlock(&srv->lock);
		mc_warn("dummy: refused a connection (%u served)", srv->nconns);
		close(fd);
		return;
	}
	c->srv = srv;
	c->fd = fd;
	c->pid = cred.pid;
	c->pending_fd = -1;
	c->uid = cred.uid;
	mc_buf_init(&c->in);
	mc_buf_init(&c->out);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, conn_main, c) != 0) {
		pthread_mutex_unlock(&srv->lock);
		pthread_attr_destroy(&attr);
		close(fd);
		free(c);
		return;
	}
	pthread_attr_destroy(&attr);
	pthread_setname_np(t, "mc-dummy-conn");
	c->next = srv->conns;
	srv->conns = c;
	srv->nconns++;
	pthread_mutex_unlock(&srv->lock);
}

static void *acceptor_main(void *arg)
{
	struct mc_dummy_server *srv = arg;
	for (;;) {
		struct pollfd p[2] = {{.fd = srv->lfd, .events = POLLIN},
				      {.fd = srv->wake, .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		if (p[0].revents)
			accept_one(srv);
	}
	return NULL;
}

mc_status mc_dummy_server_start(struct mc_store *real, uint16_t port, uint32_t expire_ms,
				struct mc_dummy_server **out)
{
	struct mc_dummy_server *srv;
	struct sockaddr_un sa;
	socklen_t len = abstract_addr(port, &sa);

	*out = NULL;
	if (!real)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy server without a real client");
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	srv->real = real;
	{
		struct mc_store_client_env e;
		mc_store_client_env_load(&e);
		if (!expire_ms)
			expire_ms = (uint32_t)e.dummy_expire_ms;
		srv->busy_poll_us = (uint32_t)e.dummy_conn_busy_poll_us;
		mc_store_client_env_release(&e);
	}
	srv->expire_ms = expire_ms;
	if (mc_auth_secret_load(NULL, &srv->auth) != MC_OK) {
		free(srv);
		return MC_ERR_INVALID_PARAMS; /* mc_last_error names the cause */
	}
	srv->wake = eventfd(0, EFD_CLOEXEC);
	srv->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (srv->wake < 0 || srv->lfd < 0 || bind(srv->lfd, (struct sockaddr *)&sa, len) != 0 ||
	    listen(srv->lfd, 64) != 0) {
		mc_status rc = mc_set_error(MC_ERR_SOCKET, "dummy socket @%s: %s", sa.sun_path + 1,
					    strerror(errno));
		if (srv->lfd >= 0)
			close(srv->lfd);
		if (srv->wake >= 0)
			close(srv->wake);
		mc_auth_secret_release(&srv->auth);
		free(srv);
		return rc;
	}
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->cond, NULL);
	if (pthread_create(&srv->acceptor, NULL, acceptor_main, srv) != 0) {
		close(srv->lfd);
		close(srv->wake);
		pthread_mutex_destroy(&srv->lock);
		pthread_cond_destroy(&srv->cond);
		mc_auth_secret_release(&srv->auth);
		free(srv);
		return mc_set_error(MC_ERR_INTERNAL, "dummy server: pthread_create failed");
	}
	pthread_setname_np(srv->acceptor, "mc-dummy-acc");
	mc_info("serving dummy clients on @%s", sa.sun_path + 1);
	*out = srv;
	return MC_OK;
}

void mc_dummy_server_stop(struct mc_dummy_server *srv)
{
	uint64_t one = 1;
	if (!srv)
		return;
	if (write(srv->wake, &one, sizeof(one)) != sizeof(one))
		mc_warn("dummy server: eventfd write failed");
	pthread_join(srv->acceptor, NULL);
	close(srv->lfd);
	pthread_mutex_lock(&srv->lock);
	srv->stopping = true;
	for (struct conn *c = srv->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR); /* wakes its recvmsg; it closes the fd itself */
	while (srv->nconns)
		pthread_cond_wait(&srv->cond, &srv->lock);
	pthread_mutex_unlock(&srv->lock);
	close(srv->wake);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->cond);
	mc_auth_secret_release(&srv->auth);
	free(srv);
}

unsigned mc_dummy_server_conns(struct mc_dummy_server *srv)
{
	unsigned n;
	pthread_mutex_lock(&srv->lock);
	n = srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	return n;
}

uint64_t mc_dummy_server_expired(struct mc_dummy_server *srv)
{
	return atomic_load(&srv->expired);
}

/*
 * store/offload_server.c - the offload RPC server of a client with an SSD
 * tier (offload_server.h): readers of this client's LOCAL_DISK replicas
 * ask it for objects, it loads them from the local disk store into its
 * staging buffer and answers where they lie, readers pull them with the
 * Transfer Engine and release the batch.
 *
 * One thread runs an event loop (base/loop.h) over the listener and its
 * connections; each request is handled on that thread, disk reads
 * included (one batch of I/O per request, mc_disk_store_get_batch), so
 * the server owns everything it touches without a lock except the stats.
 * Readers keep a connection per endpoint and send one request at a time;
 * a connection that pipelines is served in order.
 *
 * Staging buffer: cfg->buffer_size bytes from mc_te_host_alloc (a lazy
 * mapping: nothing is resident until an object lands in it), registered
 * with the engine at start, before any reader can learn this endpoint, so
 * a reader's first look at this client's segment already shows it.  A
 * batch takes one contiguous extent, every object at a 4 KiB boundary in
 * it (what O_DIRECT reads and RDMA want), first fit in the extents' list
 * sorted by offset; a few batches are live at once, so a walk of the list
 * is cheap.  A request whose objects do not all fit gets what fits of
 * them, in order, in the largest free extent, and the rest answered
 * MC_ERR_BUFFER_OVERFLOW (the reader asks for those again after releasing
 * this batch); an object larger than the whole buffer is answered
 * MC_ERR_BUFFER_OVERFLOW every time.  Nothing is ever written past an
 * extent: the disk store reads into a capacity.
 *
 * Reclaim: a batch lives until ReleaseOffloadBuffer or gc_ttl_ms after it
 * was answered; a timer reclaims the late ones.  The answer carries
 * gc_ttl_ms, and a reader counts it from before its request was sent, so
 * it never reads an extent after it could have been reused.
 *
 * Bounds, as every port (base/accept.h): a connection cap lowered to a
 * share of the descriptor limit (more are accepted and closed at once),
 * accept paused on descriptor exhaustion, a frame that must complete
 * within FRAME_FLOOR_MS plus its size at FRAME_MIN_RATE, requests of at
 * most MAX_REQ_PAYLOAD bytes and MAX_ITEMS objects, idle connections
 * closed after IDLE_MS.  A malformed frame closes its connection (one log
 * line); an unknown type is answered NOT_SUPPORTED.
 *
 * Never: listen on every interface unless the caller asked for it, block
 * the loop on a peer (sockets are non-blocking), or hand out an address
 * outside the staging buffer.
 */
#define MC_LOG_MODULE "offload"
#include "store/offload_server.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/disk_store.h"
#include "store/proto.h"

#define ALIGN		4096u
#define MAX_REQ_PAYLOAD (16u << 20) /* a request: keys and sizes only */
#define MAX_ITEMS	65536u
#define RBUF_INIT	4096u
#define FRAME_FLOOR_MS	5000u
#define FRAME_MIN_RATE	(1u << 20) /* bytes per second */
#define IDLE_MS		300000u	   /* readers keep connections for less (60 s) */
#define SCAN_MS		250u	   /* frame and idle deadlines are checked this often */
#define LISTEN_BACKLOG	256
#define FD_SHARE	25 /* percent of RLIMIT_NOFILE this port may hold */

/* ---- configuration ------------------------------------------------------------------------ */

#define CFG(f) offsetof(struct mc_offload_config, f)
const struct mc_config_entry mc_offload_config_table[] = {
	{.f = {"offload_local_buffer_size_bytes", "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES",
	       "1342177280",
	       "staging buffer the offload RPC server loads disk objects into for readers "
	       "(registered with the engine; lazy, so an unused one costs no memory)",
	       CFG(buffer_size), MC_CONFIG_SIZE, 1u << 20, INT64_MAX}},
	{.f = {"store_offload_fixed_buffer", "MC_STORE_OFFLOAD_FIXED_BUFFER", "true",
	       "register the staging buffer with the disk store's io_uring as a fixed buffer "
	       "(disk reads into it run as READ_FIXED); pins and faults in the whole buffer at "
	       "start, and needs RLIMIT_MEMLOCK room for it (else one warning, no fixed buffer)",
	       CFG(fixed_buffer), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"offload_client_buffer_gc_ttl_ms", "MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS",
	       "5000",
	       "a staged batch a reader did not release is reclaimed after this (milliseconds)",
	       CFG(gc_ttl_ms), MC_CONFIG_INT, 100, 3600000}},
	{.f = {"offload_heartbeat_interval_seconds", "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS",
	       "10", "period of the offload heartbeat (objects the master asks to move to disk)",
	       CFG(heartbeat_interval_s), MC_CONFIG_INT, 1, 86400}},
	{.f = {"store_offload_heartbeat_max_items", "MC_STORE_OFFLOAD_HEARTBEAT_MAX_ITEMS", "1000",
	       "most objects one offload heartbeat asks the master for", CFG(heartbeat_max_items),
	       MC_CONFIG_INT, 1, 1000000}},
	{.f = {"store_offload_rpc_port", "MC_STORE_OFFLOAD_RPC_PORT", "0",
	       "port of the client's offload RPC server (0: the kernel's choice), on the "
	       "client's local_hostname",
	       CFG(rpc_port), MC_CONFIG_INT, 0, 65535}},
	{.f = {"store_offload_rpc_timeout_ms", "MC_STORE_OFFLOAD_RPC_TIMEOUT_MS", "10000",
	       "deadline of a reader's call to an offload RPC server, connecting included "
	       "(milliseconds)",
	       CFG(rpc_timeout_ms), MC_CONFIG_INT, 100, 3600000}},
	{.f = {"store_offload_rpc_max_connections", "MC_STORE_OFFLOAD_RPC_MAX_CONNECTIONS", "256",
	       "most connections the offload RPC server keeps open (more are closed at once)",
	       CFG(rpc_max_connections), MC_CONFIG_INT, 1, 65536}},
};
#undef CFG
const size_t mc_offload_config_table_len = MC_ARRAY_SIZE(mc_offload_config_table);

void mc_offload_config_init(struct mc_offload_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	mc_config_entry_defaults(mc_offload_config_table, mc_offload_config_table_len, cfg);
	mc_config_entry_load_env(mc_offload_config_table, mc_offload_config_table_len, cfg);
}

/* ---- disk keys ---------------------------------------------------------------------------- */

static bool default_tenant(const char *t, size_t n)
{
	return n == 0 || (n == 7 && memcmp(t, "default", 7) == 0);
}

size_t mc_offload_disk_key(const char *tenant, size_t tenant_len, const char *key, size_t key_len,
			   char *out, size_t cap)
{
	char num[24];
	int nl;
	size_t total;

	if (!key || !key_len || memchr(key, 0, key_len) ||
	    (tenant_len && (!tenant || memchr(tenant, 0, tenant_len))))
		return 0;
	if (default_tenant(tenant, tenant_len) && key[0] != MC_OFFLOAD_TENANT_MARK) {
		if (key_len > cap || key_len > MC_STORE_KEY_MAX)
			return 0;
		memcpy(out, key, key_len);
		return key_len;
	}
	if (default_tenant(tenant, tenant_len))
		tenant_len = 0;
	nl = snprintf(num, sizeof(num), "%zu:", tenant_len);
	total = 1 + (size_t)nl + tenant_len + key_len;
	if (total > cap || total > MC_STORE_KEY_MAX)
		return 0;
	out[0] = MC_OFFLOAD_TENANT_MARK;
	memcpy(out + 1, num, (size_t)nl);
	if (tenant_len)
		memcpy(out + 1 + nl, tenant, tenant_len);
	memcpy(out + 1 + nl + tenant_len, key, key_len);
	return total;
}

bool mc_offload_disk_key_split(const char *dk, size_t dk_len, const char **tenant_out,
			       size_t *tenant_len_out, const char **key_out, size_t *key_len_out)
{
	size_t i = 1, tl = 0;

	if (!dk_len)
		return false;
	if (dk[0] != MC_OFFLOAD_TENANT_MARK) {
		*tenant_out = "";
		*tenant_len_out = 0;
		*key_out = dk;
		*key_len_out = dk_len;
		return true;
	}
	for (; i < dk_len && dk[i] >= '0' && dk[i] <= '9' && i < 8; i++)
		tl = tl * 10 + (size_t)(dk[i] - '0');
	if (i == 1 || i >= dk_len || dk[i] != ':' || tl > dk_len - i - 1 || tl == dk_len - i - 1)
		return false; /* no length, no ':', or no key after the tenant */
	*tenant_out = dk + i + 1;
	*tenant_len_out = tl;
	*key_out = dk + i + 1 + tl;
	*key_len_out = dk_len - i - 1 - tl;
	return true;
}

/* ---- state -------------------------------------------------------------------------------- */

struct batch {
	struct mc_list link; /* in srv->batches, by offset */
	uint64_t id;
	uint64_t off, len; /* the extent in the staging buffer */
	uint64_t deadline_ms;
};

struct conn {
	struct mc_list link; /* in srv->conns */
	struct mc_loop_fd io;
	struct mc_offload_server *srv;
	uint8_t *rbuf;
	size_t rlen, rcap;
	struct mc_buf wbuf;
	size_t woff;
	uint64_t last_ms;
	uint64_t frame_deadline_ms; /* of the partial frame in rbuf; 0 = none */
	struct mc_auth_hs *hs;	    /* with a secret, until the peer proved it */
};

struct mc_offload_server {
	struct mc_offload_config cfg;
	struct mc_disk_store *ds;
	struct mc_te *te;
	char endpoint[300];
	char segment[256];
	uint16_t port;

	uint8_t *buf; /* staging buffer */
	uint64_t buf_len;
	bool registered;
	struct mc_list batches;
	uint64_t next_batch;

	struct mc_loop *loop;
	struct mc_loop_fd lfd;
	struct mc_loop_timer scan;   /* frame, idle and batch deadlines */
	struct mc_loop_timer resume; /* accept after a pause */
	struct mc_accept_guard guard;
	struct mc_auth_secret auth; /* the cluster secret, or none (base/auth.h) */
	struct mc_list conns;
	uint64_t nconns, max_conns;
	pthread_t thread;
	bool started;

	pthread_mutex_t stats_lock;
	struct mc_offload_server_stats st;
};

#define STAT_ADD(srv, field, v)                           \
	do {                                              \
		pthread_mutex_lock(&(srv)->stats_lock);   \
		(srv)->st.field += (v);                   \
		pthread_mutex_unlock(&(srv)->stats_lock); \
	} while (0)

/* ---- staging buffer ----------------------------------------------------------------------- */

static uint64_t align_up(uint64_t v)
{
	return (v + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
}

/* The first free extent of at least need bytes: its offset, and the batch
 * to insert before (NULL: at the end); false when none.  With need 0, the
 * largest free extent's length goes to *largest_out. */
static bool extent_find(struct mc_offload_server *srv, uint64_t need, uint64_t *off_out,
			struct batch **before_out, uint64_t *largest_out)
{
	uint64_t pos = 0, largest = 0;
	struct mc_list *it;

	for (it = srv->batches.next; it != &srv->batches; it = it->next) {
		struct batch *b = mc_container_of(it, struct batch, link);
		uint64_t gap = b->off - pos;
		if (need && gap >= need) {
			*off_out = pos;
			*before_out = b;
			return true;
		}
		largest = MC_MAX(largest, gap);
		pos = b->off + b->len;
	}
	largest = MC_MAX(largest, srv->buf_len - pos);
	if (largest_out)
		*largest_out = largest;
	if (need && srv->buf_len - pos >= need) {
		*off_out = pos;
		*before_out = NULL;
		return true;
	}
	return false;
}

static void batch_free(struct mc_offload_server *srv, struct batch *b)
{
	mc_list_del(&b->link);
	pthread_mutex_lock(&srv->stats_lock);
	srv->st.live_batches--;
	srv->st.staged_bytes -= b->len;
	pthread_mutex_unlock(&srv->stats_lock);
	mc_free(b);
}

static struct batch *batch_find(struct mc_offload_server *srv, uint64_t id)
{
	struct mc_list *it;

	for (it = srv->batches.next; it != &srv->batches; it = it->next) {
		struct batch *b = mc_container_of(it, struct batch, link);
		if (b->id == id)
			return b;
	}
	return NULL;
}

/* Reclaims the batches past their deadline. */
static void batches_reap(struct mc_offload_server *srv, uint64_t now)
{
	struct mc_list *it, *next;
	uint64_t n = 0;

	for (it = srv->batches.next; it != &srv->batches; it = next) {
		struct batch *b = mc_container_of(it, struct batch, link);
		next = it->next;
		if (now >= b->deadline_ms) {
			mc_debug("batch %" PRIu64 " not released within %" PRId64 " ms: reclaimed",
				 b->id, srv->cfg.gc_ttl_ms);
			batch_free(srv, b);
			n++;
		}
	}
	if (n)
		STAT_ADD(srv, reclaimed, n);
}

/* ---- requests ----------------------------------------------------------------------------- */

/* Answers BatchGetOffloadObject into out. */
static mc_status serve_get(struct mc_offload_server *srv, const struct mc_store_msg *q,
			   struct mc_buf *out)
{
	const struct mc_store_offload_rpc_get_req *req = &q->body.offload_rpc_get_req;
	uint32_t n = req->n_items;
	struct mc_store_offload_rpc_buf *bufs = NULL;
	struct mc_disk_get *gets = NULL;
	uint64_t *lens = NULL, *offs = NULL, total = 0, base = 0, largest = 0;
	uint32_t *idx = NULL, ngets = 0;
	struct batch *b = NULL, *before = NULL;
	char *kbuf = NULL; /* the disk keys, end to end */
	size_t kcap = 0, kpos = 0;
	uint64_t staged = 0, staged_bytes = 0, failed = 0;
	mc_status rc;

	if (n > MAX_ITEMS)
		return mc_store_error_encode(out, q->hdr.type, q->hdr.req_id, MC_ERR_INVALID_PARAMS,
					     "too many objects in one request");
	bufs = mc_calloc(n ? n : 1, sizeof(*bufs));
	gets = mc_calloc(n ? n : 1, sizeof(*gets));
	lens = mc_calloc(n ? n : 1, sizeof(*lens));
	offs = mc_calloc(n ? n : 1, sizeof(*offs));
	idx = mc_calloc(n ? n : 1, sizeof(*idx));
	for (uint32_t i = 0; i < n; i++)
		kcap += (size_t)req->items[i].tenant.len + req->items[i].key.len + 32;
	kbuf = mc_malloc(kcap ? kcap : 1);
	if (!bufs || !gets || !lens || !offs || !idx || !kbuf) {
		rc = mc_store_error_encode(out, q->hdr.type, q->hdr.req_id, MC_ERR_NOMEM,
					   "no memory for the request");
		goto out;
	}
	/* what each object needs, found objects only */
	for (uint32_t i = 0; i < n; i++) {
		const struct mc_store_offload_rpc_item *it = &req->items[i];
		char *dk = kbuf + kpos;
		size_t kl = mc_offload_disk_key(it->tenant.ptr, it->tenant.len, it->key.ptr,
						it->key.len, dk, kcap - kpos);
		uint64_t len;

		bufs[i].status = MC_OK;
		if (!kl) {
			bufs[i].status = MC_ERR_INVALID_KEY;
			continue;
		}
		kpos += kl;
		if (!mc_disk_store_contains(srv->ds, dk, kl, &len)) {
			bufs[i].status = MC_ERR_OBJECT_NOT_FOUND;
			continue;
		}
		if (len != it->size) {
			/* the master's record and the disk disagree: never hand
			 * out a length the reader did not expect */
			bufs[i].status = MC_ERR_OBJECT_NOT_FOUND;
			mc_info("object of %" PRIu64 " bytes asked as %" PRIu64 ": refused", len,
				it->size);
			continue;
		}
		if (align_up(len) > srv->buf_len) {
			bufs[i].status = MC_ERR_BUFFER_OVERFLOW;
			continue;
		}
		lens[i] = len;
		/* its extent is padded to 4 KiB: room for an O_DIRECT read in one piece */
		gets[ngets] = (struct mc_disk_get){.key = dk, .key_len = kl, .cap = align_up(len)};
		idx[ngets++] = i;
		total += align_up(len);
	}
	/* one extent for all of them, or for the longest prefix that fits */
	if (ngets && !extent_find(srv, total, &base, &before, NULL)) {
		uint64_t fit = 0;
		uint32_t k = 0;
		extent_find(srv, 0, NULL, NULL, &largest);
		while (k < ngets && fit + align_up(lens[idx[k]]) <= largest)
			fit += align_up(lens[idx[k++]]);
		for (uint32_t j = k; j < ngets; j++)
			bufs[idx[j]].status = MC_ERR_BUFFER_OVERFLOW;
		ngets = k;
		total = fit;
		if (ngets && !extent_find(srv, total, &base, &before, NULL))
			ngets = 0; /* cannot happen: largest is free */
	}
	if (ngets) {
		uint64_t pos = base;
		b = mc_calloc(1, sizeof(*b));
		if (!b) {
			rc = mc_store_error_encode(out, q->hdr.type, q->hdr.req_id, MC_ERR_NOMEM,
						   "no memory for the batch");
			goto out;
		}
		for (uint32_t k = 0; k < ngets; k++) {
			gets[k].dst = srv->buf + pos;
			offs[idx[k]] = pos;
			pos += align_up(lens[idx[k]]);
		}
		mc_disk_store_get_batch(srv->ds, gets, ngets);
		for (uint32_t k = 0; k < ngets; k++) {
			uint32_t i = idx[k];
			if (gets[k].status == MC_OK && gets[k].len != lens[i])
				gets[k].status = MC_ERR_OBJECT_NOT_FOUND; /* replaced meanwhile */
			bufs[i].status = gets[k].status;
			if (gets[k].status == MC_OK) {
				bufs[i].address = (uint64_t)(uintptr_t)(srv->buf + offs[i]);
				staged++;
				staged_bytes += lens[i];
			}
		}
	}
	for (uint32_t i = 0; i < n; i++)
		failed += bufs[i].status != MC_OK;
	{
		struct mc_store_offload_rpc_get_resp resp = {
			.batch_id = 0,
			.segment = mc_proto_str_c(srv->segment),
			.gc_ttl_ms = (uint64_t)srv->cfg.gc_ttl_ms,
			.n_items = n,
			.items = bufs,
		};
		if (staged) {
			b->id = ++srv->next_batch;
			b->off = base;
			b->len = total;
			b->deadline_ms = mc_now_ms() + (uint64_t)srv->cfg.gc_ttl_ms;
			if (before)
				mc_list_add_tail(&before->link, &b->link);
			else
				mc_list_add_tail(&srv->batches, &b->link);
			resp.batch_id = b->id;
			b = NULL;
			pthread_mutex_lock(&srv->stats_lock);
			srv->st.batches++;
			srv->st.live_batches++;
			srv->st.staged_bytes += total;
			srv->st.objects += staged;
			srv->st.bytes += staged_bytes;
			pthread_mutex_unlock(&srv->stats_lock);
		}
		STAT_ADD(srv, failed_objects, failed);
		rc = mc_store_batch_get_offload_object_response_encode(out, q->hdr.req_id, &resp);
	}
out:
	mc_free(b);
	mc_free(bufs);
	mc_free(gets);
	mc_free(lens);
	mc_free(offs);
	mc_free(idx);
	mc_free(kbuf);
	return rc;
}

static mc_status serve_release(struct mc_offload_server *srv, const struct mc_store_msg *q,
			       struct mc_buf *out)
{
	struct batch *b = batch_find(srv, q->body.offload_rpc_release_req.batch_id);

	if (!b)
		return mc_store_error_encode(
			out, q->hdr.type, q->hdr.req_id, MC_ERR_OBJECT_NOT_FOUND,
			"no such batch (released, or reclaimed after its ttl)");
	batch_free(srv, b);
	STAT_ADD(srv, released, 1);
	return mc_store_release_offload_buffer_response_encode(out, q->hdr.req_id, NULL);
}

/* Handles one whole frame; false closes the connection. */
static bool serve_frame(struct mc_offload_server *srv, struct conn *c, const uint8_t *frame,
			size_t len)
{
	struct mc_store_msg q;
	mc_status rc = mc_store_msg_decode(frame, len, MAX_REQ_PAYLOAD, &q);

	if (rc == MC_ERR_NOT_SUPPORTED) {
		mc_store_error_encode(&c->wbuf, q.hdr.type, q.hdr.req_id, MC_ERR_NOT_SUPPORTED,
				      "not an offload RPC message");
		return c->wbuf.err == MC_OK;
	}
	if (rc != MC_OK) {
		mc_info("closing a connection: bad frame (%s)", mc_last_error());
		return false;
	}
	if (q.hdr.flags & MC_PROTO_F_RESPONSE) {
		mc_store_msg_release(&q);
		mc_info("closing a connection: a response frame sent to the server");
		return false;
	}
	switch (q.hdr.type) {
	case MC_STORE_BATCH_GET_OFFLOAD_OBJECT:
		rc = serve_get(srv, &q, &c->wbuf);
		break;
	case MC_STORE_RELEASE_OFFLOAD_BUFFER:
		rc = serve_release(srv, &q, &c->wbuf);
		break;
	case MC_STORE_SERVICE_READY: {
		struct mc_store_hello h = {mc_proto_str_c("mooncake-c offload")};
		rc = mc_store_service_ready_response_encode(&c->wbuf, q.hdr.req_id, &h);
		break;
	}
	default:
		rc = mc_store_error_encode(&c->wbuf, q.hdr.type, q.hdr.req_id, MC_ERR_NOT_SUPPORTED,
					   "the offload server serves only the offload RPC");
	}
	mc_store_msg_release(&q);
	return rc == MC_OK;
}

/* ---- connections -------------------------------------------------------------------------- */

static void conn_close(struct mc_offload_server *srv, struct conn *c)
{
	mc_loop_del_fd(srv->loop, &c->io);
	close(c->io.fd);
	mc_list_del(&c->link);
	srv->nconns--;
	STAT_ADD(srv, open_connections, (uint64_t)-1);
	mc_free(c->rbuf);
	mc_free(c->hs);
	mc_buf_release(&c->wbuf);
	mc_free(c);
}

/* Sends what waits; false: the connection failed. */
static bool conn_flush(struct mc_offload_server *srv, struct conn *c)
{
	while (c->woff < c->wbuf.len) {
		ssize_t w =
			send(c->io.fd, c->wbuf.data + c->woff, c->wbuf.len - c->woff, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return mc_loop_set_events(srv->loop, &c->io, EPOLLOUT) == MC_OK;
		if (w <= 0)
			return false;
		c->woff += (size_t)w;
	}
	mc_buf_reset(&c->wbuf);
	c->woff = 0;
	return mc_loop_set_events(srv->loop, &c->io, EPOLLIN) == MC_OK;
}

/* Handles the whole frames in rbuf; false closes. */
static bool conn_frames(struct mc_offload_server *srv, struct conn *c, uint64_t now)
{
	size_t off = 0;

	for (;;) {
		struct mc_proto_hdr h;
		size_t flen = 0;
		mc_status rc = mc_proto_frame_peek(c->rbuf + off, c->rlen - off, MAX_REQ_PAYLOAD,
						   &h, &flen);
		if (rc == MC_INPROGRESS) {
			if (c->rlen > off && !c->frame_deadline_ms)
				c->frame_deadline_ms =
					mc_frame_deadline_ms(now, flen ? flen : MC_PROTO_HDR_LEN,
							     FRAME_FLOOR_MS, FRAME_MIN_RATE);
			if (flen > c->rcap) {
				uint8_t *nb;
				if (off) { /* keep only the partial frame */
					memmove(c->rbuf, c->rbuf + off, c->rlen - off);
					c->rlen -= off;
					off = 0;
				}
				nb = mc_realloc(c->rbuf, flen);
				if (!nb)
					return false;
				c->rbuf = nb;
				c->rcap = flen;
			}
			break;
		}
		if (rc != MC_OK) {
			mc_info("closing a connection: %s", mc_last_error());
			STAT_ADD(srv, bad_frames, 1);
			return false;
		}
		if (!serve_frame(srv, c, c->rbuf + off, flen)) {
			STAT_ADD(srv, bad_frames, 1);
			return false;
		}
		off += flen;
		c->frame_deadline_ms = 0;
	}
	if (off) {
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
	}
	return c->wbuf.len == 0 || conn_flush(srv, c);
}

static void conn_cb(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct conn *c = mc_container_of(f, struct conn, io);
	struct mc_offload_server *srv = c->srv;
	uint64_t now = mc_loop_now_ms(l);

	c->last_ms = now;
	if (c->hs) {
		/* with a secret: the handshake before any frame is read */
		bool want_out;
		enum mc_auth_result r = mc_auth_hs_io(c->hs, f->fd, &want_out);
		if (r == MC_AUTH_FAIL) {
			mc_auth_refused("offload rpc", "a reader", c->hs->why);
			goto close;
		}
		if (r == MC_AUTH_AGAIN) {
			if (mc_loop_set_events(l, &c->io, EPOLLIN | (want_out ? EPOLLOUT : 0)) !=
			    MC_OK)
				goto close;
			return;
		}
		mc_free(c->hs);
		c->hs = NULL;
		c->frame_deadline_ms = 0;
		if (mc_loop_set_events(l, &c->io, EPOLLIN) != MC_OK)
			goto close;
		events |= EPOLLIN;
	}
	if (events & EPOLLOUT) {
		if (!conn_flush(srv, c))
			goto close;
		if (c->wbuf.len)
			return;
	}
	if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		return;
	for (;;) {
		ssize_t r;
		if (c->rlen == c->rcap) {
			/* a whole frame is smaller than rcap (conn_frames grows
			 * it to the announced length), so this is a header
			 * still arriving in a small buffer */
			size_t ncap = c->rcap * 2;
			uint8_t *nb = ncap <= MAX_REQ_PAYLOAD + MC_PROTO_HDR_LEN
					      ? mc_realloc(c->rbuf, ncap)
					      : NULL;
			if (!nb)
				goto close;
			c->rbuf = nb;
			c->rcap = ncap;
		}
		r = recv(f->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r <= 0)
			goto close; /* peer gone; a partial frame dies with it */
		c->rlen += (size_t)r;
		if (!conn_frames(srv, c, now))
			goto close;
		if (c->wbuf.len)
			return; /* wait until the answer is out before reading more */
	}
	return;
close:
	conn_close(srv, c);
}

static int64_t resume_cb(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now)
{
	struct mc_offload_server *srv = mc_container_of(t, struct mc_offload_server, resume);

	(void)now;
	mc_loop_add_fd(l, &srv->lfd, EPOLLIN);
	return MC_LOOP_TIMER_STOP;
}

static void accept_cb(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct mc_offload_server *srv = mc_container_of(f, struct mc_offload_server, lfd);
	uint64_t now = mc_loop_now_ms(l);

	(void)events;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(f->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;

		if (fd < 0) {
			enum mc_accept_next next = mc_accept_failed(&srv->guard, errno, now);
			if (next == MC_ACCEPT_AGAIN)
				continue;
			if (next == MC_ACCEPT_PAUSE) {
				mc_loop_del_fd(l, f);
				mc_loop_timer_start(l, &srv->resume, MC_ACCEPT_PAUSE_MS);
			}
			return;
		}
		if (srv->nconns >= srv->max_conns) {
			mc_accept_refused(&srv->guard, srv->nconns, srv->max_conns, now);
			STAT_ADD(srv, refused, 1); /* before the peer can see the close */
			close(fd);
			continue;
		}
		mc_sock_set_nodelay(fd);
		c = mc_calloc(1, sizeof(*c));
		if (c)
			c->rbuf = mc_malloc(RBUF_INIT);
		if (!c || !c->rbuf) {
			if (c)
				mc_free(c);
			close(fd);
			continue;
		}
		c->srv = srv;
		c->rcap = RBUF_INIT;
		c->last_ms = now;
		mc_buf_init(&c->wbuf);
		mc_loop_fd_init(&c->io, fd, conn_cb);
		if (mc_auth_on(&srv->auth)) {
			c->hs = mc_malloc(sizeof(*c->hs));
			if (!c->hs || mc_auth_hs_init(c->hs, &srv->auth, MC_AUTH_SERVER,
						      "offload") != MC_OK) {
				mc_free(c->hs);
				mc_free(c->rbuf);
				mc_free(c);
				close(fd);
				continue;
			}
			c->frame_deadline_ms = now + srv->cfg.rpc_timeout_ms;
		}
		if (mc_loop_add_fd(l, &c->io, EPOLLIN) != MC_OK) {
			mc_free(c->hs);
			mc_free(c->rbuf);
			mc_free(c);
			close(fd);
			continue;
		}
		mc_list_add_tail(&srv->conns, &c->link);
		srv->nconns++;
		pthread_mutex_lock(&srv->stats_lock);
		srv->st.connections++;
		srv->st.open_connections++;
		pthread_mutex_unlock(&srv->stats_lock);
	}
}

static int64_t scan_cb(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now)
{
	struct mc_offload_server *srv = mc_container_of(t, struct mc_offload_server, scan);
	struct mc_list *it, *next;

	(void)l;
	for (it = srv->conns.next; it != &srv->conns; it = next) {
		struct conn *c = mc_container_of(it, struct conn, link);
		next = it->next;
		if (c->frame_deadline_ms && now > c->frame_deadline_ms) {
			mc_info("closing a connection: its frame did not arrive in time");
			conn_close(srv, c);
		} else if (now - c->last_ms > IDLE_MS) {
			mc_debug("closing an idle connection");
			conn_close(srv, c);
		}
	}
	batches_reap(srv, now);
	return SCAN_MS;
}

static void *server_main(void *arg)
{
	struct mc_offload_server *srv = arg;

	if (mc_loop_run(srv->loop) != MC_OK)
		mc_error("offload server loop failed: %s", mc_last_error());
	return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

mc_status mc_offload_server_start(const struct mc_offload_config *cfg, const char *host,
				  uint16_t port, struct mc_disk_store *ds, struct mc_te *te,
				  struct mc_offload_server **out)
{
	struct mc_offload_server *srv;
	mc_status rc;
	void *p = NULL;
	int fd;

	if (!cfg || !ds || !te || !out || cfg->buffer_size < ALIGN || cfg->gc_ttl_ms <= 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "offload server: bad arguments");
	srv = mc_calloc(1, sizeof(*srv));
	if (!srv)
		return MC_ERR_NOMEM;
	srv->cfg = *cfg;
	srv->ds = ds;
	srv->te = te;
	mc_list_init(&srv->batches);
	mc_list_init(&srv->conns);
	pthread_mutex_init(&srv->stats_lock, NULL);
	mc_accept_guard_init(&srv->guard, "offload");
	mc_loop_fd_init(&srv->lfd, -1, accept_cb);
	mc_loop_timer_init(&srv->scan, scan_cb);
	mc_loop_timer_init(&srv->resume, resume_cb);
	snprintf(srv->segment, sizeof(srv->segment), "%s", mc_te_local_name(te));
	rc = mc_auth_secret_load(NULL, &srv->auth);
	if (rc != MC_OK)
		goto fail;

	srv->buf_len = align_up(cfg->buffer_size);
	rc = mc_te_host_alloc((size_t)srv->buf_len, &p);
	if (rc != MC_OK)
		goto fail;
	srv->buf = p;
	rc = mc_te_register(te, srv->buf, (size_t)srv->buf_len, NULL, true);
	if (rc != MC_OK)
		goto fail;
	srv->registered = true;
	if (cfg->fixed_buffer) {
		mc_status fr = mc_disk_store_register_staging(ds, srv->buf, (size_t)srv->buf_len);
		if (fr != MC_OK && fr != MC_ERR_NOT_SUPPORTED)
			mc_warn("offload RPC server: %s; disk reads into it pin pages per request",
				mc_last_error());
	}

	fd = mc_sock_listen_on(host, port, LISTEN_BACKLOG);
	if (fd < 0) {
		rc = (mc_status)fd;
		goto fail;
	}
	srv->lfd.fd = fd;
	srv->port = mc_sock_local_port(fd);
	if (host && strchr(host, ':') && host[0] != '[')
		snprintf(srv->endpoint, sizeof(srv->endpoint), "[%s]:%u", host, srv->port);
	else
		snprintf(srv->endpoint, sizeof(srv->endpoint), "%s:%u",
			 mc_sock_host_is_any(host) ? mc_te_local_host(te) : host, srv->port);
	srv->max_conns =
		mc_accept_cap_for_fds("offload", (uint64_t)cfg->rpc_max_connections, FD_SHARE);
	rc = mc_loop_new(&srv->loop);
	if (rc != MC_OK)
		goto fail;
	rc = mc_loop_add_fd(srv->loop, &srv->lfd, EPOLLIN);
	if (rc != MC_OK)
		goto fail;
	mc_loop_timer_start(srv->loop, &srv->scan, SCAN_MS);
	if (pthread_create(&srv->thread, NULL, server_main, srv) != 0) {
		rc = mc_set_error(MC_ERR_NOMEM, "offload server: cannot start its thread");
		goto fail;
	}
	srv->started = true;
	pthread_setname_np(srv->thread, "mc-offload");
	mc_info("offload RPC server on %s, staging buffer %" PRIu64 " MiB (lazy), gc ttl %" PRId64
		" ms",
		srv->endpoint, srv->buf_len >> 20, cfg->gc_ttl_ms);
	*out = srv;
	return MC_OK;
fail:
	mc_offload_server_stop(srv);
	return rc;
}

void mc_offload_server_stop(struct mc_offload_server *srv)
{
	if (!srv)
		return;
	if (srv->started) {
		mc_loop_stop(srv->loop);
		pthread_join(srv->thread, NULL);
	}
	while (srv->conns.next != &srv->conns)
		conn_close(srv, mc_container_of(srv->conns.next, struct conn, link));
	while (srv->batches.next != &srv->batches)
		batch_free(srv, mc_container_of(srv->batches.next, struct batch, link));
	if (srv->lfd.fd >= 0) {
		if (srv->loop)
			mc_loop_del_fd(srv->loop, &srv->lfd);
		close(srv->lfd.fd);
	}
	mc_loop_free(srv->loop);
	if (srv->registered)
		mc_te_deregister(srv->te, srv->buf);
	if (srv->buf)
		mc_te_host_free(srv->buf);
	pthread_mutex_destroy(&srv->stats_lock);
	mc_auth_secret_release(&srv->auth);
	mc_free(srv);
}

const char *mc_offload_server_endpoint(const struct mc_offload_server *srv)
{
	return srv->endpoint;
}

uint16_t mc_offload_server_port(const struct mc_offload_server *srv)
{
	return srv->port;
}

void mc_offload_server_stats(struct mc_offload_server *srv, struct mc_offload_server_stats *out)
{
	pthread_mutex_lock(&srv->stats_lock);
	*out = srv->st;
	pthread_mutex_unlock(&srv->stats_lock);
	out->accept_pauses = atomic_load(&srv->guard.paused);
}

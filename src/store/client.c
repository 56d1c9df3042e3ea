/*
 * store/client.c - the Mooncake Store client (include/mooncake/store.h).
 *
 * A client is three things: a connection to the master (master_conn.c),
 * a Transfer Engine that moves the bytes, and an anonymous mapping
 * registered with that engine, the global segment, which it mounts on the
 * master so other clients' replicas land in it.  Nothing stages through a
 * local buffer: put and get move the caller's memory, registered or not
 * (local_buffer_size is accepted and checked as upstream, and unused).
 *
 * Put: PutStart (one master round trip) hands back one descriptor per
 * replica, an address inside some client's segment; every replica is
 * written with one engine batch (a memcpy when the replica is in this
 * client's own segment), all replicas and, for batch calls, all keys
 * together so the transfers overlap; then PutEnd makes the object visible,
 * or PutRevoke frees the space.  Get: GetReplicaList (one round trip, which
 * also grants a read lease), a read from the replica in the own segment if
 * there is one, else from the first, and a lease check afterwards: a read
 * that finished after send time + lease TTL may have raced with a removal
 * and is thrown away (MC_ERR_LEASE_EXPIRED).  No call holds a lock around
 * an RPC or a transfer, so calls from many threads overlap.
 *
 * Threads: the caller's threads, the master connection's receiver, and a
 * heartbeat thread that pings the master every second and remounts the
 * segment when the master has forgotten this client (NEED_REMOUNT).
 * Locks: hb_lock guards the heartbeat's sleep; sess_lock the session tables.  None is held across a
 * call into another module.
 *
 * Ranged calls (get_into_ranges, the session calls) make every (buffer,
 * object offset, length) an object of its own whose replicas are copies of
 * the real ones moved by the offset, so one engine batch carries them all.
 * Sessions cache what the master said (a get session's replica and lease
 * deadline, a put session's replicas) in two trees; a ranged call takes a
 * use of each session it touches, and ending a put session waits until the
 * uses in flight are done before BatchPutEnd or BatchPutRevoke.
 */
#define MC_LOG_MODULE "store"
#include "mooncake/store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <search.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/master_conn.h"
#include "store/proto.h"
#include "te/engine.h" /* mc_te_local_device */

#define SEGMENT_ALIGN	 (16ull << 20) /* spec store.md 1.2: cachelib slab size */
#define DEFAULT_TENANT	 "default"
#define HEARTBEAT_MS	 1000
#define PING_FAILS_RESET 3
#define STACK_REQS	 16 /* transfer requests that need no allocation */

struct mc_store {
	bool ready;
	struct mc_master_conn *conn;
	struct mc_te *te;
	bool own_te;
	char name[256];	   /* segment name: the engine's local name */
	char host_id[256]; /* "" = unknown */
	char protocol[16];
	char tenant[256];
	struct mc_store_uuid client_id;
	bool local_memcpy; /* own-segment replicas by memcpy (MC_STORE_MEMCPY) */

	/* global segment */
	void *seg;
	uint64_t seg_size;
	size_t seg_map_len;
	bool seg_registered;
	bool seg_mounted;
	struct mc_store_uuid seg_id;

	/* sessions (spec store.md 1.11): tsearch trees of struct session by key */
	pthread_mutex_t sess_lock; /* the trees and every session's users/detached */
	pthread_cond_t sess_cond;  /* a waited-for session lost its last user */
	void *get_sessions;
	void *put_sessions;

	/* heartbeat */
	pthread_t hb;
	bool hb_started;
	bool hb_stop; /* under hb_lock */
	pthread_mutex_t hb_lock;
	pthread_cond_t hb_cond;
	atomic_bool ping_failed;
};

/* ---- small helpers ------------------------------------------------------------ */

static struct mc_store_uuid random_uuid(void)
{
	struct mc_store_uuid u = {0, 0};
	uint64_t v[2];
	if (getrandom(v, sizeof(v), 0) == (ssize_t)sizeof(v)) {
		u.first = v[0];
		u.second = v[1];
	} else {
		static atomic_uint_fast64_t counter;
		u.first = mc_now_ns() ^ ((uint64_t)getpid() << 32);
		u.second = atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull;
	}
	return u;
}

/* Anonymous, lazily touched, 16 MiB aligned mapping of size bytes. */
static mc_status map_region(uint64_t size, void **addr_out, size_t *len_out)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len = (size_t)((size + (uint64_t)page - 1) & ~((uint64_t)page - 1));
	size_t total = len + SEGMENT_ALIGN;
	uintptr_t p, a;
	void *m;

	if (size == 0 || size > SIZE_MAX - SEGMENT_ALIGN - (size_t)page)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "cannot map %" PRIu64 " bytes", size);
	m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (m == MAP_FAILED)
		return mc_set_error(MC_ERR_NOMEM, "mmap of %zu bytes failed: %s", total,
				    strerror(errno));
	p = (uintptr_t)m;
	a = (p + SEGMENT_ALIGN - 1) & ~(uintptr_t)(SEGMENT_ALIGN - 1);
	if (a > p)
		munmap(m, a - p);
	if (p + total > a + len)
		munmap((void *)(a + len), p + total - (a + len));
#ifdef MADV_HUGEPAGE
	madvise((void *)a, len, MADV_HUGEPAGE); /* best effort */
#endif
	*addr_out = (void *)a;
	*len_out = len;
	return MC_OK;
}

static bool is_own_segment(const struct mc_store *s, const struct mc_store_replica *r)
{
	return r->segment_name.len == strlen(s->name) &&
	       memcmp(r->segment_name.ptr, s->name, r->segment_name.len) == 0;
}

/* [addr, addr + len) lies in this client's mapped global segment. */
static bool in_own_segment(const struct mc_store *s, uint64_t addr, uint64_t len)
{
	uint64_t base = (uint64_t)(uintptr_t)s->seg;
	return s->seg && addr >= base && len <= s->seg_size && addr - base <= s->seg_size - len;
}

static struct mc_proto_str tenant_str(const struct mc_store *s)
{
	return mc_proto_str_c(s->tenant);
}

static mc_status check_ready(const struct mc_store *s)
{
	if (!s || !s->ready)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store client is not set up");
	return MC_OK;
}

static mc_status check_key(const char *key)
{
	if (!key || !*key)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "empty key");
	return MC_OK;
}

/* Translate the public config; preferred (room for n strings) is filled
 * from config->preferred_segments. */
static void make_config(const struct mc_store *s, const struct mc_store_config *cfg,
			struct mc_proto_str *preferred, struct mc_store_replicate_config *out)
{
	memset(out, 0, sizeof(*out));
	out->replica_num = 1;
	out->host_id = mc_proto_str_c(s->host_id);
	if (!cfg)
		return;
	out->replica_num = cfg->replica_num ? cfg->replica_num : 1;
	if (cfg->with_soft_pin) {
		out->soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
		if (cfg->soft_pin_ttl_ms) {
			out->soft_pin_ttl_ms.present = true;
			out->soft_pin_ttl_ms.value = cfg->soft_pin_ttl_ms;
		}
	}
	out->with_hard_pin = cfg->with_hard_pin;
	out->prefer_alloc_in_same_node = cfg->prefer_alloc_in_same_node;
	out->preferred_segment = mc_proto_str_c(cfg->preferred_segment);
	if (cfg->preferred_segments && cfg->n_preferred_segments) {
		for (size_t i = 0; i < cfg->n_preferred_segments; i++)
			preferred[i] = mc_proto_str_c(cfg->preferred_segments[i]);
		out->preferred_segments = preferred;
		out->n_preferred_segments = (uint32_t)cfg->n_preferred_segments;
	}
}

/* nkeys: the keys of the call, which group_ids must match one to one. */
static mc_status check_config(const struct mc_store_config *cfg, bool value_call, size_t nkeys)
{
	if (!cfg)
		return MC_OK;
	if (cfg->n_group_ids && (!cfg->group_ids || cfg->n_group_ids != nkeys))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bad group_ids count: %zu for %zu keys",
				    cfg->n_group_ids, nkeys);
	if (cfg->n_preferred_segments > 1024 ||
	    (cfg->n_preferred_segments && !cfg->preferred_segments))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bad preferred segment list");
	/* upstream: meant for the multi-buffer and tensor paths only, refused
	 * on the single-buffer calls (put, put_parts, put_batch, put_from) */
	if (value_call && cfg->prefer_alloc_in_same_node)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "prefer_alloc_in_same_node is not allowed on this call");
	return MC_OK;
}

/* The group of key i of a call: group_ids[i] when given, else group_id. */
static const char *group_of(const struct mc_store_config *cfg, size_t i)
{
	if (!cfg)
		return NULL;
	return cfg->n_group_ids ? cfg->group_ids[i] : cfg->group_id;
}

/* ---- transfers ------------------------------------------------------------------ */

/* One object's side of a transfer: its user buffers (scatter-gather) and
 * the replicas to write, or the one replica to read. */
struct obj_io {
	void *const *bufs;
	const size_t *lens;
	size_t nbufs;
	uint64_t len; /* bytes to move (read: the object size) */
	const struct mc_store_replica *reps;
	uint32_t nreps;
	mc_status status; /* in: MC_OK to take part; out: result */
};

/* Growable request list with a stack start. */
struct req_list {
	struct mc_xfer_req *v;
	uint32_t *owner; /* index of the obj_io each request serves */
	size_t n, cap;
	struct mc_xfer_req stack_v[STACK_REQS];
	uint32_t stack_owner[STACK_REQS];
};

static void req_list_init(struct req_list *l)
{
	l->v = l->stack_v;
	l->owner = l->stack_owner;
	l->n = 0;
	l->cap = STACK_REQS;
}

static void req_list_release(struct req_list *l)
{
	if (l->v != l->stack_v) {
		mc_free(l->v);
		mc_free(l->owner);
	}
}

static mc_status req_list_add(struct req_list *l, const struct mc_xfer_req *r, uint32_t owner)
{
	if (l->n == l->cap) {
		size_t ncap = l->cap * 2;
		struct mc_xfer_req *v = mc_calloc(ncap, sizeof(*v));
		uint32_t *o = mc_calloc(ncap, sizeof(*o));
		if (!v || !o) {
			mc_free(v);
			mc_free(o);
			return MC_ERR_NOMEM;
		}
		memcpy(v, l->v, l->n * sizeof(*v));
		memcpy(o, l->owner, l->n * sizeof(*o));
		req_list_release(l);
		l->v = v;
		l->owner = o;
		l->cap = ncap;
	}
	l->v[l->n] = *r;
	l->owner[l->n] = owner;
	l->n++;
	return MC_OK;
}

/* Copy between the user buffers of io and [addr, addr + io->len). */
static void local_copy(const struct obj_io *io, int opcode, char *addr)
{
	uint64_t off = 0;
	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		size_t n = (size_t)MC_MIN((uint64_t)io->lens[b], io->len - off);
		if (opcode == MC_OP_WRITE)
			memcpy(addr + off, io->bufs[b], n);
		else
			memcpy(io->bufs[b], addr + off, n);
		off += n;
	}
}

/* The user buffers of io are host memory.  Device memory (vLLM's KV
 * caches, te/devmem.h) must never be touched by memcpy: the engine moves
 * it through its device copies, even to or from this client's segment. */
static bool host_buffers(struct mc_store *s, const struct obj_io *io)
{
	uint64_t off = 0;
	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		uint64_t n = MC_MIN((uint64_t)io->lens[b], io->len - off);
		if (n && mc_te_local_device(s->te, io->bufs[b], n) >= 0)
			return false;
		off += n;
	}
	return true;
}

/* Queue the requests that move io to or from replica r. */
static mc_status queue_replica(struct mc_store *s, struct req_list *l, const struct obj_io *io,
			       uint32_t idx, int opcode, const struct mc_store_replica *r)
{
	struct mc_xfer_req req;
	mc_segment_id seg;
	uint64_t off = 0;
	mc_status rc;

	if (r->type != MC_STORE_REPLICA_MEMORY)
		return mc_set_error(MC_ERR_INVALID_REPLICA, "replica type %u is not memory",
				    r->type);
	if (s->local_memcpy && is_own_segment(s, r) && in_own_segment(s, r->address, io->len) &&
	    host_buffers(s, io)) {
		local_copy(io, opcode, (char *)(uintptr_t)r->address);
		return MC_OK;
	}
	/* anything else, own name included, goes through the engine, which
	 * checks the range against registered memory */
	rc = mc_te_open_segment(s->te, r->segment_name.ptr, &seg);
	if (rc != MC_OK)
		return rc;
	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		uint64_t n = MC_MIN((uint64_t)io->lens[b], io->len - off);
		if (!n)
			continue;
		req.opcode = opcode;
		req.source = io->bufs[b];
		req.target_id = seg;
		req.target_offset = r->address + off;
		req.length = n;
		rc = req_list_add(l, &req, idx);
		if (rc != MC_OK)
			return rc;
		off += n;
	}
	return MC_OK;
}

/*
 * Move every object in ios whose status is MC_OK: writes go to all its
 * replicas, reads come from reps[0].  Everything is submitted as one
 * engine batch so the transfers overlap.  Sets each status.
 */
static void run_transfers(struct mc_store *s, struct obj_io *ios, size_t n, int opcode)
{
	struct req_list l;
	mc_batch_id bid;
	mc_status rc;

	req_list_init(&l);
	for (size_t i = 0; i < n; i++) {
		struct obj_io *io = &ios[i];
		size_t first = l.n;
		if (io->status != MC_OK)
			continue;
		for (uint32_t r = 0; r < io->nreps && io->status == MC_OK; r++)
			io->status = queue_replica(s, &l, io, (uint32_t)i, opcode, &io->reps[r]);
		if (io->status != MC_OK)
			l.n = first; /* drop what was queued for it */
	}
	if (l.n == 0)
		goto out;
	rc = mc_te_batch_new(s->te, l.n, &bid);
	if (rc == MC_OK) {
		rc = mc_te_submit(s->te, bid, l.v, l.n);
		if (rc != MC_OK)
			mc_te_batch_free(s->te, bid);
	}
	if (rc != MC_OK) {
		for (size_t k = 0; k < l.n; k++)
			ios[l.owner[k]].status = MC_ERR_TRANSFER_FAIL;
		goto out;
	}
	rc = mc_te_batch_wait(s->te, bid, -1, NULL);
	if (rc != MC_OK) {
		/* find which objects failed */
		for (size_t k = 0; k < l.n; k++) {
			struct mc_xfer_status st;
			if (mc_te_task_status(s->te, bid, k, &st) != MC_OK ||
			    st.state != MC_XFER_COMPLETED)
				ios[l.owner[k]].status = MC_ERR_TRANSFER_FAIL;
		}
	}
	mc_te_batch_free(s->te, bid);
out:
	req_list_release(&l);
}

/* ---- put ------------------------------------------------------------------------ */

static mc_status put_one(struct mc_store *s, const char *key, void *const *bufs, const size_t *lens,
			 size_t nbufs, uint64_t len, const struct mc_store_config *cfg, bool upsert)
{
	struct mc_proto_str preferred_stack[8], *preferred = preferred_stack;
	struct mc_store_put_start_req req;
	struct mc_store_msg resp;
	struct obj_io io;
	mc_status rc;

	if (cfg && cfg->n_preferred_segments > MC_ARRAY_SIZE(preferred_stack)) {
		preferred = mc_calloc(cfg->n_preferred_segments, sizeof(*preferred));
		if (!preferred)
			return MC_ERR_NOMEM;
	}
	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	req.tenant = tenant_str(s);
	req.key = mc_proto_str_c(key);
	req.value_len = len;
	req.group_id = mc_proto_str_c(group_of(cfg, 0));
	make_config(s, cfg, preferred, &req.config);
	rc = mc_master_conn_call(s->conn, upsert ? MC_STORE_UPSERT_START : MC_STORE_PUT_START, &req,
				 &resp);
	if (preferred != preferred_stack)
		mc_free(preferred);
	if (rc == MC_ERR_OBJECT_ALREADY_EXISTS && !upsert)
		return MC_OK; /* insert-if-absent: upstream reports success */
	if (rc != MC_OK)
		return rc;

	memset(&io, 0, sizeof(io));
	io.bufs = bufs;
	io.lens = lens;
	io.nbufs = nbufs;
	io.len = len;
	io.reps = resp.body.put_start_resp.replicas;
	io.nreps = resp.body.put_start_resp.n_replicas;
	io.status = io.nreps ? MC_OK : mc_set_error(MC_ERR_INVALID_REPLICA, "no replica allocated");
	if (io.status == MC_OK)
		run_transfers(s, &io, 1, MC_OP_WRITE);
	mc_store_msg_release(&resp);

	if (io.status == MC_OK) {
		struct mc_store_put_end_req end = {
			.client_id = s->client_id,
			.tenant = tenant_str(s),
			.replica_type = MC_STORE_REPLICA_ALL,
			.key = mc_proto_str_c(key),
		};
		rc = mc_master_conn_call(s->conn, upsert ? MC_STORE_UPSERT_END : MC_STORE_PUT_END,
					 &end, &resp);
		if (rc == MC_OK)
			mc_store_msg_release(&resp);
		return rc;
	} else {
		struct mc_store_put_revoke_req rev = {
			.client_id = s->client_id,
			.tenant = tenant_str(s),
			.replica_type = MC_STORE_REPLICA_ALL,
			.key = mc_proto_str_c(key),
		};
		char why[400];
		snprintf(why, sizeof(why), "%s", mc_last_error());
		if (mc_master_conn_call(s->conn,
					upsert ? MC_STORE_UPSERT_REVOKE : MC_STORE_PUT_REVOKE, &rev,
					&resp) == MC_OK)
			mc_store_msg_release(&resp);
		else
			mc_warn("revoke of %s failed: %s", key, mc_last_error());
		return mc_set_error(io.status, "put %s: %s", key, why);
	}
}

/*
 * The batch put path: BatchPutStart for every key with status MC_OK in
 * results, transfers of all of them in one engine batch, then BatchPutEnd
 * for the ones that made it and BatchPutRevoke for the rest.
 */
/*
 * BatchPutStart (BatchUpsertStart when upsert) for keys[sent[j]], j < nsent,
 * of totals[sent[j]] bytes.  On MC_OK resp holds one item per sent key, in
 * order.
 */
static mc_status send_put_start(struct mc_store *s, const char *const *keys, const uint64_t *totals,
				const uint32_t *sent, uint32_t nsent,
				const struct mc_store_config *cfg, bool upsert,
				struct mc_store_msg *resp)
{
	struct mc_proto_str preferred_stack[8], *preferred = preferred_stack;
	struct mc_store_batch_put_start_req req;
	struct mc_store_put_item *items;
	mc_status rc;

	items = mc_calloc(nsent ? nsent : 1, sizeof(*items));
	if (cfg && cfg->n_preferred_segments > MC_ARRAY_SIZE(preferred_stack))
		preferred = mc_calloc(cfg->n_preferred_segments, sizeof(*preferred));
	if (!items || !preferred) {
		rc = MC_ERR_NOMEM;
		goto out;
	}
	for (uint32_t j = 0; j < nsent; j++) {
		items[j].key = mc_proto_str_c(keys[sent[j]]);
		items[j].value_len = totals[sent[j]];
		items[j].group_id = mc_proto_str_c(group_of(cfg, sent[j]));
	}
	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	req.tenant = tenant_str(s);
	make_config(s, cfg, preferred, &req.config);
	req.n_items = nsent;
	req.items = items;
	rc = mc_master_conn_call(s->conn,
				 upsert ? MC_STORE_BATCH_UPSERT_START : MC_STORE_BATCH_PUT_START,
				 &req, resp);
	if (rc == MC_OK && resp->body.batch_put_start_resp.n_items != nsent) {
		uint32_t got = resp->body.batch_put_start_resp.n_items;
		mc_store_msg_release(resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "master answered %u of %u items", got, nsent);
	}
out:
	if (preferred && preferred != preferred_stack)
		mc_free(preferred);
	mc_free(items);
	return rc;
}

/* BatchPutRevoke (BatchUpsertRevoke) of n keys; logs a failure. */
static mc_status send_put_revoke(struct mc_store *s, struct mc_proto_str *keys, uint32_t n,
				 bool upsert, struct mc_store_msg *resp)
{
	struct mc_store_batch_put_revoke_req rev = {
		.client_id = s->client_id,
		.tenant = tenant_str(s),
		.replica_type = MC_STORE_REPLICA_ALL,
		.n_keys = n,
		.keys = keys,
	};
	mc_status rc = mc_master_conn_call(
		s->conn, upsert ? MC_STORE_BATCH_UPSERT_REVOKE : MC_STORE_BATCH_PUT_REVOKE, &rev,
		resp);
	if (rc != MC_OK)
		mc_warn("batch revoke failed: %s", mc_last_error());
	return rc;
}

static void put_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
		     const size_t *const *lens, const size_t *nbufs, const uint64_t *totals,
		     size_t n, const struct mc_store_config *cfg, bool upsert, mc_status *results)
{
	struct mc_store_object_meta *metas = NULL;
	struct mc_proto_str *revoke_keys = NULL;
	uint32_t *sent = NULL;	    /* item index -> key index */
	uint32_t *end_owner = NULL; /* PutEnd item -> key index */
	struct obj_io *ios = NULL;
	struct mc_store_msg resp;
	bool have_resp = false;
	uint32_t nsent = 0, nend = 0, nrev = 0;
	mc_status rc;

	sent = mc_calloc(n, sizeof(*sent));
	end_owner = mc_calloc(n, sizeof(*end_owner));
	ios = mc_calloc(n, sizeof(*ios));
	metas = mc_calloc(n, sizeof(*metas));
	revoke_keys = mc_calloc(n, sizeof(*revoke_keys));
	if (!sent || !end_owner || !ios || !metas || !revoke_keys) {
		rc = MC_ERR_NOMEM;
		goto fail_all;
	}
	for (size_t i = 0; i < n; i++)
		if (results[i] == MC_OK)
			sent[nsent++] = (uint32_t)i;
	if (nsent == 0)
		goto out;
	rc = send_put_start(s, keys, totals, sent, nsent, cfg, upsert, &resp);
	if (rc != MC_OK)
		goto fail_all;
	have_resp = true;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_put_start_item *it = &resp.body.batch_put_start_resp.items[j];
		uint32_t i = sent[j];
		struct obj_io *io = &ios[j];
		io->bufs = bufs[i];
		io->lens = lens[i];
		io->nbufs = nbufs[i];
		io->len = totals[i];
		io->reps = it->replicas;
		io->nreps = it->n_replicas;
		io->status = (mc_status)it->status;
		if (io->status == MC_OK && io->nreps == 0)
			io->status = MC_ERR_INVALID_REPLICA;
	}
	run_transfers(s, ios, nsent, MC_OP_WRITE);

	for (uint32_t j = 0; j < nsent; j++) {
		int32_t st = resp.body.batch_put_start_resp.items[j].status;
		uint32_t i = sent[j];
		if (st == MC_ERR_OBJECT_ALREADY_EXISTS && !upsert) {
			results[i] = MC_OK;
		} else if (st != MC_OK) {
			results[i] = (mc_status)st;
		} else if (ios[j].status == MC_OK) {
			metas[nend].key = mc_proto_str_c(keys[i]);
			end_owner[nend++] = i;
			results[i] = MC_OK;
		} else {
			revoke_keys[nrev++] = mc_proto_str_c(keys[i]);
			results[i] = ios[j].status;
		}
	}
	mc_store_msg_release(&resp);
	have_resp = false;

	if (nend) {
		struct mc_store_batch_put_end_req end = {
			.client_id = s->client_id,
			.tenant = tenant_str(s),
			.replica_type = MC_STORE_REPLICA_ALL,
			.n_items = nend,
			.items = metas,
		};
		rc = mc_master_conn_call(
			s->conn, upsert ? MC_STORE_BATCH_UPSERT_END : MC_STORE_BATCH_PUT_END, &end,
			&resp);
		/* map the per-key answers back, in order */
		for (uint32_t e = 0; e < nend; e++) {
			uint32_t i = end_owner[e];
			if (rc != MC_OK)
				results[i] = rc;
			else if (e < resp.body.batch_status_resp.n_items)
				results[i] = (mc_status)resp.body.batch_status_resp.statuses[e];
		}
		if (rc == MC_OK)
			mc_store_msg_release(&resp);
	}
	if (nrev && send_put_revoke(s, revoke_keys, nrev, upsert, &resp) == MC_OK)
		mc_store_msg_release(&resp);
	goto out;
fail_all:
	for (size_t i = 0; i < n; i++)
		if (results[i] == MC_OK)
			results[i] = rc;
	if (have_resp)
		mc_store_msg_release(&resp);
out:
	mc_free(sent);
	mc_free(end_owner);
	mc_free(ios);
	mc_free(metas);
	mc_free(revoke_keys);
}

static mc_status first_failure(const mc_status *results, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (results[i] != MC_OK)
			return results[i];
	return MC_OK;
}

/* ---- get ------------------------------------------------------------------------- */

/* The replica to read: one in this client's own segment, else the first
 * memory replica; NULL if none is readable here. */
static const struct mc_store_replica *choose_replica(const struct mc_store *s,
						     const struct mc_store_replica_list *l)
{
	const struct mc_store_replica *first = NULL;
	for (uint32_t i = 0; i < l->n_replicas; i++) {
		const struct mc_store_replica *r = &l->replicas[i];
		if (r->type != MC_STORE_REPLICA_MEMORY)
			continue;
		if (is_own_segment(s, r))
			return r;
		if (!first)
			first = r;
	}
	return first;
}

static mc_status get_replicas(struct mc_store *s, const char *key, struct mc_store_msg *resp)
{
	struct mc_store_key_req req = {tenant_str(s), mc_proto_str_c(key)};
	return mc_master_conn_call(s->conn, MC_STORE_GET_REPLICA_LIST, &req, resp);
}

/* Read key into bufs (capacity cap in all), or, with alloc, into one
 * buffer alloc(ctx, size) returns once the size is known; returns the size
 * or a status. */
static int64_t get_one(struct mc_store *s, const char *key, void *const *bufs, const size_t *lens,
		       size_t nbufs, uint64_t cap, mc_store_alloc_fn alloc, void *ctx)
{
	struct mc_store_msg resp;
	const struct mc_store_replica *r;
	struct obj_io io;
	uint64_t t0 = mc_now_ms(), ttl;
	void *abuf[1];
	size_t alen[1];
	mc_status rc;

	rc = get_replicas(s, key, &resp);
	if (rc != MC_OK)
		return rc;
	ttl = resp.body.replica_list.lease_ttl_ms;
	r = choose_replica(s, &resp.body.replica_list);
	if (!r) {
		rc = mc_set_error(MC_ERR_INVALID_REPLICA, "%s has no memory replica", key);
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
	run_transfers(s, &io, 1, MC_OP_READ);
	rc = io.status;
	if (rc == MC_OK && mc_now_ms() > t0 + ttl)
		rc = mc_set_error(MC_ERR_LEASE_EXPIRED,
				  "read of %s outlived its %" PRIu64 " ms lease", key, ttl);
	if (rc == MC_OK) {
		int64_t size = (int64_t)r->size;
		mc_store_msg_release(&resp);
		return size;
	}
out:
	mc_store_msg_release(&resp);
	return rc;
}

/* One BatchGetReplicaList for keys[0..n); an answer that does not hold
 * exactly n items is released and refused. */
static mc_status batch_replica_lists(struct mc_store *s, struct mc_proto_str *keys, uint32_t n,
				     struct mc_store_msg *resp)
{
	struct mc_store_keys_req req = {.tenant = tenant_str(s), .n_keys = n, .keys = keys};
	mc_status rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_GET_REPLICA_LIST, &req, resp);
	if (rc != MC_OK)
		return rc;
	if (resp->body.batch_replica_list.n_items != n) {
		rc = mc_set_error(MC_ERR_PROTOCOL, "master answered %u of %u keys",
				  resp->body.batch_replica_list.n_items, n);
		mc_store_msg_release(resp);
	}
	return rc;
}

/*
 * Batch read: one BatchGetReplicaList, one engine batch, per-key lease
 * checks, for every key whose results[] entry is MC_OK on entry.  Object i
 * lands in bufs[i] (nbufs[i] buffers of lens[i][..] bytes), or, when alloc
 * is given, in what alloc(actx, i, size) returned once its size was known
 * (the caller's to release, read or not; mc_store_batch_get_alloc).
 */
static void get_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
		     const size_t *const *lens, const size_t *nbufs, size_t n,
		     mc_store_batch_alloc_fn alloc, void *actx, int64_t *results)
{
	struct mc_proto_str *kv = NULL;
	struct obj_io *ios = NULL;
	uint32_t *sent = NULL;
	void **alloc_bufs = NULL; /* per sent key: what alloc returned */
	size_t *alloc_lens = NULL;
	struct mc_store_msg resp;
	uint32_t nsent = 0;
	uint64_t t0;
	mc_status rc;

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
	t0 = mc_now_ms();
	rc = batch_replica_lists(s, kv, nsent, &resp);
	if (rc != MC_OK)
		goto fail_all;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_replica_list_item *it =
			&resp.body.batch_replica_list.items[j];
		uint32_t i = sent[j];
		struct obj_io *io = &ios[j];
		const struct mc_store_replica *r;
		uint64_t cap = 0;

		io->status = (mc_status)it->status;
		if (io->status != MC_OK)
			continue;
		r = choose_replica(s, &it->list);
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
	}
	run_transfers(s, ios, nsent, MC_OP_READ);
	for (uint32_t j = 0; j < nsent; j++) {
		uint32_t i = sent[j];
		uint64_t ttl = resp.body.batch_replica_list.items[j].list.lease_ttl_ms;
		if (ios[j].status != MC_OK)
			results[i] = ios[j].status;
		else if (mc_now_ms() > t0 + ttl)
			results[i] = MC_ERR_LEASE_EXPIRED;
		else
			results[i] = (int64_t)ios[j].len;
	}
	mc_store_msg_release(&resp);
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

/* ---- ranged transfers and sessions: shared pieces ----------------------------------- */

/* Object ranges as objects of their own (see the essay at the top). */
struct range_set {
	struct obj_io *ios;
	struct mc_store_replica *reps; /* moved copies, nreps per io */
	void **bufs;		       /* one per io */
	size_t *lens;		       /* one per io */
	size_t n, cap;
	size_t nreps, reps_cap;
};

static void range_set_release(struct range_set *rs)
{
	mc_free(rs->ios);
	mc_free(rs->reps);
	mc_free(rs->bufs);
	mc_free(rs->lens);
	memset(rs, 0, sizeof(*rs));
}

/* Room for nios ranges with nreps replica copies in all. */
static mc_status range_set_init(struct range_set *rs, size_t nios, size_t nreps)
{
	memset(rs, 0, sizeof(*rs));
	rs->ios = mc_calloc(nios ? nios : 1, sizeof(*rs->ios));
	rs->reps = mc_calloc(nreps ? nreps : 1, sizeof(*rs->reps));
	rs->bufs = mc_calloc(nios ? nios : 1, sizeof(*rs->bufs));
	rs->lens = mc_calloc(nios ? nios : 1, sizeof(*rs->lens));
	if (!rs->ios || !rs->reps || !rs->bufs || !rs->lens) {
		range_set_release(rs);
		return MC_ERR_NOMEM;
	}
	rs->cap = nios;
	rs->reps_cap = nreps;
	return MC_OK;
}

/* Add bytes [off, off + len) of an object with replicas reps[0..nreps),
 * moved to or from buf (a read uses the first replica only); returns the
 * range's index in rs->ios. */
static size_t range_set_add(struct range_set *rs, void *buf, uint64_t off, uint64_t len,
			    const struct mc_store_replica *reps, uint32_t nreps)
{
	size_t i = rs->n;
	struct obj_io *io = &rs->ios[i];
	struct mc_store_replica *r = &rs->reps[rs->nreps];

	mc_assert(i < rs->cap && rs->nreps + nreps <= rs->reps_cap);
	for (uint32_t k = 0; k < nreps; k++) {
		r[k] = reps[k];
		r[k].address += off;
		r[k].size = len;
	}
	rs->n++;
	rs->nreps += nreps;
	rs->bufs[i] = buf;
	rs->lens[i] = (size_t)len;
	io->bufs = &rs->bufs[i];
	io->lens = &rs->lens[i];
	io->nbufs = 1;
	io->len = len;
	io->reps = r;
	io->nreps = len ? nreps : 0; /* an empty range moves nothing */
	io->status = MC_OK;
	return i;
}

/* [off, off + len) lies inside [0, size). */
static bool range_inside(uint64_t off, uint64_t len, uint64_t size)
{
	return len <= size && off <= size - len;
}

/* One end of a session: what the master said about a key, kept by the
 * client between calls. */
struct session {
	const char *key;	       /* in blob; the trees' order */
	uint64_t size;		       /* object bytes */
	uint64_t deadline_ms;	       /* get: the lease's end (mc_now_ms) */
	struct mc_store_replica *reps; /* strings in blob */
	uint32_t nreps;		       /* get: 1; put: every replica */
	unsigned users;		       /* ranged calls using it (sess_lock) */
	bool detached;		       /* out of its tree (sess_lock) */
	bool awaited;		       /* detached: an ender waits for users == 0 */
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

/* close: revoke the open put sessions (best effort) and drop every
 * session.  No other call runs (mc_store_close's contract). */
static void sessions_drop_all(struct mc_store *s)
{
	struct keys_out o = {NULL, 0};
	uint32_t n = 0;
	struct mc_store_msg resp;

	twalk_r(s->put_sessions, count_node, &n);
	if (n && s->conn && (o.v = mc_calloc(n, sizeof(*o.v)))) {
		twalk_r(s->put_sessions, collect_key, &o);
		if (send_put_revoke(s, o.v, o.n, false, &resp) == MC_OK)
			mc_store_msg_release(&resp);
		mc_free(o.v);
	}
	tdestroy(s->put_sessions, session_free);
	tdestroy(s->get_sessions, session_free);
	s->put_sessions = s->get_sessions = NULL;
}

/* ---- heartbeat ------------------------------------------------------------------- */

static mc_status remount(struct mc_store *s)
{
	struct mc_store_segment seg;
	struct mc_store_remount_req req = {s->client_id, 0, NULL};
	struct mc_store_msg resp;
	mc_status rc;

	if (s->seg_mounted) {
		memset(&seg, 0, sizeof(seg));
		seg.id = s->seg_id;
		seg.name = mc_proto_str_c(s->name);
		seg.base = (uint64_t)(uintptr_t)s->seg;
		seg.size = s->seg_size;
		seg.te_endpoint = mc_proto_str_c(s->name);
		seg.protocol = mc_proto_str_c(s->protocol);
		seg.host_id = mc_proto_str_c(s->host_id);
		req.n_segments = 1;
		req.segments = &seg;
	}
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOUNT_SEGMENT, &req, &resp);
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	return rc;
}

static void heartbeat_once(struct mc_store *s, unsigned *fails)
{
	struct mc_store_client_req req = {s->client_id};
	struct mc_store_msg resp;
	mc_status rc = mc_master_conn_call(s->conn, MC_STORE_PING, &req, &resp);

	if (rc != MC_OK) {
		atomic_store(&s->ping_failed, true);
		mc_debug("ping failed: %s", mc_last_error());
		if (++*fails >= PING_FAILS_RESET) {
			mc_master_conn_reset(s->conn);
			*fails = 0;
		}
		return;
	}
	*fails = 0;
	atomic_store(&s->ping_failed, false);
	if (resp.body.ping_resp.client_status == MC_STORE_CLIENT_NEED_REMOUNT) {
		rc = remount(s);
		if (rc != MC_OK)
			mc_warn("remount of segment %s failed: %s", s->name, mc_last_error());
		else
			mc_info("remounted segment %s", s->name);
	}
	mc_store_msg_release(&resp);
}

static void *heartbeat_main(void *arg)
{
	struct mc_store *s = arg;
	unsigned fails = 0;
	pthread_mutex_lock(&s->hb_lock);
	while (!s->hb_stop) {
		struct timespec ts;
		uint64_t until;
		pthread_mutex_unlock(&s->hb_lock);
		heartbeat_once(s, &fails);
		until = mc_now_ms() + HEARTBEAT_MS;
		ts.tv_sec = (time_t)(until / 1000);
		ts.tv_nsec = (long)(until % 1000) * 1000000L;
		pthread_mutex_lock(&s->hb_lock);
		while (!s->hb_stop && mc_now_ms() < until)
			pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts);
	}
	pthread_mutex_unlock(&s->hb_lock);
	return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------- */

mc_status mc_store_new(struct mc_store **out)
{
	struct mc_store *s;
	pthread_condattr_t a;
	if (!out)
		return MC_ERR_INVALID_PARAMS;
	s = mc_calloc(1, sizeof(*s));
	if (!s)
		return MC_ERR_NOMEM;
	pthread_mutex_init(&s->hb_lock, NULL);
	pthread_mutex_init(&s->sess_lock, NULL);
	pthread_cond_init(&s->sess_cond, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&s->hb_cond, &a);
	pthread_condattr_destroy(&a);
	*out = s;
	return MC_OK;
}

void mc_store_free(struct mc_store *s)
{
	if (!s)
		return;
	mc_store_close(s);
	pthread_mutex_destroy(&s->hb_lock);
	pthread_cond_destroy(&s->hb_cond);
	pthread_mutex_destroy(&s->sess_lock);
	pthread_cond_destroy(&s->sess_cond);
	mc_free(s);
}

/* Undo whatever setup got done; safe on a partly set up client. */
static void teardown(struct mc_store *s)
{
	struct mc_store_msg resp;

	if (s->hb_started) {
		pthread_mutex_lock(&s->hb_lock);
		s->hb_stop = true;
		pthread_cond_broadcast(&s->hb_cond);
		pthread_mutex_unlock(&s->hb_lock);
		pthread_join(s->hb, NULL);
		s->hb_started = false;
	}
	sessions_drop_all(s);
	if (s->seg_mounted) {
		struct mc_store_unmount_req req = {s->client_id, s->seg_id};
		if (mc_master_conn_call(s->conn, MC_STORE_UNMOUNT_SEGMENT, &req, &resp) == MC_OK)
			mc_store_msg_release(&resp);
		else
			mc_warn("unmount of segment %s failed: %s", s->name, mc_last_error());
		s->seg_mounted = false;
	}
	if (s->seg_registered)
		mc_te_deregister(s->te, s->seg);
	s->seg_registered = false;
	if (s->seg)
		munmap(s->seg, s->seg_map_len);
	s->seg = NULL;
	s->seg_size = 0;
	mc_master_conn_free(s->conn);
	s->conn = NULL;
	if (s->own_te)
		mc_te_free(s->te);
	s->te = NULL;
	s->own_te = false;
	s->name[0] = '\0';
	s->ready = false;
}

static bool is_loopback_host(const char *h)
{
	return !*h || strcmp(h, "localhost") == 0 || strcmp(h, "127.0.0.1") == 0 ||
	       strcmp(h, "0.0.0.0") == 0 || strcmp(h, "::1") == 0 || strcmp(h, "::") == 0;
}

static int64_t env_int(const char *name, int64_t def, int64_t lo, int64_t hi)
{
	const char *v = getenv(name);
	char *end;
	long long x;
	if (!v || !*v)
		return def;
	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno || *end || x < lo || x > hi) {
		mc_warn("ignoring %s=%s", name, v);
		return def;
	}
	return x;
}

/* Unset, empty or "auto" = def; otherwise upstream's boolean spellings. */
static bool env_bool(const char *name, bool def)
{
	const char *v = getenv(name);
	if (!v || !*v || strcasecmp(v, "auto") == 0)
		return def;
	if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
	    !strcasecmp(v, "off") || !strcasecmp(v, "disable"))
		return false;
	return true;
}

/* Create the engine named after local_hostname, choosing a port when none is given. */
static mc_status create_engine(struct mc_store *s, const struct mc_store_params *p)
{
	struct mc_te_params tp;
	char host[256];
	uint16_t port = 0;
	mc_status rc = MC_ERR_INVALID_PARAMS;
	const char *lh = p->local_hostname && *p->local_hostname ? p->local_hostname : "localhost";

	if (!mc_sock_split_hostport(lh, host, sizeof(host), &port, 0) || !host[0])
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bad local_hostname %s", lh);
	memset(&tp, 0, sizeof(tp));
	tp.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL |
			MC_TE_PARAM_DEVICES;
	tp.metadata_uri = p->metadata_server;
	tp.protocol = s->protocol;
	tp.devices = p->rdma_devices; /* TCP: two or more NICs become paths */
	if (strcmp(host, "0.0.0.0") != 0 && strcmp(host, "::") != 0) {
		tp.field_mask |= MC_TE_PARAM_HOST;
		tp.host = host;
	}
	if (port) {
		/* the name's port becomes the engine's RPC port when it is free */
		tp.local_name = lh;
		tp.field_mask |= MC_TE_PARAM_RPC_PORT;
		tp.rpc_port = port;
		rc = mc_te_new(&tp, &s->te);
		if (rc == MC_ERR_SOCKET) {
			tp.field_mask &= ~(uint64_t)MC_TE_PARAM_RPC_PORT;
			rc = mc_te_new(&tp, &s->te);
		}
	} else {
		int64_t lo = env_int("MC_STORE_CLIENT_MIN_PORT", 12300, 1024, 65535);
		int64_t hi = env_int("MC_STORE_CLIENT_MAX_PORT", 14300, 1024, 65535);
		int64_t tries = env_int("MC_STORE_CLIENT_SETUP_RETRIES", 20, 1, 1000);
		char name[300];
		uint64_t rnd;
		if (hi < lo) {
			lo = 12300;
			hi = 14300;
		}
		for (int64_t t = 0; t < tries; t++) {
			if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
				rnd = mc_now_ns();
			port = (uint16_t)(lo + (int64_t)(rnd % (uint64_t)(hi - lo + 1)));
			snprintf(name, sizeof(name), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
				 port);
			tp.local_name = name;
			tp.field_mask |= MC_TE_PARAM_RPC_PORT;
			tp.rpc_port = port;
			rc = mc_te_new(&tp, &s->te);
			if (rc == MC_OK)
				break;
			mc_debug("engine on port %u: %s; retrying", port, mc_last_error());
		}
	}
	if (rc != MC_OK)
		return rc;
	s->own_te = true;
	return MC_OK;
}

static mc_status mount_segment(struct mc_store *s)
{
	struct mc_store_mount_req req;
	struct mc_store_msg resp;
	mc_status rc;

	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	req.segment.id = s->seg_id;
	req.segment.name = mc_proto_str_c(s->name);
	req.segment.base = (uint64_t)(uintptr_t)s->seg;
	req.segment.size = s->seg_size;
	req.segment.te_endpoint = mc_proto_str_c(s->name);
	req.segment.protocol = mc_proto_str_c(s->protocol);
	req.segment.host_id = mc_proto_str_c(s->host_id);
	rc = mc_master_conn_call(s->conn, MC_STORE_MOUNT_SEGMENT, &req, &resp);
	if (rc != MC_OK)
		return rc;
	mc_store_msg_release(&resp);
	s->seg_mounted = true;
	return MC_OK;
}

mc_status mc_store_setup(struct mc_store *s, const struct mc_store_params *p)
{
	char host[256], why[400];
	uint16_t port;
	mc_status rc;

	if (!s || !p)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup: NULL argument");
	if (s->ready)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store client is already set up");
	if (!p->engine && (!p->metadata_server || !*p->metadata_server))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup: no metadata_server");
	if (p->local_buffer_size > (1ull << 40))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "local_buffer_size above 1 TiB");
	snprintf(s->protocol, sizeof(s->protocol), "%s",
		 p->protocol && *p->protocol ? p->protocol : "tcp");
	snprintf(s->tenant, sizeof(s->tenant), "%s",
		 p->tenant_id && *p->tenant_id ? p->tenant_id : DEFAULT_TENANT);
	s->client_id = random_uuid();
	s->local_memcpy = env_bool("MC_STORE_MEMCPY", true);
	s->hb_stop = false;
	atomic_store(&s->ping_failed, false);

	rc = mc_master_conn_new(p->master_server_addr, &s->conn);
	if (rc != MC_OK)
		goto err;
	if (p->engine) {
		s->te = p->engine;
		s->own_te = false;
	} else {
		rc = create_engine(s, p);
		if (rc != MC_OK)
			goto err;
	}
	snprintf(s->name, sizeof(s->name), "%s", mc_te_local_name(s->te));
	if (!mc_sock_split_hostport(s->name, host, sizeof(host), &port, 0) ||
	    is_loopback_host(host))
		host[0] = '\0';
	snprintf(s->host_id, sizeof(s->host_id), "%s", host);

	if (p->global_segment_size) {
		rc = map_region(p->global_segment_size, &s->seg, &s->seg_map_len);
		if (rc != MC_OK)
			goto err;
		s->seg_size = p->global_segment_size;
		rc = mc_te_register(s->te, s->seg, s->seg_size, NULL, true);
		if (rc != MC_OK)
			goto err;
		s->seg_registered = true;
		s->seg_id = random_uuid();
		rc = mount_segment(s);
		if (rc != MC_OK)
			goto err;
	}
	if (pthread_create(&s->hb, NULL, heartbeat_main, s) != 0) {
		rc = mc_set_error(MC_ERR_INTERNAL, "cannot start the heartbeat thread");
		goto err;
	}
	s->hb_started = true;
	s->ready = true;
	mc_info("store client %s set up: segment %" PRIu64 " bytes, master %s", s->name,
		s->seg_size, p->master_server_addr ? p->master_server_addr : "127.0.0.1:50051");
	return MC_OK;
err:
	snprintf(why, sizeof(why), "%s", mc_last_error());
	teardown(s);
	mc_set_error(rc, "store setup failed: %s", why);
	return rc;
}

mc_status mc_store_close(struct mc_store *s)
{
	if (!s || !s->ready)
		return MC_OK;
	teardown(s);
	return MC_OK;
}

int mc_store_health_check(struct mc_store *s)
{
	if (!s || !s->ready)
		return 1;
	return atomic_load(&s->ping_failed) ? 2 : 0;
}

const char *mc_store_hostname(const struct mc_store *s)
{
	return s ? s->name : "";
}

struct mc_te *mc_store_engine(const struct mc_store *s)
{
	return s ? s->te : NULL;
}

/* ---- value calls ------------------------------------------------------------------ */

/*
 * put/put_parts/upsert: the value's parts go to the engine as they are, one
 * request per part and replica, without a copy through the local buffer.
 * The engine's transports read the initiator's memory wherever it is (TCP
 * sends from it, the same-host and local paths copy from it); a transport
 * that can only send registered memory stages unregistered memory itself,
 * as te/stage.c does for device memory.  The call is synchronous, so the
 * parts need to stay valid only while it runs.
 */
static mc_status put_value(struct mc_store *s, const char *key, const void *const *parts,
			   const size_t *lens, size_t nparts, const struct mc_store_config *cfg,
			   bool upsert)
{
	uint64_t len = 0;
	mc_status rc;

	rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc == MC_OK)
		rc = check_config(cfg, true, 1);
	if (rc != MC_OK)
		return rc;
	for (size_t i = 0; i < nparts; i++) {
		if (lens[i] && !parts[i])
			return mc_set_error(MC_ERR_INVALID_PARAMS, "NULL part with a length");
		len += lens[i];
	}
	if (len == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put of an empty value");
	return put_one(s, key, (void *const *)(uintptr_t)parts, lens, nparts, len, cfg, upsert);
}

mc_status mc_store_put(struct mc_store *s, const char *key, const void *value, size_t len,
		       const struct mc_store_config *config)
{
	return put_value(s, key, &value, &len, 1, config, false);
}

mc_status mc_store_put_parts(struct mc_store *s, const char *key, const void *const *parts,
			     const size_t *lens, size_t nparts,
			     const struct mc_store_config *config)
{
	if ((!parts || !lens) && nparts)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put_parts: NULL arrays");
	return put_value(s, key, parts, lens, nparts, config, false);
}

mc_status mc_store_upsert(struct mc_store *s, const char *key, const void *value, size_t len,
			  const struct mc_store_config *config)
{
	return put_value(s, key, &value, &len, 1, config, true);
}

mc_status mc_store_upsert_parts(struct mc_store *s, const char *key, const void *const *parts,
				const size_t *lens, size_t nparts,
				const struct mc_store_config *config)
{
	if ((!parts || !lens) && nparts)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "upsert_parts: NULL arrays");
	return put_value(s, key, parts, lens, nparts, config, true);
}

/* put_batch/upsert_batch: as put_value, every value straight from the
 * caller's memory, all keys in one BatchPutStart, one engine batch and one
 * BatchPutEnd. */
static mc_status put_batch_values(struct mc_store *s, const char *const *keys,
				  const void *const *values, const size_t *lens, size_t n,
				  const struct mc_store_config *config, bool upsert,
				  mc_status *results)
{
	mc_status *res = results, rc;
	void *const **bufs = NULL;
	const size_t **blens = NULL;
	size_t *nbufs = NULL;
	uint64_t *totals = NULL;

	rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_config(config, true, n);
	if (rc == MC_OK && n && (!keys || !values || !lens))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "put_batch: NULL arrays");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	if (!res)
		res = mc_calloc(n, sizeof(*res));
	bufs = mc_calloc(n, sizeof(*bufs));
	blens = mc_calloc(n, sizeof(*blens));
	nbufs = mc_calloc(n, sizeof(*nbufs));
	totals = mc_calloc(n, sizeof(*totals));
	if (!res || !bufs || !blens || !nbufs || !totals) {
		rc = MC_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		res[i] = check_key(keys[i]);
		if (res[i] == MC_OK && (!lens[i] || !values[i]))
			res[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "empty value for %s", keys[i]);
		bufs[i] = (void *const *)(uintptr_t)&values[i];
		blens[i] = &lens[i];
		nbufs[i] = 1;
		totals[i] = lens[i];
	}
	put_many(s, keys, bufs, blens, nbufs, totals, n, config, upsert, res);
	rc = first_failure(res, n);
out:
	if (rc == MC_ERR_NOMEM && results)
		for (size_t i = 0; i < n; i++)
			results[i] = rc;
	if (res != results)
		mc_free(res);
	mc_free(bufs);
	mc_free(blens);
	mc_free(nbufs);
	mc_free(totals);
	return rc;
}

mc_status mc_store_put_batch(struct mc_store *s, const char *const *keys, const void *const *values,
			     const size_t *lens, size_t n, const struct mc_store_config *config,
			     mc_status *results)
{
	return put_batch_values(s, keys, values, lens, n, config, false, results);
}

mc_status mc_store_upsert_batch(struct mc_store *s, const char *const *keys,
				const void *const *values, const size_t *lens, size_t n,
				const struct mc_store_config *config, mc_status *results)
{
	return put_batch_values(s, keys, values, lens, n, config, true, results);
}

int64_t mc_store_get_alloc(struct mc_store *s, const char *key, mc_store_alloc_fn alloc, void *ctx)
{
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc == MC_OK && !alloc)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_alloc: NULL allocator");
	if (rc != MC_OK)
		return rc;
	return get_one(s, key, NULL, NULL, 0, 0, alloc, ctx);
}

static void *malloc_into(void *ctx, size_t size)
{
	void **out = ctx;
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

/* ---- zero-copy calls ---------------------------------------------------------------- */

mc_status mc_store_register_buffer(struct mc_store *s, void *addr, size_t len)
{
	mc_status rc = check_ready(s);
	if (rc != MC_OK)
		return rc;
	if (!addr || !len)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register_buffer: NULL or empty");
	return mc_te_register(s->te, addr, len, NULL, true);
}

mc_status mc_store_unregister_buffer(struct mc_store *s, void *addr)
{
	mc_status rc = check_ready(s);
	if (rc != MC_OK)
		return rc;
	return mc_te_deregister(s->te, addr);
}

static mc_status put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			  const struct mc_store_config *cfg, bool upsert)
{
	void *bufs[1] = {(void *)(uintptr_t)buf};
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc == MC_OK)
		rc = check_config(cfg, true, 1);
	if (rc != MC_OK)
		return rc;
	if (len == 0)
		return MC_OK; /* upstream: a no-op */
	if (!buf)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put_from: NULL buffer");
	return put_one(s, key, bufs, &len, 1, len, cfg, upsert);
}

mc_status mc_store_put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			    const struct mc_store_config *config)
{
	return put_from(s, key, buf, len, config, false);
}

mc_status mc_store_upsert_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			       const struct mc_store_config *config)
{
	return put_from(s, key, buf, len, config, true);
}

int64_t mc_store_get_into(struct mc_store *s, const char *key, void *buf, size_t cap)
{
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc == MC_OK && !buf && cap)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_into: NULL buffer");
	if (rc != MC_OK)
		return rc;
	return get_one(s, key, &buf, &cap, 1, cap, NULL, NULL);
}

/* Shared argument check and result setup of the batch zero-copy calls. */
static mc_status batch_begin(struct mc_store *s, const char *const *keys, const void *arrays,
			     size_t n, const struct mc_store_config *cfg)
{
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_config(cfg, false, n);
	if (rc == MC_OK && n && (!keys || !arrays))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch call: NULL arrays");
	return rc;
}

static mc_status batch_put_multi(struct mc_store *s, const char *const *keys,
				 void *const *const *bufs, const size_t *const *lens,
				 const size_t *nbufs, size_t n, const struct mc_store_config *cfg,
				 bool upsert, mc_status *results)
{
	mc_status *res = results;
	uint64_t *totals;
	mc_status rc;

	if (!res)
		res = mc_calloc(n ? n : 1, sizeof(*res));
	totals = mc_calloc(n ? n : 1, sizeof(*totals));
	if (!res || !totals) {
		if (res != results)
			mc_free(res);
		mc_free(totals);
		return MC_ERR_NOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		res[i] = check_key(keys[i]);
		for (size_t b = 0; res[i] == MC_OK && b < nbufs[i]; b++) {
			if (lens[i][b] && !bufs[i][b])
				res[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "NULL buffer for %s",
						      keys[i]);
			totals[i] += lens[i][b];
		}
		if (res[i] == MC_OK && totals[i] == 0)
			res[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "empty value for %s", keys[i]);
	}
	put_many(s, keys, bufs, lens, nbufs, totals, n, cfg, upsert, res);
	rc = first_failure(res, n);
	if (res != results)
		mc_free(res);
	mc_free(totals);
	return rc;
}

/* One buffer per key, as the arrays the multi-buffer batch forms take. */
struct one_buf_views {
	void *const **bufs;
	const size_t **lens;
	size_t *nbufs;
};

static void one_buf_views_free(struct one_buf_views *v)
{
	mc_free(v->bufs);
	mc_free(v->lens);
	mc_free(v->nbufs);
}

static mc_status one_buf_views_new(void *const *bufs, const size_t *lens, size_t n,
				   struct one_buf_views *v)
{
	v->bufs = mc_calloc(n, sizeof(*v->bufs));
	v->lens = mc_calloc(n, sizeof(*v->lens));
	v->nbufs = mc_calloc(n, sizeof(*v->nbufs));
	if (!v->bufs || !v->lens || !v->nbufs) {
		one_buf_views_free(v);
		return MC_ERR_NOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		v->bufs[i] = &bufs[i];
		v->lens[i] = &lens[i];
		v->nbufs[i] = 1;
	}
	return MC_OK;
}

static mc_status batch_put_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				const size_t *lens, size_t n, const struct mc_store_config *config,
				bool upsert, mc_status *results)
{
	struct one_buf_views v;
	mc_status rc = batch_begin(s, keys, bufs, n, config);
	if (rc == MC_OK && n && !lens)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_put_from: NULL lens");
	if (rc == MC_OK && n)
		rc = one_buf_views_new(bufs, lens, n, &v);
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	rc = batch_put_multi(s, keys, v.bufs, v.lens, v.nbufs, n, config, upsert, results);
	one_buf_views_free(&v);
	return rc;
}

mc_status mc_store_batch_put_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *lens, size_t n,
				  const struct mc_store_config *config, mc_status *results)
{
	return batch_put_from(s, keys, bufs, lens, n, config, false, results);
}

mc_status mc_store_batch_upsert_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				     const size_t *lens, size_t n,
				     const struct mc_store_config *config, mc_status *results)
{
	return batch_put_from(s, keys, bufs, lens, n, config, true, results);
}

mc_status mc_store_batch_put_from_multi_buffers(struct mc_store *s, const char *const *keys,
						void *const *const *bufs, const size_t *const *lens,
						const size_t *nbufs, size_t n,
						const struct mc_store_config *config,
						mc_status *results)
{
	mc_status rc = batch_begin(s, keys, bufs, n, config);
	if (rc == MC_OK && n && (!lens || !nbufs))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch call: NULL lens");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	return batch_put_multi(s, keys, bufs, lens, nbufs, n, config, false, results);
}

static mc_status batch_get_multi(struct mc_store *s, const char *const *keys,
				 void *const *const *bufs, const size_t *const *lens,
				 const size_t *nbufs, size_t n, int64_t *results)
{
	int64_t *res = results;
	mc_status rc = MC_OK;

	if (!res)
		res = mc_calloc(n, sizeof(*res));
	if (!res)
		return MC_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		res[i] = check_key(keys[i]);
		for (size_t b = 0; res[i] == MC_OK && b < nbufs[i]; b++)
			if (lens[i][b] && !bufs[i][b])
				res[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "NULL buffer for %s",
						      keys[i]);
	}
	get_many(s, keys, bufs, lens, nbufs, n, NULL, NULL, res);
	for (size_t i = 0; i < n && rc == MC_OK; i++)
		if (res[i] < 0)
			rc = (mc_status)res[i];
	if (res != results)
		mc_free(res);
	return rc;
}

mc_status mc_store_batch_get_into(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *caps, size_t n, int64_t *results)
{
	struct one_buf_views v;
	mc_status rc = batch_begin(s, keys, bufs, n, NULL);
	if (rc == MC_OK && n && !caps)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_get_into: NULL caps");
	if (rc == MC_OK && n)
		rc = one_buf_views_new(bufs, caps, n, &v);
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	rc = batch_get_multi(s, keys, v.bufs, v.lens, v.nbufs, n, results);
	one_buf_views_free(&v);
	return rc;
}

mc_status mc_store_batch_get_into_multi_buffers(struct mc_store *s, const char *const *keys,
						void *const *const *bufs, const size_t *const *lens,
						const size_t *nbufs, size_t n, int64_t *results)
{
	mc_status rc = batch_begin(s, keys, bufs, n, NULL);
	if (rc == MC_OK && n && (!lens || !nbufs))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch call: NULL lens");
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	return batch_get_multi(s, keys, bufs, lens, nbufs, n, results);
}

mc_status mc_store_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
				   mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results)
{
	mc_status rc = check_ready(s);

	if (rc == MC_OK && n && (!keys || !alloc || !results))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_get: NULL arrays or allocator");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		results[i] = check_key(keys[i]);
	get_many(s, keys, NULL, NULL, NULL, n, alloc, ctx, results);
	for (size_t i = 0; i < n; i++)
		if (results[i] < 0)
			return (mc_status)results[i];
	return MC_OK;
}

static void *malloc_nth(void *ctx, size_t i, size_t size)
{
	void **values = ctx;
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

/* ---- ranged reads ---------------------------------------------------------------------- */

/* The end of the region registered with this client's engine that holds
 * addr, or 0 when none does. */
static uint64_t registered_end(struct mc_store *s, uint64_t addr)
{
	uint64_t a, len;
	for (size_t i = 0; mc_te_segment_buffer(s->te, MC_LOCAL_SEGMENT, i, &a, &len) == MC_OK; i++)
		if (addr >= a && addr - a < len)
			return a + len;
	return 0;
}

/* Results of the ranges of read r whose entry is still MC_OK. */
static void range_results_fill(const struct mc_store_range_read *r, int64_t v)
{
	for (size_t f = 0; f < r->nranges; f++)
		if (r->results[f] == MC_OK)
			r->results[f] = v;
}

mc_status mc_store_get_into_ranges(struct mc_store *s, const struct mc_store_range_read *reads,
				   size_t n)
{
	struct mc_store_msg resp;
	struct mc_proto_str *kv = NULL;
	uint32_t *sent = NULL, nsent = 0;
	size_t *first = NULL; /* per read: its first range's index in rs */
	size_t nfrag = 0;
	struct range_set rs = {0};
	bool have_resp = false;
	uint64_t t0 = 0;
	mc_status rc = check_ready(s), ret = MC_OK;

	if (n && !reads)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "get_into_ranges: NULL reads");
	for (size_t i = 0; i < n; i++) {
		if (reads[i].nranges && (!reads[i].ranges || !reads[i].results))
			return mc_set_error(MC_ERR_INVALID_PARAMS, "get_into_ranges: NULL ranges");
		nfrag += reads[i].nranges;
	}
	for (size_t i = 0; i < n; i++) {
		mc_status st = rc == MC_OK ? check_key(reads[i].key) : rc;
		if (st == MC_OK && !reads[i].buf && reads[i].nranges)
			st = mc_set_error(MC_ERR_INVALID_PARAMS, "get_into_ranges: NULL buffer");
		for (size_t f = 0; f < reads[i].nranges; f++)
			reads[i].results[f] = st;
	}
	if (rc != MC_OK || n == 0)
		return rc;
	kv = mc_calloc(n, sizeof(*kv));
	sent = mc_calloc(n, sizeof(*sent));
	first = mc_calloc(n, sizeof(*first));
	if (!kv || !sent || !first || range_set_init(&rs, nfrag, nfrag) != MC_OK) {
		rc = MC_ERR_NOMEM;
		goto fail_all;
	}
	/* reads with nothing to do (no ranges, or refused above) ask nothing */
	for (size_t i = 0; i < n; i++) {
		if (!reads[i].nranges || reads[i].results[0] != MC_OK)
			continue;
		kv[nsent] = mc_proto_str_c(reads[i].key);
		sent[nsent++] = (uint32_t)i;
	}
	if (!nsent)
		goto out;
	t0 = mc_now_ms();
	rc = batch_replica_lists(s, kv, nsent, &resp);
	if (rc != MC_OK)
		goto fail_all;
	have_resp = true;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_replica_list_item *it =
			&resp.body.batch_replica_list.items[j];
		const struct mc_store_range_read *r = &reads[sent[j]];
		const struct mc_store_replica *rep;
		uint64_t base = (uint64_t)(uintptr_t)r->buf, end, room;

		first[sent[j]] = rs.n;
		if (it->status != MC_OK) {
			range_results_fill(r, it->status);
			continue;
		}
		rep = choose_replica(s, &it->list);
		if (!rep) {
			range_results_fill(r, MC_ERR_INVALID_REPLICA);
			continue;
		}
		end = registered_end(s, base);
		room = end ? end - base : 0;
		if (!end)
			mc_set_error(MC_ERR_INVALID_PARAMS,
				     "get_into_ranges: %p is not in registered memory", r->buf);
		for (size_t f = 0; f < r->nranges; f++) {
			const struct mc_store_range *g = &r->ranges[f];
			if (!end || !range_inside(g->src_offset, g->length, rep->size) ||
			    !range_inside(g->dst_offset, g->length, room)) {
				r->results[f] = MC_ERR_INVALID_PARAMS;
				continue;
			}
			range_set_add(&rs, (char *)r->buf + g->dst_offset, g->src_offset, g->length,
				      rep, 1);
		}
	}
	run_transfers(s, rs.ios, rs.n, MC_OP_READ);
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_range_read *r = &reads[sent[j]];
		uint64_t ttl = resp.body.batch_replica_list.items[j].list.lease_ttl_ms;
		bool expired = mc_now_ms() > t0 + ttl;
		size_t k = first[sent[j]];
		for (size_t f = 0; f < r->nranges; f++) {
			if (r->results[f] != MC_OK)
				continue; /* refused: no range queued */
			if (rs.ios[k].status != MC_OK)
				r->results[f] = rs.ios[k].status;
			else if (expired)
				r->results[f] = MC_ERR_LEASE_EXPIRED;
			else
				r->results[f] = (int64_t)rs.ios[k].len;
			k++;
		}
	}
	goto out;
fail_all:
	for (size_t i = 0; i < n; i++)
		range_results_fill(&reads[i], rc);
out:
	if (have_resp)
		mc_store_msg_release(&resp);
	for (size_t i = 0; i < n && ret == MC_OK; i++)
		for (size_t f = 0; f < reads[i].nranges && ret == MC_OK; f++)
			if (reads[i].results[f] < 0)
				ret = (mc_status)reads[i].results[f];
	range_set_release(&rs);
	mc_free(kv);
	mc_free(sent);
	mc_free(first);
	return ret;
}

/* ---- sessions ---------------------------------------------------------------------------- */

/* Shared checks of the session calls; on failure every result is set. */
static mc_status session_begin(struct mc_store *s, const char *const *keys, size_t n,
			       const void *results, bool need_results)
{
	mc_status rc = check_ready(s);
	if (rc == MC_OK && n && (!keys || (need_results && !results)))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "session call: NULL arrays");
	if (rc == MC_OK && n > UINT32_MAX)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "session call: too many keys");
	return rc;
}

static mc_status first_failure_i64(const int64_t *results, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (results[i] < 0)
			return (mc_status)results[i];
	return MC_OK;
}

mc_status mc_store_batch_get_session_start(struct mc_store *s, const char *const *keys, size_t n,
					   mc_status *results)
{
	struct mc_store_keys_req req;
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
		results[i] = check_key(keys[i]);
		if (results[i] == MC_OK) {
			kv[nsent] = mc_proto_str_c(keys[i]);
			sent[nsent++] = (uint32_t)i;
		}
	}
	if (!nsent)
		goto out;
	req.tenant = tenant_str(s);
	req.n_keys = nsent;
	req.keys = kv;
	t0 = mc_now_ms();
	rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_GET_REPLICA_LIST, &req, &resp);
	if (rc == MC_OK && resp.body.batch_replica_list.n_items != nsent) {
		mc_store_msg_release(&resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "master answered a different number of keys");
	}
	if (rc != MC_OK)
		goto out;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_replica_list_item *it =
			&resp.body.batch_replica_list.items[j];
		const struct mc_store_replica *rep;
		struct session *x;
		uint32_t i = sent[j];

		if (it->status != MC_OK) {
			results[i] = (mc_status)it->status;
			continue;
		}
		rep = choose_replica(s, &it->list);
		if (!rep) {
			results[i] = mc_set_error(MC_ERR_INVALID_REPLICA,
						  "%s has no memory replica", keys[i]);
			continue;
		}
		x = session_new(keys[i], rep->size, rep, 1);
		if (!x) {
			results[i] = MC_ERR_NOMEM;
			continue;
		}
		x->deadline_ms = t0 + it->list.lease_ttl_ms;
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
	return first_failure(results, n);
}

mc_status mc_store_batch_get_session_end(struct mc_store *s, const char *const *keys, size_t n)
{
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
	struct range_set rs = {0};
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
		results[i] = check_key(keys[i]);
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
		if (!put && now > xs[i]->deadline_ms) {
			results[i] =
				mc_set_error(MC_ERR_LEASE_EXPIRED,
					     "the get session of %s outlived its lease", keys[i]);
			continue;
		}
		for (size_t b = 0; b < nbufs[i] && results[i] == MC_OK; b++) {
			if (lens[i][b] && !bufs[i][b])
				results[i] = mc_set_error(MC_ERR_INVALID_PARAMS,
							  "NULL buffer for %s", keys[i]);
			else if (!range_inside(offs[i][b], lens[i][b], xs[i]->size))
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
	rc = range_set_init(&rs, nio, nrep);
	for (size_t i = 0; i < n; i++) {
		if (!xs[i] || results[i] != MC_OK)
			continue;
		if (rc != MC_OK) {
			results[i] = rc;
			continue;
		}
		first[i] = rs.n;
		for (size_t b = 0; b < nbufs[i]; b++)
			range_set_add(&rs, bufs[i][b], offs[i][b], lens[i][b], xs[i]->reps,
				      put ? xs[i]->nreps : 1);
	}
	run_transfers(s, rs.ios, rs.n, put ? MC_OP_WRITE : MC_OP_READ);
	now = mc_now_ms();
	for (size_t i = 0; i < n; i++) {
		uint64_t total = 0;
		if (!xs[i])
			continue;
		for (size_t b = 0; results[i] == MC_OK && b < nbufs[i]; b++) {
			const struct obj_io *io = &rs.ios[first[i] + b];
			if (io->status != MC_OK)
				results[i] = io->status;
			total += io->len;
		}
		if (results[i] == MC_OK && !put && now > xs[i]->deadline_ms)
			results[i] = MC_ERR_LEASE_EXPIRED; /* may have raced with a removal */
		if (results[i] == MC_OK)
			results[i] = (int64_t)total;
		session_unuse(s, xs[i]);
	}
	range_set_release(&rs);
	mc_free(xs);
	mc_free(first);
	return first_failure_i64(results, n);
}

mc_status mc_store_batch_get_into_multi_buffer_ranges(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
						      const uint64_t *const *src_offsets,
						      const size_t *nbufs, size_t n,
						      int64_t *results)
{
	return session_ranges(s, false, keys, bufs, lens, src_offsets, nbufs, n, results);
}

mc_status mc_store_batch_put_from_multi_buffer_ranges(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
						      const uint64_t *const *dst_offsets,
						      const size_t *nbufs, size_t n,
						      int64_t *results)
{
	return session_ranges(s, true, keys, bufs, lens, dst_offsets, nbufs, n, results);
}

mc_status mc_store_batch_put_session_start(struct mc_store *s, const char *const *keys,
					   const uint64_t *sizes, size_t n,
					   const struct mc_store_config *config, mc_status *results)
{
	struct mc_store_msg resp;
	struct mc_proto_str *revoke = NULL;
	uint32_t *sent = NULL, nsent = 0, nrev = 0;
	mc_status rc = session_begin(s, keys, n, results, true);

	if (rc == MC_OK)
		rc = check_config(config, false, n);
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
		results[i] = check_key(keys[i]);
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
	rc = send_put_start(s, keys, sizes, sent, nsent, config, false, &resp);
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
		if (send_put_revoke(s, revoke, nrev, false, &rresp) == MC_OK)
			mc_store_msg_release(&rresp);
	}
	mc_store_msg_release(&resp);
out:
	for (size_t i = 0; i < n; i++)
		if (results[i] == MC_OK && rc != MC_OK)
			results[i] = rc; /* asked for, but the master was not reached */
	mc_free(sent);
	mc_free(revoke);
	return first_failure(results, n);
}

/* End (BatchPutEnd) or revoke (BatchPutRevoke) put sessions. */
static mc_status put_session_finish(struct mc_store *s, const char *const *keys, size_t n,
				    bool revoke, mc_status *results)
{
	struct session **xs;
	struct mc_proto_str *kv = NULL;
	struct mc_store_object_meta *metas = NULL;
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
	if (!xs || !kv || !metas || !owner) {
		for (size_t i = 0; i < n; i++)
			results[i] = MC_ERR_NOMEM;
		rc = MC_ERR_NOMEM;
		goto out;
	}
	/* detach, so no new ranged write finds them, then wait for those in flight */
	pthread_mutex_lock(&s->sess_lock);
	for (size_t i = 0; i < n; i++) {
		results[i] = check_key(keys[i]);
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
	if (revoke) {
		rc = send_put_revoke(s, kv, m, false, &resp);
	} else {
		struct mc_store_batch_put_end_req end = {
			.client_id = s->client_id,
			.tenant = tenant_str(s),
			.replica_type = MC_STORE_REPLICA_ALL,
			.n_items = m,
			.items = metas,
		};
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_PUT_END, &end, &resp);
	}
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
	mc_free(owner);
	return first_failure(results, n);
}

mc_status mc_store_batch_put_session_end(struct mc_store *s, const char *const *keys, size_t n,
					 mc_status *results)
{
	return put_session_finish(s, keys, n, false, results);
}

mc_status mc_store_batch_put_session_revoke(struct mc_store *s, const char *const *keys, size_t n,
					    mc_status *results)
{
	return put_session_finish(s, keys, n, true, results);
}

/* ---- metadata calls ------------------------------------------------------------------ */

int mc_store_is_exist(struct mc_store *s, const char *key)
{
	struct mc_store_key_req req;
	struct mc_store_msg resp;
	int ret;
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc != MC_OK)
		return rc;
	req.tenant = tenant_str(s);
	req.key = mc_proto_str_c(key);
	rc = mc_master_conn_call(s->conn, MC_STORE_EXIST_KEY, &req, &resp);
	if (rc == MC_ERR_OBJECT_NOT_FOUND)
		return 0;
	if (rc != MC_OK)
		return rc;
	ret = resp.body.exist_resp.exists ? 1 : 0;
	mc_store_msg_release(&resp);
	return ret;
}

/* Fill a keys request; kv has room for n. */
static mc_status keys_req(struct mc_store *s, const char *const *keys, size_t n,
			  struct mc_proto_str *kv, struct mc_store_keys_req *req)
{
	for (size_t i = 0; i < n; i++) {
		mc_status rc = check_key(keys[i]);
		if (rc != MC_OK)
			return rc;
		kv[i] = mc_proto_str_c(keys[i]);
	}
	req->tenant = tenant_str(s);
	req->n_keys = (uint32_t)n;
	req->keys = kv;
	return MC_OK;
}

mc_status mc_store_batch_is_exist(struct mc_store *s, const char *const *keys, size_t n,
				  int *results)
{
	struct mc_store_keys_req req;
	struct mc_store_msg resp;
	struct mc_proto_str *kv;
	mc_status rc = check_ready(s);

	if (rc == MC_OK && n && (!keys || !results))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_is_exist: NULL arrays");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	kv = mc_calloc(n, sizeof(*kv));
	if (!kv)
		return MC_ERR_NOMEM;
	rc = keys_req(s, keys, n, kv, &req);
	if (rc == MC_OK)
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_EXIST_KEY, &req, &resp);
	mc_free(kv);
	if (rc == MC_OK && resp.body.batch_exist_resp.n_items != n) {
		mc_store_msg_release(&resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "batch exist: wrong item count");
	}
	if (rc != MC_OK) {
		for (size_t i = 0; i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		const struct mc_store_exist_item *it = &resp.body.batch_exist_resp.items[i];
		if (it->status == MC_OK)
			results[i] = it->exists ? 1 : 0;
		else
			results[i] = it->status == MC_ERR_OBJECT_NOT_FOUND ? 0 : it->status;
	}
	mc_store_msg_release(&resp);
	return MC_OK;
}

int64_t mc_store_get_size(struct mc_store *s, const char *key)
{
	struct mc_store_msg resp;
	int64_t size;
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc != MC_OK)
		return rc;
	rc = get_replicas(s, key, &resp);
	if (rc != MC_OK)
		return rc;
	if (resp.body.replica_list.n_replicas == 0)
		size = mc_set_error(MC_ERR_OBJECT_NOT_FOUND, "%s has no replica", key);
	else
		size = (int64_t)resp.body.replica_list.replicas[0].size;
	mc_store_msg_release(&resp);
	return size;
}

mc_status mc_store_remove(struct mc_store *s, const char *key, bool force)
{
	struct mc_store_remove_req req;
	struct mc_store_msg resp;
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc != MC_OK)
		return rc;
	req.tenant = tenant_str(s);
	req.key = mc_proto_str_c(key);
	req.force = force;
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOVE, &req, &resp);
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	return rc;
}

int64_t mc_store_remove_by_regex(struct mc_store *s, const char *pattern, bool force)
{
	struct mc_store_remove_regex_req req;
	struct mc_store_msg resp;
	int64_t count;
	mc_status rc = check_ready(s);
	if (rc == MC_OK && !pattern)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "remove_by_regex: NULL pattern");
	if (rc != MC_OK)
		return rc;
	req.tenant = tenant_str(s);
	req.pattern = mc_proto_str_c(pattern);
	req.force = force;
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOVE_BY_REGEX, &req, &resp);
	if (rc != MC_OK)
		return rc;
	count = resp.body.count_resp.count;
	mc_store_msg_release(&resp);
	return count;
}

int64_t mc_store_batch_replica_clear(struct mc_store *s, const char *const *keys, size_t n,
				     const char *segment_name, bool *cleared)
{
	struct mc_store_replica_clear_req req;
	struct mc_store_keys_req kr;
	const struct mc_store_keys_resp *got;
	struct mc_store_msg resp;
	struct mc_proto_str *kv;
	size_t j = 0, ngot;
	mc_status rc = check_ready(s);

	for (size_t i = 0; cleared && i < n; i++)
		cleared[i] = false;
	if (rc == MC_OK && n && !keys)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_replica_clear: NULL keys");
	if (rc == MC_OK && n > UINT32_MAX)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_replica_clear: too many keys");
	if (rc != MC_OK || n == 0)
		return rc;
	kv = mc_calloc(n, sizeof(*kv));
	if (!kv)
		return MC_ERR_NOMEM;
	rc = keys_req(s, keys, n, kv, &kr);
	if (rc == MC_OK) {
		req.client_id = s->client_id;
		req.tenant = kr.tenant;
		req.segment_name = mc_proto_str_c(segment_name ? segment_name : "");
		req.n_keys = kr.n_keys;
		req.keys = kv;
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_REPLICA_CLEAR, &req, &resp);
	}
	mc_free(kv);
	if (rc != MC_OK)
		return rc;
	/* the cleared keys come back as a subsequence of the request */
	got = &resp.body.keys_resp;
	ngot = got->n_keys;
	for (size_t i = 0; i < n && j < ngot; i++) {
		if (got->keys[j].len == strlen(keys[i]) &&
		    !memcmp(got->keys[j].ptr, keys[i], got->keys[j].len)) {
			if (cleared)
				cleared[i] = true;
			j++;
		}
	}
	mc_store_msg_release(&resp);
	if (j != ngot)
		return mc_set_error(MC_ERR_PROTOCOL,
				    "batch_replica_clear: unexpected key in answer");
	return (int64_t)j;
}

int64_t mc_store_remove_all(struct mc_store *s, bool force)
{
	struct mc_store_remove_all_req req;
	struct mc_store_msg resp;
	int64_t count;
	mc_status rc = check_ready(s);
	if (rc != MC_OK)
		return rc;
	req.tenant = tenant_str(s); /* this client's tenant, never "" (= all) */
	req.force = force;
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOVE_ALL, &req, &resp);
	if (rc != MC_OK)
		return rc;
	count = resp.body.count_resp.count;
	mc_store_msg_release(&resp);
	return count;
}

mc_status mc_store_batch_remove(struct mc_store *s, const char *const *keys, size_t n, bool force,
				mc_status *results)
{
	struct mc_store_batch_remove_req req;
	struct mc_store_keys_req kr;
	struct mc_store_msg resp;
	struct mc_proto_str *kv;
	mc_status rc = check_ready(s), first = MC_OK;

	if (rc == MC_OK && n && !keys)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_remove: NULL keys");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	kv = mc_calloc(n, sizeof(*kv));
	if (!kv)
		return MC_ERR_NOMEM;
	rc = keys_req(s, keys, n, kv, &kr);
	if (rc == MC_OK) {
		req.tenant = kr.tenant;
		req.force = force;
		req.n_keys = kr.n_keys;
		req.keys = kv;
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_REMOVE, &req, &resp);
	}
	mc_free(kv);
	if (rc == MC_OK && resp.body.batch_status_resp.n_items != n) {
		mc_store_msg_release(&resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "batch remove: wrong item count");
	}
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		mc_status st = (mc_status)resp.body.batch_status_resp.statuses[i];
		if (results)
			results[i] = st;
		if (st != MC_OK && first == MC_OK)
			first = st;
	}
	mc_store_msg_release(&resp);
	return first;
}

static void copy_field(char *dst, size_t cap, const struct mc_proto_str *v)
{
	size_t n = MC_MIN((size_t)v->len, cap - 1);
	if (n)
		memcpy(dst, v->ptr, n);
	dst[n] = '\0';
}

int64_t mc_store_get_replica_desc(struct mc_store *s, const char *key,
				  struct mc_store_replica_desc *out, size_t cap)
{
	struct mc_store_msg resp;
	int64_t n;
	mc_status rc = check_ready(s);
	if (rc == MC_OK)
		rc = check_key(key);
	if (rc == MC_OK && cap && !out)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_replica_desc: NULL out");
	if (rc != MC_OK)
		return rc;
	rc = get_replicas(s, key, &resp);
	if (rc != MC_OK)
		return rc;
	n = resp.body.replica_list.n_replicas;
	for (size_t i = 0; i < (size_t)n && i < cap; i++) {
		const struct mc_store_replica *r = &resp.body.replica_list.replicas[i];
		struct mc_store_replica_desc *d = &out[i];
		memset(d, 0, sizeof(*d));
		d->status = r->status;
		d->type = r->type;
		d->size = r->size;
		d->address = r->address;
		copy_field(d->segment_name, sizeof(d->segment_name), &r->segment_name);
		copy_field(d->transport_endpoint, sizeof(d->transport_endpoint),
			   &r->transport_endpoint);
		copy_field(d->protocol, sizeof(d->protocol), &r->protocol);
	}
	mc_store_msg_release(&resp);
	return n;
}

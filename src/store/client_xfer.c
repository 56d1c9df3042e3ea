/*
 * store/client_xfer.c - the store client's transfers, which every put and
 * get path meets in: mc_store_run_transfers, its retries from another
 * replica, and the choice of the replica to read.  The calls themselves
 * are client_calls.c (put and get of one object or a batch, from and into
 * the caller's memory: value calls, zero-copy calls, scatter-gather
 * buffers) and client_get.c (the lookups and the get paths).  The client
 * itself (set-up, segment, heartbeat) is client.c; sessions, which reuse
 * the pieces here, are client_session.c.
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
 * and is thrown away (MC_ERR_LEASE_EXPIRED).
 *
 * Every path meets in mc_store_run_transfers: a struct mc_store_io per
 * object (its buffers, its replicas, its status), one engine request per
 * buffer piece and replica, one batch for the whole call.  The memcpy
 * shortcut for the own segment (MC_STORE_MEMCPY, on by default) is taken
 * only for host buffers: device memory (mem/devmem.h) goes through the
 * engine's device copies, even to or from this client's segment.
 *
 * Ranged calls (get_into_ranges, the session calls) are client_ranges.c;
 * the put protocol itself (Start, End, Revoke, the redo after a failover)
 * is client_put.c.
 *
 * Threads: any number of callers at once.  Nothing here takes a lock: a
 * call's state is on its stack or in its own allocations, the fields of
 * struct mc_store it reads are fixed after set-up, and the master
 * connection and the engine are thread-safe.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"

#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/master_conn.h"
#include "store/proto.h"
#include "te/engine.h" /* mc_te_local_device */

#define STACK_REQS 16 /* transfer requests that need no allocation */

/* ---- small helpers ----------------------------------------------------------------------- */

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

mc_status mc_store_check_config(const struct mc_store_config *cfg, bool value_call, size_t nkeys)
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

/* ---- transfers --------------------------------------------------------------------------- */

/* Growable request list with a stack start. */
struct req_list {
	struct mc_xfer_req *v;
	uint32_t *owner; /* index of the mc_store_io each request serves */
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
static void local_copy(const struct mc_store_io *io, int opcode, char *addr)
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
 * caches, mem/devmem.h) must never be touched by memcpy: the engine moves
 * it through its device copies, even to or from this client's segment. */
static bool host_buffers(struct mc_store *s, const struct mc_store_io *io)
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

/*
 * The segment a pass's last request went to: a batch's replicas are mostly
 * on one holder, and opening a name scans the engine's segments under its
 * lock, twice.  name points into the pass's replicas.
 */
struct seg_memo {
	const char *name;
	mc_segment_id id;
};

static mc_status open_memo(struct mc_store *s, struct seg_memo *m, const char *name,
			   mc_segment_id *id_out)
{
	mc_status rc;

	if (m->name && (m->name == name || strcmp(m->name, name) == 0)) {
		*id_out = m->id;
		return MC_OK;
	}
	rc = mc_te_open_segment(s->te, name, id_out);
	if (rc == MC_OK) {
		m->name = name;
		m->id = *id_out;
	}
	return rc;
}

/* Queue the requests that move io to or from replica r. */
static mc_status queue_replica(struct mc_store *s, struct req_list *l, struct seg_memo *m,
			       struct mc_store_io *io, uint32_t idx, int opcode,
			       const struct mc_store_replica *r)
{
	struct mc_xfer_req req;
	mc_segment_id seg;
	uint64_t off = 0, chunk;
	mc_status rc;

	if (r->type == MC_STORE_REPLICA_DISK && opcode == MC_OP_WRITE)
		return MC_OK; /* its file is written after PutEnd (client_fsdir.c) */
	if (r->type != MC_STORE_REPLICA_MEMORY)
		return mc_set_error(MC_ERR_INVALID_REPLICA, "replica type %u is not memory",
				    r->type);
	if (s->local_memcpy && is_own_segment(s, r) && in_own_segment(s, r->address, io->len) &&
	    host_buffers(s, io) &&
	    (!mc_store_verify_reads_trailer(io) ||
	     in_own_segment(s, r->address + io->tbl_at, io->tlen))) {
		if (opcode == MC_OP_READ && mc_store_verify_reads_trailer(io)) /* judged after */
			memcpy(io->tbl, (const char *)(uintptr_t)(r->address + io->tbl_at),
			       (size_t)io->tlen);
		if (opcode == MC_OP_READ && mc_store_verify_chunk(s, io) != UINT64_MAX)
			return mc_store_verify_copy(s, io, (const char *)(uintptr_t)r->address);
		local_copy(io, opcode, (char *)(uintptr_t)r->address);
		return MC_OK;
	}
	/* anything else, own name included, goes through the engine, which
	 * checks the range against registered memory */
	rc = open_memo(s, m, r->segment_name.ptr, &seg);
	if (rc != MC_OK)
		return rc;
	/* a read to be checked comes in pieces, hashed as they land */
	chunk = opcode == MC_OP_READ ? mc_store_verify_chunk(s, io) : UINT64_MAX;
	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		uint64_t n = MC_MIN((uint64_t)io->lens[b], io->len - off);
		for (uint64_t p = 0; p < n; p += req.length) {
			req.opcode = opcode;
			req.source = (char *)io->bufs[b] + p;
			req.target_id = seg;
			req.target_offset = r->address + off + p;
			req.length = MC_MIN(n - p, chunk);
			if ((rc = req_list_add(l, &req, idx)) != MC_OK)
				return rc;
		}
		off += n;
	}
	if (opcode == MC_OP_READ && mc_store_verify_reads_trailer(io)) { /* one request */
		req.opcode = opcode;
		req.source = io->tbl;
		req.target_id = seg;
		req.target_offset = r->address + io->tbl_at;
		req.length = io->tlen;
		return req_list_add(l, &req, idx);
	}
	return MC_OK;
}

/* The trailers of the writes in ios (minor 10), once signed: after the
 * value in every memory replica, copied where the value was copied, else
 * queued on l for the batch moving the values (TR_COPY: no batch, every
 * value was copied).  TR_COUNT counts what TR_QUEUE may add. */
enum { TR_COUNT, TR_QUEUE, TR_COPY };

static size_t put_trailers(struct mc_store *s, struct req_list *l, struct seg_memo *m,
			   struct mc_store_io *ios, size_t n, int mode)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		struct mc_store_io *io = &ios[i];

		if (io->status != MC_OK || !io->tlen || io->twritten ||
		    (mode != TR_COUNT && !(io->tsums && io->has_cksum)))
			continue; /* not signed yet, or never (device memory, no
				   * memory: unchecked) */
		for (uint32_t j = 0; j < io->nreps && io->status == MC_OK; j++) {
			const struct mc_store_replica *r = &io->reps[j];
			struct mc_xfer_req req = {.opcode = MC_OP_WRITE, .source = io->tsums};

			if (r->type != MC_STORE_REPLICA_MEMORY)
				continue;
			if (s->local_memcpy && is_own_segment(s, r) &&
			    in_own_segment(s, r->address, io->len + io->tlen) &&
			    host_buffers(s, io)) {
				if (mode != TR_COUNT)
					memcpy((char *)(uintptr_t)(r->address + io->len), io->tsums,
					       (size_t)io->tlen);
				continue;
			}
			k++;
			if (mode == TR_COUNT)
				continue;
			if (mode == TR_COPY) { /* cannot be: its value was copied */
				io->status = MC_ERR_TRANSFER_FAIL;
				break;
			}
			req.target_offset = r->address + io->len;
			req.length = io->tlen;
			io->status = open_memo(s, m, r->segment_name.ptr, &req.target_id);
			if (io->status == MC_OK)
				io->status = req_list_add(l, &req, (uint32_t)i);
		}
		io->twritten = mode != TR_COUNT;
	}
	return k;
}

static void run_pass(struct mc_store *s, struct mc_store_io *ios, size_t n, int opcode)
{
	struct mc_store_vpass *vp = NULL;
	bool disk = false, fs = false;
	struct seg_memo m = {NULL, 0};
	struct req_list l;
	mc_batch_id bid;
	mc_status rc;
	size_t ntr = 0, tfirst;

	req_list_init(&l);
	for (size_t i = 0; i < n; i++) {
		struct mc_store_io *io = &ios[i];
		size_t first = l.n;
		if (io->status != MC_OK)
			continue;
		if (opcode == MC_OP_READ && io->nreps &&
		    io->reps[0].type == MC_STORE_REPLICA_LOCAL_DISK) {
			disk = true; /* client_disk_read.c, after the memory reads */
			continue;
		}
		if (opcode == MC_OP_READ && io->nreps &&
		    io->reps[0].type == MC_STORE_REPLICA_DISK) {
			fs = true; /* client_fsdir.c, after the memory reads */
			continue;
		}
		for (uint32_t r = 0; r < io->nreps && io->status == MC_OK; r++)
			io->status =
				queue_replica(s, &l, &m, io, (uint32_t)i, opcode, &io->reps[r]);
		if (io->status != MC_OK)
			l.n = first; /* drop what was queued for it */
	}
	if (l.n == 0)
		goto out;
	if (opcode == MC_OP_WRITE)
		ntr = put_trailers(s, NULL, &m, ios, n, TR_COUNT);
	rc = mc_te_batch_new(s->te, l.n + ntr, &bid);
	if (rc == MC_OK && opcode == MC_OP_READ &&
	    (vp = mc_store_verify_pass_new(s, ios, n, l.v, l.owner, l.n)) &&
	    (mc_te_batch_on_task_end(s->te, bid, mc_store_verify_task_end, vp) != MC_OK ||
	     (mc_store_verify_pass_staged(vp) &&
	      mc_te_batch_on_task_staged(s->te, bid, mc_store_verify_task_staged, vp) != MC_OK))) {
		mc_store_verify_pass_end(s, vp); /* cannot be: the check after hashes */
		vp = NULL;
	}
	/* the trailers of writes signed ahead (mc_store_verify_ahead) go
	 * with their values */
	if (rc == MC_OK && opcode == MC_OP_WRITE)
		(void)put_trailers(s, &l, &m, ios, n, TR_QUEUE);
	if (rc == MC_OK) {
		rc = mc_te_submit_unchecked(s->te, bid, l.v, l.n);
		if (rc != MC_OK)
			mc_te_batch_free(s->te, bid);
	}
	if (rc != MC_OK) {
		for (size_t k = 0; k < l.n; k++)
			ios[l.owner[k]].status = MC_ERR_TRANSFER_FAIL;
		goto out;
	}
	/* checksums while the batch moves the bytes (client_verify.c): a
	 * write's here, a read's on the threads that end its pieces */
	if (opcode == MC_OP_WRITE) {
		mc_store_verify_sign(s, ios, n);
		tfirst = l.n; /* then the trailers, in the same batch */
		(void)put_trailers(s, &l, &m, ios, n, TR_QUEUE);
		if (l.n > tfirst &&
		    mc_te_submit_unchecked(s->te, bid, l.v + tfirst, l.n - tfirst) != MC_OK) {
			for (size_t k = tfirst; k < l.n; k++)
				ios[l.owner[k]].status = MC_ERR_TRANSFER_FAIL;
			l.n = tfirst;
		}
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
	mc_store_verify_pass_end(s, vp); /* judges the reads hashed in the batch */
	req_list_release(&l);
	if (opcode == MC_OP_WRITE) {
		mc_store_verify_sign(s, ios, n); /* what was copied, or no batch */
		(void)put_trailers(s, NULL, &m, ios, n, TR_COPY);
	}
	if (disk)
		mc_store_disk_read(s, ios, n);
	for (size_t i = 0; fs && i < n; i++) {
		if (ios[i].status == MC_OK && ios[i].nreps &&
		    ios[i].reps[0].type == MC_STORE_REPLICA_DISK)
			mc_store_fs_read(s, &ios[i]);
	}
}

/* ---- retries ----------------------------------------------------------------------------- */

/*
 * Retries (spec store.md 6.5, issue 15 part 5).  Between a holder's death
 * and the master's unmount of its segments (client_ttl, 10 s by default)
 * GetReplicaList still lists replicas there, and a read of one fails to
 * transfer while the object lives on elsewhere.  A read that failed with
 * MC_ERR_TRANSFER_FAIL and knows its object's replicas (io->alts) is run
 * again from the next complete replica it has not tried, memory on a
 * segment that has not failed in this call first, then a LOCAL_DISK copy,
 * then a DISK file, the order mc_store_choose_replica prefers; every
 * retry of a call shares one more engine batch per round.  The segments
 * that failed are then reported to the master in one ReportUnreachable,
 * and it lists and allocates them no more until their owner pings again,
 * so later reads go straight to a live copy.  A master older than minor
 * version 5 answers NOT_SUPPORTED, which changes nothing here.
 */
#define BAD_SEGS_MAX 16 /* segments one call remembers (and reports) */

struct bad_segs {
	struct mc_proto_str v[BAD_SEGS_MAX];
	uint32_t n;
};

static bool bad_has(const struct bad_segs *b, const struct mc_proto_str *name)
{
	for (uint32_t i = 0; i < b->n; i++)
		if (b->v[i].len == name->len && memcmp(b->v[i].ptr, name->ptr, name->len) == 0)
			return true;
	return false;
}

static void bad_add(const struct mc_store *s, struct bad_segs *b, const struct mc_store_replica *r)
{
	if (r->type != MC_STORE_REPLICA_MEMORY || !r->segment_name.len || is_own_segment(s, r) ||
	    b->n == BAD_SEGS_MAX || bad_has(b, &r->segment_name))
		return;
	b->v[b->n++] = r->segment_name;
}

void mc_store_io_alternates(struct mc_store_io *io, const struct mc_store_replica_list *list,
			    const struct mc_store_replica *chosen, uint64_t off)
{
	io->alts = list->replicas;
	io->nalts = list->n_replicas < 64 ? list->n_replicas : 64;
	io->alt_off = off;
	io->lease_ttl_ms = list->lease_ttl_ms;
	/* only a read of the whole object can be checked by its checksum
	 * (client_verify.c); one with a trailer by its trailer's */
	io->check = list->checksum.present && off == 0 && io->len == chosen->size;
	io->checked = false;
	io->cksum = list->checksum.value;
	io->tlen = io->tbl_at = io->tbl_first = 0;
	if (!io->check && list->table_cksum.present && off == 0 && io->len == chosen->size &&
	    mc_store_trailer_fits(io->len)) {
		io->check = true;
		io->cksum = list->table_cksum.value;
		io->tlen = mc_store_trailer_len(io->len);
		io->tbl_at = io->len;
	}
	io->tried = 0;
	if (chosen >= list->replicas && chosen < list->replicas + io->nalts)
		io->tried = 1ull << (chosen - list->replicas);
}

/* The rank of alternate r for io in the fallback order; 0: not usable
 * now.  A range of an object with a trailer read in chunks (client_ranges.c)
 * needs the trailer, which a disk copy does not hold: only memory serves it. */
static int alt_rank(const struct bad_segs *b, const struct mc_store_io *io,
		    const struct mc_store_replica *r)
{
	bool part = io->tlen && (io->tbl_first || io->tlen != mc_store_trailer_len(io->len));

	if (r->status != MC_STORE_REPLICA_COMPLETE)
		return 0;
	if (part && r->type != MC_STORE_REPLICA_MEMORY)
		return 0;
	if (r->type == MC_STORE_REPLICA_MEMORY)
		return bad_has(b, &r->segment_name) ? 0 : 3;
	if (r->type == MC_STORE_REPLICA_LOCAL_DISK && r->transport_endpoint.len)
		return 2;
	if (r->type == MC_STORE_REPLICA_DISK && r->file_path.len)
		return 1;
	return 0;
}

/* Point io at its next alternate (moved as mc_store_ranges_add moves a
 * replica); false when none is left. */
static bool next_alternate(struct mc_store_io *io, const struct bad_segs *b)
{
	int best = 0;
	uint32_t k = 0;

	for (uint32_t i = 0; i < io->nalts; i++) {
		int rank = (io->tried >> i) & 1 ? 0 : alt_rank(b, io, &io->alts[i]);

		if (rank > best) {
			best = rank;
			k = i;
		}
	}
	if (!best)
		return false;
	io->tried |= 1ull << k;
	io->cur = io->alts[k];
	io->cur.address += io->alt_off;
	if (io->cur.type != MC_STORE_REPLICA_LOCAL_DISK && io->cur.type != MC_STORE_REPLICA_DISK)
		io->cur.size = io->len;
	io->reps = &io->cur;
	io->nreps = 1;
	io->status = MC_OK;
	io->checked = false;
	return true;
}

static void report_unreachable(struct mc_store *s, const struct bad_segs *b)
{
	struct mc_store_unreachable_req req = {s->client_id, b->n, (struct mc_proto_str *)b->v};
	struct mc_store_msg resp;
	mc_status rc;

	rc = mc_master_conn_call(s->conn, MC_STORE_REPORT_UNREACHABLE, &req, &resp);
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	else
		mc_debug("ReportUnreachable: %s", mc_strerror(rc));
}

static void retry_reads(struct mc_store *s, struct mc_store_io *ios, size_t n, uint64_t t0)
{
	struct bad_segs bad = {.n = 0};
	struct mc_store_corrupt corrupt = {.n = 0};

	for (uint32_t round = 0; round < 64; round++) {
		size_t again = 0;

		for (size_t i = 0; i < n; i++) {
			struct mc_store_io *io = &ios[i];

			if (io->status == MC_OK) {
				io->status = MC_INPROGRESS; /* done: out of the next pass */
				continue;
			}
			if (!mc_store_io_retryable(io))
				continue;
			if (io->status == MC_ERR_CHECKSUM_MISMATCH)
				mc_store_corrupt_add(&corrupt, io,
						     t0); /* the replica, not its segment */
			else
				bad_add(s, &bad, &io->reps[0]);
		}
		for (size_t i = 0; i < n; i++) {
			struct mc_store_io *io = &ios[i];

			if (mc_store_io_retryable(io) && next_alternate(io, &bad)) {
				atomic_fetch_add(&s->read_retries, 1);
				again++;
			}
		}
		if (again) {
			run_pass(s, ios, n, MC_OP_READ);
			mc_store_verify_check(s, ios, n);
		}
		for (size_t i = 0; i < n; i++)
			if (ios[i].status == MC_INPROGRESS)
				ios[i].status = MC_OK;
		if (!again)
			break;
	}
	if (bad.n)
		report_unreachable(s, &bad);
	mc_store_report_corrupt(s, &corrupt);
}

/*
 * A holder that restarted under its name (host:port) has another data port
 * and other memory than the descriptor this engine keeps of it, and the
 * first transfer to it fails on the old one (the master already lists the
 * new mount).  The objects that failed to move to or from such a segment
 * (its descriptor was found changed since the call began, refetched here
 * when its peer failed and nothing refetched it yet: the owner restarted
 * or published again) are run once more, against the new one.  Not a
 * write into a put credit's block: the credit names memory of the old
 * mount, which the new one may have given to another object; its put goes
 * the two-call way instead (client_credit.c).
 */
static void retry_renewed(struct mc_store *s, struct mc_store_io *ios, size_t n, int opcode,
			  uint64_t t0)
{
	struct bad_segs seen = {.n = 0}, renewed = {.n = 0};
	size_t again = 0;

	for (size_t i = 0; i < n; i++) {
		struct mc_store_io *io = &ios[i];
		bool retry = false;

		for (uint32_t r = 0;
		     io->status == MC_ERR_TRANSFER_FAIL && !io->credit && r < io->nreps; r++) {
			const struct mc_store_replica *rep = &io->reps[r];

			if (rep->type != MC_STORE_REPLICA_MEMORY || !rep->segment_name.len ||
			    is_own_segment(s, rep))
				continue;
			if (!bad_has(&seen, &rep->segment_name) && seen.n < BAD_SEGS_MAX) {
				seen.v[seen.n++] = rep->segment_name;
				if (mc_te_segment_renewed(s->te, rep->segment_name.ptr, t0))
					renewed.v[renewed.n++] = rep->segment_name;
			}
			retry |= bad_has(&renewed, &rep->segment_name);
		}
		io->renew = retry;
		again += retry;
	}
	if (!again)
		return;
	for (size_t i = 0; i < n; i++) {
		if (ios[i].renew) {
			ios[i].status = MC_OK;
			ios[i].checked = false;
			ios[i].twritten = false;
		} else if (ios[i].status == MC_OK) {
			ios[i].status = MC_INPROGRESS; /* done: out of this pass */
		}
	}
	mc_debug("running %zu transfers again: their holder restarted under its name", again);
	run_pass(s, ios, n, opcode);
	for (size_t i = 0; i < n; i++)
		if (ios[i].status == MC_INPROGRESS)
			ios[i].status = MC_OK;
}

void mc_store_run_transfers(struct mc_store *s, struct mc_store_io *ios, size_t n, int opcode)
{
	uint64_t t0 = mc_now_ms();
	bool alts = false;
	char *tbl = opcode == MC_OP_READ ? mc_store_verify_trailers(s, ios, n) : NULL;

	run_pass(s, ios, n, opcode);
	retry_renewed(s, ios, n, opcode, t0);
	if (opcode != MC_OP_READ)
		return;
	mc_store_verify_check(s, ios, n); /* what the batch left, and disk reads */
	for (size_t i = 0; i < n && !alts; i++)
		alts = mc_store_io_retryable(&ios[i]);
	if (alts)
		retry_reads(s, ios, n, t0);
	for (size_t i = 0; tbl && i < n; i++)
		ios[i].tbl = NULL;
	mc_free(tbl);
}

/* ---- the replica to read ----------------------------------------------------------------- */

const struct mc_store_replica *mc_store_choose_replica(const struct mc_store *s,
						       const struct mc_store_replica_list *l)
{
	const struct mc_store_replica *first = NULL, *disk = NULL, *file = NULL;
	for (uint32_t i = 0; i < l->n_replicas; i++) {
		const struct mc_store_replica *r = &l->replicas[i];
		if (r->type == MC_STORE_REPLICA_DISK && !file &&
		    r->status == MC_STORE_REPLICA_COMPLETE && r->file_path.len)
			file = r;
		if (r->type == MC_STORE_REPLICA_LOCAL_DISK && !disk &&
		    r->status == MC_STORE_REPLICA_COMPLETE && r->transport_endpoint.len)
			disk = r;
		if (r->type != MC_STORE_REPLICA_MEMORY)
			continue;
		if (is_own_segment(s, r))
			return r;
		if (!first)
			first = r;
	}
	return first ? first : disk ? disk : file;
}

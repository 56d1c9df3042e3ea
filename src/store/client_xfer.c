/*
 * store/client_xfer.c - the store client's data paths: put and get of one
 * object or a batch, from and into the caller's memory (value calls,
 * zero-copy calls, scatter-gather buffers) and ranged reads.  The client
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
#include "store/dummy_client.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "mem/hostmem.h" /* mc_hostmem_populate_bufs */
#include "mooncake/te.h"
#include "store/client_metrics.h"
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

/* ---- get --------------------------------------------------------------------------------- */

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

/* get_one from the cache: the size, or MC_INPROGRESS (ask the master). */
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
static int64_t get_one(struct mc_store *s, const char *key, void *const *bufs, const size_t *lens,
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
 * get_many from the cache: the keys with a live entry are read in one
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
static void get_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
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

/* ---- value calls ------------------------------------------------------------------------- */

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

	rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, true, 1);
	if (rc != MC_OK)
		return rc;
	for (size_t i = 0; i < nparts; i++) {
		if (lens[i] && !parts[i])
			return mc_set_error(MC_ERR_INVALID_PARAMS, "NULL part with a length");
		len += lens[i];
	}
	if (len == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put of an empty value");
	return mc_store_put_one(s, key, (void *const *)(uintptr_t)parts, lens, nparts, len, cfg,
				upsert);
}

static mc_status untimed_put(struct mc_store *s, const char *key, const void *value, size_t len,
			     const struct mc_store_config *config)
{
	return put_value(s, key, &value, &len, 1, config, false);
}

static mc_status untimed_put_parts(struct mc_store *s, const char *key, const void *const *parts,
				   const size_t *lens, size_t nparts,
				   const struct mc_store_config *config)
{
	if ((!parts || !lens) && nparts)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put_parts: NULL arrays");
	return put_value(s, key, parts, lens, nparts, config, false);
}

static mc_status untimed_upsert(struct mc_store *s, const char *key, const void *value, size_t len,
				const struct mc_store_config *config)
{
	return put_value(s, key, &value, &len, 1, config, true);
}

static mc_status untimed_upsert_parts(struct mc_store *s, const char *key, const void *const *parts,
				      const size_t *lens, size_t nparts,
				      const struct mc_store_config *config)
{
	if ((!parts || !lens) && nparts)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "upsert_parts: NULL arrays");
	return put_value(s, key, parts, lens, nparts, config, true);
}

/* The up-front check of one key of a batch put with one buffer per key. */
static mc_status one_value_check(const char *key, const void *buf, size_t len)
{
	mc_status rc = mc_store_check_key(key);
	if (rc == MC_OK && (!len || !buf))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "empty value for %s", key);
	return rc;
}

/* The call's own bookkeeping could not be allocated: every key not
 * refused up front fails with MC_ERR_NOMEM, the others keep their code. */
static void results_nomem(mc_status *results, size_t n)
{
	for (size_t i = 0; results && i < n; i++)
		if (results[i] == MC_OK)
			results[i] = MC_ERR_NOMEM;
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

	rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_config(config, true, n);
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
	for (size_t i = 0; res && i < n; i++)
		res[i] = one_value_check(keys[i], values[i], lens[i]);
	bufs = mc_calloc(n, sizeof(*bufs));
	blens = mc_calloc(n, sizeof(*blens));
	nbufs = mc_calloc(n, sizeof(*nbufs));
	totals = mc_calloc(n, sizeof(*totals));
	if (!res || !bufs || !blens || !nbufs || !totals) {
		results_nomem(results, n);
		rc = MC_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		bufs[i] = (void *const *)(uintptr_t)&values[i];
		blens[i] = &lens[i];
		nbufs[i] = 1;
		totals[i] = lens[i];
	}
	mc_store_put_many(s, keys, bufs, blens, nbufs, totals, n, config, upsert, res);
	rc = mc_store_first_failure(res, n);
out:
	if (res != results)
		mc_free(res);
	mc_free(bufs);
	mc_free(blens);
	mc_free(nbufs);
	mc_free(totals);
	return rc;
}

static mc_status untimed_put_batch(struct mc_store *s, const char *const *keys,
				   const void *const *values, const size_t *lens, size_t n,
				   const struct mc_store_config *config, mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_put_batch(s, keys, values, lens, n, config, false, results);
	return put_batch_values(s, keys, values, lens, n, config, false, results);
}

static mc_status untimed_upsert_batch(struct mc_store *s, const char *const *keys,
				      const void *const *values, const size_t *lens, size_t n,
				      const struct mc_store_config *config, mc_status *results)
{
	if (s && s->dummy)
		return mc_store_dummy_put_batch(s, keys, values, lens, n, config, true, results);
	return put_batch_values(s, keys, values, lens, n, config, true, results);
}

static int64_t untimed_get_alloc(struct mc_store *s, const char *key, mc_store_alloc_fn alloc,
				 void *ctx)
{
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK && !alloc)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_alloc: NULL allocator");
	if (rc != MC_OK)
		return rc;
	return get_one(s, key, NULL, NULL, 0, 0, alloc, ctx);
}

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

static mc_status put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			  const struct mc_store_config *cfg, bool upsert)
{
	void *bufs[1] = {(void *)(uintptr_t)buf};
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, true, 1);
	if (rc != MC_OK)
		return rc;
	if (len == 0)
		return MC_OK; /* upstream: a no-op */
	if (!buf)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put_from: NULL buffer");
	rc = mc_store_check_buffer(s, buf, len);
	if (rc != MC_OK)
		return rc;
	return mc_store_put_one(s, key, bufs, &len, 1, len, cfg, upsert);
}

static mc_status untimed_put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
				  const struct mc_store_config *config)
{
	return put_from(s, key, buf, len, config, false);
}

static mc_status untimed_upsert_from(struct mc_store *s, const char *key, const void *buf,
				     size_t len, const struct mc_store_config *config)
{
	return put_from(s, key, buf, len, config, true);
}

static int64_t untimed_get_into(struct mc_store *s, const char *key, void *buf, size_t cap)
{
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK && !buf && cap)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_into: NULL buffer");
	if (rc == MC_OK)
		rc = mc_store_check_dest(s, buf, cap);
	if (rc != MC_OK)
		return rc;
	return get_one(s, key, &buf, &cap, 1, cap, NULL, NULL);
}

/* The argument checks the batch zero-copy calls share. */
static mc_status batch_begin(struct mc_store *s, const char *const *keys, const void *arrays,
			     size_t n, const struct mc_store_config *cfg)
{
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_config(cfg, false, n);
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
	for (size_t i = 0; i < n; i++) {
		mc_status st = mc_store_check_key(keys[i]);
		uint64_t total = 0;
		for (size_t b = 0; st == MC_OK && b < nbufs[i]; b++) {
			if (lens[i][b] && !bufs[i][b])
				st = mc_set_error(MC_ERR_INVALID_PARAMS, "NULL buffer for %s",
						  keys[i]);
			else
				st = mc_store_check_buffer(s, bufs[i][b], lens[i][b]);
			total += lens[i][b];
		}
		if (st == MC_OK && total == 0)
			st = mc_set_error(MC_ERR_INVALID_PARAMS, "empty value for %s", keys[i]);
		if (res)
			res[i] = st;
		if (totals)
			totals[i] = total;
	}
	if (!res || !totals) {
		results_nomem(results, n);
		if (res != results)
			mc_free(res);
		mc_free(totals);
		return MC_ERR_NOMEM;
	}
	mc_store_put_many(s, keys, bufs, lens, nbufs, totals, n, cfg, upsert, res);
	rc = mc_store_first_failure(res, n);
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
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	if (n == 0)
		return MC_OK;
	if (one_buf_views_new(bufs, lens, n, &v) != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = one_value_check(keys[i], bufs[i], lens[i]);
		results_nomem(results, n);
		return MC_ERR_NOMEM;
	}
	rc = batch_put_multi(s, keys, v.bufs, v.lens, v.nbufs, n, config, upsert, results);
	one_buf_views_free(&v);
	return rc;
}

static mc_status untimed_batch_put_from(struct mc_store *s, const char *const *keys,
					void *const *bufs, const size_t *lens, size_t n,
					const struct mc_store_config *config, mc_status *results)
{
	return batch_put_from(s, keys, bufs, lens, n, config, false, results);
}

static mc_status untimed_batch_upsert_from(struct mc_store *s, const char *const *keys,
					   void *const *bufs, const size_t *lens, size_t n,
					   const struct mc_store_config *config, mc_status *results)
{
	return batch_put_from(s, keys, bufs, lens, n, config, true, results);
}

static mc_status untimed_batch_put_from_multi_buffers(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
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
	mc_status rc;

	if (!res)
		res = mc_calloc(n, sizeof(*res));
	if (!res)
		return MC_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		res[i] = mc_store_check_key(keys[i]);
		for (size_t b = 0; res[i] == MC_OK && b < nbufs[i]; b++)
			if (lens[i][b] && !bufs[i][b])
				res[i] = mc_set_error(MC_ERR_INVALID_PARAMS, "NULL buffer for %s",
						      keys[i]);
			else
				res[i] = mc_store_check_dest(s, bufs[i][b], lens[i][b]);
	}
	get_many(s, keys, bufs, lens, nbufs, n, NULL, NULL, res);
	rc = mc_store_first_failure_i64(res, n);
	if (res != results)
		mc_free(res);
	return rc;
}

static mc_status untimed_batch_get_into(struct mc_store *s, const char *const *keys,
					void *const *bufs, const size_t *caps, size_t n,
					int64_t *results)
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

static mc_status untimed_batch_get_into_multi_buffers(struct mc_store *s, const char *const *keys,
						      void *const *const *bufs,
						      const size_t *const *lens,
						      const size_t *nbufs, size_t n,
						      int64_t *results)
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

static mc_status untimed_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
					 mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results)
{
	mc_status rc;

	if (s && s->dummy)
		return mc_store_dummy_batch_get_alloc(s, keys, n, alloc, ctx, results);
	rc = mc_store_check_ready(s);

	if (rc == MC_OK && n && (!keys || !alloc || !results))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_get: NULL arrays or allocator");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		results[i] = mc_store_check_key(keys[i]);
	get_many(s, keys, NULL, NULL, NULL, n, alloc, ctx, results);
	return mc_store_first_failure_i64(results, n);
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

/* ---- timed entry points ------------------------------------------------------------------ */

/*
 * Every public call that moves object bytes is timed here and counted in
 * the client's metrics (client_metrics.h: calls, failures, bytes moved,
 * latency by op_name and in upstream's four histograms).  The untimed_*
 * functions above are the calls themselves; mc_store_get and
 * mc_store_batch_get go through the timed get_alloc forms.
 */

static uint64_t t_start(const struct mc_store *s)
{
	return mc_client_metrics_start(s ? s->metrics : NULL);
}

static mc_status t_end(struct mc_store *s, enum mc_cm_op op, uint64_t t0, mc_status rc,
		       uint64_t bytes)
{
	if (t0)
		mc_client_metrics_op(s->metrics, op, t0, rc == MC_OK, rc == MC_OK ? bytes : 0);
	return rc;
}

static int64_t t_end_i64(struct mc_store *s, enum mc_cm_op op, uint64_t t0, int64_t n)
{
	if (t0)
		mc_client_metrics_op(s->metrics, op, t0, n >= 0, n > 0 ? (uint64_t)n : 0);
	return n;
}

static uint64_t sum_lens(const size_t *lens, size_t n)
{
	uint64_t t = 0;
	for (size_t i = 0; lens && i < n; i++)
		t += lens[i];
	return t;
}

/* Bytes of the keys of a batch put that succeeded (all when results is NULL). */
static uint64_t put_bytes(const size_t *lens, size_t n, const mc_status *results)
{
	uint64_t t = 0;
	for (size_t i = 0; lens && i < n; i++)
		if (!results || results[i] == MC_OK)
			t += lens[i];
	return t;
}

static uint64_t put_multi_bytes(const size_t *const *lens, const size_t *nbufs, size_t n,
				const mc_status *results)
{
	uint64_t t = 0;
	for (size_t i = 0; lens && nbufs && i < n; i++)
		if (!results || results[i] == MC_OK)
			t += sum_lens(lens[i], nbufs[i]);
	return t;
}

static uint64_t got_bytes(const int64_t *results, size_t n)
{
	uint64_t t = 0;
	for (size_t i = 0; results && i < n; i++)
		if (results[i] > 0)
			t += (uint64_t)results[i];
	return t;
}

static mc_status t_end_batch_get(struct mc_store *s, enum mc_cm_op op, uint64_t t0, mc_status rc,
				 const int64_t *results, size_t n)
{
	if (t0)
		mc_client_metrics_op(s->metrics, op, t0, rc == MC_OK, got_bytes(results, n));
	return rc;
}

mc_status mc_store_put(struct mc_store *s, const char *key, const void *value, size_t len,
		       const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, &value, &len, 1, config, false)
			       : untimed_put(s, key, value, len, config);
	return t_end(s, MC_CM_OP_PUT, t0, rc, len);
}

mc_status mc_store_put_parts(struct mc_store *s, const char *key, const void *const *parts,
			     const size_t *lens, size_t nparts,
			     const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, parts, lens, nparts, config, false)
			       : untimed_put_parts(s, key, parts, lens, nparts, config);
	return t_end(s, MC_CM_OP_PUT_PARTS, t0, rc, parts ? sum_lens(lens, nparts) : 0);
}

mc_status mc_store_upsert(struct mc_store *s, const char *key, const void *value, size_t len,
			  const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, &value, &len, 1, config, true)
			       : untimed_upsert(s, key, value, len, config);
	return t_end(s, MC_CM_OP_UPSERT, t0, rc, len);
}

mc_status mc_store_upsert_parts(struct mc_store *s, const char *key, const void *const *parts,
				const size_t *lens, size_t nparts,
				const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy
			       ? mc_store_dummy_put_copy(s, key, parts, lens, nparts, config, true)
			       : untimed_upsert_parts(s, key, parts, lens, nparts, config);
	return t_end(s, MC_CM_OP_UPSERT_PARTS, t0, rc, parts ? sum_lens(lens, nparts) : 0);
}

mc_status mc_store_put_batch(struct mc_store *s, const char *const *keys, const void *const *values,
			     const size_t *lens, size_t n, const struct mc_store_config *config,
			     mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = untimed_put_batch(s, keys, values, lens, n, config, results);
	return t_end(s, MC_CM_OP_PUT_BATCH, t0, rc, put_bytes(lens, n, results));
}

mc_status mc_store_upsert_batch(struct mc_store *s, const char *const *keys,
				const void *const *values, const size_t *lens, size_t n,
				const struct mc_store_config *config, mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = untimed_upsert_batch(s, keys, values, lens, n, config, results);
	return t_end(s, MC_CM_OP_UPSERT_BATCH, t0, rc, put_bytes(lens, n, results));
}

int64_t mc_store_get_alloc(struct mc_store *s, const char *key, mc_store_alloc_fn alloc, void *ctx)
{
	uint64_t t0 = t_start(s);
	int64_t r = s && s->dummy ? (key && *key ? mc_dummy_get_copy(s->dummy, key, alloc, ctx)
						 : mc_set_error(MC_ERR_INVALID_PARAMS, "empty key"))
				  : untimed_get_alloc(s, key, alloc, ctx);
	return t_end_i64(s, MC_CM_OP_GET, t0, r);
}

mc_status mc_store_put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			    const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy ? mc_store_dummy_put_one(s, key, buf, len, config, false)
				     : untimed_put_from(s, key, buf, len, config);
	return t_end(s, MC_CM_OP_PUT_FROM, t0, rc, len);
}

mc_status mc_store_upsert_from(struct mc_store *s, const char *key, const void *buf, size_t len,
			       const struct mc_store_config *config)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy ? mc_store_dummy_put_one(s, key, buf, len, config, true)
				     : untimed_upsert_from(s, key, buf, len, config);
	return t_end(s, MC_CM_OP_UPSERT_FROM, t0, rc, len);
}

int64_t mc_store_get_into(struct mc_store *s, const char *key, void *buf, size_t cap)
{
	uint64_t t0 = t_start(s);
	int64_t r = s && s->dummy ? mc_store_dummy_get_one(s, key, buf, cap)
				  : untimed_get_into(s, key, buf, cap);
	return t_end_i64(s, MC_CM_OP_GET_INTO, t0, r);
}

mc_status mc_store_batch_put_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *lens, size_t n,
				  const struct mc_store_config *config, mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc =
		s && s->dummy
			? mc_store_dummy_put_flat(s, keys, bufs, lens, n, config, false, results)
			: untimed_batch_put_from(s, keys, bufs, lens, n, config, results);
	return t_end(s, MC_CM_OP_BATCH_PUT_FROM, t0, rc, put_bytes(lens, n, results));
}

mc_status mc_store_batch_upsert_from(struct mc_store *s, const char *const *keys, void *const *bufs,
				     const size_t *lens, size_t n,
				     const struct mc_store_config *config, mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc =
		s && s->dummy
			? mc_store_dummy_put_flat(s, keys, bufs, lens, n, config, true, results)
			: untimed_batch_upsert_from(s, keys, bufs, lens, n, config, results);
	return t_end(s, MC_CM_OP_BATCH_UPSERT_FROM, t0, rc, put_bytes(lens, n, results));
}

mc_status mc_store_batch_put_from_multi_buffers(struct mc_store *s, const char *const *keys,
						void *const *const *bufs, const size_t *const *lens,
						const size_t *nbufs, size_t n,
						const struct mc_store_config *config,
						mc_status *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc;
	if (s && s->dummy) {
		rc = mc_store_dummy_multi_check(keys, bufs, lens, nbufs, n, results, NULL);
		if (rc == MC_OK && n)
			rc = mc_dummy_put_multi(s->dummy, keys, bufs, lens, nbufs, n, config, false,
						results);
	} else {
		rc = untimed_batch_put_from_multi_buffers(s, keys, bufs, lens, nbufs, n, config,
							  results);
	}
	return t_end(s, MC_CM_OP_BATCH_PUT_FROM_MULTI, t0, rc,
		     put_multi_bytes(lens, nbufs, n, results));
}

mc_status mc_store_batch_get_into(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *caps, size_t n, int64_t *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = s && s->dummy ? mc_store_dummy_get_flat(s, keys, bufs, caps, n, results)
				     : untimed_batch_get_into(s, keys, bufs, caps, n, results);
	return t_end_batch_get(s, MC_CM_OP_BATCH_GET_INTO, t0, rc, results, n);
}

mc_status mc_store_batch_get_into_multi_buffers(struct mc_store *s, const char *const *keys,
						void *const *const *bufs, const size_t *const *lens,
						const size_t *nbufs, size_t n, int64_t *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc;
	if (s && s->dummy) {
		rc = mc_store_dummy_multi_check(keys, bufs, lens, nbufs, n, NULL, results);
		if (rc == MC_OK && n)
			rc = mc_dummy_get_multi(s->dummy, keys, bufs, lens, nbufs, n, results);
	} else {
		rc = untimed_batch_get_into_multi_buffers(s, keys, bufs, lens, nbufs, n, results);
	}
	return t_end_batch_get(s, MC_CM_OP_BATCH_GET_INTO_MULTI, t0, rc, results, n);
}

mc_status mc_store_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
				   mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results)
{
	uint64_t t0 = t_start(s);
	mc_status rc = untimed_batch_get_alloc(s, keys, n, alloc, ctx, results);
	return t_end_batch_get(s, MC_CM_OP_BATCH_GET, t0, rc, results, n);
}

mc_status mc_store_get_into_ranges(struct mc_store *s, const struct mc_store_range_read *reads,
				   size_t n)
{
	if (s && s->dummy)
		return mc_store_dummy_get_into_ranges(s, reads, n);
	uint64_t t0 = t_start(s);
	mc_status rc = mc_store_get_into_ranges_untimed(s, reads, n);
	uint64_t bytes = 0;

	if (!t0)
		return rc;
	for (size_t i = 0; reads && i < n; i++)
		bytes += got_bytes(reads[i].results, reads[i].results ? reads[i].nranges : 0);
	mc_client_metrics_op(s->metrics, MC_CM_OP_GET_INTO_RANGES, t0, rc == MC_OK, bytes);
	return rc;
}

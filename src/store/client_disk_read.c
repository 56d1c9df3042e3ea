/*
 * store/client_disk_read.c - the reader's side of the SSD tier: objects
 * whose only readable replica is a LOCAL_DISK one, read through the
 * owner's offload RPC server (store/offload_server.h).
 *
 * Every get form meets here through mc_store_run_transfers, which hands
 * over the reads whose replica is LOCAL_DISK after its memory reads: the
 * copy and zero-copy gets, their batch forms, the ranged reads and the
 * get sessions (a range's replica is a copy whose address is the range's
 * offset in the object).  Per owner endpoint, in rounds:
 *
 *   1. BatchGetOffloadObject for the objects still to read (their whole
 *      size; a range reads its part of the staged object);
 *   2. one engine batch from the owner's segment at the answered
 *      addresses into the caller's buffers, waited for at most until the
 *      batch's gc_ttl_ms, counted from before the request went out;
 *   3. ReleaseOffloadBuffer, whatever the reads did;
 *   4. the objects the owner's staging buffer had no room for
 *      (BUFFER_OVERFLOW) go into the next round, as long as the round
 *      staged something (otherwise they would never fit, and fail).
 *
 * Bytes read after the ttl could come from an extent the owner already
 * reused: such a read fails (MC_ERR_TRANSFER_FAIL), never returns them.
 * An owner that dies fails its RPC at once (connection reset) or its
 * engine reads (the transport's peer failure), each within its deadline.
 *
 * Threads: as client_xfer.c; the pool (offload_client.h) is thread-safe
 * and the counter atomic.
 */
#define MC_LOG_MODULE "store"
#include <inttypes.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/client_int.h"
#include "store/offload_client.h"
#include "store/proto.h"
#include "te/engine.h" /* mc_te_submit_unchecked */

/* The reads of one round to one owner. */
struct round {
	struct mc_store_io **ios; /* this round's, in request order */
	uint32_t n;
};

static bool is_disk_read(const struct mc_store_io *io)
{
	return io->status == MC_OK && io->nreps && io->reps[0].type == MC_STORE_REPLICA_LOCAL_DISK;
}

static bool same_endpoint(const struct mc_store_replica *a, const struct mc_store_replica *b)
{
	return a->transport_endpoint.len == b->transport_endpoint.len &&
	       memcmp(a->transport_endpoint.ptr, b->transport_endpoint.ptr,
		      a->transport_endpoint.len) == 0;
}

/* Reads the staged bytes of the round's staged ios; sets their status. */
static void pull(struct mc_store *s, struct round *rd,
		 const struct mc_store_offload_rpc_get_resp *g, uint64_t t0)
{
	struct mc_xfer_req *reqs = NULL;
	uint32_t *owner = NULL;
	size_t nreq = 0, cap = 0;
	mc_segment_id seg;
	mc_batch_id bid;
	mc_status rc;
	char name[256];
	uint64_t now;
	int64_t left;

	for (uint32_t j = 0; j < rd->n; j++)
		if (g->items[j].status == MC_OK)
			cap += rd->ios[j]->nbufs;
	if (!cap)
		return;
	if (g->segment.len >= sizeof(name)) {
		rc = mc_set_error(MC_ERR_PROTOCOL, "offload answer names an over-long segment");
		goto fail;
	}
	memcpy(name, g->segment.ptr, g->segment.len);
	name[g->segment.len] = '\0';
	rc = mc_te_open_segment(s->te, name, &seg);
	if (rc != MC_OK)
		goto fail;
	reqs = mc_calloc(cap, sizeof(*reqs));
	owner = mc_calloc(cap, sizeof(*owner));
	if (!reqs || !owner) {
		rc = MC_ERR_NOMEM;
		goto fail;
	}
	for (uint32_t j = 0; j < rd->n; j++) {
		struct mc_store_io *io = rd->ios[j];
		uint64_t src = g->items[j].address + io->reps[0].address, off = 0;
		if (g->items[j].status != MC_OK)
			continue;
		for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
			uint64_t len = MC_MIN((uint64_t)io->lens[b], io->len - off);
			if (!len)
				continue;
			reqs[nreq] = (struct mc_xfer_req){.opcode = MC_OP_READ,
							  .source = io->bufs[b],
							  .target_id = seg,
							  .target_offset = src + off,
							  .length = len};
			owner[nreq++] = j;
			off += len;
		}
	}
	if (!nreq)
		goto out;
	rc = mc_te_batch_new(s->te, nreq, &bid);
	if (rc == MC_OK) {
		rc = mc_te_submit_unchecked(s->te, bid, reqs, nreq);
		if (rc != MC_OK)
			mc_te_batch_free(s->te, bid);
	}
	if (rc != MC_OK)
		goto fail;
	now = mc_now_ms();
	left = (int64_t)(t0 + g->gc_ttl_ms) - (int64_t)now;
	rc = mc_te_batch_wait(s->te, bid, left > 0 ? left : 0, NULL);
	if (rc == MC_ERR_TIMEOUT) {
		mc_te_batch_discard(s->te, bid);
		rc = mc_set_error(MC_ERR_TRANSFER_FAIL,
				  "reads from %s outlived the owner's %" PRIu64 " ms staging ttl",
				  name, g->gc_ttl_ms);
		goto fail;
	}
	for (size_t k = 0; k < nreq && rc != MC_OK; k++) {
		struct mc_xfer_status st;
		if (mc_te_task_status(s->te, bid, k, &st) != MC_OK || st.state != MC_XFER_COMPLETED)
			rd->ios[owner[k]]->status = MC_ERR_TRANSFER_FAIL;
	}
	mc_te_batch_free(s->te, bid);
	if (mc_now_ms() > t0 + g->gc_ttl_ms) {
		rc = mc_set_error(MC_ERR_TRANSFER_FAIL,
				  "reads from %s ended after the owner's %" PRIu64
				  " ms staging ttl",
				  name, g->gc_ttl_ms);
		goto fail;
	}
	goto out;
fail:
	for (uint32_t j = 0; j < rd->n; j++)
		if (g->items[j].status == MC_OK)
			rd->ios[j]->status = rc;
out:
	mc_free(reqs);
	mc_free(owner);
}

/* One round to rd's owner: returns how many ios want another round. */
static uint32_t round_run(struct mc_store *s, struct round *rd, const char *endpoint)
{
	struct mc_store_offload_rpc_item *items = mc_calloc(rd->n, sizeof(*items));
	struct mc_store_offload_rpc_get_req req = {rd->n, items};
	struct mc_store_offload_rpc_get_resp *g;
	struct mc_store_msg resp;
	uint32_t again = 0, staged = 0, read = 0;
	uint64_t t0;
	mc_status rc;

	if (!items) {
		for (uint32_t j = 0; j < rd->n; j++)
			rd->ios[j]->status = MC_ERR_NOMEM;
		return 0;
	}
	for (uint32_t j = 0; j < rd->n; j++) {
		items[j].tenant = mc_store_tenant(s);
		items[j].key = rd->ios[j]->key;
		items[j].size = rd->ios[j]->reps[0].size;
	}
	t0 = mc_now_ms();
	rc = mc_offload_pool_call(s->offload_pool, endpoint, MC_STORE_BATCH_GET_OFFLOAD_OBJECT,
				  &req, &resp);
	mc_free(items);
	if (rc == MC_OK && resp.body.offload_rpc_get_resp.n_items != rd->n) {
		rc = mc_set_error(MC_ERR_PROTOCOL, "offload server %s answered %u of %u objects",
				  endpoint, resp.body.offload_rpc_get_resp.n_items, rd->n);
		mc_store_msg_release(&resp);
	}
	if (rc != MC_OK) {
		mc_warn("reading %u objects from the disk of %s: %s", rd->n, endpoint,
			mc_last_error());
		for (uint32_t j = 0; j < rd->n; j++)
			rd->ios[j]->status = rc;
		return 0;
	}
	g = &resp.body.offload_rpc_get_resp;
	for (uint32_t j = 0; j < rd->n; j++) {
		struct mc_store_io *io = rd->ios[j];
		const struct mc_store_replica *r = &io->reps[0];
		if (g->items[j].status == MC_OK &&
		    !mc_store_range_inside(r->address, io->len, r->size)) {
			g->items[j].status = MC_ERR_INVALID_PARAMS; /* cannot happen: checked */
			continue;
		}
		staged += g->items[j].status == MC_OK;
	}
	pull(s, rd, g, t0);
	if (g->batch_id) {
		struct mc_store_offload_rpc_release_req rel = {g->batch_id};
		struct mc_store_msg rr;
		if (mc_offload_pool_call(s->offload_pool, endpoint, MC_STORE_RELEASE_OFFLOAD_BUFFER,
					 &rel, &rr) == MC_OK)
			mc_store_msg_release(&rr);
		else
			mc_debug("release of offload batch %" PRIu64 " on %s: %s", g->batch_id,
				 endpoint, mc_last_error());
	}
	/* keep the ones to retry at the front */
	for (uint32_t j = 0; j < rd->n; j++) {
		struct mc_store_io *io = rd->ios[j];
		mc_status st = (mc_status)g->items[j].status;
		if (st == MC_ERR_BUFFER_OVERFLOW && staged) {
			rd->ios[again++] = io;
			continue;
		}
		if (st != MC_OK)
			io->status = mc_set_error(st, "%.*s: the owner's disk (%s) answered %s",
						  (int)io->key.len, io->key.ptr, endpoint,
						  mc_strerror(st));
		else if (io->status == MC_OK)
			read++;
	}
	atomic_fetch_add(&s->offload_reads, read);
	mc_store_msg_release(&resp);
	return again;
}

void mc_store_disk_read(struct mc_store *s, struct mc_store_io *ios, size_t n)
{
	struct mc_store_io **all = mc_calloc(n ? n : 1, sizeof(*all));
	size_t m = 0;

	if (!all) {
		for (size_t i = 0; i < n; i++)
			if (is_disk_read(&ios[i]))
				ios[i].status = MC_ERR_NOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (is_disk_read(&ios[i]))
			all[m++] = &ios[i];
	if (m && !s->offload_pool) {
		for (size_t i = 0; i < m; i++)
			all[i]->status =
				mc_set_error(MC_ERR_INVALID_REPLICA,
					     "no offload RPC pool for a LOCAL_DISK replica");
		m = 0;
	}
	/* one owner at a time: the ios of all[0]'s endpoint to the front */
	while (m) {
		const struct mc_store_replica *r0 = &all[0]->reps[0];
		char endpoint[300];
		struct round rd;
		size_t k = 0;

		for (size_t i = 0; i < m; i++)
			if (same_endpoint(&all[i]->reps[0], r0)) {
				struct mc_store_io *t = all[k];
				all[k++] = all[i];
				all[i] = t;
			}
		if (r0->transport_endpoint.len >= sizeof(endpoint)) {
			for (size_t i = 0; i < k; i++)
				all[i]->status = mc_set_error(MC_ERR_INVALID_REPLICA,
							      "over-long offload endpoint");
		} else {
			memcpy(endpoint, r0->transport_endpoint.ptr, r0->transport_endpoint.len);
			endpoint[r0->transport_endpoint.len] = '\0';
			rd.ios = all;
			rd.n = (uint32_t)k;
			while (rd.n)
				rd.n = round_run(s, &rd, endpoint);
		}
		memmove(all, all + k, (m - k) * sizeof(*all));
		m -= k;
	}
	mc_free(all);
}

/*
 * store/client_ranges.c - ranged reads of the store client: get_into_ranges
 * and the pieces the session calls reuse.  Every (buffer, object offset,
 * length) becomes an object of its own whose replicas are copies of the
 * real ones moved by the offset (struct mc_store_ranges), so one engine
 * batch carries them all through mc_store_run_transfers (client_xfer.c),
 * with its retries of other replicas.
 *
 * Threads: as client_xfer.c; a call's state is its own.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/master_conn.h"
#include "store/proto.h"
#include "te/engine.h"

/* ---- object ranges ----------------------------------------------------------------------- */

void mc_store_ranges_release(struct mc_store_ranges *rs)
{
	mc_free(rs->ios);
	mc_free(rs->reps);
	mc_free(rs->bufs);
	mc_free(rs->lens);
	memset(rs, 0, sizeof(*rs));
}

mc_status mc_store_ranges_init(struct mc_store_ranges *rs, size_t nios, size_t nreps)
{
	memset(rs, 0, sizeof(*rs));
	rs->ios = mc_calloc(nios ? nios : 1, sizeof(*rs->ios));
	rs->reps = mc_calloc(nreps ? nreps : 1, sizeof(*rs->reps));
	rs->bufs = mc_calloc(nios ? nios : 1, sizeof(*rs->bufs));
	rs->lens = mc_calloc(nios ? nios : 1, sizeof(*rs->lens));
	if (!rs->ios || !rs->reps || !rs->bufs || !rs->lens) {
		mc_store_ranges_release(rs);
		return MC_ERR_NOMEM;
	}
	rs->cap = nios;
	rs->reps_cap = nreps;
	return MC_OK;
}

size_t mc_store_ranges_add(struct mc_store_ranges *rs, void *buf, uint64_t off, uint64_t len,
			   const struct mc_store_replica *reps, uint32_t nreps)
{
	size_t i = rs->n;
	struct mc_store_io *io = &rs->ios[i];
	struct mc_store_replica *r = &rs->reps[rs->nreps];

	mc_assert(i < rs->cap && rs->nreps + nreps <= rs->reps_cap);
	for (uint32_t k = 0; k < nreps; k++) {
		r[k] = reps[k];
		r[k].address += off;
		if (r[k].type != MC_STORE_REPLICA_LOCAL_DISK && r[k].type != MC_STORE_REPLICA_DISK)
			r[k].size = len; /* a disk read asks for the whole object */
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

/* ---- ranged reads ------------------------------------------------------------------------ */

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

mc_status mc_store_get_into_ranges_untimed(struct mc_store *s,
					   const struct mc_store_range_read *reads, size_t n)
{
	struct mc_store_msg resp;
	struct mc_proto_str *kv = NULL;
	uint32_t *sent = NULL, nsent = 0;
	size_t *first = NULL; /* per read: its first range's index in rs */
	size_t nfrag = 0;
	struct mc_store_ranges rs = {0};
	bool have_resp = false;
	uint64_t t0 = 0;
	mc_status rc = mc_store_check_ready(s), ret = MC_OK;

	if (n && !reads)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "get_into_ranges: NULL reads");
	for (size_t i = 0; i < n; i++) {
		if (reads[i].nranges && (!reads[i].ranges || !reads[i].results))
			return mc_set_error(MC_ERR_INVALID_PARAMS, "get_into_ranges: NULL ranges");
		nfrag += reads[i].nranges;
	}
	for (size_t i = 0; i < n; i++) {
		mc_status st = rc == MC_OK ? mc_store_check_key(reads[i].key) : rc;
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
	if (!kv || !sent || !first || mc_store_ranges_init(&rs, nfrag, nfrag) != MC_OK) {
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
	rc = mc_store_lookup_batch(s, kv, nsent, &resp);
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
		rep = mc_store_choose_replica(s, &it->list);
		if (!rep) {
			range_results_fill(r, MC_ERR_INVALID_REPLICA);
			continue;
		}
		end = registered_end(s, base);
		room = end ? end - base : 0;
		if (!end)
			mc_set_error(MC_ERR_INVALID_PARAMS,
				     "get_into_ranges: %p is not in registered memory", r->buf);
		else if (!mc_te_local_writable(s->te, r->buf, room)) {
			end = 0;
			mc_set_error(MC_ERR_INVALID_PARAMS,
				     "get_into_ranges: %p is registered read-only", r->buf);
		}
		for (size_t f = 0; f < r->nranges; f++) {
			const struct mc_store_range *g = &r->ranges[f];
			if (!end || !mc_store_range_inside(g->src_offset, g->length, rep->size) ||
			    !mc_store_range_inside(g->dst_offset, g->length, room)) {
				r->results[f] = MC_ERR_INVALID_PARAMS;
				continue;
			}
			size_t k = mc_store_ranges_add(&rs, (char *)r->buf + g->dst_offset,
						       g->src_offset, g->length, rep, 1);

			rs.ios[k].key = kv[j];
			if (g->length)
				mc_store_io_alternates(&rs.ios[k], &it->list, rep, g->src_offset);
		}
	}
	mc_store_run_transfers(s, rs.ios, rs.n, MC_OP_READ);
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
			else if (expired && mc_store_read_leased(rs.ios[k].reps))
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
		ret = mc_store_first_failure_i64(reads[i].results, reads[i].nranges);
	mc_store_ranges_release(&rs);
	mc_free(kv);
	mc_free(sent);
	mc_free(first);
	return ret;
}

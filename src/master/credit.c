/*
 * master/credit.c - put credits (PutCredit, message 44, protocol minor 12,
 * ours; docs/design.md "Put credits"): blocks the master reserves in a
 * holder's segment for one client, which the client fills with small
 * objects itself and completes with one item of a PutCredit each, so a
 * put costs one exchange with the master instead of PutStart and PutEnd.
 *
 * A credit is a block placed as a one-replica put's (the configured
 * strategy, preferring the segment the ask names, if any; with
 * preferred_segment_lru room is made there as for a put), counted as used
 * from its grant, and kept in its
 * client's list (struct mc_client.credits) until a PutCredit item
 * completes an object in it, the client gives it back (release), it stays
 * unused for CREDIT_TTL_MS, or the client expires.  Completing checks the
 * item against a credit this client holds (id, address and size = value +
 * trailer) and answers MC_ERR_INVALID_WRITE for anything else: a credit
 * is never the way to name another block.  The object is then recorded
 * complete exactly as a PutEnd records one (the same OBJ_PUT in the log,
 * acknowledged under the same rule), and the block belongs to it.
 *
 * Not logged: credits are in-flight writes, as PutStart's are (a new
 * leader, or a restarted master, knows none, answers INVALID_WRITE to an
 * item that names one, and the client puts that key again the two-call
 * way; the client also drops its credits when it sees a new leader).  An
 * unused credit that times out, or whose client expired, is parked as a
 * discarded put's blocks are (put_start_release_timeout), since a late
 * write into it may still be under way; one given back is released at
 * once.  Not granted where a put needs more than a block anywhere: with
 * the legacy DISK tier (--root_fs_dir) or the local_first strategy, the
 * answer has no credits and the client keeps to PutStart.
 *
 * Threads: the master's loop, as every handler.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "master/handler_int.h"

#define CREDIT_TTL_MS	  10000
#define CREDIT_SCAN_MS	  100
#define CREDIT_PER_CLIENT 256
#define CREDIT_MAX_BLOCK  MC_STORE_CREDIT_MAX_BLOCK
#define CREDIT_MAX_WANT	  MC_STORE_CREDIT_MAX_WANT

/* The index of credit id in client's list, or UINT32_MAX. */
static uint32_t credit_find(const struct mc_client *cl, uint64_t id)
{
	for (uint32_t i = 0; i < cl->ncredits; i++) {
		if (cl->credits[i].id == id)
			return i;
	}
	return UINT32_MAX;
}

static void credit_remove(struct mc_master *m, struct mc_client *cl, uint32_t i)
{
	cl->credits[i] = cl->credits[--cl->ncredits];
	m->ncredits--;
}

void mc_master_credits_drop(struct mc_master *m, uint32_t client, uint64_t now_ms)
{
	struct mc_client *cl;

	if (client >= m->nclient_slots)
		return;
	cl = &m->clients[client];
	while (cl->ncredits) {
		const struct mc_credit *k = &cl->credits[cl->ncredits - 1];

		mc_master_block_park(m, &k->rep, k->size, now_ms);
		credit_remove(m, cl, cl->ncredits - 1);
	}
}

void mc_master_credits_tick(struct mc_master *m, uint64_t now_ms)
{
	if (m->ncredits == 0 ||
	    (now_ms >= m->last_credit_scan && now_ms - m->last_credit_scan < CREDIT_SCAN_MS))
		return;
	m->last_credit_scan = now_ms;
	for (uint32_t c = 0; c < m->nclient_slots; c++) {
		struct mc_client *cl = &m->clients[c];

		for (uint32_t i = cl->ncredits; i-- > 0;) {
			if (cl->credits[i].expire_at > now_ms)
				continue;
			mc_master_block_park(m, &cl->credits[i].rep, cl->credits[i].size, now_ms);
			credit_remove(m, cl, i);
		}
	}
}

/* Complete the object of item it in credit slot i of client cl. */
static mc_status complete_one(struct ctx *c, uint32_t client, uint16_t tenant,
			      const struct mc_store_credit_item *it,
			      const struct mc_store_chunk_sums *sums)
{
	struct mc_master *m = c->m;
	struct mc_client *cl = &m->clients[client];
	const struct mc_proto_str *key = &it->key;
	uint64_t total = it->value_len + it->trailer_len;
	struct mc_credit k;
	struct mc_obj *o;
	uint32_t i = credit_find(cl, it->credit);
	mc_status st;

	if (i == UINT32_MAX)
		return FAIL(c, MC_ERR_INVALID_WRITE, "key '%.*s': no credit %" PRIu64 " held",
			    show(key->len), sp(key), it->credit);
	k = cl->credits[i];
	if (it->address != k.rep.addr || it->value_len > MC_MASTER_MAX_VALUE || total != k.size ||
	    !mc_master_rep_live(m, &k.rep))
		return FAIL(c, MC_ERR_INVALID_WRITE,
			    "key '%.*s': %" PRIu64 " bytes at 0x%" PRIx64
			    " are outside credit %" PRIu64 " (%" PRIu64 " bytes at 0x%" PRIx64
			    "%s)",
			    show(key->len), sp(key), total, it->address, it->credit, k.size,
			    k.rep.addr, mc_master_rep_live(m, &k.rep) ? "" : ", segment gone");
	/* from here the block is this item's: an object's, or released */
	credit_remove(m, cl, i);
	if (key->len == 0 || key->len > MC_STORE_KEY_MAX || it->value_len == 0 ||
	    (it->trailer_len && (!mc_store_trailer_fits(it->value_len) ||
				 it->trailer_len != mc_store_trailer_len(it->value_len)))) {
		mc_master_block_release(m, &k.rep, k.size);
		return FAIL(
			c, key->len > MC_STORE_KEY_MAX ? MC_ERR_INVALID_KEY : MC_ERR_INVALID_PARAMS,
			"key '%.*s': a key of %u bytes, %" PRIu64 " value bytes, a %" PRIu64
			"-byte trailer",
			show(key->len), sp(key), key->len, it->value_len, it->trailer_len);
	}
	if (sums && sums->n &&
	    (!it->checksum.present || it->trailer_len ||
	     sums->n != mc_store_chunk_count(it->value_len))) {
		mc_master_block_release(m, &k.rep, k.size);
		return FAIL(c, MC_ERR_INVALID_PARAMS,
			    "key '%.*s': %u chunk checksums for %" PRIu64 " bytes", show(key->len),
			    sp(key), sums->n, it->value_len);
	}
	o = mc_master_obj_find_live(m, tenant, sp(key), key->len);
	if (o) {
		if (!(o->flags & MC_OBJ_PROC) || c->now < o->t ||
		    c->now - o->t < m->cfg.put_start_discard_timeout_ms) {
			mc_master_block_release(m, &k.rep, k.size);
			return FAIL(c, MC_ERR_OBJECT_ALREADY_EXISTS, "key '%.*s' already exists",
				    show(key->len), sp(key));
		}
		/* a zombie PutStart: pre-empt it, as PutStart does */
		mc_master_obj_discard_reps(m, o, c->now);
		mc_master_obj_erase(m, o);
	}
	o = mc_malloc(offsetof(struct mc_obj, key) + key->len);
	if (!o) {
		mc_master_block_release(m, &k.rep, k.size);
		return FAIL(c, MC_ERR_NOMEM, "no memory for the object");
	}
	memset(o, 0, offsetof(struct mc_obj, key));
	memcpy(o->key, sp(key), key->len);
	o->key_len = (uint16_t)key->len;
	o->tenant = tenant;
	mc_obj_set_alloc(o, total, it->trailer_len != 0);
	o->aux = client;		  /* its writer, as PutEnd leaves it */
	*mc_master_obj_rep(o, 0) = k.rep; /* counted as used since the grant */
	o->nrep = 1;
	st = mc_master_obj_insert(m, o);
	if (st != MC_OK) {
		mc_master_obj_release_reps(m, o);
		mc_free(o);
		return FAIL(c, st, "no memory for the object table");
	}
	cl->nobjs++;
	if (!mc_master_obj_set_sums(o, it->checksum.present, it->checksum.value,
				    sums ? sums->v : NULL, sums ? sums->n : 0, false)) {
		mc_master_obj_release_reps(m, o);
		mc_master_obj_erase(m, o);
		return FAIL(c, MC_ERR_NOMEM, "no memory for the checksum");
	}
	o->t = c->now; /* lease = now: no protection, but LRU recency */
	mc_master_observe_size(m, it->value_len);
	mc_master_ssd_put_end(m, o, c->now);
	mc_master_wal_put(m, o);
	return MC_OK;
}

/* The descriptor of credit k (its id, its block) at d. */
static void credit_fill(const struct mc_master *m, const struct mc_credit *k,
			struct mc_store_replica *d)
{
	mc_master_mem_desc(m, k->rep.seg, k->rep.addr, k->size, MC_STORE_REPLICA_PROCESSING, d);
	d->id = k->id;
}

/* Grant the sizes of want (as many as fit) into m->rscratch; *n granted. */
static void grant(struct ctx *c, uint32_t client, const struct mc_proto_str *segment,
		  const uint64_t *want, uint32_t nwant, uint32_t *n)
{
	struct mc_master *m = c->m;
	struct mc_client *cl = &m->clients[client];
	char *keep = c->err, scratch_err[ERR_LEN];

	*n = 0;
	if (m->fs_seg != UINT32_MAX || m->cfg.strategy == MC_ALLOC_LOCAL_FIRST)
		return;	      /* a put needs more than a block anywhere: PutStart's way */
	c->err = scratch_err; /* a credit that does not fit is not an error */
	for (uint32_t i = 0; i < nwant && cl->ncredits < CREDIT_PER_CLIENT; i++) {
		bool need_evict = m->need_evict;
		uint64_t fails = m->met.put_start_alloc_failures;
		struct mc_credit *k;

		/* nor one that takes the pool over the eviction watermark: the
		 * next tick would evict live objects to make room that no put
		 * has asked for yet */
		if (m->capacity_bytes &&
		    (double)(m->allocated_bytes + want[i]) >
			    m->cfg.eviction_high_watermark_ratio * (double)m->capacity_bytes)
			break;
		if (!mc_master_grow((void **)&cl->credits, &cl->credits_cap, cl->ncredits + 1,
				    sizeof(*cl->credits)))
			break;
		k = &cl->credits[cl->ncredits];
		if (mc_master_place_block(c, want[i], segment, &k->rep) != MC_OK) {
			/* a block asked ahead is no put that needs room: no
			 * eviction round for it, nor a put's failure counted (a
			 * put that finds no credit asks PutStart, which does both) */
			m->need_evict = need_evict;
			m->met.put_start_alloc_failures = fails;
			break;
		}
		k->id = ++m->credit_seq;
		k->size = want[i];
		k->expire_at = c->now + CREDIT_TTL_MS;
		cl->ncredits++;
		m->ncredits++;
		credit_fill(m, k, &m->rscratch[(*n)++]);
	}
	c->err = keep;
}

/*
 * Upstream's put series count credit puts too (dashboards count puts by
 * them, and /metrics/summary shows only those): a call's one item as a
 * PutStart and a PutEnd, more items as one batch of each.  A refused item
 * is a failed End: its Start was the grant.
 */
static void count_items(struct mc_master *m, uint32_t n, uint32_t nfail)
{
	struct mc_master_batch_counter *bs = &m->met.master_batch_put_start;
	struct mc_master_batch_counter *be = &m->met.master_batch_put_end;

	if (n == 1) {
		m->met.master_put_start.requests++;
		m->met.master_put_end.requests++;
		m->met.master_put_end.failures += nfail;
		return;
	}
	if (n == 0)
		return;
	bs->requests++;
	bs->items += n;
	be->requests++;
	be->items += n;
	be->failed_items += nfail;
	if (nfail == n)
		be->failures++;
	else if (nfail)
		be->partial_successes++;
}

mc_status mc_master_h_put_credit(struct ctx *c, const struct mc_store_msg *q)
{
	const struct mc_store_put_credit_req *r = &q->body.put_credit_req;
	struct mc_master *m = c->m;
	struct mc_store_put_credit_resp resp = {r->n_items, NULL, 0, NULL};
	char *keep = c->err, scratch_err[ERR_LEN];
	uint32_t client, nfail = 0;
	uint16_t tid;
	mc_status st;

	if (r->n_chunks && r->n_chunks != r->n_items)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "%u chunk checksum lists for %u items",
			    r->n_chunks, r->n_items);
	if (r->n_want > CREDIT_MAX_WANT)
		return FAIL(c, MC_ERR_INVALID_PARAMS, "%u credits asked for (at most %u a call)",
			    r->n_want, CREDIT_MAX_WANT);
	for (uint32_t i = 0; i < r->n_want; i++) {
		if (r->want[i] == 0 || r->want[i] > CREDIT_MAX_BLOCK)
			return FAIL(c, MC_ERR_INVALID_PARAMS,
				    "a credit of %" PRIu64 " bytes (1 to %llu)", r->want[i],
				    (unsigned long long)CREDIT_MAX_BLOCK);
	}
	st = mc_master_tenant_intern(m, sp(&r->tenant), r->tenant.len, &tid);
	if (st != MC_OK)
		return FAIL(c, st, "cannot record the tenant");
	if ((st = mc_master_client_intern(m, &r->client_id, &client)) != MC_OK)
		return FAIL(c, st, "cannot record client");
	if (!(resp.statuses = mc_master_scratch(m, (size_t)r->n_items * sizeof(int32_t) + 1)))
		return FAIL(c, MC_ERR_NOMEM, "no memory for %u results", r->n_items);
	for (uint32_t i = 0; i < r->n_release; i++) {
		struct mc_client *cl = &m->clients[client];
		uint32_t j = credit_find(cl, r->release[i]);

		if (j == UINT32_MAX)
			continue; /* timed out, or given back already */
		mc_master_block_release(m, &cl->credits[j].rep, cl->credits[j].size);
		credit_remove(m, cl, j);
	}
	c->err = scratch_err; /* per-item causes are logged at debug only */
	for (uint32_t i = 0; i < r->n_items; i++) {
		resp.statuses[i] = complete_one(c, client, tid, &r->items[i],
						r->n_chunks ? &r->chunks[i] : NULL);
		if (resp.statuses[i] != MC_OK) {
			nfail++;
			mc_debug("put credit item %u: %s", i, scratch_err);
		}
	}
	c->err = keep;
	count_items(m, r->n_items, nfail);
	if (nfail)
		mc_debug("put credit: %u of %u items refused", nfail, r->n_items);
	if (mc_master_rscratch(m, r->n_want) != MC_OK)
		return FAIL(c, MC_ERR_NOMEM, "no memory for the credits");
	grant(c, client, &r->segment, r->want, r->n_want, &resp.n_credits);
	resp.credits = m->rscratch;
	return mc_store_response_encode(c->out, MC_STORE_PUT_CREDIT, c->id, &resp);
}

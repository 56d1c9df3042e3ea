/*
 * store/client_ranges.c - ranged reads of the store client: get_into_ranges
 * and the pieces the session calls reuse.  Every (buffer, object offset,
 * length) becomes an object of its own whose replicas are copies of the
 * real ones moved by the offset (struct mc_store_ranges), so one engine
 * batch carries them all through mc_store_run_transfers (client_xfer.c),
 * with its retries of other replicas.
 *
 * Integrity (docs/design.md "Integrity"): an object larger than one chunk
 * (MC_STORE_CHUNK) whose writer sent its chunk checksums has them listed
 * when a ranged read asks (minor 9).  A range that is not the whole
 * object is then widened to the chunks it touches: the chunks it covers
 * whole land in the caller's buffer, the first and last when it covers
 * them only in part land in scratch slots (registered with the engine
 * once, the fallback a buffer registered for the call), every chunk is
 * checked against its sum after the pass (client_verify.c), a mismatch
 * takes the retry path of whole reads, and only then are the asked bytes
 * of the partial chunks copied out.  The caller's buffer never receives a
 * byte outside its ranges.  An object with a chunk-sum trailer (minor 10,
 * client_verify.c "trailers") is read the same way in chunks of 16 KiB
 * (MC_STORE_TCHUNK), its partial ones in 16 KiB pieces of the scratch
 * slots, and its trailer beside them, so a 64 KiB range moves at most
 * 96 KiB and the trailer.
 *
 * Threads: as client_xfer.c; a call's state is its own; the scratch slots
 * are under scratch_lock.
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

/* ---- scratch for partly covered chunks ---------------------------------------------------- */

#define SCRATCH_SLOTS 16u /* 4 MiB: 8 ranges of any batch at once, no registration per call */

void mc_store_scratch_free(struct mc_store *s)
{
	pthread_mutex_lock(&s->scratch_lock);
	if (s->scratch) {
		if (s->te)
			(void)mc_te_deregister(s->te, s->scratch);
		mc_free(s->scratch);
	}
	s->scratch = NULL;
	s->scratch_free = 0;
	s->scratch_failed = false;
	pthread_mutex_unlock(&s->scratch_lock);
}

/* Up to n free slots into out[]; how many. */
static size_t scratch_take(struct mc_store *s, char **out, size_t n)
{
	size_t got = 0;

	pthread_mutex_lock(&s->scratch_lock);
	if (!s->scratch && !s->scratch_failed) {
		s->scratch = mc_malloc((size_t)SCRATCH_SLOTS * MC_STORE_CHUNK);
		if (s->scratch &&
		    mc_te_register(s->te, s->scratch, (size_t)SCRATCH_SLOTS * MC_STORE_CHUNK, NULL,
				   false) == MC_OK) {
			s->scratch_free = (uint32_t)((1ull << SCRATCH_SLOTS) - 1);
		} else {
			mc_free(s->scratch);
			s->scratch = NULL;
			s->scratch_failed = true;
		}
	}
	for (uint32_t i = 0; i < SCRATCH_SLOTS && got < n; i++) {
		if (s->scratch_free & (1u << i)) {
			s->scratch_free &= ~(1u << i);
			out[got++] = s->scratch + (size_t)i * MC_STORE_CHUNK;
		}
	}
	pthread_mutex_unlock(&s->scratch_lock);
	return got;
}

static void scratch_give(struct mc_store *s, char *const *slots, size_t n)
{
	pthread_mutex_lock(&s->scratch_lock);
	for (size_t k = 0; k < n; k++)
		s->scratch_free |= 1u << ((size_t)(slots[k] - s->scratch) / MC_STORE_CHUNK);
	pthread_mutex_unlock(&s->scratch_lock);
}

mc_status mc_store_scratch_get(struct mc_store *s, struct mc_store_scratch *sc, size_t n)
{
	memset(sc, 0, sizeof(*sc));
	if (!n)
		return MC_OK;
	if (!(sc->slots = mc_calloc(n, sizeof(*sc->slots))))
		return MC_ERR_NOMEM;
	sc->n = n;
	sc->pooled = scratch_take(s, sc->slots, n);
	if (sc->pooled == n)
		return MC_OK;
	sc->own = mc_malloc((n - sc->pooled) * (size_t)MC_STORE_CHUNK);
	if (!sc->own || mc_te_register(s->te, sc->own, (n - sc->pooled) * (size_t)MC_STORE_CHUNK,
				       NULL, false) != MC_OK) {
		mc_free(sc->own);
		sc->own = NULL;
		return MC_ERR_NOMEM;
	}
	for (size_t k = sc->pooled; k < n; k++)
		sc->slots[k] = sc->own + (k - sc->pooled) * (size_t)MC_STORE_CHUNK;
	return MC_OK;
}

void mc_store_scratch_put(struct mc_store *s, struct mc_store_scratch *sc)
{
	if (sc->pooled)
		scratch_give(s, sc->slots, sc->pooled);
	if (sc->own) {
		(void)mc_te_deregister(s->te, sc->own);
		mc_free(sc->own);
	}
	mc_free(sc->slots);
	memset(sc, 0, sizeof(*sc));
}

/* ---- chunked ranges ------------------------------------------------------------------------ */

/* How range [off, off + len) of an object of size bytes is read to be
 * checked: the chunks [ws, we) it touches, in up to three pieces (a
 * partial first chunk, the chunks it covers whole, a partial last chunk). */
struct chunk_plan {
	bool on;
	uint64_t cs;	     /* the chunk: MC_STORE_CHUNK, or MC_STORE_TCHUNK (a trailer) */
	uint64_t off, len;   /* the range asked */
	uint64_t ws, we;     /* the chunks read */
	bool head, tail;     /* the first / last chunk is covered in part: scratch */
	uint64_t head_end;   /* end of the first chunk */
	uint64_t tail_start; /* start of the last chunk (tail) */
	void *bufs[3];
	size_t lens[3];
	char *hs, *ts; /* the scratch slots of head and tail */
	char *whole;   /* a disk copy's range: the whole object, read here */
};

/* Plan p for reading range [off, off + len) (not empty, not the whole
 * object) of an object of size bytes in chunks of C bytes. */
static void plan_chunks(struct chunk_plan *p, uint64_t off, uint64_t len, uint64_t size, uint64_t C)
{
	uint64_t c0 = off / C, c1 = (off + len - 1) / C;

	memset(p, 0, sizeof(*p));
	p->on = true;
	p->cs = C;
	p->off = off;
	p->len = len;
	p->ws = c0 * C;
	p->we = MC_MIN(size, (c1 + 1) * C);
	p->head_end = MC_MIN(p->ws + C, p->we);
	p->head = off > p->ws || off + len < p->head_end;
	p->tail_start = c1 * C;
	p->tail = c1 > c0 && off + len < p->we;
}

/* Plan p for reading range g of an object of size bytes into dst; false
 * when it is read as before (no chunk sums, the whole object, empty). */
static bool plan_range(struct chunk_plan *p, uint64_t off, uint64_t len, uint64_t size,
		       const struct mc_store_chunk_sums *cs)
{
	memset(p, 0, sizeof(*p));
	if (!cs || !cs->n || cs->n != mc_store_chunk_count(size) || !len ||
	    (off == 0 && len == size))
		return false;
	plan_chunks(p, off, len, size, MC_STORE_CHUNK);
	return true;
}

/* Partial chunks of MC_STORE_TCHUNK share the scratch slots, this many to one. */
#define PIECES_PER_SLOT (MC_STORE_CHUNK / MC_STORE_TCHUNK)

static char *take_piece(struct mc_store_chk *c)
{
	size_t k = c->piece_next++;

	return c->sc->slots[c->nslots + k / PIECES_PER_SLOT] +
	       (k % PIECES_PER_SLOT) * (size_t)MC_STORE_TCHUNK;
}

/* The pieces of p: scratch for partial chunks, dst (the range's place in
 * the caller's buffer) for the rest; how many. */
static size_t plan_bufs(struct chunk_plan *p, char *dst, struct mc_store_chk *c)
{
	struct mc_store_scratch *sc = c->sc;
	size_t n = 0;
	uint64_t mid_start = p->ws, mid_end = p->we;

	if (p->head) {
		p->hs = p->cs == MC_STORE_TCHUNK ? take_piece(c) : sc->slots[sc->next++];
		p->bufs[n] = p->hs;
		p->lens[n++] = (size_t)(p->head_end - p->ws);
		mid_start = p->head_end;
	}
	if (p->tail) {
		p->ts = p->cs == MC_STORE_TCHUNK ? take_piece(c) : sc->slots[sc->next++];
		mid_end = p->tail_start;
	}
	if (mid_end > mid_start) {
		p->bufs[n] = dst + (mid_start - p->off);
		p->lens[n++] = (size_t)(mid_end - mid_start);
	}
	if (p->tail) {
		p->bufs[n] = p->ts;
		p->lens[n++] = (size_t)(p->we - p->tail_start);
	}
	return n;
}

/* After a good read: the asked bytes of the partial chunks into dst. */
static void plan_copy_out(const struct chunk_plan *p, char *dst)
{
	if (p->whole) {
		memcpy(dst, p->whole + p->off, (size_t)p->len);
		return;
	}
	if (p->head) {
		uint64_t end = MC_MIN(p->off + p->len, p->head_end);

		memcpy(dst, p->hs + (p->off - p->ws), (size_t)(end - p->off));
	}
	if (p->tail)
		memcpy(dst + (p->tail_start - p->off), p->ts,
		       (size_t)(p->off + p->len - p->tail_start));
}

/* A range of a disk copy reads the whole object into a buffer of the
 * call, registered with the engine (the owner's staged copy is read into
 * it), then copies its bytes out. */
#define WHOLE_PENDING ((char *)1) /* planned, its buffer not taken yet */

static bool is_disk_rep(const struct mc_store_replica *r)
{
	return r->type == MC_STORE_REPLICA_LOCAL_DISK || r->type == MC_STORE_REPLICA_DISK;
}

static mc_status whole_get(struct mc_store *s, struct chunk_plan *p)
{
	char *b = p->we <= SIZE_MAX ? mc_malloc((size_t)p->we) : NULL;

	p->whole = NULL;
	if (!b)
		return MC_ERR_NOMEM;
	if (mc_te_register(s->te, b, (size_t)p->we, NULL, false) != MC_OK) {
		mc_free(b);
		return MC_ERR_NOMEM;
	}
	p->whole = b;
	return MC_OK;
}

mc_status mc_store_chk_init(struct mc_store_chk *c, size_t nios)
{
	memset(c, 0, sizeof(*c));
	c->nplans = nios;
	c->plans = mc_calloc(nios ? nios : 1, sizeof(*c->plans));
	c->sc = mc_calloc(1, sizeof(*c->sc));
	if (!c->plans || !c->sc) {
		mc_free(c->plans);
		mc_free(c->sc);
		memset(c, 0, sizeof(*c));
		return MC_ERR_NOMEM;
	}
	return MC_OK;
}

size_t mc_store_chk_add(struct mc_store *s, struct mc_store_chk *c, struct mc_store_ranges *rs,
			const struct mc_store_chk_obj *o, void *dst, uint64_t off, uint64_t len)
{
	struct chunk_plan p = {.on = false};
	struct mc_store_io *io;
	uint64_t size = o->rep->size;
	/* minor 10: checked by its trailer, a range read in MC_STORE_TCHUNK chunks */
	bool table = s->verify && o->table.present && mc_store_trailer_fits(size) && len &&
		     mc_te_local_device(s->te, dst, len) < 0;
	size_t k;

	/* checked chunk by chunk: read the chunks it touches; a disk copy
	 * holds no trailer, so a range of it reads the whole object (the
	 * owner stages all of it anyway), checked as a whole read is */
	if (table && !(off == 0 && len == size) && is_disk_rep(o->rep)) {
		p = (struct chunk_plan){.on = true,
					.cs = MC_STORE_TCHUNK,
					.off = off,
					.len = len,
					.we = size,
					.whole = WHOLE_PENDING};
		c->nwhole++;
	} else if (table && !(off == 0 && len == size))
		plan_chunks(&p, off, len, size, MC_STORE_TCHUNK);
	else if (table || !s->verify || !o->has_cksum ||
		 !plan_range(&p, off, len, size, o->sums.n ? &o->sums : NULL) ||
		 mc_te_local_device(s->te, dst, len) >= 0)
		p.on = false;
	k = mc_store_ranges_add(rs, dst, p.on ? p.ws : off, p.on ? p.we - p.ws : len, o->rep, 1);
	io = &rs->ios[k];
	io->key = o->key;
	if (len && o->list)
		mc_store_io_alternates(io, o->list, o->rep, p.on ? p.ws : off);
	if (table) {
		uint64_t at = p.on ? p.ws : 0; /* else the whole object (a disk copy's: ws 0) */

		io->check = true;
		io->checked = false;
		io->cksum = o->table.value;
		io->tlen = mc_store_trailer_len(size);
		io->tbl_at = size - at;
		io->tbl_first = at / MC_STORE_TCHUNK;
		c->npieces += (size_t)p.head + (size_t)p.tail;
	} else if (p.on) {
		io->check = true;
		io->chunk_want = o->sums.v + p.ws / MC_STORE_CHUNK;
		c->nslots += (size_t)p.head + (size_t)p.tail;
	} else if (len && off == 0 && len == o->rep->size && o->has_cksum) {
		io->check = true; /* the whole object */
		io->checked = false;
		io->cksum = o->cksum;
	}
	c->plans[k] = p;
	return k;
}

mc_status mc_store_chk_ready(struct mc_store *s, struct mc_store_chk *c, struct mc_store_ranges *rs)
{
	size_t n = c->nslots + (c->npieces + PIECES_PER_SLOT - 1) / PIECES_PER_SLOT;

	if (mc_store_scratch_get(s, c->sc, n) != MC_OK)
		return mc_set_error(MC_ERR_NOMEM, "ranged read: no memory for %zu chunks", n);
	for (size_t k = 0; k < rs->n; k++) {
		if (!c->plans[k].on)
			continue;
		if (c->plans[k].whole) {
			struct chunk_plan *p = &c->plans[k];

			if (whole_get(s, p) != MC_OK)
				return mc_set_error(MC_ERR_NOMEM,
						    "ranged read: no memory for a %" PRIu64
						    "-byte object read from disk",
						    p->we);
			p->bufs[0] = p->whole;
			p->lens[0] = (size_t)p->we;
			rs->ios[k].nbufs = 1;
			rs->ios[k].bufs = p->bufs;
			rs->ios[k].lens = p->lens;
			continue;
		}
		rs->ios[k].nbufs = plan_bufs(&c->plans[k], rs->bufs[k], c);
		rs->ios[k].bufs = c->plans[k].bufs;
		rs->ios[k].lens = c->plans[k].lens;
	}
	return MC_OK;
}

/* A complete disk copy among io's alternates, or NULL. */
static const struct mc_store_replica *disk_alt(const struct mc_store_io *io)
{
	for (uint32_t i = 0; i < io->nalts; i++) {
		const struct mc_store_replica *r = &io->alts[i];

		if (r->status == MC_STORE_REPLICA_COMPLETE &&
		    ((r->type == MC_STORE_REPLICA_LOCAL_DISK && r->transport_endpoint.len) ||
		     (r->type == MC_STORE_REPLICA_DISK && r->file_path.len)))
			return r;
	}
	return NULL;
}

/* Range k was read in chunks with its object's trailer, failed (every
 * memory replica), and the object has a disk copy. */
static bool disk_retry(const struct mc_store_chk *c, const struct mc_store_ranges *rs, size_t k)
{
	const struct mc_store_io *io = &rs->ios[k];

	return c->plans[k].on && !c->plans[k].whole && io->tlen &&
	       (io->status == MC_ERR_CHECKSUM_MISMATCH || io->status == MC_ERR_TRANSFER_FAIL) &&
	       disk_alt(io);
}

void mc_store_chk_from_disk(struct mc_store *s, struct mc_store_chk *c, struct mc_store_ranges *rs)
{
	struct mc_store_io *tmp;
	size_t *at, n = 0, m = 0;

	for (size_t k = 0; k < rs->n; k++)
		n += disk_retry(c, rs, k);
	if (!n)
		return;
	tmp = mc_calloc(n, sizeof(*tmp));
	at = mc_calloc(n, sizeof(*at));
	for (size_t k = 0; tmp && at && k < rs->n; k++) {
		struct chunk_plan *p = &c->plans[k];
		const struct mc_store_replica *d;
		struct mc_store_io *io;

		if (!disk_retry(c, rs, k))
			continue;
		d = disk_alt(&rs->ios[k]);
		p->we = d->size;
		if (whole_get(s, p) != MC_OK)
			continue; /* no memory: the range keeps its failure */
		c->nwhole++;
		p->bufs[0] = p->whole;
		p->lens[0] = (size_t)d->size;
		io = &tmp[m];
		*io = rs->ios[k];
		io->cur = *d;
		io->reps = &io->cur;
		io->nreps = 1;
		io->alts = NULL; /* the last copy to try */
		io->nalts = 0;
		io->bufs = p->bufs;
		io->lens = p->lens;
		io->nbufs = 1;
		io->len = d->size;
		io->tbl = NULL;
		io->tbl_at = d->size;
		io->tbl_first = 0;
		io->check = true;
		io->checked = false;
		io->status = MC_OK;
		at[m++] = k;
	}
	if (m)
		mc_store_run_transfers(s, tmp, m, MC_OP_READ);
	for (size_t i = 0; i < m; i++) {
		struct mc_store_io *io = &rs->ios[at[i]];

		io->status = tmp[i].status;
		io->cur = tmp[i].cur;
		io->reps = &io->cur;
		io->nreps = 1;
	}
	mc_free(tmp);
	mc_free(at);
}

void mc_store_chk_done(const struct mc_store_chk *c, const struct mc_store_ranges *rs, size_t k)
{
	if (c->plans[k].on)
		plan_copy_out(&c->plans[k], rs->bufs[k]);
}

void mc_store_chk_release(struct mc_store *s, struct mc_store_chk *c)
{
	for (size_t k = 0; c->nwhole && k < c->nplans; k++)
		if (c->plans[k].whole && c->plans[k].whole != WHOLE_PENDING) {
			(void)mc_te_deregister(s->te, c->plans[k].whole);
			mc_free(c->plans[k].whole);
		}
	if (c->sc)
		mc_store_scratch_put(s, c->sc);
	mc_free(c->sc);
	mc_free(c->plans);
	memset(c, 0, sizeof(*c));
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
	struct mc_store_chk chk = {0};
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
	if (!kv || !sent || !first || mc_store_chk_init(&chk, nfrag) != MC_OK ||
	    mc_store_ranges_init(&rs, nfrag, nfrag) != MC_OK) {
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
	rc = mc_store_lookup_chunks(s, kv, nsent, &resp);
	if (rc != MC_OK)
		goto fail_all;
	have_resp = true;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_replica_list_item *it =
			&resp.body.batch_replica_list.items[j];
		const struct mc_store_range_read *r = &reads[sent[j]];
		const struct mc_store_replica *rep;
		struct mc_store_chk_obj o = {.key = kv[j], .list = &it->list};
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
		o.rep = rep;
		o.has_cksum = it->list.checksum.present;
		o.cksum = it->list.checksum.value;
		o.table = it->list.table_cksum;
		if (resp.body.batch_replica_list.n_chunks)
			o.sums = resp.body.batch_replica_list.chunks[j];
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
			(void)mc_store_chk_add(s, &chk, &rs, &o, (char *)r->buf + g->dst_offset,
					       g->src_offset, g->length);
		}
	}
	rc = mc_store_chk_ready(s, &chk, &rs);
	if (rc != MC_OK)
		goto fail_all;
	mc_store_run_transfers(s, rs.ios, rs.n, MC_OP_READ);
	mc_store_chk_from_disk(s, &chk, &rs);
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
				r->results[f] = (int64_t)r->ranges[f].length;
			if (r->results[f] >= 0)
				mc_store_chk_done(&chk, &rs, k);
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
	mc_store_chk_release(s, &chk);
	mc_store_ranges_release(&rs);
	mc_free(kv);
	mc_free(sent);
	mc_free(first);
	return ret;
}

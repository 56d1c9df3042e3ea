/*
 * store/client_verify.c - end-to-end integrity of stored objects (issue 16
 * part 1): the writer's checksum of each object, the readers' check of it.
 *
 * A put computes XXH3-64 of the object's bytes, over its scatter-gather
 * buffers in order, while the engine batch that writes its replicas is in
 * flight (client_xfer.c's run_pass calls mc_store_verify_sign between
 * submit and wait), and PutEnd hands it to the master, which keeps it with
 * the object and lists it in every GetReplicaList answer.  A read that
 * covers a whole object whose list carries a checksum (get, get_into, the
 * batch and multi-buffer forms, whole-object ranges, tensors, which are
 * these calls underneath, LOCAL_DISK and DISK replicas alike) hashes the
 * bytes that landed in the caller's buffers and compares before the call
 * returns success.  A read through the engine moves in pieces
 * (MC_STORE_VERIFY_CHUNK), and each piece is hashed, in the object's order,
 * by the thread that ends it, while its bytes are still in that core's
 * cache and the later pieces are still moving (mc_store_verify_pass_new):
 * the caller sleeps in the batch's wait meanwhile, and what is left on the
 * call's path after the last byte lands is the hash of the last piece.
 *
 * A mismatch is a read that failed: the caller's buffer holds bytes that
 * are not the object, the status becomes MC_ERR_CHECKSUM_MISMATCH, and the
 * retry machinery of client_xfer.c ("Retries") reads the next replica,
 * exactly as after a failed transfer, except that the holder's segment is
 * not reported unreachable: the replica is reported corrupt
 * (mc_store_report_corrupt, ReportCorrupt), and the master drops it.  Only
 * when no replica is left that checks out does the call fail, with
 * MC_ERR_CHECKSUM_MISMATCH.  A mismatch found after the read's lease may
 * have run out is not reported: the object may have been removed and its
 * memory rewritten under the read, which the lease check then reports.
 *
 * An object larger than one chunk (MC_STORE_CHUNK) is also signed chunk
 * by chunk (hash_chunks, one pass), and a read of part of it checks the
 * chunks it touches (client_ranges.c widens it to them; judge_chunks).
 * From minor 10 a plain or batch put of more than 16 KiB writes the sums
 * of its 16 KiB chunks in a trailer after the object instead, whose hash
 * is the object's checksum ("trailers" below).
 *
 * A put session signs its objects too, whatever the order of its pieces
 * (mc_store_seq_hash, "put sessions" below): pieces that continue what was
 * hashed are hashed as their writes succeed, chunks written whole out of
 * order get their sums from the source (and a staged copy, so the whole
 * hash takes them in order), and what is left (chunks written in parts,
 * by failed writes, from device memory) is read back from the first
 * replica when the session ends.
 *
 * What is not checked: ranges of objects without chunk sums (written
 * before minor 9), which cannot be checked against a whole-object hash
 * without reading the whole object; objects written from device memory by
 * plain puts, whose PutEnd carries no checksum; reads into device memory
 * that do not pass through the engine's pinned staging buffers (own
 * segment, ranges, mixed buffer lists): whole reads from another holder
 * are hashed there ("reads into device memory" below).
 * With verification off (MC_STORE_VERIFY=0 or the setup option), this
 * client neither signs its puts nor checks its reads.  docs/security.md
 * lists all of this.
 *
 * Threads: everything here works on the caller's own struct mc_store_io
 * array; the counters are atomics.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"

#include <inttypes.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
/* the library's dispatch: AVX2 or AVX-512 where the CPU has them, about
 * 1.5x SSE2's speed on the hashes here */
#include <xxh_x86dispatch.h>
#define hash64	    XXH3_64bits_dispatch
#define hash_update XXH3_64bits_update_dispatch
#else
#define hash64	    XXH3_64bits
#define hash_update XXH3_64bits_update
#endif

#include "base/alloc.h"
#include "base/endian.h"
#include "base/log.h"
#include "base/time.h"
#include "store/client_metrics.h"
#include "store/master_conn.h"
#include "te/engine.h" /* mc_te_local_device */

/* The bytes of io are in host memory (device memory is not hashed). */
static bool host_only(struct mc_store *s, const struct mc_store_io *io)
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

uint64_t mc_store_io_hash(const struct mc_store_io *io)
{
	XXH3_state_t st;
	uint64_t off = 0;

	if (io->nbufs == 1 || io->len <= (io->nbufs ? io->lens[0] : 0))
		return hash64(io->nbufs ? io->bufs[0] : NULL, (size_t)io->len);
	XXH3_64bits_reset(&st);
	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		size_t n = (size_t)MC_MIN((uint64_t)io->lens[b], io->len - off);

		hash_update(&st, io->bufs[b], n);
		off += n;
	}
	return XXH3_64bits_digest(&st);
}

/* Pieces a checked read is moved in: small enough that hashing the last
 * one, after everything else has landed, costs little; large enough that
 * the engine's per-request work stays small beside the bytes. */
#define MC_STORE_VERIFY_CHUNK (128u << 10)

void mc_store_io_sums_free(struct mc_store_io *io)
{
	mc_free(io->chunk_sums);
	io->chunk_sums = NULL;
	io->nchunks = 0;
	mc_free(io->tsums);
	io->tsums = NULL;
}

/* The hash of bytes [off, end) of io (they may span buffers); *b and *bo
 * (the buffer holding off and its offset in io) move along. */
static uint64_t span_hash(const struct mc_store_io *io, uint64_t off, uint64_t end, size_t *b,
			  uint64_t *bo)
{
	XXH3_state_t part;

	while (off - *bo >= io->lens[*b]) /* off < len: some buffer holds it */
		*bo += io->lens[(*b)++];
	if (io->lens[*b] - (off - *bo) >= end - off) /* in one buffer */
		return hash64((const char *)io->bufs[*b] + (off - *bo), (size_t)(end - off));
	XXH3_64bits_reset(&part);
	while (off < end) {
		size_t k;

		while (off - *bo >= io->lens[*b])
			*bo += io->lens[(*b)++];
		k = (size_t)MC_MIN(io->lens[*b] - (off - *bo), end - off);
		hash_update(&part, (const char *)io->bufs[*b] + (off - *bo), k);
		off += k;
	}
	return XXH3_64bits_digest(&part);
}

/* ---- trailers ------------------------------------------------------------------------------
 *
 * An object written with minor 10 (proto.h "Chunk-sum trailers") carries
 * the sum of each MC_STORE_TCHUNK of it in a trailer after its bytes, in
 * every replica, and the master keeps the trailer's hash.  The writer
 * hashes each byte once, chunk by chunk: while its Start is in flight, as
 * far as the answer lets it (mc_store_verify_ahead, run by
 * mc_master_conn_call_working where the caller would poll), the rest
 * while the batch moves them; it writes the trailer as one more request
 * of the same batch (client_xfer.c, put_trailers).  A reader of a range,
 * widened to the chunks it touches (client_ranges.c), reads the trailer
 * in the same batch, checks the trailer's hash, then each chunk it read
 * against its entry: a 64 KiB range moves at most 96 KiB and 8 bytes per
 * chunk of the object.  A reader of the whole object does not read the
 * trailer: it builds the trailer from the sums of the chunks that landed
 * and checks that against the trailer's hash (judge_rebuilt), which holds
 * only if every chunk is the one the writer hashed; this saves a request
 * per object, and a trailer gone bad with its value intact is left to
 * the next range read to catch.  A copy on disk (the SSD tier's, a DISK
 * file) holds the value only: a read of it is always of the whole object
 * (client_ranges.c widens a range to it), checked the same way, so a
 * byte that differs from what the writer hashed fails the read as it
 * would from memory.  A promotion from
 * disk writes the trailer it builds the same way after the bytes
 * (client_offload.c), which the next reader checks.
 */
static void hash_trailer(const struct mc_store_io *io, uint64_t *t)
{
	size_t b = 0;
	uint64_t bo = 0;

	for (uint64_t c = 0, off = 0; off < io->len; c++, off += MC_STORE_TCHUNK)
		mc_put_le64((uint8_t *)&t[c],
			    span_hash(io, off, MC_MIN(off + MC_STORE_TCHUNK, io->len), &b, &bo));
}

void mc_store_trailer_build(const void *p, uint64_t len, void *out)
{
	for (uint64_t c = 0, off = 0; off < len; c++, off += MC_STORE_TCHUNK)
		mc_put_le64(
			(uint8_t *)out + 8 * c,
			hash64((const char *)p + off, (size_t)MC_MIN(MC_STORE_TCHUNK, len - off)));
}

uint64_t mc_store_trailer_for(struct mc_store *s, uint64_t len)
{
	return s->verify && s->trailers && mc_store_trailer_fits(len) &&
			       mc_master_conn_peer_minor(s->conn) >= 10
		       ? mc_store_trailer_len(len)
		       : 0;
}

char *mc_store_verify_trailers(struct mc_store *s, struct mc_store_io *ios, size_t n)
{
	uint64_t total = 0, at = 0;
	char *tbl;

	for (size_t i = 0; i < n; i++)
		if (ios[i].tlen && ios[i].check && ios[i].status == MC_OK && s->verify)
			total += ios[i].tlen;
	if (!total)
		return NULL;
	tbl = total <= SIZE_MAX ? mc_malloc((size_t)total) : NULL;
	for (size_t i = 0; i < n; i++) {
		struct mc_store_io *io = &ios[i];

		if (!io->tlen || !io->check || io->status != MC_OK || !s->verify)
			continue;
		if (!tbl) { /* no memory: read unchecked */
			io->check = false;
			continue;
		}
		io->tbl = tbl + at;
		at += io->tlen;
	}
	return tbl;
}

static void mismatch(struct mc_store *s, struct mc_store_io *io, uint64_t got, uint64_t want);
static bool whole_table(const struct mc_store_io *io);
static void judge_rebuilt(struct mc_store *s, struct mc_store_io *io, const uint64_t *sums);

bool mc_store_verify_reads_trailer(const struct mc_store_io *io)
{
	return io->tbl && !whole_table(io);
}

/* Check a read against its object's trailer: the trailer's hash, then
 * each chunk's sum (sums[i] for its i-th chunk, hashed as it landed, or
 * hashed here when sums is NULL); the first bad one fails io.  A whole
 * read did not read the trailer: the one its bytes make is judged. */
static void judge_table(struct mc_store *s, struct mc_store_io *io, const uint64_t *sums)
{
	uint64_t got;
	size_t b = 0;
	uint64_t bo = 0;

	if (whole_table(io)) {
		judge_rebuilt(s, io, sums);
		return;
	}
	got = hash64(io->tbl, (size_t)io->tlen);
	io->checked = true;
	if (got != io->cksum) {
		mismatch(s, io, got, io->cksum);
		return;
	}
	for (uint64_t c = io->tbl_first, off = 0; off < io->len; c++, off += MC_STORE_TCHUNK) {
		uint64_t want, i = c - io->tbl_first;

		if (8 * c >= io->tlen) { /* a read past the object: cannot be */
			mismatch(s, io, 0, 0);
			return;
		}
		want = mc_get_le64((const uint8_t *)io->tbl + 8 * c);
		got = sums ? sums[i]
			   : span_hash(io, off, MC_MIN(off + MC_STORE_TCHUNK, io->len), &b, &bo);
		if (got != want) {
			mismatch(s, io, got, want);
			return;
		}
	}
}

/* Check a whole read (of memory, or of a disk copy, which has no trailer):
 * the trailer its bytes make (sums[c], hashed as chunk c landed, or hashed
 * here when sums is NULL), against the object's trailer hash.  It matches
 * only if every chunk is the one the writer hashed (but with probability
 * 2^-64), as the trailer read and checked entry by entry would. */
static void judge_rebuilt(struct mc_store *s, struct mc_store_io *io, const uint64_t *sums)
{
	uint64_t got;

	if (sums)
		for (uint64_t c = 0; 8 * c < io->tlen; c++)
			mc_put_le64((uint8_t *)io->tbl + 8 * c, sums[c]);
	else
		hash_trailer(io, (uint64_t *)(void *)io->tbl);
	got = hash64(io->tbl, (size_t)io->tlen);
	io->checked = true;
	if (got != io->cksum)
		mismatch(s, io, got, io->cksum);
}

/* The whole checksum of io and, when it has more than one chunk, the
 * checksum of each chunk (MC_STORE_CHUNK) into sums: one pass, each chunk
 * hashed on its own and then fed to the whole state while it is still in
 * the cache.  A chunk may span buffers. */
static uint64_t hash_chunks(const struct mc_store_io *io, uint64_t *sums)
{
	XXH3_state_t whole, part;
	size_t b = 0;
	uint64_t bo = 0; /* the object offset of buffer b */

	XXH3_64bits_reset(&whole);
	for (uint64_t c = 0, off = 0; off < io->len; c++) {
		uint64_t end = MC_MIN(off + MC_STORE_CHUNK, io->len);
		const char *p;
		size_t k;

		while (off - bo >= io->lens[b]) /* off < len: some buffer holds it */
			bo += io->lens[b++];
		p = (const char *)io->bufs[b] + (off - bo);
		if (io->lens[b] - (off - bo) >= end - off) { /* the chunk in one buffer */
			sums[c] = hash64(p, (size_t)(end - off));
			hash_update(&whole, p, (size_t)(end - off));
			off = end;
			continue;
		}
		XXH3_64bits_reset(&part);
		while (off < end) {
			while (off - bo >= io->lens[b])
				bo += io->lens[b++];
			p = (const char *)io->bufs[b] + (off - bo);
			k = (size_t)MC_MIN(io->lens[b] - (off - bo), end - off);
			hash_update(&part, p, k);
			hash_update(&whole, p, k);
			off += k;
		}
		sums[c] = XXH3_64bits_digest(&part);
	}
	return XXH3_64bits_digest(&whole);
}

/* Sign io's trailer (minor 10), at most max more of its chunks: the sum
 * of each into tsums, then once all are, the trailer's hash, the object's
 * checksum.  Resumes where the last call stopped (tsigned), so a write
 * may be signed in pieces, ahead of its transfer and during it.  True
 * when io is signed or will not be (verification off, device memory, no
 * memory: unsigned, read unchecked). */
static bool sign_trailer(struct mc_store *s, struct mc_store_io *io, uint64_t max)
{
	uint64_t nc = (io->len + MC_STORE_TCHUNK - 1) / MC_STORE_TCHUNK, end;
	size_t b = 0;
	uint64_t bo = 0;

	if (!io->tsums) {
		if (!s->verify || !host_only(s, io) || io->tlen != mc_store_trailer_len(io->len) ||
		    !(io->tsums = mc_malloc((size_t)io->tlen))) {
			io->sign = false;
			return true;
		}
		io->tsigned = 0;
	}
	end = nc - io->tsigned > max ? io->tsigned + max : nc;
	for (uint64_t c = io->tsigned; c < end; c++) {
		uint64_t off = c * MC_STORE_TCHUNK;

		mc_put_le64((uint8_t *)&io->tsums[c],
			    span_hash(io, off, MC_MIN(off + MC_STORE_TCHUNK, io->len), &b, &bo));
	}
	io->tsigned = end;
	if (end < nc)
		return false;
	io->cksum = hash64(io->tsums, (size_t)io->tlen);
	io->has_cksum = true;
	io->sign = false;
	return true;
}

/* Chunks (MC_STORE_TCHUNK) a piece of signing ahead hashes: 64 KiB, a few
 * microseconds, so that an answer that arrives meanwhile waits little. */
#define AHEAD_CHUNKS 4

bool mc_store_verify_ahead(void *arg)
{
	struct mc_store_ahead *a = arg;

	while (a->next < a->n) {
		struct mc_store_io *io = &a->ios[a->next];

		if (!io->sign || io->status != MC_OK || !io->tlen ||
		    sign_trailer(a->s, io, AHEAD_CHUNKS)) {
			a->next++;
			continue;
		}
		return true;
	}
	return false;
}

void mc_store_verify_sign(struct mc_store *s, struct mc_store_io *ios, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct mc_store_io *io = &ios[i];
		uint64_t nc = mc_store_chunk_count(io->len);

		if (!io->sign || io->status != MC_OK)
			continue;
		if (io->tlen) { /* minor 10: the trailer, and its hash */
			(void)sign_trailer(s, io, UINT64_MAX);
			continue;
		}
		io->sign = false; /* once, even if a later pass runs */
		if (!s->verify || !host_only(s, io))
			continue;
		io->chunk_sums = nc && nc <= UINT32_MAX ? mc_malloc(nc * sizeof(uint64_t)) : NULL;
		if (io->chunk_sums) {
			io->nchunks = (uint32_t)nc;
			io->cksum = hash_chunks(io, io->chunk_sums);
		} else {
			io->cksum = mc_store_io_hash(io); /* one chunk, or no memory */
		}
		io->has_cksum = true;
	}
}

bool mc_store_io_from_disk(const struct mc_store_io *io)
{
	return io->nreps && (io->reps[0].type == MC_STORE_REPLICA_LOCAL_DISK ||
			     io->reps[0].type == MC_STORE_REPLICA_DISK);
}

/* io reads the whole of an object with a trailer (the trailer starts
 * where the read ends, and has one sum per chunk of the read). */
static bool whole_table(const struct mc_store_io *io)
{
	return io->tlen && io->tbl_first == 0 && io->tbl_at == io->len &&
	       io->tlen == mc_store_trailer_len(io->len);
}

/* A read io that is still to be checked.  A trailer is read from memory
 * replicas; a disk copy has none, and only a whole read of it is checked
 * (by the trailer it rebuilds). */
static bool to_check(struct mc_store *s, const struct mc_store_io *io)
{
	return io->check && !io->checked && io->status == MC_OK && s->verify &&
	       (!io->tlen ||
		(io->tbl && io->nreps && io->reps[0].type == MC_STORE_REPLICA_MEMORY) ||
		(io->tbl && mc_store_io_from_disk(io) && whole_table(io))) &&
	       host_only(s, io);
}

/* A read checked by its object's trailer: its pieces are hashed as they
 * land, in any order, 16 KiB chunk by chunk (mc_store_verify_task_end). */
static bool to_land(struct mc_store *s, const struct mc_store_io *io)
{
	return io->tlen && !mc_store_io_from_disk(io) && to_check(s, io);
}

/* A read io that is still to be checked as its pieces land: a whole
 * object (a chunked read is checked after the pass, chunk by chunk). */
static bool to_stream(struct mc_store *s, const struct mc_store_io *io)
{
	return !io->chunk_want && !io->tlen && to_check(s, io);
}

/* The bytes of io are all in device memory. */
static bool device_only(struct mc_store *s, const struct mc_store_io *io)
{
	uint64_t off = 0;

	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		uint64_t n = MC_MIN((uint64_t)io->lens[b], io->len - off);

		if (n && mc_te_local_device(s->te, io->bufs[b], n) < 0)
			return false;
		off += n;
	}
	return io->len != 0;
}

/* A read of a whole object into device memory, to be checked as the
 * staging thread sees its bytes in the pinned buffers ("reads into device
 * memory" below). */
static bool to_stage(struct mc_store *s, const struct mc_store_io *io)
{
	return io->check && !io->checked && io->status == MC_OK && s->verify && !io->chunk_want &&
	       (!io->tlen ||
		(io->tbl && io->nreps && io->reps[0].type == MC_STORE_REPLICA_MEMORY)) &&
	       device_only(s, io);
}

/* Fail io, whose bytes hashed to got where want was expected. */
static void mismatch(struct mc_store *s, struct mc_store_io *io, uint64_t got, uint64_t want)
{
	if (io->cached) { /* a stale location (client_loccache.c), not a bad replica */
		io->status = MC_ERR_CHECKSUM_MISMATCH;
		return;
	}
	atomic_fetch_add(&s->metrics->checksum_mismatches, 1);
	mc_warn("%.*s: replica %" PRIx64 " failed its checksum (%016" PRIx64 ", want %016" PRIx64
		")",
		(int)MC_MIN(io->key.len, 80u), io->key.ptr ? io->key.ptr : "", io->reps[0].id, got,
		want);
	io->status = mc_set_error(MC_ERR_CHECKSUM_MISMATCH,
				  "%.*s: the bytes read do not match the object's checksum",
				  (int)MC_MIN(io->key.len, 80u), io->key.ptr ? io->key.ptr : "");
}

/* Compare io's hash with the object's; a mismatch fails io. */
static void judge(struct mc_store *s, struct mc_store_io *io, uint64_t got)
{
	io->checked = true;
	if (got != io->cksum)
		mismatch(s, io, got, io->cksum);
}

/* Check a chunked read: each chunk's bytes (they may span buffers)
 * against its sum; the first bad one fails io. */
static void judge_chunks(struct mc_store *s, struct mc_store_io *io)
{
	XXH3_state_t part;
	size_t b = 0;
	uint64_t bo = 0; /* the io offset of buffer b */

	io->checked = true;
	for (uint64_t c = 0, off = 0; off < io->len; c++) {
		uint64_t end = MC_MIN(off + MC_STORE_CHUNK, io->len), got;

		XXH3_64bits_reset(&part);
		while (off < end) {
			size_t k;

			while (off - bo >= io->lens[b])
				bo += io->lens[b++];
			k = (size_t)MC_MIN(io->lens[b] - (off - bo), end - off);
			hash_update(&part, (const char *)io->bufs[b] + (off - bo), k);
			off += k;
		}
		got = XXH3_64bits_digest(&part);
		if (got != io->chunk_want[c]) {
			mismatch(s, io, got, io->chunk_want[c]);
			return;
		}
	}
}

void mc_store_verify_check(struct mc_store *s, struct mc_store_io *ios, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!to_check(s, &ios[i]))
			continue;
		if (ios[i].tlen)
			judge_table(s, &ios[i], NULL);
		else if (ios[i].chunk_want)
			judge_chunks(s, &ios[i]);
		else
			judge(s, &ios[i], mc_store_io_hash(&ios[i]));
	}
}

uint64_t mc_store_verify_chunk(struct mc_store *s, const struct mc_store_io *io)
{
	return to_stream(s, io) || to_land(s, io) ? MC_STORE_VERIFY_CHUNK : UINT64_MAX;
}

/* Pieces of an own-segment read copied then hashed: the piece just
 * copied is still in the L2 cache when it is hashed. */
#define COPY_PIECE (64u << 10)

mc_status mc_store_verify_copy(struct mc_store *s, struct mc_store_io *io, const char *src)
{
	XXH3_state_t st;
	uint64_t off = 0;

	if (io->tlen) { /* its trailer was copied too: copied, then judged */
		for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
			size_t n = (size_t)MC_MIN((uint64_t)io->lens[b], io->len - off);

			memcpy(io->bufs[b], src + off, n);
			off += n;
		}
		judge_table(s, io, NULL);
		return io->status;
	}
	XXH3_64bits_reset(&st);
	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		size_t n = (size_t)MC_MIN((uint64_t)io->lens[b], io->len - off);
		char *dst = io->bufs[b];

		for (size_t p = 0; p < n; p += COPY_PIECE) {
			size_t k = MC_MIN(n - p, (size_t)COPY_PIECE);

			memcpy(dst + p, src + off + p, k);
			hash_update(&st, dst + p, k);
		}
		off += n;
	}
	judge(s, io, XXH3_64bits_digest(&st));
	return io->status;
}

/* ---- reads through the engine ----------------------------------------------------------------
 *
 * The pieces of an io are hashed in order, each by the thread that ended
 * it (the transport worker whose recv() just wrote the bytes, so they are
 * still in its cache) or, when it ended before the piece in front of it,
 * by the thread that ends that one.  Whoever holds an io's `busy` hashes
 * every landed piece from `next` on; a thread that finds `busy` taken
 * leaves its piece to the holder, which looks again after letting go (the
 * landed flag is stored before the exchange, busy cleared before the look:
 * one of the two sees the other).  The waiting caller sleeps in
 * mc_te_batch_wait meanwhile, and every piece has been hashed before the
 * wait returns. */

/* A chunk of a device-memory read that the staging thread showed ahead
 * of the bytes hashed: a copy, until those in front of it are. */
struct held {
	struct held *next;
	uint64_t pos, len;
	char bytes[];
};

struct vio {
	struct mc_store_io *io; /* NULL: not checked here */
	uint32_t first, end;	/* its requests */
	uint32_t next;		/* the next piece to hash; under busy */
	atomic_bool busy;
	atomic_bool failed;
	XXH3_state_t *st; /* more than one piece, or staged; else sum */
	uint64_t sum;
	/* staged (device memory): bytes hashed, chunks held; the staging
	 * thread's alone until the wait returns */
	bool staged, lost;
	uint64_t pos;
	struct held *held;
	/* checked by a trailer: the sum of each MC_STORE_TCHUNK of io (land:
	 * by whichever thread lands the piece holding it, in any order;
	 * staged: in order, by the staging thread), and for land the pieces
	 * hashed; miss: one could not be (unaligned), the check after the
	 * pass hashes them all */
	bool land;
	uint64_t *got;
	atomic_uint nland;
	atomic_bool miss;
	uint32_t npieces;
};

struct mc_store_vpass {
	const struct mc_xfer_req *reqs;
	const uint32_t *owner;
	struct vio *v; /* per io */
	size_t n;
	atomic_bool *landed; /* per request */
	uint64_t *base;	     /* per request: its offset in its io (staged and land
			      * ios; UINT64_MAX: a trailer's) */
	bool any_staged;
};

static void vpass_free(struct mc_store_vpass *vp)
{
	for (size_t i = 0; i < vp->n; i++) {
		mc_free(vp->v[i].got);
		if (vp->v[i].st)
			XXH3_freeState(vp->v[i].st);
		while (vp->v[i].held) {
			struct held *h = vp->v[i].held;
			vp->v[i].held = h->next;
			mc_free(h);
		}
	}
	mc_free(vp->v);
	mc_free(vp->landed);
	mc_free(vp->base);
	mc_free(vp);
}

struct mc_store_vpass *mc_store_verify_pass_new(struct mc_store *s, struct mc_store_io *ios,
						size_t n, const struct mc_xfer_req *reqs,
						const uint32_t *owner, size_t nreq)
{
	struct mc_store_vpass *vp;
	bool any = false;

	for (size_t k = 0; k < nreq && !any; k++)
		any = to_stream(s, &ios[owner[k]]) || to_stage(s, &ios[owner[k]]) ||
		      to_land(s, &ios[owner[k]]);
	if (!any || !(vp = mc_calloc(1, sizeof(*vp))))
		return NULL;
	vp->reqs = reqs;
	vp->owner = owner;
	vp->n = n;
	vp->v = mc_calloc(n, sizeof(*vp->v));
	vp->landed = mc_calloc(nreq, sizeof(*vp->landed));
	vp->base = mc_calloc(nreq, sizeof(*vp->base));
	if (!vp->v || !vp->landed || !vp->base)
		goto fail;
	for (size_t k = 0, end; k < nreq; k = end) {
		struct vio *v = &vp->v[owner[k]];
		bool staged = false; /* host reads: one lookup, as before */
		bool land;

		for (end = k; end < nreq && owner[end] == owner[k];)
			end++;
		land = to_land(s, &ios[owner[k]]);
		if (!to_stream(s, &ios[owner[k]]) && !(staged = to_stage(s, &ios[owner[k]])) &&
		    !land)
			continue;
		v->io = &ios[owner[k]];
		v->first = v->next = (uint32_t)k;
		v->end = (uint32_t)end;
		if (v->io->tlen) { /* the sums of its chunks */
			uint64_t at = 0;

			v->land = land && !staged;
			v->got = mc_calloc(
				(size_t)((v->io->len + MC_STORE_TCHUNK - 1) / MC_STORE_TCHUNK) + 1,
				sizeof(uint64_t));
			if (!v->got)
				goto fail;
			for (size_t j = k; j < end; j++) {
				if (reqs[j].source == v->io->tbl) {
					vp->base[j] = UINT64_MAX;
					continue;
				}
				vp->base[j] = at;
				at += reqs[j].length;
				v->npieces++;
			}
			if (v->land)
				continue;
		}
		if (staged) {
			uint64_t at = 0;

			for (size_t j = k; j < end && !v->io->tlen; j++) {
				vp->base[j] = at;
				at += reqs[j].length;
			}
			v->staged = vp->any_staged = true;
			if (!(v->st = XXH3_createState()))
				goto fail;
			XXH3_64bits_reset(v->st);
			continue;
		}
		if (end - k > 1) {
			if (!(v->st = XXH3_createState())) /* 64-byte aligned */
				goto fail;
			XXH3_64bits_reset(v->st);
		}
	}
	return vp;
fail:
	vpass_free(vp);
	return NULL;
}

void mc_store_verify_task_end(void *arg, size_t k, mc_status status)
{
	struct mc_store_vpass *vp = arg;
	struct vio *v = &vp->v[vp->owner[k]];
	uint32_t next;

	if (!v->io)
		return;
	if (status != MC_OK) {
		atomic_store(&v->failed, true); /* the wait fails io */
		return;
	}
	if (v->staged)
		return; /* hashed as the staging thread saw it */
	if (v->land) {	/* a whole number of chunks, hashed here; any order */
		uint64_t at = vp->base[k], len = vp->reqs[k].length;
		const char *src = vp->reqs[k].source;

		if (at == UINT64_MAX)
			return; /* the trailer: hashed whole after the wait */
		if (at % MC_STORE_TCHUNK || (len % MC_STORE_TCHUNK && at + len != v->io->len)) {
			atomic_store(&v->miss, true);
			return;
		}
		for (uint64_t o = 0; o < len; o += MC_STORE_TCHUNK)
			v->got[(at + o) / MC_STORE_TCHUNK] =
				hash64(src + o, (size_t)MC_MIN(len - o, (uint64_t)MC_STORE_TCHUNK));
		atomic_fetch_add(&v->nland, 1);
		return;
	}
	if (!v->st) { /* the only piece: this thread alone touches v */
		v->sum = hash64(vp->reqs[k].source, (size_t)vp->reqs[k].length);
		v->next = v->end;
		return;
	}
	atomic_store(&vp->landed[k], true);
	do {
		if (atomic_exchange(&v->busy, true))
			return; /* the holder hashes it */
		for (next = v->next; next < v->end && atomic_load(&vp->landed[next]); next++)
			hash_update(v->st, vp->reqs[next].source, (size_t)vp->reqs[next].length);
		v->next = next;
		atomic_store(&v->busy, false);
	} while (next < v->end && atomic_load(&vp->landed[next]));
}

bool mc_store_verify_pass_staged(const struct mc_store_vpass *vp)
{
	return vp && vp->any_staged;
}

/*
 * Reads into device memory.  Their bytes are in host memory only in the
 * engine's pinned staging buffers (te/stage.c), between their arrival and
 * their copy to the device; the staging thread shows each chunk there
 * (mc_te_batch_on_task_staged), and it is hashed then, in the object's
 * order: a chunk ahead of the bytes hashed so far is copied aside (held)
 * until they reach it.  What is held is bounded by the staging buffers in
 * flight (MC_GPU_STAGE_BUFFERS of MC_GPU_STAGE_CHUNK).  One staging thread
 * per engine sees every chunk of a batch, so a staged vio is that thread's
 * alone until the batch's wait returns.  A read the engine moves into
 * device memory without staging (the local transport, an own-segment
 * replica) is not seen whole, and stays unchecked.
 */
/* Feed the next len bytes of v's io, in order: to the whole hash, or, for
 * a read checked by a trailer, to each chunk's. */
static void stage_feed(struct vio *v, const char *p, uint64_t len)
{
	if (!v->got) {
		hash_update(v->st, p, (size_t)len);
		v->pos += len;
		return;
	}
	while (len) {
		uint64_t k = MC_MIN(len, MC_STORE_TCHUNK - v->pos % MC_STORE_TCHUNK);

		hash_update(v->st, p, (size_t)k);
		v->pos += k;
		p += k;
		len -= k;
		if (v->pos % MC_STORE_TCHUNK == 0 || v->pos == v->io->len) {
			v->got[(v->pos - 1) / MC_STORE_TCHUNK] = XXH3_64bits_digest(v->st);
			XXH3_64bits_reset(v->st);
		}
	}
}

static void stage_hash(struct vio *v, const void *p, uint64_t len)
{
	stage_feed(v, p, len);
	for (struct held **hp = &v->held; *hp;) {
		struct held *h = *hp;

		if (h->pos != v->pos) {
			hp = &h->next;
			continue;
		}
		stage_feed(v, h->bytes, h->len);
		*hp = h->next;
		mc_free(h);
		hp = &v->held; /* another may follow it */
	}
}

void mc_store_verify_task_staged(void *arg, size_t k, uint64_t off, const void *host, uint64_t len)
{
	struct mc_store_vpass *vp = arg;
	struct vio *v = &vp->v[vp->owner[k]];
	uint64_t pos = vp->base[k] + off;
	struct held *h;

	if (!v->io || !v->staged || v->lost || vp->base[k] == UINT64_MAX)
		return;
	if (pos == v->pos) {
		stage_hash(v, host, len);
		return;
	}
	if (!(h = mc_malloc(sizeof(*h) + (size_t)len))) {
		v->lost = true; /* no memory: this read goes unchecked */
		return;
	}
	h->pos = pos;
	h->len = len;
	memcpy(h->bytes, host, (size_t)len);
	h->next = v->held;
	v->held = h;
}

void mc_store_verify_pass_end(struct mc_store *s, struct mc_store_vpass *vp)
{
	if (!vp)
		return;
	for (size_t i = 0; i < vp->n; i++) {
		struct vio *v = &vp->v[i];

		/* the wait has returned: every piece's callback is over */
		if (!v->io || atomic_load(&v->failed))
			continue;
		if (v->staged) { /* judged when every byte was seen staged */
			if (!v->lost && v->pos == v->io->len && to_stage(s, v->io) && v->got)
				judge_table(s, v->io, v->got);
			else if (!v->lost && v->pos == v->io->len && to_stage(s, v->io))
				judge(s, v->io, XXH3_64bits_digest(v->st));
			continue;
		}
		if (v->land) { /* every piece hashed as it landed: judged here */
			if (!atomic_load(&v->miss) && atomic_load(&v->nland) == v->npieces &&
			    to_check(s, v->io))
				judge_table(s, v->io, v->got);
			continue; /* else left to mc_store_verify_check */
		}
		if (v->next != v->end || !to_check(s, v->io))
			continue; /* left to mc_store_verify_check */
		judge(s, v->io, v->st ? XXH3_64bits_digest(v->st) : v->sum);
	}
	vpass_free(vp);
}

/* ---- put sessions -----------------------------------------------------------------------------
 *
 * A session's pieces may come in any order, rewrite each other, fail, or
 * come from device memory.  What is known of each chunk (state[]):
 * CK_SUM, its sum from the source bytes of a write that covered it whole
 * (or of the in-order stream that completed it); CK_NONE or CK_DIRTY, not
 * known (never written, or written in parts, by a failed write, from
 * device memory).  The whole hash is fed in order up to `next`: by the
 * pieces that continue it, then by the staged copies of chunks written
 * whole ahead of it.  At the end, what lies after `next` (everything, when
 * a write landed behind it: `rewound`) is fed from the staged copies or
 * read back from the first replica, a chunk at a time; a chunk read back
 * whose sum was known from its source must match it (else the replica did
 * not store what was sent), the others take the sum of what was read.
 */

enum { CK_NONE, CK_DIRTY, CK_SUM };

struct mc_store_seq_hash {
	XXH3_state_t *st;	      /* the whole hash, fed in order up to next */
	XXH3_state_t *part;	      /* the chunk next lies in, fed up to next */
	uint64_t next;		      /* bytes fed to st, from offset 0 */
	uint64_t size;		      /* the object's */
	uint64_t nc;		      /* chunks tracked (at least 1) */
	uint64_t *sums;		      /* per chunk */
	uint8_t *state;		      /* per chunk, CK_* */
	char **stage;		      /* per chunk: a copy of a chunk written whole ahead of next */
	atomic_uint_fast64_t *staged; /* the client's bytes staged */
	bool rewound;		      /* a write landed behind next: all is read back */
	bool done;		      /* _complete succeeded: cksum and sums hold */
	uint64_t cksum;
};

static uint64_t chunk_len(const struct mc_store_seq_hash *h, uint64_t c)
{
	return MC_MIN((uint64_t)MC_STORE_CHUNK, h->size - c * MC_STORE_CHUNK);
}

static void unstage(struct mc_store_seq_hash *h, uint64_t c)
{
	if (!h->stage[c])
		return;
	atomic_fetch_sub(h->staged, chunk_len(h, c));
	mc_free(h->stage[c]);
	h->stage[c] = NULL;
}

struct mc_store_seq_hash *mc_store_seq_hash_new(struct mc_store *s, uint64_t size)
{
	struct mc_store_seq_hash *h;
	uint64_t nc = size ? (size + MC_STORE_CHUNK - 1) / MC_STORE_CHUNK : 1;

	if (!s->verify || nc > UINT32_MAX || !(h = mc_calloc(1, sizeof(*h))))
		return NULL;
	h->size = size;
	h->nc = nc;
	h->staged = &s->sess_staged;
	h->st = XXH3_createState(); /* 64-byte aligned */
	h->part = XXH3_createState();
	h->sums = mc_calloc(nc, sizeof(*h->sums));
	h->state = mc_calloc(nc, sizeof(*h->state));
	h->stage = mc_calloc(nc, sizeof(*h->stage));
	if (!h->st || !h->part || !h->sums || !h->state || !h->stage) {
		mc_store_seq_hash_free(h);
		return NULL;
	}
	XXH3_64bits_reset(h->st);
	XXH3_64bits_reset(h->part);
	return h;
}

/* Feed p (len bytes at h->next) to the whole hash and its chunks'. */
static void feed(struct mc_store_seq_hash *h, const char *p, uint64_t len)
{
	hash_update(h->st, p, (size_t)len);
	while (len) {
		uint64_t c = h->next / MC_STORE_CHUNK;
		uint64_t k = MC_MIN(len, c * MC_STORE_CHUNK + chunk_len(h, c) - h->next);

		hash_update(h->part, p, (size_t)k);
		p += k;
		len -= k;
		h->next += k;
		unstage(h, c); /* rewritten */
		if (h->next == c * MC_STORE_CHUNK + chunk_len(h, c)) {
			h->sums[c] = XXH3_64bits_digest(h->part);
			h->state[c] = CK_SUM;
			XXH3_64bits_reset(h->part);
		} else {
			h->state[c] = CK_DIRTY; /* in part: its sum is not known yet */
		}
	}
}

/* Let the whole hash take the staged chunks that now continue it. */
static void feed_staged(struct mc_store_seq_hash *h)
{
	uint64_t c;

	while (h->next < h->size && h->next % MC_STORE_CHUNK == 0 &&
	       h->stage[c = h->next / MC_STORE_CHUNK]) {
		hash_update(h->st, h->stage[c], (size_t)chunk_len(h, c));
		h->next += chunk_len(h, c);
		unstage(h, c);
	}
}

void mc_store_seq_hash_add(struct mc_store *s, struct mc_store_seq_hash *h, uint64_t off,
			   const void *p, uint64_t len, bool ok)
{
	uint64_t end = off + len;

	if (!h || !len || !mc_store_range_inside(off, len, h->size))
		return;
	if (h->done) { /* written again after a _complete whose end failed */
		h->done = false;
		h->rewound = true;
	}
	if (off < h->next)
		h->rewound = true; /* bytes the whole hash took are rewritten */
	if (!ok || mc_te_local_device(s->te, p, len) >= 0) {
		for (uint64_t c = off / MC_STORE_CHUNK; c <= (end - 1) / MC_STORE_CHUNK; c++) {
			unstage(h, c);
			h->state[c] = CK_DIRTY; /* read back at the end */
		}
		return;
	}
	if (!h->rewound && off == h->next) {
		feed(h, p, len);
		feed_staged(h);
		return;
	}
	for (uint64_t c = off / MC_STORE_CHUNK; c <= (end - 1) / MC_STORE_CHUNK; c++) {
		uint64_t cs = c * MC_STORE_CHUNK, cl = chunk_len(h, c);
		const char *q = (const char *)p + (cs > off ? cs - off : 0);

		unstage(h, c);
		if (off > cs || end < cs + cl) {
			h->state[c] = CK_DIRTY; /* in part */
			continue;
		}
		h->sums[c] = hash64(q, (size_t)cl);
		h->state[c] = CK_SUM;
		if (h->rewound)
			continue; /* all is read back at the end, checked against the sums */
		/* ahead of the whole hash: a copy, for it to take in order */
		if (atomic_fetch_add(h->staged, cl) + cl <= MC_STORE_SESSION_STAGE &&
		    (h->stage[c] = mc_malloc((size_t)cl)))
			memcpy(h->stage[c], q, (size_t)cl);
		else /* over the budget: read back at the end, checked */
			atomic_fetch_sub(h->staged, cl);
	}
}

/* Chunks read back at once at the end of a session. */
#define READBACK_CHUNKS 8u

mc_status mc_store_seq_hash_complete(struct mc_store *s, struct mc_store_seq_hash *h,
				     struct mc_proto_str key, const struct mc_store_replica *rep)
{
	struct mc_store_scratch sc = {0};
	mc_status rc = MC_OK;

	if (!h || h->done)
		return MC_OK;
	if (h->rewound) {
		for (uint64_t c = 0; c < h->nc; c++)
			unstage(h, c);
		XXH3_64bits_reset(h->st);
		XXH3_64bits_reset(h->part);
		h->next = 0;
		h->rewound = false;
	}
	feed_staged(h);
	if (h->next < h->size)
		rc = mc_store_scratch_get(s, &sc, READBACK_CHUNKS);
	while (rc == MC_OK && h->next < h->size) {
		struct mc_store_ranges rs;
		uint64_t c0 = h->next / MC_STORE_CHUNK, c1 = c0, at[READBACK_CHUNKS];
		size_t nread = 0;

		/* the chunks up to READBACK_CHUNKS read back, with the staged
		 * ones between them */
		while (c1 < h->nc && nread < READBACK_CHUNKS)
			if (!h->stage[c1++])
				nread++;
		rc = mc_store_ranges_init(&rs, nread, nread);
		nread = 0;
		for (uint64_t c = c0; rc == MC_OK && c < c1; c++) {
			uint64_t from = MC_MAX(h->next, c * MC_STORE_CHUNK);

			if (h->stage[c] && from == c * MC_STORE_CHUNK)
				continue;
			at[nread] = c;
			rs.ios[mc_store_ranges_add(&rs, sc.slots[nread], from,
						   c * MC_STORE_CHUNK + chunk_len(h, c) - from, rep,
						   1)]
				.key = key;
			nread++;
		}
		if (rc == MC_OK)
			mc_store_run_transfers(s, rs.ios, rs.n, MC_OP_READ);
		for (size_t k = 0; rc == MC_OK && k < rs.n; k++)
			if (rs.ios[k].status != MC_OK)
				rc = rs.ios[k].status;
		for (uint64_t c = c0, k = 0; rc == MC_OK && c < c1; c++) {
			uint64_t known = h->sums[c];
			bool was = h->state[c] == CK_SUM;

			if (k < nread && at[k] == c) {
				feed(h, sc.slots[k], rs.ios[k].len);
				k++;
				if (was && h->sums[c] != known) {
					atomic_fetch_add(&s->metrics->checksum_mismatches, 1);
					rc = mc_set_error(
						MC_ERR_CHECKSUM_MISMATCH,
						"%.*s: chunk %" PRIu64
						" read back differs from what was written",
						(int)MC_MIN(key.len, 80u), key.ptr, c);
					mc_warn("%s", mc_last_error());
				}
			} else {
				feed_staged(h);
			}
		}
		mc_store_ranges_release(&rs);
	}
	mc_store_scratch_put(s, &sc);
	if (rc == MC_OK) {
		h->cksum = XXH3_64bits_digest(h->st);
		h->done = true;
	} else if (rc != MC_ERR_CHECKSUM_MISMATCH) {
		mc_debug("%.*s: the put session's checksums are not complete: %s",
			 (int)MC_MIN(key.len, 80u), key.ptr, mc_strerror(rc));
	}
	return rc;
}

struct mc_proto_opt_u64 mc_store_seq_hash_done(const struct mc_store_seq_hash *h)
{
	struct mc_proto_opt_u64 v = {false, 0};

	if (h && h->done) {
		v.present = true;
		v.value = h->cksum;
	}
	return v;
}

struct mc_store_chunk_sums mc_store_seq_hash_chunks(const struct mc_store_seq_hash *h)
{
	struct mc_store_chunk_sums c = {0, NULL};

	if (h && h->done && mc_store_chunk_count(h->size)) {
		c.n = (uint32_t)h->nc;
		c.v = h->sums;
	}
	return c;
}

void mc_store_seq_hash_free(struct mc_store_seq_hash *h)
{
	if (!h)
		return;
	for (uint64_t c = 0; h->stage && c < h->nc; c++)
		unstage(h, c);
	if (h->st)
		XXH3_freeState(h->st);
	if (h->part)
		XXH3_freeState(h->part);
	mc_free(h->sums);
	mc_free(h->state);
	mc_free(h->stage);
	mc_free(h);
}

/* ---- reporting ------------------------------------------------------------------------------ */

void mc_store_corrupt_add(struct mc_store_corrupt *c, const struct mc_store_io *io, uint64_t t0)
{
	if (c->n == MC_STORE_CORRUPT_MAX || !io->nreps)
		return;
	/* not when the read may have outlived its lease: the block may then
	 * have been freed and rewritten under it */
	if (mc_store_read_leased(io->reps) && (mc_now_ms() - t0) * 2 >= io->lease_ttl_ms)
		return;
	for (uint32_t i = 0; i < c->n; i++)
		if (c->v[i].replica_id == io->reps[0].id && c->v[i].key.len == io->key.len &&
		    memcmp(c->v[i].key.ptr, io->key.ptr, io->key.len) == 0)
			return;
	c->v[c->n].key = io->key;
	c->v[c->n].replica_id = io->reps[0].id;
	c->n++;
}

void mc_store_report_corrupt(struct mc_store *s, const struct mc_store_corrupt *c)
{
	struct mc_store_corrupt_req req = {
		.client_id = s->client_id,
		.tenant = mc_store_tenant(s),
		.n_items = c->n,
		.items = (struct mc_store_corrupt_item *)c->v,
	};
	struct mc_store_msg resp;
	mc_status rc;

	if (!c->n)
		return;
	rc = mc_master_conn_call(s->conn, MC_STORE_REPORT_CORRUPT, &req, &resp);
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	else
		mc_debug("ReportCorrupt: %s", mc_strerror(rc));
}

/*
 * tests/unit/test_store_verify.c - end-to-end integrity of the store
 * client's reads (client_verify.c, client_ranges.c, master/corrupt.c;
 * docs/design.md "Integrity") against an in-process master over loopback:
 * bytes flipped in a holder's memory, written straight through the
 * holder's mapping (it is in this process), are caught by whole reads, by
 * each piece of a read through the engine, and by ranged reads chunk by
 * chunk.  Split out of test_store_client.c, whose fixture it shares
 * (tests/support/store_t.h): one master, clients A and B for the whole
 * run, fresh holders per case.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "master/server.h"
#include "mooncake/store.h"
#include "mooncake/te.h"
#include "store/client_int.h" /* the holders' segments and metrics */
#include "store/client_metrics.h"
#include "store/master_conn.h" /* mc_master_conn_peer_minor */
#include "store/proto.h"
#include "store_t.h"
#include "support.h"

#define SEG_SIZE  (64ull << 20)
#define LBUF_SIZE (32ull << 20)

static struct mc_store *A, *B;

/* ---- fixture ------------------------------------------------------------------ */

/* No eviction: a dropped replica must be the check's doing. */
static int group_setup(void **state)
{
	(void)state;
	return st_setup_pair(st_no_eviction, SEG_SIZE, LBUF_SIZE, &A, &B);
}

static int group_teardown(void **state)
{
	(void)state;
	st_teardown_pair(A, B);
	return 0;
}

/*
 * Integrity (client_verify.c, master/corrupt.c): a byte flipped in a
 * holder's memory, written straight through the holder's mapping (it is in
 * this process), is caught by every whole-object read form; the next
 * replica is served, bytes exact, the bad one is reported and the master
 * drops it; with no other replica the read fails with
 * MC_ERR_CHECKSUM_MISMATCH and the object goes.  A client with
 * verification off reads the flipped bytes, which is what the switch is.
 */
static void flip_first_replica(struct mc_store *s, const char *key, size_t at)
{
	struct mc_store_replica_desc d[2];

	assert_true(mc_store_get_replica_desc(s, key, d, 2) >= 1);
	((volatile char *)(uintptr_t)d[0].address)[at] ^= 0x10;
}

static void flipped_bytes_are_caught_and_the_replica_dropped(void **state)
{
	enum { OBJ = 256 << 10, N = 3 };
	struct mc_store *D = st_client_new(16 << 20, 4 << 20);
	const char *names[2] = {mc_store_hostname(D), mc_store_hostname(B)};
	struct mc_store_config two = {
		.replica_num = 2, .preferred_segments = names, .n_preferred_segments = 2};
	struct mc_store_config only_d = {.replica_num = 1,
					 .preferred_segment = mc_store_hostname(D)};
	char *obj = malloc(OBJ), *dst = malloc(N * OBJ);
	const char *keys[N] = {"ck-0", "ck-1", "ck-2"};
	void *bufs[N];
	size_t caps[N];
	int64_t res[N], rres[1];
	struct mc_store_range rg = {.dst_offset = 0, .src_offset = 0, .length = OBJ};
	struct mc_store_range_read rr = {"ck-2", dst, &rg, 1, rres};
	struct mc_store_replica_desc d[2];
	uint64_t bad0 = atomic_load(&A->metrics->checksum_mismatches);
	struct mc_store_params p = st_params(0, 0);
	struct mc_store *off = NULL;

	(void)state;
	mc_test_fill(obj, OBJ, 91);
	for (int i = 0; i < N; i++) {
		obj[0] = (char)i;
		assert_int_equal(mc_store_put(A, keys[i], obj, OBJ, &two), MC_OK);
		assert_int_equal(mc_store_get_replica_desc(A, keys[i], d, 2), 2);
		assert_string_equal(d[0].segment_name, mc_store_hostname(D)); /* read first */
	}
	/* get: the good replica, then the bad one is gone from the list */
	flip_first_replica(A, "ck-0", OBJ / 2);
	obj[0] = 0;
	st_expect_get(A, "ck-0", obj, OBJ);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 1);
	assert_int_equal(mc_store_get_replica_desc(A, "ck-0", d, 2), 1);
	assert_string_equal(d[0].segment_name, mc_store_hostname(B));
	st_expect_get(A, "ck-0", obj, OBJ); /* and reads stay good */

	/* get_into, batch_get_into, a whole-object range */
	assert_int_equal(mc_store_register_buffer(A, dst, N * OBJ), MC_OK);
	flip_first_replica(A, "ck-1", 0);
	obj[0] = 1;
	assert_int_equal(mc_store_get_into(A, "ck-1", dst, OBJ), OBJ);
	assert_memory_equal(dst, obj, OBJ);
	assert_int_equal(mc_store_get_replica_desc(A, "ck-1", d, 2), 1);
	flip_first_replica(A, "ck-2", OBJ - 1);
	memset(dst, 0, OBJ);
	assert_int_equal(mc_store_get_into_ranges(A, &rr, 1), MC_OK);
	assert_int_equal(rres[0], OBJ);
	obj[0] = 2;
	assert_memory_equal(dst, obj, OBJ);
	assert_int_equal(mc_store_get_replica_desc(A, "ck-2", d, 2), 1);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 3);
	for (int i = 0; i < N; i++) {
		bufs[i] = dst + (size_t)i * OBJ;
		caps[i] = OBJ;
	}
	{
		const char *bkeys[N] = {"ck-b0", "ck-b1", "ck-b2"};
		for (int i = 0; i < N; i++) {
			obj[0] = (char)(10 + i);
			assert_int_equal(mc_store_put(A, bkeys[i], obj, OBJ, &two), MC_OK);
		}
		flip_first_replica(A, "ck-b1", 7);
		memset(dst, 0, N * OBJ);
		assert_int_equal(mc_store_batch_get_into(A, bkeys, bufs, caps, N, res), MC_OK);
		for (int i = 0; i < N; i++) {
			obj[0] = (char)(10 + i);
			assert_int_equal(res[i], OBJ);
			assert_memory_equal(bufs[i], obj, OBJ);
		}
		assert_int_equal(mc_store_get_replica_desc(A, "ck-b1", d, 2), 1);
		assert_int_equal(mc_store_get_replica_desc(A, "ck-b0", d, 2), 2);
	}

	/* verification off: the flipped bytes come through (what the switch is) */
	assert_int_equal(mc_store_put(A, "ck-only", obj, OBJ, &only_d), MC_OK);
	flip_first_replica(A, "ck-only", 3);
	p.disable_verify = true;
	assert_int_equal(mc_store_new(&off), MC_OK);
	assert_int_equal(mc_store_setup(off, &p), MC_OK);
	{
		void *got = NULL;
		assert_int_equal(mc_store_get(off, "ck-only", &got), OBJ);
		assert_int_equal(((char *)got)[3], obj[3] ^ 0x10);
		free(got);
	}
	mc_store_free(off);

	/* one replica: the distinct code, and the object goes */
	assert_int_equal(mc_store_get_into(A, "ck-only", dst, OBJ), MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(mc_store_get_replica_desc(A, "ck-only", d, 2), MC_ERR_OBJECT_NOT_FOUND);
	/* the same when the reader holds the replica (copied, not transferred) */
	{
		struct mc_store_config own = st_prefer(A);
		assert_int_equal(mc_store_put(A, "ck-own", obj, OBJ, &own), MC_OK);
		assert_int_equal(mc_store_get_into(A, "ck-own", dst, OBJ), OBJ);
		assert_memory_equal(dst, obj, OBJ);
		flip_first_replica(A, "ck-own", OBJ - 2);
		assert_int_equal(mc_store_get_into(A, "ck-own", dst, OBJ),
				 MC_ERR_CHECKSUM_MISMATCH);
	}

	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	mc_store_free(D);
	free(obj);
	free(dst);
}

/*
 * Ranged reads are checked chunk by chunk (client_ranges.c): a range is
 * widened to the 256 KiB chunks it touches, the partly covered ones land
 * in scratch, each chunk is checked against the writer's chunk sum.  A
 * byte flipped inside the range, or outside it but inside a chunk it
 * covers in part, is caught: the other replica is served exactly and the
 * bad one dropped; one replica: MC_ERR_CHECKSUM_MISMATCH.  A byte flipped
 * in a chunk the range does not touch is not read, so not seen.  The
 * caller's buffer never receives a byte outside its ranges.
 */
enum { RG_GUARD = 4096 };

static void range_expect(struct mc_store *s, const char *key, uint64_t off, uint64_t len,
			 const char *obj, char *dst, int64_t want)
{
	struct mc_store_range rg = {.dst_offset = RG_GUARD, .src_offset = off, .length = len};
	int64_t res = 0;
	struct mc_store_range_read rr = {key, dst, &rg, 1, &res};

	memset(dst, 0xEE, len + 2 * RG_GUARD);
	(void)mc_store_get_into_ranges(s, &rr, 1);
	assert_int_equal(res, want);
	if (want >= 0)
		assert_memory_equal(dst + RG_GUARD, obj + off, len);
	for (size_t i = 0; i < RG_GUARD; i++) { /* nothing outside the range */
		assert_int_equal((unsigned char)dst[i], 0xEE);
		assert_int_equal((unsigned char)dst[RG_GUARD + len + i], 0xEE);
	}
}

/* Objects here are written as a minor-9 writer does (256 KiB chunk sums
 * kept by the master, no trailer): such objects stay readable and checked. */
static void ranges_are_checked_chunk_by_chunk(void **state)
{
	enum { C = MC_STORE_CHUNK, OBJ = 4 * C + 1000, DST = OBJ + 2 * RG_GUARD };
	struct mc_store *D = st_client_new(16 << 20, 4 << 20);
	const char *names[2] = {mc_store_hostname(D), mc_store_hostname(B)};
	struct mc_store_config two = {
		.replica_num = 2, .preferred_segments = names, .n_preferred_segments = 2};
	struct mc_store_config only_d = {.replica_num = 1,
					 .preferred_segment = mc_store_hostname(D)};
	struct mc_store_config own = st_prefer(A);
	char *obj = malloc(OBJ), *dst = malloc(DST);
	struct mc_store_replica_desc d[2];
	uint64_t bad0 = atomic_load(&A->metrics->checksum_mismatches);

	(void)state;
	A->trailers = false;
	mc_test_fill(obj, OBJ, 23);
	assert_int_equal(mc_store_register_buffer(A, dst, DST), MC_OK);
	{
		/* the keys and where their first replica gets a flipped byte */
		const char *keys[] = {"rc-in", "rc-out", "rc-far", "rc-mid", "rc-tail", "rc-last"};
		const size_t flip[] = {C + 100000, C + 1000,	   3 * C + 5,
				       C + 7,	   2 * C + 200000, OBJ - 10};
		for (size_t i = 0; i < MC_ARRAY_SIZE(keys); i++) {
			assert_int_equal(mc_store_put(A, keys[i], obj, OBJ, &two), MC_OK);
			assert_int_equal(mc_store_get_replica_desc(A, keys[i], d, 2), 2);
			assert_string_equal(d[0].segment_name, mc_store_hostname(D));
			flip_first_replica(A, keys[i], flip[i]);
		}
	}
	/* inside the range, in a chunk it covers in part */
	range_expect(A, "rc-in", C + 50000, 100000, obj, dst, 100000);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 1);
	assert_int_equal(mc_store_get_replica_desc(A, "rc-in", d, 2), 1);
	assert_string_equal(d[0].segment_name, mc_store_hostname(B));
	/* outside the range, inside a chunk it covers in part */
	range_expect(A, "rc-out", C + 50000, 100000, obj, dst, 100000);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 2);
	assert_int_equal(mc_store_get_replica_desc(A, "rc-out", d, 2), 1);
	/* in a chunk the range does not touch: not read, not seen */
	range_expect(A, "rc-far", C + 50000, 100000, obj, dst, 100000);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 2);
	assert_int_equal(mc_store_get_replica_desc(A, "rc-far", d, 2), 2);
	/* a range over three chunks: a whole middle one (read into the caller's
	 * buffer) and, beside the flipped tail chunk, partial ends */
	range_expect(A, "rc-mid", C - 3000, C + 6000, obj, dst, C + 6000);
	range_expect(A, "rc-tail", 20000, 2 * C + 100, obj, dst, 2 * C + 100);
	/* the short last chunk */
	range_expect(A, "rc-last", OBJ - 500, 400, obj, dst, 400);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 5);
	assert_int_equal(mc_store_get_replica_desc(A, "rc-tail", d, 2), 1);
	/* an unflipped replica reads well at any place */
	range_expect(A, "rc-far", 0, C, obj, dst, C);
	range_expect(A, "rc-far", 1, OBJ - 2, obj, dst, OBJ - 2);
	range_expect(A, "rc-far", 0, OBJ, obj, dst, OBJ); /* the whole: checked whole */

	/* one replica: the distinct code, the object goes */
	assert_int_equal(mc_store_put(A, "rc-one", obj, OBJ, &only_d), MC_OK);
	flip_first_replica(A, "rc-one", 2 * C + 1);
	range_expect(A, "rc-one", 2 * C + 10, 10, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(mc_store_get_replica_desc(A, "rc-one", d, 2), MC_ERR_OBJECT_NOT_FOUND);
	/* the reader's own segment (copied, not transferred) */
	assert_int_equal(mc_store_put(A, "rc-own", obj, OBJ, &own), MC_OK);
	range_expect(A, "rc-own", C + 1, 5, obj, dst, 5);
	flip_first_replica(A, "rc-own", C);
	range_expect(A, "rc-own", C + 1, 5, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	/* get sessions: their ranges are checked the same way; the one replica
	 * a session reads from fails the call and is reported */
	{
		const char *k[1] = {"rc-sess"};
		mc_status st[1];
		void *bb[1][2] = {{dst + RG_GUARD, dst + RG_GUARD + 100}};
		size_t ll[1][2] = {{100, C + 1007}}; /* to the end */
		uint64_t oo[1][2] = {{C - 50, 3 * C - 7}};
		void *const *bp[1] = {bb[0]};
		const size_t *lp[1] = {ll[0]};
		const uint64_t *op[1] = {oo[0]};
		size_t nb[1] = {2};
		int64_t res[1];

		assert_int_equal(mc_store_put(A, "rc-sess", obj, OBJ, &only_d), MC_OK);
		assert_int_equal(mc_store_batch_get_session_start(A, k, 1, st), MC_OK);
		memset(dst, 0xEE, DST);
		assert_int_equal(
			mc_store_batch_get_into_multi_buffer_ranges(A, k, bp, lp, op, nb, 1, res),
			MC_OK);
		assert_int_equal(res[0], 100 + C + 1007);
		assert_memory_equal(dst + RG_GUARD, obj + C - 50, 100);
		assert_memory_equal(dst + RG_GUARD + 100, obj + 3 * C - 7, OBJ - (3 * C - 7));
		assert_int_equal((unsigned char)dst[RG_GUARD - 1], 0xEE);
		assert_int_equal((unsigned char)dst[RG_GUARD + 100 + C + 1007], 0xEE);
		/* flipped outside both ranges, inside the partial first chunk */
		flip_first_replica(A, "rc-sess", 5);
		assert_int_equal(
			mc_store_batch_get_into_multi_buffer_ranges(A, k, bp, lp, op, nb, 1, res),
			MC_ERR_CHECKSUM_MISMATCH);
		assert_int_equal(res[0], MC_ERR_CHECKSUM_MISMATCH);
		assert_int_equal(mc_store_get_replica_desc(A, "rc-sess", d, 2),
				 MC_ERR_OBJECT_NOT_FOUND);
		assert_int_equal(mc_store_batch_get_session_end(A, k, 1), MC_OK);
	}
	/* a put session written in order signs its chunks too */
	{
		const char *k[1] = {"rc-psess"};
		uint64_t sz[1] = {OBJ};
		mc_status st[1];
		void *bb[1][2] = {{dst, dst + C + 10}};
		size_t ll[1][2] = {{C + 10, OBJ - (C + 10)}};
		uint64_t oo[1][2] = {{0, C + 10}};
		void *const *bp[1] = {bb[0]};
		const size_t *lp[1] = {ll[0]};
		const uint64_t *op[1] = {oo[0]};
		size_t nb[1] = {2};
		int64_t res[1];

		memcpy(dst, obj, OBJ); /* the source must be registered */
		assert_int_equal(mc_store_batch_put_session_start(A, k, sz, 1, &only_d, st), MC_OK);
		assert_int_equal(
			mc_store_batch_put_from_multi_buffer_ranges(A, k, bp, lp, op, nb, 1, res),
			MC_OK);
		assert_int_equal(mc_store_batch_put_session_end(A, k, 1, st), MC_OK);
		range_expect(A, "rc-psess", 3 * C + 3, 30, obj, dst, 30);
		flip_first_replica(A, "rc-psess", 3 * C + 1);
		range_expect(A, "rc-psess", 3 * C + 3, 30, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	}
	/* a batch put signs its chunks too */
	{
		const char *k[1] = {"rc-batch"};
		const void *v[1] = {obj};
		size_t l[1] = {OBJ};
		mc_status r[1];

		assert_int_equal(mc_store_put_batch(A, k, v, l, 1, &only_d, r), MC_OK);
		flip_first_replica(A, "rc-batch", 3 * C + 2);
		range_expect(A, "rc-batch", 3 * C, 1, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	}
	A->trailers = true;
	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	mc_store_free(D);
	free(obj);
	free(dst);
}

/*
 * Objects written with minor 10 carry the sums of their 16 KiB chunks in
 * a trailer after their bytes, in every replica (proto.h "Chunk-sum
 * trailers", client_verify.c "trailers"), and the master keeps the
 * trailer's hash.  A byte flipped in a piece of the object, or in a
 * chunk a range touches (outside the range too) is caught by whole reads
 * and ranges alike: the other replica is served exactly and the bad one
 * dropped; with one replica the read fails with MC_ERR_CHECKSUM_MISMATCH.
 * A whole read (into one buffer or into buffers that cut chunks anywhere)
 * does not read the trailer: it judges the one its bytes make, so a flip
 * in the stored trailer leaves it exact and the replica kept, and the
 * next range read catches it by the trailer's hash.  A flip in a chunk a
 * range does not touch is not seen by it; one in the trailer is.  Batch
 * puts and upserts (a new trailer, in place) write theirs; the reader's
 * own segment is copied and checked the same way.  An older reader (minor
 * 9) is listed the object without a checksum: it reads the bytes, checked
 * by nothing.
 */
static void trailers_catch_flips_in_pieces_trailer_and_ranges(void **state)
{
	enum { T = MC_STORE_TCHUNK, OBJ = (1 << 20) + 5, DST = OBJ + 2 * RG_GUARD };
	struct mc_store *D = st_client_new(16 << 20, 4 << 20), *E;
	const char *names[2] = {mc_store_hostname(D), mc_store_hostname(B)};
	struct mc_store_config two = {
		.replica_num = 2, .preferred_segments = names, .n_preferred_segments = 2};
	struct mc_store_config only_d = {.replica_num = 1,
					 .preferred_segment = mc_store_hostname(D)};
	struct mc_store_config own = st_prefer(A);
	char *obj = malloc(OBJ), *dst = malloc(DST);
	struct mc_store_replica_desc d[2];
	uint64_t bad0 = atomic_load(&A->metrics->checksum_mismatches);
	const uint64_t tlen = mc_store_trailer_len(OBJ);
	/* the keys and where their first replica gets a flipped byte */
	const char *keys[] = {"tr-piece", "tr-trailer", "tr-range", "tr-far", "tr-tsum"};
	const size_t flip[] = {OBJ / 2, OBJ + 8 * 3 + 1, 5 * T + 3, 20 * T, OBJ + 8 * 40};

	(void)state;
	assert_int_equal(tlen, 8 * 65);
	mc_test_fill(obj, OBJ, 57);
	assert_int_equal(mc_store_register_buffer(A, dst, DST), MC_OK);
	for (size_t i = 0; i < MC_ARRAY_SIZE(keys); i++) {
		assert_int_equal(mc_store_put(A, keys[i], obj, OBJ, &two), MC_OK);
		assert_int_equal(mc_store_get_replica_desc(A, keys[i], d, 2), 2);
		assert_string_equal(d[0].segment_name, mc_store_hostname(D));
		assert_int_equal(d[0].size, OBJ); /* the trailer is not the object's */
		flip_first_replica(A, keys[i], flip[i]);
	}
	/* a piece, caught by a whole read */
	st_expect_get(A, "tr-piece", obj, OBJ);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 1);
	assert_int_equal(mc_store_get_replica_desc(A, "tr-piece", d, 2), 1);
	assert_string_equal(d[0].segment_name, mc_store_hostname(B));
	/* the trailer: not read by a whole read, which is exact and keeps
	 * the replica; a range reads it and catches it by its hash */
	assert_int_equal(mc_store_get_into(A, "tr-trailer", dst, OBJ), OBJ);
	assert_memory_equal(dst, obj, OBJ);
	assert_int_equal(mc_store_get_replica_desc(A, "tr-trailer", d, 2), 2);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 1);
	range_expect(A, "tr-trailer", 3 * T + 1, 100, obj, dst, 100);
	assert_int_equal(mc_store_get_replica_desc(A, "tr-trailer", d, 2), 1);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 2);
	/* a whole read into buffers that cut chunks anywhere: the sums are
	 * hashed after the pass, the flip caught, the other replica served */
	{
		const char *k[1] = {"tr-sg"};
		void *bb[3] = {dst, dst + T + 5, dst + 3 * T + 1000};
		size_t ll[3] = {T + 5, 2 * T + 995, OBJ - (3 * T + 1000)};
		void *const *bp[1] = {bb};
		const size_t *lp[1] = {ll};
		size_t nb[1] = {3};
		int64_t res[1];

		assert_int_equal(mc_store_put(A, "tr-sg", obj, OBJ, &two), MC_OK);
		flip_first_replica(A, "tr-sg", 2 * T + 9);
		memset(dst, 0, OBJ);
		assert_int_equal(mc_store_batch_get_into_multi_buffers(A, k, bp, lp, nb, 1, res),
				 MC_OK);
		assert_int_equal(res[0], OBJ);
		assert_memory_equal(dst, obj, OBJ);
		assert_int_equal(mc_store_get_replica_desc(A, "tr-sg", d, 2), 1);
		assert_string_equal(d[0].segment_name, mc_store_hostname(B));
		assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 3);
		bad0++; /* tr-sg's: the counts below are of the others */
	}
	/* a 64 KiB range at an unaligned offset: chunks 5 to 9; the flip is in
	 * the partly covered first one, outside the range */
	range_expect(A, "tr-range", 5 * T + 7, 64 << 10, obj, dst, 64 << 10);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 3);
	assert_int_equal(mc_store_get_replica_desc(A, "tr-range", d, 2), 1);
	/* a chunk the range does not touch: not read, not seen */
	range_expect(A, "tr-far", 5 * T + 7, 64 << 10, obj, dst, 64 << 10);
	assert_int_equal(mc_store_get_replica_desc(A, "tr-far", d, 2), 2);
	/* the sum of an untouched chunk: the trailer's hash sees it */
	range_expect(A, "tr-tsum", 5 * T + 7, 64 << 10, obj, dst, 64 << 10);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 4);
	assert_int_equal(mc_store_get_replica_desc(A, "tr-tsum", d, 2), 1);
	/* good replicas read well at any place: ranges of one chunk, across
	 * many, the short last chunk, the whole object */
	range_expect(A, "tr-piece", 0, T, obj, dst, T);
	range_expect(A, "tr-piece", T - 1, 2, obj, dst, 2);
	range_expect(A, "tr-piece", OBJ - 3, 3, obj, dst, 3);
	range_expect(A, "tr-piece", 1, OBJ - 2, obj, dst, OBJ - 2);
	range_expect(A, "tr-piece", 0, OBJ, obj, dst, OBJ);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 4);

	/* one replica: the distinct code, the object goes */
	assert_int_equal(mc_store_put(A, "tr-one", obj, OBJ, &only_d), MC_OK);
	flip_first_replica(A, "tr-one", 9 * T + 1);
	range_expect(A, "tr-one", 9 * T + 10, 10, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(mc_store_get_replica_desc(A, "tr-one", d, 2), MC_ERR_OBJECT_NOT_FOUND);
	/* the reader's own segment: copied, then checked */
	assert_int_equal(mc_store_put(A, "tr-own", obj, OBJ, &own), MC_OK);
	range_expect(A, "tr-own", T + 1, 5, obj, dst, 5);
	flip_first_replica(A, "tr-own", OBJ + tlen - 1);
	assert_int_equal(mc_store_get_into(A, "tr-own", dst, OBJ), OBJ); /* trailer not read */
	assert_memory_equal(dst, obj, OBJ);
	range_expect(A, "tr-own", T + 1, 5, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	/* a batch put writes its trailers */
	{
		const char *k[2] = {"tr-b0", "tr-b1"};
		const void *v[2] = {obj, obj};
		size_t l[2] = {OBJ, 3 * T};
		mc_status r[2];

		assert_int_equal(mc_store_put_batch(A, k, v, l, 2, &only_d, r), MC_OK);
		range_expect(A, "tr-b1", T + 2, T, obj, dst, T);
		flip_first_replica(A, "tr-b0", 3 * T + 2);
		range_expect(A, "tr-b0", 3 * T, 1, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	}
	/* an upsert in place writes a new trailer; one to a size without a
	 * trailer too (its reads are checked whole) */
	{
		char *obj2 = malloc(OBJ);

		mc_test_fill(obj2, OBJ, 58);
		assert_int_equal(mc_store_put(A, "tr-ups", obj, OBJ, &only_d), MC_OK);
		assert_int_equal(mc_store_upsert(A, "tr-ups", obj2, OBJ, &only_d), MC_OK);
		st_expect_get(A, "tr-ups", obj2, OBJ);
		range_expect(A, "tr-ups", 7 * T - 1, 3, obj2, dst, 3);
		assert_int_equal(mc_store_upsert(A, "tr-ups", obj2, T, &only_d), MC_OK);
		st_expect_get(A, "tr-ups", obj2, T);
		free(obj2);
	}
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 7);
	/* a copy task copies the trailer too: the copy serves when the
	 * original goes bad (the holder's heartbeat runs the task; polled) */
	{
		struct mc_store_task_uuid id;
		struct mc_store_task_state ts = {.status = 0};
		const char *to[1] = {mc_store_hostname(B)};

		assert_int_equal(mc_store_put(A, "tr-copy", obj, OBJ, &only_d), MC_OK);
		assert_int_equal(mc_store_create_copy_task(A, "tr-copy", to, 1, &id), MC_OK);
		for (int i = 0; i < 600 && ts.status != 2 && ts.status != 3; i++) {
			struct timespec nap = {0, 50 * 1000 * 1000};

			assert_int_equal(mc_store_query_task(A, &id, &ts), MC_OK);
			nanosleep(&nap, NULL);
		}
		assert_int_equal(ts.status, 3);
		assert_int_equal(mc_store_get_replica_desc(A, "tr-copy", d, 2), 2);
		assert_string_equal(d[0].segment_name, mc_store_hostname(D));
		flip_first_replica(A, "tr-copy", OBJ / 3);
		range_expect(A, "tr-copy", OBJ / 3 - 5, 64 << 10, obj, dst, 64 << 10);
		st_expect_get(A, "tr-copy", obj, OBJ);
		assert_int_equal(mc_store_get_replica_desc(A, "tr-copy", d, 2), 1);
	}
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 8);

	/* an older reader: listed no checksum, it reads what is there */
	assert_int_equal(mc_store_put(A, "tr-old", obj, OBJ, &only_d), MC_OK);
	flip_first_replica(A, "tr-old", 100);
	mc_store_proto_minor_set(9);
	E = st_client_new(16 << 20, 4 << 20);
	assert_int_equal(mc_master_conn_peer_minor(E->conn), 9);
	{
		void *got = NULL;

		assert_int_equal(mc_store_get(E, "tr-old", &got), OBJ);
		assert_int_equal(((char *)got)[100], obj[100] ^ 0x10);
		assert_memory_equal((char *)got + 101, obj + 101, OBJ - 101);
		free(got);
	}
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	assert_int_equal(atomic_load(&E->metrics->checksum_mismatches), 0);
	mc_store_free(E);
	/* a reader of minor 10 catches it */
	assert_int_equal(mc_store_get_into(A, "tr-old", dst, OBJ), MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 9);

	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	mc_store_free(D);
	free(obj);
	free(dst);
}

/* Polls task id until it ends; its status (3: done). */
static int task_wait(struct mc_store *s, const struct mc_store_task_uuid *id)
{
	struct mc_store_task_state ts = {.status = 0};

	for (int i = 0; i < 600 && ts.status != 2 && ts.status != 3; i++) {
		struct timespec nap = {0, 50 * 1000 * 1000};

		assert_int_equal(mc_store_query_task(s, id, &ts), MC_OK);
		nanosleep(&nap, NULL);
	}
	return ts.status;
}

/*
 * Every put path leaves its object with a right trailer, or with none and
 * minor 9's chunk sums: multi-buffer puts and upserts (each part sent from
 * where it lies), a zero-copy put from a registered buffer, a batch
 * multi-buffer put, an upsert to another size (new blocks), a move task
 * (the trailer moves with the bytes) and a writer whose master session
 * speaks minor 9 (no trailer).  Each object then reads exact through an
 * unaligned range, and a byte flipped inside that range fails it.
 */
static void every_put_path_leaves_a_checked_object(void **state)
{
	enum { T = MC_STORE_TCHUNK, OBJ = (512 << 10) + 3, DST = OBJ + 2 * RG_GUARD };
	enum { OFF = 3 * T + 11, LEN = 40000 };
	struct mc_store *D = st_client_new(16 << 20, 4 << 20), *F;
	struct mc_store_config only_d = {.replica_num = 1,
					 .preferred_segment = mc_store_hostname(D)};
	char *obj = malloc(OBJ), *dst = malloc(DST), *src = malloc(OBJ);
	const void *parts[3];
	size_t plens[3] = {1000, 5 * T + 3 - 1000, OBJ - (5 * T + 3)};
	struct mc_store_replica_desc d[2];
	struct mc_store_task_uuid id;
	const char *keys[] = {"pp-parts",  "pp-uparts", "pp-from",  "pp-multi",
			      "pp-resize", "pp-move",	"pp-minor9"};

	(void)state;
	A->trailers = true;
	mc_test_fill(obj, OBJ, 91);
	memcpy(src, obj, OBJ);
	parts[0] = obj;
	parts[1] = obj + plens[0];
	parts[2] = obj + plens[0] + plens[1];
	assert_int_equal(mc_store_register_buffer(A, dst, DST), MC_OK);
	assert_int_equal(mc_store_register_buffer(A, src, OBJ), MC_OK);
	assert_int_equal(mc_store_put_parts(A, "pp-parts", parts, plens, 3, &only_d), MC_OK);
	assert_int_equal(mc_store_upsert_parts(A, "pp-uparts", parts, plens, 3, &only_d), MC_OK);
	assert_int_equal(mc_store_put_from(A, "pp-from", src, OBJ, &only_d), MC_OK);
	{
		const char *k[1] = {"pp-multi"};
		void *b[2] = {src, src + 7 * T + 5};
		size_t l[2] = {7 * T + 5, OBJ - (7 * T + 5)}, nb[1] = {2};
		void *const *bb[1] = {b};
		const size_t *ll[1] = {l};
		mc_status r[1];

		assert_int_equal(
			mc_store_batch_put_from_multi_buffers(A, k, bb, ll, nb, 1, &only_d, r),
			MC_OK);
	}
	assert_int_equal(mc_store_put(A, "pp-resize", obj, 3 * T + 1, &only_d), MC_OK);
	assert_int_equal(mc_store_upsert(A, "pp-resize", obj, OBJ, &only_d), MC_OK);
	assert_int_equal(mc_store_put(A, "pp-move", obj, OBJ, &only_d), MC_OK);
	assert_int_equal(mc_store_create_move_task(A, "pp-move", mc_store_hostname(D),
						   mc_store_hostname(B), &id),
			 MC_OK);
	assert_int_equal(task_wait(A, &id), 3);
	assert_int_equal(mc_store_get_replica_desc(A, "pp-move", d, 2), 1);
	assert_string_equal(d[0].segment_name, mc_store_hostname(B));
	/* a master session of minor 9: the writer asks for no trailer */
	mc_store_proto_minor_set(9);
	F = st_client_new(16 << 20, 4 << 20);
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	assert_int_equal(mc_master_conn_peer_minor(F->conn), 9);
	F->trailers = true;
	assert_int_equal(mc_store_put(F, "pp-minor9", obj, OBJ, &only_d), MC_OK);
	mc_store_free(F);

	for (size_t i = 0; i < MC_ARRAY_SIZE(keys); i++) {
		assert_int_equal(mc_store_get_replica_desc(A, keys[i], d, 2), 1);
		assert_int_equal(d[0].size, OBJ);
		range_expect(A, keys[i], OFF, LEN, obj, dst, LEN);
		flip_first_replica(A, keys[i], OFF + LEN / 2);
		range_expect(A, keys[i], OFF, LEN, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	}
	assert_int_equal(mc_store_unregister_buffer(A, src), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	mc_store_free(D);
	free(obj);
	free(src);
	free(dst);
}

/*
 * A put signs its bytes ahead, while its Start is in flight, a few chunks
 * per piece of work (mc_store_verify_ahead), and the rest after its
 * transfer began (mc_store_verify_sign): signed in any split, across
 * buffers that cut chunks anywhere, the trailer and the checksum are
 * those of the whole object signed at once, and the trailer built from
 * contiguous bytes; a write that verification does not sign gets nothing.
 */
static void a_write_signed_in_pieces_is_signed_as_at_once(void **state)
{
	enum { T = MC_STORE_TCHUNK, OBJ = 13 * T + 777 }; /* 14 chunks */
	char *obj = malloc(OBJ);
	void *bufs[3] = {obj, obj + 1000, obj + 5 * T + 3};
	size_t lens[3] = {1000, 5 * T + 3 - 1000, OBJ - (5 * T + 3)};
	uint64_t tlen = mc_store_trailer_len(OBJ);
	char *want = malloc(tlen);
	struct mc_store_io whole, io;
	struct mc_store_ahead ahead;

	(void)state;
	mc_test_fill(obj, OBJ, 17);
	mc_store_trailer_build(obj, OBJ, want);
	memset(&whole, 0, sizeof(whole));
	whole.bufs = bufs;
	whole.lens = lens;
	whole.nbufs = 3;
	whole.len = OBJ;
	whole.tlen = tlen;
	whole.sign = true;
	mc_store_verify_sign(A, &whole, 1);
	assert_true(whole.has_cksum);
	assert_memory_equal(whole.tsums, want, tlen);

	/* ahead until done: 4 chunks a piece, so 4 pieces, the last says done */
	io = whole;
	io.tsums = NULL;
	io.has_cksum = false;
	io.cksum = 0;
	io.sign = true;
	ahead = (struct mc_store_ahead){.s = A, .ios = &io, .n = 1};
	for (int piece = 1; piece <= 3; piece++) {
		assert_true(mc_store_verify_ahead(&ahead));
		assert_false(io.has_cksum);
		assert_int_equal(io.tsigned, 4 * piece);
	}
	assert_false(mc_store_verify_ahead(&ahead));
	assert_true(io.has_cksum);
	assert_false(io.sign);
	assert_true(io.cksum == whole.cksum);
	assert_memory_equal(io.tsums, want, tlen);
	mc_store_verify_sign(A, &io, 1); /* signed: nothing more */
	assert_true(io.cksum == whole.cksum);
	mc_store_io_sums_free(&io);

	/* one piece ahead, the rest after */
	io.sign = true;
	io.has_cksum = false;
	io.cksum = 0;
	ahead = (struct mc_store_ahead){.s = A, .ios = &io, .n = 1};
	assert_true(mc_store_verify_ahead(&ahead));
	assert_int_equal(io.tsigned, 4);
	mc_store_verify_sign(A, &io, 1);
	assert_true(io.has_cksum);
	assert_true(io.cksum == whole.cksum);
	assert_memory_equal(io.tsums, want, tlen);
	mc_store_io_sums_free(&io);

	/* verification off: not signed, ahead or after */
	A->verify = false;
	io.sign = true;
	io.has_cksum = false;
	ahead = (struct mc_store_ahead){.s = A, .ios = &io, .n = 1};
	assert_false(mc_store_verify_ahead(&ahead));
	mc_store_verify_sign(A, &io, 1);
	A->verify = true;
	assert_false(io.has_cksum);
	assert_null(io.tsums);

	mc_store_io_sums_free(&whole);
	free(want);
	free(obj);
}

/*
 * A checked read through the engine moves in 128 KiB pieces, each hashed
 * in order by the thread that ends it (client_verify.c): a byte flipped in
 * the first piece, in a middle one or in the short last one is caught, in
 * a batch beside objects of one piece and of many that are good, and the
 * good ones arrive exact.
 */
static void flipped_byte_in_any_piece_is_caught(void **state)
{
	enum { BIG = (1 << 20) + 1000, SMALL = 3000, N = 5 };
	struct mc_store *D = st_client_new(16 << 20, 4 << 20);
	struct mc_store_config on_d = {.replica_num = 1, .preferred_segment = mc_store_hostname(D)};
	const char *keys[N] = {"pc-small", "pc-good", "pc-first", "pc-last", "pc-mid"};
	const size_t len[N] = {SMALL, BIG, BIG, BIG, BIG};
	char *obj = malloc(BIG), *dst = malloc((size_t)N * BIG);
	uint64_t bad0 = atomic_load(&A->metrics->checksum_mismatches);
	void *bufs[N];
	size_t caps[N];
	int64_t res[N];

	(void)state;
	mc_test_fill(obj, BIG, 17);
	for (int i = 0; i < N; i++) {
		obj[1] = (char)i;
		assert_int_equal(mc_store_put(A, keys[i], obj, len[i], &on_d), MC_OK);
		bufs[i] = dst + (size_t)i * BIG;
		caps[i] = BIG;
	}
	flip_first_replica(A, "pc-first", 0);
	flip_first_replica(A, "pc-last", BIG - 1); /* in the 1000-byte last piece */
	flip_first_replica(A, "pc-mid", (5 << 17) + 3);
	assert_int_equal(mc_store_register_buffer(A, dst, (size_t)N * BIG), MC_OK);
	memset(dst, 0, (size_t)N * BIG);
	/* the call reports its keys' failure; each key has its own result */
	assert_int_equal(mc_store_batch_get_into(A, keys, bufs, caps, 4, res),
			 MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(res[0], SMALL);
	assert_int_equal(res[1], BIG);
	assert_int_equal(res[2], MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(res[3], MC_ERR_CHECKSUM_MISMATCH);
	for (int i = 0; i < 2; i++) {
		obj[1] = (char)i;
		assert_memory_equal(bufs[i], obj, len[i]);
	}
	assert_int_equal(mc_store_get_into(A, "pc-mid", dst, BIG), MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 3);
	/* the good ones read again, one at a time */
	memset(dst, 0, BIG);
	obj[1] = 1;
	assert_int_equal(mc_store_get_into(A, "pc-good", dst, BIG), BIG);
	assert_memory_equal(dst, obj, BIG);
	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	mc_store_free(D);
	free(obj);
	free(dst);
}

/*
 * A put session written out of order signs its object too
 * (client_verify.c, "put sessions"): chunks written whole ahead of the
 * bytes hashed are staged, chunks written in parts are read back at the
 * end.  Reverse order in whole chunks, random order in unaligned pieces,
 * a rewrite behind what was hashed, a piece from the middle of a chunk
 * only: each object gets the same checksum and chunk sums a plain put
 * gets (a flipped byte is then caught by a whole read and by a range),
 * and a replica that no longer holds what was written when the session
 * ends fails the end with MC_ERR_CHECKSUM_MISMATCH.
 */
static void session_put(struct mc_store *s, const char *key, char *src, uint64_t size,
			const uint64_t *offs, const size_t *lens, size_t n,
			const struct mc_store_config *cfg, struct mc_store *holder,
			mc_status want_end)
{
	const char *k[1] = {key};
	uint64_t sz[1] = {size};
	mc_status st[1];

	assert_int_equal(mc_store_batch_put_session_start(s, k, sz, 1, cfg, st), MC_OK);
	for (size_t i = 0; i < n; i++) { /* one call per piece: their order is the test */
		void *bb[1] = {src + offs[i]};
		size_t ll[1] = {lens[i]};
		uint64_t oo[1] = {offs[i]};
		void *const *bp[1] = {bb};
		const size_t *lp[1] = {ll};
		const uint64_t *op[1] = {oo};
		size_t nb[1] = {1};
		int64_t res[1];

		assert_int_equal(
			mc_store_batch_put_from_multi_buffer_ranges(s, k, bp, lp, op, nb, 1, res),
			MC_OK);
		assert_int_equal(res[0], (int64_t)lens[i]);
	}
	if (want_end == MC_ERR_CHECKSUM_MISMATCH) { /* the replica changed under the session */
		/* not listed before its end: found by its bytes in the holder */
		char *at = memmem(holder->seg, holder->seg_size, src, 4096);

		assert_non_null(at);
		at[size / 2] ^= 0x10;
	}
	assert_int_equal(mc_store_batch_put_session_end(s, k, 1, st), want_end);
}

static void out_of_order_sessions_are_signed(void **state)
{
	enum { C = MC_STORE_CHUNK, OBJ = 6 * C + 777, DST = OBJ + 2 * RG_GUARD, NP = 24 };
	struct mc_store *D = st_client_new(32 << 20, 4 << 20);
	struct mc_store_config only_d = {.replica_num = 1,
					 .preferred_segment = mc_store_hostname(D)};
	char *obj = malloc(OBJ), *src = malloc(OBJ), *dst = malloc(DST);
	uint64_t offs[NP];
	size_t lens[NP], np;
	uint64_t bad0 = atomic_load(&A->metrics->checksum_mismatches);
	unsigned seed = 99;

	(void)state;
	mc_test_fill(obj, OBJ, 31);
	memcpy(src, obj, OBJ);
	assert_int_equal(mc_store_register_buffer(A, src, OBJ), MC_OK);
	assert_int_equal(mc_store_register_buffer(A, dst, DST), MC_OK);
	/* reverse order, whole chunks (the short last one first): staged */
	for (np = 0; np < 7; np++) {
		offs[np] = (uint64_t)(6 - np) * C;
		lens[np] = np ? C : 777;
	}
	session_put(A, "oo-rev", src, OBJ, offs, lens, np, &only_d, D, MC_OK);
	/* random order, unaligned pieces of 100000 bytes or less: read back */
	np = 0;
	for (uint64_t o = 0; o < OBJ; np++) {
		offs[np] = o;
		lens[np] = (size_t)MC_MIN((uint64_t)(100000 - 1000 * np), OBJ - o);
		o += lens[np];
	}
	assert_true(np <= NP);
	for (size_t i = np - 1; i > 0; i--) { /* Fisher-Yates */
		size_t j = (size_t)rand_r(&seed) % (i + 1);
		uint64_t to = offs[i];
		size_t tl = lens[i];

		offs[i] = offs[j], lens[i] = lens[j];
		offs[j] = to, lens[j] = tl;
	}
	session_put(A, "oo-rand", src, OBJ, offs, lens, np, &only_d, D, MC_OK);
	/* in order to the middle, a rewrite behind it, then the rest: all read back */
	{
		const uint64_t o[] = {0, 3 * C, C + 5, 3 * C};
		const size_t l[] = {3 * C, OBJ - 3 * C, 1000, OBJ - 3 * C};
		session_put(A, "oo-back", src, OBJ, o, l, 4, &only_d, D, MC_OK);
	}
	/* every one reads back exactly, checked whole and by range */
	{
		const char *keys[] = {"oo-rev", "oo-rand", "oo-back"};
		for (size_t i = 0; i < MC_ARRAY_SIZE(keys); i++) {
			st_expect_get(A, keys[i], obj, OBJ);
			range_expect(A, keys[i], 2 * C - 9, C + 20, obj, dst, C + 20);
		}
	}
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0);
	/* a flipped byte is caught by a range and by a whole read */
	flip_first_replica(A, "oo-rev", 4 * C + 3);
	range_expect(A, "oo-rev", 4 * C, 10, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(mc_store_get_into(A, "oo-rand", dst, OBJ), OBJ);
	flip_first_replica(A, "oo-rand", 5 * C + 100);
	assert_int_equal(mc_store_get_into(A, "oo-rand", dst, OBJ), MC_ERR_CHECKSUM_MISMATCH);
	flip_first_replica(A, "oo-back", C + 5);
	range_expect(A, "oo-back", C + 4, 3, obj, dst, MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 3);
	/* the chunks a rewrite left to be read back, checked against what
	 * was sent: the replica changed before the end, the session fails */
	{
		const uint64_t o[] = {0, 0};
		const size_t l[] = {OBJ, OBJ};
		struct mc_store_replica_desc d[1];

		mc_test_fill(src, OBJ, 37); /* bytes no other object has */
		session_put(A, "oo-flip", src, OBJ, o, l, 2, &only_d, D, MC_ERR_CHECKSUM_MISMATCH);
		assert_int_equal(mc_store_get_replica_desc(A, "oo-flip", d, 1),
				 MC_ERR_OBJECT_NOT_FOUND);
	}
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 4);
	assert_int_equal(atomic_load(&A->sess_staged), 0);
	/* the client's staging budget nearly spent (as if other sessions held
	 * it): one chunk is staged, the others written whole are read back
	 * and checked against the sums of what was sent */
	atomic_fetch_add(&A->sess_staged, MC_STORE_SESSION_STAGE - C);
	for (np = 0; np < 7; np++) {
		offs[np] = (uint64_t)(6 - np) * C;
		lens[np] = np ? C : 777;
	}
	session_put(A, "oo-budget", src, OBJ, offs, lens, np, &only_d, D, MC_OK);
	{
		char *got = malloc(OBJ);

		memcpy(got, src, OBJ);
		st_expect_get(A, "oo-budget", got, OBJ);
		mc_test_fill(src, OBJ, 41); /* bytes no other object has */
		session_put(A, "oo-budget-flip", src, OBJ, offs, lens, np, &only_d, D,
			    MC_ERR_CHECKSUM_MISMATCH);
		free(got);
	}
	assert_int_equal(atomic_load(&A->metrics->checksum_mismatches), bad0 + 5);
	assert_int_equal(atomic_load(&A->sess_staged), MC_STORE_SESSION_STAGE - C);
	atomic_fetch_sub(&A->sess_staged, MC_STORE_SESSION_STAGE - C);
	assert_int_equal(mc_store_unregister_buffer(A, src), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	mc_store_free(D);
	free(obj);
	free(src);
	free(dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(flipped_bytes_are_caught_and_the_replica_dropped),
		cmocka_unit_test(flipped_byte_in_any_piece_is_caught),
		cmocka_unit_test(ranges_are_checked_chunk_by_chunk),
		cmocka_unit_test(trailers_catch_flips_in_pieces_trailer_and_ranges),
		cmocka_unit_test(every_put_path_leaves_a_checked_object),
		cmocka_unit_test(out_of_order_sessions_are_signed),
		cmocka_unit_test(a_write_signed_in_pieces_is_signed_as_at_once),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

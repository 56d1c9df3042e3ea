/*
 * tests/unit/test_store_client.c - the store client (mooncake/store.h and
 * upstream's store_c.h) against an in-process master over loopback.
 *
 * One master (master/server.h) with its embedded HTTP metadata server
 * serves the whole program; two clients, A and B, each with its own
 * engine, segment and local buffer, live for the whole run, and cases that
 * need a fresh client make their own.  Cases use distinct keys so their
 * order does not matter.  The connection layer's failure paths (foreign
 * protocol version, a master that stops answering, a dropped connection)
 * are driven by a tiny scripted fake master instead.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/sock.h"
#include "base/time.h"
#include "master/server.h"
#include "mooncake/store.h"
#include "mooncake/store_c.h"
#include "mooncake/te.h"
#include "store/client_config.h"
#include "store/client_int.h" /* a holder's segment pulled from under its engine */
#include "store/client_metrics.h"
#include "store/master_conn.h"
#include "store/proto.h"
#include "store_t.h"
#include "support.h"

#define SEG_SIZE  (64ull << 20)
#define LBUF_SIZE (32ull << 20)

static struct mc_store *A, *B;

/* ---- fixture ------------------------------------------------------------------ */

static void set_str(char **field, const char *v)
{
	mc_free(*field);
	*field = mc_strdup(v);
}

/* No eviction in these tests: a deliberate -200 (errors_are_typed) would
 * otherwise make the next tick evict unleased objects that later cases
 * read back.  Eviction has its own tests in test_master.c. */
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

/* ---- put / get --------------------------------------------------------------------- */

/* Every combination of writer, replica owner and reader: the local memcpy
 * paths and the TCP paths in both directions. */
static void put_get_across_clients(void **state)
{
	struct mc_store *who[2] = {A, B};
	size_t len = 1 << 20;
	char *v = malloc(len);
	(void)state;
	for (int w = 0; w < 2; w++) {
		for (int owner = 0; owner < 2; owner++) {
			struct mc_store_config c = st_prefer(who[owner]);
			char key[64];
			snprintf(key, sizeof(key), "across-%d-%d", w, owner);
			mc_test_fill(v, len, (uint64_t)(w * 2 + owner + 1));
			assert_int_equal(mc_store_put(who[w], key, v, len, &c), MC_OK);
			st_expect_get(A, key, v, len);
			st_expect_get(B, key, v, len);
		}
	}
	free(v);
}

static void put_existing_key_keeps_first_value(void **state)
{
	char v1[100], v2[200];
	(void)state;
	mc_test_fill(v1, sizeof(v1), 11);
	mc_test_fill(v2, sizeof(v2), 12);
	assert_int_equal(mc_store_put(A, "keep", v1, sizeof(v1), NULL), MC_OK);
	assert_int_equal(mc_store_put(B, "keep", v2, sizeof(v2), NULL), MC_OK);
	st_expect_get(B, "keep", v1, sizeof(v1));
}

static void upsert_overwrites(void **state)
{
	char v1[4096], v2[4096], v3[100];
	(void)state;
	mc_test_fill(v1, sizeof(v1), 21);
	mc_test_fill(v2, sizeof(v2), 22);
	mc_test_fill(v3, sizeof(v3), 23);
	assert_int_equal(mc_store_upsert(A, "ups", v1, sizeof(v1), NULL), MC_OK);
	st_expect_get(B, "ups", v1, sizeof(v1));
	assert_int_equal(mc_store_upsert(B, "ups", v2, sizeof(v2), NULL), MC_OK); /* same size */
	st_expect_get(A, "ups", v2, sizeof(v2));
	assert_int_equal(mc_store_upsert(A, "ups", v3, sizeof(v3), NULL), MC_OK); /* new size */
	st_expect_get(B, "ups", v3, sizeof(v3));
	assert_int_equal(mc_store_get_size(A, "ups"), sizeof(v3));
}

static void put_parts_concatenates(void **state)
{
	char a[10] = "0123456789", b[5] = "abcde", whole[15];
	const void *parts[2] = {a, b};
	size_t lens[2] = {sizeof(a), sizeof(b)};
	(void)state;
	memcpy(whole, a, 10);
	memcpy(whole + 10, b, 5);
	assert_int_equal(mc_store_put_parts(A, "parts", parts, lens, 2, NULL), MC_OK);
	st_expect_get(B, "parts", whole, sizeof(whole));
}

/* ---- zero copy ------------------------------------------------------------------------ */

static void put_from_get_into_registered(void **state)
{
	size_t len = 4 << 20;
	char *src = malloc(len), *dst = malloc(len + 64);
	struct mc_store_config c = st_prefer(B);
	(void)state;
	mc_test_fill(src, len, 31);
	assert_int_equal(mc_store_register_buffer(A, src, len), MC_OK);
	assert_int_equal(mc_store_register_buffer(B, dst, len + 64), MC_OK);
	assert_int_equal(mc_store_put_from(A, "zc", src, len, &c), MC_OK);
	memset(dst, 0, len);
	assert_int_equal(mc_store_get_into(B, "zc", dst, len + 64), len);
	assert_memory_equal(dst, src, len);
	/* capacity below the object size */
	assert_int_equal(mc_store_get_into(B, "zc", dst, len - 1), MC_ERR_INVALID_PARAMS);
	/* zero length is a no-op */
	assert_int_equal(mc_store_put_from(A, "zc-empty", src, 0, NULL), MC_OK);
	assert_int_equal(mc_store_is_exist(A, "zc-empty"), 0);
	assert_int_equal(mc_store_upsert_from(A, "zc", src + 1, len - 1, NULL), MC_OK);
	assert_int_equal(mc_store_get_into(B, "zc", dst, len), len - 1);
	assert_memory_equal(dst, src + 1, len - 1);
	assert_int_equal(mc_store_unregister_buffer(A, src), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(B, dst), MC_OK);
	assert_int_not_equal(mc_store_unregister_buffer(B, dst), MC_OK);
	free(src);
	free(dst);
}

/* Zero-copy buffers must lie inside one registered buffer: a size past it,
 * a wild pointer or unregistered memory is refused before the master is
 * asked (nothing is stored) and no byte outside the buffer changes. */
static void zero_copy_buffers_must_be_registered(void **state)
{
	enum { PG = 4096 };
	char *m = malloc(4 * PG), *wild = (char *)(uintptr_t)0x10;
	struct mc_store_config c = st_prefer(B);
	const char *key = "zc-checked";
	void *one[1] = {m}, *two[2] = {m, m + PG};
	size_t len1[1] = {2 * PG}, len2[2] = {PG, PG}, nb2[1] = {2};
	void *const *bufs2[1] = {two};
	const size_t *lens2[1] = {len2};
	mc_status st;
	int64_t got;
	(void)state;
	memset(m, 0x3c, 4 * PG);
	assert_int_equal(mc_store_register_buffer(A, m, PG), MC_OK); /* the first page only */
	assert_int_equal(mc_store_put_from(A, key, m, 2 * PG, &c), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_put_from(A, key, wild, PG, &c), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_put_from(A, &key, one, len1, 1, &c, &st),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(st, MC_ERR_INVALID_PARAMS);
	assert_int_equal(
		mc_store_batch_put_from_multi_buffers(A, &key, bufs2, lens2, nb2, 1, &c, &st),
		MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_is_exist(A, key), 0);
	assert_int_equal(mc_store_put_from(A, key, m, PG, &c), MC_OK);
	/* reads: the capacity passed is what must be registered */
	assert_int_equal(mc_store_get_into(A, key, m, 2 * PG), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_get_into(A, key, wild, PG), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_get_into(A, key, m + 8, PG), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_get_into(A, &key, one, len1, 1, &got),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(got, MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_get_into_multi_buffers(A, &key, bufs2, lens2, nb2, 1, &got),
			 MC_ERR_INVALID_PARAMS);
	for (int i = PG; i < 4 * PG; i++)
		assert_int_equal((unsigned char)m[i], 0x3c);
	assert_int_equal(mc_store_check_buffer(A, m, PG), MC_OK);
	assert_int_equal(mc_store_check_buffer(A, m + 1, PG), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_check_buffer(A, wild, 0), MC_OK);
	assert_int_equal(mc_store_get_into(A, key, m, PG), PG);
	assert_int_equal(mc_store_remove(A, key, true), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(A, m), MC_OK);
	free(m);
}

/* ---- batches --------------------------------------------------------------------------- */

static void batch_put_and_get_per_key_results(void **state)
{
	char v[4][1000], out[4][1000];
	const char *keys[4] = {"bat-0", "bat-1", "", "bat-3"};
	const void *vals[4] = {v[0], v[1], v[2], v[3]};
	size_t lens[4] = {1000, 500, 10, 1000};
	mc_status res[4];
	void *bufs[4] = {out[0], out[1], out[2], out[3]};
	size_t caps[4] = {1000, 1000, 1000, 100};
	const char *gkeys[4] = {"bat-0", "bat-1", "bat-none", "bat-3"};
	int64_t gres[4];
	(void)state;
	for (int i = 0; i < 4; i++)
		mc_test_fill(v[i], sizeof(v[i]), (uint64_t)(40 + i));
	assert_int_equal(mc_store_put(A, "bat-3", v[3], 1000, NULL), MC_OK); /* exists already */
	assert_int_equal(mc_store_put_batch(B, keys, vals, lens, 4, NULL, res),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(res[0], MC_OK);
	assert_int_equal(res[1], MC_OK);
	assert_int_equal(res[2], MC_ERR_INVALID_PARAMS);
	assert_int_equal(res[3], MC_OK);

	assert_int_equal(mc_store_register_buffer(A, out, sizeof(out)), MC_OK);
	assert_int_not_equal(mc_store_batch_get_into(A, gkeys, bufs, caps, 4, gres), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(A, out), MC_OK);
	assert_int_equal(gres[0], 1000);
	assert_memory_equal(out[0], v[0], 1000);
	assert_int_equal(gres[1], 500);
	assert_memory_equal(out[1], v[1], 500);
	assert_int_equal(gres[2], MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(gres[3], MC_ERR_INVALID_PARAMS); /* cap 100 < 1000 */
}

static void batch_put_from_and_get_into(void **state)
{
	enum { N = 8, LEN = 256 << 10 };
	char *src = malloc((size_t)N * LEN), *dst = malloc((size_t)N * LEN);
	const char *keys[N];
	char names[N][32];
	void *sb[N], *db[N];
	size_t lens[N];
	mc_status res[N];
	int64_t gres[N];
	(void)state;
	mc_test_fill(src, (size_t)N * LEN, 50);
	assert_int_equal(mc_store_register_buffer(A, src, (size_t)N * LEN), MC_OK);
	assert_int_equal(mc_store_register_buffer(B, dst, (size_t)N * LEN), MC_OK);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "bpf-%d", i);
		keys[i] = names[i];
		sb[i] = src + (size_t)i * LEN;
		db[i] = dst + (size_t)i * LEN;
		lens[i] = LEN - (size_t)i;
	}
	assert_int_equal(mc_store_batch_put_from(A, keys, sb, lens, N, NULL, res), MC_OK);
	for (int i = 0; i < N; i++)
		assert_int_equal(res[i], MC_OK);
	memset(dst, 0, (size_t)N * LEN);
	assert_int_equal(mc_store_batch_get_into(B, keys, db, lens, N, gres), MC_OK);
	for (int i = 0; i < N; i++) {
		assert_int_equal(gres[i], LEN - i);
		assert_memory_equal(db[i], sb[i], lens[i]);
	}
	mc_store_unregister_buffer(A, src);
	mc_store_unregister_buffer(B, dst);
	free(src);
	free(dst);
}

static void multi_buffer_gather_and_scatter(void **state)
{
	char a0[300], a1[700], b0[100], b1[1000];
	char o0[500], o1[500], p0[600], p1[600];
	void *put0[2] = {a0, a1}, *put1[2] = {b0, b1};
	size_t pl0[2] = {300, 700}, pl1[2] = {100, 1000};
	void *const *pbufs[2] = {put0, put1};
	const size_t *plens[2] = {pl0, pl1};
	size_t nb[2] = {2, 2};
	void *get0[2] = {o0, o1}, *get1[2] = {p0, p1};
	size_t gl0[2] = {500, 500}, gl1[2] = {600, 600};
	void *const *gbufs[2] = {get0, get1};
	const size_t *glens[2] = {gl0, gl1};
	const char *keys[2] = {"mb-0", "mb-1"};
	mc_status res[2];
	int64_t gres[2];
	char whole0[1000], whole1[1100];
	(void)state;
	mc_test_fill(a0, sizeof(a0), 61);
	mc_test_fill(a1, sizeof(a1), 62);
	mc_test_fill(b0, sizeof(b0), 63);
	mc_test_fill(b1, sizeof(b1), 64);
	memcpy(whole0, a0, 300);
	memcpy(whole0 + 300, a1, 700);
	memcpy(whole1, b0, 100);
	memcpy(whole1 + 100, b1, 1000);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(mc_store_register_buffer(A, put0[i], pl0[i]), MC_OK);
		assert_int_equal(mc_store_register_buffer(A, put1[i], pl1[i]), MC_OK);
		assert_int_equal(mc_store_register_buffer(B, get0[i], gl0[i]), MC_OK);
		assert_int_equal(mc_store_register_buffer(B, get1[i], gl1[i]), MC_OK);
	}
	assert_int_equal(
		mc_store_batch_put_from_multi_buffers(A, keys, pbufs, plens, nb, 2, NULL, res),
		MC_OK);
	assert_int_equal(mc_store_batch_get_into_multi_buffers(B, keys, gbufs, glens, nb, 2, gres),
			 MC_OK);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(mc_store_unregister_buffer(A, put0[i]), MC_OK);
		assert_int_equal(mc_store_unregister_buffer(A, put1[i]), MC_OK);
		assert_int_equal(mc_store_unregister_buffer(B, get0[i]), MC_OK);
		assert_int_equal(mc_store_unregister_buffer(B, get1[i]), MC_OK);
	}
	assert_int_equal(gres[0], 1000);
	assert_memory_equal(o0, whole0, 500);
	assert_memory_equal(o1, whole0 + 500, 500);
	assert_int_equal(gres[1], 1100);
	assert_memory_equal(p0, whole1, 600);
	assert_memory_equal(p1, whole1 + 600, 500);
	st_expect_get(A, "mb-1", whole1, sizeof(whole1));
}

/* ---- upsert family, batch get ------------------------------------------------------------ */

static void upsert_parts_and_batches(void **state)
{
	char a[300], b[200], c[64], whole[500];
	const void *parts[2] = {a, b};
	size_t plens[2] = {sizeof(a), sizeof(b)};
	const char *keys[3] = {"ub-0", "ub-1", ""};
	const void *vals[3] = {a, b, c};
	size_t lens[3] = {sizeof(a), sizeof(b), sizeof(c)};
	mc_status res[3];
	char *src = malloc(4096);
	void *sb[2] = {src, src + 1000};
	size_t sl[2] = {1000, 50};
	(void)state;
	mc_test_fill(a, sizeof(a), 201);
	mc_test_fill(b, sizeof(b), 202);
	mc_test_fill(c, sizeof(c), 203);
	mc_test_fill(src, 4096, 204);
	memcpy(whole, a, sizeof(a));
	memcpy(whole + sizeof(a), b, sizeof(b));
	/* upsert_parts: insert, then overwrite with another size */
	assert_int_equal(mc_store_upsert_parts(A, "up-parts", parts, plens, 2, NULL), MC_OK);
	st_expect_get(B, "up-parts", whole, sizeof(whole));
	assert_int_equal(mc_store_upsert_parts(B, "up-parts", parts + 1, plens + 1, 1, NULL),
			 MC_OK);
	st_expect_get(A, "up-parts", b, sizeof(b));
	assert_int_equal(mc_store_upsert_parts(A, "up-parts", NULL, NULL, 0, NULL),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_upsert_parts(A, "up-parts", NULL, plens, 2, NULL),
			 MC_ERR_INVALID_PARAMS);
	/* upsert_batch: per-key results, existing keys overwritten */
	assert_int_equal(mc_store_put(A, "ub-0", c, sizeof(c), NULL), MC_OK);
	assert_int_equal(mc_store_upsert_batch(B, keys, vals, lens, 3, NULL, res),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(res[0], MC_OK);
	assert_int_equal(res[1], MC_OK);
	assert_int_equal(res[2], MC_ERR_INVALID_PARAMS);
	st_expect_get(A, "ub-0", a, sizeof(a));
	st_expect_get(A, "ub-1", b, sizeof(b));
	assert_int_equal(mc_store_upsert_batch(B, keys, vals, lens, 2, NULL, res), MC_OK);
	/* batch_upsert_from: zero copy, overwrites */
	assert_int_equal(mc_store_register_buffer(A, src, 4096), MC_OK);
	assert_int_equal(mc_store_batch_upsert_from(A, keys, sb, sl, 2, NULL, res), MC_OK);
	assert_int_equal(res[0], MC_OK);
	assert_int_equal(res[1], MC_OK);
	st_expect_get(B, "ub-0", src, 1000);
	st_expect_get(B, "ub-1", src + 1000, 50);
	assert_int_equal(mc_store_unregister_buffer(A, src), MC_OK);
	free(src);
}

static void batch_get_one_round_trip(void **state)
{
	char v0[3000], v1[10];
	const char *keys[4] = {"bg-0", "bg-none", "bg-1", ""};
	void *vals[4];
	int64_t res[4];
	struct mc_store_config on_b = st_prefer(B);
	(void)state;
	mc_test_fill(v0, sizeof(v0), 211);
	mc_test_fill(v1, sizeof(v1), 212);
	assert_int_equal(mc_store_put(A, "bg-0", v0, sizeof(v0), &on_b), MC_OK); /* TCP read */
	assert_int_equal(mc_store_put(B, "bg-1", v1, sizeof(v1), &on_b), MC_OK); /* own segment */
	assert_int_equal(mc_store_batch_get(B, keys, 4, vals, res), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(res[0], sizeof(v0));
	assert_memory_equal(vals[0], v0, sizeof(v0));
	assert_int_equal(res[1], MC_ERR_OBJECT_NOT_FOUND);
	assert_null(vals[1]);
	assert_int_equal(res[2], sizeof(v1));
	assert_memory_equal(vals[2], v1, sizeof(v1));
	assert_int_equal(res[3], MC_ERR_INVALID_PARAMS);
	assert_null(vals[3]);
	free(vals[0]);
	free(vals[2]);
	assert_int_equal(mc_store_batch_get(A, keys, 0, vals, res), MC_OK);
	assert_int_equal(mc_store_batch_get(A, keys, 1, NULL, res), MC_ERR_INVALID_PARAMS);
}

/* ---- get_into_ranges ----------------------------------------------------------------------- */

static void get_into_ranges_reads_fragments(void **state)
{
	enum { OBJ = 64 << 10, BUF = 16 << 10 };
	char *obj = malloc(OBJ), *dst = malloc(BUF), *unreg = malloc(64);
	struct mc_store_config on_a = st_prefer(A), on_b = st_prefer(B);
	struct mc_store_range r0[3] = {
		{.dst_offset = 0, .src_offset = 100, .length = 1000},
		{.dst_offset = 1000, .src_offset = OBJ - 24, .length = 24},
		{.dst_offset = 2000, .src_offset = 0, .length = 0},
	};
	struct mc_store_range r1[2] = {
		{.dst_offset = 4096, .src_offset = 7, .length = 4000},
		{.dst_offset = 9000, .src_offset = OBJ - 10, .length = 11}, /* past the object */
	};
	struct mc_store_range r2[1] = {{.dst_offset = 0, .src_offset = 0, .length = 1}};
	struct mc_store_range r3[2] = {
		{.dst_offset = BUF - 8, .src_offset = 0, .length = 9}, /* past the buffer */
		{.dst_offset = BUF - 8, .src_offset = 0, .length = 8},
	};
	int64_t res0[3], res1[2], res2[1], res3[2], res4[1], res5[1];
	struct mc_store_range_read reads[6] = {
		{"gr-a", dst, r0, 3, res0},    {"gr-b", dst, r1, 2, res1},
		{"gr-none", dst, r2, 1, res2}, {"gr-a", dst, r3, 2, res3},
		{"gr-b", unreg, r2, 1, res4},  {"", dst, r2, 1, res5},
	};
	(void)state;
	mc_test_fill(obj, OBJ, 221);
	/* gr-a on A's own segment (memcpy), gr-b on B's (TCP) */
	assert_int_equal(mc_store_register_buffer(A, obj, OBJ), MC_OK);
	assert_int_equal(mc_store_put_from(A, "gr-a", obj, OBJ, &on_a), MC_OK);
	assert_int_equal(mc_store_put_from(A, "gr-b", obj, OBJ, &on_b), MC_OK);
	assert_int_equal(mc_store_register_buffer(A, dst, BUF), MC_OK);
	memset(dst, 0, BUF);
	assert_int_not_equal(mc_store_get_into_ranges(A, reads, 6), MC_OK);
	assert_int_equal(res0[0], 1000);
	assert_int_equal(res0[1], 24);
	assert_int_equal(res0[2], 0);
	assert_memory_equal(dst, obj + 100, 1000);
	assert_memory_equal(dst + 1000, obj + OBJ - 24, 24);
	assert_int_equal(res1[0], 4000);
	assert_memory_equal(dst + 4096, obj + 7, 4000);
	assert_int_equal(res1[1], MC_ERR_INVALID_PARAMS);
	assert_int_equal(res2[0], MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(res3[0], MC_ERR_INVALID_PARAMS);
	assert_int_equal(res3[1], 8);
	assert_memory_equal(dst + BUF - 8, obj, 8);
	assert_int_equal(res4[0], MC_ERR_INVALID_PARAMS); /* not registered */
	assert_int_equal(res5[0], MC_ERR_INVALID_PARAMS);
	/* all good: MC_OK; nothing to read: MC_OK */
	assert_int_equal(mc_store_get_into_ranges(A, reads, 1), MC_OK);
	assert_int_equal(mc_store_get_into_ranges(B, reads, 0), MC_OK);
	assert_int_equal(mc_store_get_into_ranges(B, NULL, 1), MC_ERR_INVALID_PARAMS);
	/* B has not registered dst */
	assert_int_equal(mc_store_get_into_ranges(B, reads, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(res0[0], MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(A, obj), MC_OK);
	free(obj);
	free(dst);
	free(unreg);
}

/*
 * A holder whose memory cannot be read any more (its engine no longer
 * serves its segment, as after a crash the master has not noticed yet):
 * every read form of an object with a second replica falls back to it
 * (client_xfer.c, "Retries"), bytes exact, and a read of an object with
 * no other replica still fails to transfer.
 */
static void reads_fall_back_from_an_unreadable_holder(void **state)
{
	enum { OBJ = 64 << 10, N = 4 };
	struct mc_store *D = st_client_new(16 << 20, 4 << 20);
	const char *names[2] = {mc_store_hostname(D), mc_store_hostname(B)};
	struct mc_store_config two = {
		.replica_num = 2, .preferred_segments = names, .n_preferred_segments = 2};
	struct mc_store_config only_d = {.replica_num = 1,
					 .preferred_segment = mc_store_hostname(D)};
	char *obj = malloc(OBJ), *dst = malloc(N * OBJ);
	const char *keys[N] = {"fb-0", "fb-1", "fb-2", "fb-3"};
	void *bufs[N];
	size_t caps[N];
	int64_t res[N], rres[1];
	struct mc_store_range rg = {.dst_offset = 0, .src_offset = 100, .length = 5000};
	struct mc_store_range_read rr = {"fb-2", dst, &rg, 1, rres};
	struct mc_store_replica_desc d[2];
	uint64_t retries;

	(void)state;
	mc_test_fill(obj, OBJ, 77);
	for (int i = 0; i < N; i++) {
		obj[0] = (char)i;
		assert_int_equal(mc_store_put(A, keys[i], obj, OBJ, &two), MC_OK);
		assert_int_equal(mc_store_get_replica_desc(A, keys[i], d, 2), 2);
		assert_string_equal(d[0].segment_name, mc_store_hostname(D)); /* read first */
	}
	assert_int_equal(mc_store_put(A, "fb-only-d", obj, OBJ, &only_d), MC_OK);
	/* D's engine stops serving its segment; the master still lists it */
	assert_int_equal(mc_te_deregister(D->te, D->seg), MC_OK);
	D->seg_registered = false;
	retries = atomic_load(&A->read_retries);

	obj[0] = 0;
	st_expect_get(A, "fb-0", obj, OBJ);
	assert_true(atomic_load(&A->read_retries) > retries);
	assert_int_equal(mc_store_register_buffer(A, dst, N * OBJ), MC_OK);
	obj[0] = 1;
	assert_int_equal(mc_store_get_into(A, "fb-1", dst, OBJ), OBJ);
	assert_memory_equal(dst, obj, OBJ);
	for (int i = 0; i < N; i++) {
		bufs[i] = dst + (size_t)i * OBJ;
		caps[i] = OBJ;
	}
	memset(dst, 0, N * OBJ);
	assert_int_equal(mc_store_batch_get_into(A, keys, bufs, caps, N, res), MC_OK);
	for (int i = 0; i < N; i++) {
		obj[0] = (char)i;
		assert_int_equal(res[i], OBJ);
		assert_memory_equal(bufs[i], obj, OBJ);
	}
	memset(dst, 0, OBJ);
	assert_int_equal(mc_store_get_into_ranges(A, &rr, 1), MC_OK);
	assert_int_equal(rres[0], 5000);
	obj[0] = 2;
	assert_memory_equal(dst, obj + 100, 5000);
	/* nothing to fall back to */
	assert_int_equal(mc_store_get_into(A, "fb-only-d", dst, OBJ), MC_ERR_TRANSFER_FAIL);
	assert_int_equal(mc_store_unregister_buffer(A, dst), MC_OK);
	mc_store_free(D);
	free(obj);
	free(dst);
}

/* ---- sessions ---------------------------------------------------------------------------------
 */

/* Layer-wise save and load: two objects written in ranges out of order,
 * invisible until session end, read back in ranges. */
static void put_and_get_sessions(void **state)
{
	enum { LAYER = 4096, LAYERS = 4, OBJ = LAYER * LAYERS };
	char *src = malloc(2 * OBJ), *dst = malloc(2 * OBJ);
	const char *keys[3] = {"ses-0", "ses-1", "ses-exists"};
	uint64_t sizes[3] = {OBJ, OBJ, 10};
	struct mc_store_config two = {.replica_num = 2};
	mc_status st[3];
	int64_t got[3];
	char v[10] = "exists";
	(void)state;
	mc_test_fill(src, 2 * OBJ, 231);
	assert_int_equal(mc_store_register_buffer(A, src, 2 * OBJ), MC_OK);
	assert_int_equal(mc_store_register_buffer(B, dst, 2 * OBJ), MC_OK);
	assert_int_equal(mc_store_put(A, "ses-exists", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(mc_store_batch_put_session_start(A, keys, sizes, 3, &two, st),
			 MC_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(st[0], MC_OK);
	assert_int_equal(st[1], MC_OK);
	assert_int_equal(st[2], MC_ERR_OBJECT_ALREADY_EXISTS);
	/* a second start of an open session is refused */
	assert_int_equal(mc_store_batch_put_session_start(A, keys, sizes, 1, NULL, st),
			 MC_ERR_INVALID_PARAMS);
	for (int l = LAYERS - 1; l >= 0; l--) {
		/* key i, layer l: two buffers of half a layer each */
		void *b0[2] = {src + l * LAYER, src + l * LAYER + LAYER / 2};
		void *b1[2] = {src + OBJ + l * LAYER, src + OBJ + l * LAYER + LAYER / 2};
		size_t half[2] = {LAYER / 2, LAYER / 2};
		uint64_t o[2] = {(uint64_t)l * LAYER, (uint64_t)l * LAYER + LAYER / 2};
		void *const *bufs[2] = {b0, b1};
		const size_t *lens[2] = {half, half};
		const uint64_t *offs[2] = {o, o};
		size_t nb[2] = {2, 2};
		assert_int_equal(mc_store_batch_put_from_multi_buffer_ranges(A, keys, bufs, lens,
									     offs, nb, 2, got),
				 MC_OK);
		assert_int_equal(got[0], LAYER);
		assert_int_equal(got[1], LAYER);
		assert_int_equal(mc_store_is_exist(B, "ses-0"), 0); /* not yet visible */
	}
	{
		/* out of the object, and a key without a session */
		void *b[1] = {src};
		size_t l[1] = {2};
		uint64_t o[1] = {OBJ - 1};
		void *const *bufs[2] = {b, b};
		const size_t *lens[2] = {l, l};
		const uint64_t *offs[2] = {o, o};
		size_t nb[2] = {1, 1};
		const char *k2[2] = {"ses-0", "ses-none"};
		assert_int_equal(mc_store_batch_put_from_multi_buffer_ranges(A, k2, bufs, lens,
									     offs, nb, 2, got),
				 MC_ERR_INVALID_PARAMS);
		assert_int_equal(got[0], MC_ERR_INVALID_PARAMS);
		assert_int_equal(got[1], MC_ERR_INVALID_PARAMS);
		/* B cannot use A's session */
		assert_int_equal(mc_store_batch_put_from_multi_buffer_ranges(B, k2, bufs, lens,
									     offs, nb, 1, got),
				 MC_ERR_INVALID_PARAMS);
	}
	assert_int_equal(mc_store_batch_put_session_end(A, keys, 3, st), MC_ERR_INVALID_PARAMS);
	assert_int_equal(st[0], MC_OK);
	assert_int_equal(st[1], MC_OK);
	assert_int_equal(st[2], MC_ERR_INVALID_PARAMS); /* no session */
	assert_int_equal(mc_store_batch_put_session_end(A, keys, 1, st), MC_ERR_INVALID_PARAMS);
	st_expect_get(B, "ses-0", src, OBJ);
	st_expect_get(B, "ses-1", src + OBJ, OBJ);
	assert_int_equal(mc_store_get_replica_desc(B, "ses-1", NULL, 0), 2);

	/* get sessions: ranged reads without master round trips */
	{
		const char *gk[3] = {"ses-0", "ses-none", "ses-1"};
		void *b0[2] = {dst, dst + 100}, *b1[1] = {dst + OBJ};
		size_t l0[2] = {100, LAYER}, l1[1] = {LAYER};
		uint64_t o0[2] = {0, 2 * LAYER}, o1[1] = {3 * LAYER};
		void *const *bufs[3] = {b0, b1, b1};
		const size_t *lens[3] = {l0, l1, l1};
		const uint64_t *offs[3] = {o0, o1, o1};
		size_t nb[3] = {2, 1, 1};
		assert_int_equal(mc_store_batch_get_session_start(B, gk, 3, st),
				 MC_ERR_OBJECT_NOT_FOUND);
		assert_int_equal(st[0], MC_OK);
		assert_int_equal(st[1], MC_ERR_OBJECT_NOT_FOUND);
		assert_int_equal(st[2], MC_OK);
		memset(dst, 0, 2 * OBJ);
		assert_int_equal(mc_store_batch_get_into_multi_buffer_ranges(B, gk, bufs, lens,
									     offs, nb, 3, got),
				 MC_ERR_INVALID_PARAMS);
		assert_int_equal(got[0], 100 + LAYER);
		assert_int_equal(got[1], MC_ERR_INVALID_PARAMS); /* no session */
		assert_int_equal(got[2], LAYER);
		assert_memory_equal(dst, src, 100);
		assert_memory_equal(dst + 100, src + 2 * LAYER, LAYER);
		assert_memory_equal(dst + OBJ, src + OBJ + 3 * LAYER, LAYER);
		/* renewing is allowed; ending drops the session */
		assert_int_equal(mc_store_batch_get_session_start(B, gk, 1, st), MC_OK);
		assert_int_equal(mc_store_batch_get_session_end(B, gk, 3), MC_OK);
		assert_int_equal(mc_store_batch_get_into_multi_buffer_ranges(B, gk, bufs, lens,
									     offs, nb, 1, got),
				 MC_ERR_INVALID_PARAMS);
	}
	/* revoke: the object is dropped and the key is free again */
	assert_int_equal(mc_store_batch_put_session_start(A, keys + 2, sizes, 1, NULL, st),
			 MC_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(mc_store_remove(A, "ses-exists", true), MC_OK);
	assert_int_equal(mc_store_batch_put_session_start(A, keys + 2, sizes + 2, 1, NULL, st),
			 MC_OK);
	assert_int_equal(mc_store_batch_put_session_revoke(A, keys + 2, 1, st), MC_OK);
	assert_int_equal(mc_store_is_exist(B, "ses-exists"), 0);
	assert_int_equal(mc_store_put(B, "ses-exists", v, sizeof(v), NULL), MC_OK);
	st_expect_get(A, "ses-exists", v, sizeof(v));
	assert_int_equal(mc_store_batch_put_session_revoke(A, keys + 2, 1, st),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_unregister_buffer(A, src), MC_OK);
	assert_int_equal(mc_store_unregister_buffer(B, dst), MC_OK);
	free(src);
	free(dst);
}

struct ranged_writer {
	struct mc_store *s;
	char *buf;
	int id;
	int bad;
};

static void *ranged_writer_main(void *arg)
{
	struct ranged_writer *w = arg;
	const char *key = "ses-race";
	void *b[1] = {w->buf + w->id * 1024};
	size_t l[1] = {1024};
	uint64_t o[1] = {(uint64_t)w->id * 1024};
	void *const *bufs[1] = {b};
	const size_t *lens[1] = {l};
	const uint64_t *offs[1] = {o};
	size_t nb[1] = {1};
	for (int i = 0; i < 200; i++) {
		int64_t got;
		mc_store_batch_put_from_multi_buffer_ranges(w->s, &key, bufs, lens, offs, nb, 1,
							    &got);
		if (got != 1024 && got != MC_ERR_INVALID_PARAMS)
			w->bad++;
		if (got == MC_ERR_INVALID_PARAMS) /* the session ended */
			break;
	}
	return NULL;
}

/* Ending a put session while other threads write ranges into it: the end
 * waits for the writes in flight; later ones find no session. */
static void put_session_end_races_ranged_writes(void **state)
{
	enum { T = 4 };
	const char *key = "ses-race";
	uint64_t size = T * 1024;
	char *buf = malloc(size);
	struct ranged_writer w[T];
	pthread_t th[T];
	mc_status st;
	(void)state;
	mc_test_fill(buf, size, 241);
	assert_int_equal(mc_store_register_buffer(A, buf, size), MC_OK);
	assert_int_equal(mc_store_batch_put_session_start(A, &key, &size, 1, NULL, &st), MC_OK);
	for (int i = 0; i < T; i++) {
		w[i] = (struct ranged_writer){.s = A, .buf = buf, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, ranged_writer_main, &w[i]), 0);
	}
	assert_int_equal(mc_store_batch_put_session_end(A, &key, 1, &st), MC_OK);
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].bad, 0);
	}
	assert_int_equal(mc_store_get_size(B, "ses-race"), size);
	assert_int_equal(mc_store_unregister_buffer(A, buf), MC_OK);
	free(buf);
}

/* close revokes open put sessions (the key is free for others at once)
 * and drops get sessions; not set up: every result is -600. */
static void close_drops_sessions(void **state)
{
	struct mc_store *s = st_client_new(8 << 20, 4 << 20), *t;
	const char *key = "ses-closed";
	uint64_t size = 100;
	char v[100];
	mc_status st;
	int64_t got;
	(void)state;
	mc_test_fill(v, sizeof(v), 251);
	assert_int_equal(mc_store_batch_put_session_start(s, &key, &size, 1, NULL, &st), MC_OK);
	assert_int_equal(mc_store_batch_get_session_start(s, &key, 1, &st),
			 MC_ERR_REPLICA_IS_NOT_READY); /* not visible yet */
	mc_store_free(s);
	assert_int_equal(mc_store_put(B, key, v, sizeof(v), NULL), MC_OK);
	st_expect_get(A, key, v, sizeof(v));

	assert_int_equal(mc_store_new(&t), MC_OK);
	assert_int_equal(mc_store_batch_put_session_start(t, &key, &size, 1, NULL, &st),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(st, MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_get_session_start(t, &key, 1, &st), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_get_session_end(t, &key, 1), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_put_session_end(t, &key, 1, &st), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_put_session_revoke(t, &key, 1, &st), MC_ERR_INVALID_PARAMS);
	{
		void *b[1] = {v};
		size_t l[1] = {1};
		uint64_t o[1] = {0};
		void *const *bufs[1] = {b};
		const size_t *lens[1] = {l};
		const uint64_t *offs[1] = {o};
		size_t nb[1] = {1};
		assert_int_equal(mc_store_batch_get_into_multi_buffer_ranges(t, &key, bufs, lens,
									     offs, nb, 1, &got),
				 MC_ERR_INVALID_PARAMS);
		assert_int_equal(got, MC_ERR_INVALID_PARAMS);
	}
	{
		struct mc_store_range r = {0, 0, 1};
		struct mc_store_range_read rd = {key, v, &r, 1, &got};
		assert_int_equal(mc_store_get_into_ranges(t, &rd, 1), MC_ERR_INVALID_PARAMS);
		assert_int_equal(got, MC_ERR_INVALID_PARAMS);
	}
	mc_store_free(t);
}

/* A get session is only as good as its lease: once it ran out, ranged
 * reads fail with LEASE_EXPIRED until the session is started again. */
static void get_session_lease_expires(void **state)
{
	struct mc_master_server_config c;
	struct mc_master_server *m = NULL;
	struct mc_store_params p = st_params(8 << 20, 4 << 20);
	struct mc_store *s;
	const char *key = "lease-1";
	char v[64], out[64], addr[64];
	void *b[1] = {out};
	size_t l[1] = {sizeof(out)};
	uint64_t o[1] = {0};
	void *const *bufs[1] = {b};
	const size_t *lens[1] = {l};
	const uint64_t *offs[1] = {o};
	size_t nb[1] = {1};
	int64_t got;
	mc_status st;
	uint64_t t0;
	(void)state;
	mc_master_server_config_defaults(&c);
	set_str(&c.rpc_address, "127.0.0.1");
	set_str(&c.metrics_host, "127.0.0.1");
	c.rpc_port = 0;
	c.port = 0;
	c.metrics_port = 0;
	c.enable_metric_reporting = false;
	c.master.default_kv_lease_ttl_ms = 200;
	assert_int_equal(mc_master_server_start(&c, &m), MC_OK);
	mc_master_server_config_release(&c);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", mc_master_server_rpc_port(m));
	p.master_server_addr = addr;
	assert_int_equal(mc_store_new(&s), MC_OK);
	assert_int_equal(mc_store_setup(s, &p), MC_OK);
	mc_test_fill(v, sizeof(v), 261);
	assert_int_equal(mc_store_register_buffer(s, out, sizeof(out)), MC_OK);
	assert_int_equal(mc_store_put(s, key, v, sizeof(v), NULL), MC_OK);
	t0 = mc_now_ms();
	assert_int_equal(mc_store_batch_get_session_start(s, &key, 1, &st), MC_OK);
	assert_int_equal(
		mc_store_batch_get_into_multi_buffer_ranges(s, &key, bufs, lens, offs, nb, 1, &got),
		MC_OK);
	assert_int_equal(got, sizeof(v));
	assert_memory_equal(out, v, sizeof(v));
	/* the lease is a duration: let it run out */
	while (mc_now_ms() <= t0 + 250)
		usleep(10 * 1000);
	assert_int_equal(
		mc_store_batch_get_into_multi_buffer_ranges(s, &key, bufs, lens, offs, nb, 1, &got),
		MC_ERR_LEASE_EXPIRED);
	assert_int_equal(got, MC_ERR_LEASE_EXPIRED);
	assert_int_equal(mc_store_batch_get_session_start(s, &key, 1, &st), MC_OK);
	memset(out, 0, sizeof(out));
	assert_int_equal(
		mc_store_batch_get_into_multi_buffer_ranges(s, &key, bufs, lens, offs, nb, 1, &got),
		MC_OK);
	assert_memory_equal(out, v, sizeof(v));
	mc_store_free(s);
	mc_master_server_stop(m);
}

/* ---- metadata ------------------------------------------------------------------------------ */

static void exist_size_remove(void **state)
{
	char v[64] = "x";
	const char *keys[3] = {"meta-1", "meta-none", "meta-2"};
	int ex[3];
	mc_status rr[3];
	(void)state;
	assert_int_equal(mc_store_put(A, "meta-1", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(mc_store_put(A, "meta-2", v, 10, NULL), MC_OK);
	assert_int_equal(mc_store_is_exist(B, "meta-1"), 1);
	assert_int_equal(mc_store_is_exist(B, "meta-none"), 0);
	assert_int_equal(mc_store_batch_is_exist(B, keys, 3, ex), MC_OK);
	assert_int_equal(ex[0], 1);
	assert_int_equal(ex[1], 0);
	assert_int_equal(ex[2], 1);
	assert_int_equal(mc_store_get_size(B, "meta-2"), 10);
	assert_int_equal(mc_store_get_size(B, "meta-none"), MC_ERR_OBJECT_NOT_FOUND);
	/* is_exist and get_size took leases */
	assert_int_equal(mc_store_remove(B, "meta-1", false), MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(mc_store_remove(B, "meta-1", true), MC_OK);
	assert_int_equal(mc_store_remove(B, "meta-1", true), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mc_store_is_exist(A, "meta-1"), 0);
	assert_int_equal(mc_store_batch_remove(A, keys, 3, true, rr), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(rr[0], MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(rr[1], MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(rr[2], MC_OK);
}

static void batch_replica_clear_own_objects(void **state)
{
	char v[32] = "v";
	const char *ab[2] = {"rc-a1", "rc-b"};
	const char *a2[1] = {"rc-a2"};
	const char *a1[2] = {"rc-a1", "rc-none"};
	bool cl[2] = {true, true};
	int64_t n;
	(void)state;
	assert_int_equal(mc_store_put(A, "rc-a1", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(mc_store_put(A, "rc-a2", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(mc_store_put(B, "rc-b", v, sizeof(v), NULL), MC_OK);
	/* B clears only what B wrote */
	assert_int_equal(mc_store_batch_replica_clear(B, ab, 2, NULL, cl), 1);
	assert_false(cl[0]);
	assert_true(cl[1]);
	assert_int_equal(mc_store_batch_replica_clear(A, a1, 2, "nowhere:1", cl), 0);
	assert_false(cl[0]);
	assert_false(cl[1]);
	/* by segment: the one replica is on A's or on B's */
	n = mc_store_batch_replica_clear(A, a2, 1, mc_store_hostname(A), NULL);
	n += mc_store_batch_replica_clear(A, a2, 1, mc_store_hostname(B), NULL);
	assert_int_equal(n, 1);
	assert_int_equal(mc_store_batch_replica_clear(A, a1, 2, "", cl), 1);
	assert_true(cl[0]);
	assert_false(cl[1]);
	assert_int_equal(mc_store_is_exist(B, "rc-a1"), 0);
	assert_int_equal(mc_store_is_exist(B, "rc-a2"), 0);
	assert_int_equal(mc_store_is_exist(B, "rc-b"), 0);
	assert_int_equal(mc_store_batch_replica_clear(A, NULL, 1, NULL, NULL),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_batch_replica_clear(A, a1, 0, NULL, NULL), 0);
}

static void batch_put_per_key_group_ids(void **state)
{
	char v[32] = "g";
	const char *keys[3] = {"grp-1", "grp-2", "grp-3"};
	const char *gids[3] = {"G1", "G2", "G1"};
	const void *vals[3] = {v, v, v};
	const size_t lens[3] = {sizeof(v), sizeof(v), sizeof(v)};
	struct mc_store_config cfg = {.replica_num = 1, .group_ids = gids, .n_group_ids = 2};
	mc_status res[3];
	(void)state;
	/* bad group_ids count: every key refused, nothing written */
	assert_int_equal(mc_store_put_batch(A, keys, vals, lens, 3, &cfg, res),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(res[0], MC_ERR_INVALID_PARAMS);
	assert_int_equal(res[2], MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_put(A, "grp-1", v, sizeof(v), &cfg), MC_ERR_INVALID_PARAMS);
	cfg.group_ids = NULL;
	cfg.n_group_ids = 1;
	assert_int_equal(mc_store_put(A, "grp-1", v, sizeof(v), &cfg), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_is_exist(B, "grp-1"), 0);
	cfg.group_ids = gids;
	cfg.n_group_ids = 3;
	assert_int_equal(mc_store_put_batch(A, keys, vals, lens, 3, &cfg, res), MC_OK);
	/* a lease on grp-1 covers its group G1 (grp-3), not grp-2 in G2 */
	assert_int_equal(mc_store_is_exist(B, "grp-1"), 1);
	assert_int_equal(mc_store_remove(B, "grp-3", false), MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(mc_store_remove(B, "grp-2", false), MC_OK);
	assert_int_equal(mc_store_remove(B, "grp-1", true), MC_OK);
	assert_int_equal(mc_store_remove(B, "grp-3", true), MC_OK);
	/* one id for a single put */
	cfg.n_group_ids = 1;
	assert_int_equal(mc_store_put(A, "grp-1", v, sizeof(v), &cfg), MC_OK);
	assert_int_equal(mc_store_remove(B, "grp-1", true), MC_OK);
}

static void remove_by_regex_and_all(void **state)
{
	char v[16] = "v";
	char key[32];
	(void)state;
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "rx/%d/end", i);
		assert_int_equal(mc_store_put(A, key, v, sizeof(v), NULL), MC_OK);
	}
	assert_int_equal(mc_store_put(A, "rx-other", v, sizeof(v), NULL), MC_OK);
	assert_int_equal(mc_store_remove_by_regex(B, "^rx/[0-2]/", true), 3);
	assert_int_equal(mc_store_is_exist(B, "rx/1/end"), 0);
	assert_int_equal(mc_store_is_exist(B, "rx/3/end"), 1);
	assert_int_equal(mc_store_remove_by_regex(B, "([", true), MC_ERR_INVALID_PARAMS);
	assert_true(mc_store_remove_all(B, true) >= 3);
	assert_int_equal(mc_store_is_exist(A, "rx/4/end"), 0);
	assert_int_equal(mc_store_is_exist(A, "rx-other"), 0);
}

static void replica_descriptors(void **state)
{
	char v[1000];
	struct mc_store_config c = {.replica_num = 2};
	struct mc_store_replica_desc d[4];
	bool seen_a = false, seen_b = false;
	(void)state;
	mc_test_fill(v, sizeof(v), 71);
	assert_int_equal(mc_store_put(A, "two-replicas", v, sizeof(v), &c), MC_OK);
	assert_int_equal(mc_store_get_replica_desc(B, "two-replicas", d, 4), 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(d[i].status, MC_STORE_REPLICA_COMPLETE);
		assert_int_equal(d[i].type, MC_STORE_REPLICA_MEMORY);
		assert_int_equal(d[i].size, sizeof(v));
		assert_string_equal(d[i].protocol, "tcp");
		seen_a |= strcmp(d[i].segment_name, mc_store_hostname(A)) == 0;
		seen_b |= strcmp(d[i].segment_name, mc_store_hostname(B)) == 0;
	}
	assert_true(seen_a && seen_b);
	assert_int_equal(mc_store_get_replica_desc(B, "two-replicas", d, 1), 2);
	assert_int_equal(mc_store_get_replica_desc(B, "no-such", d, 4), MC_ERR_OBJECT_NOT_FOUND);
	st_expect_get(A, "two-replicas", v, sizeof(v));
	st_expect_get(B, "two-replicas", v, sizeof(v));
}

/* ---- errors ------------------------------------------------------------------------------------
 */

static void bad_arguments_and_missing_keys(void **state)
{
	char v[16] = "v";
	char *big;
	void *out = NULL;
	size_t huge = (size_t)(SEG_SIZE + (1 << 20));
	(void)state;
	assert_int_equal(mc_store_put(A, "", v, sizeof(v), NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_put(A, NULL, v, sizeof(v), NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_put(A, "zero", v, 0, NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_get(A, "", &out), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_get(A, "never-put", &out), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mc_store_register_buffer(A, v, sizeof(v)), MC_OK);
	assert_int_equal(mc_store_get_into(A, "never-put", v, sizeof(v)), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mc_store_unregister_buffer(A, v), MC_OK);
	assert_int_equal(mc_store_remove(A, "never-put", false), MC_ERR_OBJECT_NOT_FOUND);
	/* larger than the local buffer, from memory never registered: put sends
	 * it as it is (nothing stages through the local buffer) */
	big = malloc(huge);
	mc_test_fill(big, huge, 37);
	assert_int_equal(mc_store_put(A, "past-lbuf", big + 1, LBUF_SIZE + 1, NULL), MC_OK);
	assert_int_equal(mc_store_get(B, "past-lbuf", &out), (int64_t)LBUF_SIZE + 1);
	assert_memory_equal(out, big + 1, LBUF_SIZE + 1);
	free(out);
	out = NULL;
	assert_int_equal(mc_store_remove(A, "past-lbuf", true), MC_OK);
	/* larger than any segment: the master has no space */
	assert_int_equal(mc_store_put(A, "too-big", big, huge, NULL), MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_store_register_buffer(A, big, huge), MC_OK);
	assert_int_equal(mc_store_put_from(A, "too-big", big, huge, NULL),
			 MC_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mc_store_unregister_buffer(A, big), MC_OK);
	free(big);
	assert_int_equal(mc_store_is_exist(A, "too-big"), 0);
	/* prefer_alloc_in_same_node is for the multi-buffer paths only */
	{
		struct mc_store_config c = {.prefer_alloc_in_same_node = true};
		assert_int_equal(mc_store_put(A, "same-node", v, sizeof(v), &c),
				 MC_ERR_INVALID_PARAMS);
	}
}

/* mc_store_get_alloc: the allocator is asked once, for the object's size,
 * and the read lands in what it returned; a NULL from it is MC_ERR_NOMEM,
 * a missing key never calls it. */
struct test_alloc {
	char buf[256];
	size_t asked;
	unsigned calls;
	bool refuse;
};

static void *test_alloc_fn(void *ctx, size_t size)
{
	struct test_alloc *a = ctx;
	a->calls++;
	a->asked = size;
	return a->refuse || size > sizeof(a->buf) ? NULL : a->buf;
}

static void get_alloc_calls_the_allocator_once(void **state)
{
	struct mc_store_config c = st_prefer(B);
	struct test_alloc a = {.calls = 0};
	char v[200];
	(void)state;
	mc_test_fill(v, sizeof(v), 61);
	assert_int_equal(mc_store_put(A, "get-alloc", v, sizeof(v), &c), MC_OK);
	assert_int_equal(mc_store_get_alloc(A, "get-alloc", test_alloc_fn, &a), (int64_t)sizeof(v));
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.asked, sizeof(v));
	assert_memory_equal(a.buf, v, sizeof(v));
	a.refuse = true;
	assert_int_equal(mc_store_get_alloc(A, "get-alloc", test_alloc_fn, &a), MC_ERR_NOMEM);
	assert_int_equal(a.calls, 2);
	a.refuse = false;
	assert_int_equal(mc_store_get_alloc(A, "never-put", test_alloc_fn, &a),
			 MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(a.calls, 2);
	assert_int_equal(mc_store_get_alloc(A, "get-alloc", NULL, &a), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_remove(A, "get-alloc", true), MC_OK);
}

/* mc_store_batch_get_alloc: hands out buf[i] for key i, or refuses key
 * `refuse` (-1: none) */
struct test_nth {
	char buf[3][300];
	size_t asked[3];
	int calls[3];
	int refuse;
};

static void *test_nth_fn(void *ctx, size_t i, size_t size)
{
	struct test_nth *t = ctx;
	assert_true(i < 3);
	t->calls[i]++;
	t->asked[i] = size;
	return (int)i == t->refuse || size > sizeof(t->buf[i]) ? NULL : t->buf[i];
}

static void batch_get_alloc_asks_once_per_found_key(void **state)
{
	struct mc_store_config c = st_prefer(B);
	const char *keys[3] = {"bga-0", "bga-missing", "bga-2"};
	struct test_nth t = {.refuse = -1};
	char v0[120], v2[250];
	int64_t res[3];
	(void)state;
	mc_test_fill(v0, sizeof(v0), 71);
	mc_test_fill(v2, sizeof(v2), 72);
	assert_int_equal(mc_store_put(A, keys[0], v0, sizeof(v0), &c), MC_OK);
	assert_int_equal(mc_store_put(A, keys[2], v2, sizeof(v2), &c), MC_OK);

	/* the missing key fails alone; the others land where the allocator said */
	assert_int_equal(mc_store_batch_get_alloc(A, keys, 3, test_nth_fn, &t, res),
			 MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(res[0], (int64_t)sizeof(v0));
	assert_int_equal(res[1], MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(res[2], (int64_t)sizeof(v2));
	assert_int_equal(t.calls[0], 1);
	assert_int_equal(t.calls[1], 0);
	assert_int_equal(t.calls[2], 1);
	assert_int_equal(t.asked[0], sizeof(v0));
	assert_int_equal(t.asked[2], sizeof(v2));
	assert_memory_equal(t.buf[0], v0, sizeof(v0));
	assert_memory_equal(t.buf[2], v2, sizeof(v2));

	/* a refusal fails that key with MC_ERR_NOMEM, not the batch's others */
	memset(&t, 0, sizeof(t));
	t.refuse = 0;
	keys[1] = keys[2];
	assert_int_equal(mc_store_batch_get_alloc(A, keys, 2, test_nth_fn, &t, res), MC_ERR_NOMEM);
	assert_int_equal(res[0], MC_ERR_NOMEM);
	assert_int_equal(res[1], (int64_t)sizeof(v2));
	assert_memory_equal(t.buf[1], v2, sizeof(v2));

	assert_int_equal(mc_store_batch_get_alloc(A, keys, 2, NULL, &t, res),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(res[0], MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_remove(A, "bga-0", true), MC_OK);
	assert_int_equal(mc_store_remove(A, "bga-2", true), MC_OK);
}

static void not_set_up_client(void **state)
{
	struct mc_store *s;
	char v[4] = "abc";
	void *out;
	(void)state;
	assert_int_equal(mc_store_new(&s), MC_OK);
	assert_int_equal(mc_store_health_check(s), 1);
	assert_string_equal(mc_store_hostname(s), "");
	assert_null(mc_store_engine(s));
	assert_int_equal(mc_store_put(s, "k", v, sizeof(v), NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_get(s, "k", &out), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_is_exist(s, "k"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_close(s), MC_OK);
	mc_store_free(s);
	mc_store_free(NULL);
}

/* ---- lifecycle --------------------------------------------------------------------------------
 */

static void close_and_setup_again(void **state)
{
	struct mc_store_params p = st_params(16 << 20, 4 << 20);
	struct mc_store *s = st_client_new(16 << 20, 4 << 20);
	struct mc_store_config c = st_prefer(s);
	char v[5000];
	(void)state;
	mc_test_fill(v, sizeof(v), 81);
	assert_int_equal(mc_store_health_check(s), 0);
	assert_non_null(mc_store_engine(s));
	assert_int_equal(mc_store_setup(s, &p), MC_ERR_INVALID_PARAMS); /* twice */
	assert_int_equal(mc_store_put(s, "cycle-1", v, sizeof(v), &c), MC_OK);
	st_expect_get(A, "cycle-1", v, sizeof(v));
	assert_int_equal(mc_store_close(s), MC_OK);
	assert_int_equal(mc_store_health_check(s), 1);
	assert_int_equal(mc_store_close(s), MC_OK);
	/* its segment is gone with it, and so is the object */
	assert_int_not_equal(mc_store_get_size(A, "cycle-1"), (int64_t)sizeof(v));

	assert_int_equal(mc_store_setup(s, &p), MC_OK);
	c = st_prefer(s);
	assert_int_equal(mc_store_put(s, "cycle-2", v, sizeof(v), &c), MC_OK);
	st_expect_get(B, "cycle-2", v, sizeof(v));
	st_expect_get(s, "cycle-2", v, sizeof(v));
	mc_store_free(s);
}

/* A pure client (no segment, no local buffer) and a client sharing an engine. */
static void pure_client_and_shared_engine(void **state)
{
	struct mc_store *s = st_client_new(0, 0), *t;
	struct mc_store_params p = st_params(8 << 20, 1 << 20);
	char v[100], *buf = malloc(100);
	struct mc_store_config c = st_prefer(A);
	(void)state;
	mc_test_fill(v, sizeof(v), 91);
	memcpy(buf, v, sizeof(v));
	/* no local buffer, and none needed: put sends the value as it is */
	assert_int_equal(mc_store_put(s, "pure-put", v, sizeof(v), &c), MC_OK);
	st_expect_get(s, "pure-put", v, sizeof(v));
	assert_int_equal(mc_store_register_buffer(s, buf, 100), MC_OK);
	assert_int_equal(mc_store_put_from(s, "pure", buf, 100, &c), MC_OK);
	st_expect_get(s, "pure", v, sizeof(v));

	p.engine = mc_store_engine(s);
	assert_int_equal(mc_store_new(&t), MC_OK);
	assert_int_equal(mc_store_setup(t, &p), MC_OK);
	assert_string_equal(mc_store_hostname(t), mc_store_hostname(s));
	assert_ptr_equal(mc_store_engine(t), mc_store_engine(s));
	c = st_prefer(t);
	assert_int_equal(mc_store_put(t, "shared", v, sizeof(v), &c), MC_OK);
	st_expect_get(B, "shared", v, sizeof(v));
	mc_store_free(t); /* leaves the engine to s */
	st_expect_get(s, "pure", v, sizeof(v));
	mc_store_free(s);
	free(buf);
}

struct worker {
	struct mc_store *s;
	int id;
	int failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char v[8192], key[64];
	for (int i = 0; i < 20; i++) {
		void *out = NULL;
		snprintf(key, sizeof(key), "mt-%d-%d", w->id, i);
		mc_test_fill(v, sizeof(v), (uint64_t)(w->id * 1000 + i));
		if (mc_store_put(w->s, key, v, sizeof(v), NULL) != MC_OK ||
		    mc_store_get(w->s, key, &out) != (int64_t)sizeof(v) ||
		    memcmp(out, v, sizeof(v)) != 0)
			w->failures++;
		free(out);
	}
	return NULL;
}

/* Many threads on one client: the requests are pipelined on one socket. */
static void concurrent_callers(void **state)
{
	enum { T = 6 };
	pthread_t th[T];
	struct worker w[T];
	(void)state;
	for (int i = 0; i < T; i++) {
		w[i] = (struct worker){.s = i % 2 ? A : B, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
}

static void heartbeat_keeps_client_healthy(void **state)
{
	(void)state;
	assert_int_equal(mc_store_health_check(A), 0);
	assert_int_equal(mc_store_health_check(B), 0);
}

/* A master that restarts (same port, empty state): the client's next
 * ping reconnects, is told NEED_REMOUNT, and remounts its segment, so
 * objects can be placed on it again. */
static struct mc_master_server *restartable_master(uint16_t port)
{
	struct mc_master_server_config c;
	struct mc_master_server *m = NULL;
	mc_master_server_config_defaults(&c);
	set_str(&c.rpc_address, "127.0.0.1");
	set_str(&c.metrics_host, "127.0.0.1");
	c.rpc_port = port;
	c.port = port;
	c.metrics_port = 0;
	c.enable_metric_reporting = false;
	if (mc_master_server_start(&c, &m) != MC_OK)
		m = NULL;
	mc_master_server_config_release(&c);
	return m;
}

static void master_restart_remounts(void **state)
{
	struct mc_master_server *m;
	struct mc_store_params p = st_params(16 << 20, 4 << 20);
	struct mc_store *s;
	struct mc_store_config c;
	char addr[64], v[2000];
	uint16_t port = 0;
	int healthy = 0;
	(void)state;
	for (int i = 0; i < 5 && !(m = restartable_master(port = mc_test_free_port())); i++)
		;
	assert_non_null(m);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	p.master_server_addr = addr;
	assert_int_equal(mc_store_new(&s), MC_OK);
	assert_int_equal(mc_store_setup(s, &p), MC_OK);
	c = st_prefer(s);
	mc_test_fill(v, sizeof(v), 111);
	assert_int_equal(mc_store_put(s, "restart-1", v, sizeof(v), &c), MC_OK);

	mc_master_server_stop(m);
	/* the next heartbeat (within a second) finds the master gone */
	for (int i = 0; i < 300 && mc_store_health_check(s) != 2; i++)
		usleep(10 * 1000);
	assert_int_equal(mc_store_health_check(s), 2);
	assert_int_equal(mc_store_get_size(s, "restart-1"), MC_ERR_RPC_FAIL);
	m = restartable_master(port);
	assert_non_null(m);
	/* the new master knows nothing until the heartbeat remounts */
	for (int i = 0; i < 50 && !healthy; i++) {
		usleep(100 * 1000);
		healthy = mc_store_health_check(s) == 0 &&
			  mc_store_put(s, "restart-2", v, sizeof(v), &c) == MC_OK;
	}
	assert_true(healthy);
	assert_int_equal(mc_store_get_size(s, "restart-1"), MC_ERR_OBJECT_NOT_FOUND);
	st_expect_get(s, "restart-2", v, sizeof(v));
	mc_store_free(s);
	mc_master_server_stop(m);
}

/* ---- the upstream C API (store_c.h) ---------------------------------------------------------- */

static void upstream_c_api(void **state)
{
	mooncake_store_t h = mooncake_store_create();
	mooncake_replicate_config_t cfg = {.replica_num = 1};
	char name[128], v[3000], out[3000], *rb = malloc(3000);
	const char *keys[2] = {"capi-1", "capi-2"};
	void *bufs[2] = {rb, rb + 1000};
	size_t sizes[2] = {1000, 2000};
	int ires[2];
	int64_t gres[2];
	(void)state;
	assert_non_null(h);
	mc_test_fill(v, sizeof(v), 101);
	memcpy(rb, v, sizeof(v));
	assert_int_equal(mooncake_store_health_check(h), 1);
	assert_int_equal(mooncake_store_put(NULL, "k", v, 1, NULL), -1);
	assert_int_equal(mooncake_store_put(h, NULL, v, 1, NULL), -1);
	assert_int_equal(mooncake_store_get_hostname(h, name, sizeof(name)), 0);
	assert_string_equal(name, "");
	assert_int_equal(mooncake_store_setup(h, "127.0.0.1", st_meta_uri, 16 << 20, 4 << 20, "tcp",
					      "", st_master_addr),
			 0);
	assert_int_equal(mooncake_store_health_check(h), 0);
	assert_int_equal(mooncake_store_get_hostname(h, name, 4), -1);
	assert_int_equal(mooncake_store_get_hostname(h, name, sizeof(name)), 0);
	assert_true(strncmp(name, "127.0.0.1:", 10) == 0);

	assert_int_equal(mooncake_store_put(h, "capi-0", v, 100, &cfg), 0);
	assert_int_equal(mooncake_store_is_exist(h, "capi-0"), 1);
	assert_int_equal(mooncake_store_get_size(h, "capi-0"), 100);
	assert_int_equal(mooncake_store_register_buffer(h, rb, 3000), 0);
	assert_int_equal(mooncake_store_register_buffer(h, out, sizeof(out)), 0);
	assert_int_equal(mooncake_store_put_from(h, "capi-from", rb, 3000, NULL), 0);
	assert_int_equal(mooncake_store_get_into(h, "capi-from", out, sizeof(out)), 3000);
	assert_memory_equal(out, v, 3000);
	assert_int_equal(mooncake_store_get_into(h, "capi-from", out, 10), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mooncake_store_batch_put_from(h, keys, bufs, sizes, 2, NULL, ires), 0);
	assert_int_equal(ires[0], 0);
	assert_int_equal(ires[1], 0);
	memset(rb, 0, 3000);
	assert_int_equal(mooncake_store_batch_get_into(h, keys, bufs, sizes, 2, gres), 0);
	assert_int_equal(gres[0], 1000);
	assert_int_equal(gres[1], 2000);
	assert_memory_equal(rb, v, 3000);
	assert_int_equal(mooncake_store_batch_is_exist(h, keys, 2, ires), 0);
	assert_int_equal(ires[0], 1);
	assert_int_equal(mooncake_store_remove(h, "capi-nope", 1), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mooncake_store_remove(h, "capi-0", 1), 0);
	assert_int_equal(mooncake_store_remove_by_regex(h, "^capi-[12]$", 1), 2);
	assert_true(mooncake_store_remove_all(h, 1) >= 1);
	assert_int_equal(mooncake_store_unregister_buffer(h, rb), 0);
	mooncake_store_destroy(h);
	mooncake_store_destroy(NULL);
	free(rb);
}

/* ---- the connection layer against a scripted master ---------------------------------------------
 */

enum fake_mode {
	FAKE_FOREIGN_VERSION, /* answers ServiceReady with protocol major 2 */
	FAKE_SILENT,	      /* answers ServiceReady, then nothing */
	FAKE_DROP_AFTER_PING, /* answers one Ping per connection, then closes */
};

struct fake {
	int lfd;
	uint16_t port;
	enum fake_mode mode;
	int connections;
	pthread_t th;
};

static bool fake_answer(int fd, enum fake_mode mode, int *answered)
{
	uint8_t hdr[MC_PROTO_HDR_LEN];
	struct mc_proto_hdr h;
	uint8_t payload[4096];
	struct mc_buf out;
	bool ok = true;

	if (mc_sock_read_full(fd, hdr, sizeof(hdr), mc_now_ms() + 10000) != MC_OK ||
	    mc_proto_hdr_decode(hdr, sizeof(payload), &h) != MC_OK ||
	    mc_sock_read_full(fd, payload, h.payload_len, mc_now_ms() + 10000) != MC_OK)
		return false;
	mc_buf_init(&out);
	if (h.type == MC_STORE_SERVICE_READY) {
		struct mc_store_hello hello = {mc_proto_str_c("fake")};
		mc_store_service_ready_response_encode(&out, h.req_id, &hello);
		if (mode == FAKE_FOREIGN_VERSION)
			out.data[4] = MC_STORE_PROTO_MAJOR + 1;
	} else if (h.type == MC_STORE_PING && mode == FAKE_DROP_AFTER_PING) {
		struct mc_store_ping_resp pr = {.view_version = 1,
						.client_status = MC_STORE_CLIENT_OK};
		mc_store_ping_response_encode(&out, h.req_id, &pr);
		(*answered)++;
	}
	if (out.len)
		ok = mc_sock_write_full(fd, out.data, out.len, mc_now_ms() + 10000) == MC_OK;
	mc_buf_release(&out);
	return ok;
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	for (;;) {
		int fd = accept(f->lfd, NULL, NULL), answered = 0;
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			break;
		}
		f->connections++;
		while (fake_answer(fd, f->mode, &answered) &&
		       !(f->mode == FAKE_DROP_AFTER_PING && answered))
			;
		close(fd);
	}
	return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode)
{
	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->lfd = mc_sock_listen(0, 16);
	assert_true(f->lfd >= 0);
	assert_int_equal(mc_sock_set_nonblock(f->lfd, false), 0);
	f->port = mc_sock_local_port(f->lfd);
	assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->th, NULL);
	close(f->lfd);
}

static void conn_foreign_version_is_refused(void **state)
{
	struct fake f;
	struct mc_master_conn *c = NULL;
	struct mc_store *s;
	struct mc_store_params p = st_params(0, 0);
	char addr[64];
	(void)state;
	fake_start(&f, FAKE_FOREIGN_VERSION);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f.port);
	assert_int_equal(mc_master_conn_new(addr, &c), MC_ERR_INVALID_VERSION);
	p.master_server_addr = addr;
	assert_int_equal(mc_store_new(&s), MC_OK);
	assert_int_equal(mc_store_setup(s, &p), MC_ERR_INVALID_VERSION);
	assert_int_equal(mc_store_health_check(s), 1);
	mc_store_free(s);
	fake_stop(&f);
}

static void conn_silent_master_times_out(void **state)
{
	struct fake f;
	struct mc_master_conn *c = NULL;
	struct mc_store_client_req req = {{1, 2}};
	struct mc_store_msg resp;
	char addr[64];
	uint64_t t0;
	(void)state;
	fake_start(&f, FAKE_SILENT);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f.port);
	setenv("MC_RPC_TIMEOUT_MS", "300", 1);
	assert_int_equal(mc_master_conn_new(addr, &c), MC_OK);
	unsetenv("MC_RPC_TIMEOUT_MS");
	t0 = mc_now_ms();
	assert_int_equal(mc_master_conn_call(c, MC_STORE_PING, &req, &resp), MC_ERR_RPC_TIMEOUT);
	assert_true(mc_now_ms() - t0 >= 250);
	assert_true(mc_now_ms() - t0 < 5000);
	mc_master_conn_free(c);
	fake_stop(&f);
}

static void conn_reconnects_after_drop(void **state)
{
	struct fake f;
	struct mc_master_conn *c = NULL;
	struct mc_store_client_req req = {{1, 2}};
	struct mc_store_msg resp;
	char addr[64];
	int ok = 0;
	(void)state;
	fake_start(&f, FAKE_DROP_AFTER_PING);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f.port);
	assert_int_equal(mc_master_conn_new(addr, &c), MC_OK);
	for (int i = 0; i < 6; i++) {
		mc_status rc = mc_master_conn_call(c, MC_STORE_PING, &req, &resp);
		if (rc == MC_OK) {
			assert_int_equal(resp.body.ping_resp.client_status, MC_STORE_CLIENT_OK);
			mc_store_msg_release(&resp);
			ok++;
		} else {
			assert_int_equal(rc, MC_ERR_RPC_FAIL);
		}
	}
	assert_true(ok >= 3);
	assert_true(f.connections >= 3);
	mc_master_conn_free(c);
	fake_stop(&f);
}

/* The segment's memory as mc_store_segment_info reports it: the shared
 * clients were set up with the default (mount: all of it populated before
 * setup returned), a client set up with MC_STORE_PREFAULT=background
 * reports it (a report that says done has the whole count), and one with
 * off has none. */
static void segment_info_reports_prefault(void **state)
{
	struct mc_store_segment_info info;
	struct mc_store *s, *fresh = NULL;
	(void)state;
	assert_int_equal(mc_store_new(&fresh), MC_OK);
	assert_int_equal(mc_store_segment_info(fresh, &info), MC_ERR_INVALID_PARAMS);
	mc_store_free(fresh);

	assert_int_equal(mc_store_segment_info(A, &info), MC_OK);
	assert_int_equal(info.size, SEG_SIZE);
	assert_string_equal(info.prefault, "mount");
	assert_int_equal(info.populated, SEG_SIZE);
	assert_true(info.prefault_done);

	setenv("MC_STORE_PREFAULT", "background", 1);
	s = st_client_new(32ull << 20, 0);
	unsetenv("MC_STORE_PREFAULT");
	assert_int_equal(mc_store_segment_info(s, &info), MC_OK);
	assert_string_equal(info.prefault, "background");
	assert_true(info.populated <= info.size); /* the thread's own end: test_hostmem */
	if (info.prefault_done)
		assert_int_equal(info.populated, 32ull << 20);
	assert_true(!strcmp(info.pages, "thp") || !strcmp(info.pages, "4k") ||
		    !strncmp(info.pages, "hugetlb", 7));
	mc_store_free(s);

	setenv("MC_STORE_PREFAULT", "off", 1);
	s = st_client_new(32ull << 20, 0);
	unsetenv("MC_STORE_PREFAULT");
	assert_int_equal(mc_store_segment_info(s, &info), MC_OK);
	assert_string_equal(info.prefault, "off");
	assert_int_equal(info.populated, 0);
	mc_store_free(s);
}

/* The client's environment through its config table: upstream's
 * spellings, bounds, and a bad value warned about and ignored. */
static void client_env_table(void **state)
{
	struct mc_store_client_env e;
	(void)state;
	mc_store_client_env_load(&e);
	assert_true(mc_store_client_env_memcpy(&e));
	assert_int_equal(e.min_port, 12300);
	assert_int_equal(e.rpc_timeout_ms, 30000);
	assert_int_equal(e.dummy_busy_poll_us, 0); /* off unless asked for */
	assert_int_equal(e.dummy_conn_busy_poll_us, 0);
	mc_store_client_env_release(&e);
	setenv("MC_STORE_MEMCPY", "disable", 1);
	setenv("MC_STORE_CLIENT_MIN_PORT", "80", 1); /* below 1024: ignored */
	setenv("MC_RPC_TIMEOUT_MS", "-1", 1);	     /* no deadline */
	setenv("MC_RPC_BUSY_POLL_US", "often", 1);   /* not a number: ignored */
	setenv("MC_DUMMY_BUSY_POLL_US", "50", 1);
	setenv("MC_DUMMY_CONN_BUSY_POLL_US", "-5", 1); /* below 0: ignored */
	mc_store_client_env_load(&e);
	assert_false(mc_store_client_env_memcpy(&e));
	assert_int_equal(e.min_port, 12300);
	assert_int_equal(e.rpc_timeout_ms, -1);
	assert_int_equal(e.rpc_busy_poll_us, 50);
	assert_int_equal(e.dummy_busy_poll_us, 50);
	assert_int_equal(e.dummy_conn_busy_poll_us, 0);
	mc_store_client_env_release(&e);
	setenv("MC_DUMMY_BUSY_POLL_US", "2000000", 1); /* above a second: ignored */
	setenv("MC_DUMMY_CONN_BUSY_POLL_US", "120", 1);
	mc_store_client_env_load(&e);
	assert_int_equal(e.dummy_busy_poll_us, 0);
	assert_int_equal(e.dummy_conn_busy_poll_us, 120);
	mc_store_client_env_release(&e);
	unsetenv("MC_DUMMY_BUSY_POLL_US");
	unsetenv("MC_DUMMY_CONN_BUSY_POLL_US");
	setenv("MC_STORE_MEMCPY", "sometimes", 1); /* refused by its check: auto stays */
	mc_store_client_env_load(&e);
	assert_true(mc_store_client_env_memcpy(&e));
	mc_store_client_env_release(&e);
	unsetenv("MC_STORE_MEMCPY");
	unsetenv("MC_STORE_CLIENT_MIN_PORT");
	unsetenv("MC_RPC_TIMEOUT_MS");
	unsetenv("MC_RPC_BUSY_POLL_US");
}

static void unreachable_master(void **state)
{
	struct mc_store *s;
	struct mc_store_params p = st_params(0, 0);
	char addr[64];
	(void)state;
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", mc_test_free_port());
	p.master_server_addr = addr;
	assert_int_equal(mc_store_new(&s), MC_OK);
	assert_int_equal(mc_store_setup(s, &p), MC_ERR_RPC_FAIL);
	mc_store_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(put_get_across_clients),
		cmocka_unit_test(put_existing_key_keeps_first_value),
		cmocka_unit_test(upsert_overwrites),
		cmocka_unit_test(put_parts_concatenates),
		cmocka_unit_test(put_from_get_into_registered),
		cmocka_unit_test(zero_copy_buffers_must_be_registered),
		cmocka_unit_test(batch_put_and_get_per_key_results),
		cmocka_unit_test(batch_put_from_and_get_into),
		cmocka_unit_test(multi_buffer_gather_and_scatter),
		cmocka_unit_test(upsert_parts_and_batches),
		cmocka_unit_test(batch_get_one_round_trip),
		cmocka_unit_test(get_into_ranges_reads_fragments),
		cmocka_unit_test(reads_fall_back_from_an_unreadable_holder),
		cmocka_unit_test(put_and_get_sessions),
		cmocka_unit_test(put_session_end_races_ranged_writes),
		cmocka_unit_test(close_drops_sessions),
		cmocka_unit_test(get_session_lease_expires),
		cmocka_unit_test(exist_size_remove),
		cmocka_unit_test(replica_descriptors),
		cmocka_unit_test(bad_arguments_and_missing_keys),
		cmocka_unit_test(get_alloc_calls_the_allocator_once),
		cmocka_unit_test(batch_get_alloc_asks_once_per_found_key),
		cmocka_unit_test(not_set_up_client),
		cmocka_unit_test(close_and_setup_again),
		cmocka_unit_test(pure_client_and_shared_engine),
		cmocka_unit_test(concurrent_callers),
		cmocka_unit_test(heartbeat_keeps_client_healthy),
		cmocka_unit_test(master_restart_remounts),
		cmocka_unit_test(upstream_c_api),
		cmocka_unit_test(remove_by_regex_and_all),
		cmocka_unit_test(batch_replica_clear_own_objects),
		cmocka_unit_test(batch_put_per_key_group_ids),
		cmocka_unit_test(conn_foreign_version_is_refused),
		cmocka_unit_test(conn_silent_master_times_out),
		cmocka_unit_test(conn_reconnects_after_drop),
		cmocka_unit_test(segment_info_reports_prefault),
		cmocka_unit_test(client_env_table),
		cmocka_unit_test(unreachable_master),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/*
 * tests/unit/test_store_loccache.c - the store client's location cache
 * (store/client_loccache.c, MC_STORE_LOCATION_CACHE; docs/design.md "Gets
 * without the master") against an in-process master over loopback: a
 * repeated get skips GetReplicaList while the read lease holds (counted by
 * the client's per-message metrics), the client's own writes drop their
 * keys, a location made stale by another client - a force remove whose
 * block a new object reuses, an upsert in place - is caught by the
 * checksum and the get asks the master, and what the cache cannot catch
 * (the previous value of a key upserted to another size, its old block
 * parked intact) is served no longer than the lease; a holder whose pings
 * stop fences its memory before the master can expire it (client_fence.c)
 * and puts it back when answered.  The fixture is
 * test_store_client.c's: one master, clients A and B for the whole run
 * (cache on in both), fresh holders or masters where a case needs them.
 */
#include <inttypes.h>
#include <pthread.h>
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
#include "base/time.h"
#include "master/server.h"
#include "mooncake/store.h"
#include "mooncake/te.h"
#include "store/client_int.h" /* s->loc, s->metrics */
#include "store/client_metrics.h"
#include "store/master_conn.h"
#include "store/proto.h"
#include "support.h"

#define SEG_SIZE  (64ull << 20)
#define LBUF_SIZE (4ull << 20)
#define OBJ	  (64u << 10)

static struct mc_master_server *master;
static char master_addr[64];
static char meta_uri[128];
static struct mc_store *A, *B;

/* ---- fixture ------------------------------------------------------------------ */

static struct mc_store *client_at(const char *addr, const char *meta, uint64_t seg, bool verify)
{
	struct mc_store_params p = {
		.local_hostname = "127.0.0.1",
		.metadata_server = meta,
		.global_segment_size = seg,
		.local_buffer_size = LBUF_SIZE,
		.protocol = "tcp",
		.master_server_addr = addr,
		.disable_verify = !verify,
	};
	struct mc_store *s = NULL;

	assert_int_equal(mc_store_new(&s), MC_OK);
	if (mc_store_setup(s, &p) != MC_OK)
		fail_msg("setup: %s", mc_last_error());
	return s;
}

static struct mc_store *client_new(uint64_t seg)
{
	return client_at(master_addr, meta_uri, seg, true);
}

/* No eviction: an object must go only when a case removes it. */
static void no_eviction(struct mc_master_server_config *c)
{
	c->master.eviction_ratio = 0;
	c->master.eviction_high_watermark_ratio = 1.0;
}

static int group_setup(void **state)
{
	(void)state;
	master = mc_test_master_start(no_eviction, master_addr, sizeof(master_addr), meta_uri,
				      sizeof(meta_uri));
	if (!master)
		return -1;
	A = client_new(SEG_SIZE);
	B = client_new(SEG_SIZE);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	mc_store_free(A);
	mc_store_free(B);
	mc_master_server_stop(master);
	return 0;
}

static struct mc_store_config prefer(struct mc_store *s)
{
	struct mc_store_config c = {.replica_num = 1, .preferred_segment = mc_store_hostname(s)};
	return c;
}

static uint64_t rpcs(struct mc_store *s, uint16_t type)
{
	return atomic_load(&s->metrics->rpc[type].count);
}

static uint64_t lookups(struct mc_store *s)
{
	return rpcs(s, MC_STORE_GET_REPLICA_LIST);
}

/* A registered buffer of OBJ bytes on s (free with unreg). */
static char *reg(struct mc_store *s)
{
	char *b = malloc(OBJ);

	assert_non_null(b);
	assert_int_equal(mc_store_register_buffer(s, b, OBJ), MC_OK);
	return b;
}

static void unreg(struct mc_store *s, char *b)
{
	assert_int_equal(mc_store_unregister_buffer(s, b), MC_OK);
	free(b);
}

/* get_into of key on s must give exactly want (len bytes). */
static void expect_into(struct mc_store *s, char *dst, const char *key, const void *want,
			size_t len)
{
	int64_t n;

	memset(dst, 0, OBJ);
	n = mc_store_get_into(s, key, dst, OBJ);
	if (n < 0)
		fail_msg("get_into %s: %lld (%s)", key, (long long)n, mc_last_error());
	assert_int_equal(n, len);
	assert_memory_equal(dst, want, len);
}

static uint64_t replica_addr(struct mc_store *s, const char *key)
{
	struct mc_store_replica_desc d[1];

	assert_int_equal(mc_store_get_replica_desc(s, key, d, 1), 1);
	return d[0].address;
}

static void *count_alloc(void *ctx, size_t size)
{
	void **out = ctx;

	assert_null(*out); /* called once */
	*out = malloc(size);
	return *out;
}

/* Wait (polled: the heartbeat signals nothing) until holder h has spoiled
 * at least want blocks listed in its Ping answers (client_hspoil.c,
 * counted once its SpoilDone was answered: the blocks are free again). */
static void await_hspoils(struct mc_store *h, uint64_t want)
{
	uint64_t end = mc_now_ms() + 10000;

	while (atomic_load(&h->hspoils) < want && mc_now_ms() < end) {
		struct timespec nap = {0, 5 * 1000 * 1000};

		nanosleep(&nap, NULL);
	}
	assert_true(atomic_load(&h->hspoils) >= want);
}

/* ---- cases -------------------------------------------------------------------- */

/* A repeated get, get_into, batch_get_into and batch_get asks the master
 * once, then reads from the holder alone, bytes exact, the replica in
 * another client's segment (TCP) or in the reader's own (memcpy). */
static void repeated_gets_hit_the_cache(void **state)
{
	struct mc_store_config on_a = prefer(A), on_b = prefer(B);
	const char *keys[4] = {"lc-b0", "lc-b1", "lc-b2", "lc-b3"};
	char *v = malloc(5 * OBJ), *dst = reg(B), *bb[4];
	void *bufs[4], *vals[4], *got = NULL;
	size_t caps[4];
	int64_t res[4];
	uint64_t g0, h0, bg0;
	(void)state;

	mc_test_fill(v, 5 * OBJ, 7);
	assert_int_equal(mc_store_put(A, "lc-hit", v, OBJ, &on_a), MC_OK);
	assert_int_equal(mc_store_put(A, "lc-own", v + OBJ, OBJ, &on_b), MC_OK);
	g0 = lookups(B);
	h0 = atomic_load(&B->metrics->loc_hits);
	expect_into(B, dst, "lc-hit", v, OBJ);
	expect_into(B, dst, "lc-own", v + OBJ, OBJ);
	assert_int_equal(lookups(B), g0 + 2);
	for (int i = 0; i < 8; i++) {
		expect_into(B, dst, "lc-hit", v, OBJ);
		expect_into(B, dst, "lc-own", v + OBJ, OBJ);
	}
	assert_int_equal(mc_store_get(B, "lc-hit", &got), OBJ); /* its own allocator */
	assert_memory_equal(got, v, OBJ);
	free(got);
	got = NULL;
	assert_int_equal(lookups(B), g0 + 2);
	assert_int_equal(atomic_load(&B->metrics->loc_hits), h0 + 17);
	/* a caller's allocator is called once: such a get asks the master */
	assert_int_equal(mc_store_get_alloc(B, "lc-hit", count_alloc, &got), OBJ);
	assert_memory_equal(got, v, OBJ);
	free(got);
	assert_int_equal(lookups(B), g0 + 3);

	for (int i = 0; i < 4; i++) {
		assert_int_equal(mc_store_put(A, keys[i], v + (size_t)(i + 1) * OBJ, OBJ, &on_a),
				 MC_OK);
		bufs[i] = bb[i] = reg(B);
		caps[i] = OBJ;
	}
	bg0 = rpcs(B, MC_STORE_BATCH_GET_REPLICA_LIST);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++)
			memset(bb[i], 0, OBJ);
		assert_int_equal(mc_store_batch_get_into(B, keys, bufs, caps, 4, res), MC_OK);
		for (int i = 0; i < 4; i++) {
			assert_int_equal(res[i], OBJ);
			assert_memory_equal(bb[i], v + (size_t)(i + 1) * OBJ, OBJ);
		}
	}
	assert_int_equal(mc_store_batch_get(B, keys, 4, vals, res), MC_OK);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(res[i], OBJ);
		assert_memory_equal(vals[i], v + (size_t)(i + 1) * OBJ, OBJ);
		free(vals[i]);
		unreg(B, bb[i]);
	}
	assert_int_equal(rpcs(B, MC_STORE_BATCH_GET_REPLICA_LIST), bg0 + 1);
	unreg(B, dst);
	free(v);
}

/* A batch's lookups (mc_store_loc_find_many, one lock and one clock
 * reading): the live entries, NULL for a key not cached and for one the
 * caller skips (its result already set); the hits and misses counted as
 * one at a time; a batch of more than 64 keys as well; and the batch
 * get's answer learnt the size of the next one's arena. */
static void batch_lookups_find_the_live_entries(void **state)
{
	struct mc_store_config on_a = prefer(A);
	const char *keys[4] = {"lc-m0", "lc-m1", "lc-mx", "lc-m2"}, *many[70];
	const char *put_keys[3] = {"lc-m0", "lc-m1", "lc-m2"};
	struct mc_store_config on_b = prefer(B);
	const void *vals[3];
	size_t lens[3] = {OBJ, OBJ, OBJ};
	int32_t put_res[3];
	int64_t skip[4] = {MC_OK, MC_OK, MC_OK, 5}, res[3];
	struct mc_store_loc *out[70];
	char *v = malloc(3 * OBJ), *bb[3];
	void *bufs[3];
	size_t caps[3] = {OBJ, OBJ, OBJ};
	uint64_t h0, m0;
	(void)state;

	mc_test_fill(v, 3 * OBJ, 23);
	for (int i = 0; i < 3; i++)
		vals[i] = v + (size_t)i * OBJ;
	/* on A, B, A: a batch's requests go to the segment each names */
	vals[1] = v + 2 * OBJ;
	put_keys[1] = "lc-m2";
	assert_int_equal(mc_store_put_batch(A, put_keys, vals, lens, 2, &on_a, put_res), MC_OK);
	put_keys[1] = "lc-m1";
	assert_int_equal(mc_store_put(A, "lc-m1", v + OBJ, OBJ, &on_b), MC_OK);
	for (int i = 0; i < 3; i++) {
		if (i < 2)
			assert_int_equal(put_res[i], MC_OK);
		bufs[i] = bb[i] = reg(B);
	}
	/* the first batch get asks the master and fills the cache, the
	 * second reads from it */
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 3; i++)
			memset(bb[i], 0, OBJ);
		assert_int_equal(mc_store_batch_get_into(B, put_keys, bufs, caps, 3, res), MC_OK);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(res[i], OBJ);
			assert_memory_equal(bb[i], v + (size_t)i * OBJ, OBJ);
		}
	}
	assert_true(atomic_load(&B->answer_per_key[MC_STORE_ANSWER_LOOKUP]) > 0);

	h0 = atomic_load(&B->metrics->loc_hits);
	m0 = atomic_load(&B->metrics->loc_misses);
	assert_int_equal(mc_store_loc_find_many(B, keys, skip, 4, out), 2);
	assert_non_null(out[0]);
	assert_non_null(out[1]);
	assert_null(out[2]); /* never cached */
	assert_null(out[3]); /* skipped */
	assert_string_equal(out[0]->key, "lc-m0");
	assert_string_equal(out[1]->key, "lc-m1");
	assert_int_equal(atomic_load(&B->metrics->loc_hits), h0 + 2);
	assert_int_equal(atomic_load(&B->metrics->loc_misses), m0 + 1);
	for (int i = 0; i < 4; i++)
		mc_store_loc_unref(out[i]);

	for (int i = 0; i < 70; i++)
		many[i] = put_keys[i % 3];
	assert_int_equal(mc_store_loc_find_many(B, many, NULL, 70, out), 70);
	for (int i = 0; i < 70; i++) {
		assert_string_equal(out[i]->key, put_keys[i % 3]);
		mc_store_loc_unref(out[i]);
	}
	for (int i = 0; i < 3; i++)
		unreg(B, bb[i]);
	free(v);
}

/* The client's own remove and upsert drop the key: the next get asks the
 * master and never serves the old bytes. */
static void own_writes_drop_their_keys(void **state)
{
	struct mc_store_config on_a = prefer(A);
	char *v = malloc(2 * OBJ), *dst = reg(B);
	uint64_t g0;
	(void)state;

	mc_test_fill(v, 2 * OBJ, 11);
	assert_int_equal(mc_store_put(A, "lc-own-rm", v, OBJ, &on_a), MC_OK);
	expect_into(B, dst, "lc-own-rm", v, OBJ);
	/* B's own get leased it: only a force remove goes through */
	assert_int_equal(mc_store_remove(B, "lc-own-rm", false), MC_ERR_OBJECT_HAS_LEASE);
	expect_into(B, dst, "lc-own-rm", v, OBJ);
	assert_int_equal(mc_store_remove(B, "lc-own-rm", true), MC_OK);
	g0 = lookups(B);
	assert_int_equal(mc_store_get_into(B, "lc-own-rm", dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(lookups(B), g0 + 1);

	/* an upsert to another size: the old block is parked intact, so only
	 * the drop keeps the old value from being served */
	assert_int_equal(mc_store_put(A, "lc-own-up", v, OBJ, &on_a), MC_OK);
	expect_into(B, dst, "lc-own-up", v, OBJ);
	assert_int_equal(mc_store_upsert(B, "lc-own-up", v + OBJ, OBJ / 2, &on_a), MC_OK);
	expect_into(B, dst, "lc-own-up", v + OBJ, OBJ / 2);
	/* and a batch remove */
	{
		const char *k[1] = {"lc-own-up"};
		mc_status r[1];

		assert_int_equal(mc_store_batch_remove(B, k, 1, true, r), MC_OK);
		assert_int_equal(mc_store_get_into(B, "lc-own-up", dst, OBJ),
				 MC_ERR_OBJECT_NOT_FOUND);
	}
	unreg(B, dst);
	free(v);
}

/*
 * Another client force-removes a key B has cached and puts another object
 * into the freed block: B's cached read gets the new object's bytes, fails
 * the checksum, drops the entry and asks the master, which says the key is
 * gone.  The mismatch is not reported (the new object keeps its replica)
 * nor counted as a checksum failure.  The same with the key put again.
 * The remover is of minor 12, which the master lets reuse the block at once.
 */
static void force_remove_and_reuse_is_caught(void **state)
{
	struct mc_store *D = client_new(16 << 20); /* an empty holder: the block is reused */
	struct mc_store_config on_d = prefer(D);
	char *v = malloc(3 * OBJ), *dst = reg(B);
	uint64_t a1, stale0, mism0, g0, h0 = atomic_load(&D->hspoils);
	(void)state;

	mc_test_fill(v, 3 * OBJ, 13);
	assert_int_equal(mc_store_put(A, "lc-fr", v, OBJ, &on_d), MC_OK);
	expect_into(B, dst, "lc-fr", v, OBJ);
	a1 = replica_addr(A, "lc-fr");
	/* a remover of minor 12 (upstream's) spoils nothing: the leased block
	 * is parked for its holder D, which spoils it after its next ping and
	 * gives it back (holders_spoil_old_writers_overrides) */
	mc_store_proto_minor_set(12);
	assert_int_equal(mc_store_remove(A, "lc-fr", true), MC_OK);
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	await_hspoils(D, h0 + 1);
	assert_int_equal(mc_store_put(A, "lc-fr-new", v + OBJ, OBJ, &on_d), MC_OK);
	assert_int_equal(replica_addr(A, "lc-fr-new"), a1); /* the premise: reused */

	stale0 = atomic_load(&B->metrics->loc_stale);
	mism0 = atomic_load(&B->metrics->checksum_mismatches);
	g0 = lookups(B);
	assert_int_equal(mc_store_get_into(B, "lc-fr", dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 1);
	assert_int_equal(atomic_load(&B->metrics->checksum_mismatches), mism0);
	assert_int_equal(lookups(B), g0 + 1);
	expect_into(B, dst, "lc-fr-new", v + OBJ, OBJ); /* intact, not reported */

	/* the same key again, other bytes, the same block */
	mc_store_proto_minor_set(12);
	assert_int_equal(mc_store_remove(A, "lc-fr-new", true), MC_OK);
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	await_hspoils(D, h0 + 2);
	assert_int_equal(mc_store_put(A, "lc-fr-new", v + 2 * OBJ, OBJ, &on_d), MC_OK);
	assert_int_equal(replica_addr(A, "lc-fr-new"), a1);
	expect_into(B, dst, "lc-fr-new", v + 2 * OBJ, OBJ);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 2);
	unreg(B, dst);
	free(v);
	mc_store_free(D);
}

/* Another client upserts a key B has cached with a value of the same size:
 * the master rewrites the same block, B's cached read fails the check and
 * B gets the new value from the master. */
static void upsert_in_place_is_caught(void **state)
{
	struct mc_store_config on_a = prefer(A);
	char *v = malloc(2 * OBJ), *dst = reg(B);
	uint64_t stale0;
	(void)state;

	mc_test_fill(v, 2 * OBJ, 17);
	assert_int_equal(mc_store_put(A, "lc-up", v, OBJ, &on_a), MC_OK);
	expect_into(B, dst, "lc-up", v, OBJ);
	stale0 = atomic_load(&B->metrics->loc_stale);
	assert_int_equal(mc_store_upsert(A, "lc-up", v + OBJ, OBJ, &on_a), MC_OK);
	expect_into(B, dst, "lc-up", v + OBJ, OBJ);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 1);
	expect_into(B, dst, "lc-up", v + OBJ, OBJ); /* cached again */
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 1);
	unreg(B, dst);
	free(v);
}

/* A master of 2 s leases: an entry is used until the lookup's send time
 * plus the lease less the margin, then the get asks the master again; what
 * the cache cannot catch - another client's upsert to another size, whose
 * old block stays intact - is served as the previous value, exact, and no
 * longer than that. */
#define SHORT_LEASE_MS 2000

static void short_lease(struct mc_master_server_config *c)
{
	no_eviction(c);
	c->master.default_kv_lease_ttl_ms = SHORT_LEASE_MS;
}

static void wait_until(uint64_t t_ms)
{
	while (mc_now_ms() <= t_ms) {
		struct timespec ts = {0, 5 * 1000000L};

		nanosleep(&ts, NULL);
	}
}

static void lease_bounds_the_cache(void **state)
{
	char addr[64], meta[128];
	struct mc_master_server *m2 =
		mc_test_master_start(short_lease, addr, sizeof(addr), meta, sizeof(meta));
	struct mc_store *W, *R;
	struct mc_store_config on_w;
	struct mc_store_loc *e;
	uint64_t t0, t1, deadline, g0;
	char *v = malloc(2 * OBJ), *dst;
	int64_t n;
	(void)state;

	assert_non_null(m2);
	W = client_at(addr, meta, 16 << 20, true);
	R = client_at(addr, meta, 0, true);
	on_w = prefer(W);
	dst = reg(R);
	mc_test_fill(v, 2 * OBJ, 19);
	assert_int_equal(mc_store_put(W, "lc-lease", v, OBJ, &on_w), MC_OK);
	/* a get that outlives the usable part of the lease (a loaded machine,
	 * a sanitizer) caches nothing: try again */
	for (int i = 0;; i++) {
		t0 = mc_now_ms();
		expect_into(R, dst, "lc-lease", v, OBJ);
		t1 = mc_now_ms();
		if ((e = mc_store_loc_find(R, "lc-lease", 8)) || i == 20)
			break;
	}
	assert_non_null(e);
	deadline = e->deadline_ms;
	mc_store_loc_unref(e);
	/* counted from the lookup's send, within the get */
	assert_true(deadline >= t0 + SHORT_LEASE_MS - mc_store_loc_margin_ms(SHORT_LEASE_MS));
	assert_true(deadline <= t1 + SHORT_LEASE_MS - mc_store_loc_margin_ms(SHORT_LEASE_MS));

	/* an upsert to another size by W of minor 12 (it spoils nothing: a
	 * newer one does, overrides_spoil_the_old_blocks): R may serve the old
	 * value, whole, but only before the deadline */
	mc_store_proto_minor_set(12);
	assert_int_equal(mc_store_upsert(W, "lc-lease", v + OBJ, OBJ / 2, &on_w), MC_OK);
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	memset(dst, 0, OBJ);
	t1 = mc_now_ms();
	n = mc_store_get_into(R, "lc-lease", dst, OBJ);
	if (n == OBJ) { /* from the cache: begun before the deadline */
		assert_memory_equal(dst, v, OBJ);
		assert_true(t1 < deadline);
	} else {
		assert_int_equal(n, OBJ / 2);
		assert_memory_equal(dst, v + OBJ, OBJ / 2);
	}
	wait_until(deadline);
	g0 = lookups(R);
	expect_into(R, dst, "lc-lease", v + OBJ, OBJ / 2);
	assert_int_equal(lookups(R), g0 + 1);

	unreg(R, dst);
	mc_store_free(R);
	mc_store_free(W);
	mc_master_server_stop(m2);
	free(v);
}

/* Off without verification and with MC_STORE_LOCATION_CACHE=0, on by
 * default (4096 entries); bounded by its size, least recently used first
 * out; a new master connection empties it. */
static void settings_bound_and_reconnect(void **state)
{
	struct mc_store_config on_a = prefer(A);
	char *v = malloc(8 * OBJ), *dst;
	struct mc_store *S;
	char key[32];
	uint64_t g0;
	(void)state;

	S = client_at(master_addr, meta_uri, 0, false);
	assert_null(S->loc); /* no checksums, no cache */
	mc_store_free(S);
	setenv("MC_STORE_LOCATION_CACHE", "0", 1);
	S = client_new(0);
	assert_null(S->loc); /* turned off */
	mc_store_free(S);
	unsetenv("MC_STORE_LOCATION_CACHE");
	S = client_new(0);
	assert_non_null(S->loc); /* on by default */
	mc_store_free(S);
	setenv("MC_STORE_LOCATION_CACHE", "4", 1);
	S = client_new(0);
	setenv("MC_STORE_LOCATION_CACHE", "1024", 1);
	assert_non_null(S->loc);
	dst = reg(S);
	mc_test_fill(v, 8 * OBJ, 23);
	for (int i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "lc-lru-%d", i);
		assert_int_equal(mc_store_put(A, key, v + (size_t)i * OBJ, OBJ, &on_a), MC_OK);
		expect_into(S, dst, key, v + (size_t)i * OBJ, OBJ);
	}
	assert_int_equal(mc_store_loc_count(S), 4);
	g0 = lookups(S);
	expect_into(S, dst, "lc-lru-7", v + 7 * OBJ, OBJ);
	assert_int_equal(lookups(S), g0);
	expect_into(S, dst, "lc-lru-0", v, OBJ);
	assert_int_equal(lookups(S), g0 + 1);

	/* a dropped connection: nothing learnt on it is used again, nor what
	 * a lookup sent while it was down learns (the one that reconnects) */
	mc_master_conn_reset(S->conn);
	expect_into(S, dst, "lc-lru-7", v + 7 * OBJ, OBJ);
	assert_int_equal(lookups(S), g0 + 2);
	expect_into(S, dst, "lc-lru-7", v + 7 * OBJ, OBJ);
	assert_int_equal(lookups(S), g0 + 3);
	expect_into(S, dst, "lc-lru-7", v + 7 * OBJ, OBJ);
	assert_int_equal(lookups(S), g0 + 3);
	unreg(S, dst);
	mc_store_free(S);
	free(v);
}

/*
 * Readers on several threads get keys B has cached while a writer upserts
 * them in place between two values: every get that succeeds returns one
 * of the two values, whole (a torn cached read fails its check and asks
 * the master).
 */
enum { RACE_KEYS = 4, RACE_READERS = 3, RACE_GETS = 150, RACE_UPSERTS = 60 };
static char *race_v;

static void *race_reader(void *arg)
{
	char *dst = arg;
	char key[32];

	for (int i = 0; i < RACE_GETS; i++) {
		int k = i % RACE_KEYS;
		int64_t n;

		snprintf(key, sizeof(key), "lc-race-%d", k);
		n = mc_store_get_into(B, key, dst, OBJ);
		/* the master's answers mid-upsert (not ready; a read through the
		 * master torn by the rewrite fails its check) are the uncached
		 * path's; what matters is that no get returns wrong bytes */
		if (n < 0)
			continue;
		if (n != OBJ)
			fail_msg("get %s: %lld (%s)", key, (long long)n, mc_last_error());
		if (memcmp(dst, race_v + (size_t)(2 * k) * OBJ, OBJ) != 0 &&
		    memcmp(dst, race_v + (size_t)(2 * k + 1) * OBJ, OBJ) != 0)
			fail_msg("get %s: bytes of neither value", key);
	}
	return NULL;
}

static void concurrent_gets_and_upserts(void **state)
{
	struct mc_store_config on_a = prefer(A);
	pthread_t th[RACE_READERS];
	char *dsts[RACE_READERS], key[32];
	(void)state;

	race_v = malloc((size_t)2 * RACE_KEYS * OBJ);
	mc_test_fill(race_v, (size_t)2 * RACE_KEYS * OBJ, 29);
	for (int k = 0; k < RACE_KEYS; k++) {
		snprintf(key, sizeof(key), "lc-race-%d", k);
		assert_int_equal(mc_store_put(A, key, race_v + (size_t)(2 * k) * OBJ, OBJ, &on_a),
				 MC_OK);
	}
	for (int t = 0; t < RACE_READERS; t++) {
		dsts[t] = reg(B);
		assert_int_equal(pthread_create(&th[t], NULL, race_reader, dsts[t]), 0);
	}
	for (int i = 0; i < RACE_UPSERTS; i++) {
		int k = i % RACE_KEYS;

		snprintf(key, sizeof(key), "lc-race-%d", k);
		assert_int_equal(
			mc_store_upsert(A, key,
					race_v + (size_t)(2 * k + (i / RACE_KEYS + 1) % 2) * OBJ,
					OBJ, &on_a),
			MC_OK);
	}
	for (int t = 0; t < RACE_READERS; t++) {
		pthread_join(th[t], NULL);
		unreg(B, dsts[t]);
	}
	free(race_v);
}

/* ---- every other way a location goes stale ------------------------------------ */

static uint64_t reports(struct mc_store *s)
{
	return rpcs(s, MC_STORE_REPORT_CORRUPT);
}

/*
 * Removes without force while B holds the lease its get was given: Remove
 * and BatchRemove answer OBJECT_HAS_LEASE, RemoveByRegex and RemoveAll
 * pass it over, so the object is still there and B's cached get of it is
 * right (and asks the master nothing).
 */
static void plain_removes_keep_a_leased_object(void **state)
{
	struct mc_store_config on_a = prefer(A);
	const char *k[1] = {"lc-pl"};
	char *v = malloc(OBJ), *dst = reg(B);
	mc_status res[1];
	uint64_t g0;
	(void)state;

	mc_test_fill(v, OBJ, 31);
	assert_int_equal(mc_store_put(A, "lc-pl", v, OBJ, &on_a), MC_OK);
	expect_into(B, dst, "lc-pl", v, OBJ);
	assert_int_equal(mc_store_remove(A, "lc-pl", false), MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(mc_store_batch_remove(A, k, 1, false, res), MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(res[0], MC_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(mc_store_remove_by_regex(A, "^lc-pl$", false), 0);
	assert_true(mc_store_remove_all(A, false) >= 0); /* the other cases' keys */
	g0 = lookups(B);
	expect_into(B, dst, "lc-pl", v, OBJ);
	assert_int_equal(lookups(B), g0);
	assert_int_equal(mc_store_is_exist(A, "lc-pl"), 1);
	unreg(B, dst);
	free(v);
}

/*
 * A force RemoveAll (on a master of its own: it takes every key) frees
 * the block R has cached and a new object reuses it: R's cached get fails
 * the check, asks the master and gets OBJECT_NOT_FOUND; nothing is
 * reported corrupt (the new object's replica stays) nor counted.
 */
static void remove_all_and_reuse_is_caught(void **state)
{
	char addr[64], meta[128];
	struct mc_master_server *m2 =
		mc_test_master_start(no_eviction, addr, sizeof(addr), meta, sizeof(meta));
	struct mc_store *W, *R;
	struct mc_store_config on_w;
	char *v = malloc(2 * OBJ), *dst;
	uint64_t a1, mism0, g0;
	(void)state;

	assert_non_null(m2);
	W = client_at(addr, meta, 16 << 20, true);
	R = client_at(addr, meta, 0, true);
	/* a client without a segment is unknown to the master until its first
	 * heartbeat remounts it, which drops every entry (client.c, remount):
	 * on a loaded machine that may land mid-case, so let it land first */
	for (int i = 0; i < 2000 && rpcs(R, MC_STORE_REMOUNT_SEGMENT) == 0; i++) {
		struct timespec nap = {0, 5 * 1000 * 1000};

		nanosleep(&nap, NULL);
	}
	assert_true(rpcs(R, MC_STORE_REMOUNT_SEGMENT) > 0);
	on_w = prefer(W);
	dst = reg(R);
	mc_test_fill(v, 2 * OBJ, 37);
	assert_int_equal(mc_store_put(W, "lc-ra", v, OBJ, &on_w), MC_OK);
	expect_into(R, dst, "lc-ra", v, OBJ);
	a1 = replica_addr(W, "lc-ra");
	{
		uint64_t h0 = atomic_load(&W->hspoils);

		assert_int_equal(mc_store_remove_all(W, true), 1);
		await_hspoils(W, h0 + 1); /* parked for W to spoil, then given back */
	}
	assert_int_equal(mc_store_put(W, "lc-ra-new", v + OBJ, OBJ, &on_w), MC_OK);
	assert_int_equal(replica_addr(W, "lc-ra-new"), a1); /* the premise: reused */

	mism0 = atomic_load(&R->metrics->checksum_mismatches);
	g0 = lookups(R);
	assert_int_equal(mc_store_get_into(R, "lc-ra", dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(atomic_load(&R->metrics->loc_stale), 1);
	assert_int_equal(lookups(R), g0 + 1);
	assert_int_equal(atomic_load(&R->metrics->checksum_mismatches), mism0);
	assert_int_equal(reports(R), 0);
	expect_into(R, dst, "lc-ra-new", v + OBJ, OBJ);

	unreg(R, dst);
	mc_store_free(R);
	mc_store_free(W);
	mc_master_server_stop(m2);
	free(v);
}

/*
 * The only holder of a key B has cached closes (its segment unmounted,
 * its memory and endpoint gone): B's cached read fails, the entry goes and
 * the master says the key is gone; no report, no mismatch.
 */
static void holder_gone_is_caught(void **state)
{
	struct mc_store *D = client_new(16 << 20);
	struct mc_store_config on_d = prefer(D);
	char *v = malloc(OBJ), *dst = reg(B);
	uint64_t stale0, mism0, rep0, g0;
	(void)state;

	mc_test_fill(v, OBJ, 41);
	assert_int_equal(mc_store_put(A, "lc-hg", v, OBJ, &on_d), MC_OK);
	expect_into(B, dst, "lc-hg", v, OBJ);
	mc_store_free(D);

	stale0 = atomic_load(&B->metrics->loc_stale);
	mism0 = atomic_load(&B->metrics->checksum_mismatches);
	rep0 = reports(B);
	g0 = lookups(B);
	assert_int_equal(mc_store_get_into(B, "lc-hg", dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 1);
	assert_int_equal(lookups(B), g0 + 1);
	assert_int_equal(atomic_load(&B->metrics->checksum_mismatches), mism0);
	assert_int_equal(reports(B), rep0);
	unreg(B, dst);
	free(v);
}

/*
 * The only holder of a key B has cached unmounts its global segment at
 * once and stays up: its memory, still mapped and intact, leaves its
 * engine before the unmount returns, so B's cached read is refused, the
 * entry goes and the master says the key is gone (before: B got the
 * value back, checked).  No report, no mismatch.
 */
static void unmount_refuses_cached_reads(void **state)
{
	struct mc_store *D = client_new(16 << 20);
	struct mc_store_config on_d = prefer(D);
	char *v = malloc(OBJ), *dst = reg(B), sid[MC_STORE_SEGMENT_ID_MAX];
	uint64_t stale0, mism0, rep0, g0;
	(void)state;

	mc_test_fill(v, OBJ, 44);
	assert_int_equal(mc_store_put(A, "lc-um", v, OBJ, &on_d), MC_OK);
	expect_into(B, dst, "lc-um", v, OBJ);
	snprintf(sid, sizeof(sid), "%" PRIu64 "-%" PRIu64, D->seg_id.first, D->seg_id.second);
	stale0 = atomic_load(&B->metrics->loc_stale);
	mism0 = atomic_load(&B->metrics->checksum_mismatches);
	rep0 = reports(B);
	g0 = lookups(B);
	assert_int_equal(mc_store_unmount_segment(D, sid, 0), MC_OK);
	assert_int_equal(mc_store_get_into(B, "lc-um", dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 1);
	assert_int_equal(lookups(B), g0 + 1);
	assert_int_equal(atomic_load(&B->metrics->checksum_mismatches), mism0);
	assert_int_equal(reports(B), rep0);
	unreg(B, dst);
	free(v);
	mc_store_free(D);
}

/*
 * The same for an extra segment unmounted with a grace period: B's cached
 * get reads the value during the grace (the segment is readable), and once
 * the holder's heartbeat took the memory out of its engine at the grace's
 * end, no get of B returns the value (before: B's cached get kept
 * returning it until its entry's lease deadline, seconds later).
 */
static void unmount_after_grace_refuses_cached_reads(void **state)
{
	struct mc_store *D = client_new(0);
	struct mc_store_config on_d = prefer(D);
	char *v = malloc(OBJ), *dst = reg(B), xid[MC_STORE_SEGMENT_ID_MAX];
	uint64_t alloc = 0, g0, end;
	int64_t n;
	(void)state;

	assert_int_equal(mc_store_allocate_and_mount_segment(D, 16 << 20, NULL, NULL, xid, &alloc),
			 MC_OK);
	mc_test_fill(v, OBJ, 45);
	assert_int_equal(mc_store_put(A, "lc-umg", v, OBJ, &on_d), MC_OK);
	expect_into(B, dst, "lc-umg", v, OBJ);
	g0 = lookups(B);
	assert_int_equal(mc_store_unmount_segment(D, xid, 300), MC_OK);
	assert_int_not_equal(atomic_load(&D->dereg_due), UINT64_MAX); /* due at the grace's end */
	expect_into(B, dst, "lc-umg", v, OBJ); /* in the grace: readable, from the cache */
	assert_int_equal(lookups(B), g0);
	/* the event: D's heartbeat deregistered it (bounded wait, polled) */
	end = mc_now_ms() + 5000;
	while (atomic_load(&D->dereg_due) != UINT64_MAX && mc_now_ms() < end) {
		struct timespec nap = {0, 10 * 1000 * 1000};

		nanosleep(&nap, NULL);
	}
	assert_int_equal(atomic_load(&D->dereg_due), UINT64_MAX);
	assert_false(D->xsegs[0].registered);
	memset(dst, 0, OBJ);
	n = mc_store_get_into(B, "lc-umg", dst, OBJ);
	assert_true(n < 0); /* not found, or a listed replica refused: never the value */
	assert_true(lookups(B) > g0);
	assert_int_equal(mc_store_unmount_and_free_segment(D, xid, 0), MC_OK);
	unreg(B, dst);
	free(v);
	mc_store_free(D);
}

/*
 * Overrides by a writer of minor 13 (master/spoil.c, mc_store_spoil): a
 * force remove of a key B has cached (leased by B's get), its block not
 * reused, and an upsert of another to another size.  Each parks the old
 * block until the lease ends and overwrites its head before returning, so
 * B's cached get fails its check at once and asks the master: not found,
 * and the new value (before: B got the old value back, checked).  The
 * removed block comes back into use once spoiled (SpoilDone).  No report,
 * no mismatch.
 */
static void overrides_spoil_the_old_blocks(void **state)
{
	struct mc_store *D = client_new(16 << 20);
	struct mc_store_config on_d = prefer(D);
	char *v = malloc(3 * OBJ), *dst = reg(B);
	uint64_t a1, stale0, mism0, rep0, g0;
	(void)state;

	mc_test_fill(v, 3 * OBJ, 46);
	assert_int_equal(mc_store_put(A, "lc-sp", v, OBJ, &on_d), MC_OK);
	assert_int_equal(mc_store_put(A, "lc-sp2", v + OBJ, OBJ, &on_d), MC_OK);
	expect_into(B, dst, "lc-sp", v, OBJ);
	expect_into(B, dst, "lc-sp2", v + OBJ, OBJ);
	a1 = replica_addr(A, "lc-sp");
	stale0 = atomic_load(&B->metrics->loc_stale);
	mism0 = atomic_load(&B->metrics->checksum_mismatches);
	rep0 = reports(B);

	assert_int_equal(mc_store_remove(A, "lc-sp", true), MC_OK);
	g0 = lookups(B);
	assert_int_equal(mc_store_get_into(B, "lc-sp", dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(lookups(B), g0 + 1);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 1);
	/* spoiled, the remover's SpoilDone gave the block back at once (not
	 * at the lease's end): the next put takes it, and B reads it right */
	assert_int_equal(mc_store_put(A, "lc-sp3", v + 2 * OBJ, OBJ, &on_d), MC_OK);
	assert_int_equal(replica_addr(A, "lc-sp3"), a1);
	assert_int_equal(mc_store_get_into(B, "lc-sp", dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
	expect_into(B, dst, "lc-sp3", v + 2 * OBJ, OBJ);

	assert_int_equal(mc_store_upsert(A, "lc-sp2", v + 2 * OBJ, OBJ / 2, &on_d), MC_OK);
	g0 = lookups(B);
	expect_into(B, dst, "lc-sp2", v + 2 * OBJ, OBJ / 2);
	assert_int_equal(lookups(B), g0 + 1);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 2);
	assert_int_equal(atomic_load(&B->metrics->checksum_mismatches), mism0);
	assert_int_equal(reports(B), rep0);
	unreg(B, dst);
	free(v);
	mc_store_free(D);
}

/* The batch forms: BatchRemove with force and BatchUpsertStart to another
 * size spoil every leased key's old block the same way. */
static void batch_overrides_spoil_the_old_blocks(void **state)
{
	struct mc_store *D = client_new(16 << 20);
	struct mc_store_config on_d = prefer(D);
	const char *rm[2] = {"lc-bsp-a", "lc-bsp-b"}, *up[2] = {"lc-bsp-c", "lc-bsp-d"};
	char *v = malloc(6 * OBJ), *dst = reg(B);
	const void *vals[2];
	size_t lens[2] = {OBJ / 2, OBJ / 4};
	mc_status res[2];
	uint64_t stale0, g0;
	(void)state;

	mc_test_fill(v, 6 * OBJ, 47);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(mc_store_put(A, rm[i], v + i * OBJ, OBJ, &on_d), MC_OK);
		assert_int_equal(mc_store_put(A, up[i], v + (2 + i) * OBJ, OBJ, &on_d), MC_OK);
		expect_into(B, dst, rm[i], v + i * OBJ, OBJ);
		expect_into(B, dst, up[i], v + (2 + i) * OBJ, OBJ);
	}
	stale0 = atomic_load(&B->metrics->loc_stale);
	assert_int_equal(mc_store_batch_remove(A, rm, 2, true, res), MC_OK);
	vals[0] = v + 4 * OBJ;
	vals[1] = v + 5 * OBJ;
	assert_int_equal(mc_store_upsert_batch(A, up, vals, lens, 2, &on_d, res), MC_OK);
	g0 = lookups(B);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(mc_store_get_into(B, rm[i], dst, OBJ), MC_ERR_OBJECT_NOT_FOUND);
		expect_into(B, dst, up[i], v + (4 + i) * OBJ, lens[i]);
	}
	assert_int_equal(lookups(B), g0 + 4);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 4);
	unreg(B, dst);
	free(v);
	mc_store_free(D);
}

/* A master of minor 14 neither lists holders' spoils nor marks old
 * holders' replicas, one of 13 also tells holders no client_ttl (an
 * expired holder would not fence itself), and one of 12 not even spoils:
 * a client caches nothing from any of them (every get asks). */
static void old_master_caches_nothing(void **state)
{
	char addr[64], meta[128];
	struct mc_master_server *m2;
	struct mc_store *R;
	char *v = malloc(OBJ), *dst;
	uint64_t g0;
	(void)state;

	for (unsigned minor = 13; minor <= 14; minor++) {
		mc_store_proto_minor_set(minor); /* the master answers as this minor */
		m2 = mc_test_master_start(no_eviction, addr, sizeof(addr), meta, sizeof(meta));
		assert_non_null(m2);
		R = client_at(addr, meta, 16 << 20, true);
		struct mc_store_config on_r = prefer(R);
		dst = reg(R);
		mc_test_fill(v, OBJ, 48);
		assert_int_equal(mc_store_put(R, "lc-old", v, OBJ, &on_r), MC_OK);
		assert_int_equal(mc_master_conn_peer_minor(R->conn), minor);
		g0 = lookups(R);
		expect_into(R, dst, "lc-old", v, OBJ);
		expect_into(R, dst, "lc-old", v, OBJ);
		assert_int_equal(lookups(R), g0 + 2);
		assert_int_equal(mc_store_loc_count(R), 0);
		unreg(R, dst);
		mc_store_free(R);
		mc_master_server_stop(m2);
		mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	}
	free(v);
}

#define FENCE_TTL_MS   2000
#define FENCE_LEASE_MS 6000

static void short_client_ttl(struct mc_master_server_config *c)
{
	no_eviction(c);
	c->master.client_ttl_ms = FENCE_TTL_MS;
	c->master.default_kv_lease_ttl_ms = FENCE_LEASE_MS;
}

/* Poll cond(s) every 10 ms for at most ms (the events have no waiter). */
static bool poll_until(bool (*cond)(struct mc_store *), struct mc_store *s, uint64_t ms)
{
	uint64_t end = mc_now_ms() + ms;

	while (!cond(s) && mc_now_ms() < end) {
		struct timespec nap = {0, 10 * 1000 * 1000};

		nanosleep(&nap, NULL);
	}
	return cond(s);
}

static bool is_fenced(struct mc_store *s)
{
	return atomic_load(&s->fenced);
}

static bool is_back(struct mc_store *s)
{
	bool back;

	pthread_mutex_lock(&s->xseg_lock);
	back = !atomic_load(&s->fenced) && s->seg_registered;
	pthread_mutex_unlock(&s->xseg_lock);
	return back;
}

static uint64_t remounts_before;

/* Back and mounted again: the remount that follows the fence's lifting
 * has been answered (counted once answered) */
static bool remounted(struct mc_store *s)
{
	return is_back(s) && rpcs(s, MC_STORE_REMOUNT_SEGMENT) > remounts_before;
}

static bool ttl_known(struct mc_store *s)
{
	return atomic_load(&s->fence_ttl_ms) != 0;
}

static bool key_gone(struct mc_store *s)
{
	return mc_store_is_exist(s, "lc-fx") == 0;
}

/*
 * A holder whose pings stop reaching the master (a test hook holds them)
 * while its readers still reach it: before the master's client_ttl runs
 * out it takes its segment's memory out of its engine (client_fence.c),
 * the master expires it and drops the key, the key is put again
 * elsewhere, and R's cached get of it, its lease still running, is
 * refused by the holder and asks the master: the new value (before: R got
 * the old value back, whole and checked, from the expired holder's intact
 * memory).  Its pings answered again (NEED_REMOUNT), the holder puts the
 * memory back and remounts only once every lease the master granted
 * before the expiry has ended, R's entry's deadline among them, and then
 * serves puts and gets again.
 */
static void expired_holder_fences_itself(void **state)
{
	char addr[64], meta[128];
	struct mc_master_server *m2 =
		mc_test_master_start(short_client_ttl, addr, sizeof(addr), meta, sizeof(meta));
	struct mc_store *W, *R, *D;
	struct mc_store_config on_w, on_d;
	struct mc_store_loc *e = NULL;
	uint64_t deadline, stale0, a;
	char *v = malloc(3 * OBJ), *dst, *dd;
	(void)state;

	assert_non_null(m2);
	W = client_at(addr, meta, 16 << 20, true);
	R = client_at(addr, meta, 0, true);
	D = client_at(addr, meta, 16 << 20, true);
	on_w = prefer(W);
	on_d = prefer(D);
	dst = reg(R);
	dd = reg(D);
	mc_test_fill(v, 3 * OBJ, 49);
	/* D learns the master's client_ttl from its first answered ping */
	assert_true(poll_until(ttl_known, D, 5000));
	assert_int_equal(atomic_load(&D->fence_ttl_ms), FENCE_TTL_MS);
	assert_int_equal(mc_store_put(W, "lc-fx", v, OBJ, &on_d), MC_OK);
	for (int i = 0; !e && i < 20; i++) {
		expect_into(R, dst, "lc-fx", v, OBJ);
		e = mc_store_loc_find(R, "lc-fx", 5);
	}
	assert_non_null(e);
	deadline = e->deadline_ms;
	mc_store_loc_unref(e);
	for (int i = 0; !mc_store_loc_count(D) && i < 20; i++) /* D's own, read by memcpy */
		expect_into(D, dd, "lc-fx", v, OBJ);
	assert_int_equal(mc_store_loc_count(D), 1);

	atomic_store(&D->pings_held, true);
	assert_true(poll_until(is_fenced, D, 2 * FENCE_TTL_MS));
	assert_false(D->seg_registered);
	assert_int_equal(atomic_load(&D->fences), 1);
	assert_int_equal(mc_store_loc_count(D), 0);		/* its own entries went too */
	assert_true(poll_until(key_gone, W, 4 * FENCE_TTL_MS)); /* the master expired D */
	assert_int_equal(mc_store_put(W, "lc-fx", v + OBJ, OBJ / 2, &on_w), MC_OK);
	assert_true(mc_now_ms() < deadline); /* R's entry still names D's block */
	stale0 = atomic_load(&R->metrics->loc_stale);
	expect_into(R, dst, "lc-fx", v + OBJ, OBJ / 2);
	assert_int_equal(atomic_load(&R->metrics->loc_stale), stale0 + 1);

	remounts_before = rpcs(D, MC_STORE_REMOUNT_SEGMENT);
	atomic_store(&D->pings_held, false);
	assert_true(poll_until(remounted, D, 3 * FENCE_LEASE_MS));
	assert_true(mc_now_ms() >= deadline); /* no entry learnt before the expiry is left */
	assert_int_equal(mc_store_put(W, "lc-fx2", v + 2 * OBJ, OBJ, &on_d), MC_OK);
	a = replica_addr(W, "lc-fx2"); /* in D's segment, back in use */
	assert_true(a >= (uint64_t)(uintptr_t)D->seg &&
		    a < (uint64_t)(uintptr_t)D->seg + D->seg_size);
	expect_into(R, dst, "lc-fx2", v + 2 * OBJ, OBJ);
	expect_into(R, dst, "lc-fx", v + OBJ, OBJ / 2);
	assert_int_equal(atomic_load(&D->fences), 1);

	unreg(R, dst);
	unreg(D, dd);
	mc_store_free(D);
	mc_store_free(R);
	mc_store_free(W);
	mc_master_server_stop(m2);
	free(v);
}

/*
 * A fence on pings that were only slow: the master (client_ttl 10 s here)
 * never expired the holder, so the next ping answered OK puts its memory
 * back at once.  The test makes D believe in a short TTL (a master's
 * answer would set it; D's pings are held, so none does): fenced, B's
 * cached get of a key in D is refused and asks the master, which still
 * lists D; once D's pings go out again, gets of D read from it again.
 */
static void fence_lifts_on_an_answered_ping(void **state)
{
	struct mc_store *D = client_new(16 << 20);
	struct mc_store_config on_d = prefer(D);
	char *v = malloc(OBJ), *dst = reg(B);
	uint64_t stale0, f0;
	int64_t n;
	(void)state;

	mc_test_fill(v, OBJ, 50);
	assert_true(poll_until(ttl_known, D, 5000));
	assert_int_equal(mc_store_put(A, "lc-fl", v, OBJ, &on_d), MC_OK);
	expect_into(B, dst, "lc-fl", v, OBJ);
	f0 = atomic_load(&D->fences);
	atomic_store(&D->pings_held, true);
	atomic_store(&D->fence_ttl_ms, 400);
	assert_true(poll_until(is_fenced, D, 5000));
	assert_int_equal(atomic_load(&D->fences), f0 + 1);
	stale0 = atomic_load(&B->metrics->loc_stale);
	memset(dst, 0, OBJ);
	n = mc_store_get_into(B, "lc-fl", dst, OBJ);
	assert_true(n < 0); /* the only replica, in fenced memory: refused */
	assert_true(atomic_load(&B->metrics->loc_stale) >= stale0 + 1);

	atomic_store(&D->pings_held, false);
	assert_true(poll_until(is_back, D, 5000));
	assert_int_equal(atomic_load(&D->fence_ttl_ms), 10000); /* the master's again */
	expect_into(B, dst, "lc-fl", v, OBJ);
	assert_int_equal(atomic_load(&D->fences), f0 + 1);
	assert_int_equal(mc_store_remove(A, "lc-fl", true), MC_OK);
	unreg(B, dst);
	free(v);
	mc_store_free(D);
}

/* Run the move or copy task id to its end (the source holder's heartbeat
 * runs it; polled, as the API offers no wait). */
static void task_done(struct mc_store *s, const struct mc_store_task_uuid *id)
{
	struct mc_store_task_state ts = {.status = 0};

	for (int i = 0; i < 600 && ts.status != 2 && ts.status != 3; i++) {
		struct timespec nap = {0, 20 * 1000 * 1000};

		assert_int_equal(mc_store_query_task(s, id, &ts), MC_OK);
		if (ts.status != 2 && ts.status != 3)
			nanosleep(&nap, NULL);
	}
	if (ts.status != 3)
		fail_msg("task: status %d (%s)", ts.status, ts.message);
}

/*
 * A move task takes the replica B has cached from D1 to D2 and frees the
 * block on D1 at commit.  Bytes never change under a move: until the block
 * is reused B's cached get returns the value, right; once another object
 * reuses it, the cached read fails its check and B reads D2 through the
 * master.  A copy task adds a replica and changes nothing B has cached.
 * No report, no mismatch.
 */
static void move_and_copy_keep_the_value(void **state)
{
	struct mc_store *D1 = client_new(16 << 20), *D2 = client_new(16 << 20);
	struct mc_store_config on_d1 = prefer(D1);
	const char *to_a[1] = {mc_store_hostname(A)};
	struct mc_store_task_uuid id;
	struct mc_store_replica_desc d[2];
	char *v = malloc(2 * OBJ), *dst = reg(B);
	uint64_t a1, stale0, mism0, rep0, g0;
	(void)state;

	mc_test_fill(v, 2 * OBJ, 43);
	assert_int_equal(mc_store_put(A, "lc-mv", v, OBJ, &on_d1), MC_OK);
	expect_into(B, dst, "lc-mv", v, OBJ);
	a1 = replica_addr(A, "lc-mv");
	stale0 = atomic_load(&B->metrics->loc_stale);
	mism0 = atomic_load(&B->metrics->checksum_mismatches);
	rep0 = reports(B);

	assert_int_equal(mc_store_create_copy_task(A, "lc-mv", to_a, 1, &id), MC_OK);
	task_done(A, &id);
	g0 = lookups(B);
	expect_into(B, dst, "lc-mv", v, OBJ);
	assert_int_equal(lookups(B), g0);

	assert_int_equal(mc_store_create_move_task(A, "lc-mv", mc_store_hostname(D1),
						   mc_store_hostname(D2), &id),
			 MC_OK);
	task_done(A, &id);
	assert_int_equal(mc_store_get_replica_desc(A, "lc-mv", d, 2), 2);
	assert_string_not_equal(d[0].segment_name, mc_store_hostname(D1));
	assert_string_not_equal(d[1].segment_name, mc_store_hostname(D1));
	g0 = lookups(B);
	expect_into(B, dst, "lc-mv", v, OBJ); /* the freed block, intact: the value */
	assert_int_equal(lookups(B), g0);
	assert_int_equal(mc_store_put(A, "lc-mv-new", v + OBJ, OBJ, &on_d1), MC_OK);
	assert_int_equal(replica_addr(A, "lc-mv-new"), a1); /* the premise: reused */
	expect_into(B, dst, "lc-mv", v, OBJ);
	assert_int_equal(lookups(B), g0 + 1);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 1);
	assert_int_equal(atomic_load(&B->metrics->checksum_mismatches), mism0);
	assert_int_equal(reports(B), rep0);
	expect_into(B, dst, "lc-mv-new", v + OBJ, OBJ);
	unreg(B, dst);
	free(v);
	mc_store_free(D1);
	mc_store_free(D2);
}

/*
 * Holders spoil (protocol minor 15, master/hspoil.c, client_hspoil.c):
 * overrides whose writer spoils nothing.  A force RemoveAll and a force
 * RemoveByRegex (jobs: no answer lists anything) of a key R has cached,
 * on a master of their own (they take every key): the master parks the
 * leased block and lists it in its holder W's next Ping answer, W
 * complements its head and gives it back (SpoilDone); the key is put
 * again elsewhere (X) and R's cached get, its entry still live, fails its
 * check and reads the new value (before: the removed value, whole and
 * checked, from W's intact block, until the lease's end).
 */
static void holders_spoil_force_remove_jobs(void **state)
{
	char addr[64], meta[128];
	struct mc_master_server *m2 =
		mc_test_master_start(no_eviction, addr, sizeof(addr), meta, sizeof(meta));
	struct mc_store *W, *X, *R;
	struct mc_store_config on_w, on_x;
	struct mc_store_loc *e;
	char *v = malloc(4 * OBJ), *dst;
	const char *keys[2] = {"hs-ra", "hs-rx"};
	uint64_t h0, stale0, mism0;
	(void)state;

	assert_non_null(m2);
	W = client_at(addr, meta, 16 << 20, true);
	X = client_at(addr, meta, 16 << 20, true);
	R = client_at(addr, meta, 16 << 20, true); /* mounted: no remount drops its entries */
	on_w = prefer(W);
	on_x = prefer(X);
	dst = reg(R);
	mc_test_fill(v, 4 * OBJ, 51);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(mc_store_put(W, keys[k], v + 2 * k * OBJ, OBJ, &on_w), MC_OK);
		e = NULL;
		for (int i = 0; !e && i < 20; i++) {
			expect_into(R, dst, keys[k], v + 2 * k * OBJ, OBJ);
			e = mc_store_loc_find(R, keys[k], strlen(keys[k]));
		}
		assert_non_null(e);
		mc_store_loc_unref(e);
		h0 = atomic_load(&W->hspoils);
		if (k == 0)
			assert_int_equal(mc_store_remove_all(W, true), 1);
		else
			assert_int_equal(mc_store_remove_by_regex(W, "^hs-rx$", true), 1);
		await_hspoils(W, h0 + 1);
		assert_int_equal(mc_store_put(X, keys[k], v + (2 * k + 1) * OBJ, OBJ / 2, &on_x),
				 MC_OK);
		/* R's entry names W's spoiled block: its check fails, the master
		 * says X holds the new value */
		e = mc_store_loc_find(R, keys[k], strlen(keys[k]));
		assert_non_null(e);
		mc_store_loc_unref(e);
		stale0 = atomic_load(&R->metrics->loc_stale);
		mism0 = atomic_load(&R->metrics->checksum_mismatches);
		expect_into(R, dst, keys[k], v + (2 * k + 1) * OBJ, OBJ / 2);
		assert_int_equal(atomic_load(&R->metrics->loc_stale), stale0 + 1);
		assert_int_equal(atomic_load(&R->metrics->checksum_mismatches), mism0);
	}
	unreg(R, dst);
	mc_store_free(R);
	mc_store_free(X);
	mc_store_free(W);
	mc_master_server_stop(m2);
	free(v);
}

/*
 * A writer of minor 12 (upstream's) force-removes a key B has cached, and
 * upserts another to another size: neither answer lists it anything, so
 * the holder D spoils both old blocks after its next ping (the remove's
 * given back by D's SpoilDone, the upsert's parked as before).  The
 * removed key is put again on A: B's cached gets, entries live, fail
 * their checks and read the new values (before: the old values).
 */
static void holders_spoil_old_writers_overrides(void **state)
{
	struct mc_store *D = client_new(16 << 20);
	struct mc_store_config on_a = prefer(A), on_d = prefer(D);
	char *v = malloc(4 * OBJ), *dst = reg(B);
	uint64_t h0, stale0, a1;
	(void)state;

	mc_test_fill(v, 4 * OBJ, 52);
	assert_int_equal(mc_store_put(A, "hs-o", v, OBJ, &on_d), MC_OK);
	assert_int_equal(mc_store_put(A, "hs-u", v + OBJ, OBJ, &on_d), MC_OK);
	expect_into(B, dst, "hs-o", v, OBJ);
	expect_into(B, dst, "hs-u", v + OBJ, OBJ);
	a1 = replica_addr(A, "hs-o");
	h0 = atomic_load(&D->hspoils);
	mc_store_proto_minor_set(12);
	assert_int_equal(mc_store_remove(A, "hs-o", true), MC_OK);
	assert_int_equal(mc_store_upsert(A, "hs-u", v + 2 * OBJ, OBJ / 2, &on_d), MC_OK);
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	await_hspoils(D, h0 + 2);
	assert_int_equal(mc_store_put(A, "hs-o", v + 3 * OBJ, OBJ / 4, &on_a), MC_OK);
	assert_true(replica_addr(A, "hs-o") != a1);
	stale0 = atomic_load(&B->metrics->loc_stale);
	expect_into(B, dst, "hs-o", v + 3 * OBJ, OBJ / 4);
	expect_into(B, dst, "hs-u", v + 2 * OBJ, OBJ / 2);
	assert_int_equal(atomic_load(&B->metrics->loc_stale), stale0 + 2);
	assert_int_equal(mc_store_remove(A, "hs-o", true), MC_OK);
	assert_int_equal(mc_store_remove(A, "hs-u", true), MC_OK);
	unreg(B, dst);
	free(v);
	mc_store_free(D);
}

/*
 * A holder of minor 14 (it fences but does not spoil) and one of minor
 * 15: R, of minor 15, caches the latter's replica and not the former's,
 * whose every get asks the master (the master marks it in the replica
 * list's nocache tail), single and batch gets alike.  The old holder O is
 * set up while the process speaks minor 14, then its pings are held so
 * that it never speaks 15 to the master.
 */
static void old_holders_replicas_are_not_cached(void **state)
{
	char addr[64], meta[128];
	struct mc_master_server *m2 =
		mc_test_master_start(no_eviction, addr, sizeof(addr), meta, sizeof(meta));
	struct mc_store *O, *W, *R;
	struct mc_store_config on_o, on_w;
	const char *keys[2] = {"hs-old", "hs-new"};
	char *v = malloc(2 * OBJ), *dst, *bb[2];
	void *bufs[2];
	size_t caps[2] = {OBJ, OBJ};
	int64_t res[2];
	uint64_t g0, bg0;
	(void)state;

	assert_non_null(m2);
	mc_store_proto_minor_set(14);
	O = client_at(addr, meta, 16 << 20, true);
	atomic_store(&O->pings_held, true);
	mc_store_proto_minor_set(MC_STORE_PROTO_MINOR);
	W = client_at(addr, meta, 16 << 20, true);
	R = client_at(addr, meta, 16 << 20, true);
	on_o = prefer(O);
	on_w = prefer(W);
	dst = reg(R);
	mc_test_fill(v, 2 * OBJ, 53);
	assert_int_equal(mc_store_put(W, "hs-old", v, OBJ, &on_o), MC_OK);
	assert_int_equal(mc_store_put(W, "hs-new", v + OBJ, OBJ, &on_w), MC_OK);
	g0 = lookups(R);
	for (int i = 0; i < 3; i++)
		expect_into(R, dst, "hs-old", v, OBJ);
	assert_int_equal(lookups(R), g0 + 3);
	assert_null(mc_store_loc_find(R, "hs-old", 6));
	for (int i = 0; i < 20 && !mc_store_loc_count(R); i++)
		expect_into(R, dst, "hs-new", v + OBJ, OBJ);
	assert_int_equal(mc_store_loc_count(R), 1);
	g0 = lookups(R);
	expect_into(R, dst, "hs-new", v + OBJ, OBJ); /* cached */
	assert_int_equal(lookups(R), g0);

	/* the batch form: the tail per item */
	assert_int_equal(mc_store_remove(W, "hs-new", true), MC_OK); /* R's entry goes */
	assert_int_equal(mc_store_put(W, "hs-new", v + OBJ, OBJ, &on_w), MC_OK);
	for (int i = 0; i < 2; i++)
		bufs[i] = bb[i] = reg(R);
	bg0 = rpcs(R, MC_STORE_BATCH_GET_REPLICA_LIST);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(mc_store_batch_get_into(R, keys, bufs, caps, 2, res), MC_OK);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(res[i], OBJ);
			assert_memory_equal(bb[i], v + (size_t)i * OBJ, OBJ);
		}
	}
	/* both rounds asked for hs-old; hs-new came from the cache the second */
	assert_int_equal(rpcs(R, MC_STORE_BATCH_GET_REPLICA_LIST), bg0 + 2);
	assert_null(mc_store_loc_find(R, "hs-old", 6));
	{
		struct mc_store_loc *e = mc_store_loc_find(R, "hs-new", 6);

		assert_non_null(e);
		mc_store_loc_unref(e);
	}
	for (int i = 0; i < 2; i++)
		unreg(R, bb[i]);
	unreg(R, dst);
	mc_store_free(R);
	mc_store_free(W);
	mc_store_free(O);
	mc_master_server_stop(m2);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(repeated_gets_hit_the_cache),
		cmocka_unit_test(batch_lookups_find_the_live_entries),
		cmocka_unit_test(own_writes_drop_their_keys),
		cmocka_unit_test(force_remove_and_reuse_is_caught),
		cmocka_unit_test(upsert_in_place_is_caught),
		cmocka_unit_test(lease_bounds_the_cache),
		cmocka_unit_test(settings_bound_and_reconnect),
		cmocka_unit_test(concurrent_gets_and_upserts),
		cmocka_unit_test(plain_removes_keep_a_leased_object),
		cmocka_unit_test(remove_all_and_reuse_is_caught),
		cmocka_unit_test(holder_gone_is_caught),
		cmocka_unit_test(move_and_copy_keep_the_value),
		cmocka_unit_test(unmount_refuses_cached_reads),
		cmocka_unit_test(unmount_after_grace_refuses_cached_reads),
		cmocka_unit_test(overrides_spoil_the_old_blocks),
		cmocka_unit_test(batch_overrides_spoil_the_old_blocks),
		cmocka_unit_test(old_master_caches_nothing),
		cmocka_unit_test(expired_holder_fences_itself),
		cmocka_unit_test(fence_lifts_on_an_answered_ping),
		cmocka_unit_test(holders_spoil_force_remove_jobs),
		cmocka_unit_test(holders_spoil_old_writers_overrides),
		cmocka_unit_test(old_holders_replicas_are_not_cached),
	};

	setenv("MC_STORE_LOCATION_CACHE", "1024", 1);
	/* TCP between the in-process clients, as the benchmarks' tcp rows: the
	 * last case races reads of a holder's bytes with upserts rewriting them,
	 * on purpose (the checksum catches it), and on TCP the holder's side of
	 * that race is the engine's user-memory send, which tests/tsan.supp
	 * names; the same-host transport's copy is not named there */
	setenv("MC_SHM_DISABLE", "1", 1);
	/* the reuse cases need a freed block to be the next put's: a put
	 * credit held since the previous put would place it in the block after
	 * (credits are test_store_credit's; these are about cached locations) */
	setenv("MC_STORE_PUT_CREDIT", "0", 1);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

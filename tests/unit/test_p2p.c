/*
 * tests/unit/test_p2p.c - the P2P store's C API (mooncake/p2p_store.h) and
 * its catalog codec (src/p2p/payload.h), against a real etcd member
 * (tests/support/etcd_cluster.c; exits 77 without etcd-server).
 *
 * The multi-process cases live in tests/python/test_p2p_store.py; here are
 * what C sees best: the codec's byte-exact output in upstream's field
 * order, and many stores in one process pulling at once from threads (run
 * under TSan and ASan with leak checks).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/time.h"
#include "etcd_cluster.h"
#include "meta/meta.h"
#include "mooncake/log.h"
#include "mooncake/p2p_store.h"
#include "p2p/payload.h"
#include "slow_mem.h"
#include "support.h"

#define MiB	 (1u << 20)
#define READERS	 4
#define START_MS 30000

static struct mc_etcd_cluster *etcd;

static const char upstream_json[] =
	"{\"name\":\"foo/bar\",\"size\":3145733,\"size_list\":[3145733],\"max_shard_size\":"
	"1048576,\"shards\":[{\"size\":1048576,\"gold\":[{\"segment_name\":\"127.0.0.1:12345\","
	"\"offset\":140000000000}],\"replica_list\":null},{\"size\":1048576,\"gold\":null,"
	"\"replica_list\":[{\"segment_name\":\"10.0.0.2:4000\",\"offset\":5000}]},{\"size\":"
	"1048576,\"gold\":null,\"replica_list\":null},{\"size\":5,\"gold\":null,\"replica_list\":"
	"null}]}";

static void test_codec_round_trip_is_byte_exact(void **state)
{
	struct mc_p2p_payload p;
	char *text;
	size_t len;

	assert_int_equal(mc_p2p_payload_decode(upstream_json, strlen(upstream_json), &p), MC_OK);
	assert_int_equal(p.nshards, 4);
	assert_int_equal(p.shards[3].size, 5);
	assert_string_equal(p.shards[1].replicas.v[0].segment_name, "10.0.0.2:4000");
	assert_int_equal(mc_p2p_payload_encode(&p, &text, &len), MC_OK);
	assert_string_equal(text, upstream_json);
	/* idempotent changes: adding a location twice keeps one */
	assert_int_equal(mc_p2p_locs_add(&p.shards[0].gold, "127.0.0.1:12345", 140000000000ull),
			 MC_OK);
	assert_int_equal(p.shards[0].gold.n, 1);
	assert_int_equal(mc_p2p_locs_remove(&p.shards[1].replicas, "10.0.0.2:4000"), 1);
	assert_false(mc_p2p_payload_held(&p) == false); /* shard 0's gold remains */
	mc_free(text);
	mc_p2p_payload_release(&p);
	/* a shard list that is not the split of size_list */
	assert_int_equal(mc_p2p_payload_decode("{\"name\":\"x\",\"size\":8,\"size_list\":[8],"
					       "\"max_shard_size\":4,\"shards\":[{\"size\":8}]}",
					       79, &p),
			 MC_ERR_MALFORMED_JSON);
}

struct reader {
	pthread_t thread;
	uint8_t *buf;
	mc_status st;
	char why[256]; /* mc_last_error() of the call that failed */
};

static void *read_main(void *arg)
{
	struct reader *r = arg;
	struct mc_p2p_params p = {.metadata_uri = mc_etcd_cluster_uri(etcd),
				  .local_server_name = "127.0.0.1:0",
				  .te_metadata_uri = "P2PHANDSHAKE"};
	struct mc_p2p_store *s;
	uint64_t size = 4 * MiB;

	r->st = mc_p2p_store_new(&p, &s);
	if (r->st) {
		snprintf(r->why, sizeof(r->why), "%s", mc_last_error());
		return NULL;
	}
	r->st = mc_p2p_get_replica(s, "unit/obj", (void *const[]){r->buf}, &size, 1);
	if (!r->st)
		r->st = mc_p2p_delete_replica(s, "unit/obj");
	if (r->st)
		snprintf(r->why, sizeof(r->why), "%s", mc_last_error());
	mc_p2p_store_free(s);
	return NULL;
}

static void test_concurrent_readers_in_one_process(void **state)
{
	struct mc_p2p_params p = {.metadata_uri = mc_etcd_cluster_uri(etcd),
				  .local_server_name = "127.0.0.1:0",
				  .te_metadata_uri = "P2PHANDSHAKE"};
	struct reader rs[READERS];
	struct mc_p2p_store *s;
	struct mc_p2p_info *infos;
	uint64_t size = 4 * MiB;
	uint8_t *src = malloc(size);
	size_t n;

	mc_test_fill(src, size, 42);
	assert_int_equal(mc_p2p_store_new(&p, &s), MC_OK);
	assert_int_equal(
		mc_p2p_register(s, "unit/obj", (void *const[]){src}, &size, 1, MiB, NULL, false),
		MC_OK);
	/* the same range again under another name: counted, not re-registered */
	assert_int_equal(
		mc_p2p_register(s, "unit/obj2", (void *const[]){src}, &size, 1, MiB, NULL, false),
		MC_OK);
	/* a range overlapping it partly */
	assert_int_equal(mc_p2p_register(s, "unit/obj3", (void *const[]){src + 4096},
					 (const uint64_t[]){MiB}, 1, MiB, NULL, false),
			 MC_ERR_ADDRESS_OVERLAPPED);
	assert_int_equal(mc_p2p_unregister(s, "unit/obj2"), MC_OK);
	for (int i = 0; i < READERS; i++) {
		rs[i].buf = calloc(1, size);
		assert_int_equal(pthread_create(&rs[i].thread, NULL, read_main, &rs[i]), 0);
	}
	for (int i = 0; i < READERS; i++) {
		pthread_join(rs[i].thread, NULL);
		if (rs[i].st != MC_OK)
			print_error("reader %d: %s\n", i, rs[i].why);
		assert_int_equal(rs[i].st, MC_OK);
		assert_memory_equal(rs[i].buf, src, size);
		free(rs[i].buf);
	}
	assert_int_equal(mc_p2p_list(s, "unit/", &infos, &n), MC_OK);
	assert_int_equal(n, 1);
	assert_string_equal(infos[0].name, "unit/obj");
	assert_int_equal(infos[0].total_size, size);
	mc_p2p_infos_free(infos, n);
	assert_int_equal(mc_p2p_unregister(s, "unit/obj"), MC_OK);
	assert_int_equal(mc_p2p_list(s, "unit/", &infos, &n), MC_OK);
	assert_int_equal(n, 0); /* the last holder left: the key is gone */
	assert_int_equal(mc_p2p_unregister(s, "unit/obj"), MC_ERR_NOT_FOUND);
	mc_p2p_store_free(s);
	free(src);
}

/* Every holder is tried: three listed replicas that nobody serves (their
 * owners died without leaving the catalog) ahead of the live gold copy. */
static void test_gold_is_reached_behind_dead_replicas(void **state)
{
	struct mc_p2p_params p = {.metadata_uri = mc_etcd_cluster_uri(etcd),
				  .local_server_name = "127.0.0.1:0",
				  .te_metadata_uri = "P2PHANDSHAKE"};
	const char *key = MC_P2P_KEY_PREFIX "unit/stale";
	struct mc_p2p_store *gold, *reader;
	struct mc_p2p_payload pl;
	struct mc_etcd_kv *kvs = NULL;
	struct mc_meta *meta;
	uint64_t size = MiB;
	uint8_t *src = malloc(size), *dst = calloc(1, size);
	size_t n = 0, len;
	char *json;

	mc_test_fill(src, size, 7);
	assert_int_equal(mc_p2p_store_new(&p, &gold), MC_OK);
	assert_int_equal(mc_p2p_register(gold, "unit/stale", (void *const[]){src}, &size, 1, MiB,
					 NULL, false),
			 MC_OK);
	/* three replicas on ports nothing listens on, written as a crashed reader
	 * would have left them */
	assert_int_equal(mc_meta_open(mc_etcd_cluster_uri(etcd), &meta), MC_OK);
	assert_int_equal(mc_meta_etcd_range(meta, key, NULL, &kvs, &n, NULL), MC_OK);
	assert_int_equal(n, 1);
	assert_int_equal(mc_p2p_payload_decode(kvs[0].value, kvs[0].len, &pl), MC_OK);
	for (int i = 1; i <= 3; i++) {
		char name[32];
		snprintf(name, sizeof(name), "127.0.0.1:%d", i);
		assert_int_equal(mc_p2p_locs_add(&pl.shards[0].replicas, name, 4096), MC_OK);
	}
	assert_int_equal(mc_p2p_payload_encode(&pl, &json, &len), MC_OK);
	assert_int_equal(mc_meta_etcd_cas_put(meta, key, json, len, kvs[0].mod_revision), MC_OK);
	mc_free(json);
	mc_p2p_payload_release(&pl);
	mc_etcd_kvs_free(kvs, n);

	assert_int_equal(mc_p2p_store_new(&p, &reader), MC_OK);
	if (mc_p2p_get_replica(reader, "unit/stale", (void *const[]){dst}, &size, 1) != MC_OK)
		fail_msg("get_replica: %s", mc_last_error());
	assert_memory_equal(dst, src, size);
	mc_p2p_store_free(reader);
	mc_p2p_store_free(gold);
	mc_meta_close(meta);
	free(src);
	free(dst);
}

struct slow_reader {
	pthread_t thread;
	void *buf;
	uint64_t size;
	mc_status st;
	int64_t t0, t1; /* the get's start and end (ms) */
	char msg[512];	/* its error message */
};

static void *slow_read_main(void *arg)
{
	struct slow_reader *r = arg;
	struct mc_p2p_params p = {.metadata_uri = mc_etcd_cluster_uri(etcd),
				  .local_server_name = "127.0.0.1:0",
				  .te_metadata_uri = "P2PHANDSHAKE"};
	struct mc_p2p_store *s;

	r->st = mc_p2p_store_new(&p, &s);
	if (r->st)
		return NULL;
	r->st = mc_p2p_get_replica(s, "unit/slow", (void *const[]){r->buf}, &r->size, 1);
	mc_p2p_store_free(s);
	return NULL;
}

/* The holder leaves while a reader pulls from it: its close deregisters
 * the memory, which waits for the read it serves for MC_TE_DEREGISTER_WAIT_MS
 * (300 ms here, set before its engine starts), then cuts it; when close
 * returns nothing reads the memory any more, so the test unmaps it at once
 * (the pages come in at 500 us each: the whole read would need 2 s).  The
 * reader has no other holder and fails.  (Not a regression test: a reader
 * queues one wave, an eighth of the object, so the unbounded wait of before
 * also ended soon; this pins the behaviour down over TCP.) */
static void test_close_waits_bounded_for_served_reads(void **state)
{
	struct mc_p2p_params p = {.metadata_uri = mc_etcd_cluster_uri(etcd),
				  .local_server_name = "127.0.0.1:0",
				  .te_metadata_uri = "P2PHANDSHAKE"};
	enum { LEN = 16 << 20 };
	struct mc_test_slow_mem slow;
	struct slow_reader r = {.size = LEN};
	struct mc_p2p_store *gold;
	uint64_t size = LEN;

	if (!mc_test_slow_mem_open(&slow, LEN, 500))
		skip(); /* no userfaultfd for us (vm.unprivileged_userfaultfd) */
	/* over TCP, where a served read holds the memory for as long as the
	 * reader's queued requests take (same-host copies end by themselves) */
	setenv("MC_SHM_DISABLE", "1", 1);
	setenv("MC_TE_DEREGISTER_WAIT_MS", "300", 1);
	assert_int_equal(mc_p2p_store_new(&p, &gold), MC_OK);
	unsetenv("MC_TE_DEREGISTER_WAIT_MS");
	assert_int_equal(mc_p2p_register(gold, "unit/slow", (void *const[]){slow.base}, &size, 1,
					 LEN, NULL, false),
			 MC_OK);
	r.buf = calloc(1, LEN);
	assert_int_equal(pthread_create(&r.thread, NULL, slow_read_main, &r), 0);
	/* the holder is serving it once its first pages are being supplied */
	while (mc_test_slow_mem_served(&slow) == 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	mc_p2p_store_free(gold);
	mc_test_slow_mem_close(&slow); /* unmapped: a read still served would crash us */
	pthread_join(r.thread, NULL);
	unsetenv("MC_SHM_DISABLE");
	assert_int_not_equal(r.st, MC_OK);
	free(r.buf);
}

/* Point the gold location of shard 0 of key at (segment, offset), compare-and-swap,
 * repeated while a reader's own CAS gets in between. */
static void move_gold(struct mc_meta *meta, const char *key, const char *segment, uint64_t offset)
{
	for (int i = 0; i < 64; i++) {
		struct mc_etcd_kv *kvs = NULL;
		struct mc_p2p_payload pl;
		size_t n = 0, len;
		char *json;
		mc_status st;

		assert_int_equal(mc_meta_etcd_range(meta, key, NULL, &kvs, &n, NULL), MC_OK);
		assert_int_equal(n, 1);
		assert_int_equal(mc_p2p_payload_decode(kvs[0].value, kvs[0].len, &pl), MC_OK);
		mc_p2p_locs_clear(&pl.shards[0].gold);
		assert_int_equal(mc_p2p_locs_add(&pl.shards[0].gold, segment, offset), MC_OK);
		assert_int_equal(mc_p2p_payload_encode(&pl, &json, &len), MC_OK);
		st = mc_meta_etcd_cas_put(meta, key, json, len, kvs[0].mod_revision);
		mc_free(json);
		mc_p2p_payload_release(&pl);
		mc_etcd_kvs_free(kvs, n);
		if (st == MC_OK)
			return;
		assert_int_equal(st, MC_ERR_ETCD_TRANSACTION_FAIL);
	}
	fail_msg("move_gold: the entry kept changing");
}

static void *leave_read_main(void *arg)
{
	struct slow_reader *r = arg;
	struct mc_p2p_params p = {.metadata_uri = mc_etcd_cluster_uri(etcd),
				  .local_server_name = "127.0.0.1:0",
				  .te_metadata_uri = "P2PHANDSHAKE"};
	struct mc_p2p_store *s;

	r->st = mc_p2p_store_new(&p, &s);
	if (r->st)
		return NULL;
	r->t0 = (int64_t)mc_now_ms();
	r->st = mc_p2p_get_replica(s, "unit/leave", (void *const[]){r->buf}, &r->size, 1);
	r->t1 = (int64_t)mc_now_ms();
	snprintf(r->msg, sizeof(r->msg), "%s", mc_last_error());
	mc_p2p_store_free(s);
	return NULL;
}

/* The re-pull's bound (spec 3.5, upstream loops forever on a stale entry):
 * the holder a reader pulled from is gone from the catalog by the time the
 * pull landed, every time.  The gold copy of "unit/leave" sits in slow memory
 * (4 ms a page: a 1 MiB pull takes about 1 s), and while each pull is being
 * served the test moves the catalog's gold location to another slow region
 * (the holder "left" and another took its place).  The reader pulls again
 * from the new gold, MC_P2P_PULL_ROUNDS times in all, then fails with
 * MC_ERR_TRANSFER_FAIL ("too many retries: holders ... left during each of
 * 3 pulls"); the region it would have pulled next is never read (no fourth
 * round), the failed get takes its advertised replica back, and it returned
 * within the rounds' time. */
static void test_repull_gives_up_after_its_rounds(void **state)
{
	struct mc_p2p_params p = {.metadata_uri = mc_etcd_cluster_uri(etcd),
				  .local_server_name = "127.0.0.1:0",
				  .te_metadata_uri = "P2PHANDSHAKE"};
	const char *key = MC_P2P_KEY_PREFIX "unit/leave";
	enum { LEN = 1 << 20, REGIONS = MC_P2P_PULL_ROUNDS + 1 };
	struct mc_test_slow_mem slow[REGIONS];
	struct slow_reader r = {.size = LEN};
	struct mc_p2p_store *gold;
	struct mc_etcd_kv *kvs = NULL;
	struct mc_p2p_payload pl;
	struct mc_meta *meta;
	uint64_t size = LEN;
	size_t n = 0;

	for (int i = 0; i < REGIONS; i++) {
		if (!mc_test_slow_mem_open(&slow[i], LEN, 4000)) {
			while (i--)
				mc_test_slow_mem_close(&slow[i]);
			skip(); /* no userfaultfd for us (vm.unprivileged_userfaultfd) */
		}
	}
	setenv("MC_SHM_DISABLE", "1", 1); /* over TCP: the holder's engine reads the pages */
	assert_int_equal(mc_p2p_store_new(&p, &gold), MC_OK);
	/* the object, then the other regions registered with the same engine
	 * under names of their own (so reads of them are served) */
	assert_int_equal(mc_p2p_register(gold, "unit/leave", (void *const[]){slow[0].base}, &size,
					 1, LEN, NULL, false),
			 MC_OK);
	for (int i = 1; i < REGIONS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "unit/leave-%d", i);
		assert_int_equal(mc_p2p_register(gold, name, (void *const[]){slow[i].base}, &size,
						 1, LEN, NULL, false),
				 MC_OK);
	}
	assert_int_equal(mc_meta_open(mc_etcd_cluster_uri(etcd), &meta), MC_OK);
	r.buf = calloc(1, LEN);
	assert_int_equal(pthread_create(&r.thread, NULL, leave_read_main, &r), 0);
	for (int i = 0; i < MC_P2P_PULL_ROUNDS; i++) {
		/* pull i is being served from region i: its holder "leaves" */
		while (mc_test_slow_mem_served(&slow[i]) == 0) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
		move_gold(meta, key, mc_p2p_store_local_name(gold),
			  (uint64_t)(uintptr_t)slow[i + 1].base);
		assert_int_not_equal(mc_test_slow_mem_served(&slow[i]), LEN / 4096);
	}
	pthread_join(r.thread, NULL);
	unsetenv("MC_SHM_DISABLE");
	assert_int_equal(r.st, MC_ERR_TRANSFER_FAIL);
	assert_non_null(strstr(r.msg, "too many retries"));
	assert_non_null(strstr(r.msg, "left during each of 3 pulls"));
	assert_int_equal(mc_test_slow_mem_served(&slow[MC_P2P_PULL_ROUNDS]), 0);
	/* three pulls of about 1 s each (and an attempt's own bound is 60 s) */
	if (r.t1 - r.t0 >= 20000)
		fail_msg("the failed get took %lld ms", (long long)(r.t1 - r.t0));
	/* its advertised replica was taken back */
	assert_int_equal(mc_meta_etcd_range(meta, key, NULL, &kvs, &n, NULL), MC_OK);
	assert_int_equal(n, 1);
	assert_int_equal(mc_p2p_payload_decode(kvs[0].value, kvs[0].len, &pl), MC_OK);
	assert_int_equal(pl.shards[0].replicas.n, 0);
	mc_p2p_payload_release(&pl);
	mc_etcd_kvs_free(kvs, n);
	mc_meta_close(meta);
	mc_p2p_store_free(gold);
	for (int i = 0; i < REGIONS; i++)
		mc_test_slow_mem_close(&slow[i]);
	free(r.buf);
}

static void test_catalog_needs_etcd(void **state)
{
	struct mc_p2p_params p = {.metadata_uri = "mem://p2p", .local_server_name = "127.0.0.1:0"};
	struct mc_p2p_store *s;

	assert_int_equal(mc_p2p_store_new(&p, &s), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "needs etcd"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_codec_round_trip_is_byte_exact),
		cmocka_unit_test(test_concurrent_readers_in_one_process),
		cmocka_unit_test(test_gold_is_reached_behind_dead_replicas),
		cmocka_unit_test(test_close_waits_bounded_for_served_reads),
		cmocka_unit_test(test_repull_gives_up_after_its_rounds),
		cmocka_unit_test(test_catalog_needs_etcd),
	};
	int rc;

	if (!mc_etcd_available()) {
		printf("1..0 # SKIP etcd-server is not installed\n");
		return 77;
	}
	if (mc_etcd_cluster_start(1, START_MS, &etcd) != 0)
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	mc_etcd_cluster_stop(etcd);
	return rc;
}

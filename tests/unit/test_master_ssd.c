/*
 * tests/unit/test_master_ssd.c - the master's side of the SSD tier
 * (master/ssd.c, spec store.md 4.2, 5): local-disk segments, LOCAL_DISK
 * replicas, eager and on-evict offload, the offload report and
 * re-registration, removes and remove_all, disk eviction, expiry.
 *
 * As test_master.c: every request goes through the real codec both ways
 * and time is the now_ms argument, so nothing sleeps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master/master.h"
#include "master_t.h"
#include "mooncake/status.h"
#include "store/proto.h"

#define MIB (1ull << 20)

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2};
static const struct mc_store_uuid SA = {10, 1}, SB = {20, 2};

static struct mt *t_new_cfg(void (*tune)(struct mc_master_config *c))
{
	struct mc_master_config cfg;

	mt_cfg_init(&cfg);
	cfg.enable_offload = true;
	if (tune)
		tune(&cfg);
	return mt_new(&cfg);
}

static mc_status mount(struct mt *t, struct mc_store_uuid client, struct mc_store_uuid id,
		       const char *name, uint64_t base, uint64_t size)
{
	struct mc_store_mount_req r = {
		client,
		{.id = id,
		 .name = mc_proto_str_c(name),
		 .base = base,
		 .size = size,
		 .te_endpoint = mc_proto_str_c(name),
		 .protocol = mc_proto_str_c("tcp"),
		 .host_id = mc_proto_str_c("h")},
	};
	return mt_call(t, MC_STORE_MOUNT_SEGMENT, &r);
}

static mc_status mount_disk(struct mt *t, struct mc_store_uuid client, const char *endpoint)
{
	struct mc_store_mount_local_disk_req r = {client, true, mc_proto_str_c(endpoint)};
	return mt_call(t, MC_STORE_MOUNT_LOCAL_DISK_SEGMENT, &r);
}

static mc_status put(struct mt *t, struct mc_store_uuid client, const char *key, uint64_t len,
		     bool upsert)
{
	struct mc_store_put_start_req s = {
		.client_id = client,
		.key = mc_proto_str_c(key),
		.value_len = len,
		.config = {.replica_num = 1},
	};
	struct mc_store_put_end_req e = {
		.client_id = client,
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
	};
	mc_status st = mt_call(t, upsert ? MC_STORE_UPSERT_START : MC_STORE_PUT_START, &s);

	if (st != MC_OK)
		return st;
	return mt_call(t, upsert ? MC_STORE_UPSERT_END : MC_STORE_PUT_END, &e);
}

static mc_status get(struct mt *t, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(""), mc_proto_str_c(key)};
	return mt_call(t, MC_STORE_GET_REPLICA_LIST, &r);
}

static mc_status rm(struct mt *t, const char *key)
{
	struct mc_store_remove_req r = {mc_proto_str_c(""), mc_proto_str_c(key), true};
	return mt_call(t, MC_STORE_REMOVE, &r);
}

/* A heartbeat; the answer is in t->resp.body.offload_heartbeat_resp. */
static const struct mc_store_offload_heartbeat_resp *hb(struct mt *t, struct mc_store_uuid client,
							uint32_t max)
{
	struct mc_store_offload_heartbeat_req r = {client, true, max};

	assert_int_equal(mt_call(t, MC_STORE_OFFLOAD_OBJECT_HEARTBEAT, &r), MC_OK);
	return &t->resp.body.offload_heartbeat_resp;
}

/* Report one object; returns its per-item status. */
static int32_t notify(struct mt *t, struct mc_store_uuid client, const char *key, uint64_t size,
		      int32_t status)
{
	struct mc_store_offload_result it = {mc_proto_str_c(""), mc_proto_str_c(key), size, status};
	struct mc_store_notify_offload_req r = {client, 1, &it};

	assert_int_equal(mt_call(t, MC_STORE_NOTIFY_OFFLOAD_SUCCESS, &r), MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.n_items, 1);
	return t->resp.body.batch_status_resp.statuses[0];
}

static bool has_key(const struct mc_store_tenant_key *v, uint32_t n, const char *key)
{
	for (uint32_t i = 0; i < n; i++) {
		if (v[i].key.len == strlen(key) && !memcmp(v[i].key.ptr, key, v[i].key.len))
			return true;
	}
	return false;
}

/* Count the replicas of the last GetReplicaList answer by type. */
static void rep_types(struct mt *t, uint32_t *mem, uint32_t *disk)
{
	const struct mc_store_replica_list *l = &t->resp.body.replica_list;

	*mem = *disk = 0;
	for (uint32_t i = 0; i < l->n_replicas; i++) {
		if (l->replicas[i].type == MC_STORE_REPLICA_MEMORY) {
			assert_int_equal(*disk, 0); /* memory first */
			(*mem)++;
		} else {
			assert_int_equal(l->replicas[i].type, MC_STORE_REPLICA_LOCAL_DISK);
			assert_int_equal(l->replicas[i].status, MC_STORE_REPLICA_COMPLETE);
			(*disk)++;
		}
	}
}

static uint64_t metrics_file_hits(struct mt *t)
{
	struct mc_master_metrics x;

	mc_master_metrics(t->m, &x);
	return x.file_cache_hit_nums;
}

static void setup_a(struct mt *t)
{
	assert_int_equal(mount(t, CA, SA, "a:1", 0x100000000ull, 64 * MIB), MC_OK);
	assert_int_equal(mount_disk(t, CA, "a:50052"), MC_OK);
}

/* ------------------------------------------------------------------------ */

static void mount_needs_enable_offload(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	struct mc_master_config cfg;
	struct mc_master *m;

	(void)state;
	/* without --enable_offload: UNABLE_OFFLOAD */
	mc_master_free(t->m);
	mc_master_config_defaults(&cfg);
	assert_int_equal(mc_master_new(&cfg, &m), MC_OK);
	t->m = m;
	assert_int_equal(mount_disk(t, CA, "a:50052"), MC_ERR_UNABLE_OFFLOAD);
	/* no disk segment: the tier's calls answer SEGMENT_NOT_FOUND */
	{
		struct mc_store_offload_heartbeat_req r = {CA, true, 0};
		assert_int_equal(mt_call(t, MC_STORE_OFFLOAD_OBJECT_HEARTBEAT, &r),
				 MC_ERR_SEGMENT_NOT_FOUND);
	}
	mt_free(t);
	/* bad queue limit is refused */
	mc_master_config_defaults(&cfg);
	cfg.offloading_queue_limit = 0;
	assert_int_equal(mc_master_new(&cfg, &m), MC_ERR_INVALID_PARAMS);
}

static void eager_offload_then_disk_replica(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	const struct mc_store_offload_heartbeat_resp *h;
	uint64_t addr;
	uint32_t mem, disk;
	struct mc_master_metrics x;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "k1", 4096, false), MC_OK);
	assert_int_equal(get(t, "k1"), MC_OK);
	addr = t->resp.body.replica_list.replicas[0].address;
	h = hb(t, CA, 0);
	assert_int_equal(h->n_offload, 1);
	assert_memory_equal(h->offload[0].key.ptr, "k1", 2);
	assert_int_equal(h->offload[0].size, 4096);
	assert_int_equal(h->offload[0].address, addr);
	assert_false(h->remove_all);
	/* handed out once only */
	assert_int_equal(hb(t, CA, 0)->n_offload, 0);
	/* in flight: not removable, not rewritable */
	assert_int_equal(rm(t, "k1"), MC_ERR_OBJECT_HAS_REPLICATION_TASK);
	assert_int_equal(put(t, CA, "k1", 4096, true), MC_ERR_OBJECT_REPLICA_BUSY);
	assert_int_equal(notify(t, CA, "k1", 4096, MC_OK), MC_OK);
	assert_int_equal(get(t, "k1"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(mem, 1);
	assert_int_equal(disk, 1);
	{
		const struct mc_store_replica *d = &t->resp.body.replica_list.replicas[1];

		assert_int_equal(d->client_id.first, CA.first);
		assert_int_equal(d->size, 4096);
		assert_int_equal(d->transport_endpoint.len, strlen("a:50052"));
		assert_memory_equal(d->transport_endpoint.ptr, "a:50052", 7);
	}
	/* no second offload of an object already on disk */
	assert_int_equal(hb(t, CA, 0)->n_offload, 0);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_queued, 1);
	assert_int_equal(x.offload_completed, 1);
	assert_int_equal(x.offload_in_flight, 0);
	/* remove: the owner is told to delete its copy */
	assert_int_equal(rm(t, "k1"), MC_OK);
	h = hb(t, CA, 0);
	assert_int_equal(h->n_removes, 1);
	assert_true(has_key(h->removes, h->n_removes, "k1"));
	assert_int_equal(hb(t, CA, 0)->n_removes, 0); /* delivered once */
	mt_free(t);
}

static void failed_offload_keeps_memory(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	uint32_t mem, disk;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "k", 100, false), MC_OK);
	assert_int_equal(hb(t, CA, 8)->n_offload, 1);
	assert_int_equal(notify(t, CA, "k", 100, MC_ERR_IO), MC_OK);
	assert_int_equal(get(t, "k"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(mem, 1);
	assert_int_equal(disk, 0);
	assert_int_equal(rm(t, "k"), MC_OK); /* no longer busy */
	assert_int_equal(hb(t, CA, 0)->n_removes, 0);
	mt_free(t);
}

/*
 * Eager offload: a handed-out offload the client reports failed (a full
 * disk, an I/O error) is retried by the backfill with a backoff, its
 * memory held meanwhile; after MC_MASTER_OFFLOAD_RETRIES failed rounds in
 * a row the owner's failures are no longer retried (the memory is then an
 * ordinary replica, not pinned for good), and a success starts over.
 * Before, the first failure ended the offload for good: the object was
 * memory-only and evictable at once, although eager offload promises an
 * acknowledged put a disk copy before its memory goes.
 */
static void failed_offload_is_retried_then_released(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	struct mc_master_metrics x;
	uint32_t handed = 0;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "f", 100, false), MC_OK);
	assert_int_equal(hb(t, CA, 8)->n_offload, 1);
	for (int round = 0; round < 40; round++) {
		uint32_t n;

		if (round == 0 || handed)
			assert_int_equal(notify(t, CA, "f", 100, MC_ERR_IO), MC_OK);
		handed = 0;
		/* no retry before the backoff */
		(void)mc_master_tick(t->m, t->now);
		n = hb(t, CA, 8)->n_offload;
		if (round == 0)
			assert_int_equal(n, 0);
		for (int i = 0; i < 20 && !n; i++) {
			t->now += 5000;
			(void)mc_master_tick(t->m, t->now);
			n = hb(t, CA, 8)->n_offload;
		}
		if (!n)
			break;
		handed = n;
		assert_int_equal(n, 1);
	}
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_failed, MC_MASTER_OFFLOAD_RETRIES + 1);
	assert_int_equal(x.offload_backfilled, MC_MASTER_OFFLOAD_RETRIES);
	/* released: removable, and a later success starts the count again */
	assert_int_equal(rm(t, "f"), MC_OK);
	assert_int_equal(put(t, CA, "g", 100, false), MC_OK);
	assert_int_equal(hb(t, CA, 8)->n_offload, 1);
	assert_int_equal(notify(t, CA, "g", 100, MC_OK), MC_OK);
	assert_int_equal(put(t, CA, "h", 100, false), MC_OK);
	assert_int_equal(hb(t, CA, 8)->n_offload, 1);
	assert_int_equal(notify(t, CA, "h", 100, MC_ERR_IO), MC_OK);
	for (int i = 0; i < 20; i++) {
		t->now += 5000;
		(void)mc_master_tick(t->m, t->now);
	}
	assert_int_equal(hb(t, CA, 8)->n_offload, 1); /* retried again */
	mt_free(t);
}

static void no_offload_without_a_disk_owner(void **state)
{
	struct mt *t = t_new_cfg(NULL);

	(void)state;
	/* B has memory but no disk; A has a disk: B's objects are not queued for A */
	setup_a(t);
	assert_int_equal(mount(t, CB, SB, "b:1", 0x200000000ull, 64 * MIB), MC_OK);
	{
		struct mc_store_put_start_req s = {
			.client_id = CB,
			.key = mc_proto_str_c("kb"),
			.value_len = 64,
			.config = {.replica_num = 1, .preferred_segment = mc_proto_str_c("b:1")},
		};
		struct mc_store_put_end_req e = {
			CB, {0}, MC_STORE_REPLICA_ALL, mc_proto_str_c("kb"), {0}, {0}, 0, NULL};
		assert_int_equal(mt_call(t, MC_STORE_PUT_START, &s), MC_OK);
		assert_int_equal(mt_call(t, MC_STORE_PUT_END, &e), MC_OK);
	}
	assert_int_equal(hb(t, CA, 0)->n_offload, 0);
	mt_free(t);
}

static void queue_limit_is_counted(void **state)
{
	struct mt *t;
	struct mc_master_metrics x;

	(void)state;
	t = t_new_cfg(NULL);
	mc_master_free(t->m);
	{
		struct mc_master_config cfg;

		mc_master_config_defaults(&cfg);
		cfg.client_ttl_ms = 1000000000000ull;
		cfg.enable_offload = true;
		cfg.offloading_queue_limit = 2;
		assert_int_equal(mc_master_new(&cfg, &t->m), MC_OK);
	}
	setup_a(t);
	assert_int_equal(put(t, CA, "q1", 64, false), MC_OK);
	assert_int_equal(put(t, CA, "q2", 64, false), MC_OK);
	assert_int_equal(put(t, CA, "q3", 64, false), MC_OK);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_queued, 2);
	assert_int_equal(x.offload_queue_full, 1);
	assert_int_equal(hb(t, CA, 0)->n_offload, 2);
	assert_int_equal(rm(t, "q3"), MC_OK); /* never queued: free to go */
	mt_free(t);
}

static void eviction_keeps_disk_copy_readable(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	uint32_t mem, disk;
	struct mc_master_metrics x;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "e", 1 * MIB, false), MC_OK);
	assert_int_equal(hb(t, CA, 0)->n_offload, 1);
	assert_int_equal(notify(t, CA, "e", 1 * MIB, MC_OK), MC_OK);
	/* fill memory until a put fails, then let eviction run */
	for (int i = 0; i < 200; i++) {
		char k[16];

		snprintf(k, sizeof(k), "f%d", i);
		t->now++;
		if (put(t, CA, k, 1 * MIB, false) != MC_OK)
			break;
		(void)hb(t, CA, 0);			    /* offloads handed out... */
		(void)notify(t, CA, k, 1 * MIB, MC_ERR_IO); /* ...and failed */
	}
	t->now += 60000;
	for (int i = 0; i < 100; i++)
		(void)mc_master_tick(t->m, t->now + (uint64_t)i * 10);
	mc_master_metrics(t->m, &x);
	assert_true(x.evicted_key_count > 0);
	/* e lost its memory replica only (it had the oldest lease) */
	assert_int_equal(get(t, "e"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(mem, 0);
	assert_int_equal(disk, 1);
	assert_true(metrics_file_hits(t) > 0);
	mt_free(t);
}

static void offload_on_evict(struct mc_master_config *c)
{
	c->offload_on_evict = true;
}

static void offload_on_evict_queues_instead_of_dropping(void **state)
{
	struct mt *t = t_new_cfg(offload_on_evict);
	const struct mc_store_offload_heartbeat_resp *h;
	struct mc_master_metrics x;
	int n = 0;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "o", 1 * MIB, false), MC_OK);
	assert_int_equal(hb(t, CA, 0)->n_offload, 0); /* nothing at PutEnd */
	for (; n < 200; n++) {
		char k[16];

		snprintf(k, sizeof(k), "g%d", n);
		t->now++;
		if (put(t, CA, k, 1 * MIB, false) != MC_OK)
			break;
	}
	t->now += 60000;
	(void)mc_master_tick(t->m, t->now);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.evicted_key_count, 0); /* queued, kept in memory */
	assert_true(x.offload_queued > 0);
	h = hb(t, CA, 4096);
	assert_int_equal(h->n_offload, x.offload_queued);
	/* the oldest one, "o", is among them */
	{
		bool seen = false;

		for (uint32_t i = 0; i < h->n_offload; i++)
			seen |= h->offload[i].key.len == 1 && h->offload[i].key.ptr[0] == 'o';
		assert_true(seen);
	}
	assert_int_equal(notify(t, CA, "o", 1 * MIB, MC_OK), MC_OK);
	mt_free(t);
}

static void reregistration_after_restart(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	uint32_t mem, disk;

	(void)state;
	/* a client with only a disk re-registers what it found there */
	assert_int_equal(mount_disk(t, CA, "a:50052"), MC_OK);
	assert_int_equal(notify(t, CA, "old", 777, MC_OK), MC_OK);
	assert_int_equal(get(t, "old"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(mem, 0);
	assert_int_equal(disk, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].size, 777);
	/* again: idempotent */
	assert_int_equal(notify(t, CA, "old", 777, MC_OK), MC_OK);
	/* a size mismatch is refused */
	assert_int_equal(notify(t, CA, "old", 778, MC_OK), MC_ERR_INVALID_PARAMS);
	/* a known object of the same size gains the replica */
	assert_int_equal(mount(t, CA, SA, "a:1", 0x100000000ull, 64 * MIB), MC_OK);
	assert_int_equal(mount_disk(t, CB, "b:50052"), MC_OK);
	assert_int_equal(notify(t, CB, "old", 777, MC_OK), MC_OK);
	assert_int_equal(get(t, "old"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(disk, 2);
	/* a key being written answers an error */
	{
		struct mc_store_put_start_req s = {.client_id = CA,
						   .key = mc_proto_str_c("w"),
						   .value_len = 64,
						   .config = {.replica_num = 1}};
		assert_int_equal(mt_call(t, MC_STORE_PUT_START, &s), MC_OK);
	}
	assert_int_equal(notify(t, CB, "w", 64, MC_OK), MC_ERR_REPLICA_IS_NOT_READY);
	/* unmount of B's disk: its replicas die at once, A's stays */
	{
		struct mc_store_client_req r = {CB};
		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_LOCAL_DISK_SEGMENT, &r), MC_OK);
	}
	assert_int_equal(get(t, "old"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(disk, 1);
	mt_free(t);
}

static void disk_eviction_and_remove_all(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	const struct mc_store_offload_heartbeat_resp *h;

	(void)state;
	assert_int_equal(mount_disk(t, CA, "a:50052"), MC_OK);
	assert_int_equal(notify(t, CA, "d1", 10, MC_OK), MC_OK);
	assert_int_equal(notify(t, CA, "d2", 10, MC_OK), MC_OK);
	{
		struct mc_store_tenant_key k[2] = {{mc_proto_str_c(""), mc_proto_str_c("d1")},
						   {mc_proto_str_c(""), mc_proto_str_c("nope")}};
		struct mc_store_evict_disk_req r = {CA, 2, k};

		assert_int_equal(mt_call(t, MC_STORE_BATCH_EVICT_DISK_REPLICA, &r), MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_OK);
		assert_int_equal(t->resp.body.batch_status_resp.statuses[1],
				 MC_ERR_OBJECT_NOT_FOUND);
	}
	assert_int_equal(get(t, "d1"), MC_ERR_OBJECT_NOT_FOUND); /* nothing left: erased */
	assert_int_equal(hb(t, CA, 0)->n_removes, 0);		 /* the client deletes itself */
	{
		struct mc_store_remove_all_req r = {mc_proto_str_c(""), true};
		assert_int_equal(mt_call(t, MC_STORE_REMOVE_ALL, &r), MC_OK);
		assert_int_equal(t->resp.body.count_resp.count, 1);
	}
	h = hb(t, CA, 0);
	assert_true(h->remove_all);
	assert_int_equal(h->n_removes, 0);
	assert_false(hb(t, CA, 0)->remove_all);
	assert_int_equal(get(t, "d2"), MC_ERR_OBJECT_NOT_FOUND);
	/* capacity report */
	{
		struct mc_store_ssd_capacity_req r = {CA, 1000, 300};
		struct mc_master_metrics x;

		assert_int_equal(mt_call(t, MC_STORE_REPORT_SSD_CAPACITY, &r), MC_OK);
		mc_master_metrics(t->m, &x);
		assert_int_equal(x.ssd_total_bytes, 1000);
		assert_int_equal(x.ssd_used_bytes, 300);
		assert_int_equal(x.local_disk_clients, 1);
	}
	mt_free(t);
}

static void short_ttl(struct mc_master_config *c)
{
	c->client_ttl_ms = 10000;
}

static void expiry_drops_disk_replicas_and_queues(void **state)
{
	struct mt *t = t_new_cfg(short_ttl);
	struct mc_master_metrics x;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "x", 64, false), MC_OK);
	assert_int_equal(notify(t, CA, "y", 64, MC_OK), MC_OK); /* disk only */
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_in_flight, 1);
	t->now += 20000;
	(void)mc_master_tick(t->m, t->now);
	assert_int_equal(get(t, "x"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "y"), MC_ERR_OBJECT_NOT_FOUND);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_in_flight, 0);
	assert_int_equal(x.local_disk_clients, 0);
	mt_free(t);
}

static void handed_out_then_gone_is_not_reregistered(void **state)
{
	struct mt *t = t_new_cfg(NULL);

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "z", 64, false), MC_OK);
	assert_int_equal(hb(t, CA, 0)->n_offload, 1);
	/* its memory segment goes while the copy is being written */
	{
		struct mc_store_unmount_req r = {CA, SA};
		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &r), MC_OK);
	}
	assert_int_equal(get(t, "z"), MC_ERR_OBJECT_NOT_FOUND);
	/* the late report must not bring back the object */
	assert_int_equal(notify(t, CA, "z", 64, MC_OK), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "z"), MC_ERR_OBJECT_NOT_FOUND);
	mt_free(t);
}

static void upsert_drops_disk_copy(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	const struct mc_store_offload_heartbeat_resp *h;
	uint32_t mem, disk;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "u", 64, false), MC_OK);
	assert_int_equal(hb(t, CA, 0)->n_offload, 1);
	assert_int_equal(notify(t, CA, "u", 64, MC_OK), MC_OK);
	assert_int_equal(put(t, CA, "u", 64, true), MC_OK);
	assert_int_equal(get(t, "u"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(disk, 0);
	h = hb(t, CA, 0);
	assert_true(has_key(h->removes, h->n_removes, "u"));
	assert_int_equal(h->n_offload, 1); /* the new value is offloaded again */
	mt_free(t);
}

static void promote(struct mc_master_config *c)
{
	c->promotion_on_hit = true;
	c->promotion_admission_threshold = 2;
	c->promotion_max_per_heartbeat = 4;
}

static const struct mc_store_promotion_heartbeat_resp *phb(struct mt *t, struct mc_store_uuid c)
{
	struct mc_store_promotion_heartbeat_req r = {c, 0};

	assert_int_equal(mt_call(t, MC_STORE_PROMOTION_OBJECT_HEARTBEAT, &r), MC_OK);
	return &t->resp.body.promotion_heartbeat_resp;
}

static int32_t pnotify(struct mt *t, struct mc_store_uuid c, const char *key, uint64_t id,
		       int32_t status)
{
	struct mc_store_promotion_result it = {mc_proto_str_c(""), mc_proto_str_c(key), id, status};
	struct mc_store_notify_promotion_req r = {c, 1, &it};

	assert_int_equal(mt_call(t, MC_STORE_NOTIFY_PROMOTION, &r), MC_OK);
	return t->resp.body.batch_status_resp.statuses[0];
}

static void promotion_on_hit_after_threshold(void **state)
{
	struct mt *t = t_new_cfg(promote);
	const struct mc_store_promotion_heartbeat_resp *p;
	struct mc_master_metrics x;
	uint64_t id, addr;
	uint32_t mem, disk;

	(void)state;
	setup_a(t);
	assert_int_equal(notify(t, CA, "p", 4096, MC_OK), MC_OK); /* on disk only */
	assert_int_equal(get(t, "p"), MC_OK);			  /* hit 1: below 2 */
	assert_int_equal(phb(t, CA)->n_tasks, 0);
	assert_int_equal(get(t, "p"), MC_OK); /* hit 2: admitted */
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.promotion_admitted, 1);
	assert_int_equal(x.promotion_rejected_frequency, 1);
	assert_int_equal(rm(t, "p"), MC_ERR_OBJECT_HAS_REPLICATION_TASK);
	p = phb(t, CA);
	assert_int_equal(p->n_tasks, 1);
	assert_int_equal(p->tasks[0].size, 4096);
	assert_int_equal(p->tasks[0].replica.type, MC_STORE_REPLICA_MEMORY);
	assert_int_equal(p->tasks[0].replica.status, MC_STORE_REPLICA_PROCESSING);
	id = p->tasks[0].replica.id;
	addr = p->tasks[0].replica.address;
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.allocated_bytes, 4096); /* the block is held */
	/* a wrong replica id is not this promotion */
	assert_int_equal(pnotify(t, CA, "p", id + 2, MC_OK), MC_ERR_REPLICA_NOT_FOUND);
	assert_int_equal(pnotify(t, CA, "p", id, MC_OK), MC_OK);
	assert_int_equal(get(t, "p"), MC_OK);
	rep_types(t, &mem, &disk);
	assert_int_equal(mem, 1);
	assert_int_equal(disk, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].address, addr);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.promotion_completed, 1);
	assert_int_equal(x.promotion_in_flight, 0);
	/* a memory hit does not promote again */
	assert_int_equal(phb(t, CA)->n_tasks, 0);
	assert_int_equal(rm(t, "p"), MC_OK);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.allocated_bytes, 0);
	mt_free(t);
}

/*
 * A promotion of an object with a chunk-sum trailer (protocol minor 11):
 * its disk copy holds the value only.  A promoter of minor 11 is told the
 * block's size with the trailer, which it writes (client_offload.c), and
 * the object keeps its checksum, the trailer's hash; one of minor 10 is
 * told the value's size, writes no trailer, and the checksum goes at its
 * report, so the block is read unchecked rather than failed.
 */
static void trailer_object_promotion_follows_the_promoter(void **state)
{
	const uint64_t v = 100000, tl = mc_store_trailer_len(v);

	(void)state;
	for (int old = 0; old < 2; old++) {
		struct mt *t = t_new_cfg(promote);
		struct mc_store_put_start_req ps = {.client_id = CA,
						    .key = mc_proto_str_c("tp"),
						    .value_len = v,
						    .config = {.replica_num = 1},
						    .trailer_len = {true, tl}};
		struct mc_store_put_end_req pe = {.client_id = CA,
						  .replica_type = MC_STORE_REPLICA_ALL,
						  .key = mc_proto_str_c("tp"),
						  .checksum = {true, 0x77}};
		const struct mc_store_promotion_heartbeat_resp *p;
		struct mc_store_corrupt_item it;
		struct mc_store_corrupt_req cr;
		uint64_t id;
		uint32_t mem, disk;

		setup_a(t);
		assert_int_equal(mt_call(t, MC_STORE_PUT_START, &ps), MC_OK);
		assert_int_equal(mt_call(t, MC_STORE_PUT_END, &pe), MC_OK);
		assert_int_equal(hb(t, CA, 0)->n_offload, 1);
		assert_int_equal(t->resp.body.offload_heartbeat_resp.offload[0].size, v);
		assert_int_equal(notify(t, CA, "tp", v, MC_OK), MC_OK);
		/* the memory replica goes (reported corrupt): on disk only */
		assert_int_equal(get(t, "tp"), MC_OK);
		assert_true(t->resp.body.replica_list.table_cksum.present);
		it = (struct mc_store_corrupt_item){mc_proto_str_c("tp"),
						    t->resp.body.replica_list.replicas[0].id};
		cr = (struct mc_store_corrupt_req){CB, mc_proto_str_c(""), 1, &it};
		assert_int_equal(mt_call(t, MC_STORE_REPORT_CORRUPT, &cr), MC_OK);
		assert_int_equal(get(t, "tp"), MC_OK);
		rep_types(t, &mem, &disk);
		assert_int_equal(mem, 0);
		assert_int_equal(disk, 1);
		assert_int_equal(get(t, "tp"), MC_OK); /* hit 2: admitted */
		t->minor = old ? 10 : 0;
		p = phb(t, CA);
		assert_int_equal(p->n_tasks, 1);
		assert_int_equal(p->tasks[0].size, v);
		assert_int_equal(p->tasks[0].replica.size, old ? v : v + tl);
		id = p->tasks[0].replica.id;
		assert_int_equal(pnotify(t, CA, "tp", id, MC_OK), MC_OK);
		t->minor = 0;
		assert_int_equal(get(t, "tp"), MC_OK);
		rep_types(t, &mem, &disk);
		assert_int_equal(mem, 1);
		assert_int_equal(t->resp.body.replica_list.replicas[0].size, v);
		assert_int_equal(t->resp.body.replica_list.table_cksum.present, !old);
		if (!old)
			assert_int_equal(t->resp.body.replica_list.table_cksum.value, 0x77);
		assert_false(t->resp.body.replica_list.checksum.present);
		mt_free(t);
	}
}

/*
 * The End rule on the disk tier.  The owner restarts its SSD tier while a
 * promotion of an object that lives on its disk only is handed out: the
 * object is gone at once (the sweep erases it later), the promotion is
 * cancelled, and the late NotifyPromotion finds no object.  Then the
 * generations a RemoveAll's wipe kills: what it removes is counted, a
 * leased object it keeps loses its disk copy and is gone too.
 */
static void promotion_end_on_a_gone_object(void **state)
{
	struct mt *t = t_new_cfg(promote);
	const struct mc_store_promotion_heartbeat_resp *p;
	struct mc_master_metrics x;
	uint64_t id;

	(void)state;
	setup_a(t);
	assert_int_equal(notify(t, CA, "p", 4096, MC_OK), MC_OK); /* on disk only */
	assert_int_equal(get(t, "p"), MC_OK);
	assert_int_equal(get(t, "p"), MC_OK); /* admitted */
	p = phb(t, CA);
	assert_int_equal(p->n_tasks, 1);
	id = p->tasks[0].replica.id;
	{
		struct mc_store_client_req r = {CA};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_LOCAL_DISK_SEGMENT, &r), MC_OK);
	}
	assert_int_equal(mount_disk(t, CA, "a:50052"), MC_OK);
	assert_int_equal(get(t, "p"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(pnotify(t, CA, "p", id, MC_OK), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get(t, "p"), MC_ERR_OBJECT_NOT_FOUND);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.allocated_bytes, 0); /* the block went with the promotion */
	assert_int_equal(x.promotion_in_flight, 0);
	assert_int_equal(x.promotion_completed, 0);
	assert_int_equal(x.key_count, 0);

	assert_int_equal(notify(t, CA, "q", 64, MC_OK), MC_OK);
	assert_int_equal(notify(t, CA, "q2", 64, MC_OK), MC_OK);
	assert_int_equal(get(t, "q"), MC_OK); /* leased */
	{
		struct mc_store_remove_all_req r = {mc_proto_str_c(""), false};

		assert_int_equal(mt_call(t, MC_STORE_REMOVE_ALL, &r), MC_OK);
		assert_int_equal(t->resp.body.count_resp.count, 1); /* q2 */
	}
	assert_int_equal(get(t, "q"), MC_ERR_OBJECT_NOT_FOUND); /* its only copy was wiped */
	(void)mc_master_sweep_run(t->m, 0);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.key_count, 0);
	mt_free(t);
}

static void failed_and_expired_promotions_free_their_block(void **state)
{
	struct mt *t = t_new_cfg(promote);
	struct mc_master_metrics x;
	uint64_t id;

	(void)state;
	setup_a(t);
	assert_int_equal(notify(t, CA, "f", 4096, MC_OK), MC_OK);
	assert_int_equal(notify(t, CA, "g", 4096, MC_OK), MC_OK);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(get(t, "f"), MC_OK);
		assert_int_equal(get(t, "g"), MC_OK);
	}
	assert_int_equal(phb(t, CA)->n_tasks, 2);
	id = t->resp.body.promotion_heartbeat_resp.tasks[0].replica.id;
	{
		bool f_first = t->resp.body.promotion_heartbeat_resp.tasks[0].key.ptr[0] == 'f';

		assert_int_equal(pnotify(t, CA, f_first ? "f" : "g", id, MC_ERR_FILE_READ_FAIL),
				 MC_OK);
	}
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.promotion_failed, 1);
	assert_int_equal(x.allocated_bytes, 4096); /* the other one's block */
	/* the other is never reported: freed after put_start_release_timeout */
	t->now += 600001;
	(void)mc_master_tick(t->m, t->now);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.promotion_expired, 1);
	assert_int_equal(x.promotion_in_flight, 0);
	assert_int_equal(x.allocated_bytes, 0);
	mt_free(t);
}

static void unreported_offload_expires(void **state)
{
	struct mt *t = t_new_cfg(NULL);
	struct mc_master_metrics x;

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "s", 64, false), MC_OK);
	assert_int_equal(hb(t, CA, 0)->n_offload, 1);
	t->now += 600001;
	(void)mc_master_tick(t->m, t->now);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_expired, 1);
	assert_int_equal(rm(t, "s"), MC_OK); /* free again */
	mt_free(t);
}

static void force_evict_small_cap(struct mc_master_config *c)
{
	c->offload_on_evict = true;
	c->offload_force_evict = true;
	c->offloading_queue_limit = 2;
	c->offload_cap_ratio = 0.5; /* one object queued per round */
	c->eviction_ratio = 0.2;
}

static void force_evict_caps_what_one_round_queues(void **state)
{
	struct mt *t = t_new_cfg(force_evict_small_cap);
	struct mc_master_metrics x;

	(void)state;
	setup_a(t);
	for (int n = 0; n < 200; n++) {
		char k[16];

		snprintf(k, sizeof(k), "c%d", n);
		t->now++;
		if (put(t, CA, k, 1 * MIB, false) != MC_OK)
			break;
	}
	t->now += 60000;
	(void)mc_master_tick(t->m, t->now);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_queued, 1); /* the cap */
	assert_true(x.evicted_key_count >= 1); /* the others went without a copy */
	assert_int_equal(hb(t, CA, 0)->n_offload, 1);
	mt_free(t);
}

static void clear_and_remove_all_skip_busy_objects(void **state)
{
	struct mt *t = t_new_cfg(NULL);

	(void)state;
	setup_a(t);
	assert_int_equal(put(t, CA, "b", 64, false), MC_OK); /* offload queued */
	{
		struct mc_proto_str k = mc_proto_str_c("b");
		struct mc_store_replica_clear_req r = {CA, mc_proto_str_c(""), mc_proto_str_c(""),
						       1, &k};

		t->now += 1;
		assert_int_equal(mt_call(t, MC_STORE_BATCH_REPLICA_CLEAR, &r), MC_OK);
		assert_int_equal(t->resp.body.keys_resp.n_keys, 0);
	}
	{
		struct mc_store_remove_all_req r = {mc_proto_str_c(""), true};

		/* RemoveAll of every tenant cancels the offloads first, then removes */
		assert_int_equal(mt_call(t, MC_STORE_REMOVE_ALL, &r), MC_OK);
		assert_int_equal(t->resp.body.count_resp.count, 1);
	}
	assert_true(hb(t, CA, 0)->remove_all);
	assert_int_equal(t->resp.body.offload_heartbeat_resp.n_offload, 0);
	mt_free(t);
}

static void small_queue(struct mc_master_config *c)
{
	c->offloading_queue_limit = 4;
}

/*
 * Eager offload with a queue smaller than a burst of puts: the ones PutEnd
 * could not queue are queued by the backfill lap once the queue drained
 * (before, they stayed in memory only: 16 of these 20 never got a copy).
 */
static void eager_backfill_queues_what_a_full_queue_missed(void **state)
{
	struct mt *t = t_new_cfg(small_queue);
	struct mc_master_metrics x;
	char keys[4][16];
	uint32_t done = 0, mem, disk;

	(void)state;
	setup_a(t);
	for (int i = 0; i < 20; i++) {
		char k[16];

		snprintf(k, sizeof(k), "bf%d", i);
		assert_int_equal(put(t, CA, k, 64, false), MC_OK);
	}
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_queued, 4);
	assert_int_equal(x.offload_queue_full, 16);
	for (int round = 0; round < 40 && done < 20; round++) {
		const struct mc_store_offload_heartbeat_resp *r;
		uint32_t n;

		t->now += 10;
		(void)mc_master_tick(t->m, t->now);
		r = hb(t, CA, 0);
		n = r->n_offload;
		assert_true(n <= 4); /* never past the limit */
		for (uint32_t i = 0; i < n; i++)
			snprintf(keys[i], sizeof(keys[i]), "%.*s", (int)r->offload[i].key.len,
				 r->offload[i].key.ptr);
		for (uint32_t i = 0; i < n; i++, done++)
			assert_int_equal(notify(t, CA, keys[i], 64, MC_OK), MC_OK);
	}
	assert_int_equal(done, 20);
	for (int i = 0; i < 20; i++) {
		char k[16];

		snprintf(k, sizeof(k), "bf%d", i);
		assert_int_equal(get(t, k), MC_OK);
		rep_types(t, &mem, &disk);
		assert_int_equal(mem, 1);
		assert_int_equal(disk, 1);
	}
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_backfilled, 16);
	assert_int_equal(x.offload_completed, 20);
	mt_free(t);
}

/* The backfill queues nothing while the queue is above half its limit. */
static void backfill_waits_for_the_low_water_mark(void **state)
{
	struct mt *t = t_new_cfg(small_queue);
	struct mc_master_metrics x;

	(void)state;
	setup_a(t);
	for (int i = 0; i < 6; i++) {
		char k[16];

		snprintf(k, sizeof(k), "w%d", i);
		assert_int_equal(put(t, CA, k, 64, false), MC_OK);
	}
	assert_int_equal(hb(t, CA, 0)->n_offload, 4);		 /* handed: still in flight */
	assert_int_equal(notify(t, CA, "w0", 64, MC_OK), MC_OK); /* 3 of 4 left */
	for (int i = 0; i < 5; i++) {
		t->now += 10;
		(void)mc_master_tick(t->m, t->now);
	}
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_backfilled, 0);
	assert_int_equal(notify(t, CA, "w1", 64, MC_OK), MC_OK);
	assert_int_equal(notify(t, CA, "w2", 64, MC_OK), MC_OK); /* 1 of 4: below half */
	t->now += 10;
	(void)mc_master_tick(t->m, t->now);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.offload_backfilled, 2);
	assert_int_equal(hb(t, CA, 0)->n_offload, 2);
	mt_free(t);
}

/*
 * Eager offload, a queue of 4 and a pool that fills: the objects PutEnd
 * could not queue keep their memory until the backfill has given them a
 * disk copy (before, eviction dropped them: acknowledged puts lost), so a
 * put is refused meanwhile; once the copies exist eviction makes room.
 */
static void eviction_waits_for_the_backfill(void **state)
{
	struct mt *t = t_new_cfg(small_queue);
	char keys[4][16];
	int n = 0;

	(void)state;
	setup_a(t);
	for (; n < 100; n++) {
		char k[16];

		snprintf(k, sizeof(k), "v%d", n);
		t->now++;
		if (put(t, CA, k, 4 * MIB, false) != MC_OK)
			break;
	}
	assert_true(n > 4 && n < 100); /* the pool filled */
	t->now += 60000;	       /* every lease long over */
	for (int i = 0; i < 50; i++)
		(void)mc_master_tick(t->m, t->now + (uint64_t)i * 10);
	t->now += 500;
	for (int i = 0; i < n; i++) {
		char k[16];

		snprintf(k, sizeof(k), "v%d", i);
		assert_int_equal(get(t, k), MC_OK); /* none lost */
	}
	assert_int_equal(put(t, CA, "late", 4 * MIB, false), MC_ERR_NO_AVAILABLE_HANDLE);
	/* the owner works through its queue; the backfill feeds it */
	for (int round = 0; round < 3 * n; round++) {
		const struct mc_store_offload_heartbeat_resp *r;
		uint32_t k;

		t->now += 10;
		(void)mc_master_tick(t->m, t->now);
		r = hb(t, CA, 0);
		k = r->n_offload;
		for (uint32_t i = 0; i < k; i++)
			snprintf(keys[i], sizeof(keys[i]), "%.*s", (int)r->offload[i].key.len,
				 r->offload[i].key.ptr);
		for (uint32_t i = 0; i < k; i++)
			assert_int_equal(notify(t, CA, keys[i], 4 * MIB, MC_OK), MC_OK);
	}
	t->now += 60000;
	for (int i = 0; i < 50; i++)
		(void)mc_master_tick(t->m, t->now + (uint64_t)i * 10);
	t->now += 500;
	assert_int_equal(put(t, CA, "late", 4 * MIB, false), MC_OK);
	for (int i = 0; i < n; i++) {
		char k[16];

		snprintf(k, sizeof(k), "v%d", i);
		assert_int_equal(get(t, k), MC_OK); /* from memory or disk */
	}
	mt_free(t);
}

static mc_status put_g(struct mt *t, const char *key, uint64_t len, const char *group)
{
	struct mc_store_put_start_req s = {
		.client_id = CA,
		.key = mc_proto_str_c(key),
		.value_len = len,
		.config = {.replica_num = 1},
		.group_id = mc_proto_str_c(group),
	};
	struct mc_store_put_end_req e = {
		.client_id = CA,
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
	};
	mc_status st = mt_call(t, MC_STORE_PUT_START, &s);

	return st != MC_OK ? st : mt_call(t, MC_STORE_PUT_END, &e);
}

static void evict_everything_queue_one(struct mc_master_config *c)
{
	c->offloading_queue_limit = 1;
	c->eviction_high_watermark_ratio = 0.0; /* every tick evicts */
	c->eviction_ratio = 1.0;
}

static void evict_on_evict_queue_one(struct mc_master_config *c)
{
	evict_everything_queue_one(c);
	c->offload_on_evict = true;
}

/* The memory and disk replicas key has now. */
static void reps_of(struct mt *t, const char *key, uint32_t *mem, uint32_t *disk)
{
	assert_int_equal(get(t, key), MC_OK);
	rep_types(t, mem, disk);
}

/*
 * A group's eviction pulls in every member, but one still owed a disk copy
 * keeps its memory, as it would if chosen itself.  Eager offload with a
 * queue of one: g0 reaches disk, g1 is queued, g2 misses the queue and
 * waits for the backfill; evicting g0 (it has its copy) took g2 along
 * and erased it, an acknowledged put lost without a copy.
 */
static void group_eviction_keeps_members_owed_a_copy(void **state)
{
	struct mt *t = t_new_cfg(evict_everything_queue_one);
	const struct mc_store_offload_heartbeat_resp *h;
	uint32_t mem, disk;

	(void)state;
	setup_a(t);
	assert_int_equal(put_g(t, "g0", MIB, "grp"), MC_OK);
	h = hb(t, CA, 0);
	assert_int_equal(h->n_offload, 1);
	assert_int_equal(notify(t, CA, "g0", MIB, MC_OK), MC_OK);
	assert_int_equal(put_g(t, "g1", MIB, "grp"), MC_OK); /* queued */
	assert_int_equal(put_g(t, "g2", MIB, "grp"), MC_OK); /* the queue is full */
	t->now += 60000;				     /* every lease over */
	(void)mc_master_tick(t->m, t->now);
	reps_of(t, "g0", &mem, &disk);
	assert_int_equal(mem, 0); /* evicted: it lives on disk */
	assert_int_equal(disk, 1);
	reps_of(t, "g1", &mem, &disk); /* its offload reads the memory */
	assert_int_equal(mem, 1);
	reps_of(t, "g2", &mem, &disk); /* owed a copy: kept */
	assert_int_equal(mem, 1);
	assert_int_equal(disk, 0);
	/* once both are on disk the group's memory goes */
	h = hb(t, CA, 0);
	assert_int_equal(h->n_offload, 1);
	assert_int_equal(notify(t, CA, "g1", MIB, MC_OK), MC_OK);
	for (int i = 0; i < 5; i++) {
		t->now += 10;
		(void)mc_master_tick(t->m, t->now); /* the backfill queues g2 */
	}
	h = hb(t, CA, 0);
	assert_int_equal(h->n_offload, 1);
	assert_int_equal(notify(t, CA, "g2", MIB, MC_OK), MC_OK);
	t->now += 60000;
	(void)mc_master_tick(t->m, t->now);
	for (int i = 0; i < 3; i++) {
		char k[4];

		snprintf(k, sizeof(k), "g%d", i);
		reps_of(t, k, &mem, &disk);
		assert_int_equal(mem, 0);
		assert_int_equal(disk, 1);
	}
	mt_free(t);
}

/*
 * Offload-on-evict with a queue of one and a group of three: each round
 * queues what the queue takes and keeps the rest in memory; no member
 * loses its memory before its copy is on disk.
 */
static void group_eviction_offloads_before_dropping(void **state)
{
	struct mt *t = t_new_cfg(evict_on_evict_queue_one);
	struct mc_master_metrics x;
	uint32_t mem, disk, ondisk = 0;

	(void)state;
	setup_a(t);
	for (int i = 0; i < 3; i++) {
		char k[4];

		snprintf(k, sizeof(k), "g%d", i);
		assert_int_equal(put_g(t, k, MIB, "grp"), MC_OK);
	}
	for (int round = 0; round < 10 && ondisk < 3; round++) {
		const struct mc_store_offload_heartbeat_resp *h;
		char k[16];

		t->now += 60000; /* past the leases the gets below take */
		(void)mc_master_tick(t->m, t->now);
		for (int i = 0; i < 3; i++) {
			snprintf(k, sizeof(k), "g%d", i);
			reps_of(t, k, &mem, &disk); /* found: never dropped */
			assert_true(mem == 1 || disk == 1);
		}
		h = hb(t, CA, 0);
		assert_true(h->n_offload <= 1);
		if (h->n_offload == 1) {
			snprintf(k, sizeof(k), "%.*s", (int)h->offload[0].key.len,
				 h->offload[0].key.ptr);
			assert_int_equal(notify(t, CA, k, MIB, MC_OK), MC_OK);
			ondisk++;
		}
	}
	assert_int_equal(ondisk, 3);
	t->now += 60000;
	(void)mc_master_tick(t->m, t->now);
	mc_master_metrics(t->m, &x);
	assert_int_equal(x.evicted_key_count, 3); /* each once it had its copy */
	for (int i = 0; i < 3; i++) {
		char k[4];

		snprintf(k, sizeof(k), "g%d", i);
		reps_of(t, k, &mem, &disk);
		assert_int_equal(mem, 0);
		assert_int_equal(disk, 1);
	}
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mount_needs_enable_offload),
		cmocka_unit_test(eager_offload_then_disk_replica),
		cmocka_unit_test(failed_offload_keeps_memory),
		cmocka_unit_test(failed_offload_is_retried_then_released),
		cmocka_unit_test(no_offload_without_a_disk_owner),
		cmocka_unit_test(queue_limit_is_counted),
		cmocka_unit_test(eviction_keeps_disk_copy_readable),
		cmocka_unit_test(offload_on_evict_queues_instead_of_dropping),
		cmocka_unit_test(reregistration_after_restart),
		cmocka_unit_test(disk_eviction_and_remove_all),
		cmocka_unit_test(expiry_drops_disk_replicas_and_queues),
		cmocka_unit_test(handed_out_then_gone_is_not_reregistered),
		cmocka_unit_test(upsert_drops_disk_copy),
		cmocka_unit_test(promotion_on_hit_after_threshold),
		cmocka_unit_test(trailer_object_promotion_follows_the_promoter),
		cmocka_unit_test(failed_and_expired_promotions_free_their_block),
		cmocka_unit_test(promotion_end_on_a_gone_object),
		cmocka_unit_test(unreported_offload_expires),
		cmocka_unit_test(force_evict_caps_what_one_round_queues),
		cmocka_unit_test(clear_and_remove_all_skip_busy_objects),
		cmocka_unit_test(eager_backfill_queues_what_a_full_queue_missed),
		cmocka_unit_test(backfill_waits_for_the_low_water_mark),
		cmocka_unit_test(eviction_waits_for_the_backfill),
		cmocka_unit_test(group_eviction_keeps_members_owed_a_copy),
		cmocka_unit_test(group_eviction_offloads_before_dropping),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

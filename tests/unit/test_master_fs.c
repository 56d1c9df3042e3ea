/*
 * tests/unit/test_master_fs.c - the master's side of the legacy shared-FS
 * DISK tier (master/fs_tier.c, spec store.md 5.1, --root_fs_dir): every
 * put gets a PROCESSING DISK replica at the hashed path, listed only once
 * its writer reported the file (PutEnd DISK), kept when memory goes,
 * dropped by PutRevoke(DISK), remove and upsert with its file handed to
 * the daemon for deletion; GetFsdir; a master without the flag.
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
#include "store/fsdir.h"
#include "store/proto.h"

#define MIB   (1ull << 20)
#define FSDIR "/shared/fs/mooncake_cluster"

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2};
static const struct mc_store_uuid SA = {10, 1};

static struct mt *t_new_evicting(const char *fsdir, bool evict_all)
{
	struct mc_master_config cfg;

	mt_cfg_init(&cfg);
	cfg.fsdir = fsdir;
	if (evict_all) {
		cfg.eviction_high_watermark_ratio = 1.0;
		cfg.eviction_ratio = 1.0;
	}
	return mt_new(&cfg);
}

static struct mt *t_new(const char *fsdir)
{
	return t_new_evicting(fsdir, false);
}

static void t_free(struct mt *t)
{
	struct mc_master_fs_gone *g;
	uint32_t n = mc_master_fs_take(t->m, &g);

	mc_master_fs_gone_free(g, n);
	mt_free(t);
}

static void mount(struct mt *t)
{
	struct mc_store_mount_req r = {
		CA,
		{.id = SA,
		 .name = mc_proto_str_c("a:1"),
		 .base = 1ull << 30,
		 .size = 64 * MIB,
		 .te_endpoint = mc_proto_str_c("a:1"),
		 .protocol = mc_proto_str_c("tcp"),
		 .host_id = mc_proto_str_c("h")},
	};
	assert_int_equal(mt_call(t, MC_STORE_MOUNT_SEGMENT, &r), MC_OK);
}

static mc_status put_start_n(struct mt *t, uint16_t type, const char *key, uint64_t len)
{
	struct mc_store_put_start_req s = {
		.client_id = CA,
		.key = mc_proto_str_c(key),
		.value_len = len,
		.config = {.replica_num = 1},
	};
	return mt_call(t, type, &s);
}

static mc_status put_start_g(struct mt *t, const char *key, uint64_t len, const char *group)
{
	struct mc_store_put_start_req s = {
		.client_id = CA,
		.key = mc_proto_str_c(key),
		.value_len = len,
		.config = {.replica_num = 1},
		.group_id = mc_proto_str_c(group),
	};
	return mt_call(t, MC_STORE_PUT_START, &s);
}

static mc_status put_start(struct mt *t, uint16_t type, const char *key)
{
	return put_start_n(t, type, key, 1000);
}

static mc_status end(struct mt *t, struct mc_store_uuid client, uint16_t type, uint8_t rt,
		     const char *key)
{
	struct mc_store_put_end_req e = {
		.client_id = client, .replica_type = rt, .key = mc_proto_str_c(key)};
	return mt_call(t, type, &e);
}

static mc_status revoke(struct mt *t, uint8_t rt, const char *key)
{
	struct mc_store_put_revoke_req r = {
		.client_id = CA, .replica_type = rt, .key = mc_proto_str_c(key)};
	return mt_call(t, MC_STORE_PUT_REVOKE, &r);
}

static mc_status get(struct mt *t, const char *key)
{
	struct mc_store_key_req r = {mc_proto_str_c(""), mc_proto_str_c(key)};
	return mt_call(t, MC_STORE_GET_REPLICA_LIST, &r);
}

/* The DISK descriptor among the last answer's n replicas, or NULL. */
static const struct mc_store_replica *disk_of(const struct mc_store_replica *v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (v[i].type == MC_STORE_REPLICA_DISK)
			return &v[i];
	}
	return NULL;
}

static void expect_path(const struct mc_store_replica *d, const char *key)
{
	char want[512];

	mc_fsdir_path(want, sizeof(want), FSDIR, strlen(FSDIR), "", 0, key, strlen(key));
	assert_int_equal(d->file_path.len, strlen(want));
	assert_memory_equal(d->file_path.ptr, want, d->file_path.len);
	assert_int_equal(d->size, 1000);
}

static uint32_t take(struct mt *t, struct mc_master_fs_gone **g)
{
	return mc_master_fs_take(t->m, g);
}

static void put_lists_disk_only_once_written(void **state)
{
	(void)state;
	struct mt *t = t_new(FSDIR "/");
	const struct mc_store_replica *d;
	struct mc_master_fs_gone *g;
	uint64_t id;

	mount(t);
	assert_int_equal(put_start(t, MC_STORE_PUT_START, "k1"), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_int_equal(t->resp.body.put_start_resp.replicas[0].type, MC_STORE_REPLICA_MEMORY);
	d = disk_of(t->resp.body.put_start_resp.replicas, 2);
	assert_non_null(d);
	assert_int_equal(d->status, MC_STORE_REPLICA_PROCESSING);
	expect_path(d, "k1");
	id = d->id;
	assert_int_not_equal(id, 0);
	/* memory finished: readable from memory, DISK not listed yet */
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "k1"), MC_OK);
	assert_int_equal(get(t, "k1"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_null(disk_of(t->resp.body.replica_list.replicas, 1));
	/* only the writer reports the file */
	assert_int_equal(end(t, CB, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "k1"),
			 MC_ERR_ILLEGAL_CLIENT);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "k1"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "k1"), MC_OK);
	assert_int_equal(get(t, "k1"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	assert_int_equal(t->resp.body.replica_list.replicas[0].type, MC_STORE_REPLICA_MEMORY);
	d = disk_of(t->resp.body.replica_list.replicas, 2);
	assert_non_null(d);
	assert_int_equal(d->status, MC_STORE_REPLICA_COMPLETE);
	assert_int_equal(d->id, id);
	expect_path(d, "k1");
	/* memory gone (its segment unmounted): the object lives on the DISK file */
	struct mc_store_unmount_req u = {CA, SA};
	assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	assert_int_equal(get(t, "k1"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].type, MC_STORE_REPLICA_DISK);
	assert_int_equal(take(t, &g), 0);
	mc_master_fs_gone_free(g, 0);
	/* remove: its file is handed over for deletion */
	struct mc_store_remove_req r = {mc_proto_str_c(""), mc_proto_str_c("k1"), true};
	assert_int_equal(mt_call(t, MC_STORE_REMOVE, &r), MC_OK);
	assert_int_equal(get(t, "k1"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(take(t, &g), 1);
	assert_string_equal(g[0].path, d ? g[0].path : "");
	assert_int_equal(g[0].replica_id, id);
	assert_true(g[0].written);
	assert_non_null(strstr(g[0].path, FSDIR "/"));
	assert_null(strstr(g[0].path, "//"));
	mc_master_fs_gone_free(g, 1);
	t_free(t);
}

static void revoke_upsert_and_unwritten(void **state)
{
	(void)state;
	struct mt *t = t_new(FSDIR);
	struct mc_master_fs_gone *g;
	uint64_t id1, id2;

	mount(t);
	/* PutRevoke(DISK): memory stays, the DISK replica goes */
	assert_int_equal(put_start(t, MC_STORE_PUT_START, "k2"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "k2"), MC_OK);
	assert_int_equal(revoke(t, MC_STORE_REPLICA_DISK, "k2"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "k2"),
			 MC_ERR_INVALID_WRITE);
	assert_int_equal(get(t, "k2"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(take(t, &g), 1);
	assert_false(g[0].written);
	mc_master_fs_gone_free(g, 1);
	/* an upsert rewrites: a new id; the old file goes */
	assert_int_equal(put_start(t, MC_STORE_PUT_START, "k3"), MC_OK);
	id1 = disk_of(t->resp.body.put_start_resp.replicas, 2)->id;
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "k3"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "k3"), MC_OK);
	t->now += 1;
	assert_int_equal(put_start(t, MC_STORE_UPSERT_START, "k3"), MC_OK);
	id2 = disk_of(t->resp.body.put_start_resp.replicas, t->resp.body.put_start_resp.n_replicas)
		      ->id;
	assert_int_not_equal(id1, id2);
	/* the rewrite's DISK End before its memory End is refused */
	assert_int_equal(end(t, CA, MC_STORE_UPSERT_END, MC_STORE_REPLICA_DISK, "k3"),
			 MC_ERR_INVALID_WRITE);
	assert_int_equal(take(t, &g), 1);
	assert_int_equal(g[0].replica_id, id1);
	assert_true(g[0].written);
	mc_master_fs_gone_free(g, 1);
	assert_int_equal(end(t, CA, MC_STORE_UPSERT_END, MC_STORE_REPLICA_MEMORY, "k3"), MC_OK);
	/* memory gone before the file was reported: not readable, not listed */
	struct mc_store_unmount_req u = {CA, SA};
	assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	assert_int_equal(get(t, "k3"), MC_ERR_REPLICA_IS_NOT_READY);
	/* a writer that ends with ALL writes no file: the DISK replica goes at once */
	assert_int_equal(mt_call(t, MC_STORE_MOUNT_SEGMENT,
				 &(struct mc_store_mount_req){CA,
							      {.id = {11, 1},
							       .name = mc_proto_str_c("a:2"),
							       .base = 2ull << 30,
							       .size = 64 * MIB,
							       .te_endpoint = mc_proto_str_c("a:2"),
							       .protocol = mc_proto_str_c("tcp"),
							       .host_id = mc_proto_str_c("h")}}),
			 MC_OK);
	assert_int_equal(put_start(t, MC_STORE_PUT_START, "k4"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_ALL, "k4"), MC_OK);
	assert_int_equal(take(t, &g), 1);
	assert_false(g[0].written);
	mc_master_fs_gone_free(g, 1);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "k4"),
			 MC_ERR_INVALID_WRITE);
	/* GetFsdir */
	assert_int_equal(mt_call(t, MC_STORE_GET_FSDIR, NULL), MC_OK);
	assert_int_equal(t->resp.body.fsdir_resp.fsdir.len, strlen(FSDIR));
	t_free(t);
}

static void without_root_fs_dir(void **state)
{
	(void)state;
	struct mt *t = t_new(NULL);

	mount(t);
	assert_int_equal(put_start(t, MC_STORE_PUT_START, "k"), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 1);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "k"),
			 MC_ERR_INVALID_WRITE);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_ALL, "k"), MC_OK);
	assert_int_equal(mt_call(t, MC_STORE_GET_FSDIR, NULL), MC_OK);
	assert_int_equal(t->resp.body.fsdir_resp.fsdir.len, 0);
	t_free(t);
}

/* Eviction frees memory only once the DISK file is reported; a writer that
 * never reports loses the DISK replica after the release timeout. */
static void eviction_waits_for_the_file(void **state)
{
	(void)state;
	struct mt *t = t_new_evicting(FSDIR, true);
	struct mc_master_fs_gone *g = NULL;
	uint32_t n;
	const uint64_t half = 512 * 1024;
	struct mc_store_mount_req r = {
		CA,
		{.id = SA,
		 .name = mc_proto_str_c("a:1"),
		 .base = 1ull << 30,
		 .size = MIB,
		 .te_endpoint = mc_proto_str_c("a:1"),
		 .protocol = mc_proto_str_c("tcp"),
		 .host_id = mc_proto_str_c("h")},
	};

	assert_int_equal(mt_call(t, MC_STORE_MOUNT_SEGMENT, &r), MC_OK);
	assert_int_equal(put_start_n(t, MC_STORE_PUT_START, "slow", half), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "slow"), MC_OK);
	assert_int_equal(put_start_n(t, MC_STORE_PUT_START, "done", half), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "done"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "done"), MC_OK);
	t->now += 1;
	assert_int_equal(put_start_n(t, MC_STORE_PUT_START, "q", half), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	/* "done" lost its memory copy and lives on its file; "slow" kept memory */
	assert_int_equal(get(t, "done"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].type, MC_STORE_REPLICA_DISK);
	assert_int_equal(get(t, "slow"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].type, MC_STORE_REPLICA_MEMORY);
	/* the room "done" left takes another object */
	assert_int_equal(put_start_n(t, MC_STORE_PUT_START, "q", half), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_ALL, "q"), MC_OK);
	n = take(t, &g); /* q's DISK replica, dropped at End(ALL) */
	mc_master_fs_gone_free(g, n);
	/* past the release timeout the silent writer's object goes */
	t->now += 600001;
	assert_int_equal(put_start_n(t, MC_STORE_PUT_START, "q2", half),
			 MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(get(t, "slow"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(take(t, &g), 1);
	assert_false(g[0].written);
	mc_master_fs_gone_free(g, 1);
	assert_int_equal(get(t, "done"), MC_OK);
	t_free(t);
}

/*
 * The same within a group: evicting "done" (its file is written) pulls in
 * "slow", whose file is not; "slow" keeps its memory (before, it lost it
 * and then its unreported DISK replica: erased, never on disk).
 */
static void group_eviction_waits_for_a_members_file(void **state)
{
	(void)state;
	struct mt *t = t_new_evicting(FSDIR, true);
	const uint64_t half = 512 * 1024;
	struct mc_store_mount_req r = {
		CA,
		{.id = SA,
		 .name = mc_proto_str_c("a:1"),
		 .base = 1ull << 30,
		 .size = MIB,
		 .te_endpoint = mc_proto_str_c("a:1"),
		 .protocol = mc_proto_str_c("tcp"),
		 .host_id = mc_proto_str_c("h")},
	};

	assert_int_equal(mt_call(t, MC_STORE_MOUNT_SEGMENT, &r), MC_OK);
	assert_int_equal(put_start_g(t, "slow", half, "grp"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "slow"), MC_OK);
	assert_int_equal(put_start_g(t, "done", half, "grp"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "done"), MC_OK);
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_DISK, "done"), MC_OK);
	t->now += 1;
	assert_int_equal(put_start_n(t, MC_STORE_PUT_START, "q", half), MC_ERR_NO_AVAILABLE_HANDLE);
	mc_master_tick(t->m, t->now);
	assert_int_equal(get(t, "done"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].type, MC_STORE_REPLICA_DISK);
	assert_int_equal(get(t, "slow"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].type, MC_STORE_REPLICA_MEMORY);
	t_free(t);
}

static mc_status end_id(struct mt *t, uint16_t type, const char *key, bool end_, uint64_t id)
{
	struct mc_store_put_end_req e = {.client_id = CA,
					 .replica_type = MC_STORE_REPLICA_DISK,
					 .key = mc_proto_str_c(key),
					 .replica_id = {true, id}};
	struct mc_store_put_revoke_req r = {.client_id = CA,
					    .replica_type = MC_STORE_REPLICA_DISK,
					    .key = mc_proto_str_c(key),
					    .replica_id = {true, id}};

	return end_ ? mt_call(t, type, &e) : mt_call(t, MC_STORE_PUT_REVOKE, &r);
}

/*
 * The writer's file thread is behind a rewrite of the key: the first
 * write's PutEnd(DISK) arrives after the upsert's memory End.  Naming its
 * replica id, it is refused and the rewrite's DISK replica stays unlisted
 * (its file is not written yet); a stale PutRevoke(DISK) does not drop it
 * either; the rewrite's own report, with its id, lists it.  Before, the
 * stale report marked the newer replica COMPLETE over a file of the old
 * value.
 */
static void a_stale_disk_report_ends_nothing(void **state)
{
	(void)state;
	struct mt *t = t_new(FSDIR);
	uint64_t id1, id2;

	mount(t);
	assert_int_equal(put_start(t, MC_STORE_PUT_START, "k5"), MC_OK);
	id1 = disk_of(t->resp.body.put_start_resp.replicas, 2)->id;
	assert_int_equal(end(t, CA, MC_STORE_PUT_END, MC_STORE_REPLICA_MEMORY, "k5"), MC_OK);
	t->now += 1;
	assert_int_equal(put_start(t, MC_STORE_UPSERT_START, "k5"), MC_OK);
	id2 = disk_of(t->resp.body.put_start_resp.replicas, t->resp.body.put_start_resp.n_replicas)
		      ->id;
	assert_int_equal(end(t, CA, MC_STORE_UPSERT_END, MC_STORE_REPLICA_MEMORY, "k5"), MC_OK);
	/* the first write's late reports */
	assert_int_equal(end_id(t, MC_STORE_PUT_END, "k5", true, id1), MC_ERR_INVALID_WRITE);
	assert_non_null(strstr(t->err, "not the one being written"));
	assert_int_equal(end_id(t, MC_STORE_PUT_END, "k5", false, id1), MC_ERR_INVALID_WRITE);
	assert_int_equal(get(t, "k5"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1); /* memory only */
	/* the rewrite's */
	assert_int_equal(end_id(t, MC_STORE_UPSERT_END, "k5", true, id2), MC_OK);
	assert_int_equal(get(t, "k5"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	assert_int_equal(disk_of(t->resp.body.replica_list.replicas, 2)->id, id2);
	t_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(put_lists_disk_only_once_written),
		cmocka_unit_test(revoke_upsert_and_unwritten),
		cmocka_unit_test(without_root_fs_dir),
		cmocka_unit_test(eviction_waits_for_the_file),
		cmocka_unit_test(group_eviction_waits_for_a_members_file),
		cmocka_unit_test(a_stale_disk_report_ends_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_proto.c - the store client <-> master protocol codec:
 * header layout, stream peeking and pipelining, a round trip of every
 * request and response (batch forms with 0, 1 and 1000 items, keys with
 * NUL bytes, empty and maximum-length keys), and rejection of truncated,
 * padded, forged and foreign frames without large allocations or leaks.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "mooncake/status.h"
#include "store/proto.h"
#include "support.h"

#define MAX_PAYLOAD MC_PROTO_MAX_PAYLOAD

/* ------------------------------------------------------------------------ */
/* Sample bodies                                                             */

static const uint16_t all_types[] = {
#define TYPE_ROW(NAME, num, name, req, resp) MC_STORE_##NAME,
	MC_STORE_MSG_MAP(TYPE_ROW)
#undef TYPE_ROW
};

static char key_nul[] = {'k', '\0', 'e', '\0', 'y'};
static char key_max[MC_STORE_KEY_MAX + 1];

#define S(lit) ((struct mc_proto_str){(lit), sizeof(lit) - 1})

static struct mc_proto_str sample_keys[3];
static struct mc_proto_str pref[2];
static struct mc_store_corrupt_item corrupt_items[2];
static struct mc_store_segment segs[2];
static struct mc_store_replica reps[5];
static struct mc_store_credit_item credit_items[2];
static uint64_t credit_ids[2] = {1, UINT64_MAX}, credit_sizes[2] = {4096, 64 << 20};
static struct mc_store_replica_list lists[2];

static void samples_init(void)
{
	memset(key_max, 'x', MC_STORE_KEY_MAX);
	sample_keys[0] = S("plain/key");
	sample_keys[1] = (struct mc_proto_str){key_nul, sizeof(key_nul)};
	sample_keys[2] = (struct mc_proto_str){key_max, MC_STORE_KEY_MAX};
	pref[0] = S("10.0.0.5:12345");
	pref[1] = S("");
	corrupt_items[0] = (struct mc_store_corrupt_item){S("k/1"), UINT64_MAX};
	corrupt_items[1] = (struct mc_store_corrupt_item){S(""), 7};
	for (int i = 0; i < 2; i++) {
		segs[i] = (struct mc_store_segment){
			.id = {0x1122334455667788ull + i, 0x99aabbccddeeff00ull},
			.name = S("10.0.0.5:12345"),
			.base = 0x7f0000000000ull + ((uint64_t)i << 32),
			.size = 3200ull << 20,
			.te_endpoint = S("10.0.0.5:12345"),
			.protocol = S("tcp"),
			.host_id = i ? S("") : S("10.0.0.5"),
		};
	}
	reps[0] = (struct mc_store_replica){
		.id = 1,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_MEMORY,
		.size = 1 << 20,
		.address = 0x7f0000001000ull,
		.segment_name = S("10.0.0.5:12345"),
		.transport_endpoint = S("10.0.0.5:16044"),
		.protocol = S("tcp"),
	};
	reps[1] = (struct mc_store_replica){
		.id = 2,
		.status = MC_STORE_REPLICA_PROCESSING,
		.type = MC_STORE_REPLICA_DISK,
		.size = 77,
		.file_path = S("/mnt/store/obj"),
	};
	reps[2] = (struct mc_store_replica){
		.id = 3,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_LOCAL_DISK,
		.size = 78,
		.transport_endpoint = S("10.0.0.6:50052"),
		.client_id = {7, 8},
	};
	reps[3] = (struct mc_store_replica){
		.id = UINT64_MAX,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_NOF_SSD,
		.size = 79,
		.address = 4096,
		.segment_name = S("nof0"),
		.transport_endpoint = S("10.0.0.7:1"),
		.protocol = S("rdma"),
	};
	reps[4] = (struct mc_store_replica){
		.id = 5,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_DFS,
		.size = 80,
		.file_path = S("/mnt/3fs/shard-3"),
		.offset = 1ull << 40,
		.aligned_size = 4096,
		.shard_idx = 3,
	};
	lists[0] = (struct mc_store_replica_list){
		.lease_ttl_ms = 10000,
		.checksum = {true, 0xdeadbeefcafef00dull},
		.n_replicas = 5,
		.replicas = reps,
	};
	lists[1] = (struct mc_store_replica_list){
		.lease_ttl_ms = 5, .n_replicas = 1, .replicas = reps};
}

static struct mc_store_replicate_config sample_config(void)
{
	return (struct mc_store_replicate_config){
		.replica_num = 2,
		.nof_replica_num = 1,
		.soft_pin_action = MC_STORE_SOFT_PIN_ENABLE,
		.soft_pin_ttl_ms = {true, 30ull * 60 * 1000},
		.with_hard_pin = true,
		.prefer_alloc_in_same_node = false,
		.data_type = 1,
		.preferred_segment = S(""),
		.n_preferred_segments = 2,
		.preferred_segments = pref,
		.n_preferred_nof_segments = 1,
		.preferred_nof_segments = pref,
		.host_id = S("10.0.0.5"),
	};
}

/* Item storage for batch samples (n up to 1000). */
#define MAX_ITEMS 1000
static struct mc_proto_str many_keys[MAX_ITEMS];
static struct mc_store_exist_item exist_items[MAX_ITEMS];
static struct mc_store_replica_list_item rl_items[MAX_ITEMS];
static struct mc_store_keyed_replica_list keyed[MAX_ITEMS];
static struct mc_store_put_item put_items[MAX_ITEMS];
static struct mc_store_put_start_item ps_items[MAX_ITEMS];
static struct mc_store_object_meta metas[MAX_ITEMS];
static int32_t statuses[MAX_ITEMS];
static struct mc_store_tenant_key tkeys[MAX_ITEMS];
static struct mc_store_offload_item off_items[MAX_ITEMS];
static struct mc_store_offload_result off_results[MAX_ITEMS];
static struct mc_store_promotion_task promo_tasks[MAX_ITEMS];
static struct mc_store_promotion_result promo_results[MAX_ITEMS];
static struct mc_store_offload_rpc_item orpc_items[MAX_ITEMS];
static struct mc_store_offload_rpc_buf orpc_bufs[MAX_ITEMS];
static struct mc_store_task_assignment assignments[MAX_ITEMS];
static char key_text[MAX_ITEMS][16];

static void items_init(uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		int len = snprintf(key_text[i], sizeof(key_text[i]), "k%u", i);
		bool ok = i % 3 != 1;
		many_keys[i] =
			i < 3 ? sample_keys[i] : (struct mc_proto_str){key_text[i], (uint32_t)len};
		exist_items[i] = (struct mc_store_exist_item){ok ? MC_OK : MC_ERR_OBJECT_NOT_FOUND,
							      ok && i % 2};
		rl_items[i] = (struct mc_store_replica_list_item){
			.status = ok ? MC_OK : MC_ERR_REPLICA_IS_NOT_READY,
			.list = ok ? lists[i % 2] : (struct mc_store_replica_list){0}};
		keyed[i] = (struct mc_store_keyed_replica_list){many_keys[i], lists[i % 2]};
		put_items[i] = (struct mc_store_put_item){many_keys[i], (uint64_t)i << 20,
							  i % 2 ? S("group-a") : S("")};
		ps_items[i] = (struct mc_store_put_start_item){
			.status = ok ? MC_OK : MC_ERR_NO_AVAILABLE_HANDLE,
			.n_replicas = ok ? 1 + i % 5 : 0,
			.replicas = ok ? reps : NULL};
		metas[i] = (struct mc_store_object_meta){many_keys[i], {i % 2 == 0, i * 31ull}};
		statuses[i] = ok ? MC_OK : MC_ERR_OBJECT_HAS_LEASE;
		orpc_items[i] = (struct mc_store_offload_rpc_item){i % 2 ? S("t") : S(""),
								   many_keys[i], (uint64_t)i << 12};
		orpc_bufs[i] = (struct mc_store_offload_rpc_buf){
			ok ? MC_OK : MC_ERR_BUFFER_OVERFLOW, ok ? 0x7f0000000000ull + i : 0};
		tkeys[i] = (struct mc_store_tenant_key){i % 2 ? S("t") : S(""), many_keys[i]};
		off_items[i] = (struct mc_store_offload_item){
			S("t"), many_keys[i], (uint64_t)i << 12, 0x7f0000000000ull + i * 4096};
		off_results[i] = (struct mc_store_offload_result){S(""), many_keys[i], i * 7ull,
								  ok ? MC_OK : MC_ERR_IO};
		promo_tasks[i] =
			(struct mc_store_promotion_task){S("t"), many_keys[i], 1 << 20, reps[0]};
		promo_results[i] = (struct mc_store_promotion_result){
			S("t"), many_keys[i], UINT64_MAX - i, ok ? MC_OK : MC_ERR_FILE_READ_FAIL};
		assignments[i] = (struct mc_store_task_assignment){
			.id = {7, i},
			.type = i % 2 ? MC_STORE_TASK_REPLICA_MOVE : MC_STORE_TASK_REPLICA_COPY,
			.payload = S("{\"key\":\"k\",\"source\":\"a:1\",\"targets\":[\"b:2\"]}"),
			.created_at_ms = 1700000000000ull + i,
			.max_retry_attempts = 10,
			.source = reps[0],
			.n_targets = i % 3,
			.targets = i % 3 ? reps : NULL};
	}
}

union body {
#define BODY_MEMBER(name) struct mc_store_##name name;
	MC_STORE_BODY_MAP(BODY_MEMBER)
#undef BODY_MEMBER
};

/* A request or response body of type with n items in its list (batch forms). */
static void fill(uint16_t type, bool resp, uint32_t n, union body *u)
{
	struct mc_proto_str key = sample_keys[1];

	memset(u, 0, sizeof(*u));
	items_init(n);
	switch (type) {
	case MC_STORE_SERVICE_READY:
		u->hello.version = resp ? S("mooncake-c 0.1.0 (master)") : S("mooncake-c 0.1.0");
		return;
	case MC_STORE_PING:
		if (resp)
			u->ping_resp = (struct mc_store_ping_resp){
				.view_version = -42,
				.client_status = MC_STORE_CLIENT_NEED_REMOUNT,
				/* minor 14: the fence's tails */
				.client_ttl_ms = {true, 2000},
				.remount_wait_ms = {true, 0}};
		else
			u->client_req.client_id = (struct mc_store_uuid){1, UINT64_MAX};
		return;
	case MC_STORE_GET_FSDIR:
		if (resp)
			u->fsdir_resp.fsdir = S("/mnt/shared/mooncake_cluster");
		return;
	case MC_STORE_REPORT_UNREACHABLE:
		if (!resp)
			u->unreachable_req =
				(struct mc_store_unreachable_req){{3, 4}, MC_MIN(n, 2), pref};
		return;
	case MC_STORE_REPORT_CORRUPT:
		if (!resp)
			u->corrupt_req = (struct mc_store_corrupt_req){
				{3, 4}, S("tenant-a"), MC_MIN(n, 2), corrupt_items};
		return;
	case MC_STORE_CREATE_COPY_TASK:
	case MC_STORE_CREATE_MOVE_TASK:
		if (resp)
			u->task_id.id = (struct mc_store_uuid){UINT64_MAX, 17};
		else if (type == MC_STORE_CREATE_COPY_TASK)
			u->copy_task_req =
				(struct mc_store_copy_task_req){S(""), key, MC_MIN(n, 2), pref};
		else
			u->move_task_req =
				(struct mc_store_move_task_req){S("t"), key, S("a:1"), S("b:2")};
		return;
	case MC_STORE_CHANGE_REPLICA:
		if (resp)
			u->count_resp.count = 3;
		else
			u->change_replica_req =
				(struct mc_store_change_replica_req){S("t"), key, 3};
		return;
	case MC_STORE_QUERY_TASK:
		if (resp)
			u->task_info = (struct mc_store_task_info){
				{5, 6},
				MC_STORE_TASK_REPLICA_MOVE,
				MC_STORE_TASK_FAILED,
				1,
				2,
				{3, 4},
				S("the client failed (-800 TRANSFER_FAIL)")};
		else
			u->task_id.id = (struct mc_store_uuid){5, 6};
		return;
	case MC_STORE_FETCH_TASKS:
		if (resp)
			u->fetch_tasks_resp = (struct mc_store_fetch_tasks_resp){n, assignments};
		else
			u->fetch_tasks_req = (struct mc_store_fetch_tasks_req){{3, 4}, 32};
		return;
	case MC_STORE_MARK_TASK_TO_COMPLETE:
		if (!resp)
			u->task_done_req = (struct mc_store_task_done_req){
				{3, 4}, {5, 6}, MC_ERR_TRANSFER_FAIL, S("a target failed")};
		return;
	case MC_STORE_MOUNT_SEGMENT:
		if (!resp)
			u->mount_req = (struct mc_store_mount_req){{3, 4}, segs[0]};
		return;
	case MC_STORE_REMOUNT_SEGMENT:
		if (!resp)
			u->remount_req = (struct mc_store_remount_req){{3, 4}, MC_MIN(n, 2), segs};
		return;
	case MC_STORE_UNMOUNT_SEGMENT:
		if (!resp)
			u->unmount_req = (struct mc_store_unmount_req){{3, 4}, segs[1].id};
		return;
	case MC_STORE_GRACEFUL_UNMOUNT_SEGMENT:
		if (!resp)
			u->graceful_unmount_req =
				(struct mc_store_graceful_unmount_req){{3, 4}, segs[1].id, 5000};
		return;
	case MC_STORE_EXIST_KEY:
	case MC_STORE_GET_REPLICA_LIST:
		if (!resp)
			u->key_req = (struct mc_store_key_req){S("tenant-1"), key};
		else if (type == MC_STORE_EXIST_KEY)
			u->exist_resp.exists = true;
		else
			u->replica_list = lists[0];
		return;
	case MC_STORE_BATCH_EXIST_KEY:
	case MC_STORE_BATCH_GET_REPLICA_LIST:
		if (!resp)
			u->keys_req = (struct mc_store_keys_req){S(""), n, many_keys, {false, 0}};
		else if (type == MC_STORE_BATCH_EXIST_KEY)
			u->batch_exist_resp = (struct mc_store_batch_exist_resp){n, exist_items};
		else
			u->batch_replica_list = (struct mc_store_batch_replica_list){
				.n_items = n, .items = rl_items};
		return;
	case MC_STORE_GET_REPLICA_LIST_BY_REGEX:
		if (!resp)
			u->regex_req = (struct mc_store_regex_req){S("default"), S("^k[0-9]+$")};
		else
			u->regex_replica_list = (struct mc_store_regex_replica_list){n, keyed};
		return;
	case MC_STORE_PUT_START:
	case MC_STORE_UPSERT_START:
		if (!resp)
			u->put_start_req = (struct mc_store_put_start_req){
				{9, 10}, S("tenant-1"),	  key,		 1 << 20,
				S("g"),	 sample_config(), {true, 8 * 64}};
		else
			u->put_start_resp = (struct mc_store_put_start_resp){
				.n_replicas = 3,
				.replicas = reps,
				/* minor 13: UpsertStart's spoil tails */
				.n_spoil = type == MC_STORE_UPSERT_START ? 2 : 0,
				.spoil = type == MC_STORE_UPSERT_START ? reps : NULL,
				.spoil_ms = {type == MC_STORE_UPSERT_START, 9000}};
		return;
	case MC_STORE_BATCH_PUT_START:
	case MC_STORE_BATCH_UPSERT_START:
		if (!resp)
			u->batch_put_start_req = (struct mc_store_batch_put_start_req){
				{9, 10}, S(""), sample_config(), n, put_items, 0, NULL};
		else
			u->batch_put_start_resp = (struct mc_store_batch_put_start_resp){
				.n_items = n,
				.items = ps_items,
				.n_spoil = type == MC_STORE_BATCH_UPSERT_START ? 3 : 0,
				.spoil = type == MC_STORE_BATCH_UPSERT_START ? reps : NULL,
				.spoil_ms = {type == MC_STORE_BATCH_UPSERT_START, 1}};
		return;
	case MC_STORE_PUT_END:
	case MC_STORE_UPSERT_END:
		if (!resp)
			u->put_end_req = (struct mc_store_put_end_req){
				{9, 10}, S("t"),	MC_STORE_REPLICA_ALL,
				key,	 {true, 12345}, {true, 777},
				0,	 NULL};
		return;
	case MC_STORE_PUT_REVOKE:
	case MC_STORE_UPSERT_REVOKE:
		if (!resp)
			u->put_revoke_req = (struct mc_store_put_revoke_req){
				{9, 10}, S("t"), MC_STORE_REPLICA_MEMORY, key, {false, 0}};
		return;
	case MC_STORE_BATCH_PUT_END:
	case MC_STORE_BATCH_UPSERT_END:
		if (!resp)
			u->batch_put_end_req = (struct mc_store_batch_put_end_req){
				{9, 10}, S("t"), MC_STORE_REPLICA_ALL, n, metas, 0, NULL};
		else
			u->batch_status_resp = (struct mc_store_batch_status_resp){n, statuses};
		return;
	case MC_STORE_PUT_CREDIT:
		credit_items[0] =
			(struct mc_store_credit_item){key, 4096, 0, 7, 0x1000, {true, 99}};
		credit_items[1] = (struct mc_store_credit_item){S("k2"),    70000,	40,
								UINT64_MAX, UINT64_MAX, {false, 0}};
		if (!resp)
			u->put_credit_req = (struct mc_store_put_credit_req){
				{9, 10},      S("t"), S("seg:1"),  MC_MIN(n, 2),
				credit_items, 0,      NULL,	   2,
				credit_ids,   2,      credit_sizes};
		else
			u->put_credit_resp =
				(struct mc_store_put_credit_resp){n, statuses, 3, reps};
		return;
	case MC_STORE_BATCH_PUT_REVOKE:
	case MC_STORE_BATCH_UPSERT_REVOKE:
		if (!resp)
			u->batch_put_revoke_req = (struct mc_store_batch_put_revoke_req){
				{9, 10}, S("t"), MC_STORE_REPLICA_NOF_SSD, n, many_keys};
		else
			u->batch_status_resp = (struct mc_store_batch_status_resp){n, statuses};
		return;
	case MC_STORE_SPOIL_DONE:
		if (!resp)
			u->spoil_done_req =
				(struct mc_store_spoil_done_req){MC_MIN(n, 2), credit_ids};
		return;
	case MC_STORE_REMOVE:
		if (!resp)
			u->remove_req = (struct mc_store_remove_req){S("t"), key, true};
		else /* minor 13: the spoil tails */
			u->remove_resp = (struct mc_store_remove_resp){1, reps, {true, 10000}};
		return;
	case MC_STORE_REMOVE_BY_REGEX:
		if (!resp)
			u->remove_regex_req =
				(struct mc_store_remove_regex_req){S("t"), S("a.*"), false};
		else
			u->count_resp.count = 17;
		return;
	case MC_STORE_REMOVE_ALL:
		if (!resp)
			u->remove_all_req = (struct mc_store_remove_all_req){S(""), true};
		else
			u->count_resp.count = INT64_MIN;
		return;
	case MC_STORE_BATCH_REMOVE:
		if (!resp)
			u->batch_remove_req =
				(struct mc_store_batch_remove_req){S("t"), true, n, many_keys};
		else
			u->batch_remove_resp = (struct mc_store_batch_remove_resp){
				n, statuses, 2, reps, {true, 50}};
		return;
	case MC_STORE_BATCH_REPLICA_CLEAR:
		if (!resp)
			u->replica_clear_req = (struct mc_store_replica_clear_req){
				{9, 10}, S("t"), S("10.0.0.1:1234"), n, many_keys};
		else
			u->keys_resp = (struct mc_store_keys_resp){n, many_keys};
		return;
	case MC_STORE_MOUNT_LOCAL_DISK_SEGMENT:
		if (!resp)
			u->mount_local_disk_req = (struct mc_store_mount_local_disk_req){
				{3, 4}, true, S("10.0.0.5:50052")};
		return;
	case MC_STORE_UNMOUNT_LOCAL_DISK_SEGMENT:
		if (!resp)
			u->client_req.client_id = (struct mc_store_uuid){3, 4};
		return;
	case MC_STORE_OFFLOAD_OBJECT_HEARTBEAT:
		if (!resp)
			u->offload_heartbeat_req =
				(struct mc_store_offload_heartbeat_req){{3, 4}, true, 1000};
		else
			u->offload_heartbeat_resp = (struct mc_store_offload_heartbeat_resp){
				n, off_items, n / 2, tkeys, n % 2 == 1};
		return;
	case MC_STORE_NOTIFY_OFFLOAD_SUCCESS:
		if (!resp)
			u->notify_offload_req =
				(struct mc_store_notify_offload_req){{3, 4}, n, off_results};
		else
			u->batch_status_resp = (struct mc_store_batch_status_resp){n, statuses};
		return;
	case MC_STORE_REPORT_SSD_CAPACITY:
		if (!resp)
			u->ssd_capacity_req =
				(struct mc_store_ssd_capacity_req){{3, 4}, 1ull << 40, 12345};
		return;
	case MC_STORE_BATCH_EVICT_DISK_REPLICA:
		if (!resp)
			u->evict_disk_req = (struct mc_store_evict_disk_req){{3, 4}, n, tkeys};
		else
			u->batch_status_resp = (struct mc_store_batch_status_resp){n, statuses};
		return;
	case MC_STORE_PROMOTION_OBJECT_HEARTBEAT:
		if (!resp)
			u->promotion_heartbeat_req =
				(struct mc_store_promotion_heartbeat_req){{3, 4}, 8};
		else
			u->promotion_heartbeat_resp =
				(struct mc_store_promotion_heartbeat_resp){n, promo_tasks};
		return;
	case MC_STORE_NOTIFY_PROMOTION:
		if (!resp)
			u->notify_promotion_req =
				(struct mc_store_notify_promotion_req){{3, 4}, n, promo_results};
		else
			u->batch_status_resp = (struct mc_store_batch_status_resp){n, statuses};
		return;
	case MC_STORE_BATCH_GET_OFFLOAD_OBJECT:
		if (!resp)
			u->offload_rpc_get_req =
				(struct mc_store_offload_rpc_get_req){n, orpc_items};
		else
			u->offload_rpc_get_resp = (struct mc_store_offload_rpc_get_resp){
				UINT64_MAX - 1, S("10.0.0.6:15001"), 5000, n, orpc_bufs};
		return;
	case MC_STORE_RELEASE_OFFLOAD_BUFFER:
		if (!resp)
			u->offload_rpc_release_req.batch_id = 42;
		return;
	default:
		fail_msg("no sample for type %u", type);
	}
}

/* Encode (type, resp) with n items as a frame into b (appending). */
static void encode_sample(struct mc_buf *b, uint16_t type, bool resp, uint32_t n, uint64_t id,
			  union body *u)
{
	fill(type, resp, n, u);
	if (resp)
		assert_int_equal(mc_store_response_encode(b, type, id, u), MC_OK);
	else
		assert_int_equal(mc_store_request_encode(b, type, id, u), MC_OK);
}

static int setup(void **state)
{
	samples_init();
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Header and buffer                                                         */

static void header_layout_is_pinned(void **state)
{
	/* a Ping request, id 0x0102030405060708, client id {1, 2} */
	static const uint8_t want[] = {
		'M', 'C', 'S', 'T', 1, 15, 2, 0, /* magic, 1.15, type 2 */
		0,   0,	  0,   0,   0, 0,  0, 0, /* flags, reserved, status */
		8,   7,	  6,   5,   4, 3,  2, 1, /* request id */
		16,  0,	  0,   0,   0, 0,  0, 0, /* payload length, reserved */
		1,   0,	  0,   0,   0, 0,  0, 0, /* client_id.first */
		2,   0,	  0,   0,   0, 0,  0, 0, /* client_id.second */
	};
	struct mc_store_client_req req = {{1, 2}};
	struct mc_buf b;
	struct mc_proto_hdr h;

	mc_buf_init(&b);
	assert_int_equal(mc_store_ping_request_encode(&b, 0x0102030405060708ull, &req), MC_OK);
	assert_int_equal(b.len, sizeof(want));
	assert_memory_equal(b.data, want, sizeof(want));

	/* a response sets the flag and the status */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_error_encode(&b, MC_STORE_PING, 9, MC_ERR_OBJECT_NOT_FOUND, "x"),
			 MC_OK);
	assert_int_equal(b.data[8], 1);
	assert_int_equal(mc_proto_hdr_decode(b.data, MAX_PAYLOAD, &h), MC_OK);
	assert_int_equal(h.status, -704);
	assert_int_equal(h.flags, MC_PROTO_F_RESPONSE);
	assert_int_equal(h.payload_len, 5);
	assert_int_equal(h.req_id, 9);
	mc_buf_release(&b);
}

static void replica_clear_layout_is_pinned(void **state)
{
	static const uint8_t want_req[] = {
		7, 0, 0, 0, 0,	 0,   0, 0, /* client_id.first */
		9, 0, 0, 0, 0,	 0,   0, 0, /* client_id.second */
		1, 0, 0, 0, 't',	    /* tenant */
		1, 0, 0, 0, 's',	    /* segment_name */
		2, 0, 0, 0,		    /* keys: count */
		1, 0, 0, 0, 'a',	    /* keys[0] */
		2, 0, 0, 0, 'b', 'c',	    /* keys[1] */
	};
	static const uint8_t want_resp[] = {1, 0, 0, 0, 2, 0, 0, 0, 'b', 'c'};
	struct mc_proto_str keys[] = {S("a"), S("bc")};
	struct mc_store_replica_clear_req req = {{7, 9}, S("t"), S("s"), 2, keys};
	struct mc_store_keys_resp resp = {1, &keys[1]}, got;
	struct mc_buf b;

	assert_int_equal(MC_STORE_BATCH_REPLICA_CLEAR, 52);
	mc_buf_init(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_BATCH_REPLICA_CLEAR, false, &req), MC_OK);
	assert_int_equal(b.len, sizeof(want_req));
	assert_memory_equal(b.data, want_req, sizeof(want_req));
	mc_buf_reset(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_BATCH_REPLICA_CLEAR, true, &resp), MC_OK);
	assert_int_equal(b.len, sizeof(want_resp));
	assert_memory_equal(b.data, want_resp, sizeof(want_resp));
	assert_int_equal(mc_store_batch_replica_clear_response_decode(b.data, b.len, &got), MC_OK);
	assert_true(mc_store_keys_resp_equal(&got, &resp));
	mc_store_keys_resp_release(&got);
	/* one byte short of the last key is malformed */
	assert_int_equal(mc_store_batch_replica_clear_response_decode(b.data, b.len - 1, &got),
			 MC_ERR_PROTOCOL);
	mc_buf_release(&b);
}

static void report_unreachable_layout_is_pinned(void **state)
{
	static const uint8_t want[] = {
		7, 0, 0, 0, 0,	 0,   0,   0, /* client_id.first */
		9, 0, 0, 0, 0,	 0,   0,   0, /* client_id.second */
		2, 0, 0, 0,		      /* segments: count */
		3, 0, 0, 0, 'a', ':', '1',    /* segments[0] */
		3, 0, 0, 0, 'b', ':', '2',    /* segments[1] */
	};
	struct mc_proto_str names[] = {S("a:1"), S("b:2")};
	struct mc_store_unreachable_req req = {{7, 9}, 2, names}, got;
	struct mc_buf b;

	(void)state;
	assert_int_equal(MC_STORE_REPORT_UNREACHABLE, 8);
	mc_buf_init(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_REPORT_UNREACHABLE, false, &req), MC_OK);
	assert_int_equal(b.len, sizeof(want));
	assert_memory_equal(b.data, want, sizeof(want));
	assert_int_equal(mc_store_report_unreachable_request_decode(b.data, b.len, &got), MC_OK);
	assert_true(mc_store_unreachable_req_equal(&got, &req));
	mc_store_unreachable_req_release(&got);
	assert_int_equal(mc_store_report_unreachable_request_decode(b.data, b.len - 1, &got),
			 MC_ERR_PROTOCOL);
	mc_buf_release(&b);
}

static void report_corrupt_layout_is_pinned(void **state)
{
	static const uint8_t want[] = {
		7,    0,    0,	  0,	0,    0,    0,	  0,	/* client_id.first */
		9,    0,    0,	  0,	0,    0,    0,	  0,	/* client_id.second */
		1,    0,    0,	  0,	't',			/* tenant */
		1,    0,    0,	  0,				/* items: count */
		3,    0,    0,	  0,	'k',  '/',  '1',	/* items[0].key */
		0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb, 0xed, 0x0f, /* items[0].replica_id */
	};
	struct mc_store_corrupt_item items[] = {{S("k/1"), 0x0fedcba987654321ull}};
	struct mc_store_corrupt_req req = {{7, 9}, S("t"), 1, items}, got;
	struct mc_buf b;

	(void)state;
	assert_int_equal(MC_STORE_REPORT_CORRUPT, 9);
	mc_buf_init(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_REPORT_CORRUPT, false, &req), MC_OK);
	assert_int_equal(b.len, sizeof(want));
	assert_memory_equal(b.data, want, sizeof(want));
	assert_int_equal(mc_store_report_corrupt_request_decode(b.data, b.len, &got), MC_OK);
	assert_true(mc_store_corrupt_req_equal(&got, &req));
	mc_store_corrupt_req_release(&got);
	assert_int_equal(mc_store_report_corrupt_request_decode(b.data, b.len - 1, &got),
			 MC_ERR_PROTOCOL);
	mc_buf_release(&b);
}

static void task_layouts_are_pinned(void **state)
{
	static const uint8_t want_done[] = {
		3,    0,    0,	  0,	0,   0,	  0, 0, 4, 0, 0, 0, 0, 0, 0, 0, /* client_id */
		5,    0,    0,	  0,	0,   0,	  0, 0, 6, 0, 0, 0, 0, 0, 0, 0, /* task_id */
		0xe0, 0xfc, 0xff, 0xff,						/* status -800 */
		2,    0,    0,	  0,	'n', 'o',				/* message */
	};
	static const uint8_t want_move[] = {
		0, 0, 0, 0,		   /* tenant "" */
		1, 0, 0, 0, 'k',	   /* key */
		3, 0, 0, 0, 'a', ':', '1', /* source */
		3, 0, 0, 0, 'b', ':', '2', /* target */
	};
	struct mc_store_task_done_req done = {{3, 4}, {5, 6}, MC_ERR_TRANSFER_FAIL, S("no")}, gd;
	struct mc_store_move_task_req mv = {S(""), S("k"), S("a:1"), S("b:2")}, gm;
	struct mc_buf b;

	(void)state;
	assert_int_equal(MC_STORE_CREATE_COPY_TASK, 10);
	assert_int_equal(MC_STORE_MARK_TASK_TO_COMPLETE, 14);
	assert_int_equal(MC_ERR_TASK_NOT_FOUND, -1400);
	assert_int_equal(MC_ERR_TASK_PENDING_LIMIT_EXCEEDED, -1401);
	assert_int_equal(MC_ERR_JOB_NOT_FOUND, -1402);
	mc_buf_init(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_MARK_TASK_TO_COMPLETE, false, &done),
			 MC_OK);
	assert_int_equal(b.len, sizeof(want_done));
	assert_memory_equal(b.data, want_done, sizeof(want_done));
	assert_int_equal(mc_store_mark_task_to_complete_request_decode(b.data, b.len, &gd), MC_OK);
	assert_true(mc_store_task_done_req_equal(&gd, &done));
	mc_store_task_done_req_release(&gd);
	mc_buf_reset(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_CREATE_MOVE_TASK, false, &mv), MC_OK);
	assert_int_equal(b.len, sizeof(want_move));
	assert_memory_equal(b.data, want_move, sizeof(want_move));
	assert_int_equal(mc_store_create_move_task_request_decode(b.data, b.len, &gm), MC_OK);
	assert_true(mc_store_move_task_req_equal(&gm, &mv));
	mc_store_move_task_req_release(&gm);
	/* a move request cut inside its target is malformed */
	assert_int_equal(mc_store_create_move_task_request_decode(b.data, b.len - 1, &gm),
			 MC_ERR_PROTOCOL);
	mc_buf_release(&b);
}

static void ssd_tier_layouts_are_pinned(void **state)
{
	static const uint8_t want_hb[] = {
		1,   0,	 0, 0,			  /* offload: count */
		1,   0,	 0, 0, 't',		  /* tenant */
		1,   0,	 0, 0, 'k',		  /* key */
		5,   0,	 0, 0, 0,   0, 0, 0,	  /* size */
		0,   16, 0, 0, 0,   0, 0, 0,	  /* address */
		1,   0,	 0, 0,			  /* removes: count */
		0,   0,	 0, 0, 2,   0, 0, 0, 'a', /* tenant "", key */
		'b', 1,				  /* remove_all */
	};
	static const uint8_t want_notify[] = {
		7,    0,    0,	  0,	0, 0, 0, 0,	 /* client_id.first */
		9,    0,    0,	  0,	0, 0, 0, 0,	 /* client_id.second */
		1,    0,    0,	  0,			 /* items: count */
		0,    0,    0,	  0,	1, 0, 0, 0, 'k', /* tenant "", key */
		5,    0,    0,	  0,	0, 0, 0, 0,	 /* size */
		0x4d, 0xfb, 0xff, 0xff,			 /* status -1203 */
	};
	struct mc_store_offload_item item = {S("t"), S("k"), 5, 4096};
	struct mc_store_tenant_key rm = {S(""), S("ab")};
	struct mc_store_offload_heartbeat_resp hb = {1, &item, 1, &rm, true}, got;
	struct mc_store_offload_result res = {S(""), S("k"), 5, MC_ERR_KEYS_ULTRA_LIMIT};
	struct mc_store_notify_offload_req notify = {{7, 9}, 1, &res};
	struct mc_buf b;

	assert_int_equal(MC_STORE_MOUNT_LOCAL_DISK_SEGMENT, 64);
	assert_int_equal(MC_STORE_NOTIFY_PROMOTION, 71);
	assert_int_equal(MC_ERR_UNABLE_OFFLOAD, -1300);
	mc_buf_init(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_OFFLOAD_OBJECT_HEARTBEAT, true, &hb),
			 MC_OK);
	assert_int_equal(b.len, sizeof(want_hb));
	assert_memory_equal(b.data, want_hb, sizeof(want_hb));
	assert_int_equal(mc_store_offload_object_heartbeat_response_decode(b.data, b.len, &got),
			 MC_OK);
	assert_true(mc_store_offload_heartbeat_resp_equal(&got, &hb));
	mc_store_offload_heartbeat_resp_release(&got);
	/* remove_all must be 0 or 1 */
	b.data[b.len - 1] = 2;
	assert_int_equal(mc_store_offload_object_heartbeat_response_decode(b.data, b.len, &got),
			 MC_ERR_PROTOCOL);
	mc_buf_reset(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_NOTIFY_OFFLOAD_SUCCESS, false, &notify),
			 MC_OK);
	assert_int_equal(b.len, sizeof(want_notify));
	assert_memory_equal(b.data, want_notify, sizeof(want_notify));
	mc_buf_release(&b);
}

static void offload_rpc_layout_is_pinned(void **state)
{
	static const uint8_t want_req[] = {
		1, 0,	 0, 0,		       /* items: count */
		1, 0,	 0, 0, 't',	       /* tenant */
		2, 0,	 0, 0, 'k', 'y',       /* key */
		0, 0x10, 0, 0, 0,   0,	 0, 0, /* size 4096 */
	};
	static const uint8_t want_resp[] = {
		9,    0,    0,	  0,	0,   0,	  0, 0, /* batch_id */
		2,    0,    0,	  0,	'h', 'p',	/* segment */
		0x88, 0x13, 0,	  0,	0,   0,	  0, 0, /* gc_ttl_ms 5000 */
		1,    0,    0,	  0,			/* items: count */
		0xf6, 0xff, 0xff, 0xff,			/* status -10 */
		0,    0x20, 0,	  0,	0,   0,	  0, 0, /* address 8192 */
	};
	struct mc_store_offload_rpc_item item = {S("t"), S("ky"), 4096};
	struct mc_store_offload_rpc_get_req req = {1, &item};
	struct mc_store_offload_rpc_buf ob = {MC_ERR_BUFFER_OVERFLOW, 8192};
	struct mc_store_offload_rpc_get_resp resp = {9, S("hp"), 5000, 1, &ob}, got;
	struct mc_buf b;

	assert_int_equal(MC_STORE_BATCH_GET_OFFLOAD_OBJECT, 96);
	assert_int_equal(MC_STORE_RELEASE_OFFLOAD_BUFFER, 97);
	assert_int_equal(MC_ERR_BUFFER_OVERFLOW, -10);
	mc_buf_init(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_BATCH_GET_OFFLOAD_OBJECT, false, &req),
			 MC_OK);
	assert_int_equal(b.len, sizeof(want_req));
	assert_memory_equal(b.data, want_req, sizeof(want_req));
	mc_buf_reset(&b);
	assert_int_equal(mc_store_body_write(&b, MC_STORE_BATCH_GET_OFFLOAD_OBJECT, true, &resp),
			 MC_OK);
	assert_int_equal(b.len, sizeof(want_resp));
	assert_memory_equal(b.data, want_resp, sizeof(want_resp));
	assert_int_equal(mc_store_batch_get_offload_object_response_decode(b.data, b.len, &got),
			 MC_OK);
	assert_true(mc_store_offload_rpc_get_resp_equal(&got, &resp));
	mc_store_offload_rpc_get_resp_release(&got);
	assert_int_equal(mc_store_batch_get_offload_object_response_decode(b.data, b.len - 1, &got),
			 MC_ERR_PROTOCOL);
	mc_buf_release(&b);
}

static void buf_writes_little_endian(void **state)
{
	static const uint8_t want[] = {0xab, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 8,  7,
				       6,    5,	   4,	 3,    2,    1,	   'h',	 'i'};
	struct mc_buf b;
	struct mc_reader r;
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;
	const uint8_t *p;

	mc_buf_init(&b);
	mc_buf_put_u8(&b, 0xab);
	mc_buf_put_u16(&b, 0x1234);
	mc_buf_put_u32(&b, 0x12345678);
	mc_buf_put_u64(&b, 0x0102030405060708ull);
	mc_buf_append(&b, "hi", 2);
	assert_int_equal(b.err, MC_OK);
	assert_int_equal(b.len, sizeof(want));
	assert_memory_equal(b.data, want, sizeof(want));

	mc_reader_init(&r, b.data, b.len);
	assert_int_equal(mc_reader_u8(&r, &u8), MC_OK);
	assert_int_equal(mc_reader_u16(&r, &u16), MC_OK);
	assert_int_equal(mc_reader_u32(&r, &u32), MC_OK);
	assert_int_equal(mc_reader_u64(&r, &u64), MC_OK);
	assert_int_equal(u8, 0xab);
	assert_int_equal(u16, 0x1234);
	assert_int_equal(u32, 0x12345678);
	assert_int_equal(u64, 0x0102030405060708ull);
	assert_int_equal(mc_reader_u32(&r, &u32), MC_ERR_PROTOCOL); /* 2 bytes left */
	assert_int_equal(r.left, 2);
	assert_int_equal(mc_reader_bytes(&r, 2, &p), MC_OK);
	assert_memory_equal(p, "hi", 2);
	assert_int_equal(mc_reader_u8(&r, &u8), MC_ERR_PROTOCOL);
	assert_int_equal(r.pos, sizeof(want));
	mc_buf_release(&b);
}

static void reader_count_checked_against_remaining(void **state)
{
	uint8_t in[4 + 12] = {3, 0, 0, 0};
	struct mc_reader r;
	uint32_t n = 99;

	mc_reader_init(&r, in, sizeof(in));
	assert_int_equal(mc_reader_count(&r, 4, &n), MC_OK);
	assert_int_equal(n, 3);
	mc_reader_init(&r, in, sizeof(in));
	assert_int_equal(mc_reader_count(&r, 5, &n), MC_ERR_PROTOCOL);
	in[0] = in[1] = in[2] = in[3] = 0xff;
	mc_reader_init(&r, in, sizeof(in));
	n = 99;
	assert_int_equal(mc_reader_count(&r, 0, &n), MC_ERR_PROTOCOL);
	assert_int_equal(n, 99); /* outputs written only on success */
}

static void header_rejects_bad_magic_version_and_size(void **state)
{
	struct mc_store_client_req req = {{1, 2}};
	struct mc_store_msg m;
	struct mc_buf b;
	struct mc_proto_hdr h;
	size_t flen;

	mc_buf_init(&b);
	assert_int_equal(mc_store_ping_request_encode(&b, 77, &req), MC_OK);

	b.data[0] ^= 0x20; /* "mCST" */
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);
	assert_int_equal(mc_proto_frame_peek(b.data, 1, MAX_PAYLOAD, &h, &flen), MC_ERR_PROTOCOL);
	b.data[0] ^= 0x20;

	b.data[4] = MC_STORE_PROTO_MAJOR + 1;
	b.data[5] = 7;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m),
			 MC_ERR_INVALID_VERSION);
	assert_int_equal(m.hdr.req_id, 77); /* the master can still refuse by id */
	assert_int_equal(m.hdr.type, MC_STORE_PING);
	assert_int_equal(m.hdr.major, MC_STORE_PROTO_MAJOR + 1);
	assert_int_equal(mc_proto_frame_peek(b.data, MC_PROTO_HDR_LEN, MAX_PAYLOAD, &h, &flen),
			 MC_ERR_INVALID_VERSION);
	b.data[4] = MC_STORE_PROTO_MAJOR;

	/* a newer minor version is fine */
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.hdr.minor, 7);
	mc_store_msg_release(&m);

	/* the decode limit is the caller's */
	assert_int_equal(mc_store_msg_decode(b.data, b.len, 15, &m), MC_ERR_TOO_LARGE);
	assert_int_equal(m.hdr.req_id, 77);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, 16, &m), MC_OK);
	mc_store_msg_release(&m);
	b.data[27] = 0x80; /* payload length 2 GiB */
	assert_int_equal(mc_proto_frame_peek(b.data, b.len, MAX_PAYLOAD, &h, &flen),
			 MC_ERR_TOO_LARGE);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_TOO_LARGE);
	b.data[27] = 0;

	/* reserved bytes and unknown flag bits are ignored */
	b.data[10] = b.data[11] = b.data[28] = b.data[31] = 0xee;
	b.data[9] = 0x80;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.body.client_req.client_id.second, 2);
	mc_store_msg_release(&m);

	/* an unknown type is answered, not a reason to close */
	b.data[6] = 63;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_NOT_SUPPORTED);
	assert_int_equal(m.hdr.type, 63);
	assert_int_equal(m.hdr.req_id, 77);
	b.data[6] = 0xff;
	b.data[7] = 0xff;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_NOT_SUPPORTED);
	mc_buf_release(&b);
}

static void peek_waits_for_whole_frames_and_pipelines(void **state)
{
	struct mc_buf b;
	union body u;
	size_t off = 0, flen = 0;
	struct mc_proto_hdr h;
	uint64_t want_id = 100;

	mc_buf_init(&b);
	/* three frames in one buffer, as a pipelining client sends them */
	encode_sample(&b, MC_STORE_PUT_START, false, 0, 100, &u);
	encode_sample(&b, MC_STORE_BATCH_EXIST_KEY, false, 5, 101, &u);
	encode_sample(&b, MC_STORE_BATCH_GET_REPLICA_LIST, true, 3, 102, &u);

	for (size_t i = 0; i < b.len; i++) {
		/* a partial frame is never mistaken for a whole one */
		mc_status rc =
			mc_proto_frame_peek(b.data + off, i - off + 1, MAX_PAYLOAD, &h, &flen);
		if (i - off + 1 < MC_PROTO_HDR_LEN) {
			assert_int_equal(rc, MC_INPROGRESS);
			continue;
		}
		assert_int_equal(h.req_id, want_id);
		if (rc == MC_INPROGRESS) {
			assert_true(i - off + 1 < flen);
			continue;
		}
		assert_int_equal(rc, MC_OK);
		assert_int_equal(i - off + 1, flen);
		{
			struct mc_store_msg m;
			assert_int_equal(mc_store_msg_decode(b.data + off, flen, MAX_PAYLOAD, &m),
					 MC_OK);
			assert_int_equal(m.hdr.req_id, want_id);
			mc_store_msg_release(&m);
		}
		off += flen;
		want_id++;
	}
	assert_int_equal(off, b.len);
	assert_int_equal(want_id, 103);

	/* peek with more than one frame buffered reports only the first */
	assert_int_equal(mc_proto_frame_peek(b.data, b.len, MAX_PAYLOAD, &h, &flen), MC_OK);
	assert_int_equal(h.req_id, 100);
	assert_true(flen < b.len);
	mc_buf_release(&b);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                               */

/* Encode (type, resp, n), decode, compare, re-encode to the same bytes. */
static void round_trip(uint16_t type, bool resp, uint32_t n)
{
	struct mc_buf b, b2;
	struct mc_store_msg want, got;
	union body u;

	mc_buf_init(&b);
	mc_buf_init(&b2);
	encode_sample(&b, type, resp, n, 0xfeedull << 32 | type, &u);

	memset(&want, 0, sizeof(want));
	want.hdr.type = type;
	want.hdr.flags = resp ? MC_PROTO_F_RESPONSE : 0;
	want.hdr.req_id = 0xfeedull << 32 | type;
	memcpy(&want.body, &u, sizeof(u));

	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &got), MC_OK);
	assert_true(mc_store_msg_equal(&got, &want));
	assert_true(mc_store_body_equal(type, resp, &got.body, &u));
	assert_int_equal(got.hdr.major, MC_STORE_PROTO_MAJOR);
	assert_int_equal(got.hdr.minor, MC_STORE_PROTO_MINOR);
	assert_int_equal(got.hdr.payload_len, b.len - MC_PROTO_HDR_LEN);

	assert_int_equal(mc_store_msg_encode(&b2, &got), MC_OK);
	assert_int_equal(b2.len, b.len);
	assert_memory_equal(b2.data, b.data, b.len);

	/* the payload-only decoder agrees */
	{
		union body v;
		assert_int_equal(mc_store_payload_decode(type, resp, b.data + MC_PROTO_HDR_LEN,
							 b.len - MC_PROTO_HDR_LEN, &v),
				 MC_OK);
		assert_true(mc_store_body_equal(type, resp, &v, &u));
		mc_store_body_release(type, resp, &v);
	}
	mc_store_msg_release(&got);
	mc_buf_release(&b);
	mc_buf_release(&b2);
}

static void every_message_round_trips(void **state)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(all_types); i++) {
		assert_true(mc_store_msg_known(all_types[i]));
		assert_string_not_equal(mc_store_msg_name(all_types[i]), "unknown");
		round_trip(all_types[i], false, 3);
		round_trip(all_types[i], true, 3);
	}
	assert_false(mc_store_msg_known(0));
	assert_false(mc_store_msg_known(15));
	assert_false(mc_store_msg_known(72));
	assert_false(mc_store_msg_known(0xffff));
	assert_string_equal(mc_store_msg_name(0xffff), "unknown");
	assert_string_equal(mc_store_msg_name(MC_STORE_PUT_START), "PUT_START");
}

static void batches_of_0_1_and_1000_items_round_trip(void **state)
{
	static const uint32_t sizes[] = {0, 1, 1000};
	for (size_t s = 0; s < MC_ARRAY_SIZE(sizes); s++)
		for (size_t i = 0; i < MC_ARRAY_SIZE(all_types); i++) {
			round_trip(all_types[i], false, sizes[s]);
			round_trip(all_types[i], true, sizes[s]);
		}
}

static void typed_wrappers_round_trip(void **state)
{
	struct mc_store_key_req req = {S("tenant"), {key_nul, sizeof(key_nul)}}, got;
	struct mc_store_replica_list resp;
	struct mc_buf b;

	mc_buf_init(&b);
	assert_int_equal(mc_store_get_replica_list_request_encode(&b, 5, &req), MC_OK);
	assert_int_equal(mc_store_get_replica_list_request_decode(b.data + MC_PROTO_HDR_LEN,
								  b.len - MC_PROTO_HDR_LEN, &got),
			 MC_OK);
	assert_true(mc_store_key_req_equal(&got, &req));
	assert_int_equal(got.key.len, 5);
	assert_memory_equal(got.key.ptr, key_nul, 5);
	assert_int_equal(got.key.ptr[5], '\0'); /* decoded strings are NUL-terminated */
	mc_store_key_req_release(&got);
	assert_null(got.key.ptr);
	mc_store_key_req_release(&got); /* twice is harmless */

	mc_buf_reset(&b);
	assert_int_equal(mc_store_get_replica_list_response_encode(&b, 5, &lists[0]), MC_OK);
	assert_int_equal(mc_store_get_replica_list_response_decode(b.data + MC_PROTO_HDR_LEN,
								   b.len - MC_PROTO_HDR_LEN, &resp),
			 MC_OK);
	assert_true(mc_store_replica_list_equal(&resp, &lists[0]));
	assert_int_equal(resp.n_replicas, 5);
	assert_int_equal(resp.replicas[0].address, 0x7f0000001000ull);
	assert_string_equal(resp.replicas[0].segment_name.ptr, "10.0.0.5:12345");
	assert_string_equal(resp.replicas[4].file_path.ptr, "/mnt/3fs/shard-3");
	assert_int_equal(resp.replicas[2].client_id.second, 8);
	mc_store_replica_list_release(&resp);

	/* void results have an empty payload */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_put_end_response_encode(&b, 5, NULL), MC_OK);
	assert_int_equal(b.len, MC_PROTO_HDR_LEN);
	mc_buf_release(&b);
}

static void error_responses_carry_status_and_text(void **state)
{
	struct mc_store_msg m, m2;
	struct mc_buf b;

	mc_buf_init(&b);
	assert_int_equal(mc_store_error_encode(&b, MC_STORE_GET_REPLICA_LIST, 31,
					       MC_ERR_OBJECT_NOT_FOUND, "no such key"),
			 MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.hdr.status, MC_ERR_OBJECT_NOT_FOUND);
	assert_true(m.hdr.flags & MC_PROTO_F_RESPONSE);
	assert_int_equal(m.error.len, 11);
	assert_string_equal(m.error.ptr, "no such key");
	assert_int_equal(m.body.replica_list.n_replicas, 0);

	/* refusing an unknown type, and a foreign version, works the same way */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_error_encode(&b, 60, 32, MC_ERR_NOT_SUPPORTED, NULL), MC_OK);
	assert_int_equal(mc_store_error_encode(&b, MC_STORE_SERVICE_READY, 33,
					       MC_ERR_INVALID_VERSION, "master speaks 1.0"),
			 MC_OK);
	mc_store_msg_release(&m);
	assert_int_equal(mc_store_msg_decode(b.data, MC_PROTO_HDR_LEN + 4, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.hdr.status, MC_ERR_NOT_SUPPORTED);
	assert_int_equal(m.error.len, 0);
	assert_int_equal(mc_store_msg_decode(b.data + MC_PROTO_HDR_LEN + 4,
					     b.len - MC_PROTO_HDR_LEN - 4, MAX_PAYLOAD, &m2),
			 MC_OK);
	assert_int_equal(m2.hdr.status, MC_ERR_INVALID_VERSION);
	assert_int_equal(m2.hdr.req_id, 33);
	assert_false(mc_store_msg_equal(&m, &m2));
	mc_store_msg_release(&m);
	mc_store_msg_release(&m2);

	/* status 0 is not an error */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_error_encode(&b, MC_STORE_PING, 1, MC_OK, "x"),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(b.len, 0);
	mc_buf_release(&b);
}

static void keys_with_nul_empty_and_maximum_length(void **state)
{
	struct mc_store_remove_req req = {S(""), S(""), false};
	struct mc_store_msg m;
	struct mc_buf b;

	mc_buf_init(&b);
	/* empty key: representable, so the master can answer INVALID_PARAMS */
	assert_int_equal(mc_store_remove_request_encode(&b, 1, &req), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.body.remove_req.key.len, 0);
	assert_non_null(m.body.remove_req.key.ptr);
	assert_string_equal(m.body.remove_req.key.ptr, "");
	mc_store_msg_release(&m);

	/* exactly MC_STORE_KEY_MAX bytes */
	mc_buf_reset(&b);
	req.key = (struct mc_proto_str){key_max, MC_STORE_KEY_MAX};
	assert_int_equal(mc_store_remove_request_encode(&b, 2, &req), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.body.remove_req.key.len, MC_STORE_KEY_MAX);
	assert_memory_equal(m.body.remove_req.key.ptr, key_max, MC_STORE_KEY_MAX);
	mc_store_msg_release(&m);

	/* one more byte: the encoder refuses, the buffer is untouched */
	{
		size_t before = b.len;
		req.key.len = MC_STORE_KEY_MAX + 1;
		key_max[MC_STORE_KEY_MAX] = 'x';
		assert_int_equal(mc_store_remove_request_encode(&b, 3, &req), MC_ERR_INVALID_KEY);
		assert_int_equal(b.len, before);
		assert_int_equal(b.err, MC_OK);
	}

	/* ... and a peer that sends one anyway violates the protocol */
	{
		uint32_t klen = MC_STORE_KEY_MAX + 1;
		/* payload: tenant "" (4), key length (4) at payload offset 4 */
		uint8_t *len_at = b.data + MC_PROTO_HDR_LEN + 4;
		memcpy(len_at, &klen, 4); /* the test host is little-endian, like the wire */
		/* grow the frame by the one extra byte the length claims */
		mc_buf_put_u8(&b, 0);
		b.data[24]++;
		assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m),
				 MC_ERR_PROTOCOL);
	}

	/* strings other than keys allow up to MC_PROTO_STR_MAX */
	{
		char *big = mc_malloc(MC_PROTO_STR_MAX + 1);
		struct mc_store_regex_req rr = {S(""), {big, MC_PROTO_STR_MAX}};
		memset(big, '.', MC_PROTO_STR_MAX + 1);
		mc_buf_reset(&b);
		assert_int_equal(mc_store_get_replica_list_by_regex_request_encode(&b, 4, &rr),
				 MC_OK);
		rr.pattern.len++;
		assert_int_equal(mc_store_get_replica_list_by_regex_request_encode(&b, 5, &rr),
				 MC_ERR_INVALID_PARAMS);
		mc_free(big);
	}
	mc_buf_release(&b);
}

/* ------------------------------------------------------------------------ */
/* Malformed input                                                           */

/* The lengths of a response sample of type without its minor-13 spoil
 * tails (*base) and with the list but no spoil_ms (*mid): prefixes a
 * decoder takes; 0 for types without them. */
static void spoil_prefixes(uint16_t type, size_t *base, size_t *mid)
{
	struct mc_proto_opt_u64 *ms = NULL;
	uint32_t *n = NULL;
	struct mc_buf b;
	union body u;

	*base = *mid = 0;
	fill(type, true, 2, &u);
	if (type == MC_STORE_REMOVE)
		n = &u.remove_resp.n_spoil, ms = &u.remove_resp.spoil_ms;
	else if (type == MC_STORE_BATCH_REMOVE)
		n = &u.batch_remove_resp.n_spoil, ms = &u.batch_remove_resp.spoil_ms;
	else if (type == MC_STORE_UPSERT_START)
		n = &u.put_start_resp.n_spoil, ms = &u.put_start_resp.spoil_ms;
	else if (type == MC_STORE_BATCH_UPSERT_START)
		n = &u.batch_put_start_resp.n_spoil, ms = &u.batch_put_start_resp.spoil_ms;
	if (!n)
		return;
	mc_buf_init(&b);
	ms->present = false;
	assert_int_equal(mc_store_response_encode(&b, type, 1, &u), MC_OK);
	*mid = b.len;
	mc_buf_reset(&b);
	*n = 0;
	assert_int_equal(mc_store_response_encode(&b, type, 1, &u), MC_OK);
	*base = b.len;
	mc_buf_release(&b);
}

/* Every strict prefix of every sample frame and payload is refused. */
static void truncation_at_every_offset_is_a_protocol_error(void **state)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(all_types); i++) {
		for (int resp = 0; resp < 2; resp++) {
			struct mc_buf b;
			union body u;
			uint8_t *copy;

			size_t base = 0, mid = 0;

			if (resp)
				spoil_prefixes(all_types[i], &base, &mid);
			mc_buf_init(&b);
			encode_sample(&b, all_types[i], resp, 2, 1, &u);
			copy = mc_malloc(b.len);
			for (size_t len = 0; len < b.len; len++) {
				struct mc_store_msg m;
				union body v;

				if (base && (len == base || len == mid))
					continue; /* minor 12, or no spoil_ms: no spoils */

				if (resp && all_types[i] == MC_STORE_PING &&
				    (len + 18 == b.len || len + 9 == b.len))
					continue; /* minor 13, or the fence's first tail only */
				if (!resp && len + 9 == b.len &&
				    (all_types[i] == MC_STORE_PUT_END ||
				     all_types[i] == MC_STORE_UPSERT_END))
					continue; /* the minor-3 payload: its replica_id absent */
				if (!resp && len + 9 == b.len &&
				    (all_types[i] == MC_STORE_PUT_START ||
				     all_types[i] == MC_STORE_UPSERT_START))
					continue; /* the minor-9 payload: no trailer_len */
				/* a short frame */
				assert_int_equal(mc_store_msg_decode(b.data, len, MAX_PAYLOAD, &m),
						 MC_ERR_PROTOCOL);
				if (len < MC_PROTO_HDR_LEN)
					continue;
				/* a short payload whose header agrees with it */
				memcpy(copy, b.data, len);
				copy[24] = (uint8_t)(len - MC_PROTO_HDR_LEN);
				copy[25] = (uint8_t)((len - MC_PROTO_HDR_LEN) >> 8);
				copy[26] = copy[27] = 0;
				assert_int_equal(mc_store_msg_decode(copy, len, MAX_PAYLOAD, &m),
						 MC_ERR_PROTOCOL);
				assert_int_equal(mc_store_payload_decode(all_types[i], resp,
									 copy + MC_PROTO_HDR_LEN,
									 len - MC_PROTO_HDR_LEN,
									 &v),
						 MC_ERR_PROTOCOL);
			}
			mc_free(copy);
			mc_buf_release(&b);
		}
	}
}

static void trailing_bytes_are_a_protocol_error(void **state)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(all_types); i++) {
		struct mc_store_msg m;
		struct mc_buf b;
		union body u;

		mc_buf_init(&b);
		encode_sample(&b, all_types[i], true, 1, 1, &u);
		mc_buf_put_u8(&b, 0);
		if (++b.data[24] == 0) /* payload length + 1, with the carry */
			b.data[25]++;
		assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m),
				 MC_ERR_PROTOCOL);
		mc_buf_release(&b);
	}
}

/* Decode payload as (type, resp) through a reader; report what it allocated. */
static mc_status read_as(uint16_t type, bool resp, const void *p, size_t len, size_t *alloc)
{
	struct mc_reader r;
	union body u;
	mc_status rc;

	mc_reader_init(&r, p, len);
	rc = mc_store_body_read(&r, type, resp, &u);
	*alloc = r.alloc_bytes;
	if (rc == MC_OK)
		mc_store_body_release(type, resp, &u);
	return rc;
}

static void forged_counts_and_lengths_allocate_nothing(void **state)
{
	uint8_t p[64];
	size_t alloc;

	/* BatchExistKey request: tenant "", then 2^32-1 keys in 16 bytes */
	memset(p, 0, sizeof(p));
	memset(p + 4, 0xff, 4);
	assert_int_equal(read_as(MC_STORE_BATCH_EXIST_KEY, false, p, 24, &alloc), MC_ERR_PROTOCOL);
	assert_int_equal(alloc, 0);

	/* a count that just fits the remaining bytes is accepted */
	memset(p + 4, 0, 4);
	p[4] = 4; /* 4 empty keys: 16 bytes */
	assert_int_equal(read_as(MC_STORE_BATCH_EXIST_KEY, false, p, 24, &alloc), MC_OK);
	assert_int_equal(alloc, 4 * sizeof(struct mc_proto_str));
	p[4] = 5;
	assert_int_equal(read_as(MC_STORE_BATCH_EXIST_KEY, false, p, 24, &alloc), MC_ERR_PROTOCOL);
	assert_int_equal(alloc, 0);

	/* tenant length 2^32-1 */
	memset(p, 0xff, 4);
	assert_int_equal(read_as(MC_STORE_EXIST_KEY, false, p, sizeof(p), &alloc), MC_ERR_PROTOCOL);
	assert_int_equal(alloc, 0);
	/* tenant length within the limit but past the end */
	p[0] = 100;
	p[1] = p[2] = p[3] = 0;
	assert_int_equal(read_as(MC_STORE_EXIST_KEY, false, p, sizeof(p), &alloc), MC_ERR_PROTOCOL);
	assert_int_equal(alloc, 0);

	/* nested: BatchGetReplicaList response, 1 item OK, then 2^32-1 replicas */
	memset(p, 0, sizeof(p));
	p[0] = 1; /* one item */
	/* status 0 at 4..7, lease ttl at 8..15, checksum absent at 16 */
	memset(p + 17, 0xff, 4); /* replica count */
	assert_int_equal(read_as(MC_STORE_BATCH_GET_REPLICA_LIST, true, p, sizeof(p), &alloc),
			 MC_ERR_PROTOCOL);
	assert_int_equal(alloc, sizeof(struct mc_store_replica_list_item));
}

/*
 * A field appended in a later minor version (PutEnd's and PutRevoke's
 * replica_id, minor 4): absent, the payload is the older one byte for
 * byte, and an older sender's payload decodes with it absent; present, it
 * is a presence byte 1 and the value; a presence byte 0 or 2 there is a
 * protocol error.
 */
static void an_appended_field_is_absent_in_an_older_payload(void **state)
{
	struct mc_store_put_end_req pe = {{1, 2},     S(""),	  3, S("k"),
					  {false, 0}, {false, 0}, 0, NULL};
	struct mc_store_put_revoke_req pr = {{1, 2}, S(""), 3, S("k"), {false, 0}};
	struct mc_store_msg m;
	struct mc_buf b;
	size_t old_len;

	(void)state;
	mc_buf_init(&b);
	assert_int_equal(mc_store_put_end_request_encode(&b, 1, &pe), MC_OK);
	/* client_id 16, tenant 4, replica type 1, key 4+1, checksum 1 */
	assert_int_equal(b.len, MC_PROTO_HDR_LEN + 27);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_false(m.body.put_end_req.replica_id.present);
	mc_store_msg_release(&m);
	old_len = b.len;

	pe.replica_id = (struct mc_proto_opt_u64){true, 0x1122334455667788ull};
	mc_buf_reset(&b);
	assert_int_equal(mc_store_put_end_request_encode(&b, 1, &pe), MC_OK);
	assert_int_equal(b.len, old_len + 9);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(m.body.put_end_req.replica_id.present);
	assert_true(m.body.put_end_req.replica_id.value == 0x1122334455667788ull);
	mc_store_msg_release(&m);
	b.data[old_len] = 0; /* an absent tail is never sent */
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);
	b.data[old_len] = 2;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);

	pr.replica_id = (struct mc_proto_opt_u64){true, 5};
	mc_buf_reset(&b);
	assert_int_equal(mc_store_put_revoke_request_encode(&b, 1, &pr), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(m.body.put_revoke_req.replica_id.present);
	assert_int_equal(m.body.put_revoke_req.replica_id.value, 5);
	mc_store_msg_release(&m);
	/* truncated inside the tail */
	assert_int_equal(mc_store_msg_decode(b.data, b.len - 1, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);
	mc_buf_release(&b);
}

/* Decode the frame in b cut to its first len bytes (the header's payload
 * length made to match); the decoded message is released. */
static mc_status decode_cut(uint8_t *data, size_t len)
{
	struct mc_store_msg m;
	mc_status rc;

	mc_put_le32(data + 24, (uint32_t)(len - MC_PROTO_HDR_LEN));
	rc = mc_store_msg_decode(data, len, MAX_PAYLOAD, &m);
	if (rc == MC_OK)
		mc_store_msg_release(&m);
	return rc;
}

/*
 * Minor 9's tails: chunk checksums after PutEnd's replica id (an absent
 * replica id then is the byte 0, and only then), per item after
 * BatchPutEnd's items and BatchReplicaList's items, and KeysReq's want.
 * An empty tail list is nothing on the wire; a count of 0 is refused.
 */
static void chunk_sum_tails_round_trip(void **state)
{
	uint64_t v[3] = {1, 2, 0x8877665544332211ull};
	struct mc_store_put_end_req pe = {{1, 2}, S(""), 4, S("k"), {true, 9}, {false, 0}, 3, v};
	struct mc_store_object_meta ms[2] = {{S("a"), {true, 1}}, {S("b"), {false, 0}}};
	struct mc_store_chunk_sums cl[2] = {{3, v}, {0, NULL}};
	struct mc_store_batch_put_end_req be = {{1, 2}, S("t"), 4, 2, ms, 2, cl};
	struct mc_proto_str keys[1] = {S("k")};
	struct mc_store_keys_req kr = {S(""), 1, keys, {true, MC_STORE_WANT_CHUNKS}};
	struct mc_store_msg m;
	struct mc_buf b;
	size_t at;

	(void)state;
	mc_buf_init(&b);
	assert_int_equal(mc_store_put_end_request_encode(&b, 1, &pe), MC_OK);
	/* 27 bytes before minor 4, checksum 8, replica id 1 (absent: 0), list 4 + 24 */
	assert_int_equal(b.len, MC_PROTO_HDR_LEN + 27 + 8 + 1 + 4 + 24);
	at = MC_PROTO_HDR_LEN + 27 + 8;
	assert_int_equal(b.data[at], 0);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_false(m.body.put_end_req.replica_id.present);
	assert_int_equal(m.body.put_end_req.n_chunk_sums, 3);
	assert_true(m.body.put_end_req.chunk_sums[2] == v[2]);
	mc_store_msg_release(&m);
	/* the byte 0 with nothing after it is not canonical */
	assert_int_equal(decode_cut(b.data, at + 1), MC_ERR_PROTOCOL);
	/* an empty list is sent as nothing at all */
	pe.n_chunk_sums = 0;
	mc_buf_reset(&b);
	assert_int_equal(mc_store_put_end_request_encode(&b, 1, &pe), MC_OK);
	assert_int_equal(b.len, MC_PROTO_HDR_LEN + 27 + 8);

	mc_buf_reset(&b);
	assert_int_equal(mc_store_batch_put_end_request_encode(&b, 1, &be), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(mc_store_batch_put_end_req_equal(&m.body.batch_put_end_req, &be));
	mc_store_msg_release(&m);
	/* a count of 0 where the tail begins: refused */
	at = b.len - (4 + 4 + 24 + 4);
	memset(b.data + at, 0, 4);
	assert_int_equal(decode_cut(b.data, at + 4), MC_ERR_PROTOCOL);
	/* and without it: an older writer's payload */
	be.n_chunks = 0;
	mc_buf_reset(&b);
	assert_int_equal(mc_store_batch_put_end_request_encode(&b, 1, &be), MC_OK);
	assert_int_equal(b.len, at);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.body.batch_put_end_req.n_chunks, 0);
	mc_store_msg_release(&m);

	mc_buf_reset(&b);
	assert_int_equal(mc_store_batch_get_replica_list_request_encode(&b, 1, &kr), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(m.body.keys_req.want.present);
	assert_int_equal(m.body.keys_req.want.value, MC_STORE_WANT_CHUNKS);
	mc_store_msg_release(&m);
	mc_buf_release(&b);
}

/*
 * Minor 10's tails: PutStart's trailer length, BatchPutStart's per-item
 * lengths, GetReplicaList's table_cksum (a replica list inside another
 * payload carries none), BatchReplicaList's per-item table_cksums after
 * the chunk lists, which are then a count of 0 when there are none (only
 * then: a 0 before nothing is refused).  And the arithmetic of trailers:
 * an allocation gives back its object's size.
 */
static void trailer_tails_round_trip(void **state)
{
	uint64_t tls[2] = {0, 8 * 3};
	struct mc_store_put_item pi[2] = {{S("a"), 10, S("")}, {S("b"), 40000, S("")}};
	struct mc_store_batch_put_start_req bps = {.client_id = {1, 2},
						   .tenant = S("t"),
						   .config = {.replica_num = 1},
						   .n_items = 2,
						   .items = pi,
						   .n_trailers = 2,
						   .trailers = tls};
	struct mc_store_put_start_req ps = {.client_id = {1, 2},
					    .key = S("k"),
					    .value_len = 40000,
					    .config = {.replica_num = 1}};
	struct mc_store_replica rep = {.id = 5,
				       .status = MC_STORE_REPLICA_COMPLETE,
				       .type = MC_STORE_REPLICA_MEMORY,
				       .size = 40000,
				       .address = 4096,
				       .segment_name = S("s"),
				       .transport_endpoint = S("e"),
				       .protocol = S("tcp")};
	struct mc_store_replica_list rl = {.lease_ttl_ms = 1000,
					   .n_replicas = 1,
					   .replicas = &rep,
					   .table_cksum = {true, 0xfeedull}};
	struct mc_store_replica_list_item items[2] = {{.status = MC_OK, .list = rl},
						      {.status = MC_ERR_OBJECT_NOT_FOUND}};
	struct mc_proto_opt_u64 tables[2] = {{true, 0xfeedull}, {false, 0}};
	struct mc_store_batch_replica_list brl = {
		.n_items = 2, .items = items, .n_tables = 2, .tables = tables};
	struct mc_store_keyed_replica_list kl = {S("k"), rl};
	struct mc_store_regex_replica_list rgx = {1, &kl};
	struct mc_store_msg m;
	struct mc_buf b;
	size_t plain;

	(void)state;
	mc_buf_init(&b);
	/* PutStart: absent is the older payload; present adds 9 bytes */
	assert_int_equal(mc_store_put_start_request_encode(&b, 1, &ps), MC_OK);
	plain = b.len;
	ps.trailer_len = (struct mc_proto_opt_u64){true, 8 * 3};
	mc_buf_reset(&b);
	assert_int_equal(mc_store_put_start_request_encode(&b, 1, &ps), MC_OK);
	assert_int_equal(b.len, plain + 9);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(mc_store_put_start_req_equal(&m.body.put_start_req, &ps));
	mc_store_msg_release(&m);
	assert_int_equal(decode_cut(b.data, plain), MC_OK);

	mc_buf_reset(&b);
	assert_int_equal(mc_store_batch_put_start_request_encode(&b, 1, &bps), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.body.batch_put_start_req.n_trailers, 2);
	assert_true(m.body.batch_put_start_req.trailers[1] == 24);
	assert_true(mc_store_batch_put_start_req_equal(&m.body.batch_put_start_req, &bps));
	mc_store_msg_release(&m);

	/* GetReplicaList: the tail; without it, the older answer */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_get_replica_list_response_encode(&b, 1, &rl), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(m.body.replica_list.table_cksum.present);
	assert_true(m.body.replica_list.table_cksum.value == 0xfeedull);
	mc_store_msg_release(&m);
	assert_int_equal(decode_cut(b.data, b.len - 9), MC_OK);
	/* inside another payload: no tail, so nothing of it on the wire */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_get_replica_list_by_regex_response_encode(&b, 1, &rgx), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_false(m.body.regex_replica_list.items[0].list.table_cksum.present);
	mc_store_msg_release(&m);

	/* BatchReplicaList: no chunk lists, then the tables: a count of 0 first */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_batch_get_replica_list_response_encode(&b, 1, &brl), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(mc_store_batch_replica_list_equal(&m.body.batch_replica_list, &brl));
	assert_int_equal(m.body.batch_replica_list.n_chunks, 0);
	assert_int_equal(m.body.batch_replica_list.n_tables, 2);
	mc_store_msg_release(&m);
	/* tables: 4 + (1 + 8) + 1, the chunk count of 0 before them: 4; the
	 * 0 with nothing after it is refused, both gone is an older answer */
	assert_int_equal(decode_cut(b.data, b.len - 14), MC_ERR_PROTOCOL);
	assert_int_equal(decode_cut(b.data, b.len - 18), MC_OK);
	mc_buf_release(&b);

	/* an allocation of size + trailer gives back size, at every edge */
	for (uint64_t v = 1; v < 40 * MC_STORE_TCHUNK; v += 997)
		assert_int_equal(mc_store_untrailer(v + mc_store_trailer_len(v)), v);
	for (uint64_t c = 1; c < 40; c++)
		for (uint64_t v = c * MC_STORE_TCHUNK - 1; v <= c * MC_STORE_TCHUNK + 1; v++)
			assert_int_equal(mc_store_untrailer(v + mc_store_trailer_len(v)), v);
	assert_int_equal(mc_store_untrailer(MC_STORE_TRAILER_MAX +
					    mc_store_trailer_len(MC_STORE_TRAILER_MAX)),
			 MC_STORE_TRAILER_MAX);
	assert_false(mc_store_trailer_fits(MC_STORE_TCHUNK));
	assert_true(mc_store_trailer_fits(MC_STORE_TCHUNK + 1));
	assert_false(mc_store_trailer_fits(MC_STORE_TRAILER_MAX + 1));
}

static void bad_flags_and_tags_are_protocol_errors(void **state)
{
	struct mc_store_exist_resp e = {true};
	struct mc_store_put_end_req pe = {{1, 2}, S(""), 0, S("k"), {true, 9}, {false, 0}, 0, NULL};
	struct mc_store_put_start_resp ps = {.n_replicas = 1, .replicas = reps};
	struct mc_store_replica bad = reps[0];
	struct mc_store_msg m;
	struct mc_buf b;

	mc_buf_init(&b);
	assert_int_equal(mc_store_exist_key_response_encode(&b, 1, &e), MC_OK);
	b.data[MC_PROTO_HDR_LEN] = 2; /* a boolean must be 0 or 1 */
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);

	mc_buf_reset(&b);
	assert_int_equal(mc_store_put_end_request_encode(&b, 1, &pe), MC_OK);
	/* client_id 16, tenant 4, replica type 1, key 4+1: presence byte at 26 */
	assert_int_equal(b.data[MC_PROTO_HDR_LEN + 26], 1);
	b.data[MC_PROTO_HDR_LEN + 26] = 3;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);

	/* a replica type the codec does not know */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_put_start_response_encode(&b, 1, &ps), MC_OK);
	/* count 4, id 8, status 1: type at 13 */
	assert_int_equal(b.data[MC_PROTO_HDR_LEN + 13], MC_STORE_REPLICA_MEMORY);
	b.data[MC_PROTO_HDR_LEN + 13] = 7;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);
	b.data[MC_PROTO_HDR_LEN + 13] = MC_STORE_REPLICA_ALL;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_ERR_PROTOCOL);

	/* and the encoder will not write one */
	mc_buf_reset(&b);
	bad.type = MC_STORE_REPLICA_ALL;
	ps.replicas = &bad;
	assert_int_equal(mc_store_put_start_response_encode(&b, 1, &ps), MC_ERR_INVALID_PARAMS);
	assert_int_equal(b.len, 0);
	mc_buf_release(&b);
}

static void encoder_refuses_bad_input_and_leaves_buffer_alone(void **state)
{
	struct mc_store_keys_req kr = {S(""), 3, NULL, {false, 0}};
	struct mc_store_key_req k = {S(""), {NULL, 2}};
	struct mc_buf b;
	union body u;
	size_t len;

	mc_buf_init(&b);
	encode_sample(&b, MC_STORE_PING, false, 0, 1, &u);
	len = b.len;
	assert_int_equal(mc_store_batch_exist_key_request_encode(&b, 2, &kr),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_exist_key_request_encode(&b, 2, &k), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_exist_key_request_encode(&b, 2, NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_request_encode(&b, 0, 2, &k), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_store_response_encode(&b, 99, 2, &k), MC_ERR_INVALID_PARAMS);
	assert_int_equal(b.len, len);
	assert_int_equal(b.err, MC_OK);
	/* the buffer still works */
	encode_sample(&b, MC_STORE_PING, true, 0, 3, &u);
	assert_true(b.len > len);
	mc_buf_release(&b);
}

static void oversize_batch_is_refused_by_the_encoder(void **state)
{
	uint32_t n = MC_PROTO_MAX_PAYLOAD / (4 + MC_STORE_KEY_MAX) + 1;
	struct mc_proto_str *keys = mc_calloc(n, sizeof(*keys));
	struct mc_store_keys_req kr = {S(""), n, keys, {false, 0}};
	struct mc_buf b;

	for (uint32_t i = 0; i < n; i++)
		keys[i] = (struct mc_proto_str){key_max, MC_STORE_KEY_MAX};
	mc_buf_init(&b);
	assert_int_equal(mc_store_batch_exist_key_request_encode(&b, 1, &kr), MC_ERR_TOO_LARGE);
	assert_int_equal(b.len, 0);
	kr.n_keys = n - 1; /* fits */
	assert_int_equal(mc_store_batch_exist_key_request_encode(&b, 1, &kr), MC_OK);
	assert_true(b.len <= MC_PROTO_HDR_LEN + MC_PROTO_MAX_PAYLOAD);
	mc_buf_release(&b);
	mc_free(keys);
}

/* The decoder allocates at most a small multiple of its input. */
static void allocation_is_bounded_by_input_size(void **state)
{
	static const uint32_t sizes[] = {0, 1, 1000};
	for (size_t s = 0; s < MC_ARRAY_SIZE(sizes); s++)
		for (size_t i = 0; i < MC_ARRAY_SIZE(all_types); i++)
			for (int resp = 0; resp < 2; resp++) {
				struct mc_buf b;
				union body u;
				size_t alloc, plen;

				mc_buf_init(&b);
				encode_sample(&b, all_types[i], resp, sizes[s], 1, &u);
				plen = b.len - MC_PROTO_HDR_LEN;
				assert_int_equal(read_as(all_types[i], resp,
							 b.data + MC_PROTO_HDR_LEN, plen, &alloc),
						 MC_OK);
				assert_true(alloc <= 16 * plen + 64);
				mc_buf_release(&b);
			}
}

/* ------------------------------------------------------------------------ */
/* Allocation failures                                                       */

static void allocation_failures_are_clean(void **state)
{
	static const uint16_t types[] = {MC_STORE_BATCH_GET_REPLICA_LIST, MC_STORE_BATCH_PUT_START,
					 MC_STORE_REMOUNT_SEGMENT,
					 MC_STORE_GET_REPLICA_LIST_BY_REGEX};
	for (size_t t = 0; t < MC_ARRAY_SIZE(types); t++) {
		for (int resp = 0; resp < 2; resp++) {
			struct mc_buf frame;
			union body u;
			long nth;

			mc_buf_init(&frame);
			encode_sample(&frame, types[t], resp, 4, 1, &u);

			/* decoding: every allocation in turn fails */
			for (nth = 1;; nth++) {
				struct mc_store_msg m;
				mc_status rc;

				mc_alloc_fault_arm(nth);
				rc = mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m);
				mc_alloc_fault_arm(0);
				if (rc == MC_OK) {
					mc_store_msg_release(&m);
					break;
				}
				assert_int_equal(rc, MC_ERR_NOMEM);
				assert_int_equal(m.body.batch_replica_list.n_items, 0);
				assert_null(m.body.batch_replica_list.items);
			}
			assert_true(nth > 1 || (types[t] == MC_STORE_REMOUNT_SEGMENT && resp));

			/* encoding: the buffer's growth fails */
			for (nth = 1;; nth++) {
				struct mc_buf b;
				mc_status rc;

				mc_buf_init(&b);
				mc_buf_put_u8(&b, 0xaa); /* earlier data survives a failure */
				mc_alloc_fault_arm(nth);
				rc = resp ? mc_store_response_encode(&b, types[t], 1, &u)
					  : mc_store_request_encode(&b, types[t], 1, &u);
				mc_alloc_fault_arm(0);
				if (rc == MC_OK) {
					assert_int_equal(b.len, frame.len + 1);
					assert_memory_equal(b.data + 1, frame.data, frame.len);
					mc_buf_release(&b);
					break;
				}
				assert_int_equal(rc, MC_ERR_NOMEM);
				assert_int_equal(b.len, 1);
				assert_int_equal(b.data[0], 0xaa);
				assert_int_equal(b.err, MC_OK);
				mc_buf_release(&b);
			}
			mc_buf_release(&frame);
		}
	}
}

/* A decode arena (proto.h): the same bodies as malloc gives, taken from the
 * arena while it has room (no malloc at all then), malloc'ed beyond it,
 * and a release in it frees only what was malloc'ed (ASan checks that). */
static void decode_arena_gives_equal_bodies_and_spills_to_malloc(void **state)
{
	static const uint16_t types[] = {MC_STORE_BATCH_GET_REPLICA_LIST,
					 MC_STORE_GET_REPLICA_LIST_BY_REGEX,
					 MC_STORE_BATCH_PUT_START};
	(void)state;
	for (size_t t = 0; t < MC_ARRAY_SIZE(types); t++) {
		for (int resp = 0; resp < 2; resp++) {
			static uint8_t big[1 << 16], small[64];
			struct mc_store_decode_arena a = {.base = big, .cap = sizeof(big)};
			struct mc_store_decode_arena tiny = {.base = small, .cap = sizeof(small)};
			struct mc_store_msg m0, m1, m2;
			struct mc_buf frame;
			union body u;

			mc_buf_init(&frame);
			encode_sample(&frame, types[t], resp, 4, 1, &u);
			assert_int_equal(
				mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m0),
				MC_OK);

			/* room for all: not one malloc (the first would fail) */
			mc_store_decode_arena_use(&a);
			mc_alloc_fault_arm(1);
			assert_int_equal(
				mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m1),
				MC_OK);
			mc_alloc_fault_arm(0);
			assert_true(a.used > 0 && a.used <= a.cap);
			assert_true(mc_store_msg_equal(&m0, &m1));
			mc_store_msg_release(&m1);
			mc_store_decode_arena_use(NULL);

			/* 64 bytes: the rest is malloc'ed and freed by the release */
			mc_store_decode_arena_use(&tiny);
			assert_int_equal(
				mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m2),
				MC_OK);
			assert_true(tiny.used <= tiny.cap);
			/* every allocation went to one or the other: spilled is what
			 * its owner would grow it by to hold the body whole */
			assert_int_equal(tiny.used + tiny.spilled, a.used);
			assert_true(mc_store_msg_equal(&m0, &m2));
			mc_store_msg_release(&m2);
			mc_store_decode_arena_use(NULL);
			assert_int_equal(a.spilled, 0);

			mc_store_msg_release(&m0);
			mc_buf_release(&frame);
		}
	}
}

/* decode_in / release_in (the master's RPC loop): the arena is in use for
 * the call only, so what the caller decodes in between (a handler's own
 * decode) is malloc'ed as usual, and the thread's arena before is back. */
static void decode_in_uses_the_arena_for_the_call_only(void **state)
{
	static uint8_t big[1 << 16], outer_buf[1 << 12];
	struct mc_store_decode_arena a = {.base = big, .cap = sizeof(big)};
	struct mc_store_decode_arena outer = {.base = outer_buf, .cap = sizeof(outer_buf)};
	struct mc_store_msg m0, m1, m2;
	struct mc_buf frame;
	union body u;
	size_t used;

	(void)state;
	mc_buf_init(&frame);
	encode_sample(&frame, MC_STORE_BATCH_PUT_START, false, 8, 1, &u);
	assert_int_equal(mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m0), MC_OK);

	mc_alloc_fault_arm(1); /* a malloc would fail: all of it is in a */
	assert_int_equal(mc_store_msg_decode_in(&a, frame.data, frame.len, MAX_PAYLOAD, &m1),
			 MC_OK);
	mc_alloc_fault_arm(0);
	used = a.used;
	assert_true(used > 0 && a.spilled == 0);
	assert_true(mc_store_msg_equal(&m0, &m1));

	/* between the two: no arena in use, a decode is malloc'ed */
	assert_int_equal(mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m2), MC_OK);
	assert_int_equal(a.used, used);
	assert_true(mc_store_msg_equal(&m0, &m2));
	mc_store_msg_release(&m2);
	mc_store_msg_release_in(&a, &m1); /* frees nothing malloc'ed (ASan) */

	/* the thread's own arena is restored after a call _in another one */
	mc_store_decode_arena_use(&outer);
	assert_int_equal(mc_store_msg_decode_in(&a, frame.data, frame.len, MAX_PAYLOAD, &m1),
			 MC_OK);
	assert_int_equal(outer.used, 0);
	assert_int_equal(mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m2), MC_OK);
	assert_true(outer.used > 0);
	mc_store_msg_release(&m2);
	mc_store_msg_release_in(&a, &m1);
	mc_store_decode_arena_use(NULL);

	mc_store_msg_release(&m0);
	mc_buf_release(&frame);
}

/* An arena of its own (a client's answer that later calls use, on any
 * thread): use() gives back the arena it replaces; with room, no malloc;
 * released _in it on another thread, then freed (ASan checks both); one
 * of no room mallocs all and counts it as spilled. */
static void *release_elsewhere(void *arg)
{
	struct mc_store_decode_arena *a = ((void **)arg)[0];

	mc_store_msg_release_in(a, ((void **)arg)[1]);
	return NULL;
}

static void own_arena_is_released_on_any_thread(void **state)
{
	struct mc_store_decode_arena a, none, *prev;
	struct mc_store_msg m0, m1, m2;
	struct mc_buf frame;
	union body u;
	void *arg[2] = {&a, &m1};
	pthread_t t;
	size_t used;

	(void)state;
	mc_buf_init(&frame);
	encode_sample(&frame, MC_STORE_BATCH_GET_REPLICA_LIST, true, 8, 1, &u);
	assert_int_equal(mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m0), MC_OK);

	mc_store_decode_arena_init(&a, 1 << 16);
	assert_non_null(a.base);
	assert_int_equal(a.cap, 1 << 16);
	assert_null(mc_store_decode_arena_use(&a));
	mc_alloc_fault_arm(1); /* a malloc would fail: all of it is in a */
	assert_int_equal(mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m1), MC_OK);
	mc_alloc_fault_arm(0);
	prev = mc_store_decode_arena_use(NULL);
	assert_ptr_equal(prev, &a);
	assert_true(a.used > 0 && a.spilled == 0);
	used = a.used;
	assert_true(mc_store_msg_equal(&m0, &m1));
	assert_int_equal(pthread_create(&t, NULL, release_elsewhere, arg), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	mc_store_decode_arena_free(&a);
	assert_null(a.base);

	mc_store_decode_arena_init(&none, 0);
	assert_null(none.base);
	mc_store_decode_arena_use(&none);
	assert_int_equal(mc_store_msg_decode(frame.data, frame.len, MAX_PAYLOAD, &m2), MC_OK);
	mc_store_decode_arena_use(NULL);
	assert_int_equal(none.used, 0);
	assert_int_equal(none.spilled, used); /* what an arena of its size would hold */
	assert_true(mc_store_msg_equal(&m0, &m2));
	mc_store_msg_release_in(&none, &m2);
	mc_store_decode_arena_free(&none);

	mc_store_msg_release(&m0);
	mc_buf_release(&frame);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(header_layout_is_pinned),
		cmocka_unit_test(replica_clear_layout_is_pinned),
		cmocka_unit_test(report_unreachable_layout_is_pinned),
		cmocka_unit_test(report_corrupt_layout_is_pinned),
		cmocka_unit_test(task_layouts_are_pinned),
		cmocka_unit_test(ssd_tier_layouts_are_pinned),
		cmocka_unit_test(offload_rpc_layout_is_pinned),
		cmocka_unit_test(buf_writes_little_endian),
		cmocka_unit_test(reader_count_checked_against_remaining),
		cmocka_unit_test(header_rejects_bad_magic_version_and_size),
		cmocka_unit_test(peek_waits_for_whole_frames_and_pipelines),
		cmocka_unit_test(every_message_round_trips),
		cmocka_unit_test(batches_of_0_1_and_1000_items_round_trip),
		cmocka_unit_test(typed_wrappers_round_trip),
		cmocka_unit_test(error_responses_carry_status_and_text),
		cmocka_unit_test(keys_with_nul_empty_and_maximum_length),
		cmocka_unit_test(truncation_at_every_offset_is_a_protocol_error),
		cmocka_unit_test(trailing_bytes_are_a_protocol_error),
		cmocka_unit_test(forged_counts_and_lengths_allocate_nothing),
		cmocka_unit_test(an_appended_field_is_absent_in_an_older_payload),
		cmocka_unit_test(chunk_sum_tails_round_trip),
		cmocka_unit_test(trailer_tails_round_trip),
		cmocka_unit_test(bad_flags_and_tags_are_protocol_errors),
		cmocka_unit_test(encoder_refuses_bad_input_and_leaves_buffer_alone),
		cmocka_unit_test(oversize_batch_is_refused_by_the_encoder),
		cmocka_unit_test(allocation_is_bounded_by_input_size),
		cmocka_unit_test(allocation_failures_are_clean),
		cmocka_unit_test(decode_arena_gives_equal_bodies_and_spills_to_malloc),
		cmocka_unit_test(decode_in_uses_the_arena_for_the_call_only),
		cmocka_unit_test(own_arena_is_released_on_any_thread),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}

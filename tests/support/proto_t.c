/* tests/support/proto_t.c - see proto_t.h. */
#include "proto_t.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/compiler.h"
#include "mooncake/status.h"

const uint16_t pt_types[PT_N_TYPES] = {
#define TYPE_ROW(NAME, num, name, req, resp) MC_STORE_##NAME,
	MC_STORE_MSG_MAP(TYPE_ROW)
#undef TYPE_ROW
};

char pt_key_nul[5] = {'k', '\0', 'e', '\0', 'y'};
char pt_key_max[MC_STORE_KEY_MAX + 1];

static struct mc_proto_str sample_keys[3];
static struct mc_proto_str pref[2];
static struct mc_store_corrupt_item corrupt_items[2];
static struct mc_store_segment segs[2];
struct mc_store_replica pt_reps[5];
static struct mc_store_credit_item credit_items[2];
static uint64_t credit_ids[2] = {1, UINT64_MAX}, credit_sizes[2] = {4096, 64 << 20};
struct mc_store_replica_list pt_lists[2];

static void samples_init(void)
{
	memset(pt_key_max, 'x', MC_STORE_KEY_MAX);
	sample_keys[0] = S("plain/key");
	sample_keys[1] = (struct mc_proto_str){pt_key_nul, sizeof(pt_key_nul)};
	sample_keys[2] = (struct mc_proto_str){pt_key_max, MC_STORE_KEY_MAX};
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
	pt_reps[0] = (struct mc_store_replica){
		.id = 1,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_MEMORY,
		.size = 1 << 20,
		.address = 0x7f0000001000ull,
		.segment_name = S("10.0.0.5:12345"),
		.transport_endpoint = S("10.0.0.5:16044"),
		.protocol = S("tcp"),
	};
	pt_reps[1] = (struct mc_store_replica){
		.id = 2,
		.status = MC_STORE_REPLICA_PROCESSING,
		.type = MC_STORE_REPLICA_DISK,
		.size = 77,
		.file_path = S("/mnt/store/obj"),
	};
	pt_reps[2] = (struct mc_store_replica){
		.id = 3,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_LOCAL_DISK,
		.size = 78,
		.transport_endpoint = S("10.0.0.6:50052"),
		.client_id = {7, 8},
	};
	pt_reps[3] = (struct mc_store_replica){
		.id = UINT64_MAX,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_NOF_SSD,
		.size = 79,
		.address = 4096,
		.segment_name = S("nof0"),
		.transport_endpoint = S("10.0.0.7:1"),
		.protocol = S("rdma"),
	};
	pt_reps[4] = (struct mc_store_replica){
		.id = 5,
		.status = MC_STORE_REPLICA_COMPLETE,
		.type = MC_STORE_REPLICA_DFS,
		.size = 80,
		.file_path = S("/mnt/3fs/shard-3"),
		.offset = 1ull << 40,
		.aligned_size = 4096,
		.shard_idx = 3,
	};
	pt_lists[0] = (struct mc_store_replica_list){
		.lease_ttl_ms = 10000,
		.checksum = {true, 0xdeadbeefcafef00dull},
		.n_replicas = 5,
		.replicas = pt_reps,
	};
	pt_lists[1] = (struct mc_store_replica_list){
		.lease_ttl_ms = 5, .n_replicas = 1, .replicas = pt_reps};
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
			.list = ok ? pt_lists[i % 2] : (struct mc_store_replica_list){0}};
		keyed[i] = (struct mc_store_keyed_replica_list){many_keys[i], pt_lists[i % 2]};
		put_items[i] = (struct mc_store_put_item){many_keys[i], (uint64_t)i << 20,
							  i % 2 ? S("group-a") : S("")};
		ps_items[i] = (struct mc_store_put_start_item){
			.status = ok ? MC_OK : MC_ERR_NO_AVAILABLE_HANDLE,
			.n_replicas = ok ? 1 + i % 5 : 0,
			.replicas = ok ? pt_reps : NULL};
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
			(struct mc_store_promotion_task){S("t"), many_keys[i], 1 << 20, pt_reps[0]};
		promo_results[i] = (struct mc_store_promotion_result){
			S("t"), many_keys[i], UINT64_MAX - i, ok ? MC_OK : MC_ERR_FILE_READ_FAIL};
		assignments[i] = (struct mc_store_task_assignment){
			.id = {7, i},
			.type = i % 2 ? MC_STORE_TASK_REPLICA_MOVE : MC_STORE_TASK_REPLICA_COPY,
			.payload = S("{\"key\":\"k\",\"source\":\"a:1\",\"targets\":[\"b:2\"]}"),
			.created_at_ms = 1700000000000ull + i,
			.max_retry_attempts = 10,
			.source = pt_reps[0],
			.n_targets = i % 3,
			.targets = i % 3 ? pt_reps : NULL};
	}
}

void pt_fill(uint16_t type, bool resp, uint32_t n, union pt_body *u)
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
			u->replica_list = pt_lists[0];
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
				.replicas = pt_reps,
				/* minor 13: UpsertStart's spoil tails */
				.n_spoil = type == MC_STORE_UPSERT_START ? 2 : 0,
				.spoil = type == MC_STORE_UPSERT_START ? pt_reps : NULL,
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
				.spoil = type == MC_STORE_BATCH_UPSERT_START ? pt_reps : NULL,
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
				(struct mc_store_put_credit_resp){n, statuses, 3, pt_reps};
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
			u->remove_resp = (struct mc_store_remove_resp){1, pt_reps, {true, 10000}};
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
				n, statuses, 2, pt_reps, {true, 50}};
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

void pt_encode_sample(struct mc_buf *b, uint16_t type, bool resp, uint32_t n, uint64_t id,
		      union pt_body *u)
{
	pt_fill(type, resp, n, u);
	if (resp)
		assert_int_equal(mc_store_response_encode(b, type, id, u), MC_OK);
	else
		assert_int_equal(mc_store_request_encode(b, type, id, u), MC_OK);
}

int pt_setup(void **state)
{
	samples_init();
	return 0;
}

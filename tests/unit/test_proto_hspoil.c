/*
 * tests/unit/test_proto_hspoil.c - minor 15's tails (store/proto.h,
 * "Holders spoil"; docs/protocol.md): Ping's answer lists blocks for the
 * holder to spoil after the fence's two tails, GetReplicaList's answer
 * and BatchReplicaList carry the replicas a reader must not cache.  Each
 * round-trips, an answer cut before the new tails is the older answer,
 * and the bytes are pinned (a program of its own, as test_proto_decode.c
 * is beside test_proto.c).  With MC_PROTO_SEED_DIR set, the pinned frames are
 * also written there (how tests/fuzz/corpus/store_proto's hspoil seeds
 * were made).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/endian.h"
#include "store/proto.h"

#define MAX_PAYLOAD MC_PROTO_MAX_PAYLOAD
#define S(lit)	    ((struct mc_proto_str){(lit), sizeof(lit) - 1})

static void seed(const char *name, const struct mc_buf *b)
{
	const char *dir = getenv("MC_PROTO_SEED_DIR");
	char path[512];
	FILE *f;

	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b->data, 1, b->len, f), b->len);
	fclose(f);
}

/* Decode the frame cut to len bytes (its header's length mended). */
static mc_status decode_cut(const struct mc_buf *b, size_t len, struct mc_store_msg *m)
{
	uint8_t *d = malloc(b->len);
	mc_status rc;

	assert_non_null(d);
	memcpy(d, b->data, b->len);
	mc_put_le32(d + 24, (uint32_t)(len - MC_PROTO_HDR_LEN));
	rc = mc_store_msg_decode(d, len, MAX_PAYLOAD, m);
	free(d);
	return rc;
}

static void ping_answer_lists_blocks_to_spoil(void **state)
{
	struct mc_store_hspoil hs[2] = {{7, 0x10000, 65536}, {0, 0x20000, 3}};
	struct mc_store_ping_resp p = {.view_version = 1,
				       .client_status = MC_STORE_CLIENT_OK,
				       .client_ttl_ms = {true, 10000},
				       .remount_wait_ms = {true, 0},
				       .n_spoil = 2,
				       .spoil = hs,
				       .spoil_ms = {true, 9000}};
	/* the payload after the fence's tails: count, two items, spoil_ms */
	static const uint8_t tail[] = {
		2, 0,	 0,    0,		 /* 2 blocks */
		7, 0,	 0,    0, 0, 0, 0, 0,	 /* id 7 */
		0, 0,	 1,    0, 0, 0, 0, 0,	 /* address 0x10000 */
		0, 0,	 1,    0, 0, 0, 0, 0,	 /* 65536 bytes */
		0, 0,	 0,    0, 0, 0, 0, 0,	 /* id 0: an upsert's */
		0, 0,	 2,    0, 0, 0, 0, 0,	 /* address 0x20000 */
		3, 0,	 0,    0, 0, 0, 0, 0,	 /* 3 bytes */
		1, 0x28, 0x23, 0, 0, 0, 0, 0, 0, /* spoil_ms 9000 */
	};
	struct mc_store_msg m;
	struct mc_buf b;
	size_t full;
	(void)state;

	mc_buf_init(&b);
	assert_int_equal(mc_store_ping_response_encode(&b, 1, &p), MC_OK);
	full = b.len;
	assert_true(full >= MC_PROTO_HDR_LEN + 9 + 18 + sizeof(tail));
	assert_memory_equal(b.data + full - sizeof(tail), tail, sizeof(tail));
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(mc_store_ping_resp_equal(&m.body.ping_resp, &p));
	mc_store_msg_release(&m);
	seed("ping_resp_hspoil", &b);
	/* cut before the new tails: minor 14's answer */
	assert_int_equal(decode_cut(&b, full - sizeof(tail), &m), MC_OK);
	assert_int_equal(m.body.ping_resp.n_spoil, 0);
	assert_false(m.body.ping_resp.spoil_ms.present);
	assert_true(m.body.ping_resp.client_ttl_ms.present);
	mc_store_msg_release(&m);
	/* a count with too few items after it is refused */
	assert_int_equal(decode_cut(&b, full - 9 - 8, &m), MC_ERR_PROTOCOL);

	/* nothing to spoil: nothing of them on the wire */
	p.n_spoil = 0;
	p.spoil = NULL;
	p.spoil_ms.present = false;
	mc_buf_reset(&b);
	assert_int_equal(mc_store_ping_response_encode(&b, 1, &p), MC_OK);
	assert_int_equal(b.len, full - sizeof(tail));
	mc_buf_release(&b);
}

static void replica_lists_mark_what_not_to_cache(void **state)
{
	struct mc_store_replica rep[2] = {{.id = 1,
					   .status = MC_STORE_REPLICA_COMPLETE,
					   .type = MC_STORE_REPLICA_MEMORY,
					   .size = 100,
					   .address = 4096,
					   .segment_name = S("a"),
					   .transport_endpoint = S("e"),
					   .protocol = S("tcp")},
					  {.id = 2,
					   .status = MC_STORE_REPLICA_COMPLETE,
					   .type = MC_STORE_REPLICA_MEMORY,
					   .size = 100,
					   .address = 8192,
					   .segment_name = S("b"),
					   .transport_endpoint = S("e"),
					   .protocol = S("tcp")}};
	struct mc_store_replica_list rl = {.lease_ttl_ms = 10000,
					   .checksum = {true, 0xabcull},
					   .n_replicas = 2,
					   .replicas = rep,
					   .nocache = {true, 2}};
	struct mc_store_replica_list_item items[2] = {{.status = MC_OK, .list = rl},
						      {.status = MC_ERR_OBJECT_NOT_FOUND}};
	uint64_t masks[2] = {2, 0};
	struct mc_store_batch_replica_list brl = {
		.n_items = 2, .items = items, .n_nocache = 2, .nocache = masks};
	struct mc_store_msg m;
	struct mc_buf b;
	size_t full;
	(void)state;

	mc_buf_init(&b);
	/* GetReplicaList: table_cksum absent (the byte 0), then the mask */
	assert_int_equal(mc_store_get_replica_list_response_encode(&b, 1, &rl), MC_OK);
	full = b.len;
	{
		static const uint8_t tail[] = {0, 1, 2, 0, 0, 0, 0, 0, 0, 0};

		assert_memory_equal(b.data + full - sizeof(tail), tail, sizeof(tail));
	}
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(m.body.replica_list.nocache.present);
	assert_true(m.body.replica_list.nocache.value == 2);
	assert_false(m.body.replica_list.table_cksum.present);
	mc_store_msg_release(&m);
	seed("replica_list_nocache", &b);
	assert_int_equal(decode_cut(&b, full - 10, &m), MC_OK); /* minor 14's answer */
	assert_false(m.body.replica_list.nocache.present);
	mc_store_msg_release(&m);
	/* the absent table_cksum's 0 with nothing after it is refused */
	assert_int_equal(decode_cut(&b, full - 9, &m), MC_ERR_PROTOCOL);

	/* BatchReplicaList: no chunks, no tables (counts of 0), the masks */
	mc_buf_reset(&b);
	assert_int_equal(mc_store_batch_get_replica_list_response_encode(&b, 1, &brl), MC_OK);
	full = b.len;
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_true(mc_store_batch_replica_list_equal(&m.body.batch_replica_list, &brl));
	assert_int_equal(m.body.batch_replica_list.n_nocache, 2);
	assert_true(m.body.batch_replica_list.nocache[0] == 2);
	mc_store_msg_release(&m);
	seed("batch_replica_list_nocache", &b);
	/* the masks (4 + 16) and the two counts of 0 before them: the older
	 * answer; the counts of 0 alone are refused */
	assert_int_equal(decode_cut(&b, full - 20 - 8, &m), MC_OK);
	assert_int_equal(m.body.batch_replica_list.n_nocache, 0);
	mc_store_msg_release(&m);
	assert_int_equal(decode_cut(&b, full - 20, &m), MC_ERR_PROTOCOL);
	mc_buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ping_answer_lists_blocks_to_spoil),
		cmocka_unit_test(replica_lists_mark_what_not_to_cache),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

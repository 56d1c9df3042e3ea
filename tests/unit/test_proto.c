/*
 * tests/unit/test_proto.c - the store client <-> master protocol codec:
 * header layout, the byte layout of messages pinned, stream peeking and
 * pipelining, a round trip of every request and response (batch forms with
 * 0, 1 and 1000 items, keys with NUL bytes, empty and maximum-length keys),
 * and the fields later minor versions append (absent in an older payload).
 * Rejection of malformed frames, the decoder's allocations and its arenas
 * are in test_proto_decode.c; the sample bodies both use are in
 * tests/support/proto_t.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "mooncake/status.h"
#include "proto_t.h"
#include "store/proto.h"

#define MAX_PAYLOAD MC_PROTO_MAX_PAYLOAD

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
static void peek_waits_for_whole_frames_and_pipelines(void **state)
{
	struct mc_buf b;
	union pt_body u;
	size_t off = 0, flen = 0;
	struct mc_proto_hdr h;
	uint64_t want_id = 100;

	mc_buf_init(&b);
	/* three frames in one buffer, as a pipelining client sends them */
	pt_encode_sample(&b, MC_STORE_PUT_START, false, 0, 100, &u);
	pt_encode_sample(&b, MC_STORE_BATCH_EXIST_KEY, false, 5, 101, &u);
	pt_encode_sample(&b, MC_STORE_BATCH_GET_REPLICA_LIST, true, 3, 102, &u);

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
	union pt_body u;

	mc_buf_init(&b);
	mc_buf_init(&b2);
	pt_encode_sample(&b, type, resp, n, 0xfeedull << 32 | type, &u);

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
		union pt_body v;
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
	for (size_t i = 0; i < MC_ARRAY_SIZE(pt_types); i++) {
		assert_true(mc_store_msg_known(pt_types[i]));
		assert_string_not_equal(mc_store_msg_name(pt_types[i]), "unknown");
		round_trip(pt_types[i], false, 3);
		round_trip(pt_types[i], true, 3);
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
		for (size_t i = 0; i < MC_ARRAY_SIZE(pt_types); i++) {
			round_trip(pt_types[i], false, sizes[s]);
			round_trip(pt_types[i], true, sizes[s]);
		}
}

static void typed_wrappers_round_trip(void **state)
{
	struct mc_store_key_req req = {S("tenant"), {pt_key_nul, sizeof(pt_key_nul)}}, got;
	struct mc_store_replica_list resp;
	struct mc_buf b;

	mc_buf_init(&b);
	assert_int_equal(mc_store_get_replica_list_request_encode(&b, 5, &req), MC_OK);
	assert_int_equal(mc_store_get_replica_list_request_decode(b.data + MC_PROTO_HDR_LEN,
								  b.len - MC_PROTO_HDR_LEN, &got),
			 MC_OK);
	assert_true(mc_store_key_req_equal(&got, &req));
	assert_int_equal(got.key.len, 5);
	assert_memory_equal(got.key.ptr, pt_key_nul, 5);
	assert_int_equal(got.key.ptr[5], '\0'); /* decoded strings are NUL-terminated */
	mc_store_key_req_release(&got);
	assert_null(got.key.ptr);
	mc_store_key_req_release(&got); /* twice is harmless */

	mc_buf_reset(&b);
	assert_int_equal(mc_store_get_replica_list_response_encode(&b, 5, &pt_lists[0]), MC_OK);
	assert_int_equal(mc_store_get_replica_list_response_decode(b.data + MC_PROTO_HDR_LEN,
								   b.len - MC_PROTO_HDR_LEN, &resp),
			 MC_OK);
	assert_true(mc_store_replica_list_equal(&resp, &pt_lists[0]));
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
	req.key = (struct mc_proto_str){pt_key_max, MC_STORE_KEY_MAX};
	assert_int_equal(mc_store_remove_request_encode(&b, 2, &req), MC_OK);
	assert_int_equal(mc_store_msg_decode(b.data, b.len, MAX_PAYLOAD, &m), MC_OK);
	assert_int_equal(m.body.remove_req.key.len, MC_STORE_KEY_MAX);
	assert_memory_equal(m.body.remove_req.key.ptr, pt_key_max, MC_STORE_KEY_MAX);
	mc_store_msg_release(&m);

	/* one more byte: the encoder refuses, the buffer is untouched */
	{
		size_t before = b.len;
		req.key.len = MC_STORE_KEY_MAX + 1;
		pt_key_max[MC_STORE_KEY_MAX] = 'x';
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
/* Fields appended in later minor versions                                   */

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
 * the chunk pt_lists, which are then a count of 0 when there are none (only
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

	/* BatchReplicaList: no chunk pt_lists, then the tables: a count of 0 first */
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
		cmocka_unit_test(peek_waits_for_whole_frames_and_pipelines),
		cmocka_unit_test(every_message_round_trips),
		cmocka_unit_test(batches_of_0_1_and_1000_items_round_trip),
		cmocka_unit_test(typed_wrappers_round_trip),
		cmocka_unit_test(error_responses_carry_status_and_text),
		cmocka_unit_test(keys_with_nul_empty_and_maximum_length),
		cmocka_unit_test(an_appended_field_is_absent_in_an_older_payload),
		cmocka_unit_test(chunk_sum_tails_round_trip),
		cmocka_unit_test(trailer_tails_round_trip),
	};
	return cmocka_run_group_tests(tests, pt_setup, NULL);
}

/*
 * tests/unit/test_proto_decode.c - the store protocol codec against bad
 * input: rejection of foreign, truncated, padded, forged and mistagged
 * frames, the encoder's refusals (a buffer left as it was), allocation
 * bounded by the input, clean allocation failures both ways, and the
 * decode arenas (proto.h).  Split out of test_proto.c (layout and round
 * trips); the sample bodies both use are in tests/support/proto_t.c.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "mooncake/status.h"
#include "proto_t.h"
#include "store/proto.h"

#define MAX_PAYLOAD MC_PROTO_MAX_PAYLOAD

/* ------------------------------------------------------------------------ */
/* Header                                                                    */

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
	union pt_body u;

	*base = *mid = 0;
	pt_fill(type, true, 2, &u);
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
	for (size_t i = 0; i < MC_ARRAY_SIZE(pt_types); i++) {
		for (int resp = 0; resp < 2; resp++) {
			struct mc_buf b;
			union pt_body u;
			uint8_t *copy;

			size_t base = 0, mid = 0;

			if (resp)
				spoil_prefixes(pt_types[i], &base, &mid);
			mc_buf_init(&b);
			pt_encode_sample(&b, pt_types[i], resp, 2, 1, &u);
			copy = mc_malloc(b.len);
			for (size_t len = 0; len < b.len; len++) {
				struct mc_store_msg m;
				union pt_body v;

				if (base && (len == base || len == mid))
					continue; /* minor 12, or no spoil_ms: no spoils */

				if (resp && pt_types[i] == MC_STORE_PING &&
				    (len + 18 == b.len || len + 9 == b.len))
					continue; /* minor 13, or the fence's first tail only */
				if (!resp && len + 9 == b.len &&
				    (pt_types[i] == MC_STORE_PUT_END ||
				     pt_types[i] == MC_STORE_UPSERT_END))
					continue; /* the minor-3 payload: its replica_id absent */
				if (!resp && len + 9 == b.len &&
				    (pt_types[i] == MC_STORE_PUT_START ||
				     pt_types[i] == MC_STORE_UPSERT_START))
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
				assert_int_equal(mc_store_payload_decode(
							 pt_types[i], resp, copy + MC_PROTO_HDR_LEN,
							 len - MC_PROTO_HDR_LEN, &v),
						 MC_ERR_PROTOCOL);
			}
			mc_free(copy);
			mc_buf_release(&b);
		}
	}
}

static void trailing_bytes_are_a_protocol_error(void **state)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(pt_types); i++) {
		struct mc_store_msg m;
		struct mc_buf b;
		union pt_body u;

		mc_buf_init(&b);
		pt_encode_sample(&b, pt_types[i], true, 1, 1, &u);
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
	union pt_body u;
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
static void bad_flags_and_tags_are_protocol_errors(void **state)
{
	struct mc_store_exist_resp e = {true};
	struct mc_store_put_end_req pe = {{1, 2}, S(""), 0, S("k"), {true, 9}, {false, 0}, 0, NULL};
	struct mc_store_put_start_resp ps = {.n_replicas = 1, .replicas = pt_reps};
	struct mc_store_replica bad = pt_reps[0];
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
	union pt_body u;
	size_t len;

	mc_buf_init(&b);
	pt_encode_sample(&b, MC_STORE_PING, false, 0, 1, &u);
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
	pt_encode_sample(&b, MC_STORE_PING, true, 0, 3, &u);
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
		keys[i] = (struct mc_proto_str){pt_key_max, MC_STORE_KEY_MAX};
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
		for (size_t i = 0; i < MC_ARRAY_SIZE(pt_types); i++)
			for (int resp = 0; resp < 2; resp++) {
				struct mc_buf b;
				union pt_body u;
				size_t alloc, plen;

				mc_buf_init(&b);
				pt_encode_sample(&b, pt_types[i], resp, sizes[s], 1, &u);
				plen = b.len - MC_PROTO_HDR_LEN;
				assert_int_equal(read_as(pt_types[i], resp,
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
			union pt_body u;
			long nth;

			mc_buf_init(&frame);
			pt_encode_sample(&frame, types[t], resp, 4, 1, &u);

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
			union pt_body u;

			mc_buf_init(&frame);
			pt_encode_sample(&frame, types[t], resp, 4, 1, &u);
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
	union pt_body u;
	size_t used;

	(void)state;
	mc_buf_init(&frame);
	pt_encode_sample(&frame, MC_STORE_BATCH_PUT_START, false, 8, 1, &u);
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
	union pt_body u;
	void *arg[2] = {&a, &m1};
	pthread_t t;
	size_t used;

	(void)state;
	mc_buf_init(&frame);
	pt_encode_sample(&frame, MC_STORE_BATCH_GET_REPLICA_LIST, true, 8, 1, &u);
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
		cmocka_unit_test(header_rejects_bad_magic_version_and_size),
		cmocka_unit_test(truncation_at_every_offset_is_a_protocol_error),
		cmocka_unit_test(trailing_bytes_are_a_protocol_error),
		cmocka_unit_test(forged_counts_and_lengths_allocate_nothing),
		cmocka_unit_test(bad_flags_and_tags_are_protocol_errors),
		cmocka_unit_test(encoder_refuses_bad_input_and_leaves_buffer_alone),
		cmocka_unit_test(oversize_batch_is_refused_by_the_encoder),
		cmocka_unit_test(allocation_is_bounded_by_input_size),
		cmocka_unit_test(allocation_failures_are_clean),
		cmocka_unit_test(decode_arena_gives_equal_bodies_and_spills_to_malloc),
		cmocka_unit_test(decode_in_uses_the_arena_for_the_call_only),
		cmocka_unit_test(own_arena_is_released_on_any_thread),
	};
	return cmocka_run_group_tests(tests, pt_setup, NULL);
}

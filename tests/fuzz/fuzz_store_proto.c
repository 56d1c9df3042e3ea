/*
 * tests/fuzz/fuzz_store_proto.c - the store client <-> master protocol
 * decoder on bytes as a peer would send them.
 *
 * The input is read twice:
 *   1. as a connection's byte stream: frames are peeked and decoded one
 *      after another, as a pipelining peer sends them.  Peek and decode
 *      must agree; a frame that decodes is re-encoded, and must give back
 *      the same payload bytes (the decoder accepts canonical encodings
 *      only) and decode to an equal message; each frame is decoded again
 *      in an arena, as the master's RPC loop does, with the same outcome;
 *   2. as a bare payload (after the first 32 bytes when there are that
 *      many, so seed frames give real payloads), decoded as the request
 *      and the response of every message type, with the same re-encoding
 *      check on what decodes.
 * Every decode must allocate no more than a small multiple of the bytes it
 * was given (the reader counts), and must free everything on failure
 * (LeakSanitizer checks that).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "mooncake/status.h"
#include "store/proto.h"

#define FUZZ_MAX_PAYLOAD (1u << 20)

static const uint16_t types[] = {
#define TYPE_ROW(NAME, num, name, req, resp) MC_STORE_##NAME,
	MC_STORE_MSG_MAP(TYPE_ROW)
#undef TYPE_ROW
};

union body {
#define BODY_MEMBER(name) struct mc_store_##name name;
	MC_STORE_BODY_MAP(BODY_MEMBER)
#undef BODY_MEMBER
};

/*
 * What a decoder may allocate for n input bytes (proto.c explains the
 * numbers): a decode that succeeds allocates at most ~20 bytes per byte it
 * consumed; one that fails may also hold speculative list allocations at
 * every nesting level, at most ~27 bytes per byte.
 */
static size_t alloc_bound(size_t n, bool ok)
{
	return (ok ? 21 : 28) * n + 64;
}

static void frame_round_trip(const uint8_t *frame, size_t len, const struct mc_store_msg *m)
{
	struct mc_store_msg again;
	struct mc_buf b;

	mc_buf_init(&b);
	if (mc_store_msg_encode(&b, m) != MC_OK) {
		mc_buf_release(&b);
		return; /* only NOMEM can get here */
	}
	check(b.len == len);
	check(memcmp(b.data, frame, 5) == 0);	      /* magic, major */
	check(memcmp(b.data + 6, frame + 6, 2) == 0); /* type */
	check((b.data[8] & 1) == (frame[8] & 1));     /* response flag */
	if (m->hdr.flags & MC_PROTO_F_RESPONSE)
		check(memcmp(b.data + 12, frame + 12, 4) == 0); /* status */
	check(memcmp(b.data + 16, frame + 16, 12) == 0);	/* request id, length */
	check(memcmp(b.data + MC_PROTO_HDR_LEN, frame + MC_PROTO_HDR_LEN, len - MC_PROTO_HDR_LEN) ==
	      0);
	check(mc_store_msg_decode(b.data, b.len, FUZZ_MAX_PAYLOAD, &again) == MC_OK);
	check(mc_store_msg_equal(&again, m));
	mc_store_msg_release(&again);
	mc_buf_release(&b);
}

/* The frame decoded as the master's RPC loop does, in an arena (a small
 * one, so that all but the shortest frames also spill to malloc): the same
 * outcome and the same message as rc and m of the plain decode, and a
 * release that frees only what was malloc'ed (LeakSanitizer, ASan). */
static void in_arena(const uint8_t *frame, size_t len, mc_status rc, const struct mc_store_msg *m)
{
	static uint8_t buf[256];
	struct mc_store_decode_arena a = {.base = buf, .cap = sizeof(buf)};
	struct mc_store_msg m2;
	mc_status rc2 = mc_store_msg_decode_in(&a, frame, len, FUZZ_MAX_PAYLOAD, &m2);

	check(rc2 == rc || rc2 == MC_ERR_NOMEM || rc == MC_ERR_NOMEM);
	check(a.used <= a.cap);
	if (rc2 == MC_OK && rc == MC_OK)
		check(mc_store_msg_equal(&m2, m));
	if (rc2 == MC_OK)
		mc_store_msg_release_in(&a, &m2);
}

static void stream(const uint8_t *data, size_t size)
{
	size_t off = 0;

	while (off < size) {
		struct mc_proto_hdr h;
		struct mc_store_msg m;
		size_t flen = 0;
		mc_status peek, rc;

		peek = mc_proto_frame_peek(data + off, size - off, FUZZ_MAX_PAYLOAD, &h, &flen);
		rc = mc_store_msg_decode(data + off, size - off, FUZZ_MAX_PAYLOAD, &m);
		check(peek == MC_OK || peek == MC_INPROGRESS || peek == MC_ERR_PROTOCOL ||
		      peek == MC_ERR_INVALID_VERSION || peek == MC_ERR_TOO_LARGE);
		if (rc == MC_OK)
			check(peek == MC_OK && flen == size - off);
		else if (peek == MC_INPROGRESS || peek == MC_ERR_PROTOCOL)
			check(rc == MC_ERR_PROTOCOL);
		else if (peek == MC_ERR_INVALID_VERSION || peek == MC_ERR_TOO_LARGE)
			check(rc == peek && m.hdr.req_id == h.req_id && m.hdr.type == h.type);
		if (rc == MC_OK)
			mc_store_msg_release(&m);
		if (peek != MC_OK)
			return;
		check(flen >= MC_PROTO_HDR_LEN && flen <= size - off);

		rc = mc_store_msg_decode(data + off, flen, FUZZ_MAX_PAYLOAD, &m);
		check(rc == MC_OK || rc == MC_ERR_PROTOCOL || rc == MC_ERR_NOT_SUPPORTED ||
		      rc == MC_ERR_NOMEM);
		check(m.hdr.req_id == h.req_id && m.hdr.type == h.type);
		if (rc == MC_ERR_NOT_SUPPORTED)
			check(!mc_store_msg_known(h.type));
		if (rc == MC_OK)
			frame_round_trip(data + off, flen, &m);
		in_arena(data + off, flen, rc, &m);
		if (rc == MC_OK)
			mc_store_msg_release(&m);
		off += flen;
	}
}

static void payload_as(const uint8_t *p, size_t len, uint16_t type, bool resp)
{
	struct mc_reader r;
	union body u, again;
	struct mc_buf b;
	mc_status rc;

	mc_reader_init(&r, p, len);
	rc = mc_store_body_read(&r, type, resp, &u);
	check(rc == MC_OK || rc == MC_ERR_PROTOCOL || rc == MC_ERR_NOMEM);
	if (rc != MC_OK) {
		check(r.alloc_bytes <= alloc_bound(len, false));
		return;
	}
	check(r.pos + r.left == len);
	check(r.alloc_bytes <= alloc_bound(r.pos, true));

	/* canonical: what decoded re-encodes to exactly the bytes it came from */
	mc_buf_init(&b);
	if (mc_store_body_write(&b, type, resp, &u) == MC_OK) {
		check(b.len == r.pos && (b.len == 0 || memcmp(b.data, p, b.len) == 0));
		check(mc_store_payload_decode(type, resp, b.data, b.len, &again) == MC_OK);
		check(mc_store_body_equal(type, resp, &again, &u));
		mc_store_body_release(type, resp, &again);
	}
	mc_buf_release(&b);
	mc_store_body_release(type, resp, &u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *payload = size >= MC_PROTO_HDR_LEN ? data + MC_PROTO_HDR_LEN : data;
	size_t plen = size >= MC_PROTO_HDR_LEN ? size - MC_PROTO_HDR_LEN : size;

	stream(data, size);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		payload_as(payload, plen, types[i], false);
		payload_as(payload, plen, types[i], true);
	}
	return 0;
}

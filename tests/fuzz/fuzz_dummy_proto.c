/*
 * tests/fuzz/fuzz_dummy_proto.c - the dummy client <-> daemon codec
 * (store/dummy_proto.c) on bytes as a dummy (or a daemon) would send them.
 *
 * The first input byte picks the request type (MC_DUMMY_MSG_FIRST + byte
 * modulo the number of types); the rest is a payload, decoded as that
 * request and as an answer.  What decodes is re-encoded and must give back
 * the same payload bytes (the decoder accepts canonical encodings only).
 * A decode may allocate no more than a small multiple of its input, and
 * frees everything on failure (LeakSanitizer checks that).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "mooncake/status.h"
#include "store/dummy_proto.h"

static void req(uint16_t type, const uint8_t *p, size_t n)
{
	struct mc_dummy_req q;
	struct mc_buf b;

	if (mc_dummy_req_decode(type, p, n, &q) != MC_OK)
		return;
	mc_buf_init(&b);
	if (mc_dummy_req_encode(&b, 7, &q) == MC_OK) {
		check(b.len == MC_PROTO_HDR_LEN + n);
		check(n == 0 || memcmp(b.data + MC_PROTO_HDR_LEN, p, n) == 0);
	}
	mc_buf_release(&b);
	mc_dummy_req_release(&q);
}

static void resp(const uint8_t *p, size_t n)
{
	struct mc_dummy_resp r;
	struct mc_buf b;

	if (mc_dummy_resp_decode(p, n, &r) != MC_OK)
		return;
	mc_buf_init(&b);
	if (mc_dummy_resp_encode(&b, MC_DUMMY_MSG_PUT, 7, MC_OK, &r) == MC_OK) {
		check(b.len == MC_PROTO_HDR_LEN + n);
		check(memcmp(b.data + MC_PROTO_HDR_LEN, p, n) == 0);
	}
	mc_buf_release(&b);
	mc_dummy_resp_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned ntypes = MC_DUMMY_MSG_LAST - MC_DUMMY_MSG_FIRST + 1;
	if (size == 0)
		return 0;
	req((uint16_t)(MC_DUMMY_MSG_FIRST + data[0] % ntypes), data + 1, size - 1);
	/* an unknown type is refused, never decoded */
	{
		struct mc_dummy_req q;
		check(mc_dummy_req_decode(MC_DUMMY_MSG_LAST + 1, data + 1, size - 1, &q) ==
		      MC_ERR_PROTOCOL);
	}
	resp(data + 1, size - 1);
	return 0;
}

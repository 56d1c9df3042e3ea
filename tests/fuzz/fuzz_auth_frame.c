/*
 * tests/fuzz/fuzz_auth_frame.c - the authentication handshake's frame
 * decoder and state machine (base/auth_hs.h), as a server and as a client.
 *
 * Input: byte 0 picks the role (bit 0) and byte 1 the chunk size the rest
 * is fed in, never more than the handshake asks for (as mc_auth_hs_io
 * reads).  Whatever the bytes, the handshake must end in AGAIN or FAIL:
 * DONE would mean the input proved the secret over a nonce it never saw.
 * A server that took a HELLO must have queued exactly one CHALLENGE.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/auth_hs.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char key[] = "fuzz-secret";
	struct mc_auth_secret s = {.bytes = key, .len = sizeof(key) - 1};
	struct mc_auth_hs h;
	enum mc_auth_role role;
	size_t chunk, off = 2;

	if (size < 2)
		return 0;
	role = (data[0] & 1) ? MC_AUTH_CLIENT : MC_AUTH_SERVER;
	chunk = (size_t)(data[1] % 16) + 1;
	if (mc_auth_hs_init(&h, &s, role, "fuzz") != MC_OK)
		abort();
	while (off < size) {
		size_t need = mc_auth_hs_need(&h), k = size - off;
		enum mc_auth_result r;
		if (k > chunk)
			k = chunk;
		if (need == 0)
			break;
		if (k > need)
			k = need;
		r = mc_auth_hs_feed(&h, data + off, k);
		off += k;
		if (r == MC_AUTH_DONE)
			abort();
		if (r == MC_AUTH_FAIL) {
			if (!h.why || mc_auth_hs_need(&h) != 0)
				abort();
			break;
		}
		if (h.out_len > sizeof(h.out))
			abort();
	}
	{
		struct mc_auth_hdr hd;
		if (size >= 2 + MC_AUTH_HDR_LEN && mc_auth_hdr_decode(data + 2, &hd) == MC_OK &&
		    hd.len > MC_AUTH_BODY_MAX)
			abort();
	}
	return 0;
}

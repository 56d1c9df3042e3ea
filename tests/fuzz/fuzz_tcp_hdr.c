/*
 * tests/fuzz/fuzz_tcp_hdr.c - the TCP data protocol's request header and
 * status frame, with the bounds check every incoming request passes.
 *
 * The input is cut into 24-byte request headers.  Each is decoded and its
 * range looked up in a registry holding two small heap regions, exactly as
 * the server does before touching memory; an accepted range is then read
 * and written in full, so ASan flags any range the check wrongly lets
 * through; its opcode is parsed as the target does (write, v2, checksum).
 * The tail of the input is decoded as status frames and checksum trailers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_memreg.h"
#include "transport/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *r1;
	struct mc_memreg *reg = fuzz_regions(&r1);
	size_t off = 0;

	while (size - off >= MC_TCP_HDR_LEN) {
		struct mc_tcp_hdr h;
		uint8_t again[MC_TCP_HDR_LEN];

		struct mc_tcp_op op;

		mc_tcp_hdr_decode(data + off, &h);
		mc_tcp_hdr_encode(&h, again);
		/* the opcode's bits: a write is 0x01 with any of v2 and sum */
		op = mc_tcp_op_parse(h.opcode);
		if (op.write != ((h.opcode & 0x3f) == MC_TCP_OP_WRITE) ||
		    op.v2 != ((h.opcode & MC_TCP_OP_V2) != 0) ||
		    op.sum != ((h.opcode & MC_TCP_OP_SUM) != 0))
			abort();
		/* the codec round-trips every field it carries */
		if (memcmp(again, data + off, 17) != 0)
			abort();
		/* addresses from the input are made relative to r1 half the time,
		 * so accepted ranges are actually exercised */
		if (h.opcode & 1)
			h.addr = (uint64_t)(uintptr_t)r1 + (h.addr & 0x1fff);
		fuzz_touch(reg, h.addr, h.size);
		off += MC_TCP_HDR_LEN;
	}
	while (size - off >= 8) {
		uint32_t code;
		uint8_t again[8];
		if (mc_tcp_status_decode(data + off, &code) == MC_OK) {
			mc_tcp_status_encode(code, again);
			if (memcmp(again, data + off, 8) != 0)
				abort();
		}
		/* the same 8 bytes as a checksum trailer round-trip */
		mc_tcp_sum_encode(mc_tcp_sum_decode(data + off), again);
		if (memcmp(again, data + off, 8) != 0)
			abort();
		off += 8;
	}
	return 0;
}

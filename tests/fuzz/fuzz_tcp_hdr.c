/*
 * tests/fuzz/fuzz_tcp_hdr.c - the TCP data protocol's request header and
 * status frame, with the bounds check every incoming request passes.
 *
 * The input is cut into 24-byte request headers.  Each is decoded and its
 * range looked up in a registry holding two small heap regions, exactly as
 * the server does before touching memory; an accepted range is then read
 * and written in full, so ASan flags any range the check wrongly lets
 * through.  The tail of the input is decoded as status frames.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "te/engine.h"
#include "transport/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t *r1, *r2;
	static struct mc_memreg reg;
	static int ready;
	size_t off = 0;

	if (!ready) {
		r1 = malloc(4096);
		r2 = malloc(100);
		mc_memreg_init(&reg);
		mc_memreg_add(&reg, (uint64_t)(uintptr_t)r1, 4096, "cpu:0", true);
		mc_memreg_add(&reg, (uint64_t)(uintptr_t)r2, 100, "cpu:0", true);
		ready = 1;
	}
	while (size - off >= MC_TCP_HDR_LEN) {
		struct mc_tcp_hdr h;
		struct mc_memreg_entry *e;
		uint8_t again[MC_TCP_HDR_LEN];

		mc_tcp_hdr_decode(data + off, &h);
		mc_tcp_hdr_encode(&h, again);
		/* the codec round-trips every field it carries */
		if (memcmp(again, data + off, 17) != 0)
			abort();
		/* addresses from the input are made relative to r1 half the time,
		 * so accepted ranges are actually exercised */
		if (h.opcode & 1)
			h.addr = (uint64_t)(uintptr_t)r1 + (h.addr & 0x1fff);
		e = mc_memreg_acquire(&reg, h.addr, h.size);
		if (e) {
			uint8_t *p = (uint8_t *)(uintptr_t)h.addr;
			volatile uint8_t sum = 0;
			for (uint64_t i = 0; i < h.size; i++)
				sum ^= p[i];
			memset(p, (int)sum, (size_t)h.size);
			mc_memreg_put(&reg, e);
		}
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
		off += 8;
	}
	return 0;
}

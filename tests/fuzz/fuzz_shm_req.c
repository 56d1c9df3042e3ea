/*
 * tests/fuzz/fuzz_shm_req.c - the same-host transport's request frame and
 * answer, with the bounds check a target applies before copying.
 *
 * The input is cut into 40-byte request frames.  Each is decoded; a frame
 * the decoder accepts must re-encode to the same bytes, and its target
 * range is looked up in a registry of two small heap regions exactly as the
 * target's worker does before process_vm_*; an accepted range is then read
 * and written in full, so ASan flags any range the check wrongly lets
 * through.  The tail of the input is decoded as answers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_memreg.h"
#include "transport/shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *r1;
	struct mc_memreg *reg = fuzz_regions(&r1);
	size_t off = 0;

	while (size - off >= MC_SHM_REQ_LEN) {
		struct mc_shm_req r;
		const char *why = NULL;
		uint8_t again[MC_SHM_REQ_LEN];

		if (mc_shm_req_decode(data + off, &r, &why) == MC_OK) {
			if (why)
				abort();
			mc_shm_req_encode(&r, again);
			if (memcmp(again, data + off, MC_SHM_REQ_LEN) != 0)
				abort();
			if (r.len == 0 || r.remote + r.len < r.remote || r.local + r.len < r.local)
				abort(); /* the decoder promised these away */
			/* half the time aim near r1 so accepted ranges are exercised */
			if (r.id & 1)
				r.remote = (uint64_t)(uintptr_t)r1 + (r.remote & 0x1fff);
			fuzz_touch(reg, r.remote, r.len);
		} else if (!why) {
			abort(); /* every rejection names its reason */
		}
		off += MC_SHM_REQ_LEN;
	}
	while (size - off >= MC_SHM_RESP_LEN) {
		uint64_t id;
		uint32_t st;
		uint8_t again[MC_SHM_RESP_LEN];
		if (mc_shm_resp_decode(data + off, &id, &st) == MC_OK) {
			mc_shm_resp_encode(id, st, again);
			if (memcmp(again, data + off, MC_SHM_RESP_LEN) != 0)
				abort();
		}
		off += MC_SHM_RESP_LEN;
	}
	return 0;
}

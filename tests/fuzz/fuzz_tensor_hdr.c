/*
 * tests/fuzz/fuzz_tensor_hdr.c - the stored-tensor header decoder
 * (mooncake/tensor_hdr.h) on objects as the store hands them back.
 *
 * The input is one stored object, header and payload.  When the decoder
 * accepts it, what a reader then trusts must hold: the payload lies
 * inside the object and is read in full (ASan flags a range the decoder
 * wrongly let through), its length is the element count times the dtype
 * size computed here independently with overflow checks, re-encoding gives
 * back the same 304 bytes, and validating the decoded header again agrees.
 * A refusal is MC_ERR_INVALID_PARAMS with a reason in mc_last_error()
 * that validating the same header again repeats, and leaves the output
 * untouched.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "mooncake/log.h"
#include "mooncake/tensor_hdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_tensor_hdr h, canary;
	uint8_t again[MC_TENSOR_HDR_SIZE];
	mc_status st;
	uint64_t numel = 1, bytes;
	volatile uint8_t sum = 0;

	memset(&h, 0x5a, sizeof(h));
	canary = h;
	st = mc_tensor_hdr_decode(data, size, &h);
	if (st != MC_OK) {
		char why[512];

		check(st == MC_ERR_INVALID_PARAMS);
		check(strncmp(mc_last_error(), "stored tensor: ", 15) == 0);
		check(memcmp(&h, &canary, sizeof(h)) == 0);
		if (size >= MC_TENSOR_HDR_SIZE) {
			snprintf(why, sizeof(why), "%s", mc_last_error());
			memcpy(&h, data, sizeof(h));
			check(mc_tensor_hdr_validate(&h, size) == MC_ERR_INVALID_PARAMS);
			check(strcmp(mc_last_error(), why) == 0);
		}
		return 0;
	}
	check(mc_tensor_hdr_validate(&h, size) == MC_OK);
	mc_tensor_hdr_encode(&h, again);
	check(memcmp(again, data, MC_TENSOR_HDR_SIZE) == 0);

	check(h.ndim >= 0 && h.ndim <= MC_TENSOR_MAX_DIMS);
	for (int32_t i = 0; i < h.ndim; i++) {
		check(h.local_shape[i] >= 0 && h.global_shape[i] >= 0);
		check(!__builtin_mul_overflow(numel, (uint64_t)h.local_shape[i], &numel));
	}
	check(mc_tensor_dtype_name(h.dtype) != NULL);
	check(!__builtin_mul_overflow(numel, (uint64_t)mc_tensor_dtype_size(h.dtype), &bytes));
	check(bytes == h.data_bytes);
	check(h.data_offset >= MC_TENSOR_HDR_SIZE && h.data_offset <= size);
	check(h.data_offset + h.data_bytes == size);
	for (uint64_t i = 0; i < h.data_bytes; i++)
		sum += data[h.data_offset + i];
	(void)sum;
	return 0;
}

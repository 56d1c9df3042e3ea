/*
 * tests/fuzz/fuzz_fsdir_hdr.c - the legacy shared-FS DISK tier's file
 * header (store/fsdir.h) on bytes as a damaged or foreign file could hand
 * them back.
 *
 * A header the decoder accepts has lengths in range and re-encodes to the
 * same 64 bytes; a refusal is MC_ERR_FILE_READ_FAIL or
 * MC_ERR_CHECKSUM_MISMATCH with a reason, and leaves the output zeroed.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "mooncake/log.h"
#include "store/fsdir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct mc_fsdir_hdr zero;
	uint8_t again[MC_FSDIR_HDR_SIZE];
	struct mc_fsdir_hdr h;
	mc_status st = mc_fsdir_hdr_decode(data, size, &h);

	if (st != MC_OK) {
		check(st == MC_ERR_FILE_READ_FAIL || st == MC_ERR_CHECKSUM_MISMATCH);
		check(strncmp(mc_last_error(), "fsdir file header: ", 19) == 0);
		check(memcmp(&h, &zero, sizeof(h)) == 0);
		return 0;
	}
	check(h.key_len >= 1 && h.key_len <= MC_FSDIR_KEY_MAX);
	check(h.tenant_len <= MC_FSDIR_TENANT_MAX);
	mc_fsdir_hdr_encode(&h, again);
	check(memcmp(again, data, MC_FSDIR_HDR_SIZE) == 0);
	return 0;
}

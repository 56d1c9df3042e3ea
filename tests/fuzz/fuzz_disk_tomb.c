/*
 * tests/fuzz/fuzz_disk_tomb.c - the disk store's tombstones
 * (store/disk_store.h: <id>.dead records) on bytes as a damaged disk could
 * hand them back.
 *
 * A tombstone the decoder accepts names a 4 KiB-aligned record offset and
 * re-encodes to the same 16 bytes; a refusal is MC_ERR_FILE_READ_FAIL or
 * MC_ERR_CHECKSUM_MISMATCH with a reason.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "mooncake/log.h"
#include "store/bucket.h"
#include "store/disk_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t again[MC_DISK_TOMB_SIZE];
	uint64_t off = UINT64_MAX;
	mc_status st = mc_disk_tomb_decode(data, size, &off);

	if (st != MC_OK) {
		check(st == MC_ERR_FILE_READ_FAIL || st == MC_ERR_CHECKSUM_MISMATCH);
		check(strncmp(mc_last_error(), "tombstone: ", 11) == 0);
		check(off == UINT64_MAX);
		return 0;
	}
	check(off % MC_BUCKET_ALIGN == 0);
	mc_disk_tomb_encode(again, off);
	check(memcmp(again, data, MC_DISK_TOMB_SIZE) == 0);
	return 0;
}

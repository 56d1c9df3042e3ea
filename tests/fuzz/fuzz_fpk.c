/*
 * tests/fuzz/fuzz_fpk.c - the file-per-key backend's record decoder
 * (store/disk_fpk.h: mc_fpk_decode) on bytes as a damaged or torn file
 * could hand them back.
 *
 * Input: the file's size (8 bytes, little-endian), then the bytes read
 * from its start.  An accepted record has a key of 1..4096 bytes with no
 * NUL, inside the bytes given, a span equal to the file's size, and
 * re-encodes to a header the decoder takes back to the same entry; a
 * refusal is MC_ERR_FILE_READ_FAIL or MC_ERR_CHECKSUM_MISMATCH with a
 * reason.
 */
#include <stdint.h>
#include <string.h>

#include "base/endian.h"
#include "fuzz.h"
#include "mooncake/log.h"
#include "store/bucket.h"
#include "store/disk_fpk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_bucket_entry e, again;
	struct mc_bucket_rec_hdr h;
	uint8_t buf[MC_BUCKET_REC_HDR_SIZE + MC_BUCKET_KEY_MAX];
	uint64_t file_size;
	mc_status st;

	if (size < 8)
		return 0;
	file_size = mc_get_le64(data);
	data += 8;
	size -= 8;
	st = mc_fpk_decode(data, size, file_size, &e);
	if (st != MC_OK) {
		check(st == MC_ERR_FILE_READ_FAIL || st == MC_ERR_CHECKSUM_MISMATCH);
		check(mc_last_error()[0] != '\0');
		check(e.key == NULL);
		return 0;
	}
	check(e.key_len >= 1 && e.key_len <= MC_BUCKET_KEY_MAX);
	check(MC_BUCKET_REC_HDR_SIZE + (size_t)e.key_len <= size);
	check(e.key == (const char *)data + MC_BUCKET_REC_HDR_SIZE);
	check(memchr(e.key, 0, e.key_len) == NULL);
	check(e.offset == 0);
	check(mc_bucket_rec_span(e.key_len, e.data_len) == file_size);
	check(mc_bucket_rec_hdr_decode(data, size, &h) == MC_OK);
	mc_bucket_rec_hdr_encode(&h, buf);
	memcpy(buf + MC_BUCKET_REC_HDR_SIZE, e.key, e.key_len);
	check(mc_fpk_decode(buf, MC_BUCKET_REC_HDR_SIZE + e.key_len, file_size, &again) == MC_OK);
	check(again.key_len == e.key_len && again.data_len == e.data_len &&
	      again.data_sum == e.data_sum && memcmp(again.key, e.key, e.key_len) == 0);
	return 0;
}

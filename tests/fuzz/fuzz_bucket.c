/*
 * tests/fuzz/fuzz_bucket.c - the SSD tier's on-disk decoders
 * (store/bucket.h) on bytes as a damaged disk could hand them back.
 *
 * The first input byte picks the decoder: even, the .meta index; odd, a
 * record header.  When the index decoder accepts, what the reader then
 * trusts must hold: the records lie end to end from 0 to bucket_bytes,
 * each key is key_len bytes with no NUL before its terminator, and
 * re-encoding gives back the same bytes.  A refusal is
 * MC_ERR_FILE_READ_FAIL or MC_ERR_CHECKSUM_MISMATCH with a reason, and
 * leaves the output empty.  An accepted record header re-encodes to the
 * same 64 bytes.
 */
#include <stdint.h>
#include <string.h>

#include "base/buf.h"
#include "fuzz.h"
#include "mooncake/log.h"
#include "store/bucket.h"

static void index_case(const uint8_t *data, size_t size)
{
	struct mc_bucket_meta m;
	struct mc_buf again;
	uint64_t next = 0;
	mc_status st = mc_bucket_meta_decode(data, size, &m);

	if (st != MC_OK) {
		check(st == MC_ERR_FILE_READ_FAIL || st == MC_ERR_CHECKSUM_MISMATCH ||
		      st == MC_ERR_NOMEM);
		check(strncmp(mc_last_error(), "bucket ", 7) == 0);
		check(m.n == 0 && m.entries == NULL);
		return;
	}
	check(m.n > 0 && m.n <= MC_BUCKET_ENTRIES_MAX);
	for (uint32_t i = 0; i < m.n; i++) {
		const struct mc_bucket_entry *e = &m.entries[i];
		check(e->key_len > 0 && e->key_len <= MC_BUCKET_KEY_MAX);
		check(strlen(e->key) == e->key_len);
		check(e->offset == next && e->offset % MC_BUCKET_ALIGN == 0);
		next += mc_bucket_rec_span(e->key_len, e->data_len);
		check(next <= m.bucket_bytes);
	}
	check(next == m.bucket_bytes);
	mc_buf_init(&again);
	check(mc_bucket_meta_encode(&m, &again) == MC_OK);
	check(again.len == size && memcmp(again.data, data, size) == 0);
	mc_buf_release(&again);
	mc_bucket_meta_release(&m);
}

static void record_case(const uint8_t *data, size_t size)
{
	struct mc_bucket_rec_hdr h;
	uint8_t again[MC_BUCKET_REC_HDR_SIZE];
	mc_status st = mc_bucket_rec_hdr_decode(data, size, &h);

	if (st != MC_OK) {
		check(st == MC_ERR_FILE_READ_FAIL || st == MC_ERR_CHECKSUM_MISMATCH);
		return;
	}
	check(h.key_len > 0 && h.key_len <= MC_BUCKET_KEY_MAX);
	check(mc_bucket_rec_span(h.key_len, h.data_len) != 0);
	mc_bucket_rec_hdr_encode(&h, again);
	check(memcmp(again, data, sizeof(again)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] % 2 == 0)
		index_case(data + 1, size - 1);
	else
		record_case(data + 1, size - 1);
	return 0;
}

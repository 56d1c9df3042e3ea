/*
 * tests/fuzz/fuzz_wal.c - the write-ahead log's decoders (master/wal.h) on
 * bytes as a damaged disk or a torn append could leave them.
 *
 * The input is read as a log file: a header, then records end to end, the
 * way recovery walks it.  A header is accepted only with a first seq and
 * re-encodes to the same 32 bytes; a refused one says why with one of the
 * documented statuses.  Each accepted record lies inside the input, has a
 * type and a seq, and re-encodes to the same bytes; a refusal is a partial
 * record (MC_INPROGRESS) or MALFORMED / CHECKSUM_MISMATCH, never a read
 * past the input.  Each accepted record's payload is then decoded as the
 * master's replay does (master/wal_rec.h): refused with a documented
 * status, or re-encoded to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "master/wal.h"
#include "master/wal_rec.h"

/* A record's payload as the master reads it back: refused with a
 * documented status, or accepted and re-encoded to the same bytes. */
static void check_payload(const struct mc_wal_rec *r)
{
	static struct mc_walrec d;
	struct mc_buf b;
	mc_status st = mc_walrec_decode(r->type, r->payload, r->len, &d);

	if (st != MC_OK) {
		check(st == MC_ERR_MALFORMED_JSON || st == MC_ERR_INVALID_VERSION ||
		      st == MC_ERR_NOT_SUPPORTED);
		return;
	}
	check(d.type == r->type);
	mc_buf_init(&b);
	mc_walrec_encode(&b, &d);
	check(b.err == MC_OK && b.len == r->len && memcmp(b.data, r->payload, r->len) == 0);
	mc_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t first = 0;
	size_t off = MC_WAL_HDR_LEN;
	mc_status st = mc_wal_decode_header(data, size, &first);

	if (st == MC_OK) {
		uint8_t again[MC_WAL_HDR_LEN];

		check(first > 0);
		mc_wal_encode_header(again, first);
		/* a header of an older version, if one existed, would differ */
		check(memcmp(again, data, MC_WAL_HDR_LEN) == 0);
	} else {
		check(st == MC_ERR_MALFORMED_JSON || st == MC_ERR_CHECKSUM_MISMATCH ||
		      st == MC_ERR_INVALID_VERSION);
		off = 0; /* walk the bytes as records anyway */
	}
	while (off < size) {
		struct mc_wal_rec r;
		size_t used = 0;

		st = mc_wal_decode_rec(data + off, size - off, &r, &used);
		if (st != MC_OK) {
			check(st == MC_INPROGRESS || st == MC_ERR_MALFORMED_JSON ||
			      st == MC_ERR_CHECKSUM_MISMATCH);
			break;
		}
		check(used == mc_wal_rec_size(r.len) && used <= size - off);
		check(r.type > 0 && r.seq > 0 && r.len <= MC_WAL_MAX_PAYLOAD);
		check(r.payload == data + off + MC_WAL_REC_HDR_LEN);
		{
			uint8_t *again = malloc(used);

			check(again != NULL);
			mc_wal_encode_rec(again, r.seq, r.type, r.payload, r.len);
			check(memcmp(again, data + off, used) == 0);
			free(again);
		}
		check_payload(&r);
		off += used;
	}
	return 0;
}

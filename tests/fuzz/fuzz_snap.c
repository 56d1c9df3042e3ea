/*
 * tests/fuzz/fuzz_snap.c - the snapshot file decoder (master/snap.h) on
 * bytes as a damaged disk or a torn write could leave them.
 *
 * The input is read twice.  First as a whole snapshot file: accepted only
 * when its header re-encodes to the same 48 bytes over its body, and then
 * every entry lies inside the input and its payload is decoded as the
 * master's replay does (master/wal_rec.h: refused with a documented
 * status, or re-encoded to the same bytes); a refusal is one of the
 * documented statuses and gives no entry.  Then as the body of a file with
 * a valid header (so the fuzzer reaches the entry framing without having to
 * forge checksums): the same checks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "master/snap.h"
#include "master/wal_rec.h"

struct seen {
	const uint8_t *lo, *hi;
	uint64_t n;
};

static mc_status entry(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	static struct mc_walrec d;
	struct seen *s = arg;
	struct mc_buf b;
	mc_status st;

	check(type > 0 && len <= MC_SNAP_MAX_PAYLOAD);
	check(p >= s->lo && p + len <= s->hi);
	s->n++;
	st = mc_walrec_decode(type, p, len, &d);
	if (st != MC_OK) {
		check(st == MC_ERR_MALFORMED_JSON || st == MC_ERR_INVALID_VERSION ||
		      st == MC_ERR_NOT_SUPPORTED);
		return MC_OK; /* the framing goes on; the master would stop here */
	}
	check(d.type == type);
	mc_buf_init(&b);
	mc_walrec_encode(&b, &d);
	check(b.err == MC_OK && b.len == len && memcmp(b.data, p, len) == 0);
	mc_buf_release(&b);
	return MC_OK;
}

static void check_file(const uint8_t *data, size_t size)
{
	struct seen s = {data, data + size, 0};
	uint64_t seq = 0;
	mc_status st = mc_snap_decode(data, size, &seq, entry, &s);

	if (st != MC_OK) {
		check(st == MC_ERR_MALFORMED_JSON || st == MC_ERR_CHECKSUM_MISMATCH ||
		      st == MC_ERR_INVALID_VERSION);
		check(s.n == 0); /* the whole file is checked before any entry */
		return;
	}
	{
		uint8_t again[MC_SNAP_HDR_LEN];

		check(size >= MC_SNAP_HDR_LEN);
		mc_snap_encode_header(again, seq, data + MC_SNAP_HDR_LEN, size - MC_SNAP_HDR_LEN);
		check(memcmp(again, data, MC_SNAP_HDR_LEN) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *f;

	check_file(data, size);
	f = malloc(MC_SNAP_HDR_LEN + size + 1);
	check(f != NULL);
	mc_snap_encode_header(f, 7, data, size);
	if (size)
		memcpy(f + MC_SNAP_HDR_LEN, data, size);
	check_file(f, MC_SNAP_HDR_LEN + size);
	free(f);
	return 0;
}

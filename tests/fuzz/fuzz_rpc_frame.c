/*
 * tests/fuzz/fuzz_rpc_frame.c - the RPC channel's frame header parser and
 * the server's incremental frame reader, on bytes as a peer would send them.
 *
 * The input is one connection's byte stream.  It is fed to struct
 * mc_rpc_reader whole and in chunks of 1, 7 and 64 bytes: the outcome
 * (status, bytes used, type, payload) must not depend on the chunking, must
 * agree with mc_rpc_parse_header on the first 9 bytes, and a completed
 * payload must be the matching slice of the input.  A completed frame is
 * re-encoded with mc_rpc_frame_encode and read back (round trip).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "mooncake/status.h"
#include "te/rpc.h"

#define FUZZ_MAX_FRAME 65536

struct outcome {
	int status;
	size_t used;
	int type;
	uint64_t payload_len;
	char *payload;
};

static void run_reader(const uint8_t *data, size_t size, size_t chunk, struct outcome *o)
{
	struct mc_rpc_reader r;
	size_t off = 0, used = 0;
	int rc = MC_INPROGRESS;

	mc_rpc_reader_init(&r, FUZZ_MAX_FRAME);
	while (off < size) {
		size_t n = chunk ? (size - off < chunk ? size - off : chunk) : size - off;
		rc = mc_rpc_reader_feed(&r, data + off, n, &used);
		if (rc == MC_INPROGRESS) {
			check(used == n);
			off += n;
			continue;
		}
		if (rc == MC_OK) {
			check(used <= n);
			off += used;
		}
		break;
	}
	o->status = rc;
	o->used = off;
	o->type = r.type;
	o->payload_len = r.payload_len;
	o->payload = NULL;
	if (rc == MC_OK) {
		size_t len;
		o->payload = mc_rpc_reader_take(&r, &len);
		check(o->payload && len == r.payload_len && o->payload[len] == '\0');
		/* complete readers consume nothing more */
		check(mc_rpc_reader_feed(&r, data, size, &used) == MC_OK && used == 0);
	} else if (rc != MC_INPROGRESS) {
		check(mc_rpc_reader_feed(&r, data, size, &used) == rc);
	}
	mc_rpc_reader_release(&r);
}

static void round_trip(const struct outcome *o)
{
	struct mc_rpc_reader r;
	char *frame, *p;
	size_t n, used, len, want;
	int nl;

	if (mc_rpc_frame_encode(o->type, o->payload, (size_t)o->payload_len, &frame, &n) != MC_OK)
		return; /* only NOMEM can get here */
	nl = o->payload_len == 0 || o->payload[o->payload_len - 1] != '\n';
	want = (size_t)o->payload_len + (size_t)nl;
	mc_rpc_reader_init(&r, FUZZ_MAX_FRAME + 1);
	check(mc_rpc_reader_feed(&r, frame, n, &used) == MC_OK && used == n);
	check(r.type == o->type);
	p = mc_rpc_reader_take(&r, &len);
	check(p && len == want && memcmp(p, o->payload, (size_t)o->payload_len) == 0);
	check(!nl || p[len - 1] == '\n');
	mc_free(p);
	mc_rpc_reader_release(&r);
	mc_free(frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunks[] = {1, 7, 64};
	struct outcome whole, part;
	int htype = 0, hrc = MC_INPROGRESS;
	uint64_t hlen = 0;

	if (size >= MC_RPC_HEADER_LEN) {
		hrc = mc_rpc_parse_header(data, FUZZ_MAX_FRAME, &htype, &hlen);
		check(hrc == MC_OK || hrc == MC_ERR_PROTOCOL || hrc == MC_ERR_TOO_LARGE);
		if (hrc == MC_OK)
			check(htype >= -1 && htype <= MC_RPC_PROBE && hlen < FUZZ_MAX_FRAME + 1);
	}

	run_reader(data, size, 0, &whole);
	if (size < MC_RPC_HEADER_LEN)
		check(whole.status == MC_INPROGRESS);
	else if (hrc != MC_OK)
		check(whole.status == hrc);
	else
		check(whole.type == htype && whole.payload_len == hlen &&
		      (whole.status == MC_OK || whole.status == MC_INPROGRESS));

	if (whole.status == MC_OK) {
		size_t start = whole.type < 0 ? 8 : MC_RPC_HEADER_LEN;
		check(whole.used == start + whole.payload_len && whole.used <= size);
		check(memcmp(whole.payload, data + start, (size_t)whole.payload_len) == 0);
		round_trip(&whole);
	}

	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		run_reader(data, size, chunks[i], &part);
		check(part.status == whole.status);
		/* on an error, how much was fed before it depends on the chunking */
		if (whole.status == MC_OK || whole.status == MC_INPROGRESS)
			check(part.used == whole.used);
		if (whole.status == MC_OK) {
			check(part.type == whole.type && part.payload_len == whole.payload_len);
			check(memcmp(part.payload, whole.payload, (size_t)whole.payload_len) == 0);
		}
		mc_free(part.payload);
	}
	mc_free(whole.payload);
	return 0;
}

/*
 * transport/slice.h - one unit of wire work, as a transport sees it.
 *
 * A request becomes one or more slices (te/engine.c cuts it; te/stage.c
 * cuts a device-memory request into chunks, each a slice).  A transport
 * moves a slice and then calls mc_slice_done(), which calls the slice's
 * complete callback with the owner that set it: a transport never knows
 * whether the slice belongs to a task (te/batch.c) or to a staged chunk
 * (te/stage.c).  The callback runs on whichever thread finished the slice
 * (a transport worker, a local copy thread, or the submitting thread when
 * a slice fails before it reaches the wire), so it must be short and must
 * not block: both owners only count down atomics or queue the slice.
 *
 * The owner sets every field above the progress fields before handing the
 * slice over; the progress fields belong to the transport that holds it.
 */
#ifndef MC_TRANSPORT_SLICE_H
#define MC_TRANSPORT_SLICE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/list.h"
#include "mooncake/status.h"
#include "mooncake/te.h" /* MC_OP_READ, MC_OP_WRITE */

struct mc_slice;

/* A slice ended with status (MC_OK or an error); s belongs to its owner again. */
typedef void (*mc_slice_done_cb)(struct mc_slice *s, mc_status status);

struct mc_slice {
	struct mc_list node; /* on a transport's queue while it holds the slice */
	mc_slice_done_cb complete;
	void *owner; /* for complete: the task, or NULL when s is embedded */
	char *local;
	uint64_t remote_addr;
	uint64_t len;
	uint8_t opcode; /* MC_OP_READ or MC_OP_WRITE */
	/* Slices with the same nonzero group came from one batch (0: none);
	 * a transport may keep a small one beside its group's last slice
	 * (transport/tcp.c, "Lanes") */
	uint64_t group;
	/* check the bytes end to end with XXH3-64 (docs/design.md, "Transfer
	 * checksums"); a mismatch ends the slice with MC_ERR_CHECKSUM_MISMATCH */
	bool checksum;
	/* transport-private progress */
	uint64_t done;
	uint32_t hdr_done;
	uint32_t flags;
	uint8_t sum[8]; /* tcp: a write's checksum trailer, little-endian */
};

/* Called by transports when a slice ends. */
static inline void mc_slice_done(struct mc_slice *s, mc_status status)
{
	s->complete(s, status);
}

#endif

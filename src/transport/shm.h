/*
 * transport/shm.h - the same-host transport: what it offers besides the
 * vtable (counters), and the request codec (pure, fuzzed).
 *
 * Wire format on the Unix-domain socket (host byte order is not assumed;
 * everything is little-endian):
 *
 *   request, 40 bytes: magic "MCSH" (u32) | version 1 (u8) | opcode (u8) |
 *                      reserved 0 (u16) | id (u64) | initiator address (u64) |
 *                      target address (u64) | length (u64)
 *   answer,  16 bytes: magic (u32) | status (u32) | id (u64)
 *
 * Opcodes: READ (target -> initiator), WRITE (initiator -> target) and
 * HELLO (first frame of a connection: the target checks that it may copy
 * from the initiator by reading one byte at the given address, and answers
 * with its worker count in the id field).
 */
#ifndef MC_TRANSPORT_SHM_H
#define MC_TRANSPORT_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_transport;

#define MC_SHM_REQ_LEN	   40
#define MC_SHM_RESP_LEN	   16
#define MC_SHM_MAGIC	   0x4853434Du /* "MCSH" read as little-endian */
#define MC_SHM_VERSION	   1
#define MC_SHM_OP_READ	   0
#define MC_SHM_OP_WRITE	   1
#define MC_SHM_OP_HELLO	   2
#define MC_SHM_EP_MAX	   96 /* longest endpoint name we publish or accept */
#define MC_SHM_MAX_WORKERS 16

enum mc_shm_status {
	MC_SHM_ST_OK = 0,
	MC_SHM_ST_REJECTED = 1, /* target range not inside registered memory */
	MC_SHM_ST_NOPERM = 2,	/* process_vm_* not permitted: use TCP */
	MC_SHM_ST_FAULT = 3,	/* the initiator's range is not mapped */
	MC_SHM_ST_FAILED = 4,	/* anything else (initiator gone, ...) */
};

struct mc_shm_req {
	uint8_t opcode;
	uint64_t id;
	uint64_t local;	 /* address in the initiator */
	uint64_t remote; /* address in the target */
	uint64_t len;
};

void mc_shm_req_encode(const struct mc_shm_req *r, uint8_t out[MC_SHM_REQ_LEN]);
/* MC_OK, or MC_ERR_PROTOCOL with *why_out naming the defect (static
 * string): bad magic/version/opcode, reserved bits set, zero length, or a
 * range that wraps around the address space. */
mc_status mc_shm_req_decode(const uint8_t in[MC_SHM_REQ_LEN], struct mc_shm_req *r,
			    const char **why_out);
void mc_shm_resp_encode(uint64_t id, uint32_t status, uint8_t out[MC_SHM_RESP_LEN]);
/* MC_OK, or MC_ERR_PROTOCOL for a bad magic. */
mc_status mc_shm_resp_decode(const uint8_t in[MC_SHM_RESP_LEN], uint64_t *id_out,
			     uint32_t *status_out);

/* Whether a lane with queued requests made no progress for longer than
 * timeout_ms at time now.  progress_ms may be later than now: a submitter
 * stamps an idle lane's first request after the receiver read its clock. */
static inline bool mc_shm_lane_stuck(uint64_t now, uint64_t progress_ms, size_t qlen,
				     uint64_t timeout_ms)
{
	return qlen && now > progress_ms && now - progress_ms > timeout_ms;
}

/* Counters for tests and tools: slices this transport finished itself, and
 * slices it handed to TCP. */
void mc_shm_stats(struct mc_transport *tp, uint64_t *copied_out, uint64_t *fallback_out);

#endif

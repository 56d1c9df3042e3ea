/*
 * master/wal_rec.h - the payloads of the master's write-ahead log records
 * (master/wal.h stores them; issue 14).
 *
 * Every payload starts with a version byte (MC_WALREC_VERSION); a newer
 * one is refused (INVALID_VERSION), so an older master never guesses at a
 * newer master's log.  Version 2 added the chunk checksums of OBJ_PUT; a
 * record without them is still written as version 1, which masters
 * before it read.  Then, little-endian, strings as u16 length + bytes,
 * a uuid as two u64:
 *
 *   OBJ_PUT   an object completed (PutEnd) or replaced (Upsert):
 *             tenant, key, u64 size, u8 flags (1 hard pin, 2 checksum,
 *             4 chunk checksums), [u64 checksum], [u32 nchunks, nchunks x
 *             u64: flag 4, which needs flag 2 and payload version 2, and
 *             nchunks is mc_store_chunk_count(size)], group ("" = none),
 *             u8 nrep, nrep x { u8 kind (enum mc_walrec_rep_kind), uuid
 *             segment, u64 addr }
 *   OBJ_DEL   an object removed, revoked after completion, evicted or
 *             dropped with its segment: tenant, key
 *   SEG_MOUNT a segment mounted: uuid segment, uuid client, u64 base,
 *             u64 size, name, te_endpoint, protocol
 *   SEG_UNMOUNT a segment unmounted for good: uuid segment
 *   VIEW      a leader took over (master/ha.c): u64 view version, leader
 *             address; written once after recovery, before it serves, so
 *             every later record of the log belongs to that view
 *
 * Decoding is a parser of on-disk bytes (tests/fuzz/fuzz_wal.c drives it):
 * it checks every length against the payload and points into it.
 */
#ifndef MC_MASTER_WAL_REC_H
#define MC_MASTER_WAL_REC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/buf.h"
#include "mooncake/status.h"
#include "store/proto.h"

#define MC_WALREC_VERSION  2u
#define MC_WALREC_MAX_REPS 64u

enum mc_walrec_type {
	MC_WALREC_OBJ_PUT = 1,
	MC_WALREC_OBJ_DEL = 2,
	MC_WALREC_SEG_MOUNT = 3,
	MC_WALREC_SEG_UNMOUNT = 4,
	MC_WALREC_VIEW = 5,
};

enum mc_walrec_rep_kind {
	MC_WALREC_REP_MEMORY = 1,
	MC_WALREC_REP_DISK = 2,
	MC_WALREC_REP_LOCAL_DISK = 3,
};

enum {
	MC_WALREC_F_HARD = 1u << 0,
	MC_WALREC_F_CKSUM = 1u << 1,
	MC_WALREC_F_CHUNKS = 1u << 2, /* version 2 */
};

struct mc_walrec_str {
	const char *p; /* into the payload; not NUL-terminated */
	uint16_t len;
};

struct mc_walrec_rep {
	uint8_t kind;
	struct mc_store_uuid seg;
	uint64_t addr;
};

struct mc_walrec_obj {
	struct mc_walrec_str tenant, key, group;
	uint64_t size;
	uint8_t flags;
	uint64_t checksum;
	uint32_t nchunks;	  /* F_CHUNKS */
	const uint64_t *chunks;	  /* encode: the checksums */
	const uint8_t *chunks_le; /* decode: nchunks little-endian u64, in the payload */
	uint8_t nrep;
	struct mc_walrec_rep reps[MC_WALREC_MAX_REPS];
};

struct mc_walrec_seg {
	struct mc_store_uuid id, client;
	uint64_t base, size;
	struct mc_walrec_str name, te_endpoint, protocol;
};

struct mc_walrec_view {
	uint64_t version;
	struct mc_walrec_str leader;
};

/* One decoded payload: the member of its type is valid. */
struct mc_walrec {
	uint16_t type;
	union {
		struct mc_walrec_obj obj;   /* OBJ_PUT; OBJ_DEL uses tenant and key */
		struct mc_walrec_seg seg;   /* SEG_MOUNT; SEG_UNMOUNT uses id */
		struct mc_walrec_view view; /* VIEW */
	} u;
};

/* Zero r except the entries of its replica array (about 2 KiB, which
 * would cost more than the rest of a record's replay): an entry is written
 * before nrep counts it, so nothing reads one left unset. */
static inline void mc_walrec_clear(struct mc_walrec *r)
{
	size_t n = offsetof(struct mc_walrec, u.obj.reps);
	size_t seg = offsetof(struct mc_walrec, u) + sizeof(struct mc_walrec_seg);
	size_t view = offsetof(struct mc_walrec, u) + sizeof(struct mc_walrec_view);

	if (n < seg)
		n = seg;
	if (n < view)
		n = view;
	memset(r, 0, n);
}

/* Append the payload of r (its type's member) to out; errors in out->err. */
void mc_walrec_encode(struct mc_buf *out, const struct mc_walrec *r);
/* Decode payload p[0..len) of a record of the given type into *r:
 * MC_OK; INVALID_VERSION for a newer version; NOT_SUPPORTED for an unknown
 * type; MALFORMED_JSON (the log's "malformed") for bytes that are not such a payload (mc_last_error
 * says which field). */
mc_status mc_walrec_decode(uint16_t type, const uint8_t *p, size_t len, struct mc_walrec *r);

#endif

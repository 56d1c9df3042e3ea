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
 *             4 chunk checksums, 8 trailer), [u64 checksum], [u32 nchunks,
 *             nchunks x u64: flag 4, which needs flag 2 and payload version
 *             2, and nchunks is mc_store_chunk_count(size)], group ("" =
 *             none), ...; flag 8 (payload version 4, never with flag 4):
 *             each replica is the value and its chunk-sum trailer, size
 *             counts both (a value of mc_store_untrailer(size) bytes), and
 *             the checksum is the trailer's,
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
 *   TASK      (version 3) an operator's copy or move task (master/tasks_wal.c)
 *             created or changed: uuid id, u8 type, u8 status, u32 tries,
 *             tenant, key, u64 size, uuid source segment, u64 source
 *             address, uuid source client, u64 created, u64 updated,
 *             targets (u16 n >= 1, n names), message
 *   JOB       (version 3) a drain job created or changed: uuid id, u8
 *             status, u32 max_concurrency, u64 created, updated, succeeded,
 *             failed, blocked, bytes, segments (u16 n >= 1, n names),
 *             targets (u16 n, n names), message
 *   TASK_SEQ  (version 3) the task-id sequence reached u64 seq: a task of
 *             the master's own (a repair, a drain's move), which is not kept
 *   SEG_GRACEFUL (version 3) a segment is to be unmounted at a deadline
 *             (GracefulUnmountSegment): uuid segment, u64 deadline in ms
 *             of the Unix epoch (UINT64_MAX: never), so that a restart
 *             counts the time it was down
 *
 * Version 3 records are new types: a master before them refuses the log
 * with INVALID_VERSION (a newer master wrote it) rather than guessing.
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

#define MC_WALREC_VERSION  4u
#define MC_WALREC_MAX_REPS 64u

enum mc_walrec_type {
	MC_WALREC_OBJ_PUT = 1,
	MC_WALREC_OBJ_DEL = 2,
	MC_WALREC_SEG_MOUNT = 3,
	MC_WALREC_SEG_UNMOUNT = 4,
	MC_WALREC_VIEW = 5,
	MC_WALREC_TASK = 6,
	MC_WALREC_JOB = 7,
	MC_WALREC_TASK_SEQ = 8,
	MC_WALREC_SEG_GRACEFUL = 9,
};

enum mc_walrec_rep_kind {
	MC_WALREC_REP_MEMORY = 1,
	MC_WALREC_REP_DISK = 2,
	MC_WALREC_REP_LOCAL_DISK = 3,
};

enum {
	MC_WALREC_F_HARD = 1u << 0,
	MC_WALREC_F_CKSUM = 1u << 1,
	MC_WALREC_F_CHUNKS = 1u << 2,  /* version 2 */
	MC_WALREC_F_TRAILER = 1u << 3, /* version 4: size counts the trailer */
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

struct mc_walrec_grace {
	struct mc_store_uuid seg;
	uint64_t deadline_epoch_ms;
};

struct mc_walrec_view {
	uint64_t version;
	struct mc_walrec_str leader;
};

/* A list of names: encode from v (n NUL-terminated strings); decode
 * points raw at the n (u16 length, bytes) items, walked with
 * mc_walrec_names_next. */
struct mc_walrec_names {
	uint16_t n;
	const char *const *v; /* encode */
	const uint8_t *raw;   /* decode: into the payload */
	uint32_t raw_len;
};

struct mc_walrec_task {
	struct mc_store_uuid id, src_seg, client;
	uint8_t type;	/* enum mc_store_task_type */
	uint8_t status; /* enum mc_store_task_status */
	uint32_t tries;
	struct mc_walrec_str tenant, key, msg;
	uint64_t size, src_addr, created, updated;
	struct mc_walrec_names targets;
};

struct mc_walrec_job {
	struct mc_store_uuid id;
	uint8_t status; /* enum mc_job_status (master.h) */
	uint32_t max_conc;
	uint64_t created, updated, succeeded, failed, blocked, bytes;
	struct mc_walrec_names segs, targets;
	struct mc_walrec_str msg;
};

/* One decoded payload: the member of its type is valid. */
struct mc_walrec {
	uint16_t type;
	union {
		struct mc_walrec_obj obj;     /* OBJ_PUT; OBJ_DEL uses tenant and key */
		struct mc_walrec_seg seg;     /* SEG_MOUNT; SEG_UNMOUNT uses id */
		struct mc_walrec_view view;   /* VIEW */
		struct mc_walrec_task task;   /* TASK */
		struct mc_walrec_job job;     /* JOB */
		uint64_t seq;		      /* TASK_SEQ */
		struct mc_walrec_grace grace; /* SEG_GRACEFUL */
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
	size_t task = offsetof(struct mc_walrec, u) + sizeof(struct mc_walrec_task);
	size_t job = offsetof(struct mc_walrec, u) + sizeof(struct mc_walrec_job);
	size_t grace = offsetof(struct mc_walrec, u) + sizeof(struct mc_walrec_grace);

	if (n < seg)
		n = seg;
	if (n < view)
		n = view;
	if (n < task)
		n = task;
	if (n < job)
		n = job;
	if (n < grace)
		n = grace;
	memset(r, 0, n);
}

/* Append the payload of r (its type's member) to out; errors in out->err. */
void mc_walrec_encode(struct mc_buf *out, const struct mc_walrec *r);
/* Decode payload p[0..len) of a record of the given type into *r:
 * MC_OK; INVALID_VERSION for a newer version; NOT_SUPPORTED for an unknown
 * type; MALFORMED_JSON (the log's "malformed") for bytes that are not such a payload (mc_last_error
 * says which field). */
mc_status mc_walrec_decode(uint16_t type, const uint8_t *p, size_t len, struct mc_walrec *r);
/* The next name of a decoded list: *pos starts at l->raw; false at the end. */
bool mc_walrec_names_next(const struct mc_walrec_names *l, const uint8_t **pos,
			  struct mc_walrec_str *out);

#endif

/*
 * store/dummy_proto.h - the frames between a dummy client and its
 * mooncake_client daemon (docs/design.md, "Dummy clients").
 *
 * A frame is a store-protocol frame (store/proto.h: the 32-byte header,
 * request id echoed by the answer, the RESPONSE flag) whose type is one of
 * MC_DUMMY_MSG_* below, numbers the master never serves.  Every request
 * payload is one struct mc_dummy_req, of which each type puts only some
 * fields on the wire (the table in dummy_proto.c); every answer payload is
 * one struct mc_dummy_resp: a list of i64 results (one per key, or one for
 * the call), a text (HELLO: the daemon's segment name; an error: its
 * message) and a list of strings (what some calls answer beside numbers).  The status of the call
 * is the header's.
 *
 * Values never travel here: buffers are named by (region id, offset,
 * length) in the dummy's shared memory, which the daemon checks against
 * the regions it mapped.  The region of MAP_REGION arrives as a file
 * descriptor beside the frame (SCM_RIGHTS), not in it.
 *
 * Decoding is strict: a payload decodes completely or fails with
 * MC_ERR_PROTOCOL (mc_set_error names the cause); counts are checked
 * against the bytes left before anything is allocated; keys are 1 to
 * MC_STORE_KEY_MAX bytes.  Re-encoding a decoded payload gives the same
 * bytes (the fuzz target tests/fuzz/fuzz_dummy_proto.c checks it).
 *
 * Ownership: encoders borrow what they are given; decoders allocate the
 * lists and strings they fill, freed by the matching _release.  Reentrant.
 */
#ifndef MC_STORE_DUMMY_PROTO_H
#define MC_STORE_DUMMY_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "mooncake/status.h"
#include "store/proto.h"

enum mc_dummy_msg_type {
	MC_DUMMY_MSG_HELLO = 200,	 /* text: the dummy's version; a: its pid */
	MC_DUMMY_MSG_PING = 201,	 /* nothing */
	MC_DUMMY_MSG_MAP_REGION = 202,	 /* a: region id, b: length; one fd beside it */
	MC_DUMMY_MSG_UNMAP_REGION = 203, /* a: region id */
	MC_DUMMY_MSG_PUT = 204,		 /* flags (UPSERT), config, items with buffers */
	MC_DUMMY_MSG_GET = 205,		 /* items with buffers (capacities) */
	MC_DUMMY_MSG_EXIST = 206,	 /* items: keys only */
	MC_DUMMY_MSG_GET_SIZE = 207,	 /* items: one key */
	MC_DUMMY_MSG_REMOVE = 208,	 /* flags (FORCE), items: keys only */
	MC_DUMMY_MSG_REMOVE_REGEX = 209, /* flags (FORCE), text: the pattern */
	MC_DUMMY_MSG_REMOVE_ALL = 210,	 /* flags (FORCE) */
	/* sessions and ranges: nums are one object offset per buffer, in item order */
	MC_DUMMY_MSG_GET_SESSION_START = 211,  /* items: keys only */
	MC_DUMMY_MSG_GET_RANGES = 212,	       /* nums, items with buffers */
	MC_DUMMY_MSG_GET_SESSION_END = 213,    /* items: keys only */
	MC_DUMMY_MSG_PUT_SESSION_START = 214,  /* config, nums: sizes, items: keys */
	MC_DUMMY_MSG_PUT_RANGES = 215,	       /* nums, items with buffers */
	MC_DUMMY_MSG_PUT_SESSION_END = 216,    /* items: keys only */
	MC_DUMMY_MSG_PUT_SESSION_REVOKE = 217, /* items: keys only */
	/* get_into_ranges: a buffer per range (its destination), nums: its source offset */
	MC_DUMMY_MSG_GET_INTO_RANGES = 218,
	/* answers: results 4 per replica (status, type, size, address), strs 3 per
	 * replica (segment, endpoint, protocol) */
	MC_DUMMY_MSG_REPLICA_DESC = 219,  /* items: one key */
	MC_DUMMY_MSG_REPLICA_CLEAR = 220, /* text: segment name, items: keys */
	/* tasks: answers results (first, second) of the task id */
	MC_DUMMY_MSG_COPY_TASK = 221, /* strs: key, targets... */
	MC_DUMMY_MSG_MOVE_TASK = 222, /* strs: key, source, target */
	/* a, b: the id; answer: results type, status, created, updated, client
	 * (first, second); text: the message */
	MC_DUMMY_MSG_QUERY_TASK = 223,
	/* segments: a grace period in ms, or a size; an id answered in text */
	MC_DUMMY_MSG_UNMOUNT_SEGMENT = 224, /* text: id; a: grace ms */
	MC_DUMMY_MSG_MOUNT_SEGMENT = 225,   /* strs: path, protocol, location; a, b: size, offset */
	MC_DUMMY_MSG_ALLOC_MOUNT_SEGMENT = 226,	 /* strs: protocol, location; a: size */
	MC_DUMMY_MSG_UNMOUNT_FREE_SEGMENT = 227, /* text: id; a: grace ms */
	MC_DUMMY_MSG_UNMOUNT_LOCAL_DISK = 228,	 /* a: grace ms */
};
#define MC_DUMMY_MSG_FIRST MC_DUMMY_MSG_HELLO
#define MC_DUMMY_MSG_LAST  MC_DUMMY_MSG_UNMOUNT_LOCAL_DISK

#define MC_DUMMY_F_UPSERT  0x1u
#define MC_DUMMY_F_FORCE   0x1u

/* Largest payload either side sends or accepts. */
#define MC_DUMMY_MAX_PAYLOAD (16u << 20)

/* One buffer of a key: bytes [offset, offset+len) of region `region`. */
struct mc_dummy_buf {
	uint64_t region;
	uint64_t offset;
	uint64_t len;
};

struct mc_dummy_item {
	struct mc_proto_str key;
	uint32_t nbufs;
	struct mc_dummy_buf *bufs;
};

/* struct mc_store_config on the wire (group ids: one for all, or one per key). */
struct mc_dummy_config {
	uint32_t replica_num;
	bool with_soft_pin;
	uint64_t soft_pin_ttl_ms;
	bool with_hard_pin;
	bool prefer_alloc_in_same_node;
	struct mc_proto_str preferred_segment;
	uint32_t n_preferred_segments;
	struct mc_proto_str *preferred_segments;
	struct mc_proto_str group_id;
	uint32_t n_group_ids;
	struct mc_proto_str *group_ids;
};

struct mc_dummy_req {
	uint16_t type; /* enum mc_dummy_msg_type; not part of the payload */
	uint8_t flags;
	uint64_t a, b;
	struct mc_proto_str text;
	struct mc_dummy_config config;
	uint32_t n_strs; /* strings that may be empty */
	struct mc_proto_str *strs;
	uint32_t n_nums;
	uint64_t *nums;
	uint32_t n_items;
	struct mc_dummy_item *items;
};

struct mc_dummy_resp {
	uint32_t n_results;
	int64_t *results;
	struct mc_proto_str text;
	uint32_t n_strs;
	struct mc_proto_str *strs;
};

/* Is type a dummy request type? */
bool mc_dummy_msg_known(uint16_t type);
const char *mc_dummy_msg_name(uint16_t type);

/* Append a request frame (header and payload).  MC_ERR_INVALID_KEY for a
 * bad key, MC_ERR_TOO_LARGE past MC_DUMMY_MAX_PAYLOAD; b is left as it was
 * on failure. */
mc_status mc_dummy_req_encode(struct mc_buf *b, uint64_t req_id, const struct mc_dummy_req *req);
/* Decode a request payload of the given type into *out (zeroed first). */
mc_status mc_dummy_req_decode(uint16_t type, const void *payload, size_t len,
			      struct mc_dummy_req *out);
void mc_dummy_req_release(struct mc_dummy_req *req);

/* Append an answer frame to request (type, req_id) with status. */
mc_status mc_dummy_resp_encode(struct mc_buf *b, uint16_t type, uint64_t req_id, mc_status status,
			       const struct mc_dummy_resp *resp);
mc_status mc_dummy_resp_decode(const void *payload, size_t len, struct mc_dummy_resp *out);
void mc_dummy_resp_release(struct mc_dummy_resp *resp);

#endif

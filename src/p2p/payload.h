/*
 * p2p/payload.h - the P2P store's catalog entry: one JSON value per object
 * under "mooncake/checkpoint/<name>" in etcd (spec components.md 3.3).
 *
 *   {"name": str, "size": u64, "size_list": [u64...], "max_shard_size": u64,
 *    "shards": [{"size": u64, "gold": [Loc...]|null,
 *                "replica_list": [Loc...]|null}, ...]}
 *   Loc = {"segment_name": "host:port", "offset": u64}
 *
 * Fields in that order, an empty list written as null, as upstream's Go
 * encoding/json does.  The value comes from etcd, written by any peer, so
 * decode validates everything: types, unknown fields ignored as Go does,
 * sizes that add up, shards that are exactly the split of size_list by
 * max_shard_size, bounded counts and names.
 */
#ifndef MC_P2P_PAYLOAD_H
#define MC_P2P_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#define MC_P2P_NAME_MAX	   1024 /* bytes of an object name */
#define MC_P2P_SEGMENT_MAX 256	/* bytes of a segment name */
#define MC_P2P_BUFFERS_MAX 4096 /* entries of size_list */
#define MC_P2P_SHARDS_MAX  (1u << 20)
#define MC_P2P_LOCS_MAX	   1024 /* locations of one kind in one shard */

struct mc_p2p_loc {
	char *segment_name;
	uint64_t offset;
};

struct mc_p2p_locs {
	struct mc_p2p_loc *v;
	size_t n;
};

struct mc_p2p_shard {
	uint64_t size;
	struct mc_p2p_locs gold;
	struct mc_p2p_locs replicas;
};

struct mc_p2p_payload {
	char *name;
	uint64_t size;
	uint64_t *size_list;
	size_t nsizes;
	uint64_t max_shard_size;
	struct mc_p2p_shard *shards;
	size_t nshards;
};

/* Number of shards size_list splits into; 0 when a count overflows or
 * passes MC_P2P_SHARDS_MAX. */
size_t mc_p2p_shard_count(const uint64_t *size_list, size_t n, uint64_t max_shard_size);

/* Build the shards (no locations) of p->size_list split by p->max_shard_size. */
mc_status mc_p2p_payload_split(struct mc_p2p_payload *p);

/* Parse and validate len bytes; on success *out owns everything.  On error
 * (MC_ERR_MALFORMED_JSON, MC_ERR_NOMEM) *out is left released and the
 * message says what is wrong. */
mc_status mc_p2p_payload_decode(const char *json, size_t len, struct mc_p2p_payload *out);
/* Compact JSON in upstream's field order (malloc'ed, NUL-terminated). */
mc_status mc_p2p_payload_encode(const struct mc_p2p_payload *p, char **json_out, size_t *len_out);
void mc_p2p_payload_release(struct mc_p2p_payload *p);

/* Append a location unless the same one is already there (changes are
 * repeated after a lost etcd answer, so they must be idempotent). */
mc_status mc_p2p_locs_add(struct mc_p2p_locs *l, const char *segment_name, uint64_t offset);
/* Remove every location of segment_name; returns how many went. */
size_t mc_p2p_locs_remove(struct mc_p2p_locs *l, const char *segment_name);
void mc_p2p_locs_clear(struct mc_p2p_locs *l);
/* True when some shard still has a location of either kind. */
bool mc_p2p_payload_held(const struct mc_p2p_payload *p);

#endif

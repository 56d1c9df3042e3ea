/*
 * conductor/request.h - the bodies of mooncake_conductor's API calls
 * (service.h, docs/conductor.md "The daemon"), decoded from untrusted
 * bytes into structs the service uses as they are.
 *
 * Every decoder validates everything (types, ranges, unknown fields) and
 * returns MC_OK, MC_ERR_MALFORMED_JSON (not JSON, not an object, empty),
 * MC_ERR_INVALID_PARAMS (a field missing, of the wrong type, out of range
 * or unknown), MC_ERR_TOO_LARGE (/schedule: more blocks than max_keys) or
 * MC_ERR_NOMEM, with the cause in mc_last_error naming the field.  On
 * failure nothing is left to release.  tests/fuzz/fuzz_conductor_req.c
 * runs all three on arbitrary bytes.
 */
#ifndef MC_CONDUCTOR_REQUEST_H
#define MC_CONDUCTOR_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conductor/answer.h"
#include "mooncake/status.h"
#include "store/proto.h"

#define MC_CONDUCTOR_ID_MAX	    128
#define MC_CONDUCTOR_REQUEST_ID_MAX 256 /* bytes of a string request_id */

/* POST /schedule */
struct mc_conductor_sched_req {
	struct mc_proto_str *keys; /* n store keys, into text or the JSON */
	size_t n;
	uint32_t block_size;
	uint32_t input_len;
	bool hashed;  /* from "tokens": the service echoes the keys */
	double now_s; /* "now_s", the call's time in the client's clock
		       * (a --virtual_clock conductor); -1 when absent */
	/* "request_id", echoed: a string (rid_str, rid_len bytes, borrowed
	 * from root), an integer (rid_int), or absent */
	enum mc_conductor_rid_kind rid_kind;
	const char *rid_str;
	size_t rid_len;
	int64_t rid_int;
	void *root; /* the parsed body (json_t *), owned */
	char *text; /* formatted integer keys, owned */
};

struct mc_conductor_sched_opts {
	const char *key_prefix; /* integer key k is key_prefix + "%016x" of k */
	uint32_t default_block; /* block_size when the body has none */
	size_t max_keys;
};

mc_status mc_conductor_sched_req_decode(const void *body, size_t len,
					const struct mc_conductor_sched_opts *opts,
					struct mc_conductor_sched_req *out);
void mc_conductor_sched_req_release(struct mc_conductor_sched_req *r);

/* POST /instances */
struct mc_conductor_inst_req {
	char id[MC_CONDUCTOR_ID_MAX + 1]; /* [A-Za-z0-9._:-], 1-128 */
	bool decode;			  /* role "decode" (else "prefill") */
	char *segment;			  /* owned; "" only for a decode instance */
	double bandwidth_Bps;		  /* >= 0; 0: the cost model's */
	double capacity_blocks;		  /* >= 0 */
};

mc_status mc_conductor_inst_req_decode(const void *body, size_t len,
				       struct mc_conductor_inst_req *out);
void mc_conductor_inst_req_release(struct mc_conductor_inst_req *r);

/* POST /instances/<id>/load: each field -1 when absent, else >= 0 */
struct mc_conductor_load_req {
	double queue_s, queue_tokens, running_requests, ctx_tokens;
	double now_s; /* as in mc_conductor_sched_req */
};

mc_status mc_conductor_load_req_decode(const void *body, size_t len,
				       struct mc_conductor_load_req *out);

/* Whether s is a valid instance id (also for the ids in URLs). */
bool mc_conductor_id_valid(const char *s, size_t len);

#endif

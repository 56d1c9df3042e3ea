/*
 * tests/fuzz/fuzz_conductor_req.c - the decoders of mooncake_conductor's
 * request bodies (conductor/request.h) on arbitrary bytes.
 *
 * Every input goes through all three decoders (/schedule, /instances,
 * /instances/<id>/load).  None may crash or leak; a refusal must leave
 * nothing to release; what one accepts must keep its promises: /schedule
 * keys non-empty, within max_keys and covered by input_length, a hashed
 * request's keys formatted as prefix + 16 hex digits; an instance's id
 * valid and a prefill instance's segment non-empty; load fields and now_s
 * -1 or >= 0.
 * And the answer (conductor/answer.h) written with what /schedule accepted
 * -- its keys echoed, its request_id, a segment name from /instances --
 * must parse back as JSON.
 */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "base/buf.h"
#include "conductor/answer.h"
#include "conductor/chain_hash.h"
#include "conductor/request.h"
#include "fuzz.h"

/* The answer to s, with a prefill instance of this segment, is JSON. */
static void answer_parses(const struct mc_conductor_sched_req *s, const char *segment)
{
	struct mc_sched_choice ch = {.prefill = 0,
				     .decode = -1,
				     .local_blocks = 1,
				     .prefix_blocks = (uint32_t)s->n,
				     .fetch_from = 0,
				     .fetch_blocks = (uint32_t)s->n - 1,
				     .ttft_s = (double)s->input_len / 3};
	struct mc_conductor_ref ref = {"p0", segment};
	uint32_t match = (uint32_t)s->n;
	struct mc_conductor_answer a = {.ch = &ch,
					.pre = &ref,
					.matches = &match,
					.n_pre = 1,
					.keys = s->keys,
					.n_keys = s->n,
					.echo_keys = true,
					.rid_kind = s->rid_kind,
					.rid_str = s->rid_str,
					.rid_len = s->rid_len,
					.rid_int = s->rid_int};
	struct mc_buf b;
	json_t *j;

	mc_buf_init(&b);
	mc_conductor_answer_encode(&a, &b);
	j = b.err == MC_OK ? json_loadb((const char *)b.data, b.len, 0, NULL) : NULL;
	check(j != NULL);
	json_decref(j);
	mc_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct mc_conductor_sched_opts opts = {
		.key_prefix = "kv_", .default_block = 512, .max_keys = 4096};
	struct mc_conductor_sched_req s;
	struct mc_conductor_inst_req in;
	struct mc_conductor_load_req l;

	if (mc_conductor_sched_req_decode(data, size, &opts, &s) == MC_OK) {
		check(s.n >= 1 && s.n <= opts.max_keys && s.block_size >= 1);
		check(s.n <= mc_chain_hash_blocks(s.input_len, s.block_size));
		for (size_t i = 0; i < s.n; i++) {
			check(s.keys[i].len >= 1 && s.keys[i].len <= MC_STORE_KEY_MAX);
			if (s.hashed)
				check(s.keys[i].len == 19 && memcmp(s.keys[i].ptr, "kv_", 3) == 0);
		}
		check(s.rid_kind != MC_CONDUCTOR_RID_STR ||
		      s.rid_len <= MC_CONDUCTOR_REQUEST_ID_MAX);
		check(s.now_s == -1 || s.now_s >= 0);
		answer_parses(&s, "seg");
		mc_conductor_sched_req_release(&s);
	} else {
		check(!s.keys && !s.text && !s.root);
	}
	if (mc_conductor_inst_req_decode(data, size, &in) == MC_OK) {
		check(mc_conductor_id_valid(in.id, strlen(in.id)));
		check(in.segment && (in.decode || in.segment[0]));
		check(in.bandwidth_Bps >= 0 && in.capacity_blocks >= 0);
		{
			struct mc_proto_str k = {"k", 1};
			struct mc_conductor_sched_req one = {.keys = &k, .n = 1, .input_len = 512};
			answer_parses(&one, in.segment);
		}
		mc_conductor_inst_req_release(&in);
	} else {
		check(!in.segment);
	}
	if (mc_conductor_load_req_decode(data, size, &l) == MC_OK)
		check(l.queue_s >= -1 && l.queue_tokens >= -1 && l.running_requests >= -1 &&
		      l.ctx_tokens >= -1 && (l.now_s == -1 || l.now_s >= 0));
	return 0;
}

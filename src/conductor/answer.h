/*
 * conductor/answer.h - the /schedule answer of mooncake_conductor
 * (docs/conductor.md, "The daemon"), encoded by hand into a buffer the
 * caller keeps between calls.
 *
 * The answer is the hot half of a /schedule: built with jansson (an
 * object and a malloc per reused block, reals printed with %.17g) it cost
 * more than the store lookup and Algorithm 1 together.  Here it is one
 * pass of appends into an mc_buf: the reused prefix is given as at most
 * two ranges of consecutive blocks (the chosen instance's own, then the
 * fetched ones) instead of one object per block, and times are printed to
 * the nanosecond by integer arithmetic.
 */
#ifndef MC_CONDUCTOR_ANSWER_H
#define MC_CONDUCTOR_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "conductor/sched.h"
#include "store/proto.h"

/* An instance as the answer names it. */
struct mc_conductor_ref {
	const char *id;	     /* [A-Za-z0-9._:-], NUL-terminated */
	const char *segment; /* any bytes but NUL (escaped), NUL-terminated */
};

/* "request_id" of the request, echoed. */
enum mc_conductor_rid_kind { MC_CONDUCTOR_RID_NONE, MC_CONDUCTOR_RID_STR, MC_CONDUCTOR_RID_INT };

struct mc_conductor_answer {
	const struct mc_sched_choice *ch;
	const struct mc_conductor_ref *pre; /* the prefill instances ch indexes */
	const uint32_t *matches;	    /* the prefix each of them holds */
	size_t n_pre;
	const struct mc_conductor_ref *decode; /* NULL: "decode": null */
	/* the request's store keys, echoed as "keys" when echo_keys */
	const struct mc_proto_str *keys;
	size_t n_keys;
	bool echo_keys;
	enum mc_conductor_rid_kind rid_kind;
	const char *rid_str; /* RID_STR: rid_len bytes of valid UTF-8 */
	size_t rid_len;
	int64_t rid_int;
	/* a rejection (429): error is the message, rejected "ttft" or "tbt" */
	const char *error;
	const char *rejected;
	double ttft_slo_s, tbt_slo_s;
};

/*
 * Append the answer a describes, one JSON object, to out (reset it first
 * to reuse it).  Out of memory is out->err, as for every mc_buf writer.
 */
void mc_conductor_answer_encode(const struct mc_conductor_answer *a, struct mc_buf *out);

/* JSON writers the encoder is made of, for the other answers of the
 * service: a string (quoted and escaped), a real (null when not finite). */
void mc_conductor_json_str(struct mc_buf *b, const char *s, size_t len);
void mc_conductor_json_real(struct mc_buf *b, double v);

#endif

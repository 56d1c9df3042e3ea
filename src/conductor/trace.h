/*
 * conductor/trace.h - the FAST'25 request traces (JSON Lines) as an array
 * of requests.
 *
 * One line of a trace is one request:
 *
 *   {"timestamp": 27482, "input_length": 6955, "output_length": 52,
 *    "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]}
 *
 * timestamp is the arrival in milliseconds from the start of the trace,
 * hash_ids the chained prefix keys of the prompt's 512-token blocks (two
 * requests share block i only when they share every block before it).
 * Blank lines are allowed; anything else that is not such an object is
 * malformed and reported with its 1-based line number.
 */
#ifndef MC_CONDUCTOR_TRACE_H
#define MC_CONDUCTOR_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

/* One request of a trace.  hash_ids points into the trace's own pool. */
struct mc_trace_req {
	int64_t timestamp_ms;
	uint32_t input_length;	/* prompt tokens */
	uint32_t output_length; /* generated tokens */
	uint32_t n_blocks;	/* entries of hash_ids */
	const uint64_t *hash_ids;
};

struct mc_trace {
	struct mc_trace_req *reqs; /* in file order */
	size_t n;
	size_t skipped;	       /* malformed lines skipped (MC_TRACE_SKIP_BAD) */
	size_t first_bad_line; /* 1-based line of the first skipped line, 0 if none */
	/* private: the pool every hash_ids points into, and growth state */
	uint64_t *pool;
	size_t pool_n, pool_cap, cap;
	size_t *offs; /* offset of each request's keys in pool, until finished */
};

/* Flags of the loaders. */
enum {
	MC_TRACE_SKIP_BAD = 1u << 0, /* skip (and count) malformed lines instead of failing */
};

/* The longest line the loaders accept (a 2M-token prompt has ~4k keys). */
#define MC_TRACE_MAX_LINE (16u << 20)

void mc_trace_init(struct mc_trace *t);
void mc_trace_release(struct mc_trace *t);

/*
 * Parse one line (len bytes, no NUL needed; a trailing '\n' or "\r\n" is
 * ignored) into out; the keys are written to a fresh mc_malloc'd array in
 * *ids_out (NULL when there are none), which the caller frees with
 * mc_free.  out->hash_ids is set to it.  Returns MC_OK, MC_ERR_MALFORMED_JSON
 * (not JSON, or not an object), MC_ERR_INVALID_PARAMS (a field missing, of
 * the wrong type or out of range) or MC_ERR_NOMEM, with the cause recorded
 * (mc_set_error).  A blank line returns MC_ERR_NOT_FOUND with no message.
 */
mc_status mc_trace_parse_line(const char *line, size_t len, struct mc_trace_req *out,
			      uint64_t **ids_out);

/*
 * Append the lines of buf (len bytes) to t; first_line is the number of
 * buf's first line in its file.  Without MC_TRACE_SKIP_BAD the first
 * malformed line fails the load with its status and a message "line N:
 * ..."; requests appended before it stay in t.  With it, malformed lines
 * are counted in t->skipped.  A last line without '\n' is parsed too.
 */
mc_status mc_trace_load_buffer(struct mc_trace *t, const char *buf, size_t len, size_t first_line,
			       unsigned flags);

/* Read the file at path line by line into t, as mc_trace_load_buffer does.
 * MC_ERR_FILE_OPEN_FAIL / MC_ERR_FILE_READ_FAIL when the file cannot be read. */
mc_status mc_trace_load_file(struct mc_trace *t, const char *path, unsigned flags);

#endif

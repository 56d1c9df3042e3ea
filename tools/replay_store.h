/*
 * tools/replay_store.h - mooncake_replay --store: the trace replayed
 * against the real store, scheduled by a running mooncake_conductor
 * (docs/conductor.md, "The store-backed replay").
 *
 * Each prefill node is a store client in this process with a real segment
 * of capacity_blocks x block_bytes, registered with the conductor under
 * that segment; every request is a POST /schedule, the chosen node reads
 * every reused block through the store (its own and the fetched ones,
 * checking each block's contents) and puts the blocks it computed with its
 * own segment preferred.  Times advance in virtual time: each node's queue
 * is reported to the conductor before it schedules (POST .../load), and
 * the answer's predictions (the cost model's, paper.md 5.4) book it.
 */
#ifndef MC_TOOLS_REPLAY_STORE_H
#define MC_TOOLS_REPLAY_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "conductor/replay.h"
#include "conductor/trace.h"

struct mc_replay_store_opts {
	const char *master;    /* host:port of a running master; NULL: start one */
	const char *metadata;  /* with master: its metadata URI (P2PHANDSHAKE if NULL) */
	const char *conductor; /* host:port of a running conductor; NULL: start one */
	const char *bin_dir;   /* where mooncake_master and mooncake_conductor are */
	uint64_t block_bytes;  /* bytes stored per 512-token block (scaled down) */
	uint64_t lease_ms;     /* the started master's read lease (0: 500 ms) */
};

/* What the store side did, beside the replay's usual result. */
struct mc_replay_store_stats {
	uint64_t schedule_calls, load_reports;
	uint64_t read_blocks, read_bytes; /* reused blocks read through the store */
	uint64_t read_short;		  /* requests whose read fell short of the answer */
	uint64_t fetched_read_blocks;	  /* of read_blocks, from another node's segment */
	uint64_t put_blocks, put_bytes;	  /* computed blocks stored */
	uint64_t put_exists, put_failed;  /* already stored elsewhere; refused */
	uint64_t copied_blocks;		  /* replicas added on the node that used them */
	uint64_t bad_contents;		  /* blocks read whose bytes were not theirs */
	uint64_t decode_read_blocks, decode_read_bytes; /* a request's KV read by its decode node */
	uint64_t decode_read_short;			/* requests whose decode read fell short */
	uint64_t conductor_restarts; /* a running conductor came back: nodes registered again */
	double schedule_wall_s, store_wall_s; /* wall time in /schedule, in reads and puts */
	char master[64], conductor[64];	      /* the addresses used */
};

/*
 * Replay t (every request, in timestamp order, ties in file order) with
 * cfg's nodes, capacity, policy, threshold and rejection; starts what o
 * does not name and stops it again.  MC_OK with *out and *stats; else the
 * cause is in mc_last_error.
 */
mc_status mc_replay_store_run(const struct mc_replay_store_opts *o,
			      const struct mc_replay_config *cfg, const struct mc_trace *t,
			      const struct mc_replay_hooks *hooks, struct mc_replay_result *out,
			      struct mc_replay_store_stats *stats);

#endif

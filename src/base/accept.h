/*
 * base/accept.h - one way of accepting connections under pressure, shared
 * by every listening socket we own (engine data and RPC ports, the
 * same-host endpoint, the master's RPC port, the HTTP servers).
 *
 * accept() that fails for lack of resources (EMFILE, ENFILE, ENOBUFS,
 * ENOMEM) leaves the connection in the backlog, so a level-triggered
 * listener stays readable and a loop that simply tries again spins at
 * full CPU and writes a log line per try.  The rule here: on such a
 * failure the caller stops polling the listener for MC_ACCEPT_PAUSE_MS
 * and then tries again; the backlog waits, and service resumes by itself
 * when descriptors are freed.  The failure is logged at most once per
 * MC_ACCEPT_LOG_MS per listener, with the count of the ones not logged.
 *
 * Caps are per listener; mc_accept_cap_for_fds lowers one to its share of
 * the process's descriptor limit, so that the ports of one process cannot
 * starve each other of descriptors.
 *
 * A listener with a connection cap accepts what arrives above the cap
 * and closes it at once (the peer learns immediately, instead of sitting
 * in the backlog); those refusals are logged at the same rate.
 *
 * Frame deadlines (mc_frame_deadline_ms): a frame must complete within a
 * floor plus its size at a minimum rate, so a client that trickles bytes
 * cannot hold a buffer forever while a large frame on a slow link still
 * gets its time.
 *
 * Threads: a guard may be shared by several threads accepting on one
 * listener (the counters are atomics).
 */
#ifndef MC_BASE_ACCEPT_H
#define MC_BASE_ACCEPT_H

#include <stdatomic.h>
#include <stdint.h>

#define MC_ACCEPT_PAUSE_MS 200	/* listener not polled after a resource failure */
#define MC_ACCEPT_LOG_MS   1000 /* at most one line per this per listener and kind */

struct mc_accept_guard {
	const char *name;		  /* names the listener in log lines ("rpc", ...) */
	atomic_uint_fast64_t fail_log_ms; /* next time a failure may be logged */
	atomic_uint_fast64_t fail_quiet;  /* failures not logged since the last line */
	atomic_uint_fast64_t refuse_log_ms;
	atomic_uint_fast64_t refuse_quiet;
	atomic_uint_fast64_t refused; /* every refusal over the cap, for tests and metrics */
	atomic_uint_fast64_t paused;  /* every pause */
	atomic_uint_fast64_t refused_per_peer; /* refusals over a per-address cap */
};

enum mc_accept_next {
	MC_ACCEPT_AGAIN,   /* transient (EINTR, ECONNABORTED, ...): call accept again */
	MC_ACCEPT_DRAINED, /* EAGAIN: the backlog is empty, wait for the next event */
	MC_ACCEPT_PAUSE,   /* stop polling the listener for MC_ACCEPT_PAUSE_MS, then retry */
};

/* Prepare g; name is borrowed for g's life. */
void mc_accept_guard_init(struct mc_accept_guard *g, const char *name);

/* accept() failed with errno err: what to do next (a pause is logged, rate-limited). */
enum mc_accept_next mc_accept_failed(struct mc_accept_guard *g, int err, uint64_t now_ms);

/* A connection was refused because open connections reached cap (the
 * caller closes it): counted, logged rate-limited. */
void mc_accept_refused(struct mc_accept_guard *g, uint64_t open, uint64_t cap, uint64_t now_ms);

/* The same for a per-address cap: open connections from peer (its address
 * as text) reached cap.  Logged at the same rate as mc_accept_refused,
 * counted apart. */
void mc_accept_refused_per_peer(struct mc_accept_guard *g, const char *peer, uint64_t open,
				uint64_t cap, uint64_t now_ms);

/*
 * cap, lowered to percent of this process's descriptor limit
 * (RLIMIT_NOFILE, at least 8): the listeners of one process share that
 * limit, so one port's connections must not be able to take every
 * descriptor from the others.  Logged at info when it lowers cap.
 */
uint64_t mc_accept_cap_for_fds(const char *name, uint64_t cap, unsigned percent);

/* The absolute deadline of a frame of size bytes begun at start_ms:
 * floor_ms + size / min_rate (bytes per second; 0 = the floor alone). */
static inline uint64_t mc_frame_deadline_ms(uint64_t start_ms, uint64_t size, uint64_t floor_ms,
					    uint64_t min_rate)
{
	return start_ms + floor_ms + (min_rate ? size * 1000u / min_rate : 0);
}

#endif

/*
 * base/accept.c - accept-failure back-off and refusal logging (see
 * accept.h for the contract).
 *
 * Rate limiting is a compare-and-swap on "the next time a line may be
 * written": the thread that wins writes the line and folds in the count
 * of events that lost since, so several workers accepting on one
 * listener write one line per interval between them.
 */
#define MC_LOG_MODULE "accept"
#include "base/accept.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>

#include "base/log.h"

void mc_accept_guard_init(struct mc_accept_guard *g, const char *name)
{
	g->name = name;
	atomic_init(&g->fail_log_ms, 0);
	atomic_init(&g->fail_quiet, 0);
	atomic_init(&g->refuse_log_ms, 0);
	atomic_init(&g->refuse_quiet, 0);
	atomic_init(&g->refused, 0);
	atomic_init(&g->paused, 0);
	atomic_init(&g->refused_per_peer, 0);
}

/* Whether this event may be logged now; *quiet_out: how many were not since the last line. */
static bool may_log(atomic_uint_fast64_t *next_ms, atomic_uint_fast64_t *quiet, uint64_t now_ms,
		    uint64_t *quiet_out)
{
	uint_fast64_t next = atomic_load_explicit(next_ms, memory_order_relaxed);

	if (now_ms < next ||
	    !atomic_compare_exchange_strong(next_ms, &next, now_ms + MC_ACCEPT_LOG_MS)) {
		atomic_fetch_add_explicit(quiet, 1, memory_order_relaxed);
		return false;
	}
	*quiet_out = atomic_exchange_explicit(quiet, 0, memory_order_relaxed);
	return true;
}

enum mc_accept_next mc_accept_failed(struct mc_accept_guard *g, int err, uint64_t now_ms)
{
	uint64_t quiet;

	switch (err) {
	case EINTR:
	case ECONNABORTED:
	case EPROTO:
	case EPERM: /* a firewall rule refused this one; the next may pass */
		return MC_ACCEPT_AGAIN;
	case EAGAIN:
#if EWOULDBLOCK != EAGAIN
	case EWOULDBLOCK:
#endif
		return MC_ACCEPT_DRAINED;
	default:
		break;
	}
	/* EMFILE, ENFILE, ENOBUFS, ENOMEM and anything unexpected: retrying
	 * at once cannot succeed and would spin on the readable listener */
	atomic_fetch_add_explicit(&g->paused, 1, memory_order_relaxed);
	if (may_log(&g->fail_log_ms, &g->fail_quiet, now_ms, &quiet))
		mc_warn("%s: accept: %s; not accepting for %d ms (%llu more such failures since "
			"the last report)",
			g->name, strerror(err), MC_ACCEPT_PAUSE_MS, (unsigned long long)quiet);
	return MC_ACCEPT_PAUSE;
}

uint64_t mc_accept_cap_for_fds(const char *name, uint64_t cap, unsigned percent)
{
	struct rlimit rl;
	uint64_t share;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return cap;
	share = (uint64_t)rl.rlim_cur * percent / 100;
	if (share < 8)
		share = 8;
	if (share >= cap)
		return cap;
	mc_info("%s: at most %llu connections (%u%% of the descriptor limit %llu), not %llu", name,
		(unsigned long long)share, percent, (unsigned long long)rl.rlim_cur,
		(unsigned long long)cap);
	return share;
}

void mc_accept_refused(struct mc_accept_guard *g, uint64_t open, uint64_t cap, uint64_t now_ms)
{
	uint64_t quiet;

	atomic_fetch_add_explicit(&g->refused, 1, memory_order_relaxed);
	if (may_log(&g->refuse_log_ms, &g->refuse_quiet, now_ms, &quiet))
		mc_warn("%s: refusing a connection: %llu open, the cap is %llu (%llu more refused "
			"since the last report)",
			g->name, (unsigned long long)open, (unsigned long long)cap,
			(unsigned long long)quiet);
}

void mc_accept_refused_per_peer(struct mc_accept_guard *g, const char *peer, uint64_t open,
				uint64_t cap, uint64_t now_ms)
{
	uint64_t quiet;

	atomic_fetch_add_explicit(&g->refused_per_peer, 1, memory_order_relaxed);
	if (may_log(&g->refuse_log_ms, &g->refuse_quiet, now_ms, &quiet))
		mc_warn("%s: refusing a connection from %s: %llu open from that address, the "
			"per-address cap is %llu (%llu more refused since the last report)",
			g->name, peer, (unsigned long long)open, (unsigned long long)cap,
			(unsigned long long)quiet);
}

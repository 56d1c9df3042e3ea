/*
 * base/loop.h - a small epoll event loop, after Valkey's ae (epoll only).
 *
 * One thread runs mc_loop_run; it watches file descriptors (struct
 * mc_loop_fd, embedded in the object that owns the fd, so watching
 * allocates nothing), runs timers (struct mc_loop_timer, embedded too)
 * and returns when another thread calls mc_loop_stop.  mc_loop_wake
 * interrupts a sleeping loop from any thread (an eventfd), so it runs its
 * timers and looks at its stop flag without waiting for the next event.
 *
 * Each round: wait in epoll_wait (level-triggered) until the earliest
 * timer is due, at most MC_LOOP_MAX_WAIT_MS; call the callback of every
 * ready fd; then call every timer that is due.  With busy polling on
 * (mc_loop_set_busy_poll), a round that found events makes the next
 * rounds poll without sleeping for that many microseconds, yielding the
 * CPU between empty polls: a reply's next request usually arrives within
 * microseconds, and waking a sleeping thread costs more than that.  When
 * the bursts of events come close together (a client whose calls are a
 * batch's transfer apart, 60-200 us), the loop polls for 1.5 times the
 * last gap instead, at most MC_LOOP_SPIN_STRETCH polls and
 * MC_LOOP_SPIN_STRETCH_MAX_US, so that the next burst finds it awake
 * (mc_loop_spin_window); further apart, or none before, it polls for the
 * base time only.
 *
 * Timers sit in a list, not a heap: our loops keep a handful of them.
 *
 * Turn statistics (mc_loop_set_turn_stats): a turn is the work of a round,
 * from epoll_wait's return to the last due timer, counted when it handed
 * out an event or ran a timer.  Its wall time is one more read of the
 * monotonic clock; its CPU time (the thread's CPU clock, a system call of
 * about 1 us on a VM) is read only when asked for.  A long turn whose CPU
 * time is short waited for a CPU; one whose CPU time is as long was work.
 *
 * Threads: everything but mc_loop_stop and mc_loop_wake must be called on
 * the loop's thread (or before it runs / after it returned).
 */
#ifndef MC_BASE_LOOP_H
#define MC_BASE_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "base/list.h"
#include "mooncake/status.h"

#define MC_LOOP_MAX_WAIT_MS 1000 /* longest sleep, timers or not */
#define MC_LOOP_MAX_EVENTS  256	 /* events taken per epoll_wait */
#define MC_LOOP_TIMER_STOP  (-1) /* a timer callback's "do not run again" */

struct mc_loop;
struct mc_loop_fd;
struct mc_loop_timer;

/* events: what epoll reported (EPOLLIN, EPOLLOUT, EPOLLRDHUP if asked for, EPOLLHUP, EPOLLERR). */
typedef void (*mc_loop_fd_cb)(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events);
/* Returns the milliseconds until the timer runs again, or MC_LOOP_TIMER_STOP. */
typedef int64_t (*mc_loop_timer_cb)(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms);

struct mc_loop_fd {
	int fd;
	uint32_t events; /* the interest now registered; 0 = not watched */
	mc_loop_fd_cb cb;
};

struct mc_loop_timer {
	uint64_t when_ms; /* next run (mc_now_ms clock) while armed */
	mc_loop_timer_cb cb;
	struct mc_list link; /* in the loop's timers while armed; self-linked otherwise */
};

/* Upper bounds (us) of the turn histograms' buckets; one more bucket above. */
#define MC_LOOP_TURN_NBOUNDS 8
extern const uint64_t mc_loop_turn_bounds_us[MC_LOOP_TURN_NBOUNDS];

struct mc_loop_turn_stats {
	uint64_t turns;	      /* turns timed (wall) */
	uint64_t wall_us_sum; /* their wall time */
	uint64_t wall_buckets[MC_LOOP_TURN_NBOUNDS + 1];
	uint64_t wall_us_max; /* longest since the last read that reset it */
	uint64_t cpu_turns;   /* turns whose CPU time was read (0 when not asked for) */
	uint64_t cpu_us_sum;
	uint64_t cpu_buckets[MC_LOOP_TURN_NBOUNDS + 1];
	uint64_t cpu_us_max;
};

/* A loop: MC_OK, or MC_ERR_SOCKET (epoll/eventfd failed) / MC_ERR_NOMEM. */
mc_status mc_loop_new(struct mc_loop **out);
/* Frees the loop (not running).  Watched fds are not closed.  NULL is a no-op. */
void mc_loop_free(struct mc_loop *l);

/* Microseconds to keep polling after a round with events (0 = off, the default). */
void mc_loop_set_busy_poll(struct mc_loop *l, uint64_t us);
/* The longest poll that bursts close together stretch it to: this many
 * base polls, and this many microseconds (a longer base poll stays as it is). */
#define MC_LOOP_SPIN_STRETCH	    4
#define MC_LOOP_SPIN_STRETCH_MAX_US 200
/* The poll after a burst of events gap_us after the last burst (UINT64_MAX:
 * none before) with a base poll of spin_us: 1.5 x gap_us within [spin_us,
 * cap] when the gap is within cap, else spin_us; cap is
 * min(MC_LOOP_SPIN_STRETCH x spin_us, MC_LOOP_SPIN_STRETCH_MAX_US), at least spin_us. */
uint64_t mc_loop_spin_window(uint64_t spin_us, uint64_t gap_us);
/* Time each turn (wall), and its CPU time too when cpu; before mc_loop_run. */
void mc_loop_set_turn_stats(struct mc_loop *l, bool on, bool cpu);
/* From any thread: the turn statistics so far; reset_max restarts both maxima. */
void mc_loop_turn_stats_read(struct mc_loop *l, struct mc_loop_turn_stats *out, bool reset_max);
/* How many polls found nothing while busy polling (tests, diagnostics). */
uint64_t mc_loop_spin_polls(const struct mc_loop *l);
/* The time (mc_now_ms) taken after the last wait: "now" for the callbacks. */
uint64_t mc_loop_now_ms(const struct mc_loop *l);

/* Prepare f for fd with callback cb; does not watch it yet. */
void mc_loop_fd_init(struct mc_loop_fd *f, int fd, mc_loop_fd_cb cb);
/* Watch f for events (EPOLLIN and/or EPOLLOUT, optionally EPOLLRDHUP; not 0).
 * MC_ERR_SOCKET with the cause recorded. */
mc_status mc_loop_add_fd(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events);
/* Change what f is watched for (a no-op when unchanged).  MC_ERR_SOCKET with the cause. */
mc_status mc_loop_set_events(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events);
/*
 * Stop watching f; an event of f's that this round has not handed out yet
 * is dropped, so a callback may free f, or another fd's owner, at once.
 * Call it before closing an fd whose owner is freed: closing alone leaves
 * it watched while a duplicate is open (a forked child holds one of each).
 */
void mc_loop_del_fd(struct mc_loop *l, struct mc_loop_fd *f);

/* Prepare t (not armed). */
void mc_loop_timer_init(struct mc_loop_timer *t, mc_loop_timer_cb cb);
/* (Re)arm t to run delay_ms from now; an armed t is moved, earlier or later. */
void mc_loop_timer_start(struct mc_loop *l, struct mc_loop_timer *t, uint64_t delay_ms);
/* Disarm t (a no-op when it is not armed); it may be started again. */
void mc_loop_timer_stop(struct mc_loop *l, struct mc_loop_timer *t);

/*
 * Run rounds until mc_loop_stop.  MC_OK when stopped; MC_ERR_SOCKET when
 * epoll_wait failed (cause recorded), the loop's state left as it was.
 */
mc_status mc_loop_run(struct mc_loop *l);
/* From any thread: make mc_loop_run return after its current round. */
void mc_loop_stop(struct mc_loop *l);
/* From any thread: end the loop's current sleep. */
void mc_loop_wake(struct mc_loop *l);

#endif

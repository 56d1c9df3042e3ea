/*
 * store/dummy_wait.h - when a dummy client sleeps and when it polls for
 * the daemon's answer (docs/design.md, "Dummy clients", the hop's cost).
 *
 * A forwarded call spends most of its time in the daemon (hundreds of
 * microseconds for a megabyte), and a dummy that sleeps through it pays a
 * cross-process wake-up of an idle virtual CPU when the answer comes.  So
 * the dummy predicts when the answer will come, per kind of request and
 * size class, sleeps until shortly before, and polls the socket without
 * sleeping for a window of MC_DUMMY_BUSY_POLL_US around the prediction;
 * past the window it sleeps until the answer wakes it, as it does with the
 * setting 0.  The prediction follows where answers were found: inside the
 * window it moves a quarter of the way to the arrival; an answer found
 * while still sleeping pulls it down by an eighth (the wake-up it paid
 * makes the measured time an over-estimate, so the time itself cannot
 * correct a prediction that is too late); one found after the window
 * raises it by at most a quarter plus the window, so one stall does not
 * push the window away for many calls.
 *
 * Pure arithmetic on times the caller measures: no clock, no lock (the
 * dummy's lock covers its struct mc_dummy_wait).
 */
#ifndef MC_STORE_DUMMY_WAIT_H
#define MC_STORE_DUMMY_WAIT_H

#include <stdint.h>

#define MC_DUMMY_WAIT_OPS     3	       /* transfers in, transfers out, everything else */
#define MC_DUMMY_WAIT_CLASSES 16       /* by the bytes a request moves, in powers of 4 */
#define MC_DUMMY_WAIT_MAX_US  1000000u /* no prediction past a second */

struct mc_dummy_wait {
	uint32_t window_us; /* MC_DUMMY_BUSY_POLL_US; 0: never poll */
	uint32_t pred_us[MC_DUMMY_WAIT_OPS][MC_DUMMY_WAIT_CLASSES]; /* 0: none yet */
};

/* Where the answer was found. */
enum mc_dummy_wait_phase {
	MC_DUMMY_WAIT_SLEEPING, /* before the window: the answer woke the dummy */
	MC_DUMMY_WAIT_POLLING,	/* inside the window */
	MC_DUMMY_WAIT_LATE,	/* after it (or with no prediction yet) */
};

/* One call's wait, in the caller's microseconds.  poll_from == poll_until:
 * no window (off, or no prediction yet): sleep until the answer. */
struct mc_dummy_wait_plan {
	uint32_t *slot; /* the prediction to learn into; NULL when off */
	uint64_t sent_us, poll_from_us, poll_until_us;
};

/* The size class of a request moving `bytes` (0 for none). */
unsigned mc_dummy_wait_class(uint64_t bytes);

/* The plan of a request of `type` (an MC_DUMMY_MSG_*) moving `bytes`,
 * sent at sent_us. */
void mc_dummy_wait_plan(struct mc_dummy_wait *w, uint16_t type, uint64_t bytes, uint64_t sent_us,
			struct mc_dummy_wait_plan *p);

/* The answer to p's request arrived (was first read) at arrived_us, found
 * in phase: update the prediction. */
void mc_dummy_wait_learn(const struct mc_dummy_wait *w, const struct mc_dummy_wait_plan *p,
			 uint64_t arrived_us, enum mc_dummy_wait_phase phase);

#endif

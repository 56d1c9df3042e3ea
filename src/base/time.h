/* base/time.h - clock helpers: monotonic, and the wall clock for what outlives a process. */
#ifndef MC_BASE_TIME_H
#define MC_BASE_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mc_now_us(void)
{
	return mc_now_ns() / 1000ull;
}

static inline uint64_t mc_now_ms(void)
{
	return mc_now_ns() / 1000000ull;
}

/* Wall-clock time, ms since the Unix epoch: for what must outlive the
 * process (a deadline in the master's log), never for intervals. */
static inline uint64_t mc_epoch_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

#endif

/* base/time.h - monotonic clock helpers. */
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

#endif

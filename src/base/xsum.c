/*
 * base/xsum.c - XXH3-64 for transfer checksums (base/xsum.h).
 */
#include "base/xsum.h"

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#define hash64 XXH3_64bits_dispatch
#else
#define hash64 XXH3_64bits
#endif

atomic_uint mc_xsum_test_flip;

uint64_t mc_xsum(const void *p, size_t len)
{
	return hash64(p, len);
}

uint64_t mc_xsum_sent(const void *p, size_t len)
{
	uint64_t h = hash64(p, len);
	unsigned left = atomic_load_explicit(&mc_xsum_test_flip, memory_order_relaxed);

	while (left && !atomic_compare_exchange_weak(&mc_xsum_test_flip, &left, left - 1))
		;
	return left ? h ^ 0x100 : h;
}

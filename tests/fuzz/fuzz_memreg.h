/*
 * tests/fuzz/fuzz_memreg.h - the bounds check a transport applies to an
 * incoming range, fuzzed the same way by fuzz_tcp_hdr.c and fuzz_shm_req.c:
 * a registry of two small heap regions stands in for the target's
 * registered memory, and every range the check accepts is then read and
 * written in full, so ASan flags any range it wrongly lets through.
 */
#ifndef MC_TESTS_FUZZ_MEMREG_H
#define MC_TESTS_FUZZ_MEMREG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/memreg.h"

/* The registry (made once per process); *r1 is its 4 KiB region. */
static inline struct mc_memreg *fuzz_regions(uint8_t **r1)
{
	static uint8_t *a, *b;
	static struct mc_memreg reg;
	static int ready;

	if (!ready) {
		a = malloc(4096);
		b = malloc(100);
		mc_memreg_init(&reg);
		mc_memreg_add(&reg, (uint64_t)(uintptr_t)a, 4096, "cpu:0", -1, true, false);
		mc_memreg_add(&reg, (uint64_t)(uintptr_t)b, 100, "cpu:0", -1, true, true);
		ready = 1;
	}
	*r1 = a;
	return &reg;
}

/* Look [addr, addr + len) up as a target does; if accepted, touch all of it. */
static inline void fuzz_touch(struct mc_memreg *reg, uint64_t addr, uint64_t len)
{
	struct mc_memreg_entry *e = mc_memreg_acquire(reg, addr, len, false, NULL);

	if (e) {
		uint8_t *p = (uint8_t *)(uintptr_t)addr;
		volatile uint8_t sum = 0;
		for (uint64_t i = 0; i < len; i++)
			sum ^= p[i];
		memset(p, (int)sum, (size_t)len);
		mc_memreg_put(reg, e);
	}
}

#endif

/*
 * tests/fuzz/fuzz.h - what every fuzz_<name>.c target shares: the
 * libFuzzer entry point it defines (replay.c calls it without libFuzzer)
 * and check(), the abort that turns a broken promise into a finding.
 */
#ifndef MC_TESTS_FUZZ_H
#define MC_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort unless cond: a crash is how a fuzzer reports. */
static inline void check(bool cond)
{
	if (!cond)
		abort();
}

#endif

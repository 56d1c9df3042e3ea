/* tests/support/support.h - helpers shared by the C tests. */
#ifndef MC_TEST_SUPPORT_H
#define MC_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

/* Deterministic pseudo-random bytes (xorshift) from seed. */
void mc_test_fill(void *buf, size_t len, uint64_t seed);
/* A TCP port that was free a moment ago on 127.0.0.1. */
uint16_t mc_test_free_port(void);
/* mc_alloc_fault_arm (fail the Nth allocation from now) is in base/alloc.h. */
#include "base/alloc.h"

struct mc_te;
/* An engine on 127.0.0.1 named name, with metadata uri; NULL (cause printed)
 * when it cannot be created. */
struct mc_te *mc_test_engine_new(const char *uri, const char *name);

#endif

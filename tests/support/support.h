/* tests/support/support.h - helpers shared by the C tests. */
#ifndef MC_TEST_SUPPORT_H
#define MC_TEST_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deterministic pseudo-random bytes (xorshift) from seed. */
void mc_test_fill(void *buf, size_t len, uint64_t seed);
/* A TCP port that was free a moment ago on 127.0.0.1. */
uint16_t mc_test_free_port(void);
/* mc_alloc_fault_arm (fail the Nth allocation from now) is in base/alloc.h. */
#include "base/alloc.h"

/* A fresh directory <base>/<prefix>-XXXXXX in dir (base is /tmp when it is
 * not a directory, e.g. no /dev/shm here); false when it cannot be made. */
bool mc_test_tmpdir(const char *base, const char *prefix, char *dir, size_t len);
/* Removes dir and everything under it: 0, or -1. */
int mc_test_rmtree(const char *dir);
/* XORs the byte at offset at of the file path with 0x5a, which damages a
 * checksummed file in place (a second flip mends it); false when that byte
 * cannot be read or written. */
bool mc_test_flip_byte(const char *path, uint64_t at);

struct mc_te;
/* An engine on 127.0.0.1 named name, with metadata uri; NULL (cause printed)
 * when it cannot be created. */
struct mc_te *mc_test_engine_new(const char *uri, const char *name);

/* An in-process mooncake_master on 127.0.0.1, every port chosen by the
 * system, with its embedded HTTP metadata server; addr gets
 * "127.0.0.1:<rpc port>" and meta its metadata URI.  tune, when not NULL,
 * adjusts the configuration first.  NULL (cause printed) on failure.
 * tests/support/master.c: link it with the master archive. */
struct mc_master_server;
struct mc_master_server_config;
struct mc_master_server *mc_test_master_start(void (*tune)(struct mc_master_server_config *c),
					      char *addr, size_t addr_len, char *meta,
					      size_t meta_len);

#endif

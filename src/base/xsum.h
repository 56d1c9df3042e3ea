/*
 * base/xsum.h - XXH3-64 of a byte range, for the Transfer Engine's optional
 * per-transfer checksums (docs/design.md, "Transfer checksums").
 *
 * The library's x86 dispatch is used where there is one (AVX2 or AVX-512
 * when the CPU has them), as store/client_verify.c does.
 *
 * Test hook: mc_xsum_test_flip counts sender-side sums still to be spoilt.
 * While it is above zero, each call of mc_xsum_sent() takes one off it and
 * returns its sum with one bit flipped, as if a byte had flipped between
 * the sender's hash and the receiver's; tests set it, nothing else does.
 * It is always compiled: one relaxed load per checksummed transfer.
 */
#ifndef MC_BASE_XSUM_H
#define MC_BASE_XSUM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

uint64_t mc_xsum(const void *p, size_t len);

extern atomic_uint mc_xsum_test_flip;

/* mc_xsum() of what a sender sends (the hook may spoil it). */
uint64_t mc_xsum_sent(const void *p, size_t len);

#endif

/*
 * tests/integration/node_util.h - helpers shared by the scriptable test
 * processes te_node.c and store_node.c (one reply line per command, size
 * parsing, the deterministic data both sides of a transfer regenerate).
 */
#ifndef MC_TESTS_NODE_UTIL_H
#define MC_TESTS_NODE_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Print one reply line and flush it: the driving test reads line by line. */
static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void reply(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* A decimal or 0x number with an optional k/m/g (binary) suffix. */
static inline bool parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return false;
	switch (*end) {
	case 'k':
	case 'K':
		mul = 1ull << 10;
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1ull << 20;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1ull << 30;
		end++;
		break;
	}
	if (*end || (mul > 1 && v > UINT64_MAX / mul))
		return false;
	*out = v * mul;
	return true;
}

/* xorshift bytes from seed: the same seed gives the same bytes anywhere. */
static inline void fill_bytes(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	for (; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

#endif

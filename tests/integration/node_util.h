/*
 * tests/integration/node_util.h - helpers shared by the scriptable test
 * processes te_node.c and store_node.c (option and startup helpers, the
 * command loop, one reply line per command, size parsing, the
 * deterministic data both sides of a transfer regenerate).
 */
#ifndef MC_TESTS_NODE_UTIL_H
#define MC_TESTS_NODE_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <mooncake/log.h>
#include <mooncake/status.h>

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

/*
 * Error replies are "ERR CODE <tag>message": tag is "0 " where every ERR
 * reply carries an elapsed time (store_node), "" otherwise (te_node).
 */

/* Split line into at most max words in argv; their count, or 0 after an
 * ERR reply (no words, or too many). */
static inline int split_args(char *line, char **argv, int max, const char *tag)
{
	int argc = 0;
	char *save = NULL;

	for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
		if (argc == max) {
			reply("ERR TOOLONG %smore than %d words", tag, max);
			return 0;
		}
		argv[argc++] = t;
	}
	if (argc == 0)
		reply("ERR BADCMD %sempty line", tag);
	return argc;
}

/* Hand stdin to run a line at a time until end of input, run returning
 * false (quit) or *stop (when given) set by a signal. */
static inline void command_loop(bool (*run)(char *line), ssize_t max_line, const char *tag,
				const volatile sig_atomic_t *stop)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	while (!(stop && *stop) && (n = getline(&line, &cap, stdin)) >= 0) {
		if (n > max_line) {
			reply("ERR TOOLONG %sline of %zd bytes (max %zd)", tag, n, max_line);
			continue;
		}
		if (!run(line))
			break;
	}
	free(line);
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

/* --flag's value arg as parse_u64 reads it, within [min, max]; false
 * after "prog: bad --flag 'arg'" on stderr. */
static inline bool opt_u64(const char *prog, const char *flag, const char *arg, uint64_t min,
			   uint64_t max, uint64_t *out)
{
	uint64_t v;

	if (!parse_u64(arg, &v) || v < min || v > max) {
		fprintf(stderr, "%s: bad --%s '%s'\n", prog, flag, arg);
		return false;
	}
	*out = v;
	return true;
}

/* --log-level; false after a message on stderr. */
static inline bool opt_log_level(const char *prog, const char *arg)
{
	int level = mc_log_level_parse(arg);

	if (level < 0) {
		fprintf(stderr, "%s: bad --log-level '%s'\n", prog, arg);
		return false;
	}
	mc_log_set_level(level);
	return true;
}

/* Startup failed in step what: say why on stderr and, for the driving
 * test, as "FAILED NAME message" on stdout. */
static inline void report_failed(const char *prog, const char *what, mc_status st)
{
	fprintf(stderr, "%s: %s: %s: %s\n", prog, what, mc_status_name(st), mc_last_error());
	printf("FAILED %s %s\n", mc_status_name(st), mc_last_error());
	fflush(stdout);
}

/*
 * xorshift bytes from seed: the same seed gives the same bytes anywhere.
 *
 * Not instrumented by TSan: it writes registered memory that the engine's
 * workers wrote or read before, ordered through the test driver and a
 * socket, which TSan cannot see (tests/tsan.supp).  Instrumented, every
 * 8-byte store of a 1 GiB fill is a suppressed race, each one a full
 * report-and-match in TSan's slow path: minutes per fill.
 */
__attribute__((no_sanitize("thread"))) static inline void fill_bytes(uint8_t *p, size_t len,
								     uint64_t seed)
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

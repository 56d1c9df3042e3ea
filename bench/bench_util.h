/*
 * bench/bench_util.h - helpers the benchmark programs share: fatal errors,
 * clocks, mapped buffers, medians and the metadata-case report line.
 *
 * Each bench is one .c file linked on its own, so, like
 * tests/integration/node_util.h, this is header-only; the including file
 * defines PROG (its name, for messages) first.  Only the public headers
 * are used here.
 */
#ifndef MC_BENCH_UTIL_H
#define MC_BENCH_UTIL_H

#ifndef PROG
#error "define PROG before including bench_util.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/log.h>
#include <mooncake/status.h>

#define MAX_RUNS 101 /* most --runs a bench keeps figures for */

/* "PROG: message" on stderr, exit status 1. */
static inline void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

/* A failed call: "PROG: what: text (NAME): last error", exit status 1. */
static inline void die_status(const char *what, mc_status st) __attribute__((noreturn));
static inline void die_status(const char *what, mc_status st)
{
	fprintf(stderr, "%s: %s: %s (%s): %s\n", PROG, what, mc_strerror(st), mc_status_name(st),
		mc_last_error());
	exit(EXIT_FAILURE);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* size bytes of private anonymous memory, or exit status 1. */
static inline void *buffer_map(uint64_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "%s: mmap %" PRIu64 " bytes: %s\n", PROG, size, strerror(errno));
		exit(EXIT_FAILURE);
	}
	return p;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of v[0..n), 0 < n <= MAX_RUNS; v is left as it was. */
static inline double median(const double *v, int n)
{
	double tmp[MAX_RUNS];

	memcpy(tmp, v, (size_t)n * sizeof(*v));
	qsort(tmp, (size_t)n, sizeof(*tmp), cmp_double);
	return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

/* CPU seconds (user + system) of process pid so far, or -1 (pid <= 0, or
 * /proc/pid/stat unreadable). */
static inline double proc_cpu_s(long pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')) ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* One run's figures of a metadata case: calls/s, keys/s, latency per call (us). */
struct meta_result {
	double ops, keys, p50, p99;
};

/* One line per metadata case, the medians of n runs, as text or JSON. */
static inline void report_meta(const char *name, size_t batch, const struct meta_result *rs, int n,
			       bool json)
{
	double v[4][MAX_RUNS];

	for (int i = 0; i < n; i++) {
		v[0][i] = rs[i].ops;
		v[1][i] = rs[i].keys;
		v[2][i] = rs[i].p50;
		v[3][i] = rs[i].p99;
	}
	if (json)
		printf("{\"case\":\"%s\",\"batch\":%zu,\"runs\":%d,\"ops_per_s\":%.0f,"
		       "\"keys_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
		       name, batch, n, median(v[0], n), median(v[1], n), median(v[2], n),
		       median(v[3], n));
	else
		printf("case=%s batch=%zu ops/s=%.0f keys/s=%.0f p50_us=%.1f p99_us=%.1f runs=%d\n",
		       name, batch, median(v[0], n), median(v[1], n), median(v[2], n),
		       median(v[3], n), n);
	fflush(stdout);
}

#endif

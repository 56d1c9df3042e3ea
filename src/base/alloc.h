/*
 * base/alloc.h - the project's allocator entry points.
 *
 * Every allocation goes through these so there is one place to inject
 * failures in tests: mc_alloc_fault_arm(n) makes the nth mc_malloc,
 * mc_calloc or mc_realloc from then on return NULL (mc_strdup, mc_strndup
 * and mc_asprintf allocate with mc_malloc).  The hook is always compiled
 * in; it costs one relaxed atomic load per call.  Nothing is counted.
 * mc_calloc checks the multiplication; a zero size allocates one byte.
 * mc_free(NULL) is a no-op.
 */
#ifndef MC_BASE_ALLOC_H
#define MC_BASE_ALLOC_H

#include <stddef.h>

void *mc_malloc(size_t size);
void *mc_calloc(size_t n, size_t size);
void *mc_realloc(void *ptr, size_t size);
/* size bytes at an address that is a multiple of align (a power of two,
 * at least sizeof(void *)); freed with mc_free.  For O_DIRECT I/O. */
void *mc_aligned_alloc(size_t align, size_t size);
void mc_free(void *ptr);
char *mc_strdup(const char *s);
char *mc_strndup(const char *s, size_t n);
/* malloc'ed printf; NULL on failure. */
char *mc_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Fail the nth allocation from now (1 = the next one); 0 disarms.  For tests. */
void mc_alloc_fault_arm(long nth);

#endif

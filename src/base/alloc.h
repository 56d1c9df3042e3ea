/*
 * base/alloc.h - the project's allocator entry points.
 *
 * Every allocation goes through these so memory can be counted for metrics
 * and failures injected in tests (MC_FAULT_ALLOC=N fails the Nth call when
 * the library is built with -Dfault_injection=true).  mc_calloc checks the
 * multiplication.  mc_free(NULL) is a no-op.
 */
#ifndef MC_BASE_ALLOC_H
#define MC_BASE_ALLOC_H

#include <stddef.h>

void *mc_malloc(size_t size);
void *mc_calloc(size_t n, size_t size);
void *mc_realloc(void *ptr, size_t size);
void mc_free(void *ptr);
char *mc_strdup(const char *s);
char *mc_strndup(const char *s, size_t n);
/* malloc'ed printf; NULL on failure. */
char *mc_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

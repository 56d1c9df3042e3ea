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

#include <stdbool.h>
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
/*
 * Freeing a large block a piece at a time.  Freeing a block of hundreds of
 * megabytes (a hash table that was just replaced by a bigger or smaller
 * one) makes the kernel release all its pages in the one free call (glibc
 * maps such blocks separately and unmaps them on free): about 0.1 s per
 * GiB, which a loop serving requests must not stop for.  Hand the block
 * to a struct mc_free_later instead and call mc_free_later_step with a
 * byte budget from the loop: each step gives the next pages of it back
 * (madvise MADV_DONTNEED on the block's whole pages; the block's bytes
 * read as zero afterwards, nothing else is touched), and the last one
 * frees it.  One block at a time: mc_free_later_start on a busy one frees
 * the block it held at once.  Zero-initialise the struct; NULL p is a
 * no-op.
 */
struct mc_free_later {
	char *p;
	size_t len;
	size_t done; /* bytes of p given back so far */
};
void mc_free_later_start(struct mc_free_later *f, void *p, size_t len);
/* Give back up to budget more bytes; true when nothing is left (freed). */
bool mc_free_later_step(struct mc_free_later *f, size_t budget);
/* Free what is left at once (shutdown). */
void mc_free_later_finish(struct mc_free_later *f);
/*
 * Ask for transparent huge pages under the whole 2 MiB pages of a large
 * block (a hash table of millions of slots): each access at random to a
 * table of hundreds of megabytes otherwise misses the TLB, and in a
 * virtual machine each miss is a two-level page walk.  A hint: where the
 * system has them off, or only on request (enabled=madvise) and none to
 * give, nothing changes.  Blocks under 4 MiB are left alone.
 */
void mc_alloc_hint_huge(void *p, size_t len);
/* Fail the nth allocation from now (1 = the next one); 0 disarms.  For tests. */
void mc_alloc_fault_arm(long nth);

#endif

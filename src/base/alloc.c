/*
 * base/alloc.c - thin wrappers over the C allocator.
 *
 * They exist so there is one place to hook failure injection: tests call
 * mc_alloc_fault_arm(n) to fail the nth allocation from then on.
 */
#include "base/alloc.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static atomic_long fault_countdown; /* 0 = disabled; N = fail the Nth call from now */

void mc_alloc_fault_arm(long nth)
{
	atomic_store(&fault_countdown, nth);
}

static int should_fail(void)
{
	long v = atomic_load_explicit(&fault_countdown, memory_order_relaxed);
	if (v <= 0)
		return 0;
	return atomic_fetch_sub(&fault_countdown, 1) == 1;
}

void *mc_malloc(size_t size)
{
	if (should_fail())
		return NULL;
	return malloc(size ? size : 1);
}

void *mc_calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		return NULL;
	if (should_fail())
		return NULL;
	return calloc(n ? n : 1, size ? size : 1);
}

void *mc_realloc(void *ptr, size_t size)
{
	if (should_fail())
		return NULL;
	return realloc(ptr, size ? size : 1);
}

void *mc_aligned_alloc(size_t align, size_t size)
{
	void *p = NULL;
	if (should_fail())
		return NULL;
	if (posix_memalign(&p, align, size ? size : 1) != 0)
		return NULL;
	return p;
}

void mc_free(void *ptr)
{
	free(ptr);
}

char *mc_strndup(const char *s, size_t n)
{
	char *d;
	if (!s)
		return NULL;
	d = mc_malloc(n + 1);
	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

char *mc_strdup(const char *s)
{
	return s ? mc_strndup(s, strlen(s)) : NULL;
}

char *mc_asprintf(const char *fmt, ...)
{
	va_list ap;
	int n;
	char *buf;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	buf = mc_malloc((size_t)n + 1);
	if (!buf)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(buf, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return buf;
}

void mc_free_later_finish(struct mc_free_later *f)
{
	mc_free(f->p);
	f->p = NULL;
	f->len = f->done = 0;
}

void mc_alloc_hint_huge(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
	const uintptr_t huge = 2u << 20;
	uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1),
		  hi = ((uintptr_t)p + len) & ~(huge - 1);

	if (p && len >= 2 * huge && hi > lo)
		(void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
	(void)p;
	(void)len;
#endif
}

void mc_free_later_start(struct mc_free_later *f, void *p, size_t len)
{
	mc_free_later_finish(f);
	f->p = p;
	f->len = p ? len : 0;
}

bool mc_free_later_step(struct mc_free_later *f, size_t budget)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), first, lo, hi, end;

	if (!f->p)
		return true;
	if (budget > f->len - f->done)
		budget = f->len - f->done;
	/* the whole pages inside [p + done, p + done + budget): glibc's chunk
	 * header before p and whatever follows p + len stay untouched */
	first = ((uintptr_t)f->p + pg - 1) & ~(pg - 1);
	lo = ((uintptr_t)f->p + f->done) & ~(pg - 1); /* where the last step stopped */
	if (lo < first)
		lo = first;
	end = ((uintptr_t)f->p + f->len) & ~(pg - 1);
	hi = ((uintptr_t)f->p + f->done + budget) & ~(pg - 1);
	if (hi > end)
		hi = end;
	if (hi > lo)
		(void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
	f->done += budget;
	if (f->done < f->len)
		return false;
	mc_free_later_finish(f);
	return true;
}

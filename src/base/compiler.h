/* base/compiler.h - small compiler helpers shared by every module. */
#ifndef MC_BASE_COMPILER_H
#define MC_BASE_COMPILER_H

#include <stddef.h>

#define MC_API			    __attribute__((visibility("default")))

#define mc_likely(x)		    __builtin_expect(!!(x), 1)
#define mc_unlikely(x)		    __builtin_expect(!!(x), 0)
#define MC_UNUSED		    __attribute__((unused))
#define MC_PRINTF(a, b)		    __attribute__((format(printf, a, b)))
#define MC_ARRAY_SIZE(a)	    (sizeof(a) / sizeof((a)[0]))
#define MC_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define MC_CACHELINE		    64

#if defined(__x86_64__) || defined(__i386__)
#define mc_cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define mc_cpu_relax() __asm__ __volatile__("yield")
#else
#define mc_cpu_relax() ((void)0)
#endif

#define mc_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#define MC_MIN(a, b)			   ((a) < (b) ? (a) : (b))
#define MC_MAX(a, b)			   ((a) > (b) ? (a) : (b))

/* Always-on invariant check: a broken invariant is a bug, never peer input. */
void mc_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define mc_assert(expr) ((expr) ? (void)0 : mc_assert_fail(#expr, __FILE__, __LINE__))

#endif

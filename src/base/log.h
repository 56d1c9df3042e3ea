/*
 * base/log.h - level-checked logging macros.
 *
 * mc_error .. mc_trace test the runtime level before evaluating their
 * arguments; MC_LOG_MAX_LEVEL removes the finer levels at compile time.
 * Each .c file may #define MC_LOG_MODULE "name" before including this.
 * One line per event: ISO-8601 time, pid:tid, level letter, module, text.
 * The library is quiet by default (warn); MC_LOG_LEVEL overrides
 * (error|warn|info|debug|trace, or upstream's ERROR|WARNING|INFO|TRACE).
 */
#ifndef MC_BASE_LOG_H
#define MC_BASE_LOG_H

#include <stdatomic.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#ifndef MC_LOG_MODULE
#define MC_LOG_MODULE "mc"
#endif

#ifndef MC_LOG_MAX_LEVEL
#define MC_LOG_MAX_LEVEL MC_LOG_TRACE
#endif

extern atomic_int mc_log_level_current;

void mc_log_write(int level, const char *module, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

#define mc_log(level, ...)                                                                        \
	do {                                                                                      \
		if ((level) <= MC_LOG_MAX_LEVEL &&                                                \
		    (level) <= atomic_load_explicit(&mc_log_level_current, memory_order_relaxed)) \
			mc_log_write((level), MC_LOG_MODULE, __FILE__, __LINE__, __VA_ARGS__);    \
	} while (0)

#define mc_error(...) mc_log(MC_LOG_ERROR, __VA_ARGS__)
#define mc_warn(...)  mc_log(MC_LOG_WARN, __VA_ARGS__)
#define mc_info(...)  mc_log(MC_LOG_INFO, __VA_ARGS__)
#define mc_debug(...) mc_log(MC_LOG_DEBUG, __VA_ARGS__)
#define mc_trace(...) mc_log(MC_LOG_TRACE, __VA_ARGS__)

/* Apply MC_LOG_LEVEL, once per process (library entry points call it; it
 * also runs when the library is loaded). */
void mc_log_init_from_env(void);

/*
 * Record the calling thread's last error text (what mc_last_error() returns)
 * and log it at debug level.  Returns status so callers can write
 * "return mc_set_error(MC_ERR_X, "...")".
 */
mc_status mc_set_error(mc_status status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Put back a last-error text saved earlier with mc_last_error(), verbatim
 * (a caller that must run cleanup which may overwrite it). */
void mc_restore_error(const char *text);

#endif

/*
 * mooncake/log.h - controlling the library's log output.
 *
 * The library writes one line per event to stderr at level warn and above
 * unless told otherwise (MC_LOG_LEVEL, or mc_log_set_level).  An embedding
 * program may replace the sink; the handler is called from any thread and
 * must be thread-safe.
 */
#ifndef MOONCAKE_LOG_H
#define MOONCAKE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MC_API
#define MC_API __attribute__((visibility("default")))
#endif

enum mc_log_level {
	MC_LOG_FATAL = 0,
	MC_LOG_ERROR = 1,
	MC_LOG_WARN = 2,
	MC_LOG_INFO = 3,
	MC_LOG_DEBUG = 4,
	MC_LOG_TRACE = 5,
};

typedef void (*mc_log_handler_cb)(int level, const char *module, const char *line, void *arg);

MC_API void mc_log_set_level(int level);
MC_API int mc_log_get_level(void);
/* Parse "error", "warn", "WARNING", "info", "debug", "trace"; -1 if unknown. */
MC_API int mc_log_level_parse(const char *text);
/* NULL restores the default stderr sink. */
MC_API void mc_log_set_handler(mc_log_handler_cb handler, void *arg);
/* Text of the calling thread's last error recorded by the library ("" if none). */
MC_API const char *mc_last_error(void);

#ifdef __cplusplus
}
#endif
#endif

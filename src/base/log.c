/*
 * base/log.c - the log sink and the per-thread last-error text.
 *
 * Lines are formatted into a stack buffer and written with one write(2) so
 * lines from different threads never interleave.  The level lives in an
 * atomic so the macros can test it without locks; the handler pointer is
 * swapped under a mutex and read with an acquire load.
 */
#define MC_LOG_MODULE "log"
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/compiler.h"
#include "mooncake/status.h"

atomic_int mc_log_level_current = MC_LOG_WARN;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static _Atomic(mc_log_handler_cb) log_handler;
static void *_Atomic log_handler_arg;
static _Thread_local char last_error[512];

int mc_log_level_parse(const char *text)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {
		{"fatal", MC_LOG_FATAL},  {"error", MC_LOG_ERROR}, {"warn", MC_LOG_WARN},
		{"warning", MC_LOG_WARN}, {"info", MC_LOG_INFO},   {"debug", MC_LOG_DEBUG},
		{"trace", MC_LOG_TRACE},
	};
	if (!text)
		return -1;
	for (size_t i = 0; i < MC_ARRAY_SIZE(names); i++)
		if (strcasecmp(text, names[i].name) == 0)
			return names[i].level;
	return -1;
}

static void load_env_level(void)
{
	int lvl = mc_log_level_parse(getenv("MC_LOG_LEVEL"));
	if (lvl >= 0)
		atomic_store(&mc_log_level_current, lvl);
}

void mc_log_init_from_env(void)
{
	pthread_once(&env_once, load_env_level);
}

/*
 * Also at load time: a program that logs before calling any entry point
 * that runs the above (the master daemon's flag parser, a test) must see
 * MC_LOG_LEVEL too.  log.o is linked whenever anything can log.
 */
__attribute__((constructor)) static void log_load_env_at_start(void)
{
	mc_log_init_from_env();
}

void mc_log_set_level(int level)
{
	mc_log_init_from_env();
	if (level < MC_LOG_FATAL)
		level = MC_LOG_FATAL;
	if (level > MC_LOG_TRACE)
		level = MC_LOG_TRACE;
	atomic_store(&mc_log_level_current, level);
}

int mc_log_get_level(void)
{
	return atomic_load(&mc_log_level_current);
}

void mc_log_set_handler(mc_log_handler_cb handler, void *arg)
{
	atomic_store(&log_handler_arg, arg);
	atomic_store(&log_handler, handler);
}

const char *mc_last_error(void)
{
	return last_error;
}

void mc_log_write(int level, const char *module, const char *file, int line, const char *fmt, ...)
{
	static const char letters[] = "FEWIDT";
	char buf[2048];
	struct timespec ts;
	struct tm tm;
	size_t n;
	va_list ap;
	mc_log_handler_cb h;
	int r;

	(void)file;
	(void)line;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	r = snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ld %d:%ld %c [%s] ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		     ts.tv_nsec / 1000000, (int)getpid(), (long)syscall(SYS_gettid),
		     letters[level < 0	 ? 0
			     : level > 5 ? 5
					 : level],
		     module);
	n = r > 0 ? (size_t)r : 0;
	if (n >= sizeof(buf))
		n = sizeof(buf) - 1;
	va_start(ap, fmt);
	r = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	va_end(ap);
	if (r > 0)
		n += MC_MIN((size_t)r, sizeof(buf) - n - 2);
	buf[n++] = '\n';
	buf[n] = '\0';

	h = atomic_load(&log_handler);
	if (h) {
		buf[n - 1] = '\0';
		h(level, module, buf, atomic_load(&log_handler_arg));
		return;
	}
	if (write(STDERR_FILENO, buf, n) < 0) {
		/* nothing sensible left to do with a failed log write */
	}
}

mc_status mc_set_error(mc_status status, const char *fmt, ...)
{
	va_list ap;
	char msg[sizeof(last_error) - 48];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(last_error, sizeof(last_error), "%s (%s)", msg, mc_status_name((mc_status)status));
	mc_debug("%s", last_error);
	return status;
}

/* Put back a last-error text saved earlier (verbatim). */
void mc_restore_error(const char *text)
{
	snprintf(last_error, sizeof(last_error), "%s", text);
}

void mc_assert_fail(const char *expr, const char *file, int line)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "mooncake: assertion failed: %s at %s:%d\n", expr, file,
			 line);
	if (n > 0 && write(STDERR_FILENO, buf, MC_MIN((size_t)n, sizeof(buf) - 1)) < 0) {
		/* ignore */
	}
	abort();
}

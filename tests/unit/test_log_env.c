/*
 * MC_LOG_LEVEL takes effect before any library entry point runs (meson
 * starts this program with MC_LOG_LEVEL=error).  Regression: the level was
 * read only by mc_te_new and friends, so a program that logged first (the
 * master daemon) ignored it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/log.h"

int main(void)
{
	const char *env = getenv("MC_LOG_LEVEL");
	if (!env || strcmp(env, "error") != 0) {
		printf("1..0 # SKIP MC_LOG_LEVEL is not error\n");
		return 77;
	}
	printf("1..1\n");
	if (mc_log_get_level() != MC_LOG_ERROR) {
		printf("not ok 1 - level %d, want %d\n", mc_log_get_level(), MC_LOG_ERROR);
		return 1;
	}
	printf("ok 1 - MC_LOG_LEVEL read at start-up\n");
	return 0;
}

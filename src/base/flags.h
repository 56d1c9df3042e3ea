/*
 * base/flags.h - the command lines of programs whose options come from
 * base/config tables (mooncake_replay, mooncake_conductor, mooncake_client):
 * --name=value, --name value, or a bool --name alone, looked up in several
 * tables in turn, each filling its own struct.  '-' and '_' in names are
 * the same.
 */
#ifndef MC_BASE_FLAGS_H
#define MC_BASE_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/config.h"
#include "mooncake/status.h"

/* One table and the struct its entries write into. */
struct mc_flag_table {
	const struct mc_config_entry *tab;
	size_t n;
	void *obj;
	bool skip; /* look names up here but set nothing (a second pass) */
};

/*
 * Parse argv[1..argc) over tabs[0..ntabs), the first table whose entry has
 * the name winning.  MC_OK; MC_ERR_INVALID_PARAMS with the reason in
 * mc_last_error (an argument that is not a flag, an unknown flag, a missing
 * value, a value the entry refuses); MC_ERR_NOMEM.
 */
mc_status mc_flags_parse(const struct mc_flag_table *tabs, size_t ntabs, int argc, char **argv);

/* Print the help lines of every table, skipping a row that an earlier
 * table's row of the same name shadows. */
void mc_flags_print_help(const struct mc_flag_table *tabs, size_t ntabs, FILE *out);

#endif

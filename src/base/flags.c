/*
 * base/flags.c - argv over several config tables (flags.h).
 *
 * Some programs take the options of more than one component: the
 * conductor's take their own, the scheduler's (conductor/sched.h) and the
 * cost model's (conductor/costmodel.h).  Each stays one base/config table in its own file, and
 * this walks argv once, finding each name in the first table that has it
 * and letting the engine parse and bound the value, so every program reads
 * the same spellings and refuses the same mistakes.  It never prints; the
 * caller turns a failure into its usage message.
 */
#include "base/flags.h"

#include <string.h>

#include "base/log.h"

static const struct mc_flag_table *lookup(const struct mc_flag_table *tabs, size_t ntabs,
					  const char *name, const struct mc_config_entry **e_out)
{
	for (size_t t = 0; t < ntabs; t++) {
		const struct mc_config_entry *e =
			mc_config_entry_find(tabs[t].tab, tabs[t].n, name);
		if (e) {
			*e_out = e;
			return &tabs[t];
		}
	}
	return NULL;
}

mc_status mc_flags_parse(const struct mc_flag_table *tabs, size_t ntabs, int argc, char **argv)
{
	char name[64];

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *eq, *value;
		const struct mc_config_entry *e = NULL;
		const struct mc_flag_table *t;
		size_t len;
		mc_status st;

		if (strncmp(arg, "--", 2) != 0)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "unexpected argument '%s'", arg);
		arg += 2;
		eq = strchr(arg, '=');
		len = eq ? (size_t)(eq - arg) : strlen(arg);
		if (len >= sizeof(name))
			return mc_set_error(MC_ERR_INVALID_PARAMS, "unknown flag '--%.*s'",
					    (int)len, arg);
		for (size_t k = 0; k < len; k++)
			name[k] = arg[k] == '-' ? '_' : arg[k];
		name[len] = '\0';
		t = lookup(tabs, ntabs, name, &e);
		if (!t)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "unknown flag '--%s'", name);
		if (eq)
			value = eq + 1;
		else if (e->f.type == MC_CONFIG_BOOL)
			value = "true";
		else if (i + 1 < argc)
			value = argv[++i];
		else
			return mc_set_error(MC_ERR_INVALID_PARAMS, "flag '--%s' needs a value",
					    name);
		if (t->skip)
			continue;
		st = mc_config_entry_set(e, t->obj, value);
		if (st != MC_OK)
			return st;
	}
	return MC_OK;
}

void mc_flags_print_help(const struct mc_flag_table *tabs, size_t ntabs, FILE *out)
{
	for (size_t t = 0; t < ntabs; t++)
		for (size_t i = 0; i < tabs[t].n; i++) {
			const struct mc_config_entry *e = &tabs[t].tab[i], *prev;
			if (lookup(tabs, t, e->f.name, &prev))
				continue;
			mc_config_entry_print_help(e, 1, out);
		}
}

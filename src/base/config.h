/*
 * base/config.h - table-driven configuration.
 *
 * A component describes its options once, in an array of struct
 * mc_config_entry: a struct mc_config_field {name, env, default text, doc,
 * offset, type, bounds} and what some options need beyond it (flags, a
 * check callback, the units of a duration).  The same table fills
 * defaults, overlays environment variables (each field names the variable
 * it reads; upstream's MC_* names are kept), parses --name=value flags and
 * config files, prints help text and --dump-config values, and generates
 * docs/config.md.  Invalid values are rejected with a message naming the
 * option; for environment variables upstream's habit is kept: a bad value
 * is ignored with a warning and the default stays.
 *
 * There is one row shape and one set of functions (mc_config_entry_*).
 * Rows are written with designated initializers, {.f = {...}, .check =
 * ...}, so a member added to struct mc_config_entry leaves every table
 * valid; the field inside is positional, so new members go in the entry,
 * never in struct mc_config_field.
 */
#ifndef MC_BASE_CONFIG_H
#define MC_BASE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mooncake/status.h"

enum mc_config_type {
	MC_CONFIG_BOOL,	    /* "1/true/yes/on" or "0/false/no/off" */
	MC_CONFIG_PRESENCE, /* env: set at all means true (upstream's presence flags) */
	MC_CONFIG_INT,	    /* int64 within [min, max] */
	MC_CONFIG_SIZE,	    /* bytes, with optional k/m/g/t suffix (binary), within [min, max] */
	MC_CONFIG_STRING,   /* malloc'ed copy owned by the struct (mc_config_entry_release) */
	MC_CONFIG_DOUBLE,   /* double, finite, within [min, max] */
	MC_CONFIG_DURATION, /* uint64_t: digits with an optional ms/s/m/h unit, within [min, max]
			     * in the stored unit; see struct mc_config_entry for the units */
};

/* What an option is: every entry has one (as its member f). */
struct mc_config_field {
	const char *name; /* flag name: "tcp_slice_size" */
	const char *env;  /* environment variable, or NULL */
	const char *def;  /* default as text, or NULL (string: NULL pointer) */
	const char *doc;  /* one line of help */
	size_t offset;	  /* offsetof(struct, field) */
	enum mc_config_type type;
	int64_t min, max; /* bounds for INT, SIZE, DOUBLE and DURATION */
};

/* Offset of an entry that has no field: its value is checked, then dropped. */
#define MC_CONFIG_NO_FIELD SIZE_MAX

enum mc_config_entry_flags {
	MC_CONFIG_F_NO_EFFECT = 1u << 0,    /* accepted (parsed, checked), no effect here */
	MC_CONFIG_F_DEFAULT_ONLY = 1u << 1, /* any value but the default is refused */
	MC_CONFIG_F_DEPRECATED = 1u << 2,   /* still accepted; the help says so */
	MC_CONFIG_F_CMDLINE_ONLY = 1u << 3, /* the program's argv parser handles it:
					     * mc_config_entry_set refuses it, no default is set */
	MC_CONFIG_F_ENV_STRICT = 1u << 4,   /* a bad value of its variable is an error
					     * (mc_config_entry_load_env), not ignored */
};

/*
 * An extra check of a value that parsed as its type: return false and
 * write why (without the option's name, which the engine puts in front).
 */
typedef bool (*mc_config_check_cb)(const char *value, char *why, size_t why_len);

struct mc_config_entry {
	struct mc_config_field f; /* f.offset may be MC_CONFIG_NO_FIELD */
	unsigned flags;		  /* enum mc_config_entry_flags */
	mc_config_check_cb check; /* or NULL */
	/* MC_CONFIG_DURATION: the unit of a bare number and the unit stored, in
	 * milliseconds (0 means 1); a stored value is rounded up to its unit */
	uint32_t bare_unit_ms;
	uint32_t store_unit_ms;
};

/* Fill every field of obj with its default (CMDLINE_ONLY entries: none). */
void mc_config_entry_defaults(const struct mc_config_entry *tab, size_t n, void *obj);
/* Overlay the environment variables the entries name, through
 * mc_config_entry_set; a bad value is warned about and ignored, except in
 * an ENV_STRICT entry: then the load stops with that entry's error
 * (MC_ERR_INVALID_PARAMS naming the variable).  A PRESENCE entry is set to
 * true when its variable is set at all. */
mc_status mc_config_entry_load_env(const struct mc_config_entry *tab, size_t n, void *obj);
/* The entry called name, or NULL. */
const struct mc_config_entry *mc_config_entry_find(const struct mc_config_entry *tab, size_t n,
						   const char *name);
/* Set e from text: MC_OK (a NO_FIELD entry changes nothing), or
 * MC_ERR_INVALID_PARAMS with mc_last_error text naming e (bad value, out of
 * range, failed check, not the default of a DEFAULT_ONLY entry, CMDLINE_ONLY),
 * or MC_ERR_NOMEM. */
mc_status mc_config_entry_set(const struct mc_config_entry *e, void *obj, const char *value);
/* Free the strings owned by obj. */
void mc_config_entry_release(const struct mc_config_entry *tab, size_t n, void *obj);
/* Print "--name=<default>  doc [env X] (deprecated) (accepted, no effect...)" lines. */
void mc_config_entry_print_help(const struct mc_config_entry *tab, size_t n, FILE *out);
/* Write e's current value in obj as config-file text (durations with "ms"
 * or "s", strings quoted); nothing for a NO_FIELD entry. */
void mc_config_entry_print_value(const struct mc_config_entry *e, const void *obj, FILE *out);
/* The type's name in docs: "bool", "int", "duration (s)", ... */
const char *mc_config_type_name(enum mc_config_type type, uint32_t bare_unit_ms);

/* Parsers usable on their own; return true on success. */
bool mc_parse_bool(const char *text, bool *out);
bool mc_parse_int(const char *text, int64_t *out);
bool mc_parse_size(const char *text, uint64_t *out);
/* A finite number, nothing around it. */
bool mc_parse_double(const char *text, double *out);
/* Digits, then optionally blanks and ms, s, m or h; a bare number is in
 * bare_unit_ms.  The result is in milliseconds; false on syntax or overflow. */
bool mc_parse_duration_ms(const char *text, uint64_t bare_unit_ms, uint64_t *out);

#endif

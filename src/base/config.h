/*
 * base/config.h - table-driven configuration.
 *
 * A component describes its options once, in an array of struct
 * mc_config_field {name, default text, doc, offset, parser, bounds}.  The
 * same table fills defaults, overlays environment variables (each field
 * names the variable it reads; upstream's MC_* names are kept), parses
 * --name=value flags and prints help text.  Invalid values are rejected with
 * a message naming the option; for environment variables upstream's habit
 * is kept: a bad value is ignored with a warning and the default stays.
 */
#ifndef MC_BASE_CONFIG_H
#define MC_BASE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum mc_config_type {
	MC_CONFIG_BOOL,	    /* "1/true/yes/on" or "0/false/no/off" */
	MC_CONFIG_PRESENCE, /* env: set at all means true (upstream's presence flags) */
	MC_CONFIG_INT,	    /* int64 within [min, max] */
	MC_CONFIG_SIZE,	    /* bytes, with optional k/m/g/t suffix (binary), within [min, max] */
	MC_CONFIG_STRING,   /* malloc'ed copy; owned by the struct, freed by mc_config_release */
};

struct mc_config_field {
	const char *name; /* flag name: "tcp_slice_size" */
	const char *env;  /* environment variable, or NULL */
	const char *def;  /* default as text, or NULL (string: NULL pointer) */
	const char *doc;  /* one line of help */
	size_t offset;	  /* offsetof(struct, field) */
	enum mc_config_type type;
	int64_t min, max; /* bounds for INT and SIZE */
};

/* Fill every field of obj with its default. */
void mc_config_defaults(const struct mc_config_field *tab, size_t n, void *obj);
/* Overlay environment variables (bad values warned and ignored). */
void mc_config_load_env(const struct mc_config_field *tab, size_t n, void *obj);
/* Set one field by name from text; MC_ERR_NOT_FOUND for an unknown name,
 * MC_ERR_INVALID_PARAMS (with mc_last_error text) for a bad value. */
int mc_config_set(const struct mc_config_field *tab, size_t n, void *obj, const char *name,
		  const char *value);
/* Free the strings owned by obj. */
void mc_config_release(const struct mc_config_field *tab, size_t n, void *obj);
/* Print "--name=<default>  doc [env]" lines. */
void mc_config_print_help(const struct mc_config_field *tab, size_t n, FILE *out);

/* Parsers usable on their own; return true on success. */
bool mc_parse_bool(const char *text, bool *out);
bool mc_parse_int(const char *text, int64_t *out);
bool mc_parse_size(const char *text, uint64_t *out);

#endif

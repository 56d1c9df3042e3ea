/*
 * base/config.c - the configuration table engine (see config.h).
 *
 * Every value, a default, an environment variable, a flag or a config-file
 * key, goes through set_value: parse as the type (bounds included), the
 * entry's check, the default-only rule, then store (or drop, for an entry
 * without a field).
 * Error texts start with "option <name>:" so the caller can print them as
 * they are.
 */
#define MC_LOG_MODULE "config"
#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "mooncake/status.h"

bool mc_parse_bool(const char *text, bool *out)
{
	static const char *yes[] = {"1", "true", "yes", "on"};
	static const char *no[] = {"0", "false", "no", "off"};
	if (!text)
		return false;
	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(text, yes[i]) == 0) {
			*out = true;
			return true;
		}
		if (strcasecmp(text, no[i]) == 0) {
			*out = false;
			return true;
		}
	}
	return false;
}

bool mc_parse_int(const char *text, int64_t *out)
{
	char *end;
	long long v;
	if (!text || !*text)
		return false;
	errno = 0;
	v = strtoll(text, &end, 0);
	if (errno || end == text)
		return false;
	while (isspace((unsigned char)*end))
		end++;
	if (*end)
		return false;
	*out = v;
	return true;
}

bool mc_parse_size(const char *text, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;
	if (!text || !*text || *text == '-')
		return false;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || end == text)
		return false;
	while (isspace((unsigned char)*end))
		end++;
	switch (tolower((unsigned char)*end)) {
	case '\0':
		break;
	case 'k':
		mul = 1ull << 10;
		break;
	case 'm':
		mul = 1ull << 20;
		break;
	case 'g':
		mul = 1ull << 30;
		break;
	case 't':
		mul = 1ull << 40;
		break;
	default:
		return false;
	}
	if (*end) {
		end++;
		if (tolower((unsigned char)*end) == 'i')
			end++;
		if (tolower((unsigned char)*end) == 'b')
			end++;
		if (*end)
			return false;
	}
	if (v > UINT64_MAX / mul)
		return false;
	*out = v * mul;
	return true;
}

bool mc_parse_double(const char *text, double *out)
{
	char *end;
	double v;

	if (!text || !*text || isspace((unsigned char)*text))
		return false;
	errno = 0;
	v = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(v))
		return false;
	*out = v;
	return true;
}

bool mc_parse_duration_ms(const char *text, uint64_t bare_unit_ms, uint64_t *out)
{
	const char *p = text;
	uint64_t v = 0, unit = bare_unit_ms;

	if (!p)
		return false;
	while (isspace((unsigned char)*p))
		p++;
	if (!isdigit((unsigned char)*p))
		return false;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	while (isspace((unsigned char)*p))
		p++;
	if (*p) {
		if (strcmp(p, "ms") == 0)
			unit = 1;
		else if (strcmp(p, "s") == 0)
			unit = 1000;
		else if (strcmp(p, "m") == 0)
			unit = 60000;
		else if (strcmp(p, "h") == 0)
			unit = 3600000;
		else
			return false;
	}
	if (unit && v > UINT64_MAX / unit)
		return false;
	*out = v * unit;
	return true;
}

/* A parsed value, before it is stored. */
union value {
	bool b;
	int64_t i;
	uint64_t u;
	double d;
	const char *s;
};

static uint32_t unit_or_1(uint32_t unit_ms)
{
	return unit_ms ? unit_ms : 1;
}

/* Parse text as e's type into *v; MC_ERR_INVALID_PARAMS with the reason. */
static mc_status parse_value(const struct mc_config_entry *e, const char *value, union value *v)
{
	const struct mc_config_field *f = &e->f;

	switch (f->type) {
	case MC_CONFIG_BOOL:
	case MC_CONFIG_PRESENCE:
		if (!mc_parse_bool(value, &v->b))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not a boolean", f->name, value);
		return MC_OK;
	case MC_CONFIG_INT:
		if (!mc_parse_int(value, &v->i) || v->i < f->min || v->i > f->max)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not an integer in [%" PRId64
					    ", %" PRId64 "]",
					    f->name, value, f->min, f->max);
		return MC_OK;
	case MC_CONFIG_SIZE:
		if (!mc_parse_size(value, &v->u) || v->u < (uint64_t)f->min ||
		    v->u > (uint64_t)f->max)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not a size in [%" PRId64
					    ", %" PRId64 "]",
					    f->name, value, f->min, f->max);
		return MC_OK;
	case MC_CONFIG_DOUBLE:
		if (!mc_parse_double(value, &v->d) || v->d < (double)f->min ||
		    v->d > (double)f->max)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not a number in [%" PRId64
					    ", %" PRId64 "]",
					    f->name, value, f->min, f->max);
		return MC_OK;
	case MC_CONFIG_DURATION: {
		uint32_t bare = unit_or_1(e->bare_unit_ms);
		uint32_t store = unit_or_1(e->store_unit_ms);
		uint64_t ms;

		if (!mc_parse_duration_ms(value, bare, &ms))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not a duration (a number of %s, "
					    "or with ms/s/m/h)",
					    f->name, value, bare == 1 ? "milliseconds" : "seconds");
		v->u = ms / store + (ms % store != 0);
		if (v->u < (uint64_t)f->min || v->u > (uint64_t)f->max)
			return mc_set_error(
				MC_ERR_INVALID_PARAMS,
				"option %s: '%s' is out of range [%" PRId64 ", %" PRId64 "] %s",
				f->name, value, f->min, f->max, store == 1 ? "ms" : "s");
		return MC_OK;
	}
	case MC_CONFIG_STRING:
		v->s = value;
		return MC_OK;
	}
	return mc_set_error(MC_ERR_INTERNAL, "option %s: unknown type", f->name);
}

static bool values_equal(enum mc_config_type type, const union value *a, const union value *b)
{
	switch (type) {
	case MC_CONFIG_BOOL:
	case MC_CONFIG_PRESENCE:
		return a->b == b->b;
	case MC_CONFIG_INT:
		return a->i == b->i;
	case MC_CONFIG_SIZE:
	case MC_CONFIG_DURATION:
		return a->u == b->u;
	case MC_CONFIG_DOUBLE:
		return a->d == b->d;
	case MC_CONFIG_STRING:
		return strcmp(a->s ? a->s : "", b->s ? b->s : "") == 0;
	}
	return false;
}

static mc_status store_value(const struct mc_config_field *f, void *obj, const union value *v)
{
	char *p = (char *)obj + f->offset;

	switch (f->type) {
	case MC_CONFIG_BOOL:
	case MC_CONFIG_PRESENCE:
		*(bool *)p = v->b;
		return MC_OK;
	case MC_CONFIG_INT:
		*(int64_t *)p = v->i;
		return MC_OK;
	case MC_CONFIG_SIZE:
	case MC_CONFIG_DURATION:
		*(uint64_t *)p = v->u;
		return MC_OK;
	case MC_CONFIG_DOUBLE:
		memcpy(p, &v->d, sizeof(v->d)); /* p is a double field */
		return MC_OK;
	case MC_CONFIG_STRING: {
		char *s = v->s ? mc_strdup(v->s) : NULL;
		if (v->s && !s)
			return MC_ERR_NOMEM;
		mc_free(*(char **)p);
		*(char **)p = s;
		return MC_OK;
	}
	}
	return MC_ERR_INTERNAL;
}

/* Parse, check and store one value. */
static mc_status set_value(const struct mc_config_entry *e, void *obj, const char *value)
{
	const struct mc_config_field *f = &e->f;
	union value v;
	mc_status st;

	if (f->type != MC_CONFIG_STRING || value) {
		st = parse_value(e, value, &v);
		if (st != MC_OK)
			return st;
	} else {
		v.s = NULL;
	}
	if (e->check && value) {
		char why[256] = "";
		if (!e->check(value, why, sizeof(why)))
			return mc_set_error(MC_ERR_INVALID_PARAMS, "option %s: %s", f->name,
					    why[0] ? why : "bad value");
	}
	if (e->flags & MC_CONFIG_F_DEFAULT_ONLY) {
		union value d;
		if (parse_value(e, f->def, &d) != MC_OK)
			mc_assert(!"bad default in config table");
		if (!values_equal(f->type, &v, &d))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not supported in this build (only "
					    "the default, '%s')",
					    f->name, value, f->def ? f->def : "");
	}
	if (f->offset == MC_CONFIG_NO_FIELD)
		return MC_OK;
	return store_value(f, obj, &v);
}

static void clear_field(const struct mc_config_field *f, void *obj)
{
	char *p = (char *)obj + f->offset;

	switch (f->type) {
	case MC_CONFIG_BOOL:
	case MC_CONFIG_PRESENCE:
		*(bool *)p = false;
		break;
	case MC_CONFIG_INT:
		*(int64_t *)p = 0;
		break;
	case MC_CONFIG_SIZE:
	case MC_CONFIG_DURATION:
		*(uint64_t *)p = 0;
		break;
	case MC_CONFIG_DOUBLE:
		memset(p, 0, sizeof(double));
		break;
	case MC_CONFIG_STRING:
		*(char **)p = NULL;
		break;
	}
}

/* ---- tables ----------------------------------------------------------------- */

void mc_config_entry_defaults(const struct mc_config_entry *tab, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_entry *e = &tab[i];

		if ((e->flags & MC_CONFIG_F_CMDLINE_ONLY) || e->f.offset == MC_CONFIG_NO_FIELD)
			continue;
		clear_field(&e->f, obj);
		if (e->f.def && set_value(e, obj, e->f.def) != MC_OK)
			mc_assert(!"bad default in config table");
	}
}

mc_status mc_config_entry_load_env(const struct mc_config_entry *tab, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_entry *e = &tab[i];
		const char *v = e->f.env ? getenv(e->f.env) : NULL;
		const char *text;

		if (!v)
			continue;
		/* a presence flag is on when its variable is set at all */
		text = e->f.type == MC_CONFIG_PRESENCE ? "true" : v;
		if (mc_config_entry_set(e, obj, text) == MC_OK)
			continue;
		if (e->flags & MC_CONFIG_F_ENV_STRICT) {
			char why[256];

			snprintf(why, sizeof(why), "%s", mc_last_error());
			return mc_set_error(MC_ERR_INVALID_PARAMS, "%s='%s': %s", e->f.env, v, why);
		}
		mc_warn("ignoring %s='%s': %s", e->f.env, v, mc_last_error());
	}
	return MC_OK;
}

const struct mc_config_entry *mc_config_entry_find(const struct mc_config_entry *tab, size_t n,
						   const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(tab[i].f.name, name) == 0)
			return &tab[i];
	return NULL;
}

mc_status mc_config_entry_set(const struct mc_config_entry *e, void *obj, const char *value)
{
	if (e->flags & MC_CONFIG_F_CMDLINE_ONLY)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "option %s: only the command line may set it", e->f.name);
	return set_value(e, obj, value);
}

void mc_config_entry_release(const struct mc_config_entry *tab, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_field *f = &tab[i].f;

		if (f->type == MC_CONFIG_STRING && f->offset != MC_CONFIG_NO_FIELD) {
			char **p = (char **)((char *)obj + f->offset);
			mc_free(*p);
			*p = NULL;
		}
	}
}

void mc_config_entry_print_help(const struct mc_config_entry *tab, size_t n, FILE *out)
{
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_field *f = &tab[i].f;
		unsigned flags = tab[i].flags;

		fprintf(out, "  --%s=%s\n      %s", f->name, f->def ? f->def : "", f->doc);
		if (f->env)
			fprintf(out, " [env %s]", f->env);
		if (flags & MC_CONFIG_F_DEPRECATED)
			fputs(" (deprecated)", out);
		if (flags & MC_CONFIG_F_NO_EFFECT)
			fputs(" (accepted, no effect in this build)", out);
		if (flags & MC_CONFIG_F_DEFAULT_ONLY)
			fputs(" (only the default is supported in this build)", out);
		fputc('\n', out);
	}
}

void mc_config_entry_print_value(const struct mc_config_entry *e, const void *obj, FILE *out)
{
	const struct mc_config_field *f = &e->f;
	const char *p = (const char *)obj + f->offset;

	if (f->offset == MC_CONFIG_NO_FIELD)
		return;
	switch (f->type) {
	case MC_CONFIG_BOOL:
	case MC_CONFIG_PRESENCE:
		fputs(*(const bool *)p ? "true" : "false", out);
		break;
	case MC_CONFIG_INT:
		fprintf(out, "%" PRId64, *(const int64_t *)p);
		break;
	case MC_CONFIG_SIZE:
		fprintf(out, "%" PRIu64, *(const uint64_t *)p);
		break;
	case MC_CONFIG_DOUBLE: {
		double d;
		memcpy(&d, p, sizeof(d));
		fprintf(out, "%.17g", d);
		break;
	}
	case MC_CONFIG_DURATION: {
		/* in the stored unit: ms say so; a bare number reads back in
		 * the bare unit, so it needs no suffix when the two agree */
		uint32_t store = unit_or_1(e->store_unit_ms);
		uint64_t v = *(const uint64_t *)p;
		if (store == 1)
			fprintf(out, "%" PRIu64 "ms", v);
		else if (store == unit_or_1(e->bare_unit_ms))
			fprintf(out, "%" PRIu64, v);
		else
			fprintf(out, "%" PRIu64 "ms", v * store);
		break;
	}
	case MC_CONFIG_STRING: {
		const char *v = *(char *const *)p ? *(char *const *)p : "";
		fputc('"', out);
		for (; *v; v++) {
			if (*v == '"' || *v == '\\')
				fputc('\\', out);
			if (*v == '\n')
				fputs("\\n", out);
			else
				fputc(*v, out);
		}
		fputc('"', out);
		break;
	}
	}
}

const char *mc_config_type_name(enum mc_config_type type, uint32_t bare_unit_ms)
{
	switch (type) {
	case MC_CONFIG_BOOL:
		return "bool";
	case MC_CONFIG_PRESENCE:
		return "presence";
	case MC_CONFIG_INT:
		return "int";
	case MC_CONFIG_SIZE:
		return "size";
	case MC_CONFIG_STRING:
		return "string";
	case MC_CONFIG_DOUBLE:
		return "number";
	case MC_CONFIG_DURATION:
		return unit_or_1(bare_unit_ms) == 1 ? "duration (ms)" : "duration (s)";
	}
	return "?";
}

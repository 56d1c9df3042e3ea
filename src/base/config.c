/*
 * base/config.c - the configuration table engine (see config.h).
 */
#define MC_LOG_MODULE "config"
#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
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

static int set_field(const struct mc_config_field *f, void *obj, const char *value)
{
	char *p = (char *)obj + f->offset;
	int64_t i;
	uint64_t u;
	bool b;

	switch (f->type) {
	case MC_CONFIG_BOOL:
	case MC_CONFIG_PRESENCE:
		if (!mc_parse_bool(value, &b))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not a boolean", f->name, value);
		*(bool *)p = b;
		return MC_OK;
	case MC_CONFIG_INT:
		if (!mc_parse_int(value, &i) || i < f->min || i > f->max)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not an integer in [%" PRId64
					    ", %" PRId64 "]",
					    f->name, value, f->min, f->max);
		*(int64_t *)p = i;
		return MC_OK;
	case MC_CONFIG_SIZE:
		if (!mc_parse_size(value, &u) || u < (uint64_t)f->min || u > (uint64_t)f->max)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "option %s: '%s' is not a size in [%" PRId64
					    ", %" PRId64 "]",
					    f->name, value, f->min, f->max);
		*(uint64_t *)p = u;
		return MC_OK;
	case MC_CONFIG_STRING: {
		char *s = value ? mc_strdup(value) : NULL;
		if (value && !s)
			return MC_ERR_NOMEM;
		mc_free(*(char **)p);
		*(char **)p = s;
		return MC_OK;
	}
	}
	return MC_ERR_INTERNAL;
}

void mc_config_defaults(const struct mc_config_field *tab, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_field *f = &tab[i];
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
			*(uint64_t *)p = 0;
			break;
		case MC_CONFIG_STRING:
			*(char **)p = NULL;
			break;
		}
		if (f->def && set_field(f, obj, f->def) != MC_OK)
			mc_assert(!"bad default in config table");
	}
}

void mc_config_load_env(const struct mc_config_field *tab, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_field *f = &tab[i];
		const char *v = f->env ? getenv(f->env) : NULL;
		if (!v)
			continue;
		if (f->type == MC_CONFIG_PRESENCE) {
			*(bool *)((char *)obj + f->offset) = true;
			continue;
		}
		if (set_field(f, obj, v) != MC_OK)
			mc_warn("ignoring %s='%s': %s", f->env, v, mc_last_error());
	}
}

int mc_config_set(const struct mc_config_field *tab, size_t n, void *obj, const char *name,
		  const char *value)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(tab[i].name, name) == 0)
			return set_field(&tab[i], obj, value);
	return mc_set_error(MC_ERR_NOT_FOUND, "unknown option %s", name);
}

void mc_config_release(const struct mc_config_field *tab, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++) {
		if (tab[i].type == MC_CONFIG_STRING) {
			char **p = (char **)((char *)obj + tab[i].offset);
			mc_free(*p);
			*p = NULL;
		}
	}
}

void mc_config_print_help(const struct mc_config_field *tab, size_t n, FILE *out)
{
	for (size_t i = 0; i < n; i++) {
		const struct mc_config_field *f = &tab[i];
		fprintf(out, "  --%s=%s\n      %s", f->name, f->def ? f->def : "", f->doc);
		if (f->env)
			fprintf(out, " [env %s]", f->env);
		fputc('\n', out);
	}
}

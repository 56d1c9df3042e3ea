/*
 * conductor/trace.c - load a FAST'25 request trace (JSON Lines) into one
 * array of requests and one pool of block keys.
 *
 * The file is read one line at a time (getline) and every line is parsed
 * on its own with jansson, so a malformed line has a line number and never
 * takes its neighbours with it; what a line must hold is checked field by
 * field (see trace.h) before anything is appended.  All keys of all
 * requests go into one growing pool and each request records its offset;
 * the pointers into the pool are set once a load returns, because the pool
 * moves while it grows.  The conversation trace (12k requests, 280k keys)
 * loads in tens of milliseconds this way.
 *
 * This file never sorts or reorders: replay order is the caller's choice
 * (the traces are already in timestamp order, with ties in file order).
 */
#define MC_LOG_MODULE "trace"
#include "conductor/trace.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/alloc.h"
#include "base/log.h"

#define MAX_KEYS (1u << 22)

void mc_trace_init(struct mc_trace *t)
{
	memset(t, 0, sizeof(*t));
}

void mc_trace_release(struct mc_trace *t)
{
	mc_free(t->reqs);
	mc_free(t->pool);
	mc_free(t->offs);
	memset(t, 0, sizeof(*t));
}

/* ---- one line ---------------------------------------------------------------------------- */

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

/* A non-negative whole number no larger than max, as integer or integral real. */
static mc_status get_uint(json_t *obj, const char *name, uint64_t max, uint64_t *out)
{
	json_t *v = json_object_get(obj, name);
	if (!v)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "field \"%s\" missing", name);
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		if (i < 0 || (uint64_t)i > max)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "field \"%s\" out of range",
					    name);
		*out = (uint64_t)i;
		return MC_OK;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (!isfinite(d) || d < 0 || d > (double)max || d != floor(d))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "field \"%s\" is not a whole number in range", name);
		*out = (uint64_t)d;
		return MC_OK;
	}
	return mc_set_error(MC_ERR_INVALID_PARAMS, "field \"%s\" is not a number", name);
}

mc_status mc_trace_parse_line(const char *line, size_t len, struct mc_trace_req *out,
			      uint64_t **ids_out)
{
	json_error_t jerr;
	json_t *root, *arr;
	uint64_t ts, in, outl;
	uint64_t *ids = NULL;
	size_t n;
	mc_status st;

	*ids_out = NULL;
	memset(out, 0, sizeof(*out));
	if (blank(line, len))
		return MC_ERR_NOT_FOUND;
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &jerr);
	if (!root)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "column %d: %s", jerr.column, jerr.text);
	/* DISABLE_EOF_CHECK stops at the object's end; only blanks may follow it */
	if ((size_t)jerr.position > len || !blank(line + jerr.position, len - jerr.position)) {
		json_decref(root);
		return mc_set_error(MC_ERR_MALFORMED_JSON, "text after the object");
	}
	if (!json_is_object(root)) {
		json_decref(root);
		return mc_set_error(MC_ERR_MALFORMED_JSON, "not a JSON object");
	}
	if ((st = get_uint(root, "timestamp", (uint64_t)INT64_MAX / 2, &ts)) != MC_OK ||
	    (st = get_uint(root, "input_length", UINT32_MAX, &in)) != MC_OK ||
	    (st = get_uint(root, "output_length", UINT32_MAX, &outl)) != MC_OK)
		goto out;
	arr = json_object_get(root, "hash_ids");
	if (!arr || !json_is_array(arr)) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS, "field \"hash_ids\" %s",
				  arr ? "is not an array" : "missing");
		goto out;
	}
	n = json_array_size(arr);
	if (n > MAX_KEYS) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS, "%zu hash_ids, more than %u", n, MAX_KEYS);
		goto out;
	}
	if (n) {
		ids = mc_malloc(n * sizeof(*ids));
		if (!ids) {
			st = mc_set_error(MC_ERR_NOMEM, "no memory for %zu hash_ids", n);
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(arr, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			st = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "hash_ids[%zu] is not a non-negative integer", i);
			goto out;
		}
		ids[i] = (uint64_t)json_integer_value(v);
	}
	out->timestamp_ms = (int64_t)ts;
	out->input_length = (uint32_t)in;
	out->output_length = (uint32_t)outl;
	out->n_blocks = (uint32_t)n;
	out->hash_ids = ids;
	*ids_out = ids;
	ids = NULL;
	st = MC_OK;
out:
	mc_free(ids);
	json_decref(root);
	return st;
}

/* ---- appending --------------------------------------------------------------------------- */

static mc_status append(struct mc_trace *t, const struct mc_trace_req *r)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 1024;
		struct mc_trace_req *reqs = mc_realloc(t->reqs, cap * sizeof(*reqs));
		if (!reqs)
			return mc_set_error(MC_ERR_NOMEM, "no memory for %zu requests", cap);
		t->reqs = reqs;
		size_t *offs = mc_realloc(t->offs, cap * sizeof(*offs));
		if (!offs)
			return mc_set_error(MC_ERR_NOMEM, "no memory for %zu requests", cap);
		t->offs = offs;
		t->cap = cap;
	}
	if (t->pool_n + r->n_blocks > t->pool_cap) {
		size_t cap = t->pool_cap ? t->pool_cap : 16384;
		while (cap < t->pool_n + r->n_blocks)
			cap *= 2;
		uint64_t *pool = mc_realloc(t->pool, cap * sizeof(*pool));
		if (!pool)
			return mc_set_error(MC_ERR_NOMEM, "no memory for %zu keys", cap);
		t->pool = pool;
		t->pool_cap = cap;
	}
	if (r->n_blocks)
		memcpy(t->pool + t->pool_n, r->hash_ids, r->n_blocks * sizeof(uint64_t));
	t->reqs[t->n] = *r;
	t->offs[t->n] = t->pool_n;
	t->pool_n += r->n_blocks;
	t->n++;
	return MC_OK;
}

/* Point every request at its keys, now that the pool stays put. */
static void finish(struct mc_trace *t)
{
	for (size_t i = 0; i < t->n; i++)
		t->reqs[i].hash_ids = t->reqs[i].n_blocks ? t->pool + t->offs[i] : NULL;
}

/* The last error's text without the " (STATUS)" suffix mc_set_error adds,
 * so that wrapping it once more names the status once. */
static const char *inner_msg(char *buf, size_t size)
{
	char *paren;
	snprintf(buf, size, "%s", mc_last_error());
	paren = strrchr(buf, '(');
	if (paren && paren > buf && paren[-1] == ' ')
		paren[-1] = '\0';
	return buf;
}

/* Parse and append one line; a blank line is MC_OK with nothing appended. */
static mc_status take_line(struct mc_trace *t, const char *s, size_t len, size_t lineno,
			   unsigned flags)
{
	struct mc_trace_req r;
	uint64_t *ids;
	char msg[256];
	mc_status st = mc_trace_parse_line(s, len, &r, &ids);

	if (st == MC_ERR_NOT_FOUND)
		return MC_OK;
	if (st == MC_OK) {
		st = append(t, &r);
		mc_free(ids);
		return st;
	}
	if (st != MC_ERR_NOMEM && (flags & MC_TRACE_SKIP_BAD)) {
		if (!t->skipped)
			t->first_bad_line = lineno;
		t->skipped++;
		mc_debug("line %zu skipped: %s", lineno, mc_last_error());
		return MC_OK;
	}
	return mc_set_error(st, "line %zu: %s", lineno, inner_msg(msg, sizeof(msg)));
}

mc_status mc_trace_load_buffer(struct mc_trace *t, const char *buf, size_t len, size_t first_line,
			       unsigned flags)
{
	size_t lineno = first_line;
	mc_status st = MC_OK;

	while (len) {
		const char *nl = memchr(buf, '\n', len);
		size_t n = nl ? (size_t)(nl - buf) : len;
		if (n > MC_TRACE_MAX_LINE)
			st = mc_set_error(MC_ERR_TOO_LARGE, "line %zu: longer than %u bytes",
					  lineno, MC_TRACE_MAX_LINE);
		else
			st = take_line(t, buf, n, lineno, flags);
		if (st != MC_OK)
			break;
		if (!nl)
			break;
		buf = nl + 1;
		len -= n + 1;
		lineno++;
	}
	finish(t);
	return st;
}

mc_status mc_trace_load_file(struct mc_trace *t, const char *path, unsigned flags)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t n;
	char msg[256];
	mc_status st = MC_OK;

	if (!f)
		return mc_set_error(errno == ENOENT ? MC_ERR_FILE_NOT_FOUND : MC_ERR_FILE_OPEN_FAIL,
				    "trace %s: %s", path, strerror(errno));
	while ((n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if ((size_t)n > MC_TRACE_MAX_LINE) {
			st = mc_set_error(MC_ERR_TOO_LARGE,
					  "trace %s line %zu: longer than %u bytes", path, lineno,
					  MC_TRACE_MAX_LINE);
			break;
		}
		st = take_line(t, line, (size_t)n, lineno, flags);
		if (st != MC_OK) {
			st = mc_set_error(st, "trace %s: %s", path, inner_msg(msg, sizeof(msg)));
			break;
		}
	}
	if (st == MC_OK && ferror(f))
		st = mc_set_error(MC_ERR_FILE_READ_FAIL, "trace %s: %s", path, strerror(errno));
	free(line); /* getline's buffer comes from malloc */
	fclose(f);
	finish(t);
	return st;
}

/*
 * base/buf.c - the growable byte buffer (see buf.h for the contract).
 *
 * Capacity starts at 256 bytes and doubles, so n appends cost O(n) copies
 * in all; a request for more than SIZE_MAX / 4 bytes in total is refused
 * as out of memory before any arithmetic can wrap.  mc_buf_appendf
 * formats straight into the spare room and formats a second time only
 * when the text did not fit.
 */
#define MC_LOG_MODULE "base"
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"

#define BUF_FIRST_CAP	256
#define BUF_APPENDF_MIN 256 /* spare room mc_buf_appendf tries first */

void mc_buf_init(struct mc_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->err = MC_OK;
}

void mc_buf_release(struct mc_buf *b)
{
	mc_free(b->data);
	mc_buf_init(b);
}

void mc_buf_reset(struct mc_buf *b)
{
	b->len = 0;
	b->err = MC_OK;
}

mc_status mc_buf_grow(struct mc_buf *b, size_t extra)
{
	size_t cap;
	uint8_t *p;

	if (b->err != MC_OK)
		return b->err;
	if (extra <= b->cap - b->len)
		return MC_OK;
	if (extra > SIZE_MAX / 4 - b->len) {
		b->err = mc_set_error(MC_ERR_NOMEM, "buffer of %zu + %zu bytes", b->len, extra);
		return b->err;
	}
	cap = b->cap ? b->cap : BUF_FIRST_CAP;
	while (cap < b->len + extra)
		cap *= 2;
	p = mc_realloc(b->data, cap);
	if (!p) {
		b->err = mc_set_error(MC_ERR_NOMEM, "cannot grow a buffer to %zu bytes", cap);
		return b->err;
	}
	b->data = p;
	b->cap = cap;
	return MC_OK;
}

void mc_buf_append_str(struct mc_buf *b, const char *s)
{
	mc_buf_append(b, s, strlen(s));
}

void mc_buf_appendf(struct mc_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->cap - b->len < BUF_APPENDF_MIN && mc_buf_reserve(b, BUF_APPENDF_MIN) != MC_OK)
		return;
	va_start(ap, fmt);
	n = vsnprintf((char *)b->data + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = mc_set_error(MC_ERR_INTERNAL, "cannot format \"%s\"", fmt);
		return;
	}
	if ((size_t)n >= b->cap - b->len) {
		if (mc_buf_reserve(b, (size_t)n + 1) != MC_OK)
			return;
		va_start(ap, fmt);
		vsnprintf((char *)b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

char *mc_buf_steal(struct mc_buf *b, size_t *len_out)
{
	char *s;
	size_t len = b->len;

	if (b->err == MC_OK && !b->data) {
		s = mc_malloc(1);
		if (!s)
			b->err = mc_set_error(MC_ERR_NOMEM, "cannot allocate an empty string");
	} else if (mc_buf_reserve(b, 1) == MC_OK) {
		s = (char *)b->data;
	} else {
		s = NULL;
	}
	if (!s) {
		mc_buf_release(b);
		return NULL;
	}
	s[len] = '\0';
	if (len_out)
		*len_out = len;
	b->data = NULL; /* now the caller's */
	mc_buf_release(b);
	return s;
}

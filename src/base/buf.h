/*
 * base/buf.h - the growable byte buffer (git's strbuf, Valkey's sds, in
 * one small struct the caller embeds).
 *
 * Every place that builds bytes of unknown length uses it: wire frames
 * (store/proto.c), HTTP pages and request bodies (base/http.c,
 * master/server_http.c), libcurl response bodies (meta/curl_pool.c),
 * files read whole (master/server_config.c).
 *
 * Errors are sticky: writes never fail on the spot.  The first allocation
 * failure is kept in err (and recorded with mc_set_error), later writes
 * are dropped, and the builder checks err once at the end.  A buffer with
 * err set keeps the bytes it held before the failure.
 *
 * The bytes are not NUL-terminated (len counts what was written);
 * mc_buf_steal hands them out as a terminated string.  Not thread-safe:
 * one owner at a time.
 */
#ifndef MC_BASE_BUF_H
#define MC_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/compiler.h"
#include "mooncake/status.h"

struct mc_buf {
	uint8_t *data; /* mc_malloc'ed; NULL until the first write */
	size_t len;    /* bytes written */
	size_t cap;    /* bytes allocated */
	mc_status err; /* first failure since the last reset; MC_OK if none */
};

/* An empty buffer; allocates nothing. */
void mc_buf_init(struct mc_buf *b);
/* Frees the storage; the buffer is empty and reusable afterwards. */
void mc_buf_release(struct mc_buf *b);
/* Empties the buffer and clears err, keeping the storage. */
void mc_buf_reset(struct mc_buf *b);
/* mc_buf_reserve's slow path: grows the storage (or reports err). */
mc_status mc_buf_grow(struct mc_buf *b, size_t extra);

/*
 * Room for extra more bytes after len (capacity doubles, from 256).
 * MC_OK, or MC_ERR_NOMEM (also recorded in err), or err if already set.
 * Inline, as is mc_buf_append: the wire codecs call them per field, and a
 * call into another file per field cost the master 4% on batched requests.
 */
static inline mc_status mc_buf_reserve(struct mc_buf *b, size_t extra)
{
	if (mc_likely(b->err == MC_OK && extra <= b->cap - b->len))
		return MC_OK;
	return mc_buf_grow(b, extra);
}

/* Appends n bytes of p (p may be NULL when n is 0). */
static inline void mc_buf_append(struct mc_buf *b, const void *p, size_t n)
{
	if (n && mc_buf_reserve(b, n) == MC_OK) {
		memcpy(b->data + b->len, p, n);
		b->len += n;
	}
}
/* Appends the string s without its terminator. */
void mc_buf_append_str(struct mc_buf *b, const char *s);
/* Appends printf output (no terminator counted in len). */
void mc_buf_appendf(struct mc_buf *b, const char *fmt, ...) MC_PRINTF(2, 3);
/*
 * Hands the bytes to the caller as a NUL-terminated string (the
 * terminator is not counted in *len_out, which may be NULL); free it with
 * mc_free.  The buffer is left empty, as after mc_buf_release.  NULL when
 * err was set or the terminator did not fit (the storage is freed then).
 */
char *mc_buf_steal(struct mc_buf *b, size_t *len_out);

#endif

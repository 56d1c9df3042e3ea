/*
 * meta/curl_pool.h - what the libcurl-based metadata backends (http, etcd)
 * share: one-time global initialisation, a small pool of reusable easy
 * handles (kept-alive connections survive between requests), and a bounded
 * response-body collector over struct mc_buf.
 */
#ifndef MC_META_CURL_POOL_H
#define MC_META_CURL_POOL_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

#define MC_CURL_POOL_MAX     8
#define MC_CURL_MAX_RESPONSE (64u << 20) /* matches the HTTP server's request bound */

struct mc_curl_pool {
	pthread_mutex_t lock;	      /* protects idle[] and nidle */
	CURL *idle[MC_CURL_POOL_MAX]; /* handles not in use */
	int nidle;
};

/* curl_global_init once per process: MC_OK, or MC_ERR_METADATA with the cause recorded. */
mc_status mc_curl_global_init(void);

void mc_curl_pool_init(struct mc_curl_pool *p);
void mc_curl_pool_release(struct mc_curl_pool *p);
/* A reset handle (reused or new; NULL when out of memory). */
CURL *mc_curl_pool_take(struct mc_curl_pool *p);
/* Return a handle; kept for reuse while the pool has room. */
void mc_curl_pool_give(struct mc_curl_pool *p, CURL *h);

/*
 * Response body: buf holds the bytes, followed by a NUL (not counted in
 * buf.len) when non-empty.  Start with mc_curl_body_init; the owner calls
 * mc_buf_release(&body.buf).
 */
struct mc_curl_body {
	struct mc_buf buf;
	bool too_large; /* the body passed MC_CURL_MAX_RESPONSE; the transfer was aborted */
};

static inline void mc_curl_body_init(struct mc_curl_body *r)
{
	mc_buf_init(&r->buf);
	r->too_large = false;
}

/* The body as a string: "" when empty (borrowed, valid until the release). */
static inline const char *mc_curl_body_text(const struct mc_curl_body *r)
{
	return r->buf.data ? (const char *)r->buf.data : "";
}

/* CURLOPT_WRITEFUNCTION for a struct mc_curl_body (CURLOPT_WRITEDATA). */
size_t mc_curl_on_body(char *ptr, size_t size, size_t nmemb, void *arg);

#endif

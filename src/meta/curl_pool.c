/*
 * meta/curl_pool.c - shared libcurl plumbing of the http and etcd backends.
 */
#define MC_LOG_MODULE "meta"
#include "meta/curl_pool.h"

#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "mooncake/status.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

mc_status mc_curl_global_init(void)
{
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK)
		return mc_set_error(MC_ERR_METADATA, "metadata: curl_global_init failed: %s",
				    curl_easy_strerror(curl_init_rc));
	return MC_OK;
}

void mc_curl_pool_init(struct mc_curl_pool *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
}

void mc_curl_pool_release(struct mc_curl_pool *p)
{
	for (int i = 0; i < p->nidle; i++)
		curl_easy_cleanup(p->idle[i]);
	p->nidle = 0;
	pthread_mutex_destroy(&p->lock);
}

CURL *mc_curl_pool_take(struct mc_curl_pool *p)
{
	CURL *h = NULL;

	pthread_mutex_lock(&p->lock);
	if (p->nidle)
		h = p->idle[--p->nidle];
	pthread_mutex_unlock(&p->lock);
	if (h)
		curl_easy_reset(h);
	else
		h = curl_easy_init();
	return h;
}

void mc_curl_pool_give(struct mc_curl_pool *p, CURL *h)
{
	pthread_mutex_lock(&p->lock);
	if (p->nidle < MC_CURL_POOL_MAX) {
		p->idle[p->nidle++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	if (h)
		curl_easy_cleanup(h);
}

size_t mc_curl_on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct mc_curl_body *r = arg;
	size_t n = size * nmemb;

	if (n > MC_CURL_MAX_RESPONSE - r->buf.len) {
		r->too_large = true;
		return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
	}
	/* room for the terminator too, so the append below cannot fail alone */
	if (mc_buf_reserve(&r->buf, n + 1) != MC_OK)
		return 0;
	mc_buf_append(&r->buf, ptr, n);
	r->buf.data[r->buf.len] = '\0';
	return n;
}

/*
 * meta/meta_http.c - the HTTP metadata backend (libcurl).
 *
 * Upstream's protocol (spec transfer-engine.md 3.4): the whole connection
 * string is the base URL and every operation is one request,
 *   GET    <base>?key=<percent-encoded key>
 *   PUT    <base>?key=...   Content-Type: application/json, body = value
 *   DELETE <base>?key=...
 * Only HTTP 200 is success.  404 on GET or DELETE is MC_ERR_NOT_FOUND; a
 * 400 to a PUT whose body says "Duplicate" (the servers' rpc_meta rule) is
 * MC_ERR_EXISTS, so the engine can tell "name taken" from "service down";
 * anything else, including every transport failure, is MC_ERR_METADATA
 * with the URL and curl's error in mc_last_error().
 *
 * Timeouts are upstream's, 3 s total and 1.5 s to connect, unless
 * MC_METADATA_TIMEOUT_MS (read at open) sets the total; connect gets half.
 *
 * Threads: a client is used from many threads.  A curl easy handle is not,
 * so each request borrows one from a small pool under the client's mutex
 * (creating one when the pool is empty) and returns it afterwards.  Handles
 * are reset before each use, which keeps their live connections, so
 * back-to-back requests reuse a keep-alive connection.  curl_global_init
 * runs once per process through pthread_once.
 */
#define MC_LOG_MODULE "meta"
#include "meta/meta.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "meta/curl_pool.h"
#include "mooncake/status.h"

#define HTTP_TIMEOUT_MS	   3000L
#define HTTP_ERR_BODY_SHOW 200 /* bytes of an error body put in messages */

struct http_client {
	struct mc_meta base; /* must be first */
	long timeout_ms;
	long connect_timeout_ms;
	struct mc_curl_pool pool;
};

static const struct mc_meta_ops http_ops;
static struct http_client *client_of(struct mc_meta *m)
{
	return mc_container_of(m, struct http_client, base);
}

/*
 * One request.  On MC_OK *code_out holds the HTTP status and resp the body
 * (NUL-terminated when non-empty); transport failures return MC_ERR_METADATA.
 */
static mc_status http_request(struct http_client *c, const char *method, const char *key,
			      const char *body, size_t len, long *code_out,
			      struct mc_curl_body *resp)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL;
	char *escaped = NULL, *url = NULL;
	const char *base = c->base.uri;
	CURLcode rc;
	CURL *h;
	mc_status status = MC_OK;

	h = mc_curl_pool_take(&c->pool);
	if (!h)
		return mc_set_error(MC_ERR_METADATA, "metadata %s %s: cannot create a curl handle",
				    method, base);
	escaped = curl_easy_escape(h, key, 0);
	if (escaped)
		url = mc_asprintf("%s%ckey=%s", base, strchr(base, '?') ? '&' : '?', escaped);
	if (!url) {
		status = mc_set_error(MC_ERR_NOMEM, "metadata %s %s: out of memory", method, base);
		goto out_free;
	}

	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mc_curl_on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
	if (strcmp(method, "PUT") == 0) {
		struct curl_slist *t;
		hdrs = curl_slist_append(NULL, "Content-Type: application/json");
		/* no 100-continue round trip for large bodies */
		t = hdrs ? curl_slist_append(hdrs, "Expect:") : NULL;
		if (!t) {
			status = mc_set_error(MC_ERR_NOMEM, "metadata PUT %s: out of memory", url);
			goto out_free;
		}
		hdrs = t;
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, len ? body : "");
	} else if (strcmp(method, "DELETE") == 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
	} else {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	}

	rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		if (resp->too_large)
			status = mc_set_error(MC_ERR_METADATA,
					      "metadata %s %s: response larger than %u bytes",
					      method, url, MC_CURL_MAX_RESPONSE);
		else
			status = mc_set_error(MC_ERR_METADATA, "metadata %s %s: %s", method, url,
					      errbuf[0] ? errbuf : curl_easy_strerror(rc));
		goto out_free;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code_out);

out_free:
	curl_slist_free_all(hdrs);
	curl_free(escaped);
	mc_free(url);
	/* the handle keeps pointers to our stack until the next reset */
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	mc_curl_pool_give(&c->pool, h);
	return status;
}

/* Turn a non-200 answer into a status with the server's words in the text. */
static mc_status http_fail(struct http_client *c, const char *method, const char *key, long code,
			   const struct mc_curl_body *r)
{
	int len = (int)MC_MIN(r->buf.len, (size_t)HTTP_ERR_BODY_SHOW);
	const char *body = mc_curl_body_text(r);
	mc_status status = MC_ERR_METADATA;

	if (code == 404 && strcmp(method, "PUT") != 0)
		status = MC_ERR_NOT_FOUND;
	else if (code == 400 && strcmp(method, "PUT") == 0 && strstr(body, "Duplicate"))
		status = MC_ERR_EXISTS;
	return mc_set_error(status, "metadata %s %s key %s: HTTP %ld: %.*s", method, c->base.uri,
			    key, code, len, body);
}

static mc_status http_get(struct mc_meta *m, const char *key, char **value_out, size_t *len_out)
{
	struct http_client *c = client_of(m);
	struct mc_curl_body r;
	long code = 0;
	mc_status status;

	if (!key || !value_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key", m->uri);
	mc_curl_body_init(&r);
	status = http_request(c, "GET", key, NULL, 0, &code, &r);
	if (status)
		goto out_free;
	if (code != 200) {
		status = http_fail(c, "GET", key, code, &r);
		goto out_free;
	}
	*value_out = mc_buf_steal(&r.buf, len_out);
	if (!*value_out)
		return mc_set_error(MC_ERR_NOMEM, "metadata %s: out of memory", m->uri);
	return MC_OK;

out_free:
	mc_buf_release(&r.buf);
	return status;
}

static mc_status http_put(struct mc_meta *m, const char *key, const char *value, size_t len)
{
	struct http_client *c = client_of(m);
	struct mc_curl_body r;
	long code = 0;
	mc_status status;

	if (!key || (!value && len))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key or value",
				    m->uri);
	mc_curl_body_init(&r);
	status = http_request(c, "PUT", key, value, len, &code, &r);
	if (status == MC_OK && code != 200)
		status = http_fail(c, "PUT", key, code, &r);
	mc_buf_release(&r.buf);
	return status;
}

static mc_status http_del(struct mc_meta *m, const char *key)
{
	struct http_client *c = client_of(m);
	struct mc_curl_body r;
	long code = 0;
	mc_status status;

	if (!key)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key", m->uri);
	mc_curl_body_init(&r);
	status = http_request(c, "DELETE", key, NULL, 0, &code, &r);
	if (status == MC_OK && code != 200)
		status = http_fail(c, "DELETE", key, code, &r);
	mc_buf_release(&r.buf);
	return status;
}

static void http_close(struct mc_meta *m)
{
	struct http_client *c = client_of(m);

	mc_curl_pool_release(&c->pool);
	mc_free(c->base.uri);
	mc_free(c);
}

static long timeout_from_env(void)
{
	const char *v = getenv("MC_METADATA_TIMEOUT_MS");
	char *end;
	long ms;

	if (!v || !*v)
		return HTTP_TIMEOUT_MS;
	ms = strtol(v, &end, 10);
	if (*end || ms <= 0) {
		mc_warn("ignoring MC_METADATA_TIMEOUT_MS='%s': not a positive integer", v);
		return HTTP_TIMEOUT_MS;
	}
	return ms;
}

mc_status mc_meta_http_open(const char *uri, struct mc_meta **out)
{
	struct http_client *c;

	if (!uri || !out ||
	    (strncasecmp(uri, "http://", 7) != 0 && strncasecmp(uri, "https://", 8) != 0))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata: %s is not an http(s) url",
				    uri ? uri : "(null)");
	if (mc_curl_global_init() != MC_OK)
		return MC_ERR_METADATA;
	c = mc_calloc(1, sizeof(*c));
	if (!c)
		return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory opening %s", uri);
	c->base.ops = &http_ops;
	c->base.uri = mc_strdup(uri);
	if (!c->base.uri) {
		mc_free(c);
		return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory opening %s", uri);
	}
	c->timeout_ms = timeout_from_env();
	c->connect_timeout_ms = MC_MAX(c->timeout_ms / 2, 1L);
	mc_curl_pool_init(&c->pool);
	*out = &c->base;
	return MC_OK;
}

static const struct mc_meta_ops http_ops = {
	.name = "http",
	.get = http_get,
	.put = http_put,
	.del = http_del,
	.close = http_close,
};

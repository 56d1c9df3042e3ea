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
 * Lost keys.  Upstream's HTTP servers, ours (standalone or embedded in
 * mooncake_master) among them, keep everything in memory: a restarted
 * server knows none of the engines' descriptors and rpc_meta records, and
 * nothing in the protocol tells the engines.  So the client keeps what it
 * wrote, the "owned" keys (meta/owned.h: every key put and not deleted
 * since, with its latest value), and a checker thread, started by the
 * first put, GETs each of them every MC_METADATA_HTTP_CHECK_MS (default
 * 1 s, 0 = off) and PUTs the client's value again when the server answers
 * 404 (mc_meta_resync runs the same round at once: the store client does
 * when a restarted master asks it to remount).  A GET of an engine's two
 * small keys a second is what that costs;
 * a put or del of the caller's own is never delayed by more than one
 * restore.  A 400 "Duplicate" to a restore means another engine took the
 * name meanwhile: the key is given up, with a warning.  A put is recorded
 * before it is sent, so one that fails while the server is down is made
 * good once it is back (refused ones, MC_ERR_EXISTS, are not ours and are
 * forgotten); a del forgets first.  close() stops the checker and deletes
 * nothing (the engine deletes its keys itself).
 *
 * Threads: a client is used from many threads.  A curl easy handle is not,
 * so each request borrows one from a small pool under the client's mutex
 * (creating one when the pool is empty) and returns it afterwards.  Handles
 * are reset before each use, which keeps their live connections, so
 * back-to-back requests reuse a keep-alive connection.  curl_global_init
 * runs once per process through pthread_once.  write_lock is held across
 * each put and del and across each of the checker's restores, so a restore
 * never revives a key deleted (or overwrites a value put) meanwhile; lock
 * guards the owned list and the checker's flags and is never held across
 * a request.  Order: write_lock, then lock.
 */
#define MC_LOG_MODULE "meta"
#include "meta/meta.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/auth.h"
#include "base/compiler.h"
#include "base/http.h" /* struct mc_http_tls */
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"
#include "meta/curl_pool.h"
#include "meta/meta_config.h"
#include "meta/owned.h"
#include "mooncake/status.h"

#define HTTP_TIMEOUT_MS	   3000L
#define HTTP_ERR_BODY_SHOW 200 /* bytes of an error body put in messages */

struct http_client {
	struct mc_meta base; /* must be first */
	long timeout_ms;
	long connect_timeout_ms;
	long check_ms;	/* period of the lost-key check; 0 = off */
	char *auth_hdr; /* "Authorization: Bearer <secret>" on PUT and DELETE, or NULL */
	char *ca_file;	/* MC_HTTP_TLS_CA_FILE for https:// (NULL: the system's) */
	struct mc_curl_pool pool;

	pthread_mutex_t write_lock; /* a put, a del, or one restore at a time */
	pthread_mutex_t lock;	    /* owned, stop, checker_started */
	pthread_cond_t wake;	    /* CLOCK_MONOTONIC; wakes the checker at close */
	struct mc_list owned;	    /* struct mc_meta_owned_key */
	bool stop;
	bool checker_started;
	pthread_t checker;
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
	curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file); /* NULL: libcurl's default */
	if (c->auth_hdr && strcmp(method, "GET") != 0) {
		/* the cluster secret guards what changes state (base/auth.h) */
		if (!(hdrs = curl_slist_append(NULL, c->auth_hdr))) {
			status = mc_set_error(MC_ERR_NOMEM, "metadata %s: out of memory", method);
			goto out_free;
		}
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	}
	if (strcmp(method, "PUT") == 0) {
		struct curl_slist *t = curl_slist_append(hdrs, "Content-Type: application/json");

		/* no 100-continue round trip for large bodies */
		t = t ? curl_slist_append(t, "Expect:") : NULL;
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

static void *checker_main(void *arg);

/* Start the lost-key checker once; lock held. */
static void checker_start_locked(struct http_client *c)
{
	int err;

	if (c->checker_started || !c->check_ms || c->stop)
		return;
	err = pthread_create(&c->checker, NULL, checker_main, c);
	if (err) {
		mc_warn("metadata %s: cannot start the lost-key checker: %s", c->base.uri,
			strerror(err));
		c->check_ms = 0;
		return;
	}
	c->checker_started = true;
}

/* PUT without touching the owned list. */
static mc_status put_once(struct http_client *c, const char *key, const char *value, size_t len)
{
	struct mc_curl_body r;
	long code = 0;
	mc_status status;

	mc_curl_body_init(&r);
	status = http_request(c, "PUT", key, value, len, &code, &r);
	if (status == MC_OK && code != 200)
		status = http_fail(c, "PUT", key, code, &r);
	mc_buf_release(&r.buf);
	return status;
}

static mc_status http_put(struct mc_meta *m, const char *key, const char *value, size_t len)
{
	struct http_client *c = client_of(m);
	mc_status status = MC_OK;

	if (!key || (!value && len))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key or value",
				    m->uri);
	pthread_mutex_lock(&c->write_lock);
	/* recorded first: a PUT that fails now is made good by the checker (or a resync) */
	pthread_mutex_lock(&c->lock);
	status = mc_meta_owned_set(&c->owned, m->uri, key, value, len);
	if (status == MC_OK)
		checker_start_locked(c);
	pthread_mutex_unlock(&c->lock);
	if (status == MC_OK)
		status = put_once(c, key, value, len);
	if (status == MC_ERR_EXISTS) { /* another engine's key */
		pthread_mutex_lock(&c->lock);
		mc_meta_owned_forget(&c->owned, key);
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&c->write_lock);
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
	pthread_mutex_lock(&c->write_lock);
	pthread_mutex_lock(&c->lock);
	mc_meta_owned_forget(&c->owned, key); /* first: a failed DELETE is not undone */
	pthread_mutex_unlock(&c->lock);
	mc_curl_body_init(&r);
	status = http_request(c, "DELETE", key, NULL, 0, &code, &r);
	if (status == MC_OK && code != 200)
		status = http_fail(c, "DELETE", key, code, &r);
	mc_buf_release(&r.buf);
	pthread_mutex_unlock(&c->write_lock);
	return status;
}

/* ---- the lost-key checker ---------------------------------------------------------- */

/* PUT key's owned value again if the server lost it; write_lock held. */
static void restore_locked(struct http_client *c, const char *key)
{
	struct mc_meta_owned_key *o;
	char *value = NULL;
	size_t len = 0;
	mc_status status;

	pthread_mutex_lock(&c->lock);
	o = mc_meta_owned_find(&c->owned, key);
	if (o)
		value = mc_malloc(o->len + 1);
	if (value) {
		memcpy(value, o->value, o->len + 1);
		len = o->len;
	}
	pthread_mutex_unlock(&c->lock);
	if (!value)
		return; /* deleted meanwhile (or no memory: the next round retries) */
	status = put_once(c, key, value, len);
	mc_free(value);
	if (status == MC_OK) {
		mc_info("metadata %s had lost key %s; published it again", c->base.uri, key);
	} else if (status == MC_ERR_EXISTS) {
		mc_warn("metadata %s: key %s was lost and is now another engine's: %s", c->base.uri,
			key, mc_last_error());
		pthread_mutex_lock(&c->lock);
		mc_meta_owned_forget(&c->owned, key);
		pthread_mutex_unlock(&c->lock);
	} else {
		mc_debug("cannot restore %s: %s", key, mc_last_error());
	}
}

/* One round: GET every owned key, restore those answered with 404. */
static void check_round(struct http_client *c)
{
	struct mc_list *pos;
	char **keys = NULL;
	size_t n = 0, i = 0;

	pthread_mutex_lock(&c->lock);
	mc_list_for_each(pos, &c->owned)
		n++;
	keys = n ? mc_calloc(n, sizeof(*keys)) : NULL;
	if (keys) {
		mc_list_for_each(pos, &c->owned) {
			struct mc_meta_owned_key *o =
				mc_list_entry(pos, struct mc_meta_owned_key, node);
			keys[i] = mc_strdup(o->key);
			i += keys[i] != NULL;
		}
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t k = 0; k < i; k++) {
		struct mc_curl_body r;
		long code = 0;
		bool stop;

		pthread_mutex_lock(&c->lock);
		stop = c->stop; /* close is waiting: the rest of the round can go */
		pthread_mutex_unlock(&c->lock);
		mc_curl_body_init(&r);
		if (!stop && http_request(c, "GET", keys[k], NULL, 0, &code, &r) == MC_OK &&
		    code == 404) {
			pthread_mutex_lock(&c->write_lock);
			restore_locked(c, keys[k]);
			pthread_mutex_unlock(&c->write_lock);
		}
		mc_buf_release(&r.buf);
		mc_free(keys[k]);
	}
	mc_free(keys);
}

static void http_resync(struct mc_meta *m)
{
	check_round(client_of(m));
}

static void *checker_main(void *arg)
{
	struct http_client *c = arg;

	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		uint64_t until = mc_now_ms() + (uint64_t)c->check_ms;
		struct timespec ts = {.tv_sec = (time_t)(until / 1000),
				      .tv_nsec = (long)(until % 1000) * 1000000L};
		while (!c->stop && mc_now_ms() < until)
			pthread_cond_timedwait(&c->wake, &c->lock, &ts);
		if (c->stop)
			break;
		pthread_mutex_unlock(&c->lock);
		check_round(c);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static void http_close(struct mc_meta *m)
{
	struct http_client *c = client_of(m);

	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_broadcast(&c->wake);
	pthread_mutex_unlock(&c->lock);
	if (c->checker_started)
		pthread_join(c->checker, NULL);
	mc_meta_owned_clear(&c->owned);
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->write_lock);
	mc_curl_pool_release(&c->pool);
	if (c->auth_hdr)
		memset(c->auth_hdr, 0, strlen(c->auth_hdr));
	mc_free(c->auth_hdr);
	mc_free(c->ca_file);
	mc_free(c->base.uri);
	mc_free(c);
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
	{
		struct mc_meta_config cfg;

		if (mc_meta_config_load(&cfg) != MC_OK) {
			mc_free(c->base.uri);
			mc_free(c);
			return MC_ERR_INVALID_PARAMS;
		}
		c->timeout_ms = cfg.timeout_ms ? cfg.timeout_ms : HTTP_TIMEOUT_MS;
		c->check_ms = cfg.http_check_ms;
		mc_meta_config_release(&cfg);
	}
	{
		struct mc_auth_secret sec;

		if (mc_auth_secret_load(NULL, &sec) != MC_OK) {
			mc_free(c->base.uri);
			mc_free(c);
			return MC_ERR_INVALID_PARAMS;
		}
		if (mc_auth_on(&sec) &&
		    !(c->auth_hdr = mc_asprintf("Authorization: Bearer %s", sec.bytes))) {
			mc_auth_secret_release(&sec);
			mc_free(c->base.uri);
			mc_free(c);
			return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory opening %s",
					    uri);
		}
		mc_auth_secret_release(&sec);
	}
	{
		struct mc_http_tls tls;

		if (mc_http_tls_load(&tls) != MC_OK) {
			mc_free(c->auth_hdr);
			mc_free(c->base.uri);
			mc_free(c);
			return MC_ERR_INVALID_PARAMS;
		}
		c->ca_file = tls.ca_file;
		tls.ca_file = NULL;
		mc_http_tls_release(&tls);
	}
	c->connect_timeout_ms = MC_MAX(c->timeout_ms / 2, 1L);
	mc_curl_pool_init(&c->pool);
	pthread_mutex_init(&c->write_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	{
		pthread_condattr_t a;
		pthread_condattr_init(&a);
		pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
		pthread_cond_init(&c->wake, &a);
		pthread_condattr_destroy(&a);
	}
	mc_list_init(&c->owned);
	*out = &c->base;
	return MC_OK;
}

static const struct mc_meta_ops http_ops = {
	.name = "http",
	.get = http_get,
	.put = http_put,
	.del = http_del,
	.resync = http_resync,
	.close = http_close,
};

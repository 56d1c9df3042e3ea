/*
 * meta/http_server.c - the HTTP metadata server over libmicrohttpd.
 *
 * Speaks the protocol of upstream's mooncake_master variant (spec
 * transfer-engine.md 3.5):
 *   GET    /metadata?key=K  200 + stored bytes (application/json),
 *                           404 "metadata not found",
 *                           400 "Missing key parameter" (absent or empty)
 *   PUT    /metadata?key=K  200 "metadata updated"; for a key containing
 *                           "rpc_meta" that already exists: 200 "metadata
 *                           unchanged" when the bytes are identical, else
 *                           400 "Duplicate rpc_meta key not allowed"
 *   DELETE /metadata?key=K  200 "metadata deleted", 404 "metadata not found"
 *   GET    /health          200 "OK"
 * With a cluster secret (base/auth.h), PUT and DELETE (and POST) without
 * "Authorization: Bearer <secret>" are answered 401 before their body is
 * read (base/http.c); GET stays open.
 * Other paths are 404, other methods 405, request bodies above
 * MAX_BODY (64 MiB) 413.
 *
 * libmicrohttpd runs one internal polling thread (epoll or poll, its
 * choice); base/http.c does the plumbing (bodies collected up to
 * MAX_BODY, the bind address, MHD's messages) and calls on_request once
 * per complete request, which routes by the table below.
 *
 * Store: values are opaque bytes in a libc binary tree (tsearch, a
 * red-black tree in glibc) keyed by the decoded key, under store_lock, so
 * mc_http_meta_server_count() may be called from any thread.  Handlers
 * copy values into the response while holding the lock; nothing the tree
 * owns escapes it.
 */
#define MC_LOG_MODULE "meta"
#include "meta/http_server.h"

#include <pthread.h>
#include <search.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth.h"
#include "base/compiler.h"
#include "base/http.h"
#include "base/log.h"
#include "mooncake/status.h"

#define MAX_BODY	  (64ull << 20)
#define CONN_IDLE_TIMEOUT 60 /* seconds before MHD drops an idle connection */

#define CFG(f)		  offsetof(struct mc_http_meta_server_limits, f)
const struct mc_config_entry mc_http_meta_server_config_table[] = {
	{.f = {"http_metadata_max_conns", "MC_HTTP_METADATA_MAX_CONNS", "1000",
	       "HTTP metadata server: connections open at most; with fewer than 1/8 left free the "
	       "ones waiting longest for their request are cut",
	       CFG(max_conns), MC_CONFIG_INT, 8, 1000000}},
	{.f = {"http_metadata_max_conns_per_ip", "MC_HTTP_METADATA_MAX_CONNS_PER_IP", "0",
	       "HTTP metadata server: connections open from one address at most (more are closed "
	       "at once); 0 = no such cap",
	       CFG(max_conns_per_ip), MC_CONFIG_INT, 0, 1000000}},
	{.f = {"http_metadata_request_timeout_ms", "MC_HTTP_METADATA_REQUEST_TIMEOUT_MS", "30000",
	       "HTTP metadata server: a request must arrive whole within this (ms from the "
	       "connection or the previous request; slow senders are cut); 0 = no bound",
	       CFG(request_timeout_ms), MC_CONFIG_INT, 0, 3600000}},
};
#undef CFG
const size_t mc_http_meta_server_config_table_len = MC_ARRAY_SIZE(mc_http_meta_server_config_table);

void mc_http_meta_server_limits_from_env(struct mc_http_meta_server_limits *out)
{
	mc_config_entry_defaults(mc_http_meta_server_config_table,
				 mc_http_meta_server_config_table_len, out);
	mc_config_entry_load_env(mc_http_meta_server_config_table,
				 mc_http_meta_server_config_table_len, out);
}

struct kv_entry {
	char *key;
	char *value;
	size_t len;
};

struct mc_http_meta_server {
	struct mc_http *http;
	struct mc_auth_secret secret; /* PUT and DELETE need it (base/auth.h) */
	struct mc_http_tls tls;	      /* HTTPS when set (MC_HTTP_TLS_*) */
	pthread_mutex_t store_lock;   /* protects root and count */
	void *root;		      /* tsearch tree of struct kv_entry */
	uint64_t count;
};

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct kv_entry *)a)->key, ((const struct kv_entry *)b)->key);
}

static void entry_free(void *p)
{
	struct kv_entry *e = p;
	mc_free(e->key);
	mc_free(e->value);
	mc_free(e);
}

/* ---- responses ----------------------------------------------------------- */

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned code, const char *text)
{
	return mc_http_respond_text(conn, code, text, "text/plain");
}

/* ---- /metadata verbs ----------------------------------------------------- */

static enum MHD_Result do_get(struct mc_http_meta_server *s, struct MHD_Connection *conn,
			      const char *key)
{
	struct kv_entry probe = {.key = (char *)key};
	struct kv_entry **found;
	enum MHD_Result ret = MHD_NO;

	pthread_mutex_lock(&s->store_lock);
	found = tfind(&probe, &s->root, entry_cmp);
	if (found)
		ret = mc_http_respond(conn, MHD_HTTP_OK, (*found)->value, (*found)->len,
				      "application/json");
	pthread_mutex_unlock(&s->store_lock);
	if (!found)
		ret = respond_text(conn, MHD_HTTP_NOT_FOUND, "metadata not found");
	return ret;
}

static enum MHD_Result do_put(struct mc_http_meta_server *s, struct MHD_Connection *conn,
			      const char *key, const struct mc_http_request *req)
{
	struct kv_entry *e, **slot;
	char *value;

	e = mc_calloc(1, sizeof(*e));
	value = mc_malloc(req->body_len + 1);
	if (!e || !value || !(e->key = mc_strdup(key)))
		goto err_nomem;
	if (req->body_len)
		memcpy(value, req->body, req->body_len);
	value[req->body_len] = '\0';
	e->value = value;
	e->len = req->body_len;

	pthread_mutex_lock(&s->store_lock);
	slot = tsearch(e, &s->root, entry_cmp);
	if (!slot) {
		pthread_mutex_unlock(&s->store_lock);
		goto err_nomem;
	}
	if (*slot == e) {
		s->count++;
		pthread_mutex_unlock(&s->store_lock);
		return respond_text(conn, MHD_HTTP_OK, "metadata updated");
	}
	/* the key exists; e stays ours */
	if (strstr(key, "rpc_meta")) {
		bool same = (*slot)->len == e->len && memcmp((*slot)->value, e->value, e->len) == 0;
		pthread_mutex_unlock(&s->store_lock);
		entry_free(e);
		if (same)
			return respond_text(conn, MHD_HTTP_OK, "metadata unchanged");
		return respond_text(conn, MHD_HTTP_BAD_REQUEST,
				    "Duplicate rpc_meta key not allowed");
	}
	e->value = (*slot)->value;
	e->len = (*slot)->len;
	(*slot)->value = value;
	(*slot)->len = req->body_len;
	pthread_mutex_unlock(&s->store_lock);
	entry_free(e); /* frees the old value */
	return respond_text(conn, MHD_HTTP_OK, "metadata updated");

err_nomem:
	if (e)
		mc_free(e->key);
	mc_free(e);
	mc_free(value);
	mc_warn("http metadata server: out of memory storing key %s", key);
	return respond_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
}

static enum MHD_Result do_delete(struct mc_http_meta_server *s, struct MHD_Connection *conn,
				 const char *key)
{
	struct kv_entry probe = {.key = (char *)key};
	struct kv_entry **found, *e = NULL;

	pthread_mutex_lock(&s->store_lock);
	found = tfind(&probe, &s->root, entry_cmp);
	if (found) {
		e = *found;
		tdelete(e, &s->root, entry_cmp);
		s->count--;
	}
	pthread_mutex_unlock(&s->store_lock);
	if (!e)
		return respond_text(conn, MHD_HTTP_NOT_FOUND, "metadata not found");
	entry_free(e);
	return respond_text(conn, MHD_HTTP_OK, "metadata deleted");
}

/* ---- routing ------------------------------------------------------------- */

static enum MHD_Result page_health(void *arg, struct MHD_Connection *conn,
				   const struct mc_http_request *req)
{
	(void)arg;
	return respond_text(conn, MHD_HTTP_OK, "OK");
}

/* /metadata with its key; NULL (and 400 queued in *ret) without one. */
static const char *metadata_key(struct MHD_Connection *conn, enum MHD_Result *ret)
{
	const char *key = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "key");

	if (key && *key)
		return key;
	*ret = respond_text(conn, MHD_HTTP_BAD_REQUEST, "Missing key parameter");
	return NULL;
}

static enum MHD_Result page_get(void *arg, struct MHD_Connection *conn,
				const struct mc_http_request *req)
{
	enum MHD_Result ret;
	const char *key = metadata_key(conn, &ret);

	return key ? do_get(arg, conn, key) : ret;
}

static enum MHD_Result page_put(void *arg, struct MHD_Connection *conn,
				const struct mc_http_request *req)
{
	enum MHD_Result ret;
	const char *key = metadata_key(conn, &ret);

	return key ? do_put(arg, conn, key, req) : ret;
}

static enum MHD_Result page_delete(void *arg, struct MHD_Connection *conn,
				   const struct mc_http_request *req)
{
	enum MHD_Result ret;
	const char *key = metadata_key(conn, &ret);

	return key ? do_delete(arg, conn, key) : ret;
}

static const struct mc_http_route routes[] = {
	{"/health", MC_HTTP_GET, false, page_health},
	{"/metadata", MC_HTTP_GET, false, page_get},
	{"/metadata", MC_HTTP_PUT, false, page_put},
	{"/metadata", MC_HTTP_DELETE, false, page_delete},
};

static enum MHD_Result on_request(void *arg, struct MHD_Connection *conn,
				  const struct mc_http_request *req)
{
	bool known;
	const struct mc_http_route *r =
		mc_http_route_find(routes, MC_ARRAY_SIZE(routes), req, &known);

	if (r)
		return r->fn(arg, conn, req);
	if (known)
		return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
	return respond_text(conn, MHD_HTTP_NOT_FOUND, "not found");
}

/* ---- lifecycle ----------------------------------------------------------- */

mc_status mc_http_meta_server_start(const char *host, uint16_t port,
				    struct mc_http_meta_server **out)
{
	return mc_http_meta_server_start_limits(host, port, NULL, out);
}

mc_status mc_http_meta_server_start_limits(const char *host, uint16_t port,
					   const struct mc_http_meta_server_limits *lim,
					   struct mc_http_meta_server **out)
{
	struct mc_http_meta_server_limits env;
	struct mc_http_config cfg = {
		.name = "http metadata server",
		.host = host,
		.port = port,
		.prefer_ipv4 = true,
		.threads = 0,
		.idle_timeout_s = CONN_IDLE_TIMEOUT,
		.max_body = MAX_BODY,
		.handler = on_request,
	};
	struct mc_http_meta_server *s;
	mc_status status;

	if (!out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "http metadata server: NULL output");
	if (!lim) {
		/* on its own (mooncake_http_metadata_server) it has the process to itself */
		mc_http_meta_server_limits_from_env(&env);
		env.max_conns = (int64_t)mc_accept_cap_for_fds("http metadata server",
							       (uint64_t)env.max_conns, 90);
		lim = &env;
	}
	cfg.max_conns = (unsigned)lim->max_conns;
	cfg.request_timeout_ms = (unsigned)lim->request_timeout_ms;
	cfg.max_conns_per_ip = (unsigned)lim->max_conns_per_ip;
	s = mc_calloc(1, sizeof(*s));
	if (!s)
		return mc_set_error(MC_ERR_NOMEM, "http metadata server: out of memory");
	status = mc_auth_secret_load(NULL, &s->secret);
	if (status == MC_OK && (status = mc_http_tls_load(&s->tls)) != MC_OK)
		mc_auth_secret_release(&s->secret);
	if (status != MC_OK) {
		mc_free(s);
		return status;
	}
	cfg.tls = &s->tls;
	pthread_mutex_init(&s->store_lock, NULL);
	cfg.arg = s;
	cfg.auth = &s->secret;
	cfg.auth_methods = MC_HTTP_PUT | MC_HTTP_DELETE | MC_HTTP_POST;
	status = mc_http_open(&cfg, &s->http);
	if (status != MC_OK)
		goto err_free_server;
	mc_auth_warn_open(&s->secret, "the HTTP metadata server", host);
	*out = s;
	return MC_OK;

err_free_server:
	mc_auth_secret_release(&s->secret);
	mc_http_tls_release(&s->tls);
	pthread_mutex_destroy(&s->store_lock);
	mc_free(s);
	return status;
}

uint16_t mc_http_meta_server_port(const struct mc_http_meta_server *s)
{
	return s ? mc_http_port(s->http) : 0;
}

uint64_t mc_http_meta_server_count(struct mc_http_meta_server *s)
{
	uint64_t n;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->store_lock);
	n = s->count;
	pthread_mutex_unlock(&s->store_lock);
	return n;
}

void mc_http_meta_server_counts(struct mc_http_meta_server *s, struct mc_http_counts *out)
{
	if (!s) {
		memset(out, 0, sizeof(*out));
		return;
	}
	mc_http_counts(s->http, out);
}

mc_status mc_http_meta_server_get(struct mc_http_meta_server *s, const char *key, char **value_out,
				  size_t *len_out)
{
	struct kv_entry probe = {.key = (char *)key};
	struct kv_entry **found;
	mc_status st = MC_ERR_NOT_FOUND;
	char *v = NULL;
	size_t len = 0;

	if (!s || !key || !value_out || !len_out)
		return MC_ERR_INVALID_PARAMS;
	pthread_mutex_lock(&s->store_lock);
	found = tfind(&probe, &s->root, entry_cmp);
	if (found) {
		len = (*found)->len;
		v = mc_malloc(len + 1);
		if (v) {
			memcpy(v, (*found)->value, len);
			v[len] = '\0';
			st = MC_OK;
		} else {
			st = MC_ERR_NOMEM;
		}
	}
	pthread_mutex_unlock(&s->store_lock);
	if (st == MC_OK) {
		*value_out = v;
		*len_out = len;
	}
	return st;
}

void mc_http_meta_server_stop(struct mc_http_meta_server *s)
{
	if (!s)
		return;
	mc_http_close(s->http);
	mc_auth_secret_release(&s->secret);
	mc_http_tls_release(&s->tls);
	tdestroy(s->root, entry_free);
	pthread_mutex_destroy(&s->store_lock);
	mc_free(s);
}

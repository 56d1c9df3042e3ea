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
 * Other paths are 404, other methods 405, request bodies above
 * MAX_BODY (64 MiB) 413.
 *
 * libmicrohttpd runs one internal polling thread (epoll or poll, its
 * choice).  The access handler is called several times per request: the
 * first call only attaches a struct request to the connection, the next
 * ones append upload chunks to it, and the last (upload size 0) answers.
 * The request is freed by the completion callback, which MHD calls for
 * every request it started, answered or not.
 *
 * Store: values are opaque bytes in a libc binary tree (tsearch, a
 * red-black tree in glibc) keyed by the decoded key, under store_lock, so
 * mc_http_meta_server_count() may be called from any thread.  Handlers
 * copy values into the response while holding the lock; nothing the tree
 * owns escapes it.
 */
#define MC_LOG_MODULE "meta"
#include "meta/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <search.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/log.h"
#include "mooncake/status.h"

#define MAX_BODY	  (64ull << 20)
#define CONN_IDLE_TIMEOUT 60 /* seconds before MHD drops an idle connection */

struct kv_entry {
	char *key;
	char *value;
	size_t len;
};

struct mc_http_meta_server {
	struct MHD_Daemon *daemon;
	uint16_t port;
	pthread_mutex_t store_lock; /* protects root and count */
	void *root;		    /* tsearch tree of struct kv_entry */
	uint64_t count;
	char start_msg[256]; /* MHD's last message while starting, for the error */
	atomic_bool started; /* set once MHD_start_daemon returned */
};

struct request {
	char *body;
	size_t len;
	size_t cap;
	bool too_large;
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

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned code, const void *body,
			       size_t len, const char *content_type)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (content_type)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned code, const char *text)
{
	return respond(conn, code, text, strlen(text), "text/plain");
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
		ret = respond(conn, MHD_HTTP_OK, (*found)->value, (*found)->len,
			      "application/json");
	pthread_mutex_unlock(&s->store_lock);
	if (!found)
		ret = respond_text(conn, MHD_HTTP_NOT_FOUND, "metadata not found");
	return ret;
}

static enum MHD_Result do_put(struct mc_http_meta_server *s, struct MHD_Connection *conn,
			      const char *key, struct request *req)
{
	struct kv_entry *e, **slot;
	char *value;

	e = mc_calloc(1, sizeof(*e));
	value = mc_malloc(req->len + 1);
	if (!e || !value || !(e->key = mc_strdup(key)))
		goto err_nomem;
	if (req->len)
		memcpy(value, req->body, req->len);
	value[req->len] = '\0';
	e->value = value;
	e->len = req->len;

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
	(*slot)->len = req->len;
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

/* ---- request plumbing ---------------------------------------------------- */

/* Append an upload chunk; bodies past MAX_BODY are dropped and flagged. */
static bool request_append(struct request *req, const char *data, size_t n)
{
	if (req->too_large || n > MAX_BODY - req->len) {
		req->too_large = true;
		return true;
	}
	if (req->len + n > req->cap) {
		size_t cap = req->cap ? req->cap : 4096;
		char *p;
		while (cap < req->len + n)
			cap *= 2;
		if (cap > MAX_BODY)
			cap = MAX_BODY;
		p = mc_realloc(req->body, cap);
		if (!p)
			return false;
		req->body = p;
		req->cap = cap;
	}
	memcpy(req->body + req->len, data, n);
	req->len += n;
	return true;
}

static bool content_length_too_large(struct MHD_Connection *conn)
{
	const char *cl =
		MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	char *end;
	unsigned long long n;

	if (!cl)
		return false;
	n = strtoull(cl, &end, 10);
	return *end == '\0' && n > MAX_BODY;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct mc_http_meta_server *s = cls;
	struct request *req = *con_cls;
	const char *key;

	if (!req) {
		req = mc_calloc(1, sizeof(*req));
		if (!req)
			return MHD_NO;
		*con_cls = req;
		/* refuse an announced oversized body before it is sent */
		if (content_length_too_large(conn))
			return respond_text(conn, MHD_HTTP_CONTENT_TOO_LARGE,
					    "request body too large");
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (!request_append(req, upload_data, *upload_data_size))
			return MHD_NO;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (req->too_large)
		return respond_text(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large");

	if (strcmp(url, "/health") == 0) {
		if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
			return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
					    "method not allowed");
		return respond_text(conn, MHD_HTTP_OK, "OK");
	}
	if (strcmp(url, "/metadata") != 0)
		return respond_text(conn, MHD_HTTP_NOT_FOUND, "not found");

	key = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "key");
	if (strcmp(method, MHD_HTTP_METHOD_GET) == 0) {
		if (!key || !*key)
			return respond_text(conn, MHD_HTTP_BAD_REQUEST, "Missing key parameter");
		return do_get(s, conn, key);
	}
	if (strcmp(method, MHD_HTTP_METHOD_PUT) == 0) {
		if (!key || !*key)
			return respond_text(conn, MHD_HTTP_BAD_REQUEST, "Missing key parameter");
		return do_put(s, conn, key, req);
	}
	if (strcmp(method, MHD_HTTP_METHOD_DELETE) == 0) {
		if (!key || !*key)
			return respond_text(conn, MHD_HTTP_BAD_REQUEST, "Missing key parameter");
		return do_delete(s, conn, key);
	}
	return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct request *req = *con_cls;

	if (!req)
		return;
	mc_free(req->body);
	mc_free(req);
	*con_cls = NULL;
}

/*
 * MHD's messages are mostly about misbehaving clients, which a library
 * should not shout about: they go to debug.  While the daemon starts (only
 * the starting thread runs then) the last one is kept for the error text,
 * since it holds the reason, e.g. the bind() failure.
 */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct mc_http_meta_server *s = cls;
	char msg[512];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	if (!atomic_load(&s->started))
		snprintf(s->start_msg, sizeof(s->start_msg), "%s", msg);
	mc_debug("http metadata server: %s", msg);
}

/* ---- lifecycle ----------------------------------------------------------- */

/* Resolve host for binding; IPv4 preferred when a name has both. */
static int resolve_bind(const char *host, uint16_t port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res, *ai, *pick = NULL;
	int rc;

	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc)
		return mc_set_error(MC_ERR_DNS, "http metadata server: cannot resolve %s: %s", host,
				    gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			pick = ai;
			break;
		}
		if (ai->ai_family == AF_INET6 && !pick)
			pick = ai;
	}
	if (!pick) {
		freeaddrinfo(res);
		return mc_set_error(MC_ERR_DNS, "http metadata server: no IP address for %s", host);
	}
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, pick->ai_addr, pick->ai_addrlen);
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	freeaddrinfo(res);
	return MC_OK;
}

int mc_http_meta_server_start(const char *host, uint16_t port, struct mc_http_meta_server **out)
{
	struct sockaddr_storage ss;
	struct mc_http_meta_server *s;
	unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
	const union MHD_DaemonInfo *info;
	int status;

	if (!out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "http metadata server: NULL output");
	if (!host || !*host)
		host = "0.0.0.0";
	status = resolve_bind(host, port, &ss);
	if (status)
		return status;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;

	s = mc_calloc(1, sizeof(*s));
	if (!s)
		return mc_set_error(MC_ERR_NOMEM, "http metadata server: out of memory");
	pthread_mutex_init(&s->store_lock, NULL);
	s->daemon = MHD_start_daemon(
		flags, port, NULL, NULL, on_request, s,
		/* the logger first, so MHD's own start-up messages use it */
		MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_SOCK_ADDR,
		(struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_IDLE_TIMEOUT, MHD_OPTION_END);
	if (!s->daemon) {
		status = mc_set_error(
			MC_ERR_SOCKET, "http metadata server: cannot listen on %s port %u: %s",
			host, port, s->start_msg[0] ? s->start_msg : "libmicrohttpd refused");
		goto err_free_server;
	}
	atomic_store(&s->started, true);
	info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info && info->port ? info->port : port;
	*out = s;
	return MC_OK;

err_free_server:
	pthread_mutex_destroy(&s->store_lock);
	mc_free(s);
	return status;
}

uint16_t mc_http_meta_server_port(const struct mc_http_meta_server *s)
{
	return s ? s->port : 0;
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

void mc_http_meta_server_stop(struct mc_http_meta_server *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->daemon);
	tdestroy(s->root, entry_free);
	pthread_mutex_destroy(&s->store_lock);
	mc_free(s);
}

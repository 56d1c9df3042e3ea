/*
 * base/http.c - libmicrohttpd glue (see http.h for the contract).
 *
 * MHD calls the access handler several times per request: first with
 * the headers only, then once per chunk of body, then once more with no
 * data, when the answer is due.  The first call attaches a struct
 * http_req to the connection (*con_cls), the chunk calls append to its
 * buffer, and the last call hands the whole request to the server's
 * handler.  MHD calls on_completed for every request it started,
 * answered or not, which frees the struct.  A server that keeps no
 * bodies (max_body 0) gets the static drain_mark instead of a struct, so
 * its requests allocate nothing here.
 *
 * The bind address is resolved here rather than by MHD so that a name
 * (not only a literal) can be given, and so that the family is our
 * choice: the metadata server prefers IPv4 for a name that has both, as
 * upstream's does; the admin service takes the resolver's first answer.
 */
#define MC_LOG_MODULE "http"
#include "base/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"

#define SWEEP_MS 100

/* One open connection (the socket context MHD keeps for us). */
struct http_conn {
	struct mc_list link; /* in h->conns, under h->lock */
	int fd;
	uint64_t since_ms; /* its current request began (accept or the previous one's end) */
	bool cut;	   /* shut down by the sweeper; MHD closes it */
};

struct mc_http {
	struct MHD_Daemon *daemon;
	pthread_mutex_t lock; /* conns, nconns, ncut, stopping */
	pthread_cond_t wake;
	struct mc_list conns; /* struct http_conn, oldest request first is not kept: scanned */
	unsigned nconns, ncut;
	bool stopping;
	pthread_t sweeper;
	bool sweeper_started;
	uint64_t cut_deadline, cut_room;
	struct mc_http_config cfg; /* host not kept: it is the caller's */
	uint16_t port;
	atomic_bool starting; /* MHD messages are kept while it starts... */
	char start_msg[256];  /* ...the last one names a bind failure */
};

/* What the first handler call attaches to a request with a body kept. */
struct http_req {
	struct mc_buf body;
	bool too_large; /* the body passed max_body: dropped, answered 413 */
};

static char drain_mark; /* *con_cls of a request whose body is not kept */

/* ---- responses ----------------------------------------------------------- */

enum MHD_Result mc_http_respond(struct MHD_Connection *conn, unsigned code, const void *body,
				size_t len, const char *ctype)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (ctype)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

enum MHD_Result mc_http_respond_text(struct MHD_Connection *conn, unsigned code, const char *text,
				     const char *ctype)
{
	return mc_http_respond(conn, code, text, strlen(text), ctype);
}

static enum MHD_Result respond_too_large(struct MHD_Connection *conn)
{
	return mc_http_respond_text(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large",
				    "text/plain");
}

/* ---- routing ------------------------------------------------------------- */

static unsigned method_bit(const char *method)
{
	static const struct {
		const char *name;
		unsigned bit;
	} methods[] = {
		{MHD_HTTP_METHOD_GET, MC_HTTP_GET},	  {MHD_HTTP_METHOD_HEAD, MC_HTTP_HEAD},
		{MHD_HTTP_METHOD_POST, MC_HTTP_POST},	  {MHD_HTTP_METHOD_PUT, MC_HTTP_PUT},
		{MHD_HTTP_METHOD_DELETE, MC_HTTP_DELETE},
	};

	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (strcmp(method, methods[i].name) == 0)
			return methods[i].bit;
	return 0;
}

const struct mc_http_route *mc_http_route_find(const struct mc_http_route *routes, size_t n,
					       const struct mc_http_request *req,
					       bool *path_known_out)
{
	bool known = false;

	for (size_t i = 0; i < n; i++) {
		const struct mc_http_route *r = &routes[i];
		bool path = r->prefix ? strncmp(req->url, r->path, strlen(r->path)) == 0
				      : strcmp(req->url, r->path) == 0;

		if (!path)
			continue;
		known = true;
		if (!r->methods || (r->methods & req->method_bit)) {
			if (path_known_out)
				*path_known_out = true;
			return r;
		}
	}
	if (path_known_out)
		*path_known_out = known;
	return NULL;
}

/* ---- request plumbing ---------------------------------------------------- */

/* Append an upload chunk; bodies past max are dropped and flagged.  false
 * when out of memory (the connection is dropped then). */
static bool body_append(struct http_req *r, size_t max, const char *data, size_t n)
{
	if (r->too_large || n > max - r->body.len) {
		r->too_large = true;
		return true;
	}
	if (mc_buf_reserve(&r->body, n) != MC_OK)
		return false;
	mc_buf_append(&r->body, data, n);
	return true;
}

static bool content_length_too_large(struct MHD_Connection *conn, size_t max)
{
	const char *cl =
		MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	char *end;
	unsigned long long n;

	if (!cl)
		return false;
	n = strtoull(cl, &end, 10);
	return *end == '\0' && n > max;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct mc_http *h = cls;
	struct http_req *r = *con_cls;
	bool kept = *con_cls != &drain_mark;
	struct mc_http_request req;

	if (!r) {
		if (!h->cfg.max_body) {
			*con_cls = &drain_mark;
			return MHD_YES;
		}
		r = mc_calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		mc_buf_init(&r->body);
		*con_cls = r;
		/* refuse an announced oversized body before it is sent */
		if (content_length_too_large(conn, h->cfg.max_body))
			return respond_too_large(conn);
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (kept && !body_append(r, h->cfg.max_body, upload_data, *upload_data_size))
			return MHD_NO;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (kept && r->too_large)
		return respond_too_large(conn);

	req.method = method;
	req.method_bit = method_bit(method);
	req.url = url;
	req.body = kept && r->body.len ? r->body.data : NULL;
	req.body_len = kept ? r->body.len : 0;
	return h->cfg.handler(h->cfg.arg, conn, &req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct mc_http *h = cls;
	struct http_req *r = *con_cls;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	/* the next request on this connection gets its own time */
	if (ci && ci->socket_context) {
		struct http_conn *c = ci->socket_context;
		pthread_mutex_lock(&h->lock);
		c->since_ms = mc_now_ms();
		pthread_mutex_unlock(&h->lock);
	}

	if (r && *con_cls != &drain_mark) {
		mc_buf_release(&r->body);
		mc_free(r);
	}
	*con_cls = NULL;
}

/* ---- connection bounds ---------------------------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct mc_http *h = cls;
	struct http_conn *c = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		c = mc_calloc(1, sizeof(*c));
		if (!c)
			return; /* untracked: only MHD's own limits apply to it */
		c->fd = ci ? ci->connect_fd : -1;
		c->since_ms = mc_now_ms();
		pthread_mutex_lock(&h->lock);
		mc_list_add_tail(&h->conns, &c->link);
		h->nconns++;
		/* running short of room: let the sweeper make some now */
		if (h->cfg.max_conns - (h->nconns - h->ncut) < h->cfg.max_conns / 8 + 1)
			pthread_cond_signal(&h->wake);
		pthread_mutex_unlock(&h->lock);
		*socket_context = c;
		return;
	}
	if (!c)
		return;
	/* MHD closes the socket after this returns: the sweeper, which
	 * shuts sockets down under the lock, never sees a reused number */
	pthread_mutex_lock(&h->lock);
	mc_list_del(&c->link);
	h->nconns--;
	if (c->cut)
		h->ncut--;
	pthread_mutex_unlock(&h->lock);
	mc_free(c);
	*socket_context = NULL;
}

static void conn_cut_locked(struct mc_http *h, struct http_conn *c)
{
	if (c->fd >= 0)
		shutdown(c->fd, SHUT_RDWR);
	c->cut = true;
	h->ncut++;
}

/* Cut what passed its deadline, then, while room is short, the longest waiting. */
static void sweep_locked(struct mc_http *h, uint64_t now)
{
	unsigned reserve = h->cfg.max_conns / 8 + 1, cut_deadline = 0, cut_room = 0;
	struct mc_list *pos;

	mc_list_for_each(pos, &h->conns) {
		struct http_conn *c = mc_list_entry(pos, struct http_conn, link);
		if (!c->cut && h->cfg.request_timeout_ms &&
		    now - c->since_ms >= h->cfg.request_timeout_ms) {
			conn_cut_locked(h, c);
			cut_deadline++;
		}
	}
	while (h->cfg.max_conns - (h->nconns - h->ncut) < reserve) {
		struct http_conn *oldest = NULL;
		mc_list_for_each(pos, &h->conns) {
			struct http_conn *c = mc_list_entry(pos, struct http_conn, link);
			if (!c->cut && now - c->since_ms >= MC_HTTP_MIN_WAIT_MS &&
			    (!oldest || c->since_ms < oldest->since_ms))
				oldest = c;
		}
		if (!oldest)
			break;
		conn_cut_locked(h, oldest);
		cut_room++;
	}
	h->cut_deadline += cut_deadline;
	h->cut_room += cut_room;
	if (cut_deadline || cut_room)
		mc_info("%s: cut %u connections past the %u ms request deadline and %u for room "
			"(%u open, at most %u)",
			h->cfg.name, cut_deadline, h->cfg.request_timeout_ms, cut_room, h->nconns,
			h->cfg.max_conns);
}

static void *sweeper_main(void *arg)
{
	struct mc_http *h = arg;

	pthread_mutex_lock(&h->lock);
	while (!h->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += SWEEP_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&h->wake, &h->lock, &ts);
		if (!h->stopping)
			sweep_locked(h, mc_now_ms());
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

void mc_http_cut_counts(struct mc_http *h, uint64_t *deadline_out, uint64_t *room_out)
{
	pthread_mutex_lock(&h->lock);
	*deadline_out = h->cut_deadline;
	*room_out = h->cut_room;
	pthread_mutex_unlock(&h->lock);
}

/*
 * MHD's messages are mostly about misbehaving clients, which a library
 * should not shout about: they go to debug.  While the daemon starts (only
 * the starting thread runs then) the last one is kept for the error text,
 * since it holds the reason, e.g. the bind() failure.
 */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct mc_http *h = cls;
	char msg[512];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	if (atomic_load(&h->starting))
		snprintf(h->start_msg, sizeof(h->start_msg), "%s", msg);
	mc_debug("%s: %s", h->cfg.name, msg);
}

/* ---- lifecycle ----------------------------------------------------------- */

/* Resolve host for binding into *ss with port set. */
static mc_status resolve_bind(const struct mc_http_config *cfg, const char *host,
			      struct sockaddr_storage *ss)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res, *ai, *pick = NULL;
	int rc;

	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc)
		return mc_set_error(MC_ERR_DNS, "%s: cannot resolve %s: %s", cfg->name, host,
				    gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		if (!pick)
			pick = ai;
		if (!cfg->prefer_ipv4 || ai->ai_family == AF_INET) {
			pick = ai;
			break;
		}
	}
	if (!pick) {
		freeaddrinfo(res);
		return mc_set_error(MC_ERR_DNS, "%s: no IP address for %s", cfg->name, host);
	}
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, pick->ai_addr, pick->ai_addrlen);
	freeaddrinfo(res);
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(cfg->port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons(cfg->port);
	return MC_OK;
}

mc_status mc_http_open(const struct mc_http_config *cfg, struct mc_http **out)
{
	struct sockaddr_storage ss;
	struct mc_http *h;
	unsigned flags = MHD_USE_ERROR_LOG;
	const union MHD_DaemonInfo *info;
	const char *host;
	mc_status st;

	if (!cfg || !cfg->name || !cfg->handler || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "http: NULL config, handler or output");
	host = cfg->host && *cfg->host ? cfg->host : "0.0.0.0";
	st = resolve_bind(cfg, host, &ss);
	if (st != MC_OK)
		return st;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* never select(): it cannot take descriptors above FD_SETSIZE */
	flags |= cfg->threads ? MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO
			      : MHD_USE_AUTO_INTERNAL_THREAD;

	h = mc_calloc(1, sizeof(*h));
	if (!h)
		return mc_set_error(MC_ERR_NOMEM, "%s: out of memory", cfg->name);
	h->cfg = *cfg;
	h->cfg.host = NULL;
	if (!h->cfg.max_conns)
		h->cfg.max_conns = MC_HTTP_DEFAULT_MAX_CONNS;
	mc_list_init(&h->conns);
	pthread_mutex_init(&h->lock, NULL);
	{
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&h->wake, &ca);
		pthread_condattr_destroy(&ca);
	}
	atomic_store(&h->starting, true);
	{
		struct MHD_OptionItem opts[] = {
			{MHD_OPTION_SOCK_ADDR, 0, &ss},
			{MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->idle_timeout_s, NULL},
			{MHD_OPTION_CONNECTION_LIMIT, (intptr_t)h->cfg.max_conns, NULL},
			{MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h},
			/* pool size first dropped when there is no pool */
			{cfg->threads ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
			 (intptr_t)cfg->threads, NULL},
			{MHD_OPTION_END, 0, NULL},
		};
		/* the logger first, so MHD's own start-up messages use it */
		h->daemon = MHD_start_daemon(flags, cfg->port, NULL, NULL, on_request, h,
					     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
					     MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
					     MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
	}
	atomic_store(&h->starting, false);
	if (!h->daemon) {
		st = mc_set_error(MC_ERR_SOCKET, "%s: cannot listen on %s port %u: %s", cfg->name,
				  host, cfg->port,
				  h->start_msg[0] ? h->start_msg : "libmicrohttpd refused");
		goto err_free;
	}
	if (pthread_create(&h->sweeper, NULL, sweeper_main, h) != 0) {
		st = mc_set_error(MC_ERR_INTERNAL, "%s: cannot start its sweeper thread",
				  cfg->name);
		MHD_stop_daemon(h->daemon);
		goto err_free;
	}
	h->sweeper_started = true;
	info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info && info->port ? info->port : cfg->port;
	*out = h;
	return MC_OK;

err_free:
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->lock);
	mc_free(h);
	return st;
}

uint16_t mc_http_port(const struct mc_http *h)
{
	return h ? h->port : 0;
}

void mc_http_close(struct mc_http *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stopping = true;
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->lock);
	if (h->sweeper_started)
		pthread_join(h->sweeper, NULL);
	MHD_stop_daemon(h->daemon); /* closes every connection (notified) */
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->lock);
	mc_free(h);
}

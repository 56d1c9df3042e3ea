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
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth.h"
#include "base/buf.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"

#define SWEEP_MS       100
#define LISTEN_BACKLOG 1024

/* A peer's address without its port: what the per-address cap counts by. */
struct peer_addr {
	uint8_t len; /* 4 (IPv4, also IPv4-mapped IPv6) or 16; 0 = unknown, never counted */
	uint8_t b[16];
};

/* A connection handed to MHD that MHD has not registered yet. */
struct pending_conn {
	int fd;
	struct peer_addr peer;
};

/* One open connection (the socket context MHD keeps for us). */
struct http_conn {
	struct mc_list link; /* in h->conns, under h->lock */
	int fd;
	struct peer_addr peer;
	uint64_t since_ms; /* its current request began (accept or the previous one's end) */
	bool cut;	   /* shut down by the sweeper; MHD closes it */
};

struct mc_http {
	struct MHD_Daemon *daemon;
	int lfd;	      /* the listening socket: accepted here, handed to MHD */
	int wakefd;	      /* eventfd: stop */
	atomic_bool stopping; /* the acceptor thread returns */
	struct mc_accept_guard guard;
	pthread_mutex_t lock; /* conns, nconns, ncut, pend, npend */
	struct mc_list conns; /* struct http_conn, scanned (max_conns at most) */
	unsigned nconns, ncut;
	/* handed to MHD, not yet registered (MHD_CONNECTION_NOTIFY_STARTED): a pool
	 * takes them on its own threads a moment later */
	struct pending_conn *pend;
	unsigned npend, pend_cap;
	pthread_t acceptor;
	bool acceptor_started;
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

/* ---- TLS ------------------------------------------------------------------ */

struct tls_env {
	char *cert, *key, *ca;
};

#define CFG(f) offsetof(struct tls_env, f)
const struct mc_config_entry mc_http_tls_config_table[] = {
	{.f = {"http_tls_cert_file", "MC_HTTP_TLS_CERT_FILE", "",
	       "PEM certificate chain: the HTTP metadata server and the master's admin port "
	       "serve HTTPS with it (with MC_HTTP_TLS_KEY_FILE); empty: plain HTTP",
	       CFG(cert), MC_CONFIG_STRING, 0, 0}},
	{.f = {"http_tls_key_file", "MC_HTTP_TLS_KEY_FILE", "", "its PEM private key", CFG(key),
	       MC_CONFIG_STRING, 0, 0}},
	{.f = {"http_tls_ca_file", "MC_HTTP_TLS_CA_FILE", "",
	       "PEM CA bundle an https:// metadata URL's server is checked against (empty: the "
	       "system's)",
	       CFG(ca), MC_CONFIG_STRING, 0, 0}},
};
#undef CFG
const size_t mc_http_tls_config_table_len = MC_ARRAY_SIZE(mc_http_tls_config_table);

#define PEM_MAX (1u << 20)

mc_status mc_http_tls_load(struct mc_http_tls *out)
{
	struct tls_env env = {0};
	size_t len;
	mc_status rc = MC_OK;

	memset(out, 0, sizeof(*out));
	mc_config_entry_defaults(mc_http_tls_config_table, mc_http_tls_config_table_len, &env);
	mc_config_entry_load_env(mc_http_tls_config_table, mc_http_tls_config_table_len, &env);
	if (!*env.cert != !*env.key)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "MC_HTTP_TLS_CERT_FILE and MC_HTTP_TLS_KEY_FILE go together");
	if (rc == MC_OK && *env.cert)
		rc = mc_auth_file_read("TLS certificate", env.cert, PEM_MAX, MC_AUTH_FILE_PUBLIC,
				       &out->cert, &len);
	if (rc == MC_OK && *env.key)
		rc = mc_auth_file_read("TLS key", env.key, PEM_MAX, MC_AUTH_FILE_KEY, &out->key,
				       &len);
	if (rc == MC_OK && *env.ca && !(out->ca_file = mc_strdup(env.ca)))
		rc = MC_ERR_NOMEM;
	mc_config_entry_release(mc_http_tls_config_table, mc_http_tls_config_table_len, &env);
	if (rc != MC_OK)
		mc_http_tls_release(out);
	return rc;
}

void mc_http_tls_release(struct mc_http_tls *t)
{
	if (!t)
		return;
	if (t->key)
		memset(t->key, 0, strlen(t->key));
	mc_free(t->key);
	mc_free(t->cert);
	mc_free(t->ca_file);
	memset(t, 0, sizeof(*t));
}

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

/* A request the server's secret guards carries it (cfg.auth). */
static bool authorized(struct mc_http *h, struct MHD_Connection *conn, const char *method,
		       const char *url)
{
	const char *hdr;

	if (!mc_auth_on(h->cfg.auth) || !(h->cfg.auth_methods & method_bit(method)))
		return true;
	hdr = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (mc_auth_bearer_ok(h->cfg.auth, hdr))
		return true;
	mc_warn("%s: refused %s %s: %s bearer token", h->cfg.name, method, url,
		hdr ? "wrong" : "no");
	return false;
}

static enum MHD_Result respond_unauthorized(struct MHD_Connection *conn)
{
	static const char text[] = "authentication required";
	struct MHD_Response *resp = MHD_create_response_from_buffer(sizeof(text) - 1, (void *)text,
								    MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
				"Bearer realm=\"mooncake\"");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = MHD_queue_response(conn, MHD_HTTP_UNAUTHORIZED, resp);
	MHD_destroy_response(resp);
	return ret;
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
		if (!authorized(h, conn, method, url))
			return respond_unauthorized(conn);
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
	req.server = h;
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

static void peer_addr_of(const struct sockaddr *sa, struct peer_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (sa && sa->sa_family == AF_INET) {
		out->len = 4;
		memcpy(out->b, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		/* an IPv4 client of a dual-stack socket is the same client as over IPv4 */
		out->len = IN6_IS_ADDR_V4MAPPED(a) ? 4 : 16;
		memcpy(out->b, a->s6_addr + (out->len == 4 ? 12 : 0), out->len);
	}
}

static bool peer_addr_eq(const struct peer_addr *a, const struct peer_addr *b)
{
	return a->len && a->len == b->len && memcmp(a->b, b->b, a->len) == 0;
}

/*
 * Note fd as handed to MHD.  An entry with the same number is stale (MHD
 * closed that connection without registering it): it is replaced.  false
 * when out of memory.
 */
static bool pend_add_locked(struct mc_http *h, int fd, const struct peer_addr *peer)
{
	unsigned i;

	for (i = 0; i < h->npend && h->pend[i].fd != fd; i++)
		;
	if (i == h->npend) {
		if (h->npend == h->pend_cap) {
			unsigned cap = h->pend_cap ? h->pend_cap * 2 : 16;
			struct pending_conn *p = mc_realloc(h->pend, cap * sizeof(*p));
			if (!p)
				return false;
			h->pend = p;
			h->pend_cap = cap;
		}
		h->npend++;
	}
	h->pend[i].fd = fd;
	h->pend[i].peer = *peer;
	return true;
}

/* fd is registered (or MHD gave up on it): forget it; its peer into *peer_out. */
static bool pend_take_locked(struct mc_http *h, int fd, struct peer_addr *peer_out)
{
	for (unsigned i = 0; i < h->npend; i++) {
		if (h->pend[i].fd != fd)
			continue;
		*peer_out = h->pend[i].peer;
		h->pend[i] = h->pend[--h->npend];
		return true;
	}
	return false;
}

static void refused_per_peer(struct mc_http *h, const struct peer_addr *peer, unsigned open,
			     uint64_t now)
{
	char text[INET6_ADDRSTRLEN];

	if (!inet_ntop(peer->len == 4 ? AF_INET : AF_INET6, peer->b, text, sizeof(text)))
		snprintf(text, sizeof(text), "?");
	mc_accept_refused_per_peer(&h->guard, text, open, h->cfg.max_conns_per_ip, now);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct mc_http *h = cls;
	struct http_conn *c = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		int fd = ci ? ci->connect_fd : -1;
		struct peer_addr peer;

		c = mc_calloc(1, sizeof(*c));
		pthread_mutex_lock(&h->lock);
		if (!pend_take_locked(h, fd, &peer)) {
			ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
			peer_addr_of(ci ? ci->client_addr : NULL, &peer);
		}
		if (c) {
			c->fd = fd;
			c->peer = peer;
			c->since_ms = mc_now_ms();
			mc_list_add_tail(&h->conns, &c->link);
			h->nconns++;
		}
		pthread_mutex_unlock(&h->lock);
		*socket_context = c; /* NULL, untracked: only MHD's own limits apply to it */
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

/* Free places below max_conns; negative when MHD registered more than the
 * acceptor saw (it counts them from MHD's threads, a moment later). */
static int64_t room_locked(const struct mc_http *h)
{
	return (int64_t)h->cfg.max_conns - (int64_t)(h->nconns + h->npend - h->ncut);
}

/* Connections open from peer (registered and not cut, or pending). */
static unsigned peer_open_locked(const struct mc_http *h, const struct peer_addr *peer)
{
	const struct mc_list *pos;
	unsigned n = 0;

	mc_list_for_each(pos, &h->conns) {
		const struct http_conn *c = mc_list_entry(pos, struct http_conn, link);
		n += !c->cut && peer_addr_eq(&c->peer, peer);
	}
	for (unsigned i = 0; i < h->npend; i++)
		n += peer_addr_eq(&h->pend[i].peer, peer);
	return n;
}

/* How long c has waited for its request (0 when it came after now was read). */
static uint64_t conn_age(const struct http_conn *c, uint64_t now)
{
	return now > c->since_ms ? now - c->since_ms : 0;
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
		    conn_age(c, now) >= h->cfg.request_timeout_ms) {
			conn_cut_locked(h, c);
			cut_deadline++;
		}
	}
	while (room_locked(h) < (int64_t)reserve) {
		struct http_conn *oldest = NULL;
		mc_list_for_each(pos, &h->conns) {
			struct http_conn *c = mc_list_entry(pos, struct http_conn, link);
			if (!c->cut && conn_age(c, now) >= MC_HTTP_MIN_WAIT_MS &&
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

/* Accept what waits and hand it to MHD; false when accepting must pause. */
static bool accept_all(struct mc_http *h)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		uint64_t now = mc_now_ms();
		unsigned open, from_peer;
		struct peer_addr peer;
		enum { REFUSE_NONE, REFUSE_CAP, REFUSE_PEER, REFUSE_NOMEM } refuse;
		int fd = accept4(h->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			enum mc_accept_next next = mc_accept_failed(&h->guard, errno, now);
			if (next == MC_ACCEPT_AGAIN)
				continue;
			return next != MC_ACCEPT_PAUSE;
		}
		peer_addr_of((const struct sockaddr *)&ss, &peer);
		pthread_mutex_lock(&h->lock);
		/* a peer at its own cap is refused before anyone is cut for it */
		from_peer = h->cfg.max_conns_per_ip && peer.len ? peer_open_locked(h, &peer) : 0;
		open = h->nconns + h->npend - h->ncut;
		if (h->cfg.max_conns_per_ip && from_peer >= h->cfg.max_conns_per_ip) {
			refuse = REFUSE_PEER;
		} else {
			/* make room first, so the newcomer is not the one cut */
			if (room_locked(h) < (int64_t)(h->cfg.max_conns / 8 + 1))
				sweep_locked(h, now);
			open = h->nconns + h->npend - h->ncut;
			if (open >= h->cfg.max_conns)
				refuse = REFUSE_CAP;
			else
				refuse = pend_add_locked(h, fd, &peer) ? REFUSE_NONE : REFUSE_NOMEM;
		}
		pthread_mutex_unlock(&h->lock);
		if (refuse != REFUSE_NONE) {
			if (refuse == REFUSE_CAP)
				mc_accept_refused(&h->guard, open, h->cfg.max_conns, now);
			else if (refuse == REFUSE_PEER)
				refused_per_peer(h, &peer, from_peer, now);
			else
				mc_warn("%s: out of memory accepting a connection", h->cfg.name);
			close(fd);
			continue;
		}
		/* MHD closes fd itself when it cannot take it */
		if (MHD_add_connection(h->daemon, fd, (struct sockaddr *)&ss, sl) != MHD_YES) {
			mc_debug("%s: libmicrohttpd did not take a connection: %s", h->cfg.name,
				 strerror(errno));
			pthread_mutex_lock(&h->lock);
			pend_take_locked(h, fd, &peer);
			pthread_mutex_unlock(&h->lock);
		}
	}
}

/*
 * The acceptor.  MHD's own accept loop busy-waits on EMFILE while it has
 * no connection, so the listener is ours (MHD_USE_NO_LISTEN_SOCKET): this
 * thread accepts with base/accept.h's pause and hands each connection to
 * MHD, and every SWEEP_MS enforces the deadlines.
 */
static void *acceptor_main(void *arg)
{
	struct mc_http *h = arg;
	uint64_t resume_ms = 0, next_sweep = mc_now_ms() + SWEEP_MS;

	while (!atomic_load(&h->stopping)) {
		struct pollfd pf[2] = {{.fd = h->wakefd, .events = POLLIN},
				       {.fd = h->lfd, .events = POLLIN}};
		uint64_t now = mc_now_ms(), wait = next_sweep > now ? next_sweep - now : 0;
		bool listening = now >= resume_ms;
		int n;

		if (!listening)
			wait = MC_MIN(wait, resume_ms - now);
		n = poll(pf, listening ? 2 : 1, (int)wait);
		if (n > 0 && listening && (pf[1].revents & POLLIN) && !accept_all(h))
			resume_ms = mc_now_ms() + MC_ACCEPT_PAUSE_MS;
		now = mc_now_ms();
		if (now >= next_sweep) {
			pthread_mutex_lock(&h->lock);
			sweep_locked(h, now);
			pthread_mutex_unlock(&h->lock);
			next_sweep = now + SWEEP_MS;
		}
	}
	return NULL;
}

/* A non-blocking listening socket on ss (port set), or a negative mc_status. */
static int listen_on(const struct mc_http_config *cfg, const char *host,
		     const struct sockaddr_storage *ss)
{
	socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);
	int one = 1, err, fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ss->ss_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(fd, (const struct sockaddr *)ss, len) == 0 &&
		    listen(fd, LISTEN_BACKLOG) == 0)
			return fd;
	}
	err = errno;
	if (fd >= 0)
		close(fd);
	return mc_set_error(MC_ERR_SOCKET, "%s: cannot listen on %s port %u: %s", cfg->name, host,
			    cfg->port, strerror(err));
}

void mc_http_counts(struct mc_http *h, struct mc_http_counts *out)
{
	out->refused = atomic_load_explicit(&h->guard.refused, memory_order_relaxed);
	out->paused = atomic_load_explicit(&h->guard.paused, memory_order_relaxed);
	out->refused_per_ip =
		atomic_load_explicit(&h->guard.refused_per_peer, memory_order_relaxed);
	pthread_mutex_lock(&h->lock);
	out->cut_deadline = h->cut_deadline;
	out->cut_room = h->cut_room;
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
	flags |= MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC; /* the acceptor hands them over */
	if (mc_http_tls_on(cfg->tls))
		flags |= MHD_USE_TLS;
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
	mc_accept_guard_init(&h->guard, h->cfg.name);
	atomic_init(&h->stopping, false);
	h->lfd = listen_on(cfg, host, &ss);
	if (h->lfd < 0) {
		st = h->lfd;
		mc_free(h);
		return st;
	}
	h->port = mc_sock_local_port(h->lfd);
	h->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (h->wakefd < 0) {
		st = mc_set_error(MC_ERR_SOCKET, "%s: eventfd: %s", cfg->name, strerror(errno));
		close(h->lfd);
		mc_free(h);
		return st;
	}
	pthread_mutex_init(&h->lock, NULL);
	atomic_store(&h->starting, true);
	{
		struct MHD_OptionItem opts[] = {
			{MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->idle_timeout_s, NULL},
			/*
			 * Far above ours, which the acceptor enforces exactly
			 * (pend holds what MHD has not registered yet): cut
			 * connections count until MHD closes them, a pool splits
			 * the limit between its threads, and MHD 0.9.75 must never
			 * reach its own limit with connections handed over: its
			 * worker threads were seen deadlocked on that path.
			 */
			{MHD_OPTION_CONNECTION_LIMIT, (intptr_t)(h->cfg.max_conns * 4 + 256), NULL},
			{MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h},
			/* the optional ones from here on (opts[3..]), then the end */
			{MHD_OPTION_END, 0, NULL},
			{MHD_OPTION_END, 0, NULL},
			{MHD_OPTION_END, 0, NULL},
			{MHD_OPTION_END, 0, NULL},
		};
		size_t k = 3;

		if (mc_http_tls_on(cfg->tls)) {
			opts[k++] =
				(struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, cfg->tls->key};
			opts[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0,
							    cfg->tls->cert};
		}
		if (cfg->threads)
			opts[k++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE,
							    (intptr_t)cfg->threads, NULL};
		/* the logger first, so MHD's own start-up messages use it */
		h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
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
	if (pthread_create(&h->acceptor, NULL, acceptor_main, h) != 0) {
		st = mc_set_error(MC_ERR_INTERNAL, "%s: cannot start its acceptor thread",
				  cfg->name);
		MHD_stop_daemon(h->daemon);
		goto err_free;
	}
	h->acceptor_started = true;
	*out = h;
	return MC_OK;

err_free:
	close(h->wakefd);
	close(h->lfd);
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
	uint64_t one = 1;

	atomic_store(&h->stopping, true);
	if (write(h->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the thread is awake anyway */
	}
	if (h->acceptor_started)
		pthread_join(h->acceptor, NULL);
	close(h->lfd);
	MHD_stop_daemon(h->daemon); /* closes every connection (notified) */
	close(h->wakefd);
	pthread_mutex_destroy(&h->lock);
	mc_free(h->pend);
	mc_free(h);
}

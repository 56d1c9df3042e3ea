/*
 * base/http.h - the libmicrohttpd glue shared by our HTTP servers: the
 * metadata server (meta/http_server.c) and the master's admin and
 * metrics pages (master/server_http.c).
 *
 * mc_http_open starts a daemon on its own thread(s) and calls the
 * handler once per request, when the request is complete: the body, if
 * the server keeps bodies, is whole by then.  MHD's several calls per
 * request, the body accumulation with its size cap (413 "request body too
 * large", also when Content-Length announces too much), name resolution
 * for the bind address and MHD's log messages (debug level; while
 * starting, the last one is kept as the reason a bind failed) all live
 * in http.c.  Routing is a table of {path, methods} rows looked up with
 * mc_http_route_find; what a miss answers (404, 405) stays with each
 * server, since ours answer misses with different texts.
 *
 * Bounds.  The listening socket is ours, not MHD's: libmicrohttpd 0.9.75
 * busy-waits on EMFILE while it has no connection, so one acceptor thread
 * per server accepts with base/accept.h's pause and hands each connection
 * to MHD (MHD_add_connection, MHD_USE_NO_LISTEN_SOCKET).  MHD's own
 * timeout counts inactivity only, so a client that sends one byte a
 * second is never dropped; here every connection is tracked
 * (MHD_OPTION_NOTIFY_CONNECTION) with the time its current request began
 * (its accept, or the end of the previous request on a kept-alive
 * connection), and the acceptor, every 100 ms, shuts down the socket of
 * any whose request is not whole within request_timeout_ms (MHD then
 * closes it).  At most max_conns connections are open (the acceptor
 * refuses more, counting exactly), and once fewer than max_conns / 8 are
 * free it first cuts the connections that have waited longest (at least
 * MC_HTTP_MIN_WAIT_MS) for their request, so a new client finds room
 * while others hold theirs idle.  With max_conns_per_ip, a connection
 * from an address that has that many open already (IPv4-mapped IPv6
 * counts as IPv4) is refused first, before anyone is cut for it, so one
 * host cannot take the room that the cuts keep for others.
 *
 * Threads: the handler and the route functions run on MHD's threads,
 * several at once when cfg.threads > 1; they must lock what they share.
 */
#ifndef MC_BASE_HTTP_H
#define MC_BASE_HTTP_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "mooncake/status.h"

enum mc_http_method {
	MC_HTTP_GET = 1u << 0,
	MC_HTTP_HEAD = 1u << 1,
	MC_HTTP_POST = 1u << 2,
	MC_HTTP_PUT = 1u << 3,
	MC_HTTP_DELETE = 1u << 4,
};

struct mc_http;
struct mc_auth_secret;

/* A server's TLS certificate chain and key, PEM texts (NULL: plain HTTP),
 * and the CA bundle its clients check it against. */
struct mc_http_tls {
	char *cert, *key; /* MC_HTTP_TLS_CERT_FILE, MC_HTTP_TLS_KEY_FILE */
	char *ca_file;	  /* MC_HTTP_TLS_CA_FILE: a path, for libcurl (NULL: the system's) */
};

extern const struct mc_config_entry mc_http_tls_config_table[];
extern const size_t mc_http_tls_config_table_len;

/* From the environment: both files or neither (MC_ERR_INVALID_PARAMS naming
 * the cause when one is missing or unreadable).  Release with _release. */
mc_status mc_http_tls_load(struct mc_http_tls *out);
void mc_http_tls_release(struct mc_http_tls *t);
static inline bool mc_http_tls_on(const struct mc_http_tls *t)
{
	return t && t->cert && t->key;
}

/* One complete request; everything is borrowed for the handler's call. */
struct mc_http_request {
	const char *method;  /* as the client sent it */
	unsigned method_bit; /* enum mc_http_method; 0 for other methods */
	const char *url;     /* the path, query removed (MHD_lookup_connection_value has it) */
	const void *body;    /* NULL when empty or the server keeps no bodies */
	size_t body_len;
	struct mc_http *server; /* the server that took it (mc_http_counts) */
};

/* Queues the answer to req on conn (mc_http_respond*), MHD_NO to drop it. */
typedef enum MHD_Result (*mc_http_handler_cb)(void *arg, struct MHD_Connection *conn,
					      const struct mc_http_request *req);

struct mc_http_config {
	const char *name;	     /* prefix of messages: "http metadata server" */
	const char *host;	     /* bind address; NULL or "" = all interfaces */
	uint16_t port;		     /* 0 = any free port (mc_http_port says which) */
	bool prefer_ipv4;	     /* a name with both families binds IPv4 (else the first) */
	unsigned threads;	     /* 0: one internal thread, MHD's choice of epoll or poll;
				      * N: a pool of N internal threads */
	unsigned idle_timeout_s;     /* an idle connection is closed after this (0 = never) */
	unsigned request_timeout_ms; /* a request must be whole within this (0 = no bound) */
	unsigned max_conns;	     /* connections open at most (0 = MC_HTTP_DEFAULT_MAX_CONNS) */
	unsigned max_conns_per_ip;   /* of them from one address at most (0 = no such cap) */
	size_t max_body;	     /* 0: bodies are read and dropped; else kept up to this */
	/* With a secret (base/auth.h), requests of the methods in auth_methods
	 * (enum mc_http_method bits) need "Authorization: Bearer <secret>":
	 * any other is answered 401, before its body is read, and never reaches
	 * the handler.  NULL or no secret: every request is served. */
	const struct mc_auth_secret *auth; /* borrowed; must outlive the server */
	unsigned auth_methods;
	/* HTTPS (libmicrohttpd over GnuTLS) with this certificate and key, or
	 * plain HTTP when NULL or empty (mc_http_tls_load); borrowed, must
	 * outlive the server. */
	const struct mc_http_tls *tls;
	mc_http_handler_cb handler; /* required */
	void *arg;		    /* the handler's first argument */
};

#define MC_HTTP_DEFAULT_MAX_CONNS 1000
#define MC_HTTP_MIN_WAIT_MS	  200 /* a connection is not cut for room before this */

/*
 * Start serving.  MC_OK with *out set; MC_ERR_INVALID_PARAMS, MC_ERR_DNS
 * (host does not resolve), MC_ERR_SOCKET (cannot listen: the text names
 * MHD's reason) or MC_ERR_NOMEM, the cause recorded (mc_set_error).
 */
mc_status mc_http_open(const struct mc_http_config *cfg, struct mc_http **out);
/* The bound port (the chosen one when cfg.port was 0). */
uint16_t mc_http_port(const struct mc_http *h);
/* What the bounds did so far (for metrics and tests); every count only grows. */
struct mc_http_counts {
	uint64_t refused;	 /* connections closed at accept: max_conns were open */
	uint64_t refused_per_ip; /* closed at accept: max_conns_per_ip were open from its address */
	uint64_t paused;	 /* accept pauses after EMFILE, ENFILE, ENOBUFS, ENOMEM */
	uint64_t cut_deadline;	 /* connections cut: request not whole within request_timeout_ms */
	uint64_t cut_room;	 /* connections cut to keep room for new clients */
};
/* h's counts as of now.  Any thread. */
void mc_http_counts(struct mc_http *h, struct mc_http_counts *out);
/* Stop serving: waits for handlers that run, then frees h.  NULL is a no-op. */
void mc_http_close(struct mc_http *h);

/* Queue a response with a copy of body; ctype NULL sends no Content-Type. */
enum MHD_Result mc_http_respond(struct MHD_Connection *conn, unsigned code, const void *body,
				size_t len, const char *ctype);
/* mc_http_respond with the NUL-terminated text. */
enum MHD_Result mc_http_respond_text(struct MHD_Connection *conn, unsigned code, const char *text,
				     const char *ctype);

/* A row of a routing table. */
struct mc_http_route {
	const char *path;
	unsigned methods; /* enum mc_http_method bits; 0 = any method */
	bool prefix;	  /* path is a prefix of the URLs it takes (else exact) */
	mc_http_handler_cb fn;
};

/*
 * The first row of routes[n] whose path and methods take req, or NULL.
 * *path_known_out (may be NULL) says whether some row's path matched, so a
 * miss can be told apart: 405 (known path, other method) from 404.
 */
const struct mc_http_route *mc_http_route_find(const struct mc_http_route *routes, size_t n,
					       const struct mc_http_request *req,
					       bool *path_known_out);

#endif

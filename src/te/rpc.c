/*
 * te/rpc.c - the RPC / handshake side channel (spec transfer-engine.md 3.6).
 *
 * Wire: an 8-byte little-endian length, then either a type byte (0..3) and
 * length - 1 payload bytes, or (legacy) length payload bytes starting with
 * '{'.  One request per TCP connection; the answer carries the request's
 * type (untyped for a legacy request), then the server half-closes.
 *
 * Server.  Upstream serves connections one after another with a 5 s read
 * timeout, so a single silent client stalls every handshake on the host
 * (spec 10.1 item 5).  Here one thread runs an event loop (base/loop.h:
 * epoll, level-triggered) over the listener and every accepted
 * connection, each fd embedded in its owner.  A connection moves through
 * three states,
 *
 *   READING   -> a complete frame was assembled -> handler -> WRITING
 *   WRITING   -> response fully sent, shutdown(SHUT_WR)   -> LINGERING
 *   LINGERING -> peer EOF (or linger deadline)            -> closed
 *
 * and sits on the server's list for its state.  Each state's deadline is
 * "time of entry + a constant" (recv_timeout for READING and WRITING, a
 * short linger for LINGERING) and the clock is monotonic, so every list is
 * sorted by deadline just by appending at the tail.  Each list has one
 * loop timer, armed when a connection joins the empty list; when it fires
 * it pops the heads whose deadline passed and re-arms itself to the new
 * head's deadline (or stops when the list is empty), so expiry is O(1)
 * per connection and the loop holds three timers, not one per connection.
 * A head that leaves its list early (closed, or on to the next state)
 * leaves the timer early: it then fires once for nothing.  Malformed
 * frames, unknown types, handler errors and deadlines close the connection
 * without a reply; the reason is logged at info (peer's fault) or debug
 * (timeouts, peer went away).
 *
 * At most max_conns (MC_RPC_MAX_CONNS) connections are open; more are
 * accepted and closed at once.  When accept fails for lack of descriptors
 * the listener leaves the loop for MC_ACCEPT_PAUSE_MS (base/accept.h): the
 * backlog waits instead of the loop spinning on it.
 *
 * Frame assembly is struct mc_rpc_reader: a pure, socket-free state machine
 * fed with whatever recv() returned, which the fuzz target drives directly.
 * Its payload is a struct mc_buf (base/buf.h) that grows with the bytes
 * that arrive, so 1024 connections each announcing a 1 MiB frame cost
 * nothing until they send the data.  It is a builder, not a receive
 * buffer: one frame per connection is appended whole and handed out, and
 * nothing is ever compacted.
 *
 * Stopping: mc_rpc_server_stop stops the loop (mc_loop_stop wakes it),
 * joins the thread, then frees every connection.
 * Everything except the handler's argument is owned by the server thread
 * while it runs, so there are no locks.
 *
 * Client: mc_rpc_call is a plain blocking exchange with deadlines, built on
 * mc_sock_connect / mc_sock_{read,write}_full and the same header parser.
 */
#define MC_LOG_MODULE "rpc"
#include "te/rpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/status.h"

#define RPC_DEFAULT_MAX_FRAME	    (1ull << 20)
#define RPC_DEFAULT_RECV_TIMEOUT_MS 5000
#define RPC_DEFAULT_IO_TIMEOUT_MS   60000
#define RPC_DEFAULT_MAX_CONNS	    1024
#define RPC_LINGER_MS		    1000 /* wait for the peer's EOF after replying */
#define RPC_READ_CHUNK		    65536
#define RPC_READER_INITIAL_CAP	    4096
#define RPC_READS_PER_EVENT	    16 /* fairness: then back to epoll (level-triggered) */

/* ------------------------------------------------------------------------ */
/* Framing                                                                   */

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static bool starts_legacy_json(uint8_t c)
{
	return c == '{' || c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

mc_status mc_rpc_parse_header(const uint8_t hdr[MC_RPC_HEADER_LEN], uint64_t max_frame,
			      int *type_out, uint64_t *payload_len_out)
{
	uint64_t len = get_le64(hdr);
	uint8_t t = hdr[8];

	if (!max_frame)
		max_frame = RPC_DEFAULT_MAX_FRAME;
	if (len == 0)
		return MC_ERR_PROTOCOL;
	if (len > max_frame || len >= SIZE_MAX)
		return MC_ERR_TOO_LARGE;
	if (t <= MC_RPC_PROBE) {
		*type_out = t;
		*payload_len_out = len - 1;
		return MC_OK;
	}
	if (starts_legacy_json(t)) {
		*type_out = -1;
		*payload_len_out = len;
		return MC_OK;
	}
	return MC_ERR_PROTOCOL;
}

mc_status mc_rpc_frame_encode(int type, const char *payload, size_t len, char **frame_out,
			      size_t *frame_len_out)
{
	size_t hdr = type < 0 ? 8 : MC_RPC_HEADER_LEN;
	size_t nl = (len == 0 || payload[len - 1] != '\n') ? 1 : 0;
	size_t total;
	char *f;

	if (type < -1 || type > MC_RPC_PROBE || (len && !payload))
		return MC_ERR_INVALID_PARAMS;
	if (len > SIZE_MAX - hdr - nl)
		return MC_ERR_TOO_LARGE;
	total = hdr + len + nl;
	f = mc_malloc(total);
	if (!f)
		return MC_ERR_NOMEM;
	put_le64((uint8_t *)f, (uint64_t)(total - 8));
	if (type >= 0)
		f[8] = (char)type;
	if (len)
		memcpy(f + hdr, payload, len);
	if (nl)
		f[total - 1] = '\n';
	*frame_out = f;
	*frame_len_out = total;
	return MC_OK;
}

void mc_rpc_reader_init(struct mc_rpc_reader *r, uint64_t max_frame)
{
	memset(r, 0, sizeof(*r));
	r->max_frame = max_frame ? max_frame : RPC_DEFAULT_MAX_FRAME;
	r->type = -1;
	mc_buf_init(&r->payload);
	r->status = MC_INPROGRESS;
}

void mc_rpc_reader_release(struct mc_rpc_reader *r)
{
	mc_buf_release(&r->payload);
}

mc_status mc_rpc_reader_feed(struct mc_rpc_reader *r, const void *data, size_t len,
			     size_t *used_out)
{
	const uint8_t *p = data;
	size_t used = 0, n;
	mc_status rc;

	if (r->status != MC_INPROGRESS) {
		if (r->status == MC_OK)
			*used_out = 0;
		return r->status;
	}
	if (r->hdr_len < MC_RPC_HEADER_LEN) {
		n = MC_MIN(MC_RPC_HEADER_LEN - r->hdr_len, len);
		if (n)
			memcpy(r->hdr + r->hdr_len, p, n);
		r->hdr_len += n;
		used += n;
		if (r->hdr_len < MC_RPC_HEADER_LEN) {
			*used_out = used;
			return MC_INPROGRESS;
		}
		rc = mc_rpc_parse_header(r->hdr, r->max_frame, &r->type, &r->payload_len);
		if (rc != MC_OK)
			return r->status = rc;
		/* a small frame's room (and its NUL) at once, a big one's as it comes */
		rc = mc_buf_reserve(&r->payload,
				    (size_t)MC_MIN(r->payload_len + 1, RPC_READER_INITIAL_CAP));
		if (rc != MC_OK)
			return r->status = rc;
		if (r->type < 0)
			mc_buf_append(&r->payload, &r->hdr[8], 1);
	}
	n = (size_t)MC_MIN(r->payload_len - r->payload.len, (uint64_t)(len - used));
	if (n) {
		mc_buf_append(&r->payload, p + used, n);
		if (r->payload.err != MC_OK)
			return r->status = r->payload.err;
		used += n;
	}
	if (r->payload.len == r->payload_len) {
		/* the terminator, not counted in len */
		rc = mc_buf_reserve(&r->payload, 1);
		if (rc != MC_OK)
			return r->status = rc;
		r->payload.data[r->payload.len] = '\0';
		r->status = MC_OK;
	}
	*used_out = used;
	return r->status;
}

char *mc_rpc_reader_take(struct mc_rpc_reader *r, size_t *len_out)
{
	if (r->status != MC_OK || !r->payload.data)
		return NULL;
	return mc_buf_steal(&r->payload, len_out);
}

/* ------------------------------------------------------------------------ */
/* Server                                                                    */

enum conn_state {
	CONN_READING,
	CONN_WRITING,
	CONN_LINGERING,
	CONN_NSTATES,
};

struct rpc_conn {
	struct mc_list node; /* on server->lists[state].conns, sorted by deadline */
	struct mc_loop_fd io;
	struct mc_rpc_server *s;
	enum conn_state state;
	uint64_t deadline_ms;
	uint64_t received; /* bytes read while READING, for log lines */
	struct mc_rpc_reader rd;
	struct mc_auth_hs *hs; /* while the handshake runs (READING), else NULL */
	char *out;	       /* encoded response frame while WRITING */
	size_t out_len;
	size_t out_off;
	char peer[64];
};

/* The connections in one state, and the timer that closes them at their deadlines. */
struct conn_list {
	struct mc_list conns;	    /* struct rpc_conn, sorted by deadline */
	struct mc_loop_timer timer; /* armed while conns is non-empty, due about at the head's
				       deadline, or earlier when the head left the list */
	struct mc_rpc_server *s;
	enum conn_state state;
};

struct mc_rpc_server {
	struct mc_loop *loop;
	struct mc_loop_fd listen;
	struct mc_accept_guard accept_guard;
	struct mc_loop_timer accept_timer; /* resumes accepting after a pause */
	unsigned max_conns;
	uint64_t max_frame;
	int recv_timeout_ms;
	int linger_ms;
	mc_rpc_handler_cb handler;
	void *handler_arg;
	const struct mc_auth_secret *auth; /* NULL: no handshake */
	pthread_t thread;
	struct conn_list lists[CONN_NSTATES];
	unsigned nconns;
	char buf[RPC_READ_CHUNK];
};

static const char *const state_names[CONN_NSTATES] = {"reading", "writing", "lingering"};

static void conn_set_state(struct mc_rpc_server *s, struct rpc_conn *c, enum conn_state st,
			   int timeout_ms)
{
	struct conn_list *cl = &s->lists[st];

	c->state = st;
	c->deadline_ms = mc_now_ms() + (uint64_t)timeout_ms;
	mc_list_del(&c->node);
	/* the timer is armed for an earlier head unless the list was empty */
	if (mc_list_empty(&cl->conns))
		mc_loop_timer_start(s->loop, &cl->timer, (uint64_t)timeout_ms);
	mc_list_add_tail(&cl->conns, &c->node);
}

static void conn_close(struct mc_rpc_server *s, struct rpc_conn *c)
{
	/* explicit removal: a forked child may hold a copy of the fd, and then
	 * close() alone would leave the registration (and c) live in epoll */
	mc_loop_del_fd(s->loop, &c->io);
	close(c->io.fd);
	mc_list_del(&c->node);
	mc_rpc_reader_release(&c->rd);
	mc_free(c->hs);
	mc_free(c->out);
	mc_free(c);
	s->nconns--;
}

static void format_peer(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		port = ntohs(a->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
			/* the dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d */
			inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], ip, sizeof(ip));
			snprintf(buf, len, "%s:%u", ip, port);
			return;
		}
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, port);
		return;
	}
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		port = ntohs(a->sin_port);
	}
	snprintf(buf, len, "%s:%u", ip, port);
}

/* Watch c for events instead of what it was watched for. */
static mc_status conn_watch(struct mc_rpc_server *s, struct rpc_conn *c, uint32_t events)
{
	mc_status rc = mc_loop_set_events(s->loop, &c->io, events);

	if (rc != MC_OK)
		mc_warn("peer %s: %s", c->peer, mc_last_error());
	return rc;
}

static void conn_linger(struct mc_rpc_server *s, struct rpc_conn *c)
{
	mc_free(c->out);
	c->out = NULL;
	if (shutdown(c->io.fd, SHUT_WR) < 0 || conn_watch(s, c, EPOLLIN | EPOLLRDHUP) != MC_OK) {
		conn_close(s, c);
		return;
	}
	conn_set_state(s, c, CONN_LINGERING, s->linger_ms);
}

static void conn_flush(struct mc_rpc_server *s, struct rpc_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->io.fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (conn_watch(s, c, EPOLLOUT) != MC_OK)
				conn_close(s, c);
			return;
		}
		mc_debug("peer %s: send failed: %s", c->peer, strerror(errno));
		conn_close(s, c);
		return;
	}
	conn_linger(s, c);
}

static void conn_handle_frame(struct mc_rpc_server *s, struct rpc_conn *c)
{
	int type = c->rd.type < 0 ? MC_RPC_CONNECTION : c->rd.type;
	char *resp = NULL;
	size_t resp_len = 0;
	mc_status rc;

	rc = s->handler(s->handler_arg, type, (const char *)c->rd.payload.data, c->rd.payload.len,
			&resp, &resp_len);
	mc_rpc_reader_release(&c->rd);
	if (rc != MC_OK) {
		mc_free(resp);
		mc_info("peer %s: handler refused type %d request: %s, closing", c->peer, type,
			mc_status_name(rc));
		conn_close(s, c);
		return;
	}
	rc = mc_rpc_frame_encode(c->rd.type, resp, resp_len, &c->out, &c->out_len);
	mc_free(resp);
	if (rc != MC_OK) {
		mc_warn("peer %s: cannot encode %zu-byte response: %s", c->peer, resp_len,
			mc_status_name(rc));
		conn_close(s, c);
		return;
	}
	c->out_off = 0;
	conn_set_state(s, c, CONN_WRITING, s->recv_timeout_ms);
	conn_flush(s, c);
}

/* READING with a secret: the handshake first.  False when c is closed or
 * still authenticating. */
static bool conn_auth(struct mc_rpc_server *s, struct rpc_conn *c)
{
	bool want_out;
	enum mc_auth_result r = mc_auth_hs_io(c->hs, c->io.fd, &want_out);

	if (r == MC_AUTH_FAIL) {
		mc_auth_refused("rpc", c->peer, c->hs->why);
		conn_close(s, c);
		return false;
	}
	if (r == MC_AUTH_AGAIN) {
		if (conn_watch(s, c, EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0)) != MC_OK)
			conn_close(s, c);
		return false;
	}
	mc_free(c->hs);
	c->hs = NULL;
	if (conn_watch(s, c, EPOLLIN | EPOLLRDHUP) != MC_OK) {
		conn_close(s, c);
		return false;
	}
	return true;
}

static void conn_on_readable(struct mc_rpc_server *s, struct rpc_conn *c)
{
	if (c->hs && !conn_auth(s, c))
		return;
	for (int i = 0; i < RPC_READS_PER_EVENT; i++) {
		ssize_t n = recv(c->io.fd, s->buf, sizeof(s->buf), MSG_DONTWAIT);
		size_t used = 0; /* gcc cannot see that feed sets it when it matters */
		mc_status rc;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			mc_debug("peer %s: recv failed after %llu bytes: %s", c->peer,
				 (unsigned long long)c->received, strerror(errno));
			conn_close(s, c);
			return;
		}
		if (n == 0) {
			mc_debug("peer %s: closed after %llu bytes of an incomplete frame", c->peer,
				 (unsigned long long)c->received);
			conn_close(s, c);
			return;
		}
		c->received += (uint64_t)n;
		rc = mc_rpc_reader_feed(&c->rd, s->buf, (size_t)n, &used);
		if (rc == MC_INPROGRESS)
			continue;
		if (rc == MC_OK) {
			if (used < (size_t)n)
				mc_debug("peer %s: ignoring %zu bytes after the frame", c->peer,
					 (size_t)n - used);
			conn_handle_frame(s, c);
			return;
		}
		if (rc == MC_ERR_NOMEM)
			mc_warn("peer %s: out of memory for a %llu-byte frame, closing", c->peer,
				(unsigned long long)c->rd.payload_len);
		else
			mc_info("peer %s: bad frame header (length %llu, type byte %u, limit %llu): "
				"%s, closing",
				c->peer, (unsigned long long)get_le64(c->rd.hdr), c->rd.hdr[8],
				(unsigned long long)s->max_frame, mc_status_name(rc));
		conn_close(s, c);
		return;
	}
}

/* After the reply: discard whatever the peer still sends until its EOF. */
static void conn_drain(struct mc_rpc_server *s, struct rpc_conn *c)
{
	for (int i = 0; i < RPC_READS_PER_EVENT; i++) {
		ssize_t n = recv(c->io.fd, s->buf, sizeof(s->buf), MSG_DONTWAIT);
		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		conn_close(s, c);
		return;
	}
}

static void conn_on_event(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct rpc_conn *c = mc_container_of(f, struct rpc_conn, io);
	struct mc_rpc_server *s = c->s;

	switch (c->state) {
	case CONN_READING:
		conn_on_readable(s, c);
		break;
	case CONN_WRITING:
		conn_flush(s, c);
		break;
	case CONN_LINGERING:
		conn_drain(s, c);
		break;
	default:
		mc_assert(!"bad connection state");
	}
}

/* The accept pause is over: watch the listener again. */
static int64_t accept_resume(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now)
{
	struct mc_rpc_server *s = mc_container_of(t, struct mc_rpc_server, accept_timer);

	if (mc_loop_add_fd(l, &s->listen, EPOLLIN) != MC_OK)
		return MC_ACCEPT_PAUSE_MS;
	return MC_LOOP_TIMER_STOP;
}

static void server_accept(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct mc_rpc_server *s = mc_container_of(f, struct mc_rpc_server, listen);

	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct rpc_conn *c;
		int fd;

		fd = accept4(s->listen.fd, (struct sockaddr *)&ss, &sl,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			enum mc_accept_next next =
				mc_accept_failed(&s->accept_guard, errno, mc_loop_now_ms(l));
			if (next == MC_ACCEPT_AGAIN)
				continue;
			if (next == MC_ACCEPT_PAUSE) {
				/* the backlog waits; the loop does not spin on it */
				mc_loop_del_fd(l, &s->listen);
				mc_loop_timer_start(l, &s->accept_timer, MC_ACCEPT_PAUSE_MS);
			}
			return;
		}
		if (s->nconns >= s->max_conns) {
			mc_accept_refused(&s->accept_guard, s->nconns, s->max_conns,
					  mc_loop_now_ms(l));
			close(fd);
			continue;
		}
		c = mc_calloc(1, sizeof(*c));
		if (!c) {
			mc_warn("accept: out of memory, closing connection");
			close(fd);
			continue;
		}
		mc_loop_fd_init(&c->io, fd, conn_on_event);
		c->s = s;
		format_peer(&ss, c->peer, sizeof(c->peer));
		mc_rpc_reader_init(&c->rd, s->max_frame);
		mc_list_init(&c->node);
		s->nconns++;
		if (s->auth) {
			c->hs = mc_malloc(sizeof(*c->hs));
			if (!c->hs ||
			    mc_auth_hs_init(c->hs, s->auth, MC_AUTH_SERVER, "te-rpc") != MC_OK) {
				mc_warn("peer %s: cannot start the handshake", c->peer);
				conn_close(s, c);
				continue;
			}
		}
		if (mc_loop_add_fd(l, &c->io, EPOLLIN | EPOLLRDHUP) != MC_OK) {
			mc_warn("peer %s: %s", c->peer, mc_last_error());
			conn_close(s, c);
			continue;
		}
		conn_set_state(s, c, CONN_READING, s->recv_timeout_ms);
		mc_trace("peer %s: accepted (%u open)", c->peer, s->nconns);
	}
}

/* A list's timer: close the connections whose deadline passed, then wait for the new head's. */
static int64_t conn_list_expire(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now)
{
	struct conn_list *cl = mc_container_of(t, struct conn_list, timer);
	struct mc_rpc_server *s = cl->s;

	while (!mc_list_empty(&cl->conns)) {
		struct rpc_conn *c = mc_list_first(&cl->conns, struct rpc_conn, node);
		if (c->deadline_ms > now)
			return (int64_t)(c->deadline_ms - now);
		if (cl->state == CONN_READING)
			mc_debug("peer %s: no complete frame within %d ms (%llu bytes), closing",
				 c->peer, s->recv_timeout_ms, (unsigned long long)c->received);
		else
			mc_debug("peer %s: deadline passed while %s, closing", c->peer,
				 state_names[cl->state]);
		conn_close(s, c);
	}
	return MC_LOOP_TIMER_STOP;
}

static void *server_main(void *arg)
{
	struct mc_rpc_server *s = arg;

	if (mc_loop_run(s->loop) != MC_OK)
		mc_error("%s; server stops serving", mc_last_error());
	return NULL;
}

mc_status mc_rpc_server_start(const struct mc_rpc_server_params *p, struct mc_rpc_server **out)
{
	struct mc_rpc_server *s;
	mc_status rc;
	int err;

	if (!p || !out || p->listen_fd < 0 || !p->handler) {
		if (p && p->listen_fd >= 0)
			close(p->listen_fd);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "rpc server: missing listener or handler");
	}
	s = mc_calloc(1, sizeof(*s));
	if (!s) {
		close(p->listen_fd);
		return mc_set_error(MC_ERR_NOMEM, "rpc server: out of memory");
	}
	mc_loop_fd_init(&s->listen, p->listen_fd, server_accept);
	s->max_frame = p->max_frame ? p->max_frame : RPC_DEFAULT_MAX_FRAME;
	s->recv_timeout_ms =
		p->recv_timeout_ms > 0 ? p->recv_timeout_ms : RPC_DEFAULT_RECV_TIMEOUT_MS;
	s->linger_ms = MC_MIN(s->recv_timeout_ms, RPC_LINGER_MS);
	s->max_conns = p->max_conns ? p->max_conns : RPC_DEFAULT_MAX_CONNS;
	mc_accept_guard_init(&s->accept_guard, "rpc");
	mc_loop_timer_init(&s->accept_timer, accept_resume);
	s->handler = p->handler;
	s->handler_arg = p->handler_arg;
	s->auth = mc_auth_on(p->auth) ? p->auth : NULL;
	for (int st = 0; st < CONN_NSTATES; st++) {
		mc_list_init(&s->lists[st].conns);
		mc_loop_timer_init(&s->lists[st].timer, conn_list_expire);
		s->lists[st].s = s;
		s->lists[st].state = (enum conn_state)st;
	}

	if (mc_sock_set_nonblock(s->listen.fd, true) != MC_OK) {
		rc = mc_set_error(MC_ERR_SOCKET,
				  "rpc server: cannot make listener non-blocking: %s",
				  strerror(errno));
		goto err_free;
	}
	rc = mc_loop_new(&s->loop);
	if (rc != MC_OK)
		goto err_free;
	rc = mc_loop_add_fd(s->loop, &s->listen, EPOLLIN);
	if (rc != MC_OK)
		goto err_free_loop;
	err = pthread_create(&s->thread, NULL, server_main, s);
	if (err != 0) {
		rc = mc_set_error(MC_ERR_INTERNAL, "rpc server: cannot start thread: %s",
				  strerror(err));
		goto err_free_loop;
	}
	pthread_setname_np(s->thread, "mc-rpc");
	mc_debug("server listening on port %u", mc_sock_local_port(s->listen.fd));
	*out = s;
	return MC_OK;

err_free_loop:
	mc_loop_free(s->loop);
err_free:
	close(s->listen.fd);
	mc_free(s);
	return rc;
}

void mc_rpc_server_stop(struct mc_rpc_server *s)
{
	if (!s)
		return;
	mc_loop_stop(s->loop);
	pthread_join(s->thread, NULL);
	for (int st = 0; st < CONN_NSTATES; st++)
		while (!mc_list_empty(&s->lists[st].conns))
			conn_close(s, mc_list_first(&s->lists[st].conns, struct rpc_conn, node));
	mc_assert(s->nconns == 0);
	mc_loop_free(s->loop);
	close(s->listen.fd);
	mc_free(s);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */

/* io_deadline 0: io_timeout_ms from the moment the connection is up */
static mc_status rpc_call(const struct mc_auth_secret *auth, const char *host, uint16_t port,
			  int type, const char *req, size_t len, int connect_timeout_ms,
			  int io_timeout_ms, uint64_t io_deadline, uint64_t max_frame,
			  char **resp_out, size_t *resp_len_out)
{
	uint8_t hdr[MC_RPC_HEADER_LEN];
	char *frame = NULL, *payload = NULL;
	size_t frame_len;
	uint64_t deadline, plen;
	mc_status rc;
	int fd, rtype;

	if (!host || type < MC_RPC_CONNECTION || type > MC_RPC_PROBE || (len && !req) ||
	    !resp_out || !resp_len_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "rpc call: bad arguments");
	if (!max_frame)
		max_frame = RPC_DEFAULT_MAX_FRAME;
	rc = mc_rpc_frame_encode(type, req, len, &frame, &frame_len);
	if (rc != MC_OK)
		return mc_set_error(rc, "rpc call to %s:%u: cannot encode %zu-byte request", host,
				    port, len);
	fd = mc_sock_connect(host, port, connect_timeout_ms, false);
	if (fd < 0) {
		rc = (mc_status)fd; /* a negative mc_status; mc_sock_connect recorded the cause */
		goto out_free_frame;
	}
	deadline = io_deadline ? io_deadline
			       : mc_now_ms() + (uint64_t)(io_timeout_ms > 0
								  ? io_timeout_ms
								  : RPC_DEFAULT_IO_TIMEOUT_MS);
	if (mc_auth_on(auth)) {
		uint64_t now = mc_now_ms();
		rc = mc_auth_hs_run(fd, auth, MC_AUTH_CLIENT, "te-rpc",
				    now < deadline ? (int)MC_MIN(deadline - now, (uint64_t)INT_MAX)
						   : 0);
		if (rc != MC_OK) {
			if (rc == MC_ERR_PERMISSION)
				atomic_fetch_add(&mc_auth_refused_total, 1);
			rc = mc_set_error(rc, "rpc call to %s:%u: %s", host, port, mc_last_error());
			goto out_close;
		}
	}
	rc = mc_sock_write_full(fd, frame, frame_len, deadline);
	if (rc != MC_OK) {
		rc = mc_set_error(rc, "rpc call to %s:%u: sending type %d request failed: %s", host,
				  port, type,
				  rc == MC_ERR_SOCKET ? strerror(errno) : mc_strerror(rc));
		goto out_close;
	}
	rc = mc_sock_read_full(fd, hdr, sizeof(hdr), deadline);
	if (rc != MC_OK) {
		rc = mc_set_error(rc, "rpc call to %s:%u: no response header: %s", host, port,
				  rc == MC_ERR_SOCKET ? strerror(errno) : mc_strerror(rc));
		goto out_close;
	}
	rc = mc_rpc_parse_header(hdr, max_frame, &rtype, &plen);
	if (rc != MC_OK) {
		rc = mc_set_error(rc,
				  "rpc call to %s:%u: bad response header (length %llu, type "
				  "byte %u, limit %llu)",
				  host, port, (unsigned long long)get_le64(hdr), hdr[8],
				  (unsigned long long)max_frame);
		goto out_close;
	}
	if (rtype != type) {
		rc = mc_set_error(MC_ERR_PROTOCOL,
				  "rpc call to %s:%u: response type %d does not match request "
				  "type %d (-1: untyped)",
				  host, port, rtype, type);
		goto out_close;
	}
	payload = mc_malloc((size_t)plen + 1);
	if (!payload) {
		rc = mc_set_error(MC_ERR_NOMEM, "rpc call to %s:%u: no memory for %llu bytes", host,
				  port, (unsigned long long)plen);
		goto out_close;
	}
	rc = mc_sock_read_full(fd, payload, (size_t)plen, deadline);
	if (rc != MC_OK) {
		rc = mc_set_error(rc, "rpc call to %s:%u: truncated %llu-byte response", host, port,
				  (unsigned long long)plen);
		mc_free(payload);
		goto out_close;
	}
	payload[plen] = '\0';
	*resp_out = payload;
	*resp_len_out = (size_t)plen;
out_close:
	close(fd);
out_free_frame:
	mc_free(frame);
	return rc;
}

mc_status mc_rpc_call(const struct mc_auth_secret *auth, const char *host, uint16_t port, int type,
		      const char *req, size_t len, int connect_timeout_ms, int io_timeout_ms,
		      uint64_t max_frame, char **resp_out, size_t *resp_len_out)
{
	return rpc_call(auth, host, port, type, req, len, connect_timeout_ms, io_timeout_ms, 0,
			max_frame, resp_out, resp_len_out);
}

mc_status mc_rpc_call_until(const struct mc_auth_secret *auth, const char *host, uint16_t port,
			    int type, const char *req, size_t len, uint64_t deadline_ms,
			    uint64_t max_frame, char **resp_out, size_t *resp_len_out)
{
	uint64_t now = mc_now_ms();

	if (!deadline_ms)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "rpc call: no deadline");
	if (now >= deadline_ms)
		return mc_set_error(MC_ERR_TIMEOUT, "rpc call to %s:%u: deadline already passed",
				    host ? host : "(null)", port);
	return rpc_call(auth, host, port, type, req, len,
			(int)MC_MIN(deadline_ms - now, (uint64_t)INT_MAX), 0, deadline_ms,
			max_frame, resp_out, resp_len_out);
}

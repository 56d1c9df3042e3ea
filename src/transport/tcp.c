/*
 * transport/tcp.c - the TCP transport: upstream's wire format, done fast.
 *
 * Threads: a fixed set of workers (MC_TCP_WORKERS, default 2), each owning
 * an epoll loop, the client connections assigned to it and the server
 * connections it accepted (the listener sits in every worker's epoll with
 * EPOLLEXCLUSIVE).  Nothing a worker owns is touched by another thread,
 * except each connection's `incoming` list, which submitters fill under the
 * worker's lock before ringing its eventfd (only when the worker sleeps).
 *
 * Client side: per peer (host, data port) a fixed set of persistent
 * connections (MC_TCP_LANES_PER_PEER, default 4) spread over the workers;
 * slices are dealt round-robin, so a split request runs on several
 * connections at once.  Each connection pipelines: many requests are on the
 * wire at once (sendq: not fully sent; recvq: sent, awaiting status/data, in
 * order).  Headers and write payloads leave with one sendmsg() gathering
 * many requests, straight from the caller's memory; read payloads land
 * straight in the caller's memory (small ones through a 64 KiB staging
 * buffer that also batches status frames).
 *
 * Server side: headers are parsed from a staging buffer; every request is
 * checked against registered memory (mc_memreg_acquire) before a byte is
 * touched; a bad one gets a v2 rejection frame (or a close for v1) and the
 * connection closes after it, as upstream.  Write payloads go straight into
 * the target memory; read data is sent straight from it.  A write header is
 * not processed while read data queued before it is unsent, so requests on
 * one connection keep their order.  Device memory (mem/devmem.h) is the
 * exception: it passes through two pinned buffers of the connection, see
 * "server connections: device memory" below.  (The initiator never sees
 * device memory: the engine stages it, te/stage.c.)
 *
 * Failure: a connection that fails, closes or makes no progress for
 * MC_TCP_IO_TIMEOUT_MS fails its in-flight slices (typed status) and is
 * re-established on next use; a rejection requeues the slices behind the
 * rejected one, which the server never looked at.
 *
 * Multi-path: a target that publishes several addresses ("mc_tcp_addrs",
 * from its MC_TCP_INTERFACES) is reached over all of them: lane i prefers
 * path i % npaths.  A failed connection puts its path in back-off and, while
 * the lane has not failed on every path since a slice last completed on it,
 * resends all it carried over another path instead of failing it (requests
 * are idempotent at their target address; see conn_fail for why no slice
 * can complete twice).  The lane moves, not the slices, so everything stays
 * on its worker.
 */
#define MC_LOG_MODULE "tcp"
#include "transport/tcp.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/config.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mem/devmem.h"
#include "mem/memreg.h"
#include "meta/desc.h"
#include "transport/slice.h"
#include "transport/tcp_zc.h"
#include "transport/transport.h"

#define RBUF_SIZE      (64 * 1024)
#define DIRECT_MIN     (32 * 1024) /* payloads at least this large bypass the staging buffer */
#define IOV_BATCH      64
#define OUT_HIGH_WATER (16u << 20) /* stop parsing requests above this much queued output */
#define TICK_MS	       100
/* One readiness event reads at most this much from a socket before the
 * worker moves on (epoll is level-triggered, so the rest is reported again):
 * a peer that sends faster than the worker copies must not starve the
 * worker's other connections, nor its stall checks. */
#define READ_BUDGET (4u << 20)
/* The same for sending, when the peer drains faster than the worker copies. */
#define SEND_BUDGET (4u << 20)

enum ev_kind { EV_LISTEN = 1, EV_WAKE, EV_CONN, EV_SCONN };

struct tcp_transport;
struct tcp_worker;

/* One address of a peer (one of its interfaces).  Shared by the peer's lanes
 * on every worker: the address is written once at creation, the health
 * fields are atomics. */
struct tcp_path {
	char host[256];
	struct sockaddr_storage addr;
	socklen_t addrlen;
	bool resolved;
	atomic_uint_fast64_t dead_until_ms; /* back-off: avoid until then */
	atomic_uint fails;		    /* consecutive failures, sizes the back-off */
};

struct tcp_peer {
	struct mc_peer base; /* first: container_of */
	struct mc_list node;
	char host[256];
	uint16_t port;
	int version;
	atomic_bool failed;
	atomic_uint rr;
	unsigned npaths; /* >= 1; paths[0] is host when the target publishes no list */
	struct tcp_path *paths;
	unsigned nconns;
	struct tcp_conn **conns;
};

struct tcp_conn {
	int kind; /* EV_CONN: must be first */
	int fd;
	struct tcp_worker *w;
	struct tcp_peer *peer;
	unsigned home;	      /* the path this lane prefers (lane index % npaths) */
	unsigned path;	      /* the path the current/next connection uses */
	unsigned fail_streak; /* paths failed since a slice last completed here */
	enum { CONN_DOWN, CONN_CONNECTING, CONN_UP } state;
	bool v2;
	bool want_out;
	bool queued;		 /* on w->ready (guarded by w->lock) */
	struct mc_list incoming; /* guarded by w->lock */
	struct mc_list ready_node;
	struct mc_list work_node; /* worker-private, while taking incoming work */
	struct mc_list sendq;	  /* worker-owned from here on */
	struct mc_list recvq;
	bool got_status;      /* head of recvq: status seen, payload phase */
	uint64_t deadline_ms; /* connect deadline */
	uint64_t last_progress_ms;
	uint8_t *rbuf;
	size_t rpos, rlen;
	struct mc_zc zc; /* v2 write payloads sent by reference */
	bool zc_off;	 /* splicing failed here: copy from now on */
};

struct out_item {
	const uint8_t *ptr;
	uint64_t len;
	uint64_t done;
	struct mc_memreg_entry *ent; /* released when sent (read data) */
	uint64_t dev_seq;	     /* read data in device memory: staged (sconn_dev_iov) */
	uint8_t status[8];
	bool is_status;
};

struct tcp_sconn {
	int kind; /* EV_SCONN: must be first */
	int fd;
	struct tcp_worker *w;
	struct mc_list node; /* in w->sconns, or w->accepted until adopted */
	bool adopted;
	enum { S_HDR, S_WPAYLOAD, S_CLOSING } state;
	struct mc_tcp_hdr cur;
	bool cur_v2;
	bool last_large; /* the last request was a large write */
	struct mc_memreg_entry *cur_ent;
	uint64_t cur_done;
	uint8_t *rbuf;
	size_t rpos, rlen;
	struct out_item *out;
	size_t out_head, out_n, out_cap;
	uint64_t out_bytes;
	size_t reads_pending; /* read-data items in out */
	uint32_t events;
	uint64_t last_progress_ms;
	struct mc_zc zc; /* read data sent by reference */
	bool zc_off;
	struct tcp_devio *dev; /* staging buffers for device memory, from first use */
	char peer_name[64];
};

struct tcp_worker {
	int kind; /* EV_WAKE */
	struct tcp_transport *tp;
	pthread_t thread;
	int epfd;
	int evfd;
	pthread_mutex_t lock;
	struct mc_list ready;	 /* conns with incoming slices */
	struct mc_list accepted; /* sconns another worker accepted for this one */
	atomic_bool sleeping;
	atomic_bool stop;
	struct mc_list sconns;
	atomic_uint nsconns;	 /* adopted server connections (mc_tcp_worker_sconns) */
	struct tcp_conn **conns; /* client conns owned (appended under lock) */
	size_t nconns, conns_cap;
	struct tcp_conn **scan; /* the worker's private copy, for deadline scans */
	size_t nscan, scan_cap;
	uint64_t next_tick_ms;
};

/* Configuration, from tcp_config_table (env MC_TCP_*) then the engine's
 * overrides (struct mc_transport_env). */
struct tcp_config {
	int64_t workers;
	int64_t conns_per_peer;
	char *proto;
	int64_t status_timeout_s;
	int64_t io_timeout_ms;
	int64_t connect_timeout_ms;
	uint64_t split_size;
	int64_t busy_poll_us;
	uint64_t zerocopy_min;
	uint64_t sockbuf;
	char *interfaces;
	int64_t path_backoff_ms;
};

#define CFG(f) offsetof(struct tcp_config, f)
static const struct mc_config_field tcp_config_table[] = {
	{"tcp_workers", "MC_TCP_WORKERS", "2", "TCP worker threads", CFG(workers), MC_CONFIG_INT,
	 1, 64},
	{"tcp_conns_per_peer", "MC_TCP_LANES_PER_PEER", "4", "persistent connections per peer",
	 CFG(conns_per_peer), MC_CONFIG_INT, 1, 16},
	{"tcp_proto", "MC_TCP_PROTO", NULL, "\"1\" forces v1 framing as initiator", CFG(proto),
	 MC_CONFIG_STRING, 0, 0},
	/* accepted for upstream's sake; nothing reads it (a v2 status frame is
	 * bounded by MC_TCP_IO_TIMEOUT_MS) */
	{"tcp_status_timeout", "MC_TCP_STATUS_TIMEOUT_SEC", "30", "wait for a v2 status frame (s)",
	 CFG(status_timeout_s), MC_CONFIG_INT, 1, 3600},
	{"tcp_io_timeout_ms", "MC_TCP_IO_TIMEOUT_MS", "30000",
	 "fail requests on a connection that made no progress for this long",
	 CFG(io_timeout_ms), MC_CONFIG_INT, 100, 3600000},
	{"tcp_connect_timeout_ms", "MC_TCP_CONNECT_TIMEOUT_MS", "5000", "data connect timeout",
	 CFG(connect_timeout_ms), MC_CONFIG_INT, 10, 600000},
	{"tcp_split_size", "MC_TCP_SPLIT_SIZE", "256k",
	 "requests larger than this are split across connections (256 KiB: one large request keeps both cores copying)",
	 CFG(split_size), MC_CONFIG_SIZE, 4096, 1ll << 40},
	{"tcp_busy_poll_us", "MC_TCP_BUSY_POLL_US", "100",
	 "TCP workers poll without sleeping this long after work, so back-to-back requests find "
	 "them awake (waking an idle virtual CPU costs tens of microseconds); 0 = off",
	 CFG(busy_poll_us), MC_CONFIG_INT, 0, 1000000},
	{"tcp_zerocopy_min", "MC_TCP_ZEROCOPY_MIN", "0",
	 "payloads at least this large leave from registered memory by reference (vmsplice + "
	 "splice: the kernel does not copy them into socket buffers; saves the sender a copy "
	 "on a real NIC, but over loopback the receiver then does all the work); 0 = off",
	 CFG(zerocopy_min), MC_CONFIG_SIZE, 0, 1ll << 40},
	{"tcp_sockbuf", "MC_TCP_SOCKBUF", "0", "SO_SNDBUF/SO_RCVBUF (0 = kernel default)",
	 CFG(sockbuf), MC_CONFIG_SIZE, 0, 1 << 30},
	{"tcp_interfaces", "MC_TCP_INTERFACES", NULL,
	 "multi-path TCP: interfaces and/or IPs (comma-separated, or \"auto\" for every up "
	 "non-loopback IPv4 interface) published as the data port's paths; peers spread their "
	 "connections over them and retry a failed path's requests on another",
	 CFG(interfaces), MC_CONFIG_STRING, 0, 0},
	{"tcp_path_backoff_ms", "MC_TCP_PATH_BACKOFF_MS", "1000",
	 "multi-path TCP: a failed path is avoided this long, doubling per consecutive failure "
	 "up to 32x",
	 CFG(path_backoff_ms), MC_CONFIG_INT, 10, 600000},
};
#undef CFG

struct tcp_transport {
	struct mc_transport base;
	struct tcp_config cfg;
	struct mc_memreg *memreg;
	const struct mc_devmem_ops *devmem;
	size_t stage_chunk;
	int listen_kind; /* EV_LISTEN; its address is the epoll cookie */
	int listen_fd;
	uint16_t port;
	unsigned nworkers;
	struct tcp_worker *workers;
	pthread_mutex_t peers_lock;
	struct mc_list peers;
	atomic_uint next_worker;
	atomic_uint next_accept; /* accepted connections are dealt round-robin */
	bool force_v1;
	uint64_t split_size;
	uint64_t zc_min; /* payloads at least this large are spliced; 0: never */
	uint64_t busy_poll_us;
	unsigned conns_per_peer;
	uint64_t io_timeout_ms;
	uint64_t connect_timeout_ms;
	uint64_t path_backoff_ms;
	int sockbuf;
	char *addrs[MC_SEG_MAX_TCP_ADDRS]; /* published paths (MC_TCP_INTERFACES) */
	size_t naddrs;
};

static inline struct tcp_transport *to_tcp(struct mc_transport *tp)
{
	return mc_container_of(tp, struct tcp_transport, base);
}

static uint16_t fd_port_str(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
		getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
			    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(buf, len, "%s:%s", h, p);
	return 0;
}

/* ---- client connections ----------------------------------------------------- */

static void conn_set_events(struct tcp_conn *c, bool out)
{
	struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
	if (c->want_out == out)
		return;
	c->want_out = out;
	epoll_ctl(c->w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void fail_list(struct mc_list *l, int status)
{
	while (!mc_list_empty(l)) {
		struct mc_slice *s = mc_list_first(l, struct mc_slice, node);
		mc_list_del(&s->node);
		mc_slice_done(s, status);
	}
}

static void conn_close_fd(struct tcp_conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(c->w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	mc_zc_close(&c->zc);
	c->state = CONN_DOWN;
	c->want_out = false;
	c->got_status = false;
	c->rpos = c->rlen = 0;
}

/*
 * Close abortively (RST, SO_LINGER 0): the kernel drops what it still holds
 * to send.  A failed connection's slices are retried elsewhere; had its
 * write bytes stayed in the retransmit queue, a path that comes back could
 * deliver them after the retry completed, on top of a newer write.
 */
static void conn_abort_fd(struct tcp_conn *c)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	if (c->fd >= 0)
		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	conn_close_fd(c);
}

/* ---- paths ------------------------------------------------------------------ */

static bool path_usable(const struct tcp_path *pa, uint64_t now)
{
	return atomic_load(&pa->dead_until_ms) <= now;
}

/* A connection over pa failed: avoid the path for backoff * 2^(fails-1),
 * capped at 32 times the base. */
static void path_mark_failed(struct tcp_transport *tp, struct tcp_path *pa)
{
	unsigned f = atomic_fetch_add(&pa->fails, 1);
	uint64_t wait = tp->path_backoff_ms << MC_MIN(f, 5u);
	atomic_store(&pa->dead_until_ms, mc_now_ms() + wait);
}

static void path_mark_ok(struct tcp_path *pa)
{
	if (atomic_load(&pa->fails) || atomic_load(&pa->dead_until_ms)) {
		atomic_store(&pa->fails, 0);
		atomic_store(&pa->dead_until_ms, 0);
	}
}

/* The lane's home path if it is not backing off, else the next one that is
 * not (after `after`, skipping it), else the next after `after`. */
static unsigned path_pick(const struct tcp_conn *c, unsigned after, bool avoid_after)
{
	const struct tcp_peer *p = c->peer;
	uint64_t now = mc_now_ms();
	if (!(avoid_after && c->home == after) && path_usable(&p->paths[c->home], now))
		return c->home;
	for (unsigned k = 1; k <= p->npaths; k++) {
		unsigned i = (after + k) % p->npaths;
		if (avoid_after && i == after)
			continue;
		if (path_usable(&p->paths[i], now))
			return i;
	}
	return (after + 1) % p->npaths;
}

static void conn_connect(struct tcp_conn *c);

/* Move everything c carried back to sendq, progress reset, in order. */
static void conn_requeue_all(struct tcp_conn *c)
{
	struct mc_list tmp = MC_LIST_INIT(tmp), *pos;
	mc_list_splice_tail(&tmp, &c->recvq);
	mc_list_splice_tail(&tmp, &c->sendq);
	mc_list_for_each(pos, &tmp) {
		struct mc_slice *s = mc_list_entry(pos, struct mc_slice, node);
		s->done = 0;
		s->hdr_done = 0;
	}
	mc_list_splice_tail(&c->sendq, &tmp);
}

/*
 * The connection is unusable.  With several paths, and fewer paths failed
 * on this lane than there are since a slice last completed on it, its
 * slices are resent from scratch over another path; otherwise they fail
 * with status.  A slice lives on exactly one lane list at any time and the
 * dead socket is closed before the retry starts, so nothing that arrives
 * late on it can complete a slice a second time.
 */
static void conn_fail(struct tcp_conn *c, int status, const char *why)
{
	struct tcp_peer *p = c->peer;
	bool busy = !mc_list_empty(&c->recvq) || !mc_list_empty(&c->sendq);

	mc_warn("connection to %s:%u failed: %s", p->paths[c->path].host, p->port, why);
	conn_abort_fd(c);
	path_mark_failed(c->w->tp, &p->paths[c->path]);
	if (p->npaths > 1 && busy && ++c->fail_streak < p->npaths) {
		unsigned from = c->path;
		c->path = path_pick(c, from, true);
		mc_info("retrying the requests of a connection to %s:%u over %s",
			p->paths[from].host, p->port, p->paths[c->path].host);
		conn_requeue_all(c);
		conn_connect(c);
		return;
	}
	c->fail_streak = 0;
	/* one path lost while others serve is not a reason to refetch the target */
	if (p->npaths == 1 || busy)
		atomic_store(&p->failed, true);
	fail_list(&c->recvq, status);
	fail_list(&c->sendq, status);
}

/* After a rejection the server closes; requeue what it never looked at. */
static void conn_reset_requeue(struct tcp_conn *c)
{
	conn_close_fd(c);
	conn_requeue_all(c);
	if (!mc_list_empty(&c->sendq))
		conn_connect(c);
}

static bool path_resolve(struct tcp_path *pa, uint16_t port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	char ps[8];
	int rc;
	snprintf(ps, sizeof(ps), "%u", port);
	rc = getaddrinfo(pa->host, ps, &hints, &res);
	if (rc != 0) {
		mc_set_error(MC_ERR_DNS, "cannot resolve %s: %s", pa->host, gai_strerror(rc));
		return false;
	}
	memcpy(&pa->addr, res->ai_addr, res->ai_addrlen);
	pa->addrlen = res->ai_addrlen;
	pa->resolved = true;
	freeaddrinfo(res);
	return true;
}

static void conn_connect(struct tcp_conn *c)
{
	struct tcp_transport *tp = c->w->tp;
	struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = c};
	struct tcp_path *pa = &c->peer->paths[c->path];
	int fd;

	if (!pa->resolved) {
		conn_fail(c, MC_ERR_DNS, "peer address could not be resolved");
		return;
	}
	fd = socket(pa->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		conn_fail(c, MC_ERR_SOCKET, strerror(errno));
		return;
	}
	mc_sock_set_nodelay(fd);
	if (tp->sockbuf)
		mc_sock_set_bufsize(fd, tp->sockbuf);
	c->fd = fd;
	c->v2 = c->peer->version >= 2 && !tp->force_v1;
	if (connect(fd, (struct sockaddr *)&pa->addr, pa->addrlen) < 0 && errno != EINPROGRESS) {
		int e = errno;
		conn_fail(c, MC_ERR_CONN_REFUSED, strerror(e));
		return;
	}
	c->state = CONN_CONNECTING;
	c->want_out = true;
	c->deadline_ms = mc_now_ms() + tp->connect_timeout_ms;
	c->last_progress_ms = mc_now_ms();
	epoll_ctl(c->w->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* A v2 write payload this large leaves by reference (tcp_zc.h): the target's
 * status, which completes the slice, comes after it has every byte. */
static bool conn_zc(const struct tcp_conn *c, const struct mc_slice *s)
{
	uint64_t min = c->w->tp->zc_min;
	return min && c->v2 && !c->zc_off && s->opcode == MC_OP_WRITE && s->len >= min;
}

/* The head of sendq is a spliced write whose header is out: take the next
 * part of its payload into the pipe (conn_send flushes it).  Returns the
 * bytes taken. */
static uint64_t conn_send_zc(struct tcp_conn *c, struct mc_slice *s)
{
	ssize_t k = mc_zc_take(&c->zc, c->fd, s->local + s->done, (size_t)(s->len - s->done));
	if (k < 0) {
		mc_info("connection to %s:%u: sending by reference failed (%s); copying instead",
			c->peer->paths[c->path].host, c->peer->port, strerror(errno));
		c->zc_off = true;
		return 0;
	}
	c->last_progress_ms = mc_now_ms();
	s->done += (uint64_t)k;
	if (s->done == s->len) {
		mc_list_del(&s->node);
		s->done = 0;
		mc_list_add_tail(&c->recvq, &s->node);
	}
	return (uint64_t)k;
}

static void conn_send(struct tcp_conn *c)
{
	uint8_t hdrs[IOV_BATCH][MC_TCP_HDR_LEN];
	struct iovec iov[IOV_BATCH * 2];
	struct msghdr msg = {.msg_iov = iov};
	uint64_t put = 0; /* bytes sent this call (SEND_BUDGET) */

	for (;;) {
		struct mc_list *pos;
		struct mc_slice *head;
		size_t niov = 0, nh = 0, total = 0;
		ssize_t n, sent;
		int zr = mc_zc_flush(&c->zc, c->fd);

		if (zr == 0) {
			conn_set_events(c, true);
			return;
		}
		if (zr < 0) {
			conn_fail(c, MC_ERR_CONN_CLOSED, strerror(errno));
			return;
		}
		if (mc_list_empty(&c->sendq))
			break;
		if (put >= SEND_BUDGET) {
			conn_set_events(c, true); /* the rest when EPOLLOUT reports again */
			return;
		}
		head = mc_list_first(&c->sendq, struct mc_slice, node);
		if (head->hdr_done == MC_TCP_HDR_LEN && conn_zc(c, head)) {
			put += conn_send_zc(c, head);
			continue;
		}
		mc_list_for_each(pos, &c->sendq) {
			struct mc_slice *s = mc_list_entry(pos, struct mc_slice, node);
			if (nh == IOV_BATCH)
				break;
			if (s->hdr_done < MC_TCP_HDR_LEN) {
				struct mc_tcp_hdr h = {
					.size = s->len,
					.addr = s->remote_addr,
					.opcode = (uint8_t)((s->opcode == MC_OP_WRITE
								     ? MC_TCP_OP_WRITE
								     : MC_TCP_OP_READ) |
							    (c->v2 ? MC_TCP_OP_V2 : 0)),
				};
				mc_tcp_hdr_encode(&h, hdrs[nh]);
				iov[niov].iov_base = hdrs[nh] + s->hdr_done;
				iov[niov].iov_len = MC_TCP_HDR_LEN - s->hdr_done;
				total += iov[niov++].iov_len;
			}
			nh++;
			if (conn_zc(c, s))
				break; /* its payload follows by reference */
			if (s->opcode == MC_OP_WRITE) {
				iov[niov].iov_base = s->local + s->done;
				iov[niov].iov_len = (size_t)(s->len - s->done);
				total += iov[niov++].iov_len;
			}
		}
		msg.msg_iovlen = niov;
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		sent = n;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				conn_set_events(c, true);
				return;
			}
			conn_fail(c, MC_ERR_CONN_CLOSED, strerror(errno));
			return;
		}
		put += (uint64_t)n;
		c->last_progress_ms = mc_now_ms();
		/* advance over what left */
		while (n > 0) {
			struct mc_slice *s = mc_list_first(&c->sendq, struct mc_slice, node);
			if (s->hdr_done < MC_TCP_HDR_LEN) {
				size_t k =
					MC_MIN((size_t)n, (size_t)(MC_TCP_HDR_LEN - s->hdr_done));
				s->hdr_done += (uint32_t)k;
				n -= (ssize_t)k;
			}
			if (s->opcode == MC_OP_WRITE && s->hdr_done == MC_TCP_HDR_LEN) {
				uint64_t k = MC_MIN((uint64_t)n, s->len - s->done);
				s->done += k;
				n -= (ssize_t)k;
			}
			if (s->hdr_done == MC_TCP_HDR_LEN &&
			    (s->opcode != MC_OP_WRITE || s->done == s->len)) {
				mc_list_del(&s->node);
				if (s->opcode == MC_OP_WRITE && !c->v2) {
					c->fail_streak = 0;
					mc_slice_done(s, MC_OK); /* v1: no acknowledgement */
				} else {
					s->done = 0;
					mc_list_add_tail(&c->recvq, &s->node);
				}
			} else {
				break;
			}
		}
		if ((size_t)sent < total) {
			/* the kernel took less than offered: wait for room */
			conn_set_events(c, true);
			return;
		}
	}
	conn_set_events(c, false);
}

/* Fill rbuf with up to max bytes; returns bytes read, 0 on EAGAIN, negative
 * status on EOF/error. */
static ssize_t conn_fill(int fd, uint8_t *rbuf, size_t *rpos, size_t *rlen, size_t max)
{
	ssize_t n;
	if (*rpos == *rlen) {
		*rpos = *rlen = 0;
	} else if (*rpos > 0 && RBUF_SIZE - *rlen < 4096) {
		memmove(rbuf, rbuf + *rpos, *rlen - *rpos);
		*rlen -= *rpos;
		*rpos = 0;
	}
	if (*rlen == RBUF_SIZE)
		return 0;
	n = recv(fd, rbuf + *rlen, MC_MIN(max, RBUF_SIZE - *rlen), MSG_DONTWAIT);
	if (n > 0) {
		*rlen += (size_t)n;
		return n;
	}
	if (n == 0)
		return MC_ERR_CONN_CLOSED;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return errno == ECONNRESET ? MC_ERR_CONN_CLOSED : MC_ERR_SOCKET;
}

/* After a direct recv() into a destination returned n <= 0: RECV_RETRY
 * (interrupted), or RECV_STOP (no data for now, or the connection failed
 * and was torn down). */
enum { RECV_RETRY, RECV_STOP };
static int direct_recv_error(struct tcp_conn *c, ssize_t n)
{
	if (n == 0) {
		conn_fail(c, MC_ERR_CONN_CLOSED, "peer closed the connection");
		return RECV_STOP;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return RECV_STOP;
	if (errno == EINTR)
		return RECV_RETRY;
	conn_fail(c, MC_ERR_CONN_CLOSED, strerror(errno));
	return RECV_STOP;
}

static void conn_recv(struct tcp_conn *c)
{
	uint64_t got = 0; /* bytes read this call (READ_BUDGET) */
	for (;;) {
		struct mc_slice *s;
		size_t avail = c->rlen - c->rpos;
		bool from_sendq = false;

		if (!mc_list_empty(&c->recvq)) {
			s = mc_list_first(&c->recvq, struct mc_slice, node);
		} else if (!mc_list_empty(&c->sendq) &&
			   mc_list_first(&c->sendq, struct mc_slice, node)->hdr_done ==
				   MC_TCP_HDR_LEN) {
			/* an early status for a write still being sent: a rejection */
			s = mc_list_first(&c->sendq, struct mc_slice, node);
			from_sendq = true;
		} else {
			s = NULL;
		}

		if (s && c->v2 && !c->got_status) {
			uint32_t code;
			if (avail == 0 && !from_sendq && s->opcode == MC_OP_READ &&
			    s->len >= DIRECT_MIN) {
				/* status into rbuf, payload straight into the destination */
				struct iovec iov[2] = {{c->rbuf, 8}, {s->local, (size_t)s->len}};
				ssize_t n;
				if (got >= READ_BUDGET)
					return;
				n = readv(c->fd, iov, 2);
				if (n > 0) {
					got += (uint64_t)n;
					c->rpos = 0;
					c->rlen = (size_t)MC_MIN(n, (ssize_t)8);
					if (n > 8)
						s->done = (uint64_t)(n - 8);
					c->last_progress_ms = mc_now_ms();
					continue;
				}
				if (direct_recv_error(c, n) == RECV_RETRY)
					continue;
				return;
			}
			if (avail < 8)
				goto fill;
			if (mc_tcp_status_decode(c->rbuf + c->rpos, &code) != MC_OK) {
				conn_fail(c, MC_ERR_PROTOCOL, "malformed status frame");
				return;
			}
			c->rpos += 8;
			if (code != MC_TCP_STATUS_OK) {
				mc_info("%s:%u rejected %s of %llu bytes at 0x%llx",
					c->peer->paths[c->path].host, c->peer->port,
					s->opcode == MC_OP_WRITE ? "write" : "read",
					(unsigned long long)s->len,
					(unsigned long long)s->remote_addr);
				mc_list_del(&s->node);
				mc_slice_done(s, MC_ERR_REMOTE_REJECTED);
				conn_reset_requeue(c);
				return;
			}
			if (from_sendq) {
				conn_fail(c, MC_ERR_PROTOCOL, "status before the request was sent");
				return;
			}
			if (s->opcode == MC_OP_WRITE) {
				mc_list_del(&s->node);
				c->fail_streak = 0;
				mc_slice_done(s, MC_OK);
				c->last_progress_ms = mc_now_ms();
				continue;
			}
			c->got_status = true;
			continue;
		}
		if (s && !from_sendq && s->opcode == MC_OP_READ) {
			uint64_t want = s->len - s->done;
			if (avail) {
				size_t k = (size_t)MC_MIN((uint64_t)avail, want);
				memcpy(s->local + s->done, c->rbuf + c->rpos, k);
				c->rpos += k;
				s->done += k;
				want -= k;
			}
			if (want == 0) {
				mc_list_del(&s->node);
				c->got_status = false;
				c->fail_streak = 0;
				mc_slice_done(s, MC_OK);
				c->last_progress_ms = mc_now_ms();
				continue;
			}
			if (want >= DIRECT_MIN) {
				ssize_t n;
				if (got >= READ_BUDGET)
					return;
				n = recv(c->fd, s->local + s->done, (size_t)want, MSG_DONTWAIT);
				if (n > 0) {
					got += (uint64_t)n;
					s->done += (uint64_t)n;
					c->last_progress_ms = mc_now_ms();
					continue;
				}
				if (direct_recv_error(c, n) == RECV_RETRY)
					continue;
				return;
			}
		}
		if (!s && avail) {
			conn_fail(c, MC_ERR_PROTOCOL, "unexpected bytes from server");
			return;
		}
	fill : {
		ssize_t n;
		if (got >= READ_BUDGET)
			return;
		n = conn_fill(c->fd, c->rbuf, &c->rpos, &c->rlen, RBUF_SIZE);
		if (n == 0)
			return;
		if (n < 0) {
			if (!s && mc_list_empty(&c->sendq)) {
				/* idle connection closed by the server: just reconnect later */
				conn_close_fd(c);
				return;
			}
			conn_fail(c, (int)n, "peer closed the connection");
			return;
		}
		got += (uint64_t)n;
		c->last_progress_ms = mc_now_ms();
	}
	}
}

static void conn_event(struct tcp_conn *c, uint32_t events)
{
	if (c->state == CONN_CONNECTING) {
		int err = 0;
		socklen_t el = sizeof(err);
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
			char why[300];
			snprintf(why, sizeof(why), "connect: %s", strerror(err ? err : errno));
			conn_fail(c, MC_ERR_CONN_REFUSED, why);
			return;
		}
		/* an event of the socket this one replaced (same batch) must not
		 * pass for this connect's completion */
		if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) < 0)
			return;
		c->state = CONN_UP;
		path_mark_ok(&c->peer->paths[c->path]);
		c->last_progress_ms = mc_now_ms();
		conn_send(c);
		return;
	}
	if (c->state != CONN_UP)
		return;
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		conn_recv(c);
	if (c->state == CONN_UP && (events & EPOLLOUT))
		conn_send(c);
}

/* ---- server connections ---------------------------------------------------- */

/*
 * The server's only accesses to registered (user) memory.  They are kept in
 * these small functions so the TSan suppressions (tests/tsan.supp) can name
 * them exactly: in single-process tests the ordering with the test thread
 * runs through a socket, which TSan cannot see.
 */
__attribute__((noinline)) static void user_mem_copy_in(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

__attribute__((noinline)) static ssize_t user_mem_recv(int fd, void *dst, size_t n)
{
	return recv(fd, dst, n, MSG_DONTWAIT);
}

__attribute__((noinline)) static ssize_t user_mem_send(int fd, const struct msghdr *msg)
{
	return sendmsg(fd, msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---- server connections: device memory ------------------------------------------
 *
 * A request whose target range is device memory (mem/devmem.h) never gets
 * that address near recv() or sendmsg(): its bytes pass through two pinned
 * buffers of the connection (pinned at its first such request).  A write's
 * payload is received into one buffer while the other is being copied to
 * the device; its status goes out once every copy finished.  A read's data
 * item in the output queue is marked (dev_seq) and leaves chunk by chunk
 * from the buffers: while chunk k is sent, chunk k+1 is copied out of the
 * device.  Waiting for a copy blocks the worker for at most one chunk at
 * PCIe speed, and normally not at all, since each copy had a whole chunk's
 * network time to finish.  Read items are never sent by reference
 * (sconn_zc): a buffer is reused as soon as the kernel took its bytes.
 */
#define NO_CHUNK UINT64_MAX

struct tcp_devio {
	struct mc_devstage st;
	/* the write being received */
	unsigned wbuf;	 /* buffer being filled */
	size_t wfill;	 /* bytes in it */
	uint64_t wstart; /* payload offset of its first byte */
	/* the read being sent: the out item with dev_seq == rseq */
	uint64_t rseq, next_seq;
	uint64_t rchunk[2]; /* chunk of the item each buffer holds, or NO_CHUNK */
};

enum { DEV_DONE, DEV_AGAIN, DEV_CLOSE };

static bool sconn_dev_open(struct tcp_sconn *sc)
{
	struct tcp_transport *tp = sc->w->tp;
	struct tcp_devio *d;

	if (sc->dev)
		return true;
	d = mc_calloc(1, sizeof(*d));
	if (!d)
		return false;
	if (mc_devstage_init(&d->st, tp->devmem, 2, tp->stage_chunk) != MC_OK) {
		mc_error("cannot pin staging buffers for the connection from %s: %s", sc->peer_name,
			 mc_last_error());
		mc_free(d);
		return false;
	}
	d->rchunk[0] = d->rchunk[1] = NO_CHUNK;
	sc->dev = d;
	return true;
}

/* Waits for copies still running: they use the connection's buffers. */
static void sconn_dev_release(struct tcp_sconn *sc)
{
	if (!sc->dev)
		return;
	mc_devstage_release(&sc->dev->st);
	mc_free(sc->dev);
	sc->dev = NULL;
}

/* Mark the read-data item just queued as device memory. */
static void sconn_dev_mark_last(struct tcp_sconn *sc)
{
	struct out_item *it = &sc->out[(sc->out_head + sc->out_n - 1) % sc->out_cap];
	it->dev_seq = ++sc->dev->next_seq;
}

/* S_WPAYLOAD into device memory: DEV_DONE once every byte of the payload is
 * on the device, DEV_AGAIN when the socket has no more for now. */
static int sconn_dev_write(struct tcp_sconn *sc)
{
	struct tcp_devio *d = sc->dev;
	uint8_t *base = (uint8_t *)(uintptr_t)sc->cur.addr;
	size_t chunk = d->st.chunk;

	d->rseq = 0; /* the buffers carry write data now */
	while (sc->cur_done < sc->cur.size) {
		uint64_t want = sc->cur.size - sc->cur_done;
		size_t avail = sc->rlen - sc->rpos, room, k;
		uint8_t *dst;

		if (d->wfill == 0 && mc_devstage_wait(&d->st, d->wbuf) != MC_OK)
			goto copy_failed;
		room = (size_t)MC_MIN((uint64_t)(chunk - d->wfill), want);
		dst = mc_devstage_host(&d->st, d->wbuf) + d->wfill;
		if (avail) {
			k = MC_MIN(avail, room);
			memcpy(dst, sc->rbuf + sc->rpos, k);
			sc->rpos += k;
		} else {
			ssize_t n = recv(sc->fd, dst, room, MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return DEV_AGAIN;
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				mc_info("data connection from %s closed mid-write", sc->peer_name);
				return DEV_CLOSE;
			}
			k = (size_t)n;
			sc->last_progress_ms = mc_now_ms();
		}
		d->wfill += k;
		sc->cur_done += k;
		if (d->wfill == chunk || sc->cur_done == sc->cur.size) {
			if (mc_devstage_copy(&d->st, d->wbuf, sc->cur_ent->dev, base + d->wstart,
					     mc_devstage_host(&d->st, d->wbuf), d->wfill) != MC_OK)
				goto copy_failed;
			d->wstart += d->wfill;
			d->wfill = 0;
			d->wbuf ^= 1;
		}
	}
	/* the payload counts as written once the device has it */
	if (mc_devstage_drain(&d->st) != MC_OK)
		goto copy_failed;
	d->wstart = 0;
	return DEV_DONE;
copy_failed:
	mc_error("write of %llu bytes from %s to device memory at 0x%llx failed: %s",
		 (unsigned long long)sc->cur.size, sc->peer_name, (unsigned long long)sc->cur.addr,
		 mc_last_error());
	return DEV_CLOSE;
}

/* The iovec for the next bytes of device read item it: the chunk holding
 * it->done, copied out of the device unless it already is (and the next
 * chunk started into the other buffer).  *last: the iovec reaches the
 * item's end.  False when a copy failed. */
static bool sconn_dev_iov(struct tcp_sconn *sc, const struct out_item *it, struct iovec *iov,
			  bool *last)
{
	struct tcp_devio *d = sc->dev;
	uint64_t chunk = d->st.chunk, c = it->done / chunk, nch = (it->len + chunk - 1) / chunk;
	unsigned b = (unsigned)(c & 1);
	uint64_t off;

	if (it->dev_seq != d->rseq) {
		/* the item before left completely, and so did its chunks */
		if (mc_devstage_drain(&d->st) != MC_OK)
			goto copy_failed;
		d->rseq = it->dev_seq;
		d->rchunk[0] = d->rchunk[1] = NO_CHUNK;
	}
	for (uint64_t k = c; k < c + 2 && k < nch; k++) {
		unsigned kb = (unsigned)(k & 1);
		if (d->rchunk[kb] == k)
			continue;
		/* kb holds chunk k - 2, sent already, or nothing */
		if (mc_devstage_wait(&d->st, kb) != MC_OK ||
		    mc_devstage_copy(&d->st, kb, it->ent->dev, mc_devstage_host(&d->st, kb),
				     it->ptr + k * chunk,
				     (size_t)MC_MIN(chunk, it->len - k * chunk)) != MC_OK)
			goto copy_failed;
		d->rchunk[kb] = k;
	}
	if (mc_devstage_wait(&d->st, b) != MC_OK)
		goto copy_failed;
	off = it->done - c * chunk;
	iov->iov_base = mc_devstage_host(&d->st, b) + off;
	iov->iov_len = (size_t)(MC_MIN(chunk, it->len - c * chunk) - off);
	*last = c + 1 == nch;
	return true;
copy_failed:
	mc_error("read of %llu bytes from device memory at %p for %s failed: %s",
		 (unsigned long long)it->len, (const void *)it->ptr, sc->peer_name,
		 mc_last_error());
	errno = EIO;
	return false;
}

static void sconn_free(struct tcp_sconn *sc)
{
	struct mc_memreg *reg = sc->w->tp->memreg;
	if (sc->fd >= 0) {
		/* explicit removal: a forked child may share the fd */
		epoll_ctl(sc->w->epfd, EPOLL_CTL_DEL, sc->fd, NULL);
		close(sc->fd);
	}
	mc_zc_close(&sc->zc);
	sconn_dev_release(sc); /* before the entries: copies may still use them */
	if (sc->cur_ent)
		mc_memreg_put(reg, sc->cur_ent);
	for (size_t i = 0; i < sc->out_n; i++) {
		struct out_item *it = &sc->out[(sc->out_head + i) % sc->out_cap];
		if (it->ent)
			mc_memreg_put(reg, it->ent);
	}
	mc_list_del(&sc->node);
	if (sc->adopted)
		atomic_fetch_sub(&sc->w->nsconns, 1);
	mc_free(sc->out);
	mc_free(sc->rbuf);
	mc_free(sc);
}

static bool sconn_push(struct tcp_sconn *sc, const uint8_t *ptr, uint64_t len,
		       struct mc_memreg_entry *ent, int status_code)
{
	struct out_item *it;
	if (sc->out_n == sc->out_cap) {
		size_t ncap = sc->out_cap ? sc->out_cap * 2 : 64;
		struct out_item *n = mc_malloc(ncap * sizeof(*n));
		if (!n)
			return false;
		for (size_t i = 0; i < sc->out_n; i++)
			n[i] = sc->out[(sc->out_head + i) % sc->out_cap];
		mc_free(sc->out);
		sc->out = n;
		sc->out_cap = ncap;
		sc->out_head = 0;
	}
	it = &sc->out[(sc->out_head + sc->out_n) % sc->out_cap];
	memset(it, 0, sizeof(*it));
	if (status_code >= 0) {
		mc_tcp_status_encode((uint32_t)status_code, it->status);
		it->is_status = true;
		it->len = 8;
	} else {
		it->ptr = ptr;
		it->len = len;
		it->ent = ent;
		sc->reads_pending++;
	}
	sc->out_n++;
	sc->out_bytes += it->len;
	return true;
}

static void sconn_set_events(struct tcp_sconn *sc)
{
	uint32_t ev = 0;
	struct epoll_event e;
	if (sc->state != S_CLOSING && sc->out_bytes < OUT_HIGH_WATER)
		ev |= EPOLLIN;
	if (sc->out_n || sc->zc.piped)
		ev |= EPOLLOUT;
	if (ev == sc->events)
		return;
	sc->events = ev;
	e.events = ev;
	e.data.ptr = sc;
	epoll_ctl(sc->w->epfd, EPOLL_CTL_MOD, sc->fd, &e);
}

/* Read data this large leaves by reference (tcp_zc.h): the read completes
 * at its initiator once the bytes arrived there. */
static bool sconn_zc(const struct tcp_sconn *sc, const struct out_item *it)
{
	uint64_t min = sc->w->tp->zc_min;
	return min && !sc->zc_off && !it->is_status && !it->dev_seq && it->len >= min;
}

/* Account k bytes of the head items as gone; pops finished items. */
static void sconn_sent(struct tcp_sconn *sc, uint64_t n)
{
	struct mc_memreg *reg = sc->w->tp->memreg;
	while (n > 0 && sc->out_n) {
		struct out_item *it = &sc->out[sc->out_head];
		uint64_t k = MC_MIN(n, it->len - it->done);
		it->done += k;
		n -= k;
		sc->out_bytes -= k;
		if (it->done < it->len)
			break;
		if (it->ent) {
			mc_memreg_put(reg, it->ent);
			sc->reads_pending--;
		}
		sc->out_head = (sc->out_head + 1) % sc->out_cap;
		sc->out_n--;
	}
}

/* Returns false when the connection was freed. */
static bool sconn_flush(struct tcp_sconn *sc)
{
	uint64_t put = 0; /* bytes sent this call (SEND_BUDGET) */
	for (;;) {
		struct iovec iov[IOV_BATCH];
		struct out_item *head;
		size_t niov = 0;
		ssize_t n;
		bool staged = false; /* a device read item is in iov */
		int zr = mc_zc_flush(&sc->zc, sc->fd);

		if (zr < 0)
			goto failed;
		/* past the budget, EPOLLOUT (armed below) brings us back */
		if (zr == 0 || !sc->out_n || put >= SEND_BUDGET)
			break;
		head = &sc->out[sc->out_head];
		if (sconn_zc(sc, head)) {
			n = mc_zc_take(&sc->zc, sc->fd, head->ptr + head->done,
				       (size_t)(head->len - head->done));
			if (n < 0) {
				mc_info("data connection from %s: sending by reference failed "
					"(%s); copying instead",
					sc->peer_name, strerror(errno));
				sc->zc_off = true;
				continue;
			}
			sc->last_progress_ms = mc_now_ms();
			put += (uint64_t)n;
			sconn_sent(sc, (uint64_t)n);
			continue;
		}
		for (size_t i = 0; i < sc->out_n && niov < IOV_BATCH; i++) {
			struct out_item *it = &sc->out[(sc->out_head + i) % sc->out_cap];
			if (i > 0 && sconn_zc(sc, it))
				break;
			if (it->dev_seq) {
				bool last;
				if (staged)
					break; /* the two buffers serve one item at a time */
				if (!sconn_dev_iov(sc, it, &iov[niov++], &last))
					goto failed;
				staged = true;
				if (!last)
					break;
				continue;
			}
			iov[niov].iov_base =
				(void *)((it->is_status ? it->status : it->ptr) + it->done);
			iov[niov].iov_len = (size_t)(it->len - it->done);
			niov++;
		}
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = niov};
		n = user_mem_send(sc->fd, &msg);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			goto failed;
		}
		sc->last_progress_ms = mc_now_ms();
		put += (uint64_t)n;
		sconn_sent(sc, (uint64_t)n);
	}
	if (sc->state == S_CLOSING && sc->out_n == 0 && sc->zc.piped == 0) {
		sconn_free(sc);
		return false;
	}
	sconn_set_events(sc);
	return true;
failed:
	mc_info("closing data connection from %s: %s", sc->peer_name, strerror(errno));
	sconn_free(sc);
	return false;
}

/* A request outside registered memory: reject (v2) or close (v1). */
static bool sconn_reject(struct tcp_sconn *sc, const struct mc_tcp_hdr *h, bool v2)
{
	mc_info("rejected %s of %llu bytes at 0x%llx from %s: not inside registered memory",
		(h->opcode & 0x7f) == MC_TCP_OP_WRITE ? "write" : "read",
		(unsigned long long)h->size, (unsigned long long)h->addr, sc->peer_name);
	if (!v2) {
		sconn_free(sc);
		return false;
	}
	sconn_push(sc, NULL, 0, NULL, MC_TCP_STATUS_REJ);
	sc->state = S_CLOSING;
	shutdown(sc->fd, SHUT_RD);
	return sconn_flush(sc);
}

/* Returns false when the connection was freed. */
static bool sconn_readable(struct tcp_sconn *sc)
{
	struct mc_memreg *reg = sc->w->tp->memreg;
	uint64_t got = 0; /* bytes read this call (READ_BUDGET) */
	for (;;) {
		size_t avail = sc->rlen - sc->rpos;
		if (sc->state == S_CLOSING)
			return true;
		if (sc->out_bytes >= OUT_HIGH_WATER) {
			/* drain first; if the socket takes it all, carry on parsing,
			 * else EPOLLOUT brings us back (see worker_main) */
			if (!sconn_flush(sc))
				return false;
			if (sc->out_bytes >= OUT_HIGH_WATER)
				return true;
			continue;
		}
		if (sc->state == S_HDR) {
			struct mc_tcp_hdr h;
			bool v2, write;
			if (avail < MC_TCP_HDR_LEN)
				goto fill;
			mc_tcp_hdr_decode(sc->rbuf + sc->rpos, &h);
			v2 = (h.opcode & MC_TCP_OP_V2) != 0;
			write = (h.opcode & 0x7f) == MC_TCP_OP_WRITE;
			if (write && sc->reads_pending) {
				/* keep order: earlier reads must leave first */
				if (!sconn_flush(sc))
					return false;
				if (sc->reads_pending)
					return true;
				continue;
			}
			sc->rpos += MC_TCP_HDR_LEN;
			sc->cur_ent = mc_memreg_acquire(reg, h.addr, h.size);
			if (!sc->cur_ent)
				return sconn_reject(sc, &h, v2);
			if (sc->cur_ent->dev >= 0 && !sconn_dev_open(sc)) {
				sconn_free(sc);
				return false;
			}
			sc->last_large = write && h.size >= DIRECT_MIN;
			if (write) {
				sc->cur = h;
				sc->cur_v2 = v2;
				sc->cur_done = 0;
				sc->state = S_WPAYLOAD;
				continue;
			}
			if ((v2 && !sconn_push(sc, NULL, 0, NULL, MC_TCP_STATUS_OK)) ||
			    !sconn_push(sc, (const uint8_t *)(uintptr_t)h.addr, h.size, sc->cur_ent,
					-1)) {
				mc_error("out of memory queueing a read response");
				sconn_free(sc);
				return false;
			}
			if (sc->cur_ent->dev >= 0)
				sconn_dev_mark_last(sc);
			sc->cur_ent = NULL;
			continue;
		}
		/* S_WPAYLOAD */
		if (sc->cur_ent->dev >= 0) {
			int r = sconn_dev_write(sc);
			if (r == DEV_CLOSE) {
				sconn_free(sc);
				return false;
			}
			if (r == DEV_AGAIN)
				break;
			/* DEV_DONE: the payload is complete, finished below */
		}
		{
			uint64_t want = sc->cur.size - sc->cur_done;
			uint8_t *dst = (uint8_t *)(uintptr_t)sc->cur.addr + sc->cur_done;
			if (avail && want) {
				size_t k = (size_t)MC_MIN((uint64_t)avail, want);
				user_mem_copy_in(dst, sc->rbuf + sc->rpos, k);
				sc->rpos += k;
				sc->cur_done += k;
				want -= k;
			}
			if (want == 0) {
				mc_memreg_put(reg, sc->cur_ent);
				sc->cur_ent = NULL;
				sc->state = S_HDR;
				if (sc->cur_v2 &&
				    !sconn_push(sc, NULL, 0, NULL, MC_TCP_STATUS_OK)) {
					sconn_free(sc);
					return false;
				}
				continue;
			}
			if (want >= DIRECT_MIN) {
				ssize_t n;
				if (got >= READ_BUDGET)
					break;
				n = user_mem_recv(sc->fd,
						  (uint8_t *)(uintptr_t)sc->cur.addr + sc->cur_done,
						  (size_t)want);
				if (n > 0) {
					got += (uint64_t)n;
					sc->cur_done += (uint64_t)n;
					sc->last_progress_ms = mc_now_ms();
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
					break;
				if (n < 0 && errno == EINTR)
					continue;
				mc_info("data connection from %s closed mid-write", sc->peer_name);
				sconn_free(sc);
				return false;
			}
		}
	fill : {
		/* after a large write, fetch just the next header so that its payload
		 * can go straight to its destination rather than through rbuf */
		size_t max = sc->state == S_HDR && sc->last_large && sc->rpos == sc->rlen
				     ? MC_TCP_HDR_LEN
				     : RBUF_SIZE;
		ssize_t n;
		if (got >= READ_BUDGET)
			break;
		n = conn_fill(sc->fd, sc->rbuf, &sc->rpos, &sc->rlen, max);
		if (n == 0)
			break;
		if (n < 0) {
			if (sc->state != S_HDR || sc->rpos != sc->rlen)
				mc_info("data connection from %s closed mid-request",
					sc->peer_name);
			sconn_free(sc);
			return false;
		}
		got += (uint64_t)n;
		sc->last_progress_ms = mc_now_ms();
	}
	}
	return sconn_flush(sc);
}

/* Start serving sc on its worker (the calling thread). */
static void sconn_adopt(struct tcp_sconn *sc)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = sc};
	sc->adopted = true;
	atomic_fetch_add(&sc->w->nsconns, 1);
	mc_list_add_tail(&sc->w->sconns, &sc->node);
	epoll_ctl(sc->w->epfd, EPOLL_CTL_ADD, sc->fd, &ev);
}

static void worker_wake(struct tcp_worker *w)
{
	uint64_t one = 1;
	if (write(w->evfd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the worker is awake anyway */
	}
}

static void worker_accept(struct tcp_worker *w)
{
	struct tcp_transport *tp = w->tp;
	for (;;) {
		struct tcp_worker *tw;
		struct tcp_sconn *sc;
		int fd = accept4(tp->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				mc_warn("accept: %s", strerror(errno));
			return;
		}
		sc = mc_calloc(1, sizeof(*sc));
		if (sc)
			sc->rbuf = mc_malloc(RBUF_SIZE);
		if (!sc || !sc->rbuf) {
			mc_error("out of memory accepting a data connection");
			if (sc)
				mc_free(sc);
			close(fd);
			continue;
		}
		sc->kind = EV_SCONN;
		sc->fd = fd;
		sc->zc = (struct mc_zc)MC_ZC_INIT;
		sc->w = w;
		sc->state = S_HDR;
		sc->events = EPOLLIN;
		sc->last_progress_ms = mc_now_ms();
		mc_sock_set_nodelay(fd);
		if (tp->sockbuf)
			mc_sock_set_bufsize(fd, tp->sockbuf);
		fd_port_str(fd, sc->peer_name, sizeof(sc->peer_name));
		/* The worker that wakes first would accept a peer's whole burst
		 * of lanes; dealing them out keeps every core receiving. */
		tw = &tp->workers[atomic_fetch_add(&tp->next_accept, 1) % tp->nworkers];
		sc->w = tw;
		if (tw == w) {
			sconn_adopt(sc);
			continue;
		}
		pthread_mutex_lock(&tw->lock);
		mc_list_add_tail(&tw->accepted, &sc->node);
		pthread_mutex_unlock(&tw->lock);
		if (atomic_load(&tw->sleeping))
			worker_wake(tw);
	}
}

/* ---- worker loop ------------------------------------------------------------ */

/* Returns whether there was any. */
static bool worker_take_incoming(struct tcp_worker *w)
{
	struct mc_list ready = MC_LIST_INIT(ready);
	struct mc_list accepted = MC_LIST_INIT(accepted);
	bool any;
	pthread_mutex_lock(&w->lock);
	any = !mc_list_empty(&w->ready) || !mc_list_empty(&w->accepted);
	mc_list_splice_tail(&accepted, &w->accepted);
	while (!mc_list_empty(&w->ready)) {
		struct tcp_conn *c = mc_list_first(&w->ready, struct tcp_conn, ready_node);
		mc_list_del(&c->ready_node);
		c->queued = false;
		mc_list_splice_tail(&c->sendq, &c->incoming);
		/* not ready_node: a submitter may queue c again once we unlock */
		mc_list_add_tail(&ready, &c->work_node);
	}
	pthread_mutex_unlock(&w->lock);
	while (!mc_list_empty(&accepted)) {
		struct tcp_sconn *sc = mc_list_first(&accepted, struct tcp_sconn, node);
		mc_list_del(&sc->node);
		sconn_adopt(sc);
	}
	while (!mc_list_empty(&ready)) {
		struct tcp_conn *c = mc_list_first(&ready, struct tcp_conn, work_node);
		mc_list_del(&c->work_node);
		if (c->state == CONN_DOWN) {
			if (c->peer->npaths > 1)
				c->path = path_pick(c, c->path, false);
			conn_connect(c);
		} else if (c->state == CONN_UP)
			conn_send(c);
	}
	return any;
}

/* Copy connections added since the last tick into the worker's private
 * array: a submitter may append to (and realloc) w->conns at any time. */
static void worker_sync_conns(struct tcp_worker *w)
{
	pthread_mutex_lock(&w->lock);
	if (w->nconns > w->nscan) {
		if (w->nconns > w->scan_cap) {
			void *nv = mc_realloc(w->scan, w->conns_cap * sizeof(*w->scan));
			if (nv) {
				w->scan = nv;
				w->scan_cap = w->conns_cap;
			}
		}
		if (w->nconns <= w->scan_cap) {
			memcpy(w->scan + w->nscan, w->conns + w->nscan,
			       (w->nconns - w->nscan) * sizeof(*w->scan));
			w->nscan = w->nconns;
		}
	}
	pthread_mutex_unlock(&w->lock);
}

/* What the kernel holds for a socket whose connection made no progress: bytes
 * not yet read, bytes not yet acknowledged by the peer, and TCP's retransmit
 * state.  Tells a stalled network (unacknowledged bytes, backoff) from a
 * stalled reader (unread bytes). */
static void sock_stall_info(int fd, char *buf, size_t len)
{
	int inq = -1, outq = -1;
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	(void)ioctl(fd, FIONREAD, &inq);
	(void)ioctl(fd, TIOCOUTQ, &outq);
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0)
		snprintf(buf, len,
			 "unread %d, unsent or unacked %d, rto %u ms, backoff %u, retransmits %u",
			 inq, outq, ti.tcpi_rto / 1000, ti.tcpi_backoff, ti.tcpi_total_retrans);
	else
		snprintf(buf, len, "unread %d, unsent or unacked %d", inq, outq);
}

/* Bytes the kernel holds for us to read: a connection with some is not
 * stalled by its peer, whatever the time since this worker last read it. */
static bool sock_has_unread(int fd)
{
	int inq = 0;
	return ioctl(fd, FIONREAD, &inq) == 0 && inq > 0;
}

static void worker_tick(struct tcp_worker *w, uint64_t now)
{
	struct tcp_transport *tp = w->tp;
	struct mc_list *pos, *tmp;

	worker_sync_conns(w);
	for (size_t i = 0; i < w->nscan; i++) {
		struct tcp_conn *c = w->scan[i];
		bool busy = !mc_list_empty(&c->sendq) || !mc_list_empty(&c->recvq);
		if (c->state == CONN_CONNECTING && now > c->deadline_ms)
			conn_fail(c, MC_ERR_TIMEOUT, "connect timed out");
		else if (c->state == CONN_UP && busy &&
			 now - c->last_progress_ms > tp->io_timeout_ms && !sock_has_unread(c->fd)) {
			char why[200], info[160];
			sock_stall_info(c->fd, info, sizeof(info));
			snprintf(why, sizeof(why), "no progress within the i/o timeout (%s)", info);
			conn_fail(c, MC_ERR_TIMEOUT, why);
		} else if (c->state == CONN_UP && !busy && c->path != c->home &&
			   path_usable(&c->peer->paths[c->home], now))
			conn_close_fd(c); /* idle away from home: the next use tries home again */
	}
	mc_list_for_each_safe(pos, tmp, &w->sconns) {
		struct tcp_sconn *sc = mc_list_entry(pos, struct tcp_sconn, node);
		bool busy = sc->state != S_HDR || sc->out_n || sc->rpos != sc->rlen;
		/* unread bytes while reading is on: the worker is behind, not the
		 * peer (while reading is off, the peer is not taking our output) */
		if (busy && now - sc->last_progress_ms > tp->io_timeout_ms &&
		    !((sc->events & EPOLLIN) && sock_has_unread(sc->fd))) {
			char info[160];
			sock_stall_info(sc->fd, info, sizeof(info));
			mc_info("closing stalled data connection from %s (%s)", sc->peer_name,
				info);
			sconn_free(sc);
		}
	}
}

static void *worker_main(void *arg)
{
	struct tcp_worker *w = arg;
	struct epoll_event evs[64];
	sigset_t pipe_sig;

	/* splice() into a socket the peer closed raises SIGPIPE (it has no
	 * MSG_NOSIGNAL); the signal goes to this thread, which ignores it by
	 * keeping it blocked and sees EPIPE instead */
	sigemptyset(&pipe_sig);
	sigaddset(&pipe_sig, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_sig, NULL);
	/* After work, poll without sleeping for MC_TCP_BUSY_POLL_US: the next
	 * request of a back-to-back caller then finds the worker awake, where
	 * waking an idle virtual CPU costs tens of microseconds */
	uint64_t busy_poll_ns = w->tp->busy_poll_us * 1000ull, spin_until_ns = 0;

	while (!atomic_load(&w->stop)) {
		int n, timeout = TICK_MS;
		uint64_t now;
		bool spin = spin_until_ns && mc_now_ns() < spin_until_ns, worked;
		/* while polling, submitters need not ring the eventfd: the loop
		 * looks at the ready list on every turn */
		if (!spin)
			atomic_store(&w->sleeping, true);
		pthread_mutex_lock(&w->lock);
		if (spin || !mc_list_empty(&w->ready) || !mc_list_empty(&w->accepted))
			timeout = 0;
		pthread_mutex_unlock(&w->lock);
		n = epoll_wait(w->epfd, evs, 64, timeout);
		atomic_store(&w->sleeping, false);
		for (int i = 0; i < n; i++) {
			int kind = *(int *)evs[i].data.ptr;
			if (kind == EV_WAKE) {
				uint64_t v;
				if (read(w->evfd, &v, sizeof(v)) < 0) {
					/* EAGAIN: another wake-up already drained it */
				}
			}
		}
		worked = worker_take_incoming(w) || n > 0;
		for (int i = 0; i < n; i++) {
			int kind = *(int *)evs[i].data.ptr;
			if (kind == EV_CONN) {
				conn_event((struct tcp_conn *)evs[i].data.ptr, evs[i].events);
			} else if (kind == EV_SCONN) {
				struct tcp_sconn *sc = evs[i].data.ptr;
				if ((evs[i].events & EPOLLOUT) && !sconn_flush(sc))
					continue;
				/* requests parked in rbuf (output was full, or a write
				 * waited for earlier reads) get no new EPOLLIN: resume */
				if ((evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ||
				    sc->rpos != sc->rlen)
					sconn_readable(sc);
			} else if (kind == EV_LISTEN) {
				worker_accept(w);
			}
		}
		now = mc_now_ms();
		if (now >= w->next_tick_ms) {
			worker_tick(w, now);
			w->next_tick_ms = now + TICK_MS;
		}
		if (worked && busy_poll_ns)
			spin_until_ns = mc_now_ns() + busy_poll_ns;
		else if (spin)
			sched_yield(); /* keep the vCPU awake, not a runnable thread off it */
	}
	return NULL;
}

/* ---- peers and submission ------------------------------------------------------ */

/* The paths of a peer: its published addresses, or host alone. */
static bool peer_same_paths(const struct tcp_peer *p, const char *host, const char *const *addrs,
			    size_t naddrs)
{
	if (naddrs == 0)
		return p->npaths == 1 && strcmp(p->paths[0].host, host) == 0;
	if (p->npaths != naddrs)
		return false;
	for (size_t i = 0; i < naddrs; i++)
		if (strcmp(p->paths[i].host, addrs[i]) != 0)
			return false;
	return true;
}

static void peer_free(struct tcp_peer *p)
{
	mc_free(p->conns);
	mc_free(p->paths);
	mc_free(p);
}

/* The peer object for host:port (created on first use, lives as long as the
 * transport).  proto_version is the target's tcp_proto_version; addrs are
 * the target's published paths ("mc_tcp_addrs", naddrs 0 = host only):
 * the peer's connections spread over them and fail over between them. */
static struct tcp_peer *peer_get(struct tcp_transport *tp, const char *host, uint16_t port,
				 int proto_version, const char *const *addrs, size_t naddrs)
{
	struct tcp_peer *p;
	struct mc_list *pos;

	naddrs = MC_MIN(naddrs, (size_t)MC_SEG_MAX_TCP_ADDRS);
	pthread_mutex_lock(&tp->peers_lock);
	mc_list_for_each(pos, &tp->peers) {
		p = mc_list_entry(pos, struct tcp_peer, node);
		if (p->port == port && p->version == proto_version && strcmp(p->host, host) == 0 &&
		    peer_same_paths(p, host, addrs, naddrs))
			goto out;
	}
	p = mc_calloc(1, sizeof(*p));
	if (!p)
		goto out;
	p->npaths = naddrs ? (unsigned)naddrs : 1;
	/* every path gets at least one lane */
	p->nconns = MC_MAX(tp->conns_per_peer, p->npaths);
	p->paths = mc_calloc(p->npaths, sizeof(*p->paths));
	p->conns = mc_calloc(p->nconns, sizeof(*p->conns));
	if (!p->paths || !p->conns) {
		peer_free(p);
		p = NULL;
		goto out;
	}
	p->base.tp = &tp->base;
	snprintf(p->host, sizeof(p->host), "%s", host);
	p->port = port;
	p->version = proto_version;
	/* resolved once, here, so workers only ever read the addresses */
	for (unsigned i = 0; i < p->npaths; i++) {
		struct tcp_path *pa = &p->paths[i];
		snprintf(pa->host, sizeof(pa->host), "%s", naddrs ? addrs[i] : host);
		atomic_init(&pa->dead_until_ms, 0);
		atomic_init(&pa->fails, 0);
		if (!path_resolve(pa, port))
			mc_warn("peer %s:%u: %s", pa->host, port, mc_last_error());
	}
	if (p->npaths > 1)
		mc_info("peer %s:%u: %u paths, %u connections", host, port, p->npaths, p->nconns);
	for (unsigned i = 0; i < p->nconns; i++) {
		unsigned wi = atomic_fetch_add(&tp->next_worker, 1) % tp->nworkers;
		struct tcp_worker *w = &tp->workers[wi];
		struct tcp_conn *c = mc_calloc(1, sizeof(*c));
		if (c)
			c->rbuf = mc_malloc(RBUF_SIZE);
		if (!c || !c->rbuf) {
			mc_free(c);
			p->nconns = i;
			break;
		}
		c->kind = EV_CONN;
		c->fd = -1;
		c->zc = (struct mc_zc)MC_ZC_INIT;
		c->w = w;
		c->peer = p;
		c->home = c->path = i % p->npaths;
		mc_list_init(&c->incoming);
		mc_list_init(&c->sendq);
		mc_list_init(&c->recvq);
		mc_list_init(&c->ready_node);
		mc_list_init(&c->work_node);
		pthread_mutex_lock(&w->lock);
		if (w->nconns == w->conns_cap) {
			size_t ncap = w->conns_cap ? w->conns_cap * 2 : 16;
			void *nv = mc_realloc(w->conns, ncap * sizeof(*w->conns));
			if (nv) {
				w->conns = nv;
				w->conns_cap = ncap;
			}
		}
		if (w->nconns < w->conns_cap)
			w->conns[w->nconns++] = c;
		pthread_mutex_unlock(&w->lock);
		p->conns[i] = c;
	}
	if (p->nconns == 0) {
		peer_free(p);
		p = NULL;
		goto out;
	}
	mc_list_add_tail(&tp->peers, &p->node);
out:
	pthread_mutex_unlock(&tp->peers_lock);
	return p;
}

static mc_status tcp_peer_open(struct mc_transport *base, const struct mc_seg_desc *d,
			       const char *host, struct mc_peer **out)
{
	struct tcp_peer *p;

	if (strcmp(d->protocol, "tcp") != 0 || !d->tcp_data_port)
		return MC_ERR_TRANSPORT_UNSUPPORTED;
	p = peer_get(to_tcp(base), host, d->tcp_data_port, d->tcp_proto_version,
		     (const char *const *)d->tcp_addrs, d->ntcp_addrs);
	if (!p)
		return MC_ERR_NOMEM;
	*out = &p->base;
	return MC_OK;
}

static bool tcp_peer_failed(struct mc_peer *peer)
{
	return atomic_load(&mc_container_of(peer, struct tcp_peer, base)->failed);
}

static void tcp_peer_reset(struct mc_peer *peer)
{
	atomic_store(&mc_container_of(peer, struct tcp_peer, base)->failed, false);
}

static uint16_t tcp_data_port(struct mc_transport *base)
{
	return to_tcp(base)->port;
}

void mc_tcp_timeouts(struct mc_transport *base, uint64_t *io_ms_out, uint64_t *connect_ms_out)
{
	mc_assert(base->ops == &mc_tcp_transport_ops);
	*io_ms_out = to_tcp(base)->io_timeout_ms;
	*connect_ms_out = to_tcp(base)->connect_timeout_ms;
}

unsigned mc_tcp_worker_sconns(struct mc_transport *base, unsigned worker)
{
	struct tcp_transport *tp = base ? to_tcp(base) : NULL;
	if (!tp || worker >= tp->nworkers)
		return 0;
	return atomic_load(&tp->workers[worker].nsconns);
}

static mc_status tcp_submit(struct mc_transport *base, struct mc_peer *peer,
			    struct mc_slice **slices, size_t n)
{
	struct tcp_transport *tp = to_tcp(base);
	struct tcp_peer *p = mc_container_of(peer, struct tcp_peer, base);
	unsigned start = atomic_fetch_add(&p->rr, (unsigned)n);

	/* one pass per worker so each worker's lock is taken once */
	for (unsigned wi = 0; wi < tp->nworkers; wi++) {
		struct tcp_worker *w = &tp->workers[wi];
		bool any = false;
		for (size_t i = 0; i < n; i++) {
			struct tcp_conn *c = p->conns[(start + i) % p->nconns];
			if (c->w != w)
				continue;
			if (!any) {
				pthread_mutex_lock(&w->lock);
				any = true;
			}
			slices[i]->done = 0;
			slices[i]->hdr_done = 0;
			mc_list_add_tail(&c->incoming, &slices[i]->node);
			if (!c->queued) {
				c->queued = true;
				mc_list_add_tail(&w->ready, &c->ready_node);
			}
		}
		if (any) {
			pthread_mutex_unlock(&w->lock);
			if (atomic_load(&w->sleeping))
				worker_wake(w);
		}
	}
	return MC_OK;
}

static unsigned tcp_split(struct mc_transport *base, uint64_t len)
{
	struct tcp_transport *tp = to_tcp(base);
	uint64_t k;
	if (len <= tp->split_size)
		return 1;
	k = (len + tp->split_size - 1) / tp->split_size;
	return (unsigned)MC_MIN(k, (uint64_t)tp->conns_per_peer);
}

static mc_status tcp_fill_desc(struct mc_transport *base, struct mc_seg_desc *d)
{
	struct tcp_transport *tp = to_tcp(base);
	if (!d->protocol && !(d->protocol = mc_strdup("tcp")))
		return MC_ERR_NOMEM;
	d->tcp_data_port = tp->port;
	d->tcp_proto_version = 2;
	if (!tp->naddrs || d->tcp_addrs)
		return MC_OK;
	d->tcp_addrs = mc_calloc(tp->naddrs, sizeof(*d->tcp_addrs));
	if (!d->tcp_addrs)
		return MC_OK; /* published without its paths: peers use the rpc host */
	for (size_t i = 0; i < tp->naddrs; i++) {
		d->tcp_addrs[d->ntcp_addrs] = mc_strdup(tp->addrs[i]);
		if (d->tcp_addrs[d->ntcp_addrs])
			d->ntcp_addrs++;
	}
	return MC_OK;
}

/* ---- local paths ------------------------------------------------------------ */

static void add_local_addr(struct tcp_transport *tp, const char *a)
{
	if (tp->naddrs == MC_SEG_MAX_TCP_ADDRS) {
		mc_warn("MC_TCP_INTERFACES: more than %d addresses; %s and later ones ignored",
			MC_SEG_MAX_TCP_ADDRS, a);
		return;
	}
	for (size_t i = 0; i < tp->naddrs; i++)
		if (strcmp(tp->addrs[i], a) == 0)
			return;
	tp->addrs[tp->naddrs] = mc_strdup(a);
	if (tp->addrs[tp->naddrs])
		tp->naddrs++;
}

/* The IPv4 addresses of interface name, or of every up, running, non-loopback
 * interface when name is NULL.  Returns how many were added. */
static size_t add_iface_addrs(struct tcp_transport *tp, const char *name)
{
	struct ifaddrs *ifs, *i;
	size_t before = tp->naddrs;
	if (getifaddrs(&ifs) < 0)
		return 0;
	for (i = ifs; i; i = i->ifa_next) {
		char buf[INET_ADDRSTRLEN];
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		if (name ? strcmp(i->ifa_name, name) != 0
			 : (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP) ||
				    !(i->ifa_flags & IFF_RUNNING))
			continue;
		if (inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf,
			      sizeof(buf)))
			add_local_addr(tp, buf);
	}
	freeifaddrs(ifs);
	return tp->naddrs - before;
}

/*
 * MC_TCP_INTERFACES: comma- or space-separated interface names, IP
 * addresses, or "auto" (every up non-loopback IPv4 interface).  The result
 * is published as the descriptor's "mc_tcp_addrs"; the data listener is on
 * the wildcard address, so it serves all of them.
 */
static void load_local_paths(struct tcp_transport *tp, const char *spec)
{
	char *copy, *tok, *save = NULL;
	if (!spec || !*spec)
		return;
	copy = mc_strdup(spec);
	if (!copy)
		return;
	for (tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		unsigned char bin[sizeof(struct in6_addr)];
		if (strcmp(tok, "auto") == 0) {
			add_iface_addrs(tp, NULL);
		} else if (inet_pton(AF_INET, tok, bin) == 1 ||
			   inet_pton(AF_INET6, tok, bin) == 1) {
			add_local_addr(tp, tok);
		} else if (strlen(tok) > MC_SEG_MAX_TCP_ADDR_LEN || add_iface_addrs(tp, tok) == 0) {
			mc_warn("MC_TCP_INTERFACES: %.64s is neither an address nor an interface with "
				"an IPv4 address; ignored",
				tok);
		}
	}
	mc_free(copy);
	for (size_t i = 0; i < tp->naddrs; i++)
		mc_info("publishing tcp path %s", tp->addrs[i]);
}

/* ---- open / close --------------------------------------------------------------- */

/* The network interfaces of NIC name: itself when it is one, else those of
 * the RDMA device of that name (/sys/class/infiniband/NAME/device/net/). */
static void add_device_addrs(struct tcp_transport *tp, const char *name)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *e;

	if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return;
	snprintf(path, sizeof(path), "/sys/class/net/%s", name);
	if (access(path, F_OK) == 0) {
		add_iface_addrs(tp, name);
		return;
	}
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net", name);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			add_iface_addrs(tp, e->d_name);
	closedir(d);
}

/* The engine's device list (upstream's device_name, MC_TE_FILTERS) as TCP
 * paths, when MC_TCP_INTERFACES is unset: published only when the devices
 * give two or more addresses, so one NIC keeps the engine's own host. */
static void load_device_paths(struct tcp_transport *tp, const char *devices)
{
	char *copy = mc_strdup(devices), *tok, *save = NULL;
	if (!copy)
		return;
	for (tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save))
		add_device_addrs(tp, tok);
	mc_free(copy);
	if (tp->naddrs < 2) {
		for (size_t i = 0; i < tp->naddrs; i++)
			mc_free(tp->addrs[i]);
		tp->naddrs = 0;
		return;
	}
	for (size_t i = 0; i < tp->naddrs; i++)
		mc_info("publishing tcp path %s (device list %s)", tp->addrs[i], devices);
}

static void tcp_close(struct mc_transport *base)
{
	struct tcp_transport *tp = to_tcp(base);
	for (unsigned i = 0; tp->workers && i < tp->nworkers; i++) {
		struct tcp_worker *w = &tp->workers[i];
		if (!w->thread)
			continue;
		atomic_store(&w->stop, true);
		worker_wake(w);
		pthread_join(w->thread, NULL);
	}
	for (unsigned i = 0; tp->workers && i < tp->nworkers; i++) {
		struct tcp_worker *w = &tp->workers[i];
		if (!w->tp)
			continue; /* never initialised */
		while (!mc_list_empty(&w->sconns))
			sconn_free(mc_list_first(&w->sconns, struct tcp_sconn, node));
		while (!mc_list_empty(&w->accepted)) /* dealt out, never adopted */
			sconn_free(mc_list_first(&w->accepted, struct tcp_sconn, node));
		for (size_t j = 0; j < w->nconns; j++) {
			struct tcp_conn *c = w->conns[j];
			mc_list_splice_tail(&c->sendq, &c->incoming);
			if (c->fd >= 0)
				close(c->fd);
			mc_zc_close(&c->zc);
			fail_list(&c->recvq, MC_ERR_SHUTDOWN);
			fail_list(&c->sendq, MC_ERR_SHUTDOWN);
			mc_free(c->rbuf);
			mc_free(c);
		}
		mc_free(w->conns);
		mc_free(w->scan);
		if (w->epfd >= 0)
			close(w->epfd);
		if (w->evfd >= 0)
			close(w->evfd);
		pthread_mutex_destroy(&w->lock);
	}
	while (!mc_list_empty(&tp->peers)) {
		struct tcp_peer *p = mc_list_first(&tp->peers, struct tcp_peer, node);
		mc_list_del(&p->node);
		peer_free(p);
	}
	for (size_t i = 0; i < tp->naddrs; i++)
		mc_free(tp->addrs[i]);
	if (tp->listen_fd >= 0)
		close(tp->listen_fd);
	pthread_mutex_destroy(&tp->peers_lock);
	mc_config_release(tcp_config_table, MC_ARRAY_SIZE(tcp_config_table), &tp->cfg);
	mc_free(tp->workers);
	mc_free(tp);
}

static mc_status tcp_open(const struct mc_transport_env *env, struct mc_transport **out)
{
	struct tcp_transport *tp = mc_calloc(1, sizeof(*tp));
	struct tcp_config *cfg;
	int rc = MC_OK;

	if (!tp)
		return MC_ERR_NOMEM;
	cfg = &tp->cfg;
	mc_config_defaults(tcp_config_table, MC_ARRAY_SIZE(tcp_config_table), cfg);
	mc_config_load_env(tcp_config_table, MC_ARRAY_SIZE(tcp_config_table), cfg);
	if (env->workers)
		cfg->workers = env->workers;
	if (env->conns_per_peer)
		cfg->conns_per_peer = env->conns_per_peer;
	tp->base.ops = &mc_tcp_transport_ops;
	tp->memreg = env->memreg;
	tp->devmem = env->devmem;
	tp->stage_chunk = env->stage_chunk;
	tp->listen_kind = EV_LISTEN;
	tp->listen_fd = -1;
	pthread_mutex_init(&tp->peers_lock, NULL);
	mc_list_init(&tp->peers);
	tp->nworkers = (unsigned)cfg->workers;
	tp->conns_per_peer = (unsigned)cfg->conns_per_peer;
	tp->split_size = cfg->split_size;
	tp->zc_min = cfg->zerocopy_min;
	tp->busy_poll_us = (uint64_t)cfg->busy_poll_us;
	tp->io_timeout_ms = (uint64_t)cfg->io_timeout_ms;
	tp->connect_timeout_ms = (uint64_t)cfg->connect_timeout_ms;
	tp->path_backoff_ms = (uint64_t)cfg->path_backoff_ms;
	if (cfg->interfaces && *cfg->interfaces)
		load_local_paths(tp, cfg->interfaces);
	else if (env->devices)
		load_device_paths(tp, env->devices);
	tp->sockbuf = (int)cfg->sockbuf;
	tp->force_v1 = cfg->proto && strcmp(cfg->proto, "1") == 0;

	tp->workers = mc_calloc(tp->nworkers, sizeof(*tp->workers));
	if (!tp->workers) {
		rc = MC_ERR_NOMEM;
		goto err;
	}
	for (unsigned i = 0; i < tp->nworkers; i++) {
		tp->workers[i].epfd = -1;
		tp->workers[i].evfd = -1;
	}
	rc = mc_sock_listen_range(env->min_port, env->max_port, 500, 1024);
	if (rc < 0)
		goto err;
	tp->listen_fd = rc;
	tp->port = mc_sock_local_port(tp->listen_fd);

	for (unsigned i = 0; i < tp->nworkers; i++) {
		struct tcp_worker *w = &tp->workers[i];
		struct epoll_event ev;
		w->kind = EV_WAKE;
		w->tp = tp;
		pthread_mutex_init(&w->lock, NULL);
		mc_list_init(&w->ready);
		mc_list_init(&w->accepted);
		mc_list_init(&w->sconns);
		w->epfd = epoll_create1(EPOLL_CLOEXEC);
		w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (w->epfd < 0 || w->evfd < 0) {
			rc = mc_set_error(MC_ERR_SOCKET, "epoll/eventfd: %s", strerror(errno));
			goto err;
		}
		ev.events = EPOLLIN;
		ev.data.ptr = w;
		epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev);
		ev.events = EPOLLIN | EPOLLEXCLUSIVE;
		ev.data.ptr = &tp->listen_kind;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, tp->listen_fd, &ev) < 0) {
			rc = mc_set_error(MC_ERR_SOCKET, "epoll_ctl listener: %s", strerror(errno));
			goto err;
		}
	}
	for (unsigned i = 0; i < tp->nworkers; i++) {
		if (pthread_create(&tp->workers[i].thread, NULL, worker_main, &tp->workers[i]) !=
		    0) {
			tp->workers[i].thread = 0;
			rc = mc_set_error(MC_ERR_INTERNAL, "cannot start tcp worker");
			goto err;
		}
	}
	*out = &tp->base;
	return MC_OK;
err:
	tcp_close(&tp->base);
	return rc;
}

const struct mc_transport_ops mc_tcp_transport_ops = {
	.name = "tcp",
	.caps = {.local = false, .same_host = false, .device_memory = false, .optional = false},
	.config = tcp_config_table,
	.nconfig = MC_ARRAY_SIZE(tcp_config_table),
	.open = tcp_open,
	.close = tcp_close,
	.peer_open = tcp_peer_open,
	.peer_failed = tcp_peer_failed,
	.peer_reset = tcp_peer_reset,
	.submit = tcp_submit,
	.fill_desc = tcp_fill_desc,
	.split = tcp_split,
	.data_port = tcp_data_port,
};

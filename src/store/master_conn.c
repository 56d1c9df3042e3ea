/*
 * store/master_conn.c - the store client's pipelined RPC connection to the
 * master.
 *
 * Design.  One TCP socket per client, many callers.  A caller encodes its
 * request with a fresh id, puts a struct call (on its own stack) on the
 * pending list, writes the frame, and then waits for its answer.
 *
 * Reading: "the leader reads".  Whoever holds the read role (c->reader)
 * reads the socket, cuts the stream into frames with mc_proto_frame_peek,
 * and hands each answer to the pending call with its id (a copy into the
 * call's inline buffer, as almost every answer fits, and a signal of its
 * condition variable).  A waiting caller takes the role itself whenever
 * nobody holds it, so a lone caller reads its own answer: no hand-off to
 * another thread and no second wake-up per call, which on a virtual
 * machine costs more than the round trip.  Before blocking in poll the
 * leader polls the socket without sleeping for MC_RPC_BUSY_POLL_US
 * (yielding the CPU between tries, as the master's loop does), because the
 * answer usually arrives within tens of microseconds.  The leader keeps
 * the role until its own answer is in (delivering other callers' answers
 * on the way), then gives it up and signals the first pending call, which
 * takes the role over; with many callers the answers are still pipelined
 * and may arrive in any order.  Partly received frames stay in rxbuf for
 * the next holder.  The protocol has no unsolicited frames; an answer
 * whose caller gave up is dropped by whichever holder reads it.
 *
 * The receiver thread reads nothing while callers wait.  It watches the
 * socket for a hang-up (poll for POLLRDHUP only, which data does not
 * wake), so a master that closes an idle connection is noticed at once;
 * then it takes the role when it is free, hands out what is left, and
 * fails the connection.  It is also the only thread that closes the
 * socket, so no thread ever polls or reads a closed (and maybe reused) fd:
 * readers use the fd only while holding the role, and the receiver closes
 * only when nobody holds it.
 *
 * States: DOWN (no socket) -> UP (connected, ServiceReady answered) ->
 * BROKEN (a read or write failed, a frame was malformed, or reset was
 * asked: every pending call has failed and the socket is shut down but
 * still open) -> DOWN (the receiver closed it).  Only a caller connects,
 * and only from DOWN, so a failure is followed by a reconnect on next use
 * and not by a busy loop.
 *
 * Locks: send_lock is held while connecting and while writing one frame,
 * so frames never interleave and the socket cannot be closed under a
 * writer; lock protects state, fd, reader, the pending list and the call
 * records on it.  Order: send_lock before lock.  The read role is not a
 * lock: its holder keeps no lock while it reads; rxbuf belongs to it.
 */
#define MC_LOG_MODULE "store"
#include "store/master_conn.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "meta/coord.h"
#include "mooncake/version.h"
#include "store/client_config.h"
#include "store/client_metrics.h"

#define DEFAULT_MASTER_PORT 50051
#define CALL_INLINE	    512 /* answers up to this size need no allocation */
#define BUF_CACHE	    8	/* encode buffers kept for reuse */
#define BUF_KEEP_MAX	    (1u << 20)
#define RX_MIN_ROOM	    4096

enum conn_state {
	CONN_DOWN,
	CONN_UP,
	CONN_BROKEN,
};

enum reader {
	READER_NONE,
	READER_CALLER,
	READER_RX,
};

struct call {
	struct mc_list node; /* on conn->pending while waiting */
	uint64_t id;
	pthread_cond_t cond;	     /* answer in, call failed, or the read role is free */
	mc_master_conn_work_fn work; /* the caller's while it waits; NULL: none (left) */
	void *work_arg;
	bool done;
	mc_status status; /* transport outcome once done */
	uint8_t *frame;	  /* the answer: inline_buf or allocated */
	size_t len;
	uint8_t inline_buf[CALL_INLINE];
};

struct mc_master_conn {
	char host[256]; /* the master; with coord, the coordinator's uri (messages) */
	uint16_t port;
	/* an HA master address (etcd://, redis://): the leader is read from
	 * the view under view_key; all of it used under send_lock */
	struct mc_coord *coord;
	char view_key[300];
	uint64_t view_version; /* of the leader connected to last (0: none yet) */
	/* the client's segments, remounted on a new leader before any call
	 * (mc_master_conn_on_new_leader); set before the first call */
	mc_master_conn_segments_fn segments_fn;
	void *segments_arg;
	struct mc_store_uuid client_id;
	atomic_uint_fast64_t new_leader_ms;  /* when a connect last reached a new view */
	atomic_uint_fast64_t leader_changes; /* connects that reached a new view */
	int64_t failover_ms;		     /* how long a connect waits for a leader */
	int64_t timeout_ms;		     /* per call; < 0 = none */
	int64_t connect_timeout_ms;	     /* connect + ServiceReady */
	uint64_t busy_poll_us;		     /* leader polls this long before sleeping */
	struct mc_auth_secret auth;	     /* the cluster secret: each connection opens with the
						handshake (base/auth_hs.h) */

	pthread_mutex_t send_lock; /* connecting, writing one frame */
	pthread_mutex_t lock;	   /* everything below */
	pthread_cond_t state_cond; /* state, reader (when rx_waits), users */
	int state;		   /* enum conn_state */
	int fd;
	int reader;		/* enum reader: who holds the read role */
	bool rx_waits;		/* the receiver waits for the role to be free */
	bool stop;		/* mc_master_conn_free has begun */
	unsigned users;		/* calls inside mc_master_conn_call */
	struct mc_list pending; /* struct call, waiting for answers */
	mc_status fail_status;	/* what the pending calls get when the link drops */
	struct mc_buf *bufs[BUF_CACHE];
	unsigned nbufs;
	struct mc_master_conn_stats stats;
	struct mc_client_metrics *metrics; /* set once before the first call */

	atomic_uint_fast64_t next_id;
	atomic_uint peer_minor;	       /* the master's minor version (its ServiceReady answer) */
	atomic_uint_fast64_t connects; /* connections made (mc_master_conn_epoch) */
	pthread_t rx;
	bool rx_started;
	/* the read role's holder only */
	uint8_t *rxbuf;
	size_t rxcap;
	size_t rxlen;  /* bytes received, not yet handed out */
	size_t rxneed; /* size of the frame being received, once its header is in */
};

static void cond_init_mono(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

/* Wait on cond until signalled or the absolute monotonic deadline (ms, 0 = none).
 * Returns false on timeout. */
static bool cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *m, uint64_t deadline_ms)
{
	struct timespec ts;
	if (!deadline_ms) {
		pthread_cond_wait(cond, m);
		return true;
	}
	ts.tv_sec = (time_t)(deadline_ms / 1000);
	ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
	return pthread_cond_timedwait(cond, m, &ts) != ETIMEDOUT;
}

static uint64_t deadline_after(int64_t ms)
{
	return ms < 0 ? 0 : mc_now_ms() + (uint64_t)ms;
}

static bool expired(uint64_t deadline_ms)
{
	return deadline_ms && mc_now_ms() >= deadline_ms;
}

/* ---- connection state ----------------------------------------------------- */

/* Fail every pending call with status; lock held. */
static void fail_pending_locked(struct mc_master_conn *c, mc_status status)
{
	struct mc_list *pos, *tmp;
	mc_list_for_each_safe(pos, tmp, &c->pending) {
		struct call *k = mc_list_entry(pos, struct call, node);
		mc_list_del(&k->node);
		k->status = status;
		k->done = true;
		pthread_cond_signal(&k->cond);
	}
}

/* Fail the connection: pending calls fail with why and the socket is shut
 * down, which wakes whoever polls or reads it; the receiver closes it once
 * nobody holds the read role.  Lock held. */
static void mark_broken_locked(struct mc_master_conn *c, mc_status why)
{
	if (c->state != CONN_UP)
		return;
	c->state = CONN_BROKEN;
	c->fail_status = why;
	fail_pending_locked(c, why);
	shutdown(c->fd, SHUT_RDWR);
	pthread_cond_broadcast(&c->state_cond);
}

void mc_master_conn_reset(struct mc_master_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	mark_broken_locked(c, MC_ERR_RPC_FAIL);
	pthread_mutex_unlock(&c->lock);
}

/* Give the read role up: the first pending call takes it over (its
 * thread may be waiting, or about to look), the receiver if it waits for
 * it.  Lock held. */
static void release_role_locked(struct mc_master_conn *c)
{
	c->reader = READER_NONE;
	if (!mc_list_empty(&c->pending)) {
		struct call *next = mc_list_first(&c->pending, struct call, node);
		pthread_cond_signal(&next->cond);
	}
	if (c->rx_waits)
		pthread_cond_broadcast(&c->state_cond);
}

/* Close a BROKEN connection; receiver only, lock held, nobody reading. */
static void close_broken_locked(struct mc_master_conn *c)
{
	pthread_mutex_unlock(&c->lock);
	/* no writer may be on the socket when it closes */
	pthread_mutex_lock(&c->send_lock);
	pthread_mutex_lock(&c->lock);
	mc_assert(c->state == CONN_BROKEN && c->reader == READER_NONE);
	close(c->fd);
	c->fd = -1;
	c->state = CONN_DOWN;
	c->rxlen = 0;
	c->rxneed = 0;
	fail_pending_locked(c, c->fail_status); /* none are left; kept for safety */
	pthread_cond_broadcast(&c->state_cond);
	pthread_mutex_unlock(&c->send_lock);
	if (!c->stop)
		mc_info("connection to master %s:%u lost; reconnecting on next call", c->host,
			c->port);
}

/* Read one whole frame (blocking socket) into a malloc'ed buffer. */
static mc_status read_frame(int fd, uint64_t deadline, uint8_t **frame_out, size_t *len_out,
			    struct mc_proto_hdr *hdr_out)
{
	uint8_t hdr[MC_PROTO_HDR_LEN];
	uint8_t *f;
	mc_status rc = mc_sock_read_full(fd, hdr, sizeof(hdr), deadline);
	if (rc != MC_OK)
		return rc;
	rc = mc_proto_hdr_decode(hdr, MC_PROTO_MAX_PAYLOAD, hdr_out);
	if (rc != MC_OK)
		return rc;
	f = mc_malloc(MC_PROTO_HDR_LEN + (size_t)hdr_out->payload_len);
	if (!f)
		return MC_ERR_NOMEM;
	memcpy(f, hdr, sizeof(hdr));
	rc = mc_sock_read_full(fd, f + MC_PROTO_HDR_LEN, hdr_out->payload_len, deadline);
	if (rc != MC_OK) {
		mc_free(f);
		return rc;
	}
	*frame_out = f;
	*len_out = MC_PROTO_HDR_LEN + (size_t)hdr_out->payload_len;
	return MC_OK;
}

/*
 * One request and its answer on fd (blocking) before the connection is
 * published, for the handshake and the remount: send b's frame, read the
 * answer and decode it into *m (the caller releases it on MC_OK), all by
 * deadline.  *h gets the answer's header as far as it was read (its
 * version too when that is refused); *decoding (may be NULL) says whether
 * a failure was in decoding a whole answer rather than in sending or
 * reading it.
 */
static mc_status exchange(int fd, const struct mc_buf *b, uint64_t deadline, struct mc_proto_hdr *h,
			  struct mc_store_msg *m, bool *decoding)
{
	uint8_t *frame = NULL;
	size_t len = 0;
	mc_status rc = mc_sock_write_full(fd, b->data, b->len, deadline);

	if (rc == MC_OK)
		rc = read_frame(fd, deadline, &frame, &len, h);
	if (decoding)
		*decoding = rc == MC_OK;
	if (rc != MC_OK)
		return rc;
	rc = mc_store_msg_decode(frame, len, MC_PROTO_MAX_PAYLOAD, m);
	mc_free(frame);
	return rc;
}

/*
 * On a new leader, before the connection is published: send the client's
 * ReMountSegment and wait for its answer on fd (blocking), so that no call
 * of this client reaches the new leader before its segments are bound
 * again (their objects are hidden until then).  A refused remount is
 * logged and left to the heartbeat (the leader then answers its ping with
 * NEED_REMOUNT); only a transport failure fails the connect.
 */
static mc_status remount_on(struct mc_master_conn *c, int fd, const char *host, uint16_t port)
{
	uint64_t deadline = deadline_after(c->timeout_ms);
	struct mc_store_segment *segs = NULL;
	struct mc_store_remount_req req = {c->client_id, 0, NULL};
	struct mc_store_msg m;
	struct mc_proto_hdr h;
	struct mc_buf b;
	mc_status rc;

	req.n_segments = (uint32_t)c->segments_fn(c->segments_arg, &segs);
	if (!req.n_segments) {
		mc_free(segs);
		return MC_OK;
	}
	req.segments = segs;
	mc_buf_init(&b);
	rc = mc_store_request_encode(&b, MC_STORE_REMOUNT_SEGMENT, atomic_fetch_add(&c->next_id, 1),
				     &req);
	mc_free(segs);
	if (rc == MC_OK)
		rc = exchange(fd, &b, deadline, &h, &m, NULL);
	mc_buf_release(&b);
	if (rc != MC_OK)
		return mc_set_error(rc == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT : MC_ERR_RPC_FAIL,
				    "remounting on the new master leader %s:%u: %s", host, port,
				    mc_last_error());
	if (m.hdr.status != MC_OK || m.hdr.type != MC_STORE_REMOUNT_SEGMENT)
		mc_warn("the new master leader %s:%u refused the remount of %u segments "
			"(%s: %.*s); the heartbeat tries again",
			host, port, req.n_segments,
			mc_strerror(m.hdr.status != MC_OK ? (mc_status)m.hdr.status
							  : MC_ERR_PROTOCOL),
			(int)m.error.len, m.error.ptr ? m.error.ptr : "");
	else
		mc_info("remounted %u segments on the new master leader %s:%u", req.n_segments,
			host, port);
	mc_store_msg_release(&m);
	return MC_OK;
}

/* Connect to host:port and say ServiceReady, then remount when asked;
 * send_lock held, state DOWN. */
static mc_status connect_to(struct mc_master_conn *c, const char *host, uint16_t port, bool remount)
{
	uint64_t deadline = deadline_after(c->connect_timeout_ms);
	struct mc_store_hello hello = {mc_proto_str_c("mooncake-c " MC_VERSION_STRING)};
	struct mc_store_msg m;
	struct mc_proto_hdr h;
	struct mc_buf b;
	bool decoding = false;
	mc_status rc;
	int fd;

	fd = mc_sock_connect(
		host, port,
		c->connect_timeout_ms > 0 ? (int)MC_MIN(c->connect_timeout_ms, INT32_MAX) : 0,
		false);
	if (fd < 0)
		return mc_set_error(MC_ERR_RPC_FAIL, "cannot connect to master %s:%u: %s", c->host,
				    c->port, mc_last_error());
	if (mc_auth_on(&c->auth)) {
		uint64_t now = mc_now_ms();
		/* no connect timeout: the handshake still gets a bounded one */
		rc = mc_auth_hs_run(fd, &c->auth, MC_AUTH_CLIENT, "master",
				    !deadline ? 30000
				    : deadline > now
					    ? (int)MC_MIN(deadline - now, (uint64_t)INT32_MAX)
					    : 0);
		if (rc != MC_OK) {
			if (rc == MC_ERR_PERMISSION)
				atomic_fetch_add(&mc_auth_refused_total, 1);
			rc = mc_set_error(rc == MC_ERR_PERMISSION ? rc : MC_ERR_RPC_FAIL,
					  "master %s:%u: %s", host, port, mc_last_error());
			close(fd);
			return rc;
		}
	}
	mc_buf_init(&b);
	rc = mc_store_service_ready_request_encode(&b, atomic_fetch_add(&c->next_id, 1), &hello);
	if (rc == MC_OK)
		rc = exchange(fd, &b, deadline, &h, &m, &decoding);
	mc_buf_release(&b);
	if (rc != MC_OK && decoding) {
		rc = mc_set_error(rc == MC_ERR_INVALID_VERSION ? rc : MC_ERR_RPC_FAIL,
				  "bad service ready answer from master %s:%u", host, port);
		goto err_close;
	}
	if (rc == MC_ERR_INVALID_VERSION) {
		rc = mc_set_error(MC_ERR_INVALID_VERSION,
				  "master %s:%u speaks protocol %u.%u, this client %u.%u", host,
				  port, h.major, h.minor, MC_STORE_PROTO_MAJOR,
				  MC_STORE_PROTO_MINOR);
		goto err_close;
	}
	if (rc != MC_OK) {
		rc = mc_set_error(rc == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT : MC_ERR_RPC_FAIL,
				  "service ready with master %s:%u failed: %s", host, port,
				  mc_last_error());
		goto err_close;
	}
	if (m.hdr.status != MC_OK || m.hdr.type != MC_STORE_SERVICE_READY) {
		rc = m.hdr.status != MC_OK ? (mc_status)m.hdr.status : MC_ERR_PROTOCOL;
		rc = mc_set_error(rc, "master %s:%u refused service ready: %.*s", host, port,
				  (int)m.error.len, m.error.ptr ? m.error.ptr : "");
		mc_store_msg_release(&m);
		goto err_close;
	}
	mc_debug("connected to master %s:%u (%.*s)", host, port, (int)m.body.hello.version.len,
		 m.body.hello.version.ptr ? m.body.hello.version.ptr : "");
	atomic_store(&c->peer_minor, m.hdr.minor);
	mc_store_msg_release(&m);
	if (remount && (rc = remount_on(c, fd, host, port)) != MC_OK)
		goto err_close;

	pthread_mutex_lock(&c->lock);
	if (c->stop) { /* mc_master_conn_free began meanwhile */
		pthread_mutex_unlock(&c->lock);
		rc = mc_set_error(MC_ERR_RPC_FAIL, "master connection closed");
		goto err_close;
	}
	c->fd = fd;
	c->state = CONN_UP;
	atomic_fetch_add(&c->connects, 1);
	c->fail_status = MC_ERR_RPC_FAIL;
	pthread_cond_broadcast(&c->state_cond);
	pthread_mutex_unlock(&c->lock);
	return MC_OK;
err_close:
	close(fd);
	return rc;
}

/*
 * Connect to the master (send_lock held, state DOWN).  With an HA address,
 * to the leader the view names: read it, connect, and while that fails
 * (the old leader is gone and its lease has not lapsed, or the new one is
 * still warming up and refuses) read it again every 200 ms, for
 * MC_MASTER_FAILOVER_TIMEOUT_MS at most.
 */
static mc_status do_connect(struct mc_master_conn *c)
{
	uint64_t deadline;
	char why[400] = "";

	if (!c->coord)
		return connect_to(c, c->host, c->port, false);
	deadline = deadline_after(c->failover_ms);
	for (;;) {
		struct mc_coord_view v;
		char host[256];
		uint16_t port;
		mc_status rc = mc_coord_read(c->coord, c->view_key, &v);

		if (rc == MC_OK && !v.present)
			rc = mc_set_error(MC_ERR_RPC_FAIL, "no leader holds %s", c->view_key);
		else if (rc == MC_OK && (!mc_sock_split_hostport(v.addr, host, sizeof(host), &port,
								 DEFAULT_MASTER_PORT) ||
					 !host[0]))
			rc = mc_set_error(MC_ERR_RPC_FAIL, "%s names a bad leader address %s",
					  c->view_key, v.addr);
		else if (rc == MC_OK)
			/* a leader other than the last one: a failover */
			rc = connect_to(c, host, port,
					c->segments_fn && c->view_version &&
						v.version != c->view_version);
		if (rc == MC_OK) {
			if (c->view_version && v.version != c->view_version) {
				atomic_store(&c->new_leader_ms, mc_now_ms());
				atomic_fetch_add(&c->leader_changes, 1);
			}
			if (v.version != c->view_version)
				mc_info("following the master leader %s (view %" PRIu64 ")", v.addr,
					v.version);
			c->view_version = v.version;
			return MC_OK;
		}
		if (rc == MC_ERR_INVALID_VERSION)
			return rc;
		snprintf(why, sizeof(why), "%s", mc_last_error());
		if (expired(deadline))
			return mc_set_error(MC_ERR_RPC_FAIL,
					    "no master leader reachable through %s: %s", c->host,
					    why);
		{
			struct timespec ts = {0, 200 * 1000000L};
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
	}
}

/* ---- the read role -------------------------------------------------------------- */

/* Give the answer frame to the pending call with its id; lock held.
 * Returns whether a call took it. */
static bool deliver_locked(struct mc_master_conn *c, const uint8_t *frame, size_t len, uint64_t id)
{
	struct mc_list *pos;
	mc_list_for_each(pos, &c->pending) {
		struct call *k = mc_list_entry(pos, struct call, node);
		if (k->id != id)
			continue;
		mc_list_del(&k->node);
		k->frame = len <= sizeof(k->inline_buf) ? k->inline_buf : mc_malloc(len);
		if (k->frame) {
			memcpy(k->frame, frame, len);
			k->len = len;
			k->status = MC_OK;
		} else {
			k->status = MC_ERR_NOMEM;
		}
		k->done = true;
		pthread_cond_signal(&k->cond);
		return true;
	}
	return false;
}

/*
 * Hand out every whole frame in rxbuf; role and lock held.  self is the
 * reading caller (NULL for the receiver), for the statistics only.
 * MC_OK, or what pending calls should get when the stream is bad.
 */
static mc_status dispatch_locked(struct mc_master_conn *c, const struct call *self)
{
	size_t off = 0;
	mc_status rc = MC_OK;

	c->rxneed = 0;
	while (off < c->rxlen) {
		struct mc_proto_hdr h;
		size_t flen = 0;
		rc = mc_proto_frame_peek(c->rxbuf + off, c->rxlen - off, MC_PROTO_MAX_PAYLOAD, &h,
					 &flen);
		if (rc == MC_INPROGRESS) {
			c->rxneed = flen; /* 0 while the header is incomplete */
			rc = MC_OK;
			break;
		}
		if (rc != MC_OK) {
			mc_warn("bad frame from master %s:%u: %s", c->host, c->port,
				mc_strerror(rc));
			rc = rc == MC_ERR_INVALID_VERSION ? rc : MC_ERR_RPC_FAIL;
			break;
		}
		if ((h.flags & MC_PROTO_F_RESPONSE) &&
		    deliver_locked(c, c->rxbuf + off, flen, h.req_id)) {
			if (!self)
				c->stats.by_receiver++;
			else if (self->id == h.req_id)
				c->stats.own++;
			else
				c->stats.for_others++;
		}
		off += flen;
	}
	if (off) {
		memmove(c->rxbuf, c->rxbuf + off, c->rxlen - off);
		c->rxlen -= off;
	}
	return rc;
}

/*
 * Receive what the socket holds into rxbuf without waiting; role held.
 * Returns 1 (bytes came), 0 (nothing there yet) or -1 (end of stream or
 * error, recorded as the last error).
 */
static int rx_fill(struct mc_master_conn *c, int fd)
{
	size_t want = MC_MAX(c->rxlen + RX_MIN_ROOM, c->rxneed);
	ssize_t n;

	if (want > c->rxcap) {
		size_t ncap = MC_MAX(c->rxcap * 2, want);
		uint8_t *p = mc_realloc(c->rxbuf, ncap);
		if (!p) {
			mc_set_error(MC_ERR_NOMEM, "no memory for a %zu-byte answer from master",
				     want);
			return -1;
		}
		c->rxbuf = p;
		c->rxcap = ncap;
	}
	n = recv(fd, c->rxbuf + c->rxlen, c->rxcap - c->rxlen, MSG_DONTWAIT);
	if (n > 0) {
		c->rxlen += (size_t)n;
		return 1;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n == 0)
		mc_set_error(MC_ERR_RPC_FAIL, "master %s:%u closed the connection", c->host,
			     c->port);
	else
		mc_set_error(MC_ERR_RPC_FAIL, "read from master %s:%u: %s", c->host, c->port,
			     strerror(errno));
	return -1;
}

/*
 * Caller k holds nothing and finds the role free on an UP connection: take
 * it and read until k's answer is in, the connection fails, or k's
 * deadline passes; then give the role up.  Lock held on entry and return.
 */
static void lead_locked(struct mc_master_conn *c, struct call *k, uint64_t deadline)
{
	uint64_t spin_until = c->busy_poll_us ? mc_now_us() + c->busy_poll_us : 0;
	int fd = c->fd;

	c->reader = READER_CALLER;
	pthread_mutex_unlock(&c->lock);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int got = rx_fill(c, fd), timeout = -1;

		if (got > 0) {
			mc_status why;
			pthread_mutex_lock(&c->lock);
			why = dispatch_locked(c, k);
			if (why != MC_OK)
				mark_broken_locked(c, why);
			if (k->done || c->state != CONN_UP)
				break;
			pthread_mutex_unlock(&c->lock);
			continue;
		}
		if (got < 0) {
			pthread_mutex_lock(&c->lock);
			mark_broken_locked(c, MC_ERR_RPC_FAIL);
			break;
		}
		if (k->work) { /* the caller's work instead of polling idle */
			if (!k->work(k->work_arg))
				k->work = NULL;
			continue;
		}
		if (spin_until) {
			if (mc_now_us() < spin_until) {
				sched_yield(); /* keep the CPU awake, not away from others */
				continue;
			}
			spin_until = 0;
		}
		if (deadline) {
			uint64_t now = mc_now_ms();
			if (now >= deadline) {
				pthread_mutex_lock(&c->lock);
				break;
			}
			timeout = (int)MC_MIN(deadline - now, (uint64_t)INT32_MAX);
		}
		/* a shutdown of the socket (reset, free) wakes this too */
		if (poll(&p, 1, timeout) < 0 && errno != EINTR) {
			mc_set_error(MC_ERR_RPC_FAIL, "poll on the master connection: %s",
				     strerror(errno));
			pthread_mutex_lock(&c->lock);
			mark_broken_locked(c, MC_ERR_RPC_FAIL);
			break;
		}
	}
	release_role_locked(c);
}

/* ---- receiver ------------------------------------------------------------------- */

/* The peer hung up (or the socket erred) and nobody reads: hand out the
 * answers that arrived before, then fail the connection.  Lock held. */
static void drain_locked(struct mc_master_conn *c)
{
	int fd = c->fd;
	mc_status why = MC_ERR_RPC_FAIL;
	int got;

	c->reader = READER_RX;
	pthread_mutex_unlock(&c->lock);
	while ((got = rx_fill(c, fd)) > 0) {
		pthread_mutex_lock(&c->lock);
		why = dispatch_locked(c, NULL);
		pthread_mutex_unlock(&c->lock);
		if (why != MC_OK)
			break;
		why = MC_ERR_RPC_FAIL;
	}
	pthread_mutex_lock(&c->lock);
	mark_broken_locked(c, why);
	release_role_locked(c);
}

static void *rx_main(void *arg)
{
	struct mc_master_conn *c = arg;
	bool hup = false;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct pollfd p;
		int n;

		if (c->state == CONN_DOWN) {
			hup = false;
			if (c->stop)
				break;
			pthread_cond_wait(&c->state_cond, &c->lock);
			continue;
		}
		if (c->reader != READER_NONE && (hup || c->state == CONN_BROKEN)) {
			c->rx_waits = true;
			pthread_cond_wait(&c->state_cond, &c->lock);
			c->rx_waits = false;
			continue;
		}
		if (c->state == CONN_BROKEN) {
			close_broken_locked(c);
			continue;
		}
		if (hup) {
			drain_locked(c);
			continue;
		}
		/* UP: sleep until the peer hangs up or the socket errs (POLLHUP and
		 * POLLERR are always reported); arriving data does not wake this */
		p = (struct pollfd){.fd = c->fd, .events = POLLRDHUP};
		pthread_mutex_unlock(&c->lock);
		n = poll(&p, 1, -1);
		pthread_mutex_lock(&c->lock);
		hup = n > 0;
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- calls ---------------------------------------------------------------------- */

/* Put k on the pending list and write its frame, connecting first if needed. */
static mc_status send_call(struct mc_master_conn *c, struct call *k, const struct mc_buf *b,
			   uint64_t deadline)
{
	for (;;) {
		mc_status rc;
		int fd;

		pthread_mutex_lock(&c->send_lock);
		pthread_mutex_lock(&c->lock);
		if (c->stop) {
			pthread_mutex_unlock(&c->lock);
			pthread_mutex_unlock(&c->send_lock);
			return mc_set_error(MC_ERR_RPC_FAIL, "master connection closed");
		}
		if (c->state == CONN_DOWN) {
			pthread_mutex_unlock(&c->lock);
			rc = do_connect(c);
			pthread_mutex_unlock(&c->send_lock);
			if (rc != MC_OK)
				return rc;
			continue;
		}
		if (c->state == CONN_BROKEN) {
			/* the receiver is about to close it: wait for DOWN */
			bool ok = true;
			pthread_mutex_unlock(&c->send_lock);
			while (c->state == CONN_BROKEN && !c->stop && ok)
				ok = cond_wait_until(&c->state_cond, &c->lock, deadline);
			pthread_mutex_unlock(&c->lock);
			if (!ok)
				return mc_set_error(MC_ERR_RPC_TIMEOUT,
						    "master connection did not recover in time");
			continue;
		}
		fd = c->fd;
		mc_list_add_tail(&c->pending, &k->node);
		pthread_mutex_unlock(&c->lock);

		rc = mc_sock_write_full(fd, b->data, b->len, deadline);
		if (rc != MC_OK) {
			/* a partly written frame leaves the stream unusable */
			pthread_mutex_lock(&c->lock);
			if (!k->done)
				mc_list_del(&k->node);
			k->done = true;
			mark_broken_locked(c, MC_ERR_RPC_FAIL);
			pthread_mutex_unlock(&c->lock);
			pthread_mutex_unlock(&c->send_lock);
			return mc_set_error(
				rc == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT : MC_ERR_RPC_FAIL,
				"sending to master %s:%u: %s", c->host, c->port, mc_strerror(rc));
		}
		pthread_mutex_unlock(&c->send_lock);
		return MC_OK;
	}
}

/* Wait until k is done: read the socket whenever nobody else does, sleep
 * otherwise.  Lock held. */
static void wait_answer_locked(struct mc_master_conn *c, struct call *k, uint64_t deadline)
{
	while (!k->done) {
		if (c->reader == READER_NONE && c->state == CONN_UP && !expired(deadline)) {
			lead_locked(c, k, deadline);
			continue;
		}
		if (expired(deadline)) {
			mc_list_del(&k->node);
			k->done = true;
			k->status = MC_ERR_RPC_TIMEOUT;
			/* k may have been told to take the role: pass it on */
			if (c->reader == READER_NONE)
				release_role_locked(c);
			break;
		}
		if (k->work) { /* another reads: work, then look again */
			pthread_mutex_unlock(&c->lock);
			if (!k->work(k->work_arg))
				k->work = NULL;
			pthread_mutex_lock(&c->lock);
			continue;
		}
		cond_wait_until(&k->cond, &c->lock, deadline);
	}
}

/* Take an encode buffer from the cache or make one; lock held. */
static struct mc_buf *buf_get_locked(struct mc_master_conn *c)
{
	struct mc_buf *b;
	if (c->nbufs)
		return c->bufs[--c->nbufs];
	b = mc_malloc(sizeof(*b));
	if (b)
		mc_buf_init(b);
	return b;
}

/* Return b to the cache, or free it; lock held. */
static void buf_put_locked(struct mc_master_conn *c, struct mc_buf *b)
{
	if (b->cap <= BUF_KEEP_MAX && c->nbufs < BUF_CACHE) {
		mc_buf_reset(b);
		c->bufs[c->nbufs++] = b;
		return;
	}
	mc_buf_release(b);
	mc_free(b);
}

/* A call begins: count it as a user of c, which mc_master_conn_free waits
 * for.  Returns with c->lock held, or RPC_FAIL (unlocked) once c is
 * closing. */
static mc_status enter_lock(struct mc_master_conn *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->stop) {
		pthread_mutex_unlock(&c->lock);
		return mc_set_error(MC_ERR_RPC_FAIL, "master connection closed");
	}
	c->users++;
	return MC_OK;
}

/* A call is over: let a waiting mc_master_conn_free go on.  Unlocks;
 * c must not be touched afterwards. */
static void leave_unlock(struct mc_master_conn *c)
{
	if (--c->users == 0 && c->stop)
		pthread_cond_broadcast(&c->state_cond);
	pthread_mutex_unlock(&c->lock);
}

/* One try; *sent (may be NULL) says whether the request was written, so
 * that a failure after it is a lost answer, not a master never reached. */
static mc_status call_sent(struct mc_master_conn *c, uint16_t type, const void *body,
			   struct mc_store_msg *resp_out, bool *sent, mc_master_conn_work_fn fn,
			   void *arg);

static mc_status call_once(struct mc_master_conn *c, uint16_t type, const void *body,
			   struct mc_store_msg *resp_out)
{
	return call_sent(c, type, body, resp_out, NULL, NULL, NULL);
}

static mc_status call_sent(struct mc_master_conn *c, uint16_t type, const void *body,
			   struct mc_store_msg *resp_out, bool *sent, mc_master_conn_work_fn fn,
			   void *arg)
{
	uint64_t deadline = deadline_after(c->timeout_ms);
	/* read now: once this call has left, mc_master_conn_free may free c */
	struct mc_client_metrics *metrics = c->metrics;
	uint64_t t0 = mc_client_metrics_start(metrics);
	struct mc_buf *b;
	struct call k;
	mc_status rc;

	rc = enter_lock(c);
	if (rc != MC_OK)
		return rc;
	b = buf_get_locked(c);
	if (!b) {
		leave_unlock(c);
		return MC_ERR_NOMEM;
	}
	pthread_mutex_unlock(&c->lock);
	memset(&k, 0, offsetof(struct call, inline_buf));
	k.id = atomic_fetch_add_explicit(&c->next_id, 1, memory_order_relaxed);
	k.work = fn;
	k.work_arg = arg;
	rc = mc_store_request_encode(b, type, k.id, body);
	if (rc == MC_OK) {
		cond_init_mono(&k.cond);
		rc = send_call(c, &k, b, deadline);
		pthread_mutex_lock(&c->lock);
		buf_put_locked(c, b);
		if (rc == MC_OK && sent)
			*sent = true;
		if (rc == MC_OK) {
			wait_answer_locked(c, &k, deadline);
			rc = k.status;
			if (rc != MC_OK)
				rc = mc_set_error(rc, "%s to master %s:%u: %s",
						  mc_store_msg_name(type), c->host, c->port,
						  rc == MC_ERR_RPC_TIMEOUT ? "no answer in time"
									   : "connection lost");
		}
		pthread_cond_destroy(&k.cond);
	} else {
		pthread_mutex_lock(&c->lock);
		buf_put_locked(c, b);
	}
	if (rc != MC_OK) {
		leave_unlock(c);
		goto out;
	}
	pthread_mutex_unlock(&c->lock);

	/* decoded outside the lock, but still as a user: a bad answer resets c */
	rc = mc_store_msg_decode(k.frame, k.len, MC_PROTO_MAX_PAYLOAD, resp_out);
	if (rc != MC_OK) {
		mc_warn("undecodable %s answer from master %s:%u: %s", mc_store_msg_name(type),
			c->host, c->port, mc_last_error());
		mc_master_conn_reset(c);
		rc = MC_ERR_PROTOCOL;
	} else if (resp_out->hdr.type != type) {
		mc_store_msg_release(resp_out);
		mc_master_conn_reset(c);
		rc = mc_set_error(MC_ERR_PROTOCOL, "master answered %s with type %u",
				  mc_store_msg_name(type), resp_out->hdr.type);
	} else if (resp_out->hdr.status != MC_OK) {
		rc = (mc_status)resp_out->hdr.status;
		mc_set_error(rc, "%s: %.*s", mc_store_msg_name(type), (int)resp_out->error.len,
			     resp_out->error.ptr ? resp_out->error.ptr : "");
		mc_store_msg_release(resp_out);
	}
	pthread_mutex_lock(&c->lock);
	leave_unlock(c);
out:
	if (k.frame && k.frame != k.inline_buf)
		mc_free(k.frame);
	mc_client_metrics_rpc(metrics, type, t0, rc);
	return rc;
}

/*
 * Calls whose answer was lost (the connection broke, or with an HA address
 * the master stopped answering) that are repeated once.  Reads and pings
 * change nothing.  A PutEnd, BatchPutEnd or their upsert forms on an object
 * already complete is answered OK, so a repeated End that the master had
 * applied succeeds, and one it had not (the old leader died before its log
 * record reached the standby, which then never heard of the write) fails
 * with the new master's answer (OBJECT_NOT_FOUND): the put is reported
 * failed only when it is not durable.  An UpsertStart (or its batch form)
 * pre-empts the in-flight write of its key at once, the lost attempt's
 * blocks parked until put_start_release_timeout, and starts one write of
 * ours, so repeating it leaves one object, the repeat's, and nothing
 * behind.  PutStart is repeated after a revoke, see restart_put.
 */
static bool retry_safe(uint16_t type)
{
	switch (type) {
	case MC_STORE_SERVICE_READY:
	case MC_STORE_PING:
	case MC_STORE_GET_FSDIR:
	case MC_STORE_EXIST_KEY:
	case MC_STORE_BATCH_EXIST_KEY:
	case MC_STORE_GET_REPLICA_LIST:
	case MC_STORE_BATCH_GET_REPLICA_LIST:
	case MC_STORE_GET_REPLICA_LIST_BY_REGEX:
	case MC_STORE_PUT_END:
	case MC_STORE_BATCH_PUT_END:
	case MC_STORE_UPSERT_START:
	case MC_STORE_UPSERT_END:
	case MC_STORE_BATCH_UPSERT_START:
	case MC_STORE_BATCH_UPSERT_END:
	/* a repeated item names a credit its first attempt used up: refused
	 * (INVALID_WRITE), and the put goes the two-call way (client_credit.c) */
	case MC_STORE_PUT_CREDIT:
		return true;
	default:
		return false;
	}
}

static bool answer_lost(mc_status rc)
{
	return rc == MC_ERR_RPC_FAIL || rc == MC_ERR_RPC_TIMEOUT;
}

/* Whether the revoke's answer for a key leaves an OBJECT_ALREADY_EXISTS of
 * the repeated PutStart unexplained: the key was absent or our own write
 * (now revoked), so what exists may be the lost attempt itself, processed
 * late.  A complete object (INVALID_WRITE) or another client's write
 * (ILLEGAL_CLIENT) explain it: insert-if-absent, as for any put. */
static bool exists_unexplained(int32_t revoke_status)
{
	return revoke_status == MC_OK || revoke_status == MC_ERR_OBJECT_NOT_FOUND;
}

/*
 * A PutStart or BatchPutStart whose answer was lost may have allocated the
 * object, in flight and ours, with no one to write or end it: repeating
 * the start alone would answer OBJECT_ALREADY_EXISTS, which the put turns
 * into success (insert-if-absent) with no data written.  So the unknown
 * attempt is revoked first (the master revokes only a write of this
 * client), then the start is sent again.  An OBJECT_ALREADY_EXISTS of the
 * repeated start that the revoke does not explain is reported as the lost
 * answer's error (lost), never as success.  Returns the repeated start's
 * status, or lost when the revoke could not be sent.
 */
static mc_status restart_put(struct mc_master_conn *c, uint16_t type, const void *body,
			     struct mc_store_msg *resp_out, mc_status lost)
{
	struct mc_store_msg rv;
	char why[400];
	mc_status rc;

	snprintf(why, sizeof(why), "%s", mc_last_error());
	if (type == MC_STORE_PUT_START) {
		const struct mc_store_put_start_req *q = body;
		struct mc_store_put_revoke_req r = {
			.client_id = q->client_id,
			.tenant = q->tenant,
			.replica_type = MC_STORE_REPLICA_ALL,
			.key = q->key,
		};
		int32_t revoked;

		rc = call_once(c, MC_STORE_PUT_REVOKE, &r, &rv);
		if (answer_lost(rc) || rc == MC_ERR_NOMEM)
			return mc_set_error(lost, "%s", why);
		if (rc == MC_OK)
			mc_store_msg_release(&rv);
		revoked = rc;
		rc = call_once(c, type, body, resp_out);
		if (rc == MC_ERR_OBJECT_ALREADY_EXISTS && exists_unexplained(revoked))
			return mc_set_error(
				lost, "%s; repeated, the key exists (the lost attempt?)", why);
		return rc;
	} else {
		const struct mc_store_batch_put_start_req *q = body;
		struct mc_proto_str *keys = mc_calloc(q->n_items ? q->n_items : 1, sizeof(*keys));
		struct mc_store_batch_put_revoke_req r = {
			.client_id = q->client_id,
			.tenant = q->tenant,
			.replica_type = MC_STORE_REPLICA_ALL,
			.n_keys = q->n_items,
			.keys = keys,
		};
		int32_t *revoked;

		if (!keys)
			return mc_set_error(lost, "%s", why);
		for (uint32_t i = 0; i < q->n_items; i++)
			keys[i] = q->items[i].key;
		rc = call_once(c, MC_STORE_BATCH_PUT_REVOKE, &r, &rv);
		mc_free(keys);
		if (rc != MC_OK || rv.body.batch_status_resp.n_items != q->n_items) {
			if (rc == MC_OK)
				mc_store_msg_release(&rv);
			return mc_set_error(lost, "%s", why);
		}
		revoked = rv.body.batch_status_resp.statuses;
		rc = call_once(c, type, body, resp_out);
		if (rc == MC_OK && resp_out->body.batch_put_start_resp.n_items == q->n_items) {
			struct mc_store_put_start_item *it =
				resp_out->body.batch_put_start_resp.items;
			for (uint32_t i = 0; i < q->n_items; i++)
				if (it[i].status == MC_ERR_OBJECT_ALREADY_EXISTS &&
				    exists_unexplained(revoked[i]))
					it[i].status = lost;
		}
		mc_store_msg_release(&rv);
		return rc;
	}
}

/*
 * A call is repeated once: with an HA address, on the leader after a
 * failover, any call the master refused as not the leader
 * (UNAVAILABLE_IN_CURRENT_MODE: it did nothing); and, with any address,
 * a retry_safe call or a put's start whose answer was lost with the
 * connection (RPC_FAIL after the request was written; with an HA address
 * any RPC_FAIL and also RPC_TIMEOUT, after which the connection is
 * dropped), on a new connection.  Any other write whose
 * answer was lost is not repeated (it may have been applied): it fails with
 * RPC_FAIL or RPC_TIMEOUT, which the caller may retry.
 */
mc_status mc_master_conn_call(struct mc_master_conn *c, uint16_t type, const void *body,
			      struct mc_store_msg *resp_out)
{
	return mc_master_conn_call_working(c, type, body, resp_out, NULL, NULL);
}

mc_status mc_master_conn_call_working(struct mc_master_conn *c, uint16_t type, const void *body,
				      struct mc_store_msg *resp_out, mc_master_conn_work_fn fn,
				      void *arg)
{
	const bool start = type == MC_STORE_PUT_START || type == MC_STORE_BATCH_PUT_START;
	bool sent = false;
	mc_status rc;

	/* the retry reads c after the first try: count it as a user until
	 * done, so that a concurrent mc_master_conn_free waits for it */
	rc = enter_lock(c);
	if (rc != MC_OK)
		return rc;
	pthread_mutex_unlock(&c->lock);
	rc = call_sent(c, type, body, resp_out, &sent, fn, arg);
	/* without HA, a master that could not be reached is not tried again */
	if (rc != MC_OK && ((c->coord && rc == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE) ||
			    (((rc == MC_ERR_RPC_FAIL && (c->coord || sent)) ||
			      (c->coord && rc == MC_ERR_RPC_TIMEOUT)) &&
			     (retry_safe(type) || start)))) {
		if (c->coord)
			mc_info("%s failed (%s); asking %s for the leader and trying once more",
				mc_store_msg_name(type), mc_last_error(), c->host);
		else
			mc_info("%s failed (%s); trying once more on a new connection",
				mc_store_msg_name(type), mc_last_error());
		if (rc != MC_ERR_RPC_FAIL)
			mc_master_conn_reset(c); /* a standby, or a master that stopped answering */
		if (start && rc != MC_ERR_UNAVAILABLE_IN_CURRENT_MODE)
			rc = restart_put(c, type, body, resp_out, rc);
		else
			rc = call_once(c, type, body, resp_out);
	}
	pthread_mutex_lock(&c->lock);
	leave_unlock(c);
	return rc;
}

void mc_master_conn_on_new_leader(struct mc_master_conn *c, const struct mc_store_uuid *client_id,
				  mc_master_conn_segments_fn fn, void *arg)
{
	pthread_mutex_lock(&c->send_lock);
	c->client_id = *client_id;
	c->segments_fn = fn;
	c->segments_arg = arg;
	pthread_mutex_unlock(&c->send_lock);
}

bool mc_master_conn_new_leader_within(struct mc_master_conn *c, uint64_t ms)
{
	uint64_t t = atomic_load(&c->new_leader_ms);

	return t && mc_now_ms() - t < ms;
}

uint64_t mc_master_conn_leader_changes(struct mc_master_conn *c)
{
	return atomic_load(&c->leader_changes);
}

void mc_master_conn_set_metrics(struct mc_master_conn *c, struct mc_client_metrics *m)
{
	c->metrics = m;
}

unsigned mc_master_conn_peer_minor(struct mc_master_conn *c)
{
	return atomic_load(&c->peer_minor);
}

uint64_t mc_master_conn_epoch(struct mc_master_conn *c)
{
	uint64_t e;

	pthread_mutex_lock(&c->lock);
	e = c->state == CONN_UP ? atomic_load(&c->connects) : 0;
	pthread_mutex_unlock(&c->lock);
	return e;
}

void mc_master_conn_stats(struct mc_master_conn *c, struct mc_master_conn_stats *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->stats;
	pthread_mutex_unlock(&c->lock);
}

/* ---- lifecycle -------------------------------------------------------------------- */

mc_status mc_master_conn_new(const char *addr, struct mc_master_conn **out)
{
	struct mc_master_conn *c;
	char why[400];
	mc_status rc;

	if (!addr || !*addr)
		addr = "127.0.0.1:50051";
	c = mc_calloc(1, sizeof(*c));
	if (!c)
		return MC_ERR_NOMEM;
	rc = mc_auth_secret_load(NULL, &c->auth);
	if (rc != MC_OK) {
		mc_free(c);
		return rc;
	}
	{
		struct mc_store_client_env env;
		mc_store_client_env_load(&env);
		c->timeout_ms = env.rpc_timeout_ms;
		c->connect_timeout_ms = env.rpc_connect_ms;
		c->busy_poll_us = (uint64_t)env.rpc_busy_poll_us;
		c->failover_ms = env.failover_ms;
		mc_coord_view_key(env.cluster_id, c->view_key, sizeof(c->view_key));
		mc_store_client_env_release(&env);
	}
	if (strncasecmp(addr, "etcd://", 7) == 0 || strncasecmp(addr, "redis://", 8) == 0) {
		/* upstream's HA form: the coordinator, which names the leader */
		rc = mc_coord_open(addr, 2000, &c->coord);
		if (rc != MC_OK) {
			mc_auth_secret_release(&c->auth);
			mc_free(c);
			return mc_set_error(rc == MC_ERR_INVALID_PARAMS ? rc : MC_ERR_RPC_FAIL,
					    "master address %s: %s", addr, mc_last_error());
		}
		snprintf(c->host, sizeof(c->host), "%s", addr);
	} else if (!mc_sock_split_hostport(addr, c->host, sizeof(c->host), &c->port,
					   DEFAULT_MASTER_PORT) ||
		   !c->host[0]) {
		mc_auth_secret_release(&c->auth);
		mc_free(c);
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bad master address %s", addr);
	}
	c->fd = -1;
	c->state = CONN_DOWN;
	c->reader = READER_NONE;
	c->fail_status = MC_ERR_RPC_FAIL;
	atomic_init(&c->next_id, 1);
	mc_list_init(&c->pending);
	pthread_mutex_init(&c->send_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	cond_init_mono(&c->state_cond);
	c->rxcap = 64 << 10;
	c->rxbuf = mc_malloc(c->rxcap);
	if (!c->rxbuf) {
		rc = MC_ERR_NOMEM;
		goto err;
	}
	pthread_mutex_lock(&c->send_lock);
	rc = do_connect(c);
	pthread_mutex_unlock(&c->send_lock);
	if (rc != MC_OK)
		goto err;
	if (pthread_create(&c->rx, NULL, rx_main, c) != 0) {
		rc = mc_set_error(MC_ERR_INTERNAL, "cannot start the master receiver thread");
		goto err;
	}
	c->rx_started = true;
	pthread_setname_np(c->rx, "mc-master-rx");
	*out = c;
	return MC_OK;
err:
	snprintf(why, sizeof(why), "%s", mc_last_error());
	mc_master_conn_free(c);
	mc_restore_error(why);
	return rc;
}

void mc_master_conn_free(struct mc_master_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	mark_broken_locked(c, MC_ERR_RPC_FAIL);
	pthread_cond_broadcast(&c->state_cond);
	/* calls in flight have failed or are about to (their socket is shut
	 * down); wait until the last one has left */
	while (c->users)
		pthread_cond_wait(&c->state_cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	if (c->rx_started)
		pthread_join(c->rx, NULL);
	if (c->fd >= 0)
		close(c->fd);
	for (unsigned i = 0; i < c->nbufs; i++) {
		mc_buf_release(c->bufs[i]);
		mc_free(c->bufs[i]);
	}
	pthread_mutex_destroy(&c->send_lock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->state_cond);
	mc_free(c->rxbuf);
	mc_coord_close(c->coord);
	mc_auth_secret_release(&c->auth);
	mc_free(c);
}

/*
 * store/master_conn.c - the store client's pipelined RPC connection to the
 * master.
 *
 * Design.  One TCP socket per client, many callers.  A caller encodes its
 * request with a fresh id, puts a struct call (on its own stack) on the
 * pending list, writes the frame and sleeps on the call's condition
 * variable.  The receiver thread reads the socket, cuts the stream into
 * frames with mc_proto_frame_peek, looks the id up in the pending list,
 * copies the frame into the call (into its inline buffer when it fits, as
 * almost every answer does) and wakes the caller, who decodes it.  Decoding
 * on the caller's thread keeps the receiver short, and answers may arrive
 * in any order.
 *
 * States: DOWN (no socket) -> UP (connected, ServiceReady answered) ->
 * BROKEN (a write or read failed, or reset was asked: the socket is shut
 * down but still open) -> DOWN (the receiver closed it and failed every
 * pending call).  Only a caller connects, and only from DOWN, so a failure
 * is followed by a reconnect on next use and not by a busy loop.
 *
 * Locks: send_lock is held while connecting and while writing one frame,
 * so frames never interleave and the socket cannot be closed under a
 * writer; lock protects state, fd and the pending list.  Order: send_lock
 * before lock.  The receiver takes send_lock only to close the socket.
 */
#define MC_LOG_MODULE "store"
#include "store/master_conn.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/version.h"

void mc_restore_error(const char *text); /* base/log.c */

#define DEFAULT_MASTER_PORT 50051
#define CALL_INLINE	    512 /* answers up to this size need no allocation */
#define BUF_CACHE	    8	/* encode buffers kept for reuse */
#define BUF_KEEP_MAX	    (1u << 20)

enum conn_state {
	CONN_DOWN,
	CONN_UP,
	CONN_BROKEN,
};

struct call {
	struct mc_list node; /* on conn->pending while waiting */
	uint64_t id;
	pthread_cond_t cond;
	bool done;
	mc_status status; /* transport outcome once done */
	uint8_t *frame;	  /* the answer: inline_buf or allocated */
	size_t len;
	uint8_t inline_buf[CALL_INLINE];
};

struct mc_master_conn {
	char host[256];
	uint16_t port;
	int64_t timeout_ms;	    /* per call; < 0 = none */
	int64_t connect_timeout_ms; /* connect + ServiceReady */

	pthread_mutex_t send_lock; /* connecting, writing one frame */
	pthread_mutex_t lock;	   /* everything below */
	pthread_cond_t state_cond; /* state changes */
	int state;		   /* enum conn_state */
	int fd;
	bool stop;
	struct mc_list pending; /* struct call, waiting for answers */
	mc_status fail_status;	/* what the pending calls get when the link drops */
	struct mc_buf *bufs[BUF_CACHE];
	unsigned nbufs;

	atomic_uint_fast64_t next_id;
	pthread_t rx;
	bool rx_started;
	/* receiver only */
	uint8_t *rxbuf;
	size_t rxcap;
};

static int64_t env_ms(const char *name, int64_t def)
{
	const char *v = getenv(name);
	char *end;
	long long x;
	if (!v || !*v)
		return def;
	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno || *end) {
		mc_warn("ignoring %s=%s: not an integer", name, v);
		return def;
	}
	return x;
}

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

/* ---- encode buffers ----------------------------------------------------- */

static struct mc_buf *buf_get(struct mc_master_conn *c)
{
	struct mc_buf *b = NULL;
	pthread_mutex_lock(&c->lock);
	if (c->nbufs)
		b = c->bufs[--c->nbufs];
	pthread_mutex_unlock(&c->lock);
	if (!b) {
		b = mc_malloc(sizeof(*b));
		if (b)
			mc_buf_init(b);
	}
	return b;
}

static void buf_put(struct mc_master_conn *c, struct mc_buf *b)
{
	if (b->cap > BUF_KEEP_MAX)
		mc_buf_release(b);
	else
		mc_buf_reset(b);
	pthread_mutex_lock(&c->lock);
	if (c->nbufs < BUF_CACHE) {
		c->bufs[c->nbufs++] = b;
		b = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (b) {
		mc_buf_release(b);
		mc_free(b);
	}
}

/* ---- connection state ----------------------------------------------------- */

/* Shut the socket down so the receiver sees the end; lock held. */
static void mark_broken_locked(struct mc_master_conn *c, mc_status why)
{
	if (c->state != CONN_UP)
		return;
	c->state = CONN_BROKEN;
	c->fail_status = why;
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

/* Connect and say ServiceReady; send_lock held, state DOWN. */
static mc_status do_connect(struct mc_master_conn *c)
{
	uint64_t deadline = deadline_after(c->connect_timeout_ms);
	struct mc_store_hello hello = {mc_proto_str_c("mooncake-c " MC_VERSION_STRING)};
	struct mc_store_msg m;
	struct mc_proto_hdr h;
	struct mc_buf b;
	uint8_t *frame = NULL;
	size_t len = 0;
	mc_status rc;
	int fd;

	fd = mc_sock_connect(
		c->host, c->port,
		c->connect_timeout_ms > 0 ? (int)MC_MIN(c->connect_timeout_ms, INT32_MAX) : 0,
		false);
	if (fd < 0)
		return mc_set_error(MC_ERR_RPC_FAIL, "cannot connect to master %s:%u: %s", c->host,
				    c->port, mc_last_error());
	mc_buf_init(&b);
	rc = mc_store_service_ready_request_encode(&b, atomic_fetch_add(&c->next_id, 1), &hello);
	if (rc == MC_OK)
		rc = mc_sock_write_full(fd, b.data, b.len, deadline);
	mc_buf_release(&b);
	if (rc == MC_OK)
		rc = read_frame(fd, deadline, &frame, &len, &h);
	if (rc == MC_ERR_INVALID_VERSION) {
		rc = mc_set_error(MC_ERR_INVALID_VERSION,
				  "master %s:%u speaks protocol %u.%u, this client %u.%u", c->host,
				  c->port, h.major, h.minor, MC_STORE_PROTO_MAJOR,
				  MC_STORE_PROTO_MINOR);
		goto err_close;
	}
	if (rc != MC_OK) {
		rc = mc_set_error(rc == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT : MC_ERR_RPC_FAIL,
				  "service ready with master %s:%u failed: %s", c->host, c->port,
				  mc_last_error());
		goto err_close;
	}
	rc = mc_store_msg_decode(frame, len, MC_PROTO_MAX_PAYLOAD, &m);
	mc_free(frame);
	if (rc != MC_OK) {
		rc = mc_set_error(rc == MC_ERR_INVALID_VERSION ? rc : MC_ERR_RPC_FAIL,
				  "bad service ready answer from master %s:%u", c->host, c->port);
		goto err_close;
	}
	if (m.hdr.status != MC_OK || m.hdr.type != MC_STORE_SERVICE_READY) {
		rc = m.hdr.status != MC_OK ? (mc_status)m.hdr.status : MC_ERR_PROTOCOL;
		rc = mc_set_error(rc, "master %s:%u refused service ready: %.*s", c->host, c->port,
				  (int)m.error.len, m.error.ptr ? m.error.ptr : "");
		mc_store_msg_release(&m);
		goto err_close;
	}
	mc_debug("connected to master %s:%u (%.*s)", c->host, c->port,
		 (int)m.body.hello.version.len,
		 m.body.hello.version.ptr ? m.body.hello.version.ptr : "");
	mc_store_msg_release(&m);

	pthread_mutex_lock(&c->lock);
	c->fd = fd;
	c->state = CONN_UP;
	c->fail_status = MC_ERR_RPC_FAIL;
	pthread_cond_broadcast(&c->state_cond);
	pthread_mutex_unlock(&c->lock);
	return MC_OK;
err_close:
	close(fd);
	return rc;
}

/* ---- receiver ------------------------------------------------------------------- */

static void deliver(struct mc_master_conn *c, const uint8_t *frame, size_t len, uint64_t id)
{
	struct mc_list *pos;
	pthread_mutex_lock(&c->lock);
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
		break;
	}
	pthread_mutex_unlock(&c->lock);
}

/* Read frames from fd until it fails; returns what pending calls should get. */
static mc_status read_loop(struct mc_master_conn *c, int fd)
{
	size_t have = 0;
	for (;;) {
		struct mc_proto_hdr h;
		size_t flen = 0, off = 0;
		ssize_t n;
		mc_status rc;

		if (c->rxcap - have < 4096) {
			size_t ncap = c->rxcap * 2;
			uint8_t *p = mc_realloc(c->rxbuf, ncap);
			if (!p)
				return MC_ERR_RPC_FAIL;
			c->rxbuf = p;
			c->rxcap = ncap;
		}
		n = read(fd, c->rxbuf + have, c->rxcap - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0)
				mc_set_error(MC_ERR_RPC_FAIL, "read from master: %s",
					     strerror(errno));
			return MC_ERR_RPC_FAIL;
		}
		have += (size_t)n;
		for (;;) {
			rc = mc_proto_frame_peek(c->rxbuf + off, have - off, MC_PROTO_MAX_PAYLOAD,
						 &h, &flen);
			if (rc == MC_INPROGRESS)
				break;
			if (rc != MC_OK) {
				mc_warn("bad frame from master %s:%u: %s", c->host, c->port,
					mc_strerror(rc));
				return rc == MC_ERR_INVALID_VERSION ? rc : MC_ERR_RPC_FAIL;
			}
			if (h.flags & MC_PROTO_F_RESPONSE)
				deliver(c, c->rxbuf + off, flen, h.req_id);
			off += flen;
		}
		if (off) {
			memmove(c->rxbuf, c->rxbuf + off, have - off);
			have -= off;
		}
		/* room for the frame being received, at once */
		if (flen > c->rxcap) {
			uint8_t *p = mc_realloc(c->rxbuf, flen);
			if (!p)
				return MC_ERR_RPC_FAIL;
			c->rxbuf = p;
			c->rxcap = flen;
		}
	}
}

static void *rx_main(void *arg)
{
	struct mc_master_conn *c = arg;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct mc_list *pos, *tmp;
		mc_status why;
		int fd;

		while (!c->stop && c->state != CONN_UP)
			pthread_cond_wait(&c->state_cond, &c->lock);
		if (c->stop)
			break;
		fd = c->fd;
		pthread_mutex_unlock(&c->lock);

		why = read_loop(c, fd);

		pthread_mutex_lock(&c->lock);
		mark_broken_locked(c, why);
		pthread_mutex_unlock(&c->lock);
		/* no writer may be on the socket when it closes */
		pthread_mutex_lock(&c->send_lock);
		pthread_mutex_lock(&c->lock);
		close(c->fd);
		c->fd = -1;
		c->state = CONN_DOWN;
		mc_list_for_each_safe(pos, tmp, &c->pending) {
			struct call *k = mc_list_entry(pos, struct call, node);
			mc_list_del(&k->node);
			k->status = c->fail_status;
			k->done = true;
			pthread_cond_signal(&k->cond);
		}
		pthread_cond_broadcast(&c->state_cond);
		pthread_mutex_unlock(&c->send_lock);
		if (!c->stop)
			mc_info("connection to master %s:%u lost; reconnecting on next call",
				c->host, c->port);
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
			while (c->state == CONN_BROKEN && ok)
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

mc_status mc_master_conn_call(struct mc_master_conn *c, uint16_t type, const void *body,
			      struct mc_store_msg *resp_out)
{
	uint64_t deadline = deadline_after(c->timeout_ms);
	struct mc_buf *b;
	struct call k;
	mc_status rc;

	b = buf_get(c);
	if (!b)
		return MC_ERR_NOMEM;
	memset(&k, 0, offsetof(struct call, inline_buf));
	k.id = atomic_fetch_add(&c->next_id, 1);
	rc = mc_store_request_encode(b, type, k.id, body);
	if (rc != MC_OK) {
		buf_put(c, b);
		return rc;
	}
	cond_init_mono(&k.cond);
	rc = send_call(c, &k, b, deadline);
	buf_put(c, b);
	if (rc != MC_OK)
		goto out;

	pthread_mutex_lock(&c->lock);
	while (!k.done) {
		if (!cond_wait_until(&k.cond, &c->lock, deadline) && !k.done) {
			mc_list_del(&k.node);
			k.done = true;
			k.status = MC_ERR_RPC_TIMEOUT;
		}
	}
	pthread_mutex_unlock(&c->lock);
	rc = k.status;
	if (rc != MC_OK) {
		rc = mc_set_error(
			rc, "%s to master %s:%u: %s", mc_store_msg_name(type), c->host, c->port,
			rc == MC_ERR_RPC_TIMEOUT ? "no answer in time" : "connection lost");
		goto out;
	}
	rc = mc_store_msg_decode(k.frame, k.len, MC_PROTO_MAX_PAYLOAD, resp_out);
	if (rc != MC_OK) {
		mc_warn("undecodable %s answer from master %s:%u: %s", mc_store_msg_name(type),
			c->host, c->port, mc_last_error());
		mc_master_conn_reset(c);
		rc = MC_ERR_PROTOCOL;
		goto out;
	}
	if (resp_out->hdr.type != type) {
		mc_store_msg_release(resp_out);
		mc_master_conn_reset(c);
		rc = mc_set_error(MC_ERR_PROTOCOL, "master answered %s with type %u",
				  mc_store_msg_name(type), resp_out->hdr.type);
		goto out;
	}
	if (resp_out->hdr.status != MC_OK) {
		rc = (mc_status)resp_out->hdr.status;
		mc_set_error(rc, "%s: %.*s", mc_store_msg_name(type), (int)resp_out->error.len,
			     resp_out->error.ptr ? resp_out->error.ptr : "");
		mc_store_msg_release(resp_out);
	}
out:
	if (k.frame && k.frame != k.inline_buf)
		mc_free(k.frame);
	pthread_cond_destroy(&k.cond);
	return rc;
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
	if (!mc_sock_split_hostport(addr, c->host, sizeof(c->host), &c->port,
				    DEFAULT_MASTER_PORT) ||
	    !c->host[0]) {
		mc_free(c);
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bad master address %s", addr);
	}
	c->timeout_ms = env_ms("MC_RPC_TIMEOUT_MS", 30000);
	c->connect_timeout_ms = env_ms("MC_RPC_CONNECT_TIMEOUT_MS", 30000);
	c->fd = -1;
	c->state = CONN_DOWN;
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
	if (c->fd >= 0)
		shutdown(c->fd, SHUT_RDWR);
	pthread_cond_broadcast(&c->state_cond);
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
	mc_free(c);
}

/*
 * store/offload_client.c - a reader's pool of connections to offload RPC
 * servers (offload_client.h).
 *
 * The pool is a short list of idle connections, each with its endpoint
 * and the time it went idle, under one mutex held only to take or return
 * one (never across I/O).  A call takes an idle connection to its
 * endpoint or connects, then does a blocking exchange with the call's
 * deadline (base/sock.h's read/write with deadlines), and returns the
 * connection to the pool when the answer was whole and matched.  Idle
 * connections older than IDLE_KEEP_MS are closed when the pool is next
 * used, and at most MAX_IDLE are kept: the owner's server closes its
 * side after five minutes idle, so a kept connection is usually alive,
 * and the one retry covers the case where it is not.
 *
 * Never: keep a connection whose exchange failed midway (its stream may
 * hold a late answer), or wait past the deadline.
 */
#define MC_LOG_MODULE "offload"
#include "store/offload_client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"

#define MAX_IDLE     32
#define IDLE_KEEP_MS 60000
#define MAX_ANSWER   MC_PROTO_MAX_PAYLOAD
#define EP_MAX	     300

struct idle {
	char endpoint[EP_MAX];
	int fd;
	uint64_t since_ms;
};

struct mc_offload_pool {
	int64_t timeout_ms;
	pthread_mutex_t lock;
	struct idle idle[MAX_IDLE];
	size_t nidle;
	atomic_uint_fast64_t next_id;
	atomic_uint_fast64_t connects;
	struct mc_auth_secret auth; /* the cluster secret: each connection opens with the
				       handshake (base/auth_hs.h) */
};

mc_status mc_offload_pool_new(int64_t timeout_ms, struct mc_offload_pool **out)
{
	struct mc_offload_pool *p = mc_calloc(1, sizeof(*p));

	if (!p)
		return MC_ERR_NOMEM;
	p->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
	if (mc_auth_secret_load(NULL, &p->auth) != MC_OK) {
		mc_free(p);
		return MC_ERR_INVALID_PARAMS;
	}
	pthread_mutex_init(&p->lock, NULL);
	atomic_init(&p->next_id, 1);
	*out = p;
	return MC_OK;
}

void mc_offload_pool_free(struct mc_offload_pool *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nidle; i++)
		close(p->idle[i].fd);
	pthread_mutex_destroy(&p->lock);
	mc_auth_secret_release(&p->auth);
	mc_free(p);
}

uint64_t mc_offload_pool_connects(struct mc_offload_pool *p)
{
	return atomic_load(&p->connects);
}

/* An idle connection to endpoint, or -1; closes the stale ones. */
static int pool_take(struct mc_offload_pool *p, const char *endpoint)
{
	uint64_t now = mc_now_ms();
	int fd = -1;

	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->nidle;) {
		struct idle *c = &p->idle[i];
		if (now - c->since_ms > IDLE_KEEP_MS) {
			close(c->fd);
			p->idle[i] = p->idle[--p->nidle];
			continue;
		}
		if (fd < 0 && strcmp(c->endpoint, endpoint) == 0) {
			fd = c->fd;
			p->idle[i] = p->idle[--p->nidle];
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&p->lock);
	return fd;
}

static void pool_put(struct mc_offload_pool *p, const char *endpoint, int fd)
{
	pthread_mutex_lock(&p->lock);
	if (p->nidle == MAX_IDLE) {
		/* drop the oldest */
		size_t o = 0;
		for (size_t i = 1; i < p->nidle; i++)
			if (p->idle[i].since_ms < p->idle[o].since_ms)
				o = i;
		close(p->idle[o].fd);
		p->idle[o] = p->idle[--p->nidle];
	}
	snprintf(p->idle[p->nidle].endpoint, EP_MAX, "%s", endpoint);
	p->idle[p->nidle].fd = fd;
	p->idle[p->nidle].since_ms = mc_now_ms();
	p->nidle++;
	pthread_mutex_unlock(&p->lock);
}

/* A kept connection the peer closed shows readable (EOF) while idle. */
static bool idle_alive(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	return poll(&pfd, 1, 0) == 0;
}

static mc_status sock_status(mc_status rc, const char *endpoint, const char *what)
{
	if (rc == MC_ERR_TIMEOUT)
		return mc_set_error(MC_ERR_RPC_TIMEOUT, "offload server %s: %s timed out", endpoint,
				    what);
	return mc_set_error(MC_ERR_RPC_FAIL, "offload server %s: %s failed (%s)", endpoint, what,
			    mc_strerror(rc));
}

/* One exchange on fd; *sent_out tells whether the request went out whole
 * and *any_out whether any byte of an answer came back. */
static mc_status exchange(int fd, const char *endpoint, const struct mc_buf *req, uint64_t id,
			  uint16_t type, uint64_t deadline, struct mc_store_msg *resp_out,
			  bool *any_out)
{
	uint8_t hdr[MC_PROTO_HDR_LEN], *frame;
	struct mc_proto_hdr h;
	size_t flen;
	mc_status rc;

	*any_out = false;
	rc = mc_sock_write_full(fd, req->data, req->len, deadline);
	if (rc != MC_OK)
		return sock_status(rc, endpoint, "sending");
	rc = mc_sock_read_full(fd, hdr, 1, deadline);
	if (rc != MC_OK)
		return sock_status(rc, endpoint, "waiting for the answer");
	*any_out = true;
	rc = mc_sock_read_full(fd, hdr + 1, sizeof(hdr) - 1, deadline);
	if (rc != MC_OK)
		return sock_status(rc, endpoint, "reading the answer");
	rc = mc_proto_frame_peek(hdr, sizeof(hdr), MAX_ANSWER, &h, &flen);
	if (rc != MC_OK && rc != MC_INPROGRESS)
		return mc_set_error(MC_ERR_PROTOCOL, "offload server %s: bad answer header (%s)",
				    endpoint, mc_strerror(rc));
	frame = mc_malloc(flen);
	if (!frame)
		return MC_ERR_NOMEM;
	memcpy(frame, hdr, sizeof(hdr));
	rc = mc_sock_read_full(fd, frame + sizeof(hdr), flen - sizeof(hdr), deadline);
	if (rc != MC_OK) {
		mc_free(frame);
		return sock_status(rc, endpoint, "reading the answer");
	}
	rc = mc_store_msg_decode(frame, flen, MAX_ANSWER, resp_out);
	mc_free(frame);
	if (rc != MC_OK)
		return mc_set_error(MC_ERR_PROTOCOL, "offload server %s: answer does not decode",
				    endpoint);
	if (!(resp_out->hdr.flags & MC_PROTO_F_RESPONSE) || resp_out->hdr.req_id != id ||
	    resp_out->hdr.type != type) {
		mc_store_msg_release(resp_out);
		return mc_set_error(MC_ERR_PROTOCOL, "offload server %s: answer does not match",
				    endpoint);
	}
	return MC_OK;
}

mc_status mc_offload_pool_call(struct mc_offload_pool *p, const char *endpoint, uint16_t type,
			       const void *body, struct mc_store_msg *resp_out)
{
	uint64_t deadline = mc_now_ms() + (uint64_t)p->timeout_ms;
	uint64_t id = atomic_fetch_add(&p->next_id, 1);
	char host[256];
	uint16_t port = 0;
	struct mc_buf req;
	mc_status rc;

	if (!endpoint || strlen(endpoint) >= EP_MAX ||
	    !mc_sock_split_hostport(endpoint, host, sizeof(host), &port, 0) || !port)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bad offload endpoint '%s'",
				    endpoint ? endpoint : "");
	mc_buf_init(&req);
	rc = mc_store_request_encode(&req, type, id, body);
	if (rc != MC_OK) {
		mc_buf_release(&req);
		return rc;
	}
	for (int attempt = 0;; attempt++) {
		int fd = pool_take(p, endpoint);
		bool reused = fd >= 0, any = false;
		if (reused && !idle_alive(fd)) {
			close(fd);
			fd = -1;
			reused = false;
		}
		if (fd < 0) {
			uint64_t now = mc_now_ms();
			int left = now < deadline ? (int)(deadline - now) : 1;
			fd = mc_sock_connect(host, port, left, false);
			if (fd < 0) {
				rc = mc_set_error(fd == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT
								       : MC_ERR_RPC_FAIL,
						  "offload server %s: cannot connect (%s)",
						  endpoint, mc_last_error());
				break;
			}
			if (mc_auth_on(&p->auth)) {
				now = mc_now_ms();
				rc = mc_auth_hs_run(fd, &p->auth, MC_AUTH_CLIENT, "offload",
						    now < deadline ? (int)(deadline - now) : 1);
				if (rc != MC_OK) {
					rc = mc_set_error(rc == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT
									       : MC_ERR_RPC_FAIL,
							  "offload server %s: %s", endpoint,
							  mc_last_error());
					close(fd);
					break;
				}
			}
			atomic_fetch_add(&p->connects, 1);
		}
		rc = exchange(fd, endpoint, &req, id, type, deadline, resp_out, &any);
		if (rc == MC_OK) {
			pool_put(p, endpoint, fd);
			rc = (mc_status)resp_out->hdr.status;
			if (rc != MC_OK) {
				mc_set_error(rc, "offload server %s: %.*s", endpoint,
					     (int)resp_out->error.len,
					     resp_out->error.ptr ? resp_out->error.ptr : "");
				mc_store_msg_release(resp_out);
			}
			break;
		}
		close(fd);
		/* a kept connection that died before answering: once more, fresh */
		if (!(reused && !any && rc == MC_ERR_RPC_FAIL && attempt == 0))
			break;
	}
	mc_buf_release(&req);
	return rc;
}

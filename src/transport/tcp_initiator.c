/*
 * transport/tcp_initiator.c - the TCP transport's client side: peers, their
 * persistent connections (lanes) and paths, submission, sending requests
 * (one sendmsg gathering many, or write payloads spliced by reference,
 * transport/tcp_zc.h) and receiving status frames and read data.  Runs on
 * the workers that own the connections, except peer creation and
 * mc_tcp_submit, which run on the submitting thread and touch only the
 * connections' `incoming` lists under the worker's lock.  See tcp.c for
 * the design as a whole.
 */
#define MC_LOG_MODULE "tcp"
#include "transport/tcp_int.h"

#include "base/xsum.h"

/* slice.flags: a checksummed write's sum is in slice.sum */
#define SLICE_SUMMED 1u

/* ---- client connections ----------------------------------------------------- */

static void conn_set_events(struct tcp_conn *c, bool out)
{
	struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
	if (c->want_out == out)
		return;
	c->want_out = out;
	epoll_ctl(c->w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

void mc_tcp_fail_list(struct mc_list *l, int status)
{
	while (!mc_list_empty(l)) {
		struct mc_slice *s = mc_list_first(l, struct mc_slice, node);
		mc_list_del(&s->node);
		mc_slice_done(s, status);
	}
}

void mc_tcp_conn_close_fd(struct tcp_conn *c)
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
	mc_tcp_conn_close_fd(c);
}

/* ---- paths ------------------------------------------------------------------ */

bool mc_tcp_path_usable(const struct tcp_path *pa, uint64_t now)
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
unsigned mc_tcp_path_pick(const struct tcp_conn *c, unsigned after, bool avoid_after)
{
	const struct tcp_peer *p = c->peer;
	uint64_t now = mc_now_ms();
	if (!(avoid_after && c->home == after) && mc_tcp_path_usable(&p->paths[c->home], now))
		return c->home;
	for (unsigned k = 1; k <= p->npaths; k++) {
		unsigned i = (after + k) % p->npaths;
		if (avoid_after && i == after)
			continue;
		if (mc_tcp_path_usable(&p->paths[i], now))
			return i;
	}
	return (after + 1) % p->npaths;
}

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
void mc_tcp_conn_fail(struct tcp_conn *c, int status, const char *why)
{
	struct tcp_peer *p = c->peer;
	bool busy = !mc_list_empty(&c->recvq) || !mc_list_empty(&c->sendq);

	mc_warn("connection to %s:%u failed: %s", p->paths[c->path].host, p->port, why);
	conn_abort_fd(c);
	path_mark_failed(c->w->tp, &p->paths[c->path]);
	if (p->npaths > 1 && busy && ++c->fail_streak < p->npaths) {
		unsigned from = c->path;
		c->path = mc_tcp_path_pick(c, from, true);
		mc_info("retrying the requests of a connection to %s:%u over %s",
			p->paths[from].host, p->port, p->paths[c->path].host);
		conn_requeue_all(c);
		mc_tcp_conn_connect(c);
		return;
	}
	c->fail_streak = 0;
	/* one path lost while others serve is not a reason to refetch the target */
	if (p->npaths == 1 || busy)
		atomic_store(&p->failed, true);
	mc_tcp_fail_list(&c->recvq, status);
	mc_tcp_fail_list(&c->sendq, status);
}

/* A slice on c (sent or being sent) reads or writes a registration whose
 * deregistration deadline passed (mem/memreg.h). */
bool mc_tcp_conn_uses_cut(struct tcp_conn *c)
{
	struct mc_memreg *reg = c->w->tp->memreg;
	struct mc_list *lists[2] = {&c->sendq, &c->recvq}, *pos;

	for (int i = 0; i < 2; i++)
		mc_list_for_each(pos, lists[i]) {
			struct mc_slice *s = mc_list_entry(pos, struct mc_slice, node);
			if (mc_memreg_cut_overlaps(reg, (uint64_t)(uintptr_t)s->local, s->len))
				return true;
		}
	return false;
}

/* Close c and fail what it carries, without a retry on another path and
 * without blaming the peer or the path: our own memory is going away. */
void mc_tcp_conn_cut(struct tcp_conn *c)
{
	mc_info("cutting a connection to %s:%u: a local buffer it uses is being deregistered",
		c->peer->paths[c->path].host, c->peer->port);
	conn_abort_fd(c);
	c->fail_streak = 0;
	mc_tcp_fail_list(&c->recvq, MC_ERR_TRANSFER_FAIL);
	mc_tcp_fail_list(&c->sendq, MC_ERR_TRANSFER_FAIL);
}

/* After a rejection the server closes; requeue what it never looked at. */
static void conn_reset_requeue(struct tcp_conn *c)
{
	mc_tcp_conn_close_fd(c);
	conn_requeue_all(c);
	if (!mc_list_empty(&c->sendq))
		mc_tcp_conn_connect(c);
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

void mc_tcp_conn_connect(struct tcp_conn *c)
{
	struct tcp_transport *tp = c->w->tp;
	struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = c};
	struct tcp_path *pa = &c->peer->paths[c->path];
	int fd;

	if (!pa->resolved) {
		mc_tcp_conn_fail(c, MC_ERR_DNS, "peer address could not be resolved");
		return;
	}
	fd = socket(pa->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		mc_tcp_conn_fail(c, MC_ERR_SOCKET, strerror(errno));
		return;
	}
	mc_sock_set_nodelay(fd);
	if (tp->sockbuf)
		mc_sock_set_bufsize(fd, tp->sockbuf);
	c->fd = fd;
	c->v2 = c->peer->version >= 2 && !tp->force_v1;
	if (connect(fd, (struct sockaddr *)&pa->addr, pa->addrlen) < 0 && errno != EINPROGRESS) {
		int e = errno;
		mc_tcp_conn_fail(c, MC_ERR_CONN_REFUSED, strerror(e));
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
	/* a checksummed write is copied: its trailer follows its payload */
	return min && c->v2 && !c->zc_off && s->opcode == MC_OP_WRITE && !s->checksum &&
	       s->len >= min;
}

/* The head of sendq is a spliced write whose header is out: take the next
 * part of its payload into the pipe (mc_tcp_conn_send flushes it).  Returns the
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

void mc_tcp_conn_send(struct tcp_conn *c)
{
	uint8_t hdrs[IOV_BATCH][MC_TCP_HDR_LEN];
	struct iovec iov[IOV_BATCH * 3];
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
			mc_tcp_conn_fail(c, MC_ERR_CONN_CLOSED, strerror(errno));
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
							    (c->v2 ? MC_TCP_OP_V2 : 0) |
							    (s->checksum ? MC_TCP_OP_SUM : 0)),
				};
				/* hashed once, as the header is first offered
				 * (submit made sure the peer takes checksums, so
				 * c->v2) */
				if (s->checksum && s->opcode == MC_OP_WRITE &&
				    !(s->flags & SLICE_SUMMED)) {
					mc_tcp_sum_encode(mc_xsum_sent(s->local, (size_t)s->len),
							  s->sum);
					s->flags |= SLICE_SUMMED;
				}
				mc_tcp_hdr_encode(&h, hdrs[nh]);
				iov[niov].iov_base = hdrs[nh] + s->hdr_done;
				iov[niov].iov_len = MC_TCP_HDR_LEN - s->hdr_done;
				total += iov[niov++].iov_len;
			}
			nh++;
			if (conn_zc(c, s))
				break; /* its payload follows by reference */
			if (s->opcode == MC_OP_WRITE && s->done < s->len) {
				iov[niov].iov_base = s->local + s->done;
				iov[niov].iov_len = (size_t)(s->len - s->done);
				total += iov[niov++].iov_len;
			}
			if (s->opcode == MC_OP_WRITE && s->checksum) {
				uint64_t at = s->done > s->len ? s->done - s->len : 0;
				iov[niov].iov_base = s->sum + at;
				iov[niov].iov_len = (size_t)(MC_TCP_SUM_LEN - at);
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
			mc_tcp_conn_fail(c, MC_ERR_CONN_CLOSED, strerror(errno));
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
			/* a checksummed write: done runs over its trailer too */
			uint64_t wire = s->len + (s->checksum ? MC_TCP_SUM_LEN : 0);
			if (s->opcode == MC_OP_WRITE && s->hdr_done == MC_TCP_HDR_LEN) {
				uint64_t k = MC_MIN((uint64_t)n, wire - s->done);
				s->done += k;
				n -= (ssize_t)k;
			}
			if (s->hdr_done == MC_TCP_HDR_LEN &&
			    (s->opcode != MC_OP_WRITE || s->done == wire)) {
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
ssize_t mc_tcp_sock_fill(int fd, uint8_t *rbuf, size_t *rpos, size_t *rlen, size_t max)
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
		mc_tcp_conn_fail(c, MC_ERR_CONN_CLOSED, "peer closed the connection");
		return RECV_STOP;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return RECV_STOP;
	if (errno == EINTR)
		return RECV_RETRY;
	mc_tcp_conn_fail(c, MC_ERR_CONN_CLOSED, strerror(errno));
	return RECV_STOP;
}

/* A checksummed read landed whole in s->local; sum is the target's. */
static mc_status read_sum_check(struct tcp_conn *c, struct mc_slice *s, const uint8_t *sum)
{
	if (mc_xsum(s->local, (size_t)s->len) == mc_tcp_sum_decode(sum))
		return MC_OK;
	mc_error("%s:%u: checksum mismatch on a read of %llu bytes at 0x%llx",
		 c->peer->paths[c->path].host, c->peer->port, (unsigned long long)s->len,
		 (unsigned long long)s->remote_addr);
	return MC_ERR_CHECKSUM_MISMATCH;
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
				mc_tcp_conn_fail(c, MC_ERR_PROTOCOL, "malformed status frame");
				return;
			}
			c->rpos += 8;
			if (code == MC_TCP_STATUS_SUM && s->checksum && !from_sendq &&
			    s->opcode == MC_OP_WRITE) {
				/* the target had every byte and found them changed:
				 * the stream is in step, only this write fails */
				mc_error("%s:%u: checksum mismatch on a write of %llu bytes at "
					 "0x%llx (seen by the target)",
					 c->peer->paths[c->path].host, c->peer->port,
					 (unsigned long long)s->len,
					 (unsigned long long)s->remote_addr);
				mc_list_del(&s->node);
				mc_slice_done(s, MC_ERR_CHECKSUM_MISMATCH);
				c->last_progress_ms = mc_now_ms();
				continue;
			}
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
				mc_tcp_conn_fail(c, MC_ERR_PROTOCOL,
						 "status before the request was sent");
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
				mc_status rc = MC_OK;
				if (s->checksum) {
					/* the target's sum of what it sent follows */
					if (c->rlen - c->rpos < MC_TCP_SUM_LEN)
						goto fill;
					rc = read_sum_check(c, s, c->rbuf + c->rpos);
					c->rpos += MC_TCP_SUM_LEN;
				}
				mc_list_del(&s->node);
				c->got_status = false;
				c->fail_streak = 0;
				mc_slice_done(s, rc);
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
			mc_tcp_conn_fail(c, MC_ERR_PROTOCOL, "unexpected bytes from server");
			return;
		}
	fill : {
		ssize_t n;
		if (got >= READ_BUDGET)
			return;
		n = mc_tcp_sock_fill(c->fd, c->rbuf, &c->rpos, &c->rlen, RBUF_SIZE);
		if (n == 0)
			return;
		if (n < 0) {
			if (!s && mc_list_empty(&c->sendq)) {
				/* idle connection closed by the server: just reconnect later */
				mc_tcp_conn_close_fd(c);
				return;
			}
			mc_tcp_conn_fail(c, (int)n, "peer closed the connection");
			return;
		}
		got += (uint64_t)n;
		c->last_progress_ms = mc_now_ms();
	}
	}
}

/* CONN_AUTH: move the handshake on; the target proves the secret before
 * a request leaves. */
static void conn_auth(struct tcp_conn *c)
{
	bool want_out;
	enum mc_auth_result r = mc_auth_hs_io(&c->hs, c->fd, &want_out);
	char why[200];

	switch (r) {
	case MC_AUTH_FAIL:
		snprintf(why, sizeof(why), "authentication failed: %s", c->hs.why);
		atomic_fetch_add(&mc_auth_refused_total, 1);
		mc_tcp_conn_fail(c, MC_ERR_PERMISSION, why);
		return;
	case MC_AUTH_AGAIN:
		conn_set_events(c, want_out);
		return;
	case MC_AUTH_DONE:
		c->state = CONN_UP;
		path_mark_ok(&c->peer->paths[c->path]);
		c->last_progress_ms = mc_now_ms();
		mc_tcp_conn_send(c);
		return;
	}
}

void mc_tcp_conn_event(struct tcp_conn *c, uint32_t events)
{
	if (c->state == CONN_AUTH) {
		conn_auth(c);
		return;
	}
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
			mc_tcp_conn_fail(c, MC_ERR_CONN_REFUSED, why);
			return;
		}
		/* an event of the socket this one replaced (same batch) must not
		 * pass for this connect's completion */
		if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) < 0)
			return;
		if (c->w->tp->auth) {
			if (mc_auth_hs_init(&c->hs, c->w->tp->auth, MC_AUTH_CLIENT, "te-data") !=
			    MC_OK) {
				mc_tcp_conn_fail(c, MC_ERR_INTERNAL, mc_last_error());
				return;
			}
			c->state = CONN_AUTH;
			conn_auth(c);
			return;
		}
		c->state = CONN_UP;
		path_mark_ok(&c->peer->paths[c->path]);
		c->last_progress_ms = mc_now_ms();
		mc_tcp_conn_send(c);
		return;
	}
	if (c->state != CONN_UP)
		return;
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		conn_recv(c);
	if (c->state == CONN_UP && (events & EPOLLOUT))
		mc_tcp_conn_send(c);
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

void mc_tcp_peer_free(struct tcp_peer *p)
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
		mc_tcp_peer_free(p);
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
		mc_tcp_peer_free(p);
		p = NULL;
		goto out;
	}
	mc_list_add_tail(&tp->peers, &p->node);
out:
	pthread_mutex_unlock(&tp->peers_lock);
	return p;
}

mc_status mc_tcp_peer_open(struct mc_transport *base, const struct mc_seg_desc *d, const char *host,
			   struct mc_peer **out)
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

bool mc_tcp_peer_failed(struct mc_peer *peer)
{
	return atomic_load(&mc_container_of(peer, struct tcp_peer, base)->failed);
}

void mc_tcp_peer_reset(struct mc_peer *peer)
{
	atomic_store(&mc_container_of(peer, struct tcp_peer, base)->failed, false);
}

/* A slice this small of the group dealt last rides that slice's lane; so
 * does one under RIDE_BIG while that lane holds under fill (MC_TCP_LANE_FILL)
 * bytes of the group: a batch of small objects wakes a worker a side per
 * lane filled, not one per lane, and large slices still spread. */
#define RIDE_MAX 4095u
#define RIDE_BIG (64u << 10)

static bool rides(const struct mc_slice *s, uint64_t prev, uint64_t fill, uint64_t lane_fill)
{
	if (!s->group || s->group != prev)
		return false;
	return s->len <= RIDE_MAX || (s->len < RIDE_BIG && fill < lane_fill);
}

/* Each slice's lane, before any is handed over (a worker may end a slice,
 * and its owner free it, as soon as it has it): dealt round-robin, or
 * riding its predecessor's lane.  lanes NULL (no memory): the deal alone. */
static void deal_lanes(struct tcp_peer *p, struct mc_slice **slices, size_t n, uint16_t *lanes,
		       unsigned *start)
{
	const uint64_t g0 = atomic_load(&p->last_group), f0 = atomic_load(&p->last_fill);
	const uint64_t lf = to_tcp(p->base.tp)->lane_fill;
	uint64_t g = g0, fill = f0;
	unsigned lane = atomic_load(&p->last_lane) % p->nconns, dealt = 0, next;

	for (size_t i = 0; lanes && i < n; i++) {
		bool r = rides(slices[i], g, fill, lf);
		dealt += !r;
		fill = r ? fill + slices[i]->len : slices[i]->len;
		g = slices[i]->group;
	}
	next = *start = atomic_fetch_add(&p->rr, lanes ? dealt : (unsigned)n);
	/* the same chain as the count's: exactly `dealt` lanes are dealt */
	g = g0;
	fill = f0;
	for (size_t i = 0; lanes && i < n; i++) {
		if (rides(slices[i], g, fill, lf)) {
			fill += slices[i]->len;
		} else {
			lane = next++ % p->nconns;
			fill = slices[i]->len;
		}
		g = slices[i]->group;
		lanes[i] = (uint16_t)lane;
	}
	atomic_store(&p->last_group, lanes ? g : 0);
	atomic_store(&p->last_lane, lane);
	atomic_store(&p->last_fill, fill);
}

mc_status mc_tcp_submit(struct mc_transport *base, struct mc_peer *peer, struct mc_slice **slices,
			size_t n)
{
	struct tcp_transport *tp = to_tcp(base);
	struct tcp_peer *p = mc_container_of(peer, struct tcp_peer, base);
	uint16_t lane_stack[256], *lanes = lane_stack;
	unsigned start;

	if (p->version < MC_TCP_PROTO_SUM || tp->force_v1) {
		/* checksummed slices need a target that checks: fail them
		 * rather than move them unchecked */
		size_t k = 0, refused = 0;
		for (size_t i = 0; i < n; i++)
			refused += slices[i]->checksum;
		if (refused)
			mc_error("%s:%u cannot check transfers (tcp_proto_version %d%s); "
				 "failing %zu checksummed slice(s)",
				 p->host, p->port, p->version,
				 tp->force_v1 ? ", MC_TCP_PROTO=v1" : "", refused);
		for (size_t i = 0; i < n; i++) {
			if (slices[i]->checksum)
				mc_slice_done(slices[i], MC_ERR_NOT_SUPPORTED);
			else
				slices[k++] = slices[i];
		}
		if (!(n = k))
			return MC_OK;
	}
	if (n > MC_ARRAY_SIZE(lane_stack))
		lanes = mc_malloc(n * sizeof(*lanes));
	deal_lanes(p, slices, n, lanes, &start);
	/* one pass per worker so each worker's lock is taken once */
	for (unsigned wi = 0; wi < tp->nworkers; wi++) {
		struct tcp_worker *w = &tp->workers[wi];
		bool any = false;
		for (size_t i = 0; i < n; i++) {
			struct tcp_conn *c =
				p->conns[lanes ? lanes[i] : (start + (unsigned)i) % p->nconns];
			if (c->w != w)
				continue;
			if (!any) {
				pthread_mutex_lock(&w->lock);
				any = true;
			}
			slices[i]->done = 0;
			slices[i]->hdr_done = 0;
			slices[i]->flags = 0;
			mc_list_add_tail(&c->incoming, &slices[i]->node);
			if (!c->queued) {
				c->queued = true;
				mc_list_add_tail(&w->ready, &c->ready_node);
			}
		}
		if (any) {
			pthread_mutex_unlock(&w->lock);
			if (atomic_load(&w->sleeping))
				mc_tcp_worker_wake(w);
		}
	}
	if (lanes != lane_stack)
		mc_free(lanes);
	return MC_OK;
}

unsigned mc_tcp_split(struct mc_transport *base, uint64_t len)
{
	struct tcp_transport *tp = to_tcp(base);
	uint64_t k;
	if (len <= tp->split_size)
		return 1;
	k = (len + tp->split_size - 1) / tp->split_size;
	return (unsigned)MC_MIN(k, (uint64_t)tp->conns_per_peer);
}

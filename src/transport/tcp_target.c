/*
 * transport/tcp_target.c - the TCP transport's server side: accepted data
 * connections, dealt to the workers round-robin; request headers parsed
 * from a staging buffer and checked against registered memory before a
 * byte is touched; write payloads received straight into target memory,
 * read data sent straight from it (or by reference, transport/tcp_zc.h);
 * device memory through two pinned buffers per connection.  Runs on the
 * worker owning the connection.  See tcp.c for the design as a whole.
 */
#define MC_LOG_MODULE "tcp"
#include "transport/tcp_int.h"

#include "base/xsum.h"

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

__attribute__((noinline)) static ssize_t user_mem_recv(int fd, struct msghdr *msg)
{
	return recvmsg(fd, msg, MSG_DONTWAIT);
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

void mc_tcp_sconn_free(struct tcp_sconn *sc)
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
	atomic_fetch_sub(&sc->w->tp->nsconns, 1);
	mc_free(sc->out);
	mc_free(sc->rbuf);
	mc_free(sc);
}

bool mc_tcp_sconn_uses_cut(const struct tcp_sconn *sc)
{
	if (sc->cur_ent && atomic_load(&sc->cur_ent->cut))
		return true;
	for (size_t i = 0; i < sc->out_n; i++) {
		const struct out_item *it = &sc->out[(sc->out_head + i) % sc->out_cap];
		if (it->ent && atomic_load(&it->ent->cut))
			return true;
	}
	return false;
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

/* A read's checksum trailer: an 8-byte item after its data. */
static bool sconn_push_sum(struct tcp_sconn *sc, uint64_t sum)
{
	if (!sconn_push(sc, NULL, 0, NULL, MC_TCP_STATUS_OK))
		return false;
	mc_tcp_sum_encode(sum, sc->out[(sc->out_head + sc->out_n - 1) % sc->out_cap].status);
	return true;
}

/* The end of a checksummed write: the target's verdict on its bytes. */
static uint32_t sconn_sum_verdict(struct tcp_sconn *sc, const void *bytes, const uint8_t *trailer)
{
	if (mc_xsum(bytes, (size_t)sc->cur.size) == mc_tcp_sum_decode(trailer))
		return MC_TCP_STATUS_OK;
	mc_error("checksum mismatch on a write of %llu bytes at 0x%llx from %s: failed",
		 (unsigned long long)sc->cur.size, (unsigned long long)sc->cur.addr, sc->peer_name);
	return MC_TCP_STATUS_SUM;
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
bool mc_tcp_sconn_flush(struct tcp_sconn *sc)
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
		mc_tcp_sconn_free(sc);
		return false;
	}
	sconn_set_events(sc);
	return true;
failed:
	mc_info("closing data connection from %s: %s", sc->peer_name, strerror(errno));
	mc_tcp_sconn_free(sc);
	return false;
}

/* A request outside registered memory: reject (v2) or close (v1). */
static bool sconn_reject(struct tcp_sconn *sc, const struct mc_tcp_hdr *h, bool v2, const char *why)
{
	mc_info("rejected %s of %llu bytes at 0x%llx from %s: %s",
		(h->opcode & 0x7f) == MC_TCP_OP_WRITE ? "write" : "read",
		(unsigned long long)h->size, (unsigned long long)h->addr, sc->peer_name, why);
	if (!v2) {
		mc_tcp_sconn_free(sc);
		return false;
	}
	sconn_push(sc, NULL, 0, NULL, MC_TCP_STATUS_REJ);
	sc->state = S_CLOSING;
	shutdown(sc->fd, SHUT_RD);
	return mc_tcp_sconn_flush(sc);
}

/* S_AUTH: move the handshake on.  False when the connection was refused
 * (and freed); nothing the peer sent before its proof is acted on. */
static bool sconn_auth(struct tcp_sconn *sc)
{
	bool want_out;
	enum mc_auth_result r = mc_auth_hs_io(&sc->hs, sc->fd, &want_out);
	struct epoll_event e = {.data.ptr = sc};

	if (r == MC_AUTH_FAIL) {
		mc_auth_refused("tcp data", sc->peer_name, sc->hs.why);
		mc_tcp_sconn_free(sc);
		return false;
	}
	if (r == MC_AUTH_DONE) {
		sc->state = S_HDR;
		sc->last_progress_ms = mc_now_ms();
		e.events = EPOLLIN;
	} else {
		e.events = EPOLLIN | (want_out ? EPOLLOUT : 0);
	}
	if (e.events != sc->events) {
		sc->events = e.events;
		epoll_ctl(sc->w->epfd, EPOLL_CTL_MOD, sc->fd, &e);
	}
	return true;
}

/* Returns false when the connection was freed. */
bool mc_tcp_sconn_readable(struct tcp_sconn *sc)
{
	struct mc_memreg *reg = sc->w->tp->memreg;
	uint64_t got = 0; /* bytes read this call (READ_BUDGET) */
	if (sc->state == S_AUTH) {
		if (!sconn_auth(sc))
			return false;
		if (sc->state == S_AUTH)
			return true;
	}
	for (;;) {
		size_t avail = sc->rlen - sc->rpos;
		if (sc->state == S_CLOSING)
			return true;
		if (sc->out_bytes >= OUT_HIGH_WATER) {
			/* drain first; if the socket takes it all, carry on parsing,
			 * else EPOLLOUT brings us back (see worker_main) */
			if (!mc_tcp_sconn_flush(sc))
				return false;
			if (sc->out_bytes >= OUT_HIGH_WATER)
				return true;
			continue;
		}
		if (sc->state == S_HDR) {
			struct mc_tcp_hdr h;
			const char *why;
			struct mc_tcp_op op;
			bool v2, write, sum;
			if (avail < MC_TCP_HDR_LEN)
				goto fill;
			mc_tcp_hdr_decode(sc->rbuf + sc->rpos, &h);
			op = mc_tcp_op_parse(h.opcode);
			v2 = op.v2;
			sum = op.sum;
			write = op.write;
			if (write && sc->reads_pending) {
				/* keep order: earlier reads must leave first */
				if (!mc_tcp_sconn_flush(sc))
					return false;
				if (sc->reads_pending)
					return true;
				continue;
			}
			sc->rpos += MC_TCP_HDR_LEN;
			sc->cur_ent = mc_memreg_acquire(reg, h.addr, h.size, write, &why);
			if (!sc->cur_ent)
				return sconn_reject(sc, &h, v2, why);
			if (sum && (!v2 || sc->cur_ent->dev >= 0)) {
				mc_memreg_put(reg, sc->cur_ent);
				sc->cur_ent = NULL;
				return sconn_reject(sc, &h, v2,
						    v2 ? "checksums are not taken on device memory"
						       : "a checksum without the v2 bit");
			}
			if (sc->cur_ent->dev >= 0 && !sconn_dev_open(sc)) {
				mc_tcp_sconn_free(sc);
				return false;
			}
			/* a large write, or one request after it (its checksum
			 * trailer, which rides the same connection) */
			if (write && h.size >= DIRECT_MIN)
				sc->large_run = 2;
			else if (sc->large_run)
				sc->large_run--;
			if (write) {
				sc->cur = h;
				sc->cur_v2 = v2;
				sc->cur_sum = sum;
				sc->cur_done = 0;
				sc->state = S_WPAYLOAD;
				continue;
			}
			if ((v2 && !sconn_push(sc, NULL, 0, NULL, MC_TCP_STATUS_OK)) ||
			    !sconn_push(sc, (const uint8_t *)(uintptr_t)h.addr, h.size, sc->cur_ent,
					-1) ||
			    (sum &&
			     !sconn_push_sum(sc, mc_xsum_sent((const void *)(uintptr_t)h.addr,
							      (size_t)h.size)))) {
				mc_error("out of memory queueing a read response");
				mc_tcp_sconn_free(sc);
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
				mc_tcp_sconn_free(sc);
				return false;
			}
			if (r == DEV_AGAIN)
				break;
			/* DEV_DONE: the payload is complete, finished below */
		}
		if (sc->cur_sum && sc->cur.size < DIRECT_MIN) {
			/* a small checksummed write is checked in rbuf, before a
			 * byte of it reaches the destination */
			uint64_t need = sc->cur.size + MC_TCP_SUM_LEN;
			const uint8_t *pay = sc->rbuf + sc->rpos;
			uint32_t code;
			if (avail < need)
				goto fill;
			code = sconn_sum_verdict(sc, pay, pay + sc->cur.size);
			if (code == MC_TCP_STATUS_OK) {
				user_mem_copy_in((void *)(uintptr_t)sc->cur.addr, pay,
						 (size_t)sc->cur.size);
				atomic_fetch_add_explicit(&sc->w->staged_in, sc->cur.size,
							  memory_order_relaxed);
			}
			sc->rpos += (size_t)need;
			mc_memreg_put(reg, sc->cur_ent);
			sc->cur_ent = NULL;
			sc->state = S_HDR;
			if (!sconn_push(sc, NULL, 0, NULL, (int)code)) {
				mc_tcp_sconn_free(sc);
				return false;
			}
			continue;
		}
		{
			uint64_t want = sc->cur.size - sc->cur_done;
			uint8_t *dst = (uint8_t *)(uintptr_t)sc->cur.addr + sc->cur_done;
			if (avail && want) {
				size_t k = (size_t)MC_MIN((uint64_t)avail, want);
				user_mem_copy_in(dst, sc->rbuf + sc->rpos, k);
				atomic_fetch_add_explicit(&sc->w->staged_in, k,
							  memory_order_relaxed);
				sc->rpos += k;
				sc->cur_done += k;
				want -= k;
			}
			if (want == 0) {
				uint32_t code = MC_TCP_STATUS_OK;
				if (sc->cur_sum) {
					/* a large one landed where it goes: its
					 * bytes there are checked against the sum */
					if (sc->rlen - sc->rpos < MC_TCP_SUM_LEN)
						goto fill;
					code = sconn_sum_verdict(
						sc, (const void *)(uintptr_t)sc->cur.addr,
						sc->rbuf + sc->rpos);
					sc->rpos += MC_TCP_SUM_LEN;
				}
				mc_memreg_put(reg, sc->cur_ent);
				sc->cur_ent = NULL;
				sc->state = S_HDR;
				if (sc->cur_v2 && !sconn_push(sc, NULL, 0, NULL, (int)code)) {
					mc_tcp_sconn_free(sc);
					return false;
				}
				continue;
			}
			if (want >= DIRECT_MIN || sc->cur.size >= DIRECT_MIN) {
				/* the rest of the payload where it goes, and in the
				 * same call what follows it into the emptied rbuf: the
				 * sum, the next header and LONE_TAIL bytes (the small
				 * request after a value, its trailer, comes whole), as
				 * the fill below would fetch them next */
				struct iovec iov[2] = {
					{(uint8_t *)(uintptr_t)sc->cur.addr + sc->cur_done,
					 (size_t)want},
					{sc->rbuf, (sc->cur_sum ? MC_TCP_SUM_LEN : 0) +
							   MC_TCP_HDR_LEN + LONE_TAIL},
				};
				struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
				ssize_t n;
				if (got >= READ_BUDGET)
					break;
				sc->rpos = sc->rlen = 0; /* avail was 0 or taken above */
				n = user_mem_recv(sc->fd, &msg);
				if (n > 0) {
					uint64_t k = MC_MIN((uint64_t)n, want);
					got += (uint64_t)n;
					sc->cur_done += k;
					sc->rlen = (size_t)((uint64_t)n - k);
					sc->last_progress_ms = mc_now_ms();
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
					break;
				if (n < 0 && errno == EINTR)
					continue;
				mc_info("data connection from %s closed mid-write", sc->peer_name);
				mc_tcp_sconn_free(sc);
				return false;
			}
		}
	fill : {
		/* after a large write, or a small request right after one, fetch
		 * just the next header and LONE_TAIL bytes, so that the payload of
		 * a next large write goes straight to its destination rather than
		 * through rbuf, and a small one (a value's trailer) comes whole */
		bool lone = sc->state == S_HDR && sc->large_run && sc->rpos == sc->rlen;
		/* the same for a large checksummed write's trailer */
		bool sum_tail = sc->state == S_WPAYLOAD && sc->cur_sum &&
				sc->cur.size >= DIRECT_MIN && sc->cur_done == sc->cur.size;
		size_t max = sum_tail ? MC_TCP_SUM_LEN + MC_TCP_HDR_LEN + LONE_TAIL
			     : lone   ? MC_TCP_HDR_LEN + LONE_TAIL
				      : RBUF_SIZE;
		ssize_t n;
		if (got >= READ_BUDGET)
			break;
		n = mc_tcp_sock_fill(sc->fd, sc->rbuf, &sc->rpos, &sc->rlen, max);
		if (n == 0)
			break;
		if (n < 0) {
			if (sc->state != S_HDR || sc->rpos != sc->rlen)
				mc_info("data connection from %s closed mid-request",
					sc->peer_name);
			mc_tcp_sconn_free(sc);
			return false;
		}
		got += (uint64_t)n;
		sc->last_progress_ms = mc_now_ms();
	}
	}
	return mc_tcp_sconn_flush(sc);
}

/* Start serving sc on its worker (the calling thread). */
void mc_tcp_sconn_adopt(struct tcp_sconn *sc)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = sc};
	sc->adopted = true;
	atomic_fetch_add(&sc->w->nsconns, 1);
	mc_list_add_tail(&sc->w->sconns, &sc->node);
	epoll_ctl(sc->w->epfd, EPOLL_CTL_ADD, sc->fd, &ev);
}

void mc_tcp_worker_accept_resume(struct tcp_worker *w, uint64_t now)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE,
				 .data.ptr = &w->tp->listen_kind};

	if (!w->accept_resume_ms || now < w->accept_resume_ms)
		return;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->tp->listen_fd, &ev) < 0 && errno != EEXIST) {
		w->accept_resume_ms = now + MC_ACCEPT_PAUSE_MS;
		return;
	}
	w->accept_resume_ms = 0;
}

void mc_tcp_worker_accept(struct tcp_worker *w)
{
	struct tcp_transport *tp = w->tp;
	for (;;) {
		struct tcp_worker *tw;
		struct tcp_sconn *sc;
		int fd = accept4(tp->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		unsigned open;
		if (fd < 0) {
			uint64_t now = mc_now_ms();
			switch (mc_accept_failed(&tp->accept_guard, errno, now)) {
			case MC_ACCEPT_AGAIN:
				continue;
			case MC_ACCEPT_PAUSE:
				/* out of this worker's epoll for a while: the backlog
				 * waits instead of the worker spinning on it */
				epoll_ctl(w->epfd, EPOLL_CTL_DEL, tp->listen_fd, NULL);
				w->accept_resume_ms = now + MC_ACCEPT_PAUSE_MS;
				return;
			case MC_ACCEPT_DRAINED:
				return;
			}
			return;
		}
		open = atomic_fetch_add(&tp->nsconns, 1);
		if (open >= tp->max_conns) {
			atomic_fetch_sub(&tp->nsconns, 1);
			mc_accept_refused(&tp->accept_guard, open, tp->max_conns, mc_now_ms());
			close(fd);
			continue;
		}
		sc = mc_calloc(1, sizeof(*sc));
		if (sc)
			sc->rbuf = mc_malloc(RBUF_SIZE);
		if (!sc || !sc->rbuf) {
			mc_error("out of memory accepting a data connection");
			if (sc)
				mc_free(sc);
			close(fd);
			atomic_fetch_sub(&tp->nsconns, 1);
			continue;
		}
		sc->kind = EV_SCONN;
		sc->fd = fd;
		sc->zc = (struct mc_zc)MC_ZC_INIT;
		sc->w = w;
		sc->state = S_HDR;
		sc->events = EPOLLIN;
		sc->last_progress_ms = sc->accepted_ms = mc_now_ms();
		if (tp->auth) {
			if (mc_auth_hs_init(&sc->hs, tp->auth, MC_AUTH_SERVER, "te-data") !=
			    MC_OK) {
				mc_error("%s", mc_last_error());
				mc_free(sc->rbuf);
				mc_free(sc);
				close(fd);
				atomic_fetch_sub(&tp->nsconns, 1);
				continue;
			}
			sc->state = S_AUTH;
		}
		mc_sock_set_nodelay(fd);
		if (tp->sockbuf)
			mc_sock_set_bufsize(fd, tp->sockbuf);
		fd_port_str(fd, sc->peer_name, sizeof(sc->peer_name));
		/* The worker that wakes first would accept a peer's whole burst
		 * of lanes; dealing them out keeps every core receiving. */
		tw = &tp->workers[atomic_fetch_add(&tp->next_accept, 1) % tp->nworkers];
		sc->w = tw;
		if (tw == w) {
			mc_tcp_sconn_adopt(sc);
			continue;
		}
		pthread_mutex_lock(&tw->lock);
		mc_list_add_tail(&tw->accepted, &sc->node);
		pthread_mutex_unlock(&tw->lock);
		if (atomic_load(&tw->sleeping))
			mc_tcp_worker_wake(tw);
	}
}

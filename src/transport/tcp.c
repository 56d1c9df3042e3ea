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
 * connections at once.  Lanes: a slice under 4 KiB of the batch whose slice
 * was dealt last rides that slice's connection instead (a store value's
 * checksum trailer, in the same submit or the next): dealt to the next
 * lane, 32 bytes would wake a second worker on each side for every object.
 * With MC_TCP_LANE_FILL set (off by default), so does a slice under 64 KiB
 * while that lane holds less than that many bytes of the batch: a batch of
 * 32 x 4 KiB then goes on one lane, waking one worker a side rather than
 * every lane's, which helps a loaded host; on a quiet 2-core host the lanes
 * working in parallel won (docs/bench/issue-12-scale.md, session 22).
 * Each connection pipelines: many requests are on the wire at once
 * (sendq: not fully sent; recvq: sent, awaiting status/data, in order).
 * Headers and write payloads leave with one sendmsg() gathering many
 * requests, straight from the caller's memory; read payloads land straight
 * in the caller's memory (small ones through a 64 KiB staging buffer that
 * also batches status frames).
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
 * Deregistration: a connection still using a registration whose bounded
 * wait ran out (mem/memreg.h, MC_TE_DEREGISTER_WAIT_MS) is closed at the
 * worker's next tick, client side (its slices fail, no retry elsewhere) or
 * server side; the deregistration returns once they let go.
 *
 * Failure: a connection that fails, closes or makes no progress for
 * MC_TCP_IO_TIMEOUT_MS fails its in-flight slices (typed status) and is
 * re-established on next use; a rejection requeues the slices behind the
 * rejected one, which the server never looked at.
 *
 * Bounds: the data port keeps at most MC_TCP_MAX_CONNS server connections
 * (more are accepted and closed at once) and closes one idle for
 * MC_TCP_IDLE_TIMEOUT_MS (its peer reconnects on next use) or whose request
 * header is not whole within MC_TCP_IO_TIMEOUT_MS of its first bytes (a
 * trickle is progress, never a stall); a worker whose
 * accept fails for lack of descriptors takes the listener out of its epoll
 * for MC_ACCEPT_PAUSE_MS (base/accept.h) instead of spinning on it.
 *
 * Multi-path: a target that publishes several addresses ("mc_tcp_addrs",
 * from its MC_TCP_INTERFACES) is reached over all of them: lane i prefers
 * path i % npaths.  A failed connection puts its path in back-off and, while
 * the lane has not failed on every path since a slice last completed on it,
 * resends all it carried over another path instead of failing it (requests
 * are idempotent at their target address; see conn_fail for why no slice
 * can complete twice).  The lane moves, not the slices, so everything stays
 * on its worker.
 *
 * Files: this one holds the configuration, the worker loop, the published
 * paths, open/close and the ops table; tcp_initiator.c the client side;
 * tcp_target.c the server side; tcp_int.h the structures they share.
 */
#define MC_LOG_MODULE "tcp"
#include "transport/tcp_int.h"

#define CFG(f) offsetof(struct tcp_config, f)
static const struct mc_config_entry tcp_config_table[] = {
	{.f = {"tcp_workers", "MC_TCP_WORKERS", "2", "TCP worker threads", CFG(workers),
	       MC_CONFIG_INT, 1, 64}},
	{.f = {"tcp_conns_per_peer", "MC_TCP_LANES_PER_PEER", "4",
	       "persistent connections per peer", CFG(conns_per_peer), MC_CONFIG_INT, 1, 16}},
	{.f = {"tcp_proto", "MC_TCP_PROTO", NULL, "\"1\" forces v1 framing as initiator",
	       CFG(proto), MC_CONFIG_STRING, 0, 0}},
	/* accepted for upstream's sake; nothing reads it (a v2 status frame is
	 * bounded by MC_TCP_IO_TIMEOUT_MS) */
	{.f = {"tcp_status_timeout", "MC_TCP_STATUS_TIMEOUT_SEC", "30",
	       "a request whose bytes are all sent fails when its v2 status frame does not come "
	       "within this or tcp_io_timeout_ms, the shorter (s; a legacy peer behind a stale "
	       "descriptor sends none)",
	       CFG(status_timeout_s), MC_CONFIG_INT, 1, 3600}},
	{.f = {"tcp_io_timeout_ms", "MC_TCP_IO_TIMEOUT_MS", "30000",
	       "fail requests on a connection that made no progress for this long",
	       CFG(io_timeout_ms), MC_CONFIG_INT, 100, 3600000}},
	{.f = {"tcp_connect_timeout_ms", "MC_TCP_CONNECT_TIMEOUT_MS", "5000",
	       "data connect timeout", CFG(connect_timeout_ms), MC_CONFIG_INT, 10, 600000}},
	{.f = {"tcp_split_size", "MC_TCP_SPLIT_SIZE", "256k",
	       "requests larger than this are split across connections (256 KiB: one large "
	       "request keeps both cores copying)",
	       CFG(split_size), MC_CONFIG_SIZE, 4096, 1ll << 40}},
	{.f = {"tcp_lane_fill", "MC_TCP_LANE_FILL", "0",
	       "a batch's slices under 64 KiB ride the lane of its slice dealt last until that lane "
	       "holds this many of its bytes (128k: a store batch of 32 x 4 KiB wakes one worker "
	       "a side, not four; fewer wake-ups on a loaded host, less parallelism on an idle "
	       "one); 0 = only slices under 4 KiB ride",
	       CFG(lane_fill), MC_CONFIG_SIZE, 0, 1ll << 30}},
	{.f = {"tcp_busy_poll_us", "MC_TCP_BUSY_POLL_US", "100",
	       "TCP workers poll without sleeping this long after work, so back-to-back requests "
	       "find them awake (waking an idle virtual CPU costs tens of microseconds); 0 = off",
	       CFG(busy_poll_us), MC_CONFIG_INT, 0, 1000000}},
	{.f = {"tcp_zerocopy_min", "MC_TCP_ZEROCOPY_MIN", "0",
	       "payloads at least this large leave from registered memory by reference (vmsplice + "
	       "splice: the kernel does not copy them into socket buffers; saves the sender a copy "
	       "on a real NIC, but over loopback the receiver then does all the work); 0 = off",
	       CFG(zerocopy_min), MC_CONFIG_SIZE, 0, 1ll << 40}},
	{.f = {"tcp_sockbuf", "MC_TCP_SOCKBUF", "0", "SO_SNDBUF/SO_RCVBUF (0 = kernel default)",
	       CFG(sockbuf), MC_CONFIG_SIZE, 0, 1 << 30}},
	{.f = {"tcp_interfaces", "MC_TCP_INTERFACES", NULL,
	       "multi-path TCP: interfaces and/or IPs (comma-separated, or \"auto\" for every up "
	       "non-loopback IPv4 interface) published as the data port's paths; peers spread their "
	       "connections over them and retry a failed path's requests on another",
	       CFG(interfaces), MC_CONFIG_STRING, 0, 0}},
	{.f = {"tcp_path_backoff_ms", "MC_TCP_PATH_BACKOFF_MS", "1000",
	       "multi-path TCP: a failed path is avoided this long, doubling per consecutive "
	       "failure up to 32x",
	       CFG(path_backoff_ms), MC_CONFIG_INT, 10, 600000}},
	{.f = {"tcp_max_conns", "MC_TCP_MAX_CONNS", "4096",
	       "data port: server connections kept open at most; more are accepted and closed at "
	       "once (a peer opens tcp_conns_per_peer of them)",
	       CFG(max_conns), MC_CONFIG_INT, 1, 1000000}},
	{.f = {"tcp_idle_timeout_ms", "MC_TCP_IDLE_TIMEOUT_MS", "300000",
	       "data port: close a server connection with no request for this long (peers "
	       "reconnect on next use); 0 = never. A busy one is bounded by tcp_io_timeout_ms",
	       CFG(idle_timeout_ms), MC_CONFIG_INT, 0, 86400000}},
};
#undef CFG
void mc_tcp_worker_wake(struct tcp_worker *w)
{
	uint64_t one = 1;
	if (write(w->evfd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the worker is awake anyway */
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
		mc_tcp_sconn_adopt(sc);
	}
	while (!mc_list_empty(&ready)) {
		struct tcp_conn *c = mc_list_first(&ready, struct tcp_conn, work_node);
		mc_list_del(&c->work_node);
		if (c->state == CONN_DOWN) {
			if (c->peer->npaths > 1)
				c->path = mc_tcp_path_pick(c, c->path, false);
			mc_tcp_conn_connect(c);
		} else if (c->state == CONN_UP)
			mc_tcp_conn_send(c);
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

/* All sent, and the head request waits for its v2 status frame: the wait
 * MC_TCP_STATUS_TIMEOUT_SEC bounds (a legacy peer behind a stale descriptor
 * never sends one).  Payload streaming stays under the i/o timeout. */
static bool awaiting_status(const struct tcp_conn *c)
{
	return c->v2 && mc_list_empty(&c->sendq) && !mc_list_empty(&c->recvq) && !c->got_status;
}

/* No progress for this long fails the connection: the i/o timeout, and
 * while a status frame is awaited the shorter of it and the status one. */
static uint64_t conn_timeout_ms(const struct tcp_transport *tp, const struct tcp_conn *c)
{
	if (awaiting_status(c))
		return MC_MIN(tp->status_timeout_ms, tp->io_timeout_ms);
	return tp->io_timeout_ms;
}

/* A deregistration's deadline passed (mem/memreg.h): close every connection
 * of this worker still reading or writing a cut registration. */
static void worker_cut(struct tcp_worker *w)
{
	struct mc_list *pos, *tmp;

	for (size_t i = 0; i < w->nscan; i++) {
		struct tcp_conn *c = w->scan[i];
		if (c->state != CONN_DOWN && mc_tcp_conn_uses_cut(c))
			mc_tcp_conn_cut(c);
	}
	mc_list_for_each_safe(pos, tmp, &w->sconns) {
		struct tcp_sconn *sc = mc_list_entry(pos, struct tcp_sconn, node);
		if (mc_tcp_sconn_uses_cut(sc)) {
			mc_info("closing data connection from %s: it serves memory being "
				"deregistered",
				sc->peer_name);
			mc_tcp_sconn_free(sc);
		}
	}
}

static void worker_tick(struct tcp_worker *w, uint64_t now)
{
	struct tcp_transport *tp = w->tp;
	struct mc_list *pos, *tmp;

	worker_sync_conns(w);
	if (mc_memreg_cut_pending(tp->memreg))
		worker_cut(w);
	for (size_t i = 0; i < w->nscan; i++) {
		struct tcp_conn *c = w->scan[i];
		bool busy = !mc_list_empty(&c->sendq) || !mc_list_empty(&c->recvq);
		if (c->state == CONN_CONNECTING && now > c->deadline_ms)
			mc_tcp_conn_fail(c, MC_ERR_TIMEOUT, "connect timed out");
		else if (c->state == CONN_AUTH && now > c->deadline_ms)
			mc_tcp_conn_fail(c, MC_ERR_TIMEOUT,
					 "authentication not complete within the connect timeout");
		else if (c->state == CONN_UP && busy &&
			 now - c->last_progress_ms > conn_timeout_ms(tp, c) &&
			 !sock_has_unread(c->fd)) {
			char why[200], info[160];
			sock_stall_info(c->fd, info, sizeof(info));
			snprintf(why, sizeof(why), "no progress within the %s timeout (%s)",
				 awaiting_status(c) && tp->status_timeout_ms < tp->io_timeout_ms
					 ? "status"
					 : "i/o",
				 info);
			mc_tcp_conn_fail(c, MC_ERR_TIMEOUT, why);
		} else if (c->state == CONN_UP && !busy && c->path != c->home &&
			   mc_tcp_path_usable(&c->peer->paths[c->home], now))
			mc_tcp_conn_close_fd(
				c); /* idle away from home: the next use tries home again */
	}
	mc_list_for_each_safe(pos, tmp, &w->sconns) {
		struct tcp_sconn *sc = mc_list_entry(pos, struct tcp_sconn, node);
		bool busy;
		if (sc->state == S_AUTH) {
			/* the whole handshake within the i/o timeout of the accept,
			 * however its bytes trickle */
			if (now - sc->accepted_ms > tp->io_timeout_ms) {
				mc_auth_refused("tcp data", sc->peer_name,
						"authentication not complete in time");
				mc_tcp_sconn_free(sc);
			}
			continue;
		}
		busy = sc->state != S_HDR || sc->out_n || sc->rpos != sc->rlen;
		bool partial_hdr = sc->state == S_HDR && !sc->out_n && sc->rpos != sc->rlen &&
				   sc->rlen - sc->rpos < MC_TCP_HDR_LEN;
		/* a header trickled a byte at a time makes progress forever: it
		 * must be whole within the i/o timeout of its first bytes */
		if (!partial_hdr)
			sc->hdr_since_ms = 0;
		else if (!sc->hdr_since_ms)
			sc->hdr_since_ms = now;
		if (partial_hdr && now - sc->hdr_since_ms > tp->io_timeout_ms) {
			mc_info("closing data connection from %s: a request header not complete "
				"within %llu ms",
				sc->peer_name, (unsigned long long)tp->io_timeout_ms);
			mc_tcp_sconn_free(sc);
			continue;
		}
		/* unread bytes while reading is on: the worker is behind, not the
		 * peer (while reading is off, the peer is not taking our output) */
		if (busy && now - sc->last_progress_ms > tp->io_timeout_ms &&
		    !((sc->events & EPOLLIN) && sock_has_unread(sc->fd))) {
			char info[160];
			sock_stall_info(sc->fd, info, sizeof(info));
			mc_info("closing stalled data connection from %s (%s)", sc->peer_name,
				info);
			mc_tcp_sconn_free(sc);
		} else if (!busy && tp->idle_timeout_ms &&
			   now - sc->last_progress_ms > tp->idle_timeout_ms) {
			mc_debug("closing idle data connection from %s", sc->peer_name);
			mc_tcp_sconn_free(sc);
		}
	}
	mc_tcp_worker_accept_resume(w, now);
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
				mc_tcp_conn_event((struct tcp_conn *)evs[i].data.ptr,
						  evs[i].events);
			} else if (kind == EV_SCONN) {
				struct tcp_sconn *sc = evs[i].data.ptr;
				if (sc->state == S_AUTH) {
					mc_tcp_sconn_readable(sc);
					continue;
				}
				if ((evs[i].events & EPOLLOUT) && !mc_tcp_sconn_flush(sc))
					continue;
				/* requests parked in rbuf (output was full, or a write
				 * waited for earlier reads) get no new EPOLLIN: resume */
				if ((evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ||
				    sc->rpos != sc->rlen)
					mc_tcp_sconn_readable(sc);
			} else if (kind == EV_LISTEN) {
				mc_tcp_worker_accept(w);
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

uint64_t mc_tcp_staged_in(struct mc_transport *base)
{
	struct tcp_transport *tp = base ? to_tcp(base) : NULL;
	uint64_t n = 0;

	for (unsigned i = 0; tp && i < tp->nworkers; i++)
		n += atomic_load_explicit(&tp->workers[i].staged_in, memory_order_relaxed);
	return n;
}

unsigned mc_tcp_worker_sconns(struct mc_transport *base, unsigned worker)
{
	struct tcp_transport *tp = base ? to_tcp(base) : NULL;
	if (!tp || worker >= tp->nworkers)
		return 0;
	return atomic_load(&tp->workers[worker].nsconns);
}

static mc_status tcp_fill_desc(struct mc_transport *base, struct mc_seg_desc *d)
{
	struct tcp_transport *tp = to_tcp(base);
	if (!d->protocol && !(d->protocol = mc_strdup("tcp")))
		return MC_ERR_NOMEM;
	d->tcp_data_port = tp->port;
	d->tcp_proto_version = MC_TCP_PROTO_SUM; /* v2, and checksummed requests */
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
		mc_tcp_worker_wake(w);
		pthread_join(w->thread, NULL);
	}
	for (unsigned i = 0; tp->workers && i < tp->nworkers; i++) {
		struct tcp_worker *w = &tp->workers[i];
		if (!w->tp)
			continue; /* never initialised */
		while (!mc_list_empty(&w->sconns))
			mc_tcp_sconn_free(mc_list_first(&w->sconns, struct tcp_sconn, node));
		while (!mc_list_empty(&w->accepted)) /* dealt out, never adopted */
			mc_tcp_sconn_free(mc_list_first(&w->accepted, struct tcp_sconn, node));
		for (size_t j = 0; j < w->nconns; j++) {
			struct tcp_conn *c = w->conns[j];
			mc_list_splice_tail(&c->sendq, &c->incoming);
			if (c->fd >= 0)
				close(c->fd);
			mc_zc_close(&c->zc);
			mc_tcp_fail_list(&c->recvq, MC_ERR_SHUTDOWN);
			mc_tcp_fail_list(&c->sendq, MC_ERR_SHUTDOWN);
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
		mc_tcp_peer_free(p);
	}
	for (size_t i = 0; i < tp->naddrs; i++)
		mc_free(tp->addrs[i]);
	if (tp->listen_fd >= 0)
		close(tp->listen_fd);
	pthread_mutex_destroy(&tp->peers_lock);
	mc_config_entry_release(tcp_config_table, MC_ARRAY_SIZE(tcp_config_table), &tp->cfg);
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
	mc_config_entry_defaults(tcp_config_table, MC_ARRAY_SIZE(tcp_config_table), cfg);
	mc_config_entry_load_env(tcp_config_table, MC_ARRAY_SIZE(tcp_config_table), cfg);
	if (env->workers)
		cfg->workers = env->workers;
	if (env->conns_per_peer)
		cfg->conns_per_peer = env->conns_per_peer;
	tp->base.ops = &mc_tcp_transport_ops;
	tp->memreg = env->memreg;
	tp->devmem = env->devmem;
	tp->stage_chunk = env->stage_chunk;
	tp->auth = mc_auth_on(env->auth) ? env->auth : NULL;
	tp->listen_kind = EV_LISTEN;
	tp->listen_fd = -1;
	pthread_mutex_init(&tp->peers_lock, NULL);
	mc_list_init(&tp->peers);
	tp->nworkers = (unsigned)cfg->workers;
	tp->conns_per_peer = (unsigned)cfg->conns_per_peer;
	tp->split_size = cfg->split_size;
	tp->lane_fill = cfg->lane_fill;
	tp->zc_min = cfg->zerocopy_min;
	tp->busy_poll_us = (uint64_t)cfg->busy_poll_us;
	tp->io_timeout_ms = (uint64_t)cfg->io_timeout_ms;
	tp->status_timeout_ms = (uint64_t)cfg->status_timeout_s * 1000u;
	tp->max_conns =
		(unsigned)mc_accept_cap_for_fds("tcp data port", (uint64_t)cfg->max_conns, 40);
	tp->idle_timeout_ms = (uint64_t)cfg->idle_timeout_ms;
	mc_accept_guard_init(&tp->accept_guard, "tcp data port");
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
	/* the engine's address, unless the data port has paths of its own */
	rc = mc_sock_listen_range_on(tp->naddrs ? NULL : env->bind_host, env->min_port,
				     env->max_port, 500, 1024);
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
	.peer_open = mc_tcp_peer_open,
	.peer_failed = mc_tcp_peer_failed,
	.peer_reset = mc_tcp_peer_reset,
	.submit = mc_tcp_submit,
	.fill_desc = tcp_fill_desc,
	.split = mc_tcp_split,
	.data_port = tcp_data_port,
};

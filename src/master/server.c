/*
 * master/server.c - the master daemon's RPC loop and its lifecycle.
 *
 * One thread runs an event loop (base/loop.h: epoll, level-triggered)
 * over the listening socket and every client connection.  Each
 * connection has a growable read buffer and a write buffer (struct
 * mc_buf).  When a connection is readable the loop reads until the socket
 * is drained (or the buffer is full), then walks the complete frames in
 * the buffer: mc_proto_frame_peek finds each frame's end,
 * mc_store_msg_decode_in turns it into a request (its strings and lists
 * taken from the loop's arena, not malloc'ed one by one) and
 * mc_master_handle appends the response to the write buffer.  All the frames of one read
 * are handled under one acquisition of the state mutex, so a pipelining
 * client pays for the lock once per batch, not once per request.  The
 * responses are then sent with one send(); what the socket does not take
 * waits for EPOLLOUT, and while more than WBUF_HIGH bytes wait the loop
 * stops reading from that connection (backpressure: a client that does
 * not read its answers cannot make the master buffer without bound).
 *
 * Frames are judged before they reach the master:
 *   - bad magic, a payload that does not decode, a frame above the size
 *     limit, a response frame, or a connection that ends in the middle of
 *     a frame: the connection is closed with one log line naming the peer
 *     and the cause (after an error response when the header could be
 *     read, so the peer learns why).  Nothing else changes: the master
 *     never saw the frame;
 *   - a foreign major version: an INVALID_VERSION error response (same
 *     type and id), then close (docs/protocol.md, "Versions");
 *   - an unknown message type: a NOT_SUPPORTED error response, and the
 *     connection goes on.
 *
 * A MountSegment or ReMountSegment with a new segment waits, like a job,
 * while a probe thread checks that the segment's transfer engine answers
 * (--mount_probe; server_probe.c): the master applies it only then.
 *
 * Requests that visit the whole table (the regex calls) are jobs
 * (mc_master_handle_start): the connection's later frames wait, and the
 * job timer runs one slice of about JOB_SLICE_US of the first job each
 * loop round, after the ready connections, then moves it to the back; so
 * a scan of millions of keys delays another client's request by one slice,
 * not by the scan.  A job's answer is queued like any other; a connection
 * that closes first takes its unfinished job with it.  The sweep after an
 * unmount or a client's expiry (mc_master_sweep_run) runs the same way,
 * with no connection behind it: the sweep timer runs one slice per loop
 * round while there is sweeping to do.
 *
 * Bounds (base/accept.h): at most rpc_max_connections connections (more
 * are accepted and closed at once); accept failing for lack of
 * descriptors or memory takes the listener out of the loop for
 * MC_ACCEPT_PAUSE_MS instead of spinning on it.  A partial frame must
 * arrive whole within rpc_frame_timeout plus its size at
 * rpc_frame_min_rate, counted from its first byte (trickling bytes does
 * not extend it).  A read buffer grows with the bytes that arrive (a
 * header alone reserves nothing), up to rpc_max_connection_buffer per
 * connection; the growth of all of them above their first 16 KiB is held
 * under rpc_max_buffered_bytes, and a connection whose frame would pass
 * that is closed.
 *
 * The loop's timers run mc_master_tick() when it is due (its return value
 * is the next deadline, at most 10 ms away, and bounds the epoll wait),
 * close connections idle longer than rpc_conn_timeout_seconds or past
 * their frame's deadline, resume accepting after a pause, and every 10 s
 * take a metrics
 * snapshot: the window for /metrics/summary's rates and, with
 * enable_metric_reporting, the "Master Admin Metrics:" log line.
 *
 * Threads and locks (docs/threads.md): the loop thread owns the
 * connections; libmicrohttpd's threads (server_http.c) serve the admin
 * pages.  Both reach the master only under s->lock, which is never held
 * across a system call that can block.
 */
#define MC_LOG_MODULE "master"
#include "master/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <jansson.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/sock.h"
#include "base/time.h"
#include "master/ha.h"
#include "master/repl.h"
#include "master/server_priv.h"
#include "master/server_probe.h"
#include "master/snap.h"
#include "master/wal.h"
#include "meta/desc.h"
#include "meta/http_server.h"
#include "mooncake/version.h"
#include "store/fsdir.h"
#include "te/rpc.h"

#define MAX_PAYLOAD	 MC_PROTO_MAX_PAYLOAD
#define MAX_FRAME	 ((size_t)MC_PROTO_HDR_LEN + MAX_PAYLOAD)
#define RBUF_INIT	 (16u << 10) /* first read buffer of a connection */
#define RBUF_KEEP	 (1u << 20)  /* larger idle buffers are given back */
#define WBUF_KEEP	 (1u << 20)
#define WBUF_HIGH	 (16u << 20) /* stop reading while this much waits to be sent */
#define READS_PER_WAKEUP 16	     /* full-buffer reads before yielding to others */
#define REPORT_PERIOD_MS 10000
#define IDLE_SCAN_MS	 250 /* idle and frame deadlines are checked this often */
#define LISTEN_BACKLOG	 1024
#define JOB_SLICE_US	 100 /* a regex job's turn; the delay it adds to others */

/* ---- connections ---------------------------------------------------------- */

/*
 * The DISK files the master dropped (--root_fs_dir): taken under the lock,
 * deleted outside it, each only if it is still that replica's file (a
 * newer write of the same name stays).  Run before the answers of the
 * requests that dropped them go out, so a client whose remove returned
 * finds the file gone.
 */
static uint32_t fs_take_locked(struct mc_master_server *s, struct mc_master_fs_gone **g)
{
	return mc_master_fs_take(s->master, g);
}

static void fs_delete(struct mc_master_fs_gone *g, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (g[i].written)
			(void)mc_fsdir_unlink(g[i].path, g[i].replica_id);
		else
			mc_fsdir_unlink_tmp(g[i].path, g[i].replica_id);
	}
	mc_master_fs_gone_free(g, n);
}

static size_t conn_pending(const struct conn *c)
{
	return c->wbuf.len - c->woff;
}

/* One more of a bounds counter (read by /metrics on another thread). */
static void count_one(atomic_uint_fast64_t *n)
{
	atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
}

/* A request of c's is unfinished (a job or a mount probe): no frame is read. */
static bool conn_waits(const struct conn *c)
{
	return c->job || c->probe;
}

/* Bytes of c's read buffer above the first one: what the global cap counts. */
static size_t conn_extra(const struct conn *c)
{
	return c->rcap > RBUF_INIT ? c->rcap - RBUF_INIT : 0;
}

/* Resize c's read buffer to cap bytes (>= rlen), keeping s->rbuf_extra true. */
static bool conn_resize(struct mc_master_server *s, struct conn *c, size_t cap)
{
	size_t before = conn_extra(c);
	uint8_t *p = mc_realloc(c->rbuf, cap);

	if (!p)
		return false;
	c->rbuf = p;
	c->rcap = cap;
	s->rbuf_extra = s->rbuf_extra - before + conn_extra(c);
	atomic_store_explicit(&s->rbuf_now, s->rbuf_extra, memory_order_relaxed);
	if (s->rbuf_extra > atomic_load_explicit(&s->rbuf_peak, memory_order_relaxed))
		atomic_store_explicit(&s->rbuf_peak, s->rbuf_extra, memory_order_relaxed);
	return true;
}

static void conn_free(struct mc_master_server *s, struct conn *c)
{
	if (c->job) {
		pthread_mutex_lock(&s->lock);
		mc_master_job_free(s->master, c->job);
		mc_master_server_unlock(s);
		c->job = NULL;
		mc_list_del(&c->job_link);
	}
	if (c->repl) {
		pthread_mutex_lock(&s->lock);
		mc_master_repl_gone_locked(s, c->repl);
		mc_master_server_unlock(s);
		c->repl = NULL;
	}
	if (c->probe) {
		/* the probe runs on; its result is dropped when it comes */
		c->probe->c = NULL;
		c->probe = NULL;
	}
	s->rbuf_extra -= conn_extra(c);
	atomic_store_explicit(&s->rbuf_now, s->rbuf_extra, memory_order_relaxed);
	mc_list_del(&c->link);
	s->nconns--;
	/* not close alone: a forked child (a snapshot) holds a duplicate of
	 * the socket, which would keep it in the epoll set, its events then
	 * naming freed memory, and keep it open for the peer until the child
	 * exits; shutdown ends the connection itself */
	mc_loop_del_fd(s->loop, &c->io);
	(void)shutdown(c->io.fd, SHUT_RDWR);
	close(c->io.fd);
	mc_free(c->rbuf);
	mc_free(c->why);
	mc_free(c->hs);
	mc_buf_release(&c->wbuf);
	mc_free(c);
}

void mc_master_server_unlock(struct mc_master_server *s)
{
	if (s->wal) {
		if (mc_master_wal_take_error(s->master))
			mc_error("wal: a state change outside an RPC reply could not be logged");
		if (mc_wal_commit(s->wal) != MC_OK) {
			uint64_t now = mc_now_ms();

			__atomic_store_n(&s->wal_fail_durable, mc_wal_last_seq(s->wal),
					 __ATOMIC_RELAXED);
			__atomic_fetch_add(&s->wal_fail_epoch, 1, __ATOMIC_RELEASE);
			s->wal_broken = true;
			if (now - s->wal_err_ms >= 1000) {
				s->wal_err_ms = now;
				mc_error("%s; the replies that depend on it are not sent, and "
					 "every change is refused until a restart",
					 mc_last_error());
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
}

/* May c's queued replies leave?  Every unlock committed the log, so they
 * may unless a commit failed since they were made and lost their records
 * (the seqs after wal_fail_durable).  Two failures since: no (it cannot
 * tell). */
static bool conn_wal_ok(struct mc_master_server *s, struct conn *c)
{
	uint64_t e, d;

	if (!c->wal_dirty)
		return true;
	if (c->wal_lost)
		return false;
	e = __atomic_load_n(&s->wal_fail_epoch, __ATOMIC_ACQUIRE);
	if (e != c->wal_epoch) {
		d = __atomic_load_n(&s->wal_fail_durable, __ATOMIC_RELAXED);
		if (e != c->wal_epoch + 1 || c->wal_seq > d ||
		    __atomic_load_n(&s->wal_fail_epoch, __ATOMIC_ACQUIRE) != e)
			return false;
	}
	c->wal_dirty = false;
	return true;
}

/* Answers of the HA leader wait until the standbys --ha_sync_replicas asks
 * for have acknowledged the log seq they were given at (server_repl.c). */
static bool conn_held(const struct conn *c)
{
	return c->ha_served && c->ha_seq > atomic_load(&c->s->repl.acked);
}

/* Send what is queued.  false: the socket failed (the caller closes). */
static bool conn_flush(struct conn *c, uint64_t now_ms)
{
	if (c->ha_served && conn_pending(c) && !ha_serving(c->s)) {
		/*
		 * Answers given while this master led, leaving after its lease
		 * ran out (it was paused between the two): another master may
		 * serve by now without these changes, so they are never
		 * acknowledged; the client sees the connection fail.
		 */
		mc_buf_reset(&c->wbuf);
		c->woff = 0;
		c->ha_served = false;
		conn_fail(c, "the HA lease ran out before these answers left: withheld");
		return false;
	}
	if (conn_held(c))
		return true; /* mc_master_server_release_held sends them */
	if (!conn_wal_ok(c->s, c)) {
		/* never an acknowledgement of what is not in the log */
		mc_buf_reset(&c->wbuf);
		c->woff = 0;
		conn_fail(c,
			  "the write-ahead log could not be written (%s): its replies are "
			  "withheld",
			  mc_strerror(MC_ERR_FILE_WRITE_FAIL));
		return false;
	}
	while (c->woff < c->wbuf.len) {
		ssize_t n = send(c->io.fd, c->wbuf.data + c->woff, c->wbuf.len - c->woff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->woff += (size_t)n;
			c->last_active_ms = now_ms;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return true;
		if (!c->closing)
			mc_info("rpc: connection from %s: send failed: %s", c->peer,
				strerror(errno));
		return false;
	}
	c->ha_served = false;
	/* all sent: keep the storage unless a big answer inflated it */
	if (c->wbuf.cap > WBUF_KEEP)
		mc_buf_release(&c->wbuf);
	else
		mc_buf_reset(&c->wbuf);
	c->woff = 0;
	return true;
}

/* Make the epoll interest match the state; false when it should close. */
static bool conn_rearm(struct mc_master_server *s, struct conn *c)
{
	uint32_t want = 0;
	size_t pending = conn_pending(c);

	if (c->closing || c->eof) {
		if (!pending)
			return false;
		want = EPOLLOUT;
	} else {
		if (pending < WBUF_HIGH && !conn_waits(c))
			want |= EPOLLIN;
		if (pending && !conn_held(c))
			want |= EPOLLOUT;
	}
	/* 0 (a job runs, nothing to send): epoll still reports hang-ups and errors */
	if (mc_loop_set_events(s->loop, &c->io, want) != MC_OK) {
		mc_error("rpc: connection from %s: %s", c->peer, mc_last_error());
		return false;
	}
	return true;
}

/* ---- HA fencing (ha_serving, ha_refuse: server_probe.h) -------------------- */

/* Stamp the answer written at out[at..] with the view version it was
 * served under (docs/protocol.md: header bytes 28..31). */
static void ha_stamp(struct mc_master_server *s, struct mc_buf *out, size_t at)
{
	if (s->ha && out->err == MC_OK && out->len >= at + MC_PROTO_HDR_LEN)
		mc_put_le32(out->data + at + MC_PROTO_HDR_VIEW_OFF,
			    (uint32_t)mc_master_ha_view_version(s->ha));
}

static void sweep_arm_locked(struct mc_master_server *s)
{
	if (!s->sweep_armed && mc_master_sweep_pending(s->master)) {
		s->sweep_armed = true;
		mc_loop_timer_start(s->loop, &s->sweep_timer, 0);
	}
}

/* A request that changes what the log holds (refused once it broke). */
static bool changes_logged_state(uint16_t type)
{
	return (type >= MC_STORE_MOUNT_SEGMENT && type <= MC_STORE_GRACEFUL_UNMOUNT_SEGMENT) ||
	       (type >= MC_STORE_PUT_START && type <= MC_STORE_NOTIFY_PROMOTION) ||
	       /* the task calls (tasks_wal.c), all but QueryTask */
	       (type >= MC_STORE_CREATE_COPY_TASK && type <= MC_STORE_MARK_TASK_TO_COMPLETE &&
		type != MC_STORE_QUERY_TASK) ||
	       type == MC_STORE_CHANGE_REPLICA;
}

static void conn_settle(struct mc_master_server *s, struct conn *c, uint64_t now_ms, bool ok);

/*
 * A frame of the HA log stream (master/repl.h): a standby's SYNC makes c
 * its stream, its ACKs release held answers.  Anything else about them is
 * a protocol error that closes c.
 */
static void repl_frame_locked(struct mc_master_server *s, struct conn *c,
			      const struct mc_proto_hdr *hdr, uint64_t now_ms)
{
	char why[300] = "";

	if (hdr->type == MC_REPL_ACK) {
		if (c->repl && !hdr->payload_len)
			mc_master_repl_ack_locked(s, c->repl, hdr->req_id, now_ms);
		else
			conn_fail(c, "an HA stream ACK from a connection that is not one");
		return;
	}
	if (c->repl || hdr->payload_len) {
		conn_fail(c, "a second or malformed HA stream SYNC");
		return;
	}
	if (!s->ha || !ha_serving(s) || hdr->req_id != mc_master_ha_view_version(s->ha))
		snprintf(why, sizeof(why),
			 "this master does not serve as the leader of view %llu: no log stream",
			 (unsigned long long)hdr->req_id);
	else
		c->repl = mc_master_repl_sync_locked(s, c, c->io.fd, now_ms, why, sizeof(why));
	if (!c->repl) {
		mc_debug("rpc: refusing an HA stream to %s: %s", c->peer, why);
		mc_store_error_encode(&c->wbuf, hdr->type, hdr->req_id,
				      MC_ERR_UNAVAILABLE_IN_CURRENT_MODE, why);
		conn_fail(c, "its HA stream was refused");
		c->logged = true; /* a standby asks a warming-up leader often: not news */
	}
}

void mc_master_server_conn_queue(struct mc_master_server *s, void *conn, const struct mc_buf *b)
{
	struct conn *c = conn;

	mc_buf_append(&c->wbuf, b->data, b->len);
	if (c->wbuf.err)
		conn_fail(c, "out of memory queueing its HA stream");
	conn_settle(s, c, mc_loop_now_ms(s->loop), true);
}

void mc_master_server_conn_drop(struct mc_master_server *s, void *conn, const char *why)
{
	struct conn *c = conn;

	conn_fail(c, "HA standby dropped: %s", why);
	conn_settle(s, c, mc_loop_now_ms(s->loop), true);
}

void mc_master_server_release_held(struct mc_master_server *s)
{
	struct mc_list *n, *t;
	uint64_t now = mc_loop_now_ms(s->loop);

	mc_list_for_each_safe(n, t, &s->conns) {
		struct conn *c = mc_list_entry(n, struct conn, link);

		if (c->ha_served && conn_pending(c) && !conn_held(c))
			conn_settle(s, c, now, true);
	}
}

static void on_repl_efd(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct mc_master_server *s = mc_container_of(f, struct mc_master_server, repl.efd);
	uint64_t cnt;

	(void)l;
	(void)events;
	if (read(f->fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		mc_warn("rpc: reading the HA stream's eventfd: %s", strerror(errno));
	mc_master_repl_pump(s);
}

/*
 * The loop's decode arena (store/proto.h): a request's strings and lists
 * come from it, not from a malloc and free each, and it is emptied before
 * the next frame (every request is released before its frame's handling
 * returns: the master copies what it keeps).  It starts empty and grows
 * to what a frame spilled beyond it, rounded up to a power of two, from
 * RPC_ARENA_MIN up to RPC_ARENA_MAX (larger requests spill to malloc).
 */
#define RPC_ARENA_MIN ((size_t)16 << 10)
#define RPC_ARENA_MAX ((size_t)4 << 20)

static mc_status frame_decode(struct mc_master_server *s, const uint8_t *frame, size_t len,
			      struct mc_store_msg *msg)
{
	struct mc_store_decode_arena *a = &s->arena;

	if (mc_unlikely(a->spilled) && a->cap < RPC_ARENA_MAX) {
		size_t want = RPC_ARENA_MIN;
		uint8_t *p;

		while (want < a->used + a->spilled && want < RPC_ARENA_MAX)
			want *= 2;
		p = mc_malloc(want); /* the old one holds nothing live */
		if (p) {
			mc_free(a->base);
			a->base = p;
			a->cap = want;
		}
	}
	a->used = a->spilled = 0;
	return mc_store_msg_decode_in(a, frame, len, MAX_PAYLOAD, msg);
}

/* Handle one complete frame; the state lock is held. */
static void handle_frame_locked(struct mc_master_server *s, struct conn *c, const uint8_t *frame,
				size_t len, const struct mc_proto_hdr *hdr, uint64_t now_ms)
{
	struct mc_store_msg msg;
	mc_status st;
	size_t before;

	if (mc_unlikely(hdr->type == MC_REPL_SYNC || hdr->type == MC_REPL_ACK)) {
		repl_frame_locked(s, c, hdr, now_ms);
		return;
	}
	st = frame_decode(s, frame, len, &msg);
	if (mc_likely(st == MC_OK)) {
		if (msg.hdr.flags & MC_PROTO_F_RESPONSE) {
			mc_store_msg_release_in(&s->arena, &msg);
			mc_store_error_encode(&c->wbuf, hdr->type, hdr->req_id, MC_ERR_PROTOCOL,
					      "the master takes requests, not responses");
			conn_fail(c, "response frame (type %u, id %llu) sent to the master",
				  hdr->type, (unsigned long long)hdr->req_id);
			return;
		}
		if (mc_unlikely(!ha_serving(s))) {
			st = ha_refuse(s, &msg, &c->wbuf);
			mc_store_msg_release_in(&s->arena, &msg);
			if (st == MC_ERR_NOMEM)
				conn_fail(c, "out of memory refusing %s",
					  mc_store_msg_name(hdr->type));
			return;
		}
		if (s->wal_broken && changes_logged_state(hdr->type)) {
			st = mc_master_refuse(s->master, &msg, MC_ERR_FILE_WRITE_FAIL,
					      "the master's write-ahead log could not be written; "
					      "it accepts no change until it is restarted",
					      &c->wbuf);
			mc_store_msg_release_in(&s->arena, &msg);
			if (st == MC_ERR_NOMEM)
				conn_fail(c, "out of memory refusing %s",
					  mc_store_msg_name(hdr->type));
			return;
		}
		if (mc_master_probe_new_locked(s, c, frame, len, &msg, now_ms)) {
			mc_store_msg_release_in(&s->arena, &msg);
			return;
		}
		before = c->wbuf.len;
		st = mc_master_handle_start(s->master, &msg, now_ms, &c->wbuf, &c->job);
		mc_store_msg_release_in(&s->arena, &msg);
		if (st != MC_INPROGRESS)
			ha_stamp(s, &c->wbuf, before);
		if (s->ha) {
			c->ha_served = true;
			c->ha_seq = s->wal ? mc_wal_last_seq(s->wal) : 0;
		}
		conn_wal_mark(s, c);
		sweep_arm_locked(s); /* an unmount: its sweep starts with the next round */
		if (st == MC_INPROGRESS) {
			if (mc_list_empty(&s->jobs))
				mc_loop_timer_start(s->loop, &s->job_timer, 0);
			mc_list_add_tail(&s->jobs, &c->job_link);
			return;
		}
		if (mc_unlikely(st == MC_ERR_NOMEM && c->wbuf.len == before))
			conn_fail(c, "out of memory answering %s", mc_store_msg_name(hdr->type));
		return;
	}
	switch (st) {
	case MC_ERR_NOT_SUPPORTED: {
		char text[64];
		snprintf(text, sizeof(text), "unknown message type %u", hdr->type);
		if (mc_store_error_encode(&c->wbuf, hdr->type, hdr->req_id, MC_ERR_NOT_SUPPORTED,
					  text) != MC_OK)
			conn_fail(c, "out of memory refusing message type %u", hdr->type);
		return;
	}
	case MC_ERR_NOMEM:
		conn_fail(c, "out of memory decoding %s", mc_store_msg_name(hdr->type));
		return;
	default: {
		char text[256];
		snprintf(text, sizeof(text), "malformed %s payload: %s",
			 mc_store_msg_name(hdr->type), mc_last_error());
		mc_store_error_encode(&c->wbuf, hdr->type, hdr->req_id,
				      st == MC_ERR_INVALID_VERSION ? st : MC_ERR_PROTOCOL, text);
		conn_fail(c, "%s (type %u, id %llu, %zu bytes)", text, hdr->type,
			  (unsigned long long)hdr->req_id, len);
		return;
	}
	}
}

/*
 * Handle every complete frame in the read buffer (one lock acquisition),
 * then move what is left to the front and make room for the next frame.
 */
static void conn_process(struct mc_master_server *s, struct conn *c, uint64_t now_ms)
{
	size_t off = 0;
	bool locked = false;

	while (!c->closing && !conn_waits(c) && off < c->rlen && conn_pending(c) < WBUF_HIGH) {
		struct mc_proto_hdr hdr;
		size_t flen = 0;
		mc_status st =
			mc_proto_frame_peek(c->rbuf + off, c->rlen - off, MAX_PAYLOAD, &hdr, &flen);

		if (mc_likely(st == MC_OK)) {
			if (!locked) {
				pthread_mutex_lock(&s->lock);
				locked = true;
			}
			handle_frame_locked(s, c, c->rbuf + off, flen, &hdr, now_ms);
			off += flen;
			continue;
		}
		if (st == MC_INPROGRESS) {
			/*
			 * A partial frame.  The buffer grows as its bytes arrive
			 * (conn_readable), not to the announced length at once:
			 * a header alone must not reserve 64 MiB.  Its deadline
			 * runs from the moment its first bytes were seen.
			 */
			if (off || !c->frame_start_ms)
				c->frame_start_ms = now_ms;
			c->frame_len = flen;
			if (flen > s->max_conn_buffer) {
				char text[128];
				snprintf(text, sizeof(text),
					 "frame of %zu bytes exceeds this connection's buffer cap "
					 "(rpc_max_connection_buffer %zu)",
					 flen, s->max_conn_buffer);
				mc_store_error_encode(&c->wbuf, hdr.type, hdr.req_id,
						      MC_ERR_TOO_LARGE, text);
				conn_fail(c, "%s", text);
				count_one(&s->n_too_large);
			}
			break;
		}
		if (st == MC_ERR_INVALID_VERSION) {
			char text[96];
			snprintf(text, sizeof(text), "protocol major version %u, master speaks %u",
				 hdr.major, (unsigned)MC_STORE_PROTO_MAJOR);
			mc_store_error_encode(&c->wbuf, hdr.type, hdr.req_id,
					      MC_ERR_INVALID_VERSION, text);
			conn_fail(c, "%s", text);
		} else if (st == MC_ERR_TOO_LARGE) {
			char text[96];
			snprintf(text, sizeof(text), "frame payload of %u bytes exceeds %u",
				 hdr.payload_len, (unsigned)MAX_PAYLOAD);
			mc_store_error_encode(&c->wbuf, hdr.type, hdr.req_id, MC_ERR_TOO_LARGE,
					      text);
			conn_fail(c, "%s", text);
			count_one(&s->n_too_large);
		} else {
			conn_fail(c, "bad frame header (%s) at stream offset %zu",
				  st == MC_ERR_PROTOCOL ? "wrong magic" : mc_strerror(st), off);
		}
		break;
	}
	if (locked) {
		struct mc_master_fs_gone *g;
		uint32_t n = fs_take_locked(s, &g);

		mc_master_server_unlock(s);
		fs_delete(g, n);
	}
	if (c->probe && !c->probe->launched)
		mc_master_probe_launch(s, c, now_ms);
	if (off) {
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
	}
	if (c->rlen == 0) {
		c->frame_start_ms = 0;
		c->frame_len = 0;
		if (c->rcap > RBUF_KEEP)
			conn_resize(s, c, RBUF_INIT);
	} else if (off && conn_waits(c)) {
		/* frames behind a job wait unread: their clock starts after it */
		c->frame_start_ms = 0;
	}
	if (c->eof && !c->closing && !conn_waits(c) && c->rlen && conn_pending(c) < WBUF_HIGH)
		conn_fail(c, "peer closed in the middle of a frame (%zu bytes of it received)",
			  c->rlen);
}

/* Read what the socket has, handling frames as buffers fill. */
static bool conn_readable(struct mc_master_server *s, struct conn *c, uint64_t now_ms)
{
	for (int i = 0; i < READS_PER_WAKEUP && !c->closing && !c->eof && !conn_waits(c); i++) {
		size_t space = c->rcap - c->rlen;
		ssize_t n;

		if (space == 0) {
			/* full of complete frames held back by backpressure */
			if (conn_pending(c) >= WBUF_HIGH)
				break;
			/* otherwise a partial frame fills it: grow, doubling up
			 * to the frame's length, within both caps */
			size_t want = c->frame_len > c->rcap ? c->frame_len : MAX_FRAME;
			size_t cap = MC_MIN(MC_MIN(c->rcap * 2, want), s->max_conn_buffer);
			if (cap <= c->rcap) {
				conn_fail(c, "read buffer cannot grow past %zu bytes", c->rcap);
				count_one(&s->n_too_large);
				break;
			}
			if (s->rbuf_extra + (cap - c->rcap) > s->max_buffered) {
				count_one(&s->n_buffer_cut);
				conn_fail(
					c,
					"the master's buffers for incomplete frames are full "
					"(rpc_max_buffered_bytes %zu); this %zu-byte frame waits for "
					"%zu more bytes",
					s->max_buffered, c->frame_len, c->frame_len - c->rlen);
				break;
			}
			if (!conn_resize(s, c, cap)) {
				conn_fail(c, "out of memory growing the read buffer to %zu bytes",
					  cap);
				break;
			}
			space = cap - c->rlen;
		}
		n = recv(c->io.fd, c->rbuf + c->rlen, space, MSG_DONTWAIT);
		if (n > 0) {
			c->rlen += (size_t)n;
			c->last_active_ms = now_ms;
			conn_process(s, c, now_ms);
			if ((size_t)n < space)
				break; /* drained */
			continue;
		}
		if (n == 0) {
			c->eof = true;
			conn_process(s, c, now_ms);
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		mc_info("rpc: connection from %s: recv failed: %s", c->peer, strerror(errno));
		return false;
	}
	return true;
}

/* Send, go on with frames held back, and close or re-arm. */
static void conn_settle(struct mc_master_server *s, struct conn *c, uint64_t now_ms, bool ok)
{
	if (ok)
		ok = conn_flush(c, now_ms);
	/* frames held back while too much waited to be sent: go on with them */
	while (ok && !c->closing && !conn_waits(c) && c->rlen && conn_pending(c) < WBUF_HIGH) {
		size_t before = c->rlen;
		conn_process(s, c, now_ms);
		ok = conn_flush(c, now_ms);
		if (c->rlen == before)
			break; /* only a partial frame is left */
	}
	if (c->closing && !c->logged) {
		mc_warn("rpc: closing connection from %s: %s", c->peer,
			c->why ? c->why : "out of memory");
		c->logged = true;
	}
	if (!ok || !conn_rearm(s, c))
		conn_free(s, c);
}

/* With a secret: the handshake, before any frame is read.  False when c
 * was refused (freed) or is still authenticating. */
static bool conn_auth(struct mc_master_server *s, struct conn *c, uint64_t now_ms)
{
	bool want_out;
	enum mc_auth_result r = mc_auth_hs_io(c->hs, c->io.fd, &want_out);

	if (r == MC_AUTH_FAIL) {
		mc_auth_refused("master rpc", c->peer, c->hs->why);
		conn_free(s, c);
		return false;
	}
	if (r == MC_AUTH_AGAIN) {
		if (mc_loop_set_events(s->loop, &c->io, EPOLLIN | (want_out ? EPOLLOUT : 0)) !=
		    MC_OK)
			conn_free(s, c);
		return false;
	}
	mc_free(c->hs);
	c->hs = NULL;
	c->frame_start_ms = 0;
	c->last_active_ms = now_ms;
	return true;
}

static void conn_event(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct conn *c = mc_container_of(f, struct conn, io);
	struct mc_master_server *s = c->s;
	uint64_t now_ms = mc_loop_now_ms(l);
	bool ok = true;

	if (c->hs && !conn_auth(s, c, now_ms))
		return;

	if (conn_waits(c) && (events & (EPOLLHUP | EPOLLERR))) {
		/* the connection broke while its job ran: drop the job with it */
		conn_free(s, c);
		return;
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		if (!c->closing && !c->eof && !conn_waits(c))
			ok = conn_readable(s, c, now_ms);
		else if (!(events & EPOLLOUT) && (events & (EPOLLHUP | EPOLLERR)))
			ok = false; /* nothing more can be sent */
	}
	conn_settle(s, c, now_ms, ok);
}

static void accept_all(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct mc_master_server *s = mc_container_of(f, struct mc_master_server, listen);
	uint64_t now_ms = mc_loop_now_ms(l);

	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct conn *c;
		int fd = accept4(s->listen.fd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			enum mc_accept_next next =
				mc_accept_failed(&s->accept_guard, errno, now_ms);
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
			mc_accept_refused(&s->accept_guard, s->nconns, s->max_conns, now_ms);
			close(fd);
			continue;
		}
		c = mc_calloc(1, sizeof(*c));
		if (c)
			c->rbuf = mc_malloc(RBUF_INIT);
		if (!c || !c->rbuf) {
			mc_warn("rpc: out of memory accepting a connection");
			if (c)
				mc_free(c);
			close(fd);
			continue;
		}
		mc_loop_fd_init(&c->io, fd, conn_event);
		mc_list_init(&c->job_link);
		c->s = s;
		c->rcap = RBUF_INIT;
		mc_buf_init(&c->wbuf);
		c->last_active_ms = now_ms;
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			char ip[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
			snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, ntohs(a->sin_port));
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			char ip[INET6_ADDRSTRLEN];
			inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
			snprintf(c->peer, sizeof(c->peer), "[%s]:%u", ip, ntohs(a->sin6_port));
		} else {
			snprintf(c->peer, sizeof(c->peer), "fd %d", fd);
		}
		if (s->tcp_nodelay)
			mc_sock_set_nodelay(fd);
		if (mc_auth_on(&s->rpc_secret)) {
			c->hs = mc_malloc(sizeof(*c->hs));
			if (!c->hs || mc_auth_hs_init(c->hs, &s->rpc_secret, MC_AUTH_SERVER,
						      "master") != MC_OK) {
				mc_warn("rpc: connection from %s: cannot start the handshake",
					c->peer);
				mc_free(c->hs);
				close(fd);
				mc_free(c->rbuf);
				mc_free(c);
				continue;
			}
			/* the handshake runs against the frame deadline */
			c->frame_start_ms = now_ms;
		}
		if (mc_loop_add_fd(l, &c->io, EPOLLIN) != MC_OK) {
			mc_free(c->hs);
			mc_warn("rpc: connection from %s: %s", c->peer, mc_last_error());
			close(fd);
			mc_free(c->rbuf);
			mc_free(c);
			continue;
		}
		mc_list_add_tail(&s->conns, &c->link);
		s->nconns++;
		mc_debug("rpc: connection from %s", c->peer);
	}
}

/* ---- timers ------------------------------------------------------------------ */

static int64_t on_accept_timer(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct mc_master_server *s = mc_container_of(t, struct mc_master_server, accept_timer);

	if (mc_loop_add_fd(l, &s->listen, EPOLLIN) != MC_OK) {
		mc_warn("rpc: cannot resume accepting: %s", mc_last_error());
		return MC_ACCEPT_PAUSE_MS;
	}
	return MC_LOOP_TIMER_STOP;
}

/* One slice of the first job, which then waits at the back. */
static int64_t on_job_timer(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct mc_master_server *s = mc_container_of(t, struct mc_master_server, job_timer);
	struct mc_master_fs_gone *fs_g;
	uint32_t fs_n;
	struct conn *c;
	size_t before;
	mc_status st;

	if (mc_list_empty(&s->jobs))
		return MC_LOOP_TIMER_STOP;
	c = mc_list_first(&s->jobs, struct conn, job_link);
	mc_list_del(&c->job_link);
	before = c->wbuf.len;
	pthread_mutex_lock(&s->lock);
	st = mc_master_job_run(s->master, c->job, now_ms, JOB_SLICE_US, &c->wbuf);
	conn_wal_mark(s, c);
	fs_n = fs_take_locked(s, &fs_g);
	mc_master_server_unlock(s);
	fs_delete(fs_g, fs_n);
	if (st == MC_INPROGRESS) {
		mc_list_add_tail(&s->jobs, &c->job_link);
	} else {
		c->job = NULL;
		c->frame_start_ms = 0; /* what waited behind it starts its clock now */
		if (st == MC_ERR_NOMEM && c->wbuf.len == before)
			conn_fail(c, "out of memory answering a regex call");
		conn_settle(s, c, now_ms, true);
	}
	return mc_list_empty(&s->jobs) ? MC_LOOP_TIMER_STOP : 0;
}

/* Probe threads finished: apply or refuse their mounts, then go on with
 * what waited behind them. */
static void on_probe_done(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct mc_master_server *s = mc_container_of(f, struct mc_master_server, probe_efd);
	uint64_t now_ms = mc_loop_now_ms(l), cnt;
	struct mc_list done;

	(void)events;
	if (read(f->fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		mc_warn("rpc: reading the mount probes' eventfd: %s", strerror(errno));
	mc_list_init(&done);
	pthread_mutex_lock(&s->probe_lock);
	while (!mc_list_empty(&s->probes_done)) {
		struct mount_probe *p =
			mc_list_first(&s->probes_done, struct mount_probe, done_link);
		mc_list_del(&p->done_link);
		mc_list_add_tail(&done, &p->done_link);
	}
	pthread_mutex_unlock(&s->probe_lock);
	while (!mc_list_empty(&done)) {
		struct mount_probe *p = mc_list_first(&done, struct mount_probe, done_link);
		struct conn *c = p->c;
		size_t before;
		mc_status st;

		mc_list_del(&p->done_link);
		pthread_join(p->thread, NULL); /* it has posted itself: returns at once */
		mc_list_del(&p->link);
		s->nprobes--;
		if (!c) {
			if (p->st != MC_OK)
				mc_info("rpc: mount probe failed after its client left: %s",
					p->why);
			mc_master_probe_free(p);
			continue;
		}
		before = c->wbuf.len;
		pthread_mutex_lock(&s->lock);
		st = mc_master_probe_answer_locked(s, p, &c->wbuf, now_ms);
		conn_wal_mark(s, c);
		mc_master_server_unlock(s);
		if (p->st != MC_OK)
			mc_warn("rpc: refused a mount from %s: %s", c->peer, p->why);
		c->probe = NULL;
		c->frame_start_ms = 0; /* what waited behind it starts its clock now */
		if (st == MC_ERR_NOMEM && c->wbuf.len == before)
			conn_fail(c, "out of memory answering a mount");
		mc_master_probe_free(p);
		conn_settle(s, c, now_ms, true);
	}
}

struct wal_replay {
	struct mc_master *m;
	uint64_t now_ms;
};

static mc_status wal_apply(void *arg, const struct mc_wal_rec *r)
{
	struct wal_replay *x = arg;
	mc_status st = mc_master_wal_replay(x->m, r->type, r->payload, r->len, x->now_ms);

	if (st != MC_OK)
		return mc_set_error(st, "record %" PRIu64 " (type %u): %s", r->seq, r->type,
				    mc_last_error());
	return MC_OK;
}

static mc_status wal_hint(void *arg, const struct mc_wal_rec *r)
{
	struct wal_replay *x = arg;

	mc_master_wal_hint(x->m, r->type, r->payload, r->len);
	return MC_OK;
}

/* --wal_dir: open the log, replay it into the master, log from now on. */
mc_status mc_master_server_wal_open(struct mc_master_server *s,
				    const struct mc_master_server_config *cfg)
{
	struct wal_replay x = {s->master, mc_now_ms()};
	struct mc_wal_open_info info;
	enum mc_wal_fsync policy;
	uint64_t t0 = mc_now_ms(), after;
	mc_status st;

	st = mc_master_server_snap_init(s, cfg, &after);
	if (st != MC_OK || !cfg->wal_dir || !*cfg->wal_dir)
		return st;
	if (!mc_wal_fsync_parse(cfg->wal_fsync ? cfg->wal_fsync : "everysec", &policy))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "--wal_fsync %s: not always, everysec "
				    "or no",
				    cfg->wal_fsync);
	/* an OBJ_PUT record takes about 80-100 bytes: the table sized once */
	mc_master_table_expect(s->master, mc_wal_dir_bytes(cfg->wal_dir, after) / 96);
	st = mc_wal_open_hinted(cfg->wal_dir, policy, after, wal_apply, wal_hint, &x, &s->wal,
				&info);
	if (st != MC_OK) {
		uint64_t newest;

		if (!after && !cfg->enable_snapshot_restore && s->snapper.dir &&
		    mc_snap_count(s->snapper.dir, &newest))
			return mc_set_error(st,
					    "--wal_dir %s: %s (%s holds snapshots, the newest "
					    "covering seq %" PRIu64
					    ": start with --enable_snapshot_restore)",
					    cfg->wal_dir, mc_last_error(), s->snapper.dir, newest);
		return mc_set_error(st, "--wal_dir %s: %s", cfg->wal_dir, mc_last_error());
	}
	mc_info("wal: %s: replayed %" PRIu64 " records (%" PRIu64 " bytes, %u files, %" PRIu64
		" torn bytes cut) in %" PRIu64 " ms; fsync %s",
		cfg->wal_dir, info.replayed, info.bytes, info.files, info.cut_bytes,
		mc_now_ms() - t0, cfg->wal_fsync);
	mc_master_set_wal(s->master, s->wal);
	mc_master_server_snap_started(s, after, mc_now_ms());
	return MC_OK;
}

/* --root_fs_dir: an existing directory; <root_fs_dir>/<cluster_id> is
 * made when missing and becomes the master's fsdir (in buf). */
static mc_status fs_dir_open(const struct mc_master_server_config *cfg, char *buf, size_t cap,
			     struct mc_master_config *out)
{
	const char *root = cfg->root_fs_dir;
	struct stat sb;

	*out = cfg->master;
	out->fsdir = NULL;
	if (!root || !*root)
		return MC_OK;
	if (stat(root, &sb) != 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "--root_fs_dir %s: %s", root,
				    strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "--root_fs_dir %s: not a directory",
				    root);
	if ((size_t)snprintf(buf, cap, "%s/%s", root, cfg->cluster_id) >= cap - 256)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "--root_fs_dir %s: path too long", root);
	if (mkdir(buf, 0777) != 0 && errno != EEXIST)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "--root_fs_dir: cannot create %s: %s",
				    buf, strerror(errno));
	if (access(buf, W_OK | X_OK) != 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "--root_fs_dir: %s is not writable: %s",
				    buf, strerror(errno));
	out->fsdir = buf;
	mc_info("DISK tier: files under %s", buf);
	return MC_OK;
}

static int64_t on_tick_timer(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct mc_master_server *s = mc_container_of(t, struct mc_master_server, tick_timer);
	struct mc_master_fs_gone *g;
	uint64_t d;
	uint32_t n;

	if (!ha_serving(s))
		return 200; /* a standby's tables are not live */
	pthread_mutex_lock(&s->lock);
	/* first: nothing is appended and uncommitted yet (server_snap.c) */
	mc_master_server_snap_tick(s, now_ms);
	mc_master_repl_tick_locked(s, now_ms);
	d = mc_master_tick(s->master, now_ms);
	sweep_arm_locked(s); /* an expiry, or an unmount from the admin threads */
	n = fs_take_locked(s, &g);
	mc_master_server_unlock(s);
	fs_delete(g, n);
	return (int64_t)(d ? d : 1);
}

/* One slice of the unmount sweep, like a job's: other requests go between. */
static int64_t on_sweep_timer(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct mc_master_server *s = mc_container_of(t, struct mc_master_server, sweep_timer);
	bool more;

	(void)l;
	(void)now_ms;
	if (!ha_serving(s)) {
		s->sweep_armed = false;
		return MC_LOOP_TIMER_STOP;
	}
	pthread_mutex_lock(&s->lock);
	more = mc_master_sweep_run(s->master, JOB_SLICE_US);
	s->sweep_armed = more;
	mc_master_server_unlock(s);
	return more ? 0 : MC_LOOP_TIMER_STOP;
}

static int64_t on_idle_timer(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct mc_master_server *s = mc_container_of(t, struct mc_master_server, idle_timer);
	struct mc_list *pos, *tmp;

	mc_list_for_each_safe(pos, tmp, &s->conns) {
		struct conn *c = mc_list_entry(pos, struct conn, link);
		/* a frame held back by backpressure is whole: only a partial
		 * one that is still being read runs against its deadline */
		if (c->frame_start_ms && !c->closing && !conn_waits(c) &&
		    conn_pending(c) < WBUF_HIGH &&
		    now_ms >= mc_frame_deadline_ms(c->frame_start_ms, MC_MAX(c->frame_len, c->rlen),
						   s->frame_timeout_ms, s->frame_min_rate)) {
			count_one(&s->n_deadline_cut);
			mc_info("rpc: closing connection from %s: a %zu-byte frame not complete "
				"after %llu ms (%zu bytes of it received)",
				c->peer, c->frame_len,
				(unsigned long long)(now_ms - c->frame_start_ms), c->rlen);
			conn_free(s, c);
			continue;
		}
		if (s->conn_timeout_ms && now_ms - c->last_active_ms >= s->conn_timeout_ms) {
			mc_info("rpc: closing connection from %s: idle for %llu s", c->peer,
				(unsigned long long)((now_ms - c->last_active_ms) / 1000));
			conn_free(s, c);
		}
	}
	return IDLE_SCAN_MS;
}

static int64_t on_report_timer(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct mc_master_server *s = mc_container_of(t, struct mc_master_server, report_timer);
	struct mc_master_server_snap cur, prev;
	char *line;

	pthread_mutex_lock(&s->lock);
	mc_master_server_snap_locked(s, &cur, now_ms);
	prev = s->prev_snap;
	s->prev_snap = cur;
	mc_master_server_unlock(s);
	if (!s->enable_metric_reporting)
		return REPORT_PERIOD_MS;
	line = mc_master_summary_format(s, &prev, &cur);
	if (line)
		mc_info("Master Admin Metrics: %s", line);
	mc_free(line);
	return REPORT_PERIOD_MS;
}

static void *loop_main(void *arg)
{
	struct mc_master_server *s = arg;

	/*
	 * Busy polling (--rpc_busy_poll_us, MC_MASTER_BUSY_POLL_US): after a wake-up with work,
	 * poll without sleeping for that long before blocking.  A client's
	 * next request usually follows within microseconds, and waking an
	 * idle CPU costs tens of microseconds on a virtual machine, more than
	 * the round trip itself.  0 turns it off.
	 */
	mc_loop_set_busy_poll(s->loop, s->busy_poll_us);
	mc_loop_timer_start(s->loop, &s->tick_timer, 0);
	mc_loop_timer_start(s->loop, &s->report_timer, REPORT_PERIOD_MS);
	mc_loop_timer_start(s->loop, &s->idle_timer, IDLE_SCAN_MS);
	if (mc_loop_run(s->loop) != MC_OK)
		mc_error("rpc: %s", mc_last_error());
	while (!mc_list_empty(&s->conns))
		conn_free(s, mc_list_first(&s->conns, struct conn, link));
	return NULL;
}

/* ---- listening ---------------------------------------------------------- */

/* The IPv4 address of interface name, into buf. */
static mc_status interface_ipv4(const char *name, char *buf, size_t len)
{
	struct ifaddrs *ifs, *i;
	mc_status st = MC_ERR_NOT_FOUND;

	if (getifaddrs(&ifs) < 0)
		return mc_set_error(MC_ERR_SOCKET, "getifaddrs: %s", strerror(errno));
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
		    strcmp(i->ifa_name, name) != 0)
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf,
			  (socklen_t)len);
		st = MC_OK;
		break;
	}
	freeifaddrs(ifs);
	if (st)
		return mc_set_error(MC_ERR_NOT_FOUND, "rpc_interface %s has no IPv4 address", name);
	return MC_OK;
}

static int rpc_listen(const char *host, uint16_t port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	char portstr[8], h[256];
	int rc, err = 0;
	size_t hl;

	/* "[::1]" -> "::1" */
	hl = strlen(host);
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof(h)) {
		memcpy(h, host + 1, hl - 2);
		h[hl - 2] = '\0';
		host = h;
	}
	snprintf(portstr, sizeof(portstr), "%u", port);
	rc = getaddrinfo(*host ? host : NULL, portstr, &hints, &res);
	if (rc)
		return mc_set_error(MC_ERR_DNS, "rpc: cannot resolve %s: %s", host,
				    gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next) {
		int one = 1, fd;

		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) {
			int zero = 0;
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		}
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0) {
			freeaddrinfo(res);
			return fd;
		}
		err = errno;
		close(fd);
	}
	freeaddrinfo(res);
	return mc_set_error(MC_ERR_SOCKET, "rpc: cannot listen on %s port %u: %s", host, port,
			    strerror(err ? err : EADDRNOTAVAIL));
}

/* ---- lifecycle ------------------------------------------------------------ */

mc_status mc_master_server_start(const struct mc_master_server_config *cfg,
				 struct mc_master_server **out)
{
	struct mc_master_server *s;
	struct mc_master_config mcfg;
	char ifaddr[INET_ADDRSTRLEN];
	char fsdir[4096];
	const char *host;
	uint16_t port;
	mc_status st;

	mc_log_init_from_env();
	if (!cfg || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "master server: NULL argument");
	/* --auth_secret_file: every part of the master (RPC and admin ports,
	 * metadata server, a standby's stream) loads the secret from there */
	if ((st = mc_auth_use_file(cfg->auth_secret_file)) != MC_OK)
		return st;
	s = mc_calloc(1, sizeof(*s));
	if (!s)
		return mc_set_error(MC_ERR_NOMEM, "master server: out of memory");
	mc_loop_fd_init(&s->listen, -1, accept_all);
	mc_loop_timer_init(&s->tick_timer, on_tick_timer);
	mc_loop_timer_init(&s->idle_timer, on_idle_timer);
	mc_loop_timer_init(&s->report_timer, on_report_timer);
	mc_loop_timer_init(&s->accept_timer, on_accept_timer);
	mc_loop_timer_init(&s->job_timer, on_job_timer);
	mc_loop_timer_init(&s->sweep_timer, on_sweep_timer);
	s->enable_metric_reporting = cfg->enable_metric_reporting;
	s->busy_poll_us = (uint64_t)cfg->rpc_busy_poll_us;
	s->tcp_nodelay = cfg->rpc_enable_tcp_no_delay;
	s->conn_timeout_ms = cfg->rpc_conn_timeout_seconds > 0
				     ? (uint64_t)cfg->rpc_conn_timeout_seconds * 1000
				     : 0;
	s->max_conns = mc_accept_cap_for_fds("rpc", (uint64_t)cfg->rpc_max_connections, 60);
	s->frame_timeout_ms = cfg->rpc_frame_timeout_ms;
	s->frame_min_rate = cfg->rpc_frame_min_rate;
	s->max_conn_buffer = MC_MAX((size_t)cfg->rpc_max_connection_buffer, (size_t)RBUF_INIT);
	s->max_buffered = (size_t)cfg->rpc_max_buffered_bytes;
	mc_accept_guard_init(&s->accept_guard, "rpc");
	st = mc_auth_secret_load(NULL, &s->rpc_secret);
	if (st != MC_OK)
		goto err_free;
	atomic_init(&s->n_deadline_cut, 0);
	atomic_init(&s->n_buffer_cut, 0);
	atomic_init(&s->rbuf_now, 0);
	atomic_init(&s->rbuf_peak, 0);
	atomic_init(&s->n_too_large, 0);
	mc_list_init(&s->conns);
	mc_list_init(&s->jobs);
	mc_list_init(&s->probes);
	mc_list_init(&s->probes_done);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->probe_lock, NULL);
	s->mount_probe = cfg->mount_probe;
	s->mount_probe_timeout_ms = cfg->mount_probe_timeout_ms;
	mc_loop_fd_init(&s->probe_efd, -1, on_probe_done);
	mc_list_init(&s->repl.peers);
	atomic_init(&s->repl.acked, UINT64_MAX);
	atomic_init(&s->repl.sfd, -1);
	s->repl.lock_fd = -1;
	s->repl.snap_lock_fd = -1;
	mc_loop_fd_init(&s->repl.efd, -1, on_repl_efd);

	st = fs_dir_open(cfg, fsdir, sizeof(fsdir), &mcfg);
	if (st == MC_OK)
		st = mc_master_new(&mcfg, &s->master);
	/* a standby's fresh tables for each snapshot of the leader (server_repl.c) */
	s->repl.mcfg = mcfg;
	if (st == MC_OK && mcfg.fsdir) {
		s->repl.fsdir = mc_strdup(mcfg.fsdir);
		s->repl.mcfg.fsdir = s->repl.fsdir;
		if (!s->repl.fsdir)
			st = MC_ERR_NOMEM;
	}
	if (st) {
		mc_set_error(st, "master: bad configuration: %s", mc_last_error());
		goto err_free;
	}
	/* with HA the tables are loaded when this master takes over */
	st = cfg->enable_ha ? MC_OK : mc_master_server_wal_open(s, cfg);
	if (st)
		goto err_master;
	s->prev_snap.at_ms = mc_now_ms();
	mc_master_metrics(s->master, &s->prev_snap.m);

	host = cfg->rpc_address ? cfg->rpc_address : "0.0.0.0";
	if (cfg->rpc_interface && *cfg->rpc_interface) {
		st = interface_ipv4(cfg->rpc_interface, ifaddr, sizeof(ifaddr));
		if (st)
			goto err_master;
		host = ifaddr;
	}
	/* upstream: rpc_port 0 falls back to port; here an explicit 0 means any
	 * free port, which tests and scripts need */
	port = (uint16_t)(cfg->rpc_port || cfg->rpc_port_explicit ? cfg->rpc_port : cfg->port);
	s->listen.fd = rpc_listen(host, port);
	if (s->listen.fd < 0) {
		st = s->listen.fd;
		goto err_master;
	}
	s->rpc_port = mc_sock_local_port(s->listen.fd);
	mc_auth_warn_open(&s->rpc_secret, "the master's RPC port", host);

	st = mc_loop_new(&s->loop);
	if (st)
		goto err_fds;
	mc_loop_set_turn_stats(s->loop, true, cfg->loop_turn_cpu_stats);
	st = mc_loop_add_fd(s->loop, &s->listen, EPOLLIN);
	if (st)
		goto err_fds;
	s->probe_efd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->probe_efd.fd < 0) {
		st = mc_set_error(MC_ERR_SOCKET, "rpc: eventfd: %s", strerror(errno));
		goto err_fds;
	}
	st = mc_loop_add_fd(s->loop, &s->probe_efd, EPOLLIN);
	if (st)
		goto err_fds;
	s->repl.efd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->repl.efd.fd < 0) {
		st = mc_set_error(MC_ERR_SOCKET, "rpc: eventfd: %s", strerror(errno));
		goto err_fds;
	}
	st = mc_loop_add_fd(s->loop, &s->repl.efd, EPOLLIN);
	if (st)
		goto err_fds;

	/* the metadata server first: the admin pages read s->meta (its counts) */
	if (cfg->enable_http_metadata_server) {
		struct mc_http_meta_server_limits lim = {
			.max_conns = (int64_t)mc_accept_cap_for_fds(
				"http metadata server",
				(uint64_t)cfg->http_metadata_server_max_connections, 20),
			.request_timeout_ms = (int64_t)cfg->http_metadata_server_request_timeout_ms,
			.max_conns_per_ip = cfg->http_metadata_server_max_connections_per_ip,
		};
		st = mc_http_meta_server_start_limits(cfg->http_metadata_server_host,
						      (uint16_t)cfg->http_metadata_server_port,
						      &lim, &s->meta);
		if (st)
			goto err_fds;
		s->metadata_port = mc_http_meta_server_port(s->meta);
	}
	/* the election before the admin pages, which report it */
	if (cfg->enable_ha) {
		st = mc_master_server_ha_start(s, cfg, host);
		if (st)
			goto err_meta;
	}
	st = mc_master_admin_start(s, cfg);
	if (st)
		goto err_ha;
	if (pthread_create(&s->loop_thread, NULL, loop_main, s) != 0) {
		st = mc_set_error(MC_ERR_INTERNAL, "rpc: cannot start the loop thread");
		goto err_admin;
	}
	s->loop_started = true;
	mc_info("master %s: rpc on %s:%u, admin on %s:%u, http metadata server %s port %u",
		MC_VERSION_STRING, host, s->rpc_port,
		cfg->metrics_host ? cfg->metrics_host : "0.0.0.0", s->metrics_port,
		s->meta ? "on" : "off", s->metadata_port);
	*out = s;
	return MC_OK;

err_admin:
	mc_master_admin_stop(s);
err_ha:
	(void)mc_master_repl_standby_stop(s);
	mc_master_ha_stop(s->ha);
err_meta:
	mc_http_meta_server_stop(s->meta);
err_fds:
	mc_loop_free(s->loop);
	close(s->listen.fd);
	if (s->probe_efd.fd >= 0)
		close(s->probe_efd.fd);
	if (s->repl.efd.fd >= 0)
		close(s->repl.efd.fd);
	s->repl.efd.fd = -1;
err_master:
	mc_master_repl_release(s);
	if (s->repl.lock_fd >= 0)
		close(s->repl.lock_fd);
	if (s->repl.snap_lock_fd >= 0)
		close(s->repl.snap_lock_fd);
	mc_master_server_snap_stop(s);
	if (s->wal)
		(void)mc_wal_close(s->wal);
	mc_master_free(s->master);
err_free:
	mc_auth_secret_release(&s->rpc_secret);
	pthread_mutex_destroy(&s->probe_lock);
	pthread_mutex_destroy(&s->lock);
	mc_free(s->arena.base);
	mc_free(s);
	return st;
}

uint16_t mc_master_server_rpc_port(const struct mc_master_server *s)
{
	return s ? s->rpc_port : 0;
}

uint16_t mc_master_server_metrics_port(const struct mc_master_server *s)
{
	return s ? s->metrics_port : 0;
}

uint16_t mc_master_server_metadata_port(const struct mc_master_server *s)
{
	return s ? s->metadata_port : 0;
}

void mc_master_server_stop(struct mc_master_server *s)
{
	if (!s)
		return;
	/* the HTTP threads first: they use the master under the lock */
	mc_master_admin_stop(s);
	mc_http_meta_server_stop(s->meta);
	if (s->loop_started) {
		mc_loop_stop(s->loop);
		pthread_join(s->loop_thread, NULL);
	}
	/* then the election (nobody reads s->ha any more; a take-over under
	 * way finishes first), before the log it may have opened is closed;
	 * the standby's stream before it, as it reads the election's view
	 * (and no step-down starts another once ha_stopping is set) */
	pthread_mutex_lock(&s->lock);
	s->ha_stopping = true;
	pthread_mutex_unlock(&s->lock);
	(void)mc_master_repl_standby_stop(s);
	mc_master_ha_stop(s->ha);
	s->ha = NULL;
	/* probes still in flight: each ends by its deadline; their clients are gone */
	while (!mc_list_empty(&s->probes)) {
		struct mount_probe *p = mc_list_first(&s->probes, struct mount_probe, link);
		mc_list_del(&p->link);
		if (p->launched)
			pthread_join(p->thread, NULL);
		mc_master_probe_free(p);
	}
	mc_loop_free(s->loop);
	close(s->listen.fd);
	close(s->probe_efd.fd);
	close(s->repl.efd.fd);
	s->repl.efd.fd = -1;
	pthread_mutex_lock(&s->lock);
	mc_master_repl_release(s);
	pthread_mutex_unlock(&s->lock);
	mc_master_server_snap_stop(s);
	if (s->wal && mc_wal_close(s->wal) != MC_OK)
		mc_error("wal: closing the log: %s", mc_last_error());
	if (s->repl.lock_fd >= 0)
		close(s->repl.lock_fd); /* the directory is free for the next master */
	if (s->repl.snap_lock_fd >= 0)
		close(s->repl.snap_lock_fd);
	mc_master_free(s->master);
	mc_auth_secret_release(&s->rpc_secret);
	pthread_mutex_destroy(&s->probe_lock);
	pthread_mutex_destroy(&s->lock);
	mc_free(s->arena.base);
	mc_free(s);
}

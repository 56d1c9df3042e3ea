/*
 * transport/shm.c - the same-host transport: process to process copies with
 * process_vm_readv/process_vm_writev, no sockets on the data path.
 *
 * Who copies: the TARGET.  An initiator sends small requests {opcode, id,
 * initiator address, target address, length} over an abstract Unix-domain
 * socket; the target's worker checks the target range against registered
 * memory with mc_memreg_acquire (the same check the TCP server applies:
 * unknown, out-of-range or wrapping ranges are rejected and no byte is
 * touched), copies with process_vm_readv (a write: from the initiator's
 * buffer into its own memory) or process_vm_writev (a read), drops the
 * memreg reference and answers with a status.  Because the target holds the
 * entry's users count across the copy, deregistration cannot unmap memory
 * under it; the initiator's buffer is the caller's until the task ends.
 * The initiator's pid comes from SO_PEERCRED, never from the request, so a
 * client can only make the target copy to or from the client's own address
 * space.  A pidfd taken at accept time is checked before each batch of
 * requests, so a pid recycled after the initiator died is not written to.
 *
 * Device memory (mem/devmem.h): a target range registered as device memory
 * is never handed to process_vm_*; the worker moves it through two pinned
 * buffers, the process_vm_* copy of one chunk overlapping the device copy
 * of the other (serve_copy_dev).  An initiator's device buffers never reach
 * this transport: the engine stages them (te/stage.c).
 *
 * Target side: MC_SHM_WORKERS threads, each owning an epoll loop, its own
 * listening socket "<ep>.<i>" (so connections are spread over the workers
 * by construction) and the connections it accepted.  Requests are processed
 * in order per connection; answers are batched into one write.  A malformed
 * frame closes the connection with a logged reason.  Consecutive small
 * requests of one direction read at once are copied by one process_vm_*
 * call (a run: struct run), each range still checked and answered on its
 * own.  After a turn that did work a worker polls its epoll set without
 * sleeping for MC_SHM_BUSY_POLL_US, as the receiver does (busy_spinning).
 *
 * Initiator side: per same-host peer, MC_SHM_LANES connections (lane i goes
 * to the target's worker i mod its worker count), opened on first use with
 * a HELLO round trip in the submitting thread.  Submitters encode frames
 * under the lane's send lock and write them with one send per batch;
 * the lane's FIFO of pending slices (answers come back in order) sits under
 * a second, short lock.  One receiver thread reads the answers of every lane
 * and completes slices.  Requests of at least MC_SHM_SPLIT_SIZE bytes are
 * split into one slice per lane, so two target workers copy in parallel.
 *
 * Authentication: with a cluster secret (env->auth) every connection opens
 * with the challenge-response handshake of base/auth_hs.h (channel
 * "te-shm") before the first request; the target serves nothing before the
 * proof checked, and a handshake not done within the i/o timeout of the
 * accept is closed.  An initiator whose handshake fails (another secret)
 * uses TCP for that peer, whose own handshake then refuses it.
 *
 * Fallback: a target is reached here only when its descriptor carries our
 * host id (caps.same_host: the engine checks) and an "mc_shm_ep"; each
 * same-host peer wraps the TCP peer of the same target (env->fallback, the
 * registry's tcp row).  If the connect or the HELLO fails (other network
 * namespace, EPERM/ENOSYS from process_vm_*), the peer is switched off and
 * its slices, including any answered NOPERM, go to that TCP peer.  The
 * peer counts as failed when either path failed.  A lane that errors, closes or makes no progress
 * for MC_SHM_IO_TIMEOUT_MS fails its in-flight slices (typed status), marks the peer failed (the
 * engine then refetches the descriptor) and is reconnected on next use.
 *
 * Checksummed slices (slice.checksum) go to the TCP peer (sum_to_tcp): this
 * protocol has no room for their sums (docs/design.md, "Transfer checksums").
 *
 * Lock order: peer->lock, then a lane's send_lock, then the lane's lock;
 * st->peers_lock before a lane's locks (the receiver's timeout scan).
 */
#define MC_LOG_MODULE "shm"
#include "transport/shm.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/log.h"
#include "base/time.h"
#include "mem/devmem.h"
#include "mem/memreg.h"
#include "meta/desc.h"
#include "transport/slice.h"
#include "transport/tcp.h"
#include "transport/transport.h"

#define MAX_LANES    16
#define SEND_BATCH   64			   /* frames encoded per send() */
#define RBUF_FRAMES  512		   /* request frames a target reads at once */
#define OBUF_HIGH    (1u << 20)		   /* stop reading requests above this much unsent output */
#define COPY_CHUNK   ((size_t)64 << 20)	   /* bytes per process_vm_* call */
#define RUN_MAX	     64			   /* requests one process_vm_* call may carry (a run) */
#define RUN_REQ_MAX  ((uint64_t)256 << 10) /* larger requests are copied alone */
#define TICK_MS	     100
#define SHM_RETRY_MS 1000 /* a peer we could not connect to is retried this often */

/* ---- codec ---------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void mc_shm_req_encode(const struct mc_shm_req *r, uint8_t out[MC_SHM_REQ_LEN])
{
	put32(out, MC_SHM_MAGIC);
	out[4] = MC_SHM_VERSION;
	out[5] = r->opcode;
	out[6] = out[7] = 0;
	put64(out + 8, r->id);
	put64(out + 16, r->local);
	put64(out + 24, r->remote);
	put64(out + 32, r->len);
}

mc_status mc_shm_req_decode(const uint8_t in[MC_SHM_REQ_LEN], struct mc_shm_req *r,
			    const char **why_out)
{
	const char *why = NULL;

	r->opcode = in[5];
	r->id = get64(in + 8);
	r->local = get64(in + 16);
	r->remote = get64(in + 24);
	r->len = get64(in + 32);
	if (get32(in) != MC_SHM_MAGIC)
		why = "bad magic";
	else if (in[4] != MC_SHM_VERSION)
		why = "unknown version";
	else if (in[6] || in[7])
		why = "reserved bits set";
	else if (r->opcode > MC_SHM_OP_HELLO)
		why = "unknown opcode";
	else if (r->len == 0)
		why = "zero length";
	else if (r->local + r->len < r->local || r->remote + r->len < r->remote)
		why = "range wraps around";
	else if (r->opcode == MC_SHM_OP_HELLO && (r->len != 1 || r->local == 0))
		why = "malformed hello";
	if (why_out)
		*why_out = why;
	return why ? MC_ERR_PROTOCOL : MC_OK;
}

void mc_shm_resp_encode(uint64_t id, uint32_t status, uint8_t out[MC_SHM_RESP_LEN])
{
	put32(out, MC_SHM_MAGIC);
	put32(out + 4, status);
	put64(out + 8, id);
}

mc_status mc_shm_resp_decode(const uint8_t in[MC_SHM_RESP_LEN], uint64_t *id_out,
			     uint32_t *status_out)
{
	if (get32(in) != MC_SHM_MAGIC)
		return MC_ERR_PROTOCOL;
	*status_out = get32(in + 4);
	*id_out = get64(in + 8);
	return MC_OK;
}

/* ---- structures ------------------------------------------------------------ */

enum ev_kind { EV_LISTEN = 1, EV_WAKE, EV_SCONN, EV_LANE };

struct pend {
	struct mc_slice *s;
	uint64_t id;
};

struct shm_peer;

/* One initiator connection. */
struct shm_lane {
	int kind; /* EV_LANE; first, the epoll tag */
	struct shm_peer *peer;
	unsigned index;
	pthread_mutex_t send_lock; /* serialises writers; guards fd changes */
	pthread_mutex_t lock;	   /* fd, the pending FIFO, progress time */
	int fd;			   /* -1 = down */
	struct pend *q;		   /* circular FIFO of sent requests (a hot ring: no mc_buf) */
	size_t qhead, qlen, qcap;
	uint64_t next_id;
	uint64_t progress_ms; /* last answer, or first request after idle */
	/* receiver-owned */
	uint8_t rbuf[MC_SHM_RESP_LEN * 256];
	size_t rlen;
};

enum peer_mode { PEER_NEW, PEER_UP, PEER_OFF };

struct shm_peer {
	struct mc_peer base; /* first: container_of */
	struct mc_list node;
	struct shm_transport *st;
	char ep[MC_SHM_EP_MAX + 1];
	struct mc_peer *tcp_peer; /* the fallback's peer of the same target */
	atomic_bool sum_said;	  /* "checksummed transfers go over TCP" logged */
	pthread_mutex_t lock;	  /* mode, connecting lanes */
	atomic_int mode;
	atomic_bool denied;	       /* the kernel or the handshake refused: TCP for good */
	atomic_uint_fast64_t retry_ms; /* OFF for another reason: retry after */
	atomic_bool failed;
	atomic_uint rr;
	unsigned nlanes;
	struct shm_lane lanes[MAX_LANES];
};

struct shm_sconn {
	int kind; /* EV_SCONN */
	struct mc_list node;
	struct shm_worker *w;
	int fd;
	pid_t pid;
	int pidfd;	      /* -1 when the kernel has no pidfd_open */
	bool authing;	      /* the handshake is not done: nothing is served yet */
	uint64_t accepted_ms; /* the handshake must end within io_timeout_ms of it */
	struct mc_auth_hs hs;
	bool want_out;
	bool paused; /* EPOLLIN off while output is backed up */
	uint8_t rbuf[MC_SHM_REQ_LEN * RBUF_FRAMES];
	size_t rlen;
	/* answers not yet sent; not a struct mc_buf: every request's answer
	 * passes through it and a partial send compacts it (sconn_flush) */
	uint8_t *obuf;
	size_t olen, ocap;
};

struct shm_worker {
	struct shm_transport *st;
	unsigned index;
	pthread_t thread;
	bool started;
	int epfd, wakefd, lfd;
	int listen_kind; /* EV_LISTEN: epoll tag of lfd */
	int wake_kind;	 /* EV_WAKE */
	struct mc_list sconns;
	unsigned nsconns;
	unsigned nauthing;	   /* of them, still in the handshake */
	uint64_t accept_resume_ms; /* lfd out of the epoll set until then; 0 = in it */
	struct mc_devstage stage;  /* pinned at the first device-memory request */
	bool stage_ok;
};

struct shm_config {
	bool force_tcp;
	bool disable;
	int64_t workers;
	int64_t lanes;
	uint64_t split_size;
	int64_t io_timeout_ms;
	int64_t max_conns;
	int64_t busy_poll_us;
};

#define CFG(f) offsetof(struct shm_config, f)
static const struct mc_config_entry shm_config_table[] = {
	{.f = {"force_tcp", "MC_FORCE_TCP", NULL,
	       "use TCP for every remote segment (upstream's name; also turns the same-host path "
	       "off)",
	       CFG(force_tcp), MC_CONFIG_PRESENCE, 0, 0}},
	{.f = {"shm_disable", "MC_SHM_DISABLE", "false",
	       "turn the same-host transport (process_vm_readv/writev between engines on one host) "
	       "off: same-host peers then use TCP",
	       CFG(disable), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"shm_workers", "MC_SHM_WORKERS", "2",
	       "same-host transport: threads copying for peers", CFG(workers), MC_CONFIG_INT, 1,
	       16}},
	{.f = {"shm_lanes", "MC_SHM_LANES", "2",
	       "same-host transport: connections per same-host peer", CFG(lanes), MC_CONFIG_INT, 1,
	       16}},
	{.f = {"shm_split_size", "MC_SHM_SPLIT_SIZE", "1m",
	       "same-host transport: requests at least this large are split across the connections",
	       CFG(split_size), MC_CONFIG_SIZE, 4096, 1ll << 40}},
	{.f = {"shm_io_timeout_ms", "MC_SHM_IO_TIMEOUT_MS", "0",
	       "same-host transport: fail requests on a connection that made no progress for this "
	       "long (0 = MC_TCP_IO_TIMEOUT_MS)",
	       CFG(io_timeout_ms), MC_CONFIG_INT, 0, 3600000}},
	{.f = {"shm_max_conns", "MC_SHM_MAX_CONNS", "1024",
	       "same-host transport: connections each worker's endpoint keeps open at most; more "
	       "are accepted and closed at once",
	       CFG(max_conns), MC_CONFIG_INT, 1, 1000000}},
	{.f = {"shm_busy_poll_us", "MC_SHM_BUSY_POLL_US", "100",
	       "same-host transport: after work, the target's workers and the initiator's "
	       "receiver poll without sleeping this long (0 = sleep at once)",
	       CFG(busy_poll_us), MC_CONFIG_INT, 0, 1000000}},
};
#undef CFG

struct shm_transport {
	struct mc_transport base;
	struct mc_memreg *memreg;
	const struct mc_devmem_ops *devmem;
	size_t stage_chunk;
	struct mc_transport *tcp;	   /* the fallback */
	const struct mc_auth_secret *auth; /* borrowed; NULL: no handshake */
	char ep[MC_SHM_EP_MAX + 1];
	atomic_bool stop;
	unsigned nworkers;
	struct shm_worker workers[MC_SHM_MAX_WORKERS];
	/* initiator side */
	pthread_mutex_t peers_lock;
	struct mc_list peers;
	unsigned lanes;
	uint64_t split_size;
	int64_t io_timeout_ms;
	int64_t connect_timeout_ms;
	unsigned max_conns; /* per worker endpoint */
	uint64_t busy_poll_ns;
	struct mc_accept_guard accept_guard;
	int epfd, wakefd; /* the receiver's */
	int wake_kind;
	pthread_t receiver;
	bool receiver_started;
	atomic_uint_fast64_t n_copied, n_fallback;
};

static const uint8_t hello_probe = 0x5a; /* the byte a target reads to check permission */

static struct shm_transport *to_shm(struct mc_transport *tp)
{
	return mc_container_of(tp, struct shm_transport, base);
}

static int pidfd_open_compat(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* Abstract socket address of "<ep>.<index>". */
static socklen_t ep_addr(const char *ep, unsigned index, struct sockaddr_un *sa)
{
	int n;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "%s.%u", ep, index);
	if (n < 0 || (size_t)n >= sizeof(sa->sun_path) - 1)
		return 0;
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/*
 * Busy polling (the target's workers and the initiator's receiver): after a
 * turn that did work, a loop polls its epoll set without sleeping for
 * busy_poll_ns, yielding the CPU between polls.  A back-to-back caller's
 * next request, and the answer to it, then find the thread awake: waking
 * one that sleeps in epoll_wait costs tens of microseconds on a virtual
 * machine, many times the copy of a small object.  spin_until_ns is the
 * loop's state: busy_spinning says whether this turn polls (epoll timeout
 * 0), busy_next moves the state on after the turn.
 */
static bool busy_spinning(uint64_t spin_until_ns)
{
	return spin_until_ns && mc_now_ns() < spin_until_ns;
}

static uint64_t busy_next(const struct shm_transport *st, uint64_t spin_until_ns, bool spun,
			  bool worked)
{
	if (worked && st->busy_poll_ns)
		return mc_now_ns() + st->busy_poll_ns;
	if (spun)
		sched_yield(); /* keep the vCPU awake, not a runnable thread off it */
	return spun ? spin_until_ns : 0;
}

/* ---- target side ------------------------------------------------------------ */

static void sconn_close(struct shm_sconn *sc, const char *why)
{
	if (why)
		mc_warn("closing same-host connection from pid %d: %s", (int)sc->pid, why);
	epoll_ctl(sc->w->epfd, EPOLL_CTL_DEL, sc->fd, NULL);
	close(sc->fd);
	if (sc->pidfd >= 0)
		close(sc->pidfd);
	mc_list_del(&sc->node);
	sc->w->nsconns--;
	if (sc->authing)
		sc->w->nauthing--;
	mc_free(sc->obuf);
	mc_free(sc);
}

static void sconn_set_events(struct shm_sconn *sc)
{
	struct epoll_event ev = {.data.ptr = sc};
	ev.events = (sc->paused ? 0 : EPOLLIN) | (sc->want_out ? EPOLLOUT : 0);
	epoll_ctl(sc->w->epfd, EPOLL_CTL_MOD, sc->fd, &ev);
}

static bool sconn_answer(struct shm_sconn *sc, uint64_t id, uint32_t status)
{
	if (sc->olen + MC_SHM_RESP_LEN > sc->ocap) {
		size_t ncap = sc->ocap ? sc->ocap * 2 : 4096;
		uint8_t *p = mc_realloc(sc->obuf, ncap);
		if (!p)
			return false;
		sc->obuf = p;
		sc->ocap = ncap;
	}
	mc_shm_resp_encode(id, status, sc->obuf + sc->olen);
	sc->olen += MC_SHM_RESP_LEN;
	return true;
}

/* Write pending answers; false if the connection must close. */
static bool sconn_flush(struct shm_sconn *sc)
{
	size_t off = 0;
	bool want_out = false, paused;
	while (off < sc->olen) {
		ssize_t n =
			send(sc->fd, sc->obuf + off, sc->olen - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			want_out = true;
			break;
		}
		return false; /* the initiator is gone */
	}
	if (off && off < sc->olen)
		memmove(sc->obuf, sc->obuf + off, sc->olen - off);
	sc->olen -= off;
	paused = sc->olen >= OBUF_HIGH;
	if (want_out != sc->want_out || paused != sc->paused) {
		sc->want_out = want_out;
		sc->paused = paused;
		sconn_set_events(sc);
	}
	return true;
}

/*
 * Still worth copying for?  Not if the initiator exited (its pidfd polls
 * readable; its pid could be recycled) or closed the connection: an
 * initiator that gave up on a request (i/o timeout) closes the lane and may
 * already reuse its buffer, so requests still queued here must not be
 * executed.  A copy already running is checked again between its pieces
 * (pvm_copy), so the window is one COPY_CHUNK (see docs/design.md).
 */
static bool initiator_waiting(struct shm_sconn *sc)
{
	struct pollfd p[2] = {{.fd = sc->fd, .events = POLLRDHUP},
			      {.fd = sc->pidfd, .events = POLLIN}};
	if (poll(p, sc->pidfd >= 0 ? 2 : 1, 0) < 0)
		return true;
	return !(p[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
	       !(sc->pidfd >= 0 && (p[1].revents & POLLIN));
}

/* process_vm_readv (write: the initiator's bytes at theirs into mine) or
 * process_vm_writev (read) of len bytes; returns the wire status. */
static uint32_t pvm_copy(struct shm_sconn *sc, bool write, char *mine, uint64_t theirs,
			 uint64_t len)
{
	uint64_t done = 0;

	while (done < len) {
		size_t chunk = len - done < COPY_CHUNK ? (size_t)(len - done) : COPY_CHUNK;
		/* Between pieces, a closing transport or an initiator that has
		 * gone ends the copy: nobody waits for the rest of its bytes. */
		if (done && (atomic_load(&sc->w->st->stop) || !initiator_waiting(sc))) {
			mc_debug("same-host copy for pid %d abandoned after %llu of %llu bytes: %s",
				 (int)sc->pid, (unsigned long long)done, (unsigned long long)len,
				 atomic_load(&sc->w->st->stop) ? "closing" : "initiator gone");
			return MC_SHM_ST_FAILED;
		}
		struct iovec m = {mine + done, chunk};
		struct iovec t = {(void *)(uintptr_t)(theirs + done), chunk};
		ssize_t n = write ? process_vm_readv(sc->pid, &m, 1, &t, 1, 0)
				  : process_vm_writev(sc->pid, &m, 1, &t, 1, 0);
		uint32_t st;
		if (n > 0) {
			done += (uint64_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EPERM || errno == ENOSYS))
			st = MC_SHM_ST_NOPERM;
		else if (n < 0 && errno == ESRCH)
			st = MC_SHM_ST_FAILED;
		else
			st = MC_SHM_ST_FAULT;
		mc_debug("same-host copy for pid %d failed after %llu of %llu bytes: %s",
			 (int)sc->pid, (unsigned long long)done, (unsigned long long)len,
			 n < 0 ? strerror(errno) : "no progress");
		return st;
	}
	return MC_SHM_ST_OK;
}

static struct mc_devstage *worker_stage(struct shm_worker *w)
{
	struct shm_transport *st = w->st;
	if (!w->stage_ok) {
		if (mc_devstage_init(&w->stage, st->devmem, 2, st->stage_chunk) != MC_OK) {
			mc_error("same-host worker %u: cannot pin staging buffers: %s", w->index,
				 mc_last_error());
			return NULL;
		}
		w->stage_ok = true;
	}
	return &w->stage;
}

/*
 * The target range is memory of device dev: chunk k moves between the
 * initiator and pinned buffer k % 2 with process_vm_*, while the other
 * buffer is being copied to (write) or from (read) the device.
 */
static uint32_t serve_copy_dev(struct shm_sconn *sc, const struct mc_shm_req *r, int dev)
{
	struct mc_devstage *ds = worker_stage(sc->w);
	char *dptr = (char *)(uintptr_t)r->remote;
	uint32_t st = MC_SHM_ST_OK;
	uint64_t chunk, n;

	if (!ds)
		return MC_SHM_ST_FAILED;
	chunk = ds->chunk;
	n = (r->len + chunk - 1) / chunk;
	if (r->opcode == MC_SHM_OP_WRITE) {
		for (uint64_t k = 0; k < n && st == MC_SHM_ST_OK; k++) {
			unsigned b = (unsigned)(k & 1);
			uint64_t off = k * chunk, len = MC_MIN(chunk, r->len - off);
			char *host = (char *)mc_devstage_host(ds, b);
			if (mc_devstage_wait(ds, b) != MC_OK)
				st = MC_SHM_ST_FAILED;
			else
				st = pvm_copy(sc, true, host, r->local + off, len);
			if (st == MC_SHM_ST_OK &&
			    mc_devstage_copy(ds, b, dev, dptr + off, host, (size_t)len) != MC_OK)
				st = MC_SHM_ST_FAILED;
		}
	} else {
		for (uint64_t k = 0; k < n && k < 2 && st == MC_SHM_ST_OK; k++) {
			uint64_t off = k * chunk;
			if (mc_devstage_copy(ds, (unsigned)k, dev,
					     mc_devstage_host(ds, (unsigned)k), dptr + off,
					     (size_t)MC_MIN(chunk, r->len - off)) != MC_OK)
				st = MC_SHM_ST_FAILED;
		}
		for (uint64_t k = 0; k < n && st == MC_SHM_ST_OK; k++) {
			unsigned b = (unsigned)(k & 1);
			uint64_t off = k * chunk, len = MC_MIN(chunk, r->len - off);
			char *host = (char *)mc_devstage_host(ds, b);
			if (mc_devstage_wait(ds, b) != MC_OK)
				st = MC_SHM_ST_FAILED;
			else
				st = pvm_copy(sc, false, host, r->local + off, len);
			off += 2 * chunk; /* the chunk this buffer takes next */
			if (st == MC_SHM_ST_OK && k + 2 < n &&
			    mc_devstage_copy(ds, b, dev, host, dptr + off,
					     (size_t)MC_MIN(chunk, r->len - off)) != MC_OK)
				st = MC_SHM_ST_FAILED;
		}
	}
	if (mc_devstage_drain(ds) != MC_OK && st == MC_SHM_ST_OK)
		st = MC_SHM_ST_FAILED;
	if (st == MC_SHM_ST_FAILED)
		mc_warn("same-host %s of %llu bytes at 0x%llx (device %d) failed: %s",
			r->opcode == MC_SHM_OP_WRITE ? "write" : "read", (unsigned long long)r->len,
			(unsigned long long)r->remote, dev, mc_last_error());
	return st;
}

/* The registered entry holding r's target range, held; NULL (logged) when
 * the range is not inside registered memory. */
static struct mc_memreg_entry *serve_acquire(struct shm_sconn *sc, const struct mc_shm_req *r)
{
	const char *why;
	struct mc_memreg_entry *e = mc_memreg_acquire(sc->w->st->memreg, r->remote, r->len,
						      r->opcode == MC_SHM_OP_WRITE, &why);
	if (!e)
		mc_info("same-host %s of %llu bytes at 0x%llx from pid %d rejected: %s",
			r->opcode == MC_SHM_OP_WRITE ? "write" : "read", (unsigned long long)r->len,
			(unsigned long long)r->remote, (int)sc->pid, why);
	return e;
}

/* Copy one request whose range e holds; returns the wire status. */
static uint32_t serve_copy(struct shm_sconn *sc, const struct mc_shm_req *r,
			   const struct mc_memreg_entry *e)
{
	if (e->dev >= 0)
		return serve_copy_dev(sc, r, e->dev);
	return pvm_copy(sc, r->opcode == MC_SHM_OP_WRITE, (char *)(uintptr_t)r->remote, r->local,
			r->len);
}

/*
 * A run: consecutive small requests of one direction into host memory,
 * copied by one process_vm_* call with an iovec pair per request, where a
 * call each cost a system call and the kernel's lookup of the initiator's
 * mm per request (a batch of 32 x 4 KiB is 32 requests).  Every range is
 * still checked and held one by one (e[i], NULL: rejected), and the
 * answers leave in request order.  A call that moved less than all the
 * run's bytes is redone request by request, which names the failing one
 * (moving the same bytes again is harmless).  A run holds at most
 * RUN_MAX * RUN_REQ_MAX bytes, under one COPY_CHUNK, so the copy still
 * ends within one piece of the initiator leaving.
 */
struct run {
	size_t n;
	bool write;
	struct mc_shm_req r[RUN_MAX];
	struct mc_memreg_entry *e[RUN_MAX];
};

static void run_copy(struct shm_sconn *sc, struct run *run, uint32_t *st)
{
	struct iovec mine[RUN_MAX], theirs[RUN_MAX];
	uint64_t total = 0;
	size_t k = 0;
	ssize_t n;

	for (size_t i = 0; i < run->n; i++) {
		st[i] = run->e[i] ? MC_SHM_ST_OK : MC_SHM_ST_REJECTED;
		if (!run->e[i])
			continue;
		mine[k] = (struct iovec){(void *)(uintptr_t)run->r[i].remote, run->r[i].len};
		theirs[k] = (struct iovec){(void *)(uintptr_t)run->r[i].local, run->r[i].len};
		total += run->r[i].len;
		k++;
	}
	if (k < 2) {
		n = -1; /* none, or one: pvm_copy below */
	} else {
		do {
			n = run->write ? process_vm_readv(sc->pid, mine, k, theirs, k, 0)
				       : process_vm_writev(sc->pid, mine, k, theirs, k, 0);
		} while (n < 0 && errno == EINTR);
	}
	if (n >= 0 && (uint64_t)n == total)
		return;
	for (size_t i = 0; i < run->n; i++)
		if (run->e[i])
			st[i] = pvm_copy(sc, run->write, (char *)(uintptr_t)run->r[i].remote,
					 run->r[i].local, run->r[i].len);
}

/* Copy the run, release its entries, queue its answers; false if the
 * connection must close (no memory for answers). */
static bool run_flush(struct shm_sconn *sc, struct run *run)
{
	struct mc_memreg *reg = sc->w->st->memreg;
	uint32_t st[RUN_MAX];
	bool ok = true;

	if (!run->n)
		return true;
	run_copy(sc, run, st);
	for (size_t i = 0; i < run->n; i++) {
		if (run->e[i])
			mc_memreg_put(reg, run->e[i]);
		ok = ok && sconn_answer(sc, run->r[i].id, st[i]);
	}
	run->n = 0;
	return ok;
}

static uint32_t serve_hello(struct shm_sconn *sc, const struct mc_shm_req *r)
{
	uint8_t b = 0;
	struct iovec mine = {&b, 1}, theirs = {(void *)(uintptr_t)r->local, 1};
	if (process_vm_readv(sc->pid, &mine, 1, &theirs, 1, 0) == 1)
		return MC_SHM_ST_OK;
	if (errno == EPERM || errno == ENOSYS) {
		mc_info("process_vm_readv from pid %d not permitted (%s): peer will use TCP",
			(int)sc->pid, strerror(errno));
		return MC_SHM_ST_NOPERM;
	}
	return MC_SHM_ST_FAILED;
}

/* One request outside a run (a hello, a large or a device-memory copy);
 * e holds r's range (copies only: NULL there means rejected). */
static bool serve_one(struct shm_sconn *sc, struct mc_shm_req *r, struct mc_memreg_entry *e)
{
	uint32_t st;

	if (r->opcode == MC_SHM_OP_HELLO) {
		st = serve_hello(sc, r);
		if (st == MC_SHM_ST_OK)
			r->id = sc->w->st->nworkers; /* tells the initiator how many lanes pay */
	} else if (!e) {
		st = MC_SHM_ST_REJECTED;
	} else {
		st = serve_copy(sc, r, e);
		mc_memreg_put(sc->w->st->memreg, e);
	}
	return sconn_answer(sc, r->id, st);
}

/* Serve every complete frame in rbuf, small host-memory copies in runs;
 * false if the connection closed. */
static bool sconn_serve(struct shm_sconn *sc)
{
	struct run run;
	size_t off = 0;
	bool alive = initiator_waiting(sc);

	if (!alive) {
		sconn_close(sc, NULL); /* nobody to answer, nothing to copy for */
		return false;
	}
	run.n = 0;
	run.write = false;
	for (; sc->rlen - off >= MC_SHM_REQ_LEN; off += MC_SHM_REQ_LEN) {
		struct mc_shm_req r;
		struct mc_memreg_entry *e = NULL;
		const char *why = NULL;
		bool write;

		if (mc_shm_req_decode(sc->rbuf + off, &r, &why) != MC_OK) {
			run_flush(sc, &run); /* its entries go back; the answers go nowhere */
			sconn_close(sc, why);
			return false;
		}
		write = r.opcode == MC_SHM_OP_WRITE;
		if (run.n &&
		    (run.n == RUN_MAX || run.write != write || r.opcode == MC_SHM_OP_HELLO) &&
		    !run_flush(sc, &run))
			goto nomem;
		if (r.opcode != MC_SHM_OP_HELLO)
			e = serve_acquire(sc, &r);
		if (r.opcode != MC_SHM_OP_HELLO && r.len <= RUN_REQ_MAX && (!e || e->dev < 0)) {
			run.write = run.n ? run.write : write;
			run.r[run.n] = r;
			run.e[run.n++] = e;
			continue;
		}
		if (!run_flush(sc, &run)) { /* in order: what came before first */
			if (e)
				mc_memreg_put(sc->w->st->memreg, e);
			goto nomem;
		}
		if (!serve_one(sc, &r, e))
			goto nomem;
	}
	if (!run_flush(sc, &run))
		goto nomem;
	memmove(sc->rbuf, sc->rbuf + off, sc->rlen - off);
	sc->rlen -= off;
	if (!sconn_flush(sc)) {
		sconn_close(sc, NULL);
		return false;
	}
	return true;
nomem:
	sconn_close(sc, "out of memory for answers");
	return false;
}

/* Move the handshake on; false when the connection was refused (and
 * freed).  Nothing the peer sends before its proof is read as a request. */
static bool sconn_auth(struct shm_sconn *sc)
{
	bool want_out = false;
	enum mc_auth_result r = mc_auth_hs_io(&sc->hs, sc->fd, &want_out);

	if (r == MC_AUTH_FAIL) {
		char peer[32];
		snprintf(peer, sizeof(peer), "pid %d", (int)sc->pid);
		mc_auth_refused("same-host", peer, sc->hs.why);
		sconn_close(sc, NULL);
		return false;
	}
	if (r == MC_AUTH_DONE) {
		sc->authing = false;
		sc->w->nauthing--;
		want_out = false;
	}
	if (want_out != sc->want_out || r == MC_AUTH_DONE) {
		sc->want_out = want_out;
		sconn_set_events(sc);
	}
	return true;
}

static void sconn_readable(struct shm_sconn *sc)
{
	if (sc->authing && (!sconn_auth(sc) || sc->authing))
		return;
	/* frames left over while output was backed up come first */
	if (sc->rlen >= MC_SHM_REQ_LEN && !sconn_serve(sc))
		return;
	for (int round = 0; round < 16 && !sc->paused; round++) {
		ssize_t n = recv(sc->fd, sc->rbuf + sc->rlen, sizeof(sc->rbuf) - sc->rlen, 0);
		if (n == 0) {
			sconn_close(sc, NULL); /* the initiator closed */
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				sconn_close(sc, NULL);
			return;
		}
		sc->rlen += (size_t)n;
		if (!sconn_serve(sc))
			return;
	}
}

static void worker_accept(struct shm_worker *w)
{
	for (;;) {
		struct ucred cred;
		socklen_t clen = sizeof(cred);
		struct epoll_event ev = {.events = EPOLLIN};
		struct shm_sconn *sc;
		int fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			uint64_t now = mc_now_ms();
			enum mc_accept_next next =
				mc_accept_failed(&w->st->accept_guard, errno, now);
			if (next == MC_ACCEPT_AGAIN)
				continue;
			if (next == MC_ACCEPT_PAUSE) {
				/* the backlog waits; worker_main puts lfd back */
				epoll_ctl(w->epfd, EPOLL_CTL_DEL, w->lfd, NULL);
				w->accept_resume_ms = now + MC_ACCEPT_PAUSE_MS;
			}
			return;
		}
		if (w->nsconns >= w->st->max_conns) {
			mc_accept_refused(&w->st->accept_guard, w->nsconns, w->st->max_conns,
					  mc_now_ms());
			close(fd);
			continue;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || cred.pid <= 0) {
			mc_warn("same-host connection without a visible peer pid refused");
			close(fd);
			continue;
		}
		sc = mc_calloc(1, sizeof(*sc));
		if (!sc) {
			close(fd);
			continue;
		}
		sc->kind = EV_SCONN;
		sc->w = w;
		sc->fd = fd;
		sc->pid = cred.pid;
		sc->pidfd = pidfd_open_compat(cred.pid);
		if (w->st->auth) {
			if (mc_auth_hs_init(&sc->hs, w->st->auth, MC_AUTH_SERVER, "te-shm") !=
			    MC_OK) {
				if (sc->pidfd >= 0)
					close(sc->pidfd);
				close(fd);
				mc_free(sc);
				continue;
			}
			sc->authing = true;
			sc->accepted_ms = mc_now_ms();
		}
		ev.data.ptr = sc;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			if (sc->pidfd >= 0)
				close(sc->pidfd);
			close(fd);
			mc_free(sc);
			continue;
		}
		mc_list_add_tail(&w->sconns, &sc->node);
		w->nsconns++;
		if (sc->authing)
			w->nauthing++;
		mc_debug("worker %u: same-host connection from pid %d", w->index, (int)sc->pid);
	}
}

/* A connection must finish the handshake within the i/o timeout of its
 * accept, however its bytes trickle. */
static void expire_handshakes(struct shm_worker *w)
{
	uint64_t now = mc_now_ms();
	struct mc_list *pos, *tmp;
	mc_list_for_each_safe(pos, tmp, &w->sconns) {
		struct shm_sconn *sc = mc_list_entry(pos, struct shm_sconn, node);
		if (sc->authing && now - sc->accepted_ms > (uint64_t)w->st->io_timeout_ms) {
			char peer[32];
			snprintf(peer, sizeof(peer), "pid %d", (int)sc->pid);
			mc_auth_refused("same-host", peer, "authentication not complete in time");
			sconn_close(sc, NULL);
		}
	}
}

static void *worker_main(void *arg)
{
	struct shm_worker *w = arg;
	struct epoll_event evs[64];
	uint64_t spin_until_ns = 0;

	while (!atomic_load(&w->st->stop)) {
		int timeout = -1, n;
		bool spin = busy_spinning(spin_until_ns), worked = false;
		if (w->accept_resume_ms) {
			uint64_t now = mc_now_ms();
			struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &w->listen_kind};
			if (now >= w->accept_resume_ms &&
			    (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->lfd, &lev) == 0 ||
			     errno == EEXIST))
				w->accept_resume_ms = 0;
			else
				timeout = now >= w->accept_resume_ms
						  ? MC_ACCEPT_PAUSE_MS
						  : (int)(w->accept_resume_ms - now);
		}
		if (w->nauthing && (timeout < 0 || timeout > TICK_MS))
			timeout = TICK_MS; /* handshakes have a deadline */
		if (spin)
			timeout = 0;
		n = epoll_wait(w->epfd, evs, MC_ARRAY_SIZE(evs), timeout);
		if (w->nauthing)
			expire_handshakes(w);
		for (int i = 0; i < n; i++) {
			int kind = *(int *)evs[i].data.ptr;
			worked |= kind != EV_WAKE;
			if (kind == EV_LISTEN) {
				worker_accept(w);
			} else if (kind == EV_WAKE) {
				uint64_t v;
				if (read(w->wakefd, &v, sizeof(v)) < 0)
					(void)0;
			} else {
				struct shm_sconn *sc = evs[i].data.ptr;
				/* an earlier event of this round may have freed sc: look it up */
				bool found = false;
				struct mc_list *it;
				mc_list_for_each(it, &w->sconns) {
					if (mc_list_entry(it, struct shm_sconn, node) == sc) {
						found = true;
						break;
					}
				}
				if (!found)
					continue;
				if (sc->authing) {
					sconn_readable(sc); /* EOF and errors fail it there */
					continue;
				}
				if (evs[i].events & (EPOLLERR | EPOLLHUP) &&
				    !(evs[i].events & EPOLLIN)) {
					sconn_close(sc, NULL);
					continue;
				}
				if ((evs[i].events & EPOLLOUT) && !sconn_flush(sc)) {
					sconn_close(sc, NULL);
					continue;
				}
				if (evs[i].events & EPOLLIN ||
				    (!sc->paused && sc->rlen >= MC_SHM_REQ_LEN))
					sconn_readable(sc);
			}
		}
		spin_until_ns = busy_next(w->st, spin_until_ns, spin, worked);
	}
	return NULL;
}

static int worker_start(struct shm_transport *st, struct shm_worker *w, unsigned index)
{
	struct sockaddr_un sa;
	socklen_t alen = ep_addr(st->ep, index, &sa);
	struct epoll_event ev = {.events = EPOLLIN};
	char name[16];

	w->st = st;
	w->index = index;
	w->listen_kind = EV_LISTEN;
	w->wake_kind = EV_WAKE;
	mc_list_init(&w->sconns);
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (w->epfd < 0 || w->wakefd < 0 || w->lfd < 0 || !alen)
		return mc_set_error(MC_ERR_SOCKET, "same-host worker setup: %s", strerror(errno));
	if (bind(w->lfd, (struct sockaddr *)&sa, alen) < 0 || listen(w->lfd, 128) < 0)
		return mc_set_error(MC_ERR_SOCKET, "same-host listener @%s.%u: %s", st->ep, index,
				    strerror(errno));
	ev.data.ptr = &w->listen_kind;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->lfd, &ev) < 0)
		return mc_set_error(MC_ERR_SOCKET, "epoll_ctl: %s", strerror(errno));
	ev.data.ptr = &w->wake_kind;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wakefd, &ev) < 0)
		return mc_set_error(MC_ERR_SOCKET, "epoll_ctl: %s", strerror(errno));
	if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
		return mc_set_error(MC_ERR_INTERNAL, "cannot start a same-host worker");
	w->started = true;
	snprintf(name, sizeof(name), "mc-shm-w%u", index % 1000u); /* fits a thread name */
	pthread_setname_np(w->thread, name);
	return MC_OK;
}

static void worker_stop(struct shm_worker *w)
{
	if (w->started) {
		uint64_t one = 1;
		if (write(w->wakefd, &one, sizeof(one)) < 0)
			(void)0;
		pthread_join(w->thread, NULL);
	}
	while (!mc_list_empty(&w->sconns))
		sconn_close(mc_list_first(&w->sconns, struct shm_sconn, node), NULL);
	if (w->stage_ok)
		mc_devstage_release(&w->stage);
	if (w->lfd >= 0)
		close(w->lfd);
	if (w->wakefd >= 0)
		close(w->wakefd);
	if (w->epfd >= 0)
		close(w->epfd);
}

/* ---- initiator side ------------------------------------------------------------ */

static void peer_off(struct shm_peer *p, const char *why, bool denied);

/* Take every pending slice out of a lane and close it (receiver or close only). */
static void lane_down(struct shm_lane *l, int status, const char *why)
{
	struct shm_transport *st = l->peer->st;
	struct pend *q;
	size_t head, len, cap;
	int fd;

	pthread_mutex_lock(&l->lock);
	fd = l->fd;
	pthread_mutex_unlock(&l->lock);
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR); /* wakes a writer blocked in poll */
	pthread_mutex_lock(&l->send_lock);
	pthread_mutex_lock(&l->lock);
	fd = l->fd;
	l->fd = -1;
	q = l->q;
	head = l->qhead;
	len = l->qlen;
	cap = l->qcap;
	l->q = NULL;
	l->qhead = l->qlen = l->qcap = 0;
	l->rlen = 0;
	pthread_mutex_unlock(&l->lock);
	pthread_mutex_unlock(&l->send_lock);
	if (fd >= 0) {
		epoll_ctl(st->epfd, EPOLL_CTL_DEL, fd, NULL);
		close(fd);
	}
	if (fd >= 0 || len) {
		if (why)
			mc_warn("same-host lane %u to %s down (%s): failing %zu requests", l->index,
				l->peer->ep, why, len);
		atomic_store(&l->peer->failed, true);
	}
	for (size_t i = 0; i < len; i++)
		mc_slice_done(q[(head + i) % cap].s, status);
	mc_free(q);
}

static void lane_complete(struct shm_lane *l, struct mc_slice *s, uint32_t status)
{
	struct shm_transport *st = l->peer->st;
	switch (status) {
	case MC_SHM_ST_OK:
		atomic_fetch_add(&st->n_copied, 1);
		mc_slice_done(s, MC_OK);
		break;
	case MC_SHM_ST_REJECTED:
		mc_slice_done(s, MC_ERR_REMOTE_REJECTED);
		break;
	case MC_SHM_ST_NOPERM:
		/* the kernel changed its mind (or a worker differs): TCP from now on */
		peer_off(l->peer, "process_vm_* not permitted", true);
		atomic_fetch_add(&st->n_fallback, 1);
		mc_transport_submit(st->tcp, l->peer->tcp_peer, &s, 1);
		break;
	case MC_SHM_ST_FAULT:
		mc_slice_done(s, MC_ERR_INVALID_PARAMS);
		break;
	default:
		mc_slice_done(s, MC_ERR_TRANSFER_FAIL);
		break;
	}
}

static void lane_readable(struct shm_lane *l)
{
	for (;;) {
		size_t off = 0;
		ssize_t n;
		int fd;

		pthread_mutex_lock(&l->lock);
		fd = l->fd;
		pthread_mutex_unlock(&l->lock);
		if (fd < 0)
			return;
		n = recv(fd, l->rbuf + l->rlen, sizeof(l->rbuf) - l->rlen, MSG_DONTWAIT);
		if (n == 0) {
			lane_down(l, MC_ERR_CONN_CLOSED, "target closed the connection");
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				lane_down(l, MC_ERR_CONN_CLOSED, strerror(errno));
			return;
		}
		l->rlen += (size_t)n;
		for (; l->rlen - off >= MC_SHM_RESP_LEN; off += MC_SHM_RESP_LEN) {
			uint64_t id;
			uint32_t status;
			struct mc_slice *s = NULL;

			if (mc_shm_resp_decode(l->rbuf + off, &id, &status) != MC_OK) {
				lane_down(l, MC_ERR_PROTOCOL, "malformed answer");
				return;
			}
			pthread_mutex_lock(&l->lock);
			if (l->qlen && l->q[l->qhead].id == id) {
				s = l->q[l->qhead].s;
				l->qhead = (l->qhead + 1) % l->qcap;
				l->qlen--;
				l->progress_ms = mc_now_ms();
			}
			pthread_mutex_unlock(&l->lock);
			if (!s) {
				lane_down(l, MC_ERR_PROTOCOL, "answer to a request never sent");
				return;
			}
			lane_complete(l, s, status);
		}
		memmove(l->rbuf, l->rbuf + off, l->rlen - off);
		l->rlen -= off;
	}
}

static void receiver_tick(struct shm_transport *st)
{
	uint64_t now = mc_now_ms();
	struct mc_list *it;
	pthread_mutex_lock(&st->peers_lock);
	mc_list_for_each(it, &st->peers) {
		struct shm_peer *p = mc_list_entry(it, struct shm_peer, node);
		/* every lane: nlanes may be being set by a connecting submitter */
		for (unsigned i = 0; i < MAX_LANES; i++) {
			struct shm_lane *l = &p->lanes[i];
			bool stuck;
			pthread_mutex_lock(&l->lock);
			stuck = mc_shm_lane_stuck(now, l->progress_ms, l->qlen,
						  (uint64_t)st->io_timeout_ms);
			pthread_mutex_unlock(&l->lock);
			if (stuck)
				lane_down(l, MC_ERR_TIMEOUT, "no progress within the i/o timeout");
		}
	}
	pthread_mutex_unlock(&st->peers_lock);
}

static void *receiver_main(void *arg)
{
	struct shm_transport *st = arg;
	struct epoll_event evs[64];
	uint64_t next_tick = mc_now_ms() + TICK_MS, spin_until_ns = 0;

	while (!atomic_load(&st->stop)) {
		bool spin = busy_spinning(spin_until_ns), worked = false;
		int n = epoll_wait(st->epfd, evs, MC_ARRAY_SIZE(evs), spin ? 0 : TICK_MS);
		for (int i = 0; i < n; i++) {
			if (*(int *)evs[i].data.ptr == EV_WAKE) {
				uint64_t v;
				if (read(st->wakefd, &v, sizeof(v)) < 0)
					(void)0;
				continue;
			}
			lane_readable(evs[i].data.ptr);
			worked = true;
		}
		if (mc_now_ms() >= next_tick) {
			receiver_tick(st);
			next_tick = mc_now_ms() + TICK_MS;
		}
		spin_until_ns = busy_next(st, spin_until_ns, spin, worked);
	}
	return NULL;
}

/* Blocking I/O with a deadline on a non-blocking socket. */
static bool io_full(int fd, void *buf, size_t len, bool out, uint64_t deadline)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n =
			out ? send(fd, (char *)buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT)
			    : recv(fd, (char *)buf + off, len - off, MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n == 0)
			return false;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN};
			uint64_t now = mc_now_ms();
			if (now >= deadline)
				return false;
			if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR)
				return false;
			continue;
		}
		return false;
	}
	return true;
}

/* Connect one lane to the target's worker `worker`, prove the secret
 * when there is one, and say hello.  Returns the fd (nworkers_out set), or
 * -1 with *refused naming why when the target may not copy from us or the
 * handshake failed (neither heals by retrying: TCP then, which names the
 * cause). */
static int lane_connect(struct shm_transport *st, const char *ep, unsigned worker,
			unsigned *nworkers_out, const char **refused)
{
	struct sockaddr_un sa;
	socklen_t alen = ep_addr(ep, worker, &sa);
	uint64_t deadline = mc_now_ms() + (uint64_t)st->connect_timeout_ms;
	struct mc_shm_req hello = {.opcode = MC_SHM_OP_HELLO,
				   .local = (uint64_t)(uintptr_t)&hello_probe,
				   .remote = 0,
				   .len = 1};
	uint8_t req[MC_SHM_REQ_LEN], resp[MC_SHM_RESP_LEN];
	uint64_t id;
	uint32_t status = MC_SHM_ST_FAILED;
	int fd;

	*refused = NULL;
	if (!alen)
		return -1;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, alen) < 0) {
		mc_debug("connect to @%s.%u: %s", ep, worker, strerror(errno));
		close(fd);
		return -1;
	}
	if (st->auth) {
		uint64_t now = mc_now_ms();
		int left = now < deadline ? (int)(deadline - now) : 1;
		if (mc_auth_hs_run(fd, st->auth, MC_AUTH_CLIENT, "te-shm", left) != MC_OK) {
			mc_warn("same-host endpoint @%s.%u: %s", ep, worker, mc_last_error());
			atomic_fetch_add(&mc_auth_refused_total, 1);
			*refused = "authentication failed";
			close(fd);
			return -1;
		}
	}
	mc_shm_req_encode(&hello, req);
	if (!io_full(fd, req, sizeof(req), true, deadline) ||
	    !io_full(fd, resp, sizeof(resp), false, deadline) ||
	    mc_shm_resp_decode(resp, &id, &status) != MC_OK || status != MC_SHM_ST_OK) {
		if (status == MC_SHM_ST_NOPERM)
			*refused = "process_vm_readv not permitted";
		close(fd);
		return -1;
	}
	*nworkers_out = id >= 1 && id <= MC_SHM_MAX_WORKERS ? (unsigned)id : 1;
	return fd;
}

static bool lane_attach(struct shm_transport *st, struct shm_lane *l, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
	pthread_mutex_lock(&l->send_lock);
	pthread_mutex_lock(&l->lock);
	l->fd = fd;
	pthread_mutex_unlock(&l->lock);
	pthread_mutex_unlock(&l->send_lock);
	if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		lane_down(l, MC_ERR_SOCKET, "epoll_ctl");
		return false;
	}
	return true;
}

/* Send the peer's slices to TCP: for good when the kernel refuses the
 * copies, else until a reconnect SHM_RETRY_MS from now succeeds. */
static void peer_off(struct shm_peer *p, const char *why, bool denied)
{
	if (denied)
		atomic_store(&p->denied, true);
	atomic_store(&p->retry_ms, mc_now_ms() + SHM_RETRY_MS);
	if (atomic_exchange(&p->mode, PEER_OFF) != PEER_OFF)
		mc_info("same-host path to %s unavailable (%s); using TCP", p->ep, why);
}

static bool lane_is_up(struct shm_lane *l)
{
	bool up;
	pthread_mutex_lock(&l->lock);
	up = l->fd >= 0;
	pthread_mutex_unlock(&l->lock);
	return up;
}

static bool may_retry(struct shm_peer *p)
{
	return !atomic_load(&p->denied) && mc_now_ms() >= atomic_load(&p->retry_ms);
}

/* First use: connect every lane (lane i to the target's worker i mod its
 * worker count, learnt from the first HELLO).  Under p->lock. */
static void peer_connect_locked(struct shm_transport *st, struct shm_peer *p)
{
	unsigned nw = 1, n;
	const char *refused = NULL;
	int fds[MAX_LANES];

	fds[0] = lane_connect(st, p->ep, 0, &nw, &refused);
	if (fds[0] < 0) {
		peer_off(p, refused ? refused : "cannot connect", refused != NULL);
		return;
	}
	n = st->lanes < nw ? st->lanes : nw;
	if (n < 1)
		n = 1;
	for (unsigned i = 1; i < n; i++) {
		unsigned dummy;
		fds[i] = lane_connect(st, p->ep, i % nw, &dummy, &refused);
		if (fds[i] < 0) {
			while (i-- > 0)
				close(fds[i]);
			peer_off(p, refused ? refused : "cannot connect", refused != NULL);
			return;
		}
	}
	for (unsigned i = 0; i < n; i++)
		lane_attach(st, &p->lanes[i], fds[i]);
	p->nlanes = n; /* set once; readers see it after mode turns UP */
	atomic_store(&p->mode, PEER_UP);
	mc_info("same-host path to %s up: %u lanes", p->ep, n);
}

/* Bring the peer's lanes up if needed; true when the same-host path is usable. */
static bool peer_ready(struct shm_transport *st, struct shm_peer *p)
{
	int mode = atomic_load(&p->mode);
	bool all_up = true;

	if (mode == PEER_UP) {
		for (unsigned i = 0; i < p->nlanes && all_up; i++)
			all_up = lane_is_up(&p->lanes[i]);
		if (all_up)
			return true;
	} else if (mode == PEER_OFF && !may_retry(p)) {
		return false;
	}
	pthread_mutex_lock(&p->lock);
	mode = atomic_load(&p->mode);
	if (mode == PEER_OFF && !may_retry(p))
		goto out;
	if (p->nlanes == 0) {
		peer_connect_locked(st, p);
		goto out;
	}
	/* reconnect the lanes that went down */
	for (unsigned i = 0; i < p->nlanes; i++) {
		struct shm_lane *l = &p->lanes[i];
		unsigned nw = 1;
		const char *refused = NULL;
		int fd;
		if (lane_is_up(l))
			continue;
		fd = lane_connect(st, p->ep, i, &nw, &refused);
		if (fd < 0) {
			peer_off(p, refused ? refused : "reconnect failed", refused != NULL);
			goto out;
		}
		lane_attach(st, l, fd);
	}
	if (atomic_exchange(&p->mode, PEER_UP) != PEER_UP)
		mc_info("same-host path to %s up again", p->ep);
out:
	pthread_mutex_unlock(&p->lock);
	return atomic_load(&p->mode) == PEER_UP;
}

/* Queue and send cnt (<= SEND_BATCH) slices on one lane with one send. */
static void lane_send(struct shm_transport *st, struct shm_lane *l, struct mc_slice **s, size_t cnt)
{
	uint8_t buf[SEND_BATCH * MC_SHM_REQ_LEN];
	int fd;

	pthread_mutex_lock(&l->send_lock);
	pthread_mutex_lock(&l->lock);
	fd = l->fd;
	if (fd >= 0 && l->qlen + cnt > l->qcap) {
		size_t ncap = l->qcap ? l->qcap : 256;
		struct pend *nq;
		while (ncap < l->qlen + cnt)
			ncap *= 2;
		nq = mc_malloc(ncap * sizeof(*nq));
		if (nq) {
			for (size_t i = 0; i < l->qlen; i++)
				nq[i] = l->q[(l->qhead + i) % l->qcap];
			mc_free(l->q);
			l->q = nq;
			l->qhead = 0;
			l->qcap = ncap;
		} else {
			fd = -2;
		}
	}
	if (fd < 0) {
		pthread_mutex_unlock(&l->lock);
		pthread_mutex_unlock(&l->send_lock);
		for (size_t i = 0; i < cnt; i++)
			mc_slice_done(s[i], fd == -2 ? MC_ERR_NOMEM : MC_ERR_CONN_CLOSED);
		return;
	}
	if (l->qlen == 0)
		l->progress_ms = mc_now_ms();
	for (size_t i = 0; i < cnt; i++) {
		struct mc_shm_req r = {
			.opcode = s[i]->opcode == MC_OP_WRITE ? MC_SHM_OP_WRITE : MC_SHM_OP_READ,
			.id = l->next_id++,
			.local = (uint64_t)(uintptr_t)s[i]->local,
			.remote = s[i]->remote_addr,
			.len = s[i]->len,
		};
		mc_shm_req_encode(&r, buf + i * MC_SHM_REQ_LEN);
		l->q[(l->qhead + l->qlen) % l->qcap] = (struct pend){s[i], r.id};
		l->qlen++;
	}
	pthread_mutex_unlock(&l->lock);
	/* from here the receiver may complete them: s[] is not touched again */
	if (!io_full(fd, buf, cnt * MC_SHM_REQ_LEN, true,
		     mc_now_ms() + (uint64_t)st->io_timeout_ms))
		shutdown(fd, SHUT_RDWR); /* the receiver fails what is queued */
	pthread_mutex_unlock(&l->send_lock);
}

/* Checksummed slices go to TCP, whose requests carry the sums (this
 * protocol has no room for them; docs/design.md, "Transfer checksums"):
 * moved to the end of slices and handed over.  Returns how many are left. */
static size_t sum_to_tcp(struct shm_transport *st, struct shm_peer *p, struct mc_slice **slices,
			 size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!slices[i]->checksum) {
			struct mc_slice *t = slices[k];
			slices[k++] = slices[i];
			slices[i] = t;
		}
	}
	if (k == n)
		return n;
	if (!atomic_exchange(&p->sum_said, true))
		mc_info("checksummed transfers to %s go over TCP", p->ep);
	atomic_fetch_add(&st->n_fallback, n - k);
	mc_transport_submit(st->tcp, p->tcp_peer, slices + k, n - k);
	return k;
}

static mc_status shm_submit(struct mc_transport *base, struct mc_peer *peer,
			    struct mc_slice **slices, size_t n)
{
	struct shm_transport *st = to_shm(base);
	struct shm_peer *p = mc_container_of(peer, struct shm_peer, base);
	struct mc_slice *batch[SEND_BATCH];
	unsigned start, nl;

	if (!peer_ready(st, p)) {
		atomic_fetch_add(&st->n_fallback, n);
		return mc_transport_submit(st->tcp, p->tcp_peer, slices, n);
	}
	n = sum_to_tcp(st, p, slices, n);
	if (!n)
		return MC_OK;
	nl = p->nlanes;
	start = atomic_fetch_add(&p->rr, (unsigned)n);
	for (unsigned lane = 0; lane < nl; lane++) {
		size_t m = 0;
		for (size_t i = 0; i < n; i++) {
			if ((start + i) % nl != lane)
				continue;
			batch[m++] = slices[i];
			if (m == SEND_BATCH) {
				lane_send(st, &p->lanes[lane], batch, m);
				m = 0;
			}
		}
		if (m)
			lane_send(st, &p->lanes[lane], batch, m);
	}
	return MC_OK;
}

/* The peer object for a same-host target's endpoint (created on first use,
 * lives as long as the transport).  tcp_peer is where its slices go when
 * the same-host path cannot be used. */
static struct shm_peer *peer_get(struct shm_transport *st, const char *ep, struct mc_peer *tcp_peer)
{
	struct shm_peer *p = NULL;
	struct mc_list *it;

	pthread_mutex_lock(&st->peers_lock);
	mc_list_for_each(it, &st->peers) {
		struct shm_peer *x = mc_list_entry(it, struct shm_peer, node);
		if (x->tcp_peer == tcp_peer && strcmp(x->ep, ep) == 0) {
			p = x;
			break;
		}
	}
	if (!p && (p = mc_calloc(1, sizeof(*p)))) {
		p->base.tp = &st->base;
		p->st = st;
		snprintf(p->ep, sizeof(p->ep), "%s", ep);
		p->tcp_peer = tcp_peer;
		pthread_mutex_init(&p->lock, NULL);
		atomic_init(&p->mode, PEER_NEW);
		for (unsigned i = 0; i < MAX_LANES; i++) {
			struct shm_lane *l = &p->lanes[i];
			l->kind = EV_LANE;
			l->peer = p;
			l->index = i;
			l->fd = -1;
			pthread_mutex_init(&l->send_lock, NULL);
			pthread_mutex_init(&l->lock, NULL);
		}
		mc_list_add_tail(&st->peers, &p->node);
	}
	pthread_mutex_unlock(&st->peers_lock);
	return p;
}

static mc_status shm_peer_open(struct mc_transport *base, const struct mc_seg_desc *d,
			       const char *host, struct mc_peer **out)
{
	struct shm_transport *st = to_shm(base);
	struct mc_peer *tcp_peer;
	struct shm_peer *p;
	mc_status rc;

	if (!d->shm_ep || !*d->shm_ep || strlen(d->shm_ep) > MC_SHM_EP_MAX)
		return MC_ERR_TRANSPORT_UNSUPPORTED;
	rc = mc_transport_peer_open(st->tcp, d, host, &tcp_peer);
	if (rc != MC_OK)
		return rc;
	p = peer_get(st, d->shm_ep, tcp_peer);
	if (!p)
		return MC_ERR_NOMEM;
	*out = &p->base;
	return MC_OK;
}

static bool shm_peer_failed(struct mc_peer *peer)
{
	struct shm_peer *p = mc_container_of(peer, struct shm_peer, base);
	return atomic_load(&p->failed) || mc_peer_failed(p->tcp_peer);
}

static void shm_peer_reset(struct mc_peer *peer)
{
	struct shm_peer *p = mc_container_of(peer, struct shm_peer, base);
	mc_peer_reset(p->tcp_peer);
	atomic_store(&p->failed, false);
}

void mc_shm_stats(struct mc_transport *base, uint64_t *copied_out, uint64_t *fallback_out)
{
	struct shm_transport *st = base ? to_shm(base) : NULL;
	if (copied_out)
		*copied_out = st ? atomic_load(&st->n_copied) : 0;
	if (fallback_out)
		*fallback_out = st ? atomic_load(&st->n_fallback) : 0;
}

/* ---- vtable ------------------------------------------------------------------- */

static unsigned shm_split(struct mc_transport *base, uint64_t len)
{
	struct shm_transport *st = to_shm(base);
	return len >= st->split_size ? st->lanes : 1;
}

static mc_status shm_fill_desc(struct mc_transport *base, struct mc_seg_desc *d)
{
	struct shm_transport *st = to_shm(base);
	mc_free(d->shm_ep);
	d->shm_ep = mc_strdup(st->ep); /* optional: without it peers use TCP */
	return MC_OK;
}

static void shm_close(struct mc_transport *base)
{
	struct shm_transport *st = to_shm(base);
	uint64_t one = 1;

	atomic_store(&st->stop, true);
	if (st->receiver_started) {
		if (write(st->wakefd, &one, sizeof(one)) < 0)
			(void)0;
		pthread_join(st->receiver, NULL);
	}
	for (unsigned i = 0; i < st->nworkers; i++)
		worker_stop(&st->workers[i]);
	while (!mc_list_empty(&st->peers)) {
		struct shm_peer *p = mc_list_first(&st->peers, struct shm_peer, node);
		mc_list_del(&p->node);
		for (unsigned i = 0; i < MAX_LANES; i++) {
			lane_down(&p->lanes[i], MC_ERR_SHUTDOWN, NULL);
			pthread_mutex_destroy(&p->lanes[i].send_lock);
			pthread_mutex_destroy(&p->lanes[i].lock);
		}
		pthread_mutex_destroy(&p->lock);
		mc_free(p);
	}
	if (st->wakefd >= 0)
		close(st->wakefd);
	if (st->epfd >= 0)
		close(st->epfd);
	pthread_mutex_destroy(&st->peers_lock);
	mc_free(st);
}

/* Can this process use process_vm_readv at all (seccomp, ENOSYS)? */
static bool kernel_permits(void)
{
	uint8_t src = 1, dst = 0;
	struct iovec l = {&dst, 1}, r = {&src, 1};
	if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) == 1 && dst == 1)
		return true;
	mc_info("process_vm_readv unavailable (%s): same-host transport off", strerror(errno));
	return false;
}

static mc_status shm_open(const struct mc_transport_env *env, struct mc_transport **out)
{
	struct shm_transport *st;
	struct shm_config cfg;
	struct epoll_event ev = {.events = EPOLLIN};
	uint64_t nonce = 0, tcp_io_ms, tcp_connect_ms;
	int rc;

	mc_config_entry_defaults(shm_config_table, MC_ARRAY_SIZE(shm_config_table), &cfg);
	mc_config_entry_load_env(shm_config_table, MC_ARRAY_SIZE(shm_config_table), &cfg);
	if (cfg.disable || cfg.force_tcp) {
		mc_info("same-host transport off (%s): same-host peers use TCP",
			cfg.force_tcp ? "MC_FORCE_TCP" : "MC_SHM_DISABLE");
		*out = NULL;
		return MC_OK;
	}
	if (!kernel_permits())
		return mc_set_error(MC_ERR_TRANSPORT_UNSUPPORTED,
				    "process_vm_readv is not permitted here");
	mc_tcp_timeouts(env->fallback, &tcp_io_ms, &tcp_connect_ms);
	st = mc_calloc(1, sizeof(*st));
	if (!st)
		return MC_ERR_NOMEM;
	st->base.ops = &mc_shm_transport_ops;
	st->memreg = env->memreg;
	st->devmem = env->devmem;
	st->stage_chunk = env->stage_chunk;
	st->tcp = env->fallback;
	st->auth = mc_auth_on(env->auth) ? env->auth : NULL;
	st->epfd = st->wakefd = -1;
	st->wake_kind = EV_WAKE;
	st->lanes = (unsigned)cfg.lanes;
	st->split_size = cfg.split_size;
	st->io_timeout_ms = cfg.io_timeout_ms ? cfg.io_timeout_ms : (int64_t)tcp_io_ms;
	st->max_conns =
		(unsigned)mc_accept_cap_for_fds("same-host endpoint", (uint64_t)cfg.max_conns, 10);
	mc_accept_guard_init(&st->accept_guard, "same-host endpoint");
	st->connect_timeout_ms = (int64_t)tcp_connect_ms;
	st->busy_poll_ns = (uint64_t)cfg.busy_poll_us * 1000ull;
	pthread_mutex_init(&st->peers_lock, NULL);
	mc_list_init(&st->peers);
	for (unsigned i = 0; i < MC_SHM_MAX_WORKERS; i++)
		st->workers[i].epfd = st->workers[i].wakefd = st->workers[i].lfd = -1;
	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		nonce = mc_now_ns() ^ ((uint64_t)getpid() << 32);
	snprintf(st->ep, sizeof(st->ep), "mooncake-shm.%d.%016llx", (int)getpid(),
		 (unsigned long long)nonce);

	st->epfd = epoll_create1(EPOLL_CLOEXEC);
	st->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ev.data.ptr = &st->wake_kind;
	if (st->epfd < 0 || st->wakefd < 0 ||
	    epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->wakefd, &ev) < 0) {
		rc = mc_set_error(MC_ERR_SOCKET, "same-host transport: %s", strerror(errno));
		goto err;
	}
	if (pthread_create(&st->receiver, NULL, receiver_main, st) != 0) {
		rc = mc_set_error(MC_ERR_INTERNAL, "cannot start the same-host receiver");
		goto err;
	}
	st->receiver_started = true;
	pthread_setname_np(st->receiver, "mc-shm-recv");
	for (unsigned i = 0; i < (unsigned)cfg.workers; i++) {
		rc = worker_start(st, &st->workers[i], i);
		st->nworkers = i + 1; /* stopped by close even if half started */
		if (rc != MC_OK)
			goto err;
	}
	mc_debug("same-host endpoint @%s, %u workers", st->ep, st->nworkers);
	*out = &st->base;
	return MC_OK;
err:
	shm_close(&st->base);
	return rc;
}

const struct mc_transport_ops mc_shm_transport_ops = {
	.name = "shm",
	.caps = {.local = false, .same_host = true, .device_memory = false, .optional = true},
	.config = shm_config_table,
	.nconfig = MC_ARRAY_SIZE(shm_config_table),
	.open = shm_open,
	.close = shm_close,
	.peer_open = shm_peer_open,
	.peer_failed = shm_peer_failed,
	.peer_reset = shm_peer_reset,
	.submit = shm_submit,
	.fill_desc = shm_fill_desc,
	.split = shm_split,
	.data_port = mc_transport_no_data_port,
};

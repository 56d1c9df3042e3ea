/*
 * transport/tcp_int.h - the TCP transport's private structures, shared by
 * its three files:
 *
 *   tcp.c            configuration, the worker loop (epoll, wake-ups, the
 *                    deadline tick), the published paths, open and close,
 *                    the ops table
 *   tcp_initiator.c  the client side: peers, their connections (lanes) and
 *                    paths, submission, sending requests, receiving answers
 *   tcp_target.c     the server side: accepting, parsing requests, checking
 *                    them against registered memory, moving the bytes
 *                    (device memory through pinned buffers), answering
 *
 * Threads and ownership are described atop tcp.c.  Nothing here is for use
 * outside src/transport/tcp*.c.
 */
#ifndef MC_TRANSPORT_TCP_INT_H
#define MC_TRANSPORT_TCP_INT_H

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

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/config.h"
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
#define LONE_TAIL      2048	   /* after a large write: bytes fetched past the next header */
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
	/* the group and lane of the slice dealt last ("Lanes", tcp.c); read
	 * and written apart: a race only places a slice less well */
	_Atomic uint64_t last_group;
	atomic_uint last_lane;
	_Atomic uint64_t last_fill; /* bytes of last_group dealt to last_lane */
	unsigned npaths;	    /* >= 1; paths[0] is host when the target publishes no list */
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
	enum { CONN_DOWN, CONN_CONNECTING, CONN_AUTH, CONN_UP } state;
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
	struct mc_zc zc;      /* v2 write payloads sent by reference */
	bool zc_off;	      /* splicing failed here: copy from now on */
	struct mc_auth_hs hs; /* CONN_AUTH: the handshake (base/auth_hs.h) */
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
	enum { S_AUTH, S_HDR, S_WPAYLOAD, S_CLOSING } state; /* S_AUTH: with a secret, first */
	struct mc_tcp_hdr cur;
	bool cur_v2;
	bool cur_sum;	   /* MC_TCP_OP_SUM: an 8-byte checksum follows the payload */
	uint8_t large_run; /* 2 after a large write, less 1 per other request */
	struct mc_memreg_entry *cur_ent;
	uint64_t cur_done;
	uint8_t *rbuf;
	size_t rpos, rlen;
	/* pending output items, a ring (sconn_push): on every request's path,
	 * and items rather than bytes, so not a struct mc_buf */
	struct out_item *out;
	size_t out_head, out_n, out_cap;
	uint64_t out_bytes;
	size_t reads_pending; /* read-data items in out */
	uint32_t events;
	uint64_t last_progress_ms;
	uint64_t hdr_since_ms; /* a partial header has waited since (tick-grained); 0 = none */
	struct mc_zc zc;       /* read data sent by reference */
	bool zc_off;
	struct tcp_devio *dev; /* staging buffers for device memory, from first use */
	char peer_name[64];
	uint64_t accepted_ms;
	struct mc_auth_hs hs; /* S_AUTH */
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
	atomic_uint nsconns;		/* adopted server connections (mc_tcp_worker_sconns) */
	atomic_uint_fast64_t staged_in; /* write payload bytes copied via rbuf (mc_tcp_staged_in) */
	struct tcp_conn **conns;	/* client conns owned (appended under lock) */
	size_t nconns, conns_cap;
	struct tcp_conn **scan; /* the worker's private copy, for deadline scans */
	size_t nscan, scan_cap;
	uint64_t next_tick_ms;
	uint64_t accept_resume_ms; /* listener out of this worker's epoll until then; 0 = in */
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
	uint64_t lane_fill;
	int64_t busy_poll_us;
	uint64_t zerocopy_min;
	uint64_t sockbuf;
	char *interfaces;
	int64_t path_backoff_ms;
	int64_t max_conns;
	int64_t idle_timeout_ms;
};

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
	atomic_uint next_accept;  /* accepted connections are dealt round-robin */
	atomic_uint nsconns;	  /* server connections open (accepted, not yet freed) */
	unsigned max_conns;	  /* cap on nsconns: more are accepted and closed */
	uint64_t idle_timeout_ms; /* an idle server connection is closed after this; 0 = never */
	struct mc_accept_guard accept_guard;
	const struct mc_auth_secret *auth; /* borrowed from the engine; NULL or off: no handshake */
	bool force_v1;
	uint64_t split_size;
	uint64_t lane_fill; /* a batch's small slices fill a lane this far ("Lanes") */
	uint64_t zc_min;    /* payloads at least this large are spliced; 0: never */
	uint64_t busy_poll_us;
	unsigned conns_per_peer;
	uint64_t io_timeout_ms;
	uint64_t status_timeout_ms; /* a v2 status frame awaited with nothing left to send */
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

/* ---- tcp_initiator.c ---------------------------------------------------------- */

void mc_tcp_fail_list(struct mc_list *l, int status);
void mc_tcp_conn_close_fd(struct tcp_conn *c);
bool mc_tcp_path_usable(const struct tcp_path *pa, uint64_t now);
unsigned mc_tcp_path_pick(const struct tcp_conn *c, unsigned after, bool avoid_after);
void mc_tcp_conn_connect(struct tcp_conn *c);
void mc_tcp_conn_fail(struct tcp_conn *c, int status, const char *why);
void mc_tcp_conn_send(struct tcp_conn *c);
/* Deregistration (mem/memreg.h): c carries a slice over a cut registration;
 * close it and fail its slices (no retry elsewhere). */
bool mc_tcp_conn_uses_cut(struct tcp_conn *c);
void mc_tcp_conn_cut(struct tcp_conn *c);
/* Read what fits into rbuf (compacting it first); also used by the target. */
ssize_t mc_tcp_sock_fill(int fd, uint8_t *rbuf, size_t *rpos, size_t *rlen, size_t max);
/* epoll events of a client connection, on its worker. */
void mc_tcp_conn_event(struct tcp_conn *c, uint32_t events);
void mc_tcp_peer_free(struct tcp_peer *p);
mc_status mc_tcp_peer_open(struct mc_transport *base, const struct mc_seg_desc *d, const char *host,
			   struct mc_peer **out);
bool mc_tcp_peer_failed(struct mc_peer *peer);
void mc_tcp_peer_reset(struct mc_peer *peer);
mc_status mc_tcp_submit(struct mc_transport *base, struct mc_peer *peer, struct mc_slice **slices,
			size_t n);
unsigned mc_tcp_split(struct mc_transport *base, uint64_t len);

/* ---- tcp_target.c ------------------------------------------------------------- */

void mc_tcp_sconn_free(struct tcp_sconn *sc);
/* sc is serving a request on a cut registration (mem/memreg.h). */
bool mc_tcp_sconn_uses_cut(const struct tcp_sconn *sc);
/* Put the listener back into w's epoll once its accept pause is over. */
void mc_tcp_worker_accept_resume(struct tcp_worker *w, uint64_t now);
bool mc_tcp_sconn_flush(struct tcp_sconn *sc);
bool mc_tcp_sconn_readable(struct tcp_sconn *sc);
void mc_tcp_sconn_adopt(struct tcp_sconn *sc);
void mc_tcp_worker_accept(struct tcp_worker *w);

/* ---- tcp.c -------------------------------------------------------------------- */

/* Ring w's eventfd (a submitter, when w sleeps). */
void mc_tcp_worker_wake(struct tcp_worker *w);

#endif

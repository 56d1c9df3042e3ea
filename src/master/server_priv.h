/*
 * master/server_priv.h - what server.c (RPC loop, lifecycle) and
 * server_http.c (admin/metrics pages) share.  Not an interface.
 */
#ifndef MC_MASTER_SERVER_PRIV_H
#define MC_MASTER_SERVER_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/accept.h"
#include "base/auth.h"
#include "base/http.h"
#include "base/list.h"
#include "base/loop.h"
#include "master/master.h"
#include "master/server.h"
#include "master/wal.h"

struct mc_buf;
struct mc_http;
struct mc_http_meta_server;

/* The bounds of master_snapshot_duration_ms (ms; +Inf implied). */
#define MC_MASTER_SNAP_NBOUNDS 11
extern const uint64_t mc_master_snap_bounds[MC_MASTER_SNAP_NBOUNDS];

/*
 * Periodic snapshots (server_snap.c), all under the server's lock (the
 * tick): a forked child writes one, the parent polls it with waitpid.
 */
struct mc_master_snapper {
	bool on;	     /* --enable_snapshot */
	char *dir;	     /* MOONCAKE_SNAPSHOT_LOCAL_PATH or --wal_dir; NULL: none */
	uint64_t every_ms;   /* --snapshot_interval_seconds */
	uint64_t timeout_ms; /* --snapshot_child_timeout_seconds */
	unsigned keep;	     /* --snapshot_retention_count */
	uint64_t next_ms;    /* when the next one is due */
	int child;	     /* its pid; 0: none running */
	uint64_t child_seq;  /* the seq it covers */
	uint64_t child_ms;   /* when it was forked */
	uint64_t last_seq;   /* covered by the newest snapshot (or the one loaded) */
	uint64_t n_ok, n_fail;
	/* master_snapshot_duration_ms: fork to reap of each one written */
	uint64_t dur_counts[MC_MASTER_SNAP_NBOUNDS + 1], dur_sum_ms;
};

/*
 * The HA log stream (server_repl.c; frames in master/repl.h).  Leader:
 * peers and their buffers under the state lock, efd and the counters on
 * the loop thread, acked read by the loop without the lock.  Standby: the
 * stream thread's state.
 */
struct mc_master_repl {
	struct mc_list peers; /* struct mc_repl_peer */
	unsigned next_id;
	int64_t sync_n;		    /* --ha_sync_replicas (-1: 1 when a standby is ready) */
	uint64_t stall_ms;	    /* a standby owing an ACK this long is dropped */
	atomic_uint_fast64_t acked; /* answers given at log seq <= this may leave */
	struct mc_loop_fd efd;	    /* wakes the loop to pump the streams */
	uint64_t n_syncs, n_gone, n_dropped, bytes_sent;
	/* the standby */
	const char *dir;	      /* --wal_dir */
	const char *snap_dir;	      /* mc_master_server_snap_dir */
	enum mc_wal_fsync policy;     /* --wal_fsync */
	struct mc_master_config mcfg; /* fresh tables for a snapshot */
	char *fsdir;		      /* mcfg.fsdir's copy */
	int lock_fd;		      /* flock of <dir>/LOCK: one master per directory */
	int snap_lock_fd;	      /* <snap_dir>/LOCK when another directory; else -1 */
	pthread_t thread;
	/* the thread runs: set by whoever starts it (the starting thread, the
	 * election thread's step-down), taken by whoever stops it (the
	 * take-over thread, the stopping thread): atomic, and exchanged so
	 * one of two stoppers joins */
	atomic_bool thread_on;
	atomic_bool stop;
	atomic_int sfd;		      /* the stream's socket (-1 none), shut to stop */
	atomic_bool synced;	      /* a whole snapshot of the leader was loaded */
	atomic_uint_fast64_t applied; /* the leader's seq applied through */
	atomic_uint_fast64_t view;    /* the view of the leader streamed from */
	/* what the directories held at start, before any leader's snapshot replaced
	 * it (server_ha.c): the view of its last VIEW record and its last seq;
	 * 0 0 once replaced, or when it held nothing */
	atomic_uint_fast64_t dir_view, dir_seq;
};

/* The metrics as of one moment, for rates over a window. */
struct mc_master_server_snap {
	struct mc_master_metrics m;
	uint64_t at_ms;
};

struct mc_master_server {
	/* copies of what the running server needs from the config */
	bool enable_metric_reporting;
	uint64_t busy_poll_us; /* --rpc_busy_poll_us */
	bool tcp_nodelay;
	uint64_t conn_timeout_ms;  /* 0 = none */
	uint64_t max_conns;	   /* RPC connections open at most */
	uint64_t frame_timeout_ms; /* a frame's deadline: this + its size at frame_min_rate */
	uint64_t frame_min_rate;   /* bytes per second */
	size_t max_conn_buffer;	   /* one connection's read buffer at most */
	size_t max_buffered;	   /* all read buffers' growth above RBUF_INIT at most */

	/*
	 * lock: the state mutex.  Protects master, prev_snap and cur_snap.
	 * Taken by the loop thread for each batch of frames, each tick and
	 * each report, and by the HTTP threads for each admin page.  Nothing
	 * that can block (I/O, another lock) is done while holding it.
	 */
	pthread_mutex_t lock;
	struct mc_master *master;
	/* the write-ahead log (NULL: none): committed by every
	 * mc_master_server_unlock.  A failed commit bumps wal_fail_epoch
	 * and leaves in wal_fail_durable the last seq that survived, so a
	 * connection whose reply depends on a lost record is closed
	 * instead of acknowledged (server.c, conn_wal_ok).  Both written
	 * under lock, read by the loop without it (atomics). */
	struct mc_wal *wal;
	uint64_t wal_fail_epoch;
	uint64_t wal_fail_durable;
	/* a commit failed: the tables hold changes the log lacks, so every
	 * request that would change them is refused until a restart
	 * (which goes back to what the log holds); under lock */
	bool wal_broken;
	uint64_t wal_err_ms; /* the last failure logged (one line a second at most) */
	struct mc_master_server_snap prev_snap; /* start of the current 10 s window */
	struct mc_master_snapper snapper;	/* under lock */

	/* RPC loop (owned by the loop thread once started) */
	struct mc_loop *loop;
	struct mc_loop_fd listen;	   /* the RPC listening socket */
	struct mc_loop_timer tick_timer;   /* mc_master_tick, when it asks */
	struct mc_loop_timer idle_timer;   /* every IDLE_SCAN_MS with conn_timeout_ms */
	struct mc_loop_timer report_timer; /* every REPORT_PERIOD_MS */
	struct mc_loop_timer accept_timer; /* resumes accepting after EMFILE/ENFILE */
	struct mc_loop_timer job_timer;	   /* one slice of a regex job per round */
	struct mc_loop_timer sweep_timer;  /* one slice of the unmount sweep per round */
	bool sweep_armed;		   /* sweep_timer is running */
	pthread_t loop_thread;
	bool loop_started;
	struct mc_list conns; /* struct conn, loop thread only */
	struct mc_list jobs;  /* struct conn with a job, in turn order, loop thread only */
	uint64_t nconns;
	size_t rbuf_extra; /* sum of the read buffers' growth (max_buffered) */
	/* requests decode into it (store/proto.h), emptied before each; it
	 * grows to what a frame spilled, up to RPC_ARENA_MAX (server.c) */
	struct mc_store_decode_arena arena;
	/* what the bounds did: the loop counts, /metrics reads (relaxed atomics) */
	atomic_uint_fast64_t n_deadline_cut; /* cut: a partial frame past its deadline */
	atomic_uint_fast64_t n_buffer_cut;   /* cut: rpc_max_buffered_bytes reached */
	atomic_uint_fast64_t n_too_large;    /* a frame refused with TOO_LARGE */
	atomic_uint_fast64_t rbuf_now;	     /* rbuf_extra, for /metrics */
	atomic_uint_fast64_t rbuf_peak;	     /* the most rbuf_extra has been */
	struct mc_accept_guard accept_guard; /* its refused and paused, likewise */

	/*
	 * Mount probes (server_probe.c): a MountSegment or
	 * ReMountSegment with a new segment waits, its connection's later
	 * frames unread, while a probe thread checks that each new segment's
	 * transfer engine answers a Probe; the loop applies or refuses it
	 * when the thread posts its result.  probes is the loop thread's;
	 * probes_done is shared with the probe threads under probe_lock,
	 * a leaf taken alone (never with lock).
	 */
	bool mount_probe;
	uint64_t mount_probe_timeout_ms;
	struct mc_list probes;	     /* struct mount_probe in flight, loop thread only */
	uint64_t nprobes;	     /* its length */
	pthread_mutex_t probe_lock;  /* protects probes_done */
	struct mc_list probes_done;  /* finished, waiting for the loop to collect */
	struct mc_loop_fd probe_efd; /* eventfd: a probe thread finished */

	/* --enable_ha (master/ha.h; NULL: off): fencing asks it on every
	 * request; ha_cfg is the caller's config (it outlives the server),
	 * read by the take-over on the election thread */
	struct mc_master_ha *ha;
	const struct mc_master_server_config *ha_cfg;
	char ha_advertise[300]; /* "host:port" put in the view */
	bool ha_stopping;	/* under lock: no stream thread is started any more */

	struct mc_master_repl repl;

	/* HTTP */
	struct mc_http *admin;		    /* base/http.h */
	struct mc_auth_secret admin_secret; /* POST, PUT, DELETE need it (base/auth.h) */
	/* the cluster secret again, for the RPC port's handshake (base/auth_hs.h),
	 * the standby's stream and the mount probe; loaded at start */
	struct mc_auth_secret rpc_secret;
	struct mc_http_tls admin_tls; /* HTTPS when set (MC_HTTP_TLS_*) */
	struct mc_http_meta_server *meta;

	uint16_t rpc_port, metrics_port, metadata_port;
};

/* Release lock after committing what the master appended to its log while
 * it was held (every unlock of lock goes through here). */
void mc_master_server_unlock(struct mc_master_server *s);

/* server_snap.c.  Where this master's snapshots live: MOONCAKE_SNAPSHOT_LOCAL_PATH
 * when set, else the --wal_dir; NULL: neither.  The one answer for every
 * reader and writer of them: the periodic ones, the start-up load, a
 * standby's copy of its leader's snapshot (server_repl.c) and the HA
 * position of the directory (server_ha.c). */
const char *mc_master_server_snap_dir(const struct mc_master_server_config *cfg);
/* server_snap.c.  Whether the snapshot about to be forked (what names it in
 * the log line) sorts its objects: not when the sort's arrays would take
 * more than a share of the memory the process may still take
 * (mc_master_snap_sort_fits); then one line says so.  Lock held. */
bool mc_master_server_snap_sorted(struct mc_master_server *s, const char *what);
/* server_snap.c.  Before the log is opened: resolve the snapshot directory
 * and, with --enable_snapshot_restore, load the newest valid snapshot into
 * s->master; *after gets the seq it covers (0: none), for mc_wal_open. */
mc_status mc_master_server_snap_init(struct mc_master_server *s,
				     const struct mc_master_server_config *cfg, uint64_t *after);
/* The log is open and replayed (from after). */
void mc_master_server_snap_started(struct mc_master_server *s, uint64_t after, uint64_t now_ms);
/* With lock held and nothing appended since the last commit (the tick's
 * start): reap a finished child (then keep retention_count snapshots and
 * drop the log files the oldest kept covers), kill one past its timeout,
 * fork one when due. */
void mc_master_server_snap_tick(struct mc_master_server *s, uint64_t now_ms);
/* Kill and reap a child still running; free what init made. */
void mc_master_server_snap_stop(struct mc_master_server *s);

/* server_repl.c, the leader: a SYNC on conn (fd) made it a peer, returned
 * (NULL: refused, why says); records of later commits are tapped for it. */
void *mc_master_repl_sync_locked(struct mc_master_server *s, void *conn, int fd, uint64_t now_ms,
				 char *why, size_t why_len);
void mc_master_repl_ack_locked(struct mc_master_server *s, void *peer, uint64_t seq,
			       uint64_t now_ms);
/* conn of peer is closing (peer may be NULL). */
void mc_master_repl_gone_locked(struct mc_master_server *s, void *peer);
/* Reap snapshot senders, BEATs, drop stalled standbys (the tick). */
void mc_master_repl_tick_locked(struct mc_master_server *s, uint64_t now_ms);
/* The log is the leader's now: tap it. */
void mc_master_repl_leader_start_locked(struct mc_master_server *s);
/* The loop's eventfd: move streams into connections, release held answers. */
void mc_master_repl_pump(struct mc_master_server *s);
void mc_master_repl_wake(struct mc_master_server *s);
/* Standbys streaming; the least seq they acknowledged (lock held). */
unsigned mc_master_repl_standbys(struct mc_master_server *s, uint64_t *min_acked);
/* The standby's stream thread; stop returns whether it loaded a snapshot. */
mc_status mc_master_repl_standby_start(struct mc_master_server *s);
bool mc_master_repl_standby_stop(struct mc_master_server *s);
/* server.c: --wal_dir: open the log, replay it into the master (after
 * the snapshot, server_snap.c), log from now on.  Lock held (HA) or
 * before the loop. */
mc_status mc_master_server_wal_open(struct mc_master_server *s,
				    const struct mc_master_server_config *cfg);
/* server_ha.c: --enable_ha: the advertised address (host is the RPC bind
 * address), the directory lock, the election and the standby's stream. */
mc_status mc_master_server_ha_start(struct mc_master_server *s,
				    const struct mc_master_server_config *cfg, const char *host);
/* Delete the snapshot senders' directories a killed leader left in wal_dir. */
void mc_master_repl_clean_dir(const char *wal_dir);
/* Free the peers (their snapshot senders killed) and what init kept. */
void mc_master_repl_release(struct mc_master_server *s);
/* server.c, for server_repl.c (loop thread): queue b on conn and send;
 * close conn with a logged reason; send the answers the ACKs released. */
void mc_master_server_conn_queue(struct mc_master_server *s, void *conn, const struct mc_buf *b);
void mc_master_server_conn_drop(struct mc_master_server *s, void *conn, const char *why);
void mc_master_server_release_held(struct mc_master_server *s);

/* Current metrics with the lock held. */
static inline void mc_master_server_snap_locked(struct mc_master_server *s,
						struct mc_master_server_snap *out, uint64_t now_ms)
{
	mc_master_metrics(s->master, &out->m);
	out->at_ms = now_ms;
}

/* server_http.c */
mc_status mc_master_admin_start(struct mc_master_server *s,
				const struct mc_master_server_config *cfg);
void mc_master_admin_stop(struct mc_master_server *s);
/*
 * The one-line summary of spec 7.1 (/metrics/summary and the periodic
 * log): "role=leader, state=serving, service_ready=true, master={...},
 * ha={...}[, leader=h:p, view_version=n]" (role and state from s->ha).
 * Rates are over [prev, cur].  Returns a malloc'ed string or NULL.  No
 * lock needed: it reads the two snapshots and the election's atomics.
 */
char *mc_master_summary_format(struct mc_master_server *s, const struct mc_master_server_snap *prev,
			       const struct mc_master_server_snap *cur);

#endif

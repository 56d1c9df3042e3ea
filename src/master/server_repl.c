/*
 * master/server_repl.c - the HA log stream (issue 14): standbys hold the
 * leader's tables in memory by streaming its log from it, so a failover
 * reloads nothing, and a put is acknowledged only once enough standbys
 * have it (--ha_sync_replicas).  Frames: master/repl.h.
 *
 * The leader.  A standby connects to the leader's RPC port and sends SYNC
 * with the view it read in the coordinator.  The connection becomes a
 * peer: the loop forks a child that writes a snapshot of the tables as
 * they are at that instant (the seq S the log has reached; fork copies on
 * write, as server_snap.c's periodic snapshots) into <wal_dir>/repl-<n>/,
 * then sends that file over the socket itself as SNAP frames and exits;
 * the leader keeps serving meanwhile.  Every record the log commits after
 * S is tapped (mc_wal_set_tap, under the state lock, whichever thread
 * committed) into the peer's pending buffer as RECS frames.  When the
 * tick reaps the child, SNAP_END(S) goes out, then what is pending, and
 * from then on the records of each commit; an eventfd wakes the loop to
 * move pending bytes into the connection (the loop alone owns
 * connections).  A BEAT a second keeps an idle stream alive.
 *
 * Acknowledgements.  The standby answers ACK(seq) once it has applied and
 * committed records through seq to its own log.  repl.acked is the seq
 * that the N-th best standby has acknowledged (N = --ha_sync_replicas; -1,
 * the default, is 1 when some standby has its snapshot and 0 otherwise),
 * UINT64_MAX when N is 0.  An answer of the serving leader waits in its
 * connection until repl.acked reaches the log seq it was given under
 * (server.c, conn_held): a put is acknowledged only when its record is
 * committed on the leader and received by N standbys.  A standby that
 * leaves an ACK owed for more than one lease TTL is dropped (its
 * connection closed), so in the automatic mode a dead standby stops
 * holding writes; with an explicit N the writes wait until N are back.
 *
 * The standby.  A thread (mc-ha-standby) connects to the leader the view
 * names, sends SYNC and reads the stream with blocking reads.  A whole
 * snapshot (SNAP_END) is checked (mc_snap_decode) before anything changes;
 * then, under the state lock, fresh tables replace the old ones, the
 * standby's own logs and snapshots are deleted, the received snapshot
 * file goes where its own snapshots go (MOONCAKE_SNAPSHOT_LOCAL_PATH, else
 * the --wal_dir: mc_master_server_snap_dir) and a new log starts at S+1.
 * RECS records
 * are checked (mc_wal_decode_rec, seq by seq), applied to the tables and
 * appended to the own log with the same seqs, committed, then ACKed.  A
 * broken stream is reconnected after 200 ms and starts over from a new
 * snapshot; the tables kept meanwhile stay the last consistent prefix.
 * On take-over the thread is stopped and, when it had a snapshot, the
 * tables it holds are the new leader's (server.c, the take-over).
 *
 * Threads: the loop thread (peers, under the state lock for the tables and
 * the peer list); any thread committing the log (the tap, under the state
 * lock); the standby thread (the tables under the state lock).
 */
#define MC_LOG_MODULE "ha"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "master/ha.h"
#include "master/repl.h"
#include "master/server_priv.h"
#include "master/snap.h"
#include "master/wal.h"
#include "store/proto.h"

#define PEND_MAX	 (512u << 20) /* a peer's pending bytes at most; more: dropped */
#define BEAT_MS		 1000
#define RETRY_MS	 200
#define REFUSED_RETRY_MS 500
#define SNAP_SENDER	 4200

struct mc_repl_peer {
	struct mc_list link; /* in s->repl.peers, under the state lock */
	void *conn;	     /* server.c's struct conn */
	unsigned id;
	bool streaming; /* the snapshot is sent, records flow */
	bool drop;	/* to be closed by the loop (why in why) */
	bool dropping;	/* the loop was told */
	int child;	/* the snapshot sender's pid; 0 none */
	uint64_t child_ms;
	uint64_t snap_seq;     /* S */
	struct mc_buf pend;    /* frames not yet in the connection */
	uint64_t sent;	       /* the last seq put in pend */
	uint64_t acked;	       /* the last seq it acknowledged */
	uint64_t owed_ms;      /* since when an ACK is owed (0: none) */
	uint64_t beat_ms;      /* the last BEAT */
	char dir[SNAP_SENDER]; /* <wal_dir>/repl-<id> */
	char why[160];
};

/* ---- frames ---------------------------------------------------------------- */

static void frame(struct mc_buf *b, uint16_t type, uint64_t req_id, const void *p, size_t n)
{
	struct mc_proto_hdr h = {.major = MC_STORE_PROTO_MAJOR,
				 .minor = MC_STORE_PROTO_MINOR,
				 .type = type,
				 .flags = type == MC_REPL_STREAM ? MC_PROTO_F_RESPONSE : 0,
				 .req_id = req_id,
				 .payload_len = (uint32_t)n};
	uint8_t hdr[MC_PROTO_HDR_LEN];

	mc_proto_hdr_encode(&h, hdr);
	mc_buf_append(b, hdr, sizeof(hdr));
	if (n)
		mc_buf_append(b, p, n);
}

static void frame_u64(struct mc_buf *b, uint64_t kind, uint64_t v)
{
	uint8_t p[8];

	mc_put_le64(p, v);
	frame(b, MC_REPL_STREAM, kind, p, sizeof(p));
}

/* Write all of p to a blocking-or-not socket, waiting up to deadline. */
static bool send_all(int fd, const void *p, size_t n, uint64_t deadline_ms)
{
	const uint8_t *q = p;

	while (n) {
		ssize_t k = send(fd, q, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k > 0) {
			q += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			uint64_t now = mc_now_ms();

			if (now >= deadline_ms)
				return false;
			(void)poll(&pf, 1, (int)MC_MIN(deadline_ms - now, (uint64_t)1000));
			continue;
		}
		return false;
	}
	return true;
}

/* ---- the leader ------------------------------------------------------------ */

static int64_t effective_n(const struct mc_master_server *s, unsigned *ready_out)
{
	const struct mc_list *it;
	unsigned ready = 0;

	mc_list_for_each(it, &s->repl.peers) {
		const struct mc_repl_peer *p = mc_list_entry(it, struct mc_repl_peer, link);

		if (p->streaming && !p->drop && p->acked >= p->snap_seq && p->acked)
			ready++;
	}
	*ready_out = ready;
	if (s->repl.sync_n >= 0)
		return s->repl.sync_n;
	return ready ? 1 : 0;
}

/* Recompute repl.acked (lock held) and wake the loop when it moved. */
static void acked_update_locked(struct mc_master_server *s)
{
	uint64_t best[16] = {0}, v;
	unsigned ready;
	int64_t n = effective_n(s, &ready);

	if (n <= 0) {
		v = UINT64_MAX;
	} else {
		/* the n-th largest ACK among live peers (n is small) */
		size_t k = (size_t)MC_MIN(n, (int64_t)MC_ARRAY_SIZE(best));
		struct mc_list *it;

		mc_list_for_each(it, &s->repl.peers) {
			struct mc_repl_peer *p = mc_list_entry(it, struct mc_repl_peer, link);

			uint64_t a = p->streaming && !p->drop ? p->acked : 0;
			for (size_t i = 0; i < k; i++) {
				if (a > best[i]) {
					uint64_t t = best[i];
					best[i] = a;
					a = t;
				}
			}
		}
		v = best[k - 1];
	}
	if (atomic_exchange(&s->repl.acked, v) != v)
		mc_master_repl_wake(s);
}

void mc_master_repl_wake(struct mc_master_server *s)
{
	uint64_t one = 1;

	if (s->repl.efd.fd >= 0 && write(s->repl.efd.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		mc_warn("repl: eventfd: %s", strerror(errno));
}

/* The tap: a commit wrote recs[0..len), seqs up to last (lock held). */
static void tap(void *arg, const uint8_t *recs, size_t len, uint64_t last)
{
	struct mc_master_server *s = arg;
	struct mc_list *it;
	bool any = false;

	(void)last;
	mc_list_for_each(it, &s->repl.peers) {
		struct mc_repl_peer *p = mc_list_entry(it, struct mc_repl_peer, link);

		size_t off = 0, start = 0;
		uint64_t first_seq = 0;

		if (p->drop)
			continue;
		while (off < len) {
			struct mc_wal_rec r;
			size_t used;

			if (mc_wal_decode_rec(recs + off, len - off, &r, &used) != MC_OK)
				break; /* our own bytes: never */
			if (r.seq <= p->snap_seq || r.seq <= p->sent) {
				off += used;
				start = off;
				continue;
			}
			if (!first_seq)
				first_seq = r.seq;
			off += used;
			p->sent = r.seq;
			if (off - start >= MC_REPL_CHUNK || off == len) {
				frame(&p->pend, MC_REPL_STREAM, MC_REPL_RECS, recs + start,
				      off - start);
				start = off;
			}
		}
		if (p->streaming && !p->owed_ms && p->sent > p->acked)
			p->owed_ms = mc_now_ms();
		if (p->pend.err || p->pend.len > PEND_MAX) {
			p->drop = true;
			snprintf(p->why, sizeof(p->why), "its stream fell %zu bytes behind",
				 p->pend.len);
		}
		any = true;
	}
	if (any)
		mc_master_repl_wake(s);
}

void mc_master_repl_leader_start_locked(struct mc_master_server *s)
{
	if (s->wal)
		mc_wal_set_tap(s->wal, tap, s);
	acked_update_locked(s); /* --ha_sync_replicas=N holds answers until N stream */
}

/* The child: dump the tables, then send the file as SNAP frames. */
static void sender_run(struct mc_master_server *s, struct mc_snap_writer *w, int fd, uint64_t seq,
		       const char *dir, uint64_t deadline_ms, bool sorted)
{
	struct mc_buf b;
	char path[SNAP_SENDER + 64];
	uint8_t *chunk = NULL;
	int f;

	if (mc_master_snap_dump(s->master, w, sorted) != MC_OK || mc_snap_writer_finish(w) != MC_OK)
		_exit(1);
	snprintf(path, sizeof(path), "%s/snap-%016" PRIx64 ".snap", dir, seq);
	f = open(path, O_RDONLY | O_CLOEXEC);
	chunk = malloc(MC_REPL_CHUNK);
	if (f < 0 || !chunk)
		_exit(2);
	mc_buf_init(&b);
	for (;;) {
		ssize_t n = read(f, chunk, MC_REPL_CHUNK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			_exit(3);
		if (n == 0)
			break;
		mc_buf_reset(&b);
		frame(&b, MC_REPL_STREAM, MC_REPL_SNAP, chunk, (size_t)n);
		if (b.err || !send_all(fd, b.data, b.len, deadline_ms))
			_exit(4);
	}
	_exit(0);
}

/* Unlink the files of dir whose names keep() accepts. */
static void dir_unlink(const char *dir, bool (*keep)(const char *name))
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[SNAP_SENDER + 300];

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (!keep(e->d_name))
			continue;
		int n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (n < 0 || (size_t)n >= sizeof(path))
			continue; /* not a name this master wrote */
		(void)unlink(path);
	}
	closedir(d);
}

static bool any_file(const char *name)
{
	return name[0] != '.';
}

/* Delete dir (a snapshot sender's) and the files in it. */
static void dir_remove(const char *dir)
{
	dir_unlink(dir, any_file);
	(void)rmdir(dir);
}

static void peer_cleanup_files(struct mc_repl_peer *p)
{
	dir_remove(p->dir);
}

void mc_master_repl_clean_dir(const char *wal_dir)
{
	DIR *d = opendir(wal_dir);
	struct dirent *e;
	char path[SNAP_SENDER + 300];

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "repl-", 5) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", wal_dir, e->d_name);
		dir_remove(path);
	}
	closedir(d);
}

void *mc_master_repl_sync_locked(struct mc_master_server *s, void *conn, int fd, uint64_t now_ms,
				 char *why, size_t why_len)
{
	struct mc_repl_peer *p;
	struct mc_snap_writer *w;
	uint64_t seq;
	bool sorted;
	pid_t pid;

	if (!s->wal) {
		snprintf(why, why_len, "the leader has no log (--wal_dir)");
		return NULL;
	}
	p = mc_calloc(1, sizeof(*p));
	if (!p) {
		snprintf(why, why_len, "out of memory");
		return NULL;
	}
	p->conn = conn;
	p->id = ++s->repl.next_id;
	mc_buf_init(&p->pend);
	snprintf(p->dir, sizeof(p->dir), "%s/repl-%u", s->repl.dir, p->id);
	/* the tables as the loop has them now, appended records included:
	 * S is the last seq appended, and the tap sends only what follows */
	seq = mc_wal_last_seq(s->wal);
	if (mc_snap_writer_open(p->dir, seq, &w) != MC_OK) {
		snprintf(why, why_len, "cannot start a snapshot for it: %s", mc_last_error());
		mc_free(p);
		return NULL;
	}
	sorted = mc_master_server_snap_sorted(s, "a standby's snapshot");
	pid = fork();
	if (pid == 0) /* no return */
		sender_run(s, w, fd, seq, p->dir, now_ms + s->snapper.timeout_ms, sorted);
	mc_snap_writer_free(w);
	if (pid < 0) {
		snprintf(why, why_len, "fork: %s", strerror(errno));
		peer_cleanup_files(p);
		mc_free(p);
		return NULL;
	}
	p->child = pid;
	p->child_ms = now_ms;
	p->snap_seq = seq;
	p->sent = seq;
	mc_list_add_tail(&s->repl.peers, &p->link);
	s->repl.n_syncs++;
	mc_info("repl: a standby joins: sending it a snapshot of seq %" PRIu64 " (sender pid %d)",
		seq, (int)pid);
	return p;
}

static void peer_free(struct mc_master_server *s, struct mc_repl_peer *p)
{
	int wst;

	if (p->child) {
		(void)kill(p->child, SIGKILL);
		(void)waitpid(p->child, &wst, 0);
	}
	peer_cleanup_files(p);
	mc_list_del(&p->link);
	mc_buf_release(&p->pend);
	mc_free(p);
	acked_update_locked(s);
}

void mc_master_repl_gone_locked(struct mc_master_server *s, void *peer)
{
	struct mc_repl_peer *p = peer;

	if (!p)
		return;
	mc_info("repl: standby stream %u closed (acknowledged seq %" PRIu64 ")", p->id, p->acked);
	s->repl.n_gone++;
	peer_free(s, p);
}

void mc_master_repl_ack_locked(struct mc_master_server *s, void *peer, uint64_t seq,
			       uint64_t now_ms)
{
	struct mc_repl_peer *p = peer;

	if (seq > p->sent)
		seq = p->sent; /* never more than was sent */
	if (seq > p->acked)
		p->acked = seq;
	(void)now_ms;
	p->owed_ms = p->acked < p->sent ? mc_now_ms() : 0; /* one clock with the tap's */
	acked_update_locked(s);
}

void mc_master_repl_tick_locked(struct mc_master_server *s, uint64_t now_ms)
{
	struct mc_list *it;

	mc_list_for_each(it, &s->repl.peers) {
		struct mc_repl_peer *p = mc_list_entry(it, struct mc_repl_peer, link);

		if (p->child) {
			int wst;
			pid_t r = waitpid(p->child, &wst, WNOHANG);

			if (r == 0 && now_ms - p->child_ms >= s->snapper.timeout_ms) {
				(void)kill(p->child, SIGKILL);
				(void)waitpid(p->child, &wst, 0);
				r = p->child;
				wst = -1;
			}
			if (r == 0)
				continue;
			p->child = 0;
			peer_cleanup_files(p);
			if (r < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
				p->drop = true;
				snprintf(p->why, sizeof(p->why),
					 "its snapshot could not be sent (status %d)", wst);
				continue;
			}
			/* SNAP_END before the records that waited for it */
			{
				struct mc_buf b;

				mc_buf_init(&b);
				frame_u64(&b, MC_REPL_SNAP_END, p->snap_seq);
				if (p->pend.len)
					mc_buf_append(&b, p->pend.data, p->pend.len);
				mc_buf_release(&p->pend);
				p->pend = b;
			}
			p->streaming = true;
			p->beat_ms = now_ms;
			p->owed_ms = mc_now_ms();
			mc_info("repl: standby stream %u: snapshot of seq %" PRIu64
				" sent in %" PRIu64 " ms",
				p->id, p->snap_seq, now_ms - p->child_ms);
			mc_master_repl_wake(s);
			continue;
		}
		if (!p->streaming || p->drop)
			continue;
		/* owed_ms is on mc_now_ms (the tap's clock), which may run ahead
		 * of the loop's cached now_ms */
		if (p->owed_ms && mc_now_ms() > p->owed_ms + s->repl.stall_ms) {
			p->drop = true;
			snprintf(p->why, sizeof(p->why),
				 "it acknowledged nothing for %" PRIu64 " ms (seq %" PRIu64
				 " of %" PRIu64 ")",
				 mc_now_ms() - p->owed_ms, p->acked, p->sent);
			acked_update_locked(s);
			mc_master_repl_wake(s);
			continue;
		}
		if (now_ms - p->beat_ms >= BEAT_MS) {
			p->beat_ms = now_ms;
			frame_u64(&p->pend, MC_REPL_BEAT, p->sent);
			mc_master_repl_wake(s);
		}
	}
}

/* Loop thread: move pending bytes into the connections, drop the peers
 * marked, then let held answers go (server.c). */
void mc_master_repl_pump(struct mc_master_server *s)
{
	struct out {
		void *conn;
		struct mc_buf b;
		bool drop;
		char why[160];
	} *outs = NULL;
	size_t n = 0, cap = 0;
	struct mc_list *it;

	pthread_mutex_lock(&s->lock);
	mc_list_for_each(it, &s->repl.peers) {
		struct mc_repl_peer *p = mc_list_entry(it, struct mc_repl_peer, link);

		if (p->dropping || !(p->drop || (p->streaming && p->pend.len)))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			struct out *o = mc_realloc(outs, nc * sizeof(*o));
			if (!o)
				break;
			outs = o;
			cap = nc;
		}
		outs[n].conn = p->conn;
		outs[n].drop = p->drop;
		if (p->drop) {
			s->repl.n_dropped++;
			p->dropping = true;
		} else
			s->repl.bytes_sent += p->pend.len;
		snprintf(outs[n].why, sizeof(outs[n].why), "%s", p->why);
		mc_buf_init(&outs[n].b);
		if (!p->drop) {
			outs[n].b = p->pend;
			mc_buf_init(&p->pend);
		}
		n++;
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		if (outs[i].drop)
			mc_master_server_conn_drop(s, outs[i].conn, outs[i].why);
		else
			mc_master_server_conn_queue(s, outs[i].conn, &outs[i].b);
		mc_buf_release(&outs[i].b);
	}
	mc_free(outs);
	mc_master_server_release_held(s);
}

unsigned mc_master_repl_standbys(struct mc_master_server *s, uint64_t *min_acked)
{
	unsigned n = 0;
	uint64_t lo = UINT64_MAX;

	struct mc_list *it;

	mc_list_for_each(it, &s->repl.peers) {
		struct mc_repl_peer *p = mc_list_entry(it, struct mc_repl_peer, link);

		if (!p->streaming || p->drop)
			continue;
		n++;
		lo = MC_MIN(lo, p->acked);
	}
	*min_acked = n ? lo : 0;
	return n;
}

/* ---- the standby ------------------------------------------------------------ */

struct standby_conn {
	int fd;
	struct mc_buf snap; /* SNAP bytes since the last SNAP_END */
};

static bool read_full(int fd, void *p, size_t n)
{
	uint8_t *q = p;

	while (n) {
		ssize_t k = recv(fd, q, n, 0);

		if (k > 0) {
			q += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		return false; /* closed, error or SO_RCVTIMEO */
	}
	return true;
}

struct snap_fill {
	struct mc_master *m;
	uint64_t now_ms;
};

static mc_status snap_fill(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	struct snap_fill *x = arg;

	return mc_master_wal_replay(x->m, type, p, len, x->now_ms);
}

static bool is_log(const char *name)
{
	size_t l = strlen(name);

	return strncmp(name, "wal-", 4) == 0 && l > 4 && strcmp(name + l - 4, ".log") == 0;
}

static bool is_snapshot(const char *name)
{
	return strncmp(name, "snap-", 5) == 0;
}

/* Delete the own logs and snapshots (also damaged and partial ones): the
 * leader's state replaces them.  An older snapshot left in the snapshot
 * directory would be loaded after a restart under a log it does not
 * continue. */
static void own_dir_clear(struct mc_master_server *s)
{
	dir_unlink(s->repl.dir, is_log);
	dir_unlink(s->repl.snap_dir, is_snapshot);
}

static mc_status write_file(const char *dir, uint64_t seq, const uint8_t *p, size_t n)
{
	char tmp[SNAP_SENDER + 64], fin[SNAP_SENDER + 64];
	int fd, dfd;
	size_t done = 0;

	(void)mkdir(dir, 0755);
	snprintf(tmp, sizeof(tmp), "%s/snap-%016" PRIx64 ".tmp", dir, seq);
	snprintf(fin, sizeof(fin), "%s/snap-%016" PRIx64 ".snap", dir, seq);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "%s: %s", tmp, strerror(errno));
	while (done < n) {
		ssize_t k = write(fd, p + done, n - done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			close(fd);
			(void)unlink(tmp);
			return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "%s: %s", tmp,
					    k < 0 ? strerror(errno) : "short write");
		}
		done += (size_t)k;
	}
	if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, fin) != 0) {
		(void)unlink(tmp);
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "%s: %s", fin, strerror(errno));
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	return MC_OK;
}

/* A whole snapshot arrived: it becomes the tables and the own log's base. */
static mc_status apply_snapshot(struct mc_master_server *s, const uint8_t *p, size_t n,
				uint64_t seq, uint64_t view)
{
	struct snap_fill x = {NULL, mc_now_ms()};
	struct mc_master *fresh, *old;
	struct mc_wal *w = NULL, *oldw;
	uint64_t got = 0, entries = 0;
	mc_status st;

	/* whole, before anything changes */
	st = mc_snap_decode_n(p, n, &got, &entries, NULL, NULL);
	if (st != MC_OK)
		return mc_set_error(st, "the leader's snapshot: %s", mc_last_error());
	if (got != seq)
		return mc_set_error(MC_ERR_PROTOCOL,
				    "the leader's snapshot covers seq %" PRIu64
				    ", SNAP_END says %" PRIu64,
				    got, seq);
	st = mc_master_new(&s->repl.mcfg, &fresh);
	if (st != MC_OK)
		return st;
	x.m = fresh;
	mc_master_snap_load_begin(fresh, entries);
	st = mc_snap_decode(p, n, NULL, snap_fill, &x);
	mc_master_snap_load_end(fresh);
	if (st != MC_OK) {
		mc_master_free(fresh);
		return mc_set_error(st, "applying the leader's snapshot: %s", mc_last_error());
	}
	/* the own directory: the old log goes, the snapshot is its new base */
	pthread_mutex_lock(&s->lock);
	oldw = s->wal;
	s->wal = NULL;
	pthread_mutex_unlock(&s->lock);
	if (oldw)
		(void)mc_wal_close(oldw);
	{
		/* what the directory held at start (a cluster restarted whole)
		 * goes: the leader's tables hold what the election chose */
		uint64_t dv = atomic_exchange(&s->repl.dir_view, 0);
		uint64_t ds = atomic_exchange(&s->repl.dir_seq, 0);

		if (ds > seq)
			mc_warn("repl: --wal_dir %s held records through seq %" PRIu64
				" (view %" PRIu64 ") past the leader's snapshot (seq %" PRIu64
				", view %" PRIu64 "): seqs %" PRIu64 "..%" PRIu64
				" are discarded, the leader's tables replace them",
				s->repl.dir, ds, dv, seq, view, seq + 1, ds);
		else if (ds)
			mc_info("repl: --wal_dir %s (view %" PRIu64 " through seq %" PRIu64
				") is replaced by the leader's snapshot (seq %" PRIu64
				", view %" PRIu64 ")",
				s->repl.dir, dv, ds, seq, view);
	}
	own_dir_clear(s);
	/* where its own snapshots go (mc_master_server_snap_dir): the take-over
	 * and a restart load it from there, then the log after it */
	st = write_file(s->repl.snap_dir, seq, p, n);
	if (st == MC_OK)
		st = mc_wal_open(s->repl.dir, s->repl.policy, seq, NULL, NULL, &w, NULL);
	if (st != MC_OK) {
		mc_master_free(fresh);
		return mc_set_error(st, "the standby's --wal_dir %s (snapshots in %s): %s",
				    s->repl.dir, s->repl.snap_dir, mc_last_error());
	}
	pthread_mutex_lock(&s->lock);
	old = s->master;
	s->master = fresh;
	s->wal = w;
	mc_master_server_unlock(s);
	mc_master_free(old);
	atomic_store(&s->repl.applied, seq);
	atomic_store(&s->repl.view, view);
	atomic_store(&s->repl.synced, true);
	return MC_OK;
}

static mc_status apply_records(struct mc_master_server *s, const uint8_t *p, size_t n)
{
	uint64_t now = mc_now_ms(), want = atomic_load(&s->repl.applied) + 1;
	mc_status st = MC_OK;
	size_t off = 0;

	pthread_mutex_lock(&s->lock);
	while (off < n) {
		struct mc_wal_rec r;
		size_t used;
		uint64_t mine = 0;

		st = mc_wal_decode_rec(p + off, n - off, &r, &used);
		if (st != MC_OK) {
			st = mc_set_error(st == MC_INPROGRESS ? MC_ERR_PROTOCOL : st,
					  "a record from the leader: %s",
					  st == MC_INPROGRESS ? "cut short" : mc_last_error());
			break;
		}
		if (r.seq != want) {
			st = mc_set_error(MC_ERR_PROTOCOL,
					  "the leader sent record %" PRIu64 ", %" PRIu64
					  " was next",
					  r.seq, want);
			break;
		}
		st = mc_master_wal_replay(s->master, r.type, r.payload, r.len, now);
		if (st == MC_OK)
			st = mc_wal_append(s->wal, r.type, r.payload, r.len, &mine);
		if (st == MC_OK && mine != r.seq)
			st = mc_set_error(MC_ERR_INTERNAL,
					  "the own log is at %" PRIu64
					  ", the leader's record %" PRIu64,
					  mine, r.seq);
		if (st != MC_OK)
			break;
		want++;
		off += used;
	}
	/* the unlock commits what was appended */
	mc_master_server_unlock(s);
	if (st == MC_OK && s->wal_broken)
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "the standby's log cannot be written");
	if (want > atomic_load(&s->repl.applied) + 1)
		atomic_store(&s->repl.applied, want - 1);
	return st;
}

/* One stream from the leader at host:port under view; returns when it
 * ends, true when the leader refused it (not serving yet: warming up). */
static bool stream_once(struct mc_master_server *s, const char *host, uint16_t port, uint64_t view)
{
	bool refused = false;
	struct mc_buf out, snap;
	uint8_t hdrb[MC_PROTO_HDR_LEN], *payload = NULL;
	struct timeval tv;
	int fd;
	mc_status st = MC_OK;

	fd = mc_sock_connect(host, port, 1000, false);
	if (fd < 0)
		return false;
	if (mc_auth_on(&s->rpc_secret) &&
	    mc_auth_hs_run(fd, &s->rpc_secret, MC_AUTH_CLIENT, "master", 2000) != MC_OK) {
		mc_warn("repl: leader %s:%u: %s", host, port, mc_last_error());
		close(fd);
		return false;
	}
	/* a leader that sends nothing (not even a BEAT) for a lease is gone */
	tv.tv_sec = (time_t)MC_MAX(s->repl.stall_ms / 1000, (uint64_t)1);
	tv.tv_usec = 0;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	atomic_store(&s->repl.sfd, fd);
	mc_buf_init(&out);
	mc_buf_init(&snap);
	frame(&out, MC_REPL_SYNC, view, NULL, 0);
	if (out.err || !send_all(fd, out.data, out.len, mc_now_ms() + 2000))
		goto out;
	while (!atomic_load(&s->repl.stop)) {
		struct mc_proto_hdr h;

		if (!read_full(fd, hdrb, sizeof(hdrb)))
			break;
		st = mc_proto_hdr_decode(hdrb, MC_PROTO_MAX_PAYLOAD, &h);
		if (st != MC_OK)
			break;
		mc_free(payload);
		payload = h.payload_len ? mc_malloc(h.payload_len) : NULL;
		if ((h.payload_len && !payload) || !read_full(fd, payload, h.payload_len))
			break;
		if (h.type != MC_REPL_STREAM) {
			/* the leader refused the SYNC: an error frame of its type */
			mc_debug("repl: %s:%u refused the stream (status %d)", host, port,
				 h.status);
			refused = true;
			break;
		}
		if (h.req_id == MC_REPL_SNAP) {
			mc_buf_append(&snap, payload, h.payload_len);
			if (snap.err)
				break;
			continue;
		}
		if ((h.req_id == MC_REPL_SNAP_END || h.req_id == MC_REPL_BEAT) &&
		    h.payload_len != 8)
			break;
		if (h.req_id == MC_REPL_SNAP_END) {
			uint64_t t0 = mc_now_ms();

			st = apply_snapshot(s, snap.data, snap.len, mc_get_le64(payload), view);
			if (st != MC_OK) {
				mc_error("repl: %s", mc_last_error());
				break;
			}
			mc_info("repl: following %s:%u (view %" PRIu64 "): snapshot of seq %" PRIu64
				" (%zu bytes) loaded in %" PRIu64 " ms",
				host, port, view, mc_get_le64(payload), snap.len, mc_now_ms() - t0);
			mc_buf_release(&snap);
			mc_buf_init(&snap);
		} else if (h.req_id == MC_REPL_RECS) {
			if (!atomic_load(&s->repl.synced) || !s->wal) {
				mc_error("repl: records before any snapshot");
				break;
			}
			st = apply_records(s, payload, h.payload_len);
			if (st != MC_OK) {
				mc_error("repl: %s", mc_last_error());
				break;
			}
		} else if (h.req_id != MC_REPL_BEAT) {
			mc_warn("repl: unknown stream kind %" PRIu64, h.req_id);
			break;
		}
		if (h.req_id == MC_REPL_BEAT && !atomic_load(&s->repl.synced))
			continue;
		mc_buf_reset(&out);
		frame(&out, MC_REPL_ACK, atomic_load(&s->repl.applied), NULL, 0);
		if (out.err || !send_all(fd, out.data, out.len, mc_now_ms() + 2000))
			break;
	}
out:
	atomic_store(&s->repl.sfd, -1);
	close(fd);
	mc_free(payload);
	mc_buf_release(&out);
	mc_buf_release(&snap);
	return refused;
}

static void *standby_main(void *arg)
{
	struct mc_master_server *s = arg;

	while (!atomic_load(&s->repl.stop)) {
		struct mc_master_ha_info i;
		char host[256];
		uint16_t port;

		int pause = RETRY_MS;

		mc_master_ha_info(s->ha, &i);
		if (i.leader_known && !i.leader && strcmp(i.leader_addr, s->ha_advertise) != 0 &&
		    mc_sock_split_hostport(i.leader_addr, host, sizeof(host), &port, 0) && port) {
			if (stream_once(s, host, port, i.view_version))
				pause = REFUSED_RETRY_MS; /* a leader warming up */
			else if (!atomic_load(&s->repl.stop) && atomic_load(&s->repl.synced))
				/* no stream, or it ended: is the leader gone?  (ha.c;
				 * only a standby that holds the leader's tables
				 * hurries to replace it) */
				mc_master_ha_leader_lost(s->ha);
		}
		for (int k = 0; k < pause / 20 && !atomic_load(&s->repl.stop); k++)
			usleep(20 * 1000);
	}
	return NULL;
}

mc_status mc_master_repl_standby_start(struct mc_master_server *s)
{
	atomic_store(&s->repl.stop, false);
	if (pthread_create(&s->repl.thread, NULL, standby_main, s) != 0)
		return mc_set_error(MC_ERR_INTERNAL, "HA: cannot start the standby stream thread");
	pthread_setname_np(s->repl.thread, "mc-ha-standby");
	atomic_store_explicit(&s->repl.thread_on, true, memory_order_release);
	return MC_OK;
}

bool mc_master_repl_standby_stop(struct mc_master_server *s)
{
	int fd;

	if (atomic_exchange_explicit(&s->repl.thread_on, false, memory_order_acq_rel)) {
		atomic_store(&s->repl.stop, true);
		fd = atomic_load(&s->repl.sfd);
		if (fd >= 0)
			(void)shutdown(fd, SHUT_RDWR);
		pthread_join(s->repl.thread, NULL);
	}
	return atomic_load(&s->repl.synced);
}

void mc_master_repl_release(struct mc_master_server *s)
{
	while (!mc_list_empty(&s->repl.peers))
		peer_free(s, mc_list_first(&s->repl.peers, struct mc_repl_peer, link));
	mc_free(s->repl.fsdir);
	s->repl.fsdir = NULL;
}

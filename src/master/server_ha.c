/*
 * master/server_ha.c - the daemon's side of --enable_ha: starting the
 * election (master/ha.c) and the standby's log stream (server_repl.c), and
 * the two hooks the election thread calls: the take-over (make the tables
 * current, then serve) and the step-down (stop writing, become a standby
 * that streams the new leader's log).  docs/design.md, "Master: high
 * availability" and "Master: the log stream".
 *
 * Threads: the hooks run on the election's threads and take the server's
 * state lock themselves; mc_master_server_ha_start runs on the starting
 * thread before the loop.
 */
#define MC_LOG_MODULE "master"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "master/ha.h"
#include "master/server_priv.h"
#include "master/snap.h"
#include "master/wal.h"
#include "master/wal_rec.h"

/* ---- HA hooks (master/ha.c calls these on its thread) ---------------------- */

/*
 * This master won the election and warmed up: make its tables current.
 * A standby that loaded the leader's snapshot and streamed its log since
 * (server_repl.c) already holds them, and its own log continues the
 * leader's seqs: it stops the stream and serves what it has (segments
 * wait for their clients to remount from now, as after a restart).  One
 * that never loaded a snapshot (the first master of a cluster, or every
 * master restarted) recovers from its own --wal_dir as a restarted master
 * does, its snapshot always restored.  Then a VIEW record marks every
 * later record as this leader's and the log is tapped for the standbys
 * that will stream from it.
 */
static mc_status mc_master_ha_take_over(void *arg, uint64_t view_version)
{
	struct mc_master_server *s = arg;
	uint64_t t0 = mc_now_ms();
	bool synced = mc_master_repl_standby_stop(s);
	mc_status st = MC_OK;

	pthread_mutex_lock(&s->lock);
	if (synced && s->wal) {
		struct mc_master_server_config c = *s->ha_cfg;
		uint64_t after = 0;

		mc_master_wal_rewait(s->master, mc_now_ms());
		c.enable_snapshot_restore = false; /* the tables are here: only set it up */
		st = mc_master_server_snap_init(s, &c, &after);
		if (st == MC_OK) {
			mc_master_set_wal(s->master, s->wal);
			mc_master_server_snap_started(s, mc_wal_last_seq(s->wal), mc_now_ms());
		}
	} else {
		if (s->wal) {
			(void)mc_wal_close(s->wal);
			s->wal = NULL;
		}
		if (synced || atomic_load(&s->repl.applied)) {
			/* a half-loaded stream's tables: start them again from the log */
			struct mc_master *fresh;
			st = mc_master_new(&s->repl.mcfg, &fresh);
			if (st == MC_OK) {
				mc_master_free(s->master);
				s->master = fresh;
			}
		}
		if (st == MC_OK) {
			struct mc_master_server_config c = *s->ha_cfg;

			/* a standby's directory starts with its leader's snapshot
			 * (server_repl.c): without it the log cannot be read */
			c.enable_snapshot_restore = true;
			st = mc_master_server_wal_open(s, &c);
		}
	}
	/* the directory is this leader's log now, not a position to post */
	atomic_store(&s->repl.dir_view, 0);
	atomic_store(&s->repl.dir_seq, 0);
	if (st == MC_OK) {
		/* readers may hold leases of the old leader: honour them */
		mc_master_lease_all(s->master, mc_now_ms());
		mc_master_wal_view(s->master, view_version, s->ha_advertise);
		mc_master_repl_leader_start_locked(s);
	}
	mc_master_server_unlock(s);
	if (st == MC_OK)
		mc_info("ha: took over as view %" PRIu64 " in %" PRIu64
			" ms (tables %s, log at seq %" PRIu64 ")",
			view_version, mc_now_ms() - t0,
			synced ? "streamed from the old leader" : "recovered from --wal_dir",
			mc_wal_last_seq(s->wal));
	return st;
}

/* The leader lost its lease: stop writing anything another master may read
 * (the log in a shared --wal_dir, snapshots).  Requests are already refused. */
static void mc_master_ha_stepped_down(void *arg)
{
	struct mc_master_server *s = arg;

	pthread_mutex_lock(&s->lock);
	if (s->wal) {
		mc_wal_set_tap(s->wal, NULL, NULL);
		mc_master_set_wal(s->master, NULL);
		if (mc_wal_close(s->wal) != MC_OK)
			mc_error("ha: closing the log after stepping down: %s", mc_last_error());
		s->wal = NULL;
	}
	mc_master_server_snap_stop(s);
	/* a standby again: its tables are not to be trusted until the new
	 * leader's snapshot replaces them (mc_master_ha_may_campaign) */
	atomic_store(&s->repl.synced, false);
	atomic_store(&s->repl.applied, 0);
	atomic_store(&s->repl.dir_view, 0);
	atomic_store(&s->repl.dir_seq, 0);
	if (!s->ha_stopping && mc_master_repl_standby_start(s) != MC_OK)
		mc_error("ha: %s", mc_last_error());
	mc_master_server_unlock(s);
}

/* A master that stepped down campaigns again once it streams the new
 * leader's log (its tables replaced by the leader's snapshot). */
static bool mc_master_ha_may_campaign(void *arg)
{
	struct mc_master_server *s = arg;

	return atomic_load(&s->repl.synced);
}

/* The candidate's position (ha.h): what a synced standby holds of the
 * leader it streams from; a master without the leader's snapshot posts
 * what its own directory held at start (dir_position), which its
 * take-over would recover. */
static void mc_master_ha_position(void *arg, uint64_t *view_out, uint64_t *seq_out)
{
	struct mc_master_server *s = arg;

	if (!atomic_load(&s->repl.synced)) {
		*view_out = atomic_load(&s->repl.dir_view);
		*seq_out = atomic_load(&s->repl.dir_seq);
		return;
	}
	*view_out = atomic_load(&s->repl.view);
	*seq_out = atomic_load(&s->repl.applied);
}

/* ---- the directory's position (a cluster restarted whole) ---- */

static void note_view(uint64_t *view, uint16_t type, const uint8_t *p, uint32_t len)
{
	struct mc_walrec r;

	if (type != MC_WALREC_VIEW)
		return;
	mc_walrec_clear(&r);
	if (mc_walrec_decode(type, p, len, &r) == MC_OK)
		*view = r.u.view.version;
}

static mc_status scan_snap_entry(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	note_view(arg, type, p, len);
	return MC_OK;
}

static mc_status scan_rec(void *arg, const struct mc_wal_rec *r)
{
	note_view(arg, r->type, r->payload, r->len);
	return MC_OK;
}

/*
 * What the own directories hold, read as the take-over would recover it
 * (the newest valid snapshot in mc_master_server_snap_dir, then the log
 * in the --wal_dir after it) without building
 * tables: the view of its last VIEW record (a snapshot names its view
 * first, wal_log.c) and the seq of its last valid record.  Until a
 * leader's snapshot replaces the directory this is the master's candidate
 * position, so after every master was stopped the one whose directory
 * holds the most leads (ha.c).  The log is opened and closed to read it:
 * a torn tail is cut here as the take-over would cut it, and an empty
 * directory gets an empty first log file.  A directory that cannot be
 * read posts 0 0 (its take-over would fail the same way).
 */
static void dir_position(struct mc_master_server *s, const struct mc_master_server_config *cfg)
{
	const char *sdir = mc_master_server_snap_dir(cfg);
	struct mc_snap_load_info si;
	struct mc_wal_open_info wi;
	struct mc_wal *w = NULL;
	uint64_t view = 0, t0 = mc_now_ms(), seq;
	mc_status st;

	st = mc_snap_load(sdir, scan_snap_entry, &view, &si);
	if (st == MC_OK)
		st = mc_wal_open(cfg->wal_dir, MC_WAL_FSYNC_NO, si.seq, scan_rec, &view, &w, &wi);
	if (st != MC_OK) {
		mc_warn("ha: --wal_dir %s (snapshots in %s) cannot be read (%s): posting no "
			"position of its own",
			cfg->wal_dir, sdir, mc_last_error());
		return;
	}
	(void)mc_wal_close(w);
	seq = MC_MAX(wi.last_seq, si.seq);
	atomic_store(&s->repl.dir_view, view);
	atomic_store(&s->repl.dir_seq, seq);
	if (seq)
		mc_info("ha: --wal_dir %s holds view %" PRIu64 " through seq %" PRIu64
			" (snapshot at %" PRIu64 " in %s, read in %" PRIu64
			" ms): this master's position until a leader's snapshot replaces it",
			cfg->wal_dir, view, seq, si.seq, sdir, mc_now_ms() - t0);
}

/* flock dir/LOCK into *fd (made when missing): a standby empties its
 * directories for the leader's snapshot, so two masters must never share
 * one.  what names the directory in the message. */
static mc_status dir_lock(const char *dir, const char *what, int *fd)
{
	char path[4200];

	(void)mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/LOCK", dir);
	*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (*fd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "%s %s: %s", what, path,
				    strerror(errno));
	if (flock(*fd, LOCK_EX | LOCK_NB) != 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "%s %s is in use by another master (%s is locked): every HA "
				    "master needs a directory of its own",
				    what, dir, path);
	return MC_OK;
}

/* The snapshot directory's lock, unless it is the --wal_dir (locked). */
static mc_status snap_dir_lock(struct mc_master_server *s, const char *sdir)
{
	struct stat a, b;
	mc_status st = dir_lock(sdir, "MOONCAKE_SNAPSHOT_LOCAL_PATH", &s->repl.snap_lock_fd);

	if (s->repl.snap_lock_fd >= 0 && fstat(s->repl.lock_fd, &a) == 0 &&
	    fstat(s->repl.snap_lock_fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
		close(s->repl.snap_lock_fd); /* the same file: held already */
		s->repl.snap_lock_fd = -1;
		return MC_OK;
	}
	return st;
}

/* --enable_ha: the address put in the view, and the election thread. */
mc_status mc_master_server_ha_start(struct mc_master_server *s,
				    const struct mc_master_server_config *cfg, const char *host)
{
	struct mc_master_ha_config hc = {0};
	char name[256];
	mc_status st;

	if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 || !*host) {
		if (gethostname(name, sizeof(name)) != 0)
			snprintf(name, sizeof(name), "localhost");
		name[sizeof(name) - 1] = '\0';
		mc_warn("ha: --rpc_address %s is not reachable by others; advertising %s "
			"(set --rpc_address)",
			host, name);
		host = name;
	}
	snprintf(s->ha_advertise, sizeof(s->ha_advertise), strchr(host, ':') ? "[%s]:%u" : "%s:%u",
		 host, s->rpc_port);
	if (!cfg->wal_dir || !*cfg->wal_dir)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "--enable_ha needs --wal_dir: the leader logs every change "
				    "there before answering, and a standby keeps its copy of the "
				    "leader's log there");
	if (!mc_wal_fsync_parse(cfg->wal_fsync ? cfg->wal_fsync : "everysec", &s->repl.policy))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "--wal_fsync %s: not always, everysec or no", cfg->wal_fsync);
	/* the leader's snapshot a standby receives goes where its own
	 * snapshots go, so its take-over and restart find it (one rule,
	 * mc_master_server_snap_dir) */
	s->repl.snap_dir = mc_master_server_snap_dir(cfg);
	st = dir_lock(cfg->wal_dir, "--wal_dir", &s->repl.lock_fd);
	if (st == MC_OK)
		st = snap_dir_lock(s, s->repl.snap_dir);
	if (st != MC_OK)
		return st;
	mc_master_repl_clean_dir(cfg->wal_dir); /* a killed leader's senders' leftovers */
	dir_position(s, cfg);
	s->repl.dir = cfg->wal_dir;
	s->repl.sync_n = cfg->ha_sync_replicas;
	s->repl.stall_ms = (uint64_t)cfg->ha_lease_ttl_seconds * 1000;
	if (!s->snapper.timeout_ms) /* the snapshot sender's bound, before any take-over */
		s->snapper.timeout_ms = (uint64_t)cfg->snapshot_child_timeout_seconds * 1000;
	hc.backend = cfg->ha_backend_type;
	hc.connstring = cfg->ha_backend_connstring && *cfg->ha_backend_connstring
				? cfg->ha_backend_connstring
				: cfg->etcd_endpoints;
	hc.cluster_id = cfg->cluster_id;
	hc.advertise = s->ha_advertise;
	hc.ttl_s = cfg->ha_lease_ttl_seconds;
	hc.take_over = mc_master_ha_take_over;
	hc.step_down = mc_master_ha_stepped_down;
	hc.may_campaign = mc_master_ha_may_campaign;
	hc.position = mc_master_ha_position;
	hc.arg = s;
	s->ha_cfg = cfg;
	st = mc_master_ha_start(&hc, &s->ha);
	if (st == MC_OK && (st = mc_master_repl_standby_start(s)) != MC_OK) {
		mc_master_ha_stop(s->ha);
		s->ha = NULL;
	}
	return st;
}

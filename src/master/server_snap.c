/*
 * master/server_snap.c - the daemon's periodic snapshots (issue 14):
 * --enable_snapshot, --snapshot_interval_seconds,
 * --snapshot_child_timeout_seconds, --snapshot_retention_count,
 * --enable_snapshot_restore and MOONCAKE_SNAPSHOT_LOCAL_PATH.
 *
 * A snapshot is written without stopping the RPC loop, the way Redis
 * writes its RDB file: at the tick, with the state lock held and nothing
 * appended to the log since its last commit, the log is rotated (its
 * current file ends exactly at the seq the snapshot covers), the temp file
 * is opened and its buffer allocated, and the master forks.  The child has
 * a copy of the tables as they were at that instant (fork copies on
 * write): it walks them (mc_master_snap_dump), writes, fsyncs, renames the
 * file into place and _exits.  It takes no lock and logs nothing: other
 * threads' locks may have been held at the fork, and it only runs code
 * that needs none (its allocations, the record buffer's growth, go
 * through glibc's malloc, which fork leaves usable; it walks both tables
 * of a resize in progress and writes neither).  The parent unlocks at once and keeps serving.
 *
 * The parent reaps the child with waitpid(WNOHANG) at each tick.  On
 * success it keeps the retention_count newest snapshots (mc_snap_retain)
 * and deletes the log files whose records the OLDEST kept one covers
 * (mc_wal_drop_through): a damaged newest snapshot then falls back to an
 * older one and the log still has every record after it.  A child that
 * fails or outlives --snapshot_child_timeout_seconds (killed) counts as a
 * failure: its temp file is deleted and nothing else changes; the next one
 * is due an interval later.  A snapshot is skipped when the log has not
 * moved since the last one.
 *
 * At start (mc_master_server_snap_init, before the log is opened): with
 * --enable_snapshot_restore the newest valid snapshot is loaded (snap.c
 * renames damaged ones to .bad with a logged reason and tries older ones;
 * a newer format version refuses to start) and the log is replayed from
 * the seq it covers.  Without it the log is replayed from its start, and
 * a log whose start a snapshot has cut refuses with a message that names
 * the flag.
 *
 * Threads: the loop thread (the tick) under the server's lock; the child.
 */
#define MC_LOG_MODULE "master"
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "master/server_priv.h"
#include "master/snap.h"
#include "master/wal.h"
#include "mem/hostmem.h"

struct snap_replay {
	struct mc_master *m;
	uint64_t now_ms;
	uint64_t n;
	const struct mc_snap_load_info *info; /* its total is set before the first entry */
};

const uint64_t mc_master_snap_bounds[MC_MASTER_SNAP_NBOUNDS] = {
	0, 500, 1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000};

static mc_status snap_apply(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	struct snap_replay *x = arg;

	if (x->n++ == 0)
		mc_master_snap_load_begin(x->m, x->info->total);
	return mc_master_wal_replay(x->m, type, p, len, x->now_ms);
}

static mc_status snap_hint(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	struct snap_replay *x = arg;

	mc_master_wal_hint(x->m, type, p, len);
	return MC_OK;
}

const char *mc_master_server_snap_dir(const struct mc_master_server_config *cfg)
{
	const char *env = cfg->snapshot_local_path; /* MOONCAKE_SNAPSHOT_LOCAL_PATH */

	if (env && *env)
		return env;
	return cfg->wal_dir && *cfg->wal_dir ? cfg->wal_dir : NULL;
}

mc_status mc_master_server_snap_init(struct mc_master_server *s,
				     const struct mc_master_server_config *cfg, uint64_t *after)
{
	struct mc_master_snapper *sn = &s->snapper;
	const char *dir = mc_master_server_snap_dir(cfg);
	struct mc_snap_load_info info;
	struct snap_replay x = {s->master, mc_now_ms(), 0, &info};
	mc_status st;

	*after = 0;
	memset(sn, 0, sizeof(*sn));
	if (cfg->enable_snapshot && (!cfg->wal_dir || !*cfg->wal_dir))
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"--enable_snapshot needs --wal_dir: a snapshot covers the log's "
			"records up to its seq, the log holds what came after");
	if ((cfg->enable_snapshot || cfg->enable_snapshot_restore) && !dir)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "--enable_snapshot_restore needs a snapshot directory: "
				    "MOONCAKE_SNAPSHOT_LOCAL_PATH or --wal_dir");
	if (dir) {
		sn->dir = mc_strdup(dir);
		if (!sn->dir)
			return MC_ERR_NOMEM;
	}
	sn->on = cfg->enable_snapshot;
	sn->every_ms = cfg->snapshot_interval_seconds * 1000;
	sn->timeout_ms = cfg->snapshot_child_timeout_seconds * 1000;
	sn->keep = (unsigned)cfg->snapshot_retention_count;
	if (!cfg->enable_snapshot_restore || !sn->dir)
		return MC_OK;
	/* another seed than the writer's, whose table order is its hash order */
	mc_master_table_reseed(s->master, mc_now_ns());
	st = mc_snap_load_hinted(sn->dir, snap_apply, snap_hint, &x, &info);
	mc_master_snap_load_end(s->master);
	if (st != MC_OK)
		return mc_set_error(st, "snapshot: %s", mc_last_error());
	if (info.found)
		mc_info("snapshot: %s: loaded the one covering seq %" PRIu64 " (%" PRIu64
			" entries, %" PRIu64 " bytes, %u damaged ones set aside) in %" PRIu64 " ms",
			sn->dir, info.seq, x.n, info.bytes, info.rejected, mc_now_ms() - x.now_ms);
	else
		mc_info("snapshot: %s: none to load%s", sn->dir,
			info.rejected ? " (every one was damaged)" : "");
	*after = info.seq;
	return MC_OK;
}

void mc_master_server_snap_started(struct mc_master_server *s, uint64_t after, uint64_t now_ms)
{
	s->snapper.last_seq = after;
	s->snapper.next_ms = now_ms + s->snapper.every_ms;
}

bool mc_master_server_snap_sorted(struct mc_master_server *s, const char *what)
{
	uint64_t need = mc_master_snap_sort_bytes(s->master), room = mc_hostmem_headroom();

	if (mc_master_snap_sort_fits(need, room))
		return true;
	mc_warn("snapshot: %s is written unsorted: sorting its objects would take %" PRIu64
		" MiB, more than 1/%d of the %" PRIu64 " MiB this process may still take "
		"(a restart's remount sorts them instead)",
		what, need >> 20, MC_MASTER_SNAP_SORT_SHARE, room >> 20);
	return false;
}

static void child_run(struct mc_master *m, struct mc_snap_writer *w, bool sorted)
{
	mc_status st = mc_master_snap_dump(m, w, sorted);

	if (st == MC_OK)
		st = mc_snap_writer_finish(w);
	else
		mc_snap_writer_abort(w);
	_exit(st == MC_OK ? 0 : 1);
}

static void child_failed(struct mc_master_server *s, const char *why)
{
	struct mc_master_snapper *sn = &s->snapper;
	char tmp[4200];

	mc_snap_tmp_path(sn->dir, sn->child_seq, tmp, sizeof(tmp));
	(void)unlink(tmp);
	sn->n_fail++;
	mc_error("snapshot: the one covering seq %" PRIu64 " failed: %s", sn->child_seq, why);
}

static void child_done(struct mc_master_server *s, uint64_t now_ms)
{
	struct mc_master_snapper *sn = &s->snapper;
	uint64_t oldest = 0;
	unsigned dropped = 0;

	sn->n_ok++;
	sn->last_seq = sn->child_seq;
	{
		uint64_t ms = now_ms - sn->child_ms;
		size_t i = 0;

		while (i < MC_MASTER_SNAP_NBOUNDS && ms > mc_master_snap_bounds[i])
			i++;
		sn->dur_counts[i]++;
		sn->dur_sum_ms += ms;
	}
	if (mc_snap_retain(sn->dir, sn->keep, &oldest) != MC_OK) {
		mc_warn("snapshot: %s: cannot apply the retention: %s", sn->dir, mc_last_error());
		oldest = 0;
	}
	if (oldest && mc_wal_drop_through(s->wal, oldest, &dropped) != MC_OK)
		mc_warn("snapshot: cannot delete the log files before seq %" PRIu64 ": %s", oldest,
			mc_last_error());
	mc_info("snapshot: seq %" PRIu64 " written in %" PRIu64 " ms; %u log files deleted "
		"(through seq %" PRIu64 ", the oldest snapshot kept)",
		sn->child_seq, now_ms - sn->child_ms, dropped, oldest);
}

static void reap(struct mc_master_server *s, uint64_t now_ms)
{
	struct mc_master_snapper *sn = &s->snapper;
	int wst;
	pid_t r = waitpid(sn->child, &wst, WNOHANG);
	char why[128];

	if (r == 0) {
		if (now_ms - sn->child_ms < sn->timeout_ms)
			return;
		(void)kill(sn->child, SIGKILL);
		(void)waitpid(sn->child, &wst, 0);
		sn->child = 0;
		child_failed(s, "the child ran past --snapshot_child_timeout_seconds and was "
				"killed");
		return;
	}
	sn->child = 0;
	if (r < 0) {
		snprintf(why, sizeof(why), "waitpid: %s", strerror(errno));
		child_failed(s, why);
	} else if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0) {
		child_done(s, now_ms);
	} else {
		if (WIFSIGNALED(wst))
			snprintf(why, sizeof(why), "the child died of signal %d", WTERMSIG(wst));
		else
			snprintf(why, sizeof(why), "the child could not write it (exit %d)",
				 WEXITSTATUS(wst));
		child_failed(s, why);
	}
}

static void fork_one(struct mc_master_server *s, uint64_t now_ms)
{
	struct mc_master_snapper *sn = &s->snapper;
	struct mc_snap_writer *w;
	uint64_t seq;
	bool sorted;
	pid_t pid;

	sn->next_ms = now_ms + sn->every_ms;
	if (mc_wal_last_seq(s->wal) == sn->last_seq)
		return; /* nothing new since the last one */
	/* nothing is appended and uncommitted here (the tick's start), so the
	 * rotation only fsyncs and starts a file for the records after seq;
	 * the temp file first, so a directory that cannot take one leaves the
	 * log as it was */
	seq = mc_wal_last_seq(s->wal);
	if (mc_snap_writer_open(sn->dir, seq, &w) != MC_OK) {
		sn->n_fail++;
		mc_error("snapshot: %s", mc_last_error());
		return;
	}
	if (mc_wal_rotate(s->wal) != MC_OK || mc_wal_last_seq(s->wal) != seq) {
		sn->n_fail++;
		mc_error("snapshot: cannot rotate the log: %s", mc_last_error());
		mc_snap_writer_abort(w);
		return;
	}
	sorted = mc_master_server_snap_sorted(s, "the periodic snapshot");
	pid = fork();
	if (pid == 0)
		child_run(s->master, w, sorted); /* does not return */
	mc_snap_writer_free(w);
	if (pid < 0) {
		sn->child_seq = seq;
		child_failed(s, strerror(errno));
		return;
	}
	sn->child = pid;
	sn->child_seq = seq;
	sn->child_ms = now_ms;
}

void mc_master_server_snap_tick(struct mc_master_server *s, uint64_t now_ms)
{
	struct mc_master_snapper *sn = &s->snapper;

	if (!sn->on || !s->wal)
		return;
	if (sn->child)
		reap(s, now_ms);
	else if (now_ms >= sn->next_ms && !s->wal_broken)
		fork_one(s, now_ms);
}

void mc_master_server_snap_stop(struct mc_master_server *s)
{
	struct mc_master_snapper *sn = &s->snapper;
	int wst;

	if (sn->child) {
		(void)kill(sn->child, SIGKILL);
		(void)waitpid(sn->child, &wst, 0);
		sn->child = 0;
		child_failed(s, "the master stopped first");
	}
	mc_free(sn->dir);
	sn->dir = NULL;
}

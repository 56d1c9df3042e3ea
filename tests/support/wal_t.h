/*
 * tests/support/wal_t.h - a master (master_t.h) on a write-ahead log and
 * its snapshots in a directory, started, committed, snapshotted and
 * crashed the way the daemon does these (server_snap.c and the server's
 * group commit), for the master's log tests (test_master_wal*.c).
 *
 * The "crash" is a master freed without any shutdown of its own: what the
 * next one knows comes from the directory's files alone (the log is
 * closed, which writes nothing the commits had not written).
 *
 * Link: compile wal_t.c and master_t.c into the test, with mc_master_dep.
 */
#ifndef MC_TESTS_WAL_T_H
#define MC_TESTS_WAL_T_H

#include <stdint.h>

#include "master/snap.h"
#include "master/wal.h"
#include "master_t.h"

/* The replay callbacks' argument: records are applied to m at now.  With
 * si, a snapshot's load is a bulk one, as the daemon's
 * (mc_master_snap_load_begin with si->total before the first entry). */
struct mt_replay {
	struct mc_master *m;
	uint64_t now;
	const struct mc_snap_load_info *si;
	uint64_t n; /* snapshot entries seen */
};

/* x for t's master and time; bulk: as si above (may be NULL). */
void mt_replay_init(struct mt_replay *x, struct mt *t, const struct mc_snap_load_info *bulk);
/* mc_wal_open's callback. */
mc_status mt_replay_log(void *arg, const struct mc_wal_rec *r);
/* mc_snap_load's callback. */
mc_status mt_replay_snap(void *arg, uint16_t type, const uint8_t *p, uint32_t len);

/* How mt_wal_start loads the directory. */
enum mt_wal_load {
	MT_WAL_LOG,	  /* the log alone */
	MT_WAL_SNAP,	  /* the newest snapshot if any, entry by entry, then the log after it */
	MT_WAL_SNAP_BULK, /* the same, the snapshot as a bulk load (--enable_snapshot_restore) */
};

/* A master with cfg on the log in dir, loaded as how says (asserted); the
 * log in *w, how many records the log replayed in *replayed and the
 * snapshot's load in *si (each of these two may be NULL). */
struct mt *mt_wal_start(const struct mc_master_config *cfg, const char *dir, enum mt_wal_load how,
			struct mc_wal **w, uint64_t *replayed, struct mc_snap_load_info *si);
/* The daemon's group commit after a request (asserted). */
void mt_wal_commit(struct mc_wal *w);
/* The crash: w closed, t freed. */
void mt_wal_crash(struct mt *t, struct mc_wal *w);
/* What the daemon does for one snapshot (server_snap.c, in a child there):
 * rotate the log, dump t's tables, keep the keep newest snapshots and drop
 * the log files the oldest one kept covers (how many in *dropped, which
 * may be NULL).  Returns the snapshot's seq. */
uint64_t mt_wal_snapshot(struct mt *t, struct mc_wal *w, const char *dir, unsigned keep,
			 unsigned *dropped);

#endif

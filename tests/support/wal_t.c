/* tests/support/wal_t.c - see wal_t.h. */
#include "wal_t.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "mooncake/log.h"

void mt_replay_init(struct mt_replay *x, struct mt *t, const struct mc_snap_load_info *bulk)
{
	x->m = t->m;
	x->now = t->now;
	x->si = bulk;
	x->n = 0;
}

mc_status mt_replay_log(void *arg, const struct mc_wal_rec *r)
{
	struct mt_replay *x = arg;

	return mc_master_wal_replay(x->m, r->type, r->payload, r->len, x->now);
}

mc_status mt_replay_snap(void *arg, uint16_t type, const uint8_t *p, uint32_t len)
{
	struct mt_replay *x = arg;

	if (x->si && x->n++ == 0)
		mc_master_snap_load_begin(x->m, x->si->total);
	return mc_master_wal_replay(x->m, type, p, len, x->now);
}

struct mt *mt_wal_start(const struct mc_master_config *cfg, const char *dir, enum mt_wal_load how,
			struct mc_wal **w, uint64_t *replayed, struct mc_snap_load_info *si)
{
	struct mt *t = mt_new(cfg);
	struct mc_snap_load_info own;
	struct mc_wal_open_info info;
	struct mt_replay x;
	uint64_t after = 0;

	if (!si)
		si = &own;
	if (how != MT_WAL_LOG) {
		mt_replay_init(&x, t, how == MT_WAL_SNAP_BULK ? si : NULL);
		assert_int_equal(mc_snap_load(dir, mt_replay_snap, &x, si), MC_OK);
		if (how == MT_WAL_SNAP_BULK)
			mc_master_snap_load_end(t->m);
		after = si->seq; /* 0 when none was found */
	}
	mt_replay_init(&x, t, NULL);
	if (mc_wal_open(dir, MC_WAL_FSYNC_NO, after, mt_replay_log, &x, w, &info) != MC_OK)
		fail_msg("%s", mc_last_error());
	if (replayed)
		*replayed = info.replayed;
	mc_master_set_wal(t->m, *w);
	return t;
}

void mt_wal_commit(struct mc_wal *w)
{
	assert_int_equal(mc_wal_commit(w), MC_OK);
}

void mt_wal_crash(struct mt *t, struct mc_wal *w)
{
	mc_master_set_wal(t->m, NULL);
	assert_int_equal(mc_wal_close(w), MC_OK);
	mt_free(t);
}

uint64_t mt_wal_snapshot(struct mt *t, struct mc_wal *w, const char *dir, unsigned keep,
			 unsigned *dropped)
{
	struct mc_snap_writer *sw;
	uint64_t seq, oldest;

	assert_int_equal(mc_wal_rotate(w), MC_OK);
	seq = mc_wal_last_seq(w);
	assert_int_equal(mc_snap_writer_open(dir, seq, &sw), MC_OK);
	assert_int_equal(mc_master_snap_dump(t->m, sw, true), MC_OK);
	assert_int_equal(mc_snap_writer_finish(sw), MC_OK);
	assert_int_equal(mc_snap_retain(dir, keep, &oldest), MC_OK);
	assert_int_equal(mc_wal_drop_through(w, oldest, dropped), MC_OK);
	return seq;
}

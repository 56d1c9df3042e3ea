/*
 * master/ha.h - the master's leader election (--enable_ha), upstream's
 * protocol on etcd or Redis (spec store.md 6.2; meta/coord.h holds the
 * coordinator side).
 *
 * One thread per master campaigns for the cluster's view key, and while it
 * holds it renews it every TTL/3.  States (upstream's names, /ha_status):
 * starting -> candidate -> standby (someone else leads: watch the key) or
 * leader_warmup (won: renew for one TTL before serving, so an old leader
 * whose lease has not lapsed on its own clock has stopped first) ->
 * recovering (the take-over callback rebuilds the tables) -> serving.
 * A leader that cannot renew within the TTL (counted on its own monotonic
 * clock from the send of its last successful renewal, which is never later
 * than the coordinator's count) or is told the key is gone steps down:
 * mc_master_ha_may_serve turns false at that instant, whatever the thread
 * is doing, and the step-down callback runs.  A master that stepped down
 * stays a fenced standby (its tables may have diverged) until may_campaign
 * says they are the new leader's again; then it campaigns as any standby.
 *
 * Choosing among standbys.  A master that may campaign posts a candidate
 * entry (meta/coord.h) with how far its copy of the leader's log reaches
 * (the position callback), refreshed while it watches the view.  When the
 * view is gone it marks its entry "electing" and gathers for a short
 * window (until every listed candidate is electing, at most max(TTL/5,
 * 200 ms)); then only the most caught-up candidate campaigns.  The others
 * stand back and watch for its view; if none appears within one more TTL
 * (it died or cannot campaign), they
 * campaign anyway, so the cluster is never left without a leader.  A
 * winner looks at the candidates through its warm-up too and hands the
 * view back, unserved, to one further on (not a tie) that appeared
 * meanwhile (a master of a cluster started whole that began later).
 *
 * Threads: the election thread runs the callbacks; mc_master_ha_may_serve
 * and mc_master_ha_info may be called from any thread (atomics and a leaf
 * lock).
 */
#ifndef MC_MASTER_HA_H
#define MC_MASTER_HA_H

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_master_ha;

enum mc_ha_state {
	MC_HA_STARTING,
	MC_HA_STANDBY,
	MC_HA_CANDIDATE,
	MC_HA_RECOVERING,
	MC_HA_CATCHING_UP,
	MC_HA_LEADER_WARMUP,
	MC_HA_SERVING,
};

struct mc_master_ha_config {
	const char *backend;	/* "etcd" or "redis" */
	const char *connstring; /* etcd "h:p;h:p", or a redis:// uri */
	const char *cluster_id;
	const char *advertise; /* this master's RPC address "host:port" */
	int64_t ttl_s;	       /* lease TTL (upstream: 5) */
	/*
	 * Called on the election thread after warm-up, before serving: make
	 * the tables current (mc_master_ha_take_over in server.c) and log the
	 * view.  Not MC_OK: the leadership is given up and the master stays
	 * a fenced standby.
	 */
	mc_status (*take_over)(void *arg, uint64_t view_version);
	/* Called on the election thread once, when a serving leader stepped
	 * down (it must stop writing anything shared, e.g. its log). */
	void (*step_down)(void *arg);
	/* May a master that stepped down campaign again (its tables are the
	 * new leader's once more)?  Polled while fenced; NULL: never. */
	bool (*may_campaign)(void *arg);
	/* How far this master's copy of the leader's log reaches: the view
	 * of the leader it streamed from and the seq applied through, or
	 * what its own directory holds when it streams from none (0, 0 when
	 * it holds nothing).  Any thread; NULL: 0, 0. */
	void (*position)(void *arg, uint64_t *view_out, uint64_t *seq_out);
	void *arg;
};

struct mc_master_ha_info {
	enum mc_ha_state state;
	bool leader;		 /* role: leader_warmup or serving */
	bool serving;		 /* mc_master_ha_may_serve now */
	bool leader_known;	 /* leader_addr/view_version below are set */
	char leader_addr[256];	 /* the view last seen */
	uint64_t view_version;	 /* its version */
	uint64_t elections_won;	 /* campaigns won */
	uint64_t step_downs;	 /* leaderships lost or given up */
	uint64_t transitions;	 /* state changes */
	uint64_t backend_errors; /* coordinator requests that failed */
	uint64_t views_ended;	 /* views of leaders that were gone, ended here */
	uint64_t deferred;	 /* elections stood back from, or views given up in the
				  * warm-up: a candidate more caught up */
	uint64_t cand_seq;	 /* the log position last posted as a candidate */
};

/* Open the coordinator (unreachable: an error naming it) and start the
 * election thread.  cfg's strings are copied. */
mc_status mc_master_ha_start(const struct mc_master_ha_config *cfg, struct mc_master_ha **out);
/* Stop the thread and give up the view if held.  NULL is a no-op. */
void mc_master_ha_stop(struct mc_master_ha *ha);
/*
 * The standby's log stream from the leader ended (any thread): look now
 * whether the leader is gone (its RPC port refuses connections); if so,
 * end its view and campaign without waiting for its lease to lapse, and
 * serve without the warm-up when elected.  A leader that is alive (or
 * unreachable, or frozen) is left to its lease as before.
 */
void mc_master_ha_leader_lost(struct mc_master_ha *ha);
/* May this master serve requests at now_ms (its monotonic clock)? */
bool mc_master_ha_may_serve(struct mc_master_ha *ha, uint64_t now_ms);
/* The view version this master serves under (0 before it led). */
uint64_t mc_master_ha_view_version(struct mc_master_ha *ha);
void mc_master_ha_info(struct mc_master_ha *ha, struct mc_master_ha_info *out);
/* Upstream's state names ("serving", ...). */
const char *mc_master_ha_state_name(enum mc_ha_state s);

#endif

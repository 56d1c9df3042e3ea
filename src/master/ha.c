/*
 * master/ha.c - the master's leader election: one thread that campaigns
 * for the cluster's view key in etcd or Redis (meta/coord.h), renews it
 * while leading, and decides from its own clock when leading has ended.
 *
 * Why the clock, and not the coordinator's word.  A leader must stop
 * accepting writes before any other master can start, even when the
 * leader was frozen (SIGSTOP, a long pause, a partition from etcd) and
 * has not heard that its lease lapsed.  So leadership is a deadline:
 * valid_until = the moment the last successful renewal was *sent* + TTL.
 * The coordinator counts its TTL from when it received that renewal, so
 * its lease can only outlive ours.  mc_master_ha_may_serve compares the
 * deadline with the monotonic clock on every request, so a master that
 * wakes from a pause refuses its first request even if this thread has
 * not run yet.  The new leader waits one more TTL after winning
 * ("warm-up", upstream's rule) before it serves, which also covers a
 * clock that runs a little fast.
 *
 * A leader that is gone is not waited for: when the standby's log stream
 * from it ends (mc_master_ha_leader_lost), a connect to its RPC address
 * that is refused proves nothing listens there, so no master of that view
 * runs; the standby ends the view, campaigns at once and, elected, serves
 * without the warm-up (watch, ha_main).
 *
 * Which standby campaigns.  Whoever asked first used to win, and a
 * standby that had fallen behind (paused, its stream dropped) could take
 * the view and lose what the others held.  Now each master that may
 * campaign keeps a candidate entry in the coordinator with its position
 * (the view it streamed and the seq applied), refreshed as it watches.
 * When the view is gone it posts its final position marked electing and
 * gathers (elect): once every listed candidate is electing, or after the
 * window, the most caught-up one (mc_coord_cand_better) campaigns; the
 * others stand back and watch for its view.  A better candidate that
 * never takes the view is waited for one TTL more, then the others
 * campaign as before: the entry of a dead one lapses, and
 * the bound covers one that lives but cannot campaign (an entry lives two
 * TTLs, so a candidate paused a moment is not forgotten).  The winner drops
 * its entry.  The winner is often not the standby that ended the dead
 * leader's view, so it asks itself (gone_since): it saw that leader's
 * view less than a TTL ago and its RPC port refuses connections, then no
 * master of that view runs and no later view could have lapsed
 * meanwhile (each lives a TTL), so it serves without the warm-up.
 *
 * A cluster started whole.  A master that never loaded a leader's
 * snapshot posts what its own directory holds (server_ha.c), so the one
 * whose directory holds the most leads.  Masters started one after the
 * other do not gather together: the first finds itself alone and wins.
 * So a winner keeps looking at the candidates through its warm-up, when
 * nothing is served yet, and gives the view up (give_up) to one further
 * on (a later view or a longer log; not a tie) that shows up meanwhile,
 * unless this election already passed that one over (a dead candidate's
 * entry outlives it by up to two TTLs).
 *
 * What the thread must never do: hold the server's lock (the callbacks
 * take it themselves), or extend valid_until from a renewal that was not
 * acknowledged.
 */
#define MC_LOG_MODULE "ha"
#include "master/ha.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "meta/coord.h"

#define OPEN_TRIES_MS 3000 /* the coordinator's first answer at start, at most */
#define PROBE_MS      1000 /* the connect that asks whether a leader is gone */
#define GATHER_MIN_MS 200  /* the candidates' gathering window, at least */
#define ELECT_POLL_MS 50   /* the election's look at the view and the candidates */

struct mc_master_ha {
	struct mc_master_ha_config cfg; /* strings owned (copies) */
	struct mc_coord *coord;
	char key[300];
	uint64_t ttl_ms;

	/* read by any thread */
	atomic_int state;		  /* enum mc_ha_state */
	atomic_bool serving;		  /* past recovery, not stepped down */
	atomic_uint_fast64_t valid_until; /* leadership deadline (monotonic ms) */
	atomic_uint_fast64_t version;	  /* the view this master leads under */
	atomic_uint_fast64_t n_won, n_down, n_trans, n_err, n_evict, n_defer;
	atomic_uint_fast64_t cand_seq; /* the seq last posted as a candidate */

	/* the election thread's own */
	char cand_key[320];	     /* where candidate entries live */
	struct mc_coord_cand posted; /* the entry last posted */
	uint64_t posted_ms;	     /* when (0: none is up) */
	struct mc_coord_view prev;   /* the last view seen present */
	uint64_t prev_ms;	     /* when it was seen */
	/* the better candidates this election passed over (they never took
	 * the view): the warm-up does not give it up to them */
	char passed[MC_COORD_CAND_MAX][sizeof(((struct mc_coord_cand *)0)->addr)];
	size_t npassed;

	pthread_mutex_t lock; /* leaf: the fields below and stop */
	pthread_cond_t cond;  /* CLOCK_MONOTONIC; signalled by stop and a poke */
	bool stop;
	bool poked;		   /* mc_master_ha_leader_lost: look at the leader now */
	struct mc_coord_view seen; /* the view last read or won */

	pthread_t thread;
};

static const char *const state_names[] = {
	[MC_HA_STARTING] = "starting",	     [MC_HA_STANDBY] = "standby",
	[MC_HA_CANDIDATE] = "candidate",     [MC_HA_RECOVERING] = "recovering",
	[MC_HA_CATCHING_UP] = "catching_up", [MC_HA_LEADER_WARMUP] = "leader_warmup",
	[MC_HA_SERVING] = "serving",
};

const char *mc_master_ha_state_name(enum mc_ha_state s)
{
	return (unsigned)s < MC_ARRAY_SIZE(state_names) ? state_names[s] : "starting";
}

static void set_state(struct mc_master_ha *ha, enum mc_ha_state s)
{
	int old = atomic_exchange(&ha->state, (int)s);

	if (old != (int)s) {
		atomic_fetch_add(&ha->n_trans, 1);
		/* a standby campaigns whenever the view is free: not news */
		if (s == MC_HA_CANDIDATE || (old == MC_HA_CANDIDATE && s == MC_HA_STANDBY))
			mc_debug("%s -> %s", mc_master_ha_state_name((enum mc_ha_state)old),
				 mc_master_ha_state_name(s));
		else
			mc_info("%s -> %s", mc_master_ha_state_name((enum mc_ha_state)old),
				mc_master_ha_state_name(s));
	}
}

/* Sleep until now + ms, stop, or (when poked_out) a poke; returns false once
 * stopping; *poked_out says whether a poke came (and takes it). */
static bool nap_until(struct mc_master_ha *ha, uint64_t ms, bool *poked_out)
{
	struct timespec ts;
	bool stop;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&ha->lock);
	while (!ha->stop && !(poked_out && ha->poked) &&
	       pthread_cond_timedwait(&ha->cond, &ha->lock, &ts) != ETIMEDOUT)
		;
	stop = ha->stop;
	if (poked_out) {
		*poked_out = ha->poked;
		ha->poked = false;
	}
	pthread_mutex_unlock(&ha->lock);
	return !stop;
}

/* Sleep until now + ms or stop; returns false once stopping. */
static bool nap(struct mc_master_ha *ha, uint64_t ms)
{
	return nap_until(ha, ms, NULL);
}

static void note_error(struct mc_master_ha *ha, const char *what, uint64_t *last_log_ms)
{
	uint64_t now = mc_now_ms();

	atomic_fetch_add(&ha->n_err, 1);
	if (now - *last_log_ms >= 5000) {
		*last_log_ms = now;
		mc_warn("%s: %s", what, mc_last_error());
	}
}

static void remember(struct mc_master_ha *ha, const struct mc_coord_view *v)
{
	pthread_mutex_lock(&ha->lock);
	ha->seen = *v;
	pthread_mutex_unlock(&ha->lock);
	if (v->present) {
		ha->prev = *v;
		ha->prev_ms = mc_now_ms();
	}
}

/*
 * Renew what we hold, once.  true while we still lead (valid_until moved
 * on, or the coordinator did not answer but the deadline has not passed;
 * *failed says which); false once leading is over.
 */
static bool renew_once(struct mc_master_ha *ha, bool *failed, uint64_t *last_log_ms)
{
	uint64_t sent = mc_now_ms();
	bool held = false;
	mc_status st = mc_coord_renew(ha->coord, &held);

	*failed = false;
	if (st == MC_OK && held) {
		uint64_t until = sent + ha->ttl_ms;
		if (until > atomic_load(&ha->valid_until))
			atomic_store(&ha->valid_until, until);
		return mc_now_ms() < atomic_load(&ha->valid_until);
	}
	if (st == MC_OK) {
		mc_warn("the view %s is no longer ours (lease gone)", ha->key);
		return false;
	}
	*failed = true;
	note_error(ha, "renewing the view", last_log_ms);
	return mc_now_ms() < atomic_load(&ha->valid_until);
}

static bool better_listed(struct mc_master_ha *ha, uint64_t *last_log_ms);

/*
 * Hold the view, renewing every TTL/3 (100 ms while renewals fail), until
 * until_ms (warm-up), until *done turns true (a take-over running beside
 * it), or for good (both unset).  Returns false when leading ended (or
 * stop), true when the end asked for came.  With yielded (the warm-up:
 * nothing served yet) the candidates are looked at every TTL/10, and one
 * more caught up than this master ends it: false with *yielded set.
 */
static bool lead(struct mc_master_ha *ha, uint64_t until_ms, atomic_bool *done, bool *yielded,
		 uint64_t *last_log_ms)
{
	uint64_t period = MC_MAX(ha->ttl_ms / 3, (uint64_t)50);
	uint64_t look = MC_MAX(ha->ttl_ms / 10, (uint64_t)100);
	uint64_t next = mc_now_ms() + period, next_look = mc_now_ms() + look;
	bool failed = false;

	if (yielded)
		*yielded = false;
	for (;;) {
		uint64_t now = mc_now_ms(), wait;

		if ((until_ms && now >= until_ms) || (done && atomic_load(done)))
			return true;
		if (atomic_load(&ha->valid_until) <= now)
			return false;
		if (now >= next) {
			if (!renew_once(ha, &failed, last_log_ms))
				return false;
			next = mc_now_ms() + (failed ? MC_MIN(period, (uint64_t)100) : period);
			continue;
		}
		if (yielded && now >= next_look) {
			next_look = now + look;
			if (better_listed(ha, last_log_ms)) {
				*yielded = true;
				return false;
			}
			continue;
		}
		wait = next - now;
		if (until_ms)
			wait = MC_MIN(wait, until_ms - now);
		if (yielded)
			wait = MC_MIN(wait, next_look - now);
		if (done)
			wait = MC_MIN(wait, (uint64_t)20);
		if (!nap(ha, wait))
			return false;
	}
}

/* The take-over runs on its own thread so that the election thread keeps
 * renewing while the tables load (a long log takes longer than a lease). */
struct take_over_job {
	struct mc_master_ha *ha;
	uint64_t version;
	mc_status st;
	atomic_bool done;
};

static void *take_over_main(void *arg)
{
	struct take_over_job *j = arg;

	j->st = j->ha->cfg.take_over ? j->ha->cfg.take_over(j->ha->cfg.arg, j->version) : MC_OK;
	atomic_store(&j->done, true);
	return NULL;
}

/* Run the take-over while holding the view.  MC_OK when it succeeded and
 * the view is still ours; *held_out says whether it is. */
static mc_status take_over(struct mc_master_ha *ha, uint64_t version, bool *held_out,
			   uint64_t *last_log_ms)
{
	struct take_over_job j = {.ha = ha, .version = version, .st = MC_OK};
	pthread_t t;

	atomic_init(&j.done, false);
	if (pthread_create(&t, NULL, take_over_main, &j) != 0) {
		take_over_main(&j);
		*held_out = renew_once(ha, &(bool){false}, last_log_ms);
		return j.st;
	}
	pthread_setname_np(t, "mc-ha-takeover");
	*held_out = lead(ha, 0, &j.done, NULL, last_log_ms);
	pthread_join(t, NULL);
	if (*held_out && j.st == MC_OK)
		*held_out = renew_once(ha, &(bool){false}, last_log_ms);
	return j.st;
}

/*
 * Is the process that advertised addr gone?  Only a refused connect on
 * every address it resolves to says so: nothing listens on its RPC port,
 * and a master listens there for as long as it lives (a frozen one still
 * has its connections accepted by the kernel; a partitioned one times out
 * or is unreachable, which proves nothing).
 */
static bool leader_gone(const char *addr)
{
	struct addrinfo hints = {0}, *res = NULL, *ai;
	char host[256], portstr[8];
	uint16_t port;
	bool gone = false;

	if (!mc_sock_split_hostport(addr, host, sizeof(host), &port, 0) || !port || !host[0])
		return false;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof(portstr), "%u", port);
	if (getaddrinfo(host, portstr, &hints, &res) != 0)
		return false;
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
				ai->ai_protocol);
		int err = 0;
		socklen_t el = sizeof(err);

		if (fd < 0) {
			gone = false;
			break;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			err = 0; /* connected: something listens */
		} else if (errno == EINPROGRESS) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (poll(&p, 1, PROBE_MS) != 1 ||
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
				err = ETIMEDOUT;
		} else {
			err = errno;
		}
		gone = err == ECONNREFUSED;
		close(fd);
		if (!gone)
			break;
	}
	freeaddrinfo(res);
	return gone;
}

/* ---- candidates ---- */

static void my_entry(struct mc_master_ha *ha, bool electing, struct mc_coord_cand *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->addr, sizeof(out->addr), "%s", ha->cfg.advertise);
	if (ha->cfg.position)
		ha->cfg.position(ha->cfg.arg, &out->view, &out->seq);
	out->electing = electing;
}

/*
 * Post this master's entry when it changed or a quarter of its lifetime
 * passed (force: now).  false when the coordinator failed (counted).
 */
static bool cand_refresh(struct mc_master_ha *ha, bool electing, uint64_t *last_log_ms)
{
	struct mc_coord_cand me;
	uint64_t now = mc_now_ms();

	my_entry(ha, electing, &me);
	if (ha->posted_ms && now - ha->posted_ms < ha->ttl_ms / 4 && me.view == ha->posted.view &&
	    me.seq == ha->posted.seq && me.electing == ha->posted.electing)
		return true;
	/* two TTLs: a paused candidate outlives the election's bound (a dead
	 * one holds nobody past it either) */
	if (mc_coord_cand_post(ha->coord, ha->key, &me, 2 * ((int64_t)ha->ttl_ms / 1000)) !=
	    MC_OK) {
		note_error(ha, "posting the candidate entry", last_log_ms);
		return false;
	}
	ha->posted = me;
	ha->posted_ms = now;
	atomic_store(&ha->cand_seq, me.seq);
	return true;
}

static void cand_drop(struct mc_master_ha *ha)
{
	if (!ha->posted_ms)
		return;
	mc_coord_cand_drop(ha->coord, ha->key, ha->cfg.advertise);
	ha->posted_ms = 0;
}

static bool passed_over(const struct mc_master_ha *ha, const char *addr)
{
	for (size_t i = 0; i < ha->npassed; i++)
		if (strcmp(ha->passed[i], addr) == 0)
			return true;
	return false;
}

/*
 * During the warm-up: is a candidate further on than this master (a
 * later view, or a longer log of the same one) listed, one this election
 * did not pass over?  It came after the gathering: a master of a cluster
 * started whole, begun later than this one, whose own directory holds
 * more (server_ha.c).  Nothing is served yet, so the view is given up
 * for it.  Coordinator errors say no.
 */
static bool better_listed(struct mc_master_ha *ha, uint64_t *last_log_ms)
{
	struct mc_coord_cand list[MC_COORD_CAND_MAX], me;
	size_t n = 0;

	if (mc_coord_cand_list(ha->coord, ha->key, list, MC_ARRAY_SIZE(list), &n) != MC_OK) {
		note_error(ha, "listing the candidates", last_log_ms);
		return false;
	}
	my_entry(ha, false, &me);
	for (size_t i = 0; i < n; i++) {
		/* strictly further on: a tie (the lower address) holds no more */
		if (strcmp(list[i].addr, ha->cfg.advertise) == 0 || passed_over(ha, list[i].addr) ||
		    list[i].view < me.view || (list[i].view == me.view && list[i].seq <= me.seq))
			continue;
		mc_info("giving up the view before serving: %s is more caught up (view %" PRIu64
			", seq %" PRIu64 ") than this master (view %" PRIu64 ", seq %" PRIu64 ")",
			list[i].addr, list[i].view, list[i].seq, me.view, me.seq);
		return true;
	}
	return false;
}

/*
 * Is the leader last seen gone, so that a master elected now may serve
 * at once?  Only when its view was seen less than a TTL ago (no view won
 * since could have lapsed by its lease) and its RPC port refuses
 * connections (leader_gone).
 */
static bool gone_since(struct mc_master_ha *ha)
{
	return ha->prev.present && ha->prev_ms && mc_now_ms() - ha->prev_ms < ha->ttl_ms &&
	       strcmp(ha->prev.addr, ha->cfg.advertise) != 0 && leader_gone(ha->prev.addr);
}

enum elect_result { ELECT_CAMPAIGN, ELECT_WATCH, ELECT_STOP };

/*
 * The view is free: gather the candidates and say whether this master is
 * the one to campaign (ELECT_CAMPAIGN), someone else took the view
 * (ELECT_WATCH: it was remembered), or stop.  Coordinator errors never
 * hold an election past its bound.
 */
static enum elect_result elect(struct mc_master_ha *ha, uint64_t *last_log_ms)
{
	struct mc_coord_cand list[MC_COORD_CAND_MAX];
	uint64_t t0 = mc_now_ms();
	uint64_t gathered = t0 + MC_MAX(ha->ttl_ms / 5, (uint64_t)GATHER_MIN_MS);
	uint64_t bound = gathered + ha->ttl_ms;
	bool deferred = false;

	ha->posted_ms = 0; /* the final position, now */
	ha->npassed = 0;
	if (!cand_refresh(ha, true, last_log_ms))
		return ELECT_CAMPAIGN; /* the campaign meets the same coordinator */
	for (;;) {
		const struct mc_coord_cand *best = &ha->posted;
		struct mc_coord_view v;
		bool all = true;
		size_t n = 0;
		uint64_t now;

		if (mc_coord_read(ha->coord, ha->key, &v) == MC_OK && v.present) {
			remember(ha, &v);
			if (deferred)
				mc_info("%s took the view (version %" PRIu64 ") in %" PRIu64 " ms",
					v.addr, v.version, mc_now_ms() - t0);
			return ELECT_WATCH;
		}
		(void)cand_refresh(ha, true, last_log_ms);
		if (mc_coord_cand_list(ha->coord, ha->key, list, MC_ARRAY_SIZE(list), &n) !=
		    MC_OK) {
			note_error(ha, "listing the candidates", last_log_ms);
			n = 0;
			all = false;
		}
		for (size_t i = 0; i < n; i++) {
			if (strcmp(list[i].addr, ha->cfg.advertise) == 0)
				continue;
			all = all && list[i].electing;
			if (mc_coord_cand_better(&list[i], best))
				best = &list[i];
		}
		now = mc_now_ms();
		if (all || now >= gathered) {
			if (best == &ha->posted) {
				mc_debug("the most caught-up candidate (view %" PRIu64
					 ", seq %" PRIu64 ", %zu listed) after %" PRIu64 " ms",
					 ha->posted.view, ha->posted.seq, n, now - t0);
				return ELECT_CAMPAIGN;
			}
			if (!deferred) {
				deferred = true;
				atomic_fetch_add(&ha->n_defer, 1);
				mc_info("standing back: %s is more caught up (view %" PRIu64
					", seq %" PRIu64 ") than this master (view %" PRIu64
					", seq %" PRIu64 "); waiting for it to lead",
					best->addr, best->view, best->seq, ha->posted.view,
					ha->posted.seq);
			}
			if (now >= bound) {
				mc_warn("%s, more caught up, has not taken the view in %" PRIu64
					" ms; campaigning",
					best->addr, now - t0);
				for (size_t i = 0; i < n; i++)
					if (mc_coord_cand_better(&list[i], &ha->posted))
						memcpy(ha->passed[ha->npassed++], list[i].addr,
						       sizeof(ha->passed[0]));
				return ELECT_CAMPAIGN;
			}
		}
		if (!nap(ha, ELECT_POLL_MS))
			return ELECT_STOP;
	}
}

/*
 * Watch the view until it is gone (then campaign again).  Returns true
 * when this master ended it because its leader is gone (a poke, and its
 * RPC port refuses connections): the next campaign need not warm up.
 */
static bool watch(struct mc_master_ha *ha, uint64_t *last_log_ms)
{
	uint64_t period = MC_MAX(ha->ttl_ms / 10, (uint64_t)100);
	bool poked = false;

	while (nap_until(ha, period, &poked)) {
		struct mc_coord_view v;
		bool ended = false;

		cand_refresh(ha, false, last_log_ms);
		if (mc_coord_read(ha->coord, ha->key, &v) != MC_OK) {
			note_error(ha, "reading the view", last_log_ms);
			continue;
		}
		remember(ha, &v);
		if (!v.present)
			return false;
		if (!poked || strcmp(v.addr, ha->cfg.advertise) == 0 || !leader_gone(v.addr))
			continue;
		if (mc_coord_evict(ha->coord, ha->key, v.version, &ended) != MC_OK) {
			note_error(ha, "ending the view of a leader that is gone", last_log_ms);
			continue;
		}
		if (ended) {
			mc_info("the leader %s (view %" PRIu64
				") is gone: its log stream ended and "
				"its RPC port refuses connections; its view ended, campaigning "
				"without waiting for its lease",
				v.addr, v.version);
			atomic_fetch_add(&ha->n_evict, 1);
			remember(ha, &(struct mc_coord_view){0});
			return true;
		}
	}
	return false;
}

static void step_down(struct mc_master_ha *ha, bool was_serving)
{
	pthread_mutex_lock(&ha->lock);
	ha->seen.present = false; /* our own view, gone */
	pthread_mutex_unlock(&ha->lock);
	atomic_store(&ha->serving, false);
	atomic_store(&ha->valid_until, 0);
	atomic_fetch_add(&ha->n_down, 1);
	set_state(ha, MC_HA_STANDBY);
	mc_coord_resign(ha->coord);
	if (was_serving && ha->cfg.step_down)
		ha->cfg.step_down(ha->cfg.arg);
}

/* The warm-up found a better candidate: hand the view back unserved (no
 * step-down: nothing was led), counted as an election stood back from. */
static void give_up(struct mc_master_ha *ha)
{
	pthread_mutex_lock(&ha->lock);
	ha->seen.present = false;
	pthread_mutex_unlock(&ha->lock);
	atomic_store(&ha->valid_until, 0);
	atomic_fetch_add(&ha->n_defer, 1);
	mc_coord_resign(ha->coord);
	set_state(ha, MC_HA_STANDBY);
}

static void *ha_main(void *arg)
{
	struct mc_master_ha *ha = arg;
	uint64_t last_log_ms = 0;
	bool deposed = false, gone = false;

rejoin:
	deposed = false;
	while (!deposed) {
		struct mc_coord_view v = {0};
		uint64_t t0, won_ms, ver = 0;
		enum elect_result er;
		bool won = false, yielded = false;
		mc_status st;

		pthread_mutex_lock(&ha->lock);
		if (ha->stop) {
			pthread_mutex_unlock(&ha->lock);
			return NULL;
		}
		pthread_mutex_unlock(&ha->lock);
		set_state(ha, MC_HA_CANDIDATE);
		er = elect(ha, &last_log_ms);
		if (er == ELECT_STOP)
			return NULL;
		if (er == ELECT_WATCH) {
			set_state(ha, MC_HA_STANDBY);
			gone = watch(ha, &last_log_ms);
			continue;
		}
		if (!gone)
			gone = gone_since(ha);
		t0 = mc_now_ms();
		st = mc_coord_campaign(ha->coord, ha->key, ha->cfg.advertise,
				       (int64_t)ha->ttl_ms / 1000, &won, &ver);
		if (st != MC_OK) {
			note_error(ha, "campaigning", &last_log_ms);
			set_state(ha, MC_HA_STANDBY);
			if (!nap(ha, MC_MAX(ha->ttl_ms / 5, (uint64_t)200)))
				return NULL;
			continue;
		}
		if (!won) {
			set_state(ha, MC_HA_STANDBY);
			if (mc_coord_read(ha->coord, ha->key, &v) == MC_OK)
				remember(ha, &v);
			gone = watch(ha, &last_log_ms);
			continue;
		}
		/* won: the lease was granted no earlier than t0 */
		atomic_store(&ha->valid_until, t0 + ha->ttl_ms);
		cand_drop(ha); /* a leader is no candidate */
		atomic_store(&ha->version, ver);
		atomic_fetch_add(&ha->n_won, 1);
		v.present = true;
		v.version = ver;
		snprintf(v.addr, sizeof(v.addr), "%s", ha->cfg.advertise);
		remember(ha, &v);
		/*
		 * The warm-up lets a previous leader that may still be running
		 * reach its own deadline.  After the view of a leader that is
		 * gone was ended (watch), none runs: serve at once.  (A leader
		 * that only looked gone, its port refusing while it lives, would
		 * still answer no write: each waits for a standby's ACK, and the
		 * revoked lease deposes it at its next renewal, within TTL/3.)
		 */
		uint64_t warm = gone ? 0 : ha->ttl_ms;

		gone = false;
		mc_info("won the view %s (version %" PRIu64 "); warming up for %" PRIu64 " ms",
			ha->key, ver, warm);
		set_state(ha, MC_HA_LEADER_WARMUP);
		won_ms = mc_now_ms();
		if (!lead(ha, won_ms + warm, NULL, &yielded, &last_log_ms)) {
			if (yielded) {
				give_up(ha);
				continue; /* the better one campaigns; we stand back */
			}
			step_down(ha, false);
			continue; /* nothing was served: campaign again */
		}
		set_state(ha, MC_HA_RECOVERING);
		st = take_over(ha, ver, &won, &last_log_ms);
		if (st != MC_OK || !won) {
			pthread_mutex_lock(&ha->lock);
			deposed = !ha->stop;
			pthread_mutex_unlock(&ha->lock);
			if (st != MC_OK)
				mc_error("taking over failed, giving up the leadership: %s",
					 mc_last_error());
			else if (deposed)
				mc_error("lost the view %s while taking over; giving it up",
					 ha->key);
			step_down(ha, true);
			if (!deposed)
				return NULL;
			break;
		}
		atomic_store(&ha->serving, true);
		set_state(ha, MC_HA_SERVING);
		mc_info("serving as the leader, view version %" PRIu64 " (took %" PRIu64
			" ms from winning)",
			ver, mc_now_ms() - won_ms);
		if (lead(ha, 0, NULL, NULL, &last_log_ms))
			return NULL; /* never: it returns when leading ended */
		pthread_mutex_lock(&ha->lock);
		deposed = !ha->stop;
		pthread_mutex_unlock(&ha->lock);
		if (!deposed)
			return NULL;
		mc_error("stepped down: the view %s could not be renewed within its %" PRIu64
			 " ms lease; refusing every request, a standby again once the new "
			 "leader's tables are here",
			 ha->key, ha->ttl_ms);
		step_down(ha, true);
	}
	/* deposed: a fenced standby, /leader kept current for operators, until
	 * may_campaign says its tables are the new leader's again */
	do {
		struct mc_coord_view v;
		if (mc_coord_read(ha->coord, ha->key, &v) == MC_OK)
			remember(ha, &v);
		if (ha->cfg.may_campaign && ha->cfg.may_campaign(ha->cfg.arg)) {
			mc_info("rejoining the election: the tables are the leader's again");
			goto rejoin;
		}
	} while (nap(ha, MC_MAX(ha->ttl_ms / 10, (uint64_t)100)));
	return NULL;
}

void mc_master_ha_leader_lost(struct mc_master_ha *ha)
{
	pthread_mutex_lock(&ha->lock);
	ha->poked = true;
	pthread_cond_broadcast(&ha->cond);
	pthread_mutex_unlock(&ha->lock);
}

bool mc_master_ha_may_serve(struct mc_master_ha *ha, uint64_t now_ms)
{
	return atomic_load_explicit(&ha->serving, memory_order_acquire) &&
	       now_ms < atomic_load_explicit(&ha->valid_until, memory_order_acquire);
}

uint64_t mc_master_ha_view_version(struct mc_master_ha *ha)
{
	return atomic_load(&ha->version);
}

void mc_master_ha_info(struct mc_master_ha *ha, struct mc_master_ha_info *out)
{
	memset(out, 0, sizeof(*out));
	out->state = (enum mc_ha_state)atomic_load(&ha->state);
	out->leader = out->state == MC_HA_LEADER_WARMUP || out->state == MC_HA_SERVING ||
		      out->state == MC_HA_RECOVERING;
	out->serving = mc_master_ha_may_serve(ha, mc_now_ms());
	if (out->state == MC_HA_SERVING && !out->serving) {
		/* past the deadline, the thread has not noticed yet */
		out->state = MC_HA_STANDBY;
		out->leader = false;
	}
	out->elections_won = atomic_load(&ha->n_won);
	out->step_downs = atomic_load(&ha->n_down);
	out->transitions = atomic_load(&ha->n_trans);
	out->backend_errors = atomic_load(&ha->n_err);
	out->views_ended = atomic_load(&ha->n_evict);
	out->deferred = atomic_load(&ha->n_defer);
	out->cand_seq = atomic_load(&ha->cand_seq);
	pthread_mutex_lock(&ha->lock);
	if (ha->seen.present) {
		out->leader_known = true;
		snprintf(out->leader_addr, sizeof(out->leader_addr), "%s", ha->seen.addr);
		out->view_version = ha->seen.version;
	}
	pthread_mutex_unlock(&ha->lock);
}

static void ha_free(struct mc_master_ha *ha)
{
	mc_coord_close(ha->coord);
	mc_free((char *)ha->cfg.backend);
	mc_free((char *)ha->cfg.connstring);
	mc_free((char *)ha->cfg.cluster_id);
	mc_free((char *)ha->cfg.advertise);
	pthread_cond_destroy(&ha->cond);
	pthread_mutex_destroy(&ha->lock);
	mc_free(ha);
}

mc_status mc_master_ha_start(const struct mc_master_ha_config *cfg, struct mc_master_ha **out)
{
	struct mc_master_ha *ha;
	pthread_condattr_t ca;
	char *uri;
	mc_status st;

	if (!cfg->connstring || !*cfg->connstring)
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"--enable_ha needs --ha_backend_connstring (or --etcd_endpoints)");
	if (cfg->ttl_s < 1)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "HA lease TTL %" PRId64 " s: below 1 s",
				    cfg->ttl_s);
	ha = mc_calloc(1, sizeof(*ha));
	if (!ha)
		return MC_ERR_NOMEM;
	pthread_mutex_init(&ha->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ha->cond, &ca);
	pthread_condattr_destroy(&ca);
	ha->cfg = *cfg;
	ha->cfg.backend = mc_strdup(cfg->backend ? cfg->backend : "etcd");
	ha->cfg.connstring = mc_strdup(cfg->connstring);
	ha->cfg.cluster_id = mc_strdup(cfg->cluster_id ? cfg->cluster_id : "mooncake_cluster");
	ha->cfg.advertise = mc_strdup(cfg->advertise ? cfg->advertise : "");
	ha->ttl_ms = (uint64_t)cfg->ttl_s * 1000;
	atomic_init(&ha->state, MC_HA_STARTING);
	if (!ha->cfg.backend || !ha->cfg.connstring || !ha->cfg.cluster_id || !ha->cfg.advertise) {
		ha_free(ha);
		return MC_ERR_NOMEM;
	}
	mc_coord_view_key(ha->cfg.cluster_id, ha->key, sizeof(ha->key));
	if (strcmp(ha->cfg.backend, "etcd") == 0)
		uri = strncmp(cfg->connstring, "etcd://", 7) == 0
			      ? mc_strdup(cfg->connstring)
			      : mc_asprintf("etcd://%s", cfg->connstring);
	else if (strcmp(ha->cfg.backend, "redis") == 0)
		uri = strncmp(cfg->connstring, "redis://", 8) == 0
			      ? mc_strdup(cfg->connstring)
			      : mc_asprintf("redis://%s", cfg->connstring);
	else {
		ha_free(ha);
		return mc_set_error(MC_ERR_NOT_SUPPORTED,
				    "--ha_backend_type=%s is not supported in this build (etcd, "
				    "redis)",
				    cfg->backend);
	}
	if (!uri) {
		ha_free(ha);
		return MC_ERR_NOMEM;
	}
	/*
	 * Requests well inside the lease, so a dead coordinator is noticed in
	 * time.  The first one proves it answers: a busy coordinator gets a few
	 * tries over OPEN_TRIES_MS before the start fails (a master that
	 * cannot start is worse than one that waited a second).
	 */
	{
		uint64_t until = mc_now_ms() + OPEN_TRIES_MS;

		for (;;) {
			st = mc_coord_open(uri, (long)MC_MAX(ha->ttl_ms / 3, (uint64_t)300),
					   &ha->coord);
			if (st == MC_OK || st == MC_ERR_INVALID_PARAMS || mc_now_ms() >= until)
				break;
			mc_debug("HA coordinator %s: %s; trying again", cfg->connstring,
				 mc_last_error());
			usleep(200 * 1000);
		}
	}
	mc_free(uri);
	if (st != MC_OK) {
		st = mc_set_error(st, "HA %s coordinator %s unreachable: %s", ha->cfg.backend,
				  cfg->connstring, mc_last_error());
		ha_free(ha);
		return st;
	}
	if (pthread_create(&ha->thread, NULL, ha_main, ha) != 0) {
		ha_free(ha);
		return mc_set_error(MC_ERR_INTERNAL, "HA: cannot start the election thread");
	}
	pthread_setname_np(ha->thread, "mc-master-ha");
	mc_info("HA on %s %s: view key %s, lease %" PRId64 " s, advertising %s", ha->cfg.backend,
		cfg->connstring, ha->key, cfg->ttl_s, ha->cfg.advertise);
	*out = ha;
	return MC_OK;
}

void mc_master_ha_stop(struct mc_master_ha *ha)
{
	if (!ha)
		return;
	pthread_mutex_lock(&ha->lock);
	ha->stop = true;
	pthread_cond_broadcast(&ha->cond);
	pthread_mutex_unlock(&ha->lock);
	pthread_join(ha->thread, NULL);
	atomic_store(&ha->serving, false);
	mc_coord_resign(ha->coord); /* a clean stop hands over at once */
	ha_free(ha);
}

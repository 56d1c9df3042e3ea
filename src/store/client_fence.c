/*
 * store/client_fence.c - the holder's fence (docs/design.md "Gets without
 * the master: the location cache").
 *
 * A master expires a client whose pings it has not heard for its
 * client_ttl: it drops every replica in the client's segments, and their
 * blocks may come to mean nothing or, once a key is put again elsewhere,
 * an old value.  The client may still be up and reachable by its readers,
 * whose location caches can name those blocks for the rest of a lease.
 * So before the master can expire it, the client takes its mounted
 * segments' memory out of its engine (as an unmount does,
 * client_mount.c), and a cached read is refused by the engine's address
 * check.
 *
 * When: a master of minor 14 or later names its client_ttl and lease TTL
 * in every Ping answer (MC_STORE_FENCE_MINOR).  The master counts the
 * client's life from the iteration that handled its last ping, no earlier
 * than that ping's send time; the fence comes at the send time of the last
 * ping answered OK + client_ttl - max(ttl / 8, 50 ms) (the location
 * cache's margin, mc_store_loc_margin_ms).  A thread of its own waits for
 * that moment: the heartbeat may sit in a ping for the whole call timeout.
 * Against an older master nothing is fenced (and no client caches from
 * one, client_loccache.c).
 *
 * Back: a ping answered OK (the master never expired the client) puts the
 * memory back at once.  A ping answered NEED_REMOUNT (the master forgot
 * the client: it expired it, or it restarted) puts it back, and lets the
 * heartbeat remount, once the answer's remount_wait_ms is 0: the master
 * counts it to the end of the leases granted before its latest expiry of
 * any client (tick.c), the readers' cached locations of the client's
 * objects end before that.  A restarted master expired nobody yet: the
 * wait is 0 and the remount comes at once (a master replaying its log
 * keeps the client's segments for client_ttl only), and its readers'
 * caches went with their connections.  A new HA leader reached by the
 * connection (client.c, segments_for_new_leader) puts it back at once: the
 * readers reconnect to it too, and a reconnect empties their caches.
 *
 * Locks: the fence flags live under xseg_lock with the segments'
 * registration flags; the thread sleeps on hb_lock and hb_cond with the
 * heartbeat (close wakes both).
 */
#define MC_LOG_MODULE "store"
#include <errno.h>
#include <inttypes.h>
#include <time.h>

#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "store/client_int.h"
#include "te/engine.h"

#define IDLE_MS 1000 /* no fence due: look again after this */

/* When the fence is due (mc_now_ms), or UINT64_MAX: never (no TTL known,
 * no ping answered yet, or fenced already). */
static uint64_t fence_due(struct mc_store *s)
{
	uint64_t ttl = atomic_load(&s->fence_ttl_ms), ok = atomic_load(&s->ping_ok_ms);

	if (!ttl || !ok || atomic_load(&s->fenced))
		return UINT64_MAX;
	return ok + ttl - MC_MIN(ttl, mc_store_loc_margin_ms(ttl));
}

static void out_locked(struct mc_store *s, void *base, bool *registered, bool *fenced)
{
	if (!*registered)
		return;
	if (mc_te_deregister(s->te, base) != MC_OK)
		mc_warn("fence: deregistering segment memory %p: %s", base, mc_last_error());
	*registered = false;
	*fenced = true;
}

static void back_locked(struct mc_store *s, void *base, uint64_t size, const char *location,
			bool unmounted, bool *registered, bool *fenced)
{
	if (!*fenced)
		return;
	*fenced = false;
	if (unmounted || *registered)
		return; /* unmounted meanwhile: it stays out */
	if (mc_te_register(s->te, base, size, location, true) == MC_OK)
		*registered = true;
	else
		mc_warn("fence: registering segment memory %p again: %s", base, mc_last_error());
}

static void fence_locked(struct mc_store *s)
{
	if (s->seg_mounted && !atomic_load(&s->seg_unmounted))
		out_locked(s, s->seg, &s->seg_registered, &s->seg_fenced);
	for (size_t i = 0; i < s->n_xsegs; i++) {
		struct mc_store_xseg *x = &s->xsegs[i];

		if (!x->unmounted && !x->freeing)
			out_locked(s, x->base, &x->registered, &x->fenced);
	}
	atomic_store(&s->fenced, true);
	atomic_fetch_add(&s->fences, 1);
}

static void unfence_locked(struct mc_store *s)
{
	if (!atomic_load(&s->fenced))
		return;
	back_locked(s, s->seg, s->seg_size, NULL, atomic_load(&s->seg_unmounted),
		    &s->seg_registered, &s->seg_fenced);
	for (size_t i = 0; i < s->n_xsegs; i++) {
		struct mc_store_xseg *x = &s->xsegs[i];

		back_locked(s, x->base, x->size, x->location, x->unmounted || x->freeing,
			    &x->registered, &x->fenced);
	}
	atomic_store(&s->fenced, false);
	mc_info("fence lifted: segment memory of %s back in the engine", s->name);
}

/* Fence now if it is still due (a ping answered meanwhile moves it). */
static void fence_if_due(struct mc_store *s)
{
	uint64_t now;
	bool fenced = false;

	pthread_mutex_lock(&s->xseg_lock);
	now = mc_now_ms();
	if (fence_due(s) <= now) {
		fence_locked(s);
		fenced = true;
		mc_warn("fence: no ping of %s answered since %" PRIu64
			" ms ago, the master may expire it: its segment memory leaves the "
			"engine",
			s->name, now - atomic_load(&s->ping_ok_ms));
	}
	pthread_mutex_unlock(&s->xseg_lock);
	/* its own cached locations may name its own segment, which a get
	 * reads by memcpy, past the engine's check: they go, and none is
	 * added while fenced (client_loccache.c) */
	if (fenced)
		mc_store_loc_forget_all(s);
}

static void *fence_main(void *arg)
{
	struct mc_store *s = arg;

	pthread_mutex_lock(&s->hb_lock);
	while (!s->hb_stop) {
		uint64_t now = mc_now_ms(), due = fence_due(s);
		struct timespec ts;

		if (due <= now) {
			pthread_mutex_unlock(&s->hb_lock);
			fence_if_due(s);
			pthread_mutex_lock(&s->hb_lock);
			continue;
		}
		due = MC_MIN(due, now + IDLE_MS);
		ts.tv_sec = (time_t)(due / 1000);
		ts.tv_nsec = (long)(due % 1000) * 1000000L;
		pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts);
	}
	pthread_mutex_unlock(&s->hb_lock);
	return NULL;
}

mc_status mc_store_fence_start(struct mc_store *s)
{
	if (pthread_create(&s->fence_th, NULL, fence_main, s) != 0)
		return mc_set_error(MC_ERR_INTERNAL, "cannot start the fence thread");
	s->fence_started = true;
	return MC_OK;
}

void mc_store_fence_join(struct mc_store *s)
{
	if (!s->fence_started)
		return;
	pthread_join(s->fence_th, NULL); /* the caller set hb_stop and woke hb_cond */
	s->fence_started = false;
}

bool mc_store_fence_answered(struct mc_store *s, uint64_t sent_ms,
			     const struct mc_store_ping_resp *r)
{
	bool go = true;

	pthread_mutex_lock(&s->xseg_lock);
	atomic_store(&s->fence_ttl_ms, r->client_ttl_ms.present ? r->client_ttl_ms.value : 0);
	if (r->client_status == MC_STORE_CLIENT_OK) {
		atomic_store(&s->ping_ok_ms, sent_ms);
		unfence_locked(s);
	} else {
		if (atomic_load(&s->fenced))
			go = !r->remount_wait_ms.present || r->remount_wait_ms.value == 0;
		if (go) {
			unfence_locked(s);
			/* the remount that follows counts as a ping: pings missed
			 * while the master was away must not fence it at once */
			atomic_store(&s->ping_ok_ms, mc_now_ms());
		}
	}
	if (!r->client_ttl_ms.present) /* an older master: no fence */
		unfence_locked(s);
	pthread_mutex_unlock(&s->xseg_lock);
	return go;
}

void mc_store_fence_lift(struct mc_store *s)
{
	pthread_mutex_lock(&s->xseg_lock);
	atomic_store(&s->ping_ok_ms, mc_now_ms()); /* the remount counts as a ping */
	unfence_locked(s);
	pthread_mutex_unlock(&s->xseg_lock);
}

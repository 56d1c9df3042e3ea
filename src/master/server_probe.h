/*
 * master/server_probe.h - the mount probes (server_probe.c) and what of
 * server.c they share: a connection of the RPC loop (struct conn), the two
 * helpers that mark and fail one, and the HA fencing (ha_serving,
 * ha_refuse).  Not an interface: server.c and server_probe.c include it,
 * nothing else.
 */
#ifndef MC_MASTER_SERVER_PROBE_H
#define MC_MASTER_SERVER_PROBE_H

#include <arpa/inet.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/loop.h"
#include "base/time.h"
#include "master/ha.h"
#include "master/server_priv.h"
#include "master/wal.h"
#include "store/proto.h"

struct mc_auth_hs;
struct mc_master_job;

struct conn {
	struct mc_list link; /* in s->conns */
	struct mc_loop_fd io;
	struct mc_master_server *s;
	bool closing; /* no more reading; close once wbuf is sent */
	bool eof;     /* the peer shut its side */
	bool logged;  /* the reason for closing was logged */
	uint8_t *rbuf;
	size_t rlen, rcap;
	struct mc_buf wbuf;
	size_t woff;		   /* bytes of wbuf already sent */
	struct mc_master_job *job; /* unfinished request; no frame is read meanwhile */
	struct mount_probe *probe; /* a mount waiting for its probe; likewise */
	struct mc_list job_link;   /* in s->jobs while job */
	uint64_t last_active_ms;
	uint64_t frame_start_ms; /* when the partial frame in rbuf began; 0 = none */
	size_t frame_len;	 /* its announced length, once its header is in */
	char *why;		 /* why it is closing, until logged */
	bool wal_dirty;		 /* wbuf holds replies given since the log's state below */
	bool wal_lost;		 /* an append for one of them failed: never send them */
	uint64_t wal_epoch;	 /* s->wal_fail_epoch then */
	uint64_t wal_seq;	 /* the log's last seq then */
	bool ha_served;		 /* wbuf holds answers given as the serving HA leader */
	uint64_t ha_seq;	 /* the log seq they were given at: sent once standbys ack it */
	void *repl;		 /* a standby's stream (server_repl.c); NULL: a client */
	struct mc_auth_hs *hs;	 /* with a secret, until the peer proved it */
	char peer[INET6_ADDRSTRLEN + 8];
};

struct probe_target {
	char *name;	/* the segment's name */
	char *endpoint; /* its te_endpoint */
};

struct mount_probe {
	struct mc_list link;	  /* in s->probes (loop thread) */
	struct mc_list done_link; /* in s->probes_done once finished (probe_lock) */
	struct mc_master_server *s;
	struct conn *c; /* loop thread only; NULL once the connection is gone */
	pthread_t thread;
	bool launched;
	uint8_t *frame; /* the request, decoded again to apply it */
	size_t frame_len;
	uint32_t n;
	struct probe_target *t;
	uint64_t deadline_ms;
	/* written by the probe thread before it posts itself, read by the loop after */
	mc_status st;
	char why[640];
};

/*
 * Stop reading; the connection closes once what is queued is sent.  The
 * reason is logged by conn_event, after the state lock is released (this
 * may run under it, and a log line is a write to stderr).
 */
static inline void conn_fail(struct conn *c, const char *fmt, ...) MC_PRINTF(2, 3);
static inline void conn_fail(struct conn *c, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	if (c->closing)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	c->why = mc_strdup(why);
	c->closing = true;
}

/* c's wbuf got replies under the lock: note the log's state (lock held). */
static inline void conn_wal_mark(struct mc_master_server *s, struct conn *c)
{
	if (!s->wal)
		return;
	if (mc_master_wal_take_error(s->master))
		c->wal_lost = true;
	c->wal_dirty = true;
	c->wal_epoch = __atomic_load_n(&s->wal_fail_epoch, __ATOMIC_RELAXED);
	c->wal_seq = mc_wal_last_seq(s->wal);
}

/*
 * With --enable_ha only the serving leader answers: a standby, a leader
 * still warming up and one whose lease ran out on its own clock refuse
 * every request (spec 10: UNAVAILABLE_IN_CURRENT_MODE), so two masters
 * never both accept a write.  The clock is read here, not taken from the
 * loop's turn, so a master resumed after a pause refuses at once.
 */
static inline bool ha_serving(struct mc_master_server *s)
{
	return !s->ha || mc_master_ha_may_serve(s->ha, mc_now_ms());
}

static inline mc_status ha_refuse(struct mc_master_server *s, const struct mc_store_msg *msg,
				  struct mc_buf *out)
{
	struct mc_master_ha_info info;
	char text[400];

	mc_master_ha_info(s->ha, &info);
	if (info.leader_known && !info.leader)
		snprintf(text, sizeof(text),
			 "this master is not the leader (HA state %s); the leader is %s (view "
			 "%" PRIu64 ")",
			 mc_master_ha_state_name(info.state), info.leader_addr, info.view_version);
	else
		snprintf(text, sizeof(text), "this master is not serving (HA state %s)",
			 mc_master_ha_state_name(info.state));
	return mc_master_refuse(s->master, msg, MC_ERR_UNAVAILABLE_IN_CURRENT_MODE, text, out);
}

/* ---- server_probe.c: mount probes, on the loop thread ---- */

void mc_master_probe_free(struct mount_probe *p);
/* Apply or refuse p's mount into out (lock held). */
mc_status mc_master_probe_answer_locked(struct mc_master_server *s, struct mount_probe *p,
					struct mc_buf *out, uint64_t now_ms);
/* Does msg need a probe first?  Then c has one (lock held). */
bool mc_master_probe_new_locked(struct mc_master_server *s, struct conn *c, const uint8_t *frame,
				size_t len, const struct mc_store_msg *msg, uint64_t now_ms);
/* Start c's probe thread (lock not held). */
void mc_master_probe_launch(struct mc_master_server *s, struct conn *c, uint64_t now_ms);

#endif

/*
 * store/client.c - the Mooncake Store client (include/mooncake/store.h):
 * set-up and close, the global segment, liveness, and the calls that only
 * ask the master (exist, size, remove, replica descriptors).
 *
 * A client is three things: a connection to the master (master_conn.c),
 * a Transfer Engine that moves the bytes, and an anonymous mapping
 * registered with that engine, the global segment, which it mounts on the
 * master so other clients' replicas land in it.  Nothing stages through a
 * local buffer: put and get move the caller's memory, registered or not
 * (local_buffer_size is accepted and checked as upstream, and unused).
 * mc_store_setup builds them in that order (connection, engine, segment
 * mapped, registered, mounted, heartbeat) and teardown undoes whatever got
 * done, so a failed set-up and mc_store_close share one path.
 *
 * The client's other two parts live next door and share struct mc_store
 * through client_int.h: client_xfer.c moves objects (put and get, their
 * batch, zero-copy and ranged forms; the calls are client_calls.c and
 * client_get.c), client_session.c keeps batch sessions.  This file owns
 * the fields of struct mc_store: only setup and teardown write them (the
 * session trees and the heartbeat's flags aside), and those two never race
 * with other calls (store.h).
 *
 * Liveness: a heartbeat thread pings the master every second.  A failed
 * ping marks the client unhealthy for mc_store_health_check, and three in a
 * row reset the master connection (it reconnects on the next call); a
 * master that has forgotten this client (restarted, or it timed the client
 * out) answers NEED_REMOUNT, and the heartbeat mounts the segment again
 * under the same ids and has the engine put back the metadata entries its
 * metadata service lost (a master that embeds the HTTP metadata server
 * restarts empty).  Pings unanswered for nearly the master's client_ttl
 * take the segments' memory out of the engine until answered again (the
 * fence, client_fence.c, with a thread of its own).
 *
 * Threads: the caller's threads, the master connection's receiver, the
 * heartbeat and the fence.  Locks: hb_lock guards the heartbeat's sleep, so close wakes
 * it at once; sess_lock the session tables (client_session.c).  None is
 * held across a call into another module, so calls from many threads
 * overlap (docs/threads.md).
 */
#define MC_LOG_MODULE "store"
#include "mooncake/store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/http.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/client_config.h"
#include "store/client_http.h"
#include "store/client_int.h"
#include "store/client_metrics.h"
#include "store/dummy_client.h"
#include "store/dummy_proto.h"
#include "store/master_conn.h"
#include "store/offload_client.h"
#include "store/offload_server.h"
#include "store/proto.h"
#include "te/engine.h"

#define SEGMENT_ALIGN	 (16ull << 20) /* spec store.md 1.2: cachelib slab size */
#define DEFAULT_TENANT	 "default"
#define HEARTBEAT_MS	 1000
#define PING_FAILS_RESET 3

/* ---- small helpers ----------------------------------------------------------------------- */

struct mc_store_uuid mc_store_random_uuid(void)
{
	struct mc_store_uuid u = {0, 0};
	uint64_t v[2];
	if (getrandom(v, sizeof(v), 0) == (ssize_t)sizeof(v)) {
		u.first = v[0];
		u.second = v[1];
	} else {
		static atomic_uint_fast64_t counter;
		u.first = mc_now_ns() ^ ((uint64_t)getpid() << 32);
		u.second = atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull;
	}
	return u;
}

/* ---- heartbeat --------------------------------------------------------------------------- */

/* The segments mounted now: the global one, then the extra ones
 * (client_mount.c).  *out is allocated (NULL when out of memory: 0). */
static size_t segments_mounted(struct mc_store *s, struct mc_store_segment **out)
{
	struct mc_store_segment *xs, *segs;
	size_t nx, n = 0;

	nx = mc_store_xsegs_mounted(s, &xs);
	segs = mc_calloc(nx + 1, sizeof(*segs));
	*out = segs;
	if (!segs) {
		mc_free(xs);
		return 0;
	}
	if (s->seg_mounted && !atomic_load(&s->seg_unmounted)) {
		struct mc_store_segment *seg = &segs[n++];

		seg->id = s->seg_id;
		seg->name = mc_proto_str_c(s->name);
		seg->base = (uint64_t)(uintptr_t)s->seg;
		seg->size = s->seg_size;
		seg->te_endpoint = mc_proto_str_c(s->name);
		seg->protocol = mc_proto_str_c(s->protocol);
		seg->host_id = mc_proto_str_c(s->host_id);
	}
	if (nx)
		memcpy(&segs[n], xs, nx * sizeof(*xs));
	mc_free(xs);
	return n + nx;
}

static mc_status remount(struct mc_store *s)
{
	struct mc_store_segment *segs;
	struct mc_store_remount_req req = {s->client_id, 0, NULL};
	struct mc_store_msg resp;
	mc_status rc;

	pthread_mutex_lock(&s->remount_lock);
	req.n_segments = (uint32_t)segments_mounted(s, &segs);
	if (!segs) {
		pthread_mutex_unlock(&s->remount_lock);
		return MC_ERR_NOMEM;
	}
	req.segments = req.n_segments ? segs : NULL;
	/* the master forgot this client: its leases may be gone with it */
	mc_store_loc_forget_all(s);
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOUNT_SEGMENT, &req, &resp);
	pthread_mutex_unlock(&s->remount_lock);
	mc_free(segs);
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	return rc;
}

/*
 * The connection reached a new master leader (a failover, master_conn.c):
 * the segments it remounts there before any call.  Called with the
 * connection's send lock held, so remount_lock (held across calls) is
 * only tried: a mount or unmount under way may change the list after it
 * is read, and then the heartbeat remounts again once that call is done.
 * The embedded metadata entries and the disk segment are put back as on
 * the heartbeat's NEED_REMOUNT, which the new leader no longer answers.
 */
static size_t segments_for_new_leader(void *arg, struct mc_store_segment **out)
{
	struct mc_store *s = arg;
	bool locked = pthread_mutex_trylock(&s->remount_lock) == 0;
	size_t n;

	mc_te_meta_resync(s->te);
	mc_store_fence_lift(s); /* its readers reconnect too: their caches are gone */
	n = segments_mounted(s, out);
	if (locked)
		pthread_mutex_unlock(&s->remount_lock);
	else
		atomic_store(&s->remount_again, true);
	mc_store_offload_remount(s);
	return n;
}

static void heartbeat_once(struct mc_store *s, unsigned *fails)
{
	struct mc_store_client_req req = {s->client_id};
	struct mc_store_msg resp;
	uint64_t sent = mc_now_ms();
	mc_status rc = atomic_load(&s->pings_held)
			       ? mc_set_error(MC_ERR_RPC_FAIL, "ping held (a test)")
			       : mc_master_conn_call(s->conn, MC_STORE_PING, &req, &resp);

	if (rc != MC_OK) {
		atomic_store(&s->ping_failed, true);
		mc_debug("ping failed: %s", mc_last_error());
		if (++*fails >= PING_FAILS_RESET) {
			mc_master_conn_reset(s->conn);
			*fails = 0;
		}
		return;
	}
	*fails = 0;
	atomic_store(&s->ping_failed, false);
	mc_store_holder_spoil(s, sent, &resp.body.ping_resp); /* minor 15 */
	if (!mc_store_fence_answered(s, sent, &resp.body.ping_resp)) {
		/* fenced and forgotten: the remount waits for the readers' leases */
		mc_debug("remount of %s waits %" PRIu64 " ms (fenced)", s->name,
			 resp.body.ping_resp.remount_wait_ms.value);
		mc_store_msg_release(&resp);
		return;
	}
	if (atomic_exchange(&s->remount_again, false) &&
	    resp.body.ping_resp.client_status != MC_STORE_CLIENT_NEED_REMOUNT) {
		rc = remount(s);
		if (rc != MC_OK) {
			atomic_store(&s->remount_again, true);
			mc_warn("remount of segment %s failed: %s", s->name, mc_last_error());
		}
	}
	if (resp.body.ping_resp.client_status == MC_STORE_CLIENT_NEED_REMOUNT) {
		/* a restarted master may have taken its embedded metadata server's
		 * entries with it: put the engine's back now, before the remount,
		 * whose mount probe looks for the engine's rpc_meta record there */
		mc_te_meta_resync(s->te);
		rc = remount(s);
		if (rc != MC_OK)
			mc_warn("remount of segment %s failed: %s", s->name, mc_last_error());
		else
			mc_info("remounted segment %s", s->name);
		mc_store_offload_remount(s);
	}
	mc_store_msg_release(&resp);
}

static void *heartbeat_main(void *arg)
{
	struct mc_store *s = arg;
	unsigned fails = 0;
	bool busy;
	pthread_mutex_lock(&s->hb_lock);
	while (!s->hb_stop) {
		struct timespec ts;
		uint64_t until;
		pthread_mutex_unlock(&s->hb_lock);
		(void)mc_store_unmounted_dereg(s); /* unmounted memory due out */
		heartbeat_once(s, &fails);
		mc_store_credit_idle(s); /* unused put credits go back */
		/* copy and move tasks (client_tasks.c); busy: ping again, no wait */
		busy = !atomic_load(&s->ping_failed) && mc_store_tasks_poll(s);
		until = mc_now_ms() + (busy ? 0 : HEARTBEAT_MS);
		pthread_mutex_lock(&s->hb_lock);
		for (;;) { /* an unmount's deregistration may come due first */
			uint64_t due = MC_MIN(until, (uint64_t)atomic_load(&s->dereg_due));

			if (s->hb_stop || mc_now_ms() >= due)
				break;
			ts.tv_sec = (time_t)(due / 1000);
			ts.tv_nsec = (long)(due % 1000) * 1000000L;
			pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts);
		}
	}
	pthread_mutex_unlock(&s->hb_lock);
	return NULL;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

mc_status mc_store_new(struct mc_store **out)
{
	struct mc_store *s;
	pthread_condattr_t a;
	if (!out)
		return MC_ERR_INVALID_PARAMS;
	s = mc_calloc(1, sizeof(*s));
	if (!s)
		return MC_ERR_NOMEM;
	s->metrics = mc_calloc(1, sizeof(*s->metrics));
	if (!s->metrics) {
		mc_free(s);
		return MC_ERR_NOMEM;
	}
	pthread_mutex_init(&s->hb_lock, NULL);
	pthread_mutex_init(&s->sess_lock, NULL);
	pthread_mutex_init(&s->scratch_lock, NULL);
	pthread_mutex_init(&s->credits.lock, NULL);
	mc_store_xsegs_init(s);
	pthread_cond_init(&s->sess_cond, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&s->hb_cond, &a);
	pthread_cond_init(&s->ohb_cond, &a);
	pthread_condattr_destroy(&a);
	*out = s;
	return MC_OK;
}

void mc_store_free(struct mc_store *s)
{
	if (!s)
		return;
	mc_store_close(s);
	pthread_mutex_destroy(&s->hb_lock);
	pthread_cond_destroy(&s->hb_cond);
	pthread_cond_destroy(&s->ohb_cond);
	pthread_mutex_destroy(&s->sess_lock);
	pthread_mutex_destroy(&s->scratch_lock);
	pthread_mutex_destroy(&s->credits.lock);
	pthread_mutex_destroy(&s->xseg_lock);
	pthread_cond_destroy(&s->xseg_idle);
	pthread_mutex_destroy(&s->remount_lock);
	pthread_cond_destroy(&s->sess_cond);
	mc_free(s->metrics);
	mc_free(s);
}

/* The end of the highest write peers have made into the global segment,
 * as an offset (mem/hostmem.h: what a background pre-fault follows). */
static uint64_t seg_write_front(void *arg)
{
	struct mc_store *s = arg;
	uint64_t base = (uint64_t)(uintptr_t)s->seg,
		 end = mc_memreg_write_end(&s->te->memreg, base);
	return end > base ? end - base : 0;
}

/* Undo whatever setup got done; safe on a partly set up client. */
static void teardown(struct mc_store *s)
{
	struct mc_store_msg resp;

	mc_store_http_close(s); /* first: its handlers read the rest */
	if (s->hb_started) {
		pthread_mutex_lock(&s->hb_lock);
		s->hb_stop = true;
		pthread_cond_broadcast(&s->hb_cond);
		pthread_mutex_unlock(&s->hb_lock);
		pthread_join(s->hb, NULL);
		s->hb_started = false;
	}
	mc_store_fence_join(s); /* woken with the heartbeat */
	mc_store_sessions_drop_all(s);
	mc_store_fs_stop(s); /* its files written and reported while the master is there */
	mc_store_offload_stop(s);
	mc_store_xsegs_free(s);
	mc_store_scratch_free(s);
	if (s->seg_mounted) {
		struct mc_store_unmount_req req = {s->client_id, s->seg_id};
		if (mc_master_conn_call(s->conn, MC_STORE_UNMOUNT_SEGMENT, &req, &resp) == MC_OK)
			mc_store_msg_release(&resp);
		else
			mc_warn("unmount of segment %s failed: %s", s->name, mc_last_error());
		s->seg_mounted = false;
	}
	if (s->seg_registered)
		mc_te_deregister(s->te, s->seg);
	s->seg_registered = false;
	mc_hostmem_unmap(s->seg_mem);
	s->seg_mem = NULL;
	s->seg = NULL;
	s->seg_size = 0;
	mc_store_loc_free_all(s); /* before the connection its entries name */
	mc_store_credit_fini(s);  /* given back while the connection is there */
	mc_master_conn_free(s->conn);
	s->conn = NULL;
	mc_offload_pool_free(s->offload_pool);
	s->offload_pool = NULL;
	if (s->own_te)
		mc_te_free(s->te);
	s->te = NULL;
	s->own_te = false;
	s->name[0] = '\0';
	s->ready = false;
}

static bool is_loopback_host(const char *h)
{
	return !*h || strcmp(h, "localhost") == 0 || strcmp(h, "127.0.0.1") == 0 ||
	       strcmp(h, "0.0.0.0") == 0 || strcmp(h, "::1") == 0 || strcmp(h, "::") == 0;
}

/* Create the engine named after local_hostname, choosing a port when none is given. */
static mc_status create_engine(struct mc_store *s, const struct mc_store_params *p)
{
	struct mc_te_params tp;
	char host[256];
	uint16_t port = 0;
	mc_status rc = MC_ERR_INVALID_PARAMS;
	const char *lh = p->local_hostname && *p->local_hostname ? p->local_hostname : "localhost";

	if (!mc_sock_split_hostport(lh, host, sizeof(host), &port, 0) || !host[0])
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bad local_hostname %s", lh);
	memset(&tp, 0, sizeof(tp));
	tp.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL |
			MC_TE_PARAM_DEVICES;
	tp.metadata_uri = p->metadata_server;
	tp.protocol = s->protocol;
	tp.devices = p->rdma_devices; /* TCP: two or more NICs become paths */
	if (strcmp(host, "0.0.0.0") != 0 && strcmp(host, "::") != 0) {
		tp.field_mask |= MC_TE_PARAM_HOST;
		tp.host = host;
	}
	if (port) {
		/* the name's port becomes the engine's RPC port when it is free */
		tp.local_name = lh;
		tp.field_mask |= MC_TE_PARAM_RPC_PORT;
		tp.rpc_port = port;
		rc = mc_te_new(&tp, &s->te);
		if (rc == MC_ERR_SOCKET) {
			tp.field_mask &= ~(uint64_t)MC_TE_PARAM_RPC_PORT;
			rc = mc_te_new(&tp, &s->te);
		}
	} else {
		struct mc_store_client_env env;
		int64_t lo, hi, tries;
		mc_store_client_env_load(&env);
		lo = env.min_port;
		hi = env.max_port;
		tries = env.setup_retries;
		mc_store_client_env_release(&env);
		char name[300];
		uint64_t rnd;
		if (hi < lo) {
			lo = 12300;
			hi = 14300;
		}
		for (int64_t t = 0; t < tries; t++) {
			if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
				rnd = mc_now_ns();
			port = (uint16_t)(lo + (int64_t)(rnd % (uint64_t)(hi - lo + 1)));
			snprintf(name, sizeof(name), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
				 port);
			tp.local_name = name;
			tp.field_mask |= MC_TE_PARAM_RPC_PORT;
			tp.rpc_port = port;
			rc = mc_te_new(&tp, &s->te);
			if (rc == MC_OK)
				break;
			mc_debug("engine on port %u: %s; retrying", port, mc_last_error());
		}
	}
	if (rc != MC_OK)
		return rc;
	s->own_te = true;
	return MC_OK;
}

static mc_status mount_segment(struct mc_store *s)
{
	struct mc_store_mount_req req;
	struct mc_store_msg resp;
	mc_status rc;

	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	req.segment.id = s->seg_id;
	req.segment.name = mc_proto_str_c(s->name);
	req.segment.base = (uint64_t)(uintptr_t)s->seg;
	req.segment.size = s->seg_size;
	req.segment.te_endpoint = mc_proto_str_c(s->name);
	req.segment.protocol = mc_proto_str_c(s->protocol);
	req.segment.host_id = mc_proto_str_c(s->host_id);
	rc = mc_master_conn_call(s->conn, MC_STORE_MOUNT_SEGMENT, &req, &resp);
	if (rc != MC_OK)
		return rc;
	mc_store_msg_release(&resp);
	s->seg_mounted = true;
	atomic_store(&s->seg_unmounted, false);
	return MC_OK;
}

mc_status mc_store_setup(struct mc_store *s, const struct mc_store_params *p)
{
	char host[256], why[400];
	uint16_t port;
	mc_status rc;

	if (!s || !p)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup: NULL argument");
	if (s->ready)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store client is already set up");
	if (!p->engine && (!p->metadata_server || !*p->metadata_server))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup: no metadata_server");
	if (p->local_buffer_size > (1ull << 40))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "local_buffer_size above 1 TiB");
	snprintf(s->protocol, sizeof(s->protocol), "%s",
		 p->protocol && *p->protocol ? p->protocol : "tcp");
	snprintf(s->tenant, sizeof(s->tenant), "%s",
		 p->tenant_id && *p->tenant_id ? p->tenant_id : DEFAULT_TENANT);
	s->client_id = mc_store_random_uuid();
	{
		struct mc_store_client_env env;
		mc_store_client_env_load(&env);
		s->local_memcpy = mc_store_client_env_memcpy(&env);
		s->verify = env.verify && !p->disable_verify;
		s->trailers = s->verify && env.chunk_trailers;
		/* every cached read is checked: no cache without checksums */
		rc = mc_store_loc_init(s, s->verify ? (uint64_t)env.location_cache : 0);
		mc_store_credit_init(s, env.put_credit, env.put_credit_ms);
		mc_store_client_env_release(&env);
		if (rc != MC_OK)
			goto err;
	}
	s->hb_stop = false;
	atomic_store(&s->ping_failed, false);
	atomic_store(&s->offload_reads, 0);
	{
		struct mc_offload_config oc;
		mc_offload_config_init(&oc);
		rc = mc_offload_pool_new(oc.rpc_timeout_ms, &s->offload_pool);
		if (rc != MC_OK)
			goto err;
	}
	mc_client_metrics_init(s->metrics);

	rc = mc_master_conn_new(p->master_server_addr, &s->conn);
	if (rc != MC_OK)
		goto err;
	mc_master_conn_set_metrics(s->conn, s->metrics);
	mc_master_conn_on_new_leader(s->conn, &s->client_id, segments_for_new_leader, s);
	if (p->engine) {
		s->te = p->engine;
		s->own_te = false;
	} else {
		rc = create_engine(s, p);
		if (rc != MC_OK)
			goto err;
	}
	snprintf(s->name, sizeof(s->name), "%s", mc_te_local_name(s->te));
	if (!mc_sock_split_hostport(s->name, host, sizeof(host), &port, 0) ||
	    is_loopback_host(host))
		host[0] = '\0';
	snprintf(s->host_id, sizeof(s->host_id), "%s", host);

	if (p->enable_ssd_offload) {
		rc = mc_store_offload_open(s, p->ssd_offload_path);
		if (rc != MC_OK)
			goto err;
	}
	if (p->global_segment_size) {
		struct mc_hostmem_config hc;
		mc_hostmem_config_load(&hc);
		rc = mc_hostmem_map(p->global_segment_size, SEGMENT_ALIGN, &hc, "global segment",
				    &s->seg_mem);
		mc_config_entry_release(mc_hostmem_config_table, mc_hostmem_config_table_len, &hc);
		if (rc != MC_OK)
			goto err;
		s->seg = mc_hostmem_addr(s->seg_mem);
		s->seg_size = p->global_segment_size;
		rc = mc_te_register(s->te, s->seg, s->seg_size, NULL, true);
		if (rc != MC_OK)
			goto err;
		s->seg_registered = true;
		/* a background pre-fault follows the engine's writes into it */
		mc_hostmem_follow(s->seg_mem, seg_write_front, s);
		s->seg_id = mc_store_random_uuid();
		rc = mount_segment(s);
		if (rc != MC_OK)
			goto err;
	}
	rc = mc_store_offload_start(s);
	if (rc != MC_OK)
		goto err;
	if (pthread_create(&s->hb, NULL, heartbeat_main, s) != 0) {
		rc = mc_set_error(MC_ERR_INTERNAL, "cannot start the heartbeat thread");
		goto err;
	}
	s->hb_started = true;
	rc = mc_store_fence_start(s);
	if (rc != MC_OK)
		goto err;
	s->ready = true;
	if (p->enable_http_server) {
		rc = mc_store_http_open(s, p->http_port);
		if (rc != MC_OK)
			goto err;
	}
	mc_info("store client %s set up: segment %" PRIu64 " bytes, master %s", s->name,
		s->seg_size, p->master_server_addr ? p->master_server_addr : "127.0.0.1:50051");
	return MC_OK;
err:
	snprintf(why, sizeof(why), "%s", mc_last_error());
	teardown(s);
	mc_set_error(rc, "store setup failed: %s", why);
	return rc;
}

mc_status mc_store_close(struct mc_store *s)
{
	if (s && s->dummy) {
		mc_dummy_close(s->dummy);
		s->dummy = NULL;
		s->name[0] = 0;
		return MC_OK;
	}
	if (!s || !s->ready)
		return MC_OK;
	teardown(s);
	return MC_OK;
}

mc_status mc_store_alloc_from_mem_pool(struct mc_store *s, size_t size, void **out)
{
	if (!out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "alloc_from_mem_pool: NULL out");
	*out = NULL;
	if (!s || !s->dummy)
		return MC_OK; /* a real client has no shared pool (upstream returns 0) */
	return mc_store_shm_alloc(size, out);
}

int mc_store_health_check(struct mc_store *s)
{
	if (s && s->dummy)
		return mc_dummy_health(s->dummy);
	if (!s || !s->ready)
		return 1;
	return atomic_load(&s->ping_failed) ? 2 : 0;
}

const char *mc_store_hostname(const struct mc_store *s)
{
	return s ? s->name : "";
}

struct mc_te *mc_store_engine(const struct mc_store *s)
{
	return s ? s->te : NULL;
}

uint64_t mc_store_offload_rpc_read_count(struct mc_store *s)
{
	return s ? atomic_load(&s->offload_reads) : 0;
}

uint16_t mc_store_http_port(const struct mc_store *s)
{
	return s && s->http ? mc_http_port(s->http) : 0;
}

mc_status mc_store_segment_info(struct mc_store *s, struct mc_store_segment_info *out)
{
	static const char *const modes[] = {"off", "mount", "background"};
	struct mc_hostmem_stats st;
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	memset(out, 0, sizeof(*out));
	if (!s->seg_mem)
		return MC_OK;
	mc_hostmem_stats(s->seg_mem, &st);
	out->size = st.len;
	out->populated = st.populated;
	out->huge_bytes = st.huge_bytes;
	snprintf(out->pages, sizeof(out->pages), "%s", st.pages);
	snprintf(out->prefault, sizeof(out->prefault), "%s", modes[st.prefault]);
	out->prefault_done = st.prefault_done;
	return MC_OK;
}

/* ---- a dummy client's calls (dummy_client.c) ---------------------------------------- */

/* A batch of keys through the daemon: ints (exist) or statuses (remove). */
static mc_status dummy_batch(struct mc_store *s, uint16_t type, const char *const *keys, size_t n,
			     bool force, int *ints, mc_status *sts)
{
	int64_t *r;
	mc_status rc;
	if (n && !keys)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "NULL keys");
	if (n == 0)
		return MC_OK;
	r = mc_calloc(n, sizeof(*r));
	if (!r)
		return MC_ERR_NOMEM;
	rc = mc_dummy_keys(s->dummy, type, keys, n, force, r);
	for (size_t i = 0; i < n; i++) {
		if (ints)
			ints[i] = (int)r[i];
		if (sts)
			sts[i] = (mc_status)r[i];
	}
	mc_free(r);
	return rc;
}

mc_status mc_store_setup_dummy(struct mc_store *s, uint64_t mem_pool_size,
			       uint64_t local_buffer_size, const char *server_address)
{
	mc_status rc;
	(void)mem_pool_size; /* upstream accepts it and uses it for nothing */
	if (!s)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup_dummy: NULL client");
	if (s->ready || s->dummy)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup_dummy: already set up");
	rc = mc_dummy_open(server_address, local_buffer_size, &s->dummy);
	if (rc == MC_OK)
		snprintf(s->name, sizeof(s->name), "%s", mc_dummy_hostname(s->dummy));
	else
		mc_warn("setup_dummy(%s): %s (%s)", server_address ? server_address : "(null)",
			mc_last_error(), mc_status_name(rc));
	return rc;
}

/* ---- metadata calls ---------------------------------------------------------------------- */

int mc_store_is_exist(struct mc_store *s, const char *key)
{
	if (s && s->dummy) {
		int64_t r;
		mc_status drc = mc_dummy_keys(s->dummy, MC_DUMMY_MSG_EXIST, &key, 1, false, &r);
		return drc == MC_OK ? (int)r : drc;
	}
	struct mc_store_key_req req;
	struct mc_store_msg resp;
	int ret;
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc != MC_OK)
		return rc;
	req.tenant = mc_store_tenant(s);
	req.key = mc_proto_str_c(key);
	rc = mc_master_conn_call(s->conn, MC_STORE_EXIST_KEY, &req, &resp);
	if (rc == MC_ERR_OBJECT_NOT_FOUND)
		return 0;
	if (rc != MC_OK)
		return rc;
	ret = resp.body.exist_resp.exists ? 1 : 0;
	mc_store_msg_release(&resp);
	return ret;
}

/* Fill a keys request; kv has room for n. */
static mc_status keys_req(struct mc_store *s, const char *const *keys, size_t n,
			  struct mc_proto_str *kv, struct mc_store_keys_req *req)
{
	for (size_t i = 0; i < n; i++) {
		mc_status rc = mc_store_check_key(keys[i]);
		if (rc != MC_OK)
			return rc;
		kv[i] = mc_proto_str_c(keys[i]);
	}
	req->tenant = mc_store_tenant(s);
	req->n_keys = (uint32_t)n;
	req->keys = kv;
	req->want = (struct mc_proto_opt_u64){false, 0}; /* minor 9: chunk sums, none */
	return MC_OK;
}

mc_status mc_store_batch_is_exist(struct mc_store *s, const char *const *keys, size_t n,
				  int *results)
{
	if (s && s->dummy)
		return dummy_batch(s, MC_DUMMY_MSG_EXIST, keys, n, false, results, NULL);
	struct mc_store_keys_req req;
	struct mc_store_msg resp;
	struct mc_proto_str *kv;
	mc_status rc = mc_store_check_ready(s);

	if (rc == MC_OK && n && (!keys || !results))
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_is_exist: NULL arrays");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	kv = mc_calloc(n, sizeof(*kv));
	rc = kv ? keys_req(s, keys, n, kv, &req) : MC_ERR_NOMEM;
	if (rc == MC_OK)
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_EXIST_KEY, &req, &resp);
	mc_free(kv);
	if (rc == MC_OK && resp.body.batch_exist_resp.n_items != n) {
		mc_store_msg_release(&resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "batch exist: wrong item count");
	}
	if (rc != MC_OK) {
		for (size_t i = 0; i < n; i++)
			results[i] = rc;
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		const struct mc_store_exist_item *it = &resp.body.batch_exist_resp.items[i];
		if (it->status == MC_OK)
			results[i] = it->exists ? 1 : 0;
		else
			results[i] = it->status == MC_ERR_OBJECT_NOT_FOUND ? 0 : it->status;
	}
	mc_store_msg_release(&resp);
	return MC_OK;
}

int64_t mc_store_get_size(struct mc_store *s, const char *key)
{
	if (s && s->dummy) {
		int64_t r;
		mc_status drc = mc_dummy_keys(s->dummy, MC_DUMMY_MSG_GET_SIZE, &key, 1, false, &r);
		return drc == MC_OK ? r : drc;
	}
	struct mc_store_msg resp;
	int64_t size;
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc != MC_OK)
		return rc;
	rc = mc_store_lookup(s, key, &resp);
	if (rc != MC_OK)
		return rc;
	if (resp.body.replica_list.n_replicas == 0)
		size = mc_set_error(MC_ERR_OBJECT_NOT_FOUND, "%s has no replica", key);
	else
		size = (int64_t)resp.body.replica_list.replicas[0].size;
	mc_store_msg_release(&resp);
	return size;
}

mc_status mc_store_remove(struct mc_store *s, const char *key, bool force)
{
	if (s && s->dummy) {
		int64_t r;
		mc_status drc = mc_dummy_keys(s->dummy, MC_DUMMY_MSG_REMOVE, &key, 1, force, &r);
		return drc;
	}
	struct mc_store_remove_req req;
	struct mc_store_msg resp;
	uint64_t sent;
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc != MC_OK)
		return rc;
	req.tenant = mc_store_tenant(s);
	req.key = mc_proto_str_c(key);
	req.force = force;
	mc_store_loc_forget(s, key, strlen(key));
	sent = mc_now_ms();
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOVE, &req, &resp);
	mc_store_loc_forget(s, key, strlen(key)); /* a get meanwhile may have cached it */
	if (rc == MC_OK) { /* a leased object's old blocks: spoiled before we return */
		mc_store_spoil(s, resp.body.remove_resp.spoil, resp.body.remove_resp.n_spoil,
			       &resp.body.remove_resp.spoil_ms, sent);
		mc_store_msg_release(&resp);
	}
	return rc;
}

int64_t mc_store_remove_by_regex(struct mc_store *s, const char *pattern, bool force)
{
	if (s && s->dummy)
		return pattern ? mc_dummy_remove_many(s->dummy, pattern, force)
			       : mc_set_error(MC_ERR_INVALID_PARAMS,
					      "remove_by_regex: NULL pattern");
	struct mc_store_remove_regex_req req;
	struct mc_store_msg resp;
	int64_t count;
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK && !pattern)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "remove_by_regex: NULL pattern");
	if (rc != MC_OK)
		return rc;
	req.tenant = mc_store_tenant(s);
	req.pattern = mc_proto_str_c(pattern);
	req.force = force;
	mc_store_loc_forget_all(s);
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOVE_BY_REGEX, &req, &resp);
	mc_store_loc_forget_all(s);
	if (rc != MC_OK)
		return rc;
	count = resp.body.count_resp.count;
	mc_store_msg_release(&resp);
	return count;
}

int64_t mc_store_batch_replica_clear(struct mc_store *s, const char *const *keys, size_t n,
				     const char *segment_name, bool *cleared)
{
	if (s && s->dummy)
		return mc_store_dummy_replica_clear(s, keys, n, segment_name, cleared);
	struct mc_store_replica_clear_req req;
	struct mc_store_keys_req kr;
	const struct mc_store_keys_resp *got;
	struct mc_store_msg resp;
	struct mc_proto_str *kv;
	size_t j = 0, ngot;
	mc_status rc = mc_store_check_ready(s);

	for (size_t i = 0; cleared && i < n; i++)
		cleared[i] = false;
	if (rc == MC_OK && n && !keys)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_replica_clear: NULL keys");
	if (rc == MC_OK && n > UINT32_MAX)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_replica_clear: too many keys");
	if (rc != MC_OK || n == 0)
		return rc;
	kv = mc_calloc(n, sizeof(*kv));
	if (!kv)
		return MC_ERR_NOMEM;
	rc = keys_req(s, keys, n, kv, &kr);
	if (rc == MC_OK) {
		req.client_id = s->client_id;
		req.tenant = kr.tenant;
		req.segment_name = mc_proto_str_c(segment_name ? segment_name : "");
		req.n_keys = kr.n_keys;
		req.keys = kv;
		mc_store_loc_forget_keys(s, keys, n);
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_REPLICA_CLEAR, &req, &resp);
		mc_store_loc_forget_keys(s, keys, n);
	}
	mc_free(kv);
	if (rc != MC_OK)
		return rc;
	/* the cleared keys come back as a subsequence of the request */
	got = &resp.body.keys_resp;
	ngot = got->n_keys;
	for (size_t i = 0; i < n && j < ngot; i++) {
		if (got->keys[j].len == strlen(keys[i]) &&
		    !memcmp(got->keys[j].ptr, keys[i], got->keys[j].len)) {
			if (cleared)
				cleared[i] = true;
			j++;
		}
	}
	mc_store_msg_release(&resp);
	if (j != ngot)
		return mc_set_error(MC_ERR_PROTOCOL,
				    "batch_replica_clear: unexpected key in answer");
	return (int64_t)j;
}

int64_t mc_store_remove_all(struct mc_store *s, bool force)
{
	if (s && s->dummy)
		return mc_dummy_remove_many(s->dummy, NULL, force);
	struct mc_store_remove_all_req req;
	struct mc_store_msg resp;
	int64_t count;
	mc_status rc = mc_store_check_ready(s);
	if (rc != MC_OK)
		return rc;
	req.tenant = mc_store_tenant(s); /* this client's tenant, never "" (= all) */
	req.force = force;
	mc_store_loc_forget_all(s);
	rc = mc_master_conn_call(s->conn, MC_STORE_REMOVE_ALL, &req, &resp);
	mc_store_loc_forget_all(s);
	if (rc != MC_OK)
		return rc;
	count = resp.body.count_resp.count;
	mc_store_msg_release(&resp);
	return count;
}

mc_status mc_store_batch_remove(struct mc_store *s, const char *const *keys, size_t n, bool force,
				mc_status *results)
{
	if (s && s->dummy)
		return dummy_batch(s, MC_DUMMY_MSG_REMOVE, keys, n, force, NULL, results);
	struct mc_store_batch_remove_req req;
	struct mc_store_keys_req kr;
	struct mc_store_msg resp;
	struct mc_proto_str *kv;
	uint64_t sent = 0;
	mc_status rc = mc_store_check_ready(s), first = MC_OK;

	if (rc == MC_OK && n && !keys)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "batch_remove: NULL keys");
	if (rc != MC_OK || n == 0) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	kv = mc_calloc(n, sizeof(*kv));
	if (!kv)
		return MC_ERR_NOMEM;
	rc = keys_req(s, keys, n, kv, &kr);
	if (rc == MC_OK) {
		req.tenant = kr.tenant;
		req.force = force;
		req.n_keys = kr.n_keys;
		req.keys = kv;
		mc_store_loc_forget_keys(s, keys, n);
		sent = mc_now_ms();
		rc = mc_master_conn_call(s->conn, MC_STORE_BATCH_REMOVE, &req, &resp);
		mc_store_loc_forget_keys(s, keys, n);
	}
	mc_free(kv);
	if (rc == MC_OK && resp.body.batch_remove_resp.n_items != n) {
		mc_store_msg_release(&resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "batch remove: wrong item count");
	}
	if (rc != MC_OK) {
		for (size_t i = 0; results && i < n; i++)
			results[i] = rc;
		return rc;
	}
	mc_store_spoil(s, resp.body.batch_remove_resp.spoil, resp.body.batch_remove_resp.n_spoil,
		       &resp.body.batch_remove_resp.spoil_ms, sent);
	for (size_t i = 0; i < n; i++) {
		mc_status st = (mc_status)resp.body.batch_remove_resp.statuses[i];
		if (results)
			results[i] = st;
		if (st != MC_OK && first == MC_OK)
			first = st;
	}
	mc_store_msg_release(&resp);
	return first;
}

static void copy_field(char *dst, size_t cap, const struct mc_proto_str *v)
{
	size_t n = MC_MIN((size_t)v->len, cap - 1);
	if (n)
		memcpy(dst, v->ptr, n);
	dst[n] = '\0';
}

int64_t mc_store_get_replica_desc(struct mc_store *s, const char *key,
				  struct mc_store_replica_desc *out, size_t cap)
{
	if (s && s->dummy)
		return mc_store_dummy_replica_desc(s, key, out, cap);
	struct mc_store_msg resp;
	int64_t n;
	mc_status rc = mc_store_check_ready(s);
	if (rc == MC_OK)
		rc = mc_store_check_key(key);
	if (rc == MC_OK && cap && !out)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS, "get_replica_desc: NULL out");
	if (rc != MC_OK)
		return rc;
	rc = mc_store_lookup(s, key, &resp);
	if (rc != MC_OK)
		return rc;
	n = resp.body.replica_list.n_replicas;
	for (size_t i = 0; i < (size_t)n && i < cap; i++) {
		const struct mc_store_replica *r = &resp.body.replica_list.replicas[i];
		struct mc_store_replica_desc *d = &out[i];
		memset(d, 0, sizeof(*d));
		d->status = r->status;
		d->type = r->type;
		d->size = r->size;
		d->address = r->address;
		copy_field(d->segment_name, sizeof(d->segment_name), &r->segment_name);
		copy_field(d->transport_endpoint, sizeof(d->transport_endpoint),
			   &r->transport_endpoint);
		copy_field(d->protocol, sizeof(d->protocol), &r->protocol);
	}
	mc_store_msg_release(&resp);
	return n;
}

/* ---- the master's answers, each in an arena of its own (client_int.h) ---- */

#define ANSWER_SLACK	   256	      /* beside n keys' worth: a larger answer's strings */
#define ANSWER_PER_KEY_MAX 4096u      /* a wrong guess costs a malloc, not more */
#define ANSWER_ARENA_MAX   (1u << 20) /* a larger answer's rest is malloc'ed */

void mc_store_answer_arena(struct mc_store *s, enum mc_store_answer_kind kind, uint32_t n,
			   struct mc_store_decode_arena *a)
{
	size_t per = atomic_load_explicit(&s->answer_per_key[kind], memory_order_relaxed);

	/* the first answer of a kind learns its size: malloc as usual */
	mc_store_decode_arena_init(
		a, per ? MC_MIN(ANSWER_SLACK + per * (size_t)n, (size_t)ANSWER_ARENA_MAX) : 0);
}

void mc_store_answer_learn(struct mc_store *s, enum mc_store_answer_kind kind, uint32_t n,
			   const struct mc_store_decode_arena *a)
{
	size_t took = a->used + a->spilled, per;

	if (!n || !took)
		return;
	per = MC_MIN((took + n - 1) / n, (size_t)ANSWER_PER_KEY_MAX);
	if (per > atomic_load_explicit(&s->answer_per_key[kind], memory_order_relaxed))
		atomic_store_explicit(&s->answer_per_key[kind], per, memory_order_relaxed);
}

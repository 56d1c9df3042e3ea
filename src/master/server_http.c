/*
 * master/server_http.c - the master's admin and metrics HTTP service.
 *
 * Upstream's paths and response shapes (spec store.md 7.1-7.3) over
 * libmicrohttpd with a pool of 4 threads, as upstream's admin server has:
 *   /health /role /ha_status /leader   the election's state (master/ha.h);
 *                                  without --enable_ha the serving leader
 *   /kv_events/status              a fixed answer (no KV events)
 *   /metrics                       Prometheus text 0.0.4 (below)
 *   /metrics/summary               the one-line summary, rates over the
 *                                  current 10 s window
 *   /query_key /batch_query_keys   replica descriptors (the first grants a
 *                                  lease, as GetReplicaList does)
 *   /get_all_keys /get_all_segments /get_segments_detail /query_segment
 *   /api/v1/segments/status        one segment's status
 *   POST /api/v1/remove_all        RemoveAll
 * Drain jobs and tenant quotas are answered with upstream's error shape
 * (this build has neither).  Query parameters are URL-decoded by MHD.
 * base/http.c starts MHD and routes by the table at the bottom; any
 * method but GET/HEAD on a path outside it is 405, an unknown GET 404.
 *
 * Every page copies what it needs from the master under the state mutex
 * (metrics, segment records, replica lists encoded as bytes) and renders
 * after releasing it, so a slow scraper cannot hold up the RPC loop for
 * longer than the copy.
 *
 * /metrics emits every metric name upstream exports, touched at zero
 * when this build has no such thing (NoF, HA, tasks,
 * snapshots), so dashboards and alerts written for upstream find their
 * series.  One table (metrics[] below) defines each series once: name,
 * kind, help and the struct mc_master_metrics member it reads.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/buf.h"
#include "base/compiler.h"
#include "base/http.h"
#include "base/log.h"
#include "base/time.h"
#include "master/ha.h"
#include "master/server_drain.h"
#include "master/server_priv.h"
#include "master/wal.h"
#include "meta/http_server.h"

#define ADMIN_THREADS	    4
#define ADMIN_CONN_TIMEOUT  60 /* seconds */
#define CT_TEXT		    "text/plain; charset=utf-8"
#define CT_PROM		    "text/plain; version=0.0.4"
#define CT_JSON		    "application/json; charset=utf-8"
#define REMOVE_ALL_SLICE_US 100 /* a step of /api/v1/remove_all under the lock */

/* ---- text building --------------------------------------------------------- */

/* "94.09 MB", "0 B": upstream's byte_size_to_string style (binary units). */
static void format_bytes(char *out, size_t len, uint64_t v)
{
	static const char *const units[] = {"KB", "MB", "GB", "TB", "PB"};
	double d = (double)v / 1024.0;
	size_t u = 0;

	if (v < 1024) {
		snprintf(out, len, "%" PRIu64 " B", v);
		return;
	}
	while (d >= 1024.0 && u + 1 < MC_ARRAY_SIZE(units)) {
		d /= 1024.0;
		u++;
	}
	snprintf(out, len, "%.2f %s", d, units[u]);
}

/* ---- summary ------------------------------------------------------------------ */

static double rate(uint64_t cur, uint64_t prev, double secs)
{
	return cur >= prev && secs > 0 ? (double)(cur - prev) / secs : 0.0;
}

static void req_rate(struct mc_buf *b, const char *label, const struct mc_master_req_counter *cur,
		     const struct mc_master_req_counter *prev, double secs, bool first)
{
	uint64_t ok_cur = cur->requests - cur->failures, ok_prev = prev->requests - prev->failures;
	mc_buf_appendf(b, "%s%s=%.2f/%.2f", first ? "" : ", ", label, rate(ok_cur, ok_prev, secs),
		       rate(cur->requests, prev->requests, secs));
}

static void batch_rate(struct mc_buf *b, const char *label,
		       const struct mc_master_batch_counter *cur,
		       const struct mc_master_batch_counter *prev, double secs)
{
	uint64_t ok_cur = cur->requests - cur->failures - cur->partial_successes;
	uint64_t ok_prev = prev->requests - prev->failures - prev->partial_successes;
	mc_buf_appendf(b, "%s:(Req=%.2f/%.2f/%.2f, Item=%.2f/%.2f), ", label,
		       rate(ok_cur, ok_prev, secs),
		       rate(cur->partial_successes, prev->partial_successes, secs),
		       rate(cur->requests, prev->requests, secs),
		       rate(cur->items - cur->failed_items, prev->items - prev->failed_items, secs),
		       rate(cur->items, prev->items, secs));
}

struct ha_page {
	const char *role, *state;
	bool ready, known;
	char leader[256];
	uint64_t view, won, down;
};

static void ha_page_read(struct mc_master_server *s, struct ha_page *out)
{
	struct mc_master_ha_info i;

	memset(out, 0, sizeof(*out));
	if (!s->ha) {
		out->role = "leader";
		out->state = "serving";
		out->ready = true;
		return;
	}
	mc_master_ha_info(s->ha, &i);
	out->role = i.leader ? "leader" : "standby";
	out->state = mc_master_ha_state_name(i.state);
	out->ready = i.serving;
	out->known = i.leader_known;
	snprintf(out->leader, sizeof(out->leader), "%s", i.leader_addr);
	out->view = i.view_version;
	out->won = i.elections_won;
	out->down = i.step_downs;
}

char *mc_master_summary_format(struct mc_master_server *s, const struct mc_master_server_snap *prev,
			       const struct mc_master_server_snap *cur)
{
	struct ha_page h;
	const struct mc_master_metrics *c = &cur->m, *p = &prev->m;
	double secs = cur->at_ms > prev->at_ms ? (double)(cur->at_ms - prev->at_ms) / 1000.0 : 0;
	struct mc_master_req_counter zero = {0, 0};
	struct mc_master_batch_counter zb = {0, 0, 0, 0, 0};
	char used[32], total[32], evicted[32], staging[32], ssd_used[32], ssd_total[32];
	struct mc_buf b;
	char *out;

	ha_page_read(s, &h);
	mc_buf_init(&b);
	format_bytes(used, sizeof(used), c->allocated_bytes);
	format_bytes(total, sizeof(total), c->total_capacity_bytes);
	format_bytes(evicted, sizeof(evicted),
		     c->evicted_size_bytes >= p->evicted_size_bytes
			     ? c->evicted_size_bytes - p->evicted_size_bytes
			     : 0);
	format_bytes(staging, sizeof(staging), c->discarded_staging_bytes);
	format_bytes(ssd_used, sizeof(ssd_used), c->ssd_used_bytes);
	format_bytes(ssd_total, sizeof(ssd_total), c->ssd_total_bytes);
	mc_buf_appendf(&b,
		       "role=%s, state=%s, service_ready=%s, master={Mem Storage: %s / %s "
		       "(%.1f%%) | SSD Storage: %s / %s | Keys: %" PRIu64 " (soft-pinned: %" PRIu64
		       ") | Clients: %" PRIu64 " | Requests (Success/Total per sec): ",
		       h.role, h.state, h.ready ? "true" : "false", used, total,
		       c->total_capacity_bytes ? 100.0 * (double)c->allocated_bytes /
							 (double)c->total_capacity_bytes
					       : 0.0,
		       ssd_used, ssd_total, c->key_count, c->soft_pin_key_count, c->active_clients);
	req_rate(&b, "PutStart", &c->master_put_start, &p->master_put_start, secs, true);
	req_rate(&b, "PutEnd", &c->master_put_end, &p->master_put_end, secs, false);
	req_rate(&b, "PutRevoke", &c->master_put_revoke, &p->master_put_revoke, secs, false);
	req_rate(&b, "Get", &c->master_get_replica_list, &p->master_get_replica_list, secs, false);
	req_rate(&b, "Exist", &c->master_exist_key, &p->master_exist_key, secs, false);
	req_rate(&b, "Del", &c->master_remove, &p->master_remove, secs, false);
	req_rate(&b, "DelAll", &c->master_remove_all, &p->master_remove_all, secs, false);
	req_rate(&b, "Ping", &c->master_ping, &p->master_ping, secs, false);
	req_rate(&b, "CopyStart", &zero, &zero, secs, false);
	req_rate(&b, "CopyEnd", &zero, &zero, secs, false);
	req_rate(&b, "CopyRevoke", &zero, &zero, secs, false);
	req_rate(&b, "MoveStart", &zero, &zero, secs, false);
	req_rate(&b, "MoveEnd", &zero, &zero, secs, false);
	req_rate(&b, "MoveRevoke", &zero, &zero, secs, false);
	req_rate(&b, "EvictDiskReplica", &c->master_evict_disk_replica,
		 &p->master_evict_disk_replica, secs, false);
	mc_buf_append_str(&b, " | Batch Requests (per sec, Req=Success/PartialSuccess/Total, "
			      "Item=Success/Total): ");
	batch_rate(&b, "PutStart", &c->master_batch_put_start, &p->master_batch_put_start, secs);
	batch_rate(&b, "PutEnd", &c->master_batch_put_end, &p->master_batch_put_end, secs);
	batch_rate(&b, "PutRevoke", &c->master_batch_put_revoke, &p->master_batch_put_revoke, secs);
	batch_rate(&b, "Get", &c->master_batch_get_replica_list, &p->master_batch_get_replica_list,
		   secs);
	batch_rate(&b, "ExistKey", &c->master_batch_exist_key, &p->master_batch_exist_key, secs);
	batch_rate(&b, "QueryIp", &zb, &zb, secs);
	batch_rate(&b, "Clear", &zb, &zb, secs);
	mc_buf_append_str(&b, "CreateMoveTask:(Req=0.00/0.00), CreateCopyTask:(Req=0.00/0.00), "
			      "QueryTask:(Req=0.00/0.00), FetchTasks:(Req=0.00/0.00), "
			      "MarkTaskToComplete:(Req=0.00/0.00)");
	mc_buf_appendf(&b,
		       " | Eviction: Success/Attempts=%" PRIu64 "/%" PRIu64 ", AllocFail=%" PRIu64
		       ", keys=%" PRIu64 ", size=%s | Discard: Released/Total=%" PRIu64 "/%" PRIu64
		       ", StagingSize=%s | Snapshots: Success=0, Fail=0}, ",
		       c->successful_evictions - p->successful_evictions,
		       c->attempted_evictions - p->attempted_evictions,
		       c->put_start_alloc_failures - p->put_start_alloc_failures,
		       c->evicted_key_count - p->evicted_key_count, evicted,
		       c->put_start_release_cnt, c->put_start_discard_cnt, staging);
	if (!s->ha)
		mc_buf_append_str(&b, "ha={HA: disabled}");
	else
		mc_buf_appendf(&b, "ha={HA: %s, elections won %" PRIu64 ", step-downs %" PRIu64 "}",
			       h.state, h.won, h.down);
	if (h.known)
		mc_buf_appendf(&b, ", leader=%s, view_version=%" PRIu64, h.leader, h.view);
	mc_buf_put_u8(&b, 0);
	if (b.err) {
		mc_buf_release(&b);
		return NULL;
	}
	out = (char *)b.data; /* ownership passes to the caller (mc_free) */
	return out;
}

/* ---- segments, copied out of the master ----------------------------------- */

struct seg_rec {
	char *name, *te_endpoint, *protocol;
	struct mc_store_uuid id, client_id;
	uint64_t base, size, used, capacity;
	int status;
};

struct seg_list {
	struct seg_rec *v;
	size_t n, cap;
	bool nomem;
};

static bool seg_collect(void *arg, const struct mc_master_segment_info *si)
{
	struct seg_list *l = arg;
	struct seg_rec *r;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct seg_rec *v = mc_realloc(l->v, cap * sizeof(*v));
		if (!v) {
			l->nomem = true;
			return false;
		}
		l->v = v;
		l->cap = cap;
	}
	r = &l->v[l->n];
	memset(r, 0, sizeof(*r));
	r->name = mc_strdup(si->name ? si->name : "");
	r->te_endpoint = mc_strdup(si->te_endpoint ? si->te_endpoint : "");
	r->protocol = mc_strdup(si->protocol ? si->protocol : "");
	if (!r->name || !r->te_endpoint || !r->protocol) {
		mc_free(r->name);
		mc_free(r->te_endpoint);
		mc_free(r->protocol);
		l->nomem = true;
		return false;
	}
	r->id = si->id;
	r->client_id = si->client_id;
	r->base = si->base;
	r->size = si->size;
	r->used = si->used_bytes;
	r->capacity = si->capacity_bytes;
	r->status = si->status;
	l->n++;
	return true;
}

static void seg_list_release(struct seg_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		mc_free(l->v[i].name);
		mc_free(l->v[i].te_endpoint);
		mc_free(l->v[i].protocol);
	}
	mc_free(l->v);
	memset(l, 0, sizeof(*l));
}

/* Segments with their allocator figures, under the lock.  false: no memory. */
static bool segments_copy(struct mc_master_server *s, struct seg_list *l)
{
	memset(l, 0, sizeof(*l));
	pthread_mutex_lock(&s->lock);
	mc_master_foreach_segment(s->master, seg_collect, l);
	mc_master_server_unlock(s);
	if (l->nomem) {
		seg_list_release(l);
		return false;
	}
	return true;
}

/* ---- /metrics --------------------------------------------------------------- */

static void prom_one(struct mc_buf *b, const char *name, const char *type, const char *help,
		     uint64_t v)
{
	mc_buf_appendf(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type,
		       name, v);
}

static void prom_label_value(struct mc_buf *b, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			mc_buf_put_u8(b, '\\');
		if (*v == '\n') {
			mc_buf_append_str(b, "\\n");
			continue;
		}
		mc_buf_put_u8(b, (uint8_t)*v);
	}
}

static void prom_histogram(struct mc_buf *b, const char *name, const char *help,
			   const uint64_t *bounds, size_t nbounds, const uint64_t *counts,
			   uint64_t sum, uint64_t count)
{
	uint64_t cum = 0;

	mc_buf_appendf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (size_t i = 0; i < nbounds; i++) {
		cum += counts ? counts[i] : 0;
		mc_buf_appendf(b, "%s_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n", name, bounds[i],
			       cum);
	}
	mc_buf_appendf(
		b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %" PRIu64 "\n%s_count %" PRIu64 "\n",
		name, count, name, sum, name, count);
}

/*
 * The metrics table: every series /metrics exports, in output order, each
 * defined once with its name, kind, help text and where its value comes
 * from (a member of struct mc_master_metrics, or nothing: upstream exports
 * it, this build has no source, and it stays at 0).  A request family
 * (REQ) is <name>_requests_total and _failures_total of a struct
 * mc_master_req_counter; a batch family (BATCH) adds _partial_successes_total,
 * _items_total and _failed_items_total of a struct mc_master_batch_counter.
 * The request and batch counters come from MC_MASTER_REQ_COUNTERS and
 * MC_MASTER_BATCH_COUNTERS (master.h), which also declare their members,
 * so a counter cannot exist without its series.
 */
enum metric_kind {
	MK_GAUGE,
	MK_COUNTER,
	MK_SEGMENT_USED,  /* gauge per segment name: bytes allocated over its chunks */
	MK_SEGMENT_CAP,	  /* gauge per segment name: capacity over its chunks */
	MK_VALUE_SIZE,	  /* the PutStart value size histogram */
	MK_HISTOGRAM,	  /* a histogram this build does not fill (bounds only) */
	MK_SNAP_DURATION, /* master_snapshot_duration_ms */
	MK_LOOP_TURN,	  /* the RPC loop's turns in wall time (us) */
	MK_LOOP_TURN_CPU, /* the same in the loop thread's CPU time (--loop_turn_cpu_stats) */
	MK_REQ,		  /* request family */
	MK_BATCH,	  /* batch family */
	MK_PORTS,	  /* counter per listening port (label port=), of struct port_counts */
};

/*
 * What the daemon's listening ports' bounds did (base/accept.h,
 * base/http.h and the RPC loop's frame bounds): these are the server's,
 * not the master's, so they are read beside its metrics, without the lock.
 */
enum { PORT_RPC, PORT_ADMIN, PORT_METADATA, NPORTS };
static const char *const port_names[NPORTS] = {"rpc", "admin", "metadata"};
#define PORT_BIT(p) (1u << (p))
#define ALL_PORTS   (PORT_BIT(PORT_RPC) | PORT_BIT(PORT_ADMIN) | PORT_BIT(PORT_METADATA))
#define HTTP_PORTS  (PORT_BIT(PORT_ADMIN) | PORT_BIT(PORT_METADATA))

struct port_counts {
	uint64_t refused[NPORTS];	 /* closed at accept: the port's cap was open */
	uint64_t refused_per_ip[NPORTS]; /* HTTP: closed at accept, its address at its cap */
	uint64_t paused[NPORTS];	 /* accept paused: EMFILE, ENFILE, ENOBUFS, ENOMEM */
	uint64_t cut_deadline[NPORTS];	 /* a frame (RPC) or request (HTTP) late */
	uint64_t cut_room[NPORTS];	 /* HTTP: cut to keep room for new clients */
	uint64_t rpc_buffer_cut;	 /* RPC: rpc_max_buffered_bytes reached */
	uint64_t rpc_too_large;		 /* RPC: a frame refused with TOO_LARGE */
	uint64_t rpc_buffered;		 /* RPC: partial-frame buffers' growth */
	uint64_t rpc_buffered_peak;	 /* RPC: its most since start */
	uint64_t auth_refused;		 /* handshakes failed (base/auth_hs.h) */
	uint64_t snap_ok, snap_fail;	 /* snapshots written, failed (server_snap.c) */
	uint64_t snap_dur[MC_MASTER_SNAP_NBOUNDS + 1], snap_dur_sum_ms;
	/* --enable_ha (master/ha.h); a master without HA is the serving leader */
	uint64_t ha_leader, ha_serving, ha_view, ha_won, ha_down, ha_trans, ha_err, ha_ended;
	uint64_t ha_deferred, ha_cand_seq;
	/* the log stream (server_repl.c) */
	uint64_t ha_log_seq, ha_standbys, ha_lag, ha_synced, ha_syncs, ha_dropped, ha_bytes;
	/* the RPC loop's turns (base/loop.h); the maxima since the last /metrics */
	struct mc_loop_turn_stats turns;
};

/* Everything the table reads, as of one moment. */
struct metric_src {
	struct mc_master_metrics m;
	struct port_counts p;
};

#define NO_FIELD SIZE_MAX
#define NOT_USED "Not used in this build (always 0)"

struct metric {
	const char *name;
	enum metric_kind kind;
	const char *help;	/* NULL for a family with a source: derived from name */
	size_t off;		/* into struct metric_src; NO_FIELD: always 0 */
	const uint64_t *bounds; /* MK_HISTOGRAM: upper bounds (+Inf implied) */
	size_t nbounds;
	unsigned ports; /* MK_PORTS: PORT_BIT()s of the ports it has a series for */
};

#define MF(f) offsetof(struct metric_src, m.f)
#define PF(f) offsetof(struct metric_src, p.f)
#define GAUGE(n, h, f)                                                   \
	{                                                                \
		.name = (n), .kind = MK_GAUGE, .help = (h), .off = MF(f) \
	}
#define COUNTER(n, h, f)                                                   \
	{                                                                  \
		.name = (n), .kind = MK_COUNTER, .help = (h), .off = MF(f) \
	}
#define PORT_COUNTER(n, h, f, mask)                                                       \
	{                                                                                 \
		.name = (n), .kind = MK_PORTS, .help = (h), .off = PF(f), .ports = (mask) \
	}
#define SERVER_COUNTER(n, h, f)                                            \
	{                                                                  \
		.name = (n), .kind = MK_COUNTER, .help = (h), .off = PF(f) \
	}
#define SERVER_GAUGE(n, h, f)                                            \
	{                                                                \
		.name = (n), .kind = MK_GAUGE, .help = (h), .off = PF(f) \
	}
#define ZERO_GAUGE(n)                                                            \
	{                                                                        \
		.name = (n), .kind = MK_GAUGE, .help = NOT_USED, .off = NO_FIELD \
	}
#define ZERO_COUNTER(n)                                                            \
	{                                                                          \
		.name = (n), .kind = MK_COUNTER, .help = NOT_USED, .off = NO_FIELD \
	}
#define ZERO_HIST(n, b)                                                               \
	{                                                                             \
		.name = (n), .kind = MK_HISTOGRAM, .help = NOT_USED, .off = NO_FIELD, \
		.bounds = (b), .nbounds = MC_ARRAY_SIZE(b)                            \
	}
#define REQ_ROW(f)   {.name = #f, .kind = MK_REQ, .off = MF(f)},
#define BATCH_ROW(f) {.name = #f, .kind = MK_BATCH, .off = MF(f)},
#define ZERO_REQ(n)                                                            \
	{                                                                      \
		.name = (n), .kind = MK_REQ, .help = NOT_USED, .off = NO_FIELD \
	}
#define ZERO_BATCH(n)                                                            \
	{                                                                        \
		.name = (n), .kind = MK_BATCH, .help = NOT_USED, .off = NO_FIELD \
	}

static const uint64_t nof_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000};

/* clang-format off */
static const struct metric metrics[] = {
	GAUGE("master_allocated_bytes", "Bytes allocated in mounted memory segments",
	      allocated_bytes),
	GAUGE("master_total_capacity_bytes", "Capacity of mounted memory segments",
	      total_capacity_bytes),
	/* per segment name (a client mounting several chunks sums up) */
	{.name = "segment_allocated_bytes", .kind = MK_SEGMENT_USED,
	 .help = "Bytes allocated per segment", .off = NO_FIELD},
	{.name = "segment_total_capacity_bytes", .kind = MK_SEGMENT_CAP,
	 .help = "Capacity per segment", .off = NO_FIELD},
	GAUGE("master_key_count", "Objects with metadata on the master", key_count),
	GAUGE("master_soft_pin_key_count", "Soft-pinned objects", soft_pin_key_count),
	GAUGE("master_active_clients", "Clients alive (pinging)", active_clients),
	GAUGE("mem_cache_nums_", "Objects with a memory replica", key_count),
	GAUGE("master_put_start_discarded_staging_size",
	      "Bytes held by discarded, not yet released PutStart allocations",
	      discarded_staging_bytes),
	ZERO_GAUGE("master_nof_allocated_bytes"),
	ZERO_GAUGE("master_total_nof_capacity_bytes"),
	GAUGE("master_allocated_file_size_bytes",
	      "SSD bytes used, as the clients with a local-disk segment report them",
	      ssd_used_bytes),
	GAUGE("master_total_file_capacity_bytes",
	      "SSD capacity, as the clients with a local-disk segment report it", ssd_total_bytes),
	GAUGE("master_local_disk_segments", "Clients with a local-disk segment mounted",
	      local_disk_clients),
	GAUGE("master_offload_in_flight", "Offloads queued or handed out, not yet reported",
	      offload_in_flight),
	ZERO_GAUGE("file_cache_nums_"),
	GAUGE("master_promotion_in_flight", "Promotions queued or handed out, not yet reported",
	      promotion_in_flight),
	ZERO_GAUGE("ha_oplog_last_sequence_id"),
	ZERO_GAUGE("ha_oplog_applied_sequence_id"),
	ZERO_GAUGE("ha_oplog_standby_lag"),
	ZERO_GAUGE("ha_oplog_pending_entries"),
	ZERO_GAUGE("ha_pending_mutation_queue_size"),
	ZERO_GAUGE("ha_batch_record_committed_queue_depth"),
	ZERO_GAUGE("ha_batch_record_callback_queue_depth"),
	ZERO_GAUGE("ha_batch_record_last_batch_id"),
	ZERO_GAUGE("ha_batch_record_durable_sequence"),
	ZERO_GAUGE("ha_standby_state"),
	SERVER_GAUGE("ha_is_leader", "1 while this master holds the leader view (warm-up included)", ha_leader),
	SERVER_GAUGE("ha_service_ready", "1 while this master serves requests (the leader past warm-up, lease valid)", ha_serving),
	SERVER_GAUGE("ha_view_version", "Version of the leader view last seen (this master's own while it leads)", ha_view),
	SERVER_GAUGE("ha_log_seq", "Last record of this master's log (a standby's copy of the leader's)", ha_log_seq),
	SERVER_GAUGE("ha_standbys_streaming", "Standbys streaming this leader's log (past their snapshot)", ha_standbys),
	SERVER_GAUGE("ha_standby_lag_records", "Records of the log the slowest streaming standby has not acknowledged", ha_lag),
	SERVER_GAUGE("ha_candidate_seq", "Log position (seq) this master last posted as a candidate for the leader view", ha_cand_seq),
	SERVER_GAUGE("ha_stream_synced", "1 once this standby has loaded a snapshot of the leader and streams its log", ha_synced),

	{.name = "master_value_size_bytes", .kind = MK_VALUE_SIZE,
	 .help = "Value sizes of PutStart requests", .off = NO_FIELD},
	ZERO_HIST("master_nof_heartbeat_probe_latency_ms", nof_bounds),
	{.name = "master_snapshot_duration_ms", .kind = MK_SNAP_DURATION,
	 .help = "Time from fork to reap of each snapshot written (ms, to the tick)",
	 .off = NO_FIELD},

	MC_MASTER_REQ_COUNTERS(REQ_ROW)
	ZERO_REQ("master_mount_nof_segment"),
	ZERO_REQ("master_unmount_nof_segment"),
	ZERO_REQ("master_remount_nof_segment"),
	ZERO_REQ("master_copy_start"),
	ZERO_REQ("master_copy_end"),
	ZERO_REQ("master_copy_revoke"),
	ZERO_REQ("master_move_start"),
	ZERO_REQ("master_move_end"),
	ZERO_REQ("master_move_revoke"),
	ZERO_REQ("master_create_copy_task"),
	ZERO_REQ("master_create_move_task"),
	ZERO_REQ("master_query_task"),
	ZERO_REQ("master_fetch_tasks"),
	ZERO_REQ("master_update_task"),
	COUNTER("master_put_start_alloc_failures_total", "PutStart requests that found no space",
		put_start_alloc_failures),
	COUNTER("master_put_start_partial_allocations_total",
		"PutStart requests that got fewer replicas than asked",
		put_start_partial_allocations),

	MC_MASTER_BATCH_COUNTERS(BATCH_ROW)
	ZERO_BATCH("master_batch_query_ip"),

	COUNTER("mem_cache_hit_nums_", "Gets served from a memory replica", mem_cache_hit_nums),
	COUNTER("mem_cache_hit_bytes_total", "Bytes of gets served from memory",
		mem_cache_hit_bytes),
	COUNTER("valid_get_nums_", "Gets that found a readable replica", valid_get_nums),
	COUNTER("total_get_nums_", "Gets", total_get_nums),
	COUNTER("master_successful_evictions_total", "Eviction rounds that freed something",
		successful_evictions),
	COUNTER("master_attempted_evictions_total", "Eviction rounds", attempted_evictions),
	COUNTER("master_evicted_key_count", "Objects evicted", evicted_key_count),
	COUNTER("master_evicted_size_bytes", "Bytes evicted", evicted_size_bytes),
	COUNTER("master_successful_evictions_mem", "Memory eviction rounds that freed something",
		successful_evictions),
	COUNTER("master_attempted_evictions_mem", "Memory eviction rounds", attempted_evictions),
	COUNTER("master_evicted_key_count_mem", "Objects evicted from memory", evicted_key_count),
	COUNTER("master_evicted_size_bytes_mem", "Bytes evicted from memory", evicted_size_bytes),
	COUNTER("master_put_start_discard_cnt", "Unfinished PutStart allocations discarded",
		put_start_discard_cnt),
	COUNTER("master_put_start_release_cnt", "Discarded PutStart allocations released",
		put_start_release_cnt),
	ZERO_COUNTER("master_nof_heartbeat_success_total"),
	ZERO_COUNTER("master_nof_heartbeat_failure_total"),
	ZERO_COUNTER("master_nof_heartbeat_timeout_total"),
	ZERO_COUNTER("master_nof_segments_unmounted_by_heartbeat_total"),
	COUNTER("file_cache_hit_nums_", "Gets served from a LOCAL_DISK replica",
		file_cache_hit_nums),
	COUNTER("file_cache_hit_bytes_total", "Bytes of gets served from disk",
		file_cache_hit_bytes),
	COUNTER("master_offload_queued_total", "Objects queued for offload to a client's SSD",
		offload_queued),
	COUNTER("master_offload_completed_total", "Offloads reported done (LOCAL_DISK replica)",
		offload_completed),
	COUNTER("master_offload_failed_total", "Offloads reported failed (memory kept)",
		offload_failed),
	COUNTER("master_offload_queue_full_total",
		"Offloads not queued: the client's queue was at --offloading_queue_limit",
		offload_queue_full),
	COUNTER("master_offload_expired_total",
		"Offloads not reported within put_start_release_timeout (cancelled)",
		offload_expired),
	COUNTER("master_offload_backfilled_total",
		"Objects queued for offload by the backfill lap (missed at PutEnd: queue full)",
		offload_backfilled),
	COUNTER("master_offload_reregistered_total",
		"LOCAL_DISK replicas re-registered from a client's disk after a restart",
		offload_reregistered),
	ZERO_COUNTER("master_successful_evictions_nof"),
	ZERO_COUNTER("master_attempted_evictions_nof"),
	ZERO_COUNTER("master_evicted_key_count_nof"),
	ZERO_COUNTER("master_evicted_size_bytes_nof"),
	COUNTER("master_promotion_admitted_total", "Promotions admitted (queued for the disk owner)", promotion_admitted),
	COUNTER("master_promotion_completed_total", "Promotions that became memory replicas", promotion_completed),
	COUNTER("master_promotion_completed_bytes_total", "Bytes promoted to memory", promotion_completed_bytes),
	COUNTER("master_promotion_expired_total", "Promotions not reported within put_start_release_timeout", promotion_expired),
	COUNTER("master_promotion_failed_total", "Promotions that failed (no space, disk read failed)", promotion_failed),
	COUNTER("master_promotion_cancelled_total", "Promotions cancelled (object or disk owner gone)", promotion_cancelled),
	COUNTER("master_replica_corrupt_reports_total", "Replicas dropped because a reader found their bytes failing the object's checksum (ReportCorrupt)", replicas_reported_corrupt),
	COUNTER("master_segment_unreachable_reports_total", "Segments marked unreachable by a peer's failed read (ReportUnreachable), until their owner pinged", segments_reported_unreachable),
	GAUGE("master_tasks_active", "Copy and move tasks pending or handed out", tasks_active),
	COUNTER("master_tasks_succeeded_total", "Copy and move tasks that succeeded", tasks_succeeded),
	COUNTER("master_tasks_failed_total", "Copy and move tasks that failed", tasks_failed),
	GAUGE("master_replica_repair_under_replicated", "Objects below their replica count, waiting for or in repair", repair_under_replicated),
	COUNTER("master_replica_repairs_total", "Replicas re-created from a surviving one", repair_done),
	COUNTER("master_replica_repair_bytes_total", "Bytes copied by replica repair", repair_bytes),
	COUNTER("master_replica_repair_failures_total", "Repair copies that failed (retried)", repair_failed),
	COUNTER("master_replica_repair_abandoned_total", "Repairs parked after 30 tries (no segment to copy to or from) until a segment mounts", repair_given_up),
	COUNTER("master_drain_migrated_bytes_total", "Bytes moved off draining segments", drain_migrated_bytes),
	COUNTER("master_dynamic_replication_candidates_total", "Gets that made a key hot (--dynamic_replication_mode observe or enforce)", dynrep_candidates),
	COUNTER("master_dynamic_replication_copies_total", "Extra copies of hot keys queued (--dynamic_replication_mode=enforce)", dynrep_queued),
	COUNTER("master_promotion_rejected_frequency_total", "Disk hits below the admission threshold", promotion_rejected_frequency),
	COUNTER("master_promotion_rejected_watermark_total", "Disk hits refused: memory above the high watermark", promotion_rejected_watermark),
	COUNTER("master_promotion_rejected_cap_total", "Disk hits refused: --promotion_queue_limit reached", promotion_rejected_cap),
	ZERO_COUNTER("master_promotion_candidate_recorded_total"),
	ZERO_COUNTER("master_promotion_candidate_admitted_total"),
	ZERO_COUNTER("master_promotion_candidate_admission_rejected_total"),
	ZERO_COUNTER("master_promotion_candidate_expired_evaluated_total"),
	ZERO_COUNTER("master_promotion_candidate_expired_unevaluated_total"),
	ZERO_COUNTER("master_promotion_candidate_dropped_limit_total"),
	SERVER_COUNTER("master_snapshot_success", "Snapshots written (--enable_snapshot)",
		       snap_ok),
	SERVER_COUNTER("master_snapshot_fail",
		       "Snapshots that failed: the child could not write one, died or timed out",
		       snap_fail),
	ZERO_COUNTER("ha_oplog_skipped_entries_total"),
	ZERO_COUNTER("ha_oplog_checksum_failures_total"),
	ZERO_COUNTER("ha_oplog_gap_resolve_attempts_total"),
	ZERO_COUNTER("ha_oplog_gap_resolve_success_total"),
	ZERO_COUNTER("ha_oplog_etcd_write_failures_total"),
	ZERO_COUNTER("ha_oplog_etcd_write_retries_total"),
	ZERO_COUNTER("ha_oplog_watch_disconnections_total"),
	ZERO_COUNTER("ha_oplog_applied_entries_total"),
	ZERO_COUNTER("ha_oplog_dropped_put_end_total"),
	ZERO_COUNTER("ha_oplog_batch_commits_total"),
	ZERO_COUNTER("ha_oplog_sync_batch_commits_total"),
	ZERO_COUNTER("ha_batch_record_durable_batches_total"),
	ZERO_COUNTER("ha_batch_record_durable_entries_total"),
	ZERO_COUNTER("ha_batch_record_retry_total"),
	SERVER_COUNTER("ha_state_transitions_total", "HA state changes (starting, standby, candidate, leader_warmup, recovering, serving)", ha_trans),
	SERVER_COUNTER("ha_elections_won_total", "Campaigns for the leader view this master won", ha_won),
	SERVER_COUNTER("ha_step_downs_total", "Leaderships this master lost (lease not renewed in time) or gave up", ha_down),
	SERVER_COUNTER("ha_views_ended_total", "Views of a leader found gone (stream ended, RPC port refusing) that this standby ended without waiting for the lease", ha_ended),
	SERVER_COUNTER("ha_elections_deferred_total", "Elections this master stood back from, or views it gave up in the warm-up: another candidate held more of the log", ha_deferred),
	SERVER_COUNTER("ha_backend_errors_total", "Requests to the HA coordinator (etcd, Redis) that failed", ha_err),
	SERVER_COUNTER("ha_stream_syncs_total", "Standbys that joined this leader's log stream (a snapshot sent to each)", ha_syncs),
	SERVER_COUNTER("ha_stream_dropped_total", "Standby streams this leader closed (stalled, too far behind, snapshot failed)", ha_dropped),
	SERVER_COUNTER("ha_stream_bytes_total", "Bytes of log records and beats queued to standbys", ha_bytes),

	/* the listening ports' bounds (README "Limits on every listening port"; our own names) */
	PORT_COUNTER("master_connections_refused_total", "Connections closed at accept: the port's connection cap was open", refused, ALL_PORTS),
	PORT_COUNTER("master_connections_refused_per_ip_total", "HTTP connections closed at accept: their address had its cap open (--metrics_max_connections_per_ip, --http_metadata_server_max_connections_per_ip)", refused_per_ip, HTTP_PORTS),
	PORT_COUNTER("master_accept_pauses_total", "Pauses of accepting after accept failed for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)", paused, ALL_PORTS),
	PORT_COUNTER("master_deadline_cuts_total", "Connections cut: a frame (rpc) or request (http) not whole by its deadline", cut_deadline, ALL_PORTS),
	PORT_COUNTER("master_room_cuts_total", "HTTP connections that waited longest for their request, cut to keep room for new clients", cut_room, HTTP_PORTS),
	SERVER_COUNTER("master_rpc_buffer_cuts_total", "RPC connections cut: the buffers for incomplete frames were full (--rpc_max_buffered_bytes)", rpc_buffer_cut),
	SERVER_GAUGE("master_rpc_buffered_bytes", "Bytes the RPC read buffers hold beyond their first size for frames not yet whole (counted against --rpc_max_buffered_bytes)", rpc_buffered),
	SERVER_GAUGE("master_rpc_buffered_bytes_peak", "The most master_rpc_buffered_bytes has been since start", rpc_buffered_peak),
	SERVER_COUNTER("master_auth_refused_total", "Connections refused by the cluster secret's handshake (RPC port), and handshakes the master's own calls failed (docs/security.md)", auth_refused),
	{.name = "master_loop_turn_us", .kind = MK_LOOP_TURN,
	 .help = "Turns of the RPC loop (events handled, timers run) by wall time, microseconds"},
	{.name = "master_loop_turn_cpu_us", .kind = MK_LOOP_TURN_CPU,
	 .help = "The same turns by the loop thread's CPU time, microseconds (only with --loop_turn_cpu_stats; a long turn with a short CPU time waited for a CPU)"},
	SERVER_GAUGE("master_loop_turn_max_us", "The RPC loop's longest turn in wall time since the previous read of /metrics, microseconds", turns.wall_us_max),
	SERVER_GAUGE("master_loop_turn_cpu_max_us", "The RPC loop's longest turn in CPU time since the previous read of /metrics (--loop_turn_cpu_stats), microseconds", turns.cpu_us_max),
	SERVER_COUNTER("master_rpc_too_large_total", "RPC frames refused with TOO_LARGE (above --rpc_max_connection_buffer or the protocol's maximum)", rpc_too_large),
};
/* clang-format on */

/* A gauge per segment name, summing used (or capacity) over its chunks. */
static void prom_per_segment(struct mc_buf *b, const struct seg_list *segs, const char *name,
			     const char *help, bool capacity)
{
	mc_buf_appendf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
	for (size_t i = 0; i < segs->n; i++) {
		uint64_t sum = 0;
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++)
			seen = strcmp(segs->v[j].name, segs->v[i].name) == 0;
		if (seen)
			continue;
		for (size_t j = i; j < segs->n; j++)
			if (strcmp(segs->v[j].name, segs->v[i].name) == 0)
				sum += capacity ? segs->v[j].capacity : segs->v[j].used;
		mc_buf_appendf(b, "%s{segment=\"", name);
		prom_label_value(b, segs->v[i].name);
		mc_buf_appendf(b, "\"} %" PRIu64 "\n", sum);
	}
}

/* One series of a family: name + suffix; help "<what> <family> requests". */
static void prom_family_one(struct mc_buf *b, const struct metric *x, const char *suffix,
			    const char *what, uint64_t v)
{
	char name[128], help[160];

	snprintf(name, sizeof(name), "%s%s", x->name, suffix);
	if (x->help)
		snprintf(help, sizeof(help), "%s", x->help);
	else
		snprintf(help, sizeof(help), "%s %s requests", what, x->name);
	prom_one(b, name, "counter", help, v);
}

/* A counter per port of x->ports, labelled port="rpc" and so on. */
static void prom_ports(struct mc_buf *b, const struct metric *x, const uint64_t *v)
{
	mc_buf_appendf(b, "# HELP %s %s\n# TYPE %s counter\n", x->name, x->help, x->name);
	for (size_t i = 0; i < NPORTS; i++)
		if (x->ports & PORT_BIT(i))
			mc_buf_appendf(b, "%s{port=\"%s\"} %" PRIu64 "\n", x->name, port_names[i],
				       v[i]);
}

static void render_metric(struct mc_buf *b, const struct metric *x, const struct metric_src *src,
			  const struct seg_list *segs)
{
	const struct mc_master_metrics *m = &src->m;
	const char *base = (const char *)src + (x->off == NO_FIELD ? 0 : x->off);
	uint64_t v = 0;

	switch (x->kind) {
	case MK_GAUGE:
	case MK_COUNTER:
		if (x->off != NO_FIELD)
			memcpy(&v, base, sizeof(v));
		prom_one(b, x->name, x->kind == MK_GAUGE ? "gauge" : "counter", x->help, v);
		return;
	case MK_SEGMENT_USED:
	case MK_SEGMENT_CAP:
		prom_per_segment(b, segs, x->name, x->help, x->kind == MK_SEGMENT_CAP);
		return;
	case MK_VALUE_SIZE:
		prom_histogram(b, x->name, x->help, mc_master_value_size_bounds,
			       MC_MASTER_VALUE_SIZE_BUCKETS - 1, m->value_size_buckets,
			       m->value_size_sum, m->value_size_count);
		return;
	case MK_HISTOGRAM:
		prom_histogram(b, x->name, x->help, x->bounds, x->nbounds, NULL, 0, 0);
		return;
	case MK_SNAP_DURATION:
		prom_histogram(b, x->name, x->help, mc_master_snap_bounds, MC_MASTER_SNAP_NBOUNDS,
			       src->p.snap_dur, src->p.snap_dur_sum_ms, src->p.snap_ok);
		return;
	case MK_LOOP_TURN:
		prom_histogram(b, x->name, x->help, mc_loop_turn_bounds_us, MC_LOOP_TURN_NBOUNDS,
			       src->p.turns.wall_buckets, src->p.turns.wall_us_sum,
			       src->p.turns.turns);
		return;
	case MK_LOOP_TURN_CPU:
		prom_histogram(b, x->name, x->help, mc_loop_turn_bounds_us, MC_LOOP_TURN_NBOUNDS,
			       src->p.turns.cpu_buckets, src->p.turns.cpu_us_sum,
			       src->p.turns.cpu_turns);
		return;
	case MK_REQ: {
		struct mc_master_req_counter r = {0, 0};
		if (x->off != NO_FIELD)
			memcpy(&r, base, sizeof(r));
		prom_family_one(b, x, "_requests_total", "Total", r.requests);
		prom_family_one(b, x, "_failures_total", "Failed", r.failures);
		return;
	}
	case MK_BATCH: {
		struct mc_master_batch_counter r = {0, 0, 0, 0, 0};
		if (x->off != NO_FIELD)
			memcpy(&r, base, sizeof(r));
		prom_family_one(b, x, "_requests_total", "Total", r.requests);
		prom_family_one(b, x, "_failures_total", "Failed", r.failures);
		prom_family_one(b, x, "_partial_successes_total", "Partly failed",
				r.partial_successes);
		prom_family_one(b, x, "_items_total", "Items in", r.items);
		prom_family_one(b, x, "_failed_items_total", "Failed items in", r.failed_items);
		return;
	}
	case MK_PORTS: {
		uint64_t p[NPORTS];
		memcpy(p, base, sizeof(p));
		prom_ports(b, x, p);
		return;
	}
	}
}

static void render_metrics(struct mc_buf *b, const struct metric_src *src,
			   const struct seg_list *segs)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(metrics); i++)
		render_metric(b, &metrics[i], src, segs);
}

static uint64_t relaxed(atomic_uint_fast64_t *n)
{
	return atomic_load_explicit(n, memory_order_relaxed);
}

/* The ports' counts as of now: atomics and the HTTP servers' own locks, not
 * s->lock.  admin is the admin server (s->admin is written after it starts). */
static void port_counts_read(struct mc_master_server *s, struct mc_http *admin,
			     struct port_counts *out)
{
	struct mc_http_counts h[2];

	mc_http_counts(admin, &h[0]);
	mc_http_meta_server_counts(s->meta, &h[1]);
	out->refused[PORT_RPC] = relaxed(&s->accept_guard.refused);
	out->paused[PORT_RPC] = relaxed(&s->accept_guard.paused);
	out->cut_deadline[PORT_RPC] = relaxed(&s->n_deadline_cut);
	out->cut_room[PORT_RPC] = 0;
	out->refused_per_ip[PORT_RPC] = 0;
	for (size_t i = 0; i < 2; i++) {
		size_t port = i == 0 ? PORT_ADMIN : PORT_METADATA;
		out->refused[port] = h[i].refused;
		out->refused_per_ip[port] = h[i].refused_per_ip;
		out->paused[port] = h[i].paused;
		out->cut_deadline[port] = h[i].cut_deadline;
		out->cut_room[port] = h[i].cut_room;
	}
	out->rpc_buffer_cut = relaxed(&s->n_buffer_cut);
	out->rpc_too_large = relaxed(&s->n_too_large);
	out->rpc_buffered = relaxed(&s->rbuf_now);
	out->rpc_buffered_peak = relaxed(&s->rbuf_peak);
	out->auth_refused = relaxed(&mc_auth_refused_total);
}

/* ---- responses -------------------------------------------------------------- */

/* Takes the reference to j. */
static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned code, json_t *j)
{
	char *text;
	enum MHD_Result ret;

	if (!j)
		return mc_http_respond_text(conn, 500, "out of memory", CT_TEXT);
	text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!text)
		return mc_http_respond_text(conn, 500, "out of memory", CT_TEXT);
	ret = mc_http_respond(conn, code, text, strlen(text), CT_JSON);
	free(text);
	return ret;
}

static enum MHD_Result respond_buf(struct MHD_Connection *conn, unsigned code, struct mc_buf *b,
				   const char *ctype)
{
	enum MHD_Result ret;

	if (b->err) {
		mc_buf_release(b);
		return mc_http_respond_text(conn, 500, "out of memory", CT_TEXT);
	}
	ret = mc_http_respond(conn, code, b->data ? (const void *)b->data : "", b->len, ctype);
	mc_buf_release(b);
	return ret;
}

/* Upstream's error name: "OBJECT_NOT_FOUND" for MC_ERR_OBJECT_NOT_FOUND. */
static const char *error_name(mc_status st)
{
	const char *n = mc_status_name(st);
	return strncmp(n, "ERR_", 4) == 0 ? n + 4 : n;
}

/* The /api/v1 error body and upstream's status mapping. */
static enum MHD_Result respond_api_error(struct MHD_Connection *conn, mc_status st,
					 const char *message)
{
	unsigned code = 500;

	switch (st) {
	case MC_ERR_INVALID_PARAMS:
		code = 400;
		break;
	case MC_ERR_SEGMENT_NOT_FOUND:
	case MC_ERR_OBJECT_NOT_FOUND:
	case MC_ERR_JOB_NOT_FOUND:
		code = 404;
		break;
	case MC_ERR_UNAVAILABLE_IN_CURRENT_MODE:
	case MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS:
		code = 409;
		break;
	default:
		break;
	}
	return respond_json(conn, code,
			    json_pack("{s:b, s:i, s:s}", "success", 0, "error_code", (int)st,
				      "error_message", message ? message : error_name(st)));
}

enum MHD_Result mc_master_http_json(struct MHD_Connection *conn, unsigned code, json_t *j)
{
	return respond_json(conn, code, j);
}

enum MHD_Result mc_master_http_api_error(struct MHD_Connection *conn, mc_status st,
					 const char *message)
{
	return respond_api_error(conn, st, message);
}

/* ---- replica descriptors ---------------------------------------------------- */

static json_t *mem_descriptor(const struct mc_store_replica *r)
{
	return json_pack("{s:I, s:I, s:s%, s:s%}", "size_", (json_int_t)r->size, "buffer_address_",
			 (json_int_t)r->address, "protocol_",
			 r->protocol.ptr ? r->protocol.ptr : "", (size_t)r->protocol.len,
			 "transport_endpoint_",
			 r->transport_endpoint.ptr ? r->transport_endpoint.ptr : "",
			 (size_t)r->transport_endpoint.len);
}

/*
 * Replicas of key as the master answers GetReplicaList (lease or not).
 * MC_OK with *list filled (release with mc_store_replica_list_release),
 * or the master's error.
 */
static mc_status query_key(struct mc_master_server *s, const char *key, bool lease,
			   struct mc_store_replica_list *list)
{
	struct mc_buf b;
	mc_status st;

	mc_buf_init(&b);
	pthread_mutex_lock(&s->lock);
	st = mc_master_query_replicas(s->master, NULL, key, strlen(key), lease, mc_now_ms(), &b);
	mc_master_server_unlock(s);
	if (st == MC_OK)
		st = b.err ? b.err
			   : mc_store_payload_decode(MC_STORE_GET_REPLICA_LIST, true, b.data, b.len,
						     list);
	mc_buf_release(&b);
	return st;
}

static enum MHD_Result page_query_key(void *arg, struct MHD_Connection *conn,
				      const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	const char *key = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "key");
	struct mc_store_replica_list list;
	json_t *data, *root;
	mc_status st;

	st = query_key(s, key ? key : "", true, &list);
	if (st)
		return respond_json(conn, 404,
				    json_pack("{s:b, s:i, s:s}", "success", 0, "error_code",
					      (int)st, "error_message", error_name(st)));
	data = json_array();
	for (uint32_t i = 0; data && i < list.n_replicas; i++)
		if (list.replicas[i].type == MC_STORE_REPLICA_MEMORY)
			json_array_append_new(data, mem_descriptor(&list.replicas[i]));
	mc_store_replica_list_release(&list);
	root = data ? json_pack("{s:b, s:o}", "success", 1, "data", data) : NULL;
	return respond_json(conn, 200, root);
}

static json_t *key_entry(const struct mc_store_replica_list *list)
{
	json_t *o = json_object(), *values = json_array(), *disk = NULL, *local = NULL, *nof = NULL;

	if (!o || !values) {
		json_decref(o);
		json_decref(values);
		return NULL;
	}
	for (uint32_t i = 0; i < list->n_replicas; i++) {
		const struct mc_store_replica *r = &list->replicas[i];
		switch (r->type) {
		case MC_STORE_REPLICA_MEMORY:
			json_array_append_new(values, mem_descriptor(r));
			break;
		case MC_STORE_REPLICA_NOF_SSD:
			if (!nof)
				nof = json_array();
			json_array_append_new(nof, mem_descriptor(r));
			break;
		case MC_STORE_REPLICA_DISK:
		case MC_STORE_REPLICA_DFS:
			if (!disk)
				disk = json_array();
			json_array_append_new(disk,
					      json_pack("{s:s%, s:I}", "file_path",
							r->file_path.ptr ? r->file_path.ptr : "",
							(size_t)r->file_path.len, "object_size",
							(json_int_t)r->size));
			break;
		case MC_STORE_REPLICA_LOCAL_DISK: {
			char id[48];
			snprintf(id, sizeof(id), "%" PRIu64 "-%" PRIu64, r->client_id.first,
				 r->client_id.second);
			if (!local)
				local = json_array();
			json_array_append_new(local, json_pack("{s:s, s:I, s:s%}", "client_id", id,
							       "object_size", (json_int_t)r->size,
							       "transport_endpoint",
							       r->transport_endpoint.ptr
								       ? r->transport_endpoint.ptr
								       : "",
							       (size_t)r->transport_endpoint.len));
			break;
		}
		default:
			break;
		}
	}
	json_object_set_new(o, "ok", json_true());
	json_object_set_new(o, "values", values);
	if (disk)
		json_object_set_new(o, "disk_values", disk);
	if (local)
		json_object_set_new(o, "local_disk_values", local);
	if (nof)
		json_object_set_new(o, "nof_values", nof);
	return o;
}

static enum MHD_Result page_batch_query_keys(void *arg, struct MHD_Connection *conn,
					     const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	const char *keys = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "keys");
	json_t *data, *root;
	const char *p;

	if (!keys || !*keys)
		return respond_json(conn, 400,
				    json_pack("{s:b, s:s}", "success", 0, "error",
					      "No keys provided. Use ?keys=key1,key2,..."));
	data = json_object();
	if (!data)
		return mc_http_respond_text(conn, 500, "out of memory", CT_TEXT);
	for (p = keys;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		char *key = mc_strndup(p, n);
		struct mc_store_replica_list list;
		mc_status st;
		json_t *e;

		if (!key) {
			json_decref(data);
			return mc_http_respond_text(conn, 500, "out of memory", CT_TEXT);
		}
		if (n) {
			st = query_key(s, key, false, &list);
			if (st == MC_OK) {
				e = key_entry(&list);
				mc_store_replica_list_release(&list);
			} else {
				e = json_pack("{s:b, s:s}", "ok", 0, "error", error_name(st));
			}
			if (e)
				json_object_set_new(data, key, e);
		}
		mc_free(key);
		if (!comma)
			break;
		p = comma + 1;
	}
	root = json_pack("{s:b, s:o}", "success", 1, "data", data);
	return respond_json(conn, 200, root);
}

/* ---- keys and segments pages ------------------------------------------------ */

static bool key_line(void *arg, const char *key, size_t len)
{
	struct mc_buf *b = arg;
	mc_buf_append(b, key, len);
	mc_buf_put_u8(b, '\n');
	return b->err == MC_OK;
}

static enum MHD_Result page_get_all_keys(void *arg, struct MHD_Connection *conn,
					 const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	struct mc_buf b;

	mc_buf_init(&b);
	pthread_mutex_lock(&s->lock);
	mc_master_foreach_key(s->master, NULL, key_line, &b);
	mc_master_server_unlock(s);
	if (b.err) {
		mc_buf_release(&b);
		return mc_http_respond_text(conn, 500, "Failed to get all keys", CT_TEXT);
	}
	return respond_buf(conn, 200, &b, CT_PROM);
}

static enum MHD_Result page_get_all_segments(void *arg, struct MHD_Connection *conn,
					     const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	struct seg_list l;
	struct mc_buf b;

	if (!segments_copy(s, &l))
		return mc_http_respond_text(conn, 500, "Failed to get all segments", CT_TEXT);
	mc_buf_init(&b);
	for (size_t i = 0; i < l.n; i++)
		if (l.v[i].status == MC_SEGMENT_OK)
			mc_buf_appendf(&b, "%s\n", l.v[i].name);
	seg_list_release(&l);
	return respond_buf(conn, 200, &b, CT_PROM);
}

static enum MHD_Result page_segments_detail(void *arg, struct MHD_Connection *conn,
					    const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	struct seg_list l;
	json_t *arr, *root;

	if (!segments_copy(s, &l))
		return mc_http_respond_text(conn, 500, "Failed to get segments", CT_TEXT);
	arr = json_array();
	for (size_t i = 0; arr && i < l.n; i++) {
		const struct seg_rec *r = &l.v[i];
		char id[48], cid[48], base[24], human[32];
		snprintf(id, sizeof(id), "%" PRIu64 "-%" PRIu64, r->id.first, r->id.second);
		snprintf(cid, sizeof(cid), "%" PRIu64 "-%" PRIu64, r->client_id.first,
			 r->client_id.second);
		snprintf(base, sizeof(base), "0x%" PRIx64, r->base);
		snprintf(human, sizeof(human), "%.2f GiB",
			 (double)r->size / (1024.0 * 1024 * 1024));
		json_array_append_new(
			arr,
			json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:I, s:I, s:f}",
				  "segment_name", r->name, "segment_id", id, "client_id", cid,
				  "base_address", base, "size_bytes", (json_int_t)r->size,
				  "size_human", human, "te_endpoint", r->te_endpoint, "protocol",
				  r->protocol, "status", mc_master_segment_status_name(r->status),
				  "allocator_used_bytes", (json_int_t)r->used,
				  "allocator_capacity_bytes", (json_int_t)r->capacity,
				  "allocator_usage_percent",
				  r->capacity ? 100.0 * (double)r->used / (double)r->capacity
					      : 0.0));
	}
	root = arr ? json_pack("{s:I, s:o}", "total_segments", (json_int_t)l.n, "segments", arr)
		   : NULL;
	seg_list_release(&l);
	return respond_json(conn, 200, root);
}

static enum MHD_Result page_query_segment(void *arg, struct MHD_Connection *conn,
					  const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	const char *name = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "segment");
	struct seg_list l;
	uint64_t used = 0, cap = 0;
	bool found = false;
	struct mc_buf b;

	if (!name || !*name || !segments_copy(s, &l))
		return mc_http_respond_text(conn, 500, "Failed to query segment", CT_TEXT);
	for (size_t i = 0; i < l.n; i++)
		if (strcmp(l.v[i].name, name) == 0) {
			found = true;
			used += l.v[i].used;
			cap += l.v[i].capacity;
		}
	seg_list_release(&l);
	if (!found)
		return mc_http_respond_text(conn, 500, "Failed to query segment", CT_TEXT);
	mc_buf_init(&b);
	/* upstream's text, the space before the second colon included */
	mc_buf_appendf(&b, "%s\nUsed(bytes): %" PRIu64 "\nCapacity(bytes) : %" PRIu64 "\n", name,
		       used, cap);
	return respond_buf(conn, 200, &b, CT_TEXT);
}

static enum MHD_Result page_segment_status(void *arg, struct MHD_Connection *conn,
					   const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	const char *name = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "segment");
	struct seg_list l;
	int status = -1;

	if (!name || !*name)
		return respond_api_error(conn, MC_ERR_INVALID_PARAMS,
					 "missing query parameter: segment");
	if (!segments_copy(s, &l))
		return respond_api_error(conn, MC_ERR_INTERNAL, "out of memory");
	for (size_t i = 0; i < l.n && status < 0; i++)
		if (strcmp(l.v[i].name, name) == 0)
			status = l.v[i].status;
	seg_list_release(&l);
	if (status < 0)
		return respond_api_error(conn, MC_ERR_SEGMENT_NOT_FOUND, NULL);
	return respond_json(conn, 200,
			    json_pack("{s:b, s:s, s:i, s:s}", "success", 1, "segment", name,
				      "status", status, "status_name",
				      mc_master_segment_status_name(status)));
}

static enum MHD_Result page_remove_all(void *arg, struct MHD_Connection *conn,
				       const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	const char *force = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "force");
	const char *tenant = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "tenant_id");
	bool f = force && (strcmp(force, "true") == 0 || strcmp(force, "1") == 0);
	struct mc_master_job *j;
	bool done;
	int64_t n;

	/* in slices of the RPC loop's job size, the lock released between them,
	 * so a pool of 100 million objects does not stop the RPC loop */
	pthread_mutex_lock(&s->lock);
	j = mc_master_remove_all_begin(s->master, tenant, tenant ? strlen(tenant) : 0, f);
	mc_master_server_unlock(s);
	if (!j)
		return respond_api_error(conn, MC_ERR_NOMEM, NULL);
	do {
		pthread_mutex_lock(&s->lock);
		done = mc_master_remove_all_step(s->master, j, mc_now_ms(), REMOVE_ALL_SLICE_US);
		if (done)
			n = mc_master_remove_all_end(s->master, j);
		mc_master_server_unlock(s);
	} while (!done);
	if (n < 0)
		return respond_api_error(conn, (mc_status)n, NULL);
	return respond_json(conn, 200,
			    json_pack("{s:b, s:I}", "success", 1, "removed_count", (json_int_t)n));
}

static void repl_counts_read_locked(struct mc_master_server *s, struct port_counts *p)
{
	uint64_t least = 0;

	memset(&p->ha_log_seq, 0, (size_t)((char *)(&p->ha_bytes + 1) - (char *)&p->ha_log_seq));
	if (!s->ha)
		return;
	p->ha_log_seq = s->wal ? mc_wal_last_seq(s->wal) : 0;
	p->ha_standbys = mc_master_repl_standbys(s, &least);
	p->ha_lag = p->ha_standbys && p->ha_log_seq > least ? p->ha_log_seq - least : 0;
	p->ha_synced = atomic_load(&s->repl.synced);
	p->ha_syncs = s->repl.n_syncs;
	p->ha_dropped = s->repl.n_dropped;
	p->ha_bytes = s->repl.bytes_sent;
}

static void ha_counts_read(struct mc_master_server *s, struct port_counts *p)
{
	struct mc_master_ha_info i;

	if (!s->ha) {
		p->ha_leader = p->ha_serving = 1;
		return;
	}
	mc_master_ha_info(s->ha, &i);
	p->ha_leader = i.leader;
	p->ha_serving = i.serving;
	p->ha_view = i.view_version;
	p->ha_won = i.elections_won;
	p->ha_down = i.step_downs;
	p->ha_ended = i.views_ended;
	p->ha_deferred = i.deferred;
	p->ha_cand_seq = i.cand_seq;
	p->ha_trans = i.transitions;
	p->ha_err = i.backend_errors;
}

static enum MHD_Result page_metrics(void *arg, struct MHD_Connection *conn,
				    const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	struct metric_src src;
	struct seg_list l;
	struct mc_buf b;
	uint64_t snap_ok, snap_fail, snap_dur[MC_MASTER_SNAP_NBOUNDS + 1], snap_dur_sum;

	memset(&l, 0, sizeof(l));
	pthread_mutex_lock(&s->lock);
	mc_master_metrics(s->master, &src.m);
	mc_master_foreach_segment(s->master, seg_collect, &l);
	snap_ok = s->snapper.n_ok;
	snap_fail = s->snapper.n_fail;
	memcpy(snap_dur, s->snapper.dur_counts, sizeof(snap_dur));
	snap_dur_sum = s->snapper.dur_sum_ms;
	repl_counts_read_locked(s, &src.p);
	mc_master_server_unlock(s);
	port_counts_read(s, req->server, &src.p);
	mc_loop_turn_stats_read(s->loop, &src.p.turns, true);
	ha_counts_read(s, &src.p);
	src.p.snap_ok = snap_ok;
	src.p.snap_fail = snap_fail;
	memcpy(src.p.snap_dur, snap_dur, sizeof(snap_dur));
	src.p.snap_dur_sum_ms = snap_dur_sum;
	if (l.nomem) {
		seg_list_release(&l);
		return mc_http_respond_text(conn, 500, "out of memory", CT_TEXT);
	}
	mc_buf_init(&b);
	render_metrics(&b, &src, &l);
	seg_list_release(&l);
	return respond_buf(conn, 200, &b, CT_PROM);
}

static enum MHD_Result page_summary(void *arg, struct MHD_Connection *conn,
				    const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	struct mc_master_server_snap prev, cur;
	enum MHD_Result ret;
	char *line;

	pthread_mutex_lock(&s->lock);
	mc_master_server_snap_locked(s, &cur, mc_now_ms());
	prev = s->prev_snap;
	mc_master_server_unlock(s);
	line = mc_master_summary_format(s, &prev, &cur);
	if (!line)
		return mc_http_respond_text(conn, 500, "out of memory", CT_TEXT);
	ret = mc_http_respond_text(conn, 200, line, CT_PROM);
	mc_free(line);
	return ret;
}

/* ---- dispatch --------------------------------------------------------------- */

static enum MHD_Result page_remove_all_post(void *arg, struct MHD_Connection *conn,
					    const struct mc_http_request *req)
{
	if (req->method_bit != MC_HTTP_POST)
		return respond_api_error(conn, MC_ERR_INVALID_PARAMS, "use POST");
	return page_remove_all(arg, conn, req);
}

static enum MHD_Result page_tenant_quotas(void *arg, struct MHD_Connection *conn,
					  const struct mc_http_request *req)
{
	return respond_api_error(conn, MC_ERR_UNAVAILABLE_IN_CURRENT_MODE,
				 "tenant quotas are not supported in this build");
}

/* ---- HA pages (spec 7.1): a master without --enable_ha is the serving leader ---- */

static enum MHD_Result page_role(void *arg, struct MHD_Connection *conn,
				 const struct mc_http_request *req)
{
	struct ha_page h;

	ha_page_read(arg, &h);
	return mc_http_respond_text(conn, 200, h.role, CT_TEXT);
}

static enum MHD_Result page_ha_status(void *arg, struct MHD_Connection *conn,
				      const struct mc_http_request *req)
{
	struct ha_page h;

	ha_page_read(arg, &h);
	return mc_http_respond_text(conn, 200, h.state, CT_TEXT);
}

static enum MHD_Result page_health(void *arg, struct MHD_Connection *conn,
				   const struct mc_http_request *req)
{
	struct ha_page h;
	json_t *j;

	ha_page_read(arg, &h);
	j = json_pack("{sssssssb}", "status", "ok", "role", h.role, "ha_state", h.state,
		      "service_ready", h.ready);
	if (j && h.known) {
		json_object_set_new(j, "leader_address", json_string(h.leader));
		json_object_set_new(j, "view_version", json_integer((json_int_t)h.view));
	}
	return respond_json(conn, 200, j);
}

static enum MHD_Result page_leader(void *arg, struct MHD_Connection *conn,
				   const struct mc_http_request *req)
{
	struct ha_page h;
	json_t *j;

	ha_page_read(arg, &h);
	j = json_pack("{sb}", "present", h.known);
	if (j && h.known) {
		json_object_set_new(j, "leader_address", json_string(h.leader));
		json_object_set_new(j, "view_version", json_integer((json_int_t)h.view));
	}
	return respond_json(conn, 200, j);
}

#define GET_HEAD (MC_HTTP_GET | MC_HTTP_HEAD)

/* The /api/v1 calls (any method), then the GET (and HEAD) pages built from
 * the master's state. */
static const struct mc_http_route routes[] = {
	{"/api/v1/remove_all", 0, false, page_remove_all_post},
	{"/api/v1/drain_jobs", 0, true, mc_master_page_drain_jobs}, /* server_drain.c */
	{"/api/v1/tenant_quotas", 0, false, page_tenant_quotas},
	{"/metrics", GET_HEAD, false, page_metrics},
	{"/metrics/summary", GET_HEAD, false, page_summary},
	{"/query_key", GET_HEAD, false, page_query_key},
	{"/batch_query_keys", GET_HEAD, false, page_batch_query_keys},
	{"/get_all_keys", GET_HEAD, false, page_get_all_keys},
	{"/get_all_segments", GET_HEAD, false, page_get_all_segments},
	{"/get_segments_detail", GET_HEAD, false, page_segments_detail},
	{"/query_segment", GET_HEAD, false, page_query_segment},
	{"/api/v1/segments/status", GET_HEAD, false, page_segment_status},
	{"/health", GET_HEAD, false, page_health},
	{"/role", GET_HEAD, false, page_role},
	{"/ha_status", GET_HEAD, false, page_ha_status},
	{"/leader", GET_HEAD, false, page_leader},
};

/* GET (and HEAD) pages that never change in this build (no KV events). */
static const struct {
	const char *url, *body, *ctype;
} get_fixed[] = {
	{"/kv_events/status",
	 "{\"enabled\":false,\"published_batches\":0,\"published_events\":0,"
	 "\"dropped_events\":0,\"skipped_unparsed_keys\":0}",
	 CT_JSON},
};

/*
 * Pages that read or change the tables (spec 7.1: "endpoints that need the
 * active service plane"): an HA master that is not the serving leader
 * answers them 503 with -1011, its tables being a standby's copy.
 */
static bool needs_service_plane(mc_http_handler_cb fn)
{
	return fn != page_metrics && fn != page_summary && fn != page_health && fn != page_role &&
	       fn != page_ha_status && fn != page_leader;
}

/* Any method other than GET and HEAD on a path no route takes is 405. */
static enum MHD_Result on_request(void *arg, struct MHD_Connection *conn,
				  const struct mc_http_request *req)
{
	const struct mc_http_route *r =
		mc_http_route_find(routes, MC_ARRAY_SIZE(routes), req, NULL);
	struct mc_master_server *s = arg;

	if (r && s->ha && needs_service_plane(r->fn) && !mc_master_ha_may_serve(s->ha, mc_now_ms()))
		return respond_json(conn, 503,
				    json_pack("{s:b, s:i, s:s}", "success", 0, "error_code",
					      (int)MC_ERR_UNAVAILABLE_IN_CURRENT_MODE,
					      "error_message", "service plane is not active"));
	if (r)
		return r->fn(arg, conn, req);
	if (!(req->method_bit & GET_HEAD))
		return mc_http_respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed",
					    CT_TEXT);
	for (size_t i = 0; i < MC_ARRAY_SIZE(get_fixed); i++)
		if (strcmp(req->url, get_fixed[i].url) == 0)
			return mc_http_respond_text(conn, 200, get_fixed[i].body,
						    get_fixed[i].ctype);
	return mc_http_respond_text(conn, MHD_HTTP_NOT_FOUND, "Not Found", CT_TEXT);
}

/* host may be a bracketed IPv6 literal ("[::1]"), as in the config file. */
mc_status mc_master_admin_start(struct mc_master_server *s,
				const struct mc_master_server_config *mcfg)
{
	const char *host = mcfg->metrics_host;
	uint16_t port = (uint16_t)mcfg->metrics_port;
	struct mc_http_config cfg = {
		.name = "admin http",
		.host = host,
		.port = port,
		.prefer_ipv4 = false,
		.threads = ADMIN_THREADS,
		.idle_timeout_s = ADMIN_CONN_TIMEOUT,
		.request_timeout_ms = (unsigned)mcfg->metrics_request_timeout_ms,
		.max_conns_per_ip = (unsigned)mcfg->metrics_max_connections_per_ip,
		.max_conns = (unsigned)mc_accept_cap_for_fds(
			"admin http", (uint64_t)mcfg->metrics_max_connections, 10),
		.max_body = 1u << 20, /* POST /api/v1/drain_jobs reads its JSON body */
		.handler = on_request,
		.arg = s,
	};
	char h[256];
	size_t hl = host ? strlen(host) : 0;
	mc_status st;

	if (hl > 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof(h)) {
		memcpy(h, host + 1, hl - 2);
		h[hl - 2] = '\0';
		cfg.host = h;
	}
	/* the cluster secret guards what changes state (remove_all, drain_jobs) */
	st = mc_auth_secret_load(NULL, &s->admin_secret);
	if (st == MC_OK && (st = mc_http_tls_load(&s->admin_tls)) != MC_OK)
		mc_auth_secret_release(&s->admin_secret);
	if (st != MC_OK)
		return st;
	cfg.tls = &s->admin_tls;
	cfg.auth = &s->admin_secret;
	cfg.auth_methods = MC_HTTP_POST | MC_HTTP_PUT | MC_HTTP_DELETE;
	st = mc_http_open(&cfg, &s->admin);
	if (st == MC_OK) {
		s->metrics_port = mc_http_port(s->admin);
		mc_auth_warn_open(&s->admin_secret, "the master's admin port", cfg.host);
	} else {
		mc_auth_secret_release(&s->admin_secret);
		mc_http_tls_release(&s->admin_tls);
	}
	return st;
}

void mc_master_admin_stop(struct mc_master_server *s)
{
	mc_http_close(s->admin);
	s->admin = NULL;
	mc_auth_secret_release(&s->admin_secret);
	mc_http_tls_release(&s->admin_tls);
}

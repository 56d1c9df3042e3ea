/*
 * master/master.h - the master's state: mounted segments, clients,
 * objects, replicas, leases, pins, groups, tenants and eviction.
 *
 * This module is the whole meaning of the master and none of its I/O.
 * The daemon (master/server.c) reads frames, decodes them with
 * store/proto.h and hands each decoded request to mc_master_handle(),
 * which appends exactly one response frame to an output buffer.  Time is
 * an argument (monotonic milliseconds), so tests drive leases, liveness
 * and timeouts without sleeping.  Periodic work (client expiry, eviction,
 * zombie PutStart release, graceful-unmount deadlines, soft-pin expiry)
 * happens in mc_master_tick().
 *
 * Semantics follow ../shared/spec/store.md sections 1-4 and 6.1: put is
 * insert-if-absent, readers only ever see COMPLETE replicas on mounted
 * segments, reads are protected by leases, eviction is approximate LRU by
 * lease deadline and never touches leased, hard-pinned or in-flight
 * objects, and soft-pinned ones only in a second pass.
 *
 * Every state change goes through mc_master_handle() or mc_master_tick(),
 * so a later write-ahead log can record the accepted requests at that one
 * point (see docs/design.md, "Master").
 *
 * Threads: not thread-safe.  The caller serialises every call on one
 * struct mc_master (the daemon holds one mutex, taken by its RPC loop and
 * by the HTTP admin threads; see docs/threads.md).
 */
#ifndef MC_MASTER_MASTER_H
#define MC_MASTER_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/alloc.h"
#include "mooncake/status.h"
#include "store/proto.h"

struct mc_master;

/* The default of max_segment_size: a bound on what one mount may claim. */
#define MC_MASTER_MAX_SEGMENT_SIZE (1ull << 40)
/* Failed offload rounds in a row (per owner) that the backfill retries, with
 * a backoff of 1, 2, 4, ... s, before that owner's failed objects are left
 * as ordinary memory replicas (src/master/ssd.c). */
#define MC_MASTER_OFFLOAD_RETRIES 5u

struct mc_master_config {
	uint64_t default_kv_lease_ttl_ms;     /* 10000 */
	uint64_t default_kv_soft_pin_ttl_ms;  /* 1800000 (30 min) */
	uint64_t max_kv_soft_pin_ttl_ms;      /* 86400000 (24 h) */
	bool allow_evict_soft_pinned_objects; /* true */
	double eviction_ratio;		      /* 0.05: fraction of evictable objects per round */
	double eviction_high_watermark_ratio; /* 0.90 */
	/* ours (paper 4.6, issue 17): a put whose preferred segment is full
	 * evicts that segment's least recently used objects to make room */
	bool preferred_segment_lru;	       /* false: upstream's spill to other segments */
	int64_t preferred_segment_lru_batch;   /* 1: objects such a round evicts at least */
	uint64_t client_ttl_ms;		       /* 10000 */
	uint64_t max_segment_size;	       /* 1 TiB: larger mounts are refused */
	uint64_t put_start_discard_timeout_ms; /* 30000 */
	uint64_t put_start_release_timeout_ms; /* 600000 */
	enum mc_alloc_strategy strategy;       /* MC_ALLOC_RANDOM */
	bool enable_multi_tenants;	       /* false: every tenant is "default", as upstream */
	const char *version;		       /* ServiceReady answer; copied */
	uint64_t rng_seed;		       /* placement and eviction sampling */
	/* the regex calls (master/key_regex.h): per request and per key */
	uint64_t regex_time_budget_ms; /* 10000: wall clock for one request's scan */
	int64_t regex_match_limit;     /* 1000000: backtracking steps per key */
	uint64_t regex_heap_limit;     /* 16 MiB: backtracking memory per key */
	/* the SSD tier (spec store.md 4.2, 5) */
	bool enable_offload;		/* false: MountLocalDiskSegment answers UNABLE_OFFLOAD */
	bool offload_on_evict;		/* false: offload at PutEnd (eager) */
	bool offload_force_evict;	/* offload-on-evict: drop what cannot be queued */
	int64_t offloading_queue_limit; /* 50000: offloads queued or in flight per client */
	double offload_cap_ratio;	/* 0.5: per-round cap (force-evict) / queue limit */
	bool promotion_on_hit;		/* false: no SSD -> DRAM promotion */
	int64_t promotion_admission_threshold; /* 2: sketch count that admits */
	int64_t promotion_queue_limit;	       /* 50000: promotions in flight at most */
	int64_t promotion_max_per_heartbeat;   /* 1: tasks per PromotionObjectHeartbeat */
	/* the legacy shared-FS DISK tier (spec 5.1): <root_fs_dir>/<cluster_id>,
	 * NULL or "" = off; copied */
	const char *fsdir;
	/* copy and move tasks (spec store.md 1.14, 8.1; master/tasks.c) */
	int64_t max_total_finished_tasks;    /* 10000: finished tasks kept for QueryTask */
	int64_t max_total_pending_tasks;     /* 10000: TASK_PENDING_LIMIT_EXCEEDED beyond */
	int64_t max_total_processing_tasks;  /* 10000: handed out at once at most */
	uint64_t pending_task_timeout_ms;    /* 300000; 0 = none */
	uint64_t processing_task_timeout_ms; /* 300000; 0 = none */
	int64_t max_retry_attempts;	     /* 10: hand-outs that found no space */
	/* replica repair (ours; docs/design.md "Replica repair") */
	bool enable_replica_repair;	       /* true */
	int64_t replica_repair_max_inflight;   /* 64: repair tasks pending or handed out */
	uint64_t replica_repair_bytes_per_sec; /* 1 GiB: bytes of repairs started per second */
	/* hot-key dynamic replication (spec store.md 1.14, 8.1; tasks.c) */
	char *dynamic_replication_mode;		/* "off" (NULL too), "observe", "enforce" */
	uint64_t dynamic_replication_window_ms; /* 10000: the heat window */
	double dynamic_replication_qps;		/* 0.8: gets per second that make a key hot */
	int64_t dynamic_replication_max_memory_replicas; /* 2: a hot key's copies at most */
};

/* Fill *c with the defaults above (version = "mooncake-c " MC_VERSION_STRING). */
void mc_master_config_defaults(struct mc_master_config *c);

/* MC_OK, MC_ERR_INVALID_PARAMS (a ratio outside [0, 1], soft-pin default
 * above the maximum, a zero TTL), MC_ERR_NOMEM. */
mc_status mc_master_new(const struct mc_master_config *c, struct mc_master **out);
void mc_master_free(struct mc_master *m);

/*
 * Handle one decoded request (req->hdr.flags without RESPONSE) and append
 * exactly one response frame for it to out: the typed response on
 * success, an error response (status and a text naming the cause)
 * otherwise.  Returns the status written into the response, or
 * MC_ERR_NOMEM if not even an error response fit (out unchanged then; the
 * daemon drops the connection).  Unknown types get MC_ERR_NOT_SUPPORTED.
 *
 * Requests are checked for meaning here (empty key, zero length, unknown
 * segment, bad regex, ...) and answered with the store's codes.
 */
mc_status mc_master_handle(struct mc_master *m, const struct mc_store_msg *req, uint64_t now_ms,
			   struct mc_buf *out);

/*
 * The same, for a caller that can come back later: a request that visits
 * the whole table (GetReplicaListByRegex, RemoveByRegex) may return
 * MC_INPROGRESS with *job_out set and nothing appended.  Then call
 * mc_master_job_run, other requests in between as the caller likes, until
 * it returns anything else: the response is appended to its out then and
 * the job is freed.  mc_master_job_free drops an unfinished job (its
 * client went away); nothing of its request has happened then.  Otherwise
 * *job_out is NULL and this is mc_master_handle.  Same thread and lock
 * rules as every call into the master.
 */
struct mc_master_job;
mc_status mc_master_handle_start(struct mc_master *m, const struct mc_store_msg *req,
				 uint64_t now_ms, struct mc_buf *out,
				 struct mc_master_job **job_out);
/* Work on j for about slice_us microseconds (0: to the end). */
mc_status mc_master_job_run(struct mc_master *m, struct mc_master_job *j, uint64_t now_ms,
			    uint64_t slice_us, struct mc_buf *out);
/* NULL is a no-op. */
void mc_master_job_free(struct mc_master *m, struct mc_master_job *j);

/*
 * For a daemon that checks a mount before it lets the master apply it
 * (server_probe.c's mount probe: does each new segment's transfer engine answer?).
 * The master itself never probes anything; these only read its state.
 *
 * mount_acceptable: req is a MountSegment or ReMountSegment that passes the
 * master's own checks (form, size, range), so a probe could decide it.
 * false for any other request and for one the master refuses by itself:
 * mc_master_handle then answers it with the cause, with no probe needed.
 *
 * segment_mounted: a segment of that id is mounted (mounting it again is a
 * no-op, so it needs no probe).
 *
 * refuse: answer req with error st (not MC_OK) and text, counted as a
 * failure of req's counter like any other refusal.  Returns st, or
 * MC_ERR_NOMEM if not even the error response fit.
 */
bool mc_master_mount_acceptable(struct mc_master *m, const struct mc_store_msg *req);
bool mc_master_segment_mounted(struct mc_master *m, const struct mc_store_uuid *id);
mc_status mc_master_refuse(struct mc_master *m, const struct mc_store_msg *req, mc_status st,
			   const char *text, struct mc_buf *out);

/*
 * Periodic work due at now_ms: expire silent clients (their segments are
 * unmounted at once, their replicas stop being readable, objects with no
 * replica left are absent), finish graceful unmounts whose deadline
 * passed, run a slice of the unmount sweep (below), run an eviction round
 * if the used ratio is above the high
 * watermark or an allocation failed since the last round, release zombie
 * PutStart space past the release timeout, drop expired soft pins.
 * Returns the delay in ms until the next tick is useful (at most 10, the
 * eviction period; the daemon may call it more often).
 */
uint64_t mc_master_tick(struct mc_master *m, uint64_t now_ms);

/*
 * The sweep after an unmount (or a client's expiry, or a wipe of the disk
 * tier): the replicas there are dead at once, and objects left with none
 * are absent to every request at once, but the walk that erases them runs
 * in slices.  mc_master_tick runs one slice; a daemon that wants the sweep
 * done sooner runs more between its requests while sweep_pending says so.
 * run: work for about slice_us microseconds (0: to the end); returns
 * whether work is left.  Same thread and lock rules as mc_master_handle.
 */
bool mc_master_sweep_pending(const struct mc_master *m);
bool mc_master_sweep_run(struct mc_master *m, uint64_t slice_us);

/* ---- drain jobs (spec store.md 1.14, 7.1; master/tasks.c) ---- */

enum mc_master_job_status {
	MC_JOB_CREATED = 0,
	MC_JOB_PLANNING = 1,
	MC_JOB_RUNNING = 2,
	MC_JOB_SUCCEEDED = 3,
	MC_JOB_FAILED = 4,
	MC_JOB_CANCELED = 5,
};
const char *mc_master_job_status_name(int status);

struct mc_master_drain_info {
	struct mc_store_uuid id;
	int status; /* enum mc_master_job_status */
	uint64_t created_at_ms, updated_at_ms;
	uint64_t succeeded_units, failed_units, blocked_units, active_units;
	uint64_t migrated_bytes;
	uint32_t nsegments;
	const char *const *segments; /* borrowed: valid until the next call into m */
	const char *message;	     /* borrowed, likewise */
};

/*
 * A drain job empties the segments named (every mounted segment of each
 * name): they take no new replicas from now on (DRAINING), each object
 * with a replica there gets it moved (move tasks, at most max_concurrency
 * at once) to targets (names; none: any other segment), then they are
 * unmounted.  A unit whose move finds no space fails, the segments are
 * then not unmounted and the job fails with the count in blocked_units;
 * nothing is dropped.  Errors: INVALID_PARAMS (no segments, an unknown or
 * not mounted one, a target also drained), with the cause in err.
 */
mc_status mc_master_drain_create(struct mc_master *m, const char *const *segments,
				 uint32_t nsegments, const char *const *targets, uint32_t ntargets,
				 uint32_t max_concurrency, uint64_t now_ms,
				 struct mc_store_uuid *id_out, char *err, size_t err_len);
/* MC_ERR_JOB_NOT_FOUND when no job has that id. */
mc_status mc_master_drain_query(struct mc_master *m, const struct mc_store_uuid *id,
				struct mc_master_drain_info *out);
/* Stop a job: no new moves; the segments take replicas again.  A job
 * already finished is left as it is (its status is returned in *out). */
mc_status mc_master_drain_cancel(struct mc_master *m, const struct mc_store_uuid *id,
				 uint64_t now_ms, struct mc_master_drain_info *out);

/* ---- the write-ahead log (master/wal.h, master/wal_log.c) ---- */

/*
 * From now on every accepted state change (segment mounted or unmounted,
 * object completed or erased) is appended to w, for the daemon to commit
 * before the replies of the same loop turn leave.  NULL: no log.
 */
struct mc_wal;
void mc_master_set_wal(struct mc_master *m, struct mc_wal *w);
/* Did an append fail (no memory) since the last call?  Then the daemon
 * must acknowledge nothing of this turn, as for a failed commit. */
bool mc_master_wal_take_error(struct mc_master *m);
/* HA (master/ha.c): log that leader took over with view version (a VIEW
 * record, so the records after it carry that view), and read the last one
 * written or replayed (0: none). */
void mc_master_wal_view(struct mc_master *m, uint64_t version, const char *leader);
uint64_t mc_master_wal_view_version(const struct mc_master *m);
/* A standby takes over: the segments its stream left waiting get a full
 * client TTL from now_ms to be mounted again (they were replayed long
 * before). */
void mc_master_wal_rewait(struct mc_master *m, uint64_t now_ms);
/*
 * A new leader takes over: the read leases the old one granted are in no
 * log, so every object counts as leased for default_kv_lease_ttl_ms from
 * now_ms (no plain remove, eviction, replica clear or cut of replicas
 * meanwhile; forced ones as ever).  A read, or a client's location cache
 * entry, under a lease of the old leader holds as it would have there.
 */
void mc_master_lease_all(struct mc_master *m, uint64_t now_ms);
/*
 * Apply one record of the log at start (the mc_wal_open callback's work),
 * before mc_master_set_wal.  Segments come back waiting (hidden objects)
 * until a client mounts a segment of the same name, base and size; those
 * not back within client_ttl_ms of now_ms are dropped with their objects.
 * MC_OK, the decoder's errors (a newer payload version: INVALID_VERSION),
 * MC_ERR_NOMEM.
 */
mc_status mc_master_wal_replay(struct mc_master *m, uint16_t type, const void *payload,
			       uint32_t len, uint64_t now_ms);
/* A record mc_master_wal_replay will get soon (mc_wal_open_hinted): the
 * table slot of its object is prefetched.  Reads only; any payload is safe. */
void mc_master_wal_hint(struct mc_master *m, uint16_t type, const void *payload, uint32_t len);
/*
 * Write the tables to a snapshot (master/snap.h) as log records: a
 * SEG_MOUNT for every memory segment (mounted, unmounting, or waiting to be
 * mounted again), then an OBJ_PUT for every completed object with its
 * memory replicas (waiting ones included).  mc_master_wal_replay of those
 * entries, then of the log after the snapshot's seq, gives the tables
 * back.  It walks both tables of a resize in progress and moves nothing
 * (a settle would copy both tables page by page in the child), and encodes
 * in the master's own record buffer: the daemon runs it in a forked child,
 * on the child's copy of the tables.  sorted: the objects in the order of
 * their first replica's segment and address (the remount after a load
 * then claims in memory order), else in the table's (the loader accepts
 * any order; the remount sorts).
 */
struct mc_snap_writer;
/*
 * Bulk load of a snapshot into an empty master: between begin and end,
 * mc_master_wal_replay sizes nothing as it goes (the table is sized for
 * entries objects once) and inserts each OBJ_PUT without looking its key
 * up first: a snapshot's keys are unique (its writer walked a table) and
 * its checksum covers every byte.  Begin on a master that holds objects
 * only sizes the table; the lookups stay.
 */
void mc_master_snap_load_begin(struct mc_master *m, uint64_t entries);
/* Size the table at once for n objects more than it holds (at most 2^27),
 * so that a replay does not grow it 20 times as it goes; nothing when it
 * is large enough or the memory cannot be had (it grows as it goes). */
void mc_master_table_expect(struct mc_master *m, uint64_t n);
void mc_master_snap_load_end(struct mc_master *m);
mc_status mc_master_snap_dump(struct mc_master *m, struct mc_snap_writer *w, bool sorted);
/* The memory the sorted dump's arrays take at most (32 bytes per object),
 * asked by the parent before it forks the writer. */
uint64_t mc_master_snap_sort_bytes(const struct mc_master *m);
/* The sort takes at most 1/MC_MASTER_SNAP_SORT_SHARE of what the process
 * may still take: the child also gets a copy of every page the parent
 * writes while it runs, and an OOM kill comes before malloc fails. */
#define MC_MASTER_SNAP_SORT_SHARE 2
/* Whether a sort that needs need bytes fits in headroom
 * (mc_hostmem_headroom; UINT64_MAX: unknown, it fits). */
bool mc_master_snap_sort_fits(uint64_t need, uint64_t headroom);

/* ---- queries for the HTTP admin service ---- */

/*
 * Readable replicas of (tenant, key), encoded as a GET_REPLICA_LIST
 * response body (struct mc_store_replica_list, payload only) appended to
 * out; decode with mc_store_payload_decode().  grant_lease: behave as the
 * GetReplicaList RPC (lease, counted as a get: /query_key); false: read
 * only (/batch_query_keys).  tenant NULL or "" = default.  Errors as the
 * RPC: MC_ERR_OBJECT_NOT_FOUND, MC_ERR_REPLICA_IS_NOT_READY, ...
 */
mc_status mc_master_query_replicas(struct mc_master *m, const char *tenant, const char *key,
				   size_t key_len, bool grant_lease, uint64_t now_ms,
				   struct mc_buf *out);

/* Calls fn for each key of tenant (NULL = default) with a readable replica;
 * stops early when fn returns false.  No leases. */
typedef bool (*mc_master_key_fn)(void *arg, const char *key, size_t key_len);
void mc_master_foreach_key(struct mc_master *m, const char *tenant, mc_master_key_fn fn, void *arg);

enum mc_master_segment_status {
	MC_SEGMENT_UNDEFINED = 0,
	MC_SEGMENT_OK = 1,
	MC_SEGMENT_DRAINING = 2,
	MC_SEGMENT_DRAINED = 3,
	MC_SEGMENT_GRACEFULLY_UNMOUNTING = 4,
	MC_SEGMENT_UNMOUNTING = 5,
};
/* Upstream's name of a segment status ("OK", "GRACEFULLY_UNMOUNTING", ...). */
const char *mc_master_segment_status_name(int status);

struct mc_master_segment_info {
	const char *name; /* borrowed, valid during the callback */
	struct mc_store_uuid id;
	struct mc_store_uuid client_id;
	uint64_t base;
	uint64_t size;
	const char *te_endpoint;
	const char *protocol;
	int status; /* enum mc_master_segment_status */
	uint64_t used_bytes;
	uint64_t capacity_bytes;
};
/* Every mounted segment, in mount order; stops when fn returns false. */
typedef bool (*mc_master_segment_fn)(void *arg, const struct mc_master_segment_info *seg);
void mc_master_foreach_segment(struct mc_master *m, mc_master_segment_fn fn, void *arg);

/* RemoveAll at once (in-process callers, tests); tenant NULL or "" = every
 * tenant.  Returns the count removed, or MC_ERR_NOMEM. */
int64_t mc_master_remove_all(struct mc_master *m, const char *tenant, bool force, uint64_t now_ms);
/*
 * RemoveAll in steps, for a caller that takes the master's lock for each
 * step and lets the RPC loop in between (the admin endpoint): begin (NULL:
 * no memory), step until it returns true (about slice_us microseconds a
 * step; 0 = to the end), end (frees the job, returns the count).  The same
 * walk as the RemoveAll request (master.c, "regex scans"): not atomic.
 */
struct mc_master_job *mc_master_remove_all_begin(struct mc_master *m, const char *tenant,
						 size_t tenant_len, bool force);
bool mc_master_remove_all_step(struct mc_master *m, struct mc_master_job *j, uint64_t now_ms,
			       uint64_t slice_us);
int64_t mc_master_remove_all_end(struct mc_master *m, struct mc_master_job *j);

/* ---- metrics ---- */

/*
 * Request counters, upstream's Prometheus names: each X(name) is exported
 * as <name>_requests_total and <name>_failures_total.
 */
#define MC_MASTER_REQ_COUNTERS(X)           \
	X(master_exist_key)                 \
	X(master_put_start)                 \
	X(master_put_end)                   \
	X(master_put_revoke)                \
	X(master_put_credit)                \
	X(master_get_replica_list)          \
	X(master_get_replica_list_by_regex) \
	X(master_remove)                    \
	X(master_remove_by_regex)           \
	X(master_remove_all)                \
	X(master_mount_segment)             \
	X(master_unmount_segment)           \
	X(master_remount_segment)           \
	X(master_ping)                      \
	X(master_evict_disk_replica)        \
	X(master_create_copy_task)          \
	X(master_create_move_task)          \
	X(master_query_task)                \
	X(master_fetch_tasks)               \
	X(master_update_task)

/* Batch counters: <name>_requests_total, _failures_total,
 * _partial_successes_total, _items_total, _failed_items_total. */
#define MC_MASTER_BATCH_COUNTERS(X)      \
	X(master_batch_exist_key)        \
	X(master_batch_get_replica_list) \
	X(master_batch_put_start)        \
	X(master_batch_put_end)          \
	X(master_batch_put_revoke)       \
	X(master_batch_replica_clear)

struct mc_master_req_counter {
	uint64_t requests;
	uint64_t failures;
};
struct mc_master_batch_counter {
	uint64_t requests;
	uint64_t failures;
	uint64_t partial_successes;
	uint64_t items;
	uint64_t failed_items;
};

/* master_value_size_bytes buckets (upper bounds; the last is +Inf). */
#define MC_MASTER_VALUE_SIZE_BUCKETS 8
extern const uint64_t mc_master_value_size_bounds[MC_MASTER_VALUE_SIZE_BUCKETS - 1];

struct mc_master_metrics {
#define MC__REQ_FIELD(n) struct mc_master_req_counter n;
	MC_MASTER_REQ_COUNTERS(MC__REQ_FIELD)
#undef MC__REQ_FIELD
#define MC__BATCH_FIELD(n) struct mc_master_batch_counter n;
	MC_MASTER_BATCH_COUNTERS(MC__BATCH_FIELD)
#undef MC__BATCH_FIELD
	/* gauges */
	uint64_t allocated_bytes;	  /* master_allocated_bytes */
	uint64_t total_capacity_bytes;	  /* master_total_capacity_bytes */
	uint64_t key_count;		  /* master_key_count */
	uint64_t soft_pin_key_count;	  /* master_soft_pin_key_count */
	uint64_t active_clients;	  /* master_active_clients */
	uint64_t discarded_staging_bytes; /* master_put_start_discarded_staging_size */
	/* counters */
	uint64_t put_start_alloc_failures;	/* master_put_start_alloc_failures_total */
	uint64_t put_start_partial_allocations; /* master_put_start_partial_allocations_total */
	uint64_t successful_evictions;		/* master_successful_evictions_total */
	uint64_t attempted_evictions;		/* master_attempted_evictions_total */
	uint64_t evicted_key_count;		/* master_evicted_key_count */
	uint64_t evicted_size_bytes;		/* master_evicted_size_bytes */
	uint64_t put_start_discard_cnt;		/* master_put_start_discard_cnt */
	uint64_t put_start_release_cnt;		/* master_put_start_release_cnt */
	uint64_t mem_cache_hit_nums;		/* mem_cache_hit_nums_ */
	uint64_t mem_cache_hit_bytes;		/* mem_cache_hit_bytes_total */
	uint64_t file_cache_hit_nums;		/* file_cache_hit_nums_ */
	uint64_t file_cache_hit_bytes;		/* file_cache_hit_bytes_total */
	uint64_t valid_get_nums;		/* valid_get_nums_ */
	uint64_t total_get_nums;		/* total_get_nums_ */
	/* the SSD tier (our own names: upstream has no such counters) */
	uint64_t ssd_total_bytes;		/* gauge: sum of ReportSsdCapacity totals */
	uint64_t ssd_used_bytes;		/* gauge: and of their used bytes */
	uint64_t local_disk_clients;		/* gauge: local-disk segments mounted */
	uint64_t offload_in_flight;		/* gauge: offloads queued or handed out */
	uint64_t offload_queued;		/* master_offload_queued_total */
	uint64_t offload_completed;		/* master_offload_completed_total */
	uint64_t offload_failed;		/* master_offload_failed_total */
	uint64_t offload_queue_full;		/* master_offload_queue_full_total */
	uint64_t offload_reregistered;		/* master_offload_reregistered_total */
	uint64_t offload_expired;		/* master_offload_expired_total */
	uint64_t offload_backfilled;		/* master_offload_backfilled_total */
	uint64_t promotion_in_flight;		/* gauge master_promotion_in_flight */
	uint64_t promotion_admitted;		/* master_promotion_admitted_total */
	uint64_t promotion_completed;		/* master_promotion_completed_total */
	uint64_t promotion_completed_bytes;	/* master_promotion_completed_bytes_total */
	uint64_t promotion_expired;		/* master_promotion_expired_total */
	uint64_t promotion_failed;		/* master_promotion_failed_total */
	uint64_t promotion_cancelled;		/* master_promotion_cancelled_total */
	uint64_t promotion_rejected_frequency;	/* master_promotion_rejected_frequency_total */
	uint64_t promotion_rejected_watermark;	/* master_promotion_rejected_watermark_total */
	uint64_t promotion_rejected_cap;	/* master_promotion_rejected_cap_total */
	uint64_t segments_reported_unreachable; /* master_segment_unreachable_reports_total */
	uint64_t replicas_reported_corrupt;	/* master_replica_corrupt_reports_total */
	/* copy and move tasks, replica repair, drain jobs (tasks.c; ours) */
	uint64_t tasks_active;		  /* gauge: pending or handed out */
	uint64_t tasks_succeeded;	  /* master_tasks_succeeded_total */
	uint64_t tasks_failed;		  /* master_tasks_failed_total */
	uint64_t repair_under_replicated; /* gauge: objects waiting for or in repair */
	uint64_t repair_done;		  /* master_replica_repairs_total */
	uint64_t repair_bytes;		  /* master_replica_repair_bytes_total */
	uint64_t repair_failed;		  /* master_replica_repair_failures_total */
	uint64_t repair_given_up;	  /* master_replica_repair_abandoned_total */
	uint64_t drain_migrated_bytes;	  /* master_drain_migrated_bytes_total */
	uint64_t dynrep_candidates;	  /* master_dynamic_replication_candidates_total */
	uint64_t dynrep_queued;		  /* master_dynamic_replication_copies_total */
	/* master_value_size_bytes histogram (PutStart lengths) */
	uint64_t value_size_buckets[MC_MASTER_VALUE_SIZE_BUCKETS]; /* non-cumulative */
	uint64_t value_size_sum;
	uint64_t value_size_count;
};

/* A consistent copy of the counters and gauges as of now. */
void mc_master_metrics(struct mc_master *m, struct mc_master_metrics *out);

/*
 * The legacy shared-FS DISK tier: files of DISK replicas the master
 * dropped (removed, replaced, revoked), for the daemon to delete outside
 * the master's lock with mc_fsdir_unlink (store/fsdir.h), which deletes a
 * file only if it is that replica's.  mc_master_fs_take hands the list
 * over (free it with mc_master_fs_gone_free) and starts a new one.
 */
struct mc_master_fs_gone {
	char *path;
	uint64_t replica_id;
	bool written; /* its writer had reported the file */
};
uint32_t mc_master_fs_take(struct mc_master *m, struct mc_master_fs_gone **out);
void mc_master_fs_gone_free(struct mc_master_fs_gone *g, uint32_t n);
/* The directory of DISK files (<root_fs_dir>/<cluster_id>), "" when off. */
const char *mc_master_fsdir(const struct mc_master *m);

/* Draw a new hash seed for the (still empty) object table, mixing in salt.
 * Before loading a snapshot: its entries come in the writer's table order,
 * which with the writer's seed is hash order, and inserting keys in hash
 * order into a growing linear-probing table clusters them quadratically
 * (10 M objects took minutes instead of seconds).  Does nothing to a table
 * that holds objects. */
void mc_master_table_reseed(struct mc_master *m, uint64_t salt);
/* Whether the object table is being resized (an old table still drains
 * into the new one, table.c): what the tests run requests during. */
bool mc_master_table_resizing(const struct mc_master *m);

/* Where the master's memory for its objects goes: issue 12's breakdown of
 * bytes per object (bench/master_mem_bench.c).  Walks the whole table, so
 * O(objects): for benches and diagnostics, not for the daemon's loop.
 * Heap figures count each chunk as glibc holds it (usable size plus its
 * 8-byte header). */
struct mc_master_mem_usage {
	uint64_t objects;
	uint64_t key_bytes;    /* the keys' own bytes */
	uint64_t header_bytes; /* the fixed part of every object record */
	uint64_t record_heap;  /* the records' heap chunks: header, key, rounding */
	uint64_t ext_heap;     /* further replicas and checksums, heap chunks */
	uint64_t table_bytes;  /* the object table's 8-byte slots (both tables while resizing) */
	uint64_t alloc_meta;   /* the segments' allocators' own records */
};
void mc_master_mem_usage(const struct mc_master *m, struct mc_master_mem_usage *out);

#endif

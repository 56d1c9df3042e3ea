/*
 * master/server_config.c - mooncake_master's flags and config file.
 *
 * One table lists every flag of upstream's mooncake_master (spec store.md
 * 8.1) with its default, its type and what this build does with it.  It
 * is a base/config.h entry table, so the engine parses, bounds-checks and
 * stores every value, and prints the --help lines and --dump-config values:
 *   - flags that act here store into struct mc_master_server_config (or
 *     its embedded struct mc_master_config), converted to the unit the
 *     field wants (durations: a bare number is in the flag's upstream
 *     unit, ms/s/m/h suffixes work everywhere);
 *   - NOEFFECT flags are parsed and checked like the others, so a typo
 *     still fails, and then dropped (most have no field); --help says
 *     "accepted, no effect in this build";
 *   - DEFAULT_ONLY flags turn on something this build does not have (HA,
 *     offload, snapshots, ...).  Their default is accepted; any other
 *     value is refused with "not supported in this build", because
 *     starting without the feature would silently mislead the operator.
 * What stays here is what only the master has: the config-file aliases,
 * the argv syntax (gflags style), the config files (JSON, flat YAML), the
 * fields derived from a flag (rpc_port_explicit, the strategy enum) and
 * the cross-flag check.
 *
 * Precedence: defaults, then the --config_path file, then the flags given
 * on the command line, in order (upstream applies only explicitly set
 * flags over the file; an explicitly set flag is exactly what argv holds).
 * The parser never prints except through mc_master_server_config_parse,
 * which writes help and version to its stream and errors to stderr.
 */
#define MC_LOG_MODULE "master"
#include "master/server.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/log.h"
#include "mc_git_version.h"
#include "mooncake/version.h"

#define SF(field) offsetof(struct mc_master_server_config, field)
#define MF(field)                                           \
	(offsetof(struct mc_master_server_config, master) + \
	 offsetof(struct mc_master_config, field))
#define PORT_MAX     65535
#define NO_FIELD     MC_CONFIG_NO_FIELD
#define NOEFFECT     MC_CONFIG_F_NO_EFFECT
#define DEFAULT_ONLY MC_CONFIG_F_DEFAULT_ONLY
#define DEPRECATED   MC_CONFIG_F_DEPRECATED
#define CMDLINE_ONLY MC_CONFIG_F_CMDLINE_ONLY

/* One row per type; durations say their bare unit and the unit stored. */
#define ROW(name, type, def, off, min, max, fl, chk, doc)                                      \
	{                                                                                      \
		.f = {(name), NULL, (def), (doc), (off), (type), (min), (max)}, .flags = (fl), \
		.check = (chk)                                                                 \
	}
#define DUR(name, def, off, bare, store, min, fl, doc)                                          \
	{                                                                                       \
		.f = {(name), NULL, (def), (doc), (off), MC_CONFIG_DURATION, (min), INT64_MAX}, \
		.flags = (fl), .bare_unit_ms = (bare), .store_unit_ms = (store)                 \
	}
#define BOOL(name, def, off, fl, doc) ROW(name, MC_CONFIG_BOOL, def, off, 0, 0, fl, NULL, doc)
#define INT(name, def, off, min, max, fl, doc) \
	ROW(name, MC_CONFIG_INT, def, off, min, max, fl, NULL, doc)
#define DOUBLE(name, def, off, min, max, fl, doc) \
	ROW(name, MC_CONFIG_DOUBLE, def, off, min, max, fl, NULL, doc)
#define SIZE(name, def, off, min, max, fl, doc) \
	ROW(name, MC_CONFIG_SIZE, def, off, min, max, fl, NULL, doc)
#define STR(name, def, off, fl, chk, doc) ROW(name, MC_CONFIG_STRING, def, off, 0, 0, fl, chk, doc)
/* ms stored, a bare number is ms */
#define MSEC(name, def, off, min, fl, doc) DUR(name, def, off, 1, 1, min, fl, doc)
/* ms stored, a bare number is seconds */
#define SEC_MS(name, def, off, min, fl, doc) DUR(name, def, off, 1000, 1, min, fl, doc)
/* seconds stored (rounded up), a bare number is seconds */
#define SEC(name, def, off, min, fl, doc) DUR(name, def, off, 1000, 1000, min, fl, doc)

static bool check_memory_allocator(const char *v, char *why, size_t why_len);
static bool check_strategy(const char *v, char *why, size_t why_len);
static bool check_ha_backend(const char *v, char *why, size_t why_len);
static bool check_wal_fsync(const char *v, char *why, size_t why_len);
static bool check_cluster_id(const char *v, char *why, size_t why_len);
static bool check_dynamic_mode(const char *v, char *why, size_t why_len);
static bool check_connector(const char *v, char *why, size_t why_len);
static bool check_object_store(const char *v, char *why, size_t why_len);
static bool check_catalog_store(const char *v, char *why, size_t why_len);

/* clang-format off */
static const struct mc_config_entry flags[] = {
	STR("config_path", "", NO_FIELD, CMDLINE_ONLY, NULL,
	    "JSON or YAML (flat key: value) config file; command-line flags override it"),
	/* RPC */
	INT("rpc_port", "0", SF(rpc_port), 0, PORT_MAX, 0,
	    "RPC listen port; 0 falls back to --port (0 given explicitly: any free port)"),
	INT("port", "50051", SF(port), 0, PORT_MAX, DEPRECATED,
	    "legacy RPC port, used when --rpc_port is 0 (0 here too: any free port)"),
	INT("rpc_thread_num", "0", SF(rpc_thread_num), 0, 4096, NOEFFECT,
	    "RPC worker threads (this build serves RPC from one epoll thread)"),
	INT("max_threads", "16", SF(max_threads), 0, 4096, DEPRECATED | NOEFFECT,
	    "legacy thread count (this build serves RPC from one epoll thread)"),
	STR("rpc_address", "0.0.0.0", SF(rpc_address), 0, NULL,
	    "RPC bind address; with --enable_ha also the address put in the leader view "
	    "(with the RPC port), so it must be one the clients and the other masters reach"),
	STR("rpc_interface", "", SF(rpc_interface), 0, NULL,
	    "NIC name whose IPv4 address replaces --rpc_address"),
	SEC("rpc_conn_timeout_seconds", "0", SF(rpc_conn_timeout_seconds), 0, 0,
	    "close RPC connections idle this long (0 = never)"),
	INT("rpc_max_connections", "4096", SF(rpc_max_connections), 1, 1000000, 0,
	    "RPC connections kept open at most; more are accepted and closed at once"),
	MSEC("rpc_frame_timeout", "10000", SF(rpc_frame_timeout_ms), 1, 0,
	     "a request frame must arrive whole within this plus its size at rpc_frame_min_rate, "
	     "from its first byte, or the connection is closed (ms, or with ms/s/m/h)"),
	SIZE("rpc_frame_min_rate", "1mb", SF(rpc_frame_min_rate), 1, INT64_MAX, 0,
	     "the slowest a large request frame may arrive (bytes per second)"),
	SIZE("rpc_max_connection_buffer", "65mb", SF(rpc_max_connection_buffer), 65536, 1ll << 30, 0,
	     "one RPC connection's read buffer at most (a larger frame is refused with TOO_LARGE)"),
	SIZE("rpc_max_buffered_bytes", "512mb", SF(rpc_max_buffered_bytes), 1 << 20, INT64_MAX, 0,
	     "all RPC connections' read buffers for incomplete frames at most; a connection whose "
	     "frame would go beyond is closed"),
	BOOL("rpc_enable_tcp_no_delay", "true", SF(rpc_enable_tcp_no_delay), 0,
	     "set TCP_NODELAY on RPC connections"),
	INT("rpc_busy_poll_us", "50", SF(rpc_busy_poll_us), 0, 1000000, 0,
	    "after a wake-up with work the RPC loop polls this long (us) before it sleeps (0: "
	    "off), up to 1.5 times the gap since the last wake-up when requests come at most "
	    "min(4 polls, 200 us) apart; default MC_MASTER_BUSY_POLL_US, else 50.  Behind a "
	    "mooncake_conductor run "
	    "300: its lookups come 50-100 us apart, and each one that finds the loop asleep pays "
	    "its wake-up (docs/conductor.md)"),
	BOOL("loop_turn_cpu_stats", "false", SF(loop_turn_cpu_stats), 0,
	     "also read the RPC loop thread's CPU clock around each turn (master_loop_turn_cpu_us "
	     "in /metrics; a system call of about 1 us per turn): tells a long turn that was work "
	     "from one that waited for a CPU"),
	/* admin / metrics */
	BOOL("enable_metric_reporting", "true", SF(enable_metric_reporting), 0,
	     "log the metrics summary every 10 s"),
	INT("metrics_port", "9003", SF(metrics_port), 0, PORT_MAX, 0,
	    "admin/metrics HTTP port (0 = any free port)"),
	STR("metrics_host", "0.0.0.0", SF(metrics_host), 0, NULL,
	    "admin/metrics HTTP bind address"),
	STR("auth_secret_file", "", SF(auth_secret_file), 0, NULL,
	    "a file holding the cluster secret (sets MC_AUTH_SECRET_FILE; refused when group or "
	    "others may read it): the RPC port then needs the handshake, the admin port and the "
	    "metadata server the bearer token for what changes state (docs/security.md)"),
	INT("metrics_max_connections", "256", SF(metrics_max_connections), 8, 1000000, 0,
	    "admin/metrics HTTP connections open at most; with fewer than 1/8 left free the ones "
	    "waiting longest for their request are cut"),
	INT("metrics_max_connections_per_ip", "0", SF(metrics_max_connections_per_ip), 0, 1000000,
	    0,
	    "admin/metrics HTTP connections open from one address at most (more are closed at "
	    "once); 0 = no such cap"),
	MSEC("metrics_request_timeout", "30000", SF(metrics_request_timeout_ms), 0, 0,
	     "an admin/metrics HTTP request must arrive whole within this (ms, or ms/s/m/h; "
	     "slow senders are cut); 0 = no bound"),
	/* object model */
	MSEC("default_kv_lease_ttl", "10000", MF(default_kv_lease_ttl_ms), 1, 0,
	     "read lease TTL (ms, or with ms/s/m/h)"),
	MSEC("default_kv_soft_pin_ttl", "1800000", MF(default_kv_soft_pin_ttl_ms), 1, 0,
	     "soft-pin TTL when a put enables it without one (ms, or ms/s/m/h)"),
	MSEC("max_kv_soft_pin_ttl", "86400000", MF(max_kv_soft_pin_ttl_ms), 1, 0,
	     "largest soft-pin TTL a put may ask for (ms, or ms/s/m/h)"),
	BOOL("allow_evict_soft_pinned_objects", "true", MF(allow_evict_soft_pinned_objects), 0,
	     "soft-pinned objects may be evicted in the second pass"),
	DOUBLE("eviction_ratio", "0.05", MF(eviction_ratio), 0, 1, 0,
	       "fraction of evictable objects removed per round"),
	DOUBLE("eviction_high_watermark_ratio", "0.90", MF(eviction_high_watermark_ratio), 0, 1, 0,
	       "used ratio that starts proactive eviction"),
	BOOL("preferred_segment_lru", "false", MF(preferred_segment_lru), 0,
	     "ours: a put whose preferred segment is full evicts that segment's least recently "
	     "used objects (leased, soft-pinned and hard-pinned ones excepted) instead of "
	     "spilling to other segments (paper 4.6)"),
	INT("preferred_segment_lru_batch", "1", MF(preferred_segment_lru_batch), 1, 1000000, 0,
	    "ours: objects one such round evicts at least (1: exact LRU, the space the put needs "
	    "and no more)"),
	DOUBLE("nof_eviction_ratio", "0.05", NO_FIELD, 0, 1, NOEFFECT,
	       "NoF tier eviction ratio"),
	DOUBLE("nof_eviction_high_watermark_ratio", "0.90", NO_FIELD, 0, 1, NOEFFECT,
	       "NoF tier high watermark"),
	SEC_MS("client_ttl", "10", MF(client_ttl_ms), 1, 0,
	       "client liveness TTL (s, or with ms/s/m/h); config-file key client_live_ttl_sec"),
	SIZE("max_segment_size", "1099511627776", MF(max_segment_size), 1 << 20, INT64_MAX, 0,
	     "largest segment a client may mount (not upstream's flag: the master cannot see a "
	     "client's memory, so it bounds what one mount may claim; 1 TiB, sizes take k/m/g/t)"),
	BOOL("mount_probe", "true", SF(mount_probe), 0,
	     "apply a MountSegment or ReMountSegment only once each new segment's transfer engine "
	     "answers a Probe on its RPC port (not upstream's flag; false for tools that mount "
	     "segments with no engine behind them)"),
	MSEC("mount_probe_timeout", "2000", SF(mount_probe_timeout_ms), 1, 0,
	     "a mount probe's deadline, connect and answer together (ms, or ms/s/m/h); a mount "
	     "whose engine has not answered by then is refused with ENDPOINT"),
	SEC_MS("put_start_discard_timeout_sec", "30", MF(put_start_discard_timeout_ms), 1, 0,
	       "after this an unfinished put may be pre-empted (s, or ms/s/m/h)"),
	SEC_MS("put_start_release_timeout_sec", "600", MF(put_start_release_timeout_ms), 1, 0,
	       "after this an unfinished put's space is reclaimed (s, or ms/s/m/h)"),
	STR("memory_allocator", "offset", SF(memory_allocator), 0, check_memory_allocator,
	    "segment allocator: offset (cachelib is not in this build)"),
	STR("allocation_strategy", "random", SF(allocation_strategy), 0, check_strategy,
	    "replica placement: random, free_ratio_first or local_first (one replica on the "
	    "writer's host first, then the next hosts in host-id order)"),
	BOOL("enable_multi_tenants", "false", MF(enable_multi_tenants), 0,
	     "keep tenants apart (false: every tenant is the default one)"),
	/* regex calls (this build's own limits; upstream has none) */
	MSEC("regex_time_budget", "10000", MF(regex_time_budget_ms), 1, 0,
	     "longest a regex call may scan before it fails with INVALID_PARAMS "
	     "(ms, or ms/s/m/h)"),
	INT("regex_match_limit", "1000000", MF(regex_match_limit), 1000, UINT32_MAX, 0,
	    "PCRE2 backtracking steps per key before a regex call fails with INVALID_PARAMS"),
	SIZE("regex_heap_limit", "16m", MF(regex_heap_limit), 65536, 1ll << 30, 0,
	     "backtracking memory per key before a regex call fails (bytes, k/m/g suffixes)"),
	/* embedded HTTP metadata server */
	BOOL("enable_http_metadata_server", "false", SF(enable_http_metadata_server), 0,
	     "embed the transfer engine's HTTP metadata server"),
	INT("http_metadata_server_port", "8080", SF(http_metadata_server_port), 0, PORT_MAX, 0,
	    "its port (0 = any free port)"),
	STR("http_metadata_server_host", "0.0.0.0", SF(http_metadata_server_host), 0, NULL,
	    "its bind address"),
	INT("http_metadata_server_max_connections", "1000",
	    SF(http_metadata_server_max_connections), 8, 1000000, 0,
	    "its connections open at most; with fewer than 1/8 left free the ones waiting "
	    "longest for their request are cut"),
	INT("http_metadata_server_max_connections_per_ip", "0",
	    SF(http_metadata_server_max_connections_per_ip), 0, 1000000, 0,
	    "its connections open from one address at most (more are closed at once); 0 = no "
	    "such cap"),
	MSEC("http_metadata_server_request_timeout", "30000",
	     SF(http_metadata_server_request_timeout_ms), 0, 0,
	     "a request to it must arrive whole within this (ms, or ms/s/m/h); 0 = no bound"),
	BOOL("enable_metadata_cleanup_on_timeout", "false", NO_FIELD, DEFAULT_ONLY,
	     "delete expired clients' metadata keys"),
	/* HA */
	BOOL("enable_ha", "false", SF(enable_ha), 0,
	     "leader election: only the master holding the cluster's view in the coordinator "
	     "serves; the others are standbys that refuse requests with "
	     "UNAVAILABLE_IN_CURRENT_MODE and take over when the leader's lease lapses"),
	STR("ha_backend_type", "etcd", SF(ha_backend_type), 0, check_ha_backend,
	    "HA coordinator: etcd or redis (k8s is not in this build)"),
	STR("ha_backend_connstring", "", SF(ha_backend_connstring), 0, NULL,
	    "HA coordinator: etcd endpoints host:port separated by ';' or ',', or "
	    "redis://[[user]:password@]host[:port]"),
	STR("etcd_endpoints", "", SF(etcd_endpoints), 0, NULL,
	    "legacy etcd connection string (used when --ha_backend_connstring is empty)"),
	INT("ha_lease_ttl_seconds", "5", SF(ha_lease_ttl_seconds), 1, 3600, 0,
	    "the leader's lease in the coordinator (s; this build's own, upstream fixes 5): a "
	    "leader that cannot renew within it steps down, a new one warms up for as long "
	    "before serving"),
	INT("ha_sync_replicas", "-1", SF(ha_sync_replicas), -1, 16, 0,
	    "with --enable_ha: standbys that must have received a change's log record "
	    "(besides the leader's own log) before it is acknowledged; -1: 1 while some "
	    "standby streams the leader's log, 0 when none does; N: always N (writes wait "
	    "while fewer stream)"),
	STR("cluster_id", "mooncake_cluster", SF(cluster_id), 0, check_cluster_id,
	    "cluster namespace ([0-9A-Za-z_.-], at most 128 characters)"),
	BOOL("enable_oplog", "false", NO_FIELD, DEFAULT_ONLY,
	     "HA metadata replication"),
	INT("oplog_poll_interval_ms", "1000", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "standby poll interval"),
	INT("oplog_batch_max_entries", "1024", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "OpLog entries per batch"),
	INT("batch_oplog_retry_timeout_sec", "180", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "standby retry window"),
	STR("pod_name", "", NO_FIELD, NOEFFECT, NULL,
	    "Kubernetes pod name"),
	STR("pod_namespace", "", NO_FIELD, NOEFFECT, NULL,
	    "Kubernetes pod namespace"),
	/* SSD offload and promotion */
	BOOL("enable_offload", "false", MF(enable_offload), 0,
	     "master side of SSD offload: clients may mount local-disk segments, objects get "
	     "LOCAL_DISK replicas"),
	BOOL("offload_on_evict", "false", MF(offload_on_evict), 0,
	     "offload at eviction time instead of at PutEnd (needs --enable_offload)"),
	BOOL("offload_force_evict", "false", MF(offload_force_evict), 0,
	     "in offload-on-evict mode, drop objects beyond the per-cycle cap or whose offload "
	     "cannot be queued instead of keeping them in memory"),
	INT("offloading_queue_limit", "50000", MF(offloading_queue_limit), 1, 100000000, 0,
	    "offloads queued or in flight per local-disk segment at most"),
	DOUBLE("offload_cap_ratio", "0.5", MF(offload_cap_ratio), 0, 1, 0,
	       "offload-on-evict with force-evict: objects queued per eviction round at most, as a "
	       "fraction of --offloading_queue_limit"),
	BOOL("promotion_on_hit", "false", MF(promotion_on_hit), 0,
	     "promote objects read only from a client's SSD back to memory (needs "
	     "--enable_offload)"),
	INT("promotion_admission_threshold", "2", MF(promotion_admission_threshold), 0,
	    UINT32_MAX, 0,
	    "hits (count-min sketch estimate) that admit a promotion; 1 = the first read"),
	INT("promotion_queue_limit", "50000", MF(promotion_queue_limit), 0, INT64_MAX, 0,
	    "promotions queued or in flight at most"),
	INT("promotion_max_per_heartbeat", "1", MF(promotion_max_per_heartbeat), 0, INT64_MAX, 0,
	    "promotion tasks handed out per PromotionObjectHeartbeat at most"),
	BOOL("enable_disk_eviction", "true", NO_FIELD, NOEFFECT,
	     "storage config returned to clients"),
	INT("quota_bytes", "0", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "storage quota returned to clients"),
	STR("root_fs_dir", "", SF(root_fs_dir), 0, NULL,
	    "legacy shared-FS DISK tier: every object also gets a DISK replica, a file under "
	    "<root_fs_dir>/<cluster_id> its writer writes and any client seeing the directory "
	    "reads; an existing directory; not with --enable_offload"),
	INT("global_file_segment_size", "9223372036854775807", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "declared legacy file capacity"),
	/* tenants */
	STR("tenant_quota_connector_type", "file", NO_FIELD, NOEFFECT, check_connector,
	    "tenant quota policy source: file or etcd"),
	STR("tenant_quota_connector_uri", "", NO_FIELD, NOEFFECT, NULL,
	    "tenant quota policy location"),
	/* dynamic replication */
	STR("dynamic_replication_mode", "off", MF(dynamic_replication_mode), 0, check_dynamic_mode,
	    "hot keys (gets above the QPS threshold within the heat window) get extra memory "
	    "replicas through copy tasks: off, observe (count them only) or enforce"),
	SEC_MS("dynamic_replication_heat_window_seconds", "10", MF(dynamic_replication_window_ms),
	       1, 0, "the window the gets of a key are counted in"),
	DOUBLE("dynamic_replication_admission_qps_threshold", "0.8", MF(dynamic_replication_qps),
	       0, 1000000, 0, "gets per second (over the window) that make a key hot"),
	INT("dynamic_replication_max_memory_replicas", "2",
	    MF(dynamic_replication_max_memory_replicas), 1, 255, 0,
	    "a hot key gets memory replicas up to this many"),
	/* the write-ahead log (docs/durability.md, "Master: the write-ahead log") */
	STR("wal_dir", "", SF(wal_dir), 0, NULL,
	    "write-ahead log directory (made when missing): every accepted state change is "
	    "logged before its reply leaves and replayed at start; \"\" = no log, a restart "
	    "forgets every object"),
	STR("wal_fsync", "everysec", SF(wal_fsync), 0, check_wal_fsync,
	    "when the log reaches the disk: always (fdatasync before each loop turn's replies), "
	    "everysec (once a second: a crash loses at most about a second of acknowledged "
	    "changes) or no (the kernel decides)"),
	/* snapshots */
	BOOL("enable_snapshot", "false", SF(enable_snapshot), 0,
	     "every snapshot_interval_seconds a forked child writes the tables to a snapshot in "
	     "MOONCAKE_SNAPSHOT_LOCAL_PATH (default: the --wal_dir) and the log files it covers are "
	     "deleted; needs --wal_dir"),
	BOOL("enable_snapshot_restore", "false", SF(enable_snapshot_restore), 0,
	     "at start load the newest valid snapshot (a damaged one: the one before) and replay "
	     "the log after it; without it a log cut by snapshots refuses to start"),
	SEC("snapshot_interval_seconds", "600", SF(snapshot_interval_seconds), 1, 0,
	    "time between snapshots (one is skipped when the log has not moved)"),
	SEC("snapshot_child_timeout_seconds", "300", SF(snapshot_child_timeout_seconds), 1, 0,
	    "a snapshot child still running after this is killed and the snapshot counted failed"),
	INT("snapshot_retention_count", "2", SF(snapshot_retention_count), 1, 1000, 0,
	    "snapshots kept; the log is kept from the oldest one kept, so a damaged newest one "
	    "falls back to an older one"),
	STR("snapshot_object_store_type", "", NO_FIELD, NOEFFECT, check_object_store,
	    "local (files in MOONCAKE_SNAPSHOT_LOCAL_PATH or the --wal_dir, the only store in "
	    "this build; s3 is refused)"),
	STR("snapshot_catalog_store_type", "", NO_FIELD, NOEFFECT, check_catalog_store,
	    "embedded (the file names are the catalog, the only one in this build; redis is "
	    "refused)"),
	STR("snapshot_catalog_store_connstring", "", NO_FIELD, NOEFFECT, NULL,
	    "catalog connection string (for redis, which this build refuses)"),
	STR("snapshot_backup_dir", "", NO_FIELD, DEFAULT_ONLY, NULL,
	    "extra local snapshot copy"),
	/* copy/move tasks */
	INT("max_total_finished_tasks", "10000", MF(max_total_finished_tasks), 0, INT64_MAX, 0,
	    "finished copy/move tasks kept for query_task (the oldest go first)"),
	INT("max_total_pending_tasks", "10000", MF(max_total_pending_tasks), 1, INT64_MAX, 0,
	    "copy/move tasks waiting at most; more are refused with TASK_PENDING_LIMIT_EXCEEDED"),
	INT("max_total_processing_tasks", "10000", MF(max_total_processing_tasks), 1, INT64_MAX,
	    0, "copy/move tasks handed out to clients at once at most"),
	SEC_MS("pending_task_timeout_sec", "300", MF(pending_task_timeout_ms), 0, 0,
	       "a task not handed out within this fails (0 = none)"),
	SEC_MS("processing_task_timeout_sec", "300", MF(processing_task_timeout_ms), 0, 0,
	       "a task handed out and not reported within this fails (0 = none)"),
	INT("max_retry_attempts", "10", MF(max_retry_attempts), 0, INT64_MAX, 0,
	    "hand-outs of a task that find no space for its targets before it fails with "
	    "NO_AVAILABLE_HANDLE"),
	BOOL("enable_replica_repair", "true", MF(enable_replica_repair), 0,
	     "re-create the memory replicas a lost segment took (client expiry, unmount, drain) "
	     "from a surviving one, so every object keeps its replica count (upstream never "
	     "does)"),
	INT("replica_repair_max_inflight", "64", MF(replica_repair_max_inflight), 1, 1000000, 0,
	    "repair copies pending or running at once at most"),
	SIZE("replica_repair_bytes_per_sec", "1073741824", MF(replica_repair_bytes_per_sec), 1,
	     INT64_MAX, 0,
	     "bytes of repair copies started per second at most (k/m/g/t suffixes), so repair "
	     "leaves the network to foreground reads and writes"),
	/* CXL */
	BOOL("enable_cxl", "false", NO_FIELD, DEFAULT_ONLY,
	     "CXL memory pool"),
	STR("cxl_path", "/dev/dax0.0", NO_FIELD, NOEFFECT, NULL,
	    "CXL device"),
	SIZE("cxl_size", "8589934592", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	     "CXL pool size (bytes, k/m/g/t suffixes)"),
	/* NoF */
	INT("nof_heartbeat_interval_sec", "10", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "NoF segment heartbeat period"),
	INT("nof_heartbeat_probe_timeout_ms", "1000", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "NoF probe timeout"),
	INT("nof_heartbeat_failures_threshold", "3", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "NoF failures before unmount"),
	/* KV events */
	BOOL("enable_kv_events", "false", NO_FIELD, DEFAULT_ONLY,
	     "ZMQ KV-event publisher"),
	STR("kv_events_bind_endpoint", "", NO_FIELD, NOEFFECT, NULL,
	    "KV-event endpoint"),
	STR("kv_events_backend_id", "", NO_FIELD, NOEFFECT, NULL,
	    "KV-event backend id"),
	BOOL("kv_events_emit_legacy_compat", "true", NO_FIELD, NOEFFECT,
	     "KV-event legacy fields"),
	BOOL("kv_events_emit_object_key", "true", NO_FIELD, NOEFFECT,
	     "KV-event object key"),
	INT("kv_events_queue_capacity", "65536", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	    "KV-event queue (0 = unbounded)"),
	STR("kv_events_model_name", "", NO_FIELD, NOEFFECT | DEPRECATED, NULL,
	    "ignored"),
	STR("kv_events_tenant_id", "default", NO_FIELD, NOEFFECT | DEPRECATED, NULL,
	    "ignored"),
	STR("kv_events_additional_salt", "", NO_FIELD, NOEFFECT | DEPRECATED, NULL,
	    "ignored"),
	STR("kv_events_lora_name", "", NO_FIELD, NOEFFECT | DEPRECATED, NULL,
	    "ignored"),
	INT("kv_events_block_size", "0", NO_FIELD, 0, INT64_MAX, NOEFFECT | DEPRECATED,
	    "ignored"),
	INT("kv_events_dp_rank", "0", NO_FIELD, 0, INT64_MAX, NOEFFECT | DEPRECATED,
	    "ignored"),
	/* library-level */
	BOOL("use_mmap_arena_allocator", "false", NO_FIELD, NOEFFECT,
	     "mmap arena allocator"),
	SIZE("mmap_arena_pool_size", "8589934592", NO_FIELD, 0, INT64_MAX, NOEFFECT,
	     "mmap arena pool (bytes, k/m/g/t suffixes)"),
};
/* clang-format on */

/* Other names for flags: config-file keys and deprecated spellings. */
static const struct {
	const char *alias, *name;
} aliases[] = {
	{"client_live_ttl_sec", "client_ttl"},
	{"snapshot_payload_store_type", "snapshot_object_store_type"},
	{"snapshot_payload_backend_type", "snapshot_object_store_type"},
	{"snapshot_catalog_backend_type", "snapshot_catalog_store_type"},
	{"snapshot_catalog_backend_connstring", "snapshot_catalog_store_connstring"},
};

/* ---- small helpers ------------------------------------------------------- */

static void errf(char *err, size_t err_len, const char *fmt, ...) MC_PRINTF(3, 4);
static void errf(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !err_len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

static bool one_of(const char *v, const char *const *set, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v, set[i]) == 0)
			return true;
	return false;
}

/* v is one of set; else "must be <choices>, not '<v>'" in why. */
static bool check_choice(const char *v, const char *const *set, size_t n, const char *choices,
			 char *why, size_t why_len)
{
	if (one_of(v, set, n))
		return true;
	errf(why, why_len, "must be %s, not '%s'", choices, v);
	return false;
}

static bool check_memory_allocator(const char *v, char *why, size_t why_len)
{
	if (strcmp(v, "offset") == 0)
		return true;
	if (strcmp(v, "cachelib") == 0)
		errf(why, why_len, "'cachelib' is not supported in this build");
	else
		errf(why, why_len, "must be 'offset' or 'cachelib', not '%s'", v);
	return false;
}

static bool check_strategy(const char *v, char *why, size_t why_len)
{
	static const char *const later[] = {"ssd_free_ratio_first", "cxl"};
	enum mc_alloc_strategy st;

	if (mc_alloc_strategy_parse(v, &st))
		return true;
	if (one_of(v, later, MC_ARRAY_SIZE(later)))
		errf(why, why_len, "'%s' is not supported in this build", v);
	else
		errf(why, why_len,
		     "must be random, free_ratio_first, ssd_free_ratio_first, cxl or local_first, "
		     "not '%s'",
		     v);
	return false;
}

static bool check_wal_fsync(const char *v, char *why, size_t why_len)
{
	static const char *const ok[] = {"always", "everysec", "no"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "always, everysec or no", why, why_len);
}

static bool check_ha_backend(const char *v, char *why, size_t why_len)
{
	static const char *const ok[] = {"etcd", "redis"};

	if (strcmp(v, "k8s") == 0) {
		snprintf(why, why_len,
			 "k8s (a Kubernetes Lease) is not supported in this build: use etcd or "
			 "redis");
		return false;
	}
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "etcd or redis", why, why_len);
}

static bool check_cluster_id(const char *v, char *why, size_t why_len)
{
	size_t n = strlen(v);

	if (n == 0 || n > 128) {
		errf(why, why_len, "must have 1 to 128 characters");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];
		if (!isalnum(ch) && ch != '_' && ch != '.' && ch != '-') {
			errf(why, why_len, "may only contain [0-9A-Za-z_.-]");
			return false;
		}
	}
	return true;
}

static bool check_dynamic_mode(const char *v, char *why, size_t why_len)
{
	static const char *const ok[] = {"off", "observe", "enforce"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "off, observe or enforce", why, why_len);
}

static bool check_connector(const char *v, char *why, size_t why_len)
{
	static const char *const ok[] = {"file", "etcd"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "file or etcd", why, why_len);
}

static bool check_object_store(const char *v, char *why, size_t why_len)
{
	static const char *const ok[] = {"", "local"};

	if (strcmp(v, "s3") == 0) {
		errf(why, why_len,
		     "s3 is not supported in this build: snapshots are local "
		     "files (MOONCAKE_SNAPSHOT_LOCAL_PATH or the --wal_dir)");
		return false;
	}
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "local", why, why_len);
}

static bool check_catalog_store(const char *v, char *why, size_t why_len)
{
	static const char *const ok[] = {"", "embedded"};

	if (strcmp(v, "redis") == 0) {
		errf(why, why_len,
		     "redis is not supported in this build: the snapshot "
		     "directory's file names are the catalog");
		return false;
	}
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "embedded", why, why_len);
}

static const struct mc_config_entry *flag_find(const char *name)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(aliases); i++)
		if (strcmp(name, aliases[i].alias) == 0) {
			name = aliases[i].name;
			break;
		}
	return mc_config_entry_find(flags, MC_ARRAY_SIZE(flags), name);
}

/* The fields a flag's value decides besides its own. */
static void derive(struct mc_master_server_config *c, const struct mc_config_entry *e)
{
	if (e->f.offset == SF(rpc_port))
		c->rpc_port_explicit = true;
	if (e->f.offset == SF(allocation_strategy) &&
	    !mc_alloc_strategy_parse(c->allocation_strategy, &c->master.strategy))
		mc_assert(!"allocation_strategy stored without passing its check");
}

static mc_status set_flag(struct mc_master_server_config *c, const struct mc_config_entry *e,
			  const char *text, char *err, size_t err_len)
{
	mc_status st = mc_config_entry_set(e, c, text);

	if (st == MC_OK) {
		derive(c, e);
	} else if (st == MC_ERR_NOMEM) {
		errf(err, err_len, "out of memory");
	} else {
		/* the engine's text names the flag; mc_set_error added the
		 * status name, which the operator does not need */
		const char *why = mc_last_error();
		char tail[64];
		size_t n = strlen(why), tn;

		tn = (size_t)snprintf(tail, sizeof(tail), " (%s)", mc_status_name(st));
		if (tn < sizeof(tail) && n >= tn && strcmp(why + n - tn, tail) == 0)
			n -= tn;
		errf(err, err_len, "%.*s", (int)MC_MIN(n, (size_t)INT_MAX), why);
	}
	return st;
}

/* ---- public: defaults, set, release -------------------------------------- */

/* The environment the daemon reads (upstream's names). */
static const struct mc_config_entry env_vars[] = {
	{.f = {"rpc_busy_poll_us", "MC_MASTER_BUSY_POLL_US", "50",
	       "the default of --rpc_busy_poll_us (a bad value is ignored with a warning)",
	       SF(rpc_busy_poll_us), MC_CONFIG_INT, 0, 1000000}},
	{.f = {"snapshot_local_path", "MOONCAKE_SNAPSHOT_LOCAL_PATH", "",
	       "the snapshots' directory (--enable_snapshot, --enable_snapshot_restore, and with "
	       "--enable_ha the leader's snapshot a standby keeps: one per master; made when "
	       "missing); unset or \"\": the --wal_dir",
	       SF(snapshot_local_path), MC_CONFIG_STRING, 0, 0}},
};

void mc_master_server_config_defaults(struct mc_master_server_config *c)
{
	memset(c, 0, sizeof(*c));
	mc_master_config_defaults(&c->master);
	mc_config_entry_defaults(flags, MC_ARRAY_SIZE(flags), c);
	mc_config_entry_defaults(env_vars, MC_ARRAY_SIZE(env_vars), c);
	(void)mc_config_entry_load_env(env_vars, MC_ARRAY_SIZE(env_vars), c);
	derive(c, flag_find("allocation_strategy"));
	c->rpc_port_explicit = false;
}

void mc_master_server_config_release(struct mc_master_server_config *c)
{
	mc_config_entry_release(flags, MC_ARRAY_SIZE(flags), c);
	mc_config_entry_release(env_vars, MC_ARRAY_SIZE(env_vars), c);
}

mc_status mc_master_server_config_set(struct mc_master_server_config *c, const char *name,
				      const char *value, char *err, size_t err_len)
{
	const struct mc_config_entry *e = flag_find(name);

	if (err && err_len)
		err[0] = '\0';
	if (!e || (e->flags & CMDLINE_ONLY)) {
		errf(err, err_len, "unknown flag '%s'", name);
		return MC_ERR_NOT_FOUND;
	}
	return set_flag(c, e, value ? value : "", err, err_len);
}

/* Cross-field checks, after everything is set. */
static mc_status config_check(const struct mc_master_server_config *c, char *err, size_t err_len)
{
	if (c->master.default_kv_soft_pin_ttl_ms > c->master.max_kv_soft_pin_ttl_ms) {
		errf(err, err_len,
		     "default_kv_soft_pin_ttl (%" PRIu64
		     " ms) exceeds max_kv_soft_pin_ttl (%" PRIu64 " ms)",
		     c->master.default_kv_soft_pin_ttl_ms, c->master.max_kv_soft_pin_ttl_ms);
		return MC_ERR_INVALID_PARAMS;
	}
	if (c->root_fs_dir && *c->root_fs_dir && c->master.enable_offload) {
		errf(err, err_len,
		     "--root_fs_dir (the legacy shared-FS DISK tier) cannot be combined with "
		     "--enable_offload (the SSD tier): use one of them");
		return MC_ERR_INVALID_PARAMS;
	}
	return MC_OK;
}

/* ---- config files -------------------------------------------------------- */

static mc_status file_set(struct mc_master_server_config *c, const char *key, const char *value,
			  const char *where, char *err, size_t err_len)
{
	char why[256];
	mc_status st = mc_master_server_config_set(c, key, value, why, sizeof(why));

	if (st == MC_ERR_NOT_FOUND) {
		mc_warn("config file: ignoring unknown key '%s'%s", key, where);
		return MC_OK;
	}
	if (st)
		errf(err, err_len, "config file%s: %s", where, why);
	return st;
}

static mc_status load_json(struct mc_master_server_config *c, const char *text, size_t len,
			   char *err, size_t err_len)
{
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	mc_status st = MC_OK;

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!root) {
		errf(err, err_len, "config file: bad JSON at line %d column %d: %s", jerr.line,
		     jerr.column, jerr.text);
		return MC_ERR_INVALID_PARAMS;
	}
	if (!json_is_object(root)) {
		errf(err, err_len, "config file: the JSON top level must be an object");
		json_decref(root);
		return MC_ERR_INVALID_PARAMS;
	}
	json_object_foreach(root, key, v)
	{
		char num[64];
		const char *text_value;

		switch (json_typeof(v)) {
		case JSON_STRING:
			text_value = json_string_value(v);
			if (strlen(text_value) != json_string_length(v)) {
				errf(err, err_len, "config file: key '%s' holds a NUL byte", key);
				st = MC_ERR_INVALID_PARAMS;
				goto out;
			}
			break;
		case JSON_INTEGER:
			snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
			text_value = num;
			break;
		case JSON_REAL:
			snprintf(num, sizeof(num), "%.17g", json_real_value(v));
			text_value = num;
			break;
		case JSON_TRUE:
			text_value = "true";
			break;
		case JSON_FALSE:
			text_value = "false";
			break;
		case JSON_NULL:
			continue;
		default:
			if (!flag_find(key)) {
				mc_warn("config file: ignoring unknown key '%s'", key);
				continue;
			}
			errf(err, err_len, "config file: key '%s' must be a scalar", key);
			st = MC_ERR_INVALID_PARAMS;
			goto out;
		}
		st = file_set(c, key, text_value, "", err, err_len);
		if (st)
			goto out;
	}
out:
	json_decref(root);
	return st;
}

/* Strip a trailing comment (a # outside quotes, at the start or after a
 * blank) and surrounding blanks; unquote a quoted value.  Returns false
 * for an unterminated quote. */
static bool yaml_scalar(char *s, char **out)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == '"' || *s == '\'') {
		char q = *s, *r = s + 1, *w = s;
		for (; *r && *r != q; r++) {
			if (q == '"' && *r == '\\' && r[1]) {
				r++;
				switch (*r) {
				case 'n':
					*w++ = '\n';
					break;
				case 't':
					*w++ = '\t';
					break;
				default:
					*w++ = *r;
				}
				continue;
			}
			if (q == '\'' && *r == '\'' && r[1] == '\'') /* '' is a quote */
				r++;
			*w++ = *r;
		}
		if (*r != q)
			return false;
		*w = '\0';
		/* only blanks or a comment may follow */
		for (r++; *r == ' ' || *r == '\t'; r++)
			;
		if (*r && *r != '#')
			return false;
		*out = s;
		return true;
	}
	for (end = s; *end; end++)
		if (*end == '#' && (end == s || end[-1] == ' ' || end[-1] == '\t'))
			break;
	*end = '\0';
	while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
		*--end = '\0';
	*out = s;
	return true;
}

static mc_status load_yaml(struct mc_master_server_config *c, const char *text, size_t len,
			   char *err, size_t err_len)
{
	char *copy = mc_malloc(len + 1), *line, *next;
	mc_status st = MC_OK;
	int lineno = 0;

	if (!copy) {
		errf(err, err_len, "out of memory");
		return MC_ERR_NOMEM;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	if (memchr(text, '\0', len)) {
		errf(err, err_len, "config file: NUL byte in YAML text");
		st = MC_ERR_INVALID_PARAMS;
		goto out;
	}
	for (line = copy; line; line = next) {
		char *colon, *key, *value, *k_end, where[32];

		lineno++;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (next == NULL && *line == '\0')
			break;
		k_end = line + strlen(line);
		if (k_end > line && k_end[-1] == '\r')
			*--k_end = '\0';
		key = line;
		while (*key == ' ' || *key == '\t')
			key++;
		if (*key == '\0' || *key == '#')
			continue;
		if (strcmp(key, "---") == 0 || strcmp(key, "...") == 0)
			continue;
		snprintf(where, sizeof(where), " line %d", lineno);
		if (key != line) {
			errf(err, err_len, "config file line %d: nested YAML is not supported",
			     lineno);
			st = MC_ERR_INVALID_PARAMS;
			goto out;
		}
		colon = strchr(key, ':');
		if (!colon) {
			errf(err, err_len, "config file line %d: expected 'key: value'", lineno);
			st = MC_ERR_INVALID_PARAMS;
			goto out;
		}
		*colon = '\0';
		for (k_end = colon; k_end > key && (k_end[-1] == ' ' || k_end[-1] == '\t');)
			*--k_end = '\0';
		if (*key == '"' || *key == '\'') {
			/* a quoted key: drop the quotes */
			size_t kl = strlen(key);
			if (kl < 2 || key[kl - 1] != key[0]) {
				errf(err, err_len, "config file line %d: bad quoted key", lineno);
				st = MC_ERR_INVALID_PARAMS;
				goto out;
			}
			key[kl - 1] = '\0';
			key++;
		}
		if (!yaml_scalar(colon + 1, &value)) {
			errf(err, err_len, "config file line %d: unterminated or trailing quote",
			     lineno);
			st = MC_ERR_INVALID_PARAMS;
			goto out;
		}
		if (*value == '\0' && colon[1] != '"' && colon[1] != '\'' &&
		    strspn(colon + 1, " \t") == strlen(colon + 1)) {
			/* "key:" alone opens a mapping or means null */
			if (next && (*next == ' ' || *next == '\t' || *next == '-')) {
				errf(err, err_len,
				     "config file line %d: nested YAML is not supported", lineno);
				st = MC_ERR_INVALID_PARAMS;
				goto out;
			}
			continue;
		}
		if (strcmp(value, "~") == 0 || strcmp(value, "null") == 0)
			continue;
		st = file_set(c, key, value, where, err, err_len);
		if (st)
			goto out;
	}
out:
	mc_free(copy);
	return st;
}

mc_status mc_master_server_config_load_buffer(struct mc_master_server_config *c, const char *text,
					      size_t len, char *err, size_t err_len)
{
	size_t i = 0;

	if (err && err_len)
		err[0] = '\0';
	/* a UTF-8 byte order mark is allowed */
	if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
		text += 3;
		len -= 3;
	}
	while (i < len && isspace((unsigned char)text[i]))
		i++;
	if (i < len && text[i] == '{')
		return load_json(c, text, len, err, err_len);
	return load_yaml(c, text, len, err, err_len);
}

#define CONFIG_FILE_MAX (16u << 20)

static mc_status load_file(struct mc_master_server_config *c, const char *path, char *err,
			   size_t err_len)
{
	FILE *f = fopen(path, "rb");
	struct mc_buf buf;
	mc_status st;

	if (!f) {
		errf(err, err_len, "cannot open config file %s: %s", path, strerror(errno));
		return MC_ERR_INVALID_PARAMS;
	}
	mc_buf_init(&buf);
	for (;;) {
		size_t n;
		if (buf.len == buf.cap) {
			if (buf.cap >= CONFIG_FILE_MAX) {
				errf(err, err_len, "config file %s is larger than %u bytes", path,
				     CONFIG_FILE_MAX);
				st = MC_ERR_INVALID_PARAMS;
				goto out;
			}
			/* doubles the room: 4 KiB, 8 KiB, ... */
			if (mc_buf_reserve(&buf, buf.cap ? buf.cap : 4096) != MC_OK) {
				errf(err, err_len, "out of memory");
				st = MC_ERR_NOMEM;
				goto out;
			}
		}
		n = fread(buf.data + buf.len, 1, buf.cap - buf.len, f);
		buf.len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		errf(err, err_len, "cannot read config file %s: %s", path, strerror(errno));
		st = MC_ERR_INVALID_PARAMS;
		goto out;
	}
	st = mc_master_server_config_load_buffer(c, buf.data ? (const char *)buf.data : "", buf.len,
						 err, err_len);
out:
	mc_buf_release(&buf);
	fclose(f);
	return st;
}

/* ---- argv ---------------------------------------------------------------- */

static void print_version(FILE *out)
{
	fprintf(out, "%s (git: %s)\n", MC_VERSION_STRING, MC_GIT_HASH);
}

void mc_master_server_config_print_doc(FILE *out)
{
	fputs("| Flag | Default | Type | In this build | Meaning |\n|---|---|---|---|---|\n", out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++) {
		const struct mc_config_entry *e = &flags[i];
		const char *status = "used";
		if (e->flags & NOEFFECT)
			status = "accepted, no effect";
		else if (e->flags & DEFAULT_ONLY)
			status = "only the default";
		else if (e->flags & CMDLINE_ONLY)
			status = "command line only";
		fprintf(out, "| `%s` | %s | %s | %s | %s%s |\n", e->f.name,
			*e->f.def ? e->f.def : "\"\"",
			mc_config_type_name(e->f.type, e->bare_unit_ms), status, e->f.doc,
			e->flags & DEPRECATED ? " (deprecated)" : "");
	}
	fputs("\nConfig-file aliases:", out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(aliases); i++)
		fprintf(out, " `%s` = `%s`%s", aliases[i].alias, aliases[i].name,
			i + 1 < MC_ARRAY_SIZE(aliases) ? "," : ".\n");
	fputs("\nEnvironment:\n\n| Variable | Default | Type | Meaning |\n|---|---|---|---|\n",
	      out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(env_vars); i++)
		fprintf(out, "| `%s` | %s | %s | %s |\n", env_vars[i].f.env,
			*env_vars[i].f.def ? env_vars[i].f.def : "unset",
			mc_config_type_name(env_vars[i].f.type, 0), env_vars[i].f.doc);
}

/* The effective configuration as a flat YAML file --config_path can read. */
static void dump_config(const struct mc_master_server_config *c, FILE *out)
{
	fprintf(out, "# mooncake_master %s effective configuration\n", MC_VERSION_STRING);
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++) {
		const struct mc_config_entry *e = &flags[i];

		if (e->f.offset == NO_FIELD)
			continue;
		if (e->f.offset == SF(rpc_port) && !c->rpc_port_explicit && !c->rpc_port)
			continue; /* unset: --port decides */
		fprintf(out, "%s: ", e->f.name);
		mc_config_entry_print_value(e, c, out);
		fputc('\n', out);
	}
}

static void print_help(FILE *out)
{
	fprintf(out,
		"usage: mooncake_master [--flag=value ...]\n"
		"The Mooncake Store master (C build %s). Flags follow upstream's names and\n"
		"defaults; --flag value, -flag=value, --bool_flag and --nobool_flag work too.\n"
		"Durations take ms/s/m/h suffixes. Command-line flags override --config_path.\n"
		"\n"
		"  --help         print this text and exit\n"
		"  --version      print the version and exit\n"
		"  --dump-config  print the effective configuration (flat YAML) and exit\n",
		MC_VERSION_STRING);
	mc_config_entry_print_help(flags, MC_ARRAY_SIZE(flags), out);
	fputs("Config-file aliases:", out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(aliases); i++)
		fprintf(out, " %s=%s", aliases[i].alias, aliases[i].name);
	fputs("\nEnvironment:\n  MC_LOG_LEVEL=info\n      error|warn|info|debug|trace\n", out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(env_vars); i++)
		fprintf(out, "  %s=%s\n      %s\n", env_vars[i].f.env, env_vars[i].f.def,
			env_vars[i].f.doc);
}

struct arg {
	const struct mc_config_entry *e;
	const char *value;
	char buf[8]; /* "true" / "false" for bare booleans */
};

mc_status mc_master_server_config_parse(struct mc_master_server_config *c, int argc, char **argv,
					FILE *out, int *exit_code_out)
{
	struct arg *args = NULL;
	const char *config_path = NULL;
	char err[512] = "";
	size_t nargs = 0;
	mc_status st = MC_ERR_INVALID_PARAMS;
	bool help = false, version = false, dump = false;

	*exit_code_out = 0;
	if (argc > 1) {
		args = mc_calloc((size_t)argc, sizeof(*args));
		if (!args) {
			fprintf(stderr, "mooncake_master: out of memory\n");
			*exit_code_out = 1;
			return MC_ERR_NOMEM;
		}
	}
	/* pass 1: split, find every flag, note help/version/config_path */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *value = NULL;
		char name[128];
		size_t nlen;
		const struct mc_config_entry *f;
		struct arg *ar;

		if (a[0] != '-' || a[1] == '\0') {
			errf(err, sizeof(err),
			     "unexpected argument '%s' (flags look like --name=value)", a);
			goto bad;
		}
		a += a[1] == '-' ? 2 : 1;
		eq = strchr(a, '=');
		nlen = eq ? (size_t)(eq - a) : strlen(a);
		if (nlen == 0 || nlen >= sizeof(name)) {
			errf(err, sizeof(err), "bad flag '%s'", argv[i]);
			goto bad;
		}
		memcpy(name, a, nlen);
		name[nlen] = '\0';
		if (eq)
			value = eq + 1;
		if (!eq && (strcmp(name, "help") == 0 || strcmp(name, "helpfull") == 0 ||
			    strcmp(name, "helpshort") == 0 || strcmp(name, "h") == 0)) {
			help = true;
			continue;
		}
		if (!eq && strcmp(name, "version") == 0) {
			version = true;
			continue;
		}
		if (!eq && (strcmp(name, "dump-config") == 0 || strcmp(name, "dump_config") == 0)) {
			dump = true;
			continue;
		}
		ar = &args[nargs];
		f = flag_find(name);
		if (!f && !eq && strncmp(name, "no", 2) == 0) {
			f = flag_find(name + 2);
			if (f && f->f.type == MC_CONFIG_BOOL) {
				snprintf(ar->buf, sizeof(ar->buf), "false");
				value = ar->buf;
			} else {
				f = NULL;
			}
		}
		if (!f) {
			errf(err, sizeof(err), "unknown command line flag '%s'", name);
			goto bad;
		}
		if (!value) {
			if (f->f.type == MC_CONFIG_BOOL) {
				snprintf(ar->buf, sizeof(ar->buf), "true");
				value = ar->buf;
			} else if (i + 1 < argc) {
				value = argv[++i];
			} else {
				errf(err, sizeof(err), "flag '--%s' is missing its argument", name);
				goto bad;
			}
		}
		if (f->flags & CMDLINE_ONLY) {
			config_path = value;
			continue;
		}
		ar->e = f;
		ar->value = value;
		nargs++;
	}
	if (help) {
		print_help(out);
		st = MC_OK;
		goto done;
	}
	if (version) {
		print_version(out);
		st = MC_OK;
		goto done;
	}
	/* pass 2: the file, then the flags in order */
	if (config_path && *config_path && load_file(c, config_path, err, sizeof(err)))
		goto bad;
	for (size_t i = 0; i < nargs; i++)
		if (set_flag(c, args[i].e, args[i].value, err, sizeof(err)))
			goto bad;
	if (config_check(c, err, sizeof(err)))
		goto bad;
	if (dump) {
		dump_config(c, out);
		st = MC_OK;
		goto done;
	}
	mc_free(args);
	return MC_OK;

bad:
	fprintf(stderr, "mooncake_master: %s\n", err[0] ? err : "bad arguments");
	fprintf(stderr, "Try --help for the list of flags.\n");
	*exit_code_out = 2;
	mc_free(args);
	return MC_ERR_INVALID_PARAMS;
done:
	/* help or version: the caller exits 0 */
	*exit_code_out = 0;
	mc_free(args);
	return st == MC_OK ? MC_ERR_CANCELED : st;
}

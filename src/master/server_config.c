/*
 * master/server_config.c - mooncake_master's flags and config file.
 *
 * One table lists every flag of upstream's mooncake_master (spec store.md
 * 8.1) with its default, its type and what this build does with it:
 *   - flags that act here store into struct mc_master_server_config (or
 *     its embedded struct mc_master_config), converted to the unit the
 *     field wants (durations to milliseconds);
 *   - NOEFFECT flags are parsed and checked like the others, so a typo
 *     still fails, and then dropped; --help says "accepted, no effect in
 *     this build";
 *   - DEFAULT_ONLY flags turn on something this build does not have (HA,
 *     offload, snapshots, ...).  Their default is accepted; any other
 *     value is refused with "not supported in this build", because
 *     starting without the feature would silently mislead the operator.
 *
 * The table is local rather than a base/config.h table because that
 * engine has no doubles, durations with units or per-flag checks; its
 * value parsers (mc_parse_bool/int/size) are reused.
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
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/log.h"
#include "mc_git_version.h"
#include "mooncake/version.h"

enum flag_type {
	FT_BOOL,     /* bool */
	FT_INT,	     /* int64_t within [min, max] */
	FT_DOUBLE,   /* double within [min, max] */
	FT_MS,	     /* uint64_t ms; a bare number is ms; ms/s/m/h suffixes */
	FT_SEC_MS,   /* uint64_t ms; a bare number is seconds; ms/s/m/h suffixes */
	FT_SEC,	     /* int64_t seconds; a bare number is seconds; suffixes (rounded up) */
	FT_SIZE,     /* int64_t bytes with k/m/g/t suffixes */
	FT_STR,	     /* char * (malloc'ed), checked by the flag's check function */
	FT_STRATEGY, /* char * and the master's enum */
};

enum flag_flags {
	FF_NOEFFECT = 1u << 0,	   /* parsed, then dropped */
	FF_DEFAULT_ONLY = 1u << 1, /* only the default value is accepted */
	FF_DEPRECATED = 1u << 2,   /* upstream marks it deprecated */
	FF_SPECIAL = 1u << 3,	   /* handled by the argv parser (config_path) */
};

#define NO_FIELD SIZE_MAX

struct flag {
	const char *name;
	enum flag_type type;
	const char *def; /* default as text */
	size_t offset;	 /* into struct mc_master_server_config, or NO_FIELD */
	double min, max; /* numeric bounds (inclusive) */
	unsigned flags;
	/* extra check of a string value; returns false with a reason in err */
	bool (*check)(const char *v, char *err, size_t err_len);
	const char *doc;
};

#define SF(field) offsetof(struct mc_master_server_config, field)
#define MF(field)                                           \
	(offsetof(struct mc_master_server_config, master) + \
	 offsetof(struct mc_master_config, field))
#define PORT_MAX 65535
#define I64_MAX	 9223372036854775807.0

static bool check_memory_allocator(const char *v, char *err, size_t err_len);
static bool check_ha_backend(const char *v, char *err, size_t err_len);
static bool check_cluster_id(const char *v, char *err, size_t err_len);
static bool check_dynamic_mode(const char *v, char *err, size_t err_len);
static bool check_connector(const char *v, char *err, size_t err_len);
static bool check_object_store(const char *v, char *err, size_t err_len);
static bool check_catalog_store(const char *v, char *err, size_t err_len);

/* clang-format off */
static const struct flag flags[] = {
	{"config_path", FT_STR, "", NO_FIELD, 0, 0, FF_SPECIAL, NULL,
	 "JSON or YAML (flat key: value) config file; command-line flags override it"},
	/* RPC */
	{"rpc_port", FT_INT, "0", SF(rpc_port), 0, PORT_MAX, 0, NULL,
	 "RPC listen port; 0 falls back to --port (0 given explicitly: any free port)"},
	{"port", FT_INT, "50051", SF(port), 0, PORT_MAX, FF_DEPRECATED, NULL,
	 "legacy RPC port, used when --rpc_port is 0 (0 here too: any free port)"},
	{"rpc_thread_num", FT_INT, "0", SF(rpc_thread_num), 0, 4096, FF_NOEFFECT, NULL,
	 "RPC worker threads (this build serves RPC from one epoll thread)"},
	{"max_threads", FT_INT, "16", SF(max_threads), 0, 4096, FF_DEPRECATED | FF_NOEFFECT, NULL,
	 "legacy thread count (this build serves RPC from one epoll thread)"},
	{"rpc_address", FT_STR, "0.0.0.0", SF(rpc_address), 0, 0, 0, NULL,
	 "RPC bind address"},
	{"rpc_interface", FT_STR, "", SF(rpc_interface), 0, 0, 0, NULL,
	 "NIC name whose IPv4 address replaces --rpc_address"},
	{"rpc_conn_timeout_seconds", FT_SEC, "0", SF(rpc_conn_timeout_seconds), 0, I64_MAX, 0,
	 NULL, "close RPC connections idle this long (0 = never)"},
	{"rpc_enable_tcp_no_delay", FT_BOOL, "true", SF(rpc_enable_tcp_no_delay), 0, 0, 0, NULL,
	 "set TCP_NODELAY on RPC connections"},
	/* admin / metrics */
	{"enable_metric_reporting", FT_BOOL, "true", SF(enable_metric_reporting), 0, 0, 0, NULL,
	 "log the metrics summary every 10 s"},
	{"metrics_port", FT_INT, "9003", SF(metrics_port), 0, PORT_MAX, 0, NULL,
	 "admin/metrics HTTP port (0 = any free port)"},
	{"metrics_host", FT_STR, "0.0.0.0", SF(metrics_host), 0, 0, 0, NULL,
	 "admin/metrics HTTP bind address"},
	/* object model */
	{"default_kv_lease_ttl", FT_MS, "10000", MF(default_kv_lease_ttl_ms), 1, I64_MAX, 0, NULL,
	 "read lease TTL (ms, or with ms/s/m/h)"},
	{"default_kv_soft_pin_ttl", FT_MS, "1800000", MF(default_kv_soft_pin_ttl_ms), 1, I64_MAX,
	 0, NULL, "soft-pin TTL when a put enables it without one (ms, or ms/s/m/h)"},
	{"max_kv_soft_pin_ttl", FT_MS, "86400000", MF(max_kv_soft_pin_ttl_ms), 1, I64_MAX, 0,
	 NULL, "largest soft-pin TTL a put may ask for (ms, or ms/s/m/h)"},
	{"allow_evict_soft_pinned_objects", FT_BOOL, "true", MF(allow_evict_soft_pinned_objects),
	 0, 0, 0, NULL, "soft-pinned objects may be evicted in the second pass"},
	{"eviction_ratio", FT_DOUBLE, "0.05", MF(eviction_ratio), 0, 1, 0, NULL,
	 "fraction of evictable objects removed per round"},
	{"eviction_high_watermark_ratio", FT_DOUBLE, "0.90", MF(eviction_high_watermark_ratio), 0,
	 1, 0, NULL, "used ratio that starts proactive eviction"},
	{"nof_eviction_ratio", FT_DOUBLE, "0.05", NO_FIELD, 0, 1, FF_NOEFFECT, NULL,
	 "NoF tier eviction ratio"},
	{"nof_eviction_high_watermark_ratio", FT_DOUBLE, "0.90", NO_FIELD, 0, 1, FF_NOEFFECT, NULL,
	 "NoF tier high watermark"},
	{"client_ttl", FT_SEC_MS, "10", MF(client_ttl_ms), 1, I64_MAX, 0, NULL,
	 "client liveness TTL (s, or with ms/s/m/h); config-file key client_live_ttl_sec"},
	{"put_start_discard_timeout_sec", FT_SEC_MS, "30", MF(put_start_discard_timeout_ms), 1,
	 I64_MAX, 0, NULL, "after this an unfinished put may be pre-empted (s, or ms/s/m/h)"},
	{"put_start_release_timeout_sec", FT_SEC_MS, "600", MF(put_start_release_timeout_ms), 1,
	 I64_MAX, 0, NULL, "after this an unfinished put's space is reclaimed (s, or ms/s/m/h)"},
	{"memory_allocator", FT_STR, "offset", SF(memory_allocator), 0, 0, 0,
	 check_memory_allocator, "segment allocator: offset (cachelib is not in this build)"},
	{"allocation_strategy", FT_STRATEGY, "random", SF(allocation_strategy), 0, 0, 0, NULL,
	 "replica placement: random or free_ratio_first"},
	{"enable_multi_tenants", FT_BOOL, "false", MF(enable_multi_tenants), 0, 0, 0, NULL,
	 "keep tenants apart (false: every tenant is the default one)"},
	/* embedded HTTP metadata server */
	{"enable_http_metadata_server", FT_BOOL, "false", SF(enable_http_metadata_server), 0, 0, 0,
	 NULL, "embed the transfer engine's HTTP metadata server"},
	{"http_metadata_server_port", FT_INT, "8080", SF(http_metadata_server_port), 0, PORT_MAX,
	 0, NULL, "its port (0 = any free port)"},
	{"http_metadata_server_host", FT_STR, "0.0.0.0", SF(http_metadata_server_host), 0, 0, 0,
	 NULL, "its bind address"},
	{"enable_metadata_cleanup_on_timeout", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY,
	 NULL, "delete expired clients' metadata keys"},
	/* HA */
	{"enable_ha", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "leader election mode"},
	{"ha_backend_type", FT_STR, "etcd", NO_FIELD, 0, 0, FF_NOEFFECT, check_ha_backend,
	 "HA coordinator: etcd, redis or k8s"},
	{"ha_backend_connstring", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "HA coordinator connection string"},
	{"etcd_endpoints", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "legacy etcd connection string"},
	{"cluster_id", FT_STR, "mooncake_cluster", SF(cluster_id), 0, 0, 0, check_cluster_id,
	 "cluster namespace ([0-9A-Za-z_.-], at most 128 characters)"},
	{"enable_oplog", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "HA metadata replication"},
	{"oplog_poll_interval_ms", FT_INT, "1000", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "standby poll interval"},
	{"oplog_batch_max_entries", FT_INT, "1024", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "OpLog entries per batch"},
	{"batch_oplog_retry_timeout_sec", FT_INT, "180", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "standby retry window"},
	{"pod_name", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL, "Kubernetes pod name"},
	{"pod_namespace", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "Kubernetes pod namespace"},
	/* SSD offload and promotion */
	{"enable_offload", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "master side of SSD offload"},
	{"offload_on_evict", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "offload at eviction time"},
	{"offload_force_evict", FT_BOOL, "false", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "drop objects that cannot be offloaded in offload-on-evict mode"},
	{"offloading_queue_limit", FT_INT, "50000", NO_FIELD, 1, 100000000, FF_NOEFFECT, NULL,
	 "per local-disk segment offload queue bound"},
	{"offload_cap_ratio", FT_DOUBLE, "0.5", NO_FIELD, 0, 1, FF_NOEFFECT, NULL,
	 "per-cycle offload cap fraction"},
	{"promotion_on_hit", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "SSD to DRAM promotion"},
	{"promotion_admission_threshold", FT_INT, "2", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "promotion count-min sketch threshold"},
	{"promotion_queue_limit", FT_INT, "50000", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "max in-flight promotions"},
	{"promotion_max_per_heartbeat", FT_INT, "1", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "promotions per client heartbeat"},
	{"enable_disk_eviction", FT_BOOL, "true", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "storage config returned to clients"},
	{"quota_bytes", FT_INT, "0", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "storage quota returned to clients"},
	{"root_fs_dir", FT_STR, "", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "legacy shared-FS DISK replicas"},
	{"global_file_segment_size", FT_INT, "9223372036854775807", NO_FIELD, 0, I64_MAX,
	 FF_NOEFFECT, NULL, "declared legacy file capacity"},
	/* tenants */
	{"tenant_quota_connector_type", FT_STR, "file", NO_FIELD, 0, 0, FF_NOEFFECT,
	 check_connector, "tenant quota policy source: file or etcd"},
	{"tenant_quota_connector_uri", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "tenant quota policy location"},
	/* dynamic replication */
	{"dynamic_replication_mode", FT_STR, "off", NO_FIELD, 0, 0, FF_DEFAULT_ONLY,
	 check_dynamic_mode, "off, observe or enforce"},
	{"dynamic_replication_heat_window_seconds", FT_INT, "10", NO_FIELD, 0, I64_MAX,
	 FF_NOEFFECT, NULL, "heat window"},
	{"dynamic_replication_admission_qps_threshold", FT_DOUBLE, "0.8", NO_FIELD, 0, 1e18,
	 FF_NOEFFECT, NULL, "per-key QPS threshold"},
	{"dynamic_replication_max_memory_replicas", FT_INT, "2", NO_FIELD, 0, I64_MAX,
	 FF_NOEFFECT, NULL, "replica cap"},
	/* snapshots */
	{"enable_snapshot", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "periodic metadata snapshots"},
	{"enable_snapshot_restore", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "restore a snapshot at start"},
	{"snapshot_interval_seconds", FT_INT, "600", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "snapshot period"},
	{"snapshot_child_timeout_seconds", FT_INT, "300", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "snapshot child timeout"},
	{"snapshot_retention_count", FT_INT, "2", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "snapshots kept"},
	{"snapshot_object_store_type", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, check_object_store,
	 "local or s3"},
	{"snapshot_catalog_store_type", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT,
	 check_catalog_store, "embedded or redis"},
	{"snapshot_catalog_store_connstring", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "catalog connection string"},
	{"snapshot_backup_dir", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "extra local snapshot copy"},
	/* copy/move tasks */
	{"max_total_finished_tasks", FT_INT, "10000", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "retained finished tasks"},
	{"max_total_pending_tasks", FT_INT, "10000", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "task queue limit"},
	{"max_total_processing_tasks", FT_INT, "10000", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "task concurrency limit"},
	{"pending_task_timeout_sec", FT_INT, "300", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "pending task timeout (0 = none)"},
	{"processing_task_timeout_sec", FT_INT, "300", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "processing task timeout (0 = none)"},
	{"max_retry_attempts", FT_INT, "10", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "task retries on NO_AVAILABLE_HANDLE"},
	/* CXL */
	{"enable_cxl", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL, "CXL memory pool"},
	{"cxl_path", FT_STR, "/dev/dax0.0", NO_FIELD, 0, 0, FF_NOEFFECT, NULL, "CXL device"},
	{"cxl_size", FT_SIZE, "8589934592", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "CXL pool size (bytes, k/m/g/t suffixes)"},
	/* NoF */
	{"nof_heartbeat_interval_sec", FT_INT, "10", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "NoF segment heartbeat period"},
	{"nof_heartbeat_probe_timeout_ms", FT_INT, "1000", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "NoF probe timeout"},
	{"nof_heartbeat_failures_threshold", FT_INT, "3", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "NoF failures before unmount"},
	/* KV events */
	{"enable_kv_events", FT_BOOL, "false", NO_FIELD, 0, 0, FF_DEFAULT_ONLY, NULL,
	 "ZMQ KV-event publisher"},
	{"kv_events_bind_endpoint", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "KV-event endpoint"},
	{"kv_events_backend_id", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "KV-event backend id"},
	{"kv_events_emit_legacy_compat", FT_BOOL, "true", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "KV-event legacy fields"},
	{"kv_events_emit_object_key", FT_BOOL, "true", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "KV-event object key"},
	{"kv_events_queue_capacity", FT_INT, "65536", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "KV-event queue (0 = unbounded)"},
	{"kv_events_model_name", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT | FF_DEPRECATED, NULL,
	 "ignored"},
	{"kv_events_tenant_id", FT_STR, "default", NO_FIELD, 0, 0, FF_NOEFFECT | FF_DEPRECATED,
	 NULL, "ignored"},
	{"kv_events_additional_salt", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT | FF_DEPRECATED,
	 NULL, "ignored"},
	{"kv_events_lora_name", FT_STR, "", NO_FIELD, 0, 0, FF_NOEFFECT | FF_DEPRECATED, NULL,
	 "ignored"},
	{"kv_events_block_size", FT_INT, "0", NO_FIELD, 0, I64_MAX, FF_NOEFFECT | FF_DEPRECATED,
	 NULL, "ignored"},
	{"kv_events_dp_rank", FT_INT, "0", NO_FIELD, 0, I64_MAX, FF_NOEFFECT | FF_DEPRECATED, NULL,
	 "ignored"},
	/* library-level */
	{"use_mmap_arena_allocator", FT_BOOL, "false", NO_FIELD, 0, 0, FF_NOEFFECT, NULL,
	 "mmap arena allocator"},
	{"mmap_arena_pool_size", FT_SIZE, "8589934592", NO_FIELD, 0, I64_MAX, FF_NOEFFECT, NULL,
	 "mmap arena pool (bytes, k/m/g/t suffixes)"},
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

/* v is one of set; else "<flag> must be <choices>, not '<v>'" in err. */
static bool check_choice(const char *v, const char *const *set, size_t n, const char *flag,
			 const char *choices, char *err, size_t err_len)
{
	if (one_of(v, set, n))
		return true;
	errf(err, err_len, "%s must be %s, not '%s'", flag, choices, v);
	return false;
}

static bool check_memory_allocator(const char *v, char *err, size_t err_len)
{
	if (strcmp(v, "offset") == 0)
		return true;
	if (strcmp(v, "cachelib") == 0)
		errf(err, err_len, "memory_allocator=cachelib is not supported in this build");
	else
		errf(err, err_len, "memory_allocator must be 'offset' or 'cachelib', not '%s'", v);
	return false;
}

static bool check_ha_backend(const char *v, char *err, size_t err_len)
{
	static const char *const ok[] = {"etcd", "redis", "k8s"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "ha_backend_type", "etcd, redis or k8s", err,
			    err_len);
}

static bool check_cluster_id(const char *v, char *err, size_t err_len)
{
	size_t n = strlen(v);

	if (n == 0 || n > 128) {
		errf(err, err_len, "cluster_id must have 1 to 128 characters");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];
		if (!isalnum(ch) && ch != '_' && ch != '.' && ch != '-') {
			errf(err, err_len, "cluster_id may only contain [0-9A-Za-z_.-]");
			return false;
		}
	}
	return true;
}

static bool check_dynamic_mode(const char *v, char *err, size_t err_len)
{
	static const char *const ok[] = {"off", "observe", "enforce"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "dynamic_replication_mode",
			    "off, observe or enforce", err, err_len);
}

static bool check_connector(const char *v, char *err, size_t err_len)
{
	static const char *const ok[] = {"file", "etcd"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "tenant_quota_connector_type", "file or etcd",
			    err, err_len);
}

static bool check_object_store(const char *v, char *err, size_t err_len)
{
	static const char *const ok[] = {"", "local", "s3"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "snapshot_object_store_type", "local or s3",
			    err, err_len);
}

static bool check_catalog_store(const char *v, char *err, size_t err_len)
{
	static const char *const ok[] = {"", "embedded", "redis"};
	return check_choice(v, ok, MC_ARRAY_SIZE(ok), "snapshot_catalog_store_type",
			    "embedded or redis", err, err_len);
}

static const struct flag *flag_find(const char *name)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(aliases); i++)
		if (strcmp(name, aliases[i].alias) == 0) {
			name = aliases[i].name;
			break;
		}
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++)
		if (strcmp(name, flags[i].name) == 0)
			return &flags[i];
	return NULL;
}

/*
 * A duration: digits, optionally followed by ms, s, m or h (spaces
 * allowed before the unit); a bare number is in default_unit_ms.  Result
 * in milliseconds, false on syntax or overflow.
 */
static bool parse_duration_ms(const char *text, uint64_t default_unit_ms, uint64_t *out)
{
	const char *p = text;
	uint64_t v = 0, unit = default_unit_ms;

	while (isspace((unsigned char)*p))
		p++;
	if (!isdigit((unsigned char)*p))
		return false;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	while (isspace((unsigned char)*p))
		p++;
	if (*p) {
		if (strcmp(p, "ms") == 0)
			unit = 1;
		else if (strcmp(p, "s") == 0)
			unit = 1000;
		else if (strcmp(p, "m") == 0)
			unit = 60000;
		else if (strcmp(p, "h") == 0)
			unit = 3600000;
		else
			return false;
	}
	if (unit && v > UINT64_MAX / unit)
		return false;
	*out = v * unit;
	return true;
}

static bool parse_double(const char *text, double *out)
{
	char *end;
	double v;

	if (!*text || isspace((unsigned char)*text))
		return false;
	errno = 0;
	v = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(v))
		return false;
	*out = v;
	return true;
}

/* A parsed value, before it is stored. */
union value {
	bool b;
	int64_t i;
	uint64_t u;
	double d;
	const char *s;
};

static bool in_range(const struct flag *f, double v)
{
	return v >= f->min && v <= f->max;
}

/* Parse text as f's type into *v; false with the reason in err. */
static bool parse_value(const struct flag *f, const char *text, union value *v, char *err,
			size_t err_len)
{
	uint64_t u;

	switch (f->type) {
	case FT_BOOL:
		if (mc_parse_bool(text, &v->b))
			return true;
		errf(err, err_len, "--%s: '%s' is not a boolean (true/false)", f->name, text);
		return false;
	case FT_INT:
		if (mc_parse_int(text, &v->i) && in_range(f, (double)v->i))
			return true;
		errf(err, err_len, "--%s: '%s' is not an integer in [%.0f, %.0f]", f->name, text,
		     f->min, f->max);
		return false;
	case FT_SIZE:
		if (mc_parse_size(text, &u) && u <= (uint64_t)INT64_MAX && in_range(f, (double)u)) {
			v->i = (int64_t)u;
			return true;
		}
		errf(err, err_len, "--%s: '%s' is not a size in bytes (k/m/g/t suffixes allowed)",
		     f->name, text);
		return false;
	case FT_DOUBLE:
		if (parse_double(text, &v->d) && in_range(f, v->d))
			return true;
		errf(err, err_len, "--%s: '%s' is not a number in [%g, %g]", f->name, text, f->min,
		     f->max);
		return false;
	case FT_MS:
	case FT_SEC_MS:
	case FT_SEC:
		if (parse_duration_ms(text, f->type == FT_MS ? 1 : 1000, &u)) {
			if (f->type == FT_SEC)
				u = u / 1000 + (u % 1000 != 0);
			if (u <= (uint64_t)INT64_MAX && in_range(f, (double)u)) {
				v->u = u;
				return true;
			}
		}
		errf(err, err_len,
		     "--%s: '%s' is not a duration (a number of %s, or with ms/s/m/h)%s", f->name,
		     text, f->type == FT_MS ? "milliseconds" : "seconds",
		     f->min > 0 ? " above 0" : "");
		return false;
	case FT_STR:
		if (f->check && !f->check(text, err, err_len))
			return false;
		v->s = text;
		return true;
	case FT_STRATEGY: {
		enum mc_alloc_strategy st;
		static const char *const later[] = {"ssd_free_ratio_first", "cxl", "local_first"};
		if (mc_alloc_strategy_parse(text, &st)) {
			v->s = text;
			return true;
		}
		if (one_of(text, later, MC_ARRAY_SIZE(later)))
			errf(err, err_len, "allocation_strategy=%s is not supported in this build",
			     text);
		else
			errf(err, err_len,
			     "allocation_strategy must be random, free_ratio_first, "
			     "ssd_free_ratio_first, cxl or local_first, not '%s'",
			     text);
		return false;
	}
	}
	errf(err, err_len, "--%s: internal error", f->name);
	return false;
}

static bool values_equal(const struct flag *f, const union value *a, const union value *b)
{
	switch (f->type) {
	case FT_BOOL:
		return a->b == b->b;
	case FT_INT:
	case FT_SIZE:
		return a->i == b->i;
	case FT_MS:
	case FT_SEC_MS:
	case FT_SEC:
		return a->u == b->u;
	case FT_DOUBLE:
		return a->d == b->d;
	case FT_STR:
	case FT_STRATEGY:
		return strcmp(a->s, b->s) == 0;
	}
	return false;
}

static mc_status set_flag(struct mc_master_server_config *c, const struct flag *f, const char *text,
			  char *err, size_t err_len)
{
	union value v;
	char *p = (char *)c + (f->offset == NO_FIELD ? 0 : f->offset);

	if (!parse_value(f, text, &v, err, err_len))
		return MC_ERR_INVALID_PARAMS;
	if (f->flags & FF_DEFAULT_ONLY) {
		union value d;
		if (!parse_value(f, f->def, &d, err, err_len))
			mc_assert(!"bad default in the master flag table");
		if (!values_equal(f, &v, &d)) {
			errf(err, err_len, "--%s=%s is not supported in this build", f->name, text);
			return MC_ERR_INVALID_PARAMS;
		}
	}
	if (f->offset == NO_FIELD)
		return MC_OK;
	if (f->offset == SF(rpc_port))
		c->rpc_port_explicit = true;
	switch (f->type) {
	case FT_BOOL:
		*(bool *)p = v.b;
		break;
	case FT_INT:
	case FT_SIZE:
		*(int64_t *)p = v.i;
		break;
	case FT_SEC:
		*(int64_t *)p = (int64_t)v.u;
		break;
	case FT_MS:
	case FT_SEC_MS:
		*(uint64_t *)p = v.u;
		break;
	case FT_DOUBLE:
		memcpy(p, &v.d, sizeof(v.d)); /* p is a double field */
		break;
	case FT_STRATEGY:
		if (!mc_alloc_strategy_parse(v.s, &c->master.strategy))
			mc_assert(!"strategy parsed twice differently");
		__attribute__((fallthrough)); /* keep the text too */
	case FT_STR: {
		char *s = mc_strdup(v.s);
		if (!s) {
			errf(err, err_len, "out of memory");
			return MC_ERR_NOMEM;
		}
		mc_free(*(char **)p);
		*(char **)p = s;
		break;
	}
	}
	return MC_OK;
}

/* ---- public: defaults, set, release -------------------------------------- */

void mc_master_server_config_defaults(struct mc_master_server_config *c)
{
	char err[256];

	memset(c, 0, sizeof(*c));
	mc_master_config_defaults(&c->master);
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++) {
		if (flags[i].flags & FF_SPECIAL)
			continue;
		/* the table's defaults parse, so only a failed strdup can fail */
		if (set_flag(c, &flags[i], flags[i].def, err, sizeof(err)) != MC_OK)
			mc_assert(!"cannot set the master's defaults");
	}
	c->rpc_port_explicit = false;
}

void mc_master_server_config_release(struct mc_master_server_config *c)
{
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++) {
		const struct flag *f = &flags[i];
		if (f->offset == NO_FIELD || (f->type != FT_STR && f->type != FT_STRATEGY))
			continue;
		mc_free(*(char **)((char *)c + f->offset));
		*(char **)((char *)c + f->offset) = NULL;
	}
}

mc_status mc_master_server_config_set(struct mc_master_server_config *c, const char *name,
				      const char *value, char *err, size_t err_len)
{
	const struct flag *f = flag_find(name);

	if (err && err_len)
		err[0] = '\0';
	if (!f || (f->flags & FF_SPECIAL)) {
		errf(err, err_len, "unknown flag '%s'", name);
		return MC_ERR_NOT_FOUND;
	}
	return set_flag(c, f, value ? value : "", err, err_len);
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
	char *buf = NULL;
	size_t len = 0, cap = 0;
	mc_status st;

	if (!f) {
		errf(err, err_len, "cannot open config file %s: %s", path, strerror(errno));
		return MC_ERR_INVALID_PARAMS;
	}
	for (;;) {
		size_t n;
		if (len == cap) {
			char *p;
			if (cap >= CONFIG_FILE_MAX) {
				errf(err, err_len, "config file %s is larger than %u bytes", path,
				     CONFIG_FILE_MAX);
				st = MC_ERR_INVALID_PARAMS;
				goto out;
			}
			cap = cap ? cap * 2 : 4096;
			p = mc_realloc(buf, cap);
			if (!p) {
				errf(err, err_len, "out of memory");
				st = MC_ERR_NOMEM;
				goto out;
			}
			buf = p;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		errf(err, err_len, "cannot read config file %s: %s", path, strerror(errno));
		st = MC_ERR_INVALID_PARAMS;
		goto out;
	}
	st = mc_master_server_config_load_buffer(c, buf ? buf : "", len, err, err_len);
out:
	mc_free(buf);
	fclose(f);
	return st;
}

/* ---- argv ---------------------------------------------------------------- */

static void print_version(FILE *out)
{
	fprintf(out, "%s (git: %s)\n", MC_VERSION_STRING, MC_GIT_HASH);
}

static const char *type_doc(enum flag_type t)
{
	switch (t) {
	case FT_BOOL:
		return "bool";
	case FT_INT:
		return "int";
	case FT_DOUBLE:
		return "number";
	case FT_MS:
		return "duration (ms)";
	case FT_SEC_MS:
	case FT_SEC:
		return "duration (s)";
	case FT_SIZE:
		return "size";
	case FT_STR:
	case FT_STRATEGY:
		return "string";
	}
	return "?";
}

void mc_master_server_config_print_doc(FILE *out)
{
	fputs("| Flag | Default | Type | In this build | Meaning |\n|---|---|---|---|---|\n", out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++) {
		const struct flag *f = &flags[i];
		const char *status = "used";
		if (f->flags & FF_NOEFFECT)
			status = "accepted, no effect";
		else if (f->flags & FF_DEFAULT_ONLY)
			status = "only the default";
		else if (f->flags & FF_SPECIAL)
			status = "command line only";
		fprintf(out, "| `%s` | %s | %s | %s | %s%s |\n", f->name, *f->def ? f->def : "\"\"",
			type_doc(f->type), status, f->doc,
			f->flags & FF_DEPRECATED ? " (deprecated)" : "");
	}
	fputs("\nConfig-file aliases:", out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(aliases); i++)
		fprintf(out, " `%s` = `%s`%s", aliases[i].alias, aliases[i].name,
			i + 1 < MC_ARRAY_SIZE(aliases) ? "," : ".\n");
}

/* The effective configuration as a flat YAML file --config_path can read. */
static void dump_config(const struct mc_master_server_config *c, FILE *out)
{
	fprintf(out, "# mooncake_master %s effective configuration\n", MC_VERSION_STRING);
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++) {
		const struct flag *f = &flags[i];
		const char *p = (const char *)c + f->offset;

		if (f->offset == NO_FIELD)
			continue;
		if (f->offset == SF(rpc_port) && !c->rpc_port_explicit && !c->rpc_port)
			continue; /* unset: --port decides */
		fprintf(out, "%s: ", f->name);
		switch (f->type) {
		case FT_BOOL:
			fputs(*(const bool *)p ? "true" : "false", out);
			break;
		case FT_INT:
		case FT_SIZE:
		case FT_SEC:
			fprintf(out, "%" PRId64, *(const int64_t *)p);
			break;
		case FT_DOUBLE: {
			double d;
			memcpy(&d, p, sizeof(d));
			fprintf(out, "%.17g", d);
			break;
		}
		case FT_MS:
		case FT_SEC_MS:
			fprintf(out, "%" PRIu64 "ms", *(const uint64_t *)p);
			break;
		case FT_STR:
		case FT_STRATEGY: {
			const char *v = *(char *const *)p ? *(char *const *)p : "";
			fputc('"', out);
			for (; *v; v++) {
				if (*v == '"' || *v == '\\')
					fputc('\\', out);
				if (*v == '\n')
					fputs("\\n", out);
				else
					fputc(*v, out);
			}
			fputc('"', out);
			break;
		}
		}
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
	for (size_t i = 0; i < MC_ARRAY_SIZE(flags); i++) {
		const struct flag *f = &flags[i];
		fprintf(out, "  --%s=%s\n      %s", f->name, f->def, f->doc);
		if (f->flags & FF_DEPRECATED)
			fputs(" (deprecated)", out);
		if (f->flags & FF_NOEFFECT)
			fputs(" (accepted, no effect in this build)", out);
		if (f->flags & FF_DEFAULT_ONLY)
			fputs(" (only the default is supported in this build)", out);
		fputc('\n', out);
	}
	fputs("Config-file aliases:", out);
	for (size_t i = 0; i < MC_ARRAY_SIZE(aliases); i++)
		fprintf(out, " %s=%s", aliases[i].alias, aliases[i].name);
	fputs("\nEnvironment: MC_LOG_LEVEL=error|warn|info|debug|trace (default info).\n", out);
}

struct arg {
	const struct flag *f;
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
		const struct flag *f;
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
			if (f && f->type == FT_BOOL) {
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
			if (f->type == FT_BOOL) {
				snprintf(ar->buf, sizeof(ar->buf), "true");
				value = ar->buf;
			} else if (i + 1 < argc) {
				value = argv[++i];
			} else {
				errf(err, sizeof(err), "flag '--%s' is missing its argument", name);
				goto bad;
			}
		}
		if (f->flags & FF_SPECIAL) {
			config_path = value;
			continue;
		}
		ar->f = f;
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
		if (set_flag(c, args[i].f, args[i].value, err, sizeof(err)))
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

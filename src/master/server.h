/*
 * master/server.h - the master daemon's I/O: the RPC listener, the HTTP
 * admin and metrics service, the embedded HTTP metadata server, and the
 * timer that drives mc_master_tick().
 *
 * mooncake_master is a thin main() over this: parse flags and the config
 * file into struct mc_master_server_config, start, wait for a signal,
 * stop.  Tests start a server in-process the same way (port 0 picks free
 * ports; the chosen ones are readable afterwards).
 *
 * Threads: one RPC loop thread owns every connection (epoll) and calls
 * mc_master_handle() under the state mutex; libmicrohttpd's threads serve
 * the admin pages under the same mutex; the loop thread also runs the
 * ticks; a short-lived thread per mount probe (--mount_probe) checks a new
 * segment's engine and never touches the master.  See docs/threads.md.
 */
#ifndef MC_MASTER_SERVER_H
#define MC_MASTER_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "master/master.h"
#include "mooncake/status.h"

struct mc_master_server;

/* Every flag of mooncake_master that this build acts on or accepts
 * (upstream's names and defaults, spec store.md 8.1). */
struct mc_master_server_config {
	struct mc_master_config master; /* object model */
	char *rpc_address;		/* "0.0.0.0" */
	char *rpc_interface;		/* "": NIC whose IPv4 replaces rpc_address */
	int64_t rpc_port;		/* 0 -> port (but see rpc_port_explicit) */
	bool rpc_port_explicit;		/* rpc_port was given (file or flag): 0 = any free port */
	int64_t port;			/* 50051 */
	int64_t rpc_thread_num;		/* accepted; the loop is one thread */
	int64_t max_threads;		/* 16, accepted */
	uint64_t rpc_conn_timeout_seconds;  /* 0 = none */
	int64_t rpc_max_connections;	    /* RPC connections open at most */
	uint64_t rpc_frame_timeout_ms;	    /* floor of a frame's deadline */
	uint64_t rpc_frame_min_rate;	    /* bytes/s a frame must arrive at, above the floor */
	uint64_t rpc_max_connection_buffer; /* one connection's read buffer at most */
	uint64_t rpc_max_buffered_bytes;    /* all connections' read buffers for partial frames */
	bool rpc_enable_tcp_no_delay;	    /* true */
	int64_t rpc_busy_poll_us;	    /* 50: the RPC loop polls this long after work */
	bool loop_turn_cpu_stats;	    /* false: time the RPC loop's turns in wall time only */
	bool mount_probe;		    /* true: a mount waits for its engine's Probe answer */
	uint64_t mount_probe_timeout_ms;    /* 2000: the probe's deadline */
	bool enable_metric_reporting;	    /* true: summary line in the log every 10 s */
	int64_t metrics_port;		    /* 9003; 0 = any free port */
	char *metrics_host;		    /* "0.0.0.0" */
	char *auth_secret_file;		    /* "": MC_AUTH_SECRET_FILE / MC_AUTH_SECRET decide */
	int64_t metrics_max_connections;    /* admin HTTP connections open at most */
	uint64_t metrics_request_timeout_ms; /* an admin request must be whole within this */
	bool enable_http_metadata_server;    /* false */
	int64_t http_metadata_server_port;   /* 8080; 0 = any free port */
	char *http_metadata_server_host;     /* "0.0.0.0" */
	int64_t http_metadata_server_max_connections;
	int64_t http_metadata_server_max_connections_per_ip; /* 0 = no such cap */
	int64_t metrics_max_connections_per_ip;		     /* the admin server's; likewise */
	uint64_t http_metadata_server_request_timeout_ms;
	char *cluster_id;			 /* "mooncake_cluster" */
	bool enable_ha;				 /* leader election (master/ha.h) */
	char *ha_backend_type;			 /* "etcd" or "redis" */
	char *ha_backend_connstring;		 /* the coordinator */
	char *etcd_endpoints;			 /* legacy connstring for etcd */
	int64_t ha_lease_ttl_seconds;		 /* 5 (upstream's fixed TTL) */
	int64_t ha_sync_replicas;		 /* -1: 1 when a standby streams */
	char *root_fs_dir;			 /* "": no DISK replicas (spec 5.1) */
	char *memory_allocator;			 /* "offset" */
	char *allocation_strategy;		 /* "random" */
	char *wal_dir;				 /* "": no write-ahead log */
	char *wal_fsync;			 /* "everysec" (always, everysec, no) */
	bool enable_snapshot;			 /* periodic snapshots (server_snap.c) */
	bool enable_snapshot_restore;		 /* load the newest snapshot at start */
	uint64_t snapshot_interval_seconds;	 /* 600 */
	uint64_t snapshot_child_timeout_seconds; /* 300 */
	int64_t snapshot_retention_count;	 /* 2 */
	char *snapshot_local_path; /* MOONCAKE_SNAPSHOT_LOCAL_PATH; "": the --wal_dir */
};

/* Defaults of every field.  Release with mc_master_server_config_release. */
void mc_master_server_config_defaults(struct mc_master_server_config *c);
void mc_master_server_config_release(struct mc_master_server_config *c);

/*
 * Parse argv (upstream's gflags style: --flag=value, -flag=value,
 * --flag value, --bool_flag, --nobool_flag) on top of the defaults,
 * loading --config_path (JSON, or YAML's flat "key: value" form) first so
 * that flags given explicitly override the file.  --help, --version and
 * --dump-config (the effective configuration as flat YAML) set
 * *exit_code_out to 0 after printing (to out), returning non-OK; a bad
 * flag or value prints the reason (to stderr) and sets it to 2.  Returns MC_OK when the caller
 * should start the server.
 */
mc_status mc_master_server_config_parse(struct mc_master_server_config *c, int argc, char **argv,
					FILE *out, int *exit_code_out);

/* docs/config.md's table of every flag (tools/mc_config_doc prints it). */
void mc_master_server_config_print_doc(FILE *out);

/*
 * The two halves of the parser, for tools and the fuzz target.  Both
 * print nothing: on failure they return MC_ERR_INVALID_PARAMS (or
 * MC_ERR_NOMEM) and leave the reason in err (err_len bytes, always
 * NUL-terminated).
 *
 * config_set: one flag by name (upstream's name or a config-file alias
 * such as client_live_ttl_sec) from its text value.  MC_ERR_NOT_FOUND for
 * an unknown name.
 *
 * config_load_buffer: a config file's text, JSON when its first
 * non-blank byte is '{', else YAML's flat "key: value" form.  Unknown
 * keys are ignored with a warning (newer upstream files carry keys this
 * build does not know), bad values are errors.
 */
mc_status mc_master_server_config_set(struct mc_master_server_config *c, const char *name,
				      const char *value, char *err, size_t err_len);
mc_status mc_master_server_config_load_buffer(struct mc_master_server_config *c, const char *text,
					      size_t len, char *err, size_t err_len);

/* Start listening and serving.  MC_OK, or the reason (a port in use is
 * MC_ERR_SOCKET with mc_last_error naming it; with enable_ha an
 * unreachable coordinator is MC_ERR_METADATA naming it).  With enable_ha,
 * c must outlive the server (the take-over reads it later). */
mc_status mc_master_server_start(const struct mc_master_server_config *c,
				 struct mc_master_server **out);
/* Ports actually bound (useful with port 0). */
uint16_t mc_master_server_rpc_port(const struct mc_master_server *s);
uint16_t mc_master_server_metrics_port(const struct mc_master_server *s);
uint16_t mc_master_server_metadata_port(const struct mc_master_server *s);
/* Stop serving, close every connection, free everything. */
void mc_master_server_stop(struct mc_master_server *s);

#endif

/*
 * store/client_config.h - the store client's settings from the
 * environment, as one table of the configuration engine (base/config.h):
 * upstream's MC_STORE_* and MC_RPC_* variables, listed in docs/config.md.
 * The segment memory's settings (MC_STORE_USE_HUGEPAGE, MC_STORE_PREFAULT)
 * are mem/hostmem.h's table.
 */
#ifndef MC_STORE_CLIENT_CONFIG_H
#define MC_STORE_CLIENT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"

struct mc_store_client_env {
	char *memcpy_mode;		 /* MC_STORE_MEMCPY: auto, or a boolean */
	int64_t min_port;		 /* MC_STORE_CLIENT_MIN_PORT */
	int64_t max_port;		 /* MC_STORE_CLIENT_MAX_PORT */
	int64_t setup_retries;		 /* MC_STORE_CLIENT_SETUP_RETRIES */
	int64_t rpc_timeout_ms;		 /* MC_RPC_TIMEOUT_MS, -1 = none */
	int64_t rpc_connect_ms;		 /* MC_RPC_CONNECT_TIMEOUT_MS, -1 = none */
	int64_t rpc_busy_poll_us;	 /* MC_RPC_BUSY_POLL_US */
	bool metrics;			 /* MC_STORE_CLIENT_METRIC */
	bool verify;			 /* MC_STORE_VERIFY: sign puts, check reads */
	bool chunk_trailers;		 /* MC_STORE_CHUNK_TRAILERS: minor-10 trailers on puts */
	int64_t location_cache;		 /* MC_STORE_LOCATION_CACHE: entries, 0 = off */
	int64_t put_credit;		 /* MC_STORE_PUT_CREDIT: credits held, 0 = off */
	int64_t put_credit_ms;		 /* MC_STORE_PUT_CREDIT_MS: a credit's use window */
	char *cluster_id;		 /* MC_STORE_CLUSTER_ID: the metrics' cluster_id label */
	int64_t failover_ms;		 /* MC_MASTER_FAILOVER_TIMEOUT_MS (HA master address) */
	int64_t dummy_expire_ms;	 /* MC_DUMMY_EXPIRE_MS (mooncake_client's dummy server) */
	int64_t dummy_busy_poll_us;	 /* MC_DUMMY_BUSY_POLL_US (a dummy client's wait) */
	int64_t dummy_conn_busy_poll_us; /* MC_DUMMY_CONN_BUSY_POLL_US (the daemon's) */
};

extern const struct mc_config_entry mc_store_client_config_table[];
extern const size_t mc_store_client_config_table_len;

/* The defaults overlaid with the environment (a bad value is warned about
 * and the default kept); release with mc_store_client_env_release. */
void mc_store_client_env_load(struct mc_store_client_env *e);
void mc_store_client_env_release(struct mc_store_client_env *e);
/* MC_STORE_MEMCPY as a boolean: "auto" (and unset) is on, as upstream
 * with TCP only. */
bool mc_store_client_env_memcpy(const struct mc_store_client_env *e);

#endif

/* store/client_config.c - the store client's settings table; see client_config.h. */
#include "store/client_config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/compiler.h"

static const char *const memcpy_off[] = {"0", "false", "no", "off", "disable"};
static const char *const memcpy_on[] = {"auto", "1", "true", "yes", "on", "enable"};

static bool spelled(const char *v, const char *const *set, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(v, set[i]) == 0)
			return true;
	return false;
}

static bool check_memcpy(const char *value, char *why, size_t why_len)
{
	if (!*value || spelled(value, memcpy_on, MC_ARRAY_SIZE(memcpy_on)) ||
	    spelled(value, memcpy_off, MC_ARRAY_SIZE(memcpy_off)))
		return true;
	snprintf(why, why_len, "must be auto or a boolean");
	return false;
}

#define CFG(f) offsetof(struct mc_store_client_env, f)
const struct mc_config_entry mc_store_client_config_table[] = {
	{.f = {"store_memcpy", "MC_STORE_MEMCPY", "auto",
	       "replicas in the client's own segment are copied with memcpy instead of the "
	       "Transfer Engine (auto: on, the engine being TCP or same-host)",
	       CFG(memcpy_mode), MC_CONFIG_STRING, 0, 0},
	 .check = check_memcpy},
	{.f = {"store_client_min_port", "MC_STORE_CLIENT_MIN_PORT", "12300",
	       "lowest RPC port a client picks when its local_hostname names none", CFG(min_port),
	       MC_CONFIG_INT, 1024, 65535}},
	{.f = {"store_client_max_port", "MC_STORE_CLIENT_MAX_PORT", "14300", "highest such port",
	       CFG(max_port), MC_CONFIG_INT, 1024, 65535}},
	{.f = {"store_client_setup_retries", "MC_STORE_CLIENT_SETUP_RETRIES", "20",
	       "ports tried before setup gives up", CFG(setup_retries), MC_CONFIG_INT, 1, 1000}},
	{.f = {"rpc_timeout_ms", "MC_RPC_TIMEOUT_MS", "30000",
	       "deadline of a call to the master, milliseconds (-1: none)", CFG(rpc_timeout_ms),
	       MC_CONFIG_INT, -1, 86400000}},
	{.f = {"rpc_connect_timeout_ms", "MC_RPC_CONNECT_TIMEOUT_MS", "30000",
	       "deadline of connecting to the master, milliseconds (-1: none)", CFG(rpc_connect_ms),
	       MC_CONFIG_INT, -1, 86400000}},
	{.f = {"rpc_busy_poll_us", "MC_RPC_BUSY_POLL_US", "50",
	       "a caller waiting for its answer polls the socket this long before sleeping "
	       "(microseconds, 0 = off)",
	       CFG(rpc_busy_poll_us), MC_CONFIG_INT, 0, 1000000}},
	{.f = {"store_verify", "MC_STORE_VERIFY", "1",
	       "puts record an XXH3-64 checksum of each object and reads of whole objects check "
	       "it, falling back to the next replica on a mismatch (0: neither; also the setup "
	       "option disable_verify)",
	       CFG(verify), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"store_chunk_trailers", "MC_STORE_CHUNK_TRAILERS", "1",
	       "with MC_STORE_VERIFY and a master of protocol minor 10: puts of objects over "
	       "16 KiB write the sums of their 16 KiB chunks after the bytes, so a checked "
	       "range moves about its own bytes (docs/design.md, chunk-sum trailers); 0: such "
	       "objects keep minor 9's 256 KiB chunk sums in the master",
	       CFG(chunk_trailers), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"store_location_cache", "MC_STORE_LOCATION_CACHE", "4096",
	       "replica locations a client keeps, least recently used first out, so that a get "
	       "of a key read within its read lease (less a margin) skips GetReplicaList and is "
	       "one exchange with the holder; needs MC_STORE_VERIFY (every cached read is "
	       "checked). Used only against a master of protocol minor 15, whose overriders "
	       "(minor 13 or later) spoil a leased object's old blocks, whose holders (minor 15) "
	       "spoil the blocks other overrides leave, deregister unmounted memory and fence "
	       "themselves before the master can expire them, and which marks replicas of older "
	       "holders not to be cached. What is left: after an override by a client that does "
	       "not spoil (minor 12 or older, upstream's) or a force RemoveByRegex or RemoveAll, "
	       "a cached get may return the previous value, checked and whole, until the "
	       "holder's next ping, about a second (docs/design.md, the location cache: the "
	       "table of every path). 0 = off",
	       CFG(location_cache), MC_CONFIG_INT, 0, 16777216}},
	{.f = {"store_put_credit", "MC_STORE_PUT_CREDIT", "64",
	       "put credits: blocks the master reserves for this client's puts, at most this "
	       "many held (and at most 64 MiB of them), so that a put of a size it holds a "
	       "block for (one replica, at most a preferred_segment; no pins, groups or "
	       "preferred-segment lists) writes there and completes with one exchange with the "
	       "master instead of PutStart and PutEnd (a master of protocol minor 12; "
	       "docs/design.md, put credits). 64: two batches of 32 keys; 0 = off",
	       CFG(put_credit), MC_CONFIG_INT, 0, 256}},
	{.f = {"store_put_credit_ms", "MC_STORE_PUT_CREDIT_MS", "200",
	       "a put credit is used only within this long of the call that asked for it, "
	       "milliseconds (older ones are given back)",
	       CFG(put_credit_ms), MC_CONFIG_INT, 1, 5000}},
	{.f = {"store_client_metric", "MC_STORE_CLIENT_METRIC", "1",
	       "collect the client's call counters and latency histograms (the client HTTP "
	       "server's /metrics answers 503 without them)",
	       CFG(metrics), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"store_cluster_id", "MC_STORE_CLUSTER_ID", "mooncake_cluster",
	       "the cluster_id label of the client's metrics, and with an etcd:// or redis:// "
	       "master address the cluster whose leader view (mooncake-store/<id>/master_view) "
	       "names the master",
	       CFG(cluster_id), MC_CONFIG_STRING, 0, 0}},
	{.f = {"master_failover_timeout_ms", "MC_MASTER_FAILOVER_TIMEOUT_MS", "30000",
	       "with an etcd:// or redis:// master address: how long connecting waits for a "
	       "leader that answers (the old one's lease lapsing, the new one's warm-up), "
	       "milliseconds",
	       CFG(failover_ms), MC_CONFIG_INT, 0, 86400000}},
	{.f = {"dummy_expire_ms", "MC_DUMMY_EXPIRE_MS", "10000",
	       "mooncake_client expires a dummy client silent this long (no request and no ping; "
	       "dummies ping every second), unmapping its shared memory, milliseconds",
	       CFG(dummy_expire_ms), MC_CONFIG_INT, 100, 86400000}},
	{.f = {"dummy_busy_poll_us", "MC_DUMMY_BUSY_POLL_US", "0",
	       "a dummy client sleeps until shortly before the answer it predicts (from its last "
	       "calls of the same kind and size) and polls its socket without sleeping this long "
	       "around that moment, so the answer finds it awake (microseconds; 0 = off, the "
	       "default: it sleeps until the answer wakes it; polling lost on a loaded 2-core "
	       "machine, docs/bench/issue-15-client-daemon.md)",
	       CFG(dummy_busy_poll_us), MC_CONFIG_INT, 0, 1000000}},
	{.f = {"dummy_conn_busy_poll_us", "MC_DUMMY_CONN_BUSY_POLL_US", "0",
	       "after answering a dummy client, mooncake_client's thread for that dummy polls its "
	       "socket without sleeping this long for the next request before it sleeps "
	       "(microseconds; 0 = off, the default)",
	       CFG(dummy_conn_busy_poll_us), MC_CONFIG_INT, 0, 1000000}},
};
#undef CFG
const size_t mc_store_client_config_table_len = MC_ARRAY_SIZE(mc_store_client_config_table);

void mc_store_client_env_load(struct mc_store_client_env *e)
{
	memset(e, 0, sizeof(*e));
	mc_config_entry_defaults(mc_store_client_config_table, mc_store_client_config_table_len, e);
	mc_config_entry_load_env(mc_store_client_config_table, mc_store_client_config_table_len, e);
}

void mc_store_client_env_release(struct mc_store_client_env *e)
{
	mc_config_entry_release(mc_store_client_config_table, mc_store_client_config_table_len, e);
}

bool mc_store_client_env_memcpy(const struct mc_store_client_env *e)
{
	return !e->memcpy_mode || !spelled(e->memcpy_mode, memcpy_off, MC_ARRAY_SIZE(memcpy_off));
}

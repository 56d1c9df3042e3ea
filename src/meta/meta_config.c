/* meta/meta_config.c - the metadata backends' table; see meta_config.h. */
#include "meta/meta_config.h"

#include <stdlib.h>

#include "base/compiler.h"

#define CFG(f) offsetof(struct mc_meta_config, f)
const struct mc_config_entry mc_meta_config_table[] = {
	/* first: mc_meta_cluster_id reads it; read at every key, so no field */
	{.f = {"metadata_cluster_id", "MC_METADATA_CLUSTER_ID", NULL,
	       "namespace inserted after mooncake/ in every key", MC_CONFIG_NO_FIELD,
	       MC_CONFIG_STRING, 0, 0}},
	{.f = {"metadata_timeout_ms", "MC_METADATA_TIMEOUT_MS", "0",
	       "per-request timeout of the http, etcd and redis backends in ms; 0 = the "
	       "backend's own (http and redis 3000, etcd 5000)",
	       CFG(timeout_ms), MC_CONFIG_INT, 0, 3600000}},
	{.f = {"metadata_http_check_ms", "MC_METADATA_HTTP_CHECK_MS", "1000",
	       "http backend: every this often the client GETs the keys it wrote and PUTs those "
	       "the server lost (a restarted server keeps nothing); 0 = off (a store client still "
	       "does it when a restarted master asks it to remount)",
	       CFG(http_check_ms), MC_CONFIG_INT, 0, 3600000}},
	{.f = {"etcd_lease_ttl_sec", "MC_ETCD_LEASE_TTL_SEC", "10",
	       "lease TTL of an engine's etcd keys in seconds; kept alive at TTL/3",
	       CFG(etcd_lease_ttl_sec), MC_CONFIG_INT, 2, 2147483}},
	{.f = {"redis_key_ttl_sec", "MC_REDIS_KEY_TTL_SEC", "10",
	       "expiry of an engine's redis keys in seconds; refreshed at TTL/3",
	       CFG(redis_key_ttl_sec), MC_CONFIG_INT, 2, 2147483}},
	{.f = {"redis_username", "MC_REDIS_USERNAME", NULL,
	       "redis ACL user (the URI's user wins; needs MC_REDIS_PASSWORD)", CFG(redis_username),
	       MC_CONFIG_STRING, 0, 0}},
	{.f = {"redis_password", "MC_REDIS_PASSWORD", NULL,
	       "redis password (the URI's password wins)", CFG(redis_password), MC_CONFIG_STRING, 0,
	       0}},
	{.f = {"redis_db_index", "MC_REDIS_DB_INDEX", "0",
	       "redis database; a value outside the range fails the open (not ignored)",
	       CFG(redis_db_index), MC_CONFIG_INT, 0, 255},
	 .flags = MC_CONFIG_F_ENV_STRICT},
};
#undef CFG
const size_t mc_meta_config_table_len = MC_ARRAY_SIZE(mc_meta_config_table);

const char *mc_meta_cluster_id(void)
{
	const char *v = getenv(mc_meta_config_table[0].f.env);

	return v && *v ? v : NULL;
}

mc_status mc_meta_config_load(struct mc_meta_config *cfg)
{
	mc_status st;

	mc_config_entry_defaults(mc_meta_config_table, mc_meta_config_table_len, cfg);
	st = mc_config_entry_load_env(mc_meta_config_table, mc_meta_config_table_len, cfg);
	if (st != MC_OK)
		mc_meta_config_release(cfg);
	return st;
}

void mc_meta_config_release(struct mc_meta_config *cfg)
{
	mc_config_entry_release(mc_meta_config_table, mc_meta_config_table_len, cfg);
}

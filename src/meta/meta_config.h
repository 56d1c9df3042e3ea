/*
 * meta/meta_config.h - what the metadata backends read from the
 * environment when they open, as one configuration table (base/config.h):
 * the same rows give the defaults, the checks and docs/config.md.
 */
#ifndef MC_META_META_CONFIG_H
#define MC_META_META_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"

struct mc_meta_config {
	int64_t timeout_ms;	    /* MC_METADATA_TIMEOUT_MS; 0 = the backend's own */
	int64_t http_check_ms;	    /* MC_METADATA_HTTP_CHECK_MS; 0 = off */
	int64_t etcd_lease_ttl_sec; /* MC_ETCD_LEASE_TTL_SEC */
	int64_t redis_key_ttl_sec;  /* MC_REDIS_KEY_TTL_SEC */
	char *redis_username;	    /* MC_REDIS_USERNAME, or NULL */
	char *redis_password;	    /* MC_REDIS_PASSWORD, or NULL */
	int64_t redis_db_index;	    /* MC_REDIS_DB_INDEX */
};

extern const struct mc_config_entry mc_meta_config_table[];
extern const size_t mc_meta_config_table_len;

/* Defaults, then the environment.  A bad value is warned about and the
 * default kept, except MC_REDIS_DB_INDEX: writing to another database than
 * the one asked for would be worse than not starting, so that fails with
 * MC_ERR_INVALID_PARAMS naming the variable (cfg then needs no release). */
mc_status mc_meta_config_load(struct mc_meta_config *cfg);
void mc_meta_config_release(struct mc_meta_config *cfg);

/* MC_METADATA_CLUSTER_ID now (tests change it at run time), or NULL when
 * unset or empty. */
const char *mc_meta_cluster_id(void);

#endif

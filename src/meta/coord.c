/*
 * meta/coord.c - the leader view's front door: picks the backend from the
 * connection string's scheme and forwards each call to it.
 *
 * The backends live with the rest of their protocol's plumbing (the etcd
 * gateway client in meta_etcd.c, the hiredis connection in meta_redis.c),
 * so there is one way of talking to each coordinator.  This file holds no
 * policy: when to campaign, how long a lease is trusted and what a lost one
 * means are the caller's (master/ha.c).
 */
#include "meta/coord.h"

#include <stdio.h>
#include <strings.h>

#include "base/log.h"

mc_status mc_coord_open(const char *uri, long timeout_ms, struct mc_coord **out)
{
	if (!uri || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "coordinator: NULL argument");
	if (strncasecmp(uri, "etcd://", 7) == 0)
		return mc_coord_etcd_open(uri, timeout_ms, out);
	if (strncasecmp(uri, "redis://", 8) == 0)
		return mc_coord_redis_open(uri, timeout_ms, out);
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "coordinator %s: not an etcd:// or redis:// connection string", uri);
}

void mc_coord_close(struct mc_coord *c)
{
	if (c)
		c->ops->close(c);
}

void mc_coord_view_key(const char *cluster_id, char *buf, size_t len)
{
	snprintf(buf, len, "mooncake-store/%s/master_view",
		 cluster_id && *cluster_id ? cluster_id : "mooncake_cluster");
}

mc_status mc_coord_campaign(struct mc_coord *c, const char *key, const char *addr, int64_t ttl_s,
			    bool *won_out, uint64_t *version_out)
{
	*won_out = false;
	return c->ops->campaign(c, key, addr, ttl_s, won_out, version_out);
}

mc_status mc_coord_renew(struct mc_coord *c, bool *held_out)
{
	*held_out = false;
	return c->ops->renew(c, held_out);
}

void mc_coord_resign(struct mc_coord *c)
{
	c->ops->resign(c);
}

mc_status mc_coord_read(struct mc_coord *c, const char *key, struct mc_coord_view *out)
{
	out->present = false;
	out->addr[0] = '\0';
	out->version = 0;
	return c->ops->read(c, key, out);
}

mc_status mc_coord_evict(struct mc_coord *c, const char *key, uint64_t version, bool *ended_out)
{
	*ended_out = false;
	return c->ops->evict(c, key, version, ended_out);
}

/*
 * meta/meta.c - choosing a metadata backend from a connection string.
 *
 * The grammar is upstream's (spec transfer-engine.md 3.1): "<scheme>://..."
 * selects a backend, and a string without "://" names etcd endpoints
 * ("host:port[,host:port...]").  http(s), mem, etcd and redis are built
 * in.  "P2PHANDSHAKE" means "no metadata service" and is the engine's
 * business, so it is refused here like any other string that is not a
 * metadata URI.
 */
#define MC_LOG_MODULE "meta"
#include "meta/meta.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "mooncake/status.h"

static bool has_scheme(const char *uri, const char *scheme)
{
	size_t n = strlen(scheme);
	return strncasecmp(uri, scheme, n) == 0 && strncmp(uri + n, "://", 3) == 0;
}

mc_status mc_meta_open(const char *uri, struct mc_meta **out)
{
	if (!uri || !*uri || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata: empty connection string");
	if (has_scheme(uri, "http") || has_scheme(uri, "https"))
		return mc_meta_http_open(uri, out);
	if (has_scheme(uri, "mem"))
		return mc_meta_mem_open(uri, out);
	if (has_scheme(uri, "etcd"))
		return mc_meta_etcd_open(uri, out);
	if (has_scheme(uri, "redis"))
		return mc_meta_redis_open(uri, out);
	if (strstr(uri, "://"))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "metadata: unknown scheme in %s (expected http://, https://, "
				    "mem://, etcd:// or redis://)",
				    uri);
	if (strcmp(uri, "P2PHANDSHAKE") == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "metadata: P2PHANDSHAKE is not a metadata service");
	if (strchr(uri, ':'))
		return mc_meta_etcd_open(uri, out);
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "metadata: cannot parse connection string %s (no scheme, no port)",
			    uri);
}

void mc_meta_close(struct mc_meta *m)
{
	if (m)
		m->ops->close(m);
}

void mc_meta_no_resync(struct mc_meta *m)
{
	(void)m;
}

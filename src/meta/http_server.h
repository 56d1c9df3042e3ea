/*
 * meta/http_server.h - the HTTP metadata server, as a library.
 *
 * Upstream-compatible (spec transfer-engine.md 3.5): GET/PUT/DELETE
 * /metadata?key=K and GET /health, over libmicrohttpd.  Values are opaque
 * bytes.  A PUT to a key containing "rpc_meta" that already holds a
 * different value is refused with 400 "Duplicate rpc_meta key not allowed"
 * (byte-identical: 200 "metadata unchanged"), as upstream's master does.
 * An engine restarted under the same name probes the old owner and, when
 * it is gone, DELETEs the stale key before its PUT, which works against
 * upstream's servers too.
 * mooncake_http_metadata_server and, later, mooncake_master embed it.
 */
#ifndef MC_META_HTTP_SERVER_H
#define MC_META_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "mooncake/status.h"

struct mc_http_meta_server;
struct mc_http_counts; /* base/http.h */

/* Its connection bounds (base/http.h), from mc_http_meta_server_config_table. */
struct mc_http_meta_server_limits {
	int64_t max_conns;	    /* connections open at most */
	int64_t request_timeout_ms; /* a request must be whole within this; 0 = no bound */
	int64_t max_conns_per_ip;   /* of the connections from one address at most; 0 = no cap */
};

extern const struct mc_config_entry mc_http_meta_server_config_table[];
extern const size_t mc_http_meta_server_config_table_len;

/* The table's defaults with the environment (MC_HTTP_METADATA_*) applied. */
void mc_http_meta_server_limits_from_env(struct mc_http_meta_server_limits *out);

/* Start serving on host:port (host NULL = all interfaces; port 0 = any free
 * port, see mc_http_meta_server_port).  Runs its own thread(s). */
mc_status mc_http_meta_server_start(const char *host, uint16_t port,
				    struct mc_http_meta_server **out);
/* The same with explicit limits (NULL: mc_http_meta_server_limits_from_env). */
mc_status mc_http_meta_server_start_limits(const char *host, uint16_t port,
					   const struct mc_http_meta_server_limits *lim,
					   struct mc_http_meta_server **out);
uint16_t mc_http_meta_server_port(const struct mc_http_meta_server *s);
/* Number of keys stored (for tests and the admin page). */
uint64_t mc_http_meta_server_count(struct mc_http_meta_server *s);
/* What its connection bounds did so far (base/http.h); zeros for NULL.  Any thread. */
void mc_http_meta_server_counts(struct mc_http_meta_server *s, struct mc_http_counts *out);
/*
 * A copy of key's value (mc_malloc'ed, NUL-terminated; *len_out excludes
 * the NUL), for an embedding process that reads its own server (the
 * master's mount probe looks up rpc_meta records).  MC_ERR_NOT_FOUND,
 * MC_ERR_NOMEM, MC_ERR_INVALID_PARAMS.  Thread-safe.
 */
mc_status mc_http_meta_server_get(struct mc_http_meta_server *s, const char *key, char **value_out,
				  size_t *len_out);
void mc_http_meta_server_stop(struct mc_http_meta_server *s);

#endif

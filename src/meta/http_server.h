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

/* Its connection bounds (base/http.h), from mc_http_meta_server_config_table. */
struct mc_http_meta_server_limits {
	int64_t max_conns;	    /* connections open at most */
	int64_t request_timeout_ms; /* a request must be whole within this; 0 = no bound */
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
void mc_http_meta_server_stop(struct mc_http_meta_server *s);

#endif

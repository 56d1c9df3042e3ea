/*
 * store/client_http.h - the store client's HTTP server (/health, /metrics,
 * /metrics/summary); see client_http.c.  Used by client.c only.
 */
#ifndef MC_STORE_CLIENT_HTTP_H
#define MC_STORE_CLIENT_HTTP_H

#include <stdint.h>

#include "mooncake/status.h"

struct mc_store;

/* Serve s on port (0: a free one) of the host of its local name; s->http
 * is set.  MC_ERR_SOCKET, MC_ERR_DNS, MC_ERR_NOMEM with the cause. */
mc_status mc_store_http_open(struct mc_store *s, uint16_t port);
/* Stop serving (waits for a running handler); no-op when not open. */
void mc_store_http_close(struct mc_store *s);

#endif

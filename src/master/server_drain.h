/*
 * master/server_drain.h - the drain job pages of the admin server
 * (server_drain.c), and the two responders of server_http.c they share.
 */
#ifndef MC_MASTER_SERVER_DRAIN_H
#define MC_MASTER_SERVER_DRAIN_H

#include <jansson.h>
#include <microhttpd.h>

#include "base/http.h"
#include "mooncake/status.h"

/* server_http.c: j (its reference taken) as the JSON body; the /api/v1
 * error body with upstream's status mapping (message NULL: the code's name). */
enum MHD_Result mc_master_http_json(struct MHD_Connection *conn, unsigned code, json_t *j);
enum MHD_Result mc_master_http_api_error(struct MHD_Connection *conn, mc_status st,
					 const char *message);

/* /api/v1/drain_jobs (POST), /api/v1/drain_jobs/query (GET),
 * /api/v1/drain_jobs/cancel (POST); arg is the struct mc_master_server. */
enum MHD_Result mc_master_page_drain_jobs(void *arg, struct MHD_Connection *conn,
					  const struct mc_http_request *req);

#endif

/*
 * conductor/service.h - the mooncake_conductor daemon's service: an HTTP
 * API (JSON) where prefill and decode instances register and report load,
 * and a scheduling call that runs Algorithm 1 (sched.h) over prefix
 * matches read from the store's master (docs/conductor.md, "API").
 *
 *   GET    /health                 {"status":"ok"}
 *   GET    /instances              every instance, its load and whether it is up
 *   POST   /instances              register (or re-register) one instance
 *   POST   /instances/<id>/load    report its load; keeps it up
 *   DELETE /instances/<id>         forget it
 *   POST   /schedule               choose prefill, decode, fetches; 429 on an SLO
 *
 * The service keeps no copy of which block lives where: every /schedule
 * asks the master once (BatchGetReplicaList over the request's keys) and
 * maps each replica's segment name to the instance registered with it.
 * What it does keep is what only it knows: the instances, their reported
 * load and the bookings of the requests it admitted since.
 */
#ifndef MC_CONDUCTOR_SERVICE_H
#define MC_CONDUCTOR_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "conductor/costmodel.h"
#include "conductor/sched.h"
#include "mooncake/status.h"

struct mc_conductor_config {
	char *host;		      /* HTTP bind address */
	int64_t port;		      /* HTTP port, 0 = any */
	char *master_server_address;  /* the store's master, host:port */
	char *tenant;		      /* store tenant of the block keys ("" = default) */
	char *key_prefix;	      /* store key of an integer block key: prefix + 16 hex */
	uint64_t instance_timeout_ms; /* an instance silent this long is out of scheduling */
	int64_t http_threads;	      /* libmicrohttpd threads */
	uint64_t max_body;	      /* bytes of a request body at most */
	int64_t max_keys;	      /* block keys of one /schedule at most */
	char *policy;		      /* sched policy name */
	char *prefill_model;	      /* JSON file of cost-model options, or NULL */
	bool virtual_clock;	      /* scheduling time is the calls' now_s */
	bool help;
	struct mc_sched_config sched; /* policy and reject are set from the fields above */
	struct mc_costmodel cost;
};

/* The daemon's own options (docs/config.md, "mooncake_conductor"); the
 * scheduler's and the cost model's tables come after it on the command
 * line.  Its "reject" row shadows the scheduler's: the daemon rejects by
 * default. */
extern const struct mc_config_entry mc_conductor_config_table[];
extern const size_t mc_conductor_config_table_len;

/* Defaults of all three tables. */
void mc_conductor_config_defaults(struct mc_conductor_config *cfg);
/* Free the strings of cfg. */
void mc_conductor_config_release(struct mc_conductor_config *cfg);

struct mc_conductor;

/*
 * Connect to the master (MC_ERR_RPC_FAIL / MC_ERR_RPC_TIMEOUT when it does
 * not answer), parse the policy, start the HTTP server.  cfg is copied.
 * MC_OK with *out set; otherwise the cause is in mc_last_error.
 */
mc_status mc_conductor_start(const struct mc_conductor_config *cfg, struct mc_conductor **out);
/* The HTTP port (the chosen one when the port was 0). */
uint16_t mc_conductor_port(const struct mc_conductor *c);
/* Stop serving (waits for running handlers), close the master connection, free. */
void mc_conductor_stop(struct mc_conductor *c);

#endif

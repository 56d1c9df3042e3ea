/*
 * tools/mooncake_conductor.c - the Conductor daemon: Algorithm 1 as an
 * HTTP service over the store (conductor/service.h, docs/conductor.md).
 *
 *   mooncake_conductor [--port=8090] [--master_server_address=HOST:PORT]
 *                      [--ttft_slo_s=30] [--tbt_slo_s=0.1]
 *                      [--kvcache_balancing_threshold=1] [--instance_timeout=10s]
 *                      [--prefill_model=FILE] [cost-model flags] ...
 *
 * Flags are three config tables (the daemon's, the scheduler's, the cost
 * model's; --help prints them): --name=value, --name value, or a bool
 * alone; '-' and '_' are the same.  --prefill_model loads a JSON file of
 * cost-model options first and the flags then win.  Bad flags exit 2; a
 * master that does not answer or a port in use exits 1.  Once it serves
 * it writes one line to stderr,
 *   mooncake_conductor listening port=PORT
 * so that scripts and tests started with --port=0 learn the port without
 * sleeping.  SIGINT or SIGTERM stop it (exit 0), collected with sigwait
 * as mooncake_master does.
 */
#define MC_LOG_MODULE "conductor"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/auth.h"
#include "base/compiler.h"
#include "base/flags.h"
#include "base/log.h"
#include "conductor/service.h"
#include "mooncake/status.h"

static struct mc_auth_config auth; /* --auth_secret_file: the master connection's */

static int parse(struct mc_conductor_config *cfg, bool tables_only, int argc, char **argv)
{
	const struct mc_flag_table tabs[] = {
		{mc_auth_config_table, MC_AUTH_FLAG_ROWS, &auth, tables_only},
		{mc_conductor_config_table, mc_conductor_config_table_len, cfg, tables_only},
		{mc_sched_config_table, mc_sched_config_table_len, &cfg->sched, false},
		{mc_costmodel_config_table, mc_costmodel_config_table_len, &cfg->cost, false},
	};
	if (mc_flags_parse(tabs, MC_ARRAY_SIZE(tabs), argc, argv) != MC_OK) {
		fprintf(stderr, "mooncake_conductor: %s\ntry 'mooncake_conductor --help'\n",
			mc_last_error());
		return 2;
	}
	if (cfg->help && !tables_only) {
		printf("usage: mooncake_conductor [flags]\n");
		mc_flags_print_help(tabs, MC_ARRAY_SIZE(tabs), stdout);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct mc_conductor_config cfg;
	struct mc_conductor *c;
	sigset_t set;
	int sig, rc;
	mc_status st;

	mc_log_init_from_env();
	if (mc_log_level_parse(getenv("MC_LOG_LEVEL")) < 0)
		mc_log_set_level(MC_LOG_INFO);
	mc_conductor_config_defaults(&cfg);
	mc_config_entry_defaults(mc_auth_config_table, MC_AUTH_FLAG_ROWS, &auth);
	if ((rc = parse(&cfg, false, argc, argv)) != 0 || cfg.help)
		goto out;
	if (mc_auth_use_file(auth.file) != MC_OK) {
		fprintf(stderr, "mooncake_conductor: %s\n", mc_last_error());
		rc = 1;
		goto out;
	}
	if (cfg.prefill_model) {
		/* the file over the defaults, then the flags again so that they win */
		mc_costmodel_defaults(&cfg.cost);
		if (mc_costmodel_load_file(&cfg.cost, cfg.prefill_model) != MC_OK) {
			fprintf(stderr, "mooncake_conductor: %s\n", mc_last_error());
			rc = 1;
			goto out;
		}
		if ((rc = parse(&cfg, true, argc, argv)) != 0)
			goto out;
	}

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	st = mc_conductor_start(&cfg, &c);
	if (st != MC_OK) {
		fprintf(stderr, "mooncake_conductor: cannot start: %s\n", mc_last_error());
		rc = 1;
		goto out;
	}
	fprintf(stderr, "mooncake_conductor listening port=%u\n", mc_conductor_port(c));
	fflush(stderr);
	while (sigwait(&set, &sig) != 0)
		;
	mc_info("signal %d, shutting down", sig);
	mc_conductor_stop(c);
out:
	mc_conductor_config_release(&cfg);
	mc_config_entry_release(mc_auth_config_table, MC_AUTH_FLAG_ROWS, &auth);
	return rc;
}

/*
 * tools/mooncake_master.c - the Mooncake Store master daemon.
 *
 * A thin main over master/server.h: parse upstream's flags (and
 * --config_path), start the RPC, admin and (optionally) metadata
 * services, wait for SIGINT or SIGTERM, stop, exit 0.  Bad flags exit 2,
 * a failure to start (a port in use, ...) exits 1.
 *
 * Once everything listens it writes one line to stderr,
 *   mooncake_master listening rpc=PORT metrics=PORT metadata=PORT
 * (metadata=0 when the embedded metadata server is off), so scripts and
 * tests started with port 0 learn the ports without sleeping.
 *
 * The signals are blocked before any thread starts (threads inherit the
 * mask) and collected with sigwait, so no handler runs concurrently with
 * anything.  The daemon logs at info unless MC_LOG_LEVEL says otherwise.
 */
#define MC_LOG_MODULE "master"
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "master/server.h"
#include "mooncake/status.h"

int main(int argc, char **argv)
{
	struct mc_master_server_config cfg;
	struct mc_master_server *srv;
	sigset_t set;
	int sig, code = 0;
	mc_status st;

	/* A mass removal (RemoveAll, the sweep after an unmount) frees
	 * millions of small objects in slices, and glibc must not then do
	 * work proportional to all of them in one call (bench/master_rss.py
	 * --pauses): freed objects piled up in its fastbins were consolidated
	 * by the next large allocation or free (4 s at 5 M objects, 50 s at
	 * 50 M), so there are no fastbins and each free merges its own
	 * neighbours; and the heap's top was handed back to the kernel in one
	 * sbrk once it reached the freed gigabytes (3.4 s at 10 M), so the
	 * heap is never trimmed: freed memory stays for the next objects. */
	mallopt(M_MXFAST, 0);
	mallopt(M_TRIM_THRESHOLD, -1);
	mc_log_init_from_env();
	if (mc_log_level_parse(getenv("MC_LOG_LEVEL")) < 0)
		mc_log_set_level(MC_LOG_INFO);
	mc_master_server_config_defaults(&cfg);
	st = mc_master_server_config_parse(&cfg, argc, argv, stdout, &code);
	if (st != MC_OK) {
		mc_master_server_config_release(&cfg);
		return code;
	}

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	st = mc_master_server_start(&cfg, &srv);
	if (st != MC_OK) {
		fprintf(stderr, "mooncake_master: cannot start: %s (%s)\n", mc_last_error(),
			mc_status_name(st));
		mc_master_server_config_release(&cfg);
		return 1;
	}
	fprintf(stderr, "mooncake_master listening rpc=%u metrics=%u metadata=%u\n",
		mc_master_server_rpc_port(srv), mc_master_server_metrics_port(srv),
		mc_master_server_metadata_port(srv));
	fflush(stderr);

	while (sigwait(&set, &sig) != 0)
		;
	mc_info("signal %d, shutting down", sig);
	mc_master_server_stop(srv);
	mc_master_server_config_release(&cfg);
	return 0;
}

/*
 * tests/support/etcd_cluster.h - real etcd members for the tests.
 *
 * Starts 1..MC_ETCD_MAX_MEMBERS etcd processes (Debian's etcd-server) on
 * free 127.0.0.1 ports, with their data directories under one fresh mkdtemp
 * directory, and waits until every member answers /health.  Members are
 * stopped with SIGKILL (a crash, as far as etcd can tell) and restarted on
 * the same ports, with their data or without it.  The processes die with
 * the test (PR_SET_PDEATHSIG) should it crash before stopping them.
 *
 * Logs go to <dir>/<name>.log; set MC_TEST_KEEP_ETCD=1 to keep the
 * directory for a look after the run.
 */
#ifndef MC_TEST_ETCD_CLUSTER_H
#define MC_TEST_ETCD_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#define MC_ETCD_MAX_MEMBERS 5

struct mc_etcd_cluster;

/* True when an etcd binary is on PATH (tests exit 77 otherwise). */
bool mc_etcd_available(void);

/*
 * Start n members and wait (up to timeout_ms) until all are healthy.
 * 0 on success, -1 on failure (with a line on stderr).
 */
int mc_etcd_cluster_start(int n, int timeout_ms, struct mc_etcd_cluster **out);
/* Kill every member and remove the data directory.  NULL is a no-op. */
void mc_etcd_cluster_stop(struct mc_etcd_cluster *c);

/* "etcd://127.0.0.1:P1,127.0.0.1:P2,..." (borrowed). */
const char *mc_etcd_cluster_uri(const struct mc_etcd_cluster *c);
/* "127.0.0.1:P" of member i (borrowed). */
const char *mc_etcd_member_endpoint(const struct mc_etcd_cluster *c, int i);

/* SIGKILL member i and reap it. */
void mc_etcd_member_kill(struct mc_etcd_cluster *c, int i);
/* Start member i again, keeping its data (wipe=false) or from an empty data
 * directory, and wait until it is healthy.  0 or -1. */
int mc_etcd_member_restart(struct mc_etcd_cluster *c, int i, bool wipe, int timeout_ms);
/* One GET /health to member i with a short timeout. */
bool mc_etcd_member_healthy(const struct mc_etcd_cluster *c, int i);

#endif

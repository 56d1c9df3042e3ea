/*
 * tools/mooncake_client.c - the standalone store client: one process per
 * host that owns the host's pool memory (and SSD tier) for the cluster.
 *
 *   mooncake_client [--host=0.0.0.0] [--port=50052]
 *                   [--metadata_server=http://127.0.0.1:8080/metadata]
 *                   [--master_server_address=127.0.0.1:50051] [--protocol=tcp]
 *                   [--device_names=] [--global_segment_size=4GB]
 *                   [--local_buffer_size=0] [--threads=1] [--tenant_id=default]
 *                   [--enable_offload] [--start_offload_rpc_server=true]
 *                   [--enable_http_server] [--http_port=9300]
 *
 * Upstream's program, flags and defaults (spec store.md 8.2).  It sets up a
 * real client (mc_store_setup) that mounts --global_segment_size of memory
 * as its segment, with the SSD tier when --enable_offload (the directory
 * from MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, as for setup()), and the client
 * HTTP server (/health, /metrics) when --enable_http_server.  --host names
 * the segment: "ip" or "ip:port" (the port pins the Transfer Engine's);
 * 0.0.0.0 or an empty host is this host's first non-loopback IPv4 address.
 *
 * Dummy clients (setup_dummy in the serving processes of this host) attach
 * over the abstract Unix socket @mooncake_client_<port>.sock, served by
 * store/dummy_server.c on this client (docs/design.md, "Dummy clients");
 * upstream's TCP RPC on --port is not served: a dummy is always local,
 * and the port names the socket.  --threads is accepted: each dummy gets
 * a thread of its own.  --start_offload_rpc_server=false is refused: this
 * build serves its disk copies to readers whenever the tier is on.
 *
 * Once the segment is mounted it writes one line to stderr,
 *   mooncake_client serving segment=NAME size=BYTES http=PORT dummy=@SOCKET
 * (http=0 without the HTTP server).  SIGINT or SIGTERM disconnect the
 * dummies, unmount the segment through the master, close the client and
 * exit 0; bad flags exit 2, a
 * failed setup exits 1.  Signals are blocked before any thread starts and
 * collected with sigwait, as mooncake_master does.
 */
#define MC_LOG_MODULE "client"
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/auth.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/flags.h"
#include "base/log.h"
#include "mooncake/status.h"
#include "mooncake/store.h"
#include "mooncake/version.h"
#include "store/dummy_server.h"

struct options {
	char *host;
	int64_t port;
	char *metadata_server;
	char *master_server_address;
	char *protocol;
	char *device_names;
	uint64_t global_segment_size;
	uint64_t local_buffer_size;
	int64_t threads;
	char *tenant_id;
	bool enable_offload;
	bool start_offload_rpc_server;
	bool enable_http_server;
	int64_t http_port;
	bool help;
	bool version;
};

#define OPT(n, t, d, doc, lo, hi)                                                           \
	{                                                                                   \
		.f = {#n, NULL, d, doc, offsetof(struct options, n), t, lo, hi}, .flags = 0 \
	}

static const struct mc_config_entry options_table[] = {
	OPT(host, MC_CONFIG_STRING, "0.0.0.0",
	    "this client's address, 'ip' or 'ip:port' (the port pins the Transfer Engine's); "
	    "0.0.0.0: the first non-loopback IPv4 address",
	    0, 0),
	OPT(port, MC_CONFIG_INT, "50052",
	    "the dummy clients' port: they attach at @mooncake_client_<port>.sock", 1, 65535),
	OPT(metadata_server, MC_CONFIG_STRING, "http://127.0.0.1:8080/metadata",
	    "Transfer Engine metadata: http://..., etcd://..., redis://..., P2PHANDSHAKE", 0, 0),
	OPT(master_server_address, MC_CONFIG_STRING, "127.0.0.1:50051", "the master, host:port", 0,
	    0),
	OPT(protocol, MC_CONFIG_STRING, "tcp", "transport (tcp; rdma where built)", 0, 0),
	OPT(device_names, MC_CONFIG_STRING, "", "RDMA devices, comma-separated (\"\": all)", 0, 0),
	OPT(global_segment_size, MC_CONFIG_SIZE, "4GB",
	    "memory this client contributes to the pool", 0, INT64_MAX),
	OPT(local_buffer_size, MC_CONFIG_SIZE, "0", "local staging buffer (accepted as upstream)",
	    0, 1ll << 40),
	OPT(threads, MC_CONFIG_INT, "1",
	    "accepted as upstream: each dummy client is served by a thread of its own", 1, 1024),
	OPT(tenant_id, MC_CONFIG_STRING, "default", "tenant of this client's keys", 0, 0),
	OPT(enable_offload, MC_CONFIG_BOOL, "false",
	    "the SSD tier (MOONCAKE_OFFLOAD_FILE_STORAGE_PATH; the master needs --enable_offload)",
	    0, 0),
	OPT(start_offload_rpc_server, MC_CONFIG_BOOL, "true",
	    "serve this client's disk copies to readers (always, with --enable_offload)", 0, 0),
	OPT(enable_http_server, MC_CONFIG_BOOL, "false",
	    "the client HTTP server (/health, /metrics, /metrics/summary)", 0, 0),
	OPT(http_port, MC_CONFIG_INT, "9300", "its port (0: a free one)", 0, 65535),
	OPT(help, MC_CONFIG_BOOL, "false", "print this help", 0, 0),
	OPT(version, MC_CONFIG_BOOL, "false", "print the version", 0, 0),
};

static int usage_error(const char *msg)
{
	fprintf(stderr, "mooncake_client: %s\ntry 'mooncake_client --help'\n", msg);
	return 2;
}

/* The first UP, non-loopback IPv4 address, or "127.0.0.1". */
static void first_address(char *out, size_t cap)
{
	struct ifaddrs *ifs, *i;
	snprintf(out, cap, "127.0.0.1");
	if (getifaddrs(&ifs) != 0)
		return;
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
		    (i->ifa_flags & IFF_LOOPBACK))
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, out,
			  (socklen_t)cap);
		break;
	}
	freeifaddrs(ifs);
}

/* --host as a segment name: 0.0.0.0 (or nothing) before the port becomes
 * this host's address. */
static void segment_name(const char *host, char *out, size_t cap)
{
	const char *colon = strrchr(host, ':');
	size_t hlen = colon ? (size_t)(colon - host) : strlen(host);
	char addr[64];

	if (hlen == 0 || (hlen == 7 && strncmp(host, "0.0.0.0", 7) == 0)) {
		first_address(addr, sizeof(addr));
		snprintf(out, cap, "%s%s", addr, colon ? colon : "");
	} else {
		snprintf(out, cap, "%s", host);
	}
}

int main(int argc, char **argv)
{
	struct options o;
	struct mc_auth_config auth;
	const struct mc_flag_table tabs[] = {
		{options_table, MC_ARRAY_SIZE(options_table), &o, false},
		{mc_auth_config_table, MC_AUTH_FLAG_ROWS, &auth, false}};
	struct mc_store_params p;
	struct mc_store *s = NULL;
	struct mc_dummy_server *dsrv = NULL;
	char sock[64];
	char name[320];
	sigset_t set;
	int sig, rc = 0;
	mc_status st;

	mc_log_init_from_env();
	if (mc_log_level_parse(getenv("MC_LOG_LEVEL")) < 0)
		mc_log_set_level(MC_LOG_INFO);
	mc_config_entry_defaults(options_table, MC_ARRAY_SIZE(options_table), &o);
	mc_config_entry_defaults(mc_auth_config_table, MC_AUTH_FLAG_ROWS, &auth);
	if (mc_flags_parse(tabs, MC_ARRAY_SIZE(tabs), argc, argv) != MC_OK) {
		rc = usage_error(mc_last_error());
		goto out;
	}
	if (o.help) {
		printf("usage: mooncake_client [flags]\n");
		mc_flags_print_help(tabs, MC_ARRAY_SIZE(tabs), stdout);
		goto out;
	}
	if (o.version) {
		printf("mooncake_client %s\n", MC_VERSION_STRING);
		goto out;
	}
	if (mc_auth_use_file(auth.file) != MC_OK) {
		fprintf(stderr, "mooncake_client: %s\n", mc_last_error());
		rc = 1;
		goto out;
	}
	if (o.enable_offload && !o.start_offload_rpc_server) {
		rc = usage_error(
			"--start_offload_rpc_server=false is not supported: this build "
			"serves its disk copies to readers whenever --enable_offload is on");
		goto out;
	}

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	segment_name(o.host, name, sizeof(name));
	memset(&p, 0, sizeof(p));
	p.local_hostname = name;
	p.metadata_server = o.metadata_server;
	p.global_segment_size = o.global_segment_size;
	p.local_buffer_size = o.local_buffer_size;
	p.protocol = o.protocol;
	p.rdma_devices = o.device_names;
	p.master_server_addr = o.master_server_address;
	p.tenant_id = o.tenant_id;
	p.enable_ssd_offload = o.enable_offload;
	p.enable_http_server = o.enable_http_server;
	p.http_port = (uint16_t)o.http_port;
	if ((st = mc_store_new(&s)) != MC_OK || (st = mc_store_setup(s, &p)) != MC_OK) {
		fprintf(stderr, "mooncake_client: cannot set up: %s (%s)\n", mc_last_error(),
			mc_status_name(st));
		rc = 1;
		goto out;
	}
	if ((st = mc_dummy_server_start(s, (uint16_t)o.port, 0, &dsrv)) != MC_OK) {
		fprintf(stderr, "mooncake_client: cannot serve dummy clients: %s (%s)\n",
			mc_last_error(), mc_status_name(st));
		mc_store_close(s);
		rc = 1;
		goto out;
	}
	mc_dummy_socket_name((uint16_t)o.port, sock, sizeof(sock));
	fprintf(stderr, "mooncake_client serving segment=%s size=%llu http=%u dummy=@%s\n",
		mc_store_hostname(s), (unsigned long long)o.global_segment_size,
		mc_store_http_port(s), sock);
	fflush(stderr);

	while (sigwait(&set, &sig) != 0)
		;
	mc_info("signal %d: unmounting %s and closing", sig, mc_store_hostname(s));
	mc_dummy_server_stop(dsrv);
	st = mc_store_close(s);
	if (st != MC_OK) {
		fprintf(stderr, "mooncake_client: close: %s\n", mc_last_error());
		rc = 1;
	}
out:
	mc_store_free(s);
	mc_config_entry_release(options_table, MC_ARRAY_SIZE(options_table), &o);
	mc_config_entry_release(mc_auth_config_table, MC_AUTH_FLAG_ROWS, &auth);
	return rc;
}

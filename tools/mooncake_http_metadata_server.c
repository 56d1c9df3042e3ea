/*
 * tools/mooncake_http_metadata_server.c - standalone HTTP metadata server.
 *
 * A drop-in for upstream's Go/Python demo servers and the one embedded in
 * mooncake_master (spec transfer-engine.md 3.5): it serves
 * GET/PUT/DELETE /metadata?key=K and GET /health from memory until SIGINT
 * or SIGTERM, then exits 0.  When it is ready it prints exactly one line,
 *   mooncake_http_metadata_server listening on HOST:PORT
 * on stdout, so scripts and tests can wait for it and learn the port when
 * started with --port 0.  Bad usage exits 2, a failure to listen exits 1.
 *
 * The signals are blocked before the server's threads start (they inherit
 * the mask) and collected with sigwait, so no handler runs concurrently
 * with anything.
 */
#define MC_LOG_MODULE "meta-server"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/auth.h"
#include "base/log.h"
#include "meta/http_server.h"
#include "mooncake/status.h"

static const char prog[] = "mooncake_http_metadata_server";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [--host H] [--port N] [--auth_secret_file F] [--help]\n"
		"  --host H   address to listen on (default 0.0.0.0, all IPv4 interfaces)\n"
		"  --port N   TCP port (default 8080; 0 picks a free port)\n"
		"  --auth_secret_file F  the cluster secret: PUT and DELETE then need\n"
		"             \"Authorization: Bearer <secret>\" (default: MC_AUTH_SECRET_FILE)\n"
		"Serves GET/PUT/DELETE /metadata?key=K and GET /health until SIGINT/SIGTERM.\n",
		prog);
}

static int bad_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", prog);
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	usage(stderr);
	return 2;
}

static int parse_port(const char *s, uint16_t *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < 0 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/*
 * Match "--name VALUE" or "--name=VALUE".  Returns the value and advances *i
 * past a separate VALUE; NULL when argv[*i] is not this option.  *missing is
 * set when the option is present without its value.
 */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*missing = 1;
		return NULL;
	}
	return argv[++*i];
}

int main(int argc, char **argv)
{
	struct mc_http_meta_server *srv;
	const char *host = NULL;
	uint16_t port = 8080;
	sigset_t set;
	int sig, status;

	for (int i = 1; i < argc; i++) {
		const char *v;
		int missing = 0;

		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if ((v = opt_value(argc, argv, &i, "--host", &missing))) {
			if (!*v)
				return bad_usage("empty value for %s", "--host");
			host = v;
			continue;
		}
		if (missing)
			return bad_usage("missing value for %s", argv[i]);
		if ((v = opt_value(argc, argv, &i, "--auth_secret_file", &missing))) {
			if (!*v)
				return bad_usage("empty value for %s", "--auth_secret_file");
			/* checked now; the server reads it where every program does */
			if (mc_auth_use_file(v) != MC_OK) {
				fprintf(stderr, "mooncake_http_metadata_server: %s\n",
					mc_last_error());
				return 1;
			}
			continue;
		}
		if (missing)
			return bad_usage("missing value for %s", argv[i]);
		if ((v = opt_value(argc, argv, &i, "--port", &missing))) {
			if (parse_port(v, &port))
				return bad_usage("invalid port '%s' (expected 0-65535)", v);
			continue;
		}
		if (missing)
			return bad_usage("missing value for %s", argv[i]);
		return bad_usage("unknown argument '%s'", argv[i]);
	}

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	status = mc_http_meta_server_start(host, port, &srv);
	if (status) {
		fprintf(stderr, "%s: %s\n", prog, mc_last_error());
		return 1;
	}
	if (!host)
		host = "0.0.0.0";
	/* an IPv6 literal is bracketed so the port stays separable */
	printf(strchr(host, ':') ? "%s listening on [%s]:%u\n" : "%s listening on %s:%u\n", prog,
	       host, mc_http_meta_server_port(srv));
	fflush(stdout);

	while (sigwait(&set, &sig) != 0)
		;
	mc_info("signal %d, shutting down with %llu keys", sig,
		(unsigned long long)mc_http_meta_server_count(srv));
	mc_http_meta_server_stop(srv);
	return 0;
}

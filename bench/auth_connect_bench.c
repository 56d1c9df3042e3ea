/*
 * bench/auth_connect_bench - what the cluster secret's handshake
 * (base/auth_hs.h) adds to opening a connection, A/B in one run.
 *
 * Two loopback listeners in this process, one plain and one that runs the
 * handshake on each accepted connection, each served by its own thread.
 * The client alternates: connect to the plain one, send one byte, wait for
 * its echo, close; then the same with the handshake between connect and
 * the byte.  Each is one connection setup as a peer sees it (connect, the
 * handshake when on, the first request's round trip).  Prints the median
 * and p99 of each and the difference, per round, and the medians over the
 * rounds.
 *
 * usage: auth_connect_bench [--conns N] [--rounds R]
 */
#define PROG "auth_connect_bench"
#include "bench_util.h"

#include <pthread.h>
#include <sys/socket.h>

#include "base/auth_hs.h"
#include "base/sock.h"

static char key[] = "bench-cluster-secret-0123456789abcdef";
static struct mc_auth_secret secret = {key, sizeof(key) - 1};

struct srv {
	int lfd;
	bool auth;
	uint16_t port;
	pthread_t t;
};

static void *serve(void *arg)
{
	struct srv *s = arg;
	for (;;) {
		int fd = accept(s->lfd, NULL, NULL);
		char b;
		if (fd < 0)
			return NULL;
		mc_sock_set_nodelay(fd);
		if ((!s->auth ||
		     mc_auth_hs_run(fd, &secret, MC_AUTH_SERVER, "bench", 2000) == MC_OK) &&
		    read(fd, &b, 1) == 1)
			(void)!write(fd, &b, 1);
		close(fd);
	}
}

static double one(uint16_t port, bool auth)
{
	uint64_t t0 = now_ns();
	int fd = mc_sock_connect("127.0.0.1", port, 2000, false);
	char b = 'x';
	if (fd < 0)
		die("connect: %s", mc_last_error());
	mc_sock_set_nodelay(fd);
	if (auth && mc_auth_hs_run(fd, &secret, MC_AUTH_CLIENT, "bench", 2000) != MC_OK)
		die("handshake: %s", mc_last_error());
	if (write(fd, &b, 1) != 1 || read(fd, &b, 1) != 1)
		die("echo failed");
	{
		double us = (double)(now_ns() - t0) / 1e3;
		close(fd);
		return us;
	}
}

int main(int argc, char **argv)
{
	int conns = 2000, rounds = 5;
	struct srv s[2] = {{.auth = false}, {.auth = true}};
	double med[2][MAX_RUNS], p99[2][MAX_RUNS];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--conns") && i + 1 < argc)
			conns = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else
			die("usage: auth_connect_bench [--conns N] [--rounds R]");
	}
	if (conns < 10 || rounds < 1 || rounds > MAX_RUNS)
		die("--conns >= 10, --rounds 1..%d", MAX_RUNS);
	for (int k = 0; k < 2; k++) {
		s[k].lfd = mc_sock_listen(0, 1024);
		if (s[k].lfd < 0)
			die("listen: %s", mc_last_error());
		s[k].port = mc_sock_local_port(s[k].lfd);
		mc_sock_set_nonblock(s[k].lfd, false); /* the thread blocks in accept */
		pthread_create(&s[k].t, NULL, serve, &s[k]);
	}
	for (int r = 0; r < rounds; r++) {
		double *v[2];
		v[0] = calloc((size_t)conns, sizeof(double));
		v[1] = calloc((size_t)conns, sizeof(double));
		if (!v[0] || !v[1])
			die("out of memory");
		for (int i = 0; i < conns; i++) /* alternate A and B */
			for (int k = 0; k < 2; k++)
				v[k][i] = one(s[(k + i) % 2].port, (k + i) % 2 == 1);
		/* v[k][i] was plain when (k + i) is even: sort them apart */
		{
			double *plain = calloc((size_t)conns, sizeof(double));
			double *auth = calloc((size_t)conns, sizeof(double));
			for (int i = 0; i < conns; i++) {
				plain[i] = v[i % 2 == 0 ? 0 : 1][i];
				auth[i] = v[i % 2 == 0 ? 1 : 0][i];
			}
			qsort(plain, (size_t)conns, sizeof(double), cmp_double);
			qsort(auth, (size_t)conns, sizeof(double), cmp_double);
			med[0][r] = plain[conns / 2];
			med[1][r] = auth[conns / 2];
			p99[0][r] = plain[conns * 99 / 100];
			p99[1][r] = auth[conns * 99 / 100];
			printf("round %d: plain p50 %.1f us p99 %.1f us | secret p50 %.1f us p99 %.1f "
			       "us | +%.1f us\n",
			       r, med[0][r], p99[0][r], med[1][r], p99[1][r],
			       med[1][r] - med[0][r]);
			free(plain);
			free(auth);
		}
		free(v[0]);
		free(v[1]);
	}
	printf("connection setup (connect + first request), median of %d rounds of %d: plain "
	       "%.1f us, with the secret %.1f us (+%.1f us); p99 %.1f vs %.1f us\n",
	       rounds, conns, median(med[0], rounds), median(med[1], rounds),
	       median(med[1], rounds) - median(med[0], rounds), median(p99[0], rounds),
	       median(p99[1], rounds));
	return 0;
}

/* tests/unit/test_tcp_zc.c - sending by reference (transport/tcp_zc.c) over a
 * real loopback TCP connection: every byte arrives, a full socket leaves the
 * rest in the pipe until flushed, a closed peer is an error (not a signal),
 * unmapped memory falls back to copying, and closing drops the pipe. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/sock.h"
#include "support.h"
#include "transport/tcp_zc.h"

#define BIG (32u << 20)

struct conn {
	int snd, rcv;
};

/* A connected loopback TCP pair; the sending end non-blocking, as the
 * transport's sockets are. */
static int setup_conn(void **state)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(ls, 1), 0);
	assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &al), 0);
	c->snd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	assert_true(connect(c->snd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EINPROGRESS);
	c->rcv = accept(ls, NULL, NULL);
	assert_true(c->rcv >= 0);
	close(ls);
	*state = c;
	return 0;
}

static int teardown_conn(void **state)
{
	struct conn *c = *state;
	if (c->snd >= 0)
		close(c->snd);
	if (c->rcv >= 0)
		close(c->rcv);
	free(c);
	return 0;
}

struct reader {
	int fd;
	uint8_t *dst;
	size_t len;
};

static void *read_all(void *arg)
{
	struct reader *r = arg;
	size_t got = 0;
	while (got < r->len) {
		ssize_t n = recv(r->fd, r->dst + got, r->len - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	r->len = got;
	return NULL;
}

/* Wait until the socket can take more (the transport's EPOLLOUT). */
static void wait_writable(int fd)
{
	fd_set w;
	FD_ZERO(&w);
	FD_SET(fd, &w);
	select(fd + 1, NULL, &w, NULL, NULL);
}

static void every_byte_arrives_through_a_full_socket(void **state)
{
	struct conn *c = *state;
	uint8_t *src = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *dst = malloc(BIG);
	struct mc_zc z = MC_ZC_INIT;
	struct reader r = {.fd = c->rcv, .dst = dst, .len = BIG};
	pthread_t t;
	size_t off = 0, blocked = 0;

	assert_true(src != MAP_FAILED && dst);
	mc_test_fill(src, BIG, 7);
	/* 32 MiB is more than loopback socket buffers hold: with the reader not
	 * started yet, the pipe must keep what the socket refused */
	while (off < BIG) {
		int f = mc_zc_flush(&z, c->snd);
		assert_true(f >= 0);
		if (f == 0) {
			blocked++;
			if (blocked == 1)
				assert_int_equal(pthread_create(&t, NULL, read_all, &r), 0);
			wait_writable(c->snd);
			continue;
		}
		ssize_t k = mc_zc_take(&z, c->snd, src + off, BIG - off);
		assert_true(k > 0);
		assert_true((size_t)k <= z.cap);
		off += (size_t)k;
	}
	while (mc_zc_flush(&z, c->snd) == 0) {
		if (++blocked == 1)
			assert_int_equal(pthread_create(&t, NULL, read_all, &r), 0);
		wait_writable(c->snd);
	}
	assert_int_equal(z.piped, 0);
	assert_true(blocked > 0); /* the full-socket path ran (and started the reader) */
	pthread_join(t, NULL);
	assert_int_equal(r.len, BIG);
	assert_memory_equal(src, dst, BIG);
	mc_zc_close(&z);
	assert_int_equal(z.rd, -1);
	assert_int_equal(z.piped, 0);
	munmap(src, BIG);
	free(dst);
}

/* The transport's workers keep SIGPIPE blocked (splice has no
 * MSG_NOSIGNAL); with that, a closed peer is an error return. */
static void closed_peer_is_an_error_not_a_signal(void **state)
{
	struct conn *c = *state;
	uint8_t *src = malloc(BIG);
	struct mc_zc z = MC_ZC_INIT;
	sigset_t set, old, pending;
	int failed = 0;

	assert_non_null(src);
	mc_test_fill(src, BIG, 9);
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	close(c->rcv);
	c->rcv = -1;
	for (int i = 0; i < 64 && !failed; i++) {
		ssize_t k = mc_zc_take(&z, c->snd, src, BIG);
		int f = mc_zc_flush(&z, c->snd);
		if (k < 0 || f < 0)
			failed = 1;
		else if (f == 0)
			wait_writable(c->snd);
	}
	assert_true(failed);
	/* drop the SIGPIPE the failed splice left pending on this thread */
	sigemptyset(&pending);
	sigpending(&pending);
	if (sigismember(&pending, SIGPIPE)) {
		struct timespec zero = {0, 0};
		sigtimedwait(&set, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	mc_zc_close(&z);
	free(src);
}

/* Memory the kernel cannot pin is refused, so the caller copies instead. */
static void unmapped_memory_is_refused(void **state)
{
	struct conn *c = *state;
	struct mc_zc z = MC_ZC_INIT;
	uint8_t *p = mmap(NULL, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	errno = 0;
	assert_int_equal(mc_zc_take(&z, c->snd, p, 1 << 20), -1);
	assert_true(errno != 0);
	assert_int_equal(z.piped, 0);
	mc_zc_close(&z);
	munmap(p, 1 << 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(every_byte_arrives_through_a_full_socket,
						setup_conn, teardown_conn),
		cmocka_unit_test_setup_teardown(closed_peer_is_an_error_not_a_signal, setup_conn,
						teardown_conn),
		cmocka_unit_test_setup_teardown(unmapped_memory_is_refused, setup_conn,
						teardown_conn),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

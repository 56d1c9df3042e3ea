/*
 * tests/support/delay_status.c - an LD_PRELOAD shim for the exit-race test
 * (tests/python/pg_exit.py): every sendmsg() of exactly 8 bytes, which is
 * the size of the TCP transport's status frame (transport/tcp_codec.c), is
 * delayed by MC_TEST_STATUS_DELAY_US microseconds before it goes out.  So a
 * target's answer to a WRITE leaves well after the bytes landed, and a rank
 * that exits as soon as it saw them lands in the window where its peer's
 * WRITE is still unanswered: the race the departure handshake closes
 * happens nearly every time instead of once in a hundred.  Test code only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	static sendmsg_fn real;
	static long delay_us = -1;
	size_t total = 0;

	if (!real) {
		void *sym = dlsym(RTLD_NEXT, "sendmsg");
		memcpy(&real, &sym, sizeof(real)); /* object to function pointer, as POSIX allows */
	}
	if (delay_us < 0) {
		const char *v = getenv("MC_TEST_STATUS_DELAY_US");
		delay_us = v ? atol(v) : 0;
	}
	for (size_t i = 0; msg && i < msg->msg_iovlen; i++)
		total += msg->msg_iov[i].iov_len;
	if (delay_us > 0 && total == 8) {
		struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
	return real(fd, msg, flags);
}

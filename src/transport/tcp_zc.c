/* transport/tcp_zc.c - vmsplice/splice sending; see tcp_zc.h. */
#include "transport/tcp_zc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/compiler.h"

/* 256 KiB: 64 page slots, one split slice per vmsplice(); small enough that
 * a host with hundreds of connections stays under the per-user pipe quota
 * (/proc/sys/fs/pipe-user-pages-soft). */
#define ZC_PIPE_SIZE (256 * 1024)

static int zc_open(struct mc_zc *z)
{
	int fds[2];
	int cap;
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	cap = fcntl(fds[1], F_SETPIPE_SZ, ZC_PIPE_SIZE);
	if (cap < ZC_PIPE_SIZE) {
		/* over the pipe quota: a 2-slot pipe would cost more syscalls
		 * than the copy it saves */
		close(fds[0]);
		close(fds[1]);
		errno = ENOBUFS;
		return -1;
	}
	z->rd = fds[0];
	z->wr = fds[1];
	z->cap = (size_t)cap;
	z->piped = 0;
	return 0;
}

int mc_zc_flush(struct mc_zc *z, int sock)
{
	while (z->piped) {
		ssize_t n = splice(z->rd, NULL, sock, NULL, z->piped, SPLICE_F_NONBLOCK);
		if (n > 0) {
			z->piped -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n == 0)
			errno = EPIPE;
		return -1;
	}
	return 1;
}

ssize_t mc_zc_take(struct mc_zc *z, int sock, const void *p, size_t len)
{
	struct iovec iov;
	ssize_t n;

	if (z->rd < 0 && zc_open(z) < 0)
		return -1;
	iov.iov_base = (void *)(uintptr_t)p;
	iov.iov_len = MC_MIN(len, z->cap);
	do {
		n = vmsplice(z->wr, &iov, 1, SPLICE_F_NONBLOCK);
	} while (n < 0 && errno == EINTR);
	if (n <= 0) {
		if (n == 0)
			errno = EFAULT;
		return -1;
	}
	z->piped = (size_t)n;
	if (mc_zc_flush(z, sock) < 0) {
		/* the socket failed: the caller finds out on its next write or
		 * read; what was taken is dropped with the connection */
	}
	return n;
}

void mc_zc_close(struct mc_zc *z)
{
	if (z->rd >= 0)
		close(z->rd);
	if (z->wr >= 0)
		close(z->wr);
	z->rd = z->wr = -1;
	z->piped = 0;
}

/*
 * bench/tcp_ref.c - the reference a TCP transport is measured against: a
 * plain blocking request/response loop over one loopback socket.
 *
 *   tcp_ref --server PORT [--buffer SIZE] [--splice 1]
 *   tcp_ref --client PORT --op write|read|stream --block SIZE [--buffer SIZE]
 *           [--duration S] [--splice 1]
 *
 * --splice 1: the side that sends payload does it by reference (vmsplice
 * into a pipe, splice into the socket), so the kernel copies once, not twice.
 *
 * Each request is a 24-byte header {size, offset, op}; a write carries its
 * payload and gets an 8-byte ack, a read gets the payload back, and a
 * stream write carries its payload and gets nothing back, so the client
 * sends without pause as iperf3 does (its bandwidth: iperf3's, but over
 * the same memory as the engine's bench).  Both sides
 * walk a buffer of --buffer bytes (default 1 GiB, huge pages advised) block
 * by block, like transfer_engine_bench does, so the memory traffic matches;
 * with --buffer equal to --block the loop reuses one cache-hot block, like
 * iperf3.  Prints "tcp_ref op=... block=... GB/s=...".
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int full(int fd, void *buf, size_t len, int sending)
{
	char *p = buf;
	while (len) {
		ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Send len bytes from p by reference: vmsplice into a pipe, splice into fd. */
static int pipefd[2] = {-1, -1};
static int send_spliced(int fd, void *p, size_t len)
{
	while (len) {
		struct iovec iov = {p, len > (1u << 20) ? (1u << 20) : len};
		ssize_t n = vmsplice(pipefd[1], &iov, 1, 0);
		if (n <= 0)
			return -1;
		p = (char *)p + n;
		len -= (size_t)n;
		while (n) {
			ssize_t m = splice(pipefd[0], NULL, fd, NULL, (size_t)n,
					   len ? SPLICE_F_MORE : 0);
			if (m <= 0)
				return -1;
			n -= m;
		}
	}
	return 0;
}

static int send_payload(int fd, void *p, size_t len)
{
	return pipefd[0] >= 0 ? send_spliced(fd, p, len) : full(fd, p, len, 1);
}

static char *alloc(size_t size)
{
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(p, size, MADV_HUGEPAGE);
	memset(p, 0x5a, size);
	return p;
}

int main(int argc, char **argv)
{
	int port = 0, server = 0, op = 1, one = 1; /* op: 0 read, 1 write, 2 stream */
	size_t block = 1 << 20, bufsize = 1ul << 30;
	double duration = 5;
	struct sockaddr_in a = {.sin_family = AF_INET};

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--server")) {
			server = 1;
			port = atoi(argv[i + 1]);
		} else if (!strcmp(argv[i], "--client")) {
			port = atoi(argv[i + 1]);
		} else if (!strcmp(argv[i], "--op")) {
			op = !strcmp(argv[i + 1], "stream") ? 2 : !strcmp(argv[i + 1], "write");
		} else if (!strcmp(argv[i], "--block")) {
			block = strtoull(argv[i + 1], NULL, 0);
		} else if (!strcmp(argv[i], "--buffer")) {
			bufsize = strtoull(argv[i + 1], NULL, 0);
		} else if (!strcmp(argv[i], "--splice")) {
			if (atoi(argv[i + 1]) &&
			    (pipe(pipefd) || fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 20) < 0)) {
				perror("pipe");
				return 1;
			}
		} else if (!strcmp(argv[i], "--duration")) {
			duration = atof(argv[i + 1]);
		}
	}
	if (!port || block == 0 || bufsize < block) {
		fprintf(stderr, "usage: see the comment at the top of tcp_ref.c\n");
		return 2;
	}
	char *buf = alloc(bufsize);
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (server) {
		int ls = socket(AF_INET, SOCK_STREAM, 0), fd;
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 4)) {
			perror("listen");
			return 1;
		}
		printf("listening\n");
		fflush(stdout);
		while ((fd = accept(ls, NULL, NULL)) >= 0) {
			uint64_t h[3], ack = 0;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			while (full(fd, h, sizeof(h), 0) == 0) {
				if (h[1] > bufsize || h[0] > bufsize - h[1])
					break;
				if (h[2] == 2) {
					if (full(fd, buf + h[1], h[0], 0))
						break;
				} else if (h[2]) {
					if (full(fd, buf + h[1], h[0], 0) || full(fd, &ack, 8, 1))
						break;
				} else if (send_payload(fd, buf + h[1], h[0])) {
					break;
				}
			}
			close(fd);
		}
		return 0;
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		perror("connect");
		return 1;
	}
	double t0 = now(), t;
	uint64_t bytes = 0, off = 0, ack;
	do {
		uint64_t h[3] = {block, off, (uint64_t)op};
		if (full(fd, h, sizeof(h), 1) ||
		    (op == 2   ? send_payload(fd, buf + off, block)
		     : op == 1 ? (send_payload(fd, buf + off, block) || full(fd, &ack, 8, 0))
			       : full(fd, buf + off, block, 0))) {
			fprintf(stderr, "transfer failed\n");
			return 1;
		}
		bytes += block;
		off += block;
		if (off + block > bufsize)
			off = 0;
		t = now();
	} while (t - t0 < duration);
	if (op == 2) { /* a stream is done when the server has it all */
		shutdown(fd, SHUT_WR);
		while (recv(fd, &ack, sizeof(ack), 0) > 0) {
		}
		t = now();
	}
	printf("tcp_ref op=%s block=%zu buffer=%zu GB/s=%.2f\n",
	       op == 2 ? "stream"
	       : op    ? "write"
		       : "read",
	       block, bufsize, (double)bytes / (t - t0) / 1e9);
	return 0;
}

/*
 * transport/tcp_zc.h - sending payload from registered memory by reference.
 *
 * A payload is moved into the socket with vmsplice() into a private pipe
 * and splice() from the pipe into the socket: the kernel takes references
 * to the user's pages instead of copying them into socket buffers, so a
 * loopback transfer copies once (into the receiver's memory) instead of
 * twice, and a real NIC sends straight from the pages.
 *
 * The bytes stay referenced until the peer has them, so a sender may only
 * report a payload complete once the peer said it received it (a v2 write
 * status, or the read data arriving at its initiator); a v1 write, which
 * completes when sent, must copy.
 *
 * Bytes taken into the pipe count as sent for the caller's bookkeeping; the
 * pipe must be drained (mc_zc_flush) before anything else is written to the
 * socket, and reset with the connection (mc_zc_close) when it fails.
 */
#ifndef MC_TRANSPORT_TCP_ZC_H
#define MC_TRANSPORT_TCP_ZC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mc_zc {
	int rd, wr;   /* the pipe, -1 until first used */
	size_t piped; /* bytes in the pipe, not yet in the socket */
	size_t cap;   /* the pipe's capacity */
};

#define MC_ZC_INIT                 \
	{                          \
		.rd = -1, .wr = -1 \
	}

/* 1: the pipe is empty; 0: the socket is full (wait for EPOLLOUT);
 * negative: the socket failed (errno set). */
int mc_zc_flush(struct mc_zc *z, int sock);
/* Take up to len bytes at p into the pipe (the pipe must be empty) and
 * push them towards sock.  Returns the bytes taken (> 0), or -1 when this
 * memory or this process cannot splice (errno set; send the bytes by copy
 * instead).  After a return > 0, z->piped may still be non-zero. */
ssize_t mc_zc_take(struct mc_zc *z, int sock, const void *p, size_t len);
/* Drop the pipe and whatever it still holds. */
void mc_zc_close(struct mc_zc *z);

#endif

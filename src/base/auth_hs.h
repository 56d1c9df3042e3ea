/*
 * base/auth_hs.h - the challenge-response handshake that opens every
 * authenticated connection (issue 16 part 2; docs/protocol.md,
 * "Authentication handshake").
 *
 * With a cluster secret (base/auth.h) both ends of a connection prove they
 * hold it before the first frame of the connection's own protocol:
 *
 *   client -> server  HELLO      client nonce (32 bytes)
 *   server -> client  CHALLENGE  server nonce (32), server MAC (32)
 *   client -> server  PROOF      client MAC (32)
 *
 * MAC = HMAC-SHA256(secret, label || channel || client nonce || server
 * nonce), label "mooncake-auth-v1 server" or "... client" so a MAC of one
 * direction never passes for the other, channel naming the port's protocol
 * ("te-data", "te-rpc", "master") so a proof for one port is no proof for
 * another.  Both nonces are fresh (getrandom), so a recorded handshake
 * replayed on a new connection fails; MACs are compared in constant time.
 * The client sends its first request right after PROOF; the server acts on
 * nothing before PROOF checked.  Without a secret no handshake happens and
 * the wire is upstream's.
 *
 * Every frame: "MCAU" (4 bytes), version 1 (1 byte), type (1 byte), body
 * length (2 bytes, little-endian), body.  A frame of another magic,
 * version, type or length than the step expects fails the handshake.
 *
 * mc_auth_hs_io moves a handshake on over a non-blocking socket and never
 * reads a byte past the handshake's last frame, so the connection's own
 * protocol reads from a clean stream afterwards.  mc_auth_hs_run does the
 * whole handshake on a blocking socket within a deadline.
 *
 * Threads: one handshake belongs to one thread at a time; the counters are
 * atomics.
 */
#ifndef MC_BASE_AUTH_HS_H
#define MC_BASE_AUTH_HS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/auth.h"

#define MC_AUTH_NONCE_LEN 32
#define MC_AUTH_MAC_LEN	  32
#define MC_AUTH_HDR_LEN	  8
#define MC_AUTH_BODY_MAX  64
#define MC_AUTH_FRAME_MAX (MC_AUTH_HDR_LEN + MC_AUTH_BODY_MAX)

enum mc_auth_type { MC_AUTH_HELLO = 1, MC_AUTH_CHALLENGE = 2, MC_AUTH_PROOF = 3 };
enum mc_auth_role { MC_AUTH_CLIENT, MC_AUTH_SERVER };
enum mc_auth_result { MC_AUTH_DONE, MC_AUTH_AGAIN, MC_AUTH_FAIL };

/* A frame header, decoded: MC_OK, or MC_ERR_PROTOCOL (bad magic or
 * version, unknown type, body over MC_AUTH_BODY_MAX). */
struct mc_auth_hdr {
	uint8_t type;
	uint16_t len;
};
mc_status mc_auth_hdr_decode(const uint8_t in[MC_AUTH_HDR_LEN], struct mc_auth_hdr *out);
void mc_auth_hdr_encode(uint8_t type, uint16_t len, uint8_t out[MC_AUTH_HDR_LEN]);

struct mc_auth_hs {
	const struct mc_auth_secret *secret; /* borrowed */
	const char *channel;		     /* borrowed */
	enum mc_auth_role role;
	int step; /* private */
	uint8_t cn[MC_AUTH_NONCE_LEN], sn[MC_AUTH_NONCE_LEN];
	uint8_t in[MC_AUTH_FRAME_MAX];
	size_t in_len, in_want;		    /* bytes held; bytes the current frame needs */
	uint8_t out[2 * MC_AUTH_FRAME_MAX]; /* at most two frames queued (HELLO, PROOF) */
	size_t out_len, out_pos;
	const char *why; /* after MC_AUTH_FAIL: the reason (static text) */
};

/* Prepare h (no I/O); a client queues its HELLO.  MC_ERR_INTERNAL when no
 * random bytes can be had. */
mc_status mc_auth_hs_init(struct mc_auth_hs *h, const struct mc_auth_secret *secret,
			  enum mc_auth_role role, const char *channel);

/* Feed bytes received (at most mc_auth_hs_need(h) of them): MC_AUTH_AGAIN
 * for more, MC_AUTH_DONE when the peer proved the secret (the output may
 * still hold this side's last frame), MC_AUTH_FAIL with h->why.  Pure: the
 * fuzz target drives it. */
enum mc_auth_result mc_auth_hs_feed(struct mc_auth_hs *h, const uint8_t *p, size_t n);
/* Bytes the handshake reads next (0 once done). */
size_t mc_auth_hs_need(const struct mc_auth_hs *h);

/* Send what is queued and read what the handshake needs from non-blocking
 * fd: MC_AUTH_DONE once the peer proved the secret and every byte of ours
 * left, MC_AUTH_AGAIN (*want_out: wait for EPOLLOUT too), MC_AUTH_FAIL
 * (h->why; the peer closing counts). */
enum mc_auth_result mc_auth_hs_io(struct mc_auth_hs *h, int fd, bool *want_out);

/* The whole handshake on fd (blocking or not) within timeout_ms: MC_OK, or
 * MC_ERR_AUTH / MC_ERR_TIMEOUT with the reason in mc_last_error. */
mc_status mc_auth_hs_run(int fd, const struct mc_auth_secret *secret, enum mc_auth_role role,
			 const char *channel, int timeout_ms);

/* Handshakes refused (a server's peers failing, or a client's target), per
 * process, for metrics and tests. */
extern atomic_uint_fast64_t mc_auth_refused_total;

/* A refused handshake on the listener what, from peer: counted, and logged
 * at most once a second per listener name (with the number not logged since). */
void mc_auth_refused(const char *what, const char *peer, const char *why);

#endif

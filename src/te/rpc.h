/*
 * te/rpc.h - the RPC / handshake side channel (spec transfer-engine.md 3.6).
 *
 * Frames: 8-byte length (little-endian, = 1 + payload size), 1 type byte,
 * payload (JSON text; writers append '\n').  Types: 0 Connection (QP
 * handshake), 1 Metadata (descriptor exchange), 2 Notify, 3 Probe.  A legacy
 * untyped frame (length then JSON, first payload byte '{' > 3) is accepted
 * as Connection and answered untyped.  One request per TCP connection; the
 * response echoes the request's type; the server half-closes after replying.
 *
 * Unlike upstream's serial single-threaded listener, the server multiplexes
 * every connection on one epoll thread with a per-connection deadline, so a
 * slow or silent client delays nobody else.  Frames of length 0 or above
 * the configured maximum are refused (connection closed, reason logged).
 */
#ifndef MC_TE_RPC_H
#define MC_TE_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/auth.h"
#include "base/buf.h"
#include "mooncake/status.h"

enum mc_rpc_type {
	MC_RPC_CONNECTION = 0,
	MC_RPC_METADATA = 1,
	MC_RPC_NOTIFY = 2,
	MC_RPC_PROBE = 3,
};

#define MC_RPC_HEADER_LEN 9

/*
 * Handler: called on the server thread with the request payload (not
 * NUL-terminated; len bytes).  Return MC_OK and a malloc'ed response
 * payload (*resp_out, *resp_len_out) to answer, or an error to close the
 * connection without a reply.  Must not block for long.
 */
typedef mc_status (*mc_rpc_handler_cb)(void *arg, int type, const char *req, size_t len,
				       char **resp_out, size_t *resp_len_out);

struct mc_rpc_server_params {
	int listen_fd;	     /* already bound and listening; the server takes ownership */
	uint64_t max_frame;  /* MC_HANDSHAKE_MAX_LENGTH, default 1 MiB */
	int recv_timeout_ms; /* per-connection deadline to receive a whole frame, default 5000 */
	unsigned max_conns;  /* connections open at most (more are closed at once), 0 = 1024 */
	mc_rpc_handler_cb handler;
	void *handler_arg;
	/* the cluster secret (outlives the server), or NULL: with one, every
	 * connection must pass the handshake of base/auth_hs.h (channel
	 * "te-rpc") before its frame is read */
	const struct mc_auth_secret *auth;
};

struct mc_rpc_server;

/*
 * Start the server thread.  listen_fd is owned by the server from this call
 * on, also when it fails (it is closed then).  max_frame 0 = 1 MiB,
 * recv_timeout_ms <= 0 = 5000.  The handler runs on the server thread only.
 * MC_OK, MC_ERR_INVALID_PARAMS, MC_ERR_NOMEM, MC_ERR_SOCKET, MC_ERR_INTERNAL.
 */
mc_status mc_rpc_server_start(const struct mc_rpc_server_params *p, struct mc_rpc_server **out);
/* Stops the thread, closes every connection and the listener.  Not from the
 * handler.  NULL is a no-op. */
void mc_rpc_server_stop(struct mc_rpc_server *s);

/*
 * Client: connect to host:port (connect_timeout_ms), send one typed frame,
 * read one response frame within io_timeout_ms, require its type to equal
 * type, return its payload (malloc'ed, NUL-terminated; *resp_len_out
 * excludes the NUL).  Errors: MC_ERR_DNS, MC_ERR_CONN_REFUSED,
 * MC_ERR_TIMEOUT, MC_ERR_SOCKET, MC_ERR_PROTOCOL (bad or mismatched frame),
 * MC_ERR_TOO_LARGE (response above max_frame), MC_ERR_CONN_CLOSED (the
 * peer closed before a whole response: it refused the request),
 * MC_ERR_INVALID_PARAMS, MC_ERR_NOMEM.  max_frame 0 = 1 MiB; io_timeout_ms
 * <= 0 = 60 s (one deadline for the write and the read).  Thread-safe.
 */
/* auth: the cluster secret, or NULL: with one the call opens with the
 * handshake (base/auth_hs.h) and fails with MC_ERR_PERMISSION when the
 * server cannot prove the secret. */
mc_status mc_rpc_call(const struct mc_auth_secret *auth, const char *host, uint16_t port, int type,
		      const char *req, size_t len, int connect_timeout_ms, int io_timeout_ms,
		      uint64_t max_frame, char **resp_out, size_t *resp_len_out);

/*
 * The same with one deadline (mc_now_ms clock) for the connect, the write
 * and the read together: what a caller that must answer by a given time
 * (the master's mount probe) needs.  MC_ERR_TIMEOUT when it passes; the
 * other errors as mc_rpc_call.  Thread-safe.
 */
mc_status mc_rpc_call_until(const struct mc_auth_secret *auth, const char *host, uint16_t port,
			    int type, const char *req, size_t len, uint64_t deadline_ms,
			    uint64_t max_frame, char **resp_out, size_t *resp_len_out);

/*
 * Frame header parser, shared by server and client and fuzzed on its own:
 * given the first 9 bytes, say whether the frame is typed (type_out = 0..3,
 * payload_len_out = length - 1) or legacy untyped (type_out = -1, the 9th
 * byte is the first payload byte, payload_len_out = length).  MC_OK, or
 * MC_ERR_PROTOCOL for length 0 / unknown type, MC_ERR_TOO_LARGE above max_frame.
 */
mc_status mc_rpc_parse_header(const uint8_t hdr[MC_RPC_HEADER_LEN], uint64_t max_frame,
			      int *type_out, uint64_t *payload_len_out);

/*
 * Building blocks shared by the server, the client and the fuzz target.
 *
 * Legacy detection: a 9th header byte of 0..3 is a type; '{' or JSON
 * whitespace (' ', '\t', '\r', '\n') starts a legacy untyped frame; any
 * other byte is an unknown type (MC_ERR_PROTOCOL).
 */

/*
 * Encode one frame: type MC_RPC_* for a typed frame, -1 for a legacy
 * untyped one.  A '\n' is appended to the payload unless it already ends
 * with one.  *frame_out is mc_malloc'ed (caller frees with mc_free).
 * MC_OK, MC_ERR_INVALID_PARAMS (bad type), MC_ERR_NOMEM.
 */
mc_status mc_rpc_frame_encode(int type, const char *payload, size_t len, char **frame_out,
			      size_t *frame_len_out);

/*
 * Incremental frame reader: the server's per-connection frame assembly,
 * free of sockets so it can be driven chunk by chunk (and fuzzed).  The
 * payload buffer (a struct mc_buf, doubling from 256 bytes) grows with the
 * bytes that actually arrive, so a header announcing max_frame costs
 * nothing until the data comes, and a whole frame costs less than twice
 * its size.  Not thread-safe; one reader per connection.
 */
struct mc_rpc_reader {
	uint64_t max_frame; /* 0 at init = 1 MiB */
	uint8_t hdr[MC_RPC_HEADER_LEN];
	size_t hdr_len;	       /* header bytes received so far */
	int type;	       /* MC_RPC_* or -1 (legacy), once the header is complete */
	uint64_t payload_len;  /* valid once the header is complete */
	struct mc_buf payload; /* the bytes so far; a NUL follows them once complete */
	mc_status status;      /* MC_INPROGRESS, MC_OK (complete) or the sticky error */
};

void mc_rpc_reader_init(struct mc_rpc_reader *r, uint64_t max_frame);
/* Frees the payload (unless taken); the reader may be re-initialised. */
void mc_rpc_reader_release(struct mc_rpc_reader *r);
/*
 * Consume up to len bytes of data.  Returns MC_INPROGRESS (all len bytes
 * used, frame not complete yet), MC_OK (frame complete; *used_out bytes
 * were part of it, the rest belong to whatever follows), or an error from
 * mc_rpc_parse_header / MC_ERR_NOMEM.  Once complete or failed, further
 * calls return the same status and consume nothing.  *used_out is written
 * on MC_OK and MC_INPROGRESS.
 */
mc_status mc_rpc_reader_feed(struct mc_rpc_reader *r, const void *data, size_t len,
			     size_t *used_out);
/*
 * After MC_OK: hand the NUL-terminated payload to the caller (mc_free it);
 * *len_out excludes the NUL.  NULL if the frame is not complete.
 */
char *mc_rpc_reader_take(struct mc_rpc_reader *r, size_t *len_out);

#endif

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
typedef int (*mc_rpc_handler_cb)(void *arg, int type, const char *req, size_t len,
				 char **resp_out, size_t *resp_len_out);

struct mc_rpc_server_params {
	int listen_fd;           /* already bound and listening; the server takes ownership */
	uint64_t max_frame;      /* MC_HANDSHAKE_MAX_LENGTH, default 1 MiB */
	int recv_timeout_ms;     /* per-connection deadline to receive a whole frame, default 5000 */
	mc_rpc_handler_cb handler;
	void *handler_arg;
};

struct mc_rpc_server;

int mc_rpc_server_start(const struct mc_rpc_server_params *p, struct mc_rpc_server **out);
/* Stops the thread, closes every connection and the listener. */
void mc_rpc_server_stop(struct mc_rpc_server *s);

/*
 * Client: connect to host:port (connect_timeout_ms), send one typed frame,
 * read one response frame within io_timeout_ms, require its type to equal
 * type, return its payload (malloc'ed, NUL-terminated; *resp_len_out
 * excludes the NUL).  Errors: MC_ERR_DNS, MC_ERR_CONN_REFUSED,
 * MC_ERR_TIMEOUT, MC_ERR_SOCKET, MC_ERR_PROTOCOL (bad or mismatched frame),
 * MC_ERR_TOO_LARGE (response above max_frame).
 */
int mc_rpc_call(const char *host, uint16_t port, int type, const char *req, size_t len,
		int connect_timeout_ms, int io_timeout_ms, uint64_t max_frame, char **resp_out,
		size_t *resp_len_out);

/*
 * Frame header parser, shared by server and client and fuzzed on its own:
 * given the first 9 bytes, say whether the frame is typed (type_out = 0..3,
 * payload_len_out = length - 1) or legacy untyped (type_out = -1, the 9th
 * byte is the first payload byte, payload_len_out = length).  MC_OK, or
 * MC_ERR_PROTOCOL for length 0 / unknown type, MC_ERR_TOO_LARGE above max_frame.
 */
int mc_rpc_parse_header(const uint8_t hdr[MC_RPC_HEADER_LEN], uint64_t max_frame, int *type_out,
			uint64_t *payload_len_out);

#endif

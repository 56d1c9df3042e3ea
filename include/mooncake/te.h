/*
 * mooncake/te.h - the Transfer Engine's native C API.
 *
 * An engine (struct mc_te) owns one local segment named after the process,
 * a metadata client (HTTP server, in-process, or none in P2P mode), an RPC
 * listener for handshakes, notifications and probes, and its transports
 * (TCP; a same-host path, process_vm_readv/writev done by the target, for
 * engines on one host, off with MC_SHM_DISABLE=1; and the local memcpy path
 * used when the target is the engine itself).  Memory must be registered
 * before a peer can read or write it, and before a local request reads or
 * writes it: every request, incoming or submitted, is checked against the
 * registered ranges before any byte is touched.
 *
 * Threads: every function may be called from any thread at once, except
 * mc_te_free, which must not race with other calls on the same engine.
 *
 * Ownership: strings passed in are copied.  Registered memory belongs to the
 * caller and must stay mapped until mc_te_deregister returns.  A batch may
 * be freed only when none of its tasks is in flight (MC_ERR_BATCH_BUSY);
 * mc_te_batch_discard frees it as soon as its last task ends.
 *
 * Errors: functions return MC_OK or a negative mc_status; the calling
 * thread's mc_last_error() says what failed.
 */
#ifndef MOONCAKE_TE_H
#define MOONCAKE_TE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_te;

typedef uint64_t mc_batch_id;	/* opaque; never 0 for a valid batch */
typedef uint64_t mc_segment_id; /* 0 = the local segment */

#define MC_LOCAL_SEGMENT ((mc_segment_id)0)
#define MC_INVALID_BATCH ((mc_batch_id)UINT64_MAX)

enum mc_te_params_field {
	MC_TE_PARAM_METADATA = 1u << 0,
	MC_TE_PARAM_LOCAL_NAME = 1u << 1,
	MC_TE_PARAM_PROTOCOL = 1u << 2,
	MC_TE_PARAM_HOST = 1u << 3,
	MC_TE_PARAM_RPC_PORT = 1u << 4,
	MC_TE_PARAM_WORKERS = 1u << 5,
	MC_TE_PARAM_CONNS_PER_PEER = 1u << 6,
	MC_TE_PARAM_DEVICES = 1u << 7,
};

/*
 * Engine parameters.  Only fields whose bit is set in field_mask are read;
 * the rest come from the environment (upstream's MC_* variables) or their
 * defaults.
 */
struct mc_te_params {
	uint64_t field_mask;
	/* "http://host:port/metadata", "etcd://host:port[,host:port]", bare
	 * "host:port" (= etcd), "redis://[user:pass@]host:port", "P2PHANDSHAKE",
	 * or "mem://<name>" (in-process, for tests).  NULL = MC_METADATA_SERVER. */
	const char *metadata_uri;
	/* Segment name.  In P2P mode only the host part is used and the
	 * engine is named "<host>:<rpc_port>". */
	const char *local_name;
	/* "tcp" (default); "rdma" falls back to tcp when no RDMA device is usable. */
	const char *protocol;
	/* Address peers use to reach this engine; NULL = MC_TCP_BIND_ADDRESS or the
	 * first non-loopback interface. */
	const char *host;
	/* RPC port; 0 = random free port in [MC_MIN_RPC_PORT, MC_MAX_RPC_PORT]. */
	uint16_t rpc_port;
	/* TCP worker threads (default MC_TCP_WORKERS or 2). */
	unsigned workers;
	/* Persistent TCP connections per peer (default MC_TCP_CONNS_PER_PEER or 4). */
	unsigned conns_per_peer;
	/* NICs to use, comma-separated (upstream's device_name; NULL or "" = all;
	 * default MC_TE_FILTERS).  RDMA device names (mlx5_0) or network interfaces
	 * (eth1).  TCP: when MC_TCP_INTERFACES is unset and these name two or more
	 * IPv4 addresses (an RDMA device counts as its network interfaces), they
	 * are published as the data port's paths (multi-path). */
	const char *devices;
};

enum mc_opcode {
	MC_OP_READ = 0,	 /* remote -> local source buffer */
	MC_OP_WRITE = 1, /* local source buffer -> remote */
};

/* One request.  target_offset is the absolute virtual address in the target
 * process, as upstream. */
struct mc_xfer_req {
	int opcode;
	void *source;
	mc_segment_id target_id;
	uint64_t target_offset;
	uint64_t length;
};

/* Task states, numbered as upstream's. */
enum mc_xfer_state {
	MC_XFER_WAITING = 0,
	MC_XFER_PENDING = 1,
	MC_XFER_INVALID = 2,
	MC_XFER_CANCELED = 3,
	MC_XFER_COMPLETED = 4,
	MC_XFER_TIMEOUT = 5,
	MC_XFER_FAILED = 6,
};

struct mc_xfer_status {
	int state;		    /* enum mc_xfer_state */
	mc_status error;	    /* why it failed (MC_OK otherwise) */
	uint64_t transferred_bytes; /* bytes of finished tasks / slices */
};

struct mc_te_buffer {
	void *addr;
	size_t length;
};

struct mc_te_notify {
	char *name;
	char *msg;
};

/* Create an engine: connect to the metadata service, start the RPC
 * listener and the TCP transport, publish rpc_meta and the segment. */
MC_API mc_status mc_te_new(const struct mc_te_params *params, struct mc_te **te_out);
/* Stop workers, delete the published keys, free.  NULL is a no-op. */
MC_API void mc_te_free(struct mc_te *te);

/* Segment name (borrowed, valid until mc_te_free). */
MC_API const char *mc_te_local_name(const struct mc_te *te);
/* Advertised host (borrowed). */
MC_API const char *mc_te_local_host(const struct mc_te *te);
MC_API uint16_t mc_te_rpc_port(const struct mc_te *te);
MC_API uint16_t mc_te_tcp_port(const struct mc_te *te);

/* Per-transfer checksums (off unless MC_TE_CHECKSUM=1): batches allocated
 * after mc_te_set_checksum(te, true) check every transfer's bytes end to end
 * with XXH3-64; a mismatch fails the transfer with MC_ERR_CHECKSUM_MISMATCH
 * (-801), and a peer that cannot check fails it with
 * MC_ERR_TRANSPORT_UNSUPPORTED rather than moving it unchecked. */
MC_API void mc_te_set_checksum(struct mc_te *te, bool on);
MC_API bool mc_te_checksum(const struct mc_te *te);

/* Host memory for buffers to register, mapped as the store's segments are:
 * huge pages where MC_STORE_USE_HUGEPAGE asks and the system has them,
 * otherwise pages advised for transparent huge pages.  It stays lazy (an
 * untouched page costs nothing); mc_te_host_prefault faults in the part
 * about to be used.  len is rounded up to the page size; the memory is
 * zero-filled.  MC_ERR_INVALID_PARAMS (len 0), MC_ERR_NOMEM.  Free with
 * mc_te_host_free (not munmap). */
MC_API mc_status mc_te_host_alloc(size_t len, void **out);
/* Faults [p, p+len) of an mc_te_host_alloc mapping in now, unless
 * MC_STORE_PREFAULT is off, so that bytes a peer writes there first do not
 * pay the page faults; within the memory the cgroup and the system leave.
 * MC_OK, MC_ERR_INVALID_PARAMS (not such memory), MC_ERR_NOMEM. */
MC_API mc_status mc_te_host_prefault(void *p, size_t len);
/* Frees what mc_te_host_alloc returned; MC_ERR_INVALID_PARAMS for any
 * other pointer. */
MC_API mc_status mc_te_host_free(void *p);

/* Register [addr, addr+length).  location: "cpu:N", "*" or NULL (= "*").
 * MC_ERR_ADDRESS_OVERLAPPED if it overlaps a registered range;
 * MC_ERR_INVALID_PARAMS for NULL or zero length, and for host memory that
 * is not mapped readable and writable in every page (peers write into it). */
MC_API mc_status mc_te_register(struct mc_te *te, void *addr, size_t length, const char *location,
				bool remote_accessible);
/* Peers may read the range but never write it: a remote write into it is
 * refused before a byte moves (the initiator's request fails), and a local
 * read into it (it as a request's destination) is MC_ERR_INVALID_PARAMS.
 * The pages need only be readable. */
#define MC_TE_REGISTER_READ_ONLY 0x1u
/* mc_te_register with flags (0 or MC_TE_REGISTER_READ_ONLY; any other bit is
 * MC_ERR_INVALID_PARAMS). */
MC_API mc_status mc_te_register_flags(struct mc_te *te, void *addr, size_t length,
				      const char *location, bool remote_accessible, unsigned flags);
/* Deregister the range that starts exactly at addr (MC_ERR_ADDRESS_NOT_REGISTERED otherwise).
 * Waits until no incoming request is touching it. */
MC_API mc_status mc_te_deregister(struct mc_te *te, void *addr);
/* Batch forms: all-or-nothing for register, best effort for deregister; one publish. */
MC_API mc_status mc_te_register_batch(struct mc_te *te, const struct mc_te_buffer *bufs, size_t n,
				      const char *location);
MC_API mc_status mc_te_deregister_batch(struct mc_te *te, void *const *addrs, size_t n);

/* Resolve a segment name to an id (cached).  The local name gives 0. */
MC_API mc_status mc_te_open_segment(struct mc_te *te, const char *name, mc_segment_id *id_out);
/* Same, but refetch the descriptor first. */
MC_API mc_status mc_te_reopen_segment(struct mc_te *te, const char *name, mc_segment_id *id_out);
MC_API mc_status mc_te_close_segment(struct mc_te *te, mc_segment_id id);
/* Refetch one (name) or every (NULL) cached descriptor. */
MC_API mc_status mc_te_sync_segment_cache(struct mc_te *te, const char *name);
/* Buffer #index of an opened segment's descriptor; MC_ERR_NOT_FOUND past the end. */
MC_API mc_status mc_te_segment_buffer(struct mc_te *te, mc_segment_id id, size_t index,
				      uint64_t *addr_out, uint64_t *length_out);

/* Batches. */
MC_API mc_status mc_te_batch_new(struct mc_te *te, size_t capacity, mc_batch_id *id_out);
MC_API mc_status mc_te_batch_free(struct mc_te *te, mc_batch_id id);
MC_API mc_status mc_te_batch_discard(struct mc_te *te, mc_batch_id id);
/* Submit n requests (MC_ERR_TOO_MANY_REQUESTS past capacity).  A request
 * that cannot start (unknown segment, bad range, a local range
 * [source, source+length) that does not lie inside one registered range:
 * MC_ERR_INVALID_PARAMS) fails the whole call before any of its requests
 * is started. */
MC_API mc_status mc_te_submit(struct mc_te *te, mc_batch_id id, const struct mc_xfer_req *reqs,
			      size_t n);
/* As mc_te_submit; when the batch completes, notify (name, msg) is sent to
 * the first request's target. */
MC_API mc_status mc_te_submit_with_notify(struct mc_te *te, mc_batch_id id,
					  const struct mc_xfer_req *reqs, size_t n,
					  const char *notify_name, const char *notify_msg);
MC_API mc_status mc_te_task_status(struct mc_te *te, mc_batch_id id, size_t task,
				   struct mc_xfer_status *status_out);
/* COMPLETED iff all tasks completed; FAILED as soon as one failed; else WAITING. */
MC_API mc_status mc_te_batch_status(struct mc_te *te, mc_batch_id id,
				    struct mc_xfer_status *status_out);
/* Block until every task is terminal or timeout_ms passes (MC_ERR_TIMEOUT;
 * < 0 = no limit).  Returns MC_OK when all completed, else the first error. */
MC_API mc_status mc_te_batch_wait(struct mc_te *te, mc_batch_id id, int64_t timeout_ms,
				  struct mc_xfer_status *status_out);
/* Submit, wait and free in one call. */
MC_API mc_status mc_te_transfer_sync(struct mc_te *te, const struct mc_xfer_req *reqs, size_t n,
				     int64_t timeout_ms);

/* Notifications. */
MC_API mc_status mc_te_notify_send(struct mc_te *te, mc_segment_id target, const char *name,
				   const char *msg);
MC_API mc_status mc_te_notify_send_by_name(struct mc_te *te, const char *segment_name,
					   const char *name, const char *msg);
/* Drain received notifications into a malloc'ed array (NULL, 0 when none). */
MC_API mc_status mc_te_notify_recv(struct mc_te *te, struct mc_te_notify **list_out,
				   size_t *count_out);
MC_API void mc_te_notify_free(struct mc_te_notify *list, size_t count);

/* Probe a peer's RPC listener: MC_OK if it answers.  Waits at most
 * MC_HANDSHAKE_CONNECT_TIMEOUT seconds for the connect and as long again for
 * the answer. */
MC_API mc_status mc_te_probe(struct mc_te *te, const char *segment_name);
/* The same within timeout_ms for the connect and for the answer (<= 0: as
 * mc_te_probe); MC_ERR_TIMEOUT (or the connect's error) past it.  For
 * failure detectors that must answer within their own deadline (mooncake.pg);
 * the segment's address may still be looked up in the metadata first. */
MC_API mc_status mc_te_probe_within(struct mc_te *te, const char *segment_name, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif

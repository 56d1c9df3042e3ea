/*
 * mooncake/transfer_engine_c.h - the Transfer Engine's C API as upstream
 * Mooncake spells it (docs/design.md, "Layers": src/api/), for programs written against
 * upstream: the same type names, field order, constants and function names,
 * so such a program builds against this header and links against
 * libmooncake.so unchanged.  New code should use mooncake/te.h, which has
 * one error type and typed handles.
 *
 * This header stands alone: it needs only <stddef.h> and <stdint.h>.
 *
 * Return conventions (upstream's, kept as they are):
 *  - most int-returning functions give 0 or a negative ERR_* code
 *    (-1 invalid argument, -2 too many requests, -3 address not registered,
 *    -4 batch busy, -6 device not found, -7 address overlapped, -101 DNS,
 *    -102 socket, -103 malformed JSON, -104 handshake rejected, -200 metadata,
 *    -201 endpoint, -202 context, -300 NUMA, -301 clock, -302 memory,
 *    -303 not implemented);
 *  - submitTransfer, submitTransferWithNotify, getTransferStatus and
 *    freeBatchID give a non-negative status code instead (0 OK,
 *    1 invalid argument, 2 too many requests, 3 address not registered,
 *    4 batch busy, 6 device not found, 7 address overlapped, 8 transport not
 *    installed, 101..104, 200..202, 300..302 as above, 999 not implemented);
 *  - openSegment gives a segment id >= 0 or -1; allocateBatchID gives
 *    INVALID_BATCH on failure; createTransferEngine gives NULL.
 *
 * Ownership: every string passed in is copied, so the caller may free it once
 * the call returns.  Registered memory stays the caller's and must stay
 * mapped until it is unregistered.  getNotifsFromEngine's result is the
 * caller's, to be released with freeNotifsMsgBuf.
 *
 * Threads: any function may be called from any thread, except that
 * destroyTransferEngine must not race with other calls on the same engine.
 */
#ifndef MOONCAKE_TRANSFER_ENGINE_C_H
#define MOONCAKE_TRANSFER_ENGINE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MC_API
#define MC_API __attribute__((visibility("default")))
#endif

/* Segment ids are 32-bit here, although the engine's are 64-bit: an id
 * that does not fit is reported as a failed open (-1). */
#define segment_handle_t int32_t
#define segment_id_t	 int32_t
#define batch_id_t	 uint64_t

#define LOCAL_SEGMENT	 (0)
#define INVALID_BATCH	 UINT64_MAX

/* READ copies remote -> local source; WRITE copies local source -> remote. */
#define OPCODE_READ  (0)
#define OPCODE_WRITE (1)

/* Task states reported in transfer_status.status. */
#define STATUS_WAITING	 (0)
#define STATUS_PENDING	 (1)
#define STATUS_INVALID	 (2)
#define STATUS_CANCELED	 (3)
#define STATUS_CANNELED	 STATUS_CANCELED /* the spelling some upstream code uses */
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT	 (5)
#define STATUS_FAILED	 (6)

/* One request; target_offset is the absolute address in the target process. */
struct transfer_request {
	int opcode;		/* OPCODE_READ or OPCODE_WRITE */
	void *source;		/* local buffer, registered with this engine */
	segment_id_t target_id; /* from openSegment, or LOCAL_SEGMENT */
	uint64_t target_offset;
	uint64_t length;
};
typedef struct transfer_request transfer_request_t;

struct transfer_status {
	int status;		    /* STATUS_* */
	uint64_t transferred_bytes; /* a lower bound while the task runs */
};
typedef struct transfer_status transfer_status_t;

struct notify_msg {
	char *name;
	char *msg;
};
typedef struct notify_msg notify_msg_t;

/* Kept for source compatibility; no function takes or returns it. */
struct segment_desc {
	int type;
	union {
		struct {
			void *addr;
			uint64_t size;
			const char *location;
		} rdma;
		struct {
			const char *file_path;
			const char *subsystem_name;
			const char *proto;
			const char *ip;
			uint64_t port;
		} nvmeof;
	} desc_;
};
typedef struct segment_desc segment_desc_t;

struct buffer_entry {
	void *addr;
	size_t length;
};
typedef struct buffer_entry buffer_entry_t;

struct nic_load_stat {
	char device_name[64];
	uint64_t inflight_bytes;
	double ewma_bandwidth_bps;
};
typedef struct nic_load_stat nic_load_stat_t;

typedef void *transfer_engine_t;
typedef void *transport_t;

/*
 * Create an engine.  metadata_conn_string: "P2PHANDSHAKE" (no metadata
 * service; the engine's segment name becomes "<host>:<rpc port>", which
 * getLocalIpAndPort reports), "http://host:port/path", or "mem://<name>" for
 * an in-process service.  ip_or_host_name, when non-empty, is the address
 * advertised to peers.  rpc_port is used only when MC_LEGACY_RPC_PORT_BINDING
 * is set; otherwise a free port is picked.  auto_discover is accepted and
 * ignored: TCP is always available.  NULL on failure (never aborts).
 */
MC_API transfer_engine_t createTransferEngine(const char *metadata_conn_string,
					      const char *local_server_name,
					      const char *ip_or_host_name, uint64_t rpc_port,
					      int auto_discover);
/* Stops the engine and withdraws what it published.  NULL is a no-op. */
MC_API void destroyTransferEngine(transfer_engine_t engine);

/* Nothing to rediscover without RDMA or GPUs: 0. */
MC_API int discoverTopology(transfer_engine_t engine);
/* "<host>:<rpc port>" into buf_out, truncated as snprintf does: 0. */
MC_API int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len);

/* "tcp" or "rdma" (which falls back to TCP without an RDMA device) give a
 * handle that stays valid for the engine's life; the same one on every call.
 * args[0], a NIC priority matrix, is ignored.  Other protocols give NULL. */
MC_API transport_t installTransport(transfer_engine_t engine, const char *proto, void **args);
/* No-op: 0. */
MC_API int uninstallTransport(transfer_engine_t engine, const char *proto);

/* Resolve a segment name (leading '/' ignored; the engine's own name gives
 * LOCAL_SEGMENT); cached.  -1 on failure. */
MC_API segment_handle_t openSegment(transfer_engine_t engine, const char *segment_name);
/* Same, but refetch the segment's descriptor first. */
MC_API segment_handle_t openSegmentNoCache(transfer_engine_t engine, const char *segment_name);
/* No-op (ids stay valid for the engine's life): 0. */
MC_API int closeSegment(transfer_engine_t engine, segment_handle_t segment_id);
/* No-op without EFA: 0. */
MC_API int warmupEfaSegment(transfer_engine_t engine, const char *segment_name);
/* Forget a cached descriptor; the engine refetches stale ones by itself, so
 * this only checks its argument: 0, or -1 for a NULL or empty name. */
MC_API int removeLocalSegment(transfer_engine_t engine, const char *segment_name);
/* Refetch every cached descriptor: 0 (a peer that cannot be reached keeps its
 * old descriptor). */
MC_API int syncSegmentCache(transfer_engine_t engine);

/* Register [addr, addr + length) and publish it.  location is "cpu:N" or "*".
 * 0, -1 (NULL address, zero length), -7 (overlaps a registered range). */
MC_API int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
			       const char *location, int remote_accessible);
/* Unregister the range starting exactly at addr: 0, or -3 if there is none. */
MC_API int unregisterLocalMemory(transfer_engine_t engine, void *addr);
/* All or nothing; one publish. */
MC_API int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t *buffer_list,
				    size_t buffer_len, const char *location);
/* Best effort; returns the first error. */
MC_API int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list, size_t addr_len);

/* A batch that holds batch_size requests in total; INVALID_BATCH on failure. */
MC_API batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);
/* Start count requests.  Status code: 0, 1 (bad request, unknown target id
 * or batch), 2 (batch capacity exceeded), 8 (target speaks a transport this
 * engine lacks).  Nothing starts when the call fails. */
MC_API int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
			  struct transfer_request *entries, size_t count);
/* As submitTransfer; once a status poll sees the whole batch completed,
 * notify_msg is sent to entries[0]'s target.  count 0 gives 1. */
MC_API int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
				    struct transfer_request *entries, size_t count,
				    notify_msg_t notify_msg);
/* Poll task task_id (submission order).  Status code 0, or 1 for an unknown
 * batch or a task id out of range; *status is written only on 0. */
MC_API int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id,
			     struct transfer_status *status);
/* Status code 0, 4 while a task is still in flight, 1 for an unknown batch. */
MC_API int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

/* Drain the notifications received so far: a malloc'ed array of *size
 * entries whose strings are malloc'ed too, or NULL (and *size 0) if none. */
MC_API notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size);
/* Free what getNotifsFromEngine returned: 0. */
MC_API int freeNotifsMsgBuf(notify_msg_t *msg, int size);
/* Send a notification now to an opened segment: 0 or a negative ERR_*. */
MC_API int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id, notify_msg_t notify_msg);

/* In: *count = capacity of stats; out: *count = NICs reported (none: TCP only).
 * 0, or -1 for NULL arguments. */
MC_API int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats, int *count);
/* On SIGINT or SIGTERM, and at exit(), destroy this engine (withdrawing what
 * it published); a signal then ends the process with status 128 + signo. */
MC_API void enableGracefulShutdown(transfer_engine_t engine);
/* RDMA links, as text or JSON: none here, so "" or "[]".  0, -1 on NULL. */
MC_API int showLinks(transfer_engine_t engine, char *buf, size_t len, int json);

#ifdef __cplusplus
}
#endif
#endif

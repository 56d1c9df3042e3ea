/*
 * mooncake/status.h - the one status type of the whole project.
 *
 * Every fallible function returns an mc_status: MC_OK (0) on success,
 * MC_INPROGRESS (1) when an asynchronous operation was accepted, and a
 * negative value on failure.  The numbers are pinned forever.  Values that
 * Mooncake Store users see from Python keep upstream's numbers (-1, -10,
 * -100.. segment, -600 params, -700.. object/replica, -800 transfer,
 * -900 RPC, -1000 HA, -1100 file); transfer-engine and general errors live
 * in the -2000 range, which upstream does not use.  The table below is the
 * single source for the enum, mc_status_name() and mc_strerror().
 */
#ifndef MOONCAKE_STATUS_H
#define MOONCAKE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MC_API
#define MC_API __attribute__((visibility("default")))
#endif

/* X(name, value, description) */
#define MC_STATUS_MAP(X)                                                             \
	X(OK, 0, "success")                                                          \
	X(INPROGRESS, 1, "operation in progress")                                    \
	X(ERR_INTERNAL, -1, "internal error")                                        \
	X(ERR_BUFFER_OVERFLOW, -10, "buffer too small")                              \
	X(ERR_SHARD_INDEX_OUT_OF_RANGE, -100, "shard index out of range")            \
	X(ERR_SEGMENT_NOT_FOUND, -101, "segment not found")                          \
	X(ERR_SEGMENT_ALREADY_EXISTS, -102, "segment already exists")                \
	X(ERR_CLIENT_NOT_FOUND, -103, "client not found")                            \
	X(ERR_NO_AVAILABLE_HANDLE, -200, "no space available")                       \
	X(ERR_INVALID_VERSION, -300, "version mismatch")                             \
	X(ERR_INVALID_KEY, -400, "invalid key")                                      \
	X(ERR_WRITE_FAIL, -500, "write failed")                                      \
	X(ERR_INVALID_PARAMS, -600, "invalid argument")                              \
	X(ERR_ILLEGAL_CLIENT, -601, "illegal client")                                \
	X(ERR_INVALID_WRITE, -700, "invalid write")                                  \
	X(ERR_INVALID_READ, -701, "invalid read")                                    \
	X(ERR_INVALID_REPLICA, -702, "invalid replica")                              \
	X(ERR_REPLICA_IS_NOT_READY, -703, "replica is not ready")                    \
	X(ERR_OBJECT_NOT_FOUND, -704, "object not found")                            \
	X(ERR_OBJECT_ALREADY_EXISTS, -705, "object already exists")                  \
	X(ERR_OBJECT_HAS_LEASE, -706, "object has a lease")                          \
	X(ERR_LEASE_EXPIRED, -707, "lease expired")                                  \
	X(ERR_OBJECT_HAS_REPLICATION_TASK, -708, "object has a replication task")    \
	X(ERR_OBJECT_NO_REPLICATION_TASK, -709, "object has no replication task")    \
	X(ERR_REPLICA_NOT_FOUND, -710, "replica not found")                          \
	X(ERR_REPLICA_ALREADY_EXISTS, -711, "replica already exists")                \
	X(ERR_REPLICA_IS_GONE, -712, "replica is gone")                              \
	X(ERR_REPLICA_NOT_IN_LOCAL_MEMORY, -713, "replica not in local memory")      \
	X(ERR_OBJECT_REPLICA_BUSY, -714, "object replica busy")                      \
	X(ERR_TRANSFER_FAIL, -800, "transfer failed")                                \
	X(ERR_CHECKSUM_MISMATCH, -801, "checksum mismatch")                          \
	X(ERR_RPC_FAIL, -900, "rpc failed")                                          \
	X(ERR_RPC_TIMEOUT, -901, "rpc timed out")                                    \
	X(ERR_ETCD_OPERATION_ERROR, -1000, "etcd operation failed")                  \
	X(ERR_ETCD_KEY_NOT_EXIST, -1001, "etcd key does not exist")                  \
	X(ERR_ETCD_TRANSACTION_FAIL, -1002, "etcd transaction failed")               \
	X(ERR_ETCD_CTX_CANCELLED, -1003, "etcd context cancelled")                   \
	X(ERR_UNAVAILABLE_IN_CURRENT_STATUS, -1010, "unavailable in current status") \
	X(ERR_UNAVAILABLE_IN_CURRENT_MODE, -1011, "unavailable in current mode")     \
	X(ERR_NOT_SUPPORTED, -1012, "not supported")                                 \
	X(ERR_FILE_NOT_FOUND, -1100, "file not found")                               \
	X(ERR_FILE_OPEN_FAIL, -1101, "file open failed")                             \
	X(ERR_FILE_READ_FAIL, -1102, "file read failed")                             \
	X(ERR_FILE_WRITE_FAIL, -1103, "file write failed")                           \
	X(ERR_FILE_LOCK_FAIL, -1105, "file lock failed")                             \
	X(ERR_KEYS_ULTRA_LIMIT, -1203, "offload queue full")                         \
	X(ERR_UNABLE_OFFLOAD, -1300, "offload not enabled on the master")            \
	X(ERR_TASK_NOT_FOUND, -1400, "unknown or pruned task")                       \
	X(ERR_TASK_PENDING_LIMIT_EXCEEDED, -1401, "task queue full")                 \
	X(ERR_JOB_NOT_FOUND, -1402, "unknown drain job")                             \
	X(ERR_TOO_MANY_REQUESTS, -2001, "too many requests for the batch")           \
	X(ERR_ADDRESS_NOT_REGISTERED, -2002, "address not registered")               \
	X(ERR_BATCH_BUSY, -2003, "batch has unfinished tasks")                       \
	X(ERR_DEVICE_NOT_FOUND, -2004, "device not found")                           \
	X(ERR_ADDRESS_OVERLAPPED, -2005, "address range overlaps a registered one")  \
	X(ERR_TRANSPORT_UNSUPPORTED, -2006, "transport not installed")               \
	X(ERR_DNS, -2007, "name resolution failed")                                  \
	X(ERR_SOCKET, -2008, "socket error")                                         \
	X(ERR_MALFORMED_JSON, -2009, "malformed json")                               \
	X(ERR_REJECT_HANDSHAKE, -2010, "handshake rejected")                         \
	X(ERR_METADATA, -2011, "metadata service error")                             \
	X(ERR_ENDPOINT, -2012, "endpoint error")                                     \
	X(ERR_CONTEXT, -2013, "device context error")                                \
	X(ERR_BATCH_NOT_FOUND, -2014, "unknown batch id")                            \
	X(ERR_TIMEOUT, -2015, "timed out")                                           \
	X(ERR_REMOTE_REJECTED, -2016, "remote rejected the address range")           \
	X(ERR_CONN_CLOSED, -2017, "connection closed by peer")                       \
	X(ERR_CONN_REFUSED, -2018, "connection refused")                             \
	X(ERR_PROTOCOL, -2019, "protocol violation")                                 \
	X(ERR_NOMEM, -2020, "out of memory")                                         \
	X(ERR_EXISTS, -2021, "already exists")                                       \
	X(ERR_NOT_FOUND, -2022, "not found")                                         \
	X(ERR_IO, -2023, "i/o error")                                                \
	X(ERR_CANCELED, -2024, "canceled")                                           \
	X(ERR_SHUTDOWN, -2025, "shutting down")                                      \
	X(ERR_PERMISSION, -2026, "permission denied")                                \
	X(ERR_TOO_LARGE, -2027, "message too large")                                 \
	X(ERR_AGAIN, -2028, "resource temporarily unavailable")

enum mc_status {
#define MC__STATUS_ENUM(name, value, desc) MC_##name = (value),
	MC_STATUS_MAP(MC__STATUS_ENUM)
#undef MC__STATUS_ENUM
};
typedef enum mc_status mc_status;

/* Human-readable description; never NULL ("unknown status" for unknown values). */
MC_API const char *mc_strerror(mc_status status);
/* Symbolic name without the MC_ prefix ("ERR_TIMEOUT"); never NULL. */
MC_API const char *mc_status_name(mc_status status);

#ifdef __cplusplus
}
#endif
#endif

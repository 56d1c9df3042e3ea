/*
 * mooncake/store.h - the Mooncake Store client's native C API.
 *
 * A client (struct mc_store) talks to one master over the store protocol
 * (docs/protocol.md), contributes a global segment of memory that other
 * clients write replicas into and read them from through the Transfer
 * Engine.  The segment is an anonymous mapping touched lazily, so a large
 * segment costs memory only as it fills; huge pages are used where
 * available.  Nothing stages through a local buffer: the copy-based calls
 * move the caller's memory through the engine as the zero-copy ones do.
 *
 * Semantics are upstream Mooncake's (docs/design.md, "Mooncake Store"): put is
 * insert-if-absent and returns MC_OK for a key that already exists;
 * readers see only complete objects; a read that outlives its lease fails
 * with MC_ERR_LEASE_EXPIRED; keys are scoped by the client's tenant.
 *
 * Threads: every call may be made from any thread at once, except
 * mc_store_setup, mc_store_close and mc_store_free, which must not race
 * with other calls on the same client.
 *
 * Errors: MC_OK (0) or a negative mc_status (the store's numbers, e.g.
 * MC_ERR_OBJECT_NOT_FOUND = -704); mc_last_error() names the cause.
 * Size-returning calls return the size (>= 0) or a negative status.
 */
#ifndef MOONCAKE_STORE_H
#define MOONCAKE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_store;
struct mc_te;

struct mc_store_params {
	/* "host" or "host:port": this client's segment name.  Without a port
	 * one is chosen in [MC_STORE_CLIENT_MIN_PORT, MC_STORE_CLIENT_MAX_PORT]. */
	const char *local_hostname;
	/* Transfer Engine metadata: "http://h:p/metadata", "etcd://...",
	 * "redis://...", "P2PHANDSHAKE". */
	const char *metadata_server;
	uint64_t global_segment_size;	/* bytes contributed; 0 = pure client */
	uint64_t local_buffer_size;	/* accepted as upstream (<= 1 TiB); unused: no staging */
	const char *protocol;		/* "tcp" (NULL = "tcp") */
	const char *rdma_devices;	/* "" or NULL = auto */
	const char *master_server_addr; /* "host:port" (NULL = 127.0.0.1:50051) */
	const char *tenant_id;		/* NULL or "" = "default" */
	/* An existing engine to share (not freed by the store), or NULL to
	 * create one. */
	struct mc_te *engine;
	/* The SSD tier (spec store.md 5): keep copies of this client's objects
	 * in ssd_offload_path (NULL or "": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)
	 * when the master offloads (its --enable_offload), and serve them to
	 * readers.  Reading other clients' disk copies needs no setting. */
	bool enable_ssd_offload;
	const char *ssd_offload_path;
	/* The client HTTP server (/health, /metrics, /metrics/summary) on
	 * http_port (0: a free one, mc_store_http_port says which) of the
	 * host of local_hostname; upstream's enable_client_http_server. */
	bool enable_http_server;
	uint16_t http_port;
	/* Integrity (docs/security.md): puts record an XXH3-64 checksum of
	 * each object and whole-object reads check it, reading the next
	 * replica on a mismatch and failing with MC_ERR_CHECKSUM_MISMATCH when
	 * none is good.  On unless this is set or MC_STORE_VERIFY=0. */
	bool disable_verify;
};

/* Placement and pinning of a put (upstream's ReplicateConfig). */
struct mc_store_config {
	uint32_t replica_num; /* 0 is taken as 1 */
	bool with_soft_pin;
	uint64_t soft_pin_ttl_ms; /* 0 = the master's default */
	bool with_hard_pin;
	bool prefer_alloc_in_same_node;
	const char *preferred_segment;	       /* NULL or "": none */
	const char *const *preferred_segments; /* tried in order */
	size_t n_preferred_segments;
	const char *group_id; /* NULL or "": ungrouped */
	/* One group id per key (NULL or "": that key ungrouped), overriding
	 * group_id when n_group_ids is not 0; n_group_ids must then equal the
	 * number of keys of the call (1 for a single put), else
	 * MC_ERR_INVALID_PARAMS ("bad group_ids count", as upstream). */
	const char *const *group_ids;
	size_t n_group_ids;
};

/* Where one replica lives (for get_replica_desc and tests). */
struct mc_store_replica_desc {
	int status; /* enum mc_store_replica_status of store/proto.h: 3 = COMPLETE */
	int type;   /* 0 = memory */
	uint64_t size;
	uint64_t address;
	char segment_name[256];
	char transport_endpoint[256];
	char protocol[16];
};

MC_API mc_status mc_store_new(struct mc_store **out);
/* Unmounts and closes if still set up, then frees.  NULL is a no-op. */
MC_API void mc_store_free(struct mc_store *s);

/*
 * Connect to the master (ServiceReady; a foreign protocol major version is
 * MC_ERR_INVALID_VERSION), create or attach the engine, map and register
 * the global segment and mount it, then
 * start the heartbeat.  MC_ERR_INVALID_PARAMS for a bad parameter or a
 * second setup without close.
 */
MC_API mc_status mc_store_setup(struct mc_store *s, const struct mc_store_params *p);
/*
 * A dummy client (spec store.md 1.13; docs/design.md, "Dummy clients"):
 * attach to the mooncake_client daemon of this host whose --port is the
 * port of server_address ("host:port", default port 50052; host must be
 * this machine), over @mooncake_client_<port>.sock, with a shared local
 * buffer of local_buffer_size bytes for the copy-based calls
 * (mem_pool_size is accepted and unused, as upstream).  Afterwards the
 * client's calls run in the daemon: put/get and their parts, batch and
 * upsert forms, the zero-copy calls and their batch and multi-buffer forms on
 * memory from mc_store_shm_alloc registered whole with
 * mc_store_register_buffer, is_exist, get_size, remove and its batch,
 * regex and all forms, the session and ranged calls, get_into_ranges,
 * replica descriptors and replica clear, copy/move/query tasks, the
 * segment mount and unmount calls (which act on the daemon's segments),
 * health_check (2: the daemon is unreachable) and close.  Only
 * mc_store_segment_info stays MC_ERR_NOT_SUPPORTED (the daemon's memory is
 * not the dummy's to describe).  Calls
 * fail with MC_ERR_RPC_FAIL while the daemon is down; the dummy reattaches
 * by itself once a second.  MC_ERR_RPC_FAIL when no daemon serves the
 * port, MC_ERR_INVALID_PARAMS for a bad or remote address or a second
 * setup.
 */
MC_API mc_status mc_store_setup_dummy(struct mc_store *s, uint64_t mem_pool_size,
				      uint64_t local_buffer_size, const char *server_address);
/* Shared memory a dummy client can register (upstream's
 * MooncakeHostMemAllocator): size bytes of a sealed memfd mapping, owned by
 * the process until mc_store_shm_free. */
MC_API mc_status mc_store_shm_alloc(size_t size, void **out);
/* MC_ERR_INVALID_PARAMS for an address mc_store_shm_alloc did not give. */
MC_API mc_status mc_store_shm_free(void *addr);
/* Upstream's alloc_from_mem_pool: on a dummy client, size bytes of shared
 * memory (mc_store_shm_alloc) to register and use zero-copy, freed with
 * mc_store_shm_free; NULL (and MC_OK) on any other client, as upstream. */
MC_API mc_status mc_store_alloc_from_mem_pool(struct mc_store *s, size_t size, void **out);
/* Unmount, deregister and unmap everything; the client can set up again.
 * MC_OK also when not set up. */
MC_API mc_status mc_store_close(struct mc_store *s);
/* 0 healthy, 1 not set up or closed, 2 the last ping failed. */
MC_API int mc_store_health_check(struct mc_store *s);
/* "host:port", the segment name; "" before setup. */
MC_API const char *mc_store_hostname(const struct mc_store *s);
/* The engine in use (NULL before setup). */
MC_API struct mc_te *mc_store_engine(const struct mc_store *s);
/* Objects this client read from another client's disk (a LOCAL_DISK
 * replica, through the owner's offload RPC) since setup. */
MC_API uint64_t mc_store_offload_rpc_read_count(struct mc_store *s);
/* The client HTTP server's port, 0 when it does not run. */
MC_API uint16_t mc_store_http_port(const struct mc_store *s);

/* The global segment's memory: what backs it and how much of it is faulted
 * in ahead of use (MC_STORE_USE_HUGEPAGE, MC_STORE_PREFAULT; docs/config.md). */
struct mc_store_segment_info {
	uint64_t size;	     /* bytes mapped (0: no segment) */
	uint64_t populated;  /* bytes pre-faulted so far */
	uint64_t huge_bytes; /* bytes backed by huge pages now (explicit or transparent) */
	char pages[16];	     /* "hugetlb 2MB", "hugetlb 1GB", "thp" or "4k" */
	char prefault[16];   /* "off", "mount" or "background" */
	bool prefault_done;  /* populated all it will */
};
/* MC_OK, or MC_ERR_INVALID_PARAMS before setup.  Reads /proc/self/smaps
 * for huge_bytes (milliseconds): not for a hot path. */
MC_API mc_status mc_store_segment_info(struct mc_store *s, struct mc_store_segment_info *out);

/* ---- copy-based calls (upstream's names; any host memory, sent as it is) ---- */

/* config NULL = defaults; len 0 is MC_ERR_INVALID_PARAMS.  Upstream stages
 * the value through its local buffer (-600 when it does not fit); this
 * library sends it from value directly, whatever local_buffer_size is. */
MC_API mc_status mc_store_put(struct mc_store *s, const char *key, const void *value, size_t len,
			      const struct mc_store_config *config);
/* One object from several parts, concatenated. */
MC_API mc_status mc_store_put_parts(struct mc_store *s, const char *key, const void *const *parts,
				    const size_t *lens, size_t nparts,
				    const struct mc_store_config *config);
/* Insert or overwrite. */
MC_API mc_status mc_store_upsert(struct mc_store *s, const char *key, const void *value, size_t len,
				 const struct mc_store_config *config);
/* Insert or overwrite one object from several parts, each sent from where
 * it lies, never joined first. */
MC_API mc_status mc_store_upsert_parts(struct mc_store *s, const char *key,
				       const void *const *parts, const size_t *lens, size_t nparts,
				       const struct mc_store_config *config);
/* Per-key statuses in results (may be NULL); returns MC_OK if every key
 * succeeded, else the first failure. */
MC_API mc_status mc_store_put_batch(struct mc_store *s, const char *const *keys,
				    const void *const *values, const size_t *lens, size_t n,
				    const struct mc_store_config *config, mc_status *results);
/* As mc_store_put_batch, but insert or overwrite: one BatchUpsertStart, one
 * engine batch for every key, one BatchUpsertEnd. */
MC_API mc_status mc_store_upsert_batch(struct mc_store *s, const char *const *keys,
				       const void *const *values, const size_t *lens, size_t n,
				       const struct mc_store_config *config, mc_status *results);
/* Read the object into a malloc'ed buffer (*value_out, free with free()).
 * Returns the size or a negative status. */
MC_API int64_t mc_store_get(struct mc_store *s, const char *key, void **value_out);
/*
 * Read the object into memory the caller allocates once its size is known:
 * alloc(ctx, size) returns size writable bytes of host memory, or NULL
 * (the call then fails with MC_ERR_NOMEM).  Returns the size or a negative
 * status; on failure what alloc returned, if it was called, is still the
 * caller's to release.  Lets a binding read straight into its own object
 * (Python's bytes) instead of copying out of a malloc'ed one.
 */
typedef void *(*mc_store_alloc_fn)(void *ctx, size_t size);
MC_API int64_t mc_store_get_alloc(struct mc_store *s, const char *key, mc_store_alloc_fn alloc,
				  void *ctx);
/*
 * Read n objects with one BatchGetReplicaList and one engine batch.
 * values_out[i] is a malloc'ed copy of object i (free with free()) when
 * results[i] (its size) is >= 0, else NULL and results[i] is a negative
 * status.  Returns MC_OK if every key was read, else the first failure.
 */
MC_API mc_status mc_store_batch_get(struct mc_store *s, const char *const *keys, size_t n,
				    void **values_out, int64_t *results);
/*
 * mc_store_batch_get into memory the caller allocates: alloc(ctx, i, size)
 * returns size writable bytes of host memory for object i once its size is
 * known, or NULL (results[i] is then MC_ERR_NOMEM).  It is called at most
 * once per key, from the calling thread, before any byte moves; whatever it
 * returned is the caller's, whether or not that object's read succeeded
 * (results[i] >= 0: its size; < 0: its status).  Returns MC_OK if every key
 * was read, else the first failure.
 */
typedef void *(*mc_store_batch_alloc_fn)(void *ctx, size_t index, size_t size);
MC_API mc_status mc_store_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
					  mc_store_batch_alloc_fn alloc, void *ctx,
					  int64_t *results);

/* ---- zero-copy calls (buffers registered with mc_store_register_buffer) ---- */

/*
 * Every buffer a zero-copy call takes, [buf, buf+len) (cap for the reads),
 * must lie inside one registered buffer (or the client's own segment);
 * otherwise that key fails with MC_ERR_INVALID_PARAMS before the master is
 * asked anything and before any byte moves, so a wrong pointer or a size
 * past the registered buffer is refused rather than read or written.  The
 * ranged and session calls check their buffers the same way.
 * register_buffer refuses (MC_ERR_INVALID_PARAMS) host memory that is not
 * mapped readable and writable in every page.
 */
MC_API mc_status mc_store_register_buffer(struct mc_store *s, void *addr, size_t len);
/* A buffer the store only reads: puts take their bytes from it, a get into
 * it is MC_ERR_INVALID_PARAMS, and its pages need only be readable. */
#define MC_STORE_BUFFER_READ_ONLY 0x1u
/* mc_store_register_buffer with flags (0 or MC_STORE_BUFFER_READ_ONLY). */
MC_API mc_status mc_store_register_buffer_flags(struct mc_store *s, void *addr, size_t len,
						unsigned flags);
/* MC_OK when [buf, buf+len) lies inside one registered buffer (or len is
 * 0), else MC_ERR_INVALID_PARAMS: the check every zero-copy call makes,
 * for callers that read a buffer before handing it over. */
MC_API mc_status mc_store_check_buffer(struct mc_store *s, const void *buf, size_t len);
MC_API mc_status mc_store_unregister_buffer(struct mc_store *s, void *addr);
/* len 0 is a no-op success, as upstream. */
MC_API mc_status mc_store_put_from(struct mc_store *s, const char *key, const void *buf, size_t len,
				   const struct mc_store_config *config);
MC_API mc_status mc_store_upsert_from(struct mc_store *s, const char *key, const void *buf,
				      size_t len, const struct mc_store_config *config);
/* cap is the buffer's capacity; an object larger than cap is
 * MC_ERR_INVALID_PARAMS.  Returns the object size or a negative status. */
MC_API int64_t mc_store_get_into(struct mc_store *s, const char *key, void *buf, size_t cap);
MC_API mc_status mc_store_batch_put_from(struct mc_store *s, const char *const *keys,
					 void *const *bufs, const size_t *lens, size_t n,
					 const struct mc_store_config *config, mc_status *results);
/* As mc_store_batch_put_from, but insert or overwrite. */
MC_API mc_status mc_store_batch_upsert_from(struct mc_store *s, const char *const *keys,
					    void *const *bufs, const size_t *lens, size_t n,
					    const struct mc_store_config *config,
					    mc_status *results);
/* results[i]: the size read or a negative status. */
MC_API mc_status mc_store_batch_get_into(struct mc_store *s, const char *const *keys,
					 void *const *bufs, const size_t *caps, size_t n,
					 int64_t *results);
/*
 * Scatter-gather: object i is assembled from (or scattered into) the
 * nbufs[i] buffers bufs[i][0..], of lengths lens[i][0..].
 */
MC_API mc_status mc_store_batch_put_from_multi_buffers(struct mc_store *s, const char *const *keys,
						       void *const *const *bufs,
						       const size_t *const *lens,
						       const size_t *nbufs, size_t n,
						       const struct mc_store_config *config,
						       mc_status *results);
MC_API mc_status mc_store_batch_get_into_multi_buffers(struct mc_store *s, const char *const *keys,
						       void *const *const *bufs,
						       const size_t *const *lens,
						       const size_t *nbufs, size_t n,
						       int64_t *results);

/* One byte range of an object and where it goes. */
struct mc_store_range {
	uint64_t dst_offset; /* from the start of the destination buffer */
	uint64_t src_offset; /* from the start of the object */
	uint64_t length;
};

/* The ranges of one object read into one destination buffer. */
struct mc_store_range_read {
	const char *key;
	void *buf; /* destination: inside memory registered with this client's engine */
	const struct mc_store_range *ranges;
	size_t nranges;
	int64_t *results; /* nranges entries: bytes read or a negative status */
};

/*
 * Partial reads (upstream's get_into_ranges): for every read, its byte
 * ranges of its key's memory replica land in its buffer.  One
 * BatchGetReplicaList and one engine batch carry all reads; each read is
 * lease-checked as a whole.  A range must lie inside the object and, at
 * buf + dst_offset, inside the one registered region that holds buf, else
 * its result is MC_ERR_INVALID_PARAMS and nothing is written for it; a
 * failure of the key (not found, no memory replica, lease expired) is the
 * result of all its ranges.  No checksum is verified.  Returns MC_OK if
 * every range was read, else the first failure.
 */
MC_API mc_status mc_store_get_into_ranges(struct mc_store *s,
					  const struct mc_store_range_read *reads, size_t n);

/*
 * ---- sessions: ranged transfers without master round trips ----
 *
 * For layer-wise KV saving and loading (docs/python.md, "The store calls
 * and the C API behind them", has the Python side).  A get session
 * pins, per key, one memory replica and the lease that BatchGetReplicaList
 * granted; ranged reads then go straight to that replica, checked against
 * the lease locally (MC_ERR_LEASE_EXPIRED once it ran out: start a new
 * session).  A put session is a BatchPutStart whose replicas ranged writes
 * fill piece by piece; the object becomes visible at session end
 * (BatchPutEnd) or is dropped by revoke (BatchPutRevoke).  Sessions belong
 * to the client (any thread may use them) and are dropped by close.  A
 * ranged call for a key without a session gives MC_ERR_INVALID_PARAMS for
 * that key; a range outside the object too.  The range lists are
 * bufs[i][0..nbufs[i]), lens[i][..] and offsets[i][..] (the object offset
 * each buffer reads from or writes to); results[i] is the number of bytes
 * moved for key i or a negative status.  Calls return MC_OK when every key
 * succeeded, else the first failure.
 */

/* Start (or renew) get sessions: one BatchGetReplicaList for all keys. */
MC_API mc_status mc_store_batch_get_session_start(struct mc_store *s, const char *const *keys,
						  size_t n, mc_status *results);
MC_API mc_status mc_store_batch_get_into_multi_buffer_ranges(
	struct mc_store *s, const char *const *keys, void *const *const *bufs,
	const size_t *const *lens, const uint64_t *const *src_offsets, const size_t *nbufs,
	size_t n, int64_t *results);
/* Drop the get sessions of keys (keys without one are ignored). */
MC_API mc_status mc_store_batch_get_session_end(struct mc_store *s, const char *const *keys,
						size_t n);
/* BatchPutStart for objects of sizes[i] bytes.  A key that exists already
 * is MC_ERR_OBJECT_ALREADY_EXISTS (no session); one with a put session of
 * this client open is MC_ERR_INVALID_PARAMS. */
MC_API mc_status mc_store_batch_put_session_start(struct mc_store *s, const char *const *keys,
						  const uint64_t *sizes, size_t n,
						  const struct mc_store_config *config,
						  mc_status *results);
MC_API mc_status mc_store_batch_put_from_multi_buffer_ranges(
	struct mc_store *s, const char *const *keys, void *const *const *bufs,
	const size_t *const *lens, const uint64_t *const *dst_offsets, const size_t *nbufs,
	size_t n, int64_t *results);
/* Wait for the keys' ranged writes in flight, then BatchPutEnd: the
 * objects become readable.  The session ends unless the master could not
 * be asked at all (then end or revoke may be called again). */
MC_API mc_status mc_store_batch_put_session_end(struct mc_store *s, const char *const *keys,
						size_t n, mc_status *results);
/* As end, but BatchPutRevoke: the objects and their space are dropped. */
MC_API mc_status mc_store_batch_put_session_revoke(struct mc_store *s, const char *const *keys,
						   size_t n, mc_status *results);

/* ---- metadata calls ---- */

/* 1 exists, 0 absent, or a negative status.  Grants a read lease. */
MC_API int mc_store_is_exist(struct mc_store *s, const char *key);
/* results[i]: 1, 0 or a negative status. */
MC_API mc_status mc_store_batch_is_exist(struct mc_store *s, const char *const *keys, size_t n,
					 int *results);
/* Object size or a negative status (takes a lease, as upstream). */
MC_API int64_t mc_store_get_size(struct mc_store *s, const char *key);
MC_API mc_status mc_store_remove(struct mc_store *s, const char *key, bool force);
/* Count removed, or a negative status (MC_ERR_INVALID_PARAMS: a bad
 * regex, or one the master refused as too costly, nothing removed then;
 * mc_last_error says which). */
MC_API int64_t mc_store_remove_by_regex(struct mc_store *s, const char *pattern, bool force);
MC_API int64_t mc_store_remove_all(struct mc_store *s, bool force);
MC_API mc_status mc_store_batch_remove(struct mc_store *s, const char *const *keys, size_t n,
				       bool force, mc_status *results);
/*
 * BatchReplicaClear: of keys, clear the objects this client wrote (its last
 * put or upsert) whose lease has expired and that are not being written;
 * other keys are skipped, not errors.  segment_name NULL or "": remove
 * whole objects; else drop only their replicas on that segment (an object
 * left with none is removed).  cleared[i] (may be NULL) tells whether key
 * i was cleared.  Returns the number cleared or a negative status.
 */
MC_API int64_t mc_store_batch_replica_clear(struct mc_store *s, const char *const *keys, size_t n,
					    const char *segment_name, bool *cleared);
/* Readable replicas of key (grants a lease).  Fills up to cap entries;
 * returns the number of replicas (may exceed cap) or a negative status. */
MC_API int64_t mc_store_get_replica_desc(struct mc_store *s, const char *key,
					 struct mc_store_replica_desc *out, size_t cap);

/* ---- copy and move tasks, segment unmount (spec store.md 1.14, 9.3) ---- */

/* A task's id (upstream's UUID: Python sees (first, second)). */
struct mc_store_task_uuid {
	uint64_t first;
	uint64_t second;
};

/* Upstream's QueryTaskResponse. */
struct mc_store_task_state {
	struct mc_store_task_uuid id;
	int type;   /* 0 REPLICA_COPY, 1 REPLICA_MOVE */
	int status; /* 0 PENDING, 1 PROCESSING, 2 FAILED, 3 SUCCESS */
	uint64_t created_at_ms_epoch;
	uint64_t last_updated_at_ms_epoch;
	struct mc_store_task_uuid assigned_client;
	char message[256];
};

/*
 * Copy key's object to every segment in targets (segment names, mounted
 * and taking replicas), or move its replica on segment source to target.
 * The master hands the task to the client that holds the source, which
 * writes the bytes and reports; follow it with mc_store_query_task.
 * Errors: OBJECT_NOT_FOUND, SEGMENT_NOT_FOUND (a target), REPLICA_NOT_FOUND
 * (no replica on source), REPLICA_ALREADY_EXISTS (move to a holder),
 * OBJECT_HAS_REPLICATION_TASK, TASK_PENDING_LIMIT_EXCEEDED, INVALID_PARAMS.
 */
MC_API mc_status mc_store_create_copy_task(struct mc_store *s, const char *key,
					   const char *const *targets, size_t ntargets,
					   struct mc_store_task_uuid *id_out);
MC_API mc_status mc_store_create_move_task(struct mc_store *s, const char *key, const char *source,
					   const char *target, struct mc_store_task_uuid *id_out);
/*
 * Ours (the paper's change_replica, FAST'25 4.4; upstream has no such
 * call): give key replica_num memory replicas.  0 changes nothing and
 * answers how many it has.  More: one copy task from a replica it has to
 * segments with room that hold none (executed like mc_store_create_copy_task's,
 * within a heartbeat or so); *count_out is the count once it has landed
 * (below replica_num when fewer segments had room).  Fewer: the newest
 * replicas are dropped at once, unless a reader holds the key's lease
 * (OBJECT_HAS_LEASE).  Disk replicas are neither counted nor touched.
 * Errors: OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY (being written),
 * OBJECT_HAS_REPLICATION_TASK, TASK_PENDING_LIMIT_EXCEEDED, INVALID_PARAMS
 * (above 255).  count_out may be NULL.
 */
MC_API mc_status mc_store_change_replica(struct mc_store *s, const char *key, uint32_t replica_num,
					 uint32_t *count_out);
/* TASK_NOT_FOUND for an unknown (or pruned) id. */
MC_API mc_status mc_store_query_task(struct mc_store *s, const struct mc_store_task_uuid *id,
				     struct mc_store_task_state *out);
/*
 * Unmount this client's segment named by segment_id ("<first>-<second>",
 * as /get_segments_detail prints it): at once (grace_period_ms 0; its
 * replicas become unreadable) or after a grace period in which it stays
 * readable but takes no new replicas.  The heartbeat does not mount it
 * again.  INVALID_PARAMS for an id that is not this client's segment.
 */
MC_API mc_status mc_store_unmount_segment(struct mc_store *s, const char *segment_id,
					  uint64_t grace_period_ms);

/*
 * Extra segments (spec store.md 9.3): memory this client mounts at the
 * master beside its global segment, each registered with the engine and
 * mounted under its own segment id, written to id_out as "<first>-<second>"
 * (room for MC_STORE_SEGMENT_ID_MAX bytes).  A master restart remounts
 * them with the global segment.  protocol NULL or "" is the client's; any
 * other protocol is INVALID_PARAMS (the engine has one).  location is the
 * engine's ("cpu:N", "*"; NULL for "*").
 *
 * mount_segment maps [offset, offset + size) of the file at path (a tmpfs
 * or /dev/shm file; MAP_SHARED, so its bytes are the file's).
 * INVALID_PARAMS, naming the cause, for a path that cannot be opened
 * read-write or is no regular file, size 0, an offset that is not a
 * multiple of the page size, or a range past the file's end.
 */
#define MC_STORE_SEGMENT_ID_MAX 48
MC_API mc_status mc_store_mount_segment(struct mc_store *s, const char *path, uint64_t size,
					uint64_t offset, const char *protocol, const char *location,
					char *id_out);
/* Maps size bytes (rounded up to the page size, *allocated_out) of anonymous memory. */
MC_API mc_status mc_store_allocate_and_mount_segment(struct mc_store *s, uint64_t size,
						     const char *protocol, const char *location,
						     char *id_out, uint64_t *allocated_out);
/*
 * Unmount an extra segment as mc_store_unmount_segment does (if it still
 * is mounted), wait out the grace period (the segment stays readable),
 * then deregister it from the engine and unmap it.  INVALID_PARAMS for an
 * id that is not an extra segment of this client's (the global segment
 * included: it lives until close).
 */
MC_API mc_status mc_store_unmount_and_free_segment(struct mc_store *s, const char *segment_id,
						   uint64_t grace_period_ms);
/*
 * Take the SSD tier off the master (its LOCAL_DISK replicas are dropped,
 * no new objects are offloaded, nothing remounts it), then wait the grace
 * period while readers that already hold its descriptors finish through
 * the offload RPC, which serves until close.  INVALID_PARAMS when this
 * client has no SSD tier mounted.
 */
MC_API mc_status mc_store_unmount_local_disk_segment(struct mc_store *s, uint64_t grace_period_ms);

#ifdef __cplusplus
}
#endif

#endif

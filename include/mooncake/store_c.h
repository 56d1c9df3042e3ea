/*
 * mooncake/store_c.h - the Mooncake Store client's C API as upstream
 * Mooncake spells it (docs/design.md, "Layers": src/api/), for programs
 * written against upstream: same type names, field order and function
 * names, so such a program builds against this header and links against
 * libmooncake.so unchanged.  New code should use mooncake/store.h.
 *
 * This header stands alone: it needs only <stddef.h> and <stdint.h>.
 *
 * Return conventions (upstream's):
 *  - -1 for a NULL handle, key or array, a NULL buffer with a non-zero
 *    size, or a handle that could not be used;
 *  - otherwise 0 or the store's negative error code (the numbers of
 *    mooncake/status.h: -600 invalid params, -704 object not found, ...);
 *  - get_into and get_size give the size (>= 0) or a negative code;
 *    remove_by_regex and remove_all the count removed or a negative code;
 *    is_exist 1, 0 or a negative code; health_check 0 healthy, 1 not set
 *    up, 2 master unreachable;
 *  - the batch calls give 0 once every per-key result is in results_out
 *    (0 / size / 1 / 0 or a negative code per key), -1 on bad arguments;
 *  - get_hostname copies "host:port" with its NUL and gives 0, or -1 when
 *    buf_len is too small;
 *  - mooncake_store_create gives NULL on failure.
 *
 * Ownership: every string passed in is copied or used only during the
 * call.  Buffers passed to put_from and get_into must be registered with
 * mooncake_store_register_buffer (or lie in the local buffer) and belong
 * to the caller.
 *
 * Threads: any function may be called from any thread at once, except
 * mooncake_store_setup, mooncake_store_init_all and
 * mooncake_store_destroy, which must not race with other calls on the same
 * handle.
 */
#ifndef MOONCAKE_STORE_C_H
#define MOONCAKE_STORE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MC_API
#define MC_API __attribute__((visibility("default")))
#endif

typedef void *mooncake_store_t;

/* Placement and pinning of a put.  A NULL config means replica_num 1 and
 * nothing else; replica_num 0 is taken as 1. */
struct mooncake_replicate_config {
	size_t replica_num;
	int with_soft_pin; /* non-zero: soft pin with the master's default TTL */
	int with_hard_pin; /* non-zero: never evicted */
	const char **preferred_segments;
	size_t preferred_segments_count;
};
typedef struct mooncake_replicate_config mooncake_replicate_config_t;

/* ---- lifecycle ---- */

MC_API mooncake_store_t mooncake_store_create(void);
/* Closes (unmounts, unregisters) if set up, then frees.  NULL is a no-op. */
MC_API void mooncake_store_destroy(mooncake_store_t store);
/* Accepted for source compatibility; this build's etcd client has no TLS,
 * so setup logs a warning when any of them is non-empty. */
MC_API void mooncake_store_set_etcd_tls_config(mooncake_store_t store, const char *ca_file,
					       const char *cert_file, const char *key_file);
/* device_name: RDMA devices ("" = auto); protocol NULL = "tcp";
 * master_server_addr NULL = "127.0.0.1:50051". */
MC_API int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
				const char *metadata_server, uint64_t global_segment_size,
				uint64_t local_buffer_size, const char *protocol,
				const char *device_name, const char *master_server_addr);
/* Legacy: setup("localhost:12345", "127.0.0.1:2379", mount_segment_size,
 * 1 GiB local buffer, protocol, device_name, "127.0.0.1:50051"). */
MC_API int mooncake_store_init_all(mooncake_store_t store, const char *protocol,
				   const char *device_name, uint64_t mount_segment_size);
MC_API int mooncake_store_health_check(mooncake_store_t store);

/* ---- put ---- */

/* Copies value through the local buffer; an existing key is 0 and is not
 * overwritten. */
MC_API int mooncake_store_put(mooncake_store_t store, const char *key, const void *value,
			      size_t size, const mooncake_replicate_config_t *config);
/* Zero-copy from a registered buffer; size 0 is a no-op giving 0. */
MC_API int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer,
				   size_t size, const mooncake_replicate_config_t *config);
MC_API int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
					 const size_t *sizes, size_t count,
					 const mooncake_replicate_config_t *config,
					 int *results_out);

/* ---- get ---- */

/* size is the buffer's capacity (smaller than the object: -600). */
MC_API int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer,
				       size_t size);
MC_API int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
					 const size_t *sizes, size_t count, int64_t *results_out);

/* ---- existence, size, hostname ---- */

MC_API int mooncake_store_is_exist(mooncake_store_t store, const char *key);
MC_API int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
					 int *results_out);
MC_API int64_t mooncake_store_get_size(mooncake_store_t store, const char *key);
MC_API int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len);

/* ---- remove ---- */

MC_API int mooncake_store_remove(mooncake_store_t store, const char *key, int force);
MC_API int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern,
					      int force);
MC_API int64_t mooncake_store_remove_all(mooncake_store_t store, int force);

/* ---- buffer registration (zero-copy calls) ---- */

MC_API int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size);
MC_API int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer);

#ifdef __cplusplus
}
#endif
#endif

/*
 * store/offload_server.h - the SSD tier's offload RPC server: the side of
 * a client that hands its disk copies (LOCAL_DISK replicas) to readers.
 *
 * A reader that finds only a LOCAL_DISK replica of an object connects to
 * the replica's transport_endpoint (this server), asks
 * BatchGetOffloadObject for a list of objects, and gets back, per object,
 * an address in this client's staging buffer, which is registered with
 * the client's Transfer Engine under the segment name the answer carries;
 * the reader TE-reads the bytes from there and sends ReleaseOffloadBuffer.
 * A batch not released within gc_ttl_ms of its answer is reclaimed, so a
 * reader that died costs the buffer that long at most.  The wire is the
 * store protocol's framing and codec (docs/protocol.md, "Offload RPC").
 *
 * The disk store's keys are bytes; mc_offload_disk_key encodes a tenant
 * and a key into one of them (docs/design-tiers.md, "SSD tier").
 *
 * Threads: start and stop on any one thread; the server runs one thread of
 * its own (docs/threads.md); stats from any thread.
 */
#ifndef MC_STORE_OFFLOAD_SERVER_H
#define MC_STORE_OFFLOAD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "mooncake/status.h"

struct mc_te;
struct mc_disk_store;

/* The offload settings (MOONCAKE_OFFLOAD_* and MC_STORE_OFFLOAD_*), from
 * mc_offload_config_table. */
struct mc_offload_config {
	uint64_t buffer_size;	      /* MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES */
	int64_t gc_ttl_ms;	      /* MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS */
	int64_t heartbeat_interval_s; /* MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS */
	int64_t heartbeat_max_items;  /* MC_STORE_OFFLOAD_HEARTBEAT_MAX_ITEMS */
	int64_t rpc_port;	      /* MC_STORE_OFFLOAD_RPC_PORT, 0 = the kernel's choice */
	int64_t rpc_timeout_ms;	      /* MC_STORE_OFFLOAD_RPC_TIMEOUT_MS (readers) */
	int64_t rpc_max_connections;  /* MC_STORE_OFFLOAD_RPC_MAX_CONNECTIONS */
	bool fixed_buffer;	      /* MC_STORE_OFFLOAD_FIXED_BUFFER */
};

extern const struct mc_config_entry mc_offload_config_table[];
extern const size_t mc_offload_config_table_len;

/* Defaults, then the environment (a bad value is warned about and the
 * default kept). */
void mc_offload_config_init(struct mc_offload_config *cfg);

/*
 * The disk store key of (tenant, key): key itself for the default tenant
 * ("" or "default") unless key begins with MC_OFFLOAD_TENANT_MARK; else
 * the mark, the tenant's length in decimal, ':', the tenant and the key.
 * Keys and tenants hold no NUL (the client's API takes C strings), so the
 * result holds none either.  Returns the length written, or 0 when the
 * result would pass cap or MC_STORE_KEY_MAX, or the input is empty or
 * holds a NUL.
 */
#define MC_OFFLOAD_TENANT_MARK '\x01'
size_t mc_offload_disk_key(const char *tenant, size_t tenant_len, const char *key, size_t key_len,
			   char *out, size_t cap);
/* The inverse: the tenant ("" for the default one) and the key inside a
 * disk key, borrowed from it.  false when dk is not such a key. */
bool mc_offload_disk_key_split(const char *dk, size_t dk_len, const char **tenant_out,
			       size_t *tenant_len_out, const char **key_out, size_t *key_len_out);

struct mc_offload_server;

/*
 * Listens on host (an address or name of this machine; "" or 0.0.0.0 only
 * when the caller means every interface) at port (0: the kernel's choice),
 * serves objects of ds staged in a buffer of cfg->buffer_size bytes
 * registered with te (lazy: pages cost memory once an object lands in
 * them).  MC_ERR_INVALID_PARAMS, MC_ERR_SOCKET (cannot listen), the
 * engine's registration errors, MC_ERR_NOMEM.
 */
mc_status mc_offload_server_start(const struct mc_offload_config *cfg, const char *host,
				  uint16_t port, struct mc_disk_store *ds, struct mc_te *te,
				  struct mc_offload_server **out);
/* Stops the thread, closes every connection, deregisters and frees the
 * staging buffer.  NULL is a no-op. */
void mc_offload_server_stop(struct mc_offload_server *srv);
/* "host:port" readers connect to (borrowed, valid until stop). */
const char *mc_offload_server_endpoint(const struct mc_offload_server *srv);
uint16_t mc_offload_server_port(const struct mc_offload_server *srv);

struct mc_offload_server_stats {
	uint64_t batches;	 /* BatchGetOffloadObject answered with a batch */
	uint64_t objects;	 /* objects staged */
	uint64_t bytes;		 /* their bytes */
	uint64_t failed_objects; /* objects answered with an error */
	uint64_t released;	 /* batches released by their reader */
	uint64_t reclaimed;	 /* batches reclaimed after gc_ttl_ms */
	uint64_t live_batches;	 /* staged and not yet released */
	uint64_t staged_bytes;	 /* of the buffer, held by live batches */
	uint64_t connections;	 /* accepted */
	uint64_t open_connections;
	uint64_t refused;	/* over the connection cap */
	uint64_t accept_pauses; /* accept out of descriptors: listener paused */
	uint64_t bad_frames;	/* connections closed for a malformed frame */
};
void mc_offload_server_stats(struct mc_offload_server *srv, struct mc_offload_server_stats *out);

#endif

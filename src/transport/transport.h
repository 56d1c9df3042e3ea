/*
 * transport/transport.h - the transport vtable, its environment and its peers.
 *
 * A transport moves slices (transport/slice.h) to and from a target.  It
 * sits below the engine and knows nothing of it: it is opened from a small
 * environment (struct mc_transport_env: registered memory, the device
 * memory backend, the device list, the host id, the port range, the
 * caller's overrides) and reads its own configuration table, declared in
 * its own file and listed here through its ops (config, nconfig) so the
 * documentation generator finds it.
 *
 * The registry (transport/registry.c) lists the transports in preference
 * order.  The engine opens them from the last row to the first (a row's
 * fallback comes after it, so it is open first), and closes them from the
 * first to the last.  For the engine's own segment it uses the transport
 * whose caps say local; for any other it walks the rows in order and takes
 * the first whose peer_open accepts the segment's descriptor: same-host
 * "shm" before "tcp".  A transport that hands slices on (shm to its
 * fallback, tcp, when the same-host path cannot be used) does so itself.
 *
 * Peers: struct mc_peer is the base of each transport's peer object
 * (container_of); a transport creates a peer on first use and keeps it for
 * as long as it lives, so the engine holds plain pointers.  A peer is
 * "failed" once a connection to it failed since the last reset; the engine
 * then refetches the target's descriptor before its next submit and resets
 * the (possibly new) peer.
 *
 * Callers use the inline wrappers, never the table directly.  Transports
 * report each finished slice with mc_slice_done() from whatever thread
 * finished it.
 */
#ifndef MC_TRANSPORT_TRANSPORT_H
#define MC_TRANSPORT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_config_entry;
struct mc_devmem_ops;
struct mc_memreg;
struct mc_seg_desc;
struct mc_slice;
struct mc_transport;

/* What a transport is opened with.  Borrowed: everything outlives it. */
struct mc_transport_env {
	struct mc_memreg *memreg;	    /* registered memory: incoming ranges are checked */
	const struct mc_devmem_ops *devmem; /* device memory backend, or NULL */
	size_t stage_chunk;		    /* bytes per pinned staging buffer (mem/devmem.h) */
	const char *devices;		    /* device filter (MC_TE_FILTERS), or NULL: all */
	const char *host_id;		    /* this host's boot id, "" when unknown */
	const char *bind_host;		    /* where they listen; "" = every interface */
	uint16_t min_port, max_port;	    /* where listening ports are picked */
	unsigned workers;		    /* caller's worker count, or 0: the transport's own */
	unsigned conns_per_peer;	    /* caller's connections per peer, or 0: same */
	struct mc_transport *fallback;	    /* the registry row's fallback (opened), or NULL */
	/* the cluster secret (base/auth.h; outlives the transport): with one,
	 * every connection opens with the handshake of base/auth_hs.h */
	const struct mc_auth_secret *auth;
};

/* Capabilities, as data. */
struct mc_transport_caps {
	bool local;	    /* moves the engine's own segment (no peers, peer NULL) */
	bool same_host;	    /* reaches only targets with this host's host_id */
	bool device_memory; /* takes device-memory local buffers (others: te/stage.c) */
	bool optional;	    /* the engine goes on without it when it cannot open */
};

/* The base of a transport's peer object; owned by the transport. */
struct mc_peer {
	struct mc_transport *tp;
};

struct mc_transport_ops {
	const char *name;
	struct mc_transport_caps caps;
	const struct mc_config_entry *config; /* its configuration table (docs/config.md) */
	size_t nconfig;
	/* MC_OK with *out NULL: switched off by its configuration (it says so). */
	mc_status (*open)(const struct mc_transport_env *env, struct mc_transport **out);
	void (*close)(struct mc_transport *tp);
	/* The peer for a target whose descriptor is d, reached at host (the
	 * address of its RPC listener); MC_ERR_TRANSPORT_UNSUPPORTED when d
	 * offers nothing this transport can use. */
	mc_status (*peer_open)(struct mc_transport *tp, const struct mc_seg_desc *d,
			       const char *host, struct mc_peer **out);
	bool (*peer_failed)(struct mc_peer *p);
	void (*peer_reset)(struct mc_peer *p); /* clear failed */
	/* Start n slices toward peer (NULL for a local transport). */
	mc_status (*submit)(struct mc_transport *tp, struct mc_peer *peer, struct mc_slice **slices,
			    size_t n);
	/* Add this transport's fields to the local descriptor. */
	mc_status (*fill_desc)(struct mc_transport *tp, struct mc_seg_desc *desc);
	/* How many slices a request of len bytes should become. */
	unsigned (*split)(struct mc_transport *tp, uint64_t len);
	/* The data port it listens on and publishes, 0 for none. */
	uint16_t (*data_port)(struct mc_transport *tp);
};

struct mc_transport {
	const struct mc_transport_ops *ops;
};

/* ---- the registry (transport/registry.c) ---------------------------------- */

#define MC_TRANSPORT_MAX 8

struct mc_transport_entry {
	const struct mc_transport_ops *ops;
	int fallback; /* index of a later row it hands slices to, or -1 */
};

/* In preference order. */
extern const struct mc_transport_entry mc_transport_registry[];
extern const size_t mc_transport_registry_len;

extern const struct mc_transport_ops mc_tcp_transport_ops;
extern const struct mc_transport_ops mc_local_transport_ops;
extern const struct mc_transport_ops mc_shm_transport_ops;

/* Stubs for ops a transport does not have. */
mc_status mc_transport_no_peer_open(struct mc_transport *tp, const struct mc_seg_desc *d,
				    const char *host, struct mc_peer **out);
bool mc_transport_no_peer_failed(struct mc_peer *p);
void mc_transport_no_peer_reset(struct mc_peer *p);
mc_status mc_transport_no_fill_desc(struct mc_transport *tp, struct mc_seg_desc *desc);
unsigned mc_transport_no_split(struct mc_transport *tp, uint64_t len);
uint16_t mc_transport_no_data_port(struct mc_transport *tp);

/* ---- wrappers ---------------------------------------------------------------- */

static inline mc_status mc_transport_open(const struct mc_transport_ops *ops,
					  const struct mc_transport_env *env,
					  struct mc_transport **out)
{
	return ops->open(env, out);
}

static inline mc_status mc_transport_submit(struct mc_transport *tp, struct mc_peer *peer,
					    struct mc_slice **slices, size_t n)
{
	return tp->ops->submit(tp, peer, slices, n);
}

static inline mc_status mc_transport_fill_desc(struct mc_transport *tp, struct mc_seg_desc *desc)
{
	return tp->ops->fill_desc(tp, desc);
}

static inline unsigned mc_transport_split(struct mc_transport *tp, uint64_t len)
{
	return tp->ops->split(tp, len);
}

static inline uint16_t mc_transport_data_port(struct mc_transport *tp)
{
	return tp->ops->data_port(tp);
}

static inline mc_status mc_transport_peer_open(struct mc_transport *tp, const struct mc_seg_desc *d,
					       const char *host, struct mc_peer **out)
{
	return tp->ops->peer_open(tp, d, host, out);
}

static inline bool mc_peer_failed(struct mc_peer *p)
{
	return p->tp->ops->peer_failed(p);
}

static inline void mc_peer_reset(struct mc_peer *p)
{
	p->tp->ops->peer_reset(p);
}

static inline void mc_transport_close(struct mc_transport *tp)
{
	if (tp)
		tp->ops->close(tp);
}

/* TCP wire format (spec transfer-engine.md 4.2). */
#define MC_TCP_HDR_LEN	24
#define MC_TCP_OP_READ	0x00
#define MC_TCP_OP_WRITE 0x01
#define MC_TCP_OP_V2	0x80
/* Our extension, only with MC_TCP_OP_V2, only toward a target that publishes
 * tcp_proto_version >= MC_TCP_PROTO_SUM (docs/design.md, "Transfer
 * checksums"): the request's bytes carry an 8-byte little-endian XXH3-64
 * after them (a write's after its payload, a read's after the data the
 * target returns), and a write whose sum does not match is answered with
 * MC_TCP_STATUS_SUM. */
#define MC_TCP_OP_SUM	    0x40
#define MC_TCP_PROTO_SUM    3
#define MC_TCP_SUM_LEN	    8
#define MC_TCP_STATUS_MAGIC 0x4D435456u
#define MC_TCP_STATUS_OK    0u
#define MC_TCP_STATUS_REJ   1u
#define MC_TCP_STATUS_SUM   2u

struct mc_tcp_hdr {
	uint64_t size;
	uint64_t addr;
	uint8_t opcode;
};

/* Pure codec, fuzzed: encode 24 bytes; decode validates nothing but form. */
void mc_tcp_hdr_encode(const struct mc_tcp_hdr *h, uint8_t out[MC_TCP_HDR_LEN]);
void mc_tcp_hdr_decode(const uint8_t in[MC_TCP_HDR_LEN], struct mc_tcp_hdr *h);
/* Status frame: MC_OK and *code_out, or MC_ERR_PROTOCOL for a bad magic. */
mc_status mc_tcp_status_decode(const uint8_t in[8], uint32_t *code_out);
void mc_tcp_status_encode(uint32_t code, uint8_t out[8]);
/* What a request's opcode asks for: a write (else a read: upstream treats
 * any other opcode as one), v2 framing, a checksum trailer. */
struct mc_tcp_op {
	bool write, v2, sum;
};
struct mc_tcp_op mc_tcp_op_parse(uint8_t opcode);
/* The checksum trailer of MC_TCP_OP_SUM requests. */
void mc_tcp_sum_encode(uint64_t sum, uint8_t out[MC_TCP_SUM_LEN]);
uint64_t mc_tcp_sum_decode(const uint8_t in[MC_TCP_SUM_LEN]);

#endif

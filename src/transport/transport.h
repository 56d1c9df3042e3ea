/*
 * transport/transport.h - the transport vtable.
 *
 * A transport moves slices to and from a target.  The engine picks the
 * transport per request from the target: the local segment goes through
 * "local", a segment of an engine on the same host that advertises it
 * through "shm" (which hands slices to "tcp" when it cannot be used), any
 * other tcp segment through "tcp".  Callers use the inline wrappers,
 * never the table directly.  Transports report each finished slice with
 * mc_slice_done() from whatever thread finished it.
 */
#ifndef MC_TRANSPORT_TRANSPORT_H
#define MC_TRANSPORT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

struct mc_te;
struct mc_slice;
struct mc_segment;
struct mc_seg_desc;
struct mc_transport;

struct mc_transport_ops {
	const char *name;
	int (*open)(struct mc_te *te, struct mc_transport **out);
	void (*close)(struct mc_transport *tp);
	/* Start n slices toward peer (the transport's handle; NULL for local). */
	int (*submit)(struct mc_transport *tp, void *peer, struct mc_slice **slices, size_t n);
	/* Add this transport's fields to the local descriptor. */
	void (*fill_desc)(struct mc_transport *tp, struct mc_seg_desc *desc);
	/* How many slices a request of len bytes should become. */
	unsigned (*split)(struct mc_transport *tp, uint64_t len);
};

struct mc_transport {
	const struct mc_transport_ops *ops;
	struct mc_te *te;
};

extern const struct mc_transport_ops mc_tcp_transport_ops;
extern const struct mc_transport_ops mc_local_transport_ops;
extern const struct mc_transport_ops mc_shm_transport_ops;

static inline int mc_transport_submit(struct mc_transport *tp, void *peer, struct mc_slice **slices,
				      size_t n)
{
	return tp->ops->submit(tp, peer, slices, n);
}

static inline void mc_transport_fill_desc(struct mc_transport *tp, struct mc_seg_desc *desc)
{
	tp->ops->fill_desc(tp, desc);
}

static inline unsigned mc_transport_split(struct mc_transport *tp, uint64_t len)
{
	return tp->ops->split(tp, len);
}

static inline void mc_transport_close(struct mc_transport *tp)
{
	if (tp)
		tp->ops->close(tp);
}

/* TCP wire format (spec transfer-engine.md 4.2). */
#define MC_TCP_HDR_LEN	    24
#define MC_TCP_OP_READ	    0x00
#define MC_TCP_OP_WRITE	    0x01
#define MC_TCP_OP_V2	    0x80
#define MC_TCP_STATUS_MAGIC 0x4D435456u
#define MC_TCP_STATUS_OK    0u
#define MC_TCP_STATUS_REJ   1u

struct mc_tcp_hdr {
	uint64_t size;
	uint64_t addr;
	uint8_t opcode;
};

/* Pure codec, fuzzed: encode 24 bytes; decode validates nothing but form. */
void mc_tcp_hdr_encode(const struct mc_tcp_hdr *h, uint8_t out[MC_TCP_HDR_LEN]);
void mc_tcp_hdr_decode(const uint8_t in[MC_TCP_HDR_LEN], struct mc_tcp_hdr *h);
/* Status frame: MC_OK and *code_out, or MC_ERR_PROTOCOL for a bad magic. */
int mc_tcp_status_decode(const uint8_t in[8], uint32_t *code_out);
void mc_tcp_status_encode(uint32_t code, uint8_t out[8]);

#endif

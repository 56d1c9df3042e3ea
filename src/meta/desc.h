/*
 * meta/desc.h - segment descriptors and rpc_meta records, and their JSON.
 *
 * The JSON is upstream's (spec transfer-engine.md 3.2-3.3): keys
 * "mooncake/[<cluster>/]rpc_meta/<name>" and "mooncake/[<cluster>/]ram/<name>"
 * (a name containing '/' is used verbatim after the prefix).  Encoding is
 * compact JSON; decoding accepts any key order, a trailing newline, and
 * 64-bit integers (never through double).  Unknown fields are ignored, so
 * RDMA descriptors decode too; validation follows upstream: a tcp buffer
 * needs a non-empty name, addr != 0 and length != 0, else the whole
 * descriptor is rejected with MC_ERR_MALFORMED_JSON.
 */
#ifndef MC_META_DESC_H
#define MC_META_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_seg_buffer {
	char *name; /* location string ("cpu:0") or segment name for tcp */
	uint64_t addr;
	uint64_t length;
};

struct mc_seg_desc {
	char *name;
	char *protocol;		/* "tcp", "rdma", ... */
	uint16_t tcp_data_port; /* 0 when not installed */
	int tcp_proto_version;	/* absent => 1 */
	char *timestamp;	/* "YYYY-MM-DD HH:MM:SS.uuuuuu", ignored on compare */
	char *host_id;		/* our extension "mc_host_id" (boot id); may be NULL */
	char *shm_ep;		/* our extension "mc_shm_ep": same-host endpoint; may be NULL */
	/* our extension "mc_tcp_addrs": the addresses (one per interface) the
	 * TCP data port is reachable on; absent or empty => rpc_meta's host only */
	char **tcp_addrs;
	size_t ntcp_addrs;
	struct mc_seg_buffer *buffers;
	size_t nbuffers;
};

/* Bounds on "mc_tcp_addrs": entries, and bytes per address (NUL excluded). */
#define MC_SEG_MAX_TCP_ADDRS	16
#define MC_SEG_MAX_TCP_ADDR_LEN 255

struct mc_rpc_meta {
	char *ip_or_host_name;
	uint16_t rpc_port;
};

/* Encode to compact JSON (malloc'ed, NUL-terminated, no trailing newline). */
mc_status mc_seg_desc_encode(const struct mc_seg_desc *d, char **json_out);
/* Decode len bytes (need not be NUL-terminated).  MC_ERR_MALFORMED_JSON with
 * mc_last_error naming the offending field. */
mc_status mc_seg_desc_decode(const char *json, size_t len, struct mc_seg_desc **desc_out);
void mc_seg_desc_free(struct mc_seg_desc *d);
/* Deep copy. */
mc_status mc_seg_desc_dup(const struct mc_seg_desc *d, struct mc_seg_desc **out);

mc_status mc_rpc_meta_encode(const struct mc_rpc_meta *m, char **json_out);
mc_status mc_rpc_meta_decode(const char *json, size_t len, struct mc_rpc_meta *out); /* fills out */
void mc_rpc_meta_release(struct mc_rpc_meta *m);

/* Keys, honouring MC_METADATA_CLUSTER_ID (read on each call).  malloc'ed. */
char *mc_meta_key_rpc(const char *name);
char *mc_meta_key_segment(const char *name);

/* Current local time as upstream's timestamp string into buf (>= 27 bytes). */
void mc_seg_timestamp(char *buf, size_t len);

#endif

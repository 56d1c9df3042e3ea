/*
 * tests/fuzz/fuzz_seg_desc.c - segment descriptor and rpc_meta JSON decoders.
 *
 * These bytes come from the metadata service or a peer's RPC reply, so any
 * input must be either rejected or decoded into something we can use.  On
 * top of "no crash, no leak" the target checks one property: whatever
 * decodes re-encodes, and the re-encoded text decodes to the same values
 * (so a descriptor we accept can be republished and cached).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "meta/desc.h"
#include "mooncake/status.h"

static void check_seg_round_trip(const struct mc_seg_desc *d)
{
	struct mc_seg_desc *again = NULL;
	char *json = NULL;

	if (mc_seg_desc_encode(d, &json) != MC_OK)
		abort();
	if (mc_seg_desc_decode(json, strlen(json), &again) != MC_OK)
		abort();
	if (strcmp(d->name, again->name) || strcmp(d->protocol, again->protocol) ||
	    d->tcp_data_port != again->tcp_data_port ||
	    d->tcp_proto_version != again->tcp_proto_version || d->nbuffers != again->nbuffers)
		abort();
	if ((d->host_id == NULL) != (again->host_id == NULL) ||
	    (d->host_id && strcmp(d->host_id, again->host_id)))
		abort();
	if (d->timestamp && strcmp(d->timestamp, again->timestamp))
		abort();
	if (d->ntcp_addrs != again->ntcp_addrs || d->ntcp_addrs > MC_SEG_MAX_TCP_ADDRS)
		abort();
	for (size_t i = 0; i < d->ntcp_addrs; i++)
		if (strcmp(d->tcp_addrs[i], again->tcp_addrs[i]))
			abort();
	for (size_t i = 0; i < d->nbuffers; i++) {
		if (strcmp(d->buffers[i].name, again->buffers[i].name) ||
		    d->buffers[i].addr != again->buffers[i].addr ||
		    d->buffers[i].length != again->buffers[i].length)
			abort();
	}
	mc_seg_desc_free(again);
	mc_free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_seg_desc *d = NULL;
	struct mc_rpc_meta m = {0};

	if (mc_seg_desc_decode((const char *)data, size, &d) == MC_OK) {
		check_seg_round_trip(d);
		mc_seg_desc_free(d);
	}
	if (mc_rpc_meta_decode((const char *)data, size, &m) == MC_OK) {
		struct mc_rpc_meta again = {0};
		char *json = NULL;
		if (mc_rpc_meta_encode(&m, &json) != MC_OK ||
		    mc_rpc_meta_decode(json, strlen(json), &again) != MC_OK ||
		    strcmp(m.ip_or_host_name, again.ip_or_host_name) ||
		    m.rpc_port != again.rpc_port)
			abort();
		mc_rpc_meta_release(&again);
		mc_rpc_meta_release(&m);
		mc_free(json);
	}
	return 0;
}

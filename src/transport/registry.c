/*
 * transport/registry.c - the transports this build has, in preference order.
 *
 * The engine walks this table (te/engine.c): it opens the rows from the
 * last to the first, so that a row's fallback is open before the row
 * itself, and picks for each remote segment the first row whose peer_open
 * accepts the segment's descriptor.  Adding a transport is one file with
 * its ops (and its configuration table) plus one row here; an explicit
 * array rather than constructor-attribute self-registration, so the order
 * is written down in one place.
 *
 * Also here: the stubs a transport puts in its ops for what it does not
 * have, so that no op is ever NULL.
 */
#include "transport/transport.h"

#include "base/compiler.h"

const struct mc_transport_entry mc_transport_registry[] = {
	{&mc_local_transport_ops, -1}, /* the engine's own segment */
	{&mc_shm_transport_ops, 2},    /* same host; hands slices to tcp when it cannot */
	{&mc_tcp_transport_ops, -1},
};
const size_t mc_transport_registry_len = MC_ARRAY_SIZE(mc_transport_registry);

MC_STATIC_ASSERT(MC_ARRAY_SIZE(mc_transport_registry) <= MC_TRANSPORT_MAX, "registry too long");

mc_status mc_transport_no_peer_open(struct mc_transport *tp, const struct mc_seg_desc *d,
				    const char *host, struct mc_peer **out)
{
	(void)tp;
	(void)d;
	(void)host;
	(void)out;
	return MC_ERR_TRANSPORT_UNSUPPORTED;
}

bool mc_transport_no_peer_failed(struct mc_peer *p)
{
	(void)p;
	return false;
}

void mc_transport_no_peer_reset(struct mc_peer *p)
{
	(void)p;
}

mc_status mc_transport_no_fill_desc(struct mc_transport *tp, struct mc_seg_desc *desc)
{
	(void)tp;
	(void)desc;
	return MC_OK;
}

unsigned mc_transport_no_split(struct mc_transport *tp, uint64_t len)
{
	(void)tp;
	(void)len;
	return 1;
}

uint16_t mc_transport_no_data_port(struct mc_transport *tp)
{
	(void)tp;
	return 0;
}

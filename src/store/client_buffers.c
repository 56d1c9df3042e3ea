/*
 * store/client_buffers.c - the memory a store client's zero-copy calls may
 * use: registering and deregistering it with the engine, and the check
 * every zero-copy call makes of its buffers.  On a dummy client the same
 * calls register whole shared regions with the daemon (dummy_client.c).
 * Split out of client_xfer.c, which holds the transfers themselves.
 */
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "mooncake/te.h"
#include "store/client_int.h"
#include "store/dummy_client.h"
#include "te/engine.h"

/* ---- zero-copy calls --------------------------------------------------------------------- */

/*
 * Every buffer a zero-copy call is handed is checked against the engine's
 * registered ranges (mc_store_check_buffer: a read lock and a binary
 * search, tens of nanoseconds against a call's master round trip), so the
 * store moves bytes only between the store and memory the caller
 * registered, as upstream's RDMA path requires.  The value calls (put,
 * get, get_alloc) are not checked: their memory is the caller's value or
 * an allocation made for the call.
 */
mc_status mc_store_check_buffer(struct mc_store *s, const void *buf, size_t len)
{
	if (s && s->dummy)
		return mc_dummy_check(s->dummy, buf, len);
	mc_status rc = mc_store_check_ready(s);
	if (rc != MC_OK || !len || mc_te_local_registered(s->te, buf, len))
		return rc;
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "buffer %p+%zu is not inside one registered buffer", buf, len);
}

/* A read's destination: registered, and not registered read-only. */
mc_status mc_store_check_dest(struct mc_store *s, const void *buf, size_t len)
{
	mc_status rc = mc_store_check_buffer(s, buf, len);
	if (rc != MC_OK || !len || mc_te_local_writable(s->te, buf, len))
		return rc;
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "buffer %p+%zu is registered read-only: it cannot take a get", buf,
			    len);
}

mc_status mc_store_register_buffer(struct mc_store *s, void *addr, size_t len)
{
	return mc_store_register_buffer_flags(s, addr, len, 0);
}

mc_status mc_store_register_buffer_flags(struct mc_store *s, void *addr, size_t len, unsigned flags)
{
	if (s && s->dummy)
		return flags ? mc_set_error(MC_ERR_NOT_SUPPORTED,
					    "register_buffer flags on a dummy client")
			     : mc_dummy_register(s->dummy, addr, len);
	mc_status rc = mc_store_check_ready(s);
	if (rc != MC_OK)
		return rc;
	if (!addr || !len)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register_buffer: NULL or empty");
	if (flags & ~(unsigned)MC_STORE_BUFFER_READ_ONLY)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register_buffer: unknown flags 0x%x",
				    flags);
	return mc_te_register_flags(s->te, addr, len, NULL, true,
				    (flags & MC_STORE_BUFFER_READ_ONLY) ? MC_TE_REGISTER_READ_ONLY
									: 0);
}

mc_status mc_store_unregister_buffer(struct mc_store *s, void *addr)
{
	if (s && s->dummy)
		return mc_dummy_unregister(s->dummy, addr);
	mc_status rc = mc_store_check_ready(s);
	if (rc != MC_OK)
		return rc;
	return mc_te_deregister(s->te, addr);
}

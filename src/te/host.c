/*
 * te/host.c - mc_te_host_alloc/free: buffers the library maps for callers
 * to register (Python's managed buffers), on mem/hostmem.h like the
 * store's segments.  The live mappings are a small list under a mutex:
 * callers allocate a few large chunks, not one per object.
 */
#define MC_LOG_MODULE "te"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "mem/hostmem.h"
#include "mooncake/te.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct mc_hostmem **maps;
static size_t nmaps, cap_maps;

mc_status mc_te_host_alloc(size_t len, void **out)
{
	struct mc_hostmem_config c;
	struct mc_hostmem *m;
	mc_status rc;

	*out = NULL;
	if (len == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "host_alloc: zero length");
	mc_hostmem_config_load(&c);
	mc_free(c.prefault);
	c.prefault = mc_strdup("off"); /* faulted in block by block (mc_te_host_prefault) */
	rc = mc_hostmem_map(len, 0, &c, "engine buffer", &m);
	mc_config_entry_release(mc_hostmem_config_table, mc_hostmem_config_table_len, &c);
	if (rc != MC_OK)
		return rc;
	pthread_mutex_lock(&lock);
	if (nmaps == cap_maps) {
		size_t ncap = cap_maps ? 2 * cap_maps : 16;
		struct mc_hostmem **v = mc_realloc(maps, ncap * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&lock);
			mc_hostmem_unmap(m);
			return mc_set_error(MC_ERR_NOMEM, "host_alloc: no memory");
		}
		maps = v;
		cap_maps = ncap;
	}
	maps[nmaps++] = m;
	pthread_mutex_unlock(&lock);
	*out = mc_hostmem_addr(m);
	return MC_OK;
}

mc_status mc_te_host_prefault(void *p, size_t len)
{
	struct mc_hostmem_config c;
	struct mc_hostmem *m = NULL;
	bool off;
	size_t at = 0;

	mc_hostmem_config_load(&c);
	off = c.prefault && strcmp(c.prefault, "off") == 0;
	mc_config_entry_release(mc_hostmem_config_table, mc_hostmem_config_table_len, &c);
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nmaps; i++) {
		uint8_t *a = mc_hostmem_addr(maps[i]);
		if ((uint8_t *)p >= a && (uint8_t *)p < a + mc_hostmem_len(maps[i])) {
			m = maps[i];
			at = (size_t)((uint8_t *)p - a);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	if (!m)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "host_prefault: %p is not from host_alloc", p);
	/* the mapping stays valid: only mc_te_host_free unmaps it, and a caller
	 * does not free a buffer while it uses it */
	return off ? MC_OK : mc_hostmem_populate(m, at, len);
}

mc_status mc_te_host_free(void *p)
{
	struct mc_hostmem *m = NULL;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nmaps; i++)
		if (mc_hostmem_addr(maps[i]) == p) {
			m = maps[i];
			maps[i] = maps[--nmaps];
			break;
		}
	pthread_mutex_unlock(&lock);
	if (!m)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "host_free: %p is not from host_alloc",
				    p);
	mc_hostmem_unmap(m);
	return MC_OK;
}

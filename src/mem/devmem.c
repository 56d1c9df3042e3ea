/*
 * mem/devmem.c - choosing the device-memory backend, and the staging buffers
 * every user of device memory shares.
 *
 * The backend is chosen once per process: whatever a test installed with
 * mc_devmem_set_backend(), else CUDA when this build has it and libcudart
 * sees a device, else none.
 *
 * A struct mc_devstage is a few pinned host buffers of one chunk each (one
 * pinned allocation; pinning is slow, so owners keep them for their
 * lifetime), plus one stream per device used and one event per buffer.
 * Its owner alternates the buffers: while one buffer's bytes are on the
 * wire (or in a process_vm_* copy), the next buffer is being copied to or
 * from the device.  The owner is one thread (a TCP or same-host worker, the
 * engine's stager), so nothing here locks.
 *
 * The staging configuration table (MC_GPU_STAGE_*) lives here too: both
 * the engine's stager and the transports' target sides read it.
 */
#define MC_LOG_MODULE "devmem"
#include "mem/devmem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/log.h"
#include "mooncake/status.h"

#define CFG(f) offsetof(struct mc_devmem_config, f)
const struct mc_config_entry mc_devmem_config_table[] = {
	{.f = {"gpu_stage_chunk", "MC_GPU_STAGE_CHUNK", "1m",
	       "device memory: bytes per pinned staging buffer; requests on device memory move in "
	       "chunks of this size, copies to or from the device overlapping with the network",
	       CFG(stage_chunk), MC_CONFIG_SIZE, 4096, 1 << 30}},
	{.f = {"gpu_stage_buffers", "MC_GPU_STAGE_BUFFERS", "16",
	       "device memory: pinned staging buffers of an initiator (pinned at first use); one "
	       "request uses at most half of them",
	       CFG(stage_buffers), MC_CONFIG_INT, 2, 1024}},
};
#undef CFG
const size_t mc_devmem_config_table_len = MC_ARRAY_SIZE(mc_devmem_config_table);

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static _Atomic(const struct mc_devmem_ops *) active;
static atomic_bool overridden;

static void probe(void)
{
	if (atomic_load(&overridden))
		return;
#ifdef MC_HAVE_CUDA
	atomic_store(&active, mc_devmem_cuda_probe());
#endif
}

const struct mc_devmem_ops *mc_devmem(void)
{
	pthread_once(&probe_once, probe);
	return atomic_load(&active);
}

void mc_devmem_set_backend(const struct mc_devmem_ops *ops)
{
	atomic_store(&overridden, true);
	atomic_store(&active, ops);
}

int mc_devmem_location_device(const char *location)
{
	const char *p;
	long v = 0;

	if (!location || strncmp(location, "cuda:", 5) != 0)
		return -1;
	p = location + 5;
	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (*p - '0');
		if (v >= MC_DEVMEM_MAX_DEVICES)
			return -1;
	}
	return *p ? -1 : (int)v;
}

/* ---- staging buffers ----------------------------------------------------- */

mc_status mc_devstage_init(struct mc_devstage *st, const struct mc_devmem_ops *ops, unsigned n,
			   size_t chunk)
{
	mc_status rc;

	memset(st, 0, sizeof(*st));
	st->ops = ops;
	st->chunk = chunk;
	st->bufs = mc_calloc(n, sizeof(*st->bufs));
	if (!st->bufs)
		return MC_ERR_NOMEM;
	rc = ops->host_alloc(n * chunk, &st->block);
	if (rc != MC_OK) {
		mc_free(st->bufs);
		st->bufs = NULL;
		return rc;
	}
	st->n = n;
	for (unsigned i = 0; i < n; i++) {
		st->bufs[i].host = (uint8_t *)st->block + (size_t)i * chunk;
		st->bufs[i].ev_dev = -1;
	}
	return MC_OK;
}

void mc_devstage_release(struct mc_devstage *st)
{
	if (!st->ops)
		return;
	mc_devstage_drain(st);
	for (unsigned i = 0; i < st->n; i++)
		if (st->bufs[i].ev)
			st->ops->event_free(st->bufs[i].ev);
	for (unsigned d = 0; d < MC_DEVMEM_MAX_DEVICES; d++)
		if (st->streams[d])
			st->ops->stream_free(st->streams[d]);
	if (st->block)
		st->ops->host_free(st->block);
	mc_free(st->bufs);
	memset(st, 0, sizeof(*st));
}

mc_status mc_devstage_copy(struct mc_devstage *st, unsigned i, int dev, void *dst, const void *src,
			   size_t len)
{
	struct mc_devstage_buf *b = &st->bufs[i];
	mc_status rc;

	if (dev < 0 || dev >= MC_DEVMEM_MAX_DEVICES)
		return mc_set_error(MC_ERR_DEVICE_NOT_FOUND, "device %d out of range", dev);
	if (!st->streams[dev]) {
		rc = st->ops->stream_new(dev, &st->streams[dev]);
		if (rc != MC_OK)
			return rc;
	}
	if (b->ev_dev != dev) {
		/* events belong to a device; the buffer is idle here */
		if (b->ev)
			st->ops->event_free(b->ev);
		b->ev = NULL;
		b->ev_dev = -1;
		rc = st->ops->event_new(st->streams[dev], &b->ev);
		if (rc != MC_OK)
			return rc;
		b->ev_dev = dev;
	}
	rc = st->ops->copy_async(st->streams[dev], dst, src, len, b->ev);
	if (rc == MC_OK)
		b->busy = true;
	return rc;
}

mc_status mc_devstage_query(struct mc_devstage *st, unsigned i)
{
	struct mc_devstage_buf *b = &st->bufs[i];
	mc_status rc;

	if (!b->busy)
		return MC_OK;
	rc = st->ops->event_query(b->ev);
	if (rc != MC_INPROGRESS)
		b->busy = false;
	return rc;
}

mc_status mc_devstage_wait(struct mc_devstage *st, unsigned i)
{
	struct mc_devstage_buf *b = &st->bufs[i];

	if (!b->busy)
		return MC_OK;
	b->busy = false;
	return st->ops->event_wait(b->ev);
}

mc_status mc_devstage_drain(struct mc_devstage *st)
{
	mc_status first = MC_OK;
	for (unsigned i = 0; i < st->n; i++) {
		mc_status rc = mc_devstage_wait(st, i);
		if (rc != MC_OK && first == MC_OK)
			first = rc;
	}
	return first;
}

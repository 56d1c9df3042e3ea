/*
 * mem/devmem.h - device (GPU) memory behind a small vtable.
 *
 * Memory registered at a location "cuda:N" (or at "*"/"" when the pointer
 * turns out to be device memory) is device memory: no transport may touch
 * it with memcpy, recv, send or process_vm_*.  Bytes reach it only through
 * a backend's copies, staged through pinned host buffers (struct
 * mc_devstage) so that copies overlap with network I/O.
 *
 * Backends: "cuda" (mem/devmem_cuda.c, built with -Dcuda, libcudart loaded
 * with dlopen at first use so libmooncake.so loads on machines without the
 * CUDA driver) and a test-only emulated one (tests/support/devmem_emu.c)
 * that the tests install with mc_devmem_set_backend().  mc_devmem() returns
 * the active backend, or NULL when there is none (no CUDA build, no
 * libcudart, no device): then no memory is device memory and a "cuda:N"
 * registration is refused.
 *
 * This sits in src/mem/ with the table of registered memory
 * (mem/memreg.h): both are used by the transports (the target side of
 * every request) and by the engine (registration, the initiator's
 * staging in te/stage.c), so they live in a layer below both.
 *
 * Threads: a backend's functions may be called from any thread; a stream,
 * its events and a struct mc_devstage belong to one thread at a time.
 */
#ifndef MC_MEM_DEVMEM_H
#define MC_MEM_DEVMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "mooncake/status.h"

#define MC_DEVMEM_MAX_DEVICES 16

/* Staging configuration (env MC_GPU_STAGE_*), from mc_devmem_config_table:
 * the engine loads it and hands stage_chunk to the transports, whose
 * target side stages device memory in buffers of that size too. */
struct mc_devmem_config {
	uint64_t stage_chunk;
	int64_t stage_buffers;
};

extern const struct mc_config_entry mc_devmem_config_table[];
extern const size_t mc_devmem_config_table_len;

struct mc_devstream; /* an ordered queue of copies on one device (backend-defined) */
struct mc_devevent;  /* marks the completion of one copy (backend-defined) */

struct mc_devmem_ops {
	const char *name;
	/* device index of the memory at ptr, or -1 for host memory (an index, not a status) */
	int (*ptr_device)(const void *ptr);
	/* page-locked host memory, the source and sink of asynchronous copies */
	mc_status (*host_alloc)(size_t len, void **out);
	void (*host_free)(void *p);
	/* device memory (tests and tools) */
	mc_status (*dev_alloc)(int dev, size_t len, void **out);
	void (*dev_free)(void *p);
	mc_status (*stream_new)(int dev, struct mc_devstream **out);
	void (*stream_free)(struct mc_devstream *s);
	/* an event usable with streams of s's device */
	mc_status (*event_new)(struct mc_devstream *s, struct mc_devevent **out);
	void (*event_free)(struct mc_devevent *ev);
	/* Queue a copy of len bytes on s (either side may be device memory);
	 * ev completes when it has. */
	mc_status (*copy_async)(struct mc_devstream *s, void *dst, const void *src, size_t len,
				struct mc_devevent *ev);
	/* MC_OK once ev's copy finished, MC_INPROGRESS before, else an error */
	mc_status (*event_query)(struct mc_devevent *ev);
	mc_status (*event_wait)(struct mc_devevent *ev);
	/* synchronous copy, either side may be device memory */
	mc_status (*copy)(void *dst, const void *src, size_t len);
};

/* The active backend, probed once (CUDA when built and a device is
 * present); NULL when device memory is not supported here. */
const struct mc_devmem_ops *mc_devmem(void);
/* Tests only, before any engine exists: use ops (NULL: none) from now on. */
void mc_devmem_set_backend(const struct mc_devmem_ops *ops);
/* N for a location "cuda:N", -1 for any other (a device index, not a status). */
int mc_devmem_location_device(const char *location);

#ifdef MC_HAVE_CUDA
/* mem/devmem_cuda.c: the CUDA backend, or NULL (logged) when libcudart
 * cannot be loaded or sees no device. */
const struct mc_devmem_ops *mc_devmem_cuda_probe(void);
#endif

/* ---- staging: pinned bounce buffers for one thread ---------------------- */

struct mc_devstage_buf {
	uint8_t *host;
	struct mc_devevent *ev;
	int ev_dev; /* device ev belongs to, -1 none */
	bool busy;  /* a copy into or out of it may be in flight */
};

struct mc_devstage {
	const struct mc_devmem_ops *ops;
	size_t chunk; /* bytes per buffer */
	unsigned n;
	struct mc_devstage_buf *bufs;
	void *block; /* the pinned allocation behind every buffer */
	struct mc_devstream *streams[MC_DEVMEM_MAX_DEVICES];
};

/* n buffers of chunk bytes, pinned. */
mc_status mc_devstage_init(struct mc_devstage *st, const struct mc_devmem_ops *ops, unsigned n,
			   size_t chunk);
/* Waits for copies in flight, then frees. */
void mc_devstage_release(struct mc_devstage *st);
/* Queue a copy of len (<= chunk) bytes between buffer i and device dev's
 * memory; buffer i must be idle (mc_devstage_wait). */
mc_status mc_devstage_copy(struct mc_devstage *st, unsigned i, int dev, void *dst, const void *src,
			   size_t len);
/* MC_OK when buffer i is idle (its last copy succeeded), MC_INPROGRESS
 * while its copy runs, else the copy's error. */
mc_status mc_devstage_query(struct mc_devstage *st, unsigned i);
/* Wait until buffer i is idle; its copy's status. */
mc_status mc_devstage_wait(struct mc_devstage *st, unsigned i);
/* Wait for every buffer; the first error. */
mc_status mc_devstage_drain(struct mc_devstage *st);

static inline uint8_t *mc_devstage_host(struct mc_devstage *st, unsigned i)
{
	return st->bufs[i].host;
}

#endif

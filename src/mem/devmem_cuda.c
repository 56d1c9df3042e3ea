/*
 * mem/devmem_cuda.c - the CUDA device-memory backend.
 *
 * Built only with the cuda feature (meson -Dcuda=enabled, or auto when the
 * toolkit is found).  The toolkit's headers are used at build time, for the
 * types and prototypes; the runtime is loaded with dlopen() the first time
 * an engine asks for a backend, so libmooncake.so has no link-time
 * dependency on libcudart and still loads, and runs host-only, on machines
 * without the CUDA runtime, the driver or a GPU.  Linking libcudart with an
 * rpath would instead make every program using the library fail to start
 * wherever libcudart is missing, which is the common case for CPU-only
 * deployments of a wheel built on a CUDA machine.
 *
 * Candidates, in order: the soname of the runtime we were built against
 * (libcudart.so.<major>, through the loader's path and ld.so.cache), the
 * same file in the toolkit found at build time, then libcudart.so.  The
 * backend is active when every symbol resolves and cudaGetDeviceCount()
 * reports at least one device.
 *
 * Streams are created non-blocking, so staging copies never wait behind the
 * application's work on the legacy default stream; every copy is
 * cudaMemcpyAsync(cudaMemcpyDefault) (unified addressing tells the
 * direction) followed by cudaEventRecord on the buffer's event.
 */
#define MC_LOG_MODULE "cuda"
#include "mem/devmem.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/log.h"
#include "mooncake/status.h"

#define STR_(x) #x
#define STR(x)	STR_(x)

static struct {
	void *lib;
#define CU_FN(name) __typeof__(&name) name
	CU_FN(cudaGetDeviceCount);
	CU_FN(cudaSetDevice);
	CU_FN(cudaGetErrorString);
	CU_FN(cudaPointerGetAttributes);
	CU_FN(cudaHostAlloc);
	CU_FN(cudaFreeHost);
	CU_FN(cudaMalloc);
	CU_FN(cudaFree);
	CU_FN(cudaStreamCreateWithFlags);
	CU_FN(cudaStreamDestroy);
	CU_FN(cudaEventCreateWithFlags);
	CU_FN(cudaEventDestroy);
	CU_FN(cudaEventRecord);
	CU_FN(cudaEventQuery);
	CU_FN(cudaEventSynchronize);
	CU_FN(cudaMemcpyAsync);
	CU_FN(cudaMemcpy);
	CU_FN(cudaGetLastError);
#undef CU_FN
} cu;

struct mc_devstream {
	cudaStream_t s;
	int dev;
};

struct mc_devevent {
	cudaEvent_t e;
	int dev;
};

static mc_status cu_fail(cudaError_t err, const char *what)
{
	return mc_set_error(MC_ERR_CONTEXT, "%s: %s", what, cu.cudaGetErrorString(err));
}

/* A device index or -1, not a status (see the ops table). */
static int cuda_ptr_device(const void *ptr)
{
	struct cudaPointerAttributes a;
	cudaError_t err = cu.cudaPointerGetAttributes(&a, ptr);
	if (err != cudaSuccess) {
		cu.cudaGetLastError(); /* not sticky, but clear it for the caller */
		return -1;
	}
	/* managed memory is reachable from the host: it needs no staging */
	return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

static mc_status cuda_host_alloc(size_t len, void **out)
{
	cudaError_t err = cu.cudaHostAlloc(out, len, cudaHostAllocPortable);
	return err == cudaSuccess ? MC_OK : cu_fail(err, "cudaHostAlloc");
}

static void cuda_host_free(void *p)
{
	cu.cudaFreeHost(p);
}

static mc_status cuda_dev_alloc(int dev, size_t len, void **out)
{
	cudaError_t err = cu.cudaSetDevice(dev);
	if (err == cudaSuccess)
		err = cu.cudaMalloc(out, len);
	return err == cudaSuccess ? MC_OK : cu_fail(err, "cudaMalloc");
}

static void cuda_dev_free(void *p)
{
	cu.cudaFree(p);
}

static mc_status cuda_stream_new(int dev, struct mc_devstream **out)
{
	struct mc_devstream *s = mc_calloc(1, sizeof(*s));
	cudaError_t err;
	if (!s)
		return MC_ERR_NOMEM;
	s->dev = dev;
	err = cu.cudaSetDevice(dev);
	if (err == cudaSuccess)
		err = cu.cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
	if (err != cudaSuccess) {
		mc_free(s);
		return cu_fail(err, "cudaStreamCreate");
	}
	*out = s;
	return MC_OK;
}

static void cuda_stream_free(struct mc_devstream *s)
{
	cu.cudaSetDevice(s->dev);
	cu.cudaStreamDestroy(s->s);
	mc_free(s);
}

static mc_status cuda_event_new(struct mc_devstream *s, struct mc_devevent **out)
{
	struct mc_devevent *e = mc_calloc(1, sizeof(*e));
	cudaError_t err;
	if (!e)
		return MC_ERR_NOMEM;
	e->dev = s->dev;
	err = cu.cudaSetDevice(s->dev);
	if (err == cudaSuccess)
		err = cu.cudaEventCreateWithFlags(&e->e, cudaEventDisableTiming);
	if (err != cudaSuccess) {
		mc_free(e);
		return cu_fail(err, "cudaEventCreate");
	}
	*out = e;
	return MC_OK;
}

static void cuda_event_free(struct mc_devevent *e)
{
	cu.cudaSetDevice(e->dev);
	cu.cudaEventDestroy(e->e);
	mc_free(e);
}

static mc_status cuda_copy_async(struct mc_devstream *s, void *dst, const void *src, size_t len,
				 struct mc_devevent *ev)
{
	cudaError_t err = cu.cudaSetDevice(s->dev);
	if (err == cudaSuccess)
		err = cu.cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s->s);
	if (err == cudaSuccess)
		err = cu.cudaEventRecord(ev->e, s->s);
	return err == cudaSuccess ? MC_OK : cu_fail(err, "cudaMemcpyAsync");
}

static mc_status cuda_event_query(struct mc_devevent *ev)
{
	cudaError_t err = cu.cudaEventQuery(ev->e);
	if (err == cudaSuccess)
		return MC_OK;
	if (err == cudaErrorNotReady)
		return MC_INPROGRESS;
	return cu_fail(err, "copy to or from device memory");
}

static mc_status cuda_event_wait(struct mc_devevent *ev)
{
	cudaError_t err = cu.cudaEventSynchronize(ev->e);
	return err == cudaSuccess ? MC_OK : cu_fail(err, "copy to or from device memory");
}

static mc_status cuda_copy(void *dst, const void *src, size_t len)
{
	cudaError_t err = cu.cudaMemcpy(dst, src, len, cudaMemcpyDefault);
	return err == cudaSuccess ? MC_OK : cu_fail(err, "cudaMemcpy");
}

static const struct mc_devmem_ops cuda_ops = {
	.name = "cuda",
	.ptr_device = cuda_ptr_device,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.dev_alloc = cuda_dev_alloc,
	.dev_free = cuda_dev_free,
	.stream_new = cuda_stream_new,
	.stream_free = cuda_stream_free,
	.event_new = cuda_event_new,
	.event_free = cuda_event_free,
	.copy_async = cuda_copy_async,
	.event_query = cuda_event_query,
	.event_wait = cuda_event_wait,
	.copy = cuda_copy,
};

static void *open_cudart(void)
{
	static const char *const names[] = {
		"libcudart.so." STR(MC_CUDART_MAJOR),
#ifdef MC_CUDA_LIBDIR
		MC_CUDA_LIBDIR "/libcudart.so." STR(MC_CUDART_MAJOR),
#endif
		"libcudart.so",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (h) {
			mc_debug("loaded %s", names[i]);
			return h;
		}
		mc_debug("dlopen %s: %s", names[i], dlerror());
	}
	return NULL;
}

const struct mc_devmem_ops *mc_devmem_cuda_probe(void)
{
	int n = 0;
	cudaError_t err;

	cu.lib = open_cudart();
	if (!cu.lib) {
		mc_info("no CUDA runtime (libcudart.so.%d): device memory unsupported",
			MC_CUDART_MAJOR);
		return NULL;
	}
#define CU_LOAD(name)                                                                    \
	do {                                                                             \
		*(void **)&cu.name = dlsym(cu.lib, #name);                               \
		if (!cu.name) {                                                          \
			mc_info("libcudart lacks %s: device memory unsupported", #name); \
			return NULL;                                                     \
		}                                                                        \
	} while (0)
	CU_LOAD(cudaGetDeviceCount);
	CU_LOAD(cudaSetDevice);
	CU_LOAD(cudaGetErrorString);
	CU_LOAD(cudaPointerGetAttributes);
	CU_LOAD(cudaHostAlloc);
	CU_LOAD(cudaFreeHost);
	CU_LOAD(cudaMalloc);
	CU_LOAD(cudaFree);
	CU_LOAD(cudaStreamCreateWithFlags);
	CU_LOAD(cudaStreamDestroy);
	CU_LOAD(cudaEventCreateWithFlags);
	CU_LOAD(cudaEventDestroy);
	CU_LOAD(cudaEventRecord);
	CU_LOAD(cudaEventQuery);
	CU_LOAD(cudaEventSynchronize);
	CU_LOAD(cudaMemcpyAsync);
	CU_LOAD(cudaMemcpy);
	CU_LOAD(cudaGetLastError);
#undef CU_LOAD
	err = cu.cudaGetDeviceCount(&n);
	if (err != cudaSuccess || n <= 0) {
		mc_info("no CUDA device (%s): device memory unsupported",
			err != cudaSuccess ? cu.cudaGetErrorString(err) : "count 0");
		return NULL;
	}
	mc_info("CUDA: %d device(s); device memory is staged through pinned buffers", n);
	return &cuda_ops;
}

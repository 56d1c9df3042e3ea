/*
 * transport/local.c - the same-engine path: requests whose target is the
 * engine's own segment are memcpy'd, after the same bounds check the TCP
 * server applies (the target range must lie inside registered memory).
 *
 * Small requests are copied in the submitting thread.  Requests of at least
 * MC_LOCAL_PARALLEL_MIN bytes are cut into chunks shared by a small pool of
 * copy threads (MC_LOCAL_COPY_THREADS) and the submitter itself; the last
 * chunk to finish completes the slice.  Submission therefore never waits for
 * another thread.
 *
 * Device memory on either side (mem/devmem.h) is never touched directly: the
 * backend's synchronous copy moves it, in the submitting thread (requests
 * whose local buffer is device memory are not staged for this transport).
 *
 * Checksummed slices (slice.checksum; docs/design.md, "Transfer checksums")
 * are copied in the submitting thread: the source is hashed before the copy
 * and the destination after it, and a difference fails the slice with
 * MC_ERR_CHECKSUM_MISMATCH (the destination then holds whatever the copy
 * left).  Device memory is not hashed: such a slice fails with
 * MC_ERR_NOT_SUPPORTED rather than complete unchecked.
 */
#define MC_LOG_MODULE "local"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/log.h"
#include "base/xsum.h"
#include "mem/devmem.h"
#include "mem/memreg.h"
#include "transport/slice.h"
#include "transport/transport.h"

struct copy_job {
	struct mc_list node;
	struct mc_slice *slice;
	struct mc_memreg_entry *ent;
	atomic_uint *chunks_left; /* shared by a slice's chunks; last one frees it */
	char *dst;
	const char *src;
	size_t len;
};

struct local_config {
	int64_t copy_threads;
	uint64_t parallel_min;
};

#define CFG(f) offsetof(struct local_config, f)
static const struct mc_config_entry local_config_table[] = {
	{.f = {"local_copy_threads", "MC_LOCAL_COPY_THREADS", "2",
	       "threads copying large local requests", CFG(copy_threads), MC_CONFIG_INT, 0, 64}},
	{.f = {"local_parallel_min", "MC_LOCAL_PARALLEL_MIN", "8m",
	       "local requests at least this large are copied by several threads",
	       CFG(parallel_min), MC_CONFIG_SIZE, 4096, 1ll << 40}},
};
#undef CFG

struct local_transport {
	struct mc_transport base;
	struct mc_memreg *memreg;
	const struct mc_devmem_ops *devmem;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct mc_list jobs;
	bool stop;
	unsigned nthreads;
	pthread_t *threads;
	uint64_t parallel_min;
};

static void chunk_done(struct local_transport *lt, struct copy_job *j)
{
	if (atomic_fetch_sub(j->chunks_left, 1) == 1) {
		mc_memreg_put(lt->memreg, j->ent);
		mc_free(j->chunks_left);
		mc_slice_done(j->slice, MC_OK);
	}
}

static void *copy_main(void *arg)
{
	struct local_transport *lt = arg;
	pthread_mutex_lock(&lt->lock);
	for (;;) {
		struct copy_job *j;
		while (!lt->stop && mc_list_empty(&lt->jobs))
			pthread_cond_wait(&lt->cond, &lt->lock);
		if (mc_list_empty(&lt->jobs))
			break; /* stopping and drained */
		j = mc_list_first(&lt->jobs, struct copy_job, node);
		mc_list_del(&j->node);
		pthread_mutex_unlock(&lt->lock);
		memcpy(j->dst, j->src, j->len);
		chunk_done(lt, j);
		mc_free(j);
		pthread_mutex_lock(&lt->lock);
	}
	pthread_mutex_unlock(&lt->lock);
	return NULL;
}

/* Split one large slice over the pool and this thread; false if it could not. */
static bool copy_parallel(struct local_transport *lt, struct mc_slice *s,
			  struct mc_memreg_entry *ent, char *dst, const char *src)
{
	unsigned parts = lt->nthreads + 1;
	size_t per = (size_t)(s->len / parts) & ~(size_t)4095;
	struct copy_job *jobs[65];
	atomic_uint *left;

	if (per == 0 || parts > MC_ARRAY_SIZE(jobs))
		return false;
	left = mc_malloc(sizeof(*left));
	if (!left)
		return false;
	for (unsigned i = 0; i < parts; i++) {
		jobs[i] = mc_calloc(1, sizeof(*jobs[i]));
		if (!jobs[i]) {
			while (i-- > 0)
				mc_free(jobs[i]);
			mc_free(left);
			return false;
		}
	}
	atomic_init(left, parts);
	for (unsigned i = 0; i < parts; i++) {
		size_t off = (size_t)i * per;
		jobs[i]->slice = s;
		jobs[i]->ent = ent;
		jobs[i]->chunks_left = left;
		jobs[i]->dst = dst + off;
		jobs[i]->src = src + off;
		jobs[i]->len = i == parts - 1 ? (size_t)s->len - off : per;
	}
	pthread_mutex_lock(&lt->lock);
	for (unsigned i = 1; i < parts; i++)
		mc_list_add_tail(&lt->jobs, &jobs[i]->node);
	pthread_cond_broadcast(&lt->cond);
	pthread_mutex_unlock(&lt->lock);
	memcpy(jobs[0]->dst, jobs[0]->src, jobs[0]->len);
	chunk_done(lt, jobs[0]);
	mc_free(jobs[0]);
	return true;
}

/* A checksummed slice: hash the source, copy (memmove: overlap leaves the
 * destination equal to the source as it was), hash the destination. */
static mc_status copy_checked(const struct mc_slice *s, char *dst, const char *src)
{
	uint64_t want = mc_xsum_sent(src, (size_t)s->len);
	memmove(dst, src, (size_t)s->len);
	if (mc_xsum(dst, (size_t)s->len) == want)
		return MC_OK;
	mc_error("local %s of %llu bytes at 0x%llx: checksum mismatch",
		 s->opcode == MC_OP_WRITE ? "write" : "read", (unsigned long long)s->len,
		 (unsigned long long)s->remote_addr);
	return MC_ERR_CHECKSUM_MISMATCH;
}

static mc_status local_submit(struct mc_transport *base, struct mc_peer *peer,
			      struct mc_slice **slices, size_t n)
{
	struct local_transport *lt = mc_container_of(base, struct local_transport, base);
	(void)peer;
	for (size_t i = 0; i < n; i++) {
		struct mc_slice *s = slices[i];
		const char *why;
		struct mc_memreg_entry *ent = mc_memreg_acquire(lt->memreg, s->remote_addr, s->len,
								s->opcode == MC_OP_WRITE, &why);
		char *remote = (char *)(uintptr_t)s->remote_addr;
		char *dst = s->opcode == MC_OP_WRITE ? remote : s->local;
		const char *src = s->opcode == MC_OP_WRITE ? s->local : remote;

		if (!ent) {
			mc_info("local %s of %llu bytes at 0x%llx rejected: %s",
				s->opcode == MC_OP_WRITE ? "write" : "read",
				(unsigned long long)s->len, (unsigned long long)s->remote_addr,
				why);
			mc_slice_done(s, MC_ERR_ADDRESS_NOT_REGISTERED);
			continue;
		}
		if (ent->dev >= 0 ||
		    mc_memreg_ptr_device(lt->memreg, lt->devmem, s->local, s->len) >= 0) {
			int rc;
			if (s->checksum) {
				mc_error("local %s of %llu bytes: checksums are not taken on "
					 "device memory",
					 s->opcode == MC_OP_WRITE ? "write" : "read",
					 (unsigned long long)s->len);
				mc_memreg_put(lt->memreg, ent);
				mc_slice_done(s, MC_ERR_NOT_SUPPORTED);
				continue;
			}
			rc = lt->devmem->copy(dst, src, (size_t)s->len);
			mc_memreg_put(lt->memreg, ent);
			mc_slice_done(s, rc);
			continue;
		}
		if (s->checksum) {
			mc_status rc = copy_checked(s, dst, src);
			mc_memreg_put(lt->memreg, ent);
			mc_slice_done(s, rc);
			continue;
		}
		if (lt->nthreads && s->len >= lt->parallel_min &&
		    copy_parallel(lt, s, ent, dst, src))
			continue;
		memmove(dst, src, (size_t)s->len);
		mc_memreg_put(lt->memreg, ent);
		mc_slice_done(s, MC_OK);
	}
	return MC_OK;
}

static void local_close(struct mc_transport *base)
{
	struct local_transport *lt = mc_container_of(base, struct local_transport, base);
	pthread_mutex_lock(&lt->lock);
	lt->stop = true;
	pthread_cond_broadcast(&lt->cond);
	pthread_mutex_unlock(&lt->lock);
	for (unsigned i = 0; i < lt->nthreads; i++)
		pthread_join(lt->threads[i], NULL);
	mc_free(lt->threads);
	pthread_mutex_destroy(&lt->lock);
	pthread_cond_destroy(&lt->cond);
	mc_free(lt);
}

static mc_status local_open(const struct mc_transport_env *env, struct mc_transport **out)
{
	struct local_transport *lt = mc_calloc(1, sizeof(*lt));
	struct local_config cfg;
	unsigned want;
	if (!lt)
		return MC_ERR_NOMEM;
	mc_config_entry_defaults(local_config_table, MC_ARRAY_SIZE(local_config_table), &cfg);
	mc_config_entry_load_env(local_config_table, MC_ARRAY_SIZE(local_config_table), &cfg);
	want = (unsigned)cfg.copy_threads;
	lt->base.ops = &mc_local_transport_ops;
	lt->memreg = env->memreg;
	lt->devmem = env->devmem;
	lt->parallel_min = cfg.parallel_min;
	pthread_mutex_init(&lt->lock, NULL);
	pthread_cond_init(&lt->cond, NULL);
	mc_list_init(&lt->jobs);
	lt->threads = mc_calloc(want ? want : 1, sizeof(*lt->threads));
	if (!lt->threads) {
		local_close(&lt->base);
		return MC_ERR_NOMEM;
	}
	for (unsigned i = 0; i < want; i++) {
		if (pthread_create(&lt->threads[i], NULL, copy_main, lt) != 0)
			break;
		lt->nthreads++;
	}
	*out = &lt->base;
	return MC_OK;
}

const struct mc_transport_ops mc_local_transport_ops = {
	.name = "local",
	.caps = {.local = true, .same_host = true, .device_memory = true, .optional = false},
	.config = local_config_table,
	.nconfig = MC_ARRAY_SIZE(local_config_table),
	.open = local_open,
	.close = local_close,
	.peer_open = mc_transport_no_peer_open,
	.peer_failed = mc_transport_no_peer_failed,
	.peer_reset = mc_transport_no_peer_reset,
	.submit = local_submit,
	.fill_desc = mc_transport_no_fill_desc,
	.split = mc_transport_no_split,
	.data_port = mc_transport_no_data_port,
};

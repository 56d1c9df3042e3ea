/*
 * mem/memreg.c - the table of registered memory (mem/memreg.h).
 *
 * A sorted array of non-overlapping ranges behind a rwlock: lookups (every
 * incoming request, on worker threads) take the read lock for a binary
 * search; registration changes take the write lock.  Each entry counts the
 * requests touching it; deregistration unlinks the entry first (so no new
 * request can find it) and then waits on a condition variable until the
 * count drops to zero, so memory is never unmapped under an in-flight copy.
 */
#define MC_LOG_MODULE "memreg"
#include "mem/memreg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "mem/devmem.h"
#include "meta/desc.h"

void mc_memreg_init(struct mc_memreg *r)
{
	memset(r, 0, sizeof(*r));
	pthread_rwlock_init(&r->lock, NULL);
	pthread_mutex_init(&r->wait_lock, NULL);
	pthread_cond_init(&r->wait_cond, NULL);
}

void mc_memreg_release(struct mc_memreg *r)
{
	for (size_t i = 0; i < r->n; i++)
		mc_free(r->v[i]);
	mc_free(r->v);
	pthread_rwlock_destroy(&r->lock);
	pthread_mutex_destroy(&r->wait_lock);
	pthread_cond_destroy(&r->wait_cond);
	memset(r, 0, sizeof(*r));
}

/* Index of the first entry with addr > a. */
static size_t upper_bound_locked(struct mc_memreg *r, uint64_t a)
{
	size_t lo = 0, hi = r->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->v[mid]->addr <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

mc_status mc_memreg_add(struct mc_memreg *r, uint64_t addr, uint64_t len, const char *location,
			int dev, bool remote)
{
	struct mc_memreg_entry *e;
	size_t pos;
	mc_status rc = MC_OK;

	if (!addr || !len || addr + len < addr)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register: bad range 0x%llx+%llu",
				    (unsigned long long)addr, (unsigned long long)len);
	e = mc_calloc(1, sizeof(*e));
	if (!e)
		return MC_ERR_NOMEM;
	e->addr = addr;
	e->length = len;
	e->remote_accessible = remote;
	e->dev = dev;
	snprintf(e->location, sizeof(e->location), "%s", location && *location ? location : "*");

	pthread_rwlock_wrlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if ((pos > 0 && r->v[pos - 1]->addr + r->v[pos - 1]->length > addr) ||
	    (pos < r->n && r->v[pos]->addr < addr + len)) {
		rc = mc_set_error(MC_ERR_ADDRESS_OVERLAPPED,
				  "register: 0x%llx+%llu overlaps a registered range",
				  (unsigned long long)addr, (unsigned long long)len);
		goto out_unlock;
	}
	if (r->n == r->cap) {
		size_t ncap = r->cap ? r->cap * 2 : 16;
		void *nv = mc_realloc(r->v, ncap * sizeof(*r->v));
		if (!nv) {
			rc = MC_ERR_NOMEM;
			goto out_unlock;
		}
		r->v = nv;
		r->cap = ncap;
	}
	memmove(&r->v[pos + 1], &r->v[pos], (r->n - pos) * sizeof(*r->v));
	r->v[pos] = e;
	r->n++;
	e = NULL;
out_unlock:
	pthread_rwlock_unlock(&r->lock);
	mc_free(e);
	return rc;
}

mc_status mc_memreg_remove(struct mc_memreg *r, uint64_t addr)
{
	struct mc_memreg_entry *e = NULL;
	size_t pos;

	pthread_rwlock_wrlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if (pos > 0 && r->v[pos - 1]->addr == addr) {
		e = r->v[pos - 1];
		memmove(&r->v[pos - 1], &r->v[pos], (r->n - pos) * sizeof(*r->v));
		r->n--;
	}
	pthread_rwlock_unlock(&r->lock);
	if (!e)
		return mc_set_error(MC_ERR_ADDRESS_NOT_REGISTERED,
				    "deregister: no range starts at 0x%llx",
				    (unsigned long long)addr);

	pthread_mutex_lock(&r->wait_lock);
	atomic_fetch_add(&r->ndying, 1);
	while (atomic_load(&e->users) > 0)
		pthread_cond_wait(&r->wait_cond, &r->wait_lock);
	atomic_fetch_sub(&r->ndying, 1);
	pthread_mutex_unlock(&r->wait_lock);
	mc_free(e);
	return MC_OK;
}

struct mc_memreg_entry *mc_memreg_acquire(struct mc_memreg *r, uint64_t addr, uint64_t len)
{
	struct mc_memreg_entry *e = NULL;
	size_t pos;

	if (!len || addr + len < addr)
		return NULL;
	pthread_rwlock_rdlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if (pos > 0) {
		struct mc_memreg_entry *c = r->v[pos - 1];
		if (c->remote_accessible && addr >= c->addr && addr + len <= c->addr + c->length) {
			e = c;
			atomic_fetch_add(&e->users, 1);
		}
	}
	pthread_rwlock_unlock(&r->lock);
	return e;
}

/* e must not be touched after the decrement: a waiting remover may free it
 * at once.  Hence the registry-wide ndying, not a flag in e. */
void mc_memreg_put(struct mc_memreg *r, struct mc_memreg_entry *e)
{
	if (atomic_fetch_sub(&e->users, 1) == 1 && atomic_load(&r->ndying) > 0) {
		pthread_mutex_lock(&r->wait_lock);
		pthread_cond_broadcast(&r->wait_cond);
		pthread_mutex_unlock(&r->wait_lock);
	}
}

bool mc_memreg_device(struct mc_memreg *r, uint64_t addr, uint64_t len, int *dev_out)
{
	bool found = false;
	size_t pos;

	if (addr + len < addr)
		return false;
	pthread_rwlock_rdlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if (pos > 0) {
		struct mc_memreg_entry *c = r->v[pos - 1];
		if (addr >= c->addr && addr + len <= c->addr + c->length) {
			*dev_out = c->dev;
			found = true;
		}
	}
	pthread_rwlock_unlock(&r->lock);
	return found;
}

int mc_memreg_ptr_device(struct mc_memreg *r, const struct mc_devmem_ops *devmem, const void *p,
			 uint64_t len)
{
	int dev;
	if (!devmem || !len)
		return -1;
	if (mc_memreg_device(r, (uint64_t)(uintptr_t)p, len, &dev))
		return dev;
	return devmem->ptr_device(p);
}

mc_status mc_memreg_nth(struct mc_memreg *r, size_t index, uint64_t *addr_out, uint64_t *length_out)
{
	mc_status rc = MC_OK;
	pthread_rwlock_rdlock(&r->lock);
	if (index < r->n) {
		*addr_out = r->v[index]->addr;
		*length_out = r->v[index]->length;
	} else {
		rc = MC_ERR_NOT_FOUND;
	}
	pthread_rwlock_unlock(&r->lock);
	return rc;
}

mc_status mc_memreg_fill_desc(struct mc_memreg *r, const char *name, struct mc_seg_desc *desc)
{
	mc_status rc = MC_OK;
	pthread_rwlock_rdlock(&r->lock);
	desc->buffers = mc_calloc(r->n ? r->n : 1, sizeof(*desc->buffers));
	if (!desc->buffers) {
		rc = MC_ERR_NOMEM;
		goto out;
	}
	desc->nbuffers = 0;
	for (size_t i = 0; i < r->n; i++) {
		struct mc_seg_buffer *b;
		if (!r->v[i]->remote_accessible)
			continue;
		b = &desc->buffers[desc->nbuffers];
		b->name = mc_strdup(name);
		if (!b->name) {
			rc = MC_ERR_NOMEM;
			goto out;
		}
		b->addr = r->v[i]->addr;
		b->length = r->v[i]->length;
		desc->nbuffers++;
	}
out:
	pthread_rwlock_unlock(&r->lock);
	return rc;
}

/*
 * mem/memreg.c - the table of registered memory (mem/memreg.h).
 *
 * A sorted array of non-overlapping ranges behind a rwlock: lookups (every
 * incoming request, on worker threads) take the read lock for a binary
 * search; registration changes take the write lock.  Each entry counts the
 * requests touching it; deregistration unlinks the entry first (so no new
 * request can find it) and then waits on a condition variable until the
 * count drops to zero, so memory is never unmapped under an in-flight copy.
 * The count covers both sides: requests this process serves (taken by the
 * transports, mc_memreg_acquire) and the local buffers of its own tasks
 * (taken by the engine at submit, mc_memreg_hold, dropped when the task
 * ends).  The wait is bounded (MC_TE_DEREGISTER_WAIT_MS): past its
 * deadline the entry goes on the cut list, and each transport worker, at
 * its next tick, closes the connections still using a cut entry (their
 * slices fail, their served requests end); the remover then waits for
 * those users to drain, which no longer depends on any peer.  Copies that
 * do not use a connection (the local and same-host transports' memcpy)
 * are bounded by themselves and are not cut.
 *
 * Before a host range goes in, mc_memreg_check_mapped makes sure the
 * process can read and write all of it: a registration is published to
 * peers at once, and the first remote write into an unmapped or read-only
 * page would kill this process (SIGSEGV in a memcpy) rather than fail one
 * request.  Two probes, neither of which touches a byte of the range, so
 * both are safe while other threads use the memory: msync(MS_ASYNC) over
 * the page-aligned range (a no-op since Linux 2.6.19 apart from walking
 * the VMAs; ENOMEM for any hole), then one pass over /proc/self/maps for
 * the permissions of the VMAs that cover it (msync cannot see a PROT_NONE
 * guard page or a read-only mapping).  Reading the range with
 * process_vm_readv would fault in every page of a lazily mapped segment,
 * and writing it back to test writability races with writers; mincore
 * says nothing about permissions.  Registration is a slow path; the maps
 * pass costs a few tens of microseconds per hundred mappings.
 */
#define MC_LOG_MODULE "memreg"
#include "mem/memreg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "mem/devmem.h"
#include "meta/desc.h"

void mc_memreg_init(struct mc_memreg *r)
{
	pthread_condattr_t ca;

	memset(r, 0, sizeof(*r));
	pthread_rwlock_init(&r->lock, NULL);
	pthread_mutex_init(&r->wait_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->wait_cond, &ca);
	pthread_condattr_destroy(&ca);
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
			int dev, bool remote, bool read_only)
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
	e->read_only = read_only;
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

/* Wait on wait_cond until e has no users or deadline_ms passes (0: no
 * deadline); true when it has none.  Caller holds wait_lock. */
static bool wait_drained_locked(struct mc_memreg *r, struct mc_memreg_entry *e,
				uint64_t deadline_ms)
{
	while (atomic_load(&e->users) > 0) {
		struct timespec ts;
		if (!deadline_ms) {
			pthread_cond_wait(&r->wait_cond, &r->wait_lock);
			continue;
		}
		if (mc_now_ms() >= deadline_ms)
			return false;
		ts.tv_sec = (time_t)(deadline_ms / 1000);
		ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
		pthread_cond_timedwait(&r->wait_cond, &r->wait_lock, &ts);
	}
	return true;
}

mc_status mc_memreg_remove(struct mc_memreg *r, uint64_t addr, uint64_t deadline_ms, int *cut_out)
{
	struct mc_memreg_entry *e = NULL;
	size_t pos;
	int cut = 0;

	pthread_rwlock_wrlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if (pos > 0 && r->v[pos - 1]->addr == addr) {
		e = r->v[pos - 1];
		memmove(&r->v[pos - 1], &r->v[pos], (r->n - pos) * sizeof(*r->v));
		r->n--;
	}
	pthread_rwlock_unlock(&r->lock);
	if (cut_out)
		*cut_out = 0;
	if (!e)
		return mc_set_error(MC_ERR_ADDRESS_NOT_REGISTERED,
				    "deregister: no range starts at 0x%llx",
				    (unsigned long long)addr);

	pthread_mutex_lock(&r->wait_lock);
	atomic_fetch_add(&r->ndying, 1);
	if (!wait_drained_locked(r, e, deadline_ms)) {
		struct mc_memreg_entry **pp;
		cut = atomic_load(&e->users);
		atomic_store(&e->cut, true);
		e->next_cut = r->cut_list;
		r->cut_list = e;
		atomic_fetch_add_explicit(&r->ncut, 1, memory_order_release);
		(void)wait_drained_locked(r, e, 0);
		for (pp = &r->cut_list; *pp != e; pp = &(*pp)->next_cut)
			;
		*pp = e->next_cut;
		atomic_fetch_sub(&r->ncut, 1);
	}
	atomic_fetch_sub(&r->ndying, 1);
	pthread_mutex_unlock(&r->wait_lock);
	if (cut)
		mc_warn("deregister 0x%llx+%llu: %d transfer(s) still used it at the deadline; "
			"their connections were cut",
			(unsigned long long)e->addr, (unsigned long long)e->length, cut);
	if (cut_out)
		*cut_out = cut;
	mc_free(e);
	return MC_OK;
}

bool mc_memreg_cut_overlaps(struct mc_memreg *r, uint64_t addr, uint64_t len)
{
	bool hit = false;

	if (!mc_memreg_cut_pending(r))
		return false;
	pthread_mutex_lock(&r->wait_lock);
	for (struct mc_memreg_entry *e = r->cut_list; e && !hit; e = e->next_cut)
		hit = addr < e->addr + e->length && e->addr < addr + len;
	pthread_mutex_unlock(&r->wait_lock);
	return hit;
}

struct mc_memreg_entry *mc_memreg_hold(struct mc_memreg *r, uint64_t addr, uint64_t len)
{
	struct mc_memreg_entry *e = NULL;
	size_t pos;

	if (!len || addr + len < addr)
		return NULL;
	pthread_rwlock_rdlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if (pos > 0) {
		struct mc_memreg_entry *c = r->v[pos - 1];
		if (addr >= c->addr && addr + len <= c->addr + c->length) {
			e = c;
			atomic_fetch_add(&e->users, 1);
		}
	}
	pthread_rwlock_unlock(&r->lock);
	return e;
}

struct mc_memreg_entry *mc_memreg_acquire(struct mc_memreg *r, uint64_t addr, uint64_t len,
					  bool write, const char **why_out)
{
	struct mc_memreg_entry *e = NULL;
	const char *why = "not inside registered memory";
	size_t pos;

	if (!len || addr + len < addr)
		goto out;
	pthread_rwlock_rdlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if (pos > 0) {
		struct mc_memreg_entry *c = r->v[pos - 1];
		if (c->remote_accessible && addr >= c->addr && addr + len <= c->addr + c->length) {
			if (write && c->read_only) {
				why = "a write into read-only registered memory";
			} else {
				e = c;
				atomic_fetch_add(&e->users, 1);
				if (write) { /* a max, so the pre-fault knows the front */
					uint_fast64_t end = addr + len,
						      cur = atomic_load_explicit(
							      &e->write_end, memory_order_relaxed);
					while (end > cur &&
					       !atomic_compare_exchange_weak_explicit(
						       &e->write_end, &cur, end,
						       memory_order_relaxed, memory_order_relaxed))
						;
				}
			}
		}
	}
	pthread_rwlock_unlock(&r->lock);
out:
	if (why_out)
		*why_out = e ? NULL : why;
	return e;
}

uint64_t mc_memreg_write_end(struct mc_memreg *r, uint64_t addr)
{
	uint64_t end = 0;
	size_t pos;

	pthread_rwlock_rdlock(&r->lock);
	pos = upper_bound_locked(r, addr);
	if (pos > 0) {
		struct mc_memreg_entry *c = r->v[pos - 1];
		if (addr >= c->addr && addr < c->addr + c->length)
			end = atomic_load_explicit(&c->write_end, memory_order_relaxed);
	}
	pthread_rwlock_unlock(&r->lock);
	return end;
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

bool mc_memreg_device(struct mc_memreg *r, uint64_t addr, uint64_t len, int *dev_out, bool *ro_out)
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
			if (ro_out)
				*ro_out = c->read_only;
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
	if (mc_memreg_device(r, (uint64_t)(uintptr_t)p, len, &dev, NULL))
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

/* ---- mapping check ---------------------------------------------------------------------- */

#define MAPS_PASSES 3 /* reads of /proc/self/maps before a range is refused */

/* The permissions of the VMAs covering [start, end), from /proc/self/maps:
 * MC_OK when every byte is readable and writable.  *skipped is set when
 * the file cannot be read (no /proc), which leaves only the msync probe. */
static mc_status maps_check(uint64_t start, uint64_t end, uint64_t addr, uint64_t len,
			    bool read_only, bool *skipped)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char *line = NULL;
	size_t cap = 0;
	uint64_t cur = start;
	mc_status rc = MC_OK;

	*skipped = !f;
	if (!f)
		return MC_OK;
	while (cur < end && getline(&line, &cap, f) > 0) {
		char *e;
		uint64_t lo = strtoull(line, &e, 16), hi;
		if (*e != '-')
			continue;
		hi = strtoull(e + 1, &e, 16);
		if (*e != ' ' || hi <= cur)
			continue;
		if (lo > cur)
			break; /* a hole (unmapped since the msync probe) */
		if (e[1] != 'r' || (!read_only && e[2] != 'w')) {
			rc = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "register: 0x%llx+%llu: page 0x%llx is mapped %.4s, not "
					  "readable%s",
					  (unsigned long long)addr, (unsigned long long)len,
					  (unsigned long long)cur, e + 1,
					  read_only ? "" : " and writable");
			goto out;
		}
		cur = hi;
	}
	if (cur < end)
		rc = mc_set_error(
			MC_ERR_INVALID_PARAMS, "register: 0x%llx+%llu: 0x%llx is not mapped",
			(unsigned long long)addr, (unsigned long long)len, (unsigned long long)cur);
out:
	free(line); /* getline's, from libc malloc */
	fclose(f);
	return rc;
}

mc_status mc_memreg_check_mapped(uint64_t addr, uint64_t len, bool read_only)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), start, end;
	bool skipped;
	mc_status rc;

	if (!len || addr + len < addr || addr + len > UINT64_MAX - pg)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register: bad range 0x%llx+%llu",
				    (unsigned long long)addr, (unsigned long long)len);
	start = addr & ~(pg - 1);
	end = (addr + len + pg - 1) & ~(pg - 1);
	if (msync((void *)(uintptr_t)start, (size_t)(end - start), MS_ASYNC) != 0)
		return mc_set_error(
			MC_ERR_INVALID_PARAMS, "register: 0x%llx+%llu is not mapped (%s)",
			(unsigned long long)addr, (unsigned long long)len, strerror(errno));
	/* A refusal is read again before it counts: /proc/self/maps comes a
	 * page at a time, and mappings that other threads change between two
	 * reads (an allocator's, a sanitizer's) can make one pass miss or split
	 * a line; a real hole or read-only page is there on every pass. */
	for (int pass = 0; pass < MAPS_PASSES; pass++) {
		rc = maps_check(start, end, addr, len, read_only, &skipped);
		if (rc == MC_OK)
			break;
	}
	if (skipped)
		mc_debug("register: no /proc/self/maps; 0x%llx+%llu checked as mapped only",
			 (unsigned long long)addr, (unsigned long long)len);
	return rc;
}

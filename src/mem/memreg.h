/*
 * mem/memreg.h - the table of registered memory (mem/memreg.c).
 *
 * The engine adds and removes ranges (mc_te_register and friends, on the
 * caller's thread); the transports look a target range up before a byte
 * of an incoming request is touched (mc_memreg_acquire, on their worker
 * threads) and hold a user reference on the entry while they copy; the
 * engine holds one for the local side of each of its own tasks
 * (mc_memreg_hold).  So deregistration waits for in-flight copies instead
 * of racing them: until a deadline, after which the entry is marked cut
 * (the transports close the connections still using it, at their next
 * tick: mc_memreg_cut_pending, mc_memreg_cut_overlaps) and the remover
 * waits for those to let go.
 * Entries say which device a range belongs to (mem/devmem.h), -1 for host
 * memory.  The engine checks that host ranges are mapped and writable
 * before adding them (mc_memreg_check_mapped) and that the local side of
 * every request lies inside one entry (mc_memreg_device).
 */
#ifndef MC_MEM_MEMREG_H
#define MC_MEM_MEMREG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_devmem_ops;
struct mc_seg_desc;

struct mc_memreg_entry {
	uint64_t addr;
	uint64_t length;
	char location[32];
	int dev; /* device memory of device dev (mem/devmem.h), or -1: host memory */
	bool remote_accessible;
	bool read_only;	  /* peers may read it, never write it (MC_TE_REGISTER_READ_ONLY) */
	atomic_int users; /* requests touching it right now: served, or our own tasks' */
	atomic_bool cut;  /* its deadline passed: transports close connections using it */
	struct mc_memreg_entry *next_cut; /* on the registry's cut list (wait_lock) */
	/* the end (an address) of the highest incoming write so far: what the
	 * segment pre-fault follows (mem/hostmem.h); 0 before the first */
	atomic_uint_fast64_t write_end;
};

struct mc_memreg {
	pthread_rwlock_t lock;
	struct mc_memreg_entry **v; /* sorted by addr, non-overlapping */
	size_t n, cap;
	pthread_mutex_t wait_lock;
	pthread_cond_t wait_cond;
	atomic_uint ndying; /* removers waiting for an entry's users to drain */
	atomic_uint ncut;   /* entries on the cut list: transports look when non-zero */
	struct mc_memreg_entry *cut_list; /* unlinked, cut, users not yet drained (wait_lock) */
};

void mc_memreg_init(struct mc_memreg *r);
void mc_memreg_release(struct mc_memreg *r);
mc_status mc_memreg_add(struct mc_memreg *r, uint64_t addr, uint64_t len, const char *location,
			int dev, bool remote, bool read_only);
/* Unlink the range starting at addr, then wait until no request uses it:
 * until deadline_ms (mc_now_ms clock; 0 = no bound), then mark it cut and
 * wait for the transports to close what still uses it.  Returns MC_OK when
 * it is gone; *cut_out (may be NULL) counts the users it had to cut. */
mc_status mc_memreg_remove(struct mc_memreg *r, uint64_t addr, uint64_t deadline_ms, int *cut_out);
/* Any entry (remotely accessible or not) holding [addr, addr+len), with a
 * user reference taken (drop it with mc_memreg_put); NULL when none does or
 * len is 0.  For the local side of the engine's own tasks. */
struct mc_memreg_entry *mc_memreg_hold(struct mc_memreg *r, uint64_t addr, uint64_t len);
/* Some entry is cut and still used: the transports must look (one load). */
static inline bool mc_memreg_cut_pending(struct mc_memreg *r)
{
	return atomic_load_explicit(&r->ncut, memory_order_acquire) != 0;
}
/* [addr, addr+len) overlaps an entry that is cut. */
bool mc_memreg_cut_overlaps(struct mc_memreg *r, uint64_t addr, uint64_t len);
/* If [addr, addr+len) lies inside one remotely accessible entry, and write
 * is false or the entry is not read-only, take a user reference on it and
 * return it; NULL otherwise (len 0 or overflow too).  *why_out (may be
 * NULL) says which: "not inside registered memory" or "read-only". */
struct mc_memreg_entry *mc_memreg_acquire(struct mc_memreg *r, uint64_t addr, uint64_t len,
					  bool write, const char **why_out);
void mc_memreg_put(struct mc_memreg *r, struct mc_memreg_entry *e);
/* The write_end of the entry that holds addr; 0 when none does. */
uint64_t mc_memreg_write_end(struct mc_memreg *r, uint64_t addr);
/* If [addr, addr+len) lies inside one entry (remotely accessible or not),
 * true and its device (-1 for host memory) in *dev_out, and whether it is
 * read-only in *ro_out (may be NULL). */
bool mc_memreg_device(struct mc_memreg *r, uint64_t addr, uint64_t len, int *dev_out, bool *ro_out);
/* The device of memory at [p, p+len): the entry's device when the range is
 * registered, else what the backend says of the pointer; -1 for host
 * memory (always without a backend, or for len 0). */
int mc_memreg_ptr_device(struct mc_memreg *r, const struct mc_devmem_ops *devmem, const void *p,
			 uint64_t len);
/* The index-th range in address order (remotely accessible or not);
 * MC_ERR_NOT_FOUND past the end. */
mc_status mc_memreg_nth(struct mc_memreg *r, size_t index, uint64_t *addr_out,
			uint64_t *length_out);
/* Copy the ranges into desc->buffers (named name), for publishing. */
mc_status mc_memreg_fill_desc(struct mc_memreg *r, const char *name, struct mc_seg_desc *desc);
/* [addr, addr+len) is host memory this process may read and write: every
 * page mapped, readable and writable, as a registration must be (peers
 * write into it, local reads land in it); with read_only, readable is
 * enough (nothing will write it).  MC_ERR_INVALID_PARAMS with a message
 * otherwise.  A snapshot: it cannot stop a later munmap. */
mc_status mc_memreg_check_mapped(uint64_t addr, uint64_t len, bool read_only);

#endif

/*
 * mem/hostmem.h - host memory the library maps for itself (the store's
 * global segment): huge pages where the system has them, and pages
 * faulted in ahead of the bytes that will land in them.
 *
 * The first write to a lazily mapped page costs a fault, and the kernel
 * zeroes the page inside it: puts into a freshly mounted segment ran at a
 * fifth of the speed of puts into memory touched once.  A mapping here is
 *
 *   - backed by explicit huge pages (hugetlbfs, MC_STORE_USE_HUGEPAGE and
 *     MC_STORE_HUGEPAGE_SIZE 2MB|1GB) when asked for and the system has
 *     them reserved, else by normal pages advised for transparent huge
 *     pages (MADV_HUGEPAGE); a huge-page request the system cannot meet
 *     falls back with one logged line, never a failed mapping;
 *   - pre-faulted by MC_STORE_PREFAULT: "mount" (the default) populates it
 *     all before the mapping is handed out, "background" has a thread
 *     populate it ahead of the puts at MC_STORE_PREFAULT_RATE bytes per
 *     second (setup returns at once): it walks up from the start, and
 *     when the puts outrun it (the master's allocator fills a fresh
 *     segment from its start, so what they touched is a prefix, and its
 *     end is the allocator's high-water mark as this process sees it:
 *     the engine's count of incoming writes when mc_hostmem_follow gave
 *     it, else mincore) it jumps past them, so it faults the pages the
 *     next puts will write rather than the ones they are writing; it stays
 *     at most MC_STORE_PREFAULT_LEAD past a followed front; a second pass
 *     fills what it jumped over and is still untouched.  "off" leaves it
 *     lazy, so an untouched segment costs no memory.
 *
 * Populating uses MADV_POPULATE_WRITE, which faults pages in without
 * changing their contents, so it is safe while other threads (a
 * transport's workers writing a put) use the same pages, and it takes no
 * lock of ours.  Before and while populating, the memory the process may
 * still take is checked (the cgroup's memory.max less memory.current, and
 * the system's MemAvailable): pre-faulting stops short of it with one
 * logged line saying how much was populated and why it stopped, so it
 * never drives the machine into reclaim or the OOM killer.
 */
#ifndef MC_MEM_HOSTMEM_H
#define MC_MEM_HOSTMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "mooncake/status.h"

enum mc_prefault_mode {
	MC_PREFAULT_OFF,
	MC_PREFAULT_MOUNT,
	MC_PREFAULT_BACKGROUND,
};

struct mc_hostmem_config {
	bool use_hugepage;	/* MC_STORE_USE_HUGEPAGE */
	char *hugepage_size;	/* MC_STORE_HUGEPAGE_SIZE: "2MB" or "1GB" */
	char *prefault;		/* MC_STORE_PREFAULT: off | mount | background */
	uint64_t prefault_rate; /* MC_STORE_PREFAULT_RATE: bytes/s, 0 = unlimited */
	uint64_t prefault_lead; /* MC_STORE_PREFAULT_LEAD: bytes past the write front */
};

extern const struct mc_config_entry mc_hostmem_config_table[];
extern const size_t mc_hostmem_config_table_len;

/* The defaults overlaid with the environment; release with
 * mc_config_entry_release(mc_hostmem_config_table, ...). */
void mc_hostmem_config_load(struct mc_hostmem_config *c);

struct mc_hostmem;

struct mc_hostmem_stats {
	uint64_t len;	     /* bytes mapped */
	uint64_t populated;  /* bytes pre-faulted so far (or found written first) */
	uint64_t faulted;    /* of those, the bytes the pre-fault faulted in itself */
	uint64_t huge_bytes; /* bytes backed by huge pages now (either kind) */
	const char *pages;   /* "hugetlb 2MB", "hugetlb 1GB", "thp" or "4k" */
	enum mc_prefault_mode prefault;
	bool prefault_done; /* the whole mapping populated, or populating stopped */
};

/*
 * Maps at least size bytes aligned to align (a power of two; 0 for 2 MiB
 * when size is at least that, else the page size) for what (named in the log), as c says.
 * MC_ERR_INVALID_PARAMS (size 0, bad align or config), MC_ERR_NOMEM (the address space).
 */
mc_status mc_hostmem_map(uint64_t size, uint64_t align, const struct mc_hostmem_config *c,
			 const char *what, struct mc_hostmem **out);
void *mc_hostmem_addr(const struct mc_hostmem *m);
size_t mc_hostmem_len(const struct mc_hostmem *m);
/* A snapshot; huge_bytes reads /proc/self/smaps (a few milliseconds). */
void mc_hostmem_stats(const struct mc_hostmem *m, struct mc_hostmem_stats *st);
/* Populates [off, off+len) of the mapping now (clamped to it), within the
 * same memory limits; MC_OK, or MC_ERR_NOMEM when a limit or the kernel
 * stopped it (logged once). */
mc_status mc_hostmem_populate(struct mc_hostmem *m, size_t off, size_t len);
/* The end of the highest write into the mapping so far, as an offset from
 * its start (called on the pre-fault thread; must not block). */
typedef uint64_t (*mc_hostmem_front_fn)(void *arg);
/* background: from now on the thread takes the write front from fn
 * instead of mincore, and stays at most MC_STORE_PREFAULT_LEAD bytes past
 * it; fn(arg) must stay callable until mc_hostmem_unmap.  fn NULL: back
 * to mincore. */
void mc_hostmem_follow(struct mc_hostmem *m, mc_hostmem_front_fn fn, void *arg);
/* Waits for the background thread to finish populating (tests, benches). */
void mc_hostmem_wait_prefault(struct mc_hostmem *m);
/* Stops the background thread, then unmaps. */
void mc_hostmem_unmap(struct mc_hostmem *m);

/*
 * Faults in the pages under n buffers of host memory the caller just took
 * from its allocator to read into (a copying get's destinations): the
 * pages of each run of buffers whose pages touch that mincore finds
 * missing, one MADV_POPULATE_WRITE per missing span.  Memory that was
 * freed and trimmed back to the kernel (glibc returns the top of its heap
 * on free once it exceeds M_TRIM_THRESHOLD, 128 KiB by default) is lazily
 * mapped again, and a read landing in it took one fault per 4 KiB page
 * inside the transport's receive: populating it in one call first costs
 * about half as much, and the mincore about 2 us per 2 MiB when the pages
 * are still there.  Runs under 256 KiB or over 64 MiB are left alone
 * (mem/hostmem.c says why).  Best effort: a run the kernel refuses
 * (before 5.14, a hole, memory it cannot populate) is left to fault as
 * before.  Contents are never changed, so pages other threads use may
 * share a run.
 */
void mc_hostmem_populate_bufs(void *const *bufs, const size_t *lens, size_t n);

/* Bytes the process may still take before a memory limit (the cgroup's
 * and the system's available memory, the smaller), or UINT64_MAX when
 * neither can be read. */
uint64_t mc_hostmem_headroom(void);

#endif

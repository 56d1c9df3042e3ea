/*
 * mem/hostmem.c - segment memory with huge pages and pre-faulting; see
 * hostmem.h.
 *
 * The background thread populates CHUNK bytes at a time, ahead of the
 * write front (the one mc_hostmem_follow gave, else found with mincore),
 * and paces itself to the configured rate with a sleep between chunks
 * (pacing, not
 * synchronisation: nothing waits for it but mc_hostmem_wait_prefault,
 * which waits on a condition variable).  Every HEADROOM_EVERY bytes it
 * checks the memory the process may still take and stops short of it.
 */
#define MC_LOG_MODULE "hostmem"
#include "mem/hostmem.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define CHUNK	       (2ull << 20)
#define HEADROOM_EVERY (256ull << 20)
#define HEADROOM_KEEP  (256ull << 20) /* left to everything else, at least */
#define FOLLOW_POLL_MS 5	      /* a followed front is read this often when ahead */

static bool check_hugepage_size(const char *value, char *why, size_t why_len)
{
	if (strcmp(value, "2MB") == 0 || strcmp(value, "1GB") == 0)
		return true;
	snprintf(why, why_len, "must be 2MB or 1GB");
	return false;
}

static bool check_prefault(const char *value, char *why, size_t why_len)
{
	if (!strcmp(value, "off") || !strcmp(value, "mount") || !strcmp(value, "background"))
		return true;
	snprintf(why, why_len, "must be off, mount or background");
	return false;
}

#define CFG(f) offsetof(struct mc_hostmem_config, f)
const struct mc_config_entry mc_hostmem_config_table[] = {
	{.f = {"store_use_hugepage", "MC_STORE_USE_HUGEPAGE", "false",
	       "back the store's global segment with explicit huge pages (hugetlbfs; reserve them "
	       "in /proc/sys/vm/nr_hugepages); without enough reserved, normal pages with "
	       "transparent huge pages, and one logged line",
	       CFG(use_hugepage), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"store_hugepage_size", "MC_STORE_HUGEPAGE_SIZE", "2MB",
	       "size of the explicit huge pages: 2MB or 1GB", CFG(hugepage_size), MC_CONFIG_STRING,
	       0, 0},
	 .check = check_hugepage_size},
	{.f = {"store_prefault", "MC_STORE_PREFAULT", "mount",
	       "fault the global segment's pages in ahead of use: mount (all of it before setup "
	       "returns), background (a thread, at store_prefault_rate, ahead of the puts' "
	       "high-water mark, so setup returns at once) or off (lazy: untouched memory costs "
	       "nothing); never past the memory the cgroup and the system leave",
	       CFG(prefault), MC_CONFIG_STRING, 0, 0},
	 .check = check_prefault},
	{.f = {"store_prefault_rate", "MC_STORE_PREFAULT_RATE", "2g",
	       "background pre-faulting: bytes per second (0 = as fast as it goes)",
	       CFG(prefault_rate), MC_CONFIG_SIZE, 0, 1ll << 40}},
	{.f = {"store_prefault_lead", "MC_STORE_PREFAULT_LEAD", "256m",
	       "background pre-faulting: how far past the end of the highest write into the "
	       "segment so far the thread populates, then waits for the writes to move on (0 = "
	       "the whole segment at once)",
	       CFG(prefault_lead), MC_CONFIG_SIZE, 0, 1ll << 50}},
};
#undef CFG
const size_t mc_hostmem_config_table_len = MC_ARRAY_SIZE(mc_hostmem_config_table);

void mc_hostmem_config_load(struct mc_hostmem_config *c)
{
	memset(c, 0, sizeof(*c));
	mc_config_entry_defaults(mc_hostmem_config_table, mc_hostmem_config_table_len, c);
	mc_config_entry_load_env(mc_hostmem_config_table, mc_hostmem_config_table_len, c);
}

struct mc_hostmem {
	void *map; /* what mmap returned */
	size_t map_len;
	uint8_t *addr; /* aligned start handed out */
	size_t len;
	const char *pages;
	enum mc_prefault_mode prefault;
	uint64_t rate;
	uint64_t lead;
	char what[64];
	atomic_uint_fast64_t populated; /* bytes pre-faulted, or found written by the pre-fault */
	atomic_uint_fast64_t faulted;	/* of which the pre-fault faulted in itself */
	atomic_bool stop;
	bool thread_started;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_cond_t stop_cond;     /* unmap wakes a thread waiting for writes */
	bool done;		      /* under lock */
	mc_hostmem_front_fn front_fn; /* under lock */
	void *front_arg;	      /* under lock */
};

/* ---- memory limits ----------------------------------------------------------------------- */

/* A number from a one-line file, or UINT64_MAX ("max", unreadable). */
static uint64_t read_u64_file(const char *path)
{
	char buf[64];
	FILE *f = fopen(path, "re");
	unsigned long long v;
	if (!f)
		return UINT64_MAX;
	if (!fgets(buf, sizeof(buf), f) || sscanf(buf, "%llu", &v) != 1)
		v = UINT64_MAX;
	fclose(f);
	return v;
}

/* memory.max - memory.current of the process's cgroup (v2), or UINT64_MAX. */
static uint64_t cgroup_headroom(void)
{
	char line[512], path[600];
	FILE *f = fopen("/proc/self/cgroup", "re");
	uint64_t max, cur;
	if (!f)
		return UINT64_MAX;
	path[0] = '\0';
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s", line + 3);
			break;
		}
	fclose(f);
	if (!path[0])
		return UINT64_MAX;
	{
		char p[640];
		snprintf(p, sizeof(p), "%s/memory.max", path);
		max = read_u64_file(p);
		snprintf(p, sizeof(p), "%s/memory.current", path);
		cur = read_u64_file(p);
	}
	if (max == UINT64_MAX || cur == UINT64_MAX)
		return UINT64_MAX;
	return max > cur ? max - cur : 0;
}

/* A /proc/meminfo field in bytes, or UINT64_MAX. */
static uint64_t meminfo(const char *field)
{
	char line[256], fmt[64];
	FILE *f = fopen("/proc/meminfo", "re");
	unsigned long long kb;
	uint64_t v = UINT64_MAX;
	if (!f)
		return UINT64_MAX;
	snprintf(fmt, sizeof(fmt), "%s: %%llu kB", field);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, fmt, &kb) == 1) {
			v = (uint64_t)kb * 1024;
			break;
		}
	fclose(f);
	return v;
}

uint64_t mc_hostmem_headroom(void)
{
	uint64_t a = cgroup_headroom(), b = meminfo("MemAvailable");
	return a < b ? a : b;
}

/* ---- populating -------------------------------------------------------------------------- */

/* Faults [p, p+n) in without changing it: 0, or an errno. */
static int populate(uint8_t *p, size_t n)
{
	if (madvise(p, n, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno != EINVAL)
		return errno;
	/* kernels before 5.14: mlock faults the pages in, munlock leaves them */
	if (mlock(p, n) != 0)
		return errno;
	munlock(p, n);
	return 0;
}

/* A run shorter than this is left to fault: the calls cost a few
 * microseconds even when every page is there, about what a few faults
 * cost, and glibc seldom trims so little (it keeps M_TRIM_THRESHOLD at
 * the top of its heap), so small-object batches (32 x 4 KiB) stay free of
 * them. */
#define POPULATE_BUFS_MIN (256u << 10)
/* A run longer than this is left to the receive too: populating it here
 * would hold the calling thread before any byte moves, where the
 * transport's workers fault it in on several lanes at once while the
 * bytes come. */
#define POPULATE_BUFS_MAX (64ull << 20)

/* Populates the pages of [lo, hi) that are not resident.  mincore first:
 * MADV_POPULATE_WRITE walks every page it is given one at a time, which
 * cost a 2 MiB run about 20 us when all were there, mincore about 2. */
static void populate_run(uintptr_t lo, uintptr_t hi, uintptr_t page)
{
	unsigned char vec[1024];

	if (hi - lo < POPULATE_BUFS_MIN || hi - lo > POPULATE_BUFS_MAX)
		return;
	for (uintptr_t at = lo; at < hi;) {
		size_t np = MC_MIN((size_t)((hi - at) / page), sizeof(vec));

		if (mincore((void *)at, np * page, vec) != 0)
			return; /* a hole: the read will say */
		for (size_t p = 0, q; p < np; p = q) {
			for (q = p; q < np && !(vec[q] & 1); q++)
				;
			if (q > p)
				(void)madvise((void *)(at + p * page), (q - p) * page,
					      MADV_POPULATE_WRITE);
			else
				q++;
		}
		at += np * page;
	}
}

void mc_hostmem_populate_bufs(void *const *bufs, const size_t *lens, size_t n)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = 0, hi = 0;

	for (size_t i = 0; i < n; i++) {
		uintptr_t a, b;

		if (!bufs[i] || !lens[i])
			continue;
		a = (uintptr_t)bufs[i] & ~(page - 1);
		b = ((uintptr_t)bufs[i] + lens[i] + page - 1) & ~(page - 1);
		if (hi > lo && a <= hi && b >= lo) { /* touches the run: grows it */
			lo = MC_MIN(lo, a);
			hi = MC_MAX(hi, b);
			continue;
		}
		populate_run(lo, hi, page);
		lo = a;
		hi = b;
	}
	populate_run(lo, hi, page);
}

/* How many more bytes may be populated now, at most want: all but what
 * is left to everything else (HEADROOM_KEEP, or an eighth of the
 * machine's memory when that is more). */
static size_t allowed(size_t want, const char **why)
{
	uint64_t room = mc_hostmem_headroom(), total = meminfo("MemTotal");
	uint64_t keep = HEADROOM_KEEP;
	*why = NULL;
	if (room == UINT64_MAX)
		return want;
	if (total != UINT64_MAX && total / 8 > keep)
		keep = total / 8;
	if (room <= keep) {
		*why = "the memory the cgroup and the system leave";
		return 0;
	}
	if (want > room - keep) {
		*why = "the memory the cgroup and the system leave";
		return (size_t)((room - keep) & ~(CHUNK - 1));
	}
	return want;
}

/* Whether the page at off is resident (faulted in by anyone). */
static bool page_resident(const struct mc_hostmem *m, size_t off)
{
	unsigned char v = 0;
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)m->addr + off) & ~((uintptr_t)page - 1);
	return mincore((void *)a, 1, &v) == 0 && (v & 1);
}

/* Whether every page of [off, off+n) is resident. */
static bool range_resident(const struct mc_hostmem *m, size_t off, size_t n)
{
	unsigned char v[CHUNK / 4096];
	long page = sysconf(_SC_PAGESIZE);
	size_t np = (n + (size_t)page - 1) / (size_t)page;
	if (np > sizeof(v) || mincore(m->addr + off, n, v) != 0)
		return false;
	for (size_t i = 0; i < np; i++)
		if (!(v[i] & 1))
			return false;
	return true;
}

/*
 * The write front at or after off: off itself when its page is not
 * resident, else the first CHUNK boundary past it whose page is not
 * (galloping, then bisecting, so O(log n) mincore calls).  Puts fill a
 * fresh segment from its start (the master's allocator hands out the
 * lowest free block first), so what they have touched is a prefix and
 * its end is the allocator's high-water mark as this process sees it.
 */
static size_t write_front(const struct mc_hostmem *m, size_t off)
{
	size_t lo = off, hi, step = CHUNK;
	if (!page_resident(m, off))
		return off;
	for (;;) {
		hi = lo + step;
		if (hi >= m->len) {
			hi = m->len;
			break;
		}
		if (!page_resident(m, hi))
			break;
		lo = hi;
		step *= 2;
	}
	while (hi - lo > CHUNK) {
		size_t mid = lo + (((hi - lo) / 2) & ~(CHUNK - 1));
		if (mid <= lo)
			break;
		if (page_resident(m, mid))
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

struct prefault_run {
	uint64_t start_ns;
	uint64_t faulted; /* bytes this run populated itself (what the rate paces) */
	size_t budget;	  /* bytes the memory limits allow before the next check */
	const char *why;  /* stopped at a memory limit */
	int err;	  /* stopped by the kernel */
	size_t stop_at;	  /* where it stopped */
};

/* Populates [off, off+n) (n <= CHUNK), within the limits and paced to
 * the rate when paced; false when it stopped (run says why). */
static bool populate_chunk(struct mc_hostmem *m, struct prefault_run *r, size_t off, size_t n,
			   bool paced)
{
	if (r->budget < n) {
		r->budget = allowed(MC_MIN((size_t)HEADROOM_EVERY, m->len - off), &r->why);
		if (r->budget < n) {
			r->stop_at = off;
			return false;
		}
	}
	r->err = populate(m->addr + off, n);
	if (r->err) {
		r->stop_at = off;
		return false;
	}
	r->budget -= n;
	r->faulted += n;
	atomic_fetch_add(&m->faulted, n);
	atomic_fetch_add(&m->populated, n);
	if (paced && m->rate) {
		uint64_t due = r->start_ns + (uint64_t)((double)r->faulted * 1e9 / (double)m->rate);
		uint64_t now = mc_now_ns();
		if (due > now) {
			struct timespec ts = {(time_t)((due - now) / 1000000000ull),
					      (long)((due - now) % 1000000000ull)};
			nanosleep(&ts, NULL);
		}
	}
	return true;
}

static void report(struct mc_hostmem *m, const struct prefault_run *r)
{
	uint64_t pop = atomic_load(&m->populated);
	if (r->err)
		mc_warn("%s: pre-faulted %" PRIu64
			" of %zu bytes, then stopped at offset %zu: %s%s",
			m->what, pop, m->len, r->stop_at, strerror(r->err),
			r->err == ENOMEM || r->err == EPERM || r->err == EAGAIN
				? " (the cgroup's memory.max, RLIMIT_MEMLOCK on kernels before "
				  "5.14, or the huge pages reserved)"
				: "");
	else if (r->why)
		mc_warn("%s: pre-faulted %" PRIu64 " of %zu bytes, then stopped at %s", m->what,
			pop, m->len, r->why);
	else if (pop == m->len && r->faulted == pop)
		mc_info("%s: %zu bytes pre-faulted in %.2f s", m->what, m->len,
			(double)(mc_now_ns() - r->start_ns) / 1e9);
	else if (pop == m->len)
		mc_info("%s: %zu bytes pre-faulted in %.2f s (%" PRIu64 " by the pre-fault, the "
			"rest written first)",
			m->what, m->len, (double)(mc_now_ns() - r->start_ns) / 1e9, r->faulted);
}

/* mount: populates it all, now. */
static void populate_all(struct mc_hostmem *m)
{
	struct prefault_run r = {.start_ns = mc_now_ns()};
	for (size_t off = 0; off < m->len; off += CHUNK)
		if (!populate_chunk(m, &r, off, MC_MIN((size_t)CHUNK, m->len - off), false))
			break;
	report(m, &r);
}

/* Adds [from, to) to the list of ranges the first pass jumped over,
 * merging with the last one; false when the list cannot grow. */
static bool note_jump(size_t **skip, size_t *nskip, size_t *cap, size_t from, size_t to)
{
	if (*nskip && (*skip)[2 * *nskip - 1] == from) {
		(*skip)[2 * *nskip - 1] = to;
		return true;
	}
	if (*nskip == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		size_t *v = mc_realloc(*skip, ncap * 2 * sizeof(*v));
		if (!v)
			return false;
		*skip = v;
		*cap = ncap;
	}
	(*skip)[2 * *nskip] = from;
	(*skip)[2 * *nskip + 1] = to;
	(*nskip)++;
	return true;
}

/* The end of the highest write into the mapping so far, as an offset
 * (clamped to it), from the function mc_hostmem_follow set; false when
 * none is set. */
static bool followed_front(struct mc_hostmem *m, size_t *out)
{
	mc_hostmem_front_fn fn;
	void *arg;
	uint64_t f;

	pthread_mutex_lock(&m->lock);
	fn = m->front_fn;
	arg = m->front_arg;
	pthread_mutex_unlock(&m->lock);
	if (!fn)
		return false;
	f = fn(arg);
	*out = (size_t)MC_MIN(f, (uint64_t)m->len);
	return true;
}

/* Waits up to FOLLOW_POLL_MS for the writes to move on, or for unmap. */
static void wait_for_writes(struct mc_hostmem *m)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += FOLLOW_POLL_MS * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&m->lock);
	if (!atomic_load(&m->stop))
		pthread_cond_timedwait(&m->stop_cond, &m->lock, &ts);
	pthread_mutex_unlock(&m->lock);
}

/*
 * background: populates ahead of the puts.  The first pass walks up from
 * the start.  The write front is the end of the highest write so far:
 * from the function mc_hostmem_follow set (the engine's count of
 * incoming writes into the registered segment, the master allocator's
 * high-water mark as this holder sees it), else found with mincore (the
 * master's allocator fills a fresh segment from its lowest free block, so
 * what puts touched is a prefix).  When the front passes the thread, it
 * jumps there, noting the range it jumped over, so its work lands where
 * the next puts will write instead of faulting the pages they are
 * writing; with a followed front it stays at most MC_STORE_PREFAULT_LEAD
 * past it and waits for the writes to move on, so it does not spend the
 * CPU of the first puts on memory they will not reach for a while.  A
 * second pass then fills what was jumped over and is still untouched
 * (holes the allocator will hand out later).
 */
static void populate_background(struct mc_hostmem *m)
{
	struct prefault_run r = {.start_ns = mc_now_ns()};
	size_t *skip = NULL, nskip = 0, cap = 0; /* [from, to) pairs */
	size_t off = 0;
	bool ok = true, jumps = true; /* jumps: false once the jump list cannot grow */

	while (ok && off < m->len && !atomic_load(&m->stop)) {
		size_t front;
		bool followed = followed_front(m, &front);

		if (followed) {
			front = (front + CHUNK - 1) & ~(CHUNK - 1); /* its chunk is being written */
			front = MC_MIN(front, m->len);
			if (front <= off && m->lead && off >= front + m->lead) {
				wait_for_writes(m);
				continue;
			}
		} else {
			front = write_front(m, off);
		}
		if (jumps && front > off) {
			if (!note_jump(&skip, &nskip, &cap, off, front)) {
				jumps = false; /* walk on, over the touched pages */
				continue;
			}
			off = front;
			continue;
		}
		ok = populate_chunk(m, &r, off, MC_MIN((size_t)CHUNK, m->len - off), true);
		off += CHUNK;
	}
	for (size_t i = 0; ok && i < nskip && !atomic_load(&m->stop); i++)
		for (off = skip[2 * i]; ok && off < skip[2 * i + 1] && !atomic_load(&m->stop);
		     off += CHUNK) {
			size_t n = MC_MIN((size_t)CHUNK, skip[2 * i + 1] - off);
			if (range_resident(m, off, n))
				atomic_fetch_add(&m->populated, n); /* the puts faulted it */
			else
				ok = populate_chunk(m, &r, off, n, true);
		}
	mc_free(skip);
	if (!atomic_load(&m->stop))
		report(m, &r);
}

void mc_hostmem_follow(struct mc_hostmem *m, mc_hostmem_front_fn fn, void *arg)
{
	pthread_mutex_lock(&m->lock);
	m->front_fn = fn;
	m->front_arg = arg;
	pthread_mutex_unlock(&m->lock);
}

mc_status mc_hostmem_populate(struct mc_hostmem *m, size_t off, size_t len)
{
	const char *why = NULL;
	size_t ok;
	int err;

	if (off >= m->len)
		return MC_OK;
	len = MC_MIN(len, m->len - off);
	ok = allowed(len, &why);
	if (ok < len)
		return mc_set_error(MC_ERR_NOMEM, "%s: not pre-faulting %zu bytes: %s", m->what,
				    len, why ? why : "memory limit");
	err = populate(m->addr + off, len);
	if (err)
		return mc_set_error(MC_ERR_NOMEM, "%s: pre-faulting %zu bytes: %s", m->what, len,
				    strerror(err));
	return MC_OK;
}

static void mark_done(struct mc_hostmem *m)
{
	pthread_mutex_lock(&m->lock);
	m->done = true;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

static void *prefault_main(void *arg)
{
	struct mc_hostmem *m = arg;
	populate_background(m);
	mark_done(m);
	return NULL;
}

/* ---- mapping ----------------------------------------------------------------------------- */

static enum mc_prefault_mode prefault_mode(const char *s)
{
	if (s && !strcmp(s, "off"))
		return MC_PREFAULT_OFF;
	if (s && !strcmp(s, "background"))
		return MC_PREFAULT_BACKGROUND;
	return MC_PREFAULT_MOUNT;
}

static const char *mode_name(enum mc_prefault_mode p)
{
	return p == MC_PREFAULT_OFF ? "off" : p == MC_PREFAULT_MOUNT ? "mount" : "background";
}

/* Explicit huge pages: the aligned mapping, or NULL (logged once why). */
static void *map_hugetlb(size_t len, bool one_gb, size_t *len_out)
{
	size_t page = one_gb ? (1ull << 30) : (2ull << 20);
	size_t n = (len + page - 1) & ~(page - 1);
	int flags =
		MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | ((one_gb ? 30 : 21) << MAP_HUGE_SHIFT);
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (p == MAP_FAILED) {
		mc_warn("no %s huge pages for %zu bytes (%s; reserve them in "
			"/proc/sys/vm/nr_hugepages); using normal pages with transparent huge pages",
			one_gb ? "1GB" : "2MB", n, strerror(errno));
		return NULL;
	}
	*len_out = n;
	return p;
}

mc_status mc_hostmem_map(uint64_t size, uint64_t align, const struct mc_hostmem_config *c,
			 const char *what, struct mc_hostmem **out)
{
	long page = sysconf(_SC_PAGESIZE);
	struct mc_hostmem *m;
	size_t len, total;

	*out = NULL;
	if (align == 0) /* huge-page aligned when it can hold one, so THP can back it */
		align = size >= CHUNK ? CHUNK : (uint64_t)page;
	if (size == 0 || (align & (align - 1)) || size > SIZE_MAX / 2 || align > (1ull << 30))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "%s: cannot map %" PRIu64 " bytes aligned to %" PRIu64, what,
				    size, align);
	m = mc_calloc(1, sizeof(*m));
	if (!m)
		return mc_set_error(MC_ERR_NOMEM, "%s: no memory", what);
	snprintf(m->what, sizeof(m->what), "%s", what);
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->cond, NULL);
	{
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&m->stop_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	m->prefault = prefault_mode(c->prefault);
	m->rate = c->prefault_rate;
	m->lead = c->prefault_lead;
	len = (size_t)((size + (uint64_t)page - 1) & ~((uint64_t)page - 1));

	if (c->use_hugepage) {
		bool one_gb = c->hugepage_size && !strcmp(c->hugepage_size, "1GB");
		m->map = map_hugetlb(len, one_gb, &m->map_len);
		if (m->map) {
			/* hugetlb mappings are aligned to their page size */
			m->addr = m->map;
			m->len = m->map_len;
			m->pages = one_gb ? "hugetlb 1GB" : "hugetlb 2MB";
		}
	}
	if (!m->map) {
		uintptr_t p, a;
		total = len + (size_t)align;
		m->map = mmap(NULL, total, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m->map == MAP_FAILED) {
			mc_free(m);
			return mc_set_error(MC_ERR_NOMEM, "%s: mmap of %zu bytes failed: %s", what,
					    total, strerror(errno));
		}
		p = (uintptr_t)m->map;
		a = (p + (uintptr_t)align - 1) & ~((uintptr_t)align - 1);
		if (a > p)
			munmap(m->map, a - p);
		if (p + total > a + len)
			munmap((void *)(a + len), p + total - (a + len));
		m->map = (void *)a;
		m->map_len = len;
		m->addr = (uint8_t *)a;
		m->len = len;
		m->pages = "4k";
#ifdef MADV_HUGEPAGE
		if (madvise(m->addr, m->len, MADV_HUGEPAGE) == 0)
			m->pages = "thp";
#endif
	}
	mc_info("%s: %zu bytes, pages %s, prefault %s", what, m->len, m->pages,
		mode_name(m->prefault));
	if (m->prefault == MC_PREFAULT_MOUNT) {
		populate_all(m);
		m->done = true;
	} else if (m->prefault == MC_PREFAULT_BACKGROUND) {
		if (pthread_create(&m->thread, NULL, prefault_main, m) == 0) {
			m->thread_started = true;
			pthread_setname_np(m->thread, "mc-prefault");
		} else {
			mc_warn("%s: no pre-fault thread; pages fault in as they are used", what);
			m->done = true;
		}
	} else {
		m->done = true;
	}
	*out = m;
	return MC_OK;
}

void *mc_hostmem_addr(const struct mc_hostmem *m)
{
	return m->addr;
}

size_t mc_hostmem_len(const struct mc_hostmem *m)
{
	return m->len;
}

/* Bytes of [a, a+len) backed by huge pages, from /proc/self/smaps. */
static uint64_t huge_bytes(const struct mc_hostmem *m)
{
	uintptr_t lo = (uintptr_t)m->addr, hi = lo + m->len;
	char line[512];
	bool in = false;
	uint64_t sum = 0;
	FILE *f = fopen("/proc/self/smaps", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long s, e, kb;
		if (sscanf(line, "%llx-%llx ", &s, &e) == 2 &&
		    strchr(line, '-') < strchr(line, ' '))
			in = s < hi && e > lo;
		else if (in && (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1 ||
				sscanf(line, "Private_Hugetlb: %llu kB", &kb) == 1 ||
				sscanf(line, "Shared_Hugetlb: %llu kB", &kb) == 1))
			sum += (uint64_t)kb * 1024;
	}
	fclose(f);
	return sum;
}

void mc_hostmem_stats(const struct mc_hostmem *m, struct mc_hostmem_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->len = m->len;
	/* done first: the thread stores its last count before it marks done, so
	 * a report that says done carries the final count */
	pthread_mutex_lock((pthread_mutex_t *)&m->lock);
	st->prefault_done = m->done;
	pthread_mutex_unlock((pthread_mutex_t *)&m->lock);
	st->populated = atomic_load(&m->populated);
	st->faulted = atomic_load(&m->faulted);
	st->huge_bytes = huge_bytes(m);
	st->pages = m->pages;
	st->prefault = m->prefault;
}

void mc_hostmem_wait_prefault(struct mc_hostmem *m)
{
	pthread_mutex_lock(&m->lock);
	while (!m->done)
		pthread_cond_wait(&m->cond, &m->lock);
	pthread_mutex_unlock(&m->lock);
}

void mc_hostmem_unmap(struct mc_hostmem *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	atomic_store(&m->stop, true);
	pthread_cond_broadcast(&m->stop_cond);
	pthread_mutex_unlock(&m->lock);
	if (m->thread_started)
		pthread_join(m->thread, NULL);
	munmap(m->map, m->map_len);
	pthread_cond_destroy(&m->cond);
	pthread_cond_destroy(&m->stop_cond);
	pthread_mutex_destroy(&m->lock);
	mc_free(m);
}

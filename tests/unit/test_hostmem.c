/*
 * tests/unit/test_hostmem.c - segment memory (mem/hostmem.h): each
 * pre-fault mode populates what it promises and nothing more (checked
 * with the kernel's own accounting in /proc/self/smaps), background
 * populating leaves bytes written meanwhile intact, and a huge-page
 * request the system cannot meet falls back instead of failing; a copying
 * get's destinations are populated in runs (mc_hostmem_populate_bufs).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/time.h"
#include "mem/hostmem.h"
#include "mem/memreg.h"
#include "mooncake/te.h"
#include "support.h"

#define MiB (1ull << 20)

/* Resident bytes of [p, p+len) by the kernel's count. */
static uint64_t resident(const void *p, size_t len)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + len;
	char line[512];
	bool in = false;
	uint64_t sum = 0;
	FILE *f = fopen("/proc/self/smaps", "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long s, e, kb;
		if (sscanf(line, "%llx-%llx ", &s, &e) == 2 &&
		    strchr(line, '-') < strchr(line, ' '))
			in = s < hi && e > lo;
		else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1)
			sum += (uint64_t)kb * 1024;
	}
	fclose(f);
	return sum;
}

static struct mc_hostmem_config config(const char *prefault, uint64_t rate)
{
	struct mc_hostmem_config c;
	mc_config_entry_defaults(mc_hostmem_config_table, mc_hostmem_config_table_len, &c);
	free(c.prefault);
	c.prefault = strdup(prefault);
	c.prefault_rate = rate;
	return c;
}

static void release(struct mc_hostmem_config *c)
{
	mc_config_entry_release(mc_hostmem_config_table, mc_hostmem_config_table_len, c);
}

static void off_costs_nothing(void **state)
{
	struct mc_hostmem_config c = config("off", 0);
	struct mc_hostmem *m;
	struct mc_hostmem_stats st;
	(void)state;
	assert_int_equal(mc_hostmem_map(64 * MiB, 16 * MiB, &c, "test", &m), MC_OK);
	assert_int_equal((uintptr_t)mc_hostmem_addr(m) % (16 * MiB), 0);
	assert_int_equal(mc_hostmem_len(m), 64 * MiB);
	mc_hostmem_stats(m, &st);
	assert_int_equal(st.populated, 0);
	assert_true(st.prefault_done);
	assert_int_equal(st.prefault, MC_PREFAULT_OFF);
	assert_int_equal(resident(mc_hostmem_addr(m), mc_hostmem_len(m)), 0);
	/* one byte touched: one page (or one huge page) resident */
	((volatile uint8_t *)mc_hostmem_addr(m))[5 * MiB] = 1;
	assert_in_range(resident(mc_hostmem_addr(m), mc_hostmem_len(m)), 4096, 2 * MiB);
	mc_hostmem_unmap(m);
	release(&c);
}

static void mount_populates_all_before_returning(void **state)
{
	struct mc_hostmem_config c = config("mount", 0);
	struct mc_hostmem *m;
	struct mc_hostmem_stats st;
	(void)state;
	assert_int_equal(mc_hostmem_map(32 * MiB + 4096, 0, &c, "test", &m), MC_OK);
	mc_hostmem_stats(m, &st);
	assert_int_equal(st.len, 32 * MiB + 4096);
	assert_int_equal(st.populated, st.len);
	assert_true(st.prefault_done);
	assert_int_equal(resident(mc_hostmem_addr(m), mc_hostmem_len(m)), st.len);
	mc_hostmem_unmap(m);
	release(&c);
}

/* Background populating at a slow rate while this thread writes a
 * pattern ahead of it and behind it: every byte written survives. */
static void background_keeps_concurrent_writes(void **state)
{
	struct mc_hostmem_config c = config("background", 256 * MiB);
	struct mc_hostmem *m;
	struct mc_hostmem_stats st;
	uint8_t *p;
	size_t len = 64 * MiB;
	(void)state;
	assert_int_equal(mc_hostmem_map(len, 0, &c, "test", &m), MC_OK);
	p = mc_hostmem_addr(m);
	for (size_t off = 0; off < len; off += 1 * MiB)
		mc_test_fill(p + off, 4096, off);
	mc_hostmem_wait_prefault(m);
	mc_hostmem_stats(m, &st);
	assert_int_equal(st.populated, len);
	assert_true(st.prefault_done);
	assert_int_equal(resident(p, len), len);
	for (size_t off = 0; off < len; off += 1 * MiB) {
		uint8_t want[4096];
		mc_test_fill(want, sizeof(want), off);
		assert_memory_equal(p + off, want, sizeof(want));
		/* the rest of the page block is still zero */
		assert_int_equal(p[off + 8192], 0);
	}
	mc_hostmem_unmap(m);
	release(&c);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Faults [p, p+n) in as a fast writer would. */
static void touch(uint8_t *p, size_t n)
{
	if (madvise(p, n, MADV_POPULATE_WRITE) != 0)
		memset(p, 0, n); /* kernels before 5.14 */
}

/* Puts that outrun the background thread: it jumps past what they
 * touched instead of walking over it, so what it faults itself is about
 * the untouched rest (the upper half and the hole left below), and the
 * hole is still filled by its second pass.  The thread is slow (64 MiB/s)
 * so that the writes pass it at once even on a loaded machine. */
static void background_jumps_past_the_puts(void **state)
{
	struct mc_hostmem_config c = config("background", 64 * MiB);
	struct mc_hostmem *m;
	struct mc_hostmem_stats st;
	uint8_t *p;
	size_t len = 128 * MiB;
	(void)state;
	assert_int_equal(mc_hostmem_map(len, 0, &c, "test", &m), MC_OK);
	p = mc_hostmem_addr(m);
	/* the first 64 MiB but a 4 MiB hole, faster than 64 MiB/s (the
	 * kernel's populate: a memset under TSan is slower than the thread) */
	touch(p, 16 * MiB);
	touch(p + 20 * MiB, 44 * MiB);
	p[0] = 1;
	p[63 * MiB] = 1;
	mc_hostmem_wait_prefault(m);
	mc_hostmem_stats(m, &st);
	assert_int_equal(st.populated, len);
	assert_int_equal(resident(p, len), len);
	/* at least the upper half and the hole; walking over the written
	 * 60 MiB would make it 128 MiB (36 MiB of slack for the chunks the
	 * thread faulted before the writes passed it, on a loaded machine) */
	assert_in_range(st.faulted, 68 * MiB, 104 * MiB);
	assert_int_equal(p[0], 1);
	assert_int_equal(p[63 * MiB], 1);
	assert_int_equal(p[17 * MiB], 0);
	assert_int_equal(p[100 * MiB], 0);
	mc_hostmem_unmap(m);
	release(&c);
}

static atomic_uint_fast64_t test_front;

/* Resident bytes of [p, p+len) by mincore (smaps counts whole mappings). */
static uint64_t resident_in(const void *p, size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = len / pg;
	unsigned char *v = calloc(n, 1);
	uint64_t sum = 0;
	assert_non_null(v);
	assert_int_equal(mincore((void *)p, len, v), 0);
	for (size_t i = 0; i < n; i++)
		sum += (v[i] & 1) ? pg : 0;
	free(v);
	return sum;
}

static uint64_t test_front_fn(void *arg)
{
	(void)arg;
	return atomic_load(&test_front);
}

/* Waits (bounded) until the pre-fault has covered at least want bytes. */
static uint64_t wait_populated(struct mc_hostmem *m, uint64_t want)
{
	struct mc_hostmem_stats st;
	uint64_t deadline = mc_now_ms() + 20000;
	do {
		mc_hostmem_stats(m, &st);
		if (st.populated >= want)
			break;
		usleep(1000);
	} while (mc_now_ms() < deadline);
	return st.populated;
}

/* With a followed write front the thread populates at most the lead past
 * it, then waits; when the front moves it jumps there and goes on; a
 * front at the end lets it finish, holes included; unmap wakes it. */
static void background_follows_the_front(void **state)
{
	struct mc_hostmem_config c = config("background", 512 * MiB);
	struct mc_hostmem *m;
	struct mc_hostmem_stats st;
	uint8_t *p;
	size_t len = 128 * MiB;
	uint64_t t0;
	(void)state;
	c.prefault_lead = 16 * MiB;
	atomic_store(&test_front, 0);
	assert_int_equal(mc_hostmem_map(len, 0, &c, "test", &m), MC_OK);
	mc_hostmem_follow(m, test_front_fn, NULL);
	p = mc_hostmem_addr(m);
	assert_true(wait_populated(m, 16 * MiB) >= 16 * MiB);
	usleep(100 * 1000); /* 50 MiB more at the rate, were it not waiting */
	assert_in_range(resident_in(p, len), 16 * MiB, 18 * MiB);

	memset(p, 1, 64 * MiB); /* the puts' bytes, then their front */
	atomic_store(&test_front, 64 * MiB);
	assert_true(wait_populated(m, 32 * MiB) >= 32 * MiB);
	usleep(100 * 1000);
	assert_in_range(resident_in(p + 64 * MiB, 64 * MiB), 16 * MiB, 18 * MiB);

	atomic_store(&test_front, len);
	mc_hostmem_wait_prefault(m);
	mc_hostmem_stats(m, &st);
	assert_int_equal(st.populated, len);
	assert_int_equal(resident(p, len), len);
	assert_in_range(st.faulted, 80 * MiB, 82 * MiB); /* not the 48 MiB the puts wrote */
	assert_int_equal(p[63 * MiB], 1);
	assert_int_equal(p[64 * MiB], 0);
	mc_hostmem_unmap(m);

	/* unmap wakes a thread waiting for the writes */
	atomic_store(&test_front, 0);
	assert_int_equal(mc_hostmem_map(len, 0, &c, "test", &m), MC_OK);
	mc_hostmem_follow(m, test_front_fn, NULL);
	assert_true(wait_populated(m, 16 * MiB) >= 16 * MiB);
	t0 = mc_now_ms();
	mc_hostmem_unmap(m);
	assert_true(mc_now_ms() - t0 < 1000);
	release(&c);
}

/* Unmapped while populating: the thread stops, nothing is left behind. */
static void unmap_stops_the_thread(void **state)
{
	struct mc_hostmem_config c = config("background", 16 * MiB);
	struct mc_hostmem *m;
	uint64_t t0;
	(void)state;
	assert_int_equal(mc_hostmem_map(1024 * MiB, 0, &c, "test", &m), MC_OK);
	t0 = mc_now_ms();
	mc_hostmem_unmap(m); /* 64 s of populating at this rate: must not wait for it */
	assert_true(mc_now_ms() - t0 < 10000);
	release(&c);
}

static void hugepages_fall_back(void **state)
{
	struct mc_hostmem_config c = config("mount", 0);
	struct mc_hostmem *m;
	struct mc_hostmem_stats st;
	(void)state;
	c.use_hugepage = true;
	free(c.hugepage_size);
	c.hugepage_size = strdup("1GB"); /* no machine here has 1 GB pages reserved */
	assert_int_equal(mc_hostmem_map(8 * MiB, 0, &c, "test", &m), MC_OK);
	mc_hostmem_stats(m, &st);
	if (strcmp(st.pages, "hugetlb 1GB") != 0)
		assert_true(strcmp(st.pages, "thp") == 0 || strcmp(st.pages, "4k") == 0);
	assert_int_equal(st.populated, mc_hostmem_len(m));
	memset(mc_hostmem_addr(m), 0xab, 8 * MiB);
	mc_hostmem_unmap(m);
	release(&c);
}

static void settings_are_checked(void **state)
{
	struct mc_hostmem_config c = config("off", 0);
	struct mc_hostmem *m = (void *)1;
	const struct mc_config_entry *e = mc_config_entry_find(
		mc_hostmem_config_table, mc_hostmem_config_table_len, "store_prefault");
	(void)state;
	assert_non_null(e);
	assert_int_equal(mc_config_entry_set(e, &c, "eager"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_config_entry_set(e, &c, "mount"), MC_OK);
	e = mc_config_entry_find(mc_hostmem_config_table, mc_hostmem_config_table_len,
				 "store_hugepage_size");
	assert_int_equal(mc_config_entry_set(e, &c, "4MB"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_hostmem_map(0, 0, &c, "test", &m), MC_ERR_INVALID_PARAMS);
	assert_null(m);
	assert_int_equal(mc_hostmem_map(4096, 3000, &c, "test", &m), MC_ERR_INVALID_PARAMS);
	assert_true(mc_hostmem_headroom() > 0);
	release(&c);
}

/* The engine's buffers (mooncake/te.h): lazy until a block is faulted in. */
static atomic_bool churn_stop;

/* Map and unmap small regions without pause: the VMA list changes while
 * another thread reads /proc/self/maps. */
static void *churn_main(void *arg)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	(void)arg;
	while (!atomic_load(&churn_stop)) {
		char *m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (m == MAP_FAILED)
			continue;
		mprotect(m + pg, pg, PROT_READ); /* three VMAs, so lines move */
		munmap(m, 3 * pg);
	}
	return NULL;
}

static void mapped_check_holds_while_mappings_change(void **state)
{
	/* /proc/self/maps is read a page at a time, and a VMA list that
	 * changes between two reads can hide a line from the reader: a good
	 * range must still be found mapped (ASan's allocator made this fail
	 * once in unit_engine_zc) */
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	enum { NFILL = 400, ROUNDS = 3000 };
	char *fill[NFILL];
	char *good =
		mmap(NULL, 16 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pthread_t th;
	int bad = 0;

	(void)state;
	assert_true(good != MAP_FAILED);
	for (int i = 0; i < NFILL; i++) { /* a maps file of many pages */
		fill[i] = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		assert_true(fill[i] != MAP_FAILED);
		assert_int_equal(mprotect(fill[i], pg, PROT_READ), 0);
	}
	atomic_store(&churn_stop, false);
	assert_int_equal(pthread_create(&th, NULL, churn_main, NULL), 0);
	for (int r = 0; r < ROUNDS; r++)
		bad += mc_memreg_check_mapped((uint64_t)(uintptr_t)good, 16 * pg, false) != MC_OK;
	atomic_store(&churn_stop, true);
	pthread_join(th, NULL);
	assert_int_equal(bad, 0);
	/* and a real hole is still one */
	assert_int_equal(munmap(good + 4 * pg, pg), 0);
	assert_int_equal(mc_memreg_check_mapped((uint64_t)(uintptr_t)good, 16 * pg, false),
			 MC_ERR_INVALID_PARAMS);
	munmap(good, 16 * pg);
	for (int i = 0; i < NFILL; i++)
		munmap(fill[i], 2 * pg);
}

static void engine_host_buffers(void **state)
{
	uint8_t *p;
	uint64_t r;
	int x;
	(void)state;
	assert_int_equal(mc_te_host_alloc(0, (void **)&p), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_te_host_alloc(16 * MiB, (void **)&p), MC_OK);
	assert_int_equal((uintptr_t)p % (2 * MiB), 0);
	assert_int_equal(resident(p, 16 * MiB), 0);
	assert_int_equal(mc_te_host_prefault(p + 4 * MiB, 1 * MiB), MC_OK);
	r = resident(p, 16 * MiB);
	assert_in_range(r, 1 * MiB, 2 * MiB);
	setenv("MC_STORE_PREFAULT", "off", 1);
	assert_int_equal(mc_te_host_prefault(p + 8 * MiB, 4 * MiB), MC_OK);
	unsetenv("MC_STORE_PREFAULT");
	assert_int_equal(resident(p, 16 * MiB), r); /* off: nothing more */
	assert_int_equal(mc_te_host_prefault(&x, 4), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_te_host_free(&x), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_te_host_free(p), MC_OK);
	assert_int_equal(mc_te_host_free(p), MC_ERR_INVALID_PARAMS);
}

/* Resident pages of [p, p+len) (len a multiple of the page size). */
static size_t pages_in(const uint8_t *p, size_t len)
{
	unsigned char v[1024];
	size_t n = 0;

	assert_true(len / 4096 <= sizeof(v));
	assert_int_equal(mincore((void *)p, len, v), 0);
	for (size_t i = 0; i < len / 4096; i++)
		n += v[i] & 1;
	return n;
}

/*
 * mc_hostmem_populate_bufs, on buffers laid out as glibc's heap lays out
 * a batch (64 KiB + a 16-byte header apart): the pages under a run of
 * them are faulted in, bytes already there survive, a run under 256 KiB
 * or over 64 MiB and the pages between runs are left alone, NULL and
 * empty buffers are skipped, and a run the kernel refuses (an unmapped
 * hole) costs only itself.
 */
static void populate_bufs_faults_in_runs(void **state)
{
	size_t len = 4 * MiB, chunk = 64 * 1024 + 16;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *bufs[40];
	size_t lens[40], nb = 0;
	uint8_t want[100];
	(void)state;
	assert_true(p != MAP_FAILED);
	if (madvise(p + len - 4096, 4096, 23 /* MADV_POPULATE_WRITE */) != 0) {
		munmap(p, len);
		skip(); /* before Linux 5.14 it is a no-op by design */
	}
	(void)madvise(p, len, MADV_NOHUGEPAGE); /* page-exact residency */
	/* [1 MiB, 1 MiB + 32 chunks): one run, with bytes already in it */
	mc_test_fill(want, sizeof(want), 7);
	memcpy(p + 1 * MiB + 16 + 5 * chunk, want, sizeof(want));
	for (size_t i = 0; i < 32; i++) {
		bufs[nb] = p + 1 * MiB + 16 + i * chunk;
		lens[nb++] = 64 * 1024;
		if (i == 3) { /* a miss and an empty one between them */
			bufs[nb] = NULL;
			lens[nb++] = 64 * 1024;
			bufs[nb] = p + 3 * MiB;
			lens[nb++] = 0;
		}
	}
	/* 128 KiB at 3.5 MiB: too small a run */
	bufs[nb] = p + 3 * MiB + MiB / 2;
	lens[nb++] = 128 * 1024;
	assert_int_equal(pages_in(p, len), 2); /* the probe's page, the bytes' */
	mc_hostmem_populate_bufs(bufs, lens, nb);
	/* 32 chunks from offset 16: pages [256, 256 + 513) */
	assert_int_equal(pages_in(p + 1 * MiB, 513 * 4096), 513);
	assert_int_equal(pages_in(p, 1 * MiB), 0);
	assert_int_equal(pages_in(p + 1 * MiB + 513 * 4096, 3 * MiB - 513 * 4096 - 4096), 0);
	assert_memory_equal(p + 1 * MiB + 16 + 5 * chunk, want, sizeof(want));
	assert_int_equal(p[1 * MiB + 16 + 6 * chunk], 0);

	/* an unmapped hole: refused, and the run after it still populated */
	assert_int_equal(munmap(p, 1 * MiB), 0);
	bufs[0] = p;
	lens[0] = 512 * 1024;
	bufs[1] = p + 3 * MiB;
	lens[1] = 512 * 1024;
	mc_hostmem_populate_bufs(bufs, lens, 2);
	assert_int_equal(pages_in(p + 3 * MiB, 512 * 1024), 128);
	munmap(p + 1 * MiB, len - 1 * MiB);

	/* a run over 64 MiB is left to the receive */
	p = mmap(NULL, 66 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	(void)madvise(p, 66 * MiB, MADV_NOHUGEPAGE);
	bufs[0] = p;
	lens[0] = 65 * MiB;
	mc_hostmem_populate_bufs(bufs, lens, 1);
	assert_int_equal(pages_in(p, 4 * MiB), 0);
	assert_int_equal(pages_in(p + 62 * MiB, 3 * MiB), 0);
	munmap(p, 66 * MiB);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(off_costs_nothing),
		cmocka_unit_test(mount_populates_all_before_returning),
		cmocka_unit_test(background_keeps_concurrent_writes),
		cmocka_unit_test(background_jumps_past_the_puts),
		cmocka_unit_test(background_follows_the_front),
		cmocka_unit_test(unmap_stops_the_thread),
		cmocka_unit_test(hugepages_fall_back),
		cmocka_unit_test(settings_are_checked),
		cmocka_unit_test(engine_host_buffers),
		cmocka_unit_test(mapped_check_holds_while_mappings_change),
		cmocka_unit_test(populate_bufs_faults_in_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

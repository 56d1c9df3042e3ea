/*
 * tests/support/slow_mem.h - memory whose pages come in slowly.
 *
 * A userfaultfd handler thread supplies each page (zeroed) on first touch
 * after a pause, so whoever first touches it (a target's recv() writing
 * there, a send() reading it) is slower than any peer, deterministically.
 * The tests that need it skip when userfaultfd is not permitted
 * (vm.unprivileged_userfaultfd).
 */
#ifndef MC_TEST_SLOW_MEM_H
#define MC_TEST_SLOW_MEM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct mc_test_slow_mem {
	char *base;
	size_t len;
	int uffd;
	unsigned delay_us;  /* per page; 0: 20 */
	atomic_uint served; /* pages supplied so far */
	atomic_bool stop;
	pthread_t th;
};

/* Map len bytes served delay_us per page; false (nothing to close) when
 * userfaultfd or the mapping is not available here. */
bool mc_test_slow_mem_open(struct mc_test_slow_mem *m, size_t len, unsigned delay_us);
/* Pages supplied so far. */
unsigned mc_test_slow_mem_served(struct mc_test_slow_mem *m);
/* Stop the handler and unmap. */
void mc_test_slow_mem_close(struct mc_test_slow_mem *m);

#endif

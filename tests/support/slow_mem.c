/* tests/support/slow_mem.c - see slow_mem.h. */
#include "slow_mem.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *serve(void *arg)
{
	struct mc_test_slow_mem *m = arg;
	while (!atomic_load(&m->stop)) {
		struct pollfd pfd = {.fd = m->uffd, .events = POLLIN};
		struct uffd_msg msg;
		if (poll(&pfd, 1, 50) <= 0 || read(m->uffd, &msg, sizeof(msg)) != sizeof(msg) ||
		    msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		usleep(m->delay_us ? m->delay_us : 20);
		struct uffdio_zeropage z = {
			.range = {.start = msg.arg.pagefault.address & ~(uint64_t)4095,
				  .len = 4096}};
		ioctl(m->uffd, UFFDIO_ZEROPAGE, &z);
		atomic_fetch_add(&m->served, 1);
	}
	return NULL;
}

bool mc_test_slow_mem_open(struct mc_test_slow_mem *m, size_t len, unsigned delay_us)
{
	struct uffdio_api api = {.api = UFFD_API};
	struct uffdio_register reg = {.mode = UFFDIO_REGISTER_MODE_MISSING};

	memset(m, 0, sizeof(*m));
	m->delay_us = delay_us;
	m->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (m->uffd < 0)
		return false;
	if (ioctl(m->uffd, UFFDIO_API, &api) < 0)
		goto err_fd;
	m->len = len;
	m->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m->base == MAP_FAILED)
		goto err_fd;
	reg.range.start = (uint64_t)(uintptr_t)m->base;
	reg.range.len = len;
	if (ioctl(m->uffd, UFFDIO_REGISTER, &reg) < 0 ||
	    pthread_create(&m->th, NULL, serve, m) != 0)
		goto err_map;
	return true;
err_map:
	munmap(m->base, len);
err_fd:
	close(m->uffd);
	return false;
}

unsigned mc_test_slow_mem_served(struct mc_test_slow_mem *m)
{
	return atomic_load(&m->served);
}

void mc_test_slow_mem_close(struct mc_test_slow_mem *m)
{
	atomic_store(&m->stop, true);
	pthread_join(m->th, NULL);
	close(m->uffd);
	munmap(m->base, m->len);
}

/*
 * tests/support/devmem_emu.c - an emulated device-memory backend, for tests
 * only: it is linked into test programs, never into the library.
 *
 * It lets the whole staging pipeline (te/stage.c on the initiator, the TCP
 * server and the same-host target on the other side) run, under ASan and
 * TSan too, on machines without a GPU, with the one property of device
 * memory that matters here enforced: the host cannot touch it.
 *
 * "Device memory" is a memfd mapped twice: at the address handed out, with
 * PROT_NONE, so any direct access by the library faults (memcpy: SIGSEGV;
 * recv, send, process_vm_*: EFAULT), and at a private alias, readable and
 * writable, that only this backend's copies use.  Asynchronous copies run
 * on one copy thread, in submission order, in small pieces with a yield
 * after each piece, so that a missing wait for a copy shows up as wrong
 * bytes instead of passing by luck.  There are two devices, 0 and 1.
 */
#include "devmem_emu.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mooncake/status.h"

#define EMU_DEVICES 2
#define MAX_ALLOCS  256
#define PIECE	    (16u << 10)

struct emu_alloc {
	char *dev;   /* PROT_NONE: what the library sees */
	char *alias; /* read-write: what the copies use */
	size_t len;
	int index;
	int fd;
};

struct job {
	struct job *next;
	char *dst;
	const char *src;
	size_t len;
};

struct mc_devstream {
	int dev;
};

struct mc_devevent {
	int dev;
	uint64_t seq; /* the copy it marks; 0: none yet */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER; /* jobs queued or completed */
static struct emu_alloc allocs[MAX_ALLOCS];
static struct job *head, *tail;
static uint64_t submitted, completed;
static bool copier_started;
static atomic_uint_fast64_t n_async;

/* The alias of [p, p+len) when it is emulated device memory, p itself when
 * it is host memory, NULL when it straddles an allocation's end.  Under
 * lock. */
static char *translate_locked(const void *p, size_t len, int *dev_out)
{
	const char *c = p;
	for (int i = 0; i < MAX_ALLOCS; i++) {
		struct emu_alloc *a = &allocs[i];
		if (!a->dev || c < a->dev || c >= a->dev + a->len)
			continue;
		if (dev_out)
			*dev_out = a->index;
		if (len > a->len - (size_t)(c - a->dev))
			return NULL;
		return a->alias + (c - a->dev);
	}
	if (dev_out)
		*dev_out = -1;
	return (char *)(uintptr_t)c;
}

static void *copier_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		struct job *j;
		while (!head)
			pthread_cond_wait(&cond, &lock);
		j = head;
		head = j->next;
		if (!head)
			tail = NULL;
		pthread_mutex_unlock(&lock);
		for (size_t off = 0; off < j->len; off += PIECE) {
			memcpy(j->dst + off, j->src + off,
			       j->len - off < PIECE ? j->len - off : PIECE);
			sched_yield();
		}
		free(j);
		pthread_mutex_lock(&lock);
		completed++;
		pthread_cond_broadcast(&cond);
	}
	return NULL;
}

/* A device index or -1, not a status (see the ops table). */
static int emu_ptr_device(const void *ptr)
{
	int dev;
	pthread_mutex_lock(&lock);
	translate_locked(ptr, 0, &dev);
	pthread_mutex_unlock(&lock);
	return dev;
}

static mc_status emu_host_alloc(size_t len, void **out)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len ? len : 1) != 0)
		return MC_ERR_NOMEM;
	*out = p;
	return MC_OK;
}

static void emu_host_free(void *p)
{
	free(p);
}

static mc_status emu_dev_alloc(int dev, size_t len, void **out)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), mlen = (len + pg - 1) / pg * pg;
	struct emu_alloc a = {.len = len, .index = dev, .fd = -1};
	mc_status rc = MC_ERR_NOMEM;

	if (dev < 0 || dev >= EMU_DEVICES || !len)
		return MC_ERR_INVALID_PARAMS;
	a.fd = memfd_create("mc-emu-device", MFD_CLOEXEC);
	if (a.fd < 0 || ftruncate(a.fd, (off_t)mlen) < 0)
		goto err;
	a.dev = mmap(NULL, mlen, PROT_NONE, MAP_SHARED, a.fd, 0);
	a.alias = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
	if (a.dev == MAP_FAILED || a.alias == MAP_FAILED)
		goto err;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (!allocs[i].dev) {
			allocs[i] = a;
			rc = MC_OK;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	if (rc != MC_OK)
		goto err;
	*out = a.dev;
	return MC_OK;
err:
	if (a.dev && a.dev != MAP_FAILED)
		munmap(a.dev, mlen);
	if (a.alias && a.alias != MAP_FAILED)
		munmap(a.alias, mlen);
	if (a.fd >= 0)
		close(a.fd);
	return rc;
}

static void emu_dev_free(void *p)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct emu_alloc a = {0};

	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (allocs[i].dev == p) {
			a = allocs[i];
			memset(&allocs[i], 0, sizeof(allocs[i]));
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	if (!a.dev)
		return;
	munmap(a.dev, (a.len + pg - 1) / pg * pg);
	munmap(a.alias, (a.len + pg - 1) / pg * pg);
	close(a.fd);
}

static mc_status emu_stream_new(int dev, struct mc_devstream **out)
{
	struct mc_devstream *s;
	if (dev < 0 || dev >= EMU_DEVICES)
		return MC_ERR_DEVICE_NOT_FOUND;
	s = calloc(1, sizeof(*s));
	if (!s)
		return MC_ERR_NOMEM;
	s->dev = dev;
	*out = s;
	return MC_OK;
}

static void emu_stream_free(struct mc_devstream *s)
{
	free(s);
}

static mc_status emu_event_new(struct mc_devstream *s, struct mc_devevent **out)
{
	struct mc_devevent *e = calloc(1, sizeof(*e));
	if (!e)
		return MC_ERR_NOMEM;
	e->dev = s->dev;
	*out = e;
	return MC_OK;
}

static void emu_event_free(struct mc_devevent *e)
{
	free(e);
}

static mc_status emu_copy_async(struct mc_devstream *s, void *dst, const void *src, size_t len,
				struct mc_devevent *ev)
{
	struct job *j = calloc(1, sizeof(*j));
	int ddev, sdev;

	if (!j)
		return MC_ERR_NOMEM;
	if (ev->dev != s->dev) {
		free(j);
		return MC_ERR_INVALID_PARAMS; /* CUDA refuses this too */
	}
	pthread_mutex_lock(&lock);
	j->dst = translate_locked(dst, len, &ddev);
	j->src = translate_locked(src, len, &sdev);
	j->len = len;
	if (!j->dst || !j->src || (ddev < 0 && sdev < 0)) {
		pthread_mutex_unlock(&lock);
		free(j);
		fprintf(stderr, "devmem_emu: bad copy %p <- %p (%zu bytes)\n", dst, src, len);
		return MC_ERR_INVALID_PARAMS;
	}
	if (!copier_started) {
		pthread_t t;
		if (pthread_create(&t, NULL, copier_main, NULL) != 0) {
			pthread_mutex_unlock(&lock);
			free(j);
			return MC_ERR_INTERNAL;
		}
		pthread_detach(t);
		copier_started = true;
	}
	if (tail)
		tail->next = j;
	else
		head = j;
	tail = j;
	ev->seq = ++submitted;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	atomic_fetch_add(&n_async, 1);
	return MC_OK;
}

static mc_status emu_event_query(struct mc_devevent *ev)
{
	mc_status rc;
	pthread_mutex_lock(&lock);
	rc = completed >= ev->seq ? MC_OK : MC_INPROGRESS;
	pthread_mutex_unlock(&lock);
	return rc;
}

static mc_status emu_event_wait(struct mc_devevent *ev)
{
	pthread_mutex_lock(&lock);
	while (completed < ev->seq)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	return MC_OK;
}

/* Under the lock, like the copier's completions: the ordering with
 * asynchronous copies then runs through one mutex that TSan sees. */
static mc_status emu_copy(void *dst, const void *src, size_t len)
{
	char *d, *s;
	mc_status rc = MC_ERR_INVALID_PARAMS;
	pthread_mutex_lock(&lock);
	d = translate_locked(dst, len, NULL);
	s = translate_locked(src, len, NULL);
	if (d && s) {
		memmove(d, s, len);
		rc = MC_OK;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

const struct mc_devmem_ops mc_devmem_emu_ops = {
	.name = "emulated",
	.ptr_device = emu_ptr_device,
	.host_alloc = emu_host_alloc,
	.host_free = emu_host_free,
	.dev_alloc = emu_dev_alloc,
	.dev_free = emu_dev_free,
	.stream_new = emu_stream_new,
	.stream_free = emu_stream_free,
	.event_new = emu_event_new,
	.event_free = emu_event_free,
	.copy_async = emu_copy_async,
	.event_query = emu_event_query,
	.event_wait = emu_event_wait,
	.copy = emu_copy,
};

uint64_t mc_devmem_emu_async_copies(void)
{
	return atomic_load(&n_async);
}

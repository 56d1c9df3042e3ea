/*
 * store/disk_io.c - batches of whole file reads and writes; see disk_io.h.
 *
 * The io_uring path keeps a queue of the operations that still have bytes
 * to move: it fills the submission ring from it, waits for at least one
 * completion, and puts an operation back on the queue when its transfer
 * came back short (or EINTR/EAGAIN), so every operation runs to its end
 * or its first error.  An operation is on the queue or in flight, never
 * both, so the queue needs n slots at most.
 */
#define MC_LOG_MODULE "disk_io"
#include "store/disk_io.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"

#define DEFAULT_DEPTH 64u
#define DEPTH_MAX     4096u
#define CHUNK_MAX     (1u << 30) /* io_uring lengths are 32-bit */
#define STALL_WARN_S  10

struct mc_disk_io {
	pthread_mutex_t lock;
	bool uring, fixed, direct;
	unsigned depth;
	struct mc_disk_io_stats st; /* under lock */
	struct io_uring ring;
	const uint8_t *fixed_base;
	size_t fixed_len;
};

mc_status mc_disk_io_new(const struct mc_disk_io_params *p, struct mc_disk_io **out)
{
	struct mc_disk_io *io;
	int rc;

	*out = NULL;
	if (p->depth > DEPTH_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk io: depth %u over %u", p->depth,
				    DEPTH_MAX);
	if (p->fixed_len && !p->fixed)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "disk io: staging length without memory");
	io = mc_calloc(1, sizeof(*io));
	if (!io)
		return mc_set_error(MC_ERR_NOMEM, "disk io: no memory");
	pthread_mutex_init(&io->lock, NULL);
	io->depth = p->depth ? p->depth : DEFAULT_DEPTH;
	io->direct = p->direct;
	if (p->use_uring) {
		rc = io_uring_queue_init(io->depth, &io->ring, 0);
		if (rc < 0)
			mc_warn("io_uring refused (%s); disk I/O uses pread/pwrite", strerror(-rc));
		else
			io->uring = true;
	}
	if (io->uring && p->fixed && p->fixed_len) {
		struct iovec iov = {p->fixed, p->fixed_len};
		rc = io_uring_register_buffers(&io->ring, &iov, 1);
		if (rc < 0) {
			mc_warn("staging buffer of %zu bytes not registered with io_uring (%s); "
				"its I/O pins pages per request",
				p->fixed_len, strerror(-rc));
		} else {
			io->fixed = true;
			io->fixed_base = p->fixed;
			io->fixed_len = p->fixed_len;
		}
	}
	*out = io;
	return MC_OK;
}

void mc_disk_io_free(struct mc_disk_io *io)
{
	if (!io)
		return;
	if (io->uring)
		io_uring_queue_exit(&io->ring);
	pthread_mutex_destroy(&io->lock);
	mc_free(io);
}

bool mc_disk_io_uring(const struct mc_disk_io *io)
{
	return io && io->uring;
}

mc_status mc_disk_io_register_fixed(struct mc_disk_io *io, void *buf, size_t len)
{
	struct iovec iov = {buf, len};
	mc_status st = MC_OK;
	int rc;

	if (!io || !buf || !len)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk io: no buffer to register");
	pthread_mutex_lock(&io->lock);
	if (!io->uring) {
		st = mc_set_error(MC_ERR_NOT_SUPPORTED,
				  "disk io: no io_uring, no fixed buffer to register");
		goto out;
	}
	if (io->fixed) {
		io_uring_unregister_buffers(&io->ring);
		io->fixed = false;
	}
	rc = io_uring_register_buffers(&io->ring, &iov, 1);
	if (rc < 0) {
		st = mc_set_error(MC_ERR_NOMEM,
				  "staging buffer of %zu bytes not registered with io_uring (%s)",
				  len, strerror(-rc));
		goto out;
	}
	io->fixed = true;
	io->fixed_base = buf;
	io->fixed_len = len;
out:
	pthread_mutex_unlock(&io->lock);
	return st;
}

bool mc_disk_io_fixed(const struct mc_disk_io *io)
{
	/* under the lock: mc_disk_io_register_fixed may run on another thread */
	pthread_mutex_t *lk = io ? (pthread_mutex_t *)&io->lock : NULL;
	bool fixed;
	if (!io)
		return false;
	pthread_mutex_lock(lk);
	fixed = io->fixed;
	pthread_mutex_unlock(lk);
	return fixed;
}

bool mc_disk_io_direct(const struct mc_disk_io *io)
{
	return io && io->direct;
}

void mc_disk_io_stats(struct mc_disk_io *io, struct mc_disk_io_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!io)
		return;
	pthread_mutex_lock(&io->lock);
	*out = io->st;
	pthread_mutex_unlock(&io->lock);
}

static bool op_aligned(const struct mc_disk_op *op)
{
	return ((uintptr_t)op->buf | op->len | op->off) % MC_DISK_IO_ALIGN == 0;
}

/* ---- the fallback ------------------------------------------------------------------------ */

/* One whole operation with pread/pwrite: 0, or the errno it failed with
 * (EIO for a read past the end or a write that made no progress). */
static int run_sync(struct mc_disk_op *op)
{
	size_t done = 0;
	while (done < op->len) {
		uint8_t *p = (uint8_t *)op->buf + done;
		size_t n = op->len - done;
		off_t off = (off_t)(op->off + done);
		ssize_t r = op->write ? pwrite(op->fd, p, n, off) : pread(op->fd, p, n, off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno;
		if (r == 0)
			return EIO;
		done += (size_t)r;
	}
	return 0;
}

/* ---- io_uring ---------------------------------------------------------------------------- */

struct pending {
	size_t *done; /* per op */
	int *err;     /* per op: 0, or the errno it failed with */
	size_t *queue;
	size_t head, count, n;
};

static void queue_push(struct pending *q, size_t i)
{
	q->queue[(q->head + q->count) % q->n] = i;
	q->count++;
}

static size_t queue_pop(struct pending *q)
{
	size_t i = q->queue[q->head];
	q->head = (q->head + 1) % q->n;
	q->count--;
	return i;
}

static bool in_fixed(const struct mc_disk_io *io, const void *p, size_t len)
{
	const uint8_t *b = p;
	return io->fixed && b >= io->fixed_base && len <= io->fixed_len &&
	       (size_t)(b - io->fixed_base) <= io->fixed_len - len;
}

static void prep(struct mc_disk_io *io, struct io_uring_sqe *sqe, struct mc_disk_op *op,
		 size_t done, size_t i)
{
	uint8_t *p = (uint8_t *)op->buf + done;
	size_t left = op->len - done;
	unsigned n = left > CHUNK_MAX ? CHUNK_MAX : (unsigned)left;
	uint64_t off = op->off + done;

	if (in_fixed(io, op->buf, op->len)) {
		if (op->write)
			io_uring_prep_write_fixed(sqe, op->fd, p, n, off, 0);
		else
			io_uring_prep_read_fixed(sqe, op->fd, p, n, off, 0);
	} else if (op->write) {
		io_uring_prep_write(sqe, op->fd, p, n, off);
	} else {
		io_uring_prep_read(sqe, op->fd, p, n, off);
	}
	io_uring_sqe_set_data64(sqe, i);
}

/* Takes one completion: counts its bytes, queues the rest or ends the op. */
static void complete(struct pending *q, struct mc_disk_op *ops, struct io_uring_cqe *cqe)
{
	size_t i = (size_t)io_uring_cqe_get_data64(cqe);
	int res = cqe->res;

	if (res == -EINTR || res == -EAGAIN) {
		queue_push(q, i);
	} else if (res < 0) {
		q->err[i] = -res;
	} else if (res == 0) {
		q->err[i] = EIO; /* end of file, or a write that moved nothing */
	} else {
		q->done[i] += (size_t)res;
		if (q->done[i] < ops[i].len)
			queue_push(q, i);
	}
}

static mc_status run_uring(struct mc_disk_io *io, struct mc_disk_op *ops, size_t n, int *err)
{
	struct pending q = {.err = err, .n = n};
	unsigned inflight = 0;

	q.done = mc_calloc(n, sizeof(*q.done));
	q.queue = mc_calloc(n, sizeof(*q.queue));
	if (!q.done || !q.queue) {
		mc_free(q.done);
		mc_free(q.queue);
		return mc_set_error(MC_ERR_NOMEM, "disk io: no memory for a batch of %zu", n);
	}
	for (size_t i = 0; i < n; i++)
		if (ops[i].len)
			queue_push(&q, i);
	while (q.count || inflight) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		int rc;

		while (q.count && inflight < io->depth) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
			size_t i;
			if (!sqe)
				break;
			i = queue_pop(&q);
			prep(io, sqe, &ops[i], q.done[i], i);
			inflight++;
		}
		{
			/* never give up on operations in flight (the kernel still owns
			 * their buffers), but say so when they stall */
			struct __kernel_timespec ts = {.tv_sec = STALL_WARN_S};
			struct io_uring_cqe *first;
			rc = io_uring_submit_and_wait_timeout(&io->ring, &first, 1, &ts, NULL);
			if (rc == -ETIME) {
				mc_warn("disk io: %u operations still in flight after %d s",
					inflight, STALL_WARN_S);
				continue;
			}
		}
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			/* the ring itself failed: nothing more completes through it */
			mc_free(q.done);
			mc_free(q.queue);
			return mc_set_error(MC_ERR_IO, "disk io: io_uring: %s", strerror(-rc));
		}
		io_uring_for_each_cqe(&io->ring, head, cqe)
		{
			complete(&q, ops, cqe);
			seen++;
		}
		io_uring_cq_advance(&io->ring, seen);
		inflight -= seen;
	}
	mc_free(q.done);
	mc_free(q.queue);
	return MC_OK;
}

mc_status mc_disk_io_run(struct mc_disk_io *io, struct mc_disk_op *ops, size_t n)
{
	mc_status first = MC_OK, rc = MC_OK;
	int *err;

	if (n == 0)
		return MC_OK;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].direct && !op_aligned(&ops[i])) {
			for (size_t j = 0; j < n; j++)
				ops[j].status = MC_ERR_INVALID_PARAMS;
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "disk io: O_DIRECT %s of %zu bytes at %llu from %p is "
					    "not 4 KiB-aligned",
					    ops[i].write ? "write" : "read", ops[i].len,
					    (unsigned long long)ops[i].off, ops[i].buf);
		}
	}
	err = mc_calloc(n, sizeof(*err));
	if (!err)
		return mc_set_error(MC_ERR_NOMEM, "disk io: no memory for a batch of %zu", n);
	if (io) {
		pthread_mutex_lock(&io->lock);
		for (size_t i = 0; i < n; i++) {
			io->st.ops++;
			io->st.bytes += ops[i].len;
			if (ops[i].direct) {
				io->st.direct_ops++;
				io->st.direct_bytes += ops[i].len;
			}
			if (io->uring && in_fixed(io, ops[i].buf, ops[i].len)) {
				io->st.fixed_ops++;
				io->st.fixed_bytes += ops[i].len;
			}
		}
	}
	if (io && io->uring) {
		rc = run_uring(io, ops, n, err);
	} else {
		for (size_t i = 0; i < n; i++)
			err[i] = run_sync(&ops[i]);
	}
	if (io)
		pthread_mutex_unlock(&io->lock);
	for (size_t i = 0; i < n; i++) {
		struct mc_disk_op *op = &ops[i];
		if (rc != MC_OK) {
			op->status = rc; /* the ring failed: no op is known to be done */
			continue;
		}
		if (err[i] == 0) {
			op->status = MC_OK;
			continue;
		}
		op->status = op->write ? MC_ERR_FILE_WRITE_FAIL : MC_ERR_FILE_READ_FAIL;
		if (first == MC_OK)
			first = mc_set_error(
				op->status, "disk %s of %zu bytes at %llu: %s",
				op->write ? "write" : "read", op->len, (unsigned long long)op->off,
				err[i] == EIO && !op->write ? "past the end of the file"
							    : strerror(err[i]));
	}
	mc_free(err);
	return rc != MC_OK ? rc : first;
}

bool mc_disk_dir_direct(int dirfd)
{
	char name[64];
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		return true;
	}
	if (errno == EINVAL) {
		/* O_TMPFILE works and O_DIRECT is what was refused */
		fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0) {
			close(fd);
			return false;
		}
	}
	snprintf(name, sizeof(name), ".mc-direct-probe-%d", (int)getpid());
	fd = openat(dirfd, name, O_CREAT | O_EXCL | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		unlinkat(dirfd, name, 0);
		return true;
	}
	unlinkat(dirfd, name, 0); /* created before O_DIRECT was refused */
	return false;
}

/*
 * store/disk_io.h - the SSD tier's file I/O: batches of whole reads and
 * writes, through io_uring where the kernel allows it and through
 * pread/pwrite where it does not.
 *
 * A batch is submitted at once and waited for as a whole, so the reads of
 * many objects (or the records of one bucket) are in flight together.
 * Each operation moves all its bytes or fails: a short transfer is
 * continued from where it stopped, a read that reaches the end of the
 * file fails (MC_ERR_FILE_READ_FAIL), a write the file system refuses
 * fails (MC_ERR_FILE_WRITE_FAIL) with errno's text in mc_last_error().
 *
 * io_uring is tried when asked for (the offload setting
 * MOONCAKE_OFFLOAD_USE_URING); when the kernel or a sandbox refuses it
 * (ENOSYS, EPERM, a seccomp filter, io_uring_disabled) the handle falls
 * back to pread/pwrite with one logged line, never an error.  An optional
 * staging buffer is registered with the ring as a fixed buffer, and
 * operations whose memory lies inside it use the fixed-buffer opcodes
 * (no page pinning per request).  Whether a file is opened with O_DIRECT
 * is the caller's business: the handle carries the caller's choice
 * (params.direct, set where mc_disk_dir_direct says the directory takes
 * it) for store/bucket.c to consult, and an operation marked direct (its
 * descriptor is O_DIRECT) must have its buffer, length and offset
 * 4 KiB-aligned: one that is not is refused (MC_ERR_INVALID_PARAMS)
 * before anything is submitted.  The handle counts the direct operations
 * and their bytes (mc_disk_io_stats), so a test can see the path taken.
 *
 * A handle is used by one thread at a time (it holds a lock over each
 * batch); make one per thread for parallel batches.
 */
#ifndef MC_STORE_DISK_IO_H
#define MC_STORE_DISK_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

struct mc_disk_io;

struct mc_disk_io_params {
	bool use_uring; /* false: pread/pwrite only */
	unsigned depth; /* ring entries, 0 for 64 */
	void *fixed;	/* staging buffer to register, or NULL */
	size_t fixed_len;
	bool direct; /* open data files with O_DIRECT (mc_disk_io_direct) */
};

/* MC_OK (with io_uring or without), MC_ERR_NOMEM, MC_ERR_INVALID_PARAMS. */
mc_status mc_disk_io_new(const struct mc_disk_io_params *p, struct mc_disk_io **out);
void mc_disk_io_free(struct mc_disk_io *io);
/* Whether batches go through io_uring (false after a fallback). */
bool mc_disk_io_uring(const struct mc_disk_io *io);
/* Whether the staging buffer is registered as a fixed buffer. */
bool mc_disk_io_fixed(const struct mc_disk_io *io);
/*
 * Registers buf (len bytes) as the handle's fixed buffer after it was made
 * (replacing one registered before), under the handle's lock, so a handle
 * in use by other threads may be given its staging buffer late.  Pins the
 * buffer's pages.  MC_ERR_NOT_SUPPORTED without io_uring, MC_ERR_NOMEM
 * when the kernel refuses (RLIMIT_MEMLOCK among others; the handle keeps
 * working without), MC_ERR_INVALID_PARAMS.
 */
mc_status mc_disk_io_register_fixed(struct mc_disk_io *io, void *buf, size_t len);
/* Whether the handle's data files are to be opened O_DIRECT (false for NULL). */
bool mc_disk_io_direct(const struct mc_disk_io *io);

#define MC_DISK_IO_ALIGN 4096u

struct mc_disk_io_stats {
	uint64_t ops, bytes;		   /* every operation run */
	uint64_t direct_ops, direct_bytes; /* those marked direct */
	uint64_t fixed_ops, fixed_bytes;   /* those run with READ_FIXED/WRITE_FIXED */
};

void mc_disk_io_stats(struct mc_disk_io *io, struct mc_disk_io_stats *out);

struct mc_disk_op {
	int fd;
	bool write;
	void *buf;
	size_t len;
	uint64_t off;
	mc_status status; /* out */
	bool direct;	  /* fd is O_DIRECT: buf, len and off 4 KiB-aligned */
};

/* Runs ops (all of them, even after one fails) and waits for every one.
 * Returns the first failure in ops' order, or MC_OK; a direct op that is
 * not aligned fails the whole batch with MC_ERR_INVALID_PARAMS, nothing
 * run. */
mc_status mc_disk_io_run(struct mc_disk_io *io, struct mc_disk_op *ops, size_t n);

/*
 * Whether files in the directory dirfd take O_DIRECT (tmpfs and some
 * overlay file systems do not), found by opening an unnamed temporary
 * file there with it (or, where O_TMPFILE is not supported, a named
 * probe file that is removed at once).
 */
bool mc_disk_dir_direct(int dirfd);

#endif
